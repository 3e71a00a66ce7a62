//! `holdline load` over SIP over SCTP over UDP (`--transport sctp`; RFC 4168 over RFC 6951),
//! with real sockets on loopback:
//!
//! - `holdline load pair --transport sctp`: the UAC's legs call the in-process UAS, each leg
//!   over its own association; every call completes, ordered and unordered;
//! - `holdline load uac --transport sctp` → `holdline serve` with only an `sctp:` listener →
//!   `holdline load uas --transport sctp`: every call completes at both ends, and the
//!   server counts the associations and the messages as SCTP (it has no other transport).
//!
//! Every process is bounded (`--calls`, `--max-time`, `--duration`) and stopped by PID when
//! a test fails.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::{Holdline, free_port, metric, wait_metrics};

fn s(v: &str) -> String {
    v.to_owned()
}

fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", path.display()))
}

fn total(report: &serde_json::Value, key: &str) -> u64 {
    report["totals"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("no totals.{key} in {report}"))
}

fn sctp(report: &serde_json::Value, key: &str) -> u64 {
    report["meta"]["sctp"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("no meta.sctp.{key} in {report}"))
}

const CALLS: u64 = 300;

/// `holdline load pair --transport sctp` with 3 legs: 300 calls, all complete, no SIP
/// retransmission (SCTP is reliable), one association per leg (counted at both of its ends,
/// both in this process).
fn pair(unordered: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("pair.json");
    let mut args = vec![
        s("pair"),
        s("--transport"),
        s("sctp"),
        s("--rate"),
        s("300"),
        s("--calls"),
        CALLS.to_string(),
        s("--connections"),
        s("3"),
        s("--hold"),
        s("fixed:0.2"),
        s("--drain"),
        s("10"),
        s("--max-time"),
        s("30"),
        s("--progress"),
        s("off"),
        s("--json"),
        json.display().to_string(),
    ];
    if unordered {
        args.extend([s("--sctp-unordered"), s("--sctp-streams"), s("4")]);
    }
    let report = common::run_load_report(&args, &json, Duration::from_secs(40));
    assert_eq!(report["meta"]["transport"], "sctp", "{report}");
    assert_eq!(total(&report, "attempted"), CALLS, "{report}");
    assert_eq!(
        total(&report, "calls_ok"),
        CALLS,
        "every call completes: {report}"
    );
    assert_eq!(total(&report, "calls_failed"), 0, "{report}");
    assert_eq!(total(&report, "timeouts"), 0, "{report}");
    assert_eq!(total(&report, "send_errors"), 0, "{report}");
    // Reliable transport: Timers A and E never fire.
    assert_eq!(total(&report, "retrans_invite"), 0, "{report}");
    assert_eq!(total(&report, "retrans_bye"), 0, "{report}");
    // The UAS saw every call end with its ACK.
    assert_eq!(total(&report, "uas_invites"), CALLS, "{report}");
    // Three legs, three associations, each established at the leg and at the UAS.
    assert_eq!(sctp(&report, "associations_established"), 6, "{report}");
    assert_eq!(sctp(&report, "association_setup_failures"), 0, "{report}");
    assert_eq!(sctp(&report, "associations_lost"), 0, "{report}");
    // INVITE, ACK, BYE one way; 180, 200, 200 the other: all of them over SCTP.
    assert!(
        sctp(&report, "messages_received") >= 6 * CALLS,
        "{}",
        report["meta"]
    );
    assert_eq!(report["meta"]["sctp"]["unordered"], unordered, "{report}");
    let streams = if unordered { 4 } else { 16 };
    assert_eq!(sctp(&report, "streams"), streams, "{report}");
}

#[test]
fn pair_completes_every_call_over_sctp_ordered() {
    pair(false);
}

#[test]
fn pair_completes_every_call_over_sctp_unordered() {
    pair(true);
}

/// `holdline load uac --transport sctp --connections 2` → `holdline serve` (an `sctp:`
/// listener and nothing else, routing everything to an `sctp:` next hop) → `holdline load uas
/// --transport sctp`. The ACK and BYE reach the UAS over SCTP only because its Contact says
/// `;transport=sctp`.
#[test]
fn load_uac_through_serve_to_load_uas_over_sctp() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (uas_port, server_port) = (free_port(), free_port());
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("metrics address");
    let uas_json = dir.path().join("uas.json");
    let mut uas = common::load(&[
        s("uas"),
        s("--transport"),
        s("sctp"),
        s("--listen"),
        format!("127.0.0.1:{uas_port}"),
        s("--calls"),
        CALLS.to_string(),
        s("--duration"),
        s("40"),
        s("--progress"),
        s("off"),
        s("--json"),
        uas_json.display().to_string(),
    ]);
    common::wait_udp_bound(uas_port, Duration::from_secs(10));
    let server = Holdline::start(&[
        s("--listen"),
        format!("sctp:127.0.0.1:{server_port}"),
        s("--route"),
        format!("*=sctp:127.0.0.1:{uas_port}"),
        s("--store"),
        s("memory"),
        s("--workers"),
        s("2"),
        s("--metrics"),
        metrics.to_string(),
    ]);
    assert!(
        server
            .startup
            .contains(&format!("sctp:127.0.0.1:{server_port}")),
        "{}",
        server.startup
    );
    let json = dir.path().join("uac.json");
    let report = common::run_load_report(
        &[
            s("uac"),
            s("--transport"),
            s("sctp"),
            s("--target"),
            format!("127.0.0.1:{server_port}"),
            s("--to"),
            s("bob@example.com"),
            s("--rate"),
            s("150"),
            s("--calls"),
            CALLS.to_string(),
            s("--connections"),
            s("2"),
            s("--hold"),
            s("fixed:0.2"),
            s("--drain"),
            s("10"),
            s("--max-time"),
            s("30"),
            s("--progress"),
            s("off"),
            s("--json"),
            json.display().to_string(),
        ],
        &json,
        Duration::from_secs(40),
    );
    assert_eq!(report["meta"]["transport"], "sctp", "{report}");
    assert_eq!(total(&report, "attempted"), CALLS, "{report}");
    assert_eq!(
        total(&report, "calls_ok"),
        CALLS,
        "every call completes: {report}"
    );
    assert_eq!(total(&report, "calls_failed"), 0, "{report}");
    assert_eq!(total(&report, "timeouts"), 0, "{report}");
    assert_eq!(total(&report, "send_errors"), 0, "{report}");
    assert_eq!(total(&report, "retrans_invite"), 0, "{report}");
    // One association per leg.
    assert_eq!(sctp(&report, "associations_established"), 2, "{report}");
    assert_eq!(sctp(&report, "association_setup_failures"), 0, "{report}");

    // The UAS ends by itself after its 300th call (BYE answered).
    let status = uas
        .wait_for(Duration::from_secs(20))
        .expect("the UAS stops after its calls");
    assert!(status.success(), "holdline load uas: {status:?}");
    let uas_report = read_json(&uas_json);
    assert_eq!(uas_report["meta"]["transport"], "sctp", "{uas_report}");
    assert_eq!(total(&uas_report, "uas_invites"), CALLS, "{uas_report}");
    assert_eq!(
        total(&uas_report, "completed"),
        CALLS,
        "every ACK reached the UAS: {uas_report}"
    );
    assert_eq!(total(&uas_report, "timeouts"), 0, "{uas_report}");
    assert_eq!(total(&uas_report, "send_errors"), 0, "{uas_report}");
    // The server's one association to it.
    assert_eq!(
        sctp(&uas_report, "associations_established"),
        1,
        "{uas_report}"
    );

    // Per call the server receives INVITE, ACK, BYE from the UAC and 180, 200, 200 from the
    // UAS, and sends them on: over SCTP, its only transport.
    let want = (6 * CALLS) as f64;
    let m = wait_metrics(metrics, Duration::from_secs(10), |m| {
        metric(m, "holdline_messages_in_total", &["transport=\"sctp\""]) >= want
            && metric(m, "holdline_messages_out_total", &["transport=\"sctp\""]) >= want
    });
    assert!(
        metric(&m, "holdline_sctp_associations_established_total", &[]) >= 3.0,
        "two from the UAC's legs, one to the UAS:\n{m}"
    );
    assert_eq!(
        metric(&m, "holdline_sctp_association_setup_failures_total", &[]),
        0.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "holdline_drops_total", &["reason=\"sctp_queue_full\""]),
        0.0,
        "{m}"
    );
    drop(server);
}

/// `holdline load uac --connect-first` with 3 legs to `holdline load uas`: the three
/// associations are up before the first call (the report says how many and how long it
/// took), and every call completes over them.
#[test]
fn connect_first_sets_every_association_up_before_the_first_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let uas_port = free_port();
    let mut uas = common::load(&[
        s("uas"),
        s("--transport"),
        s("sctp"),
        s("--listen"),
        format!("127.0.0.1:{uas_port}"),
        s("--calls"),
        s("60"),
        s("--duration"),
        s("30"),
        s("--progress"),
        s("off"),
    ]);
    common::wait_udp_bound(uas_port, Duration::from_secs(10));
    let json = dir.path().join("uac.json");
    let report = common::run_load_report(
        &[
            s("uac"),
            s("--transport"),
            s("sctp"),
            s("--target"),
            format!("127.0.0.1:{uas_port}"),
            s("--rate"),
            s("100"),
            s("--calls"),
            s("60"),
            s("--connections"),
            s("3"),
            s("--connect-first"),
            s("--max-time"),
            s("20"),
            s("--progress"),
            s("off"),
            s("--json"),
            json.display().to_string(),
        ],
        &json,
        Duration::from_secs(30),
    );
    let c = &report["meta"]["connect_first"];
    assert_eq!(c["of"], 3, "{c}");
    assert_eq!(c["up"], 3, "every association up before the calls: {c}");
    assert_eq!(total(&report, "calls_ok"), 60, "{report}");
    assert_eq!(sctp(&report, "associations_established"), 3, "{report}");
    let _ = uas.wait_for(Duration::from_secs(20));
}

/// `--connect-first 1` towards a peer that never answers: the caller sends its INIT at
/// once, gives up waiting after the second it was given (saying so in its report), and
/// calls anyway; its run still ends within `--max-time`.
#[test]
fn connect_first_waits_no_longer_than_asked_for_a_silent_peer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let target = silent.local_addr().expect("addr");
    let json = dir.path().join("uac.json");
    let mut uac = common::load(&[
        s("uac"),
        s("--transport"),
        s("sctp"),
        s("--target"),
        target.to_string(),
        s("--rate"),
        s("10"),
        s("--calls"),
        s("2"),
        s("--connect-first"),
        s("1"),
        s("--drain"),
        s("2"),
        s("--max-time"),
        s("6"),
        s("--progress"),
        s("off"),
        s("--json"),
        json.display().to_string(),
    ]);
    // The first datagram is an INIT (chunk type 1 after the 12-byte common header).
    let mut buf = [0u8; 2048];
    let (n, _) = silent.recv_from(&mut buf).expect("an INIT arrives");
    assert!(
        n > 12 && buf[12] == 1,
        "not an INIT: {:?}",
        &buf[..n.min(32)]
    );
    let _ = uac
        .wait_for(Duration::from_secs(15))
        .expect("the caller stops by itself");
    let report = read_json(&json);
    let c = &report["meta"]["connect_first"];
    assert_eq!(c["of"], 1, "{c}");
    assert_eq!(c["up"], 0, "{c}");
    let waited = c["seconds"].as_f64().expect("seconds");
    assert!((1.0..5.0).contains(&waited), "waited {waited} s: {c}");
    assert_eq!(total(&report, "calls_ok"), 0, "{report}");
}
