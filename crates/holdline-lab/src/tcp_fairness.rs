//! `holdline lab tcp-fairness`: seed 000's unequal load (Fig. 36, l. 401-410) on the SE → RE
//! test bed of [`tcp_overload`](crate::tcp_overload): three SEs whose UACs offer load in a
//! 3:2:1 ratio, ICS + buffer minimization + smart forwarding, 0.5× to 10× the RE's capacity.
//!
//! The paper found the throughputs following the offered ratio below capacity and converging
//! to equal shares at heavy overload: *service-provider-centric* fairness (each upstream the
//! same share). Its other notion, *end-user-centric* fairness, gives each upstream a share in
//! proportion to the load it is offered, so that every caller has the same chance. The RE
//! option that delivers it is `[overload] defer_fairness = "offered"` (the SEs tell the load
//! they are offered with `advertise_offered_load`; the RE shares its idle time among their
//! connections in proportion, see `holdline_overload::DeferFairness`). Each point runs with
//! each `--fairness` (`equal`, the default sharing; `offered`).
//!
//! Measured per point: each SE's throughput (calls its UAC completed per second of load)
//! and offered load; Jain's index over the throughputs (1 = equal shares:
//! service-provider-centric) and over throughput ÷ offered (1 = shares in proportion to the
//! offered load: end-user-centric); and each SE's share of the throughput against its share
//! of the offered load (the largest relative deviation). Output in `--out DIR`:
//! `results.json`, `points.csv`, `summary.md`, plots `per-se` (each SE's throughput vs the
//! total offered), `jain-equal`, `jain-offered`, `deviation` (SVG and PNG), and every
//! process's files under `runs/`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use serde::{Deserialize, Serialize};

use crate::error::{LabError, Result};
use crate::plot;
use crate::runner::{RunHeader, SweepArgs, check_tools, holdline_exe, lab_main};
use crate::tcp_overload::{
    Point, Spec, capacity_phase, capacity_steps, nominal_capacity, progress, run_point,
};

/// The RE's sharing modes.
const FAIRNESS: [&str; 2] = ["equal", "offered"];

/// `holdline lab tcp-fairness` options.
#[derive(Debug, Parser)]
#[command(
    name = "holdline lab tcp-fairness",
    about = "seed 000's unequal load: three SEs offered 3:2:1, per-SE throughput, equal vs offered-load sharing at the RE"
)]
pub struct Args {
    /// The sweep's options (`--mechanisms` is ignored: ICS).
    #[command(flatten)]
    pub sweep: SweepArgs,
    /// Results directory.
    #[arg(long, value_name = "DIR", default_value = "lab-results/tcp-fairness")]
    pub out: PathBuf,
    /// Skip the capacity phase and use this capacity, calls/s.
    #[arg(long, value_name = "CPS")]
    pub capacity: Option<f64>,
    /// Relative offered load per SE, comma-separated (one SE each).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "3,2,1"
    )]
    pub shares: Vec<f64>,
    /// The RE's sharing modes to run, comma-separated: equal, offered.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "equal,offered"
    )]
    pub fairness: Vec<String>,
}

/// One measured point with its fairness figures.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FairPoint {
    /// The RE's sharing: `equal` or `offered`.
    pub fairness: String,
    /// Offered calls/s per SE, as its UAC measured it (the rate × its share when the report
    /// is missing).
    pub offered_per_se: Vec<f64>,
    /// Jain's index over the SEs' throughputs (service-provider-centric).
    pub jain_equal: f64,
    /// Jain's index over throughput ÷ offered (end-user-centric).
    pub jain_offered: f64,
    /// Each SE's share of the throughput ÷ its share of the offered load.
    pub share_ratio: Vec<f64>,
    /// The largest |share ratio − 1| (0: exactly in proportion to the offered load).
    pub max_deviation: f64,
    /// The point.
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
    /// Measured capacity.
    pub capacity_cps: f64,
    /// Capacity steps.
    pub capacity_steps: Vec<Point>,
    /// Relative offered load per SE.
    pub shares: Vec<f64>,
    /// The points.
    pub points: Vec<FairPoint>,
    /// Wall time of the run, s.
    pub elapsed_s: f64,
}

/// Entry point of `holdline lab tcp-fairness ARGS`.
pub fn main(args: Vec<String>) -> ExitCode {
    lab_main(
        "tcp-fairness",
        args,
        |a: &Args| a.out.clone(),
        run,
        |r: &Results| r.elapsed_s,
    )
}

/// Jain's index, guarded against nothing measured.
fn jain(v: &[f64]) -> f64 {
    if v.iter().all(|x| *x <= 0.0) {
        0.0
    } else {
        holdline_metrics::jain_index(v)
    }
}

/// The fairness figures of `p` with `offered` calls/s per SE.
fn figures(fairness: &str, offered: Vec<f64>, p: Point) -> FairPoint {
    let thr = &p.per_se_cps;
    let total_thr: f64 = thr.iter().sum();
    let total_off: f64 = offered.iter().sum();
    let normalized: Vec<f64> = thr
        .iter()
        .zip(&offered)
        .map(|(t, o)| if *o > 0.0 { t / o } else { 0.0 })
        .collect();
    let share_ratio: Vec<f64> = thr
        .iter()
        .zip(&offered)
        .map(|(t, o)| {
            if total_thr > 0.0 && *o > 0.0 && total_off > 0.0 {
                (t / total_thr) / (o / total_off)
            } else {
                0.0
            }
        })
        .collect();
    FairPoint {
        fairness: fairness.to_owned(),
        jain_equal: jain(thr),
        jain_offered: jain(&normalized),
        max_deviation: share_ratio
            .iter()
            .map(|r| (r - 1.0).abs())
            .fold(0.0f64, f64::max),
        share_ratio,
        offered_per_se: offered,
        point: p,
    }
}

/// The calls/s each of the `n` UACs of point `tag` offered, from their reports in `runs`
/// (Poisson arrivals: a UAC asked for 12.5 calls/s offered 15.0 in 15 s, so its share is
/// judged against what it offered, not what it was asked); `None` if a report is missing.
fn measured_offered(runs: &Path, tag: &str, n: usize) -> Option<Vec<f64>> {
    (0..n)
        .map(|i| {
            let r = crate::generator::read_json(&runs.join(format!("{tag}-uac{i}.json"))).ok()?;
            let x = crate::generator::num(&r, &["offered_cps"]);
            (x.is_finite() && x > 0.0).then_some(x)
        })
        .collect()
}

/// Runs the experiment and writes its results.
pub fn run(args: &Args) -> Result<Results> {
    if args.sweep.replot {
        let mut r: Results = crate::runner::read_results(&args.out)?;
        // Offered loads as the UACs measured them, where their reports are still there.
        let runs = args.out.join("runs");
        for fp in &mut r.points {
            if let Some(offered) = measured_offered(&runs, &fp.point.tag, r.shares.len()) {
                *fp = figures(&fp.fairness, offered, fp.point.clone());
            }
        }
        write(&args.out, &r)?;
        return Ok(r);
    }
    check_tools()?;
    if let Some(bad) = args
        .fairness
        .iter()
        .find(|f| !FAIRNESS.contains(&f.as_str()))
    {
        return Err(LabError::Precondition(format!(
            "unknown --fairness `{bad}` (known: equal, offered)"
        )));
    }
    if args.shares.len() < 2
        || args.shares.len() > 16
        || args.shares.iter().any(|s| !s.is_finite() || *s <= 0.0)
    {
        return Err(LabError::Precondition(
            "--shares: 2 to 16 positive numbers, one per SE".into(),
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
        .unwrap_or(if quick { 5.0 } else { 15.0 });
    let drain = if quick { 5.0 } else { 10.0 };
    let loads = if !args.sweep.loads.is_empty() {
        args.sweep.loads.clone()
    } else if quick {
        vec![0.5, 2.0, 5.0]
    } else {
        vec![0.5, 0.8, 1.0, 1.5, 2.0, 3.0, 5.0, 7.0, 10.0]
    };
    let ses = args.shares.len() as u32;
    let steps = capacity_steps(&args.sweep, args.capacity);
    let total = steps.len() + loads.len() * args.fairness.len();
    eprintln!(
        "tcp-fairness: RE {} µs per message, nominal capacity {:.0} calls/s; {} SEs offered {:?}; {} points of {duration:.0} s",
        args.sweep.cost_us,
        nominal_capacity(&args.sweep),
        ses,
        args.shares,
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
    let sum: f64 = args.shares.iter().sum();
    let mut points = Vec::new();
    for &f in &loads {
        for fairness in &args.fairness {
            let rate = (capacity * f).round();
            let spec = Spec::new(
                "ics",
                ses,
                rate,
                &args.sweep,
                duration,
                drain,
                format!("ics-{ses}se-{f}x-{fairness}"),
            )
            .shares(args.shares.clone())
            .fairness(Some(fairness.clone()));
            let p = run_point(&exe, &runs, &spec, capacity)?;
            done += 1;
            progress(done, total, &p, started, false);
            let offered = measured_offered(&runs, &p.tag, args.shares.len())
                .unwrap_or_else(|| args.shares.iter().map(|s| rate * s / sum).collect());
            let fp = figures(fairness, offered, p);
            eprintln!(
                "        {fairness}: per SE {:?} calls/s; Jain equal {:.3}, offered {:.3}; share ÷ offered share {:?}",
                fp.point
                    .per_se_cps
                    .iter()
                    .map(|x| (x * 10.0).round() / 10.0)
                    .collect::<Vec<_>>(),
                fp.jain_equal,
                fp.jain_offered,
                fp.share_ratio
                    .iter()
                    .map(|x| (x * 100.0).round() / 100.0)
                    .collect::<Vec<_>>(),
            );
            points.push(fp);
            crate::runner::write_partial(&args.out, "tcp-fairness", capacity, &points)?;
        }
    }
    let results = Results {
        header: RunHeader::new("tcp-fairness", started, quick, "tcp"),
        emulate_cost_us: args.sweep.cost_us,
        capacity_cps: capacity,
        capacity_steps,
        shares: args.shares.clone(),
        points,
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    write(&args.out, &results)?;
    let _ = std::fs::remove_file(args.out.join("results.partial.json"));
    Ok(results)
}

fn write(out: &Path, r: &Results) -> Result<()> {
    let json = serde_json::to_string_pretty(r).map_err(|e| LabError::Report {
        path: out.join("results.json"),
        reason: e.to_string(),
    })?;
    std::fs::write(out.join("results.json"), json)
        .map_err(|e| LabError::io("write results.json", e))?;
    let join = |v: &[f64], digits: usize| {
        v.iter()
            .map(|x| format!("{x:.digits$}"))
            .collect::<Vec<_>>()
            .join(";")
    };
    let mut csv = String::from(
        "fairness,load_factor,offered_cps,throughput_cps,offered_per_se,throughput_per_se,share_ratio,jain_equal,jain_offered,max_deviation,pdd_p50_ms,pdd_p99_ms,retrans_200,r503,r_other,calls_ok,calls_attempted,tag\n",
    );
    let mut md = format!(
        "# tcp-fairness: three SEs offered {:?}\n\nCapacity {:.0} calls/s (RE {} µs per message). Jain (equal): over the SEs' throughputs, 1 = equal shares (service-provider-centric). Jain (offered): over throughput ÷ offered, 1 = shares in proportion to the offered load (end-user-centric). Share ÷ offered share per SE; deviation = the largest |ratio − 1|.\n\n| RE sharing | load | offered | throughput | per SE | share ÷ offered share | Jain equal | Jain offered | deviation | PDD p99 ms |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        r.shares, r.capacity_cps, r.emulate_cost_us
    );
    let mut sorted: Vec<&FairPoint> = r.points.iter().collect();
    sorted.sort_by(|a, b| {
        a.fairness
            .cmp(&b.fairness)
            .then(a.point.load_factor.total_cmp(&b.point.load_factor))
    });
    for fp in &sorted {
        let p = &fp.point;
        csv.push_str(&format!(
            "{},{:.3},{:.1},{:.1},{},{},{},{:.4},{:.4},{:.3},{:.1},{:.1},{},{},{},{},{},{}\n",
            fp.fairness,
            p.load_factor,
            p.offered_cps,
            p.throughput_cps,
            join(&fp.offered_per_se, 1),
            join(&p.per_se_cps, 1),
            join(&fp.share_ratio, 3),
            fp.jain_equal,
            fp.jain_offered,
            fp.max_deviation,
            p.pdd_p50_ms,
            p.pdd_p99_ms,
            p.retrans_200,
            p.r503,
            p.r_other,
            p.calls_ok,
            p.calls_attempted,
            p.tag
        ));
        md.push_str(&format!(
            "| {} | {:.1}x | {:.0} | {:.1} | {} | {} | {:.3} | {:.3} | {:.2} | {:.0} |\n",
            fp.fairness,
            p.load_factor,
            p.offered_cps,
            p.throughput_cps,
            join(&p.per_se_cps, 1).replace(';', " / "),
            join(&fp.share_ratio, 2).replace(';', " / "),
            fp.jain_equal,
            fp.jain_offered,
            fp.max_deviation,
            p.pdd_p99_ms,
        ));
    }
    md.push_str(
        "\nThe paper (Fig. 36, l. 405-410): below capacity the throughputs follow 3:2:1; at light to moderate overload (up to 300 calls/s, 5x of its 60) the higher-load SEs have some advantage; above that the three deliver about the same throughput (service-provider-centric fairness).\n",
    );
    std::fs::write(out.join("points.csv"), csv).map_err(|e| LabError::io("write points.csv", e))?;
    std::fs::write(out.join("summary.md"), md).map_err(|e| LabError::io("write summary.md", e))?;

    let n = r.shares.len();
    let mut per_se = Vec::new();
    let mut jain_eq = Vec::new();
    let mut jain_off = Vec::new();
    let mut dev = Vec::new();
    let mut fairnesses: Vec<&str> = r.points.iter().map(|p| p.fairness.as_str()).collect();
    fairnesses.sort_unstable();
    fairnesses.dedup();
    for f in fairnesses {
        let mut pts: Vec<&FairPoint> = r.points.iter().filter(|p| p.fairness == f).collect();
        pts.sort_by(|a, b| a.point.offered_cps.total_cmp(&b.point.offered_cps));
        for i in 0..n {
            per_se.push((
                format!("{f}: SE {} (share {})", i + 1, r.shares[i]),
                pts.iter()
                    .filter_map(|p| Some((p.point.offered_cps, *p.point.per_se_cps.get(i)?)))
                    .collect::<Vec<_>>(),
            ));
        }
        let xy = |g: &dyn Fn(&FairPoint) -> f64| {
            pts.iter()
                .map(|p| (p.point.offered_cps, g(p)))
                .collect::<Vec<_>>()
        };
        jain_eq.push((f.to_owned(), xy(&|p| p.jain_equal)));
        jain_off.push((f.to_owned(), xy(&|p| p.jain_offered)));
        dev.push((f.to_owned(), xy(&|p| 100.0 * p.max_deviation)));
    }
    plot::chart(
        out,
        "per-se",
        &format!(
            "Throughput per SE, offered {:?} (capacity {:.0} calls/s), by the RE's sharing",
            r.shares, r.capacity_cps
        ),
        "offered calls/s, all SEs",
        "calls/s",
        &per_se,
    )?;
    plot::chart(
        out,
        "jain-equal",
        "Jain's index over the SEs' throughputs (1: equal shares, service-provider-centric)",
        "offered calls/s, all SEs",
        "Jain's index",
        &jain_eq,
    )?;
    plot::chart(
        out,
        "jain-offered",
        "Jain's index over throughput / offered (1: shares follow the offered load, end-user-centric)",
        "offered calls/s, all SEs",
        "Jain's index",
        &jain_off,
    )?;
    plot::chart(
        out,
        "deviation",
        "Largest deviation of an SE's share of the throughput from its share of the offered load",
        "offered calls/s, all SEs",
        "%",
        &dev,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(per_se: Vec<f64>) -> Point {
        let mut p: Point = serde_json::from_value(serde_json::json!({
            "experiment": "tcp-overload", "mechanism": "ics", "ses": 3,
            "load_factor": 5.0, "offered_cps": 1.0, "capacity_cps": 1.0,
            "throughput_cps": 1.0, "completed_total": 1, "goodput_cps": 1.0,
            "goodput_steady_cps": 1.0, "pdd_p50_ms": 1.0, "pdd_p99_ms": 1.0,
            "retrans_200": 0, "retrans_invite": 0, "fairness": null,
            "per_se_cps": [], "calls_attempted": 1, "calls_ok": 1, "r503": 0,
            "timeouts": 0, "se_rejected": 0, "re_rejected": 0, "re_active_max": 0.0,
            "re_cpu_s": 0.0, "re_busy": 0.0
        }))
        .expect("a point");
        p.per_se_cps = per_se;
        p
    }

    #[test]
    fn equal_shares_are_fair_one_way_and_proportional_ones_the_other() {
        let offered = vec![300.0, 200.0, 100.0];
        let eq = figures("equal", offered.clone(), point(vec![50.0, 50.0, 50.0]));
        assert!((eq.jain_equal - 1.0).abs() < 1e-9);
        assert!(eq.jain_offered < 0.9);
        // SE 1 gets a third where it offers a half: ratio 2/3; SE 3 a third of a sixth: 2.
        assert!((eq.max_deviation - 1.0).abs() < 1e-9);
        let prop = figures("offered", offered, point(vec![75.0, 50.0, 25.0]));
        assert!((prop.jain_offered - 1.0).abs() < 1e-9);
        assert!(prop.max_deviation < 1e-9);
        assert!(prop.jain_equal < 0.9);
        let none = figures("equal", vec![1.0, 1.0], point(vec![0.0, 0.0]));
        assert_eq!((none.jain_equal, none.max_deviation), (0.0, 1.0));
    }
}
