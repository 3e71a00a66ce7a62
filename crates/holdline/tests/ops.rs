//! Operations with the tools operators run (issue 22, item 5): the Prometheus rules in
//! `ops/prometheus/` checked and unit-tested with `promtool`, the Grafana dashboard in
//! `ops/grafana/` checked as JSON, and a real Prometheus (Debian's `prometheus`) that scrapes a
//! running `holdline serve` with the rules loaded, queried through its HTTP API: the server's
//! metrics and the recording rules arrive, every rule evaluates without error, and every
//! expression of the rules and the dashboard names only metrics the server exports.
//!
//! `promtool` and `prometheus` come from Debian's `prometheus` package, which
//! `scripts/install-test-deps` installs; a missing tool fails the test and says so.
#![allow(missing_docs, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;

use common::{BIN, Guard, Holdline, free_port, scrape};

/// The repository's root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rules_file() -> PathBuf {
    repo().join("ops/prometheus/holdline-rules.yml")
}

fn rules_test_file() -> PathBuf {
    repo().join("ops/prometheus/holdline-rules.test.yml")
}

fn dashboard_file() -> PathBuf {
    repo().join("ops/grafana/holdline-dashboard.json")
}

/// Fails clearly when a tool of Debian's `prometheus` package is missing.
fn require(tool: &str) {
    common::require_tool(
        tool,
        "--version",
        "scripts/install-test-deps installs it (as root), or apt-get install prometheus",
    );
}

/// Runs `promtool ARGS`, panicking with its output unless it succeeds.
fn promtool(args: &[&str], file: &Path) -> String {
    let out = Command::new("promtool")
        .args(args)
        .arg(file)
        .output()
        .expect("run promtool");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "promtool {} {} failed:\n{text}",
        args.join(" "),
        file.display()
    );
    text
}

#[test]
fn promtool_checks_the_rules_and_passes_their_unit_tests() {
    require("promtool");
    let checked = promtool(&["check", "rules"], &rules_file());
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&["test", "rules"], &rules_test_file());
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Every alert of the rules file has a unit test.
    let rules = std::fs::read_to_string(rules_file()).unwrap();
    let tests = std::fs::read_to_string(rules_test_file()).unwrap();
    for alert in rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
    {
        assert!(
            tests.contains(&format!("alertname: {alert}\n")),
            "alert {alert} has no unit test in holdline-rules.test.yml"
        );
    }
}

fn dashboard() -> Value {
    let text = std::fs::read_to_string(dashboard_file()).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("dashboard JSON: {e}"))
}

/// Every PromQL expression of the dashboard: the panels' targets and the template
/// variables' queries (`label_values(SELECTOR, LABEL)` gives its selector).
fn dashboard_exprs(d: &Value) -> Vec<String> {
    fn panels<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for p in list.as_array().into_iter().flatten() {
            out.push(p);
            panels(&p["panels"], out);
        }
    }
    let mut all = Vec::new();
    panels(&d["panels"], &mut all);
    let mut exprs: Vec<String> = all
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .map(|t| {
            t["expr"]
                .as_str()
                .expect("a target without expr")
                .to_owned()
        })
        .collect();
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        let q = v["query"]["query"]
            .as_str()
            .or_else(|| v["query"].as_str())
            .unwrap_or_default();
        if let Some(inner) = q
            .strip_prefix("label_values(")
            .and_then(|r| r.rsplit_once(','))
        {
            exprs.push(inner.0.to_owned());
        } else if !q.is_empty() {
            exprs.push(q.to_owned());
        }
    }
    exprs
}

#[test]
fn the_dashboard_is_an_importable_grafana_dashboard() {
    let d = dashboard();
    assert!(d["schemaVersion"].as_u64().unwrap() >= 36, "schemaVersion");
    assert!(d["uid"].as_str().is_some_and(|u| !u.is_empty()), "uid");
    let input = d["__inputs"]
        .as_array()
        .and_then(|i| i.iter().find(|i| i["name"] == "DS_PROMETHEUS"))
        .expect("a DS_PROMETHEUS input");
    assert_eq!(input["type"], "datasource");
    assert_eq!(input["pluginId"], "prometheus");
    let mut ids = BTreeSet::new();
    let mut titles = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        assert!(
            ids.insert(p["id"].as_u64().expect("panel id")),
            "duplicate panel id {}",
            p["id"]
        );
        let g = &p["gridPos"];
        assert!(
            ["h", "w", "x", "y"].iter().all(|k| g[k].is_u64()),
            "gridPos of {}",
            p["title"]
        );
        if p["type"] == "row" {
            continue;
        }
        titles.push(p["title"].as_str().unwrap().to_owned());
        assert_eq!(
            p["datasource"]["uid"], "${DS_PROMETHEUS}",
            "datasource of {}",
            p["title"]
        );
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {} has no query", p["title"]);
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${DS_PROMETHEUS}");
            assert!(t["expr"].as_str().is_some_and(|e| !e.is_empty()));
        }
    }
    for want in [
        "Calls/s",
        "503s by reason",
        "Rejection ratio",
        "Acceptance per worker",
        "Occupancy per worker",
        "Queue delay quantiles",
        "Processing time quantiles",
        "Transactions",
        "Memory: transaction table",
        "TCP connections",
        "Drops by reason",
    ] {
        assert!(
            titles.iter().any(|t| t == want),
            "no panel {want:?}: {titles:?}"
        );
    }
}

/// The metric names (and recording-rule names, which contain `:`) an expression uses:
/// identifiers outside string literals that start with `holdline_` or contain `:`, plus
/// `up`.
fn names_in(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'"' || c == b'\'' || c == b'`' {
            i += 1;
            while i < b.len() && b[i] != c {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c.is_ascii_alphabetic() || c == b'_' || c == b':' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':') {
                i += 1;
            }
            let word = &expr[start..i];
            // A `$variable` of Grafana is no metric; `[1m:30s]` subqueries start with digits.
            let var = start > 0 && b[start - 1] == b'$';
            if !var && (word.starts_with("holdline_") || word.contains(':') || word == "up") {
                names.insert(word.to_owned());
            }
        } else if c.is_ascii_digit() {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    names
}

/// The sample names of a Prometheus text exposition.
fn exported_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .filter(|n| {
            n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
        })
        .map(str::to_owned)
        .collect()
}

/// A dashboard expression as Grafana sends it: its variables replaced.
fn grafana_substitute(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$job", "holdline")
        .replace("$instance", ".+")
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A tiny HTTP/1.0 GET: the status code and the body, or why not.
fn http_get(addr: SocketAddr, target: &str) -> Result<(u16, String), String> {
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(s, "GET {target} HTTP/1.0\r\nHost: {addr}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no header end")?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad status line: {head}"))?;
    Ok((code, body.to_owned()))
}

/// A running Prometheus, stopped by PID when dropped.
struct Prometheus {
    child: Guard,
    addr: SocketAddr,
    log: PathBuf,
}

impl Prometheus {
    /// Starts Prometheus scraping `target` every second (job `holdline`) with the rules
    /// loaded, and waits (bounded) until it is ready.
    fn start(dir: &Path, target: SocketAddr) -> Self {
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {}\n\
                 scrape_configs:\n  - job_name: holdline\n    static_configs:\n      - targets: ['{target}']\n",
                rules_file().canonicalize().unwrap().display()
            ),
        )
        .unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = dir.join("prometheus.log");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn prometheus");
        let mut p = Self {
            child: Guard(child),
            addr,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if matches!(http_get(addr, "/-/ready"), Ok((200, _))) {
                return p;
            }
            if let Some(status) = p.child.0.try_wait().unwrap() {
                panic!("prometheus exited ({status}):\n{}", p.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "prometheus not ready within 60 s:\n{}",
                p.log_text()
            );
            // Bounded poll of its readiness endpoint.
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET /api/v1/PATH?QUERY`: the `data` of a `success` answer, or the error.
    fn api(&self, path: &str, query: &[(&str, &str)]) -> Result<Value, String> {
        let q: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{k}={}", percent_encode(v)))
            .collect();
        let target = format!("/api/v1/{path}?{}", q.join("&"));
        let (code, body) = http_get(self.addr, &target)?;
        let v: Value =
            serde_json::from_str(&body).map_err(|e| format!("HTTP {code}: {e}: {body}"))?;
        if v["status"] == "success" {
            Ok(v["data"].clone())
        } else {
            Err(format!("HTTP {code}: {} {}", v["errorType"], v["error"]))
        }
    }

    /// An instant query's result vector.
    fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let data = self.api("query", &[("query", expr)])?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// Polls (bounded) until `expr` returns at least one sample; returns them.
    fn wait_nonempty(&self, expr: &str, limit: Duration) -> Vec<Value> {
        let deadline = Instant::now() + limit;
        loop {
            let last = self.query(expr);
            if let Ok(r) = &last
                && !r.is_empty()
            {
                return r.clone();
            }
            assert!(
                Instant::now() < deadline,
                "{expr} returned nothing within {limit:?} (last: {last:?})\n\
                 targets: {:?}\nprometheus log:\n{}",
                self.api("targets", &[]),
                self.log_text()
            );
            // Bounded poll: Prometheus scrapes and evaluates every second.
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Stops it by PID (SIGTERM) and waits (bounded) for it to exit.
    fn stop(mut self) {
        let pid = self.child.0.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success(), "kill -TERM {pid}");
        let status = self
            .child
            .wait_for(Duration::from_secs(30))
            .unwrap_or_else(|| panic!("prometheus {pid} still running 30 s after SIGTERM"));
        assert!(status.success(), "prometheus exited {status}");
    }
}

fn s(x: &str) -> String {
    x.to_owned()
}

/// `holdline load ARGS` with its output discarded.
fn load(args: &[String]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("load")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

#[test]
fn a_real_prometheus_scrapes_holdline_and_evaluates_the_rules_and_the_dashboard() {
    require("prometheus");
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (sip, uas, metrics) = (free_port(), free_port(), free_port());
    let metrics_addr: SocketAddr = format!("127.0.0.1:{metrics}").parse().unwrap();
    // The defaults (OCC, deferral over TCP, INVITE sockets over UDP, smart forwarding,
    // feedback), the persistent store and a probed hash route: every family the dashboard
    // and the rules use is exported.
    let conf = dir.path().join("holdline.toml");
    std::fs::write(
        &conf,
        format!(
            "[probing]\ninterval_ms = 500\n\n[[hash_routes]]\ndomain = \"probed.test\"\n\
             targets = [\"udp:127.0.0.1:{uas}\"]\n"
        ),
    )
    .unwrap();
    let server = Holdline::start(&[
        format!("--config={}", conf.display()),
        s("--listen"),
        format!("udp:127.0.0.1:{sip}"),
        s("--listen"),
        format!("tcp:127.0.0.1:{sip}"),
        s("--route"),
        format!("*=udp:127.0.0.1:{uas}"),
        s("--domain"),
        s("example.com"),
        s("--store"),
        dir.path().join("store").display().to_string(),
        s("--workers"),
        s("2"),
        s("--metrics"),
        metrics_addr.to_string(),
    ]);
    let _uas = Guard(
        load(&[
            s("uas"),
            s("--listen"),
            format!("127.0.0.1:{uas}"),
            s("--progress"),
            s("off"),
            s("--max-time"),
            s("120"),
        ])
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn holdline load uas"),
    );
    let prometheus = Prometheus::start(dir.path(), metrics_addr);

    // The target is scraped and healthy.
    let up = prometheus.wait_nonempty(r#"up{job="holdline"} == 1"#, Duration::from_secs(60));
    assert_eq!(up[0]["metric"]["instance"], metrics_addr.to_string());

    // A few calls through the proxy to the UAS, after the first scrape, so that the
    // counters rise between two scrapes.
    let calls = load(&[
        s("uac"),
        s("--target"),
        format!("127.0.0.1:{sip}"),
        s("--to"),
        s("user{0..9}@elsewhere.test"),
        s("--rate"),
        s("50"),
        s("--calls"),
        s("50"),
        s("--drain"),
        s("5"),
        s("--max-time"),
        s("30"),
        s("--progress"),
        s("off"),
    ])
    .output()
    .expect("run holdline load uac");
    assert!(
        calls.status.success(),
        "holdline load uac: {}",
        String::from_utf8_lossy(&calls.stderr)
    );

    // A holdline metric, and a recording rule over it, in Prometheus.
    let invites = prometheus.wait_nonempty(
        r#"sum(holdline_sip_requests_in_total{job="holdline",method="INVITE"}) >= 50"#,
        Duration::from_secs(60),
    );
    assert!(
        invites[0]["value"][1]
            .as_str()
            .unwrap()
            .parse::<f64>()
            .unwrap()
            >= 50.0
    );
    let rate = prometheus.wait_nonempty(
        "instance:holdline_invites_received:rate1m > 0",
        Duration::from_secs(60),
    );
    assert_eq!(rate[0]["metric"]["job"], "holdline");
    prometheus.wait_nonempty(
        r#"instance_worker:holdline_processing_seconds:quantile_rate1m{quantile="0.99"} > 0"#,
        Duration::from_secs(60),
    );

    // Every rule loaded and evaluated without error.
    let deadline = Instant::now() + Duration::from_secs(60);
    let rules: Vec<Value> = loop {
        let data = prometheus.api("rules", &[]).unwrap();
        let rules: Vec<Value> = data["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        if !rules.is_empty() && rules.iter().all(|r| r["health"] != "unknown") {
            break rules;
        }
        assert!(
            Instant::now() < deadline,
            "rules not all evaluated within 60 s: {data}"
        );
        // Bounded poll: rules are evaluated every second.
        std::thread::sleep(Duration::from_millis(200));
    };
    let rules_text = std::fs::read_to_string(rules_file()).unwrap();
    let in_file = rules_text
        .lines()
        .filter(|l| {
            let l = l.trim();
            l.starts_with("- record: ") || l.starts_with("- alert: ")
        })
        .count();
    assert_eq!(rules.len(), in_file, "rules loaded by prometheus");
    for r in &rules {
        assert_eq!(
            r["health"], "ok",
            "rule {} failed: {}",
            r["name"], r["lastError"]
        );
    }

    // Every name the rules and the dashboard use is a metric the server exports (or a
    // recording rule of the rules file, or Prometheus's `up`). Some families appear after
    // the first control interval: wait (bounded) until all of them are there.
    let recorded: BTreeSet<String> = rules
        .iter()
        .filter(|r| r["type"] == "recording")
        .map(|r| r["name"].as_str().unwrap().to_owned())
        .collect();
    let mut wanted: Vec<(String, BTreeSet<String>)> = rules
        .iter()
        .map(|r| {
            let q = r["query"].as_str().unwrap();
            (format!("rule {}", r["name"]), names_in(q))
        })
        .collect();
    let exprs = dashboard_exprs(&dashboard());
    assert!(exprs.len() >= 20, "dashboard queries: {exprs:?}");
    wanted.extend(
        exprs
            .iter()
            .map(|e| (format!("dashboard query {e}"), names_in(e))),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let (exported, missing) = loop {
        let exported = exported_names(&scrape(metrics_addr));
        let missing: Vec<String> = wanted
            .iter()
            .flat_map(|(what, names)| {
                names
                    .iter()
                    .filter(|n| {
                        !(exported.contains(*n) || recorded.contains(*n) || n.as_str() == "up")
                    })
                    .map(move |n| format!("{what}: {n}"))
            })
            .collect();
        if missing.is_empty() || Instant::now() >= deadline {
            break (exported, missing);
        }
        // Bounded poll: the controllers' lines appear after their first interval.
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        missing.is_empty(),
        "names the server does not export:\n{}\nexported: {exported:?}",
        missing.join("\n")
    );
    let used: BTreeSet<&String> = wanted.iter().flat_map(|(_, n)| n).collect();
    assert!(used.len() >= 25, "names used: {used:?}");

    // Every dashboard query is valid PromQL for this Prometheus, and the panels that
    // need no rejections or TCP have data by now.
    for e in &exprs {
        let q = grafana_substitute(e);
        if let Err(err) = prometheus.query(&q) {
            panic!("dashboard query {e} rejected by prometheus: {err}");
        }
    }
    for e in exprs.iter().filter(|e| {
        e.contains("holdline_sip_requests_in_total")
            || e.contains("holdline_processing_seconds")
            || e.contains("holdline_overload_acceptance_ratio")
            || e.contains("holdline_txn_memory_bytes")
    }) {
        prometheus.wait_nonempty(&grafana_substitute(e), Duration::from_secs(30));
    }

    prometheus.stop();
    let (status, rest) = server.terminate();
    assert!(status.success(), "holdline exited {status}:\n{rest}");
    eprintln!(
        "ops: prometheus scraped holdline, {} rules ok, {} dashboard queries checked in {:.1} s",
        rules.len(),
        exprs.len(),
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn names_in_finds_metrics_and_rules_but_not_labels_or_variables() {
    let n = names_in(
        r#"histogram_quantile(0.99, sum by (worker, le) (rate(holdline_queue_delay_seconds_bucket{job=~"$job",reason="holdline_x"}[$__rate_interval]))) / instance:holdline_y:rate1m or up"#,
    );
    let want: BTreeSet<String> = [
        "holdline_queue_delay_seconds_bucket",
        "instance:holdline_y:rate1m",
        "up",
    ]
    .iter()
    .map(|x| s(x))
    .collect();
    assert_eq!(n, want);
}

/// `holdline status` against an address nobody serves: exit 1 and a message that names the
/// address and the flag to check.
#[test]
fn status_names_the_address_that_did_not_answer() {
    let port = free_port();
    let out = Command::new(BIN)
        .args(["status", &format!("--metrics=127.0.0.1:{port}")])
        .output()
        .expect("run holdline status");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("127.0.0.1:{port}")) && err.contains("--metrics"),
        "{err}"
    );
}
