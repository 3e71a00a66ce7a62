//! Identifier-based load sharing (issue 18 item 3, seed 001's first stage): a first-stage
//! holdline that serves no domain hashes every user of `example.com` to one of three
//! second-stage holdlines (`[[hash_routes]]`, rendezvous hashing of the AOR), each of which
//! is a registrar for `example.com` with its own store. `holdline load uas` registers 300
//! users through the first stage, `holdline load uac` calls them through it: every call
//! completes, so each user's calls reached the server that holds its registration, and each
//! second stage holds exactly the users `holdline_proto::hrw` assigns it (computed here from
//! the published specification, as any other node would).
//!
//! Every process is started here, bounded, and stopped by its PID.

mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use common::{Holdline, free_port, load, metric, run_load_report, scrape, wait_metrics};
use holdline_proto::hrw::HrwNode;

#[test]
fn a_first_stage_shares_users_among_second_stages_by_their_aor() {
    let _one_run_at_a_time = common::sipp_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    // The second stages: registrars of example.com.
    let mut seconds = Vec::new();
    for _ in 0..3 {
        let (port, metrics) = (free_port(), free_port());
        let h = Holdline::start(&[
            format!("--listen=udp:127.0.0.1:{port}"),
            format!("--metrics=127.0.0.1:{metrics}"),
            "--domain=example.com".into(),
            "--store=memory".into(),
            "--workers=1".into(),
        ]);
        seconds.push((h, port, SocketAddr::from(([127, 0, 0, 1], metrics))));
    }
    let targets: Vec<String> = seconds
        .iter()
        .map(|(_, port, _)| format!("udp:127.0.0.1:{port}"))
        .collect();
    let conf = dir.path().join("first.toml");
    let mut f = std::fs::File::create(&conf).expect("config");
    writeln!(
        f,
        "[[hash_routes]]\ndomain = \"example.com\"\ntargets = [{}]",
        targets
            .iter()
            .map(|t| format!("\"{t}\""))
            .collect::<Vec<_>>()
            .join(", ")
    )
    .expect("write config");
    let first_port = free_port();
    let _first = Holdline::start(&[
        format!("--config={}", conf.display()),
        format!("--listen=udp:127.0.0.1:{first_port}"),
        "--store=memory".into(),
        "--workers=1".into(),
    ]);
    let uas = free_port();
    let _phones = load(&[
        "uas".to_owned(),
        "--progress=off".to_owned(),
        "--max-time=60".to_owned(),
        format!("--listen=127.0.0.1:{uas}"),
        "--register=300".to_owned(),
        format!("--registrar=127.0.0.1:{first_port}"),
        "--users=user{0..299}@example.com".to_owned(),
        "--register-rate=1000".to_owned(),
    ]);
    // Where the specification puts each user.
    let nodes: Vec<HrwNode> = targets
        .iter()
        .map(|t| HrwNode::new(t.clone(), 1.0))
        .collect();
    let mut expected = [0u32; 3];
    for u in 0..300 {
        let key = format!("user{u}@example.com");
        expected[holdline_proto::hrw::pick(key.as_bytes(), &nodes).expect("a node")] += 1;
    }
    for (i, (_, _, m)) in seconds.iter().enumerate() {
        let want = f64::from(expected[i]);
        wait_metrics(*m, Duration::from_secs(20), |text| {
            metric(text, "holdline_store_bindings", &[]) >= want
        });
    }
    for (i, (_, _, m)) in seconds.iter().enumerate() {
        let got = metric(&scrape(*m), "holdline_store_bindings", &[]);
        assert_eq!(
            got,
            f64::from(expected[i]),
            "second stage {i}: {expected:?}"
        );
        assert!(expected[i] > 50, "an even share: {expected:?}");
    }
    let json = dir.path().join("uac.json");
    let v = run_load_report(
        &[
            "uac".to_owned(),
            "--progress=off".to_owned(),
            "--rate=200".to_owned(),
            "--calls=600".to_owned(),
            "--drain=5".to_owned(),
            "--max-time=20".to_owned(),
            format!("--target=127.0.0.1:{first_port}"),
            "--to=user{0..299}@example.com".to_owned(),
            format!("--json={}", json.display()),
        ],
        &json,
        Duration::from_secs(40),
    );
    assert_eq!(v["calls_completed"], 600, "{v}");
    // Each second stage took calls, and found every callee it was sent (no 4xx anywhere).
    for (i, (_, _, m)) in seconds.iter().enumerate() {
        let text = scrape(*m);
        let invites = metric(
            &text,
            "holdline_sip_requests_in_total",
            &["method=\"INVITE\""],
        );
        assert!(invites > 0.0, "second stage {i} took calls");
        assert_eq!(
            metric(
                &text,
                "holdline_sip_responses_out_total",
                &["class=\"4xx\""]
            ),
            0.0,
            "second stage {i}"
        );
    }
}

/// Failover with real processes: a holdline shares `example.net`'s users between two
/// answering UAS processes (`[[hash_routes]]`, `[probing]` every 500 ms); one UAS is
/// killed while calls flow. Probing takes it out of the set: after the kill, calls to
/// its users go to the other UAS, and the calls that had been sent to the dead one fail
/// over in their own transaction; every call the generator places completes.
#[test]
fn a_dead_target_is_probed_out_and_its_users_calls_go_to_the_other() {
    let _one_run_at_a_time = common::sipp_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b, proxy, metrics) = (free_port(), free_port(), free_port(), free_port());
    let conf = dir.path().join("probe.toml");
    std::fs::write(
        &conf,
        format!(
            "[probing]\ninterval_ms = 500\ntimeout_ms = 300\ndown_after = 2\n\
             [[hash_routes]]\ndomain = \"example.net\"\n\
             targets = [\"udp:127.0.0.1:{a}\", \"udp:127.0.0.1:{b}\"]\n"
        ),
    )
    .expect("config");
    let _server = Holdline::start(&[
        format!("--config={}", conf.display()),
        format!("--listen=udp:127.0.0.1:{proxy}"),
        format!("--metrics=127.0.0.1:{metrics}"),
        "--store=memory".into(),
        "--workers=1".into(),
    ]);
    let uas = |port: u16| {
        load(&[
            "uas".to_owned(),
            "--progress=off".to_owned(),
            "--max-time=40".to_owned(),
            format!("--listen=127.0.0.1:{port}"),
        ])
    };
    let mut dying = uas(a);
    let _alive = uas(b);
    common::wait_udp_bound(a, Duration::from_secs(10));
    common::wait_udp_bound(b, Duration::from_secs(10));
    let metrics = SocketAddr::from(([127, 0, 0, 1], metrics));
    let json = dir.path().join("uac.json");
    let mut uac = load(&[
        "uac".to_owned(),
        "--progress=off".to_owned(),
        "--rate=100".to_owned(),
        "--duration=8".to_owned(),
        "--drain=40".to_owned(),
        "--max-time=60".to_owned(),
        format!("--target=127.0.0.1:{proxy}"),
        "--to=u{0..999}@example.net".to_owned(),
        format!("--json={}", json.display()),
    ]);
    // Calls flow to both targets, then one dies.
    wait_metrics(metrics, Duration::from_secs(20), |m| {
        metric(m, "holdline_sip_requests_in_total", &["method=\"INVITE\""]) >= 200.0
    });
    let _ = dying.0.kill();
    let _ = dying.0.wait();
    let down = wait_metrics(metrics, Duration::from_secs(5), |m| {
        metric(m, "holdline_sip_targets_down", &[]) >= 1.0
    });
    assert_eq!(metric(&down, "holdline_sip_targets_down", &[]), 1.0);
    let status = uac
        .wait_for(Duration::from_secs(70))
        .expect("holdline load uac stops by itself");
    assert!(status.success(), "{status:?}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("uac.json")).expect("json");
    let attempted = v["calls_attempted"].as_u64().expect("attempted");
    assert!(attempted >= 700, "{v}");
    assert_eq!(v["calls_completed"].as_u64(), Some(attempted), "{v}");
}
