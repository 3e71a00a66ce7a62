//! `occ`: occupancy-based local control.
//!
//! The OCC algorithm of Cyr et al., as Hilt & Widjaja apply it to a SIP server and as seed 003
//! (§2.1, §5.1 "OCC-Local") uses it: the server measures its processor occupancy `ρ` over each
//! measurement interval and keeps an acceptance fraction `f`, the probability with which a new
//! INVITE is admitted:
//!
//! ```text
//! every interval:   φ = min(ρ_target / ρ, φ_max)        (φ = φ_max when ρ = 0)
//!                   f ← clamp(f · φ, f_min, 1)
//! every new INVITE: admit with probability f, else 503
//! ```
//!
//! When the admitted load is below capacity, `ρ` is proportional to `f` and one update lands
//! `f` where `ρ` meets `ρ_target`; `φ_max` bounds how fast `f` grows back after overload, and
//! `f_min > 0` keeps a trickle of calls admitted so that the measurement stays meaningful and
//! `f` can recover.
//!
//! # Parameters
//!
//! | parameter | default | source |
//! | --- | --- | --- |
//! | `target_occupancy` (`ρ_target`) | 0.9 | seed 003 §5.1: "a tradeoff threshold … is set to 90 %"; above 95 % goodput degrades under heavy load |
//! | `interval` | 100 ms | holdline; seed 003 updates every 1 s (see below) |
//! | `max_increase` (`φ_max`) | 4 | holdline (seed 003 takes its OCC parameters from Hilt & Widjaja without quoting them) |
//! | `min_acceptance` (`f_min`) | 0.01 | holdline, same reason |
//! | `queue_gate` | 20 ms | holdline: cut only while a queue shows (see below) |
//!
//! **Why 100 ms and not the seed's 1 s.** `ρ` cannot exceed 1, so one update lowers `f` by at
//! most the factor `ρ_target` = 0.9: going from `f = 1` to `f ≈ 0.09` (what 10× overload
//! needs) takes 22 updates. With a 1 s interval that is 22 s of over-admission (seed 003
//! §5.2.2 sees the resulting goodput dip after each load step); with 100 ms it is 2.2 s. The
//! work admitted meanwhile still builds a backlog of seconds: in the crate's virtual-clock
//! model (a 1,000 calls/s server offered 10,000 calls/s from time zero) it peaks near 7 s and
//! takes about 10 s to drain, with `f` at `f_min`, before OCC settles at `f ≈ 0.09`,
//! `ρ ≈ 0.9`.
//!
//! **Extension: `queue_growth`** (off by default). While a queue grows the server is
//! saturated and the admitted load is `1 + g` times its capacity, `g` being the growth of the
//! mean queueing delay per second (the same reasoning as [`queue-delay`](crate::queue_delay)).
//! With `queue_growth = true` and [`Signal::QueueDelay`] samples, OCC uses `ρ + max(g, 0)` in
//! place of `ρ`, which is not capped at 1: the same 10× step is cut within a few intervals,
//! the backlog peaks at 1–2 s (the first interval alone admits 0.9 s of work at `f = 1`) and
//! OCC settles within 3 s. Below saturation `g ≈ 0` and the algorithm is the paper's.
//!
//! **Extension: the queue gate** (`queue_gate`, on by default at 20 ms). An interval's
//! occupancy alone does not tell a busy interval from an overloaded one: on a real host
//! single 100 ms intervals range from 0.55 to 0.98 busy while the load per second is 0.7, and
//! the paper's rule cuts `f` after each busy one — 503s at 70% of capacity. With the gate,
//! the server's queueing delay decides *whether* to cut (a server whose messages do not wait
//! is not overloaded, however busy it was); the cut itself is the paper's:
//!
//! ```text
//! d = the larger of the interval's mean QueueDelay and mean NewRequestDelay
//! d ≤ gate, ρ < ρ_target         φ = min(ρ_target / ρ, φ_max)  (the paper's growth)
//! d ≤ gate, ρ ≥ ρ_target         φ = 1                          (never a cut without a queue)
//! d > 2·gate, or d > gate after
//!   an interval with d > gate    φ = ρ_target / ρ               (the paper's cut)
//! otherwise (a marginal queue
//!   in one interval only)        φ = 1                          (hold)
//! ```
//!
//! **Why a marginal queue must persist.** Held at 12,000 calls/s over UDP for 60 s (80% of
//! its core), one worker saw a single 100 ms interval whose new INVITEs waited 20.4 ms on
//! average, between intervals at 0-5 ms: the gate let the paper's rule cut `f` to 0.9, and
//! 254 calls got a 503 with the core a fifth idle. A real overload builds its queue over
//! several intervals or far past the gate at once, so the extra interval delays a cut by at
//! most one interval, and the paper's cut is at most `ρ_target` per interval anyway.
//!
//! An interval without delay samples follows the paper's rule. Two variants were tried under
//! a real CPU quota (`holdline lab udp-overload --cost-us 0 --cpu-quota 25`) and dropped: a
//! cut sharper than the paper's (by `gate / d`, at most ½ per interval) over-cut at
//! saturation (goodput 0.94 of saturation at 1× against 0.99), and growing `f` by 5% per
//! interval when busy without a queue over-admitted in overload (0.59 at 10× against 0.72,
//! 200 OK retransmissions +60%): under a quota the delay dips below the gate between
//! throttled periods, and the paper's 10% headroom is what absorbs the bursts.
//!
//! **Ceiling.** OCC holds `ρ` at `ρ_target`, rejections included: offered `R` × capacity, with
//! a rejection costing `c` of a call, the admitted calls get `(ρ_target − R·c)/(1 − c)` of the
//! capacity (0.9 at best, 0.81 at 10× with `c` = 1 %).
//!
//! **Input.** [`Signal::Busy`] (busy time since the last report: the server reports the time
//! its worker spent outside `poll` in each loop iteration) or [`Signal::Occupancy`] samples
//! (the simulator's CPU model). Rejections cost CPU too, and count in `ρ`: that is why local
//! control alone degrades at heavy overload (seed 003 §5.2.1).
//!
//! Gate: [`Gate::Ingress`](crate::Gate::Ingress).

use holdline_base::{Duration, Instant, Rng};

use crate::admission::{Admission, Decision, RejectReason};
use crate::algorithm::{Algorithm, ConfigError, check_positive, check_range};
use crate::common::{Acceptance, Counters, Interval, decides, secs};
use crate::controller::{Controller, ControllerFactory};
use crate::queue_delay::MAX_SAMPLE;
use crate::signal::Signal;
use crate::snapshot::Snapshot;

/// The configuration of [`Occ`].
#[derive(Clone, Debug, PartialEq)]
pub struct OccConfig {
    /// The measurement interval: `f` is updated once per interval. Default 100 ms.
    pub interval: Duration,
    /// `ρ_target`, the occupancy to hold, in `(0, 1]`. Default 0.9.
    pub target_occupancy: f64,
    /// `φ_max`, the largest factor by which `f` grows in one interval (finite, ≥ 1). Also the
    /// growth when the interval was idle (`ρ = 0`). Default 4.
    pub max_increase: f64,
    /// `f_min`, the smallest acceptance fraction, in `(0, 1]`. Default 0.01.
    pub min_acceptance: f64,
    /// Count the growth of the queueing delay as occupancy beyond 1 (a holdline extension,
    /// off by default: see the [module documentation](self)). Needs
    /// [`Signal::QueueDelay`] samples besides the busy time. Default `false`.
    pub queue_growth: bool,
    /// Cut `f` only in intervals whose queueing delay exceeds this (see the
    /// [module documentation](self)); `None`: the paper's rule, occupancy alone. Default 20 ms.
    pub queue_gate: Option<Duration>,
    /// `Retry-After` for the 503s. Default `None`.
    pub retry_after: Option<Duration>,
}

impl Default for OccConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_millis(100),
            target_occupancy: 0.9,
            max_increase: 4.0,
            min_acceptance: 0.01,
            queue_growth: false,
            queue_gate: Some(Duration::from_millis(20)),
            retry_after: None,
        }
    }
}

impl ControllerFactory for OccConfig {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Occupancy
    }

    fn validate(&self) -> Result<(), ConfigError> {
        check_positive("interval", self.interval)?;
        check_range(
            "target_occupancy",
            self.target_occupancy,
            f64::MIN_POSITIVE,
            1.0,
            "greater than 0, at most 1",
        )?;
        if let Some(gate) = self.queue_gate {
            check_positive("queue_gate", gate)?;
        }
        Acceptance::validate(self.max_increase, self.min_acceptance)
    }

    fn build(&self, now: Instant, rng: Rng) -> Result<Box<dyn Controller>, ConfigError> {
        Ok(Box::new(Occ::new(self.clone(), now, rng)?))
    }
}

/// Occupancy-based control (OCC).
#[derive(Clone, Debug)]
pub struct Occ {
    config: OccConfig,
    interval: Interval,
    acceptance: Acceptance,
    /// Busy time reported in the current interval.
    busy: Duration,
    /// Occupancy samples of the current interval: sum and count.
    samples: (f64, u32),
    /// Queueing-delay samples of the current interval (seconds): sum and count.
    delays: (f64, u64),
    /// New requests' queueing-delay samples of the current interval (seconds): sum and count.
    waits: (f64, u64),
    /// The mean queueing delay of the previous interval, in seconds.
    previous_delay: f64,
    /// The delay the queue gate saw in the previous interval, in seconds (0 without samples).
    previous_gate_delay: f64,
    /// `ρ` of the last completed interval.
    last: Option<f64>,
    intervals: u64,
    counters: Counters,
}

impl Occ {
    /// A controller with a validated `config`; its first interval starts at `now`, with
    /// `f = 1`.
    pub fn new(config: OccConfig, now: Instant, rng: Rng) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            interval: Interval::new(now, config.interval),
            acceptance: Acceptance::new(config.min_acceptance, config.max_increase, rng),
            config,
            busy: Duration::ZERO,
            samples: (0.0, 0),
            delays: (0.0, 0),
            waits: (0.0, 0),
            previous_delay: 0.0,
            previous_gate_delay: 0.0,
            last: None,
            intervals: 0,
            counters: Counters::default(),
        })
    }

    /// The current acceptance fraction `f`.
    pub fn acceptance(&self) -> f64 {
        self.acceptance.get()
    }

    /// The occupancy `ρ` of the last completed interval.
    pub fn occupancy(&self) -> Option<f64> {
        self.last
    }

    /// Ends the interval: measure `ρ` and update `f`.
    fn update(&mut self, elapsed: Duration) {
        let (sum, count) = self.samples;
        let rho = if count > 0 {
            sum / f64::from(count)
        } else if elapsed.is_zero() {
            return;
        } else {
            secs(self.busy) / secs(elapsed)
        };
        let rho = rho.clamp(0.0, 1.0);
        // Extension: while the queue grows, the server is saturated and the admitted load is
        // (1 + growth) times its capacity; count the growth as occupancy beyond 1.
        let (delay_sum, delay_count) = self.delays;
        let delay = if delay_count > 0 {
            delay_sum / delay_count as f64
        } else {
            0.0
        };
        let growth = if self.config.queue_growth && !elapsed.is_zero() {
            ((delay - self.previous_delay) / secs(elapsed)).max(0.0)
        } else {
            0.0
        };
        let load = rho + growth;
        let target = self.config.target_occupancy;
        let paper = if load > 0.0 {
            target / load
        } else {
            f64::INFINITY
        };
        let mean = |(sum, n): (f64, u64)| (n > 0).then(|| sum / n as f64);
        let gate_delay = match (mean(self.delays), mean(self.waits)) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let factor = match (self.config.queue_gate, gate_delay) {
            (Some(gate), Some(d)) => {
                let gate = secs(gate);
                if d <= gate {
                    // No queue: never a cut; below the target the paper's growth.
                    paper.max(1.0)
                } else if d > 2.0 * gate || self.previous_gate_delay > gate {
                    paper
                } else {
                    // A marginal queue in one interval only: hold.
                    1.0
                }
            }
            _ => paper,
        };
        self.previous_gate_delay = gate_delay.unwrap_or(0.0);
        self.acceptance.scale(factor);
        self.last = Some(rho);
        self.intervals = self.intervals.saturating_add(1);
        self.busy = Duration::ZERO;
        self.samples = (0.0, 0);
        self.delays = (0.0, 0);
        self.waits = (0.0, 0);
        self.previous_delay = delay;
    }
}

impl Controller for Occ {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Occupancy
    }

    fn admit(&mut self, _now: Instant, req: &Admission) -> Decision {
        if !decides(self.gate(), req) {
            return Decision::Admit;
        }
        if self.acceptance.draw_for(req.class) {
            self.counters.admit()
        } else {
            self.counters
                .reject(RejectReason::Occupancy, self.config.retry_after)
        }
    }

    fn on_signal(&mut self, _now: Instant, signal: Signal) {
        match signal {
            Signal::Busy(d) => self.busy = self.busy.saturating_add(d),
            Signal::Occupancy(rho) if !rho.is_nan() => {
                self.samples.0 += rho.clamp(0.0, 1.0);
                self.samples.1 = self.samples.1.saturating_add(1);
            }
            Signal::QueueDelay(d) => {
                self.delays.0 += secs(d.min(MAX_SAMPLE));
                self.delays.1 = self.delays.1.saturating_add(1);
            }
            Signal::NewRequestDelay(d) => {
                self.waits.0 += secs(d.min(MAX_SAMPLE));
                self.waits.1 = self.waits.1.saturating_add(1);
            }
            _ => {}
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
        let mut s = Snapshot::new(Algorithm::Occupancy);
        s.acceptance = Some(self.acceptance.get());
        s.occupancy = self.last;
        s.intervals = self.intervals;
        s.admitted = self.counters.admitted;
        s.rejected = self.counters.rejected;
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_millis(100);

    fn occ() -> Occ {
        match Occ::new(OccConfig::default(), Instant::ZERO, Rng::seed_from_u64(1)) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    /// Runs one interval with occupancy `rho` reported as busy time; returns the new `f`.
    fn interval(c: &mut Occ, rho: f64) -> f64 {
        let end = c.interval.deadline();
        c.on_signal(end, Signal::Busy(T.mul_f64(rho)));
        c.handle_timeout(end);
        c.acceptance()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn update_follows_the_formula() {
        let mut c = occ();
        assert_eq!(c.poll_timeout(), Some(Instant::ZERO + T));
        assert!(close(interval(&mut c, 1.0), 0.9));
        assert!(close(interval(&mut c, 1.0), 0.81));
        // ρ = 0.45 < target: f · 0.9/0.45 = 1.62 → clamped to 1.
        assert!(close(interval(&mut c, 0.45), 1.0));
        assert!(close(interval(&mut c, 0.9), 1.0));
        assert_eq!(c.snapshot().intervals, 4);
        assert!(c.occupancy().is_some_and(|rho| close(rho, 0.9)));
    }

    /// Runs one interval with occupancy `rho` and one queueing-delay sample of `delay_ms`
    /// (a new request's delay when `new_request`); returns the new `f`.
    fn interval_with_delay(c: &mut Occ, rho: f64, delay_ms: u64, new_request: bool) -> f64 {
        let end = c.interval.deadline();
        let d = Duration::from_millis(delay_ms);
        c.on_signal(
            end,
            if new_request {
                Signal::NewRequestDelay(d)
            } else {
                Signal::QueueDelay(d)
            },
        );
        interval(c, rho)
    }

    #[test]
    fn a_busy_interval_without_a_queue_is_not_cut() {
        let mut c = occ();
        // The paper's rule would cut to 0.9 / 0.98.
        assert!(close(interval_with_delay(&mut c, 0.98, 1, false), 1.0));
        assert!(close(interval_with_delay(&mut c, 1.0, 20, true), 1.0));
        // Without delay samples the paper's rule applies.
        assert!(close(interval(&mut c, 1.0), 0.9));
        // Busy, no queue: hold; less busy: the paper's growth.
        assert!(close(interval_with_delay(&mut c, 0.95, 2, false), 0.9));
        assert!(close(interval_with_delay(&mut c, 0.45, 2, false), 1.0));
    }

    #[test]
    fn a_queue_lets_the_papers_rule_cut() {
        let mut c = occ();
        // Past twice the gate, one interval is enough.
        assert!(close(interval_with_delay(&mut c, 1.0, 50, false), 0.9));
        // A new request's delay counts as well; the larger of the two means decides.
        assert!(close(interval_with_delay(&mut c, 1.0, 400, true), 0.81));
        let end = c.interval.deadline();
        c.on_signal(end, Signal::QueueDelay(Duration::from_millis(1)));
        c.on_signal(end, Signal::NewRequestDelay(Duration::from_millis(150)));
        c.on_signal(end, Signal::Busy(T));
        c.handle_timeout(end);
        assert!(close(c.acceptance(), 0.729));
        // Without the gate a busy interval is cut whatever the delay.
        let mut paper = Occ::new(
            OccConfig {
                queue_gate: None,
                ..OccConfig::default()
            },
            Instant::ZERO,
            Rng::seed_from_u64(1),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(close(
            interval_with_delay(&mut paper, 0.98, 1, false),
            0.9 / 0.98
        ));
    }

    #[test]
    fn a_marginal_queue_must_persist_to_cut() {
        let mut c = occ();
        // 30 ms (over the 20 ms gate, under twice it) after a quiet interval: hold.
        assert!(close(interval_with_delay(&mut c, 0.99, 2, true), 1.0));
        assert!(close(interval_with_delay(&mut c, 1.0, 30, true), 1.0));
        // The queue is still there an interval later: the paper's cut.
        assert!(close(interval_with_delay(&mut c, 1.0, 30, true), 0.9));
        assert!(close(interval_with_delay(&mut c, 1.0, 25, false), 0.81));
        // Gone for an interval: the next marginal one holds again.
        assert!(close(interval_with_delay(&mut c, 0.95, 5, false), 0.81));
        assert!(close(interval_with_delay(&mut c, 1.0, 30, false), 0.81));
        // An interval without delay samples does not count as a queue.
        assert!(close(interval(&mut c, 0.9), 0.81));
        assert!(close(interval_with_delay(&mut c, 1.0, 30, true), 0.81));
    }

    #[test]
    fn idle_interval_grows_by_max_increase() {
        let mut c = occ();
        for _ in 0..60 {
            interval(&mut c, 1.0);
        }
        assert!(
            close(c.acceptance(), 0.01),
            "floor f_min, got {}",
            c.acceptance()
        );
        assert!(close(interval(&mut c, 0.0), 0.04));
        assert!(close(interval(&mut c, 0.0), 0.16));
        assert!(close(interval(&mut c, 0.0), 0.64));
        assert!(close(interval(&mut c, 0.0), 1.0));
    }

    #[test]
    fn occupancy_samples_override_busy_time() {
        let mut c = occ();
        let end = Instant::ZERO + T;
        c.on_signal(end, Signal::Busy(T)); // would be ρ = 1
        c.on_signal(end, Signal::Occupancy(0.5));
        c.on_signal(end, Signal::Occupancy(2.0)); // clamped to 1
        c.on_signal(end, Signal::Occupancy(f64::NAN)); // ignored
        c.handle_timeout(end);
        assert_eq!(c.occupancy(), Some(0.75));
        assert!(close(c.acceptance(), 1.0));
    }

    #[test]
    fn late_timeout_normalises_by_the_real_length() {
        let mut c = occ();
        // 150 ms of busy time over a 300 ms interval (the driver was late): ρ = 0.5.
        c.on_signal(
            Instant::from_millis(300),
            Signal::Busy(Duration::from_millis(150)),
        );
        c.handle_timeout(Instant::from_millis(50)); // early: nothing
        assert_eq!(c.snapshot().intervals, 0);
        c.handle_timeout(Instant::from_millis(300));
        assert_eq!(c.occupancy(), Some(0.5));
        assert_eq!(c.poll_timeout(), Some(Instant::from_millis(400)));
        // Time going backwards is no time passing.
        c.handle_timeout(Instant::from_millis(10));
        assert_eq!(c.snapshot().intervals, 1);
    }

    #[test]
    fn rejects_carry_503_and_configured_retry_after() {
        let config = OccConfig {
            retry_after: Some(Duration::from_secs(2)),
            ..OccConfig::default()
        };
        let Ok(mut c) = Occ::new(config, Instant::ZERO, Rng::seed_from_u64(3)) else {
            panic!("valid config")
        };
        for _ in 0..100 {
            interval(&mut c, 1.0);
        }
        let mut rejected = None;
        for _ in 0..1000 {
            if let Decision::Reject(r) = c.admit(Instant::ZERO, &Admission::new_invite()) {
                rejected = Some(r);
                break;
            }
        }
        let Some(r) = rejected else {
            panic!("f = 0.01 must reject")
        };
        assert_eq!(r.status, 503);
        assert_eq!(r.retry_after, Some(Duration::from_secs(2)));
        assert_eq!(r.reason, RejectReason::Occupancy);
    }

    #[test]
    fn invalid_configs() {
        let bad = [
            OccConfig {
                interval: Duration::ZERO,
                ..OccConfig::default()
            },
            OccConfig {
                target_occupancy: 0.0,
                ..OccConfig::default()
            },
            OccConfig {
                target_occupancy: 1.5,
                ..OccConfig::default()
            },
            OccConfig {
                target_occupancy: f64::NAN,
                ..OccConfig::default()
            },
            OccConfig {
                max_increase: 0.5,
                ..OccConfig::default()
            },
            OccConfig {
                max_increase: f64::INFINITY,
                ..OccConfig::default()
            },
            OccConfig {
                min_acceptance: 0.0,
                ..OccConfig::default()
            },
            OccConfig {
                queue_gate: Some(Duration::ZERO),
                ..OccConfig::default()
            },
        ];
        for config in bad {
            assert!(config.validate().is_err(), "{config:?}");
        }
    }
}
