//! `holdline lab architectures` end to end, small: all six drivers, stateless and stateful,
//! on one core, one 1-second point each at a rate every driver carries. Checks that every
//! driver completes its calls through real processes, that CPU time and context switches are
//! counted for each (the lab drivers through their own getrusage, `holdline serve` through
//! /proc), and the result files with the paper's tables beside the measurement. (Whether a
//! point is clean — p99 PDD within 100 ms — depends on what else the machine runs, so it
//! is not asserted.)

mod common;

use std::time::Duration;

#[test]
fn architectures_reports_all_six_drivers_in_both_modes() {
    let _one_run_at_a_time = common::sipp_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("architectures");
    let err = common::run_lab(
        &[
            "architectures",
            "--cores=1",
            "--point-seconds=1",
            "--max-points=1",
            "--start-rate=250",
            "--one-core=0",
        ],
        &out,
        Duration::from_secs(120),
    );
    eprintln!("{err}");

    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["experiment"], "architectures");
    assert_eq!(v["sets"], 100);
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 12, "6 drivers x 2 modes: {rows:?}");
    let points = v["points"].as_array().expect("points");
    assert_eq!(points.len(), 12, "one point each: {points:?}");
    for mode in ["stateless", "stateful"] {
        for driver in [
            "event",
            "thread-per-message",
            "pool-thread-per-message",
            "thread-pool",
            "process-pool",
            "holdline",
        ] {
            let row = rows
                .iter()
                .find(|r| r["driver"] == driver && r["mode"] == mode)
                .unwrap_or_else(|| panic!("{driver} {mode}: {rows:?}"));
            assert!(row["paper"].is_array(), "{row}");
            // The point itself (on a machine shared with other work its p99 may miss the
            // clean rule: what is checked here is that the calls went through and were
            // measured).
            let p = points
                .iter()
                .find(|p| p["driver"] == driver && p["mode"] == mode)
                .unwrap_or_else(|| panic!("{driver} {mode}: {points:?}"));
            let (ok, attempted) = (
                p["ok"].as_u64().unwrap_or(0),
                p["attempted"].as_u64().unwrap_or(0),
            );
            assert!(
                attempted >= 150 && ok * 2 >= attempted,
                "{driver} {mode} completed most calls: {p}"
            );
            let u = &p["usage"];
            let cpu = u["user_us"].as_u64().unwrap_or(0) + u["sys_us"].as_u64().unwrap_or(0);
            let switches =
                u["voluntary"].as_u64().unwrap_or(0) + u["involuntary"].as_u64().unwrap_or(0);
            assert!(
                u["user_us"].is_u64() && u["sys_us"].is_u64() && switches > 0,
                "{driver} {mode} measured: {p}"
            );
            // `holdline serve`'s CPU comes from /proc in clock ticks (10 ms): at about 60 µs
            // per call, a 1 s quick point's ~12 ms reads as 0 ticks about a third of the
            // time (CI, 2026-11-29). The drivers in this process use getrusage (µs).
            if driver != "holdline" {
                assert!(cpu > 0, "{driver} {mode} measured CPU: {p}");
            }
        }
    }
    let summary = std::fs::read_to_string(out.join("summary.md")).expect("summary.md");
    assert!(
        summary.contains("Table 1") && summary.contains("Table 2"),
        "{summary}"
    );
    assert!(
        summary.contains("| 1550 (1.00)"),
        "the paper's numbers: {summary}"
    );
    let csv = std::fs::read_to_string(out.join("points.csv")).expect("points.csv");
    assert_eq!(csv.lines().count(), 13, "a header and 12 points:\n{csv}");
    for f in ["ratios-stateless.svg", "ratios-stateful.png"] {
        assert!(out.join(f).exists(), "{f}");
    }
}
