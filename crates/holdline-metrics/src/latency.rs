//! Latency histograms (HDR, microsecond resolution).

use hdrhistogram::Histogram;
use holdline_base::Duration;
use serde::Serialize;

/// Highest recordable latency: one hour, in microseconds (longer values are clamped).
const MAX_US: u64 = 3_600_000_000;

/// One latency distribution in microseconds, 3 significant digits, 1 µs to 1 h.
#[derive(Clone, Debug)]
pub struct Latency {
    hist: Histogram<u64>,
}

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}

impl Latency {
    /// An empty distribution.
    pub fn new() -> Self {
        // Bounds are constants that `new_with_bounds` accepts (low >= 1, high >= 2 * low,
        // sigfig <= 5); a failure here is a programming error caught by every test.
        #[allow(clippy::expect_used)]
        let hist = Histogram::new_with_bounds(1, MAX_US, 3).expect("valid histogram bounds");
        Self { hist }
    }

    /// Records one latency (clamped to 1 µs .. 1 h).
    pub fn record(&mut self, d: Duration) {
        let us = u64::try_from(d.as_micros())
            .unwrap_or(MAX_US)
            .clamp(1, MAX_US);
        // Saturating record: the value is within bounds by the clamp above.
        self.hist.saturating_record(us);
    }

    /// Number of recorded values.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// The `q` quantile (0..=1) in milliseconds, 0 when empty.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.hist.is_empty() {
            return 0.0;
        }
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &Self) {
        // Same bounds on both sides, so `add` cannot fail; saturate defensively.
        let _ = self.hist.add(&other.hist);
    }

    /// The summary written to JSON and printed in the final table.
    pub fn summary(&self) -> LatencySummary {
        let empty = self.hist.is_empty();
        let ms = |v: u64| if empty { 0.0 } else { v as f64 / 1000.0 };
        LatencySummary {
            count: self.hist.len(),
            min_ms: ms(self.hist.min()),
            mean_ms: if empty {
                0.0
            } else {
                self.hist.mean() / 1000.0
            },
            p50_ms: self.quantile_ms(0.50),
            p90_ms: self.quantile_ms(0.90),
            p95_ms: self.quantile_ms(0.95),
            p99_ms: self.quantile_ms(0.99),
            p999_ms: self.quantile_ms(0.999),
            max_ms: ms(self.hist.max()),
        }
    }

    /// The cumulative distribution as `(latency_ms, fraction <= latency)` points, one per
    /// distinct recorded bucket: what a CDF plot needs.
    pub fn cdf(&self) -> Vec<(f64, f64)> {
        let total = self.hist.len();
        if total == 0 {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut seen = 0u64;
        for v in self.hist.iter_recorded() {
            seen += v.count_at_value();
            out.push((
                self.hist.highest_equivalent(v.value_iterated_to()) as f64 / 1000.0,
                seen as f64 / total as f64,
            ));
        }
        out
    }
}

/// Quantiles of a [`Latency`] in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Number of values.
    pub count: u64,
    /// Smallest value.
    pub min_ms: f64,
    /// Mean.
    pub mean_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest value.
    pub max_ms: f64,
}

/// Every latency holdline measures, with one definition each.
#[derive(Clone, Debug, Default)]
pub struct Latencies {
    /// Post-selection delay: first INVITE sent to first 180 received (UAC).
    pub psd: Latency,
    /// Post-dial delay: first INVITE sent to the 200 OK received (UAC).
    pub pdd: Latency,
    /// The same for the calls whose first INVITE was sent at or after the steady-state start
    /// ([`Recorder::steady_from`](crate::Recorder::steady_from), `holdline load uac
    /// --steady-after`): the delay once a load step's transient is over. Empty without it.
    pub pdd_steady: Latency,
    /// Setup completion: first INVITE sent at the UAC to its ACK received at the UAS; only
    /// when both run on one clock (`holdline load pair`).
    pub setup: Latency,
    /// BYE sent to its 200 OK received (UAC).
    pub bye: Latency,
    /// REGISTER sent to its final response received.
    pub register: Latency,
    /// A user's first REGISTER sent to its first 2xx received: the time to get registered,
    /// Retry-After waits and retries included.
    pub registered: Latency,
}

impl Latencies {
    /// Names and distributions, in report order.
    pub fn named(&self) -> [(&'static str, &Latency); 7] {
        [
            ("psd", &self.psd),
            ("pdd", &self.pdd),
            ("pdd_steady", &self.pdd_steady),
            ("setup", &self.setup),
            ("bye", &self.bye),
            ("register", &self.register),
            ("registered", &self.registered),
        ]
    }

    /// Merges another agent's histograms.
    pub fn merge(&mut self, other: &Self) {
        self.psd.merge(&other.psd);
        self.pdd.merge(&other.pdd);
        self.pdd_steady.merge(&other.pdd_steady);
        self.setup.merge(&other.setup);
        self.bye.merge(&other.bye);
        self.register.merge(&other.register);
        self.registered.merge(&other.registered);
    }
}
