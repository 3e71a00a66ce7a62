use holdline_base::{Duration, Instant};

use super::*;

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

#[test]
fn jain_bounds() {
    assert!((jain_index(&[5.0, 5.0, 5.0]) - 1.0).abs() < 1e-12);
    assert!((jain_index(&[9.0, 0.0, 0.0]) - 1.0 / 3.0).abs() < 1e-12);
    assert!((jain_index(&[1.0, 2.0]) - 0.9).abs() < 1e-12);
    assert_eq!(jain_index(&[]), 1.0);
}

#[test]
fn rows_are_differences_of_totals() {
    let mut r = Recorder::new(ms(1000), Duration::from_secs(1), Duration::from_secs(10));
    r.c.attempted += 3;
    r.active = 3;
    assert_eq!(r.tick(ms(1999)), 0);
    assert_eq!(r.tick(ms(2000)), 1);
    r.c.attempted += 2;
    r.c.completed += 1;
    // Three seconds pass without a tick: the events go to the first interval cut.
    assert_eq!(r.tick(ms(5000)), 3);
    r.c.attempted += 1;
    r.finish(ms(5500));
    let rows = r.rows();
    assert_eq!(rows.len(), 5);
    assert_eq!(rows[0].t_ms, 1000);
    assert_eq!(rows[0].counts.attempted, 3);
    assert_eq!(rows[0].active, 3);
    assert_eq!(rows[1].counts.attempted, 2);
    assert_eq!(rows[1].counts.completed, 1);
    assert_eq!(rows[2].counts, Counters::default());
    assert_eq!(rows[4].t_ms, 4500);
    assert_eq!(rows[4].counts.attempted, 1);
    let sum: u64 = rows.iter().map(|r| r.counts.attempted).sum();
    assert_eq!(sum, r.c.attempted);
}

#[test]
fn the_steady_pdd_counts_only_calls_placed_after_the_steady_start() {
    let mut r = Recorder::new(ms(0), Duration::from_secs(1), Duration::from_secs(10));
    r.steady_from = Some(ms(2_500));
    // Placed in the transient (answered late): in the PDD, not in the steady PDD.
    r.record_answer_sent(ms(100), ms(1_900));
    r.record_answer_sent(ms(2_400), ms(4_000));
    // Placed after the steady start.
    r.record_answer_sent(ms(2_500), ms(2_520));
    r.record_answer_sent(ms(3_000), ms(3_010));
    assert_eq!(r.lat.pdd.count(), 4);
    assert_eq!(r.lat.pdd_steady.count(), 2);
    assert!(r.lat.pdd_steady.summary().max_ms <= 20.5);
    assert_eq!(r.c.goodput, 4);
    // Without a steady start, nothing goes there.
    let mut q = Recorder::new(ms(0), Duration::from_secs(1), Duration::from_secs(10));
    q.record_answer_sent(ms(5_000), ms(5_001));
    assert_eq!((q.lat.pdd.count(), q.lat.pdd_steady.count()), (1, 0));
}

#[test]
fn goodput_window_and_failures() {
    let mut r = Recorder::new(ms(0), Duration::from_secs(1), Duration::from_secs(10));
    r.record_answer(Duration::from_millis(20));
    r.record_answer(Duration::from_secs(10));
    r.record_answer(Duration::from_millis(10_001));
    assert_eq!(r.c.goodput, 2);
    assert_eq!(r.lat.pdd.count(), 3);
    r.record_failure(503);
    r.record_failure(503);
    r.record_failure(486);
    assert_eq!((r.c.r503, r.c.r_fail_other), (2, 1));
    r.record_register(200, Duration::from_millis(1));
    r.record_register(423, Duration::from_millis(1));
    r.record_register(503, Duration::from_millis(1));
    r.record_register(404, Duration::from_millis(1));
    assert_eq!(
        (r.c.reg_ok, r.c.reg_423, r.c.reg_5xx, r.c.reg_fail_other),
        (1, 1, 1, 1)
    );
}

#[test]
fn latency_quantiles_are_within_precision() {
    let mut l = Latency::new();
    for i in 1..=1000u64 {
        l.record(Duration::from_micros(i * 100));
    }
    let s = l.summary();
    assert_eq!(s.count, 1000);
    assert!((s.p50_ms - 50.0).abs() < 0.1, "{s:?}");
    assert!((s.p99_ms - 99.0).abs() < 0.1, "{s:?}");
    assert!((s.max_ms - 100.0).abs() < 0.1, "{s:?}");
    let cdf = l.cdf();
    assert!(cdf.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
    assert!((cdf.last().map_or(0.0, |p| p.1) - 1.0).abs() < 1e-12);
    assert_eq!(Latency::new().quantile_ms(0.5), 0.0);
}

#[test]
fn csv_schema() {
    let header = csv_header();
    let cols: Vec<&str> = header.trim_end().split(',').collect();
    assert_eq!(cols[0], "t_s");
    assert_eq!(*cols.last().unwrap_or(&""), "active");
    for required in [
        "offered",
        "attempted",
        "r100",
        "r180",
        "r200",
        "r503",
        "r_fail_other",
        "timeouts",
        "retrans_invite",
        "retrans_bye",
        "retrans_200",
        "completed",
        "goodput",
    ] {
        assert!(cols.contains(&required), "missing {required}");
    }
    let mut r = Recorder::new(ms(0), Duration::from_secs(1), Duration::from_secs(10));
    r.c.r503 = 7;
    r.active = 4;
    r.tick(ms(1000));
    let line = csv_row(&r.rows()[0]);
    let vals: Vec<&str> = line.trim_end().split(',').collect();
    assert_eq!(vals.len(), cols.len());
    assert_eq!(vals[0], "1.000");
    let i503 = cols.iter().position(|c| *c == "r503").unwrap_or(0);
    assert_eq!(vals[i503], "7");
    assert_eq!(*vals.last().unwrap_or(&""), "4");
}

#[test]
fn json_schema() {
    let mut r = Recorder::new(ms(0), Duration::from_secs(1), Duration::from_secs(10));
    r.c.attempted = 10;
    r.c.offered = 10;
    r.c.completed = 8;
    r.c.calls_failed = 2;
    r.c.retrans_200 = 3;
    r.c.retrans_invite = 4;
    for _ in 0..8 {
        r.record_answer(Duration::from_millis(5));
    }
    r.record_failure(503);
    r.msgs.row(MsgKey::Request(Method::Invite)).sent = 10;
    r.mark_load_end(ms(2000));
    r.finish(ms(3000));
    let json = r
        .report(ms(3000), serde_json::json!({"mode": "uac"}))
        .to_json();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap_or_default();
    for key in [
        "calls_attempted",
        "calls_completed",
        "calls_failed",
        "goodput_cps",
        "pdd_p50_ms",
        "pdd_p99_ms",
        "retrans_200",
        "retrans_invite",
    ] {
        assert!(v[key].is_number(), "{key} not numeric in {json}");
    }
    assert_eq!(v["calls_attempted"], 10);
    assert_eq!(v["retrans_200"], 3);
    // Rates use the load phase (2 s), not the whole run.
    assert_eq!(v["goodput_cps"], 4.0);
    assert_eq!(v["failures_by_code"]["503"], 1);
    assert_eq!(v["messages"][0]["message"], "INVITE");
    assert_eq!(v["messages"][0]["sent"], 10);
    assert!(v["per_second"].as_array().is_some_and(|a| !a.is_empty()));
    assert!(v["latency"]["pdd"]["p99_ms"].is_number());
    assert_eq!(v["meta"]["mode"], "uac");
    let table = summary_table(&r.report(ms(3000), serde_json::Value::Null));
    assert!(table.contains("INVITE"));
}

#[test]
fn merge_adds_everything() {
    let mut a = Recorder::new(ms(0), Duration::from_secs(1), Duration::from_secs(10));
    let mut b = a.clone();
    a.c.attempted = 2;
    b.c.completed = 2;
    b.record_failure(486);
    b.lat.setup.record(Duration::from_millis(3));
    b.msgs
        .row(MsgKey::Response(200, Method::Invite))
        .retransmitted = 5;
    a.merge(&b);
    assert_eq!((a.c.attempted, a.c.completed), (2, 2));
    assert_eq!(a.failures.get(&486), Some(&1));
    assert_eq!(a.lat.setup.count(), 1);
    assert_eq!(
        a.msgs
            .get(MsgKey::Response(200, Method::Invite))
            .retransmitted,
        5
    );
}

#[test]
fn goodput_in_load_leaves_out_what_the_drain_answers() {
    // 10 s of load: 4 answers while calls are offered, then the backlog drains 6 more
    // within their goodput window after the arrivals stopped.
    let mut r = Recorder::new(ms(0), Duration::from_secs(1), Duration::from_secs(10));
    for _ in 0..4 {
        r.record_answer(Duration::from_millis(50));
    }
    r.mark_load_end(ms(10_000));
    for _ in 0..6 {
        r.record_answer(Duration::from_secs(3));
    }
    let rep = r.report(ms(20_000), serde_json::Value::Null);
    assert_eq!(r.c.goodput, 10);
    assert!((rep.goodput_cps - 1.0).abs() < 1e-9, "{}", rep.goodput_cps);
    assert!(
        (rep.goodput_in_load_cps - 0.4).abs() < 1e-9,
        "{}",
        rep.goodput_in_load_cps
    );
    // Merged recorders add up.
    let mut m = r.clone();
    m.merge(&r);
    let rep = m.report(ms(20_000), serde_json::Value::Null);
    assert!((rep.goodput_in_load_cps - 0.8).abs() < 1e-9);
}
