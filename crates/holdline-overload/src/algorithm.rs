//! The catalogue of algorithms (implemented and planned), their configurations and errors.

use core::fmt;
use core::str::FromStr;

use holdline_base::{Instant, Rng};

use crate::admission::Gate;
use crate::controller::{Controller, ControllerFactory};
use crate::deoc::DeocConfig;
use crate::hop::{Accept, HopClientConfig};
use crate::none::NoControlConfig;
use crate::occ::OccConfig;
use crate::queue_delay::QueueDelayConfig;
use crate::queue_limit::QueueLimitConfig;
use crate::smart_forwarding::SmartForwardingConfig;
use crate::window::DelayWindowConfig;

/// Every admission / overload control algorithm of holdline's design, by name.
///
/// The names are the configuration values (`overload.local = "occ"`) and the `algorithm`
/// label of the metrics. Variants marked *planned* are part of the interface (their inputs and
/// outputs are below and in [`Signal`](crate::Signal), [`Feedback`](crate::Feedback),
/// [`RejectReason`](crate::RejectReason)) but cannot be built yet:
/// [`ControllerConfig::default_for`] answers [`ConfigError::NotImplemented`].
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Algorithm {
    /// `none`: admit everything. The server's bounded queue then drops the excess (drop-tail),
    /// which is what collapses: the baseline of every overload experiment.
    NoControl,
    /// `queue-limit`: 503 on a full queue. Reject a new INVITE when the reported queue length
    /// ([`Signal::QueueLength`](crate::Signal::QueueLength)) is at or above a limit.
    QueueLimit,
    /// `bang-bang`: the queue limit with hysteresis (seed 003 §2.1, its ref. 9): start
    /// rejecting at a high threshold, stop below a low one. Built from
    /// [`QueueLimitConfig`] with `resume_below < limit`.
    BangBang,
    /// `occ`: occupancy-based control (Cyr et al., as used by Hilt & Widjaja; seed 003 §2.1):
    /// every interval, `f ← clamp(f · min(ρ_target/ρ, φ_max), f_min, 1)`; admit new INVITEs
    /// with probability `f`. Input: [`Busy`](crate::Signal::Busy) or
    /// [`Occupancy`](crate::Signal::Occupancy).
    Occupancy,
    /// `queue-delay`: the same multiplicative update driven by the measured queueing delay
    /// against a target delay (see [`QueueDelayConfig`]). Input:
    /// [`QueueDelay`](crate::Signal::QueueDelay).
    QueueDelay,
    /// `smart-forwarding`: TCP smart forwarding (seed 000 §VI-B/D): reject a new INVITE for a
    /// next hop whose INVITE-carrying connection has a backlog. Input:
    /// [`Backlog`](crate::Signal::Backlog). Decides at [`Gate::Forward`].
    SmartForwarding,
    /// Planned: `loss-server`, RFC 7339 loss-based server role. Inputs: occupancy or queue
    /// delay, as for local control. Output: [`Feedback::Loss`](crate::Feedback::Loss) from
    /// [`Controller::feedback`] for each upstream client that advertised `oc`; it also rejects
    /// locally (at [`Gate::Ingress`]) what non-supporting upstreams send beyond its capacity.
    LossServer,
    /// `loss-client`, RFC 7339 loss-based client role ([`HopClient`](crate::HopClient)).
    /// Inputs: [`Signal::Feedback`](crate::Signal::Feedback) with `Loss` per next hop
    /// (validity, sequence). Decision at [`Gate::Forward`]: reject (reason `LossThrottle`) the
    /// requested percentage of new INVITEs for that target, drawn at random (RFC 7339 §7).
    LossClient,
    /// Planned: `rate-server`, RFC 7415 rate-based server role. Inputs: queue delay and
    /// occupancy. Output: [`Feedback::Rate`](crate::Feedback::Rate) per upstream client.
    RateServer,
    /// `rate-client`, RFC 7415 rate-based client role ([`HopClient`](crate::HopClient)).
    /// Inputs: `Feedback::Rate` per next hop. Decision at [`Gate::Forward`]: a leaky bucket
    /// per target driven by `now` (reason `RateThrottle`).
    RateClient,
    /// Planned as a controller of its own: `window-server`, window-based control with explicit
    /// feedback (Shen et al.). Today the driver answers windows from
    /// [`HopServer::window`](crate::HopServer::window). Output:
    /// [`Feedback::Window`](crate::Feedback::Window).
    WindowServer,
    /// `window-client`, window-based control with explicit feedback, sending side
    /// ([`HopClient`](crate::HopClient) with [`Accept::window`]). Inputs: `Feedback::Window`,
    /// [`Forwarded`](crate::Signal::Forwarded), [`Released`](crate::Signal::Released).
    /// Decision at [`Gate::Forward`]: admit while the target's unanswered new INVITEs are
    /// below its window (reason `WindowFull`).
    WindowClient,
    /// `delay-window`, the window without explicit feedback of seed 004
    /// ([`DelayWindow`](crate::DelayWindow)): per target, a window of active transactions; on each completion, if the mean
    /// of recent transaction delays ≥ `Z_th + ε·δ` the window drops to 1 and `WIN_th` halves,
    /// else it grows by 1 below `WIN_th` and by `1/W` above. Inputs: `Forwarded`, `Completed`
    /// (delay, outcome). Decision at [`Gate::Forward`] (reason `WindowFull`).
    DelayWindow,
    /// `deoc`, distributed end-to-end overload control at the ingress edge (seed 003 §3–4,
    /// [`Deoc`](crate::Deoc)): per target edge server, an EWMA of call inter-arrival times
    /// (the `admit` calls themselves), a rate-adaptation controller every `T` (eq. 12's
    /// increase `r₀ + [(1−k)αn]^(1/(1−k))` without rejections, `r ← r − βr` with; k = 1/2,
    /// α = 0.2, β = 1/8, T = 1 s, the three-state machine and the overload factor), and a
    /// call-gapping restrictor (`τ = max(0, 1/r − 1/λ)`). Inputs: `Completed` with
    /// `Final(503)` or a timeout as the rejection signal. Decision at [`Gate::Forward`]
    /// (reason `CallGap`).
    Deoc,
}

impl Algorithm {
    /// Every algorithm, implemented first.
    pub const ALL: [Self; 14] = [
        Self::NoControl,
        Self::QueueLimit,
        Self::BangBang,
        Self::Occupancy,
        Self::QueueDelay,
        Self::SmartForwarding,
        Self::LossClient,
        Self::RateClient,
        Self::DelayWindow,
        Self::LossServer,
        Self::RateServer,
        Self::WindowServer,
        Self::WindowClient,
        Self::Deoc,
    ];

    /// The configuration and metrics name, e.g. `occ`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NoControl => "none",
            Self::QueueLimit => "queue-limit",
            Self::BangBang => "bang-bang",
            Self::Occupancy => "occ",
            Self::QueueDelay => "queue-delay",
            Self::SmartForwarding => "smart-forwarding",
            Self::LossServer => "loss-server",
            Self::LossClient => "loss-client",
            Self::RateServer => "rate-server",
            Self::RateClient => "rate-client",
            Self::WindowServer => "window-server",
            Self::WindowClient => "window-client",
            Self::DelayWindow => "delay-window",
            Self::Deoc => "deoc",
        }
    }

    /// Whether a controller of this algorithm can be built.
    pub const fn is_implemented(self) -> bool {
        matches!(
            self,
            Self::NoControl
                | Self::QueueLimit
                | Self::BangBang
                | Self::Occupancy
                | Self::QueueDelay
                | Self::SmartForwarding
                | Self::LossClient
                | Self::RateClient
                | Self::WindowClient
                | Self::DelayWindow
                | Self::Deoc
        )
    }

    /// Where the algorithm decides: local control and the server roles on receipt, the
    /// sending-side schemes just before forwarding.
    pub const fn gate(self) -> Gate {
        match self {
            Self::NoControl
            | Self::QueueLimit
            | Self::BangBang
            | Self::Occupancy
            | Self::QueueDelay
            | Self::LossServer
            | Self::RateServer
            | Self::WindowServer => Gate::Ingress,
            Self::SmartForwarding
            | Self::LossClient
            | Self::RateClient
            | Self::WindowClient
            | Self::DelayWindow
            | Self::Deoc => Gate::Forward,
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An algorithm name that is not one of [`Algorithm::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown overload control algorithm `{0}` (known: none, queue-limit, bang-bang, occ, queue-delay, smart-forwarding, loss-server, loss-client, rate-server, rate-client, window-server, window-client, delay-window, deoc)"
)]
pub struct UnknownAlgorithm(pub String);

impl FromStr for Algorithm {
    type Err = UnknownAlgorithm;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .iter()
            .copied()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| UnknownAlgorithm(s.to_owned()))
    }
}

/// A configuration that cannot build a controller.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// A numeric parameter is outside its valid range (NaN included).
    #[error("overload: {field} = {value} is out of range ({expected})")]
    OutOfRange {
        /// The field, e.g. `target_occupancy`.
        field: &'static str,
        /// The value given.
        value: f64,
        /// The valid range, in words.
        expected: &'static str,
    },
    /// A duration that must be positive is zero.
    #[error("overload: {field} must be longer than zero")]
    ZeroDuration {
        /// The field, e.g. `interval`.
        field: &'static str,
    },
    /// Two thresholds are in the wrong order.
    #[error("overload: {low_field} ({low}) must not exceed {high_field} ({high})")]
    Inverted {
        /// The field that must be the smaller.
        low_field: &'static str,
        /// Its value.
        low: u64,
        /// The field that must be the larger.
        high_field: &'static str,
        /// Its value.
        high: u64,
    },
    /// The algorithm is part of the interface but not implemented yet.
    #[error("overload control algorithm `{0}` is planned but not implemented yet")]
    NotImplemented(Algorithm),
}

/// The configuration of any implemented controller: what the server's TOML configuration is
/// converted into. It is itself a [`ControllerFactory`].
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub enum ControllerConfig {
    /// [`Algorithm::NoControl`].
    NoControl(NoControlConfig),
    /// [`Algorithm::QueueLimit`] or [`Algorithm::BangBang`].
    QueueLimit(QueueLimitConfig),
    /// [`Algorithm::Occupancy`].
    Occupancy(OccConfig),
    /// [`Algorithm::QueueDelay`].
    QueueDelay(QueueDelayConfig),
    /// [`Algorithm::SmartForwarding`].
    SmartForwarding(SmartForwardingConfig),
    /// [`Algorithm::LossClient`] or [`Algorithm::RateClient`] (one client applies either
    /// answer; see [`HopClientConfig::accept`]).
    HopClient(HopClientConfig),
    /// [`Algorithm::DelayWindow`].
    DelayWindow(DelayWindowConfig),
    /// [`Algorithm::Deoc`].
    Deoc(DeocConfig),
}

impl ControllerConfig {
    /// The default configuration of `algorithm`, or [`ConfigError::NotImplemented`].
    pub fn default_for(algorithm: Algorithm) -> Result<Self, ConfigError> {
        match algorithm {
            Algorithm::NoControl => Ok(Self::NoControl(NoControlConfig)),
            Algorithm::QueueLimit => Ok(Self::QueueLimit(QueueLimitConfig::default())),
            Algorithm::BangBang => Ok(Self::QueueLimit(QueueLimitConfig::bang_bang_default())),
            Algorithm::Occupancy => Ok(Self::Occupancy(OccConfig::default())),
            Algorithm::QueueDelay => Ok(Self::QueueDelay(QueueDelayConfig::default())),
            Algorithm::SmartForwarding => {
                Ok(Self::SmartForwarding(SmartForwardingConfig::default()))
            }
            Algorithm::LossClient => Ok(Self::HopClient(HopClientConfig {
                accept: Accept::LOSS,
                ..HopClientConfig::default()
            })),
            Algorithm::RateClient => Ok(Self::HopClient(HopClientConfig {
                accept: Accept::RATE,
                ..HopClientConfig::default()
            })),
            Algorithm::WindowClient => Ok(Self::HopClient(HopClientConfig {
                accept: Accept::WINDOW,
                ..HopClientConfig::default()
            })),
            Algorithm::DelayWindow => Ok(Self::DelayWindow(DelayWindowConfig::default())),
            Algorithm::Deoc => Ok(Self::Deoc(DeocConfig::default())),
            other => Err(ConfigError::NotImplemented(other)),
        }
    }

    fn factory(&self) -> &dyn ControllerFactory {
        match self {
            Self::NoControl(c) => c,
            Self::QueueLimit(c) => c,
            Self::Occupancy(c) => c,
            Self::QueueDelay(c) => c,
            Self::SmartForwarding(c) => c,
            Self::HopClient(c) => c,
            Self::DelayWindow(c) => c,
            Self::Deoc(c) => c,
        }
    }
}

impl Default for ControllerConfig {
    /// Local control is on by default: OCC with its defaults.
    fn default() -> Self {
        Self::Occupancy(OccConfig::default())
    }
}

impl ControllerFactory for ControllerConfig {
    fn algorithm(&self) -> Algorithm {
        self.factory().algorithm()
    }

    fn validate(&self) -> Result<(), ConfigError> {
        self.factory().validate()
    }

    fn build(&self, now: Instant, rng: Rng) -> Result<Box<dyn Controller>, ConfigError> {
        self.factory().build(now, rng)
    }
}

/// Checks `lo <= value <= hi` (false for NaN).
pub(crate) fn check_range(
    field: &'static str,
    value: f64,
    lo: f64,
    hi: f64,
    expected: &'static str,
) -> Result<(), ConfigError> {
    if value >= lo && value <= hi {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            field,
            value,
            expected,
        })
    }
}

/// Checks `n ≥ 1` (a table bound, a count).
pub(crate) fn check_nonzero(field: &'static str, n: usize) -> Result<(), ConfigError> {
    if n == 0 {
        Err(ConfigError::OutOfRange {
            field,
            value: 0.0,
            expected: "at least 1",
        })
    } else {
        Ok(())
    }
}

/// Checks `d > 0`.
pub(crate) fn check_positive(
    field: &'static str,
    d: holdline_base::Duration,
) -> Result<(), ConfigError> {
    if d.is_zero() {
        Err(ConfigError::ZeroDuration { field })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for a in Algorithm::ALL {
            assert_eq!(a.as_str().parse::<Algorithm>(), Ok(a));
        }
        assert!("OCC".parse::<Algorithm>().is_err());
    }

    #[test]
    fn planned_algorithms_are_not_buildable() {
        for a in Algorithm::ALL {
            let config = ControllerConfig::default_for(a);
            if a.is_implemented() {
                let config = config.unwrap_or_default();
                assert_eq!(config.validate(), Ok(()), "{a}");
                let built = config.build(Instant::ZERO, Rng::seed_from_u64(1));
                assert!(built.is_ok(), "{a}");
                if let Ok(c) = built {
                    assert_eq!(c.algorithm(), a);
                    assert_eq!(c.gate(), a.gate());
                }
            } else {
                assert_eq!(config, Err(ConfigError::NotImplemented(a)));
            }
        }
    }
}
