//! The Redis store behind Sentinel: one primary, one replica, one sentinel, all started here
//! on free loopback ports. The primary is killed with SIGKILL while the store writes; the
//! sentinel promotes the replica, the store finds the new primary through the sentinel, and
//! every binding whose commit was acknowledged (before the kill, with `wait_replicas=1`, and
//! after it) is on the new primary and in a store opened afterwards.

mod support;

use std::time::{Duration, Instant};

use holdline_proto::LocationStore;
use holdline_store::{RedisConfig, RedisStore, RedisTarget};
use support::{RedisProc, committed, free_port, now, register, wait_until, wall};

fn info_field(redis: &RedisProc, field: &str) -> Option<String> {
    let mut conn = redis
        .client()
        .get_connection_with_timeout(Duration::from_millis(500))
        .ok()?;
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut conn)
        .ok()?;
    info.lines().find_map(|l| {
        l.strip_prefix(&format!("{field}:"))
            .map(|v| v.trim().to_owned())
    })
}

#[test]
fn a_promoted_replica_keeps_every_acknowledged_binding() {
    if !support::redis_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (pp, rp, sp) = (free_port(), free_port(), free_port());
    let pdir = dir.path().join("primary");
    let rdir = dir.path().join("replica");
    let sdir = dir.path().join("sentinel");
    for d in [&pdir, &rdir, &sdir] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    // No 5 s wait before the replica's first (diskless) sync.
    let mut primary = RedisProc::server(&pdir, pp, &["--repl-diskless-sync-delay", "0"]);
    let replica = RedisProc::server(&rdir, rp, &["--replicaof", "127.0.0.1", &pp.to_string()]);
    assert!(
        wait_until(Duration::from_secs(10), || info_field(
            &replica,
            "master_link_status"
        )
        .as_deref()
            == Some("up")),
        "the replica synced"
    );
    let sentinel = RedisProc::sentinel(&sdir, sp, pp, "mymaster");
    assert!(
        wait_until(Duration::from_secs(15), || {
            redis::cmd("SENTINEL")
                .arg("replicas")
                .arg("mymaster")
                .query::<Vec<redis::Value>>(&mut sentinel.conn())
                .is_ok_and(|r| !r.is_empty())
        }),
        "the sentinel knows the replica"
    );

    let target: RedisTarget = format!(
        "redis+sentinel://127.0.0.1:{sp}/mymaster?namespace=s1&wait_replicas=1&wait_timeout_ms=200"
    )
    .parse()
    .expect("target");
    let cfg = RedisConfig {
        max_backoff: Duration::from_millis(200),
        io_timeout: Duration::from_millis(500),
        ..RedisConfig::default()
    };
    let store =
        RedisStore::open(target.clone(), now(), wall(), cfg.clone()).expect("open via sentinel");

    const USERS: usize = 100;
    const KILL_AT: usize = 50;
    let mut acked = Vec::new();
    let mut failover = Duration::ZERO;
    for i in 0..USERS {
        if i == KILL_AT {
            // Everything written so far is on the replica before the primary dies (the
            // store's WAIT may time out on a busy host; it counts that as a shortfall and
            // acknowledges anyway): the replica's offset has caught up with the primary's.
            let offset = |field: &str| {
                info_field(&primary, field).and_then(|v| {
                    // master_repl_offset:N, or slave0:ip=…,port=…,state=online,offset=N,lag=…
                    v.split(',')
                        .find_map(|kv| kv.strip_prefix("offset="))
                        .unwrap_or(&v)
                        .parse::<u64>()
                        .ok()
                })
            };
            assert!(
                wait_until(Duration::from_secs(10), || {
                    let (p, r) = (offset("master_repl_offset"), offset("slave0"));
                    p.is_some() && p == r
                }),
                "the replica caught up with the primary before the kill"
            );
            eprintln!(
                "replica shortfalls before the kill: {}",
                store.stats().replica_shortfalls
            );
            primary.kill();
        }
        let started = Instant::now();
        let aor = format!("user{i}@example.com");
        let t = register(&store, &aor, &format!("sip:u{i}@192.0.2.1"), 3600);
        // Generous bound: down-after 300 ms, then the failover itself.
        if committed(&store, t, Duration::from_secs(20)) {
            acked.push(aor);
        }
        if i == KILL_AT {
            failover = started.elapsed();
        }
    }
    eprintln!(
        "first commit after the kill took {failover:?}; stats {:?}",
        store.stats()
    );
    assert_eq!(
        acked.len(),
        USERS,
        "every write was acknowledged, through the failover"
    );
    assert_eq!(
        info_field(&replica, "role").as_deref(),
        Some("master"),
        "the replica was promoted"
    );

    // Every acknowledged binding is on the new primary...
    let mut conn = replica.conn();
    for aor in &acked {
        let exists: bool = redis::cmd("EXISTS")
            .arg(format!("holdline:s1:aor:{aor}"))
            .query(&mut conn)
            .expect("EXISTS");
        assert!(exists, "{aor} is on the promoted replica");
    }
    // ... and in a store opened now through the sentinel.
    let fresh = RedisStore::open(target, now(), wall(), cfg).expect("open after the failover");
    assert_eq!(fresh.len(), USERS);
    assert_eq!(store.len(), USERS);
    assert!(
        store.stats().resyncs >= 2,
        "the store reloaded from the new primary: {:?}",
        store.stats()
    );
}
