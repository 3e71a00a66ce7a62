//! `holdline lab window`: seed 004's dual-proxy trapezoid (issue 15 item 7). One UAC calls
//! through an upstream `holdline serve` (core 0) into a capacity-limited downstream server
//! (core 1), which forwards to one UAS (core 0); every hop UDP on 127.0.0.1, every server
//! record-routing (the downstream handles six messages per call). Offered load from 0.14× to
//! 2.43× of the downstream's capacity (the paper's 100–1,700 calls/s against a nominal 700)
//! and on to 10×; mechanisms, both from `holdline lab feedback`'s table
//! ([`crate::feedback`]):
//!
//! | mechanism | upstream | downstream |
//! | --- | --- | --- |
//! | `none` | `--overload none --feedback none`: forwards everything | no control (`--overload none`; Kamailio as configured in `lab/kamailio`) |
//! | `window` | `--feedback window`: seed 004's window of outstanding INVITEs per next hop, without feedback (`holdline-overload`'s `DelayWindow`); what does not fit gets `503` | the same server, knowing nothing of it |
//!
//! The downstream's capacity is limited three ways (`--modes`), each its own curve:
//!
//! - `emulated`: `holdline serve --emulate-cost-us C` (`--cost-us`, 1 ms per message by
//!   default: nominal 167 calls/s);
//! - `quota`: `holdline serve` born in a cgroup v1 CPU group with `--cpu-quota PCT` of a core,
//!   no emulated work;
//! - `kamailio`: Kamailio (`lab/kamailio/run.sh`, one UDP worker) in a CPU group with
//!   `--kamailio-quota PCT`: a real foreign server without overload control.
//!
//! Per mode: under a quota the downstream's CPU per call is measured first without quota
//! (the nominal capacity is the quota over it); then, unless `--quick` or `--capacity`, a ramp
//! of `none` points from 0.6× the nominal capacity, ×1.3 per step, up to the first saturated
//! step finds the capacity the load factors refer to (the highest throughput of the ramp);
//! then every load factor × mechanism, with fresh processes per point.
//!
//! Measured per point (seed 004's Table 1–2 rows and more): throughput (calls whose ACK
//! reached the UAS while the load was offered, per second), goodput (200 OK within 10 s,
//! steady part of the load window), average, p50 and p99 call setup delay (first INVITE to
//! 200 OK at the UAC), INVITE and BYE retransmissions by the UAC per second, the upstream's
//! `window_full` rejections, CPU (share of a core, and of the downstream's budget) and peak RSS
//! (and PSS) of both proxies from `/proc`. Output in `--out DIR`: `results.json` (with the
//! paper's tables), `points.csv`, `paper.csv`, per mode the plots `throughput-MODE`,
//! `goodput-MODE`, `delay-MODE`, `retrans-MODE`, `cpu-MODE` and `memory-MODE` (SVG and PNG,
//! the paper's curves drawn in the same units), and every process's report and log under
//! `runs/`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cgroup::{CpuGroup, feasible_quota};
use crate::error::{LabError, Result};
use crate::feedback::{Mechanism, server_args};
use crate::generator::{GENERATOR_CORE, count, num, read_json, terminate};
use crate::plot;
use crate::procfs;
use crate::runner::{
    Proc, SweepArgs, UacLoad, check_tools, holdline_exe, lab_main, machine, metric_where, scrape,
    spawn, spawn_in, start_uacs, steady, window_sum,
};
use crate::server::{self, Kind, SERVER_CORE, Transport, free_port, tail, wait_bound};

/// Messages through the downstream per call: INVITE, 180, 200, ACK, BYE, 200.
const MESSAGES_PER_CALL: f64 = 6.0;
/// A call counts as goodput when its 200 OK came within this (seed 003's window).
const GOODPUT_WINDOW_S: f64 = 10.0;
/// The mechanisms, in plotting order.
const MECHANISMS: [&str; 2] = ["none", "window"];
/// The capacity-limiting modes, in order.
const MODES: [&str; 3] = ["emulated", "quota", "kamailio"];
/// Seed 004's nominal capacity of the downstream (l. 73), calls/s.
pub const PAPER_CAPACITY_CPS: f64 = 700.0;
/// Seed 004's offered loads (Tables 1 and 2), calls/s.
pub const PAPER_CPS: [f64; 9] = [
    100.0, 300.0, 500.0, 700.0, 900.0, 1100.0, 1300.0, 1500.0, 1700.0,
];
/// Offered rate, calls/s, at which the downstream's CPU per call is measured without quota.
const CALIBRATION_CPS: f64 = 300.0;
/// The capacity ramp: at most this many steps, the first at this factor of the nominal
/// capacity, each this factor above the last, stopping at the first saturated step (a server
/// under a quota batches more when loaded, so its unloaded CPU per call underestimates it).
const RAMP_STEPS: i32 = 10;
const RAMP_FIRST: f64 = 0.6;
const RAMP_FACTOR: f64 = 1.3;
/// How often the proxies' memory is sampled during a point.
const SAMPLE_EVERY: Duration = Duration::from_millis(200);

/// One row of seed 004's Tables 1 and 2 at each of [`PAPER_CPS`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PaperRow {
    /// `none` (Table 1) or `window` (Table 2).
    pub mechanism: String,
    /// Call setup delay, ms.
    pub setup_delay_ms: Vec<f64>,
    /// Throughput, calls/s.
    pub throughput_cps: Vec<f64>,
    /// INVITE retransmissions per second.
    pub retrans_invite_rps: Vec<f64>,
    /// BYE retransmissions per second.
    pub retrans_bye_rps: Vec<f64>,
    /// Average memory, %.
    pub memory_pct: Vec<f64>,
    /// CPU utilisation, %.
    pub cpu_pct: Vec<f64>,
}

/// Seed 004's Tables 1 (no control) and 2 (the window), as printed.
pub fn paper() -> Vec<PaperRow> {
    vec![
        PaperRow {
            mechanism: "none".into(),
            setup_delay_ms: vec![
                6.0, 10.0, 12.0, 100_000.0, 160_040.0, 180_060.0, 200_000.0, 200_000.0, 200_000.0,
            ],
            throughput_cps: vec![100.0, 300.0, 500.0, 673.0, 90.0, 70.0, 50.0, 30.0, 20.0],
            retrans_invite_rps: vec![
                0.0, 0.0, 0.0, 1500.0, 5500.0, 6500.0, 7500.0, 8500.0, 9500.0,
            ],
            retrans_bye_rps: vec![0.0, 0.0, 0.0, 500.0, 2000.0, 2200.0, 2400.0, 2600.0, 2800.0],
            memory_pct: vec![0.0, 0.0, 0.0, 91.0, 93.0, 95.0, 97.0, 100.0, 100.0],
            cpu_pct: vec![28.0, 36.0, 60.0, 92.0, 100.0, 100.0, 100.0, 100.0, 100.0],
        },
        PaperRow {
            mechanism: "window".into(),
            setup_delay_ms: vec![6.0, 10.0, 12.0, 15.0, 30.0, 40.0, 50.0, 150.0, 18_000.0],
            throughput_cps: vec![
                100.0, 300.0, 500.0, 700.0, 870.0, 940.0, 1000.0, 1040.0, 1020.0,
            ],
            retrans_invite_rps: vec![0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 6000.0, 8000.0],
            retrans_bye_rps: vec![0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 3000.0, 3600.0],
            memory_pct: vec![0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 90.0, 100.0],
            cpu_pct: vec![27.0, 30.0, 35.0, 44.0, 58.0, 72.0, 84.0, 92.0, 100.0],
        },
    ]
}

/// `holdline lab window` options.
#[derive(Debug, Parser)]
#[command(
    name = "holdline lab window",
    about = "Seed 004's dual-proxy trapezoid: UAC -> upstream holdline -> capacity-limited downstream (holdline or Kamailio) -> UAS, no control vs the feedback-free delay window"
)]
pub struct Args {
    /// The sweep's options (mechanisms: none, window, and window+KEY=VALUE+… with lines of
    /// the upstream's `[overload]` section, e.g. `window+window_threshold_ms=50`; loads:
    /// factors of the downstream's capacity, default the paper's 100-1,700 calls/s over 700,
    /// then 5 and 10 emulated).
    #[command(flatten)]
    pub sweep: SweepArgs,
    /// Results directory.
    #[arg(long, value_name = "DIR", default_value = "lab-results/window")]
    pub out: PathBuf,
    /// How the downstream is limited, comma-separated: emulated, quota, kamailio (default:
    /// emulated with --quick, all three otherwise; quota and kamailio need root).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub modes: Vec<String>,
    /// Skip the capacity ramp and use this capacity of the downstream, calls/s (every mode).
    #[arg(long, value_name = "CPS")]
    pub capacity: Option<f64>,
    /// Mode `quota`: the holdline downstream's CPU quota, percent of one core.
    #[arg(long, value_name = "PCT", default_value_t = 4,
          value_parser = clap::value_parser!(u64).range(1..=100))]
    pub cpu_quota: u64,
    /// Mode `kamailio`: Kamailio's CPU quota, percent of one core.
    #[arg(long, value_name = "PCT", default_value_t = 8,
          value_parser = clap::value_parser!(u64).range(1..=100))]
    pub kamailio_quota: u64,
    /// The quotas' period (`cpu.cfs_period_us`), µs (longer when the quota would be under the
    /// kernel's 1 ms).
    #[arg(long, value_name = "US", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1_000..=1_000_000))]
    pub quota_period_us: u64,
    /// Directory with Kamailio's run.sh, stop.sh and kamailio.cfg (default: lab/kamailio of
    /// the source tree).
    #[arg(long, value_name = "DIR")]
    pub kamailio_dir: Option<PathBuf>,
    /// Milliseconds the callees ring before they answer (`holdline load uas
    /// --answer-delay-ms`; each point's drain grows by as much): real calls ring, and a window
    /// that judged the final response would read the ringing as the downstream's load.
    #[arg(long, value_name = "MS", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub answer_delay_ms: u64,
}

/// One measured point (one row of `points.csv`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    /// `window`.
    pub experiment: String,
    /// `emulated`, `quota` or `kamailio`.
    pub mode: String,
    /// `none` or `window`.
    pub mechanism: String,
    /// Offered load / capacity (0 for calibration and ramp points).
    pub load_factor: f64,
    /// The paper's offered rate at the same load factor (`load_factor × 700`), calls/s.
    pub paper_cps: f64,
    /// Offered calls per second (measured at the UAC).
    pub offered_cps: f64,
    /// The downstream's capacity the load factor refers to, calls/s.
    pub capacity_cps: f64,
    /// Calls whose ACK reached the UAS while the load was offered, per second.
    pub throughput_cps: f64,
    /// `throughput_cps / capacity_cps`.
    pub throughput_of_capacity: f64,
    /// Calls whose 200 OK came within 10 s, per second, over the last three quarters of the
    /// load window.
    pub goodput_cps: f64,
    /// `goodput_cps / capacity_cps`.
    pub goodput_of_capacity: f64,
    /// Calls finished end to end (200 OK, ACK, BYE answered) per second, over the last three
    /// quarters of the load window: a 200 OK whose ACK or BYE is lost later counts in the
    /// goodput but not here.
    #[serde(default)]
    pub calls_ok_cps: f64,
    /// Average call setup delay (first INVITE to 200 OK) of the calls that got one, ms.
    pub setup_delay_avg_ms: f64,
    /// Its median, ms.
    pub setup_delay_p50_ms: f64,
    /// Its 99th percentile, ms.
    pub setup_delay_p99_ms: f64,
    /// INVITE retransmissions by the UAC.
    pub retrans_invite: u64,
    /// BYE retransmissions by the UAC.
    pub retrans_bye: u64,
    /// INVITE retransmissions per second of load.
    pub retrans_invite_rps: f64,
    /// BYE retransmissions per second of load.
    pub retrans_bye_rps: f64,
    /// 200 OK retransmissions by the UAS.
    pub retrans_200: u64,
    /// Calls placed.
    pub calls_attempted: u64,
    /// Calls completed.
    pub calls_ok: u64,
    /// 503 responses at the UAC.
    pub r503: u64,
    /// Other final failures at the UAC.
    pub r_other: u64,
    /// Calls that timed out or were cut by the drain limit.
    pub timeouts: u64,
    /// New INVITEs the upstream held back with its window
    /// (`holdline_feedback_rejected_total{reason="window_full"}`).
    pub up_window_rejected: u64,
    /// New INVITEs the upstream rejected by its own local control.
    pub up_local_rejected: u64,
    /// INVITEs the holdline downstream read (`holdline_sip_requests_in_total{method="INVITE"}`):
    /// above the calls the upstream forwarded, the upstream's retransmissions (its 100 Trying
    /// stops the UAC's own); `None` with Kamailio.
    #[serde(default)]
    pub down_invites_in: Option<u64>,
    /// Retransmitted requests the holdline downstream absorbed
    /// (`holdline_sip_retransmissions_absorbed_total`); `None` with Kamailio.
    #[serde(default)]
    pub down_retrans_absorbed: Option<u64>,
    /// Upstream CPU over the run, share of one core.
    pub up_cpu: f64,
    /// Upstream peak RSS, MiB.
    pub up_rss_mb: f64,
    /// Downstream CPU over the run (all its processes), share of one core.
    pub down_cpu: f64,
    /// Downstream CPU over the run as a share of its budget (its quota; one core when
    /// emulated).
    pub down_cpu_of_budget: f64,
    /// Downstream peak RSS (summed over its processes), MiB.
    pub down_rss_mb: f64,
    /// Downstream peak PSS (shared pages split among its processes), MiB.
    pub down_pss_mb: Option<f64>,
    /// Seconds from the first call to the UAC's exit.
    pub window_s: f64,
}

/// What one mode measured before its curve.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModeInfo {
    /// `emulated`, `quota` or `kamailio`.
    pub mode: String,
    /// The downstream's server: `holdline` or `kamailio`.
    pub downstream: String,
    /// `--emulate-cost-us` of the downstream (0 under a quota).
    pub emulate_cost_us: u64,
    /// CPU quota, percent of one core.
    pub cpu_quota_percent: Option<u64>,
    /// The quota's period, µs.
    pub quota_period_us: Option<u64>,
    /// Downstream CPU per completed call without quota, µs.
    pub calibration_cpu_us_per_call: Option<f64>,
    /// Nominal capacity: from the emulated cost, or the quota over the CPU per call.
    pub nominal_capacity_cps: f64,
    /// The capacity the load factors refer to (the ramp's highest throughput, or
    /// `--capacity`, or the nominal one with `--quick`).
    pub capacity_cps: f64,
    /// Calibration and ramp points.
    pub steps: Vec<Point>,
}

/// Everything a run measured (`results.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    /// `window`.
    pub experiment: String,
    /// The command line.
    pub command: String,
    /// Start time, seconds since the Unix epoch.
    pub started_unix_s: u64,
    /// Quick mode.
    pub quick: bool,
    /// Machine facts.
    pub machine: Value,
    /// Seconds of offered load per point.
    pub duration_s: f64,
    /// The modes measured.
    pub modes: Vec<ModeInfo>,
    /// The curves.
    pub points: Vec<Point>,
    /// Seed 004's Tables 1 and 2.
    pub paper: Vec<PaperRow>,
    /// Wall time of the run, s.
    pub elapsed_s: f64,
    /// How long the callees rang before they answered, ms (`--answer-delay-ms`).
    #[serde(default)]
    pub answer_delay_ms: u64,
}

/// Entry point of `holdline lab window ARGS`.
pub fn main(args: Vec<String>) -> ExitCode {
    lab_main(
        "window",
        args,
        |a: &Args| a.out.clone(),
        run,
        |r: &Results| r.elapsed_s,
    )
}

/// A mechanism's servers, from `lab feedback`'s table (`window` is its `delay-window`), and
/// the upstream's `[overload]` lines, if any: `window+KEY=VALUE+…` sets each `KEY = VALUE` in
/// the upstream's configuration (e.g. `window+window_threshold_ms=50`, the window's `Z_th`).
fn mechanism(name: &str) -> Result<(Mechanism, Option<String>)> {
    let mut parts = name.split('+');
    let base = parts.next().unwrap_or_default();
    let m = match base {
        "none" => Mechanism::parse("none")?,
        "window" | "delay-window" => Mechanism::parse("delay-window")?,
        other => {
            return Err(LabError::Precondition(format!(
                "unknown mechanism `{other}` (known: {})",
                MECHANISMS.join(", ")
            )));
        }
    };
    let mut up_config: Option<String> = None;
    let mut options = parts.peekable();
    if base == "none" && options.peek().is_some() {
        return Err(LabError::Precondition(format!(
            "mechanism `{name}`: `none` takes no options"
        )));
    }
    crate::feedback::overload_lines(name, options, "the upstream's", &mut up_config)?;
    Ok((m, up_config))
}

/// The downstream's kind of server and limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Emulated,
    Quota,
    Kamailio,
}

impl Mode {
    fn parse(name: &str) -> Result<Self> {
        match name {
            "emulated" => Ok(Self::Emulated),
            "quota" => Ok(Self::Quota),
            "kamailio" => Ok(Self::Kamailio),
            other => Err(LabError::Precondition(format!(
                "unknown mode `{other}` (known: {})",
                MODES.join(", ")
            ))),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Emulated => "emulated",
            Self::Quota => "quota",
            Self::Kamailio => "kamailio",
        }
    }
}

/// What one point is.
struct Spec<'a> {
    mode: Mode,
    mechanism: &'a str,
    cost_us: u64,
    rate: f64,
    duration_s: f64,
    drain_s: f64,
    tag: String,
    /// The `cgroup.procs` file of the CPU group the downstream is born in, if any.
    group: Option<&'a Path>,
    /// The downstream's CPU budget, share of one core.
    budget: f64,
}

/// The downstream process (a holdline with its metrics port).
enum Downstream {
    Holdline(Proc, u16),
    Kamailio(server::Running),
}

impl Downstream {
    fn pid(&self) -> u32 {
        match self {
            Self::Holdline(p, _) => p.0.id(),
            Self::Kamailio(r) => r.pid(),
        }
    }

    /// Its metrics (empty for Kamailio).
    fn scrape(&self) -> String {
        match self {
            Self::Holdline(_, metrics) => scrape(*metrics),
            Self::Kamailio(_) => String::new(),
        }
    }
}

/// `lab/kamailio`: the flag, else next to an ancestor of the binary, else the source tree.
fn kamailio_dir(flag: Option<&Path>) -> Result<PathBuf> {
    let found = match flag {
        Some(d) => Some(d.to_owned()),
        None => std::env::current_exe()
            .ok()
            .and_then(|exe| {
                exe.ancestors()
                    .map(|a| a.join("lab/kamailio"))
                    .find(|d| d.join("run.sh").is_file())
            })
            .or_else(|| {
                let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab/kamailio");
                built.join("run.sh").is_file().then_some(built)
            }),
    };
    let dir = found.ok_or_else(|| {
        LabError::Precondition("lab/kamailio not found: pass --kamailio-dir DIR".into())
    })?;
    for f in ["run.sh", "stop.sh", "kamailio.cfg"] {
        if !dir.join(f).is_file() {
            return Err(LabError::Precondition(format!(
                "{} has no {f}",
                dir.display()
            )));
        }
    }
    Ok(dir)
}

/// Where and how a point starts its processes.
struct Ctx {
    exe: PathBuf,
    runs: PathBuf,
    /// Set for mode `kamailio`.
    kamailio: Option<server::Env>,
    /// `--answer-delay-ms` of the UAS.
    answer_delay_ms: u64,
}

/// [`run_point_once`], again with fresh ports when a process could not bind its port.
fn run_point(ctx: &Ctx, spec: &Spec<'_>, capacity: f64) -> Result<Point> {
    crate::runner::with_fresh_ports("window", &spec.tag, || run_point_once(ctx, spec, capacity))
}

/// Peak memory of the two proxies over a point.
#[derive(Default)]
struct Peaks {
    up_rss_kb: u64,
    down_rss_kb: u64,
    down_pss_kb: Option<u64>,
}

impl Peaks {
    fn sample(&mut self, up: u32, down: u32) {
        let (_, m) = procfs::tree_sample(up);
        self.up_rss_kb = self.up_rss_kb.max(m.rss_kb);
        let (_, m) = procfs::tree_sample(down);
        self.down_rss_kb = self.down_rss_kb.max(m.rss_kb);
        if let Some(p) = m.pss_kb {
            self.down_pss_kb = Some(self.down_pss_kb.unwrap_or(0).max(p));
        }
    }
}

/// Runs one point with fresh processes; their reports and logs stay in `runs` (`TAG-…`).
fn run_point_once(ctx: &Ctx, spec: &Spec<'_>, capacity: f64) -> Result<Point> {
    let (mech, up_config) = mechanism(spec.mechanism)?;
    let (exe, runs, tag) = (ctx.exe.as_path(), ctx.runs.as_path(), &spec.tag);
    let (down_port, uas_port) = (free_port()?, free_port()?);
    let (up_port, up_metrics) = (free_port()?, free_port()?);
    let ring_s = ctx.answer_delay_ms as f64 / 1e3;
    let limit = spec.duration_s + spec.drain_s + ring_s + 5.0;

    // UAS (core 0).
    let uas_json = runs.join(format!("{tag}-uas.json"));
    let uas_csv = runs.join(format!("{tag}-uas.csv"));
    let uas_started = Instant::now();
    let ring = [format!("--answer-delay-ms={}", ctx.answer_delay_ms)];
    let mut uas = crate::runner::start_uas_at(
        &crate::wan::Site::loopback(),
        exe,
        runs,
        tag,
        uas_port,
        Transport::Udp,
        true,
        limit + 3.0,
        if ctx.answer_delay_ms > 0 { &ring } else { &[] },
    )?;

    // Downstream (core 1, in the CPU group if any).
    let down = match (spec.mode, &ctx.kamailio) {
        (Mode::Kamailio, Some(env)) => Downstream::Kamailio(server::start(
            env,
            Kind::Kamailio,
            down_port,
            uas_port,
            Transport::Udp,
            spec.group,
            tag,
        )?),
        (Mode::Kamailio, None) => {
            return Err(LabError::Precondition(
                "mode kamailio without its environment".into(),
            ));
        }
        _ => {
            let down_metrics = free_port()?;
            let mut args = server_args(down_port, down_metrics, uas_port);
            args.extend([
                format!("--overload={}", mech.re_overload),
                format!("--emulate-cost-us={}", spec.cost_us),
                "--emulate-reject-cost-us=0".to_string(),
            ]);
            let log = runs.join(format!("{tag}-down.log"));
            let mut p = spawn_in(SERVER_CORE, spec.group, exe, &args, &log)?;
            wait_bound(
                &mut p.0,
                down_port,
                Some(Transport::Udp),
                "the downstream",
                &log,
            )?;
            Downstream::Holdline(p, down_metrics)
        }
    };

    // Upstream (core 0).
    let mut up_args = server_args(up_port, up_metrics, down_port);
    up_args.extend(mech.se_args.iter().map(|a| a.to_string()));
    if let Some(text) = &up_config {
        let cfg = runs.join(format!("{tag}-up.toml"));
        std::fs::write(&cfg, text)
            .map_err(|e| LabError::io(format!("write {}", cfg.display()), e))?;
        up_args.push(format!("--config={}", cfg.display()));
    }
    let up_log = runs.join(format!("{tag}-up.log"));
    let mut up = spawn(GENERATOR_CORE, exe, &up_args, &up_log)?;
    wait_bound(
        &mut up.0,
        up_port,
        Some(Transport::Udp),
        "the upstream",
        &up_log,
    )?;

    // UAC (core 0).
    let (up_pid, down_pid) = (up.0.id(), down.pid());
    let (up_cpu0, down_cpu0) = (procfs::tree_cpu_us(up_pid), procfs::tree_cpu_us(down_pid));
    let t0 = Instant::now();
    let offset = t0.saturating_duration_since(uas_started).as_secs_f64();
    let load = UacLoad {
        rate: spec.rate,
        duration_s: spec.duration_s,
        drain_s: spec.drain_s + ring_s,
        goodput_window_s: GOODPUT_WINDOW_S,
        max_time_s: limit,
        shares: Vec::new(),
    };
    let mut uacs = start_uacs(exe, runs, tag, &[up_port], Transport::Udp, &load)?;
    // Wait (bounded) for the UAC to stop by itself, sampling the proxies' memory meanwhile.
    let mut peaks = Peaks::default();
    let deadline = t0 + Duration::from_secs_f64(limit + 5.0);
    let mut overran = false;
    for u in &mut uacs {
        loop {
            match u.0.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() >= deadline => {
                    overran = true;
                    break;
                }
                Ok(None) => {
                    peaks.sample(up_pid, down_pid);
                    // The sampling period, bounded by the deadline above.
                    std::thread::sleep(SAMPLE_EVERY);
                }
            }
        }
    }
    peaks.sample(up_pid, down_pid);
    let window = t0.elapsed().as_secs_f64();
    let up_cpu_s = procfs::tree_cpu_us(up_pid).saturating_sub(up_cpu0) as f64 / 1e6;
    let down_cpu_s = procfs::tree_cpu_us(down_pid).saturating_sub(down_cpu0) as f64 / 1e6;
    let up_text = scrape(up_metrics);
    let down_text = down.scrape();
    // A holdline downstream's counters, unless its metrics endpoint did not answer (a
    // downstream overloaded without control may not within the scrape's time limit).
    let holdline_down = matches!(down, Downstream::Holdline(..)) && !down_text.is_empty();
    // The UAS writes its report on SIGTERM.
    terminate(&uas.0);
    crate::generator::wait_bounded(&mut uas.0, Duration::from_secs(5));
    drop(uacs);
    drop(up);
    drop(down);
    if overran {
        return Err(LabError::Process(format!(
            "{tag}: the UAC overran its time limit; log {}",
            tail(&runs.join(format!("{tag}-uac0.log")))
        )));
    }

    let r = read_json(&runs.join(format!("{tag}-uac0.json")))?;
    let uas_r = read_json(&uas_json).unwrap_or(Value::Null);
    let uac_csv = runs.join(format!("{tag}-uac0.csv"));
    let goodput = steady(&uac_csv, "goodput", spec.duration_s);
    let calls_ok_cps = steady(&uac_csv, "calls_ok", spec.duration_s);
    let throughput = window_sum(&uas_csv, "completed", offset, offset + spec.duration_s)
        / spec.duration_s.max(1e-3);
    let of = |x: f64| if capacity > 0.0 { x / capacity } else { 0.0 };
    let retrans_invite = count(&r, &["totals", "retrans_invite"]);
    let retrans_bye = count(&r, &["totals", "retrans_bye"]);
    let load_factor = of(spec.rate);
    Ok(Point {
        experiment: "window".into(),
        mode: spec.mode.name().into(),
        mechanism: spec.mechanism.to_string(),
        load_factor,
        paper_cps: load_factor * PAPER_CAPACITY_CPS,
        offered_cps: num(&r, &["offered_cps"]),
        capacity_cps: capacity,
        throughput_cps: throughput,
        throughput_of_capacity: of(throughput),
        goodput_cps: goodput,
        goodput_of_capacity: of(goodput),
        calls_ok_cps,
        setup_delay_avg_ms: num(&r, &["latency", "pdd", "mean_ms"]),
        setup_delay_p50_ms: num(&r, &["pdd_p50_ms"]),
        setup_delay_p99_ms: num(&r, &["pdd_p99_ms"]),
        retrans_invite,
        retrans_bye,
        retrans_invite_rps: retrans_invite as f64 / spec.duration_s.max(1e-3),
        retrans_bye_rps: retrans_bye as f64 / spec.duration_s.max(1e-3),
        retrans_200: count(&uas_r, &["totals", "retrans_200"]),
        calls_attempted: count(&r, &["totals", "attempted"]),
        calls_ok: count(&r, &["totals", "calls_ok"]),
        r503: count(&r, &["totals", "r503"]),
        r_other: count(&r, &["totals", "r_fail_other"]),
        timeouts: count(&r, &["totals", "timeouts"]),
        up_window_rejected: metric_where(
            &up_text,
            "holdline_feedback_rejected_total",
            &["reason=\"window_full\""],
        ) as u64,
        up_local_rejected: metric_where(&up_text, "holdline_overload_rejected_total", &[]) as u64,
        down_invites_in: holdline_down.then(|| {
            metric_where(
                &down_text,
                "holdline_sip_requests_in_total",
                &["method=\"INVITE\""],
            ) as u64
        }),
        down_retrans_absorbed: holdline_down.then(|| {
            metric_where(
                &down_text,
                "holdline_sip_retransmissions_absorbed_total",
                &[],
            ) as u64
        }),
        up_cpu: up_cpu_s / window.max(1e-3),
        up_rss_mb: peaks.up_rss_kb as f64 / 1024.0,
        down_cpu: down_cpu_s / window.max(1e-3),
        down_cpu_of_budget: down_cpu_s / window.max(1e-3) / spec.budget.max(1e-6),
        down_rss_mb: peaks.down_rss_kb as f64 / 1024.0,
        down_pss_mb: peaks.down_pss_kb.map(|k| k as f64 / 1024.0),
        window_s: window,
    })
}

fn progress(i: usize, n: usize, p: &Point, started: Instant) {
    eprintln!(
        "[{i}/{n} {:>5.0} s] {:<8} {:<6} {:>5.2}x (paper {:>5.0}/s) offered {:>7.1}/s  throughput {:>6.1}/s ({:.2})  goodput {:>6.1}/s  calls ok {:>6.1}/s  setup avg {:>8.1} ms p99 {:>8.1} ms  retrans INVITE {:>6.1}/s BYE {:>5.1}/s  503 {:>6} (window {:>6})  CPU up {:>3.0}% down {:>3.0}% of budget  RSS up {:.0} down {:.0} MiB",
        started.elapsed().as_secs_f64(),
        p.mode,
        p.mechanism,
        p.load_factor,
        p.paper_cps,
        p.offered_cps,
        p.throughput_cps,
        p.throughput_of_capacity,
        p.goodput_cps,
        p.calls_ok_cps,
        p.setup_delay_avg_ms,
        p.setup_delay_p99_ms,
        p.retrans_invite_rps,
        p.retrans_bye_rps,
        p.r503,
        p.up_window_rejected,
        p.up_cpu * 100.0,
        p.down_cpu_of_budget * 100.0,
        p.up_rss_mb,
        p.down_rss_mb,
    );
}

/// The default load factors: the paper's offered loads over its nominal capacity, then 5×
/// and 10× where core 0 can offer them (the emulated mode).
fn default_loads(mode: Mode, quick: bool) -> Vec<f64> {
    if quick {
        return vec![1.0, 2.5];
    }
    let mut v: Vec<f64> = PAPER_CPS
        .iter()
        .map(|c| (c / PAPER_CAPACITY_CPS * 1000.0).round() / 1000.0)
        .collect();
    if mode == Mode::Emulated {
        v.extend([5.0, 10.0]);
    }
    v
}

/// Runs the experiment and writes its results.
pub fn run(args: &Args) -> Result<Results> {
    if args.sweep.replot {
        return replot(&args.out);
    }
    check_tools()?;
    let started = Instant::now();
    let quick = args.sweep.quick;
    let exe = holdline_exe(args.sweep.exe.as_deref())?;
    let duration = args
        .sweep
        .duration
        .unwrap_or(if quick { 4.0 } else { 10.0 });
    let drain = if quick { 5.0 } else { GOODPUT_WINDOW_S };
    let modes: Vec<Mode> = if args.modes.is_empty() {
        if quick {
            vec![Mode::Emulated]
        } else {
            vec![Mode::Emulated, Mode::Quota, Mode::Kamailio]
        }
    } else {
        args.modes
            .iter()
            .map(|m| Mode::parse(m))
            .collect::<Result<_>>()?
    };
    let mechanisms: Vec<String> = if args.sweep.mechanisms.is_empty() {
        MECHANISMS.iter().map(|s| s.to_string()).collect()
    } else {
        args.sweep.mechanisms.clone()
    };
    for m in &mechanisms {
        mechanism(m)?;
    }
    if args
        .sweep
        .loads
        .iter()
        .any(|&f| !(f.is_finite() && f > 0.0 && f <= 100.0))
    {
        return Err(LabError::Precondition(
            "--loads: each load factor must be in (0, 100]".into(),
        ));
    }
    if modes.contains(&Mode::Emulated) && args.sweep.cost_us == 0 && args.capacity.is_none() {
        return Err(LabError::Precondition(
            "--cost-us 0 leaves the emulated downstream unlimited: use --capacity CPS or the quota modes".into(),
        ));
    }
    let runs = args.out.join("runs");
    std::fs::create_dir_all(&runs)
        .map_err(|e| LabError::io(format!("create {}", runs.display()), e))?;
    let runs = runs
        .canonicalize()
        .map_err(|e| LabError::io(format!("resolve {}", runs.display()), e))?;
    let kamailio = if modes.contains(&Mode::Kamailio) {
        let on_path = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .any(|d| d.join("kamailio").is_file());
        if !on_path {
            return Err(LabError::Missing {
                program: "kamailio",
                package: "kamailio",
            });
        }
        Some(server::Env {
            exe: exe.clone(),
            kamailio_dir: kamailio_dir(args.kamailio_dir.as_deref())?,
            work: runs.clone(),
            kamailio_children: 1,
            overload_flag: true,
        })
    } else {
        None
    };
    let ctx = Ctx {
        exe,
        runs,
        kamailio,
        answer_delay_ms: args.answer_delay_ms,
    };
    let loads_of = |mode: Mode| {
        if args.sweep.loads.is_empty() {
            default_loads(mode, quick)
        } else {
            args.sweep.loads.clone()
        }
    };
    let ramp = !quick && args.capacity.is_none();
    let total: usize = modes
        .iter()
        .map(|&m| {
            usize::from(m != Mode::Emulated)
                + if ramp { RAMP_STEPS as usize } else { 0 }
                + loads_of(m).len() * mechanisms.len()
        })
        .sum();
    eprintln!(
        "window: modes {:?}; up to {total} points of {duration:.0} s (+ at most {drain:.0} s drain); mechanisms {mechanisms:?}",
        modes.iter().map(|m| m.name()).collect::<Vec<_>>()
    );
    let mut done = 0;
    let mut infos = Vec::new();
    let mut points = Vec::new();
    for &mode in &modes {
        let (cost_us, quota) = match mode {
            Mode::Emulated => (args.sweep.cost_us, None),
            Mode::Quota => (0, Some(args.cpu_quota)),
            Mode::Kamailio => (0, Some(args.kamailio_quota)),
        };
        let (period, quota_us) =
            quota.map_or((0, 0), |pct| feasible_quota(args.quota_period_us, pct));
        let group = match quota {
            Some(_) => Some(CpuGroup::create(
                &format!("holdline-window-{}-{}", std::process::id(), mode.name()),
                period,
                quota_us,
            )?),
            None => None,
        };
        let procs = group.as_ref().map(CpuGroup::procs_file);
        let budget = quota.map_or(1.0, |pct| pct as f64 / 100.0);
        let mut steps = Vec::new();
        // Nominal capacity: from the emulated cost, or under a quota from the downstream's
        // CPU per call measured without quota.
        let mut calibration = None;
        let nominal = match quota {
            None => 1e6 / (MESSAGES_PER_CALL * cost_us.max(1) as f64),
            Some(pct) => {
                let spec = Spec {
                    mode,
                    mechanism: "none",
                    cost_us,
                    rate: CALIBRATION_CPS,
                    duration_s: 5.0,
                    drain_s: 3.0,
                    tag: format!("{}-calibration", mode.name()),
                    group: None,
                    budget: 1.0,
                };
                let p = run_point(&ctx, &spec, 0.0)?;
                done += 1;
                progress(done, total, &p, started);
                let per_call = p.down_cpu * p.window_s * 1e6 / p.calls_ok.max(1) as f64;
                calibration = Some(per_call);
                steps.push(p);
                pct as f64 / 100.0 * 1e6 / per_call.max(1.0)
            }
        };
        eprintln!(
            "window: mode {}: nominal capacity {nominal:.0} calls/s{}",
            mode.name(),
            match (quota, calibration) {
                (Some(pct), Some(c)) => format!(
                    " (CPU quota {pct}% of a core, period {period} µs, {c:.0} µs CPU per call)"
                ),
                _ => format!(" ({cost_us} µs emulated per message)"),
            }
        );
        // The capacity the load factors refer to.
        let capacity = if let Some(c) = args.capacity {
            c
        } else if !ramp {
            nominal
        } else {
            let mut best = 0.0f64;
            for f in (0..RAMP_STEPS).map(|k| RAMP_FIRST * RAMP_FACTOR.powi(k)) {
                let rate = (nominal * f).round();
                let spec = Spec {
                    mode,
                    mechanism: "none",
                    cost_us,
                    rate,
                    duration_s: duration,
                    drain_s: drain,
                    tag: format!("{}-capacity-{rate}", mode.name()),
                    group: procs.as_deref(),
                    budget,
                };
                let p = run_point(&ctx, &spec, 0.0)?;
                done += 1;
                progress(done, total, &p, started);
                best = best.max(p.throughput_cps);
                // Saturated: calls fail or wait, or fewer complete than are offered; or
                // core 0 could not offer the rate (the ramp cannot go higher).
                let saturated = (p.calls_ok as f64) < 0.98 * p.calls_attempted as f64
                    || p.setup_delay_p99_ms > 1000.0
                    || p.throughput_cps < 0.9 * p.offered_cps
                    || p.offered_cps < 0.9 * rate;
                if p.offered_cps < 0.9 * rate {
                    eprintln!(
                        "window: the UAC offered only {:.0} of {rate:.0} calls/s: core 0 limits the ramp",
                        p.offered_cps
                    );
                }
                steps.push(p);
                if saturated {
                    break;
                }
            }
            if best > 0.0 { best } else { nominal }
        };
        eprintln!(
            "window: mode {}: capacity {capacity:.0} calls/s; load factors of it",
            mode.name()
        );
        for f in loads_of(mode) {
            for m in &mechanisms {
                let spec = Spec {
                    mode,
                    mechanism: m,
                    cost_us,
                    rate: (capacity * f).round().max(1.0),
                    duration_s: duration,
                    drain_s: drain,
                    tag: format!("{}-{m}-{f}x", mode.name()),
                    group: procs.as_deref(),
                    budget,
                };
                let mut p = run_point(&ctx, &spec, capacity)?;
                // The factor asked for (the rate is rounded to whole calls per second).
                p.load_factor = f;
                p.paper_cps = f * PAPER_CAPACITY_CPS;
                done += 1;
                progress(done, total, &p, started);
                if p.offered_cps < 0.9 * spec.rate {
                    eprintln!(
                        "window: the UAC offered only {:.0} of {:.0} calls/s: core 0 (UAC, upstream, UAS) is saturated, so this point measures less than its load factor",
                        p.offered_cps, spec.rate
                    );
                }
                points.push(p);
                let partial = serde_json::json!({
                    "experiment": "window", "partial": true, "points": &points,
                });
                std::fs::write(
                    args.out.join("results.partial.json"),
                    serde_json::to_string_pretty(&partial).unwrap_or_default(),
                )
                .map_err(|e| LabError::io("write results.partial.json", e))?;
            }
        }
        infos.push(ModeInfo {
            mode: mode.name().into(),
            downstream: if mode == Mode::Kamailio {
                "kamailio"
            } else {
                "holdline"
            }
            .into(),
            emulate_cost_us: cost_us,
            cpu_quota_percent: quota,
            quota_period_us: quota.map(|_| period),
            calibration_cpu_us_per_call: calibration,
            nominal_capacity_cps: nominal,
            capacity_cps: capacity,
            steps,
        });
        drop(group);
    }
    let results = Results {
        experiment: "window".into(),
        command: crate::runner::command_line(),
        started_unix_s: crate::runner::started_unix_s(started),
        quick,
        machine: machine(),
        duration_s: duration,
        modes: infos,
        points,
        paper: paper(),
        elapsed_s: started.elapsed().as_secs_f64(),
        answer_delay_ms: args.answer_delay_ms,
    };
    write(&args.out, &results)?;
    let _ = std::fs::remove_file(args.out.join("results.partial.json"));
    Ok(results)
}

/// Rewrites the CSV files and the plots from `DIR/results.json`.
fn replot(out: &Path) -> Result<Results> {
    let r: Results = crate::runner::read_results(out)?;
    write(out, &r)?;
    Ok(r)
}

/// The name of a mechanism in the plots ("no control, …" red, "window, …" green).
fn mech_name(mechanism: &str) -> &str {
    match mechanism {
        "none" => "no control",
        other => other,
    }
}

/// The downstream of a mode, for titles.
fn mode_title(mode: &str) -> &str {
    match mode {
        "emulated" => "holdline downstream, emulated cost",
        "quota" => "holdline downstream, CPU quota",
        "kamailio" => "Kamailio downstream, CPU quota",
        other => other,
    }
}

fn opt(x: Option<f64>, prec: usize) -> String {
    x.map_or_else(String::new, |v| format!("{v:.prec$}"))
}

fn write(out: &Path, r: &Results) -> Result<()> {
    let json = serde_json::to_string_pretty(r).map_err(|e| LabError::Report {
        path: out.join("results.json"),
        reason: e.to_string(),
    })?;
    std::fs::write(out.join("results.json"), json)
        .map_err(|e| LabError::io("write results.json", e))?;
    let mut csv = String::from(
        "experiment,mode,mechanism,load_factor,paper_cps,offered_cps,capacity_cps,throughput_cps,throughput_of_capacity,goodput_cps,goodput_of_capacity,calls_ok_cps,setup_delay_avg_ms,setup_delay_p50_ms,setup_delay_p99_ms,retrans_invite,retrans_bye,retrans_invite_rps,retrans_bye_rps,retrans_200,calls_attempted,calls_ok,r503,r_other,timeouts,up_window_rejected,up_local_rejected,down_invites_in,down_retrans_absorbed,up_cpu,up_rss_mb,down_cpu,down_cpu_of_budget,down_rss_mb,down_pss_mb,window_s\n",
    );
    for p in &r.points {
        csv.push_str(&format!(
            "{},{},{},{:.3},{:.0},{:.1},{:.1},{:.1},{:.3},{:.1},{:.3},{:.1},{:.1},{:.1},{:.1},{},{},{:.1},{:.1},{},{},{},{},{},{},{},{},{},{},{:.3},{:.1},{:.3},{:.3},{:.1},{},{:.1}\n",
            p.experiment,
            p.mode,
            p.mechanism,
            p.load_factor,
            p.paper_cps,
            p.offered_cps,
            p.capacity_cps,
            p.throughput_cps,
            p.throughput_of_capacity,
            p.goodput_cps,
            p.goodput_of_capacity,
            p.calls_ok_cps,
            p.setup_delay_avg_ms,
            p.setup_delay_p50_ms,
            p.setup_delay_p99_ms,
            p.retrans_invite,
            p.retrans_bye,
            p.retrans_invite_rps,
            p.retrans_bye_rps,
            p.retrans_200,
            p.calls_attempted,
            p.calls_ok,
            p.r503,
            p.r_other,
            p.timeouts,
            p.up_window_rejected,
            p.up_local_rejected,
            p.down_invites_in.map_or_else(String::new, |n| n.to_string()),
            p.down_retrans_absorbed.map_or_else(String::new, |n| n.to_string()),
            p.up_cpu,
            p.up_rss_mb,
            p.down_cpu,
            p.down_cpu_of_budget,
            p.down_rss_mb,
            opt(p.down_pss_mb, 1),
            p.window_s,
        ));
    }
    std::fs::write(out.join("points.csv"), csv).map_err(|e| LabError::io("write points.csv", e))?;
    let mut text = String::from(
        "mechanism,offered_cps,load_factor,setup_delay_ms,throughput_cps,throughput_of_capacity,retrans_invite_rps,retrans_bye_rps,memory_pct,cpu_pct\n",
    );
    for row in &r.paper {
        for (i, c) in PAPER_CPS.iter().enumerate() {
            let at = |v: &[f64]| v.get(i).copied().unwrap_or(f64::NAN);
            text.push_str(&format!(
                "{},{c:.0},{:.3},{},{},{:.3},{},{},{},{}\n",
                row.mechanism,
                c / PAPER_CAPACITY_CPS,
                at(&row.setup_delay_ms),
                at(&row.throughput_cps),
                at(&row.throughput_cps) / PAPER_CAPACITY_CPS,
                at(&row.retrans_invite_rps),
                at(&row.retrans_bye_rps),
                at(&row.memory_pct),
                at(&row.cpu_pct),
            ));
        }
    }
    std::fs::write(out.join("paper.csv"), text).map_err(|e| LabError::io("write paper.csv", e))?;
    plots(out, r)
}

/// One set of plots per mode (`throughput-MODE`, `goodput-MODE`, `delay-MODE`,
/// `retrans-MODE`, `cpu-MODE`, `memory-MODE`), x the load factor, with seed 004's curves in the
/// same units where the paper has them.
fn plots(out: &Path, r: &Results) -> Result<()> {
    let mut modes: Vec<&str> = Vec::new();
    for p in &r.points {
        if !modes.contains(&p.mode.as_str()) {
            modes.push(&p.mode);
        }
    }
    let x = "offered, calls/s scaled to a capacity of 700 (load factor x 700, the paper's axis)";
    // Our rates in the paper's units: a fraction of the capacity times its 700 calls/s.
    let scaled =
        |v: f64, p: &Point| (p.capacity_cps > 0.0).then(|| v / p.capacity_cps * PAPER_CAPACITY_CPS);
    for mode in modes {
        let mut mechanisms: Vec<&str> = Vec::new();
        for p in r.points.iter().filter(|p| p.mode == mode) {
            if !mechanisms.contains(&p.mechanism.as_str()) {
                mechanisms.push(&p.mechanism);
            }
        }
        let ours = |what: &str, f: &dyn Fn(&Point) -> Option<f64>| {
            mechanisms
                .iter()
                .map(|m| {
                    let mut pts: Vec<(f64, f64)> = r
                        .points
                        .iter()
                        .filter(|p| p.mode == mode && p.mechanism == *m)
                        .filter_map(|p| f(p).map(|y| (p.load_factor * PAPER_CAPACITY_CPS, y)))
                        .collect();
                    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                    (format!("{}, {what}", mech_name(m)), pts)
                })
                .collect::<Vec<_>>()
        };
        let theirs = |f: &dyn Fn(&PaperRow, usize) -> Option<f64>| {
            r.paper
                .iter()
                .map(|row| {
                    let pts = PAPER_CPS
                        .iter()
                        .enumerate()
                        .filter_map(|(i, c)| f(row, i).map(|y| (*c, y)))
                        .collect();
                    (
                        format!("paper: {}, Asterisk", mech_name(&row.mechanism)),
                        pts,
                    )
                })
                .collect::<Vec<_>>()
        };
        let down = mode_title(mode);
        let mut s = ours("throughput", &|p| scaled(p.throughput_cps, p));
        s.extend(theirs(&|row, i| row.throughput_cps.get(i).copied()));
        plot::chart(
            out,
            &format!("throughput-{mode}"),
            &format!("{down}: throughput"),
            x,
            "calls/s (ACK at the UAS), scaled to a capacity of 700",
            &s,
        )?;
        let mut s = ours("goodput (200 OK within 10 s)", &|p| {
            scaled(p.goodput_cps, p)
        });
        s.extend(ours("completed (BYE answered)", &|p| {
            scaled(p.calls_ok_cps, p)
        }));
        plot::chart(
            out,
            &format!("goodput-{mode}"),
            &format!("{down}: goodput, completed calls"),
            x,
            "calls/s, scaled to a capacity of 700",
            &s,
        )?;
        let lg = |ms: f64| (ms > 0.0).then(|| ms.log10());
        let mut s = ours("average setup delay", &|p| lg(p.setup_delay_avg_ms));
        s.extend(theirs(&|row, i| {
            row.setup_delay_ms.get(i).copied().and_then(lg)
        }));
        plot::chart(
            out,
            &format!("delay-{mode}"),
            &format!("{down}: average setup delay (log10 ms)"),
            x,
            "log10(average setup delay, ms)",
            &s,
        )?;
        let mut s = ours("BYE", &|p| scaled(p.retrans_bye_rps, p));
        s.extend(theirs(&|row, i| row.retrans_bye_rps.get(i).copied()));
        plot::chart(
            out,
            &format!("retrans-{mode}"),
            &format!("{down}: BYE retransmissions by the UAC"),
            x,
            "per second, scaled to a capacity of 700",
            &s,
        )?;
        let mut s = ours("downstream", &|p| Some(p.down_cpu_of_budget * 100.0));
        s.extend(theirs(&|row, i| row.cpu_pct.get(i).copied()));
        for (l, pts) in ours("upstream", &|p| Some(p.up_cpu * 100.0)) {
            let name = l.trim_end_matches(", upstream");
            s.push((format!("upstream: {name}"), pts));
        }
        plot::chart(
            out,
            &format!("cpu-{mode}"),
            &format!("{down}: CPU"),
            x,
            "% (downstream: of its quota or core; upstream: of a core)",
            &s,
        )?;
        let mut s = ours("downstream", &|p| Some(p.down_rss_mb));
        for (l, pts) in ours("upstream", &|p| Some(p.up_rss_mb)) {
            let name = l.trim_end_matches(", upstream");
            s.push((format!("upstream: {name}"), pts));
        }
        plot::chart(
            out,
            &format!("memory-{mode}"),
            &format!("{down}: peak RSS"),
            x,
            "MiB",
            &s,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mechanisms_reuse_the_feedback_labs_servers() {
        let (w, cfg) = mechanism("window").expect("window");
        assert_eq!(
            (w.re_overload, w.se_args),
            ("none", &["--feedback=window"][..])
        );
        assert_eq!(cfg, None);
        let (n, _) = mechanism("none").expect("none");
        assert_eq!(n.re_overload, "none");
        assert!(n.se_args.contains(&"--overload=none"));
        assert!(mechanism("loss").is_err());
        // Options go to the upstream's [overload] section; `none` takes none.
        let (_, cfg) = mechanism("window+window_threshold_ms=50").expect("window+option");
        assert_eq!(
            cfg.as_deref(),
            Some("[overload]\nwindow_threshold_ms = 50\n")
        );
        assert!(mechanism("window+oops").is_err());
        assert!(mechanism("none+window_threshold_ms=50").is_err());
        assert!(Mode::parse("quota").is_ok() && Mode::parse("x").is_err());
    }

    #[test]
    fn callees_may_ring() {
        use clap::Parser;
        let ring = |v: &[&str]| {
            Args::try_parse_from(std::iter::once("x").chain(v.iter().copied()))
                .map(|a| a.answer_delay_ms)
        };
        assert_eq!(ring(&[]).ok(), Some(0));
        assert_eq!(ring(&["--answer-delay-ms", "3000"]).ok(), Some(3000));
        assert!(ring(&["--answer-delay-ms", "70000"]).is_err());
        // Results written before the option read as callees answering at once.
        let old = r#"{"experiment":"window","command":"x","started_unix_s":0,"quick":true,
            "machine":{},"duration_s":1,"modes":[],"points":[],"paper":[],"elapsed_s":1}"#;
        let r: Results = serde_json::from_str(old).expect("old results.json");
        assert_eq!(r.answer_delay_ms, 0);
    }

    #[test]
    fn default_loads_are_the_papers_over_its_capacity() {
        let l = default_loads(Mode::Emulated, false);
        assert_eq!(l.len(), 11);
        assert_eq!(l[0], 0.143);
        assert_eq!(l[3], 1.0);
        assert_eq!(l[8], 2.429);
        assert_eq!(l[10], 10.0);
        assert_eq!(default_loads(Mode::Kamailio, false).len(), 9);
        assert_eq!(default_loads(Mode::Emulated, true), vec![1.0, 2.5]);
    }

    #[test]
    fn the_papers_tables_have_a_value_per_load() {
        for row in paper() {
            for v in [
                &row.setup_delay_ms,
                &row.throughput_cps,
                &row.retrans_invite_rps,
                &row.retrans_bye_rps,
                &row.memory_pct,
                &row.cpu_pct,
            ] {
                assert_eq!(v.len(), PAPER_CPS.len(), "{}", row.mechanism);
            }
        }
        assert_eq!(mech_name("none"), "no control");
    }
}
