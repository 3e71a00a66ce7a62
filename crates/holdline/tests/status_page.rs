//! The status page of the metrics listener (`GET /`, `GET /status.json`) in a real headless
//! Chromium: `holdline serve` under `holdline load` calls, the page's numbers read from its
//! DOM at two instants must have moved, and a screenshot must be a valid PNG.
//!
//! `HOLDLINE_UPDATE_SCREENSHOTS=1` also copies the screenshot to `docs/img/status-page.png`.

#[path = "common/browser.rs"]
mod browser;
mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use browser::{Browser, check_png, require_browser};
use common::{BIN, Holdline, free_port, load};
use serde_json::Value;

fn s(x: &str) -> String {
    x.to_owned()
}

/// `GET path` from the metrics listener: the status line, headers and body.
fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    c.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .expect("request");
    let mut text = String::new();
    c.read_to_string(&mut text).expect("response");
    let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
    (head.to_owned(), body.to_owned())
}

/// The numbers the test reads from the page's DOM: `data-value` of the value elements
/// (what the text shows, unformatted), the texts, the samples rendered and the sparkline.
const READ: &str = r##"
const v = (id) => { const e = document.getElementById(id); return e ? e.dataset.value : null; };
const t = (id) => { const e = document.getElementById(id); return e ? e.textContent : null; };
return {
  samples: Number(document.body.dataset.samples),
  uptime: Number(v("uptime")),
  invites: Number(v("invites-total")),
  calls_rate: v("calls-rate") === "" ? null : Number(v("calls-rate")),
  calls_rate_text: t("calls-rate"),
  rss: Number(v("rss")),
  rss_text: t("rss"),
  transactions: Number(v("transactions")),
  workers: t("workers"),
  version: t("version"),
  state: t("state"),
  rejected: Number(v("rejected-total")),
  reasons: Array.from(document.querySelectorAll("#reasons-table tr")).map((r) => r.textContent),
  methods: Array.from(document.querySelectorAll("#methods-table tr td:first-child")).map((c) => c.textContent),
  spark_points: (document.querySelector("#calls-spark polyline") || { getAttribute: () => "" }).getAttribute("points").split(" ").filter((p) => p).length,
  scripts_external: Array.from(document.querySelectorAll("script[src], link, img[src], iframe")).length,
};
"##;

#[test]
fn status_page_shows_live_numbers_in_headless_chromium() {
    require_browser();
    let dir = tempfile::tempdir().expect("tempdir");
    let (sip, uas, metrics) = (free_port(), free_port(), free_port());
    let metrics_addr: SocketAddr = format!("127.0.0.1:{metrics}").parse().expect("addr");
    let _uas = load(&[
        s("uas"),
        s("--listen"),
        format!("127.0.0.1:{uas}"),
        s("--progress"),
        s("off"),
        s("--max-time"),
        s("120"),
    ]);
    // One worker with an emulated cost of 0.6 ms per message (50 µs per rejection) holds
    // ≈ 250 calls/s (about six messages per call) on a quiet machine: the 300/s offered below
    // overload it a little, so the page has 503s by reason to show as well.
    let server = Holdline::start(&[
        s("--listen"),
        format!("udp:127.0.0.1:{sip}"),
        s("--route"),
        format!("*=udp:127.0.0.1:{uas}"),
        s("--domain"),
        s("example.com"),
        s("--store"),
        dir.path().join("store").display().to_string(),
        s("--workers"),
        s("1"),
        s("--emulate-cost-us"),
        s("600"),
        s("--emulate-reject-cost-us"),
        s("50"),
        s("--metrics"),
        metrics_addr.to_string(),
    ]);

    // The page and its JSON over plain HTTP.
    let (head, page) = get(metrics_addr, "/");
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    assert!(head.contains("Content-Type: text/html"), "{head}");
    assert!(
        page.contains("<svg") || page.contains("sparkline"),
        "sparklines"
    );
    for external in ["http://", "https://", "src=", "<link"] {
        assert!(
            !page.contains(external),
            "the page loads nothing from elsewhere: `{external}`"
        );
    }
    let (head, body) = get(metrics_addr, "/status.json");
    assert!(head.contains("Content-Type: application/json"), "{head}");
    let j: Value = serde_json::from_str(&body).expect("status.json is JSON");
    assert_eq!(j["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(j["workers"], 1);
    assert!(j["uptime_seconds"].as_f64().expect("uptime") > 0.0);
    assert!(j["memory"]["rss_bytes"].as_f64().expect("rss") > 1e6, "{j}");
    for key in [
        "invites_total",
        "requests_total",
        "rejected_total",
        "rejected_by_reason",
        "overload",
        "transactions",
        "bindings",
        "connections",
        "latency",
    ] {
        assert!(!j[key].is_null(), "status.json has `{key}`: {j}");
    }
    // /metrics is unchanged beside them, and exports what the page shows.
    let (_, text) = get(metrics_addr, "/metrics");
    assert!(
        text.contains("process_resident_memory_bytes "),
        "RSS exported"
    );
    assert!(
        text.contains("holdline_build_info{version="),
        "version exported"
    );

    // Calls for 40 s (bounded: --max-time), through the proxy to the UAS.
    let _uac = load(&[
        s("uac"),
        s("--target"),
        format!("127.0.0.1:{sip}"),
        s("--to"),
        s("user{0..99}@elsewhere.test"),
        s("--rate"),
        s("300"),
        s("--duration"),
        s("40"),
        s("--max-time"),
        s("60"),
        s("--progress"),
        s("off"),
    ]);

    let browser = Browser::start(1280, 860);
    browser.open(&format!("http://{metrics_addr}/"));
    // Two answers rendered and calls flowing: the rate is known and positive.
    let first = browser.wait_for(READ, Duration::from_secs(30), |v| {
        v["samples"].as_f64().unwrap_or(0.0) >= 2.0 && v["calls_rate"].as_f64().unwrap_or(0.0) > 0.0
    });
    assert_eq!(first["scripts_external"], 0, "nothing external: {first}");
    assert_eq!(first["workers"], "1");
    assert_eq!(first["version"], env!("CARGO_PKG_VERSION"));
    assert!(first["rss"].as_f64().unwrap_or(0.0) > 1e6, "{first}");
    assert!(
        first["rss_text"].as_str().unwrap_or("").ends_with("MiB"),
        "{first}"
    );
    let rate_text = first["calls_rate_text"].as_str().unwrap_or("");
    assert!(
        rate_text.chars().any(|c| c.is_ascii_digit()),
        "calls/s shown as a number: {first}"
    );
    // Later: more answers, and the numbers have moved.
    let n0 = first["samples"].as_f64().unwrap_or(0.0);
    let second = browser.wait_for(READ, Duration::from_secs(30), |v| {
        v["samples"].as_f64().unwrap_or(0.0) >= n0 + 3.0
            && v["invites"].as_f64().unwrap_or(0.0) > first["invites"].as_f64().unwrap_or(0.0)
    });
    assert!(
        second["uptime"].as_f64() > first["uptime"].as_f64(),
        "{second}"
    );
    assert!(
        second["calls_rate"].as_f64().unwrap_or(0.0) > 0.0,
        "{second}"
    );
    assert!(
        second["spark_points"].as_u64().unwrap_or(0) >= 3,
        "the sparkline draws the rates: {second}"
    );
    assert!(
        second["methods"]
            .as_array()
            .is_some_and(|m| m.iter().any(|x| x == "INVITE")),
        "{second}"
    );
    // The 503s, when the emulated overload produced some, are in the table by reason.
    if second["rejected"].as_f64().unwrap_or(0.0) > 0.0 {
        let reasons = second["reasons"].as_array().expect("rows");
        assert!(
            reasons
                .iter()
                .any(|r| r.as_str().is_some_and(|r| r.starts_with("local/"))),
            "{second}"
        );
    }
    eprintln!("page after {} answers: {second}", second["samples"]);

    // A few more seconds of sparkline, then the screenshot.
    let n1 = second["samples"].as_f64().unwrap_or(0.0);
    browser.wait_for(READ, Duration::from_secs(30), |v| {
        v["samples"].as_f64().unwrap_or(0.0) >= n1 + 5.0
    });
    let shot = dir.path().join("status-page.png");
    let png = browser.screenshot(&shot);
    let (w, h) = check_png(&png);
    assert!(w >= 800 && h >= 600, "screenshot {w}x{h}");
    if std::env::var_os("HOLDLINE_UPDATE_SCREENSHOTS").is_some() {
        let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/img");
        std::fs::create_dir_all(&docs).expect("docs/img");
        std::fs::copy(&shot, docs.join("status-page.png")).expect("copy screenshot");
    }
    drop(browser);
    let (status, _) = server.terminate();
    assert!(status.success(), "{status:?}");
}

/// `holdline lab index` over a copy of a lab's committed results (tcp-fairness: four plots
/// as SVG and PNG, the summary with the paper's finding), opened in headless Chromium: every
/// plot loaded, the summary's table rendered; a screenshot.
#[test]
fn lab_index_html_loads_every_plot_in_headless_chromium() {
    require_browser();
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/results/2026-11-29-tcp-fairness");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("tcp-fairness");
    std::fs::create_dir(&out).expect("mkdir");
    for e in std::fs::read_dir(&src).expect("results").flatten() {
        std::fs::copy(e.path(), out.join(e.file_name())).expect("copy");
    }
    let status = Command::new(BIN)
        .args(["lab", "index"])
        .arg(&out)
        .status()
        .expect("run holdline lab index");
    assert!(status.success(), "{status:?}");
    let html = std::fs::read_to_string(out.join("index.html")).expect("index.html");
    assert!(html.contains("<title>holdline lab tcp-fairness: tcp-fairness</title>"));

    let browser = Browser::start(1280, 900);
    let v = browser::check_lab_index(&browser, &out);
    assert_eq!(v["figures"], 4, "{v}");
    assert!(
        v["summary_rows"].as_u64().unwrap_or(0) >= 19,
        "the summary's table (18 points and its head): {v}"
    );
    let shot = dir.path().join("lab-index.png");
    check_png(&browser.screenshot(&shot));
    if std::env::var_os("HOLDLINE_UPDATE_SCREENSHOTS").is_some() {
        let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/img");
        std::fs::create_dir_all(&docs).expect("docs/img");
        std::fs::copy(&shot, docs.join("lab-index.png")).expect("copy screenshot");
    }
}
