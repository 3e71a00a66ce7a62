//! `holdline status`: what a running server is doing, read from its `/metrics` endpoint —
//! workers, calls and transactions, overload control, the location store and its commits,
//! and the state of every probed load-sharing target (issue 18: per-destination state in
//! metrics and in a status command).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

/// `holdline status`.
#[derive(Debug, clap::Args)]
pub(crate) struct StatusArgs {
    /// The server's metrics address (`holdline serve --metrics`, `[server] metrics`).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9480")]
    metrics: SocketAddr,
    /// Exit with status 3 when a probed target is down on any worker (for health checks);
    /// without it, 0 whenever the server answered.
    #[arg(long)]
    check: bool,
}

/// How long the status waits for the server.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Runs `holdline status`.
pub(crate) fn main(args: &StatusArgs) -> ExitCode {
    let text = match fetch(args.metrics) {
        Ok(t) => t,
        Err(e) => {
            eprintln!(
                "holdline status: no answer from the metrics endpoint {}: {e} (is `holdline serve` running with `--metrics {}`?)",
                args.metrics, args.metrics
            );
            return ExitCode::from(1);
        }
    };
    let samples = parse(&text);
    let report = Report::from_samples(&samples);
    print!("{}", report.render(args.metrics));
    if args.check && report.targets.values().any(|t| t.down_on > 0) {
        return ExitCode::from(3);
    }
    ExitCode::SUCCESS
}

/// `GET /metrics` from `addr`: the body, or why not.
fn fetch(addr: SocketAddr) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, TIMEOUT)?;
    s.set_read_timeout(Some(TIMEOUT))?;
    s.set_write_timeout(Some(TIMEOUT))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw.as_str(), ""));
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        let line = head.lines().next().unwrap_or("(nothing)");
        return Err(std::io::Error::other(format!("answered `{line}`")));
    }
    Ok(body.to_string())
}

/// One sample of the exposition: its name, labels and value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    pub(crate) name: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) value: f64,
}

/// The samples of a Prometheus text exposition (comments and malformed lines skipped).
pub(crate) fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.trim_end().rsplit_once(' ')?;
            let value = value.parse::<f64>().ok()?;
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}')?)),
                None => (series, BTreeMap::new()),
            };
            Some(Sample {
                name: name.to_string(),
                labels,
                value,
            })
        })
        .collect()
}

/// `a="x",b="y"` (no escaped quotes in holdline's labels).
fn parse_labels(s: &str) -> BTreeMap<String, String> {
    s.split("\",")
        .filter_map(|kv| {
            let (k, v) = kv.split_once("=\"")?;
            Some((k.to_string(), v.trim_end_matches('"').to_string()))
        })
        .collect()
}

/// One probed target across the workers.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct TargetState {
    /// Workers that count it up.
    up_on: usize,
    /// Workers that count it down.
    down_on: usize,
    /// The most probes failed in a row on any worker.
    failures: u64,
}

/// What `holdline status` prints.
#[derive(Debug, Default)]
pub(crate) struct Report {
    workers: usize,
    calls: f64,
    transactions: f64,
    lingering: f64,
    messages_in: f64,
    /// Each worker's overload acceptance ratio (1 = accepting everything).
    acceptance: BTreeMap<String, f64>,
    rejected: f64,
    bindings: Option<f64>,
    /// Commits, over 10 ms, longest (s).
    commits: Option<(f64, f64, f64)>,
    /// REGISTER 200s held for a commit, over 10 ms, longest (s).
    held: Option<(f64, f64, f64)>,
    /// By `transport target`.
    targets: BTreeMap<String, TargetState>,
}

impl Report {
    /// The probed targets as JSON: `{"udp 127.0.0.1:5071": {"state": "up", ...}}`.
    pub(crate) fn targets_json(&self) -> serde_json::Value {
        self.targets
            .iter()
            .map(|(name, t)| {
                (
                    name.clone(),
                    serde_json::json!({
                        "state": if t.down_on == 0 { "up" } else { "down" },
                        "up_on_workers": t.up_on,
                        "down_on_workers": t.down_on,
                        "probe_failures_in_a_row": t.failures,
                    }),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    }

    /// The summary as JSON (what `holdline ctl status --json` adds to the server's reply).
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "workers": self.workers,
            "messages_in": self.messages_in,
            "requests_in_progress": self.calls,
            "transactions": self.transactions,
            "transactions_lingering": self.lingering,
            "overload_acceptance": self.acceptance,
            "overload_rejected": self.rejected,
            "store_bindings": self.bindings,
            "store_commits": self.commits.map(|(n, slow, max)| serde_json::json!({"count": n, "over_10ms": slow, "longest_s": max})),
            "targets": self.targets_json(),
        })
    }

    pub(crate) fn from_samples(samples: &[Sample]) -> Self {
        let sum = |name: &str| -> f64 {
            samples
                .iter()
                .filter(|s| s.name == name)
                .map(|s| s.value)
                .sum()
        };
        let has = |name: &str| samples.iter().any(|s| s.name == name);
        let bucket = |name: &str, le: &str| -> f64 {
            samples
                .iter()
                .filter(|s| s.name == name && s.labels.get("le").map(String::as_str) == Some(le))
                .map(|s| s.value)
                .sum()
        };
        let histogram = |base: &str| {
            let count = format!("{base}_count");
            has(&count).then(|| {
                let n = sum(&count);
                let fast = bucket(&format!("{base}_bucket"), "0.010000");
                let max = samples
                    .iter()
                    .filter(|s| s.name == format!("{base}_max"))
                    .map(|s| s.value)
                    .fold(0.0, f64::max);
                (n, n - fast, max)
            })
        };
        let mut workers: Vec<&str> = samples
            .iter()
            .filter_map(|s| s.labels.get("worker").map(String::as_str))
            .collect();
        workers.sort_unstable();
        workers.dedup();
        let mut targets: BTreeMap<String, TargetState> = BTreeMap::new();
        for s in samples {
            let (Some(t), Some(tr)) = (s.labels.get("target"), s.labels.get("transport")) else {
                continue;
            };
            let e = targets.entry(format!("{tr} {t}")).or_default();
            match s.name.as_str() {
                "holdline_sip_target_up" if s.value >= 1.0 => e.up_on += 1,
                "holdline_sip_target_up" => e.down_on += 1,
                "holdline_sip_target_probe_failures" => {
                    e.failures = e.failures.max(s.value as u64);
                }
                _ => {}
            }
        }
        Self {
            workers: workers.len(),
            calls: sum("holdline_sip_active_calls"),
            transactions: sum("holdline_sip_active_transactions"),
            lingering: sum("holdline_txn_lingering"),
            messages_in: sum("holdline_messages_in_total"),
            acceptance: samples
                .iter()
                .filter(|s| s.name == "holdline_overload_acceptance_ratio")
                .filter_map(|s| Some((s.labels.get("worker")?.clone(), s.value)))
                .collect(),
            rejected: sum("holdline_overload_rejected_total"),
            bindings: has("holdline_store_bindings").then(|| sum("holdline_store_bindings")),
            commits: histogram("holdline_store_commit_seconds"),
            held: histogram("holdline_register_commit_wait_seconds").filter(|h| h.0 > 0.0),
            targets,
        }
    }

    pub(crate) fn render(&self, addr: impl std::fmt::Display) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(out, "holdline at {addr}: {} worker(s)", self.workers);
        let _ = writeln!(
            out,
            "  messages in: {:.0}; requests in progress: {:.0}; transactions: {:.0} ({:.0} lingering)",
            self.messages_in, self.calls, self.transactions, self.lingering
        );
        let acceptance: Vec<String> = self
            .acceptance
            .iter()
            .map(|(w, a)| format!("worker {w} {a:.2}"))
            .collect();
        let _ = writeln!(
            out,
            "  overload: acceptance {}; rejected {:.0}",
            if acceptance.is_empty() {
                "-".to_string()
            } else {
                acceptance.join(", ")
            },
            self.rejected
        );
        match self.bindings {
            Some(b) => {
                let _ = write!(out, "  store: {b:.0} binding(s)");
                if let Some((n, slow, max)) = self.commits {
                    let _ = write!(
                        out,
                        "; commits {n:.0} ({slow:.0} over 10 ms, longest {:.1} ms)",
                        max * 1e3
                    );
                }
                if let Some((n, slow, max)) = self.held {
                    let _ = write!(
                        out,
                        "; REGISTER 200s held for them {n:.0} ({slow:.0} over 10 ms, longest {:.1} ms)",
                        max * 1e3
                    );
                }
                out.push('\n');
            }
            None => out.push_str("  store: -\n"),
        }
        if self.targets.is_empty() {
            out.push_str("  probed targets: none\n");
        } else {
            out.push_str("  probed targets:\n");
            for (name, t) in &self.targets {
                let state = if t.down_on == 0 { "up" } else { "DOWN" };
                let _ = writeln!(
                    out,
                    "    {name:<28} {state:<4}  (up on {} of {} worker(s); {} probe(s) failed in a row)",
                    t.up_on,
                    t.up_on + t.down_on,
                    t.failures
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# HELP holdline_messages_in_total Messages received.
holdline_messages_in_total{worker=\"0\",transport=\"udp\"} 10
holdline_messages_in_total{worker=\"1\",transport=\"udp\"} 5
holdline_sip_active_calls{worker=\"0\"} 3
holdline_sip_active_calls{worker=\"1\"} 4
holdline_overload_acceptance_ratio{worker=\"0\"} 1
holdline_overload_acceptance_ratio{worker=\"1\"} 0.5
holdline_store_bindings{worker=\"0\"} 1000
holdline_store_commit_seconds_bucket{worker=\"0\",le=\"0.010000\"} 7
holdline_store_commit_seconds_bucket{worker=\"0\",le=\"+Inf\"} 9
holdline_store_commit_seconds_count{worker=\"0\"} 9
holdline_store_commit_seconds_max{worker=\"0\"} 0.25
holdline_sip_target_up{worker=\"0\",target=\"127.0.0.1:5071\",transport=\"udp\"} 1
holdline_sip_target_up{worker=\"1\",target=\"127.0.0.1:5071\",transport=\"udp\"} 1
holdline_sip_target_up{worker=\"0\",target=\"127.0.0.1:5072\",transport=\"udp\"} 0
holdline_sip_target_up{worker=\"1\",target=\"127.0.0.1:5072\",transport=\"udp\"} 1
holdline_sip_target_probe_failures{worker=\"0\",target=\"127.0.0.1:5072\",transport=\"udp\"} 3
not a sample
";

    #[test]
    fn the_report_sums_workers_and_marks_a_target_down_on_any_worker() {
        let r = Report::from_samples(&parse(TEXT));
        assert_eq!(r.workers, 2);
        assert_eq!((r.calls, r.messages_in), (7.0, 15.0));
        assert_eq!(r.bindings, Some(1000.0));
        assert_eq!(r.commits, Some((9.0, 2.0, 0.25)));
        assert_eq!(r.held, None);
        let up = &r.targets["udp 127.0.0.1:5071"];
        assert_eq!((up.up_on, up.down_on), (2, 0));
        let down = &r.targets["udp 127.0.0.1:5072"];
        assert_eq!((down.up_on, down.down_on, down.failures), (1, 1, 3));
        let text = r.render("127.0.0.1:9480".parse::<SocketAddr>().expect("addr"));
        assert!(text.contains("2 worker(s)"), "{text}");
        assert!(text.contains("worker 1 0.50"), "{text}");
        assert!(
            text.contains("commits 9 (2 over 10 ms, longest 250.0 ms)"),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.contains("udp 127.0.0.1:5072") && l.contains("DOWN")),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.contains("udp 127.0.0.1:5071") && l.contains(" up ")),
            "{text}"
        );
    }
}
