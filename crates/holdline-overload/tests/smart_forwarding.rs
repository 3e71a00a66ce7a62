//! TCP smart forwarding: the per-target backlog decision (seed 000 §VI).
#![allow(missing_docs, clippy::unwrap_used)]

use holdline_base::{Duration, Instant, Rng};
use holdline_overload::{
    Admission, Class, Controller, Decision, Lane, RejectReason, Signal, SmartForwarding,
    SmartForwardingConfig, Split, TargetId,
};

const NOW: Instant = Instant::ZERO;
const A: TargetId = TargetId(1);
const B: TargetId = TargetId(2);

fn sf(split: Split, threshold: u64) -> SmartForwarding {
    let config = SmartForwardingConfig {
        split,
        threshold,
        hold: Duration::ZERO,
        retry_after: None,
    };
    SmartForwarding::new(config, NOW, Rng::seed_from_u64(0)).unwrap()
}

fn backlog(c: &mut SmartForwarding, target: TargetId, lane: Lane, unsent: u64, queued: u64) {
    c.on_signal(
        NOW,
        Signal::Backlog {
            target,
            lane,
            unsent,
            queued,
        },
    );
}

fn invite(c: &mut SmartForwarding, target: TargetId) -> Decision {
    c.admit(NOW, &Admission::forward(Class::NewInvite, target))
}

#[test]
fn rejects_exactly_when_backlog_exceeds_threshold() {
    for threshold in [0u64, 1, 1000] {
        let mut c = sf(Split::Implicit, threshold);
        assert!(invite(&mut c, A).is_admit(), "nothing reported yet");
        let cases = [
            (0, 0),
            (1, 0),
            (0, 1),
            (500, 500),
            (501, 500),
            (1000, 0),
            (0, 1001),
            (u64::MAX, u64::MAX),
            (0, 0),
        ];
        for (unsent, queued) in cases {
            backlog(&mut c, A, Lane::Shared, unsent, queued);
            let total = unsent.saturating_add(queued);
            let d = invite(&mut c, A);
            assert_eq!(
                !d.is_admit(),
                total > threshold,
                "threshold {threshold}, unsent {unsent}, queued {queued}"
            );
            if let Some(r) = d.rejection() {
                assert_eq!(r.status, 503);
                assert_eq!(r.reason, RejectReason::TargetBacklog);
                assert_eq!(r.retry_after, None);
            }
        }
    }
}

#[test]
fn the_paper_default_rejects_on_any_unsent_byte() {
    let mut c = sf(Split::default(), SmartForwardingConfig::default().threshold);
    backlog(&mut c, A, Lane::Shared, 1, 0);
    assert!(!invite(&mut c, A).is_admit());
}

#[test]
fn targets_are_isolated() {
    let mut c = sf(Split::Implicit, 0);
    backlog(&mut c, A, Lane::Shared, 4096, 1200);
    assert!(!invite(&mut c, A).is_admit());
    assert!(invite(&mut c, B).is_admit(), "B has no backlog");
    backlog(&mut c, B, Lane::Shared, 0, 0);
    assert!(!invite(&mut c, A).is_admit(), "B's report leaves A alone");
    backlog(&mut c, B, Lane::Shared, 10, 0);
    backlog(&mut c, A, Lane::Shared, 0, 0);
    assert!(invite(&mut c, A).is_admit());
    assert!(!invite(&mut c, B).is_admit());
    assert_eq!(c.backlog(A), 0);
    assert_eq!(c.backlog(B), 10);
    assert_eq!(c.snapshot().backlogged_targets, Some(1));
}

#[test]
fn ics_checks_the_shared_connection_only() {
    let mut c = sf(Split::Implicit, 0);
    backlog(&mut c, A, Lane::Invite, 100, 0);
    backlog(&mut c, A, Lane::Other, 100, 0);
    assert!(
        invite(&mut c, A).is_admit(),
        "ECS lanes do not exist under ICS"
    );
    backlog(&mut c, A, Lane::Shared, 100, 0);
    assert!(!invite(&mut c, A).is_admit());
}

#[test]
fn ecs_checks_the_invite_connection_only() {
    let mut c = sf(Split::Explicit, 0);
    backlog(&mut c, A, Lane::Other, 100_000, 100_000);
    backlog(&mut c, A, Lane::Shared, 100, 0);
    assert!(
        invite(&mut c, A).is_admit(),
        "in-dialog backlog never rejects INVITEs under ECS"
    );
    backlog(&mut c, A, Lane::Invite, 0, 1);
    assert!(!invite(&mut c, A).is_admit());
    backlog(&mut c, A, Lane::Invite, 0, 0);
    assert!(invite(&mut c, A).is_admit());
}

#[test]
fn only_new_invites_at_the_forward_gate_are_checked() {
    let mut c = sf(Split::Implicit, 0);
    backlog(&mut c, A, Lane::Shared, 1, 0);
    for class in [Class::InDialog, Class::OutOfDialog, Class::Response] {
        assert!(c.admit(NOW, &Admission::forward(class, A)).is_admit());
    }
    // Asked at ingress (no next hop yet) or without a target: nothing to check.
    assert!(c.admit(NOW, &Admission::new_invite()).is_admit());
    let no_target = Admission {
        target: None,
        ..Admission::forward(Class::NewInvite, A)
    };
    assert!(c.admit(NOW, &no_target).is_admit());
    let s = c.snapshot();
    assert_eq!(s.decisions(), 0, "none of these were decisions");
}

#[test]
fn target_gone_forgets_its_backlog() {
    let mut c = sf(Split::Implicit, 0);
    backlog(&mut c, A, Lane::Shared, 1, 0);
    c.on_signal(NOW, Signal::TargetGone(A));
    assert!(invite(&mut c, A).is_admit());
    assert_eq!(c.snapshot().backlogged_targets, Some(0));
}

#[test]
fn snapshot_counts_decisions_by_reason() {
    let mut c = sf(Split::Implicit, 0);
    backlog(&mut c, A, Lane::Shared, 1, 0);
    for _ in 0..3 {
        let _ = invite(&mut c, A);
    }
    for _ in 0..2 {
        let _ = invite(&mut c, B);
    }
    let s = c.snapshot();
    assert_eq!(s.admitted, 2);
    assert_eq!(s.rejected.get(RejectReason::TargetBacklog), 3);
    assert_eq!(s.rejected.total(), 3);
    assert_eq!(s.acceptance, None);
}

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

#[test]
fn with_a_hold_only_a_backlog_that_stays_above_the_threshold_rejects() {
    let config = SmartForwardingConfig {
        threshold: 100,
        hold: Duration::from_millis(20),
        ..SmartForwardingConfig::default()
    };
    let mut c = SmartForwarding::new(config, NOW, Rng::seed_from_u64(0)).unwrap();
    let report = |c: &mut SmartForwarding, t: u64, target, bytes| {
        c.on_signal(
            ms(t),
            Signal::Backlog {
                target,
                lane: Lane::Shared,
                unsent: bytes,
                queued: 0,
            },
        );
    };
    let invite_at = |c: &mut SmartForwarding, t: u64, target| {
        c.admit(ms(t), &Admission::forward(Class::NewInvite, target))
    };
    // Above the threshold from 0 ms: admitted until 20 ms have passed, rejected from then on.
    report(&mut c, 0, A, 500);
    assert!(invite_at(&mut c, 0, A).is_admit());
    report(&mut c, 19, A, 800);
    assert!(invite_at(&mut c, 19, A).is_admit(), "a moment's lag");
    assert_eq!(c.above_since(A), Some(ms(0)), "growth keeps the start");
    report(&mut c, 20, A, 900);
    assert!(!invite_at(&mut c, 20, A).is_admit(), "20 ms behind");
    // A report at or below the threshold (not empty) restarts the hold.
    report(&mut c, 25, A, 100);
    assert_eq!((c.backlog(A), c.above_since(A)), (100, None));
    assert!(invite_at(&mut c, 25, A).is_admit());
    report(&mut c, 26, A, 5000);
    assert!(invite_at(&mut c, 45, A).is_admit());
    assert!(!invite_at(&mut c, 46, A).is_admit());
    // Emptiness restarts it too, and every target has its own.
    report(&mut c, 50, A, 0);
    report(&mut c, 50, B, 5000);
    assert!(invite_at(&mut c, 60, A).is_admit());
    assert!(invite_at(&mut c, 60, B).is_admit());
    assert!(!invite_at(&mut c, 70, B).is_admit());
    assert!(invite_at(&mut c, 70, A).is_admit());
}

#[test]
fn without_a_hold_the_first_report_above_the_threshold_rejects() {
    let mut c = sf(Split::Implicit, 0);
    backlog(&mut c, A, Lane::Shared, 1, 0);
    assert_eq!(c.above_since(A), Some(NOW));
    assert!(!invite(&mut c, A).is_admit());
}
