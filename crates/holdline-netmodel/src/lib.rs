//! Link models for holdline's simulator (and, later, its network emulator), as pure state
//! machines.
//!
//! A [`Link`] carries packets one way between two nodes. The driver asks it what becomes of
//! each packet with [`Link::send`] and gets a [`Fate`]: delivered at an instant, lost on the
//! wire, or dropped at a full queue. Nothing here reads a clock or draws system randomness:
//! time is the caller's `now` ([`holdline_base::Instant`]) and every random draw comes from
//! the [`holdline_base::Rng`] the link was built with, so one seed gives one run.
//!
//! ```text
//!  send(now, size) ──> [rate limit: bounded FIFO, drop-tail] ──> [loss: random or
//!                       queue bytes = backlog at `rate`          Gilbert-Elliott] ──> + delay
//!                       dropped: Fate::QueueFull                  lost: Fate::Lost      + jitter
//!                                                                                 ──> Fate::Deliver(at)
//! ```
//!
//! - **Delay and jitter**: a fixed one-way delay plus a uniform draw in `[0, jitter]`. With
//!   [`LinkConfig::keep_order`] (the default) a packet never overtakes the previous one, as on
//!   a single queue; without it jitter may reorder packets (netem's behaviour).
//! - **Loss**: none, independent (Bernoulli) or Gilbert-Elliott correlated loss: a two-state
//!   Markov chain stepped once per packet that reaches the wire, with a loss probability per
//!   state; its long-run loss rate is [`GilbertElliott::stationary_loss`].
//! - **Rate**: a serialisation rate in bits per second with a FIFO queue bounded in bytes
//!   (drop-tail): a packet that would make the backlog exceed the bound is dropped before it
//!   consumes any of the link. A per-packet overhead (e.g. 28 bytes of IPv4 + UDP headers)
//!   counts towards both.
//!
//! Not modelled yet: derivative random drop (RED-like) queues, delay distributions other than
//! uniform, time-varying links.
#![forbid(unsafe_code)]

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

/// A rate limit with its bounded queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimit {
    /// Serialisation rate, bits per second.
    pub bits_per_second: u64,
    /// The most bytes waiting to be serialised (the packet being serialised included); a
    /// packet that would exceed it is dropped (drop-tail).
    pub queue_bytes: u64,
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
        if self.rate.is_some_and(|r| r.bits_per_second == 0) {
            return Err(LinkError::ZeroRate);
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
    /// The rate limit's queue was full: dropped before it was sent (drop-tail).
    QueueFull,
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
    /// Packets dropped at the full queue.
    pub queue_drops: u64,
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

    /// Sends a packet of `size` bytes at `now` and says what becomes of it. `now` must not go
    /// backwards (a smaller value is treated as the previous one for the queue).
    pub fn send(&mut self, now: Instant, size: usize) -> Fate {
        self.stats.offered += 1;
        let wire = (size as u64).saturating_add(self.cfg.overhead_bytes);
        let mut leave = now;
        if let Some(r) = self.cfg.rate {
            if self.backlog_bytes(now).saturating_add(wire) > r.queue_bytes {
                self.stats.queue_drops += 1;
                return Fate::QueueFull;
            }
            let ns = u128::from(wire) * 8_000_000_000 / u128::from(r.bits_per_second);
            let ser = Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX));
            leave = self.busy_until.max(now) + ser;
            self.busy_until = leave;
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
        let rate = RateLimit {
            bits_per_second: 1_000_000,
            queue_bytes: 20_000,
        };
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
            rate: Some(RateLimit {
                bits_per_second: 0,
                queue_bytes: 1,
            }),
            ..LinkConfig::default()
        };
        assert_eq!(zero.validate(), Err(LinkError::ZeroRate));
    }
}
