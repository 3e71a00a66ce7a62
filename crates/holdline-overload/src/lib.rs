//! holdline's admission and overload controllers, sans-IO.
//!
//! One interface for every controller of holdline's design: local control (no control, 503 on
//! a full queue, bang-bang, occupancy-based OCC, queueing-delay-based), TCP smart forwarding,
//! RFC 7339 loss-based and RFC 7415 rate-based control (client roles; the server roles and
//! window-based control with explicit feedback are declared, not implemented yet), the
//! delay-based window without feedback of seed 004, DEOC's per-target edge control
//! (seed 003, [`deoc`], optionally driven by load reports from the cores), and per-upstream
//! max-min fair admission behind a local controller ([`fair`], seed 003's future work).
//!
//! # Design
//!
//! quinn's congestion-control pattern: a [`Controller`] trait, and a [`ControllerFactory`]
//! (a validated configuration) per algorithm that builds one controller per worker or per
//! simulated node. A controller is a pure state machine: it never reads a clock, draws system
//! randomness or touches a socket. The driver — the server's IO layer, or the simulator's CPU
//! and network models — measures load and passes it in as [`Signal`]s, asks
//! [`Controller::admit`] at the two [`Gate`]s, and wakes interval-driven controllers at
//! [`Controller::poll_timeout`].
//!
//! ```text
//!      driver (server IO layer / simulator)
//!        │ Busy, Occupancy,          │ admit(now, Admission{class, gate, target})
//!        │ QueueLength, QueueDelay,  │      -> Admit | Reject{503, Retry-After?, reason}
//!        │ Backlog, Feedback,        │ poll_timeout() / handle_timeout(now)
//!        │ Forwarded, Completed      │ feedback(now, upstream) -> Option<Feedback>
//!        v                           v snapshot() -> acceptance, occupancy, rejections
//!   ┌───────────────────────────────────────────────────────────────┐
//!   │ Box<dyn Controller>  built by  ControllerConfig / *Config     │
//!   │   NoControl · QueueLimit (bang-bang) · Occ · QueueDelay       │  at Gate::Ingress
//!   │   SmartForwarding (ICS / ECS) · HopClient · DelayWindow       │  at Gate::Forward
//!   │   Deoc (per target edge, seed 003)                            │
//!   └───────────────────────────────────────────────────────────────┘
//! ```
//!
//! # The contract every controller keeps
//!
//! Only new work can be rejected — a new INVITE ([`Class::NewInvite`]), a REGISTER adding a
//! binding ([`Class::NewRegistration`]) or renewing one ([`Class::Refresh`], given more
//! chances) — always with `503`, and only at the controller's own gate. Requests of admitted
//! calls (ACK, BYE, CANCEL, anything with a To tag), other requests, and every response are
//! admitted in every state. The
//! invariant test suite (`tests/invariants.rs`) runs every implemented algorithm through
//! overload and hostile inputs and checks this.
//!
//! # Time and randomness
//!
//! Time is [`holdline_base::Instant`], given by the caller; a simulation starts at
//! [`Instant::ZERO`](holdline_base::Instant::ZERO) and tests advance it by hand. Probabilistic
//! admission draws from the [`holdline_base::Rng`] given to
//! [`ControllerFactory::build`]: the same seed and the same inputs give the same decisions.
#![forbid(unsafe_code)]

mod admission;
mod algorithm;
pub mod budget;
mod common;
mod controller;
pub mod defer;
pub mod deoc;
pub mod fair;
pub mod flood;
pub mod fuzzing;
pub mod hop;
pub mod none;
pub mod occ;
pub mod offered;
pub mod queue_delay;
pub mod queue_limit;
mod signal;
pub mod smart_forwarding;
mod snapshot;
pub mod window;

pub use admission::{
    Admission, Class, Decision, Gate, RejectReason, Rejection, SERVICE_UNAVAILABLE, TargetId,
};
pub use algorithm::{Algorithm, ConfigError, ControllerConfig, UnknownAlgorithm};
pub use budget::{BudgetConfig, RejectionBudget, Work};
pub use controller::{Controller, ControllerFactory};
pub use defer::{DeferConfig, DeferFairness, DeferQueue, DeferStats, Release};
pub use deoc::{
    Deoc, DeocConfig, DeocReply, DeocSignal, DeocState, DeocTarget, IncreaseLaw, LoadReport,
    RESTRICTOR_STATUSES,
};
pub use fair::{FairShare, FairShareConfig, FairUpstream, max_min_share};
pub use flood::{FloodConfig, FloodGuard, FloodStats, Verdict};
pub use hop::{
    Accept, HopClient, HopClientConfig, HopMeasure, HopServer, HopServerConfig, TargetControl,
    loss_percent, rate_share,
};
pub use none::{NoControl, NoControlConfig};
pub use occ::{Occ, OccConfig};
pub use offered::OfferedRate;
pub use queue_delay::{QueueDelay, QueueDelayConfig};
pub use queue_limit::{QueueLimit, QueueLimitConfig};
pub use signal::{Feedback, Lane, Outcome, Signal};
pub use smart_forwarding::{SmartForwarding, SmartForwardingConfig, Split};
pub use snapshot::{RejectCounts, Snapshot, TargetSnapshot};
pub use window::{
    DelayWindow, DelayWindowConfig, TargetWindow, WINDOW_FULL, WindowDecrease, WindowDelay,
};
