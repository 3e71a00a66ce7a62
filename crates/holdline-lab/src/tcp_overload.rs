//! `holdline lab tcp-overload`: seed 000's SIP-over-TCP experiment. M UACs, each calling
//! through its own SE (a `holdline serve`), all SEs forwarding to one capacity-limited RE
//! (`holdline serve --emulate-cost-us`, one worker, pinned to core 1), which forwards to one
//! UAS; every hop TCP, every server record-routing (the RE sees INVITE, ACK, BYE and their
//! responses: six messages per call). M = 1, 3, 10; offered 0.5× to 10× the RE's measured
//! capacity; mechanisms:
//!
//! | mechanism | SEs | RE |
//! | --- | --- | --- |
//! | `none` | no smart forwarding, no local control | no local control, new INVITEs not deferred, system buffers: what a server without overload control does |
//! | `ics` | smart forwarding with the paper's rule (threshold 0, no hold), one connection to the RE (ICS) | buffer minimization on its listener, admitted calls first (new INVITEs deferred), no local control |
//! | `ecs` | the same rule, a separate INVITE connection (ECS) | as for `ics` |
//! | `default` | holdline's defaults: local control (OCC), smart forwarding ICS (16 KiB for 20 ms) | holdline's defaults: local control (OCC), new INVITEs deferred, system buffers |
//!
//! The RE's buffer minimization is seed 000's recommendation, a receive buffer of a couple of
//! INVITEs (`recv_buffer = 1024`, which Linux doubles), with a small MSS announced to the SEs
//! (`max_segment = 536`) so that the small window never stalls them, and a read-ahead of one
//! message (`read_buffer = 2048`). The RE rejects nothing itself unless a deferred INVITE
//! waits longer than `defer_max_wait_ms` (counted as `re_rejected`): every other 503 is the
//! SEs' smart forwarding.
//!
//! Phases, each point with fresh processes: **capacity** (mechanism `none`, one SE, 0.7× to
//! 1.1× the nominal capacity; the capacity is the highest offered rate whose calls all
//! completed with PDD p99 ≤ 200 ms and no 200 OK retransmission), then **the curve** (every
//! M, load factor and mechanism).
//!
//! Measured: throughput (calls whose ACK reached the UAS, per second of load), PDD (INVITE to
//! 200 OK at the UACs), 200 OK retransmissions (UAS; over TCP too, RFC 3261 §13.3.1.4),
//! per-SE throughput (calls completed by each SE's UAC) and Jain's fairness index over them,
//! and the RE's active sessions over time (INVITEs it took minus BYEs, sampled from its
//! metrics). Output in `--out DIR`: `results.json`, `points.csv`, plots `throughput`,
//! `pdd` (at the highest load), `active` (active sessions at the RE over time, highest load)
//! and `fairness` (SVG and PNG), and every process's report and log under `runs/`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{LabError, Result};
use crate::generator::{GENERATOR_CORE, count, num, read_json, terminate, wait_bounded};
use crate::plot;
use crate::procfs;
use crate::runner::{
    Proc, SweepArgs, UacLoad, cdf_points, check_tools, holdline_exe, lab_main, machine, metric,
    scrape, spawn, start_uacs, start_uas, steady, window_sum,
};
use crate::server::{SERVER_CORE, Transport, free_port, tail, wait_bound};

/// Messages through the RE per call: INVITE, 180, 200, ACK, BYE, 200.
const MESSAGES_PER_CALL: f64 = 6.0;
/// A call counts as goodput when its 200 OK came within this (seed 003's window).
const GOODPUT_WINDOW_S: f64 = 10.0;
/// How often the RE's active sessions are sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// The mechanisms, in plotting order.
const MECHANISMS: [&str; 4] = ["none", "default", "ics", "ecs"];

/// `holdline lab tcp-overload` options.
#[derive(Debug, Parser)]
#[command(
    name = "holdline lab tcp-overload",
    about = "SIP-over-TCP overload control: SEs -> one capacity-limited RE, no control vs ICS/ECS + buffer minimization + smart forwarding"
)]
pub struct Args {
    /// The sweep's options.
    #[command(flatten)]
    pub sweep: SweepArgs,
    /// Results directory.
    #[arg(long, value_name = "DIR", default_value = "lab-results/tcp-overload")]
    pub out: PathBuf,
    /// Numbers of SEs, comma-separated (default: 1,3 quick; 1,3,10 full).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub ses: Vec<u32>,
    /// Skip the capacity phase and use this capacity, calls/s.
    #[arg(long, value_name = "CPS")]
    pub capacity: Option<f64>,
}

/// One measured point (one row of `points.csv`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    /// `tcp-overload`.
    pub experiment: String,
    /// `none`, `ics` or `ecs`.
    pub mechanism: String,
    /// Number of SEs.
    pub ses: Option<u32>,
    /// Offered load / capacity.
    pub load_factor: f64,
    /// Offered calls per second, all UACs (measured at the UACs).
    pub offered_cps: f64,
    /// The measured capacity of the RE.
    pub capacity_cps: f64,
    /// Calls whose ACK reached the UAS while the load was offered, per second (the UAS's
    /// per-second counts over the load window, to the second).
    pub throughput_cps: f64,
    /// Calls whose ACK reached the UAS at all, including after the load (during the drain).
    pub completed_total: u64,
    /// Calls whose 200 OK reached their UAC within 10 s of the first INVITE, per second of
    /// offered load, all UACs.
    pub goodput_cps: f64,
    /// Goodput over the last three quarters of the load window (no drain), all UACs.
    pub goodput_steady_cps: f64,
    /// PDD (first INVITE to 200 OK) p50, ms: the UACs' p50s weighted by their calls.
    pub pdd_p50_ms: f64,
    /// PDD p99, ms: the largest of the UACs' p99s.
    pub pdd_p99_ms: f64,
    /// 200 OK retransmissions by the UAS.
    pub retrans_200: u64,
    /// INVITE retransmissions by the UACs (none over TCP unless something is broken).
    pub retrans_invite: u64,
    /// Jain's fairness index over the per-SE throughputs (`None` with one SE).
    pub fairness: Option<f64>,
    /// Calls completed per second of load, by SE (from each SE's UAC).
    pub per_se_cps: Vec<f64>,
    /// Calls placed.
    pub calls_attempted: u64,
    /// Calls completed (200 OK, ACK, BYE answered).
    pub calls_ok: u64,
    /// 503 responses at the UACs.
    pub r503: u64,
    /// Calls that failed with another final response at the UACs: an SE answers `500`
    /// upstream for a `503` from the RE (RFC 3261 §16.7: a proxy does not forward 503).
    #[serde(default)]
    pub r_other: u64,
    /// Calls that timed out or were cut by the drain limit.
    pub timeouts: u64,
    /// New INVITEs the SEs rejected by smart forwarding.
    pub se_rejected: u64,
    /// New INVITEs the RE rejected (a deferred INVITE that waited too long).
    pub re_rejected: u64,
    /// The most active sessions sampled at the RE.
    pub re_active_max: f64,
    /// RE CPU over the run, seconds.
    pub re_cpu_s: f64,
    /// RE core busy over the run (1.0 = one core).
    pub re_busy: f64,
}

/// Everything a run measured (`results.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    /// `tcp-overload`.
    pub experiment: String,
    /// The command line.
    pub command: String,
    /// Start time, seconds since the Unix epoch.
    pub started_unix_s: u64,
    /// Quick mode.
    pub quick: bool,
    /// Machine facts.
    pub machine: Value,
    /// `--emulate-cost-us` of the RE.
    pub emulate_cost_us: u64,
    /// `--emulate-reject-cost-us` of the RE.
    pub emulate_reject_cost_us: u64,
    /// The RE configuration of the smart-forwarding mechanisms (TOML, port elided).
    pub re_config: String,
    /// Nominal capacity from the emulated cost.
    pub nominal_capacity_cps: f64,
    /// Measured capacity.
    pub capacity_cps: f64,
    /// Capacity steps (mechanism `none`, one SE).
    pub capacity_steps: Vec<Point>,
    /// The curve.
    pub points: Vec<Point>,
    /// Wall time of the run, s.
    pub elapsed_s: f64,
}

/// Entry point of `holdline lab tcp-overload ARGS`.
pub fn main(args: Vec<String>) -> ExitCode {
    lab_main(
        "tcp-overload",
        args,
        |a: &Args| a.out.clone(),
        run,
        |r: &Results| r.elapsed_s,
    )
}

/// The RE's configuration for the smart-forwarding mechanisms, listening on `port`.
fn re_config_sf(port: u16) -> String {
    format!(
        "# seed 000's RE: buffer minimization on the listener the SEs connect to, admitted\n\
         # calls first (new INVITEs deferred), no local admission control\n\
         listen = [\"tcp:127.0.0.1:{port}\"]\n\
         record_route = true\n\
         [limits]\n\
         max_message_size = 2048\n\
         [overload]\n\
         local = \"none\"\n\
         defer_new_invites = true\n\
         [[tcp_buffers]]\n\
         listener = \"tcp:127.0.0.1:{port}\"\n\
         recv_buffer = 1024\n\
         read_buffer = 2048\n\
         max_segment = 536\n"
    )
}

/// The RE's configuration out of the box: only where it listens and that it record-routes.
fn re_config_default(port: u16) -> String {
    format!(
        "# holdline's defaults\n\
         listen = [\"tcp:127.0.0.1:{port}\"]\n\
         record_route = true\n"
    )
}

/// The RE's configuration without control: system buffers, nothing deferred.
fn re_config_none(port: u16) -> String {
    format!(
        "# no overload control: system buffers, messages handled in arrival order\n\
         listen = [\"tcp:127.0.0.1:{port}\"]\n\
         record_route = true\n\
         [overload]\n\
         local = \"none\"\n\
         defer_new_invites = false\n"
    )
}

/// An SE's configuration: with ICS/ECS the paper's smart-forwarding rule (reject as soon as
/// the backlog is not empty), which fits the RE's minimized buffers; otherwise the defaults.
fn se_config(port: u16, mechanism: &str) -> String {
    let mut text = format!("listen = [\"tcp:127.0.0.1:{port}\"]\nrecord_route = true\n");
    if matches!(mechanism, "ics" | "ecs") {
        text.push_str("[overload]\nsmart_forwarding_threshold = 0\nsmart_forwarding_hold_ms = 0\n");
    }
    text
}

/// What one point is.
struct Spec<'a> {
    mechanism: &'a str,
    ses: u32,
    cost_us: u64,
    reject_cost_us: u64,
    rate: f64,
    duration_s: f64,
    drain_s: f64,
    tag: String,
}

/// Samples the RE's active sessions (INVITEs taken minus BYEs minus INVITEs it rejected) in
/// a thread until [`finish`](Self::finish)ed or dropped.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<(f64, f64)>>>,
}

impl Sampler {
    fn start(port: u16) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        Self {
            thread: Some(sampler(port, stop.clone())),
            stop,
        }
    }

    /// Stops sampling; the samples as (seconds since start, active sessions).
    fn finish(mut self) -> Vec<(f64, f64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn sampler(port: u16, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<(f64, f64)>> {
    std::thread::spawn(move || {
        let t0 = Instant::now();
        let mut out = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let text = scrape(port);
            if !text.is_empty() {
                out.push((t0.elapsed().as_secs_f64(), active_sessions(&text)));
            }
            // The sampling period (bounded by the stop flag).
            std::thread::sleep(SAMPLE_EVERY);
        }
        out
    })
}

/// Sessions started (INVITE taken) and not ended (no BYE yet) at a server, from its metrics.
fn active_sessions(text: &str) -> f64 {
    let invites = metric(
        text,
        "holdline_sip_requests_in_total{worker=\"0\",method=\"INVITE\"}",
    );
    let byes = metric(
        text,
        "holdline_sip_requests_in_total{worker=\"0\",method=\"BYE\"}",
    );
    let rejected = metric(text, "holdline_sip_rejected_overload_total");
    (invites - byes - rejected).max(0.0)
}

fn server_args(port: u16, metrics: u16, config: &Path) -> Vec<String> {
    vec![
        "serve".into(),
        format!("--config={}", config.display()),
        "--workers=1".into(),
        "--store=memory".into(),
        format!("--metrics=127.0.0.1:{metrics}"),
        format!("--listen=tcp:127.0.0.1:{port}"),
    ]
}

/// [`run_point_once`], again with fresh ports when a process could not bind its port.
fn run_point(exe: &Path, runs: &Path, spec: &Spec<'_>, capacity: f64) -> Result<Point> {
    crate::runner::with_fresh_ports("tcp-overload", &spec.tag, || {
        run_point_once(exe, runs, spec, capacity)
    })
}

/// Runs one point with fresh processes; its UAC reports and the RE's active sessions stay
/// in `runs` (`TAG-uacN.json`, `TAG-active.csv`).
fn run_point_once(exe: &Path, runs: &Path, spec: &Spec<'_>, capacity: f64) -> Result<Point> {
    let m = spec.ses.max(1) as usize;
    let (re_port, re_metrics, uas_port) = (free_port()?, free_port()?, free_port()?);
    let tag = &spec.tag;
    let limit = spec.duration_s + spec.drain_s + 5.0;

    // UAS (core 0).
    let uas_json = runs.join(format!("{tag}-uas.json"));
    let uas_csv = runs.join(format!("{tag}-uas.csv"));
    let uas_started = Instant::now();
    let mut uas = start_uas(exe, runs, tag, uas_port, Transport::Tcp, true, limit + 3.0)?;

    // RE (core 1).
    let sf = matches!(spec.mechanism, "ics" | "ecs");
    let re_cfg = runs.join(format!("{tag}-re.toml"));
    let text = match spec.mechanism {
        "none" => re_config_none(re_port),
        "default" => re_config_default(re_port),
        _ => re_config_sf(re_port),
    };
    std::fs::write(&re_cfg, text)
        .map_err(|e| LabError::io(format!("write {}", re_cfg.display()), e))?;
    let mut re_args = server_args(re_port, re_metrics, &re_cfg);
    re_args.extend([
        format!("--route=*=tcp:127.0.0.1:{uas_port}"),
        format!("--emulate-cost-us={}", spec.cost_us),
        format!("--emulate-reject-cost-us={}", spec.reject_cost_us),
    ]);
    let re_log = runs.join(format!("{tag}-re.log"));
    let mut re = spawn(SERVER_CORE, exe, &re_args, &re_log)?;
    wait_bound(&mut re.0, re_port, Some(Transport::Tcp), "the RE", &re_log)?;

    // SEs (core 0).
    let mut ses: Vec<(Proc, u16, u16)> = Vec::with_capacity(m);
    for i in 0..m {
        let (port, metrics) = (free_port()?, free_port()?);
        let cfg = runs.join(format!("{tag}-se{i}.toml"));
        std::fs::write(&cfg, se_config(port, spec.mechanism))
            .map_err(|e| LabError::io(format!("write {}", cfg.display()), e))?;
        let mut args = server_args(port, metrics, &cfg);
        args.push(format!("--route=*=tcp:127.0.0.1:{re_port}"));
        if sf {
            args.push(format!("--smart-forwarding={}", spec.mechanism));
        } else if spec.mechanism == "none" {
            args.extend(["--smart-forwarding=off".into(), "--overload=none".into()]);
        }
        let log = runs.join(format!("{tag}-se{i}.log"));
        let mut p = spawn(GENERATOR_CORE, exe, &args, &log)?;
        wait_bound(&mut p.0, port, Some(Transport::Tcp), "an SE", &log)?;
        ses.push((p, port, metrics));
    }

    // UACs (core 0), one per SE, the load split evenly.
    let sampling = Sampler::start(re_metrics);
    let cpu0 = procfs::tree_cpu_us(re.0.id());
    let t0 = Instant::now();
    // Where the load window falls on the UAS's clock.
    let offset = t0.saturating_duration_since(uas_started).as_secs_f64();
    let targets: Vec<u16> = ses.iter().map(|(_, port, _)| *port).collect();
    let load = UacLoad {
        rate: spec.rate,
        duration_s: spec.duration_s,
        drain_s: spec.drain_s,
        goodput_window_s: GOODPUT_WINDOW_S,
        max_time_s: limit,
    };
    let mut uacs = start_uacs(exe, runs, tag, &targets, Transport::Tcp, &load)?;
    let mut overran = None;
    for (i, u) in uacs.iter_mut().enumerate() {
        let left = Duration::from_secs_f64(limit + 5.0).saturating_sub(t0.elapsed());
        if !wait_bounded(&mut u.0, left) && overran.is_none() {
            overran = Some(i);
        }
    }
    let window = t0.elapsed().as_secs_f64();
    let cpu1 = procfs::tree_cpu_us(re.0.id());
    let active = sampling.finish();
    let re_text = scrape(re_metrics);
    let se_rejected: f64 = ses
        .iter()
        .map(|(_, _, metrics)| metric(&scrape(*metrics), "holdline_sip_rejected_forward_total"))
        .sum();
    // The UAS writes its report on SIGTERM.
    terminate(&uas.0);
    wait_bounded(&mut uas.0, Duration::from_secs(5));
    drop(ses);
    drop(re);
    if let Some(i) = overran {
        return Err(LabError::Process(format!(
            "{tag}: UAC {i} overran its time limit; log {}",
            tail(&runs.join(format!("{tag}-uac{i}.log")))
        )));
    }

    let mut reports = Vec::with_capacity(m);
    for i in 0..m {
        reports.push(read_json(&runs.join(format!("{tag}-uac{i}.json")))?);
    }
    let uas_r = read_json(&uas_json).unwrap_or(Value::Null);
    let per_se: Vec<f64> = reports
        .iter()
        .map(|r| count(r, &["totals", "calls_ok"]) as f64 / num(r, &["load_duration_s"]).max(1e-3))
        .collect();
    let sum = |path: &[&str]| reports.iter().map(|r| count(r, path)).sum::<u64>();
    let pdd_n: Vec<f64> = reports
        .iter()
        .map(|r| num(r, &["latency", "pdd", "count"]))
        .collect();
    let total_n: f64 = pdd_n.iter().sum();
    let pdd_p50 = if total_n > 0.0 {
        reports
            .iter()
            .zip(&pdd_n)
            .map(|(r, n)| num(r, &["pdd_p50_ms"]) * n)
            .sum::<f64>()
            / total_n
    } else {
        0.0
    };
    let cpu_s = cpu1.saturating_sub(cpu0) as f64 / 1e6;
    let point = Point {
        experiment: "tcp-overload".into(),
        mechanism: spec.mechanism.to_string(),
        ses: Some(spec.ses),
        load_factor: if capacity > 0.0 {
            spec.rate / capacity
        } else {
            0.0
        },
        offered_cps: reports.iter().map(|r| num(r, &["offered_cps"])).sum(),
        capacity_cps: capacity,
        throughput_cps: window_sum(&uas_csv, "completed", offset, offset + spec.duration_s)
            / spec.duration_s.max(1e-3),
        completed_total: count(&uas_r, &["totals", "completed"]),
        goodput_cps: reports.iter().map(|r| num(r, &["goodput_cps"])).sum(),
        goodput_steady_cps: (0..m)
            .map(|i| {
                steady(
                    &runs.join(format!("{tag}-uac{i}.csv")),
                    "goodput",
                    spec.duration_s,
                )
            })
            .sum(),
        pdd_p50_ms: pdd_p50,
        pdd_p99_ms: reports
            .iter()
            .map(|r| num(r, &["pdd_p99_ms"]))
            .fold(0.0f64, f64::max),
        retrans_200: count(&uas_r, &["totals", "retrans_200"]),
        retrans_invite: sum(&["totals", "retrans_invite"]),
        fairness: (m > 1).then(|| holdline_metrics::jain_index(&per_se)),
        per_se_cps: per_se,
        calls_attempted: sum(&["totals", "attempted"]),
        calls_ok: sum(&["totals", "calls_ok"]),
        r503: sum(&["totals", "r503"]),
        r_other: sum(&["totals", "r_fail_other"]),
        timeouts: sum(&["totals", "timeouts"]),
        se_rejected: se_rejected as u64,
        re_rejected: metric(&re_text, "holdline_sip_rejected_overload_total") as u64,
        re_active_max: active.iter().map(|a| a.1).fold(0.0f64, f64::max),
        re_cpu_s: cpu_s,
        re_busy: cpu_s / window.max(1e-3),
    };
    write_active(&runs.join(format!("{tag}-active.csv")), &active)?;
    Ok(point)
}

fn write_active(path: &Path, active: &[(f64, f64)]) -> Result<()> {
    let mut csv = String::from("t_s,active_sessions\n");
    for (t, a) in active {
        csv.push_str(&format!("{t:.3},{a}\n"));
    }
    std::fs::write(path, csv).map_err(|e| LabError::io(format!("write {}", path.display()), e))
}

fn read_active(path: &Path) -> Vec<(f64, f64)> {
    std::fs::read_to_string(path)
        .map(|t| {
            t.lines()
                .skip(1)
                .filter_map(|l| {
                    let (a, b) = l.split_once(',')?;
                    Some((a.parse().ok()?, b.parse().ok()?))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn progress(i: usize, n: usize, p: &Point, started: Instant) {
    eprintln!(
        "[{i}/{n} {:>5.0} s] {:<7} {:>2} SE {:>5.2}x offered {:>7.1}/s  throughput {:>6.1}/s  PDD p50 {:>7.1} ms p99 {:>8.1} ms  503 {:>6}  other {:>5}  200 retrans {:>6}  fairness {}",
        started.elapsed().as_secs_f64(),
        p.mechanism,
        p.ses.unwrap_or(1),
        p.load_factor,
        p.offered_cps,
        p.throughput_cps,
        p.pdd_p50_ms,
        p.pdd_p99_ms,
        p.r503,
        p.r_other,
        p.retrans_200,
        p.fairness
            .map_or_else(|| "-".to_string(), |f| format!("{f:.3}")),
    );
}

fn tag(mechanism: &str, ses: u32, factor: f64) -> String {
    format!("{mechanism}-{ses}se-{factor}x")
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
        .unwrap_or(if args.sweep.quick { 4.0 } else { 15.0 });
    let drain = if args.sweep.quick {
        5.0
    } else {
        GOODPUT_WINDOW_S
    };
    let loads = if args.sweep.loads.is_empty() {
        if args.sweep.quick {
            vec![0.5, 5.0, 10.0]
        } else {
            vec![0.5, 0.8, 1.0, 1.5, 2.0, 3.0, 5.0, 7.0, 10.0]
        }
    } else {
        args.sweep.loads.clone()
    };
    let ses = if args.ses.is_empty() {
        if args.sweep.quick {
            vec![1, 3]
        } else {
            vec![1, 3, 10]
        }
    } else {
        args.ses.clone()
    };
    let mechanisms: Vec<String> = if args.sweep.mechanisms.is_empty() {
        MECHANISMS.iter().map(|s| s.to_string()).collect()
    } else {
        args.sweep.mechanisms.clone()
    };
    if let Some(bad) = mechanisms
        .iter()
        .find(|m| !MECHANISMS.contains(&m.as_str()))
    {
        return Err(LabError::Precondition(format!(
            "unknown mechanism `{bad}` (known: {})",
            MECHANISMS.join(", ")
        )));
    }
    if ses.iter().any(|&n| n == 0 || n > 64) {
        return Err(LabError::Precondition(
            "--ses: each number of SEs must be between 1 and 64".into(),
        ));
    }
    let nominal = 1e6 / (MESSAGES_PER_CALL * args.sweep.cost_us.max(1) as f64);
    let steps: &[f64] = if args.capacity.is_some() {
        &[]
    } else if args.sweep.quick {
        &[0.8, 0.9, 1.0]
    } else {
        &[0.7, 0.8, 0.9, 1.0, 1.1]
    };
    let total = steps.len() + loads.len() * mechanisms.len() * ses.len();
    let mut done = 0;
    eprintln!(
        "tcp-overload: RE {} µs per message (rejections {} µs), nominal capacity {:.0} calls/s; {} points of {:.0} s; SEs {:?}; mechanisms {:?}",
        args.sweep.cost_us, args.sweep.reject_cost_us, nominal, total, duration, ses, mechanisms
    );

    // Phase 1: the RE's capacity (no control, one SE).
    let mut capacity_steps = Vec::new();
    let mut capacity = args.capacity.unwrap_or(0.0);
    for &f in steps {
        let rate = (nominal * f).round();
        let spec = Spec {
            mechanism: "none",
            ses: 1,
            cost_us: args.sweep.cost_us,
            reject_cost_us: args.sweep.reject_cost_us,
            rate,
            duration_s: duration,
            drain_s: drain,
            tag: format!("capacity-{rate}"),
        };
        let mut p = run_point(&exe, &runs, &spec, 0.0)?;
        p.load_factor = f;
        done += 1;
        progress(done, total, &p, started);
        let clean = p.calls_attempted > 0
            && p.calls_ok == p.calls_attempted
            && p.pdd_p99_ms <= 200.0
            && p.retrans_200 == 0;
        if clean {
            capacity = capacity.max(rate);
        }
        capacity_steps.push(p);
    }
    if capacity <= 0.0 {
        capacity = nominal * steps.first().copied().unwrap_or(1.0);
        eprintln!(
            "tcp-overload: no capacity step was clean; using {capacity:.0} calls/s (the lowest step)"
        );
    }
    eprintln!("tcp-overload: capacity {capacity:.0} calls/s");

    // Phase 2: the curves.
    let mut points = Vec::new();
    for &n in &ses {
        for &f in &loads {
            for m in &mechanisms {
                let spec = Spec {
                    mechanism: m,
                    ses: n,
                    cost_us: args.sweep.cost_us,
                    reject_cost_us: args.sweep.reject_cost_us,
                    rate: (capacity * f).round(),
                    duration_s: duration,
                    drain_s: drain,
                    tag: tag(m, n, f),
                };
                let p = run_point(&exe, &runs, &spec, capacity)?;
                done += 1;
                progress(done, total, &p, started);
                points.push(p);
                // What is measured so far survives an interrupted run.
                let partial = serde_json::json!({
                    "experiment": "tcp-overload",
                    "partial": true,
                    "capacity_cps": capacity,
                    "points": &points,
                });
                std::fs::write(
                    args.out.join("results.partial.json"),
                    serde_json::to_string_pretty(&partial).unwrap_or_default(),
                )
                .map_err(|e| LabError::io("write results.partial.json", e))?;
            }
        }
    }

    let results = Results {
        experiment: "tcp-overload".into(),
        command: crate::runner::command_line(),
        started_unix_s: crate::runner::started_unix_s(started),
        quick: args.sweep.quick,
        machine: machine(),
        emulate_cost_us: args.sweep.cost_us,
        emulate_reject_cost_us: args.sweep.reject_cost_us,
        re_config: re_config_sf(0),
        nominal_capacity_cps: nominal,
        capacity_cps: capacity,
        capacity_steps,
        points,
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    write(&args.out, &results)?;
    let _ = std::fs::remove_file(args.out.join("results.partial.json"));
    Ok(results)
}

/// Rewrites `points.csv` and the plots from `DIR/results.json` and the files in `DIR/runs`.
fn replot(out: &Path) -> Result<Results> {
    let path = out.join("results.json");
    let r: Results = serde_json::from_value(read_json(&path)?).map_err(|e| LabError::Report {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    write(out, &r)?;
    Ok(r)
}

/// The series label of a mechanism and number of SEs.
fn label(mechanism: &str, ses: u32) -> String {
    let name = match mechanism {
        "ics" => "ICS+BM+SF",
        "ecs" => "ECS+BM+SF",
        "default" => "holdline defaults",
        _ => "no control",
    };
    format!("{name}, {ses} SE{}", if ses == 1 { "" } else { "s" })
}

fn write(out: &Path, r: &Results) -> Result<()> {
    let json = serde_json::to_string_pretty(r).map_err(|e| LabError::Report {
        path: out.join("results.json"),
        reason: e.to_string(),
    })?;
    std::fs::write(out.join("results.json"), json)
        .map_err(|e| LabError::io("write results.json", e))?;
    let mut csv = String::from(
        "experiment,mechanism,ses,load_factor,offered_cps,capacity_cps,throughput_cps,completed_total,goodput_cps,goodput_steady_cps,pdd_p50_ms,pdd_p99_ms,retrans_200,retrans_invite,fairness,calls_attempted,calls_ok,r503,r_other,timeouts,se_rejected,re_rejected,re_active_max,re_cpu_s,re_busy,per_se_cps\n",
    );
    for p in &r.points {
        csv.push_str(&format!(
            "{},{},{},{:.3},{:.1},{:.1},{:.1},{},{:.1},{:.1},{:.1},{:.1},{},{},{},{},{},{},{},{},{},{},{},{:.3},{:.3},{}\n",
            p.experiment,
            p.mechanism,
            p.ses.unwrap_or(1),
            p.load_factor,
            p.offered_cps,
            p.capacity_cps,
            p.throughput_cps,
            p.completed_total,
            p.goodput_cps,
            p.goodput_steady_cps,
            p.pdd_p50_ms,
            p.pdd_p99_ms,
            p.retrans_200,
            p.retrans_invite,
            p.fairness.map_or_else(String::new, |f| format!("{f:.4}")),
            p.calls_attempted,
            p.calls_ok,
            p.r503,
            p.r_other,
            p.timeouts,
            p.se_rejected,
            p.re_rejected,
            p.re_active_max,
            p.re_cpu_s,
            p.re_busy,
            p.per_se_cps
                .iter()
                .map(|x| format!("{x:.1}"))
                .collect::<Vec<_>>()
                .join(";"),
        ));
    }
    std::fs::write(out.join("points.csv"), csv).map_err(|e| LabError::io("write points.csv", e))?;

    let mut ses: Vec<u32> = r.points.iter().filter_map(|p| p.ses).collect();
    ses.sort_unstable();
    ses.dedup();
    let mechanisms: Vec<&str> = MECHANISMS
        .iter()
        .copied()
        .filter(|m| r.points.iter().any(|p| p.mechanism == *m))
        .collect();
    let series_of = |f: fn(&Point) -> Option<f64>| {
        let mut out = Vec::new();
        for &n in &ses {
            for m in &mechanisms {
                let mut pts: Vec<(f64, f64)> = r
                    .points
                    .iter()
                    .filter(|p| p.mechanism == *m && p.ses == Some(n))
                    .filter_map(|p| f(p).map(|y| (p.offered_cps, y)))
                    .collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                if !pts.is_empty() {
                    out.push((label(m, n), pts));
                }
            }
        }
        out
    };
    let mut throughput = series_of(|p| Some(p.throughput_cps));
    let mut xs: Vec<f64> = r.points.iter().map(|p| p.offered_cps).collect();
    xs.sort_by(f64::total_cmp);
    throughput.push((
        "capacity".to_string(),
        xs.iter().map(|x| (*x, r.capacity_cps)).collect(),
    ));
    plot::chart(
        out,
        "throughput",
        &format!(
            "SIP over TCP, SEs -> RE (capacity {:.0} calls/s): throughput (ACK reached the UAS) vs offered",
            r.capacity_cps
        ),
        "offered calls/s",
        "calls/s",
        &throughput,
    )?;
    plot::chart(
        out,
        "fairness",
        "Jain's fairness index over the SEs' throughputs",
        "offered calls/s",
        "Jain's index",
        &series_of(|p| p.fairness),
    )?;

    // At the highest load: PDD distribution and active sessions over time.
    let top = r
        .points
        .iter()
        .map(|p| p.load_factor)
        .fold(0.0f64, f64::max);
    let mut cdf = Vec::new();
    let mut active = Vec::new();
    let mut active_none = Vec::new();
    for &n in &ses {
        for m in &mechanisms {
            let Some(p) = r.points.iter().find(|p| {
                p.mechanism == *m && p.ses == Some(n) && (p.load_factor - top).abs() < 1e-6
            }) else {
                continue;
            };
            let t = tag(m, n, p.load_factor);
            let runs = out.join("runs");
            // The PDD of SE 0's UAC (every UAC carries the same share).
            if let Ok(v) = read_json(&runs.join(format!("{t}-uac0.json"))) {
                cdf.push((label(m, n), cdf_points(&v["latency"]["pdd"])));
            }
            let samples = read_active(&runs.join(format!("{t}-active.csv")));
            if *m == "none" {
                active_none.push((label(m, n), samples));
            } else {
                active.push((label(m, n), samples));
            }
        }
    }
    plot::chart(
        out,
        "pdd",
        &format!("PDD distribution at {top}x (SE 0's UAC, from its percentiles)"),
        "post-dial delay (INVITE to 200 OK), ms",
        "% of completed calls",
        &cdf,
    )?;
    plot::chart(
        out,
        "active",
        &format!("Active sessions at the RE (INVITE taken, no BYE yet) at {top}x, with control"),
        "seconds since the load started",
        "sessions",
        &active,
    )?;
    plot::chart(
        out,
        "active-none",
        &format!("Active sessions at the RE at {top}x without control"),
        "seconds since the load started",
        "sessions",
        &active_none,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn active_sessions_count_invites_without_bye() {
        let text = "holdline_sip_requests_in_total{worker=\"0\",method=\"INVITE\"} 120\n\
                    holdline_sip_requests_in_total{worker=\"0\",method=\"ACK\"} 100\n\
                    holdline_sip_requests_in_total{worker=\"0\",method=\"BYE\"} 95\n\
                    holdline_sip_rejected_overload_total{worker=\"0\"} 5\n";
        assert_eq!(active_sessions(text), 20.0);
        assert_eq!(active_sessions(""), 0.0);
    }

    #[test]
    fn ses_use_the_papers_rule_with_ics_and_ecs_and_the_defaults_otherwise() {
        let parse = |m: &str| {
            holdline_server::ServerConfig::from_toml("se.toml", &se_config(5070, m))
                .unwrap_or_else(|e| panic!("{m}: {e}"))
        };
        for m in ["ics", "ecs"] {
            let o = parse(m).overload;
            assert_eq!(
                (o.smart_forwarding_threshold, o.smart_forwarding_hold_ms),
                (0, 0),
                "{m}"
            );
        }
        for m in ["none", "default"] {
            assert_eq!(
                parse(m).overload,
                holdline_server::ServerConfig::default().overload,
                "{m}"
            );
        }
    }

    #[test]
    fn the_re_configurations_are_valid_server_configurations() {
        for text in [
            re_config_sf(5080),
            re_config_none(5080),
            re_config_default(5080),
        ] {
            let c = holdline_server::ServerConfig::from_toml("re.toml", &text)
                .unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert!(c.record_route);
        }
        let default = holdline_server::ServerConfig::from_toml("re.toml", &re_config_default(5080))
            .expect("valid");
        assert_eq!(
            default.overload,
            holdline_server::ServerConfig::default().overload
        );
        let sf = holdline_server::ServerConfig::from_toml("re.toml", &re_config_sf(5080))
            .expect("valid");
        assert_eq!(sf.overload.local, "none");
        assert!(sf.overload.defers_new_invites());
        let b = sf.listener_buffers(&"tcp:127.0.0.1:5080".parse().expect("listener"));
        assert_eq!(
            (b.recv_buffer, b.read_buffer, b.max_segment),
            (Some(1024), 2048, Some(536))
        );
        let none = holdline_server::ServerConfig::from_toml("re.toml", &re_config_none(5080))
            .expect("valid");
        assert_eq!(none.overload.local, "none");
        assert!(!none.overload.defers_new_invites());
        assert_eq!(none.overload.smart_forwarding_mode(), "off");
    }
}
