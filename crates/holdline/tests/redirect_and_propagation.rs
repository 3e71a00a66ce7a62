//! Seed 001's redirect policy and registration propagation (issue 24 item 3), with real
//! processes.
//!
//! Redirect (`mode = "redirect"`): a caller's INVITE for a registered user is answered `302`
//! with the user's contacts, and nothing is sent to the user.
//!
//! Registration propagation (seed 001 §3.3): a primary and a backup
//! registrar with stores of their own (no shared database), each naming the other in
//! `propagate_registrations`. The phones (`holdline load uas --register`) register with the
//! primary only; the primary copies every accepted REGISTER to the backup. The primary is
//! then killed, and every call placed through the backup reaches its callee: the backup
//! answers for users that never registered with it.
//!
//! The two servers listen on 127.0.0.2 and 127.0.0.3 and the phones on 127.0.0.1, because
//! a server takes a REGISTER from a peer's address as a copy (not copied on). Every process
//! is started here, bounded, and stopped by its PID.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{Holdline, SipClient, free_port, load, metric, run_load_report, scrape, wait_metrics};

const USERS: u32 = 200;

/// A server on `ip:port` that propagates its registrations to `peer` (`udp:IP:PORT`).
fn server(
    dir: &std::path::Path,
    name: &str,
    ip: &str,
    port: u16,
    peer: &str,
) -> (Holdline, SocketAddr) {
    let conf = dir.join(format!("{name}.toml"));
    std::fs::write(&conf, format!("propagate_registrations = [\"{peer}\"]\n")).expect("config");
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let h = Holdline::start(&[
        format!("--config={}", conf.display()),
        format!("--listen=udp:{ip}:{port}"),
        format!("--metrics={metrics}"),
        "--domain=example.com".into(),
        "--store=memory".into(),
        "--workers=2".into(),
    ]);
    (h, metrics)
}

#[test]
fn the_backup_answers_for_users_registered_only_at_the_primary_after_the_primary_dies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (p1_port, p2_port) = (free_port(), free_port());
    let (backup, backup_metrics) = server(
        dir.path(),
        "backup",
        "127.0.0.3",
        p2_port,
        &format!("udp:127.0.0.2:{p1_port}"),
    );
    let (primary, primary_metrics) = server(
        dir.path(),
        "primary",
        "127.0.0.2",
        p1_port,
        &format!("udp:127.0.0.3:{p2_port}"),
    );
    let uas = free_port();
    let _phones = load(&[
        "uas".to_owned(),
        "--progress=off".to_owned(),
        "--max-time=60".to_owned(),
        format!("--listen=127.0.0.1:{uas}"),
        format!("--register={USERS}"),
        format!("--registrar=127.0.0.2:{p1_port}"),
        format!("--users=user{{0..{}}}@example.com", USERS - 1),
        "--register-rate=1000".to_owned(),
    ]);
    let want = f64::from(USERS);
    // Every registration reached the primary and, copied, the backup, which acknowledged it.
    wait_metrics(primary_metrics, Duration::from_secs(20), |t| {
        metric(t, "holdline_registrar_propagation_acked_total", &[]) >= want
    });
    let b = wait_metrics(backup_metrics, Duration::from_secs(10), |t| {
        metric(t, "holdline_store_bindings", &[]) >= want
    });
    assert_eq!(metric(&b, "holdline_store_bindings", &[]), want);
    // The backup took them as copies: nothing went back.
    assert_eq!(metric(&b, "holdline_registrar_propagated_total", &[]), 0.0);
    let p = scrape(primary_metrics);
    assert_eq!(metric(&p, "holdline_registrar_propagated_total", &[]), want);
    assert_eq!(
        metric(&p, "holdline_registrar_propagation_failures_total", &[]),
        0.0
    );

    // The primary dies; the callers turn to the backup.
    drop(primary);
    let json = dir.path().join("uac.json");
    let v = run_load_report(
        &[
            "uac".to_owned(),
            "--progress=off".to_owned(),
            "--rate=200".to_owned(),
            format!("--calls={}", 2 * USERS),
            "--drain=5".to_owned(),
            "--max-time=20".to_owned(),
            format!("--target=127.0.0.3:{p2_port}"),
            format!("--to=user{{0..{}}}@example.com", USERS - 1),
            format!("--json={}", json.display()),
        ],
        &json,
        Duration::from_secs(40),
    );
    assert_eq!(v["calls_completed"], 2 * USERS, "{v}");
    let b = scrape(backup_metrics);
    assert_eq!(
        metric(&b, "holdline_sip_responses_out_total", &["class=\"4xx\""]),
        0.0,
        "the backup found every callee"
    );
    drop(backup);
}

#[test]
fn a_redirect_server_answers_an_invite_with_the_callees_contacts_and_forwards_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("redirect.toml");
    std::fs::write(&conf, "mode = \"redirect\"\n").expect("config");
    let (port, metrics) = (free_port(), SocketAddr::from(([127, 0, 0, 1], free_port())));
    let server = Holdline::start(&[
        format!("--config={}", conf.display()),
        format!("--listen=udp:127.0.0.1:{port}"),
        format!("--metrics={metrics}"),
        "--domain=example.com".into(),
        "--store=memory".into(),
        "--workers=1".into(),
    ]);
    // Bob's two phones: sockets that must receive nothing.
    let phones: Vec<std::net::UdpSocket> = (0..2)
        .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").expect("bind phone"))
        .collect();
    let mut c = SipClient::new(SocketAddr::from(([127, 0, 0, 1], port)));
    let mut contacts = Vec::new();
    for p in &phones {
        let contact = format!("sip:bob@{}", p.local_addr().expect("addr"));
        let r = c.register("bob", "example.com", Some(&contact), 3600);
        assert!(r.starts_with("SIP/2.0 200"), "{r}");
        contacts.push(contact);
    }
    let r = c.invite("sip:bob@example.com");
    assert!(r.starts_with("SIP/2.0 302"), "{r}");
    let got: Vec<&str> = r
        .lines()
        .filter_map(|l| l.strip_prefix("Contact: "))
        .collect();
    assert_eq!(got.len(), 2, "{r}");
    for contact in &contacts {
        assert!(
            got.iter().any(|g| g.starts_with(&format!("<{contact}>"))),
            "{contact} missing: {r}"
        );
    }
    // An unknown user: 404, not a redirect to nowhere.
    let r = c.invite("sip:nobody@example.com");
    assert!(r.starts_with("SIP/2.0 404"), "{r}");
    let m = wait_metrics(metrics, Duration::from_secs(5), |t| {
        metric(t, "holdline_sip_redirected_total", &[]) >= 1.0
    });
    assert_eq!(metric(&m, "holdline_sip_redirected_total", &[]), 1.0);
    assert_eq!(
        metric(&m, "holdline_sip_forwarded_total", &[]),
        0.0,
        "a redirect server forwards no request"
    );
    for p in &phones {
        p.set_nonblocking(true).expect("nonblocking");
        let mut buf = [0u8; 2048];
        assert!(p.recv_from(&mut buf).is_err(), "a phone was sent something");
    }
    drop(server);
}
