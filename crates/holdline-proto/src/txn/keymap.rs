//! The matching-key index: [`KeyHash`] → transaction id, in 64 independently grown shards.
//!
//! A hash map grows by rehashing every entry at once. With a million lingering transactions
//! (one worker at 10,000 calls/s over UDP) one growth step of a single map stalled the worker
//! for tens of milliseconds, long enough for local overload control to see a queue and answer
//! hundreds of `503`s (issue 14's soak: bursts at the moments the key maps grew). Sharded by
//! the key's second hash word, a growth step rehashes 1/64 of the entries.
//!
//! Sharding alone is not enough: the key hash spreads entries evenly, so the 64 shards hold
//! nearly the same number of entries and reach hashbrown's growth threshold within a few
//! hundred inserts of each other — the whole index was still rehashed within tens of
//! milliseconds (issue 14's soak, 2026-11-25: a 28 MB RSS step and ~3,000 `503`s at ≈48 s of
//! 13,750 calls/s). So each shard grows itself *early*, at its own fill fraction of its
//! capacity (shard `i` at `0.45 + 0.4·i/64`): the growth steps are spread evenly over the
//! whole time the index takes to double, one shard (1/64 of the entries, well under a
//! millisecond at a million entries) at a time.

use std::collections::HashMap;

use super::{KeyHash, Spread};

const SHARDS: usize = 64;

/// Below this many entries a shard grows when hashbrown decides (a rehash is cheap). Small,
/// so that the shards fall out of step (the first early growths come together) while tiny.
const EARLY_GROWTH_MIN: usize = 64;

/// Shard `i` grows once its length reaches `capacity · (GROW_LOW + GROW_SPAN · i / SHARDS)`.
const GROW_LOW: f64 = 0.45;
const GROW_SPAN: f64 = 0.4;

/// See the [module documentation](self).
#[derive(Debug)]
pub(super) struct KeyMap {
    shards: Vec<HashMap<KeyHash, u64, Spread>>,
}

fn shard(k: &KeyHash) -> usize {
    (k.0[1] >> 58) as usize % SHARDS
}

impl KeyMap {
    pub(super) fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| HashMap::with_hasher(Spread)).collect(),
        }
    }

    fn of(&self, k: &KeyHash) -> Option<&HashMap<KeyHash, u64, Spread>> {
        self.shards.get(shard(k))
    }

    fn of_mut(&mut self, k: &KeyHash) -> Option<&mut HashMap<KeyHash, u64, Spread>> {
        self.shards.get_mut(shard(k))
    }

    pub(super) fn get(&self, k: &KeyHash) -> Option<u64> {
        self.of(k)?.get(k).copied()
    }

    pub(super) fn contains_key(&self, k: &KeyHash) -> bool {
        self.get(k).is_some()
    }

    pub(super) fn insert(&mut self, k: KeyHash, id: u64) {
        let i = shard(&k);
        if let Some(m) = self.shards.get_mut(i) {
            grow_early(m, i);
            m.insert(k, id);
        }
    }

    /// Inserts unless the key is there already.
    pub(super) fn insert_if_absent(&mut self, k: KeyHash, id: u64) {
        let i = shard(&k);
        if let Some(m) = self.shards.get_mut(i) {
            grow_early(m, i);
            m.entry(k).or_insert(id);
        }
    }

    /// Entries in all shards.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(HashMap::len).sum()
    }

    /// Removes `k` if it names transaction `id` (a later transaction may own the key).
    pub(super) fn remove_if(&mut self, k: &KeyHash, id: u64) {
        if let Some(m) = self.of_mut(k)
            && m.get(k) == Some(&id)
        {
            m.remove(k);
        }
    }
}

/// Grows shard `i` (doubling it, or rehashing it in place when tombstones are what filled
/// it) once it is fuller than its own threshold; see the [module documentation](self).
fn grow_early(m: &mut HashMap<KeyHash, u64, Spread>, i: usize) {
    let len = m.len();
    if len < EARLY_GROWTH_MIN {
        return;
    }
    let threshold = m.capacity() as f64 * (GROW_LOW + GROW_SPAN * i as f64 / SHARDS as f64);
    if len as f64 >= threshold {
        m.reserve(len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_in_every_shard_are_found_and_removed_only_by_their_owner() {
        let mut m = KeyMap::new();
        let keys: Vec<KeyHash> = (0..1000u64)
            .map(|i| KeyHash::of(7, &i.to_le_bytes()))
            .collect();
        for (i, k) in keys.iter().enumerate() {
            m.insert(*k, i as u64);
        }
        let used = m.shards.iter().filter(|s| !s.is_empty()).count();
        assert!(used > SHARDS / 2, "{used} shards used");
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(m.get(k), Some(i as u64));
        }
        m.insert_if_absent(keys[0], 99);
        assert_eq!(m.get(&keys[0]), Some(0));
        m.remove_if(&keys[0], 5);
        assert!(m.contains_key(&keys[0]), "not its owner");
        m.remove_if(&keys[0], 0);
        assert!(!m.contains_key(&keys[0]));
    }

    /// The shards grow one at a time: while the index grows from 200k to 1M entries, no
    /// 20,000 inserts grow more than a few shards (measured: at most 9; the early-growth
    /// thresholds are spread over the whole doubling), where without the stagger all 64
    /// shards grow within some 25,000 inserts of each other at 230k entries (their lengths
    /// differ by the hash's noise only).
    #[test]
    fn shards_grow_one_at_a_time() {
        let mut m = KeyMap::new();
        let mut caps: Vec<usize> = m.shards.iter().map(HashMap::capacity).collect();
        let mut max_grown_in_window = 0;
        let mut grown_in_window = 0;
        for i in 0..1_000_000u64 {
            m.insert(KeyHash::of(3, &i.to_le_bytes()), i);
            let mut grown = 0;
            for (s, c) in m.shards.iter().zip(caps.iter_mut()) {
                if s.capacity() > *c {
                    grown += 1;
                }
                *c = s.capacity();
            }
            grown_in_window += grown;
            if i % 20_000 == 19_999 {
                if i > 200_000 {
                    max_grown_in_window = max_grown_in_window.max(grown_in_window);
                }
                grown_in_window = 0;
            }
        }
        assert_eq!(m.len(), 1_000_000);
        assert!(
            max_grown_in_window <= 14,
            "{max_grown_in_window} shards grew within 20,000 inserts"
        );
    }
}
