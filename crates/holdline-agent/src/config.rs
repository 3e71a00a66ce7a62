//! Configuration of the agents: what to place, how to answer, whom to register.

use std::net::SocketAddr;

use holdline_base::{Duration, Transport};

/// RFC 3261 timer base values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timers {
    /// T1: round-trip estimate (500 ms).
    pub t1: Duration,
    /// T2: longest retransmission interval of non-INVITE requests and 2xx (4 s).
    pub t2: Duration,
    /// T4: longest time a message stays in the network (5 s).
    pub t4: Duration,
}

impl Default for Timers {
    fn default() -> Self {
        Self {
            t1: Duration::from_millis(500),
            t2: Duration::from_secs(4),
            t4: Duration::from_secs(5),
        }
    }
}

impl Timers {
    /// 64*T1: transaction timeout (Timers B, F, H).
    pub fn timeout(&self) -> Duration {
        self.t1 * 64
    }
}

/// How call arrivals are spaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArrivalKind {
    /// Exponential inter-arrival times (a Poisson process).
    Poisson,
    /// Evenly spaced arrivals.
    Constant,
}

/// How long an answered call lasts before the UAC hangs up.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Hold {
    /// Always this long (0: BYE right after the ACK, as in the papers).
    Fixed(Duration),
    /// Exponentially distributed with this mean.
    Exp(Duration),
}

/// A set of SIP users: `prefix{lo..hi}suffix@domain` expanded by number, e.g.
/// `user{0..9999}@example.com`; a pattern without braces names one user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserPattern {
    prefix: String,
    range: Option<(u64, u64)>,
    suffix: String,
    domain: String,
}

/// A pattern that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad user pattern {pattern:?}: {why} (expected e.g. user{{0..9999}}@example.com)")]
pub struct PatternError {
    /// The pattern.
    pub pattern: String,
    /// What is wrong.
    pub why: &'static str,
}

impl UserPattern {
    /// Parses `user{0..9999}@example.com` (inclusive range) or `alice@example.com`.
    pub fn parse(s: &str) -> Result<Self, PatternError> {
        let err = |why| PatternError {
            pattern: s.to_owned(),
            why,
        };
        let (user, domain) = s.rsplit_once('@').ok_or_else(|| err("no @domain"))?;
        if domain.is_empty() || domain.contains(['{', '}', ' ']) {
            return Err(err("bad domain"));
        }
        let ok_user = |u: &str| {
            u.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.!~*'+".contains(&b))
        };
        match user.split_once('{') {
            None => {
                if user.is_empty() || !ok_user(user) {
                    return Err(err("bad user part"));
                }
                Ok(Self {
                    prefix: user.to_owned(),
                    range: None,
                    suffix: String::new(),
                    domain: domain.to_owned(),
                })
            }
            Some((prefix, rest)) => {
                let (range, suffix) = rest.split_once('}').ok_or_else(|| err("unclosed {"))?;
                let (lo, hi) = range
                    .split_once("..")
                    .ok_or_else(|| err("range needs lo..hi"))?;
                let lo: u64 = lo
                    .trim()
                    .parse()
                    .map_err(|_| err("range bound is not a number"))?;
                let hi: u64 = hi
                    .trim()
                    .parse()
                    .map_err(|_| err("range bound is not a number"))?;
                if hi < lo {
                    return Err(err("range is empty"));
                }
                if !ok_user(prefix) || !ok_user(suffix) || prefix.len() + suffix.len() + 20 > 200 {
                    return Err(err("bad user part"));
                }
                Ok(Self {
                    prefix: prefix.to_owned(),
                    range: Some((lo, hi)),
                    suffix: suffix.to_owned(),
                    domain: domain.to_owned(),
                })
            }
        }
    }

    /// How many users the pattern names.
    pub fn len(&self) -> u64 {
        self.range.map_or(1, |(lo, hi)| hi - lo + 1)
    }

    /// Whether the pattern names no user (never: a pattern names at least one).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The domain.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// Appends the user part of user number `i` (taken modulo [`UserPattern::len`]).
    pub fn write_user(&self, i: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(self.prefix.as_bytes());
        if let Some((lo, _)) = self.range {
            let mut b = itoa::Buffer::new();
            out.extend_from_slice(b.format(lo + i % self.len()).as_bytes());
        }
        out.extend_from_slice(self.suffix.as_bytes());
    }

    /// User number `i` as `user@domain`.
    pub fn address(&self, i: u64) -> String {
        let mut v = Vec::new();
        self.write_user(i, &mut v);
        v.push(b'@');
        v.extend_from_slice(self.domain.as_bytes());
        String::from_utf8_lossy(&v).into_owned()
    }
}

/// The calling side.
#[derive(Clone, Debug)]
pub struct UacConfig {
    /// Where requests go (the proxy under test, or the UAS).
    pub target: SocketAddr,
    /// Callees.
    pub to: UserPattern,
    /// The caller's user name.
    pub from_user: String,
    /// Arrival process.
    pub arrivals: ArrivalKind,
    /// Calls per second.
    pub rate: f64,
    /// A ramp: the rate changes linearly from `rate` at the start to this at the end of
    /// [`duration`](Self::duration) (which it needs; `rate` may then be 0, not both).
    /// `None` (default): the rate is constant.
    pub rate_end: Option<f64>,
    /// Place at most this many calls.
    pub calls: Option<u64>,
    /// Place no call after this long.
    pub duration: Option<Duration>,
    /// Call holding time.
    pub hold: Hold,
    /// CANCEL a call that has no final response after this long.
    pub cancel_after: Option<Duration>,
    /// Never have more than this many calls in progress (arrivals beyond it are counted as
    /// `blocked`); `None` keeps the load open-loop.
    pub max_active: Option<u64>,
    /// Put `;transport=tcp` (`tls`, `sctp`) in the Request-URI when the transport is not UDP,
    /// so a proxy that follows RFC 3263 forwards over the same transport.
    pub uri_transport: bool,
    /// Further first hops besides `target`, and how calls are spread over them and fail
    /// over between them (default: `target` alone).
    pub hops: Hops,
}

/// The most first hops a UAC takes (`target` and its alternates).
pub const MAX_HOPS: usize = 8;

/// A UAC's further first hops: seed 001's loaders that pick one of several first-stage
/// servers per call, and the client side of RFC 3263 §4.3 failover (a request that times
/// out or gets `503` goes to the next hop as a new transaction).
#[derive(Clone, Debug, Default)]
pub struct Hops {
    /// First hops besides [`UacConfig::target`], which is the first; at most
    /// [`MAX_HOPS`] in all. Over a connection-oriented transport the calling legs are dealt
    /// out to the hops in turn (leg `i` is connected to hop `i mod hops`), so there must be
    /// at least as many legs as hops.
    pub alternates: Vec<SocketAddr>,
    /// Each call starts at a hop chosen uniformly at random among those not held down
    /// (seed 001's loaders); otherwise at the first hop not held down.
    pub spread: bool,
    /// Client failover: an INVITE without any response after this long, or answered `503`,
    /// is sent again, as a new transaction (new branch), to the next hop the call has not
    /// tried; the hop that failed is held down for [`hold_down`](Self::hold_down). `None`:
    /// no failover (a call fails where it started).
    pub failover_after: Option<Duration>,
    /// How long a hop that failed is avoided by new calls.
    pub hold_down: Duration,
}

/// The answering side.
#[derive(Clone, Debug)]
pub struct UasConfig {
    /// Send `100 Trying` first.
    pub trying: bool,
    /// Delay before `180 Ringing`.
    pub ring_delay: Duration,
    /// Delay from the 180 to the final response.
    pub answer_delay: Duration,
    /// Final responses and their weights (default: all 200).
    pub mix: Vec<(u16, f64)>,
    /// Stop after answering this many calls (BYE or failure), if set.
    pub calls: Option<u64>,
}

impl Default for UasConfig {
    fn default() -> Self {
        Self {
            trying: false,
            ring_delay: Duration::ZERO,
            answer_delay: Duration::ZERO,
            mix: vec![(200, 1.0)],
            calls: None,
        }
    }
}

/// REGISTER load.
#[derive(Clone, Debug)]
pub struct RegisterConfig {
    /// The registrar.
    pub registrar: SocketAddr,
    /// The users to register (one registration each).
    pub users: UserPattern,
    /// How many users (default: the pattern's size).
    pub count: u64,
    /// New registrations per second.
    pub rate: f64,
    /// Arrival process of the initial registrations.
    pub arrivals: ArrivalKind,
    /// Expires value requested.
    pub expires: u32,
    /// Re-register each user this long after its last success, until `duration` ends.
    pub refresh: Option<Duration>,
    /// No new REGISTER after this long.
    pub duration: Option<Duration>,
    /// The contact address registered (default: the agent's UAS address if it has a UAS,
    /// else the user's sending address). User `u` sends over leg `u mod legs`.
    pub contact: Option<SocketAddr>,
    /// Honour `Retry-After` in a 5xx (RFC 3261 §21.5.4, as a phone should): send the
    /// REGISTER again after that many seconds, up to this cap (a longer one is cut to it),
    /// at most [`MAX_REGISTER_RETRIES`] times per user. `None`: a 5xx ends the user's
    /// attempt (SIPp's behaviour).
    pub retry_after_cap: Option<Duration>,
    /// After a REGISTER timed out (Timer F: no answer at all, e.g. shed by an overloaded
    /// registrar or lost to a crash), send it again as a phone does (RFC 5626 §4.5): after
    /// `min(1800 s, base · 2^(k-1)) · U(0.5, 1)` for the `k`-th consecutive failure, `base`
    /// being this (RFC 5626's 30 s when every flow failed). Counted with the Retry-After
    /// retries against [`MAX_REGISTER_RETRIES`]. `None`: a timeout ends the user's attempt
    /// (SIPp's behaviour).
    pub retry_timeout_base: Option<Duration>,
    /// Further registrars besides [`registrar`](Self::registrar) (a phone configured with a
    /// primary and backup proxies): with [`Hops::failover_after`], a REGISTER without any
    /// response after that long, or answered `503`, is sent again as a new transaction to
    /// the user's next registrar, where the user then stays (its refreshes go there); the
    /// one that failed is avoided by users starting a new registration for
    /// [`Hops::hold_down`]. With [`Hops::spread`], user `u` starts at registrar `u mod n`.
    pub hops: Hops,
    /// Every `k`-th user (user numbers that are multiples of `k`) removes its binding
    /// instead of its first refresh: a REGISTER with `Expires: 0` (RFC 3261 §10.2.2), after
    /// which it sends nothing more. Needs [`refresh`](Self::refresh). `None`: nobody.
    pub deregister_every: Option<u64>,
}

/// How often one user's REGISTER is re-sent after a `Retry-After` or a timeout before the
/// generator gives that user up.
pub const MAX_REGISTER_RETRIES: u32 = 20;

/// The longest wait before a REGISTER is re-sent after timeouts (RFC 5626 §4.5's default
/// max-time).
pub const MAX_REGISTER_RETRY_WAIT: Duration = Duration::from_secs(1800);

/// The whole agent: any combination of roles sharing one recorder and one clock.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// Transport of every role.
    pub transport: Transport,
    /// Local addresses of the calling legs (one per connection or source port); requests of
    /// leg `i` leave with `Peer::conn == Some(ConnId(i))`.
    pub legs: Vec<SocketAddr>,
    /// Where the UAS listens (its Contact).
    pub uas_addr: Option<SocketAddr>,
    /// The UAC role.
    pub uac: Option<UacConfig>,
    /// The UAS role.
    pub uas: Option<UasConfig>,
    /// The registration role.
    pub register: Option<RegisterConfig>,
    /// RFC 3261 timers.
    pub timers: Timers,
    /// Row interval of the recorder.
    pub interval: Duration,
    /// Goodput window.
    pub goodput_window: Duration,
    /// Calls placed this long after the start or later also go into the steady-state PDD
    /// histogram (`pdd_steady`); `None`: none.
    pub steady_after: Option<Duration>,
    /// Seed of every random choice.
    pub seed: u64,
    /// UAC and UAS share this process's clock: the UAC stamps INVITEs and the UAS measures
    /// setup completion.
    pub shared_clock: bool,
}

impl AgentConfig {
    /// A configuration with no role, for the given transport and legs.
    pub fn new(transport: Transport, legs: Vec<SocketAddr>) -> Self {
        Self {
            transport,
            legs,
            uas_addr: None,
            uac: None,
            uas: None,
            register: None,
            timers: Timers::default(),
            interval: Duration::from_secs(1),
            goodput_window: Duration::from_secs(10),
            steady_after: None,
            seed: 1,
            shared_clock: false,
        }
    }
}
