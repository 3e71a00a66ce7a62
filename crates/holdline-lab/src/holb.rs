//! `holdline lab holb`: seed 002's head-of-line-blocking test bed (issue 19 item 3).
//!
//! ```text
//!  namespace A (10.203.0.1)                                      namespace B (10.203.0.2)
//!  direct:  UAC ==[T]==> nt0 ══ holdline netem: delay d, loss p (corr. c) ══ nt0 ==[T]==> UAS
//!  proxies: UAC --UDP--> P1 ==[T]==> nt0 ══ (the same link) ══ nt0 ==[T]==> P2 --UDP--> UAS
//! ```
//!
//! Transport T across an emulated link: SCTP ordered on one stream (head-of-line blocking),
//! SCTP unordered (none), SCTP ordered over 16 streams (a call's messages on one stream),
//! TCP, and UDP. In the `direct` topology (the default; the paper's test bed, l. 97-99)
//! `holdline load uac` speaks T to `holdline load uas` across the link; the callee rings at
//! once and declines five seconds later (486, ACKed), so a call is an INVITE and a 180 as in
//! the paper, plus a 486 and an ACK long after; the caller sets its association or
//! connection up before its first call (`--connect-first`). In the `proxies` topology two
//! `holdline serve` proxies carry whole calls (INVITE, 100, 180, 200, ACK, BYE, 200) over T,
//! the UAC and the UAS one hop inside their namespace, the UAS answering a second after it
//! rings, five warm-up calls first. Either way the post-selection delay (first INVITE sent
//! → first 180 received at the UAC) is two crossings of the link plus whatever loss and
//! blocking add.
//! Per configuration (delay, call rate, transport, loss) the lab runs `--runs` independent
//! runs of `--duration` seconds (fresh processes and link, a seed per run) and takes each
//! run's 95th percentile of the post-selection delay, as the paper does (l. 111); the mean
//! of those over the runs gets its 95% confidence interval (Student's t), and the runs of
//! ordered and unordered SCTP at the same point are compared with a two-sample
//! Kolmogorov-Smirnov test (l. 143). The central comparison — 1% loss with HOLB against 2%
//! without, at each (delay, rate) — is reported on its own.
//!
//! Output in `--out DIR`: `results.json` (every run, the aggregates, the comparisons, the
//! paper's statements), `points.csv`, one plot per (delay, rate) (`p95-D-ms-R-cps.svg/png`:
//! 95th-percentile post-selection delay against loss, one line per transport), and every
//! process's report and log under `runs/`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use holdline_netem::traffic::{Traffic, TrafficConfig};
use holdline_netmodel::{LinkConfig, Loss, QueueDrop, RateLimit};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::{LabError, Result};
use crate::generator::{GENERATOR_CORE, num, read_json, wait_bounded};
use crate::plot;
use crate::runner::{
    Proc, UacLoad, holdline_exe, lab_main, machine, metric, metric_where, start_uacs_at,
};
use crate::server::{SERVER_CORE, Transport};
use crate::wan::{Site, Wan};

/// `holdline lab holb` options.
#[derive(Debug, Clone, Parser)]
#[command(
    about = "seed 002's head-of-line-blocking test bed: caller -> netem -> callee (or P1 -> netem -> P2) over SCTP ordered/unordered, TCP, UDP"
)]
pub struct Args {
    /// A short run: 20 ms, 40 calls/s, SCTP ordered and unordered at 1% and 2% loss, 3
    /// runs of 10 s.
    #[arg(long)]
    pub quick: bool,
    /// Results directory.
    #[arg(long, value_name = "DIR", default_value = "lab-results/holb")]
    pub out: PathBuf,
    /// Transports between the proxies: sctp-ordered, sctp-unordered, sctp-streams, tcp, udp
    /// (default: all five; quick: the first two).
    #[arg(long, value_delimiter = ',')]
    pub transports: Vec<String>,
    /// Packet loss on the link, percent, each way (default 0.5,1,2,4,8; quick 1,2).
    #[arg(long, value_delimiter = ',')]
    pub losses: Vec<f64>,
    /// One-way delays of the link, ms (default 20,60; quick 20).
    #[arg(long, value_delimiter = ',')]
    pub delays: Vec<f64>,
    /// Call rates, calls/s (default 20,40; quick 40).
    #[arg(long, value_delimiter = ',')]
    pub rates: Vec<f64>,
    /// Loss correlation (lag-1 autocorrelation; the paper reports 0.8, l. 137).
    #[arg(long, default_value_t = 0.8)]
    pub correlation: f64,
    /// Runs per configuration (default 10, the paper's; quick 3).
    #[arg(long)]
    pub runs: Option<u32>,
    /// Seconds of calls per run (default 60, the paper's; quick 10).
    #[arg(long)]
    pub duration: Option<f64>,
    /// The holdline binary (default: this one).
    #[arg(long)]
    pub exe: Option<PathBuf>,
    /// Competing long-lived TCP transfers across the link (A to B, the SIP direction), a
    /// list to sweep (seed 002's Figs. 5-6: 0 to 6). Given, the runs sweep these instead of
    /// `--losses` (no random loss: drops come from the router's queue).
    #[arg(long, value_delimiter = ',')]
    pub competing_tcp: Vec<u32>,
    /// Competing web sessions per second (Poisson arrivals; a session downloads a page of
    /// 85 KB three times, 10 s apart), a list to sweep (Fig. 8); as `--competing-tcp`.
    #[arg(long, value_delimiter = ',')]
    pub web_sessions: Vec<f64>,
    /// The router's queues, named as the paper names them: derivative random drop from the
    /// low to the high threshold, packets, e.g. `10-20,50-60` (the default when traffic
    /// competes; with `--losses`, none unless given).
    #[arg(long, value_delimiter = ',')]
    pub queues: Vec<String>,
    /// The rate of the link behind the router's queue, kbit/s, when a queue is set (the
    /// paper's 100 Mbit/s Ethernet, scaled down for a user-space emulator sharing two cores
    /// with the proxies; the queue, not the rate, sets the drops).
    #[arg(long, default_value_t = 10_000)]
    pub bottleneck_kbit: u64,
    /// TCP congestion control in both namespaces (`net.ipv4.tcp_congestion_control`): the
    /// competing transfers' and the TCP transport's. Default: `reno` when traffic competes
    /// (loss-based, as the paper's Linux 2.6 senders; BBR keeps a 20-packet queue
    /// overflowing whatever it loses), the host's otherwise.
    #[arg(long)]
    pub congestion_control: Option<String>,
    /// Who speaks across the link: `direct` (the default: seed 002's own test bed,
    /// l. 97-99, the caller speaks the transport across the link to the callee, which rings
    /// at once and declines 5 s later (486, ACKed), so a call is a few hundred bytes each
    /// way, near the paper's 72-144 kbit/s at 20-40 calls/s) or `proxies` (two `holdline
    /// serve`s carry whole calls over the transport, each with its caller or callee beside
    /// it: holdline's own SCTP, several times the paper's bytes per call).
    #[arg(long, value_enum, default_value = "direct")]
    pub topology: Topology,
    /// Run nothing: redraw the plots of `--out`'s `results.json`.
    #[arg(long)]
    pub replot: bool,
}

/// Who speaks across the emulated link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Topology {
    /// UAC ⇒ link ⇒ UAS: the paper's SIP applications A and B, INVITE → 180 (486 and ACK 5 s
    /// later).
    #[default]
    Direct,
    /// UAC → P1 ⇒ link ⇒ P2 → UAS: holdline's transports between two proxies, whole calls.
    Proxies,
}

/// What a series of runs varies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sweep {
    /// Random loss on the link, percent each way (Fig. 4).
    #[default]
    Loss,
    /// Competing long-lived TCP transfers (Figs. 5-6).
    CompetingTcp,
    /// Competing web sessions per second (Fig. 8).
    WebSessions,
}

impl Sweep {
    /// What it varies, in words (comparison names).
    fn what(self) -> &'static str {
        match self {
            Self::Loss => "loss",
            Self::CompetingTcp => "competing TCP transfers",
            Self::WebSessions => "web sessions",
        }
    }

    /// The x axis of its plots.
    fn axis(self) -> &'static str {
        match self {
            Self::Loss => "packet loss each way (%)",
            Self::CompetingTcp => "competing long-lived TCP transfers",
            Self::WebSessions => "competing web sessions per second",
        }
    }

    /// Its part of file names and run tags.
    fn tag(self) -> &'static str {
        match self {
            Self::Loss => "l",
            Self::CompetingTcp => "tcp",
            Self::WebSessions => "web",
        }
    }
}

/// Parses a queue as the paper names it: `LOW-HIGH` packets.
fn parse_queue(s: &str) -> Result<[u64; 2]> {
    let bad = || {
        LabError::Precondition(format!(
            "--queues: `{s}` (expected LOW-HIGH packets with LOW < HIGH, e.g. 10-20)"
        ))
    };
    let (lo, hi) = s.split_once('-').ok_or_else(bad)?;
    let lo: u64 = lo.trim().parse().map_err(|_| bad())?;
    let hi: u64 = hi.trim().parse().map_err(|_| bad())?;
    if lo >= hi {
        return Err(bad());
    }
    Ok([lo, hi])
}

/// Everything a run's link and competing traffic are made of.
#[derive(Clone, Copy, Debug)]
struct Conditions {
    delay_ms: f64,
    rate_cps: f64,
    loss_pct: f64,
    correlation: f64,
    competing_tcp: u32,
    web_sessions_per_s: f64,
    /// The router's DRD thresholds, packets.
    queue: Option<[u64; 2]>,
    bottleneck_kbit: u64,
}

impl Conditions {
    /// The link each way.
    fn link(&self) -> Result<LinkConfig> {
        let loss = Loss::correlated(self.loss_pct / 100.0, self.correlation)
            .map_err(|e| LabError::Precondition(format!("loss {}%: {e}", self.loss_pct)))?;
        let rate = self.queue.map(|[lo, hi]| RateLimit {
            // The packet bound and DRD decide; the byte bound only has to hold `hi` full
            // Ethernet frames.
            queue_packets: Some(hi),
            drop: QueueDrop::Derivative {
                min_packets: lo,
                max_packets: hi,
                // NIST Net's DRD rises to 95% at the high threshold (seed 002, l. 139).
                max_probability: 0.95,
            },
            ..RateLimit::new(self.bottleneck_kbit * 1_000, hi * 1_600)
        });
        Ok(LinkConfig {
            delay: Duration::from_micros((self.delay_ms * 1e3).round() as u64),
            loss,
            rate,
            // Whole IP packets cross the TUN devices.
            overhead_bytes: 0,
            ..LinkConfig::default()
        })
    }

    fn competing(&self) -> bool {
        self.competing_tcp > 0 || self.web_sessions_per_s > 0.0
    }

    /// The competing traffic of run `run` across `wan`, when there is any.
    fn start_traffic(&self, wan: &Wan, run: u32) -> Result<Option<Traffic>> {
        if !self.competing() {
            return Ok(None);
        }
        Ok(Some(wan.traffic(&TrafficConfig {
            long_lived: self.competing_tcp,
            web_sessions_per_s: self.web_sessions_per_s,
            seed: 1 + u64::from(run),
            ..TrafficConfig::default()
        })?))
    }
}

/// A transport between the proxies, as the lab names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Link {
    /// SCTP, ordered delivery on one stream: head-of-line blocking.
    SctpOrdered,
    /// SCTP, unordered delivery: no head-of-line blocking.
    SctpUnordered,
    /// SCTP, ordered delivery, 16 streams (a call's messages on one).
    SctpStreams,
    /// TCP (one connection: head-of-line blocking).
    Tcp,
    /// UDP (SIP's own retransmissions).
    Udp,
}

impl Link {
    fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "sctp-ordered" => Self::SctpOrdered,
            "sctp-unordered" => Self::SctpUnordered,
            "sctp-streams" => Self::SctpStreams,
            "tcp" => Self::Tcp,
            "udp" => Self::Udp,
            other => {
                return Err(LabError::Precondition(format!(
                    "--transports: `{other}` (expected sctp-ordered, sctp-unordered, sctp-streams, tcp or udp)"
                )));
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            Self::SctpOrdered => "sctp-ordered",
            Self::SctpUnordered => "sctp-unordered",
            Self::SctpStreams => "sctp-streams",
            Self::Tcp => "tcp",
            Self::Udp => "udp",
        }
    }

    /// The proxies' listener between them (`TRANSPORT:IP:PORT`) at `ip`.
    fn listener(self, ip: std::net::Ipv4Addr) -> String {
        match self {
            Self::SctpOrdered | Self::SctpUnordered | Self::SctpStreams => {
                format!("sctp:{ip}:9899")
            }
            Self::Tcp => format!("tcp:{ip}:5060"),
            Self::Udp => format!("udp:{ip}:5060"),
        }
    }

    /// `holdline load`'s transport options for this link (the direct topology).
    fn load_args(self) -> Vec<String> {
        let v: &[&str] = match self {
            Self::SctpOrdered => &["--transport=sctp", "--sctp-streams=1"],
            Self::SctpUnordered => &["--transport=sctp", "--sctp-unordered", "--sctp-streams=1"],
            Self::SctpStreams => &["--transport=sctp", "--sctp-streams=16"],
            Self::Tcp => &["--transport=tcp"],
            Self::Udp => &["--transport=udp"],
        };
        v.iter().map(|&a| a.to_owned()).collect()
    }

    /// The proxies' `[sctp]` section.
    fn sctp_toml(self) -> &'static str {
        match self {
            Self::SctpUnordered => "[sctp]\nunordered = true\nstreams = 1\n",
            Self::SctpStreams => "[sctp]\nunordered = false\nstreams = 16\n",
            _ => "[sctp]\nunordered = false\nstreams = 1\n",
        }
    }
}

/// One run's figures.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    /// Run index (its seed).
    pub run: u32,
    /// Calls placed.
    pub calls: u64,
    /// Calls that got their 180.
    pub rang: u64,
    /// Calls completed.
    pub completed: u64,
    /// Post-selection delay, 95th percentile, ms.
    pub psd_p95_ms: f64,
    /// Post-selection delay, median, ms.
    pub psd_p50_ms: f64,
    /// Packets the link lost, A→B and B→A.
    pub lost: [u64; 2],
    /// Packets offered to the link, A→B and B→A.
    pub offered: [u64; 2],
    /// SCTP retransmissions at P1 and P2 (T3-rtx timeouts + fast retransmits).
    pub sctp_retransmissions: f64,
    /// Of those, the ones the peer reported as duplicates (not needed).
    #[serde(default)]
    pub sctp_needless: f64,
    /// SIP messages P1 and P2 sent over SCTP (one DATA chunk each).
    #[serde(default)]
    pub sctp_messages: f64,
    /// INVITE retransmissions by the UAC (UDP between the UAC and P1: none expected).
    pub invite_retransmissions: u64,
    /// Packets the router's queue dropped (full, or early by DRD), A→B and B→A: every
    /// flow's, the competing traffic's included.
    #[serde(default)]
    pub queue_drops: [u64; 2],
    /// Bytes the competing traffic delivered (long-lived and web).
    #[serde(default)]
    pub competing_bytes: u64,
}

/// One configuration over its runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    /// One-way delay, ms.
    pub delay_ms: f64,
    /// Calls per second.
    pub rate_cps: f64,
    /// Transport between the proxies.
    pub transport: Link,
    /// Loss each way, percent.
    pub loss_pct: f64,
    /// What the series this point belongs to varies.
    #[serde(default)]
    pub sweep: Sweep,
    /// Competing long-lived TCP transfers.
    #[serde(default)]
    pub competing_tcp: u32,
    /// Competing web sessions per second.
    #[serde(default)]
    pub web_sessions_per_s: f64,
    /// The router's queue (DRD thresholds, packets), if any.
    #[serde(default)]
    pub queue: Option<[u64; 2]>,
    /// The runs.
    pub runs: Vec<Run>,
    /// Mean over the runs of their 95th percentile, ms.
    pub p95_mean_ms: f64,
    /// Half-width of its 95% confidence interval, ms.
    pub p95_ci95_ms: f64,
}

impl Run {
    /// The loss SCTP met, percent (seed 002, l. 210-228): the retransmissions that were
    /// needed over the DATA chunks sent; `None` without SCTP traffic.
    pub fn effective_loss_pct(&self) -> Option<f64> {
        (self.sctp_messages > 0.0).then(|| {
            100.0 * (self.sctp_retransmissions - self.sctp_needless).max(0.0) / self.sctp_messages
        })
    }
}

impl Point {
    /// Its value of what its series varies.
    fn x(&self) -> f64 {
        match self.sweep {
            Sweep::Loss => self.loss_pct,
            Sweep::CompetingTcp => f64::from(self.competing_tcp),
            Sweep::WebSessions => self.web_sessions_per_s,
        }
    }
}

/// Student's t quantile for a two-sided 95% interval with `df` degrees of freedom.
fn t95(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::NAN,
        d if d <= T.len() => T[d - 1],
        _ => 1.96,
    }
}

/// Mean and half-width of the 95% confidence interval of `v`.
pub(crate) fn mean_ci(v: &[f64]) -> (f64, f64) {
    let n = v.len();
    if n == 0 {
        return (0.0, 0.0);
    }
    let mean = v.iter().sum::<f64>() / n as f64;
    if n < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    (mean, t95(n - 1) * (var / n as f64).sqrt())
}

/// Two-sample Kolmogorov-Smirnov test: the statistic D and its asymptotic p-value (the
/// Kolmogorov distribution at `sqrt(n·m/(n+m))·D` with Stephens' small-sample correction).
pub(crate) fn ks_test(a: &[f64], b: &[f64]) -> (f64, f64) {
    if a.is_empty() || b.is_empty() {
        return (0.0, 1.0);
    }
    let mut a = a.to_vec();
    let mut b = b.to_vec();
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    let (n, m) = (a.len() as f64, b.len() as f64);
    let (mut i, mut j, mut d) = (0, 0, 0.0f64);
    while i < a.len() && j < b.len() {
        let x = a[i].min(b[j]);
        while i < a.len() && a[i] <= x {
            i += 1;
        }
        while j < b.len() && b[j] <= x {
            j += 1;
        }
        d = d.max((i as f64 / n - j as f64 / m).abs());
    }
    let en = (n * m / (n + m)).sqrt();
    let lambda = (en + 0.12 + 0.11 / en) * d;
    // Q_KS(λ) = 2 Σ (-1)^(k-1) exp(-2 k² λ²); the series does not converge near 0, where
    // Q is 1 (Q(0.3) = 0.99999).
    if lambda < 0.3 {
        return (d, 1.0);
    }
    let mut p = 0.0;
    for k in 1..=100 {
        let k = f64::from(k);
        let term = 2.0 * (-1f64).powf(k - 1.0) * (-2.0 * k * k * lambda * lambda).exp();
        p += term;
        if term.abs() < 1e-12 {
            break;
        }
    }
    (d, p.clamp(0.0, 1.0))
}

/// Runs `holdline lab holb ARGS`.
pub fn main(args: Vec<String>) -> ExitCode {
    lab_main::<Args, f64>("holb", args, |a| a.out.clone(), run, |s| *s)
}

fn or<T: Clone>(given: &[T], quick: bool, q: &[T], full: &[T]) -> Vec<T> {
    if !given.is_empty() {
        given.to_vec()
    } else if quick {
        q.to_vec()
    } else {
        full.to_vec()
    }
}

/// Runs the experiment; returns its duration in seconds.
pub fn run(a: &Args) -> Result<f64> {
    let started = Instant::now();
    if a.replot {
        let r = read_json(&a.out.join("results.json"))?;
        let points: Vec<Point> =
            serde_json::from_value(r["points"].clone()).map_err(|e| LabError::Report {
                path: a.out.join("results.json"),
                reason: e.to_string(),
            })?;
        plots(&a.out, &points)?;
        return Ok(started.elapsed().as_secs_f64());
    }
    if !crate::runner::is_root() {
        return Err(LabError::Precondition(
            "holdline lab holb needs root (network namespaces and TUN devices for the emulated link)"
                .into(),
        ));
    }
    let exe = holdline_exe(a.exe.as_deref())?;
    let transports: Vec<Link> = or(
        &a.transports,
        a.quick,
        &["sctp-ordered".into(), "sctp-unordered".into()],
        &[
            "sctp-ordered".into(),
            "sctp-unordered".into(),
            "sctp-streams".into(),
            "tcp".into(),
            "udp".into(),
        ],
    )
    .iter()
    .map(|s| Link::parse(s))
    .collect::<Result<_>>()?;
    if !a.competing_tcp.is_empty() && !a.web_sessions.is_empty() {
        return Err(LabError::Precondition(
            "--competing-tcp and --web-sessions: one sweep at a time".into(),
        ));
    }
    let (sweep, xs): (Sweep, Vec<f64>) = if !a.competing_tcp.is_empty() {
        (
            Sweep::CompetingTcp,
            a.competing_tcp.iter().map(|&n| f64::from(n)).collect(),
        )
    } else if !a.web_sessions.is_empty() {
        (Sweep::WebSessions, a.web_sessions.clone())
    } else {
        (
            Sweep::Loss,
            or(&a.losses, a.quick, &[1.0, 2.0], &[0.5, 1.0, 2.0, 4.0, 8.0]),
        )
    };
    if sweep != Sweep::Loss && !a.losses.is_empty() {
        return Err(LabError::Precondition(
            "--losses with competing traffic: the drops are the router queue's".into(),
        ));
    }
    if xs.iter().any(|&x| !x.is_finite() || x < 0.0) {
        return Err(LabError::Precondition(
            "the swept values must be finite and not negative".into(),
        ));
    }
    let queues: Vec<Option<[u64; 2]>> = if !a.queues.is_empty() {
        a.queues
            .iter()
            .map(|q| parse_queue(q).map(Some))
            .collect::<Result<_>>()?
    } else if sweep == Sweep::Loss {
        vec![None]
    } else {
        vec![Some([10, 20]), Some([50, 60])]
    };
    let congestion_control = a
        .congestion_control
        .clone()
        .or_else(|| (sweep != Sweep::Loss).then(|| "reno".to_owned()));
    if a.bottleneck_kbit == 0 {
        return Err(LabError::Precondition("--bottleneck-kbit: above 0".into()));
    }
    let delays = or(&a.delays, a.quick, &[20.0], &[20.0, 60.0]);
    let rates = or(&a.rates, a.quick, &[40.0], &[20.0, 40.0]);
    let runs = a.runs.unwrap_or(if a.quick { 3 } else { 10 });
    let duration = a.duration.unwrap_or(if a.quick { 10.0 } else { 60.0 });
    if !(0.0..1.0).contains(&a.correlation) {
        return Err(LabError::Precondition(
            "--correlation: between 0 and 1 (exclusive)".into(),
        ));
    }
    let runs_dir = a.out.join("runs");
    std::fs::create_dir_all(&runs_dir)
        .map_err(|e| LabError::io(format!("create {}", runs_dir.display()), e))?;
    let total =
        delays.len() * rates.len() * queues.len() * transports.len() * xs.len() * runs as usize;
    eprintln!(
        "holb: {total} runs of {duration} s ({} configurations × {runs}); about {:.0} min",
        total / runs as usize,
        total as f64 * (duration + 6.0) / 60.0
    );
    let mut points = Vec::new();
    let mut done = 0;
    for &delay in &delays {
        for &rate in &rates {
            for &queue in &queues {
                for &t in &transports {
                    for &x in &xs {
                        let c = Conditions {
                            delay_ms: delay,
                            rate_cps: rate,
                            loss_pct: if sweep == Sweep::Loss { x } else { 0.0 },
                            correlation: a.correlation,
                            competing_tcp: if sweep == Sweep::CompetingTcp {
                                x as u32
                            } else {
                                0
                            },
                            web_sessions_per_s: if sweep == Sweep::WebSessions { x } else { 0.0 },
                            queue,
                            bottleneck_kbit: a.bottleneck_kbit,
                        };
                        let q = queue.map_or(String::new(), |[lo, hi]| format!("-q{lo}-{hi}"));
                        let label = format!(
                            "{delay} ms {rate} calls/s{} {} {x}{}",
                            queue.map_or(String::new(), |[lo, hi]| format!(" queue {lo}-{hi}")),
                            t.name(),
                            match sweep {
                                Sweep::Loss => "%",
                                Sweep::CompetingTcp => " TCP",
                                Sweep::WebSessions => " web/s",
                            }
                        );
                        let mut rs = Vec::with_capacity(runs as usize);
                        for r in 0..runs {
                            let tag =
                                format!("d{delay}-r{rate}{q}-{}-{}{x}-{r}", t.name(), sweep.tag());
                            let one = one_run(
                                &exe,
                                &runs_dir,
                                &tag,
                                t,
                                &c,
                                congestion_control.as_deref(),
                                a.topology,
                                r,
                                duration,
                            )?;
                            done += 1;
                            eprintln!(
                                "[{done}/{total}] {label}: run {r}: psd p95 {:.1} ms, {}/{} rang, link lost {}+{}, queue drops {}+{}, SCTP loss met {}",
                                one.psd_p95_ms,
                                one.rang,
                                one.calls,
                                one.lost[0],
                                one.lost[1],
                                one.queue_drops[0],
                                one.queue_drops[1],
                                one.effective_loss_pct()
                                    .map_or_else(|| "-".to_owned(), |l| format!("{l:.2}%"))
                            );
                            rs.push(one);
                        }
                        let p95: Vec<f64> = rs.iter().map(|r| r.psd_p95_ms).collect();
                        let (mean, ci) = mean_ci(&p95);
                        points.push(Point {
                            delay_ms: delay,
                            rate_cps: rate,
                            transport: t,
                            loss_pct: c.loss_pct,
                            sweep,
                            competing_tcp: c.competing_tcp,
                            web_sessions_per_s: c.web_sessions_per_s,
                            queue,
                            runs: rs,
                            p95_mean_ms: mean,
                            p95_ci95_ms: ci,
                        });
                    }
                }
            }
        }
    }
    write_results(a, &points, started)?;
    Ok(started.elapsed().as_secs_f64())
}

/// One run: a fresh link and fresh processes.
#[allow(clippy::too_many_arguments)]
fn one_run(
    exe: &Path,
    runs_dir: &Path,
    tag: &str,
    t: Link,
    c: &Conditions,
    congestion_control: Option<&str>,
    topology: Topology,
    run: u32,
    duration: f64,
) -> Result<Run> {
    let (delay_ms, rate) = (c.delay_ms, c.rate_cps);
    let link = c.link()?;
    let mut wan = Wan::with_link(delay_ms, link, 1 + u64::from(run))?;
    if let Some(cc) = congestion_control {
        wan.set_congestion_control(cc)?;
    }
    if topology == Topology::Direct {
        return direct_run(exe, runs_dir, tag, t, c, wan, run, duration);
    }
    let (a, b) = (wan.a.clone(), wan.b.clone());
    let config = runs_dir.join(format!("{tag}.toml"));
    std::fs::write(&config, t.sctp_toml())
        .map_err(|e| LabError::io(format!("write {}", config.display()), e))?;
    let serve = |site: &Site, listeners: &[String], route: String, who: &str| -> Result<Proc> {
        let mut args = vec![
            "serve".to_owned(),
            format!("--config={}", config.display()),
            "--workers=1".to_owned(),
            "--store=memory".to_owned(),
            "--metrics=127.0.0.1:9480".to_owned(),
            format!("--route=*={route}"),
        ];
        for l in listeners {
            args.push(format!("--listen={l}"));
        }
        let log = runs_dir.join(format!("{tag}-{who}.log"));
        let mut p = site.spawn(SERVER_CORE, exe, &args, &log)?;
        site.wait_bound(&mut p.0, 5060, Transport::Udp, who, &log)?;
        Ok(p)
    };
    // P2 first, so that P1's first INVITE finds it.
    let mut p2_listen = vec![format!("udp:{}:5060", b.ip())];
    let mut p1_listen = vec![format!("udp:{}:5060", a.ip())];
    if t != Link::Udp {
        p2_listen.push(t.listener(b.ip()));
        p1_listen.push(t.listener(a.ip()));
    }
    let p2 = serve(&b, &p2_listen, format!("udp:{}:5070", b.ip()), "p2")?;
    let p1 = serve(&a, &p1_listen, t.listener(b.ip()), "p1")?;
    let max_time = duration + 60.0;
    // The callee rings at once and answers a second later, as a person does: a 180 lost on
    // the link is recovered (over SCTP and TCP) long before the 200 could overtake it.
    let uas_log = runs_dir.join(format!("{tag}-uas.log"));
    let mut uas = b.spawn(
        GENERATOR_CORE,
        exe,
        &[
            "load".to_owned(),
            "uas".to_owned(),
            format!("--listen={}:5070", b.ip()),
            "--ring-delay-ms=0".to_owned(),
            "--answer-delay-ms=1000".to_owned(),
            format!("--max-time={max_time}"),
            "--progress=off".to_owned(),
        ],
        &uas_log,
    )?;
    b.wait_bound(
        &mut uas.0,
        5070,
        Transport::Udp,
        "holdline load uas",
        &uas_log,
    )?;
    // Warm-up: a few calls set the association (or connection) up before the measured
    // calls, as between two proxies that have been talking for a while; a lost INIT or SYN
    // would otherwise hold the first calls for seconds (RTO.Initial is 3 s).
    let warm_log = runs_dir.join(format!("{tag}-warmup.log"));
    let mut warm = a.spawn(
        GENERATOR_CORE,
        exe,
        &[
            "load".to_owned(),
            "uac".to_owned(),
            format!("--target={}:5060", a.ip()),
            "--rate=5".to_owned(),
            "--calls=5".to_owned(),
            "--max-time=40".to_owned(),
            "--progress=off".to_owned(),
        ],
        &warm_log,
    )?;
    wait_bounded(&mut warm.0, Duration::from_secs(45));
    // Competing traffic runs from the end of the warm-up through the measured calls (its
    // TCP flows reach their rate within a few round trips; web sessions arrive at random).
    let traffic = c.start_traffic(&wan, run)?;
    let mut uacs = start_uacs_at(
        &a,
        exe,
        runs_dir,
        tag,
        &[5060],
        Transport::Udp,
        &UacLoad {
            rate,
            duration_s: duration,
            drain_s: 10.0,
            goodput_window_s: 10.0,
            max_time_s: max_time,
            shares: Vec::new(),
        },
    )?;
    for u in &mut uacs {
        wait_bounded(&mut u.0, Duration::from_secs_f64(max_time + 5.0));
    }
    // Per proxy: (retransmissions, needless ones, SIP messages sent over SCTP).
    let retrans = |site: &Site| {
        let m = site.scrape(9480);
        (
            metric(&m, "holdline_sctp_t3_timeouts_total")
                + metric(&m, "holdline_sctp_fast_retransmits_total"),
            metric(&m, "holdline_sctp_duplicate_tsns_total"),
            metric_where(&m, "holdline_messages_out_total", &["transport=\"sctp\""]),
        )
    };
    let (ra, rb) = (retrans(&a), retrans(&b));
    let sctp_retransmissions = ra.0 + rb.0;
    let competing_bytes = traffic.map_or(0, |t| {
        let s = t.stop();
        s.bulk_bytes + s.web_bytes
    });
    drop(uacs);
    drop(uas);
    drop(p1);
    drop(p2);
    let stats = wan.stop();
    let report = read_json(&runs_dir.join(format!("{tag}-uac0.json")))?;
    Ok(Run {
        run,
        calls: num(&report, &["calls_attempted"]) as u64,
        rang: num(&report, &["latency", "psd", "count"]) as u64,
        completed: num(&report, &["calls_completed"]) as u64,
        psd_p95_ms: num(&report, &["latency", "psd", "p95_ms"]),
        psd_p50_ms: num(&report, &["latency", "psd", "p50_ms"]),
        lost: [stats.a_to_b.lost, stats.b_to_a.lost],
        offered: [stats.a_to_b.offered, stats.b_to_a.offered],
        sctp_retransmissions,
        sctp_needless: ra.1 + rb.1,
        sctp_messages: ra.2 + rb.2,
        invite_retransmissions: num(&report, &["retrans_invite"]) as u64,
        queue_drops: [
            stats.a_to_b.queue_drops + stats.a_to_b.random_drops,
            stats.b_to_a.queue_drops + stats.b_to_a.random_drops,
        ],
        competing_bytes,
    })
}

/// One run of the direct topology: `holdline load uac` in A speaks `t` across the link to
/// `holdline load uas` in B. The caller sets its association or connection up before its
/// first call (`--connect-first`, the warm-up of the proxies' topology); the retransmission
/// figures are the two generators' own.
#[allow(clippy::too_many_arguments)]
fn direct_run(
    exe: &Path,
    runs_dir: &Path,
    tag: &str,
    t: Link,
    c: &Conditions,
    mut wan: Wan,
    run: u32,
    duration: f64,
) -> Result<Run> {
    let (a, b) = (wan.a.clone(), wan.b.clone());
    let max_time = duration + 60.0;
    let uas_json = runs_dir.join(format!("{tag}-uas.json"));
    let uac_json = runs_dir.join(format!("{tag}-uac0.json"));
    let uas_log = runs_dir.join(format!("{tag}-uas.log"));
    let mut uas_args = vec![
        "load".to_owned(),
        "uas".to_owned(),
        format!("--listen={}:5070", b.ip()),
        "--ring-delay-ms=0".to_owned(),
        // Declined 5 s after ringing: late enough that a 486 sent unordered does not
        // overtake a 180 still being retransmitted (the call would ring unmeasured).
        "--answer-delay-ms=5000".to_owned(),
        "--responses=486:1".to_owned(),
        format!("--max-time={max_time}"),
        format!("--json={}", uas_json.display()),
        "--progress=off".to_owned(),
    ];
    uas_args.extend(t.load_args());
    let mut uas = b.spawn(GENERATOR_CORE, exe, &uas_args, &uas_log)?;
    let bound = if t == Link::Tcp {
        Transport::Tcp
    } else {
        Transport::Udp
    };
    b.wait_bound(&mut uas.0, 5070, bound, "holdline load uas", &uas_log)?;
    let traffic = c.start_traffic(&wan, run)?;
    let uac_log = runs_dir.join(format!("{tag}-uac0.log"));
    let mut uac_args = vec![
        "load".to_owned(),
        "uac".to_owned(),
        format!("--target={}:5070", b.ip()),
        format!("--listen={}:0", a.ip()),
        format!("--rate={rate}", rate = c.rate_cps),
        format!("--duration={duration}"),
        "--drain=10".to_owned(),
        format!("--max-time={max_time}"),
        format!("--seed={}", run + 1),
        "--connect-first=30".to_owned(),
        format!("--json={}", uac_json.display()),
        format!(
            "--csv={}",
            runs_dir.join(format!("{tag}-uac0.csv")).display()
        ),
        "--progress=off".to_owned(),
    ];
    uac_args.extend(t.load_args());
    let mut uac = a.spawn(GENERATOR_CORE, exe, &uac_args, &uac_log)?;
    wait_bounded(&mut uac.0, Duration::from_secs_f64(max_time + 35.0));
    let competing_bytes = traffic.map_or(0, |t| {
        let s = t.stop();
        s.bulk_bytes + s.web_bytes
    });
    drop(uac);
    // The UAS writes its report on SIGTERM (its SCTP counters).
    crate::generator::terminate(&uas.0);
    wait_bounded(&mut uas.0, Duration::from_secs(10));
    drop(uas);
    let stats = wan.stop();
    let report = read_json(&uac_json)?;
    let uas_report = read_json(&uas_json).ok();
    let sctp = |r: &serde_json::Value, k: &str| r["meta"]["sctp"][k].as_f64().unwrap_or(0.0);
    let both = |k: &str| sctp(&report, k) + uas_report.as_ref().map_or(0.0, |u| sctp(u, k));
    Ok(Run {
        run,
        calls: num(&report, &["calls_attempted"]) as u64,
        rang: num(&report, &["latency", "psd", "count"]) as u64,
        completed: num(&report, &["calls_completed"]) as u64,
        psd_p95_ms: num(&report, &["latency", "psd", "p95_ms"]),
        psd_p50_ms: num(&report, &["latency", "psd", "p50_ms"]),
        lost: [stats.a_to_b.lost, stats.b_to_a.lost],
        offered: [stats.a_to_b.offered, stats.b_to_a.offered],
        sctp_retransmissions: both("t3_timeouts") + both("fast_retransmits"),
        sctp_needless: both("duplicate_tsns"),
        sctp_messages: both("messages_sent"),
        invite_retransmissions: num(&report, &["retrans_invite"]) as u64,
        queue_drops: [
            stats.a_to_b.queue_drops + stats.a_to_b.random_drops,
            stats.b_to_a.queue_drops + stats.b_to_a.random_drops,
        ],
        competing_bytes,
    })
}

fn write_results(a: &Args, points: &[Point], started: Instant) -> Result<()> {
    // Ordered against unordered SCTP at each point of a series, and the paper's central
    // comparisons: ordered at X against unordered at 2X (1% with HOLB against 2% without;
    // one competing TCP transfer with HOLB against two without).
    let same_series = |p: &Point, q: &Point| {
        p.delay_ms == q.delay_ms
            && p.rate_cps == q.rate_cps
            && p.queue == q.queue
            && p.sweep == q.sweep
    };
    let p95s = |p: &Point| p.runs.iter().map(|r| r.psd_p95_ms).collect::<Vec<_>>();
    let mut comparisons = Vec::new();
    for p in points.iter().filter(|p| p.transport == Link::SctpOrdered) {
        let what = p.sweep.what();
        let pairs = [
            (format!("ordered vs unordered, same {what}"), p.x()),
            (
                format!("ordered at X vs unordered at 2X ({what})"),
                p.x() * 2.0,
            ),
        ];
        for (name, other) in pairs {
            if other == p.x() && name.contains("2X") {
                continue;
            }
            let q = points.iter().find(|q| {
                q.transport == Link::SctpUnordered && same_series(p, q) && q.x() == other
            });
            if let Some(q) = q {
                let (d, pv) = ks_test(&p95s(p), &p95s(q));
                comparisons.push(json!({
                    "comparison": name,
                    "sweep": p.sweep,
                    "delay_ms": p.delay_ms,
                    "rate_cps": p.rate_cps,
                    "queue": p.queue,
                    "ordered_x": p.x(),
                    "unordered_x": other,
                    "ordered_p95_mean_ms": p.p95_mean_ms,
                    "ordered_p95_ci95_ms": p.p95_ci95_ms,
                    "unordered_p95_mean_ms": q.p95_mean_ms,
                    "unordered_p95_ci95_ms": q.p95_ci95_ms,
                    "ks_d": d,
                    "ks_p": pv,
                    "ordered_higher_significant": pv < 0.05 && p.p95_mean_ms > q.p95_mean_ms,
                }));
            }
        }
    }
    let results = json!({
        "experiment": "holb",
        "command": crate::runner::command_line(),
        "started_unix_s": crate::runner::started_unix_s(started),
        "duration_s": started.elapsed().as_secs_f64(),
        "quick": a.quick,
        "topology": a.topology,
        "machine": machine(),
        "correlation": a.correlation,
        "bottleneck_kbit": a.bottleneck_kbit,
        "congestion_control": a.congestion_control.clone().or_else(|| {
            points
                .iter()
                .any(|p| p.sweep != Sweep::Loss)
                .then(|| "reno".to_owned())
        }),
        "points": points,
        "comparisons": comparisons,
        "paper": {
            "source": "seed 002, Sections VI-A to VI-C (Figs. 4-6, 8), and the abstract",
            "statements": [
                "1% loss with HOLB delays the 95th percentile of post-selection delay more than 2% loss without it",
                "20 ms one-way, 40 calls/s: a 95th percentile slightly below 200 ms corresponds to 2% loss with HOLB and 4% without (l. 184)",
                "without HOLB the 95th percentile stays very low below 2% loss and rises sharply from 2% to 3% (l. 157); not so with HOLB (l. 163)",
                "10-20 packet queue, 20 ms, 40 calls/s: about 200 ms corresponds to one competing TCP connection with HOLB and two without (l. 236); one with HOLB is statistically equivalent to two without in all scenarios but 60 ms / 40 calls/s (l. 238)",
                "50-60 packet queue: with one competing TCP connection HOLB is negligible; with 20 ms, two with HOLB are equivalent to six without (l. 252)",
                "web traffic: with the 50-60 queue delay stays at its empty-network minimum (l. 264); with the 10-20 queue HOLB's effect is significant in all scenarios (l. 268)"
            ],
        },
    });
    let text = serde_json::to_string_pretty(&results).map_err(|e| LabError::Report {
        path: a.out.join("results.json"),
        reason: e.to_string(),
    })?;
    std::fs::write(a.out.join("results.json"), text)
        .map_err(|e| LabError::io("write results.json", e))?;
    let mut csv = String::from(
        "delay_ms,rate_cps,queue,sweep,x,transport,loss_pct,runs,p95_mean_ms,p95_ci95_ms,p95_runs_ms,calls,rang,link_lost_ab,link_lost_ba,queue_drops_ab,queue_drops_ba,sctp_retransmissions,sctp_needless,sctp_effective_loss_pct,competing_bytes\n",
    );
    for p in points {
        let runs: Vec<String> = p
            .runs
            .iter()
            .map(|r| format!("{:.1}", r.psd_p95_ms))
            .collect();
        let sum = |f: &dyn Fn(&Run) -> f64| p.runs.iter().map(f).sum::<f64>();
        csv.push_str(&format!(
            "{},{},{},{},{},{},{},{},{:.2},{:.2},{},{},{},{},{},{},{},{},{},{},{}\n",
            p.delay_ms,
            p.rate_cps,
            p.queue
                .map_or(String::new(), |[lo, hi]| format!("{lo}-{hi}")),
            p.sweep.tag(),
            p.x(),
            p.transport.name(),
            p.loss_pct,
            p.runs.len(),
            p.p95_mean_ms,
            p.p95_ci95_ms,
            runs.join(" "),
            sum(&|r| r.calls as f64),
            sum(&|r| r.rang as f64),
            sum(&|r| r.lost[0] as f64),
            sum(&|r| r.lost[1] as f64),
            sum(&|r| r.queue_drops[0] as f64),
            sum(&|r| r.queue_drops[1] as f64),
            sum(&|r| r.sctp_retransmissions),
            sum(&|r| r.sctp_needless),
            {
                let m = sum(&|r| r.sctp_messages);
                if m > 0.0 {
                    format!(
                        "{:.3}",
                        100.0 * (sum(&|r| r.sctp_retransmissions) - sum(&|r| r.sctp_needless)) / m
                    )
                } else {
                    String::new()
                }
            },
            sum(&|r| r.competing_bytes as f64),
        ));
    }
    std::fs::write(a.out.join("points.csv"), csv)
        .map_err(|e| LabError::io("write points.csv", e))?;
    plots(&a.out, points)
}

/// One plot per (delay, rate, queue, sweep): the mean p95 with its 95% interval against what
/// the series varies, a line per transport.
fn plots(out: &Path, points: &[Point]) -> Result<()> {
    let mut keys: Vec<(f64, f64, Option<[u64; 2]>, Sweep)> = Vec::new();
    for p in points {
        let k = (p.delay_ms, p.rate_cps, p.queue, p.sweep);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for (d, r, queue, sweep) in keys {
        let mut series: Vec<plot::Series> = Vec::new();
        let mut intervals: Vec<plot::Intervals> = Vec::new();
        for t in [
            Link::SctpOrdered,
            Link::SctpUnordered,
            Link::SctpStreams,
            Link::Tcp,
            Link::Udp,
        ] {
            let mut pts: Vec<&Point> = points
                .iter()
                .filter(|p| {
                    p.delay_ms == d
                        && p.rate_cps == r
                        && p.queue == queue
                        && p.sweep == sweep
                        && p.transport == t
                })
                .collect();
            pts.sort_by(|x, y| x.x().total_cmp(&y.x()));
            if !pts.is_empty() {
                series.push((
                    t.name().to_owned(),
                    pts.iter().map(|p| (p.x(), p.p95_mean_ms)).collect(),
                ));
                // The paper's error bars: the 95% confidence interval of the mean.
                intervals.push(
                    pts.iter()
                        .map(|p| {
                            (
                                p.x(),
                                p.p95_mean_ms - p.p95_ci95_ms,
                                p.p95_mean_ms + p.p95_ci95_ms,
                            )
                        })
                        .collect(),
                );
            }
        }
        // Loss sweeps keep their historical names (p95-D-ms-R-cps).
        let (q_name, q_title) = queue.map_or((String::new(), String::new()), |[lo, hi]| {
            (format!("-q{lo}-{hi}"), format!(", queue {lo}-{hi}"))
        });
        let s_name = match sweep {
            Sweep::Loss => String::new(),
            other => format!("-{}", other.tag()),
        };
        plot::chart_with_intervals(
            out,
            &format!("p95-{d}-ms-{r}-cps{q_name}{s_name}"),
            &format!(
                "post-selection delay p95 (mean, 95% CI), {d} ms one-way, {r} calls/s{q_title}"
            ),
            sweep.axis(),
            "95th percentile (ms), mean of runs",
            &series,
            &intervals,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confidence_interval_of_known_samples() {
        let (m, ci) = mean_ci(&[10.0, 12.0, 14.0]);
        assert!((m - 12.0).abs() < 1e-12);
        // s = 2, n = 3: t(2) · 2/√3 = 4.303 · 1.1547
        assert!((ci - 4.303 * 2.0 / 3f64.sqrt()).abs() < 1e-9, "{ci}");
        assert_eq!(mean_ci(&[5.0]), (5.0, 0.0));
    }

    #[test]
    fn ks_separates_disjoint_samples_and_not_equal_ones() {
        let a: Vec<f64> = (0..10).map(f64::from).collect();
        let b: Vec<f64> = (100..110).map(f64::from).collect();
        let (d, p) = ks_test(&a, &b);
        assert_eq!(d, 1.0);
        assert!(p < 0.001, "{p}");
        let (d, p) = ks_test(&a, &a);
        assert_eq!(d, 0.0);
        assert!(p > 0.99, "{p}");
    }

    #[test]
    fn queues_parse_as_the_paper_names_them() {
        assert_eq!(parse_queue("10-20").expect("10-20"), [10, 20]);
        assert_eq!(parse_queue(" 50 - 60 ").expect("50-60"), [50, 60]);
        for bad in ["20-10", "10", "10-10", "a-20", "10-"] {
            assert!(parse_queue(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_queue_makes_a_drd_bottleneck_and_no_queue_none() {
        let mut c = Conditions {
            delay_ms: 20.0,
            rate_cps: 40.0,
            loss_pct: 0.0,
            correlation: 0.0,
            competing_tcp: 2,
            web_sessions_per_s: 0.0,
            queue: Some([10, 20]),
            bottleneck_kbit: 10_000,
        };
        let l = c.link().expect("link");
        let r = l.rate.expect("a bottleneck");
        assert_eq!(r.bits_per_second, 10_000_000);
        assert_eq!(r.queue_packets, Some(20));
        assert_eq!(
            r.drop,
            QueueDrop::Derivative {
                min_packets: 10,
                max_packets: 20,
                max_probability: 0.95
            }
        );
        assert!(r.queue_bytes >= 20 * 1_500, "{}", r.queue_bytes);
        assert_eq!(l.delay, Duration::from_millis(20));
        assert!(c.competing());
        c.queue = None;
        c.competing_tcp = 0;
        assert!(c.link().expect("link").rate.is_none());
        assert!(!c.competing());
    }

    #[test]
    fn points_read_from_older_results_are_loss_sweeps() {
        let p: Point = serde_json::from_value(json!({
            "delay_ms": 20.0, "rate_cps": 40.0, "transport": "sctp-ordered", "loss_pct": 2.0,
            "runs": [], "p95_mean_ms": 100.0, "p95_ci95_ms": 5.0
        }))
        .expect("an older point");
        assert_eq!(p.sweep, Sweep::Loss);
        assert_eq!(p.x(), 2.0);
        assert_eq!(p.queue, None);
    }

    #[test]
    fn transports_have_their_listeners_and_settings() {
        let ip = std::net::Ipv4Addr::new(10, 203, 0, 2);
        assert_eq!(Link::SctpUnordered.listener(ip), "sctp:10.203.0.2:9899");
        assert_eq!(Link::Tcp.listener(ip), "tcp:10.203.0.2:5060");
        assert!(Link::SctpUnordered.sctp_toml().contains("unordered = true"));
        assert!(Link::SctpOrdered.sctp_toml().contains("streams = 1"));
        assert!(Link::parse("quic").is_err());
    }
}
