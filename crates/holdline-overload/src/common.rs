//! Pieces shared by the controllers: the measurement interval, the multiplicatively updated
//! acceptance fraction, and decision counters.

use holdline_base::{Duration, Instant, Rng};

use crate::admission::{
    Admission, Class, Decision, Gate, RejectReason, Rejection, SERVICE_UNAVAILABLE,
};
use crate::algorithm::{ConfigError, check_range};
use crate::snapshot::RejectCounts;

/// A periodic measurement interval that restarts when it is closed.
#[derive(Clone, Debug)]
pub(crate) struct Interval {
    start: Instant,
    period: Duration,
    /// The latest `now` seen: a smaller `now` later is treated as this one.
    latest: Instant,
}

impl Interval {
    pub(crate) fn new(now: Instant, period: Duration) -> Self {
        Self {
            start: now,
            period,
            latest: now,
        }
    }

    /// `now`, never earlier than any `now` seen before.
    pub(crate) fn clock(&mut self, now: Instant) -> Instant {
        if now > self.latest {
            self.latest = now;
        }
        self.latest
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.start + self.period
    }

    /// If the interval is over at `now`, restarts it at `now` and returns how long it lasted
    /// (at least the period; longer when the driver was late, and the late part counts as
    /// part of this interval rather than as empty intervals).
    pub(crate) fn close_if_due(&mut self, now: Instant) -> Option<Duration> {
        let now = self.clock(now);
        if now < self.deadline() {
            return None;
        }
        let elapsed = now - self.start;
        self.start = now;
        Some(elapsed)
    }
}

/// The acceptance fraction `f` of OCC-style control: the probability of admitting a new
/// INVITE, updated multiplicatively once per interval.
#[derive(Clone, Debug)]
pub(crate) struct Acceptance {
    f: f64,
    min: f64,
    max_increase: f64,
    rng: Rng,
}

impl Acceptance {
    /// Checks the parameters every acceptance-fraction controller shares: the largest
    /// multiplicative increase per interval (finite, at least 1) and the floor of the fraction
    /// (above 0, at most 1).
    pub(crate) fn validate(max_increase: f64, min_acceptance: f64) -> Result<(), ConfigError> {
        check_range(
            "max_increase",
            max_increase,
            1.0,
            f64::MAX,
            "finite, at least 1",
        )?;
        check_range(
            "min_acceptance",
            min_acceptance,
            f64::MIN_POSITIVE,
            1.0,
            "greater than 0, at most 1",
        )
    }

    /// Starts at `f = 1` (admit everything until a measurement says otherwise).
    pub(crate) fn new(min: f64, max_increase: f64, rng: Rng) -> Self {
        Self {
            f: 1.0,
            min,
            max_increase,
            rng,
        }
    }

    pub(crate) fn get(&self) -> f64 {
        self.f
    }

    /// `f ← clamp(f · min(factor, φ_max), f_min, 1)`; a NaN factor leaves `f` unchanged, an
    /// infinite one is `φ_max`.
    pub(crate) fn scale(&mut self, factor: f64) {
        if factor.is_nan() {
            return;
        }
        let factor = factor.clamp(0.0, self.max_increase);
        self.f = (self.f * factor).clamp(self.min, 1.0);
    }

    /// Whether a message of `class` is admitted: [`Class::draws`] Bernoulli draws with
    /// probability `f`, admitted if any succeeds (no draw at all when `f = 1`).
    pub(crate) fn draw_for(&mut self, class: Class) -> bool {
        self.f >= 1.0 || (0..class.draws().max(1)).any(|_| self.rng.chance(self.f))
    }
}

/// Admitted / rejected counters for the decisions a controller takes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counters {
    pub(crate) admitted: u64,
    pub(crate) rejected: RejectCounts,
}

impl Counters {
    pub(crate) fn admit(&mut self) -> Decision {
        self.admitted = self.admitted.saturating_add(1);
        Decision::Admit
    }

    pub(crate) fn reject(
        &mut self,
        reason: RejectReason,
        retry_after: Option<Duration>,
    ) -> Decision {
        self.reject_with(reason, SERVICE_UNAVAILABLE, retry_after)
    }

    /// Counts a rejection for `reason` answered `status` (a controller whose final response
    /// is configurable, DEOC's restrictor).
    pub(crate) fn reject_with(
        &mut self,
        reason: RejectReason,
        status: u16,
        retry_after: Option<Duration>,
    ) -> Decision {
        self.rejected.record(reason);
        Decision::Reject(Rejection {
            status,
            ..Rejection::service_unavailable(reason, retry_after)
        })
    }
}

/// Whether a controller deciding at `gate` has a decision to take about `req`: only new
/// INVITEs at its own gate. Everything else is admitted, uncounted.
pub(crate) fn decides(gate: Gate, req: &Admission) -> bool {
    req.class.is_rejectable() && req.gate == gate
}

/// `d` in seconds as `f64`.
pub(crate) fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// At `f = 0.5` a new call or registration is admitted half the time, a refresh three
    /// quarters of the time (two draws); at `f = 1` everything is.
    #[test]
    fn refreshes_get_two_draws() {
        let mut a = Acceptance::new(0.01, 2.0, Rng::seed_from_u64(7));
        let n = 20_000;
        let share = |a: &mut Acceptance, class| {
            (0..n).filter(|_| a.draw_for(class)).count() as f64 / f64::from(n)
        };
        assert_eq!(share(&mut a, Class::Refresh), 1.0);
        a.scale(0.5);
        let new = share(&mut a, Class::NewRegistration);
        let invite = share(&mut a, Class::NewInvite);
        let refresh = share(&mut a, Class::Refresh);
        assert!((0.48..0.52).contains(&new), "{new}");
        assert!((0.48..0.52).contains(&invite), "{invite}");
        assert!((0.73..0.77).contains(&refresh), "{refresh}");
    }
}
