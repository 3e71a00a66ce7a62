//! [`TxnConfig`]: the timer base values and bounds of a [`Transactions`](super::Transactions)
//! table.

use holdline_base::Duration;
use holdline_sip::Limits;

/// Timer base values and bounds of the transaction layer (RFC 3261 §17, Table 4 of §A).
///
/// Every timer of §17 derives from these: A and E start at `t1` (doubling; E caps at `t2`),
/// G starts at `t1` and caps at `t2`, B, F, H, J, L and M are `64·t1`, I and K are `t4`, D is
/// [`timer_d`](Self::timer_d). Over reliable transports (TCP, TLS, SCTP) requests are not
/// retransmitted (no A, E) and the waits D, I, J and K are zero (the transaction ends at once).
///
/// Build one with [`TxnConfig::default`] and adjust it with the `&mut self` setters:
///
/// ```
/// use holdline_base::Duration;
/// use holdline_proto::txn::TxnConfig;
/// let mut config = TxnConfig::default();
/// config.t1(Duration::from_millis(250)).max_transactions(10_000);
/// assert_eq!(config.t2, Duration::from_secs(4));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TxnConfig {
    /// T1, the round-trip time estimate. Default 500 ms. Values below 1 ms are used as 1 ms.
    pub t1: Duration,
    /// T2, the longest retransmission interval of non-INVITE requests and INVITE final
    /// responses. Default 4 s. Values below T1 are used as T1.
    pub t2: Duration,
    /// T4, the longest time a message stays in the network (Timers I and K over UDP).
    /// Default 5 s.
    pub t4: Duration,
    /// Timer D, how long a client INVITE transaction absorbs retransmitted final responses
    /// over UDP. Default 32 s (RFC 3261 asks for at least 32 s).
    pub timer_d: Duration,
    /// The most transactions (client and server together, lingering ones included). When a
    /// new one would exceed it, lingering transactions (finished, only absorbing
    /// retransmissions) end early, oldest first; when only live ones are left, the new
    /// request is refused ([`RequestOutcome::TooMany`](super::RequestOutcome::TooMany),
    /// [`TxnError::TooMany`](super::TxnError::TooMany)). A request outside any dialog (no To
    /// tag, not a CANCEL) gets only 90% of it, keeping the rest for the requests of calls in
    /// progress. Default 4,000,000 (over UDP a completed call leaves about three transactions
    /// lingering for 32 s: Timers J, L, M); [`memory_budget`](Self::memory_budget) is usually
    /// the bound that applies.
    pub max_transactions: usize,
    /// The most memory the table may use, bytes, by its own estimate
    /// ([`Transactions::memory_bytes`](super::Transactions::memory_bytes): a fixed cost per
    /// transaction plus the messages kept for retransmission). Enforced like
    /// [`max_transactions`](Self::max_transactions). Default 1 GiB.
    pub memory_budget: usize,
    /// The parser limits applied to every message given to the table. Default
    /// [`Limits::DEFAULT`].
    pub limits: Limits,
    /// Seed of the hash function of the matching tables. The driver should draw it from its
    /// seeded [`Rng`](holdline_base::Rng) so that keys chosen by a peer cannot be made to
    /// collide. Default 0.
    pub hash_seed: u64,
}

impl Default for TxnConfig {
    fn default() -> Self {
        Self {
            t1: Duration::from_millis(500),
            t2: Duration::from_secs(4),
            t4: Duration::from_secs(5),
            timer_d: Duration::from_secs(32),
            max_transactions: 4_000_000,
            memory_budget: 1 << 30,
            limits: Limits::DEFAULT,
            hash_seed: 0,
        }
    }
}

impl TxnConfig {
    /// Sets [`t1`](Self::t1).
    pub fn t1(&mut self, t1: Duration) -> &mut Self {
        self.t1 = t1;
        self
    }

    /// Sets [`t2`](Self::t2).
    pub fn t2(&mut self, t2: Duration) -> &mut Self {
        self.t2 = t2;
        self
    }

    /// Sets [`t4`](Self::t4).
    pub fn t4(&mut self, t4: Duration) -> &mut Self {
        self.t4 = t4;
        self
    }

    /// Sets [`timer_d`](Self::timer_d).
    pub fn timer_d(&mut self, d: Duration) -> &mut Self {
        self.timer_d = d;
        self
    }

    /// Sets [`max_transactions`](Self::max_transactions).
    pub fn max_transactions(&mut self, n: usize) -> &mut Self {
        self.max_transactions = n;
        self
    }

    /// Sets [`memory_budget`](Self::memory_budget).
    pub fn memory_budget(&mut self, bytes: usize) -> &mut Self {
        self.memory_budget = bytes;
        self
    }

    /// Sets [`limits`](Self::limits).
    pub fn limits(&mut self, limits: Limits) -> &mut Self {
        self.limits = limits;
        self
    }

    /// Sets [`hash_seed`](Self::hash_seed).
    pub fn hash_seed(&mut self, seed: u64) -> &mut Self {
        self.hash_seed = seed;
        self
    }

    /// T1 as used: at least 1 ms, so that no timer can fire in a loop.
    pub(crate) fn eff_t1(&self) -> Duration {
        self.t1.max(Duration::from_millis(1))
    }

    /// T2 as used: at least T1.
    pub(crate) fn eff_t2(&self) -> Duration {
        self.t2.max(self.eff_t1())
    }

    /// 64·T1: Timers B, F, H, J, L, M.
    pub(crate) fn t1x64(&self) -> Duration {
        self.eff_t1().saturating_mul(64)
    }
}
