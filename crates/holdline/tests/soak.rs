//! `holdline lab soak` end to end, short: one point of 300 calls/s for 8 s. Checks the shape
//! of results.json (the fields of a point, one server sample per second), that the calls
//! completed, and that samples.csv and the plots were written. No speed is asserted.
//! Skipped (with the reason printed) when `taskset` is missing.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{BIN, Guard};

fn taskset_available() -> bool {
    Command::new("taskset")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn soak_writes_results_samples_and_plots() {
    if !taskset_available() {
        eprintln!("SKIPPED: taskset not found (apt-get install util-linux)");
        return;
    }
    let _one_run_at_a_time = common::sipp_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("soak");
    let child = Command::new(BIN)
        .args(["lab", "soak", "--rate", "300", "--duration", "8", "--out"])
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn holdline lab soak");
    let mut guard = Guard(child);
    let status = guard
        .wait_for(Duration::from_secs(60))
        .expect("holdline lab soak stops by itself");
    let mut err = String::new();
    if let Some(mut e) = guard.0.stderr.take() {
        use std::io::Read as _;
        let _ = e.read_to_string(&mut err);
    }
    assert!(status.success(), "{status:?}\n{err}");
    assert!(
        err.contains("soak 300-udp: t="),
        "progress is shown:\n{err}"
    );

    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["experiment"], "soak");
    assert!(v["machine"]["cores"].is_u64(), "{}", v["machine"]);
    assert!(v["command"].as_str().is_some_and(|c| c.contains("soak")));
    let points = v["points"].as_array().expect("points");
    assert_eq!(points.len(), 1);
    let p = &points[0];
    for key in [
        "rate",
        "offered_cps",
        "completed_ratio",
        "rss_start_mb",
        "rss_max_mb",
        "rss_end_mb",
        "rss_slope_from_s",
        "transactions_max",
        "cpu_us_per_call",
        "pdd_p50_ms",
        "pdd_p99_ms",
    ] {
        assert!(p[key].as_f64().is_some_and(f64::is_finite), "{key} in {p}");
    }
    for key in ["attempted", "completed", "failed", "r503"] {
        assert!(p[key].is_u64(), "{key} in {p}");
    }
    // Present, null for a run shorter than 32 s (or a number).
    for key in ["rss_32s_mb", "rss_slope_mb_per_min"] {
        assert!(p.get(key).is_some(), "{key} in {p}");
    }
    assert!(p["attempted"].as_u64().is_some_and(|n| n > 2000), "{p}");
    let ratio = p["completed_ratio"].as_f64().unwrap_or(0.0);
    assert!(ratio > 0.99, "completed ratio {ratio}: {p}");
    assert!(!p["windows"].as_array().expect("windows").is_empty());
    let samples = p["samples"].as_array().expect("samples");
    assert!(samples.len() >= 6, "{} samples", samples.len());
    for s in samples {
        assert!(s["rss_mb"].as_f64().is_some_and(|x| x > 0.0), "rss in {s}");
        assert!(s["transactions"].is_number(), "transactions in {s}");
        assert!(s["txn"].is_object(), "txn in {s}");
    }
    // The server exports its transaction table's state, and over UDP finished calls leave
    // lingering transactions (Timers J, L, M) that the table counts and sizes.
    let lingering = samples
        .iter()
        .filter_map(|s| s["txn"]["holdline_txn_lingering"].as_f64())
        .fold(0.0, f64::max);
    assert!(lingering > 0.0, "no lingering transactions sampled: {p}");
    assert!(
        samples
            .iter()
            .any(|s| s["txn"]["holdline_txn_memory_bytes"].as_f64() > Some(0.0)),
        "memory estimate in the samples"
    );
    assert!(p["rss_max_mb"].as_f64() >= p["rss_start_mb"].as_f64());
    assert!(!p["per_second"].as_array().expect("per_second").is_empty());

    let csv = std::fs::read_to_string(out.join("samples.csv")).expect("samples.csv");
    assert!(csv.starts_with("rate,transport,t_s,rss_mb,cpu_s,transactions,calls,completed"));
    assert_eq!(
        csv.lines().count(),
        samples.len() + 1,
        "header + one row per sample"
    );
    for plot in ["rss", "transactions", "completed"] {
        let svg = std::fs::read_to_string(out.join(format!("{plot}.svg"))).expect("svg");
        assert!(svg.contains("<svg"));
        let png = std::fs::read(out.join(format!("{plot}.png"))).expect("png");
        assert_eq!(&png[1..4], b"PNG");
    }
}
