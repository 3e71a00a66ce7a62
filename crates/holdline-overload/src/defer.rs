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
//! 000's fairness across SEs).
//!
//! ```text
//!  stream ─read─> new INVITE? ──yes──> DeferQueue (stream paused) ──idle──> handle, resume
//!                     │                         └──waited max_wait──> 503, resume
//!                     └──no──> handle now (admitted calls first)
//! ```
//!
//! The queue is generic over what the driver stores (the message bytes and where they came
//! from in the server; an event in a simulator) and takes time as an argument.

use std::collections::VecDeque;

use holdline_base::{Duration, Instant};

use crate::admission::{RejectReason, Rejection};

/// Settings of a [`DeferQueue`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeferConfig {
    /// The longest a new INVITE waits for idle time before it is rejected with 503.
    pub max_wait: Duration,
    /// `Retry-After` of those 503s (`None`: none).
    pub retry_after: Option<Duration>,
}

impl Default for DeferConfig {
    /// 250 ms: well under T1 (500 ms), the interval at which a UAS retransmits a 200 OK whose
    /// ACK is late, so the ACKs queued behind a held INVITE arrive in time.
    fn default() -> Self {
        Self {
            max_wait: Duration::from_millis(250),
            retry_after: None,
        }
    }
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

/// New INVITEs waiting for an idle server (see the module documentation).
#[derive(Debug)]
pub struct DeferQueue<T> {
    config: DeferConfig,
    items: VecDeque<(Instant, T)>,
    stats: DeferStats,
}

impl<T> DeferQueue<T> {
    /// An empty queue.
    pub fn new(config: DeferConfig) -> Self {
        Self {
            config,
            items: VecDeque::new(),
            stats: DeferStats::default(),
        }
    }

    /// The settings.
    pub const fn config(&self) -> &DeferConfig {
        &self.config
    }

    /// Queues `item`, read at `now`.
    pub fn push(&mut self, now: Instant, item: T) {
        self.items.push_back((now, item));
        self.stats.deferred += 1;
        self.stats.max_len = self.stats.max_len.max(self.items.len());
    }

    /// The next item to release at `now`, if any: the oldest one, admitted when `idle` (the
    /// server found nothing else to do), rejected when it has waited `max_wait`; `None` while
    /// the server is busy and nothing has waited that long.
    pub fn poll(&mut self, now: Instant, idle: bool) -> Option<Release<T>> {
        let &(since, _) = self.items.front()?;
        let waited = now.saturating_duration_since(since);
        if !idle && waited < self.config.max_wait {
            return None;
        }
        let (_, item) = self.items.pop_front()?;
        self.stats.wait += waited;
        if idle {
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
        self.items.front().map(|&(since, _)| {
            since
                .checked_add(self.config.max_wait)
                .unwrap_or(Instant::from_nanos(u64::MAX))
        })
    }

    /// When the oldest waiting item was queued (`None` when empty).
    pub fn oldest_since(&self) -> Option<Instant> {
        self.items.front().map(|&(since, _)| since)
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
        })
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
