//! SIP over SCTP over UDP between two holdlines (issue 19 item 1): `holdline load uac` →
//! holdline A (UDP in) → SCTP → holdline B → UDP → `holdline load uas`, every message of every
//! call (INVITE, 180, 200, ACK, BYE, 200) crossing the SCTP association.
//!
//! - On loopback, ordered and unordered: every call completes, one association carries them
//!   all, and the messages are counted as SCTP at both servers.
//! - Across `holdline netem` with 4% loss each way (root; skipped with a note otherwise):
//!   every call completes over SCTP ordered and unordered, the link really lost packets, and
//!   SCTP really retransmitted.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::{Holdline, free_port, metric, scrape};
use holdline_base::Duration as LinkDuration;
use holdline_netem::{Clock, Emulator, EmulatorConfig, Topology, netns};
use holdline_netmodel::{LinkConfig, Loss};

fn s(v: &str) -> String {
    v.to_owned()
}

fn calls(report: &serde_json::Value, key: &str) -> u64 {
    report["totals"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("no totals.{key} in {report}"))
}

/// The `[sctp]` section of the chains' servers: ordered or not, short timers.
fn sctp_section(unordered: bool) -> String {
    format!("[sctp]\nunordered = {unordered}\nrto_min_ms = 200\nrto_initial_ms = 500\n")
}

/// A server's arguments: listeners, one route, memory store, metrics, one worker or two,
/// its configuration file holding `config`.
fn serve_args(
    listen: &[String],
    route: &str,
    metrics: SocketAddr,
    workers: u32,
    config: &str,
    dir: &Path,
) -> Vec<String> {
    let path = dir.join(format!("sctp-{}.toml", metrics.port()));
    std::fs::write(&path, config).expect("write config");
    let mut a = vec![s("--config"), path.display().to_string()];
    for l in listen {
        a.push(s("--listen"));
        a.push(l.clone());
    }
    a.extend([
        s("--route"),
        format!("*={route}"),
        s("--store"),
        s("memory"),
        s("--workers"),
        workers.to_string(),
        s("--metrics"),
        metrics.to_string(),
    ]);
    a
}

/// `UAC → A (UDP) → SCTP → B → (UDP) UAS` on loopback: the ports and metrics addresses.
struct Loopback {
    uas_port: u16,
    b_sctp: u16,
    a_udp: u16,
    a_sctp: u16,
    b_udp: u16,
    a_metrics: SocketAddr,
    b_metrics: SocketAddr,
}

impl Loopback {
    fn new() -> Self {
        let metrics =
            || -> SocketAddr { format!("127.0.0.1:{}", free_port()).parse().expect("addr") };
        Self {
            uas_port: free_port(),
            b_sctp: free_port(),
            a_udp: free_port(),
            a_sctp: free_port(),
            b_udp: free_port(),
            a_metrics: metrics(),
            b_metrics: metrics(),
        }
    }

    /// Starts B, then A, both with `config`; returns (A, B).
    fn start(&self, workers: u32, config: &str, dir: &Path) -> (Holdline, Holdline) {
        // B needs a UDP socket of its own to reach the UAS.
        let b = Holdline::start(&serve_args(
            &[
                format!("sctp:127.0.0.1:{}", self.b_sctp),
                format!("udp:127.0.0.1:{}", self.b_udp),
            ],
            &format!("udp:127.0.0.1:{}", self.uas_port),
            self.b_metrics,
            workers,
            config,
            dir,
        ));
        let a = Holdline::start(&serve_args(
            &[
                format!("udp:127.0.0.1:{}", self.a_udp),
                format!("sctp:127.0.0.1:{}", self.a_sctp),
            ],
            &format!("sctp:127.0.0.1:{}", self.b_sctp),
            self.a_metrics,
            workers,
            config,
            dir,
        ));
        (a, b)
    }
}

fn loopback_chain(unordered: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = Loopback::new();
    let (a, b) = l.start(2, &sctp_section(unordered), dir.path());
    let Loopback {
        uas_port,
        a_udp,
        a_sctp,
        a_metrics,
        b_metrics,
        ..
    } = l;
    assert!(
        a.startup.contains(&format!("sctp:127.0.0.1:{a_sctp}")),
        "{}",
        a.startup
    );
    let _uas = common::load(&[
        s("uas"),
        s("--listen"),
        format!("127.0.0.1:{uas_port}"),
        s("--duration"),
        s("40"),
    ]);
    let json = dir.path().join("uac.json");
    let report = common::run_load_report_in(
        None,
        &[
            s("uac"),
            s("--target"),
            format!("127.0.0.1:{a_udp}"),
            s("--to"),
            s("bob@example.com"),
            s("--rate"),
            s("200"),
            s("--calls"),
            s("600"),
            s("--hold"),
            s("fixed:0.5"),
            s("--max-time"),
            s("30"),
            s("--json"),
            json.display().to_string(),
        ],
        &json,
        Duration::from_secs(40),
    );
    assert_eq!(calls(&report, "attempted"), 600, "{report}");
    assert_eq!(
        calls(&report, "calls_ok"),
        600,
        "every call completes: {report}"
    );
    let (ma, mb) = (scrape(a_metrics), scrape(b_metrics));
    // Per call: INVITE, ACK, BYE from A to B; 180, 200, 200 back (the 100 is hop by hop).
    assert!(
        metric(&ma, "holdline_messages_out_total", &["transport=\"sctp\""]) >= 1_800.0,
        "{ma}"
    );
    assert!(
        metric(&mb, "holdline_messages_in_total", &["transport=\"sctp\""]) >= 1_800.0,
        "{mb}"
    );
    assert!(
        metric(&ma, "holdline_messages_in_total", &["transport=\"sctp\""]) >= 1_800.0,
        "{ma}"
    );
    // One association carried everything: the one A started, which B used to answer.
    assert_eq!(
        metric(&ma, "holdline_sctp_associations_established_total", &[]),
        1.0
    );
    assert_eq!(
        metric(&mb, "holdline_sctp_associations_established_total", &[]),
        1.0
    );
    assert_eq!(
        metric(&ma, "holdline_drops_total", &["reason=\"sctp_queue_full\""]),
        0.0
    );
    drop(a);
    drop(b);
}

#[test]
fn two_holdlines_carry_calls_over_sctp_ordered() {
    loopback_chain(false);
}

#[test]
fn two_holdlines_carry_calls_over_sctp_unordered() {
    loopback_chain(true);
}

fn lossy_chain(unordered: bool, tag: char) {
    if !netns::is_root() {
        eprintln!("skipped: needs root (network namespaces and TUN devices)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let topo = Topology::create(&format!("hls{}{tag}", std::process::id())).expect("topology");
    let link = LinkConfig {
        delay: LinkDuration::from_millis(10),
        loss: Loss::Random(0.04),
        overhead_bytes: 0,
        ..LinkConfig::default()
    };
    let emu = Emulator::start(
        &topo,
        &EmulatorConfig {
            a_to_b: link,
            b_to_a: link,
            seed: 3,
        },
        Clock::start(),
    )
    .expect("emulator");
    let metrics: SocketAddr = "127.0.0.1:9480".parse().expect("addr");
    let sctp_a = format!("sctp:{}:9899", topo.addr_a);
    let sctp_b = format!("sctp:{}:9899", topo.addr_b);
    let b = Holdline::start_in(
        Some(&topo.ns_b),
        &serve_args(
            &[sctp_b.clone(), s("udp:127.0.0.1:5060")],
            "udp:127.0.0.1:5090",
            metrics,
            1,
            &sctp_section(unordered),
            dir.path(),
        ),
    );
    let a = Holdline::start_in(
        Some(&topo.ns_a),
        &serve_args(
            &[s("udp:127.0.0.1:5060"), sctp_a],
            &sctp_b,
            metrics,
            1,
            &sctp_section(unordered),
            dir.path(),
        ),
    );
    let _uas = common::load_in(
        Some(&topo.ns_b),
        &[
            s("uas"),
            s("--listen"),
            s("127.0.0.1:5090"),
            s("--duration"),
            s("60"),
        ],
    );
    let json = dir.path().join("uac.json");
    let report = common::run_load_report_in(
        Some(&topo.ns_a),
        &[
            s("uac"),
            s("--target"),
            s("127.0.0.1:5060"),
            s("--to"),
            s("bob@example.com"),
            s("--rate"),
            s("40"),
            s("--calls"),
            s("400"),
            s("--hold"),
            s("fixed:0.5"),
            s("--max-time"),
            s("45"),
            s("--json"),
            json.display().to_string(),
        ],
        &json,
        Duration::from_secs(60),
    );
    let (ab, ba) = emu.stats();
    assert_eq!(calls(&report, "attempted"), 400, "{report}");
    assert_eq!(
        calls(&report, "calls_ok"),
        400,
        "every call completes across 4% loss: {report}"
    );
    assert!(
        ab.lost > 0 && ba.lost > 0,
        "the link lost nothing: {ab:?} {ba:?}"
    );
    let scrape_in = |ns: &str| netns::run_in(ns, move || scrape(metrics)).expect("enter namespace");
    let (ma, mb) = (scrape_in(&topo.ns_a), scrape_in(&topo.ns_b));
    let retransmitted = |m: &str| {
        metric(m, "holdline_sctp_t3_timeouts_total", &[])
            + metric(m, "holdline_sctp_fast_retransmits_total", &[])
    };
    assert!(
        retransmitted(&ma) + retransmitted(&mb) > 0.0,
        "SCTP retransmitted nothing: {ma}\n{mb}"
    );
    assert_eq!(
        metric(&ma, "holdline_sctp_associations_lost_total", &[]),
        0.0
    );
    drop(a);
    drop(b);
    drop(emu);
    drop(topo);
}

#[test]
fn calls_complete_across_a_lossy_link_over_sctp_ordered() {
    lossy_chain(false, 'o');
}

#[test]
fn calls_complete_across_a_lossy_link_over_sctp_unordered() {
    lossy_chain(true, 'u');
}

/// HEARTBEATs between two holdlines (RFC 4960 §8.3): after one call the association idles and
/// A keeps it alive with answered HEARTBEATs; then B is killed, and A finds the peer
/// unreachable from its unanswered HEARTBEATs alone — no call is sent to find out.
#[test]
fn heartbeats_keep_an_idle_association_and_find_a_dead_peer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = Loopback::new();
    // 100 ms interval + 100 ms RTO.Min: a HEARTBEAT every 0.2 s, a dead peer found after
    // ten unanswered (about 2 s).
    let (_a, b) = l.start(
        1,
        "[sctp]\nheartbeat_interval_ms = 100\nrto_min_ms = 100\nrto_initial_ms = 200\n",
        dir.path(),
    );
    let Loopback {
        uas_port,
        a_udp,
        a_metrics,
        ..
    } = l;
    let _uas = common::load(&[
        s("uas"),
        s("--listen"),
        format!("127.0.0.1:{uas_port}"),
        s("--duration"),
        s("30"),
    ]);
    let json = dir.path().join("uac.json");
    let report = common::run_load_report_in(
        None,
        &[
            s("uac"),
            s("--target"),
            format!("127.0.0.1:{a_udp}"),
            s("--to"),
            s("bob@example.com"),
            s("--calls"),
            s("1"),
            s("--hold"),
            s("fixed:0.1"),
            s("--max-time"),
            s("15"),
            s("--json"),
            json.display().to_string(),
        ],
        &json,
        Duration::from_secs(20),
    );
    assert_eq!(calls(&report, "calls_ok"), 1, "{report}");
    // Idle: HEARTBEATs go out and are answered; nothing is lost.
    let m = common::wait_metrics(a_metrics, Duration::from_secs(10), |t| {
        metric(t, "holdline_sctp_heartbeats_total", &[]) >= 10.0
    });
    assert_eq!(
        metric(&m, "holdline_sctp_heartbeat_failures_total", &[]),
        0.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "holdline_sctp_associations_lost_total", &[]),
        0.0,
        "{m}"
    );
    assert_eq!(metric(&m, "holdline_sctp_associations", &[]), 1.0, "{m}");
    // B dies (SIGKILL): A's HEARTBEATs go unanswered until it gives the peer up.
    drop(b);
    let m = common::wait_metrics(a_metrics, Duration::from_secs(15), |t| {
        metric(t, "holdline_sctp_heartbeat_failures_total", &[]) >= 1.0
    });
    assert_eq!(
        metric(&m, "holdline_sctp_associations_lost_total", &[]),
        1.0,
        "{m}"
    );
    assert_eq!(metric(&m, "holdline_sctp_associations", &[]), 0.0, "{m}");
}
