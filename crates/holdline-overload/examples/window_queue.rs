//! Seed 004's window ([`DelayWindow`]) in front of a FIFO server near and above its capacity,
//! on a virtual clock: what each setting carries and what delay it costs.
//!
//! The downstream is `holdline lab window`'s emulated one: every message of a call costs it
//! 1 ms (INVITE, 180, 200 in the INVITE transaction; ACK, BYE and its 200 after), one FIFO
//! queue, 0.2 ms per hop; calls arrive as a Poisson process. The downstream, a proxy, answers
//! `100 Trying` as it handles the INVITE; the callee answers at once. The window judges the
//! delay to that first response (`delay` = `first-response`, the default) or to the 200
//! (`final`, the reading the papers' testbeds cannot tell apart from it): both are run. Five
//! seeds of 60 s per point (after 5 s of warm-up); `transaction_delay_ms` is INVITE sent → 200
//! received.
//!
//! ```sh
//! cargo run --release -p holdline-overload --example window_queue
//! ```
#![forbid(unsafe_code)]

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use holdline_base::{Duration, Instant, Rng};
use holdline_overload::{
    Admission, Class, Controller, DelayWindow, DelayWindowConfig, Outcome, Signal, TargetId,
    WindowDecrease, WindowDelay,
};

/// CPU per message at the downstream.
const SERVICE: Duration = Duration::from_millis(1);
/// One hop's delay.
const HOP: Duration = Duration::from_micros(200);
/// Messages per call at the downstream.
const MESSAGES: u32 = 6;
const TARGET: TargetId = TargetId(1);
const WARM_UP_S: f64 = 5.0;
const MEASURED_S: f64 = 60.0;
const SEEDS: u64 = 5;

/// What happens at an instant (ordered by time, then by insertion).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A new call arrives at the upstream.
    Arrival,
    /// A message of the call sent at `sent` (ns) reaches the downstream's queue: `step` 0 is
    /// the INVITE, 1 the 180, 2 the 200, 3-5 ACK, BYE and its 200.
    Enqueue { sent: u64, step: u8 },
    /// The downstream finished the message at the head of its queue.
    Served,
}

/// One point: the share of the capacity carried, the mean transaction delay (ms), and the
/// window's cuts.
fn run(config: &DelayWindowConfig, load: f64, seed: u64) -> (f64, f64, u64) {
    let capacity = 1.0 / (SERVICE.as_secs_f64() * f64::from(MESSAGES));
    let mean_gap = 1.0 / (load * capacity);
    let mut rng = Rng::seed_from_u64(seed);
    let mut window = match DelayWindow::new(config.clone(), Instant::ZERO) {
        Ok(w) => w,
        Err(e) => panic!("{e}"),
    };
    let mut events: BinaryHeap<Reverse<(Instant, u64, Event)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut at = |events: &mut BinaryHeap<_>, t: Instant, e: Event| {
        seq += 1;
        events.push(Reverse((t, seq, e)));
    };
    at(
        &mut events,
        Instant::ZERO + Duration::from_secs_f64(rng.exp(mean_gap)),
        Event::Arrival,
    );
    let mut queue: VecDeque<(u64, u8)> = VecDeque::new();
    let mut busy = false;
    let end = Instant::ZERO + Duration::from_secs_f64(WARM_UP_S + MEASURED_S);
    let warm = Instant::ZERO + Duration::from_secs_f64(WARM_UP_S);
    let (mut admitted, mut delay_sum, mut delays) = (0u64, 0.0, 0u64);
    while let Some(Reverse((now, _, event))) = events.pop() {
        if now > end {
            break;
        }
        match event {
            Event::Arrival => {
                let next = now + Duration::from_secs_f64(rng.exp(mean_gap));
                at(&mut events, next, Event::Arrival);
                let ask = Admission::forward(Class::NewInvite, TARGET);
                if window.admit(now, &ask).is_admit() {
                    window.on_signal(now, Signal::Forwarded { target: TARGET });
                    admitted += u64::from(now > warm);
                    let e = Event::Enqueue {
                        sent: now.as_nanos(),
                        step: 0,
                    };
                    at(&mut events, now + HOP, e);
                }
            }
            Event::Enqueue { sent, step } => {
                queue.push_back((sent, step));
                if !busy {
                    busy = true;
                    at(&mut events, now + SERVICE, Event::Served);
                }
            }
            Event::Served => {
                let Some((sent, step)) = queue.pop_front() else {
                    continue;
                };
                // The UAS answers the INVITE (180, 200); the 200 ends the transaction at
                // the upstream, whose ACK and the BYE exchange follow.
                let back = now + HOP + HOP;
                match step {
                    0 => {
                        // Its 100 Trying reaches the upstream one hop later.
                        let trying = now + HOP;
                        window.on_signal(
                            trying,
                            Signal::Released {
                                target: TARGET,
                                delay: trying - Instant::from_nanos(sent),
                            },
                        );
                        at(&mut events, back, Event::Enqueue { sent, step: 1 });
                        at(&mut events, back, Event::Enqueue { sent, step: 2 });
                    }
                    2 => {
                        let done = now + HOP;
                        let delay = done - Instant::from_nanos(sent);
                        window.on_signal(
                            done,
                            Signal::Completed {
                                target: TARGET,
                                outcome: Outcome::Final(200),
                                delay,
                            },
                        );
                        if done > warm {
                            delay_sum += delay.as_secs_f64();
                            delays += 1;
                        }
                        for step in 3..6 {
                            at(&mut events, back, Event::Enqueue { sent, step });
                        }
                    }
                    _ => {}
                }
                busy = !queue.is_empty();
                if busy {
                    at(&mut events, now + SERVICE, Event::Served);
                }
            }
        }
    }
    let cuts = window.target(TARGET).map_or(0, |t| t.collapses);
    (
        admitted as f64 / MEASURED_S / capacity,
        delay_sum / delays.max(1) as f64 * 1e3,
        cuts,
    )
}

fn main() {
    let variants: [(&str, Option<u64>, WindowDecrease, bool); 6] = [
        (
            "paper, Z_th 4 x min >= 20 ms",
            None,
            WindowDecrease::Collapse,
            false,
        ),
        (
            "paper, Z_th 50 ms",
            Some(50),
            WindowDecrease::Collapse,
            false,
        ),
        (
            "paper, Z_th 100 ms",
            Some(100),
            WindowDecrease::Collapse,
            false,
        ),
        (
            "halve + once per round, 20 ms",
            None,
            WindowDecrease::Halve,
            true,
        ),
        (
            "halve + once per round, 50 ms",
            Some(50),
            WindowDecrease::Halve,
            true,
        ),
        (
            "halve + once per round, 100 ms",
            Some(100),
            WindowDecrease::Halve,
            true,
        ),
    ];
    println!("load,delay,setting,carried_of_capacity,transaction_delay_ms,cuts_per_run");
    for load in [0.986, 1.3, 2.43, 10.0] {
        for ((name, threshold, decrease, once_per_round), measured_to) in variants
            .into_iter()
            .flat_map(|v| [(v, WindowDelay::Final), (v, WindowDelay::FirstResponse)])
        {
            let config = DelayWindowConfig {
                threshold: threshold.map(Duration::from_millis),
                decrease,
                once_per_round,
                delay: measured_to,
                ..DelayWindowConfig::default()
            };
            let (mut carried, mut delay, mut cuts) = (0.0, 0.0, 0);
            for seed in 1..=SEEDS {
                let (c, d, n) = run(&config, load, seed);
                carried += c / SEEDS as f64;
                delay += d / SEEDS as f64;
                cuts += n / SEEDS;
            }
            let measured_to = measured_to.name();
            println!("{load},{measured_to},{name},{carried:.3},{delay:.1},{cuts}");
        }
    }
}
