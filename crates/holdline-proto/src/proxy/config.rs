//! [`ProxyConfig`]: what the proxy core serves, where it listens and where it routes.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use holdline_base::{Duration, Peer, Transport};
use holdline_sip::{Limits, OcOffer};

use crate::auth::AuthConfig;
use crate::registrar::RegistrarConfig;
use crate::txn::TxnConfig;

/// One address the server listens on: how it names itself in Via, Record-Route and when
/// deciding whether a URI means "this proxy".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ListenAddr {
    /// The transport of this listener.
    pub transport: Transport,
    /// The address as advertised (a concrete address, not `0.0.0.0`).
    pub addr: SocketAddr,
}

/// The target edge a route names for end-to-end overload control (seed 003's DEOC): the
/// egress edge server its calls leave the network by, however many hops away. A number
/// derived from the name (64-bit FNV-1a), so that every worker and every reload give the same
/// name the same number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EdgeId(pub u64);

impl EdgeId {
    /// The number of the edge named `name`.
    pub fn of(name: &str) -> Self {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.as_bytes() {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        Self(h)
    }

    /// The edge at `addr`, learned from a Record-Route rather than named
    /// ([`ProxyConfig::learn_edges`]). An IPv4 address is kept in the number, readable with
    /// [`address`](Self::address) (for metrics); any other is hashed as `[ip]:port`.
    pub fn at(addr: SocketAddr) -> Self {
        match addr.ip() {
            IpAddr::V4(v4) => Self(
                (LEARNED_MARK << 48) | (u64::from(u32::from(v4)) << 16) | u64::from(addr.port()),
            ),
            IpAddr::V6(_) => Self::of(&addr.to_string()),
        }
    }

    /// The address of an edge learned by [`at`](Self::at) (IPv4), if this number is one;
    /// the top bit is ignored (a driver may use it to keep edges apart from other targets).
    /// A named edge's number reads as an address with a chance of 2⁻¹⁵.
    pub fn address(self) -> Option<SocketAddr> {
        ((self.0 >> 48) & 0x7fff == LEARNED_MARK).then(|| {
            let ip = Ipv4Addr::from(((self.0 >> 16) & 0xffff_ffff) as u32);
            SocketAddr::new(ip.into(), (self.0 & 0xffff) as u16)
        })
    }
}

/// Bits 48-62 of an [`EdgeId::at`] number.
const LEARNED_MARK: u64 = 0x5252;

/// A static route: requests whose Request-URI host is `domain` (or any host, for `*`) go to
/// `next_hop` over `transport`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticRoute {
    /// The Request-URI host this route applies to (compared case-insensitively), or `*` for
    /// the default route (used when no other route matches).
    pub domain: String,
    /// Where matching requests are sent.
    pub next_hop: SocketAddr,
    /// The transport towards `next_hop`.
    pub transport: Transport,
    /// Forward matching requests statelessly (RFC 3261 §16.11): no transactions, a branch
    /// derived from the incoming one, responses routed back by their Via.
    pub stateless: bool,
    /// The target edge of its calls for end-to-end overload control (`None`: the next hop
    /// is the target).
    pub edge: Option<EdgeId>,
}

/// A route to a next hop given by DNS name (RFC 3263): requests whose Request-URI host is
/// `domain` (or any host, for `*`) go to the targets `target` resolves to, in order, each
/// next one tried in a new branch of the same transaction when one fails (a 503, a timeout,
/// a transport error). Always stateful.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsRoute {
    /// The Request-URI host this route applies to (compared case-insensitively), or `*`.
    pub domain: String,
    /// The next hop's name (`sip:proxy.example.net`).
    pub target: crate::dns::DnsTarget,
    /// The target edge of its calls for end-to-end overload control (`None`: the next hop
    /// is the target).
    pub edge: Option<EdgeId>,
}

/// Identifier-based load sharing (seed 001): requests for `domain` (or every domain, `*`)
/// go to one of `targets`, chosen by rendezvous hashing of the user's address-of-record
/// ([`crate::hrw`]): the Request-URI's, or the To URI's when the Request-URI has no user
/// part (a REGISTER), so a user's registrations and the calls to it reach the same target.
#[derive(Clone, Debug, PartialEq)]
pub struct HashRoute {
    /// The Request-URI host this route applies to (compared case-insensitively), or `*`.
    pub domain: String,
    /// The destinations (at least one).
    pub targets: Vec<HashTarget>,
    /// A request whose target answered 503, timed out or failed to send goes to the user's
    /// next target in the same transaction (RFC 3263 §4.3). Right when the targets share
    /// the users' registrations (a replicated or shared store: seed 001's clusters); wrong
    /// when each target holds only its own users, where the next target can only answer
    /// 404 and a passing overload (503) would reach the caller as "no such user". A target
    /// that probing found down is passed over either way.
    pub failover: bool,
    /// The target edge of its calls for end-to-end overload control (`None`: the next hop
    /// is the target).
    pub edge: Option<EdgeId>,
    /// How an initial request's target is picked (default [`Pick::Hash`]).
    pub pick: Pick,
}

/// How a [`HashRoute`] picks the target of an initial request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pick {
    /// Rendezvous hashing of the user's address-of-record: a user's requests reach the same
    /// target from every server configured alike (seed 001's identifier-based sharing).
    #[default]
    Hash,
    /// Each request to the next target in turn, by weight (smooth weighted round-robin):
    /// the most even spread of the load when any target can serve any user (seed 003's
    /// load balancing, l. 301; Kamailio dispatcher's algorithm 4). A dialog's later
    /// requests follow Record-Route, or the Call-ID's hash through a cluster's name.
    RoundRobin,
}

/// One destination of a [`HashRoute`].
#[derive(Clone, Debug, PartialEq)]
pub struct HashTarget {
    /// Where its requests are sent (unused when [`name`](Self::name) is set).
    pub next_hop: SocketAddr,
    /// The transport towards `next_hop` (unused when [`name`](Self::name) is set).
    pub transport: Transport,
    /// Its identity and weight in the hash: the identity is the target as configured
    /// (`udp:10.0.0.1:5060`, `sip:cluster1.example.net`), the same on every node that
    /// shares the set.
    pub node: crate::hrw::HrwNode,
    /// A name resolved with DNS (RFC 3263) instead of `next_hop`: the users this target
    /// gets go to its resolved targets in order, then to the next target's. Not probed.
    pub name: Option<crate::dns::DnsTarget>,
}

impl HashTarget {
    /// `transport:addr` with `weight`, its identity the text `transport:addr`.
    pub fn new(next_hop: SocketAddr, transport: Transport, weight: f64) -> Self {
        let id = format!("{}:{next_hop}", transport.as_param_str());
        Self {
            next_hop,
            transport,
            node: crate::hrw::HrwNode::new(id, weight),
            name: None,
        }
    }

    /// A name resolved with DNS, with `weight`, its identity the name's text
    /// (`sip:cluster1.example.net`).
    pub fn named(name: crate::dns::DnsTarget, weight: f64) -> Self {
        Self {
            next_hop: SocketAddr::from(([0, 0, 0, 0], 0)),
            transport: Transport::Udp,
            node: crate::hrw::HrwNode::new(name.to_string(), weight),
            name: Some(name),
        }
    }
}

/// How the targets of load-sharing routes are probed (see [`ProxyConfig::probe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeConfig {
    /// Time between two probes of a target.
    pub interval: Duration,
    /// A probe without a final response after this long has failed.
    pub timeout: Duration,
    /// Failed probes in a row that take a target down.
    pub down_after: u32,
}

impl Default for ProbeConfig {
    /// Every second, failed after 500 ms, down after 2 failures: a dead target is out of its
    /// users' way within about 2 s.
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            down_after: 2,
        }
    }
}

/// How the proxy forwards the requests it can forward without state (see
/// [`ProxyConfig::mode`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ProxyMode {
    /// Every proxied request goes through a server transaction and a client transaction per
    /// branch (RFC 3261 §16), except on static routes flagged
    /// [`stateless`](StaticRoute::stateless). The default.
    #[default]
    Stateful,
    /// Seed 001's stateless first stage with stateful fallback: requests routed by a
    /// [`HashRoute`] (initial requests, and in-dialog requests whose Route names a host a
    /// load-sharing route covers) and the in-dialog requests of dialogs this proxy
    /// record-routed are forwarded without a transaction (RFC 3261 §16.11) when they come in
    /// and go out over UDP: one target (the user's highest-ranked one that probing has not
    /// taken down), a branch computed from the request, responses relayed by their Via. No failover within a request: the
    /// caller's retransmission, routed again, reaches the next target once probing took the
    /// first down. A request that needs state (see
    /// [`StatelessFallback`](crate::StatelessFallback)) is handled statefully.
    Stateless,
    /// A redirect server (RFC 3261 §8.3; seed 001's redirect policy, l. 45 and 346): an
    /// initial request other than REGISTER (which the registrar takes as ever) is not
    /// proxied but answered `302 Moved Temporarily` with a Contact for each target it would
    /// have gone to — the user's bindings from the location service, or the host a
    /// load-sharing route, static route or DNS route picks for it (the Request-URI with
    /// that host and port), its failover order as decreasing `q` values. Requests within a
    /// dialog and requests with a Route to follow are proxied (a redirect server is not on
    /// the dialog's path, so these are rare).
    Redirect,
}

impl ProxyMode {
    /// The configuration text: `stateful`, `stateless` or `redirect`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stateful => "stateful",
            Self::Stateless => "stateless",
            Self::Redirect => "redirect",
        }
    }
}

impl fmt::Display for ProxyMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a string is not a [`ProxyMode`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a mode (expected \"stateful\", \"stateless\" or \"redirect\")")]
pub struct ProxyModeError(String);

impl FromStr for ProxyMode {
    type Err = ProxyModeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "stateful" => Ok(Self::Stateful),
            "stateless" => Ok(Self::Stateless),
            "redirect" => Ok(Self::Redirect),
            _ => Err(ProxyModeError(s.to_owned())),
        }
    }
}

/// An IP network: an address and a prefix length (`10.0.0.0/8`, `2001:db8::/32`; a bare
/// address is a single host).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpNet {
    addr: IpAddr,
    prefix: u8,
}

impl IpNet {
    /// The network of `addr` with `prefix` bits (at most 32 for IPv4, 128 for IPv6); `None`
    /// when the prefix is too long. Host bits of `addr` are ignored.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Self> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        (prefix <= max).then_some(Self { addr, prefix })
    }

    /// Whether `ip` is in this network (an IPv4-mapped IPv6 address counts as its IPv4
    /// address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }

    /// The loopback networks, `127.0.0.0/8` and `::1/128`.
    pub fn loopback() -> [Self; 2] {
        [
            Self {
                addr: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)),
                prefix: 8,
            },
            Self {
                addr: IpAddr::V6(Ipv6Addr::LOCALHOST),
                prefix: 128,
            },
        ]
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Why a string is not an [`IpNet`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an IP network (ADDRESS or ADDRESS/PREFIX, e.g. 10.0.0.0/8)")]
pub struct IpNetError(String);

impl FromStr for IpNet {
    type Err = IpNetError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || IpNetError(s.to_owned());
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr.trim().parse().map_err(|_| bad())?;
        let prefix = match prefix {
            Some(p) => p.trim().parse().map_err(|_| bad())?,
            None if addr.is_ipv4() => 32,
            None => 128,
        };
        Self::new(addr, prefix).ok_or_else(bad)
    }
}

/// Which requests the proxy relays to next hops it does not serve itself (an open relay lets
/// anyone reach any host through it: toll fraud, spam, hiding the sender).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelayPolicy {
    /// Relay everything routable (holdline before issue 13).
    Open,
    /// Relay only requests for a served domain or this proxy (the location service), requests
    /// that a configured static route covers (an exact domain or `*`), in-dialog requests
    /// (To tag) that came through this proxy's own Record-Route, and any request from a
    /// trusted source; answer `403` to the rest.
    Restricted {
        /// Sources trusted to relay anywhere.
        trusted: Vec<IpNet>,
    },
}

impl Default for RelayPolicy {
    /// Restricted, trusting loopback only.
    fn default() -> Self {
        Self::Restricted {
            trusted: IpNet::loopback().to_vec(),
        }
    }
}

impl RelayPolicy {
    /// Whether requests from `ip` may be relayed anywhere.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        match self {
            Self::Open => true,
            Self::Restricted { trusted } => trusted.iter().any(|n| n.contains(ip)),
        }
    }
}

/// The proxy core's configuration. Build it with [`ProxyConfig::default`] and fill in the
/// fields; every field is documented with its default.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProxyConfig {
    /// Domains this server is responsible for: requests whose Request-URI host is one of them
    /// are routed through the location service, and REGISTERs for them go to the registrar.
    /// Compared case-insensitively. Default: none.
    pub domains: Vec<String>,
    /// Hosts that also mean "this proxy" (besides the [`listen`](Self::listen) addresses):
    /// `host` (a name, compared case-insensitively, or an IP address), `host:port` or
    /// `[v6]:port` ([`check_host_port`] tells a good one). A Request-URI or Route naming one is
    /// ours (a Route is popped, RFC 3261 §16.4, never forwarded to); without a port an alias
    /// counts with any of the listeners' ports or none, with one only with that port or none.
    /// Default: none.
    pub aliases: Vec<String>,
    /// The `host[:port]` this proxy writes into its Record-Route instead of its listener's
    /// address (the transport parameter stays the listener's): a cluster's name, so that the
    /// in-dialog requests of the dialogs it record-routes may reach any server of the cluster
    /// (the first stage routes the name through its load-sharing route, with failover). It is
    /// an alias too ([`aliases`](Self::aliases)). Default `None`: the listener's address.
    pub record_route_host: Option<String>,
    /// The server's listening addresses, one per transport at least: the first listener of a
    /// transport is used as sent-by and in Record-Route for messages leaving over it.
    /// Default: `127.0.0.1:5060` over UDP.
    pub listen: Vec<ListenAddr>,
    /// The machine's own addresses (all interfaces): a listener on an unspecified address
    /// (`0.0.0.0`, `::`) answers to each of them, so a Request-URI or Route naming one of them
    /// means this proxy. The driver fills it in; loopback addresses always count. Default:
    /// none.
    pub host_addresses: Vec<IpAddr>,
    /// Whether to add a Record-Route header to dialog-creating requests (so that in-dialog
    /// requests come back through this proxy). Default `true`.
    pub record_route: bool,
    /// Static routes, tried for requests the location service does not handle: an exact
    /// domain first, then `*`. Default: none.
    pub static_routes: Vec<StaticRoute>,
    /// Load-sharing routes ([`HashRoute`]), tried before the static routes for requests the
    /// location service does not handle: an exact domain first, then `*`. Default: none.
    pub hash_routes: Vec<HashRoute>,
    /// Routes to next hops given by DNS name ([`DnsRoute`]), resolved with RFC 3263: an
    /// exact domain is tried after an exact static route, `*` after the `*` static route.
    /// Default: none.
    pub dns_routes: Vec<DnsRoute>,
    /// How DNS names are resolved and cached. Default [`DnsConfig::default`](crate::dns::DnsConfig).
    pub dns: crate::dns::DnsConfig,
    /// Whether the requests load-sharing routes carry (and the in-dialog requests of the
    /// dialogs this proxy record-routed) are forwarded without transactions
    /// ([`ProxyMode::Stateless`]: seed 001's stateless first stage, with stateful fallback).
    /// Default [`ProxyMode::Stateful`].
    pub mode: ProxyMode,
    /// Probing of the load-sharing routes' targets with OPTIONS (the job of Kamailio's
    /// dispatcher probing): `None` (default) probes nothing. A target that fails
    /// `probe.down_after` probes in a row (no final response within `probe.timeout`, a 5xx,
    /// or a transport error) is down: the users it had go to their next-highest target at
    /// once; its first answered probe brings it back.
    pub probe: Option<ProbeConfig>,
    /// Timer C (RFC 3261 §16.6 step 11): how long a forwarded INVITE may stay without a
    /// final response (reset by every provisional other than 100). Default 3 minutes
    /// (the RFC's minimum).
    pub timer_c: Duration,
    /// How long a REGISTER's 200 may wait for the location store to commit its change
    /// ([`LocationStore::commit_ticket`](crate::LocationStore::commit_ticket)) before the
    /// REGISTER is answered `500` with `Retry-After` instead (the change stays in memory and
    /// is still written; the client is told it was not promised). Default 2 s: a healthy
    /// commit takes milliseconds.
    pub commit_timeout: Duration,
    /// The most branches one request is forked to. Default 16.
    pub max_branches: usize,
    /// This worker's place among the workers that share the server's messages by Call-ID:
    /// the requests it starts itself (OPTIONS probes) get a Call-ID it owns, so that their
    /// answers come back to it. Default `None`: one worker, any Call-ID.
    pub shard: Option<crate::shard::Shard>,
    /// Seed of the per-transaction part of the branches this proxy generates. Draw it from
    /// the driver's seeded [`Rng`](holdline_base::Rng), different per worker. Default 0.
    pub branch_seed: u64,
    /// Key of the To tags of the admission gate's stateless rejections (a keyed hash of the
    /// fields the ACK repeats). Give every worker of one server the same key: a rejection
    /// built by one worker is acknowledged to whichever worker owns the call, which absorbs
    /// the ACK only if it computes the same tag. Default 0.
    pub gate_key: u64,
    /// The transaction layer's settings. Its `limits` are replaced by
    /// [`limits`](Self::limits). Default [`TxnConfig::default`].
    pub txn: TxnConfig,
    /// The registrar's settings. Default [`RegistrarConfig::default`].
    pub registrar: RegistrarConfig,
    /// Registration propagation (seed 001 §3.3, l. 78 and 105: "P_1 can propagate the
    /// REGISTER message also to P_2", so that a pair of servers without a shared database
    /// still fails over): every REGISTER this registrar accepts that changes a binding is
    /// copied to each of these servers, in a client transaction of its own, after the
    /// registrar's answer (the phone does not wait for the copies). A REGISTER that comes
    /// *from* one of them (by IP address) is a copy: it is stored without authentication,
    /// its binding keeps the phone's address (from the phone's Via, as this server
    /// annotated it), and it is not copied on, so two servers may name each other.
    /// Default: none.
    pub propagate_registrations: Vec<Peer>,
    /// Parser limits for every message handled. Default [`Limits::DEFAULT`].
    pub limits: Limits,
    /// Which requests may be relayed to next hops this proxy does not serve. Default
    /// [`RelayPolicy::default`]: restricted, loopback trusted.
    pub relay: RelayPolicy,
    /// Hop-by-hop overload control, client role (RFC 7339 / RFC 7415): the algorithms offered
    /// in the Via of every request forwarded through a client transaction
    /// (`;oc;oc-algo="loss,rate"`); the answers in the responses that match those
    /// transactions are reported as [`EndpointEvent::Feedback`](crate::EndpointEvent).
    /// Default `None`: nothing offered.
    pub overload_offer: Option<OcOffer>,
    /// Write the rate of new INVITEs offered to each next hop (calls/s, counted when the
    /// INVITE is forwarded, before any gate of the driver rejects it; this worker's count
    /// times the workers of [`shard`](Self::shard)) into the Via of the INVITEs forwarded
    /// there, as `;hl-offered=RATE` (seed 000's end-user-centric fairness: a next hop that
    /// defers new INVITEs shares its idle time by it, see
    /// [`DeferFairness::Offered`](holdline_overload::DeferFairness)). Default false.
    pub advertise_offered_load: bool,
    /// Digest authentication (RFC 3261 §22): with settings, REGISTERs for served domains are
    /// challenged with 401, and out-of-dialog requests from users of served domains (From)
    /// with 407 unless they come from a [`AuthConfig::trusted`] source. Default `None`: no
    /// authentication.
    pub auth: Option<AuthConfig>,
    /// `oc-seq` of the server role's answers: the wall-clock time at holdline_base's `Instant::ZERO`, in units of 10 µs since the Unix epoch, so that answers
    /// increase across workers and restarts. Default 0 (the driver fills it in).
    pub overload_seq_base: u64,
    /// Report every client transaction of an INVITE the proxy forwards: its start
    /// ([`EndpointEvent::BranchStarted`](crate::EndpointEvent)) and its end with the status
    /// and the delay from sending the INVITE ([`EndpointEvent::BranchEnded`](crate::EndpointEvent)),
    /// for sending-side controllers that count outstanding transactions (seed 004's window).
    /// Default `false`.
    pub branch_events: bool,
    /// End-to-end overload control (DEOC) without a route naming the target edge: learn the
    /// egress edge of each callee and its domain from the topmost Record-Route of the
    /// provisional and 2xx responses to INVITEs sent there, and report later calls to that
    /// callee (else to that domain) with it
    /// ([`EndpointEvent::BranchStarted`](crate::EndpointEvent)'s `edge`, an [`EdgeId::at`]).
    /// A route's own `edge` always wins. Needs
    /// [`branch_events`](Self::branch_events). Default `false`.
    pub learn_edges: bool,
    /// RFC 7200 load control, both roles (notifier: publish filters to subscribers;
    /// subscriber: apply the filters of the notifiers subscribed to). Default: neither.
    pub load_control: crate::load_control::LoadControlConfig,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            domains: Vec::new(),
            aliases: Vec::new(),
            record_route_host: None,
            listen: vec![ListenAddr {
                transport: Transport::Udp,
                addr: SocketAddr::from(([127, 0, 0, 1], 5060)),
            }],
            host_addresses: Vec::new(),
            record_route: true,
            static_routes: Vec::new(),
            hash_routes: Vec::new(),
            dns_routes: Vec::new(),
            mode: ProxyMode::Stateful,
            dns: crate::dns::DnsConfig::default(),
            timer_c: Duration::from_secs(180),
            probe: None,
            commit_timeout: Duration::from_secs(2),
            max_branches: 16,
            shard: None,
            branch_seed: 0,
            gate_key: 0,
            txn: TxnConfig::default(),
            registrar: RegistrarConfig::default(),
            propagate_registrations: Vec::new(),
            limits: Limits::DEFAULT,
            relay: RelayPolicy::default(),
            overload_offer: None,
            advertise_offered_load: false,
            branch_events: false,
            learn_edges: false,
            auth: None,
            overload_seq_base: 0,
            load_control: crate::load_control::LoadControlConfig::default(),
        }
    }
}

impl ProxyConfig {
    /// The listener to use for messages leaving over `transport`: the first one of that
    /// transport, else the first one at all.
    pub fn listener(&self, transport: Transport) -> Option<&ListenAddr> {
        self.listen
            .iter()
            .find(|l| l.transport == transport)
            .or_else(|| self.listen.first())
    }

    /// Whether `host` is one of the served [`domains`](Self::domains).
    pub fn serves(&self, host: &[u8]) -> bool {
        let host = trim_dot(host);
        self.domains
            .iter()
            .any(|d| trim_dot(d.as_bytes()).eq_ignore_ascii_case(host))
    }

    /// The load-sharing route for a Request-URI host: an exact match first, then `*`.
    pub fn hash_route(&self, host: &[u8]) -> Option<&HashRoute> {
        self.hash_route_index(host, true)
            .and_then(|i| self.hash_routes.get(i))
    }

    /// The position in [`hash_routes`](Self::hash_routes) of the route for `host`: an exact
    /// match, else (with `wildcard`) the `*` route.
    pub(crate) fn hash_route_index(&self, host: &[u8], wildcard: bool) -> Option<usize> {
        let host = trim_dot(host);
        self.hash_routes
            .iter()
            .position(|r| trim_dot(r.domain.as_bytes()).eq_ignore_ascii_case(host))
            .or_else(|| {
                wildcard
                    .then(|| self.hash_routes.iter().position(|r| r.domain == "*"))
                    .flatten()
            })
    }

    /// Whether any next hop may be a DNS name (a DNS route, a named load-sharing target, or
    /// Request-URIs resolved with DNS).
    pub fn uses_dns(&self) -> bool {
        self.dns.request_uris
            || !self.dns_routes.is_empty()
            || self
                .hash_routes
                .iter()
                .any(|r| r.targets.iter().any(|t| t.name.is_some()))
    }

    /// The DNS route for a Request-URI host, if one applies: an exact match unless an exact
    /// static route takes the host; else, for a host name (not an IP address) no static route
    /// covers, the `*` DNS route.
    pub fn dns_route(&self, host: &[u8]) -> Option<&DnsRoute> {
        let host = trim_dot(host);
        let exact = |d: &str| trim_dot(d.as_bytes()).eq_ignore_ascii_case(host);
        if self.dns_routes.is_empty() || self.static_routes.iter().any(|r| exact(&r.domain)) {
            return None;
        }
        if let Some(r) = self.dns_routes.iter().find(|r| exact(&r.domain)) {
            return Some(r);
        }
        let literal = std::str::from_utf8(host).is_ok_and(|h| {
            h.trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
                .is_ok()
        });
        if literal || self.static_routes.iter().any(|r| r.domain == "*") {
            return None;
        }
        self.dns_routes.iter().find(|r| r.domain == "*")
    }

    /// The static route for `host`: an exact match, else the `*` route.
    pub fn static_route(&self, host: &[u8]) -> Option<&StaticRoute> {
        let host = trim_dot(host);
        self.static_routes
            .iter()
            .find(|r| trim_dot(r.domain.as_bytes()).eq_ignore_ascii_case(host))
            .or_else(|| self.static_routes.iter().find(|r| r.domain == "*"))
    }
}

/// Why a string is not a `host[:port]` (see [`check_host_port`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a host or host:port (a domain name, an IPv4 address or [IPv6], optionally \
     :PORT from 1 to 65535)"
)]
pub struct HostPortError(String);

/// Splits `host`, `host:port`, `[v6]` or `[v6]:port` (a bare IPv6 address has no port) into
/// the host (IPv6 without brackets) and the port text.
pub(crate) fn split_host_port(s: &str) -> (&str, Option<&str>) {
    if let Some(rest) = s.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((h, tail)) => (h, tail.strip_prefix(':')),
            None => (s, None),
        };
    }
    match s.split_once(':') {
        Some((h, p)) if !p.contains(':') => (h, Some(p)),
        _ => (s, None),
    }
}

/// Checks a [`ProxyConfig::record_route_host`] or an [`alias`](ProxyConfig::aliases): a
/// domain name (letters, digits, `-`, `.`; an optional trailing dot), an IPv4 address or an
/// IPv6 address in brackets, optionally followed by `:PORT` (1–65535).
pub fn check_host_port(s: &str) -> Result<(), HostPortError> {
    let bad = || HostPortError(s.to_owned());
    let (host, port) = split_host_port(s);
    if let Some(p) = port {
        p.parse::<u16>().ok().filter(|&p| p > 0).ok_or_else(bad)?;
    }
    if s.starts_with('[') {
        return host.parse::<Ipv6Addr>().map(|_| ()).map_err(|_| bad());
    }
    if host.parse::<Ipv4Addr>().is_ok() {
        return Ok(());
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(bad());
    }
    Ok(())
}

/// A fully qualified name may end with a dot.
pub(crate) fn trim_dot(s: &[u8]) -> &[u8] {
    s.strip_suffix(b".").unwrap_or(s)
}
