//! One run of a scenario: nodes, links, the CPU model, and the event loop.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use holdline_agent::{
    Agent, AgentConfig, ArrivalKind, Hold, Timers, UacConfig, UasConfig, UserPattern,
};
use holdline_base::{Duration, Instant, Peer, Rng, Transport};
use holdline_netmodel::{Fate, Link};
use holdline_overload::{
    Admission, BudgetConfig, Controller, ControllerFactory, RejectReason, Rejection,
    RejectionBudget, Signal, Work,
};
use holdline_proto::{
    Endpoint, GateRejection, ListenAddr, MemoryLocationStore, ProxyConfig, RelayPolicy, StaticRoute,
};

use crate::engine::EventQueue;
use crate::scenario::Scenario;

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
    /// The server `node` finished the message it was serving.
    Done { node: usize },
    /// A timer of node `node`, sub-agent `sub` (the server itself for servers).
    Wake { node: usize, sub: usize },
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
}

/// A SIP server: a real [`Endpoint`], its controller, and the CPU and queue model.
struct Server {
    name: String,
    ep: Endpoint,
    ctl: Box<dyn Controller>,
    budget: Option<RejectionBudget>,
    addr: SocketAddr,
    main: VecDeque<Queued>,
    invites: VecDeque<Queued>,
    main_bound: usize,
    invite_bound: usize,
    invite_queue: bool,
    /// New INVITEs that waited longer than this in the INVITE queue are answered 503
    /// whatever the gate says (the server's `defer_max_wait_ms` over UDP).
    invite_max_wait: Option<Duration>,
    service: Duration,
    invite_cost: Duration,
    reject_cost: Duration,
    /// The message being served: its cost and whether it was a rejection.
    serving: Option<(Duration, bool)>,
    /// What the message being served sends when its service ends.
    held: Vec<Out>,
    armed: Option<Instant>,
    c: ServerCounters,
    scratch: Vec<u8>,
}

impl Server {
    /// A message arrives: queued, or dropped at a full queue. True when the CPU is idle and
    /// should start.
    fn arrive(&mut self, now: Instant, from: SocketAddr, bytes: Vec<u8>) -> bool {
        let to_invites = self.invite_queue && bytes.starts_with(b"INVITE ");
        let (q, bound, drops) = if to_invites {
            (
                &mut self.invites,
                self.invite_bound,
                &mut self.c.invite_queue_drops,
            )
        } else {
            (&mut self.main, self.main_bound, &mut self.c.queue_drops)
        };
        if q.len() >= bound {
            *drops += 1;
            return false;
        }
        q.push_back(Queued {
            at: now,
            from,
            bytes,
        });
        self.serving.is_none()
    }

    /// Starts serving the next message, if any: returns when its service ends.
    fn start(&mut self, now: Instant) -> Option<Instant> {
        if self.serving.is_some() {
            return None;
        }
        self.close_interval(now);
        let mut admit_all = false;
        let mut forced = None;
        let msg = if let Some(m) = self.main.pop_front() {
            // As the worker: the queueing delay of admitted calls' messages, and the queue
            // length it implies.
            self.ctl
                .on_signal(now, Signal::QueueDelay(now.saturating_duration_since(m.at)));
            self.ctl
                .on_signal(now, Signal::QueueLength(self.main.len() + 1));
            m
        } else if let Some(m) = self.invites.pop_front() {
            // Past the rejection budget the worker reads new INVITEs and admits them.
            admit_all = self.budget.as_mut().is_some_and(|b| !b.allows(now));
            let wait = now.saturating_duration_since(m.at);
            self.ctl.on_signal(now, Signal::NewRequestDelay(wait));
            if self.invite_max_wait.is_some_and(|w| wait > w) {
                forced = Some(gate_rejection(Rejection::service_unavailable(
                    RejectReason::DeferTimeout,
                    None,
                )));
            }
            m
        } else {
            return None;
        };
        let ctl = &mut self.ctl;
        let mut admitted = false;
        let rejected = self.ep.handle_admitting(
            now,
            &msg.bytes,
            udp(msg.from),
            Transport::Udp,
            &mut |exempt| {
                if forced.is_some() {
                    return forced;
                }
                if admit_all || exempt {
                    admitted = true;
                    return None;
                }
                match ctl.admit(now, &Admission::new_invite()).rejection() {
                    None => {
                        admitted = true;
                        None
                    }
                    Some(r) => Some(gate_rejection(r)),
                }
            },
            &mut |_| None,
        );
        self.c.handled += 1;
        self.c.admitted += u64::from(admitted && !rejected);
        let cost = if rejected {
            self.reject_cost
        } else if msg.bytes.starts_with(b"INVITE ") {
            self.invite_cost
        } else {
            self.service
        };
        self.c.busy_ns += u64::try_from(cost.as_nanos()).unwrap_or(u64::MAX);
        let mut held = std::mem::take(&mut self.held);
        self.drain(now, &mut held);
        self.held = held;
        self.serving = Some((cost, rejected));
        Some(now + cost)
    }

    /// The message in service is done: report the busy time and release what it sends.
    fn done(&mut self, now: Instant, out: &mut Vec<Out>) {
        if let Some((cost, rejected)) = self.serving.take() {
            let busy = match self.budget.as_mut() {
                Some(b) => {
                    b.account(
                        now,
                        Work {
                            busy: cost,
                            handling: cost,
                            rejecting: if rejected { cost } else { Duration::ZERO },
                            datagrams: 0,
                            rejected_messages: u64::from(rejected),
                        },
                    )
                    .other
                }
                None => cost,
            };
            self.ctl.on_signal(now, Signal::Busy(busy));
        }
        out.append(&mut self.held);
    }

    /// Timers: the endpoint's and the controller's.
    fn wake(&mut self, now: Instant, out: &mut Vec<Out>) {
        if self.ep.poll_timeout().is_some_and(|t| t <= now) {
            self.ep.handle_timeout(now);
            self.drain(now, out);
        }
        self.close_interval(now);
    }

    fn close_interval(&mut self, now: Instant) {
        if self.ctl.poll_timeout().is_some_and(|t| t <= now) {
            self.ctl.handle_timeout(now);
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match (self.ep.poll_timeout(), self.ctl.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn drain(&mut self, now: Instant, out: &mut Vec<Out>) {
        loop {
            // The buffer becomes the message: no copy.
            self.scratch.clear();
            let Some(t) = self.ep.poll_transmit(now, &mut self.scratch) else {
                break;
            };
            let mut bytes = std::mem::replace(&mut self.scratch, Vec::with_capacity(1024));
            bytes.truncate(t.size);
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
}

impl AgentNode {
    fn drain(&mut self, out: &mut Vec<Out>) {
        let addr = self.addr;
        self.agent
            .drain_transmits(|peer, bytes| out.push((addr, peer.addr, bytes.to_vec())));
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
    /// PDD 99th percentile, milliseconds.
    pub pdd_p99_ms: f64,
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
    /// Events processed.
    pub events: u64,
    /// Virtual time simulated.
    pub simulated: Duration,
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
    link_rng: Rng,
    queue: EventQueue<Ev>,
    out: Vec<Out>,
    messages: u64,
    link_drops: u64,
    events: u64,
    seed: u64,
    series: Vec<SeriesRow>,
    /// Totals at the previous sample: network (see `net_totals`) and per
    /// server counters.
    last_net: [u64; 5],
    last_servers: Vec<ServerCounters>,
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
            for r in sc.routes.iter().filter(|r| r.server == s.name) {
                let to = index(&r.to).ok_or_else(|| err(format!("route to `{}`", r.to)))?;
                p.static_routes.push(StaticRoute {
                    domain: r.domain.clone(),
                    next_hop: node_addr(to, 0),
                    transport: Transport::Udp,
                    stateless: false,
                });
            }
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
            nodes.push(Node::Server(Box::new(Server {
                name: s.name.clone(),
                ep: Endpoint::new(p, Arc::new(MemoryLocationStore::new())),
                ctl,
                budget,
                addr,
                main: VecDeque::new(),
                invites: VecDeque::new(),
                main_bound: s.queue,
                invite_bound: s.invite_queue_bound.unwrap_or(s.queue),
                invite_queue,
                invite_max_wait: (invite_queue && s.local != "none")
                    .then(|| dur_s(s.invite_max_wait_ms / 1000.0)),
                service: us(s.service_us),
                invite_cost: us(s.invite_us.unwrap_or(s.service_us)),
                reject_cost: us(s.reject_us),
                serving: None,
                held: Vec::new(),
                armed: None,
                c: ServerCounters::default(),
                scratch: Vec::with_capacity(2048),
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
                ..UasConfig::default()
            });
            cfg.seed = master.next_u64();
            cfg.goodput_window = goodput_window;
            cfg.timers = Timers::default();
            let agent = Agent::new(cfg, Instant::ZERO).map_err(|e| SimError::Agent {
                node: u.name.clone(),
                message: e.to_string(),
            })?;
            nodes.push(Node::Agents(vec![AgentNode {
                agent,
                addr,
                armed: None,
                step: None,
            }]));
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
                let addr = node_addr(i, k);
                let mut cfg = AgentConfig::new(Transport::Udp, vec![addr]);
                cfg.seed = master.next_u64();
                cfg.goodput_window = goodput_window;
                // A step without calls still needs a valid rate: it gets a zero-length run.
                let (rate, duration) = if rate > 0.0 {
                    (rate, stop - start)
                } else {
                    (1.0, Duration::ZERO)
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
                    calls: if duration.is_zero() { Some(0) } else { None },
                    duration: Some(duration),
                    hold: Hold::Fixed(dur_s(u.hold_ms / 1000.0)),
                    cancel_after: None,
                    max_active: None,
                    uri_transport: false,
                });
                let agent = Agent::new(cfg, start).map_err(|e| err(e.to_string()))?;
                agents.push(AgentNode {
                    agent,
                    addr,
                    armed: None,
                    step: Some((start, stop)),
                });
            }
            nodes.push(Node::Agents(agents));
        }
        // Links: the default everywhere, entries for named pairs (both directions).
        let default = sc.default_link.to_config().map_err(SimError::Link)?;
        let mut link_cfgs = vec![default; n * n];
        for l in &sc.links {
            let cfg = l.spec.to_config().map_err(SimError::Link)?;
            if let (Some(a), Some(b)) = (index(&l.between[0]), index(&l.between[1])) {
                link_cfgs[a * n + b] = cfg;
                link_cfgs[b * n + a] = cfg;
            }
        }
        let link_rng = Rng::seed_from_u64(master.next_u64());
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
            link_rng,
            queue: EventQueue::default(),
            out: Vec::new(),
            messages: 0,
            link_drops: 0,
            events: 0,
            seed,
            series: Vec::new(),
            last_net: [0; 5],
            last_servers: vec![ServerCounters::default(); servers],
        };
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
            Node::Server(srv) => (srv.poll_timeout(), &mut srv.armed),
            Node::Agents(a) => match a.get_mut(s) {
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
        for (_src, dst, bytes) in out.drain(..) {
            self.messages += 1;
            let Some((to, sub)) = decode(dst).filter(|(to, _)| *to < n) else {
                self.link_drops += 1;
                continue;
            };
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
                Fate::Deliver(at) => self.queue.push(
                    at,
                    Ev::Arrive {
                        to,
                        sub,
                        from: _src,
                        bytes,
                    },
                ),
                Fate::Lost | Fate::QueueFull => self.link_drops += 1,
            }
        }
        self.out = out;
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
                Ev::Done { node } => {
                    let now = self.now;
                    let mut out = std::mem::take(&mut self.out);
                    let next = match &mut self.nodes[node] {
                        Node::Server(s) => {
                            s.done(now, &mut out);
                            s.start(now)
                        }
                        Node::Agents(_) => None,
                    };
                    self.out = out;
                    if let Some(t) = next {
                        self.queue.push(t, Ev::Done { node });
                    }
                    self.flush(node);
                    self.arm(node, 0);
                }
                Ev::Wake { node, sub } => self.wake(node, sub),
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

    fn arrive(&mut self, to: usize, sub: usize, from: SocketAddr, bytes: Vec<u8>) {
        let now = self.now;
        let mut out = std::mem::take(&mut self.out);
        let mut start = None;
        match &mut self.nodes[to] {
            Node::Server(s) => {
                if s.arrive(now, from, bytes) {
                    start = s.start(now);
                }
            }
            Node::Agents(a) => {
                if let Some(a) = a.get_mut(sub) {
                    a.agent.handle(now, udp(from), &bytes);
                    a.drain(&mut out);
                }
            }
        }
        self.out = out;
        if let Some(t) = start {
            self.queue.push(t, Ev::Done { node: to });
        }
        self.flush(to);
        self.arm(to, sub);
    }

    fn wake(&mut self, node: usize, sub: usize) {
        let now = self.now;
        let mut out = std::mem::take(&mut self.out);
        let mut start = None;
        match &mut self.nodes[node] {
            Node::Server(s) => {
                if s.armed != Some(now) {
                    self.out = out;
                    return;
                }
                s.armed = None;
                s.wake(now, &mut out);
                start = s.start(now);
            }
            Node::Agents(a) => {
                let Some(a) = a.get_mut(sub) else {
                    self.out = out;
                    return;
                };
                if a.armed != Some(now) {
                    self.out = out;
                    return;
                }
                a.armed = None;
                a.agent.handle_timeout(now);
                a.drain(&mut out);
            }
        }
        self.out = out;
        if let Some(t) = start {
            self.queue.push(t, Ev::Done { node });
        }
        self.flush(node);
        self.arm(node, sub);
    }

    /// Network totals: offered, goodput, calls_ok, 503s (UACs) and completed (UASs).
    fn net_totals(&self) -> [u64; 5] {
        let mut t = [0u64; 5];
        for n in &self.nodes {
            if let Node::Agents(v) = n {
                for a in v {
                    let c = &a.agent.recorder().c;
                    if a.step.is_some() {
                        t[0] += c.offered;
                        t[1] += c.goodput;
                        t[2] += c.calls_ok;
                        t[3] += c.r503;
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
            let prev = self.last_servers[k];
            let snap = s.ctl.snapshot();
            self.series.push(SeriesRow {
                t_s,
                server: s.name.clone(),
                offered: d[0],
                goodput: d[1],
                calls_ok: d[2],
                completed: d[4],
                r503: d[3],
                admitted: c.admitted - prev.admitted,
                rejected: c.rejected.saturating_sub(prev.rejected),
                queue: s.main.len() as u64,
                invite_queue: s.invites.len() as u64,
                queue_drops: (c.queue_drops + c.invite_queue_drops)
                    .saturating_sub(prev.queue_drops + prev.invite_queue_drops),
                busy: (c.busy_ns.saturating_sub(prev.busy_ns)) as f64 / 1e9,
                occupancy: snap.occupancy,
                acceptance: snap.acceptance,
            });
            self.last_servers[k] = c;
            k += 1;
        }
    }

    fn finish(mut self) -> RunOutput {
        let end = self.now.max(self.end);
        let settle = self.settle;
        let mut steps = Vec::new();
        // Completions at the UASs, per row (rows start at 0, one per second).
        let mut uas_rows: Vec<(Instant, u64)> = Vec::new();
        for n in &mut self.nodes {
            let Node::Agents(v) = n else { continue };
            for a in v.iter_mut().filter(|a| a.step.is_none()) {
                let rec = a.agent.recorder_mut();
                rec.finish(end);
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
                let rate = a
                    .agent
                    .config()
                    .uac
                    .as_ref()
                    .map_or(0.0, |u| if u.calls == Some(0) { 0.0 } else { u.rate });
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
                    pdd_p99_ms: pdd.quantile_ms(0.99),
                });
            }
        }
        let servers = self
            .nodes
            .iter()
            .filter_map(|n| match n {
                Node::Server(s) => {
                    let mut c = s.c;
                    c.rejected = s.ep.stats().rejected_by_gate;
                    Some((s.name.clone(), c))
                }
                Node::Agents(_) => None,
            })
            .collect();
        RunOutput {
            seed: self.seed,
            steps,
            series: self.series,
            servers,
            messages: self.messages,
            link_drops: self.link_drops,
            events: self.events,
            simulated: end - Instant::ZERO,
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

    #[test]
    fn addresses_round_trip() {
        for (n, s) in [(0, 0), (1, 3), (300, 7), (65_535, 100)] {
            assert_eq!(decode(node_addr(n, s)), Some((n, s)));
        }
        assert_eq!(decode("127.0.0.1:5060".parse().expect("addr")), None);
    }
}
