//! The stateful proxy core (RFC 3261 §16): configuration and the pure routing rules the
//! [`Endpoint`](crate::endpoint::Endpoint) applies to every request and response.
//!
//! ```text
//!  request ──§16.3 validate──> §16.4 Route preprocessing ──> local? (REGISTER, OPTIONS)
//!     (483, 420, 482, 400)      (strict-router fix-up,          │ no
//!                                pop our own Route)             v
//!                               §16.5 targets: location service (served domain, fork all)
//!                                 | top Route | static route | IP literal | else 404
//!                                             │
//!                 §16.6 forward each: RURI, Max-Forwards−1, Record-Route, Via(branch)
//!                                             │
//!  response <── §16.7 choose: 1xx/2xx at once; best final when all branches are final
//! ```
//!
//! This module holds the configuration ([`ProxyConfig`]) and the rules that do not need the
//! endpoint's state: whether a URI or a Via means this proxy, the Route preprocessing plan,
//! next-hop resolution, branch and loop-detection hashes, and the ranking of final responses.
//! Host names are routable through a static route, or resolved with DNS (RFC 3263,
//! [`crate::dns`]) through a [`DnsRoute`].

mod config;
pub(crate) mod learn;
#[cfg(test)]
mod tests;

use std::net::{IpAddr, SocketAddr};

use holdline_base::{Peer, Transport};
use holdline_sip::{HeaderName, Host, Message, NameAddr, ParseError, Scheme, Span, Uri, Via};

pub use config::{
    DnsRoute, EdgeId, HashRoute, HashTarget, HostPortError, IpNet, IpNetError, ListenAddr, Pick,
    ProbeConfig, ProxyConfig, ProxyMode, ProxyModeError, RelayPolicy, StaticRoute, check_host_port,
};
use config::{split_host_port, trim_dot};

/// FNV-1a, 64 bits: a fixed, portable hash for the loop-detection and stateless branches,
/// which must come out the same on every worker and every run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fnv(u64);

impl Fnv {
    pub(crate) fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    /// Hashes one field, length-prefixed so that fields cannot run into each other.
    pub(crate) fn field(&mut self, bytes: &[u8]) -> &mut Self {
        self.write(&(bytes.len() as u32).to_le_bytes());
        self.write(bytes);
        self
    }

    pub(crate) fn finish(&self) -> u64 {
        self.0
    }
}

/// Whether address `ip` reaches listener `l`: its own address, or any of the machine's
/// addresses (and loopback) when it listens on an unspecified address of the same family.
fn listener_has_ip(config: &ProxyConfig, l: &ListenAddr, ip: IpAddr) -> bool {
    let own = l.addr.ip();
    own == ip
        || (own.is_unspecified()
            && own.is_ipv4() == ip.is_ipv4()
            && (ip.is_loopback() || config.host_addresses.contains(&ip)))
}

/// Whether `host` (with `port` and `transport` as written) names one of the proxy's
/// listeners or aliases. An absent port means any of the proxy's ports when `any_port` (a
/// Request-URI or Route: `sip:100@127.0.0.1` sent to a server on 127.0.0.1:15060 is for it),
/// else the transport's default (a Via's sent-by).
fn is_me_host(
    config: &ProxyConfig,
    host: Host<'_>,
    port: Option<u16>,
    transport: Option<Transport>,
    tls: bool,
    any_port: bool,
) -> bool {
    let default = if tls { 5061 } else { 5060 };
    let port_ok = |l: &ListenAddr| match port {
        Some(p) => l.addr.port() == p,
        None => any_port || l.addr.port() == default,
    };
    // An alias names the host (a name case-insensitively, an address by value); with a
    // port of its own it counts only with that port (or none written).
    let alias = |a: &str| {
        let (h, p) = split_host_port(a);
        let host_ok = match host.ip() {
            Some(ip) => h.parse::<IpAddr>().is_ok_and(|a| a == ip),
            None => trim_dot(h.as_bytes())
                .eq_ignore_ascii_case(trim_dot(host.name().unwrap_or_default())),
        };
        host_ok
            && match (p.and_then(|p| p.parse::<u16>().ok()), port) {
                (Some(p), Some(q)) => p == q,
                (Some(p), None) => any_port || p == default,
                (None, _) => config.listen.iter().any(port_ok),
            }
    };
    let by_alias = || {
        config
            .aliases
            .iter()
            .map(String::as_str)
            .chain(config.record_route_host.as_deref())
            .any(alias)
    };
    match host.ip() {
        Some(ip) => {
            config.listen.iter().any(|l| {
                listener_has_ip(config, l, ip)
                    && port_ok(l)
                    && transport.is_none_or(|t| t == l.transport)
            }) || by_alias()
        }
        None => by_alias(),
    }
}

/// Whether `dest` is one of the proxy's own sockets (a request sent there would come straight
/// back: it is never forwarded there).
pub(crate) fn is_own_socket(config: &ProxyConfig, dest: &Peer) -> bool {
    config.listen.iter().any(|l| {
        l.transport == dest.transport
            && l.addr.port() == dest.addr.port()
            && listener_has_ip(config, l, dest.addr.ip())
    })
}

/// Whether a SIP URI designates this proxy (one of its listening addresses or aliases).
pub(crate) fn is_me_uri(config: &ProxyConfig, uri: &Uri<'_>) -> bool {
    let Some(host) = uri.host() else {
        return false;
    };
    let tls = uri.scheme() == Scheme::Sips || uri.transport() == Some(Transport::Tls);
    is_me_host(config, host, uri.port(), uri.transport(), tls, true)
}

/// Whether a Via was written by this proxy (its sent-by is one of our listeners).
pub(crate) fn is_our_via(config: &ProxyConfig, via: &Via<'_>) -> bool {
    let tls = via.transport == Some(Transport::Tls);
    is_me_host(config, via.host, via.port, None, tls, false)
}

/// `host:port` of a socket address as a Via sent-by (IPv6 in brackets).
pub(crate) fn host_port(addr: SocketAddr) -> String {
    match addr.ip() {
        IpAddr::V4(ip) => format!("{ip}:{}", addr.port()),
        IpAddr::V6(ip) => format!("[{ip}]:{}", addr.port()),
    }
}

/// The Record-Route value naming listener `l`: `<sip:ADDR:PORT;transport=T;lr>`, or with
/// [`ProxyConfig::record_route_host`] in place of `ADDR:PORT`.
pub(crate) fn record_route_value(config: &ProxyConfig, l: &ListenAddr) -> String {
    let t = l.transport.as_param_str();
    match &config.record_route_host {
        Some(h) => format!("<sip:{h};transport={t};lr>"),
        None => format!("<sip:{};transport={t};lr>", host_port(l.addr)),
    }
}

/// Where a URI's host leads without DNS: an exact static route for its host, else an IP
/// literal (port and `transport=` from the URI, UDP by default, TLS for `sips:`), else the
/// `*` static route. `None` when nothing matches (a host name without a route).
///
/// Only exact routes and `*` are consulted when `static_routes` is set; contacts from the
/// location service pass `false` (their address is authoritative).
pub(crate) fn resolve_uri(
    config: &ProxyConfig,
    uri: &Uri<'_>,
    static_routes: bool,
) -> Option<Peer> {
    let host = uri.host()?;
    let host_bytes = uri.host_bytes().unwrap_or_default();
    if static_routes
        && let Some(r) = config
            .static_routes
            .iter()
            .find(|r| r.domain != "*" && r.domain.as_bytes().eq_ignore_ascii_case(host_bytes))
    {
        return Some(Peer {
            addr: r.next_hop,
            transport: r.transport,
            conn: None,
        });
    }
    if let Some(ip) = host.ip() {
        let transport = uri.transport().unwrap_or_else(|| {
            if uri.scheme() == Scheme::Sips {
                Transport::Tls
            } else {
                Transport::Udp
            }
        });
        let port = uri.port().unwrap_or_else(|| transport.default_port());
        return Some(Peer {
            addr: SocketAddr::new(ip, port),
            transport,
            conn: None,
        });
    }
    if static_routes && let Some(r) = config.static_route(host_bytes) {
        return Some(Peer {
            addr: r.next_hop,
            transport: r.transport,
            conn: None,
        });
    }
    None
}

/// Where a response goes next by its (new) top Via (RFC 3261 §18.2.2, RFC 3581 §4):
/// `received` (else the sent-by host, if an IP address) and `rport` (else the sent-by port,
/// else the transport's default).
pub(crate) fn via_destination(via: &Via<'_>) -> Option<Peer> {
    let transport = via.transport.unwrap_or(Transport::Udp);
    let ip = via
        .received()
        .and_then(|h| h.ip())
        .or_else(|| via.host.ip())?;
    let port = via
        .rport()
        .flatten()
        .or(via.port)
        .unwrap_or_else(|| transport.default_port());
    Some(Peer {
        addr: SocketAddr::new(ip, port),
        transport,
        conn: None,
    })
}

/// The rank of a final (non-2xx) response for §16.7 step 6, lower is better: any 6xx, then
/// the lowest class; within 4xx the responses that help a resubmission (401, 407, 415, 420,
/// 484) first; within 5xx anything before 503.
pub(crate) fn response_rank(status: u16) -> (u8, u8) {
    let class = (status / 100) as u8;
    let class_rank = if class >= 6 { 0 } else { class };
    let pref = match status {
        401 | 407 | 415 | 420 | 484 => 0,
        503 => 2,
        _ => 1,
    };
    (class_rank, pref)
}

/// The 16-hex-digit loop hash carried by one of our stateful branches
/// (`z9hG4bK<hash>.<unique>`), if `branch` has that form.
pub(crate) fn branch_loop_hash(branch: &[u8]) -> Option<u64> {
    let rest = branch.strip_prefix(holdline_sip::MAGIC_COOKIE)?;
    let (hex, tail) = (rest.get(..16)?, rest.get(16..)?);
    if tail.first() != Some(&b'.') {
        return None;
    }
    let hex = std::str::from_utf8(hex).ok()?;
    u64::from_str_radix(hex, 16).ok()
}

/// The Route preprocessing of RFC 3261 §16.4, planned on a parsed request.
#[derive(Clone, Debug)]
pub(crate) struct RoutePlan<'a> {
    /// The Request-URI after the strict-router fix-up.
    pub(crate) ruri: Uri<'a>,
    /// Spans of Route elements (or whole lines) to delete: our own leading Routes and, after
    /// a strict-router fix-up, the last one.
    pub(crate) remove: Vec<Span>,
    /// The first Route left after preprocessing: the next hop, if any.
    pub(crate) next_route: Option<Uri<'a>>,
    /// The Route values left, in order (for the loop hash).
    pub(crate) remaining: Vec<&'a [u8]>,
    /// Whether the request came through a Route of ours (loose routing consumed one, or a
    /// strict router put one in the Request-URI): a dialog this proxy record-routed.
    pub(crate) own_route: bool,
    /// The To URI, when load-sharing routes are configured: the user a REGISTER (whose
    /// Request-URI has no user part) is hashed by.
    pub(crate) to_uri: Option<Uri<'a>>,
    /// The Call-ID, when load-sharing routes are configured and a Route is left: what a
    /// request routed through a load-sharing route by its Route (a cluster's name) is hashed
    /// by, so that every request of a dialog picks the same server of the cluster.
    pub(crate) call_id: Option<&'a [u8]>,
}

impl<'a> RoutePlan<'a> {
    /// Plans §16.4 for `msg`. Errors when the Request-URI or a Route does not parse.
    pub(crate) fn new(config: &ProxyConfig, msg: &Message<'a>) -> Result<Self, ParseError> {
        let mut ruri = msg.request_uri()?;
        let mut elems = Vec::new();
        for v in msg.values(HeaderName::Route) {
            let addr = NameAddr::parse(v.bytes).map_err(|e| {
                e.shifted(v.span.start as usize)
                    .in_header(HeaderName::Route)
            })?;
            elems.push((v, addr.uri));
        }
        let mut first = 0;
        let mut last = elems.len();
        let mut own_route = false;
        // A request whose Request-URI is a value we put into a Record-Route came from a
        // strict router: the real Request-URI is the last Route.
        if is_me_uri(config, &ruri) && last > 0 {
            last -= 1;
            ruri = elems[last].1;
            own_route = true;
        }
        // Loose routing: our own Route values on top are consumed (two of them after double
        // Record-Routing).
        while first < last && is_me_uri(config, &elems[first].1) {
            first += 1;
            own_route = true;
        }
        let mut remove = Vec::new();
        if first > 0 || last < elems.len() {
            let removed = |i: usize| i < first || i >= last;
            let headers = msg.headers();
            let mut i = 0;
            while i < elems.len() {
                let h = elems[i].0.header;
                let j = (i..elems.len())
                    .find(|&k| elems[k].0.header != h)
                    .unwrap_or(elems.len());
                if (i..j).all(removed) {
                    if let Some(hdr) = headers.get(h) {
                        remove.push(hdr.line_span());
                    }
                } else {
                    // A run of removed elements at the start of the field goes with the
                    // separator after it; one later in the field with the one before it.
                    let mut k = i;
                    while k < j {
                        if !removed(k) {
                            k += 1;
                            continue;
                        }
                        let run_start = k;
                        while k < j && removed(k) {
                            k += 1;
                        }
                        let span = if run_start == i {
                            Span {
                                start: elems[run_start].0.span.start,
                                end: elems[k].0.span.start,
                            }
                        } else {
                            Span {
                                start: elems[run_start - 1].0.span.end,
                                end: elems[k - 1].0.span.end,
                            }
                        };
                        remove.push(span);
                    }
                }
                i = j;
            }
        }
        let next_route = elems.get(first..last).and_then(|s| s.first()).map(|e| e.1);
        let remaining = elems
            .get(first..last)
            .unwrap_or_default()
            .iter()
            .map(|e| e.0.bytes)
            .collect();
        let to_uri = if config.hash_routes.is_empty() {
            None
        } else {
            msg.to().ok().map(|t| t.uri)
        };
        let call_id = if config.hash_routes.is_empty() || next_route.is_none() {
            None
        } else {
            msg.call_id().ok()
        };
        Ok(Self {
            ruri,
            remove,
            next_route,
            remaining,
            own_route,
            to_uri,
            call_id,
        })
    }

    /// The loop-detection hash of RFC 3261 §16.6 step 8 / §16.3 step 4: Request-URI as
    /// received, To and From tags, Call-ID, CSeq number, Proxy-Require and
    /// Proxy-Authorization, plus the Route values left after preprocessing. The top Via the
    /// RFC lists is left out (it changes at every hop, so a looped request would never match)
    /// and the remaining Routes are added, so that a request spiralling through this proxy
    /// along a loose-routed path is not mistaken for a loop.
    pub(crate) fn loop_hash(&self, msg: &Message<'_>) -> u64 {
        let mut h = Fnv::new();
        h.field(msg.request_uri_bytes().unwrap_or_default());
        h.field(msg.to().ok().and_then(|t| t.tag()).unwrap_or_default());
        h.field(msg.from().ok().and_then(|f| f.tag()).unwrap_or_default());
        h.field(msg.call_id().unwrap_or_default());
        let seq = msg.cseq().map(|c| c.seq).unwrap_or_default();
        h.field(&seq.to_le_bytes());
        for kind in [HeaderName::ProxyRequire, HeaderName::ProxyAuthorization] {
            for v in msg.values(kind) {
                h.field(v.bytes);
            }
        }
        for r in &self.remaining {
            h.field(r);
        }
        h.finish()
    }
}

/// The branch of a statelessly forwarded request (§16.11): a function of the incoming top
/// Via alone (branch and sent-by when it carries the magic cookie; else the RFC 2543
/// identifiers too), so that a retransmission, its CANCEL and the ACK of a non-2xx all get
/// the same branch. Marked with `s` so loop detection does not read it.
pub(crate) fn stateless_branch(msg: &Message<'_>) -> String {
    let mut h = Fnv::new();
    h.field(b"stateless");
    match msg.top_via() {
        Ok(via) if via.has_magic_cookie() => {
            h.field(via.branch().unwrap_or_default());
            h.field(via.host.to_string().as_bytes());
            h.field(&via.port.unwrap_or(0).to_le_bytes());
        }
        _ => {
            h.field(msg.first_value(HeaderName::Via).unwrap_or_default());
            h.field(msg.request_uri_bytes().unwrap_or_default());
            h.field(msg.from().ok().and_then(|f| f.tag()).unwrap_or_default());
            h.field(msg.call_id().unwrap_or_default());
            let seq = msg.cseq().map(|c| c.seq).unwrap_or_default();
            h.field(&seq.to_le_bytes());
        }
    }
    format!("z9hG4bKs{:016x}", h.finish())
}
