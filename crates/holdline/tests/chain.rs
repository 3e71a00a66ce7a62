//! holdline in a chain with a real Kamailio (Debian's package, with `lab/kamailio/`'s
//! configuration), both orders, over UDP and TCP: SIPp uac → first proxy → second proxy →
//! SIPp uas, 250 calls at 50 calls/s, zero failed calls, holdline on its default
//! configuration (only where it listens and its static route).
//!
//! The UAS copies Record-Route into its 180 and 200 (RFC 3261 §12.1.1; SIPp's built-in uas
//! does not), and the caller's ACK and BYE follow the route set (`scenarios/uas_rr.xml`,
//! `scenarios/call_chain.xml`): both proxies see every message of every call. The INVITE names
//! a host neither proxy serves, so each sends it on by its static route.
//!
//! Hop-by-hop overload control across a foreign proxy: holdline offering `oc` (bare, and
//! with a quoted `oc-algo`) → Kamailio → holdline (answering) → SIPp uas. Kamailio must parse
//! and pass the offer on; every call completes.
//!
//! Every process is started here, bounded (`-m`, `-timeout`) and stopped by its PID
//! (Kamailio through `lab/kamailio/stop.sh`). `HOLDLINE_SKIP_SIPP=1` skips these tests.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{Holdline, free_port, last_stats, metric, scrape, sipp_available, stat};

fn lab() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab/kamailio")
}

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scenarios")
        .join(name)
}

/// Kamailio started by `lab/kamailio/run.sh`, stopped by `stop.sh` with its PID.
struct Kamailio(Child);

impl Kamailio {
    fn start(port: u16, next_hop: u16, transport: &str, dir: &Path) -> Self {
        let log = std::fs::File::create(dir.join("kamailio.log")).expect("log file");
        let child = Command::new(lab().join("run.sh"))
            .args(["127.0.0.1", &port.to_string()])
            .arg(format!("127.0.0.1:{next_hop}"))
            .args([transport, "1"])
            .env("KAM_RUNDIR", dir.join("kamailio-run"))
            .env("KAM_SHM_MB", "64")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start lab/kamailio/run.sh");
        let k = Self(child);
        common::wait_bound(transport == "udp", port, Duration::from_secs(15));
        k
    }
}

impl Drop for Kamailio {
    fn drop(&mut self) {
        let _ = Command::new(lab().join("stop.sh"))
            .arg(self.0.id().to_string())
            .stdout(Stdio::null())
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn kamailio_available() -> bool {
    let ok = Command::new("kamailio")
        .arg("-v")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(
        ok,
        "Kamailio is not installed: scripts/install-test-deps, or apt-get install kamailio \
         (or set HOLDLINE_SKIP_SIPP=1)"
    );
    true
}

/// Which proxy comes first.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum First {
    Holdline,
    Kamailio,
}

fn chain(first: First, transport: &str) {
    let _one_run_at_a_time = common::sipp_lock();
    if !sipp_available() || !kamailio_available() {
        return;
    }
    let sipp_t = if transport == "udp" { "u1" } else { "t1" };
    let (h, k, uas, uac) = (free_port(), free_port(), free_port(), free_port());
    let dir = tempfile::tempdir().expect("tempdir");
    let what = format!("{first:?} first, {transport}");
    let calls = 250;

    let uas_child = Command::new("sipp")
        .arg("-sf")
        .arg(scenario("uas_rr.xml"))
        .args(["-i", "127.0.0.1", "-p", &uas.to_string(), "-t", sipp_t])
        .args(["-nostdin", "-timeout", "60s", "-timeout_error"])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sipp uas");
    let _uas = common::Guard(uas_child);
    common::wait_bound(transport == "udp", uas, Duration::from_secs(10));

    // holdline's defaults: nothing but where it listens and where everything goes.
    let (holdline_next, kamailio_next, target) = match first {
        First::Holdline => (k, uas, h),
        First::Kamailio => (uas, h, k),
    };
    let _holdline = Holdline::start(&[
        "--listen".into(),
        format!("{transport}:127.0.0.1:{h}"),
        "--route".into(),
        format!("*={transport}:127.0.0.1:{holdline_next}"),
        "--store".into(),
        "memory".into(),
    ]);
    let _kamailio = Kamailio::start(k, kamailio_next, transport, dir.path());

    let stats = dir.path().join("uac.csv");
    let status = Command::new("sipp")
        .arg("-sf")
        .arg(scenario("call_chain.xml"))
        .arg(format!("127.0.0.1:{target}"))
        .args(["-i", "127.0.0.1", "-p", &uac.to_string(), "-t", sipp_t])
        .args(["-r", "50", "-m", &calls.to_string(), "-d", "0"])
        .args(["-nostdin", "-timeout", "60s", "-timeout_error"])
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
    if stat(&last_stats(&stats), "FailedCall(C)") > 0 {
        let log = std::fs::read_to_string(dir.path().join("kamailio.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        eprintln!("{what}: kamailio's log ends with:\n{}", tail.join("\n"));
    }
    common::assert_uac_ok(dir.path(), calls, status, &what);
}

#[test]
fn holdline_then_kamailio_over_udp() {
    chain(First::Holdline, "udp");
}

#[test]
fn kamailio_then_holdline_over_udp() {
    chain(First::Kamailio, "udp");
}

#[test]
fn holdline_then_kamailio_over_tcp() {
    chain(First::Holdline, "tcp");
}

#[test]
fn kamailio_then_holdline_over_tcp() {
    chain(First::Kamailio, "tcp");
}

#[test]
fn overload_offers_pass_through_kamailio_between_two_holdlines() {
    let _one_run_at_a_time = common::sipp_lock();
    if !sipp_available() || !kamailio_available() {
        return;
    }
    // `loss` is the bare `;oc`, `rate` the quoted `;oc;oc-algo="rate"`. (Kamailio 5.6.3
    // cannot parse the RFC's two-algorithm list `oc-algo="loss,rate"`: it drops the request
    // with "bad header field [,rate\"" — docs/overload.md.)
    for offer in ["loss", "rate"] {
        offer_through_kamailio(offer);
    }
}

fn offer_through_kamailio(offer: &str) {
    let (se, k, re, uas, uac) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let (se_metrics, re_metrics) = (free_port(), free_port());
    let dir = tempfile::tempdir().expect("tempdir");
    let calls = 100;
    let _uas = common::Guard(
        Command::new("sipp")
            .arg("-sf")
            .arg(scenario("uas_rr.xml"))
            .args(["-i", "127.0.0.1", "-p", &uas.to_string(), "-t", "u1"])
            .args(["-nostdin", "-timeout", "60s", "-timeout_error"])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sipp uas"),
    );
    common::wait_bound(true, uas, Duration::from_secs(10));
    let holdline = |port: u16, next: u16, metrics: u16, feedback: &str| {
        Holdline::start(&[
            "--listen".into(),
            format!("udp:127.0.0.1:{port}"),
            "--route".into(),
            format!("*=udp:127.0.0.1:{next}"),
            "--store".into(),
            "memory".into(),
            "--metrics".into(),
            format!("127.0.0.1:{metrics}"),
            "--feedback".into(),
            feedback.into(),
        ])
    };
    let _re = holdline(re, uas, re_metrics, "loss");
    let _kamailio = Kamailio::start(k, re, "udp", dir.path());
    let _se = holdline(se, k, se_metrics, offer);
    let stats = dir.path().join("uac.csv");
    let status = Command::new("sipp")
        .arg("-sf")
        .arg(scenario("call_chain.xml"))
        .arg(format!("127.0.0.1:{se}"))
        .args(["-i", "127.0.0.1", "-p", &uac.to_string(), "-t", "u1"])
        .args(["-r", "50", "-m", &calls.to_string(), "-d", "0"])
        .args(["-nostdin", "-timeout", "60s", "-timeout_error"])
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
    let log = std::fs::read_to_string(dir.path().join("kamailio.log")).unwrap_or_default();
    assert!(
        !log.contains("parse_via"),
        "kamailio's Via parser complained:\n{log}"
    );
    common::assert_uac_ok(
        dir.path(),
        calls,
        status,
        "holdline -> kamailio -> holdline",
    );
    let se_m = scrape(std::net::SocketAddr::from(([127, 0, 0, 1], se_metrics)));
    let re_m = scrape(std::net::SocketAddr::from(([127, 0, 0, 1], re_metrics)));
    // The RE's top Via is Kamailio's, which offers nothing: no answer, and nothing malformed
    // came back to the SE.
    assert_eq!(
        metric(&re_m, "holdline_feedback_answers_total", &[]),
        0.0,
        "{re_m}"
    );
    assert_eq!(
        metric(
            &se_m,
            "holdline_feedback_reports_total",
            &["result=\"malformed\""]
        ),
        0.0,
        "{se_m}"
    );
    // The SE really offered the quoted list (its forwarded INVITEs carried it).
    assert!(
        metric(&se_m, "holdline_sip_forwarded_total", &[]) >= calls as f64,
        "{se_m}"
    );
}
