//! `holdline lab window --quick` end to end: seed 004's trapezoid (UAC → upstream holdline →
//! downstream holdline with an emulated per-message cost and no control → UAS, UDP on
//! 127.0.0.1) at 1× and 2.5× the downstream's nominal capacity, without control and with
//! the upstream's feedback-free delay window. Checks the files, that each mechanism is what
//! it says (no control never rejects; the window's 503s are the upstream's `window_full`),
//! and the experiment's point: at 2.5× the window keeps more calls set up (and completed)
//! than no control, with a lower average setup delay and fewer retransmissions.

#[path = "common/browser.rs"]
mod browser;
mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::BIN;

/// `holdline lab ARGS --out OUT`, at most 240 s ([`common::run_lab`]).
fn run_lab(args: &[&str], out: &Path) -> String {
    common::run_lab(args, out, Duration::from_secs(240))
}

#[test]
fn lab_help_lists_the_window_experiment() {
    let out = Command::new(BIN)
        .args(["lab", "--help"])
        .output()
        .expect("run holdline lab --help");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for name in ["udp-overload", "tcp-overload", "feedback", "window", "soak"] {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(name)),
            "{name} has a line:\n{text}"
        );
    }
    let out = Command::new(BIN)
        .args(["lab", "window", "--help"])
        .output()
        .expect("run holdline lab window --help");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("--modes") && text.contains("--quick"),
        "{text}"
    );
}

#[test]
fn window_quick_keeps_the_overloaded_downstream_serving() {
    let _one_run_at_a_time = common::sipp_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("window");
    let err = run_lab(&["window", "--quick"], &out);
    // The progress lines, shown when the test fails (or with --nocapture).
    eprintln!("{err}");
    assert!(err.contains("[4/4"), "a progress line per point:\n{err}");

    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["experiment"], "window");
    assert_eq!(v["quick"], true);
    assert_eq!(v["modes"][0]["mode"], "emulated", "{}", v["modes"]);
    assert_eq!(
        v["paper"].as_array().map(Vec::len),
        Some(2),
        "Tables 1 and 2"
    );
    let capacity = v["modes"][0]["capacity_cps"].as_f64().expect("capacity");
    assert!(capacity > 0.0);
    let points = v["points"].as_array().expect("points");
    assert_eq!(points.len(), 4, "2 loads x 2 mechanisms");
    for p in points {
        for key in [
            "offered_cps",
            "throughput_cps",
            "goodput_cps",
            "calls_ok_cps",
            "setup_delay_avg_ms",
            "setup_delay_p99_ms",
            "retrans_invite_rps",
            "retrans_bye_rps",
            "up_cpu",
            "down_cpu",
            "up_rss_mb",
            "down_rss_mb",
        ] {
            let x = p[key].as_f64();
            assert!(x.is_some_and(|x| x.is_finite() && x >= 0.0), "{key} in {p}");
        }
        assert!(p["calls_attempted"].as_u64().is_some_and(|n| n > 0), "{p}");
        assert!(p["down_cpu"].as_f64().is_some_and(|c| c > 0.0), "{p}");
        assert!(p["up_rss_mb"].as_f64().is_some_and(|m| m > 0.0), "{p}");
        assert!(p["down_rss_mb"].as_f64().is_some_and(|m| m > 0.0), "{p}");
    }
    let at = |m: &str, f: f64| {
        points
            .iter()
            .find(|p| {
                p["mechanism"] == m && (p["load_factor"].as_f64().unwrap_or(0.0) - f).abs() < 0.01
            })
            .unwrap_or_else(|| panic!("no {m} point at {f}x in {text}"))
    };
    let n = |p: &serde_json::Value, k: &str| p[k].as_u64().unwrap_or_else(|| panic!("{k} in {p}"));
    let x = |p: &serde_json::Value, k: &str| p[k].as_f64().unwrap_or_else(|| panic!("{k} in {p}"));
    for f in [1.0, 2.5] {
        let none = at("none", f);
        assert_eq!(n(none, "r503"), 0, "no control never rejects: {none}");
        assert_eq!(n(none, "up_window_rejected"), 0, "{none}");
    }
    let (none, window) = (at("none", 2.5), at("window", 2.5));
    let summary = format!("none: {none}\nwindow: {window}");
    assert!(
        n(window, "up_window_rejected") > 0,
        "the window holds back the excess at 2.5x: {summary}"
    );
    assert!(
        n(window, "r503") <= n(window, "up_window_rejected") + n(window, "up_local_rejected"),
        "every 503 is the upstream's: {summary}"
    );
    // Throughput, not the goodput: without control many 200 OKs reach the UAC in time while
    // their ACK or BYE is lost later at the overloaded downstream.
    assert!(
        x(window, "throughput_cps") > x(none, "throughput_cps"),
        "the window keeps more calls set up than no control at 2.5x: {summary}"
    );
    assert!(
        x(window, "calls_ok_cps") > x(none, "calls_ok_cps"),
        "and more calls completed end to end: {summary}"
    );
    assert!(
        x(window, "setup_delay_avg_ms") < x(none, "setup_delay_avg_ms"),
        "and calls set up faster: {summary}"
    );
    let retrans = |p: &serde_json::Value| x(p, "retrans_invite_rps") + x(p, "retrans_bye_rps");
    assert!(
        retrans(window) < retrans(none),
        "with fewer INVITE and BYE retransmissions: {summary}"
    );

    let csv = std::fs::read_to_string(out.join("points.csv")).expect("points.csv");
    assert!(csv.starts_with("experiment,mode,mechanism,load_factor,paper_cps,"));
    assert_eq!(csv.lines().count(), 5, "header + 4 points");
    let paper = std::fs::read_to_string(out.join("paper.csv")).expect("paper.csv");
    assert_eq!(paper.lines().count(), 19, "header + 2 x 9 loads");
    for plot in [
        "throughput-emulated",
        "goodput-emulated",
        "delay-emulated",
        "retrans-emulated",
        "cpu-emulated",
        "memory-emulated",
    ] {
        let svg = std::fs::read_to_string(out.join(format!("{plot}.svg"))).expect("svg");
        assert!(svg.contains("<svg"));
        let png = std::fs::read(out.join(format!("{plot}.png"))).expect("png");
        assert_eq!(&png[1..4], b"PNG");
    }
    // The index the lab wrote beside its plots, in headless Chromium: every plot loaded, the
    // paper's tables (paper.csv) next to them.
    let browser = browser::Browser::start(1280, 900);
    let page = browser::check_lab_index(&browser, &out);
    assert!(
        page["summary_tables"].as_u64().unwrap_or(0) >= 1,
        "the paper's numbers beside the plots: {page}"
    );
}
