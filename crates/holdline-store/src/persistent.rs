//! [`PersistentStore`]: a [`MemoryStore`] for every read, with write-behind to a journal
//! checkpointed into redb (see the `journal` module).

use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use core::time::Duration;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::SystemTime;

use holdline_base::{Instant, WaitHistogram};
use holdline_proto::{Binding, LocationStore};
use parking_lot::{Condvar, Mutex};
use redb::{Database, ReadableDatabase, TableDefinition};

use crate::StoreError;
use crate::memory::MemoryStore;
use crate::record::{self, WallClock};

mod journal;
#[cfg(test)]
mod tests;

/// The one table: address-of-record → record (see the `record` module for the format).
const TABLE: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("bindings.v1");

/// The store's own bookkeeping: [`CHECKPOINTED`] → the generation up to which every journal
/// file is in the database.
const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta.v1");

/// The key of [`META`] naming the last journal generation a checkpoint wrote.
const CHECKPOINTED: &str = "journal_checkpointed";

/// At most this many corrupt records are kept, as errors, in the [`LoadReport`].
const CORRUPT_KEPT: usize = 16;

/// How the write-behind writer batches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PersistentConfig {
    /// The longest a change waits before the writer starts the transaction that persists it,
    /// counted from when the writer sees it. Default 100 ms.
    pub flush_interval: Duration,
    /// The number of changed addresses-of-record that makes the writer start a transaction
    /// without waiting for `flush_interval`. A transaction takes every address-of-record
    /// changed so far, so it may hold more. Default 1,000. A value of 0 is treated as 1.
    pub max_batch: usize,
    /// What a caller of [`LocationStore::modify`] may promise. Default [`Durability::Commit`].
    pub durability: Durability,
    /// The shortest time between the starts of two transactions, unless `max_batch`
    /// addresses-of-record are pending or the store is closing. Default 2 ms. With
    /// [`Durability::Commit`] every REGISTER asks for a commit at once; without this floor the
    /// writer commits back to back, a few changes each, and the fixed cost of a transaction
    /// (its sync, the B-tree's copied pages, the wake-ups of the workers waiting on it) is paid
    /// per handful of REGISTERs (issue 21: 28.9 µs of server CPU per REGISTER against 18.4
    /// write-behind). The window adds at most its length to the wait of a REGISTER's 200.
    pub commit_window: Duration,
    /// redb's page cache, bytes. Default 16 MiB: every read is served from memory, so the
    /// cache only needs the B-tree's interior pages for the writer; redb's own default
    /// (1 GiB) kept every page the load at start touched resident (issue 21: ≈ 900 B of RSS
    /// per binding after a restart).
    pub cache_bytes: usize,
    /// The journal file's length at which the writer starts the next one and the store
    /// checkpoints the full one into the database, in the background. Default 64 MiB
    /// (≈ 400,000 changes): the bound on what a restart replays.
    pub checkpoint_bytes: u64,
}

/// When a change counts as stored (`[store] durability` in the server's configuration).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// A change is stored once committed: [`LocationStore::commit_ticket`] gives the batch
    /// that commits it and starts that batch at once (no `flush_interval` wait); the
    /// registrar answers 200 only when [`LocationStore::committed`] reaches it. Every change
    /// queued while a commit runs goes into the next one (group commit).
    #[default]
    Commit,
    /// A change is written behind the caller's back within `flush_interval` plus two
    /// commits; a crash loses what is inside that window (acknowledged changes included).
    WriteBehind,
}

impl Default for PersistentConfig {
    fn default() -> Self {
        Self {
            flush_interval: Duration::from_millis(100),
            max_batch: 1_000,
            durability: Durability::Commit,
            commit_window: Duration::from_millis(2),
            cache_bytes: 16 << 20,
            checkpoint_bytes: 64 << 20,
        }
    }
}

/// What [`PersistentStore::open`] found in the database.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Addresses-of-record loaded with at least one live binding.
    pub aors: usize,
    /// Bindings loaded (live at open).
    pub loaded: usize,
    /// Bindings dropped because they had expired by the wall-clock time at open.
    pub expired_dropped: usize,
    /// Records (addresses-of-record) that could not be decoded and were skipped; they stay in
    /// the database until the address-of-record is written again.
    pub corrupt_skipped: usize,
    /// The first few of those, as [`StoreError::CorruptRecord`] (at most 16).
    pub corrupt: Vec<StoreError>,
    /// Changes replayed from the journal (written after the last checkpoint).
    pub replayed: u64,
    /// Bytes cut off the end of a journal file: an entry torn by a crash during its write
    /// (never acknowledged).
    pub journal_cut_bytes: u64,
}

/// Counters of the write-behind writer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Transactions committed.
    pub batches_written: u64,
    /// Records written or deleted by those transactions (one per address-of-record per batch,
    /// however many times it was modified in between).
    pub records_written: u64,
    /// Addresses-of-record changed and not yet taken by the writer.
    pub pending: usize,
    /// Transactions that failed (their addresses-of-record are retried in the next one).
    pub write_errors: u64,
    /// How long the committed transactions took, write and fsync: with
    /// [`Durability::Commit`], the part of a REGISTER's latency the disk decides (on a
    /// virtual disk most commits take under a millisecond and a few 20-250 ms, and those few
    /// hold every REGISTER answered meanwhile: issue 21).
    pub commit_times: WaitHistogram,
    /// Checkpoints of the journal into the database that completed.
    pub checkpoints: u64,
    /// Checkpoints that failed (their changes are written by the next one).
    pub checkpoint_errors: u64,
}

/// The writer's side of the hand-off, shared with the tracked [`MemoryStore`].
///
/// `pending` counts addresses-of-record marked changed (in the shards' dirty sets) and not
/// yet taken by the writer; a modify touches `state` only when it must wake the writer (the
/// first change after an idle period, or `max_batch` reached).
pub(crate) struct Tracker {
    pub(crate) pending: AtomicUsize,
    pub(crate) max_batch: usize,
    pub(crate) state: Mutex<WriterState>,
    /// The writer waits here for work.
    pub(crate) work: Condvar,
    /// Callers of `flush` wait here for batches to finish.
    pub(crate) done: Condvar,
}

/// The writer's bookkeeping, under [`Tracker::state`] (shared with the Redis store's writer).
#[derive(Default)]
pub(crate) struct WriterState {
    /// The id of the last batch the writer started (taken its addresses-of-record for).
    pub(crate) started: u64,
    /// The id of the last batch that finished, successfully or not.
    pub(crate) done: u64,
    /// The id of the last batch that committed.
    pub(crate) last_ok: u64,
    /// A `flush` waits for this batch: the writer does not wait for `flush_interval`.
    pub(crate) flush_target: u64,
    /// Whether the last batch failed (the writer then waits `flush_interval` before retrying).
    pub(crate) failing: bool,
    last_error: Option<Arc<std::io::Error>>,
    /// Set by `Drop`: write what is left and stop.
    pub(crate) shutdown: bool,
    /// Set when the writer thread has exited.
    pub(crate) stopped: bool,
}

impl Tracker {
    pub(crate) fn new(max_batch: usize) -> Self {
        Self {
            pending: AtomicUsize::new(0),
            max_batch: max_batch.max(1),
            state: Mutex::new(WriterState::default()),
            work: Condvar::new(),
            done: Condvar::new(),
        }
    }

    /// Counts one newly changed address-of-record; returns whether the writer must be woken.
    pub(crate) fn marked(&self) -> bool {
        let before = self.pending.fetch_add(1, Ordering::AcqRel);
        before == 0 || before + 1 == self.max_batch
    }

    /// Wakes the writer.
    pub(crate) fn wake(&self) {
        let _state = self.state.lock();
        self.work.notify_one();
    }

    pub(crate) fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }
}

/// Test hooks in the writer (nothing outside tests).
#[derive(Default)]
struct Hooks {
    /// Blocks the writer after it has taken a batch and before it touches the database.
    #[cfg(test)]
    gate: Option<Arc<tests::Gate>>,
}

impl Hooks {
    fn before_write(&self) {
        #[cfg(test)]
        if let Some(gate) = &self.gate {
            gate.pass();
        }
    }
}

/// What the store and its writer thread share.
struct Shared {
    mem: MemoryStore,
    tracker: Arc<Tracker>,
    clock: WallClock,
    config: PersistentConfig,
    path: PathBuf,
    batches_written: AtomicU64,
    records_written: AtomicU64,
    write_errors: AtomicU64,
    commit_times: Mutex<WaitHistogram>,
    /// The id of the last batch that committed (a copy of `WriterState::last_ok` readable
    /// without the lock): [`LocationStore::committed`].
    committed: AtomicU64,
    /// Called by the writer after each batch that committed, with its id.
    listener: Mutex<Option<CommitListener>>,
    hooks: Hooks,
    /// A checkpoint is running (the writer starts no other).
    checkpointing: AtomicBool,
    /// The addresses-of-record of a checkpoint that failed, for the next one.
    checkpoint_retry: Mutex<Option<journal::AorLog>>,
    checkpoints: AtomicU64,
    checkpoint_errors: AtomicU64,
}

/// See [`PersistentStore::set_commit_listener`].
pub type CommitListener = Arc<dyn Fn(u64) + Send + Sync>;

/// A [`LocationStore`] kept in memory and persisted behind the caller's back to an embedded
/// [redb](https://docs.rs/redb) database: the server's default. See the crate documentation
/// for the design and the bound on how long a change stays memory-only.
///
/// Reads (`lookup`, `len`) are [`MemoryStore`] reads. `modify` and `purge_expired` change the
/// memory store and mark the addresses-of-record they changed; they never wait for the disk.
/// A background thread writes the marked addresses-of-record in batches. Dropping the store
/// writes what is left (one attempt) and joins the thread.
pub struct PersistentStore {
    shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
    checkpointer: Option<JoinHandle<()>>,
    report: LoadReport,
}

impl PersistentStore {
    /// Opens (or creates) the database at `path` with the default [`PersistentConfig`] and
    /// loads it. `now` is the caller's current time: expiries are persisted as wall-clock
    /// time through the mapping "`SystemTime::now()` is `now`" taken here.
    pub fn open(path: impl AsRef<Path>, now: Instant) -> Result<Self, StoreError> {
        Self::open_with(path, now, SystemTime::now(), PersistentConfig::default())
    }

    /// Like [`open`](Self::open) with an explicit wall-clock time for `now` and a
    /// configuration. Bindings whose persisted expiry is not after `wall_now` are dropped
    /// (and counted in the [`LoadReport`]).
    pub fn open_with(
        path: impl AsRef<Path>,
        now: Instant,
        wall_now: SystemTime,
        config: PersistentConfig,
    ) -> Result<Self, StoreError> {
        Self::open_hooked(path.as_ref(), now, wall_now, config, Hooks::default())
    }

    fn open_hooked(
        path: &Path,
        now: Instant,
        wall_now: SystemTime,
        config: PersistentConfig,
        hooks: Hooks,
    ) -> Result<Self, StoreError> {
        let db = redb::Builder::new()
            .set_cache_size(config.cache_bytes)
            .create(path)
            .map_err(|source| StoreError::Open {
                path: path.to_owned(),
                source,
            })?;
        let tracker = Arc::new(Tracker::new(config.max_batch));
        let shared = Arc::new(Shared {
            mem: MemoryStore::tracked(Arc::clone(&tracker)),
            tracker,
            clock: WallClock::new(now, wall_now),
            config,
            path: path.to_owned(),
            batches_written: AtomicU64::new(0),
            records_written: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            commit_times: Mutex::new(WaitHistogram::default()),
            committed: AtomicU64::new(0),
            listener: Mutex::new(None),
            hooks,
            checkpointing: AtomicBool::new(false),
            checkpoint_retry: Mutex::new(None),
            checkpoints: AtomicU64::new(0),
            checkpoint_errors: AtomicU64::new(0),
        });
        let db_err = |source: redb::Error| StoreError::Db {
            path: path.to_owned(),
            source,
        };
        let mut report = load(&db, &shared).map_err(db_err)?;
        let journal = recover(&db, &shared, &mut report).map_err(|e| match e {
            Recover::Db(source) => db_err(source),
            Recover::Io(source) => StoreError::Journal {
                path: path.to_owned(),
                source: Arc::new(source),
            },
        })?;
        let (to_checkpointer, checkpoints) = mpsc::channel();
        let spawn_err = |source| StoreError::Spawn {
            path: path.to_owned(),
            source,
        };
        let checkpoint_shared = Arc::clone(&shared);
        let checkpointer = thread::Builder::new()
            .name("holdline-checkpt".into())
            .spawn(move || run_checkpointer(&checkpoint_shared, &db, &checkpoints))
            .map_err(spawn_err)?;
        let writer_shared = Arc::clone(&shared);
        let writer = thread::Builder::new()
            .name("holdline-store-writer".into())
            .spawn(move || run_writer(&writer_shared, journal, &to_checkpointer))
            .map_err(spawn_err)?;
        Ok(Self {
            shared,
            writer: Some(writer),
            checkpointer: Some(checkpointer),
            report,
        })
    }

    /// Blocks until every change made before the call is committed to the database.
    ///
    /// Returns an error if the batch that should have committed them failed (they stay
    /// pending and are retried), or if the writer has stopped.
    pub fn flush(&self) -> Result<(), StoreError> {
        let t = &*self.shared.tracker;
        let mut st = t.state.lock();
        // Changes still pending go into the batch after the one started last; changes already
        // taken are in the batch started last (which reads the memory store after taking).
        let target = if t.pending() > 0 {
            st.started + 1
        } else {
            st.started
        };
        if target <= st.last_ok && st.done >= target {
            return Ok(());
        }
        st.flush_target = st.flush_target.max(target);
        t.work.notify_one();
        while st.done < target && !st.stopped {
            t.done.wait(&mut st);
        }
        // A batch that commits takes everything marked before it, including what failed
        // batches gave back: any success at or after `target` covers this call's changes.
        if st.last_ok >= target {
            Ok(())
        } else if let (Some(source), false) = (&st.last_error, st.done < target) {
            Err(StoreError::Write {
                path: self.shared.path.clone(),
                source: Arc::clone(source),
            })
        } else {
            Err(StoreError::WriterStopped {
                path: self.shared.path.clone(),
            })
        }
    }

    /// Has `listener` called, on the writer thread, after each batch that committed, with
    /// the batch's id (the new [`committed`](LocationStore::committed)): a server wakes the
    /// workers holding responses for it. Replaces any listener set before.
    pub fn set_commit_listener(&self, listener: CommitListener) {
        *self.shared.listener.lock() = Some(listener);
    }

    /// What was found in the database at open.
    pub fn load_report(&self) -> &LoadReport {
        &self.report
    }

    /// The writer's counters.
    pub fn stats(&self) -> StoreStats {
        let s = &self.shared;
        StoreStats {
            batches_written: s.batches_written.load(Ordering::Relaxed),
            records_written: s.records_written.load(Ordering::Relaxed),
            pending: s.tracker.pending(),
            write_errors: s.write_errors.load(Ordering::Relaxed),
            commit_times: *s.commit_times.lock(),
            checkpoints: s.checkpoints.load(Ordering::Relaxed),
            checkpoint_errors: s.checkpoint_errors.load(Ordering::Relaxed),
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// The number of addresses-of-record with at least one stored binding.
    pub fn aor_count(&self) -> usize {
        self.shared.mem.aor_count()
    }
}

impl LocationStore for PersistentStore {
    fn list_aors(&self, prefix: &[u8], limit: usize, out: &mut Vec<Box<[u8]>>) -> bool {
        self.shared.mem.list_aors(prefix, limit, out)
    }

    fn lookup(&self, aor: &[u8], now: Instant, out: &mut Vec<Binding>) -> usize {
        self.shared.mem.lookup(aor, now, out)
    }

    fn has_bindings(&self, aor: &[u8], now: Instant) -> bool {
        self.shared.mem.has_bindings(aor, now)
    }

    /// Changes the memory store and marks `aor` for the writer; never waits for the disk.
    fn modify(&self, aor: &[u8], now: Instant, f: &mut dyn FnMut(&mut Vec<Binding>)) {
        self.shared.mem.modify(aor, now, f);
    }

    fn purge_expired(&self, now: Instant) -> usize {
        self.shared.mem.purge_expired(now)
    }

    fn purge_parts(&self) -> usize {
        self.shared.mem.purge_parts()
    }

    fn purge_part(&self, now: Instant, part: usize) -> usize {
        self.shared.mem.purge_part(now, part)
    }

    fn len(&self) -> usize {
        self.shared.mem.len()
    }

    /// With [`Durability::Commit`]: the batch after the one started last. Every batch takes
    /// the addresses-of-record marked before it starts and writes their state as of its
    /// write, so that batch (or, if the batch started last took the change, that one first)
    /// commits every change made before this call; asking for it starts it without waiting
    /// for `flush_interval`.
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

impl Drop for PersistentStore {
    fn drop(&mut self) {
        {
            let mut st = self.shared.tracker.state.lock();
            st.shutdown = true;
            self.shared.tracker.work.notify_one();
        }
        if let Some(writer) = self.writer.take() {
            // A panicked writer has nothing left to write; there is nothing more to do here.
            let _ = writer.join();
        }
        // The writer handed the last journal to the checkpointer as it stopped; the
        // checkpointer stops once that is written (or failed: the journal stays for the next
        // open to replay).
        if let Some(checkpointer) = self.checkpointer.take() {
            let _ = checkpointer.join();
        }
    }
}

impl fmt::Debug for PersistentStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PersistentStore")
            .field("path", &self.shared.path)
            .field("len", &self.shared.mem.len())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Loads every record into the memory store.
fn load(db: &Database, shared: &Shared) -> Result<LoadReport, redb::Error> {
    // Create the table on first open, so that reading finds it.
    let txn = db.begin_write()?;
    txn.open_table(TABLE)?;
    txn.commit()?;

    let mut report = LoadReport::default();
    let txn = db.begin_read()?;
    let table = txn.open_table(TABLE)?;
    let mut stored = Vec::new();
    for entry in redb::ReadableTable::iter(&table)? {
        let (key, value) = entry?;
        let aor = key.value();
        let Some((live, total)) = decode_live(
            shared,
            &shared.path,
            aor,
            value.value(),
            &mut stored,
            &mut report,
        ) else {
            continue;
        };
        if live.len() < total {
            // Let the writer rewrite (or delete) the record without the expired bindings.
            shared.mem.mark_dirty(aor);
        }
        if !live.is_empty() {
            report.aors += 1;
            report.loaded += live.len();
            shared.mem.insert_loaded(aor, live);
        }
    }
    Ok(report)
}

/// The live bindings of a stored record of `aor` (read from `file`) and how many it held;
/// `None` (counted and kept in `report`) when it does not decode. Expired ones are counted
/// in `report` as dropped.
fn decode_live(
    shared: &Shared,
    file: &Path,
    aor: &[u8],
    rec: &[u8],
    stored: &mut Vec<record::Stored>,
    report: &mut LoadReport,
) -> Option<(Vec<Binding>, usize)> {
    if let Err(source) = record::decode(rec, stored) {
        report.corrupt_skipped += 1;
        if report.corrupt.len() < CORRUPT_KEPT {
            report.corrupt.push(StoreError::CorruptRecord {
                path: file.to_owned(),
                aor: String::from_utf8_lossy(aor).into_owned(),
                source,
            });
        }
        return None;
    }
    let total = stored.len();
    let live: Vec<Binding> = stored
        .drain(..)
        .filter_map(|s| {
            let mut b = s.binding;
            b.expires_at = shared.clock.instant_of_unix_ms(s.expires_unix_ms)?;
            Some(b)
        })
        .collect();
    report.expired_dropped += total - live.len();
    Some((live, total))
}

/// Why the journal could not be recovered at open.
enum Recover {
    Db(redb::Error),
    Io(std::io::Error),
}

macro_rules! recover_from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for Recover {
            fn from(e: $t) -> Self {
                Self::Db(e.into())
            }
        }
    )*};
}
recover_from_redb!(
    redb::Error,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

impl From<std::io::Error> for Recover {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

/// After [`load`]: replays the journal files newer than the last checkpoint into the memory
/// store (deleting older ones), writes what they held into the database as a checkpoint,
/// and starts the next generation's file for the writer.
fn recover(
    db: &Database,
    shared: &Shared,
    report: &mut LoadReport,
) -> Result<journal::Journal, Recover> {
    let checkpointed = {
        let txn = db.begin_write()?;
        let g = redb::ReadableTable::get(&txn.open_table(META)?, CHECKPOINTED)?.map(|v| v.value());
        txn.commit()?;
        g.unwrap_or(0)
    };
    let mut replayed = journal::AorLog::default();
    let mut newest = checkpointed;
    let mut stored = Vec::new();
    for (generation, file) in journal::files(&shared.path)? {
        newest = newest.max(generation);
        if generation <= checkpointed {
            // Written by a checkpoint that ended before the file could be removed.
            std::fs::remove_file(&file)?;
            continue;
        }
        let r = journal::replay(&file, |aor, record| {
            let live = match record {
                None => Vec::new(),
                Some(rec) => match decode_live(shared, &file, aor, rec, &mut stored, report) {
                    Some((live, _)) => live,
                    None => return,
                },
            };
            shared.mem.insert_loaded(aor, live);
            replayed.push(aor);
        })?;
        report.replayed += r.records;
        report.journal_cut_bytes += r.cut;
    }
    if newest > checkpointed {
        // Into the database at once, so that at most one generation is ever replayed.
        checkpoint(db, shared, &replayed, newest, false)?;
    }
    report.aors = shared.mem.aor_count();
    report.loaded = shared.mem.len();
    Ok(journal::Journal::create(&shared.path, newest + 1)?)
}

/// Addresses-of-record a paced checkpoint writes between two pauses.
const CHECKPOINT_CHUNK: usize = 1_000;

/// Writes the current state of every address-of-record in `aors` into the database, with
/// "every journal up to `generation` is written", then removes those journal files.
///
/// `paced`: after each [`CHECKPOINT_CHUNK`] records the checkpointer sleeps twice as long as
/// they took, so that it uses at most a third of a core. A server pinned to one core (one
/// worker, the storm lab) shares that core with it: unpaced, a checkpoint of 400,000
/// changes at a million bindings took the core from the worker for about a second, and the
/// REGISTER p99 went from 38 to 81-148 ms.
fn checkpoint(
    db: &Database,
    shared: &Shared,
    aors: &journal::AorLog,
    generation: u64,
    paced: bool,
) -> Result<(), Recover> {
    let mut buf = Vec::new();
    // In key order: each B-tree page is then copied and written once, its neighbours next
    // (in hash order every insert lands on another page).
    let sorted = aors.sorted_unique();
    // Paced, in several transactions: one commit of every change would hand the disk
    // hundreds of MB at once, and the journal's syncs wait behind it. A transaction of a
    // part is safe on its own: what it writes is the memory store's state, never older
    // than the journal's; only the last one says the journals are written.
    let per_txn = if paced {
        CHECKPOINT_CHUNK * 10
    } else {
        sorted.len().max(1)
    };
    let parts = sorted.len().div_ceil(per_txn).max(1);
    let mut chunk_start = std::time::Instant::now();
    for (i, part) in sorted
        .chunks(per_txn)
        .chain(core::iter::once(&[][..]))
        .take(parts)
        .enumerate()
    {
        let txn = db.begin_write()?;
        {
            let mut table = txn.open_table(TABLE)?;
            for (n, aor) in part.iter().enumerate() {
                if paced && n > 0 && n % CHECKPOINT_CHUNK == 0 {
                    thread::sleep(chunk_start.elapsed() * 2);
                    chunk_start = std::time::Instant::now();
                }
                let present = shared.mem.with_raw(aor, |bindings| match bindings {
                    Some(b) if !b.is_empty() => {
                        record::encode(b, shared.clock, &mut buf);
                        true
                    }
                    _ => false,
                });
                if present {
                    table.insert(*aor, buf.as_slice())?;
                } else {
                    table.remove(*aor)?;
                }
            }
            if i + 1 == parts {
                txn.open_table(META)?.insert(CHECKPOINTED, generation)?;
            }
        }
        txn.commit()?;
        if paced {
            thread::sleep(chunk_start.elapsed() * 2);
            chunk_start = std::time::Instant::now();
        }
    }
    let mut removed = false;
    for (g, file) in journal::files(&shared.path)? {
        if g <= generation {
            std::fs::remove_file(&file)?;
            removed = true;
        }
    }
    if removed {
        journal::sync_dir(&shared.path)?;
    }
    Ok(())
}

/// The checkpointer thread: writes each full journal it is handed into the database.
fn run_checkpointer(shared: &Shared, db: &Database, work: &mpsc::Receiver<(u64, journal::AorLog)>) {
    while let Ok((generation, aors)) = work.recv() {
        match checkpoint(db, shared, &aors, generation, true) {
            Ok(()) => {
                shared.checkpoints.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                // The files stay; the next checkpoint (of a later generation) covers them
                // and writes these addresses-of-record too.
                shared.checkpoint_errors.fetch_add(1, Ordering::Relaxed);
                let mut retry = shared.checkpoint_retry.lock();
                match retry.as_mut() {
                    Some(r) => r.append(aors),
                    None => *retry = Some(aors),
                }
            }
        }
        shared.checkpointing.store(false, Ordering::Release);
    }
}

/// The writer thread: waits for changes, batches them, appends them to the journal.
fn run_writer(
    shared: &Shared,
    mut journal: journal::Journal,
    checkpointer: &mpsc::Sender<(u64, journal::AorLog)>,
) {
    /// Marks the writer stopped however the thread ends, so that `flush` cannot wait forever.
    struct Stopped<'a>(&'a Tracker);
    impl Drop for Stopped<'_> {
        fn drop(&mut self) {
            let mut st = self.0.state.lock();
            st.stopped = true;
            self.0.done.notify_all();
        }
    }

    let t = &*shared.tracker;
    let _stopped = Stopped(t);
    let mut batch: Vec<Box<[u8]>> = Vec::new();
    let mut buf = Vec::new();
    // When the last transaction started (none yet: no floor for the first).
    let mut last_start: Option<std::time::Instant> = None;
    loop {
        let (id, shutdown) = {
            let mut st = t.state.lock();
            while !st.shutdown && st.flush_target <= st.done && t.pending() == 0 {
                t.work.wait(&mut st);
            }
            // Something to write: give more changes `flush_interval` to arrive, unless a
            // batch is full, a flush is waiting or the store is closing. After a failure, wait
            // the whole interval (only closing cuts it short).
            let deadline = std::time::Instant::now() + shared.config.flush_interval;
            while !st.shutdown
                && (st.failing || (st.flush_target <= st.done && t.pending() < t.max_batch))
            {
                if t.work.wait_until(&mut st, deadline).timed_out() {
                    break;
                }
            }
            // Group commit's floor: the changes that arrive within the window join this
            // transaction instead of starting one each.
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
            (st.started, st.shutdown)
        };

        batch.clear();
        let taken = shared.mem.take_dirty(&mut batch);
        t.pending.fetch_sub(taken, Ordering::AcqRel);
        shared.hooks.before_write();
        let result = if batch.is_empty() {
            Ok(())
        } else {
            let began = std::time::Instant::now();
            let r = write_batch(shared, &mut journal, &batch, &mut buf);
            if r.is_ok() {
                let us = u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX);
                shared.commit_times.lock().record(us);
            }
            r
        };

        let mut st = t.state.lock();
        st.done = id;
        match result {
            Ok(()) => {
                if !batch.is_empty() {
                    shared.batches_written.fetch_add(1, Ordering::Relaxed);
                    shared
                        .records_written
                        .fetch_add(batch.len() as u64, Ordering::Relaxed);
                }
                st.last_ok = id;
                st.failing = false;
                shared.committed.store(id, Ordering::Release);
            }
            Err(e) => {
                shared.write_errors.fetch_add(1, Ordering::Relaxed);
                st.failing = true;
                st.last_error = Some(Arc::new(e));
                drop(st);
                // Give the batch back: the next one writes the then-current state.
                for aor in &batch {
                    shared.mem.mark_dirty(aor);
                }
                st = t.state.lock();
            }
        }
        let ok = st.last_ok == id;
        t.done.notify_all();
        drop(st);
        if ok {
            let listener = shared.listener.lock().clone();
            if let Some(f) = listener {
                f(id);
            }
        }
        if shutdown {
            // The last journal into the database, so that the next open replays nothing
            // (it would if this fails or the process dies first).
            hand_over(shared, &mut journal, checkpointer, true);
            return;
        }
        if journal.bytes() >= shared.config.checkpoint_bytes {
            hand_over(shared, &mut journal, checkpointer, false);
        }
    }
}

/// Starts the next journal generation and hands the full one to the checkpointer, unless a
/// checkpoint is still running (the journal then grows until it is done). `last`: the store
/// is closing; the current file is handed over as it is, with no new one.
fn hand_over(
    shared: &Shared,
    journal: &mut journal::Journal,
    checkpointer: &mpsc::Sender<(u64, journal::AorLog)>,
    last: bool,
) {
    if !last && shared.checkpointing.load(Ordering::Acquire) {
        return;
    }
    if let Some(retry) = shared.checkpoint_retry.lock().take() {
        journal.add_aors(retry);
    }
    let generation = journal.generation();
    if !last {
        match journal::Journal::create(&shared.path, generation + 1) {
            Ok(next) => {
                let mut full = std::mem::replace(journal, next);
                hand(shared, checkpointer, generation, full.take_aors());
            }
            // Keep appending to this one; the next batch tries again.
            Err(_) => {
                shared.checkpoint_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        return;
    }
    hand(shared, checkpointer, generation, journal.take_aors());
}

/// Hands the addresses-of-record of the journal of `generation` to the checkpointer.
fn hand(
    shared: &Shared,
    checkpointer: &mpsc::Sender<(u64, journal::AorLog)>,
    generation: u64,
    aors: journal::AorLog,
) {
    shared.checkpointing.store(true, Ordering::Release);
    if checkpointer.send((generation, aors)).is_err() {
        shared.checkpointing.store(false, Ordering::Release);
    }
}

/// Appends the current state of every address-of-record in `batch` to the journal as one
/// entry and syncs it.
fn write_batch(
    shared: &Shared,
    journal: &mut journal::Journal,
    batch: &[Box<[u8]>],
    buf: &mut Vec<u8>,
) -> std::io::Result<()> {
    journal.begin();
    for aor in batch {
        let present = shared.mem.with_raw(aor, |bindings| match bindings {
            Some(b) if !b.is_empty() => {
                record::encode(b, shared.clock, buf);
                true
            }
            _ => false,
        });
        journal.push(aor, present.then_some(buf.as_slice()));
    }
    journal.commit()
}
