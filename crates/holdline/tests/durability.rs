//! Acknowledged means durable (issue 21): with the default persistent store
//! (`durability = "commit"`), every registration a 200 OK acknowledged survives a `kill -9`
//! of the server in the middle of a registration storm.
//!
//! Each drill starts `holdline serve` on the same store directory, runs
//! `holdline load register --acked FILE` against it (the generator writes the users whose
//! REGISTER got a 2xx), kills the server with SIGKILL once the store holds a drill-specific
//! number of new bindings (read from its metrics: a condition, not a sleep), lets the
//! generator finish, and then opens the store file itself and looks up every acknowledged
//! user. With write-behind (the behaviour before this change) the last ~100 ms of
//! acknowledged registrations are lost at a kill; here none may be.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{Background, Holdline, free_port, metric, scrape, wait_metrics};
use holdline_proto::LocationStore;

const DOMAIN: &str = "example.test";

/// One drill: users `u{first}..u{first+count}` register at `rate`/s; the server is killed
/// once the store holds `kill_after` bindings more than it loaded at start. Returns
/// (acknowledged, of those the ones missing from the store).
fn drill(
    store: &Path,
    out: &Path,
    first: u64,
    count: u64,
    rate: u32,
    kill_after: f64,
) -> (usize, Vec<String>) {
    let port = free_port();
    let metrics = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let server = Holdline::start(&[
        "--listen".into(),
        format!("udp:127.0.0.1:{port}"),
        "--domain".into(),
        DOMAIN.into(),
        "--workers".into(),
        "1".into(),
        "--store".into(),
        store.display().to_string(),
        "--metrics".into(),
        metrics.to_string(),
    ]);
    let loaded = metric(&scrape(metrics), "holdline_store_bindings", &[]);
    let acked = out.join(format!("acked-{first}.txt"));
    let mut cmd = common::load_register(
        port,
        &format!("u{{{first}..{}}}@{DOMAIN}", first + count - 1),
        rate,
    );
    cmd.args(["--drain", "2", "--max-time", "30", "--acked"])
        .arg(&acked);
    let generator = Background::spawn(cmd);
    wait_metrics(metrics, Duration::from_secs(20), |text| {
        metric(text, "holdline_store_bindings", &[]) >= loaded + kill_after
    });
    let killed = Command::new("kill")
        .args(["-KILL", &server.pid().to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success(), "kill -KILL failed");
    // The generator's REGISTERs time out after the kill; it stops 2 s after its last arrival.
    generator.finish(Duration::from_secs(40));
    drop(server);

    let text = std::fs::read_to_string(&acked).expect("the acknowledged users");
    let users: Vec<&str> = text.lines().collect();
    let db = holdline_store::PersistentStore::open(
        store.join("locations.redb"),
        holdline_base::Instant::ZERO,
    )
    .expect("open the store after the kill");
    let mut found = Vec::new();
    let missing = users
        .iter()
        .filter(|aor| {
            found.clear();
            db.lookup(aor.as_bytes(), holdline_base::Instant::ZERO, &mut found) == 0
        })
        .map(|s| (*s).to_owned())
        .collect();
    (users.len(), missing)
}

#[test]
fn no_acknowledged_registration_is_lost_on_kill_9() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    // Three drills on one store, killed after different numbers of new bindings, the
    // registrations still streaming in at 4,000/s when the server dies.
    for (round, kill_after) in [1_500.0, 4_000.0, 2_500.0].into_iter().enumerate() {
        let first = round as u64 * 100_000;
        let (acked, missing) = drill(&store, dir.path(), first, 20_000, 4_000, kill_after);
        assert!(
            acked as f64 >= kill_after * 0.5,
            "round {round}: only {acked} acknowledged"
        );
        assert!(
            missing.is_empty(),
            "round {round}: {} of {acked} acknowledged registrations lost, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        );
    }
}
