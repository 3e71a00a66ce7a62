//! What the lab's experiments share: starting and stopping processes, scraping a server's
//! metrics, reading the generators' per-second CSV, describing the machine.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::error::{LabError, Result};
use crate::generator::{GENERATOR_CORE, spawn_pinned, spawn_pinned_in};
use crate::server::Transport;
use crate::wan::Site;

pub(crate) fn check_tools() -> Result<()> {
    require("taskset", "util-linux", "-V")
}

/// Fails with [`LabError::Missing`] (naming its Debian `package`) unless `program` can be
/// run (`program version_arg`).
pub(crate) fn require(
    program: &'static str,
    package: &'static str,
    version_arg: &str,
) -> Result<()> {
    let ok = Command::new(program)
        .arg(version_arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if ok {
        Ok(())
    } else {
        Err(LabError::Missing { program, package })
    }
}

/// Whether this process runs as root (cgroups, network namespaces).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions, cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// The fields every lab's `results.json` starts with (flattened into it).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct RunHeader {
    /// The experiment's name (`soak`, `storm`).
    pub experiment: String,
    /// The command line.
    pub command: String,
    /// Start time, seconds since the Unix epoch.
    pub started_unix_s: u64,
    /// Quick mode.
    pub quick: bool,
    /// Machine facts.
    pub machine: Value,
    /// `udp`, `tcp` or `tls`.
    pub transport: String,
}

impl RunHeader {
    /// The header of a run of `experiment` that started at `started` (now, less its
    /// elapsed time, as Unix seconds), with this process's command line and machine facts.
    pub(crate) fn new(
        experiment: &str,
        started: std::time::Instant,
        quick: bool,
        transport: &str,
    ) -> Self {
        Self {
            experiment: experiment.into(),
            command: command_line(),
            started_unix_s: started_unix_s(started),
            quick,
            machine: machine(),
            transport: transport.into(),
        }
    }
}

/// This process's command line, as one string (for `results.json`).
pub(crate) fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

/// When a run that started at `started` began, as Unix seconds (now less its elapsed time).
pub(crate) fn started_unix_s(started: std::time::Instant) -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        .saturating_sub(started.elapsed().as_secs())
}

/// Whether SIPp (Debian's `sip-tester`) runs here.
pub(crate) fn sipp_available() -> bool {
    Command::new("sipp")
        .arg("-v")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Runs `point` again (up to three times in all) when one of its processes could not bind
/// the port picked for it: ports are picked outside the ephemeral range
/// ([`crate::ports`]), but another picker on the machine can still take one first.
pub(crate) fn with_fresh_ports<T>(
    experiment: &str,
    tag: &str,
    mut point: impl FnMut() -> Result<T>,
) -> Result<T> {
    let mut tries = 0;
    loop {
        tries += 1;
        match point() {
            Err(LabError::Process(e)) if tries < 3 && e.contains("in use") => {
                eprintln!("{experiment}: {tag}: a port was taken meanwhile; again");
            }
            Err(LabError::PortTaken { port, .. }) if tries < 3 => {
                eprintln!("{experiment}: {tag}: port {port} was taken meanwhile; again");
            }
            other => return other,
        }
    }
}

/// The options every `holdline lab` sweep over load takes (flattened into each experiment's
/// own `Args`).
#[derive(Debug, clap::Args)]
pub struct SweepArgs {
    /// Fewer, shorter points (under 5 minutes).
    #[arg(long)]
    pub quick: bool,
    /// CPU work added to every message the capacity-limited server handles, µs (sets its
    /// capacity).
    #[arg(long, value_name = "US", default_value_t = 1000)]
    pub cost_us: u64,
    /// CPU work added to a rejected INVITE (and the ACK of its 503) instead, µs; default 0:
    /// a rejection costs its real work only (see docs/overload.md).
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub reject_cost_us: u64,
    /// Seconds of offered load per point (default: the experiment's, shorter with --quick).
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,
    /// Load factors (multiples of the measured capacity), comma-separated.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub loads: Vec<f64>,
    /// Mechanisms, comma-separated (default: all of the experiment's, but tcp-overload's
    /// `poll`); in udp-overload `ALG+invite-socket` adds `--udp-invite-socket on`.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub mechanisms: Vec<String>,
    /// Redraw the plots and the CSV of the results already in `--out` (no measurement).
    #[arg(long)]
    pub replot: bool,
    /// The `holdline` binary to run (default: this one).
    #[arg(long, value_name = "PATH")]
    pub exe: Option<PathBuf>,
}

/// A child process stopped (SIGKILL) and reaped when dropped.
pub(crate) struct Proc(pub(crate) Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn spawn(core: &str, exe: &Path, args: &[String], log: &Path) -> Result<Proc> {
    spawn_pinned(core, exe, args, log).map(Proc)
}

/// [`spawn`] inside a CPU cgroup (its `cgroup.procs` file) when one is given.
pub(crate) fn spawn_in(
    core: &str,
    cgroup_procs: Option<&Path>,
    exe: &Path,
    args: &[String],
    log: &Path,
) -> Result<Proc> {
    spawn_pinned_in(core, cgroup_procs, exe, args, log).map(Proc)
}

/// `holdline load uas` on the generator core, listening on 127.0.0.1:`port` over
/// `transport`, writing `TAG-uas.json` (and `TAG-uas.csv` with `csv`) and its log
/// `TAG-uas.log` in `runs`, stopping by itself after `max_time_s`; returned once it listens.
pub(crate) fn start_uas(
    exe: &Path,
    runs: &Path,
    tag: &str,
    port: u16,
    transport: Transport,
    csv: bool,
    max_time_s: f64,
) -> Result<Proc> {
    start_uas_at(
        &Site::loopback(),
        exe,
        runs,
        tag,
        port,
        transport,
        csv,
        max_time_s,
        &[],
    )
}

/// [`start_uas`] at `site`: in its namespace, listening on its address, with `extra`
/// arguments for `holdline load uas` (e.g. `--answer-delay-ms=3000`: callees that ring).
#[allow(clippy::too_many_arguments)]
pub(crate) fn start_uas_at(
    site: &Site,
    exe: &Path,
    runs: &Path,
    tag: &str,
    port: u16,
    transport: Transport,
    csv: bool,
    max_time_s: f64,
    extra: &[String],
) -> Result<Proc> {
    let log = runs.join(format!("{tag}-uas.log"));
    let mut args = vec![
        "load".to_owned(),
        "uas".to_owned(),
        format!("--transport={}", transport.name()),
        format!("--listen={}:{port}", site.ip()),
        format!("--json={}", runs.join(format!("{tag}-uas.json")).display()),
        format!("--max-time={max_time_s}"),
        "--progress=off".to_owned(),
    ];
    args.extend(extra.iter().cloned());
    if csv {
        args.push(format!(
            "--csv={}",
            runs.join(format!("{tag}-uas.csv")).display()
        ));
    }
    if transport == Transport::Tls {
        args.extend(crate::pki::Pki::in_dir(runs)?.uas_args());
    }
    let mut uas = site.spawn(GENERATOR_CORE, exe, &args, &log)?;
    site.wait_bound(&mut uas.0, port, transport, "holdline load uas", &log)?;
    Ok(uas)
}

/// The load a set of UACs offers together (see [`start_uacs`]).
pub(crate) struct UacLoad {
    /// Calls per second, all UACs together (split evenly, or by `shares`).
    pub rate: f64,
    /// Relative shares of `rate` per UAC, in target order (empty: even; seed 000's unequal
    /// load is `[3, 2, 1]`).
    pub shares: Vec<f64>,
    /// Seconds of load.
    pub duration_s: f64,
    /// Seconds of drain after it.
    pub drain_s: f64,
    /// A call counts as goodput when its 200 OK came within this.
    pub goodput_window_s: f64,
    /// Each UAC stops by itself after this.
    pub max_time_s: f64,
}

/// One `holdline load uac` per port in `targets` on the generator core, over `transport`,
/// offering an even share of `load` each (seeds 1, 2, …); reports `TAG-uacI.json` and
/// `TAG-uacI.csv`, logs `TAG-uacI.log` in `runs`.
pub(crate) fn start_uacs(
    exe: &Path,
    runs: &Path,
    tag: &str,
    targets: &[u16],
    transport: Transport,
    load: &UacLoad,
) -> Result<Vec<Proc>> {
    start_uacs_at(&Site::loopback(), exe, runs, tag, targets, transport, load)
}

/// [`start_uacs`] at `site`: in its namespace, calling the targets' ports at its address.
pub(crate) fn start_uacs_at(
    site: &Site,
    exe: &Path,
    runs: &Path,
    tag: &str,
    targets: &[u16],
    transport: Transport,
    load: &UacLoad,
) -> Result<Vec<Proc>> {
    let weights: Vec<f64> = if load.shares.len() == targets.len() {
        load.shares.clone()
    } else {
        vec![1.0; targets.len()]
    };
    let total: f64 = weights.iter().sum::<f64>().max(1e-9);
    let mut uacs = Vec::with_capacity(targets.len());
    for (i, port) in targets.iter().enumerate() {
        let share = load.rate * weights[i] / total;
        let args: Vec<String> = vec![
            "load".into(),
            "uac".into(),
            format!("--transport={}", transport.name()),
            format!("--target={}:{port}", site.ip()),
            format!("--rate={share}"),
            format!("--duration={}", load.duration_s),
            format!("--drain={}", load.drain_s),
            format!("--goodput-window={}", load.goodput_window_s),
            // The steady phase of every lab: the last three quarters of the load ([`steady`]).
            format!("--steady-after={}", load.duration_s / 4.0),
            format!("--max-time={}", load.max_time_s),
            format!("--seed={}", i + 1),
            format!(
                "--json={}",
                runs.join(format!("{tag}-uac{i}.json")).display()
            ),
            format!("--csv={}", runs.join(format!("{tag}-uac{i}.csv")).display()),
            "--progress=off".into(),
        ];
        let log = runs.join(format!("{tag}-uac{i}.log"));
        let mut args = args;
        if transport == Transport::Tls {
            args.push(crate::pki::Pki::in_dir(runs)?.uac_arg());
        }
        uacs.push(site.spawn(GENERATOR_CORE, exe, &args, &log)?);
    }
    Ok(uacs)
}

/// `GET /metrics` (bounded).
pub(crate) fn scrape(port: u16) -> String {
    let Ok(mut s) = TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(2),
    ) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}

/// `GET /metrics` until every worker's protocol-core lines are fresh
/// (`holdline_core_metrics_age_seconds` under the server's 250 ms wait: a worker busy past
/// it answers with old lines), at most until `limit`; the last answer either way (its age
/// lines say whether it is fresh).
pub(crate) fn scrape_fresh(port: u16, limit: Duration) -> String {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let text = scrape(port);
        let fresh = text
            .lines()
            .filter(|l| l.starts_with("holdline_core_metrics_age_seconds{"))
            .all(|l| {
                l.rsplit_once(' ')
                    .and_then(|(_, v)| v.parse::<f64>().ok())
                    .is_some_and(|age| age < 0.25)
            });
        if (fresh && !text.is_empty()) || std::time::Instant::now() >= deadline {
            return text;
        }
    }
}

/// Sum of the samples of `name` (all labels) in a server's Prometheus text.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let rest = series.strip_prefix(name)?;
            (rest.is_empty() || rest.starts_with('{'))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// Sum of the samples of `name` whose labels contain every one of `labels` (each written as
/// in the exposition, e.g. `reason="occupancy"`), over all other labels (the workers).
pub fn metric_where(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let rest = series.strip_prefix(name)?;
            let matches = (rest.is_empty() && labels.is_empty())
                || (rest.starts_with('{') && labels.iter().all(|want| rest.contains(want)));
            matches.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// The mean wall time, in µs, the server's worker spent on each message that took at least
/// `floor_s` (its `holdline_processing_seconds` histogram, every worker summed): with an
/// emulated cost per message above `floor_s`, the cost the server really paid — the emulated
/// work is a spin on the wall clock, so whatever else runs on the machine stretches it — which
/// is what `holdline sim agree` gives its model. `floor_s` must be one of the histogram's
/// bucket bounds (e.g. 0.0005); `None` when the text has no such histogram or no message
/// reached the floor.
pub(crate) fn processing_us_above(text: &str, floor_s: f64) -> Option<f64> {
    let name = "holdline_processing_seconds";
    let sum = metric(text, &format!("{name}_sum"));
    let count = metric(text, &format!("{name}_count"));
    let le = format!("le=\"{floor_s:.6}\"");
    let below = metric_where(text, &format!("{name}_bucket"), &[le.as_str()]);
    let above = count - below;
    (above >= 1.0 && sum > 0.0).then(|| sum / above * 1e6)
}

/// The median of `v` (the mean of the middle two for an even count; 0 when empty).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// `(t_s, column)` of every row of a `holdline load` per-second CSV (empty when the file or
/// the column is missing).
pub(crate) fn column(csv: &Path, column: &str) -> Vec<(f64, f64)> {
    let Ok(text) = std::fs::read_to_string(csv) else {
        return Vec::new();
    };
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let cols: Vec<&str> = header.split(',').collect();
    let (Some(t), Some(c)) = (
        cols.iter().position(|h| *h == "t_s"),
        cols.iter().position(|h| *h == column),
    ) else {
        return Vec::new();
    };
    lines
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Some((f.get(t)?.parse().ok()?, f.get(c)?.parse().ok()?))
        })
        .collect()
}

/// The mean per second of `column` in a `holdline load` CSV over rows with `t_s` in
/// `(duration / 4, duration]` (0 when the file or column is missing).
pub(crate) fn steady(csv: &Path, name: &str, duration: f64) -> f64 {
    let vals: Vec<f64> = column(csv, name)
        .into_iter()
        .filter(|(t, _)| *t > duration / 4.0 && *t <= duration)
        .map(|(_, v)| v)
        .collect();
    if vals.is_empty() {
        0.0
    } else {
        vals.iter().sum::<f64>() / vals.len() as f64
    }
}

/// The steady goodput of the `m` UACs [`start_uacs`] started with `tag` (the sum of their
/// [`steady`] `goodput`).
pub(crate) fn uacs_steady_goodput(runs: &Path, tag: &str, m: usize, duration: f64) -> f64 {
    (0..m)
        .map(|i| steady(&runs.join(format!("{tag}-uac{i}.csv")), "goodput", duration))
        .sum()
}

/// The sum of `column` in a `holdline load` CSV over the rows (one per second of that
/// process) whose end `t_s` lies in `(from + 0.5, to + 0.5]`: what it counted from about
/// `from` to about `to` seconds after it started (0 when the file or column is missing).
pub(crate) fn window_sum(csv: &Path, name: &str, from: f64, to: f64) -> f64 {
    sum_in(&column(csv, name), from, to)
}

/// [`window_sum`] over samples already read (`(t_s, value)` of [`column`]).
pub(crate) fn sum_in(samples: &[(f64, f64)], from: f64, to: f64) -> f64 {
    samples
        .iter()
        .filter(|(t, _)| *t > from + 0.5 && *t <= to + 0.5)
        .map(|(_, v)| v)
        .sum()
}

/// A latency summary of a `holdline load` report (`latency.pdd`, …) as (delay ms, % of
/// calls) points from its percentiles, for a CDF plot.
pub(crate) fn cdf_points(summary: &Value) -> Vec<(f64, f64)> {
    [
        ("min_ms", 0.0),
        ("p50_ms", 0.5),
        ("p90_ms", 0.9),
        ("p95_ms", 0.95),
        ("p99_ms", 0.99),
        ("p999_ms", 0.999),
        ("max_ms", 1.0),
    ]
    .iter()
    .map(|(k, q)| (crate::generator::num(summary, &[k]), q * 100.0))
    .collect()
}

/// The `holdline` binary to run: `exe`, or this process's own.
pub(crate) fn holdline_exe(exe: Option<&Path>) -> Result<PathBuf> {
    match exe {
        Some(p) => Ok(p.to_owned()),
        None => std::env::current_exe().map_err(|e| LabError::io("current_exe", e)),
    }
}

/// Parses an experiment's arguments (`NAME` is its command for messages), runs it and says
/// where its results are; the exit code of `holdline lab NAME`: 0 done (or `--help`), 2 bad
/// arguments, 1 failed.
pub(crate) fn lab_main<A: clap::Parser, R>(
    name: &str,
    args: Vec<String>,
    out: impl Fn(&A) -> PathBuf,
    run: impl Fn(&A) -> Result<R>,
    elapsed: impl Fn(&R) -> f64,
) -> std::process::ExitCode {
    use std::process::ExitCode;
    let parsed =
        match A::try_parse_from(std::iter::once(format!("holdline lab {name}")).chain(args)) {
            Ok(a) => a,
            Err(e) => {
                let _ = e.print();
                return if e.use_stderr() {
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                };
            }
        };
    match run(&parsed) {
        Ok(r) => {
            eprintln!(
                "{name}: done in {:.0} s; results in {}",
                elapsed(&r),
                out(&parsed).display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("holdline lab {name}: {e}");
            ExitCode::FAILURE
        }
    }
}

pub(crate) fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let rmem = std::fs::read_to_string("/proc/sys/net/core/rmem_default")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    serde_json::json!({
        "cpu": cpu,
        "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "kernel": kernel,
        "udp_rmem_default": rmem,
    })
}

/// An experiment's `DIR/results.json`, as it wrote it (for `--replot`).
pub(crate) fn read_results<R: serde::de::DeserializeOwned>(out: &Path) -> Result<R> {
    let path = out.join("results.json");
    serde_json::from_value(crate::generator::read_json(&path)?).map_err(|e| LabError::Report {
        path: path.clone(),
        reason: e.to_string(),
    })
}

/// Writes `results.partial.json` in `out`: what an experiment measured so far, so that it
/// survives an interrupted run.
pub(crate) fn write_partial<T: serde::Serialize>(
    out: &Path,
    experiment: &str,
    capacity_cps: f64,
    points: &[T],
) -> Result<()> {
    let partial = serde_json::json!({
        "experiment": experiment,
        "partial": true,
        "capacity_cps": capacity_cps,
        "points": points,
    });
    std::fs::write(
        out.join("results.partial.json"),
        serde_json::to_string_pretty(&partial).unwrap_or_default(),
    )
    .map_err(|e| LabError::io("write results.partial.json", e))
}

#[cfg(test)]
mod tests {
    use super::processing_us_above;

    #[test]
    fn processing_cost_counts_only_the_messages_above_the_floor() {
        // Two workers: 10 messages of 1.2 ms and 5 fast ones (0.1 ms) on worker 0, 10 of
        // 1.0 ms on worker 1: (10 × 1.2 + 0.5 + 10 × 1.0) ms over the 20 slow messages.
        let text = "\
holdline_processing_seconds_bucket{worker=\"0\",le=\"0.000100\"} 5
holdline_processing_seconds_bucket{worker=\"0\",le=\"0.000500\"} 5
holdline_processing_seconds_bucket{worker=\"0\",le=\"+Inf\"} 15
holdline_processing_seconds_sum{worker=\"0\"} 0.0125
holdline_processing_seconds_count{worker=\"0\"} 15
holdline_processing_seconds_bucket{worker=\"1\",le=\"0.000500\"} 0
holdline_processing_seconds_bucket{worker=\"1\",le=\"+Inf\"} 10
holdline_processing_seconds_sum{worker=\"1\"} 0.0100
holdline_processing_seconds_count{worker=\"1\"} 10
";
        let us = processing_us_above(text, 0.0005).expect("messages above the floor");
        assert!((us - 1125.0).abs() < 1e-6, "{us}");
        assert_eq!(processing_us_above("", 0.0005), None);
        // Every message below the floor: nothing served at full cost.
        let fast = "\
holdline_processing_seconds_bucket{worker=\"0\",le=\"0.000500\"} 7
holdline_processing_seconds_sum{worker=\"0\"} 0.0007
holdline_processing_seconds_count{worker=\"0\"} 7
";
        assert_eq!(processing_us_above(fast, 0.0005), None);
    }
}
