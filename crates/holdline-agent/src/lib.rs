//! holdline's SIP user agents as pure state machines.
//!
//! One [`Agent`] runs any combination of three roles sharing one clock, one random generator
//! and one [`Recorder`](holdline_metrics::Recorder):
//!
//! - the **UAC** places calls through a target at a rate (Poisson or constant arrivals,
//!   bounded by a call count and a duration, both hard stops), with RFC 3261 client
//!   transactions: INVITE retransmission (Timer A) and timeout (Timer B) over UDP, ACK, BYE
//!   after the holding time with its non-INVITE transaction (Timers E/F), CANCEL after a
//!   no-answer time;
//! - the **UAS** answers INVITE with optional 100, then 180 and a final response after
//!   configured delays (a weighted mix of statuses), retransmits a 2xx from T1 doubling to T2
//!   until the ACK or 64*T1 **on every transport** (§13.3.1.4, the retransmission SIPp does
//!   not do over TCP), and non-2xx over UDP (Timer G); answers BYE, CANCEL and OPTIONS;
//! - the **registration** role registers N users at a rate, refreshes them, and retries once
//!   with `Min-Expires` on 423.
//!
//! The agent reads no clock and opens no socket: a driver (the `holdline-load` socket loop,
//! or the simulator) calls [`Agent::handle`] with each received message,
//! [`Agent::handle_timeout`] when [`Agent::poll_timeout`] is due, and sends what
//! [`Agent::drain_transmits`] hands it. Requests of UAC leg `i` are addressed with
//! `Peer::conn == Some(ConnId(i))`; responses go back to the `Peer` the request came from.
//!
//! Call-IDs, tags and branches carry `{run token}-{slot}-{generation}`, so a response finds
//! its call without hashing; the UAS, which sees foreign Call-IDs, uses a hash map.
#![forbid(unsafe_code)]

mod arrivals;
mod build;
mod config;
mod holddown;
mod reg;
mod timers;
mod uac;
mod uas;

use holdline_base::{Instant, Machine, Peer, Rng, Transmit, Transport};
use holdline_metrics::Recorder;
use holdline_sip::{Limits, Message, StartLine};

pub use arrivals::Arrivals;
pub use config::{
    AgentConfig, ArrivalKind, Hold, Hops, MAX_HOPS, MAX_REGISTER_RETRIES, MAX_REGISTER_RETRY_WAIT,
    PatternError, RegisterConfig, Timers, UacConfig, UasConfig, UserPattern,
};

use timers::{Kind, TimerQueue};

/// A configuration the agent cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The UAC or the registration role has no local address to send from.
    #[error("the {0} role needs at least one local address (leg)")]
    NoLeg(&'static str),
    /// The UAS role has no address for its Contact.
    #[error("the UAS role needs its listening address")]
    NoUasAddr,
    /// No role at all.
    #[error("no role configured (uac, uas or register)")]
    NoRole,
    /// A rate that is not a positive finite number.
    #[error("rate must be a positive number, got {0}")]
    BadRate(String),
    /// More first hops than [`MAX_HOPS`](crate::config::MAX_HOPS).
    #[error("{0} first hops: at most {max} are supported", max = crate::config::MAX_HOPS)]
    TooManyHops(usize),
    /// A connection-oriented UAC with fewer legs (connections) than first hops.
    #[error(
        "{hops} first hops over a connection-oriented transport need at least {hops} connections, got {legs}"
    )]
    HopsNeedLegs {
        /// First hops.
        hops: usize,
        /// Legs configured.
        legs: usize,
    },
    /// Several registrars over a connection-oriented transport (not supported: a phone's
    /// connection goes to one registrar).
    #[error("several registrars (--alternate) are supported over UDP only")]
    RegisterHopsNeedUdp,
}

/// Messages waiting to be sent: one byte buffer and their boundaries.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    bytes: Vec<u8>,
    meta: Vec<(Peer, usize, usize)>,
    cursor: usize,
}

impl Outbox {
    pub(crate) fn begin(&self) -> usize {
        self.bytes.len()
    }

    pub(crate) fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }

    pub(crate) fn end(&mut self, start: usize, peer: Peer) {
        self.meta.push((peer, start, self.bytes.len()));
    }

    pub(crate) fn push(&mut self, peer: Peer, msg: &[u8]) {
        let start = self.begin();
        self.bytes.extend_from_slice(msg);
        self.end(start, peer);
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.meta.clear();
        self.cursor = 0;
    }
}

/// What role methods need from the agent, borrowed for one event.
pub(crate) struct Ctx<'a> {
    pub(crate) now: Instant,
    pub(crate) rec: &'a mut Recorder,
    pub(crate) out: &'a mut Outbox,
    pub(crate) timers: &'a mut TimerQueue,
    pub(crate) rng: &'a mut Rng,
    pub(crate) t: Timers,
    pub(crate) transport: Transport,
    pub(crate) reliable: bool,
    pub(crate) has_uas: bool,
    pub(crate) shared_clock: bool,
    pub(crate) token: &'a [u8],
}

impl Ctx<'_> {
    /// Acknowledges a final response of a call that no longer exists, back towards the
    /// address it came from.
    pub(crate) fn stateless_ack(&mut self, msg: &Message<'_>, code: u16, to: Peer) {
        let start = self.out.begin();
        if build::stateless_ack(msg, code, self.out.buf()) {
            self.out.end(start, to);
        } else {
            self.out.buf().truncate(start);
        }
    }
}

/// The agent: see the crate documentation.
#[derive(Debug)]
pub struct Agent {
    cfg: AgentConfig,
    token: Vec<u8>,
    rng: Rng,
    rec: Recorder,
    out: Outbox,
    timers: TimerQueue,
    limits: Limits,
    uac: Option<uac::Uac>,
    uas: Option<uas::Uas>,
    reg: Option<reg::Reg>,
    aborted: bool,
}

/// Splits the agent into a [`Ctx`] and its roles, borrowed disjointly (no role is moved).
macro_rules! split {
    ($s:ident, $now:expr) => {{
        let Agent {
            cfg,
            token,
            rng,
            rec,
            out,
            timers,
            uac,
            uas,
            reg,
            ..
        } = $s;
        let has_uas = uas.is_some();
        let cx = Ctx {
            now: $now,
            rec,
            out,
            timers,
            rng,
            t: cfg.timers,
            transport: cfg.transport,
            reliable: cfg.transport.is_reliable(),
            has_uas,
            shared_clock: cfg.shared_clock,
            token: token.as_slice(),
        };
        (cx, uac, uas, reg)
    }};
}

impl Agent {
    /// An agent starting at `now` (arrivals are timed from it).
    pub fn new(cfg: AgentConfig, now: Instant) -> Result<Self, ConfigError> {
        if cfg.uac.is_none() && cfg.uas.is_none() && cfg.register.is_none() {
            return Err(ConfigError::NoRole);
        }
        let mut rng = Rng::seed_from_u64(cfg.seed);
        let mut token = [0u8; 8];
        rng.fill_token(&mut token);
        let legs: Vec<build::LegText> = cfg
            .legs
            .iter()
            .map(|a| build::LegText::new(*a, cfg.transport))
            .collect();
        let uac = match &cfg.uac {
            Some(u) => {
                if legs.is_empty() {
                    return Err(ConfigError::NoLeg("uac"));
                }
                let rate_ok = match u.rate_end {
                    None => u.rate > 0.0 && u.rate.is_finite(),
                    // A ramp: both rates finite and non-negative, one positive, over a
                    // duration.
                    Some(end) => {
                        [u.rate, end].iter().all(|r| r.is_finite() && *r >= 0.0)
                            && (u.rate > 0.0 || end > 0.0)
                            && u.duration.is_some_and(|d| !d.is_zero())
                    }
                };
                if !rate_ok {
                    let rate = match u.rate_end {
                        Some(end) => format!("{} to {end} (a ramp needs a duration)", u.rate),
                        None => u.rate.to_string(),
                    };
                    return Err(ConfigError::BadRate(rate));
                }
                let hops = 1 + u.hops.alternates.len();
                if hops > MAX_HOPS {
                    return Err(ConfigError::TooManyHops(hops));
                }
                if hops > 1 && cfg.transport.is_reliable() && legs.len() < hops {
                    return Err(ConfigError::HopsNeedLegs {
                        hops,
                        legs: legs.len(),
                    });
                }
                let a = match (u.rate_end, u.duration) {
                    (Some(end), Some(d)) => {
                        Arrivals::ramp(u.arrivals, u.rate, end, now, u.calls, d, &mut rng)
                    }
                    _ => Arrivals::new(u.arrivals, u.rate, now, u.calls, u.duration, &mut rng),
                };
                Some(uac::Uac::new(u.clone(), legs.clone(), a))
            }
            None => None,
        };
        let uas_leg = cfg.uas_addr.map(|a| build::LegText::new(a, cfg.transport));
        let uas = match &cfg.uas {
            Some(u) => {
                let leg = uas_leg.as_ref().ok_or(ConfigError::NoUasAddr)?;
                Some(uas::Uas::new(u.clone(), leg, "uas", &legs))
            }
            None => None,
        };
        let reg = match &cfg.register {
            Some(r) => {
                if legs.is_empty() {
                    return Err(ConfigError::NoLeg("register"));
                }
                if !(r.rate > 0.0 && r.rate.is_finite()) {
                    return Err(ConfigError::BadRate(r.rate.to_string()));
                }
                let hops = 1 + r.hops.alternates.len();
                if hops > MAX_HOPS {
                    return Err(ConfigError::TooManyHops(hops));
                }
                if hops > 1 && cfg.transport.is_reliable() {
                    return Err(ConfigError::RegisterHopsNeedUdp);
                }
                // The contact: as configured, else the UAS of this agent (calls to the users
                // must reach it), else each user's sending address (its leg).
                let contact = r
                    .contact
                    .or(cfg.uas_addr)
                    .map(|a| build::LegText::new(a, cfg.transport));
                let a = Arrivals::new(r.arrivals, r.rate, now, Some(r.count), r.duration, &mut rng);
                Some(reg::Reg::new(r.clone(), legs, a, contact.as_ref()))
            }
            None => None,
        };
        let mut rec = Recorder::new(now, cfg.interval, cfg.goodput_window);
        rec.steady_from = cfg.steady_after.and_then(|d| now.checked_add(d));
        let mut agent = Self {
            cfg,
            token: token.to_vec(),
            rng,
            rec,
            out: Outbox::default(),
            timers: TimerQueue::default(),
            limits: Limits::default(),
            uac,
            uas,
            reg,
            aborted: false,
        };
        // A run with nothing to generate has ended its load phase at once.
        if agent.uac.as_ref().is_none_or(|u| u.arrivals.is_done())
            && agent.reg.as_ref().is_none_or(|r| r.arrivals.is_done())
            && (agent.uac.is_some() || agent.reg.is_some())
        {
            agent.rec.mark_load_end(now);
        }
        Ok(agent)
    }

    /// The configuration.
    pub fn config(&self) -> &AgentConfig {
        &self.cfg
    }

    /// The measurements so far.
    pub fn recorder(&self) -> &Recorder {
        &self.rec
    }

    /// The measurements, mutably (the driver counts its send errors there).
    pub fn recorder_mut(&mut self) -> &mut Recorder {
        &mut self.rec
    }

    /// The run token in every Call-ID, tag and branch of this agent.
    pub fn token(&self) -> &[u8] {
        &self.token
    }

    /// Calls in progress (UAC and UAS).
    pub fn active(&self) -> u64 {
        self.uac.as_ref().map_or(0, |u| u.active) + self.uas.as_ref().map_or(0, |u| u.active)
    }

    /// Timer entries queued (including stale ones not yet popped): a memory figure.
    pub fn timer_entries(&self) -> usize {
        self.timers.len()
    }

    /// The addresses (`user@domain`) of the users of the registration role that a 2xx
    /// answered at least once: the registrations the registrar acknowledged.
    pub fn acked_registrations(&self) -> Vec<String> {
        match (&self.reg, &self.cfg.register) {
            (Some(r), Some(c)) => r.acked().map(|i| c.users.address(i)).collect(),
            _ => Vec::new(),
        }
    }

    /// Whether the agent has nothing more to do: arrivals over and every call and
    /// registration finished; a UAS (with or without `--register`) is done only once it has
    /// answered its call limit, and never by itself without one.
    pub fn is_done(&self) -> bool {
        if self.aborted {
            return true;
        }
        let uac = self.uac.as_ref().is_none_or(uac::Uac::is_done);
        let reg = self.reg.as_ref().is_none_or(reg::Reg::is_done);
        match (&self.uac, &self.uas) {
            // A UAS (registering its users or not) ends by its call limit only: registering
            // is how calls find it, not the end of its job.
            (None, Some(u)) => reg && u.is_done(),
            // A pair ends with its calls.
            (Some(_), Some(u)) => uac && reg && u.active == 0,
            (_, None) => uac && reg,
        }
    }

    /// Whether the arrival processes are over (the load phase ended).
    pub fn arrivals_done(&self) -> bool {
        self.uac.as_ref().is_none_or(|u| u.arrivals.is_done())
            && self.reg.as_ref().is_none_or(|r| r.arrivals.is_done())
    }

    /// Whether the load phase is over at `now`: the arrivals are, and registrations that
    /// refresh have reached the end of their `duration` (the driver's drain starts then).
    pub fn load_done(&self, now: Instant) -> bool {
        self.arrivals_done()
            && self
                .reg
                .as_ref()
                .and_then(reg::Reg::refresh_end)
                .is_none_or(|end| now >= end)
    }

    /// Stops generating: no new call or registration after `now`.
    pub fn stop_arrivals(&mut self, now: Instant) {
        if let Some(u) = self.uac.as_mut() {
            u.arrivals.stop();
        }
        if let Some(r) = self.reg.as_mut() {
            r.arrivals.stop();
        }
        self.rec.mark_load_end(now);
    }

    /// Hard stop at `now`: calls still unanswered count as failed; everything is dropped.
    pub fn abort(&mut self, now: Instant) {
        self.stop_arrivals(now);
        {
            let (mut cx, uac, uas, reg) = split!(self, now);
            if let Some(u) = uac.as_mut() {
                u.abort(&mut cx);
            }
            if let Some(r) = reg.as_mut() {
                r.abort();
            }
            if let Some(u) = uas.as_mut() {
                u.abort();
            }
        }
        self.aborted = true;
        self.rec.active = 0;
    }

    /// Handles one complete message (a datagram, or one framed from a stream) from `from`.
    pub fn handle(&mut self, now: Instant, from: Peer, data: &[u8]) {
        self.rec.tick(now);
        let Ok(msg) = Message::parse(data, &self.limits) else {
            self.rec.c.parse_errors += 1;
            return;
        };
        {
            let (mut cx, uac, uas, reg) = split!(self, now);
            match *msg.start_line() {
                StartLine::Response { code, .. } => {
                    let mine = uac
                        .as_mut()
                        .is_some_and(|u| u.handle_response(&mut cx, &msg, code, from))
                        || reg
                            .as_mut()
                            .is_some_and(|r| r.handle_response(&mut cx, &msg, code));
                    if !mine {
                        cx.rec.c.unexpected += 1;
                        let m = msg.cseq().map_or(holdline_metrics::Method::Other, |c| {
                            holdline_metrics::Method::from_bytes(c.method.as_bytes())
                        });
                        cx.rec
                            .msgs
                            .row(holdline_metrics::MsgKey::Response(code, m))
                            .unexpected += 1;
                        if m == holdline_metrics::Method::Invite && code >= 200 {
                            cx.stateless_ack(&msg, code, from);
                        }
                    }
                }
                _ => match uas.as_mut() {
                    Some(u) => u.handle_request(&mut cx, &msg, from),
                    None => {
                        cx.rec.c.unexpected += 1;
                    }
                },
            }
        }
        self.rec.active = self.active();
    }

    /// Fires every timer and arrival due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.rec.tick(now);
        {
            let (mut cx, uac, uas, reg) = split!(self, now);
            while let Some(e) = cx.timers.pop_due(now) {
                match e.kind {
                    Kind::UacA
                    | Kind::UacB
                    | Kind::UacCancel
                    | Kind::UacHold
                    | Kind::UacE
                    | Kind::UacF
                    | Kind::UacFailover
                    | Kind::UacCheck => {
                        if let Some(u) = uac.as_mut() {
                            u.fire(&mut cx, e);
                        }
                    }
                    Kind::UasRing | Kind::UasAnswer | Kind::UasG | Kind::UasH | Kind::UasCheck => {
                        if let Some(u) = uas.as_mut() {
                            u.fire(&mut cx, e);
                        }
                    }
                    Kind::RegE
                    | Kind::RegF
                    | Kind::RegRefresh
                    | Kind::RegRetry
                    | Kind::RegFailover => {
                        if let Some(r) = reg.as_mut() {
                            r.fire(&mut cx, e);
                        }
                    }
                }
            }
            if let Some(u) = uac.as_mut() {
                u.poll_arrivals(&mut cx);
            }
            if let Some(r) = reg.as_mut() {
                r.poll_arrivals(&mut cx);
            }
        }
        self.rec.active = self.active();
    }

    /// The earliest instant at which [`Agent::handle_timeout`] has work (at the latest the
    /// end of the current recorder interval, when it cuts a row).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let arrivals = [
            self.uac.as_ref().and_then(|u| u.arrivals.next()),
            self.reg.as_ref().and_then(|r| r.arrivals.next()),
            self.timers.next(),
            Some(self.rec.next_cut()),
        ];
        arrivals.into_iter().flatten().min()
    }

    /// Whether messages wait to be sent.
    pub fn has_transmits(&self) -> bool {
        self.out.cursor < self.out.meta.len()
    }

    /// Hands every waiting message to `send` (destination, bytes) and empties the queue.
    pub fn drain_transmits(&mut self, mut send: impl FnMut(&Peer, &[u8])) {
        for (peer, s, e) in &self.out.meta[self.out.cursor..] {
            send(peer, &self.out.bytes[*s..*e]);
        }
        self.out.clear();
    }
}

impl Machine for Agent {
    type Input = (Peer, Vec<u8>);
    type Event = std::convert::Infallible;

    fn handle(&mut self, now: Instant, input: Self::Input) {
        Self::handle(self, now, input.0, &input.1);
    }

    fn handle_timeout(&mut self, now: Instant) {
        Self::handle_timeout(self, now);
    }

    fn poll_transmit(&mut self, _now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let (peer, s, e) = *self.out.meta.get(self.out.cursor)?;
        buf.clear();
        buf.extend_from_slice(&self.out.bytes[s..e]);
        self.out.cursor += 1;
        if self.out.cursor == self.out.meta.len() {
            self.out.clear();
        }
        Some(Transmit {
            destination: peer,
            size: e - s,
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Self::poll_timeout(self)
    }

    fn poll_event(&mut self) -> Option<Self::Event> {
        None
    }
}
