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
//! | `poll` | as `ecs` | as for `ecs`, polling: INVITE connections served a quantum at a time, the others held closed (`defer_fairness = "poll"`, seed 000's poll-based model, l. 383) |
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
//!
//! **Across a WAN link** (`--wan-delay-ms 20,60`, root; issue 19 item 4): each point runs once
//! per one-way delay with the SEs and their UACs in one network namespace and the RE and the
//! UAS in another, joined by a `holdline-netem` link this process emulates (the delay each
//! way, no loss; the `wan` module); `--with-loopback` adds the loopback points for comparison,
//! `--wan-congestion-control cubic,bbr` runs each WAN point per TCP congestion control.
//! Every point records its delay (`wan_delay_ms`, `None` on loopback), the 503s by source
//! (the SEs' smart forwarding, feedback and local control; the RE's deferral and local
//! control, from the servers' counters), what crossed the link and the SEs' connections to
//! the RE as `ss` saw them once a second (RTT, congestion window, bytes not sent yet); the
//! plots get one series per mechanism × link, and `pdd-median`, `rejected-sf` and
//! `rejected`. The capacity phase stays on loopback: the RE's capacity is its CPU's.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
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
    Proc, SweepArgs, UacLoad, cdf_points, check_tools, holdline_exe, lab_main, machine, median,
    metric, metric_where, require, scrape, start_uacs_at, start_uas_at, uacs_steady_goodput,
    window_sum,
};
use crate::server::{SERVER_CORE, Transport, free_port, tail};
use crate::wan::{Site, SsLog, SsSample, Wan, WanStats, ss_to};

/// Messages through the RE per call: INVITE, 180, 200, ACK, BYE, 200.
const MESSAGES_PER_CALL: f64 = 6.0;
/// A call counts as goodput when its 200 OK came within this (seed 003's window).
const GOODPUT_WINDOW_S: f64 = 10.0;
/// How often the RE's active sessions are sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// On a WAN link, `ss` looks at the SEs' connections every this many samples (1 s).
const SS_EVERY: u64 = 4;

/// The most SEs a point may have (one `holdline serve` and one UAC process each; 100 is the
/// largest of the poll-based comparison).
const MAX_SES: u32 = 128;

/// The mechanisms, in plotting order (all but `poll` by default).
const MECHANISMS: [&str; 5] = ["none", "default", "ics", "ecs", "poll"];

/// Whether `mechanism` is one of seed 000's (smart forwarding at the SEs, buffer
/// minimization and deferral at the RE).
fn seed_mechanism(mechanism: &str) -> bool {
    matches!(mechanism, "ics" | "ecs" | "poll")
}

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
    /// Run every point across an emulated WAN link between the SEs and the RE instead of
    /// loopback, once per one-way delay in this list (ms, comma-separated): the SEs and their
    /// UACs in one network namespace, the RE and the UAS in another, joined by
    /// holdline-netem with the delay in each direction and no loss. Needs root. The
    /// capacity phase stays on loopback (the RE's capacity is its CPU's).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub wan_delay_ms: Vec<f64>,
    /// With `--wan-delay-ms`: run every point on loopback too, for comparison.
    #[arg(long, requires = "wan_delay_ms")]
    pub with_loopback: bool,
    /// With `--wan-delay-ms`: TCP congestion control in the link's namespaces
    /// (`net.ipv4.tcp_congestion_control`, e.g. `cubic`, `bbr`), comma-separated: each WAN
    /// point runs once per name. Default: the host's.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        requires = "wan_delay_ms"
    )]
    pub wan_congestion_control: Vec<String>,
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
    /// Connections the RE opened when polling (`poll`; 0 otherwise).
    #[serde(default)]
    pub re_polls: u64,
    /// How busy the generator's core was over the run (1.0 = all the time): the SEs, UACs
    /// and UAS share it, so a point near 1.0 is limited by its upstreams, not by the RE.
    #[serde(default)]
    pub gen_busy: Option<f64>,
    /// RE CPU over the run, seconds.
    pub re_cpu_s: f64,
    /// RE core busy over the run (1.0 = one core).
    pub re_busy: f64,
    /// One-way delay of the emulated WAN link between the SEs and the RE, ms (`None`:
    /// loopback).
    #[serde(default)]
    pub wan_delay_ms: Option<f64>,
    /// TCP congestion control of the SEs' connections to the RE on the WAN link (`None` on
    /// loopback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wan_congestion_control: Option<String>,
    /// The point's name, the prefix of its files in `runs/`.
    #[serde(default)]
    pub tag: String,
    /// 503s of the SEs' smart forwarding (`holdline_forward_rejected_total`, reason
    /// `target_backlog`), all SEs.
    #[serde(default)]
    pub se_rejected_sf: u64,
    /// 503s of the SEs' hop-by-hop feedback (RFC 7339/7415 throttling on the RE's answers,
    /// `holdline_feedback_rejected_total`), all SEs.
    #[serde(default)]
    pub se_rejected_feedback: u64,
    /// 503s of the SEs' own local control (`holdline_overload_rejected_total`), all SEs.
    #[serde(default)]
    pub se_rejected_local: u64,
    /// The RE's 503s for deferred INVITEs that found no idle time within
    /// `defer_max_wait_ms` (`holdline_overload_deferred_released_total{outcome="rejected"}`).
    #[serde(default)]
    pub re_rejected_deferred: u64,
    /// The RE's 503s of its local control (`holdline_overload_rejected_total`).
    #[serde(default)]
    pub re_rejected_local: u64,
    /// Every non-zero rejection counter, `se.forward.target_backlog`, `re.overload.occupancy`,
    /// `re.deferred`, … (SEs summed).
    #[serde(default)]
    pub rejections: BTreeMap<String, u64>,
    /// Every non-zero `holdline_drops_total` reason, `se.flood`, `re.conn_queue_full`, …
    /// (SEs summed): messages a server dropped instead of handling.
    #[serde(default)]
    pub drops: BTreeMap<String, u64>,
    /// On a WAN sweep: when the SEs' smart forwarding first rejected, seconds since the load
    /// started (the first 250 ms sample that counted a 503 `target_backlog`; `None`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sf_rejected_from_s: Option<f64>,
    /// And when it had rejected all it would (the first sample with the final count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sf_rejected_until_s: Option<f64>,
    /// What the emulated link carried and how the SEs' connections to the RE looked
    /// (`None` on loopback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wan: Option<WanFacts>,
}

/// The emulated link of a WAN point.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WanFacts {
    /// One-way delay configured each way, ms.
    pub delay_ms: f64,
    /// IP packets from the SEs' side to the RE's (offered to the link).
    pub packets_a_to_b: u64,
    /// IP packets from the RE's side back.
    pub packets_b_to_a: u64,
    /// Packets the emulator dropped for any reason (none is configured: should be 0).
    pub dropped: u64,
    /// Mean lateness of a delivery after its due instant, µs (the emulator's own delay).
    pub late_mean_us: f64,
    /// Most late delivery, µs.
    pub late_max_us: f64,
    /// `ss -ti` of the SEs' connections to the RE, sampled every second during the load:
    /// the smoothed RTT (median over samples), ms.
    pub ss_rtt_ms: f64,
    /// The smallest congestion window seen, segments.
    pub ss_cwnd_min: u64,
    /// The largest `notsent` seen (what smart forwarding reads as the kernel's backlog).
    pub ss_notsent_max: u64,
    /// Samples taken (connections × seconds).
    pub ss_samples: usize,
    /// TCP congestion control of the SEs' connections (`net.ipv4.tcp_congestion_control`
    /// in their namespace).
    #[serde(default)]
    pub congestion_control: String,
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
    /// The one-way delays of the emulated WAN link (`--wan-delay-ms`), ms; empty: loopback.
    #[serde(default)]
    pub wan_delays_ms: Vec<f64>,
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

/// On a WAN link (a server listening on a link address, not loopback), the `trusted` line
/// that makes the link's two addresses what loopback is by default: trusted sources, which
/// the per-source flood protection exempts. Without it an SE ignored its UAC for 10 s at a
/// time as soon as it sent more than 1,000 requests in 2 s (≈ 170 calls/s), and the RE would
/// have done the same to the SEs. Empty on loopback (holdline's default trusts 127.0.0.0/8 and ::1).
fn trusted(ip: Ipv4Addr) -> String {
    if ip.is_loopback() {
        String::new()
    } else {
        format!(
            "trusted = [\"127.0.0.0/8\", \"::1\", \"{}\", \"{}\"]\n",
            holdline_netem::ADDR_A,
            holdline_netem::ADDR_B
        )
    }
}

/// The TCP buffers of a point (seed 000's three tuning parameters, Section VII): the RE's
/// receive buffer (`SO_RCVBUF` on its listener) and application buffer (`read_buffer`), and
/// the SEs' send buffer (`SO_SNDBUF` of their connections to the RE). `None`: the system's
/// default (autotuned by Linux).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Buffers {
    /// The RE's `SO_RCVBUF`, bytes as requested (Linux doubles it).
    pub re_recv: Option<usize>,
    /// The RE's application read-ahead, bytes.
    pub re_app: usize,
    /// The SEs' `SO_SNDBUF` towards the RE, bytes as requested (Linux doubles it).
    pub se_send: Option<usize>,
}

impl Buffers {
    /// What `ics`/`ecs` use: seed 000's buffer minimization at the RE (a receive buffer of a
    /// couple of INVITEs, one message read ahead), the SEs' send buffer left to the system
    /// (the paper's final recommendation, l. 356).
    pub const MINIMIZED: Self = Self {
        re_recv: Some(1024),
        re_app: 2048,
        se_send: None,
    };
}

/// How the RE shares its idle time among the SEs' connections when it defers new INVITEs
/// (`[overload] defer_fairness`): `equal` (seed 000's service-provider-centric fairness) or
/// `offered` (end-user-centric: in proportion to the load each SE is offered, which the SEs
/// advertise).
fn fairness_toml(fairness: Option<&str>) -> String {
    fairness.map_or_else(String::new, |f| format!("defer_fairness = \"{f}\"\n"))
}

/// The RE's configuration for the smart-forwarding mechanisms, listening on `ip:port`, with
/// `buffers` and the deferral's fairness.
fn re_config_sf(ip: Ipv4Addr, port: u16, buffers: &Buffers, fairness: Option<&str>) -> String {
    format!(
        "# seed 000's RE: buffer minimization on the listener the SEs connect to, admitted\n\
         # calls first (new INVITEs deferred), no local admission control\n\
         listen = [\"tcp:{ip}:{port}\"]\n\
         record_route = true\n\
         {trusted}\
         [limits]\n\
         max_message_size = 2048\n\
         [overload]\n\
         local = \"none\"\n\
         defer_new_invites = true\n\
         {fair}\
         [[tcp_buffers]]\n\
         listener = \"tcp:{ip}:{port}\"\n\
         {recv}\
         read_buffer = {app}\n\
         max_segment = 536\n",
        trusted = trusted(ip),
        fair = fairness_toml(fairness),
        recv = buffers
            .re_recv
            .map_or_else(String::new, |b| format!("recv_buffer = {b}\n")),
        app = buffers.re_app,
    )
}

/// The RE's configuration out of the box: only where it listens and that it record-routes.
fn re_config_default(ip: Ipv4Addr, port: u16) -> String {
    format!(
        "# holdline's defaults\n\
         listen = [\"tcp:{ip}:{port}\"]\n\
         record_route = true\n\
         {trusted}",
        trusted = trusted(ip),
    )
}

/// The RE's configuration without control: system buffers, nothing deferred.
fn re_config_none(ip: Ipv4Addr, port: u16) -> String {
    format!(
        "# no overload control: system buffers, messages handled in arrival order\n\
         listen = [\"tcp:{ip}:{port}\"]\n\
         record_route = true\n\
         {trusted}\
         [overload]\n\
         local = \"none\"\n\
         defer_new_invites = false\n",
        trusted = trusted(ip),
    )
}

/// An SE's configuration: with ICS/ECS the paper's smart-forwarding rule (reject as soon as
/// the backlog is not empty), which fits the RE's minimized buffers; otherwise the defaults.
/// `send_buffer` sets `SO_SNDBUF` of its connections to the RE at `re`; `advertise` makes it
/// tell the RE the load it is offered (for the RE's `defer_fairness = "offered"`).
fn se_config(
    ip: Ipv4Addr,
    port: u16,
    mechanism: &str,
    re: (Ipv4Addr, u16),
    send_buffer: Option<usize>,
    advertise: bool,
) -> String {
    let mut text = format!(
        "listen = [\"tcp:{ip}:{port}\"]\nrecord_route = true\n{}",
        trusted(ip)
    );
    if seed_mechanism(mechanism) || advertise {
        text.push_str("[overload]\n");
    }
    if seed_mechanism(mechanism) {
        text.push_str("smart_forwarding_threshold = 0\nsmart_forwarding_hold_ms = 0\n");
    }
    if advertise {
        text.push_str("advertise_offered_load = true\n");
    }
    if let Some(b) = send_buffer {
        text.push_str(&format!(
            "[[tcp_buffers]]\nnext_hop = \"{}:{}\"\nsend_buffer = {b}\n",
            re.0, re.1
        ));
    }
    text
}

/// What one point is.
pub(crate) struct Spec<'a> {
    mechanism: &'a str,
    ses: u32,
    cost_us: u64,
    reject_cost_us: u64,
    rate: f64,
    duration_s: f64,
    drain_s: f64,
    tag: String,
    /// One-way delay of the emulated WAN link between the SEs and the RE, ms (`None`:
    /// loopback).
    wan_delay_ms: Option<f64>,
    /// TCP congestion control on the WAN link (`None`: the host's).
    wan_cc: Option<String>,
    /// Sample the SEs' rejection counters during the point (WAN sweeps).
    trace_rejections: bool,
    /// The TCP buffers of `ics`/`ecs` points.
    buffers: Buffers,
    /// Relative load per SE (empty: even).
    shares: Vec<f64>,
    /// The RE's `defer_fairness` (`None`: its default); `offered` also makes the SEs
    /// advertise their offered load.
    fairness: Option<String>,
}

impl<'a> Spec<'a> {
    /// A loopback point of `mechanism` with `ses` SEs at `rate` calls/s, the sweep's costs,
    /// minimized buffers, even load, the RE's default fairness.
    pub(crate) fn new(
        mechanism: &'a str,
        ses: u32,
        rate: f64,
        sweep: &SweepArgs,
        duration_s: f64,
        drain_s: f64,
        tag: String,
    ) -> Self {
        Self {
            mechanism,
            ses,
            cost_us: sweep.cost_us,
            reject_cost_us: sweep.reject_cost_us,
            rate,
            duration_s,
            drain_s,
            tag,
            wan_delay_ms: None,
            wan_cc: None,
            trace_rejections: false,
            buffers: Buffers::MINIMIZED,
            shares: Vec::new(),
            fairness: None,
        }
    }

    /// With these buffers.
    pub(crate) fn buffers(mut self, buffers: Buffers) -> Self {
        self.buffers = buffers;
        self
    }

    /// With the load split among the SEs in these proportions.
    pub(crate) fn shares(mut self, shares: Vec<f64>) -> Self {
        self.shares = shares;
        self
    }

    /// With the RE's `defer_fairness` (`offered`: the SEs advertise their load).
    pub(crate) fn fairness(mut self, fairness: Option<String>) -> Self {
        self.fairness = fairness;
        self
    }
}

/// What the sampler thread collects: the RE's active sessions over time, and on a WAN
/// link the SEs' connections to the RE as `ss` saw them.
type Samples = (Vec<(f64, f64)>, SsLog);

/// Samples the RE's active sessions (INVITEs taken minus BYEs minus INVITEs it rejected) in
/// a thread until [`finish`](Self::finish)ed or dropped; with `ss` (namespace of the SEs,
/// address of the RE) also the SEs' connections to the RE (every sample for 2 s, then once a
/// second).
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Samples>>,
}

impl Sampler {
    fn start(re: Site, port: u16, ss: Option<(String, Ipv4Addr)>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        Self {
            thread: Some(sampler(re, port, ss, stop.clone())),
            stop,
        }
    }

    /// Stops sampling; the samples as (seconds since start, active sessions), and the `ss`
    /// samples.
    fn finish(mut self) -> Samples {
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

fn sampler(
    re: Site,
    port: u16,
    ss: Option<(String, Ipv4Addr)>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Samples> {
    std::thread::spawn(move || {
        let t0 = Instant::now();
        let mut out = Vec::new();
        let mut log = SsLog::default();
        // This thread scrapes from inside the RE's namespace (nothing to do on loopback).
        if re.enter().is_err() {
            return (out, log);
        }
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let text = scrape(port);
            if !text.is_empty() {
                out.push((t0.elapsed().as_secs_f64(), active_sessions(&text)));
            }
            // Every sample in the first 2 s (the connection's start), then once a second.
            if let Some((ns, dst)) = &ss
                && (i < 8 || i.is_multiple_of(SS_EVERY))
            {
                log.push(t0.elapsed().as_secs_f64(), &ss_to(ns, *dst));
            }
            i += 1;
            // The sampling period (bounded by the stop flag).
            std::thread::sleep(SAMPLE_EVERY);
        }
        (out, log)
    })
}

/// The SEs' 503s by source so far, summed over the SEs: (seconds since the load started,
/// smart forwarding, feedback, local control).
type RejectionSample = (f64, u64, u64, u64);

/// On a WAN sweep, samples the SEs' rejection counters every 250 ms from inside their
/// namespace, so that a point tells *when* smart forwarding rejected (at the connection's
/// start, or all along), until [`finish`](Self::finish)ed or dropped.
struct RejectionTrace {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<RejectionSample>>>,
}

impl RejectionTrace {
    fn start(site: Site, ports: Vec<u16>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut out = Vec::new();
            if site.enter().is_err() {
                return out;
            }
            while !flag.load(Ordering::Relaxed) {
                let (mut sf, mut feedback, mut local) = (0.0, 0.0, 0.0);
                for &port in &ports {
                    let text = scrape(port);
                    sf += metric_where(
                        &text,
                        "holdline_forward_rejected_total",
                        &["reason=\"target_backlog\""],
                    );
                    feedback += metric(&text, "holdline_feedback_rejected_total");
                    local += metric(&text, "holdline_overload_rejected_total");
                }
                out.push((
                    t0.elapsed().as_secs_f64(),
                    sf as u64,
                    feedback as u64,
                    local as u64,
                ));
                // The sampling period (bounded by the stop flag).
                std::thread::sleep(SAMPLE_EVERY);
            }
            out
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops sampling; the samples.
    fn finish(mut self) -> Vec<RejectionSample> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for RejectionTrace {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// When smart forwarding's 503s happened, from the trace: the first sample that counted
/// one, and the first that counted them all (seconds since the load started; `None`
/// without any).
fn sf_window(trace: &[RejectionSample]) -> (Option<f64>, Option<f64>) {
    let total = trace.last().map_or(0, |s| s.1);
    if total == 0 {
        return (None, None);
    }
    let first = trace.iter().find(|s| s.1 > 0).map(|s| s.0);
    let last = trace.iter().find(|s| s.1 == total).map(|s| s.0);
    (first, last)
}

fn write_trace(path: &Path, trace: &[RejectionSample]) -> Result<()> {
    let mut csv = String::from("t_s,se_rejected_sf,se_rejected_feedback,se_rejected_local\n");
    for (t, sf, feedback, local) in trace {
        csv.push_str(&format!("{t:.3},{sf},{feedback},{local}\n"));
    }
    std::fs::write(path, csv).map_err(|e| LabError::io(format!("write {}", path.display()), e))
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

/// `holdline serve` listening on `ip:port`, its metrics on 127.0.0.1:`metrics` (of its own
/// namespace on a WAN link).
fn server_args(ip: Ipv4Addr, port: u16, metrics: u16, config: &Path) -> Vec<String> {
    vec![
        "serve".into(),
        format!("--config={}", config.display()),
        "--workers=1".into(),
        "--store=memory".into(),
        format!("--metrics=127.0.0.1:{metrics}"),
        format!("--listen=tcp:{ip}:{port}"),
    ]
}

/// [`run_point_once`], again with fresh ports when a process could not bind its port.
pub(crate) fn run_point(exe: &Path, runs: &Path, spec: &Spec<'_>, capacity: f64) -> Result<Point> {
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

    // On a WAN link the SEs and UACs run in namespace A, the RE and the UAS in B. Declared
    // first, so dropped last: every process below is stopped before the namespaces go.
    let mut wan = spec.wan_delay_ms.map(Wan::start).transpose()?;
    if let (Some(w), Some(cc)) = (&wan, &spec.wan_cc) {
        w.set_congestion_control(cc)?;
    }
    let cc = wan.as_ref().map(Wan::congestion_control);
    let (se_site, re_site) = match &wan {
        Some(w) => (w.a.clone(), w.b.clone()),
        None => (Site::loopback(), Site::loopback()),
    };

    // UAS (core 0).
    let uas_json = runs.join(format!("{tag}-uas.json"));
    let uas_csv = runs.join(format!("{tag}-uas.csv"));
    let uas_started = Instant::now();
    let mut uas = start_uas_at(
        &re_site,
        exe,
        runs,
        tag,
        uas_port,
        Transport::Tcp,
        true,
        limit + 3.0,
        &[],
    )?;

    // RE (core 1).
    let sf = seed_mechanism(spec.mechanism);
    let re_cfg = runs.join(format!("{tag}-re.toml"));
    let text = match spec.mechanism {
        "none" => re_config_none(re_site.ip(), re_port),
        "default" => re_config_default(re_site.ip(), re_port),
        "poll" => re_config_sf(re_site.ip(), re_port, &spec.buffers, Some("poll")),
        _ => re_config_sf(
            re_site.ip(),
            re_port,
            &spec.buffers,
            spec.fairness.as_deref(),
        ),
    };
    std::fs::write(&re_cfg, text)
        .map_err(|e| LabError::io(format!("write {}", re_cfg.display()), e))?;
    let mut re_args = server_args(re_site.ip(), re_port, re_metrics, &re_cfg);
    re_args.extend([
        format!("--route=*=tcp:{}:{uas_port}", re_site.ip()),
        format!("--emulate-cost-us={}", spec.cost_us),
        format!("--emulate-reject-cost-us={}", spec.reject_cost_us),
    ]);
    let re_log = runs.join(format!("{tag}-re.log"));
    let mut re = re_site.spawn(SERVER_CORE, exe, &re_args, &re_log)?;
    re_site.wait_bound(&mut re.0, re_port, Transport::Tcp, "the RE", &re_log)?;

    // SEs (core 0).
    let mut ses: Vec<(Proc, u16, u16)> = Vec::with_capacity(m);
    for i in 0..m {
        let (port, metrics) = (free_port()?, free_port()?);
        let cfg = runs.join(format!("{tag}-se{i}.toml"));
        let advertise = spec.fairness.as_deref() == Some("offered");
        let text = se_config(
            se_site.ip(),
            port,
            spec.mechanism,
            (re_site.ip(), re_port),
            spec.buffers.se_send,
            advertise,
        );
        std::fs::write(&cfg, text)
            .map_err(|e| LabError::io(format!("write {}", cfg.display()), e))?;
        let mut args = server_args(se_site.ip(), port, metrics, &cfg);
        args.push(format!("--route=*=tcp:{}:{re_port}", re_site.ip()));
        if sf {
            // Polling needs the INVITEs on connections of their own: ECS.
            let split = if spec.mechanism == "poll" {
                "ecs"
            } else {
                spec.mechanism
            };
            args.push(format!("--smart-forwarding={split}"));
        } else if spec.mechanism == "none" {
            args.extend(["--smart-forwarding=off".into(), "--overload=none".into()]);
        }
        let log = runs.join(format!("{tag}-se{i}.log"));
        let mut p = se_site.spawn(GENERATOR_CORE, exe, &args, &log)?;
        se_site.wait_bound(&mut p.0, port, Transport::Tcp, "an SE", &log)?;
        ses.push((p, port, metrics));
    }

    // UACs (core 0), one per SE, the load split evenly.
    let ss = wan
        .as_ref()
        .and_then(|w| Some((w.a.ns()?.to_owned(), w.b.ip())));
    let sampling = Sampler::start(re_site.clone(), re_metrics, ss);
    let trace = spec.trace_rejections.then(|| {
        RejectionTrace::start(
            se_site.clone(),
            ses.iter().map(|(_, _, metrics)| *metrics).collect(),
        )
    });
    let cpu0 = procfs::tree_cpu_us(re.0.id());
    let gen0 = procfs::core_times(GENERATOR_CORE);
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
        shares: spec.shares.clone(),
    };
    let mut uacs = start_uacs_at(&se_site, exe, runs, tag, &targets, Transport::Tcp, &load)?;
    let mut overran = None;
    for (i, u) in uacs.iter_mut().enumerate() {
        let left = Duration::from_secs_f64(limit + 5.0).saturating_sub(t0.elapsed());
        if !wait_bounded(&mut u.0, left) && overran.is_none() {
            overran = Some(i);
        }
    }
    let window = t0.elapsed().as_secs_f64();
    let cpu1 = procfs::tree_cpu_us(re.0.id());
    let gen_busy = gen0
        .zip(procfs::core_times(GENERATOR_CORE))
        .map(|(a, b)| b.busy_since(a));
    let (active, ss_log) = sampling.finish();
    let trace = trace.map(RejectionTrace::finish);
    let re_text = re_site.scrape(re_metrics);
    let se_texts: Vec<String> = ses
        .iter()
        .map(|(_, _, metrics)| se_site.scrape(*metrics))
        .collect();
    let se_rejected: f64 = se_texts
        .iter()
        .map(|t| metric(t, "holdline_sip_rejected_forward_total"))
        .sum();
    let rejections = rejection_counts(&se_texts, &re_text);
    let drops = drop_counts(&se_texts, &re_text);
    // The servers' last metrics: where every 503 of the point came from, to look at later.
    for (name, text) in std::iter::once(("re".to_string(), &re_text)).chain(
        se_texts
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("se{i}"), t)),
    ) {
        let path = runs.join(format!("{tag}-{name}.metrics"));
        std::fs::write(&path, text)
            .map_err(|e| LabError::io(format!("write {}", path.display()), e))?;
    }
    // The UAS writes its report on SIGTERM.
    terminate(&uas.0);
    wait_bounded(&mut uas.0, Duration::from_secs(5));
    drop(ses);
    drop(re);
    let wan_facts = wan.as_mut().map(|w| {
        let stats = w.stop();
        let mut facts = wan_facts(w.delay_ms, &stats, &ss_log.samples);
        facts.congestion_control = cc.clone().unwrap_or_default();
        facts
    });
    if wan.is_some() {
        ss_log.write(&runs.join(format!("{tag}-ss.txt")))?;
    }
    if let Some(t) = &trace {
        write_trace(&runs.join(format!("{tag}-se-rejections.csv")), t)?;
    }
    let (sf_first_s, sf_last_s) = trace.as_deref().map_or((None, None), sf_window);
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
        goodput_steady_cps: uacs_steady_goodput(runs, tag, m, spec.duration_s),
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
        re_polls: metric(&re_text, "holdline_overload_deferred_polls_total") as u64,
        gen_busy,
        re_cpu_s: cpu_s,
        re_busy: cpu_s / window.max(1e-3),
        wan_delay_ms: spec.wan_delay_ms,
        wan_congestion_control: cc,
        tag: spec.tag.clone(),
        se_rejected_sf: rejected(&rejections, "se.forward.target_backlog"),
        se_rejected_feedback: rejected(&rejections, "se.feedback."),
        se_rejected_local: rejected(&rejections, "se.overload."),
        re_rejected_deferred: rejected(&rejections, "re.deferred"),
        re_rejected_local: rejected(&rejections, "re.overload."),
        rejections,
        drops,
        sf_rejected_from_s: sf_first_s,
        sf_rejected_until_s: sf_last_s,
        wan: wan_facts,
    };
    write_active(&runs.join(format!("{tag}-active.csv")), &active)?;
    Ok(point)
}

/// Every non-zero rejection counter of the SEs (summed) and of the RE, keyed
/// `SERVER.CONTROLLER.REASON` (`se.forward.target_backlog`: smart forwarding;
/// `se.feedback.*`: hop-by-hop feedback; `*.overload.*`: local control) and `re.deferred`
/// (deferred INVITEs answered 503 after `defer_max_wait_ms`).
fn rejection_counts(se_texts: &[String], re_text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let mut add = |server: &str, text: &str| {
        for controller in ["overload", "forward", "feedback"] {
            let name = format!("holdline_{controller}_rejected_total{{");
            for (reason, n) in by_reason(text, &name) {
                *out.entry(format!("{server}.{controller}.{reason}"))
                    .or_insert(0) += n;
            }
        }
        let deferred = metric_where(
            text,
            "holdline_overload_deferred_released_total",
            &["outcome=\"rejected\""],
        );
        if deferred > 0.0 {
            *out.entry(format!("{server}.deferred")).or_insert(0) += deferred as u64;
        }
    };
    for t in se_texts {
        add("se", t);
    }
    add("re", re_text);
    out
}

/// The `reason` label and value of every non-zero sample whose line starts with `prefix`
/// (`NAME{`) in a Prometheus exposition.
fn by_reason<'a>(text: &'a str, prefix: &'a str) -> impl Iterator<Item = (&'a str, u64)> + 'a {
    text.lines().filter_map(move |line| {
        let rest = line.strip_prefix(prefix)?;
        let reason = rest.split("reason=\"").nth(1)?.split('"').next()?;
        let n = line.rsplit_once(' ')?.1.parse::<f64>().ok()?;
        (n > 0.0).then_some((reason, n as u64))
    })
}

/// Every non-zero `holdline_drops_total` reason of the SEs (summed) and of the RE, keyed
/// `SERVER.REASON`.
fn drop_counts(se_texts: &[String], re_text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let mut add = |server: &str, text: &str| {
        for (reason, n) in by_reason(text, "holdline_drops_total{") {
            *out.entry(format!("{server}.{reason}")).or_insert(0) += n;
        }
    };
    for t in se_texts {
        add("se", t);
    }
    add("re", re_text);
    out
}

/// The sum of the counters whose key starts with `prefix`.
fn rejected(counts: &BTreeMap<String, u64>, prefix: &str) -> u64 {
    counts
        .iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(_, n)| n)
        .sum()
}

/// The link's counters and the `ss` samples of a WAN point.
fn wan_facts(delay_ms: f64, s: &WanStats, ss: &[SsSample]) -> WanFacts {
    let dropped = |d: &holdline_netem::DirectionStats| {
        d.lost + d.queue_drops + d.random_drops + d.overflow + d.write_errors
    };
    let delivered = s.a_to_b.delivered + s.b_to_a.delivered;
    WanFacts {
        delay_ms,
        packets_a_to_b: s.a_to_b.offered,
        packets_b_to_a: s.b_to_a.offered,
        dropped: dropped(&s.a_to_b) + dropped(&s.b_to_a),
        late_mean_us: if delivered == 0 {
            0.0
        } else {
            (s.a_to_b.late_sum_ns + s.b_to_a.late_sum_ns) as f64 / delivered as f64 / 1e3
        },
        late_max_us: s.a_to_b.late_max_ns.max(s.b_to_a.late_max_ns) as f64 / 1e3,
        ss_rtt_ms: median(ss.iter().map(|x| x.rtt_ms).collect()),
        ss_cwnd_min: ss.iter().map(|x| x.cwnd).min().unwrap_or(0),
        ss_notsent_max: ss.iter().map(|x| x.notsent).max().unwrap_or(0),
        ss_samples: ss.len(),
        congestion_control: String::new(),
    }
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

pub(crate) fn progress(i: usize, n: usize, p: &Point, started: Instant, wan_sweep: bool) {
    eprintln!(
        "[{i}/{n} {:>5.0} s] {:<7} {:>2} SE {:>5.2}x offered {:>7.1}/s  throughput {:>6.1}/s  PDD p50 {:>7.1} ms p99 {:>8.1} ms  503 {:>6}  other {:>5}  200 retrans {:>6}  fairness {}  RE 503 {}{}  generator core {}",
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
        p.re_rejected_deferred,
        if p.re_polls > 0 {
            format!(" polls {}", p.re_polls)
        } else {
            String::new()
        },
        p.gen_busy
            .map_or_else(|| "-".to_string(), |b| format!("{:.0}%", b * 100.0)),
    );
    if wan_sweep {
        eprintln!(
            "        link {}{}: 503s by source: SE smart forwarding {}, SE feedback {}, SE local {}; RE deferred {}, RE local {}",
            link_name(p.wan_delay_ms),
            p.wan_congestion_control
                .as_ref()
                .map_or_else(String::new, |c| format!(" ({c})")),
            p.se_rejected_sf,
            p.se_rejected_feedback,
            p.se_rejected_local,
            p.re_rejected_deferred,
            p.re_rejected_local,
        );
        if let (Some(from), Some(until)) = (p.sf_rejected_from_s, p.sf_rejected_until_s) {
            eprintln!(
                "        smart forwarding's 503s between {from:.2} s and {until:.2} s of the load"
            );
        }
        if !p.drops.is_empty() {
            eprintln!("        messages dropped by the servers: {:?}", p.drops);
        }
    }
}

/// `loopback` or `20 ms` (one-way delay of the emulated link).
fn link_name(wan_delay_ms: Option<f64>) -> String {
    wan_delay_ms.map_or_else(|| "loopback".to_string(), |d| format!("{d} ms"))
}

/// [`link_name`], with the congestion control when there is one to tell apart
/// (`60 ms cubic`).
fn link_label(link: &Link) -> String {
    match &link.cc {
        Some(cc) if link.delay_ms.is_some() => format!("{} {cc}", link_name(link.delay_ms)),
        _ => link_name(link.delay_ms),
    }
}

fn tag(mechanism: &str, ses: u32, factor: f64, link: &Link) -> String {
    match (link.delay_ms, &link.cc) {
        (None, _) => format!("{mechanism}-{ses}se-{factor}x"),
        (Some(d), None) => format!("{mechanism}-{ses}se-{factor}x-wan{d}ms"),
        (Some(d), Some(cc)) => format!("{mechanism}-{ses}se-{factor}x-wan{d}ms-{cc}"),
    }
}

/// The path between the SEs and the RE of a point: loopback (no delay), or an emulated WAN
/// link with its one-way delay and, when named, TCP's congestion control on it.
#[derive(Clone, Debug, Default, PartialEq)]
struct Link {
    delay_ms: Option<f64>,
    cc: Option<String>,
}

/// The links a sweep runs each point over: loopback and/or each WAN delay (× each
/// congestion control named).
fn links(args: &Args) -> Result<Vec<Link>> {
    if args.wan_delay_ms.is_empty() {
        return Ok(vec![Link::default()]);
    }
    if let Some(bad) = args
        .wan_delay_ms
        .iter()
        .find(|d| !(0.0..=10_000.0).contains(*d))
    {
        return Err(LabError::Precondition(format!(
            "--wan-delay-ms {bad}: each one-way delay must be between 0 and 10000 ms"
        )));
    }
    if !crate::runner::is_root() {
        return Err(LabError::Precondition(
            "--wan-delay-ms needs root: the emulated link joins two network namespaces with \
             TUN devices (run it with sudo, or leave the option out to run on loopback)"
                .into(),
        ));
    }
    require("ip", "iproute2", "-V")?;
    if let Some(bad) = args
        .wan_congestion_control
        .iter()
        .find(|c| c.is_empty() || !c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
    {
        return Err(LabError::Precondition(format!(
            "--wan-congestion-control `{bad}`: not a congestion control's name"
        )));
    }
    let mut out = Vec::new();
    if args.with_loopback {
        out.push(Link::default());
    }
    let ccs: Vec<Option<String>> = if args.wan_congestion_control.is_empty() {
        vec![None]
    } else {
        args.wan_congestion_control
            .iter()
            .cloned()
            .map(Some)
            .collect()
    };
    for &d in &args.wan_delay_ms {
        for cc in &ccs {
            out.push(Link {
                delay_ms: Some(d),
                cc: cc.clone(),
            });
        }
    }
    Ok(out)
}

/// The capacity steps of a sweep (offered `nominal × step` each; `quick`: 0.8-1.0, else
/// 0.7-1.1).
pub(crate) fn capacity_steps(sweep: &SweepArgs, given: Option<f64>) -> &'static [f64] {
    if given.is_some() {
        &[]
    } else if sweep.quick {
        &[0.8, 0.9, 1.0]
    } else {
        &[0.7, 0.8, 0.9, 1.0, 1.1]
    }
}

/// The RE's nominal capacity from its emulated cost, calls/s.
pub(crate) fn nominal_capacity(sweep: &SweepArgs) -> f64 {
    1e6 / (MESSAGES_PER_CALL * sweep.cost_us.max(1) as f64)
}

/// Phase 1 of a sweep: the RE's capacity (mechanism `none`, one SE), the highest step whose
/// calls all completed with PDD p99 ≤ 200 ms and no 200 OK retransmission (`given`: that,
/// no steps); each step's point goes to `each` as it is measured.
pub(crate) fn capacity_phase(
    exe: &Path,
    runs: &Path,
    sweep: &SweepArgs,
    steps: &[f64],
    given: Option<f64>,
    (duration, drain): (f64, f64),
    mut each: impl FnMut(&Point),
) -> Result<(f64, Vec<Point>)> {
    let nominal = nominal_capacity(sweep);
    let mut capacity_steps = Vec::new();
    let mut capacity = given.unwrap_or(0.0);
    for &f in steps {
        let rate = (nominal * f).round();
        let spec = Spec::new(
            "none",
            1,
            rate,
            sweep,
            duration,
            drain,
            format!("capacity-{rate}"),
        );
        let mut p = run_point(exe, runs, &spec, 0.0)?;
        p.load_factor = f;
        each(&p);
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
    Ok((capacity, capacity_steps))
}

/// Runs the experiment and writes its results.
pub fn run(args: &Args) -> Result<Results> {
    if args.sweep.replot {
        return replot(&args.out);
    }
    check_tools()?;
    let links = links(args)?;
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
        // Seed 000's figures; `poll` (its future work) when asked for.
        MECHANISMS
            .iter()
            .filter(|m| **m != "poll")
            .map(|s| s.to_string())
            .collect()
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
    if ses.iter().any(|&n| n == 0 || n > MAX_SES) {
        return Err(LabError::Precondition(format!(
            "--ses: each number of SEs must be between 1 and {MAX_SES}"
        )));
    }
    let nominal = nominal_capacity(&args.sweep);
    let steps = capacity_steps(&args.sweep, args.capacity);
    let total = steps.len() + loads.len() * mechanisms.len() * ses.len() * links.len();
    let mut done = 0;
    eprintln!(
        "tcp-overload: RE {} µs per message (rejections {} µs), nominal capacity {:.0} calls/s; {} points of {:.0} s; SEs {:?}; mechanisms {:?}",
        args.sweep.cost_us, args.sweep.reject_cost_us, nominal, total, duration, ses, mechanisms
    );

    // Phase 1: the RE's capacity (no control, one SE).
    let (capacity, capacity_steps) = capacity_phase(
        &exe,
        &runs,
        &args.sweep,
        steps,
        args.capacity,
        (duration, drain),
        |p| {
            done += 1;
            progress(done, total, p, started, !args.wan_delay_ms.is_empty());
        },
    )?;

    // Phase 2: the curves.
    let mut points = Vec::new();
    for &n in &ses {
        for &f in &loads {
            for m in &mechanisms {
                for link in &links {
                    let mut spec = Spec::new(
                        m,
                        n,
                        (capacity * f).round(),
                        &args.sweep,
                        duration,
                        drain,
                        tag(m, n, f, link),
                    );
                    spec.wan_delay_ms = link.delay_ms;
                    spec.wan_cc = link.cc.clone();
                    spec.trace_rejections = !args.wan_delay_ms.is_empty();
                    let p = run_point(&exe, &runs, &spec, capacity)?;
                    done += 1;
                    progress(done, total, &p, started, !args.wan_delay_ms.is_empty());
                    points.push(p);
                    // What is measured so far survives an interrupted run.
                    crate::runner::write_partial(&args.out, "tcp-overload", capacity, &points)?;
                }
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
        re_config: re_config_sf(Ipv4Addr::LOCALHOST, 0, &Buffers::MINIMIZED, None),
        nominal_capacity_cps: nominal,
        capacity_cps: capacity,
        capacity_steps,
        points,
        wan_delays_ms: args.wan_delay_ms.clone(),
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    write(&args.out, &results)?;
    let _ = std::fs::remove_file(args.out.join("results.partial.json"));
    Ok(results)
}

/// Rewrites `points.csv` and the plots from `DIR/results.json` and the files in `DIR/runs`.
fn replot(out: &Path) -> Result<Results> {
    let r: Results = crate::runner::read_results(out)?;
    write(out, &r)?;
    Ok(r)
}

/// The series label of a mechanism and number of SEs.
fn label(mechanism: &str, ses: u32) -> String {
    let name = match mechanism {
        "ics" => "ICS+BM+SF",
        "ecs" => "ECS+BM+SF",
        "poll" => "ECS+BM+SF, RE polling",
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
        "experiment,mechanism,ses,load_factor,offered_cps,capacity_cps,throughput_cps,completed_total,goodput_cps,goodput_steady_cps,pdd_p50_ms,pdd_p99_ms,retrans_200,retrans_invite,fairness,calls_attempted,calls_ok,r503,r_other,timeouts,se_rejected,re_rejected,re_active_max,re_cpu_s,re_busy,per_se_cps,wan_delay_ms,se_rejected_sf,se_rejected_feedback,se_rejected_local,re_rejected_deferred,re_rejected_local,wan_rtt_ms,wan_notsent_max,wan_late_mean_us,wan_congestion_control,re_polls,gen_busy\n",
    );
    for p in &r.points {
        csv.push_str(&format!(
            "{},{},{},{:.3},{:.1},{:.1},{:.1},{},{:.1},{:.1},{:.1},{:.1},{},{},{},{},{},{},{},{},{},{},{},{:.3},{:.3},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
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
            p.wan_delay_ms.map_or_else(String::new, |d| d.to_string()),
            p.se_rejected_sf,
            p.se_rejected_feedback,
            p.se_rejected_local,
            p.re_rejected_deferred,
            p.re_rejected_local,
            p.wan
                .as_ref()
                .map_or_else(String::new, |w| format!("{:.1}", w.ss_rtt_ms)),
            p.wan
                .as_ref()
                .map_or_else(String::new, |w| w.ss_notsent_max.to_string()),
            p.wan
                .as_ref()
                .map_or_else(String::new, |w| format!("{:.0}", w.late_mean_us)),
            p.wan_congestion_control.as_deref().unwrap_or(""),
            p.re_polls,
            p.gen_busy.map_or_else(String::new, |b| format!("{b:.3}")),
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
    // The links of the points: loopback first, then the WAN delays in increasing order;
    // the congestion controls are told apart only when the WAN points used several.
    let mut ccs: Vec<&String> = r
        .points
        .iter()
        .filter_map(|p| p.wan_congestion_control.as_ref())
        .collect();
    ccs.sort();
    ccs.dedup();
    let show_cc = ccs.len() > 1;
    let link_of = |p: &Point| Link {
        delay_ms: p.wan_delay_ms,
        cc: p.wan_congestion_control.clone().filter(|_| show_cc),
    };
    let mut links: Vec<Link> = Vec::new();
    for p in &r.points {
        let l = link_of(p);
        if !links.contains(&l) {
            links.push(l);
        }
    }
    links.sort_by(|a, b| {
        let key = |l: &Link| l.delay_ms.unwrap_or(-1.0);
        key(a).total_cmp(&key(b)).then_with(|| a.cc.cmp(&b.cc))
    });
    let wan_sweep = links.iter().any(|l| l.delay_ms.is_some());
    // Without a WAN link the labels are the mechanism's and the SEs' only.
    let name = |m: &str, n: u32, link: &Link| {
        if wan_sweep {
            format!("{}: {}", link_label(link), label(m, n))
        } else {
            label(m, n)
        }
    };
    let series_of = |f: &dyn Fn(&Point) -> Option<f64>| {
        let mut out = Vec::new();
        for &n in &ses {
            for m in &mechanisms {
                for link in &links {
                    let mut pts: Vec<(f64, f64)> = r
                        .points
                        .iter()
                        .filter(|p| p.mechanism == *m && p.ses == Some(n) && link_of(p) == *link)
                        .filter_map(|p| f(p).map(|y| (p.offered_cps, y)))
                        .collect();
                    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                    if !pts.is_empty() {
                        out.push((name(m, n, link), pts));
                    }
                }
            }
        }
        out
    };
    let mut throughput = series_of(&|p| Some(p.throughput_cps));
    let mut xs: Vec<f64> = r.points.iter().map(|p| p.offered_cps).collect();
    xs.sort_by(f64::total_cmp);
    throughput.push((
        "capacity".to_string(),
        xs.iter().map(|x| (*x, r.capacity_cps)).collect(),
    ));
    let title = if wan_sweep {
        format!(
            "SEs -> RE by link (capacity {:.0} calls/s): throughput (ACK reached the UAS) vs offered",
            r.capacity_cps
        )
    } else {
        format!(
            "SIP over TCP, SEs -> RE (capacity {:.0} calls/s): throughput (ACK reached the UAS) vs offered",
            r.capacity_cps
        )
    };
    plot::chart(
        out,
        "throughput",
        &title,
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
        &series_of(&|p| p.fairness),
    )?;
    if wan_sweep {
        plot::chart(
            out,
            "pdd-median",
            "PDD p50 (INVITE to 200 OK at the UACs) vs offered, by one-way delay SEs <-> RE",
            "offered calls/s",
            "PDD p50, ms",
            &series_of(&|p| Some(p.pdd_p50_ms)),
        )?;
        let share = |n: u64, p: &Point| 100.0 * n as f64 / p.calls_attempted.max(1) as f64;
        plot::chart(
            out,
            "rejected-sf",
            "Calls rejected by the SEs' smart forwarding (503 target_backlog), % of calls offered",
            "offered calls/s",
            "% of calls",
            &series_of(&|p| Some(share(p.se_rejected_sf, p))),
        )?;
        plot::chart(
            out,
            "rejected",
            "Calls rejected by any server (503 at the UACs, or the RE's 503 as 500), % of calls offered",
            "offered calls/s",
            "% of calls",
            &series_of(&|p| Some(share(p.r503 + p.r_other, p))),
        )?;
    }

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
            for link in &links {
                let Some(p) = r.points.iter().find(|p| {
                    p.mechanism == *m
                        && p.ses == Some(n)
                        && link_of(p) == *link
                        && (p.load_factor - top).abs() < 1e-6
                }) else {
                    continue;
                };
                // Results written before points had their tag: the tag of the link's delay.
                let t = if p.tag.is_empty() {
                    tag(
                        m,
                        n,
                        p.load_factor,
                        &Link {
                            delay_ms: p.wan_delay_ms,
                            cc: None,
                        },
                    )
                } else {
                    p.tag.clone()
                };
                let runs = out.join("runs");
                // The PDD of SE 0's UAC (every UAC carries the same share).
                if let Ok(v) = read_json(&runs.join(format!("{t}-uac0.json"))) {
                    cdf.push((name(m, n, link), cdf_points(&v["latency"]["pdd"])));
                }
                let samples = read_active(&runs.join(format!("{t}-active.csv")));
                if *m == "none" {
                    active_none.push((name(m, n, link), samples));
                } else {
                    active.push((name(m, n, link), samples));
                }
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
    fn rejections_are_told_apart_by_server_and_controller() {
        let se = "holdline_overload_rejected_total{worker=\"0\",reason=\"occupancy\"} 3\n\
                  holdline_overload_rejected_total{worker=\"0\",reason=\"queue_full\"} 0\n\
                  holdline_forward_rejected_total{worker=\"0\",reason=\"target_backlog\"} 7\n\
                  holdline_feedback_rejected_total{worker=\"0\",reason=\"loss_throttle\"} 2\n"
            .to_string();
        let re = "holdline_overload_rejected_total{worker=\"0\",reason=\"occupancy\"} 11\n\
                  holdline_overload_deferred_released_total{worker=\"0\",outcome=\"handled\"} 90\n\
                  holdline_overload_deferred_released_total{worker=\"0\",outcome=\"rejected\"} 5\n";
        let c = rejection_counts(&[se.clone(), se], re);
        assert_eq!(c.len(), 5, "{c:?}");
        assert_eq!(rejected(&c, "se.forward.target_backlog"), 14);
        assert_eq!(rejected(&c, "se.feedback."), 4);
        assert_eq!(rejected(&c, "se.overload."), 6);
        assert_eq!(rejected(&c, "re.overload."), 11);
        assert_eq!(rejected(&c, "re.deferred"), 5);
        assert!(rejection_counts(&[], "").is_empty());
        let drops = drop_counts(
            &["holdline_drops_total{worker=\"0\",reason=\"flood\"} 9\n\
               holdline_drops_total{worker=\"0\",reason=\"too_large\"} 0\n"
                .to_string()],
            "holdline_drops_total{worker=\"0\",reason=\"conn_gone\"} 2\n",
        );
        assert_eq!(
            drops.into_iter().collect::<Vec<_>>(),
            vec![("re.conn_gone".to_string(), 2), ("se.flood".to_string(), 9)]
        );
    }

    #[test]
    fn servers_on_a_wan_link_trust_its_addresses_as_loopback_is_trusted() {
        let link = holdline_netem::ADDR_B;
        for text in [
            re_config_sf(link, 5080, &Buffers::MINIMIZED, None),
            re_config_none(link, 5080),
            re_config_default(link, 5080),
            se_config(
                holdline_netem::ADDR_A,
                5070,
                "default",
                (holdline_netem::ADDR_B, 5080),
                None,
                false,
            ),
            se_config(
                holdline_netem::ADDR_A,
                5070,
                "ics",
                (holdline_netem::ADDR_B, 5080),
                Some(1024),
                true,
            ),
        ] {
            let c = holdline_server::ServerConfig::from_toml("x.toml", &text)
                .unwrap_or_else(|e| panic!("{e}\n{text}"));
            let trusted: Vec<String> = c.trusted.iter().map(|t| t.0.to_string()).collect();
            for want in ["10.203.0.1", "10.203.0.2", "127.0.0.0/8"] {
                assert!(
                    trusted.iter().any(|t| t.starts_with(want)),
                    "{want} not trusted: {trusted:?}\n{text}"
                );
            }
        }
        // On loopback the configurations say nothing of it: holdline's default applies.
        assert!(!re_config_default(Ipv4Addr::LOCALHOST, 5080).contains("trusted"));
        assert!(
            !se_config(
                Ipv4Addr::LOCALHOST,
                5070,
                "default",
                (Ipv4Addr::LOCALHOST, 5080),
                None,
                false
            )
            .contains("trusted")
        );
    }

    #[test]
    fn the_trace_says_when_smart_forwarding_rejected() {
        let trace = [
            (0.0, 0, 0, 0),
            (0.25, 0, 1, 0),
            (0.5, 4, 1, 0),
            (0.75, 6, 3, 0),
            (1.0, 6, 9, 0),
        ];
        assert_eq!(sf_window(&trace), (Some(0.5), Some(0.75)));
        assert_eq!(sf_window(&trace[..2]), (None, None));
        assert_eq!(sf_window(&[]), (None, None));
    }

    #[test]
    fn wan_points_have_tags_of_their_own() {
        let wan = |d: f64, cc: Option<&str>| Link {
            delay_ms: Some(d),
            cc: cc.map(str::to_owned),
        };
        assert_eq!(tag("default", 1, 0.5, &Link::default()), "default-1se-0.5x");
        assert_eq!(
            tag("default", 1, 2.0, &wan(60.0, Some("cubic"))),
            "default-1se-2x-wan60ms-cubic"
        );
        assert_eq!(link_label(&wan(60.0, Some("cubic"))), "60 ms cubic");
        assert_eq!(
            tag("default", 1, 0.5, &wan(20.0, None)),
            "default-1se-0.5x-wan20ms"
        );
        assert_eq!(link_name(None), "loopback");
        assert_eq!(link_name(Some(60.0)), "60 ms");
    }

    #[test]
    fn a_loopback_sweep_runs_on_loopback_only() {
        let args = Args::try_parse_from(["tcp-overload"]).expect("parse");
        assert_eq!(links(&args).expect("links"), vec![Link::default()]);
        let args = Args::try_parse_from(["tcp-overload", "--wan-delay-ms=-5"]).expect("parse");
        assert!(links(&args).is_err(), "a negative delay is refused");
        assert!(
            Args::try_parse_from(["tcp-overload", "--with-loopback"]).is_err(),
            "--with-loopback needs --wan-delay-ms"
        );
    }

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
            holdline_server::ServerConfig::from_toml(
                "se.toml",
                &se_config(
                    Ipv4Addr::LOCALHOST,
                    5070,
                    m,
                    (Ipv4Addr::LOCALHOST, 5080),
                    None,
                    false,
                ),
            )
            .unwrap_or_else(|e| panic!("{m}: {e}"))
        };
        for m in ["ics", "ecs", "poll"] {
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
            re_config_sf(Ipv4Addr::LOCALHOST, 5080, &Buffers::MINIMIZED, None),
            re_config_none(Ipv4Addr::LOCALHOST, 5080),
            re_config_default(Ipv4Addr::LOCALHOST, 5080),
        ] {
            let c = holdline_server::ServerConfig::from_toml("re.toml", &text)
                .unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert!(c.record_route);
        }
        let default = holdline_server::ServerConfig::from_toml(
            "re.toml",
            &re_config_default(Ipv4Addr::LOCALHOST, 5080),
        )
        .expect("valid");
        assert_eq!(
            default.overload,
            holdline_server::ServerConfig::default().overload
        );
        let sf = holdline_server::ServerConfig::from_toml(
            "re.toml",
            &re_config_sf(Ipv4Addr::LOCALHOST, 5080, &Buffers::MINIMIZED, None),
        )
        .expect("valid");
        assert_eq!(sf.overload.local, "none");
        assert!(sf.overload.defers_new_invites());
        let poll = holdline_server::ServerConfig::from_toml(
            "re.toml",
            &re_config_sf(Ipv4Addr::LOCALHOST, 5080, &Buffers::MINIMIZED, Some("poll")),
        )
        .expect("valid");
        assert_eq!(poll.overload.defer_fairness, "poll");
        assert!(poll.overload.defers_new_invites());
        let b = sf.listener_buffers(&"tcp:127.0.0.1:5080".parse().expect("listener"));
        assert_eq!(
            (b.recv_buffer, b.read_buffer, b.max_segment),
            (Some(1024), 2048, Some(536))
        );
        let none = holdline_server::ServerConfig::from_toml(
            "re.toml",
            &re_config_none(Ipv4Addr::LOCALHOST, 5080),
        )
        .expect("valid");
        assert_eq!(none.overload.local, "none");
        assert!(!none.overload.defers_new_invites());
        assert_eq!(none.overload.smart_forwarding_mode(), "off");
    }
}
