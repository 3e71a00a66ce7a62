//! The sustained phase of `holdline bench`: each server offered its found UDP and TCP call
//! capacity for `--sustain-seconds` (a capacity that does not hold for a minute is not a
//! capacity), its process tree's memory and CPU sampled every second.
//!
//! Per server × transport × run: completion ratio (calls completed / placed), 503s, RSS
//! (`VmRSS` summed over the server's processes) and PSS (`Pss`, shared pages counted once)
//! at the start, the end and their maximum, their least-squares slope after the first
//! [`SLOPE_FROM_S`] s (transactions linger up to 64×T1 = 32 s, so memory only settles then),
//! CPU per call split into user and system time, and PDD p50/p99/p99.9. Written to
//! `sustain.csv` (one row each), `sustain-samples.csv` (one row per second) and the plots
//! `sustain-rss` and `sustain-completed`.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::error::Result;
use crate::generator::{ServerSample, StepRun};
use crate::plot;
use crate::soak::{UacSecond, slope};
use crate::stats::median_json;

/// The RSS slope is fitted over the samples after this many seconds of load.
pub(crate) const SLOPE_FROM_S: f64 = 32.0;

/// A sustained step *holds* its rate when at least this share of its calls completed
/// (issue 14: ≥ 99.9% for 60 s). A rate that does not hold is retried lower (see
/// [`SustainSearch`]): the bench's sustained capacity is the highest rate that held.
pub(crate) const HELD_RATIO: f64 = 0.999;

/// Until a try holds, each retry offers this fraction of the lowest rate that did not.
pub(crate) const BACKOFF: f64 = 0.8;

/// The search stops once the highest rate that held is within this fraction of the lowest
/// that did not.
pub(crate) const RESOLUTION: f64 = 0.03;

/// The rates of the sustained tries at one server and transport: the capacity found by the
/// short steps first; while nothing held, [`BACKOFF`] times the lowest rate that failed;
/// once a rate held below one that failed, the midpoint of the two, until they are within
/// [`RESOLUTION`]. (The short steps overstate what holds for a minute: over UDP a finished
/// transaction lingers 32 s, so the first 32 s of load cost less than the steady state.)
#[derive(Debug, Clone)]
pub(crate) struct SustainSearch {
    next: Option<f64>,
    held: Option<f64>,
    failed: Option<f64>,
}

impl SustainSearch {
    /// A search starting at `found` calls/s (at least 50).
    pub(crate) fn new(found: f64) -> Self {
        Self {
            next: Some(found.max(50.0).round()),
            held: None,
            failed: None,
        }
    }

    /// The rate of the next try; `None` when the search is over.
    pub(crate) fn next_rate(&self) -> Option<f64> {
        self.next
    }

    /// Records a try at `rate` and whether it held.
    pub(crate) fn record(&mut self, rate: f64, held: bool) {
        if held {
            self.held = Some(self.held.map_or(rate, |h| h.max(rate)));
        } else {
            self.failed = Some(self.failed.map_or(rate, |f| f.min(rate)));
        }
        self.next = match (self.held, self.failed) {
            // Held at the first try, or at every try: nothing above to look for.
            (Some(_), None) => None,
            (None, Some(f)) => Some((f * BACKOFF).round()),
            (Some(h), Some(f)) if h < f && (f - h) > RESOLUTION * f => {
                Some(((h + f) / 2.0).round())
            }
            _ => None,
        };
    }

    /// The highest rate that held, if any.
    pub(crate) fn sustained(&self) -> Option<f64> {
        self.held
    }
}

/// One server held at one found capacity for the sustained phase.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SustainRow {
    /// Which run (`--repeat`), from 0.
    pub run: usize,
    /// `holdline` or `kamailio`.
    pub server: String,
    /// `udp` or `tcp`.
    pub transport: String,
    /// Offered calls per second: the server's capacity found for that transport.
    pub rate: f64,
    /// Whether that capacity was a lower bound ("≥").
    pub capacity_lower_bound: bool,
    /// Which try at this server and transport, from 0 (see [`SustainSearch`]).
    pub attempt: usize,
    /// At least [`HELD_RATIO`] of the calls completed.
    pub held: bool,
    /// Seconds of offered load.
    pub duration_s: f64,
    /// Rate the generator actually offered, calls/s.
    pub offered_cps: f64,
    /// Calls placed.
    pub attempted: u64,
    /// Calls completed (200 OK, ACK, BYE, 200 OK).
    pub completed: u64,
    /// Calls that failed (incl. those still open after the drain).
    pub failed: u64,
    /// 503 responses at the UAC.
    pub r503: u64,
    /// `completed / attempted` (0 when nothing was placed).
    pub completion_ratio: f64,
    /// RSS of the server's processes before the load, MiB.
    pub rss_start_mb: f64,
    /// RSS when the generator exited, MiB.
    pub rss_end_mb: f64,
    /// Highest RSS sampled, MiB.
    pub rss_max_mb: f64,
    /// Least-squares slope of the RSS over the samples after [`SLOPE_FROM_S`] up to the end
    /// of the offered load, MiB per minute; absent with fewer than 3 samples there.
    pub rss_slope_mb_per_min: Option<f64>,
    /// PSS at the start, MiB (absent when `smaps_rollup` was unreadable).
    pub pss_start_mb: Option<f64>,
    /// PSS at the end, MiB.
    pub pss_end_mb: Option<f64>,
    /// Highest PSS sampled, MiB.
    pub pss_max_mb: Option<f64>,
    /// Slope of the PSS like `rss_slope_mb_per_min`.
    pub pss_slope_mb_per_min: Option<f64>,
    /// Start of the window the slopes are fitted over, s.
    pub slope_from_s: f64,
    /// Server CPU over the load window, µs (user + system).
    pub server_cpu_us: u64,
    /// Its user part, µs.
    pub server_user_us: u64,
    /// Its system part, µs.
    pub server_sys_us: u64,
    /// Server CPU time over the window (1.0 = one core): its processes' user + system time.
    pub server_busy: f64,
    /// The server core's busy share over the window, softirq work included (see
    /// [`Step::core_busy`](crate::generator::Step::core_busy)).
    pub core_busy: f64,
    /// Server CPU per completed call, µs.
    pub cpu_us_per_call: f64,
    /// PDD p50, ms.
    pub pdd_p50_ms: f64,
    /// PDD p99, ms.
    pub pdd_p99_ms: f64,
    /// PDD p99.9, ms.
    pub pdd_p999_ms: f64,
    /// INVITE retransmissions by the UAC.
    pub retrans_invite: u64,
    /// 200 OK retransmissions by the UAS.
    pub retrans_200: u64,
    /// The capacity rule held for the whole phase (no failure, p99 within the limit, the
    /// generator on schedule).
    pub clean: bool,
    /// Wall time from the UAC's start to its exit, s.
    pub window_s: f64,
    /// The server sampled every second.
    pub samples: Vec<ServerSample>,
    /// The UAC's per-second counts.
    pub per_second: Vec<UacSecond>,
}

/// Least-squares slope in MiB per minute of `(t_s, MiB)` points after [`SLOPE_FROM_S`] up to
/// the end of the load.
fn slope_after(points: impl Iterator<Item = (f64, f64)>, duration_s: f64) -> Option<f64> {
    let steady: Vec<(f64, f64)> = points
        .filter(|(t, _)| *t > SLOPE_FROM_S && *t <= duration_s + 0.5)
        .map(|(t, y)| (t / 60.0, y))
        .collect();
    slope(&steady)
}

impl SustainRow {
    /// The row of a sustained step (`run.step` has its section, server and run set).
    pub(crate) fn new(
        run: StepRun,
        transport: &str,
        capacity_lower_bound: bool,
        attempt: usize,
    ) -> Self {
        let StepRun {
            step,
            samples,
            per_second,
        } = run;
        let rss: Vec<f64> = samples.iter().map(|s| s.rss_mb).collect();
        let pss: Option<Vec<f64>> = samples.iter().map(|s| s.pss_mb).collect();
        let pss = pss.filter(|v| !v.is_empty());
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        let completion_ratio = if step.attempted > 0 {
            step.ok as f64 / step.attempted as f64
        } else {
            0.0
        };
        Self {
            run: step.run,
            server: step.server.clone(),
            transport: transport.into(),
            rate: step.rate,
            capacity_lower_bound,
            attempt,
            held: completion_ratio >= HELD_RATIO,
            duration_s: step.duration_s,
            offered_cps: step.offered_rate,
            attempted: step.attempted,
            completed: step.ok,
            failed: step.failed,
            r503: step.r503,
            completion_ratio,
            rss_start_mb: rss.first().copied().unwrap_or(0.0),
            rss_end_mb: rss.last().copied().unwrap_or(0.0),
            rss_max_mb: max(&rss),
            rss_slope_mb_per_min: slope_after(
                samples.iter().map(|s| (s.t_s, s.rss_mb)),
                step.duration_s,
            ),
            pss_start_mb: pss.as_ref().and_then(|v| v.first().copied()),
            pss_end_mb: pss.as_ref().and_then(|v| v.last().copied()),
            pss_max_mb: pss.as_deref().map(max),
            pss_slope_mb_per_min: pss.as_ref().and_then(|_| {
                slope_after(
                    samples.iter().filter_map(|s| s.pss_mb.map(|p| (s.t_s, p))),
                    step.duration_s,
                )
            }),
            slope_from_s: SLOPE_FROM_S,
            server_cpu_us: step.server_cpu_us,
            server_user_us: step.server_user_us,
            server_sys_us: step.server_sys_us,
            server_busy: step.server_busy,
            core_busy: step.core_busy,
            cpu_us_per_call: step.cpu_us_per_op,
            pdd_p50_ms: step.p50_ms,
            pdd_p99_ms: step.p99_ms,
            pdd_p999_ms: step.p999_ms,
            retrans_invite: step.retrans_invite,
            retrans_200: step.retrans_200,
            clean: step.clean,
            window_s: step.window_s,
            samples,
            per_second,
        }
    }

    /// The row's figures without its per-second samples.
    pub(crate) fn figures_json(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.remove("samples");
            o.remove("per_second");
        }
        v
    }
}

/// Whether `r` is the try that counts for its server, transport and run: the highest rate
/// that held, or the last try when none held.
pub(crate) fn is_final(r: &SustainRow, rows: &[SustainRow]) -> bool {
    let same =
        |o: &&SustainRow| o.run == r.run && o.server == r.server && o.transport == r.transport;
    if rows.iter().filter(same).any(|o| o.held) {
        r.held && !rows.iter().filter(same).any(|o| o.held && o.rate > r.rate)
    } else {
        !rows.iter().filter(same).any(|o| o.attempt > r.attempt)
    }
}

/// The median row of every server × transport over the runs (without samples; each run's
/// try that counts only, see [`is_final`]), with the number of runs and the completion ratio's min and max.
pub(crate) fn medians(rows: &[SustainRow]) -> Vec<Value> {
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for r in rows {
        if !keys.contains(&(r.server.as_str(), r.transport.as_str())) {
            keys.push((r.server.as_str(), r.transport.as_str()));
        }
    }
    keys.into_iter()
        .map(|(server, transport)| {
            let mine: Vec<&SustainRow> = rows
                .iter()
                .filter(|r| r.server == server && r.transport == transport && is_final(r, rows))
                .collect();
            let figs: Vec<Value> = mine.iter().map(|r| r.figures_json()).collect();
            let refs: Vec<&Value> = figs.iter().collect();
            let mut m = median_json(&refs);
            let ratios: Vec<f64> = mine.iter().map(|r| r.completion_ratio).collect();
            if let Some(o) = m.as_object_mut() {
                o.remove("run");
                o.insert("runs".into(), Value::from(mine.len()));
                o.insert(
                    "completion_ratio_min".into(),
                    Value::from(ratios.iter().copied().fold(f64::INFINITY, f64::min)),
                );
                o.insert(
                    "completion_ratio_max".into(),
                    Value::from(ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
                );
            }
            m
        })
        .collect()
}

fn opt(x: Option<f64>) -> String {
    x.map_or_else(String::new, |v| format!("{v:.3}"))
}

/// `sustain.csv`: one row per server × transport × run.
pub(crate) fn rows_csv(rows: &[SustainRow]) -> String {
    let mut out = String::from(
        "run,server,transport,rate,capacity_lower_bound,attempt,held,duration_s,offered_cps,attempted,completed,failed,r503,\
         completion_ratio,rss_start_mb,rss_end_mb,rss_max_mb,rss_slope_mb_per_min,pss_start_mb,pss_end_mb,\
         pss_max_mb,pss_slope_mb_per_min,server_cpu_us,server_user_us,server_sys_us,server_busy,\
         cpu_us_per_call,pdd_p50_ms,pdd_p99_ms,pdd_p999_ms,retrans_invite,retrans_200,clean,core_busy\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{:.1},{},{},{},{},{:.6},{:.3},{:.3},{:.3},{},{},{},{},{},{},{},{},{:.3},{:.1},{:.3},{:.3},{:.3},{},{},{},{:.3}",
            r.run,
            r.server,
            r.transport,
            r.rate,
            r.capacity_lower_bound,
            r.attempt,
            r.held,
            r.duration_s,
            r.offered_cps,
            r.attempted,
            r.completed,
            r.failed,
            r.r503,
            r.completion_ratio,
            r.rss_start_mb,
            r.rss_end_mb,
            r.rss_max_mb,
            opt(r.rss_slope_mb_per_min),
            opt(r.pss_start_mb),
            opt(r.pss_end_mb),
            opt(r.pss_max_mb),
            opt(r.pss_slope_mb_per_min),
            r.server_cpu_us,
            r.server_user_us,
            r.server_sys_us,
            r.server_busy,
            r.cpu_us_per_call,
            r.pdd_p50_ms,
            r.pdd_p99_ms,
            r.pdd_p999_ms,
            r.retrans_invite,
            r.retrans_200,
            r.clean,
            r.core_busy
        );
    }
    out
}

/// `sustain-samples.csv`: one row per server sample (about one per second); the UAC's counts
/// of the second that ended nearest to it (each second's counts on one row only; empty on
/// the others).
pub(crate) fn samples_csv(rows: &[SustainRow]) -> String {
    let mut out = String::from(
        "run,server,transport,t_s,rss_mb,pss_mb,cpu_s,user_s,sys_s,processes,uac_attempted,uac_calls_ok,uac_calls_failed,uac_r503\n",
    );
    for r in rows {
        let mut used = vec![false; r.per_second.len()];
        for s in &r.samples {
            let second = s.t_s.round();
            let uac = r
                .per_second
                .iter()
                .enumerate()
                .find(|(i, u)| !used[*i] && (u.t_s - second).abs() < 0.5);
            let counts = match uac {
                Some((i, u)) => {
                    used[i] = true;
                    format!(
                        "{},{},{},{}",
                        u.attempted, u.calls_ok, u.calls_failed, u.r503
                    )
                }
                None => ",,,".into(),
            };
            let _ = writeln!(
                out,
                "{},{},{},{:.3},{:.3},{},{:.4},{:.4},{:.4},{},{counts}",
                r.run,
                r.server,
                r.transport,
                s.t_s,
                s.rss_mb,
                opt(s.pss_mb),
                s.cpu_s,
                s.user_s,
                s.sys_s,
                s.processes
            );
        }
    }
    out
}

/// The legend name of a row ("holdline udp", with the run when there are several).
fn label(r: &SustainRow, runs: usize) -> String {
    if runs > 1 {
        format!("{} {} #{}", r.server, r.transport, r.run + 1)
    } else {
        format!("{} {}", r.server, r.transport)
    }
}

/// Writes the plots `sustain-rss` (RSS of each server over time) and `sustain-completed`
/// (calls completed per second at the UAC) as SVG and PNG.
pub(crate) fn plots(dir: &Path, rows: &[SustainRow], runs: usize) -> Result<()> {
    let duration = rows.first().map_or(0.0, |r| r.duration_s);
    let rss: Vec<(String, Vec<(f64, f64)>)> = rows
        .iter()
        .map(|r| {
            (
                label(r, runs),
                r.samples.iter().map(|s| (s.t_s, s.rss_mb)).collect(),
            )
        })
        .collect();
    plot::chart(
        dir,
        "sustain-rss",
        &format!("Server RSS at its found capacity ({duration:.0} s of load)"),
        "seconds since the load started",
        "RSS of the server's processes, MiB",
        &rss,
    )?;
    let completed: Vec<(String, Vec<(f64, f64)>)> = rows
        .iter()
        .map(|r| {
            (
                label(r, runs),
                // Whole seconds only: the UAC's last row covers the fraction of a second
                // before it exited and would read as a collapse.
                r.per_second
                    .iter()
                    .filter(|u| (u.t_s - u.t_s.round()).abs() < 0.01)
                    .map(|u| (u.t_s, u.calls_ok))
                    .collect(),
            )
        })
        .collect();
    plot::chart(
        dir,
        "sustain-completed",
        &format!("Calls completed per second at the found capacity ({duration:.0} s of load)"),
        "seconds since the load started",
        "calls completed per second",
        &completed,
    )
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_sustained_search_backs_off_then_bisects() {
        let mut s = SustainSearch::new(19_020.0);
        assert_eq!(s.next_rate(), Some(19_020.0));
        s.record(19_020.0, false);
        assert_eq!(s.next_rate(), Some(15_216.0));
        s.record(15_216.0, false);
        assert_eq!(s.next_rate(), Some(12_173.0));
        s.record(12_173.0, true);
        assert_eq!(s.next_rate(), Some(13_695.0));
        s.record(13_695.0, false);
        assert_eq!(s.next_rate(), Some(12_934.0));
        s.record(12_934.0, true);
        // 12,934 held, 13,695 did not: 5.6% apart, one more midpoint.
        assert_eq!(s.next_rate(), Some(13_315.0));
        s.record(13_315.0, true);
        // Within 3%: done; the sustained capacity is the highest that held.
        assert_eq!(s.next_rate(), None);
        assert_eq!(s.sustained(), Some(13_315.0));
    }

    #[test]
    fn a_rate_that_holds_at_once_ends_the_search() {
        let mut s = SustainSearch::new(2_880.0);
        s.record(2_880.0, true);
        assert_eq!(s.next_rate(), None);
        assert_eq!(s.sustained(), Some(2_880.0));
        let mut s = SustainSearch::new(10.0);
        assert_eq!(s.next_rate(), Some(50.0));
        s.record(50.0, false);
        assert_eq!(s.sustained(), None);
        assert_eq!(s.next_rate(), Some(40.0));
    }

    use super::*;
    use crate::generator::Step;

    fn step(ok: u64, attempted: u64) -> Step {
        Step {
            section: "sustain".into(),
            run: 1,
            cfs_period_us: None,
            server: "holdline".into(),
            load: "calls-udp".into(),
            rate: 1000.0,
            offered_rate: 1000.0,
            duration_s: 60.0,
            attempted,
            ok,
            failed: attempted - ok,
            goodput: 990.0,
            p50_ms: 1.0,
            p99_ms: 4.0,
            p999_ms: 9.0,
            retrans_200: 0,
            retrans_invite: 0,
            r503: attempted - ok,
            server_cpu_us: 6_000_000,
            server_user_us: 4_000_000,
            server_sys_us: 2_000_000,
            window_s: 61.0,
            server_busy: 0.1,
            core_busy: 0.12,
            core_interrupt_us: 500_000,
            cpu_us_per_op: 100.0,
            clean: false,
        }
    }

    fn sample(t_s: f64, rss_mb: f64) -> ServerSample {
        ServerSample {
            t_s,
            rss_mb,
            pss_mb: Some(rss_mb - 1.0),
            cpu_s: t_s / 10.0,
            user_s: t_s / 15.0,
            sys_s: t_s / 30.0,
            processes: 1,
        }
    }

    #[test]
    fn a_row_has_its_ratio_memory_and_slope_after_32_s() {
        // 100 MiB, growing 1 MiB/s up to 32 s, then 0.1 MiB/s (6 MiB/min).
        let samples: Vec<ServerSample> = (0..=61)
            .map(|t| {
                let t = f64::from(t);
                let rss = 100.0 + t.min(32.0) + 0.1 * (t - 32.0).max(0.0);
                sample(t, rss)
            })
            .collect();
        let per_second = (1..=61)
            .map(|t| UacSecond {
                t_s: f64::from(t),
                attempted: 1000.0,
                calls_ok: 999.0,
                calls_failed: 1.0,
                r503: 1.0,
            })
            .collect();
        let row = SustainRow::new(
            StepRun {
                step: step(59_940, 60_000),
                samples,
                per_second,
            },
            "udp",
            true,
            0,
        );
        assert_eq!(row.run, 1);
        assert!((row.completion_ratio - 0.999).abs() < 1e-12);
        assert!(row.held, "99.9% completed holds");
        assert_eq!(row.rss_start_mb, 100.0);
        assert!((row.rss_end_mb - 134.9).abs() < 1e-9);
        assert!((row.rss_max_mb - 134.9).abs() < 1e-9);
        let s = row.rss_slope_mb_per_min.expect("a slope after 32 s");
        assert!((s - 6.0).abs() < 1e-6, "{s}");
        assert!(row.pss_slope_mb_per_min.is_some());
        assert_eq!(row.pss_start_mb, Some(99.0));
        let j = row.figures_json();
        assert!(j.get("samples").is_none() && j["completion_ratio"].is_number());
        let csv = rows_csv(std::slice::from_ref(&row));
        assert_eq!(csv.lines().count(), 2);
        let samples = samples_csv(std::slice::from_ref(&row));
        assert_eq!(samples.lines().count(), 1 + 62);
        // Each UAC second appears on one sample row only.
        let with_counts = samples
            .lines()
            .skip(1)
            .filter(|l| !l.ends_with(",,,"))
            .count();
        assert_eq!(with_counts, 61);
    }

    #[test]
    fn a_short_row_has_no_slope_and_medians_merge_runs() {
        let samples: Vec<ServerSample> = (0..=6).map(|t| sample(f64::from(t), 50.0)).collect();
        let mk = |run: usize, ok: u64, attempt: usize| {
            let mut st = step(ok, 5000);
            st.run = run;
            st.duration_s = 5.0;
            SustainRow::new(
                StepRun {
                    step: st,
                    samples: samples.clone(),
                    per_second: Vec::new(),
                },
                "tcp",
                false,
                attempt,
            )
        };
        // Run 0 did not hold at first (4,990 of 5,000) and was retried; only its final try
        // enters the medians.
        let rows = vec![
            mk(0, 4990, 0),
            mk(0, 5000, 1),
            mk(1, 4000, 0),
            mk(2, 4500, 0),
        ];
        assert!(!rows[0].held && rows[1].held && !rows[2].held);
        assert!(!is_final(&rows[0], &rows) && is_final(&rows[1], &rows));
        assert_eq!(rows[0].rss_slope_mb_per_min, None);
        let m = medians(&rows);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0]["runs"], 3);
        assert!((m[0]["completion_ratio"].as_f64().unwrap_or(0.0) - 0.9).abs() < 1e-12);
        assert_eq!(m[0]["completion_ratio_min"], 0.8);
        assert_eq!(m[0]["completion_ratio_max"], 1.0);
        assert!(m[0]["rss_slope_mb_per_min"].is_null());
        // A bisection: failed at 10,000, held at 8,000, failed at 9,000 (its last try). The
        // try that counts is the highest that held.
        let mut tries = vec![rows[0].clone(), rows[1].clone(), rows[0].clone()];
        for (i, (t, rate)) in tries
            .iter_mut()
            .zip([10_000.0, 8_000.0, 9_000.0])
            .enumerate()
        {
            t.run = 7;
            t.attempt = i;
            t.rate = rate;
        }
        assert!(!is_final(&tries[0], &tries));
        assert!(is_final(&tries[1], &tries));
        assert!(!is_final(&tries[2], &tries));
    }
}
