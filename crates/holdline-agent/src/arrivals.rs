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
