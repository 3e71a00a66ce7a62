//! End-to-end calls with the real SIPp (Debian package `sip-tester`, installed by `.ci/run`):
//! SIPp's built-in `uac` → `holdline serve` → SIPp's built-in `uas`, 10,000 calls at 500
//! calls/s, over UDP and over TCP, with zero failed calls and zero unexpected messages.
//!
//! Every process is started here, bounded (`-m`, `-timeout`) and stopped by its PID.
//! Set `HOLDLINE_SKIP_SIPP=1` to skip these tests on a machine without SIPp (they print
//! that they were skipped); without it a missing SIPp is a failure.

mod common;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Guard, Holdline, free_port, last_stats, sipp_available, stat};

fn calls_through_holdline(transport: &str) {
    // SIPp runs of one test binary take turns: two 500 calls/s pairs at once on two cores
    // measure the machine, not holdline.
    let _one_run_at_a_time = common::sipp_lock();
    if !sipp_available() {
        return;
    }
    let (t, sipp_t) = match transport {
        "udp" => ("udp", "u1"),
        _ => ("tcp", "t1"),
    };
    let proxy = free_port();
    let uas = free_port();
    let uac = free_port();
    let dir = tempfile::tempdir().expect("tempdir");
    let calls = 10_000;
    let rate = 500;

    let _holdline = Holdline::start(&[
        "--listen".into(),
        format!("{t}:127.0.0.1:{proxy}"),
        "--route".into(),
        format!("*={t}:127.0.0.1:{uas}"),
        "--store".into(),
        "memory".into(),
        "--workers".into(),
        "2".into(),
    ]);
    let uas_child = Command::new("sipp")
        .args([
            "-sn",
            "uas",
            "-i",
            "127.0.0.1",
            "-p",
            &uas.to_string(),
            "-t",
            sipp_t,
        ])
        .args(["-nostdin", "-timeout", "90s", "-timeout_error"])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sipp uas");
    let _uas = Guard(uas_child);
    // Wait (bounded) until the UAS listens before the first INVITE is forwarded to it.
    common::wait_bound(t == "udp", uas, Duration::from_secs(10));
    let stats = dir.path().join("uac.csv");
    let target: SocketAddr = format!("127.0.0.1:{proxy}").parse().expect("addr");
    let status = Command::new("sipp")
        .args(["-sn", "uac", &target.to_string(), "-i", "127.0.0.1"])
        .args(["-p", &uac.to_string(), "-t", sipp_t])
        .args(["-r", &rate.to_string(), "-m", &calls.to_string(), "-d", "0"])
        .args(["-nostdin", "-timeout", "80s", "-timeout_error"])
        .args(["-trace_stat", "-fd", "1", "-stf"])
        .arg(&stats)
        .args(["-trace_err", "-error_file"])
        .arg(dir.path().join("uac_errors.log"))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run sipp uac");
    let s = last_stats(&stats);
    let errors = std::fs::read_to_string(dir.path().join("uac_errors.log")).unwrap_or_default();
    let excerpt: String = errors.chars().take(3000).collect();
    assert_eq!(
        stat(&s, "SuccessfulCall(C)"),
        calls,
        "{transport}: {s:?}\n{excerpt}"
    );
    assert_eq!(stat(&s, "FailedCall(C)"), 0, "{transport}: {excerpt}");
    assert_eq!(
        stat(&s, "FailedUnexpectedMessage(C)"),
        0,
        "{transport}: {excerpt}"
    );
    assert!(
        status.success(),
        "{transport}: sipp uac exit {status:?}\n{excerpt}"
    );
}

#[test]
fn sipp_10000_calls_at_500_per_second_over_udp() {
    calls_through_holdline("udp");
}

#[test]
fn sipp_10000_calls_at_500_per_second_over_tcp() {
    calls_through_holdline("tcp");
}
