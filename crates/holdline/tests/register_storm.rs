//! Registration storms (issue 21, item 2): REGISTERs pass the admission gate. A server whose
//! capacity is cut by an emulated cost per message is offered twice that many new
//! registrations; local control (OCC) answers the excess `503` with a `Retry-After` drawn from
//! the configured spread, and `holdline load register`, which honours Retry-After as a phone
//! does, gets every user registered in the end. Without the REGISTER gate the server answers
//! no 503 at all (the excess waits or drops in the socket and is retransmitted), so this test
//! fails.

mod common;

use std::time::Duration;

use common::{Background, Holdline, free_port, metric, scrape};

const DOMAIN: &str = "example.test";

#[test]
fn a_storm_at_twice_the_capacity_gets_503_with_retry_after_and_everyone_registers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let metrics = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let config = dir.path().join("storm.toml");
    // 400 µs of CPU per message: about 2,500 REGISTERs/s. A short Retry-After spread keeps
    // the test short; the default is 10-60 s.
    std::fs::write(
        &config,
        "[overload]\nlocal = \"occ\"\nemulate_cost_us = 400\nregister_retry_after_s = [1, 3]\n",
    )
    .expect("write config");
    let server = Holdline::start(&[
        "--config".into(),
        config.display().to_string(),
        "--listen".into(),
        format!("udp:127.0.0.1:{port}"),
        "--domain".into(),
        DOMAIN.into(),
        "--workers".into(),
        "1".into(),
        "--store".into(),
        "memory".into(),
        "--metrics".into(),
        metrics.to_string(),
    ]);
    let users = 10_000u64;
    let json = dir.path().join("storm.json");
    // Twice the capacity for 2 s.
    let mut cmd = common::load_register(port, &format!("u{{0..{}}}@{DOMAIN}", users - 1), 5000);
    cmd.args(["--drain", "60", "--max-time", "90", "--json"])
        .arg(&json);
    let generator = Background::spawn(cmd);
    generator.finish(Duration::from_secs(120));
    let text = scrape(metrics);
    drop(server);

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the generator's JSON"))
            .expect("JSON");
    let total = |k: &str| report["totals"][k].as_u64().unwrap_or(0);
    let rejected = total("reg_5xx");
    assert!(
        rejected > 0,
        "no REGISTER was rejected at twice the capacity: {}",
        report["totals"]
    );
    assert_eq!(
        total("reg_retry_after"),
        rejected,
        "every 503 carried a Retry-After that the generator honoured"
    );
    // Everyone got registered: one 2xx per user, and the registrar holds them all.
    assert_eq!(total("reg_ok"), users, "{}", report["totals"]);
    assert_eq!(
        report["latency"]["registered"]["count"].as_u64(),
        Some(users)
    );
    assert_eq!(
        metric(&text, "holdline_store_bindings", &[]) as u64,
        users,
        "bindings in the store"
    );
    // The server counted the REGISTERs it rejected at its gate.
    assert!(
        metric(&text, "holdline_overload_rejected_total", &[]) as u64 >= rejected,
        "the gate's rejections are counted"
    );
}
