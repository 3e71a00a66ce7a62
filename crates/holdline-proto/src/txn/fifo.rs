//! A FIFO queue in fixed-size chunks, for the end-timer queues.
//!
//! A `VecDeque` doubles its buffer when it fills: a queue of a million timer entries that
//! crosses a power of two takes 16 MB more at once and copies its contents (the 10,000
//! calls/s soak showed the step in the server's RSS, 32 MB, well after the load was steady).
//! Here memory follows the length in steps of one chunk, and nothing is ever moved.

use std::collections::VecDeque;

/// Entries per chunk.
const CHUNK: usize = 4096;

/// See the [module documentation](self).
#[derive(Debug)]
pub(super) struct ChunkQueue<T> {
    /// Full chunks and the last, partly filled one; the first has had `head` entries taken.
    chunks: VecDeque<Vec<T>>,
    head: usize,
    /// One emptied chunk kept for the next push (no allocation churn at a chunk boundary).
    spare: Option<Vec<T>>,
    len: usize,
}

impl<T> Default for ChunkQueue<T> {
    fn default() -> Self {
        Self {
            chunks: VecDeque::new(),
            head: 0,
            spare: None,
            len: 0,
        }
    }
}

impl<T: Copy> ChunkQueue<T> {
    #[cfg(test)]
    fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(super) fn push_back(&mut self, v: T) {
        if self.chunks.back().is_none_or(|c| c.len() == CHUNK) {
            let mut c = self.spare.take().unwrap_or_default();
            c.clear();
            c.reserve_exact(CHUNK);
            self.chunks.push_back(c);
        }
        if let Some(c) = self.chunks.back_mut() {
            c.push(v);
            self.len += 1;
        }
    }

    pub(super) fn front(&self) -> Option<&T> {
        self.chunks.front()?.get(self.head)
    }

    pub(super) fn pop_front(&mut self) -> Option<T> {
        let v = *self.front()?;
        self.head += 1;
        self.len -= 1;
        let drained = self
            .chunks
            .front()
            .is_some_and(|c| self.head >= c.len() && (c.len() == CHUNK || self.len == 0));
        if drained {
            self.spare = self.chunks.pop_front();
            self.head = 0;
        }
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_in_first_out_across_chunks() {
        let mut q = ChunkQueue::default();
        assert!(q.is_empty());
        let n = 3 * CHUNK + 17;
        for i in 0..n {
            q.push_back(i);
        }
        assert_eq!(q.len(), n);
        assert_eq!(q.chunks.len(), 4);
        for i in 0..CHUNK + 1 {
            assert_eq!(q.front(), Some(&i));
            assert_eq!(q.pop_front(), Some(i));
        }
        assert_eq!(q.chunks.len(), 3, "a drained chunk is released");
        // Interleaved pushes and pops keep the order.
        for i in n..n + 2 * CHUNK {
            q.push_back(i);
            let _ = q.pop_front();
        }
        let rest: Vec<usize> = std::iter::from_fn(|| q.pop_front()).collect();
        let start = CHUNK + 1 + 2 * CHUNK;
        assert_eq!(rest, (start..n + 2 * CHUNK).collect::<Vec<_>>());
        assert!(q.is_empty());
        assert_eq!(q.front(), None);
        // Empty, then used again.
        q.push_back(7);
        assert_eq!(q.pop_front(), Some(7));
        assert_eq!(q.pop_front(), None);
    }
}
