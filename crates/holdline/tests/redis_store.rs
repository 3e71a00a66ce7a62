//! Two `holdline serve` processes sharing one location store on Redis (issue 18 item 5):
//! phones register with server A only; server B, never registered to, finds every user in
//! its own memory and routes calls to them; A is killed with SIGKILL and restarted and loads
//! every binding back from Redis. Then Redis is killed: a REGISTER is answered 500 with
//! Retry-After (its change could not be committed), and once Redis is back (empty) the
//! servers write their memory back and B learns that binding too. A real `redis-server` is
//! started here on a free loopback port; every process is bounded in time and stopped by its
//! PID.

mod common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Holdline, free_port, load, metric, run_load_report, scrape, wait_metrics};

/// A `redis-server` (no persistence, temp dir), killed by PID when dropped.
struct Redis(Child);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_redis(dir: &std::path::Path, port: u16) -> Redis {
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--dir", &dir.display().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server (scripts/install-test-deps installs it)");
    let r = Redis(child);
    common::wait_bound(false, port, Duration::from_secs(10));
    r
}

fn serve(sip: u16, metrics: u16, store: &str) -> Holdline {
    Holdline::start(&[
        format!("--listen=udp:127.0.0.1:{sip}"),
        format!("--metrics=127.0.0.1:{metrics}"),
        "--domain=example.com".into(),
        format!("--store={store}"),
        "--workers=1".into(),
    ])
}

/// Places `calls` calls to the 100 users through `target`; returns the completed ones.
fn call_all(dir: &std::path::Path, target: u16, calls: u32, name: &str) -> u64 {
    let json = dir.join(format!("{name}.json"));
    let v = run_load_report(
        &[
            "uac".to_owned(),
            "--progress=off".to_owned(),
            "--rate=200".to_owned(),
            format!("--calls={calls}"),
            "--drain=5".to_owned(),
            "--max-time=20".to_owned(),
            format!("--target=127.0.0.1:{target}"),
            "--to=user{0..99}@example.com".to_owned(),
            format!("--json={}", json.display()),
        ],
        &json,
        Duration::from_secs(40),
    );
    v["calls_completed"].as_u64().unwrap_or(0)
}

#[test]
fn a_backup_finds_every_binding_the_primary_wrote_and_a_restart_loads_them() {
    if std::env::var_os("HOLDLINE_SKIP_REDIS").is_some() {
        eprintln!("SKIPPED: HOLDLINE_SKIP_REDIS is set");
        return;
    }
    let _one_run_at_a_time = common::sipp_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let redis_port = free_port();
    let redis = start_redis(dir.path(), redis_port);
    let store = format!("redis://127.0.0.1:{redis_port}/0?namespace=cluster1");
    let (a_sip, a_metrics, b_sip, b_metrics) = (free_port(), free_port(), free_port(), free_port());
    let a = serve(a_sip, a_metrics, &store);
    let b = serve(b_sip, b_metrics, &store);
    assert!(
        a.startup_line("holdline: store redis redis://127.0.0.1:")
            .is_some(),
        "{}",
        a.startup
    );

    // 100 phones register with A only (commit durability: each 200 means "in Redis").
    let uas = free_port();
    let _phones = load(&[
        "uas".to_owned(),
        "--progress=off".to_owned(),
        "--max-time=60".to_owned(),
        format!("--listen=127.0.0.1:{uas}"),
        "--register=100".to_owned(),
        format!("--registrar=127.0.0.1:{a_sip}"),
        "--users=user{0..99}@example.com".to_owned(),
        "--register-rate=500".to_owned(),
    ]);
    let (a_m, b_m) = (
        SocketAddr::from(([127, 0, 0, 1], a_metrics)),
        SocketAddr::from(([127, 0, 0, 1], b_metrics)),
    );
    for m in [a_m, b_m] {
        wait_metrics(m, Duration::from_secs(20), |text| {
            metric(text, "holdline_store_bindings", &[]) >= 100.0
        });
    }
    assert_eq!(
        metric(
            &scrape(b_m),
            "holdline_sip_requests_in_total",
            &["method=\"REGISTER\""]
        ),
        0.0,
        "nobody registered with B"
    );

    // B routes calls to A's users.
    assert_eq!(call_all(dir.path(), b_sip, 200, "via-b"), 200);
    let text = scrape(b_m);
    assert!(
        metric(&text, "holdline_store_redis_notices_applied_total", &[]) >= 100.0,
        "B applied A's writes"
    );
    assert_eq!(
        metric(&text, "holdline_store_redis_write_errors_total", &[]),
        0.0
    );
    assert!(
        metric(
            &scrape(a_m),
            "holdline_store_redis_records_written_total",
            &[]
        ) >= 100.0
    );
    assert_eq!(
        metric(
            &text,
            "holdline_sip_responses_out_total",
            &["class=\"4xx\""]
        ),
        0.0
    );

    // A dies without a chance to flush; restarted, it loads every binding from Redis.
    let pid = a.pid();
    let killed = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success());
    drop(a);
    let started = Instant::now();
    let a = serve(a_sip, a_metrics, &store);
    let line = a
        .startup_line("holdline: store redis")
        .unwrap_or_else(|| panic!("{}", a.startup))
        .to_owned();
    assert!(
        line.contains("(100 bindings of 100 addresses-of-record"),
        "{line}"
    );
    eprintln!("restarted A ready in {:?}: {line}", started.elapsed());
    assert_eq!(call_all(dir.path(), a_sip, 100, "via-a"), 100);

    // Redis dies: a REGISTER that would need a commit is not promised; after the server's
    // commit timeout it is answered 500 with Retry-After, and the binding stays in memory.
    drop(redis);
    let mut phone = common::SipClient::new(SocketAddr::from(([127, 0, 0, 1], a_sip)));
    let resp = phone.register("late", "example.com", Some("sip:late@127.0.0.1:5999"), 600);
    assert!(
        resp.starts_with("SIP/2.0 500") && resp.contains("Retry-After:"),
        "{resp}"
    );
    // Redis comes back empty: A and B write their memory back; B learns the late binding.
    let _redis = start_redis(dir.path(), redis_port);
    wait_metrics(b_m, Duration::from_secs(20), |text| {
        metric(text, "holdline_store_bindings", &[]) >= 101.0
    });
    let resp = phone.register(
        "later",
        "example.com",
        Some("sip:later@127.0.0.1:5998"),
        600,
    );
    assert!(resp.starts_with("SIP/2.0 200"), "{resp}");
    drop(b);
}
