//! `delay-window`: seed 004's window of active transactions, without explicit feedback.
//!
//! An upstream proxy keeps, per next hop (target), a window `W` of INVITE transactions it
//! may have outstanding there; a new call is forwarded only while the target has fewer than
//! `⌊W⌋` outstanding, else it is answered `503` upstream (reason
//! [`WindowFull`](crate::RejectReason::WindowFull)). The only signal is the delay of the
//! transactions themselves, so the downstream server needs no overload control of its own —
//! any SIP server, Kamailio or another vendor's, is protected. When a transaction ends, its
//! delay enters the recent-delay statistics, then (seed 004, the pseudo-code of l. 65):
//!
//! ```text
//! if Z_avg ≥ Z_th + ε·δ:   WIN_th ← max(W / 2, 1);  W ← 1
//! else if W < WIN_th:      W ← W + 1               (slow start)
//! else:                    W ← W + 1 / W           (congestion avoidance)
//! ```
//!
//! The paper leaves most of this open (`../shared/seeds/NOTES.md`, "004"); holdline's
//! choices, each a setting:
//!
//! | what | holdline | the paper |
//! | --- | --- | --- |
//! | transaction delay | `delay` = `first-response`: INVITE sent → its first response (`100 Trying` of a proxy, `180`, or a final), and the transaction is no longer outstanding from then on; `final`: INVITE sent → its final response; a transaction without one (Timer B) counts with the delay the driver reports | not said |
//! | `Z_avg` | EWMA of the delays, weight `avg_weight` = 1/8 (TCP's SRTT weight) | "average of recent delays", how many not said |
//! | `δ` | EWMA *standard deviation* of the delays (weight `dev_weight` = 1/4): `Z_th + ε·δ` must be a delay, and a variance is in s² | "variance" (l. 67), then "1.2" (l. 73) |
//! | `ε` | 3 | 3 (l. 67) |
//! | `Z_th` | `threshold` if set, else `threshold_factor` (4) × the smallest delay seen, at least `threshold_floor` (20 ms) | never given |
//! | initial `W`, `WIN_th` | 4 and 64 | not said |
//! | the call that does not fit | `503` upstream, at once | not said |
//! | a cut | `decrease` = `collapse`: `W ← 1` (the pseudo-code); `halve`: `W ← W/2` | `W = 1` |
//! | cuts per round | every completion is judged; `once_per_round`: not those sent before the last cut | every completion |
//! | prose vs pseudo-code | the pseudo-code (l. 65); the prose of l. 63 and l. 83 contradicts it | — |
//!
//! **Why the first response by default.** The final response of an INVITE comes when the
//! callee answers: seconds of ringing that say nothing of the next hop's load. Measured to
//! the final response, every call that rings reads as a delay far above `Z_th` and holds its
//! slot while it rings, so the window closes on a downstream that is idle (20 calls/s
//! ringing 3 s each through an idle holdline: 176 of 220 calls answered `503`). The first
//! response is what the next hop sends when it has read and handled the INVITE (a proxy's
//! `100 Trying`, a user agent's `180` or final), so its delay is the next hop's queue and
//! work, with or without ringing. In the papers' testbeds the callee answers at once, and
//! the two readings differ only by the answer's own trip (`final` keeps that reading).
//!
//! **Why the two variants** (off by default). Near the downstream's capacity the window
//! loses calls in bursts: after a cut, the transactions sent before it keep ending with the
//! queue's delay, so the pseudo-code cuts again at each of them (`WIN_th` falls to 1) and the
//! window creeps back by `1/W`. TCP reduces once per window of data and halves rather than
//! restarting at 1. In a virtual-clock model of the lab's downstream (six 1 ms messages per
//! call, Poisson arrivals at 0.986 of its capacity) the paper's rule carried 0.905 of the
//! capacity with a 20 ms `Z_th` and 0.935 with 50 ms; both variants together 0.922 and 0.948
//! (`docs/overload.md`, seed 004's trapezoid). At exactly the capacity only a deeper queue
//! admits more: Poisson arrivals fill any bounded queue now and then.
//!
//! `Z_avg` and `δ` are per target and move only when a transaction ends: after a collapse to
//! `W = 1` the average comes down with the first fast completions, so the window reopens
//! within a few transactions once the downstream's queue is gone. Only new INVITEs are ever
//! held back; the requests of admitted calls pass in every state. The table of targets is
//! bounded (`max_targets`): when full, the target with nothing outstanding that was used
//! longest ago is forgotten.
//!
//! Inputs: [`Signal::Forwarded`], [`Signal::Released`] (or [`Signal::Completed`] with
//! `delay` = `final`), [`Signal::TargetGone`]. Gate:
//! [`Gate::Forward`](crate::Gate::Forward).

use std::collections::HashMap;

use holdline_base::{Duration, Instant};

use crate::admission::{Admission, Decision, RejectReason, TargetId};
use crate::algorithm::{Algorithm, ConfigError, check_nonzero, check_range};
use crate::common::{Counters, decides, secs};
use crate::controller::{Controller, ControllerFactory};
use crate::signal::Signal;
use crate::snapshot::{Snapshot, TargetSnapshot};

/// [`TargetSnapshot::state`] of a next hop whose window is full (new
/// INVITEs for it are turned away); `"open"` otherwise.
pub const WINDOW_FULL: &str = "full";

/// The configuration of a [`DelayWindow`].
#[derive(Clone, Debug, PartialEq)]
pub struct DelayWindowConfig {
    /// `ε`, how many deviations above `Z_th` the average may go (≥ 0). Default 3 (seed 004,
    /// l. 67).
    pub epsilon: f64,
    /// `Z_th` itself; `None`: derived from the smallest delay seen (see `threshold_factor`).
    /// Default `None`.
    pub threshold: Option<Duration>,
    /// With `threshold = None`: `Z_th` = this × the smallest transaction delay seen to the
    /// target (its unloaded delay), finite and ≥ 1. Default 4.
    pub threshold_factor: f64,
    /// With `threshold = None`: the smallest `Z_th` (delays on a LAN are sub-millisecond; a
    /// multiple of one would read scheduling noise as overload). Default 20 ms.
    pub threshold_floor: Duration,
    /// The EWMA weight of a new delay in `Z_avg`, in `(0, 1]`. Default 1/8.
    pub avg_weight: f64,
    /// The EWMA weight of a new squared deviation in `δ²`, in `(0, 1]`. Default 1/4.
    pub dev_weight: f64,
    /// The window of a target not seen before, ≥ 1. Default 4.
    pub initial_window: f64,
    /// `WIN_th` of a target not seen before, ≥ 1. Default 64.
    pub initial_threshold: f64,
    /// The largest window, ≥ `initial_window`. Default 10,000.
    pub max_window: f64,
    /// Most targets with state. Default 1,024.
    pub max_targets: usize,
    /// What a cut does to `W`: the paper's collapse to 1, or halving. Default
    /// [`WindowDecrease::Collapse`] (seed 004, l. 65).
    pub decrease: WindowDecrease,
    /// Cut at most once per round: a transaction sent before the last cut ends without
    /// cutting or growing the window (its delay still enters `Z_avg` and `δ`), as TCP reduces
    /// its window once per window of data. Default `false` (the paper's pseudo-code judges
    /// every completion).
    pub once_per_round: bool,
    /// What a transaction's delay is measured to, and when it stops being outstanding.
    /// Default [`WindowDelay::FirstResponse`].
    pub delay: WindowDelay,
    /// `Retry-After` of the 503s. Default `None`.
    pub retry_after: Option<Duration>,
}

/// What the window's transaction delay is measured to (seed 004 does not say).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WindowDelay {
    /// INVITE sent → its first response, provisional or final ([`Signal::Released`]): the
    /// next hop's queueing and work, without the callee's ringing; the transaction stops
    /// counting against the window then.
    #[default]
    FirstResponse,
    /// INVITE sent → its final response ([`Signal::Completed`]): right only where callees
    /// answer at once (the papers' testbeds); a call that rings reads as overload.
    Final,
}

impl WindowDelay {
    /// The setting's name in configuration files: `first-response` or `final`.
    pub fn name(self) -> &'static str {
        match self {
            Self::FirstResponse => "first-response",
            Self::Final => "final",
        }
    }

    /// The setting named `name` (`first-response` or `final`).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "first-response" => Some(Self::FirstResponse),
            "final" => Some(Self::Final),
            _ => None,
        }
    }
}

/// What a cut of seed 004's window does (the pseudo-code's `Window = 1`, or TCP's halving).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WindowDecrease {
    /// `W ← 1` (seed 004, l. 65), `WIN_th ← W / 2`: slow start back to half the window.
    #[default]
    Collapse,
    /// `W ← W / 2` (at least 1), `WIN_th ← W / 2`: congestion avoidance from there.
    Halve,
}

impl WindowDecrease {
    /// The setting's name in configuration files: `collapse` or `halve`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Collapse => "collapse",
            Self::Halve => "halve",
        }
    }

    /// The setting named `name` (`collapse` or `halve`).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "collapse" => Some(Self::Collapse),
            "halve" => Some(Self::Halve),
            _ => None,
        }
    }
}

impl Default for DelayWindowConfig {
    fn default() -> Self {
        Self {
            epsilon: 3.0,
            threshold: None,
            threshold_factor: 4.0,
            threshold_floor: Duration::from_millis(20),
            avg_weight: 0.125,
            dev_weight: 0.25,
            initial_window: 4.0,
            initial_threshold: 64.0,
            max_window: 10_000.0,
            max_targets: 1024,
            decrease: WindowDecrease::Collapse,
            once_per_round: false,
            delay: WindowDelay::FirstResponse,
            retry_after: None,
        }
    }
}

impl ControllerFactory for DelayWindowConfig {
    fn algorithm(&self) -> Algorithm {
        Algorithm::DelayWindow
    }

    fn validate(&self) -> Result<(), ConfigError> {
        check_range("epsilon", self.epsilon, 0.0, 1e6, "between 0 and 1e6")?;
        check_range(
            "threshold_factor",
            self.threshold_factor,
            1.0,
            1e6,
            "between 1 and 1e6",
        )?;
        check_range(
            "avg_weight",
            self.avg_weight,
            f64::MIN_POSITIVE,
            1.0,
            "greater than 0, at most 1",
        )?;
        check_range(
            "dev_weight",
            self.dev_weight,
            f64::MIN_POSITIVE,
            1.0,
            "greater than 0, at most 1",
        )?;
        check_range("max_window", self.max_window, 1.0, 1e9, "between 1 and 1e9")?;
        check_range(
            "initial_window",
            self.initial_window,
            1.0,
            self.max_window,
            "at least 1, at most max_window",
        )?;
        check_range(
            "initial_threshold",
            self.initial_threshold,
            1.0,
            1e9,
            "between 1 and 1e9",
        )?;
        check_nonzero("max_targets", self.max_targets)
    }

    fn build(
        &self,
        now: Instant,
        _rng: holdline_base::Rng,
    ) -> Result<Box<dyn Controller>, ConfigError> {
        Ok(Box::new(DelayWindow::new(self.clone(), now)?))
    }
}

/// One target's window and delay statistics.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TargetWindow {
    /// `W`, the window.
    pub window: f64,
    /// `WIN_th`.
    pub threshold: f64,
    /// INVITE transactions outstanding.
    pub outstanding: u32,
    /// `Z_avg`, seconds (`None` before the first completion).
    pub avg_delay: Option<f64>,
    /// `δ`, seconds.
    pub deviation: f64,
    /// The smallest delay seen, seconds.
    pub min_delay: Option<f64>,
    /// Cuts of the window so far (collapses to `W = 1`, or halvings).
    pub collapses: u64,
    /// When the window was last cut.
    pub last_cut: Option<Instant>,
    /// New INVITEs admitted towards the target in all.
    pub admitted: u64,
    /// New INVITEs turned away because the window was full, in all.
    pub rejected: u64,
    last_used: Instant,
}

impl TargetWindow {
    fn new(config: &DelayWindowConfig, now: Instant) -> Self {
        Self {
            window: config.initial_window,
            threshold: config.initial_threshold,
            outstanding: 0,
            avg_delay: None,
            deviation: 0.0,
            min_delay: None,
            collapses: 0,
            last_cut: None,
            admitted: 0,
            rejected: 0,
            last_used: now,
        }
    }

    /// Whether one more transaction fits.
    pub fn has_room(&self) -> bool {
        f64::from(self.outstanding) < self.window.floor()
    }
}

/// Seed 004's feedback-free window (see the [module documentation](self)).
#[derive(Clone, Debug)]
pub struct DelayWindow {
    config: DelayWindowConfig,
    targets: HashMap<TargetId, TargetWindow>,
    latest: Instant,
    counters: Counters,
}

impl DelayWindow {
    /// A controller with a validated `config` and no target yet.
    pub fn new(config: DelayWindowConfig, now: Instant) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            config,
            targets: HashMap::new(),
            latest: now,
            counters: Counters::default(),
        })
    }

    /// The state of `target`, if it has any.
    pub fn target(&self, target: TargetId) -> Option<&TargetWindow> {
        self.targets.get(&target)
    }

    /// Every target with state.
    pub fn targets(&self) -> impl Iterator<Item = (TargetId, &TargetWindow)> + '_ {
        self.targets.iter().map(|(&k, v)| (k, v))
    }

    /// `Z_th` for a target whose smallest delay so far is `min_delay` (seconds).
    fn threshold_for(&self, min_delay: Option<f64>) -> f64 {
        match self.config.threshold {
            Some(t) => secs(t),
            None => (self.config.threshold_factor * min_delay.unwrap_or(0.0))
                .max(secs(self.config.threshold_floor)),
        }
    }

    fn clock(&mut self, now: Instant) -> Instant {
        self.latest = self.latest.max(now);
        self.latest
    }

    /// The state of `target`, made (and room made for it) if needed.
    fn entry(&mut self, target: TargetId, now: Instant) -> &mut TargetWindow {
        if !self.targets.contains_key(&target) && self.targets.len() >= self.config.max_targets {
            let victim = self
                .targets
                .iter()
                .min_by_key(|(_, t)| (t.outstanding > 0, t.last_used))
                .map(|(&k, _)| k);
            if let Some(k) = victim {
                self.targets.remove(&k);
            }
        }
        let config = &self.config;
        let t = self
            .targets
            .entry(target)
            .or_insert_with(|| TargetWindow::new(config, now));
        t.last_used = now;
        t
    }

    fn completed(&mut self, now: Instant, target: TargetId, delay: Duration) {
        let z = secs(delay);
        let (avg_w, dev_w, eps, max_window, decrease, once_per_round) = (
            self.config.avg_weight,
            self.config.dev_weight,
            self.config.epsilon,
            self.config.max_window,
            self.config.decrease,
            self.config.once_per_round,
        );
        let min_before = self.targets.get(&target).and_then(|t| t.min_delay);
        let min_delay = Some(min_before.map_or(z, |m| m.min(z)));
        let z_th = self.threshold_for(min_delay);
        let t = self.entry(target, now);
        t.outstanding = t.outstanding.saturating_sub(1);
        t.min_delay = min_delay;
        let avg = match t.avg_delay {
            None => {
                t.deviation = 0.0;
                z
            }
            Some(a) => {
                let diff = z - a;
                let var = (1.0 - dev_w) * t.deviation * t.deviation + dev_w * diff * diff;
                t.deviation = var.sqrt();
                a + avg_w * diff
            }
        };
        t.avg_delay = Some(avg);
        // Sent before the last cut: its delay tells of the queue that cut was for.
        let sent = now.checked_sub(delay);
        if once_per_round && t.last_cut.is_some_and(|cut| sent.is_none_or(|s| s < cut)) {
            return;
        }
        if avg >= z_th + eps * t.deviation {
            t.threshold = (t.window / 2.0).max(1.0);
            t.window = match decrease {
                WindowDecrease::Collapse => 1.0,
                WindowDecrease::Halve => t.threshold,
            };
            t.collapses += 1;
            t.last_cut = Some(now);
        } else if t.window < t.threshold {
            t.window = (t.window + 1.0).min(max_window);
        } else {
            t.window = (t.window + 1.0 / t.window).min(max_window);
        }
    }
}

impl Controller for DelayWindow {
    fn algorithm(&self) -> Algorithm {
        Algorithm::DelayWindow
    }

    fn admit(&mut self, now: Instant, req: &Admission) -> Decision {
        if !decides(self.gate(), req) {
            return Decision::Admit;
        }
        let Some(target) = req.target else {
            return Decision::Admit;
        };
        let now = self.clock(now);
        let t = self.entry(target, now);
        if t.has_room() {
            t.admitted += 1;
            self.counters.admit()
        } else {
            t.rejected += 1;
            self.counters
                .reject(RejectReason::WindowFull, self.config.retry_after)
        }
    }

    fn on_signal(&mut self, now: Instant, signal: Signal) {
        let now = self.clock(now);
        match signal {
            Signal::Forwarded { target } => {
                let t = self.entry(target, now);
                t.outstanding = t.outstanding.saturating_add(1);
            }
            Signal::Released { target, delay }
                if self.config.delay == WindowDelay::FirstResponse =>
            {
                self.completed(now, target, delay);
            }
            Signal::Completed { target, delay, .. } if self.config.delay == WindowDelay::Final => {
                self.completed(now, target, delay);
            }
            Signal::TargetGone(target) => {
                self.targets.remove(&target);
            }
            _ => {}
        }
    }

    fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot::new(Algorithm::DelayWindow);
        s.throttled_targets = Some(self.targets.values().filter(|t| !t.has_room()).count());
        s.admitted = self.counters.admitted;
        s.rejected = self.counters.rejected;
        s
    }

    fn target_snapshots(&self, out: &mut Vec<TargetSnapshot>) {
        out.extend(self.targets.iter().map(|(&id, t)| {
            let state = if t.has_room() { "open" } else { WINDOW_FULL };
            let mut s = TargetSnapshot::new(id, state);
            s.admitted = t.admitted;
            s.restricted = t.rejected;
            s.window = Some(t.window);
            s.outstanding = Some(t.outstanding);
            s.delay = t.avg_delay;
            s.cuts = t.collapses;
            s
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::Class;

    const A: TargetId = TargetId(1);

    fn window(config: DelayWindowConfig) -> DelayWindow {
        DelayWindow::new(config, Instant::ZERO).unwrap_or_else(|e| panic!("{e}"))
    }

    fn ask(c: &mut DelayWindow, target: TargetId) -> bool {
        c.admit(Instant::ZERO, &Admission::forward(Class::NewInvite, target))
            .is_admit()
    }

    /// A transaction answered at once, as the papers' callees do: its first response and its
    /// final one come together, as the endpoint reports them (released, then ended).
    fn complete(c: &mut DelayWindow, target: TargetId, ms: u64) {
        complete_at(c, target, 0, ms);
    }

    fn send(c: &mut DelayWindow, target: TargetId) -> bool {
        let ok = ask(c, target);
        if ok {
            c.on_signal(Instant::ZERO, Signal::Forwarded { target });
        }
        ok
    }

    #[test]
    fn the_window_bounds_outstanding_transactions() {
        let mut c = window(DelayWindowConfig::default());
        for _ in 0..4 {
            assert!(send(&mut c, A));
        }
        assert!(!send(&mut c, A), "initial window 4");
        let s = c.snapshot();
        assert_eq!(s.rejected.get(RejectReason::WindowFull), 1);
        assert_eq!(s.throttled_targets, Some(1));
        // Another target has its own window; other messages always pass.
        assert!(send(&mut c, TargetId(2)));
        assert!(
            c.admit(Instant::ZERO, &Admission::forward(Class::InDialog, A))
                .is_admit()
        );
        complete(&mut c, A, 5);
        assert_eq!(c.target(A).map(|t| t.outstanding), Some(3));
        // 5 ms < 20 ms floor: slow start, W 4 → 5; two places free now.
        assert_eq!(c.target(A).map(|t| t.window), Some(5.0));
        assert!(send(&mut c, A));
        assert!(send(&mut c, A));
        assert!(!send(&mut c, A));
    }

    fn complete_at(c: &mut DelayWindow, target: TargetId, at_ms: u64, delay_ms: u64) {
        let (at, delay) = (
            Instant::ZERO + Duration::from_millis(at_ms),
            Duration::from_millis(delay_ms),
        );
        c.on_signal(at, Signal::Released { target, delay });
        c.on_signal(
            at,
            Signal::Completed {
                target,
                outcome: crate::signal::Outcome::Final(200),
                delay,
            },
        );
    }

    #[test]
    fn ringing_is_not_load_the_first_response_is() {
        // Calls whose next hop answers in 2 ms and whose callees ring 10 s.
        let ring = |c: &mut DelayWindow, n: u64| {
            for i in 0..n {
                assert!(send(c, A), "call {i}: {:?}", c.target(A));
                c.on_signal(
                    Instant::ZERO,
                    Signal::Released {
                        target: A,
                        delay: Duration::from_millis(2),
                    },
                );
            }
            for _ in 0..n {
                c.on_signal(
                    Instant::ZERO,
                    Signal::Completed {
                        target: A,
                        outcome: crate::signal::Outcome::Final(200),
                        delay: Duration::from_secs(10),
                    },
                );
            }
        };
        // By default the window judges the first response: 40 ringing calls, one after
        // the other, each answered at once by the next hop; the window only grows.
        let mut c = window(DelayWindowConfig::default());
        ring(&mut c, 40);
        let t = c.target(A).copied();
        assert_eq!(t.map(|t| (t.outstanding, t.collapses)), Some((0, 0)));
        assert_eq!(t.map(|t| t.window), Some(44.0));
        assert!(t.and_then(|t| t.avg_delay).is_some_and(|a| a < 0.003));
        // Measured to the final response, the window holds each ringing call until it is
        // answered: 4 calls per 10 s at first, growing by one per answer.
        let mut f = window(DelayWindowConfig {
            delay: WindowDelay::Final,
            ..DelayWindowConfig::default()
        });
        for _ in 0..4 {
            assert!(send(&mut f, A));
            f.on_signal(
                Instant::ZERO,
                Signal::Released {
                    target: A,
                    delay: Duration::from_millis(2),
                },
            );
        }
        assert!(!send(&mut f, A), "the window of 4 is full while they ring");
        // Then, answered after 10 s each: the window grows, by four.
        for _ in 0..4 {
            f.on_signal(
                Instant::ZERO,
                Signal::Completed {
                    target: A,
                    outcome: crate::signal::Outcome::Final(200),
                    delay: Duration::from_secs(10),
                },
            );
        }
        let t = f.target(A).copied();
        assert_eq!(t.map(|t| (t.window, t.collapses)), Some((8.0, 0)), "{t:?}");
        assert_eq!(WindowDelay::parse("final"), Some(WindowDelay::Final));
        assert_eq!(
            WindowDelay::parse("first-response").map(WindowDelay::name),
            Some("first-response")
        );
        assert_eq!(WindowDelay::parse("first"), None);
    }

    /// A window of 8 with 8 transactions outstanding, all sent at t = 0.
    fn full_window_of_eight(config: DelayWindowConfig) -> DelayWindow {
        let mut c = window(DelayWindowConfig {
            initial_window: 8.0,
            threshold: Some(Duration::from_millis(20)),
            ..config
        });
        for _ in 0..8 {
            assert!(send(&mut c, A));
        }
        c
    }

    #[test]
    fn halving_keeps_half_the_window_where_the_paper_collapses_to_one() {
        let mut paper = full_window_of_eight(DelayWindowConfig::default());
        complete_at(&mut paper, A, 100, 100);
        let t = paper.target(A).copied();
        assert_eq!(t.map(|t| (t.window, t.threshold)), Some((1.0, 4.0)));

        let mut halve = full_window_of_eight(DelayWindowConfig {
            decrease: WindowDecrease::Halve,
            ..DelayWindowConfig::default()
        });
        complete_at(&mut halve, A, 100, 100);
        let t = halve.target(A).copied();
        assert_eq!(t.map(|t| (t.window, t.threshold)), Some((4.0, 4.0)));
        assert_eq!(t.map(|t| t.collapses), Some(1));
        assert_eq!(WindowDecrease::parse("halve"), Some(WindowDecrease::Halve));
        assert_eq!(
            WindowDecrease::parse("collapse").map(WindowDecrease::name),
            Some("collapse")
        );
        assert_eq!(WindowDecrease::parse("half"), None);
    }

    #[test]
    fn once_per_round_ignores_what_was_sent_before_the_cut() {
        // The paper's rule: the second slow completion cuts again and WIN_th falls to 1.
        let mut paper = full_window_of_eight(DelayWindowConfig::default());
        complete_at(&mut paper, A, 100, 100);
        complete_at(&mut paper, A, 101, 101);
        let t = paper.target(A).copied();
        assert_eq!(
            t.map(|t| (t.window, t.threshold, t.collapses)),
            Some((1.0, 1.0, 2))
        );

        let mut once = full_window_of_eight(DelayWindowConfig {
            once_per_round: true,
            ..DelayWindowConfig::default()
        });
        complete_at(&mut once, A, 100, 100);
        // Six more of the old round: no cut, no growth; the average still moves.
        for i in 1..=6 {
            complete_at(&mut once, A, 100 + i, 100 + i);
        }
        let t = once.target(A).copied();
        assert_eq!(
            t.map(|t| (t.window, t.threshold, t.collapses)),
            Some((1.0, 4.0, 1))
        );
        assert_eq!(t.map(|t| t.outstanding), Some(1));
        assert!(t.and_then(|t| t.avg_delay).is_some_and(|a| a > 0.1));
        // The last of the old round, then one sent after the cut (at 110 ms, W = 1): that one
        // is judged again and, still slow, cuts.
        complete_at(&mut once, A, 107, 107);
        assert_eq!(
            once.target(A).map(|t| (t.outstanding, t.collapses)),
            Some((0, 1))
        );
        assert!(send(&mut once, A));
        assert!(!send(&mut once, A), "W = 1");
        complete_at(&mut once, A, 200, 90);
        assert_eq!(once.target(A).map(|t| t.collapses), Some(2));
    }

    #[test]
    fn slow_start_then_congestion_avoidance() {
        let config = DelayWindowConfig {
            initial_window: 1.0,
            initial_threshold: 3.0,
            ..DelayWindowConfig::default()
        };
        let mut c = window(config);
        let mut w = vec![];
        for _ in 0..4 {
            assert!(send(&mut c, A));
            complete(&mut c, A, 1);
            w.push(c.target(A).map_or(0.0, |t| t.window));
        }
        // 1 → 2 → 3 (slow start below WIN_th = 3), then + 1/W.
        assert_eq!(&w[..2], &[2.0, 3.0]);
        assert!((w[2] - (3.0 + 1.0 / 3.0)).abs() < 1e-12);
        assert!((w[3] - (w[2] + 1.0 / w[2])).abs() < 1e-12);
    }

    #[test]
    fn a_delay_above_the_threshold_collapses_the_window_and_halves_win_th() {
        let mut c = window(DelayWindowConfig {
            initial_window: 10.0,
            ..DelayWindowConfig::default()
        });
        for _ in 0..10 {
            assert!(send(&mut c, A));
        }
        // Unloaded: 2 ms each; Z_th = max(4 × 2 ms, 20 ms) = 20 ms.
        complete(&mut c, A, 2);
        assert!(
            c.target(A)
                .is_some_and(|t| t.collapses == 0 && t.window == 11.0)
        );
        // One 1 s delay: Z_avg = 2 + (1000 − 2)/8 ≈ 127 ms; δ = sqrt(¼ · 998²) ≈ 499 ms:
        // 127 < 20 + 3 · 499: no collapse yet (one outlier is variance, not load).
        complete(&mut c, A, 1000);
        assert!(c.target(A).is_some_and(|t| t.collapses == 0));
        // The delay stays at 1 s: the average climbs and the deviation decays until the
        // average passes Z_th + 3δ — at the 15th slow completion (0.865 ≥ 0.02 + 3 × 0.278).
        let mut collapsed_at = None;
        let mut before = 0.0;
        for n in 2..=20 {
            c.on_signal(Instant::ZERO, Signal::Forwarded { target: A });
            before = c.target(A).map_or(0.0, |t| t.window);
            complete(&mut c, A, 1000);
            if c.target(A).is_some_and(|t| t.collapses > 0) {
                collapsed_at = Some(n);
                break;
            }
        }
        assert_eq!(collapsed_at, Some(15), "{:?}", c.target(A));
        let t = c.target(A).copied().unwrap_or_else(|| panic!("state"));
        assert_eq!(t.window, 1.0);
        assert_eq!(t.threshold, before / 2.0, "{t:?}");
    }

    #[test]
    fn a_fixed_threshold_and_timeouts() {
        let mut c = window(DelayWindowConfig {
            threshold: Some(Duration::from_millis(100)),
            epsilon: 0.0,
            ..DelayWindowConfig::default()
        });
        assert!(send(&mut c, A));
        // A transaction that timed out (Timer B, 32 s) is as slow as it gets: released at its
        // end, without a response.
        let delay = Duration::from_secs(32);
        c.on_signal(Instant::ZERO, Signal::Released { target: A, delay });
        c.on_signal(
            Instant::ZERO,
            Signal::Completed {
                target: A,
                outcome: crate::signal::Outcome::Timeout,
                delay,
            },
        );
        assert_eq!(c.target(A).map(|t| t.window), Some(1.0));
        assert!(send(&mut c, A));
        assert!(!send(&mut c, A));
    }

    #[test]
    fn each_target_reports_its_window_for_metrics() {
        let mut c = window(DelayWindowConfig::default());
        for _ in 0..5 {
            send(&mut c, A);
        }
        complete(&mut c, A, 4);
        let mut snaps = Vec::new();
        c.target_snapshots(&mut snaps);
        assert_eq!(snaps.len(), 1);
        let s = snaps[0];
        assert_eq!((s.target, s.state), (A, "open"));
        assert_eq!((s.admitted, s.restricted, s.cuts), (4, 1, 0));
        assert_eq!((s.window, s.outstanding), (Some(5.0), Some(3)));
        assert!(s.delay.is_some_and(|d| (d - 0.004).abs() < 1e-9), "{s:?}");
        send(&mut c, A);
        send(&mut c, A);
        snaps.clear();
        c.target_snapshots(&mut snaps);
        assert_eq!(snaps[0].state, "full");
    }

    #[test]
    fn the_table_is_bounded_and_targets_can_go() {
        let mut c = window(DelayWindowConfig {
            max_targets: 2,
            ..DelayWindowConfig::default()
        });
        assert!(send(&mut c, A));
        assert!(ask(&mut c, TargetId(2)));
        assert!(ask(&mut c, TargetId(3)));
        // Target 2 had nothing outstanding: it went, A (one outstanding) stayed.
        assert!(c.target(A).is_some());
        assert!(c.target(TargetId(2)).is_none());
        c.on_signal(Instant::ZERO, Signal::TargetGone(A));
        assert!(c.target(A).is_none());
        // Completions of a forgotten target do not underflow.
        complete(&mut c, A, 1);
        assert_eq!(c.target(A).map(|t| t.outstanding), Some(0));
    }

    #[test]
    fn invalid_configs() {
        let bad = [
            DelayWindowConfig {
                epsilon: -1.0,
                ..DelayWindowConfig::default()
            },
            DelayWindowConfig {
                threshold_factor: 0.5,
                ..DelayWindowConfig::default()
            },
            DelayWindowConfig {
                avg_weight: 0.0,
                ..DelayWindowConfig::default()
            },
            DelayWindowConfig {
                initial_window: 0.5,
                ..DelayWindowConfig::default()
            },
            DelayWindowConfig {
                max_window: 2.0,
                initial_window: 4.0,
                ..DelayWindowConfig::default()
            },
            DelayWindowConfig {
                max_targets: 0,
                ..DelayWindowConfig::default()
            },
        ];
        for config in bad {
            assert!(config.validate().is_err(), "{config:?}");
        }
        assert_eq!(DelayWindowConfig::default().validate(), Ok(()));
    }
}
