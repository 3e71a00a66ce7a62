//! `queue-delay`: local control driven by the measured queueing delay.
//!
//! The same acceptance fraction as [OCC](crate::occ), updated multiplicatively once per
//! interval, but the load measure is the queueing delay `d` of the messages the server took
//! out of its inbound queue (mean of the interval's [`Signal::QueueDelay`] samples):
//!
//! ```text
//! every interval:   g  = (d − d_prev) / Δt               growth of the delay, s per s
//!                   ρ̂  = max(1 + g, 0.05)                admitted load / capacity, estimated
//!                   ρ* = max(1 − (d − d_target) / H, 0)  load / capacity wanted
//!                   f ← clamp(f · min(ρ* / ρ̂, φ_max), f_min, 1)
//! every new INVITE: admit with probability f, else 503
//! ```
//!
//! **Why this formula, and not `f ← f · d_target / d`.** That direct analogue of OCC is
//! unstable: the queue integrates the excess load, `f` integrates the delay error, and a
//! double integrator oscillates (in a fluid model it swings between `f_min` and several times
//! the right value, with delay peaks of 10× the target). The formula above uses what a queue
//! tells a saturated server instead:
//!
//! - while the queue is not empty the server works at capacity, and the delay grows by
//!   `Δd = Δt · (admitted/capacity − 1)`; so `ρ̂ = 1 + g` *measures* the admitted load relative
//!   to capacity, like OCC's `ρ` but not capped at 1 — a 10× overload reads `ρ̂ ≈ 10` and is
//!   cut 10× in one interval, where OCC can only cut by `ρ_target` per interval;
//! - `ρ*` asks for slightly less than capacity while the delay is above target (so the excess
//!   queue drains over about `H`) and slightly more while it is below;
//! - `ρ*/ρ̂` is then OCC's `ρ_target/ρ` with both sides measured. In the fluid model, with
//!   `Δt ≤ H`, the delay error shrinks by the factor `1 − Δt/H` per interval, without
//!   overshoot; at `H = 2Δt` it halves each interval.
//!
//! When the queue is empty the delay says nothing about how far below capacity the load is, so
//! `f` grows by at most `1 + d_target/H` per interval (1.1 with the defaults) or `φ_max`,
//! whichever is smaller: a slower recovery than OCC's, the price of needing no CPU
//! measurement.
//!
//! | parameter | default | why |
//! | --- | --- | --- |
//! | `interval` (`Δt`) | 100 ms | as OCC |
//! | `target_delay` (`d_target`) | 20 ms | far below SIP's 500 ms T1 (no retransmission) and the 100 ms PDD budget of the TCP experiments |
//! | `horizon` (`H`) | 200 ms | `2Δt`: the delay error halves each interval, robust to sampling noise |
//! | `max_increase` (`φ_max`) | 2 | bounds the growth after a queue drained |
//! | `min_acceptance` (`f_min`) | 0.01 | as OCC |
//!
//! The delay samples should include the time a message waited in the kernel's socket buffer
//! (the driver uses the kernel receive timestamp), otherwise a server whose socket buffer
//! fills up reads a small delay. Gate: [`Gate::Ingress`](crate::Gate::Ingress).

use holdline_base::{Duration, Instant, Rng};

use crate::admission::{Admission, Decision, RejectReason};
use crate::algorithm::{Algorithm, ConfigError, check_positive};
use crate::common::{Acceptance, Counters, Interval, decides, secs};
use crate::controller::{Controller, ControllerFactory};
use crate::signal::Signal;
use crate::snapshot::Snapshot;

/// The smallest estimate of admitted load / capacity (a queue draining at full speed reads
/// `1 + g ≈ 0`; dividing by it would be meaningless).
const MIN_LOAD_ESTIMATE: f64 = 0.05;

/// Longer delay samples count as this long (keeps the arithmetic finite).
pub(crate) const MAX_SAMPLE: Duration = Duration::from_secs(3600);

/// The configuration of [`QueueDelay`].
#[derive(Clone, Debug, PartialEq)]
pub struct QueueDelayConfig {
    /// The measurement interval. Default 100 ms.
    pub interval: Duration,
    /// The queueing delay to hold. Default 20 ms.
    pub target_delay: Duration,
    /// `H`: how fast a delay above target is drained (the delay error shrinks by `1 −
    /// interval/H` per interval). Must be at least `interval`. Default 200 ms.
    pub horizon: Duration,
    /// `φ_max`, the largest growth factor of `f` per interval (finite, ≥ 1). Default 2.
    pub max_increase: f64,
    /// `f_min`, in `(0, 1]`. Default 0.01.
    pub min_acceptance: f64,
    /// `Retry-After` for the 503s. Default `None`.
    pub retry_after: Option<Duration>,
}

impl Default for QueueDelayConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_millis(100),
            target_delay: Duration::from_millis(20),
            horizon: Duration::from_millis(200),
            max_increase: 2.0,
            min_acceptance: 0.01,
            retry_after: None,
        }
    }
}

impl ControllerFactory for QueueDelayConfig {
    fn algorithm(&self) -> Algorithm {
        Algorithm::QueueDelay
    }

    fn validate(&self) -> Result<(), ConfigError> {
        check_positive("interval", self.interval)?;
        check_positive("target_delay", self.target_delay)?;
        if self.horizon < self.interval {
            return Err(ConfigError::Inverted {
                low_field: "interval (ms)",
                low: u64::try_from(self.interval.as_millis()).unwrap_or(u64::MAX),
                high_field: "horizon (ms)",
                high: u64::try_from(self.horizon.as_millis()).unwrap_or(u64::MAX),
            });
        }
        Acceptance::validate(self.max_increase, self.min_acceptance)
    }

    fn build(&self, now: Instant, rng: Rng) -> Result<Box<dyn Controller>, ConfigError> {
        Ok(Box::new(QueueDelay::new(self.clone(), now, rng)?))
    }
}

/// Queueing-delay-based control.
#[derive(Clone, Debug)]
pub struct QueueDelay {
    config: QueueDelayConfig,
    interval: Interval,
    acceptance: Acceptance,
    /// Delay samples of the current interval: sum (seconds) and count.
    samples: (f64, u64),
    /// The mean delay of the previous interval, in seconds (0 at start: an idle server).
    previous: f64,
    last: Option<Duration>,
    intervals: u64,
    counters: Counters,
}

impl QueueDelay {
    /// A controller with a validated `config`; its first interval starts at `now`, with
    /// `f = 1`.
    pub fn new(config: QueueDelayConfig, now: Instant, rng: Rng) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            interval: Interval::new(now, config.interval),
            acceptance: Acceptance::new(config.min_acceptance, config.max_increase, rng),
            config,
            samples: (0.0, 0),
            previous: 0.0,
            last: None,
            intervals: 0,
            counters: Counters::default(),
        })
    }

    /// The current acceptance fraction `f`.
    pub fn acceptance(&self) -> f64 {
        self.acceptance.get()
    }

    /// The mean queueing delay of the last completed interval.
    pub fn queue_delay(&self) -> Option<Duration> {
        self.last
    }

    fn update(&mut self, elapsed: Duration) {
        if elapsed.is_zero() {
            return;
        }
        let (sum, count) = self.samples;
        // No message left the queue: nothing waited (an idle server). A server stuck on one
        // message reports its delay when it dequeues the next.
        let d = if count > 0 { sum / count as f64 } else { 0.0 };
        let growth = (d - self.previous) / secs(elapsed);
        let load = (1.0 + growth).max(MIN_LOAD_ESTIMATE);
        let wanted =
            (1.0 - (d - secs(self.config.target_delay)) / secs(self.config.horizon)).max(0.0);
        self.acceptance.scale(wanted / load);
        self.previous = d;
        self.last = Some(Duration::try_from_secs_f64(d).unwrap_or(MAX_SAMPLE));
        self.intervals = self.intervals.saturating_add(1);
        self.samples = (0.0, 0);
    }
}

impl Controller for QueueDelay {
    fn algorithm(&self) -> Algorithm {
        Algorithm::QueueDelay
    }

    fn admit(&mut self, _now: Instant, req: &Admission) -> Decision {
        if !decides(self.gate(), req) {
            return Decision::Admit;
        }
        if self.acceptance.draw_for(req.class) {
            self.counters.admit()
        } else {
            self.counters
                .reject(RejectReason::QueueDelay, self.config.retry_after)
        }
    }

    fn on_signal(&mut self, _now: Instant, signal: Signal) {
        if let Signal::QueueDelay(d) = signal {
            self.samples.0 += secs(d.min(MAX_SAMPLE));
            self.samples.1 = self.samples.1.saturating_add(1);
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.interval.deadline())
    }

    fn handle_timeout(&mut self, now: Instant) {
        if let Some(elapsed) = self.interval.close_if_due(now) {
            self.update(elapsed);
        }
    }

    fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot::new(Algorithm::QueueDelay);
        s.acceptance = Some(self.acceptance.get());
        s.queue_delay = self.last;
        s.intervals = self.intervals;
        s.admitted = self.counters.admitted;
        s.rejected = self.counters.rejected;
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn controller() -> QueueDelay {
        match QueueDelay::new(
            QueueDelayConfig::default(),
            Instant::ZERO,
            Rng::seed_from_u64(1),
        ) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    /// One interval whose samples all read `ms` milliseconds; returns the new `f`.
    fn interval(c: &mut QueueDelay, ms: f64) -> f64 {
        let end = c.interval.deadline();
        for _ in 0..10 {
            c.on_signal(
                end,
                Signal::QueueDelay(Duration::from_secs_f64(ms / 1000.0)),
            );
        }
        c.handle_timeout(end);
        c.acceptance()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn update_follows_the_formula() {
        let mut c = controller();
        // d = 20 ms (target), from 0: g = 0.2, ρ̂ = 1.2, ρ* = 1 → f = 1/1.2.
        assert!(close(interval(&mut c, 20.0), 1.0 / 1.2));
        // Steady at target: no change.
        assert!(close(interval(&mut c, 20.0), 1.0 / 1.2));
        // 60 ms: g = 0.4, ρ̂ = 1.4, ρ* = 1 − 0.04/0.2 = 0.8 → × 0.8/1.4.
        assert!(close(interval(&mut c, 60.0), 1.0 / 1.2 * 0.8 / 1.4));
        // Far above target: ρ* = 0 → f_min.
        assert!(close(interval(&mut c, 500.0), 0.01));
        // Draining at full speed: ρ̂ floored; ρ* = 0 still (d − target > H).
        assert!(close(interval(&mut c, 400.0), 0.01));
        // Empty queue after a drained one: growth capped by φ_max = 2.
        assert!(close(interval(&mut c, 0.0), 0.02));
        // Empty and steady: × (1 + 0.02/0.2) = 1.1.
        assert!(close(interval(&mut c, 0.0), 0.022));
        assert_eq!(c.queue_delay(), Some(Duration::ZERO));
    }

    #[test]
    fn horizon_shorter_than_interval_is_invalid() {
        let config = QueueDelayConfig {
            horizon: Duration::from_millis(50),
            ..QueueDelayConfig::default()
        };
        assert!(matches!(
            config.validate(),
            Err(ConfigError::Inverted { .. })
        ));
        assert!(
            QueueDelayConfig {
                target_delay: Duration::ZERO,
                ..QueueDelayConfig::default()
            }
            .validate()
            .is_err()
        );
    }
}
