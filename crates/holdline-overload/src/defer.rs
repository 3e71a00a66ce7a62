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
        }
    }

    /// Queues `item`, read at `now` from stream `flow`, whose upstream says it is offered
    /// `weight` (calls/s; `None`: it says nothing). With [`DeferFairness::Equal`] the flow
    /// and weight are ignored: the same as [`push`](Self::push).
    pub fn push_from(&mut self, now: Instant, item: T, flow: u64, weight: Option<f64>) {
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
        if self.config.fairness == DeferFairness::Equal {
            return 0;
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
        let oldest = self.items.front()?.since;
        if !idle && now.saturating_duration_since(oldest) < self.config.max_wait {
            return None;
        }
        let i = if idle { self.next_index() } else { 0 };
        let Waiting { since, item, flow } = self.items.remove(i)?;
        let waited = now.saturating_duration_since(since);
        self.stats.wait += waited;
        if idle {
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
        self.items.front().map(|w| {
            w.since
                .checked_add(self.config.max_wait)
                .unwrap_or(Instant::from_nanos(u64::MAX))
        })
    }

    /// When the oldest waiting item was queued (`None` when empty).
    pub fn oldest_since(&self) -> Option<Instant> {
        self.items.front().map(|w| w.since)
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
