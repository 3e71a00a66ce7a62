//! `holdline netem` end to end (issue 19 item 2): `check --quick` measures the emulator
//! against its configuration, and `run` joins two namespaces through a delayed link until
//! SIGTERM, then removes them. Needs root (network namespaces, TUN devices); skipped with a
//! note otherwise.

mod common;

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{BIN, Guard};
use holdline_netem::netns;

fn skip() -> bool {
    if netns::is_root() {
        return false;
    }
    eprintln!("skipped: needs root (network namespaces and TUN devices)");
    true
}

fn case<'a>(cases: &'a [serde_json::Value], prefix: &str) -> &'a serde_json::Value {
    cases
        .iter()
        .find(|c| c["case"].as_str().is_some_and(|n| n.starts_with(prefix)))
        .unwrap_or_else(|| panic!("no case `{prefix}` in {cases:?}"))
}

fn f(v: &serde_json::Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("no number `{key}` in {v}"))
}

#[test]
fn check_measures_delay_loss_and_the_bottleneck_as_configured() {
    if skip() {
        return;
    }
    // Not beside the other emulator of this file: a probe receiver starved of the CPU drops
    // probes that the link did not (a CI run measured 1.76% lost against the link's 1.04%).
    let _one_at_a_time = common::sipp_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(BIN)
        .args(["netem", "check", "--quick", "--out"])
        .arg(dir.path())
        .output()
        .expect("run holdline netem check");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "netem check failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for file in [
        "accuracy.json",
        "accuracy.csv",
        "delay.svg",
        "delay.png",
        "loss.svg",
    ] {
        assert!(dir.path().join(file).exists(), "{file} missing");
    }
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("accuracy.json")).expect("read json"),
    )
    .expect("parse json");
    let cases = json["cases"].as_array().expect("cases");
    // Delay: the mean one-way delay within 5% of the configured one (the bound).
    for name in ["delay 20 ms", "delay 60 ms", "delay 20 ms jitter"] {
        let c = case(cases, name);
        assert!(f(c, "delay_error_pct").abs() <= 5.0, "{c}");
        assert!(f(c, "measured_p50_ms") >= f(c, "delay_ms"), "{c}");
    }
    // Loss: every missing probe is accounted for, by the link's model or by the host's
    // kernel counters (a busy machine's full socket buffer is not the link); the emulator
    // itself lost none; and the link's rate is the configured one within three of its 95%
    // intervals.
    for name in ["loss 1%", "loss 4%", "loss 2% correlation"] {
        let c = case(cases, name);
        assert_eq!(
            f(c, "missing_probes"),
            f(c, "link_lost") + f(c, "host_drops"),
            "{c}"
        );
        assert_eq!(f(c, "overflow") + f(c, "write_errors"), 0.0, "{c}");
        let (want, got, ci) = (
            f(c, "loss_pct"),
            f(c, "measured_loss_pct"),
            f(c, "measured_loss_ci95_pct"),
        );
        assert!((got - want).abs() <= 3.0 * ci.max(0.1), "{c}");
    }
    let corr = f(case(cases, "loss 2% correlation"), "measured_correlation");
    assert!(
        (0.6..0.95).contains(&corr),
        "correlation 0.8 measured {corr}"
    );
    let indep = f(case(cases, "loss 4%"), "measured_correlation");
    assert!(
        indep.abs() < 0.2,
        "independent loss measured correlation {indep}"
    );
    // The bottleneck: probes leave at its rate, and every missing probe was dropped by the
    // queue (tail or DRD).
    let b = case(cases, "2 Mbit/s");
    assert!(f(b, "rate_error_pct").abs() <= 5.0, "{b}");
    assert!(f(b, "random_drops") > 0.0, "DRD dropped nothing: {b}");
    assert_eq!(
        f(b, "missing_probes"),
        f(b, "queue_drops") + f(b, "random_drops") + f(b, "host_drops"),
        "{b}"
    );
}

#[test]
fn run_joins_two_namespaces_until_terminated() {
    if skip() {
        return;
    }
    let _one_at_a_time = common::sipp_lock();
    let mut child = Command::new(BIN)
        .args(["netem", "run", "--delay", "15", "--duration", "60"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn holdline netem run");
    let stdout = child.stdout.take().expect("stdout");
    let mut guard = Guard(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let first = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("netem run printed nothing");
    // netem: NS_A (10.203.0.1) <-> NS_B (10.203.0.2); ...
    let words: Vec<&str> = first.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"netem:"), "{first}");
    let (ns_a, ns_b) = (words[1].to_owned(), words[4].to_owned());
    let server: SocketAddr = "10.203.0.2:7002".parse().expect("addr");
    let listener = netns::run_in(&ns_b, move || TcpListener::bind(server))
        .expect("enter b")
        .expect("bind in b");
    let accept = std::thread::spawn(move || listener.accept().map(|_| ()));
    let took = netns::run_in(&ns_a, move || {
        let t = std::time::Instant::now();
        TcpStream::connect_timeout(&server, Duration::from_secs(10)).map(|_| t.elapsed())
    })
    .expect("enter a")
    .expect("connect across the emulated link");
    accept.join().expect("accept thread").expect("accept");
    // SYN and SYN-ACK cross a 15 ms link each.
    assert!(took >= Duration::from_millis(30), "connect took {took:?}");
    let status = Command::new("kill")
        .args(["-TERM", &guard.0.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = guard
        .wait_for(Duration::from_secs(10))
        .expect("netem run did not stop on SIGTERM");
    assert!(exit.success(), "{exit:?}");
    // The reader thread ends when the pipe closes; wait for it (bounded).
    let mut rest = Vec::new();
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(5)) {
        rest.push(line);
    }
    assert!(
        rest.iter().any(|l| l.starts_with("final")),
        "no final counters: {rest:?}"
    );
    for ns in [&ns_a, &ns_b] {
        assert!(
            !std::path::Path::new(&format!("/run/netns/{ns}")).exists(),
            "namespace {ns} left behind"
        );
    }
}
