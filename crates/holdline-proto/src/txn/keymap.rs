//! The matching-key index: [`KeyHash`] → transaction id, in 64 independently grown shards.
//!
//! A hash map grows by rehashing every entry at once. With a million lingering transactions
//! (one worker at 10,000 calls/s over UDP) one growth step of a single map stalled the worker
//! for tens of milliseconds, long enough for local overload control to see a queue and answer
//! hundreds of `503`s (issue 14's soak: bursts at the moments the key maps grew). Sharded by
//! the key's second hash word, a growth step rehashes 1/64 of the entries.

use std::collections::HashMap;

use super::{KeyHash, Spread};

const SHARDS: usize = 64;

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
        if let Some(m) = self.of_mut(&k) {
            m.insert(k, id);
        }
    }

    /// Inserts unless the key is there already.
    pub(super) fn insert_if_absent(&mut self, k: KeyHash, id: u64) {
        if let Some(m) = self.of_mut(&k) {
            m.entry(k).or_insert(id);
        }
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
}
