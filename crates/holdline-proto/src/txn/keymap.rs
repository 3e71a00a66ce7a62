//! The matching-key index: [`KeyHash`] → transaction, in 64 independently grown shards.
//!
//! The index stores only the transaction's slab index (4 bytes, plus hashbrown's control
//! byte): the key itself is in the transaction, which the index reads through [`Keys`] to
//! compare a hit and to rehash. A map from the 16-byte key to an 8-byte id took 25 bytes per
//! bucket, and at the fill that avoids growth under churn (below) that was about 80 of the
//! ≈ 320 bytes a lingering transaction cost (issue 14: the target is 256); now it is ≈ 15.
//!
//! A hash table grows by rehashing every entry at once. With a million lingering transactions
//! (one worker at 10,000 calls/s over UDP) one growth step of a single map stalled the worker
//! for tens of milliseconds, long enough for local overload control to see a queue and answer
//! hundreds of `503`s (issue 14's soak: bursts at the moments the key maps grew). Sharded by
//! the key's second hash word, a growth step rehashes 1/64 of the entries, and each shard
//! grows early at its own fill fraction, below one half ([`EarlyGrowth`]): the steps are
//! spread over the time the index takes to double (the shards grew within tens of
//! milliseconds of each other before: a 28 MB RSS step and ~3,000 `503`s at ≈48 s of 13,750
//! calls/s), and a shard reaches its final size while the load ramps up instead of doubling
//! again and again under churn (one worker's RSS rose by 13-19 MB a minute after 32 s in
//! issue 14's bench of 2026-11-25, and the index ended a quarter full).

use hashbrown::HashTable;
use hashbrown::hash_table::Entry as Slot;

use holdline_base::EarlyGrowth;

use super::KeyHash;

const SHARDS: usize = 64;

/// The top bit of an [`Entry`]: the transaction is indexed under its RFC 2543 ACK key.
const ACK_FLAG: u32 = 1 << 31;

/// Slab indexes an [`Entry`] can hold (the table's bounds stay below).
pub(super) const MAX_INDEX: usize = (ACK_FLAG - 1) as usize;

/// What the index stores: a slab index, and which of the transaction's keys it is under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Entry(u32);

impl Entry {
    /// The transaction at slab `index` under its main key; `None` past [`MAX_INDEX`].
    pub(super) fn main(index: usize) -> Option<Self> {
        u32::try_from(index)
            .ok()
            .filter(|&i| i & ACK_FLAG == 0)
            .map(Self)
    }

    /// The transaction at slab `index` under its RFC 2543 ACK key.
    pub(super) fn ack(index: usize) -> Option<Self> {
        Self::main(index).map(|e| Self(e.0 | ACK_FLAG))
    }

    /// The slab index.
    pub(super) fn index(self) -> usize {
        (self.0 & !ACK_FLAG) as usize
    }

    /// Whether this is the RFC 2543 ACK key.
    pub(super) fn is_ack(self) -> bool {
        self.0 & ACK_FLAG != 0
    }
}

/// Where the index reads an entry's key: the transactions' slab.
pub(super) trait Keys {
    /// The key `entry` is indexed under, `None` if its slot is empty.
    fn key_of(&self, entry: Entry) -> Option<KeyHash>;
}

fn hash(k: &KeyHash) -> u64 {
    // Already a keyed hash: the table uses one word of it as is, the shard another.
    k.0[0]
}

fn hasher(keys: &impl Keys) -> impl Fn(&Entry) -> u64 + '_ {
    // An entry whose transaction is gone cannot occur (a transaction leaves the index before
    // its slot is freed); were it to, it would only be misplaced, never matched wrongly.
    |e| keys.key_of(*e).map_or(0, |k| hash(&k))
}

/// One shard: the table and its growth state.
#[derive(Debug)]
struct Shard {
    table: HashTable<Entry>,
    growth: EarlyGrowth,
}

impl Shard {
    /// Inserts `entry` under `k`: replaces the entry there if `replace`, else keeps it.
    fn insert(&mut self, i: usize, k: &KeyHash, entry: Entry, replace: bool, keys: &impl Keys) {
        if let Some(n) = self
            .growth
            .reserve_before_insert(self.table.len(), i, SHARDS)
        {
            self.table.reserve(n, hasher(keys));
        }
        let found = self
            .table
            .entry(hash(k), |e| keys.key_of(*e) == Some(*k), hasher(keys));
        match found {
            Slot::Occupied(mut o) => {
                if replace {
                    *o.get_mut() = entry;
                }
            }
            Slot::Vacant(v) => {
                v.insert(entry);
            }
        }
        self.growth.note_capacity(self.table.capacity());
    }

    /// The bytes of the shard's buckets (entries and control bytes).
    fn bytes(&self) -> usize {
        self.growth.buckets() * (size_of::<Entry>() + 1)
    }
}

/// See the [module documentation](self).
#[derive(Debug)]
pub(super) struct KeyMap {
    shards: Vec<Shard>,
}

fn shard(k: &KeyHash) -> usize {
    (k.0[1] >> 58) as usize % SHARDS
}

impl KeyMap {
    pub(super) fn new() -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| Shard {
                    table: HashTable::new(),
                    growth: EarlyGrowth::new(),
                })
                .collect(),
        }
    }

    /// The entry indexed under `k`.
    pub(super) fn get(&self, k: &KeyHash, keys: &impl Keys) -> Option<Entry> {
        self.shards
            .get(shard(k))?
            .table
            .find(hash(k), |e| keys.key_of(*e) == Some(*k))
            .copied()
    }

    /// Indexes `entry` under `k` (a later transaction takes the key over).
    pub(super) fn insert(&mut self, k: &KeyHash, entry: Entry, keys: &impl Keys) {
        let i = shard(k);
        if let Some(s) = self.shards.get_mut(i) {
            s.insert(i, k, entry, true, keys);
        }
    }

    /// Indexes `entry` under `k` unless the key is there already.
    pub(super) fn insert_if_absent(&mut self, k: &KeyHash, entry: Entry, keys: &impl Keys) {
        let i = shard(k);
        if let Some(s) = self.shards.get_mut(i) {
            s.insert(i, k, entry, false, keys);
        }
    }

    /// Removes `entry` from under `k` if it is there (a later transaction may own the key).
    /// Reads no key: the transaction may have left its slot already.
    pub(super) fn remove_if(&mut self, k: &KeyHash, entry: Entry) {
        if let Some(s) = self.shards.get_mut(shard(k))
            && let Ok(o) = s.table.find_entry(hash(k), |e| *e == entry)
        {
            o.remove();
        }
    }

    /// Entries in all shards.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.table.len()).sum()
    }

    /// The bytes of the index's buckets: what it really holds, whatever its fill.
    pub(super) fn bytes(&self) -> usize {
        self.shards.iter().map(Shard::bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys by slab index, as a test's stand-in for the slab (ACK keys: the key's words
    /// swapped).
    struct Vk(Vec<Option<KeyHash>>);

    impl Keys for Vk {
        fn key_of(&self, e: Entry) -> Option<KeyHash> {
            let k = (*self.0.get(e.index())?)?;
            Some(if e.is_ack() {
                KeyHash([k.0[1], k.0[0]])
            } else {
                k
            })
        }
    }

    fn main(i: u64) -> Entry {
        Entry::main(i as usize).expect("a small index")
    }

    #[test]
    fn keys_in_every_shard_are_found_and_removed_only_by_their_owner() {
        let mut m = KeyMap::new();
        let mut vk = Vk((0..1000u64)
            .map(|i| Some(KeyHash::of(7, &i.to_le_bytes())))
            .collect());
        for i in 0..1000 {
            let k = vk.0[i as usize].expect("a key");
            m.insert(&k, main(i), &vk);
        }
        let used = m.shards.iter().filter(|s| !s.table.is_empty()).count();
        assert!(used > SHARDS / 2, "{used} shards used");
        for i in 0..1000 {
            assert_eq!(m.get(&vk.0[i as usize].expect("a key"), &vk), Some(main(i)));
        }
        let k0 = vk.0[0].expect("a key");
        // A second transaction with the same key: kept out by insert_if_absent, takes the
        // key over with insert.
        vk.0.push(Some(k0));
        m.insert_if_absent(&k0, main(1000), &vk);
        assert_eq!(m.get(&k0, &vk), Some(main(0)));
        m.insert(&k0, main(1000), &vk);
        assert_eq!(m.get(&k0, &vk), Some(main(1000)));
        m.remove_if(&k0, main(0));
        assert_eq!(m.get(&k0, &vk), Some(main(1000)), "not its owner");
        m.remove_if(&k0, main(1000));
        assert_eq!(m.get(&k0, &vk), None);
        // An ACK key is another entry of the same slot.
        let k5 = vk.0[5].expect("a key");
        let ack5 = KeyHash([k5.0[1], k5.0[0]]);
        let e = Entry::ack(5).expect("a key");
        m.insert_if_absent(&ack5, e, &vk);
        assert_eq!(m.get(&ack5, &vk), Some(e));
        assert_eq!(m.get(&k5, &vk), Some(main(5)));
        m.remove_if(&ack5, e);
        assert_eq!(m.get(&ack5, &vk), None);
        assert_eq!(m.get(&k5, &vk), Some(main(5)));
        // A key whose transaction left its slot is not found (it must leave the index first;
        // remove_if reads no key).
        vk.0[6] = None;
        assert_eq!(m.get(&KeyHash::of(7, &6u64.to_le_bytes()), &vk), None);
        assert_eq!(Entry::main(MAX_INDEX + 1), None);
    }

    /// The shards grow one at a time: while the index grows from 200k to 1M entries, no
    /// 20,000 inserts grow more than a few shards (the early-growth thresholds are spread
    /// over the whole doubling), where without the stagger all 64 shards grow within some
    /// 25,000 inserts of each other at 230k entries (their lengths differ by the hash's
    /// noise only).
    #[test]
    fn shards_grow_one_at_a_time() {
        let mut m = KeyMap::new();
        let mut vk = Vk(Vec::new());
        let mut caps: Vec<usize> = m.shards.iter().map(|s| s.table.capacity()).collect();
        let mut max_grown_in_window = 0;
        let mut grown_in_window = 0;
        for i in 0..1_000_000u64 {
            let k = KeyHash::of(3, &i.to_le_bytes());
            vk.0.push(Some(k));
            m.insert(&k, main(i), &vk);
            let mut grown = 0;
            for (s, c) in m.shards.iter().zip(caps.iter_mut()) {
                if s.table.capacity() > *c {
                    grown += 1;
                }
                *c = s.table.capacity();
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

    /// At a steady count (entries removed as fast as new ones come, as lingering transactions
    /// end while new ones start) a shard grows only if its own length reaches its threshold
    /// (the count per shard wanders by the hash's noise), never because tombstones filled it:
    /// those are cleared by rehashing in place. Before the thresholds were kept under one half
    /// (and measured against the buckets, not `capacity()`), shards kept doubling under churn
    /// until a quarter full: RSS that grew for minutes at a steady load.
    #[test]
    fn a_steady_count_grows_a_shard_only_past_its_threshold() {
        const LIVE: usize = 200_000;
        let mut m = KeyMap::new();
        // Slots reused like the slab's: transaction n lives in slot n % LIVE.
        let mut vk = Vk(vec![None; LIVE]);
        let key = |n: usize| KeyHash::of(11, &n.to_le_bytes());
        for n in 0..LIVE {
            vk.0[n] = Some(key(n));
            m.insert(&key(n), main(n as u64), &vk);
        }
        let after_ramp = m.bytes();
        let fulls: Vec<usize> = m.shards.iter().map(|s| s.growth.full()).collect();
        let mut longest: Vec<usize> = m.shards.iter().map(|s| s.table.len()).collect();
        for n in LIVE..LIVE * 12 {
            let slot = n % LIVE;
            m.remove_if(&key(n - LIVE), main(slot as u64));
            vk.0[slot] = Some(key(n));
            m.insert(&key(n), main(slot as u64), &vk);
            let s = shard(&key(n));
            longest[s] = longest[s].max(m.shards[s].table.len());
        }
        assert_eq!(m.len(), LIVE);
        for (i, (s, f)) in m.shards.iter().zip(&fulls).enumerate() {
            if s.growth.full() > *f {
                let threshold = *f as f64 * EarlyGrowth::threshold(i, SHARDS);
                assert!(
                    longest[i] as f64 >= threshold,
                    "shard {i} grew from {f} to {} at most {} long",
                    s.growth.full(),
                    longest[i]
                );
                assert!(
                    s.growth.full() <= 2 * f + 2,
                    "shard {i} grew more than once"
                );
            }
        }
        let after_churn = m.bytes();
        assert!(
            after_churn <= after_ramp + after_ramp / 5,
            "{after_ramp} -> {after_churn} bytes"
        );
        // Between an eighth and a half full: what the bytes gauge is worth.
        let per_entry = after_churn as f64 / LIVE as f64;
        let bucket = (size_of::<Entry>() + 1) as f64;
        assert!(
            (2.0 * bucket..=8.0 * bucket).contains(&per_entry),
            "{per_entry} bytes per entry"
        );
        for n in LIVE * 11..LIVE * 12 {
            assert_eq!(m.get(&key(n), &vk), Some(main((n % LIVE) as u64)));
        }
    }
}
