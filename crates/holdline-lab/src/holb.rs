//! `holdline lab holb`: seed 002's head-of-line-blocking test bed (issue 19 item 3).
//!
//! ```text
//!  namespace A (10.203.0.1)                                      namespace B (10.203.0.2)
//!  UAC --UDP--> P1 ==[T]==> nt0 ══ holdline netem: delay d, loss p (corr. c) ══ nt0 ==[T]==> P2 --UDP--> UAS
//! ```
//!
//! Two `holdline serve` proxies (the paper's SIP applications A and B) carry every call
//! across an emulated link over transport T: SCTP ordered on one stream (head-of-line
//! blocking), SCTP unordered (none), SCTP ordered over 16 streams (a call's messages on one
//! stream), TCP, and UDP. The UAC and the UAS sit beside their proxy (one hop inside their
//! namespace); the UAS rings at once and answers a second later, so the post-selection delay
//! (first INVITE sent → first 180 received at the UAC) is two crossings of the link plus
//! whatever loss and blocking add. Five warm-up calls set the association or connection up
//! before the measured calls of each run.
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
use holdline_netmodel::{LinkConfig, Loss};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::{LabError, Result};
use crate::generator::{GENERATOR_CORE, num, read_json, wait_bounded};
use crate::plot;
use crate::runner::{Proc, UacLoad, holdline_exe, lab_main, machine, metric, start_uacs_at};
use crate::server::{SERVER_CORE, Transport};
use crate::wan::{Site, Wan};

/// `holdline lab holb` options.
#[derive(Debug, Clone, Parser)]
#[command(
    about = "seed 002's head-of-line-blocking test bed: P1 -> netem -> P2 over SCTP ordered/unordered, TCP, UDP"
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
    /// Run nothing: redraw the plots of `--out`'s `results.json`.
    #[arg(long)]
    pub replot: bool,
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
    /// INVITE retransmissions by the UAC (UDP between the UAC and P1: none expected).
    pub invite_retransmissions: u64,
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
    /// The runs.
    pub runs: Vec<Run>,
    /// Mean over the runs of their 95th percentile, ms.
    pub p95_mean_ms: f64,
    /// Half-width of its 95% confidence interval, ms.
    pub p95_ci95_ms: f64,
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
    let losses = or(&a.losses, a.quick, &[1.0, 2.0], &[0.5, 1.0, 2.0, 4.0, 8.0]);
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
    let total = delays.len() * rates.len() * transports.len() * losses.len() * runs as usize;
    eprintln!(
        "holb: {total} runs of {duration} s ({} configurations × {runs}); about {:.0} min",
        total / runs as usize,
        total as f64 * (duration + 6.0) / 60.0
    );
    let mut points = Vec::new();
    let mut done = 0;
    for &delay in &delays {
        for &rate in &rates {
            for &t in &transports {
                for &loss in &losses {
                    let mut rs = Vec::with_capacity(runs as usize);
                    for r in 0..runs {
                        let tag = format!("d{delay}-r{rate}-{}-l{loss}-{r}", t.name());
                        let one = one_run(
                            &exe,
                            &runs_dir,
                            &tag,
                            t,
                            delay,
                            rate,
                            loss,
                            a.correlation,
                            r,
                            duration,
                        )?;
                        done += 1;
                        eprintln!(
                            "[{done}/{total}] {delay} ms {rate} calls/s {} {loss}%: run {r}: psd p95 {:.1} ms, {}/{} rang, link lost {}+{}",
                            t.name(),
                            one.psd_p95_ms,
                            one.rang,
                            one.calls,
                            one.lost[0],
                            one.lost[1]
                        );
                        rs.push(one);
                    }
                    let p95: Vec<f64> = rs.iter().map(|r| r.psd_p95_ms).collect();
                    let (mean, ci) = mean_ci(&p95);
                    points.push(Point {
                        delay_ms: delay,
                        rate_cps: rate,
                        transport: t,
                        loss_pct: loss,
                        runs: rs,
                        p95_mean_ms: mean,
                        p95_ci95_ms: ci,
                    });
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
    delay_ms: f64,
    rate: f64,
    loss_pct: f64,
    correlation: f64,
    run: u32,
    duration: f64,
) -> Result<Run> {
    let loss = Loss::correlated(loss_pct / 100.0, correlation)
        .map_err(|e| LabError::Precondition(format!("loss {loss_pct}%: {e}")))?;
    let link = LinkConfig {
        delay: Duration::from_micros((delay_ms * 1e3).round() as u64),
        loss,
        overhead_bytes: 0,
        ..LinkConfig::default()
    };
    let mut wan = Wan::with_link(delay_ms, link, 1 + u64::from(run))?;
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
        },
    )?;
    for u in &mut uacs {
        wait_bounded(&mut u.0, Duration::from_secs_f64(max_time + 5.0));
    }
    let retrans = |site: &Site| {
        let m = site.scrape(9480);
        metric(&m, "holdline_sctp_t3_timeouts_total")
            + metric(&m, "holdline_sctp_fast_retransmits_total")
    };
    let sctp_retransmissions = retrans(&a) + retrans(&b);
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
        invite_retransmissions: num(&report, &["retrans_invite"]) as u64,
    })
}

fn write_results(a: &Args, points: &[Point], started: Instant) -> Result<()> {
    // Ordered against unordered SCTP at each (delay, rate, loss), and the paper's central
    // comparison: 1% with HOLB against 2% without.
    let find = |d: f64, r: f64, t: Link, l: f64| {
        points
            .iter()
            .find(|p| p.delay_ms == d && p.rate_cps == r && p.transport == t && p.loss_pct == l)
    };
    let p95s = |p: &Point| p.runs.iter().map(|r| r.psd_p95_ms).collect::<Vec<_>>();
    let mut comparisons = Vec::new();
    for p in points.iter().filter(|p| p.transport == Link::SctpOrdered) {
        let pairs = [
            ("ordered vs unordered, same loss", p.loss_pct),
            ("ordered at L vs unordered at 2L", p.loss_pct * 2.0),
        ];
        for (what, other_loss) in pairs {
            if let Some(q) = find(p.delay_ms, p.rate_cps, Link::SctpUnordered, other_loss) {
                let (d, pv) = ks_test(&p95s(p), &p95s(q));
                comparisons.push(json!({
                    "comparison": what,
                    "delay_ms": p.delay_ms,
                    "rate_cps": p.rate_cps,
                    "ordered_loss_pct": p.loss_pct,
                    "unordered_loss_pct": other_loss,
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
        "machine": machine(),
        "correlation": a.correlation,
        "points": points,
        "comparisons": comparisons,
        "paper": {
            "source": "seed 002, Section VI-A (Fig. 4), l. 184 and the abstract",
            "statements": [
                "1% loss with HOLB delays the 95th percentile of post-selection delay more than 2% loss without it",
                "20 ms one-way, 40 calls/s: a 95th percentile slightly below 200 ms corresponds to 2% loss with HOLB and 4% without (l. 184)",
                "a sudden increase of the 95th percentile occurs above 5% loss with HOLB (l. 228)"
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
        "delay_ms,rate_cps,transport,loss_pct,runs,p95_mean_ms,p95_ci95_ms,p95_runs_ms,calls,rang,link_lost_ab,link_lost_ba,sctp_retransmissions\n",
    );
    for p in points {
        let runs: Vec<String> = p
            .runs
            .iter()
            .map(|r| format!("{:.1}", r.psd_p95_ms))
            .collect();
        let sum = |f: &dyn Fn(&Run) -> f64| p.runs.iter().map(f).sum::<f64>();
        csv.push_str(&format!(
            "{},{},{},{},{},{:.2},{:.2},{},{},{},{},{},{}\n",
            p.delay_ms,
            p.rate_cps,
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
            sum(&|r| r.sctp_retransmissions),
        ));
    }
    std::fs::write(a.out.join("points.csv"), csv)
        .map_err(|e| LabError::io("write points.csv", e))?;
    plots(&a.out, points)
}

/// One plot per (delay, rate): the mean p95 against loss, a line per transport.
fn plots(out: &Path, points: &[Point]) -> Result<()> {
    let mut keys: Vec<(f64, f64)> = points.iter().map(|p| (p.delay_ms, p.rate_cps)).collect();
    keys.dedup();
    for (d, r) in keys {
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
                .filter(|p| p.delay_ms == d && p.rate_cps == r && p.transport == t)
                .collect();
            pts.sort_by(|x, y| x.loss_pct.total_cmp(&y.loss_pct));
            if !pts.is_empty() {
                series.push((
                    t.name().to_owned(),
                    pts.iter().map(|p| (p.loss_pct, p.p95_mean_ms)).collect(),
                ));
                // The paper's error bars: the 95% confidence interval of the mean.
                intervals.push(
                    pts.iter()
                        .map(|p| {
                            (
                                p.loss_pct,
                                p.p95_mean_ms - p.p95_ci95_ms,
                                p.p95_mean_ms + p.p95_ci95_ms,
                            )
                        })
                        .collect(),
                );
            }
        }
        plot::chart_with_intervals(
            out,
            &format!("p95-{d}-ms-{r}-cps"),
            &format!("post-selection delay p95 (mean, 95% CI), {d} ms one-way, {r} calls/s"),
            "packet loss each way (%)",
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
    fn transports_have_their_listeners_and_settings() {
        let ip = std::net::Ipv4Addr::new(10, 203, 0, 2);
        assert_eq!(Link::SctpUnordered.listener(ip), "sctp:10.203.0.2:9899");
        assert_eq!(Link::Tcp.listener(ip), "tcp:10.203.0.2:5060");
        assert!(Link::SctpUnordered.sctp_toml().contains("unordered = true"));
        assert!(Link::SctpOrdered.sctp_toml().contains("streams = 1"));
        assert!(Link::parse("quic").is_err());
    }
}
