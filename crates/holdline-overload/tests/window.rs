//! Seed 004's feedback-free window under a virtual clock: an upstream proxy with the window
//! in front of a downstream server that knows nothing of it (a FIFO queue with a fixed
//! service time per call and no control of its own).
#![allow(missing_docs, clippy::unwrap_used)]

use std::collections::VecDeque;

use holdline_base::{Duration, Instant, Rng};
use holdline_overload::{
    Admission, Class, Controller, DelayWindow, DelayWindowConfig, Outcome, RejectReason, Signal,
    TargetId,
};

const DOWN: TargetId = TargetId(7);
/// The downstream's service time per call: 1,000 calls/s.
const SERVICE: Duration = Duration::from_millis(1);
/// What a transaction takes besides the downstream's queue and CPU (links, the callee's
/// answer): the window must hold about `rate × (SERVICE + EXTRA)` to carry the capacity.
const EXTRA: Duration = Duration::from_millis(8);
/// From the end of the downstream's work on an INVITE to its first response (`100 Trying`)
/// reaching the upstream: the window judges that delay (its default `window_delay`).
const HOP: Duration = Duration::from_millis(1);

#[derive(Default, Debug)]
struct Run {
    offered: u64,
    forwarded: u64,
    rejected: u64,
    completed: u64,
    /// Completed within 500 ms of being sent (before SIP's first retransmission).
    good: u64,
    max_delay: Duration,
    max_queue: usize,
}

/// Offers `rate` calls/s (Poisson) for `span`; the window (if any) decides at the upstream.
fn run(window: Option<&mut DelayWindow>, rate: f64, span: Duration, seed: u64) -> Run {
    let mut rng = Rng::seed_from_u64(seed);
    let mut ctrl = window;
    let mut r = Run::default();
    let mut queue: VecDeque<Instant> = VecDeque::new(); // send times of waiting calls
    let mut busy_until = Instant::ZERO;
    let mut in_service: Option<Instant> = None;
    let mut next_arrival = Instant::ZERO + Duration::from_secs_f64(rng.exp(1.0 / rate));
    let end = Instant::ZERO + span;
    // Answers on their way back: (when the upstream sees the final response, sent at), and
    // the same for the first responses.
    let mut replies: VecDeque<(Instant, Instant)> = VecDeque::new();
    let mut firsts: VecDeque<(Instant, Instant)> = VecDeque::new();
    loop {
        // The next event: an answer back upstream, the end of a service, or an arrival.
        let first = firsts.front().map(|&(t, _)| t);
        let reply = replies.front().map(|&(t, _)| t);
        let service_end = in_service.map(|_| busy_until);
        let now = [first, reply, service_end, Some(next_arrival)]
            .into_iter()
            .flatten()
            .min()
            .unwrap();
        if now >= end {
            break;
        }
        if Some(now) == first {
            let (_, sent) = firsts.pop_front().unwrap();
            if let Some(c) = ctrl.as_deref_mut() {
                let delay = now.saturating_duration_since(sent);
                c.on_signal(
                    now,
                    Signal::Released {
                        target: DOWN,
                        delay,
                    },
                );
            }
        } else if Some(now) == reply {
            let (_, sent) = replies.pop_front().unwrap();
            let delay = now.saturating_duration_since(sent);
            r.completed += 1;
            if delay < Duration::from_millis(500) {
                r.good += 1;
            }
            r.max_delay = r.max_delay.max(delay);
            if let Some(c) = ctrl.as_deref_mut() {
                c.on_signal(
                    now,
                    Signal::Completed {
                        target: DOWN,
                        outcome: Outcome::Final(200),
                        delay,
                    },
                );
            }
        } else if Some(now) == service_end {
            let sent = in_service.take().unwrap();
            firsts.push_back((now + HOP, sent));
            replies.push_back((now + EXTRA, sent));
        } else {
            r.offered += 1;
            next_arrival = now + Duration::from_secs_f64(rng.exp(1.0 / rate));
            let admitted = ctrl.as_deref_mut().is_none_or(|c| {
                c.admit(now, &Admission::forward(Class::NewInvite, DOWN))
                    .is_admit()
            });
            if admitted {
                r.forwarded += 1;
                if let Some(c) = ctrl.as_deref_mut() {
                    c.on_signal(now, Signal::Forwarded { target: DOWN });
                }
                queue.push_back(now);
                r.max_queue = r.max_queue.max(queue.len());
            } else {
                r.rejected += 1;
            }
        }
        if in_service.is_none()
            && let Some(sent) = queue.pop_front()
        {
            in_service = Some(sent);
            busy_until = now + SERVICE;
        }
    }
    r
}

#[test]
fn without_control_the_downstream_queue_grows_without_bound() {
    let r = run(None, 3_000.0, Duration::from_secs(10), 1);
    // 2,000 calls/s more than it serves: 20,000 waiting after 10 s, delays of seconds.
    assert!(r.max_queue > 15_000, "{r:?}");
    assert!(r.max_delay > Duration::from_secs(5), "{r:?}");
    // Only the calls of the first half second are good.
    assert!(r.good < r.completed / 10, "{r:?}");
}

#[test]
fn the_window_holds_the_downstream_near_capacity_with_short_delays() {
    for (ratio, seed) in [(1.5, 2), (3.0, 3), (10.0, 4)] {
        let mut w = DelayWindow::new(DelayWindowConfig::default(), Instant::ZERO).unwrap();
        let span = Duration::from_secs(20);
        let r = run(Some(&mut w), ratio * 1_000.0, span, seed);
        let goodput = r.good as f64 / 20.0;
        eprintln!(
            "R = {ratio}: goodput {goodput}/s, max delay {:?}, {} of {} rejected, {:?}",
            r.max_delay,
            r.rejected,
            r.offered,
            w.target(DOWN)
        );
        // The downstream serves 1,000 calls/s at most.
        assert!(goodput > 900.0, "R = {ratio}: goodput {goodput}/s, {r:?}");
        assert!(
            r.max_delay < Duration::from_millis(500),
            "R = {ratio}: {r:?}"
        );
        assert_eq!(
            r.rejected,
            w.snapshot().rejected.get(RejectReason::WindowFull)
        );
        assert!(
            r.rejected > 0,
            "R = {ratio}: the excess is answered upstream"
        );
    }
}

#[test]
fn below_capacity_the_window_rejects_nothing() {
    let mut w = DelayWindow::new(DelayWindowConfig::default(), Instant::ZERO).unwrap();
    let r = run(Some(&mut w), 700.0, Duration::from_secs(20), 5);
    assert!(
        (r.rejected as f64) < 0.001 * r.offered as f64,
        "{r:?}, window {:?}",
        w.target(DOWN)
    );
}

#[test]
fn runs_are_deterministic_for_a_seed() {
    let go = |seed| {
        let mut w = DelayWindow::new(DelayWindowConfig::default(), Instant::ZERO).unwrap();
        let r = run(Some(&mut w), 5_000.0, Duration::from_secs(5), seed);
        (r.forwarded, r.rejected, r.good)
    };
    assert_eq!(go(9), go(9));
    assert_ne!(go(9), go(10));
}
