//! Link models for holdline's simulator (and, later, its network emulator), as pure state
//! machines.
//!
//! A [`Link`] carries packets one way between two nodes. The driver asks it what becomes of
//! each packet with [`Link::send`] and gets a [`Fate`]: delivered at an instant, lost on the
//! wire, dropped at a full queue, or dropped early by the queue's random drop. Nothing here
//! reads a clock or draws system randomness: time is the caller's `now`
//! ([`holdline_base::Instant`]) and every random draw comes from the [`holdline_base::Rng`] the
//! link was built with, so one seed gives one run.
//!
//! ```text
//!  send(now, size) ──> [rate limit: FIFO at `rate`]  ──> [loss: random, correlated  ──> + delay
//!                       bounded in bytes and packets       or Gilbert-Elliott]            + jitter
//!                       full: Fate::QueueFull               lost: Fate::Lost         ──> Fate::Deliver(at)
//!                       DRD early drop: Fate::RandomDrop
//! ```
//!
//! - **Delay and jitter**: a fixed one-way delay plus a uniform draw in `[0, jitter]`. With
//!   [`LinkConfig::keep_order`] (the default) a packet never overtakes the previous one, as on
//!   a single queue; without it jitter may reorder packets (netem's behaviour).
//! - **Loss**: none, independent (Bernoulli) or Gilbert-Elliott correlated loss: a two-state
//!   Markov chain stepped once per packet that reaches the wire, with a loss probability per
//!   state; its long-run loss rate is [`GilbertElliott::stationary_loss`].
//!   [`Loss::correlated`] builds the chain from a loss rate and a correlation (netem's and
//!   NIST Net's "loss P% C%").
//! - **Rate**: a serialisation rate in bits per second with a FIFO queue bounded in bytes and,
//!   optionally, in packets ([`RateLimit`]): a packet that would exceed either bound is dropped
//!   before it consumes any of the link (drop-tail). The queue may instead manage itself with
//!   derivative random drop ([`QueueDrop::Derivative`], seed 002's router), which drops
//!   arrivals with a probability rising with the number of packets queued. A per-packet
//!   overhead (e.g. 28 bytes of IPv4 + UDP headers) counts towards the rate and the byte bound.
//!
//! Not modelled yet: queue management other than drop-tail and DRD (RED's averaged queue
//! length, ECN marking), delay distributions other than uniform, time-varying links.
#![forbid(unsafe_code)]

use std::collections::VecDeque;

use holdline_base::{Duration, Instant, Rng};

/// A configuration value out of its valid range.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// A probability is not in `[0, 1]` (or is NaN).
    #[error("{field} = {value} is not a probability (expected 0 to 1)")]
    NotProbability {
        /// The field, e.g. `loss`.
        field: &'static str,
        /// The value given.
        value: f64,
    },
    /// A rate of zero bits per second.
    #[error("rate_bps must be greater than zero")]
    ZeroRate,
    /// Gilbert-Elliott with both transition probabilities zero has no stationary
    /// distribution worth the name (it never leaves its first state).
    #[error("gilbert-elliott: p_good_to_bad and p_bad_to_good cannot both be zero")]
    FrozenChain,
    /// A loss correlation outside `[0, 1)` (or NaN): 1 would freeze the loss chain.
    #[error("loss correlation = {value} must be at least 0 and below 1")]
    NotCorrelation {
        /// The value given.
        value: f64,
    },
    /// A packet bound of zero: the queue counts the packet being serialised, so it must
    /// hold at least one.
    #[error("queue_packets must be at least 1 (the count includes the packet being serialised)")]
    ZeroQueuePackets,
    /// Derivative random drop whose low threshold is not below its high one.
    #[error(
        "derivative random drop: min_packets ({min_packets}) must be below max_packets ({max_packets})"
    )]
    DrdThresholds {
        /// The low threshold given.
        min_packets: u64,
        /// The high threshold given.
        max_packets: u64,
    },
}

/// Gilbert-Elliott correlated loss: a good and a bad state, each with its loss probability,
/// and the per-packet probabilities of moving between them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GilbertElliott {
    /// Probability of moving from the good to the bad state, per packet (`p`).
    pub p_good_to_bad: f64,
    /// Probability of moving from the bad to the good state, per packet (`r`).
    pub p_bad_to_good: f64,
    /// Loss probability in the good state (`1 - k`; often 0).
    pub loss_good: f64,
    /// Loss probability in the bad state (`1 - h`; 1 for the simple Gilbert model).
    pub loss_bad: f64,
}

impl GilbertElliott {
    /// The long-run loss rate: `(r·loss_good + p·loss_bad) / (p + r)`.
    pub fn stationary_loss(&self) -> f64 {
        let (p, r) = (self.p_good_to_bad, self.p_bad_to_good);
        if p + r <= 0.0 {
            return self.loss_good;
        }
        (r * self.loss_good + p * self.loss_bad) / (p + r)
    }

    /// The mean length of a stay in the bad state, in packets (`1/r`).
    pub fn mean_bad_run(&self) -> f64 {
        1.0 / self.p_bad_to_good
    }

    fn validate(&self) -> Result<(), LinkError> {
        prob("p_good_to_bad", self.p_good_to_bad)?;
        prob("p_bad_to_good", self.p_bad_to_good)?;
        prob("loss_good", self.loss_good)?;
        prob("loss_bad", self.loss_bad)?;
        if self.p_good_to_bad == 0.0 && self.p_bad_to_good == 0.0 {
            return Err(LinkError::FrozenChain);
        }
        Ok(())
    }
}

/// How packets are lost on the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Loss {
    /// No loss.
    #[default]
    None,
    /// Each packet is lost independently with this probability.
    Random(f64),
    /// Correlated loss ([`GilbertElliott`]).
    GilbertElliott(GilbertElliott),
}

impl Loss {
    /// Loss at the long-run rate `loss` whose successive packets are correlated by
    /// `correlation`: how holdline reads netem's (and NIST Net's) "loss P% C%", the loss model
    /// of seed 002 (correlation 0, 0.5 and 0.8, Table 1).
    ///
    /// With `correlation` 0 this is [`Loss::Random`] (or [`Loss::None`] when `loss` is 0);
    /// otherwise the simple Gilbert model, a [`GilbertElliott`] chain with `loss_good = 0`
    /// and `loss_bad = 1` and
    ///
    /// - `p_good_to_bad = (1 − c)·loss`, `p_bad_to_good = (1 − c)·(1 − loss)`,
    ///
    /// whose stationary loss rate is `p/(p + r) = loss` and whose loss indicator (1 lost, 0
    /// not) has lag-1 autocorrelation `1 − p − r = c`: the chance that a packet is lost is
    /// `loss + c·(1 − loss)` after a loss and `loss·(1 − c)` after a delivery. A `loss` of 0
    /// gives [`Loss::None`] and a `loss` of 1 gives `Loss::Random(1.0)` whatever the
    /// correlation (the chain would only reach those rates in the long run).
    ///
    /// netem's own `loss P% C%` does something else: it blends each uniform draw with the
    /// previous one and compares the blend with P, which is known not to give the asked
    /// correlation (the reason netem later gained its `loss state` and `loss gemodel`
    /// Markov models). holdline therefore defines the pair by the two properties above.
    ///
    /// `loss` must be in `[0, 1]` and `correlation` in `[0, 1)` (1 would never change state).
    pub fn correlated(loss: f64, correlation: f64) -> Result<Self, LinkError> {
        prob("loss", loss)?;
        if !(0.0..1.0).contains(&correlation) {
            return Err(LinkError::NotCorrelation { value: correlation });
        }
        if loss == 0.0 {
            return Ok(Self::None);
        }
        if correlation == 0.0 || loss == 1.0 {
            return Ok(Self::Random(loss));
        }
        let keep = 1.0 - correlation;
        Ok(Self::GilbertElliott(GilbertElliott {
            p_good_to_bad: keep * loss,
            p_bad_to_good: keep * (1.0 - loss),
            loss_good: 0.0,
            loss_bad: 1.0,
        }))
    }
}

/// How a rate limit's queue decides which arrivals to drop, besides its bounds
/// ([`RateLimit::queue_bytes`], [`RateLimit::queue_packets`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum QueueDrop {
    /// Drop-tail: an arrival is dropped only when it would exceed a bound.
    #[default]
    Tail,
    /// Derivative random drop (DRD), the router queue of seed 002 (l. 117, after NIST Net).
    ///
    /// The paper says only that DRD "drops packets with a probability that increases
    /// linearly with the instantaneous queue length", that the probability "starts at zero
    /// at the first threshold and reaches 95% at the second", and it names its two queues by
    /// their thresholds ("10–20" and "50–60 packets"). holdline fills in the rest:
    ///
    /// - the queue length `q` is the number of packets in the queue when the packet arrives,
    ///   the one being serialised included (the count [`RateLimit::queue_packets`] bounds):
    ///   the instantaneous length, not RED's average;
    /// - below `min_packets` nothing is dropped; for `min_packets ≤ q < max_packets` the
    ///   arrival is dropped with probability
    ///   `max_probability · (q − min_packets) / (max_packets − min_packets)`
    ///   ([`Fate::RandomDrop`]);
    /// - at or above `max_packets` every arrival is dropped, as at a full queue
    ///   ([`Fate::QueueFull`]): the paper names its queues by the two thresholds, which reads
    ///   the high one as the queue's capacity, so the queue never holds more than
    ///   `max_packets` packets. The probability thus climbs towards `max_probability` (0.95
    ///   in the paper) and then jumps to 1.
    ///
    /// The byte and packet bounds still apply on top (whichever is reached first drops).
    Derivative {
        /// The low threshold, packets: no early drop below it.
        min_packets: u64,
        /// The high threshold, packets: every arrival dropped at or above it.
        max_packets: u64,
        /// The early-drop probability the line rises to at `max_packets` (seed 002: 0.95).
        max_probability: f64,
    },
}

impl QueueDrop {
    /// The probability that an arrival finding `queued` packets in the queue (the one being
    /// serialised included) is dropped by this policy: 0 for [`QueueDrop::Tail`] (its drops
    /// come from the bounds alone); for [`QueueDrop::Derivative`] see its documentation (1 at
    /// or above `max_packets`).
    pub fn drop_probability(&self, queued: u64) -> f64 {
        match *self {
            Self::Tail => 0.0,
            Self::Derivative {
                min_packets,
                max_packets,
                max_probability,
            } => {
                if queued >= max_packets {
                    1.0
                } else if queued <= min_packets {
                    0.0
                } else {
                    max_probability * (queued - min_packets) as f64
                        / (max_packets - min_packets) as f64
                }
            }
        }
    }

    fn validate(&self) -> Result<(), LinkError> {
        if let Self::Derivative {
            min_packets,
            max_packets,
            max_probability,
        } = *self
        {
            if min_packets >= max_packets {
                return Err(LinkError::DrdThresholds {
                    min_packets,
                    max_packets,
                });
            }
            prob("max_probability", max_probability)?;
        }
        Ok(())
    }
}

/// A rate limit with its bounded queue.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    /// Serialisation rate, bits per second.
    pub bits_per_second: u64,
    /// The most bytes waiting to be serialised (the packet being serialised included); a
    /// packet that would exceed it is dropped (drop-tail).
    pub queue_bytes: u64,
    /// The most packets in the queue, the one being serialised included; an arrival that
    /// finds this many is dropped (drop-tail). `None`: only the byte bound. At least 1.
    pub queue_packets: Option<u64>,
    /// How the queue drops arrivals besides its bounds.
    pub drop: QueueDrop,
}

impl RateLimit {
    /// A drop-tail queue bounded in bytes only (`queue_packets: None`, `drop:
    /// QueueDrop::Tail`); set the other fields with struct update syntax.
    pub fn new(bits_per_second: u64, queue_bytes: u64) -> Self {
        Self {
            bits_per_second,
            queue_bytes,
            queue_packets: None,
            drop: QueueDrop::Tail,
        }
    }

    fn validate(&self) -> Result<(), LinkError> {
        if self.bits_per_second == 0 {
            return Err(LinkError::ZeroRate);
        }
        if self.queue_packets == Some(0) {
            return Err(LinkError::ZeroQueuePackets);
        }
        self.drop.validate()
    }
}

/// One direction of a link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkConfig {
    /// Fixed one-way propagation delay. Default 0.
    pub delay: Duration,
    /// Extra delay drawn uniformly from `[0, jitter]` per packet. Default 0.
    pub jitter: Duration,
    /// Loss on the wire. Default none.
    pub loss: Loss,
    /// Rate limit and queue. Default none (infinitely fast, nothing queues).
    pub rate: Option<RateLimit>,
    /// Bytes added to every packet's size for the rate limit and the queue (headers below
    /// SIP: 28 for IPv4 + UDP). Default 28.
    pub overhead_bytes: u64,
    /// Whether packets leave in the order they were sent despite jitter. Default `true`.
    pub keep_order: bool,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            loss: Loss::None,
            rate: None,
            overhead_bytes: 28,
            keep_order: true,
        }
    }
}

impl LinkConfig {
    /// Checks the values.
    pub fn validate(&self) -> Result<(), LinkError> {
        match self.loss {
            Loss::None => {}
            Loss::Random(p) => prob("loss", p)?,
            Loss::GilbertElliott(ge) => ge.validate()?,
        }
        if let Some(r) = self.rate {
            r.validate()?;
        }
        Ok(())
    }
}

fn prob(field: &'static str, value: f64) -> Result<(), LinkError> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(LinkError::NotProbability { field, value })
    }
}

/// What becomes of a packet given to [`Link::send`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// It arrives at the far end at this instant.
    Deliver(Instant),
    /// It was lost on the wire.
    Lost,
    /// The rate limit's queue was full (its byte or packet bound, or the high threshold of
    /// derivative random drop): dropped before it was sent (drop-tail).
    QueueFull,
    /// Dropped early by derivative random drop ([`QueueDrop::Derivative`]) while the queue
    /// was between its thresholds: dropped before it was sent.
    RandomDrop,
}

/// A link's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets given to [`Link::send`].
    pub offered: u64,
    /// Packets delivered.
    pub delivered: u64,
    /// Packets lost on the wire.
    pub lost: u64,
    /// Packets dropped at the full queue ([`Fate::QueueFull`]).
    pub queue_drops: u64,
    /// Packets dropped early by derivative random drop ([`Fate::RandomDrop`]).
    pub random_drops: u64,
    /// Bytes of delivered packets (overhead excluded).
    pub delivered_bytes: u64,
}

/// One direction of a link: see the [crate documentation](crate).
#[derive(Clone, Debug)]
pub struct Link {
    cfg: LinkConfig,
    rng: Rng,
    /// Gilbert-Elliott state.
    bad: bool,
    /// When the rate limiter finishes serialising what it holds.
    busy_until: Instant,
    /// When each packet in the rate limiter's queue finishes serialising, oldest first (the
    /// packets not yet gone at the last `send`).
    departures: VecDeque<Instant>,
    /// The latest delivery instant handed out (for `keep_order`).
    last_delivery: Instant,
    stats: LinkStats,
}

impl Link {
    /// A link with `cfg`, drawing from `rng`.
    pub fn new(cfg: LinkConfig, rng: Rng) -> Result<Self, LinkError> {
        cfg.validate()?;
        Ok(Self {
            cfg,
            rng,
            bad: false,
            busy_until: Instant::ZERO,
            departures: VecDeque::new(),
            last_delivery: Instant::ZERO,
            stats: LinkStats::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &LinkConfig {
        &self.cfg
    }

    /// The counters.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// Bytes waiting in the rate limiter's queue at `now` (overhead included; 0 without a
    /// rate limit).
    pub fn backlog_bytes(&self, now: Instant) -> u64 {
        match self.cfg.rate {
            Some(r) => {
                let ns = self.busy_until.saturating_duration_since(now).as_nanos();
                let bytes = ns * u128::from(r.bits_per_second) / 8_000_000_000;
                u64::try_from(bytes).unwrap_or(u64::MAX)
            }
            None => 0,
        }
    }

    /// Packets in the rate limiter's queue at `now`, the one being serialised included (0
    /// without a rate limit): what [`RateLimit::queue_packets`] bounds and derivative random
    /// drop reads.
    pub fn backlog_packets(&self, now: Instant) -> u64 {
        let gone = self.departures.partition_point(|&d| d <= now);
        (self.departures.len() - gone) as u64
    }

    /// Sends a packet of `size` bytes at `now` and says what becomes of it. `now` must not go
    /// backwards (a smaller value is treated as the previous one for the queue).
    pub fn send(&mut self, now: Instant, size: usize) -> Fate {
        self.stats.offered += 1;
        let wire = (size as u64).saturating_add(self.cfg.overhead_bytes);
        let mut leave = now;
        if let Some(r) = self.cfg.rate {
            while self.departures.front().is_some_and(|&d| d <= now) {
                self.departures.pop_front();
            }
            let queued = self.departures.len() as u64;
            let p = r.drop.drop_probability(queued);
            if self.backlog_bytes(now).saturating_add(wire) > r.queue_bytes
                || r.queue_packets.is_some_and(|n| queued >= n)
                || p >= 1.0
            {
                self.stats.queue_drops += 1;
                return Fate::QueueFull;
            }
            if p > 0.0 && self.rng.chance(p) {
                self.stats.random_drops += 1;
                return Fate::RandomDrop;
            }
            let ns = u128::from(wire) * 8_000_000_000 / u128::from(r.bits_per_second);
            let ser = Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX));
            leave = self.busy_until.max(now) + ser;
            self.busy_until = leave;
            self.departures.push_back(leave);
        }
        if self.lose() {
            self.stats.lost += 1;
            return Fate::Lost;
        }
        let mut at = leave + self.cfg.delay;
        if !self.cfg.jitter.is_zero() {
            let j = self
                .rng
                .below(u64::try_from(self.cfg.jitter.as_nanos()).unwrap_or(u64::MAX));
            at += Duration::from_nanos(j);
        }
        if self.cfg.keep_order {
            at = at.max(self.last_delivery);
        }
        self.last_delivery = self.last_delivery.max(at);
        self.stats.delivered += 1;
        self.stats.delivered_bytes += size as u64;
        Fate::Deliver(at)
    }

    /// Whether the packet now on the wire is lost (steps the Gilbert-Elliott chain).
    fn lose(&mut self) -> bool {
        match self.cfg.loss {
            Loss::None => false,
            Loss::Random(p) => p > 0.0 && self.rng.chance(p),
            Loss::GilbertElliott(ge) => {
                let flip = if self.bad {
                    ge.p_bad_to_good
                } else {
                    ge.p_good_to_bad
                };
                if self.rng.chance(flip) {
                    self.bad = !self.bad;
                }
                let p = if self.bad { ge.loss_bad } else { ge.loss_good };
                p > 0.0 && self.rng.chance(p)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(cfg: LinkConfig, seed: u64) -> Link {
        Link::new(cfg, Rng::seed_from_u64(seed)).expect("valid config")
    }

    #[test]
    fn fixed_delay_delivers_after_the_delay() {
        let mut l = link(
            LinkConfig {
                delay: Duration::from_millis(5),
                ..LinkConfig::default()
            },
            1,
        );
        let now = Instant::from_millis(10);
        assert_eq!(l.send(now, 500), Fate::Deliver(Instant::from_millis(15)));
        assert_eq!(l.stats().delivered, 1);
    }

    #[test]
    fn jitter_stays_in_range_and_keeps_order() {
        let mut l = link(
            LinkConfig {
                delay: Duration::from_millis(5),
                jitter: Duration::from_millis(3),
                ..LinkConfig::default()
            },
            2,
        );
        let mut last = Instant::ZERO;
        for i in 0..10_000u64 {
            let now = Instant::from_micros(i * 10);
            let Fate::Deliver(at) = l.send(now, 100) else {
                panic!("no loss configured");
            };
            assert!(at >= now + Duration::from_millis(5));
            // keep_order may push a packet past its own draw, never before the previous one.
            assert!(at >= last);
            assert!(at <= now + Duration::from_millis(8) || at == last);
            last = at;
        }
    }

    #[test]
    fn random_loss_rate_matches_its_probability() {
        let mut l = link(
            LinkConfig {
                loss: Loss::Random(0.1),
                ..LinkConfig::default()
            },
            3,
        );
        let n = 200_000;
        for _ in 0..n {
            let _ = l.send(Instant::ZERO, 100);
        }
        let rate = l.stats().lost as f64 / n as f64;
        assert!((rate - 0.1).abs() < 0.005, "loss rate {rate}");
    }

    #[test]
    fn gilbert_elliott_long_run_loss_matches_the_stationary_formula() {
        let ge = GilbertElliott {
            p_good_to_bad: 0.01,
            p_bad_to_good: 0.3,
            loss_good: 0.001,
            loss_bad: 0.5,
        };
        let expected = ge.stationary_loss();
        assert!((expected - (0.3 * 0.001 + 0.01 * 0.5) / 0.31).abs() < 1e-12);
        let mut l = link(
            LinkConfig {
                loss: Loss::GilbertElliott(ge),
                ..LinkConfig::default()
            },
            4,
        );
        let n = 2_000_000u64;
        let mut run = 0u64;
        let mut runs = Vec::new();
        for _ in 0..n {
            if l.send(Instant::ZERO, 100) == Fate::Lost {
                run += 1;
            } else if run > 0 {
                runs.push(run);
                run = 0;
            }
        }
        let rate = l.stats().lost as f64 / n as f64;
        assert!(
            (rate - expected).abs() < 0.1 * expected,
            "loss rate {rate}, stationary {expected}"
        );
        // Correlated: losses come in bursts longer than independent loss at the same rate
        // would give (mean burst 1/(1-rate) ≈ 1.02).
        let mean_burst = runs.iter().sum::<u64>() as f64 / runs.len() as f64;
        assert!(mean_burst > 1.1, "mean burst {mean_burst}");
    }

    #[test]
    fn a_rate_limited_link_never_exceeds_its_rate() {
        let rate = RateLimit::new(1_000_000, 20_000);
        let mut l = link(
            LinkConfig {
                delay: Duration::from_millis(1),
                rate: Some(rate),
                overhead_bytes: 0,
                ..LinkConfig::default()
            },
            5,
        );
        // Offer 4 Mbit/s for one second: 1000-byte packets every 2 ms.
        let mut delivered: Vec<Instant> = Vec::new();
        for i in 0..500u64 {
            if let Fate::Deliver(at) = l.send(Instant::from_millis(i * 2), 1000) {
                delivered.push(at);
            }
        }
        let s = *l.stats();
        assert!(s.queue_drops > 0, "the queue must overflow at 4x its rate");
        // Serialisation of 1000 bytes at 1 Mbit/s takes 8 ms: consecutive packets leave at
        // least that far apart...
        for w in delivered.windows(2) {
            assert!(w[1] - w[0] >= Duration::from_millis(8));
        }
        // ... so over any span the link carries at most its rate (plus one packet).
        let first = delivered[0];
        let last = delivered[delivered.len() - 1];
        let bits = (delivered.len() as f64 - 1.0) * 8000.0;
        assert!(bits / (last - first).as_secs_f64() <= 1_000_000.0 + 1.0);
        // The queue bound holds: at most 20 packets wait, so at most 20 × 8 ms of queueing.
        assert!(l.backlog_bytes(Instant::from_millis(998)) <= 20_000);
    }

    #[test]
    fn deterministic_per_seed() {
        let cfg = LinkConfig {
            delay: Duration::from_millis(2),
            jitter: Duration::from_millis(2),
            loss: Loss::GilbertElliott(GilbertElliott {
                p_good_to_bad: 0.05,
                p_bad_to_good: 0.5,
                loss_good: 0.0,
                loss_bad: 1.0,
            }),
            keep_order: false,
            ..LinkConfig::default()
        };
        let run = |seed| {
            let mut l = link(cfg, seed);
            (0..1000u64)
                .map(|i| l.send(Instant::from_micros(i * 100), 300))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn invalid_configs_are_refused() {
        let bad = LinkConfig {
            loss: Loss::Random(1.5),
            ..LinkConfig::default()
        };
        assert!(matches!(
            Link::new(bad, Rng::seed_from_u64(1)),
            Err(LinkError::NotProbability { field: "loss", .. })
        ));
        let frozen = LinkConfig {
            loss: Loss::GilbertElliott(GilbertElliott {
                p_good_to_bad: 0.0,
                p_bad_to_good: 0.0,
                loss_good: 0.0,
                loss_bad: 1.0,
            }),
            ..LinkConfig::default()
        };
        assert_eq!(frozen.validate(), Err(LinkError::FrozenChain));
        let zero = LinkConfig {
            rate: Some(RateLimit::new(0, 1)),
            ..LinkConfig::default()
        };
        assert_eq!(zero.validate(), Err(LinkError::ZeroRate));
    }

    /// A link whose queue never drains during a test's instant: 1 Mbit/s, 1000-byte packets
    /// (8 ms each), no overhead, a byte bound that never binds.
    fn slow(queue_packets: Option<u64>, drop: QueueDrop, seed: u64) -> Link {
        link(
            LinkConfig {
                rate: Some(RateLimit {
                    queue_packets,
                    drop,
                    ..RateLimit::new(1_000_000, u64::MAX)
                }),
                overhead_bytes: 0,
                ..LinkConfig::default()
            },
            seed,
        )
    }

    #[test]
    fn the_packet_bound_drops_exactly_the_arrivals_beyond_it() {
        let mut l = slow(Some(5), QueueDrop::Tail, 10);
        let fates: Vec<Fate> = (0..12).map(|_| l.send(Instant::ZERO, 1000)).collect();
        for (i, f) in fates.iter().enumerate() {
            if i < 5 {
                // The i-th packet leaves after i + 1 serialisations of 8 ms.
                let at = Instant::from_millis(8 * (i as u64 + 1));
                assert_eq!(*f, Fate::Deliver(at), "packet {i}");
            } else {
                assert_eq!(*f, Fate::QueueFull, "packet {i}");
            }
        }
        assert_eq!(l.backlog_packets(Instant::ZERO), 5);
        // The bound counts the packet being serialised: one nanosecond before the first
        // departs the queue is still full...
        let before = Instant::from_nanos(8_000_000 - 1);
        assert_eq!(l.backlog_packets(before), 5);
        assert_eq!(l.send(before, 1000), Fate::QueueFull);
        // ... and when it has gone exactly one more fits.
        let t = Instant::from_millis(8);
        assert_eq!(l.backlog_packets(t), 4);
        assert_eq!(l.send(t, 1000), Fate::Deliver(Instant::from_millis(48)));
        assert_eq!(l.send(t, 1000), Fate::QueueFull);
        let s = *l.stats();
        assert_eq!((s.offered, s.delivered, s.queue_drops), (15, 6, 9));
        assert_eq!(s.random_drops, 0);
        // Without the packet bound the same arrivals all fit (the byte bound is huge).
        let mut unbounded = slow(None, QueueDrop::Tail, 10);
        for _ in 0..12 {
            assert!(matches!(
                unbounded.send(Instant::ZERO, 1000),
                Fate::Deliver(_)
            ));
        }
    }

    #[test]
    fn the_byte_and_packet_bounds_both_apply() {
        // 3000 bytes hold three 1000-byte packets but ten 100-byte ones: the byte bound binds
        // for the first, the packet bound (5) for the second.
        let cfg = |queue_packets| LinkConfig {
            rate: Some(RateLimit {
                queue_packets,
                ..RateLimit::new(1_000_000, 3000)
            }),
            overhead_bytes: 0,
            ..LinkConfig::default()
        };
        let mut big = link(cfg(Some(5)), 11);
        let ok = (0..10)
            .filter(|_| matches!(big.send(Instant::ZERO, 1000), Fate::Deliver(_)))
            .count();
        assert_eq!(ok, 3);
        let mut small = link(cfg(Some(5)), 11);
        let ok = (0..10)
            .filter(|_| matches!(small.send(Instant::ZERO, 100), Fate::Deliver(_)))
            .count();
        assert_eq!(ok, 5);
        assert_eq!(small.stats().queue_drops, 5);
    }

    #[test]
    fn drd_probability_is_zero_below_min_linear_between_and_one_at_max() {
        let drd = QueueDrop::Derivative {
            min_packets: 10,
            max_packets: 20,
            max_probability: 0.95,
        };
        for q in 0..=10 {
            assert_eq!(drd.drop_probability(q), 0.0, "q = {q}");
        }
        for q in 11..20 {
            let expected = 0.95 * (q - 10) as f64 / 10.0;
            assert!(
                (drd.drop_probability(q) - expected).abs() < 1e-12,
                "q = {q}"
            );
        }
        for q in [20, 21, 1000] {
            assert_eq!(drd.drop_probability(q), 1.0, "q = {q}");
        }
        assert_eq!(QueueDrop::Tail.drop_probability(1_000_000), 0.0);
    }

    #[test]
    fn drd_drops_the_expected_fraction_at_each_queue_length() {
        let (min, max, pmax) = (10u64, 20u64, 0.95);
        let mut l = slow(
            None,
            QueueDrop::Derivative {
                min_packets: min,
                max_packets: max,
                max_probability: pmax,
            },
            12,
        );
        let levels = max as usize + 1;
        let mut offered = vec![0u64; levels];
        let mut random = vec![0u64; levels];
        let mut full = vec![0u64; levels];
        // Each cycle fills the queue from empty at one instant (nothing departs meanwhile),
        // then offers a few more at the high threshold; the next cycle starts 1 s later, when
        // the 160 ms the queue holds have drained.
        for cycle in 0..2000u64 {
            let t = Instant::from_secs(cycle);
            assert_eq!(l.backlog_packets(t), 0);
            let mut extra = 0;
            while extra < 5 {
                let q = l.backlog_packets(t);
                let fate = l.send(t, 1000);
                let q = q as usize;
                offered[q] += 1;
                match fate {
                    Fate::Deliver(_) => {}
                    Fate::RandomDrop => random[q] += 1,
                    Fate::QueueFull => full[q] += 1,
                    Fate::Lost => panic!("no loss configured"),
                }
                if q as u64 == max {
                    extra += 1;
                }
            }
        }
        for q in 0..levels {
            let p = QueueDrop::Derivative {
                min_packets: min,
                max_packets: max,
                max_probability: pmax,
            }
            .drop_probability(q as u64);
            if (q as u64) <= min {
                assert_eq!(random[q] + full[q], 0, "nothing dropped at {q} ≤ min");
                assert_eq!(offered[q], 2000);
            } else if (q as u64) < max {
                assert_eq!(full[q], 0);
                let frac = random[q] as f64 / offered[q] as f64;
                assert!(
                    (frac - p).abs() < 0.05,
                    "at {q} packets: dropped {frac}, expected {p}"
                );
            } else {
                assert_eq!(random[q], 0);
                assert_eq!(full[q], offered[q], "everything dropped at max");
                assert_eq!(full[q], 2000 * 5);
            }
        }
        let s = *l.stats();
        assert_eq!(s.random_drops, random.iter().sum::<u64>());
        assert_eq!(s.queue_drops, 2000 * 5);
        assert_eq!(s.delivered, 2000 * max);
    }

    /// The loss indicators of `n` packets on a link with `loss` and nothing else.
    fn loss_indicators(loss: Loss, n: usize, seed: u64) -> Vec<f64> {
        let mut l = link(
            LinkConfig {
                loss,
                ..LinkConfig::default()
            },
            seed,
        );
        (0..n)
            .map(|_| match l.send(Instant::ZERO, 100) {
                Fate::Lost => 1.0,
                _ => 0.0,
            })
            .collect()
    }

    /// Mean and lag-1 autocorrelation of `x`.
    fn mean_and_lag1(x: &[f64]) -> (f64, f64) {
        let n = x.len() as f64;
        let m = x.iter().sum::<f64>() / n;
        let var = x.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / n;
        let cov = x.windows(2).map(|w| (w[0] - m) * (w[1] - m)).sum::<f64>() / (n - 1.0);
        (m, cov / var)
    }

    #[test]
    fn correlated_loss_has_the_asked_rate_and_lag1_autocorrelation() {
        for (loss, c, seed) in [(0.01, 0.5, 13), (0.05, 0.8, 14)] {
            let model = Loss::correlated(loss, c).expect("valid");
            let Loss::GilbertElliott(ge) = model else {
                panic!("correlated loss must be a Gilbert chain, got {model:?}");
            };
            assert!((ge.stationary_loss() - loss).abs() < 1e-12);
            let x = loss_indicators(model, 200_000, seed);
            let (rate, rho) = mean_and_lag1(&x);
            assert!(
                (rate - loss).abs() < 0.1 * loss,
                "({loss}, {c}): loss rate {rate}"
            );
            assert!(
                (rho - c).abs() < 0.05,
                "({loss}, {c}): lag-1 autocorrelation {rho}"
            );
        }
        // The control: independent loss at the same rate shows no correlation.
        let x = loss_indicators(Loss::Random(0.05), 200_000, 15);
        let (_, rho) = mean_and_lag1(&x);
        assert!(rho.abs() < 0.05, "independent loss, autocorrelation {rho}");
    }

    #[test]
    fn correlated_loss_degenerate_cases() {
        assert_eq!(Loss::correlated(0.0, 0.8), Ok(Loss::None));
        assert_eq!(Loss::correlated(0.0, 0.0), Ok(Loss::None));
        assert_eq!(Loss::correlated(0.03, 0.0), Ok(Loss::Random(0.03)));
        assert_eq!(Loss::correlated(1.0, 0.5), Ok(Loss::Random(1.0)));
        let Ok(Loss::GilbertElliott(ge)) = Loss::correlated(0.05, 0.8) else {
            panic!("a Gilbert chain");
        };
        assert!((ge.p_good_to_bad - 0.2 * 0.05).abs() < 1e-12);
        assert!((ge.p_bad_to_good - 0.2 * 0.95).abs() < 1e-12);
        assert_eq!((ge.loss_good, ge.loss_bad), (0.0, 1.0));
    }

    #[test]
    fn invalid_queue_and_correlation_settings_are_refused() {
        for c in [1.0, 1.5, -0.1, f64::NAN] {
            assert!(
                matches!(
                    Loss::correlated(0.01, c),
                    Err(LinkError::NotCorrelation { .. })
                ),
                "correlation {c}"
            );
        }
        for loss in [-0.01, 1.01, f64::NAN] {
            assert!(
                matches!(
                    Loss::correlated(loss, 0.5),
                    Err(LinkError::NotProbability { field: "loss", .. })
                ),
                "loss {loss}"
            );
        }
        let e = Loss::correlated(0.01, 1.0).expect_err("frozen");
        assert_eq!(
            e.to_string(),
            "loss correlation = 1 must be at least 0 and below 1"
        );
        let with = |queue_packets, drop| LinkConfig {
            rate: Some(RateLimit {
                queue_packets,
                drop,
                ..RateLimit::new(1_000_000, 64_000)
            }),
            ..LinkConfig::default()
        };
        assert_eq!(
            with(Some(0), QueueDrop::Tail).validate(),
            Err(LinkError::ZeroQueuePackets)
        );
        assert_eq!(with(Some(1), QueueDrop::Tail).validate(), Ok(()));
        let drd = |min_packets, max_packets, max_probability| QueueDrop::Derivative {
            min_packets,
            max_packets,
            max_probability,
        };
        assert_eq!(with(None, drd(10, 20, 0.95)).validate(), Ok(()));
        assert_eq!(with(None, drd(0, 1, 1.0)).validate(), Ok(()));
        for (min, max) in [(20, 10), (10, 10)] {
            let e = with(None, drd(min, max, 0.95))
                .validate()
                .expect_err("order");
            assert_eq!(
                e,
                LinkError::DrdThresholds {
                    min_packets: min,
                    max_packets: max
                }
            );
        }
        assert_eq!(
            with(None, drd(20, 10, 0.95))
                .validate()
                .expect_err("order")
                .to_string(),
            "derivative random drop: min_packets (20) must be below max_packets (10)"
        );
        for p in [1.5, -0.5, f64::NAN] {
            assert!(
                matches!(
                    Link::new(with(None, drd(10, 20, p)), Rng::seed_from_u64(1)),
                    Err(LinkError::NotProbability {
                        field: "max_probability",
                        ..
                    })
                ),
                "max_probability {p}"
            );
        }
    }

    /// A property test, by hand over seeded random configurations (the crate has no
    /// proptest): whatever the bounds, the policy and the arrivals, the queue never holds
    /// more than its bounds allow, every packet gets one fate, DRD never drops below its low
    /// threshold, and departures keep their order.
    #[test]
    fn queue_invariants_hold_for_random_configurations() {
        let mut meta = Rng::seed_from_u64(16);
        for case in 0..200 {
            let queue_packets = if meta.chance(0.5) {
                Some(1 + meta.below(30))
            } else {
                None
            };
            let drop = if meta.chance(0.5) {
                let min = meta.below(20);
                QueueDrop::Derivative {
                    min_packets: min,
                    max_packets: min + 1 + meta.below(40),
                    max_probability: meta.next_f64(),
                }
            } else {
                QueueDrop::Tail
            };
            let rate = RateLimit {
                queue_packets,
                drop,
                ..RateLimit::new(100_000 + meta.below(10_000_000), 500 + meta.below(100_000))
            };
            let mut l = link(
                LinkConfig {
                    rate: Some(rate),
                    loss: Loss::Random(0.01),
                    ..LinkConfig::default()
                },
                meta.next_u64(),
            );
            let cap = match (queue_packets, drop) {
                (Some(n), QueueDrop::Derivative { max_packets, .. }) => n.min(max_packets),
                (Some(n), QueueDrop::Tail) => n,
                (None, QueueDrop::Derivative { max_packets, .. }) => max_packets,
                (None, QueueDrop::Tail) => u64::MAX,
            };
            let mut now = Instant::ZERO;
            let mut last = Instant::ZERO;
            for _ in 0..2000 {
                now += Duration::from_micros(meta.below(2000));
                let q = l.backlog_packets(now);
                let fate = l.send(now, 1 + meta.below(1400) as usize);
                let after = l.backlog_packets(now);
                match fate {
                    Fate::Deliver(at) => {
                        assert!(at >= last, "case {case}: reordered");
                        last = at;
                        assert_eq!(after, q + 1);
                    }
                    Fate::Lost => assert_eq!(after, q + 1, "case {case}: lost on the wire"),
                    Fate::QueueFull => assert_eq!(after, q),
                    Fate::RandomDrop => {
                        assert_eq!(after, q);
                        assert!(drop.drop_probability(q) > 0.0, "case {case}: at {q}");
                    }
                }
                assert!(after <= cap, "case {case}: {after} packets > {cap}");
                assert!(l.backlog_bytes(now) <= rate.queue_bytes, "case {case}");
            }
            let s = *l.stats();
            assert_eq!(
                s.offered,
                s.delivered + s.lost + s.queue_drops + s.random_drops,
                "case {case}"
            );
        }
    }
}
