//! `queue-limit` and `bang-bang`: reject new INVITEs while the server's inbound queue is full.
//!
//! - **503 on a full queue** (`resume == limit`): a new INVITE is rejected when the last
//!   reported queue length is at or above `limit`. Seed 003 compares this with no control and
//!   OCC: it sheds load explicitly instead of silently dropping (drop-tail makes clients
//!   retransmit), but it starts rejecting only when the queue is already full.
//! - **Bang-bang** (`resume < limit`, seed 003 §2.1, its ref. 9, Ohta): start rejecting when
//!   the queue reaches the high threshold `limit`, stop when it falls below the low threshold
//!   `resume`. The hysteresis keeps control from toggling on every message.
//!
//! Input: [`Signal::QueueLength`]. Gate: [`Gate::Ingress`](crate::Gate::Ingress).

use holdline_base::{Duration, Instant, Rng};

use crate::admission::{Admission, Decision, RejectReason};
use crate::algorithm::{Algorithm, ConfigError};
use crate::common::{Counters, decides};
use crate::controller::{Controller, ControllerFactory};
use crate::signal::Signal;
use crate::snapshot::Snapshot;

/// The configuration of [`QueueLimit`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueLimitConfig {
    /// Reject new INVITEs once the reported queue length is at or above this (at least one).
    /// Default 100 (seed 003's buffer size), in whatever unit the driver reports (messages in
    /// the server's inbound queue).
    pub limit: usize,
    /// Once rejecting, go on until the queue length falls below this. `resume == limit` is
    /// plain 503-on-full-queue; `resume < limit` is bang-bang control. Must be in
    /// `1..=limit`. Default 100 (equal to `limit`).
    pub resume: usize,
    /// `Retry-After` for the 503s. Default `None`.
    pub retry_after: Option<Duration>,
}

impl Default for QueueLimitConfig {
    fn default() -> Self {
        Self {
            limit: 100,
            resume: 100,
            retry_after: None,
        }
    }
}

impl QueueLimitConfig {
    /// Bang-bang defaults: reject from 100 queued messages on, until fewer than 50 are queued.
    /// (Seed 003 names the algorithm but not its thresholds: these are holdline's choice,
    /// the high one being the seed's buffer size.)
    pub fn bang_bang_default() -> Self {
        Self {
            limit: 100,
            resume: 50,
            retry_after: None,
        }
    }
}

impl ControllerFactory for QueueLimitConfig {
    fn algorithm(&self) -> Algorithm {
        if self.resume < self.limit {
            Algorithm::BangBang
        } else {
            Algorithm::QueueLimit
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.limit == 0 {
            return Err(ConfigError::OutOfRange {
                field: "limit",
                value: 0.0,
                expected: "at least 1",
            });
        }
        if self.resume == 0 {
            return Err(ConfigError::OutOfRange {
                field: "resume",
                value: 0.0,
                expected: "at least 1",
            });
        }
        if self.resume > self.limit {
            return Err(ConfigError::Inverted {
                low_field: "resume",
                low: self.resume as u64,
                high_field: "limit",
                high: self.limit as u64,
            });
        }
        Ok(())
    }

    fn build(&self, now: Instant, rng: Rng) -> Result<Box<dyn Controller>, ConfigError> {
        Ok(Box::new(QueueLimit::new(self.clone(), now, rng)?))
    }
}

/// 503 on a full queue, or bang-bang control with hysteresis.
#[derive(Clone, Debug)]
pub struct QueueLimit {
    config: QueueLimitConfig,
    algorithm: Algorithm,
    len: Option<usize>,
    rejecting: bool,
    counters: Counters,
}

impl QueueLimit {
    /// A controller with a validated `config`.
    pub fn new(config: QueueLimitConfig, _now: Instant, _rng: Rng) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            algorithm: config.algorithm(),
            config,
            len: None,
            rejecting: false,
            counters: Counters::default(),
        })
    }

    /// Whether new INVITEs are being rejected now.
    pub fn is_rejecting(&self) -> bool {
        self.rejecting
    }
}

impl Controller for QueueLimit {
    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    fn admit(&mut self, _now: Instant, req: &Admission) -> Decision {
        if !decides(self.gate(), req) {
            return Decision::Admit;
        }
        if self.rejecting {
            self.counters
                .reject(RejectReason::QueueFull, self.config.retry_after)
        } else {
            self.counters.admit()
        }
    }

    fn on_signal(&mut self, _now: Instant, signal: Signal) {
        if let Signal::QueueLength(len) = signal {
            self.len = Some(len);
            if len >= self.config.limit {
                self.rejecting = true;
            } else if len < self.config.resume {
                self.rejecting = false;
            }
        }
    }

    fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot::new(self.algorithm);
        s.queue_length = self.len;
        s.admitted = self.counters.admitted;
        s.rejected = self.counters.rejected;
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(limit: usize, resume: usize) -> Option<QueueLimit> {
        let config = QueueLimitConfig {
            limit,
            resume,
            retry_after: None,
        };
        QueueLimit::new(config, Instant::ZERO, Rng::seed_from_u64(0)).ok()
    }

    fn rejects(c: &mut QueueLimit) -> bool {
        !c.admit(Instant::ZERO, &Admission::new_invite()).is_admit()
    }

    #[test]
    fn rejects_exactly_when_full() {
        let Some(mut c) = build(10, 10) else {
            panic!("valid config")
        };
        assert_eq!(c.algorithm(), Algorithm::QueueLimit);
        assert!(!rejects(&mut c), "no report yet: admit");
        for len in [0, 5, 9, 10, 11, 100, 9, 0, 10, 3] {
            c.on_signal(Instant::ZERO, Signal::QueueLength(len));
            assert_eq!(rejects(&mut c), len >= 10, "len {len}");
        }
        let s = c.snapshot();
        assert_eq!(s.rejected.get(RejectReason::QueueFull), 4);
        assert_eq!(s.admitted, 7);
        assert_eq!(s.queue_length, Some(3));
    }

    #[test]
    fn bang_bang_has_hysteresis() {
        let Some(mut c) = build(10, 5) else {
            panic!("valid config")
        };
        assert_eq!(c.algorithm(), Algorithm::BangBang);
        let steps = [
            (3, false),
            (9, false),
            (10, true),
            (7, true),
            (5, true),
            (4, false),
            (8, false),
            (12, true),
            (0, false),
        ];
        for (len, rejecting) in steps {
            c.on_signal(Instant::ZERO, Signal::QueueLength(len));
            assert_eq!(rejects(&mut c), rejecting, "len {len}");
        }
    }

    #[test]
    fn invalid_thresholds() {
        assert!(build(0, 0).is_none());
        assert!(build(10, 0).is_none());
        assert!(build(10, 11).is_none());
    }
}
