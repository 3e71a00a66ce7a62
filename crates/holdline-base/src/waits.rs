//! [`WaitHistogram`]: a fixed-bucket histogram of waits (a commit's fsync, a REGISTER's
//! 200 held for it), cheap enough to count every event and rendered as a Prometheus
//! histogram.

use core::fmt::Write as _;

/// The upper bounds, µs, of a [`WaitHistogram`]'s buckets (Prometheus `le`, in seconds
/// there): 0.5 ms to 2.5 s.
pub const WAIT_BOUNDS_US: [u64; 12] = [
    500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000,
];

/// Waits counted per bucket of [`WAIT_BOUNDS_US`], with their sum and the longest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitHistogram {
    /// Waits per bucket, not cumulative: `buckets[i]` took at most `WAIT_BOUNDS_US[i]` µs and
    /// more than the bound before; the last counts those above every bound.
    pub buckets: [u64; WAIT_BOUNDS_US.len() + 1],
    /// Their durations added up, µs.
    pub sum_us: u64,
    /// The longest, µs.
    pub max_us: u64,
}

impl WaitHistogram {
    /// Counts one wait of `us` microseconds.
    pub fn record(&mut self, us: u64) {
        let i = WAIT_BOUNDS_US.partition_point(|&b| b < us);
        self.buckets[i] += 1;
        self.sum_us = self.sum_us.saturating_add(us);
        self.max_us = self.max_us.max(us);
    }

    /// The number of waits counted.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Waits longer than `us` (a bucket bound; otherwise counted from the next bound up).
    pub fn slower_than(&self, us: u64) -> u64 {
        let i = WAIT_BOUNDS_US.partition_point(|&b| b <= us);
        self.buckets[i..].iter().sum()
    }

    /// Appends the histogram to `out` in Prometheus' text format as `name` (seconds; see
    /// [`render_histogram`]), `labels` on every line, and the longest wait as the gauge
    /// `name_max`.
    pub fn render_prometheus(&self, name: &str, labels: &str, out: &mut String) {
        render_histogram(
            out,
            name,
            labels,
            &WAIT_BOUNDS_US,
            &self.buckets,
            self.sum_us as f64 / 1e6,
        );
        let _ = writeln!(
            out,
            "{name}_max{} {}",
            braced(labels),
            self.max_us as f64 / 1e6
        );
    }
}

/// Appends one Prometheus histogram in the text format: `name_bucket{labels,le="…"}` for
/// each of `bounds_us` (in seconds, six decimals) and `+Inf`, cumulative, then `name_sum`
/// and `name_count`. `counts` holds one count per bucket, not cumulative, the last for
/// above every bound; `labels` (e.g. `worker="0"`) may be empty.
pub fn render_histogram(
    out: &mut String,
    name: &str,
    labels: &str,
    bounds_us: &[u64],
    counts: &[u64],
    sum_seconds: f64,
) {
    let sep = if labels.is_empty() { "" } else { "," };
    let mut cumulative = 0;
    for (bound, n) in bounds_us.iter().zip(counts) {
        cumulative += n;
        let le = *bound as f64 / 1e6;
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"{le:.6}\"}} {cumulative}"
        );
    }
    cumulative += counts.get(bounds_us.len()).copied().unwrap_or(0);
    let _ = writeln!(
        out,
        "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {cumulative}"
    );
    let braces = braced(labels);
    let _ = writeln!(out, "{name}_sum{braces} {sum_seconds:.9}");
    let _ = writeln!(out, "{name}_count{braces} {cumulative}");
}

/// `{labels}`, or nothing without labels.
fn braced(labels: &str) -> String {
    if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_fall_in_their_buckets_and_render_cumulatively() {
        let mut t = WaitHistogram::default();
        for us in [1, 500, 501, 10_000, 10_001, 3_000_000] {
            t.record(us);
        }
        assert_eq!(t.count(), 6);
        assert_eq!(t.buckets[0], 2, "at most 0.5 ms: {t:?}");
        assert_eq!(t.buckets[1], 1, "0.5-1 ms");
        assert_eq!(t.buckets[4], 1, "5-10 ms");
        assert_eq!(t.buckets[5], 1, "10-20 ms");
        assert_eq!(t.buckets[WAIT_BOUNDS_US.len()], 1, "above every bound");
        assert_eq!(t.slower_than(10_000), 2);
        assert_eq!(t.slower_than(500), 4);
        assert_eq!((t.sum_us, t.max_us), (3_021_003, 3_000_000));
        let mut text = String::new();
        t.render_prometheus("w_seconds", "", &mut text);
        for line in [
            "w_seconds_bucket{le=\"0.000500\"} 2\n",
            "w_seconds_bucket{le=\"0.010000\"} 4\n",
            "w_seconds_bucket{le=\"2.500000\"} 5\n",
            "w_seconds_bucket{le=\"+Inf\"} 6\n",
            "w_seconds_count 6\n",
            "w_seconds_sum 3.021003000\n",
            "w_seconds_max 3\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        let mut labelled = String::new();
        t.render_prometheus("w_seconds", "worker=\"1\"", &mut labelled);
        for line in [
            "w_seconds_bucket{worker=\"1\",le=\"+Inf\"} 6\n",
            "w_seconds_count{worker=\"1\"} 6\n",
            "w_seconds_max{worker=\"1\"} 3\n",
        ] {
            assert!(labelled.contains(line), "{line} in {labelled}");
        }
    }
}
