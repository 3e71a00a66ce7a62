//! Which worker owns a call: `hash(Call-ID) % workers`, with a fixed hash so that every
//! worker (and every test) computes the same owner. The server hands every message to the
//! worker that owns its Call-ID; a worker that starts a transaction of its own (an OPTIONS
//! probe) picks a Call-ID it owns, or the answer would go to another worker
//! ([`ProxyConfig::shard`](crate::ProxyConfig::shard)).

/// FNV-1a, 64-bit: fixed, fast on short keys, no per-process seed.
pub fn hash_call_id(call_id: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in call_id {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The worker that owns the call with this Call-ID.
pub fn shard_of(call_id: &[u8], workers: usize) -> usize {
    (hash_call_id(call_id) % workers.max(1) as u64) as usize
}

/// One worker's place among the server's workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// This worker, `0..workers`.
    pub index: usize,
    /// How many workers share the server's messages by Call-ID.
    pub workers: usize,
}

impl Shard {
    /// Whether this worker owns the call with this Call-ID.
    pub fn owns(&self, call_id: &[u8]) -> bool {
        shard_of(call_id, self.workers) == self.index
    }
}
