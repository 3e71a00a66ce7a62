//! Per-upstream max-min fair admission ([`FairShare`]) under a virtual clock: the over-share
//! upstream absorbs the local controller's rejections, an upstream below its share is never
//! rejected, the shares are max-min over three upstreams, and the layer stands aside when the
//! local controller rejects nothing.
#![allow(missing_docs, clippy::unwrap_used)]

use holdline_base::{Duration, Instant};
use holdline_overload::{
    Decision, FairShare, FairShareConfig, RejectReason, Rejection, TargetId, max_min_share,
};

fn at_ms(ms: u64) -> Instant {
    Instant::ZERO + Duration::from_millis(ms)
}

fn reject() -> Decision {
    Decision::Reject(Rejection::service_unavailable(
        RejectReason::Occupancy,
        None,
    ))
}

/// A local controller that admits the fraction `f` of new INVITEs, deterministically (one
/// credit counter for all upstreams, as OCC's draw treats them alike).
struct Inner {
    f: f64,
    credit: f64,
}

impl Inner {
    fn decide(&mut self) -> Decision {
        self.credit += self.f;
        if self.credit >= 1.0 {
            self.credit -= 1.0;
            Decision::Admit
        } else {
            reject()
        }
    }
}

/// Upstreams sending at the given rates (calls/s, evenly spaced) for `seconds`; returns the
/// calls admitted per upstream in the last `measure` seconds, with (`fair`) or without the
/// fairness layer behind a local controller admitting `f` of all calls.
fn run(rates: &[u64], f: f64, seconds: u64, measure: u64, fair: bool) -> Vec<u64> {
    let mut inner = Inner { f, credit: 0.0 };
    let mut fs = FairShare::new(FairShareConfig::default(), Instant::ZERO).unwrap();
    let mut admitted = vec![0u64; rates.len()];
    // 1 ms ticks; upstream i sends when its period divides the tick.
    for ms in 0..seconds * 1000 {
        for (i, &rate) in rates.iter().enumerate() {
            let period = 1000 / rate;
            if ms % period != 0 {
                continue;
            }
            let d = inner.decide();
            let d = if fair {
                fs.decide(at_ms(ms), TargetId(i as u64), d)
            } else {
                d
            };
            if d.is_admit() && ms >= (seconds - measure) * 1000 {
                admitted[i] += 1;
            }
        }
    }
    admitted
}

#[test]
fn the_over_share_upstream_is_rejected_first() {
    // 10 + 40 calls/s, half admitted: 25/s to share. Max-min: the small upstream keeps its
    // 10/s, the large one gets the other 15/s.
    let with = run(&[10, 40], 0.5, 20, 10, true);
    assert_eq!(with[0], 100, "under its share: never rejected ({with:?})");
    assert!(
        (140..=160).contains(&with[1]),
        "the large upstream gets the rest: {with:?}"
    );
    // Without the layer, both lose half: the small upstream pays for the large one.
    let without = run(&[10, 40], 0.5, 20, 10, false);
    assert!((45..=55).contains(&without[0]), "{without:?}");
    assert!((195..=205).contains(&without[1]), "{without:?}");
}

#[test]
fn three_upstreams_get_max_min_shares() {
    // 5 + 20 + 40 = 65 calls/s, 35 admitted: shares 5, 15, 15.
    let f = 35.0 / 65.0;
    let got = run(&[5, 20, 40], f, 30, 10, true);
    let want = [50.0, 150.0, 150.0];
    for (g, w) in got.iter().zip(want) {
        assert!(
            (*g as f64 - w).abs() <= 0.06 * w,
            "got {got:?}, want {want:?}"
        );
    }
    assert!((max_min_share(35.0, &[5.0, 20.0, 40.0]) - 15.0).abs() < 1e-9);
}

#[test]
fn no_rejection_no_change_and_one_upstream_passes_through() {
    let mut fs = FairShare::new(FairShareConfig::default(), Instant::ZERO).unwrap();
    for ms in 0..5000u64 {
        let up = TargetId(ms % 3);
        assert_eq!(fs.decide(at_ms(ms), up, Decision::Admit), Decision::Admit);
    }
    assert_eq!(fs.debt(), 0);
    // A single upstream is always the top admitter: the local controller's decisions stand.
    let mut one = FairShare::new(FairShareConfig::default(), Instant::ZERO).unwrap();
    let mut inner = Inner {
        f: 0.3,
        credit: 0.0,
    };
    for ms in (0..5000u64).step_by(10) {
        let d = inner.decide();
        assert_eq!(one.decide(at_ms(ms), TargetId(9), d), d);
    }
}

#[test]
fn a_rejection_spared_below_the_top_is_paid_by_the_top_admitter() {
    let mut fs = FairShare::new(FairShareConfig::default(), Instant::ZERO).unwrap();
    let (small, large) = (TargetId(1), TargetId(2));
    // The large upstream has had 40 calls admitted, the small one 5.
    for i in 0..40u64 {
        let _ = fs.decide(at_ms(i), large, Decision::Admit);
    }
    for i in 0..5u64 {
        let _ = fs.decide(at_ms(40 + i), small, Decision::Admit);
    }
    // The local controller rejects a call of the small upstream: admitted, one owed...
    assert_eq!(fs.decide(at_ms(50), small, reject()), Decision::Admit);
    assert_eq!(fs.debt(), 1);
    // ... and the next call of the top admitter pays it, though the controller admitted it.
    assert!(!fs.decide(at_ms(51), large, Decision::Admit).is_admit());
    assert_eq!(fs.debt(), 0);
    assert_eq!(
        fs.decide(at_ms(52), large, Decision::Admit),
        Decision::Admit
    );
    let (s, l) = (fs.upstream(small).unwrap(), fs.upstream(large).unwrap());
    assert_eq!((s.spared, s.charged, s.rejected), (1, 0, 0));
    assert_eq!((l.spared, l.charged, l.rejected), (0, 1, 1));
    // The debt is bounded: with no top admitter arriving, at most max_debt are spared.
    for i in 0..100u64 {
        let _ = fs.decide(at_ms(60 + i), small, reject());
        if fs.upstream(small).unwrap().recent >= 0.9 * fs.upstream(large).unwrap().recent {
            break;
        }
    }
    assert!(fs.debt() <= fs.config().max_debt);
}

#[test]
fn upstreams_are_bounded_and_forgotten() {
    let config = FairShareConfig {
        max_upstreams: 4,
        forget_after: Duration::from_secs(5),
        ..FairShareConfig::default()
    };
    let mut fs = FairShare::new(config, Instant::ZERO).unwrap();
    for i in 0..10u64 {
        let _ = fs.decide(at_ms(i), TargetId(i), Decision::Admit);
    }
    assert!(fs.upstream(TargetId(0)).is_none(), "the oldest made room");
    assert!(fs.upstream(TargetId(9)).is_some());
    let _ = fs.decide(at_ms(20_000), TargetId(42), Decision::Admit);
    assert!(fs.upstream(TargetId(9)).is_none(), "idle ones forgotten");
    assert!(fs.upstream(TargetId(42)).is_some());
}
