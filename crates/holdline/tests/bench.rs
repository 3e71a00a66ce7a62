//! `holdline bench --quick` end to end: holdline and Kamailio measured, `results.json` of the
//! documented shape (capacities, the sustained phase, the quota curve with its period and
//! saturation, per-step CPU split and latency percentiles), the CSVs, the summary and the
//! plots written. Speed is not asserted.
//! Skipped (with the reason printed) when `HOLDLINE_SKIP_SIPP` is set or when not root (the
//! overload curve needs a cgroup CPU quota).

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{BIN, Guard, is_root};

/// The four figures every server has, and whose ratios are reported.
const KEYS: [&str; 4] = [
    "capacity_udp_cps",
    "capacity_tcp_cps",
    "register_rps",
    "cpu_us_per_call_udp",
];

fn number(v: &serde_json::Value, what: &str) -> f64 {
    let x = v
        .as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"));
    assert!(x.is_finite(), "{what} is not finite: {x}");
    x
}

#[test]
fn quick_bench_writes_results_of_both_servers() {
    if std::env::var_os("HOLDLINE_SKIP_SIPP").is_some() {
        eprintln!("SKIPPED: HOLDLINE_SKIP_SIPP is set (holdline bench needs SIPp and Kamailio)");
        return;
    }
    if !is_root() {
        eprintln!("SKIPPED: not root (holdline bench needs a cgroup CPU quota and taskset)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("results");
    let child = Command::new(BIN)
        .args(["bench", "--quick", "--out"])
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start holdline bench");
    let mut child = Guard(child);
    // --quick promises under 3 minutes; the bound leaves room for a slow host.
    let status = child
        .wait_for(Duration::from_secs(220))
        .expect("holdline bench --quick ran over 220 s");
    assert!(status.success(), "holdline bench --quick failed: {status}");

    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("results.json is JSON");
    assert_eq!(v["mode"], "quick");
    assert!(v["overload_control_available"].is_boolean());
    let h = &v["servers"]["holdline"];
    let k = &v["servers"]["kamailio"];
    assert!(
        h.is_object() && k.is_object(),
        "both servers present: {}",
        v["servers"]
    );
    for key in KEYS {
        let a = number(&h[key], &format!("servers.holdline.{key}"));
        let b = number(&k[key], &format!("servers.kamailio.{key}"));
        assert!(a > 0.0 && b > 0.0, "{key}: holdline {a}, kamailio {b}");
        let r = number(&v["ratios"][key], &format!("ratios.{key}"));
        assert!(
            (r - a / b).abs() <= 1e-9 * (a / b).abs(),
            "ratios.{key} = {r}, but holdline/kamailio = {a}/{b}"
        );
    }
    for flag in [
        "capacity_udp_lower_bound",
        "capacity_tcp_lower_bound",
        "register_lower_bound",
    ] {
        assert!(h[flag].is_boolean() && k[flag].is_boolean(), "{flag}");
    }
    let points = v["overload"]["points"].as_array().expect("overload points");
    for server in ["holdline", "holdline-off", "kamailio"] {
        let mine: Vec<_> = points.iter().filter(|p| p["server"] == server).collect();
        assert!(mine.len() >= 3, "{server}: {} overload points", mine.len());
        for p in mine {
            for f in [
                "offered_cps",
                "goodput_cps",
                "pdd_p50_ms",
                "pdd_p99_ms",
                "retrans_200",
                "retrans_invite",
            ] {
                number(&p[f], &format!("overload {server} {f}"));
            }
        }
    }

    // Under the quota: one curve per period (quick: 10 ms), each point tagged with its period,
    // each server's saturation throughput the highest goodput along its curve.
    assert_eq!(v["overload"]["cfs_periods_us"], serde_json::json!([10000]));
    for p in points {
        assert_eq!(p["cfs_period_us"], 10000, "overload point {p}");
        let (p99, p999) = (
            number(&p["pdd_p99_ms"], "overload pdd_p99_ms"),
            number(&p["pdd_p999_ms"], "overload pdd_p999_ms"),
        );
        assert!(p99 <= p999, "overload point p99 {p99} > p99.9 {p999}");
    }
    for (name, fig) in [("holdline", h), ("kamailio", k)] {
        let quota = fig["quota"].as_array().expect("quota figures per period");
        assert_eq!(quota.len(), 1, "{name}: one period in quick mode");
        assert_eq!(quota[0]["cfs_period_us"], 10000);
        let sat = number(
            &quota[0]["saturation_cps"],
            &format!("{name} saturation_cps"),
        );
        assert!(sat > 0.0, "{name}: saturation {sat}");
        assert_eq!(
            number(&fig["saturation_under_quota_cps"], "saturation"),
            sat
        );
        for p in points.iter().filter(|p| p["server"] == name) {
            let g = number(&p["goodput_cps"], "goodput_cps");
            assert!(
                g <= sat + 1e-9,
                "{name}: goodput {g} above its saturation {sat}"
            );
        }
        number(
            &fig["capacity_under_quota_cps"],
            &format!("{name} capacity_under_quota_cps"),
        );
    }

    // Every step: server CPU split into user and system time, latency p50 <= p99 <= p99.9.
    let steps = v["steps"].as_array().expect("steps");
    for s in steps {
        let what = format!(
            "step {} {} {} {}",
            s["section"], s["server"], s["load"], s["rate"]
        );
        let (p50, p99, p999) = (
            number(&s["p50_ms"], &what),
            number(&s["p99_ms"], &what),
            number(&s["p999_ms"], &what),
        );
        assert!(p50 <= p99 && p99 <= p999, "{what}: {p50} / {p99} / {p999}");
        let (user, sys, cpu) = (
            number(&s["server_user_us"], &what),
            number(&s["server_sys_us"], &what),
            number(&s["server_cpu_us"], &what),
        );
        assert_eq!(user + sys, cpu, "{what}: user + sys = total");
        if number(&s["ok"], &what) > 0.0 {
            assert!(user + sys > 0.0, "{what}: the server did work");
        }
    }

    // The sustained phase: each server at its found UDP and TCP capacity, RSS sampled.
    assert_eq!(v["repeat"], 1);
    assert_eq!(v["runs"].as_array().map(Vec::len), Some(1));
    let sustain = v["sustain"]["rows"].as_array().expect("sustain rows");
    assert_eq!(sustain.len(), 4, "server x transport");
    for server in ["holdline", "kamailio"] {
        for transport in ["udp", "tcp"] {
            let what = format!("sustain {server} {transport}");
            let row = sustain
                .iter()
                .find(|r| r["server"] == server && r["transport"] == transport)
                .unwrap_or_else(|| panic!("{what}: no row"));
            assert!(number(&row["rate"], &what) > 0.0, "{what}: offered");
            let ratio = number(&row["completion_ratio"], &what);
            assert!(
                ratio > 0.0 && ratio <= 1.0,
                "{what}: completion ratio {ratio}"
            );
            let (start, end, max) = (
                number(&row["rss_start_mb"], &what),
                number(&row["rss_end_mb"], &what),
                number(&row["rss_max_mb"], &what),
            );
            assert!(start > 0.0 && end > 0.0, "{what}: RSS {start} -> {end}");
            assert!(max >= start && max >= end, "{what}: max RSS {max}");
            let (user, sys) = (
                number(&row["server_user_us"], &what),
                number(&row["server_sys_us"], &what),
            );
            assert!(user + sys > 0.0, "{what}: CPU user {user} sys {sys}");
            assert!(number(&row["cpu_us_per_call"], &what) > 0.0);
            let (p50, p99, p999) = (
                number(&row["pdd_p50_ms"], &what),
                number(&row["pdd_p99_ms"], &what),
                number(&row["pdd_p999_ms"], &what),
            );
            assert!(
                p50 <= p99 && p99 <= p999,
                "{what}: PDD {p50} / {p99} / {p999}"
            );
            let samples = row["samples"].as_array().expect("samples");
            assert!(samples.len() >= 3, "{what}: {} samples", samples.len());
            for smp in samples {
                assert!(number(&smp["rss_mb"], &what) > 0.0, "{what}: sample {smp}");
            }
            assert!(
                !row["per_second"].as_array().is_none_or(Vec::is_empty),
                "{what}: the UAC's per-second counts"
            );
        }
        let fig = &v["servers"][server];
        for t in ["udp", "tcp"] {
            let r = number(
                &fig[format!("sustain_{t}_completion_ratio").as_str()],
                &format!("{server} sustain_{t}_completion_ratio"),
            );
            assert!(r > 0.0 && r <= 1.0);
        }
    }

    let summary = std::fs::read_to_string(out.join("summary.md")).expect("summary.md");
    assert!(
        summary.contains("holdline / Kamailio"),
        "summary has the ratio column"
    );
    assert!(
        summary.contains("## Sustained load") && summary.contains("saturation goodput"),
        "summary has the sustained phase and the saturation"
    );
    let rows = |f: &str| -> usize {
        std::fs::read_to_string(out.join(f))
            .unwrap_or_else(|e| panic!("{f}: {e}"))
            .lines()
            .count()
    };
    assert_eq!(
        rows("steps.csv"),
        1 + steps.len(),
        "steps.csv has the steps"
    );
    assert_eq!(rows("overload.csv"), 1 + points.len());
    assert_eq!(rows("sustain.csv"), 1 + sustain.len());
    assert!(rows("sustain-samples.csv") > 1 + 3 * sustain.len());
    let header = std::fs::read_to_string(out.join("steps.csv")).expect("steps.csv");
    for col in [
        "p999_ms",
        "server_user_us",
        "server_sys_us",
        "cfs_period_us",
        "run",
    ] {
        assert!(
            header
                .lines()
                .next()
                .is_some_and(|h| h.split(',').any(|c| c == col)),
            "steps.csv has {col}"
        );
    }
    for plot in ["goodput", "cost", "sustain-rss", "sustain-completed"] {
        let svg = std::fs::read_to_string(out.join(format!("{plot}.svg"))).expect("svg");
        assert!(svg.contains("<svg"), "{plot}.svg");
        let png = std::fs::read(out.join(format!("{plot}.png"))).expect("png");
        assert!(png.starts_with(b"\x89PNG"), "{plot}.png");
    }
}

/// Without Kamailio on PATH the bench names the package to install and exits non-zero,
/// measuring nothing (holdline is never benchmarked alone).
#[test]
fn missing_kamailio_names_the_package() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("results");
    let run = Command::new(BIN)
        .args(["bench", "--quick", "--out"])
        .arg(&out)
        .env("PATH", dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("run holdline bench");
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "stderr: {err}");
    assert!(
        err.contains("kamailio not found") && err.contains("apt-get install -y kamailio"),
        "stderr: {err}"
    );
    assert!(!Path::new(&out).join("results.json").exists());

    // Kamailio present, SIPp missing: the package is sip-tester.
    let kamailio = Path::new("/usr/sbin/kamailio");
    if kamailio.exists() {
        std::os::unix::fs::symlink(kamailio, dir.path().join("kamailio")).expect("symlink");
        let run = Command::new(BIN)
            .args(["bench", "--quick", "--out"])
            .arg(&out)
            .env("PATH", dir.path())
            .stdin(Stdio::null())
            .output()
            .expect("run holdline bench");
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "stderr: {err}");
        assert!(
            err.contains("sipp not found") && err.contains("sip-tester"),
            "stderr: {err}"
        );
    }
}
