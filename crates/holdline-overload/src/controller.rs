//! The two traits every algorithm implements.

use core::fmt::Debug;

use holdline_base::{Instant, Rng};

use crate::admission::{Admission, Decision, Gate, TargetId};
use crate::algorithm::{Algorithm, ConfigError};
use crate::signal::{Feedback, Signal};
use crate::snapshot::{Snapshot, TargetSnapshot};

/// An admission / overload controller: a pure state machine, one instance per worker (or per
/// simulated node).
///
/// # Contract
///
/// - [`admit`](Self::admit) returns [`Decision::Admit`] for every message whose class is not
///   [rejectable](crate::Class::is_rejectable) (new INVITEs, new registrations, refreshes), in
///   every state, and for every question asked at a gate other than the controller's own
///   [`gate`](Self::gate). Rejections are always `503`. A probabilistic controller gives a
///   class [`draws`](crate::Class::draws) chances (refreshes before new work).
/// - `now` never goes backwards; a smaller `now` than before is treated as no time passing.
/// - Interval-driven controllers ask to be woken with [`poll_timeout`](Self::poll_timeout);
///   the driver calls [`handle_timeout`](Self::handle_timeout) when that instant has come.
///   Only `handle_timeout` closes a measurement interval: signals given before
///   `handle_timeout(now)` count in the interval that ends at `now` (a driver reports the busy
///   time of its loop iteration, then handles timeouts). A late call makes that interval
///   longer (measurements are normalised by its real length); it never loses one.
/// - No method panics on any input.
pub trait Controller: Debug + Send {
    /// Which algorithm this is.
    fn algorithm(&self) -> Algorithm;

    /// The gate this controller decides at; at the other gate it admits everything.
    fn gate(&self) -> Gate {
        self.algorithm().gate()
    }

    /// Decides whether a message may go on.
    fn admit(&mut self, now: Instant, req: &Admission) -> Decision;

    /// Takes a load signal or event.
    fn on_signal(&mut self, now: Instant, signal: Signal);

    /// When the controller next needs [`handle_timeout`](Self::handle_timeout), if ever.
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// Runs what was due at or before `now` (e.g. the end of a measurement interval).
    fn handle_timeout(&mut self, now: Instant) {
        let _ = now;
    }

    /// The overload feedback this controller, in a server role, wants sent to the upstream
    /// neighbour `upstream` in the next response going there (RFC 7339's `oc` Via parameters,
    /// RFC 7415's rate, an explicit window). `None`: nothing to send (every implemented
    /// controller; the planned server roles will answer here).
    fn feedback(&mut self, now: Instant, upstream: TargetId) -> Option<Feedback> {
        let _ = (now, upstream);
        None
    }

    /// The controller's state for metrics.
    fn snapshot(&self) -> Snapshot;

    /// Appends the state of every target the controller keeps state for (per-target metrics;
    /// DEOC). Default: none.
    fn target_snapshots(&self, out: &mut Vec<TargetSnapshot>) {
        let _ = out;
    }
}

/// Builds controllers of one algorithm from one validated configuration (quinn's
/// `ControllerFactory` pattern): the server keeps one factory and builds one controller per
/// worker, the simulator one per node.
pub trait ControllerFactory: Debug + Send + Sync {
    /// Which algorithm this builds.
    fn algorithm(&self) -> Algorithm;

    /// Checks the configuration (the server calls it when loading its configuration, so that
    /// building per worker cannot fail later).
    fn validate(&self) -> Result<(), ConfigError>;

    /// A new controller starting at `now`, drawing its randomness from `rng` (give each worker
    /// its own seed for independent draws, a fixed one for reproducible runs).
    fn build(&self, now: Instant, rng: Rng) -> Result<Box<dyn Controller>, ConfigError>;
}
