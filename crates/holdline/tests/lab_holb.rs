//! `holdline lab holb`, smallest form (issue 19 item 3): two proxies in network namespaces
//! joined by `holdline netem` (20 ms, 2% loss each way; `--topology proxies`), SCTP ordered
//! and unordered between them, one run of 6 s each; the competing-traffic form; and the
//! default `direct` topology (caller and callee across the link, no proxy). Checks the files, that the calls crossed the emulated link
//! (every call rang; the post-selection delay is at least the round trip), that the link
//! lost packets and SCTP retransmitted them, and that the comparisons are computed. Root
//! only (skipped with a note otherwise). No speed or result of the experiment is asserted:
//! one run of each proves nothing about head-of-line blocking.

mod common;

use std::time::Duration;

#[test]
fn holb_runs_sctp_ordered_and_unordered_across_a_lossy_link() {
    if !holdline_netem::netns::is_root() {
        eprintln!("skipped: needs root (network namespaces and TUN devices)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("holb");
    common::run_lab(
        &[
            "holb",
            "--topology",
            "proxies",
            "--transports",
            "sctp-ordered,sctp-unordered",
            "--losses",
            "2",
            "--delays",
            "20",
            "--rates",
            "20",
            "--correlation",
            "0",
            "--runs",
            "1",
            "--duration",
            "6",
        ],
        &out,
        Duration::from_secs(240),
    );
    for f in [
        "results.json",
        "points.csv",
        "p95-20-ms-20-cps.svg",
        "p95-20-ms-20-cps.png",
    ] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let r: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("results.json")).expect("results.json"),
    )
    .expect("json");
    let points = r["points"].as_array().expect("points");
    assert_eq!(points.len(), 2, "{r}");
    let mut lost = 0;
    let mut retransmitted = 0.0;
    for p in points {
        let run = &p["runs"][0];
        let calls = run["calls"].as_u64().expect("calls");
        assert!(calls >= 100, "{p}");
        assert_eq!(
            run["completed"].as_u64(),
            Some(calls),
            "every call completed: {p}"
        );
        let rang = run["rang"].as_u64().expect("rang");
        if p["transport"] == "sctp-unordered" {
            // Unordered delivery lets a 200 overtake its 180 when the 180 is lost and
            // retransmitted (the caller then ignores the late 180): nearly every call rang.
            assert!(rang * 100 >= calls * 95, "nearly every call rang: {p}");
        } else {
            assert_eq!(rang, calls, "every call rang: {p}");
        }
        // INVITE out and 180 back each cross the 20 ms link.
        assert!(run["psd_p50_ms"].as_f64().expect("p50") >= 40.0, "{p}");
        lost += run["lost"][0].as_u64().unwrap_or(0) + run["lost"][1].as_u64().unwrap_or(0);
        retransmitted += run["sctp_retransmissions"].as_f64().unwrap_or(0.0);
        // Per call INVITE, ACK and BYE one way, 180, 200 and 200 back: the loss SCTP met
        // is reckoned over these.
        let sent = run["sctp_messages"].as_f64().unwrap_or(0.0);
        assert!(sent >= 6.0 * calls as f64, "{p}");
        assert!(run["sctp_needless"].as_f64().is_some(), "{p}");
    }
    assert!(lost > 0, "the link lost nothing: {r}");
    assert!(retransmitted > 0.0, "SCTP retransmitted nothing: {r}");
    let comparisons = r["comparisons"].as_array().expect("comparisons");
    assert!(
        comparisons
            .iter()
            .any(|c| c["comparison"] == "ordered vs unordered, same loss" && c["ks_p"].is_number()),
        "{r}"
    );
}

/// The competing-traffic form (seed 002's Figs. 5-6): one long-lived TCP transfer across a
/// 10 Mbit/s bottleneck behind the paper's 10-20 packet DRD queue, SCTP unordered, one run of
/// 6 s. Checks that the transfer ran, that the queue (not a random loss) dropped packets,
/// that every call still rang over SCTP, and that the point and its plot are named by what
/// they sweep.
#[test]
fn holb_runs_with_competing_tcp_through_the_router_queue() {
    if !holdline_netem::netns::is_root() {
        eprintln!("skipped: needs root (network namespaces and TUN devices)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("holb");
    common::run_lab(
        &[
            "holb",
            "--topology",
            "proxies",
            "--transports",
            "sctp-unordered",
            "--competing-tcp",
            "1",
            "--queues",
            "10-20",
            "--delays",
            "20",
            "--rates",
            "20",
            "--correlation",
            "0",
            "--runs",
            "1",
            "--duration",
            "6",
        ],
        &out,
        Duration::from_secs(240),
    );
    assert!(out.join("p95-20-ms-20-cps-q10-20-tcp.svg").exists());
    let r: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("results.json")).expect("results.json"),
    )
    .expect("json");
    let p = &r["points"][0];
    assert_eq!(p["sweep"], "competing-tcp", "{r}");
    assert_eq!(p["competing_tcp"], 1, "{r}");
    assert_eq!(p["queue"], serde_json::json!([10, 20]), "{r}");
    let run = &p["runs"][0];
    assert!(
        run["competing_bytes"].as_u64().unwrap_or(0) > 1_000_000,
        "the transfer carried little: {run}"
    );
    assert!(
        run["queue_drops"][0].as_u64().unwrap_or(0) > 0,
        "the queue dropped nothing A→B: {run}"
    );
    // No random loss was asked for.
    assert_eq!(run["lost"][0].as_u64(), Some(0), "{run}");
    let calls = run["calls"].as_u64().expect("calls");
    assert!(calls >= 100, "{run}");
    assert_eq!(run["rang"].as_u64(), Some(calls), "every call rang: {run}");
}

/// The direct topology (seed 002's own test bed, l. 97-99): `holdline load uac` speaks SCTP
/// across the link to `holdline load uas`, no proxy between. Checks that the results say
/// so, that every call rang across the link, that each call was the paper's short exchange
/// (INVITE and ACK one way, 180 and 486 the other: four SCTP messages, where the proxies'
/// whole calls take six or more), that the retransmissions are the generators' own, and
/// that the caller set its association up before its first call.
#[test]
fn holb_direct_topology_calls_across_the_link_without_proxies() {
    if !holdline_netem::netns::is_root() {
        eprintln!("skipped: needs root (network namespaces and TUN devices)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("holb");
    common::run_lab(
        &[
            "holb",
            "--transports",
            "sctp-unordered",
            "--losses",
            "2",
            "--delays",
            "20",
            "--rates",
            "20",
            "--correlation",
            "0",
            "--runs",
            "1",
            "--duration",
            "6",
        ],
        &out,
        Duration::from_secs(240),
    );
    let r: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("results.json")).expect("results.json"),
    )
    .expect("json");
    assert_eq!(r["topology"], "direct", "{r}");
    let run = &r["points"][0]["runs"][0];
    let calls = run["calls"].as_u64().expect("calls");
    assert!(calls >= 100, "{run}");
    assert_eq!(run["rang"].as_u64(), Some(calls), "every call rang: {run}");
    assert!(run["psd_p50_ms"].as_f64().expect("p50") >= 40.0, "{run}");
    let sent = run["sctp_messages"].as_f64().expect("sctp_messages");
    assert!(
        sent >= 4.0 * calls as f64 && sent < 5.0 * calls as f64,
        "{sent} SCTP messages for {calls} calls: {run}"
    );
    assert!(
        run["lost"][0].as_u64().unwrap_or(0) + run["lost"][1].as_u64().unwrap_or(0) > 0,
        "the link lost nothing: {run}"
    );
    assert!(
        run["sctp_retransmissions"].as_f64().unwrap_or(0.0) > 0.0,
        "the generators' SCTP retransmitted nothing: {run}"
    );
    let uac = std::fs::read_dir(out.join("runs"))
        .expect("runs")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with("-uac0.json"))
        .expect("the caller's report");
    let uac: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&uac).expect("read")).expect("json");
    assert_eq!(
        uac["meta"]["connect_first"]["up"], 1,
        "the association was up before the first call: {}",
        uac["meta"]
    );
}
