//! `holdline lab udp-overload`: seed 003's local control experiment. One capacity-limited
//! `holdline serve` (one worker, `--emulate-cost-us`, pinned to core 1) over UDP, offered
//! 0.5× to 10× its measured capacity by `holdline load uac` (core 0) with calls answered by
//! `holdline load uas` (core 0); mechanisms: no control (drop-tail in the kernel's receive
//! buffer), 503 on a full queue (`queue-limit`), OCC (and `queue-delay` in full mode).
//!
//! Phases, each point with a fresh server:
//!
//! 1. **capacity**: no control, offered 0.6× … 1.2× the nominal capacity (1 s / (6 messages ×
//!    the emulated cost)); the capacity is the highest offered rate whose calls all
//!    completed with PDD p99 ≤ 200 ms;
//! 2. **curve**: every mechanism at every load factor;
//! 3. **rejection cost** (no emulation): server CPU per completed call (no control) and per
//!    rejected INVITE (a server that rejects every new INVITE) at the same offered rate.
//!
//! Output in `--out DIR`: `results.json` (one object per point under `points`, plus the
//! capacity steps and the rejection cost), `points.csv`, `throughput.svg/png` (throughput and
//! goodput against offered load, per mechanism), `pdd.svg/png` (PDD distribution at the
//! highest load), and every process's JSON report and log under `runs/`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cgroup::CpuGroup;
use crate::error::{LabError, Result};
use crate::generator::{GENERATOR_CORE, count, num, read_json, terminate, wait_bounded};
use crate::plot;
use crate::procfs;
use crate::runner::{
    SweepArgs, cdf_points, check_tools, holdline_exe, lab_main, machine, median, metric,
    processing_us_above, scrape, scrape_fresh, spawn, spawn_in, start_uas, steady,
};
use crate::server::{SERVER_CORE, Transport, free_port, tail, wait_bound};

/// Messages through the server per call: INVITE, 180, 200, ACK, BYE, 200 (the 100 is sent,
/// not handled).
const MESSAGES_PER_CALL: f64 = 6.0;
/// The goodput window of seed 003: a call counts when its 200 OK came within this.
const GOODPUT_WINDOW_S: f64 = 10.0;
/// The rejection-cost runs: (calls per second, rejected INVITEs per second). The last pair
/// compares calls near one worker's capacity with a worker busy rejecting three times as
/// many INVITEs (quick mode runs the pairs from 5,000 calls/s up).
const COST_PAIRS: [(f64, f64); 3] = [(2000.0, 2000.0), (5000.0, 5000.0), (5000.0, 15000.0)];
/// Under `--cpu-quota`: the offered rate (no quota, no control) at which the server's CPU per
/// call is measured.
const CALIBRATION_CPS: f64 = 2000.0;
/// Under `--cpu-quota`: at most this many capacity steps, each this factor above the last,
/// from 0.8 × the nominal capacity (the ramp stops at the first saturated step).
const QUOTA_RAMP_STEPS: i32 = 8;
const QUOTA_RAMP_FACTOR: f64 = 1.3;

/// `holdline lab udp-overload` options.
#[derive(Debug, Parser)]
#[command(
    name = "holdline lab udp-overload",
    about = "Local overload control over UDP: no control vs 503 on a full queue vs OCC, 0.5x to 10x"
)]
pub struct Args {
    /// The sweep's options.
    #[command(flatten)]
    pub sweep: SweepArgs,
    /// Results directory.
    #[arg(long, value_name = "DIR", default_value = "lab-results/udp-overload")]
    pub out: PathBuf,
    /// Run the server in a cgroup v1 CPU group with this quota, percent of one core (real CPU
    /// scarcity: a rejection costs what it really costs; use with `--cost-us 0`). The
    /// capacity is then found from the server's measured CPU per call, and the rejection-cost
    /// phase is skipped. Needs root.
    #[arg(long, value_name = "PCT", value_parser = clap::value_parser!(u64).range(1..=100))]
    pub cpu_quota: Option<u64>,
    /// The quota's period (`cpu.cfs_period_us`), µs.
    #[arg(long, value_name = "US", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1_000..=1_000_000))]
    pub quota_period_us: u64,
    /// Runs of every curve point, interleaved (all mechanisms at a load, then again); the
    /// plots and `summary.csv` show medians, `points.csv` every run.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=20))]
    pub repeat: u32,
}

/// One measured point of the curve (one row of `points.csv`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    /// `udp-overload`.
    pub experiment: String,
    /// The server's `--overload` algorithm.
    pub mechanism: String,
    /// Number of SEs: does not apply (one server).
    pub ses: Option<u32>,
    /// Offered load / capacity.
    pub load_factor: f64,
    /// Offered calls per second (measured at the UAC).
    pub offered_cps: f64,
    /// The measured capacity (phase 1).
    pub capacity_cps: f64,
    /// Calls whose ACK reached the UAS, per second of offered load.
    pub throughput_cps: f64,
    /// Calls whose 200 OK reached the UAC within 10 s of their first INVITE, per second of
    /// offered load.
    pub goodput_cps: f64,
    /// Goodput in the steady part of the run: the UAC's per-second goodput (200 OKs within
    /// 10 s, by the second they arrived) averaged over the last three quarters of the load
    /// window. `goodput_cps` also counts calls completed during the drain after the load, so
    /// it overstates what a server sustains while overloaded; this does not.
    pub goodput_steady_cps: f64,
    /// Post-dial delay (INVITE to first response other than 100) p50, ms.
    pub pdd_p50_ms: f64,
    /// PDD p99, ms.
    pub pdd_p99_ms: f64,
    /// PDD mean, ms (well-conditioned where the median sits on a step of the
    /// retransmission schedule).
    #[serde(default)]
    pub pdd_mean_ms: Option<f64>,
    /// 200 OK retransmissions by the UAS.
    pub retrans_200: u64,
    /// INVITE retransmissions by the UAC.
    pub retrans_invite: u64,
    /// Jain's fairness: does not apply (one source).
    pub fairness: Option<f64>,
    /// Calls placed.
    pub calls_attempted: u64,
    /// Calls completed (200 OK, ACK, BYE).
    pub calls_ok: u64,
    /// 503 responses at the UAC.
    pub r503: u64,
    /// Calls that timed out or were cut by the drain limit.
    pub timeouts: u64,
    /// Server CPU over the run, seconds.
    pub server_cpu_s: f64,
    /// Server core busy over the run (1.0 = one core).
    pub server_busy: f64,
    /// Rejections counted by the server's gate.
    pub server_rejected: u64,
    /// Which run of the point this is (`--repeat`), from 0.
    #[serde(default)]
    pub run: u32,
    /// Mean wall time the server spent on a message served at full emulated cost (its
    /// processing histogram above 0.5 ms), µs: the emulated cost as the server really paid
    /// it on this machine (`holdline sim agree` models the point with it). `None` without
    /// an emulated cost of at least 0.5 ms.
    #[serde(default)]
    pub service_us_measured: Option<f64>,
    /// The run's files in `runs/` start with this (`TAG-serve.metrics`: the server's metrics,
    /// read once its worker was done; `holdline sim agree` compares what it read by kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// Server CPU per completed call and per rejected INVITE at one offered rate.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RejectionCost {
    /// Offered calls per second in the run with calls.
    pub offered_cps: f64,
    /// Offered new INVITEs per second in the run that rejects them all (the same rate, or a
    /// higher one for the cost of rejecting while the server is busy).
    #[serde(default)]
    pub rejected_cps: f64,
    /// CPU per completed call, µs (no control, nothing rejected).
    pub cpu_us_per_call: f64,
    /// CPU per rejected INVITE (its 503 and the ACK of the 503 included), µs: the rejecting
    /// run's CPU less what the calls it admitted cost (at `cpu_us_per_call`), over its
    /// rejections.
    pub cpu_us_per_rejection: f64,
    /// Calls the rejecting run completed: `queue_limit = 1` admits a new INVITE whenever the
    /// queue is empty, and their cost is not the rejections' (before 2026-11-29 it was
    /// counted in, overstating the cost). `None` in older results.
    #[serde(default)]
    pub calls_admitted: Option<u64>,
    /// The rejecting run's CPU per rejection without that correction, µs.
    #[serde(default)]
    pub cpu_us_per_rejection_uncorrected: Option<f64>,
    /// The ratio (issue 6: at most 0.2).
    pub ratio: f64,
}

/// Everything a run measured (`results.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    /// `udp-overload`.
    pub experiment: String,
    /// The command line.
    pub command: String,
    /// Start time, seconds since the Unix epoch.
    pub started_unix_s: u64,
    /// Quick mode.
    pub quick: bool,
    /// Machine facts.
    pub machine: Value,
    /// `--emulate-cost-us` of the server.
    pub emulate_cost_us: u64,
    /// `--emulate-reject-cost-us` of the server.
    pub emulate_reject_cost_us: u64,
    /// Nominal capacity from the emulated cost.
    pub nominal_capacity_cps: f64,
    /// Measured capacity (phase 1).
    pub capacity_cps: f64,
    /// The CPU quota of the server, percent of one core (`--cpu-quota`), if any.
    #[serde(default)]
    pub cpu_quota_percent: Option<u64>,
    /// The quota's period, µs.
    #[serde(default)]
    pub quota_period_us: Option<u64>,
    /// Server CPU per completed call measured without quota or control (quota mode), µs.
    #[serde(default)]
    pub calibration_cpu_us_per_call: Option<f64>,
    /// Saturation throughput: the highest steady goodput of the capacity steps (no control).
    #[serde(default)]
    pub saturation_cps: f64,
    /// Phase 1 steps (mechanism `none`).
    pub capacity_steps: Vec<Point>,
    /// Phase 2.
    pub points: Vec<Point>,
    /// Phase 3.
    pub rejection_cost: Vec<RejectionCost>,
    /// Wall time of the run, s.
    pub elapsed_s: f64,
}

/// Entry point of `holdline lab udp-overload ARGS`.
pub fn main(args: Vec<String>) -> ExitCode {
    lab_main(
        "udp-overload",
        args,
        |a: &Args| a.out.clone(),
        run,
        |r: &Results| r.elapsed_s,
    )
}

/// A mechanism is `ALG[+OPTION]…`: `--overload ALG`, and per option `invite-socket`
/// (`--udp-invite-socket on`), `no-invite-socket` (off), or `KEY=VALUE`, a line of the
/// server's `[overload]` section (e.g. `rejection_budget=0.05`).
struct Mechanism<'a> {
    algorithm: &'a str,
    flags: Vec<String>,
    overload_lines: Vec<String>,
}

impl<'a> Mechanism<'a> {
    fn parse(name: &'a str) -> Result<Self> {
        let mut parts = name.split('+');
        let algorithm = parts.next().unwrap_or_default();
        let mut m = Self {
            algorithm,
            flags: Vec::new(),
            overload_lines: Vec::new(),
        };
        for opt in parts {
            match opt {
                "invite-socket" => m.flags.push("--udp-invite-socket=on".into()),
                "no-invite-socket" => m.flags.push("--udp-invite-socket=off".into()),
                kv => match kv.split_once('=') {
                    Some((k, v)) if !k.is_empty() && !v.is_empty() => {
                        m.overload_lines.push(format!("{k} = {v}"));
                    }
                    _ => {
                        return Err(LabError::Precondition(format!(
                            "mechanism `{name}`: option `{opt}` is not invite-socket, \
                             no-invite-socket or KEY=VALUE"
                        )));
                    }
                },
            }
        }
        Ok(m)
    }
}

/// The file-name tag of run `run` of mechanism `m` at load factor `f`.
fn run_tag(m: &str, f: f64, run: u32) -> String {
    if run == 0 {
        format!("{m}-{f}x")
    } else {
        format!("{m}-{f}x-r{run}")
    }
}

/// One point per mechanism and load factor: the median of its runs, field by field, and
/// the runs' lowest and highest steady goodput.
fn medians(points: &[Point]) -> Vec<(Point, usize, f64, f64)> {
    let mut keys: Vec<(String, f64)> = Vec::new();
    for p in points {
        if !keys
            .iter()
            .any(|(m, f)| m == &p.mechanism && (f - p.load_factor).abs() < 1e-9)
        {
            keys.push((p.mechanism.clone(), p.load_factor));
        }
    }
    keys.into_iter()
        .filter_map(|(m, f)| {
            let runs: Vec<&Point> = points
                .iter()
                .filter(|p| p.mechanism == m && (p.load_factor - f).abs() < 1e-9)
                .collect();
            let first = (*runs.first()?).clone();
            let med = |g: fn(&Point) -> f64| median(runs.iter().map(|p| g(p)).collect());
            let steady: Vec<f64> = runs.iter().map(|p| p.goodput_steady_cps).collect();
            let lo = steady.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = steady.iter().copied().fold(0.0f64, f64::max);
            let p = Point {
                offered_cps: med(|p| p.offered_cps),
                throughput_cps: med(|p| p.throughput_cps),
                goodput_cps: med(|p| p.goodput_cps),
                goodput_steady_cps: med(|p| p.goodput_steady_cps),
                pdd_p50_ms: med(|p| p.pdd_p50_ms),
                pdd_p99_ms: med(|p| p.pdd_p99_ms),
                retrans_200: med(|p| p.retrans_200 as f64) as u64,
                retrans_invite: med(|p| p.retrans_invite as f64) as u64,
                calls_attempted: med(|p| p.calls_attempted as f64) as u64,
                calls_ok: med(|p| p.calls_ok as f64) as u64,
                r503: med(|p| p.r503 as f64) as u64,
                timeouts: med(|p| p.timeouts as f64) as u64,
                server_cpu_s: med(|p| p.server_cpu_s),
                server_busy: med(|p| p.server_busy),
                server_rejected: med(|p| p.server_rejected as f64) as u64,
                ..first
            };
            Some((p, runs.len(), lo, hi))
        })
        .collect()
}

/// What one server run is.
struct Spec<'a> {
    mechanism: &'a str,
    cost_us: u64,
    reject_cost_us: u64,
    rate: f64,
    duration_s: f64,
    drain_s: f64,
    tag: String,
    /// The `cgroup.procs` file of the CPU group the server is born in, if any.
    group: Option<&'a Path>,
}

/// [`run_point_once`], again with fresh ports when a process could not bind its port.
fn run_point(
    exe: &Path,
    runs: &Path,
    spec: &Spec<'_>,
    capacity: f64,
    extra_config: Option<&Path>,
) -> Result<(Point, Value)> {
    crate::runner::with_fresh_ports("udp-overload", &spec.tag, || {
        run_point_once(exe, runs, spec, capacity, extra_config)
    })
}

/// Runs one point: a fresh server, UAS and UAC; returns the point and the UAC report.
fn run_point_once(
    exe: &Path,
    runs: &Path,
    spec: &Spec<'_>,
    capacity: f64,
    extra_config: Option<&Path>,
) -> Result<(Point, Value)> {
    let mechanism = Mechanism::parse(spec.mechanism)?;
    let (port, uas_port, metrics_port) = (free_port()?, free_port()?, free_port()?);
    let mut serve: Vec<String> = vec![
        "serve".into(),
        format!("--listen=udp:127.0.0.1:{port}"),
        format!("--route=*=udp:127.0.0.1:{uas_port}"),
        "--workers=1".into(),
        "--store=memory".into(),
        // The kernel's default receive buffer, as the papers' servers had it (and the
        // simulator's scenarios model): holdline's own default is 8 MiB.
        format!("--udp-recv-buffer={}", crate::KERNEL_UDP_RECV_BUFFER),
        format!("--metrics=127.0.0.1:{metrics_port}"),
        format!("--overload={}", mechanism.algorithm),
        format!("--emulate-cost-us={}", spec.cost_us),
        format!("--emulate-reject-cost-us={}", spec.reject_cost_us),
    ];
    serve.extend(mechanism.flags.iter().cloned());
    if let Some(cfg) = extra_config {
        serve.push(format!("--config={}", cfg.display()));
    } else if !mechanism.overload_lines.is_empty() {
        let cfg = runs.join(format!("{}-serve.toml", spec.tag));
        let text = format!("[overload]\n{}\n", mechanism.overload_lines.join("\n"));
        std::fs::write(&cfg, text)
            .map_err(|e| LabError::io(format!("write {}", cfg.display()), e))?;
        serve.push(format!("--config={}", cfg.display()));
    }
    let log = runs.join(format!("{}-serve.log", spec.tag));
    let mut server = spawn_in(SERVER_CORE, spec.group, exe, &serve, &log)?;
    wait_bound(
        &mut server.0,
        port,
        Some(Transport::Udp),
        "holdline serve",
        &log,
    )?;
    let limit = spec.duration_s + spec.drain_s + 5.0;
    let uas_json = runs.join(format!("{}-uas.json", spec.tag));
    let uac_json = runs.join(format!("{}-uac.json", spec.tag));
    let mut uas = start_uas(
        exe,
        runs,
        &spec.tag,
        uas_port,
        Transport::Udp,
        false,
        limit + 2.0,
    )?;
    let cpu0 = procfs::tree_cpu_us(server.0.id());
    let t0 = Instant::now();
    let mut uac = spawn(
        GENERATOR_CORE,
        exe,
        &[
            "load".into(),
            "uac".into(),
            format!("--target=127.0.0.1:{port}"),
            format!("--rate={}", spec.rate),
            format!("--duration={}", spec.duration_s),
            format!("--drain={}", spec.drain_s),
            format!("--goodput-window={GOODPUT_WINDOW_S}"),
            format!("--max-time={limit}"),
            format!("--json={}", uac_json.display()),
            format!(
                "--csv={}",
                runs.join(format!("{}-uac.csv", spec.tag)).display()
            ),
            "--progress=off".into(),
        ],
        &runs.join(format!("{}-uac.log", spec.tag)),
    )?;
    let exited = wait_bounded(&mut uac.0, Duration::from_secs_f64(limit + 5.0));
    let window = t0.elapsed().as_secs_f64();
    let cpu1 = procfs::tree_cpu_us(server.0.id());
    let metrics = scrape(metrics_port);
    // The UAS writes its report on SIGTERM.
    terminate(&uas.0);
    wait_bounded(&mut uas.0, Duration::from_secs(5));
    // The server's metrics once its worker is done (what it read, by kind: the core's
    // lines), beside its log for diagnosis; a few seconds at most.
    let settled = scrape_fresh(metrics_port, Duration::from_secs(5));
    let file = runs.join(format!("{}-serve.metrics", spec.tag));
    std::fs::write(&file, settled)
        .map_err(|e| LabError::io(format!("write {}", file.display()), e))?;
    drop(server);
    if !exited {
        return Err(LabError::Process(format!(
            "{}: the UAC overran its time limit; log {}",
            spec.tag,
            tail(&runs.join(format!("{}-uac.log", spec.tag)))
        )));
    }
    let uac_r = read_json(&uac_json)?;
    let uas_r = read_json(&uas_json).unwrap_or(Value::Null);
    let load_s = num(&uac_r, &["load_duration_s"]).max(1e-3);
    let cpu_s = cpu1.saturating_sub(cpu0) as f64 / 1e6;
    let point = Point {
        experiment: "udp-overload".into(),
        mechanism: spec.mechanism.to_string(),
        ses: None,
        load_factor: if capacity > 0.0 {
            spec.rate / capacity
        } else {
            0.0
        },
        offered_cps: num(&uac_r, &["offered_cps"]),
        capacity_cps: capacity,
        throughput_cps: count(&uas_r, &["totals", "completed"]) as f64 / load_s,
        goodput_cps: num(&uac_r, &["goodput_cps"]),
        goodput_steady_cps: steady(
            &runs.join(format!("{}-uac.csv", spec.tag)),
            "goodput",
            spec.duration_s,
        ),
        pdd_p50_ms: num(&uac_r, &["pdd_p50_ms"]),
        pdd_p99_ms: num(&uac_r, &["pdd_p99_ms"]),
        pdd_mean_ms: Some(num(&uac_r, &["latency", "pdd", "mean_ms"])),
        retrans_200: count(&uas_r, &["totals", "retrans_200"]),
        retrans_invite: count(&uac_r, &["totals", "retrans_invite"]),
        fairness: None,
        calls_attempted: count(&uac_r, &["totals", "attempted"]),
        calls_ok: count(&uac_r, &["totals", "calls_ok"]),
        r503: count(&uac_r, &["totals", "r503"]),
        timeouts: count(&uac_r, &["totals", "timeouts"]),
        server_cpu_s: cpu_s,
        server_busy: cpu_s / window.max(1e-3),
        server_rejected: metric(&metrics, "holdline_sip_rejected_overload_total") as u64,
        run: 0,
        service_us_measured: (spec.cost_us >= 500)
            .then(|| processing_us_above(&metrics, 0.0005))
            .flatten(),
        tag: Some(spec.tag.clone()),
    };
    Ok((point, uac_r))
}

fn progress(i: usize, n: usize, p: &Point, started: Instant) {
    eprintln!(
        "[{i}/{n} {:>4.0} s] {:<12} {:>5.2}x offered {:>7.1}/s  throughput {:>7.1}/s  goodput {:>7.1}/s  PDD p50 {:>7.1} ms p99 {:>8.1} ms  503 {:>6}  INVITE retrans {:>6}",
        started.elapsed().as_secs_f64(),
        p.mechanism,
        p.load_factor,
        p.offered_cps,
        p.throughput_cps,
        p.goodput_cps,
        p.pdd_p50_ms,
        p.pdd_p99_ms,
        p.r503,
        p.retrans_invite
    );
}

/// Runs the experiment and writes its results.
pub fn run(args: &Args) -> Result<Results> {
    if args.sweep.replot {
        return replot(&args.out);
    }
    check_tools()?;
    let started = Instant::now();
    let exe = holdline_exe(args.sweep.exe.as_deref())?;
    let runs = args.out.join("runs");
    std::fs::create_dir_all(&runs)
        .map_err(|e| LabError::io(format!("create {}", runs.display()), e))?;
    let duration = args
        .sweep
        .duration
        .unwrap_or(if args.sweep.quick { 4.0 } else { 20.0 });
    let drain = GOODPUT_WINDOW_S;
    let loads = if args.sweep.loads.is_empty() {
        if args.sweep.quick {
            vec![0.5, 2.0, 5.0, 10.0]
        } else {
            vec![0.5, 0.8, 1.0, 1.5, 2.0, 3.0, 5.0, 7.0, 10.0]
        }
    } else {
        args.sweep.loads.clone()
    };
    let mechanisms: Vec<String> = if args.sweep.mechanisms.is_empty() {
        let mut m = vec!["none", "queue-limit", "occ"];
        if !args.sweep.quick {
            m.push("queue-delay");
        }
        m.into_iter().map(String::from).collect()
    } else {
        args.sweep.mechanisms.clone()
    };
    let quota = args.cpu_quota;
    let group = match quota {
        Some(pct) => Some(CpuGroup::create(
            &format!("holdline-udp-overload-{}", std::process::id()),
            args.quota_period_us,
            args.quota_period_us * pct / 100,
        )?),
        None => None,
    };
    let procs = group.as_ref().map(CpuGroup::procs_file);
    // Capacity steps (factors of the nominal capacity). Under a quota the nominal figure
    // comes from an unloaded server, whose CPU per call is higher than a saturated one's
    // (no batching), so the steps ramp up geometrically until they stop being clean.
    let steps: Vec<f64> = match (quota.is_some(), args.sweep.quick) {
        (false, true) => vec![0.7, 0.85, 1.0],
        (false, false) => vec![0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2],
        (true, _) => (0..QUOTA_RAMP_STEPS)
            .map(|k| 0.8 * QUOTA_RAMP_FACTOR.powi(k))
            .collect(),
    };
    // Rejection-cost runs: one per distinct call rate and one per pair.
    let pairs: Vec<(f64, f64)> = COST_PAIRS
        .iter()
        .copied()
        .filter(|p| quota.is_none() && (!args.sweep.quick || p.0 >= 5000.0))
        .collect();
    let mut call_rates: Vec<f64> = pairs.iter().map(|p| p.0).collect();
    call_rates.dedup();
    let total = usize::from(quota.is_some())
        + steps.len()
        + loads.len() * mechanisms.len() * args.repeat as usize
        + pairs.len()
        + call_rates.len();
    let mut done = 0;
    // Nominal capacity: from the emulated cost, or under a quota from the CPU a call costs
    // (measured without quota and without control).
    let mut calibration = None;
    let nominal = match quota {
        None => 1e6 / (MESSAGES_PER_CALL * args.sweep.cost_us.max(1) as f64),
        Some(pct) => {
            let spec = Spec {
                mechanism: "none",
                cost_us: args.sweep.cost_us,
                reject_cost_us: args.sweep.reject_cost_us,
                rate: CALIBRATION_CPS,
                duration_s: 5.0,
                drain_s: 3.0,
                tag: "calibration".into(),
                group: None,
            };
            let (p, _) = run_point(&exe, &runs, &spec, 0.0, None)?;
            done += 1;
            progress(done, total, &p, started);
            let per_call = p.server_cpu_s * 1e6 / p.calls_ok.max(1) as f64;
            calibration = Some(per_call);
            pct as f64 / 100.0 * 1e6 / per_call.max(1.0)
        }
    };
    eprintln!(
        "udp-overload: emulated cost {} µs per message (rejections {} µs){}, nominal capacity {:.0} calls/s; {} points of {:.0} s",
        args.sweep.cost_us,
        args.sweep.reject_cost_us,
        match (quota, calibration) {
            (Some(pct), Some(c)) => format!(
                ", CPU quota {pct}% of a core (period {} µs), {c:.1} µs CPU per call",
                args.quota_period_us
            ),
            _ => String::new(),
        },
        nominal,
        total,
        duration
    );

    // Phase 1: capacity.
    let mut capacity_steps = Vec::new();
    let mut capacity = 0.0f64;
    for &f in &steps {
        let rate = (nominal * f).round();
        let spec = Spec {
            mechanism: "none",
            cost_us: args.sweep.cost_us,
            reject_cost_us: args.sweep.reject_cost_us,
            rate,
            duration_s: duration,
            drain_s: drain,
            tag: format!("capacity-{rate}"),
            group: procs.as_deref(),
        };
        let (mut p, _) = run_point(&exe, &runs, &spec, 0.0, None)?;
        p.load_factor = f;
        done += 1;
        progress(done, total, &p, started);
        let clean = p.calls_attempted > 0
            && p.calls_ok == p.calls_attempted
            && p.pdd_p99_ms <= 200.0
            && p.retrans_invite == 0;
        if clean {
            capacity = capacity.max(rate);
        }
        // Under a quota the ramp goes on until the server is saturated: calls fail or wait.
        let saturated =
            (p.calls_ok as f64) < 0.98 * p.calls_attempted as f64 || p.pdd_p99_ms > 1000.0;
        capacity_steps.push(p);
        if quota.is_some() && saturated {
            break;
        }
    }
    if capacity == 0.0 {
        capacity = nominal * steps[0];
        eprintln!(
            "udp-overload: no capacity step was clean; using {capacity:.0} calls/s (the lowest step)"
        );
    }
    let saturation = capacity_steps
        .iter()
        .map(|p| p.goodput_steady_cps)
        .fold(0.0f64, f64::max);
    eprintln!(
        "udp-overload: capacity {capacity:.0} calls/s, saturation throughput {saturation:.0} calls/s"
    );
    // Load factors are multiples of the capacity; under a quota, of the saturation
    // throughput (the goodput ceiling: throttling makes the clean-capacity rule noisy).
    let reference = if quota.is_some() && saturation > 0.0 {
        saturation
    } else {
        capacity
    };

    // Phase 2: the curve.
    let reject_all = args.out.join("reject-all.toml");
    std::fs::write(
        &reject_all,
        "# rejects every new INVITE: the queue length is never below 1\n[overload]\nlocal = \"queue-limit\"\nqueue_limit = 1\n",
    )
    .map_err(|e| LabError::io(format!("write {}", reject_all.display()), e))?;
    let mut points = Vec::new();
    let mut pdd: Vec<(String, Value)> = Vec::new();
    let top = loads.iter().copied().fold(0.0f64, f64::max);
    for &f in &loads {
        for run in 0..args.repeat {
            for m in &mechanisms {
                let spec = Spec {
                    mechanism: m,
                    cost_us: args.sweep.cost_us,
                    reject_cost_us: args.sweep.reject_cost_us,
                    rate: (reference * f).round(),
                    duration_s: duration,
                    drain_s: drain,
                    tag: run_tag(m, f, run),
                    group: procs.as_deref(),
                };
                let (mut p, uac) = run_point(&exe, &runs, &spec, reference, None)?;
                p.run = run;
                done += 1;
                progress(done, total, &p, started);
                if f == top && run == 0 {
                    pdd.push((m.clone(), uac["latency"]["pdd"].clone()));
                }
                points.push(p);
            }
        }
    }

    // Phase 3: what a rejection costs, without emulation: calls at one rate against
    // rejections at the same rate and, for a server busy rejecting (the case that matters),
    // rejections at three times the rate of calls near the server's capacity.
    let mut rejection_cost = Vec::new();
    let mut call_runs: Vec<(f64, Point)> = Vec::new();
    for &(rate, rejected) in &pairs {
        let base = Spec {
            mechanism: "none",
            cost_us: 0,
            reject_cost_us: 0,
            rate,
            duration_s: duration.min(8.0),
            drain_s: 3.0,
            tag: format!("cost-calls-{rate}"),
            group: None,
        };
        let calls = match call_runs.iter().find(|(r, _)| *r == rate) {
            Some((_, p)) => p.clone(),
            None => {
                let (calls, _) = run_point(&exe, &runs, &base, 0.0, None)?;
                done += 1;
                progress(done, total, &calls, started);
                call_runs.push((rate, calls.clone()));
                calls
            }
        };
        let rej = Spec {
            mechanism: "queue-limit",
            rate: rejected,
            tag: format!("cost-rejections-{rejected}"),
            ..base
        };
        let (rejects, _) = run_point(&exe, &runs, &rej, 0.0, Some(&reject_all))?;
        done += 1;
        progress(done, total, &rejects, started);
        let per_call = calls.server_cpu_s * 1e6 / (calls.calls_ok.max(1)) as f64;
        let n_rejected = rejects.server_rejected.max(1) as f64;
        let uncorrected = rejects.server_cpu_s * 1e6 / n_rejected;
        // The gate admits whenever the queue is empty: those calls cost what a call costs.
        let admitted_us = rejects.calls_ok as f64 * per_call;
        let per_rej = (rejects.server_cpu_s * 1e6 - admitted_us).max(0.0) / n_rejected;
        eprintln!(
            "udp-overload: {per_call:.1} µs per completed call at {rate:.0}/s, {per_rej:.1} µs per rejected INVITE at {rejected:.0}/s ({:.2}; {} calls admitted, {uncorrected:.1} µs without subtracting them)",
            per_rej / per_call,
            rejects.calls_ok
        );
        rejection_cost.push(RejectionCost {
            offered_cps: rate,
            rejected_cps: rejected,
            cpu_us_per_call: per_call,
            cpu_us_per_rejection: per_rej,
            calls_admitted: Some(rejects.calls_ok),
            cpu_us_per_rejection_uncorrected: Some(uncorrected),
            ratio: per_rej / per_call,
        });
    }

    let results = Results {
        experiment: "udp-overload".into(),
        command: crate::runner::command_line(),
        started_unix_s: crate::runner::started_unix_s(started),
        quick: args.sweep.quick,
        machine: machine(),
        emulate_cost_us: args.sweep.cost_us,
        emulate_reject_cost_us: args.sweep.reject_cost_us,
        nominal_capacity_cps: nominal,
        capacity_cps: capacity,
        cpu_quota_percent: quota,
        quota_period_us: quota.map(|_| args.quota_period_us),
        calibration_cpu_us_per_call: calibration,
        saturation_cps: saturation,
        capacity_steps,
        points,
        rejection_cost,
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    drop(group);
    write(&args.out, &results, &mechanisms, &pdd)?;
    Ok(results)
}

/// Rewrites `points.csv` and the plots from `DIR/results.json` and the UAC reports in
/// `DIR/runs`.
fn replot(out: &Path) -> Result<Results> {
    let r: Results = crate::runner::read_results(out)?;
    let mut mechanisms: Vec<String> = Vec::new();
    for p in &r.points {
        if !mechanisms.contains(&p.mechanism) {
            mechanisms.push(p.mechanism.clone());
        }
    }
    let top = r
        .points
        .iter()
        .map(|p| p.load_factor)
        .fold(0.0f64, f64::max);
    let mut pdd = Vec::new();
    for m in &mechanisms {
        // The UAC report of the top point, named as `run` named it.
        let Some(p) = r
            .points
            .iter()
            .find(|p| &p.mechanism == m && (p.load_factor - top).abs() < 1e-6)
        else {
            continue;
        };
        let f = p.load_factor;
        if let Ok(v) = read_json(
            &out.join("runs")
                .join(format!("{}-uac.json", run_tag(m, f, 0))),
        ) {
            pdd.push((m.clone(), v["latency"]["pdd"].clone()));
        }
    }
    write(out, &r, &mechanisms, &pdd)?;
    Ok(r)
}

fn write(out: &Path, r: &Results, mechanisms: &[String], pdd: &[(String, Value)]) -> Result<()> {
    let json = serde_json::to_string_pretty(r).map_err(|e| LabError::Report {
        path: out.join("results.json"),
        reason: e.to_string(),
    })?;
    std::fs::write(out.join("results.json"), json)
        .map_err(|e| LabError::io("write results.json", e))?;
    let mut csv = String::from(
        "experiment,mechanism,ses,load_factor,offered_cps,capacity_cps,throughput_cps,goodput_cps,goodput_steady_cps,pdd_p50_ms,pdd_p99_ms,retrans_200,retrans_invite,fairness,calls_attempted,calls_ok,r503,timeouts,server_cpu_s,server_busy,server_rejected,run\n",
    );
    for p in &r.points {
        csv.push_str(&format!(
            "{},{},,{:.3},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{},{},,{},{},{},{},{:.3},{:.3},{},{}\n",
            p.experiment,
            p.mechanism,
            p.load_factor,
            p.offered_cps,
            p.capacity_cps,
            p.throughput_cps,
            p.goodput_cps,
            p.goodput_steady_cps,
            p.pdd_p50_ms,
            p.pdd_p99_ms,
            p.retrans_200,
            p.retrans_invite,
            p.calls_attempted,
            p.calls_ok,
            p.r503,
            p.timeouts,
            p.server_cpu_s,
            p.server_busy,
            p.server_rejected,
            p.run
        ));
    }
    std::fs::write(out.join("points.csv"), csv).map_err(|e| LabError::io("write points.csv", e))?;
    let summary = medians(&r.points);
    let mut text = String::from(
        "mechanism,load_factor,runs,offered_cps,goodput_steady_cps,goodput_steady_min,goodput_steady_max,goodput_steady_of_saturation,throughput_cps,pdd_p50_ms,pdd_p99_ms,retrans_invite,retrans_200,r503\n",
    );
    for (p, n, lo, hi) in &summary {
        text.push_str(&format!(
            "{},{:.3},{n},{:.1},{:.1},{lo:.1},{hi:.1},{:.3},{:.1},{:.1},{:.1},{},{},{}\n",
            p.mechanism,
            p.load_factor,
            p.offered_cps,
            p.goodput_steady_cps,
            if r.saturation_cps > 0.0 {
                p.goodput_steady_cps / r.saturation_cps
            } else {
                0.0
            },
            p.throughput_cps,
            p.pdd_p50_ms,
            p.pdd_p99_ms,
            p.retrans_invite,
            p.retrans_200,
            p.r503
        ));
    }
    std::fs::write(out.join("summary.csv"), text)
        .map_err(|e| LabError::io("write summary.csv", e))?;
    let median_points: Vec<Point> = summary.into_iter().map(|(p, ..)| p).collect();
    let mut series = Vec::new();
    for m in mechanisms {
        let pts = |f: fn(&Point) -> f64| -> Vec<(f64, f64)> {
            median_points
                .iter()
                .filter(|p| &p.mechanism == m)
                .map(|p| (p.offered_cps, f(p)))
                .collect()
        };
        series.push((format!("{m}: throughput"), pts(|p| p.throughput_cps)));
    }
    series.push((
        "capacity".to_string(),
        median_points
            .iter()
            .map(|p| (p.offered_cps, r.capacity_cps))
            .collect::<Vec<_>>(),
    ));
    for s in &mut series {
        s.1.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    plot::chart(
        out,
        "throughput",
        &format!(
            "UDP, one server, capacity {:.0} calls/s: throughput (ACK reached the UAS) vs offered",
            r.capacity_cps
        ),
        "offered calls/s",
        "calls/s",
        &series,
    )?;
    // Steady goodput against offered load, with the saturation throughput.
    let mut good: Vec<(String, Vec<(f64, f64)>)> = mechanisms
        .iter()
        .map(|m| {
            let mut v: Vec<(f64, f64)> = median_points
                .iter()
                .filter(|p| &p.mechanism == m)
                .map(|p| (p.offered_cps, p.goodput_steady_cps))
                .collect();
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            (format!("{m}: steady goodput"), v)
        })
        .collect();
    if r.saturation_cps > 0.0 {
        let mut xs: Vec<f64> = median_points.iter().map(|p| p.offered_cps).collect();
        xs.sort_by(f64::total_cmp);
        good.push((
            "saturation throughput".to_string(),
            xs.into_iter().map(|x| (x, r.saturation_cps)).collect(),
        ));
    }
    plot::chart(
        out,
        "goodput",
        &format!(
            "UDP, one server{}: steady goodput (200 OK within 10 s) vs offered",
            r.cpu_quota_percent
                .map(|q| format!(", CPU quota {q}%"))
                .unwrap_or_default()
        ),
        "offered calls/s",
        "calls/s",
        &good,
    )?;
    // PDD distribution from the UAC's percentiles, at the highest load.
    let cdf: Vec<(String, Vec<(f64, f64)>)> = pdd
        .iter()
        .map(|(m, v)| (m.clone(), cdf_points(v)))
        .collect();
    plot::chart(
        out,
        "pdd",
        "PDD distribution of completed calls at the highest load (from the UAC's percentiles)",
        "post-dial delay, ms",
        "% of completed calls",
        &cdf,
    )?;
    Ok(())
}
