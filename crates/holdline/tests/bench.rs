//! `holdline bench --quick` end to end: holdline and Kamailio measured, `results.json` of the
//! documented shape, the CSVs, the summary and the plots written. Speed is not asserted.
//! Skipped (with the reason printed) when `HOLDLINE_SKIP_SIPP` is set or when not root (the
//! overload curve needs a cgroup CPU quota).

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{BIN, Guard};

/// The four figures every server has, and whose ratios are reported.
const KEYS: [&str; 4] = [
    "capacity_udp_cps",
    "capacity_tcp_cps",
    "register_rps",
    "cpu_us_per_call_udp",
];

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|uid| uid == "0"))
        })
        .unwrap_or(false)
}

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

    let summary = std::fs::read_to_string(out.join("summary.md")).expect("summary.md");
    assert!(
        summary.contains("holdline / Kamailio"),
        "summary has the ratio column"
    );
    let rows = |f: &str| -> usize {
        std::fs::read_to_string(out.join(f))
            .unwrap_or_else(|e| panic!("{f}: {e}"))
            .lines()
            .count()
    };
    assert!(rows("steps.csv") > 10, "steps.csv has the steps");
    assert_eq!(rows("overload.csv"), 1 + points.len());
    for plot in ["goodput", "cost"] {
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
