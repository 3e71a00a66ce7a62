//! The invariant suite, run over every implemented controller (architecture: "one invariant
//! test suite run over every overload controller").
//!
//! Every controller is driven deep into overload with every kind of signal (including
//! nonsense values), and then:
//! - anything but a new INVITE is admitted, at either gate, for any target;
//! - a new INVITE asked at the other gate is admitted;
//! - every rejection is a 503 without Retry-After (the defaults) and with a reason of the
//!   algorithm;
//! - the snapshot counts exactly the decisions taken;
//! - the acceptance fraction stays in [0, 1] and timeouts move forward.
#![allow(missing_docs, clippy::unwrap_used)]

use holdline_base::{Duration, Instant, Rng};
use holdline_overload::fuzzing::Contract;
use holdline_overload::{
    Admission, Algorithm, Class, Controller, ControllerConfig, ControllerFactory, Feedback, Lane,
    Outcome, Signal, TargetId,
};

fn implemented() -> Vec<(Algorithm, Box<dyn Controller>)> {
    let list: Vec<_> = Algorithm::ALL
        .into_iter()
        .filter(|a| a.is_implemented())
        .map(|a| {
            let config = ControllerConfig::default_for(a).unwrap();
            assert_eq!(config.algorithm(), a);
            (
                a,
                config.build(Instant::ZERO, Rng::seed_from_u64(17)).unwrap(),
            )
        })
        .collect();
    assert_eq!(list.len(), 11, "every implemented algorithm is covered");
    list
}

const TARGETS: [TargetId; 3] = [TargetId(0), TargetId(1), TargetId(u64::MAX)];

/// Every signal kind, with overload values and nonsense.
fn overload_signals(r: &mut Rng, interval: Duration) -> Vec<Signal> {
    let mut v = vec![
        Signal::Busy(interval * 2),
        Signal::Busy(Duration::MAX),
        Signal::Occupancy(1.0),
        Signal::Occupancy(f64::NAN),
        Signal::Occupancy(f64::INFINITY),
        Signal::Occupancy(7.0),
        Signal::QueueLength(usize::MAX),
        Signal::QueueLength(r.below(1000) as usize + 100),
        Signal::QueueDelay(Duration::from_secs(10)),
        Signal::QueueDelay(Duration::MAX),
    ];
    for t in TARGETS {
        for lane in [Lane::Shared, Lane::Invite, Lane::Other] {
            v.push(Signal::Backlog {
                target: t,
                lane,
                unsent: r.below(100_000) + 1,
                queued: u64::MAX,
            });
        }
        v.push(Signal::Feedback {
            from: t,
            feedback: Feedback::Loss {
                percent: 255,
                validity: Duration::MAX,
                seq: r.next_u64(),
            },
        });
        v.push(Signal::Feedback {
            from: t,
            feedback: Feedback::Rate {
                per_second: 0,
                validity: Duration::ZERO,
                seq: 0,
            },
        });
        v.push(Signal::Feedback {
            from: t,
            feedback: Feedback::Rate {
                per_second: 0,
                validity: Duration::MAX,
                seq: u64::MAX,
            },
        });
        v.push(Signal::Feedback {
            from: t,
            feedback: Feedback::Window {
                window: 0,
                validity: Duration::MAX,
                seq: 0,
            },
        });
        v.push(Signal::Released {
            target: t,
            delay: Duration::from_millis(3),
        });
        v.push(Signal::Released {
            target: t,
            delay: Duration::MAX,
        });
        // More sent than completed: windows fill up.
        for _ in 0..4 {
            v.push(Signal::Forwarded { target: t });
        }
        v.push(Signal::Completed {
            target: t,
            outcome: Outcome::Final(503),
            delay: Duration::MAX,
        });
        v.push(Signal::Completed {
            target: t,
            outcome: Outcome::Timeout,
            delay: Duration::from_secs(32),
        });
    }
    v
}

fn all_questions() -> Vec<Admission> {
    let mut v = Vec::new();
    for class in [
        Class::NewInvite,
        Class::NewRegistration,
        Class::Refresh,
        Class::InDialog,
        Class::OutOfDialog,
        Class::Response,
    ] {
        v.push(Admission::ingress(class));
        v.push(Admission {
            target: Some(TargetId(0)),
            ..Admission::ingress(class)
        });
        for t in TARGETS {
            v.push(Admission::forward(class, t));
        }
        v.push(Admission {
            target: None,
            ..Admission::forward(class, TargetId(0))
        });
    }
    v
}

#[test]
fn only_new_work_at_the_own_gate_is_ever_rejected() {
    for (alg, mut c) in implemented() {
        let mut r = Rng::seed_from_u64(5);
        let mut now = Instant::ZERO;
        let interval = Duration::from_millis(100);
        let mut contract = Contract::new(alg);
        // New INVITEs decided: DEOC controls calls only (seed 003 l. 94) and admits the other
        // rejectable classes.
        let mut invites = 0u64;
        for _ in 0..300 {
            for s in overload_signals(&mut r, interval) {
                c.on_signal(now, s);
            }
            for q in all_questions() {
                let d = c.admit(now, &q);
                if contract.decision(c.gate(), &q, &d) {
                    invites += u64::from(q.class == Class::NewInvite);
                }
            }
            // Advance to the controller's wake-up, or by a step when it has none.
            now = c
                .poll_timeout()
                .filter(|t| *t > now)
                .unwrap_or(now + Duration::from_millis(37));
            c.handle_timeout(now);
            contract.wake_up(now, c.poll_timeout());
            contract.snapshot(&c.snapshot());
        }
        let (decided, rejected) = (contract.decided(), contract.rejected());
        if alg != Algorithm::NoControl {
            // The suite is only meaningful if the controller was really overloaded.
            let asked = if alg == Algorithm::Deoc {
                invites
            } else {
                decided
            };
            assert!(
                rejected > asked / 2,
                "{alg}: {rejected} of {asked} rejected"
            );
        }
    }
}

#[test]
fn nothing_panics_when_time_goes_backwards() {
    for (alg, mut c) in implemented() {
        let mut r = Rng::seed_from_u64(9);
        for step in 0..200u64 {
            let now = Instant::from_millis(r.below(10_000));
            for s in overload_signals(&mut r, Duration::from_millis(100)) {
                c.on_signal(now, s);
            }
            c.on_signal(now, Signal::Occupancy(-3.0));
            c.on_signal(now, Signal::Occupancy(f64::NEG_INFINITY));
            c.handle_timeout(now);
            for q in all_questions() {
                let d = c.admit(now, &q);
                if !q.class.is_rejectable() {
                    assert!(d.is_admit(), "{alg}, step {step}");
                }
            }
            assert!(c.feedback(now, TargetId(step)).is_none(), "{alg}");
        }
    }
}

#[test]
fn idle_controllers_admit_everything() {
    // A fresh controller with no load reported (or an idle one) admits all new INVITEs.
    for (alg, mut c) in implemented() {
        let mut now = Instant::ZERO;
        for _ in 0..50 {
            c.on_signal(now, Signal::Busy(Duration::ZERO));
            c.on_signal(now, Signal::QueueLength(0));
            c.on_signal(now, Signal::QueueDelay(Duration::ZERO));
            for q in all_questions() {
                assert!(c.admit(now, &q).is_admit(), "{alg}: {q:?}");
            }
            now += Duration::from_millis(100);
            c.handle_timeout(now);
        }
        assert_eq!(c.snapshot().rejected.total(), 0, "{alg}");
    }
}
