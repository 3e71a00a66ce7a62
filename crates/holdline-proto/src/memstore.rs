//! An in-memory [`LocationStore`]: a fixed number of shards, each a `Mutex<HashMap>` from
//! address-of-record key to its bindings. Used by tests, the simulator and as the simplest
//! backend of the server.
//!
//! A key is assigned to a shard by a deterministic hash (SipHash with fixed keys), so runs are
//! reproducible. Expired bindings are dropped lazily (on `modify` of their address-of-record)
//! or in bulk by [`purge_expired`](LocationStore::purge_expired); `lookup` never returns them.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, MutexGuard, PoisonError};

use holdline_base::Instant;

use crate::location::{Binding, LocationStore};

type Shard = HashMap<Box<[u8]>, Vec<Binding>>;

/// A sharded in-memory location store.
#[derive(Debug)]
pub struct MemoryLocationStore {
    shards: Box<[Mutex<Shard>]>,
}

impl MemoryLocationStore {
    /// The number of shards [`new`](Self::new) uses.
    pub const DEFAULT_SHARDS: usize = 16;

    /// An empty store with [`DEFAULT_SHARDS`](Self::DEFAULT_SHARDS) shards.
    pub fn new() -> Self {
        Self::with_shards(Self::DEFAULT_SHARDS)
    }

    /// An empty store with `shards` shards (at least one).
    pub fn with_shards(shards: usize) -> Self {
        Self {
            shards: (0..shards.max(1))
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
        }
    }

    /// The number of address-of-record entries stored (expired ones not yet purged included).
    pub fn aor_count(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }

    fn shard(&self, aor: &[u8]) -> MutexGuard<'_, Shard> {
        let mut h = DefaultHasher::new();
        aor.hash(&mut h);
        // The modulo keeps the index below the shard count, which fits in usize.
        let i = (h.finish() % self.shards.len() as u64) as usize;
        lock(&self.shards[i])
    }
}

impl Default for MemoryLocationStore {
    fn default() -> Self {
        Self::new()
    }
}

/// Locks a shard; a poisoned lock (a panic in another thread while it held the lock) still
/// guards consistent data because every mutation completes before the guard is dropped.
fn lock(m: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn live(b: &Binding, now: Instant) -> bool {
    b.expires_at > now
}

impl LocationStore for MemoryLocationStore {
    fn lookup(&self, aor: &[u8], now: Instant, out: &mut Vec<Binding>) -> usize {
        let shard = self.shard(aor);
        let Some(bindings) = shard.get(aor) else {
            return 0;
        };
        let before = out.len();
        out.extend(bindings.iter().filter(|b| live(b, now)).cloned());
        out.len() - before
    }

    fn modify(&self, aor: &[u8], now: Instant, f: &mut dyn FnMut(&mut Vec<Binding>)) {
        let mut shard = self.shard(aor);
        if let Some(bindings) = shard.get_mut(aor) {
            bindings.retain(|b| live(b, now));
            f(bindings);
            if bindings.is_empty() {
                shard.remove(aor);
            }
        } else {
            let mut bindings = Vec::new();
            f(&mut bindings);
            if !bindings.is_empty() {
                shard.insert(aor.into(), bindings);
            }
        }
    }

    fn purge_expired(&self, now: Instant) -> usize {
        let mut removed = 0;
        for s in &self.shards {
            let mut shard = lock(s);
            shard.retain(|_, bindings| {
                let before = bindings.len();
                bindings.retain(|b| live(b, now));
                removed += before - bindings.len();
                !bindings.is_empty()
            });
        }
        removed
    }

    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| lock(s).values().map(Vec::len).sum::<usize>())
            .sum()
    }

    fn list_aors(&self, prefix: &[u8], limit: usize, out: &mut Vec<Box<[u8]>>) -> bool {
        for s in &self.shards {
            let shard = lock(s);
            for aor in shard.keys().filter(|a| a.starts_with(prefix)) {
                if out.len() >= limit {
                    return true;
                }
                out.push(aor.clone());
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(contact: &str, expires_secs: u64) -> Binding {
        Binding {
            contact: contact.as_bytes().into(),
            expires_at: Instant::from_secs(expires_secs),
            q: 1000,
            call_id: b"c".as_slice().into(),
            cseq: 1,
            source: None,
        }
    }

    #[test]
    fn addresses_of_record_are_listed_by_prefix_up_to_the_limit() {
        let store = MemoryLocationStore::new();
        for aor in ["alice@a", "alan@a", "bob@a"] {
            store.modify(aor.as_bytes(), Instant::ZERO, &mut |b| {
                b.push(binding("sip:x@192.0.2.1", 60));
            });
        }
        let mut out = Vec::new();
        assert!(store.list_aors(b"al", 10, &mut out));
        out.sort();
        assert_eq!(
            out,
            [b"alan@a".as_slice().into(), b"alice@a".as_slice().into()] as [Box<[u8]>; 2]
        );
        let mut out = Vec::new();
        assert!(store.list_aors(b"", 2, &mut out));
        assert_eq!(out.len(), 2, "the limit holds");
    }

    #[test]
    fn modify_lookup_and_purge() {
        let store = MemoryLocationStore::with_shards(3);
        assert!(store.is_empty());
        store.modify(b"a@h", Instant::ZERO, &mut |v| {
            assert!(v.is_empty());
            v.push(binding("sip:a@1", 10));
            v.push(binding("sip:a@2", 20));
        });
        store.modify(b"b@h", Instant::ZERO, &mut |v| {
            v.push(binding("sip:b@1", 10))
        });
        assert_eq!(store.len(), 3);
        assert_eq!(store.aor_count(), 2);

        let mut out = Vec::new();
        assert_eq!(store.lookup(b"a@h", Instant::from_secs(5), &mut out), 2);
        out.clear();
        assert_eq!(store.lookup(b"a@h", Instant::from_secs(10), &mut out), 1);
        assert_eq!(&*out[0].contact, b"sip:a@2");
        assert_eq!(store.lookup(b"x@h", Instant::ZERO, &mut out), 0);

        // modify sees only live bindings and drops the expired ones.
        store.modify(b"a@h", Instant::from_secs(15), &mut |v| {
            assert_eq!(v.len(), 1);
        });
        assert_eq!(store.len(), 2);
        assert_eq!(store.purge_expired(Instant::from_secs(15)), 1);
        assert_eq!(store.aor_count(), 1);
        // An empty result removes the entry.
        store.modify(b"a@h", Instant::from_secs(15), &mut Vec::clear);
        assert!(store.is_empty());
        assert_eq!(store.aor_count(), 0);
    }
}
