//! Whole-scenario tests: determinism, and the qualitative overload result.

use holdline_sim::{Results, Scenario, run_scenario, series_csv};

/// One proxy of capacity ≈ 200 calls/s (6 messages of 833 µs per call), a step from 0.5x
/// to 10x.
fn scenario(local: &str, seed: u64, duration_s: f64, step_at: f64) -> Scenario {
    let text = format!(
        r#"
name = "test"
seed = {seed}
duration_s = {duration_s}
drain_s = 2
settle_s = 5
capacity_cps = 200

[[servers]]
name = "proxy"
local = "{local}"
service_us = 833.333
reject_us = 15
queue = 256

[[uas]]
name = "uas"

[[uac]]
name = "uac"
target = "proxy"
steps = [{{ at_s = 0, factor = 0.5 }}, {{ at_s = {step_at}, factor = 10 }}]

[[routes]]
server = "proxy"
to = "uas"

[default_link]
delay_ms = 0.5
jitter_ms = 0.2
"#
    );
    Scenario::from_toml("test.toml", &text).expect("valid scenario")
}

fn results(sc: &Scenario, runs: u64) -> Results {
    let out = run_scenario(sc, runs, |_, _| {}).expect("runs");
    Results::from_runs(sc, &out)
}

fn results_and_series(sc: &Scenario, runs: u64) -> (String, String) {
    let out = run_scenario(sc, runs, |_, _| {}).expect("runs");
    (Results::from_runs(sc, &out).to_json(), series_csv(&out))
}

#[test]
fn same_seed_same_bytes_different_seed_different_results() {
    let sc = scenario("occ", 7, 14.0, 7.0);
    let (a, series_a) = results_and_series(&sc, 2);
    let (b, series_b) = results_and_series(&sc, 2);
    assert_eq!(series_a, series_b, "the time series too");
    assert_eq!(
        a, b,
        "same scenario and seed must give byte-identical results"
    );
    let other = results(&scenario("occ", 8, 14.0, 7.0), 2).to_json();
    // The two runs of one invocation differ from each other (seeds derived per run).
    let r: serde_json::Value = serde_json::from_str(&a).expect("json");
    assert_ne!(r["run_seeds"][0], r["run_seeds"][1]);
    assert!(
        r["points"][0]["offered_cps"]["ci95"]
            .as_f64()
            .is_some_and(|c| c > 0.0)
    );
    assert_ne!(a, other, "another seed must give other results");
}

#[test]
fn occ_holds_goodput_at_10x_where_no_control_collapses() {
    let capacity = 200.0;
    let at_10x = |local: &str| {
        let r = results(&scenario(local, 3, 30.0, 10.0), 1);
        let p = r
            .points
            .iter()
            .find(|p| p.load_factor == Some(10.0))
            .expect("10x point");
        let low = r
            .points
            .iter()
            .find(|p| p.load_factor == Some(0.5))
            .expect("0.5x point");
        // Below capacity everything offered is carried.
        assert!(
            low.goodput_cps.mean > 0.9 * low.offered_cps.mean,
            "{local} at 0.5x: {low:?}"
        );
        eprintln!(
            "{local}: 10x goodput {:.1}/s throughput {:.1}/s calls ok {:.1}/s 503 {:.1}/s PDD p50 {:.1} ms",
            p.goodput_cps.mean,
            p.throughput_cps.mean,
            p.calls_ok_cps.mean,
            p.rejected_cps.mean,
            p.pdd_p50_ms.mean
        );
        p.clone()
    };
    let none = at_10x("none");
    let occ = at_10x("occ");
    assert!(
        none.throughput_cps.mean < 0.3 * capacity,
        "no control must collapse at 10x: {none:?}"
    );
    assert!(
        occ.throughput_cps.mean > 0.7 * capacity,
        "OCC must hold most of the capacity at 10x: {occ:?}"
    );
    assert!(
        occ.rejected_cps.mean > 5.0 * capacity,
        "OCC rejects the excess: {occ:?}"
    );
}

#[test]
fn lossy_links_are_recovered_by_retransmissions() {
    // 0.5x on a link that loses 5% of packets in bursts (Gilbert-Elliott) both ways.
    let text = r#"
duration_s = 12
drain_s = 8
settle_s = 2
capacity_cps = 200

[[servers]]
name = "proxy"
local = "occ"
service_us = 833.333

[[uas]]
name = "uas"

[[uac]]
name = "uac"
target = "proxy"
steps = [{ at_s = 0, factor = 0.5 }]

[[routes]]
server = "proxy"
to = "uas"

[[links]]
between = ["uac", "proxy"]
delay_ms = 5
gilbert_elliott = { p_good_to_bad = 0.02, p_bad_to_good = 0.4, loss_bad = 1.0 }
"#;
    let sc = Scenario::from_toml("lossy.toml", text).expect("valid scenario");
    let out = run_scenario(&sc, 1, |_, _| {}).expect("run");
    let r = Results::from_runs(&sc, &out);
    let p = &r.points[0];
    assert!(r.link_drops_per_run > 0.0, "the link lost packets");
    assert!(
        p.retrans_invite_cps.mean > 0.0,
        "INVITEs were retransmitted: {p:?}"
    );
    // Stationary loss ≈ 4.8% per direction; retransmissions recover nearly every call.
    assert!(
        p.calls_ok_cps.mean > 0.9 * p.offered_cps.mean,
        "calls recovered: {p:?}"
    );
    // PDD p99 shows the retransmission timer (T1 = 500 ms).
    assert!(p.pdd_p99_ms.mean > 400.0, "{p:?}");
    // The run's totals count the callers' INVITEs (at least those of the window) and the
    // callees' 200 OKs sent again for lost ACKs.
    for o in &out {
        let window = o.steps[0].window_s;
        let windowed = o.steps[0].retrans_invite_cps * window;
        assert!(
            o.retransmitted.invite as f64 >= windowed.round(),
            "{:?}",
            o.retransmitted
        );
        assert!(
            o.retransmitted.invite > 0 && o.retransmitted.r200 > 0,
            "{:?}",
            o.retransmitted
        );
    }
}

/// uac → e1 → c1 → c2 → e2 → uas, the paper's server discipline and OCC interval (1 s);
/// c2, two hops from the ingress edge e1, is the bottleneck (5 ms per message, 7 messages per
/// call: ≈ 28.6 calls/s), the others 0.5 ms; offered 67 calls/s.
fn two_hop_core(seed: u64) -> Scenario {
    let server = |name: &str, us: f64| {
        format!(
            r#"
[[servers]]
name = "{name}"
local = "occ"
local_interval_ms = 1000
discipline = "paper"
service_us = {us}
reject_us = {us}
queue = 100
batch = 1
read_batches = 1
"#
        )
    };
    let text = format!(
        r#"
name = "two-hop-core"
seed = {seed}
duration_s = 30
drain_s = 4
settle_s = 15
{}{}{}{}
[[uas]]
name = "uas"

[[uac]]
name = "uac"
target = "e1"
domain = "e2.example"
steps = [{{ at_s = 0, rate_cps = 67 }}]

[[routes]]
server = "e1"
domain = "e2.example"
to = "c1"

[[routes]]
server = "c1"
domain = "e2.example"
to = "c2"

[[routes]]
server = "c2"
domain = "e2.example"
to = "e2"

[[routes]]
server = "e2"
domain = "e2.example"
to = "uas"

[default_link]
delay_ms = 1
"#,
        server("e1", 500.0),
        server("c1", 500.0),
        server("c2", 5000.0),
        server("e2", 500.0),
    );
    Scenario::from_toml("two-hop-core.toml", &text).expect("valid scenario")
}

/// Seed 003's claim at the smallest scale: with the overloaded core two hops from the ingress
/// edge, DEOC at the edge (fed the core's rejections, which reach it as 500s from the core in
/// between) keeps the calls set up end to end near the core's capacity, where No Control
/// collapses (200 OKs still reach callers, their ACKs are lost in the core's full buffer) and
/// OCC-Local spends the core on rejections. Deterministic: the same seed, the same results.
#[test]
fn deoc_at_the_edge_protects_a_core_two_hops_away() {
    let base = two_hop_core(5);
    let run = |mechanism: &str| {
        let sc = base.with_mechanism(mechanism).expect("mechanism");
        let r = results(&sc, 1);
        (r.points[0].throughput_cps.mean, r)
    };
    let (none, _) = run("none");
    let (occ, _) = run("occ");
    let (deoc, r) = run("occ+deoc");
    eprintln!("calls set up per second: none {none:.1}, occ {occ:.1}, occ+deoc {deoc:.1}");
    let e1 = r.servers.iter().find(|s| s.server == "e1").expect("e1");
    assert!(
        e1.forward_rejected.mean > 300.0,
        "DEOC at e1 rejected calls: {e1:?}"
    );
    assert!(deoc > 2.0 * none, "DEOC {deoc:.1} vs No Control {none:.1}");
    assert!(deoc > 2.0 * occ, "DEOC {deoc:.1} vs OCC-Local {occ:.1}");
    assert!(
        deoc > 0.55 * 28.6,
        "DEOC {deoc:.1} near the core's capacity"
    );
    // Only the ingress edge runs DEOC.
    let sc = base.with_mechanism("occ+deoc").expect("mechanism");
    let edges: Vec<&str> = sc
        .servers
        .iter()
        .filter(|s| s.edge == "deoc")
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(edges, ["e1"]);
    assert_eq!(
        results(&sc, 1).to_json(),
        r.to_json(),
        "deterministic with DEOC"
    );
}

/// DEOC's target learned from Record-Route (`deoc = { target = "record-route" }`, the
/// server's `[overload.deoc] target`): the proxy core at the ingress edge reads the egress
/// edge from the answers (per callee and per domain), DEOC gates per learned edge, and the
/// calls it carries match those of the scenario's own domain → edge map within 15% (the
/// refusal of an unknown value is a unit test of the scenario file).
#[test]
fn deoc_learns_the_egress_edge_from_record_route() {
    let base = two_hop_core(5)
        .with_mechanism("occ+deoc")
        .expect("mechanism");
    let named = results(&base, 1);
    let mut sc = base;
    for s in sc.servers.iter_mut().filter(|s| s.edge == "deoc") {
        s.deoc.target = Some("record-route".into());
    }
    let learned = results(&sc, 1);
    let e1 = |r: &Results| r.servers.iter().find(|s| s.server == "e1").cloned();
    let (n, l) = (e1(&named).expect("e1"), e1(&learned).expect("e1"));
    assert_eq!(
        n.edges_learned.mean, 0.0,
        "nothing learned from the domain map: {n:?}"
    );
    assert!(
        l.edges_learned.mean >= 2.0,
        "callees and the domain learned: {l:?}"
    );
    assert!(l.forward_rejected.mean > 300.0, "DEOC gated calls: {l:?}");
    let (a, b) = (
        named.points[0].throughput_cps.mean,
        learned.points[0].throughput_cps.mean,
    );
    eprintln!(
        "calls set up per second: named {a:.1}, learned {b:.1}; e1 learned {} entries, gated {}",
        l.edges_learned.mean, l.forward_rejected.mean
    );
    assert!((b - a).abs() <= 0.15 * a, "named {a:.1}, learned {b:.1}");
}

/// `lab/sim/seed003-mixed.toml` (one core shared by two DEOC and two non-DEOC ingress edges,
/// 8 call flows) at 2× the core's capacity, shortened: 80 s of load, points over the last 50.
fn mixed_short() -> Scenario {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab/sim/seed003-mixed.toml");
    let text = std::fs::read_to_string(&path).expect("lab/sim/seed003-mixed.toml");
    let mut sc = Scenario::from_toml("seed003-mixed.toml", &text).expect("valid scenario");
    sc.duration_s = 80.0;
    sc.settle_s = 30.0;
    sc.drain_s = 2.0;
    for u in &mut sc.uac {
        for s in &mut u.steps {
            s.factor = s.factor.map(|f| 2.0 * f);
        }
    }
    sc
}

/// Jain's index of the flows' mean goodput over the runs (the runs pooled: a flow of 3
/// calls/s counted over 50 s has a Poisson noise of 8%, which alone puts a single run's index
/// of perfectly fair flows near 0.99).
fn pooled_jain(r: &Results) -> f64 {
    let xs: Vec<f64> = r.points.iter().map(|p| p.goodput_cps.mean).collect();
    holdline_sim::jain_index(&xs).expect("goodput")
}

/// Seed 003's future work (l. 442-444): with DEOC at only some edges, the DEOC edges back off
/// on the core's 503s and the others take the capacity (Jain's index ≈ 0.67); the core's
/// per-upstream fair admission (`local_fairness = "per-upstream"`) restores it (≥ 0.98), with
/// DEOC's binary signal and with load reports.
#[test]
fn per_upstream_fairness_at_the_core_makes_mixed_deoc_edges_fair() {
    let base = mixed_short();
    let run = |mechanism: &str| {
        let sc = base.with_mechanism(mechanism).expect("mechanism");
        let r = results(&sc, 4);
        let jain = pooled_jain(&r);
        let per_run = r.jain_index.as_ref().map_or(0.0, |j| j.mean);
        let goodput: f64 = r.points.iter().map(|p| p.goodput_cps.mean).sum();
        eprintln!("{mechanism}: Jain pooled {jain:.3}, per run {per_run:.3}, goodput {goodput:.1}");
        (jain, per_run, r)
    };
    let (unfair, unfair_runs, r) = run("occ+asis");
    // The DEOC edges (e1, e2) lose: their flows get a fraction of the others'.
    let flows = |r: &Results, edge: &str| -> f64 {
        r.points
            .iter()
            .filter(|p| p.population.starts_with(edge))
            .map(|p| p.goodput_cps.mean)
            .sum()
    };
    assert!(
        flows(&r, "ua1-") + flows(&r, "ua2-") < 0.5 * (flows(&r, "ua3-") + flows(&r, "ua4-")),
        "DEOC edges starve without the mechanism"
    );
    assert!(unfair < 0.8 && unfair_runs < 0.8, "{unfair} {unfair_runs}");
    let (fair, fair_runs, r) = run("occ+asis+fair");
    assert!(fair >= 0.98, "with per-upstream fairness: {fair}");
    assert!(fair_runs >= 0.97, "per run: {fair_runs}");
    let c1 = r.servers.iter().find(|s| s.server == "c1").expect("c1");
    assert!(c1.rejected.mean > 100.0, "the core still rejects: {c1:?}");
    let (probe, _, _) = run("occ+asis+probe+fair");
    assert!(probe >= 0.98, "with load reports too: {probe}");
}

/// One UAS called directly by a population ramping 0 -> 200 calls/s over 10 s, then holding
/// 200/s for 4 s, then ramping down to 20/s by 16 s (`ramp = true` steps).
fn ramp_scenario(arrivals: &str, seed: u64) -> Scenario {
    let text = format!(
        r#"
seed = {seed}
duration_s = 18
drain_s = 1
settle_s = 0
[[uas]]
name = "uas"
[[uac]]
name = "uac"
target = "uas"
arrivals = "{arrivals}"
steps = [
    {{ at_s = 0, rate_cps = 0 }},
    {{ at_s = 10, rate_cps = 200, ramp = true }},
    {{ at_s = 14, rate_cps = 200 }},
    {{ at_s = 16, rate_cps = 20, ramp = true }},
]
"#
    );
    Scenario::from_toml("ramp.toml", &text).expect("valid scenario")
}

#[test]
fn ramp_steps_offer_the_integral_of_their_rate() {
    // Calls offered per interval (offered_cps × window): the ramp 0 -> 200 over 10 s is
    // 1,000 calls, 200/s over 4 s 800, the ramp 200 -> 20 over 2 s 220, 20/s over 2 s 40.
    let want = [1000.0, 800.0, 220.0, 40.0];
    let counts = |arrivals: &str, seed: u64| -> Vec<f64> {
        let sc = ramp_scenario(arrivals, seed);
        let out = run_scenario(&sc, 1, |_, _| {}).expect("runs");
        out[0]
            .steps
            .iter()
            .map(|s| s.offered_cps * s.window_s)
            .collect()
    };
    // Constant arrivals: exactly the integral (± 1).
    let got = counts("constant", 1);
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1.0 + 1e-6, "constant: {got:?} vs {want:?}");
    }
    // Poisson: within 4 standard deviations (sqrt of the mean) in every interval, over
    // several seeds; and not the step profile's count (0/s over the first 10 s).
    for seed in 1..=3 {
        let got = counts("poisson", seed);
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= 4.0 * w.sqrt(),
                "seed {seed}: {got:?} vs {want:?}"
            );
        }
    }
    // The ramp's point reports its mean rate.
    let sc = ramp_scenario("constant", 1);
    let out = run_scenario(&sc, 1, |_, _| {}).expect("runs");
    let rates: Vec<f64> = out[0].steps.iter().map(|s| s.rate_cps).collect();
    assert_eq!(rates, [100.0, 200.0, 110.0, 20.0]);
}

#[test]
fn a_ramp_into_the_first_step_is_refused() {
    let text = r#"
duration_s = 5
[[uas]]
name = "uas"
[[uac]]
name = "uac"
target = "uas"
steps = [{ at_s = 0, rate_cps = 10, ramp = true }]
"#;
    let e = Scenario::from_toml("r.toml", text).expect_err("ramp into step 0");
    assert_eq!((e.line, e.key.as_str()), (8, "uac[0].steps"));
    assert!(e.message.contains("ramp"), "{e}");
    let e = Scenario::from_toml("r.toml", &text.replace("ramp = true", "ramp = 1"))
        .expect_err("not a boolean");
    assert!(e.message.contains("bool"), "{e}");
}

/// A proxy whose route is DNS-like (`srv`) over the servers a, b and c, each routing to
/// the UAS; `links` adds `[[links]]` entries.
fn srv_scenario(srv: &str, links: &str, rate: f64, duration_s: f64, drain_s: f64) -> Scenario {
    let mut text = format!(
        r#"
seed = 3
duration_s = {duration_s}
drain_s = {drain_s}
settle_s = 0
[[servers]]
name = "proxy"
service_us = 10
"#
    );
    for s in ["a", "b", "c"] {
        text.push_str(&format!(
            "[[servers]]\nname = \"{s}\"\nservice_us = 10\n[[routes]]\nserver = \"{s}\"\nto = \"uas\"\n"
        ));
    }
    text.push_str(&format!(
        r#"
[[uas]]
name = "uas"
[[uac]]
name = "uac"
target = "proxy"
steps = [{{ at_s = 0, rate_cps = {rate} }}]
[[routes]]
server = "proxy"
srv = {srv}
{links}
"#
    ));
    Scenario::from_toml("srv.toml", &text).expect("valid scenario")
}

/// Per server of a run: (name, new INVITEs admitted, failovers).
fn server_calls(out: &holdline_sim::RunOutput) -> Vec<(String, u64, u64)> {
    out.servers
        .iter()
        .map(|(n, c)| (n.clone(), c.admitted, c.failovers))
        .collect()
}

#[test]
fn srv_routes_fail_over_to_the_next_priority_within_the_transaction() {
    // The priority-10 target is a callee out of service (every INVITE answered 503): every
    // call completes through the priority-20 one, the 503 failed over in a new branch of
    // the same transaction (a 503 from the proxy's only branch would reach the caller as a
    // 500, RFC 3261 §16.7). The failed target then goes last for 30 s, as in the server:
    // over 70 s it is tried (and failed over from) 2 or 3 times.
    let text = r#"
seed = 3
duration_s = 70
drain_s = 2
settle_s = 0
[[servers]]
name = "proxy"
service_us = 10
[[uas]]
name = "dead"
status = 503
[[uas]]
name = "uas"
[[uac]]
name = "uac"
target = "proxy"
steps = [{ at_s = 0, rate_cps = 5 }]
[[routes]]
server = "proxy"
srv = [{ to = "dead", priority = 10, weight = 1 }, { to = "uas", priority = 20, weight = 0 }]
"#;
    let sc = Scenario::from_toml("srv.toml", text).expect("valid scenario");
    let out = run_scenario(&sc, 1, |_, _| {}).expect("runs");
    let step = &out[0].steps[0];
    let calls = (step.offered_cps * step.window_s).round() as u64;
    assert!(calls > 300, "{calls} calls");
    let ok = (step.calls_ok_cps * step.window_s).round() as u64;
    assert!(ok + 1 >= calls, "{ok} of {calls}: {step:?}");
    assert_eq!(step.failed_other_cps + step.rejected_cps, 0.0, "{step:?}");
    let failovers = out[0].servers[0].1.failovers;
    assert!((2..=3).contains(&failovers), "{failovers} failovers");

    // The same with the priority-10 target a server behind a link that loses everything:
    // the first calls time out there (Timer B, 32 s) and fail over within their
    // transaction — too late for their callers, whose own Timer B (32 s from the same
    // INVITE) has just fired — and once a failed, the later calls go to c at once.
    let sc = srv_scenario(
        r#"[{ to = "a", priority = 10, weight = 1 }, { to = "c", priority = 20, weight = 0 }]"#,
        "[[links]]\nbetween = [\"proxy\", \"a\"]\nloss = 1.0",
        5.0,
        40.0,
        35.0,
    );
    let mut sc = sc;
    sc.uac[0].steps.push(holdline_sim::scenario::StepSpec {
        at_s: 33.0,
        rate_cps: Some(5.0),
        factor: None,
    });
    let out = run_scenario(&sc, 1, |_, _| {}).expect("runs");
    let servers = server_calls(&out[0]);
    let calls: u64 = out[0]
        .steps
        .iter()
        .map(|s| (s.offered_cps * s.window_s).round() as u64)
        .sum();
    // Every INVITE reached c, none a; about 32 s of calls (160) failed over.
    assert_eq!((servers[1].1, servers[3].1), (0, calls), "{servers:?}");
    assert!((120..=200).contains(&servers[0].2), "{servers:?}");
    let late = &out[0].steps[1];
    let ok = (late.calls_ok_cps * late.window_s).round();
    let offered = (late.offered_cps * late.window_s).round();
    assert!(ok + 1.0 >= offered, "{late:?}");
    assert_eq!(late.failed_other_cps + late.rejected_cps, 0.0, "{late:?}");
}

#[test]
fn srv_weights_split_calls_within_a_priority() {
    // 60/40 between a and b at priority 10; c (priority 20) gets nothing while they work.
    let sc = srv_scenario(
        r#"[{ to = "a", priority = 10, weight = 60 }, { to = "b", priority = 10, weight = 40 }, { to = "c", priority = 20, weight = 0 }]"#,
        "",
        200.0,
        20.0,
        2.0,
    );
    let out = run_scenario(&sc, 1, |_, _| {}).expect("runs");
    let servers = server_calls(&out[0]);
    let (a, b, c) = (servers[1].1 as f64, servers[2].1 as f64, servers[3].1);
    assert!(a + b > 3900.0, "{servers:?}");
    // 4,000 calls: the share's standard deviation is 0.8%; allow 3%.
    let share = a / (a + b);
    assert!((share - 0.6).abs() < 0.03, "a's share {share}: {servers:?}");
    assert_eq!(c, 0, "{servers:?}");
    assert!(servers.iter().all(|s| s.2 == 0), "{servers:?}");
    // The order is drawn from the run's seed: another seed, another split (same mean).
    let mut other = sc;
    other.seed = 4;
    let out2 = run_scenario(&other, 1, |_, _| {}).expect("runs");
    assert_ne!(server_calls(&out2[0]), servers);
}

#[test]
fn srv_routes_are_checked_with_file_line_and_key() {
    let base = r#"
duration_s = 5
[[servers]]
name = "proxy"
service_us = 10
[[uas]]
name = "uas"
[[uac]]
name = "uac"
target = "proxy"
steps = [{ at_s = 0, rate_cps = 1 }]
[[routes]]
server = "proxy"
"#;
    let ok = format!("{base}srv = [{{ to = \"uas\", priority = 1, weight = 1 }}]\n");
    let s = Scenario::from_toml("r.toml", &ok).expect("valid");
    assert_eq!(s.routes[0].next_hops(), ["uas"]);
    let refused = [
        (
            "srv = [{ to = \"nobody\", priority = 1, weight = 1 }]",
            14,
            "routes[0].srv",
        ),
        (
            "to = \"uas\"\nsrv = [{ to = \"uas\", priority = 1, weight = 1 }]",
            15,
            "routes[0].srv",
        ),
        ("srv = [{ to = \"uas\", priority = 1 }]", 14, "routes.srv"),
        (
            "srv = [{ to = \"uas\", priority = -1, weight = 1 }]",
            14,
            "routes.srv",
        ),
    ];
    for (keys, line, key) in refused {
        let e = Scenario::from_toml("r.toml", &format!("{base}{keys}\n")).expect_err(keys);
        assert_eq!((e.line, e.key.as_str()), (line, key), "{keys}: {e}");
    }
}

/// A `to_any` route whose hashed target answers 503: with `failover` (the default, as
/// holdline's hash routes) the call goes on to the user's other target in the same
/// transaction and completes; with `failover = false` (seed 003's servers, which pass a 503
/// upstream) it fails at the caller — as a 500, the proxy's only branch having got a 503.
/// The per-second series carries the mean setup delay of the 200 OKs of that second.
#[test]
fn to_any_routes_fail_over_only_when_asked() {
    let text = |failover: bool| {
        format!(
            r#"
seed = 3
duration_s = 20
drain_s = 2
settle_s = 0
[[servers]]
name = "proxy"
service_us = 10
[[uas]]
name = "dead"
status = 503
[[uas]]
name = "uas"
[[uac]]
name = "uac"
target = "proxy"
steps = [{{ at_s = 0, rate_cps = 20 }}]
[[routes]]
server = "proxy"
to_any = ["dead", "uas"]
failover = {failover}
[default_link]
delay_ms = 2
"#
        )
    };
    let run = |failover: bool| {
        let sc = Scenario::from_toml("to-any.toml", &text(failover)).expect("valid scenario");
        run_scenario(&sc, 1, |_, _| {}).expect("runs").remove(0)
    };
    let on = run(true);
    let step = &on.steps[0];
    let calls = (step.offered_cps * step.window_s).round();
    assert!(calls > 300.0, "{calls} calls");
    assert!(
        (step.calls_ok_cps * step.window_s).round() + 1.0 >= calls,
        "{step:?}"
    );
    assert!(on.servers[0].1.failovers > 100, "{:?}", on.servers);

    let off = run(false);
    let step = &off.steps[0];
    assert_eq!(off.servers[0].1.failovers, 0, "{:?}", off.servers);
    // About half the callees hash to `dead`: their calls fail (500), none is a 503.
    let failed = step.failed_other_cps / step.offered_cps;
    assert!((0.3..0.7).contains(&failed), "{failed:.2} failed: {step:?}");
    assert_eq!(step.rejected_cps, 0.0, "{step:?}");

    // Setup delay per second: two 2 ms links each way at least, and the answered seconds'
    // means average (weighted by the answers) to the run's mean.
    let rows: Vec<(u64, f64)> = off
        .series
        .iter()
        .filter_map(|r| r.pdd_mean_ms.map(|m| (r.goodput, m)))
        .collect();
    assert!(rows.len() >= 15, "{} seconds with answers", rows.len());
    assert!(rows.iter().all(|&(_, m)| m >= 8.0), "{rows:?}");
    let n: u64 = rows.iter().map(|r| r.0).sum();
    let mean = rows.iter().map(|&(g, m)| g as f64 * m).sum::<f64>() / n as f64;
    assert!(
        (mean - step.pdd_mean_ms).abs() < 0.05 * step.pdd_mean_ms,
        "series {mean:.2} ms vs run {:.2} ms",
        step.pdd_mean_ms
    );
}

/// Three SEs in front of one RE of ≈ 200 calls/s, offered 5× its capacity, the SEs taking
/// the RE's hop-by-hop answers (`feedback`: `loss` or `rate`).
fn se_re(feedback: &str) -> Scenario {
    // The RE answers only with `feedback` set too (its own next hop, the UAS, never answers).
    se_re_scenario(
        "se-re",
        11,
        "occ",
        &format!("reject_us = 15\nqueue = 512\nfeedback = \"{feedback}\"\n"),
        feedback,
    )
}

/// Three SEs (each with `local` control and the client role `feedback`) in front of an RE
/// of 200 calls/s (`local`, plus `re`'s lines), offered 5× its capacity.
fn se_re_scenario(name: &str, seed: u64, local: &str, re: &str, feedback: &str) -> Scenario {
    let mut text = format!(
        r#"
name = "{name}"
seed = {seed}
duration_s = 20
drain_s = 5
settle_s = 5
capacity_cps = 200

[[servers]]
name = "re"
local = "{local}"
service_us = 833.333
{re}
[[uas]]
name = "uas"

[[routes]]
server = "re"
to = "uas"

[default_link]
delay_ms = 0.5
jitter_ms = 0.2
"#
    );
    for i in 0..3 {
        text += &format!(
            "\n[[servers]]\nname = \"se{i}\"\nlocal = \"{local}\"\nservice_us = 20\nfeedback = \"{feedback}\"\n\
             \n[[uac]]\nname = \"uac{i}\"\ntarget = \"se{i}\"\nsteps = [{{ at_s = 0, factor = 1.6667 }}]\n\
             \n[[routes]]\nserver = \"se{i}\"\nto = \"re\"\n"
        );
    }
    Scenario::from_toml(&format!("{name}.toml"), &text).expect("valid scenario")
}

#[test]
fn rate_and_loss_feedback_move_the_rejections_upstream() {
    for feedback in ["loss", "rate"] {
        let sc = se_re(feedback);
        let out = run_scenario(&sc, 1, |_, _| {}).expect("runs");
        let r = Results::from_runs(&sc, &out);
        // One point per UAC (population): the RE's goodput is their sum.
        let goodput: f64 = r.points.iter().map(|p| p.goodput_cps.mean).sum();
        let count = |f: &dyn Fn(&holdline_sim::world::ServerCounters) -> u64, ses: bool| -> u64 {
            out[0]
                .servers
                .iter()
                .filter(|(n, _)| n.starts_with("se") == ses)
                .map(|(_, c)| f(c))
                .sum()
        };
        let se_throttled = count(&|c| c.forward_rejected, true);
        let re_rejected = count(&|c| c.rejected, false);
        eprintln!(
            "{feedback}: goodput {goodput:.1}/s, SEs throttled {se_throttled}, RE rejected {re_rejected}"
        );
        // The SEs make the rejections (4/5 of 1,000 calls/s for 20 s), the RE few.
        assert!(se_throttled > 10_000, "{feedback}: {se_throttled}");
        assert!(re_rejected * 10 < se_throttled, "{feedback}: {re_rejected}");
        assert!(goodput > 0.85 * 200.0, "{feedback}: goodput {goodput:.1}/s");
    }
}

/// Seed 004's trapezoid in the simulator: three SEs in front of an RE of ≈ 200 calls/s with
/// no control of its own and a deep FIFO queue (20,000 messages, 17 s of work: a server
/// that reads all it is sent, as seed 004's Asterisk), offered 5× its capacity; the SEs run
/// `feedback` (`window`: seed 004's window, the server's own controller; `none`).
fn se_re_window(feedback: &str) -> Scenario {
    se_re_scenario("se-re-window", 12, "none", "queue = 20000\n", feedback)
}

#[test]
fn seed_004s_window_holds_an_uncontrolled_downstream_at_its_capacity() {
    let run = |feedback: &str| {
        let sc = se_re_window(feedback);
        let out = run_scenario(&sc, 1, |_, _| {}).expect("runs");
        let r = Results::from_runs(&sc, &out);
        let goodput: f64 = r.points.iter().map(|p| p.goodput_cps.mean).sum();
        let held: u64 = out[0]
            .servers
            .iter()
            .filter(|(n, _)| n.starts_with("se"))
            .map(|(_, c)| c.forward_rejected)
            .sum();
        eprintln!("{feedback}: goodput {goodput:.1}/s, SEs held back {held}");
        (goodput, held)
    };
    let (window, held) = run("window");
    let (none, none_held) = run("none");
    // The window turns the excess away at the SEs (4/5 of 1,000 calls/s for 20 s) and keeps
    // the RE at its capacity; without it the RE's queue grows by seconds every second, and
    // the calls it serves are late (their INVITEs retransmitted, their 200s past the goodput
    // window).
    assert!(held > 10_000, "window: {held}");
    assert_eq!(none_held, 0);
    assert!(window > 0.9 * 200.0, "window: goodput {window:.1}/s");
    assert!(
        window > 2.0 * none,
        "window {window:.1}/s against none {none:.1}/s"
    );
}

/// A worker whose main socket never empties (no control at 10x, 1 ms per message) still
/// runs its timers every few hundred milliseconds: each iteration reads the socket at most
/// twice (the new readiness event and the one carried over), 8 batches of 32 datagrams
/// each, as `holdline-server` does with its deduplicated `pending` sources. Counting every
/// carried-over read again made iteration k read k times: seconds between timer runs.
#[test]
fn a_saturated_worker_keeps_its_iterations_bounded() {
    let text = r#"
seed = 5
duration_s = 30
drain_s = 2
settle_s = 0
[[servers]]
name = "proxy"
local = "none"
service_us = 1000
recv_buffer = 425984
[[uas]]
name = "uas"
[[uac]]
name = "uac"
target = "proxy"
steps = [{ at_s = 0, rate_cps = 1500 }]
[[routes]]
server = "proxy"
to = "uas"
"#;
    let sc = Scenario::from_toml("saturated.toml", text).expect("valid scenario");
    let out = run_scenario(&sc, 1, |_, _| {}).expect("runs");
    let (_, c) = &out[0].servers[0];
    assert!(c.queue_drops > 10_000, "not saturated: {c:?}");
    // Two reads of 8 × 32 datagrams at 1 ms each, and what the iteration's timers and
    // sends cost on top.
    let bound_ns = 2 * 8 * 32 * 1_000_000 + 100_000_000;
    assert!(
        c.longest_iteration_ns <= bound_ns,
        "longest iteration {} ms: {c:?}",
        c.longest_iteration_ns / 1_000_000
    );
    assert!(
        c.iterations >= 30 * 1000 / 612,
        "{} iterations",
        c.iterations
    );
}

/// A captured run holds every datagram a node sent (the run's message count), in time
/// order; the libpcap file made of it reads back as IPv4/UDP packets with valid checksums,
/// and the callers' and callees' per-second rows add up to their totals.
#[test]
fn a_captured_run_is_every_datagram_sent_and_reads_back_as_a_capture() {
    let sc = scenario("none", 3, 4.0, 2.0);
    let plain = holdline_sim::World::new(&sc, 0).expect("world").run(|_| {});
    assert!(plain.capture.is_empty(), "no capture unless asked");
    let out = holdline_sim::World::new(&sc, 0)
        .expect("world")
        .capture()
        .run(|_| {});
    assert_eq!(out.capture.len() as u64, out.messages);
    assert_eq!(out.messages, plain.messages, "capturing changes nothing");
    assert!(out.capture.windows(2).all(|w| w[0].at <= w[1].at));
    assert!(out.capture.iter().any(|c| c.bytes.starts_with(b"INVITE ")));

    let file = holdline_sim::pcap(&out.capture);
    assert_eq!(
        &file[..4],
        &0xa1b2_3c4d_u32.to_le_bytes(),
        "nanosecond pcap"
    );
    assert_eq!(&file[20..24], &101u32.to_le_bytes(), "LINKTYPE_RAW");
    let fold = |mut s: u32| {
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s
    };
    let sum = |d: &[u8]| -> u32 {
        d.chunks(2)
            .map(|p| (u32::from(p[0]) << 8) | p.get(1).map_or(0, |b| u32::from(*b)))
            .sum()
    };
    let (mut at, mut records) = (24usize, 0usize);
    while at < file.len() {
        let word = |o: usize| u32::from_le_bytes(file[o..o + 4].try_into().expect("4 bytes"));
        let (sec, nsec, len) = (word(at), word(at + 4), word(at + 8) as usize);
        let c = &out.capture[records];
        assert_eq!(
            u64::from(sec) * 1_000_000_000 + u64::from(nsec),
            c.at.as_nanos()
        );
        let ip = &file[at + 16..at + 16 + len];
        assert_eq!(ip[0], 0x45);
        assert_eq!(fold(sum(&ip[..20])), 0xffff, "IPv4 header checksum");
        let udp = &ip[20..];
        assert_eq!(u16::from_be_bytes([udp[4], udp[5]]) as usize, udp.len());
        let pseudo = sum(&ip[12..20]) + 17 + udp.len() as u32;
        assert_eq!(fold(pseudo + sum(udp)), 0xffff, "UDP checksum");
        assert_eq!(&udp[8..], c.bytes.as_slice());
        assert_eq!(u16::from_be_bytes([udp[0], udp[1]]), c.from.port());
        assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), c.to.port());
        at += 16 + len;
        records += 1;
    }
    assert_eq!(records, out.capture.len());

    // Per-second rows of each agent node: their sums are the run's totals.
    let uas = out
        .agent_series
        .iter()
        .find(|(n, _)| n == "uas")
        .expect("the callee's rows");
    let completed: u64 = uas.1.iter().map(|r| r.counts.completed).sum();
    assert_eq!(completed, out.completed);
    let uac = out
        .agent_series
        .iter()
        .find(|(n, _)| n == "uac")
        .expect("the callers' rows");
    let retrans: u64 = uac.1.iter().map(|r| r.counts.retrans_invite).sum();
    assert_eq!(retrans, out.retransmitted.invite);
    assert!(uac.1.windows(2).all(|w| w[0].t_ms < w[1].t_ms));
}

/// `recv_us`, `send_us` and `wake_us` charge a server's loop for each datagram it reads and
/// sends and for each destination of a send batch, besides the handling: its busy time
/// grows by exactly that much, counted from a capture of what it sent (a batch is what left
/// at one instant), and the calls are the same at a light load.
#[test]
fn system_call_costs_add_to_the_busy_time_per_datagram() {
    let with = |recv: f64, send: f64, wake: f64| {
        let text = SCENARIO_LIGHT.replace(
            "[[uas]]",
            &format!("recv_us = {recv}\nsend_us = {send}\nwake_us = {wake}\n\n[[uas]]"),
        );
        let sc = Scenario::from_toml("costs.toml", &text).expect("valid scenario");
        holdline_sim::World::new(&sc, 0)
            .expect("world")
            .capture()
            .run(|_| {})
    };
    let plain = with(0.0, 0.0, 0.0);
    let costly = with(7.0, 11.0, 13.0);
    let c0 = &plain.servers[0].1;
    let c1 = &costly.servers[0].1;
    assert_eq!(
        plain.completed, costly.completed,
        "light load: the same calls"
    );
    assert_eq!(c0.handled, c1.handled);
    let server = costly
        .capture
        .iter()
        .find(|c| c.bytes.starts_with(b"INVITE "))
        .map(|c| c.to)
        .expect("an INVITE to the server");
    let mine: Vec<_> = costly.capture.iter().filter(|c| c.from == server).collect();
    let sent = mine.len() as u64;
    let mut batches: Vec<_> = mine.iter().map(|c| (c.at, c.to)).collect();
    batches.sort();
    batches.dedup();
    let wakes = batches.len() as u64;
    assert!(sent > c1.handled / 2, "{sent} datagrams sent");
    assert!(wakes > 0 && wakes <= sent);
    assert_eq!((c1.sent, c1.wakes), (sent, wakes));
    assert_eq!(
        c1.busy_ns - c0.busy_ns,
        c1.handled * 7_000 + sent * 11_000 + wakes * 13_000,
        "7 µs per datagram read, 11 per datagram sent, 13 per destination of a batch"
    );
    assert_eq!(c1.loop_cost_ns, c1.busy_ns - c0.busy_ns);
}

/// One proxy at a tenth of its capacity: no queue, no retransmission.
const SCENARIO_LIGHT: &str = r#"
name = "light"
seed = 9
duration_s = 3
drain_s = 2
settle_s = 0

[[servers]]
name = "proxy"
local = "none"
service_us = 200

[[uas]]
name = "uas"

[[uac]]
name = "uac"
target = "proxy"
steps = [{ at_s = 0, rate_cps = 80 }]

[[routes]]
server = "proxy"
to = "uas"
"#;

/// The time a server's rejection budget counts as rejecting (`ServerCounters::rejection_ns`,
/// the real `holdline_overload_rejection_seconds_total`) is the handling of its rejected
/// messages plus their share of the loop's costs: at least `reject_us` per rejected INVITE,
/// at most that per rejected INVITE and per absorbed ACK plus every loop cost; it grows with
/// `reject_us`; a server that rejects nothing counts nothing.
#[test]
fn the_rejection_budget_counts_the_handling_of_rejections_and_their_share_of_the_loop() {
    let run = |local: &str, reject_us: f64| {
        let mut sc = scenario(local, 3, 6.0, 1.0);
        sc.servers[0].reject_us = reject_us;
        sc.servers[0].recv_us = 2.0;
        sc.servers[0].send_us = 5.0;
        let out = holdline_sim::World::new(&sc, 0).expect("world").run(|_| {});
        out.servers[0].1
    };
    let cheap = run("occ", 3.0);
    let dear = run("occ", 12.0);
    assert!(cheap.rejected > 1_000, "{} rejected", cheap.rejected);
    for (c, us) in [(&cheap, 3_000), (&dear, 12_000)] {
        assert!(
            c.rejection_ns >= c.rejected * us,
            "{} ns for {} rejections of {us} ns",
            c.rejection_ns,
            c.rejected
        );
        assert!(
            c.rejection_ns <= 2 * c.rejected * us + c.loop_cost_ns,
            "{} ns for {} rejections of {us} ns, loop {} ns",
            c.rejection_ns,
            c.rejected,
            c.loop_cost_ns
        );
    }
    assert!(dear.rejection_ns > cheap.rejection_ns);
    let none = run("none", 3.0);
    assert_eq!((none.rejected, none.rejection_ns), (0, 0));
}
