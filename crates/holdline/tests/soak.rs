//! `holdline lab soak` end to end, short: one point of 300 calls/s for 8 s. Checks the shape
//! of results.json (the fields of a point, one server sample per second), that the calls
//! completed, and that samples.csv and the plots were written. No speed is asserted. The
//! same over TLS (certificates the lab generates; every hop verified).
//! Skipped (with the reason printed) when `taskset` is missing.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

fn taskset_available() -> bool {
    Command::new("taskset")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The turn of this test among the load-generating ones and a temporary directory; `None`
/// (skipped, with the reason printed) without `taskset`.
fn setup() -> Option<(std::sync::MutexGuard<'static, ()>, tempfile::TempDir)> {
    if !taskset_available() {
        eprintln!("SKIPPED: taskset not found (apt-get install util-linux)");
        return None;
    }
    let turn = common::sipp_lock();
    Some((turn, tempfile::tempdir().expect("tempdir")))
}

/// Runs `holdline lab soak ARGS --out OUT` to its end (at most 60 s); returns its stderr.
fn lab_soak(args: &[&str], out: &std::path::Path) -> String {
    let all: Vec<&str> = std::iter::once("soak")
        .chain(args.iter().copied())
        .collect();
    common::run_lab(&all, out, Duration::from_secs(60))
}

#[test]
fn soak_writes_results_samples_and_plots() {
    let Some((_one_run_at_a_time, dir)) = setup() else {
        return;
    };
    let out = dir.path().join("soak");
    let err = lab_soak(&["--rate", "300", "--duration", "8"], &out);
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

/// `--transport tls`: the generator's UAC and UAS and the server talk TLS, each verifying
/// the other side against the lab's CA; every call completes.
#[test]
fn soak_over_tls() {
    let Some((_one_run_at_a_time, dir)) = setup() else {
        return;
    };
    let out = dir.path().join("soak");
    let err = lab_soak(
        &["--transport", "tls", "--rate", "300", "--duration", "3"],
        &out,
    );
    assert!(err.contains("soak 300-tls: t="), "progress:\n{err}");
    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let p = &v["points"][0];
    assert_eq!(p["transport"], "tls", "{p}");
    assert!(p["attempted"].as_u64().is_some_and(|n| n > 600), "{p}");
    assert_eq!(p["completed"], p["attempted"], "{p}");
}

/// `--attack scanner,guesser`: SIPp sweeps the server with OPTIONS from 127.0.0.2 and
/// guesses a password from 127.0.0.3 while the calls run from 127.0.0.1 (trusted). The
/// point records what the protection did: the scanner is answered at most its flood limit
/// (1,000 per window) and the rest dropped, the guesser gets at most its failure limit of
/// wrong-password answers; every call completes.
#[test]
fn soak_under_attack_records_what_the_protection_did() {
    if !common::sipp_available() {
        return;
    }
    let Some((_one_run_at_a_time, dir)) = setup() else {
        return;
    };
    let out = dir.path().join("soak");
    let err = lab_soak(
        &[
            "--rate",
            "300",
            "--duration",
            "4",
            "--attack",
            "scanner,guesser",
            "--scanner-rate",
            "2000",
            "--guess-rate",
            "50",
        ],
        &out,
    );
    assert!(err.contains("attack scanner+guesser"), "{err}");
    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let p = &v["points"][0];
    assert_eq!(p["attack"], "scanner+guesser", "{p}");
    assert_eq!(p["completed"], p["attempted"], "{p}");
    let s = &p["attack_stats"];
    let stat = |k: &str| s[k].as_f64().unwrap_or_else(|| panic!("{k} in {s}"));
    assert!(stat("scanner_sent") > 4_000.0, "{s}");
    assert!(stat("options_handled") <= 1_000.0, "{s}");
    assert!(
        stat("flood_drops") >= stat("scanner_sent") - stat("options_handled") - 100.0,
        "{s}"
    );
    assert!(stat("flood_offenders") >= 1.0, "{s}");
    // 20 failures per window trip the throttle (the default), then silence.
    assert!(
        stat("auth_failed") >= 1.0 && stat("auth_failed") <= 21.0,
        "{s}"
    );
    assert!(stat("auth_throttle_drops") > 0.0, "{s}");
}
