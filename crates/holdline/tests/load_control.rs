//! RFC 7200 (issue 24 item 5): two real holdlines and `holdline load`. B publishes a
//! load-control filter (`sip:hotline@example.com` at 10 calls/s); A subscribes to B
//! (`[load_control] subscribe`) and applies it to the INVITEs it sends B. Callers behind A
//! offer a flash crowd of 100 calls/s to the hotline for 10 s beside 50 calls/s to 100
//! other numbers. The hotline's completed calls come out at the filter's rate, the rest of
//! the crowd is answered `503` by A (never reaching B), and every other call completes.
//!
//! ```text
//!  holdline load uac (hotline, 100/s) ─┐                    SUBSCRIBE / NOTIFY
//!  holdline load uac (user{0..99}, 50/s)┴─> A ─────────────> B ──> holdline load uas
//!                                           (applies filter)  (publishes filter)
//! ```
//!
//! Every process is started here, bounded, and stopped by its PID.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{Holdline, free_port, load, metric, scrape, wait_metrics};

const HOT_RATE: f64 = 100.0;
const FILTER_RATE: f64 = 10.0;
const OTHER_RATE: f64 = 50.0;
const SECONDS: f64 = 10.0;

fn server(
    dir: &std::path::Path,
    name: &str,
    port: u16,
    next: u16,
    conf: &str,
) -> (Holdline, SocketAddr) {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, conf).expect("config");
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let h = Holdline::start(&[
        format!("--config={}", path.display()),
        format!("--listen=udp:127.0.0.1:{port}"),
        format!("--route=*=udp:127.0.0.1:{next}"),
        format!("--metrics={metrics}"),
        "--store=memory".into(),
        "--workers=2".into(),
    ]);
    (h, metrics)
}

fn uac(a: u16, to: &str, rate: f64, json: &std::path::Path) -> Vec<String> {
    vec![
        "uac".to_owned(),
        "--progress=off".to_owned(),
        format!("--rate={rate}"),
        format!("--duration={SECONDS}"),
        "--drain=5".to_owned(),
        "--max-time=40".to_owned(),
        format!("--target=127.0.0.1:{a}"),
        format!("--to={to}"),
        format!("--json={}", json.display()),
    ]
}

fn report(guard: common::Guard, json: &std::path::Path) -> serde_json::Value {
    let mut guard = guard;
    let status = guard
        .wait_for(Duration::from_secs(60))
        .expect("holdline load stops by itself");
    assert!(status.success(), "holdline load: {status:?}");
    serde_json::from_str(&std::fs::read_to_string(json).expect("load report")).expect("json")
}

#[test]
fn a_published_filter_holds_a_flash_crowd_to_one_number_while_other_calls_pass() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a_port, b_port, uas_port) = (free_port(), free_port(), free_port());
    let _uas = load(&[
        "uas".to_owned(),
        "--progress=off".to_owned(),
        "--max-time=90".to_owned(),
        format!("--listen=127.0.0.1:{uas_port}"),
    ]);
    let (_b, b_metrics) = server(
        dir.path(),
        "b",
        b_port,
        uas_port,
        &format!(
            "[[load_control.filters]]\nid = \"hotline\"\ncallee = [\"sip:hotline@example.com\"]\n\
             rate = {FILTER_RATE:.1}\n"
        ),
    );
    let (_a, a_metrics) = server(
        dir.path(),
        "a",
        a_port,
        b_port,
        &format!("[load_control]\nsubscribe = [\"udp:127.0.0.1:{b_port}\"]\n"),
    );
    // A subscribed and holds B's filter (shared by both its workers).
    wait_metrics(a_metrics, Duration::from_secs(20), |t| {
        metric(t, "holdline_load_control_filters", &[]) >= 1.0
    });
    let b = scrape(b_metrics);
    assert_eq!(metric(&b, "holdline_load_control_subscriptions", &[]), 1.0);
    assert!(metric(&b, "holdline_load_control_notifies_sent_total", &[]) >= 1.0);

    let (hot_json, other_json) = (dir.path().join("hot.json"), dir.path().join("other.json"));
    let hot = load(&uac(a_port, "hotline@example.com", HOT_RATE, &hot_json));
    let other = load(&uac(
        a_port,
        "user{0..99}@example.com",
        OTHER_RATE,
        &other_json,
    ));
    let hot = report(hot, &hot_json);
    let other = report(other, &other_json);

    let attempted = hot["calls_attempted"].as_f64().unwrap_or(0.0);
    let completed = hot["calls_completed"].as_f64().unwrap_or(0.0);
    let rejected = hot["failures_by_code"]["503"].as_f64().unwrap_or(0.0);
    let load_s = hot["load_duration_s"].as_f64().unwrap_or(SECONDS);
    let hot_cps = completed / load_s;
    eprintln!(
        "hotline: offered {attempted} ({:.1}/s), completed {completed} ({hot_cps:.2}/s), 503 {rejected}; \
         others: offered {}, completed {}, throughput {:.1}/s",
        hot["offered_cps"],
        other["calls_attempted"],
        other["calls_completed"],
        other["throughput_cps"]
    );
    // The crowd was a crowd, and the filter held it to its rate: within 20% of 10/s (the
    // bucket's initial 2 calls included). Without the filter, all ~1,000 would complete.
    assert!(attempted > 800.0, "{hot}");
    assert!(
        (0.8 * FILTER_RATE..=1.2 * FILTER_RATE).contains(&hot_cps),
        "hotline completed {hot_cps:.2} calls/s, the filter allows {FILTER_RATE}: {hot}"
    );
    assert_eq!(
        completed + rejected,
        attempted,
        "every other hotline call got 503: {hot}"
    );
    // Every other call completed.
    assert!(
        other["calls_attempted"].as_u64().unwrap_or(0) > 400,
        "{other}"
    );
    assert_eq!(
        other["calls_completed"], other["calls_attempted"],
        "{other}"
    );
    assert_eq!(other["calls_failed"], 0, "{other}");
    // A answered the 503s itself: they never reached B.
    let a = scrape(a_metrics);
    assert_eq!(
        metric(&a, "holdline_load_control_rejected_total", &[]),
        rejected
    );
    let accepted = metric(&a, "holdline_load_control_accepted_total", &[]);
    assert!(
        (completed..=completed + 2.0).contains(&accepted),
        "{accepted} {hot}"
    );
    // B saw only the admitted INVITEs (retransmissions aside).
    let admitted = accepted + other["calls_attempted"].as_f64().unwrap_or(0.0);
    let b = scrape(b_metrics);
    let b_invites = metric(&b, "holdline_sip_requests_in_total", &["method=\"INVITE\""]);
    assert!(
        (admitted..admitted + 20.0).contains(&b_invites),
        "B received {b_invites} INVITEs, A admitted {admitted}"
    );
}

fn hup(h: &Holdline) {
    let status = std::process::Command::new("kill")
        .args(["-HUP", &h.pid().to_string()])
        .status()
        .expect("kill -HUP");
    assert!(status.success());
}

#[test]
fn filters_changed_at_run_time_are_notified_to_the_subscriber() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a_port, b_port, uas_port) = (free_port(), free_port(), free_port());
    let one = "[[load_control.filters]]\nid = \"hotline\"\ncallee = [\"sip:hotline@example.com\"]\nrate = 10.0\n";
    let (b, b_metrics) = server(dir.path(), "b", b_port, uas_port, one);
    let (_a, a_metrics) = server(
        dir.path(),
        "a",
        a_port,
        b_port,
        &format!("[load_control]\nsubscribe = [\"udp:127.0.0.1:{b_port}\"]\n"),
    );
    wait_metrics(a_metrics, Duration::from_secs(20), |t| {
        metric(t, "holdline_load_control_filters", &[]) == 1.0
    });
    let sent = metric(
        &scrape(b_metrics),
        "holdline_load_control_notifies_sent_total",
        &[],
    );
    // A second filter: SIGHUP, and A holds both without waiting for a refresh (600 s).
    let two = format!(
        "{one}[[load_control.filters]]\nid = \"bots\"\ncaller_domain = \"bots.example\"\nloss_percent = 90\n"
    );
    std::fs::write(dir.path().join("b.toml"), &two).expect("config");
    hup(&b);
    b.wait_line(
        "holdline: load-control filters reloaded: 2",
        Duration::from_secs(10),
    );
    wait_metrics(a_metrics, Duration::from_secs(10), |t| {
        metric(t, "holdline_load_control_filters", &[]) == 2.0
    });
    assert_eq!(
        metric(
            &scrape(b_metrics),
            "holdline_load_control_notifies_sent_total",
            &[]
        ),
        sent + 1.0
    );
    // A broken file is refused where it is broken; the filters stay.
    std::fs::write(
        dir.path().join("b.toml"),
        format!("{two}[[load_control.filters]]\nid = \"x\"\nrate = -1.0\n"),
    )
    .expect("config");
    hup(&b);
    let line = b.wait_line(
        "holdline: load-control filters not reloaded",
        Duration::from_secs(10),
    );
    assert!(
        line.contains("b.toml") && line.contains("load_control.filters[2].rate"),
        "{line}"
    );
    // Every filter withdrawn: A applies none.
    std::fs::write(
        dir.path().join("b.toml"),
        "[load_control]\npublish = true\n",
    )
    .expect("config");
    hup(&b);
    wait_metrics(a_metrics, Duration::from_secs(10), |t| {
        metric(t, "holdline_load_control_filters", &[]) == 0.0
    });
    assert_eq!(
        metric(
            &scrape(a_metrics),
            "holdline_load_control_notifies_received_total",
            &[]
        ),
        3.0
    );
}
