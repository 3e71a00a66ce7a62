//! Load signals: what the driver (the server's IO layer, or the simulator's CPU model) tells a
//! controller about the world.

use holdline_base::Duration;

use crate::admission::TargetId;

/// A measurement or an event given to [`Controller::on_signal`](crate::Controller::on_signal).
///
/// The driver sends the signals it can measure; a controller uses those its algorithm needs
/// and ignores the others, so one driver can feed any controller. Values that make no sense
/// (a NaN occupancy, a negative one) are clamped or ignored, never a panic.
///
/// | signal | measured by the server | computed by the simulator | used by |
/// | --- | --- | --- | --- |
/// | [`Busy`](Self::Busy) | time a worker spent outside `poll` | CPU model service time | OCC |
/// | [`Occupancy`](Self::Occupancy) | busy fraction over a window | CPU model | OCC, (RFC 7339 server) |
/// | [`QueueLength`](Self::QueueLength) | inbound queue length | queue model | queue limit, bang-bang |
/// | [`QueueDelay`](Self::QueueDelay) | receive-to-dequeue time of a message | queue model | queue delay, OCC's queue gate, (RFC 7415 server) |
/// | [`NewRequestDelay`](Self::NewRequestDelay) | receive-to-dequeue time of a new INVITE on its own socket | queue model | OCC's queue gate |
/// | [`Backlog`](Self::Backlog) | SIOCOUTQ + own per-connection queue | TCP model | smart forwarding |
/// | [`Feedback`](Self::Feedback) | `oc` Via parameters of responses | same | (RFC 7339/7415 clients, window client) |
/// | [`Forwarded`](Self::Forwarded) / [`Completed`](Self::Completed) | client INVITE transactions | same | windows, DEOC |
/// | [`Released`](Self::Released) | first response to a forwarded INVITE | same | explicit window client |
///
/// Parenthesised users are planned controllers (see [`Algorithm`](crate::Algorithm)).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Signal {
    /// The server was busy (processing, not waiting for input) for this long since the
    /// previous `Busy` signal. Interval-driven controllers sum these over their measurement
    /// interval: occupancy = busy time / interval length. A driver reports once per event-loop
    /// iteration (cheap: one addition).
    Busy(Duration),
    /// An occupancy sample in `[0, 1]` measured by the driver over a window of its choosing
    /// (values outside are clamped, NaN is ignored). When a controller receives any in an
    /// interval, their mean is the interval's occupancy and [`Busy`](Self::Busy) time is
    /// ignored; a driver using these reports at least once per measurement interval.
    Occupancy(f64),
    /// The current number of messages (or new INVITEs, as the driver documents) waiting in the
    /// server's bounded inbound queue. Report it when it changes, or just before asking about
    /// a new INVITE.
    QueueLength(usize),
    /// The queueing delay of one message that just left the queue: from its receipt (ideally
    /// the kernel's receive timestamp, so that time in the socket buffer counts) to the start
    /// of its processing.
    QueueDelay(Duration),
    /// The queueing delay of a new INVITE (a request outside any dialog) that waited in a queue
    /// of its own (the server's INVITE sockets, read only when the messages of admitted calls
    /// are done): from its receipt to the start of its processing. Separate from
    /// [`QueueDelay`](Self::QueueDelay), which controllers read as the delay of admitted work.
    NewRequestDelay(Duration),
    /// The backlog of the connection that carries new INVITEs to `target` (TCP smart
    /// forwarding). Report it just before asking about a new INVITE for `target` at
    /// [`Gate::Forward`](crate::Gate::Forward) (the server reads SIOCOUTQ then), or whenever it
    /// changes. A report replaces the previous one for that target and lane.
    Backlog {
        /// The next hop.
        target: TargetId,
        /// Which of the target's connections this is.
        lane: Lane,
        /// Bytes in the socket's send queue: Linux `SIOCOUTQ`, the paper's measure (it
        /// counts bytes not yet acknowledged by the peer; `SIOCOUTQNSD`, not yet sent, is
        /// a stricter alternative the driver may use instead).
        unsent: u64,
        /// Bytes the application still holds for this connection (its bounded write queue,
        /// including bytes handed off from other workers).
        queued: u64,
    },
    /// `target` is gone (connection closed, next hop removed): forget its state.
    TargetGone(TargetId),
    /// Overload-control feedback received from a downstream server: the `oc`, `oc-algo`,
    /// `oc-validity` and `oc-seq` Via parameters of a response (RFC 7339 §5), or an explicit
    /// window. Used by the planned client-role controllers.
    Feedback {
        /// The downstream server that sent it.
        from: TargetId,
        /// What it asks for.
        feedback: Feedback,
    },
    /// An admitted new INVITE was sent to `target` (its client transaction started). Used by
    /// the planned window-based clients (one more outstanding transaction) and DEOC (admitted
    /// calls per interval).
    Forwarded {
        /// Where it went.
        target: TargetId,
    },
    /// A new INVITE sent to `target` is no longer waiting there unanswered: its first
    /// response (provisional or final) came, or its transaction ended without one. Exactly
    /// once per [`Forwarded`](Self::Forwarded). The explicit window counts the INVITEs
    /// between the two (those the next hop has not read yet, or is still processing).
    Released {
        /// Where it went.
        target: TargetId,
        /// From sending the INVITE to its first response (or to its end without one): the
        /// time the next hop took to read and handle it, without the callee's ringing
        /// (seed 004's transaction delay as [`DelayWindow`](crate::DelayWindow) measures it
        /// by default).
        delay: Duration,
    },
    /// The client transaction of a new INVITE sent to `target` ended.
    Completed {
        /// Where it went.
        target: TargetId,
        /// How it ended.
        outcome: Outcome,
        /// From sending the INVITE to the outcome (seed 004's transaction delay).
        delay: Duration,
    },
}

/// Which of a next hop's TCP connections a [`Signal::Backlog`] describes (seed 000 §VI).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lane {
    /// The only connection to the next hop, carrying every request (implicit connection split,
    /// ICS, or no split at all).
    Shared,
    /// The connection dedicated to new INVITEs (explicit connection split, ECS).
    Invite,
    /// The connection for everything but new INVITEs (ECS). Its backlog never rejects an
    /// INVITE: in-dialog traffic has its own buffers precisely so that it does not.
    Other,
}

/// Overload-control feedback from a downstream server.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Feedback {
    /// RFC 7339 loss-based: `oc=<percent>`: drop (reject or divert) this percentage of the
    /// requests that would be sent to the server; `oc-validity` in milliseconds (0 ends
    /// control); `oc-seq` orders feedback from one server.
    Loss {
        /// 0 to 100: the percentage of new INVITEs to drop.
        percent: u8,
        /// How long the value holds (`oc-validity`).
        validity: Duration,
        /// `oc-seq`, mapped by the driver onto a monotonically increasing integer (e.g. its
        /// integer part times 10^5 plus its fraction). Older or equal values are ignored.
        seq: u64,
    },
    /// RFC 7415 rate-based (`oc-algo="rate"`): `oc=<rate>`, the most requests per second the
    /// client may send to the server.
    Rate {
        /// The allowed rate, in new INVITEs per second.
        per_second: u32,
        /// How long the value holds (`oc-validity`).
        validity: Duration,
        /// `oc-seq`, as for [`Feedback::Loss`].
        seq: u64,
    },
    /// Window-based explicit feedback (holdline's `oc-algo="window"`): how many new INVITEs
    /// the client may have sent to the server and not yet seen answered
    /// ([`Signal::Released`]).
    Window {
        /// The window, in INVITEs.
        window: u32,
        /// How long the value holds (`oc-validity`; 0 ends control).
        validity: Duration,
        /// A sequence number, as for [`Feedback::Loss`].
        seq: u64,
    },
}

/// How a client INVITE transaction ended ([`Signal::Completed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A final response with this status. A `503` is DEOC's overload signal.
    Final(u16),
    /// Timer B (or C) fired: no final response. DEOC and seed 004 treat it as overload.
    Timeout,
}

impl Outcome {
    /// The outcome of a branch that ended with `status`, or by a timer when `timed_out` (the
    /// status is then the one the proxy made up, and not the next hop's): how every driver
    /// reads the end of a forwarded INVITE's transaction.
    pub fn of_branch(status: u16, timed_out: bool) -> Self {
        if timed_out {
            Self::Timeout
        } else {
            Self::Final(status)
        }
    }
}
