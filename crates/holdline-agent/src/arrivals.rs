//! Arrival processes with hard stops.

use holdline_base::{Duration, Instant, Rng};

use crate::ArrivalKind;

/// Generates arrival instants at `rate` per second from `start`, at most `limit` of them and
/// none at or after `end`.
#[derive(Clone, Debug)]
pub struct Arrivals {
    kind: ArrivalKind,
    mean_ns: f64,
    start: Instant,
    next: Option<Instant>,
    emitted: u64,
    limit: Option<u64>,
    end: Option<Instant>,
    /// A linearly changing rate instead of `mean_ns` (see [`Arrivals::ramp`]).
    ramp: Option<Ramp>,
}

/// A rate `r0 + 2a·τ` per nanosecond at `τ` ns after the start: the expected arrivals by `τ`
/// are `Λ(τ) = r0·τ + a·τ²`. Arrival `k` comes when `Λ` reaches its level: `k` for constant
/// arrivals, the sum of `k + 1` unit exponentials for Poisson ones (the time-rescaling of a
/// unit-rate Poisson process: exactly a Poisson process of the changing rate).
#[derive(Clone, Copy, Debug)]
struct Ramp {
    r0: f64,
    a: f64,
    level: f64,
}

impl Ramp {
    /// `τ` (ns) where `Λ(τ) = level`, if the rate reaches it (a falling ramp may not).
    fn time_of(&self, level: f64) -> Option<f64> {
        if level <= 0.0 {
            return Some(0.0);
        }
        let disc = self.r0 * self.r0 + 4.0 * self.a * level;
        // The root of a·τ² + r0·τ − level in a form without cancellation.
        let den = self.r0 + disc.max(0.0).sqrt();
        (disc >= 0.0 && den > 0.0).then(|| 2.0 * level / den)
    }
}

impl Arrivals {
    /// A process; a rate of zero or less generates nothing.
    pub fn new(
        kind: ArrivalKind,
        rate: f64,
        start: Instant,
        limit: Option<u64>,
        duration: Option<Duration>,
        rng: &mut Rng,
    ) -> Self {
        let mean_ns = if rate > 0.0 && rate.is_finite() {
            1e9 / rate
        } else {
            f64::INFINITY
        };
        let end = duration.map(|d| start.checked_add(d).unwrap_or(Instant::MAX));
        let mut a = Self {
            kind,
            mean_ns,
            start,
            next: None,
            emitted: 0,
            limit,
            end,
            ramp: None,
        };
        if mean_ns.is_finite() && limit != Some(0) {
            // The first call comes one gap after the start (a Poisson process has no arrival
            // at time zero); a constant process starts at once.
            let first = match kind {
                ArrivalKind::Constant => start,
                ArrivalKind::Poisson => a.after(start, rng),
            };
            a.next = a.admissible(first);
        }
        a
    }

    /// A process whose rate changes linearly from `from_rate` at `start` to `to_rate` at the
    /// end of `duration` (a ramp; arrivals stop there): Poisson arrivals of that rate, or
    /// constant ones — arrival `k` when the expected count `∫ rate` reaches `k`, so that a
    /// ramp has exactly the integral of its rate, rounded up. Rates below zero count as zero;
    /// a ramp with both rates zero, or no duration, generates nothing.
    pub fn ramp(
        kind: ArrivalKind,
        from_rate: f64,
        to_rate: f64,
        start: Instant,
        limit: Option<u64>,
        duration: Duration,
        rng: &mut Rng,
    ) -> Self {
        let per_ns = |r: f64| if r.is_finite() { r.max(0.0) / 1e9 } else { 0.0 };
        let (r0, r1) = (per_ns(from_rate), per_ns(to_rate));
        let d = duration.as_nanos() as f64;
        let mut a = Self {
            kind,
            mean_ns: f64::INFINITY,
            start,
            next: None,
            emitted: 0,
            limit,
            end: Some(start.checked_add(duration).unwrap_or(Instant::MAX)),
            ramp: Some(Ramp {
                r0,
                a: if d > 0.0 { (r1 - r0) / (2.0 * d) } else { 0.0 },
                level: 0.0,
            }),
        };
        if d > 0.0 && (r0 > 0.0 || r1 > 0.0) && limit != Some(0) {
            let first = a.ramp_next(rng);
            a.next = first.and_then(|t| a.admissible(t));
        }
        a
    }

    /// The next arrival of a ramp: its level raised by one (constant) or by a unit
    /// exponential (Poisson), turned into time.
    fn ramp_next(&mut self, rng: &mut Rng) -> Option<Instant> {
        let kind = self.kind;
        let emitted = self.emitted;
        let r = self.ramp.as_mut()?;
        r.level = match kind {
            ArrivalKind::Constant => emitted as f64,
            ArrivalKind::Poisson => r.level + rng.exp(1.0),
        };
        let tau = r.time_of(r.level)?;
        Some(
            self.start
                .checked_add(Duration::from_nanos(tau.min(1e18) as u64))
                .unwrap_or(Instant::MAX),
        )
    }

    fn after(&self, t: Instant, rng: &mut Rng) -> Instant {
        let gap = match self.kind {
            ArrivalKind::Poisson => rng.exp(self.mean_ns),
            ArrivalKind::Constant => self.mean_ns,
        };
        t.checked_add(Duration::from_nanos(gap.min(1e18) as u64))
            .unwrap_or(Instant::MAX)
    }

    fn admissible(&self, t: Instant) -> Option<Instant> {
        if self.limit.is_some_and(|l| self.emitted >= l) || self.end.is_some_and(|e| t >= e) {
            None
        } else {
            Some(t)
        }
    }

    /// The next arrival, if any remains.
    pub fn next(&self) -> Option<Instant> {
        self.next
    }

    /// Whether no arrival remains.
    pub fn is_done(&self) -> bool {
        self.next.is_none()
    }

    /// How many arrivals were generated.
    pub fn emitted(&self) -> u64 {
        self.emitted
    }

    /// When the process started.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// If an arrival is due at `now`, consumes it and returns its scheduled instant.
    pub fn poll(&mut self, now: Instant, rng: &mut Rng) -> Option<Instant> {
        let due = self.next.filter(|t| *t <= now)?;
        self.emitted += 1;
        if self.ramp.is_some() {
            self.next = self.ramp_next(rng).and_then(|t| self.admissible(t));
            return Some(due);
        }
        let t = match self.kind {
            // Constant spacing from the start avoids accumulating rounding errors.
            ArrivalKind::Constant => self
                .start
                .checked_add(Duration::from_nanos(
                    (self.mean_ns * self.emitted as f64).min(1e18) as u64,
                ))
                .unwrap_or(Instant::MAX),
            ArrivalKind::Poisson => self.after(due, rng),
        };
        self.next = self.admissible(t);
        Some(due)
    }

    /// Stops the process (no further arrival).
    pub fn stop(&mut self) {
        self.next = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gaps(kind: ArrivalKind, rate: f64, n: u64, seed: u64) -> Vec<f64> {
        let mut rng = Rng::seed_from_u64(seed);
        let start = Instant::from_secs(1);
        let mut a = Arrivals::new(kind, rate, start, Some(n), None, &mut rng);
        let mut out = Vec::new();
        let mut last = start;
        while let Some(t) = a.next() {
            let got = a.poll(t, &mut rng);
            assert_eq!(got, Some(t));
            out.push(t.saturating_duration_since(last).as_nanos() as f64 / 1e6);
            last = t;
        }
        assert_eq!(a.emitted(), n, "the call count is a hard stop");
        out
    }

    #[test]
    fn poisson_mean_and_dispersion() {
        let n = 200_000;
        let g = gaps(ArrivalKind::Poisson, 1000.0, n, 42);
        let mean = g.iter().sum::<f64>() / n as f64;
        let var = g.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1) as f64;
        // Exponential gaps with mean 1 ms: the sample mean's sd is 1/sqrt(n) ≈ 0.22%; allow
        // ~5 sd. The coefficient of variation of an exponential is 1.
        assert!((mean - 1.0).abs() < 0.011, "mean gap {mean} ms");
        let cv = var.sqrt() / mean;
        assert!((cv - 1.0).abs() < 0.02, "coefficient of variation {cv}");
        // Counts per 100 ms window: a Poisson count has variance == mean (dispersion 1).
        let mut t = 0.0;
        let mut counts = vec![0u64; 2001];
        for x in &g {
            t += x;
            let w = (t / 100.0) as usize;
            if w < counts.len() {
                counts[w] += 1;
            }
        }
        let counts = &counts[..1999];
        let m = counts.iter().sum::<u64>() as f64 / counts.len() as f64;
        let v =
            counts.iter().map(|&c| (c as f64 - m).powi(2)).sum::<f64>() / (counts.len() - 1) as f64;
        assert!((m - 100.0).abs() < 1.5, "mean count {m}");
        assert!((v / m - 1.0).abs() < 0.12, "index of dispersion {}", v / m);
        // Memorylessness: P(gap > mean) = e^-1.
        let above = g.iter().filter(|&&x| x > 1.0).count() as f64 / n as f64;
        assert!(
            (above - (-1f64).exp()).abs() < 0.006,
            "P(gap > mean) = {above}"
        );
    }

    #[test]
    fn poisson_streams_depend_on_the_seed_only() {
        assert_eq!(
            gaps(ArrivalKind::Poisson, 50.0, 100, 1),
            gaps(ArrivalKind::Poisson, 50.0, 100, 1)
        );
        assert_ne!(
            gaps(ArrivalKind::Poisson, 50.0, 100, 1),
            gaps(ArrivalKind::Poisson, 50.0, 100, 2)
        );
    }

    #[test]
    fn constant_gaps_are_exact() {
        let g = gaps(ArrivalKind::Constant, 3.0, 10, 1);
        assert_eq!(g[0], 0.0);
        assert!(
            g[1..].iter().all(|x| (x - 333.333333).abs() < 0.001),
            "{g:?}"
        );
    }

    /// Arrivals of a ramp over `secs` seconds from `r0` to `r1` per second, as offsets in
    /// seconds.
    fn ramp_times(kind: ArrivalKind, r0: f64, r1: f64, secs: u64, seed: u64) -> Vec<f64> {
        let mut rng = Rng::seed_from_u64(seed);
        let start = Instant::from_secs(2);
        let mut a = Arrivals::ramp(
            kind,
            r0,
            r1,
            start,
            None,
            Duration::from_secs(secs),
            &mut rng,
        );
        let mut out = Vec::new();
        while let Some(t) = a.next() {
            assert_eq!(a.poll(t, &mut rng), Some(t));
            out.push(t.saturating_duration_since(start).as_nanos() as f64 / 1e9);
        }
        out
    }

    #[test]
    fn a_constant_ramp_has_exactly_the_integral_of_its_rate() {
        // (from, to, seconds): the integral is (from + to) / 2 · seconds.
        for (r0, r1, secs) in [
            (0.0, 100.0, 10),
            (100.0, 0.0, 10),
            (10.0, 250.0, 7),
            (300.0, 20.0, 3),
            (50.0, 50.0, 4),
        ] {
            let t = ramp_times(ArrivalKind::Constant, r0, r1, secs, 1);
            let integral = (r0 + r1) / 2.0 * secs as f64;
            assert!(
                (t.len() as f64 - integral).abs() <= 1.0,
                "{r0} -> {r1} over {secs} s: {} arrivals, integral {integral}",
                t.len()
            );
            // Every prefix too: the count by time x is the integral up to x (± 1).
            let slope = (r1 - r0) / secs as f64;
            for (k, x) in t.iter().enumerate() {
                let by_x = r0 * x + slope * x * x / 2.0;
                assert!(
                    (k as f64 - by_x).abs() <= 1.0 + 1e-6,
                    "arrival {k} at {x} s, integral {by_x}"
                );
            }
            assert!(t.iter().all(|x| *x < secs as f64));
        }
    }

    #[test]
    fn a_poisson_ramp_follows_the_changing_rate() {
        // 0 -> 2000/s over 10 s: 10,000 arrivals expected, sd 100. Per second i the expected
        // count is 200·i + 100 (sd ≤ 45): each within 5 sd, the total within 4 sd.
        let t = ramp_times(ArrivalKind::Poisson, 0.0, 2000.0, 10, 7);
        let n = t.len() as f64;
        assert!((n - 10_000.0).abs() < 400.0, "{n} arrivals");
        for i in 0..10 {
            let c = t
                .iter()
                .filter(|x| **x >= i as f64 && **x < (i + 1) as f64)
                .count() as f64;
            let want = 200.0 * i as f64 + 100.0;
            assert!(
                (c - want).abs() < 5.0 * want.sqrt() + 1.0,
                "second {i}: {c} arrivals, {want} expected"
            );
        }
        // Falling: 1000 -> 0/s over 4 s, 2,000 expected (sd 45); the last second has 125.
        let t = ramp_times(ArrivalKind::Poisson, 1000.0, 0.0, 4, 8);
        assert!(
            (t.len() as f64 - 2000.0).abs() < 200.0,
            "{} arrivals",
            t.len()
        );
        let last = t.iter().filter(|x| **x >= 3.0).count() as f64;
        assert!((last - 125.0).abs() < 60.0, "{last} in the last second");
        // Deterministic per seed.
        assert_eq!(
            ramp_times(ArrivalKind::Poisson, 5.0, 50.0, 3, 9),
            ramp_times(ArrivalKind::Poisson, 5.0, 50.0, 3, 9)
        );
        assert_ne!(
            ramp_times(ArrivalKind::Poisson, 5.0, 50.0, 3, 9),
            ramp_times(ArrivalKind::Poisson, 5.0, 50.0, 3, 10)
        );
        assert!(ramp_times(ArrivalKind::Poisson, 0.0, 0.0, 3, 9).is_empty());
    }

    #[test]
    fn duration_bound_excludes_the_end() {
        let mut rng = Rng::seed_from_u64(3);
        let start = Instant::ZERO;
        let mut a = Arrivals::new(
            ArrivalKind::Poisson,
            10_000.0,
            start,
            None,
            Some(Duration::from_millis(100)),
            &mut rng,
        );
        let mut n = 0;
        while let Some(t) = a.next() {
            assert!(t < Instant::from_millis(100));
            a.poll(t, &mut rng);
            n += 1;
        }
        assert!(
            (800..1200).contains(&n),
            "{n} arrivals in 100 ms at 10,000/s"
        );
        // Not due yet: nothing consumed.
        let mut b = Arrivals::new(ArrivalKind::Constant, 1.0, start, Some(5), None, &mut rng);
        b.poll(start, &mut rng);
        assert_eq!(b.poll(Instant::from_millis(999), &mut rng), None);
        assert_eq!(b.emitted(), 1);
    }
}
