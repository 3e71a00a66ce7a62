//! The status page of the metrics listener: `GET /` serves a self-contained HTML page
//! (inline CSS, JavaScript and SVG, nothing fetched from elsewhere) that polls
//! `GET /status.json` once a second and draws the server's state and live rates.
//!
//! `/status.json` is built from the very text `/metrics` serves (parsed back and summed over
//! workers), so the page never shows a number Prometheus cannot see. It carries totals, not
//! rates: the page derives rates from two successive answers and their `uptime_seconds`, so
//! the server keeps no state per viewer. The fields are documented in `docs/operations.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// The status page (`GET /`).
pub(crate) const PAGE: &str = include_str!("status.html");

/// One sample of a Prometheus text exposition.
#[derive(Debug, Clone, PartialEq)]
struct Sample<'a> {
    name: &'a str,
    labels: Vec<(&'a str, &'a str)>,
    value: f64,
}

impl Sample<'_> {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

/// The samples of `text` (comments and lines that do not parse are skipped).
fn parse(text: &str) -> Vec<Sample<'_>> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.trim_end().rsplit_once(' ')?;
            let value = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse::<f64>().ok()?,
            };
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let mut labels = Vec::new();
                    for pair in rest.strip_suffix('}')?.split(',') {
                        if pair.is_empty() {
                            continue;
                        }
                        let (k, v) = pair.split_once('=')?;
                        labels.push((k, v.trim_matches('"')));
                    }
                    (name, labels)
                }
                None => (series, Vec::new()),
            };
            Some(Sample {
                name,
                labels,
                value,
            })
        })
        .collect()
}

/// The samples of a parsed exposition, queried by family.
struct Samples<'a>(Vec<Sample<'a>>);

impl<'a> Samples<'a> {
    fn family(&self, name: &'a str) -> impl Iterator<Item = &Sample<'a>> {
        self.0.iter().filter(move |s| s.name == name)
    }

    /// The sum of a family over every worker (`None` when no worker exports it).
    fn sum(&self, name: &str) -> Option<f64> {
        let mut it = self.0.iter().filter(|s| s.name == name).peekable();
        it.peek()?;
        Some(it.map(|s| s.value).sum())
    }

    /// The sum of a family's samples whose `key` label is `value`.
    fn sum_where(&self, name: &str, key: &str, value: &str) -> f64 {
        self.0
            .iter()
            .filter(|s| s.name == name && s.label(key) == Some(value))
            .map(|s| s.value)
            .sum()
    }

    /// The sums of a family by the value of its `key` label, in label order.
    fn by_label(&self, name: &'a str, key: &str) -> BTreeMap<&'a str, f64> {
        let mut m = BTreeMap::new();
        for s in self.family(name) {
            if let Some(v) = s.labels.iter().find(|(k, _)| *k == key).map(|(_, v)| *v) {
                *m.entry(v).or_insert(0.0) += s.value;
            }
        }
        m
    }

    /// The value of a family per worker, in worker order.
    fn per_worker(&self, name: &str) -> Vec<f64> {
        let mut v: Vec<(usize, f64)> = self
            .0
            .iter()
            .filter(|s| s.name == name)
            .filter_map(|s| Some((s.label("worker")?.parse().ok()?, s.value)))
            .collect();
        v.sort_by_key(|&(w, _)| w);
        v.into_iter().map(|(_, x)| x).collect()
    }

    /// A histogram summed over workers: the bucket bounds (s) and cumulative counts.
    fn histogram(&self, name: &str) -> (Vec<f64>, Vec<f64>) {
        let bucket = format!("{name}_bucket");
        let mut by_le: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        for s in self.0.iter().filter(|s| s.name == bucket) {
            let Some(le) = s.label("le") else { continue };
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                match le.parse::<f64>() {
                    Ok(b) => b,
                    Err(_) => continue,
                }
            };
            // Ordered by the bound's bits: positive floats order like their bits.
            let e = by_le.entry(bound.to_bits()).or_insert((bound, 0.0));
            e.1 += s.value;
        }
        by_le.into_values().unzip()
    }
}

/// A JSON number (finite) or `null`.
fn num(v: Option<f64>) -> String {
    match v {
        Some(x) if x.is_finite() => {
            if x.fract() == 0.0 && x.abs() < 9e15 {
                format!("{}", x as i64)
            } else {
                format!("{x}")
            }
        }
        _ => "null".to_owned(),
    }
}

/// A JSON string (the names written here are label values and versions: quotes and
/// backslashes escaped, control characters dropped).
fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn object<'a>(entries: impl IntoIterator<Item = (&'a str, f64)>) -> String {
    let body: Vec<String> = entries
        .into_iter()
        .map(|(k, v)| format!("{}:{}", string(k), num(Some(v))))
        .collect();
    format!("{{{}}}", body.join(","))
}

fn array(values: &[f64]) -> String {
    let body: Vec<String> = values.iter().map(|&v| num(Some(v))).collect();
    format!("[{}]", body.join(","))
}

/// The prefixes of the controllers' families and the source each stands for.
const CONTROLLERS: [(&str, &str); 3] = [
    ("holdline_overload", "local"),
    ("holdline_forward", "forward"),
    ("holdline_feedback", "feedback"),
];

/// `/status.json` from the Prometheus text of `/metrics`, the time since the server started
/// and its number of workers.
pub(crate) fn json(metrics: &str, uptime: Duration, workers: usize) -> String {
    let s = Samples(parse(metrics));
    let mut out = String::with_capacity(4096);
    let _ = write!(
        out,
        "{{\"version\":{},\"uptime_seconds\":{:.3},\"workers\":{workers}",
        string(env!("CARGO_PKG_VERSION")),
        uptime.as_secs_f64()
    );
    let invites = s.sum_where("holdline_sip_requests_in_total", "method", "INVITE");
    let _ = write!(
        out,
        ",\"invites_total\":{},\"requests_total\":{},\"responses_out_total\":{}",
        num(Some(invites)),
        object(s.by_label("holdline_sip_requests_in_total", "method")),
        object(s.by_label("holdline_sip_responses_out_total", "class")),
    );
    let _ = write!(
        out,
        ",\"messages_in_total\":{},\"messages_out_total\":{}",
        num(s.sum("holdline_messages_in_total")),
        num(s.sum("holdline_messages_out_total")),
    );
    // 503s: by who decided (the gate for this server's load, the forward gate for a next
    // hop's), and by the controllers' reasons.
    let _ = write!(
        out,
        ",\"rejected_total\":{{\"local\":{},\"forward\":{}}}",
        num(Some(
            s.sum("holdline_sip_rejected_overload_total").unwrap_or(0.0)
        )),
        num(Some(
            s.sum("holdline_sip_rejected_forward_total").unwrap_or(0.0)
        )),
    );
    let mut reasons: Vec<(String, f64)> = Vec::new();
    for (prefix, source) in CONTROLLERS {
        let name = format!("{prefix}_rejected_total");
        for (reason, n) in s.by_label(&name, "reason") {
            reasons.push((format!("{source}/{reason}"), n));
        }
    }
    // New INVITEs that waited too long on their own UDP sockets: answered 503 by the gate
    // without a controller's reason.
    if let Some(n) = s.sum("holdline_overload_stale_invites_total") {
        reasons.push(("local/stale_invite".to_owned(), n));
    }
    let _ = write!(
        out,
        ",\"rejected_by_reason\":{}",
        object(reasons.iter().map(|(k, v)| (k.as_str(), *v)))
    );
    let algorithm = s
        .family("holdline_overload_algorithm")
        .find_map(|x| x.label("algorithm"))
        .unwrap_or("none");
    let acceptance = s.per_worker("holdline_overload_acceptance_ratio");
    let occupancy = s.per_worker("holdline_overload_occupancy_ratio");
    let throttling = acceptance.iter().any(|&f| f < 1.0);
    let _ = write!(
        out,
        ",\"overload\":{{\"algorithm\":{},\"state\":{},\"acceptance\":{},\"occupancy\":{},\"admitted_total\":{}}}",
        string(algorithm),
        string(if throttling { "throttling" } else { "normal" }),
        array(&acceptance),
        array(&occupancy),
        num(s.sum("holdline_overload_admitted_total")),
    );
    let _ = write!(
        out,
        ",\"transactions\":{{\"active\":{},\"lingering\":{},\"calls_in_progress\":{},\"memory_bytes\":{}}}",
        num(s.sum("holdline_sip_active_transactions")),
        num(s.sum("holdline_txn_lingering")),
        num(s.sum("holdline_sip_active_calls")),
        num(s.sum("holdline_txn_memory_bytes")),
    );
    let _ = write!(
        out,
        ",\"bindings\":{}",
        num(s.sum("holdline_store_bindings"))
    );
    let _ = write!(
        out,
        ",\"connections\":{{\"open\":{},\"accepted_total\":{},\"outbound_total\":{}}}",
        num(s.sum("holdline_connections_open")),
        num(s.sum("holdline_connections_accepted_total")),
        num(s.sum("holdline_connections_outbound_total")),
    );
    let _ = write!(
        out,
        ",\"memory\":{{\"rss_bytes\":{},\"transactions_bytes\":{}}}",
        num(s.sum("process_resident_memory_bytes")),
        num(s.sum("holdline_txn_memory_bytes")),
    );
    let _ = write!(
        out,
        ",\"drops_total\":{}",
        num(Some(
            s.sum("holdline_drops_total").unwrap_or(0.0)
                + s.sum("holdline_sip_drops_total").unwrap_or(0.0)
        ))
    );
    let _ = write!(
        out,
        ",\"worker_busy_seconds_total\":{},\"worker_seconds_total\":{}",
        array(&s.per_worker("holdline_worker_busy_seconds_total")),
        array(&s.per_worker("holdline_worker_seconds_total")),
    );
    out.push_str(",\"latency\":{");
    for (i, (key, name)) in [
        ("queue_delay", "holdline_queue_delay_seconds"),
        ("invite_queue_delay", "holdline_invite_queue_delay_seconds"),
        ("processing", "holdline_processing_seconds"),
    ]
    .into_iter()
    .enumerate()
    {
        let (le, counts) = s.histogram(name);
        // +Inf is not JSON: the last bound is written as null.
        let le: Vec<String> = le.iter().map(|&b| num(Some(b))).collect();
        let _ = write!(
            out,
            "{}{}:{{\"le\":[{}],\"counts\":{}}}",
            if i > 0 { "," } else { "" },
            string(key),
            le.join(","),
            array(&counts)
        );
    }
    out.push('}');
    // The server does not see post-dial delay (the time from an INVITE to its 180 at the
    // caller); `holdline load` measures it. The page shows the server's share instead.
    out.push_str(",\"pdd_seconds\":null}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# HELP holdline_messages_in_total x
# TYPE holdline_messages_in_total counter
holdline_messages_in_total{worker=\"0\",transport=\"udp\"} 10
holdline_messages_in_total{worker=\"1\",transport=\"udp\"} 5
holdline_connections_open{worker=\"0\"} 2
holdline_connections_open{worker=\"1\"} 1
holdline_queue_delay_seconds_bucket{worker=\"0\",le=\"0.000001\"} 1
holdline_queue_delay_seconds_bucket{worker=\"0\",le=\"+Inf\"} 4
holdline_queue_delay_seconds_bucket{worker=\"1\",le=\"0.000001\"} 2
holdline_queue_delay_seconds_bucket{worker=\"1\",le=\"+Inf\"} 3
holdline_sip_requests_in_total{worker=\"0\",method=\"INVITE\"} 7
holdline_sip_requests_in_total{worker=\"1\",method=\"INVITE\"} 3
holdline_sip_requests_in_total{worker=\"1\",method=\"BYE\"} 2
holdline_sip_rejected_overload_total{worker=\"0\"} 4
holdline_overload_algorithm{worker=\"0\",algorithm=\"occ\"} 1
holdline_overload_acceptance_ratio{worker=\"1\"} 0.5
holdline_overload_acceptance_ratio{worker=\"0\"} 1
holdline_overload_rejected_total{worker=\"0\",reason=\"occupancy\"} 3
holdline_overload_rejected_total{worker=\"1\",reason=\"occupancy\"} 1
holdline_store_bindings{worker=\"0\"} 12
process_resident_memory_bytes 1048576
";

    #[test]
    fn sums_over_workers_by_label() {
        let j = json(TEXT, Duration::from_millis(1500), 2);
        let v: serde_json::Value = serde_json::from_str(&j).expect("valid JSON");
        assert_eq!(v["uptime_seconds"], 1.5);
        assert_eq!(v["workers"], 2);
        assert_eq!(v["invites_total"], 10);
        assert_eq!(v["requests_total"]["BYE"], 2);
        assert_eq!(v["messages_in_total"], 15);
        assert_eq!(v["connections"]["open"], 3);
        assert_eq!(v["rejected_total"]["local"], 4);
        assert_eq!(v["rejected_by_reason"]["local/occupancy"], 4);
        assert_eq!(v["overload"]["algorithm"], "occ");
        assert_eq!(v["overload"]["state"], "throttling");
        assert_eq!(v["overload"]["acceptance"], serde_json::json!([1, 0.5]));
        assert_eq!(v["bindings"], 12);
        assert_eq!(v["memory"]["rss_bytes"], 1_048_576);
        assert_eq!(
            v["latency"]["queue_delay"]["le"],
            serde_json::json!([0.000001, null])
        );
        assert_eq!(
            v["latency"]["queue_delay"]["counts"],
            serde_json::json!([3, 7])
        );
        // Absent families are null, not zero.
        assert!(v["transactions"]["active"].is_null());
        assert!(v["pdd_seconds"].is_null());
    }

    #[test]
    fn page_is_self_contained() {
        // No external assets: nothing loaded from another origin or another path.
        for bad in ["http://", "https://", "src=", "<link", "@import", "url("] {
            assert!(!PAGE.contains(bad), "status page contains `{bad}`");
        }
        assert!(PAGE.contains("status.json"));
    }
}
