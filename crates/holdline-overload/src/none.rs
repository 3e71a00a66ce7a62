//! `none`: no control. Every message is admitted; the server's bounded queue drops what it
//! cannot hold (drop-tail), which is not this crate's job.
//!
//! This is seed 003's "No Control" (drop-tail, buffer of 100) and seed 000's default
//! configuration: the baseline that collapses under overload.

use holdline_base::{Instant, Rng};

use crate::admission::{Admission, Decision};
use crate::algorithm::{Algorithm, ConfigError};
use crate::common::{Counters, decides};
use crate::controller::{Controller, ControllerFactory};
use crate::signal::Signal;
use crate::snapshot::Snapshot;

/// The configuration of [`NoControl`] (it has no parameters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoControlConfig;

impl ControllerFactory for NoControlConfig {
    fn algorithm(&self) -> Algorithm {
        Algorithm::NoControl
    }

    fn validate(&self) -> Result<(), ConfigError> {
        Ok(())
    }

    fn build(&self, _now: Instant, _rng: Rng) -> Result<Box<dyn Controller>, ConfigError> {
        Ok(Box::new(NoControl::default()))
    }
}

/// Admits everything, counting the new INVITEs it sees at the ingress gate.
#[derive(Clone, Debug, Default)]
pub struct NoControl {
    counters: Counters,
}

impl Controller for NoControl {
    fn algorithm(&self) -> Algorithm {
        Algorithm::NoControl
    }

    fn admit(&mut self, _now: Instant, req: &Admission) -> Decision {
        if decides(self.gate(), req) {
            return self.counters.admit();
        }
        Decision::Admit
    }

    fn on_signal(&mut self, _now: Instant, _signal: Signal) {}

    fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot::new(Algorithm::NoControl);
        s.admitted = self.counters.admitted;
        s.rejected = self.counters.rejected;
        s
    }
}
