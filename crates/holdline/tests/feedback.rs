//! Hop-by-hop overload control (RFC 7339 loss-based) end to end, over UDP on 127.0.0.1:
//! `holdline load uac` → SE (`holdline serve`, default settings) → RE (`holdline serve`, one
//! worker, its capacity cut to about 80 calls/s with `--emulate-cost-us`) → `holdline load uas`,
//! offered about seven times the RE's capacity.
//!
//! The SE offers `oc` in its Via; the RE answers, in the responses, the loss percentage of its
//! local controller (RFC 7339), its share of a rate (RFC 7415, when the SE prefers `rate`) or
//! of a window of unanswered INVITEs (holdline's `oc-algo="window"`);
//! the SE drops that share of new INVITEs itself (503 upstream) and the RE lets the SE's
//! INVITEs past its own gate. So the excess is rejected where it costs the
//! overloaded server nothing: most 503s come from the SE, few from the RE. With the client role
//! off at the SE (`--feedback none`) every 503 comes from the RE, which is the control run.
//!
//! No speed is asserted: the checks are on who rejected what.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{BIN, Guard, Holdline, free_port, metric, scrape};

fn s(v: &str) -> String {
    v.to_owned()
}

fn total(path: &Path, key: &str) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    v["totals"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("totals.{key} missing in {v}"))
}

fn load(args: &[String]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("load")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// `holdline load uac` at 127.0.0.1:`port`: `rate` calls/s for `duration_s` s, then `drain_s`
/// s of drain, stopping by itself after `max_time_s` s, its report in `json`; waits for it
/// and checks that it succeeded.
fn run_uac(port: u16, rate: u32, duration_s: u32, drain_s: u32, max_time_s: u32, json: &Path) {
    let mut uac = Guard(
        load(&[
            s("uac"),
            s("--target"),
            format!("127.0.0.1:{port}"),
            s("--rate"),
            rate.to_string(),
            s("--duration"),
            duration_s.to_string(),
            s("--drain"),
            drain_s.to_string(),
            s("--max-time"),
            max_time_s.to_string(),
            s("--progress"),
            s("off"),
            s("--json"),
            json.display().to_string(),
        ])
        .spawn()
        .expect("spawn uac"),
    );
    let status = uac
        .wait_for(Duration::from_secs(u64::from(max_time_s) + 20))
        .expect("the UAC stops by itself");
    assert!(status.success(), "uac: {status:?}");
}

/// A `holdline load uas` on `port` (`extra`: its options beyond the defaults), bound before
/// this returns, stopping by itself after `max_time_s`.
fn run_uas(port: u16, extra: &[&str], max_time_s: u32) -> Guard {
    let mut args = vec![s("uas"), s("--listen"), format!("127.0.0.1:{port}")];
    args.extend(extra.iter().map(|a| s(a)));
    args.extend([
        s("--max-time"),
        max_time_s.to_string(),
        s("--progress"),
        s("off"),
    ]);
    let g = Guard(load(&args).spawn().expect("spawn uas"));
    common::wait_udp_bound(port, Duration::from_secs(10));
    g
}

struct Run {
    se: String,
    re: String,
    attempted: u64,
    ok: u64,
    r503: u64,
}

fn chain(se_feedback: &str) -> Run {
    chain_with(se_feedback, &[], 4)
}

/// [`chain`] with extra arguments for the RE (its defaults when empty) and `load_s` seconds
/// of load.
fn chain_with(se_feedback: &str, re_extra: &[String], load_s: u32) -> Run {
    chain_with_se(se_feedback, &[], re_extra, load_s)
}

/// [`chain_with`] with extra arguments for the SE too.
fn chain_with_se(se_feedback: &str, se_extra: &[String], re_extra: &[String], load_s: u32) -> Run {
    // One run of this file at a time: two would compete for the CPU (each is a few servers
    // and generators on two cores), and a stalled proxy answers 503s of its own.
    let _one_at_a_time = common::sipp_lock();
    let (se, re, uas) = (free_port(), free_port(), free_port());
    let (se_metrics, re_metrics) = (free_port(), free_port());
    let re_server = Holdline::start(
        &[
            s("--listen"),
            format!("udp:127.0.0.1:{re}"),
            s("--route"),
            format!("*=udp:127.0.0.1:{uas}"),
            s("--store"),
            s("memory"),
            s("--workers"),
            s("1"),
            s("--metrics"),
            format!("127.0.0.1:{re_metrics}"),
            // About 2 ms per message, 6 messages per call: ~80 calls/s. Rejections cost only
            // their real work unless `re_extra` says otherwise.
            s("--emulate-cost-us"),
            s("2000"),
        ]
        .into_iter()
        .chain(
            (!re_extra.iter().any(|a| a == "--emulate-reject-cost-us"))
                .then(|| [s("--emulate-reject-cost-us"), s("0")])
                .into_iter()
                .flatten(),
        )
        .chain(re_extra.iter().cloned())
        .collect::<Vec<_>>(),
    );
    assert!(
        !re_extra.is_empty()
            || re_server
                .startup
                .contains("feedback offered (loss) and answered"),
        "{}",
        re_server.startup
    );
    let se_server = Holdline::start(
        &[
            s("--listen"),
            format!("udp:127.0.0.1:{se}"),
            s("--route"),
            format!("*=udp:127.0.0.1:{re}"),
            s("--store"),
            s("memory"),
            s("--workers"),
            s("1"),
            s("--metrics"),
            format!("127.0.0.1:{se_metrics}"),
            s("--feedback"),
            s(se_feedback),
        ]
        .into_iter()
        .chain(se_extra.iter().cloned())
        .collect::<Vec<_>>(),
    );
    let _uas = run_uas(uas, &[], 60);
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("uac.json");
    run_uac(se, 560, load_s, 15, 40, &json);
    let run = Run {
        se: scrape(SocketAddr::from(([127, 0, 0, 1], se_metrics))),
        re: scrape(SocketAddr::from(([127, 0, 0, 1], re_metrics))),
        attempted: total(&json, "attempted"),
        ok: total(&json, "calls_ok"),
        r503: total(&json, "r503"),
    };
    drop(se_server);
    drop(re_server);
    run
}

/// Checks a run with the client role on: the SE rejected most of the excess itself, for
/// `reason`, on the RE's answers.
fn assert_upstream_rejects(on: &Run, reason: &str) {
    let se_throttled = metric(
        &on.se,
        "holdline_feedback_rejected_total",
        &[&format!("reason=\"{reason}\"")],
    );
    let re_local = metric(
        &on.re,
        "holdline_overload_rejected_total",
        &["reason=\"occupancy\""],
    );
    let answers = metric(&on.re, "holdline_feedback_answers_total", &[]);
    let exempt = metric(&on.re, "holdline_feedback_gate_exempt_total", &[]);
    let reports = metric(
        &on.se,
        "holdline_feedback_reports_total",
        &["result=\"valid\""],
    );
    let summary = format!(
        "{reason}: SE throttled {se_throttled}, RE rejected {re_local}, RE answers {answers}, \
         exempt {exempt}, SE reports {reports}; uac {} attempted {} ok {} 503",
        on.attempted, on.ok, on.r503
    );
    eprintln!("feedback on: {summary}");
    assert!(answers > 0.0 && reports > 0.0, "{summary}");
    assert!(exempt > 0.0, "{summary}");
    // The SE dropped the excess, most of it: far more 503s from it than from the RE.
    assert!(se_throttled > 0.0, "{summary}");
    assert!(se_throttled > 4.0 * re_local, "{summary}");
    // Every 503 the caller got was the SE's (the RE's are turned into 500 by the SE, RFC 3261
    // §16.7): none lost, none invented.
    assert!((on.r503 as f64) <= se_throttled, "{summary}\n{}", on.se);
    assert!(on.ok > 0, "{summary}");
}

#[test]
fn the_upstream_server_rejects_the_excess_the_overloaded_one_asks_it_to() {
    assert_upstream_rejects(&chain("loss"), "loss_throttle");
    assert_upstream_rejects(&chain("rate"), "rate_throttle");
    // holdline's explicit window: the SE keeps at most its share of the RE's window of new
    // INVITEs unanswered there and rejects the rest itself.
    let w = chain("explicit-window");
    assert_upstream_rejects(&w, "window_full");
    // The RE answered a window (it is still controlling as the load ends and the drain
    // begins, or back to 0 once calm: either way the SE throttled on window answers above).
    assert!(
        w.re.contains("holdline_feedback_answer_window{"),
        "{}",
        w.re
    );

    // Control run: the client role off, the RE does all the rejecting.
    let off = chain("none");
    let se_throttled = metric(&off.se, "holdline_feedback_rejected_total", &[]);
    let re_local = metric(
        &off.re,
        "holdline_overload_rejected_total",
        &["reason=\"occupancy\""],
    );
    let exempt = metric(&off.re, "holdline_feedback_gate_exempt_total", &[]);
    eprintln!(
        "feedback off: SE throttled {se_throttled}, RE rejected {re_local}, exempt {exempt}; \
         uac {} attempted {} ok {} 503",
        off.attempted, off.ok, off.r503
    );
    assert_eq!((se_throttled, exempt), (0.0, 0.0), "{}", off.se);
    assert!(re_local > 0.0, "{}", off.re);

    // Seed 004's window at the SE in front of an RE without any control: no feedback at all,
    // the SE holds back what does not fit its window of outstanding INVITEs towards the RE.
    let w = chain_with("window", &[s("--overload"), s("none")], 4);
    let window_full = metric(
        &w.se,
        "holdline_feedback_rejected_total",
        &["reason=\"window_full\""],
    );
    let re_rejected = metric(&w.re, "holdline_overload_rejected_total", &[]);
    let re_answers = metric(&w.re, "holdline_feedback_answers_total", &[]);
    let summary = format!(
        "window: SE window_full {window_full}, RE rejected {re_rejected}, RE answers \
         {re_answers}; uac {} attempted {} ok {} 503",
        w.attempted, w.ok, w.r503
    );
    eprintln!("{summary}");
    assert!(window_full > 0.0, "{summary}\n{}", w.se);
    // Nothing offered, nothing answered, nothing rejected at the RE: every 503 is the SE's.
    assert_eq!((re_rejected, re_answers), (0.0, 0.0), "{summary}");
    assert!((w.r503 as f64) <= window_full, "{summary}");
    assert!(w.ok > 0, "{summary}");

    // Seed 003's DEOC at the SE: no feedback either; the RE's own 503s (its OCC) are the
    // signal, and the SE's restrictor gaps calls towards the RE from the first one on.
    // DEOC adapts once per 1 s period on the 503s of the last one: 8 s of load give it
    // several periods even on a busy machine (with 4 s a CI run once saw no gap at all).
    // The offered load is 7x the RE's. From the restart's `r = λ`, the paper's β = 1/8 cuts
    // (which its overload-factor rule may skip) once left `r` above `λ` for all 8 s: a
    // clean-clone CI run on 2026-12-02 saw r 610, λ 454, 3,849 503s and no gap (see
    // docs/deoc.md, "Flash crowds"). holdline's `max_decrease` lets a cut follow the
    // period's overload factor, so the first cut taken brings `r` under `λ`.
    let dir = tempfile::tempdir().expect("tempdir");
    let se_conf = dir.path().join("se.toml");
    std::fs::write(&se_conf, "[overload.deoc]\nmax_decrease = 0.5\n").expect("se.toml");
    let d = chain_with_se(
        "deoc",
        &[s("--config"), se_conf.display().to_string()],
        &[],
        8,
    );
    let gapped = metric(
        &d.se,
        "holdline_feedback_rejected_total",
        &["reason=\"call_gap\""],
    );
    let re_rejected = metric(
        &d.re,
        "holdline_overload_rejected_total",
        &["reason=\"occupancy\""],
    );
    let summary = format!(
        "deoc: SE call_gap {gapped}, RE rejected {re_rejected}; uac {} attempted {} ok {} 503",
        d.attempted, d.ok, d.r503
    );
    eprintln!("{summary}");
    assert!(
        re_rejected > 0.0,
        "the RE's 503s are DEOC's signal: {summary}"
    );
    assert!(gapped > 0.0, "{summary}\n{}", d.se);
    // The RE's 503s reach the caller as 500s (RFC 3261 §16.7): every 503 is the SE's.
    assert!((d.r503 as f64) <= gapped, "{summary}");
    assert!(d.ok > 0, "{summary}");
}

/// What the edge and the two callers saw in [`two_targets`].
struct Targets {
    edge: String,
    /// The core's SIP port (the next hop of both routes).
    core: u16,
    /// The egress proxies' SIP ports ([`TargetBy::RecordRoute`] only).
    egress: (u16, u16),
    /// Calls to the failing target: attempted, completed.
    failing: (u64, u64),
    /// The failing target's call failures by status (the UAC's `failures_by_code`).
    failing_by_code: serde_json::Value,
    /// Calls to the healthy target: attempted, completed, 503s.
    healthy: (u64, u64, u64),
}

/// Rejections as costly as calls at the RE (seed 003's model, waited: `--emulate-sleep`):
/// its loss answer must count the time it spends rejecting. A server busy with nothing but
/// rejections (INVITEs gone stale in its queue, its gate) is overloaded, and the answer is
/// what makes upstream stop sending them; counted out, as the local controller counts them,
/// the RE read a fraction of a percent of occupancy while rejecting all the time, answered
/// little loss, and the SE kept sending about half of the excess (in `holdline lab deoc
/// --topology domains` at 8×: OCC-Hop's goodput 0).
#[test]
fn the_loss_answer_counts_the_time_spent_rejecting() {
    let run = chain_with(
        "loss",
        &[
            s("--emulate-reject-cost-us"),
            s("2000"),
            s("--emulate-sleep"),
        ],
        8,
    );
    let se_throttled = metric(
        &run.se,
        "holdline_feedback_rejected_total",
        &["reason=\"loss_throttle\""],
    );
    let re_rejected = metric(&run.re, "holdline_sip_rejected_overload_total", &[]);
    let summary = format!(
        "SE throttled {se_throttled}, RE rejected {re_rejected}; uac {} attempted {} ok {} 503",
        run.attempted, run.ok, run.r503
    );
    eprintln!("{summary}");
    // Offered about 7x the RE's capacity: the SE must drop most of it on the RE's answers,
    // and the RE reject little itself.
    assert!(
        se_throttled >= 0.6 * run.attempted as f64,
        "the SE drops the excess: {summary}"
    );
    assert!(re_rejected < se_throttled / 2.0, "{summary}");
    assert!(run.ok > 0, "{summary}");
}

/// How the edge of [`two_targets`] finds DEOC's target.
#[derive(Clone, Copy, PartialEq)]
enum TargetBy {
    /// The routes name it (`deoc_target=E2` / `E3`).
    Route,
    /// Neither: the next hop, the core, for both flows.
    NextHop,
    /// Learned from Record-Route (`[overload.deoc] target = "record-route"`): each flow
    /// leaves by an egress proxy of its own behind the core.
    RecordRoute,
}

/// An edge (`--feedback deoc`) with two routes through the same core to two targets: calls
/// for `e2.lab` reach a UAS that answers every INVITE 503 (the overloaded path; with
/// [`TargetBy::RecordRoute`] one in four is answered 200, or nothing could be learned from
/// it), calls for `e3.lab` one that answers 200. With [`TargetBy::Route`] and
/// [`TargetBy::RecordRoute`] the edge answers a gapped call `480` and cuts by `β = 1/2`
/// (`[overload.deoc]`, from a configuration file); with [`TargetBy::NextHop`] a gapped call
/// is answered the paper's `503`.
fn two_targets(by: TargetBy) -> Targets {
    let _one_at_a_time = common::sipp_lock();
    let named = by == TargetBy::Route;
    let learned = by == TargetBy::RecordRoute;
    let (edge, core, bad, good) = (free_port(), free_port(), free_port(), free_port());
    let (e2, e3) = (free_port(), free_port());
    let edge_metrics = free_port();
    let uas = |port: u16, responses: &str| run_uas(port, &["--responses", responses], 60);
    let _bad = uas(bad, if learned { "200:1,503:3" } else { "503:1" });
    let _good = uas(good, "200:1");
    let common_args = |port: u16| {
        vec![
            s("--listen"),
            format!("udp:127.0.0.1:{port}"),
            s("--store"),
            s("memory"),
            s("--workers"),
            s("1"),
        ]
    };
    // The core and the egress proxies only route: without local control of their own, so
    // that the only 503s are the failing callee's. (With it, a host that stalls makes a
    // proxy reject a call now and then; on the healthy path that one 503 restarts DEOC for
    // its target, whose recovery then gaps calls for seconds: a CI run saw 769 of 1,479.)
    let quiet = [s("--overload"), s("none")];
    // With learning, an egress proxy (record-routing, as by default) per flow.
    let egress = |port: u16, domain: &str, uas: u16| {
        let mut args = common_args(port);
        args.extend([s("--route"), format!("{domain}=udp:127.0.0.1:{uas}")]);
        args.extend(quiet.iter().cloned());
        Holdline::start(&args)
    };
    let _egress = learned.then(|| (egress(e2, "e2.lab", bad), egress(e3, "e3.lab", good)));
    let (to_bad, to_good) = if learned { (e2, e3) } else { (bad, good) };
    let mut core_args = common_args(core);
    core_args.extend([
        s("--route"),
        format!("e2.lab=udp:127.0.0.1:{to_bad}"),
        s("--route"),
        format!("e3.lab=udp:127.0.0.1:{to_good}"),
    ]);
    core_args.extend(quiet.iter().cloned());
    let core_server = Holdline::start(&core_args);
    let mut edge_args = common_args(edge);
    let name = |n: &str| {
        if named {
            format!(",deoc_target={n}")
        } else {
            String::new()
        }
    };
    edge_args.extend([
        s("--route"),
        format!("e2.lab=udp:127.0.0.1:{core}{}", name("E2")),
        s("--route"),
        format!("e3.lab=udp:127.0.0.1:{core}{}", name("E3")),
        s("--metrics"),
        format!("127.0.0.1:{edge_metrics}"),
        s("--feedback"),
        s("deoc"),
        // DEOC decides at the forward gate; the edge's own local gate is not under test
        // (a 503 of its own, on a stalled host, would turn away a call of the healthy flow).
        s("--overload"),
        s("none"),
    ]);
    let dir = tempfile::tempdir().expect("tempdir");
    if named || learned {
        let file = dir.path().join("edge.toml");
        // β = 1/2 rather than the paper's 1/8: the cuts reach E2's arrival rate within the
        // run, so that calls are gapped (the paper's β, starting at λ, may not get there
        // in 15 s: docs/overload.md, "DEOC in the server").
        let target = if learned {
            "target = \"record-route\"\n"
        } else {
            ""
        };
        std::fs::write(
            &file,
            format!("[overload.deoc]\nstatus = 480\nbeta = 0.5\n{target}"),
        )
        .expect("write edge.toml");
        edge_args.extend([s("--config"), file.display().to_string()]);
    }
    let edge_server = Holdline::start(&edge_args);
    // 15 s of 100 calls/s to each.
    let uac = |domain: &str, json: &Path| {
        Guard(
            load(&[
                s("uac"),
                s("--target"),
                format!("127.0.0.1:{edge}"),
                s("--to"),
                format!("user{{0..99}}@{domain}"),
                s("--rate"),
                s("100"),
                s("--duration"),
                s("15"),
                s("--drain"),
                s("5"),
                s("--max-time"),
                s("40"),
                s("--progress"),
                s("off"),
                s("--json"),
                json.display().to_string(),
            ])
            .spawn()
            .expect("spawn uac"),
        )
    };
    let (bad_json, good_json) = (dir.path().join("e2.json"), dir.path().join("e3.json"));
    let mut to_bad = uac("e2.lab", &bad_json);
    let mut to_good = uac("e3.lab", &good_json);
    for u in [&mut to_bad, &mut to_good] {
        let status = u
            .wait_for(Duration::from_secs(45))
            .expect("the UAC stops by itself");
        assert!(status.success(), "uac: {status:?}");
    }
    let t = Targets {
        edge: scrape(SocketAddr::from(([127, 0, 0, 1], edge_metrics))),
        core,
        egress: (e2, e3),
        failing: (total(&bad_json, "attempted"), total(&bad_json, "calls_ok")),
        failing_by_code: {
            let text = std::fs::read_to_string(&bad_json).expect("e2.json");
            let v: serde_json::Value = serde_json::from_str(&text).expect("json");
            v["failures_by_code"].clone()
        },
        healthy: (
            total(&good_json, "attempted"),
            total(&good_json, "calls_ok"),
            total(&good_json, "r503"),
        ),
    };
    drop(edge_server);
    drop(core_server);
    t
}

#[test]
fn deoc_keeps_its_state_per_target_edge_beyond_the_next_hop() {
    // The routes name their target edges: E2's calls (every one answered 503 on its path)
    // and E3's (every one answered 200) are counted against two targets, whose states
    // differ: E2's 503s never touch E3's calls.
    let t = two_targets(TargetBy::Route);
    let m = |name: &str, target: &str| metric(&t.edge, name, &[&format!("target=\"{target}\"")]);
    let summary = format!(
        "named: E2 admitted {} rejections {} gapped {} rate {}; E3 admitted {} rejections {} \
         gapped {}; to E2 {:?} (attempted, ok), to E3 {:?} (attempted, ok, 503)",
        m("holdline_deoc_target_admitted_total", "E2"),
        m("holdline_deoc_target_rejections_total", "E2"),
        m("holdline_deoc_target_gapped_total", "E2"),
        m("holdline_deoc_target_rate", "E2"),
        m("holdline_deoc_target_admitted_total", "E3"),
        m("holdline_deoc_target_rejections_total", "E3"),
        m("holdline_deoc_target_gapped_total", "E3"),
        t.failing,
        t.healthy
    );
    eprintln!("{summary}");
    assert_eq!(t.failing.1, 0, "every call to E2 fails: {summary}");
    // The gapped calls were answered as configured (480), none with the paper's 503.
    let code = |c: &str| t.failing_by_code[c].as_u64().unwrap_or(0);
    assert!(
        code("480") > 0 && code("480") as f64 == m("holdline_deoc_target_gapped_total", "E2"),
        "480s {:?}: {summary}",
        t.failing_by_code
    );
    // A 503 can only be the edge's own local gate (OCC, on a host busy with the other tests
    // of this file): DEOC answered none.
    let local = metric(&t.edge, "holdline_overload_rejected_total", &[])
        + metric(&t.edge, "holdline_overload_stale_invites_total", &[]);
    assert!(
        code("503") as f64 <= local,
        "503s {:?} against {local} local rejections: {summary}",
        t.failing_by_code
    );
    // Every failure of E2's path is E2's: its state is being cut (overload recovery, a rate).
    assert!(
        m("holdline_deoc_target_rejections_total", "E2") > 0.0,
        "{summary}\n{}",
        t.edge
    );
    assert!(
        m("holdline_deoc_target_rate", "E2") > 0.0,
        "E2's admitted rate: {summary}\n{}",
        t.edge
    );
    // E3 has seen no rejection: terminated (admitting everything), nothing gapped, every
    // call completed.
    assert_eq!(
        m("holdline_deoc_target_rejections_total", "E3"),
        0.0,
        "{summary}"
    );
    assert_eq!(
        m("holdline_deoc_target_gapped_total", "E3"),
        0.0,
        "{summary}"
    );
    assert_eq!(
        metric(
            &t.edge,
            "holdline_deoc_target_state",
            &["target=\"E3\"", "state=\"terminated\""]
        ),
        1.0,
        "{summary}\n{}",
        t.edge
    );
    assert_eq!(
        m("holdline_deoc_target_admitted_total", "E3") as u64,
        t.healthy.0
    );
    assert_eq!(t.healthy.2, 0, "no call to E3 is turned away: {summary}");
    assert_eq!(
        t.healthy.0, t.healthy.1,
        "every call to E3 completes: {summary}"
    );

    // Control: without the routes' targets the next hop, the core, is DEOC's one target for
    // both flows: E3's calls are counted with E2's failures in one state.
    let c = two_targets(TargetBy::NextHop);
    let hop = format!("127.0.0.1:{}", c.core);
    let n = |name: &str| metric(&c.edge, name, &[&format!("target=\"{hop}\"")]);
    let summary = format!(
        "next hop {hop}: admitted {} rejections {} gapped {}; to E2 {:?}, to E3 {:?} \
         (attempted, ok, 503)",
        n("holdline_deoc_target_admitted_total"),
        n("holdline_deoc_target_rejections_total"),
        n("holdline_deoc_target_gapped_total"),
        c.failing,
        c.healthy
    );
    eprintln!("{summary}");
    assert!(
        n("holdline_deoc_target_rejections_total") > 0.0,
        "{summary}\n{}",
        c.edge
    );
    // Every call of both flows was judged by that one state (admitted or gapped), however
    // fast DEOC cut: E3's calls share the next hop's state with E2's failures.
    assert_eq!(
        (n("holdline_deoc_target_admitted_total") + n("holdline_deoc_target_gapped_total")) as u64,
        c.failing.0 + c.healthy.0,
        "E3's calls share the next hop's state: {summary}\n{}",
        c.edge
    );
    // Without a configured status a gapped call gets the paper's 503; the core's relayed
    // rejections of E2's admitted calls are 500s (RFC 3261 §16.7 step 6). Nothing else.
    let code = |k: &str| c.failing_by_code[k].as_u64().unwrap_or(0);
    assert_eq!(
        code("503") + code("500"),
        c.failing.0,
        "{:?}: {summary}",
        c.failing_by_code
    );
    assert!(code("503") as f64 <= n("holdline_deoc_target_gapped_total"));
    assert_eq!(
        metric(&c.edge, "holdline_deoc_target_state", &["target=\"E3\""]),
        0.0,
        "no per-edge state without deoc_target: {}",
        c.edge
    );
}

#[test]
fn deoc_learns_each_callees_egress_edge_from_record_route() {
    // No route names a target: the edge learns from the answers' top Record-Route that
    // e2.lab's callees leave by one egress proxy and e3.lab's by another, and keeps DEOC's
    // state per egress edge, as with named targets.
    let t = two_targets(TargetBy::RecordRoute);
    let (e2, e3) = (
        format!("edge:127.0.0.1:{}", t.egress.0),
        format!("edge:127.0.0.1:{}", t.egress.1),
    );
    let hop = format!("127.0.0.1:{}", t.core);
    let m = |name: &str, target: &str| metric(&t.edge, name, &[&format!("target=\"{target}\"")]);
    let learned = metric(&t.edge, "holdline_deoc_edges_learned", &[]);
    let summary = format!(
        "learned {learned} callees and domains; {e2}: admitted {} rejections {} gapped {}; {e3}: admitted \
         {} rejections {} gapped {}; next hop {hop}: admitted {} gapped {}; to e2.lab {:?} \
         (attempted, ok), to e3.lab {:?} (attempted, ok, 503)",
        m("holdline_deoc_target_admitted_total", &e2),
        m("holdline_deoc_target_rejections_total", &e2),
        m("holdline_deoc_target_gapped_total", &e2),
        m("holdline_deoc_target_admitted_total", &e3),
        m("holdline_deoc_target_rejections_total", &e3),
        m("holdline_deoc_target_gapped_total", &e3),
        m("holdline_deoc_target_admitted_total", &hop),
        m("holdline_deoc_target_gapped_total", &hop),
        t.failing,
        t.healthy
    );
    eprintln!("{summary}");
    // e3.lab's 100 callees, those of e2.lab's that ever answered 200, and the two domains.
    assert!(learned > 101.0 && learned <= 202.0, "{summary}\n{}", t.edge);
    // The failing path's rejections went to its egress edge's state, which cut and gapped.
    assert!(
        m("holdline_deoc_target_rejections_total", &e2) > 0.0
            && m("holdline_deoc_target_gapped_total", &e2) > 0.0,
        "{summary}\n{}",
        t.edge
    );
    // Every call of both flows was judged exactly once: by its learned egress edge's state,
    // or, before an answer had taught the edge, by the next hop's.
    let judged = |target: &str| {
        m("holdline_deoc_target_admitted_total", target)
            + m("holdline_deoc_target_gapped_total", target)
    };
    assert_eq!(
        (judged(&e2) + judged(&e3) + judged(&hop)) as u64,
        t.failing.0 + t.healthy.0,
        "{summary}\n{}",
        t.edge
    );
    // The healthy path's egress edge saw none and gapped nothing; it judged all but the
    // first calls to the domain (those went by the next hop's state, before an answer:
    // well under a second's worth at 100 calls/s, more on a slow host in a debug build).
    assert_eq!(
        m("holdline_deoc_target_rejections_total", &e3),
        0.0,
        "{summary}"
    );
    assert_eq!(
        m("holdline_deoc_target_gapped_total", &e3),
        0.0,
        "{summary}"
    );
    assert!(
        m("holdline_deoc_target_admitted_total", &e3) >= 0.9 * t.healthy.0 as f64,
        "{summary}"
    );
    // DEOC gapped nothing there (above); a 503 from elsewhere (a core's own gate on a busy
    // host, for one of the first calls) may still reach one caller in a hundred.
    assert!(
        t.healthy.2 * 100 <= t.healthy.0,
        "at most 1% of 503s on the healthy path: {summary}"
    );
    assert!(
        t.healthy.1 as f64 >= 0.9 * t.healthy.0 as f64,
        "the healthy path's calls complete: {summary}"
    );
}

/// Seed 004's window at an upstream in front of an idle downstream whose callees ring for
/// 2 s: `window_delay` as given (`None`: the default). Returns the upstream's scrape, the
/// downstream's address and the caller's (attempted, ok, 503).
fn ringing_through_the_window(window_delay: Option<&str>) -> (String, String, (u64, u64, u64)) {
    let _one_at_a_time = common::sipp_lock();
    let (up, down, uas) = (free_port(), free_port(), free_port());
    let up_metrics = free_port();
    let dir = tempfile::tempdir().expect("tempdir");
    let _down = Holdline::start(&[
        s("--listen"),
        format!("udp:127.0.0.1:{down}"),
        s("--route"),
        format!("*=udp:127.0.0.1:{uas}"),
        s("--store"),
        s("memory"),
        s("--workers"),
        s("1"),
        s("--overload"),
        s("none"),
    ]);
    let mut up_args = vec![
        s("--listen"),
        format!("udp:127.0.0.1:{up}"),
        s("--route"),
        format!("*=udp:127.0.0.1:{down}"),
        s("--store"),
        s("memory"),
        s("--workers"),
        s("1"),
        s("--metrics"),
        format!("127.0.0.1:{up_metrics}"),
        s("--feedback"),
        s("window"),
    ];
    if let Some(d) = window_delay {
        let file = dir.path().join("up.toml");
        std::fs::write(&file, format!("[overload]\nwindow_delay = \"{d}\"\n")).expect("write");
        up_args.extend([s("--config"), file.display().to_string()]);
    }
    let up_server = Holdline::start(&up_args);
    let _uas = run_uas(uas, &["--answer-delay-ms", "2000"], 40);
    let json = dir.path().join("uac.json");
    run_uac(up, 20, 4, 6, 30, &json);
    let scraped = scrape(SocketAddr::from(([127, 0, 0, 1], up_metrics)));
    drop(up_server);
    (
        scraped,
        format!("127.0.0.1:{down}"),
        (
            total(&json, "attempted"),
            total(&json, "calls_ok"),
            total(&json, "r503"),
        ),
    )
}

#[test]
fn seed_004s_window_lets_calls_ring() {
    // 20 calls/s whose callees ring 2 s, through an idle downstream: the window judges the
    // downstream's first answer (its 100 Trying), so ringing is not load and no call is
    // turned away.
    let (up, down, (attempted, ok, r503)) = ringing_through_the_window(None);
    let hop = |text: &str, name: &str| metric(text, name, &[&format!("target=\"{down}\"")]);
    let full = |text: &str| {
        metric(
            text,
            "holdline_feedback_rejected_total",
            &["reason=\"window_full\""],
        )
    };
    let summary = format!(
        "first-response: attempted {attempted} ok {ok} 503 {r503}, window_full {}",
        full(&up)
    );
    eprintln!("{summary}");
    assert!(attempted >= 60, "{summary}");
    assert_eq!(full(&up), 0.0, "{summary}\n{up}");
    assert_eq!((ok, r503), (attempted, 0), "{summary}");
    // The next hop's window, in the metrics: every call admitted there, none outstanding
    // once all were answered, no cut.
    assert_eq!(
        (
            hop(&up, "holdline_window_target_admitted_total"),
            hop(&up, "holdline_window_target_rejected_total"),
            hop(&up, "holdline_window_target_outstanding"),
            hop(&up, "holdline_window_target_cuts_total"),
        ),
        (attempted as f64, 0.0, 0.0, 0.0),
        "{up}"
    );
    assert!(hop(&up, "holdline_window_target_window") > 4.0, "{up}");
    // Control: measured to the final response (`window_delay = "final"`), each ringing call
    // holds its place in the window for its 2 s of ringing, and most calls are turned away.
    let (up, down, (attempted, ok, r503)) = ringing_through_the_window(Some("final"));
    let hop = |text: &str, name: &str| metric(text, name, &[&format!("target=\"{down}\"")]);
    let summary = format!(
        "final: attempted {attempted} ok {ok} 503 {r503}, window_full {}",
        full(&up)
    );
    eprintln!("{summary}");
    assert!(full(&up) * 2.0 > attempted as f64, "{summary}\n{up}");
    assert!(r503 as f64 <= full(&up), "{summary}");
    assert_eq!(
        hop(&up, "holdline_window_target_rejected_total"),
        full(&up),
        "{up}"
    );
}

/// One DEOC edge in front of a healthy callee that answers 2% of its calls `503` (a busy
/// gateway now and then), 25 calls/s for 20 s: how many calls the edge gapped, the stray
/// 503s it counted, and the callers' calls attempted, set up and answered 503. `min_rejections`: the
/// `[overload.deoc]` setting (the paper's 1 when `None`).
fn stray_503s(min_rejections: Option<u32>) -> (f64, f64, u64, u64, u64) {
    let _one_at_a_time = common::sipp_lock();
    let (edge, callee, edge_metrics) = (free_port(), free_port(), free_port());
    // Seeded: the same calls get the 503s in every run.
    let _uas = run_uas(
        callee,
        &["--responses", "200:0.98,503:0.02", "--seed", "1"],
        60,
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("edge.toml");
    std::fs::write(
        &file,
        match min_rejections {
            Some(n) => format!("[overload.deoc]\nmin_rejections = {n}\n"),
            None => String::new(),
        },
    )
    .expect("write edge.toml");
    let edge_server = Holdline::start(&[
        s("--listen"),
        format!("udp:127.0.0.1:{edge}"),
        s("--store"),
        s("memory"),
        s("--workers"),
        s("1"),
        s("--route"),
        format!("*=udp:127.0.0.1:{callee}"),
        s("--metrics"),
        format!("127.0.0.1:{edge_metrics}"),
        s("--feedback"),
        s("deoc"),
        s("--overload"),
        s("none"),
        s("--config"),
        file.display().to_string(),
    ]);
    let json = dir.path().join("uac.json");
    run_uac(edge, 25, 20, 3, 40, &json);
    let text = scrape(SocketAddr::from(([127, 0, 0, 1], edge_metrics)));
    drop(edge_server);
    let target = format!("target=\"127.0.0.1:{callee}\"");
    (
        metric(&text, "holdline_deoc_target_gapped_total", &[&target]),
        metric(&text, "holdline_deoc_target_rejections_total", &[&target]),
        total(&json, "attempted"),
        total(&json, "calls_ok"),
        total(&json, "r503"),
    )
}

/// Stray 503s of a healthy callee are not overload. With the paper's rule every one of them
/// restarts or cuts the target's rate, and the edge turns away calls that the callee would
/// have taken (measured at 50 calls/s with 1% 503s for 60 s: 1,409 of 3,069 calls gapped).
/// With `min_rejections = 4` (a period is overloaded only with four 503s in it) the same
/// callee's stray 503s pass through to the callers and no call is gapped.
#[test]
fn deoc_can_read_a_healthy_callees_stray_503s_as_none() {
    let (gapped, strays, attempted, ok, r503) = stray_503s(Some(4));
    assert!(
        strays >= 3.0,
        "the callee answered too few 503s to tell: {strays}"
    );
    assert_eq!(gapped, 0.0, "gapped with min_rejections = 4");
    // Every call was set up or answered by the callee's own 503 (passed on as a 500, RFC
    // 3261 §16.7 step 6): none was turned away at the edge.
    assert_eq!(r503, 0, "no 503 of the edge's own");
    assert_eq!(
        (attempted - ok) as f64,
        strays,
        "{ok} of {attempted} set up, {strays} stray 503s"
    );
    // The control: the paper's rule, the same callee and calls.
    let (paper_gapped, paper_strays, paper_attempted, _, _) = stray_503s(None);
    eprintln!(
        "min_rejections 4: {gapped} gapped, {strays} stray 503s of {attempted} calls; \
         the paper's 1: {paper_gapped} gapped, {paper_strays} stray 503s of {paper_attempted}"
    );
    assert!(paper_strays >= 1.0, "{paper_strays}");
    assert!(
        paper_gapped >= 10.0,
        "the paper's rule gapped {paper_gapped} calls after {paper_strays} stray 503s"
    );
}
