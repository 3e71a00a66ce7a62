//! [`MemoryStore`]: the sharded in-memory location store, also the read side of
//! [`PersistentStore`](crate::PersistentStore).

use core::fmt;
use core::sync::atomic::{AtomicUsize, Ordering};
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use holdline_base::Instant;
use holdline_proto::{Binding, LocationStore};
use parking_lot::RwLock;

use crate::persistent::Tracker;

/// The number of shards; a power of two so that the shard is a mask of the hash.
const SHARDS: usize = 64;

/// One shard: the bindings of the addresses-of-record that hash to it and, when the store
/// feeds a write-behind writer, which of them changed since the writer last looked.
#[derive(Default)]
struct ShardData {
    map: HashMap<Box<[u8]>, Vec<Binding>>,
    /// Addresses-of-record changed since the writer last took this set (empty unless tracked).
    dirty: HashSet<Box<[u8]>>,
}

/// A shard on its own cache lines, so that writers to neighbouring shards do not share one.
#[derive(Default)]
#[repr(align(128))]
struct Shard(RwLock<ShardData>);

/// A [`LocationStore`] in memory, for many threads.
///
/// The address-of-record space is split over 64 shards by a keyed hash of the
/// address-of-record; each shard is a [`parking_lot::RwLock`] around a `HashMap` from the
/// address-of-record to its bindings. There is no global lock: a [`lookup`](Self::lookup)
/// takes one shard's read lock, a [`modify`](Self::modify) one shard's write lock (which makes
/// the read-modify-write of one address-of-record atomic), and [`len`](Self::len) reads an
/// atomic counter. A binding is expired at `now` when `expires_at <= now`.
///
/// The closure passed to `modify` runs under the shard's write lock: it must be short and must
/// not call back into the store.
pub struct MemoryStore {
    shards: Box<[Shard]>,
    hasher: RandomState,
    len: AtomicUsize,
    /// Set when a write-behind writer consumes the changes (see `PersistentStore`).
    tracker: Option<Arc<Tracker>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            hasher: RandomState::new(),
            len: AtomicUsize::new(0),
            tracker: None,
        }
    }

    /// An empty store that records which addresses-of-record change, for `tracker`'s writer.
    pub(crate) fn tracked(tracker: Arc<Tracker>) -> Self {
        Self {
            tracker: Some(tracker),
            ..Self::new()
        }
    }

    /// The number of addresses-of-record with at least one stored binding (walks the shards).
    pub fn aor_count(&self) -> usize {
        self.shards.iter().map(|s| s.0.read().map.len()).sum()
    }

    fn shard(&self, aor: &[u8]) -> &Shard {
        // The mask keeps the index in range; truncating the hash to usize is intended.
        let i = (self.hasher.hash_one(aor) as usize) & (SHARDS - 1);
        &self.shards[i]
    }

    fn add_len(&self, old: usize, new: usize) {
        if new > old {
            self.len.fetch_add(new - old, Ordering::Relaxed);
        } else if old > new {
            self.len.fetch_sub(old - new, Ordering::Relaxed);
        }
    }

    /// Marks `aor` changed in `data` if the store is tracked; returns whether the writer must
    /// be woken (call [`Tracker::wake`] after releasing the shard lock).
    fn mark(&self, data: &mut ShardData, aor: &[u8]) -> bool {
        match &self.tracker {
            Some(t) if !data.dirty.contains(aor) => {
                data.dirty.insert(aor.into());
                t.marked()
            }
            _ => false,
        }
    }

    fn wake(&self) {
        if let Some(t) = &self.tracker {
            t.wake();
        }
    }

    /// Marks `aor` changed (for the writer to write it again, e.g. after a failed batch).
    pub(crate) fn mark_dirty(&self, aor: &[u8]) {
        let wake = {
            let mut g = self.shard(aor).0.write();
            self.mark(&mut g, aor)
        };
        if wake {
            self.wake();
        }
    }

    /// Moves every changed address-of-record into `out`; returns how many were moved.
    pub(crate) fn take_dirty(&self, out: &mut Vec<Box<[u8]>>) -> usize {
        let before = out.len();
        for shard in &*self.shards {
            let mut g = shard.0.write();
            if !g.dirty.is_empty() {
                out.extend(g.dirty.drain());
            }
        }
        out.len() - before
    }

    /// Runs `f` on the stored bindings of `aor` (expired ones included; `None` if unknown)
    /// under the shard's read lock.
    pub(crate) fn with_raw<R>(&self, aor: &[u8], f: impl FnOnce(Option<&[Binding]>) -> R) -> R {
        let g = self.shard(aor).0.read();
        f(g.map.get(aor).map(Vec::as_slice))
    }

    /// Stores `bindings` for `aor` as another server wrote them (replacing what was there;
    /// not marked changed), unless `aor` has a change of this store's not yet taken by the
    /// writer (that change is written later and wins). Returns whether it stored them.
    pub(crate) fn apply_remote(&self, aor: &[u8], mut bindings: Vec<Binding>) -> bool {
        bindings.shrink_to_fit();
        let mut g = self.shard(aor).0.write();
        if g.dirty.contains(aor) {
            return false;
        }
        let new = bindings.len();
        let old = if bindings.is_empty() {
            g.map.remove(aor).map_or(0, |v| v.len())
        } else {
            g.map.insert(aor.into(), bindings).map_or(0, |v| v.len())
        };
        drop(g);
        self.add_len(old, new);
        true
    }

    /// Removes every address-of-record for which `keep` says no, unless it has a change not
    /// yet taken by the writer; returns how many were removed.
    pub(crate) fn remove_unkept(&self, mut keep: impl FnMut(&[u8]) -> bool) -> usize {
        let mut removed_aors = 0;
        let mut removed = 0;
        for shard in &*self.shards {
            let mut g = shard.0.write();
            let ShardData { map, dirty } = &mut *g;
            map.retain(|aor, bindings| {
                let k = dirty.contains(aor) || keep(aor);
                if !k {
                    removed_aors += 1;
                    removed += bindings.len();
                }
                k
            });
        }
        self.add_len(removed, 0);
        removed_aors
    }

    /// Marks every stored address-of-record for which `skip` says no as changed (to write
    /// them again); returns how many it marked.
    pub(crate) fn mark_dirty_unless(&self, mut skip: impl FnMut(&[u8]) -> bool) -> usize {
        let mut aors = Vec::new();
        for shard in &*self.shards {
            aors.extend(shard.0.read().map.keys().filter(|a| !skip(a)).cloned());
        }
        for aor in &aors {
            self.mark_dirty(aor);
        }
        aors.len()
    }

    /// Removes every binding expired at `now` without marking anything changed (for a store
    /// whose backend expires records itself); returns how many were removed.
    pub(crate) fn purge_expired_quietly(&self, now: Instant) -> usize {
        (0..SHARDS).map(|i| self.purge_part_quietly(now, i)).sum()
    }

    /// [`purge_expired_quietly`](Self::purge_expired_quietly) of shard `part` only.
    pub(crate) fn purge_part_quietly(&self, now: Instant, part: usize) -> usize {
        self.purge_shard(now, part, false)
    }

    /// Removes the bindings expired at `now` from shard `i`, marking their
    /// addresses-of-record changed if `mark` (and the store is tracked).
    fn purge_shard(&self, now: Instant, i: usize, mark: bool) -> usize {
        let Some(shard) = self.shards.get(i) else {
            return 0;
        };
        let mut removed = 0;
        let mut wake = false;
        let mut g = shard.0.write();
        let ShardData { map, dirty } = &mut *g;
        map.retain(|aor, bindings| {
            let before = bindings.len();
            bindings.retain(|b| b.expires_at > now);
            let gone = before - bindings.len();
            if gone > 0 {
                removed += gone;
                if mark
                    && let Some(t) = &self.tracker
                    && !dirty.contains(aor)
                {
                    dirty.insert(aor.clone());
                    wake |= t.marked();
                }
            }
            !bindings.is_empty()
        });
        drop(g);
        self.add_len(removed, 0);
        if wake {
            self.wake();
        }
        removed
    }

    /// Stores `bindings` for `aor` as loaded from disk (replacing what was there; not marked
    /// changed). An empty `bindings` removes the entry.
    pub(crate) fn insert_loaded(&self, aor: &[u8], mut bindings: Vec<Binding>) {
        bindings.shrink_to_fit();
        let mut g = self.shard(aor).0.write();
        let new = bindings.len();
        let old = if bindings.is_empty() {
            g.map.remove(aor).map_or(0, |v| v.len())
        } else {
            g.map.insert(aor.into(), bindings).map_or(0, |v| v.len())
        };
        drop(g);
        self.add_len(old, new);
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("shards", &self.shards.len())
            .field("len", &self.len())
            .field("tracked", &self.tracker.is_some())
            .finish_non_exhaustive()
    }
}

impl LocationStore for MemoryStore {
    fn list_aors(&self, prefix: &[u8], limit: usize, out: &mut Vec<Box<[u8]>>) -> bool {
        for s in &*self.shards {
            let g = s.0.read();
            for aor in g.map.keys().filter(|a| a.starts_with(prefix)) {
                if out.len() >= limit {
                    return true;
                }
                out.push(aor.clone());
            }
        }
        true
    }

    fn lookup(&self, aor: &[u8], now: Instant, out: &mut Vec<Binding>) -> usize {
        let g = self.shard(aor).0.read();
        let Some(bindings) = g.map.get(aor) else {
            return 0;
        };
        let before = out.len();
        out.extend(bindings.iter().filter(|b| b.expires_at > now).cloned());
        out.len() - before
    }

    fn has_bindings(&self, aor: &[u8], now: Instant) -> bool {
        let g = self.shard(aor).0.read();
        g.map
            .get(aor)
            .is_some_and(|bindings| bindings.iter().any(|b| b.expires_at > now))
    }

    fn modify(&self, aor: &[u8], now: Instant, f: &mut dyn FnMut(&mut Vec<Binding>)) {
        let mut g = self.shard(aor).0.write();
        let data = &mut *g;
        let (old, new) = if let Some(bindings) = data.map.get_mut(aor) {
            let old = bindings.len();
            bindings.retain(|b| b.expires_at > now);
            f(bindings);
            let new = bindings.len();
            if new == 0 {
                data.map.remove(aor);
            } else {
                bindings.shrink_to_fit();
            }
            (old, new)
        } else {
            let mut bindings = Vec::new();
            f(&mut bindings);
            let new = bindings.len();
            if new > 0 {
                // A Vec grown by one push holds room for four bindings: most
                // addresses-of-record have one (issue 21: 870 B of RSS per binding before).
                bindings.shrink_to_fit();
                data.map.insert(aor.into(), bindings);
            }
            (0, new)
        };
        let wake = self.mark(data, aor);
        drop(g);
        self.add_len(old, new);
        if wake {
            self.wake();
        }
    }

    fn purge_expired(&self, now: Instant) -> usize {
        (0..SHARDS).map(|i| self.purge_shard(now, i, true)).sum()
    }

    /// One part per shard: a part is 1/64 of the store.
    fn purge_parts(&self) -> usize {
        SHARDS
    }

    fn purge_part(&self, now: Instant, part: usize) -> usize {
        self.purge_shard(now, part, true)
    }

    fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;
    use std::thread;

    fn binding(contact: &str, expires_at: Instant) -> Binding {
        Binding {
            contact: contact.as_bytes().into(),
            expires_at,
            q: 1000,
            call_id: b"cid".as_slice().into(),
            cseq: 1,
            source: None,
        }
    }

    fn get(store: &MemoryStore, aor: &[u8], now: Instant) -> Vec<Binding> {
        let mut out = Vec::new();
        let n = store.lookup(aor, now, &mut out);
        assert_eq!(n, out.len());
        out
    }

    /// A stored address-of-record holds exactly its bindings: a Vec grown by one push would
    /// keep room for four (≈ 350 B more per binding, the bulk of the RSS per binding).
    #[test]
    fn stored_bindings_take_no_spare_room() {
        let s = MemoryStore::new();
        let t0 = Instant::from_secs(10);
        s.modify(b"a@x", t0, &mut |v| {
            v.push(binding("sip:a@h", Instant::from_secs(99)))
        });
        s.modify(b"a@x", t0, &mut |v| {
            v.push(binding("sip:b@h", Instant::from_secs(99)))
        });
        s.insert_loaded(b"b@x", {
            let mut v = Vec::with_capacity(8);
            v.push(binding("sip:c@h", Instant::from_secs(99)));
            v
        });
        let cap = |aor: &[u8]| {
            let g = s.shard(aor).0.read();
            g.map.get(aor).map_or(0, Vec::capacity)
        };
        assert_eq!(cap(b"a@x"), 2);
        assert_eq!(cap(b"b@x"), 1);
    }

    /// The Redis store's helpers: another server's state never replaces a change of this
    /// store's waiting for the writer; a quiet purge marks nothing.
    #[test]
    fn remote_state_yields_to_local_changes() {
        let s = MemoryStore::tracked(Arc::new(Tracker::new(100)));
        let t0 = Instant::from_secs(10);
        assert!(s.apply_remote(
            b"r@x",
            vec![binding("sip:remote@h", Instant::from_secs(99))]
        ));
        assert_eq!(s.len(), 1);
        s.modify(b"l@x", t0, &mut |v| {
            v.push(binding("sip:local@h", Instant::from_secs(99)))
        });
        // l@x is dirty: a remote state for it is refused, and a resync keeps it.
        assert!(!s.apply_remote(b"l@x", Vec::new()));
        assert_eq!(get(&s, b"l@x", t0).len(), 1);
        assert_eq!(s.remove_unkept(|_| false), 1, "only r@x goes");
        assert_eq!(s.aor_count(), 1);
        let mut taken = Vec::new();
        assert_eq!(s.take_dirty(&mut taken), 1);
        // Not dirty any more: marking all but l@x marks nothing; marking all marks it.
        assert_eq!(s.mark_dirty_unless(|aor| aor == b"l@x"), 0);
        assert_eq!(s.mark_dirty_unless(|_| false), 1);
        taken.clear();
        assert_eq!(s.take_dirty(&mut taken), 1);
        assert!(s.apply_remote(b"e@x", vec![binding("sip:e@h", Instant::from_secs(20))]));
        assert_eq!(s.purge_expired_quietly(Instant::from_secs(20)), 1);
        assert_eq!(s.take_dirty(&mut taken), 0, "a quiet purge marks nothing");
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn modify_then_lookup_sees_it() {
        let s = MemoryStore::new();
        let t0 = Instant::from_secs(10);
        assert!(s.is_empty());
        s.modify(b"alice@example.com", t0, &mut |v| {
            v.push(binding("sip:a@192.0.2.1", Instant::from_secs(100)));
            v.push(binding("sip:a@192.0.2.2", Instant::from_secs(50)));
        });
        assert_eq!(s.len(), 2);
        assert_eq!(s.aor_count(), 1);
        let got = get(&s, b"alice@example.com", t0);
        assert_eq!(got.len(), 2);
        assert_eq!(&*got[0].contact, b"sip:a@192.0.2.1");
        assert!(get(&s, b"bob@example.com", t0).is_empty());

        // lookup appends and counts only what it appended
        let mut out = vec![binding("x", Instant::MAX)];
        assert_eq!(s.lookup(b"alice@example.com", t0, &mut out), 2);
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn lookup_skips_expired_and_modify_drops_them() {
        let s = MemoryStore::new();
        s.modify(b"a", Instant::ZERO, &mut |v| {
            v.push(binding("short", Instant::from_secs(5)));
            v.push(binding("long", Instant::from_secs(50)));
        });
        // at exactly expires_at the binding is expired
        let got = get(&s, b"a", Instant::from_secs(5));
        assert_eq!(got.len(), 1);
        assert_eq!(&*got[0].contact, b"long");
        // expired but not purged: still counted
        assert_eq!(s.len(), 2);
        // modify sees only live bindings and stores the result
        s.modify(b"a", Instant::from_secs(6), &mut |v| {
            assert_eq!(v.len(), 1);
        });
        assert_eq!(s.len(), 1);
        // an empty result removes the entry
        s.modify(b"a", Instant::from_secs(6), &mut Vec::clear);
        assert_eq!(s.len(), 0);
        assert_eq!(s.aor_count(), 0);
        // modify of an unknown AOR that adds nothing stores nothing
        s.modify(b"nobody", Instant::ZERO, &mut |v| assert!(v.is_empty()));
        assert_eq!(s.aor_count(), 0);
    }

    #[test]
    fn purge_removes_expired_everywhere() {
        let s = MemoryStore::new();
        for i in 0..100u64 {
            let aor = format!("user{i}@example.com");
            s.modify(aor.as_bytes(), Instant::ZERO, &mut |v| {
                v.push(binding("a", Instant::from_secs(i)));
                v.push(binding("b", Instant::from_secs(1000)));
            });
        }
        assert_eq!(s.len(), 200);
        // bindings with expires_at <= 49 s: i = 0..=49
        assert_eq!(s.purge_expired(Instant::from_secs(49)), 50);
        assert_eq!(s.len(), 150);
        assert_eq!(s.purge_expired(Instant::from_secs(49)), 0);
        assert_eq!(s.purge_expired(Instant::from_secs(1000)), 150);
        assert!(s.is_empty());
        assert_eq!(s.aor_count(), 0);
    }

    /// 4 threads × `PER` modifies, each adding one binding; checks that none is lost.
    fn hammer(s: &MemoryStore, aor_of: impl Fn(usize) -> String + Sync) {
        const THREADS: usize = 4;
        const PER: usize = 2_000;
        let barrier = Barrier::new(THREADS);
        thread::scope(|scope| {
            for t in 0..THREADS {
                let (barrier, aor_of) = (&barrier, &aor_of);
                scope.spawn(move || {
                    barrier.wait();
                    for i in 0..PER {
                        let contact = format!("sip:{t}-{i}@192.0.2.1");
                        s.modify(aor_of(t).as_bytes(), Instant::ZERO, &mut |v| {
                            v.push(binding(&contact, Instant::MAX));
                        });
                    }
                });
            }
        });
        assert_eq!(s.len(), THREADS * PER);
        let total: usize = (0..THREADS)
            .map(aor_of)
            .collect::<HashSet<_>>()
            .iter()
            .map(|aor| get(s, aor.as_bytes(), Instant::ZERO).len())
            .sum();
        assert_eq!(total, THREADS * PER);
    }

    #[test]
    fn concurrent_modifies_on_disjoint_aors_keep_every_update() {
        let s = MemoryStore::new();
        hammer(&s, |t| format!("user{t}@example.com"));
        assert_eq!(s.aor_count(), 4);
    }

    #[test]
    fn concurrent_modifies_on_one_aor_keep_every_update() {
        let s = MemoryStore::new();
        hammer(&s, |_| "shared@example.com".to_owned());
        assert_eq!(s.aor_count(), 1);
        let got = get(&s, b"shared@example.com", Instant::ZERO);
        let distinct: HashSet<_> = got.iter().map(|b| b.contact.clone()).collect();
        assert_eq!(distinct.len(), got.len());
    }
}
