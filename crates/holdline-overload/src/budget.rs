//! The rejection budget: how much of a server's time answering `503`s may take.
//!
//! A rejection is not free. Under real CPU scarcity (a CPU quota, a noisy neighbour), a new
//! INVITE answered `503` costs its receive, its parse, the `503`'s send and the ACK of the
//! `503`: on loopback UDP about a seventh of a whole call. Offered ten times what it can serve,
//! a server that answers every excess INVITE spends more than all its CPU on `503`s and
//! completes almost no call (seed 003 §5.2.1: local control degrades linearly with load).
//!
//! The budget caps the share of the server's time rejections may take (`share`, 10% by
//! default). The driver accounts every stretch of work it did ([`Work`]: the busy time, the
//! part spent handling messages, the part of that spent on rejected INVITEs and the ACKs of
//! their `503`s, and how many datagrams moved); the budget attributes the system-call time
//! (receives and sends, not measured per message) to rejections by their share of the
//! datagrams, and returns the busy time of everything else — what an occupancy-based
//! controller should steer. While the budget is spent, the driver stops reading new INVITEs
//! ([`RejectionBudget::allows`] is false until [`RejectionBudget::resume_at`]); where new
//! INVITEs have a socket of their own, the kernel then drops those that do not fit in it, at
//! no cost to the server, and the callers retransmit.
//!
//! The budget is kept over windows of `window` (100 ms by default); spending beyond one
//! window's allowance is carried into the next, so a burst of rejections pauses reading for
//! as long as it overspent.

use holdline_base::{Duration, Instant};

use crate::algorithm::{ConfigError, check_positive, check_range};

/// Datagrams one rejection moves per message the driver counted as rejected: the INVITE
/// and the ACK of its `503` come in (two messages), the `503` goes out (one datagram).
const DATAGRAMS_PER_REJECTED_MESSAGE: f64 = 1.5;

/// The configuration of a [`RejectionBudget`].
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetConfig {
    /// The largest share of the server's time rejections may take, in `(0, 1]`. Default 0.1.
    pub share: f64,
    /// The accounting window. Default 100 ms.
    pub window: Duration,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self {
            share: 0.1,
            window: Duration::from_millis(100),
        }
    }
}

impl BudgetConfig {
    /// Checks the values.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_range(
            "rejection_budget",
            self.share,
            f64::MIN_POSITIVE,
            1.0,
            "greater than 0, at most 1",
        )?;
        check_positive("window", self.window)
    }
}

/// One stretch of a driver's work, as it measured it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Work {
    /// Wall time the stretch took (the driver's busy time: not waiting for work).
    pub busy: Duration,
    /// Part of `busy` spent handling messages (measured around each one).
    pub handling: Duration,
    /// Part of `handling` spent on rejected new INVITEs and on the ACKs of their `503`s.
    pub rejecting: Duration,
    /// Datagrams received and sent in the stretch (all of them).
    pub datagrams: u64,
    /// Messages counted in `rejecting` (rejected INVITEs and absorbed ACKs).
    pub rejected_messages: u64,
}

/// How a stretch of work divides between rejections and everything else.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Split {
    /// Time attributed to rejections: their handling, and their datagrams' share of the
    /// time not spent handling messages (system calls).
    pub rejecting: Duration,
    /// The rest of the busy time.
    pub other: Duration,
}

/// Rejection accounting against a budget; see the [module documentation](self).
#[derive(Clone, Debug)]
pub struct RejectionBudget {
    config: BudgetConfig,
    /// Start of the current window.
    start: Instant,
    /// Rejection time in the current window, with what earlier windows overspent.
    spent: Duration,
    /// Rejection time accounted in all.
    total: Duration,
    /// Times reading was refused because the budget was spent.
    pauses: u64,
    paused: bool,
}

impl RejectionBudget {
    /// A budget whose first window starts at `now`.
    pub fn new(config: BudgetConfig, now: Instant) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            config,
            start: now,
            spent: Duration::ZERO,
            total: Duration::ZERO,
            pauses: 0,
            paused: false,
        })
    }

    /// One window's allowance.
    fn allowance(&self) -> Duration {
        self.config.window.mul_f64(self.config.share)
    }

    /// Starts the windows that ended by `now`: each pays off one allowance of what was
    /// spent (an idle gap pays off everything).
    fn roll(&mut self, now: Instant) {
        let passed = now.saturating_duration_since(self.start).as_nanos()
            / self.config.window.as_nanos().max(1);
        if passed == 0 {
            return;
        }
        let n = u32::try_from(passed).unwrap_or(u32::MAX);
        self.start = self
            .start
            .checked_add(self.config.window.saturating_mul(n))
            .unwrap_or(now);
        self.spent = self
            .spent
            .saturating_sub(self.allowance().saturating_mul(n));
    }

    /// Accounts a stretch of work that ended at `now`; returns how it splits.
    pub fn account(&mut self, now: Instant, work: Work) -> Split {
        self.roll(now);
        let handling = work.handling.min(work.busy);
        let rejecting = work.rejecting.min(handling);
        let calls = work.busy - handling;
        let share = if work.datagrams == 0 {
            0.0
        } else {
            (work.rejected_messages as f64 * DATAGRAMS_PER_REJECTED_MESSAGE / work.datagrams as f64)
                .clamp(0.0, 1.0)
        };
        let rejecting = (rejecting + calls.mul_f64(share)).min(work.busy);
        self.spent = self.spent.saturating_add(rejecting);
        self.total = self.total.saturating_add(rejecting);
        Split {
            rejecting,
            other: work.busy - rejecting,
        }
    }

    /// Whether rejections may go on at `now` (the window's allowance is not spent). A
    /// refusal after an allowed call counts as a pause.
    pub fn allows(&mut self, now: Instant) -> bool {
        self.roll(now);
        let ok = self.spent < self.allowance();
        if !ok && !self.paused {
            self.pauses = self.pauses.saturating_add(1);
        }
        self.paused = !ok;
        ok
    }

    /// When rejections may go on again, if they may not now: the end of the window in which
    /// the overspending is paid off.
    pub fn resume_at(&self) -> Option<Instant> {
        if self.spent < self.allowance() {
            return None;
        }
        let windows = (self.spent.as_nanos() / self.allowance().as_nanos().max(1)) as u32;
        Some(self.start + self.config.window.saturating_mul(windows))
    }

    /// Rejection time accounted since the budget was made.
    pub fn total(&self) -> Duration {
        self.total
    }

    /// How many times reading paused because the budget was spent.
    pub fn pauses(&self) -> u64 {
        self.pauses
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn budget() -> RejectionBudget {
        match RejectionBudget::new(BudgetConfig::default(), Instant::ZERO) {
            Ok(b) => b,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn system_call_time_is_shared_by_datagrams() {
        let mut b = budget();
        // 10 ms busy, 6 ms handling of which 2 ms rejecting; 4 ms in system calls; 100
        // datagrams of which 20 rejected messages = 30 rejection datagrams: 1.2 ms of it.
        let s = b.account(
            Instant::from_millis(1),
            Work {
                busy: ms(10),
                handling: ms(6),
                rejecting: ms(2),
                datagrams: 100,
                rejected_messages: 20,
            },
        );
        assert_eq!(s.rejecting, Duration::from_micros(3200));
        assert_eq!(s.other, Duration::from_micros(6800));
        assert_eq!(b.total(), Duration::from_micros(3200));
    }

    #[test]
    fn inconsistent_measures_are_clamped() {
        let mut b = budget();
        let s = b.account(
            Instant::from_millis(1),
            Work {
                busy: ms(1),
                handling: ms(5),
                rejecting: ms(9),
                datagrams: 1,
                rejected_messages: 10,
            },
        );
        assert_eq!(s.rejecting, ms(1));
        assert_eq!(s.other, Duration::ZERO);
        let idle = b.account(Instant::from_millis(2), Work::default());
        assert_eq!(idle, Split::default());
    }

    #[test]
    fn spending_the_allowance_pauses_until_it_is_paid_off() {
        let mut b = budget();
        assert!(b.allows(Instant::ZERO));
        assert_eq!(b.resume_at(), None);
        // 25 ms of rejecting in the first window: 2.5 windows' allowance (10 ms each).
        b.account(
            Instant::from_millis(50),
            Work {
                busy: ms(25),
                handling: ms(25),
                rejecting: ms(25),
                datagrams: 0,
                rejected_messages: 0,
            },
        );
        assert!(!b.allows(Instant::from_millis(60)));
        assert_eq!(b.resume_at(), Some(Instant::from_millis(200)));
        assert!(!b.allows(Instant::from_millis(150)), "15 ms still owed");
        assert!(
            b.allows(Instant::from_millis(200)),
            "5 ms owed < 10 ms allowance"
        );
        assert_eq!(b.pauses(), 1);
        // Within the allowance: no pause.
        b.account(
            Instant::from_millis(250),
            Work {
                busy: ms(4),
                handling: ms(4),
                rejecting: ms(4),
                datagrams: 0,
                rejected_messages: 0,
            },
        );
        assert!(b.allows(Instant::from_millis(260)));
        assert_eq!(b.pauses(), 1);
    }

    #[test]
    fn a_long_idle_gap_carries_nothing() {
        let mut b = budget();
        b.account(
            Instant::from_millis(10),
            Work {
                busy: ms(9),
                handling: ms(9),
                rejecting: ms(9),
                datagrams: 0,
                rejected_messages: 0,
            },
        );
        assert!(b.allows(Instant::from_secs(5)));
        assert_eq!(b.resume_at(), None);
    }

    #[test]
    fn invalid_configs() {
        for share in [0.0, -1.0, 1.5, f64::NAN] {
            let c = BudgetConfig {
                share,
                ..BudgetConfig::default()
            };
            assert!(c.validate().is_err(), "{share}");
        }
        let c = BudgetConfig {
            window: Duration::ZERO,
            ..BudgetConfig::default()
        };
        assert!(c.validate().is_err());
    }
}
