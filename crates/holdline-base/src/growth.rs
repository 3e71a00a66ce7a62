//! Staggered early growth for sharded hash tables, so that no single insert stalls for long.
//!
//! A hash table grows by rehashing every entry at once. Sharding a big table bounds one step
//! to one shard, but a good hash spreads entries evenly, so all shards reach their growth
//! threshold within a few hundred inserts of each other and the whole table is still rehashed
//! within milliseconds (issue 14: a million transaction keys; issue 21: a million
//! registrations, whose 64-shard store stalled an insert for 5 ms at 900,000). So each shard
//! grows itself *early*, at its own fill fraction of its bucket capacity — shard `i` of `n`
//! at `1/4 + 1/4 · i/n` — which spreads the shards' growth steps evenly over the time the
//! table takes to double.
//!
//! The fractions stay under one half for a reason: when entries are removed as new ones
//! come, their tombstones use up a table's growth margin, and hashbrown (std's `HashMap`)
//! then rehashes it in place if it is at most half full, else *doubles* it. Grown below one
//! half, a shard reaches its final size while its count ramps up and is only ever rehashed
//! in place afterwards; grown above (or measured against `capacity()`, which tombstones
//! shrink), it keeps doubling at a steady count (issue 14: RSS growing for minutes).
//!
//! The helper does not own the table; the caller asks it before each insert how much to
//! reserve, and tells it the table's `capacity()` after:
//!
//! ```
//! use std::collections::HashMap;
//! use holdline_base::EarlyGrowth;
//!
//! let (mut map, mut growth) = (HashMap::new(), EarlyGrowth::new());
//! for k in 0..10_000u32 {
//!     if let Some(n) = growth.reserve_before_insert(map.len(), 3, 64) {
//!         map.reserve(n);
//!     }
//!     map.insert(k, ());
//!     growth.note_capacity(map.capacity());
//! }
//! assert!(map.len() * 2 <= growth.full());
//! ```

/// Below this many entries a shard grows when the table decides (a rehash is cheap). Small,
/// so that the shards fall out of step (the first early growths come together) while tiny.
const EARLY_GROWTH_MIN: usize = 64;

/// The growth state of one shard (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EarlyGrowth {
    /// The table's `capacity()` right after its last growth or in-place rehash. `capacity()`
    /// itself is entries plus growth margin, which tombstones shrink; it never exceeds this.
    full: usize,
}

impl EarlyGrowth {
    /// A shard whose table is empty and unallocated.
    pub const fn new() -> Self {
        Self { full: 0 }
    }

    /// The fill fraction at which shard `i` of `shards` grows: in `[1/4, 1/2)`.
    pub fn threshold(i: usize, shards: usize) -> f64 {
        0.25 + 0.25 * i as f64 / shards.max(1) as f64
    }

    /// Before inserting into shard `i` of `shards`, whose table holds `len` entries: the
    /// number to `reserve` so that the table doubles now, or `None`. The amount exceeds both
    /// the growth margin and half the buckets, so that the table resizes to the next power of
    /// two instead of rehashing in place.
    pub fn reserve_before_insert(&self, len: usize, i: usize, shards: usize) -> Option<usize> {
        if len < EARLY_GROWTH_MIN || (len as f64) < self.full as f64 * Self::threshold(i, shards) {
            return None;
        }
        Some(self.full + 1 - len.min(self.full))
    }

    /// After an insert (or a reserve): the table's `capacity()`.
    pub fn note_capacity(&mut self, capacity: usize) {
        self.full = self.full.max(capacity);
    }

    /// The entries the table's buckets hold when free of tombstones (7/8 of the buckets).
    pub fn full(&self) -> usize {
        self.full
    }

    /// The table's buckets (a power of two; 0 before the first allocation), for memory
    /// accounting: hashbrown keeps one control byte per bucket beside the entry.
    pub fn buckets(&self) -> usize {
        match self.full {
            0 => 0,
            f if f < 8 => f + 1,
            f => (f * 8 / 7).next_power_of_two(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn a_shard_grows_at_its_own_threshold_and_stays_under_half_full() {
        for i in [0, 31, 63] {
            let (mut map, mut g) = (HashMap::new(), EarlyGrowth::new());
            let mut grown_at = Vec::new();
            for k in 0..100_000u64 {
                let before = g.full();
                if let Some(n) = g.reserve_before_insert(map.len(), i, 64) {
                    map.reserve(n);
                }
                map.insert(k, ());
                g.note_capacity(map.capacity());
                if g.full() > before && map.len() > 4 * EARLY_GROWTH_MIN {
                    grown_at.push(map.len() as f64 / before as f64);
                }
                if map.len() > EARLY_GROWTH_MIN {
                    assert!(map.len() * 2 <= g.full() + 1, "over half full at {k}");
                }
            }
            assert!(!grown_at.is_empty());
            let t = EarlyGrowth::threshold(i, 64);
            for f in grown_at {
                assert!((f - t).abs() < 0.01, "shard {i} grew at {f}, not {t}");
            }
            assert!(g.buckets().is_power_of_two());
        }
    }
}
