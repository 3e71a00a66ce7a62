//! A virtual-clock server model for controller tests.
//!
//! One worker with a fixed capacity: every admitted call costs `cost` of CPU (all its
//! messages), every rejection `reject_cost` (served first: rejections are answered early, at
//! high priority, as in seed 003 §5.1). Calls arrive as a Poisson process at the offered rate
//! and wait in a FIFO queue. Before each new INVITE is decided the model reports the number of
//! queued calls ([`Signal::QueueLength`]). Time advances in 1 ms ticks; after each tick the
//! model reports the tick's busy time ([`Signal::Busy`]) and the queueing delay of each call
//! that started service ([`Signal::QueueDelay`]), and wakes the controller when its timeout is
//! due.
#![allow(dead_code, unreachable_pub)]

use std::collections::VecDeque;

use holdline_base::{Duration, Instant, Rng};
use holdline_overload::{Admission, Controller, Signal, Snapshot};

pub const TICK: Duration = Duration::from_millis(1);

#[derive(Debug)]
struct Job {
    arrival: Instant,
    remaining: Duration,
    started: bool,
}

/// The server model and its clock.
#[derive(Debug)]
pub struct Model {
    pub now: Instant,
    /// CPU per admitted call.
    pub cost: Duration,
    /// CPU per rejected call.
    pub reject_cost: Duration,
    queue: VecDeque<Job>,
    rejection_work: Duration,
    rng: Rng,
    next_arrival: Option<Instant>,
}

/// What happened during one [`Model::run`].
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub offered: u64,
    pub admitted: u64,
    pub rejected: u64,
    /// Calls whose processing finished.
    pub completed: u64,
    /// Calls that started service after waiting less than 500 ms (no SIP retransmission).
    pub good: u64,
    pub busy: Duration,
    pub max_delay: Duration,
    pub delay_sum: Duration,
    pub delay_samples: u64,
    /// The controller's snapshot after each of its interval updates.
    pub trace: Vec<(Instant, Snapshot)>,
}

impl Stats {
    pub fn mean_delay(&self) -> Duration {
        if self.delay_samples == 0 {
            Duration::ZERO
        } else {
            self.delay_sum / u32::try_from(self.delay_samples).unwrap_or(u32::MAX)
        }
    }

    /// Admitted calls per second of capacity: `admitted · cost / span`.
    pub fn utilisation(&self, span: Duration) -> f64 {
        self.busy.as_secs_f64() / span.as_secs_f64()
    }

    /// The mean acceptance fraction over the trace.
    pub fn mean_acceptance(&self) -> f64 {
        let v: Vec<f64> = self
            .trace
            .iter()
            .filter_map(|(_, s)| s.acceptance)
            .collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    }

    /// The mean measured occupancy over the trace.
    pub fn mean_occupancy(&self) -> f64 {
        let v: Vec<f64> = self.trace.iter().filter_map(|(_, s)| s.occupancy).collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    }
}

impl Model {
    /// A server of `capacity_cps` calls per second (cost = 1/capacity), rejections costing
    /// `reject_fraction` of a call.
    pub fn new(capacity_cps: f64, reject_fraction: f64, seed: u64) -> Self {
        let cost = Duration::from_secs_f64(1.0 / capacity_cps);
        Self {
            now: Instant::ZERO,
            cost,
            reject_cost: cost.mul_f64(reject_fraction),
            queue: VecDeque::new(),
            rejection_work: Duration::ZERO,
            rng: Rng::seed_from_u64(seed),
            next_arrival: None,
        }
    }

    /// The work waiting (queued calls and rejections), i.e. the delay a new call would see.
    pub fn backlog(&self) -> Duration {
        self.queue
            .iter()
            .fold(self.rejection_work, |a, j| a + j.remaining)
    }

    /// Offers `offered_cps` new INVITEs per second for `span`, asking `ctrl` about each.
    pub fn run(&mut self, ctrl: &mut dyn Controller, offered_cps: f64, span: Duration) -> Stats {
        let mut stats = Stats::default();
        let end = self.now + span;
        let mean_gap = 1.0 / offered_cps;
        let mut next = match self.next_arrival {
            Some(t) if t >= self.now => t,
            _ => self.now + Duration::from_secs_f64(self.rng.exp(mean_gap)),
        };
        while self.now < end {
            let tick_end = self.now + TICK;
            while next < tick_end {
                stats.offered += 1;
                ctrl.on_signal(next, Signal::QueueLength(self.queue.len()));
                if ctrl.admit(next, &Admission::new_invite()).is_admit() {
                    stats.admitted += 1;
                    self.queue.push_back(Job {
                        arrival: next,
                        remaining: self.cost,
                        started: false,
                    });
                } else {
                    stats.rejected += 1;
                    self.rejection_work += self.reject_cost;
                }
                next += Duration::from_secs_f64(self.rng.exp(mean_gap));
            }
            let (busy, delays) = self.serve(tick_end, &mut stats);
            stats.busy += busy;
            ctrl.on_signal(tick_end, Signal::Busy(busy));
            for d in delays {
                ctrl.on_signal(tick_end, Signal::QueueDelay(d));
            }
            self.now = tick_end;
            if ctrl.poll_timeout().is_some_and(|t| t <= self.now) {
                ctrl.handle_timeout(self.now);
                stats.trace.push((self.now, ctrl.snapshot()));
            }
        }
        self.next_arrival = Some(next);
        stats
    }

    /// Serves work until `until`; returns the busy time and the queueing delays of the calls
    /// that started service.
    fn serve(&mut self, until: Instant, stats: &mut Stats) -> (Duration, Vec<Duration>) {
        let mut cursor = self.now;
        let mut busy = Duration::ZERO;
        let mut delays = Vec::new();
        while cursor < until {
            if !self.rejection_work.is_zero() {
                let take = self.rejection_work.min(until - cursor);
                self.rejection_work -= take;
                cursor += take;
                busy += take;
                continue;
            }
            let Some(job) = self.queue.front_mut() else {
                break;
            };
            if job.arrival > cursor {
                cursor = job.arrival.min(until);
                continue;
            }
            if !job.started {
                job.started = true;
                let d = cursor - job.arrival;
                delays.push(d);
                stats.delay_sum += d;
                stats.delay_samples += 1;
                stats.max_delay = stats.max_delay.max(d);
                if d < Duration::from_millis(500) {
                    stats.good += 1;
                }
            }
            let take = job.remaining.min(until - cursor);
            job.remaining -= take;
            cursor += take;
            busy += take;
            if job.remaining.is_zero() {
                self.queue.pop_front();
                stats.completed += 1;
            }
        }
        (busy, delays)
    }
}
