//! `holdline lab tcp-overload --wan-delay-ms` end to end, smallest form (issue 19 item 4): one
//! SE calling the RE across a 20 ms emulated link, two short points below capacity with
//! holdline's defaults (smart forwarding on). Checks that the calls complete across the link
//! (nothing fails but explicit rejections, each counted by the server that made it, and every
//! call accounted for), that their post-dial delay includes the link's round trip (so the
//! traffic really crossed the emulated link), that the points record the delay, and that the
//! namespaces are gone afterwards. Needs root (network namespaces, TUN devices); skipped
//! with a note otherwise.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{BIN, Guard};
use holdline_netem::netns;

/// One-way delay of the link, ms.
const DELAY_MS: f64 = 20.0;

fn skip() -> bool {
    if netns::is_root() {
        return false;
    }
    eprintln!("skipped: needs root (network namespaces and TUN devices)");
    true
}

fn u(p: &serde_json::Value, key: &str) -> u64 {
    p[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no count `{key}` in {p}"))
}

#[test]
fn calls_cross_a_20_ms_link_and_every_rejection_is_accounted_for() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("wan");
    let child = Command::new(BIN)
        .args([
            "lab",
            "tcp-overload",
            "--quick",
            "--capacity",
            "100",
            "--ses",
            "1",
            "--mechanisms",
            "default",
            "--loads",
            "0.3,0.6",
            "--duration",
            "4",
            "--wan-delay-ms",
            "20",
            "--out",
        ])
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn holdline lab");
    let lab_pid = child.id();
    let mut guard = Guard(child);
    let status = guard
        .wait_for(Duration::from_secs(120))
        .expect("holdline lab stops by itself");
    let mut err = String::new();
    if let Some(mut e) = guard.0.stderr.take() {
        use std::io::Read as _;
        let _ = e.read_to_string(&mut err);
    }
    assert!(status.success(), "{status:?}\n{err}");
    assert!(
        err.contains("link 20 ms"),
        "progress names the link:\n{err}"
    );

    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["wan_delays_ms"], serde_json::json!([DELAY_MS]));
    let points = v["points"].as_array().expect("points");
    assert_eq!(points.len(), 2, "two load points: {text}");
    for p in points {
        assert_eq!(p["wan_delay_ms"].as_f64(), Some(DELAY_MS), "{p}");
        let attempted = u(p, "calls_attempted");
        assert!(attempted > 0, "{p}");
        assert_eq!(u(p, "timeouts"), 0, "no call may time out: {p}");
        assert_eq!(
            u(p, "calls_ok") + u(p, "r503") + u(p, "r_other"),
            attempted,
            "every call completed or was rejected: {p}"
        );
        assert!(u(p, "calls_ok") > 0, "{p}");
        // Every 503 the UAC saw is one an SE counted (smart forwarding, feedback or local
        // control); every other failure is the RE's 503, which the SE answers upstream as 500
        // (RFC 3261 §16.7).
        let by = |server: &str| -> u64 {
            p["rejections"]
                .as_object()
                .expect("rejections")
                .iter()
                .filter(|(k, _)| k.starts_with(server))
                .map(|(_, n)| n.as_u64().expect("a count"))
                .sum()
        };
        assert_eq!(u(p, "r503"), by("se."), "{p}");
        assert_eq!(
            by("se."),
            u(p, "se_rejected_sf") + u(p, "se_rejected_feedback") + u(p, "se_rejected_local"),
            "{p}"
        );
        assert_eq!(u(p, "r_other"), by("re."), "{p}");
        // INVITE across the link and 200 OK back: no call can be faster than the round trip.
        let p50 = p["pdd_p50_ms"].as_f64().expect("pdd_p50_ms");
        assert!(
            p50 >= 2.0 * DELAY_MS,
            "PDD p50 {p50} ms is below the link's round trip: the traffic did not cross it: {p}"
        );
        // The link's addresses are trusted as loopback is: no server ignored a source.
        let drops = p["drops"].as_object().expect("drops");
        assert!(
            !drops.contains_key("se.flood") && !drops.contains_key("re.flood"),
            "{p}"
        );
        let wan = &p["wan"];
        assert_eq!(wan["delay_ms"].as_f64(), Some(DELAY_MS), "{p}");
        assert!(u(wan, "packets_a_to_b") > attempted, "{p}");
        assert!(u(wan, "packets_b_to_a") > attempted, "{p}");
        assert_eq!(u(wan, "dropped"), 0, "a lossless link drops nothing: {p}");
    }
    let csv = std::fs::read_to_string(out.join("points.csv")).expect("points.csv");
    let header: Vec<&str> = csv.lines().next().expect("header").split(',').collect();
    let col = header
        .iter()
        .position(|h| *h == "wan_delay_ms")
        .expect("a wan_delay_ms column");
    for line in csv.lines().skip(1) {
        assert_eq!(line.split(',').nth(col), Some("20"), "{line}");
    }
    for plot in ["throughput", "pdd", "pdd-median", "rejected-sf", "rejected"] {
        for ext in ["svg", "png"] {
            let f = out.join(format!("{plot}.{ext}"));
            assert!(f.exists(), "{} missing", f.display());
        }
    }
    // The lab deleted its namespaces (named after its PID).
    let list = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    let list = String::from_utf8_lossy(&list.stdout);
    let prefix = format!("hlw{lab_pid}n");
    assert!(
        !list.lines().any(|l| l.starts_with(&prefix)),
        "namespaces left behind:\n{list}"
    );
}
