//! OCC under a virtual clock, against the server model of `support`.
#![allow(missing_docs, clippy::unwrap_used)]

mod support;

use holdline_base::{Duration, Instant, Rng};
use holdline_overload::{Admission, Controller, Occ, OccConfig, Signal};
use support::{Model, Stats};

const SEC: Duration = Duration::from_secs(1);
const CAPACITY: f64 = 1000.0;

/// OCC as the paper has it: occupancy alone, no queue gate.
fn paper() -> OccConfig {
    OccConfig {
        queue_gate: None,
        ..OccConfig::default()
    }
}

fn occ(config: OccConfig, seed: u64) -> Occ {
    Occ::new(config, Instant::ZERO, Rng::seed_from_u64(seed)).unwrap()
}

/// Runs `secs` seconds at `ratio` × capacity; returns the stats of the last `tail` seconds.
fn settle(c: &mut Occ, m: &mut Model, ratio: f64, secs: u64, tail: u64) -> Stats {
    let _ = m.run(c, ratio * CAPACITY, SEC * (secs - tail) as u32);
    m.run(c, ratio * CAPACITY, SEC * tail as u32)
}

#[test]
fn converges_to_target_over_load_ratio_under_constant_overload() {
    // Offered R × capacity, rejections free: the paper's OCC holds ρ at 0.9, so f → 0.9 / R.
    for (ratio, seed) in [(2.0, 1), (5.0, 2), (10.0, 3)] {
        let mut c = occ(paper(), seed);
        let mut m = Model::new(CAPACITY, 0.0, seed);
        let s = settle(&mut c, &mut m, ratio, 30, 10);
        let expected = 0.9 / ratio;
        let f = s.mean_acceptance();
        assert!(
            (f - expected).abs() < 0.1 * expected,
            "R = {ratio}: mean f {f:.4}, expected {expected:.4}"
        );
        let rho = s.mean_occupancy();
        assert!((rho - 0.9).abs() < 0.03, "R = {ratio}: mean ρ {rho:.3}");
        assert!(
            s.max_delay < Duration::from_millis(200),
            "{:?}",
            s.max_delay
        );
    }
}

#[test]
fn rejection_cost_lowers_the_fixed_point() {
    // Rejections cost 1 % of a call: ρ = 10 f + 10 (1 − f) 0.01 = 0.9 → f = 0.8 / 9.9.
    let mut c = occ(paper(), 4);
    let mut m = Model::new(CAPACITY, 0.01, 4);
    let s = settle(&mut c, &mut m, 10.0, 30, 10);
    let expected = 0.8 / 9.9;
    let f = s.mean_acceptance();
    assert!((f - expected).abs() < 0.1 * expected, "mean f {f:.4}");
    assert!((s.mean_occupancy() - 0.9).abs() < 0.03);
}

#[test]
fn plain_occ_step_response_builds_seconds_of_backlog() {
    // The paper's OCC can cut f by at most ρ_target per interval (ρ ≤ 1): a step to 10× load
    // admits several seconds of work before f is low enough (documented in occ.rs).
    let mut c = occ(paper(), 5);
    let mut m = Model::new(CAPACITY, 0.0, 5);
    let s = m.run(&mut c, 10.0 * CAPACITY, 15 * SEC);
    assert!(s.max_delay > 4 * SEC, "max delay {:?}", s.max_delay);
    // ... and still converges once the backlog is gone.
    let s = m.run(&mut c, 10.0 * CAPACITY, 10 * SEC);
    assert!((s.mean_acceptance() - 0.09).abs() < 0.01);
}

#[test]
fn the_queue_gate_keeps_the_papers_answer_to_overload() {
    // Under constant overload a queue shows and the gate lets the paper's cut work: the same
    // acceptance and goodput as the paper's rule, within a few percent.
    for ratio in [2.0, 10.0] {
        let run = |config: OccConfig| {
            let mut c = occ(config, 5);
            let mut m = Model::new(CAPACITY, 0.0, 5);
            settle(&mut c, &mut m, ratio, 40, 20)
        };
        let (gated, paper) = (run(OccConfig::default()), run(paper()));
        let (g, p) = (gated.good as f64 / 20.0, paper.good as f64 / 20.0);
        assert!(
            g > 0.97 * p && g > 0.85 * CAPACITY,
            "R = {ratio}: {g}/s against {p}/s"
        );
        assert!(
            gated.max_delay < Duration::from_millis(500),
            "R = {ratio}: {:?}",
            gated.max_delay
        );
    }
}

#[test]
fn below_capacity_only_the_paper_rule_rejects() {
    // 85% of capacity, Poisson: single 100 ms intervals are often more than 90% busy, but
    // calls wait a few milliseconds at most. The paper's rule cuts after every busy interval.
    let run = |config: OccConfig| {
        let mut c = occ(config, 9);
        let mut m = Model::new(CAPACITY, 0.0, 9);
        let s = m.run(&mut c, 0.85 * CAPACITY, 30 * SEC);
        s.rejected as f64 / s.offered as f64
    };
    let paper = run(paper());
    let gated = run(OccConfig::default());
    assert!(paper > 0.01, "the paper's rule rejected {paper:.4}");
    assert!(gated < 0.001, "the gated rule rejected {gated:.4}");
}

#[test]
fn queue_growth_extension_cuts_a_step_at_once() {
    let config = OccConfig {
        queue_growth: true,
        ..paper()
    };
    let mut c = occ(config, 6);
    let mut m = Model::new(CAPACITY, 0.0, 6);
    let first = m.run(&mut c, 10.0 * CAPACITY, 5 * SEC);
    // The first interval admits at f = 1 (0.9 s of work); nothing much after it.
    assert!(
        first.max_delay < Duration::from_millis(2000),
        "{:?}",
        first.max_delay
    );
    let s = m.run(&mut c, 10.0 * CAPACITY, 10 * SEC);
    assert!(
        (s.mean_acceptance() - 0.09).abs() < 0.01,
        "{}",
        s.mean_acceptance()
    );
    assert!(
        (s.mean_occupancy() - 0.885).abs() < 0.03,
        "{}",
        s.mean_occupancy()
    );
    assert!(
        s.max_delay < Duration::from_millis(100),
        "{:?}",
        s.max_delay
    );
}

#[test]
fn recovers_to_full_acceptance_when_load_drops() {
    let mut c = occ(OccConfig::default(), 7);
    let mut m = Model::new(CAPACITY, 0.0, 7);
    let _ = settle(&mut c, &mut m, 10.0, 30, 1);
    assert!(c.acceptance() < 0.2);
    // Half the capacity offered: ρ ≈ 0.5 f ≪ 0.9, f grows by up to φ_max = 4 per interval.
    let s = m.run(&mut c, 0.5 * CAPACITY, SEC);
    assert_eq!(c.acceptance(), 1.0, "trace {:?}", s.trace.last());
    let s = m.run(&mut c, 0.5 * CAPACITY, 5 * SEC);
    assert_eq!(s.rejected, 0);
    assert!(s.trace.iter().all(|(_, snap)| snap.acceptance == Some(1.0)));
}

#[test]
fn acceptance_never_leaves_its_bounds() {
    for (min, seed) in [(0.01, 1u64), (0.2, 2), (1.0, 3)] {
        let config = OccConfig {
            min_acceptance: min,
            queue_growth: seed == 2,
            ..OccConfig::default()
        };
        let mut c = occ(config, seed);
        let mut r = Rng::seed_from_u64(seed);
        let mut now = Instant::ZERO;
        for _ in 0..5_000 {
            now += Duration::from_micros(r.below(300_000));
            let signal = match r.below(6) {
                0 => Signal::Busy(Duration::from_micros(r.below(1_000_000))),
                1 => Signal::Occupancy(r.next_f64() * 3.0 - 1.0),
                2 => Signal::Occupancy(f64::NAN),
                3 => Signal::Occupancy(f64::INFINITY),
                4 => Signal::QueueDelay(Duration::from_micros(r.below(10_000_000))),
                _ => Signal::Busy(Duration::MAX),
            };
            c.on_signal(now, signal);
            if r.chance(0.3) {
                c.handle_timeout(now);
            }
            let f = c.acceptance();
            assert!((min..=1.0).contains(&f), "f = {f} outside [{min}, 1]");
            let _ = c.admit(now, &Admission::new_invite());
        }
        assert!(c.snapshot().intervals > 100);
    }
}

#[test]
fn decisions_are_deterministic_for_a_seed() {
    let run = |ctrl_seed: u64| {
        let mut c = occ(OccConfig::default(), ctrl_seed);
        let mut m = Model::new(CAPACITY, 0.0, 99);
        let s = m.run(&mut c, 3.0 * CAPACITY, 5 * SEC);
        let trace: Vec<f64> = s.trace.iter().filter_map(|(_, x)| x.acceptance).collect();
        (s.admitted, s.rejected, trace)
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1).0, run(2).0);
}

#[test]
fn admitted_fraction_matches_acceptance() {
    let mut c = occ(OccConfig::default(), 8);
    let mut now = Instant::ZERO;
    // k saturated intervals: f = 0.9^k.
    for k in 1..=25 {
        now += Duration::from_millis(100);
        c.on_signal(now, Signal::Occupancy(1.0));
        c.handle_timeout(now);
        let f = c.acceptance();
        assert!((f - 0.9f64.powi(k)).abs() < 1e-12);
        if k % 5 != 0 {
            continue;
        }
        let n = 100_000;
        let admitted = (0..n)
            .filter(|_| c.admit(now, &Admission::new_invite()).is_admit())
            .count();
        let p = admitted as f64 / n as f64;
        // Five standard deviations of a binomial proportion.
        let bound = 5.0 * (f * (1.0 - f) / n as f64).sqrt();
        assert!(
            (p - f).abs() < bound,
            "f = {f:.4}, admitted {p:.4}, bound {bound:.4}"
        );
    }
}
