//! `holdline lab scaling`: seed 001's two-stage architecture measured the way the paper did
//! (SIPstone Proxy 200, §5.1), on real processes.
//!
//! A configuration `SnPm` has `n` first-stage servers and `m` second-stage servers (one per
//! group, the paper's `B = 1`); `S0P1` is one proxy alone. Every server is a `holdline serve
//! --workers 1` in a cgroup v1 CPU group of its own with the same quota (`--quota`, default
//! 10% of a core), all pinned to the server core, so that servers are equal and slow and the
//! generator (on the other core) is never the bottleneck. The second stages are registrars
//! of `example.com` (in-memory stores); each first stage serves no domain and hashes every
//! request for `example.com` to one of the second stages (`[[hash_routes]]`: rendezvous
//! hashing of the address-of-record). For every offered rate a fresh set of servers is
//! started (the paper restarts its servers per rate):
//!
//! 1. `holdline load uas` (the call handler) registers `--users` users through the first
//!    first-stage server (to the second stage directly in `S0P1`), which hashes each
//!    REGISTER to the second stage that owns the user; the lab waits until the second
//!    stages hold every binding.
//! 2. `holdline load uac` (the loader) places calls to those users with Poisson arrivals for
//!    `--step-seconds`, each call to a first-stage server picked at random (`--spread`), the
//!    INVITE, 180, 200, ACK, BYE, 200 all record-routed through both stages. A call counts
//!    as good when its 200 OK came within 2 s (SIPstone's rule; `--goodput-window 2`); calls
//!    not answered 3 s after the last arrival are failed.
//!
//! Before the configurations, the lab calibrates the two capacities of the paper's model with
//! the same quota: `C_p`, one second stage alone (`S0P1`), and `C_s`, one first stage
//! hashing straight to the call handler; each is the highest goodput of a doubling search of
//! offered rates. Each configuration is then offered `--loads` times its expected capacity
//! `min(n·C_s, m·C_p)`, and its measured throughput (the highest goodput) is compared with
//! the paper's model `τ(λ) = Σ_j min(f_j · min(λ, n·C_s), C_p)` with `f_j` the measured share
//! of INVITEs each second stage received (the hash skew), as `../shared/seeds/NOTES.md` says.
//!
//! `--first-stage-mode stateless` writes `mode = "stateless"` into the first stages'
//! configuration files (seed 001's stateless first stage with stateful fallback; the second
//! stages stay stateful), so `C_s` and every `SnPm` are measured with stateless first stages;
//! the mode is recorded in `results.json` and `summary.md`.
//!
//! Output in `--out DIR`: `results.json` (calibration, every step, per configuration its
//! throughput, its ratio to `S1P1`, its shares and its model), `steps.csv`, `summary.md`,
//! `throughput.svg/png` (goodput against offered load, measured and model, one pair of lines
//! per configuration), and every process's log and report under `runs/`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use serde::Serialize;
use serde_json::Value;

use crate::cgroup::{CpuGroup, feasible_quota};
use crate::error::{LabError, Result};
use crate::generator::{GENERATOR_CORE, count, num, read_json, wait_bounded};
use crate::plot;
use crate::runner::{
    Proc, RunHeader, check_tools, holdline_exe, lab_main, metric, metric_where, scrape, spawn,
    spawn_in, with_fresh_ports,
};
use crate::server::{SERVER_CORE, Transport, free_port, wait_bound};

/// The domain the second stages serve.
const DOMAIN: &str = "example.com";
/// The CFS period of every server's quota, µs.
const QUOTA_PERIOD_US: u64 = 10_000;
/// SIPstone: a call fails without a 200 OK within 2 s.
const GOODPUT_WINDOW_S: f64 = 2.0;
/// The loader's wait for answers after its last arrival.
const DRAIN_S: f64 = 3.0;
/// New registrations per second while the call handler registers its users.
const REGISTER_RATE: f64 = 500.0;
/// The longest wait for every user to be registered.
const REGISTER_LIMIT: Duration = Duration::from_secs(60);
/// The most first-stage servers: the loader's first hops (`holdline load uac --alternate`).
const MAX_FIRST: usize = 8;
/// Poll period of the wait for every user's registration.
const REGISTER_POLL: Duration = Duration::from_millis(250);
/// Offered rates of the calibration's doubling search start here, calls/s.
const CALIBRATION_START: f64 = 500.0;
/// The doubling search stops when goodput falls below this share of the offered rate.
const CALIBRATION_SATURATED: f64 = 0.95;
/// At most this many doublings.
const CALIBRATION_STEPS: usize = 6;

/// `holdline lab scaling` options.
#[derive(Debug, Parser)]
#[command(
    name = "holdline lab scaling",
    about = "seed 001's SnPm two-stage configurations (SIPstone Proxy 200): throughput vs offered load, beside the paper's model"
)]
pub(crate) struct Args {
    /// Fewer, shorter steps (a few minutes in all).
    #[arg(long)]
    pub quick: bool,
    /// Where results go.
    #[arg(long, value_name = "DIR", default_value = "lab-results/scaling")]
    pub out: PathBuf,
    /// Configurations, comma-separated (`S0P1`, `S1P1`, … `SnPm`).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "S0P1,S1P1,S1P2,S2P2,S3P3"
    )]
    pub configs: Vec<String>,
    /// Each server's CPU quota, percent of one core.
    #[arg(long, value_name = "PCT", default_value_t = 10)]
    pub quota: u64,
    /// Seconds of offered load per step (the paper: 60; default 60, `--quick` 5).
    #[arg(long, value_name = "S")]
    pub step_seconds: Option<f64>,
    /// Offered loads, multiples of each configuration's expected capacity.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub loads: Vec<f64>,
    /// Users registered and called.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub users: u64,
    /// Seconds of offered load per calibration point (default 10, `--quick` 4).
    #[arg(long, value_name = "S")]
    pub calibration_seconds: Option<f64>,
    /// Skip the calibration: use these capacities, calls/s (`C_s,C_p`).
    #[arg(long, value_name = "CS,CP", value_delimiter = ',')]
    pub capacities: Vec<f64>,
    /// An extra argument for every `holdline serve` (repeat for more), e.g.
    /// `--serve-arg=--overload=none` to compare overload control.
    #[arg(long = "serve-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub serve_args: Vec<String>,
    /// The `holdline` binary to run (default: this one).
    #[arg(long, value_name = "PATH")]
    pub exe: Option<PathBuf>,
    /// The first stages' `mode` (their configuration files only; the second stages stay
    /// stateful): `stateless` is seed 001's stateless first stage with stateful fallback.
    #[arg(
        long,
        value_name = "MODE",
        default_value = "stateful",
        value_parser = ["stateful", "stateless"]
    )]
    pub first_stage_mode: String,
}

/// `n` first-stage and `m` second-stage servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Config {
    /// First-stage servers (0: the loader calls the one second stage directly).
    pub n: usize,
    /// Second-stage servers.
    pub m: usize,
}

impl Config {
    /// Parses `SnPm` (case-insensitive); `n` at most 8 (the loader's hops), `m` 1 to 8, and
    /// `S0` only with `P1`.
    pub(crate) fn parse(s: &str) -> std::result::Result<Self, String> {
        let bad = || format!("configuration `{s}`: expected SnPm, e.g. S2P2");
        let up = s.trim().to_ascii_uppercase();
        let rest = up.strip_prefix('S').ok_or_else(bad)?;
        let (n, m) = rest.split_once('P').ok_or_else(bad)?;
        let n: usize = n.parse().map_err(|_| bad())?;
        let m: usize = m.parse().map_err(|_| bad())?;
        if n > MAX_FIRST || !(1..=8).contains(&m) || (n == 0 && m != 1) {
            return Err(format!(
                "configuration `{s}`: n must be 0 to {MAX_FIRST} and m 1 to 8 (S0 only with P1)"
            ));
        }
        Ok(Self { n, m })
    }

    /// `SnPm`.
    pub(crate) fn name(self) -> String {
        format!("S{}P{}", self.n, self.m)
    }

    /// The capacity the model expects with equal shares: `min(n·C_s, m·C_p)` (`C_p` for
    /// `S0P1`).
    pub(crate) fn expected(self, cs: f64, cp: f64) -> f64 {
        if self.n == 0 {
            cp
        } else {
            (self.n as f64 * cs).min(self.m as f64 * cp)
        }
    }
}

/// The paper's model (seed 001 §5.2, as corrected in NOTES.md): the throughput at offered
/// load `lambda` of `n` first stages of capacity `cs` hashing to second stages of capacity
/// `cp` with shares `f` (summing to 1). `n = 0`: one second stage alone.
pub(crate) fn model(lambda: f64, n: usize, cs: f64, cp: f64, f: &[f64]) -> f64 {
    let first = if n == 0 {
        lambda
    } else {
        lambda.min(n as f64 * cs)
    };
    f.iter().map(|fj| (fj * first).min(cp)).sum()
}

/// One offered rate of one configuration.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Step {
    /// `SnPm`, or `calibrate-Cp` / `calibrate-Cs`.
    pub config: String,
    /// Offered calls per second.
    pub offered_cps: f64,
    /// Calls placed.
    pub attempted: u64,
    /// Calls completed (200, ACK, BYE, 200).
    pub calls_ok: u64,
    /// Calls failed (a failure response, a timeout, or unanswered at the end).
    pub calls_failed: u64,
    /// Calls answered 200 within 2 s, per second of offered load.
    pub goodput_cps: f64,
    /// `503`s the loader received.
    pub r503: u64,
    /// `500`s the loader received: in this set-up a second stage's 503 that a stateful first
    /// stage relays as 500 (RFC 3261 §16.7: a lone 503 is not passed upstream; the cause
    /// rides in its `Reason` header, RFC 3326) — overload shedding like `r503`.
    #[serde(default)]
    pub r503_relayed: u64,
    /// Post-dial delay p50 / p99, ms.
    pub pdd_p50_ms: f64,
    /// Post-dial delay p99, ms.
    pub pdd_p99_ms: f64,
    /// INVITE retransmissions.
    pub retrans_invite: u64,
    /// The share of INVITEs each second stage received.
    pub shares: Vec<f64>,
    /// Each server's CPU over the step, share of one core (first stages, then second).
    pub cpu: Vec<f64>,
    /// Seconds the step's load lasted.
    pub load_s: f64,
}

/// A configuration's summary.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ConfigResult {
    /// `SnPm`.
    pub config: String,
    /// Its `n` and `m`.
    pub n: usize,
    /// Second-stage servers.
    pub m: usize,
    /// Expected capacity, `min(n·C_s, m·C_p)`.
    pub expected_cps: f64,
    /// Measured throughput: the highest goodput of its steps.
    pub throughput_cps: f64,
    /// Throughput over `S1P1`'s (when measured).
    pub ratio_to_s1p1: Option<f64>,
    /// The model's capacity with the measured shares.
    pub model_cps: f64,
    /// Mean share of INVITEs per second stage over its steps.
    pub shares: Vec<f64>,
    /// Goodput at the highest offered load over the throughput: whether the configuration
    /// holds its capacity above overload (1 = fully).
    pub held_at_max_load: f64,
}

/// Everything `results.json` holds.
#[derive(Debug, Serialize)]
pub(crate) struct Results {
    #[serde(flatten)]
    header: RunHeader,
    /// Each server's CPU quota, percent of one core.
    pub quota_percent: u64,
    /// The CFS period and quota actually set, µs.
    pub cfs_period_us: u64,
    /// CFS quota, µs.
    pub cfs_quota_us: u64,
    /// Users registered and called.
    pub users: u64,
    /// Extra arguments of every `holdline serve`.
    pub serve_args: Vec<String>,
    /// The first stages' `mode`: `stateful` or `stateless` (the second stages: stateful).
    pub first_stage_mode: String,
    /// Seconds of offered load per step.
    pub step_seconds: f64,
    /// First-stage capacity under the quota, calls/s.
    pub cs_cps: f64,
    /// Second-stage capacity under the quota, calls/s.
    pub cp_cps: f64,
    /// The calibration's steps.
    pub calibration: Vec<Step>,
    /// Every configuration's steps.
    pub steps: Vec<Step>,
    /// Per configuration.
    pub configs: Vec<ConfigResult>,
    /// Seconds the whole run took.
    pub elapsed_s: f64,
}

/// Runs `holdline lab scaling ARGS`.
pub(crate) fn main(args: Vec<String>) -> ExitCode {
    lab_main::<Args, Results>("scaling", args, |a| a.out.clone(), run, |r| r.elapsed_s)
}

/// The processes of one step, stopped (SIGKILL) when dropped, the loader last started.
struct Cluster {
    /// First stages, then second stages: (process, SIP port, metrics port).
    servers: Vec<(Proc, u16, u16)>,
    /// The second stages' metrics ports.
    second_metrics: Vec<u16>,
    /// The first stages' SIP ports (the loader's hops); the second stage's in S0P1.
    entry_ports: Vec<u16>,
    /// The call handler.
    _uas: Proc,
}

/// What one step needs.
struct Ctx<'a> {
    exe: &'a Path,
    runs: &'a Path,
    groups: &'a [CpuGroup],
    users: u64,
    serve_args: &'a [String],
    /// The first stages' `mode`.
    first_stage_mode: &'a str,
}

/// Starts `holdline serve` as server number `idx` (its own CPU group), with `extra` args.
fn start_server(
    ctx: &Ctx<'_>,
    idx: usize,
    tag: &str,
    extra: &[String],
) -> Result<(Proc, u16, u16)> {
    let (port, metrics) = (free_port()?, free_port()?);
    let log = ctx.runs.join(format!("{tag}.log"));
    let mut args = vec![
        "serve".to_owned(),
        format!("--listen=udp:127.0.0.1:{port}"),
        format!("--metrics=127.0.0.1:{metrics}"),
        "--workers=1".to_owned(),
        "--store=memory".to_owned(),
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(ctx.serve_args);
    let group = ctx.groups.get(idx).map(CpuGroup::procs_file);
    let mut p = spawn_in(SERVER_CORE, group.as_deref(), ctx.exe, &args, &log)?;
    wait_bound(&mut p.0, port, Some(Transport::Udp), "holdline serve", &log)?;
    Ok((p, port, metrics))
}

/// Writes a first stage's configuration: every request for [`DOMAIN`] hashed over `targets`,
/// forwarded in `mode` (`stateful` or `stateless`).
fn first_stage_config(dir: &Path, tag: &str, targets: &[String], mode: &str) -> Result<PathBuf> {
    let path = dir.join(format!("{tag}.toml"));
    let list = targets
        .iter()
        .map(|t| format!("\"{t}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let text = format!(
        "# holdline lab scaling: a first stage (seed 001), hashing each user of {DOMAIN}\n\
         # to one second stage by rendezvous hashing of its address-of-record. Each second\n\
         # stage keeps its own users (no shared store): a 503 is not retried at another,\n\
         # which could only answer 404.\n\
         mode = \"{mode}\"\n\
         [[hash_routes]]\ndomain = \"{DOMAIN}\"\ntargets = [{list}]\nfailover = false\n"
    );
    std::fs::write(&path, text)
        .map_err(|e| LabError::io(format!("write {}", path.display()), e))?;
    Ok(path)
}

/// Starts configuration `c` (`n = 0, m = 0` is the calibration of `C_s`: one first stage
/// hashing straight to the call handler) and registers the users. Returns once every user
/// is registered.
fn start_cluster(ctx: &Ctx<'_>, c: Config, tag: &str) -> Result<Cluster> {
    let uas_port = free_port()?;
    let mut servers = Vec::new();
    let mut second_metrics = Vec::new();
    let mut second_targets = Vec::new();
    let handler_only = c.m == 0;
    for j in 0..c.m {
        let s = start_server(
            ctx,
            c.n + j,
            &format!("{tag}-p{j}"),
            &[format!("--domain={DOMAIN}")],
        )?;
        second_targets.push(format!("udp:127.0.0.1:{}", s.1));
        second_metrics.push(s.2);
        servers.push(s);
    }
    if handler_only {
        second_targets.push(format!("udp:127.0.0.1:{uas_port}"));
    }
    let mut entry_ports = Vec::new();
    let mut firsts = Vec::new();
    for i in 0..c.n {
        let conf = first_stage_config(
            ctx.runs,
            &format!("{tag}-s{i}"),
            &second_targets,
            ctx.first_stage_mode,
        )?;
        let s = start_server(
            ctx,
            i,
            &format!("{tag}-s{i}"),
            &[format!("--config={}", conf.display())],
        )?;
        entry_ports.push(s.1);
        firsts.push(s);
    }
    if c.n == 0 {
        entry_ports.extend(servers.iter().map(|s| s.1));
    }
    firsts.append(&mut servers);
    let servers = firsts;
    let log = ctx.runs.join(format!("{tag}-uas.log"));
    let mut uas_args = vec![
        "load".to_owned(),
        "uas".to_owned(),
        format!("--listen=127.0.0.1:{uas_port}"),
        format!(
            "--json={}",
            ctx.runs.join(format!("{tag}-uas.json")).display()
        ),
        "--max-time=900".to_owned(),
        "--progress=off".to_owned(),
    ];
    if !handler_only {
        uas_args.extend([
            format!("--register={}", ctx.users),
            format!("--registrar=127.0.0.1:{}", entry_ports[0]),
            format!("--users=user{{0..{}}}@{DOMAIN}", ctx.users - 1),
            format!("--register-rate={REGISTER_RATE}"),
        ]);
    }
    let mut uas = spawn(GENERATOR_CORE, ctx.exe, &uas_args, &log)?;
    wait_bound(
        &mut uas.0,
        uas_port,
        Some(Transport::Udp),
        "holdline load uas",
        &log,
    )?;
    if !handler_only {
        let deadline = Instant::now() + REGISTER_LIMIT;
        loop {
            let bound: f64 = second_metrics
                .iter()
                .map(|m| metric(&scrape(*m), "holdline_store_bindings"))
                .sum();
            if bound >= ctx.users as f64 {
                break;
            }
            if Instant::now() >= deadline {
                // Stop the call handler (SIGTERM: it writes its report) to say what the
                // REGISTERs got.
                crate::generator::terminate(&uas.0);
                wait_bounded(&mut uas.0, Duration::from_secs(10));
                let answers = read_json(&ctx.runs.join(format!("{tag}-uas.json")))
                    .map(|v| {
                        format!(
                            "answers {}, timeouts {}",
                            v["register_by_code"], v["totals"]["timeouts"]
                        )
                    })
                    .unwrap_or_else(|e| e.to_string());
                return Err(LabError::Process(format!(
                    "{tag}: {bound} of {} users registered after {} s ({answers}); logs in {}",
                    ctx.users,
                    REGISTER_LIMIT.as_secs(),
                    ctx.runs.display()
                )));
            }
            // Bounded poll of the second stages' bindings (not faster: a scrape costs the
            // servers some of their quota).
            std::thread::sleep(REGISTER_POLL);
        }
    }
    Ok(Cluster {
        servers,
        second_metrics,
        entry_ports,
        _uas: uas,
    })
}

/// Offers `rate` calls/s for `seconds` to configuration `c` on fresh servers and measures.
fn step(ctx: &Ctx<'_>, c: Config, name: &str, rate: f64, seconds: f64) -> Result<Step> {
    let tag = format!("{name}-{rate:.0}");
    let cluster = start_cluster(ctx, c, &tag)?;
    let cpu0: Vec<u64> = cluster
        .servers
        .iter()
        .map(|s| crate::procfs::tree_cpu_us(s.0.0.id()))
        .collect();
    let json = ctx.runs.join(format!("{tag}-uac.json"));
    let to = if c.m == 0 {
        format!("callee@{DOMAIN}")
    } else {
        format!("user{{0..{}}}@{DOMAIN}", ctx.users - 1)
    };
    let mut args = vec![
        "load".to_owned(),
        "uac".to_owned(),
        format!("--target=127.0.0.1:{}", cluster.entry_ports[0]),
        format!("--rate={rate}"),
        format!("--duration={seconds}"),
        format!("--drain={DRAIN_S}"),
        format!("--goodput-window={GOODPUT_WINDOW_S}"),
        format!("--max-time={}", seconds + DRAIN_S + 30.0),
        format!("--to={to}"),
        format!("--json={}", json.display()),
        format!(
            "--csv={}",
            ctx.runs.join(format!("{tag}-uac.csv")).display()
        ),
        "--progress=off".to_owned(),
    ];
    for p in &cluster.entry_ports[1..] {
        args.push(format!("--alternate=127.0.0.1:{p}"));
    }
    if cluster.entry_ports.len() > 1 {
        args.push("--spread".to_owned());
    }
    let started = Instant::now();
    let log = ctx.runs.join(format!("{tag}-uac.log"));
    let mut uac = spawn(GENERATOR_CORE, ctx.exe, &args, &log)?;
    let limit = Duration::from_secs_f64(seconds + DRAIN_S + 40.0);
    if !wait_bounded(&mut uac.0, limit) {
        return Err(LabError::Process(format!(
            "{tag}: holdline load uac did not stop within {} s; log {}",
            limit.as_secs(),
            log.display()
        )));
    }
    let wall = started.elapsed().as_secs_f64().max(1e-3);
    let cpu: Vec<f64> = cluster
        .servers
        .iter()
        .zip(&cpu0)
        .map(|(s, c0)| {
            crate::procfs::tree_cpu_us(s.0.0.id()).saturating_sub(*c0) as f64 / 1e6 / wall
        })
        .collect();
    let invites: Vec<f64> = cluster
        .second_metrics
        .iter()
        .map(|m| {
            metric_where(
                &scrape(*m),
                "holdline_sip_requests_in_total",
                &["method=\"INVITE\""],
            )
        })
        .collect();
    let total: f64 = invites.iter().sum();
    let shares = invites
        .iter()
        .map(|i| if total > 0.0 { i / total } else { 0.0 })
        .collect();
    drop(cluster);
    let v: Value = read_json(&json)?;
    Ok(Step {
        config: name.to_owned(),
        offered_cps: rate,
        attempted: count(&v, &["totals", "attempted"]),
        calls_ok: count(&v, &["totals", "calls_ok"]),
        calls_failed: count(&v, &["totals", "calls_failed"]),
        goodput_cps: num(&v, &["goodput_cps"]),
        r503: count(&v, &["totals", "r503"]),
        r503_relayed: count(&v, &["failures_by_code", "500"]),
        pdd_p50_ms: num(&v, &["pdd_p50_ms"]),
        pdd_p99_ms: num(&v, &["pdd_p99_ms"]),
        retrans_invite: count(&v, &["totals", "retrans_invite"]),
        shares,
        cpu,
        load_s: num(&v, &["load_duration_s"]),
    })
}

fn progress(s: &Step, started: Instant) {
    eprintln!(
        "scaling {:>6.0}s  {:<13} offered {:>6.0}/s  goodput {:>6.0}/s  ok {}/{}  503 {} (+{} relayed as 500)  PDD p50/p99 {:.1}/{:.1} ms  cpu {}",
        started.elapsed().as_secs_f64(),
        s.config,
        s.offered_cps,
        s.goodput_cps,
        s.calls_ok,
        s.attempted,
        s.r503,
        s.r503_relayed,
        s.pdd_p50_ms,
        s.pdd_p99_ms,
        s.cpu
            .iter()
            .map(|c| format!("{:.0}%", c * 100.0))
            .collect::<Vec<_>>()
            .join(" ")
    );
}

/// The doubling search of one server's capacity under the quota: the highest goodput.
fn calibrate(
    ctx: &Ctx<'_>,
    c: Config,
    name: &str,
    seconds: f64,
    started: Instant,
    out: &mut Vec<Step>,
) -> Result<f64> {
    let mut rate = CALIBRATION_START;
    let mut best: f64 = 0.0;
    for _ in 0..CALIBRATION_STEPS {
        let s = with_fresh_ports("scaling", name, || step(ctx, c, name, rate, seconds))?;
        progress(&s, started);
        best = best.max(s.goodput_cps);
        let saturated = s.goodput_cps < CALIBRATION_SATURATED * rate;
        out.push(s);
        if saturated {
            break;
        }
        rate *= 2.0;
    }
    Ok(best)
}

fn run(args: &Args) -> Result<Results> {
    let started = Instant::now();
    check_tools()?;
    let exe = holdline_exe(args.exe.as_deref())?;
    let configs = args
        .configs
        .iter()
        .map(|s| Config::parse(s))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(LabError::Precondition)?;
    if args.users == 0 {
        return Err(LabError::Precondition("--users must be at least 1".into()));
    }
    if !(1..=100).contains(&args.quota) {
        return Err(LabError::Precondition(format!(
            "--quota {}: must be 1 to 100 (percent of a core)",
            args.quota
        )));
    }
    let seconds = args
        .step_seconds
        .unwrap_or(if args.quick { 5.0 } else { 60.0 });
    let calib_s = args
        .calibration_seconds
        .unwrap_or(if args.quick { 4.0 } else { 10.0 });
    for (what, v) in [
        ("--step-seconds", seconds),
        ("--calibration-seconds", calib_s),
    ] {
        if !(v > 0.0 && v.is_finite()) {
            return Err(LabError::Precondition(format!(
                "{what} {v}: must be a positive number of seconds"
            )));
        }
    }
    let loads = if args.loads.is_empty() {
        if args.quick {
            vec![0.8, 1.5]
        } else {
            vec![0.5, 0.8, 1.0, 1.2, 1.5, 2.0]
        }
    } else {
        args.loads.clone()
    };
    if loads.iter().any(|l| !(*l > 0.0 && l.is_finite())) {
        return Err(LabError::Precondition(
            "--loads: every factor must be positive".into(),
        ));
    }
    let runs = args.out.join("runs");
    std::fs::create_dir_all(&runs)
        .map_err(|e| LabError::io(format!("create {}", runs.display()), e))?;
    // One group per server of the largest configuration (a first stage is group i, a
    // second stage group n + j), created once and reused.
    let (period, quota) = feasible_quota(QUOTA_PERIOD_US, args.quota);
    let most = configs.iter().map(|c| c.n + c.m).max().unwrap_or(1).max(1);
    let groups = (0..most)
        .map(|i| {
            CpuGroup::create(
                &format!("holdline-scaling-{}-{i}", std::process::id()),
                period,
                quota,
            )
        })
        .collect::<Result<Vec<_>>>()?;
    let ctx = Ctx {
        exe: &exe,
        runs: &runs,
        groups: &groups,
        users: args.users,
        serve_args: &args.serve_args,
        first_stage_mode: &args.first_stage_mode,
    };
    eprintln!(
        "scaling: {} configuration(s), each server {}% of a core ({quota} µs per {period} µs), {} user(s), {seconds} s per step, {} first stages",
        configs.len(),
        args.quota,
        args.users,
        args.first_stage_mode
    );
    let mut calibration = Vec::new();
    let (cs, cp) = match args.capacities.as_slice() {
        [cs, cp] if *cs > 0.0 && *cp > 0.0 => (*cs, *cp),
        [] => {
            let cp = calibrate(
                &ctx,
                Config { n: 0, m: 1 },
                "calibrate-Cp",
                calib_s,
                started,
                &mut calibration,
            )?;
            let cs = calibrate(
                &ctx,
                Config { n: 1, m: 0 },
                "calibrate-Cs",
                calib_s,
                started,
                &mut calibration,
            )?;
            (cs, cp)
        }
        _ => {
            return Err(LabError::Precondition(
                "--capacities takes two positive numbers: CS,CP".into(),
            ));
        }
    };
    eprintln!("scaling: C_s = {cs:.0} calls/s (first stage), C_p = {cp:.0} calls/s (second stage)");
    let mut steps = Vec::new();
    for c in &configs {
        let name = c.name();
        let expected = c.expected(cs, cp);
        for f in &loads {
            let rate = (expected * f).round().max(1.0);
            let s = with_fresh_ports("scaling", &name, || step(&ctx, *c, &name, rate, seconds))?;
            progress(&s, started);
            steps.push(s);
        }
    }
    let results = Results {
        header: RunHeader::new("scaling", started, args.quick, "udp"),
        quota_percent: args.quota,
        cfs_period_us: period,
        cfs_quota_us: quota,
        users: args.users,
        serve_args: args.serve_args.clone(),
        first_stage_mode: args.first_stage_mode.clone(),
        step_seconds: seconds,
        cs_cps: cs,
        cp_cps: cp,
        configs: summarize(&configs, &steps, cs, cp),
        calibration,
        steps,
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    write(&args.out, &results)?;
    Ok(results)
}

/// Per configuration: throughput, shares, model, ratio to S1P1.
fn summarize(configs: &[Config], steps: &[Step], cs: f64, cp: f64) -> Vec<ConfigResult> {
    let mut out: Vec<ConfigResult> = configs
        .iter()
        .map(|c| {
            let name = c.name();
            let mine: Vec<&Step> = steps.iter().filter(|s| s.config == name).collect();
            let throughput = mine.iter().map(|s| s.goodput_cps).fold(0.0, f64::max);
            let mut shares = vec![0.0; c.m];
            let with_calls: Vec<&&Step> = mine
                .iter()
                .filter(|s| s.shares.iter().sum::<f64>() > 0.0)
                .collect();
            for s in &with_calls {
                for (a, b) in shares.iter_mut().zip(&s.shares) {
                    *a += b / with_calls.len() as f64;
                }
            }
            if with_calls.is_empty() {
                shares = vec![1.0 / c.m as f64; c.m];
            }
            let at_max = mine
                .iter()
                .max_by(|a, b| a.offered_cps.total_cmp(&b.offered_cps))
                .map_or(0.0, |s| s.goodput_cps);
            ConfigResult {
                config: name,
                n: c.n,
                m: c.m,
                expected_cps: c.expected(cs, cp),
                throughput_cps: throughput,
                ratio_to_s1p1: None,
                model_cps: model(f64::INFINITY, c.n, cs, cp, &shares),
                shares,
                held_at_max_load: if throughput > 0.0 {
                    at_max / throughput
                } else {
                    0.0
                },
            }
        })
        .collect();
    if let Some(base) = out
        .iter()
        .find(|r| r.n == 1 && r.m == 1)
        .map(|r| r.throughput_cps)
        .filter(|t| *t > 0.0)
    {
        for r in &mut out {
            r.ratio_to_s1p1 = Some(r.throughput_cps / base);
        }
    }
    out
}

fn write(out: &Path, r: &Results) -> Result<()> {
    let json = serde_json::to_string_pretty(r).map_err(|e| LabError::Report {
        path: out.join("results.json"),
        reason: e.to_string(),
    })?;
    let path = out.join("results.json");
    std::fs::write(&path, json)
        .map_err(|e| LabError::io(format!("write {}", path.display()), e))?;
    let mut csv = String::from(
        "config,offered_cps,attempted,calls_ok,calls_failed,goodput_cps,r503,pdd_p50_ms,pdd_p99_ms,retrans_invite,shares,cpu\n",
    );
    for s in r.calibration.iter().chain(&r.steps) {
        let join = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.3}"))
                .collect::<Vec<_>>()
                .join(";")
        };
        let _ = writeln!(
            csv,
            "{},{:.0},{},{},{},{:.1},{},{:.2},{:.2},{},{},{}",
            s.config,
            s.offered_cps,
            s.attempted,
            s.calls_ok,
            s.calls_failed,
            s.goodput_cps,
            s.r503,
            s.pdd_p50_ms,
            s.pdd_p99_ms,
            s.retrans_invite,
            join(&s.shares),
            join(&s.cpu)
        );
    }
    let path = out.join("steps.csv");
    std::fs::write(&path, csv).map_err(|e| LabError::io(format!("write {}", path.display()), e))?;
    let mut md = format!(
        "# holdline lab scaling\n\nEach server {}% of a core; {} first stages; C_s = {:.0} calls/s, C_p = {:.0} calls/s (calibrated); {} users; {} s per step.\n\n\
         | config | expected | throughput | ratio to S1P1 | model (measured shares) | shares | goodput at max load / throughput |\n\
         | --- | ---: | ---: | ---: | ---: | --- | ---: |\n",
        r.quota_percent, r.first_stage_mode, r.cs_cps, r.cp_cps, r.users, r.step_seconds
    );
    if !r.serve_args.is_empty() {
        md.insert_str(
            md.find("\n\n| config").unwrap_or(md.len()),
            &format!(" Every server ran with `{}`.", r.serve_args.join(" ")),
        );
    }
    for c in &r.configs {
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.0} | {} | {:.0} | {} | {:.2} |",
            c.config,
            c.expected_cps,
            c.throughput_cps,
            c.ratio_to_s1p1
                .map_or_else(|| "—".to_owned(), |x| format!("{x:.2}")),
            c.model_cps,
            c.shares
                .iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(" / "),
            c.held_at_max_load
        );
    }
    md.push_str("\n![throughput](throughput.svg)\n");
    let path = out.join("summary.md");
    std::fs::write(&path, md).map_err(|e| LabError::io(format!("write {}", path.display()), e))?;
    let mut series: Vec<plot::Series> = Vec::new();
    for c in &r.configs {
        let mut measured: Vec<(f64, f64)> = r
            .steps
            .iter()
            .filter(|s| s.config == c.config)
            .map(|s| (s.offered_cps, s.goodput_cps))
            .collect();
        measured.sort_by(|a, b| a.0.total_cmp(&b.0));
        let xmax = measured.last().map_or(0.0, |p| p.0);
        let model_line: Vec<(f64, f64)> = (0..=40)
            .map(|k| {
                let x = xmax * f64::from(k) / 40.0;
                (x, model(x, c.n, r.cs_cps, r.cp_cps, &c.shares))
            })
            .collect();
        series.push((c.config.clone(), measured));
        series.push((format!("{} model", c.config), model_line));
    }
    plot::chart(
        out,
        "throughput",
        "SnPm throughput (SIPstone Proxy 200, 200 OK within 2 s)",
        "offered load (calls/s)",
        "goodput (calls/s)",
        &series,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_parse_and_reject_what_cannot_run() {
        assert_eq!(Config::parse("s2p3"), Ok(Config { n: 2, m: 3 }));
        assert_eq!(Config::parse("S0P1").map(Config::name), Ok("S0P1".into()));
        for bad in ["S0P2", "P2", "S2", "SxP1", "S9P1", "S1P0", "S1P9"] {
            assert!(Config::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_model_reproduces_the_papers_figures() {
        // seed 001 §5.2 with NOTES.md's correction: C_s = 1050, C_p = 900; shares 0.6/0.4
        // for m = 2 and 0.4/0.3/0.3 for m = 3 give 1050, 1740, 2100 and 2700 calls/s.
        let (cs, cp) = (1050.0, 900.0);
        let two = [0.6, 0.4];
        let three = [0.4, 0.3, 0.3];
        let inf = f64::INFINITY;
        assert!((model(inf, 1, cs, cp, &two) - 1050.0).abs() < 1e-9);
        assert!((model(inf, 2, cs, cp, &two) - 1740.0).abs() < 1e-9);
        assert!((model(inf, 2, cs, cp, &three) - 2100.0).abs() < 1e-9);
        assert!((model(inf, 3, cs, cp, &three) - 2700.0).abs() < 1e-9);
        // Below saturation the throughput is the offered load.
        assert!((model(500.0, 2, cs, cp, &two) - 500.0).abs() < 1e-9);
        // S0P1: the second stage alone.
        assert!((model(2000.0, 0, cs, cp, &[1.0]) - 900.0).abs() < 1e-9);
    }

    #[test]
    fn summaries_take_the_best_goodput_and_the_ratio_to_s1p1() {
        let step = |config: &str, offered: f64, goodput: f64, shares: Vec<f64>| Step {
            config: config.into(),
            offered_cps: offered,
            attempted: 0,
            calls_ok: 0,
            calls_failed: 0,
            goodput_cps: goodput,
            r503: 0,
            r503_relayed: 0,
            pdd_p50_ms: 0.0,
            pdd_p99_ms: 0.0,
            retrans_invite: 0,
            shares,
            cpu: vec![],
            load_s: 1.0,
        };
        let steps = vec![
            step("S1P1", 500.0, 500.0, vec![1.0]),
            step("S1P1", 1000.0, 900.0, vec![1.0]),
            step("S1P1", 2000.0, 850.0, vec![1.0]),
            step("S2P2", 1000.0, 1000.0, vec![0.5, 0.5]),
            step("S2P2", 2000.0, 1800.0, vec![0.6, 0.4]),
        ];
        let configs = [Config { n: 1, m: 1 }, Config { n: 2, m: 2 }];
        let r = summarize(&configs, &steps, 1000.0, 900.0);
        assert_eq!(r[0].throughput_cps, 900.0);
        assert!((r[0].held_at_max_load - 850.0 / 900.0).abs() < 1e-9);
        assert_eq!(r[1].ratio_to_s1p1, Some(2.0));
        assert!((r[1].shares[0] - 0.55).abs() < 1e-9);
        // Model with shares 0.55/0.45: min(0.55·2000, 900) + min(0.45·2000, 900) = 1800.
        assert!((r[1].model_cps - 1800.0).abs() < 1e-9);
    }
}
