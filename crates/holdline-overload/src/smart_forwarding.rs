//! `smart-forwarding`: the TCP smart-forwarding decision of seed 000 (§VI-B, §VI-D).
//!
//! When holdline forwards a new INVITE to a next hop over TCP, it first looks at the backlog
//! of the connection that will carry it: the bytes the kernel has not sent yet (`SIOCOUTQ`)
//! plus the bytes holdline itself still queues for that connection. If the backlog is not
//! empty, the INVITE is rejected with 503 at once instead of being queued behind it: the
//! excess load is *released* at the sending server rather than pushed back upstream, and the
//! next hop only ever holds the few INVITEs its (minimised) buffers take. The paper's
//! emptiness criterion makes the algorithm parameter-free; `threshold` (default 0 bytes)
//! generalises it, and `hold` (default 0) asks the backlog to have stayed above the threshold
//! in every report for that long, so that a healthy next hop lagging for a moment (a
//! descheduled process, a receive window refilling) gets no 503s while one that stays behind
//! does.
//!
//! ```text
//!                     ┌ backlog(target) > threshold for >= hold ─> 503 (TargetBacklog)
//! new INVITE ─> route ┤
//!                     └ otherwise ──────────────────────────────> write to target's INVITE connection
//! ```
//!
//! Connection split, i.e. which connection's backlog applies:
//!
//! - **ICS** (implicit connection split, [`Split::Implicit`], the default): one connection per
//!   next hop carries everything; new INVITEs are checked against its backlog, every other
//!   request is always forwarded. The driver reports that connection as [`Lane::Shared`].
//!   Seed 000 finds ICS the more conservative (fewer active sessions, lower PDD, no 200 OK
//!   retransmissions at 10 SEs) for about 5 % fewer admitted calls, without needing a second
//!   connection: "a more preferable choice".
//! - **ECS** (explicit connection split, [`Split::Explicit`]): new INVITEs go on a connection
//!   of their own to the next hop ([`Lane::Invite`]), everything else on another
//!   ([`Lane::Other`]); only the INVITE connection's backlog counts.
//!
//! Reports for a lane the mode does not check are ignored. Each target's backlog is separate
//! state: one slow next hop rejects only its own INVITEs (the OpenSIPS flaw of seed 000
//! §VIII-D was a blocking send that stalled every next hop). Buffer minimisation (small socket
//! buffers on the INVITE path) is the IO layer's part; this module only decides.
//!
//! Input: [`Signal::Backlog`], [`Signal::TargetGone`]. Gate:
//! [`Gate::Forward`](crate::Gate::Forward), with the target.

use std::collections::BTreeMap;

use holdline_base::{Duration, Instant, Rng};

use crate::admission::{Admission, Decision, RejectReason, TargetId};
use crate::algorithm::{Algorithm, ConfigError};
use crate::common::{Counters, decides};
use crate::controller::{Controller, ControllerFactory};
use crate::signal::{Lane, Signal};
use crate::snapshot::Snapshot;

/// Which connection carries new INVITEs to a next hop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Split {
    /// ICS: one connection per next hop ([`Lane::Shared`]); INVITEs checked against it.
    #[default]
    Implicit,
    /// ECS: a dedicated INVITE connection per next hop ([`Lane::Invite`]).
    Explicit,
}

impl Split {
    /// The lane whose backlog decides.
    pub const fn invite_lane(self) -> Lane {
        match self {
            Self::Implicit => Lane::Shared,
            Self::Explicit => Lane::Invite,
        }
    }
}

/// The configuration of [`SmartForwarding`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SmartForwardingConfig {
    /// ICS or ECS. Default ICS.
    pub split: Split,
    /// Reject a new INVITE when the target's backlog (unsent + queued bytes) exceeds this.
    /// Default 0: reject whenever the backlog is not empty, as in the paper.
    pub threshold: u64,
    /// How long the backlog must have been above `threshold` (in every report since) before
    /// INVITEs are rejected. Default 0: at once, as in the paper.
    pub hold: Duration,
    /// `Retry-After` for the 503s. Default `None`.
    pub retry_after: Option<Duration>,
}

impl ControllerFactory for SmartForwardingConfig {
    fn algorithm(&self) -> Algorithm {
        Algorithm::SmartForwarding
    }

    fn validate(&self) -> Result<(), ConfigError> {
        Ok(())
    }

    fn build(&self, now: Instant, rng: Rng) -> Result<Box<dyn Controller>, ConfigError> {
        Ok(Box::new(SmartForwarding::new(self.clone(), now, rng)?))
    }
}

/// TCP smart forwarding: per-target backlog check for new INVITEs.
#[derive(Clone, Debug)]
pub struct SmartForwarding {
    config: SmartForwardingConfig,
    /// Backlog in bytes of each target whose INVITE connection is not empty, and since when
    /// it has been above the threshold (`None`: not now). An empty backlog removes the entry,
    /// so the map holds at most one entry per open connection (which the IO layer bounds).
    backlog: BTreeMap<TargetId, (u64, Option<Instant>)>,
    counters: Counters,
}

impl SmartForwarding {
    /// A controller with `config`.
    pub fn new(
        config: SmartForwardingConfig,
        _now: Instant,
        _rng: Rng,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            config,
            backlog: BTreeMap::new(),
            counters: Counters::default(),
        })
    }

    /// The last reported backlog of `target`'s INVITE-carrying connection, in bytes.
    pub fn backlog(&self, target: TargetId) -> u64 {
        self.backlog.get(&target).map_or(0, |&(bytes, _)| bytes)
    }

    /// Since when `target`'s backlog has been above the threshold, if it is.
    pub fn above_since(&self, target: TargetId) -> Option<Instant> {
        self.backlog.get(&target).and_then(|&(_, since)| since)
    }
}

impl Controller for SmartForwarding {
    fn algorithm(&self) -> Algorithm {
        Algorithm::SmartForwarding
    }

    fn admit(&mut self, now: Instant, req: &Admission) -> Decision {
        if !decides(self.gate(), req) {
            return Decision::Admit;
        }
        let Some(target) = req.target else {
            // Nothing to check against: the driver asked before routing.
            return Decision::Admit;
        };
        let held = self
            .above_since(target)
            .is_some_and(|since| now.saturating_duration_since(since) >= self.config.hold);
        if held {
            self.counters
                .reject(RejectReason::TargetBacklog, self.config.retry_after)
        } else {
            self.counters.admit()
        }
    }

    fn on_signal(&mut self, now: Instant, signal: Signal) {
        match signal {
            Signal::Backlog {
                target,
                lane,
                unsent,
                queued,
            } if lane == self.config.split.invite_lane() => {
                let bytes = unsent.saturating_add(queued);
                if bytes == 0 {
                    self.backlog.remove(&target);
                } else {
                    let above = bytes > self.config.threshold;
                    let was = self.above_since(target);
                    let since = if above {
                        Some(was.unwrap_or(now))
                    } else {
                        None
                    };
                    self.backlog.insert(target, (bytes, since));
                }
            }
            Signal::TargetGone(target) => {
                self.backlog.remove(&target);
            }
            _ => {}
        }
    }

    fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot::new(Algorithm::SmartForwarding);
        s.backlogged_targets = Some(self.backlog.len());
        s.admitted = self.counters.admitted;
        s.rejected = self.counters.rejected;
        s
    }
}
