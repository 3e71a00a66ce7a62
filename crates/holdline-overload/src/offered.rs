//! The load offered towards a next hop, as an upstream tells it (seed 000's end-user-centric
//! fairness, l. 410).
//!
//! An overloaded receiver that shares its capacity among its upstreams in proportion to the
//! load each is *offered* (not the load each manages to forward, which smart forwarding has
//! already cut to what the receiver reads) must learn that load from them. An upstream
//! counts every new INVITE it would send to the next hop, forwarded or rejected, with an
//! [`OfferedRate`], and advertises the rate in the Via of the INVITEs it forwards there; the
//! receiver weighs each connection by it ([`DeferFairness::Offered`](crate::DeferFairness)).
//!
//! The rate is counted in buckets of 200 ms and smoothed with an exponentially weighted
//! moving average (weight 0.2 per bucket: a time constant of about a second), so that it
//! follows a load step within a few seconds and does not jump with every burst.

use holdline_base::{Duration, Instant};

/// Length of a counting bucket.
const BUCKET: Duration = Duration::from_millis(200);
/// Weight of each bucket's rate in the moving average.
const WEIGHT: f64 = 0.2;

/// Events per second, smoothed (see the module documentation).
#[derive(Clone, Debug, Default)]
pub struct OfferedRate {
    /// Start of the current bucket (`None`: nothing counted yet).
    start: Option<Instant>,
    /// Events in the current bucket.
    count: u64,
    /// The average over the buckets before the current one (`None`: none closed yet).
    rate: Option<f64>,
}

impl OfferedRate {
    /// A meter that has counted nothing.
    pub const fn new() -> Self {
        Self {
            start: None,
            count: 0,
            rate: None,
        }
    }

    /// Counts one event at `now`.
    pub fn record(&mut self, now: Instant) {
        self.roll(now);
        self.count += 1;
    }

    /// The rate at `now`, events per second: the moving average once a bucket has closed,
    /// before that what the first bucket counted so far over its length.
    pub fn rate(&mut self, now: Instant) -> f64 {
        self.roll(now);
        match self.rate {
            Some(r) => r,
            None => self.count as f64 / BUCKET.as_secs_f64(),
        }
    }

    /// Closes every bucket that ended by `now`.
    fn roll(&mut self, now: Instant) {
        let Some(start) = self.start else {
            self.start = Some(now);
            return;
        };
        let elapsed = now.saturating_duration_since(start);
        let closed = elapsed.as_nanos() / BUCKET.as_nanos();
        if closed == 0 {
            return;
        }
        // The bucket that was counting, then `closed - 1` empty ones.
        let first = self.count as f64 / BUCKET.as_secs_f64();
        let mut r = match self.rate {
            Some(r) => r + WEIGHT * (first - r),
            None => first,
        };
        let empty = (closed - 1).min(1_000) as i32;
        r *= (1.0 - WEIGHT).powi(empty);
        self.rate = Some(r);
        self.count = 0;
        let advance = BUCKET.as_nanos().saturating_mul(closed);
        self.start = Some(Instant::from_nanos(
            start
                .as_nanos()
                .saturating_add(u64::try_from(advance).unwrap_or(u64::MAX)),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Events every `gap_ms` from `from_ms` to `to_ms`.
    fn feed(m: &mut OfferedRate, from_ms: u64, to_ms: u64, gap_ms: u64) {
        let mut t = from_ms;
        while t < to_ms {
            m.record(Instant::from_millis(t));
            t += gap_ms;
        }
    }

    #[test]
    fn a_steady_load_is_measured() {
        let mut m = OfferedRate::new();
        // 100 calls/s for 5 s.
        feed(&mut m, 0, 5_000, 10);
        let r = m.rate(Instant::from_millis(5_000));
        assert!((r - 100.0).abs() < 1.0, "{r}");
    }

    #[test]
    fn a_step_is_followed_within_seconds() {
        let mut m = OfferedRate::new();
        feed(&mut m, 0, 5_000, 10);
        // Up to 300 calls/s for 3 s (15 buckets): within 5% of it.
        let mut t_us = 5_000_000u64;
        while t_us < 8_000_000 {
            m.record(Instant::from_nanos(t_us * 1_000));
            t_us += 3_333;
        }
        let r = m.rate(Instant::from_millis(8_000));
        assert!((r - 300.0).abs() < 15.0, "{r}");
    }

    #[test]
    fn silence_decays_towards_zero() {
        let mut m = OfferedRate::new();
        feed(&mut m, 0, 2_000, 10);
        let r = m.rate(Instant::from_millis(7_000));
        assert!(r < 1.0, "{r}");
        // A very long silence does not overflow anything.
        assert!(m.rate(Instant::from_millis(10_000_000)) < 1e-6);
    }
}
