//! Admitted calls first on stream transports: new INVITEs wait for idle time.
//!
//! Over TCP (or any stream) a server cannot reject what it has not read, and what it reads it
//! must handle in order. Seed 000 shows what follows: a server that takes new INVITEs as fast
//! as any other message admits calls it cannot finish, their responses, ACKs and BYEs queue
//! behind more INVITEs, and goodput collapses. Its remedy lives at the *sender*: smart
//! forwarding rejects a new INVITE when the connection to the next hop has unsent bytes. That
//! works only if the receiver reads new INVITEs no faster than it completes calls, so that an
//! overloaded receiver's connections back up.
//!
//! A [`DeferQueue`] makes a server read that way. The driver puts a new INVITE read from a
//! stream into the queue and stops reading that stream; the INVITE is released
//!
//! - as [`Release::Admit`] when the driver reports the server *idle* (a pass of its event loop
//!   found nothing else to handle): messages of admitted calls — responses, ACK, BYE, CANCEL,
//!   requests with a To tag — always go first, and the stream is read again only after the
//!   INVITE has been handled;
//! - as [`Release::Reject`] (503) when it has waited [`DeferConfig::max_wait`] without the
//!   server ever becoming idle: the bound on how long a stream (and the ACKs and BYEs queued
//!   on it behind the INVITE) can be held.
//!
//! Items leave in arrival order, so the streams of several upstream servers take turns: each
//! has at most one INVITE in the queue, and each gets the same share of the idle time (seed
//! 000's fairness across SEs: *service-provider-centric*, l. 410). With
//! [`DeferFairness::Offered`] the idle time is shared instead in proportion to a weight per
//! stream (*end-user-centric* fairness: each upstream's share follows the load it is
//! offered, which the upstream tells; see [`OfferedRate`]): stride scheduling over the
//! streams with an item waiting, the stream with the smallest pass first, a stream's pass
//! growing by `1 / weight` per release and starting no lower than the last release's pass
//! when it comes back (so a stream gains nothing by having been away).
//!
//! With [`DeferFairness::Poll`] the queue *polls* (seed 000's poll-based model, l. 383, for
//! many upstream servers). A stream whose every message so far was a new INVITE (the driver
//! says so: an upstream's ECS INVITE connection) starts *open*; once it has been open for a
//! quantum, its next INVITE *closes* it when the open streams keep the server behind (their
//! oldest INVITE waiting has waited a fifth of `max_wait`): that INVITE stays in the queue,
//! the stream is not read, and its receive window stays shut, so its upstream's smart
//! forwarding rejects what it is offered meanwhile, and one stream fewer is open. When the
//! server is not behind but a closed stream waits, the stream whose quantum is over gives
//! its turn to the closed one waiting longest (round robin). Only the INVITEs of open
//! streams are served. When the server has been idle with none of them waiting for
//! `open_after`, the closed stream whose INVITE has waited longest is opened too.
//! An INVITE that waited [`DeferConfig::max_wait`] is rejected when its turn comes (stale),
//! so the calls admitted are the fresh ones of the few open streams, and their delay no
//! longer grows with the number of upstreams (with equal shares every INVITE waits for one
//! of every other upstream); a closed stream is held at most `max_hold`. The price is an
//! INVITE or two per turn, stale when the stream is opened again. Streams that carry
//! anything else (an ICS connection with ACKs and BYEs behind the INVITE) are never closed:
//! they are served as with [`DeferFairness::Equal`]. A server that keeps up closes nothing,
//! and the queue behaves as with equal shares.
//!
//! ```text
//!  stream ─read─> new INVITE? ──yes──> DeferQueue (stream paused) ──idle──> handle, resume
//!                     │                         └──waited max_wait──> 503, resume
//!                     └──no──> handle now (admitted calls first)
//! ```
//!
//! The queue is generic over what the driver stores (the message bytes and where they came
//! from in the server; an event in a simulator) and takes time as an argument.

use std::collections::{HashMap, VecDeque};

use holdline_base::{Duration, Instant};

use crate::admission::{RejectReason, Rejection};

/// Settings of a [`DeferQueue`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeferConfig {
    /// The longest a new INVITE waits for idle time before it is rejected with 503.
    pub max_wait: Duration,
    /// `Retry-After` of those 503s (`None`: none).
    pub retry_after: Option<Duration>,
    /// How idle time is shared among the streams.
    pub fairness: DeferFairness,
}

impl Default for DeferConfig {
    /// 250 ms: well under T1 (500 ms), the interval at which a UAS retransmits a 200 OK whose
    /// ACK is late, so the ACKs queued behind a held INVITE arrive in time; equal shares.
    fn default() -> Self {
        Self {
            max_wait: Duration::from_millis(250),
            retry_after: None,
            fairness: DeferFairness::Equal,
        }
    }
}

/// How a [`DeferQueue`] shares idle time among streams (seed 000, l. 410).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeferFairness {
    /// Arrival order: every stream with an INVITE waiting gets the same share
    /// (service-provider-centric).
    #[default]
    Equal,
    /// In proportion to each stream's weight, the load its upstream says it is offered
    /// (end-user-centric); a stream that tells nothing weighs the mean of those that do.
    Offered,
    /// Poll-based (seed 000, l. 383): INVITE-only streams are served a quantum at a time,
    /// the others held closed (see the module documentation).
    Poll {
        /// How long an opened stream stays open at least (closed at its first INVITE after
        /// this, when the server is behind or a closed stream waits).
        quantum: Duration,
        /// The longest an INVITE of a closed stream waits before it is rejected anyway.
        max_hold: Duration,
        /// How long the server must have been idle with nothing of an open stream waiting
        /// before it opens a closed one (a short gap between the open streams' INVITEs is
        /// no reason to open one more: every stream opened adds to the delay of the others).
        open_after: Duration,
    },
}

impl DeferFairness {
    /// Poll-based with a quantum of 500 ms, a hold of at most 5 s, and a stream opened after
    /// 10 ms of idleness.
    pub const POLL: Self = Self::Poll {
        quantum: Duration::from_millis(500),
        max_hold: Duration::from_secs(5),
        open_after: Duration::from_millis(10),
    };
}

/// What leaves a [`DeferQueue`].
#[derive(Debug, PartialEq, Eq)]
pub enum Release<T> {
    /// Handle it now: the server was idle.
    Admit(T),
    /// Answer it with this rejection: it waited too long.
    Reject(T, Rejection),
}

/// Counts of a [`DeferQueue`] since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeferStats {
    /// Items queued.
    pub deferred: u64,
    /// Items released for handling.
    pub admitted: u64,
    /// Items released for rejection (waited [`DeferConfig::max_wait`]).
    pub rejected: u64,
    /// Total time items waited before release.
    pub wait: Duration,
    /// The longest queue seen.
    pub max_len: usize,
    /// Streams opened ([`DeferFairness::Poll`]).
    pub opened: u64,
}

/// Streams whose pass is remembered, at most (beyond it, those at or below the last
/// release's pass are forgotten: they would restart there anyway).
const MAX_FLOWS: usize = 4096;

/// One waiting item.
#[derive(Debug)]
struct Waiting<T> {
    since: Instant,
    item: T,
    flow: u64,
    /// Its stream may be closed ([`DeferFairness::Poll`]).
    pollable: bool,
}

/// New INVITEs waiting for an idle server (see the module documentation).
#[derive(Debug)]
pub struct DeferQueue<T> {
    config: DeferConfig,
    items: VecDeque<Waiting<T>>,
    stats: DeferStats,
    /// [`DeferFairness::Offered`]: each stream's pass and last weight told.
    flows: HashMap<u64, Flow>,
    /// The pass of the last release.
    vtime: f64,
    /// [`DeferFairness::Poll`]: the open streams, with when each was opened.
    open: HashMap<u64, Instant>,
    /// [`DeferFairness::Poll`]: the streams closed (the others are open or new).
    closed: std::collections::HashSet<u64>,
    /// [`DeferFairness::Poll`]: since when the server has been idle with nothing of an open
    /// stream waiting.
    starved_since: Option<Instant>,
}

/// A stream's stride-scheduling state.
#[derive(Clone, Copy, Debug, Default)]
struct Flow {
    pass: f64,
    weight: Option<f64>,
}

impl<T> DeferQueue<T> {
    /// An empty queue.
    pub fn new(config: DeferConfig) -> Self {
        Self {
            config,
            items: VecDeque::new(),
            stats: DeferStats::default(),
            flows: HashMap::new(),
            vtime: 0.0,
            open: HashMap::new(),
            closed: std::collections::HashSet::new(),
            starved_since: None,
        }
    }

    /// Queues `item`, read at `now` from stream `flow`, whose upstream says it is offered
    /// `weight` (calls/s; `None`: it says nothing). With [`DeferFairness::Equal`] the flow
    /// and weight are ignored: the same as [`push`](Self::push).
    pub fn push_from(&mut self, now: Instant, item: T, flow: u64, weight: Option<f64>) {
        self.push_stream(now, item, flow, weight, false);
    }

    /// [`push_from`](Self::push_from), and whether the stream may be closed: every message
    /// read from it so far was a new INVITE (with [`DeferFairness::Poll`]; ignored
    /// otherwise). A new stream is opened here, and an open one whose quantum is over is
    /// closed if others compete (or stays open for another quantum).
    pub fn push_stream(
        &mut self,
        now: Instant,
        item: T,
        flow: u64,
        weight: Option<f64>,
        pollable: bool,
    ) {
        let pollable = pollable && matches!(self.config.fairness, DeferFairness::Poll { .. });
        if let DeferFairness::Poll { quantum, .. } = self.config.fairness
            && pollable
        {
            match self.open.get(&flow) {
                None if !self.closed.contains(&flow) => self.open_stream(flow, now, false),
                Some(&t) if now.saturating_duration_since(t) >= quantum => {
                    // The open streams keep the server behind when their oldest INVITE has
                    // waited a fifth of max_wait: then this one is closed and there is one
                    // stream fewer. Else, when a closed stream waits, its turn comes: the
                    // one waiting longest is opened and this one closed.
                    let behind = self
                        .items
                        .iter()
                        .find(|w| self.eligible(w))
                        .is_some_and(|w| {
                            now.saturating_duration_since(w.since) >= self.config.max_wait / 5
                        });
                    let next = self
                        .items
                        .iter()
                        .find(|w| w.pollable && w.flow != flow && self.closed.contains(&w.flow))
                        .map(|w| w.flow);
                    if behind || next.is_some() {
                        self.open.remove(&flow);
                        if self.closed.len() >= MAX_FLOWS {
                            self.closed.clear();
                        }
                        self.closed.insert(flow);
                        if let Some(next) = next.filter(|_| !behind) {
                            self.open_stream(next, now, true);
                        }
                    } else {
                        self.open.insert(flow, now);
                    }
                }
                _ => {}
            }
        }
        if self.config.fairness == DeferFairness::Offered {
            if self.flows.len() >= MAX_FLOWS && !self.flows.contains_key(&flow) {
                let vtime = self.vtime;
                self.flows.retain(|_, f| f.pass > vtime);
            }
            let f = self.flows.entry(flow).or_default();
            if let Some(w) = weight.filter(|w| w.is_finite() && *w > 0.0) {
                f.weight = Some(w.clamp(1e-3, 1e9));
            }
        }
        self.items.push_back(Waiting {
            since: now,
            item,
            flow,
            pollable,
        });
        self.stats.deferred += 1;
        self.stats.max_len = self.stats.max_len.max(self.items.len());
    }

    /// The weight of `flow`: what it said last, else the mean of what the waiting streams
    /// said, else 1.
    fn weight(&self, flow: u64) -> f64 {
        if let Some(w) = self.flows.get(&flow).and_then(|f| f.weight) {
            return w;
        }
        let (sum, n) = self
            .items
            .iter()
            .filter_map(|w| self.flows.get(&w.flow).and_then(|f| f.weight))
            .fold((0.0, 0u32), |(s, n), w| (s + w, n + 1));
        if n == 0 { 1.0 } else { sum / f64::from(n) }
    }

    /// Index of the item to release when idle: the oldest ([`DeferFairness::Equal`]), or the
    /// oldest of the stream with the smallest pass.
    fn next_index(&self) -> usize {
        match self.config.fairness {
            DeferFairness::Equal => return 0,
            DeferFairness::Poll { .. } => {
                // The oldest of an open stream; else the oldest (its stream to be opened).
                return self
                    .items
                    .iter()
                    .position(|w| self.eligible(w))
                    .unwrap_or(0);
            }
            DeferFairness::Offered => {}
        }
        let mut best = (f64::INFINITY, 0);
        for (i, w) in self.items.iter().enumerate() {
            let pass = self
                .flows
                .get(&w.flow)
                .map_or(self.vtime, |f| f.pass.max(self.vtime));
            if pass < best.0 {
                best = (pass, i);
            }
        }
        best.1
    }

    /// Whether `w` may be served now: its stream is open or cannot be closed.
    fn eligible(&self, w: &Waiting<T>) -> bool {
        !w.pollable || !self.closed.contains(&w.flow)
    }

    /// Opens `flow` at `now` (counted when it had been closed).
    fn open_stream(&mut self, flow: u64, now: Instant, reopened: bool) {
        if self.open.len() >= MAX_FLOWS {
            self.open.clear();
        }
        self.open.insert(flow, now);
        if reopened {
            self.closed.remove(&flow);
            self.stats.opened += 1;
        }
    }

    /// How long `w` may wait before a busy server rejects it.
    fn bound(&self, w: &Waiting<T>) -> Duration {
        match self.config.fairness {
            DeferFairness::Poll { max_hold, .. } if !self.eligible(w) => {
                max_hold.max(self.config.max_wait)
            }
            _ => self.config.max_wait,
        }
    }

    /// The index of the first item (oldest first) that has waited its bound at `now`.
    fn overdue(&self, now: Instant) -> Option<usize> {
        if !matches!(self.config.fairness, DeferFairness::Poll { .. }) {
            let oldest = self.items.front()?.since;
            return (now.saturating_duration_since(oldest) >= self.config.max_wait).then_some(0);
        }
        self.items
            .iter()
            .position(|w| now.saturating_duration_since(w.since) >= self.bound(w))
    }

    /// The settings.
    pub const fn config(&self) -> &DeferConfig {
        &self.config
    }

    /// Queues `item`, read at `now`.
    pub fn push(&mut self, now: Instant, item: T) {
        self.push_from(now, item, u64::MAX, None);
    }

    /// The next item to release at `now`, if any: when `idle` (the server found nothing else
    /// to do) the next by the fairness (the oldest one with [`DeferFairness::Equal`]),
    /// admitted; while busy the oldest one once it has waited `max_wait`, rejected; `None`
    /// while the server is busy and nothing has waited that long.
    pub fn poll(&mut self, now: Instant, idle: bool) -> Option<Release<T>> {
        if self.items.is_empty() {
            return None;
        }
        let i = if idle {
            let i = self.next_index();
            if let DeferFairness::Poll { open_after, .. } = self.config.fairness {
                if self.items.get(i).is_some_and(|w| self.eligible(w)) {
                    self.starved_since = None;
                } else {
                    // Nothing of an open stream waits: open a closed one only once the
                    // server has been idle for `open_after`.
                    let since = *self.starved_since.get_or_insert(now);
                    if now.saturating_duration_since(since) < open_after {
                        return None;
                    }
                    self.starved_since = None;
                }
            }
            i
        } else {
            self.overdue(now)?
        };
        let Waiting {
            since,
            item,
            flow,
            pollable,
        } = self.items.remove(i)?;
        let waited = now.saturating_duration_since(since);
        self.stats.wait += waited;
        let mut stale = false;
        if let DeferFairness::Poll { .. } = self.config.fairness {
            if pollable && self.closed.contains(&flow) {
                // Its turn: the stream is opened (read again after this release).
                self.open_stream(flow, now, true);
            }
            // What waited its whole bound (while its stream was closed) is stale.
            stale = waited >= self.config.max_wait;
        }
        if idle && !stale {
            if self.config.fairness == DeferFairness::Offered {
                let weight = self.weight(flow);
                let f = self.flows.entry(flow).or_default();
                let start = f.pass.max(self.vtime);
                f.pass = start + 1.0 / weight;
                self.vtime = start;
            }
            self.stats.admitted += 1;
            Some(Release::Admit(item))
        } else {
            self.stats.rejected += 1;
            Some(Release::Reject(
                item,
                Rejection::service_unavailable(RejectReason::DeferTimeout, self.config.retry_after),
            ))
        }
    }

    /// When the oldest item will have waited `max_wait` (`None` when empty): the driver
    /// must call [`poll`](Self::poll) by then even if the server is busy.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let deadline = |w: &Waiting<T>| {
            w.since
                .checked_add(self.bound(w))
                .unwrap_or(Instant::from_nanos(u64::MAX))
        };
        if let DeferFairness::Poll { open_after, .. } = self.config.fairness {
            // Only closed streams wait: one is to be opened `open_after` into the idleness
            // (which an idle poll starts counting: at once when it has not yet).
            let open = self
                .items
                .front()
                .filter(|_| self.items.iter().all(|w| !self.eligible(w)))
                .map(|w| {
                    self.starved_since
                        .and_then(|t| t.checked_add(open_after))
                        .unwrap_or(w.since)
                });
            return self.items.iter().map(deadline).chain(open).min();
        }
        self.items.front().map(deadline)
    }

    /// When the oldest waiting item that may be served was queued (`None` when none): with
    /// [`DeferFairness::Poll`] the INVITEs of closed streams do not count (they wait by
    /// design, not for want of idle time).
    pub fn oldest_since(&self) -> Option<Instant> {
        if matches!(self.config.fairness, DeferFairness::Poll { .. }) {
            return self
                .items
                .iter()
                .find(|w| self.eligible(w))
                .map(|w| w.since);
        }
        self.items.front().map(|w| w.since)
    }

    /// Streams open now ([`DeferFairness::Poll`]; a stream gone for good counts until
    /// the table is cleared at its bound).
    pub fn open_streams(&self) -> usize {
        self.open.len()
    }

    /// Whether an item waits that an idle server would take now (any, except the INVITEs of
    /// closed streams with [`DeferFairness::Poll`]): while only those wait, the driver may
    /// sleep until [`poll_timeout`](Self::poll_timeout).
    pub fn has_ready(&self) -> bool {
        if matches!(self.config.fairness, DeferFairness::Poll { .. }) {
            return self.items.iter().any(|w| self.eligible(w));
        }
        !self.items.is_empty()
    }

    /// Items waiting.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The counts so far.
    pub const fn stats(&self) -> &DeferStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    fn queue() -> DeferQueue<u32> {
        DeferQueue::new(DeferConfig {
            max_wait: Duration::from_millis(100),
            retry_after: None,
            fairness: DeferFairness::Equal,
        })
    }

    fn weighted() -> DeferQueue<u32> {
        DeferQueue::new(DeferConfig {
            max_wait: Duration::from_millis(100),
            retry_after: None,
            fairness: DeferFairness::Offered,
        })
    }

    /// Streams `0..weights.len()` each with one item waiting, re-queued as soon as released
    /// (saturated upstreams): how many releases each gets out of `n`.
    fn shares(q: &mut DeferQueue<u32>, weights: &[Option<f64>], n: u64) -> Vec<u64> {
        for (s, w) in weights.iter().enumerate() {
            q.push_from(ms(0), s as u32, s as u64, *w);
        }
        let mut got = vec![0u64; weights.len()];
        for t in 1..=n {
            let Some(Release::Admit(s)) = q.poll(ms(t), true) else {
                panic!("idle release expected");
            };
            got[s as usize] += 1;
            q.push_from(ms(t), s, u64::from(s), weights[s as usize]);
        }
        got
    }

    #[test]
    fn offered_fairness_shares_in_proportion_to_the_weights() {
        // Seed 000's Fig. 36 load, 3:2:1, all three saturating the server.
        let got = shares(
            &mut weighted(),
            &[Some(300.0), Some(200.0), Some(100.0)],
            600,
        );
        assert_eq!(got, [300, 200, 100]);
        // Equal fairness ignores the weights: the same load, equal shares.
        let got = shares(&mut queue(), &[Some(300.0), Some(200.0), Some(100.0)], 600);
        assert_eq!(got, [200, 200, 200]);
    }

    #[test]
    fn a_silent_stream_weighs_the_mean_of_the_others() {
        let got = shares(&mut weighted(), &[Some(30.0), None, Some(10.0)], 800);
        // Weights 30, 20 (the mean), 10: shares 1/2, 1/3, 1/6.
        for (g, want) in got.iter().zip([400.0, 266.7, 133.3]) {
            assert!((*g as f64 - want).abs() <= 2.0, "{got:?}");
        }
    }

    #[test]
    fn a_stream_gains_nothing_by_being_away() {
        // Stream 1 waits nothing for a while; when it comes back it does not get the turns
        // it missed in a burst: it takes its share from then on.
        let mut q = weighted();
        q.push_from(ms(0), 0, 0, Some(1.0));
        for t in 1..=100 {
            let Some(Release::Admit(0)) = q.poll(ms(t), true) else {
                panic!("stream 0 alone");
            };
            q.push_from(ms(t), 0, 0, Some(1.0));
        }
        q.push_from(ms(100), 1, 1, Some(1.0));
        let mut order = Vec::new();
        for t in 101..=106 {
            let Some(Release::Admit(s)) = q.poll(ms(t), true) else {
                panic!("idle release expected");
            };
            order.push(s);
            q.push_from(ms(t), s, u64::from(s), Some(1.0));
        }
        let ones = order.iter().filter(|&&s| s == 1).count();
        assert!(
            (2..=4).contains(&ones),
            "alternating, not a burst: {order:?}"
        );
    }

    #[test]
    fn deadlines_still_reject_the_oldest_first_with_weights() {
        let mut q = weighted();
        q.push_from(ms(0), 7, 0, Some(1.0));
        q.push_from(ms(50), 8, 1, Some(1000.0));
        assert!(matches!(
            q.poll(ms(100), false),
            Some(Release::Reject(7, _))
        ));
        assert_eq!(q.poll_timeout(), Some(ms(150)));
    }

    #[test]
    fn idle_releases_oldest_first() {
        let mut q = queue();
        q.push(ms(0), 1);
        q.push(ms(5), 2);
        assert_eq!(q.poll(ms(10), false), None, "busy: nothing released early");
        assert_eq!(q.poll(ms(10), true), Some(Release::Admit(1)));
        assert_eq!(q.poll(ms(11), true), Some(Release::Admit(2)));
        assert_eq!(q.poll(ms(12), true), None);
        let s = q.stats();
        assert_eq!(
            (s.deferred, s.admitted, s.rejected, s.max_len),
            (2, 2, 0, 2)
        );
        assert_eq!(s.wait, Duration::from_millis(16));
    }

    #[test]
    fn a_busy_server_rejects_what_waited_max_wait() {
        let mut q = queue();
        q.push(ms(0), 7);
        q.push(ms(60), 8);
        assert_eq!(q.poll_timeout(), Some(ms(100)));
        assert_eq!(q.poll(ms(99), false), None);
        match q.poll(ms(100), false) {
            Some(Release::Reject(7, r)) => {
                assert_eq!(r.status, 503);
                assert_eq!(r.reason, RejectReason::DeferTimeout);
                assert_eq!(r.retry_after, None);
            }
            other => panic!("expected a rejection of 7, got {other:?}"),
        }
        // The next one has its own deadline.
        assert_eq!(q.poll_timeout(), Some(ms(160)));
        assert_eq!(q.poll(ms(120), false), None);
        // Idle wins over the deadline: a late but idle release is admitted.
        assert_eq!(q.poll(ms(500), true), Some(Release::Admit(8)));
        assert_eq!(q.poll_timeout(), None);
        assert_eq!((q.stats().admitted, q.stats().rejected), (1, 1));
    }

    fn polled() -> DeferQueue<u32> {
        DeferQueue::new(DeferConfig {
            max_wait: Duration::from_millis(100),
            retry_after: None,
            fairness: DeferFairness::Poll {
                quantum: Duration::from_millis(50),
                max_hold: Duration::from_millis(1000),
                open_after: Duration::from_millis(2),
            },
        })
    }

    #[test]
    fn poll_closes_a_stream_after_its_quantum_when_others_compete() {
        let mut q = polled();
        // New streams start open: served in arrival order.
        for s in 0..3u32 {
            q.push_stream(ms(0), s, s.into(), None, true);
        }
        for (t, s) in [(1, 0), (2, 1), (3, 2)] {
            assert_eq!(q.poll(ms(t), true), Some(Release::Admit(s)));
        }
        assert_eq!((q.open_streams(), q.stats().opened), (3, 0));
        // Quantum over, nobody else waiting: stream 0 stays open.
        q.push_stream(ms(60), 10, 0, None, true);
        // Quantum over, and stream 0's INVITE has waited max_wait / 5: the server is behind,
        // so streams 1 and 2 are closed, and nobody takes their turns.
        q.push_stream(ms(81), 11, 1, None, true);
        q.push_stream(ms(82), 12, 2, None, true);
        assert_eq!(q.stats().opened, 0);
        assert_eq!(q.oldest_since(), Some(ms(60)));
        assert_eq!(q.poll(ms(83), true), Some(Release::Admit(10)));
        // Only closed streams wait: one is opened after `open_after` (2 ms) of idleness,
        // the one waiting longest first.
        assert!(!q.has_ready());
        assert_eq!(q.oldest_since(), None, "closed streams do not count");
        assert_eq!(q.poll(ms(84), true), None);
        assert_eq!(q.poll_timeout(), Some(ms(86)));
        assert_eq!(q.poll(ms(85), true), None);
        assert_eq!(q.poll(ms(86), true), Some(Release::Admit(11)));
        assert_eq!(q.poll(ms(87), true), None);
        assert_eq!(q.poll(ms(89), true), Some(Release::Admit(12)));
        assert_eq!(q.stats().opened, 2);
        // Behind again: streams 1 and 2 closed.
        q.push_stream(ms(140), 20, 0, None, true);
        q.push_stream(ms(161), 21, 1, None, true);
        q.push_stream(ms(162), 22, 2, None, true);
        assert_eq!(q.poll(ms(163), true), Some(Release::Admit(20)));
        // Not behind, closed streams waiting: stream 0's quantum is over, so its turn
        // passes to stream 1 (waiting longest), and an open stream goes before the older
        // INVITE of a closed one.
        q.push_stream(ms(200), 23, 0, None, true);
        assert_eq!(q.stats().opened, 3);
        assert_eq!(q.poll(ms(201), true), Some(Release::Admit(21)));
        assert_eq!(q.poll(ms(202), true), None);
        assert_eq!(q.poll(ms(204), true), Some(Release::Admit(22)));
        assert_eq!(q.poll(ms(205), true), None);
        assert_eq!(q.poll(ms(207), true), Some(Release::Admit(23)));
        assert_eq!(q.stats().opened, 5);
    }

    #[test]
    fn poll_rejects_what_went_stale_while_its_stream_was_closed() {
        let mut q = polled();
        for s in 1..=2u32 {
            q.push_stream(ms(0), s, s.into(), None, true);
            assert_eq!(q.poll(ms(s.into()), true), Some(Release::Admit(s)));
        }
        q.push_stream(ms(100), 3, 1, None, true);
        // Stream 1's INVITE has waited max_wait / 5: the server is behind, stream 2 closed.
        q.push_stream(ms(121), 4, 2, None, true);
        // A busy server: the open stream's INVITE gets max_wait, the closed one's max_hold
        // (its window stays shut meanwhile).
        assert_eq!(q.poll_timeout(), Some(ms(200)));
        assert_eq!(q.poll(ms(150), false), None);
        assert!(matches!(
            q.poll(ms(200), false),
            Some(Release::Reject(3, _))
        ));
        // Only a closed stream waits now: the driver is due for an idle poll at once (the
        // idleness before a stream is opened is counted from there), else it would sleep
        // until the hold ends.
        assert_eq!(q.poll_timeout(), Some(ms(121)));
        assert_eq!(q.poll(ms(300), false), None, "busy: held");
        // Idle: its turn comes, and the INVITE that waited 250 ms is stale: 503.
        assert_eq!(q.poll(ms(350), true), None);
        assert_eq!(q.poll_timeout(), Some(ms(352)));
        assert!(matches!(
            q.poll(ms(352), true),
            Some(Release::Reject(4, r)) if r.reason == RejectReason::DeferTimeout
        ));
        assert_eq!(q.stats().opened, 1);
        // What comes next on it is fresh: admitted.
        q.push_stream(ms(353), 5, 2, None, true);
        assert_eq!(q.poll(ms(354), true), Some(Release::Admit(5)));
        // A closed stream is held max_hold at most, even by a server never idle.
        q.push_stream(ms(500), 6, 1, None, true);
        q.push_stream(ms(521), 7, 2, None, true);
        assert_eq!(q.poll_timeout(), Some(ms(600)));
        assert!(matches!(
            q.poll(ms(600), false),
            Some(Release::Reject(6, _))
        ));
        assert_eq!(q.poll_timeout(), Some(ms(521)));
        assert_eq!(q.poll(ms(1520), false), None);
        assert!(matches!(
            q.poll(ms(1521), false),
            Some(Release::Reject(7, _))
        ));
        assert_eq!(q.stats().opened, 2);
        assert_eq!((q.stats().admitted, q.stats().rejected), (3, 4));
    }

    #[test]
    fn poll_never_closes_a_stream_that_carries_other_messages() {
        let mut q = polled();
        // Stream 5 is ICS (ACKs and BYEs behind its INVITEs), stream 1 an INVITE connection.
        q.push_stream(ms(0), 50, 5, None, false);
        q.push_stream(ms(0), 10, 1, None, true);
        assert_eq!(q.poll(ms(1), true), Some(Release::Admit(50)));
        assert_eq!(q.poll(ms(2), true), Some(Release::Admit(10)));
        // After the quantum, with the server behind, stream 1 is closed; stream 5 never is.
        q.push_stream(ms(100), 51, 5, None, false);
        q.push_stream(ms(121), 11, 1, None, true);
        q.push_stream(ms(122), 52, 5, None, false);
        assert_eq!(q.poll(ms(123), true), Some(Release::Admit(51)));
        assert_eq!(q.poll(ms(124), true), Some(Release::Admit(52)));
        assert_eq!(q.poll(ms(125), true), None);
        assert_eq!(q.poll(ms(127), true), Some(Release::Admit(11)));
        // The other fairness modes ignore the flag.
        let mut q = queue();
        q.push_stream(ms(0), 1, 1, None, true);
        q.push_stream(ms(500), 2, 1, None, true);
        assert_eq!(q.poll_timeout(), Some(ms(100)));
        assert!(matches!(
            q.poll(ms(100), false),
            Some(Release::Reject(1, _))
        ));
        assert_eq!(q.stats().opened, 0);
    }

    /// `n` saturated upstream streams (a fresh INVITE as soon as a stream is read again) and
    /// a server that takes `service` ms per admitted INVITE and nothing per rejection, for
    /// `horizon` ms: the waits of the INVITEs admitted after the first second, and each
    /// stream's admissions.
    fn saturated(
        q: &mut DeferQueue<u32>,
        n: u32,
        service: u64,
        horizon: u64,
    ) -> (Vec<u64>, Vec<u64>) {
        for s in 0..n {
            q.push_stream(ms(0), s, s.into(), None, true);
        }
        let (mut waits, mut per) = (Vec::new(), vec![0u64; n as usize]);
        let mut t = 0;
        while t < horizon {
            let since = q.oldest_since();
            match q.poll(ms(t), true) {
                Some(Release::Admit(s)) => {
                    let queued =
                        since.map_or(0, |x| ms(t).saturating_duration_since(x).as_millis());
                    if t >= 1000 {
                        waits.push(queued as u64);
                    }
                    per[s as usize] += 1;
                    t += service;
                    q.push_stream(ms(t), s, s.into(), None, true);
                }
                Some(Release::Reject(s, _)) => q.push_stream(ms(t), s, s.into(), None, true),
                // Idle, waiting to open a stream.
                None => t += 1,
            }
        }
        (waits, per)
    }

    #[test]
    fn polling_keeps_the_delay_of_admitted_calls_independent_of_the_upstreams() {
        for n in [10u32, 30, 100] {
            // Equal shares: every INVITE waits for one of each other stream (n ms).
            let (waits, _) = saturated(&mut queue(), n, 1, 20_000);
            let equal = waits.iter().sum::<u64>() as f64 / waits.len() as f64;
            assert!(
                equal >= 0.95 * f64::from(n - 1),
                "{n} streams, equal: mean wait {equal}"
            );
            // Polling: the admitted ones are those of the open streams, fewer as soon as
            // they keep the server behind (max_wait / 5 = 20 ms).
            let mut q = polled();
            let (mut waits, per) = saturated(&mut q, n, 1, 100_000);
            waits.sort_unstable();
            let p99 = waits[waits.len() * 99 / 100];
            let mean = waits.iter().sum::<u64>() as f64 / waits.len() as f64;
            // Never worse than equal shares; and once the open streams alone would keep the
            // server behind (30 and 100 streams here), served at once.
            assert!(
                mean <= equal + 1.0,
                "{n} streams, poll: mean {mean} vs {equal}"
            );
            if n >= 30 {
                assert!(p99 <= 1, "{n} streams, poll: p99 {p99} ms, mean {mean}");
            }
            // Every stream gets its turns: shares within 10% of even.
            let even = per.iter().sum::<u64>() as f64 / f64::from(n);
            for (s, &k) in per.iter().enumerate() {
                assert!(
                    (k as f64 - even).abs() <= 0.1 * even,
                    "{n} streams, poll: stream {s} got {k} of {even:.0} ({per:?})"
                );
            }
            // The price: at most one stale INVITE per turn and `open_after` of idleness, so
            // the server stays busy with admissions.
            let st = q.stats();
            assert!(st.rejected <= st.opened, "{st:?}");
            assert!(st.admitted >= 90_000, "{st:?}");
        }
    }

    #[test]
    fn streams_take_turns() {
        // Three upstream streams, each with one INVITE queued at a time, re-queued as soon as
        // the previous one is released: releases cycle through them in order.
        let mut q = queue();
        for s in 0..3u32 {
            q.push(ms(0), s);
        }
        let mut order = Vec::new();
        for t in 1..=9u64 {
            let Some(Release::Admit(s)) = q.poll(ms(t), true) else {
                panic!("idle release expected");
            };
            order.push(s);
            q.push(ms(t), s);
        }
        assert_eq!(order, [0, 1, 2, 0, 1, 2, 0, 1, 2]);
        assert_eq!(q.len(), 3);
        assert_eq!(q.stats().max_len, 3);
    }
}
