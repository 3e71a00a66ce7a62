//! holdline's location-store backends: implementations of
//! [`holdline_proto::LocationStore`], the registrar's bindings by address-of-record.
//!
//! This is an IO crate (it ships its own `clippy.toml`): it reads the wall clock, spawns a
//! thread and writes files.
//!
//! - [`MemoryStore`]: bindings in memory, for many threads at once. 64 shards chosen by a
//!   keyed hash of the address-of-record, each a `parking_lot::RwLock<HashMap<aor, Vec<Binding>>>`
//!   on its own cache lines; no global lock; `modify` is atomic per address-of-record (it runs
//!   under its shard's write lock); `len` is an atomic counter.
//! - [`PersistentStore`] (the server's default): a `MemoryStore` serves every read, and a
//!   background thread writes changes behind the caller's back to an embedded database.
//! - [`RedisStore`]: a `MemoryStore` serves every read; a background thread writes changes
//!   through to a Redis shared by every server of a cluster (one key per address-of-record,
//!   expiring with its latest binding) and applies what the other servers write, announced on
//!   a pub/sub channel; a full load after every (re)connection. Sentinel finds the primary
//!   after a failover. See the `redis` module's documentation (and `docs/scaling.md`).
//!
//! # Write-behind
//!
//! ```text
//!  worker threads                                   writer thread ("holdline-store-writer")
//!  ──────────────                                   ───────────────────────────────────────
//!  modify(aor, f) / purge_expired
//!    │ shard write lock
//!    ├─ apply f to the shard's HashMap
//!    ├─ insert aor into the shard's dirty set ──┐   wait until: pending ≥ max_batch, or
//!    │  (already there? nothing more: coalesced)│     flush_interval since it saw a change,
//!    └─ pending += 1; on 0→1 or =max_batch ─────┼──>  or flush() waiting, or Drop
//!       wake the writer (no disk, no waiting)   │   take every shard's dirty set (swap)
//!                                               └─> for each aor: read its *current* bindings
//!  lookup(aor) ── shard read lock ──> HashMap         (shard read lock), encode the record
//!                                                   one redb write transaction: insert or
//!  flush() ── waits for the batch that covers          delete each record, commit (fsync)
//!             every change made before the call ◄── batch done (on failure: mark the
//!                                                     batch dirty again, retry after
//!                                                     flush_interval)
//! ```
//!
//! The queue between the two sides is the set of dirty addresses-of-record, spread over the
//! shards and marked under the shard lock `modify` already holds. It cannot overflow and never
//! makes a caller wait: an address-of-record changed again before the writer takes it is
//! still one entry (its size is bounded by the number of addresses-of-record, which the memory
//! store holds anyway), and the writer always writes the state it reads at write time, so the
//! latest state is never lost. [`PersistentStore::stats`] shows the effect:
//! `records_written` ≤ the number of modifications.
//!
//! **Bound.** A change reaches the disk at most `flush_interval` (default 100 ms) plus the
//! duration of two commits after `modify` returns — the commit in progress when it was made
//! and its own — sooner when `max_batch` (default 1,000) addresses-of-record are pending or a
//! [`flush`](PersistentStore::flush) is waiting. The bound holds while the disk keeps up; if a
//! commit fails, the batch is retried every `flush_interval` and the changes stay served from
//! memory. A crash loses at most the changes inside that window. A transaction takes every
//! pending address-of-record, so it may hold more than `max_batch` of them.
//!
//! **Time.** Callers pass `holdline_base::Instant` (monotonic, driver epoch). Expiries are
//! persisted as Unix milliseconds through the mapping "`SystemTime::now()` is `now`" taken at
//! [`PersistentStore::open`]; at the next open, bindings whose expiry is not after the
//! wall-clock time are dropped and counted in the [`LoadReport`]. The source of a binding is
//! persisted as its address and transport; its connection id is dropped (connections do not
//! survive a restart). Records are versioned (a leading version byte, hand-written encoding);
//! a record that does not decode is skipped and counted, not fatal.
//!
//! # Engine: redb
//!
//! [redb](https://www.redb.org) is pure Rust (no C toolchain, no `unsafe` FFI boundary),
//! ACID with copy-on-write B-trees and crash-safe commits, has a stable file format, a small
//! dependency tree (only `libc` on Linux), and is actively maintained (4.5 at the time of
//! writing). A location store needs only a key-value map written in batches by a single
//! writer and read in full at start-up, which is exactly redb's model.
//!
//! - SQLite (`rusqlite`): excellent and durable, but a bundled C library and a SQL layer we do
//!   not need; the write path through prepared statements costs more per record.
//! - sled: pure Rust but its stable release is old, the rewrite has not shipped, and its
//!   on-disk format is declared unstable.
//! - RocksDB: an LSM tree tuned for write volumes far beyond a registrar's, via a large C++
//!   build and many tuning knobs; compaction threads we do not want next to the SIP workers.
#![forbid(unsafe_code)]

mod memory;
mod persistent;
mod record;
mod redis;

use std::path::PathBuf;
use std::sync::Arc;

pub use memory::MemoryStore;
pub use persistent::{
    CommitListener, Durability, LoadReport, PersistentConfig, PersistentStore, StoreStats,
};
pub use record::DecodeError;
pub use redis::{RedisConfig, RedisStats, RedisStore, RedisStoreError, RedisTarget, TargetError};

/// The errors of [`PersistentStore`]. Every variant names the database file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database file could not be opened or created (missing or unwritable directory,
    /// not a redb file, already open, ...).
    #[error("cannot open location database {}: {source}", path.display())]
    Open {
        /// The database file.
        path: PathBuf,
        /// What redb reported.
        source: redb::DatabaseError,
    },
    /// Reading the database at open failed (IO error or a damaged file).
    #[error("cannot read location database {}: {source}", path.display())]
    Db {
        /// The database file.
        path: PathBuf,
        /// What redb reported.
        source: redb::Error,
    },
    /// One record could not be decoded; it was skipped (see [`LoadReport`]).
    #[error("corrupt record for {aor:?} in location database {}: {source}", path.display())]
    CorruptRecord {
        /// The database file.
        path: PathBuf,
        /// The record's address-of-record (lossily as text).
        aor: String,
        /// Why it could not be decoded.
        source: DecodeError,
    },
    /// The writer thread could not be started.
    #[error("cannot start the writer of location database {}: {source}", path.display())]
    Spawn {
        /// The database file.
        path: PathBuf,
        /// What the operating system reported.
        source: std::io::Error,
    },
    /// A write-behind batch failed (writing or syncing its journal entry); its changes are
    /// still in memory and are retried.
    #[error("writing the journal of location database {} failed: {source}", path.display())]
    Write {
        /// The database file.
        path: PathBuf,
        /// What the operating system reported for the failed write.
        source: Arc<std::io::Error>,
    },
    /// The journal beside the database could not be read, replayed or created at open.
    #[error("journal of location database {}: {source}", path.display())]
    Journal {
        /// The database file.
        path: PathBuf,
        /// What the operating system reported.
        source: Arc<std::io::Error>,
    },
    /// The writer thread has stopped (it panicked), so nothing more will be written.
    #[error("the writer of location database {} has stopped", path.display())]
    WriterStopped {
        /// The database file.
        path: PathBuf,
    },
}
