//! The location service's contract: where the registrar writes bindings and where the proxy
//! looks them up (RFC 3261 §10, §16.5).
//!
//! The trait takes `&self` so that one store can be shared by every worker of a server
//! (implementations use sharded locks or lock-free maps, never one global lock), and so that
//! the registrar's read-modify-write of one address-of-record is a single atomic call
//! ([`LocationStore::modify`]). Time is `holdline_base::Instant` from the caller: a persistent
//! backend converts it to wall-clock time when it writes and back when it loads.

use holdline_base::{Instant, Peer};

/// One registered contact of an address-of-record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The contact URI as registered, without angle brackets (e.g. `sip:bob@192.0.2.4:5060`):
    /// where requests for the address-of-record are forwarded.
    pub contact: Box<[u8]>,
    /// When the binding expires.
    pub expires_at: Instant,
    /// Preference, in thousandths (`q=0.5` is 500; absent means 1000).
    pub q: u16,
    /// The Call-ID of the REGISTER that created or last refreshed the binding (§10.3 step 7).
    pub call_id: Box<[u8]>,
    /// The CSeq number of that REGISTER.
    pub cseq: u32,
    /// Where that REGISTER came from (address, transport, connection): lets the proxy reach a
    /// contact behind NAT or over the registering connection.
    pub source: Option<Peer>,
}

/// Storage of bindings by address-of-record.
///
/// Address-of-record keys are canonical bytes built by the registrar (`user@host`, host in
/// lower case, no port unless non-default, no parameters). Implementations must be cheap to
/// read from many threads at once; writes may be persisted behind the caller's back (write-
/// behind), but a lookup after a `modify` always sees the modification. A store that can say
/// when a change is on disk issues [`commit_ticket`](LocationStore::commit_ticket)s: the
/// registrar holds a REGISTER's 200 until its change is committed (`durability = "commit"`).
pub trait LocationStore: Send + Sync {
    /// Appends to `out` the bindings of `aor` that have not expired at `now`, and returns how
    /// many it appended.
    fn lookup(&self, aor: &[u8], now: Instant, out: &mut Vec<Binding>) -> usize;

    /// Whether `aor` has a binding that has not expired at `now` (the admission gate's
    /// question: is a REGISTER a refresh or a new registration?). The default looks up;
    /// stores override it without copying the bindings.
    fn has_bindings(&self, aor: &[u8], now: Instant) -> bool {
        self.lookup(aor, now, &mut Vec::new()) > 0
    }

    /// Applies `f` to the bindings of `aor` (expired ones already removed; empty if the
    /// address-of-record is unknown) atomically with respect to other calls for the same
    /// address-of-record, and stores the result (an empty result removes the entry).
    fn modify(&self, aor: &[u8], now: Instant, f: &mut dyn FnMut(&mut Vec<Binding>));

    /// Removes every binding expired at `now`; returns how many were removed.
    fn purge_expired(&self, now: Instant) -> usize;

    /// How many parts [`purge_part`](Self::purge_part) splits the store into, so that a
    /// periodic purge can walk it one part at a time instead of stalling its caller for the
    /// whole store (a million bindings: 33 ms at once). 1: no split.
    fn purge_parts(&self) -> usize {
        1
    }

    /// Removes the bindings expired at `now` in part `part` (of [`purge_parts`](Self::purge_parts));
    /// returns how many were removed. The default purges everything.
    fn purge_part(&self, now: Instant, part: usize) -> usize {
        let _ = part;
        self.purge_expired(now)
    }

    /// The number of bindings currently stored (expired ones not yet purged included).
    fn len(&self) -> usize;

    /// The ticket to wait on before promising that the changes this thread's `modify` calls
    /// made so far are durable: they are once [`committed`](Self::committed) reaches it.
    /// `None` when the store makes no such promise — in memory only, or a persistent store
    /// in write-behind mode — so a change is as durable as it will get once `modify`
    /// returns. Asking for a ticket may start a commit (group commit: one commit covers
    /// every change made before it started). Call it after the `modify`.
    fn commit_ticket(&self) -> Option<u64> {
        None
    }

    /// The highest ticket whose changes are durable ([`u64::MAX`] for a store that issues
    /// none). Never decreases.
    fn committed(&self) -> u64 {
        u64::MAX
    }

    /// Appends to `out` the addresses-of-record that start with `prefix` and have a stored
    /// binding (expired ones not yet purged included), at most `limit` of them, in no
    /// particular order; returns `false` when the store cannot list its keys (the default),
    /// for the control interface's `bindings list`.
    fn list_aors(&self, prefix: &[u8], limit: usize, out: &mut Vec<Box<[u8]>>) -> bool {
        let _ = (prefix, limit, out);
        false
    }

    /// Whether no binding is stored.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
