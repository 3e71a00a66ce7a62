//! Local overload control end to end: `holdline load uac` → `holdline serve` (one worker,
//! its capacity cut to about 80 calls/s with `--emulate-cost-us`) → `holdline load uas`,
//! over UDP on 127.0.0.1, offered about seven times that capacity.
//!
//! - With the default control (OCC) the server answers excess new INVITEs with `503` at its
//!   admission gate, counts them by reason, absorbs the ACKs of those 503s, and every call it
//!   admitted completes: no admitted call's message is rejected or lost for load.
//! - With `--overload none` nothing is rejected (the collapse is the experiments' subject,
//!   not asserted here).
//! - TCP smart forwarding: with a next hop that accepts a connection and never reads it,
//!   new INVITEs to it are answered `503` by holdline as soon as that connection backs up,
//!   while calls to another next hop all complete (one stalled next hop delays only its own
//!   traffic).
//!
//! No speed is asserted: the checks are on what happened to each call, not on how fast.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{BIN, Guard, Holdline, free_port, metric, scrape};

fn s(v: &str) -> String {
    v.to_owned()
}

fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", path.display()))
}

fn total(v: &serde_json::Value, key: &str) -> u64 {
    v["totals"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("totals.{key} missing in {v}"))
}

fn load(args: &[String]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("load")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// Runs one overloaded session with `--overload ALGORITHM`; returns the UAC's JSON report and
/// the server's metrics after it.
fn overloaded(algorithm: &str, rate: u32, seconds: u32) -> (serde_json::Value, String) {
    let (proxy, uas, metrics) = (free_port(), free_port(), free_port());
    let server = Holdline::start(&[
        s("--listen"),
        format!("udp:127.0.0.1:{proxy}"),
        s("--route"),
        format!("*=udp:127.0.0.1:{uas}"),
        s("--store"),
        s("memory"),
        s("--workers"),
        s("1"),
        s("--metrics"),
        format!("127.0.0.1:{metrics}"),
        s("--overload"),
        s(algorithm),
        // About 2 ms of work per message, 6 messages per call: ~80 calls/s. A rejection
        // costs only its real work.
        s("--emulate-cost-us"),
        s("2000"),
        s("--emulate-reject-cost-us"),
        s("0"),
    ]);
    assert!(
        server
            .startup
            .contains(&format!("overload control {algorithm}")),
        "{}",
        server.startup
    );
    let _uas = Guard(
        load(&[
            s("uas"),
            s("--listen"),
            format!("127.0.0.1:{uas}"),
            s("--max-time"),
            s("60"),
            s("--progress"),
            s("off"),
        ])
        .spawn()
        .expect("spawn uas"),
    );
    common::wait_udp_bound(uas, Duration::from_secs(10));
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("uac.json");
    let mut uac = Guard(
        load(&[
            s("uac"),
            s("--target"),
            format!("127.0.0.1:{proxy}"),
            s("--rate"),
            rate.to_string(),
            s("--duration"),
            seconds.to_string(),
            s("--drain"),
            s("15"),
            s("--max-time"),
            s("40"),
            s("--progress"),
            s("off"),
            s("--json"),
            json.display().to_string(),
        ])
        .spawn()
        .expect("spawn uac"),
    );
    let status = uac
        .wait_for(Duration::from_secs(60))
        .expect("the UAC stops by itself");
    assert!(status.success(), "uac: {status:?}");
    let text = scrape(SocketAddr::from(([127, 0, 0, 1], metrics)));
    (read_json(&json), text)
}

#[test]
fn occ_rejects_excess_invites_with_503_and_completes_every_admitted_call() {
    let _one_run_at_a_time = common::sipp_lock();
    let (v, m) = overloaded("occ", 600, 4);
    let attempted = total(&v, "attempted");
    let ok = total(&v, "calls_ok");
    let r503 = total(&v, "r503");
    assert!(r503 > 0, "no 503 under 7x overload: {}", v["totals"]);
    assert!(ok > 0, "no call completed: {}", v["totals"]);
    // Every call ended with its 200 OK or the gate's 503: nothing timed out, nothing else.
    assert_eq!(ok + total(&v, "calls_failed"), attempted, "{}", v["totals"]);
    assert_eq!(total(&v, "timeouts"), 0, "{}", v["totals"]);
    assert_eq!(total(&v, "r_fail_other"), 0, "{}", v["totals"]);
    assert_eq!(
        v["failures_by_code"].as_object().map(|o| o.len()),
        Some(1),
        "only 503s: {}",
        v["failures_by_code"]
    );
    // Admitted calls completed: each got its 200 OK and its BYE was answered.
    assert_eq!(total(&v, "r200"), ok, "{}", v["totals"]);
    assert_eq!(v["latency"]["bye"]["count"].as_u64(), Some(ok));
    // The server counted them: by reason in the controller, in total in the engine.
    let by_occ = metric(
        &m,
        "holdline_overload_rejected_total",
        &["reason=\"occupancy\""],
    );
    let by_gate = metric(&m, "holdline_sip_rejected_overload_total", &[]);
    assert_eq!(by_occ, by_gate, "{m}");
    assert!(by_gate >= r503 as f64, "server {by_gate} < UAC's {r503}");
    assert!(metric(&m, "holdline_sip_rejection_acks_absorbed_total", &[]) > 0.0);
    assert_eq!(
        metric(&m, "holdline_overload_algorithm", &["algorithm=\"occ\""]),
        1.0
    );
    // Idle again after the run: the acceptance fraction has recovered (it only says "1"
    // when the controller saw light load after the overload).
    let f = metric(&m, "holdline_overload_acceptance_ratio", &[]);
    assert!((0.01..=1.0).contains(&f), "acceptance {f}");
}

#[test]
fn no_control_rejects_nothing() {
    let _one_run_at_a_time = common::sipp_lock();
    let (v, m) = overloaded("none", 300, 2);
    assert_eq!(total(&v, "r503"), 0, "{}", v["totals"]);
    assert!(total(&v, "calls_ok") > 0, "{}", v["totals"]);
    assert_eq!(metric(&m, "holdline_sip_rejected_overload_total", &[]), 0.0);
    assert_eq!(
        metric(&m, "holdline_overload_algorithm", &["algorithm=\"none\""]),
        1.0
    );
}

/// A TCP "next hop" that accepts connections and never reads: its receive buffer is small,
/// so a sender's data backs up in the sender's kernel (`SIOCOUTQ`).
fn stalled_next_hop() -> (std::net::TcpListener, u16) {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    s.set_recv_buffer_size(4096).expect("rcvbuf");
    s.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .expect("bind");
    s.listen(16).expect("listen");
    let l: std::net::TcpListener = s.into();
    let port = l.local_addr().expect("addr").port();
    (l, port)
}

#[test]
fn smart_forwarding_rejects_invites_to_a_backed_up_next_hop_only() {
    let _one_run_at_a_time = common::sipp_lock();
    let (stalled, stalled_port) = stalled_next_hop();
    // Accept (so the connection is established) and hold the sockets unread.
    let held = std::thread::spawn(move || {
        stalled.set_nonblocking(false).expect("blocking accept");
        stalled.accept().ok()
    });
    let (proxy, uas, metrics) = (free_port(), free_port(), free_port());
    let _server = Holdline::start(&[
        s("--listen"),
        format!("tcp:127.0.0.1:{proxy}"),
        s("--route"),
        format!("slow.test=tcp:127.0.0.1:{stalled_port}"),
        s("--route"),
        format!("*=tcp:127.0.0.1:{uas}"),
        s("--store"),
        s("memory"),
        s("--workers"),
        s("1"),
        s("--metrics"),
        format!("127.0.0.1:{metrics}"),
        s("--smart-forwarding"),
        s("ics"),
    ]);
    let _uas = Guard(
        load(&[
            s("uas"),
            s("--transport"),
            s("tcp"),
            s("--listen"),
            format!("127.0.0.1:{uas}"),
            s("--max-time"),
            s("60"),
            s("--progress"),
            s("off"),
        ])
        .spawn()
        .expect("spawn uas"),
    );
    common::wait_bound(false, uas, Duration::from_secs(10));
    let dir = tempfile::tempdir().expect("tempdir");
    let uac = |to: &str, json: &Path| {
        Guard(
            load(&[
                s("uac"),
                s("--transport"),
                s("tcp"),
                s("--target"),
                format!("127.0.0.1:{proxy}"),
                s("--to"),
                to.to_owned(),
                s("--rate"),
                s("300"),
                s("--duration"),
                s("3"),
                s("--drain"),
                s("5"),
                s("--max-time"),
                s("20"),
                s("--progress"),
                s("off"),
                s("--json"),
                json.display().to_string(),
            ])
            .spawn()
            .expect("spawn uac"),
        )
    };
    let (slow_json, fast_json) = (dir.path().join("slow.json"), dir.path().join("fast.json"));
    let mut slow = uac("user{0..9}@slow.test", &slow_json);
    let mut fast = uac("user{0..9}@example.com", &fast_json);
    for g in [&mut slow, &mut fast] {
        let status = g.wait_for(Duration::from_secs(40)).expect("uac stops");
        assert!(status.success(), "{status:?}");
    }
    let (slow, fast) = (read_json(&slow_json), read_json(&fast_json));
    let m = scrape(SocketAddr::from(([127, 0, 0, 1], metrics)));
    // The healthy next hop: every call completed.
    assert_eq!(
        total(&fast, "calls_ok"),
        total(&fast, "attempted"),
        "{}",
        fast["totals"]
    );
    assert_eq!(total(&fast, "r503"), 0, "{}", fast["totals"]);
    // The stalled one: nothing completes, and once its connection backed up the INVITEs
    // were answered 503 by holdline itself (not left to time out).
    assert_eq!(total(&slow, "calls_ok"), 0, "{}", slow["totals"]);
    assert!(total(&slow, "r503") > 0, "{}", slow["totals"]);
    let by_backlog = metric(
        &m,
        "holdline_forward_rejected_total",
        &["reason=\"target_backlog\""],
    );
    assert_eq!(
        by_backlog,
        metric(&m, "holdline_sip_rejected_forward_total", &[]),
        "{m}"
    );
    assert!(by_backlog >= total(&slow, "r503") as f64, "{m}");
    drop(_server);
    let _ = held.join();
}
