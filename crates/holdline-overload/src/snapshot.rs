//! What a controller exposes for metrics.

use core::ops::AddAssign;

use holdline_base::Duration;

use crate::admission::{RejectReason, TargetId};
use crate::algorithm::Algorithm;

/// Rejections counted by [`RejectReason`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RejectCounts([u64; RejectReason::COUNT]);

impl RejectCounts {
    /// The count for one reason.
    pub const fn get(&self, reason: RejectReason) -> u64 {
        self.0[reason.index()]
    }

    /// Adds one rejection for `reason`.
    pub const fn record(&mut self, reason: RejectReason) {
        let slot = &mut self.0[reason.index()];
        *slot = slot.saturating_add(1);
    }

    /// All rejections, whatever the reason.
    pub fn total(&self) -> u64 {
        self.0.iter().fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// `(reason, count)` for every reason, including zero counts (stable metric series).
    pub fn iter(&self) -> impl Iterator<Item = (RejectReason, u64)> + '_ {
        RejectReason::ALL.iter().map(|r| (*r, self.get(*r)))
    }
}

impl AddAssign<&Self> for RejectCounts {
    /// Sums counts, e.g. over workers.
    fn add_assign(&mut self, rhs: &Self) {
        for (a, b) in self.0.iter_mut().zip(rhs.0.iter()) {
            *a = a.saturating_add(*b);
        }
    }
}

/// A controller's state for metrics and logs ([`Controller::snapshot`](crate::Controller::snapshot)).
///
/// Counters only count decisions the controller took: new INVITEs asked about at its own
/// [`Gate`](crate::Gate). Fields that do not apply to an algorithm are `None`.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Snapshot {
    /// Which algorithm this is (the metrics label).
    pub algorithm: Algorithm,
    /// The current acceptance fraction `f`: the probability that a new INVITE is admitted
    /// (OCC, queue delay). `None` for deterministic controllers.
    pub acceptance: Option<f64>,
    /// The occupancy measured over the last completed interval, in `[0, 1]`.
    pub occupancy: Option<f64>,
    /// The queueing delay measured over the last completed interval (the mean of its
    /// samples).
    pub queue_delay: Option<Duration>,
    /// The last queue length reported.
    pub queue_length: Option<usize>,
    /// Targets whose INVITE-carrying connection currently has a non-empty backlog.
    pub backlogged_targets: Option<usize>,
    /// Next hops whose overload-control feedback is currently throttling new INVITEs (RFC
    /// 7339 / RFC 7415 clients).
    pub throttled_targets: Option<usize>,
    /// Completed measurement intervals (control updates) so far.
    pub intervals: u64,
    /// New INVITEs admitted.
    pub admitted: u64,
    /// New INVITEs rejected, by reason.
    pub rejected: RejectCounts,
}

impl Snapshot {
    /// An empty snapshot for `algorithm`: no measurement, no decision yet.
    pub const fn new(algorithm: Algorithm) -> Self {
        Self {
            algorithm,
            acceptance: None,
            occupancy: None,
            queue_delay: None,
            queue_length: None,
            backlogged_targets: None,
            throttled_targets: None,
            intervals: 0,
            admitted: 0,
            rejected: RejectCounts([0; RejectReason::COUNT]),
        }
    }

    /// Admitted plus rejected new INVITEs.
    pub fn decisions(&self) -> u64 {
        self.admitted.saturating_add(self.rejected.total())
    }
}

/// One target's state in a controller that keeps state per target (DEOC, seed 004's
/// window), for per-target metrics ([`Controller::target_snapshots`](crate::Controller::target_snapshots)).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TargetSnapshot {
    /// The target (the driver's number for it).
    pub target: TargetId,
    /// The controller's state for it, as a metrics label (e.g. `overload_recovery`).
    pub state: &'static str,
    /// The admission rate in force (calls/s); `None` while not limiting.
    pub rate: Option<f64>,
    /// The measured arrival rate (calls/s), if measured.
    pub arrival_rate: Option<f64>,
    /// New INVITEs admitted towards it in all.
    pub admitted: u64,
    /// New INVITEs the controller rejected towards it in all.
    pub restricted: u64,
    /// Overload signals received from it (503s) in all.
    pub rejections: u64,
    /// Timeouts received from it in all.
    pub timeouts: u64,
    /// A window's size (seed 004's `W`), if the controller keeps one.
    pub window: Option<f64>,
    /// New INVITEs sent to it and not yet answered there, if counted.
    pub outstanding: Option<u32>,
    /// The average transaction delay the controller judges (seconds), once measured.
    pub delay: Option<f64>,
    /// Cuts of its window (or rate) in all.
    pub cuts: u64,
}

impl TargetSnapshot {
    /// A snapshot of `target` in `state`, with no count yet.
    pub const fn new(target: TargetId, state: &'static str) -> Self {
        Self {
            target,
            state,
            rate: None,
            arrival_rate: None,
            admitted: 0,
            restricted: 0,
            rejections: 0,
            timeouts: 0,
            window: None,
            outstanding: None,
            delay: None,
            cuts: 0,
        }
    }
}
