//! `holdline netem`: the user-space network emulator (`holdline-netem`) from the command line —
//! `run` joins two network namespaces through an emulated link until stopped, `check`
//! measures the emulator's accuracy (configured against measured delay, loss, correlation,
//! rate and queue drops) and writes the table and plots of `docs/netem.md`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use clap::Subcommand;
use holdline_base::Duration as LinkDuration;
use holdline_lab::plot::{Series, chart};
use holdline_netem::probe::{self, ProbeConfig, ProbeReport};
use holdline_netem::traffic::{Traffic, TrafficConfig};
use holdline_netem::{Clock, DirectionStats, Emulator, EmulatorConfig, Topology};
use holdline_netmodel::{LinkConfig, Loss, QueueDrop, RateLimit};
use serde_json::json;

/// `holdline netem`.
#[derive(Debug, clap::Args)]
pub(crate) struct NetemArgs {
    #[command(subcommand)]
    command: NetemCommand,
}

#[derive(Debug, Subcommand)]
enum NetemCommand {
    /// Create two namespaces (or join two existing ones) through an emulated link, and
    /// forward until --duration ends or SIGINT/SIGTERM; prints the counters every second.
    Run(RunArgs),
    /// Measure the emulator's accuracy: configured against measured one-way delay, loss,
    /// loss correlation, rate and queue drops; accuracy.csv/json and plots in --out.
    Check(CheckArgs),
}

/// One direction's link, as options (both directions get the same link).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct LinkArgs {
    /// One-way delay, ms.
    #[arg(long, default_value_t = 0.0)]
    delay: f64,
    /// Extra delay drawn uniformly from [0, jitter] per packet, ms.
    #[arg(long, default_value_t = 0.0)]
    jitter: f64,
    /// Let jitter reorder packets (netem's behaviour); by default order is kept.
    #[arg(long)]
    reorder: bool,
    /// Packet loss, percent.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Lag-1 autocorrelation of losses, 0 to <1 (netem's "loss P% C"; 0 = independent).
    #[arg(long, default_value_t = 0.0)]
    correlation: f64,
    /// Bottleneck rate, kbit/s (none by default: packets are not serialised).
    #[arg(long)]
    rate_kbit: Option<f64>,
    /// Router queue bound, packets (with --rate-kbit).
    #[arg(long)]
    queue_packets: Option<u64>,
    /// Router queue bound, bytes (with --rate-kbit).
    #[arg(long, default_value_t = 1_000_000)]
    queue_bytes: u64,
    /// Derivative random drop: `LOW,HIGH` packets; the drop probability rises linearly
    /// from 0 at LOW to --drd-probability at HIGH (seed 002: 10,20 and 50,60).
    #[arg(long, value_delimiter = ',', num_args = 2)]
    drd: Option<Vec<u64>>,
    /// DRD's drop probability at the high threshold.
    #[arg(long, default_value_t = 0.95)]
    drd_probability: f64,
}

impl LinkArgs {
    fn to_config(&self) -> anyhow::Result<LinkConfig> {
        let ms = |v: f64, what: &str| -> anyhow::Result<LinkDuration> {
            anyhow::ensure!(
                v.is_finite() && v >= 0.0,
                "--{what} must be 0 or more milliseconds"
            );
            Ok(LinkDuration::from_nanos((v * 1e6) as u64))
        };
        let loss = Loss::correlated(self.loss / 100.0, self.correlation)
            .map_err(|e| anyhow::anyhow!("--loss/--correlation: {e}"))?;
        let rate = match self.rate_kbit {
            None => {
                anyhow::ensure!(
                    self.drd.is_none() && self.queue_packets.is_none(),
                    "--drd and --queue-packets need --rate-kbit (a queue forms only behind a bottleneck)"
                );
                None
            }
            Some(k) => {
                anyhow::ensure!(k.is_finite() && k > 0.0, "--rate-kbit must be positive");
                let mut r = RateLimit::new((k * 1000.0) as u64, self.queue_bytes);
                r.queue_packets = self.queue_packets;
                if let Some(d) = &self.drd {
                    r.drop = QueueDrop::Derivative {
                        min_packets: d[0],
                        max_packets: d[1],
                        max_probability: self.drd_probability,
                    };
                }
                Some(r)
            }
        };
        let cfg = LinkConfig {
            delay: ms(self.delay, "delay")?,
            jitter: ms(self.jitter, "jitter")?,
            loss,
            rate,
            // The emulator sees whole IP packets: nothing to add.
            overhead_bytes: 0,
            keep_order: !self.reorder,
        };
        cfg.validate().map_err(|e| anyhow::anyhow!("link: {e}"))?;
        Ok(cfg)
    }
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    #[command(flatten)]
    link: LinkArgs,
    /// Stop after this many seconds (default: run until SIGINT or SIGTERM).
    #[arg(long)]
    duration: Option<f64>,
    /// Join this existing namespace as side A (with --ns-b) instead of creating two.
    #[arg(long, requires = "ns_b")]
    ns_a: Option<String>,
    /// Join this existing namespace as side B.
    #[arg(long, requires = "ns_a")]
    ns_b: Option<String>,
    /// Seed of the links' random draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Competing long-lived TCP transfers from A to B (seed 002: 1, 2, 4, 6).
    #[arg(long, default_value_t = 0)]
    tcp_flows: u32,
    /// Competing web sessions per second, pages downloaded from A to B (seed 002: 1-3;
    /// three downloads of 85 KB in three objects, 10 s apart).
    #[arg(long, default_value_t = 0.0)]
    web_sessions: f64,
}

#[derive(Debug, clap::Args)]
struct CheckArgs {
    /// A short check (fewer probes per case; for tests).
    #[arg(long)]
    quick: bool,
    /// Output directory (created).
    #[arg(long, default_value = "netem-check")]
    out: PathBuf,
    /// Seed of the links' random draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Runs `holdline netem`.
pub(crate) fn main(args: NetemArgs) -> ExitCode {
    let r = match args.command {
        NetemCommand::Run(a) => run(&a),
        NetemCommand::Check(a) => check(&a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("holdline netem: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(args: &RunArgs) -> anyhow::Result<()> {
    let link = args.link.to_config()?;
    let topo = match (&args.ns_a, &args.ns_b) {
        (Some(a), Some(b)) => {
            Topology::attach(a, b, holdline_netem::ADDR_A, holdline_netem::ADDR_B)?
        }
        _ => Topology::create(&format!("hln{}", std::process::id()))?,
    };
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("install signal handler")?;
    }
    let emu = Emulator::start(
        &topo,
        &EmulatorConfig {
            a_to_b: link,
            b_to_a: link,
            seed: args.seed,
        },
        Clock::start(),
    )?;
    let traffic = Traffic::start(
        &topo,
        &TrafficConfig {
            long_lived: args.tcp_flows,
            web_sessions_per_s: args.web_sessions,
            seed: args.seed,
            ..TrafficConfig::default()
        },
    )?;
    println!(
        "netem: {} ({}) <-> {} ({}); run programs with `ip netns exec {} ...`",
        topo.ns_a, topo.addr_a, topo.ns_b, topo.addr_b, topo.ns_a
    );
    let start = std::time::Instant::now();
    let limit = args.duration.map(Duration::from_secs_f64);
    let mut next = Duration::from_secs(1);
    while !stop.load(Ordering::Relaxed) && limit.is_none_or(|l| start.elapsed() < l) {
        std::thread::sleep(Duration::from_millis(50));
        if start.elapsed() >= next {
            next += Duration::from_secs(1);
            let (ab, ba) = emu.stats();
            let t = traffic.stats();
            println!(
                "{:>5.0} s  a->b {}  b->a {}{}",
                start.elapsed().as_secs_f64(),
                line(&ab),
                line(&ba),
                if args.tcp_flows > 0 || args.web_sessions > 0.0 {
                    format!(
                        "  competing: bulk {} B, web {} objects ({} failed)",
                        t.bulk_bytes, t.web_objects, t.web_failures
                    )
                } else {
                    String::new()
                }
            );
            let _ = std::io::stdout().flush();
        }
    }
    traffic.stop();
    let (ab, ba) = emu.stop();
    println!("final  a->b {}  b->a {}", line(&ab), line(&ba));
    drop(topo);
    Ok(())
}

fn line(s: &DirectionStats) -> String {
    format!(
        "in {} out {} lost {} qdrop {} drd {} late {:.0}/{:.0} µs",
        s.offered,
        s.delivered,
        s.lost,
        s.queue_drops,
        s.random_drops,
        s.late_mean_us(),
        s.late_max_ns as f64 / 1e3
    )
}

/// One case of the accuracy check.
struct Case {
    name: &'static str,
    link: LinkArgs,
    probes: ProbeConfig,
}

fn link(delay: f64, jitter: f64, loss: f64, correlation: f64) -> LinkArgs {
    LinkArgs {
        delay,
        jitter,
        reorder: false,
        loss,
        correlation,
        rate_kbit: None,
        queue_packets: None,
        queue_bytes: 1_000_000,
        drd: None,
        drd_probability: 0.95,
    }
}

fn cases(quick: bool) -> Vec<Case> {
    // Delay cases: the SIP rates of seed 002 are 20-40 calls/s (72-144 kbit/s); probes at
    // 1,000/s of 500 B are well above them. Loss cases need many probes for a tight
    // confidence interval on a 1% rate.
    let (delay_n, loss_n) = if quick {
        (500, 5_000)
    } else {
        (10_000, 100_000)
    };
    let p = |rate: f64, count: u64, size: usize| ProbeConfig {
        rate,
        count,
        size,
        drain: Duration::from_millis(500),
    };
    let mut bottleneck = link(20.0, 0.0, 0.0, 0.0);
    bottleneck.rate_kbit = Some(2_000.0);
    bottleneck.queue_packets = Some(20);
    bottleneck.drd = Some(vec![10, 20]);
    vec![
        Case {
            name: "no delay (overhead)",
            link: link(0.0, 0.0, 0.0, 0.0),
            probes: p(1_000.0, delay_n, 500),
        },
        Case {
            name: "delay 20 ms",
            link: link(20.0, 0.0, 0.0, 0.0),
            probes: p(1_000.0, delay_n, 500),
        },
        Case {
            name: "delay 60 ms",
            link: link(60.0, 0.0, 0.0, 0.0),
            probes: p(1_000.0, delay_n, 500),
        },
        Case {
            // Reordering allowed (netem's jitter): each probe's delay is its own draw, so
            // the mean is delay + jitter/2. With order kept, a probe waits for the one
            // before it and the mean is higher by design.
            name: "delay 20 ms jitter 10 ms (reordering)",
            link: LinkArgs {
                reorder: true,
                ..link(20.0, 10.0, 0.0, 0.0)
            },
            probes: p(1_000.0, delay_n, 500),
        },
        Case {
            name: "loss 1%",
            link: link(20.0, 0.0, 1.0, 0.0),
            probes: p(5_000.0, loss_n, 200),
        },
        Case {
            name: "loss 4%",
            link: link(20.0, 0.0, 4.0, 0.0),
            probes: p(5_000.0, loss_n, 200),
        },
        Case {
            name: "loss 2% correlation 0.8",
            link: link(20.0, 0.0, 2.0, 0.8),
            probes: p(5_000.0, loss_n, 200),
        },
        Case {
            name: "2 Mbit/s bottleneck with DRD 10-20 offered 2.4 Mbit/s",
            link: bottleneck,
            // 500 B + 28 B at 568/s = 2.4 Mbit/s: 120% of the bottleneck.
            probes: p(568.0, if quick { 1_500 } else { 20_000 }, 500),
        },
    ]
}

/// Configured against measured, for one case.
#[derive(Debug, serde::Serialize)]
struct Row {
    case: String,
    probes_sent: u64,
    probes_received: u64,
    delay_ms: f64,
    jitter_ms: f64,
    measured_mean_ms: f64,
    measured_p50_ms: f64,
    measured_p99_ms: f64,
    measured_max_ms: f64,
    /// Expected mean one-way delay: delay + jitter/2 (+ the no-delay case's overhead is
    /// not subtracted).
    delay_error_pct: f64,
    loss_pct: f64,
    measured_loss_pct: f64,
    measured_loss_ci95_pct: f64,
    link_loss_pct: f64,
    correlation: f64,
    /// Lag-1 autocorrelation of the probes that did not arrive, the host's drops among them
    /// (which probes the host dropped is not known: a case with host drops is measured again).
    measured_correlation: f64,
    rate_kbit: f64,
    measured_kbit: f64,
    rate_error_pct: f64,
    queue_drops: u64,
    random_drops: u64,
    missing_probes: u64,
    /// Probes the link's loss model took.
    link_lost: u64,
    /// Probes dropped because the emulator already held `MAX_HELD`.
    overflow: u64,
    /// Probes the kernel refused from the emulator.
    write_errors: u64,
    /// Probes the host's kernels dropped (device queues and socket buffers), not the link;
    /// left out of `measured_loss_pct`.
    host_drops: u64,
    /// Of `host_drops`: at a TUN device's queue.
    host_device_drops: u64,
    /// Of `host_drops`: at the receiver's full socket buffer.
    host_socket_drops: u64,
    /// Measurements made of the case (more than one when the host dropped probes).
    attempts: u32,
    reordered: u64,
    late_mean_us: f64,
    late_max_us: f64,
    late_over_1ms: u64,
    /// CPU time of the A→B threads (reader and writer) per packet read, µs.
    cpu_us_per_packet: f64,
}

/// Measurements of one case at most, when the host drops probes.
const ATTEMPTS: u32 = 3;

fn check(args: &CheckArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.out).with_context(|| format!("create {}", args.out.display()))?;
    let prefix = format!("hlc{}", std::process::id());
    let all = cases(args.quick);
    let mut rows = Vec::with_capacity(all.len());
    for (i, case) in all.iter().enumerate() {
        print!("[{}/{}] {} ... ", i + 1, all.len(), case.name);
        let _ = std::io::stdout().flush();
        let cfg = case.link.to_config()?;
        let mut attempt = 0;
        let row = loop {
            attempt += 1;
            let topo = Topology::create(&prefix)?;
            let clock = Clock::start();
            let emu = Emulator::start(
                &topo,
                &EmulatorConfig {
                    a_to_b: cfg,
                    b_to_a: cfg,
                    seed: args.seed.wrapping_add(i as u64 * 2),
                },
                clock,
            )?;
            let report = probe::measure(&topo, &case.probes, clock)?;
            let (ab, _) = emu.stop();
            drop(topo);
            let row = row(case, &report, &ab, attempt);
            // The host, not the link, lost probes (a descheduled reader on a busy machine):
            // the case measured the machine. Measure it again, a bounded number of times.
            if row.host_drops == 0 || attempt == ATTEMPTS {
                break row;
            }
            print!("{} probes dropped by the host, again ... ", row.host_drops);
            let _ = std::io::stdout().flush();
        };
        println!(
            "delay {:.3} ms (p99 {:.3}), loss {:.2}%, {:.0} kbit/s{}",
            row.measured_mean_ms,
            row.measured_p99_ms,
            row.measured_loss_pct,
            row.measured_kbit,
            if row.host_drops > 0 {
                format!(" ({} more dropped by the host)", row.host_drops)
            } else {
                String::new()
            }
        );
        rows.push(row);
    }
    write_results(&args.out, &rows)?;
    println!("results: {}", args.out.display());
    Ok(())
}

fn row(case: &Case, r: &ProbeReport, ab: &DirectionStats, attempt: u32) -> Row {
    let l = &case.link;
    let expected_ms = l.delay + l.jitter / 2.0;
    let mean = r.mean_ms();
    let host_drops = r.host.total();
    let n = r.sent.max(1) as f64;
    let loss = r.loss();
    let measured_kbit = r.received_bps(case.probes.size) / 1e3;
    Row {
        case: case.name.to_owned(),
        probes_sent: r.sent,
        probes_received: r.received,
        delay_ms: l.delay,
        jitter_ms: l.jitter,
        measured_mean_ms: mean,
        measured_p50_ms: r.quantile_ms(0.5),
        measured_p99_ms: r.quantile_ms(0.99),
        measured_max_ms: r.quantile_ms(1.0),
        // Behind a bottleneck the delay includes queueing: no configured value to compare.
        delay_error_pct: if expected_ms > 0.0 && l.rate_kbit.is_none() {
            (mean - expected_ms) / expected_ms * 100.0
        } else {
            0.0
        },
        loss_pct: l.loss,
        measured_loss_pct: loss * 100.0,
        measured_loss_ci95_pct: 1.96 * (loss * (1.0 - loss) / n).sqrt() * 100.0,
        link_loss_pct: if ab.offered > 0 {
            ab.lost as f64 / ab.offered as f64 * 100.0
        } else {
            0.0
        },
        correlation: l.correlation,
        measured_correlation: r.loss_autocorrelation(),
        rate_kbit: l.rate_kbit.unwrap_or(0.0),
        measured_kbit,
        rate_error_pct: l.rate_kbit.map_or(0.0, |k| (measured_kbit - k) / k * 100.0),
        queue_drops: ab.queue_drops,
        random_drops: ab.random_drops,
        missing_probes: r.sent - r.received,
        link_lost: ab.lost,
        overflow: ab.overflow,
        write_errors: ab.write_errors,
        host_drops,
        host_device_drops: r.host.device_drops(),
        host_socket_drops: r.host.udp_rcvbuf_errors,
        attempts: attempt,
        reordered: r.reordered,
        late_mean_us: ab.late_mean_us(),
        late_max_us: ab.late_max_ns as f64 / 1e3,
        late_over_1ms: ab.late_over_1ms,
        cpu_us_per_packet: if ab.offered > 0 {
            ab.cpu_ns as f64 / ab.offered as f64 / 1e3
        } else {
            0.0
        },
    }
}

fn write_results(out: &Path, rows: &[Row]) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(&json!({ "cases": rows }))?;
    std::fs::write(out.join("accuracy.json"), json)
        .with_context(|| format!("write {}", out.join("accuracy.json").display()))?;
    let mut csv = String::from(
        "case,delay_ms,jitter_ms,measured_mean_ms,measured_p99_ms,delay_error_pct,loss_pct,measured_loss_pct,ci95_pct,link_loss_pct,correlation,measured_correlation,rate_kbit,measured_kbit,rate_error_pct,queue_drops,random_drops,missing_probes,host_drops,attempts,late_mean_us,late_max_us,cpu_us_per_packet\n",
    );
    for r in rows {
        csv.push_str(&format!(
            "\"{}\",{},{},{:.4},{:.4},{:.2},{},{:.3},{:.3},{:.3},{},{:.3},{},{:.1},{:.2},{},{},{},{},{},{:.1},{:.1},{:.2}\n",
            r.case,
            r.delay_ms,
            r.jitter_ms,
            r.measured_mean_ms,
            r.measured_p99_ms,
            r.delay_error_pct,
            r.loss_pct,
            r.measured_loss_pct,
            r.measured_loss_ci95_pct,
            r.link_loss_pct,
            r.correlation,
            r.measured_correlation,
            r.rate_kbit,
            r.measured_kbit,
            r.rate_error_pct,
            r.queue_drops,
            r.random_drops,
            r.missing_probes,
            r.host_drops,
            r.attempts,
            r.late_mean_us,
            r.late_max_us,
            r.cpu_us_per_packet
        ));
    }
    std::fs::write(out.join("accuracy.csv"), csv)
        .with_context(|| format!("write {}", out.join("accuracy.csv").display()))?;
    let by_x = |mut v: Vec<(f64, f64)>| {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    };
    let delay: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.loss_pct == 0.0 && r.rate_kbit == 0.0)
        .map(|r| (r.delay_ms + r.jitter_ms / 2.0, r.measured_mean_ms))
        .collect();
    let delay = by_x(delay);
    let ideal: Vec<(f64, f64)> = delay.iter().map(|&(x, _)| (x, x)).collect();
    let series: Vec<Series> = vec![
        ("netem: measured mean".to_owned(), delay),
        ("configured model".to_owned(), ideal),
    ];
    chart(
        out,
        "delay",
        "netem: configured against measured one-way delay",
        "configured mean one-way delay (ms)",
        "measured (ms)",
        &series,
    )?;
    let loss: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.loss_pct > 0.0)
        .map(|r| (r.loss_pct, r.measured_loss_pct))
        .collect();
    let loss = by_x(loss);
    let ideal: Vec<(f64, f64)> = loss.iter().map(|&(x, _)| (x, x)).collect();
    chart(
        out,
        "loss",
        "netem: configured against measured loss",
        "configured loss (%)",
        "measured loss (%)",
        &[
            ("netem: measured".to_owned(), loss),
            ("configured model".to_owned(), ideal),
        ],
    )?;
    Ok(())
}
