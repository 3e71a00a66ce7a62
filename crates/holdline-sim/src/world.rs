//! One run of a scenario: nodes, links, the CPU model, and the event loop.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use holdline_agent::{
    Agent, AgentConfig, ArrivalKind, Hold, RegisterConfig, Timers, UacConfig, UasConfig,
    UserPattern,
};
use holdline_base::{Duration, Instant, Peer, Rng, Transport};
use holdline_netmodel::{Fate, Link};
use holdline_overload::{
    Accept, Admission, Algorithm, BudgetConfig, Class, Controller, ControllerConfig,
    ControllerFactory, Decision, DelayWindowConfig, Deoc, DeocReply, DeocSignal, FairShare,
    FairShareConfig, Feedback, HopClientConfig, HopMeasure, HopServer, HopServerConfig, LoadReport,
    Outcome, RejectReason, Rejection, RejectionBudget, Signal, TargetId, Work,
};
use holdline_proto::dns::{DnsAnswer, DnsRecords, QueryKind, SrvRecord};
use holdline_proto::{
    DnsQuery, DnsResponse, DnsRoute, DnsTarget, Endpoint, EndpointEvent, GateRejection, HashRoute,
    HashTarget, ListenAddr, LocationStore, MemoryLocationStore, OverloadAnswer, ProxyConfig,
    RateAnswer, RelayPolicy, StaticRoute,
};
use holdline_sip::{Limits, Message, OcAlgo, OcOffer, OcReport};

use crate::engine::EventQueue;
use crate::scenario::{Scenario, truesize};
use crate::store::SimStore;

/// Why a run could not be set up.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// A controller could not be built from the scenario's server.
    #[error("server `{server}`: {message}")]
    Controller {
        /// The server.
        server: String,
        /// What went wrong.
        message: String,
    },
    /// A user agent could not be built.
    #[error("node `{node}`: {message}")]
    Agent {
        /// The node.
        node: String,
        /// What went wrong.
        message: String,
    },
    /// A link could not be built.
    #[error("link: {0}")]
    Link(String),
}

/// How long the SRV records of `srv` routes are cached: longer than any run.
const DNS_TTL: Duration = Duration::from_secs(10_000_000);

/// The first port of a node; sub-agent `i` of a population listens on `BASE_PORT + i`.
const BASE_PORT: u16 = 5060;

/// The address of node `node`, sub-agent `sub`: `10.(node/256).(node%256).1:5060+sub`.
pub(crate) fn node_addr(node: usize, sub: usize) -> SocketAddr {
    let ip = Ipv4Addr::new(10, (node >> 8) as u8, (node & 0xff) as u8, 1);
    SocketAddr::new(IpAddr::V4(ip), BASE_PORT.saturating_add(sub as u16))
}

/// The node and sub-agent an address belongs to.
fn decode(addr: SocketAddr) -> Option<(usize, usize)> {
    match addr.ip() {
        IpAddr::V4(ip) => {
            let o = ip.octets();
            if o[0] != 10 || o[3] != 1 {
                return None;
            }
            let node = (usize::from(o[1]) << 8) | usize::from(o[2]);
            let sub = usize::from(addr.port().checked_sub(BASE_PORT)?);
            Some((node, sub))
        }
        IpAddr::V6(_) => None,
    }
}

fn udp(addr: SocketAddr) -> Peer {
    Peer {
        addr,
        transport: Transport::Udp,
        conn: None,
    }
}

/// What the event loop handles.
enum Ev {
    /// A message reaches node `to`, sub-agent `sub`.
    Arrive {
        to: usize,
        sub: usize,
        from: SocketAddr,
        bytes: Vec<u8>,
    },
    /// The server `node` finished what it was doing (a batch of messages): its worker loop
    /// goes on (unless it crashed since: `epoch` is its incarnation).
    Done { node: usize, epoch: u32 },
    /// The server `node` sends a batch of datagrams (its `sendmmsg`).
    Send {
        node: usize,
        out: Vec<Out>,
        epoch: u32,
    },
    /// The store of registrar `node` committed batch `batch`.
    Commit { node: usize, batch: u64, epoch: u32 },
    /// Server `node` crashes; it restarts `restart_after` later (a registrar without its
    /// store with `new_disk`).
    Crash {
        node: usize,
        restart_after: Duration,
        new_disk: bool,
    },
    /// Server `node` starts again (a registrar without its store with `new_disk`).
    Restart { node: usize, new_disk: bool },
    /// Server `node`'s clock jumps forward by `by`.
    ClockJump { node: usize, by: Duration },
    /// A timer of node `node`, sub-agent `sub` (the server itself for servers).
    Wake { node: usize, sub: usize },
    /// Agent `sub` of node `node` ends the pause its loop takes under load (`coalesce_us`).
    Resume { node: usize, sub: usize },
    /// Cut the per-second time series.
    Sample,
}

/// A message leaving a node: (from, to, bytes).
type Out = (SocketAddr, SocketAddr, Vec<u8>);

/// A message waiting in a server's receive queue.
struct Queued {
    at: Instant,
    from: SocketAddr,
    bytes: Vec<u8>,
    /// Paper discipline: the 503 decided when it arrived.
    forced: Option<GateRejection>,
}

/// A server's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerCounters {
    /// Messages handled (taken from a queue and served).
    pub handled: u64,
    /// New INVITEs rejected at the gate (the endpoint's count).
    pub rejected: u64,
    /// New INVITEs the controller admitted.
    pub admitted: u64,
    /// Messages dropped at the full main queue.
    pub queue_drops: u64,
    /// Messages dropped at the full INVITE queue.
    pub invite_queue_drops: u64,
    /// CPU time spent serving, nanoseconds.
    pub busy_ns: u64,
    /// New INVITEs rejected at the forward gate: DEOC's restrictor, or a next hop's loss
    /// answer (the endpoint's count).
    pub forward_rejected: u64,
    /// Requests sent on to the next target of an `srv` route after one failed (timeout,
    /// 503, transport error) within their transaction (the endpoint's count).
    pub failovers: u64,
    /// Callees and domains whose egress edge the proxy core learned from Record-Route, at
    /// the end (DEOC with `target = "record-route"`; the endpoint's `edges_learned`).
    pub edges_learned: u64,
    /// Requests of admitted calls (class `InDialog`: ACK, BYE, CANCEL, retransmissions of
    /// admitted INVITEs) the local gate rejected: an invariant says there are none.
    pub in_dialog_rejected: u64,
    /// Worker loop iterations (the real server's `holdline_loop_busy_seconds_count`).
    pub iterations: u64,
    /// The longest of them, nanoseconds: its timers wait that long (the real
    /// `holdline_loop_busy_seconds` histogram's top).
    pub longest_iteration_ns: u64,
    /// Receive calls on the main queue that returned datagrams (the real server's
    /// `holdline_queue_delay_seconds_count`: one per batch read).
    pub main_reads: u64,
    /// Receive calls on the INVITE queue that returned datagrams (the real server's
    /// `holdline_invite_queue_delay_seconds_count`).
    pub invite_reads: u64,
    /// The waits of the first datagram of each main-queue read, summed, nanoseconds (the
    /// real server's `holdline_queue_delay_seconds_sum`).
    pub main_wait_ns: u64,
    /// The same for the INVITE queue (`holdline_invite_queue_delay_seconds_sum`).
    pub invite_wait_ns: u64,
    /// Datagrams it sent.
    pub sent: u64,
    /// Sends that were the first of their batch to their destination (`wake_us` each).
    pub wakes: u64,
    /// Its loop's CPU outside the handling (`recv_us`, `send_us`, `wake_us`), nanoseconds:
    /// the real server's `holdline_loop_busy_seconds_sum` minus its
    /// `holdline_processing_seconds_sum`.
    pub loop_cost_ns: u64,
    /// The time its rejection budget counted as spent on rejections, nanoseconds (handling
    /// of rejected messages and their share of the loop's costs): the real server's
    /// `holdline_overload_rejection_seconds_total`. Local control reads the occupancy with
    /// this time left out, so it sets how fast OCC cuts while the server rejects.
    pub rejection_ns: u64,
    /// What the endpoint received, as the real server exports it
    /// (`holdline_sip_requests_in_total{method}`, `holdline_sip_responses_in_total{class}`):
    /// INVITEs (retransmissions included), ACKs, BYEs, 1xx and 2xx responses.
    pub received: Received,
}

/// Messages a server's endpoint received, by kind (retransmissions included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Received {
    /// INVITE requests.
    pub invite: u64,
    /// ACK requests.
    pub ack: u64,
    /// BYE requests.
    pub bye: u64,
    /// 1xx responses.
    pub r1xx: u64,
    /// 2xx responses.
    pub r2xx: u64,
    /// 3xx-6xx responses.
    pub r3xx_6xx: u64,
}

/// A receive queue: a FIFO bounded in messages or, as a kernel socket buffer, in bytes.
///
/// In bytes it also frees space as Linux's UDP socket does (`udp_rmem_release`): a datagram
/// read is not given back to the buffer at once but added to a deficit, returned when the
/// deficit reaches a quarter of the buffer or when the reader has taken every datagram of
/// its last splice (the kernel's `reader_queue`, refilled from the receive queue when
/// empty). A full socket thus takes new datagrams in bursts of a quarter of its size.
/// Measured here on loopback (a 212,992-byte `SO_RCVBUF`, 700-byte datagrams): full at 184,
/// nothing fits after 36 reads, 47 fit once 47 are read.
struct RecvQueue {
    q: VecDeque<Queued>,
    /// Bound in messages, or in bytes of `truesize` when `bytes` is set.
    bound: usize,
    bytes: bool,
    used: usize,
    /// Bytes read but not yet given back (`forward_deficit`).
    deficit: usize,
    /// Datagrams at the front of `q` in the reader's splice (`reader_queue`).
    reader: usize,
}

impl RecvQueue {
    fn new(bound: usize, bytes: bool) -> Self {
        Self {
            q: VecDeque::new(),
            bound,
            bytes,
            used: 0,
            deficit: 0,
            reader: 0,
        }
    }

    /// Empties the queue (a crash).
    fn clear(&mut self) {
        self.q.clear();
        self.used = 0;
        self.deficit = 0;
        self.reader = 0;
    }

    fn cost(&self, m: &[u8]) -> usize {
        if self.bytes { truesize(m.len()) } else { 1 }
    }

    /// Queues `m`, or gives it back when it does not fit.
    fn push(&mut self, m: Queued) -> Result<(), Queued> {
        let c = self.cost(&m.bytes);
        if self.used + c > self.bound {
            return Err(m);
        }
        self.used += c;
        self.q.push_back(m);
        Ok(())
    }

    fn pop(&mut self) -> Option<Queued> {
        if self.reader == 0 {
            self.reader = self.q.len();
        }
        let m = self.q.pop_front()?;
        let c = self.cost(&m.bytes);
        if !self.bytes {
            self.used -= c;
            return Some(m);
        }
        self.reader -= 1;
        self.deficit += c;
        if self.deficit >= self.bound / 4 || self.reader == 0 {
            self.used -= self.deficit;
            self.deficit = 0;
            // The release splices what arrived meanwhile onto the reader's queue.
            self.reader = self.q.len();
        }
        Some(m)
    }

    fn len(&self) -> usize {
        self.q.len()
    }

    fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
}

/// Where a server's worker is in its loop iteration (see [`Server::step`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Reading the main queue: receive calls left in the current read, reads after it.
    Main { batches: usize, reads: usize },
    /// Reading one batch of the INVITE queue.
    Invites,
    /// Timers, sends, the busy report.
    Finish,
}

/// A SIP server: a real [`Endpoint`], its controller, and a model of `holdline-server`'s
/// worker loop (batched reads, sends flushed per batch, timers between iterations) and of
/// its sockets' receive buffers.
struct Server {
    name: String,
    ep: Endpoint,
    ctl: Box<dyn Controller>,
    budget: Option<RejectionBudget>,
    addr: SocketAddr,
    main: RecvQueue,
    invites: RecvQueue,
    /// Paper discipline: new INVITEs rejected on arrival, served before everything else.
    early: RecvQueue,
    /// How long a worker waiting in `poll` takes to start when a datagram arrives.
    wakeup: Duration,
    /// A wake-up is under way (its `Done` is scheduled).
    waking: bool,
    invite_queue: bool,
    paper: bool,
    /// New INVITEs that waited longer than this in the INVITE queue are answered 503
    /// whatever the gate says (the server's `defer_max_wait_ms` over UDP).
    invite_max_wait: Option<Duration>,
    service: Duration,
    invite_cost: Duration,
    reject_cost: Duration,
    /// CPU per datagram received and per datagram sent, outside the handling
    /// (`recv_us`, `send_us`).
    recv_cost: Duration,
    send_cost: Duration,
    /// CPU per destination of a send batch (`wake_us`).
    wake_cost: Duration,
    batch: usize,
    read_batches: usize,
    /// The iteration in progress: its start (the time the endpoint is given, as the
    /// worker's `now` is read once per poll) and its stage; `None`: waiting in `poll`.
    iter: Option<(Instant, Stage)>,
    /// Reads of the main queue that ended with datagrams left (the worker's `pending`
    /// tokens, deduplicated there): the queue is read once more in the next iteration.
    pending_reads: usize,
    /// The last batch read from the main queue was short (fewer than `batch`): the worker
    /// takes its socket as drained and ends this read (`holdline-server`'s `read_socket`:
    /// the next datagram raises a new readiness edge), so what arrived while it handled the
    /// batch waits for the next iteration, after the iteration's sends are flushed.
    short_batch: bool,
    /// Datagrams reached the main / INVITE queue since the last poll (readiness events).
    main_event: bool,
    invite_event: bool,
    /// The INVITE queue may have datagrams (readable and not yet found empty).
    invite_ready: bool,
    /// Past the rejection budget while reading new INVITEs: the gate admits.
    admit_all: bool,
    /// What the worker has queued to send (flushed at 32 and at the end of an iteration).
    sends: Vec<Out>,
    armed: Option<Instant>,
    /// Busy time not yet reported to the controller starts here; what it was spent on.
    busy_mark: Instant,
    handling: Duration,
    rejecting: Duration,
    rejected_msgs: u64,
    /// Busy time since the server role last answered, rejections counted in, and when that
    /// was: the answer's occupancy (as the worker's `whole_occupancy`).
    answer_busy: Duration,
    answer_mark: Instant,
    datagrams: u64,
    datagram_mark: u64,
    /// Mean service time per message (EWMA), ns: turns a queueing delay into a length.
    service_ns: f64,
    c: ServerCounters,
    scratch: Vec<u8>,
    /// DEOC at the forward gate (`edge = "deoc"`).
    deoc: Option<Box<EdgeDeoc>>,
    /// RFC 7339 loss or RFC 7415 rate feedback (`feedback = "loss" | "rate"`): the client
    /// role at the forward gate ...
    hop: Option<Box<dyn Controller>>,
    /// ... and the server role, answering upstream clients.
    role: Option<HopRole>,
    /// Per-upstream max-min fair admission behind the local controller
    /// (`local_fairness = "per-upstream"`).
    fair: Option<FairShare>,
    /// The headroom this server reports in responses to INVITEs (`load_report`).
    report: Option<Box<Reporter>>,
    /// The SRV records of this server's `srv` routes (the simulator is its DNS server):
    /// given to the endpoint's cache at the start and on every lookup it asks for.
    zone: Vec<(String, Vec<SrvRecord>)>,
    /// Its incarnation: bumped by a crash, so that work scheduled before it is dropped.
    epoch: u32,
    /// Crashed and not restarted yet: datagrams to it are lost.
    down: bool,
    /// The registrar role (`[[registrars]]`).
    reg: Option<Box<RegRole>>,
    /// What a restart builds a new endpoint and controller from.
    restart_cfg: Box<RestartCfg>,
    /// How far this server's clock is ahead of the simulation's (clock jumps): the
    /// endpoint, controller and store see `now + skew`.
    skew: Duration,
    /// Its clock jumps: (when, in the simulation's time; the skew from then on).
    jumps: Vec<(Instant, Duration)>,
}

impl Server {
    /// Its skew at `t` (the simulation's time).
    fn skew_at(&self, t: Instant) -> Duration {
        self.jumps
            .iter()
            .rev()
            .find(|(at, _)| *at <= t)
            .map_or(Duration::ZERO, |(_, s)| *s)
    }
}

/// What a restarted server is built from: the endpoint's configuration (branch seed
/// included) and the local controller's, and the restarted controllers' seeds (a
/// registrar's come from its own generator, as before crashes of other servers existed).
struct RestartCfg {
    config: ProxyConfig,
    ctl_cfg: ControllerConfig,
    rng: Rng,
}

/// A server's registrar role: its durable store and what a restart needs.
struct RegRole {
    store: Arc<SimStore>,
    commit_min: Duration,
    commit_max: Duration,
    crash_at: Option<Instant>,
    restart_after: Duration,
    inflight_survives: bool,
    /// A crash loses the committed contents too ([`World::lose_stores_on_crash`]).
    lose_store: bool,
    /// Commit latencies and restarted controllers' seeds.
    rng: Rng,
}

impl Server {
    /// The process died: everything but the store's committed contents is lost (the
    /// endpoint itself is replaced at the restart); with `new_disk` the committed contents
    /// too.
    fn crash(&mut self, new_disk: bool) {
        if let Some(r) = self.reg.as_ref() {
            r.store.crash(r.inflight_survives);
            if r.lose_store || new_disk {
                r.store.wipe();
            }
        }
        self.down = true;
        self.epoch += 1;
        for q in [&mut self.main, &mut self.invites, &mut self.early] {
            q.clear();
        }
        self.iter = None;
        self.waking = false;
        self.pending_reads = 0;
        self.short_batch = false;
        self.main_event = false;
        self.invite_event = false;
        self.invite_ready = false;
        self.admit_all = false;
        self.sends.clear();
        self.armed = None;
    }

    /// The process starts at `now` (its own clock): a new endpoint — a registrar's over its
    /// store, loaded from what it committed (as `holdline serve` opens its persistent
    /// store), another server's over an empty location store — and a new controller.
    /// Returns the bindings loaded.
    fn restart(&mut self, now: Instant) -> usize {
        let rc = &mut self.restart_cfg;
        let (store, loaded, seed): (Arc<dyn LocationStore>, usize, u64) = match self.reg.as_mut() {
            Some(r) => {
                let loaded = r.store.restart(now);
                (r.store.clone(), loaded, r.rng.next_u64())
            }
            None => (Arc::new(MemoryLocationStore::new()), 0, rc.rng.next_u64()),
        };
        self.ep = Endpoint::new(rc.config.clone(), store);
        preload_zone(&mut self.ep, &self.zone, now);
        if let Ok(ctl) = rc.ctl_cfg.build(now, Rng::seed_from_u64(seed)) {
            self.ctl = ctl;
        }
        self.busy_mark = now;
        self.handling = Duration::ZERO;
        self.rejecting = Duration::ZERO;
        self.down = false;
        loaded
    }
}

/// The largest headroom a server reports (an idle server would report an infinite one).
const MAX_HEADROOM: f64 = 10.0;

/// A server's load reports (`load_report = true`): its headroom — OCC's next acceptance
/// before clipping, `f·ρ_target/ρ`, the factor by which it wants the load it receives
/// multiplied — updated at each close of its local controller's interval, and with
/// `local_fairness` per upstream: the upstream's max-min share of `g` times the total
/// arrivals over its own arrival rate.
struct Reporter {
    /// This server's node index (the report's `by`).
    me: u64,
    /// OCC's target occupancy.
    target: f64,
    /// The acceptance in force during the interval being closed.
    acceptance: f64,
    /// The last closed interval's number (0: nothing reported yet) and headroom.
    seq: u64,
    headroom: f64,
    /// Per upstream, with fairness.
    per_upstream: std::collections::HashMap<TargetId, f64>,
}

impl Reporter {
    fn headroom_for(&self, upstream: TargetId) -> f64 {
        self.per_upstream
            .get(&upstream)
            .copied()
            .unwrap_or(self.headroom)
    }
}

/// The header a server reports its headroom in: `Load-Report: g=0.7340;seq=12;by=3`.
const LOAD_REPORT: &[u8] = b"Load-Report";

/// The end of the header section of `bytes` (the index of the empty line's CRLF).
fn header_end(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 2)
}

/// The header lines of a message (start line excluded), each with its start offset.
fn header_lines(bytes: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let end = header_end(bytes).unwrap_or(bytes.len());
    let head = &bytes[..end];
    let mut offset = 0;
    head.split(|&b| b == b'\n').filter_map(move |line| {
        let at = offset;
        offset += line.len() + 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        (at > 0 && !line.is_empty()).then_some((at, line))
    })
}

/// The value of the first header field `name` (case-insensitive), trimmed.
fn header_value<'a>(bytes: &'a [u8], name: &[u8]) -> Option<(usize, usize, &'a [u8])> {
    header_lines(bytes).find_map(|(at, line)| {
        let colon = line.iter().position(|&b| b == b':')?;
        line[..colon]
            .trim_ascii()
            .eq_ignore_ascii_case(name)
            .then(|| (at, line.len(), line[colon + 1..].trim_ascii()))
    })
}

/// Whether `bytes` is a response to an INVITE (its CSeq method).
fn answers_invite(bytes: &[u8]) -> bool {
    bytes.starts_with(b"SIP/2.0 ")
        && header_value(bytes, b"CSeq").is_some_and(|(_, _, v)| v.ends_with(b"INVITE"))
}

/// Reads a `Load-Report` value: `g=…;seq=…;by=…`.
fn parse_report(value: &[u8]) -> Option<LoadReport> {
    let text = std::str::from_utf8(value).ok()?;
    let (mut g, mut seq, mut by) = (None, None, None);
    for part in text.split(';') {
        let (k, v) = part.split_once('=')?;
        match k.trim() {
            "g" => g = v.trim().parse::<f64>().ok(),
            "seq" => seq = v.trim().parse::<u64>().ok(),
            "by" => by = v.trim().parse::<u64>().ok(),
            _ => {}
        }
    }
    let headroom = g.filter(|g| g.is_finite() && *g >= 0.0)?;
    Some(LoadReport {
        reporter: by?,
        seq: seq?,
        headroom,
    })
}

/// Puts this server's report into a response going upstream: added when the response has
/// none, replacing the one from downstream when this server has less headroom.
fn stamp(bytes: &mut Vec<u8>, report: LoadReport) {
    let line = format!(
        "Load-Report: g={:.4};seq={};by={}",
        report.headroom, report.seq, report.reporter
    );
    match header_value(bytes, LOAD_REPORT) {
        Some((at, len, v)) => {
            if parse_report(v).is_some_and(|theirs| theirs.headroom <= report.headroom) {
                return;
            }
            bytes.splice(at..at + len, line.into_bytes());
        }
        None => {
            if let Some(end) = header_end(bytes) {
                let mut l = line.into_bytes();
                l.extend_from_slice(b"\r\n");
                bytes.splice(end..end, l);
            }
        }
    }
}

/// DEOC at an ingress edge: the controller, how a call's target is found, and the branches
/// of the calls it admitted, whose outcomes it is fed.
struct EdgeDeoc {
    ctl: Deoc,
    /// Request-URI host (lower case) → the egress edge serving it (its node index).
    domains: std::collections::HashMap<String, u64>,
    /// This server's node index (calls for its own domain are not gated).
    me: u64,
    /// A 500 on a branch counts as an overload rejection (a lone 503 two hops away).
    count_500: bool,
    /// Admitted calls' branches: Call-ID → (target, next hop, sent at).
    pending: std::collections::HashMap<Vec<u8>, (TargetId, SocketAddr, Instant)>,
    /// The new INVITE being handled: its target and Call-ID.
    current: Option<(TargetId, Vec<u8>)>,
    /// DEOC reads the `Load-Report` of the responses of the calls it admitted.
    probe: bool,
    /// The target is the edge the proxy core learned from Record-Route (else the next hop),
    /// not the scenario's egress edge of the Request-URI's domain.
    learn: bool,
}

impl EdgeDeoc {
    /// A response of a call this edge admitted: its load report, if any, to DEOC.
    fn read_report(&mut self, now: Instant, bytes: &[u8]) {
        let Some(report) = header_value(bytes, LOAD_REPORT).and_then(|(_, _, v)| parse_report(v))
        else {
            return;
        };
        let Some(id) = Message::parse(bytes, &Limits::DEFAULT)
            .ok()
            .and_then(|m| m.call_id().ok().map(<[u8]>::to_vec))
        else {
            return;
        };
        if let Some((target, _, _)) = self.pending.get(&id) {
            self.ctl.on_load_report(now, *target, report);
        }
    }

    /// The target and Call-ID of `bytes` when it is an INVITE towards another edge. A
    /// learning edge gates every new INVITE it forwards; its target is set at the forward
    /// gate, from the proxy core's learned edge.
    fn classify(&self, bytes: &[u8]) -> Option<(TargetId, Vec<u8>)> {
        let msg = Message::parse(bytes, &Limits::DEFAULT).ok()?;
        if self.learn {
            return Some((TargetId(0), msg.call_id().ok()?.to_vec()));
        }
        let uri = msg.request_uri_bytes()?;
        let host = uri_host(uri)?;
        let host = std::str::from_utf8(host).ok()?.to_ascii_lowercase();
        let target = *self.domains.get(&host)?;
        if target == self.me {
            return None;
        }
        Some((TargetId(target), msg.call_id().ok()?.to_vec()))
    }

    /// A branch of an admitted call ended: its outcome, as DEOC reads it.
    fn reply(&self, status: u16, timed_out: bool) -> DeocReply {
        if timed_out {
            DeocReply::Timeout
        } else if status == 500 && self.count_500 {
            DeocReply::Final(503)
        } else {
            DeocReply::Final(status)
        }
    }
}

/// The host of a SIP URI (`sip:user@host:port;params`), as bytes.
fn uri_host(uri: &[u8]) -> Option<&[u8]> {
    let rest = uri.splitn(2, |&b| b == b':').nth(1)?;
    let rest = match rest.iter().position(|&b| b == b'@') {
        Some(i) => &rest[i + 1..],
        None => rest,
    };
    let end = rest
        .iter()
        .position(|&b| matches!(b, b':' | b';' | b'?' | b'>'))
        .unwrap_or(rest.len());
    Some(&rest[..end]).filter(|h| !h.is_empty())
}

/// The server role of RFC 7339 loss and RFC 7415 rate feedback, as `holdline-server`'s
/// worker runs it: the
/// estimator updated at every close of the local controller's interval, its answer set on the
/// endpoint.
struct HopRole {
    estimator: HopServer,
    validity_ms: u32,
    updated: Instant,
    floor_since: Option<Instant>,
    /// New INVITEs' queueing delays since the last update: sum (s), count.
    invite_delay: (f64, u64),
    /// The answer exempts the clients that take it from the gate.
    exempt: bool,
}

/// How long the loss answer may stay at its ceiling before the clients that take it are put
/// to the gate again (the worker's `EXEMPT_FLOOR_GRACE`).
const EXEMPT_FLOOR_GRACE: Duration = Duration::from_secs(1);

/// A next hop's number for the forward-gate controllers (its address, as the worker's).
/// DEOC's target for an edge the proxy core learned (`EdgeId::at`): apart from every next
/// hop's number by its top bit, as in the server's worker.
fn learned_target(edge: holdline_proto::EdgeId) -> TargetId {
    TargetId(edge.0 | (1 << 63))
}

fn target_of(addr: SocketAddr) -> TargetId {
    let ip = match addr.ip() {
        IpAddr::V4(v4) => u64::from(u32::from(v4)),
        IpAddr::V6(v6) => {
            let b = u128::from(v6);
            (b as u64) ^ ((b >> 64) as u64)
        }
    };
    TargetId((ip << 16) ^ u64::from(addr.port()))
}

/// A next hop's answer as the client's signal (the worker's `feedback_of`).
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

/// Whether the top Via of a request offers overload control (`;oc`).
fn offers_oc(bytes: &[u8]) -> bool {
    for line in bytes.split(|&b| b == b'\n').skip(1) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            return false;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let name = line[..colon].trim_ascii();
        if name.eq_ignore_ascii_case(b"via") || name.eq_ignore_ascii_case(b"v") {
            let value = &line[colon..];
            let first = value.split(|&b| b == b',').next().unwrap_or(value);
            return first.windows(3).any(|w| w.eq_ignore_ascii_case(b";oc"));
        }
    }
    false
}

/// Datagrams a worker's send batch holds before it is flushed.
const SEND_BATCH: usize = 32;

impl Server {
    /// A message arrives: queued, or dropped at a full queue. True when the worker is
    /// waiting in `poll` and should wake up.
    fn arrive(&mut self, now: Instant, from: SocketAddr, bytes: Vec<u8>) -> bool {
        let invite = bytes.starts_with(b"INVITE ");
        let mut forced = None;
        if self.paper && invite && self.ctl.poll_timeout().is_some_and(|t| t <= now) {
            self.ctl.handle_timeout(now);
            self.interval_closed(now);
        }
        // A client that takes this server's loss answer is exempt from its gate (as the
        // endpoint exempts it in the other discipline).
        let exempt = self.role.as_ref().is_some_and(|r| r.exempt) && invite && offers_oc(&bytes);
        if self.paper && invite && !exempt {
            // Early rejection: the decision is taken on arrival (a retransmission of an
            // admitted INVITE is not put to the gate when served, whatever it says here).
            let mut d = self.ctl.admit(now, &Admission::new_invite());
            if let Some(f) = self.fair.as_mut() {
                d = f.decide(now, target_of(from), d);
            }
            if let Some(r) = d.rejection() {
                forced = Some(gate_rejection(r));
            }
        }
        let m = Queued {
            at: now,
            from,
            bytes,
            forced,
        };
        let res = if forced.is_some() {
            self.main_event = true;
            self.early.push(m).map_err(|_| &mut self.c.queue_drops)
        } else if self.invite_queue && invite {
            self.invite_event = true;
            self.invites
                .push(m)
                .map_err(|_| &mut self.c.invite_queue_drops)
        } else {
            self.main_event = true;
            self.main.push(m).map_err(|_| &mut self.c.queue_drops)
        };
        if let Err(drops) = res {
            *drops += 1;
            return false;
        }
        self.iter.is_none() && !self.waking
    }

    /// `poll` returns at `now`: a new iteration of the worker loop starts.
    fn begin(&mut self, now: Instant) {
        // DEOC's periods end on its own timer (the worker's forward-gate timers).
        if let Some(d) = self.deoc.as_mut()
            && d.ctl.poll_timeout().is_some_and(|t| t <= now)
        {
            d.ctl.handle_timeout(now);
        }
        self.busy_mark = now;
        self.close_interval(now);
        // The worker keeps one carried entry per source (`holdline-server` dedupes its
        // `pending` tokens): a new event and the carried read make at most two reads.
        let reads = usize::from(self.main_event) + self.pending_reads.min(1);
        self.main_event = false;
        self.pending_reads = 0;
        self.invite_ready |= std::mem::take(&mut self.invite_event);
        let stage = if reads > 0 {
            Stage::Main {
                batches: self.read_batches,
                reads: reads - 1,
            }
        } else {
            Stage::Invites
        };
        self.iter = Some((now, stage));
    }

    /// Whether `poll` would return at once at `now`: reads left over, datagrams or a due
    /// timer.
    fn ready(&self, now: Instant) -> bool {
        self.pending_reads > 0
            || self.main_event
            || self.invite_event
            || self.invite_ready
            || self.poll_timeout().is_some_and(|t| t <= now)
    }

    /// Runs the worker loop at `now` up to the next point where it spends time: returns when
    /// that work ends (call again then), or `None` when it waits in `poll`. Datagrams sent
    /// go to `releases` with their send time.
    fn step(&mut self, now: Instant, releases: &mut Vec<(Instant, Vec<Out>)>) -> Option<Instant> {
        self.waking = false;
        if self.iter.is_none() {
            if !self.ready(now) {
                return None;
            }
            self.begin(now);
        }
        // Bounded: iterations that find nothing to do at one instant end the step.
        let mut empty_iterations = 0u32;
        loop {
            let (t0, stage) = self.iter?;
            match stage {
                Stage::Main { batches, reads } => {
                    let after = if reads > 0 {
                        Stage::Main {
                            batches: self.read_batches,
                            reads: reads - 1,
                        }
                    } else {
                        Stage::Invites
                    };
                    let drained = batches < self.read_batches && self.short_batch;
                    if drained || (self.main.is_empty() && self.early.is_empty()) {
                        // A short batch drained the socket, or it would block: this read
                        // is over (datagrams that came meanwhile raised a new event).
                        self.iter = Some((t0, after));
                        continue;
                    }
                    if batches == 0 {
                        // Datagrams left: read again in the next iteration.
                        self.pending_reads += 1;
                        self.iter = Some((t0, after));
                        continue;
                    }
                    self.iter = Some((
                        t0,
                        Stage::Main {
                            batches: batches - 1,
                            reads,
                        },
                    ));
                    return Some(self.read_batch(t0, now, false, releases));
                }
                Stage::Invites => {
                    self.iter = Some((t0, Stage::Finish));
                    if self.pending_reads > 0 || !self.invite_ready {
                        continue;
                    }
                    if self.invites.is_empty() {
                        self.invite_ready = false;
                        continue;
                    }
                    self.admit_all = self.budget.as_mut().is_some_and(|b| !b.allows(now));
                    let end = self.read_batch(t0, now, true, releases);
                    self.admit_all = false;
                    return Some(end);
                }
                Stage::Finish => {
                    if self.ep.poll_timeout().is_some_and(|t| t <= t0) {
                        self.ep.handle_timeout(t0);
                        self.events(t0, now, None);
                        let mut sends = std::mem::take(&mut self.sends);
                        self.drain(t0, &mut sends);
                        self.sends = sends;
                    }
                    self.flush(now, releases);
                    let busy = self.busy_since(now);
                    self.ctl.on_signal(now, Signal::Busy(busy));
                    self.c.iterations += 1;
                    let took = now.saturating_duration_since(t0).as_nanos() as u64;
                    self.c.longest_iteration_ns = self.c.longest_iteration_ns.max(took);
                    self.iter = None;
                    if !self.ready(now) {
                        return None;
                    }
                    self.begin(now);
                    empty_iterations += 1;
                    if empty_iterations > 64 {
                        return Some(now + Duration::from_micros(1));
                    }
                }
            }
        }
    }

    /// One receive call at `now` on the main (or INVITE) queue: up to `batch` datagrams,
    /// handled one after the other; returns when the last one's service ends.
    fn read_batch(
        &mut self,
        t0: Instant,
        now: Instant,
        invites: bool,
        releases: &mut Vec<(Instant, Vec<Out>)>,
    ) -> Instant {
        let mut batch = Vec::with_capacity(self.batch.min(64));
        while batch.len() < self.batch {
            let m = if invites {
                self.invites.pop()
            } else {
                self.early.pop().or_else(|| self.main.pop())
            };
            match m {
                Some(m) => batch.push(m),
                None => break,
            }
        }
        if !invites {
            self.short_batch = batch.len() < self.batch;
        } else if batch.len() < self.batch {
            // A short batch drained the INVITE socket (the worker's `read_socket` returns
            // drained and `read_invites` clears its readiness): the next datagram raises a
            // new event, and no iteration is spent finding the socket empty.
            self.invite_ready = false;
        }
        if let Some(first) = batch.first() {
            let wait = now.saturating_duration_since(first.at);
            let wait_ns = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
            if invites {
                self.c.invite_reads += 1;
                self.c.invite_wait_ns = self.c.invite_wait_ns.saturating_add(wait_ns);
                self.ctl.on_signal(now, Signal::NewRequestDelay(wait));
                if let Some(role) = self.role.as_mut() {
                    role.invite_delay.0 += wait.as_secs_f64();
                    role.invite_delay.1 += 1;
                }
            } else {
                self.c.main_reads += 1;
                self.c.main_wait_ns = self.c.main_wait_ns.saturating_add(wait_ns);
                // As the worker: the queueing delay of the batch's first datagram, and the
                // queue length it implies.
                self.ctl.on_signal(now, Signal::QueueDelay(wait));
                if self.service_ns > 0.0 {
                    let len = wait.as_nanos() as f64 / self.service_ns + batch.len() as f64;
                    self.ctl
                        .on_signal(now, Signal::QueueLength(len.min(1e9) as usize));
                }
            }
        }
        let mut t = now;
        for mut m in batch {
            self.datagrams += 1;
            // Judged when its turn comes, as the worker does (`age_of` of each datagram as
            // it is dispatched): the INVITEs admitted before it in the batch age it too.
            if invites
                && self
                    .invite_max_wait
                    .is_some_and(|w| t.saturating_duration_since(m.at) > w)
            {
                m.forced = Some(gate_rejection(Rejection::service_unavailable(
                    RejectReason::DeferTimeout,
                    None,
                )));
            }
            let cost = self.handle(t0, t, &m);
            t += cost;
            if self.sends.len() >= SEND_BATCH {
                self.flush(t, releases);
            }
        }
        t
    }

    /// Handles one message whose service starts at `t` (the endpoint is given the
    /// iteration's `t0`); returns its service time.
    fn handle(&mut self, t0: Instant, t: Instant, m: &Queued) -> Duration {
        // The controller's interval closes between messages when it is due.
        self.close_interval(t);
        if let Some(d) = self.deoc.as_mut() {
            d.current = if m.bytes.starts_with(b"INVITE ") {
                d.classify(&m.bytes)
            } else {
                None
            };
        }
        if let Some(d) = self.deoc.as_mut()
            && d.probe
            && m.bytes.starts_with(b"SIP/2.0 ")
        {
            d.read_report(t, &m.bytes);
        }
        let ctl = &mut self.ctl;
        let fair = &mut self.fair;
        let upstream = target_of(m.from);
        let admit_all = self.admit_all;
        let forced = m.forced;
        let mut admitted = false;
        let mut in_dialog_rejected = false;
        let hop = &mut self.hop;
        let deoc = &mut self.deoc;
        let rejected = self.ep.handle_admitting(
            t0,
            &m.bytes,
            udp(m.from),
            Transport::Udp,
            &mut |class, exempt| {
                if forced.is_some() {
                    in_dialog_rejected |= class == Class::InDialog;
                    return forced;
                }
                if admit_all || exempt {
                    admitted = true;
                    return None;
                }
                let mut d: Decision = ctl.admit(t, &Admission::ingress(class));
                if class == Class::NewInvite
                    && let Some(f) = fair.as_mut()
                {
                    d = f.decide(t, upstream, d);
                }
                match d.rejection() {
                    None => {
                        admitted = true;
                        None
                    }
                    Some(r) => {
                        in_dialog_rejected |= class == Class::InDialog;
                        Some(gate_rejection(r))
                    }
                }
            },
            &mut |dest, edge| {
                // The forward gate, as the worker's: a next hop's loss answer (RFC 7339)...
                if let Some(h) = hop.as_mut()
                    && let Some(r) = h
                        .admit(
                            t,
                            &Admission::forward(Class::NewInvite, target_of(dest.addr)),
                        )
                        .rejection()
                {
                    return Some(gate_rejection(r));
                }
                // ... and DEOC, per target edge.
                let d = deoc.as_mut()?;
                let learn = d.learn;
                let (target, _) = d.current.as_mut()?;
                if learn {
                    // As the worker's: the learned edge, else the next hop.
                    *target = edge.map_or_else(|| target_of(dest.addr), learned_target);
                }
                d.ctl.admit_call(t, *target).rejection().map(gate_rejection)
            },
        );
        self.events(t0, t, Some(&m.bytes));
        if let Some(d) = self.deoc.as_mut() {
            d.current = None;
        }
        self.c.handled += 1;
        self.c.admitted += u64::from(admitted && !rejected);
        self.c.in_dialog_rejected += u64::from(in_dialog_rejected && rejected);
        let cost = if rejected {
            self.reject_cost
        } else if m.bytes.starts_with(b"INVITE ") {
            self.invite_cost
        } else {
            self.service
        };
        self.c.busy_ns += u64::try_from(cost.as_nanos()).unwrap_or(u64::MAX);
        self.handling += cost;
        if rejected {
            self.rejecting += cost;
            self.rejected_msgs += 1;
        }
        let ns = cost.as_nanos() as f64;
        self.service_ns = if self.service_ns == 0.0 {
            ns
        } else {
            0.99 * self.service_ns + 0.01 * ns
        };
        let mut sends = std::mem::take(&mut self.sends);
        let before = sends.len();
        self.drain(t0, &mut sends);
        let sent = sends.len().saturating_sub(before);
        // A datagram to a destination no earlier datagram of this send batch goes to wakes
        // that destination's process.
        let wakes = (before..sends.len())
            .filter(|&i| !sends[..i].iter().any(|o| o.1 == sends[i].1))
            .count();
        self.sends = sends;
        self.c.sent += sent as u64;
        self.c.wakes += wakes as u64;
        // The system calls' share: busy time of the loop, not of the handling (the worker's
        // `holdline_processing_seconds` leaves it out; its loop's busy time does not).
        let n = |k: usize| u32::try_from(k).unwrap_or(u32::MAX);
        let calls = self.recv_cost + self.send_cost * n(sent) + self.wake_cost * n(wakes);
        let calls_ns = u64::try_from(calls.as_nanos()).unwrap_or(u64::MAX);
        self.c.busy_ns += calls_ns;
        self.c.loop_cost_ns += calls_ns;
        cost + calls
    }

    /// Sends what is queued, at `t`.
    fn flush(&mut self, t: Instant, releases: &mut Vec<(Instant, Vec<Out>)>) {
        if !self.sends.is_empty() {
            self.datagrams += self.sends.len() as u64;
            releases.push((t, std::mem::take(&mut self.sends)));
        }
    }

    /// The busy time since the mark to report to the controller (rejections' share left out
    /// through the budget, as the worker does), and a new mark at `t`.
    fn busy_since(&mut self, t: Instant) -> Duration {
        let busy = t.saturating_duration_since(self.busy_mark);
        self.busy_mark = self.busy_mark.max(t);
        self.answer_busy += busy;
        let handling = std::mem::take(&mut self.handling);
        let rejecting = std::mem::take(&mut self.rejecting);
        let rejected_messages = std::mem::take(&mut self.rejected_msgs);
        let datagrams = self.datagrams - self.datagram_mark;
        self.datagram_mark = self.datagrams;
        match self.budget.as_mut() {
            Some(b) => {
                let split = b.account(
                    t,
                    Work {
                        busy,
                        handling,
                        rejecting,
                        datagrams,
                        rejected_messages,
                    },
                );
                let ns = u64::try_from(split.rejecting.as_nanos()).unwrap_or(u64::MAX);
                self.c.rejection_ns = self.c.rejection_ns.saturating_add(ns);
                split.other
            }
            None => busy,
        }
    }

    fn close_interval(&mut self, now: Instant) {
        if self.ctl.poll_timeout().is_some_and(|t| t <= now) {
            let busy = self.busy_since(now);
            self.ctl.on_signal(now, Signal::Busy(busy));
            self.ctl.handle_timeout(now);
            self.interval_closed(now);
        }
    }

    /// The local controller closed an interval at `now`: the server role's answer for the
    /// next one (the worker's `update_answer`), and the forward-gate controllers' timers.
    fn interval_closed(&mut self, now: Instant) {
        if let Some(h) = self.hop.as_mut()
            && h.poll_timeout().is_some_and(|t| t <= now)
        {
            h.handle_timeout(now);
        }
        if let Some(rep) = self.report.as_mut() {
            let snap = self.ctl.snapshot();
            if let Some(rho) = snap.occupancy {
                let g = (rep.acceptance * rep.target / rho.max(1e-3)).min(MAX_HEADROOM);
                rep.headroom = g;
                rep.seq = snap.intervals;
                rep.per_upstream.clear();
                if let Some(f) = self.fair.as_ref() {
                    // The top admitters' rate is the share the rejections cut the largest
                    // flows to: an upstream below it may grow to it, one above is told its
                    // acceptance; with room to spare (g > 1), everyone may grow by g.
                    let top = f.top_rate(now);
                    for (u, r) in f.rates() {
                        let h = if r > 0.0 { top / r } else { MAX_HEADROOM };
                        let h = if g > 1.0 { h.max(g) } else { h };
                        rep.per_upstream.insert(u, h.min(MAX_HEADROOM));
                    }
                }
            }
            rep.acceptance = snap.acceptance.unwrap_or(1.0);
        }
        let Some(role) = self.role.as_mut() else {
            return;
        };
        // The answer counts the rejections' time in, as the worker's does.
        let span = now.saturating_duration_since(self.answer_mark);
        let busy = std::mem::take(&mut self.answer_busy);
        self.answer_mark = now;
        let whole = (!span.is_zero()).then(|| (busy.as_secs_f64() / span.as_secs_f64()).min(1.0));
        let occupancy = HopMeasure::answer_occupancy(self.ctl.snapshot().occupancy, whole);
        let elapsed = now.saturating_duration_since(role.updated);
        role.updated = now;
        let (sum, n) = std::mem::take(&mut role.invite_delay);
        let tally = self.ep.take_feedback_tally();
        role.estimator.update(&HopMeasure {
            occupancy,
            invite_delay: (n > 0).then(|| Duration::from_secs_f64(sum / n as f64)),
            rate_arrivals: tally.rate_invites,
            window_arrivals: 0,
            elapsed,
        });
        role.exempt = if role.estimator.at_floor() {
            now.saturating_duration_since(*role.floor_since.get_or_insert(now)) < EXEMPT_FLOOR_GRACE
        } else {
            role.floor_since = None;
            true
        };
        self.ep.set_overload_answer(Some(OverloadAnswer {
            loss_percent: role.estimator.loss_percent(),
            validity_ms: role.validity_ms,
            exempt: role.exempt,
            rate: RateAnswer::of_total(true, role.estimator.rate()),
            window: RateAnswer::Off,
            window_exempt: false,
        }));
    }

    /// What the endpoint reported while handling a message (`msg`) or its timers: next
    /// hops' loss answers go to the hop client; the starts and ends of the branches of calls
    /// DEOC admitted go to DEOC. `t0` is the time the endpoint was given, `t` the handling's.
    fn events(&mut self, t0: Instant, t: Instant, msg: Option<&[u8]>) {
        let mut call_id: Option<Option<Vec<u8>>> = None;
        while let Some(e) = self.ep.poll_event() {
            match e {
                EndpointEvent::Feedback { from, report } => {
                    if let Some(h) = self.hop.as_mut() {
                        h.on_signal(
                            t,
                            Signal::Feedback {
                                from: target_of(from.addr),
                                feedback: feedback_of(report),
                            },
                        );
                    }
                }
                EndpointEvent::BranchStarted { to, .. } => {
                    if let Some(h) = self.window_client() {
                        let target = target_of(to.addr);
                        h.on_signal(t, Signal::Forwarded { target });
                    }
                    if let Some(d) = self.deoc.as_mut()
                        && let Some((target, id)) = d.current.as_ref()
                    {
                        d.pending.insert(id.clone(), (*target, to.addr, t0));
                    }
                }
                EndpointEvent::BranchAnswered { to, delay, .. } => {
                    if let Some(h) = self.window_client() {
                        let target = target_of(to.addr);
                        h.on_signal(t, Signal::Released { target, delay });
                    }
                }
                EndpointEvent::BranchEnded {
                    to,
                    status,
                    timed_out,
                    delay,
                    ..
                } => {
                    if let Some(h) = self.window_client() {
                        h.on_signal(
                            t,
                            Signal::Completed {
                                target: target_of(to.addr),
                                outcome: Outcome::of_branch(status, timed_out),
                                delay,
                            },
                        );
                    }
                    let Some(d) = self.deoc.as_mut() else {
                        continue;
                    };
                    // The call: by the Call-ID of the response that ended the branch, or, for
                    // a timer, by its next hop and the time it was sent.
                    let found = match msg.filter(|b| b.starts_with(b"SIP/2.0 ")) {
                        Some(bytes) => {
                            let id = call_id.get_or_insert_with(|| {
                                Message::parse(bytes, &Limits::DEFAULT)
                                    .ok()
                                    .and_then(|m| m.call_id().ok().map(<[u8]>::to_vec))
                            });
                            id.as_ref().and_then(|id| d.pending.remove(id))
                        }
                        None => {
                            let sent = t0.checked_sub(delay);
                            let key = d
                                .pending
                                .iter()
                                .find(|(_, (_, dest, at))| *dest == to.addr && Some(*at) == sent)
                                .map(|(k, _)| k.clone());
                            key.and_then(|k| d.pending.remove(&k))
                        }
                    };
                    if let Some((target, _, _)) = found {
                        let reply = d.reply(status, timed_out);
                        d.ctl.on_response(t, target, reply);
                    }
                }
                _ => {}
            }
        }
    }

    /// The forward gate's controller if it is seed 004's window (`feedback = "window"`),
    /// which counts the branches itself; the hop-by-hop clients take only answers.
    fn window_client(&mut self) -> Option<&mut Box<dyn Controller>> {
        self.hop
            .as_mut()
            .filter(|h| h.algorithm() == Algorithm::DelayWindow)
    }

    /// The next time `poll` returns by itself: the endpoint's timers (the controller's
    /// intervals close lazily, when there is work).
    fn poll_timeout(&self) -> Option<Instant> {
        let ep = self.ep.poll_timeout();
        match self.deoc.as_ref().and_then(|d| d.ctl.poll_timeout()) {
            Some(d) => Some(ep.map_or(d, |e| e.min(d))),
            None => ep,
        }
    }

    /// The answer of this server's DNS zone to `query`: its `srv` routes' records.
    fn dns_answer(&self, query: &DnsQuery) -> DnsAnswer {
        match self.zone.iter().find(|(name, _)| *name == query.name) {
            Some((_, records)) if query.kind == QueryKind::Srv => DnsAnswer::Records {
                records: DnsRecords::Srv(records.clone()),
                ttl: DNS_TTL,
            },
            _ => DnsAnswer::NotFound { ttl: None },
        }
    }

    fn drain(&mut self, now: Instant, out: &mut Vec<Out>) {
        // Lookups of `srv` routes (only if an answer expired: the zone is in the cache from
        // the start) are answered at once; the requests they held go on.
        while let Some(query) = self.ep.poll_dns_query() {
            let answer = self.dns_answer(&query);
            self.ep
                .handle_dns_response(now, DnsResponse { query, answer });
        }
        loop {
            self.scratch.clear();
            let Some(t) = self.ep.poll_transmit(now, &mut self.scratch) else {
                break;
            };
            // A copy of the exact size: messages in flight take no more memory than their
            // bytes (handing over the scratch buffer itself meant a fresh 1 KiB buffer per
            // message, and more fresh pages for the allocator to clear).
            let size = t.size.min(self.scratch.len());
            let mut bytes = self.scratch[..size].to_vec();
            if let Some(rep) = self.report.as_ref()
                && rep.seq > 0
                && answers_invite(&bytes)
            {
                let report = LoadReport {
                    reporter: rep.me,
                    seq: rep.seq,
                    headroom: rep.headroom_for(target_of(t.destination.addr)),
                };
                stamp(&mut bytes, report);
            }
            out.push((self.addr, t.destination.addr, bytes));
        }
        while self.ep.poll_event().is_some() {}
    }
}

/// The gate's answer for a controller's rejection (as `holdline-server`'s engine builds it).
fn gate_rejection(r: Rejection) -> GateRejection {
    GateRejection {
        status: r.status,
        reason: "Service Unavailable",
        retry_after_secs: r
            .retry_after
            .map(|d| u32::try_from(d.as_millis().div_ceil(1000)).unwrap_or(u32::MAX)),
        text: Some(match r.reason {
            RejectReason::QueueFull => "Overload: queue_full",
            RejectReason::Occupancy => "Overload: occupancy",
            RejectReason::QueueDelay => "Overload: queue_delay",
            RejectReason::DeferTimeout => "Overload: defer_timeout",
            _ => "Overload",
        }),
    }
}

/// A user agent of a UAS node or a UAC population.
struct AgentNode {
    agent: Agent,
    addr: SocketAddr,
    armed: Option<Instant>,
    /// Start and end of its load step (UACs).
    step: Option<(Instant, Instant)>,
    /// Its loop's pause under load (`coalesce_us`; zero: none).
    coalesce: Duration,
    /// While the loop pauses: until when, and the messages that arrived meanwhile.
    paused: Option<Instant>,
    inbox: Vec<(SocketAddr, Vec<u8>)>,
    /// A callee that answers nothing from then on: what reaches it is dropped.
    silent_from: Option<Instant>,
}

/// Messages read in one wake-up from which `holdline load`'s loop pauses (its
/// `COALESCE_MIN`).
const COALESCE_MIN: usize = 16;

impl AgentNode {
    fn new(
        agent: Agent,
        addr: SocketAddr,
        step: Option<(Instant, Instant)>,
        coalesce_us: f64,
    ) -> Self {
        Self {
            agent,
            addr,
            armed: None,
            step,
            coalesce: dur_s(coalesce_us / 1e6),
            paused: None,
            inbox: Vec::new(),
            silent_from: None,
        }
    }

    fn drain(&mut self, out: &mut Vec<Out>) {
        let addr = self.addr;
        self.agent
            .drain_transmits(|peer, bytes| out.push((addr, peer.addr, bytes.to_vec())));
    }

    /// One iteration of `holdline load`'s loop at `now`: what arrived is read and handled,
    /// due timers run, and everything queued leaves (the answers to what was read first);
    /// the loop pauses for `coalesce` when it read [`COALESCE_MIN`] messages or more, and
    /// then returns when the pause ends.
    fn iterate(&mut self, now: Instant, out: &mut Vec<Out>) -> Option<Instant> {
        let read = self.inbox.len();
        for (from, bytes) in std::mem::take(&mut self.inbox) {
            self.agent.handle(now, udp(from), &bytes);
        }
        if self.agent.poll_timeout().is_some_and(|t| t <= now) {
            self.agent.handle_timeout(now);
        }
        self.drain(out);
        self.paused =
            (!self.coalesce.is_zero() && read >= COALESCE_MIN).then(|| now + self.coalesce);
        self.paused
    }
}

enum Node {
    Server(Box<Server>),
    Agents(Vec<AgentNode>),
}

/// One row of the per-second time series, for one server.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SeriesRow {
    /// End of the second, seconds since the start.
    pub t_s: u64,
    /// The server.
    pub server: String,
    /// Calls offered by every UAC in this second.
    pub offered: u64,
    /// 200 OKs within the goodput window received by every UAC in this second.
    pub goodput: u64,
    /// Calls every UAC finished without failure in this second.
    pub calls_ok: u64,
    /// Calls set up end to end in this second: ACKs of 200 OKs that reached a UAS.
    pub completed: u64,
    /// 503s received by every UAC in this second.
    pub r503: u64,
    /// Mean setup delay (first INVITE to 200 OK, ms) of the 200 OKs every UAC received in
    /// this second; `None` when none arrived.
    pub pdd_mean_ms: Option<f64>,
    /// New INVITEs this server's gate admitted in this second.
    pub admitted: u64,
    /// New INVITEs this server rejected in this second.
    pub rejected: u64,
    /// Messages in its main receive queue at the end of the second.
    pub queue: u64,
    /// New INVITEs in its INVITE queue at the end of the second.
    pub invite_queue: u64,
    /// Messages its queues dropped in this second.
    pub queue_drops: u64,
    /// CPU busy share in this second (0–1).
    pub busy: f64,
    /// The occupancy its controller measured over its last interval, if it measures one.
    pub occupancy: Option<f64>,
    /// Its controller's acceptance fraction, if it has one.
    pub acceptance: Option<f64>,
    /// Its worker loop's iterations in this second.
    pub iterations: u64,
    /// Receive calls on its main queue that returned datagrams, in this second.
    pub main_reads: u64,
    /// Receive calls on its INVITE queue that returned datagrams, in this second.
    pub invite_reads: u64,
}

/// What one step of one UAC population measured.
#[derive(Clone, Debug, PartialEq)]
pub struct StepOutcome {
    /// The population.
    pub population: String,
    /// Step index.
    pub step: usize,
    /// Its rate, calls per second.
    pub rate_cps: f64,
    /// Its factor of the scenario's capacity, if given so.
    pub factor: Option<f64>,
    /// Seconds its point covers (the step minus the settle time).
    pub window_s: f64,
    /// Calls offered per second over the window.
    pub offered_cps: f64,
    /// Calls set up end to end per second over the window: the ACK of their 200 OK reached
    /// a UAS (every UAS of the scenario, by the time it arrived: the lab's definition).
    pub throughput_cps: f64,
    /// Calls of this step the UAC finished without failure (200, ACK, BYE and its 200), per
    /// second over the window.
    pub calls_ok_cps: f64,
    /// 200 OKs within the goodput window per second over the window.
    pub goodput_cps: f64,
    /// 503s per second over the window.
    pub rejected_cps: f64,
    /// Other final failures per second over the window (e.g. the 500 a stateful proxy sends
    /// upstream for a lone downstream 503, RFC 3261 §16.7), timeouts included.
    pub failed_other_cps: f64,
    /// INVITE retransmissions per second over the window.
    pub retrans_invite_cps: f64,
    /// PDD median of the step's calls, milliseconds.
    pub pdd_p50_ms: f64,
    /// PDD 90th percentile, milliseconds.
    pub pdd_p90_ms: f64,
    /// The PDD distribution: `(pdd_ms, share of the step's answered calls at or below
    /// it)`, one point per distinct histogram bucket (what [`Latency::cdf`] gives). Where
    /// the distribution has plateaus (calls answered on the steps of the retransmission
    /// schedule) a quantile jumps between steps; comparing shares at a given delay does not.
    ///
    /// [`Latency::cdf`]: holdline_metrics::Latency::cdf
    pub pdd_cdf: Vec<(f64, f64)>,
    /// PDD 99th percentile, milliseconds.
    pub pdd_p99_ms: f64,
    /// PDD mean, milliseconds: unlike a quantile it does not jump from one step of the
    /// retransmission schedule to the next when a few calls move.
    pub pdd_mean_ms: f64,
}

/// Retransmissions by every user agent over the whole run, as `holdline load` reports them
/// (`retrans_invite`, `retrans_200`, `retrans_bye`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retransmitted {
    /// INVITEs sent again by callers (Timer A).
    pub invite: u64,
    /// 2xx responses to INVITEs sent again by callees until their ACK came.
    pub r200: u64,
    /// BYEs sent again by callers (Timer E).
    pub bye: u64,
}

/// Everything one run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct RunOutput {
    /// The run's seed.
    pub seed: u64,
    /// One per UAC step.
    pub steps: Vec<StepOutcome>,
    /// Per-second rows.
    pub series: Vec<SeriesRow>,
    /// Per server: its name and counters.
    pub servers: Vec<(String, ServerCounters)>,
    /// SIP messages sent over links.
    pub messages: u64,
    /// Messages lost or dropped by links.
    pub link_drops: u64,
    /// Calls set up end to end over the whole run (ACKs of 200 OKs that reached a UAS).
    pub completed: u64,
    /// Events processed.
    pub events: u64,
    /// Virtual time simulated.
    pub simulated: Duration,
    /// Invariant violations found (only with [`World::check_invariants`]; see
    /// [`crate::check`]).
    pub violations: Vec<String>,
    /// 200 OKs to REGISTERs the phones received.
    pub registrations: u64,
    /// Distinct bindings (registrar, address-of-record, contact) the phones were
    /// acknowledged.
    pub acked_bindings: u64,
    /// Server crashes (registrars and others).
    pub crashes: u64,
    /// Datagrams lost to partitions.
    pub partition_drops: u64,
    /// Messages dropped by silent callees.
    pub silent_drops: u64,
    /// De-registrations (Expires 0) the phones were acknowledged.
    pub deregistrations: u64,
    /// Acknowledged bindings whose durability check was suspended by a restart without
    /// its store (`new_disk`).
    pub forgiven_bindings: u64,
    /// Retransmissions by the user agents (callers, callees, phones) over the whole run.
    pub retransmitted: Retransmitted,
    /// Per node of user agents (its name): the per-second rows of its agents summed (what
    /// `holdline load` writes per second), each row's `t_ms` the end of its second since
    /// the start of the run.
    pub agent_series: Vec<(String, Vec<holdline_metrics::Row>)>,
    /// Every datagram sent, in order, when the world captured ([`World::capture`]); empty
    /// otherwise.
    pub capture: Vec<Captured>,
}

/// One datagram as a node sent it (see [`World::capture`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Captured {
    /// When it was sent.
    pub at: Instant,
    /// The sender's address.
    pub from: SocketAddr,
    /// Where it was sent.
    pub to: SocketAddr,
    /// The datagram.
    pub bytes: Vec<u8>,
}

/// The seed of run `run` of a scenario seeded `seed` (SplitMix64 of both).
pub fn run_seed(seed: u64, run: u64) -> u64 {
    let mut z = seed ^ run.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A scenario set up for one run.
pub struct World {
    now: Instant,
    end: Instant,
    load_end: Instant,
    settle: Duration,
    nodes: Vec<Node>,
    names: Vec<String>,
    links: Vec<Option<Link>>,
    link_cfgs: Vec<holdline_netmodel::LinkConfig>,
    /// Per link: the probability that a delivered datagram arrives twice.
    link_dup: Vec<f64>,
    link_rng: Rng,
    queue: EventQueue<Ev>,
    out: Vec<Out>,
    /// Scratch: what a server step sends, with when.
    releases: Vec<(Instant, Vec<Out>)>,
    messages: u64,
    link_drops: u64,
    events: u64,
    seed: u64,
    series: Vec<SeriesRow>,
    /// Totals at the previous sample: network (see `net_totals`) and per
    /// server counters.
    last_net: [u64; 7],
    last_servers: Vec<ServerCounters>,
    /// Check the invariants ([`World::check_invariants`]).
    check: bool,
    /// Every datagram sent, when capturing ([`World::capture`]).
    capture: Option<Vec<Captured>>,
    /// How far past the run's end the endpoints are taken before the leak check.
    leak_horizon: Duration,
    violations: Vec<String>,
    /// The first phone node; per phone node (from it), its registrar's node.
    phone_first: usize,
    phone_reg: Vec<usize>,
    /// REGISTERs the phones sent: (Call-ID, CSeq) → what they ask for.
    reg_sent: std::collections::BTreeMap<(Vec<u8>, u32), SentRegister>,
    /// The bindings the phones were acknowledged: (registrar, AOR, contact) → the latest
    /// acknowledged version.
    acked: std::collections::BTreeMap<(usize, Vec<u8>, Vec<u8>), Acked>,
    /// 200 OKs to REGISTERs the phones received.
    registrations: u64,
    /// Server crashes.
    crashes: u64,
    /// Partitions: (from, until, node, other node or every link of `node`).
    partitions: Vec<(Instant, Instant, usize, Option<usize>)>,
    partition_drops: u64,
    silent_drops: u64,
    deregistrations: u64,
    forgiven_bindings: u64,
}

/// The latest acknowledged version of a binding: the registrar must hold it (or a later
/// one) until `until`.
///
/// `until` is in the registrar's own clock, with the skew it had [`BINDING_SLACK`] before
/// the REGISTER's first transmission (the earliest time its worker may date it with). A removal (`removed`: an acknowledged Expires 0) must stay
/// removed: the registrar may not hold that binding again in that version or an older one
/// (same Call-ID, lower CSeq); a new registration (another Call-ID) may add it again.
///
/// Once the phone *sent* a removal of the binding (a later CSeq of the same Call-ID with
/// Expires 0: `removal_sent`), the acknowledged binding is no longer due: the registrar may
/// have applied the removal (and committed it) even if its 200 never reached the phone.
#[derive(Clone, Debug)]
struct Acked {
    until: Instant,
    call_id: Vec<u8>,
    cseq: u32,
    removed: bool,
    removal_sent: bool,
}

/// A REGISTER a phone sent: its first transmission, address-of-record, contact and Expires.
struct SentRegister {
    call_id: Vec<u8>,
    cseq: u32,
    /// In the registrar's clock.
    first_sent: Instant,
    aor: Vec<u8>,
    contact: Vec<u8>,
    expires: u32,
}

/// How much earlier than a phone's REGISTER left the registrar may date the binding (the
/// worker gives the endpoint the time its loop iteration started, which can be before the
/// datagram arrived): an acknowledged binding is due until its expiry minus this.
const BINDING_SLACK: Duration = Duration::from_secs(5);

/// The value of header `name` of `bytes` as a URI without its angle brackets.
fn uri_of(bytes: &[u8], name: &[u8]) -> Option<Vec<u8>> {
    let (_, _, v) = header_value(bytes, name)?;
    let v = match v.iter().position(|&b| b == b'<') {
        Some(i) => {
            let rest = &v[i + 1..];
            &rest[..rest.iter().position(|&b| b == b'>')?]
        }
        None => v,
    };
    Some(v.to_vec())
}

/// The Call-ID and CSeq number of a message.
fn call_and_cseq(bytes: &[u8]) -> Option<(Vec<u8>, u32)> {
    let (_, _, id) = header_value(bytes, b"Call-ID")?;
    let (_, _, cseq) = header_value(bytes, b"CSeq")?;
    let n = cseq.split(|&b| b == b' ').next()?;
    let n = std::str::from_utf8(n).ok()?.parse().ok()?;
    Some((id.to_vec(), n))
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("now", &self.now)
            .field("nodes", &self.names)
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

/// The address-of-record of a To URI as the checker keys it (without `sip:`).
fn aor_of(to: &[u8]) -> Vec<u8> {
    to.strip_prefix(b"sip:").unwrap_or(to).to_vec()
}

/// Whether `bytes` is a 503 to a request that only exists within an admitted call (BYE,
/// CANCEL, PRACK, UPDATE, INFO): no callee of the simulator answers those with a 503, so a
/// server sending one rejected a request of an admitted call for load.
fn in_dialog_503(bytes: &[u8]) -> bool {
    bytes.starts_with(b"SIP/2.0 503 ")
        && header_value(bytes, b"CSeq").is_some_and(|(_, _, v)| {
            [&b" BYE"[..], b" CANCEL", b" PRACK", b" UPDATE", b" INFO"]
                .iter()
                .any(|m| v.ends_with(m))
        })
}

/// Whether a controller's observable outputs are finite and within their bounds: its
/// acceptance (the admit probability) and measured occupancy, when it has them, in [0, 1].
fn controller_in_bounds(snap: &holdline_overload::Snapshot) -> bool {
    let unit = |v: Option<f64>| v.is_none_or(|v| v.is_finite() && (0.0..=1.0).contains(&v));
    unit(snap.acceptance) && unit(snap.occupancy)
}

/// A time of a server's clock `skew` ahead, in the simulation's.
fn global(t: Instant, skew: Duration) -> Instant {
    t.checked_sub(skew).unwrap_or(Instant::ZERO)
}

fn dur_s(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

impl World {
    /// Sets up run `run` of `sc` (seed [`run_seed`]`(sc.seed, run)`).
    pub fn new(sc: &Scenario, run: u64) -> Result<Self, SimError> {
        let seed = run_seed(sc.seed, run);
        let mut master = Rng::seed_from_u64(seed);
        let names: Vec<String> = sc.node_names().iter().map(|s| (*s).to_owned()).collect();
        let n = names.len();
        let index = |name: &str| names.iter().position(|x| x == name);
        let load_end = Instant::ZERO + dur_s(sc.duration_s);
        let end = load_end + dur_s(sc.drain_s);
        let mut nodes = Vec::with_capacity(n);
        let gate_key = master.next_u64();
        // DEOC's targets: each domain's egress edge, by node index.
        let egress: std::collections::HashMap<String, u64> = sc
            .egress_edges()
            .into_iter()
            .filter_map(|(d, e)| index(&e).map(|i| (d, i as u64)))
            .collect();
        for (i, s) in sc.servers.iter().enumerate() {
            let err = |message: String| SimError::Controller {
                server: s.name.clone(),
                message,
            };
            let ctl_cfg = s.controller().map_err(err)?;
            let ctl = ctl_cfg
                .build(Instant::ZERO, Rng::seed_from_u64(master.next_u64()))
                .map_err(|e| err(e.to_string()))?;
            let addr = node_addr(i, 0);
            let mut p = ProxyConfig::default();
            p.listen = vec![ListenAddr {
                transport: Transport::Udp,
                addr,
            }];
            p.relay = RelayPolicy::Open;
            p.branch_seed = master.next_u64();
            p.gate_key = gate_key;
            let mut zone = Vec::new();
            for (ri, r) in sc
                .routes
                .iter()
                .enumerate()
                .filter(|(_, r)| r.server == s.name)
            {
                if !r.srv.is_empty() {
                    // A DNS route to a name of its own, whose SRV records name the nodes by
                    // address: the endpoint orders them (RFC 2782) and fails over between
                    // them per request, as it does for names a real DNS resolves.
                    let name = format!("route{ri}.sim");
                    let target: DnsTarget = format!("sip:{name};transport=udp")
                        .parse()
                        .map_err(|e| err(format!("route {ri}: {e}")))?;
                    let mut records = Vec::new();
                    for t in &r.srv {
                        let to = index(&t.to).ok_or_else(|| err(format!("route to `{}`", t.to)))?;
                        let addr = node_addr(to, 0);
                        records.push(SrvRecord {
                            priority: t.priority,
                            weight: t.weight,
                            port: addr.port(),
                            target: addr.ip().to_string(),
                        });
                    }
                    p.dns_routes.push(DnsRoute {
                        domain: r.domain.clone(),
                        target,
                        edge: None,
                    });
                    zone.push((format!("_sip._udp.{name}"), records));
                } else if r.to_any.is_empty() {
                    let to = index(&r.to).ok_or_else(|| err(format!("route to `{}`", r.to)))?;
                    p.static_routes.push(StaticRoute {
                        domain: r.domain.clone(),
                        next_hop: node_addr(to, 0),
                        transport: Transport::Udp,
                        stateless: false,
                        edge: None,
                    });
                } else {
                    let mut targets = Vec::new();
                    for t in &r.to_any {
                        let to = index(t).ok_or_else(|| err(format!("route to `{t}`")))?;
                        targets.push(HashTarget::new(node_addr(to, 0), Transport::Udp, 1.0));
                    }
                    p.hash_routes.push(HashRoute {
                        domain: r.domain.clone(),
                        failover: r.failover,
                        targets,
                        edge: None,
                        pick: if r.round_robin() {
                            holdline_proto::Pick::RoundRobin
                        } else {
                            holdline_proto::Pick::Hash
                        },
                    });
                }
            }
            let deoc = if s.edge == "deoc" {
                let cfg = s.deoc.config().map_err(err)?;
                let probe = cfg.signal != DeocSignal::Binary;
                let learn = s.deoc.learns_targets().map_err(err)?;
                p.branch_events = true;
                p.learn_edges = learn;
                Some(Box::new(EdgeDeoc {
                    ctl: Deoc::new(cfg, Instant::ZERO).map_err(|e| err(e.to_string()))?,
                    domains: egress.clone(),
                    me: i as u64,
                    count_500: s.deoc.counts_500(),
                    pending: std::collections::HashMap::new(),
                    current: None,
                    probe,
                    learn,
                }))
            } else {
                None
            };
            let (hop, role) = if s.feedback == "loss" || s.feedback == "rate" {
                let (algo, accept) = if s.feedback == "rate" {
                    (OcAlgo::Rate, Accept::RATE)
                } else {
                    (OcAlgo::Loss, Accept::LOSS)
                };
                p.overload_offer = Some(OcOffer::new(&[algo]));
                let client = HopClientConfig {
                    accept,
                    ..HopClientConfig::default()
                }
                .build(Instant::ZERO, Rng::seed_from_u64(master.next_u64()))
                .map_err(|e| err(e.to_string()))?;
                let estimator =
                    HopServer::new(HopServerConfig::default()).map_err(|e| err(e.to_string()))?;
                (
                    Some(client),
                    Some(HopRole {
                        estimator,
                        validity_ms: s.feedback_validity_ms,
                        updated: Instant::ZERO,
                        floor_since: None,
                        invite_delay: (0.0, 0),
                        exempt: true,
                    }),
                )
            } else if s.feedback == "window" {
                // Seed 004's window at the forward gate, fed by the branches' starts, first
                // responses and ends, as the worker feeds it.
                p.branch_events = true;
                let window = DelayWindowConfig::default()
                    .build(Instant::ZERO, Rng::seed_from_u64(master.next_u64()))
                    .map_err(|e| err(e.to_string()))?;
                (Some(window), None)
            } else {
                (None, None)
            };
            // OCC's target occupancy: the reported headroom brings the load to it.
            let target = match &ctl_cfg {
                ControllerConfig::Occupancy(c) => c.target_occupancy,
                _ => 0.9,
            };
            // Fairness measures over its own interval (1 s: a flow of a few calls per second
            // needs that long to be measured), whatever the local controller's.
            let fair = if s.local_fairness == "per-upstream" {
                Some(
                    FairShare::new(FairShareConfig::default(), Instant::ZERO)
                        .map_err(|e| err(e.to_string()))?,
                )
            } else {
                None
            };
            let report = s.load_report.then(|| {
                Box::new(Reporter {
                    me: i as u64,
                    target,
                    acceptance: 1.0,
                    seq: 0,
                    headroom: 1.0,
                    per_upstream: std::collections::HashMap::new(),
                })
            });
            let invite_queue = s.has_invite_queue();
            let budget = if invite_queue {
                Some(
                    RejectionBudget::new(
                        BudgetConfig {
                            share: s.rejection_budget,
                            ..BudgetConfig::default()
                        },
                        Instant::ZERO,
                    )
                    .map_err(|e| err(e.to_string()))?,
                )
            } else {
                None
            };
            let us = |v: f64| Duration::from_nanos((v * 1000.0).round() as u64);
            p.dns.min_ttl = DNS_TTL;
            p.dns.max_ttl = DNS_TTL;
            // A registrar: its domain through the location service, over a store whose
            // commits the simulator completes. (Its own generator: the master's draws, and
            // so every other node's, stay as they are without registrars.)
            let reg = sc.registrars.iter().find(|r| r.server == s.name).map(|r| {
                p.domains = vec![r.domain.clone()];
                Box::new(RegRole {
                    store: Arc::new(SimStore::default()),
                    commit_min: dur_s(r.commit_min_ms / 1000.0),
                    commit_max: dur_s(r.commit_max_ms / 1000.0),
                    crash_at: r.crash_at_s.map(|t| Instant::ZERO + dur_s(t)),
                    restart_after: dur_s(r.restart_after_s),
                    inflight_survives: r.inflight_survives,
                    lose_store: false,
                    rng: Rng::seed_from_u64(seed ^ 0x5245_4749_5354_4152 ^ i as u64),
                })
            });
            let store: Arc<dyn LocationStore> = match &reg {
                Some(r) => r.store.clone(),
                None => Arc::new(MemoryLocationStore::new()),
            };
            let restart_cfg = Box::new(RestartCfg {
                config: p.clone(),
                ctl_cfg: ctl_cfg.clone(),
                rng: Rng::seed_from_u64(seed ^ 0x5245_5354_4152_5453 ^ i as u64),
            });
            let mut ep = Endpoint::new(p, store);
            preload_zone(&mut ep, &zone, Instant::ZERO);
            nodes.push(Node::Server(Box::new(Server {
                name: s.name.clone(),
                ep,
                ctl,
                budget,
                addr,
                main: RecvQueue::new(s.recv_buffer.unwrap_or(s.queue), s.recv_buffer.is_some()),
                invites: RecvQueue::new(
                    s.invite_recv_buffer
                        .unwrap_or_else(|| s.invite_queue_bound.unwrap_or(s.queue)),
                    s.invite_recv_buffer.is_some(),
                ),
                early: RecvQueue::new(s.recv_buffer.unwrap_or(s.queue), s.recv_buffer.is_some()),
                invite_queue,
                paper: s.discipline == "paper",
                wakeup: us(s.wakeup_us),
                waking: false,
                invite_max_wait: (invite_queue && s.local != "none")
                    .then(|| dur_s(s.invite_max_wait_ms / 1000.0)),
                service: us(s.service_us),
                invite_cost: us(s.invite_us.unwrap_or(s.service_us)),
                reject_cost: us(s.reject_us),
                recv_cost: us(s.recv_us),
                send_cost: us(s.send_us),
                wake_cost: us(s.wake_us),
                batch: s.batch,
                read_batches: s.read_batches,
                iter: None,
                pending_reads: 0,
                short_batch: false,
                main_event: false,
                invite_event: false,
                invite_ready: false,
                admit_all: false,
                sends: Vec::new(),
                armed: None,
                busy_mark: Instant::ZERO,
                handling: Duration::ZERO,
                rejecting: Duration::ZERO,
                rejected_msgs: 0,
                answer_busy: Duration::ZERO,
                answer_mark: Instant::ZERO,
                datagrams: 0,
                datagram_mark: 0,
                service_ns: 0.0,
                c: ServerCounters::default(),
                scratch: Vec::with_capacity(2048),
                deoc,
                hop,
                role,
                fair,
                report,
                zone,
                epoch: 0,
                down: false,
                reg,
                restart_cfg,
                skew: Duration::ZERO,
                jumps: Vec::new(),
            })));
        }
        let goodput_window = dur_s(sc.goodput_window_s);
        for (j, u) in sc.uas.iter().enumerate() {
            let i = sc.servers.len() + j;
            let addr = node_addr(i, 0);
            let mut cfg = AgentConfig::new(Transport::Udp, Vec::new());
            cfg.uas_addr = Some(addr);
            cfg.uas = Some(UasConfig {
                ring_delay: dur_s(u.ring_ms / 1000.0),
                answer_delay: dur_s(u.answer_ms / 1000.0),
                mix: vec![(u.status, 1.0)],
                ..UasConfig::default()
            });
            cfg.seed = master.next_u64();
            cfg.goodput_window = goodput_window;
            cfg.timers = Timers::default();
            let agent = Agent::new(cfg, Instant::ZERO).map_err(|e| SimError::Agent {
                node: u.name.clone(),
                message: e.to_string(),
            })?;
            let mut node = AgentNode::new(agent, addr, None, u.coalesce_us);
            node.silent_from = u.silent_from_s.map(|t| Instant::ZERO + dur_s(t));
            nodes.push(Node::Agents(vec![node]));
        }
        for (j, u) in sc.uac.iter().enumerate() {
            let i = sc.servers.len() + sc.uas.len() + j;
            let err = |message: String| SimError::Agent {
                node: u.name.clone(),
                message,
            };
            let target = index(&u.target).ok_or_else(|| err("unknown target".into()))?;
            let to = UserPattern::parse(&format!("user{{0..999}}@{}", u.domain))
                .map_err(|e| err(e.to_string()))?;
            let mut agents = Vec::new();
            for (k, step) in u.steps.iter().enumerate() {
                let start = Instant::ZERO + dur_s(step.at_s);
                let stop = u
                    .steps
                    .get(k + 1)
                    .map_or(load_end, |s| Instant::ZERO + dur_s(s.at_s));
                let rate = sc.step_rate(step);
                // A ramp over this step's interval: to the next step's rate at its start.
                let rate_end = u.ramp_end(k).map(|next| sc.step_rate(next));
                let addr = node_addr(i, k);
                let mut cfg = AgentConfig::new(Transport::Udp, vec![addr]);
                cfg.seed = master.next_u64();
                cfg.goodput_window = goodput_window;
                // A step without calls still needs a valid rate: it gets a zero-length run.
                let (rate, rate_end, duration) = if rate > 0.0 || rate_end.is_some_and(|r| r > 0.0)
                {
                    (rate, rate_end, stop - start)
                } else {
                    (1.0, None, Duration::ZERO)
                };
                cfg.uac = Some(UacConfig {
                    target: node_addr(target, 0),
                    to: to.clone(),
                    from_user: "caller".into(),
                    arrivals: if u.arrivals == "constant" {
                        ArrivalKind::Constant
                    } else {
                        ArrivalKind::Poisson
                    },
                    rate,
                    rate_end,
                    calls: if duration.is_zero() { Some(0) } else { None },
                    duration: Some(duration),
                    hold: if u.hold == "exp" {
                        Hold::Exp(dur_s(u.hold_ms / 1000.0))
                    } else {
                        Hold::Fixed(dur_s(u.hold_ms / 1000.0))
                    },
                    cancel_after: u.cancel_after_ms.map(|ms| dur_s(ms / 1000.0)),
                    max_active: None,
                    uri_transport: false,
                    hops: holdline_agent::Hops::default(),
                });
                let agent = Agent::new(cfg, start).map_err(|e| err(e.to_string()))?;
                agents.push(AgentNode::new(
                    agent,
                    addr,
                    Some((start, stop)),
                    u.coalesce_us,
                ));
            }
            nodes.push(Node::Agents(agents));
        }
        // Links: the default everywhere, entries for named pairs (both directions).
        let default = sc.default_link.to_config().map_err(SimError::Link)?;
        let mut link_cfgs = vec![default; n * n];
        let mut link_dup = vec![sc.default_link.duplicate; n * n];
        for l in &sc.links {
            let cfg = l.spec.to_config().map_err(SimError::Link)?;
            if let (Some(a), Some(b)) = (index(&l.between[0]), index(&l.between[1])) {
                link_cfgs[a * n + b] = cfg;
                link_cfgs[b * n + a] = cfg;
                link_dup[a * n + b] = l.spec.duplicate;
                link_dup[b * n + a] = l.spec.duplicate;
            }
        }
        let link_rng = Rng::seed_from_u64(master.next_u64());
        // Phones: `holdline-agent`'s registration role, one agent per population, each user
        // with its own contact (`sip:userK@ADDR`); they refresh until the load phase ends
        // and come back after a timeout or a Retry-After, as phones do.
        let phone_first = nodes.len();
        let mut phone_reg = Vec::new();
        for (j, ph) in sc.phones.iter().enumerate() {
            let i = phone_first + j;
            let err = |message: String| SimError::Agent {
                node: ph.name.clone(),
                message,
            };
            let r = sc
                .registrars
                .iter()
                .find(|r| r.server == ph.registrar)
                .ok_or_else(|| err("no registrar".into()))?;
            let reg = index(&ph.registrar).ok_or_else(|| err("unknown registrar".into()))?;
            phone_reg.push(reg);
            let addr = node_addr(i, 0);
            let mut cfg = AgentConfig::new(Transport::Udp, vec![addr]);
            cfg.seed = master.next_u64();
            cfg.register = Some(RegisterConfig {
                registrar: node_addr(reg, 0),
                users: UserPattern::parse(&format!("user{{0..{}}}@{}", ph.users - 1, r.domain))
                    .map_err(|e| err(e.to_string()))?,
                count: ph.users,
                rate: ph.rate,
                arrivals: ArrivalKind::Poisson,
                expires: ph.expires,
                refresh: ph.refresh_s.map(dur_s),
                duration: Some(load_end - Instant::ZERO),
                contact: None,
                retry_after_cap: Some(Duration::from_secs(5)),
                retry_timeout_base: Some(Duration::from_secs(2)),
                hops: holdline_agent::Hops::default(),
                deregister_every: ph.deregister_every,
            });
            let agent = Agent::new(cfg, Instant::ZERO).map_err(|e| err(e.to_string()))?;
            nodes.push(Node::Agents(vec![AgentNode::new(agent, addr, None, 0.0)]));
        }
        let servers = sc.servers.len();
        let mut w = Self {
            now: Instant::ZERO,
            end,
            load_end,
            settle: dur_s(sc.settle_s),
            nodes,
            names,
            links: (0..n * n).map(|_| None).collect(),
            link_cfgs,
            link_dup,
            link_rng,
            queue: EventQueue::default(),
            out: Vec::new(),
            releases: Vec::new(),
            messages: 0,
            link_drops: 0,
            events: 0,
            seed,
            series: Vec::new(),
            last_net: [0; 7],
            last_servers: vec![ServerCounters::default(); servers],
            check: false,
            capture: None,
            leak_horizon: Duration::from_secs(400),
            violations: Vec::new(),
            phone_first,
            phone_reg,
            reg_sent: std::collections::BTreeMap::new(),
            acked: std::collections::BTreeMap::new(),
            registrations: 0,
            crashes: 0,
            partitions: Vec::new(),
            partition_drops: 0,
            silent_drops: 0,
            deregistrations: 0,
            forgiven_bindings: 0,
        };
        let all = sc.node_names();
        let idx = |n: &str| all.iter().position(|x| *x == n);
        for p in &sc.partitions {
            let (a, b) = match (&p.between, &p.node) {
                (Some([a, b]), _) => (idx(a), Some(idx(b))),
                (None, Some(n)) => (idx(n), None),
                (None, None) => (None, None),
            };
            if let Some(a) = a {
                w.partitions.push((
                    Instant::ZERO + dur_s(p.from_s),
                    Instant::ZERO + dur_s(p.until_s),
                    a,
                    b.flatten(),
                ));
            }
        }
        for c in &sc.crashes {
            if let Some(node) = idx(&c.server) {
                w.queue.push(
                    Instant::ZERO + dur_s(c.at_s),
                    Ev::Crash {
                        node,
                        restart_after: dur_s(c.restart_after_s),
                        new_disk: c.new_disk,
                    },
                );
            }
        }
        for j in &sc.clock_jumps {
            if let Some(node) = idx(&j.server) {
                w.queue.push(
                    Instant::ZERO + dur_s(j.at_s),
                    Ev::ClockJump {
                        node,
                        by: dur_s(j.jump_s),
                    },
                );
            }
        }
        for i in 0..servers {
            if let Node::Server(s) = &w.nodes[i]
                && let Some(r) = s.reg.as_ref()
                && let Some(t) = r.crash_at
            {
                let restart_after = r.restart_after;
                w.queue.push(
                    t,
                    Ev::Crash {
                        node: i,
                        restart_after,
                        new_disk: false,
                    },
                );
            }
        }
        for i in 0..n {
            let subs = match &w.nodes[i] {
                Node::Server(_) => 1,
                Node::Agents(a) => a.len(),
            };
            for s in 0..subs {
                w.arm(i, s);
            }
        }
        w.queue.push(Instant::from_secs(1), Ev::Sample);
        Ok(w)
    }

    /// Schedules a wake-up for node `i`, sub-agent `s`, when its next timer is earlier than
    /// the one already armed.
    fn arm(&mut self, i: usize, s: usize) {
        let (next, armed) = match &mut self.nodes[i] {
            // A worker in the middle of an iteration looks at its timers when it ends; a
            // crashed one has none.
            Node::Server(srv) if srv.iter.is_some() || srv.waking || srv.down => return,
            Node::Server(srv) => (
                srv.poll_timeout().map(|t| global(t, srv.skew)),
                &mut srv.armed,
            ),
            Node::Agents(a) => match a.get_mut(s) {
                // A pausing loop looks at its timers when the pause ends.
                Some(a) if a.paused.is_some() => return,
                Some(a) => (a.agent.poll_timeout(), &mut a.armed),
                None => return,
            },
        };
        if let Some(t) = next
            && armed.is_none_or(|a| t < a)
        {
            let t = t.max(self.now);
            *armed = Some(t);
            self.queue.push(t, Ev::Wake { node: i, sub: s });
        }
    }

    /// Sends what nodes queued in `out`, from node `from`.
    fn flush(&mut self, from: usize) {
        let n = self.names.len();
        let mut out = std::mem::take(&mut self.out);
        for (src, dst, bytes) in out.drain(..) {
            self.messages += 1;
            if let Some(c) = self.capture.as_mut() {
                c.push(Captured {
                    at: self.now,
                    from: src,
                    to: dst,
                    bytes: bytes.clone(),
                });
            }
            if from >= self.phone_first {
                self.phone_sent(from, &bytes);
            }
            let Some((to, sub)) = decode(dst).filter(|(to, _)| *to < n) else {
                self.link_drops += 1;
                continue;
            };
            if self.check && matches!(self.nodes[from], Node::Server(_)) && in_dialog_503(&bytes) {
                self.violations.push(format!(
                    "t={:.6} s: server {} rejected a request of an admitted call with a 503 (in-dialog): {}",
                    self.now.as_nanos() as f64 / 1e9,
                    self.names[from],
                    String::from_utf8_lossy(&bytes).lines().find(|l| l.starts_with("CSeq")).unwrap_or("")
                ));
            }
            if self.check && to == from && matches!(self.nodes[from], Node::Server(_)) {
                self.violations.push(format!(
                    "t={:.6} s: server {} sent to its own address {dst}: {}",
                    self.now.as_nanos() as f64 / 1e9,
                    self.names[from],
                    String::from_utf8_lossy(&bytes).lines().next().unwrap_or("")
                ));
            }
            if self.partitioned(from, to) {
                self.partition_drops += 1;
                self.link_drops += 1;
                continue;
            }
            let k = from * n + to;
            if self.links[k].is_none() {
                let rng = Rng::seed_from_u64(self.link_rng.next_u64() ^ k as u64);
                match Link::new(self.link_cfgs[k], rng) {
                    Ok(l) => self.links[k] = Some(l),
                    Err(_) => {
                        self.link_drops += 1;
                        continue;
                    }
                }
            }
            let fate = match self.links[k].as_mut() {
                Some(l) => l.send(self.now, bytes.len()),
                None => Fate::Lost,
            };
            match fate {
                Fate::Deliver(at) => {
                    // Drawn only on links that duplicate: other scenarios' streams stay.
                    let dup = self.link_dup[k];
                    if dup > 0.0
                        && ((self.link_rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < dup
                    {
                        let later = Duration::from_nanos(self.link_rng.next_u64() % 1_000_000);
                        self.queue.push(
                            at + later,
                            Ev::Arrive {
                                to,
                                sub,
                                from: src,
                                bytes: bytes.clone(),
                            },
                        );
                    }
                    self.queue.push(
                        at,
                        Ev::Arrive {
                            to,
                            sub,
                            from: src,
                            bytes,
                        },
                    );
                }
                Fate::Lost | Fate::QueueFull | Fate::RandomDrop => self.link_drops += 1,
            }
        }
        self.out = out;
    }

    /// Whether a partition cuts the link from node `a` to node `b` now.
    fn partitioned(&self, a: usize, b: usize) -> bool {
        let now = self.now;
        self.partitions.iter().any(|&(from, until, x, y)| {
            from <= now
                && now < until
                && match y {
                    Some(y) => (x == a && y == b) || (x == b && y == a),
                    None => x == a || x == b,
                }
        })
    }

    /// Checks the invariants of [`crate::check`] during and after the run: a server never
    /// sends to one of its own addresses; after the run, with each server's endpoint taken
    /// past every timer it has (RFC timers, Timer C), no transaction, call, pending branch,
    /// held response or timer is left. Violations go to [`RunOutput::violations`].
    #[must_use]
    pub fn check_invariants(mut self) -> Self {
        self.check = true;
        self
    }

    /// Records every datagram a node sends (its time, addresses and bytes) in
    /// [`RunOutput::capture`], as a packet capture on the sender's interface would: before
    /// the link and the receiver's queues decide whether it arrives. `holdline sim run
    /// --pcap` writes it as a libpcap file ([`crate::report::pcap`]).
    #[must_use]
    pub fn capture(mut self) -> Self {
        self.capture = Some(Vec::new());
        self
    }

    /// How far past the run's end the leak check takes the endpoints (400 s: past Timer C
    /// and every RFC 3261 timer). A shorter horizon finds what is still legitimately alive:
    /// the checker's own test uses it to show that the check sees the endpoints' state.
    #[must_use]
    pub fn leak_horizon(mut self, horizon: Duration) -> Self {
        self.leak_horizon = horizon;
        self
    }

    /// Every registrar's crash also loses its store's committed contents (a restart without
    /// its store: a new disk). Acknowledged bindings are then lost by design: the checker's
    /// own test uses it to show that the durable-binding check reads the restarted
    /// registrar's real store.
    #[must_use]
    pub fn lose_stores_on_crash(mut self) -> Self {
        for n in &mut self.nodes {
            if let Node::Server(s) = n
                && let Some(r) = s.reg.as_mut()
            {
                r.lose_store = true;
            }
        }
        self
    }

    /// Runs to the end; `progress` is called once per simulated second with it.
    pub fn run(mut self, mut progress: impl FnMut(u64)) -> RunOutput {
        while let Some(at) = self.queue.peek_time() {
            if at > self.end {
                break;
            }
            let Some((at, ev)) = self.queue.pop() else {
                break;
            };
            self.now = self.now.max(at);
            self.events += 1;
            match ev {
                Ev::Arrive {
                    to,
                    sub,
                    from,
                    bytes,
                } => self.arrive(to, sub, from, bytes),
                Ev::Done { node, epoch } => {
                    if self.epoch_of(node) == Some(epoch) {
                        self.server_step(node);
                    }
                }
                Ev::Send { node, out, epoch } => {
                    if self.epoch_of(node) == Some(epoch) {
                        self.out = out;
                        self.flush(node);
                    }
                }
                Ev::Commit { node, batch, epoch } => self.committed(node, batch, epoch),
                Ev::Crash {
                    node,
                    restart_after,
                    new_disk,
                } => self.crash(node, restart_after, new_disk),
                Ev::Restart { node, new_disk } => self.restart(node, new_disk),
                Ev::ClockJump { node, by } => {
                    if let Node::Server(s) = &mut self.nodes[node] {
                        s.skew += by;
                        s.jumps.push((self.now, s.skew));
                        // Its timers are due earlier now.
                        self.arm(node, 0);
                    }
                }
                Ev::Wake { node, sub } => self.wake(node, sub),
                Ev::Resume { node, sub } => self.resume(node, sub),
                Ev::Sample => {
                    self.sample();
                    let t = self.now.as_nanos() / 1_000_000_000;
                    progress(t);
                    self.queue
                        .push(self.now + Duration::from_secs(1), Ev::Sample);
                }
            }
        }
        self.finish()
    }

    /// The incarnation of server `node` while it is up.
    fn epoch_of(&self, node: usize) -> Option<u32> {
        match &self.nodes[node] {
            Node::Server(s) if !s.down => Some(s.epoch),
            _ => None,
        }
    }

    /// Runs server `node`'s worker loop at the current time (see [`Server::step`]).
    fn server_step(&mut self, node: usize) {
        let now = self.now;
        let mut releases = std::mem::take(&mut self.releases);
        let (next, epoch, skew) = match &mut self.nodes[node] {
            Node::Server(s) if !s.down => (s.step(now + s.skew, &mut releases), s.epoch, s.skew),
            _ => return,
        };
        // The server's times are in its own clock.
        let next = next.map(|t| global(t, skew));
        for (t, out) in releases.drain(..) {
            let t = global(t, skew);
            if t <= now {
                self.out.extend(out);
                self.flush(node);
            } else {
                self.queue.push(t, Ev::Send { node, out, epoch });
            }
        }
        self.releases = releases;
        if let Some(t) = next {
            self.queue.push(t, Ev::Done { node, epoch });
        }
        self.writer(node);
        self.arm(node, 0);
    }

    /// The store writer of registrar `node`: starts the commit asked for, if none is under
    /// way, completing after a drawn latency.
    fn writer(&mut self, node: usize) {
        let Node::Server(s) = &mut self.nodes[node] else {
            return;
        };
        let epoch = s.epoch;
        let Some(r) = s.reg.as_mut() else { return };
        if let Some(batch) = r.store.start_batch() {
            let span = r.commit_max.saturating_sub(r.commit_min);
            let lat = r.commit_min + span.mul_f64(r.rng.next_f64());
            self.queue
                .push(self.now + lat, Ev::Commit { node, batch, epoch });
        }
    }

    /// Batch `batch` of registrar `node`'s store committed: the held responses it releases
    /// go out at the worker's next iteration (the store's commit listener wakes it).
    fn committed(&mut self, node: usize, batch: u64, epoch: u32) {
        if self.epoch_of(node) != Some(epoch) {
            return;
        }
        if let Node::Server(s) = &mut self.nodes[node]
            && let Some(r) = s.reg.as_ref()
        {
            r.store.complete_batch(batch);
        }
        self.writer(node);
        self.arm(node, 0);
    }

    /// Server `node` crashes now; it restarts after `after`. A registrar's crash with
    /// `new_disk` loses its store: the bindings acknowledged until now are no longer due
    /// (the durable-binding invariant is suspended for them).
    fn crash(&mut self, node: usize, after: Duration, new_disk: bool) {
        let Node::Server(s) = &mut self.nodes[node] else {
            return;
        };
        if s.down {
            return;
        }
        s.crash(new_disk);
        self.crashes += 1;
        self.queue
            .push(self.now + after, Ev::Restart { node, new_disk });
    }

    /// Server `node` starts again; a registrar's bindings are loaded from its store: every
    /// binding a phone was acknowledged must be among them — unless the store was lost
    /// (`new_disk`): then the bindings acknowledged before this restart (the last 200s may
    /// have reached the phones after the crash) are no longer checked.
    fn restart(&mut self, node: usize, new_disk: bool) {
        if new_disk {
            let before = self.acked.len();
            self.acked.retain(|(reg, _, _), _| *reg != node);
            self.forgiven_bindings += (before - self.acked.len()) as u64;
        }
        let now = self.now;
        let Node::Server(s) = &mut self.nodes[node] else {
            return;
        };
        if !s.down {
            return;
        }
        s.restart(now + s.skew);
        if self.check {
            self.check_acked(Some(node), "after its restart");
        }
        self.arm(node, 0);
    }

    /// Every binding a phone was acknowledged (of registrar `only`, or of all), due until
    /// later than now, is in its registrar's store, at least until it is due.
    fn check_acked(&mut self, only: Option<usize>, when: &str) {
        let mut found = Vec::new();
        for ((reg, aor, contact), a) in &self.acked {
            if only.is_some_and(|o| o != *reg)
                || (!a.removed
                    && (a.removal_sent || a.until <= self.clock_of(*reg) + BINDING_SLACK))
            {
                continue;
            }
            if let Some(v) = self.binding_violation(*reg, aor, contact, a, when) {
                found.push(v);
            }
        }
        self.violations.extend(found);
    }

    /// Whether registrar `reg` (up) holds the binding of `aor` to `contact` as acknowledged
    /// (`a`: that REGISTER's version or a later one, due until at least `a.until`): the
    /// violation if not.
    fn binding_violation(
        &self,
        reg: usize,
        aor: &[u8],
        contact: &[u8],
        a: &Acked,
        when: &str,
    ) -> Option<String> {
        let until = a.until;
        let Node::Server(s) = &self.nodes[reg] else {
            return None;
        };
        let r = s.reg.as_ref().filter(|_| !s.down)?;
        let held = r.store.live_binding(aor, contact);
        let secs = |t: Instant| t.as_nanos() as f64 / 1e9;
        if a.removed {
            // Removed and acknowledged: not held again in that version or an older one.
            let b = held.filter(|b| {
                b.expires_at > self.now + s.skew && *b.call_id == *a.call_id && b.cseq < a.cseq
            })?;
            return Some(format!(
                "t={:.6} s: registrar {}: binding {} -> {} removed by CSeq {} (acknowledged) is held again as CSeq {} expiring at {:.3} s {when} (a resurrected binding)",
                secs(self.now),
                self.names[reg],
                String::from_utf8_lossy(aor),
                String::from_utf8_lossy(contact),
                a.cseq,
                b.cseq,
                secs(b.expires_at),
            ));
        }
        if held.as_ref().is_some_and(|b| {
            b.expires_at + BINDING_SLACK >= until && (*b.call_id != *a.call_id || b.cseq >= a.cseq)
        }) {
            return None;
        }
        Some(format!(
            "t={:.6} s: registrar {}: acknowledged binding {} -> {} (CSeq {}, due until {:.3} s) {} {when} (a lost binding)",
            secs(self.now),
            self.names[reg],
            String::from_utf8_lossy(aor),
            String::from_utf8_lossy(contact),
            a.cseq,
            secs(until),
            match held {
                Some(b) => format!(
                    "is CSeq {} expiring at {:.3} s in its store",
                    b.cseq,
                    secs(b.expires_at)
                ),
                None => "is not in its store".to_string(),
            },
        ))
    }

    /// The clock of server `node` (the simulation's plus its clock jumps).
    fn clock_of(&self, node: usize) -> Instant {
        match &self.nodes[node] {
            Node::Server(s) => self.now + s.skew,
            Node::Agents(_) => self.now,
        }
    }

    /// Phone node `node` sent `bytes`: a REGISTER is remembered (its first transmission,
    /// in its registrar's clock).
    fn phone_sent(&mut self, node: usize, bytes: &[u8]) {
        if !bytes.starts_with(b"REGISTER ") {
            return;
        }
        let Some(key) = call_and_cseq(bytes) else {
            return;
        };
        if self.reg_sent.contains_key(&key) {
            return;
        }
        let (Some(to), Some(contact)) = (uri_of(bytes, b"To"), uri_of(bytes, b"Contact")) else {
            return;
        };
        let aor = aor_of(&to);
        let expires = header_value(bytes, b"Expires")
            .and_then(|(_, _, v)| std::str::from_utf8(v).ok()?.parse().ok())
            .unwrap_or(0);
        let reg = self.phone_reg.get(node - self.phone_first).copied();
        // The registrar dates a binding with the time its worker read at the start of the
        // iteration that handled it: no earlier than BINDING_SLACK before the REGISTER left,
        // and in its own clock, with the skew it had then (at least the skew of that
        // earliest instant: a jump inside the iteration does not date it later).
        let first_sent = match reg.map(|r| &self.nodes[r]) {
            Some(Node::Server(s)) => {
                self.now + s.skew_at(self.now.checked_sub(BINDING_SLACK).unwrap_or(Instant::ZERO))
            }
            _ => self.now,
        };
        if expires == 0
            && let Some(reg) = reg
            && let Some(a) = self.acked.get_mut(&(reg, aor_of(&to), contact.clone()))
            && a.call_id == key.0
            && a.cseq < key.1
        {
            // A removal asked for: the binding is no longer due, whether or not its 200
            // comes back.
            a.removal_sent = true;
        }
        self.reg_sent.insert(
            key.clone(),
            SentRegister {
                call_id: key.0,
                cseq: key.1,
                first_sent,
                aor,
                contact,
                expires,
            },
        );
    }

    /// Phone node `node` received `bytes`: a 200 to one of its REGISTERs acknowledges the
    /// binding, which its registrar must hold from now on.
    fn phone_received(&mut self, node: usize, bytes: &[u8]) {
        if !bytes.starts_with(b"SIP/2.0 200 ")
            || !header_value(bytes, b"CSeq").is_some_and(|(_, _, v)| v.ends_with(b"REGISTER"))
        {
            return;
        }
        let Some(&reg) = self.phone_reg.get(node - self.phone_first) else {
            return;
        };
        let Some(sent) = call_and_cseq(bytes).and_then(|k| self.reg_sent.get(&k)) else {
            return;
        };
        self.registrations += 1;
        let removed = sent.expires == 0;
        self.deregistrations += u64::from(removed);
        let a = Acked {
            until: sent.first_sent + Duration::from_secs(u64::from(sent.expires)),
            call_id: sent.call_id.clone(),
            cseq: sent.cseq,
            removed,
            removal_sent: false,
        };
        let key = (reg, sent.aor.clone(), sent.contact.clone());
        let due = self.acked.entry(key.clone()).or_insert_with(|| a.clone());
        if a.call_id != due.call_id || a.cseq > due.cseq {
            // A 200 that arrives after a later one's says nothing new.
            *due = a;
        }
        // What is due now: the latest version (a late 200 of an older one adds nothing).
        let a = due.clone();
        if self.check
            && (a.removed || (!a.removal_sent && a.until > self.clock_of(reg) + BINDING_SLACK))
            && let Some(v) = self.binding_violation(reg, &key.1, &key.2, &a, "when its 200 arrived")
        {
            self.violations.push(v);
        }
    }

    fn arrive(&mut self, to: usize, sub: usize, from: SocketAddr, bytes: Vec<u8>) {
        let now = self.now;
        match &mut self.nodes[to] {
            Node::Server(s) => {
                if s.down {
                    // Nobody listens: the datagram is lost.
                    self.link_drops += 1;
                } else if s.arrive(now + s.skew, from, bytes) {
                    if s.wakeup.is_zero() {
                        self.server_step(to);
                    } else {
                        s.waking = true;
                        let t = now + s.wakeup;
                        let epoch = s.epoch;
                        self.queue.push(t, Ev::Done { node: to, epoch });
                    }
                }
            }
            Node::Agents(a)
                if a.get(sub)
                    .and_then(|a| a.silent_from)
                    .is_some_and(|t| t <= now) =>
            {
                // A callee that answers nothing.
                self.silent_drops += 1;
            }
            Node::Agents(_) if to >= self.phone_first => {
                self.phone_received(to, &bytes);
                self.deliver(to, sub, from, bytes);
            }
            Node::Agents(_) => self.deliver(to, sub, from, bytes),
        }
    }

    /// A message reaches agent `sub` of node `to`.
    fn deliver(&mut self, to: usize, sub: usize, from: SocketAddr, bytes: Vec<u8>) {
        let now = self.now;
        match &mut self.nodes[to] {
            Node::Server(_) => {}
            Node::Agents(a) => {
                if let Some(a) = a.get_mut(sub) {
                    if a.coalesce.is_zero() {
                        let mut out = std::mem::take(&mut self.out);
                        a.agent.handle(now, udp(from), &bytes);
                        a.drain(&mut out);
                        self.out = out;
                        self.flush(to);
                        self.arm(to, sub);
                    } else {
                        a.inbox.push((from, bytes));
                        if a.paused.is_none() {
                            // The loop wakes now and reads everything that arrived at this
                            // instant (a server's `sendmmsg` batch) in one go.
                            a.paused = Some(now);
                            self.queue.push(now, Ev::Resume { node: to, sub });
                        }
                    }
                }
            }
        }
    }

    /// Agent `sub` of node `node` runs one iteration of its loop now (see
    /// [`AgentNode::iterate`]).
    fn agent_iteration(&mut self, node: usize, sub: usize) {
        let now = self.now;
        let Node::Agents(v) = &mut self.nodes[node] else {
            return;
        };
        let Some(a) = v.get_mut(sub) else {
            return;
        };
        let mut out = std::mem::take(&mut self.out);
        let pause = a.iterate(now, &mut out);
        self.out = out;
        self.flush(node);
        match pause {
            Some(t) => self.queue.push(t, Ev::Resume { node, sub }),
            None => self.arm(node, sub),
        }
    }

    /// Agent `sub` of node `node` ends its pause: it reads what came meanwhile and runs its
    /// due timers, or waits.
    fn resume(&mut self, node: usize, sub: usize) {
        let now = self.now;
        let Node::Agents(v) = &mut self.nodes[node] else {
            return;
        };
        let Some(a) = v.get_mut(sub) else {
            return;
        };
        a.paused = None;
        a.armed = None;
        let due = a.agent.poll_timeout().is_some_and(|t| t <= now);
        if due || !a.inbox.is_empty() {
            self.agent_iteration(node, sub);
        } else {
            self.arm(node, sub);
        }
    }

    fn wake(&mut self, node: usize, sub: usize) {
        let now = self.now;
        match &mut self.nodes[node] {
            Node::Server(s) => {
                if s.armed != Some(now) {
                    return;
                }
                s.armed = None;
                if s.iter.is_none() && !s.waking {
                    self.server_step(node);
                }
            }
            Node::Agents(a) => {
                let Some(a) = a.get_mut(sub) else {
                    return;
                };
                if a.armed != Some(now) || a.paused.is_some() {
                    return;
                }
                a.armed = None;
                let mut out = std::mem::take(&mut self.out);
                a.agent.handle_timeout(now);
                a.drain(&mut out);
                self.out = out;
                self.flush(node);
                self.arm(node, sub);
            }
        }
    }

    /// Network totals: offered, goodput, calls_ok, 503s (UACs) and completed (UASs).
    /// Totals over every agent: offered, goodput, calls ok, 503s (the UACs), completed (the
    /// UASs), answers and the sum of their PDDs in ns (the UACs).
    fn net_totals(&self) -> [u64; 7] {
        let mut t = [0u64; 7];
        for n in &self.nodes {
            if let Node::Agents(v) = n {
                for a in v {
                    let r = a.agent.recorder();
                    let c = &r.c;
                    if a.step.is_some() {
                        t[0] += c.offered;
                        t[1] += c.goodput;
                        t[2] += c.calls_ok;
                        t[3] += c.r503;
                        let (n, sum) = r.pdd_sum();
                        t[5] += n;
                        t[6] =
                            t[6].saturating_add(u64::try_from(sum.as_nanos()).unwrap_or(u64::MAX));
                    } else {
                        t[4] += c.completed;
                    }
                }
            }
        }
        t
    }

    fn sample(&mut self) {
        let net = self.net_totals();
        let d: Vec<u64> = net
            .iter()
            .zip(self.last_net)
            .map(|(a, b)| a.saturating_sub(b))
            .collect();
        self.last_net = net;
        let t_s = self.now.as_nanos() / 1_000_000_000;
        let mut k = 0;
        for n in &self.nodes {
            let Node::Server(s) = n else { continue };
            let mut c = s.c;
            c.rejected = s.ep.stats().rejected_by_gate;
            c.forward_rejected = s.ep.stats().rejected_by_forward_gate;
            let prev = self.last_servers[k];
            let snap = s.ctl.snapshot();
            if self.check {
                // The controller's outputs: finite and within their bounds.
                if !controller_in_bounds(&snap) {
                    self.violations.push(format!(
                        "t={t_s} s: server {}: controller output out of bounds: acceptance {:?}, occupancy {:?}",
                        s.name, snap.acceptance, snap.occupancy
                    ));
                }
            }
            self.series.push(SeriesRow {
                t_s,
                server: s.name.clone(),
                offered: d[0],
                goodput: d[1],
                calls_ok: d[2],
                completed: d[4],
                r503: d[3],
                pdd_mean_ms: (d[5] > 0).then(|| d[6] as f64 / d[5] as f64 / 1e6),
                admitted: c.admitted - prev.admitted,
                rejected: c.rejected.saturating_sub(prev.rejected),
                queue: s.main.len() as u64,
                invite_queue: s.invites.len() as u64,
                queue_drops: (c.queue_drops + c.invite_queue_drops)
                    .saturating_sub(prev.queue_drops + prev.invite_queue_drops),
                busy: (c.busy_ns.saturating_sub(prev.busy_ns)) as f64 / 1e9,
                occupancy: snap.occupancy,
                acceptance: snap.acceptance,
                iterations: c.iterations - prev.iterations,
                main_reads: c.main_reads - prev.main_reads,
                invite_reads: c.invite_reads - prev.invite_reads,
            });
            self.last_servers[k] = c;
            k += 1;
        }
    }

    /// After the run: every server's endpoint taken past every timer it has (bounded), then
    /// nothing may be left in it.
    fn check_leaks(&mut self, end: Instant) {
        let horizon = end + self.leak_horizon;
        let mut buf = Vec::new();
        for (name, n) in self.names.iter().zip(self.nodes.iter_mut()) {
            let Node::Server(srv) = n else { continue };
            if srv.down {
                continue;
            }
            // In the server's own clock.
            let horizon = horizon + srv.skew;
            let ep = &mut srv.ep;
            let mut steps = 0u32;
            while let Some(t) = ep.poll_timeout().filter(|t| *t <= horizon) {
                steps += 1;
                if steps > 1_000_000 {
                    self.violations.push(format!(
                        "server {name}: timers still firing after 1,000,000 steps"
                    ));
                    break;
                }
                ep.handle_timeout(t);
                ep.handle_committed(t);
                while ep.poll_transmit(t, &mut buf).is_some() {}
                while ep.poll_event().is_some() {}
                while ep.poll_dns_query().is_some() {}
            }
            let left = [
                ("transactions", ep.transactions().len()),
                ("calls", ep.active_calls()),
                ("pending branches", ep.pending_branches()),
                ("held responses", ep.held_responses()),
                ("timer entries", ep.timer_entries()),
            ];
            for (what, count) in left {
                if count > 0 {
                    self.violations.push(format!(
                        "server {name}: {count} {what} left {:?} after the run ended (a leak)",
                        self.leak_horizon
                    ));
                }
            }
        }
    }

    fn finish(mut self) -> RunOutput {
        let end = self.now.max(self.end);
        let settle = self.settle;
        let mut steps = Vec::new();
        // Completions at the UASs, per row (rows start at 0, one per second).
        let mut uas_rows: Vec<(Instant, u64)> = Vec::new();
        let mut completed = 0;
        for n in &mut self.nodes {
            let Node::Agents(v) = n else { continue };
            for a in v.iter_mut().filter(|a| a.step.is_none()) {
                let rec = a.agent.recorder_mut();
                rec.finish(end);
                completed += rec.c.completed;
                let start = rec.start();
                uas_rows.extend(
                    rec.rows()
                        .iter()
                        .map(|r| (start + Duration::from_millis(r.t_ms), r.counts.completed)),
                );
            }
        }
        for (name, n) in self.names.iter().zip(self.nodes.iter_mut()) {
            let Node::Agents(v) = n else { continue };
            for (k, a) in v.iter_mut().enumerate() {
                let Some((start, stop)) = a.step else {
                    continue;
                };
                let rec = a.agent.recorder_mut();
                rec.finish(end);
                // The point: events of this step's calls from `start + settle` to `stop`.
                let from = (start + settle).min(stop);
                let window = stop - from;
                let w = window.as_secs_f64();
                let mut sums = holdline_metrics::Counters::default();
                for row in rec.rows() {
                    let row_end = start + Duration::from_millis(row.t_ms);
                    if row_end > from && row_end <= stop {
                        sums.add(&row.counts);
                    }
                }
                let per_s = |x: u64| if w > 0.0 { x as f64 / w } else { 0.0 };
                let completed: u64 = uas_rows
                    .iter()
                    .filter(|(t, _)| *t > from && *t <= stop)
                    .map(|(_, c)| c)
                    .sum();
                let rate =
                    a.agent
                        .config()
                        .uac
                        .as_ref()
                        .map_or(0.0, |u| match (u.calls, u.rate_end) {
                            (Some(0), _) => 0.0,
                            // A ramp: its mean rate.
                            (_, Some(end)) => (u.rate + end) / 2.0,
                            (_, None) => u.rate,
                        });
                let pdd = &a.agent.recorder().lat.pdd;
                steps.push(StepOutcome {
                    population: name.clone(),
                    step: k,
                    rate_cps: rate,
                    factor: None,
                    window_s: w,
                    offered_cps: per_s(sums.offered),
                    throughput_cps: per_s(completed),
                    calls_ok_cps: per_s(sums.calls_ok),
                    goodput_cps: per_s(sums.goodput),
                    rejected_cps: per_s(sums.r503),
                    failed_other_cps: per_s(sums.r_fail_other + sums.timeouts),
                    retrans_invite_cps: per_s(sums.retrans_invite),
                    pdd_p50_ms: pdd.quantile_ms(0.5),
                    pdd_p90_ms: pdd.quantile_ms(0.9),
                    pdd_cdf: pdd.cdf(),
                    pdd_p99_ms: pdd.quantile_ms(0.99),
                    pdd_mean_ms: pdd.summary().mean_ms,
                });
            }
        }
        let servers: Vec<(String, ServerCounters)> = self
            .nodes
            .iter()
            .filter_map(|n| match n {
                Node::Server(s) => {
                    let mut c = s.c;
                    c.rejected = s.ep.stats().rejected_by_gate;
                    c.forward_rejected = s.ep.stats().rejected_by_forward_gate;
                    c.failovers = s.ep.stats().failovers;
                    let st = s.ep.stats();
                    c.edges_learned = st.edges_learned;
                    c.received = Received {
                        invite: st.requests_in.invite,
                        ack: st.requests_in.ack,
                        bye: st.requests_in.bye,
                        r1xx: st.responses_in[0],
                        r2xx: st.responses_in[1],
                        r3xx_6xx: st.responses_in[2..].iter().sum(),
                    };
                    Some((s.name.clone(), c))
                }
                Node::Agents(_) => None,
            })
            .collect();
        if self.check {
            // The phones' acknowledged bindings at the end, then the leaks.
            self.now = end;
            self.check_acked(None, "at the end of the run");
            self.check_leaks(end);
            for (name, c) in &servers {
                if c.in_dialog_rejected > 0 {
                    self.violations.push(format!(
                        "server {name}: its gate rejected {} requests of admitted calls (in-dialog)",
                        c.in_dialog_rejected
                    ));
                }
            }
        }
        let mut retransmitted = Retransmitted::default();
        let mut agent_series = Vec::new();
        for (name, n) in self.names.iter().zip(&self.nodes) {
            let Node::Agents(v) = n else { continue };
            let mut rows: std::collections::BTreeMap<u64, holdline_metrics::Row> =
                std::collections::BTreeMap::new();
            for a in v {
                let rec = a.agent.recorder();
                let c = &rec.c;
                retransmitted.invite += c.retrans_invite;
                retransmitted.r200 += c.retrans_200;
                retransmitted.bye += c.retrans_bye;
                let start_ms = (rec.start() - Instant::ZERO).as_millis() as u64;
                for r in rec.rows() {
                    let t_ms = start_ms + r.t_ms;
                    let sum = rows.entry(t_ms).or_insert_with(|| holdline_metrics::Row {
                        t_ms,
                        counts: holdline_metrics::Counters::default(),
                        active: 0,
                    });
                    sum.counts.add(&r.counts);
                    sum.active += r.active;
                }
            }
            agent_series.push((name.clone(), rows.into_values().collect()));
        }
        RunOutput {
            retransmitted,
            agent_series,
            capture: self.capture.take().unwrap_or_default(),
            seed: self.seed,
            steps,
            series: self.series,
            servers,
            messages: self.messages,
            link_drops: self.link_drops,
            completed,
            events: self.events,
            simulated: end - Instant::ZERO,
            violations: self.violations,
            registrations: self.registrations,
            acked_bindings: self.acked.len() as u64,
            crashes: self.crashes,
            partition_drops: self.partition_drops,
            silent_drops: self.silent_drops,
            deregistrations: self.deregistrations,
            forgiven_bindings: self.forgiven_bindings,
        }
    }

    /// The load phase's end.
    pub fn load_end(&self) -> Instant {
        self.load_end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's count, measured on loopback: a 212,992-byte buffer holds 92 datagrams
    /// of 700 bytes and 166 of 400.
    #[test]
    fn receive_buffer_in_bytes_holds_what_linux_holds() {
        let from = node_addr(0, 0);
        for (len, holds) in [(700, 92), (400, 166), (1000, 92)] {
            let mut q = RecvQueue::new(212_992, true);
            let mut n = 0;
            while q
                .push(Queued {
                    at: Instant::ZERO,
                    from,
                    bytes: vec![b'x'; len],
                    forced: None,
                })
                .is_ok()
            {
                n += 1;
                assert!(n <= 1000, "unbounded");
            }
            assert_eq!(n, holds, "{len}-byte datagrams");
            // One read gives nothing back yet (the kernel's deferred release).
            assert!(q.pop().is_some());
            assert_eq!(q.used, holds * truesize(len));
        }
    }

    /// Measured on loopback (`SO_RCVBUF` 212,992, doubled by Linux to 425,984; 700-byte
    /// datagrams, drops read from `/proc/net/udp`): a full socket holds 184; after 36 reads
    /// not one more fits; after 47 reads (a quarter of the buffer in truesize) 47 fit, and
    /// from then on 47 at a time. Freeing each datagram as it is read would let 36 in.
    #[test]
    fn a_full_socket_gives_space_back_a_quarter_at_a_time() {
        let from = node_addr(0, 0);
        let mut q = RecvQueue::new(425_984, true);
        let fill = |q: &mut RecvQueue| {
            let mut n = 0;
            while q
                .push(Queued {
                    at: Instant::ZERO,
                    from,
                    bytes: vec![b'x'; 700],
                    forced: None,
                })
                .is_ok()
            {
                n += 1;
                assert!(n <= 1000, "unbounded");
            }
            n
        };
        assert_eq!(fill(&mut q), 184);
        let read = |q: &mut RecvQueue, k: usize| {
            for _ in 0..k {
                assert!(q.pop().is_some());
            }
        };
        for (k, fits) in [
            (1, 0),
            (5, 0),
            (10, 0),
            (20, 0),
            (30, 47),
            (40, 47),
            (50, 47),
        ] {
            read(&mut q, k);
            assert_eq!(fill(&mut q), fits, "after reading {k} more");
        }
        // Read to the end: the last datagram of the splice gives everything back.
        while q.pop().is_some() {}
        assert_eq!(q.used, 0);
        assert_eq!(fill(&mut q), 184);
    }

    #[test]
    fn load_reports_are_stamped_combined_and_read() {
        let resp = b"SIP/2.0 180 Ringing\r\nVia: SIP/2.0/UDP 10.0.1.1:5060;branch=z9hG4bKa\r\nCall-ID: x\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n";
        assert!(answers_invite(resp));
        assert!(!answers_invite(b"SIP/2.0 200 OK\r\nCSeq: 2 BYE\r\n\r\n"));
        assert!(!answers_invite(
            b"INVITE sip:a@b SIP/2.0\r\nCSeq: 1 INVITE\r\n\r\n"
        ));
        let report = |reporter, seq, headroom| LoadReport {
            reporter,
            seq,
            headroom,
        };
        let mut m = resp.to_vec();
        stamp(&mut m, report(3, 12, 0.734));
        let (_, _, v) = header_value(&m, LOAD_REPORT).expect("stamped");
        assert_eq!(v, b"g=0.7340;seq=12;by=3");
        assert!(m.ends_with(b"Content-Length: 0\r\nLoad-Report: g=0.7340;seq=12;by=3\r\n\r\n"));
        // Upstream, a server with more headroom leaves it; one with less replaces it.
        stamp(&mut m, report(1, 40, 1.5));
        assert_eq!(
            parse_report(header_value(&m, LOAD_REPORT).expect("kept").2),
            Some(report(3, 12, 0.734))
        );
        stamp(&mut m, report(1, 41, 0.25));
        assert_eq!(
            parse_report(header_value(&m, LOAD_REPORT).expect("replaced").2),
            Some(report(1, 41, 0.25))
        );
        assert_eq!(m.windows(11).filter(|w| *w == LOAD_REPORT).count(), 1);
        assert!(Message::parse(&m, &Limits::DEFAULT).is_ok());
        for bad in [
            &b"g=x;seq=1;by=2"[..],
            b"g=0.5;seq=1",
            b"g=-1;seq=1;by=2",
            b"nonsense",
        ] {
            assert_eq!(parse_report(bad), None);
        }
    }

    #[test]
    fn a_503_to_an_in_dialog_request_is_recognised() {
        let resp = |status: &str, cseq: &str| {
            format!(
                "SIP/2.0 {status}\r\nVia: SIP/2.0/UDP 10.0.1.1:5060;branch=z9hG4bKa\r\n\
                 Call-ID: x\r\nCSeq: {cseq}\r\nContent-Length: 0\r\n\r\n"
            )
            .into_bytes()
        };
        assert!(in_dialog_503(&resp("503 Service Unavailable", "2 BYE")));
        assert!(in_dialog_503(&resp("503 Service Unavailable", "1 CANCEL")));
        assert!(!in_dialog_503(&resp("503 Service Unavailable", "1 INVITE")));
        assert!(!in_dialog_503(&resp(
            "503 Service Unavailable",
            "7 REGISTER"
        )));
        assert!(!in_dialog_503(&resp("200 OK", "2 BYE")));
    }

    #[test]
    fn controller_outputs_out_of_bounds_are_recognised() {
        let mut snap = holdline_overload::Snapshot::new(Algorithm::Occupancy);
        assert!(controller_in_bounds(&snap), "nothing measured yet");
        snap.acceptance = Some(0.4);
        snap.occupancy = Some(1.0);
        assert!(controller_in_bounds(&snap));
        for bad in [f64::NAN, f64::INFINITY, -0.1, 1.5] {
            snap.acceptance = Some(bad);
            assert!(!controller_in_bounds(&snap), "acceptance {bad}");
            snap.acceptance = Some(0.4);
            snap.occupancy = Some(bad);
            assert!(!controller_in_bounds(&snap), "occupancy {bad}");
            snap.occupancy = None;
        }
        // The real controllers of a loaded run stay in bounds (checked every second).
        let mut ctl = ControllerConfig::Occupancy(holdline_overload::OccConfig::default())
            .build(Instant::ZERO, Rng::seed_from_u64(1))
            .expect("controller");
        for k in 1..=50u64 {
            let now = Instant::ZERO + Duration::from_millis(100 * k);
            ctl.on_signal(now, Signal::Busy(Duration::from_millis(100 * (k % 3))));
            ctl.handle_timeout(now);
            assert!(
                controller_in_bounds(&ctl.snapshot()),
                "{:?}",
                ctl.snapshot()
            );
        }
    }

    #[test]
    fn addresses_round_trip() {
        for (n, s) in [(0, 0), (1, 3), (300, 7), (65_535, 100)] {
            assert_eq!(decode(node_addr(n, s)), Some((n, s)));
        }
        assert_eq!(decode("127.0.0.1:5060".parse().expect("addr")), None);
    }
}

#[cfg(test)]
mod agent_loop_tests {
    use super::*;
    use holdline_agent::{AgentConfig, UasConfig};

    fn uas(coalesce_us: f64) -> AgentNode {
        let addr = node_addr(1, 0);
        let mut cfg = AgentConfig::new(Transport::Udp, Vec::new());
        cfg.uas_addr = Some(addr);
        cfg.uas = Some(UasConfig::default());
        let agent = Agent::new(cfg, Instant::ZERO).expect("agent");
        AgentNode::new(agent, addr, None, coalesce_us)
    }

    fn invite(k: usize) -> Vec<u8> {
        format!(
            "INVITE sip:user{k}@example.com SIP/2.0\r\n\
             Via: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK-loop-{k}\r\n\
             Max-Forwards: 70\r\n\
             From: <sip:caller@example.com>;tag=a{k}\r\n\
             To: <sip:user{k}@example.com>\r\n\
             Call-ID: loop-{k}@sim\r\n\
             CSeq: 1 INVITE\r\n\
             Contact: <sip:caller@10.0.0.1:5060>\r\n\
             Content-Length: 0\r\n\r\n"
        )
        .into_bytes()
    }

    /// A world whose server (node 0: `queue-limit`, `service_us` per message, new INVITEs
    /// stale after `max_wait_ms`) is idle with `n` new INVITEs in its INVITE queue, all
    /// arrived at `at`.
    fn idle_server_with_invites(service_us: u32, max_wait_ms: u32, n: usize, at: Instant) -> World {
        let text = format!(
            "name = \"invites\"\nseed = 1\nduration_s = 1\n\
             [[servers]]\nname = \"proxy\"\nlocal = \"queue-limit\"\n\
             service_us = {service_us}\ninvite_max_wait_ms = {max_wait_ms}\n\
             [[uas]]\nname = \"uas\"\n\
             [[uac]]\nname = \"uac\"\ntarget = \"proxy\"\nsteps = [{{ at_s = 0, rate_cps = 1 }}]\n\
             [[routes]]\nserver = \"proxy\"\ndomain = \"*\"\nto = \"uas\"\n"
        );
        let sc = Scenario::from_toml("invites.toml", &text).expect("scenario loads");
        let mut world = World::new(&sc, 0).expect("world builds");
        let Some(Node::Server(s)) = world.nodes.get_mut(0) else {
            panic!("node 0 is the server");
        };
        for k in 0..n {
            let m = Queued {
                at,
                from: node_addr(2, 0),
                bytes: invite(k),
                forced: None,
            };
            assert!(s.invites.push(m).is_ok());
        }
        s.invite_event = true;
        world
    }

    /// Runs the server's worker from `now` until it waits in `poll` again.
    fn run_until_idle(world: &mut World, mut now: Instant) -> &mut Server {
        let Some(Node::Server(s)) = world.nodes.get_mut(0) else {
            panic!("node 0 is the server");
        };
        let mut releases = Vec::new();
        let mut steps = 0;
        while let Some(next) = s.step(now, &mut releases) {
            now = next;
            steps += 1;
            assert!(steps < 100, "the worker settles");
        }
        s
    }

    /// A new INVITE is judged stale when its turn in the batch comes, as the worker judges
    /// it (`age_of` at dispatch): ten INVITEs that arrived together, read at once by an idle
    /// server whose INVITEs cost 10 ms each, with a 25 ms limit: the first three start
    /// within 25 ms of their arrival and are admitted, the rest have waited 30 ms by their
    /// turn and are answered 503. Judged at the read, all ten would be admitted.
    #[test]
    fn an_invite_is_stale_by_its_own_turn_in_the_batch() {
        let t = Instant::ZERO + Duration::from_millis(1);
        let mut world = idle_server_with_invites(10_000, 25, 10, t);
        let s = run_until_idle(&mut world, t);
        assert_eq!(s.c.invite_reads, 1, "one receive call reads all ten");
        assert_eq!((s.c.admitted, s.ep.stats().rejected_by_gate), (3, 7));
    }

    /// A short batch drains the INVITE socket, as in the worker (`read_socket` returns
    /// drained, `read_invites` clears the socket's readiness): five INVITEs take one
    /// receive call and one loop iteration; no second iteration finds the socket empty.
    /// Thirty-two (a full batch) leave the socket readable: a second iteration looks again.
    #[test]
    fn a_short_invite_batch_drains_the_invite_socket() {
        let t = Instant::ZERO + Duration::from_millis(1);
        for (n, iterations) in [(5, 1), (32, 2)] {
            let mut world = idle_server_with_invites(10, 250, n, t);
            let s = run_until_idle(&mut world, t);
            assert_eq!(s.c.invite_reads, 1, "{n} INVITEs");
            assert_eq!(s.c.admitted, n as u64, "{n} INVITEs");
            assert_eq!(s.c.iterations, iterations, "{n} INVITEs");
        }
    }

    /// `holdline load`'s loop: a wake-up that reads 16 messages or more pauses for
    /// `coalesce`; fewer, or no coalescing, never pause; what the iteration read is
    /// answered at once, in that iteration.
    #[test]
    fn a_loop_pauses_after_a_busy_wake_up_only() {
        let from = node_addr(0, 0);
        let t = Instant::ZERO + Duration::from_millis(5);
        for (coalesce_us, n, pause) in [
            (1000.0, COALESCE_MIN, Some(t + Duration::from_millis(1))),
            (1000.0, COALESCE_MIN - 1, None),
            (0.0, 40, None),
        ] {
            let mut a = uas(coalesce_us);
            a.inbox = (0..n).map(|k| (from, invite(k))).collect();
            let mut out = Vec::new();
            assert_eq!(
                a.iterate(t, &mut out),
                pause,
                "{coalesce_us} µs, {n} messages"
            );
            assert!(a.inbox.is_empty());
            // 180 and 200 (no ringing or answering delay) for each INVITE read, all sent
            // now.
            assert_eq!(out.len(), 2 * n, "{coalesce_us} µs, {n} messages");
            assert_eq!(a.paused, pause);
        }
    }
}

/// Loads a server's DNS zone (its `srv` routes' records) into its endpoint's cache, as if
/// resolved at `now`: at the start, and again after a restart.
fn preload_zone(ep: &mut Endpoint, zone: &[(String, Vec<SrvRecord>)], now: Instant) {
    for (name, records) in zone {
        let query = DnsQuery {
            name: name.clone(),
            kind: QueryKind::Srv,
        };
        let answer = DnsAnswer::Records {
            records: DnsRecords::Srv(records.clone()),
            ttl: DNS_TTL,
        };
        ep.handle_dns_response(now, DnsResponse { query, answer });
    }
}
