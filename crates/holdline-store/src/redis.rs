//! [`RedisStore`]: a [`MemoryStore`] for every read, written through to a Redis shared by
//! every server of a cluster, and kept up to date with what the other servers write.
//!
//! ```text
//!  worker threads            writer thread ("holdline-redis-writer")      Redis (primary)
//!  ──────────────            ──────────────────────────────────────      ───────────────
//!  modify(aor, f)            take the dirty addresses-of-record;
//!   ├ memory store            one pipeline, one script call per aor: ──>  INCR seq → v
//!   └ mark aor dirty          its *current* bindings, latest expiry       SET aor-key "v:record"
//!  lookup ── memory store     (WAIT n replicas if configured)             PEXPIREAT latest expiry
//!                             committed = batch id ◄── replies (v)        PUBLISH notices
//!                                                                         (DEL when empty)
//!                            apply the inbox, in order:                       │
//!  subscriber thread ──────> notices of other servers (v > known v of aor,    │
//!  ("holdline-redis-sub")     aor not dirty here) → memory store              │
//!   SUBSCRIBE notices  ◄──── and, after every (re)subscription, a full  ◄─────┘
//!                             resync: SCAN + MGET in batches of `scan_batch`
//! ```
//!
//! **Records.** One key per address-of-record, `holdline:<namespace>:aor:<aor>`, holding
//! `<version>:<record>` where the record is the embedded store's format (absolute expiries
//! in Unix milliseconds, so every server agrees on when a binding expires) and the version
//! comes from one counter, `holdline:<namespace>:seq`, incremented by the script that writes.
//! The key expires (PEXPIREAT) at its latest binding's expiry: Redis itself drops a dead
//! address-of-record, and nobody writes expiries through (each server purges its memory
//! quietly). An address-of-record left without bindings is deleted.
//!
//! **Conflicts: last writer wins per address-of-record.** A write is the writer's whole
//! current view of the address-of-record, and Redis orders the writes (the version). A server
//! applies a notice only if its version is newer than the last it knows for that
//! address-of-record and it has no change of its own waiting to be written (that change will
//! be written later and so wins). Two servers changing one address-of-record at the same time
//! (a user registering with both a primary and its backup within a few milliseconds) keep the
//! later write; each server of a primary/backup pair normally serves a user alone.
//!
//! **Resync.** Pub/sub loses what is published while a subscriber is disconnected, so after
//! every (re)subscription the writer reloads everything: SCAN + MGET in bounded batches, each
//! record applied unless its address-of-record is dirty here, and the addresses-of-record
//! Redis no longer has removed. An `epoch` key written once tells a Redis that lost its data
//! (restarted without persistence) from one that did not: then every server writes back what
//! Redis does not have (bounded batches, one in flight) instead of removing it.
//!
//! **Durability.** With [`Durability::Commit`] a REGISTER's 200 waits until the primary has
//! executed the batch's writes (and, with `wait_replicas = n`, until n replicas acknowledged
//! them or `wait_timeout` passed; a shortfall is counted in [`RedisStats`]). While Redis is
//! unreachable the store keeps serving from memory, retries with exponential backoff, and
//! REGISTERs that wait for a commit are answered by the server when its commit timeout passes.
#![allow(clippy::module_name_repetitions)]

use core::fmt;
use core::str::FromStr;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use core::time::Duration;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::SystemTime;

use holdline_base::Instant;
use holdline_proto::{Binding, LocationStore};
use parking_lot::Mutex;
use redis::sentinel::{SentinelClient, SentinelServerType};

use crate::memory::MemoryStore;
use crate::persistent::{CommitListener, Durability, Tracker};
use crate::record::{self, WallClock};

/// The script that writes one address-of-record: bumps the version counter, sets or deletes
/// the record, sets its expiry and publishes the notice, atomically.
///
/// KEYS: record key, counter key. ARGV: record (empty: delete), expiry in Unix ms (0: none),
/// channel, notice header (origin and address-of-record).
const WRITE_SCRIPT: &str = r"
local v = redis.call('INCR', KEYS[2])
if ARGV[1] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], v .. ':' .. ARGV[1])
  if ARGV[2] ~= '0' then
    redis.call('PEXPIREAT', KEYS[1], ARGV[2])
  end
end
redis.call('PUBLISH', ARGV[3], v .. ':' .. ARGV[4] .. ARGV[1])
return v
";

/// The most notices waiting for the writer; beyond it they are dropped for a full resync.
const INBOX_LIMIT: usize = 100_000;

/// How often the writer forgets the versions of addresses-of-record no longer in memory.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// Where the Redis store connects, parsed from a `store` value of the server's configuration:
///
/// - `redis://[user:password@]host:port[/db][?options]`: one Redis server;
/// - `redis+sentinel://host:port[,host:port...]/master[/db][?options]`: the primary that the
///   Sentinels name `master`, found again after every disconnection (so a failover promotes
///   a replica and the store follows it).
///
/// Options (`&`-separated): `namespace=NAME` (keys `holdline:NAME:...`; every server of a
/// cluster uses the same; letters, digits, `_`, `-`, `.`; default `default`),
/// `wait_replicas=N` (a commit also waits for N replicas' acknowledgement, Redis `WAIT`;
/// default 0), `wait_timeout_ms=MS` (how long, default 100).
#[derive(Clone, PartialEq, Eq)]
pub struct RedisTarget {
    kind: TargetKind,
    /// The key namespace.
    pub namespace: String,
    /// Replicas that must acknowledge a batch before it counts as committed (0: the primary).
    pub wait_replicas: u32,
    /// The longest a batch waits for those acknowledgements.
    pub wait_timeout: Duration,
    /// The value as given, the password hidden.
    shown: String,
}

#[derive(Clone, PartialEq, Eq)]
enum TargetKind {
    /// One server: the URL without options.
    Direct(String),
    /// Sentinels (`redis://host:port` each), the master's name and the database.
    Sentinel {
        sentinels: Vec<String>,
        master: String,
        db: i64,
    },
}

/// Why a Redis `store` value was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    /// Neither `redis://` nor `redis+sentinel://`.
    #[error("expected redis://host:port[/db] or redis+sentinel://host:port[,host:port]/master")]
    Scheme,
    /// The URL is not one the Redis client accepts.
    #[error("bad Redis URL: {0}")]
    Url(String),
    /// The Sentinel form lacks its master name or a sentinel address.
    #[error("redis+sentinel:// needs host:port[,host:port...]/master")]
    Sentinel,
    /// An option is unknown or its value is invalid.
    #[error("option {name}: {reason}")]
    Option {
        /// The option.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl FromStr for RedisTarget {
    type Err = TargetError;

    fn from_str(s: &str) -> Result<Self, TargetError> {
        let (base, query) = s.split_once('?').unwrap_or((s, ""));
        let mut t = Self {
            kind: TargetKind::Direct(String::new()),
            namespace: "default".into(),
            wait_replicas: 0,
            wait_timeout: Duration::from_millis(100),
            shown: hide_password(s),
        };
        for opt in query.split('&').filter(|o| !o.is_empty()) {
            let (name, value) = opt.split_once('=').unwrap_or((opt, ""));
            let bad = |reason: &str| TargetError::Option {
                name: name.into(),
                reason: reason.into(),
            };
            match name {
                "namespace" => {
                    let ok = !value.is_empty()
                        && value.len() <= 64
                        && value
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
                    if !ok {
                        return Err(bad("1 to 64 letters, digits, `_`, `-` or `.`"));
                    }
                    t.namespace = value.into();
                }
                "wait_replicas" => {
                    t.wait_replicas = value.parse().map_err(|_| bad("expected a number"))?;
                }
                "wait_timeout_ms" => {
                    let ms: u64 = value.parse().map_err(|_| bad("expected a number"))?;
                    if ms == 0 || ms > 60_000 {
                        return Err(bad("between 1 and 60000"));
                    }
                    t.wait_timeout = Duration::from_millis(ms);
                }
                _ => {
                    return Err(bad("unknown (namespace, wait_replicas or wait_timeout_ms)"));
                }
            }
        }
        if let Some(rest) = base.strip_prefix("redis+sentinel://") {
            let (hosts, path) = rest.split_once('/').ok_or(TargetError::Sentinel)?;
            let (master, db) = match path.split_once('/') {
                Some((m, d)) => (
                    m,
                    d.parse::<i64>()
                        .map_err(|_| TargetError::Url(format!("bad database {d:?}")))?,
                ),
                None => (path, 0),
            };
            if master.is_empty() || hosts.is_empty() {
                return Err(TargetError::Sentinel);
            }
            let sentinels: Vec<String> = hosts.split(',').map(|h| format!("redis://{h}")).collect();
            for url in &sentinels {
                redis::Client::open(url.as_str()).map_err(|e| TargetError::Url(e.to_string()))?;
            }
            t.kind = TargetKind::Sentinel {
                sentinels,
                master: master.into(),
                db,
            };
        } else if base.starts_with("redis://") {
            redis::Client::open(base).map_err(|e| TargetError::Url(e.to_string()))?;
            t.kind = TargetKind::Direct(base.into());
        } else {
            return Err(TargetError::Scheme);
        }
        Ok(t)
    }
}

impl fmt::Display for RedisTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RedisTarget").field(&self.shown).finish()
    }
}

/// `s` with the password of a `user:password@` part replaced by `***`.
fn hide_password(s: &str) -> String {
    let Some((scheme, rest)) = s.split_once("://") else {
        return s.into();
    };
    let (auth, host) = match rest.split_once('@') {
        Some(parts) if !parts.0.contains('/') => parts,
        _ => return s.into(),
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => s.into(),
    }
}

impl RedisTarget {
    /// Opens a connection to the current primary, with `timeout` for the connection and for
    /// every later read and write on it.
    fn connect(&self, timeout: Duration) -> redis::RedisResult<redis::Connection> {
        use redis::IntoConnectionInfo as _;
        let client = match &self.kind {
            TargetKind::Direct(url) => redis::Client::open(
                url.as_str()
                    .into_connection_info()?
                    .set_tcp_settings(tcp_settings()),
            )?,
            TargetKind::Sentinel {
                sentinels,
                master,
                db,
            } => {
                let info = redis::sentinel::SentinelNodeConnectionInfo::default()
                    .set_tcp_settings(tcp_settings())
                    .set_redis_connection_info(redis::RedisConnectionInfo::default().set_db(*db));
                let sentinels = sentinels
                    .iter()
                    .map(|u| {
                        u.as_str()
                            .into_connection_info()
                            .map(|i| i.set_tcp_settings(tcp_settings()))
                    })
                    .collect::<redis::RedisResult<Vec<_>>>()?;
                let mut s = SentinelClient::build(
                    sentinels,
                    master.clone(),
                    Some(info),
                    SentinelServerType::Master,
                )?;
                s.get_client()?
            }
        };
        let conn = client.get_connection_with_timeout(timeout)?;
        conn.set_read_timeout(Some(timeout))?;
        conn.set_write_timeout(Some(timeout))?;
        Ok(conn)
    }
}

/// TCP settings of every connection: keepalive probes and a user timeout, so that a peer
/// gone without a reset (a partition, a dead host) is noticed within about 25 s even by the
/// subscriber, which only reads (it would otherwise wait forever and miss every notice).
fn tcp_settings() -> redis::io::tcp::TcpSettings {
    let keepalive = redis::io::tcp::socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5))
        .with_retries(3);
    redis::io::tcp::TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(keepalive)
        .set_user_timeout(Duration::from_secs(25))
}

/// How the Redis store batches, waits and retries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisConfig {
    /// The longest a change waits before the writer sends it (write-behind). Default 50 ms.
    pub flush_interval: Duration,
    /// Addresses-of-record per pipeline (writes in flight are one pipeline). Default 1,000.
    pub max_batch: usize,
    /// What a caller of [`LocationStore::modify`] may promise. Default [`Durability::Commit`].
    pub durability: Durability,
    /// The shortest time between the starts of two batches unless one is full (group
    /// commit). Default 1 ms.
    pub commit_window: Duration,
    /// Keys per SCAN step and MGET when loading. Default 1,000.
    pub scan_batch: usize,
    /// Timeout of a connection attempt and of every command. Default 2 s.
    pub io_timeout: Duration,
    /// First retry delay after a failure, doubled up to `max_backoff`. Default 50 ms.
    pub min_backoff: Duration,
    /// The longest delay between two retries. Default 250 ms: after a failover a store
    /// finds the promoted primary within a quarter second of its promotion, soon enough for
    /// the REGISTERs waiting for a commit (2 s) to be answered 200; a retry is one
    /// connection attempt (and, with Sentinel, one question to a Sentinel), cheap for Redis.
    pub max_backoff: Duration,
    /// How long [`RedisStore::open`] waits for the first full load. Default 10 s.
    pub open_timeout: Duration,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            flush_interval: Duration::from_millis(50),
            max_batch: 1_000,
            durability: Durability::Commit,
            commit_window: Duration::from_millis(1),
            scan_batch: 1_000,
            io_timeout: Duration::from_secs(2),
            min_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(250),
            open_timeout: Duration::from_secs(10),
        }
    }
}

/// The errors of [`RedisStore`]. Every variant names the target (password hidden).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedisStoreError {
    /// The first full load did not complete within `open_timeout` (Redis unreachable?).
    #[error("location store {target}: no full load within {waited:?} (last error: {last})")]
    Unavailable {
        /// The target.
        target: String,
        /// How long `open` waited.
        waited: Duration,
        /// The last error the store saw, if any.
        last: String,
    },
    /// A thread could not be started.
    #[error("location store {target}: cannot start a thread: {source}")]
    Spawn {
        /// The target.
        target: String,
        /// What the operating system reported.
        source: std::io::Error,
    },
    /// [`RedisStore::flush`] did not see its changes committed within its timeout.
    #[error(
        "location store {target}: changes not committed within {waited:?} (last error: {last})"
    )]
    FlushTimeout {
        /// The target.
        target: String,
        /// How long it waited.
        waited: Duration,
        /// The last error the store saw, if any.
        last: String,
    },
}

/// Counters of the Redis store (all since open).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RedisStats {
    /// Batches whose every write the primary executed (a batch takes every changed
    /// address-of-record and sends them in pipelines of at most `max_batch`).
    pub batches_written: u64,
    /// Records written or deleted by them.
    pub records_written: u64,
    /// Addresses-of-record changed and not yet taken by the writer.
    pub pending: usize,
    /// Batches that failed (their addresses-of-record are written again by a later one).
    pub write_errors: u64,
    /// Connection attempts that failed (writer and subscriber).
    pub connect_errors: u64,
    /// Batches whose `WAIT` saw fewer replicas than `wait_replicas` (committed anyway).
    pub replica_shortfalls: u64,
    /// Other servers' notices applied to memory.
    pub notices_applied: u64,
    /// Other servers' notices ignored: not newer than what this store knew, or the
    /// address-of-record had a change of this store's waiting (which wins). A store's own
    /// notices are not counted.
    pub notices_ignored: u64,
    /// Notices or records that could not be decoded.
    pub bad_records: u64,
    /// Full loads done (the first one included).
    pub resyncs: u64,
    /// Records read by the last full load.
    pub last_resync_records: u64,
    /// Full write-backs to a Redis that had lost its data.
    pub reseeds: u64,
    /// Times the notice inbox overflowed (dropped, replaced by a full load).
    pub inbox_overflows: u64,
}

/// What the subscriber hands to the writer.
enum Inbox {
    /// A notice payload (`<version>:<origin><aor_len><aor><record>`).
    Notice(Vec<u8>),
    /// The subscriber (re)subscribed: load everything.
    Resync,
}

#[derive(Default)]
struct Counters {
    batches_written: AtomicU64,
    records_written: AtomicU64,
    write_errors: AtomicU64,
    connect_errors: AtomicU64,
    replica_shortfalls: AtomicU64,
    notices_applied: AtomicU64,
    notices_ignored: AtomicU64,
    bad_records: AtomicU64,
    resyncs: AtomicU64,
    last_resync_records: AtomicU64,
    reseeds: AtomicU64,
    inbox_overflows: AtomicU64,
}

/// What the store, its writer and its subscriber share.
struct Shared {
    mem: MemoryStore,
    tracker: Arc<Tracker>,
    clock: WallClock,
    config: RedisConfig,
    target: RedisTarget,
    origin: u64,
    keys: Keys,
    inbox: Mutex<VecDeque<Inbox>>,
    inbox_pending: AtomicBool,
    counters: Counters,
    committed: AtomicU64,
    listener: Mutex<Option<CommitListener>>,
    last_error: Mutex<String>,
    stop: AtomicBool,
}

impl Shared {
    fn error(&self, e: &dyn fmt::Display) {
        *self.last_error.lock() = e.to_string();
    }

    /// Queues `item` for the writer and wakes it.
    fn push(&self, item: Inbox) {
        {
            let mut q = self.inbox.lock();
            if q.len() >= INBOX_LIMIT {
                q.clear();
                q.push_back(Inbox::Resync);
                self.counters
                    .inbox_overflows
                    .fetch_add(1, Ordering::Relaxed);
            } else {
                q.push_back(item);
            }
        }
        self.inbox_pending.store(true, Ordering::Release);
        self.tracker.wake();
    }

    /// Sleeps `d` unless the store is closing (checked every 20 ms).
    fn nap(&self, d: Duration) {
        let end = std::time::Instant::now() + d;
        while !self.stop.load(Ordering::Acquire) {
            let now = std::time::Instant::now();
            if now >= end {
                break;
            }
            thread::sleep((end - now).min(Duration::from_millis(20)));
        }
    }
}

/// The key names of one namespace.
struct Keys {
    aor_prefix: Vec<u8>,
    seq: String,
    epoch: String,
    channel: String,
    control: String,
}

impl Keys {
    fn new(namespace: &str, origin: u64) -> Self {
        let base = format!("holdline:{namespace}:");
        Self {
            aor_prefix: format!("{base}aor:").into_bytes(),
            seq: format!("{base}seq"),
            epoch: format!("{base}epoch"),
            channel: format!("{base}notices"),
            control: format!("{base}control:{origin:016x}"),
        }
    }

    fn aor_key(&self, aor: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.aor_prefix.len() + aor.len());
        k.extend_from_slice(&self.aor_prefix);
        k.extend_from_slice(aor);
        k
    }
}

/// A location store shared through Redis by every server of a cluster.
///
/// Reads come from a [`MemoryStore`] that holds every binding of the namespace; `modify`
/// changes it and marks the address-of-record for the writer thread, which writes it through
/// to Redis; a subscriber thread brings the other servers' writes in. See the module
/// documentation for the protocol, the conflict rule and the failure behaviour.
pub struct RedisStore {
    shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
    subscriber: Option<JoinHandle<()>>,
}

impl RedisStore {
    /// Connects to `target`, loads every binding of its namespace and starts the writer and
    /// the subscriber. `now` is the caller's current time and `wall_now` the wall-clock time
    /// at `now` (the mapping of expiries to Unix milliseconds). Waits at most
    /// `config.open_timeout` for the first load.
    pub fn open(
        target: RedisTarget,
        now: Instant,
        wall_now: SystemTime,
        config: RedisConfig,
    ) -> Result<Self, RedisStoreError> {
        let origin = RandomState::new().hash_one((std::process::id(), wall_now));
        let tracker = Arc::new(Tracker::new(config.max_batch));
        let shared = Arc::new(Shared {
            mem: MemoryStore::tracked(Arc::clone(&tracker)),
            tracker,
            clock: WallClock::new(now, wall_now),
            keys: Keys::new(&target.namespace, origin),
            config,
            target,
            origin,
            inbox: Mutex::new(VecDeque::new()),
            inbox_pending: AtomicBool::new(false),
            counters: Counters::default(),
            committed: AtomicU64::new(0),
            listener: Mutex::new(None),
            last_error: Mutex::new(String::new()),
            stop: AtomicBool::new(false),
        });
        let spawn_err = |source| RedisStoreError::Spawn {
            target: shared.target.to_string(),
            source,
        };
        let s = Arc::clone(&shared);
        let writer = thread::Builder::new()
            .name("holdline-redis-writer".into())
            .spawn(move || Writer::new(&s).run())
            .map_err(spawn_err)?;
        let mut store = Self {
            shared: Arc::clone(&shared),
            writer: Some(writer),
            subscriber: None,
        };
        let s = Arc::clone(&shared);
        store.subscriber = Some(
            thread::Builder::new()
                .name("holdline-redis-sub".into())
                .spawn(move || run_subscriber(&s))
                .map_err(spawn_err)?,
        );
        let waited = shared.config.open_timeout;
        let deadline = std::time::Instant::now() + waited;
        while shared.counters.resyncs.load(Ordering::Acquire) == 0 {
            if std::time::Instant::now() >= deadline {
                return Err(RedisStoreError::Unavailable {
                    target: shared.target.to_string(),
                    waited,
                    last: shared.last_error.lock().clone(),
                });
            }
            thread::sleep(Duration::from_millis(5));
        }
        Ok(store)
    }

    /// Blocks until every change made before the call is committed, at most `timeout`.
    pub fn flush(&self, timeout: Duration) -> Result<(), RedisStoreError> {
        let t = &*self.shared.tracker;
        let deadline = std::time::Instant::now() + timeout;
        let mut st = t.state.lock();
        let target = if t.pending() > 0 {
            st.started + 1
        } else {
            st.started
        };
        st.flush_target = st.flush_target.max(target);
        t.work.notify_one();
        while st.last_ok < target && !st.stopped {
            if t.done.wait_until(&mut st, deadline).timed_out() {
                break;
            }
        }
        if st.last_ok >= target {
            Ok(())
        } else {
            Err(RedisStoreError::FlushTimeout {
                target: self.shared.target.to_string(),
                waited: timeout,
                last: self.shared.last_error.lock().clone(),
            })
        }
    }

    /// Has `listener` called, on the writer thread, after each batch that committed, with its
    /// id (the new [`committed`](LocationStore::committed)). Replaces any listener before.
    pub fn set_commit_listener(&self, listener: CommitListener) {
        *self.shared.listener.lock() = Some(listener);
    }

    /// The store's counters.
    pub fn stats(&self) -> RedisStats {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RedisStats {
            batches_written: get(&c.batches_written),
            records_written: get(&c.records_written),
            pending: self.shared.tracker.pending(),
            write_errors: get(&c.write_errors),
            connect_errors: get(&c.connect_errors),
            replica_shortfalls: get(&c.replica_shortfalls),
            notices_applied: get(&c.notices_applied),
            notices_ignored: get(&c.notices_ignored),
            bad_records: get(&c.bad_records),
            resyncs: get(&c.resyncs),
            last_resync_records: get(&c.last_resync_records),
            reseeds: get(&c.reseeds),
            inbox_overflows: get(&c.inbox_overflows),
        }
    }

    /// The target (password hidden when displayed).
    pub fn target(&self) -> &RedisTarget {
        &self.shared.target
    }

    /// The number of addresses-of-record with at least one stored binding.
    pub fn aor_count(&self) -> usize {
        self.shared.mem.aor_count()
    }
}

impl LocationStore for RedisStore {
    fn list_aors(&self, prefix: &[u8], limit: usize, out: &mut Vec<Box<[u8]>>) -> bool {
        self.shared.mem.list_aors(prefix, limit, out)
    }

    fn lookup(&self, aor: &[u8], now: Instant, out: &mut Vec<Binding>) -> usize {
        self.shared.mem.lookup(aor, now, out)
    }

    fn has_bindings(&self, aor: &[u8], now: Instant) -> bool {
        self.shared.mem.has_bindings(aor, now)
    }

    /// Changes the memory store and marks `aor` for the writer; never waits for Redis.
    fn modify(&self, aor: &[u8], now: Instant, f: &mut dyn FnMut(&mut Vec<Binding>)) {
        self.shared.mem.modify(aor, now, f);
    }

    /// Purges memory only: Redis expires the keys itself (each at its latest binding's
    /// expiry), so no server writes expiries through.
    fn purge_expired(&self, now: Instant) -> usize {
        self.shared.mem.purge_expired_quietly(now)
    }

    fn purge_parts(&self) -> usize {
        self.shared.mem.purge_parts()
    }

    fn purge_part(&self, now: Instant, part: usize) -> usize {
        self.shared.mem.purge_part_quietly(now, part)
    }

    fn len(&self) -> usize {
        self.shared.mem.len()
    }

    /// With [`Durability::Commit`]: the batch after the one started last (as the persistent
    /// store's); asking starts it without waiting for `flush_interval`.
    fn commit_ticket(&self) -> Option<u64> {
        if self.shared.config.durability != Durability::Commit {
            return None;
        }
        let t = &*self.shared.tracker;
        let mut st = t.state.lock();
        let target = st.started + 1;
        if st.flush_target < target {
            st.flush_target = target;
            t.work.notify_one();
        }
        Some(target)
    }

    fn committed(&self) -> u64 {
        match self.shared.config.durability {
            Durability::Commit => self.shared.committed.load(Ordering::Acquire),
            Durability::WriteBehind => u64::MAX,
        }
    }
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        {
            let mut st = self.shared.tracker.state.lock();
            st.shutdown = true;
            self.shared.tracker.work.notify_one();
        }
        if let Some(w) = self.writer.take() {
            // A panicked writer has nothing left to do.
            let _ = w.join();
        }
        // The subscriber is blocked reading its connection: the writer published on its
        // control channel when it stopped; if that failed (Redis down), it is napping and
        // sees `stop`, or it ends when its connection does. It holds nothing but an `Arc`.
        drop(self.subscriber.take());
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("target", &self.shared.target)
            .field("len", &self.shared.mem.len())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// The subscriber thread: (re)subscribes, then hands every notice to the writer.
fn run_subscriber(shared: &Shared) {
    let mut backoff = shared.config.min_backoff;
    while !shared.stop.load(Ordering::Acquire) {
        let mut conn = match shared.target.connect(shared.config.io_timeout) {
            Ok(c) => c,
            Err(e) => {
                shared
                    .counters
                    .connect_errors
                    .fetch_add(1, Ordering::Relaxed);
                shared.error(&e);
                shared.nap(backoff);
                backoff = (backoff * 2).min(shared.config.max_backoff);
                continue;
            }
        };
        // Blocks until a message: notices keep coming while the cluster works; the writer
        // publishes on the control channel to end the wait at shutdown.
        if conn.set_read_timeout(None).is_err() {
            continue;
        }
        let mut ps = conn.as_pubsub();
        if let Err(e) = ps.subscribe(&[&shared.keys.channel, &shared.keys.control]) {
            shared.error(&e);
            shared.nap(backoff);
            backoff = (backoff * 2).min(shared.config.max_backoff);
            continue;
        }
        backoff = shared.config.min_backoff;
        // Everything published from now on arrives here: a full load now misses nothing.
        shared.push(Inbox::Resync);
        loop {
            match ps.get_message() {
                Ok(msg) => {
                    if msg.get_channel_name() == shared.keys.control {
                        if shared.stop.load(Ordering::Acquire) {
                            return;
                        }
                        continue;
                    }
                    shared.push(Inbox::Notice(msg.get_payload_bytes().to_vec()));
                }
                Err(e) => {
                    shared.error(&e);
                    break;
                }
            }
        }
    }
}

/// A decoded notice or record: `<version>:<rest>`.
fn split_version(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let colon = bytes.iter().position(|&b| b == b':')?;
    let v = std::str::from_utf8(&bytes[..colon]).ok()?.parse().ok()?;
    Some((v, &bytes[colon + 1..]))
}

/// The writer thread's state (it alone talks to Redis for commands).
struct Writer<'a> {
    shared: &'a Shared,
    conn: Option<redis::Connection>,
    sha: String,
    /// The version of the last write this store knows for each address-of-record.
    versions: HashMap<Box<[u8]>, u64>,
    /// The epoch of the Redis data last seen (`None` before the first load).
    epoch: Option<String>,
    backoff: Duration,
    decoded: Vec<record::Stored>,
}

impl<'a> Writer<'a> {
    fn new(shared: &'a Shared) -> Self {
        Self {
            shared,
            conn: None,
            sha: String::new(),
            versions: HashMap::new(),
            epoch: None,
            backoff: shared.config.min_backoff,
            decoded: Vec::new(),
        }
    }

    fn fail(&mut self, e: &dyn fmt::Display) {
        self.shared.error(e);
        self.conn = None;
    }

    /// The connection, opened (and the script loaded) if needed.
    fn conn(&mut self) -> Result<&mut redis::Connection, ()> {
        if self.conn.is_none() {
            let c = self
                .shared
                .target
                .connect(self.shared.config.io_timeout)
                .and_then(|mut c| {
                    let sha: String = redis::cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(WRITE_SCRIPT)
                        .query(&mut c)?;
                    Ok((c, sha))
                });
            match c {
                Ok((c, sha)) => {
                    self.conn = Some(c);
                    self.sha = sha;
                }
                Err(e) => {
                    self.shared
                        .counters
                        .connect_errors
                        .fetch_add(1, Ordering::Relaxed);
                    self.fail(&e);
                    return Err(());
                }
            }
        }
        self.conn.as_mut().ok_or(())
    }

    fn run(mut self) {
        /// Marks the writer stopped however the thread ends, so that `flush` cannot wait
        /// forever.
        struct Stopped<'a>(&'a Tracker);
        impl Drop for Stopped<'_> {
            fn drop(&mut self) {
                let mut st = self.0.state.lock();
                st.stopped = true;
                self.0.done.notify_all();
            }
        }
        let shared = self.shared;
        let t = &*shared.tracker;
        let _stopped = Stopped(t);
        let mut batch: Vec<Box<[u8]>> = Vec::new();
        let mut last_start: Option<std::time::Instant> = None;
        let mut next_prune = std::time::Instant::now() + PRUNE_EVERY;
        loop {
            // Wait for work: changes, a commit asked for, notices, closing, or the time to
            // forget the versions of addresses-of-record gone from memory (expired: Redis
            // dropped their keys without a notice).
            let shutdown = {
                let mut st = t.state.lock();
                while !st.shutdown
                    && st.flush_target <= st.done
                    && t.pending() == 0
                    && !shared.inbox_pending.load(Ordering::Acquire)
                {
                    if t.work.wait_until(&mut st, next_prune).timed_out() {
                        break;
                    }
                }
                st.shutdown
            };
            if std::time::Instant::now() >= next_prune {
                let mem = &shared.mem;
                self.versions
                    .retain(|aor, _| mem.with_raw(aor, |b| b.is_some()));
                self.versions.shrink_to_fit();
                next_prune = std::time::Instant::now() + PRUNE_EVERY;
            }
            if shared.inbox_pending.swap(false, Ordering::AcqRel) {
                self.drain_inbox();
            }
            let wants_write = {
                let st = t.state.lock();
                st.flush_target > st.done || t.pending() > 0
            };
            if wants_write {
                let id = {
                    let mut st = t.state.lock();
                    // Write-behind: give more changes `flush_interval` to arrive unless a
                    // commit is asked for, a batch is full or the store is closing.
                    let deadline = std::time::Instant::now() + shared.config.flush_interval;
                    while !st.shutdown
                        && st.flush_target <= st.done
                        && t.pending() < t.max_batch
                        && !shared.inbox_pending.load(Ordering::Acquire)
                    {
                        if t.work.wait_until(&mut st, deadline).timed_out() {
                            break;
                        }
                    }
                    if let Some(earliest) = last_start.map(|s| s + shared.config.commit_window) {
                        while !st.shutdown
                            && t.pending() < t.max_batch
                            && std::time::Instant::now() < earliest
                        {
                            if t.work.wait_until(&mut st, earliest).timed_out() {
                                break;
                            }
                        }
                    }
                    last_start = Some(std::time::Instant::now());
                    st.started += 1;
                    st.started
                };
                batch.clear();
                let taken = shared.mem.take_dirty(&mut batch);
                t.pending.fetch_sub(taken, Ordering::AcqRel);
                let ok = batch.is_empty() || self.write(&batch);
                let mut st = t.state.lock();
                st.done = id;
                if ok {
                    if !batch.is_empty() {
                        let c = &shared.counters;
                        c.batches_written.fetch_add(1, Ordering::Relaxed);
                        c.records_written
                            .fetch_add(batch.len() as u64, Ordering::Relaxed);
                    }
                    st.last_ok = id;
                    st.failing = false;
                    shared.committed.store(id, Ordering::Release);
                    self.backoff = shared.config.min_backoff;
                } else {
                    shared.counters.write_errors.fetch_add(1, Ordering::Relaxed);
                    st.failing = true;
                }
                t.done.notify_all();
                drop(st);
                if ok {
                    let listener = shared.listener.lock().clone();
                    if let Some(f) = listener {
                        f(id);
                    }
                } else {
                    // Give the batch back: a later one writes the then-current state.
                    for aor in &batch {
                        shared.mem.mark_dirty(aor);
                    }
                    if !shutdown {
                        shared.nap(self.backoff);
                        self.backoff = (self.backoff * 2).min(shared.config.max_backoff);
                    }
                }
            }
            if shutdown {
                // End the subscriber's wait (best effort: Redis may be gone).
                if let Ok(c) = self.conn() {
                    let _: redis::RedisResult<i64> = redis::cmd("PUBLISH")
                        .arg(&shared.keys.control)
                        .arg("stop")
                        .query(c);
                }
                return;
            }
        }
    }

    /// Writes the current state of every address-of-record in `batch`, in pipelines of at
    /// most `max_batch` scripts, one in flight at a time.
    fn write(&mut self, batch: &[Box<[u8]>]) -> bool {
        let max = self.shared.config.max_batch.max(1);
        batch.chunks(max).all(|chunk| self.write_pipeline(chunk))
    }

    /// Writes the current state of every address-of-record in `batch` in one pipeline.
    fn write_pipeline(&mut self, batch: &[Box<[u8]>]) -> bool {
        let shared = self.shared;
        let mut pipe = redis::pipe();
        let mut buf = Vec::new();
        for aor in batch {
            let expiry = shared.mem.with_raw(aor, |bindings| match bindings {
                Some(b) if !b.is_empty() => {
                    record::encode(b, shared.clock, &mut buf);
                    let latest = b.iter().map(|b| b.expires_at).max().unwrap_or(Instant::MAX);
                    Some(shared.clock.to_unix_ms(latest))
                }
                _ => {
                    buf.clear();
                    None
                }
            });
            let ms = match expiry {
                Some(u64::MAX) | None => 0,
                Some(ms) => ms,
            };
            let mut header = Vec::with_capacity(12 + aor.len());
            header.extend_from_slice(&shared.origin.to_le_bytes());
            let len = u32::try_from(aor.len()).unwrap_or(u32::MAX);
            header.extend_from_slice(&len.to_le_bytes());
            header.extend_from_slice(aor);
            pipe.cmd("EVALSHA")
                .arg(&self.sha)
                .arg(2)
                .arg(shared.keys.aor_key(aor))
                .arg(&shared.keys.seq)
                .arg(buf.as_slice())
                .arg(ms)
                .arg(&shared.keys.channel)
                .arg(header);
        }
        let wait = shared.target.wait_replicas;
        if wait > 0 {
            let ms = u64::try_from(shared.target.wait_timeout.as_millis()).unwrap_or(u64::MAX);
            pipe.cmd("WAIT").arg(wait).arg(ms);
        }
        let Ok(conn) = self.conn() else {
            return false;
        };
        let replies: Vec<redis::Value> = match pipe.query(conn) {
            Ok(v) => v,
            Err(e) => {
                self.fail(&e);
                return false;
            }
        };
        for (aor, v) in batch.iter().zip(&replies) {
            let Ok(version) = redis::from_redis_value_ref::<u64>(v) else {
                self.fail(&"unexpected reply to the write script");
                return false;
            };
            if shared
                .mem
                .with_raw(aor, |b| b.is_some_and(|b| !b.is_empty()))
            {
                self.versions.insert(aor.clone(), version);
            } else {
                self.versions.remove(aor);
            }
        }
        if wait > 0 {
            let acked = replies
                .get(batch.len())
                .and_then(|v| redis::from_redis_value_ref::<u64>(v).ok())
                .unwrap_or(0);
            if acked < u64::from(wait) {
                shared
                    .counters
                    .replica_shortfalls
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        true
    }

    /// Applies the notices and resyncs queued by the subscriber, in order.
    fn drain_inbox(&mut self) {
        loop {
            let item = self.shared.inbox.lock().pop_front();
            match item {
                None => return,
                Some(Inbox::Notice(payload)) => self.apply_notice(&payload),
                Some(Inbox::Resync) => {
                    while !self.shared.stop.load(Ordering::Acquire) {
                        if self.resync() {
                            break;
                        }
                        self.shared.nap(self.backoff);
                        self.backoff = (self.backoff * 2).min(self.shared.config.max_backoff);
                    }
                }
            }
        }
    }

    /// Decodes `record` into live bindings (an empty record: none).
    fn bindings_of(&mut self, record: &[u8]) -> Option<Vec<Binding>> {
        if record.is_empty() {
            return Some(Vec::new());
        }
        if record::decode(record, &mut self.decoded).is_err() {
            self.shared
                .counters
                .bad_records
                .fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let clock = self.shared.clock;
        Some(
            self.decoded
                .drain(..)
                .filter_map(|s| {
                    let mut b = s.binding;
                    b.expires_at = clock.instant_of_unix_ms(s.expires_unix_ms)?;
                    Some(b)
                })
                .collect(),
        )
    }

    fn apply_notice(&mut self, payload: &[u8]) {
        let c = &self.shared.counters;
        let parsed = split_version(payload).and_then(|(v, rest)| {
            let origin = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
            let len = u32::from_le_bytes(rest.get(8..12)?.try_into().ok()?) as usize;
            let aor = rest.get(12..12usize.checked_add(len)?)?;
            Some((v, origin, aor, &rest[12 + len..]))
        });
        let Some((version, origin, aor, record)) = parsed else {
            c.bad_records.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if origin == self.shared.origin {
            // This store's own write: its reply already recorded the version.
            return;
        }
        if self
            .versions
            .get(aor)
            .is_some_and(|&known| known >= version)
        {
            c.notices_ignored.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Some(bindings) = self.bindings_of(record) else {
            return;
        };
        let empty = bindings.is_empty();
        if self.shared.mem.apply_remote(aor, bindings) {
            c.notices_applied.fetch_add(1, Ordering::Relaxed);
        } else {
            c.notices_ignored.fetch_add(1, Ordering::Relaxed);
        }
        if empty {
            self.versions.remove(aor);
        } else {
            self.versions.insert(aor.into(), version);
        }
    }

    /// Loads every record of the namespace (SCAN + MGET in batches); returns whether it
    /// completed.
    fn resync(&mut self) -> bool {
        let shared = self.shared;
        let Ok(conn) = self.conn() else {
            return false;
        };
        // The epoch tells a Redis that lost its data from one that did not.
        let fresh = format!("{:016x}", RandomState::new().hash_one(shared.origin));
        let epoch: redis::RedisResult<String> = redis::pipe()
            .cmd("SETNX")
            .arg(&shared.keys.epoch)
            .arg(&fresh)
            .ignore()
            .cmd("GET")
            .arg(&shared.keys.epoch)
            .query::<(Option<String>,)>(conn)
            .map(|(e,)| e.unwrap_or(fresh));
        let epoch = match epoch {
            Ok(e) => e,
            Err(e) => {
                self.fail(&e);
                return false;
            }
        };
        let lost = self.epoch.as_ref().is_some_and(|seen| *seen != epoch);
        if lost {
            // Versions start again with the data.
            self.versions.clear();
        }
        let pattern = {
            let mut p = shared.keys.aor_prefix.clone();
            p.push(b'*');
            p
        };
        let prefix_len = shared.keys.aor_prefix.len();
        let mut present: HashSet<Box<[u8]>> = HashSet::new();
        let mut cursor: u64 = 0;
        let mut records = 0u64;
        let mut loaded: Vec<(Box<[u8]>, u64, Vec<u8>)> = Vec::new();
        loop {
            let Ok(conn) = self.conn() else {
                return false;
            };
            let step: redis::RedisResult<(u64, Vec<Vec<u8>>)> = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern.as_slice())
                .arg("COUNT")
                .arg(shared.config.scan_batch)
                .query(conn);
            let (next, keys) = match step {
                Ok(s) => s,
                Err(e) => {
                    self.fail(&e);
                    return false;
                }
            };
            if !keys.is_empty() {
                let values: redis::RedisResult<Vec<Option<Vec<u8>>>> =
                    redis::cmd("MGET").arg(&keys).query(conn);
                let values = match values {
                    Ok(v) => v,
                    Err(e) => {
                        self.fail(&e);
                        return false;
                    }
                };
                for (key, value) in keys.into_iter().zip(values) {
                    let (Some(aor), Some(value)) = (key.get(prefix_len..), value) else {
                        continue;
                    };
                    let Some((version, record)) = split_version(&value) else {
                        shared.counters.bad_records.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    records += 1;
                    loaded.push((aor.into(), version, record.to_vec()));
                }
                // Apply as we go: memory holds one batch of raw records at a time.
                for (aor, version, record) in loaded.drain(..) {
                    let Some(bindings) = self.bindings_of(&record) else {
                        continue;
                    };
                    if bindings.is_empty() {
                        continue;
                    }
                    present.insert(aor.clone());
                    shared.mem.apply_remote(&aor, bindings);
                    self.versions.insert(aor, version);
                }
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        if lost {
            // Redis lost its data (restarted empty): write back what it does not have (what
            // other servers wrote back before this load was applied above; what they write
            // after it arrives as notices).
            shared.mem.mark_dirty_unless(|aor| present.contains(aor));
            shared.counters.reseeds.fetch_add(1, Ordering::Relaxed);
        } else {
            // Redis is the reference: drop what it no longer has (unless changed here).
            shared.mem.remove_unkept(|aor| present.contains(aor));
            self.versions.retain(|aor, _| present.contains(aor));
        }
        self.epoch = Some(epoch);
        shared
            .counters
            .last_resync_records
            .store(records, Ordering::Relaxed);
        shared.counters.resyncs.fetch_add(1, Ordering::Release);
        self.backoff = shared.config.min_backoff;
        true
    }
}
