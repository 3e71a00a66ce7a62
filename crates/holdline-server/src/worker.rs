//! One worker: a mio event loop owning its UDP sockets, its TCP listener(s) and connections,
//! its engine, and the receiving end of its hand-off channel.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant as StdInstant};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use holdline_base::{ConnId, Instant, Peer, Rng, Transport};
use holdline_io::Clock;
use holdline_io::tcp::{ConnLimits, ReadOutcome, TcpConn, TcpListener, TcpOptions, TlsState};
use holdline_io::udp::{RecvBatch, SendBatch, UdpSocket};
use holdline_overload::{
    Admission, Class, Controller, DeferConfig, DeferFairness, DeferQueue, Feedback, FloodConfig,
    FloodGuard, HopMeasure, HopServer, Lane, Outcome, RejectReason, Rejection, RejectionBudget,
    Release, Signal, Split, TargetId, Verdict, Work,
};
use holdline_proto::{IpNet, OverloadAnswer, RateAnswer};
use holdline_sctp::{SctpUdp, SendError as SctpSendError, call_id_key};
use holdline_sip::{Frame, Framer, Limits, Message, Method, OcAlgo, OcReport, ParseErrorKind};
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;

use crate::core::{HopEvent, WorkerCore};
use crate::metrics::{Close, Drop, WorkerStats, transport_idx};
use crate::shard::owner_of;

pub(crate) const WAKER: Token = Token(0);
const UDP_BASE: usize = 1;
/// SCTP-over-UDP sockets (worker 0 only): below the INVITE sockets, above any UDP listener.
const SCTP_BASE: usize = 1 << 14;
/// Tokens of the UDP sockets that receive new INVITEs only (`udp_invite_socket`).
const INVITE_UDP_BASE: usize = 1 << 15;
const LISTENER_BASE: usize = 1 << 16;
const CONN_BASE: usize = 1 << 20;
/// Receive batches per UDP readiness before yielding to other sources.
const UDP_BUDGET: usize = 8;
/// Reads per TCP readiness before yielding.
const TCP_BUDGET: usize = 16;
/// The longest one connection's messages are handled in one turn before the worker polls
/// again and serves the other sources: under load no connection holds the worker for long,
/// and a response that arrives meanwhile waits at most about this long plus one turn of each
/// other busy connection (seed 000's RE serves admitted calls' messages promptly).
const TCP_TURN: Duration = Duration::from_millis(1);
/// Hand-off messages taken per loop iteration.
const HANDOFF_BUDGET: usize = 1024;
/// Accepts per listener readiness.
const ACCEPT_BUDGET: usize = 64;

/// What workers send each other.
#[derive(Debug)]
pub(crate) enum Handoff {
    /// A message for a call the receiver owns.
    Inbound { bytes: Vec<u8>, from: Peer },
    /// A datagram that waited too long in an INVITE socket, for a call the receiver owns: a
    /// new INVITE is answered `503` ([`Settings::invite_max_wait`]); a retransmission of an
    /// admitted one goes its normal way.
    Stale { bytes: Vec<u8>, from: Peer },
    /// Bytes to write on a connection the receiver owns.
    Outbound { bytes: Vec<u8>, to: Peer },
    /// A new INVITE for a call the receiver owns, read over TCP at or before `since`: it
    /// waits in the receiver's deferred queue (the owner's idle time is what it needs), its
    /// connection paused by the sender until a [`Handoff::Resume`] comes back.
    Deferred {
        bytes: Vec<u8>,
        from: Peer,
        since: Instant,
        /// Its connection has brought nothing but new INVITEs (it may be held closed).
        pollable: bool,
    },
    /// The deferred INVITE of this connection (which the receiver owns) has been handled:
    /// read it again.
    Resume { conn: ConnId },
    /// A request from `ip` failed authentication at the sender: count it in the receiver's
    /// flood guard too, so that every worker throttles the source at the same count.
    AuthFailure { ip: std::net::IpAddr },
    /// The answer to a DNS lookup this worker asked the resolver thread for.
    Dns(holdline_proto::DnsResponse),
}

/// State every worker and the server share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) stop: AtomicBool,
    /// Shutdown deadline, nanoseconds on `clock` (u64::MAX: none).
    pub(crate) deadline: AtomicU64,
    pub(crate) wakers: Vec<Waker>,
    pub(crate) senders: Vec<Sender<Handoff>>,
    pub(crate) stats: Vec<WorkerStats>,
    pub(crate) open_conns: AtomicUsize,
    pub(crate) clock: Clock,
    /// Connection reuse (RFC 3261 §18.2.2, RFC 5923): the open connections peers opened to
    /// us, by the peer's address, whichever worker owns them. A message to that address
    /// without a connection of its own goes over it (a softphone's Contact is often the
    /// ephemeral port of its connection to us: a new connection there is refused). Entries
    /// go when their connection closes.
    /// Keyed by transport too: a TLS connection never carries what was meant for TCP.
    pub(crate) accepted: std::sync::Mutex<HashMap<(SocketAddr, Transport), ConnId>>,
    /// The inodes of the workers' UDP sockets, and of their INVITE sockets: where to look
    /// for the kernel's drops (`holdline_udp_kernel_drops_total`).
    pub(crate) udp_inodes: [Vec<u64>; 2],
    /// The DNS resolver thread's queue, when routes name next hops by DNS.
    pub(crate) dns: Option<crate::dns::DnsHandle>,
    /// Set by a drain: new calls and registrations are answered 503 (maintenance) with
    /// `Retry-After: drain_retry_after` seconds.
    pub(crate) draining: AtomicBool,
    pub(crate) drain_retry_after: AtomicU64,
    /// The running configuration; a reload replaces it and bumps `live_gen`, and every
    /// worker applies its live part at its next loop iteration
    /// ([`WorkerStats::applied_gen`] says which generation it runs).
    pub(crate) live: std::sync::Mutex<Arc<crate::ServerConfig>>,
    pub(crate) live_gen: AtomicU64,
    /// SIP capture (`[capture]`): where copies of the messages go, when on.
    pub(crate) capture: Option<crate::capture::Capture>,
}

impl Shared {
    /// The running configuration.
    pub(crate) fn live_config(&self) -> Arc<crate::ServerConfig> {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Shared {
    /// The open connection a peer at `addr` opened to us over `transport`, if any.
    fn accepted_to(&self, addr: SocketAddr, transport: Transport) -> Option<ConnId> {
        self.accepted.lock().ok()?.get(&(addr, transport)).copied()
    }
}

/// Per-worker settings derived from the configuration.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) limits: Limits,
    pub(crate) max_connections: usize,
    /// Read-ahead and queue bounds of connections to next hops not in `next_hops`.
    pub(crate) conn_limits: ConnLimits,
    /// Socket options of connections to next hops not in `next_hops`.
    pub(crate) tcp_opts: TcpOptions,
    /// Bounds of the connections accepted on each TCP listener (the workers' listener order).
    pub(crate) listener_limits: Vec<ConnLimits>,
    /// Which of the listeners are TLS listeners (same order).
    pub(crate) listener_tls: Vec<bool>,
    /// The rustls configurations, when the server uses TLS.
    pub(crate) tls: Option<Arc<crate::tls::TlsSetup>>,
    /// Socket options and bounds of the connections to particular next hops.
    pub(crate) next_hops: HashMap<SocketAddr, (TcpOptions, ConnLimits)>,
    pub(crate) idle_timeout: Duration,
    pub(crate) write_stall: Duration,
    /// Capacity emulation: CPU time spent on top of every message handled...
    pub(crate) emulate_cost: Duration,
    /// ... and on top of a rejected new INVITE.
    pub(crate) emulate_reject_cost: Duration,
    /// The emulated cost is waited (a sleep, then a spin for the last 100 µs) rather than
    /// spun: the worker is as busy, the machine's CPU stays free (`emulate_sleep`).
    pub(crate) emulate_sleep: bool,
    /// The names of the target edges routes name for DEOC (`deoc_target`), by their number
    /// at the hop controller (per-target metrics).
    pub(crate) deoc_names: HashMap<TargetId, String>,
    /// TCP: new INVITEs wait for idle time, their connection unread meanwhile (`None`: off).
    pub(crate) defer: Option<DeferConfig>,
    /// Occupancy from the thread's CPU clock (`[overload] occupancy_clock = "cpu"`), not the
    /// wall-clock busy time (see [`Worker::cpu_occupancy`]).
    pub(crate) cpu_occupancy: bool,
    /// UDP: a new INVITE that waited longer than this in its INVITE socket (kernel receive
    /// time to read) is answered `503` (reason `defer_timeout`), whatever the gate would say:
    /// its caller has retransmitted by now, and serving it late makes a call set up in
    /// seconds and holds the queue. `None`: off.
    pub(crate) invite_max_wait: Option<(Duration, Option<Duration>)>,
    /// Per-source flood protection (`None`: off), and the sources it exempts.
    pub(crate) flood: Option<FloodConfig>,
    pub(crate) trusted: Vec<IpNet>,
    /// The `Retry-After` of a REGISTER rejected for load: whole seconds drawn uniformly from
    /// this range, so that a rejected herd of phones comes back spread out (RFC 3261
    /// §21.5.4; RFC 6357 §4's registration storms).
    pub(crate) register_retry_after: (u32, u32),
}

struct Conn {
    io: TcpConn,
    id: ConnId,
    /// TCP, or TLS when a session runs inside `io`.
    transport: Transport,
    /// The TLS handshake's end (completed or failed) has been counted.
    handshake_counted: bool,
    framer: Framer,
    last_activity: Instant,
    full_since: Option<Instant>,
    outbound: bool,
    /// A new INVITE read from this connection waits in the worker's deferred queue: the
    /// connection is not read until it has been handled.
    paused: bool,
    /// The kernel's receive time of the newest bytes read from this connection: every
    /// message framed from its buffer arrived then or earlier.
    rx_ns: Option<u64>,
    /// The kernel's receive time of the read that brought the first bytes of the message at
    /// the head of the buffer, when that read began it: a message that arrived in parts
    /// (the rest held back by the sender) waited since its first part, not its last.
    head_rx_ns: Option<u64>,
    /// A message other than a new INVITE (or the ACK of one this server rejected) has been
    /// read from this connection: it is not an upstream's ECS INVITE connection, and the
    /// poll-based deferral never holds it closed.
    mixed: bool,
    /// The branches of the last new INVITEs read from this connection, to tell the ACK of a
    /// rejected one (same branch) from that of an admitted call (RFC 3261 §17.1.1.3).
    invite_branches: RecentBranches,
    /// The connection's local address, read once when SIP capture first needs it.
    local: Option<SocketAddr>,
}

impl Conn {
    /// The local address (one `getsockname`, then cached).
    fn local_addr(&mut self) -> Option<SocketAddr> {
        if self.local.is_none() {
            self.local = self.io.local_addr().ok();
        }
        self.local
    }
}

/// The hashes of the last few Via branches seen (a ring).
#[derive(Debug, Default)]
struct RecentBranches {
    ring: [u64; 8],
    next: usize,
}

impl RecentBranches {
    fn push(&mut self, branch: Option<u64>) {
        if let Some(b) = branch {
            self.ring[self.next % self.ring.len()] = b;
            self.next = self.next.wrapping_add(1);
        }
    }

    /// Whether `bytes` is an ACK whose top Via branch is one of the remembered ones.
    fn acks(&self, bytes: &[u8], limits: &Limits) -> bool {
        bytes.starts_with(b"ACK ")
            && Message::parse(bytes, limits)
                .ok()
                .and_then(|m| top_branch(&m))
                .is_some_and(|b| self.ring[..self.next.min(self.ring.len())].contains(&b))
    }
}

/// A hash of the branch parameter of the top Via of `m`.
fn top_branch(m: &Message<'_>) -> Option<u64> {
    use std::hash::{Hash as _, Hasher as _};
    let via = m.top_via().ok()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    via.branch()?.hash(&mut h);
    Some(h.finish())
}

/// A new INVITE read over TCP, waiting for the worker that owns its call to have nothing
/// else to do; the connection it came on (`from.conn`) is paused meanwhile.
struct Deferred {
    bytes: Vec<u8>,
    from: Peer,
    /// The worker owning its call (this one, unless the hand-off queue was full).
    owner: usize,
    /// Its connection has brought nothing but new INVITEs so far: with
    /// `defer_fairness = "poll"` it may be held closed.
    pollable: bool,
}

pub(crate) struct Worker {
    pub(crate) index: usize,
    pub(crate) poll: Poll,
    pub(crate) core: Box<dyn WorkerCore>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) rx: Receiver<Handoff>,
    pub(crate) udp: Vec<UdpSocket>,
    /// The sockets the kernel steers new INVITEs to (`udp_invite_socket`), read only when
    /// every other source has been read: see [`Worker::read_invites`].
    invite_udp: Vec<UdpSocket>,
    /// SIP over SCTP over UDP: the encapsulation sockets with their associations (worker 0
    /// holds them all; the others hand their SCTP messages to it).
    sctp: Vec<SctpSock>,
    /// Which of `invite_udp` may have datagrams waiting (readable and not yet drained).
    invite_ready: Vec<bool>,
    pub(crate) listeners: Vec<TcpListener>,
    pub(crate) settings: Settings,
    /// Local overload control: decides on every new INVITE at the admission gate.
    controller: Box<dyn Controller>,
    /// TCP smart forwarding at the forward gate, and its connection split, when on.
    forward: Option<(Box<dyn Controller>, Split)>,
    /// Start of the busy time not yet reported to the controller (set when `poll` returns).
    busy_mark: StdInstant,
    /// The worker thread's CPU time when the controller's last interval closed, and the
    /// time it has waited in `poll` since: the interval's occupancy is CPU / (CPU + wait),
    /// the share of the CPU the worker could get that it used (see
    /// [`Worker::cpu_occupancy`]).
    cpu_mark: Option<Duration>,
    waited: Duration,
    /// Since the last interval closed: the emulated cost waited rather than spun
    /// (`emulate_sleep`). It stands for CPU work, so the CPU-clock occupancy counts it as
    /// CPU time: without it a worker waiting out its emulated costs read as idle as its real
    /// CPU time (a few percent) until it never waited in `poll` at all, and OCC let it run to
    /// 100% busy instead of its target.
    emulated_wait: Duration,
    /// Since the last interval closed: the busy (wall) time reported, and the part of it not
    /// spent on rejections (what [`Worker::busy_since`] gives the controller).
    interval_busy: Duration,
    interval_other: Duration,
    /// The last interval's CPU-clock occupancy with the rejections' time counted in (`None`:
    /// not measured, `occupancy_clock = "wall"`). The server role answers from it (see
    /// [`Worker::update_answer`]).
    whole_occupancy: Option<f64>,
    /// Since `busy_mark`: time spent handling messages, the part of it spent on rejected new
    /// INVITEs and the ACKs of their 503s, how many of those, and the datagram count at the
    /// mark (see [`Worker::busy_since`]).
    handling: Duration,
    rejecting: Duration,
    rejected_msgs: u64,
    datagram_mark: u64,
    /// With INVITE sockets: the share of time rejections may take; while it is spent, new
    /// INVITEs are left in the kernel.
    budget: Option<RejectionBudget>,
    /// Per-source flood protection, when on.
    flood: Option<FloodGuard>,
    /// Set while reading INVITE sockets past the rejection budget: the gate admits.
    admit_all: bool,
    /// Draws the Retry-After of rejected REGISTERs.
    rng: Rng,
    /// Mean CPU time per message handled (exponentially weighted), ns: turns a queueing delay
    /// into a queue length for the queue-limit controllers.
    service_ns: f64,
    conns: Slab<Conn>,
    conn_keys: HashMap<ConnId, usize>,
    /// Outbound connections by next hop, transport (TCP or TLS) and lane (ECS keeps INVITEs
    /// on a connection of their own).
    pool: HashMap<(SocketAddr, Transport, LaneKey), ConnId>,
    next_seq: u64,
    recv: Option<RecvBatch>,
    sends: Vec<SendBatch>,
    tx_buf: Vec<u8>,
    scratch: Vec<u8>,
    /// This worker's SIP capture batch (`[capture]`), handed over once per loop iteration.
    capture: Option<crate::capture::Batch>,
    need_wake: Vec<bool>,
    pending: Vec<Token>,
    more_handoffs: bool,
    stopping: bool,
    /// New INVITEs of calls this worker owns, read over TCP (by it or by another worker),
    /// handled first in first out when nothing else is to be done.
    deferred: DeferQueue<Deferred>,
    /// Resumes for other workers' connections whose hand-off found the queue full: sent
    /// again every iteration (a connection must not stay paused).
    resumes: Vec<ConnId>,
    /// Messages handled so far (an iteration that handled none is idle time).
    handled: u64,
    /// Hop-by-hop overload control, client role (RFC 7339 / RFC 7415), at the forward gate.
    hop: Option<Box<dyn Controller>>,
    /// Hop-by-hop overload control, server role, when this worker answers.
    server_role: Option<ServerRole>,
    /// New INVITEs answered 503 because they waited too long in their INVITE socket.
    stale_invites: u64,
    /// New calls and registrations turned away by a drain (`holdline_drain_rejected_total`).
    drain_rejected: u64,
    /// The configuration generation this worker runs (see [`Shared::live_gen`]).
    live_gen: u64,
    /// The configuration it was applied from.
    live: Option<Arc<crate::ServerConfig>>,
}

/// The server role of hop-by-hop overload control in a worker: the estimator and what it is
/// fed between two control intervals.
pub(crate) struct ServerRole {
    /// The estimator (pure, in `holdline-overload`).
    pub(crate) estimator: HopServer,
    /// `oc-validity` of the answers, ms.
    pub(crate) validity_ms: u32,
    /// Whether rate-based clients are answered too.
    pub(crate) answer_rate: bool,
    /// Whether explicit window clients are answered too.
    pub(crate) answer_window: bool,
    /// When the estimator was last updated.
    updated: StdInstant,
    /// Since when the loss answer has been at its ceiling.
    floor_since: Option<StdInstant>,
    /// Queueing delays of new INVITEs read from the INVITE sockets since the last update:
    /// sum in seconds, count.
    invite_delay: (f64, u64),
}

impl ServerRole {
    /// A server role answering with `validity_ms`, rate clients too with `answer_rate`,
    /// window clients with `answer_window`.
    pub(crate) fn new(
        estimator: HopServer,
        validity_ms: u32,
        answer_rate: bool,
        answer_window: bool,
    ) -> Self {
        Self {
            estimator,
            validity_ms,
            answer_rate,
            answer_window,
            updated: StdInstant::now(),
            floor_since: None,
            invite_delay: (0.0, 0),
        }
    }
}

/// How long the server role's loss answer must have stayed at its ceiling (the estimator's
/// acceptance at its floor, 1%) before upstream clients that take it are put to the local gate
/// again: a compliant client cuts its load within one answer's round trip, but the server
/// may stay saturated for a while draining what was queued before (its INVITE socket's
/// buffer), which is no sign of a client ignoring the answers. Past this, the clients are not
/// reducing their load as asked, and the gate protects the server itself (a client that
/// advertises `oc` and ignores the answers gets no free pass).
const EXEMPT_FLOOR_GRACE: Duration = Duration::from_secs(1);

/// How far beyond the explicit window's queueing target the mean wait of new INVITEs may go
/// before window clients lose their exemption from the gate.
const WINDOW_EXEMPT_FACTOR: f64 = 4.0;

/// A next hop's overload answer as the hop-by-hop client's signal.
fn feedback_of(r: OcReport) -> Feedback {
    let validity = Duration::from_millis(u64::from(r.validity_ms));
    match r.algo {
        OcAlgo::Loss => Feedback::Loss {
            percent: u8::try_from(r.value.min(100)).unwrap_or(100),
            validity,
            seq: r.seq,
        },
        OcAlgo::Rate => Feedback::Rate {
            per_second: r.value,
            validity,
            seq: r.seq,
        },
        OcAlgo::Window => Feedback::Window {
            window: r.value,
            validity,
            seq: r.seq,
        },
    }
}

/// The worker owning the call when `bytes` is a new INVITE for the deferral: an INVITE
/// request whose To has no tag (a re-INVITE of an admitted call has one), with a hash of its
/// top Via branch when `branch` is asked for (the poll-based deferral); `None` otherwise.
/// Anything that does not parse is not one: it goes its normal way (and gets its `400`).
fn new_invite_owner(
    bytes: &[u8],
    limits: &Limits,
    workers: usize,
    branch: bool,
) -> Option<(usize, Option<u64>)> {
    if !bytes.starts_with(b"INVITE ") {
        return None;
    }
    let m = Message::parse(bytes, limits).ok()?;
    let new = m.method() == Some(Method::Invite) && m.to().is_ok_and(|to| to.tag().is_none());
    new.then(|| {
        m.call_id().ok().map(|id| {
            let b = branch.then(|| top_branch(&m)).flatten();
            (crate::shard::shard_of(id, workers), b)
        })
    })?
}

/// How long ago the kernel received something stamped `stamp` (`CLOCK_REALTIME` ns).
fn age_of(stamp: u64) -> Duration {
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    Duration::from_nanos(wall.saturating_sub(stamp))
}

/// Offset just past the empty line ending the header section at the front of `buf`.
fn header_end(buf: &[u8]) -> Option<usize> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    let crlf = buf.windows(3).position(|w| w == b"\n\r\n").map(|i| i + 3);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// [`Lane`] as a map key.
type LaneKey = u8;

fn lane_key(l: Lane) -> LaneKey {
    match l {
        Lane::Shared => 0,
        Lane::Invite => 1,
        Lane::Other => 2,
    }
}

/// The number of a target edge a route names (`deoc_target`) at the hop controller: apart
/// from next hops' numbers ([`target_of`]) by its top bit.
pub(crate) fn edge_target(edge: holdline_proto::EdgeId) -> TargetId {
    TargetId(edge.0 | (1 << 63))
}

/// Where the hop controller keeps the state of a call to next hop `dest` on a route naming
/// target edge `edge`: DEOC's per-target state is the edge's when the route names one
/// (seed 003: the egress edge, however many hops away); every other controller's (and
/// DEOC's without one) the next hop's.
fn hop_target(deoc: bool, dest: SocketAddr, edge: Option<holdline_proto::EdgeId>) -> TargetId {
    match edge {
        Some(e) if deoc => edge_target(e),
        _ => target_of(dest),
    }
}

/// A next hop's number for the forward controller.
fn target_of(addr: SocketAddr) -> TargetId {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(v4) => u64::from(u32::from(v4)),
        std::net::IpAddr::V6(v6) => {
            let b = u128::from(v6);
            (b as u64) ^ ((b >> 64) as u64)
        }
    };
    TargetId((ip << 16) ^ u64::from(addr.port()))
}

/// The lane a request to a next hop travels on: with ECS, INVITEs on their own.
fn lane_for(split: Option<Split>, bytes: &[u8]) -> Lane {
    match split {
        Some(Split::Explicit) if bytes.starts_with(b"INVITE ") => Lane::Invite,
        Some(Split::Explicit) => Lane::Other,
        _ => Lane::Shared,
    }
}

fn conn_owner(id: ConnId) -> usize {
    (id.0 >> 48) as usize
}

impl Worker {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        index: usize,
        poll: Poll,
        core: Box<dyn WorkerCore>,
        shared: Arc<Shared>,
        rx: Receiver<Handoff>,
        udp: Vec<UdpSocket>,
        listeners: Vec<TcpListener>,
        settings: Settings,
        controller: Box<dyn Controller>,
        forward: Option<(Box<dyn Controller>, Split)>,
    ) -> Self {
        let workers = shared.senders.len();
        let slot = settings.limits.max_message_size + 1;
        let defer = settings.defer.unwrap_or_default();
        let flood = settings.flood.clone().and_then(|c| FloodGuard::new(c).ok());
        let live = shared.live_config();
        let capture = shared.capture.as_ref().map(crate::capture::Capture::batch);
        Self {
            index,
            poll,
            core,
            sends: udp.iter().map(|_| SendBatch::new()).collect(),
            shared,
            rx,
            udp,
            invite_udp: Vec::new(),
            sctp: Vec::new(),
            invite_ready: Vec::new(),
            listeners,
            settings,
            controller,
            forward,
            busy_mark: StdInstant::now(),
            cpu_mark: None,
            waited: Duration::ZERO,
            emulated_wait: Duration::ZERO,
            interval_busy: Duration::ZERO,
            interval_other: Duration::ZERO,
            whole_occupancy: None,
            handling: Duration::ZERO,
            rejecting: Duration::ZERO,
            rejected_msgs: 0,
            datagram_mark: 0,
            budget: None,
            flood,
            admit_all: false,
            rng: Rng::seed_from_u64(crate::engine::random_seed() ^ index as u64),
            service_ns: 0.0,
            conns: Slab::new(),
            conn_keys: HashMap::new(),
            pool: HashMap::new(),
            next_seq: 1,
            hop: None,
            server_role: None,
            stale_invites: 0,
            drain_rejected: 0,
            live_gen: 0,
            live: Some(live),
            recv: Some(RecvBatch::new(32, slot)),
            tx_buf: Vec::with_capacity(4096),
            scratch: Vec::with_capacity(4096),
            capture,
            need_wake: vec![false; workers],
            pending: Vec::new(),
            more_handoffs: false,
            stopping: false,
            deferred: DeferQueue::new(defer),
            resumes: Vec::new(),
            handled: 0,
        }
    }

    fn stats(&self) -> &WorkerStats {
        &self.shared.stats[self.index]
    }

    /// Gives the worker its hop-by-hop client (forward gate) and server role (before
    /// [`register`](Self::register)).
    pub(crate) fn set_feedback(
        &mut self,
        hop: Option<Box<dyn Controller>>,
        server_role: Option<ServerRole>,
    ) {
        self.hop = hop;
        self.server_role = server_role;
    }

    /// Gives the worker its INVITE sockets and the budget of time its rejections may take
    /// (before [`register`](Self::register)).
    pub(crate) fn set_invite_sockets(&mut self, sockets: Vec<UdpSocket>, budget: RejectionBudget) {
        self.invite_ready = vec![false; sockets.len()];
        if !sockets.is_empty() {
            self.budget = Some(budget);
        }
        self.invite_udp = sockets;
    }

    /// Gives the worker the SCTP-over-UDP sockets and their endpoints (worker 0; before
    /// [`register`](Self::register)).
    pub(crate) fn set_sctp(&mut self, sockets: Vec<(UdpSocket, SctpUdp)>) {
        self.sctp = sockets
            .into_iter()
            .map(|(socket, ep)| SctpSock {
                socket,
                ep,
                sends: SendBatch::new(),
            })
            .collect();
    }

    /// Registers the sockets; call once before [`run`](Self::run).
    pub(crate) fn register(&mut self) -> io::Result<()> {
        for (i, s) in self.sctp.iter_mut().enumerate() {
            self.poll.registry().register(
                &mut s.socket,
                Token(SCTP_BASE + i),
                Interest::READABLE,
            )?;
        }
        for (i, s) in self.udp.iter_mut().enumerate() {
            self.poll
                .registry()
                .register(s, Token(UDP_BASE + i), Interest::READABLE)?;
        }
        for (i, s) in self.invite_udp.iter_mut().enumerate() {
            self.poll
                .registry()
                .register(s, Token(INVITE_UDP_BASE + i), Interest::READABLE)?;
        }
        for (i, l) in self.listeners.iter_mut().enumerate() {
            self.poll
                .registry()
                .register(l, Token(LISTENER_BASE + i), Interest::READABLE)?;
        }
        Ok(())
    }

    pub(crate) fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        let clock = self.shared.clock;
        let housekeeping_every = (self.settings.idle_timeout / 4)
            .min(self.settings.write_stall / 2)
            .clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut next_housekeeping = clock.now() + housekeeping_every;
        loop {
            let now = clock.now();
            let mut timeout = self
                .core
                .poll_timeout()
                .map(|t| t.saturating_duration_since(now));
            if !self.conns.is_empty() {
                let h = next_housekeeping.saturating_duration_since(now);
                timeout = Some(timeout.map_or(h, |t| t.min(h)));
            }
            if let Some(t) = self.sctp_timeout() {
                timeout = Some(timeout.map_or(t, |d| d.min(t)));
            }
            if self.stopping {
                let d = Instant::from_nanos(self.shared.deadline.load(Relaxed));
                let left = d.saturating_duration_since(now);
                timeout = Some(timeout.map_or(left, |t| t.min(left)));
            }
            // Sources with more to read: served after this poll's new events, so that what
            // arrived meanwhile (responses of admitted calls, above all) is not held up.
            // One entry per source: a source read both for a new event and as carried
            // pushes itself twice, and without this the list (and with it a saturated
            // worker's iteration, its timers waiting behind it) would grow by one read per
            // iteration.
            let mut carried = std::mem::take(&mut self.pending);
            carried.sort_unstable_by_key(|t| t.0);
            carried.dedup();
            if !carried.is_empty()
                || self.more_handoffs
                || self.deferred.has_ready()
                || !self.resumes.is_empty()
            {
                timeout = Some(Duration::ZERO);
            } else if let Some(t) = self.deferred.poll_timeout() {
                // Only INVITEs of connections held closed wait (poll-based deferral): sleep
                // until one is due (or a connection is to be opened).
                let t = t.saturating_duration_since(now);
                timeout = Some(timeout.map_or(t, |d| d.min(t)));
            }
            if self.invite_ready.contains(&true) {
                timeout = Some(Duration::ZERO);
            }
            let handled_before = self.handled;
            let t0 = StdInstant::now();
            if let Err(e) = self.poll.poll(&mut events, timeout)
                && e.kind() != io::ErrorKind::Interrupted
            {
                tracing::error!(worker = self.index, error = %e, "poll failed; worker exits");
                break;
            }
            let t1 = StdInstant::now();
            let now = clock.from_std(t1);
            self.busy_mark = t1;
            self.waited += t1 - t0;
            if let Some(cap) = &mut self.capture {
                cap.stamp();
            }

            if !self.stopping && self.shared.stop.load(Relaxed) {
                self.begin_shutdown();
            }
            let generation = self
                .shared
                .live_gen
                .load(std::sync::atomic::Ordering::Acquire);
            if generation != self.live_gen {
                self.apply_live(now, generation);
            }
            // The controller's intervals close lazily, when there is work: an idle server
            // does not wake up for them (a late close only makes the interval longer).
            self.close_interval_if_due(t1);
            for ev in events.iter() {
                let t = ev.token();
                match t.0 {
                    0 => {}
                    n if n >= CONN_BASE => {
                        self.conn_event(
                            now,
                            n - CONN_BASE,
                            ev.is_readable() || ev.is_read_closed(),
                            ev.is_writable() || ev.is_error(),
                        );
                    }
                    n if n >= LISTENER_BASE => self.accept(now, n - LISTENER_BASE),
                    n if n >= INVITE_UDP_BASE => {
                        if let Some(r) = self.invite_ready.get_mut(n - INVITE_UDP_BASE) {
                            *r = true;
                        }
                    }
                    n if n >= SCTP_BASE => self.read_sctp(now, n - SCTP_BASE),
                    n => self.read_udp(now, n - UDP_BASE),
                }
            }
            for t in carried {
                match t.0 {
                    n if n >= CONN_BASE => self.conn_event(now, n - CONN_BASE, true, false),
                    n if n >= LISTENER_BASE => self.accept(now, n - LISTENER_BASE),
                    n if n >= SCTP_BASE => self.read_sctp(now, n - SCTP_BASE),
                    n => self.read_udp(now, n - UDP_BASE),
                }
            }
            self.sctp_timers(now);
            self.drain_handoffs(now);
            self.read_invites(now);
            if self.core.poll_timeout().is_some_and(|t| t <= now) {
                self.core.handle_timeout(now);
                self.drain_transmits(now);
            }
            if now >= next_housekeeping {
                self.housekeeping(now);
                next_housekeeping = now + housekeeping_every;
            }
            // Deferred new INVITEs get the idle time only: one per iteration that handled
            // nothing else (its poll found nothing ready), so messages of admitted calls
            // always go first and the connections bringing new calls back up. One that
            // waited too long for idle time is rejected.
            let idle =
                self.handled == handled_before && self.pending.is_empty() && !self.more_handoffs;
            self.run_deferred(clock.now(), idle);
            for conn in std::mem::take(&mut self.resumes) {
                self.resume(now, conn);
            }
            self.send_dns_queries(now);
            self.flush_udp();
            self.flush_sctp();
            self.flush_wakes();
            if let Some(cap) = &mut self.capture {
                cap.flush();
            }
            if self.stats().core_wanted.swap(false, Relaxed) {
                self.render_core_metrics();
            }
            let in_flight = self.core.in_flight();
            self.stats().in_flight.store(in_flight as u64, Relaxed);
            if in_flight > 0 {
                self.stats().last_active_ns.store(now.as_nanos(), Relaxed);
            }
            let t2 = StdInstant::now();
            self.stats().loop_busy.record(t2 - t1);
            let busy = self.busy_since(t2);
            self.controller.on_signal(now, Signal::Busy(busy));
            let s = self.stats();
            s.busy_ns.fetch_add((t2 - t1).as_nanos() as u64, Relaxed);
            s.loop_ns.fetch_add((t2 - t0).as_nanos() as u64, Relaxed);
            if self.stopping {
                let deadline = Instant::from_nanos(self.shared.deadline.load(Relaxed));
                let idle = self.core.poll_timeout().is_none()
                    && self.rx.is_empty()
                    && self.deferred.is_empty()
                    && self.conns.iter().all(|(_, c)| c.io.queued_bytes() == 0);
                if idle || clock.now() >= deadline {
                    break;
                }
            }
        }
        self.render_core_metrics();
        let t = StdInstant::now();
        for s in &mut self.sctp {
            s.ep.shutdown_all(t);
        }
        self.flush_sctp();
        let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for k in keys {
            self.close(k, Close::Shutdown);
        }
    }

    /// Applies the live part of configuration generation `generation` (a reload): the
    /// engine's routing, the admission controllers when `[overload]` changed, the flood
    /// guard when `[flood]` or `trusted` changed. Calls and transactions in progress stay.
    fn apply_live(&mut self, now: Instant, generation: u64) {
        let cfg = self.shared.live_config();
        self.live_gen = generation;
        let old = self.live.replace(cfg.clone());
        self.core.reconfigure(&cfg);
        self.settings.deoc_names = crate::deoc_names(&cfg);
        let overload_changed = old.as_ref().is_none_or(|o| o.overload != cfg.overload);
        if old.is_some() && overload_changed {
            let o = &cfg.overload;
            let seed = crate::engine::random_seed() ^ generation;
            match o
                .controller()
                .map_err(|(k, m)| format!("{k}: {m}"))
                .and_then(|c| {
                    holdline_overload::ControllerFactory::build(&c, now, Rng::seed_from_u64(seed))
                        .map_err(|e| e.to_string())
                }) {
                Ok(c) => self.controller = c,
                Err(e) => {
                    tracing::error!(worker = self.index, error = %e, "overload controller not replaced")
                }
            }
            if let Some((ctl, split)) = self.forward.as_mut()
                && let Ok(Some(c)) = o.forward_controller()
                && let Ok(built) = holdline_overload::ControllerFactory::build(
                    &c,
                    now,
                    Rng::seed_from_u64(seed ^ 0x5f0d),
                )
            {
                *ctl = built;
                if let holdline_overload::ControllerConfig::SmartForwarding(c) = &c {
                    *split = c.split;
                }
            }
            let s = &mut self.settings;
            s.emulate_cost = Duration::from_micros(o.emulate_cost_us);
            s.emulate_reject_cost =
                Duration::from_micros(o.emulate_reject_cost_us.unwrap_or(o.emulate_cost_us));
            s.emulate_sleep = o.emulate_sleep;
            s.invite_max_wait = o.invite_max_wait();
            s.cpu_occupancy = o.occupancy_clock == "cpu";
            s.register_retry_after = (o.register_retry_after_s[0], o.register_retry_after_s[1]);
        }
        if old
            .as_ref()
            .is_some_and(|o| o.flood != cfg.flood || o.trusted != cfg.trusted || o.auth != cfg.auth)
        {
            let key = self
                .settings
                .flood
                .as_ref()
                .map_or_else(crate::engine::random_seed, |f| f.key);
            self.settings.flood = crate::flood_config(&cfg, key);
            self.settings.trusted = cfg.trusted.iter().map(|t| t.0).collect();
            self.flood = self
                .settings
                .flood
                .clone()
                .and_then(|c| FloodGuard::new(c).ok());
        }
        self.stats()
            .applied_gen
            .store(generation, std::sync::atomic::Ordering::Release);
    }

    fn render_core_metrics(&self) {
        let mut text = String::new();
        self.core.metrics(&mut text);
        crate::metrics::render_overload(
            "holdline_overload",
            &self.controller.snapshot(),
            &mut text,
        );
        if let Some((f, _)) = &self.forward {
            crate::metrics::render_overload("holdline_forward", &f.snapshot(), &mut text);
        }
        let _ = std::fmt::Write::write_fmt(
            &mut text,
            format_args!(
                "holdline_draining {}\nholdline_drain_rejected_total {}\nholdline_config_generation {}\n",
                u8::from(self.shared.draining.load(Relaxed)),
                self.drain_rejected,
                self.live_gen
            ),
        );
        if self.settings.invite_max_wait.is_some() {
            let _ = std::fmt::Write::write_fmt(
                &mut text,
                format_args!(
                    "holdline_overload_stale_invites_total {}\n",
                    self.stale_invites
                ),
            );
        }
        if let Some(h) = &self.hop {
            let snap = h.snapshot();
            crate::metrics::render_overload("holdline_feedback", &snap, &mut text);
            let _ = std::fmt::Write::write_fmt(
                &mut text,
                format_args!(
                    "holdline_feedback_throttled_targets {}\n",
                    snap.throttled_targets.unwrap_or(0)
                ),
            );
            let mut targets = Vec::new();
            h.target_snapshots(&mut targets);
            if h.algorithm() == holdline_overload::Algorithm::DelayWindow {
                crate::metrics::render_window_targets(&targets, &mut text);
            } else {
                crate::metrics::render_deoc_targets(&targets, &self.settings.deoc_names, &mut text);
            }
        }
        if self.settings.defer.is_some() {
            crate::metrics::render_defer(
                self.deferred.len(),
                self.deferred.open_streams(),
                self.deferred.stats(),
                &mut text,
            );
        }
        if let Some(b) = &self.budget {
            crate::metrics::render_budget(b, &mut text);
        }
        if let Some(g) = &self.flood {
            let f = g.stats();
            let _ = std::fmt::Write::write_fmt(
                &mut text,
                format_args!(
                    "holdline_flood_offenders_total {}\nholdline_flood_evictions_total {}\n\
                     holdline_auth_throttled_sources_total {}\n",
                    f.offenders, f.evictions, f.auth_offenders
                ),
            );
        }
        let s = self.stats();
        if let Ok(mut g) = s.core_text.lock() {
            g.0 += 1;
            g.1 = text;
            g.2 = Some(StdInstant::now());
        }
        s.core_ready.notify_all();
    }

    /// Stops reading: UDP sockets leave the poll (kept for sending), listeners close,
    /// connections are no longer read.
    fn begin_shutdown(&mut self) {
        self.stopping = true;
        for s in self.udp.iter_mut().chain(self.invite_udp.iter_mut()) {
            let _ = self.poll.registry().deregister(s);
        }
        self.invite_ready.iter_mut().for_each(|r| *r = false);
        for mut l in self.listeners.drain(..) {
            let _ = self.poll.registry().deregister(&mut l);
        }
        self.pending.clear();
    }

    fn read_udp(&mut self, now: Instant, i: usize) {
        if self.stopping || i >= self.udp.len() {
            return;
        }
        if !self.read_socket(now, i, false, UDP_BUDGET) {
            self.pending.push(Token(UDP_BASE + i));
        }
    }

    /// New INVITEs over UDP get what is left: one batch per INVITE socket and loop iteration,
    /// and only once no other UDP socket has datagrams left to read and no hand-off waits.
    /// A worker that cannot keep up thus never lets ACKs, BYEs and responses of admitted
    /// calls wait behind new calls; the new calls wait in their own receive buffer, and the
    /// kernel drops those that do not fit (free for the server: the caller retransmits).
    fn read_invites(&mut self, now: Instant) {
        if self.stopping
            || self.more_handoffs
            || self
                .pending
                .iter()
                .any(|t| (UDP_BASE..INVITE_UDP_BASE).contains(&t.0))
        {
            return;
        }
        // Past the rejection budget, the worker only admits: it reads new INVITEs in the
        // time admitted calls leave and admits what it reads; the rest waits in the kernel,
        // which drops what does not fit.
        self.admit_all = self.budget.as_mut().is_some_and(|b| !b.allows(now));
        for i in 0..self.invite_udp.len() {
            if self.invite_ready[i] && self.read_socket(now, i, true, 1) {
                self.invite_ready[i] = false;
            }
        }
        self.admit_all = false;
    }

    /// Reads up to `budget` batches from UDP socket `i` (of the INVITE sockets with
    /// `invites`) and dispatches them; true when the socket was drained.
    fn read_socket(&mut self, now: Instant, i: usize, invites: bool, budget: usize) -> bool {
        let Some(mut batch) = self.recv.take() else {
            return true;
        };
        let mut drained = false;
        for _ in 0..budget {
            let socket = if invites {
                &self.invite_udp[i]
            } else {
                &self.udp[i]
            };
            match socket.recv_batch(&mut batch) {
                Ok(n) => {
                    if invites {
                        self.stats().invite_socket_in.fetch_add(n as u64, Relaxed);
                    }
                    // The queueing delay the controllers see is that of admitted calls'
                    // messages: new INVITEs on sockets of their own wait by design.
                    if let Some(stamp) = batch.get(0).and_then(|d| d.received_at) {
                        if !invites {
                            self.report_queue_delay(now, stamp, batch.len());
                        } else {
                            let wait = age_of(stamp);
                            self.stats().invite_queue_delay.record(wait);
                            // Local control's queue gate sees how long new INVITEs wait...
                            self.controller
                                .on_signal(now, Signal::NewRequestDelay(wait));
                            // ... and the server role steers that wait (see HopServer).
                            if let Some(role) = self.server_role.as_mut() {
                                role.invite_delay.0 += wait.as_secs_f64();
                                role.invite_delay.1 += 1;
                            }
                        }
                    }
                    for k in 0..n {
                        let Some(d) = batch.get(k) else { continue };
                        let peer = Peer {
                            addr: d.source,
                            transport: Transport::Udp,
                            conn: None,
                        };
                        if d.truncated || d.payload.len() > self.settings.limits.max_message_size {
                            self.stats().msgs_in[0].fetch_add(1, Relaxed);
                            self.stats().drop(Drop::TooLarge);
                            continue;
                        }
                        if d.payload.iter().all(|&b| b == b'\r' || b == b'\n') {
                            continue; // keep-alive datagram
                        }
                        if let Some(cap) = &mut self.capture {
                            let socket = if invites {
                                &self.invite_udp[i]
                            } else {
                                &self.udp[i]
                            };
                            if let Ok(local) = socket.local_addr() {
                                cap.offer(d.payload, d.source, local, Transport::Udp);
                            }
                        }
                        let stale = invites
                            && self
                                .settings
                                .invite_max_wait
                                .is_some_and(|(w, _)| d.received_at.is_some_and(|t| age_of(t) > w));
                        self.dispatch(now, d.payload, peer, stale);
                    }
                    // A short batch emptied the socket: the next datagram raises a new edge
                    // (each arrival wakes the edge-triggered poll), so the receive that would
                    // only confirm it with `WouldBlock` is saved — and for an INVITE socket,
                    // the loop iteration that would have made it.
                    if n < batch.capacity() {
                        drained = true;
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    drained = true;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // ICMP errors surface here on some systems; nothing to do but go on.
                    tracing::debug!(worker = self.index, error = %e, "udp receive error");
                }
            }
        }
        self.recv = Some(batch);
        drained
    }

    /// Tells the controller how long the `count` messages just read waited in the socket's
    /// receive queue (from the kernel's receive time `stamp` to now), and the queue length
    /// that implies.
    fn report_queue_delay(&mut self, now: Instant, stamp: u64, count: usize) {
        let delay = age_of(stamp);
        self.stats().queue_delay.record(delay);
        self.controller.on_signal(now, Signal::QueueDelay(delay));
        if self.service_ns > 0.0 {
            let len = delay.as_nanos() as f64 / self.service_ns + count as f64;
            self.controller
                .on_signal(now, Signal::QueueLength(len.min(1e9) as usize));
        }
    }

    /// Routes one received message to the worker that owns its call.
    ///
    /// `stale`: an INVITE-socket datagram that waited too long (see
    /// [`Settings::invite_max_wait`]).
    fn dispatch(&mut self, now: Instant, bytes: &[u8], from: Peer, stale: bool) {
        // Flood protection: requests (not responses) from sources that are not trusted.
        if let Some(guard) = self.flood.as_mut()
            && !bytes.starts_with(b"SIP/")
            && !self
                .settings
                .trusted
                .iter()
                .any(|n| n.contains(from.addr.ip()))
            && let verdict @ (Verdict::Offender | Verdict::Blocked | Verdict::Throttled) =
                guard.check(from.addr.ip(), now)
        {
            let s = self.stats();
            s.msgs_in[transport_idx(from.transport)].fetch_add(1, Relaxed);
            s.drop(if verdict == Verdict::Throttled {
                Drop::AuthThrottle
            } else {
                Drop::Flood
            });
            return;
        }
        let n = self.shared.senders.len();
        let owner = if n == 1 {
            self.index
        } else {
            owner_of(bytes, &self.settings.limits, n).unwrap_or(self.index)
        };
        self.deliver(now, owner, bytes, from, stale);
    }

    /// Handles a message whose call `owner` owns: here, or handed off to it.
    fn deliver(&mut self, now: Instant, owner: usize, bytes: &[u8], from: Peer, stale: bool) {
        self.handled += 1;
        let s = &self.shared.stats[self.index];
        s.msgs_in[transport_idx(from.transport)].fetch_add(1, Relaxed);
        if owner == self.index {
            if stale {
                self.handle_stale(now, bytes, from);
            } else {
                self.handle_local(now, bytes, from, None);
            }
            return;
        }
        let bytes = bytes.to_vec();
        let msg = if stale {
            Handoff::Stale { bytes, from }
        } else {
            Handoff::Inbound { bytes, from }
        };
        self.hand_to(owner, msg);
    }

    fn hand_to(&mut self, owner: usize, msg: Handoff) {
        match self.shared.senders[owner].try_send(msg) {
            Ok(()) => {
                self.stats().handoffs_out.fetch_add(1, Relaxed);
                self.need_wake[owner] = true;
            }
            Err(TrySendError::Full(_)) => self.stats().drop(Drop::HandoffFull),
            Err(TrySendError::Disconnected(_)) => self.stats().drop(Drop::Shutdown),
        }
    }

    /// Closes the local controller's measurement interval if it is due at `t`, reporting the
    /// busy time since the last report first; returns `t` on the workers' clock.
    fn close_interval_if_due(&mut self, t: StdInstant) -> Instant {
        let now = self.shared.clock.from_std(t);
        if self.controller.poll_timeout().is_some_and(|d| d <= now) {
            let busy = self.busy_since(t);
            self.controller.on_signal(now, Signal::Busy(busy));
            self.whole_occupancy = None;
            if let Some((rho, whole)) = self.cpu_occupancy() {
                self.controller.on_signal(now, Signal::Occupancy(rho));
                self.whole_occupancy = Some(whole);
            }
            self.controller.handle_timeout(now);
            self.update_answer();
        }
        now
    }

    /// The occupancy since the last call: the worker thread's CPU time over that CPU time plus
    /// the time it waited in `poll` for work. Time the thread was ready but not running — a
    /// CPU quota's throttling, another process on its core, steal — counts as neither, so the
    /// figure is the share of the CPU the worker *could get* that it used; the wall-clock busy
    /// time (everything outside `poll`) would read 1.0 under a quota whenever a throttled
    /// period fell inside an iteration, and OCC would cut while CPU was left (issue 14, item
    /// 4). Time spent on rejections is left out in the same share as from the busy time (see
    /// [`Worker::busy_since`]); the second figure counts them in. `None` when the CPU clock
    /// cannot be read, and at the first call, which only takes the mark (on the worker's own
    /// thread), and always with `occupancy_clock = "wall"`: the controller then uses the busy
    /// time.
    fn cpu_occupancy(&mut self) -> Option<(f64, f64)> {
        // Every interval starts afresh, whatever is returned.
        let busy = std::mem::take(&mut self.interval_busy);
        let other = std::mem::take(&mut self.interval_other);
        let waited = std::mem::take(&mut self.waited);
        let emulated = std::mem::take(&mut self.emulated_wait);
        if !self.settings.cpu_occupancy {
            return None;
        }
        let cpu = holdline_io::thread_cpu_time()?;
        let used = cpu.saturating_sub(self.cpu_mark.replace(cpu)?) + emulated;
        let total = used + waited;
        // Rejections are the budget's business, not the occupancy's: the same share of the
        // CPU time is left out as of the busy time (without it, a worker rejecting a storm
        // reads 1.0, cuts to f_min and answers nearly everything 503).
        let share = if busy.is_zero() {
            1.0
        } else {
            (other.as_secs_f64() / busy.as_secs_f64()).clamp(0.0, 1.0)
        };
        (!total.is_zero()).then(|| {
            let whole = used.as_secs_f64() / total.as_secs_f64();
            (share * whole, whole)
        })
    }

    /// The server role's answer for the next interval, from what this one measured; its
    /// occupancy counts the rejections' time in ([`HopMeasure::answer_occupancy`]).
    fn update_answer(&mut self) {
        let Some(role) = self.server_role.as_mut() else {
            return;
        };
        let occupancy = HopMeasure::answer_occupancy(
            self.controller.snapshot().occupancy,
            self.whole_occupancy,
        );
        let tally = self.core.take_feedback_tally();
        let now = StdInstant::now();
        let elapsed = now - std::mem::replace(&mut role.updated, now);
        let (sum, n) = std::mem::take(&mut role.invite_delay);
        // Window clients stay exempt from the gate while the queue of new INVITEs is near the
        // window's target: beyond, they are not (yet) held by it (the first interval of a
        // load step, or a client that ignores its window), and the gate protects the server.
        let window_exempt = n == 0
            || sum / n as f64
                <= WINDOW_EXEMPT_FACTOR * role.estimator.config().window_delay.as_secs_f64();
        role.estimator.update(&HopMeasure {
            occupancy,
            invite_delay: (n > 0).then(|| Duration::from_secs_f64(sum / n as f64)),
            rate_arrivals: tally.rate_invites,
            window_arrivals: tally.window_invites,
            elapsed,
        });
        let exempt = if role.estimator.at_floor() {
            now - *role.floor_since.get_or_insert(now) < EXEMPT_FLOOR_GRACE
        } else {
            role.floor_since = None;
            true
        };
        let rate = RateAnswer::of_total(role.answer_rate, role.estimator.rate());
        let window = RateAnswer::of_total(role.answer_window, role.estimator.window());
        let answer = OverloadAnswer {
            loss_percent: role.estimator.loss_percent(),
            validity_ms: role.validity_ms,
            exempt,
            window_exempt,
            rate,
            window,
        };
        self.core.set_overload_answer(Some(answer));
    }

    /// Gives what the engine collected for the hop-by-hop client to it: next hops' overload
    /// answers, and the starts and ends of forwarded INVITEs' transactions.
    fn take_feedback(&mut self, now: Instant) {
        if let Some(h) = self.hop.as_mut()
            && h.poll_timeout().is_some_and(|d| d <= now)
        {
            h.handle_timeout(now);
        }
        while let Some(e) = self.core.poll_hop_event() {
            let Some(hop) = self.hop.as_mut() else {
                continue;
            };
            let deoc = hop.algorithm() == holdline_overload::Algorithm::Deoc;
            let signal = match e {
                HopEvent::Feedback(from, report) => Signal::Feedback {
                    from: target_of(from.addr),
                    feedback: feedback_of(report),
                },
                HopEvent::Started(to, edge) => Signal::Forwarded {
                    target: hop_target(deoc, to.addr, edge),
                },
                HopEvent::Answered(to, edge, delay) => Signal::Released {
                    target: hop_target(deoc, to.addr, edge),
                    delay,
                },
                HopEvent::Ended {
                    to,
                    edge,
                    status,
                    timed_out,
                    delay,
                } => Signal::Completed {
                    target: hop_target(deoc, to.addr, edge),
                    outcome: Outcome::of_branch(status, timed_out),
                    delay,
                },
            };
            hop.on_signal(now, signal);
        }
    }

    /// The busy time since `busy_mark` to report to the controller, and a new mark at `t`.
    ///
    /// With INVITE sockets of their own, the time rejections took (their handling and their
    /// datagrams' share of the system calls) goes to the rejection budget and is left out:
    /// those INVITEs are read only when everything else has been, so the occupancy the
    /// controller steers is that of the calls it admitted. Counted in, every INVITE waiting
    /// in the kernel would keep the worker "busy" at any acceptance, and OCC would cut its
    /// acceptance to the floor while spending the CPU on 503s (measured under a CPU quota:
    /// two thirds of the goodput of no control).
    fn busy_since(&mut self, t: StdInstant) -> Duration {
        let busy = t - self.busy_mark;
        self.busy_mark = t;
        let handling = std::mem::take(&mut self.handling);
        let rejecting = std::mem::take(&mut self.rejecting);
        let rejected_messages = std::mem::take(&mut self.rejected_msgs);
        self.interval_busy += busy;
        // Without INVITE sockets there is no budget: all busy time counts.
        if self.budget.is_none() {
            self.interval_other += busy;
            return busy;
        }
        let datagrams = self.datagrams();
        let work = Work {
            busy,
            handling,
            rejecting,
            datagrams: datagrams.saturating_sub(self.datagram_mark),
            rejected_messages,
        };
        self.datagram_mark = datagrams;
        let now = self.shared.clock.from_std(t);
        let other = self
            .budget
            .as_mut()
            .map_or(busy, |b| b.account(now, work).other);
        self.interval_other += other;
        other
    }

    /// Datagrams received and sent so far.
    fn datagrams(&self) -> u64 {
        let s = self.stats();
        s.msgs_in[0].load(Relaxed) + s.msgs_out[0].load(Relaxed)
    }

    /// Handles one message of a call this worker owns: new INVITEs pass the admission gate
    /// first (a rejected one is answered `503` at once, statelessly).
    fn handle_local(
        &mut self,
        now: Instant,
        bytes: &[u8],
        from: Peer,
        forced: Option<Rejection>,
    ) -> bool {
        let t = StdInstant::now();
        // One loop iteration can take long under load (hundreds of messages): the
        // controller's interval also closes between messages.
        let fresh = self.close_interval_if_due(t);
        let controller = &mut self.controller;
        let admit_all = self.admit_all;
        let forward = &mut self.forward;
        let hop = &mut self.hop;
        let (rng, spread) = (&mut self.rng, self.settings.register_retry_after);
        let (pool, conn_keys, conns) = (&self.pool, &self.conn_keys, &self.conns);
        // A drain turns new calls and registrations away, whatever the controllers say.
        let draining = self.shared.draining.load(Relaxed);
        let forced = if draining {
            Some(Rejection::service_unavailable(
                RejectReason::Maintenance,
                Some(Duration::from_secs(
                    self.shared.drain_retry_after.load(Relaxed),
                )),
            ))
        } else {
            forced
        };
        let rejected = self.core.handle_admitting(
            now,
            bytes,
            from,
            &mut |class, exempt| {
                let r = forced.or_else(|| {
                    if admit_all || exempt {
                        return None;
                    }
                    controller
                        .admit(fresh, &Admission::ingress(class))
                        .rejection()
                })?;
                Some(match class {
                    _ if r.reason == RejectReason::Maintenance => r,
                    Class::NewRegistration | Class::Refresh => Rejection {
                        retry_after: Some(Duration::from_secs(u64::from(
                            spread.0 + rng.below(u64::from(spread.1 - spread.0) + 1) as u32,
                        ))),
                        ..r
                    },
                    _ => r,
                })
            },
            &mut |dest: Peer, edge| {
                // Hop-by-hop control: what the next hop asked for (RFC 7339 / RFC 7415);
                // DEOC: the target edge's restrictor (the next hop's without one).
                // A controller with a period (DEOC) closes the periods due first.
                if let Some(h) = hop.as_mut()
                    && h.poll_timeout().is_some_and(|d| d <= fresh)
                {
                    h.handle_timeout(fresh);
                }
                if let Some(h) = hop.as_mut() {
                    let deoc = h.algorithm() == holdline_overload::Algorithm::Deoc;
                    let target = hop_target(deoc, dest.addr, edge);
                    if let Some(r) = h
                        .admit(fresh, &Admission::forward(Class::NewInvite, target))
                        .rejection()
                    {
                        return Some(r);
                    }
                }
                // Smart forwarding: the backlog of the connection the INVITE would go on.
                // Over TLS the backlog is of TLS records: the kernel's and the queue's.
                let (ctl, split) = forward.as_mut()?;
                if !dest.transport.is_stream() {
                    return None;
                }
                let lane = split.invite_lane();
                let target = target_of(dest.addr);
                let (unsent, queued) = pool
                    .get(&(dest.addr, dest.transport, lane_key(lane)))
                    .and_then(|id| conn_keys.get(id))
                    .and_then(|&k| conns.get(k))
                    // A connection still being set up (TCP connect, TLS handshake) holds
                    // what waits for it: no sign of overload yet.
                    .filter(|c| {
                        !c.io.is_connecting() && c.io.tls_state() != Some(TlsState::Handshaking)
                    })
                    // The kernel's backlog counts only when the next hop's window holds it
                    // back: bytes the congestion window holds (slow start, BBR's ProbeRTT
                    // across a WAN link) are no sign of the next hop's load.
                    .map_or((0, 0), |c| {
                        (
                            c.io.peer_held_bytes().unwrap_or(0) as u64,
                            c.io.queued_bytes() as u64,
                        )
                    });
                ctl.on_signal(
                    fresh,
                    Signal::Backlog {
                        target,
                        lane,
                        unsent,
                        queued,
                    },
                );
                ctl.admit(fresh, &Admission::forward(Class::NewInvite, target))
                    .rejection()
            },
        );
        if rejected && draining {
            self.drain_rejected += 1;
        }
        let cost = if rejected {
            self.settings.emulate_reject_cost
        } else {
            self.settings.emulate_cost
        };
        if !cost.is_zero() {
            // Real CPU work, not a sleep: it counts in the occupancy as a slower CPU would.
            // With `emulate_sleep` the worker waits instead (as busy, the CPU free): a sleep
            // to within 100 µs of the cost, the rest spun for precision.
            if self.settings.emulate_sleep {
                let spin = Duration::from_micros(100);
                let left = cost.saturating_sub(t.elapsed());
                if left > spin {
                    let slept = StdInstant::now();
                    std::thread::sleep(left - spin);
                    self.emulated_wait += slept.elapsed();
                }
            }
            while t.elapsed() < cost {
                std::hint::spin_loop();
            }
        }
        let spent = t.elapsed();
        self.handling += spent;
        if rejected {
            self.rejecting += spent;
            self.rejected_msgs += 1;
        }
        self.service_ns = if self.service_ns == 0.0 {
            spent.as_nanos() as f64
        } else {
            0.99 * self.service_ns + 0.01 * spent.as_nanos() as f64
        };
        self.stats().record_processing(spent);
        self.take_auth_failures(now);
        self.take_feedback(fresh);
        self.drain_transmits(now);
        rejected
    }

    /// Failed authentications the engine reported: counted in this worker's flood guard and
    /// sent to every other worker's (trusted sources exempt), so that a password guesser is
    /// throttled at the same count whichever workers its requests reach.
    fn take_auth_failures(&mut self, now: Instant) {
        while let Some(ip) = self.core.poll_auth_failure() {
            if self.flood.is_none() || self.settings.trusted.iter().any(|n| n.contains(ip)) {
                continue;
            }
            if let Some(g) = self.flood.as_mut() {
                g.auth_failure(ip, now);
            }
            for w in 0..self.shared.senders.len() {
                if w != self.index {
                    self.hand_to(w, Handoff::AuthFailure { ip });
                }
            }
        }
    }

    /// [`handle_local`](Self::handle_local) for an INVITE-socket datagram that waited too
    /// long: a new INVITE is answered 503 (and counted), anything else goes its way.
    fn handle_stale(&mut self, now: Instant, bytes: &[u8], from: Peer) {
        let forced = self.settings.invite_max_wait.map(|(_, retry_after)| {
            Rejection::service_unavailable(RejectReason::DeferTimeout, retry_after)
        });
        if self.handle_local(now, bytes, from, forced) && forced.is_some() {
            self.stale_invites += 1;
        }
    }

    fn drain_handoffs(&mut self, now: Instant) {
        self.more_handoffs = false;
        for _ in 0..HANDOFF_BUDGET {
            match self.rx.try_recv() {
                Ok(Handoff::Inbound { bytes, from }) => {
                    self.handled += 1;
                    self.stats().handoffs_in.fetch_add(1, Relaxed);
                    self.handle_local(now, &bytes, from, None);
                }
                Ok(Handoff::Stale { bytes, from }) => {
                    self.handled += 1;
                    self.stats().handoffs_in.fetch_add(1, Relaxed);
                    self.handle_stale(now, &bytes, from);
                }
                Ok(Handoff::Outbound { bytes, to }) => {
                    if to.transport == Transport::Sctp {
                        self.sctp_send(&bytes, to.addr);
                    } else if let Some(id) = to.conn {
                        self.conn_send(now, id, &bytes);
                    }
                }
                // Waits for idle time: not work handled yet.
                Ok(Handoff::Deferred {
                    bytes,
                    from,
                    since,
                    pollable,
                }) => {
                    self.stats().handoffs_in.fetch_add(1, Relaxed);
                    let owner = self.index;
                    self.push_deferred(
                        since,
                        Deferred {
                            bytes,
                            from,
                            owner,
                            pollable,
                        },
                    );
                }
                Ok(Handoff::Resume { conn }) => self.resume(now, conn),
                Ok(Handoff::AuthFailure { ip }) => {
                    if let Some(g) = self.flood.as_mut() {
                        g.auth_failure(ip, now);
                    }
                }
                Ok(Handoff::Dns(response)) => {
                    self.core.handle_dns_response(now, response);
                    self.take_feedback(now);
                    self.drain_transmits(now);
                }
                Err(_) => return,
            }
        }
        self.more_handoffs = true;
    }

    /// Hands the engine's DNS lookups to the resolver thread (never waiting for it); a lookup
    /// it cannot take (no resolver, its queue full) has failed at once.
    fn send_dns_queries(&mut self, now: Instant) {
        // Bounded: every failure makes an answer negative, so the engine asks less each turn.
        for _ in 0..HANDOFF_BUDGET {
            let Some(query) = self.core.poll_dns_query() else {
                return;
            };
            let taken = self
                .shared
                .dns
                .as_ref()
                .is_some_and(|d| d.submit(self.index, query.clone()));
            if !taken {
                let answer = holdline_proto::dns::DnsAnswer::Failed;
                self.core
                    .handle_dns_response(now, holdline_proto::DnsResponse { query, answer });
                self.drain_transmits(now);
            }
        }
    }

    fn drain_transmits(&mut self, now: Instant) {
        loop {
            self.tx_buf.clear();
            let Some(t) = self.core.poll_transmit(now, &mut self.tx_buf) else {
                break;
            };
            let size = t.size.min(self.tx_buf.len());
            let bytes = std::mem::take(&mut self.tx_buf);
            self.send(now, &bytes[..size], t.destination);
            self.tx_buf = bytes;
        }
    }

    /// Sends bytes to a peer: UDP through this worker's socket, TCP on the given connection
    /// (forwarded to the worker owning it) or on a pooled connection to the address.
    fn send(&mut self, now: Instant, bytes: &[u8], to: Peer) {
        match to.transport {
            Transport::Udp => {
                let Some(i) = self.udp.iter().position(|s| {
                    s.local_addr()
                        .is_ok_and(|a| a.is_ipv4() == to.addr.is_ipv4())
                }) else {
                    self.stats().drop(Drop::NoListener);
                    return;
                };
                self.sends[i].push(to.addr, bytes);
                self.stats().msgs_out[0].fetch_add(1, Relaxed);
                if let Some(cap) = &mut self.capture
                    && let Ok(local) = self.udp[i].local_addr()
                {
                    cap.offer(bytes, local, to.addr, Transport::Udp);
                }
                if self.sends[i].len() >= 32 {
                    self.flush_udp();
                }
            }
            Transport::Tcp | Transport::Tls => {
                let lane = lane_for(self.forward.as_ref().map(|f| f.1), bytes);
                let id = match to.conn {
                    Some(id) => id,
                    None => match self.pool.get(&(to.addr, to.transport, lane_key(lane))) {
                        Some(id) => *id,
                        None => match self.shared.accepted_to(to.addr, to.transport) {
                            Some(id) => {
                                self.stats().conns_reused.fetch_add(1, Relaxed);
                                id
                            }
                            None => match self.pooled(now, to.addr, to.transport, lane) {
                                Some(id) => id,
                                None => return,
                            },
                        },
                    },
                };
                let owner = conn_owner(id);
                if owner == self.index {
                    self.conn_send(now, id, bytes);
                } else if owner < self.shared.senders.len() {
                    let to = Peer {
                        conn: Some(id),
                        ..to
                    };
                    self.hand_to(
                        owner,
                        Handoff::Outbound {
                            bytes: bytes.to_vec(),
                            to,
                        },
                    );
                } else {
                    self.stats().drop(Drop::ConnGone);
                }
            }
            Transport::Sctp => {
                if !self.sctp.is_empty() {
                    self.sctp_send(bytes, to.addr);
                } else if self.shared.senders.len() > 1 {
                    // Worker 0 holds the SCTP sockets and their associations.
                    self.hand_to(
                        0,
                        Handoff::Outbound {
                            bytes: bytes.to_vec(),
                            to,
                        },
                    );
                } else {
                    self.stats().drop(Drop::NoListener);
                }
            }
            _ => self.stats().drop(Drop::Unsupported),
        }
    }

    /// Hands one SIP message to the SCTP endpoint of the socket of `to`'s address family,
    /// on the stream of its Call-ID (RFC 4168: a call's messages stay in order on one stream,
    /// calls do not block each other).
    fn sctp_send(&mut self, bytes: &[u8], to: SocketAddr) {
        let Some(i) = self.sctp.iter().position(|s| {
            s.socket
                .local_addr()
                .is_ok_and(|a| a.is_ipv4() == to.is_ipv4())
        }) else {
            self.stats().drop(Drop::NoListener);
            return;
        };
        let key = call_id_key(bytes);
        let r = self.sctp[i].ep.send(StdInstant::now(), to, key, bytes);
        let s = &self.shared.stats[self.index];
        match r {
            Ok(()) => {
                s.msgs_out[transport_idx(Transport::Sctp)].fetch_add(1, Relaxed);
                if let Some(cap) = &mut self.capture
                    && let Ok(local) = self.sctp[i].socket.local_addr()
                {
                    cap.offer(bytes, local, to, Transport::Sctp);
                }
            }
            Err(SctpSendError::QueueFull { .. }) => s.drop(Drop::SctpQueueFull),
            Err(SctpSendError::TooLarge { .. }) => s.drop(Drop::TooLarge),
            Err(_) => s.drop(Drop::ConnectFailed),
        }
    }

    /// Reads SCTP-over-UDP socket `i`: its datagrams go to the endpoint, the SIP messages
    /// completed go to their calls' workers.
    fn read_sctp(&mut self, now: Instant, i: usize) {
        let Some(mut batch) = self.recv.take() else {
            return;
        };
        let mut more = true;
        for _ in 0..8 {
            let Some(sock) = self.sctp.get_mut(i) else {
                more = false;
                break;
            };
            match sock.socket.recv_batch(&mut batch) {
                Ok(n) => {
                    let t = StdInstant::now();
                    for k in 0..n {
                        if let Some(d) = batch.get(k) {
                            sock.ep.handle_datagram(t, d.source, d.payload);
                        }
                    }
                    if n < batch.capacity() {
                        more = false;
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    more = false;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::debug!(worker = self.index, error = %e, "sctp socket receive error");
                }
            }
        }
        self.recv = Some(batch);
        if more {
            self.pending.push(Token(SCTP_BASE + i));
        }
        self.sctp_deliver(now, i);
    }

    /// Dispatches the SIP messages endpoint `i` completed.
    fn sctp_deliver(&mut self, now: Instant, i: usize) {
        while let Some(r) = self.sctp.get_mut(i).and_then(|s| s.ep.poll_received()) {
            if r.data.len() > self.settings.limits.max_message_size {
                let s = self.stats();
                s.msgs_in[transport_idx(Transport::Sctp)].fetch_add(1, Relaxed);
                s.drop(Drop::TooLarge);
                continue;
            }
            let peer = Peer {
                addr: r.from,
                transport: Transport::Sctp,
                conn: None,
            };
            if let Some(cap) = &mut self.capture
                && let Some(Ok(local)) = self.sctp.get(i).map(|s| s.socket.local_addr())
            {
                cap.offer(&r.data, r.from, local, Transport::Sctp);
            }
            self.dispatch(now, &r.data, peer, false);
        }
    }

    /// How long until an SCTP timer is due (none without SCTP).
    fn sctp_timeout(&self) -> Option<Duration> {
        let t = self.sctp.iter().filter_map(|s| s.ep.poll_timeout()).min()?;
        Some(t.saturating_duration_since(StdInstant::now()))
    }

    /// Runs the SCTP timers that are due, delivers what they completed, publishes the
    /// association counters.
    fn sctp_timers(&mut self, now: Instant) {
        if self.sctp.is_empty() {
            return;
        }
        let t = StdInstant::now();
        for i in 0..self.sctp.len() {
            if self.sctp[i].ep.poll_timeout().is_some_and(|d| d <= t) {
                self.sctp[i].ep.handle_timeout(t);
            }
            self.sctp_deliver(now, i);
        }
        let s = &self.shared.stats[self.index];
        let mut sum = holdline_sctp::SctpStats::default();
        for x in &mut self.sctp {
            sum += x.ep.stats();
        }
        s.sctp[0].store(sum.open, Relaxed);
        s.sctp[1].store(sum.established, Relaxed);
        s.sctp[2].store(sum.setup_failures, Relaxed);
        s.sctp[3].store(sum.lost, Relaxed);
        s.sctp[4].store(sum.messages_dropped + sum.messages_refused, Relaxed);
        s.sctp[5].store(sum.t3_timeouts, Relaxed);
        s.sctp[6].store(sum.fast_retransmits, Relaxed);
        s.sctp[7].store(sum.queued_bytes, Relaxed);
        s.sctp[8].store(sum.heartbeats_sent, Relaxed);
        s.sctp[9].store(sum.heartbeat_failures, Relaxed);
        s.sctp[10].store(sum.duplicate_tsns, Relaxed);
    }

    /// Sends what the SCTP endpoints produced. Never blocks: a datagram the socket does not
    /// take is dropped and counted, and SCTP retransmits it.
    fn flush_sctp(&mut self) {
        let s = &self.shared.stats[self.index];
        for x in &mut self.sctp {
            // Run what waits (and the timers due) at the instant the packets leave.
            x.ep.handle_timeout(StdInstant::now());
            loop {
                while x.sends.len() < 32 {
                    let Some((to, b)) = x.ep.poll_transmit() else {
                        break;
                    };
                    x.sends.push(to, &b);
                }
                if x.sends.is_empty() {
                    break;
                }
                let mut errors = 0;
                x.socket.send_batch(&mut x.sends, &mut errors);
                for _ in 0..errors {
                    s.drop(Drop::SendError);
                }
                for _ in 0..x.sends.clear() {
                    s.drop(Drop::UdpSendBlocked);
                }
            }
        }
    }

    /// This worker's pooled outbound connection to `addr` over `transport` (TCP or TLS) on
    /// `lane`, opened (non-blocking) if needed; a TLS one verifies the next hop's certificate
    /// against the route's `server_name` (else the address).
    fn pooled(
        &mut self,
        now: Instant,
        addr: SocketAddr,
        transport: Transport,
        lane: Lane,
    ) -> Option<ConnId> {
        let key = (addr, transport, lane_key(lane));
        if let Some(id) = self.pool.get(&key) {
            return Some(*id);
        }
        if self.stopping {
            self.stats().drop(Drop::Shutdown);
            return None;
        }
        let (opts, limits) = self
            .settings
            .next_hops
            .get(&addr)
            .copied()
            .unwrap_or((self.settings.tcp_opts, self.settings.conn_limits));
        let session = if transport == Transport::Tls {
            let Some(tls) = self.settings.tls.as_ref() else {
                // No TLS configured at all: nothing to verify a next hop with.
                self.stats().drop(Drop::Unsupported);
                return None;
            };
            match rustls::ClientConnection::new(tls.client.clone(), tls.name_for(addr)) {
                Ok(c) => Some(rustls::Connection::Client(c)),
                Err(e) => {
                    tracing::warn!(%addr, error = %e, "cannot start a TLS session");
                    self.stats().drop(Drop::ConnectFailed);
                    return None;
                }
            }
        } else {
            None
        };
        match TcpConn::connect(addr, &opts, limits) {
            Ok(mut io) => {
                if let Some(session) = session {
                    io.start_tls(session);
                }
                let id = self.add_conn(now, io, true)?;
                self.pool.insert(key, id);
                self.stats().conns_outbound.fetch_add(1, Relaxed);
                Some(id)
            }
            Err(e) => {
                tracing::debug!(%addr, error = %e, "connect failed");
                self.stats().drop(Drop::ConnectFailed);
                None
            }
        }
    }

    fn add_conn(&mut self, now: Instant, mut io: TcpConn, outbound: bool) -> Option<ConnId> {
        let transport = if io.tls_state().is_some() {
            Transport::Tls
        } else {
            Transport::Tcp
        };
        let id = ConnId(((self.index as u64) << 48) | self.next_seq);
        self.next_seq += 1;
        let peer = io.peer_addr();
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        if let Err(e) = self.poll.registry().register(
            &mut io,
            Token(CONN_BASE + key),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::warn!(error = %e, "cannot register connection");
            self.stats().close(Close::Error);
            return None;
        }
        entry.insert(Conn {
            io,
            id,
            transport,
            handshake_counted: false,
            framer: Framer::new(self.settings.limits),
            last_activity: now,
            full_since: None,
            outbound,
            paused: false,
            rx_ns: None,
            head_rx_ns: None,
            mixed: false,
            invite_branches: RecentBranches::default(),
            local: None,
        });
        self.conn_keys.insert(id, key);
        self.stats().conns_open.fetch_add(1, Relaxed);
        if !outbound {
            self.shared.open_conns.fetch_add(1, Relaxed);
            if let Ok(mut by) = self.shared.accepted.lock() {
                by.insert((peer, transport), id);
            }
        }
        Some(id)
    }

    fn close(&mut self, key: usize, why: Close) {
        let Some(mut c) = self.conns.try_remove(key) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut c.io);
        self.conn_keys.remove(&c.id);
        if c.outbound {
            self.pool.retain(|_, id| *id != c.id);
        } else {
            self.shared.open_conns.fetch_sub(1, Relaxed);
            if let Ok(mut by) = self.shared.accepted.lock() {
                let key = (c.io.peer_addr(), c.transport);
                if by.get(&key) == Some(&c.id) {
                    by.remove(&key);
                }
            }
        }
        // Count before the peer can see the close.
        let s = self.stats();
        if c.io.tls_state() == Some(TlsState::Handshaking) && !c.handshake_counted {
            s.tls_handshakes[usize::from(c.outbound) * 2 + 1].fetch_add(1, Relaxed);
        }
        s.conns_open.fetch_sub(1, Relaxed);
        s.close(why);
        c.io.shutdown();
    }

    fn accept(&mut self, now: Instant, i: usize) {
        if self.stopping || i >= self.listeners.len() {
            return;
        }
        for _ in 0..ACCEPT_BUDGET {
            let limits = self
                .settings
                .listener_limits
                .get(i)
                .copied()
                .unwrap_or(self.settings.conn_limits);
            match self.listeners[i].accept(limits) {
                Ok(mut io) => {
                    if self.shared.open_conns.load(Relaxed) >= self.settings.max_connections {
                        self.stats().close(Close::MaxConnections);
                        io.shutdown();
                        continue;
                    }
                    if self.settings.listener_tls.get(i).copied().unwrap_or(false) {
                        let session = self
                            .settings
                            .tls
                            .as_ref()
                            .and_then(|t| t.server.clone())
                            .map(rustls::ServerConnection::new);
                        match session {
                            Some(Ok(s)) => io.start_tls(rustls::Connection::Server(s)),
                            _ => {
                                self.stats().close(Close::Tls);
                                io.shutdown();
                                continue;
                            }
                        }
                    }
                    if self.add_conn(now, io, false).is_some() {
                        self.stats().conns_accepted.fetch_add(1, Relaxed);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    // EMFILE and friends: stop for now, try again on the next event.
                    tracing::warn!(worker = self.index, error = %e, "accept failed");
                    return;
                }
            }
        }
        self.pending.push(Token(LISTENER_BASE + i));
    }

    fn conn_event(&mut self, now: Instant, key: usize, readable: bool, writable: bool) {
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        if c.io.is_connecting() {
            match c.io.finish_connect() {
                Ok(true) => {}
                Ok(false) => return,
                Err(e) => {
                    tracing::debug!(peer = %c.io.peer_addr(), error = %e, "connect failed");
                    if c.io.queued_bytes() > 0 {
                        self.stats().drop(Drop::ConnectFailed);
                    }
                    self.close(key, Close::Error);
                    return;
                }
            }
        }
        if writable || c.io.queued_bytes() > 0 {
            self.flush_conn(now, key);
        }
        // A paused connection is read again once its deferred INVITE has been handled.
        if readable && !self.stopping && !self.conns.get(key).is_some_and(|c| c.paused) {
            self.read_conn(now, key);
        }
    }

    fn flush_conn(&mut self, now: Instant, key: usize) {
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        match c.io.flush() {
            Ok(n) => {
                if n > 0 {
                    c.last_activity = now;
                }
                if c.io.queued_bytes() <= c.io.max_queue_bytes() / 2 {
                    c.full_since = None;
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "write failed");
                self.close(key, Close::Error);
            }
        }
    }

    fn read_conn(&mut self, now: Instant, key: usize) {
        let turn = StdInstant::now();
        let workers = self.shared.senders.len();
        for _ in 0..TCP_BUDGET {
            let Some(c) = self.conns.get_mut(key) else {
                return;
            };
            // Deferring new INVITEs, a connection is read on demand: not while a whole
            // message waits in its buffer, and one `recv` at a time, so that what the server
            // has not handled stays in the kernel and holds the sender's window closed
            // (seed 000: the read-ahead is bounded by the receive buffer, Fig. 24; without
            // this a large `read_buffer` filled up with INVITEs the upstream's smart
            // forwarding could no longer see).
            let on_demand = self.settings.defer.is_some();
            let began = c.io.buffered().is_empty();
            let read = if on_demand
                && !c.io.buffered().is_empty()
                && matches!(
                    c.framer.poll(c.io.buffered()),
                    Ok(Frame::Message { .. } | Frame::KeepAlive { .. })
                ) {
                Ok(ReadOutcome::default())
            } else if on_demand {
                c.io.read_once()
            } else {
                c.io.read()
            };
            let r = match read {
                Ok(r) => r,
                Err(e) => {
                    let (outbound, peer) = (c.outbound, c.io.peer_addr());
                    let lost = c.io.queued_bytes() > 0;
                    let why = match holdline_io::tcp::tls_error(&e) {
                        Some(tls) => {
                            // A next hop failing verification is the operator's business; a
                            // client failing it is routine on a public address.
                            if outbound {
                                tracing::warn!(%peer, error = %tls, "TLS failure with a next hop");
                                if lost {
                                    self.stats().drop(Drop::ConnectFailed);
                                }
                            } else {
                                tracing::debug!(%peer, error = %tls, "TLS failure with a client");
                            }
                            Close::Tls
                        }
                        None => Close::Error,
                    };
                    self.close(key, why);
                    return;
                }
            };
            if !c.handshake_counted && c.io.tls_state() == Some(TlsState::Established) {
                c.handshake_counted = true;
                self.shared.stats[self.index].tls_handshakes[usize::from(c.outbound) * 2]
                    .fetch_add(1, Relaxed);
            }
            if r.bytes > 0 {
                c.last_activity = now;
            }
            if let Some(stamp) = r.rx_ns {
                c.rx_ns = Some(stamp);
                if began && r.bytes > 0 {
                    c.head_rx_ns = Some(stamp);
                }
                self.report_queue_delay(now, stamp, 1);
            }
            loop {
                let Some(c) = self.conns.get_mut(key) else {
                    return;
                };
                let peer = Peer {
                    addr: c.io.peer_addr(),
                    transport: c.transport,
                    conn: Some(c.id),
                };
                let frame = c.framer.poll(c.io.buffered());
                let polling = self
                    .settings
                    .defer
                    .is_some_and(|d| matches!(d.fairness, DeferFairness::Poll { .. }));
                let owner = match frame {
                    Ok(Frame::Message { len }) if self.settings.defer.is_some() => {
                        new_invite_owner(
                            &c.io.buffered()[..len],
                            &self.settings.limits,
                            workers,
                            polling,
                        )
                        .map(|(owner, branch)| {
                            c.invite_branches.push(branch);
                            owner
                        })
                    }
                    _ => None,
                };
                match frame {
                    Ok(Frame::Message { len }) if let Some(owner) = owner => {
                        let bytes = c.io.buffered()[..len].to_vec();
                        c.io.consume(len);
                        if let Some(cap) = &mut self.capture
                            && let Some(local) = c.local_addr()
                        {
                            cap.offer(&bytes, peer.addr, local, c.transport);
                        }
                        c.paused = true;
                        // It has waited at least since its first bytes arrived (the time it
                        // spent in the socket counts, not only the time from here; when it
                        // came whole, since the newest bytes read arrived).
                        let head = c.head_rx_ns.take().or(c.rx_ns);
                        if !c.io.buffered().is_empty() {
                            // What follows arrived at the latest with the newest read.
                            c.head_rx_ns = c.rx_ns;
                        }
                        let since = head.map_or(now, |stamp| {
                            Instant::from_nanos(
                                now.as_nanos()
                                    .saturating_sub(age_of(stamp).as_nanos() as u64),
                            )
                        });
                        let pollable = !c.mixed && !c.outbound;
                        self.defer_invite(owner, since, bytes, peer, pollable);
                        // Not read on until the INVITE is handled: the connection's backlog
                        // is the sender's signal (smart forwarding).
                        return;
                    }
                    Ok(Frame::Message { len }) => {
                        // What follows it arrived at the latest with the newest read.
                        c.head_rx_ns = (c.io.buffered().len() > len).then_some(c.rx_ns).flatten();
                        // The ACK of an INVITE this server rejected comes back on the
                        // INVITE's connection (RFC 3261 §17.1.1.3): it does not make an
                        // upstream's INVITE connection a mixed one; anything else does.
                        // (Only a polling server asks.)
                        if polling
                            && !c.mixed
                            && !c.outbound
                            && !c
                                .invite_branches
                                .acks(&c.io.buffered()[..len], &self.settings.limits)
                        {
                            c.mixed = true;
                        }
                        let mut msg = std::mem::take(&mut self.scratch);
                        msg.clear();
                        msg.extend_from_slice(&c.io.buffered()[..len]);
                        c.io.consume(len);
                        if let Some(cap) = &mut self.capture
                            && let Some(local) = c.local_addr()
                        {
                            cap.offer(&msg, peer.addr, local, c.transport);
                        }
                        self.dispatch(now, &msg, peer, false);
                        self.scratch = msg;
                        if turn.elapsed() >= TCP_TURN {
                            // The rest after the other sources had their turn.
                            self.pending.push(Token(CONN_BASE + key));
                            return;
                        }
                    }
                    Ok(Frame::KeepAlive { len, ping }) => {
                        c.io.consume(len);
                        if ping {
                            let id = c.id;
                            self.stats().pongs.fetch_add(1, Relaxed);
                            self.conn_send(now, id, b"\r\n");
                        }
                    }
                    Ok(_) => break,
                    Err(e) => {
                        tracing::debug!(peer = %peer.addr, error = %e, "framing error; closing");
                        // Only the Content-Length is wrong: the header section is whole, so the
                        // core can answer `400 Bad Content-Length` on this connection (it cannot
                        // parse as a valid message: the same check fails) before it closes.
                        let head = (e.kind == ParseErrorKind::BadContentLength)
                            .then(|| header_end(c.io.buffered()))
                            .flatten()
                            .map(|end| c.io.buffered()[..end].to_vec());
                        self.stats().drop(Drop::FramingError);
                        if let Some(head) = head {
                            self.handle_local(now, &head, peer, None);
                        }
                        self.close(key, Close::Framing);
                        return;
                    }
                }
            }
            if r.eof {
                self.close(key, Close::Eof);
                return;
            }
            if r.drained {
                return;
            }
        }
        self.pending.push(Token(CONN_BASE + key));
    }

    /// Releases deferred new INVITEs: the oldest is handled when the worker is `idle`; any
    /// that waited too long are rejected with 503 here, statelessly, without the controller.
    /// Their connections are read again.
    fn run_deferred(&mut self, mut now: Instant, mut idle: bool) {
        loop {
            let since = self.deferred.oldest_since();
            let Some(release) = self.deferred.poll(now, idle) else {
                break;
            };
            if let Some(since) = since {
                // Local control's queue gate: how long new INVITEs wait for idle time.
                self.controller.on_signal(
                    now,
                    Signal::NewRequestDelay(now.saturating_duration_since(since)),
                );
            }
            let d = match release {
                Release::Admit(d) => {
                    // Its owner is known from the deferral: no second parse for it.
                    self.deliver(now, d.owner, &d.bytes, d.from, false);
                    // Busy again until a poll finds nothing; and the handling took time, so
                    // what waits behind it is judged against the clock after it (an INVITE
                    // overdue by then is rejected now, not admitted at the next idle pass).
                    idle = false;
                    now = self.shared.clock.now();
                    d
                }
                Release::Reject(d, r) => {
                    // Rejected here, by the worker owning the call (no hand-off): the 503
                    // needs no transaction.
                    self.handled += 1;
                    self.handle_local(now, &d.bytes, d.from, Some(r));
                    d
                }
            };
            if let Some(conn) = d.from.conn {
                self.resume(now, conn);
            }
        }
    }

    /// Defers a new INVITE read over TCP at or before `since` in the queue of `owner`, the
    /// worker owning its call: the owner's idle time is what admitting it costs. The
    /// connection it came on is paused until [`Self::resume`]. Kept here when the owner's
    /// hand-off queue is full.
    fn defer_invite(
        &mut self,
        owner: usize,
        since: Instant,
        bytes: Vec<u8>,
        from: Peer,
        pollable: bool,
    ) {
        let (bytes, from) = if owner == self.index {
            (bytes, from)
        } else {
            match self.shared.senders[owner].try_send(Handoff::Deferred {
                bytes,
                from,
                since,
                pollable,
            }) {
                Ok(()) => {
                    self.stats().handoffs_out.fetch_add(1, Relaxed);
                    self.need_wake[owner] = true;
                    return;
                }
                Err(
                    TrySendError::Full(Handoff::Deferred { bytes, from, .. })
                    | TrySendError::Disconnected(Handoff::Deferred { bytes, from, .. }),
                ) => (bytes, from),
                Err(_) => return,
            }
        };
        self.push_deferred(
            since,
            Deferred {
                bytes,
                from,
                owner,
                pollable,
            },
        );
    }

    /// Queues a deferred INVITE: its stream is its connection, its weight the load its
    /// upstream says it is offered (`hl-offered` in the top Via), when the deferral shares
    /// idle time by it.
    fn push_deferred(&mut self, since: Instant, d: Deferred) {
        let flow = d.from.conn.map_or(u64::MAX, |c| c.0);
        let weight = (self.deferred.config().fairness == DeferFairness::Offered)
            .then(|| offered_load(&d.bytes))
            .flatten();
        let pollable = d.pollable;
        self.deferred.push_stream(since, d, flow, weight, pollable);
    }

    /// Reads connection `conn` again after its deferred INVITE was handled: here if this
    /// worker owns it, else by a hand-off to its owner (retried while the queue is full).
    fn resume(&mut self, now: Instant, conn: ConnId) {
        let owner = conn_owner(conn);
        if owner != self.index {
            match self.shared.senders[owner].try_send(Handoff::Resume { conn }) {
                Ok(()) => self.need_wake[owner] = true,
                Err(TrySendError::Full(_)) => self.resumes.push(conn),
                Err(TrySendError::Disconnected(_)) => {}
            }
            return;
        }
        // The same connection: a key reused by a newer one is not in `conn_keys` under it.
        if let Some(&key) = self.conn_keys.get(&conn)
            && let Some(c) = self.conns.get_mut(key)
            && c.paused
        {
            c.paused = false;
            c.last_activity = now;
            self.pending.push(Token(CONN_BASE + key));
        }
    }

    fn conn_send(&mut self, now: Instant, id: ConnId, bytes: &[u8]) {
        let Some(&key) = self.conn_keys.get(&id) else {
            self.stats().drop(Drop::ConnGone);
            return;
        };
        let Some(c) = self.conns.get_mut(key) else {
            self.stats().drop(Drop::ConnGone);
            return;
        };
        if c.io.enqueue(bytes).is_err() {
            if c.full_since.is_none() {
                c.full_since = Some(now);
            }
            self.stats().drop(Drop::ConnQueueFull);
            return;
        }
        c.last_activity = now;
        if bytes != b"\r\n" {
            self.shared.stats[self.index].msgs_out[transport_idx(c.transport)]
                .fetch_add(1, Relaxed);
            if let Some(cap) = &mut self.capture
                && let Some(local) = c.local_addr()
            {
                cap.offer(bytes, local, c.io.peer_addr(), c.transport);
            }
        }
        self.flush_conn(now, key);
    }

    fn housekeeping(&mut self, now: Instant) {
        let idle = self.settings.idle_timeout;
        let stall = self.settings.write_stall;
        let mut doomed = Vec::new();
        for (k, c) in &self.conns {
            if c.full_since
                .is_some_and(|t| now.saturating_duration_since(t) > stall)
            {
                doomed.push((k, Close::Stalled));
            } else if now.saturating_duration_since(c.last_activity) > idle {
                doomed.push((k, Close::Idle));
            }
        }
        for (k, why) in doomed {
            self.close(k, why);
        }
    }

    fn flush_udp(&mut self) {
        for (i, batch) in self.sends.iter_mut().enumerate() {
            if batch.is_empty() {
                continue;
            }
            let mut errors = 0;
            self.udp[i].send_batch(batch, &mut errors);
            let s = &self.shared.stats[self.index];
            for _ in 0..errors {
                s.drop(Drop::SendError);
            }
            // Never block: what the socket did not take now is dropped and counted.
            for _ in 0..batch.clear() {
                s.drop(Drop::UdpSendBlocked);
            }
        }
    }

    fn flush_wakes(&mut self) {
        for (i, w) in self.need_wake.iter_mut().enumerate() {
            if std::mem::take(w) {
                let _ = self.shared.wakers[i].wake();
            }
        }
    }
}

/// One SCTP-over-UDP socket and the associations carried in it.
struct SctpSock {
    socket: UdpSocket,
    ep: SctpUdp,
    /// Datagrams on their way to the socket (`sendmmsg`).
    sends: SendBatch,
}

/// The `hl-offered` parameter of the top Via of a request (the new INVITEs per second its
/// upstream is offered, `advertise_offered_load`), read without parsing the message: the
/// first Via line of the header section.
fn offered_load(bytes: &[u8]) -> Option<f64> {
    let head_end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(bytes.len());
    let head = &bytes[..head_end];
    let via = head.split(|&b| b == b'\n').find(|line| {
        let line = line.strip_prefix(b" ").unwrap_or(line);
        line.len() > 4
            && (line[..4].eq_ignore_ascii_case(b"via:") || line[..2].eq_ignore_ascii_case(b"v:"))
    })?;
    // The top Via value ends at the first comma of the line.
    let top = via.split(|&b| b == b',').next()?;
    let key = b";hl-offered=";
    let at = top
        .windows(key.len())
        .position(|w| w.eq_ignore_ascii_case(key))?;
    let rest = &top[at + key.len()..];
    let end = rest
        .iter()
        .position(|b| !(b.is_ascii_digit() || *b == b'.'))
        .unwrap_or(rest.len());
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::{Limits, RecentBranches, new_invite_owner, offered_load};

    #[test]
    fn the_ack_of_a_rejected_invite_is_told_by_its_branch() {
        let limits = Limits::default();
        let invite = b"INVITE sip:bob@example.com SIP/2.0\r\n\
Via: SIP/2.0/TCP 10.0.0.1:5060;branch=z9hG4bK-one\r\n\
Max-Forwards: 70\r\nFrom: <sip:a@example.com>;tag=1\r\nTo: <sip:bob@example.com>\r\n\
Call-ID: c1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n";
        let (owner, branch) = new_invite_owner(invite, &limits, 1, true).expect("a new INVITE");
        assert_eq!(
            new_invite_owner(invite, &limits, 1, false).map(|(_, b)| b),
            Some(None),
            "no hash unless polling"
        );
        assert_eq!(owner, 0);
        let mut recent = RecentBranches::default();
        recent.push(branch);
        let ack = |b: &str| {
            format!(
                "ACK sip:bob@example.com SIP/2.0\r\nVia: SIP/2.0/TCP 10.0.0.1:5060;branch={b}\r\n\
Max-Forwards: 70\r\nFrom: <sip:a@example.com>;tag=1\r\nTo: <sip:bob@example.com>;tag=x\r\n\
Call-ID: c1\r\nCSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n"
            )
        };
        // The ACK of the 503 (same branch) leaves the connection an INVITE connection...
        assert!(recent.acks(ack("z9hG4bK-one").as_bytes(), &limits));
        // ...the ACK of a 200 (a branch of its own), or anything else, does not.
        assert!(!recent.acks(ack("z9hG4bK-two").as_bytes(), &limits));
        assert!(!recent.acks(b"BYE sip:bob@example.com SIP/2.0\r\n\r\n", &limits));
        // The ring forgets the oldest after eight INVITEs.
        for i in 0..8u64 {
            recent.push(Some(i));
        }
        assert!(!recent.acks(ack("z9hG4bK-one").as_bytes(), &limits));
    }

    #[test]
    fn the_offered_load_is_read_from_the_top_via_only() {
        let invite = b"INVITE sip:a@b SIP/2.0\r\n\
            Via: SIP/2.0/TCP 10.0.0.1:5070;branch=z9hG4bKx;rport;hl-offered=312.5, SIP/2.0/TCP 10.0.0.9;branch=z9hG4bKy;hl-offered=1\r\n\
            Via: SIP/2.0/TCP 10.0.0.2;branch=z9hG4bKz;hl-offered=7\r\n\
            Content-Length: 0\r\n\r\n";
        assert_eq!(offered_load(invite), Some(312.5));
        let compact =
            b"INVITE sip:a@b SIP/2.0\r\nv: SIP/2.0/UDP h;branch=z9hG4bKq;HL-OFFERED=40\r\n\r\n";
        assert_eq!(offered_load(compact), Some(40.0));
        // Only in a lower Via, or only in the body: not the upstream's word.
        let lower = b"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/TCP h;branch=z9hG4bKa, SIP/2.0/TCP g;branch=z9hG4bKb;hl-offered=9\r\n\r\n;hl-offered=5";
        assert_eq!(offered_load(lower), None);
        assert_eq!(
            offered_load(b"INVITE sip:a@b SIP/2.0\r\nVia: x;hl-offered=abc\r\n\r\n"),
            None
        );
        assert_eq!(offered_load(b""), None);
    }
}
