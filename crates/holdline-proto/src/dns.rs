//! RFC 3263 resolution of next hops, sans-IO: which DNS queries to make, what their answers
//! mean, and the ordered list of targets they give.
//!
//! ```text
//!   DnsTarget (sip:proxy.example.net)       DnsCache (one per worker)
//!        │ resolve(now, target, rng)  ──>   fresh answers: Ready([peer, backup, …])
//!        │                                  missing: Pending, queries queued
//!        v                                  poll_query() ──> driver ──> DNS
//!   NAPTR name ──(SIP+D2U/D2T/D2S, SIPS+D2T; order, preference)──┐
//!     no NAPTR: _sip._udp / _sip._tcp / _sips._tcp per transport  │
//!   SRV names  ──(priority, then weighted random, RFC 2782)──────┤ handle_response(now, r)
//!     no SRV: the name itself on the transport's default port    │ (TTL clamped; negative
//!   A/AAAA    ──> (ip, port, transport) targets ─────────────────┘  answers kept briefly)
//! ```
//!
//! Nothing here does IO: the driver takes each [`DnsQuery`] from
//! [`DnsCache::poll_query`], asks a real resolver (the server uses hickory on a thread of
//! its own), and gives the answer back with [`DnsCache::handle_response`]. A query goes out
//! once per name and record type however many requests wait for it. Time and randomness
//! are the caller's (`now`, a seeded [`Rng`]), so every rule here is tested
//! deterministically.
//!
//! Answers are cached for their TTL clamped to [`DnsConfig::min_ttl`]..[`DnsConfig::max_ttl`];
//! a negative answer (no such name or no record of the type) or a failed lookup (timeout,
//! server failure) for at most [`DnsConfig::negative_ttl`] — one failed lookup never keeps a
//! name failing once it resolves again (the fault reported as Kamailio#4911). Targets whose
//! branch failed (timeout, 503, transport error) are marked with [`DnsCache::mark_failed`]
//! and go last in the lists of later requests for [`DnsConfig::failed_hold`].

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use holdline_base::{Duration, Instant, Peer, Rng, Transport};

/// Which records a [`DnsQuery`] asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QueryKind {
    /// NAPTR records (RFC 3403) of a domain.
    Naptr,
    /// SRV records (RFC 2782) of a `_service._proto.domain` name.
    Srv,
    /// The addresses of a host: A and AAAA records together.
    Addr,
}

impl fmt::Display for QueryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Naptr => "NAPTR",
            Self::Srv => "SRV",
            Self::Addr => "A/AAAA",
        })
    }
}

/// One lookup the driver must make: `kind` records of `name` (lower case, without the
/// trailing dot).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DnsQuery {
    /// The domain name.
    pub name: String,
    /// The records wanted.
    pub kind: QueryKind,
}

/// A NAPTR record (RFC 3403), as far as RFC 3263 reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NaptrRecord {
    /// Lower values first.
    pub order: u16,
    /// Lower values first, among records of the same order.
    pub preference: u16,
    /// The flags (`s`: the replacement is an SRV name).
    pub flags: String,
    /// The service (`SIP+D2U`, `SIPS+D2T`, …).
    pub services: String,
    /// The next name to look up (an SRV name with the `s` flag).
    pub replacement: String,
}

/// An SRV record (RFC 2782).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SrvRecord {
    /// Lower values first.
    pub priority: u16,
    /// Relative weight among records of the same priority.
    pub weight: u16,
    /// The port of the service on `target`.
    pub port: u16,
    /// The host (`.`: the service is not available at this domain).
    pub target: String,
}

/// The records of an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DnsRecords {
    /// NAPTR records.
    Naptr(Vec<NaptrRecord>),
    /// SRV records.
    Srv(Vec<SrvRecord>),
    /// Addresses (A and AAAA).
    Addr(Vec<IpAddr>),
}

/// What the DNS said to a [`DnsQuery`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DnsAnswer {
    /// Records, valid for `ttl` (the smallest of their TTLs).
    Records {
        /// The records.
        records: DnsRecords,
        /// Their time to live.
        ttl: Duration,
    },
    /// An authoritative "no": the name does not exist, or has no record of this type. `ttl`:
    /// how long the server says this holds (SOA minimum), if it says.
    NotFound {
        /// The negative TTL the server gave, if any.
        ttl: Option<Duration>,
    },
    /// No answer: a timeout, a server failure, a refusal, a network error.
    Failed,
}

/// A [`DnsQuery`] with its answer, given back to [`DnsCache::handle_response`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsResponse {
    /// The query answered.
    pub query: DnsQuery,
    /// The answer.
    pub answer: DnsAnswer,
}

/// The resolution's bounds and choices. Every field is documented with its default.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DnsConfig {
    /// Shortest time a positive answer is kept (a TTL of 0 would send one lookup per
    /// request). Default 1 s.
    pub min_ttl: Duration,
    /// Longest time a positive answer is kept, whatever its TTL. Default 1 hour.
    pub max_ttl: Duration,
    /// How long after its expiry an answer is still used while it is asked again (so that
    /// an expiring TTL never makes requests wait), unless that use ends in no target at all
    /// (then the request waits for the fresh answer). A lookup that fails (timeout, server
    /// failure) keeps the last records it had, asked again after
    /// [`negative_ttl`](Self::negative_ttl). Default 5 minutes.
    pub max_stale: Duration,
    /// Longest time a negative answer (no such name or record) or a failed lookup is kept:
    /// the server's negative TTL when shorter, else this. It protects the DNS server from a
    /// lookup per request for a dead name, and is the longest a name that resolves again can
    /// go on failing. Default 1 s.
    pub negative_ttl: Duration,
    /// How long a target whose branch failed (timeout, 503, transport error) goes after the
    /// others in later requests' target lists. Default 30 s.
    pub failed_hold: Duration,
    /// Most answers cached (name and record type); the soonest to expire goes first when
    /// full. Default 4096.
    pub max_entries: usize,
    /// Transports this proxy can send on, in order of preference: NAPTR services and SRV
    /// names of other transports are skipped. Default UDP, then TCP.
    pub transports: Vec<Transport>,
    /// How long a request may wait for its lookups before it is answered `503`. Default 5 s.
    pub park_timeout: Duration,
    /// Most requests waiting for one name. Default 256.
    pub max_parked_per_name: usize,
    /// Most requests waiting for DNS in all. Default 4096.
    pub max_parked: usize,
    /// Resolve the host names of Request-URIs (and of the first Route) that no route covers,
    /// instead of answering `404` (RFC 3263 for any next hop). The relay policy still
    /// applies: such a next hop is not a configured route. Default `false`.
    pub request_uris: bool,
}

impl Default for DnsConfig {
    fn default() -> Self {
        Self {
            min_ttl: Duration::from_secs(1),
            max_ttl: Duration::from_secs(3600),
            max_stale: Duration::from_secs(300),
            negative_ttl: Duration::from_secs(1),
            failed_hold: Duration::from_secs(30),
            max_entries: 4096,
            transports: vec![Transport::Udp, Transport::Tcp],
            park_timeout: Duration::from_secs(5),
            max_parked_per_name: 256,
            max_parked: 4096,
            request_uris: false,
        }
    }
}

/// A next hop given by name: `sip:HOST[:PORT][;transport=T]` or `sips:HOST[:PORT]`. Without a
/// port or transport it is resolved with NAPTR, SRV and A/AAAA (RFC 3263 §4); with a
/// transport, SRV then A/AAAA; with a port, A/AAAA only.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DnsTarget {
    /// The host (lower case, no trailing dot), a name or an IP address.
    pub host: String,
    /// An explicit port.
    pub port: Option<u16>,
    /// An explicit transport (`;transport=`).
    pub transport: Option<Transport>,
    /// `sips:` (TLS only).
    pub secure: bool,
}

/// Why a string is not a [`DnsTarget`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DnsTargetError {
    /// It does not start with `sip:` or `sips:`.
    #[error("`{0}`: expected sip:HOST[:PORT][;transport=udp|tcp|tls] or sips:HOST[:PORT]")]
    Scheme(String),
    /// The host is empty or has characters a domain name cannot have.
    #[error("`{0}`: bad host name")]
    Host(String),
    /// The port is not a number from 1 to 65535.
    #[error("`{0}`: bad port")]
    Port(String),
    /// An unknown transport, a parameter other than `transport`, or TLS-less `sips:`.
    #[error("`{0}`: bad parameter (only transport=udp|tcp|tls; sips: is TLS)")]
    Param(String),
}

impl FromStr for DnsTarget {
    type Err = DnsTargetError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        let (secure, rest) = if let Some(r) = lower.strip_prefix("sips:") {
            (true, r)
        } else if let Some(r) = lower.strip_prefix("sip:") {
            (false, r)
        } else {
            return Err(DnsTargetError::Scheme(s.to_owned()));
        };
        let mut parts = rest.split(';');
        let hostport = parts.next().unwrap_or_default();
        let mut transport = None;
        for p in parts {
            let t = p
                .strip_prefix("transport=")
                .and_then(|t| Transport::from_token(t.as_bytes()))
                .filter(|t| *t != Transport::Sctp)
                .ok_or_else(|| DnsTargetError::Param(s.to_owned()))?;
            transport = Some(t);
        }
        if secure && transport.is_some_and(|t| t != Transport::Tls) {
            return Err(DnsTargetError::Param(s.to_owned()));
        }
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (ip, tail) = v6
                .split_once(']')
                .ok_or_else(|| DnsTargetError::Host(s.to_owned()))?;
            let port = match tail.strip_prefix(':') {
                Some(p) => Some(p),
                None if tail.is_empty() => None,
                None => return Err(DnsTargetError::Host(s.to_owned())),
            };
            ip.parse::<std::net::Ipv6Addr>()
                .map_err(|_| DnsTargetError::Host(s.to_owned()))?;
            (ip, port)
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        let port = match port {
            Some(p) => Some(
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| DnsTargetError::Port(s.to_owned()))?,
            ),
            None => None,
        };
        let host = host.strip_suffix('.').unwrap_or(host);
        // A ':' only inside brackets (an IPv6 address, checked above).
        let bracketed = hostport.starts_with('[');
        let valid = !host.is_empty()
            && host.len() <= 253
            && host.bytes().all(|b| {
                b.is_ascii_alphanumeric()
                    || matches!(b, b'-' | b'.' | b'_')
                    || (bracketed && b == b':')
            });
        if !valid {
            return Err(DnsTargetError::Host(s.to_owned()));
        }
        Ok(Self {
            host: host.to_owned(),
            port,
            transport,
            secure,
        })
    }
}

impl DnsTarget {
    /// The target a SIP URI names when its host is a name (not an IP address): its port,
    /// its `transport=` parameter, `sips:` for TLS. `None` for an IP address, another scheme,
    /// or a host that is not a valid name.
    pub fn from_uri(uri: &holdline_sip::Uri<'_>) -> Option<Self> {
        let host = uri.host()?;
        let name = host.name()?;
        let name = std::str::from_utf8(name).ok()?;
        let secure = match uri.scheme() {
            holdline_sip::Scheme::Sip => false,
            holdline_sip::Scheme::Sips => true,
            _ => return None,
        };
        let transport = uri.transport().filter(|t| *t != Transport::Sctp);
        if secure && transport.is_some_and(|t| t != Transport::Tls) {
            return None;
        }
        let host = name.trim_end_matches('.').to_ascii_lowercase();
        let valid = !host.is_empty()
            && host.len() <= 253
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
        valid.then_some(Self {
            host,
            port: uri.port(),
            transport,
            secure,
        })
    }
}

impl fmt::Display for DnsTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.secure { "sips:" } else { "sip:" })?;
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        if let Some(t) = self.transport.filter(|_| !self.secure) {
            write!(f, ";transport={}", t.as_param_str())?;
        }
        Ok(())
    }
}

/// What [`DnsCache::resolve`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// The targets, in the order to try them (the first, then the next on failure).
    Ready(Vec<Peer>),
    /// Lookups are under way (queued for [`DnsCache::poll_query`] or in flight): ask again
    /// after the next [`DnsCache::handle_response`].
    Pending,
    /// The name leads nowhere now (no records, or every lookup failed).
    Failed,
}

/// The cache's counters (monotonic unless noted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DnsStats {
    /// Queries handed to the driver.
    pub queries: u64,
    /// Answers with records.
    pub answers: u64,
    /// Negative answers (no such name or record).
    pub not_found: u64,
    /// Failed lookups (timeout, server failure).
    pub failures: u64,
    /// Resolutions answered from the cache alone.
    pub cache_hits: u64,
    /// Resolutions that had to wait for a lookup.
    pub cache_misses: u64,
    /// Targets marked failed ([`DnsCache::mark_failed`]).
    pub targets_marked: u64,
    /// Cached answers (a gauge).
    pub entries: u64,
}

/// What is known of one name and record type.
#[derive(Clone, Debug)]
enum Data {
    /// Not answered yet.
    Unknown,
    /// Records.
    Records(DnsRecords),
    /// No records (a negative answer or a failed lookup).
    Nothing,
}

#[derive(Clone, Debug)]
struct Entry {
    data: Data,
    /// Fresh until then; stale (used while it is asked again) until `expires + max_stale`.
    expires: Instant,
    /// Asked, the answer awaited until then (asked again after it).
    asked_until: Option<Instant>,
}

/// What one lookup step found.
enum Step {
    Have(DnsRecords),
    Nothing,
    Missing,
}

/// RFC 3263 resolution with a TTL cache, for one worker. See the [module documentation](self).
#[derive(Debug)]
pub struct DnsCache {
    config: DnsConfig,
    entries: BTreeMap<(String, QueryKind), Entry>,
    queries: VecDeque<DnsQuery>,
    /// Targets whose branch failed, until when they go last.
    failed: BTreeMap<(SocketAddr, Transport), Instant>,
    stats: DnsStats,
    /// Whether the resolution in progress waits for anything.
    missed: bool,
    /// Whether the resolution in progress used an expired answer.
    used_stale: bool,
}

impl DnsCache {
    /// An empty cache with `config`.
    pub fn new(config: DnsConfig) -> Self {
        Self {
            config,
            entries: BTreeMap::new(),
            queries: VecDeque::new(),
            failed: BTreeMap::new(),
            stats: DnsStats::default(),
            missed: false,
            used_stale: false,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DnsConfig {
        &self.config
    }

    /// The counters.
    pub fn stats(&self) -> DnsStats {
        DnsStats {
            entries: self.entries.len() as u64,
            ..self.stats
        }
    }

    /// The next lookup the driver must make, or `None`.
    #[must_use]
    pub fn poll_query(&mut self) -> Option<DnsQuery> {
        self.queries.pop_front()
    }

    /// Resolves `target` from the cache: the targets in the order to try them, or
    /// [`Resolution::Pending`] with the lookups it needs queued (once per name and type,
    /// however many requests ask), or [`Resolution::Failed`]. `rng` orders SRV records of
    /// equal priority by weight (RFC 2782), anew for every call.
    pub fn resolve(&mut self, now: Instant, target: &DnsTarget, rng: &mut Rng) -> Resolution {
        self.missed = false;
        self.used_stale = false;
        let mut r = self.walk(now, target, rng);
        // Expired answers that lead nowhere are not trusted: wait for the fresh ones (a name
        // that resolves again works for the very request that asks again).
        if r == Resolution::Failed && self.used_stale {
            r = Resolution::Pending;
        }
        match r {
            Resolution::Pending => self.stats.cache_misses += 1,
            _ if !self.missed => self.stats.cache_hits += 1,
            _ => {}
        }
        r
    }

    /// Whether `target` still waits for lookups ([`resolve`](Self::resolve) would say
    /// [`Resolution::Pending`]), without counting a resolution; queues the lookups it needs
    /// next, as `resolve` does.
    pub fn is_pending(&mut self, now: Instant, target: &DnsTarget, rng: &mut Rng) -> bool {
        self.missed = false;
        self.used_stale = false;
        let r = self.walk(now, target, rng);
        r == Resolution::Pending || (r == Resolution::Failed && self.used_stale)
    }

    /// Takes the answer to a query: cached with its TTL clamped (a negative one or a failure
    /// for at most [`DnsConfig::negative_ttl`]).
    pub fn handle_response(&mut self, now: Instant, response: DnsResponse) {
        let DnsResponse { query, answer } = response;
        let key = (query.name, query.kind);
        let neg = self.config.negative_ttl;
        let (data, ttl) = match answer {
            DnsAnswer::Records { records, ttl } => {
                self.stats.answers += 1;
                let max = self.config.max_ttl.max(self.config.min_ttl);
                (Data::Records(records), ttl.clamp(self.config.min_ttl, max))
            }
            DnsAnswer::NotFound { ttl } => {
                self.stats.not_found += 1;
                (Data::Nothing, ttl.map_or(neg, |t| t.min(neg)))
            }
            DnsAnswer::Failed => {
                self.stats.failures += 1;
                // A failed refresh keeps the records it had (asked again after `neg`).
                let old = match self.entries.get(&key).map(|e| &e.data) {
                    Some(Data::Records(r)) => Data::Records(r.clone()),
                    _ => Data::Nothing,
                };
                (old, neg)
            }
        };
        let entry = Entry {
            data,
            expires: now + ttl,
            asked_until: None,
        };
        self.insert(key, entry, now);
    }

    /// A branch to `peer` failed (timeout, 503, transport error): it goes after the other
    /// targets of later resolutions for [`DnsConfig::failed_hold`].
    pub fn mark_failed(&mut self, now: Instant, peer: &Peer) {
        self.stats.targets_marked += 1;
        if self.failed.len() >= self.config.max_entries.max(1) {
            self.failed.retain(|_, until| *until > now);
            if self.failed.len() >= self.config.max_entries.max(1) {
                return;
            }
        }
        self.failed
            .insert((peer.addr, peer.transport), now + self.config.failed_hold);
    }

    /// Whether `peer` is marked failed at `now`.
    pub fn is_marked_failed(&self, now: Instant, peer: &Peer) -> bool {
        self.failed
            .get(&(peer.addr, peer.transport))
            .is_some_and(|until| *until > now)
    }

    fn insert(&mut self, key: (String, QueryKind), entry: Entry, now: Instant) {
        let max = self.config.max_entries.max(1);
        if !self.entries.contains_key(&key) && self.entries.len() >= max {
            let stale = self.config.max_stale;
            self.entries
                .retain(|_, e| e.asked_until.is_some_and(|u| u > now) || e.expires + stale > now);
            if self.entries.len() >= max {
                // The soonest to expire goes (never one asked: its answer is awaited).
                let victim = self
                    .entries
                    .iter()
                    .filter(|(_, e)| e.asked_until.is_none())
                    .map(|(k, e)| (e.expires, k.clone()))
                    .min();
                match victim {
                    Some((_, k)) => {
                        self.entries.remove(&k);
                    }
                    None => return,
                }
            }
        }
        self.entries.insert(key, entry);
    }

    /// One lookup: the cached records, nothing, or missing. A missing or expired answer is
    /// asked for (unless it already is); an expired one is used meanwhile, up to
    /// [`DnsConfig::max_stale`].
    fn step(&mut self, now: Instant, name: &str, kind: QueryKind) -> Step {
        let key = (name.to_owned(), kind);
        let (found, asked) = match self.entries.get(&key) {
            Some(e) => {
                let usable = match &e.data {
                    Data::Unknown => None,
                    _ if e.expires + self.config.max_stale <= now => None,
                    Data::Records(r) => Some((Step::Have(r.clone()), e.expires > now)),
                    Data::Nothing => Some((Step::Nothing, e.expires > now)),
                };
                (usable, e.asked_until.is_some_and(|u| u > now))
            }
            None => (None, false),
        };
        if let Some((step, true)) = found {
            return step;
        }
        if !asked {
            self.stats.queries += 1;
            self.queries.push_back(DnsQuery {
                name: name.to_owned(),
                kind,
            });
            // An answer that never comes (a driver that lost it) is asked again after this.
            let until = now + self.config.park_timeout;
            match self.entries.get_mut(&key) {
                Some(e) => e.asked_until = Some(until),
                None => self.insert(
                    key,
                    Entry {
                        data: Data::Unknown,
                        expires: now,
                        asked_until: Some(until),
                    },
                    now,
                ),
            }
        }
        match found {
            Some((step, _)) => {
                self.used_stale = true;
                step
            }
            None => {
                self.missed = true;
                Step::Missing
            }
        }
    }

    fn supported(&self, secure: bool) -> Vec<Transport> {
        if secure {
            return vec![Transport::Tls];
        }
        self.config.transports.clone()
    }

    fn walk(&mut self, now: Instant, t: &DnsTarget, rng: &mut Rng) -> Resolution {
        let default_tr = if t.secure {
            Transport::Tls
        } else {
            Transport::Udp
        };
        if let Ok(ip) = t.host.parse::<IpAddr>() {
            let tr = t.transport.unwrap_or(default_tr);
            let port = t.port.unwrap_or_else(|| tr.default_port());
            return Resolution::Ready(vec![peer(ip, port, tr)]);
        }
        // Step 1 (RFC 3263 §4.1): the transport, and the SRV names to look up.
        let hosts: Vec<(String, u16, Transport)> = if let Some(port) = t.port {
            vec![(t.host.clone(), port, t.transport.unwrap_or(default_tr))]
        } else {
            let candidates = match t.transport {
                Some(tr) => vec![(tr, srv_name(tr, t.secure, &t.host))],
                None => match self.step(now, &t.host, QueryKind::Naptr) {
                    Step::Missing => return Resolution::Pending,
                    Step::Have(DnsRecords::Naptr(recs)) => {
                        let c = naptr_candidates(&recs, &self.supported(t.secure));
                        if c.is_empty() {
                            self.srv_candidates(&t.host, t.secure)
                        } else {
                            c
                        }
                    }
                    _ => self.srv_candidates(&t.host, t.secure),
                },
            };
            // Step 2 (§4.2): SRV records, all names asked at once.
            let mut pending = false;
            let mut hosts = Vec::new();
            for (tr, name) in &candidates {
                match self.step(now, name, QueryKind::Srv) {
                    Step::Missing => pending = true,
                    Step::Have(DnsRecords::Srv(recs)) => {
                        for r in order_srv(&recs, rng) {
                            // `.`: the service is not offered there.
                            let host = r.target.trim_end_matches('.').to_ascii_lowercase();
                            if !host.is_empty() {
                                hosts.push((host, r.port, *tr));
                            }
                        }
                    }
                    _ => {}
                }
            }
            if pending {
                return Resolution::Pending;
            }
            if hosts.is_empty() {
                // No SRV: the name itself on the default port of the transport chosen.
                let tr = t.transport.unwrap_or(default_tr);
                hosts.push((t.host.clone(), tr.default_port(), tr));
            }
            hosts
        };
        // Step 3: the addresses of every host, all asked at once.
        let mut pending = false;
        let mut peers: Vec<Peer> = Vec::new();
        for (host, port, tr) in &hosts {
            if let Ok(ip) = host.parse::<IpAddr>() {
                peers.push(peer(ip, *port, *tr));
                continue;
            }
            match self.step(now, host, QueryKind::Addr) {
                Step::Missing => pending = true,
                Step::Have(DnsRecords::Addr(ips)) => {
                    peers.extend(ips.iter().map(|ip| peer(*ip, *port, *tr)));
                }
                _ => {}
            }
        }
        if pending {
            return Resolution::Pending;
        }
        let mut seen = Vec::with_capacity(peers.len());
        peers.retain(|p| {
            let k = (p.addr, p.transport);
            if seen.contains(&k) {
                false
            } else {
                seen.push(k);
                true
            }
        });
        if peers.is_empty() {
            return Resolution::Failed;
        }
        // Targets that failed lately go last (and are tried only if the rest fail too).
        let (mut ok, bad): (Vec<Peer>, Vec<Peer>) = peers
            .into_iter()
            .partition(|p| !self.is_marked_failed(now, p));
        ok.extend(bad);
        Resolution::Ready(ok)
    }

    /// Without NAPTR: an SRV name per supported transport, in order of preference.
    fn srv_candidates(&self, host: &str, secure: bool) -> Vec<(Transport, String)> {
        self.supported(secure)
            .into_iter()
            .map(|tr| (tr, srv_name(tr, secure, host)))
            .collect()
    }
}

fn peer(ip: IpAddr, port: u16, transport: Transport) -> Peer {
    Peer {
        addr: SocketAddr::new(ip, port),
        transport,
        conn: None,
    }
}

/// The SRV name of `host` for `transport` (RFC 3263 §4.2): `_sip._udp`, `_sip._tcp`,
/// `_sips._tcp` (TLS, and every `sips:` target), `_sip._sctp`.
pub fn srv_name(transport: Transport, secure: bool, host: &str) -> String {
    let (service, proto) = match transport {
        Transport::Tls => ("_sips", "_tcp"),
        Transport::Tcp if secure => ("_sips", "_tcp"),
        Transport::Tcp => ("_sip", "_tcp"),
        Transport::Sctp => ("_sip", "_sctp"),
        _ => ("_sip", "_udp"),
    };
    format!("{service}.{proto}.{host}")
}

/// The transport of a NAPTR service field (RFC 3263 §4.1), if it is one of SIP's.
pub fn naptr_service_transport(service: &str) -> Option<Transport> {
    match service.to_ascii_uppercase().as_str() {
        "SIP+D2U" => Some(Transport::Udp),
        "SIP+D2T" => Some(Transport::Tcp),
        "SIPS+D2T" => Some(Transport::Tls),
        "SIP+D2S" => Some(Transport::Sctp),
        _ => None,
    }
}

/// The usable NAPTR records in order (order, then preference): SIP services of a
/// `supported` transport with the `s` flag, as (transport, SRV name).
pub fn naptr_candidates(
    records: &[NaptrRecord],
    supported: &[Transport],
) -> Vec<(Transport, String)> {
    let mut usable: Vec<(u16, u16, Transport, String)> = records
        .iter()
        .filter(|r| r.flags.eq_ignore_ascii_case("s"))
        .filter_map(|r| {
            let tr = naptr_service_transport(&r.services)?;
            let name = r.replacement.trim_end_matches('.').to_ascii_lowercase();
            (supported.contains(&tr) && !name.is_empty()).then_some((
                r.order,
                r.preference,
                tr,
                name,
            ))
        })
        .collect();
    // Stable: records of equal order and preference keep the server's order.
    usable.sort_by_key(|u| (u.0, u.1));
    usable.into_iter().map(|u| (u.2, u.3)).collect()
}

/// SRV records in the order to try them (RFC 2782): by priority, lower first; within a
/// priority, a weighted random order — each next record is drawn with probability
/// proportional to its weight among those left (records of weight 0 have a small chance,
/// placed first before the running sums as the RFC says).
pub fn order_srv<'a>(records: &'a [SrvRecord], rng: &mut Rng) -> Vec<&'a SrvRecord> {
    let mut by_priority: Vec<&SrvRecord> = records.iter().collect();
    by_priority.sort_by_key(|r| r.priority);
    let mut out = Vec::with_capacity(records.len());
    let mut i = 0;
    while i < by_priority.len() {
        let prio = by_priority[i].priority;
        let mut group: Vec<&SrvRecord> = by_priority[i..]
            .iter()
            .take_while(|r| r.priority == prio)
            .copied()
            .collect();
        i += group.len();
        // Weight 0 first (stable otherwise).
        group.sort_by_key(|r| r.weight != 0);
        while !group.is_empty() {
            let total: u64 = group.iter().map(|r| u64::from(r.weight)).sum();
            let pick = rng.below(total + 1);
            let mut running = 0;
            let mut chosen = group.len() - 1;
            for (k, r) in group.iter().enumerate() {
                running += u64::from(r.weight);
                if running >= pick {
                    chosen = k;
                    break;
                }
            }
            out.push(group.remove(chosen));
        }
    }
    out
}

#[cfg(test)]
mod tests;
