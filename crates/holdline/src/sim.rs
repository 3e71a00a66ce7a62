//! `holdline sim`: the IO around the pure simulator (`holdline-sim`): reading the scenario,
//! progress, result files and plots.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant as StdInstant;

use anyhow::Context as _;
use clap::Subcommand;
use holdline_lab::plot::{Series, chart};
use holdline_sim::{Results, RunOutput, Scenario, World, series_csv};

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
}

pub(crate) fn main(args: SimArgs) -> ExitCode {
    let result = match args.command {
        SimCommand::Run(a) => run(&a),
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
    let mut sc = Scenario::from_toml(&file, &text)?;
    if let Some(s) = a.seed {
        sc.seed = s;
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
                        mine.push((r, one_run(&sc, r, runs, total_s, quiet)?));
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
    let outputs: Vec<RunOutput> = outputs.into_iter().map(|(_, o)| o).collect();
    let results = Results::from_runs(&sc, &outputs);
    write(&a.out.join("results.json"), &results.to_json())?;
    write(&a.out.join("timeseries.csv"), &series_csv(&outputs))?;
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
) -> anyhow::Result<RunOutput> {
    let t0 = StdInstant::now();
    let world = World::new(sc, r)?;
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
