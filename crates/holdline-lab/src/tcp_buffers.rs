//! `holdline lab tcp-buffers`: seed 000's buffer-tuning sweeps (Sections VII and VIII-B,
//! l. 265-356, 385-399; Figs. 23-28 and 34-35) on the SE → RE test bed of
//! [`tcp_overload`](crate::tcp_overload): ICS + buffer minimization + smart forwarding, one
//! capacity-limited RE, each point with fresh processes.
//!
//! The three tuning parameters of the paper are the RE's receive buffer (`SO_RCVBUF` of its
//! listener: `[[tcp_buffers]] recv_buffer`), the RE's application buffer (how much it reads
//! ahead: `read_buffer`) and the SEs' send buffer (`SO_SNDBUF` of their connections to the
//! RE). Sizes are given as requested from the kernel; Linux doubles a request and keeps about
//! a quarter for bookkeeping, so the paper's "effective" size is about 1.5 × the request (its
//! 2 KB effective receive buffer is a request of 1,365 B, l. 93). "default" leaves the size to
//! the kernel (autotuned from `tcp_rmem`/`tcp_wmem`), or 64 KiB for the application buffer
//! (the paper's server's default).
//!
//! | sweep | paper | fixed | varied | loads |
//! | --- | --- | --- | --- | --- |
//! | `app` | Fig. 23 | SE send, RE receive minimized | RE application 2, 4, 16, 64 KiB | 2.5×, 12.5× |
//! | `recv` | Fig. 25 | SE send, RE application minimized | RE receive 1, 2, 4, 16 KiB, default | 2.5×, 12.5× |
//! | `recv-app-default` | Fig. 26(a), 27 | SE send minimized, RE application default | RE receive | 2.5×, 12.5× |
//! | `app-recv-default` | Fig. 26(b), 27 | SE send minimized, RE receive default | RE application | 2.5×, 12.5× |
//! | `se-send` | Fig. 28 | three RE settings | SE send minimized / default | 2.5×, 12.5× |
//! | `recv-10se` | Figs. 34-35 | 10 SEs, SE send and RE application default | RE receive 1-16 KiB, default | 12.5× |
//! | `recommended` | l. 356 | the paper's final setting vs holdline's defaults | 1 and 10 SEs | 2.5×, 12.5× |
//!
//! A configuration that several sweeps share is measured once. Per point: throughput,
//! PDD p50/p99, 200 OK retransmissions, 503s (the [`tcp_overload::Point`] fields). The
//! `recv-10se` sweep reports the smallest receive buffer at which the UAS retransmitted a
//! 200 OK (the paper: above 3,070 B effective). Output in `--out DIR`: `results.json`,
//! `points.csv` (one row per sweep and point), `summary.md` (each sweep beside the paper's
//! finding), plots `SWEEP-throughput`, `SWEEP-pdd` (SVG and PNG), and every process's files
//! under `runs/`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use serde::{Deserialize, Serialize};

use crate::error::{LabError, Result};
use crate::plot;
use crate::runner::{RunHeader, SweepArgs, check_tools, holdline_exe, lab_main};
use crate::tcp_overload::{
    Buffers, Point, Spec, capacity_phase, capacity_steps, nominal_capacity, progress, run_point,
};

/// The SEs' send buffer, minimized: the smallest request (the kernel raises it to its
/// floor, about 4.5 KB on Linux today; the paper's system allowed 2 KB, l. 198).
const SE_SEND_MIN: usize = 1024;
/// The RE's receive buffer, minimized: a couple of INVITEs (what `lab tcp-overload` uses).
const RE_RECV_MIN: usize = 1024;
/// The RE's application buffer, minimized: one message (`max_message_size` of the RE).
const RE_APP_MIN: usize = 2048;
/// The RE's application buffer by default: the paper's server's 64 KB.
const RE_APP_DEFAULT: usize = 65_536;
/// The paper's final RE receive buffer, 2 KB effective, as a request (l. 93, 356).
const RE_RECV_PAPER: usize = 1365;

/// The sweeps, in order.
const SWEEPS: [&str; 7] = [
    "app",
    "recv",
    "recv-app-default",
    "app-recv-default",
    "se-send",
    "recv-10se",
    "recommended",
];

/// `holdline lab tcp-buffers` options.
#[derive(Debug, Parser)]
#[command(
    name = "holdline lab tcp-buffers",
    about = "seed 000's buffer sweeps: RE receive and application buffers, SE send buffer, at 2.5x and 12.5x, and the 10-SE receive-buffer sweep"
)]
pub struct Args {
    /// The sweep's options (`--loads` replaces 2.5,12.5; `--mechanisms` is ignored: ICS).
    #[command(flatten)]
    pub sweep: SweepArgs,
    /// Results directory.
    #[arg(long, value_name = "DIR", default_value = "lab-results/tcp-buffers")]
    pub out: PathBuf,
    /// Skip the capacity phase and use this capacity, calls/s.
    #[arg(long, value_name = "CPS")]
    pub capacity: Option<f64>,
    /// Sweeps to run, comma-separated (default: all): app, recv, recv-app-default,
    /// app-recv-default, se-send, recv-10se, recommended.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub sweeps: Vec<String>,
    /// SEs of the `recv-10se` and `recommended` sweeps' many-SE points.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub many_ses: u32,
}

/// One configuration of the test bed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Setting {
    /// `ics`, or `default` (holdline's defaults, the `recommended` sweep's comparison).
    pub mechanism: String,
    /// SEs.
    pub ses: u32,
    /// Offered load / capacity.
    pub load_factor: f64,
    /// The buffers (`ics` only).
    pub buffers: Buffers,
}

/// A measured configuration and the sweeps it belongs to.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Measured {
    /// The sweeps that contain it.
    pub sweeps: Vec<String>,
    /// The configuration.
    pub setting: Setting,
    /// What it measured.
    pub point: Point,
}

/// Everything a run measured (`results.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    /// Experiment, command line, start time, quick mode, machine, transport.
    #[serde(flatten)]
    pub(crate) header: RunHeader,
    /// `--emulate-cost-us` of the RE.
    pub emulate_cost_us: u64,
    /// Nominal capacity from the emulated cost.
    pub nominal_capacity_cps: f64,
    /// Measured capacity.
    pub capacity_cps: f64,
    /// Capacity steps.
    pub capacity_steps: Vec<Point>,
    /// The kernel's default TCP receive and send buffers (`tcp_rmem`, `tcp_wmem` middle
    /// values), where "default" points are plotted.
    pub kernel_defaults: (usize, usize),
    /// Every configuration measured.
    pub points: Vec<Measured>,
    /// `recv-10se`: the smallest RE receive buffer (as requested; `None`: the default) at
    /// which the UAS retransmitted a 200 OK, if any did.
    pub retrans_from_recv_buffer: Option<Option<usize>>,
    /// Wall time of the run, s.
    pub elapsed_s: f64,
}

/// Entry point of `holdline lab tcp-buffers ARGS`.
pub fn main(args: Vec<String>) -> ExitCode {
    lab_main(
        "tcp-buffers",
        args,
        |a: &Args| a.out.clone(),
        run,
        |r: &Results| r.elapsed_s,
    )
}

fn ics(
    ses: u32,
    load_factor: f64,
    se_send: Option<usize>,
    re_recv: Option<usize>,
    re_app: usize,
) -> Setting {
    Setting {
        mechanism: "ics".into(),
        ses,
        load_factor,
        buffers: Buffers {
            re_recv,
            re_app,
            se_send,
        },
    }
}

/// The configurations of `sweep` (quick: the ends of each range).
fn settings(sweep: &str, loads: &[f64], many: u32, quick: bool) -> Vec<Setting> {
    let apps: &[usize] = if quick {
        &[RE_APP_MIN, RE_APP_DEFAULT]
    } else {
        &[RE_APP_MIN, 4096, 16_384, RE_APP_DEFAULT]
    };
    let recvs: &[Option<usize>] = if quick {
        &[Some(RE_RECV_MIN), None]
    } else {
        &[
            Some(RE_RECV_MIN),
            Some(2048),
            Some(4096),
            Some(16_384),
            None,
        ]
    };
    let recvs_10: &[Option<usize>] = if quick {
        &[Some(RE_RECV_MIN), Some(4096), None]
    } else {
        &[
            Some(RE_RECV_MIN),
            Some(RE_RECV_PAPER),
            Some(2048),
            Some(3072),
            Some(4096),
            Some(8192),
            Some(16_384),
            None,
        ]
    };
    let min = Some(SE_SEND_MIN);
    let mut out = Vec::new();
    for &f in loads {
        match sweep {
            "app" => out.extend(apps.iter().map(|&a| ics(1, f, min, Some(RE_RECV_MIN), a))),
            "recv" => out.extend(recvs.iter().map(|&r| ics(1, f, min, r, RE_APP_MIN))),
            "recv-app-default" => {
                out.extend(recvs.iter().map(|&r| ics(1, f, min, r, RE_APP_DEFAULT)));
            }
            "app-recv-default" => out.extend(apps.iter().map(|&a| ics(1, f, min, None, a))),
            "se-send" => {
                for se in [min, None] {
                    out.push(ics(1, f, se, Some(RE_RECV_MIN), RE_APP_MIN));
                    out.push(ics(1, f, se, Some(RE_RECV_MIN), RE_APP_DEFAULT));
                    out.push(ics(1, f, se, None, RE_APP_MIN));
                }
            }
            "recommended" => {
                for n in [1, many] {
                    out.push(ics(n, f, None, Some(RE_RECV_PAPER), RE_APP_DEFAULT));
                    out.push(Setting {
                        mechanism: "default".into(),
                        ses: n,
                        load_factor: f,
                        buffers: Buffers::MINIMIZED,
                    });
                }
            }
            _ => {}
        }
    }
    if sweep == "recv-10se" {
        let f = loads.iter().copied().fold(0.0f64, f64::max);
        out.extend(
            recvs_10
                .iter()
                .map(|&r| ics(many, f, None, r, RE_APP_DEFAULT)),
        );
    }
    out
}

/// A size for a name: `1365`, `64k`, `default`.
fn size(b: Option<usize>) -> String {
    match b {
        None => "default".into(),
        Some(n) if n >= 1024 && n % 1024 == 0 => format!("{}k", n / 1024),
        Some(n) => n.to_string(),
    }
}

fn tag(s: &Setting) -> String {
    if s.mechanism == "ics" {
        format!(
            "ics-{}se-{}x-send{}-recv{}-app{}",
            s.ses,
            s.load_factor,
            size(s.buffers.se_send),
            size(s.buffers.re_recv),
            size(Some(s.buffers.re_app))
        )
    } else {
        format!("{}-{}se-{}x", s.mechanism, s.ses, s.load_factor)
    }
}

/// The middle value of a `tcp_rmem`-like sysctl.
fn sysctl_middle(path: &str, fallback: usize) -> usize {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(fallback)
}

/// Runs the experiment and writes its results.
pub fn run(args: &Args) -> Result<Results> {
    if args.sweep.replot {
        let r: Results = crate::runner::read_results(&args.out)?;
        write(&args.out, &r)?;
        return Ok(r);
    }
    check_tools()?;
    let sweeps: Vec<String> = if args.sweeps.is_empty() {
        SWEEPS.iter().map(|s| s.to_string()).collect()
    } else {
        args.sweeps.clone()
    };
    if let Some(bad) = sweeps.iter().find(|s| !SWEEPS.contains(&s.as_str())) {
        return Err(LabError::Precondition(format!(
            "unknown sweep `{bad}` (known: {})",
            SWEEPS.join(", ")
        )));
    }
    if !(2..=64).contains(&args.many_ses) {
        return Err(LabError::Precondition(
            "--many-ses must be between 2 and 64".into(),
        ));
    }
    let started = Instant::now();
    let exe = holdline_exe(args.sweep.exe.as_deref())?;
    let runs = args.out.join("runs");
    std::fs::create_dir_all(&runs)
        .map_err(|e| LabError::io(format!("create {}", runs.display()), e))?;
    let quick = args.sweep.quick;
    let duration = args
        .sweep
        .duration
        .unwrap_or(if quick { 4.0 } else { 15.0 });
    let drain = if quick { 5.0 } else { 10.0 };
    let loads = if !args.sweep.loads.is_empty() {
        args.sweep.loads.clone()
    } else if quick {
        vec![12.5]
    } else {
        vec![2.5, 12.5]
    };

    // The configurations, each once, with the sweeps that contain it.
    let mut todo: Vec<(Vec<String>, Setting)> = Vec::new();
    for sweep in &sweeps {
        for s in settings(sweep, &loads, args.many_ses, quick) {
            match todo.iter_mut().find(|(_, t)| *t == s) {
                Some((names, _)) => {
                    if !names.contains(sweep) {
                        names.push(sweep.clone());
                    }
                }
                None => todo.push((vec![sweep.clone()], s)),
            }
        }
    }
    let steps = capacity_steps(&args.sweep, args.capacity);
    let total = steps.len() + todo.len();
    eprintln!(
        "tcp-buffers: RE {} µs per message, nominal capacity {:.0} calls/s; {} points of {duration:.0} s; sweeps {sweeps:?}",
        args.sweep.cost_us,
        nominal_capacity(&args.sweep),
        total
    );
    let mut done = 0;
    let (capacity, capacity_steps) = capacity_phase(
        &exe,
        &runs,
        &args.sweep,
        steps,
        args.capacity,
        (duration, drain),
        |p| {
            done += 1;
            progress(done, total, p, started, false);
        },
    )?;

    let mut points = Vec::new();
    for (names, s) in todo {
        let spec = Spec::new(
            &s.mechanism,
            s.ses,
            (capacity * s.load_factor).round(),
            &args.sweep,
            duration,
            drain,
            tag(&s),
        )
        .buffers(s.buffers);
        let p = run_point(&exe, &runs, &spec, capacity)?;
        done += 1;
        progress(done, total, &p, started, false);
        eprintln!(
            "        {}: SE send {}, RE receive {}, RE application {}",
            names.join(", "),
            size(s.buffers.se_send),
            size(s.buffers.re_recv),
            size(Some(s.buffers.re_app))
        );
        points.push(Measured {
            sweeps: names,
            setting: s,
            point: p,
        });
        crate::runner::write_partial(&args.out, "tcp-buffers", capacity, &points)?;
    }

    let results = Results {
        header: RunHeader::new("tcp-buffers", started, quick, "tcp"),
        emulate_cost_us: args.sweep.cost_us,
        nominal_capacity_cps: nominal_capacity(&args.sweep),
        capacity_cps: capacity,
        capacity_steps,
        kernel_defaults: (
            sysctl_middle("/proc/sys/net/ipv4/tcp_rmem", 131_072),
            sysctl_middle("/proc/sys/net/ipv4/tcp_wmem", 16_384),
        ),
        retrans_from_recv_buffer: retrans_from(&points),
        points,
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    write(&args.out, &results)?;
    let _ = std::fs::remove_file(args.out.join("results.partial.json"));
    Ok(results)
}

/// The receive-buffer order: sizes ascending, the default (autotuned, largest) last.
fn recv_order(b: Option<usize>) -> usize {
    b.unwrap_or(usize::MAX)
}

/// `recv-10se`: the smallest receive buffer whose point saw a 200 OK retransmitted.
fn retrans_from(points: &[Measured]) -> Option<Option<usize>> {
    let mut v: Vec<&Measured> = points
        .iter()
        .filter(|m| m.sweeps.iter().any(|s| s == "recv-10se"))
        .collect();
    v.sort_by_key(|m| recv_order(m.setting.buffers.re_recv));
    v.iter()
        .find(|m| m.point.retrans_200 > 0)
        .map(|m| m.setting.buffers.re_recv)
}

/// What the paper found for each sweep (the column beside ours in `summary.md`).
fn paper(sweep: &str) -> &'static str {
    match sweep {
        "app" => {
            "Fig. 23: throughput close to capacity at 150 and 750 calls/s (2.5x, 12.5x) for every application buffer; no 200 OK retransmission in any test"
        }
        "recv" => {
            "Fig. 25: with SE send and application buffers minimized, throughput does not change even with the 64 KB default receive buffer"
        }
        "recv-app-default" => {
            "Figs. 26(a), 27: throughput near capacity; PDD with a 2 KB receive buffer: 99.7% below 30 ms, none retransmitted; with the 64 KB default: about 30% below 480 ms, the rest 480-700 ms, many 200 OK retransmissions"
        }
        "app-recv-default" => {
            "Figs. 26(b), 27: throughput near capacity; PDD with a 2 KB application buffer mostly below 375 ms, none retransmitted; with the 64 KB default, about 70% of sessions 8-32 s and many 200 OK retransmissions"
        }
        "se-send" => {
            "Fig. 28: the SE send buffer makes no noticeable difference once smart forwarding is on; at 750 calls/s the unsent bytes a rejected INVITE saw were below 3,000 B 99.9% of the time (Fig. 29)"
        }
        "recv-10se" => {
            "Figs. 34-35: 10 SEs at 750 calls/s: too small a receive buffer splits messages; above a threshold throughput is flat and PDD grows with the buffer; 200 OK retransmissions above 3,070 B (effective, about 2,047 B requested)"
        }
        "recommended" => {
            "l. 356: recommended setting: RE receive buffer of a couple of INVITEs (2 KB), SE send and RE application buffers at their defaults"
        }
        _ => "",
    }
}

/// The x value of a point in its sweep's plot, KiB: the varied buffer (the kernel's default
/// where "default").
fn varied(sweep: &str, m: &Measured, defaults: (usize, usize)) -> Option<f64> {
    let b = &m.setting.buffers;
    let kib = |n: usize| n as f64 / 1024.0;
    match sweep {
        "app" | "app-recv-default" => Some(kib(b.re_app)),
        "recv" | "recv-app-default" | "recv-10se" => Some(kib(b.re_recv.unwrap_or(defaults.0))),
        "se-send" => Some(kib(b.se_send.unwrap_or(defaults.1))),
        _ => None,
    }
}

/// The series of a point in its sweep's plot.
fn series_name(sweep: &str, m: &Measured) -> String {
    let s = &m.setting;
    match sweep {
        "se-send" => format!(
            "{}x, RE receive {} / application {}",
            s.load_factor,
            size(s.buffers.re_recv),
            size(Some(s.buffers.re_app))
        ),
        "recv-10se" => format!("{} SEs, {}x", s.ses, s.load_factor),
        _ => format!("{}x", s.load_factor),
    }
}

fn write(out: &Path, r: &Results) -> Result<()> {
    let json = serde_json::to_string_pretty(r).map_err(|e| LabError::Report {
        path: out.join("results.json"),
        reason: e.to_string(),
    })?;
    std::fs::write(out.join("results.json"), json)
        .map_err(|e| LabError::io("write results.json", e))?;
    let mut csv = String::from(
        "sweep,mechanism,ses,load_factor,se_send,re_recv,re_app,offered_cps,capacity_cps,throughput_cps,throughput_ratio,pdd_p50_ms,pdd_p99_ms,retrans_200,calls_attempted,calls_ok,r503,r_other,timeouts,re_active_max,re_busy,tag\n",
    );
    let mut md = format!(
        "# tcp-buffers: seed 000's buffer sweeps\n\nCapacity {:.0} calls/s (RE {} µs per message). Sizes as requested from the kernel (Linux doubles them; the paper's effective size is about 1.5x the request); `default`: left to the kernel (`tcp_rmem`/`tcp_wmem` {} / {} B) or 64 KiB for the application buffer.\n",
        r.capacity_cps, r.emulate_cost_us, r.kernel_defaults.0, r.kernel_defaults.1
    );
    let sweeps: Vec<&str> = SWEEPS
        .iter()
        .copied()
        .filter(|s| r.points.iter().any(|m| m.sweeps.iter().any(|x| x == s)))
        .collect();
    for sweep in &sweeps {
        md.push_str(&format!(
            "\n## {sweep}\n\nPaper: {}\n\n| mechanism | SEs | load | SE send | RE receive | RE application | throughput (÷ capacity) | PDD p50 / p99 ms | 200 OK retrans | 503 |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
            paper(sweep)
        ));
        let mut rows: Vec<&Measured> = r
            .points
            .iter()
            .filter(|m| m.sweeps.iter().any(|x| x == sweep))
            .collect();
        rows.sort_by(|a, b| {
            a.setting
                .load_factor
                .total_cmp(&b.setting.load_factor)
                .then(a.setting.ses.cmp(&b.setting.ses))
                .then_with(|| {
                    varied(sweep, a, r.kernel_defaults)
                        .unwrap_or(0.0)
                        .total_cmp(&varied(sweep, b, r.kernel_defaults).unwrap_or(0.0))
                })
        });
        for m in &rows {
            let (s, p) = (&m.setting, &m.point);
            let ratio = p.throughput_cps / r.capacity_cps.max(1e-9);
            csv.push_str(&format!(
                "{sweep},{},{},{},{},{},{},{:.1},{:.1},{:.1},{:.3},{:.1},{:.1},{},{},{},{},{},{},{},{:.3},{}\n",
                s.mechanism,
                s.ses,
                s.load_factor,
                size(s.buffers.se_send),
                size(s.buffers.re_recv),
                s.buffers.re_app,
                p.offered_cps,
                p.capacity_cps,
                p.throughput_cps,
                ratio,
                p.pdd_p50_ms,
                p.pdd_p99_ms,
                p.retrans_200,
                p.calls_attempted,
                p.calls_ok,
                p.r503,
                p.r_other,
                p.timeouts,
                p.re_active_max,
                p.re_busy,
                p.tag,
            ));
            let (send, recv, app) = if s.mechanism == "ics" {
                (
                    size(s.buffers.se_send),
                    size(s.buffers.re_recv),
                    size(Some(s.buffers.re_app)),
                )
            } else {
                (
                    "holdline default".into(),
                    "holdline default".into(),
                    "holdline default".into(),
                )
            };
            md.push_str(&format!(
                "| {} | {} | {}x | {send} | {recv} | {app} | {:.1} ({:.2}) | {:.0} / {:.0} | {} | {} |\n",
                s.mechanism,
                s.ses,
                s.load_factor,
                p.throughput_cps,
                ratio,
                p.pdd_p50_ms,
                p.pdd_p99_ms,
                p.retrans_200,
                p.r503 + p.r_other,
            ));
        }
        if *sweep == "recv-10se" {
            md.push_str(&match r.retrans_from_recv_buffer {
                Some(Some(b)) => format!(
                    "\n200 OK retransmissions begin at a receive buffer of {b} B requested (about {:.0} B effective; the paper: above 3,070 B effective).\n",
                    b as f64 * 1.5
                ),
                Some(None) => "\n200 OK retransmissions only with the kernel's default receive buffer (the paper: above 3,070 B effective).\n".into(),
                None => "\nNo 200 OK was retransmitted at any receive buffer (the paper: above 3,070 B effective).\n".into(),
            });
        }
        // The plots of the sweeps with one varied buffer.
        let mut throughput: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        let mut pdd: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for m in &rows {
            let Some(x) = varied(sweep, m, r.kernel_defaults) else {
                continue;
            };
            let name = series_name(sweep, m);
            let push = |v: &mut Vec<(String, Vec<(f64, f64)>)>, y: f64| match v
                .iter_mut()
                .find(|(n, _)| *n == name)
            {
                Some((_, pts)) => pts.push((x, y)),
                None => v.push((name.clone(), vec![(x, y)])),
            };
            push(&mut throughput, m.point.throughput_cps);
            push(&mut pdd, m.point.pdd_p99_ms);
        }
        if !throughput.is_empty() {
            for (_, pts) in throughput.iter_mut().chain(pdd.iter_mut()) {
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
            let xs: Vec<f64> = throughput
                .iter()
                .flat_map(|(_, p)| p.iter().map(|q| q.0))
                .collect();
            let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = xs.iter().copied().fold(0.0f64, f64::max);
            throughput.push((
                "capacity".into(),
                vec![(lo, r.capacity_cps), (hi, r.capacity_cps)],
            ));
            let what = match *sweep {
                "app" | "app-recv-default" => "RE application buffer, KiB",
                "se-send" => "SE send buffer, KiB (requested; default: tcp_wmem)",
                _ => "RE receive buffer, KiB (requested; default: tcp_rmem)",
            };
            plot::chart(
                out,
                &format!("{sweep}-throughput"),
                &format!("{sweep}: throughput (ACK reached the UAS) vs buffer"),
                what,
                "calls/s",
                &throughput,
            )?;
            plot::chart(
                out,
                &format!("{sweep}-pdd"),
                &format!("{sweep}: PDD p99 vs buffer"),
                what,
                "PDD p99, ms",
                &pdd,
            )?;
        }
    }
    std::fs::write(out.join("points.csv"), csv).map_err(|e| LabError::io("write points.csv", e))?;
    std::fs::write(out.join("summary.md"), md).map_err(|e| LabError::io("write summary.md", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_share_configurations_and_hold_the_papers_values() {
        let app = settings("app", &[2.5, 12.5], 10, false);
        assert_eq!(app.len(), 8);
        assert!(
            app.iter().all(|s| s.buffers.se_send == Some(SE_SEND_MIN)
                && s.buffers.re_recv == Some(RE_RECV_MIN))
        );
        let recv = settings("recv", &[2.5, 12.5], 10, false);
        // Both minimized is in both sweeps: measured once.
        assert!(app.iter().any(|a| recv.contains(a)));
        let ten = settings("recv-10se", &[2.5, 12.5], 10, false);
        assert!(ten.iter().all(|s| s.ses == 10 && s.load_factor == 12.5));
        assert!(ten.iter().any(|s| s.buffers.re_recv == Some(RE_RECV_PAPER)));
        assert_eq!(ten.last().map(|s| s.buffers.re_recv), Some(None));
        let rec = settings("recommended", &[2.5], 10, true);
        assert_eq!(rec.len(), 4);
        assert!(rec.iter().any(|s| s.mechanism == "default" && s.ses == 10));
        assert!(settings("nope", &[1.0], 10, false).is_empty());
    }

    #[test]
    fn the_retransmission_threshold_is_the_smallest_buffer_that_saw_one() {
        let cap = |recv: Option<usize>, retrans: u64| {
            let mut p: Point = serde_json::from_value(serde_json::json!({
                "experiment": "tcp-overload", "mechanism": "ics", "ses": 10,
                "load_factor": 12.5, "offered_cps": 1.0, "capacity_cps": 1.0,
                "throughput_cps": 1.0, "completed_total": 1, "goodput_cps": 1.0,
                "goodput_steady_cps": 1.0, "pdd_p50_ms": 1.0, "pdd_p99_ms": 1.0,
                "retrans_200": 0, "retrans_invite": 0, "fairness": null,
                "per_se_cps": [], "calls_attempted": 1, "calls_ok": 1, "r503": 0,
                "timeouts": 0, "se_rejected": 0, "re_rejected": 0, "re_active_max": 0.0,
                "re_cpu_s": 0.0, "re_busy": 0.0
            }))
            .expect("a point");
            p.retrans_200 = retrans;
            Measured {
                sweeps: vec!["recv-10se".into()],
                setting: ics(10, 12.5, None, recv, RE_APP_DEFAULT),
                point: p,
            }
        };
        let pts = vec![
            cap(None, 90),
            cap(Some(4096), 3),
            cap(Some(1024), 0),
            cap(Some(2048), 0),
        ];
        assert_eq!(retrans_from(&pts), Some(Some(4096)));
        assert_eq!(retrans_from(&pts[2..]), None);
        assert_eq!(retrans_from(&pts[..1]), Some(None));
    }

    #[test]
    fn tags_name_the_buffers() {
        assert_eq!(
            tag(&ics(10, 12.5, None, Some(1365), 65_536)),
            "ics-10se-12.5x-senddefault-recv1365-app64k"
        );
    }
}
