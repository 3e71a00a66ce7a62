//! The registrar's durable store in simulation: a [`LocationStore`] whose commits the
//! simulator completes (it owns time), with the committed contents kept across a crash.
//!
//! It follows `holdline-store`'s persistent store in commit mode (`durability = "commit"`):
//! reads and writes go to memory; a `modify` marks its address-of-record dirty;
//! [`commit_ticket`](LocationStore::commit_ticket) returns the batch after the one started
//! last and asks for it (group commit); a batch takes the dirty addresses-of-record as they
//! are when it starts and, once the simulator says it committed, they are durable and
//! [`committed`](LocationStore::committed) reaches its id. A crash loses memory, the dirty
//! set and the batch in flight (unless told it reached the disk); a restart loads the
//! durable contents, expired bindings dropped, as `PersistentStore::open` does.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

use holdline_base::Instant;
use holdline_proto::{Binding, LocationStore};

type Aor = Box<[u8]>;

/// What a batch writes: per address-of-record its bindings (empty: the record deleted).
type Records = Vec<(Aor, Vec<Binding>)>;

#[derive(Default)]
struct State {
    /// What the server reads and writes.
    live: BTreeMap<Aor, Vec<Binding>>,
    /// Addresses-of-record changed since the batch that took them last.
    dirty: BTreeSet<Aor>,
    /// What a restart loads.
    durable: BTreeMap<Aor, Vec<Binding>>,
    /// The id of the last batch started, and the last committed.
    started: u64,
    committed: u64,
    /// The highest ticket asked for.
    wanted: u64,
    /// The batch in flight: its id and the records it writes (empty: deleted).
    inflight: Option<(u64, Records)>,
}

/// See the module documentation.
#[derive(Default)]
pub struct SimStore {
    s: Mutex<State>,
}

impl std::fmt::Debug for SimStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("SimStore")
            .field("live", &s.live.len())
            .field("durable", &s.durable.len())
            .field("started", &s.started)
            .field("committed", &s.committed)
            .finish_non_exhaustive()
    }
}

impl SimStore {
    fn lock(&self) -> MutexGuard<'_, State> {
        // One thread: a poisoned lock only follows a panic that already failed the run.
        self.s
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts the next batch when one was asked for and none is in flight; returns its id.
    pub fn start_batch(&self) -> Option<u64> {
        let mut s = self.lock();
        if s.inflight.is_some() || s.wanted <= s.started {
            return None;
        }
        s.started += 1;
        let id = s.started;
        let dirty = std::mem::take(&mut s.dirty);
        let records = dirty
            .into_iter()
            .map(|aor| {
                let b = s.live.get(&aor).cloned().unwrap_or_default();
                (aor, b)
            })
            .collect();
        s.inflight = Some((id, records));
        Some(id)
    }

    /// Batch `id` committed: its records are durable. False when it is not the batch in
    /// flight (lost to a crash).
    pub fn complete_batch(&self, id: u64) -> bool {
        let mut s = self.lock();
        if s.inflight.as_ref().is_none_or(|(i, _)| *i != id) {
            return false;
        }
        if let Some((id, records)) = s.inflight.take() {
            apply(&mut s.durable, records);
            s.committed = id;
        }
        true
    }

    /// The process died: memory, the dirty set and the batch in flight are gone (with
    /// `inflight_survives`, the batch in flight committed just before).
    pub fn crash(&self, inflight_survives: bool) {
        let mut s = self.lock();
        if let Some((id, records)) = s.inflight.take()
            && inflight_survives
        {
            apply(&mut s.durable, records);
            s.committed = id;
        }
        s.live.clear();
        s.dirty.clear();
        // Tickets keep counting from what is on disk (`committed` never decreases).
        s.started = s.committed;
        s.wanted = s.committed;
    }

    /// The disk is gone too: nothing committed is left (a restart without its store).
    pub fn wipe(&self) {
        self.lock().durable.clear();
    }

    /// The process starts again: memory loaded from the durable contents, bindings expired
    /// at `now` dropped. Returns how many bindings were loaded.
    pub fn restart(&self, now: Instant) -> usize {
        let mut s = self.lock();
        let mut live = BTreeMap::new();
        let mut n = 0;
        for (aor, bindings) in &s.durable {
            let b: Vec<Binding> = bindings
                .iter()
                .filter(|b| b.expires_at > now)
                .cloned()
                .collect();
            if !b.is_empty() {
                n += b.len();
                live.insert(aor.clone(), b);
            }
        }
        s.live = live;
        n
    }

    /// The binding of `aor` to `contact` the server holds now (expired or not), if any.
    pub fn live_binding(&self, aor: &[u8], contact: &[u8]) -> Option<Binding> {
        let s = self.lock();
        s.live
            .get(aor)?
            .iter()
            .find(|b| &*b.contact == contact)
            .cloned()
    }

    /// Bindings on disk (expired ones included).
    pub fn durable_len(&self) -> usize {
        self.lock().durable.values().map(Vec::len).sum()
    }
}

fn apply(durable: &mut BTreeMap<Aor, Vec<Binding>>, records: Records) {
    for (aor, b) in records {
        if b.is_empty() {
            durable.remove(&aor);
        } else {
            durable.insert(aor, b);
        }
    }
}

impl LocationStore for SimStore {
    fn lookup(&self, aor: &[u8], now: Instant, out: &mut Vec<Binding>) -> usize {
        let s = self.lock();
        let before = out.len();
        if let Some(b) = s.live.get(aor) {
            out.extend(b.iter().filter(|b| b.expires_at > now).cloned());
        }
        out.len() - before
    }

    fn modify(&self, aor: &[u8], now: Instant, f: &mut dyn FnMut(&mut Vec<Binding>)) {
        let mut s = self.lock();
        let mut b = s.live.remove(aor).unwrap_or_default();
        b.retain(|b| b.expires_at > now);
        f(&mut b);
        if !b.is_empty() {
            s.live.insert(aor.into(), b);
        }
        s.dirty.insert(aor.into());
    }

    fn purge_expired(&self, now: Instant) -> usize {
        let mut s = self.lock();
        let mut n = 0;
        let mut dirty = Vec::new();
        s.live.retain(|aor, b| {
            let before = b.len();
            b.retain(|b| b.expires_at > now);
            if b.len() != before {
                n += before - b.len();
                dirty.push(aor.clone());
            }
            !b.is_empty()
        });
        s.dirty.extend(dirty);
        n
    }

    fn len(&self) -> usize {
        self.lock().live.values().map(Vec::len).sum()
    }

    fn commit_ticket(&self) -> Option<u64> {
        let mut s = self.lock();
        let t = s.started + 1;
        s.wanted = s.wanted.max(t);
        Some(t)
    }

    fn committed(&self) -> u64 {
        self.lock().committed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdline_base::Duration;

    fn binding(contact: &str, expires_s: u64) -> Binding {
        Binding {
            contact: contact.as_bytes().into(),
            expires_at: Instant::from_secs(expires_s),
            q: 1000,
            call_id: b"c".as_slice().into(),
            cseq: 1,
            source: None,
        }
    }

    fn put(s: &SimStore, aor: &str, contact: &str) -> u64 {
        s.modify(aor.as_bytes(), Instant::ZERO, &mut |b| {
            b.push(binding(contact, 100))
        });
        s.commit_ticket().expect("tickets")
    }

    #[test]
    fn a_change_is_durable_only_once_its_batch_committed() {
        let s = SimStore::default();
        let t = put(&s, "a@x", "sip:a@h");
        assert_eq!(t, 1);
        assert!(s.committed() < t);
        let id = s.start_batch().expect("asked for");
        assert_eq!(s.start_batch(), None, "one batch at a time");
        // Changed while batch 1 is in flight: ticket 2, the next batch.
        assert_eq!(put(&s, "b@x", "sip:b@h"), 2);
        assert!(s.complete_batch(id));
        assert_eq!(s.committed(), 1);
        assert_eq!(s.durable_len(), 1);
        // A crash now loses b: it was never in a batch.
        s.crash(false);
        assert_eq!(s.restart(Instant::from_secs(1)), 1);
        assert!(s.live_binding(b"a@x", b"sip:a@h").is_some());
        assert!(s.live_binding(b"b@x", b"sip:b@h").is_none());
    }

    #[test]
    fn the_batch_in_flight_is_lost_or_kept_by_a_crash_and_expired_bindings_are_not_loaded() {
        for survives in [false, true] {
            let s = SimStore::default();
            put(&s, "a@x", "sip:a@h");
            let id = s.start_batch().expect("batch");
            s.crash(survives);
            assert!(!s.complete_batch(id), "its completion comes too late");
            assert_eq!(s.restart(Instant::ZERO), usize::from(survives));
            assert_eq!(s.committed(), u64::from(survives));
            // Tickets go on from what is committed.
            assert_eq!(put(&s, "c@x", "sip:c@h"), s.committed() + 1);
        }
        let s = SimStore::default();
        put(&s, "a@x", "sip:a@h");
        let id = s.start_batch().expect("batch");
        assert!(s.complete_batch(id));
        s.crash(false);
        assert_eq!(s.restart(Instant::ZERO + Duration::from_secs(100)), 0);
    }
}
