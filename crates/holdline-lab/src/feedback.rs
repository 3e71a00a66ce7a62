//! `holdline lab feedback`: hop-by-hop overload control (RFC 7339, issue 15 item 6). M UACs,
//! each calling through its own SE (a `holdline serve`), all SEs forwarding to one
//! capacity-limited RE (`holdline serve`, one worker, pinned to core 1), which forwards to one
//! UAS; every hop UDP on 127.0.0.1, every server record-routing (the RE handles six messages
//! per call). M = 1, 3, 10; offered 0.5× to 10× the RE's measured capacity; mechanisms:
//!
//! | mechanism | SEs | RE |
//! | --- | --- | --- |
//! | `none` | `--overload none` (no control, no feedback) | `--overload none`: the kernel's receive buffer is a drop-tail queue |
//! | `occ` | `--feedback none` (local control only, nothing offered) | local OCC (holdline's default): the RE rejects the excess itself |
//! | `loss` | `--feedback loss`: offer `oc` in the Via, drop the share of new INVITEs the RE asks for (503 upstream) | local OCC, answering offering clients with its acceptance as a loss percentage (`feedback_answer = true`); their INVITEs skip its gate |
//! | `rate` | `--feedback rate`: offer `oc;oc-algo="rate"`, keep under the RE's share of its rate | local OCC, answering rate clients with an even share of its rate |
//! | `window` | `--feedback explicit-window`: offer `oc;oc-algo="window"`, keep at most the RE's window of new INVITEs unanswered | local OCC, answering window clients with an even share of a window of its read rate × 20 ms |
//!
//! The RE's capacity is limited either by emulated work (`--cost-us`, 1 ms per message by
//! default, rejections their real cost) or, with `--cpu-quota PCT`, by a cgroup v1 CPU group
//! it is born in (no emulated work). Phases, each point with fresh processes: **capacity**
//! (mechanism `none`, one SE; emulated: 0.7× to 1.1× the nominal capacity, the highest
//! offered rate whose calls all completed with PDD p99 ≤ 200 ms and no INVITE
//! retransmission; under a quota: the RE's CPU per call measured without quota, then a ramp
//! up to saturation, whose throughput is the reference), then **the curve** (every M, load
//! factor, run and mechanism).
//!
//! Measured per point: offered load, steady goodput (200 OK within 10 s, over the last three
//! quarters of the load window), throughput (ACKs at the UAS in the load window), PDD, INVITE
//! and 200 OK retransmissions, the 503s by who sent them (the SEs' `loss_throttle`/`rate_throttle`, the RE's
//! local `occupancy` rejections, scraped from their metrics), the feedback's overhead
//! (answers the RE sent, reports the SEs took), the RE's CPU (`/proc`) and Jain's index over
//! the goodput of the SEs' UACs. Output in `--out DIR`: `results.json`, `points.csv`,
//! `summary.csv` (medians with `--repeat` > 1), plots `goodput` and `pdd` (SVG and PNG), and
//! every process's report and log under `runs/`.
//!
//! **Load steps** (`--step-from F --step-at S`): each point starts at F × the capacity and a
//! second UAC per SE joins at S seconds with the rest of the point's load; the RE's goodput
//! per second (calls completed at the UAS), the UACs' offered calls and 503s per second go to
//! `step.csv` and `step-goodput.svg/png`, and each point's `settle_s` is how many seconds after
//! the step its RE goodput took to stay within ±10 % of its mean over the last five seconds
//! (issue 15: "a new steady state within 2 s of a load step"). The steady goodput and PDD p99
//! of such a point are those after the step (from 2 s after it; the step UACs' steady phase).

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
    Proc, SweepArgs, UacLoad, check_tools, column, holdline_exe, lab_main, machine, median, metric,
    metric_where, processing_us_above, scrape, scrape_fresh, spawn, spawn_in, start_uacs,
    start_uas, sum_in, uacs_steady_goodput, window_sum,
};
use crate::server::{SERVER_CORE, Transport, free_port, tail, wait_bound};

/// Messages through the RE per call: INVITE, 180, 200, ACK, BYE, 200.
const MESSAGES_PER_CALL: f64 = 6.0;
/// A call counts as goodput when its 200 OK came within this (seed 003's window).
const GOODPUT_WINDOW_S: f64 = 10.0;
/// The mechanisms measured, in plotting order.
const MECHANISMS: [&str; 5] = ["none", "occ", "loss", "rate", "window"];
/// Under `--cpu-quota`: the offered rate (no quota, no control) at which the RE's CPU per
/// call is measured.
const CALIBRATION_CPS: f64 = 2000.0;
/// Under `--cpu-quota`: at most this many capacity steps, each this factor above the last,
/// from 0.8 × the nominal capacity (the ramp stops at the first saturated step).
const QUOTA_RAMP_STEPS: i32 = 8;
const QUOTA_RAMP_FACTOR: f64 = 1.3;

/// `holdline lab feedback` options.
#[derive(Debug, Parser)]
#[command(
    name = "holdline lab feedback",
    about = "Hop-by-hop overload control (RFC 7339) over UDP: SEs -> one capacity-limited RE, no control vs local OCC vs loss feedback"
)]
pub struct Args {
    /// The sweep's options (mechanisms: none, occ, loss; default: all, quick: occ,loss).
    #[command(flatten)]
    pub sweep: SweepArgs,
    /// Results directory.
    #[arg(long, value_name = "DIR", default_value = "lab-results/feedback")]
    pub out: PathBuf,
    /// Numbers of SEs, comma-separated (default: 1 quick; 1,3,10 full).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub ses: Vec<u32>,
    /// Skip the capacity phase and use this capacity of the RE, calls/s.
    #[arg(long, value_name = "CPS")]
    pub capacity: Option<f64>,
    /// Run the RE in a cgroup v1 CPU group with this quota, percent of one core, and without
    /// emulated work (`--cost-us` is then ignored): its capacity is found by a ramp from its
    /// measured CPU per call. Needs root.
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
    /// A load step: every point's load starts at this factor of the capacity and steps up to
    /// the point's load at `--step-at` (more UACs join then); the RE's goodput per second
    /// goes to `step.csv` and `step-goodput.svg/png`, and each point's `settle_s` is how long
    /// after the step its goodput took to stay within ±10 % of its last five seconds.
    #[arg(long, value_name = "F")]
    pub step_from: Option<f64>,
    /// When the step comes, seconds into the load (default: half the duration).
    #[arg(long, value_name = "S", requires = "step_from")]
    pub step_at: Option<f64>,
}

/// A load step of one point: the load starts at `from_cps` and becomes the point's at `at_s`.
#[derive(Clone, Copy, Debug)]
struct Step {
    from_cps: f64,
    at_s: f64,
}

/// One second of a point's run, for load-step plots.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Second {
    /// The second's end, seconds after the load started.
    pub t_s: f64,
    /// New calls the UACs offered in it.
    pub offered: f64,
    /// Calls completed at the UAS in it (the RE's goodput).
    pub re_goodput: f64,
    /// 503s the UACs received in it.
    pub r503: f64,
}

/// Seconds after the step until the RE's goodput stays within ±10 % of its mean over the
/// last five seconds of the load: the smallest `k` such that every second ending after
/// `at_s + k` is within; `None` without a goodput to settle to. The load's last second is
/// left out: the UACs stop placing calls in it and the RE finishes what it holds (measured:
/// 179–195 calls/s completed in it against 150 before).
pub fn settle_seconds(series: &[Second], at_s: f64, duration_s: f64) -> Option<f64> {
    let end = duration_s - 1.0;
    let last: Vec<f64> = series
        .iter()
        .filter(|s| s.t_s > end - 5.0 && s.t_s <= end)
        .map(|s| s.re_goodput)
        .collect();
    if last.is_empty() {
        return None;
    }
    let steady = last.iter().sum::<f64>() / last.len() as f64;
    if steady <= 0.0 {
        return None;
    }
    let after: Vec<&Second> = series
        .iter()
        .filter(|s| s.t_s > at_s && s.t_s <= end)
        .collect();
    let outside = after
        .iter()
        .rposition(|s| (s.re_goodput - steady).abs() > 0.1 * steady);
    Some(outside.map_or(0.0, |i| after[i].t_s - at_s))
}

/// One measured point (one row of `points.csv`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    /// `feedback`.
    pub experiment: String,
    /// `none`, `occ` or `loss`.
    pub mechanism: String,
    /// Number of SEs.
    pub ses: Option<u32>,
    /// Offered load / capacity.
    pub load_factor: f64,
    /// Offered calls per second, all UACs (measured at the UACs).
    pub offered_cps: f64,
    /// The RE's capacity the load factors refer to.
    pub capacity_cps: f64,
    /// Calls whose ACK reached the UAS while the load was offered, per second.
    pub throughput_cps: f64,
    /// Calls whose 200 OK reached their UAC within 10 s of the first INVITE, per second of
    /// load, all UACs (calls completed during the drain included).
    pub goodput_cps: f64,
    /// Goodput over the last three quarters of the load window (no drain), all UACs: the
    /// goodput of the steady phase.
    pub goodput_steady_cps: f64,
    /// `goodput_steady_cps / capacity_cps`.
    pub goodput_of_capacity: f64,
    /// PDD (first INVITE to 200 OK) p50, ms: the UACs' p50s weighted by their calls.
    pub pdd_p50_ms: f64,
    /// PDD p99, ms: the largest of the UACs' p99s.
    pub pdd_p99_ms: f64,
    /// PDD p99 of the calls placed in the steady phase (the last three quarters of the load,
    /// as `goodput_steady_cps`), ms: the largest of the UACs'. `None` in older results.
    #[serde(default)]
    pub pdd_p99_steady_ms: Option<f64>,
    /// PDD mean over every UAC's calls, ms (well-conditioned where the median sits on a
    /// step of the retransmission schedule).
    #[serde(default)]
    pub pdd_mean_ms: Option<f64>,
    /// INVITE retransmissions by the UACs.
    pub retrans_invite: u64,
    /// 200 OK retransmissions by the UAS.
    pub retrans_200: u64,
    /// Jain's fairness index over the goodput of the SEs' UACs (`None` with one SE).
    pub fairness: Option<f64>,
    /// Goodput (200 OK within 10 s) per second of load, by SE (from each SE's UAC report).
    pub per_se_goodput_cps: Vec<f64>,
    /// Calls placed.
    pub calls_attempted: u64,
    /// Calls completed (200 OK, ACK, BYE answered).
    pub calls_ok: u64,
    /// 503 responses at the UACs (the SEs' own 503s: their throttling or local control).
    pub r503: u64,
    /// Other final failures at the UACs: an SE answers `500` upstream for a `503` of the RE
    /// (RFC 3261 §16.7).
    pub r_other: u64,
    /// Calls that timed out or were cut by the drain limit.
    pub timeouts: u64,
    /// New INVITEs the SEs rejected because of the RE's answers
    /// (`holdline_feedback_rejected_total{reason="loss_throttle"|"rate_throttle"|"window_full"}`).
    pub se_throttled: u64,
    /// New INVITEs the SEs rejected by their own local control (`reason="occupancy"`).
    pub se_local_rejected: u64,
    /// New INVITEs the RE rejected by its local control
    /// (`holdline_overload_rejected_total{reason="occupancy"}`).
    pub re_rejected: u64,
    /// Every 503 of the RE's gate (`holdline_sip_rejected_overload_total`, all reasons).
    pub re_rejected_all: u64,
    /// Responses the RE sent carrying a feedback answer (`holdline_feedback_answers_total`).
    pub re_answers: u64,
    /// New INVITEs of offering clients that skipped the RE's gate.
    pub re_gate_exempt: u64,
    /// Valid feedback answers the SEs took (`holdline_feedback_reports_total{result="valid"}`).
    pub se_reports: u64,
    /// The RE's answer (loss percent) when the load ended (`None`: it answered nothing).
    pub re_loss_percent: Option<f64>,
    /// The RE's local acceptance fraction when the load ended.
    pub re_acceptance: f64,
    /// RE CPU over the run, seconds.
    pub re_cpu_s: f64,
    /// RE core busy over the run (1.0 = one core).
    pub re_busy: f64,
    /// Which run of the point this is (`--repeat`), from 0.
    #[serde(default)]
    pub run: u32,
    /// Mean wall time the RE spent on a message served at full emulated cost (its
    /// processing histogram above 0.5 ms), µs (`holdline sim agree` models the point with
    /// it). `None` under a CPU quota or an emulated cost below 0.5 ms.
    #[serde(default)]
    pub re_service_us_measured: Option<f64>,
    /// The run's files in `runs/` start with this (`TAG-re.metrics`: the RE's metrics, read
    /// once its worker was done; `holdline sim agree` compares what it read by kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// With `--step-from`: when the load stepped, seconds into it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_at_s: Option<f64>,
    /// With `--step-from`: [`settle_seconds`] of this point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle_s: Option<f64>,
    /// With `--step-from`: the run second by second.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub series: Vec<Second>,
}

/// Everything a run measured (`results.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    /// `feedback`.
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
    /// The CPU quota of the RE, percent of one core (`--cpu-quota`), if any.
    pub cpu_quota_percent: Option<u64>,
    /// The quota's period, µs.
    pub quota_period_us: Option<u64>,
    /// RE CPU per completed call measured without quota or control (quota mode), µs.
    pub calibration_cpu_us_per_call: Option<f64>,
    /// Nominal capacity: from the emulated cost, or from the quota and the CPU per call.
    pub nominal_capacity_cps: f64,
    /// The highest clean rate of the capacity steps (or `--capacity`).
    pub clean_capacity_cps: f64,
    /// The highest steady goodput of the capacity steps.
    pub saturation_cps: f64,
    /// The capacity load factors refer to: the clean capacity, under a quota the saturation
    /// throughput.
    pub capacity_cps: f64,
    /// `--repeat`.
    pub repeat: u32,
    /// Capacity steps (mechanism `none`, one SE).
    pub capacity_steps: Vec<Point>,
    /// The curve.
    pub points: Vec<Point>,
    /// Wall time of the run, s.
    pub elapsed_s: f64,
}

/// Entry point of `holdline lab feedback ARGS`.
pub fn main(args: Vec<String>) -> ExitCode {
    lab_main(
        "feedback",
        args,
        |a: &Args| a.out.clone(),
        run,
        |r: &Results| r.elapsed_s,
    )
}

/// How the servers of one mechanism are started.
///
/// A name is a base mechanism (`none`, `occ`, `loss`, `rate`, or `delay-window`, seed 004's
/// window at the SEs in front of an RE without control) with options `+KEY=VALUE`, each a
/// line of the RE's `[overload]` section, e.g. `loss+udp_invite_recv_buffer=16384`.
/// `holdline lab window` starts its upstream and downstream servers from the same table.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Mechanism {
    /// The RE's `--overload`.
    pub(crate) re_overload: &'static str,
    /// The RE's `[overload]` lines (a config file), if any.
    pub(crate) re_config: Option<String>,
    /// The SEs' extra arguments.
    pub(crate) se_args: &'static [&'static str],
}

impl Mechanism {
    /// The servers' settings of mechanism `name` (see the type's documentation).
    pub(crate) fn parse(name: &str) -> Result<Self> {
        let mut parts = name.split('+');
        let base = parts.next().unwrap_or_default();
        let answer = "[overload]\nfeedback_answer = true\n";
        let mut m = match base {
            "none" => Self {
                re_overload: "none",
                re_config: None,
                se_args: &["--overload=none", "--feedback=none"],
            },
            "occ" => Self {
                re_overload: "occ",
                re_config: None,
                se_args: &["--feedback=none"],
            },
            // The RE's receive queue as the only bound (503 when its INVITE queue is full),
            // for the simulator's agreement with the SE→RE set-up (issue 16 item 5).
            "queue-limit" => Self {
                re_overload: "queue-limit",
                re_config: None,
                se_args: &["--feedback=none"],
            },
            "loss" => Self {
                re_overload: "occ",
                re_config: Some(answer.to_owned()),
                se_args: &["--feedback=loss"],
            },
            "rate" => Self {
                re_overload: "occ",
                re_config: Some(answer.to_owned()),
                se_args: &["--feedback=rate"],
            },
            // Seed 004's window without feedback: the RE has no control of its own and
            // knows nothing of it; each SE keeps a window of outstanding INVITEs towards it.
            "delay-window" => Self {
                re_overload: "none",
                re_config: None,
                se_args: &["--feedback=window"],
            },
            // The explicit window: the RE answers how many new INVITEs each SE may have
            // unanswered there.
            "window" => Self {
                re_overload: "occ",
                re_config: Some(answer.to_owned()),
                se_args: &["--feedback=explicit-window"],
            },
            other => {
                return Err(LabError::Precondition(format!(
                    "unknown mechanism `{other}` (known: {}, queue-limit, delay-window)",
                    MECHANISMS.join(", ")
                )));
            }
        };
        overload_lines(name, parts, "the RE's", &mut m.re_config)?;
        Ok(m)
    }
}

/// Appends a mechanism's options (`KEY=VALUE`, the parts after its name in `name`) to
/// `config` as lines of an `[overload]` section for `whose` server (e.g. "the RE's"); an
/// option that is not `KEY=VALUE` is refused, naming the mechanism.
pub(crate) fn overload_lines<'a>(
    name: &str,
    options: impl Iterator<Item = &'a str>,
    whose: &str,
    config: &mut Option<String>,
) -> Result<()> {
    for opt in options {
        match opt.split_once('=') {
            Some((k, v)) if !k.is_empty() && !v.is_empty() => {
                let cfg = config.get_or_insert_with(|| "[overload]\n".to_owned());
                cfg.push_str(&format!("{k} = {v}\n"));
            }
            _ => {
                return Err(LabError::Precondition(format!(
                    "mechanism `{name}`: option `{opt}` is not KEY=VALUE (a line of \
                     {whose} [overload] section)"
                )));
            }
        }
    }
    Ok(())
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
    /// The `cgroup.procs` file of the CPU group the RE is born in, if any.
    group: Option<&'a Path>,
    /// A load step within the point, if any.
    step: Option<Step>,
}

/// `holdline serve` on UDP 127.0.0.1:`port`, one worker, in-memory store, metrics on
/// `metrics`, everything routed to UDP 127.0.0.1:`next_hop` (also `holdline lab window`'s
/// servers).
pub(crate) fn server_args(port: u16, metrics: u16, next_hop: u16) -> Vec<String> {
    vec![
        "serve".into(),
        format!("--listen=udp:127.0.0.1:{port}"),
        format!("--route=*=udp:127.0.0.1:{next_hop}"),
        "--workers=1".into(),
        "--store=memory".into(),
        // The kernel's default receive buffer, as the papers' servers had it (and the
        // simulator's scenarios model): holdline's own default is 8 MiB.
        format!("--udp-recv-buffer={}", crate::KERNEL_UDP_RECV_BUFFER),
        format!("--metrics=127.0.0.1:{metrics}"),
    ]
}

/// [`run_point_once`], again with fresh ports when a process could not bind its port.
fn run_point(exe: &Path, runs: &Path, spec: &Spec<'_>, capacity: f64) -> Result<Point> {
    crate::runner::with_fresh_ports("feedback", &spec.tag, || {
        run_point_once(exe, runs, spec, capacity)
    })
}

/// Runs one point with fresh processes; their reports and logs stay in `runs` (`TAG-…`).
fn run_point_once(exe: &Path, runs: &Path, spec: &Spec<'_>, capacity: f64) -> Result<Point> {
    let mech = Mechanism::parse(spec.mechanism)?;
    let m = spec.ses.max(1) as usize;
    let (re_port, re_metrics, uas_port) = (free_port()?, free_port()?, free_port()?);
    let tag = &spec.tag;
    let limit = spec.duration_s + spec.drain_s + 5.0;

    // UAS (core 0).
    let uas_json = runs.join(format!("{tag}-uas.json"));
    let uas_csv = runs.join(format!("{tag}-uas.csv"));
    let uas_started = Instant::now();
    let mut uas = start_uas(exe, runs, tag, uas_port, Transport::Udp, true, limit + 3.0)?;

    // RE (core 1, in the CPU group if any).
    let mut re_args = server_args(re_port, re_metrics, uas_port);
    re_args.extend([
        format!("--overload={}", mech.re_overload),
        format!("--emulate-cost-us={}", spec.cost_us),
        format!("--emulate-reject-cost-us={}", spec.reject_cost_us),
    ]);
    if let Some(text) = &mech.re_config {
        let cfg = runs.join(format!("{tag}-re.toml"));
        std::fs::write(&cfg, text)
            .map_err(|e| LabError::io(format!("write {}", cfg.display()), e))?;
        re_args.push(format!("--config={}", cfg.display()));
    }
    let re_log = runs.join(format!("{tag}-re.log"));
    let mut re = spawn_in(SERVER_CORE, spec.group, exe, &re_args, &re_log)?;
    wait_bound(&mut re.0, re_port, Some(Transport::Udp), "the RE", &re_log)?;

    // SEs (core 0).
    let mut ses: Vec<(Proc, u16, u16)> = Vec::with_capacity(m);
    for i in 0..m {
        let (port, metrics) = (free_port()?, free_port()?);
        let mut args = server_args(port, metrics, re_port);
        args.extend(mech.se_args.iter().map(|a| a.to_string()));
        let log = runs.join(format!("{tag}-se{i}.log"));
        let mut p = spawn(GENERATOR_CORE, exe, &args, &log)?;
        wait_bound(&mut p.0, port, Some(Transport::Udp), "an SE", &log)?;
        ses.push((p, port, metrics));
    }

    // UACs (core 0), one per SE, the load split evenly.
    let cpu0 = procfs::tree_cpu_us(re.0.id());
    let t0 = Instant::now();
    // Where the load window falls on the UAS's clock.
    let offset = t0.saturating_duration_since(uas_started).as_secs_f64();
    let targets: Vec<u16> = ses.iter().map(|(_, port, _)| *port).collect();
    let load = UacLoad {
        rate: spec.step.map_or(spec.rate, |s| s.from_cps),
        duration_s: spec.duration_s,
        drain_s: spec.drain_s,
        goodput_window_s: GOODPUT_WINDOW_S,
        max_time_s: limit,
        shares: Vec::new(),
    };
    let mut uacs = start_uacs(exe, runs, tag, &targets, Transport::Udp, &load)?;
    // The step: as many UACs again join at `at_s` with the rest of the load (the sleep is
    // bounded by the load's duration).
    let step_tag = format!("{tag}-step");
    if let Some(step) = spec.step {
        std::thread::sleep(
            (t0 + Duration::from_secs_f64(step.at_s)).saturating_duration_since(Instant::now()),
        );
        let extra = UacLoad {
            rate: spec.rate - step.from_cps,
            duration_s: spec.duration_s - step.at_s,
            max_time_s: limit - step.at_s,
            ..load
        };
        uacs.extend(start_uacs(
            exe,
            runs,
            &step_tag,
            &targets,
            Transport::Udp,
            &extra,
        )?);
    }
    // The RE's answer and acceptance as the load ends (one scrape; the sleep is bounded by
    // the load's duration).
    std::thread::sleep(
        (t0 + Duration::from_secs_f64(spec.duration_s)).saturating_duration_since(Instant::now()),
    );
    let at_load_end = scrape(re_metrics);
    let mut overran = None;
    for (i, u) in uacs.iter_mut().enumerate() {
        let left = Duration::from_secs_f64(limit + 5.0).saturating_sub(t0.elapsed());
        if !wait_bounded(&mut u.0, left) && overran.is_none() {
            overran = Some(i);
        }
    }
    let window = t0.elapsed().as_secs_f64();
    let cpu1 = procfs::tree_cpu_us(re.0.id());
    let re_text = scrape(re_metrics);
    let se_texts: Vec<String> = ses.iter().map(|(_, _, metrics)| scrape(*metrics)).collect();
    // The UAS writes its report on SIGTERM.
    terminate(&uas.0);
    wait_bounded(&mut uas.0, Duration::from_secs(5));
    // Each server's metrics once its worker is done (what it read, by kind: the core's
    // lines), beside its log for diagnosis; a few seconds at most each.
    let settled = std::iter::once((format!("{tag}-re.metrics"), re_metrics)).chain(
        ses.iter()
            .enumerate()
            .map(|(i, (_, _, port))| (format!("{tag}-se{i}.metrics"), *port)),
    );
    for (name, port) in settled {
        let file = runs.join(name);
        std::fs::write(&file, scrape_fresh(port, Duration::from_secs(5)))
            .map_err(|e| LabError::io(format!("write {}", file.display()), e))?;
    }
    drop(ses);
    drop(re);
    // Every UAC's file stem: the first `m` from the start, the step's after them.
    let stems: Vec<String> = (0..uacs.len())
        .map(|i| match i.checked_sub(m) {
            None => format!("{tag}-uac{i}"),
            Some(j) => format!("{step_tag}-uac{j}"),
        })
        .collect();
    if let Some(i) = overran {
        return Err(LabError::Process(format!(
            "{tag}: UAC {i} overran its time limit; log {}",
            tail(&runs.join(format!("{}.log", stems[i])))
        )));
    }

    let mut reports = Vec::with_capacity(stems.len());
    for stem in &stems {
        reports.push(read_json(&runs.join(format!("{stem}.json")))?);
    }
    // Per second of the load: the RE's goodput on the UAS's clock, the UACs' offered calls
    // and 503s on theirs (a step UAC started `at_s` later).
    let series: Vec<Second> = match spec.step {
        None => Vec::new(),
        Some(step) => {
            // Each CSV's column read once: (the UAC's start in the load, its samples).
            let uacs = |name: &str| -> Vec<(f64, Vec<(f64, f64)>)> {
                stems
                    .iter()
                    .enumerate()
                    .map(|(i, stem)| {
                        let start = if i < m { 0.0 } else { step.at_s };
                        (start, column(&runs.join(format!("{stem}.csv")), name))
                    })
                    .collect()
            };
            let (offered, r503) = (uacs("offered"), uacs("r503"));
            let completed = column(&uas_csv, "completed");
            let second = |of: &[(f64, Vec<(f64, f64)>)], k: f64| -> f64 {
                of.iter()
                    .map(|(start, samples)| sum_in(samples, k - start, k + 1.0 - start))
                    .sum()
            };
            (0..spec.duration_s.ceil() as u32)
                .map(|k| {
                    let k = f64::from(k);
                    Second {
                        t_s: k + 1.0,
                        offered: second(&offered, k),
                        re_goodput: sum_in(&completed, offset + k, offset + k + 1.0),
                        r503: second(&r503, k),
                    }
                })
                .collect()
        }
    };
    // A step point's UACs ran for different times: rates over the whole load, per SE.
    let span = |i: usize| match (spec.step, i < m) {
        (Some(step), false) => spec.duration_s - step.at_s,
        _ => spec.duration_s,
    };
    let per_se: Vec<f64> = {
        let mut v = vec![0.0; m];
        for (i, r) in reports.iter().enumerate() {
            v[i % m] += num(r, &["goodput_cps"]) * span(i) / spec.duration_s.max(1e-3);
        }
        v
    };
    let uas_r = read_json(&uas_json).unwrap_or(Value::Null);
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
    let se_sum = |name: &str, labels: &[&str]| -> u64 {
        se_texts
            .iter()
            .map(|t| metric_where(t, name, labels))
            .sum::<f64>() as u64
    };
    let goodput_steady: f64 = match spec.step {
        // After a step: the RE's goodput from 2 s after it to the end of the load.
        Some(step) => {
            let from = step.at_s + 2.0;
            window_sum(
                &uas_csv,
                "completed",
                offset + from,
                offset + spec.duration_s,
            ) / (spec.duration_s - from).max(1.0)
        }
        None => uacs_steady_goodput(runs, tag, m, spec.duration_s),
    };
    let cpu_s = cpu1.saturating_sub(cpu0) as f64 / 1e6;
    let answering = at_load_end
        .lines()
        .any(|l| l.starts_with("holdline_feedback_answer_loss_percent"));
    Ok(Point {
        experiment: "feedback".into(),
        mechanism: spec.mechanism.to_string(),
        ses: Some(spec.ses),
        load_factor: if capacity > 0.0 {
            spec.rate / capacity
        } else {
            0.0
        },
        offered_cps: reports
            .iter()
            .enumerate()
            .map(|(i, r)| num(r, &["offered_cps"]) * span(i) / spec.duration_s.max(1e-3))
            .sum(),
        capacity_cps: capacity,
        throughput_cps: window_sum(&uas_csv, "completed", offset, offset + spec.duration_s)
            / spec.duration_s.max(1e-3),
        goodput_cps: per_se.iter().sum(),
        goodput_steady_cps: goodput_steady,
        goodput_of_capacity: if capacity > 0.0 {
            goodput_steady / capacity
        } else {
            0.0
        },
        pdd_p50_ms: pdd_p50,
        pdd_mean_ms: (total_n > 0.0).then(|| {
            reports
                .iter()
                .zip(&pdd_n)
                .map(|(r, n)| num(r, &["latency", "pdd", "mean_ms"]) * n)
                .sum::<f64>()
                / total_n
        }),
        pdd_p99_ms: reports
            .iter()
            .map(|r| num(r, &["pdd_p99_ms"]))
            .fold(0.0f64, f64::max),
        // After a step: of the step's UACs' steady phase (from a quarter of their time on).
        pdd_p99_steady_ms: Some(
            reports
                .iter()
                .enumerate()
                .filter(|(i, _)| spec.step.is_none() || *i >= m)
                .map(|(_, r)| num(r, &["latency", "pdd_steady", "p99_ms"]))
                .fold(0.0f64, f64::max),
        ),
        retrans_invite: sum(&["totals", "retrans_invite"]),
        retrans_200: count(&uas_r, &["totals", "retrans_200"]),
        fairness: (m > 1).then(|| holdline_metrics::jain_index(&per_se)),
        per_se_goodput_cps: per_se,
        calls_attempted: sum(&["totals", "attempted"]),
        calls_ok: sum(&["totals", "calls_ok"]),
        r503: sum(&["totals", "r503"]),
        r_other: sum(&["totals", "r_fail_other"]),
        timeouts: sum(&["totals", "timeouts"]),
        // Loss (RFC 7339) and rate (RFC 7415) throttling alike.
        se_throttled: se_sum("holdline_feedback_rejected_total", &["_throttle\""])
            + se_sum(
                "holdline_feedback_rejected_total",
                &["reason=\"window_full\""],
            ),
        se_local_rejected: se_sum(
            "holdline_overload_rejected_total",
            &["reason=\"occupancy\""],
        ),
        re_rejected: metric_where(
            &re_text,
            "holdline_overload_rejected_total",
            &["reason=\"occupancy\""],
        ) as u64,
        re_rejected_all: metric(&re_text, "holdline_sip_rejected_overload_total") as u64,
        re_answers: metric(&re_text, "holdline_feedback_answers_total") as u64,
        re_gate_exempt: metric(&re_text, "holdline_feedback_gate_exempt_total") as u64,
        se_reports: se_sum("holdline_feedback_reports_total", &["result=\"valid\""]),
        re_loss_percent: answering
            .then(|| metric(&at_load_end, "holdline_feedback_answer_loss_percent")),
        re_acceptance: if at_load_end.is_empty() {
            1.0
        } else {
            metric(&at_load_end, "holdline_overload_acceptance_ratio")
        },
        re_cpu_s: cpu_s,
        re_busy: cpu_s / window.max(1e-3),
        run: 0,
        re_service_us_measured: (spec.cost_us >= 500)
            .then(|| processing_us_above(&re_text, 0.0005))
            .flatten(),
        tag: Some(tag.clone()),
        step_at_s: spec.step.map(|s| s.at_s),
        settle_s: spec
            .step
            .and_then(|s| settle_seconds(&series, s.at_s, spec.duration_s)),
        series,
    })
}

fn progress(i: usize, n: usize, p: &Point, started: Instant) {
    eprintln!(
        "[{i}/{n} {:>5.0} s] {:<5} {:>2} SE {:>5.2}x offered {:>7.1}/s  goodput {:>6.1}/s ({})  PDD p50 {:>7.1} ms p99 {:>8.1} ms (steady {:>7.1})  503 SE {:>6} RE {:>6}  INVITE retrans {:>6}  answers {:>6}  fairness {}",
        started.elapsed().as_secs_f64(),
        p.mechanism,
        p.ses.unwrap_or(1),
        p.load_factor,
        p.offered_cps,
        p.goodput_steady_cps,
        if p.capacity_cps > 0.0 {
            format!("{:.2}", p.goodput_of_capacity)
        } else {
            "-".to_string()
        },
        p.pdd_p50_ms,
        p.pdd_p99_ms,
        p.pdd_p99_steady_ms.unwrap_or(f64::NAN),
        p.se_throttled,
        p.re_rejected,
        p.retrans_invite,
        p.re_answers,
        p.fairness
            .map_or_else(|| "-".to_string(), |f| format!("{f:.3}")),
    );
    if let Some(at) = p.step_at_s {
        eprintln!(
            "        step at {at:.0} s: settled after {} s; RE goodput per second {:?}",
            p.settle_s
                .map_or_else(|| "-".to_string(), |s| format!("{s:.0}")),
            p.series
                .iter()
                .map(|s| s.re_goodput.round() as u64)
                .collect::<Vec<_>>()
        );
    }
}

/// The file-name tag of run `run` of mechanism `m` with `ses` SEs at load factor `f`.
fn tag(m: &str, ses: u32, f: f64, run: u32) -> String {
    if run == 0 {
        format!("{m}-{ses}se-{f}x")
    } else {
        format!("{m}-{ses}se-{f}x-r{run}")
    }
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
        .unwrap_or(if quick { 4.0 } else { 15.0 });
    let drain = if quick { 5.0 } else { GOODPUT_WINDOW_S };
    let loads = if !args.sweep.loads.is_empty() {
        args.sweep.loads.clone()
    } else if quick {
        vec![1.0, 5.0]
    } else {
        vec![0.5, 1.0, 2.0, 3.0, 5.0, 10.0]
    };
    // The step's instant: half-way through the load unless `--step-at` says.
    let step_at = args.step_at.unwrap_or(duration / 2.0);
    if let Some(from) = args.step_from {
        let at = step_at;
        if !(from >= 0.0 && loads.iter().all(|&f| f > from)) {
            return Err(LabError::Precondition(format!(
                "--step-from {from}: every load must be above it (loads {loads:?})"
            )));
        }
        if !(at > 0.0 && at + 5.0 <= duration) {
            return Err(LabError::Precondition(format!(
                "--step-at {at}: must leave at least 5 s of the {duration} s load after it"
            )));
        }
    }
    let ses = if !args.ses.is_empty() {
        args.ses.clone()
    } else if quick {
        vec![1]
    } else {
        vec![1, 3, 10]
    };
    let mechanisms: Vec<String> = if !args.sweep.mechanisms.is_empty() {
        args.sweep.mechanisms.clone()
    } else if quick {
        vec!["occ".into(), "loss".into()]
    } else {
        MECHANISMS.iter().map(|s| s.to_string()).collect()
    };
    for m in &mechanisms {
        Mechanism::parse(m)?;
    }
    if ses.iter().any(|&n| n == 0 || n > 64) {
        return Err(LabError::Precondition(
            "--ses: each number of SEs must be between 1 and 64".into(),
        ));
    }
    if loads
        .iter()
        .any(|&f| !(f.is_finite() && f > 0.0 && f <= 100.0))
    {
        return Err(LabError::Precondition(
            "--loads: each load factor must be in (0, 100]".into(),
        ));
    }
    let quota = args.cpu_quota;
    // Under a quota the RE's scarcity is real: no emulated work.
    let (cost_us, reject_cost_us) = match quota {
        Some(_) => (0, 0),
        None => (args.sweep.cost_us, args.sweep.reject_cost_us),
    };
    if quota.is_none() && cost_us == 0 && args.capacity.is_none() {
        return Err(LabError::Precondition(
            "--cost-us 0 leaves the RE unlimited: use --cpu-quota PCT or --capacity CPS".into(),
        ));
    }
    let runs = args.out.join("runs");
    std::fs::create_dir_all(&runs)
        .map_err(|e| LabError::io(format!("create {}", runs.display()), e))?;
    let group = match quota {
        Some(pct) => Some(CpuGroup::create(
            &format!("holdline-feedback-{}", std::process::id()),
            args.quota_period_us,
            args.quota_period_us * pct / 100,
        )?),
        None => None,
    };
    let procs = group.as_ref().map(CpuGroup::procs_file);
    // Capacity steps, factors of the nominal capacity. Under a quota the nominal figure comes
    // from an unloaded RE, whose CPU per call is higher than a saturated one's (no
    // batching), so the steps ramp up geometrically until the RE saturates.
    let steps: Vec<f64> = match (args.capacity.is_some(), quota.is_some(), quick) {
        (true, ..) => Vec::new(),
        (false, false, true) => vec![0.8, 0.9, 1.0],
        (false, false, false) => vec![0.7, 0.8, 0.9, 1.0, 1.1],
        (false, true, _) => (0..QUOTA_RAMP_STEPS)
            .map(|k| 0.8 * QUOTA_RAMP_FACTOR.powi(k))
            .collect(),
    };
    let calibrate = quota.is_some() && args.capacity.is_none();
    let total = usize::from(calibrate)
        + steps.len()
        + ses.len() * loads.len() * mechanisms.len() * args.repeat as usize;
    let mut done = 0;

    // Nominal capacity: from the emulated cost, or under a quota from the CPU a call costs
    // the RE (measured without quota and without control).
    let mut calibration = None;
    let nominal = if calibrate {
        let spec = Spec {
            mechanism: "none",
            ses: 1,
            cost_us,
            reject_cost_us,
            rate: CALIBRATION_CPS,
            duration_s: 5.0,
            drain_s: 3.0,
            tag: "calibration".into(),
            group: None,
            step: None,
        };
        let p = run_point(&exe, &runs, &spec, 0.0)?;
        done += 1;
        progress(done, total, &p, started);
        let per_call = p.re_cpu_s * 1e6 / p.calls_ok.max(1) as f64;
        calibration = Some(per_call);
        quota.unwrap_or(100) as f64 / 100.0 * 1e6 / per_call.max(1.0)
    } else if cost_us > 0 {
        1e6 / (MESSAGES_PER_CALL * cost_us as f64)
    } else {
        args.capacity.unwrap_or(0.0)
    };
    eprintln!(
        "feedback: RE {cost_us} µs per message (rejections {reject_cost_us} µs){}, nominal capacity {nominal:.0} calls/s; {total} points of {duration:.0} s; SEs {ses:?}; loads {loads:?}; mechanisms {mechanisms:?}",
        match (quota, calibration) {
            (Some(pct), Some(c)) => format!(
                ", CPU quota {pct}% of a core (period {} µs), {c:.1} µs CPU per call",
                args.quota_period_us
            ),
            (Some(pct), None) => format!(", CPU quota {pct}% of a core"),
            _ => String::new(),
        },
    );

    // Phase 1: the RE's capacity (no control, one SE).
    let mut capacity_steps = Vec::new();
    let mut clean_capacity = args.capacity.unwrap_or(0.0);
    for &f in &steps {
        let rate = (nominal * f).round();
        let spec = Spec {
            mechanism: "none",
            ses: 1,
            cost_us,
            reject_cost_us,
            rate,
            duration_s: duration,
            drain_s: drain,
            tag: format!("capacity-{rate}"),
            group: procs.as_deref(),
            step: None,
        };
        let mut p = run_point(&exe, &runs, &spec, 0.0)?;
        p.load_factor = f;
        done += 1;
        progress(done, total, &p, started);
        let clean = p.calls_attempted > 0
            && p.calls_ok == p.calls_attempted
            && p.pdd_p99_ms <= 200.0
            && p.retrans_invite == 0;
        if clean {
            clean_capacity = clean_capacity.max(rate);
        }
        // Under a quota the ramp goes on until the RE is saturated: calls fail or wait.
        let saturated =
            (p.calls_ok as f64) < 0.98 * p.calls_attempted as f64 || p.pdd_p99_ms > 1000.0;
        if quota.is_some() && saturated {
            let share = quota.unwrap_or(100) as f64 / 100.0;
            if p.re_busy < 0.8 * share {
                eprintln!(
                    "feedback: the RE was only {:.0}% busy (quota {:.0}%) where calls began to fail: core 0 (SE, UAC, UAS) may be the bottleneck",
                    p.re_busy * 100.0,
                    share * 100.0
                );
            }
            capacity_steps.push(p);
            break;
        }
        capacity_steps.push(p);
    }
    if clean_capacity <= 0.0 {
        clean_capacity = nominal * steps.first().copied().unwrap_or(1.0);
        eprintln!(
            "feedback: no capacity step was clean; using {clean_capacity:.0} calls/s (the lowest step)"
        );
    }
    let saturation = capacity_steps
        .iter()
        .map(|p| p.goodput_steady_cps)
        .fold(0.0f64, f64::max);
    // Load factors are multiples of the clean capacity; under a quota, of the saturation
    // throughput (throttling makes the clean-capacity rule noisy).
    let capacity = if quota.is_some() && args.capacity.is_none() && saturation > 0.0 {
        saturation
    } else {
        clean_capacity
    };
    eprintln!(
        "feedback: capacity {clean_capacity:.0} calls/s, saturation throughput {saturation:.0} calls/s; load factors of {capacity:.0} calls/s"
    );

    // Phase 2: the curves.
    let mut points = Vec::new();
    for &n in &ses {
        for &f in &loads {
            for run in 0..args.repeat {
                for m in &mechanisms {
                    let spec = Spec {
                        mechanism: m,
                        ses: n,
                        cost_us,
                        reject_cost_us,
                        rate: (capacity * f).round(),
                        duration_s: duration,
                        drain_s: drain,
                        tag: tag(m, n, f, run),
                        group: procs.as_deref(),
                        step: args.step_from.map(|from| Step {
                            from_cps: (capacity * from).round(),
                            at_s: step_at,
                        }),
                    };
                    let mut p = run_point(&exe, &runs, &spec, capacity)?;
                    p.run = run;
                    done += 1;
                    progress(done, total, &p, started);
                    // What the UACs were to offer over the whole load (a step's lower part
                    // included).
                    let expected = spec.step.map_or(spec.rate, |s| {
                        (s.from_cps * s.at_s + spec.rate * (duration - s.at_s)) / duration
                    });
                    if p.offered_cps < 0.9 * expected {
                        eprintln!(
                            "feedback: the UACs offered only {:.0} of {:.0} calls/s: core 0 (SEs, UACs, UAS) is saturated, so this point measures less than its load factor",
                            p.offered_cps, expected
                        );
                    }
                    points.push(p);
                    // What is measured so far survives an interrupted run.
                    crate::runner::write_partial(&args.out, "feedback", capacity, &points)?;
                }
            }
        }
    }

    let results = Results {
        experiment: "feedback".into(),
        command: crate::runner::command_line(),
        started_unix_s: crate::runner::started_unix_s(started),
        quick,
        machine: machine(),
        emulate_cost_us: cost_us,
        emulate_reject_cost_us: reject_cost_us,
        cpu_quota_percent: quota,
        quota_period_us: quota.map(|_| args.quota_period_us),
        calibration_cpu_us_per_call: calibration,
        nominal_capacity_cps: nominal,
        clean_capacity_cps: clean_capacity,
        saturation_cps: saturation,
        capacity_cps: capacity,
        repeat: args.repeat,
        capacity_steps,
        points,
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    drop(group);
    write(&args.out, &results)?;
    let _ = std::fs::remove_file(args.out.join("results.partial.json"));
    Ok(results)
}

/// Rewrites the CSV files and the plots from `DIR/results.json`.
fn replot(out: &Path) -> Result<Results> {
    let mut r: Results = crate::runner::read_results(out)?;
    // Settling by today's rule (the series ends with the load).
    for p in &mut r.points {
        if let (Some(at), Some(end)) = (p.step_at_s, p.series.last().map(|s| s.t_s)) {
            p.settle_s = settle_seconds(&p.series, at, end);
        }
    }
    write(out, &r)?;
    Ok(r)
}

/// The series label of a mechanism and number of SEs.
fn label(mechanism: &str, ses: u32) -> String {
    let name = match mechanism {
        "none" => "no control",
        "occ" => "local OCC",
        "loss" => "RFC 7339 loss",
        "rate" => "RFC 7415 rate",
        "window" => "explicit window",
        other => other,
    };
    format!("{name}, {ses} SE{}", if ses == 1 { "" } else { "s" })
}

/// One point per mechanism, number of SEs and load factor: the median of its runs, field by
/// field, with the number of runs and their lowest and highest steady goodput.
fn medians(points: &[Point]) -> Vec<(Point, usize, f64, f64)> {
    let same = |p: &Point, q: &Point| {
        p.mechanism == q.mechanism && p.ses == q.ses && (p.load_factor - q.load_factor).abs() < 1e-9
    };
    let mut firsts: Vec<&Point> = Vec::new();
    for p in points {
        if !firsts.iter().any(|q| same(p, q)) {
            firsts.push(p);
        }
    }
    firsts
        .into_iter()
        .map(|first| {
            let runs: Vec<&Point> = points.iter().filter(|p| same(p, first)).collect();
            let med = |g: fn(&Point) -> f64| median(runs.iter().map(|p| g(p)).collect());
            let medu = |g: fn(&Point) -> u64| med_u64(runs.iter().map(|p| g(p)).collect());
            let steady: Vec<f64> = runs.iter().map(|p| p.goodput_steady_cps).collect();
            let lo = steady.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = steady.iter().copied().fold(0.0f64, f64::max);
            let p = Point {
                offered_cps: med(|p| p.offered_cps),
                throughput_cps: med(|p| p.throughput_cps),
                goodput_cps: med(|p| p.goodput_cps),
                goodput_steady_cps: med(|p| p.goodput_steady_cps),
                goodput_of_capacity: med(|p| p.goodput_of_capacity),
                pdd_p50_ms: med(|p| p.pdd_p50_ms),
                pdd_p99_ms: med(|p| p.pdd_p99_ms),
                pdd_p99_steady_ms: first
                    .pdd_p99_steady_ms
                    .map(|_| median(runs.iter().filter_map(|p| p.pdd_p99_steady_ms).collect())),
                retrans_invite: medu(|p| p.retrans_invite),
                retrans_200: medu(|p| p.retrans_200),
                fairness: first
                    .fairness
                    .map(|_| median(runs.iter().filter_map(|p| p.fairness).collect())),
                calls_attempted: medu(|p| p.calls_attempted),
                calls_ok: medu(|p| p.calls_ok),
                r503: medu(|p| p.r503),
                r_other: medu(|p| p.r_other),
                timeouts: medu(|p| p.timeouts),
                se_throttled: medu(|p| p.se_throttled),
                se_local_rejected: medu(|p| p.se_local_rejected),
                re_rejected: medu(|p| p.re_rejected),
                re_rejected_all: medu(|p| p.re_rejected_all),
                re_answers: medu(|p| p.re_answers),
                re_gate_exempt: medu(|p| p.re_gate_exempt),
                se_reports: medu(|p| p.se_reports),
                re_cpu_s: med(|p| p.re_cpu_s),
                re_busy: med(|p| p.re_busy),
                ..first.clone()
            };
            (p, runs.len(), lo, hi)
        })
        .collect()
}

fn med_u64(v: Vec<u64>) -> u64 {
    median(v.into_iter().map(|x| x as f64).collect()).round() as u64
}

fn opt(x: Option<f64>, prec: usize) -> String {
    x.map_or_else(String::new, |v| format!("{v:.prec$}"))
}

/// With `--step-from`: `step.csv` (every point's run second by second) and
/// `step-goodput.svg/png` (the RE's goodput per second, one line per point; the first run
/// of each when repeated).
fn write_steps(out: &Path, r: &Results) -> Result<()> {
    let stepped: Vec<&Point> = r.points.iter().filter(|p| !p.series.is_empty()).collect();
    if stepped.is_empty() {
        return Ok(());
    }
    let mut csv = String::from(
        "mechanism,ses,load_factor,run,step_at_s,settle_s,t_s,offered,re_goodput,r503\n",
    );
    for p in &stepped {
        for s in &p.series {
            csv.push_str(&format!(
                "{},{},{:.3},{},{},{},{:.0},{:.0},{:.0},{:.0}\n",
                p.mechanism,
                p.ses.unwrap_or(1),
                p.load_factor,
                p.run,
                opt(p.step_at_s, 1),
                opt(p.settle_s, 0),
                s.t_s,
                s.offered,
                s.re_goodput,
                s.r503,
            ));
        }
    }
    std::fs::write(out.join("step.csv"), csv).map_err(|e| LabError::io("write step.csv", e))?;
    let mut series: Vec<plot::Series> = stepped
        .iter()
        .filter(|p| p.run == 0)
        .map(|p| {
            (
                format!(
                    "{}, {:.0}x",
                    label(&p.mechanism, p.ses.unwrap_or(1)),
                    p.load_factor
                ),
                p.series.iter().map(|s| (s.t_s, s.re_goodput)).collect(),
            )
        })
        .collect();
    let end = stepped
        .iter()
        .flat_map(|p| p.series.iter().map(|s| s.t_s))
        .fold(0.0, f64::max);
    series.push((
        "capacity".to_string(),
        vec![(0.0, r.capacity_cps), (end, r.capacity_cps)],
    ));
    let at = stepped.iter().find_map(|p| p.step_at_s).unwrap_or(0.0);
    plot::chart(
        out,
        "step-goodput",
        &format!(
            "UDP, SEs -> RE (capacity {:.0} calls/s): RE goodput per second, load step at {at:.0} s",
            r.capacity_cps
        ),
        "seconds into the load",
        "calls/s completed at the UAS",
        &series,
    )
}

fn write(out: &Path, r: &Results) -> Result<()> {
    let json = serde_json::to_string_pretty(r).map_err(|e| LabError::Report {
        path: out.join("results.json"),
        reason: e.to_string(),
    })?;
    std::fs::write(out.join("results.json"), json)
        .map_err(|e| LabError::io("write results.json", e))?;
    let mut csv = String::from(
        "experiment,mechanism,ses,load_factor,run,offered_cps,capacity_cps,throughput_cps,goodput_cps,goodput_steady_cps,goodput_of_capacity,pdd_p50_ms,pdd_p99_ms,pdd_p99_steady_ms,retrans_invite,retrans_200,fairness,calls_attempted,calls_ok,r503,r_other,timeouts,se_throttled,se_local_rejected,re_rejected,re_rejected_all,re_answers,re_gate_exempt,se_reports,re_loss_percent,re_acceptance,re_cpu_s,re_busy,per_se_goodput_cps\n",
    );
    for p in &r.points {
        csv.push_str(&format!(
            "{},{},{},{:.3},{},{:.1},{:.1},{:.1},{:.1},{:.1},{:.3},{:.1},{:.1},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{}\n",
            p.experiment,
            p.mechanism,
            p.ses.unwrap_or(1),
            p.load_factor,
            p.run,
            p.offered_cps,
            p.capacity_cps,
            p.throughput_cps,
            p.goodput_cps,
            p.goodput_steady_cps,
            p.goodput_of_capacity,
            p.pdd_p50_ms,
            p.pdd_p99_ms,
            opt(p.pdd_p99_steady_ms, 1),
            p.retrans_invite,
            p.retrans_200,
            opt(p.fairness, 4),
            p.calls_attempted,
            p.calls_ok,
            p.r503,
            p.r_other,
            p.timeouts,
            p.se_throttled,
            p.se_local_rejected,
            p.re_rejected,
            p.re_rejected_all,
            p.re_answers,
            p.re_gate_exempt,
            p.se_reports,
            opt(p.re_loss_percent, 1),
            p.re_acceptance,
            p.re_cpu_s,
            p.re_busy,
            p.per_se_goodput_cps
                .iter()
                .map(|x| format!("{x:.1}"))
                .collect::<Vec<_>>()
                .join(";"),
        ));
    }
    std::fs::write(out.join("points.csv"), csv).map_err(|e| LabError::io("write points.csv", e))?;
    write_steps(out, r)?;

    let summary = medians(&r.points);
    if r.points.iter().any(|p| p.run > 0) {
        let mut text = String::from(
            "mechanism,ses,load_factor,runs,offered_cps,goodput_steady_cps,goodput_steady_min,goodput_steady_max,goodput_of_capacity,throughput_cps,pdd_p50_ms,pdd_p99_ms,pdd_p99_steady_ms,retrans_invite,se_throttled,re_rejected,re_answers,re_cpu_s,fairness\n",
        );
        for (p, n, lo, hi) in &summary {
            text.push_str(&format!(
                "{},{},{:.3},{n},{:.1},{:.1},{lo:.1},{hi:.1},{:.3},{:.1},{:.1},{:.1},{},{},{},{},{},{:.3},{}\n",
                p.mechanism,
                p.ses.unwrap_or(1),
                p.load_factor,
                p.offered_cps,
                p.goodput_steady_cps,
                p.goodput_of_capacity,
                p.throughput_cps,
                p.pdd_p50_ms,
                p.pdd_p99_ms,
                opt(p.pdd_p99_steady_ms, 1),
                p.retrans_invite,
                p.se_throttled,
                p.re_rejected,
                p.re_answers,
                p.re_cpu_s,
                opt(p.fairness, 4),
            ));
        }
        std::fs::write(out.join("summary.csv"), text)
            .map_err(|e| LabError::io("write summary.csv", e))?;
    }

    // Plots of the medians (the points themselves with one run each).
    let med: Vec<Point> = summary.into_iter().map(|(p, ..)| p).collect();
    let mut ses: Vec<u32> = med.iter().filter_map(|p| p.ses).collect();
    ses.sort_unstable();
    ses.dedup();
    let mut mechanisms: Vec<&str> = Vec::new();
    for p in &med {
        if !mechanisms.contains(&p.mechanism.as_str()) {
            mechanisms.push(&p.mechanism);
        }
    }
    let series_of = |f: fn(&Point) -> f64| {
        let mut out = Vec::new();
        for &n in &ses {
            for m in &mechanisms {
                let mut pts: Vec<(f64, f64)> = med
                    .iter()
                    .filter(|p| p.mechanism == *m && p.ses == Some(n))
                    .map(|p| (p.offered_cps, f(p)))
                    .collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                if !pts.is_empty() {
                    out.push((label(m, n), pts));
                }
            }
        }
        out
    };
    let where_ = r
        .cpu_quota_percent
        .map_or_else(|| "emulated".to_string(), |q| format!("CPU quota {q}%"));
    let mut goodput = series_of(|p| p.goodput_steady_cps);
    let mut xs: Vec<f64> = med.iter().map(|p| p.offered_cps).collect();
    xs.sort_by(f64::total_cmp);
    goodput.push((
        "capacity".to_string(),
        xs.iter().map(|x| (*x, r.capacity_cps)).collect(),
    ));
    plot::chart(
        out,
        "goodput",
        &format!(
            "UDP, SEs -> RE ({where_}, capacity {:.0} calls/s): steady goodput (200 OK within 10 s) vs offered",
            r.capacity_cps
        ),
        "offered calls/s",
        "calls/s",
        &goodput,
    )?;
    plot::chart(
        out,
        "pdd",
        &format!("UDP, SEs -> RE ({where_}): PDD p99 (INVITE to 200 OK) vs offered"),
        "offered calls/s",
        "PDD p99, ms",
        &series_of(|p| p.pdd_p99_ms),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mechanisms_name_their_servers_and_later_ones_are_refused_clearly() {
        assert_eq!(Mechanism::parse("none").expect("none").re_overload, "none");
        let ql = Mechanism::parse("queue-limit").expect("queue-limit");
        assert_eq!(ql.re_overload, "queue-limit");
        assert_eq!(ql.se_args, ["--feedback=none"]);
        let occ = Mechanism::parse("occ").expect("occ");
        assert_eq!(
            (occ.re_overload, occ.se_args),
            ("occ", &["--feedback=none"][..])
        );
        let loss = Mechanism::parse("loss").expect("loss");
        assert_eq!(loss.se_args, &["--feedback=loss"][..]);
        let w = Mechanism::parse("delay-window").expect("delay-window");
        assert_eq!(
            (w.re_overload, w.se_args),
            ("none", &["--feedback=window"][..])
        );
        let rate = Mechanism::parse("rate+udp_invite_recv_buffer=16384").expect("rate");
        assert_eq!(rate.se_args, &["--feedback=rate"][..]);
        let text = rate.re_config.expect("config");
        let c = holdline_server::ServerConfig::from_toml("re.toml", &text).expect("valid");
        assert_eq!(c.overload.udp_invite_recv_buffer, 16_384);
        assert!(Mechanism::parse("loss+nonsense").is_err());
        let w = Mechanism::parse("window").expect("window");
        assert_eq!(
            (w.re_overload, w.se_args),
            ("occ", &["--feedback=explicit-window"][..])
        );
        let e = Mechanism::parse("bogus").expect_err("unknown").to_string();
        assert!(e.contains("unknown mechanism") && e.contains("loss"), "{e}");
    }

    #[test]
    fn the_re_of_loss_answers_feedback() {
        let text = Mechanism::parse("loss")
            .expect("loss")
            .re_config
            .expect("config");
        let c = holdline_server::ServerConfig::from_toml("re.toml", &text).expect("valid");
        assert!(c.overload.answers_feedback());
        assert_eq!(c.overload.local, "occ");
    }

    #[test]
    fn labelled_metrics_are_summed_over_workers() {
        let text = "holdline_feedback_rejected_total{worker=\"0\",reason=\"loss_throttle\"} 7\n\
                    holdline_feedback_rejected_total{worker=\"1\",reason=\"loss_throttle\"} 3\n\
                    holdline_feedback_rejected_total{worker=\"0\",reason=\"rate_throttle\"} 5\n\
                    holdline_feedback_rejected_total_x{worker=\"0\",reason=\"loss_throttle\"} 9\n";
        let name = "holdline_feedback_rejected_total";
        assert_eq!(
            metric_where(text, name, &["reason=\"loss_throttle\""]),
            10.0
        );
        assert_eq!(metric_where(text, name, &[]), 15.0);
        assert_eq!(metric_where("", name, &[]), 0.0);
    }

    #[test]
    fn settling_is_the_last_second_outside_ten_percent_of_the_end() {
        let series = |goodput: &[f64]| -> Vec<Second> {
            goodput
                .iter()
                .enumerate()
                .map(|(i, &g)| Second {
                    t_s: i as f64 + 1.0,
                    offered: 0.0,
                    re_goodput: g,
                    r503: 0.0,
                })
                .collect()
        };
        // Step at 5 s of 15: seconds 6..14 count (not the last); the five before the last
        // average 148.
        let s = series(&[
            75.0, 75.0, 75.0, 75.0, 75.0, 200.0, 120.0, 160.0, 150.0, 140.0, 150.0, 155.0, 145.0,
            150.0, 400.0,
        ]);
        // Second 7 (ends at 7 s) is the last outside ±14.8: settled 2 s after the step.
        assert_eq!(settle_seconds(&s, 5.0, 15.0), Some(2.0));
        // Within from the first second after the step: 0.
        let s = series(&[75.0, 75.0, 150.0, 152.0, 148.0, 150.0, 150.0, 150.0]);
        assert_eq!(settle_seconds(&s, 2.0, 8.0), Some(0.0));
        // A late second off (the one ending at 6 s): settled 5 s after the step.
        let s = series(&[75.0, 150.0, 150.0, 150.0, 150.0, 100.0, 150.0, 150.0]);
        assert_eq!(settle_seconds(&s, 1.0, 8.0), Some(5.0));
        // Nothing completed: no steady state to settle to.
        assert_eq!(settle_seconds(&series(&[0.0; 8]), 2.0, 8.0), None);
    }

    #[test]
    fn medians_group_by_mechanism_ses_and_load() {
        let p = |m: &str, ses: u32, g: f64, run: u32| Point {
            experiment: "feedback".into(),
            mechanism: m.into(),
            ses: Some(ses),
            load_factor: 5.0,
            offered_cps: 750.0,
            capacity_cps: 150.0,
            throughput_cps: g,
            goodput_cps: g,
            goodput_steady_cps: g,
            goodput_of_capacity: g / 150.0,
            pdd_p50_ms: 1.0,
            pdd_p99_ms: 2.0,
            pdd_p99_steady_ms: None,
            retrans_invite: 0,
            retrans_200: 0,
            fairness: (ses > 1).then_some(1.0),
            per_se_goodput_cps: vec![g],
            calls_attempted: 10,
            calls_ok: 10,
            r503: 0,
            r_other: 0,
            timeouts: 0,
            se_throttled: run.into(),
            se_local_rejected: 0,
            re_rejected: 0,
            re_rejected_all: 0,
            re_answers: 0,
            re_gate_exempt: 0,
            se_reports: 0,
            re_loss_percent: None,
            re_acceptance: 1.0,
            re_cpu_s: 1.0,
            re_busy: 0.5,
            run,
            re_service_us_measured: None,
            tag: None,
            step_at_s: None,
            settle_s: None,
            series: Vec::new(),
            pdd_mean_ms: None,
        };
        let pts = [
            p("loss", 1, 100.0, 0),
            p("loss", 3, 10.0, 0),
            p("loss", 1, 140.0, 1),
            p("loss", 1, 120.0, 2),
        ];
        let m = medians(&pts);
        assert_eq!(m.len(), 2);
        let (one, n, lo, hi) = &m[0];
        assert_eq!(
            (one.goodput_steady_cps, *n, *lo, *hi),
            (120.0, 3, 100.0, 140.0)
        );
        assert_eq!(one.se_throttled, 1);
        assert_eq!(m[1].0.fairness, Some(1.0));
        assert_eq!(label("loss", 3), "RFC 7339 loss, 3 SEs");
        assert_eq!(label("occ", 1), "local OCC, 1 SE");
    }
}
