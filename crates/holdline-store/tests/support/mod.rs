//! Redis processes for the store's tests: a `redis-server` (or `redis-sentinel`) started on
//! a free loopback port in a temporary directory, killed by PID when dropped.
#![allow(dead_code, unreachable_pub)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use holdline_base::Instant as HInstant;
use holdline_proto::{Binding, LocationStore};

/// A TCP port free on 127.0.0.1 at the time of the call, in 20000..32000: below Linux's
/// default ephemeral range, so that no connecting socket of a parallel test takes it before
/// Redis binds it; never the same twice in one process.
pub fn free_port() -> u16 {
    static HANDED: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let nanos = SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let seed = std::process::id()
        .wrapping_mul(2_654_435_761)
        .wrapping_add(nanos);
    let mut handed = HANDED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    (0..2_000u32)
        .map(|i| 20_000 + (seed.wrapping_add(i.wrapping_mul(7_919)) % 12_000) as u16)
        .find(|p| !handed.contains(p) && TcpListener::bind(("127.0.0.1", *p)).is_ok())
        .inspect(|p| handed.push(*p))
        .expect("a free port in 20000..32000")
}

/// Polls `cond` every 10 ms until it holds or `limit` passes; returns whether it held.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        // Bounded poll of a condition.
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The tests' clock: `holdline_base::Instant` moving with real time from 1,000 s.
pub fn now() -> HInstant {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    HInstant::from_secs(1_000) + Duration::from_nanos(start.elapsed().as_nanos() as u64)
}

/// The wall-clock time now.
pub fn wall() -> SystemTime {
    SystemTime::now()
}

/// Whether to run: false (with a note) when `HOLDLINE_SKIP_REDIS` is set; a missing
/// redis-server fails the test (scripts/install-test-deps installs it).
pub fn redis_available() -> bool {
    if std::env::var_os("HOLDLINE_SKIP_REDIS").is_some() {
        eprintln!("SKIPPED: HOLDLINE_SKIP_REDIS is set");
        return false;
    }
    let ok = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "redis-server is not installed: run scripts/install-test-deps (or set HOLDLINE_SKIP_REDIS=1)"
    );
    true
}

/// A redis-server or redis-sentinel child, killed by PID when dropped.
pub struct RedisProc {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
}

impl RedisProc {
    /// Starts `redis-server` on `port` (no persistence) with `extra` arguments and waits
    /// (bounded) until it answers PING.
    pub fn server(dir: &Path, port: u16, extra: &[&str]) -> Self {
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
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        let p = Self {
            child: Some(child),
            port,
            dir: dir.to_owned(),
        };
        assert!(
            wait_until(Duration::from_secs(10), || p.ping()),
            "redis-server on port {port} did not answer"
        );
        p
    }

    /// Starts `redis-sentinel` on `port` watching the primary at `primary_port` as `master`.
    pub fn sentinel(dir: &Path, port: u16, primary_port: u16, master: &str) -> Self {
        let conf = dir.join(format!("sentinel-{port}.conf"));
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {master} 127.0.0.1 {primary_port} 1\n\
                 sentinel down-after-milliseconds {master} 300\n\
                 sentinel failover-timeout {master} 2000\n\
                 sentinel parallel-syncs {master} 1\n",
                dir.display()
            ),
        )
        .expect("write the sentinel config");
        let child = Command::new("redis-sentinel")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-sentinel");
        let p = Self {
            child: Some(child),
            port,
            dir: dir.to_owned(),
        };
        assert!(
            wait_until(Duration::from_secs(10), || p.ping()),
            "redis-sentinel on port {port} did not answer"
        );
        p
    }

    /// Whether it answers PING.
    pub fn ping(&self) -> bool {
        self.client()
            .get_connection_with_timeout(Duration::from_millis(200))
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_ok()
    }

    /// A client for it.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).expect("client")
    }

    /// A connection to it.
    pub fn conn(&self) -> redis::Connection {
        self.client()
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("connect to redis")
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Kills it (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RedisProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A binding of `contact` expiring at `at`.
pub fn binding(contact: &str, at: HInstant) -> Binding {
    Binding {
        contact: contact.as_bytes().into(),
        expires_at: at,
        q: 1000,
        call_id: b"call-1".as_slice().into(),
        cseq: 1,
        source: Some(holdline_base::Peer {
            addr: "192.0.2.7:5060".parse().expect("address"),
            transport: holdline_base::Transport::Udp,
            conn: None,
        }),
    }
}

/// The contacts `store` has for `aor` now.
pub fn contacts(store: &dyn LocationStore, aor: &str) -> Vec<String> {
    let mut out = Vec::new();
    store.lookup(aor.as_bytes(), now(), &mut out);
    out.iter()
        .map(|b| String::from_utf8_lossy(&b.contact).into_owned())
        .collect()
}

/// Registers `contact` for `aor` in `store` for `secs` seconds (replacing its bindings);
/// returns the commit ticket.
pub fn register(store: &dyn LocationStore, aor: &str, contact: &str, secs: u64) -> Option<u64> {
    let at = now() + Duration::from_secs(secs);
    store.modify(aor.as_bytes(), now(), &mut |v| {
        v.clear();
        v.push(binding(contact, at));
    });
    store.commit_ticket()
}

/// Removes every binding of `aor`.
pub fn unregister(store: &dyn LocationStore, aor: &str) -> Option<u64> {
    store.modify(aor.as_bytes(), now(), &mut Vec::clear);
    store.commit_ticket()
}

/// Waits (bounded) until `store` has committed `ticket`.
pub fn committed(store: &dyn LocationStore, ticket: Option<u64>, limit: Duration) -> bool {
    match ticket {
        None => true,
        Some(t) => wait_until(limit, || store.committed() >= t),
    }
}
