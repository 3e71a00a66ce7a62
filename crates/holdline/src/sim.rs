//! `holdline sim`: the IO around the pure simulator (`holdline-sim`): reading the scenario,
//! progress, result files and plots.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant as StdInstant;

use anyhow::Context as _;
use clap::Subcommand;
use holdline_lab::plot::{Series, chart};
use holdline_sim::{
    Results, RunOutput, Scenario, World, agents_csv, pcap, pdd_cdf_csv, series_csv,
};

/// `holdline sim`.
#[derive(Debug, clap::Args)]
pub(crate) struct SimArgs {
    #[command(subcommand)]
    command: SimCommand,
}

#[derive(Debug, Subcommand)]
enum SimCommand {
    /// Run a scenario file: results.json, timeseries.csv, points.csv and plots in --out.
    Run(RunArgs),
    /// Predict a `holdline lab udp-overload` or `holdline lab feedback` (SEs → RE over UDP)
    /// run: simulate each of its (mechanism, SEs, load) points with a scenario of the same
    /// servers and compare throughput and PDD p50.
    Agree(AgreeArgs),
    /// Simulator speed: simulated SIP messages per second of wall time on one thread.
    Bench(BenchArgs),
    /// Deterministic simulation checking (docs/reliability.md): random scenarios drawn from
    /// seeds (proxy chains, overload control, feedback, failing callees, lossy jittery
    /// links, loads up to 5x), run with invariants checked; a failure prints its seed and
    /// the command that replays it. Exit status 1 on any violation.
    Check(CheckArgs),
}

#[derive(Debug, clap::Args)]
struct CheckArgs {
    /// Seeds to check: FIRST, FIRST+1, ... (see --first).
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    first: u64,
    /// Check this one seed only (a replay); with --print, show its scenario too.
    #[arg(long, conflicts_with_all = ["seeds", "first"])]
    seed: Option<u64>,
    /// Check this one scenario file instead of a seed's (run 0 of it, with the invariants
    /// on): what --shrink writes.
    #[arg(long, conflicts_with_all = ["seeds", "first", "seed"])]
    scenario: Option<PathBuf>,
    /// With --seed or --scenario: reduce the failing scenario to a smaller one that fails
    /// with the same kind of violation; print it (or write it to --out FILE) and the command
    /// that replays it.
    #[arg(long)]
    shrink: bool,
    /// The shrinker's budget: runs of the scenario at most.
    #[arg(long, default_value_t = 200)]
    max_runs: u32,
    /// Print the scenario (TOML) of each seed checked (`holdline sim run` reads it).
    #[arg(long)]
    print: bool,
    /// Threads (the outcome of a seed does not depend on it).
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    /// Write check.json (every seed's outcome) to this directory; with --shrink, the
    /// reduced scenario to this file.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct AgreeArgs {
    /// The lab's `results.json` (real points).
    #[arg(long)]
    real: PathBuf,
    /// The scenario modelling the lab's servers; its `local` and load steps are set per
    /// point. Default: `lab/sim/udp-overload.toml` for a `holdline lab udp-overload` run (one
    /// server, one UAS, one UAC), `lab/sim/se-re.toml` for a `holdline lab feedback` run (a
    /// server `re` and a template SE `se` and UAC `uac`, copied once per SE of each point).
    #[arg(long)]
    scenario: Option<PathBuf>,
    /// Seconds of load per point (default: the lab's, from its points).
    #[arg(long)]
    duration: Option<f64>,
    /// Simulated runs per point.
    #[arg(long, default_value_t = 3)]
    runs: u64,
    /// Extra load factors for the simulated curve (besides the lab's).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0.5,0.8,1,1.5,2,3,5,7,10"
    )]
    curve: Vec<f64>,
    /// Threads.
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    /// Calibrate the latency outside the servers (the scenario's per-hop delay and every
    /// server's wake-up, scaled together) on the lab's points at or below this load factor
    /// before predicting the others: the one thing the model takes from the machine rather
    /// than from holdline (loopback, scheduler wake-ups, the load generators' loops), which
    /// moves with how loaded the machine is. 0: use the scenario's values as written.
    #[arg(long, default_value_t = 0.5)]
    calibrate_below: f64,
    /// Output directory: agreement.csv, agreement.json, throughput.svg/png, pdd.svg/png.
    #[arg(long, default_value = "sim-agree")]
    out: PathBuf,
}

#[derive(Debug, clap::Args)]
struct BenchArgs {
    /// Simulated seconds per case.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The scenario (TOML; see docs/sim.md).
    scenario: PathBuf,
    /// Runs (repetitions with different seeds); default: the scenario's `runs`.
    #[arg(long)]
    runs: Option<u64>,
    /// Seed of run 0; default: the scenario's `seed`.
    #[arg(long)]
    seed: Option<u64>,
    /// Output directory (created).
    #[arg(long, default_value = "sim-out")]
    out: PathBuf,
    /// Runs simulated at once, one thread each (results do not depend on it).
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
    /// Write every datagram of run 0 to this libpcap file (simulated time, IP/UDP headers
    /// made up from the scenario's addresses): read it as a capture of the real lab
    /// (`dumpcap -i lo`) is read, e.g. with tshark. Every node's sends, before links and
    /// receive queues drop anything. Not with sweeps.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Sweep: run the scenario with every server's `local` set to each of these
    /// (comma-separated), ...
    #[arg(long, value_delimiter = ',')]
    local: Vec<String>,
    /// ... and every load step's rate multiplied by each of these; one directory per point,
    /// `sweep.csv`/`sweep.json` (network-wide totals per run, mean and 95% CI) and
    /// `sweep-goodput.svg/png`, `sweep-pdd.svg/png`.
    #[arg(long, value_delimiter = ',')]
    scale: Vec<f64>,
    /// Sweep over seed 003's mechanisms instead of `--local`:
    /// `LOCAL[+hop][+deoc|+asis][+probe][+fair]` (comma-separated), e.g.
    /// `none,occ,occ+hop,occ+deoc`: every server's `local` set to LOCAL, `+hop` RFC 7339 loss
    /// feedback at every server (OCC-Hop), `+deoc` DEOC at every ingress edge (a server a UAC
    /// population sends to), `+asis` the file's `edge` settings kept (mixed DEOC and
    /// non-DEOC edges), `+probe` load reports (`load_report` everywhere, DEOC's
    /// `signal = "load-report"`), `+fair` `local_fairness = "per-upstream"` everywhere. One
    /// mechanism without `--scale`: a plain run with it (time series included).
    #[arg(long, value_delimiter = ',', conflicts_with = "local")]
    mechanism: Vec<String>,
    /// General sweep (repeatable): `KEY=V1,V2,...` sets a dotted key of the scenario —
    /// a top-level key (`duration_s`), `default_link.KEY`, `servers.NAME.KEY`,
    /// `uac.NAME.KEY`, `uas.NAME.KEY` (NAME a node's name or `*` for every one) — to each
    /// value (TOML scalars; bare words are strings) before the scenario is checked. The
    /// points are every combination of the sweeps' values (and of `--local`/`--mechanism`
    /// and `--scale`, applied after them); one directory per point, `sweep.csv`/`sweep.json`.
    #[arg(long = "sweep", value_name = "KEY=V1,V2,...")]
    sweep: Vec<String>,
}

pub(crate) fn main(args: SimArgs) -> ExitCode {
    let result = match args.command {
        SimCommand::Run(a) => run(&a),
        SimCommand::Agree(a) => agree(&a),
        SimCommand::Bench(a) => bench(&a),
        SimCommand::Check(a) => check(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("holdline sim: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: &RunArgs) -> anyhow::Result<()> {
    let file = a.scenario.display().to_string();
    let text = std::fs::read_to_string(&a.scenario).with_context(|| format!("reading {file}"))?;
    if !a.sweep.is_empty() {
        return sweep(a, &file, &text);
    }
    let mut sc = Scenario::from_toml(&file, &text)?;
    if let Some(s) = a.seed {
        sc.seed = s;
    }
    if let [m] = a.mechanism.as_slice()
        && a.local.is_empty()
        && a.scale.is_empty()
    {
        // One mechanism and no sweep: a plain run of the scenario with it (time series and
        // plots included).
        sc = sc.with_mechanism(m).map_err(anyhow::Error::msg)?;
    } else if !a.local.is_empty() || !a.scale.is_empty() || !a.mechanism.is_empty() {
        return sweep(a, &file, &text);
    }
    let runs = a.runs.unwrap_or(sc.runs).max(1);
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let total_s = (sc.duration_s + sc.drain_s).ceil() as u64;
    let started = StdInstant::now();
    let jobs = a.jobs.clamp(1, 64);
    let quiet = a.quiet;
    // Runs are independent worlds: `jobs` threads take run indices in turn; the outputs are
    // put back in run order, so the files do not depend on `jobs`.
    let next = std::sync::atomic::AtomicU64::new(0);
    let mut outputs: Vec<(u64, RunOutput)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs)
            .map(|_| {
                scope.spawn(|| -> anyhow::Result<Vec<(u64, RunOutput)>> {
                    let mut mine = Vec::new();
                    loop {
                        let r = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if r >= runs {
                            return Ok(mine);
                        }
                        let capture = r == 0 && a.pcap.is_some();
                        mine.push((r, one_run(&sc, r, runs, total_s, quiet, capture)?));
                    }
                })
            })
            .collect();
        let mut all = Vec::new();
        for h in handles {
            match h.join() {
                Ok(v) => all.extend(v?),
                Err(_) => anyhow::bail!("a simulation thread panicked"),
            }
        }
        Ok(all)
    })?;
    outputs.sort_by_key(|(r, _)| *r);
    let mut outputs: Vec<RunOutput> = outputs.into_iter().map(|(_, o)| o).collect();
    let results = Results::from_runs(&sc, &outputs);
    write(&a.out.join("results.json"), &results.to_json())?;
    write(&a.out.join("timeseries.csv"), &series_csv(&outputs))?;
    write(&a.out.join("agents.csv"), &agents_csv(&outputs))?;
    write(&a.out.join("pdd_cdf.csv"), &pdd_cdf_csv(&outputs))?;
    if let (Some(path), Some(first)) = (a.pcap.as_ref(), outputs.first_mut()) {
        std::fs::write(path, pcap(&first.capture))
            .with_context(|| format!("writing {}", path.display()))?;
        // The capture is written; the rest of the outputs do not need it.
        first.capture = Vec::new();
    }
    write(&a.out.join("points.csv"), &points_csv(&results))?;
    if let Err(e) = plot(&a.out, &sc, &outputs) {
        eprintln!("holdline sim: no plot: {e}");
    }
    if !a.quiet {
        for p in &results.points {
            eprintln!(
                "{} step {} ({}): offered {:.1} ± {:.1}/s  throughput {:.1} ± {:.1}/s  goodput {:.1} ± {:.1}/s  503 {:.1}/s  other failures {:.1}/s  PDD p50 {:.1} ms p99 {:.1} ms",
                p.population,
                p.step,
                p.load_factor
                    .map_or_else(|| format!("{:.0}/s", p.rate_cps), |f| format!("{f}x")),
                p.offered_cps.mean,
                p.offered_cps.ci95,
                p.throughput_cps.mean,
                p.throughput_cps.ci95,
                p.goodput_cps.mean,
                p.goodput_cps.ci95,
                p.rejected_cps.mean,
                p.failed_other_cps.mean,
                p.pdd_p50_ms.mean,
                p.pdd_p99_ms.mean,
            );
        }
        eprintln!(
            "{runs} run(s) in {:.1} s; results in {}",
            started.elapsed().as_secs_f64(),
            a.out.display()
        );
    }
    Ok(())
}

/// Run `r` of `runs`, with progress lines unless `quiet`.
fn one_run(
    sc: &Scenario,
    r: u64,
    runs: u64,
    total_s: u64,
    quiet: bool,
    capture: bool,
) -> anyhow::Result<RunOutput> {
    let t0 = StdInstant::now();
    let mut world = World::new(sc, r)?;
    if capture {
        world = world.capture();
    }
    let out = world.run(|t| {
        if !quiet && t % 10 == 0 {
            eprintln!("run {}/{runs}: {t}/{total_s} s simulated", r + 1);
        }
    });
    let wall = t0.elapsed().as_secs_f64();
    if !quiet {
        eprintln!(
            "run {}/{runs} (seed {:#x}): {:.0} s simulated in {wall:.1} s, {} messages ({:.0} per second of wall time), {} events",
            r + 1,
            out.seed,
            out.simulated.as_secs_f64(),
            out.messages,
            out.messages as f64 / wall.max(1e-9),
            out.events,
        );
    }
    Ok(out)
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut f =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

fn points_csv(r: &Results) -> String {
    let mut s = String::from(
        "population,step,load_factor,rate_cps,offered_cps,offered_ci95,throughput_cps,throughput_ci95,goodput_cps,goodput_ci95,rejected_cps,failed_other_cps,pdd_p50_ms,pdd_p99_ms\n",
    );
    for p in &r.points {
        s.push_str(&format!(
            "{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3}\n",
            p.population,
            p.step,
            p.load_factor.map_or(String::new(), |f| f.to_string()),
            p.rate_cps,
            p.offered_cps.mean,
            p.offered_cps.ci95,
            p.throughput_cps.mean,
            p.throughput_cps.ci95,
            p.goodput_cps.mean,
            p.goodput_cps.ci95,
            p.rejected_cps.mean,
            p.failed_other_cps.mean,
            p.pdd_p50_ms.mean,
            p.pdd_p99_ms.mean,
        ));
    }
    s
}

/// `timeseries.svg/png`: offered, goodput, admitted and rejected per second of run 0 (the
/// first server's gate), for load-step plots (drawn by `holdline-lab`'s chart).
fn plot(dir: &Path, sc: &Scenario, runs: &[RunOutput]) -> Result<(), String> {
    let Some(run) = runs.first() else {
        return Ok(());
    };
    let first = run.servers.first().map(|s| s.0.clone()).unwrap_or_default();
    let rows: Vec<_> = run.series.iter().filter(|r| r.server == first).collect();
    let pick = |name: &str, f: &dyn Fn(&holdline_sim::world::SeriesRow) -> f64| {
        (
            name.to_owned(),
            rows.iter().map(|r| (r.t_s as f64, f(r))).collect(),
        )
    };
    let series: Vec<Series> = vec![
        pick("offered", &|r| r.offered as f64),
        pick("goodput (200 OK within window)", &|r| r.goodput as f64),
        pick("throughput (ACK at the UAS)", &|r| r.completed as f64),
        pick("admitted at the gate", &|r| r.admitted as f64),
        pick("503s", &|r| r.rejected as f64),
    ];
    let title = format!(
        "{}: calls per second (run 1, server {first})",
        if sc.name.is_empty() { "sim" } else { &sc.name }
    );
    chart(
        dir,
        "timeseries",
        &title,
        "simulated time (s)",
        "per second",
        &series,
    )
    .map_err(|e| e.to_string())
}

/// Which lab a `results.json` comes from, and so which topology models it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LabKind {
    /// `holdline lab udp-overload`: UAC → server → UAS; throughput = every call whose ACK
    /// reached the UAS (drain included) per second of load.
    UdpOverload,
    /// `holdline lab feedback`: M UACs → M SEs → RE → UAS; throughput = ACKs at the UAS
    /// within the load window per second of it.
    Feedback,
}

impl LabKind {
    fn default_scenario(self) -> &'static str {
        match self {
            Self::UdpOverload => "lab/sim/udp-overload.toml",
            Self::Feedback => "lab/sim/se-re.toml",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::UdpOverload => "udp-overload",
            Self::Feedback => "feedback (SE → RE)",
        }
    }
}

/// One real point of the lab (the median of its repeats).
#[derive(Clone, Debug)]
struct RealPoint {
    mechanism: String,
    /// SEs (1 for udp-overload).
    ses: u32,
    load_factor: f64,
    rate: f64,
    throughput: f64,
    pdd_p50: f64,
    /// The lowest and highest throughput and PDD p50 of the repeats (equal to the median
    /// with one run): how far the real runs disagree with each other.
    throughput_range: (f64, f64),
    pdd_range: (f64, f64),
    /// Real runs of the point.
    runs: usize,
    /// PDD mean (median over the runs that recorded it): a diagnostic beside the median,
    /// which jumps between steps of the retransmission schedule.
    pdd_mean: Option<f64>,
    /// The mean wall µs the measured server spent per message at full emulated cost (median
    /// over the repeats), when the lab recorded it.
    service_us: Option<f64>,
    /// What the measured server read, by kind (median over the runs whose metrics file is
    /// in the lab's `runs/`): a diagnostic of where a point's throughput differs.
    received: Option<Kinds>,
    /// INVITEs the callers sent again and 200 OKs the callees sent again, over the run
    /// (medians over the runs; `retrans_invite`, `retrans_200` of the lab's points).
    retransmitted: Option<[f64; 2]>,
}

/// What the measured server read over a run, by kind (retransmissions included), the
/// datagrams its kernel dropped at full receive buffers, and how its worker loop read them
/// (iterations; receive calls that returned datagrams on the main and on the INVITE socket),
/// in the order of [`KINDS`]: the real server's `holdline_sip_requests_in_total{method}`,
/// `holdline_sip_responses_in_total{class}`, `holdline_udp_kernel_drops_total`, and the
/// counts of `holdline_loop_busy_seconds`, `holdline_queue_delay_seconds` and
/// `holdline_invite_queue_delay_seconds`, the time its rejection budget counted as spent on
/// rejections (`holdline_overload_rejection_seconds_total`); the simulator's `ServerCounters`.
type Kinds = [f64; 14];

/// The columns of [`Kinds`].
const KINDS: [&str; 14] = [
    "invites",
    "acks",
    "byes",
    "r1xx",
    "r2xx",
    "r3xx_6xx",
    "drops",
    "iterations",
    "main_reads",
    "invite_reads",
    "sent",
    "loop_cost_ms",
    "wakes",
    "rejection_ms",
];

/// The columns of a point's retransmission counts (`[INVITE, 200 OK]`).
const RETRANSMITTED: [&str; 2] = ["retrans_invite", "retrans_200"];

/// [`Kinds`] from a server's Prometheus text (every worker and socket summed).
fn kinds_of_metrics(text: &str) -> Kinds {
    let req = |m: &str| {
        holdline_lab::metric_where(
            text,
            "holdline_sip_requests_in_total",
            &[&format!("method=\"{m}\"")],
        )
    };
    let resp = |c: &str| {
        holdline_lab::metric_where(
            text,
            "holdline_sip_responses_in_total",
            &[&format!("class=\"{c}\"")],
        )
    };
    [
        req("INVITE"),
        req("ACK"),
        req("BYE"),
        resp("1xx"),
        resp("2xx"),
        ["3xx", "4xx", "5xx", "6xx"].into_iter().map(resp).sum(),
        holdline_lab::metric(text, "holdline_udp_kernel_drops_total"),
        holdline_lab::metric(text, "holdline_loop_busy_seconds_count"),
        holdline_lab::metric(text, "holdline_queue_delay_seconds_count"),
        holdline_lab::metric(text, "holdline_invite_queue_delay_seconds_count"),
        holdline_lab::metric_where(text, "holdline_messages_out_total", &["transport=\"udp\""]),
        // Without the handling histogram (older files) the difference would be the whole
        // busy time: none then.
        if text.contains("holdline_processing_seconds_sum") {
            (holdline_lab::metric(text, "holdline_loop_busy_seconds_sum")
                - holdline_lab::metric(text, "holdline_processing_seconds_sum"))
                * 1e3
        } else {
            f64::NAN
        },
        // Not counted by the server.
        f64::NAN,
        holdline_lab::metric(text, "holdline_overload_rejection_seconds_total") * 1e3,
    ]
}

/// [`Kinds`] from the simulator's counters of one server.
fn kinds_of_counters(c: &holdline_sim::world::ServerCounters) -> Kinds {
    let r = &c.received;
    [
        r.invite,
        r.ack,
        r.bye,
        r.r1xx,
        r.r2xx,
        r.r3xx_6xx,
        c.queue_drops + c.invite_queue_drops,
        c.iterations,
        c.main_reads,
        c.invite_reads,
        c.sent,
        c.loop_cost_ns / 1_000_000,
        c.wakes,
        c.rejection_ns / 1_000_000,
    ]
    .map(|n| n as f64)
}

/// Column by column, `f` of the rows (`None` without rows): medians or means over runs.
fn per_column<const N: usize>(rows: &[[f64; N]], f: fn(Vec<f64>) -> f64) -> Option<[f64; N]> {
    (!rows.is_empty()).then(|| std::array::from_fn(|i| f(rows.iter().map(|r| r[i]).collect())))
}

/// The mean of `v`.
fn mean_of(v: Vec<f64>) -> f64 {
    holdline_sim::Estimate::of(&v).mean
}

/// The file-name tag of a lab run (the `tag` the lab records; files written before it did
/// are named by the labs' rule: `MECH-Fx`, `MECH-Nse-Fx`, `-rK` for repeat K > 0).
fn run_tag(p: &serde_json::Value, kind: LabKind) -> String {
    if let Some(t) = p["tag"].as_str() {
        return t.to_owned();
    }
    let m = p["mechanism"].as_str().unwrap_or_default();
    let f = (p["load_factor"].as_f64().unwrap_or(0.0) * 1000.0).round() / 1000.0;
    let base = match kind {
        LabKind::UdpOverload => format!("{m}-{f}x"),
        LabKind::Feedback => format!("{m}-{}se-{f}x", p["ses"].as_u64().unwrap_or(1)),
    };
    match p["run"].as_u64().unwrap_or(0) {
        0 => base,
        k => format!("{base}-r{k}"),
    }
}

/// What the lab's measured server read in run `p`, from `runs/TAG-serve.metrics`
/// (udp-overload) or `runs/TAG-re.metrics` (feedback) beside `results` (`None` without it).
fn real_kinds(results: &Path, p: &serde_json::Value, kind: LabKind) -> Option<Kinds> {
    let server = match kind {
        LabKind::UdpOverload => "serve",
        LabKind::Feedback => "re",
    };
    let file = results
        .parent()?
        .join("runs")
        .join(format!("{}-{server}.metrics", run_tag(p, kind)));
    let text = std::fs::read_to_string(file).ok()?;
    let k = kinds_of_metrics(&text);
    k.iter().any(|&x| x > 0.0).then_some(k)
}

/// The lowest and highest of `v` ((0, 0) when empty).
fn range(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    (
        v.iter().copied().fold(f64::INFINITY, f64::min),
        v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The lab's points, the median of each (mechanism, SEs, load) over its runs, its load
/// duration and which lab it is.
fn real_points(path: &Path) -> anyhow::Result<(Vec<RealPoint>, f64, LabKind)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).context("results.json")?;
    let pts = v["points"]
        .as_array()
        .context("no `points` in results.json")?;
    let kind = match pts.first().and_then(|p| p["experiment"].as_str()) {
        Some("feedback") => LabKind::Feedback,
        Some("udp-overload") | None => LabKind::UdpOverload,
        Some(other) => anyhow::bail!(
            "{}: points of `{other}`; `sim agree` models `udp-overload` and `feedback`",
            path.display()
        ),
    };
    let f = |p: &serde_json::Value, k: &str| p[k].as_f64().unwrap_or(0.0);
    let ses_of = |p: &serde_json::Value| p["ses"].as_u64().map_or(1, |n| n.max(1) as u32);
    let measured = |p: &serde_json::Value| {
        p["service_us_measured"]
            .as_f64()
            .or_else(|| p["re_service_us_measured"].as_f64())
    };
    let mut keys: Vec<(String, u32, f64, f64)> = Vec::new();
    let mut durations = Vec::new();
    for p in pts {
        let m = p["mechanism"].as_str().unwrap_or_default().to_owned();
        let (ses, lf) = (ses_of(p), f(p, "load_factor"));
        if !keys
            .iter()
            .any(|(k, n, l, _)| *k == m && *n == ses && (l - lf).abs() < 1e-9)
        {
            keys.push((m, ses, lf, (f(p, "capacity_cps") * lf).round()));
        }
        if f(p, "offered_cps") > 0.0 {
            durations.push(f(p, "calls_attempted") / f(p, "offered_cps"));
        }
    }
    let out = keys
        .into_iter()
        .map(|(m, ses, lf, rate)| {
            let runs: Vec<&serde_json::Value> = pts
                .iter()
                .filter(|p| {
                    p["mechanism"] == m.as_str()
                        && ses_of(p) == ses
                        && (f(p, "load_factor") - lf).abs() < 1e-9
                })
                .collect();
            let costs: Vec<f64> = runs.iter().filter_map(|p| measured(p)).collect();
            let means: Vec<f64> = runs
                .iter()
                .filter_map(|p| p["pdd_mean_ms"].as_f64())
                .collect();
            let thr: Vec<f64> = runs.iter().map(|p| f(p, "throughput_cps")).collect();
            let pdd: Vec<f64> = runs.iter().map(|p| f(p, "pdd_p50_ms")).collect();
            let kinds: Vec<Kinds> = runs
                .iter()
                .filter_map(|p| real_kinds(path, p, kind))
                .collect();
            let retrans: Vec<[f64; 2]> = runs
                .iter()
                .filter_map(|p| Some([p["retrans_invite"].as_f64()?, p["retrans_200"].as_f64()?]))
                .collect();
            RealPoint {
                received: per_column(&kinds, median),
                retransmitted: per_column(&retrans, median),
                runs: runs.len(),
                pdd_mean: (!means.is_empty()).then(|| median(means)),
                throughput_range: range(&thr),
                pdd_range: range(&pdd),
                throughput: median(thr),
                pdd_p50: median(pdd),
                service_us: (!costs.is_empty()).then(|| median(costs)),
                mechanism: m,
                ses,
                load_factor: lf,
                rate,
            }
        })
        .collect();
    Ok((out, (median(durations) * 10.0).round() / 10.0, kind))
}

/// Removes and returns the first item of `v` that `is` picks (the SE → RE scenario's
/// templates), or says that the scenario has no `what`.
fn take<T>(v: &mut Vec<T>, is: impl Fn(&T) -> bool, what: &str) -> anyhow::Result<T> {
    let i = v
        .iter()
        .position(is)
        .with_context(|| format!("the SE → RE scenario has no {what}"))?;
    Ok(v.remove(i))
}

/// What one simulated point is: the lab's mechanism, SEs and offered rate, and the cost per
/// message the lab's server really paid, if recorded.
#[derive(Clone, Debug)]
struct Task {
    mechanism: String,
    ses: u32,
    load_factor: f64,
    rate: f64,
    service_us: Option<f64>,
    /// The real point's PDD median (the lab's points; `None` on the extra curve points):
    /// the model's share of calls answered by then is reported beside its own median.
    real_pdd_p50: Option<f64>,
}

/// The scenario of one point: the lab's servers with `mechanism` (at the measured server:
/// udp-overload's only server, feedback's `re`), one step at `task.rate` (split evenly over
/// the SEs), the measured cost per message if the lab recorded one.
fn point_scenario(
    base: &Scenario,
    kind: LabKind,
    task: &Task,
    duration: f64,
) -> anyhow::Result<Scenario> {
    let mechanism = task.mechanism.as_str();
    let mut sc = base.clone();
    let mut parts = mechanism.split('+');
    let alg = parts.next().unwrap_or_default();
    let measured = match kind {
        LabKind::UdpOverload => 0,
        LabKind::Feedback => sc
            .servers
            .iter()
            .position(|s| s.name == "re")
            .context("the SE → RE scenario has no server `re`")?,
    };
    let server = sc
        .servers
        .get_mut(measured)
        .context("the scenario has no server")?;
    // The feedback lab's `loss` and `rate`: the RE runs local OCC and answers; its SEs take
    // the answers (below).
    let feedback = matches!((kind, alg), (LabKind::Feedback, "loss" | "rate"));
    if feedback {
        server.local = "occ".to_owned();
        server.feedback = alg.to_owned();
    } else {
        server.local = alg.to_owned();
    }
    if let Some(us) = task.service_us {
        server.service_us = us;
    }
    for opt in parts {
        match opt {
            "invite-socket" => server.invite_queue = Some(true),
            "no-invite-socket" => server.invite_queue = Some(false),
            o => anyhow::bail!("mechanism `{mechanism}`: option `{o}` is not simulated"),
        }
    }
    let step = |rate: f64| {
        vec![holdline_sim::scenario::StepSpec {
            at_s: 0.0,
            rate_cps: Some(rate),
            factor: None,
        }]
    };
    match kind {
        LabKind::UdpOverload => {
            let uac = sc.uac.first_mut().context("the scenario has no UAC")?;
            uac.steps = step(task.rate);
            uac.ramp_steps.clear();
        }
        LabKind::Feedback => {
            // The SEs run holdline's defaults but no feedback; with mechanism `none` no
            // control at all (the lab's `--overload=none --feedback=none`).
            let se_local = if alg == "none" { "none" } else { "occ" };
            let template = take(&mut sc.servers, |s| s.name == "se", "template server `se`")?;
            let uac = take(&mut sc.uac, |u| u.name == "uac", "template UAC `uac`")?;
            let route = take(&mut sc.routes, |r| r.server == "se", "route of `se`")?;
            let n = task.ses.max(1);
            for i in 0..n {
                let name = format!("se{i}");
                let mut s = template.clone();
                s.name.clone_from(&name);
                s.local = se_local.to_owned();
                if feedback {
                    alg.clone_into(&mut s.feedback);
                }
                sc.servers.push(s);
                let mut u = uac.clone();
                u.name = format!("uac{i}");
                u.target.clone_from(&name);
                u.steps = step(task.rate / f64::from(n));
                u.ramp_steps.clear();
                sc.uac.push(u);
                let mut r = route.clone();
                r.server = name;
                sc.routes.push(r);
            }
        }
    }
    sc.duration_s = duration;
    sc.settle_s = 0.0;
    Ok(sc)
}

/// A simulated point: throughput (the lab's definition, see [`LabKind`]) and PDD p50 of
/// each run (udp-overload: the UAC's; feedback: the UACs' medians weighted by their calls,
/// as the lab weighs them).
#[derive(Clone, Debug)]
struct SimPoint {
    task: Task,
    throughput: holdline_sim::Estimate,
    pdd_p50: holdline_sim::Estimate,
    pdd_mean: holdline_sim::Estimate,
    /// The share of the model's answered calls whose PDD is at most the real median (mean
    /// over the runs): 0.5 when the distributions agree there. Where the PDD distribution
    /// has a plateau around its median (calls answered on the steps of the retransmission
    /// schedule) the median jumps across it while this share moves a little.
    pdd_share_at_real_p50: Option<holdline_sim::Estimate>,
    /// What the measured server read, by kind (mean over the runs).
    received: Option<Kinds>,
    /// INVITE and 200 OK retransmissions by the user agents (mean over the runs).
    retransmitted: Option<[f64; 2]>,
}

/// The share of the answered calls of `steps` (weighted by their offered calls) whose PDD
/// is at most `ms`.
fn weighted_share(steps: &[holdline_sim::world::StepOutcome], ms: f64) -> f64 {
    let calls: f64 = steps.iter().map(|s| s.offered_cps).sum();
    if calls <= 0.0 {
        return 0.0;
    }
    steps
        .iter()
        .map(|s| {
            let share = s
                .pdd_cdf
                .iter()
                .take_while(|(v, _)| *v <= ms)
                .last()
                .map_or(0.0, |(_, f)| *f);
            share * s.offered_cps
        })
        .sum::<f64>()
        / calls
}

/// What one simulated run of a task measured.
struct RunFigures {
    /// Index of the task and of the run.
    task: usize,
    run: u64,
    throughput: f64,
    pdd_p50: f64,
    pdd_mean: f64,
    /// The model's share of answered calls with a PDD at most the real median.
    pdd_share: Option<f64>,
    /// What the measured server read (udp-overload's server, feedback's `re`).
    received: Option<Kinds>,
    /// INVITE and 200 OK retransmissions by the user agents.
    retransmitted: [f64; 2],
}

fn simulate(
    tasks: &[Task],
    base: &Scenario,
    kind: LabKind,
    duration: f64,
    runs: u64,
    jobs: usize,
) -> anyhow::Result<Vec<SimPoint>> {
    let work: Vec<(usize, u64)> = (0..tasks.len())
        .flat_map(|i| (0..runs).map(move |r| (i, r)))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<RunFigures> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs.clamp(1, 64))
            .map(|_| {
                scope.spawn(|| -> anyhow::Result<Vec<RunFigures>> {
                    let mut mine = Vec::new();
                    loop {
                        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&(i, r)) = work.get(k) else {
                            return Ok(mine);
                        };
                        let sc = point_scenario(base, kind, &tasks[i], duration)?;
                        let out = World::new(&sc, r)?.run(|_| {});
                        // PDD median and mean: the UAC's, or the UACs' weighted by their
                        // calls as the lab weighs them.
                        let calls: f64 = out.steps.iter().map(|s| s.offered_cps).sum();
                        let weighted = |g: fn(&holdline_sim::world::StepOutcome) -> f64| {
                            if calls > 0.0 {
                                out.steps.iter().map(|s| g(s) * s.offered_cps).sum::<f64>() / calls
                            } else {
                                0.0
                            }
                        };
                        let (pdd, mean) = (weighted(|s| s.pdd_p50_ms), weighted(|s| s.pdd_mean_ms));
                        let thr = match kind {
                            LabKind::UdpOverload => out.completed as f64 / duration,
                            // Network-wide: every step's throughput is the same count.
                            LabKind::Feedback => {
                                out.steps.first().map_or(0.0, |s| s.throughput_cps)
                            }
                        };
                        let measured = match kind {
                            LabKind::UdpOverload => out.servers.first(),
                            LabKind::Feedback => out.servers.iter().find(|(n, _)| n == "re"),
                        };
                        // The share at the real median, the UACs weighted as for the median.
                        let pdd_share = tasks[i]
                            .real_pdd_p50
                            .map(|ms| weighted_share(&out.steps, ms));
                        mine.push(RunFigures {
                            task: i,
                            run: r,
                            throughput: thr,
                            pdd_p50: pdd,
                            pdd_mean: mean,
                            pdd_share,
                            received: measured.map(|(_, c)| kinds_of_counters(c)),
                            retransmitted: [
                                out.retransmitted.invite as f64,
                                out.retransmitted.r200 as f64,
                            ],
                        });
                    }
                })
            })
            .collect();
        let mut all = Vec::new();
        for h in handles {
            match h.join() {
                Ok(v) => all.extend(v?),
                Err(_) => anyhow::bail!("a simulation thread panicked"),
            }
        }
        // In run order whatever thread ran what: sums over runs do not depend on --jobs.
        all.sort_by_key(|x| (x.task, x.run));
        Ok(all)
    })?;
    Ok(tasks
        .iter()
        .enumerate()
        .map(|(i, task)| {
            let mine: Vec<&RunFigures> = results.iter().filter(|x| x.task == i).collect();
            let of = |g: fn(&RunFigures) -> f64| {
                holdline_sim::Estimate::of(&mine.iter().map(|x| g(x)).collect::<Vec<_>>())
            };
            SimPoint {
                task: task.clone(),
                throughput: of(|x| x.throughput),
                pdd_p50: of(|x| x.pdd_p50),
                pdd_mean: of(|x| x.pdd_mean),
                pdd_share_at_real_p50: {
                    let shares: Vec<f64> = mine.iter().filter_map(|x| x.pdd_share).collect();
                    (!shares.is_empty()).then(|| holdline_sim::Estimate::of(&shares))
                },
                received: per_column(
                    &mine.iter().filter_map(|x| x.received).collect::<Vec<_>>(),
                    mean_of,
                ),
                retransmitted: per_column(
                    &mine.iter().map(|x| x.retransmitted).collect::<Vec<_>>(),
                    mean_of,
                ),
            }
        })
        .collect())
}

/// Scales of the latency outside the servers tried by [`calibrate`].
const LATENCY_SCALES: [f64; 8] = [0.1, 0.2, 0.33, 0.5, 0.75, 1.0, 1.5, 2.0];

/// `base` with its latency outside the servers (per-hop delay of the default link, every
/// server's wake-up) multiplied by `scale`.
fn scale_latency(base: &Scenario, scale: f64) -> Scenario {
    let mut sc = base.clone();
    sc.default_link.delay_ms *= scale;
    for s in &mut sc.servers {
        s.wakeup_us *= scale;
    }
    sc
}

/// Picks the latency scale (of [`LATENCY_SCALES`]) whose simulated PDD medians best match
/// the lab's points at or below `--calibrate-below` (least mean |log(sim / real)|) and
/// returns the scenario scaled so, with a description for agreement.json. Nothing is
/// calibrated when no real point is that light.
fn calibrate(
    base: &Scenario,
    kind: LabKind,
    real: &[RealPoint],
    a: &AgreeArgs,
    duration: f64,
) -> anyhow::Result<(Scenario, serde_json::Value)> {
    let light: Vec<Task> = real
        .iter()
        .filter(|p| p.load_factor <= a.calibrate_below && p.pdd_p50 > 0.0)
        .map(|p| Task {
            mechanism: p.mechanism.clone(),
            ses: p.ses,
            load_factor: p.load_factor,
            rate: p.rate,
            service_us: p.service_us,
            real_pdd_p50: (p.pdd_p50 > 0.0).then_some(p.pdd_p50),
        })
        .collect();
    if light.is_empty() {
        return Ok((base.clone(), serde_json::Value::Null));
    }
    let mut best: Option<(f64, f64)> = None;
    for scale in LATENCY_SCALES {
        let sc = scale_latency(base, scale);
        let sim = simulate(&light, &sc, kind, duration, a.runs.max(1), a.jobs)?;
        let err = sim
            .iter()
            .zip(
                real.iter()
                    .filter(|p| p.load_factor <= a.calibrate_below && p.pdd_p50 > 0.0),
            )
            .map(|(s, r)| (s.pdd_p50.mean.max(1e-6) / r.pdd_p50).ln().abs())
            .sum::<f64>()
            / light.len() as f64;
        eprintln!(
            "sim agree: calibration, latency outside the servers x{scale}: mean |log(sim/real)| of PDD p50 {err:.3}"
        );
        if best.is_none_or(|(_, e)| err < e) {
            best = Some((scale, err));
        }
    }
    let (scale, err) = best.unwrap_or((1.0, 0.0));
    let sc = scale_latency(base, scale);
    let wakeups: Vec<f64> = sc.servers.iter().map(|s| s.wakeup_us).collect();
    eprintln!(
        "sim agree: calibrated on {} points at or below {}x: latency outside the servers x{scale} (per hop {:.3} ms, wake-ups {:?} µs)",
        light.len(),
        a.calibrate_below,
        sc.default_link.delay_ms,
        wakeups
    );
    Ok((
        sc.clone(),
        serde_json::json!({
            "below_load_factor": a.calibrate_below,
            "points": light.len(),
            "scale": scale,
            "mean_abs_log_error": err,
            "hop_delay_ms": sc.default_link.delay_ms,
            "wakeup_us": wakeups,
        }),
    ))
}

fn agree(a: &AgreeArgs) -> anyhow::Result<()> {
    let started = StdInstant::now();
    let (real, lab_duration, kind) = real_points(&a.real)?;
    anyhow::ensure!(!real.is_empty(), "no points in {}", a.real.display());
    let duration = a.duration.unwrap_or(lab_duration).max(1.0);
    let scenario = a
        .scenario
        .clone()
        .unwrap_or_else(|| PathBuf::from(kind.default_scenario()));
    let file = scenario.display().to_string();
    let text = std::fs::read_to_string(&scenario).with_context(|| format!("reading {file}"))?;
    let base = Scenario::from_toml(&file, &text)?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let capacity = real
        .iter()
        .find(|p| p.load_factor > 0.0)
        .map_or(0.0, |p| p.rate / p.load_factor);
    // The lab's points, then the extra loads of the curve (each curve's cost per message:
    // the median of what its real points measured).
    let mut tasks: Vec<Task> = real
        .iter()
        .map(|p| Task {
            mechanism: p.mechanism.clone(),
            ses: p.ses,
            load_factor: p.load_factor,
            rate: p.rate,
            service_us: p.service_us,
            real_pdd_p50: (p.pdd_p50 > 0.0).then_some(p.pdd_p50),
        })
        .collect();
    let mut curves: Vec<(String, u32)> = Vec::new();
    for p in &real {
        if !curves.contains(&(p.mechanism.clone(), p.ses)) {
            curves.push((p.mechanism.clone(), p.ses));
        }
    }
    for (m, ses) in &curves {
        let costs: Vec<f64> = real
            .iter()
            .filter(|p| &p.mechanism == m && p.ses == *ses)
            .filter_map(|p| p.service_us)
            .collect();
        let service_us = (!costs.is_empty()).then(|| median(costs));
        for &lf in &a.curve {
            if !tasks
                .iter()
                .any(|t| &t.mechanism == m && t.ses == *ses && (t.load_factor - lf).abs() < 1e-9)
            {
                tasks.push(Task {
                    mechanism: m.clone(),
                    ses: *ses,
                    load_factor: lf,
                    rate: (capacity * lf).round(),
                    service_us,
                    real_pdd_p50: None,
                });
            }
        }
    }
    eprintln!(
        "sim agree ({}): {} real points, {} simulated points × {} runs of {duration} s load (capacity {capacity:.0} calls/s; {} of the real points recorded their server's cost per message)",
        kind.name(),
        real.len(),
        tasks.len(),
        a.runs,
        real.iter().filter(|p| p.service_us.is_some()).count()
    );
    let (base, calibration) = calibrate(&base, kind, &real, a, duration)?;
    let sim = simulate(&tasks, &base, kind, duration, a.runs.max(1), a.jobs)?;
    let rel = |s: f64, r: f64| if r > 0.0 { (s - r) / r } else { 0.0 };
    let mut csv = String::from(
        "mechanism,ses,load_factor,rate_cps,service_us,real_runs,real_throughput_cps,real_throughput_min,real_throughput_max,sim_throughput_cps,sim_throughput_ci95,throughput_error,real_pdd_p50_ms,real_pdd_p50_min,real_pdd_p50_max,sim_pdd_p50_ms,sim_pdd_p50_ci95,pdd_p50_error,real_pdd_mean_ms,sim_pdd_mean_ms,pdd_mean_error,throughput_ok,pdd_ok,within_real_range,sim_pdd_share_at_real_p50",
    );
    // What the measured server read, by kind, real (median of the runs) beside simulated
    // (mean of the runs): where a throughput differs, which messages made the difference.
    // Then the user agents' retransmissions over the run, real (median) beside simulated
    // (mean).
    for k in KINDS.iter().chain(&RETRANSMITTED) {
        csv.push_str(&format!(",real_{k},sim_{k}"));
    }
    csv.push('\n');
    let mut rows = Vec::new();
    let (mut n_ok, mut n, mut n_in_range) = (0, 0, 0);
    for (r, s) in real.iter().zip(&sim) {
        let te = rel(s.throughput.mean, r.throughput);
        let pe = rel(s.pdd_p50.mean, r.pdd_p50);
        let (tok, pok) = (te.abs() <= 0.10, pe.abs() <= 0.25);
        n += 1;
        n_ok += usize::from(tok && pok);
        // A criterion that fails may still fall between the real repeats' extremes: the
        // real runs then disagree with each other by more than the tolerance.
        let inside = |x: f64, (lo, hi): (f64, f64)| x >= lo && x <= hi;
        let in_range = (tok || inside(s.throughput.mean, r.throughput_range))
            && (pok || inside(s.pdd_p50.mean, r.pdd_range));
        n_in_range += usize::from(!(tok && pok) && in_range);
        let cost = r.service_us.map_or_else(String::new, |c| format!("{c:.0}"));
        let mean_error = r.pdd_mean.map(|m| rel(s.pdd_mean.mean, m));
        let real_mean = r.pdd_mean.map_or_else(String::new, |m| format!("{m:.1}"));
        let mean_err = mean_error.map_or_else(String::new, |e| format!("{e:+.3}"));
        // Real and simulated side by side, column by column (empty where a side has none).
        fn pairs<const N: usize>(real: Option<[f64; N]>, sim: Option<[f64; N]>) -> String {
            let cell = |v: Option<[f64; N]>, i: usize| {
                v.filter(|v| v[i].is_finite())
                    .map_or_else(String::new, |v| format!("{:.0}", v[i]))
            };
            (0..N)
                .map(|i| format!(",{},{}", cell(real, i), cell(sim, i)))
                .collect()
        }
        let kinds = pairs(r.received, s.received) + &pairs(r.retransmitted, s.retransmitted);
        let share = s.pdd_share_at_real_p50.as_ref().map(|e| e.mean);
        let share_cell = share.map_or_else(String::new, |x| format!("{x:.3}"));
        let named = |names: &[&str], v: Option<&[f64]>| {
            v.map(|v| {
                names
                    .iter()
                    .zip(v)
                    .map(|(n, x)| ((*n).to_owned(), serde_json::json!(x)))
                    .collect::<serde_json::Map<_, _>>()
            })
        };
        csv.push_str(&format!(
            "{},{},{},{},{cost},{},{:.1},{:.1},{:.1},{:.1},{:.1},{:+.3},{:.1},{:.1},{:.1},{:.1},{:.1},{:+.3},{real_mean},{:.1},{mean_err},{tok},{pok},{in_range},{share_cell}{kinds}\n",
            r.mechanism,
            r.ses,
            r.load_factor,
            r.rate,
            r.runs,
            r.throughput,
            r.throughput_range.0,
            r.throughput_range.1,
            s.throughput.mean,
            s.throughput.ci95,
            te,
            r.pdd_p50,
            r.pdd_range.0,
            r.pdd_range.1,
            s.pdd_p50.mean,
            s.pdd_p50.ci95,
            pe,
            s.pdd_mean.mean
        ));
        eprintln!(
            "{:<12} {:>2} SE {:>5.2}x {:>5.0}/s {:>6}  throughput real {:>6.1} sim {:>6.1} ± {:>4.1} ({:+5.1}%)  PDD p50 real {:>7.1} sim {:>7.1} ms ({:+5.1}%){}",
            r.mechanism,
            r.ses,
            r.load_factor,
            r.rate,
            r.service_us
                .map_or_else(|| "-".to_owned(), |c| format!("{c:.0}µs")),
            r.throughput,
            s.throughput.mean,
            s.throughput.ci95,
            te * 100.0,
            r.pdd_p50,
            s.pdd_p50.mean,
            pe * 100.0,
            match (tok && pok, in_range) {
                (true, _) => String::new(),
                (false, _) if !pok && mean_error.is_some() => format!(
                    "  <- outside{} (PDD mean real {real_mean} sim {:.1} ms, {mean_err}{})",
                    if in_range {
                        ", but within the real runs"
                    } else {
                        ""
                    },
                    s.pdd_mean.mean,
                    share.map_or_else(String::new, |x| format!(
                        "; the model answers {:.0}% of its calls by the real median",
                        x * 100.0
                    ))
                ),
                (false, true) => format!(
                    "  <- outside, but within the {} real runs ({:.0}-{:.0}/s, {:.1}-{:.1} ms)",
                    r.runs,
                    r.throughput_range.0,
                    r.throughput_range.1,
                    r.pdd_range.0,
                    r.pdd_range.1
                ),
                (false, false) => "  <- outside".to_owned(),
            }
        );
        rows.push(serde_json::json!({
            "mechanism": r.mechanism, "ses": r.ses, "load_factor": r.load_factor,
            "rate_cps": r.rate, "service_us": r.service_us,
            "real": {"runs": r.runs, "throughput_cps": r.throughput, "pdd_p50_ms": r.pdd_p50,
                "throughput_range": [r.throughput_range.0, r.throughput_range.1],
                "pdd_p50_range": [r.pdd_range.0, r.pdd_range.1]},
            "within_real_range": in_range,
            "sim_pdd_share_at_real_p50": share,
            "sim": {"throughput_cps": s.throughput, "pdd_p50_ms": s.pdd_p50},
            "throughput_error": te, "pdd_p50_error": pe,
            "pdd_mean": {"real": r.pdd_mean, "sim": s.pdd_mean, "error": mean_error},
            "throughput_ok": tok, "pdd_ok": pok,
            "received": {"real": named(&KINDS, r.received.as_ref().map(|v| &v[..])),
                "sim": named(&KINDS, s.received.as_ref().map(|v| &v[..]))},
            "retransmitted": {"real": named(&RETRANSMITTED, r.retransmitted.as_ref().map(|v| &v[..])),
                "sim": named(&RETRANSMITTED, s.retransmitted.as_ref().map(|v| &v[..]))},
        }));
    }
    let curve: Vec<serde_json::Value> = sim
        .iter()
        .map(|s| {
            serde_json::json!({"mechanism": s.task.mechanism, "ses": s.task.ses,
                "load_factor": s.task.load_factor, "rate_cps": s.task.rate,
                "service_us": s.task.service_us,
                "throughput_cps": s.throughput, "pdd_p50_ms": s.pdd_p50})
        })
        .collect();
    let json = serde_json::json!({
        "real": a.real.display().to_string(),
        "lab": kind.name(),
        "scenario": file,
        "duration_s": duration,
        "runs": a.runs,
        "capacity_cps": capacity,
        "points": rows,
        "curve": curve,
        "calibration": calibration,
        "within": {"points": n, "both_ok": n_ok, "outside_but_within_real_runs": n_in_range},
    });
    write(
        &a.out.join("agreement.json"),
        &serde_json::to_string_pretty(&json)?,
    )?;
    write(&a.out.join("agreement.csv"), &csv)?;
    // One chart per number of SEs (udp-overload: one chart), each mechanism's real points
    // in a lighter shade of its simulated curve.
    let mut groups: Vec<u32> = curves.iter().map(|(_, ses)| *ses).collect();
    groups.sort_unstable();
    groups.dedup();
    for ses_group in groups {
        let mut thr: Vec<Series> = Vec::new();
        let mut pdd: Vec<Series> = Vec::new();
        for (m, ses) in curves.iter().filter(|(_, n)| *n == ses_group) {
            let real_of = |g: fn(&RealPoint) -> f64| -> Vec<(f64, f64)> {
                let mut v: Vec<(f64, f64)> = real
                    .iter()
                    .filter(|p| &p.mechanism == m && p.ses == *ses)
                    .map(|p| (p.rate, g(p)))
                    .collect();
                v.sort_by(|x, y| x.0.total_cmp(&y.0));
                v
            };
            let sim_of = |g: fn(&SimPoint) -> f64| -> Vec<(f64, f64)> {
                let mut v: Vec<(f64, f64)> = sim
                    .iter()
                    .filter(|p| &p.task.mechanism == m && p.task.ses == *ses)
                    .map(|p| (p.task.rate, g(p)))
                    .collect();
                v.sort_by(|x, y| x.0.total_cmp(&y.0));
                v
            };
            thr.push((format!("{m}: real"), real_of(|p| p.throughput)));
            thr.push((format!("{m}: sim"), sim_of(|p| p.throughput.mean)));
            pdd.push((format!("{m}: real"), real_of(|p| p.pdd_p50)));
            pdd.push((format!("{m}: sim"), sim_of(|p| p.pdd_p50.mean)));
        }
        let (suffix, what) = match kind {
            LabKind::UdpOverload => (String::new(), kind.name().to_owned()),
            LabKind::Feedback => (
                format!("-{ses_group}se"),
                format!("{}, {ses_group} SE", kind.name()),
            ),
        };
        chart(
            &a.out,
            &format!("throughput{suffix}"),
            &format!(
                "{what}: real (lab, light) vs simulated throughput, capacity {capacity:.0} calls/s"
            ),
            "offered calls/s",
            "throughput (ACK at the UAS), calls/s",
            &thr,
        )?;
        chart(
            &a.out,
            &format!("pdd{suffix}"),
            &format!("{what}: real (lab, light) vs simulated PDD p50"),
            "offered calls/s",
            "PDD p50, ms",
            &pdd,
        )?;
    }
    eprintln!(
        "{n_ok} of {n} points within 10% (throughput) and 25% (PDD p50), {n_in_range} more within the range of their real runs; {:.1} s; results in {}",
        started.elapsed().as_secs_f64(),
        a.out.display()
    );
    Ok(())
}

/// `holdline sim bench`: one proxy (1 ms of CPU per call) at 0.9x and 5x with OCC and 5x
/// without control; simulated messages per second of wall time, one thread.
fn bench(a: &BenchArgs) -> anyhow::Result<()> {
    let mut total_msgs = 0u64;
    let mut total_wall = 0.0;
    for (name, local, factor) in [
        ("occ-0.9x", "occ", 0.9),
        ("occ-5x", "occ", 5.0),
        ("none-5x", "none", 5.0),
    ] {
        let sc = holdline_sim::bench_scenario(local, factor, a.seconds)?;
        let t0 = StdInstant::now();
        let out = World::new(&sc, 0)?.run(|_| {});
        let wall = t0.elapsed().as_secs_f64();
        total_msgs += out.messages;
        total_wall += wall;
        println!(
            "{name:<9} {:>9} messages ({:>8} parsed by servers) in {wall:.3} s: {:>9.0} messages/s",
            out.messages,
            out.servers.iter().map(|s| s.1.handled).sum::<u64>(),
            out.messages as f64 / wall.max(1e-9)
        );
    }
    println!(
        "all       {total_msgs:>9} messages in {total_wall:.3} s: {:>9.0} messages/s",
        total_msgs as f64 / total_wall.max(1e-9)
    );
    Ok(())
}

/// `holdline sim check`.
fn check(a: &CheckArgs) -> anyhow::Result<()> {
    use holdline_sim::check::{CheckOutcome, check_scenario, check_seed, random_scenario};
    if a.shrink {
        return shrink(a);
    }
    if let Some(path) = &a.scenario {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let sc = Scenario::from_toml(&path.display().to_string(), &text)?;
        let o = check_scenario(sc.seed, &sc, |w| w)?;
        for v in &o.violations {
            eprintln!("check: {}: {v}", path.display());
        }
        eprintln!(
            "check: {}: {} violations; {} calls set up, {} messages, {} crashes",
            path.display(),
            o.violations.len(),
            o.completed,
            o.messages,
            o.crashes
        );
        if o.violations.is_empty() {
            return Ok(());
        }
        anyhow::bail!("{} violated an invariant", path.display());
    }
    let seeds: Vec<u64> = match a.seed {
        Some(s) => vec![s],
        None => (a.first..a.first.saturating_add(a.seeds)).collect(),
    };
    if a.print {
        for &s in &seeds {
            println!("{}", random_scenario(s));
        }
    }
    let t0 = StdInstant::now();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let total = seeds.len();
    let outcomes: Vec<CheckOutcome> = par_map(
        &seeds,
        a.jobs,
        |&seed| {
            let o = check_seed(seed)?;
            for v in &o.violations {
                eprintln!("check: seed {seed}: {v}");
            }
            done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(o)
        },
        || {
            let n = done.load(std::sync::atomic::Ordering::Relaxed);
            eprintln!(
                "check: {n}/{total} seeds in {:.0} s",
                t0.elapsed().as_secs_f64()
            );
        },
    )?;
    let wall = t0.elapsed().as_secs_f64();
    let failed: Vec<&CheckOutcome> = outcomes
        .iter()
        .filter(|o| !o.violations.is_empty())
        .collect();
    let calls: u64 = outcomes.iter().map(|o| o.completed).sum();
    let messages: u64 = outcomes.iter().map(|o| o.messages).sum();
    let registrations: u64 = outcomes.iter().map(|o| o.registrations).sum();
    let bindings: u64 = outcomes.iter().map(|o| o.acked_bindings).sum();
    let crashes: u64 = outcomes.iter().map(|o| o.crashes).sum();
    let with_reg = outcomes.iter().filter(|o| o.registrations > 0).count();
    eprintln!(
        "check: {total} seeds, {} with violations; {calls} calls set up, {messages} messages simulated in {wall:.1} s ({:.0} calls/min)",
        failed.len(),
        calls as f64 / wall.max(1e-9) * 60.0
    );
    eprintln!(
        "check: registrations in {with_reg} seeds: {registrations} REGISTERs acknowledged, {bindings} bindings, {crashes} crashes and restarts"
    );
    // Faults per kind: seeds that drew the kind, and how many of it.
    let mut per_kind = serde_json::Map::new();
    for (k, (name, _)) in holdline_sim::check::Faults::default()
        .kinds()
        .iter()
        .enumerate()
    {
        let get = |o: &CheckOutcome| o.faults.kinds()[k].1;
        let seeds_with = outcomes.iter().filter(|o| get(o) > 0).count();
        let n: u64 = outcomes.iter().map(get).sum();
        eprintln!("check: {name}: {n} in {seeds_with} seeds");
        per_kind.insert(
            (*name).into(),
            serde_json::json!({ "seeds": seeds_with, "count": n }),
        );
    }
    let no_new = outcomes.iter().filter(|o| !o.faults.any_new()).count();
    let partition_drops: u64 = outcomes.iter().map(|o| o.partition_drops).sum();
    let silent_drops: u64 = outcomes.iter().map(|o| o.silent_drops).sum();
    let deregistrations: u64 = outcomes.iter().map(|o| o.deregistrations).sum();
    let forgiven: u64 = outcomes.iter().map(|o| o.forgiven_bindings).sum();
    eprintln!(
        "check: {no_new} seeds without a fault beyond the links'; {partition_drops} datagrams lost to partitions, {silent_drops} dropped by silent callees, {deregistrations} de-registrations acknowledged, {forgiven} bindings lost with a store (not checked)"
    );
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let json = serde_json::json!({
            "seeds": total,
            "failed": failed.iter().map(|o| o.seed).collect::<Vec<_>>(),
            "calls": calls,
            "messages": messages,
            "registrations": registrations,
            "acked_bindings": bindings,
            "crashes": crashes,
            "faults": per_kind,
            "seeds_without_new_faults": no_new,
            "partition_drops": partition_drops,
            "silent_drops": silent_drops,
            "deregistrations": deregistrations,
            "forgiven_bindings": forgiven,
            "wall_s": wall,
            "outcomes": outcomes.iter().map(|o| serde_json::json!({
                "seed": o.seed,
                "violations": o.violations,
                "completed": o.completed,
                "messages": o.messages,
                "events": o.events,
                "registrations": o.registrations,
                "acked_bindings": o.acked_bindings,
                "crashes": o.crashes,
                "partition_drops": o.partition_drops,
                "silent_drops": o.silent_drops,
                "deregistrations": o.deregistrations,
            })).collect::<Vec<_>>(),
        });
        let path = dir.join("check.json");
        std::fs::write(&path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if failed.is_empty() {
        return Ok(());
    }
    for o in &failed {
        eprintln!(
            "check: seed {} failed; replay: holdline sim check --seed {} --print; shrink: holdline sim check --seed {} --shrink --out seed-{}.toml",
            o.seed, o.seed, o.seed, o.seed
        );
    }
    anyhow::bail!("{} of {total} seeds violated an invariant", failed.len())
}

/// `holdline sim check --shrink`: the seed's (or file's) scenario reduced while it fails
/// with the same kind of violation.
fn shrink(a: &CheckArgs) -> anyhow::Result<()> {
    use holdline_sim::check::{check_scenario, random_scenario};
    let text = match (&a.scenario, a.seed) {
        (Some(path), _) => {
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
        }
        (None, Some(seed)) => random_scenario(seed),
        (None, None) => anyhow::bail!("--shrink needs --seed S or --scenario FILE"),
    };
    let t0 = StdInstant::now();
    let out = holdline_sim::shrink::shrink(&text, a.max_runs, |sc| {
        check_scenario(sc.seed, sc, |w| w)
            .map(|o| o.violations)
            .unwrap_or_default()
    })?;
    eprintln!(
        "shrink: kept {} reductions in {} runs ({:.1} s); it still fails with a {} violation: {}",
        out.kept,
        out.runs,
        t0.elapsed().as_secs_f64(),
        out.kind,
        out.violations.first().map_or("", String::as_str)
    );
    let text = format!(
        "# reduced by holdline sim check --shrink ({} violation)\n{}",
        out.kind, out.text
    );
    match &a.out {
        Some(path) => {
            std::fs::write(path, &text).with_context(|| format!("writing {}", path.display()))?;
            eprintln!(
                "shrink: replay: holdline sim check --scenario {}",
                path.display()
            );
        }
        None => {
            print!("{text}");
            eprintln!("shrink: replay: save it to FILE, then holdline sim check --scenario FILE");
        }
    }
    Ok(())
}

/// Runs `tasks` (scenario, run index) on `jobs` threads; outputs in task order.
fn par_runs(tasks: &[(Scenario, u64)], jobs: usize) -> anyhow::Result<Vec<RunOutput>> {
    par_map(
        tasks,
        jobs,
        |(sc, r)| Ok(World::new(sc, *r)?.run(|_| {})),
        || {},
    )
}

/// `f` over `items` on `jobs` threads, results in item order; `tick` is called every 5 s
/// while they run (progress lines).
fn par_map<T: Sync, R: Send>(
    items: &[T],
    jobs: usize,
    f: impl Fn(&T) -> anyhow::Result<R> + Sync,
    mut tick: impl FnMut(),
) -> anyhow::Result<Vec<R>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut all: Vec<(usize, R)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs.clamp(1, 64))
            .map(|_| {
                scope.spawn(|| -> anyhow::Result<Vec<(usize, R)>> {
                    let mut mine = Vec::new();
                    loop {
                        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(item) = items.get(k) else {
                            return Ok(mine);
                        };
                        mine.push((k, f(item)?));
                    }
                })
            })
            .collect();
        let mut last = StdInstant::now();
        while handles.iter().any(|h| !h.is_finished()) {
            std::thread::sleep(std::time::Duration::from_millis(100));
            if last.elapsed().as_secs_f64() >= 5.0 {
                last = StdInstant::now();
                tick();
            }
        }
        let mut all = Vec::new();
        for h in handles {
            match h.join() {
                Ok(v) => all.extend(v?),
                Err(_) => anyhow::bail!("a simulation thread panicked"),
            }
        }
        Ok(all)
    })?;
    all.sort_by_key(|(k, _)| *k);
    Ok(all.into_iter().map(|(_, o)| o).collect())
}

/// One point of a sweep: its scenario and what it sets.
struct SweepPoint {
    /// `--local`/`--mechanism` (or "scenario").
    name: String,
    /// `--scale`.
    scale: f64,
    /// The `--sweep` settings, `(key, value)`.
    settings: Vec<(String, String)>,
    /// Its directory under `--out`.
    dir: String,
    sc: Scenario,
    runs: u64,
}

/// A directory name from a point's description: `*` → `all`, anything but letters, digits
/// and `._=,+-` → `_`.
fn dir_name(text: &str) -> String {
    text.replace('*', "all")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._=,+-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `holdline sim run --local A,B --scale X,Y --sweep KEY=V1,V2`: every combination of the
/// points, `runs` runs each (the `--sweep` settings are applied to the scenario's text before
/// it is checked, then `--local`/`--mechanism`, then `--scale`).
fn sweep(a: &RunArgs, file: &str, text: &str) -> anyhow::Result<()> {
    if a.pcap.is_some() {
        anyhow::bail!("--pcap captures run 0 of a plain run; it does not go with a sweep");
    }
    let started = StdInstant::now();
    let sweeps: Vec<holdline_sim::Sweep> = a
        .sweep
        .iter()
        .map(|s| s.parse().map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<_>>()?;
    for (i, s) in sweeps.iter().enumerate() {
        anyhow::ensure!(
            !sweeps[..i].iter().any(|o| o.key == s.key),
            "--sweep {}: the key is swept twice",
            s.key
        );
    }
    let combos = holdline_sim::sweep_points(&sweeps);
    // (mechanism, is `--mechanism`) per point; `None`: the scenario's own.
    let locals: Vec<Option<(String, bool)>> = if !a.mechanism.is_empty() {
        a.mechanism
            .iter()
            .map(|m| Some((m.clone(), true)))
            .collect()
    } else if a.local.is_empty() {
        vec![None]
    } else {
        a.local.iter().map(|l| Some((l.clone(), false))).collect()
    };
    let scales = if a.scale.is_empty() {
        vec![1.0]
    } else {
        a.scale.clone()
    };
    // Directory names as before when only --local/--mechanism/--scale are given.
    let legacy = !a.local.is_empty() || !a.mechanism.is_empty() || !a.scale.is_empty();
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let mut points: Vec<SweepPoint> = Vec::new();
    for l in &locals {
        for settings in &combos {
            let point_base = Scenario::from_toml_with(file, text, settings)?;
            for &x in &scales {
                anyhow::ensure!(x.is_finite() && x >= 0.0, "--scale {x}: not a factor");
                let mut sc = point_base.clone();
                if let Some((m, true)) = l {
                    sc = point_base
                        .with_mechanism(m)
                        .map_err(|e| anyhow::anyhow!("--mechanism: {e}"))?;
                } else if let Some((l, _)) = l {
                    for s in &mut sc.servers {
                        s.local = l.clone();
                        s.controller()
                            .map_err(|e| anyhow::anyhow!("--local {l}: {e}"))?;
                    }
                }
                if let Some(seed) = a.seed {
                    sc.seed = seed;
                }
                for u in &mut sc.uac {
                    for st in &mut u.steps {
                        let r = point_base.step_rate(st);
                        st.rate_cps = Some(r * x);
                        st.factor = None;
                    }
                }
                let name = l
                    .as_ref()
                    .map_or_else(|| "scenario".into(), |(m, _)| m.clone());
                let mut parts: Vec<String> = Vec::new();
                if legacy {
                    parts.push(format!("{name}-{x}x"));
                }
                parts.extend(settings.iter().map(|(k, v)| format!("{k}={v}")));
                let runs = a.runs.unwrap_or(sc.runs).max(1);
                points.push(SweepPoint {
                    name,
                    scale: x,
                    settings: settings.clone(),
                    dir: dir_name(&parts.join(",")),
                    sc,
                    runs,
                });
            }
        }
    }
    let tasks: Vec<(Scenario, u64)> = points
        .iter()
        .flat_map(|p| (0..p.runs).map(move |r| (p.sc.clone(), r)))
        .collect();
    if !a.quiet {
        eprintln!(
            "sim sweep: {} points, {} runs on {} thread(s)",
            points.len(),
            tasks.len(),
            a.jobs
        );
    }
    let outs = par_runs(&tasks, a.jobs)?;
    let keys: Vec<&str> = sweeps.iter().map(|s| s.key.as_str()).collect();
    let mut csv = String::from("local,scale,");
    for k in &keys {
        csv.push_str(k);
        csv.push(',');
    }
    csv.push_str("offered_cps,offered_ci95,goodput_cps,goodput_ci95,throughput_cps,throughput_ci95,rejected_cps,failed_other_cps,pdd_p50_ms,pdd_p50_ci95,messages_per_run\n");
    let mut json = Vec::new();
    // The x axis of the plots: the offered load when --scale is given (or nothing is
    // swept but --local/--mechanism), else the last numeric --sweep key, else the point's
    // index in its series.
    let x_key: Option<usize> = if a.scale.is_empty() {
        sweeps
            .iter()
            .rposition(|s| s.values.iter().all(|v| v.parse::<f64>().is_ok()))
    } else {
        None
    };
    let x_label = match x_key {
        Some(i) => sweeps[i].key.clone(),
        None if a.scale.is_empty() && !sweeps.is_empty() => "point".to_owned(),
        None => "offered calls/s".to_owned(),
    };
    let mut good: Vec<Series> = Vec::new();
    let mut pdd: Vec<Series> = Vec::new();
    let mut total_msgs = 0u64;
    let mut offset = 0usize;
    for p in &points {
        let mine = &outs[offset..offset + p.runs as usize];
        offset += p.runs as usize;
        let runs = p.runs;
        let dir = a.out.join(&p.dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let results = Results::from_runs(&p.sc, mine);
        write(&dir.join("results.json"), &results.to_json())?;
        write(&dir.join("points.csv"), &points_csv(&results))?;
        // Network-wide per run: sums over populations (a step's throughput is already
        // network-wide), the PDD median averaged over them.
        let per_run = |f: &dyn Fn(&holdline_sim::world::StepOutcome) -> f64, sum: bool| {
            mine.iter()
                .map(|o| {
                    let v: Vec<f64> = o.steps.iter().map(f).collect();
                    let s: f64 = v.iter().sum();
                    if sum { s } else { s / v.len().max(1) as f64 }
                })
                .collect::<Vec<f64>>()
        };
        let e = |v: Vec<f64>| holdline_sim::Estimate::of(&v);
        let offered = e(per_run(&|s| s.offered_cps, true));
        let goodput = e(per_run(&|s| s.goodput_cps, true));
        let thr = e(per_run(&|s| s.throughput_cps, false));
        let rej = e(per_run(&|s| s.rejected_cps, true));
        let other = e(per_run(&|s| s.failed_other_cps, true));
        let p50 = e(per_run(&|s| s.pdd_p50_ms, false));
        let msgs = mine.iter().map(|o| o.messages).sum::<u64>() / runs;
        total_msgs += mine.iter().map(|o| o.messages).sum::<u64>();
        let (name, x) = (&p.name, p.scale);
        csv.push_str(&format!("{name},{x},"));
        for (_, v) in &p.settings {
            csv.push_str(v);
            csv.push(',');
        }
        csv.push_str(&format!(
            "{:.2},{:.2},{:.2},{:.2},{:.2},{:.2},{:.2},{:.2},{:.1},{:.1},{msgs}\n",
            offered.mean,
            offered.ci95,
            goodput.mean,
            goodput.ci95,
            thr.mean,
            thr.ci95,
            rej.mean,
            other.mean,
            p50.mean,
            p50.ci95
        ));
        if !a.quiet {
            eprintln!(
                "{:<24} offered {:>7.1}/s  goodput {:>7.1} ± {:>5.1}/s  throughput {:>7.1} ± {:>5.1}/s  503 {:>7.1}/s  PDD p50 {:>8.1} ms",
                p.dir,
                offered.mean,
                goodput.mean,
                goodput.ci95,
                thr.mean,
                thr.ci95,
                rej.mean,
                p50.mean
            );
        }
        // The series: the point without its x-axis parameter.
        let mut label: Vec<String> = Vec::new();
        if !a.local.is_empty() || !a.mechanism.is_empty() || p.settings.is_empty() {
            label.push(name.clone());
        }
        // A key swept over one value is the same on every line: the title's, not a label's.
        let constant = |k: &str| sweeps.iter().any(|s| s.key == k && s.values.len() == 1);
        for (i, (k, v)) in p.settings.iter().enumerate() {
            if Some(i) != x_key && !constant(k) {
                label.push(format!("{k}={v}"));
            }
        }
        if label.is_empty() {
            label.push(name.clone());
        }
        let label = label.join(",");
        for (series, y) in [(&mut good, goodput.mean), (&mut pdd, p50.mean)] {
            let k = series.iter().position(|s| s.0 == label);
            let n = k.map_or(0, |k| series[k].1.len());
            let px = match x_key {
                Some(i) => p.settings[i].1.parse::<f64>().unwrap_or(n as f64),
                None if a.scale.is_empty() && !sweeps.is_empty() => n as f64,
                None => offered.mean,
            };
            match k {
                Some(k) => series[k].1.push((px, y)),
                None => series.push((label.clone(), vec![(px, y)])),
            }
        }
        let mut point = serde_json::json!({
            "local": name, "scale": x, "runs": runs, "offered_cps": offered,
            "goodput_cps": goodput, "throughput_cps": thr, "rejected_cps": rej,
            "failed_other_cps": other, "pdd_p50_ms": p50, "messages_per_run": msgs,
        });
        if !p.settings.is_empty() {
            let set: serde_json::Map<String, serde_json::Value> = p
                .settings
                .iter()
                .map(|(k, v)| (k.clone(), holdline_sim::scenario::sweep_json(v)))
                .collect();
            point["point"] = serde_json::Value::String(p.dir.clone());
            point["sweep"] = serde_json::Value::Object(set);
        }
        json.push(point);
    }
    write(&a.out.join("sweep.csv"), &csv)?;
    let runs = points.first().map_or(1, |p| p.runs);
    let base_name = points.first().map_or("", |p| p.sc.name.as_str());
    write(
        &a.out.join("sweep.json"),
        &serde_json::to_string_pretty(&serde_json::json!({
            "scenario": base_name, "runs": runs, "points": json,
        }))?,
    )?;
    let title = if base_name.is_empty() {
        "sim"
    } else {
        base_name
    };
    chart(
        &a.out,
        "sweep-goodput",
        &format!("{title}: goodput (200 OK within the window, network-wide; mean of {runs} runs)"),
        &x_label,
        "goodput, calls/s",
        &good,
    )?;
    chart(
        &a.out,
        "sweep-pdd",
        &format!("{title}: PDD p50 (mean over populations and {runs} runs)"),
        &x_label,
        "PDD p50, ms",
        &pdd,
    )?;
    let wall = started.elapsed().as_secs_f64();
    if !a.quiet {
        eprintln!(
            "{} runs in {wall:.1} s ({total_msgs} messages, {:.0} per second of wall time); results in {}",
            tasks.len(),
            total_msgs as f64 / wall.max(1e-9),
            a.out.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{LabKind, Task, point_scenario, real_points};
    use holdline_sim::{Scenario, World};

    fn scenario(file: &str) -> Scenario {
        let path = format!("{}/../../lab/sim/{file}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).expect("scenario file");
        Scenario::from_toml(&path, &text).expect("scenario")
    }

    fn task(mechanism: &str, ses: u32, rate: f64, service_us: Option<f64>) -> Task {
        Task {
            mechanism: mechanism.to_owned(),
            ses,
            load_factor: 1.0,
            rate,
            service_us,
            real_pdd_p50: None,
        }
    }

    #[test]
    fn a_feedback_point_gets_one_se_and_one_uac_per_se_with_the_load_split() {
        let base = scenario("se-re.toml");
        let sc = point_scenario(
            &base,
            LabKind::Feedback,
            &task("occ", 3, 300.0, Some(1100.0)),
            5.0,
        )
        .expect("point");
        let names: Vec<&str> = sc.servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["re", "se0", "se1", "se2"]);
        let re = &sc.servers[0];
        assert_eq!((re.local.as_str(), re.service_us), ("occ", 1100.0));
        // The SEs keep their own cost; holdline's default control, no feedback.
        assert!(
            sc.servers[1..]
                .iter()
                .all(|s| s.service_us == 20.0 && s.local == "occ")
        );
        let uacs: Vec<(&str, &str, Option<f64>)> = sc
            .uac
            .iter()
            .map(|u| (u.name.as_str(), u.target.as_str(), u.steps[0].rate_cps))
            .collect();
        assert_eq!(
            uacs,
            [
                ("uac0", "se0", Some(100.0)),
                ("uac1", "se1", Some(100.0)),
                ("uac2", "se2", Some(100.0))
            ]
        );
        let routes: Vec<(&str, &str)> = sc
            .routes
            .iter()
            .map(|r| (r.server.as_str(), r.to.as_str()))
            .collect();
        assert_eq!(
            routes,
            [("re", "uas"), ("se0", "re"), ("se1", "re"), ("se2", "re")]
        );
        // Mechanism `none`: no control anywhere, as the lab's SEs run `--overload=none`.
        let none = point_scenario(&base, LabKind::Feedback, &task("none", 2, 200.0, None), 5.0)
            .expect("point");
        assert!(none.servers.iter().all(|s| s.local == "none"));
        assert_eq!(none.servers[0].service_us, 1000.0);
        // The copies run: every SE carries calls to the one UAS.
        let out = World::new(&sc, 0).expect("world").run(|_| {});
        assert_eq!(out.steps.len(), 3);
        assert!(out.completed > 0);
        for (name, c) in &out.servers[1..] {
            assert!(c.handled > 0, "{name} handled nothing");
        }
    }

    #[test]
    fn a_udp_overload_point_sets_the_measured_cost_of_its_server() {
        let base = scenario("udp-overload.toml");
        let sc = point_scenario(
            &base,
            LabKind::UdpOverload,
            &task("queue-limit", 1, 280.0, Some(1234.0)),
            8.0,
        )
        .expect("point");
        assert_eq!(sc.servers[0].local, "queue-limit");
        assert_eq!(sc.servers[0].service_us, 1234.0);
        assert_eq!(sc.uac[0].steps[0].rate_cps, Some(280.0));
        let unmeasured = point_scenario(
            &base,
            LabKind::UdpOverload,
            &task("occ", 1, 280.0, None),
            8.0,
        )
        .expect("point");
        assert_eq!(unmeasured.servers[0].service_us, base.servers[0].service_us);
    }

    #[test]
    fn real_points_group_by_ses_and_take_the_median_cost() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("results.json");
        let point = |ses: u32, lf: f64, thr: f64, cost: f64| {
            serde_json::json!({"experiment": "feedback", "mechanism": "occ", "ses": ses,
                "load_factor": lf, "capacity_cps": 150.0, "offered_cps": 150.0 * lf,
                "calls_attempted": 1500.0 * lf, "throughput_cps": thr, "pdd_p50_ms": 10.0,
                "re_service_us_measured": cost,
                "retrans_invite": thr * 10.0, "retrans_200": cost})
        };
        let json = serde_json::json!({"points": [
            point(1, 2.0, 140.0, 1000.0), point(3, 2.0, 130.0, 1100.0),
            point(1, 2.0, 150.0, 1200.0), point(1, 2.0, 160.0, 1300.0),
        ]});
        std::fs::write(&path, json.to_string()).expect("write");
        let (pts, duration, kind) = real_points(&path).expect("points");
        assert_eq!(kind, LabKind::Feedback);
        assert_eq!(duration, 10.0);
        assert_eq!(pts.len(), 2);
        let one = pts.iter().find(|p| p.ses == 1).expect("1 SE");
        assert_eq!(
            (one.throughput, one.service_us, one.rate),
            (150.0, Some(1200.0), 300.0)
        );
        assert_eq!(one.retransmitted, Some([1500.0, 1200.0]));
        let three = pts.iter().find(|p| p.ses == 3).expect("3 SEs");
        assert_eq!((three.throughput, three.service_us), (130.0, Some(1100.0)));
    }

    /// The real server's reads by kind come from each run's metrics file in `runs/`, named
    /// by the run's `tag` or, in files written before the lab recorded it, by the lab's rule;
    /// every worker and socket summed, the median over the runs that have a file. Points
    /// without retransmission counts give none.
    #[test]
    fn real_points_read_what_the_server_read_by_kind_from_the_runs_metrics() {
        let dir = tempfile::tempdir().expect("tempdir");
        let runs = dir.path().join("runs");
        std::fs::create_dir(&runs).expect("runs");
        let metrics = |acks: u32| {
            format!(
                "# HELP holdline_sip_requests_in_total Requests.\n\
                 holdline_sip_requests_in_total{{worker=\"0\",method=\"INVITE\"}} 100\n\
                 holdline_sip_requests_in_total{{worker=\"0\",method=\"ACK\"}} {acks}\n\
                 holdline_sip_requests_in_total{{worker=\"1\",method=\"ACK\"}} 1\n\
                 holdline_sip_requests_in_total{{worker=\"0\",method=\"BYE\"}} 7\n\
                 holdline_sip_responses_in_total{{worker=\"0\",class=\"2xx\"}} 50\n\
                 holdline_sip_responses_out_total{{worker=\"0\",class=\"2xx\"}} 999\n\
                 holdline_sip_responses_in_total{{worker=\"0\",class=\"5xx\"}} 3\n\
                 holdline_udp_kernel_drops_total{{socket=\"shared\"}} 40\n\
                 holdline_udp_kernel_drops_total{{socket=\"invite\"}} 2\n\
                 holdline_loop_busy_seconds_bucket{{worker=\"0\",le=\"+Inf\"}} 600\n\
                 holdline_loop_busy_seconds_count{{worker=\"0\"}} 600\n\
                 holdline_loop_busy_seconds_sum{{worker=\"0\"}} 1.25\n\
                 holdline_processing_seconds_sum{{worker=\"0\"}} 1.0\n\
                 holdline_messages_out_total{{worker=\"0\",transport=\"udp\"}} 77\n\
                 holdline_messages_out_total{{worker=\"0\",transport=\"tcp\"}} 5\n\
                 holdline_queue_delay_seconds_count{{worker=\"0\"}} 994\n\
                 holdline_invite_queue_delay_seconds_sum{{worker=\"0\"}} 122.7\n\
                 holdline_invite_queue_delay_seconds_count{{worker=\"0\"}} 480\n\
                 holdline_overload_rejection_seconds_total{{worker=\"0\"}} 0.2125\n\
                 holdline_overload_rejection_seconds_total{{worker=\"1\"}} 0.0005\n"
            )
        };
        std::fs::write(runs.join("none-2x-serve.metrics"), metrics(9)).expect("write");
        std::fs::write(runs.join("none-2x-r1-serve.metrics"), metrics(29)).expect("write");
        std::fs::write(runs.join("custom-serve.metrics"), metrics(19)).expect("write");
        let point = |run: u32, tag: Option<&str>| {
            serde_json::json!({"experiment": "udp-overload", "mechanism": "none", "ses": null,
                "load_factor": 2.0, "capacity_cps": 150.0, "offered_cps": 300.0,
                "calls_attempted": 3000.0, "throughput_cps": 140.0, "pdd_p50_ms": 10.0,
                "run": run, "tag": tag})
        };
        let path = dir.path().join("results.json");
        // Run 3 has no file: it counts for throughput but not for the kinds.
        let json = serde_json::json!({"points": [
            point(0, None), point(1, None), point(2, Some("custom")), point(3, None),
        ]});
        std::fs::write(&path, json.to_string()).expect("write");
        let (pts, _, _) = real_points(&path).expect("points");
        assert_eq!(pts[0].retransmitted, None);
        let k = pts[0].received.expect("kinds read");
        assert_eq!(pts[0].runs, 4);
        // invites, acks, byes, 1xx, 2xx, 3xx-6xx, drops; loop iterations, main and INVITE
        // socket reads (histogram counts, not their buckets or sums); datagrams sent over UDP,
        // the loop's busy time outside the handling (ms); wake-ups, which the server does not
        // count; the time its rejection budget counted as rejecting (ms, every worker).
        assert_eq!(
            k[..12],
            [
                100.0, 20.0, 7.0, 0.0, 50.0, 3.0, 42.0, 600.0, 994.0, 480.0, 77.0, 250.0
            ]
        );
        assert!(k[12].is_nan());
        assert!((k[13] - 213.0).abs() < 1e-9, "{}", k[13]);
        // A file without the handling histogram has no loop cost (not its whole busy time).
        let old = super::kinds_of_metrics("holdline_loop_busy_seconds_sum{worker=\"0\"} 2\n");
        assert!(old[11].is_nan());
        // Without the files, no kinds (and no error).
        std::fs::remove_dir_all(&runs).expect("rm");
        let (pts, _, _) = real_points(&path).expect("points");
        assert_eq!(pts[0].received, None);
    }
}
