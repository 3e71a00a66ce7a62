//! What is asked of a controller ([`Admission`]) and what it answers ([`Decision`]).

use core::fmt;

use holdline_base::Duration;

/// The status code of every overload rejection: `503 Service Unavailable` (RFC 3261 §21.5.4,
/// RFC 7339 §5.2).
pub const SERVICE_UNAVAILABLE: u16 = 503;

/// Identifies a neighbouring SIP entity that a per-target controller keeps state for.
///
/// The driver chooses the numbering and keeps it stable for the entity's lifetime: an index
/// into its next-hop table, a connection's [`ConnId`](holdline_base::ConnId) value, or a hash of
/// the peer's address. What a target *is* depends on the controller:
///
/// - smart forwarding, the RFC 7339 / RFC 7415 client roles and the window-based clients: the
///   next hop a request is forwarded to;
/// - DEOC: the egress edge server the call will leave the network through (its last hop);
/// - the server roles (feedback to send): the upstream neighbour a response goes back to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TargetId(pub u64);

impl fmt::Display for TargetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "target#{}", self.0)
    }
}

/// What kind of message is being admitted.
///
/// Three classes can be rejected: [`Class::NewInvite`], [`Class::NewRegistration`] and
/// [`Class::Refresh`]: each starts (or renews) work the server has not committed to yet, and
/// rejecting it costs a fraction of serving it. Every other message belongs to a call the
/// server already admitted (or is not load worth shedding), and every controller admits it by
/// contract (invariant 2 of the architecture: admitted calls come first). The crate's
/// invariant test suite holds every controller to this.
///
/// Priorities, highest first: in-dialog requests and responses (never rejected), refreshes of
/// existing bindings, then new registrations and new calls. A probabilistic controller that
/// admits a new call with probability `f` admits a refresh with `1 - (1 - f)²` (two draws,
/// [`Class::draws`]); a bang-bang controller (a full queue) rejects all three alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// An initial INVITE: no To tag, and not a retransmission of an INVITE the server already
    /// admitted. A retransmission of an admitted INVITE belongs to an admitted call: the driver
    /// classifies it as [`Class::InDialog`] (it matches a server transaction).
    NewInvite,
    /// A REGISTER for an address-of-record the registrar holds no binding of: it adds state
    /// (a storm of them is a flash crowd of phones coming online). The driver classifies it
    /// ([`Class::of_register`]); [`Class::of_request`] cannot, it does not see the store.
    NewRegistration,
    /// A REGISTER refreshing, changing or removing bindings the registrar already holds: a
    /// phone that stays online. Rejected less often than new work ([`Class::draws`]).
    Refresh,
    /// A request of an admitted call: anything with a To tag (re-INVITE, BYE, in-dialog
    /// requests), and ACK and CANCEL, which belong to an INVITE transaction.
    InDialog,
    /// A request outside any dialog that does not start a call and that the driver did not
    /// classify as a registration: OPTIONS, SUBSCRIBE, MESSAGE, PUBLISH, NOTIFY, a REGISTER
    /// for another domain, … Not rejected for load by any controller of this crate.
    OutOfDialog,
    /// Any response.
    Response,
}

impl Class {
    /// Classifies a request from its method (case-sensitive, as RFC 3261 §7.1 defines method
    /// names) and whether its To header field carries a tag. A REGISTER is
    /// [`Class::OutOfDialog`] here: only a driver that sees the location store can tell a new
    /// registration from a refresh ([`Class::of_register`]).
    ///
    /// ```
    /// use holdline_overload::Class;
    /// assert_eq!(Class::of_request(b"INVITE", false), Class::NewInvite);
    /// assert_eq!(Class::of_request(b"INVITE", true), Class::InDialog);
    /// assert_eq!(Class::of_request(b"CANCEL", false), Class::InDialog);
    /// assert_eq!(Class::of_request(b"REGISTER", false), Class::OutOfDialog);
    /// ```
    pub fn of_request(method: &[u8], has_to_tag: bool) -> Self {
        if has_to_tag {
            return Self::InDialog;
        }
        match method {
            b"INVITE" => Self::NewInvite,
            // ACK and CANCEL belong to an INVITE transaction; BYE, PRACK, UPDATE and INFO only
            // exist inside a dialog (a missing To tag is the next hop's problem, not load).
            b"ACK" | b"CANCEL" | b"BYE" | b"PRACK" | b"UPDATE" | b"INFO" => Self::InDialog,
            _ => Self::OutOfDialog,
        }
    }

    /// A REGISTER the registrar serves: [`Class::Refresh`] when its address-of-record has a
    /// binding already, [`Class::NewRegistration`] otherwise.
    ///
    /// ```
    /// use holdline_overload::Class;
    /// assert_eq!(Class::of_register(true), Class::Refresh);
    /// assert_eq!(Class::of_register(false), Class::NewRegistration);
    /// ```
    pub const fn of_register(has_binding: bool) -> Self {
        if has_binding {
            Self::Refresh
        } else {
            Self::NewRegistration
        }
    }

    /// Whether a controller may reject a message of this class: [`Class::NewInvite`],
    /// [`Class::NewRegistration`] and [`Class::Refresh`].
    pub const fn is_rejectable(self) -> bool {
        matches!(
            self,
            Self::NewInvite | Self::NewRegistration | Self::Refresh
        )
    }

    /// How many admission draws a probabilistic controller gives a message of this class: it
    /// is admitted if any of them succeeds. 2 for [`Class::Refresh`] (a refresh is admitted
    /// with probability `1 - (1 - f)²`: at `f = 0.5`, 75%), 1 for the other rejectable classes,
    /// 0 for the rest (never drawn: always admitted).
    pub const fn draws(self) -> u32 {
        match self {
            Self::Refresh => 2,
            Self::NewInvite | Self::NewRegistration => 1,
            Self::InDialog | Self::OutOfDialog | Self::Response => 0,
        }
    }
}

/// Where in the server a decision is taken.
///
/// ```text
/// recv ─> classify ─> [Ingress gate] ─> shard ─> transaction ─> proxy logic ─> route
///                        local control                                           │
///      send <─ per-destination queue <─ client transaction <─ [Forward gate] <───┘
///                                                             smart forwarding, clients
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Gate {
    /// On receipt, from the classified start line, before parsing in full or queueing: the
    /// next hop is not known yet. Local control (none, queue limit, OCC, queue delay) and the
    /// server roles of the feedback schemes decide here.
    Ingress,
    /// After routing, just before a new INVITE is handed to a next hop's connection or socket:
    /// the [`TargetId`] is known. TCP smart forwarding and every sending-side (client) scheme
    /// decide here.
    Forward,
}

/// One admission question: may this message go on?
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Admission {
    /// What the message is. Only the [rejectable](Class::is_rejectable) classes can be
    /// rejected.
    pub class: Class,
    /// Where the question is asked.
    pub gate: Gate,
    /// The target the message goes to, when known (always at [`Gate::Forward`]).
    pub target: Option<TargetId>,
}

impl Admission {
    /// A question at the [`Gate::Ingress`] gate (no target known).
    pub const fn ingress(class: Class) -> Self {
        Self {
            class,
            gate: Gate::Ingress,
            target: None,
        }
    }

    /// A question at the [`Gate::Forward`] gate, for a message going to `target`.
    pub const fn forward(class: Class, target: TargetId) -> Self {
        Self {
            class,
            gate: Gate::Forward,
            target: Some(target),
        }
    }

    /// A new INVITE at the ingress gate (the common case, for brevity in drivers and tests).
    pub const fn new_invite() -> Self {
        Self::ingress(Class::NewInvite)
    }
}

/// The answer to an [`Admission`].
#[must_use = "a rejected new INVITE must be answered with the rejection's status, not forwarded"]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Let the message go on.
    Admit,
    /// Answer the new INVITE with this rejection at once (statelessly, without queueing it).
    Reject(Rejection),
}

impl Decision {
    /// Whether the message may go on.
    pub const fn is_admit(self) -> bool {
        matches!(self, Self::Admit)
    }

    /// The rejection, if any.
    pub const fn rejection(self) -> Option<Rejection> {
        match self {
            Self::Admit => None,
            Self::Reject(r) => Some(r),
        }
    }
}

/// How to reject a new INVITE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rejection {
    /// The response status: [`SERVICE_UNAVAILABLE`] (503) for the controllers of this crate,
    /// but DEOC's restrictor, whose status is configurable (`DeocConfig::status`).
    pub status: u16,
    /// A `Retry-After` to put in the response, if the controller's configuration asks for
    /// one. SIP carries whole seconds: the driver rounds up. `None` (the default everywhere)
    /// rejects only this request, which RFC 7339 §5.2 and seed 003 recommend: a Retry-After
    /// makes upstream servers stop sending for its duration and turns traffic ON/OFF.
    pub retry_after: Option<Duration>,
    /// Why: for metrics (`rejections by reason`) and logs.
    pub reason: RejectReason,
}

impl Rejection {
    /// A 503 with the given reason and optional Retry-After.
    pub const fn service_unavailable(reason: RejectReason, retry_after: Option<Duration>) -> Self {
        Self {
            status: SERVICE_UNAVAILABLE,
            retry_after,
            reason,
        }
    }
}

/// Why a new INVITE was rejected. Every controller, implemented or planned, has its own
/// reasons, so that metrics can tell them apart.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RejectReason {
    /// The server's inbound queue reached its limit (503 on a full queue, bang-bang control).
    QueueFull,
    /// Occupancy-based control (OCC) drew a rejection with probability `1 - f`.
    Occupancy,
    /// Queueing-delay-based control drew a rejection with probability `1 - f`.
    QueueDelay,
    /// TCP smart forwarding: the next hop's INVITE-carrying connection has unsent bytes
    /// (SIOCOUTQ) or bytes queued in the application beyond the threshold.
    TargetBacklog,
    /// Planned: RFC 7339 loss-based client role, dropping the fraction the next hop asked for.
    LossThrottle,
    /// Planned: RFC 7415 rate-based client role, above the rate the next hop allows.
    RateThrottle,
    /// Planned: window-based control (explicit feedback, or seed 004's delay-based window
    /// without feedback): the target's window of outstanding INVITE transactions is full.
    WindowFull,
    /// Planned: DEOC's restrictor, a call arriving within the current call gap of its target.
    CallGap,
    /// A new INVITE read from a stream waited for idle time longer than allowed
    /// ([`DeferQueue`](crate::defer::DeferQueue)): the server was busy with admitted calls.
    DeferTimeout,
    /// The server is draining for maintenance (`holdline ctl drain`, SIGTERM): new calls
    /// and registrations are turned away with a `Retry-After`, so that upstreams tell
    /// maintenance from overload.
    Maintenance,
}

impl RejectReason {
    /// Every reason, in [`index`](Self::index) order.
    pub const ALL: [Self; 10] = [
        Self::QueueFull,
        Self::Occupancy,
        Self::QueueDelay,
        Self::TargetBacklog,
        Self::LossThrottle,
        Self::RateThrottle,
        Self::WindowFull,
        Self::CallGap,
        Self::DeferTimeout,
        Self::Maintenance,
    ];

    /// The number of reasons.
    pub const COUNT: usize = Self::ALL.len();

    /// A dense index in `0..COUNT`, for counter arrays.
    pub const fn index(self) -> usize {
        match self {
            Self::QueueFull => 0,
            Self::Occupancy => 1,
            Self::QueueDelay => 2,
            Self::TargetBacklog => 3,
            Self::LossThrottle => 4,
            Self::RateThrottle => 5,
            Self::WindowFull => 6,
            Self::CallGap => 7,
            Self::DeferTimeout => 8,
            Self::Maintenance => 9,
        }
    }

    /// The metrics label, e.g. `queue_full`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::QueueFull => "queue_full",
            Self::Occupancy => "occupancy",
            Self::QueueDelay => "queue_delay",
            Self::TargetBacklog => "target_backlog",
            Self::LossThrottle => "loss_throttle",
            Self::RateThrottle => "rate_throttle",
            Self::WindowFull => "window_full",
            Self::CallGap => "call_gap",
            Self::DeferTimeout => "defer_timeout",
            Self::Maintenance => "maintenance",
        }
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_index_matches_all() {
        for (i, r) in RejectReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
    }

    #[test]
    fn classification() {
        assert_eq!(Class::of_request(b"INVITE", false), Class::NewInvite);
        assert_eq!(Class::of_request(b"invite", false), Class::OutOfDialog);
        assert_eq!(Class::of_request(b"INVITE", true), Class::InDialog);
        assert_eq!(Class::of_request(b"ACK", false), Class::InDialog);
        assert_eq!(Class::of_request(b"BYE", false), Class::InDialog);
        assert_eq!(Class::of_request(b"OPTIONS", false), Class::OutOfDialog);
        assert_eq!(Class::of_request(b"OPTIONS", true), Class::InDialog);
        assert!(Class::NewInvite.is_rejectable());
        assert!(Class::NewRegistration.is_rejectable());
        assert!(Class::Refresh.is_rejectable());
        assert!(!Class::Response.is_rejectable());
        assert!(!Class::OutOfDialog.is_rejectable());
        assert!(Class::Refresh.draws() > Class::NewRegistration.draws());
    }
}
