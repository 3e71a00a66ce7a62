//! [`Endpoint`]: one worker's SIP engine. It owns the transaction table, the registrar, the
//! per-call proxy state (response contexts) and a handle to the shared location store, and
//! applies RFC 3261 §16 to every message the driver hands it.
//!
//! ```text
//!   driver ──handle(now, bytes, from, local)──> Endpoint ──> Transactions (§17)
//!          <──poll_transmit / poll_timeout─────     │  response contexts: server txn ->
//!          ──handle_timeout(now)──────────────>     │  branches (client txns), best final,
//!                                                   │  Timer C per INVITE branch
//!                                                   └─> Registrar ──> LocationStore
//! ```
//!
//! Call contract (as for every sans-IO machine in holdline): after each `handle` and
//! `handle_timeout`, drain [`poll_transmit`](Endpoint::poll_transmit) and
//! [`poll_event`](Endpoint::poll_event) until `None`, then arm one timer for
//! [`poll_timeout`](Endpoint::poll_timeout). Nothing here panics on any input.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use holdline_base::{
    Duration, EarlyGrowth, Instant, Peer, Rng, Transmit, Transport, WaitHistogram,
};
use holdline_overload::{Class, OfferedRate};
use holdline_sip::{
    EditError, Editor, HeaderName, Message, Method, OC_PARAMS, OcAlgo, OcOffer, OcReport, Span,
    build_response,
};

use crate::auth::{AuthDecision, Authenticator, ChallengeReason, Role};
use crate::dns::{DnsCache, DnsQuery, DnsResponse, DnsStats, DnsTarget, Resolution};

use crate::location::{Binding, LocationStore};
use crate::proxy::learn::{self, LearnKeys, LearnedEdges};
use crate::proxy::{
    EdgeId, Pick, ProxyConfig, ProxyMode, RoutePlan, branch_loop_hash, host_port, is_me_uri,
    is_our_via, is_own_socket, record_route_value, resolve_uri, response_rank, stateless_branch,
    via_destination,
};
use crate::registrar::Registrar;
use crate::txn::{
    ClientTxnId, RequestOutcome, ResponseOutcome, ServerState, ServerTxnId, Transactions, TxnEvent,
    TxnId,
};

#[path = "endpoint_lc.rs"]
mod lc;

pub use lc::LoadControlStats;

/// The To tag prefix of the gate's stateless rejections.
pub(crate) const GATE_TAG_PREFIX: &[u8] = b"ol";
/// Its length: the prefix and 16 hex digits of a keyed hash.
const GATE_TAG_LEN: usize = 18;

/// How [`Endpoint::handle_admitting`] answers a new INVITE its gate rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateRejection {
    /// The status code (503 for load).
    pub status: u16,
    /// The reason phrase.
    pub reason: &'static str,
    /// A `Retry-After` value in seconds, if any.
    pub retry_after_secs: Option<u32>,
    /// Why, for the upstream: sent as `Reason: SIP;cause=<status>;text="<text>"` (RFC 3326),
    /// e.g. `Overload: occupancy` (this server's load) or `Downstream overload: loss_throttle`
    /// (a next hop's), so that an upstream tells load from failure. `None`: no Reason header.
    /// Must be a short token-ish text without `"` or `\`.
    pub text: Option<&'static str>,
}

impl OverloadAnswer {
    /// The algorithms answered.
    fn supported(&self) -> &'static [OcAlgo] {
        match (self.rate, self.window) {
            (RateAnswer::Off, RateAnswer::Off) => &[OcAlgo::Loss],
            (_, RateAnswer::Off) => &[OcAlgo::Loss, OcAlgo::Rate],
            (RateAnswer::Off, _) => &[OcAlgo::Loss, OcAlgo::Window],
            _ => &[OcAlgo::Loss, OcAlgo::Rate, OcAlgo::Window],
        }
    }
}

impl GateRejection {
    /// The `Reason` header value of this rejection, if it has a text.
    fn reason_header(&self) -> Option<String> {
        self.text
            .filter(|t| !t.contains(['"', '\\', '\r', '\n']))
            .map(|t| format!("SIP;cause={};text=\"{t}\"", self.status))
    }
}

/// The methods the proxy forwards, for `Allow` in its answer to OPTIONS.
const ALLOW: &[u8] =
    b"INVITE, ACK, CANCEL, BYE, OPTIONS, REGISTER, PRACK, UPDATE, INFO, MESSAGE, SUBSCRIBE, NOTIFY, REFER";

/// The most events kept for [`Endpoint::poll_event`]; more are counted, not queued.
const MAX_EVENTS: usize = 1024;

/// Why the endpoint dropped a message without answering it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DropReason {
    /// The bytes do not parse as a SIP message (no response can be built).
    Unparsable,
    /// A request that cannot be answered (an ACK) is malformed, or a response is.
    Malformed,
    /// A response matching no transaction that is not ours to forward statelessly (not a
    /// 2xx, not from a stateless branch, or its top Via is not ours).
    StrayResponse,
    /// No next hop could be found for an ACK or a stateless response.
    Unroutable,
    /// An ACK arrived with Max-Forwards 0.
    TooManyHops,
    /// The transaction table is full (a `503` was sent when the message was a request).
    TooManyTransactions,
    /// An edit or a transaction-layer call failed where it should not (a bug or an
    /// unexpected message shape); the message was dropped.
    Internal,
}

impl DropReason {
    /// Every reason, in the order of [`EndpointStats::drops`].
    pub const ALL: [Self; 7] = [
        Self::Unparsable,
        Self::Malformed,
        Self::StrayResponse,
        Self::Unroutable,
        Self::TooManyHops,
        Self::TooManyTransactions,
        Self::Internal,
    ];

    fn index(self) -> usize {
        match self {
            Self::Unparsable => 0,
            Self::Malformed => 1,
            Self::StrayResponse => 2,
            Self::Unroutable => 3,
            Self::TooManyHops => 4,
            Self::TooManyTransactions => 5,
            Self::Internal => 6,
        }
    }
}

/// Why a request that [`ProxyMode::Stateless`] would forward without a transaction went
/// through the stateful path instead (counted in [`EndpointStats::stateless_fallbacks`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum StatelessFallback {
    /// It is not UDP in and UDP out. A transport change (TCP in, UDP out) needs a client
    /// transaction to retransmit over the unreliable side; over a stream (TCP, TLS) the
    /// caller does not retransmit, so a request sent to a next hop whose connection fails is
    /// lost unless a transaction answers the transport error by failing over (§16.9).
    Transport,
    /// It is subject to digest authentication (a `407` challenge, the credentials consumed):
    /// an out-of-dialog request from a user of a served domain, from a source not trusted.
    Authentication,
    /// Its next hop comes from DNS (RFC 3263): it may wait for a lookup, and the failover
    /// between the resolved targets needs the transaction.
    Dns,
    /// A retransmission of a request handled statefully, or a CANCEL of one: it goes to that
    /// request's transaction.
    Transaction,
    /// The proxy answers it itself with an error (no target: `404`, `403`, `482`): through a
    /// server transaction, so that retransmissions get the same answer and its ACK is
    /// absorbed.
    Answered,
    /// It has more than one target (forking).
    Forking,
}

impl StatelessFallback {
    /// Every reason, in the order of [`EndpointStats::stateless_fallbacks`].
    pub const ALL: [Self; 6] = [
        Self::Transport,
        Self::Authentication,
        Self::Dns,
        Self::Transaction,
        Self::Answered,
        Self::Forking,
    ];

    /// The metrics label: `transport`, `auth`, `dns`, `transaction`, `answered`, `fork`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Transport => "transport",
            Self::Authentication => "auth",
            Self::Dns => "dns",
            Self::Transaction => "transaction",
            Self::Answered => "answered",
            Self::Forking => "fork",
        }
    }

    fn index(self) -> usize {
        match self {
            Self::Transport => 0,
            Self::Authentication => 1,
            Self::Dns => 2,
            Self::Transaction => 3,
            Self::Answered => 4,
            Self::Forking => 5,
        }
    }
}

/// What the endpoint reports to its driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EndpointEvent {
    /// A message was dropped (also counted in [`EndpointStats::drops`]).
    Dropped(DropReason),
    /// A request carried wrong credentials (a wrong password, or an unknown user of a served
    /// domain): the driver counts these per source and throttles the source past a limit.
    /// Also counted in [`AuthStats::failed`].
    AuthFailed {
        /// Where the request came from.
        from: Peer,
    },
    /// A next hop answered this proxy's overload-control offer (RFC 7339 / RFC 7415) in a
    /// response that matched one of its client transactions. Only with
    /// [`ProxyConfig::overload_offer`](crate::ProxyConfig::overload_offer).
    Feedback {
        /// Where the response came from (the next hop).
        from: Peer,
        /// Its answer.
        report: OcReport,
    },
    /// An INVITE was forwarded to `to`: one more of its transactions outstanding there. Only
    /// with [`ProxyConfig::branch_events`](crate::ProxyConfig::branch_events).
    BranchStarted {
        /// The next hop.
        to: Peer,
        /// The target edge its route named for end-to-end overload control, if any.
        edge: Option<EdgeId>,
    },
    /// An INVITE forwarded to `to` is no longer unanswered there: its first response came
    /// (provisional or final), or its transaction ended without one. Exactly once per
    /// [`BranchStarted`](Self::BranchStarted), before its
    /// [`BranchEnded`](Self::BranchEnded). Only with
    /// [`ProxyConfig::branch_events`](crate::ProxyConfig::branch_events).
    BranchAnswered {
        /// The next hop.
        to: Peer,
        /// The target edge its route named for end-to-end overload control, if any.
        edge: Option<EdgeId>,
        /// From sending the INVITE to this first response (or to the transaction's end).
        delay: Duration,
    },
    /// The client transaction of an INVITE forwarded to `to` ended (with a final response,
    /// or without one). Only with [`ProxyConfig::branch_events`](crate::ProxyConfig::branch_events).
    BranchEnded {
        /// The next hop.
        to: Peer,
        /// The target edge its route named for end-to-end overload control, if any.
        edge: Option<EdgeId>,
        /// The final response's status; 408 and 503 are the proxy's own when
        /// `timed_out` or the transport failed.
        status: u16,
        /// No final response came (Timer B or C, or the transaction ended without one).
        timed_out: bool,
        /// From sending the INVITE to its end.
        delay: Duration,
    },
}

/// How many of a rate client's INVITE intervals (the inverse of its share) a rate answer's
/// `oc-validity` covers at least: its answer outlives the gaps between the INVITEs it admits.
pub const RATE_VALIDITY_GAPS: u32 = 4;

/// The longest `oc-validity` a loss answer is stretched to (its configured validity divided
/// by the share of INVITEs it lets through), milliseconds.
pub const LOSS_VALIDITY_MAX_MS: u32 = 10_000;

/// The server role of hop-by-hop overload control (RFC 7339 §5.2): what this proxy answers,
/// in the top Via of every response it sends, to an upstream client that offered `oc` with
/// an algorithm answered here (`loss`). Set by the driver with
/// [`Endpoint::set_overload_answer`] from its local controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverloadAnswer {
    /// The percentage of new INVITEs the client should drop (0–100). 0 is sent with
    /// `oc-validity=0` (no control).
    pub loss_percent: u8,
    /// `oc-validity` of a non-zero answer, in milliseconds.
    pub validity_ms: u32,
    /// Whether new INVITEs from clients that take this answer skip the admission gate of
    /// [`Endpoint::handle_admitting`]: they already dropped their share upstream, and
    /// rejecting again here would spend this server's CPU on the same excess twice.
    pub exempt: bool,
    /// The rate-based answer (RFC 7415) for clients that prefer `rate`.
    pub rate: RateAnswer,
    /// Whether new INVITEs from window clients skip the gate (instead of [`exempt`](Self::exempt),
    /// which judges the loss answer's effect): their window bounds what they can have
    /// waiting here, so the driver keeps them exempt while its queue of new INVITEs stays
    /// near the window's target.
    pub window_exempt: bool,
    /// The explicit window answer (`oc-algo="window"`) for clients that prefer `window`, in
    /// the same three states: `Total(w)` is the window of all window clients together, each
    /// getting an even share (rounded up, at least 1) of the clients seen in the last interval.
    pub window: RateAnswer,
}

/// The server role's RFC 7415 answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateAnswer {
    /// Rate-based control is not answered: clients offering `rate` get the loss answer if
    /// they offered `loss` too, else nothing.
    Off,
    /// Answered, no control now: `oc=0;oc-algo="rate";oc-validity=0`.
    Idle,
    /// At most this many new INVITEs per second from all rate-based clients together; each
    /// gets an even share (rounded up) of the clients seen in the last interval.
    Total(u32),
}

impl RateAnswer {
    /// The answer of an estimator's total, a rate or a window shared by the clients (`None`:
    /// not controlling): `Off` when not `answered`, `Idle` while not controlling, else the
    /// total rounded up, at least 1.
    pub fn of_total(answered: bool, total: Option<f64>) -> Self {
        match (answered, total) {
            (false, _) => Self::Off,
            (true, None) => Self::Idle,
            (true, Some(t)) => Self::Total(t.ceil().clamp(1.0, f64::from(u32::MAX)) as u32),
        }
    }
}

/// What the server role saw since the driver last asked ([`Endpoint::take_feedback_tally`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeedbackTally {
    /// New INVITEs from clients answered with the rate algorithm.
    pub rate_invites: u64,
    /// Distinct such clients (source addresses).
    pub rate_clients: usize,
    /// New INVITEs from clients answered with the explicit window.
    pub window_invites: u64,
    /// Distinct such clients.
    pub window_clients: usize,
}

/// Requests received, by method.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MethodCounters {
    /// INVITE.
    pub invite: u64,
    /// ACK.
    pub ack: u64,
    /// BYE.
    pub bye: u64,
    /// CANCEL.
    pub cancel: u64,
    /// OPTIONS.
    pub options: u64,
    /// REGISTER.
    pub register: u64,
    /// Any other method.
    pub other: u64,
}

impl MethodCounters {
    fn slot(&mut self, m: Method<'_>) -> &mut u64 {
        match m {
            Method::Invite => &mut self.invite,
            Method::Ack => &mut self.ack,
            Method::Bye => &mut self.bye,
            Method::Cancel => &mut self.cancel,
            Method::Options => &mut self.options,
            Method::Register => &mut self.register,
            _ => &mut self.other,
        }
    }
}

/// Digest authentication's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuthStats {
    /// `401` challenges sent (REGISTER).
    pub challenges_401: u64,
    /// `407` challenges sent (proxied requests).
    pub challenges_407: u64,
    /// Requests authenticated.
    pub ok: u64,
    /// Wrong credentials: wrong password or unknown user ([`EndpointEvent::AuthFailed`]).
    pub failed: u64,
    /// Right credentials with an expired (or forgotten) nonce: challenged with `stale=true`.
    pub stale: u64,
    /// Right credentials with a nonce count used before: refused as a replay.
    pub replayed: u64,
    /// Credentials for our realm that were malformed or carried a nonce we did not issue.
    pub invalid: u64,
    /// Right credentials for another user than the one the request acts for: `403`.
    pub forbidden: u64,
}

/// The endpoint's counters (monotonic unless noted).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointStats {
    /// Requests received, by method (retransmissions included).
    pub requests_in: MethodCounters,
    /// Responses received, by status class: index 0 is 1xx, …, 5 is 6xx.
    pub responses_in: [u64; 6],
    /// Responses sent (generated, forwarded and retransmitted), by status class.
    pub responses_out: [u64; 6],
    /// Messages that did not parse, or requests answered `400`.
    pub parse_errors: u64,
    /// Messages dropped, indexed like [`DropReason::ALL`].
    pub drops: [u64; 7],
    /// Events not queued because the driver did not drain [`Endpoint::poll_event`].
    pub events_lost: u64,
    /// Live server transactions (a gauge).
    pub server_transactions: u64,
    /// Server transactions created (every request handled statefully, retransmissions not
    /// counted): stays 0 on a [`ProxyMode::Stateless`] first stage that forwards everything
    /// statelessly.
    pub server_transactions_total: u64,
    /// Live client transactions (a gauge; CANCELs included).
    pub client_transactions: u64,
    /// Requests forwarded through a client transaction (one per branch).
    pub forwarded: u64,
    /// Messages forwarded statelessly: requests on stateless routes or in
    /// [`ProxyMode::Stateless`], ACKs for 2xx, unmatched CANCELs, and responses routed back by
    /// their Via.
    pub stateless: u64,
    /// Requests [`ProxyMode::Stateless`] handled statefully, indexed like
    /// [`StatelessFallback::ALL`].
    pub stateless_fallbacks: [u64; 6],
    /// Retransmitted requests absorbed by a server transaction.
    pub retransmissions_absorbed: u64,
    /// Requests sent to their next alternative target after their branch failed (a 503, a
    /// timeout or a transport error; RFC 3263 §4.3).
    pub failovers: u64,
    /// OPTIONS probes sent to load-sharing targets.
    pub probes_sent: u64,
    /// Probes that failed (no final response in time, a 5xx, a transport error).
    pub probes_failed: u64,
    /// Load-sharing targets currently down.
    pub targets_down: u64,
    /// ACKs of non-2xx final responses (this proxy's own, e.g. a 407, or relayed ones),
    /// absorbed by their INVITE server transaction: hop-by-hop, not forwarded.
    pub acks_absorbed: u64,
    /// New INVITEs the admission gate of [`Endpoint::handle_admitting`] rejected (answered
    /// statelessly, no transaction created).
    pub rejected_by_gate: u64,
    /// ACKs of the gate's rejections, recognised by their To tag and absorbed.
    pub gate_acks_absorbed: u64,
    /// New INVITEs that skipped the admission gate because their upstream client takes this
    /// proxy's overload answer ([`OverloadAnswer::exempt`]).
    pub gate_exempt: u64,
    /// Responses sent upstream with this proxy's overload answer in their top Via.
    pub overload_answers: u64,
    /// Overload answers received from next hops ([`EndpointEvent::Feedback`]).
    pub overload_reports: u64,
    /// Overload answers from next hops that were malformed and ignored.
    pub overload_reports_malformed: u64,
    /// New INVITEs the forward gate rejected (every next hop refused them), answered through
    /// their server transaction.
    pub rejected_by_forward_gate: u64,
    /// Callees and domains whose egress edge is remembered ([`ProxyConfig::learn_edges`]; a
    /// gauge).
    pub edges_learned: u64,
    /// Initial requests answered `302` with their targets as Contacts
    /// ([`ProxyMode::Redirect`]).
    pub redirected: u64,
    /// Copies of accepted REGISTERs sent to the servers of
    /// [`ProxyConfig::propagate_registrations`].
    pub registrations_propagated: u64,
    /// Of those copies, the ones a backup answered 2xx.
    pub registration_copies_acked: u64,
    /// Copies that could not be sent, were refused (3xx-6xx) or got no answer (timeout,
    /// transport error): that backup may not hold the binding.
    pub registration_copies_failed: u64,
    /// Requests whose every target was one of the proxy's own sockets: answered `482`, never
    /// sent to ourselves.
    pub to_own_socket: u64,
    /// Requests refused (403) by the relay policy: for a next hop this proxy does not serve,
    /// from a source it does not trust.
    pub relay_denied: u64,
    /// Digest authentication.
    pub auth: AuthStats,
    /// REGISTER responses held until the location store committed their change.
    pub register_commit_waits: u64,
    /// Requests waiting for DNS lookups of their next hop (a gauge).
    pub dns_parked: u64,
    /// Requests that had to wait for DNS lookups (parked at least once).
    pub dns_parked_total: u64,
    /// Requests answered `503` at once because too many were waiting for DNS (for their
    /// name, or in all).
    pub dns_park_full: u64,
    /// Requests answered `503` because their lookups took longer than
    /// [`DnsConfig::park_timeout`](crate::dns::DnsConfig).
    pub dns_park_timeouts: u64,
    /// Requests answered `503` because their next hop's name resolved to nothing.
    pub dns_unresolved: u64,
    /// Of those, the ones answered `500` because the commit took longer than
    /// [`ProxyConfig::commit_timeout`].
    pub register_commit_timeouts: u64,
    /// How long the held REGISTER responses waited for their commit (released or timed out).
    pub register_commit_wait: WaitHistogram,
    /// RFC 7200 load control, both roles.
    pub load_control: LoadControlStats,
}

/// A REGISTER's 200 waiting for the store's commit (see [`Endpoint::handle_committed`]).
#[derive(Debug)]
struct HeldResponse {
    ticket: u64,
    sid: ServerTxnId,
    response: Vec<u8>,
    /// When it was held (for [`EndpointStats::register_commit_wait`]).
    held_at: Instant,
    deadline: Instant,
}

impl EndpointStats {
    /// How many messages were dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops[reason.index()]
    }

    /// How many requests [`ProxyMode::Stateless`] handled statefully for `reason`.
    pub fn fell_back(&self, reason: StatelessFallback) -> u64 {
        self.stateless_fallbacks[reason.index()]
    }
}

/// Where a branch is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BranchState {
    /// Sent, nothing heard.
    Calling,
    /// A provisional response arrived.
    Proceeding,
}
// No `Done`: a branch leaves `Endpoint::branches` with its final response
// (`Endpoint::branch_final`); an accepted INVITE branch moves to `Endpoint::accepted`.

#[derive(Debug)]
struct Branch {
    server: ServerTxnId,
    invite: bool,
    state: BranchState,
    /// A CANCEL must be sent as soon as a provisional response arrives.
    cancel_wanted: bool,
    cancel_sent: bool,
    /// Timer C (before a CANCEL) or the give-up timer after it.
    timer_at: Option<Instant>,
    /// Where it was sent.
    dest: Peer,
    /// The target edge of its call's route (end-to-end overload control).
    edge: Option<EdgeId>,
    /// When it was sent.
    sent: Instant,
}

/// A response context (§16.2): one per proxied request.
#[derive(Debug)]
struct Call {
    invite: bool,
    /// The request as received (Via annotated), for responses the proxy builds itself.
    request: Vec<u8>,
    branches: Vec<ClientTxnId>,
    pending: usize,
    /// The best final response so far: status and bytes ready to send upstream.
    best: Option<(u16, Vec<u8>)>,
    final_sent: bool,
    /// Where to send the request next if its only branch fails with a 503, a timeout or a
    /// transport error (RFC 3263 §4.3): a load-sharing route's other targets, in their
    /// rendezvous order. Emptied by a CANCEL.
    alternatives: Vec<Peer>,
    /// The transport the request came in on (for the Record-Route of a failover branch).
    local: Transport,
    /// Its targets came from DNS: a target whose branch fails is marked failed in the cache.
    dns: bool,
    /// The target edge its route named (end-to-end overload control), for its branches.
    edge: Option<EdgeId>,
    /// What its egress edge is learned under from its responses
    /// ([`ProxyConfig::learn_edges`]).
    learn_keys: Option<LearnKeys>,
}

/// A request waiting for the DNS lookups of its next hop (its server transaction is live).
#[derive(Debug)]
struct Parked {
    sid: ServerTxnId,
    target: DnsTarget,
    /// The request as received (Via annotated).
    request: Vec<u8>,
    from: Peer,
    local: Transport,
    /// Our credentials it carried, consumed by authentication (a span of `request`).
    consumed: Option<Span>,
    /// When it is answered `503` if still waiting.
    deadline: Instant,
}

/// Why a request has no targets (yet).
#[derive(Debug)]
enum NoTargets {
    /// Answer it with this status and reason.
    Answer(u16, &'static str),
    /// Its next hop's name is being resolved: park it.
    Resolving(DnsTarget),
}

impl From<(u16, &'static str)> for NoTargets {
    fn from((code, reason): (u16, &'static str)) -> Self {
        Self::Answer(code, reason)
    }
}

/// One worker's SIP engine: transactions, the proxy core and the registrar. See the
/// [module documentation](self).
pub struct Endpoint {
    config: ProxyConfig,
    txns: Transactions,
    registrar: Registrar,
    /// Digest authentication, when configured.
    auth: Option<Authenticator>,
    store: Arc<dyn LocationStore>,
    rng: Rng,
    calls: BTreeMap<ServerTxnId, Call>,
    /// The branches still waiting for their final response (a few per call in flight).
    branches: BTreeMap<ClientTxnId, Branch>,
    /// INVITE branches that got a 2xx, until their client transaction ends (Timer M, 32 s
    /// over UDP): a retransmitted 2xx goes up through its server transaction (RFC 6026).
    /// Only this pair is kept for those 32 s, not the whole [`Branch`] (issue 14: the
    /// memory of a lingering transaction).
    accepted: HashMap<ClientTxnId, ServerTxnId>,
    /// `accepted` grows while its count ramps up, never at a steady count (see
    /// [`EarlyGrowth`]: entries come and go, and their tombstones would double it then).
    accepted_growth: EarlyGrowth,
    cancels: BTreeSet<ClientTxnId>,
    timers: BinaryHeap<Reverse<(Instant, ClientTxnId)>>,
    out: VecDeque<(Peer, Vec<u8>)>,
    events: VecDeque<EndpointEvent>,
    stats: EndpointStats,
    bindings: Vec<Binding>,
    /// The failover order [`all_targets`](Self::all_targets) found with its targets (a
    /// load-sharing route's other targets), taken by the stateful path into its [`Call`].
    failover: Vec<Peer>,
    /// Client transactions carrying copies of REGISTERs to the backups
    /// ([`ProxyConfig::propagate_registrations`]) whose final answer has not come yet.
    propagations: HashSet<ClientTxnId>,
    /// The load-sharing routes' targets, probed with OPTIONS when probing is on.
    probes: Vec<Probe>,
    /// When the next round of probes is due (`None`: not started).
    probe_at: Option<Instant>,
    /// The server role's answer ([`Endpoint::set_overload_answer`]).
    answer: Option<OverloadAnswer>,
    /// `overload_offer` as Via parameters.
    offer_params: Vec<u8>,
    /// New INVITEs forwarded per next hop ([`ProxyConfig::advertise_offered_load`]).
    offered: HashMap<std::net::SocketAddr, OfferedRate>,
    /// New INVITEs from rate-answered clients since the last tally, and those clients.
    rate_invites: u64,
    rate_clients: HashSet<std::net::SocketAddr>,
    /// The same for window-answered clients.
    window_invites: u64,
    window_clients: HashSet<std::net::SocketAddr>,
    window_clients_before: usize,
    /// REGISTER 200s waiting for the store's commit, in ticket order.
    held: VecDeque<HeldResponse>,
    /// How many rate-answered clients the previous tally saw.
    rate_clients_before: usize,
    /// RFC 3263 resolution of DNS routes' next hops.
    dns: DnsCache,
    /// Requests waiting for DNS, in arrival order.
    parked: Vec<Parked>,
    /// How many of them wait for each name.
    parked_names: BTreeMap<DnsTarget, usize>,
    /// Whether the targets [`all_targets`](Self::all_targets) found came from DNS.
    targets_from_dns: bool,
    /// Per `hash_routes` entry with [`Pick::RoundRobin`]: each target's current weight of
    /// the smooth weighted round-robin.
    round_robin: Vec<Vec<f64>>,
    /// The target edge of the route [`all_targets`](Self::all_targets) took, if it names one.
    route_edge: Option<EdgeId>,
    /// Callees' egress edges learned from Record-Route ([`ProxyConfig::learn_edges`]).
    learned_edges: LearnedEdges,
    /// RFC 7200 subscriptions, both roles ([`ProxyConfig::load_control`]).
    lc: lc::LcState,
}

/// Stale Timer C entries the heap may hold beside twice the live branches before
/// [`Endpoint::after`] sweeps them out.
const STALE_TIMERS_KEPT: usize = 1024;

/// `accepted` grows as shard 7 of 8 of [`EarlyGrowth`] would: at 47% of its buckets.
const ACCEPTED_GROWTH_SHARD: usize = 7;

/// Most rate-answered clients remembered per interval.
const MAX_RATE_CLIENTS: usize = 4096;

/// Most alternative targets a request keeps for failover (RFC 3263 §4.3): a DNS answer
/// may list any number of addresses.
const MAX_ALTERNATIVES: usize = 32;

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("calls", &self.calls.len())
            .field("branches", &self.branches.len())
            .field("accepted", &self.accepted.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// The Reason (RFC 3326) of a 500 that stands for a lone downstream 503 (§16.7 step 6).
const REASON_503: &[u8] = b"SIP;cause=503;text=\"Service Unavailable\"";

/// Whether response `bytes` carries a `Reason: SIP;cause=503`.
fn stands_for_503(bytes: &[u8], limits: &holdline_sip::Limits) -> bool {
    let Ok(m) = Message::parse(bytes, limits) else {
        return false;
    };
    m.headers_named(b"Reason").any(|h| {
        let v = m.value(h);
        v.len() >= 4
            && v[..4].eq_ignore_ascii_case(b"SIP;")
            && v.windows(9).any(|w| w.eq_ignore_ascii_case(b"cause=503"))
    })
}

/// How a request's targets were found (for the relay policy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FoundBy {
    /// The location service: a served domain or this proxy's own address.
    Location,
    /// A configured static route (an exact domain or `*`).
    StaticRoute,
    /// The first Route left after preprocessing.
    Route,
    /// An IP address in the Request-URI.
    Literal,
}

/// One probed target as [`Endpoint::probed_targets`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbedTarget {
    /// Where its probes go.
    pub dest: Peer,
    /// Whether requests are routed to it (down after `down_after` failed probes in a row,
    /// up again at the first answered one).
    pub up: bool,
    /// Probes failed in a row (0 once one is answered).
    pub failures: u32,
}

/// A probed target of a load-sharing route (see [`ProxyConfig::probe`]).
#[derive(Debug)]
struct Probe {
    dest: Peer,
    up: bool,
    failures: u32,
    /// The probe in flight and when it fails if unanswered.
    pending: Option<(ClientTxnId, Instant)>,
}

/// A target of §16.5 with its next hop.
#[derive(Clone, Debug)]
struct Target {
    /// The Request-URI for this branch.
    uri: Vec<u8>,
    dest: Peer,
}

impl Endpoint {
    /// An endpoint with `config`, sharing `store` with the other workers.
    pub fn new(mut config: ProxyConfig, store: Arc<dyn LocationStore>) -> Self {
        config.txn.limits = config.limits;
        let config_dns = config.dns.clone();
        let mut offer_params = Vec::new();
        if let Some(o) = &config.overload_offer {
            o.write_params(&mut offer_params);
        }
        Self {
            txns: Transactions::new(config.txn),
            registrar: Registrar::new(config.registrar),
            auth: config.auth.clone().map(Authenticator::new),
            rng: Rng::seed_from_u64(config.branch_seed),
            config,
            store,
            calls: BTreeMap::new(),
            branches: BTreeMap::new(),
            accepted: HashMap::new(),
            accepted_growth: EarlyGrowth::new(),
            cancels: BTreeSet::new(),
            timers: BinaryHeap::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: EndpointStats::default(),
            bindings: Vec::new(),
            failover: Vec::new(),
            propagations: HashSet::new(),
            probes: Vec::new(),
            probe_at: None,
            answer: None,
            offer_params,
            offered: HashMap::new(),
            rate_invites: 0,
            rate_clients: HashSet::new(),
            window_invites: 0,
            window_clients: HashSet::new(),
            window_clients_before: 0,
            held: VecDeque::new(),
            rate_clients_before: 0,
            dns: DnsCache::new(config_dns),
            parked: Vec::new(),
            parked_names: BTreeMap::new(),
            targets_from_dns: false,
            round_robin: Vec::new(),
            route_edge: None,
            learned_edges: LearnedEdges::default(),
            lc: lc::LcState::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ProxyConfig {
        &self.config
    }

    /// Replaces the routing part of the configuration with `new`'s, for a reload that keeps
    /// calls and transactions: the domains, aliases, Record-Route switch, relay policy, the
    /// static, load-sharing and DNS routes, and the probing of load-sharing targets. Every
    /// other field of `new` is ignored. Transactions in progress finish on the next hop
    /// they were sent to; new requests follow the new routes. Probed targets that stay keep
    /// their state; new ones start up and are probed at once.
    pub fn reconfigure(&mut self, new: &ProxyConfig) {
        let c = &mut self.config;
        c.domains.clone_from(&new.domains);
        c.aliases.clone_from(&new.aliases);
        c.record_route = new.record_route;
        c.relay = new.relay.clone();
        c.static_routes.clone_from(&new.static_routes);
        c.hash_routes.clone_from(&new.hash_routes);
        c.dns_routes.clone_from(&new.dns_routes);
        self.round_robin.clear();
        c.probe = new.probe;
        c.learn_edges = new.learn_edges;
        // The routes may lead elsewhere now: learn the egress edges again.
        self.learned_edges.clear();
        let targets: Vec<Peer> = c
            .hash_routes
            .iter()
            .flat_map(|r| r.targets.iter().filter(|t| t.name.is_none()))
            .map(|t| Peer {
                addr: t.next_hop,
                transport: t.transport,
                conn: None,
            })
            .collect();
        if c.probe.is_some() {
            self.probes.retain(|p| targets.contains(&p.dest));
            // The next round enumerates the targets again (adding the new ones).
            self.probe_at = None;
        } else {
            self.probes.clear();
            self.probe_at = None;
        }
        self.stats.targets_down = self.probes.iter().filter(|p| !p.up).count() as u64;
    }

    /// The counters.
    pub fn stats(&self) -> &EndpointStats {
        &self.stats
    }

    /// The transaction table (read-only, for inspection).
    pub fn transactions(&self) -> &Transactions {
        &self.txns
    }

    /// The number of live response contexts (proxied requests awaiting or holding their
    /// final response).
    pub fn active_calls(&self) -> usize {
        self.calls.len()
    }

    /// The load-sharing targets this endpoint probes (empty until its first round of probes,
    /// or without probing), in configuration order: each one's address and transport, whether
    /// it counts as up, and its probes failed in a row.
    pub fn probed_targets(&self) -> impl Iterator<Item = ProbedTarget> + '_ {
        self.probes.iter().map(|p| ProbedTarget {
            dest: p.dest,
            up: p.up,
            failures: p.failures,
        })
    }

    /// The number of branches waiting for their final response. A branch keeps no record
    /// once final (an accepted INVITE branch keeps only the pair of transaction ids that
    /// forwarding a retransmitted 2xx needs).
    pub fn pending_branches(&self) -> usize {
        self.branches.len()
    }

    /// The number of Timer C entries held, live and stale (for inspection: stale ones are
    /// swept once they outnumber twice the pending branches by more than a thousand).
    pub fn timer_entries(&self) -> usize {
        self.timers.len()
    }

    /// Sets (or, with `None`, stops) the server role's overload answer: from now on every
    /// response sent to an upstream client that offered `oc` with `loss` carries it in its top
    /// Via (RFC 7339 §5.2). The driver updates it once per control interval.
    pub fn set_overload_answer(&mut self, answer: Option<OverloadAnswer>) {
        self.answer = answer;
    }

    /// The server role's current answer.
    pub fn overload_answer(&self) -> Option<OverloadAnswer> {
        self.answer
    }

    /// What the server role saw since the previous call: new INVITEs and distinct clients
    /// answered with the rate algorithm (the input of the driver's rate estimator). Starts a
    /// new count; each client's share of the next rate answers is divided among the clients
    /// of this tally (or of the current interval, if more).
    pub fn take_feedback_tally(&mut self) -> FeedbackTally {
        let t = FeedbackTally {
            rate_invites: std::mem::take(&mut self.rate_invites),
            rate_clients: self.rate_clients.len(),
            window_invites: std::mem::take(&mut self.window_invites),
            window_clients: self.window_clients.len(),
        };
        self.rate_clients_before = self.rate_clients.len();
        self.rate_clients.clear();
        self.window_clients_before = self.window_clients.len();
        self.window_clients.clear();
        t
    }

    /// The algorithm this endpoint answers `req`'s upstream client with, if it offered one
    /// answered here.
    fn answered_algo(&self, req: &Message<'_>) -> Option<OcAlgo> {
        let answer = self.answer?;
        let offer = OcOffer::from_via(&req.top_via().ok()?)?;
        offer.preferred(answer.supported())
    }

    /// Processes one message (a datagram, or one frame of a stream) that arrived from `from`
    /// on a listener of transport `local`.
    pub fn handle(&mut self, now: Instant, bytes: &[u8], from: Peer, local: Transport) {
        self.handle_forwarding(now, bytes, from, local, &mut |_, _| None);
    }

    /// [`handle`](Self::handle) with a forward gate: see
    /// [`handle_admitting`](Self::handle_admitting).
    fn handle_forwarding(
        &mut self,
        now: Instant,
        bytes: &[u8],
        from: Peer,
        local: Transport,
        forward: &mut dyn FnMut(Peer, Option<EdgeId>) -> Option<GateRejection>,
    ) {
        let parsed = Message::parse(bytes, &self.config.limits);
        self.handle_parsed(now, bytes, parsed, from, local, forward);
    }

    /// The body of [`handle`](Self::handle) once `bytes` went through `Message::parse`.
    fn handle_parsed(
        &mut self,
        now: Instant,
        bytes: &[u8],
        parsed: Result<Message<'_>, holdline_sip::ParseError>,
        from: Peer,
        local: Transport,
        forward: &mut dyn FnMut(Peer, Option<EdgeId>) -> Option<GateRejection>,
    ) {
        match parsed {
            Err(e) => {
                self.stats.parse_errors += 1;
                self.reject_unparsable(bytes, e, from);
            }
            Ok(msg) if msg.is_request() => match self.annotate_via(&msg, from) {
                Some(annotated) => match Message::parse(&annotated, &self.config.limits) {
                    Ok(m) => self.on_request(now, &m, from, local, forward),
                    Err(_) => self.drop_msg(DropReason::Internal),
                },
                None => self.on_request(now, &msg, from, local, forward),
            },
            Ok(msg) => self.on_response(now, &msg, from),
        }
        self.after(now);
    }

    /// [`handle`](Self::handle) behind an admission gate: a new INVITE — a well-formed INVITE
    /// request without a To tag that matches no live server transaction (a retransmission of
    /// an admitted INVITE is not new) — is first put to `admit`. If `admit` answers
    /// `Some(rejection)`, the INVITE is answered at once and statelessly with that response
    /// (no transaction, no routing, no location lookup) and `true` is returned; otherwise, and
    /// for every other message, this is `handle`.
    ///
    /// `admit` is asked at most once per message and only for new INVITEs: requests of calls
    /// already admitted (ACK, BYE, CANCEL, anything with a To tag), other requests and every
    /// response are never put to it. Its argument says whether the INVITE's upstream client
    /// takes this proxy's overload answer and the answer exempts it
    /// ([`OverloadAnswer::exempt`]): the driver then skips its controller, but may still reject
    /// for reasons of its own (an INVITE that waited too long to be read).
    ///
    /// The ACK of such a rejection (RFC 3261 §17.1.1.3: the caller acknowledges a non-2xx
    /// final response hop by hop) is recognised by the rejection's To tag and absorbed here
    /// without state; `true` is returned for it too (the message ended at the gate).
    ///
    /// `forward` is the forward gate (TCP smart forwarding): once a new INVITE is admitted and
    /// routed, it is asked about each next hop before the INVITE is sent there; a next hop it
    /// answers `Some` for is skipped, and when every next hop was skipped the INVITE gets that
    /// answer through its server transaction (the ACK is absorbed by the transaction).
    pub fn handle_admitting(
        &mut self,
        now: Instant,
        bytes: &[u8],
        from: Peer,
        local: Transport,
        admit: &mut dyn FnMut(Class, bool) -> Option<GateRejection>,
        forward: &mut dyn FnMut(Peer, Option<EdgeId>) -> Option<GateRejection>,
    ) -> bool {
        // Parsed once: the gate's classification and the handling share the index.
        let parsed = Message::parse(bytes, &self.config.limits);
        if let Ok(msg) = &parsed {
            match msg.method() {
                Some(Method::Register) => {
                    if let Some(ask) = self.registration_ask(now, msg)
                        && let Some(r) = admit(ask, false)
                    {
                        self.reject_at_gate(msg, from, r);
                        return true;
                    }
                }
                Some(Method::Invite)
                    if msg.to().is_ok_and(|to| to.tag().is_none())
                        && self.txns.matches_server(msg) == Ok(false) =>
                {
                    let algo = self.answered_algo(msg);
                    if algo == Some(OcAlgo::Rate) {
                        self.rate_invites += 1;
                        if self.rate_clients.len() < MAX_RATE_CLIENTS {
                            self.rate_clients.insert(from.addr);
                        }
                    } else if algo == Some(OcAlgo::Window) {
                        self.window_invites += 1;
                        if self.window_clients.len() < MAX_RATE_CLIENTS {
                            self.window_clients.insert(from.addr);
                        }
                    }
                    let exempt = self.answer.is_some_and(|a| match algo {
                        Some(OcAlgo::Window) => a.window_exempt,
                        Some(_) => a.exempt,
                        None => false,
                    });
                    if let Some(r) = admit(Class::NewInvite, exempt) {
                        self.reject_at_gate(msg, from, r);
                        return true;
                    }
                    if exempt {
                        self.stats.gate_exempt += 1;
                    }
                }
                Some(Method::Ack) if self.is_gate_ack(msg) => {
                    self.stats.requests_in.ack += 1;
                    self.stats.gate_acks_absorbed += 1;
                    return true;
                }
                _ => {}
            }
        }
        self.handle_parsed(now, bytes, parsed, from, local, forward);
        false
    }

    /// What a REGISTER would ask of the gate: `None` when it is not new work for this
    /// registrar — a retransmission of a REGISTER whose transaction is live (it is answered by
    /// that transaction), one with a To tag, or one for a domain this server does not serve
    /// (it is proxied, not registered); otherwise a refresh when its address-of-record (the
    /// To URI) has a live binding, else a new registration.
    fn registration_ask(&mut self, now: Instant, msg: &Message<'_>) -> Option<Class> {
        let to = msg.to().ok()?;
        if to.tag().is_some() || self.txns.matches_server(msg) != Ok(false) {
            return None;
        }
        let ruri = msg.request_uri().ok()?;
        let ours = ruri
            .host_bytes()
            .is_some_and(|h| self.config.serves(h) || is_me_uri(&self.config, &ruri));
        if !ours {
            return None;
        }
        let mut aor = Vec::with_capacity(64);
        let known = Registrar::aor_key(&to.uri, &mut aor) && self.store.has_bindings(&aor, now);
        Some(Class::of_register(known))
    }

    /// The To tag of the gate's stateless rejections of `req`: a keyed hash of the fields an
    /// ACK for that response repeats (Call-ID, From tag, CSeq number, top Via branch), so that
    /// the ACK is recognised without any state (RFC 3261 §8.2.7 suggests such tags for
    /// stateless responses; Kamailio's `sl` module does the same).
    fn gate_tag(&self, req: &Message<'_>) -> Option<[u8; GATE_TAG_LEN]> {
        let call_id = req.call_id().ok()?;
        let from = req.from().ok()?;
        let cseq = req.cseq().ok()?;
        let via = req.top_via().ok()?;
        let mut h = 0xcbf2_9ce4_8422_2325_u64 ^ self.config.gate_key;
        let mut eat = |bytes: &[u8]| {
            for &b in bytes {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
            h = (h ^ 0xff).wrapping_mul(0x0100_0000_01b3);
        };
        eat(call_id);
        eat(from.tag().unwrap_or_default());
        eat(&cseq.seq.to_be_bytes());
        eat(via.branch().unwrap_or_default());
        let mut tag = [0u8; GATE_TAG_LEN];
        tag[..GATE_TAG_PREFIX.len()].copy_from_slice(GATE_TAG_PREFIX);
        const HEX: &[u8; 16] = b"0123456789abcdef";
        for (i, t) in tag[GATE_TAG_PREFIX.len()..].iter_mut().enumerate() {
            *t = HEX[((h >> (60 - 4 * i)) & 0xf) as usize];
        }
        Some(tag)
    }

    /// Whether `ack` acknowledges one of the gate's stateless rejections.
    fn is_gate_ack(&self, ack: &Message<'_>) -> bool {
        let Ok(to) = ack.to() else { return false };
        match to.tag() {
            Some(t) if t.starts_with(GATE_TAG_PREFIX) => {
                self.gate_tag(ack).is_some_and(|want| t == want)
            }
            _ => false,
        }
    }

    /// Answers a new INVITE the gate rejected, statelessly.
    fn reject_at_gate(&mut self, req: &Message<'_>, to: Peer, r: GateRejection) {
        if let Some(m) = req.method() {
            *self.stats.requests_in.slot(m) += 1;
        }
        self.stats.rejected_by_gate += 1;
        self.send_gate_rejection(req, to, r);
    }

    /// Answers a request that found no target (`code`) through a new server transaction, as
    /// the stateful path does, so that its retransmissions get the same answer and the ACK
    /// of an INVITE's is absorbed (a CANCEL, which no transaction of ours awaits, statelessly).
    fn answer_statefully(
        &mut self,
        now: Instant,
        msg: &Message<'_>,
        from: Peer,
        code: u16,
        reason: &'static str,
    ) {
        if msg.method() == Some(Method::Cancel) {
            self.respond_stateless(msg, from, code, reason, &[]);
            return;
        }
        if let Some(sid) = self.new_server_txn(now, msg, from) {
            self.respond(now, sid, msg, code, reason, &[]);
        }
    }

    /// Hands a request (not an ACK) to the transaction layer: a new server transaction
    /// (counted) is returned for the caller to handle; a retransmission is absorbed, a
    /// request past the table's bound answered `503`, a malformed one `400`.
    fn new_server_txn(
        &mut self,
        now: Instant,
        msg: &Message<'_>,
        from: Peer,
    ) -> Option<ServerTxnId> {
        match self.txns.handle_parsed_request(now, msg, from) {
            RequestOutcome::New(sid) => {
                self.stats.server_transactions += 1;
                self.stats.server_transactions_total += 1;
                return Some(sid);
            }
            RequestOutcome::Retransmission(_) | RequestOutcome::AckAbsorbed(_) => {
                self.stats.retransmissions_absorbed += 1;
            }
            RequestOutcome::TooMany => {
                self.drop_msg(DropReason::TooManyTransactions);
                self.respond_stateless(
                    msg,
                    from,
                    503,
                    "Service Unavailable",
                    &[("Retry-After", b"5")],
                );
            }
            RequestOutcome::Malformed(e) => {
                self.stats.parse_errors += 1;
                self.respond_stateless(msg, from, 400, e.kind.reason(), &[]);
            }
            RequestOutcome::PassThrough => self.drop_msg(DropReason::Internal),
        }
        None
    }

    /// Answers `req` statelessly with rejection `r`, its To tag the gate's (so that its ACK
    /// is recognised and absorbed without state).
    fn send_gate_rejection(&mut self, req: &Message<'_>, to: Peer, r: GateRejection) {
        let secs = r.retry_after_secs.map(|s| s.to_string());
        let why = r.reason_header();
        let mut extra: Vec<(&str, &[u8])> = Vec::new();
        if let Some(s) = &secs {
            extra.push(("Retry-After", s.as_bytes()));
        }
        if let Some(w) = &why {
            extra.push(("Reason", w.as_bytes()));
        }
        let tag = self.gate_tag(req);
        let mut out = Vec::with_capacity(512);
        build_response(
            req,
            r.status,
            r.reason,
            tag.as_ref().map(|t| &t[..]),
            &extra,
            b"",
            &mut out,
        );
        self.out.push_back((to, out));
    }

    /// The store committed something (its commit listener fired, or the driver polls): sends
    /// every held REGISTER response whose change is now on disk
    /// ([`LocationStore::committed`]). Also done by [`handle_timeout`](Self::handle_timeout).
    pub fn handle_committed(&mut self, now: Instant) {
        self.release_held(now);
        self.after(now);
    }

    /// REGISTER responses waiting for the store's commit.
    pub fn held_responses(&self) -> usize {
        self.held.len()
    }

    /// Sends the held responses that are committed; answers `500` to those past their
    /// deadline.
    fn release_held(&mut self, now: Instant) {
        if self.held.is_empty() {
            return;
        }
        let committed = self.store.committed();
        while let Some(h) = self.held.front() {
            let timed_out = h.deadline <= now;
            if h.ticket > committed && !timed_out {
                break;
            }
            let Some(h) = self.held.pop_front() else {
                break;
            };
            let waited = now.saturating_duration_since(h.held_at);
            self.stats
                .register_commit_wait
                .record(u64::try_from(waited.as_micros()).unwrap_or(u64::MAX));
            let response = if h.ticket <= committed {
                h.response
            } else {
                self.stats.register_commit_timeouts += 1;
                let Ok(ok) = Message::parse(&h.response, &self.config.limits) else {
                    self.drop_msg(DropReason::Internal);
                    continue;
                };
                let mut out = Vec::with_capacity(h.response.len());
                build_response(
                    &ok,
                    500,
                    "Location Store Not Committed",
                    None,
                    &[("Retry-After", b"5")],
                    b"",
                    &mut out,
                );
                out
            };
            if self.txns.respond(now, h.sid, response).is_err() {
                self.drop_msg(DropReason::Internal);
            }
        }
    }

    /// Fires every timer due at or before `now`: the transaction layer's and Timer C.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.release_held(now);
        self.expire_parked(now);
        self.run_probes(now);
        self.run_load_control(now);
        self.txns.handle_timeout(now);
        while let Some(&Reverse((at, cid))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            if self.branches.get(&cid).and_then(|b| b.timer_at) == Some(at) {
                self.fire_timer(now, cid);
            }
        }
        self.after(now);
    }

    /// Appends the next message to send to `buf` and says where it goes, or `None`.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let start = buf.len();
        let t = match self.txns.poll_transmit(now, buf) {
            Some(t) => t,
            None => {
                let (peer, bytes) = self.out.pop_front()?;
                buf.extend_from_slice(&bytes);
                Transmit {
                    destination: peer,
                    size: bytes.len(),
                }
            }
        };
        let mut t = t;
        if let Some(rest) = buf.get(start..)
            && rest.starts_with(b"SIP/2.0 ")
            && let Some(&d) = rest.get(8)
            && (b'1'..=b'6').contains(&d)
        {
            self.stats.responses_out[usize::from(d - b'1')] += 1;
            if self.answer.is_some() {
                t.size = self.stamp_overload_answer(now, buf, start);
            }
        }
        Some(t)
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called, if ever.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        // A held REGISTER response whose commit has happened is due at once: a driver woken
        // by the store's commit listener finds it here without a call of its own.
        if self
            .held
            .front()
            .is_some_and(|h| h.ticket <= self.store.committed())
        {
            return Some(Instant::ZERO);
        }
        let timer_c = self.timers.peek().map(|Reverse((at, _))| *at);
        let held = self.held.front().map(|h| h.deadline);
        let probe = match self.config.probe {
            None => None,
            // Not started yet: due at once.
            Some(_) if self.probe_at.is_none() => Some(Instant::ZERO),
            Some(_) => self
                .probes
                .iter()
                .filter_map(|p| p.pending.map(|(_, at)| at))
                .chain(self.probe_at)
                .min(),
        };
        let parked = self.parked.iter().map(|p| p.deadline).min();
        let lc = self.lc_timeout();
        let ours = [timer_c, held, probe, parked, lc]
            .into_iter()
            .flatten()
            .min();
        match (self.txns.poll_timeout(), ours) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next event for the driver, or `None`.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<EndpointEvent> {
        self.events.pop_front()
    }

    /// The next DNS lookup the driver must make for a DNS route's next hop (RFC 3263), or
    /// `None`. Drain it like [`poll_event`](Self::poll_event) after every call; give each
    /// answer back with [`handle_dns_response`](Self::handle_dns_response). The requests that
    /// wait for it are parked meanwhile; every other request goes on as usual.
    #[must_use]
    pub fn poll_dns_query(&mut self) -> Option<DnsQuery> {
        self.dns.poll_query()
    }

    /// The answer to a lookup from [`poll_dns_query`](Self::poll_dns_query): cached, and
    /// every request waiting for DNS is routed again (sent on when its next hop is now known,
    /// answered `503` when the name leads nowhere, left waiting for further lookups).
    pub fn handle_dns_response(&mut self, now: Instant, response: DnsResponse) {
        self.dns.handle_response(now, response);
        self.resume_parked(now);
        self.after(now);
    }

    /// The DNS cache's counters.
    pub fn dns_stats(&self) -> DnsStats {
        self.dns.stats()
    }

    // ------------------------------------------------------------------ bookkeeping

    fn drop_msg(&mut self, reason: DropReason) {
        self.stats.drops[reason.index()] += 1;
        self.push_event(EndpointEvent::Dropped(reason));
    }

    fn push_event(&mut self, e: EndpointEvent) {
        if self.events.len() < MAX_EVENTS {
            self.events.push_back(e);
        } else {
            self.stats.events_lost += 1;
        }
    }

    /// Processes the transaction layer's events and prunes stale timers.
    fn after(&mut self, now: Instant) {
        while let Some(e) = self.txns.poll_event() {
            self.on_txn_event(now, e);
        }
        while let Some(&Reverse((at, cid))) = self.timers.peek() {
            if self.branches.get(&cid).and_then(|b| b.timer_at) == Some(at) {
                break;
            }
            self.timers.pop();
        }
        // A ringing branch at the top (Timer C: 180 s) keeps every stale entry behind it;
        // when they outnumber the live ones, they go all at once.
        if self.timers.len() > 2 * self.branches.len() + STALE_TIMERS_KEPT {
            let branches = &self.branches;
            self.timers.retain(|Reverse((at, cid))| {
                branches.get(cid).and_then(|b| b.timer_at) == Some(*at)
            });
        }
    }

    fn on_txn_event(&mut self, now: Instant, e: TxnEvent) {
        if let TxnEvent::ClientTimeout(cid)
        | TxnEvent::TransportError(TxnId::Client(cid))
        | TxnEvent::Terminated(TxnId::Client(cid)) = e
            && self.lc_failed(now, cid)
        {
            return;
        }
        if let TxnEvent::ClientTimeout(cid) | TxnEvent::TransportError(TxnId::Client(cid)) = e
            && self.propagations.remove(&cid)
        {
            self.stats.registration_copies_failed += 1;
            return;
        }
        if let TxnEvent::ClientTimeout(cid) | TxnEvent::TransportError(TxnId::Client(cid)) = e
            && self.probe_of(cid).is_some()
        {
            self.probe_done(now, cid, false);
            return;
        }
        match e {
            TxnEvent::ClientTimeout(cid) if !self.cancels.contains(&cid) => {
                self.branch_final(now, cid, 408, None);
            }
            // §16.9: a transport error counts as a 503 from that branch.
            TxnEvent::TransportError(TxnId::Client(cid)) if !self.cancels.contains(&cid) => {
                self.branch_final(now, cid, 503, None);
            }
            TxnEvent::Terminated(TxnId::Client(cid)) => {
                self.stats.client_transactions = self.stats.client_transactions.saturating_sub(1);
                if !self.cancels.remove(&cid) && self.accepted.remove(&cid).is_none() {
                    // A branch still here never got its final response.
                    self.branch_final(now, cid, 408, None);
                }
            }
            TxnEvent::Terminated(TxnId::Server(sid)) => {
                self.stats.server_transactions = self.stats.server_transactions.saturating_sub(1);
                self.calls.remove(&sid);
            }
            _ => {}
        }
    }

    /// The probe whose OPTIONS is client transaction `cid`, if any.
    fn probe_of(&self, cid: ClientTxnId) -> Option<usize> {
        self.probes
            .iter()
            .position(|p| p.pending.is_some_and(|(c, _)| c == cid))
    }

    /// Records the outcome of probe transaction `cid`: answered (alive) or failed. A target
    /// that goes down takes with it the branches sent to it that never heard anything: they
    /// fail (as a 503) and fail over now, instead of waiting for their own timeout.
    fn probe_done(&mut self, now: Instant, cid: ClientTxnId, alive: bool) {
        let Some(i) = self.probe_of(cid) else {
            return;
        };
        let down_after = self.config.probe.map_or(1, |p| p.down_after.max(1));
        let p = &mut self.probes[i];
        p.pending = None;
        let was_up = p.up;
        if alive {
            p.failures = 0;
            p.up = true;
        } else {
            self.stats.probes_failed += 1;
            p.failures = p.failures.saturating_add(1);
            if p.failures >= down_after {
                p.up = false;
            }
        }
        let (went_down, dest) = (was_up && !p.up, p.dest);
        self.stats.targets_down = self.probes.iter().filter(|p| !p.up).count() as u64;
        if went_down {
            let silent: Vec<ClientTxnId> = self
                .branches
                .iter()
                .filter(|(_, b)| b.dest == dest && b.state == BranchState::Calling)
                .map(|(c, _)| *c)
                .collect();
            for c in silent {
                self.branch_final(now, c, 503, None);
                self.txns.abandon(TxnId::Client(c));
            }
        }
    }

    /// Probing: probes unanswered past their timeout fail (their transactions are
    /// abandoned), and a round of OPTIONS goes out when due, one per target without one in
    /// flight.
    fn run_probes(&mut self, now: Instant) {
        let Some(cfg) = self.config.probe else {
            return;
        };
        if self.probe_at.is_none() {
            // The targets, once: every load-sharing route's, each address once.
            for r in &self.config.hash_routes {
                // Named targets are not probed: DNS failover and failed marking cover them.
                for t in r.targets.iter().filter(|t| t.name.is_none()) {
                    let dest = Peer {
                        addr: t.next_hop,
                        transport: t.transport,
                        conn: None,
                    };
                    if !self.probes.iter().any(|p| p.dest == dest) {
                        self.probes.push(Probe {
                            dest,
                            up: true,
                            failures: 0,
                            pending: None,
                        });
                    }
                }
            }
            self.probe_at = Some(now);
        }
        let late: Vec<ClientTxnId> = self
            .probes
            .iter()
            .filter_map(|p| p.pending.filter(|&(_, at)| at <= now).map(|(c, _)| c))
            .collect();
        for cid in late {
            self.probe_done(now, cid, false);
            self.txns.abandon(TxnId::Client(cid));
        }
        if self.probe_at.is_none_or(|at| at > now) {
            return;
        }
        self.probe_at = Some(now + cfg.interval);
        for i in 0..self.probes.len() {
            if self.probes[i].pending.is_some() {
                continue;
            }
            let dest = self.probes[i].dest;
            let request = self.options_probe(dest);
            if let Ok(cid) = self.txns.send_request(now, request, dest) {
                self.stats.probes_sent += 1;
                self.probes[i].pending = Some((cid, now + cfg.timeout));
            }
        }
    }

    /// An OPTIONS to `dest` from this proxy (a keep-alive probe, RFC 3261 §11).
    fn options_probe(&mut self, dest: Peer) -> Vec<u8> {
        let out_l = self.config.listener(dest.transport).copied();
        let sent_by = out_l.map(|l| host_port(l.addr)).unwrap_or_default();
        let tag = self.new_tag();
        let tag = String::from_utf8_lossy(&tag).into_owned();
        // A Call-ID this worker owns, or the answer goes to another worker and the probe
        // fails (every other one with two workers). A fresh branch per try: with `n`
        // workers `n` tries on average; after 64·n (never seen) the last one goes anyway.
        let tries = self.config.shard.map_or(1, |s| 64 * s.workers.max(1));
        let mut branch = String::new();
        for _ in 0..tries {
            branch = String::from_utf8_lossy(&self.new_tag()).into_owned();
            let call_id = format!("probe-{branch}@{sent_by}");
            if self.config.shard.is_none_or(|s| s.owns(call_id.as_bytes())) {
                break;
            }
        }
        let t = dest.transport;
        let target = host_port(dest.addr);
        format!(
            "OPTIONS sip:{target};transport={tp} SIP/2.0\r\n\
             Via: SIP/2.0/{via} {sent_by};branch=z9hG4bK{branch};rport\r\n\
             Max-Forwards: 70\r\n\
             From: <sip:holdline@{sent_by}>;tag={tag}\r\n\
             To: <sip:{target}>\r\n\
             Call-ID: probe-{branch}@{sent_by}\r\n\
             CSeq: 1 OPTIONS\r\n\
             Content-Length: 0\r\n\r\n",
            tp = t.as_param_str(),
            via = t.as_via_str(),
        )
        .into_bytes()
    }

    /// Whether the load-sharing target `dest` is down (probing on and its probes failing).
    fn target_down(&self, dest: &Peer) -> bool {
        self.probes.iter().any(|p| !p.up && p.dest == *dest)
    }

    fn new_tag(&mut self) -> [u8; 10] {
        let mut tag = [0u8; 10];
        self.rng.fill_token(&mut tag);
        tag
    }

    /// Builds a response to `req` generated by the proxy (a To tag is added except for 100).
    fn build(
        &mut self,
        req: &Message<'_>,
        code: u16,
        reason: &str,
        extra: &[(&str, &[u8])],
    ) -> Vec<u8> {
        let tag = self.new_tag();
        let mut out = Vec::with_capacity(512);
        let tag = (code > 100).then_some(&tag[..]);
        build_response(req, code, reason, tag, extra, b"", &mut out);
        out
    }

    /// Answers through server transaction `sid`.
    fn respond(
        &mut self,
        now: Instant,
        sid: ServerTxnId,
        req: &Message<'_>,
        code: u16,
        reason: &str,
        extra: &[(&str, &[u8])],
    ) {
        let resp = self.build(req, code, reason, extra);
        if self.txns.respond(now, sid, resp).is_err() {
            self.drop_msg(DropReason::Internal);
        }
    }

    /// Answers without a transaction, to where the request came from.
    fn respond_stateless(
        &mut self,
        req: &Message<'_>,
        to: Peer,
        code: u16,
        reason: &str,
        extra: &[(&str, &[u8])],
    ) {
        let resp = self.build(req, code, reason, extra);
        self.out.push_back((to, resp));
    }

    // ------------------------------------------------------------------ requests

    /// A message `Message::parse` rejected: a request whose Request-Line is sound and whose
    /// Via, Call-ID and CSeq can be read gets `400` with the error's reason phrase (`505
    /// Version Not Supported` for a well-formed version other than SIP/2.0, RFC 3261 §21.5.7);
    /// anything else (a response, an ACK, garbage) is dropped and counted.
    fn reject_unparsable(&mut self, bytes: &[u8], e: holdline_sip::ParseError, from: Peer) {
        let code = match e.kind {
            holdline_sip::ParseErrorKind::UnsupportedVersion => 505,
            _ => 400,
        };
        let answered = salvage_request(bytes, e, &self.config.limits).is_some_and(|head| {
            let Ok(m) = Message::parse(&head, &self.config.limits) else {
                return false;
            };
            let answerable = m.method().is_some_and(|m| m != Method::Ack)
                && m.top_via().is_ok()
                && m.call_id().is_ok()
                && m.cseq().is_ok();
            if answerable {
                self.respond_stateless(&m, from, code, e.kind.reason(), &[]);
            }
            answerable
        });
        if !answered {
            self.drop_msg(DropReason::Unparsable);
        }
    }

    /// RFC 3261 §18.2.1 and RFC 3581: the top Via gets `received` when its host is not the
    /// source address or it asks for `rport`, and `rport` gets the source port. Returns the
    /// edited message, or `None` when nothing changes (or the Via is malformed: validation
    /// answers that).
    fn annotate_via(&self, msg: &Message<'_>, from: Peer) -> Option<Vec<u8>> {
        let via = msg.top_via().ok()?;
        let ip = from.addr.ip();
        let rport = via.rport().is_some();
        if via.host.ip() == Some(ip) && !rport {
            return None;
        }
        let mut ed = Editor::new(msg);
        ed.annotate_top_via(Some(ip), rport.then_some(from.addr.port()))
            .ok()?;
        let mut out = Vec::with_capacity(msg.as_bytes().len() + 48);
        ed.emit(&mut out);
        Some(out)
    }

    /// The syntax checks a request must pass before anything else (§16.3 step 1): mandatory
    /// headers, a parsable Request-URI, top Via, From, To and Route.
    fn check_request<'a>(
        &self,
        msg: &Message<'a>,
    ) -> Result<RoutePlan<'a>, holdline_sip::ParseError> {
        match msg.check_mandatory() {
            Ok(()) => {}
            // §16.3 step 3: a request without Max-Forwards passes (one is added when
            // forwarding); the CSeq check that follows it in `check_mandatory` is redone.
            Err(e)
                if e.kind
                    == holdline_sip::ParseErrorKind::MissingHeader(HeaderName::MaxForwards) =>
            {
                let cseq = msg.cseq()?;
                let m = msg.method();
                if m.is_some_and(|m| m != cseq.method && m != Method::Ack && m != Method::Cancel) {
                    return Err(holdline_sip::ParseError::new(
                        holdline_sip::ParseErrorKind::BadHeader(HeaderName::CSeq),
                        0,
                    ));
                }
            }
            Err(e) => return Err(e),
        }
        msg.top_via()?;
        msg.from()?;
        msg.to()?;
        RoutePlan::new(&self.config, msg)
    }

    fn on_request(
        &mut self,
        now: Instant,
        msg: &Message<'_>,
        from: Peer,
        local: Transport,
        forward: &mut dyn FnMut(Peer, Option<EdgeId>) -> Option<GateRejection>,
    ) {
        let Some(method) = msg.method() else { return };
        *self.stats.requests_in.slot(method) += 1;
        let plan = match self.check_request(msg) {
            Ok(p) => p,
            Err(e) => {
                self.stats.parse_errors += 1;
                if method == Method::Ack {
                    self.drop_msg(DropReason::Malformed);
                } else {
                    self.respond_stateless(msg, from, 400, e.kind.reason(), &[]);
                }
                return;
            }
        };
        if method == Method::Ack {
            match self.txns.handle_parsed_request(now, msg, from) {
                RequestOutcome::PassThrough => self.forward_stateless(now, msg, &plan, from, local),
                RequestOutcome::AckAbsorbed(_) => self.stats.acks_absorbed += 1,
                RequestOutcome::Retransmission(_) => self.stats.retransmissions_absorbed += 1,
                RequestOutcome::New(sid) => {
                    // Not expected for an ACK; do not leave a transaction waiting for us.
                    self.stats.server_transactions += 1;
                    self.stats.server_transactions_total += 1;
                    self.txns.abandon(TxnId::Server(sid));
                }
                RequestOutcome::TooMany => self.drop_msg(DropReason::TooManyTransactions),
                RequestOutcome::Malformed(_) => self.drop_msg(DropReason::Malformed),
            }
            return;
        }
        if self.is_stateless(&plan) {
            self.stateless_request(now, msg, &plan, from, local);
            return;
        }
        if self.config.mode == ProxyMode::Stateless && self.stateless_candidate(msg, &plan) {
            match self.try_stateless(now, msg, &plan, from, local, forward) {
                Ok(()) => return,
                // Handled statefully below.
                Err(why) => self.stats.stateless_fallbacks[why.index()] += 1,
            }
        }
        if let Some(sid) = self.new_server_txn(now, msg, from) {
            self.on_new_request(now, sid, method, msg, &plan, from, local, forward);
        }
    }

    /// Whether the request goes out on a stateless static route: not for us, no Route left,
    /// and the route for its Request-URI host is flagged stateless.
    fn is_stateless(&self, plan: &RoutePlan<'_>) -> bool {
        if plan.next_route.is_some() || is_me_uri(&self.config, &plan.ruri) {
            return false;
        }
        let host = plan.ruri.host_bytes().unwrap_or_default();
        !self.config.serves(host)
            && self.config.dns_route(host).is_none()
            && self.config.static_route(host).is_some_and(|r| r.stateless)
    }

    /// Whether the request is addressed to the proxy itself (OPTIONS health probe).
    fn addressed_to_us(&self, plan: &RoutePlan<'_>) -> bool {
        if plan.next_route.is_some() {
            return false;
        }
        let me = is_me_uri(&self.config, &plan.ruri);
        let host = plan.ruri.host_bytes().unwrap_or_default();
        plan.ruri.user().is_none() && (me || self.config.serves(host))
    }

    /// Whether an OPTIONS is answered by the proxy although its Request-URI has a user part:
    /// the URI names one of the proxy's own addresses (a health check or a scanner sends
    /// `OPTIONS sip:100@IP`), not a served domain, and no Route is left.
    fn options_for_us(&self, plan: &RoutePlan<'_>) -> bool {
        let host = plan.ruri.host_bytes().unwrap_or_default();
        plan.next_route.is_none()
            && is_me_uri(&self.config, &plan.ruri)
            && !self.config.serves(host)
    }

    /// The §16.3 checks after syntax: Max-Forwards, Proxy-Require and loops. Returns the
    /// error response to send, if any.
    fn validate(
        &self,
        msg: &Message<'_>,
        plan: &RoutePlan<'_>,
    ) -> Option<(u16, &'static str, Option<Vec<u8>>)> {
        if msg.max_forwards().ok().flatten() == Some(0) {
            return Some((483, "Too Many Hops", None));
        }
        let required: Vec<&[u8]> = msg
            .values(HeaderName::ProxyRequire)
            .map(|v| v.bytes)
            .collect();
        if !required.is_empty() {
            return Some((420, "Bad Extension", Some(required.join(&b", "[..]))));
        }
        let hash = plan.loop_hash(msg);
        let looped = msg.vias().flatten().any(|v| {
            is_our_via(&self.config, &v) && v.branch().and_then(branch_loop_hash) == Some(hash)
        });
        if looped {
            return Some((482, "Loop Detected", None));
        }
        None
    }

    #[allow(clippy::too_many_arguments)]
    fn on_new_request(
        &mut self,
        now: Instant,
        sid: ServerTxnId,
        method: Method<'_>,
        msg: &Message<'_>,
        plan: &RoutePlan<'_>,
        from: Peer,
        local: Transport,
        forward: &mut dyn FnMut(Peer, Option<EdgeId>) -> Option<GateRejection>,
    ) {
        if method == Method::Cancel {
            self.on_cancel(now, sid, msg, plan, from, local);
            return;
        }
        let to_us = self.addressed_to_us(plan);
        if method == Method::Options && (to_us || self.options_for_us(plan)) {
            self.respond(
                now,
                sid,
                msg,
                200,
                "OK",
                &[("Allow", ALLOW), ("Accept", b"application/sdp")],
            );
            return;
        }
        // RFC 7200: a NOTIFY of one of our load-control subscriptions, a SUBSCRIBE to ours.
        if method == Method::Notify && lc::is_load_control(msg) {
            if self.lc_notify_in(now, sid, msg) {
                return;
            }
            // For this server but of no subscription of ours (ended, or never made).
            if to_us || self.options_for_us(plan) {
                self.respond(now, sid, msg, 481, "Subscription Does Not Exist", &[]);
                return;
            }
        }
        if method == Method::Subscribe
            && (to_us || self.options_for_us(plan))
            && lc::is_load_control(msg)
        {
            self.lc_subscribe(now, sid, msg, from);
            return;
        }
        if let Some((code, reason, unsupported)) = self.validate(msg, plan) {
            let extra: Vec<(&str, &[u8])> = unsupported
                .as_deref()
                .map(|u| ("Unsupported", u))
                .into_iter()
                .collect();
            self.respond(now, sid, msg, code, reason, &extra);
            return;
        }
        let host = plan.ruri.host_bytes().unwrap_or_default();
        let for_registrar = method == Method::Register
            && plan.next_route.is_none()
            && (self.config.serves(host) || is_me_uri(&self.config, &plan.ruri));
        // A copy from a server that propagates its registrations here is not challenged.
        let copy = for_registrar && self.is_registration_peer(from);
        let consumed = if copy {
            None
        } else {
            // Challenged or refused: answered already.
            let Ok(consumed) = self.authenticate(now, sid, msg, for_registrar, from) else {
                return;
            };
            consumed
        };
        if for_registrar {
            // A copy's binding keeps the phone's address, not the sending server's: the
            // phone's Via, as that server annotated it, is the second.
            let source = if copy {
                msg.vias()
                    .flatten()
                    .nth(1)
                    .as_ref()
                    .and_then(via_destination)
                    .unwrap_or(from)
            } else {
                from
            };
            let mut out = Vec::with_capacity(512);
            let r = self
                .registrar
                .register(now, msg, source, &*self.store, &mut out);
            if r.changed && !copy {
                self.propagate_registration(now, msg, from);
            }
            // A 200 that changed the store promises the change: with a store that can say
            // when it is on disk, the response waits for that (group commit).
            if r.changed
                && let Some(ticket) = self.store.commit_ticket()
                && self.store.committed() < ticket
            {
                self.stats.register_commit_waits += 1;
                self.held.push_back(HeldResponse {
                    ticket,
                    sid,
                    response: out,
                    held_at: now,
                    deadline: now + self.config.commit_timeout,
                });
                return;
            }
            if self.txns.respond(now, sid, out).is_err() {
                self.drop_msg(DropReason::Internal);
            }
            return;
        }
        if to_us {
            self.respond(
                now,
                sid,
                msg,
                405,
                "Method Not Allowed",
                &[("Allow", ALLOW)],
            );
            return;
        }
        self.route_and_forward(now, sid, msg, plan, from, local, consumed, forward, None);
    }

    /// §16.5 onwards for a new request that passed validation and authentication: its
    /// targets, the forward gate, its response context and its branches. A request whose
    /// next hop's name is being resolved is parked until the answer comes (`parked`: it was
    /// parked before, until that deadline).
    #[allow(clippy::too_many_arguments)]
    fn route_and_forward(
        &mut self,
        now: Instant,
        sid: ServerTxnId,
        msg: &Message<'_>,
        plan: &RoutePlan<'_>,
        from: Peer,
        local: Transport,
        consumed: Option<Span>,
        forward: &mut dyn FnMut(Peer, Option<EdgeId>) -> Option<GateRejection>,
        parked: Option<Instant>,
    ) {
        let Some(method) = msg.method() else { return };
        let in_dialog = msg.to().is_ok_and(|to| to.tag().is_some());
        let authenticated = consumed.is_some();
        let mut targets = match self.targets(now, plan, true, &from, in_dialog, authenticated) {
            Ok(t) => t,
            Err(NoTargets::Answer(code, reason)) => {
                self.respond(now, sid, msg, code, reason, &[]);
                return;
            }
            Err(NoTargets::Resolving(target)) => {
                self.park(now, sid, msg, target, from, local, consumed, parked);
                return;
            }
        };
        let invite = method == Method::Invite;
        if self.config.mode == ProxyMode::Redirect
            && method != Method::Ack
            && !targets.is_empty()
            && msg.to().is_ok_and(|to| to.tag().is_none())
        {
            self.redirect(now, sid, msg, plan, &targets);
            return;
        }
        // RFC 7200: a new request for a notifier whose filters turn it away gets 503.
        if msg.to().is_ok_and(|to| to.tag().is_none())
            && self.load_filtered(now, msg, plan, &targets)
        {
            self.respond(now, sid, msg, 503, "Service Unavailable", &[]);
            return;
        }
        // The forward gate (TCP smart forwarding): a new INVITE goes only to the next hops
        // whose gate admits it; with none left it is answered with the gate's rejection.
        let mut learn_keys = None;
        if invite && msg.to().is_ok_and(|to| to.tag().is_none()) {
            if self.config.advertise_offered_load {
                // Offered: counted before the gate, rejected or not.
                for t in &targets {
                    self.count_offered(now, t.dest);
                }
            }
            let mut rejection = None;
            if self.config.learn_edges && self.route_edge.is_none() {
                learn_keys = LearnKeys::of(&plan.ruri);
                self.route_edge = learn_keys.and_then(|k| self.learned_edges.edge_of(now, k));
            }
            let edge = self.route_edge;
            targets.retain(|t| match forward(t.dest, edge) {
                Some(r) => {
                    rejection = Some(r);
                    false
                }
                None => true,
            });
            if targets.is_empty()
                && let Some(r) = rejection
            {
                self.stats.rejected_by_forward_gate += 1;
                let secs = r.retry_after_secs.map(|s| s.to_string());
                let why = r.reason_header();
                let mut extra: Vec<(&str, &[u8])> =
                    secs.iter().map(|s| ("Retry-After", s.as_bytes())).collect();
                if let Some(w) = &why {
                    extra.push(("Reason", w.as_bytes()));
                }
                self.respond(now, sid, msg, r.status, r.reason, &extra);
                return;
            }
        }
        // A parked INVITE was answered 100 when it was parked.
        if invite && parked.is_none() {
            self.respond(now, sid, msg, 100, "Trying", &[]);
        }
        let alternatives = if targets.len() == 1 {
            std::mem::take(&mut self.failover)
        } else {
            Vec::new()
        };
        let dns = std::mem::take(&mut self.targets_from_dns);
        self.calls.insert(
            sid,
            Call {
                invite,
                request: msg.as_bytes().to_vec(),
                branches: Vec::new(),
                pending: 0,
                best: None,
                final_sent: false,
                alternatives,
                local,
                dns,
                edge: self.route_edge,
                learn_keys,
            },
        );
        for t in targets {
            self.start_branch(now, sid, msg, plan, &t, local, consumed);
        }
        self.maybe_finish(now, sid);
    }

    /// Whether the load-control filters of one of `targets`' next hops turn this new request
    /// away (counted either way when a filter matched it).
    fn load_filtered(
        &mut self,
        now: Instant,
        msg: &Message<'_>,
        plan: &RoutePlan<'_>,
        targets: &[Target],
    ) -> bool {
        use crate::load_control::{CallView, Verdict};
        if self.lc_filters().rules() == 0 {
            return false;
        }
        let from_uri = msg.from().ok().map(|f| f.uri.as_bytes());
        let call = CallView {
            method: msg.method().map_or(&b""[..], |m| m.as_bytes()),
            caller: from_uri,
            callee: Some(plan.ruri.as_bytes()),
        };
        let wall = self.wall_s(now);
        for t in targets {
            match self.lc_filters().decide(now, wall, t.dest.addr, &call) {
                Verdict::NoMatch => {}
                Verdict::Accept => {
                    self.stats.load_control.accepted += 1;
                    return false;
                }
                Verdict::Reject(_) => {
                    self.stats.load_control.rejected += 1;
                    return true;
                }
            }
        }
        false
    }

    /// Whether `from` is one of the servers registrations are propagated to (and from).
    fn is_registration_peer(&self, from: Peer) -> bool {
        self.config
            .propagate_registrations
            .iter()
            .any(|p| p.addr.ip() == from.addr.ip())
    }

    /// Copies an accepted REGISTER (received from `from`) to every server of
    /// [`ProxyConfig::propagate_registrations`]: the request as received, its top Via
    /// annotated with where it came from (so that the backup can reach the phone), under a
    /// Via of ours, each in a client transaction of its own (retransmitted, answered or
    /// timed out like any other) whose answer is only counted.
    fn propagate_registration(&mut self, now: Instant, msg: &Message<'_>, from: Peer) {
        if self.config.propagate_registrations.is_empty() {
            return;
        }
        let annotated = self.annotate_via(msg, from);
        let request = annotated.as_deref().unwrap_or(msg.as_bytes());
        let Some(eol) = request.windows(2).position(|w| w == b"\r\n") else {
            return;
        };
        for i in 0..self.config.propagate_registrations.len() {
            let dest = self.config.propagate_registrations[i];
            self.stats.registrations_propagated += 1;
            let Some(l) = self.config.listener(dest.transport).copied() else {
                self.stats.registration_copies_failed += 1;
                continue;
            };
            let branch = String::from_utf8_lossy(&self.new_tag()).into_owned();
            let via = format!(
                "Via: SIP/2.0/{} {};branch=z9hG4bK{branch};rport\r\n",
                dest.transport.as_via_str(),
                host_port(l.addr)
            );
            let mut copy = Vec::with_capacity(request.len() + via.len());
            copy.extend_from_slice(&request[..eol + 2]);
            copy.extend_from_slice(via.as_bytes());
            copy.extend_from_slice(&request[eol + 2..]);
            match self.txns.send_request(now, copy, dest) {
                Ok(cid) => {
                    self.propagations.insert(cid);
                }
                Err(_) => self.stats.registration_copies_failed += 1,
            }
        }
    }

    /// [`ProxyMode::Redirect`]: answers `302 Moved Temporarily` with a Contact per target
    /// (§8.3): a binding's contact as it was registered, otherwise the Request-URI's user at
    /// the target's address (its transport as a URI parameter unless UDP); the failover
    /// order of a single target after it. With more than one Contact, `q` falls from 1.0 by
    /// 0.1 in that order (RFC 3261 §20.10), so that a caller tries them as this proxy would.
    fn redirect(
        &mut self,
        now: Instant,
        sid: ServerTxnId,
        msg: &Message<'_>,
        plan: &RoutePlan<'_>,
        targets: &[Target],
    ) {
        let ruri = plan.ruri.as_bytes();
        let user = plan.ruri.user().map(<[u8]>::to_vec);
        let at = |dest: &Peer| {
            let mut c = b"sip:".to_vec();
            if let Some(u) = &user {
                c.extend_from_slice(u);
                c.push(b'@');
            }
            c.extend_from_slice(host_port(dest.addr).as_bytes());
            if dest.transport != Transport::Udp {
                c.extend_from_slice(b";transport=");
                c.extend_from_slice(dest.transport.as_param_str().as_bytes());
            }
            c
        };
        let mut uris: Vec<Vec<u8>> = targets
            .iter()
            .map(|t| {
                if t.uri.as_slice() == ruri {
                    at(&t.dest)
                } else {
                    t.uri.clone()
                }
            })
            .collect();
        if targets.len() == 1 {
            for alt in std::mem::take(&mut self.failover) {
                uris.push(at(&alt));
            }
        }
        self.targets_from_dns = false;
        let many = uris.len() > 1;
        let contacts: Vec<Vec<u8>> = uris
            .iter()
            .enumerate()
            .map(|(i, u)| {
                let mut c = b"<".to_vec();
                c.extend_from_slice(u);
                c.push(b'>');
                if many {
                    let q = 10usize.saturating_sub(i).max(1);
                    let q = if q == 10 {
                        "1.0".to_owned()
                    } else {
                        format!("0.{q}")
                    };
                    c.extend_from_slice(b";q=");
                    c.extend_from_slice(q.as_bytes());
                }
                c
            })
            .collect();
        let extra: Vec<(&str, &[u8])> =
            contacts.iter().map(|c| ("Contact", c.as_slice())).collect();
        self.stats.redirected += 1;
        self.respond(now, sid, msg, 302, "Moved Temporarily", &extra);
    }

    /// Sends `msg` to target `t` in a new client transaction, a branch of context `sid`; a
    /// branch that cannot start fails at once, as with a transport error (§16.9).
    #[allow(clippy::too_many_arguments)]
    fn start_branch(
        &mut self,
        now: Instant,
        sid: ServerTxnId,
        msg: &Message<'_>,
        plan: &RoutePlan<'_>,
        t: &Target,
        local: Transport,
        consumed: Option<Span>,
    ) {
        let invite = msg.method() == Some(Method::Invite);
        let edge = self.calls.get(&sid).and_then(|c| c.edge);
        let hash = plan.loop_hash(msg);
        let mut token = [0u8; 10];
        self.rng.fill_token(&mut token);
        let branch = format!(
            "z9hG4bK{hash:016x}.{}",
            std::str::from_utf8(&token).unwrap_or("x")
        );
        let offered = (invite && self.config.advertise_offered_load)
            .then(|| self.offered_params(now, msg, t.dest))
            .flatten();
        let result = self
            .forward_copy(
                msg,
                plan,
                Some(&t.uri),
                t.dest,
                &branch,
                local,
                consumed,
                true,
                offered.as_deref(),
            )
            .ok()
            .map(|bytes| self.txns.send_request(now, bytes, t.dest));
        match result {
            Some(Ok(cid)) => {
                self.stats.client_transactions += 1;
                self.stats.forwarded += 1;
                let timer_at = invite.then(|| now + self.config.timer_c);
                if let Some(at) = timer_at {
                    self.timers.push(Reverse((at, cid)));
                }
                self.branches.insert(
                    cid,
                    Branch {
                        server: sid,
                        invite,
                        state: BranchState::Calling,
                        cancel_wanted: false,
                        cancel_sent: false,
                        timer_at,
                        dest: t.dest,
                        edge,
                        sent: now,
                    },
                );
                if invite && self.config.branch_events {
                    self.push_event(EndpointEvent::BranchStarted { to: t.dest, edge });
                }
                if let Some(call) = self.calls.get_mut(&sid) {
                    call.branches.push(cid);
                    call.pending += 1;
                }
            }
            // No client transaction: the branch fails at once, as with a transport error
            // (§16.9: a 503, sent upstream as 500 if it is the only answer).
            Some(Err(_)) | None => {
                self.consider_final(now, sid, 503, None);
            }
        }
    }

    /// Parks a request until its next hop's name is resolved: a new INVITE is answered `100`
    /// meanwhile (a parked one was already); past the bounds (per name, in all) it is
    /// answered `503` at once.
    #[allow(clippy::too_many_arguments)]
    fn park(
        &mut self,
        now: Instant,
        sid: ServerTxnId,
        msg: &Message<'_>,
        target: DnsTarget,
        from: Peer,
        local: Transport,
        consumed: Option<Span>,
        parked: Option<Instant>,
    ) {
        let cfg = self.dns.config();
        let same = self.parked_names.get(&target).copied().unwrap_or(0);
        if self.parked.len() >= cfg.max_parked || same >= cfg.max_parked_per_name {
            self.stats.dns_park_full += 1;
            self.respond(
                now,
                sid,
                msg,
                503,
                "Service Unavailable",
                &[("Retry-After", b"5")],
            );
            return;
        }
        let deadline = parked.unwrap_or(now + cfg.park_timeout);
        if parked.is_none() {
            self.stats.dns_parked_total += 1;
            if msg.method() == Some(Method::Invite) {
                self.respond(now, sid, msg, 100, "Trying", &[]);
            }
        }
        *self.parked_names.entry(target.clone()).or_default() += 1;
        self.parked.push(Parked {
            sid,
            target,
            request: msg.as_bytes().to_vec(),
            from,
            local,
            consumed,
            deadline,
        });
        self.stats.dns_parked = self.parked.len() as u64;
    }

    /// Takes the parked requests that `pick` selects out of the parked list.
    fn unpark(&mut self, mut pick: impl FnMut(&Parked) -> bool) -> Vec<Parked> {
        let (out, keep): (Vec<Parked>, Vec<Parked>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|p| pick(p));
        self.parked = keep;
        for p in &out {
            if let Some(n) = self.parked_names.get_mut(&p.target) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.parked_names.remove(&p.target);
                }
            }
        }
        self.stats.dns_parked = self.parked.len() as u64;
        out
    }

    /// After a DNS answer: the requests waiting for a name whose lookups are done (or
    /// failed) are routed again (once per name, the cache is asked whether it still waits;
    /// that also sends the next stage's queries).
    fn resume_parked(&mut self, now: Instant) {
        if self.parked.is_empty() {
            return;
        }
        let ready: BTreeSet<DnsTarget> = self
            .parked_names
            .keys()
            .filter(|t| !self.dns.is_pending(now, t, &mut self.rng))
            .cloned()
            .collect();
        if ready.is_empty() {
            return;
        }
        for p in self.unpark(|p| ready.contains(&p.target)) {
            let Ok(msg) = Message::parse(&p.request, &self.config.limits) else {
                self.drop_msg(DropReason::Internal);
                self.txns.abandon(TxnId::Server(p.sid));
                continue;
            };
            let Ok(plan) = RoutePlan::new(&self.config, &msg) else {
                self.drop_msg(DropReason::Internal);
                self.txns.abandon(TxnId::Server(p.sid));
                continue;
            };
            self.route_and_forward(
                now,
                p.sid,
                &msg,
                &plan,
                p.from,
                p.local,
                p.consumed,
                &mut |_, _| None,
                Some(p.deadline),
            );
        }
    }

    /// Answers `503` to the parked requests past their deadline.
    fn expire_parked(&mut self, now: Instant) {
        if !self.parked.iter().any(|p| p.deadline <= now) {
            return;
        }
        for p in self.unpark(|p| p.deadline <= now) {
            self.stats.dns_park_timeouts += 1;
            self.answer_parked(now, &p, 503, "DNS Timeout");
        }
    }

    /// Answers a parked request (taken out of the parked list) through its transaction.
    fn answer_parked(&mut self, now: Instant, p: &Parked, code: u16, reason: &'static str) {
        match Message::parse(&p.request, &self.config.limits) {
            Ok(msg) => self.respond(now, p.sid, &msg, code, reason, &[]),
            Err(_) => {
                self.drop_msg(DropReason::Internal);
                self.txns.abandon(TxnId::Server(p.sid));
            }
        }
    }

    /// RFC 3263 §4.3 for a context whose only branch failed (`status` 503, or a timeout
    /// or transport error: no response bytes): the request goes to the next alternative
    /// target, in a new branch, instead of failing. Returns whether one was started.
    fn fail_over(&mut self, now: Instant, sid: ServerTxnId, status: u16, answered: bool) -> bool {
        let failed = status == 503 || (status == 408 && !answered);
        let Some(call) = self.calls.get_mut(&sid) else {
            return false;
        };
        if !failed || call.final_sent || call.pending > 0 || call.alternatives.is_empty() {
            return false;
        }
        let dest = call.alternatives.remove(0);
        let local = call.local;
        let request = call.request.clone();
        let Ok(msg) = Message::parse(&request, &self.config.limits) else {
            return false;
        };
        let Ok(plan) = RoutePlan::new(&self.config, &msg) else {
            return false;
        };
        // A load-sharing route keeps the Request-URI: every alternative gets the same one.
        let t = Target {
            uri: plan.ruri.as_bytes().to_vec(),
            dest,
        };
        self.stats.failovers += 1;
        // Our own credentials, if any, are removed by forward_copy (not consumed again).
        self.start_branch(now, sid, &msg, &plan, &t, local, None);
        // A branch that could not even start answered at once (503): finish with it.
        self.maybe_finish(now, sid);
        true
    }

    /// Digest authentication of a new request (RFC 3261 §22), when configured: a REGISTER
    /// for the registrar (`for_registrar`) is checked as its To user (401), an out-of-dialog
    /// request whose From is a user of a served domain, from a source not trusted, as its
    /// From user (407); other requests pass. `Ok(Some(line))`: authenticated, `line` holds
    /// the credentials consumed; `Ok(None)`: not subject to authentication; `Err(())`: the
    /// request was answered (challenge or 403).
    fn authenticate(
        &mut self,
        now: Instant,
        sid: ServerTxnId,
        msg: &Message<'_>,
        for_registrar: bool,
        from: Peer,
    ) -> Result<Option<Span>, ()> {
        let Some(auth) = &self.auth else {
            return Ok(None);
        };
        let role = if for_registrar {
            Role::Registrar
        } else {
            if !self.proxy_auth_applies(msg, from) {
                return Ok(None);
            }
            Role::Proxy
        };
        let who = if for_registrar { msg.to() } else { msg.from() };
        let Ok(who) = who else {
            return Ok(None);
        };
        let user = who.uri.user_unescaped().unwrap_or_default();
        let domain = who.uri.host_bytes().unwrap_or_default();
        let decision = auth.check(now, msg, role, &user, domain);
        let reason = match decision {
            AuthDecision::Accept { consumed } => {
                self.stats.auth.ok += 1;
                return Ok(Some(consumed));
            }
            AuthDecision::Forbidden => {
                self.stats.auth.forbidden += 1;
                self.respond(now, sid, msg, 403, "Forbidden", &[]);
                return Err(());
            }
            AuthDecision::Challenge(r) => r,
        };
        let salt = self.rng.next_u64();
        let challenges = auth.challenges(now, salt, domain, reason.stale());
        let a = &mut self.stats.auth;
        match reason {
            ChallengeReason::NoCredentials => {}
            ChallengeReason::Malformed | ChallengeReason::InvalidNonce => a.invalid += 1,
            ChallengeReason::WrongCredentials => a.failed += 1,
            ChallengeReason::Stale | ChallengeReason::Forgotten => a.stale += 1,
            ChallengeReason::Replayed => a.replayed += 1,
        }
        match role {
            Role::Registrar => a.challenges_401 += 1,
            Role::Proxy => a.challenges_407 += 1,
        }
        if reason == ChallengeReason::WrongCredentials {
            self.push_event(EndpointEvent::AuthFailed { from });
        }
        let extra: Vec<(&str, &[u8])> = challenges
            .iter()
            .map(|c| (role.challenge_header(), c.as_slice()))
            .collect();
        self.respond(now, sid, msg, role.status(), role.reason(), &extra);
        Err(())
    }

    /// Whether a request not for the registrar is subject to proxy authentication (`407`):
    /// authentication is configured and it is an out-of-dialog request whose From is a user
    /// of a served domain, from a source not trusted.
    fn proxy_auth_applies(&self, msg: &Message<'_>, from: Peer) -> bool {
        let Some(auth) = &self.auth else {
            return false;
        };
        let in_dialog = msg.to().is_ok_and(|to| to.tag().is_some());
        let ip = from.addr.ip();
        let from_served = msg
            .from()
            .is_ok_and(|f| f.uri.host_bytes().is_some_and(|h| self.config.serves(h)));
        !in_dialog && from_served && !auth.config().trusted.iter().any(|n| n.contains(ip))
    }

    /// §16.5: the targets of a request and their next hops. With `fork`, a served domain
    /// gives every binding; without it, only the best one (stateless ACK forwarding). A
    /// target that is one of the proxy's own sockets is dropped (the request would come
    /// straight back); when that leaves none, `482`. `authenticated`: the request's sender
    /// proved to be a user of a served domain (it may relay).
    fn targets(
        &mut self,
        now: Instant,
        plan: &RoutePlan<'_>,
        fork: bool,
        from: &Peer,
        in_dialog: bool,
        authenticated: bool,
    ) -> Result<Vec<Target>, NoTargets> {
        // Whether this request may go to a next hop no route covers (the relay policy below):
        // a host name no route covers is looked up only if so, so that a source that may not
        // relay costs no lookup.
        let relays_anywhere = self.config.dns.request_uris
            && ((plan.own_route && in_dialog)
                || authenticated
                || self.config.relay.trusts(from.addr.ip()));
        let (mut targets, found_by) = self.all_targets(now, plan, fork, relays_anywhere)?;
        self.check_relay(found_by, plan, from, in_dialog, authenticated)?;
        let found = targets.len();
        targets.retain(|t| !is_own_socket(&self.config, &t.dest));
        if found > 0 && targets.is_empty() {
            self.stats.to_own_socket += 1;
            return Err(NoTargets::Answer(482, "Loop Detected"));
        }
        Ok(targets)
    }

    /// The relay policy: the location service and configured routes always; a dialog this
    /// proxy record-routed (wherever its route set or remote target points next); anything
    /// else only for a trusted source (or a user of a served domain who authenticated).
    fn check_relay(
        &mut self,
        found_by: FoundBy,
        plan: &RoutePlan<'_>,
        from: &Peer,
        in_dialog: bool,
        authenticated: bool,
    ) -> Result<(), NoTargets> {
        let relays = match found_by {
            FoundBy::Location | FoundBy::StaticRoute => true,
            FoundBy::Route | FoundBy::Literal => plan.own_route && in_dialog,
        };
        if !relays && !authenticated && !self.config.relay.trusts(from.addr.ip()) {
            self.stats.relay_denied += 1;
            return Err(NoTargets::Answer(403, "Forbidden"));
        }
        Ok(())
    }

    /// [`targets`](Self::targets) before the relay policy and the own-socket check, and how
    /// they were found.
    fn all_targets(
        &mut self,
        now: Instant,
        plan: &RoutePlan<'_>,
        fork: bool,
        relays_anywhere: bool,
    ) -> Result<(Vec<Target>, FoundBy), NoTargets> {
        let ruri = plan.ruri.as_bytes().to_vec();
        self.failover.clear();
        self.targets_from_dns = false;
        self.route_edge = None;
        if let Some(route) = &plan.next_route {
            if let Some(found) = self.covered_route(now, plan, route, &ruri) {
                return found;
            }
            let Some(dest) = resolve_uri(&self.config, route, true) else {
                // A host name in the Route: RFC 3263, when on.
                return match DnsTarget::from_uri(route).filter(|_| self.config.dns.request_uris) {
                    Some(_) if !relays_anywhere => {
                        self.stats.relay_denied += 1;
                        Err((403, "Forbidden").into())
                    }
                    Some(target) => self.dns_targets(now, ruri, target, FoundBy::Route),
                    None => Err((404, "Not Found").into()),
                };
            };
            return Ok((vec![Target { uri: ruri, dest }], FoundBy::Route));
        }
        let host = plan.ruri.host_bytes().unwrap_or_default();
        let me = is_me_uri(&self.config, &plan.ruri);
        if self.config.serves(host) || (me && plan.ruri.user().is_some()) {
            let mut aor = Vec::new();
            if !Registrar::aor_key(&plan.ruri, &mut aor) {
                return Err((404, "Not Found").into());
            }
            let mut bindings = std::mem::take(&mut self.bindings);
            bindings.clear();
            self.store.lookup(&aor, now, &mut bindings);
            // Highest q first; the order of equal q is the store's.
            bindings.sort_by_key(|b| Reverse(b.q));
            let mut out = Vec::new();
            for b in &bindings {
                let Ok(uri) = holdline_sip::Uri::parse(&b.contact) else {
                    continue;
                };
                // A binding made over a connection is reached over that connection.
                let dest = match b.source {
                    Some(src) if src.transport.is_stream() => Some(src),
                    src => resolve_uri(&self.config, &uri, false).or(src),
                };
                if let Some(dest) = dest {
                    out.push(Target {
                        uri: b.contact.to_vec(),
                        dest,
                    });
                }
                if !fork || out.len() >= self.config.max_branches.max(1) {
                    break;
                }
            }
            let empty = bindings.is_empty();
            self.bindings = bindings;
            // A user at this proxy's own address (not a served domain) without a binding
            // follows a static route if one applies: a trunk pointed at the proxy.
            let fallback = if self.config.serves(host) {
                None
            } else {
                self.config.static_route(host)
            };
            return match (out.is_empty(), empty, fallback) {
                (false, _, _) => Ok((out, FoundBy::Location)),
                (true, true, Some(r)) => Ok((
                    {
                        self.route_edge = r.edge;
                        vec![Target {
                            uri: ruri,
                            dest: Peer {
                                addr: r.next_hop,
                                transport: r.transport,
                                conn: None,
                            },
                        }]
                    },
                    FoundBy::StaticRoute,
                )),
                (true, true, None) => Err((404, "Not Found").into()),
                (true, false, _) => Err((480, "Temporarily Unavailable").into()),
            };
        }
        if me {
            return Err((404, "Not Found").into());
        }
        if let Some(index) = self.config.hash_route_index(host, true) {
            // Identifier-based load sharing: the user's AOR picks the target.
            let uri = match (&plan.to_uri, plan.ruri.user()) {
                (Some(to), None) => to,
                _ => &plan.ruri,
            };
            let mut key = Vec::new();
            if !Registrar::aor_key(uri, &mut key) {
                return Err((404, "Not Found").into());
            }
            self.route_edge = self.config.hash_routes.get(index).and_then(|r| r.edge);
            let turn = self.round_robin_turn(index);
            return self.hash_targets(now, index, &key, turn, ruri);
        }
        if let Some(route) = self.config.dns_route(host) {
            let target = route.target.clone();
            self.route_edge = route.edge;
            return self.dns_targets(now, ruri, target, FoundBy::StaticRoute);
        }
        let Some(dest) = resolve_uri(&self.config, &plan.ruri, true) else {
            // A host name no route covers: RFC 3263, when on.
            return match DnsTarget::from_uri(&plan.ruri).filter(|_| self.config.dns.request_uris) {
                Some(_) if !relays_anywhere => {
                    self.stats.relay_denied += 1;
                    Err((403, "Forbidden").into())
                }
                Some(target) => self.dns_targets(now, ruri, target, FoundBy::Literal),
                None => Err((404, "Not Found").into()),
            };
        };
        // resolve_uri prefers an exact static route, then an IP literal, then `*`.
        let found_by = if plan.ruri.host().and_then(|h| h.ip()).is_some()
            && self
                .config
                .static_routes
                .iter()
                .all(|r| r.domain == "*" || !r.domain.as_bytes().eq_ignore_ascii_case(host))
        {
            FoundBy::Literal
        } else {
            self.route_edge = self.config.static_route(host).and_then(|r| r.edge);
            FoundBy::StaticRoute
        };
        Ok((vec![Target { uri: ruri, dest }], found_by))
    }

    /// The next turn of load-sharing route `index` when it picks by round-robin: the index
    /// of its target whose turn it is (smooth weighted round-robin: every target's current
    /// weight grows by its weight, the largest is picked and loses the total). `None` for a
    /// route that hashes.
    fn round_robin_turn(&mut self, index: usize) -> Option<usize> {
        let route = self.config.hash_routes.get(index)?;
        if route.pick != Pick::RoundRobin {
            return None;
        }
        if self.round_robin.len() < self.config.hash_routes.len() {
            self.round_robin
                .resize(self.config.hash_routes.len(), Vec::new());
        }
        let current = self.round_robin.get_mut(index)?;
        current.resize(route.targets.len(), 0.0);
        let weight = |w: f64| if w.is_finite() && w > 0.0 { w } else { 1.0 };
        let total: f64 = route.targets.iter().map(|t| weight(t.node.weight)).sum();
        let mut best: Option<(usize, f64)> = None;
        for (i, (c, t)) in current.iter_mut().zip(&route.targets).enumerate() {
            *c += weight(t.node.weight);
            if best.is_none_or(|(_, b)| *c > b) {
                best = Some((i, *c));
            }
        }
        let (b, _) = best?;
        if let Some(c) = current.get_mut(b) {
            *c -= total;
        }
        Some(b)
    }

    /// The targets of load-sharing route `index` (in [`ProxyConfig::hash_routes`]) for hash
    /// key `key`, or from target `turn` on (round-robin): the first target not down, the
    /// others (named ones standing for the targets their names resolve to) its failover
    /// order; or park the request while a name is being resolved.
    fn hash_targets(
        &mut self,
        now: Instant,
        index: usize,
        key: &[u8],
        turn: Option<usize>,
        ruri: Vec<u8>,
    ) -> Result<(Vec<Target>, FoundBy), NoTargets> {
        let Some(route) = self.config.hash_routes.get(index) else {
            return Err((404, "Not Found").into());
        };
        let mut order = Vec::with_capacity(route.targets.len());
        match turn {
            // The target whose turn it is, then the others after it in turn.
            Some(first) => {
                let n = route.targets.len();
                order.extend((0..n).map(|i| (first + i) % n));
            }
            None => crate::hrw::rank_by(key, route.targets.iter().map(|t| &t.node), &mut order),
        }
        // A named target stands for the targets its name resolves to, in their order.
        let mut ranked = Vec::with_capacity(order.len());
        let (mut resolving, mut unresolved, mut from_dns) = (None, false, false);
        for t in order.iter().filter_map(|&i| route.targets.get(i)) {
            let Some(name) = &t.name else {
                ranked.push(Peer {
                    addr: t.next_hop,
                    transport: t.transport,
                    conn: None,
                });
                continue;
            };
            match self.dns.resolve(now, name, &mut self.rng) {
                Resolution::Ready(peers) => {
                    from_dns = true;
                    ranked.extend(peers);
                }
                Resolution::Pending => {
                    resolving.get_or_insert_with(|| name.clone());
                }
                Resolution::Failed => unresolved = true,
            }
        }
        if let Some(name) = resolving {
            return Err(NoTargets::Resolving(name));
        }
        // Targets that probing found down go last: their users' requests go to their
        // next-highest target at once (and to a down one only if all are down).
        let (mut up, down): (Vec<Peer>, Vec<Peer>) =
            ranked.into_iter().partition(|p| !self.target_down(p));
        up.extend(down);
        let mut ranked = up.into_iter();
        let Some(dest) = ranked.next() else {
            if unresolved {
                self.stats.dns_unresolved += 1;
                return Err((503, "DNS Failure").into());
            }
            return Err((404, "Not Found").into());
        };
        self.failover = if route.failover {
            ranked.take(MAX_ALTERNATIVES).collect()
        } else {
            Vec::new()
        };
        self.targets_from_dns = from_dns;
        Ok((vec![Target { uri: ruri, dest }], FoundBy::StaticRoute))
    }

    /// The targets of a request whose next hop is a Route naming a host (not an address)
    /// that a configured route covers by its exact domain: a cluster's name, written into
    /// Record-Route by the cluster's servers ([`ProxyConfig::record_route_host`]). The
    /// request goes through that route's targets with the same failover as an initial
    /// request (its Route header kept: the server it reaches pops its alias): a load-sharing
    /// route's, ranked by the Call-ID (a dialog's requests pick one server); a DNS route's;
    /// or, when the name is a named load-sharing target, the targets it resolves to. `None`
    /// when no such route covers the host (an exact static route, too, is left to
    /// [`resolve_uri`]): routed as before.
    fn covered_route(
        &mut self,
        now: Instant,
        plan: &RoutePlan<'_>,
        route: &holdline_sip::Uri<'_>,
        ruri: &[u8],
    ) -> Option<Result<(Vec<Target>, FoundBy), NoTargets>> {
        if self.config.hash_routes.is_empty() && self.config.dns_routes.is_empty() {
            return None;
        }
        let name = route.host()?.name()?;
        if let Some(index) = self.config.hash_route_index(name, false) {
            let key = plan.call_id.unwrap_or_default();
            return Some(self.hash_targets(now, index, key, None, ruri.to_vec()));
        }
        let exact = |d: &str| {
            let d = d.as_bytes();
            d.strip_suffix(b".")
                .unwrap_or(d)
                .eq_ignore_ascii_case(name.strip_suffix(b".").unwrap_or(name))
        };
        if self.config.static_routes.iter().any(|r| exact(&r.domain)) {
            return None;
        }
        let target = self
            .config
            .dns_routes
            .iter()
            .find(|r| exact(&r.domain))
            .map(|r| &r.target)
            .or_else(|| {
                self.config
                    .hash_routes
                    .iter()
                    .flat_map(|r| &r.targets)
                    .filter_map(|t| t.name.as_ref())
                    .find(|t| exact(&t.host))
            })?
            .clone();
        Some(self.dns_targets(now, ruri.to_vec(), target, FoundBy::StaticRoute))
    }

    /// The targets of a next hop given by name (a DNS route, or a host name resolved with
    /// DNS): the first of `target`'s resolution, the rest its failover order; or park the
    /// request while lookups are under way; or `503` when the name leads nowhere.
    fn dns_targets(
        &mut self,
        now: Instant,
        ruri: Vec<u8>,
        target: DnsTarget,
        found_by: FoundBy,
    ) -> Result<(Vec<Target>, FoundBy), NoTargets> {
        match self.dns.resolve(now, &target, &mut self.rng) {
            Resolution::Ready(peers) => {
                let mut peers = peers.into_iter();
                let dest = peers.next().ok_or((503, "DNS Failure"))?;
                self.failover = peers.take(MAX_ALTERNATIVES).collect();
                self.targets_from_dns = true;
                Ok((vec![Target { uri: ruri, dest }], found_by))
            }
            Resolution::Pending => Err(NoTargets::Resolving(target)),
            Resolution::Failed => {
                self.stats.dns_unresolved += 1;
                Err((503, "DNS Failure").into())
            }
        }
    }

    /// The line of `msg`'s proxy credentials for this server's realm when it is forwarded
    /// without consuming them (in-dialog requests, into which UAs copy their credentials;
    /// requests from trusted sources): removed all the same, credentials for this server
    /// never travel past it (RFC 3261 §22.3). A header index lookup when there are none.
    fn own_proxy_credentials(&self, msg: &Message<'_>) -> Option<Span> {
        let auth = self.auth.as_ref()?;
        msg.values(HeaderName::ProxyAuthorization).next()?;
        let from = msg.from().ok()?;
        let domain = from.uri.host_bytes()?;
        if !self.config.serves(domain) {
            return None;
        }
        auth.own_credentials(msg, Role::Proxy, domain)
    }

    /// Counts a new INVITE offered to `dest` at `now` (before any gate rejects it):
    /// [`ProxyConfig::advertise_offered_load`].
    fn count_offered(&mut self, now: Instant, dest: Peer) {
        // Next hops are few; a proxy forwarding to its users' own addresses meets many:
        // bounded, forgetting all at the bound (the rates restart within a second).
        if self.offered.len() >= 1024 && !self.offered.contains_key(&dest.addr) {
            self.offered.clear();
        }
        self.offered.entry(dest.addr).or_default().record(now);
    }

    /// The Via parameter telling `dest` the rate of new INVITEs (no To tag) offered to it
    /// ([`ProxyConfig::advertise_offered_load`]): this worker's rate times the workers;
    /// `None` for anything else.
    fn offered_params(&mut self, now: Instant, msg: &Message<'_>, dest: Peer) -> Option<Vec<u8>> {
        if msg.to().ok().is_none_or(|t| t.tag().is_some()) {
            return None;
        }
        let workers = self.config.shard.map_or(1, |s| s.workers.max(1));
        let rate = self.offered.get_mut(&dest.addr)?.rate(now) * workers as f64;
        Some(format!(";hl-offered={rate:.1}").into_bytes())
    }

    /// §16.6 steps 1–8: the copy of `msg` sent to `dest` with `branch`. `consumed`: the
    /// line of the credentials this proxy consumed, removed (RFC 3261 §22.3), as are this
    /// server's credentials it did not check ([`Self::own_proxy_credentials`]).
    #[allow(clippy::too_many_arguments)]
    fn forward_copy(
        &self,
        msg: &Message<'_>,
        plan: &RoutePlan<'_>,
        target_uri: Option<&[u8]>,
        dest: Peer,
        branch: &str,
        local: Transport,
        consumed: Option<Span>,
        offer: bool,
        extra_via: Option<&[u8]>,
    ) -> Result<Vec<u8>, EditError> {
        let mut ed = Editor::new(msg);
        for span in &plan.remove {
            ed.replace(*span, b"")?;
        }
        if let Some(span) = consumed.or_else(|| self.own_proxy_credentials(msg)) {
            ed.replace(span, b"")?;
        }
        let uri = target_uri.unwrap_or(plan.ruri.as_bytes());
        if Some(uri) != msg.request_uri_bytes() {
            ed.set_request_uri(uri)?;
        }
        ed.decrement_max_forwards()?;
        let out_l = self.config.listener(dest.transport).copied();
        let method = msg.method();
        let dialog_creating = matches!(
            method,
            Some(Method::Invite | Method::Subscribe | Method::Refer | Method::Notify)
        );
        let initial = msg.to().ok().is_some_and(|t| t.tag().is_none());
        if self.config.record_route && dialog_creating && initial {
            let in_l = self.config.listener(local).copied();
            // Double Record-Route when the request changes listener (e.g. UDP to TCP), so
            // that each side reaches the proxy on its own transport.
            if let Some(in_l) = in_l
                && out_l.is_some_and(|o| o != in_l)
            {
                ed.add_record_route(record_route_value(&self.config, &in_l).as_bytes())?;
            }
            if let Some(o) = out_l {
                ed.add_record_route(record_route_value(&self.config, &o).as_bytes())?;
            }
        }
        let sent_by = out_l.map(|l| host_port(l.addr)).unwrap_or_default();
        // The overload-control offer goes only into requests forwarded through a client
        // transaction: the answer comes in a response matched to it. A stateless proxy could
        // not act on the answer, and a next hop that exempts clients taking its answer from
        // its own admission gate would lose its control.
        let offer_params: &[u8] = if offer { &self.offer_params } else { &[] };
        let joined;
        let params = match extra_via {
            Some(extra) => {
                joined = [offer_params, extra].concat();
                &joined[..]
            }
            None => offer_params,
        };
        ed.push_via_with(
            dest.transport,
            sent_by.as_bytes(),
            branch.as_bytes(),
            true,
            params,
        )?;
        if dest.transport.is_stream() {
            ed.ensure_content_length()?;
        }
        let mut out = Vec::with_capacity(ed.emitted_len());
        ed.emit(&mut out);
        Ok(out)
    }

    /// §16.10: a CANCEL whose INVITE transaction is known is answered here and cancels every
    /// pending branch; any other CANCEL is forwarded statelessly.
    fn on_cancel(
        &mut self,
        now: Instant,
        sid: ServerTxnId,
        msg: &Message<'_>,
        plan: &RoutePlan<'_>,
        from: Peer,
        local: Transport,
    ) {
        if let Some(invite) = self.txns.cancel_target(sid) {
            self.respond(now, sid, msg, 200, "OK", &[]);
            self.cancel_pending(now, invite);
            return;
        }
        // Unmatched: forwarded statelessly (§16.10); the server transaction just created is
        // not kept, so that nothing waits for an answer the proxy will not give.
        self.txns.abandon(TxnId::Server(sid));
        self.forward_stateless(now, msg, plan, from, local);
    }

    /// Sends a CANCEL on every branch of `sid` still pending (or marks it for one as soon as
    /// it has heard a provisional response).
    fn cancel_pending(&mut self, now: Instant, sid: ServerTxnId) {
        if self.parked.iter().any(|p| p.sid == sid) {
            // Still waiting for DNS: nothing was sent anywhere; the request ends here.
            for p in self.unpark(|p| p.sid == sid) {
                self.answer_parked(now, &p, 487, "Request Terminated");
            }
            return;
        }
        let Some(call) = self.calls.get_mut(&sid) else {
            return;
        };
        // Cancelled or answered: no failover branch after this.
        call.alternatives.clear();
        if !call.invite {
            return;
        }
        for cid in call.branches.clone() {
            self.cancel_branch(now, cid);
        }
    }

    fn cancel_branch(&mut self, now: Instant, cid: ClientTxnId) {
        let Some(b) = self.branches.get_mut(&cid) else {
            return;
        };
        if !b.invite || b.cancel_sent {
            return;
        }
        match b.state {
            BranchState::Calling => b.cancel_wanted = true,
            BranchState::Proceeding => {
                b.cancel_sent = true;
                let at = now + self.config.txn.t1.max(Duration::from_millis(1)) * 64;
                b.timer_at = Some(at);
                self.timers.push(Reverse((at, cid)));
                match self.txns.cancel(now, cid) {
                    Ok(c) => {
                        self.stats.client_transactions += 1;
                        self.cancels.insert(c);
                    }
                    Err(_) => self.drop_msg(DropReason::Internal),
                }
            }
        }
    }

    /// Timer C, or the give-up timer after a CANCEL.
    fn fire_timer(&mut self, now: Instant, cid: ClientTxnId) {
        let Some(b) = self.branches.get_mut(&cid) else {
            return;
        };
        b.timer_at = None;
        match (b.state, b.cancel_sent) {
            // §16.8: Timer C with a provisional response: CANCEL the branch.
            (BranchState::Proceeding, false) => self.cancel_branch(now, cid),
            // No provisional response: as if a 408 arrived; a late provisional finds no
            // branch and is CANCELled (`on_branch_response`).
            (BranchState::Calling, _) => self.branch_final(now, cid, 408, None),
            // The CANCEL went unanswered by a final response: give the branch up.
            (BranchState::Proceeding, true) => {
                self.branch_final(now, cid, 408, None);
                self.txns.abandon(TxnId::Client(cid));
            }
        }
    }

    // ------------------------------------------------------------------ stateless

    /// §16.11 for requests on a stateless static route: validation answered without a
    /// transaction, then the copy sent with a branch derived from the incoming one.
    fn stateless_request(
        &mut self,
        now: Instant,
        msg: &Message<'_>,
        plan: &RoutePlan<'_>,
        from: Peer,
        local: Transport,
    ) {
        if self.stateless_checks(msg, from) {
            return;
        }
        self.forward_stateless(now, msg, plan, from, local);
    }

    /// The §16.3 checks a stateless proxy answers itself, without a transaction: `483` for
    /// Max-Forwards 0, `420` for a Proxy-Require (never for a CANCEL). Returns whether the
    /// request was answered.
    fn stateless_checks(&mut self, msg: &Message<'_>, from: Peer) -> bool {
        let max_forwards_zero = msg.max_forwards().ok().flatten() == Some(0);
        if max_forwards_zero {
            self.respond_stateless(msg, from, 483, "Too Many Hops", &[]);
            return true;
        }
        let required: Vec<&[u8]> = msg
            .values(HeaderName::ProxyRequire)
            .map(|v| v.bytes)
            .collect();
        if !required.is_empty() && msg.method() != Some(Method::Cancel) {
            let unsupported = required.join(&b", "[..]);
            self.respond_stateless(
                msg,
                from,
                420,
                "Bad Extension",
                &[("Unsupported", &unsupported)],
            );
            return true;
        }
        false
    }

    /// Whether [`ProxyMode::Stateless`] applies to a request (not an ACK), by how it will be
    /// routed: a load-sharing route by its Request-URI host (not a served domain nor this
    /// proxy: the location service and the registrar stay stateful), or by a Route naming a
    /// host a load-sharing route covers exactly (a cluster's name); or an in-dialog request
    /// of a dialog this proxy record-routed (it came through our Route), wherever its next
    /// hop is (a second stage's Record-Route, a callee's Contact), unless it is for the
    /// location service.
    fn stateless_candidate(&self, msg: &Message<'_>, plan: &RoutePlan<'_>) -> bool {
        let ours = plan.own_route && msg.to().is_ok_and(|to| to.tag().is_some());
        if let Some(route) = &plan.next_route {
            return ours
                || route
                    .host()
                    .and_then(|h| h.name())
                    .is_some_and(|n| self.config.hash_route_index(n, false).is_some());
        }
        let host = plan.ruri.host_bytes().unwrap_or_default();
        if self.config.serves(host) || is_me_uri(&self.config, &plan.ruri) {
            return false;
        }
        ours || self.config.hash_route_index(host, true).is_some()
    }

    /// [`ProxyMode::Stateless`] for a [candidate](Self::stateless_candidate) request (§16.11):
    /// its one target found as the stateful path would find it (the user's highest-ranked
    /// target that probing has not taken down; a retransmission, the CANCEL and the ACK of
    /// a non-2xx find the same one while probing says the same), the forward gate asked for
    /// a new INVITE (a rejection answered statelessly, its ACK recognised by its To tag), and
    /// the copy sent with a branch computed from the request, without an overload-control
    /// offer. `Err` when it must be handled statefully instead: nothing was sent then.
    fn try_stateless(
        &mut self,
        now: Instant,
        msg: &Message<'_>,
        plan: &RoutePlan<'_>,
        from: Peer,
        local: Transport,
        forward: &mut dyn FnMut(Peer, Option<EdgeId>) -> Option<GateRejection>,
    ) -> Result<(), StatelessFallback> {
        let method = msg.method();
        let cancel = method == Some(Method::Cancel);
        // A request handled statefully keeps its transaction: its retransmissions and its
        // CANCEL go there (no lookup at all while no server transaction lives).
        if self.stats.server_transactions > 0 {
            let live = if cancel {
                self.txns.matches_cancel_target(msg)
            } else {
                self.txns.matches_server(msg) == Ok(true)
            };
            if live {
                return Err(StatelessFallback::Transaction);
            }
        }
        if !cancel && self.proxy_auth_applies(msg, from) {
            return Err(StatelessFallback::Authentication);
        }
        if self.stateless_checks(msg, from) {
            return Ok(());
        }
        let in_dialog = msg.to().is_ok_and(|to| to.tag().is_some());
        let targets = match self.targets(now, plan, true, &from, in_dialog, false) {
            Ok(t) => t,
            Err(NoTargets::Resolving(_)) => return Err(StatelessFallback::Dns),
            Err(NoTargets::Answer(code, reason)) => {
                self.stats.stateless_fallbacks[StatelessFallback::Answered.index()] += 1;
                self.answer_statefully(now, msg, from, code, reason);
                return Ok(());
            }
        };
        self.failover.clear();
        if std::mem::take(&mut self.targets_from_dns) {
            return Err(StatelessFallback::Dns);
        }
        let [t] = targets.as_slice() else {
            return Err(StatelessFallback::Forking);
        };
        // Seed 001's rule: UDP in, UDP out. A transport change needs a client transaction
        // (retransmissions over the unreliable side); over a stream the caller does not
        // retransmit, so only a transaction can fail over when the next hop's connection
        // fails.
        if local != Transport::Udp || t.dest.transport != Transport::Udp {
            return Err(StatelessFallback::Transport);
        }
        if method == Some(Method::Invite)
            && !in_dialog
            && let Some(r) = forward(t.dest, self.route_edge)
        {
            self.stats.rejected_by_forward_gate += 1;
            self.send_gate_rejection(msg, from, r);
            return Ok(());
        }
        let branch = stateless_branch(msg);
        match self.forward_copy(
            msg,
            plan,
            Some(&t.uri),
            t.dest,
            &branch,
            local,
            None,
            false,
            None,
        ) {
            Ok(bytes) => {
                self.stats.stateless += 1;
                self.out.push_back((t.dest, bytes));
            }
            Err(_) => self.drop_msg(DropReason::Internal),
        }
        Ok(())
    }

    /// Forwards a request without a transaction: ACK for a 2xx, unmatched CANCEL, requests on
    /// stateless routes.
    fn forward_stateless(
        &mut self,
        now: Instant,
        msg: &Message<'_>,
        plan: &RoutePlan<'_>,
        from: Peer,
        local: Transport,
    ) {
        let is_ack = msg.method() == Some(Method::Ack);
        if msg.max_forwards().ok().flatten() == Some(0) {
            self.drop_msg(DropReason::TooManyHops);
            return;
        }
        let in_dialog = msg.to().is_ok_and(|to| to.tag().is_some());
        let targets = match self.targets(now, plan, !is_ack, &from, in_dialog, false) {
            Ok(t) => t,
            Err(e) => {
                // Stateless forwarding does not wait for DNS (the lookup goes on for later
                // requests).
                let (code, reason) = match e {
                    NoTargets::Answer(code, reason) => (code, reason),
                    NoTargets::Resolving(_) => (503, "Service Unavailable"),
                };
                if is_ack {
                    self.drop_msg(DropReason::Unroutable);
                } else {
                    self.respond_stateless(msg, from, code, reason, &[]);
                }
                return;
            }
        };
        let branch = stateless_branch(msg);
        for t in targets {
            match self.forward_copy(
                msg,
                plan,
                Some(&t.uri),
                t.dest,
                &branch,
                local,
                None,
                false,
                None,
            ) {
                Ok(bytes) => {
                    self.stats.stateless += 1;
                    self.out.push_back((t.dest, bytes));
                }
                Err(_) => self.drop_msg(DropReason::Internal),
            }
        }
    }

    // ------------------------------------------------------------------ responses

    fn on_response(&mut self, now: Instant, msg: &Message<'_>, from: Peer) {
        let Some(status) = msg.status() else { return };
        self.stats.responses_in[usize::from(status / 100 - 1).min(5)] += 1;
        match self.txns.handle_parsed_response(now, msg, from) {
            ResponseOutcome::ForTu(cid) if self.probe_of(cid).is_some() => {
                if status >= 200 {
                    self.probe_done(now, cid, status < 500);
                }
            }
            ResponseOutcome::ForTu(cid) if self.lc_response(now, cid, status, Some(msg)) => {}
            ResponseOutcome::ForTu(cid) if self.propagations.contains(&cid) => {
                if status >= 200 {
                    self.propagations.remove(&cid);
                    if status < 300 {
                        self.stats.registration_copies_acked += 1;
                    } else {
                        self.stats.registration_copies_failed += 1;
                    }
                }
            }
            ResponseOutcome::ForTu(cid) => self.on_branch_response(now, cid, status, msg, from),
            ResponseOutcome::Absorbed(_) => {}
            ResponseOutcome::Stray => self.stray_response(msg, status),
            ResponseOutcome::Malformed(_) => {
                self.stats.parse_errors += 1;
                self.drop_msg(DropReason::Malformed);
            }
        }
    }

    /// The overload answer of a next hop in our top Via of `msg` (a response matched to one of
    /// our client transactions), reported as an event; a malformed one is counted and ignored.
    fn read_overload_report(&mut self, msg: &Message<'_>, from: Peer) {
        let Ok(via) = msg.top_via() else { return };
        match OcReport::from_via(&via) {
            Ok(Some(report)) => {
                self.stats.overload_reports += 1;
                self.push_event(EndpointEvent::Feedback { from, report });
            }
            Ok(None) => {}
            Err(_) => self.stats.overload_reports_malformed += 1,
        }
    }

    /// Puts the server role's answer into the top Via of the response in `buf[start..]` when
    /// its upstream client offered `oc` with an algorithm answered here; returns the new size.
    fn stamp_overload_answer(&mut self, now: Instant, buf: &mut Vec<u8>, start: usize) -> usize {
        let size = buf.len() - start;
        let Some(answer) = self.answer else {
            return size;
        };
        let Some(rest) = buf.get(start..) else {
            return size;
        };
        // Cheap pre-check, on the header section only (not the body): no `;oc`, nothing to
        // do, and no parse.
        let head = rest
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(rest, |end| &rest[..end]);
        if !head
            .windows(3)
            .any(|w| w[0] == b';' && w[1..].eq_ignore_ascii_case(b"oc"))
        {
            return size;
        }
        let Ok(msg) = Message::parse(rest, &self.config.limits) else {
            return size;
        };
        let Some(algo) = self.answered_algo(&msg) else {
            return size;
        };
        let share = |total: u32, clients: usize| {
            let share = u64::from(total).div_ceil(clients.max(1) as u64).max(1);
            u32::try_from(share).unwrap_or(u32::MAX)
        };
        let (value, controlling) = match (algo, answer.rate, answer.window) {
            (OcAlgo::Rate, RateAnswer::Total(total), _) => (
                share(total, self.rate_clients.len().max(self.rate_clients_before)),
                true,
            ),
            (OcAlgo::Rate, _, _) => (0, false),
            (OcAlgo::Window, _, RateAnswer::Total(total)) => (
                share(
                    total,
                    self.window_clients.len().max(self.window_clients_before),
                ),
                true,
            ),
            (OcAlgo::Window, _, _) => (0, false),
            (OcAlgo::Loss, _, _) => (
                u32::from(answer.loss_percent.min(100)),
                answer.loss_percent > 0,
            ),
        };
        let validity_ms = match (controlling, algo) {
            (false, _) => 0,
            // A rate answer must outlive the gaps between the INVITEs it lets through: a
            // client held to one INVITE per second, answered only on the responses to those,
            // would otherwise see its answer expire between two calls and send its whole
            // offered load (validity expiry ends control, RFC 7339 §5.4–5.7) — with ten
            // clients that flood is what the server sees next, it cuts to the floor again,
            // and the loop settles into a cycle far below capacity (measured: 0.75 of the
            // capacity with 10 SEs at 10×, docs/overload.md).
            (true, OcAlgo::Rate) => answer
                .validity_ms
                .max(RATE_VALIDITY_GAPS.saturating_mul(1000) / value.max(1)),
            // The same for a loss answer: a client dropping p % sends 1 / (1 − p) times
            // fewer INVITEs, so the answer lasts as many of its offered INVITEs as the
            // configured validity does without loss (at most `LOSS_VALIDITY_MAX_MS`).
            (true, OcAlgo::Loss) => {
                let kept = 100u32.saturating_sub(value).max(1);
                (answer.validity_ms.saturating_mul(100) / kept).clamp(
                    answer.validity_ms,
                    LOSS_VALIDITY_MAX_MS.max(answer.validity_ms),
                )
            }
            (true, _) => answer.validity_ms,
        };
        let report = OcReport {
            algo,
            value,
            validity_ms,
            seq: self
                .config
                .overload_seq_base
                .saturating_add(now.as_nanos() / 10_000),
        };
        let mut params = Vec::with_capacity(80);
        report.write_params(&mut params);
        let mut ed = Editor::new(&msg);
        if ed.set_top_via_params(&OC_PARAMS, &params).is_err() {
            return size;
        }
        let mut out = Vec::with_capacity(ed.emitted_len());
        ed.emit(&mut out);
        drop(ed);
        drop(msg);
        buf.truncate(start);
        buf.extend_from_slice(&out);
        self.stats.overload_answers += 1;
        out.len()
    }

    /// The response with our top Via removed, ready to go upstream.
    fn pop_our_via(msg: &Message<'_>) -> Option<Vec<u8>> {
        let mut ed = Editor::new(msg);
        ed.pop_via().ok()?;
        // The upstream hop may be a stream, which needs the length (harmless otherwise).
        ed.ensure_content_length().ok()?;
        let mut out = Vec::with_capacity(ed.emitted_len());
        ed.emit(&mut out);
        Some(out)
    }

    /// Learns the egress edge of the callee of INVITE branch `cid` from `response` (a
    /// provisional or 2xx), when its call learns one ([`ProxyConfig::learn_edges`]).
    fn learn_edge(&mut self, now: Instant, cid: ClientTxnId, response: &Message<'_>) {
        let Some(key) = self
            .branches
            .get(&cid)
            .filter(|b| b.invite)
            .and_then(|b| self.calls.get(&b.server))
            .and_then(|c| c.learn_keys)
        else {
            return;
        };
        if let Some(edge) = learn::egress_edge(&self.config, response) {
            self.learned_edges.learn_keys(now, key, edge);
            self.stats.edges_learned = self.learned_edges.len() as u64;
        }
    }

    /// §16.7 for a response matched to one of our branches.
    fn on_branch_response(
        &mut self,
        now: Instant,
        cid: ClientTxnId,
        status: u16,
        msg: &Message<'_>,
        from: Peer,
    ) {
        if self.config.overload_offer.is_some() {
            self.read_overload_report(msg, from);
        }
        if self.cancels.contains(&cid) {
            return; // the answer to our CANCEL
        }
        let Some(popped) = Self::pop_our_via(msg) else {
            self.drop_msg(DropReason::Malformed);
            return;
        };
        if let Some(&sid) = self.accepted.get(&cid) {
            // RFC 6026: further 2xx on an accepted INVITE branch are forwarded too.
            if (200..300).contains(&status) {
                self.forward_upstream(now, sid, popped);
            }
            return;
        }
        if self.config.learn_edges && (101..300).contains(&status) {
            self.learn_edge(now, cid, msg);
        }
        let Some(b) = self.branches.get_mut(&cid) else {
            if (200..300).contains(&status) {
                self.forward_by_via(&popped);
            } else if status < 200 {
                // A provisional on a branch this proxy no longer follows (its call ended
                // while the INVITE was still Calling): nobody runs Timer C for it, so CANCEL
                // it now; the transaction ends with the final or 64·T1 after the CANCEL
                // (RFC 3261 §9.1). Without this, it stayed in Proceeding forever (found by
                // the endpoint fuzzer, issue 23).
                if let Ok(c) = self.txns.cancel(now, cid) {
                    self.stats.client_transactions += 1;
                    self.cancels.insert(c);
                }
            }
            return;
        };
        let sid = b.server;
        if status < 200 {
            let first = (b.state == BranchState::Calling).then(|| {
                b.state = BranchState::Proceeding;
                (b.dest, b.edge, now.saturating_duration_since(b.sent))
            });
            let invite = b.invite;
            // §16.7 step 2: any provisional but 100 resets Timer C.
            if invite && status > 100 && !b.cancel_sent {
                let at = now + self.config.timer_c;
                b.timer_at = Some(at);
                self.timers.push(Reverse((at, cid)));
            }
            let cancel = b.cancel_wanted && !b.cancel_sent;
            if let Some((to, edge, delay)) = first.filter(|_| invite && self.config.branch_events) {
                self.push_event(EndpointEvent::BranchAnswered { to, edge, delay });
            }
            if cancel {
                self.cancel_branch(now, cid);
            }
            // 100 is hop by hop; RFC 4320: no other provisional goes up a non-INVITE.
            let forward =
                invite && status > 100 && self.calls.get(&sid).is_some_and(|c| !c.final_sent);
            if forward && self.txns.respond(now, sid, popped).is_err() {
                self.drop_msg(DropReason::Internal);
            }
            return;
        }
        self.branch_final(now, cid, status, Some(popped));
    }

    /// A branch got its final response (`bytes`: as received, Via popped; `None`:
    /// synthesized: 408 on timeout, 503 on a transport error).
    fn branch_final(
        &mut self,
        now: Instant,
        cid: ClientTxnId,
        status: u16,
        bytes: Option<Vec<u8>>,
    ) {
        // The branch ends here: its record goes, but for the server transaction an accepted
        // INVITE branch's further 2xx go up through. A late provisional on any other finds
        // no branch and is CANCELled (`on_branch_response`), as this one would have been.
        let Some(b) = self.branches.remove(&cid) else {
            return;
        };
        let sid = b.server;
        let dest = b.dest;
        if b.invite && (200..300).contains(&status) && bytes.is_some() {
            // One table: it grows at just under half full (the last of eight shards' fill
            // fraction), so it reaches its size while the calls ramp up.
            let (i, of) = (ACCEPTED_GROWTH_SHARD, ACCEPTED_GROWTH_SHARD + 1);
            if let Some(n) = self
                .accepted_growth
                .reserve_before_insert(self.accepted.len(), i, of)
            {
                self.accepted.reserve(n);
            }
            self.accepted.insert(cid, sid);
            self.accepted_growth.note_capacity(self.accepted.capacity());
        }
        if b.invite && self.config.branch_events {
            if b.state == BranchState::Calling {
                self.push_event(EndpointEvent::BranchAnswered {
                    to: b.dest,
                    edge: b.edge,
                    delay: now.saturating_duration_since(b.sent),
                });
            }
            // A 500 that stands for a 503 further on (RFC 3326 Reason, as this proxy sends
            // it) is reported as the 503 it was: the overload signal of end-to-end control.
            let status = match &bytes {
                Some(r) if status == 500 && stands_for_503(r, &self.config.limits) => 503,
                _ => status,
            };
            let e = EndpointEvent::BranchEnded {
                to: b.dest,
                edge: b.edge,
                status,
                timed_out: bytes.is_none() && status == 408,
                delay: now.saturating_duration_since(b.sent),
            };
            self.push_event(e);
        }
        if let Some(call) = self.calls.get_mut(&sid) {
            call.pending = call.pending.saturating_sub(1);
            // A DNS target that timed out, failed or answered 503 goes last for a while.
            if call.dns && (status == 503 || (status == 408 && bytes.is_none())) {
                self.dns.mark_failed(now, &dest);
            }
        }
        if self.fail_over(now, sid, status, bytes.is_some()) {
            return;
        }
        self.consider_final(now, sid, status, bytes);
        self.maybe_finish(now, sid);
    }

    /// §16.7 steps 3–5 and 10 for one final response of context `sid`.
    fn consider_final(
        &mut self,
        now: Instant,
        sid: ServerTxnId,
        status: u16,
        bytes: Option<Vec<u8>>,
    ) {
        let Some(call) = self.calls.get_mut(&sid) else {
            if (200..300).contains(&status)
                && let Some(b) = bytes
            {
                self.forward_by_via(&b);
            }
            return;
        };
        let invite = call.invite;
        if (200..300).contains(&status) {
            // 2xx: forwarded at once, every one of them (INVITE); the rest is cancelled.
            let first = !call.final_sent;
            call.final_sent = true;
            // Nothing is built from the request once a final response went up: free it now
            // rather than when the transaction ends (Timer L, 32 s later over UDP).
            call.request = Vec::new();
            call.best = None;
            if let Some(b) = bytes
                && (invite || first)
            {
                self.forward_upstream(now, sid, b);
            }
            if invite {
                self.cancel_pending(now, sid);
            }
            return;
        }
        // RFC 4320 §4.2: a timed-out non-INVITE branch gives no 408; if nothing else
        // answers, no final response goes up at all.
        if status == 408 && bytes.is_none() && !invite {
            return;
        }
        if call.final_sent {
            // A final response already went up: later ones only matter for cancelling.
            if invite && status >= 600 {
                self.cancel_pending(now, sid);
            }
            return;
        }
        let better = call
            .best
            .as_ref()
            .is_none_or(|(s, _)| response_rank(status) < response_rank(*s));
        if better {
            let bytes = match bytes {
                Some(b) => b,
                None => {
                    let req = call.request.clone();
                    let reason = match status {
                        408 => "Request Timeout",
                        503 => "Service Unavailable",
                        _ => "Failed",
                    };
                    match Message::parse(&req, &self.config.limits) {
                        Ok(m) => self.build(&m, status, reason, &[]),
                        Err(_) => Vec::new(),
                    }
                }
            };
            if let Some(call) = self.calls.get_mut(&sid) {
                call.best = Some((status, bytes));
            }
        }
        if invite && status >= 600 {
            self.cancel_pending(now, sid);
        }
    }

    /// §16.7 step 6: once every branch is final and nothing final went up, the best response
    /// does (a lone 503 becomes 500; no response at all is a 408).
    fn maybe_finish(&mut self, now: Instant, sid: ServerTxnId) {
        let Some(call) = self.calls.get_mut(&sid) else {
            return;
        };
        if call.pending > 0 {
            return;
        }
        if call.final_sent {
            // Every branch is final and so is the answer upstream: the context has no more
            // use (a further 2xx of an accepted branch goes up through the server
            // transaction), so it goes now rather than with the transaction (Timer L or J:
            // 32 s later over UDP).
            self.calls.remove(&sid);
            return;
        }
        call.final_sent = true;
        if call.best.is_none() && !call.invite {
            // RFC 4320: no 408 for a non-INVITE; the upstream client times out by itself.
            self.txns.abandon(TxnId::Server(sid));
            return;
        }
        let best = call.best.take();
        let req = std::mem::take(&mut call.request);
        let resp = match best {
            Some((status, bytes)) if status != 503 && !bytes.is_empty() => bytes,
            other => {
                let (code, reason) = match other {
                    Some(_) => (500, "Server Internal Error"),
                    None => (408, "Request Timeout"),
                };
                // §16.7 step 6 turns a lone 503 into a 500 (the next hop's overload is not
                // ours); RFC 3326's Reason says what it was, so that an upstream edge doing
                // end-to-end overload control (DEOC) still sees the overload it answers to.
                let was_503 = matches!(other, Some((503, _)));
                // RFC 3261 §21.5.1: a 500 may say when to come back; the next hop's
                // Retry-After stays with the 500 that stands for its 503, so that a caller
                // that honours it (a phone re-registering) is not lost.
                let retry_after: Option<Vec<u8>> = match &other {
                    Some((503, b)) => Message::parse(b, &self.config.limits).ok().and_then(|m| {
                        m.headers_named(b"Retry-After")
                            .next()
                            .map(|h| m.value(h).to_vec())
                    }),
                    _ => None,
                };
                let mut extra: Vec<(&str, &[u8])> = Vec::with_capacity(2);
                if was_503 {
                    extra.push(("Reason", REASON_503));
                }
                if let Some(v) = retry_after.as_deref() {
                    extra.push(("Retry-After", v));
                }
                match Message::parse(&req, &self.config.limits) {
                    Ok(m) => self.build(&m, code, reason, &extra),
                    Err(_) => return,
                }
            }
        };
        self.forward_upstream(now, sid, resp);
        self.calls.remove(&sid);
    }

    /// Sends a response up through the server transaction, or statelessly by its Via when the
    /// transaction is gone (a late 2xx).
    fn forward_upstream(&mut self, now: Instant, sid: ServerTxnId, bytes: Vec<u8>) {
        let is_2xx = bytes.get(8).is_some_and(|&d| d == b'2');
        // A 2xx that no transaction can take (gone, or final with a non-2xx already) goes by
        // its Via; everything else through the transaction, without a copy kept in case.
        let takes = match self.txns.server_state(sid) {
            None => false,
            Some(s) => !matches!(s, ServerState::Completed | ServerState::Confirmed),
        };
        if is_2xx && !takes {
            self.forward_by_via(&bytes);
        } else if self.txns.respond(now, sid, bytes).is_err() {
            self.drop_msg(DropReason::Internal);
        }
    }

    /// Sends a response (our Via already removed) to the address its top Via names.
    fn forward_by_via(&mut self, bytes: &[u8]) {
        let dest = Message::parse(bytes, &self.config.limits)
            .ok()
            .and_then(|m| m.top_via().ok().and_then(|v| via_destination(&v)));
        match dest {
            Some(dest) => {
                self.stats.stateless += 1;
                self.out.push_back((dest, bytes.to_vec()));
            }
            None => self.drop_msg(DropReason::Unroutable),
        }
    }

    /// A response no client transaction matches: forwarded by its Via when our top Via says
    /// it belongs to a stateless branch, or when it is a 2xx (retransmitted by the UAS after
    /// the client transaction ended); dropped otherwise.
    fn stray_response(&mut self, msg: &Message<'_>, status: u16) {
        let Ok(via) = msg.top_via() else {
            self.drop_msg(DropReason::Malformed);
            return;
        };
        let stateless = via.branch().is_some_and(|b| b.starts_with(b"z9hG4bKs"));
        if !is_our_via(&self.config, &via) || !(stateless || (200..300).contains(&status)) {
            self.drop_msg(DropReason::StrayResponse);
            return;
        }
        match Self::pop_our_via(msg) {
            Some(popped) => self.forward_by_via(&popped),
            None => self.drop_msg(DropReason::Malformed),
        }
    }
}

/// What a response to an unparsable request can be built from: its Request-Line (with the
/// version replaced by `SIP/2.0` when the error is an unsupported version) and its clean
/// Via, From, To, Call-ID and CSeq lines, then `Content-Length: 0`. `None` when the message
/// is not a request or the error lies in the Request-Line itself.
fn salvage_request(
    bytes: &[u8],
    e: holdline_sip::ParseError,
    limits: &holdline_sip::Limits,
) -> Option<Vec<u8>> {
    let start = bytes.iter().position(|&b| b != b'\r' && b != b'\n')?;
    let mut lines = bytes[start..]
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let first = lines.next()?;
    if first.len() >= 4 && first[..4].eq_ignore_ascii_case(b"SIP/") {
        return None;
    }
    let mut out = Vec::with_capacity(512);
    if e.kind == holdline_sip::ParseErrorKind::UnsupportedVersion {
        // The method and Request-URI passed; only the version is replaced.
        let line = first.trim_ascii_end();
        let sp = line.iter().rposition(|&b| b == b' ')?;
        out.extend_from_slice(line[..sp].trim_ascii_end());
        out.extend_from_slice(b" SIP/2.0\r\n");
    } else if (e.offset as usize) < start + first.len() || first.len() > limits.max_header_line {
        return None;
    } else {
        out.extend_from_slice(first);
        out.extend_from_slice(b"\r\n");
    }
    let mut kept = 0;
    for line in lines {
        if line.is_empty() {
            break;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let kind = HeaderName::lookup(line[..colon].trim_ascii());
        let wanted = matches!(
            kind,
            HeaderName::Via
                | HeaderName::From
                | HeaderName::To
                | HeaderName::CallId
                | HeaderName::CSeq
        );
        if wanted && line.len() <= limits.max_header_line && !line.contains(&0) && kept < 32 {
            out.extend_from_slice(line);
            out.extend_from_slice(b"\r\n");
            kept += 1;
        }
    }
    out.extend_from_slice(b"Content-Length: 0\r\n\r\n");
    Some(out)
}
