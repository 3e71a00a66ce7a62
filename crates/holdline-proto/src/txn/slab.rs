//! A slab of transactions addressed by generational ids.
//!
//! Entries live in fixed-size chunks, reused through a LIFO free list, so the memory a table
//! touches is its high-water mark of entries packed end to end (a hash map keyed by id spreads
//! the same entries over buckets at a load of 44-88% and touches every page of them), and a
//! lookup by id is an index and a generation check, not a hash. Growing adds a chunk: nothing
//! is ever moved (one `Vec` doubling from 44 to 88 MB stalled a worker for milliseconds). An id is
//! `generation << 32 | index`: a slot's generation grows each time the slot is freed, so an
//! id names one entry only and never a later one in the same slot. Generations use 31 bits
//! (the 64th is the client flag of the timer queues' raw ids) and start at 1, so 0 is never
//! an id.

#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

/// Generational slab (see the [module documentation](self)).
#[derive(Debug)]
pub(super) struct Slab<T> {
    /// Chunks of [`CHUNK`] slots (the last one may be shorter); slot `i` is
    /// `chunks[i / CHUNK][i % CHUNK]`.
    chunks: Vec<Vec<Slot<T>>>,
    /// Slots ever used.
    used: usize,
    free: Vec<u32>,
    len: usize,
}

/// Slots per chunk.
const CHUNK: usize = 4096;

const GENERATION_MASK: u32 = 0x7fff_ffff;

/// The slot index of `id`.
pub(super) fn index_of(id: u64) -> usize {
    split(id).0
}

fn split(id: u64) -> (usize, u32) {
    ((id & 0xffff_ffff) as usize, (id >> 32) as u32)
}

fn join(index: usize, generation: u32) -> u64 {
    (u64::from(generation) << 32) | index as u64
}

impl<T> Slab<T> {
    pub(super) fn new() -> Self {
        Self {
            chunks: Vec::new(),
            used: 0,
            free: Vec::new(),
            len: 0,
        }
    }

    fn slot(&self, i: usize) -> Option<&Slot<T>> {
        self.chunks.get(i / CHUNK)?.get(i % CHUNK)
    }

    fn slot_mut(&mut self, i: usize) -> Option<&mut Slot<T>> {
        self.chunks.get_mut(i / CHUNK)?.get_mut(i % CHUNK)
    }

    /// The number of entries.
    /// Every live entry, in slot order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks
            .iter()
            .flat_map(|c| c.iter())
            .filter_map(|s| s.value.as_ref())
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The id the next [`insert`](Self::insert) will return.
    pub(super) fn next_id(&self) -> u64 {
        match self.free.last() {
            Some(&i) => {
                let i = i as usize;
                join(i, self.slot(i).map_or(1, |s| s.generation))
            }
            None => join(self.used, 1),
        }
    }

    /// Stores `value`; returns its id ([`next_id`](Self::next_id) before the call).
    pub(super) fn insert(&mut self, value: T) -> u64 {
        if let Some(i) = self.free.pop() {
            let i = i as usize;
            if let Some(slot) = self.slot_mut(i) {
                slot.value = Some(value);
                let generation = slot.generation;
                self.len += 1;
                return join(i, generation);
            }
        }
        let i = self.used;
        // More than 2^32 live entries cannot be addressed; the tables' bounds stop far
        // below (an entry is over 100 bytes).
        assert!(i <= u32::MAX as usize, "slab full");
        if i.is_multiple_of(CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        if let Some(chunk) = self.chunks.last_mut() {
            chunk.push(Slot {
                generation: 1,
                value: Some(value),
            });
        }
        self.used += 1;
        self.len += 1;
        join(i, 1)
    }

    pub(super) fn get(&self, id: u64) -> Option<&T> {
        let (i, g) = split(id);
        let slot = self.slot(i)?;
        if slot.generation == g {
            slot.value.as_ref()
        } else {
            None
        }
    }

    pub(super) fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        let (i, g) = split(id);
        let slot = self.slot_mut(i)?;
        if slot.generation == g {
            slot.value.as_mut()
        } else {
            None
        }
    }

    /// The entry in slot `index`, whatever its generation.
    pub(super) fn at(&self, index: usize) -> Option<&T> {
        self.slot(index)?.value.as_ref()
    }

    /// The id of the entry in slot `index`, if there is one.
    pub(super) fn id_at(&self, index: usize) -> Option<u64> {
        let slot = self.slot(index)?;
        slot.value.as_ref().map(|_| join(index, slot.generation))
    }

    pub(super) fn contains(&self, id: u64) -> bool {
        self.get(id).is_some()
    }

    pub(super) fn remove(&mut self, id: u64) -> Option<T> {
        let (i, g) = split(id);
        let slot = self.slot_mut(i)?;
        if slot.generation != g {
            return None;
        }
        let value = slot.value.take()?;
        // The next generation, 1 after the largest (0 is never a generation).
        slot.generation = (slot.generation & GENERATION_MASK) % GENERATION_MASK + 1;
        self.len -= 1;
        self.free.push(i as u32);
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_not_reused_and_slots_are() {
        let mut s = Slab::new();
        let a = s.insert("a");
        let b = s.insert("b");
        assert_ne!(a, 0);
        assert_eq!(s.len(), 2);
        assert_eq!(s.remove(a), Some("a"));
        assert_eq!(s.get(a), None);
        assert_eq!(s.remove(a), None, "removed once");
        let next = s.next_id();
        let c = s.insert("c");
        assert_eq!(c, next);
        assert_ne!(c, a, "same slot, new generation");
        assert_eq!(c & 0xffff_ffff, a & 0xffff_ffff);
        assert_eq!(s.get(a), None, "the old id does not name the new entry");
        assert_eq!(s.get(c), Some(&"c"));
        assert_eq!(s.get_mut(b).map(|v| *v), Some("b"));
        assert!(s.contains(b) && !s.contains(a));
        assert_eq!(s.len(), 2);
        assert_eq!(s.get(u64::MAX), None);
    }

    #[test]
    fn entries_across_chunks() {
        let mut s = Slab::new();
        let ids: Vec<u64> = (0..3 * CHUNK + 5).map(|i| s.insert(i)).collect();
        assert_eq!(s.chunks.len(), 4);
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(s.get(*id), Some(&i));
        }
        assert_eq!(s.remove(ids[CHUNK]), Some(CHUNK));
        let again = s.insert(7);
        assert_eq!(
            again & 0xffff_ffff,
            CHUNK as u64,
            "the freed slot is reused"
        );
        assert_eq!(s.len(), 3 * CHUNK + 5);
        assert_eq!(s.chunks.len(), 4, "no new chunk");
    }

    #[test]
    fn generations_wrap_within_31_bits_and_skip_zero() {
        let mut s = Slab::new();
        let a = s.insert(1);
        if let Some(slot) = s.slot_mut(0) {
            slot.generation = GENERATION_MASK;
        }
        let top = join(0, GENERATION_MASK);
        assert_eq!(s.remove(top), Some(1));
        assert_eq!(s.next_id(), a, "back to generation 1");
        let b = s.insert(2);
        assert_eq!(b >> 63, 0);
        assert_eq!(s.get(b), Some(&2));
    }
}
