//! `holdline lab udp-overload`, `tcp-overload`, `tcp-buffers`, `tcp-fairness`, `feedback` (and its load step), `scaling` and `failover` end to end, small. Each checks the shape
//! of what it writes (results.json with one object per point and every field the issue names,
//! the CSV, the plots) and that the mechanisms did what they are. No speed is asserted.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::BIN;

/// `holdline lab ARGS --out OUT`, at most 240 s ([`common::run_lab`]).
fn run_lab(args: &[&str], out: &Path) -> String {
    common::run_lab(args, out, Duration::from_secs(240))
}

/// The servers' metrics a lab kept beside their logs (`runs/*SUFFIX`), read once their worker
/// was done: every file counts INVITEs read by the core (its lines fresh, not the ones
/// rendered before the load). Returns how many files there are.
fn settled_metrics(runs: &Path, suffix: &str) -> usize {
    let mut n = 0;
    for entry in std::fs::read_dir(runs).expect("runs") {
        let path = entry.expect("entry").path();
        if !path.to_string_lossy().ends_with(suffix) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("metrics");
        let value = |prefix: &str| -> f64 {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .and_then(|l| l.rsplit_once(' '))
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or_else(|| panic!("no {prefix} in {}", path.display()))
        };
        let invites = value("holdline_sip_requests_in_total{worker=\"0\",method=\"INVITE\"}");
        let age = value("holdline_core_metrics_age_seconds{worker=\"0\"}");
        assert!(invites > 0.0, "{}: {invites} INVITEs", path.display());
        assert!(age < 0.25, "{}: lines {age} s old", path.display());
        n += 1;
    }
    n
}

#[test]
fn udp_overload_writes_results_csv_and_plots() {
    let _one_run_at_a_time = common::sipp_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("udp");
    let err = run_lab(
        &[
            "udp-overload",
            "--quick",
            "--loads",
            "0.5,5",
            "--mechanisms",
            "none,occ",
            "--duration",
            "2",
        ],
        &out,
    );
    assert!(err.contains("[1/"), "progress is shown:\n{err}");

    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["experiment"], "udp-overload");
    let capacity = v["capacity_cps"].as_f64().expect("capacity");
    assert!(capacity > 0.0);
    let points = v["points"].as_array().expect("points");
    assert_eq!(points.len(), 4, "2 loads x 2 mechanisms");
    for p in points {
        for key in [
            "offered_cps",
            "capacity_cps",
            "throughput_cps",
            "goodput_cps",
            "goodput_steady_cps",
            "pdd_p50_ms",
            "pdd_p99_ms",
            "retrans_200",
            "retrans_invite",
        ] {
            let x = p[key].as_f64();
            assert!(x.is_some_and(f64::is_finite), "{key} in {p}");
        }
        assert_eq!(p["experiment"], "udp-overload");
        assert!(p["ses"].is_null() && p["fairness"].is_null(), "{p}");
        assert!(p["calls_attempted"].as_u64().is_some_and(|n| n > 0), "{p}");
        // `holdline sim agree` finds the run's server metrics by its tag.
        let tag = p["tag"].as_str().unwrap_or_else(|| panic!("no tag in {p}"));
        assert!(
            out.join("runs")
                .join(format!("{tag}-serve.metrics"))
                .is_file(),
            "{tag}-serve.metrics"
        );
    }
    let at = |m: &str, f: f64| {
        points
            .iter()
            .find(|p| {
                p["mechanism"] == m && (p["load_factor"].as_f64().unwrap_or(0.0) - f).abs() < 0.01
            })
            .unwrap_or_else(|| panic!("no {m} point at {f}x in {text}"))
    };
    assert_eq!(at("none", 5.0)["r503"], 0, "no control never rejects");
    assert!(
        at("occ", 5.0)["r503"].as_u64().is_some_and(|n| n > 0),
        "OCC rejects at 5x: {}",
        at("occ", 5.0)
    );
    let cost = &v["rejection_cost"][0];
    for key in ["cpu_us_per_call", "cpu_us_per_rejection", "ratio"] {
        assert!(
            cost[key].as_f64().is_some_and(|x| x.is_finite() && x > 0.0),
            "{key} in {cost}"
        );
    }
    // The calls the rejecting run let through are counted and their cost taken out.
    assert!(cost["calls_admitted"].is_u64(), "{cost}");
    assert!(
        cost["cpu_us_per_rejection_uncorrected"]
            .as_f64()
            .zip(cost["cpu_us_per_rejection"].as_f64())
            .is_some_and(|(raw, net)| raw >= net),
        "{cost}"
    );
    let csv = std::fs::read_to_string(out.join("points.csv")).expect("points.csv");
    assert!(csv.starts_with(
        "experiment,mechanism,ses,load_factor,offered_cps,capacity_cps,throughput_cps,goodput_cps,"
    ));
    assert_eq!(csv.lines().count(), 5, "header + 4 points");
    assert!(
        settled_metrics(&out.join("runs"), "-serve.metrics") >= 4,
        "a metrics file per point"
    );
    for plot in ["throughput", "pdd"] {
        let svg = std::fs::read_to_string(out.join(format!("{plot}.svg"))).expect("svg");
        assert!(svg.contains("<svg"));
        let png = std::fs::read(out.join(format!("{plot}.png"))).expect("png");
        assert_eq!(&png[1..4], b"PNG");
    }
}

/// `holdline lab tcp-overload`, small: one and three SEs at 5x, every mechanism, 3 s points.
/// Checks the files and that each mechanism is what it says: without control nothing is
/// rejected and the RE's 200 OKs are retransmitted (ACKs come late); with smart forwarding
/// the SEs answer 503s, the RE none, and every admitted call completes on time; with
/// holdline's defaults excess calls are rejected (by the SEs or the RE) and every call
/// completes or is rejected. No speed is asserted.
#[test]
fn tcp_overload_writes_results_csv_and_plots() {
    let _one_run_at_a_time = common::sipp_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("tcp");
    let err = run_lab(
        &[
            "tcp-overload",
            "--quick",
            "--capacity",
            "160",
            "--ses",
            "1,3",
            "--loads",
            "5",
            "--duration",
            "3",
        ],
        &out,
    );
    assert!(err.contains("[8/8"), "progress is shown:\n{err}");

    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["experiment"], "tcp-overload");
    assert_eq!(v["capacity_cps"], 160.0);
    let points = v["points"].as_array().expect("points");
    assert_eq!(points.len(), 8, "2 SE counts x 4 mechanisms");
    for p in points {
        for key in [
            "offered_cps",
            "capacity_cps",
            "throughput_cps",
            "goodput_cps",
            "pdd_p50_ms",
            "pdd_p99_ms",
            "retrans_200",
            "retrans_invite",
            "re_active_max",
        ] {
            let x = p[key].as_f64();
            assert!(x.is_some_and(f64::is_finite), "{key} in {p}");
        }
        assert_eq!(p["experiment"], "tcp-overload");
        let ses = p["ses"].as_u64().expect("ses");
        assert_eq!(p["per_se_cps"].as_array().map(Vec::len), Some(ses as usize));
        assert_eq!(p["fairness"].is_null(), ses == 1, "{p}");
        assert!(p["calls_attempted"].as_u64().is_some_and(|n| n > 0), "{p}");
    }
    let at = |m: &str, ses: u64| {
        points
            .iter()
            .find(|p| p["mechanism"] == m && p["ses"] == ses)
            .unwrap_or_else(|| panic!("no {m} point with {ses} SEs in {text}"))
    };
    for ses in [1, 3] {
        let none = at("none", ses);
        assert_eq!(none["r503"], 0, "no control never rejects: {none}");
        assert!(
            none["retrans_200"].as_u64().is_some_and(|n| n > 0),
            "without control the UAS retransmits 200 OKs at 5x: {none}"
        );
        for m in ["ics", "ecs"] {
            let p = at(m, ses);
            assert!(
                p["r503"].as_u64().is_some_and(|n| n > 0)
                    && p["se_rejected"].as_u64() == p["r503"].as_u64(),
                "{m}: every 503 comes from the SEs' smart forwarding: {p}"
            );
            assert_eq!(
                p["retrans_200"], 0,
                "{m}: admitted calls complete in time: {p}"
            );
            assert_eq!(p["timeouts"], 0, "{m}: {p}");
            assert_eq!(
                p["calls_ok"]
                    .as_u64()
                    .zip(p["r503"].as_u64())
                    .map(|(a, b)| a + b),
                p["calls_attempted"].as_u64(),
                "{m}: each call completed or was rejected: {p}"
            );
        }
    }
    for ses in [1, 3] {
        let p = at("default", ses);
        let n = |k: &str| p[k].as_u64().unwrap_or_else(|| panic!("{k} in {p}"));
        assert!(
            n("se_rejected") + n("re_rejected") > 0,
            "defaults: overload is rejected somewhere: {p}"
        );
        assert_eq!(
            n("calls_ok") + n("r503") + n("r_other") + n("timeouts"),
            n("calls_attempted"),
            "defaults: every call ends: {p}"
        );
    }
    let csv = std::fs::read_to_string(out.join("points.csv")).expect("points.csv");
    assert!(csv.starts_with(
        "experiment,mechanism,ses,load_factor,offered_cps,capacity_cps,throughput_cps,"
    ));
    assert_eq!(csv.lines().count(), 9, "header + 8 points");
    for plot in ["throughput", "pdd", "active", "fairness"] {
        let svg = std::fs::read_to_string(out.join(format!("{plot}.svg"))).expect("svg");
        assert!(svg.contains("<svg"));
        let png = std::fs::read(out.join(format!("{plot}.png"))).expect("png");
        assert_eq!(&png[1..4], b"PNG");
    }
}

/// `holdline lab tcp-buffers`, the application-buffer sweep at its ends (2 KiB and 64 KiB
/// read-ahead at the RE, receive buffer and SE send buffer minimized) at 12.5x: the paper's
/// Fig. 23, where the application buffer makes no difference once the receive buffer is
/// minimized. It does in holdline only if the RE reads ahead past what it has handled (it
/// reads on demand while deferring new INVITEs): then the 64 KiB buffer fills with INVITEs
/// its SE's smart forwarding cannot see, and the PDD grows by an order of magnitude (it did:
/// p50 358 ms against 18 ms). Checks the files, that every call completed or was rejected by
/// smart forwarding, and that the large buffer's PDD stays close to the small one's.
#[test]
fn tcp_buffers_application_buffer_makes_no_difference() {
    let _one_run_at_a_time = common::sipp_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("buffers");
    let err = run_lab(
        &[
            "tcp-buffers",
            "--quick",
            "--capacity",
            "150",
            "--sweeps",
            "app",
            "--duration",
            "4",
        ],
        &out,
    );
    assert!(err.contains("[2/2"), "progress is shown:\n{err}");
    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["experiment"], "tcp-buffers");
    let points = v["points"].as_array().expect("points");
    assert_eq!(points.len(), 2, "{text}");
    let at = |app: u64| {
        points
            .iter()
            .find(|m| m["setting"]["buffers"]["re_app"] == app)
            .unwrap_or_else(|| panic!("no {app} point in {text}"))
    };
    let (small, large) = (&at(2048)["point"], &at(65_536)["point"]);
    for p in [small, large] {
        let n = |k: &str| p[k].as_u64().unwrap_or_else(|| panic!("{k} in {p}"));
        assert!(n("r503") > 0, "12.5x is rejected by smart forwarding: {p}");
        assert_eq!(n("retrans_200"), 0, "admitted calls complete in time: {p}");
        assert_eq!(n("calls_ok") + n("r503"), n("calls_attempted"), "{p}");
    }
    let p50 = |p: &serde_json::Value| p["pdd_p50_ms"].as_f64().expect("pdd");
    assert!(
        p50(large) <= (3.0 * p50(small)).max(100.0),
        "a 64 KiB application buffer adds no delay: p50 {} ms against {} ms",
        p50(large),
        p50(small)
    );
    let md = std::fs::read_to_string(out.join("summary.md")).expect("summary.md");
    assert!(
        md.contains("Fig. 23"),
        "the paper's finding is beside ours:\n{md}"
    );
    let csv = std::fs::read_to_string(out.join("points.csv")).expect("points.csv");
    assert_eq!(csv.lines().count(), 3, "header + 2 points");
    for plot in ["app-throughput", "app-pdd"] {
        let png = std::fs::read(out.join(format!("{plot}.png"))).expect("png");
        assert_eq!(&png[1..4], b"PNG");
    }
}

/// `holdline lab tcp-overload --mechanisms ecs,poll` with 30 SEs at 10x: the polling RE holds
/// the SEs' INVITE connections closed and opens them in turn (it counts its polls, and
/// answers 503 to the INVITEs that went stale behind a closed window), and the calls it
/// admits wait less than with every connection served in turn (ECS). Delay is compared
/// between the two points of one run, not against a number.
#[test]
fn tcp_overload_polling_serves_few_connections_at_a_time() {
    let _one_run_at_a_time = common::sipp_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("poll");
    let err = run_lab(
        &[
            "tcp-overload",
            "--capacity",
            "150",
            "--ses",
            "30",
            "--mechanisms",
            "ecs,poll",
            "--loads",
            "10",
            "--duration",
            "8",
        ],
        &out,
    );
    assert!(err.contains("[2/2"), "progress is shown:\n{err}");
    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let points = v["points"].as_array().expect("points");
    let at = |m: &str| {
        points
            .iter()
            .find(|p| p["mechanism"] == m)
            .unwrap_or_else(|| panic!("no {m} point in {text}"))
    };
    let (ecs, poll) = (at("ecs"), at("poll"));
    let n = |p: &serde_json::Value, k: &str| p[k].as_u64().unwrap_or_else(|| panic!("{k} in {p}"));
    assert_eq!(n(ecs, "re_polls"), 0, "ECS polls nothing: {ecs}");
    assert!(
        n(poll, "re_polls") > 0,
        "the RE opened closed connections: {poll}"
    );
    assert!(
        n(poll, "re_rejected_deferred") > 0,
        "INVITEs stale behind a closed window are answered 503: {poll}"
    );
    assert!(n(poll, "calls_ok") > 0 && n(poll, "r503") > 0, "{poll}");
    let p50 = |p: &serde_json::Value| p["pdd_p50_ms"].as_f64().expect("pdd");
    assert!(
        p50(poll) < p50(ecs),
        "admitted calls wait less when few connections are open: p50 {} ms against {} ms",
        p50(poll),
        p50(ecs)
    );
    let csv = std::fs::read_to_string(out.join("points.csv")).expect("points.csv");
    assert!(
        csv.lines()
            .next()
            .is_some_and(|h| h.ends_with("re_polls,gen_busy")),
        "{csv}"
    );
}

/// `holdline lab tcp-fairness`: three SEs offered 3:2:1 at 5x. With the RE's default sharing
/// each SE gets the same throughput (service-provider-centric: the SE offered least gets
/// about twice its share of the offered load); with `defer_fairness = "offered"` (the SEs
/// advertise their offered load) the shares follow the offered load (end-user-centric).
#[test]
fn tcp_fairness_offered_sharing_follows_the_offered_load() {
    let _one_run_at_a_time = common::sipp_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("fairness");
    let err = run_lab(
        &[
            "tcp-fairness",
            "--quick",
            "--capacity",
            "150",
            "--loads",
            "5",
            "--duration",
            "6",
        ],
        &out,
    );
    assert!(err.contains("[2/2"), "progress is shown:\n{err}");
    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let points = v["points"].as_array().expect("points");
    let at = |f: &str| {
        points
            .iter()
            .find(|p| p["fairness"] == f)
            .unwrap_or_else(|| panic!("no {f} point in {text}"))
    };
    let dev = |f: &str| at(f)["max_deviation"].as_f64().expect("deviation");
    let jain = |f: &str, k: &str| at(f)[k].as_f64().expect("jain");
    assert!(
        jain("equal", "jain_equal") > 0.95 && dev("equal") > 0.5,
        "equal sharing: equal throughputs, far from the offered shares: {}",
        at("equal")
    );
    assert!(
        dev("offered") < 0.35 && jain("offered", "jain_offered") > jain("equal", "jain_offered"),
        "offered sharing: shares close to the offered ones: {}",
        at("offered")
    );
    for f in ["equal", "offered"] {
        let p = &at(f)["point"];
        assert_eq!(p["per_se_cps"].as_array().map(Vec::len), Some(3), "{p}");
        assert_eq!(
            p["retrans_200"], 0,
            "{f}: admitted calls complete in time: {p}"
        );
    }
    for plot in ["per-se", "jain-equal", "jain-offered", "deviation"] {
        let png = std::fs::read(out.join(format!("{plot}.png"))).expect("png");
        assert_eq!(&png[1..4], b"PNG");
    }
}

/// `holdline lab feedback --quick`: one SE in front of the capacity-limited RE, at 1x and 5x,
/// local control only (`occ`) against RFC 7339 loss feedback (`loss`). Checks the files and
/// who rejected the excess: with feedback the SE drops most of it itself (its
/// `loss_throttle` 503s outnumber the RE's own rejections, and the RE answered); with local
/// control only the SE throttles nothing and the RE rejects. No speed is asserted.
#[test]
fn feedback_quick_moves_the_rejections_to_the_se() {
    let _one_run_at_a_time = common::sipp_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("feedback");
    let err = run_lab(&["feedback", "--quick"], &out);
    // The progress lines, shown when the test fails (or with --nocapture).
    eprintln!("{err}");
    assert!(err.contains("[1/"), "progress is shown:\n{err}");

    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["experiment"], "feedback");
    assert!(v["capacity_cps"].as_f64().is_some_and(|c| c > 0.0), "{v}");
    let points = v["points"].as_array().expect("points");
    assert_eq!(points.len(), 4, "2 loads x 2 mechanisms, 1 SE");
    for p in points {
        for key in [
            "offered_cps",
            "capacity_cps",
            "throughput_cps",
            "goodput_cps",
            "goodput_steady_cps",
            "goodput_of_capacity",
            "pdd_p50_ms",
            "pdd_p99_ms",
            "retrans_invite",
            "se_throttled",
            "re_rejected",
            "re_answers",
            "re_cpu_s",
        ] {
            let x = p[key].as_f64();
            assert!(x.is_some_and(f64::is_finite), "{key} in {p}");
        }
        assert_eq!(p["experiment"], "feedback");
        assert_eq!(p["ses"], 1);
        assert!(p["fairness"].is_null(), "one SE: {p}");
        assert!(p["calls_attempted"].as_u64().is_some_and(|n| n > 0), "{p}");
        assert!(p["re_cpu_s"].as_f64().is_some_and(|s| s > 0.0), "{p}");
    }
    let at = |m: &str, f: f64| {
        points
            .iter()
            .find(|p| {
                p["mechanism"] == m && (p["load_factor"].as_f64().unwrap_or(0.0) - f).abs() < 0.01
            })
            .unwrap_or_else(|| panic!("no {m} point at {f}x in {text}"))
    };
    let n = |p: &serde_json::Value, k: &str| p[k].as_u64().unwrap_or_else(|| panic!("{k} in {p}"));
    for f in [1.0, 5.0] {
        let occ = at("occ", f);
        assert_eq!(n(occ, "se_throttled"), 0, "local control only: {occ}");
        assert_eq!(
            n(occ, "re_answers"),
            0,
            "nothing offered, nothing answered: {occ}"
        );
    }
    let occ = at("occ", 5.0);
    assert!(
        n(occ, "re_rejected") > 0,
        "the RE rejects at 5x itself: {occ}"
    );
    let loss = at("loss", 5.0);
    assert!(
        n(loss, "se_throttled") > 0,
        "the SE throttles at 5x: {loss}"
    );
    assert!(
        n(loss, "re_rejected") < n(loss, "se_throttled"),
        "the SE rejects more than the RE: {loss}"
    );
    assert!(
        n(loss, "re_answers") > 0 && n(loss, "se_reports") > 0,
        "{loss}"
    );

    for p in v["points"].as_array().expect("points") {
        // `holdline sim agree` finds the run's RE metrics by its tag.
        let tag = p["tag"].as_str().unwrap_or_else(|| panic!("no tag in {p}"));
        assert!(
            out.join("runs").join(format!("{tag}-re.metrics")).is_file(),
            "{tag}-re.metrics"
        );
    }
    let csv = std::fs::read_to_string(out.join("points.csv")).expect("points.csv");
    assert!(csv.starts_with("experiment,mechanism,ses,load_factor,run,offered_cps,"));
    assert_eq!(csv.lines().count(), 5, "header + 4 points");
    assert!(
        settled_metrics(&out.join("runs"), "-re.metrics") >= 4,
        "the RE's metrics per point"
    );
    assert!(
        settled_metrics(&out.join("runs"), "-se0.metrics") >= 4,
        "the SE's metrics per point"
    );
    for plot in ["goodput", "pdd"] {
        let svg = std::fs::read_to_string(out.join(format!("{plot}.svg"))).expect("svg");
        assert!(svg.contains("<svg"));
        let png = std::fs::read(out.join(format!("{plot}.png"))).expect("png");
        assert_eq!(&png[1..4], b"PNG");
    }
}

/// `holdline lab feedback --step-from`: one SE, rate feedback, the load stepping from 0.5× to
/// 5× of 150 calls/s four seconds into a ten-second load. Checks that the step happened (the
/// UACs offered several times more per second after it, and the RE completed more), that the
/// series, `step.csv` and the plot are written, and that a settling time is reported. No speed
/// is asserted.
#[test]
fn feedback_load_step_writes_the_run_second_by_second() {
    let _one_run_at_a_time = common::sipp_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("step");
    let err = run_lab(
        &[
            "feedback",
            "--ses",
            "1",
            "--loads",
            "5",
            "--mechanisms",
            "rate",
            "--capacity",
            "150",
            "--duration",
            "10",
            "--step-from",
            "0.5",
            "--step-at",
            "4",
        ],
        &out,
    );
    eprintln!("{err}");
    assert!(err.contains("step at 4 s"), "the step is reported:\n{err}");
    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let p = &v["points"][0];
    assert_eq!(p["step_at_s"].as_f64(), Some(4.0), "{p}");
    assert!(p["settle_s"].as_f64().is_some(), "{p}");
    let series = p["series"].as_array().expect("series");
    assert_eq!(series.len(), 10, "one entry per second of load: {p}");
    let mean = |key: &str, from: usize, to: usize| {
        series[from..to]
            .iter()
            .map(|s| s[key].as_f64().unwrap_or_else(|| panic!("{key} in {s}")))
            .sum::<f64>()
            / (to - from) as f64
    };
    // 75 calls/s before the step, 750 after.
    let (before, after) = (mean("offered", 0, 4), mean("offered", 5, 9));
    assert!(
        after > 5.0 * before,
        "offered {before:.0}/s, then {after:.0}/s"
    );
    let (before, after) = (mean("re_goodput", 1, 4), mean("re_goodput", 6, 9));
    assert!(
        after > 1.4 * before,
        "RE goodput {before:.0}/s, then {after:.0}/s"
    );
    let csv = std::fs::read_to_string(out.join("step.csv")).expect("step.csv");
    assert!(csv.starts_with("mechanism,ses,load_factor,run,step_at_s,settle_s,t_s,"));
    assert_eq!(csv.lines().count(), 11, "header + 10 seconds");
    let svg = std::fs::read_to_string(out.join("step-goodput.svg")).expect("svg");
    assert!(svg.contains("<svg"));
}

#[test]
fn lab_names_its_experiments_and_refuses_unknown_ones() {
    let out = Command::new(BIN)
        .args(["lab", "no-such-thing"])
        .output()
        .expect("run holdline lab");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown experiment")
            && err.contains("udp-overload")
            && err.contains("tcp-overload")
            && err.contains("feedback"),
        "{err}"
    );
}

/// `holdline lab scaling`, small: S0P1 and S2P2 at half their expected capacity (given, no
/// calibration), each server at 20% of a core, 2 s steps, 100 users. Checks the files, that
/// the users' calls completed through both stages, that the first stages shared the users
/// between both second stages, and that the model is computed from those shares. No speed is
/// asserted.
///
/// A debug build under a CPU quota on a shared machine can stall for a moment; the overload
/// control then rightly sheds new INVITEs with 503, at a second stage (CI saw 1 of 1,167
/// once, and twice 68-70 of 1,167). A second stage's 503 reaches the caller as the first
/// stage's 500 (RFC 3261 §16.7). Until 2026-11-29 the first stage failed such a call over to
/// the other second stage, which does not hold the user: the caller got 404 — a lost user
/// that was not lost. The lab now turns that failover off (`failover = false`: its second
/// stages share no store). So a call counts as accounted for when it completed or was shed
/// (503, or 500 relaying a 503), at most 10% of a step may be shed, and no call may fail any
/// other way (a routing fault, a lost user, a timeout).
#[test]
fn scaling_runs_two_stages_and_compares_with_the_model() {
    let _one_run_at_a_time = common::sipp_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("scaling");
    let err = run_lab(
        &[
            "scaling",
            "--quick",
            "--configs",
            "S0P1,S2P2",
            "--capacities",
            "600,600",
            "--quota",
            "20",
            "--loads",
            "0.5",
            "--step-seconds",
            "2",
            "--users",
            "100",
        ],
        &out,
    );
    assert!(err.contains("S2P2"), "progress is shown:\n{err}");
    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["experiment"], "scaling");
    let steps = v["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 2, "{text}");
    for s in steps {
        let attempted = s["attempted"].as_u64().expect("attempted");
        assert!(attempted > 0, "{s}");
        let ok = s["calls_ok"].as_u64().expect("calls_ok");
        let shed =
            s["r503"].as_u64().expect("r503") + s["r503_relayed"].as_u64().expect("r503_relayed");
        assert_eq!(
            ok + shed,
            attempted,
            "every call completed or was shed: {s}"
        );
        assert!(shed * 10 <= attempted, "at most 10% shed: {s}");
    }
    let configs = v["configs"].as_array().expect("configs");
    let s2p2 = configs
        .iter()
        .find(|c| c["config"] == "S2P2")
        .expect("S2P2");
    let shares: Vec<f64> = s2p2["shares"]
        .as_array()
        .expect("shares")
        .iter()
        .filter_map(serde_json::Value::as_f64)
        .collect();
    assert_eq!(shares.len(), 2, "{s2p2}");
    assert!((shares.iter().sum::<f64>() - 1.0).abs() < 1e-6, "{s2p2}");
    assert!(
        shares.iter().all(|f| *f > 0.2),
        "both second stages took calls: {s2p2}"
    );
    // min(f_j · min(∞, 2·600), 600) summed: 1,200 unless a share exceeds one half.
    let want: f64 = shares.iter().map(|f| (f * 1200.0).min(600.0)).sum();
    let model = s2p2["model_cps"].as_f64().expect("model");
    assert!((model - want).abs() < 1e-6, "{model} vs {want}");
    let csv = std::fs::read_to_string(out.join("steps.csv")).expect("steps.csv");
    assert!(csv.starts_with("config,offered_cps,"), "{csv}");
    assert_eq!(csv.lines().count(), 3, "header + 2 steps");
    let svg = std::fs::read_to_string(out.join("throughput.svg")).expect("svg");
    assert!(svg.contains("S2P2 model"));
}

/// `holdline lab failover`, small: the second-stage and the Redis drills (a server of the
/// second-stage cluster, then the Redis primary, killed with SIGKILL 4 s into 9 s of 50
/// calls/s held 1 s and 100 users re-REGISTERing every 2 s). Issue 18's criteria: at most
/// 1% of the calls in progress or placed around the kill fail, no acknowledged binding is
/// lost, the survivor holds every binding, the service routes around the dead part (probing,
/// Sentinel) within 2 s, and no call waited more than 2 s for its answer.
#[test]
fn failover_drills_lose_no_binding_and_at_most_one_percent_of_calls() {
    let _one_run_at_a_time = common::sipp_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("failover");
    let err = run_lab(
        &[
            "failover",
            "--drills",
            "second-stage,redis",
            "--rate",
            "50",
            "--hold",
            "1",
            "--users",
            "100",
            "--reg-users",
            "100",
            "--refresh",
            "2",
            "--seconds",
            "9",
            "--kill-at",
            "4",
        ],
        &out,
    );
    assert!(err.contains("killed P_a"), "progress is shown:\n{err}");
    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["experiment"], "failover");
    let drills = v["drills"].as_array().expect("drills");
    assert_eq!(drills.len(), 2, "{text}");
    for d in drills {
        let n = |k: &str| d[k].as_f64().unwrap_or_else(|| panic!("{k}: {d}"));
        assert!(n("calls_attempted") > 300.0, "{d}");
        assert!(n("calls_in_window") > 100.0, "{d}");
        assert!(n("failed_share_of_window") <= 0.01, "{d}");
        // Every callee and every re-REGISTERing user acknowledged, none lost.
        assert_eq!(n("bindings_acked"), 200.0, "{d}");
        assert_eq!(n("bindings_lost"), 0.0, "{d}");
        assert!(n("bindings_on_survivor") >= 200.0, "{d}");
        assert!(n("reg_ok") > 300.0, "{d}");
        assert!(n("routed_around_s") < 2.0, "{d}");
        assert!(n("pdd_max_ms") < 2000.0, "{d}");
        assert!(!d["timeline"].as_array().expect("timeline").is_empty());
    }
    let csv = std::fs::read_to_string(out.join("timeline.csv")).expect("timeline.csv");
    assert!(csv.starts_with("drill,t_s,calls_placed,"), "{csv}");
    assert!(csv.contains("\nredis,"), "{csv}");
    let svg = std::fs::read_to_string(out.join("timeline-redis.svg")).expect("svg");
    assert!(svg.contains("kill -9"));
}
