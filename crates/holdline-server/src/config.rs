//! The server's configuration: a TOML file (`deny_unknown_fields`) plus command-line
//! overrides, checked with errors that name the file, the line and the key.
//!
//! ```toml
//! listen = ["udp:127.0.0.1:5060", "tcp:127.0.0.1:5060"]
//! workers = 4                      # 0: one per available core
//! domains = ["example.com"]
//! record_route = true
//! # record_route_host = "c1.example.net" # Record-Route names this host[:port] (a cluster's
//!                                  # name) instead of the listener's address; it is an alias
//! # aliases = ["c1.example.net"]   # hosts (host[:port]) that also mean this server: a Route
//!                                  # naming one is popped, never forwarded to
//! mode = "stateful"                # or "stateless": seed 001's stateless first stage
//!                                  # (hash-routed and record-routed in-dialog requests
//!                                  # forwarded without transactions; docs/scaling.md);
//!                                  # or "redirect": initial requests answered 302 with
//!                                  # their targets as Contacts
//! # propagate_registrations = ["udp:10.0.0.2:5060"]  # copy accepted REGISTERs to these
//!                                  # servers (a backup without a shared store)
//! relay = "restricted"             # or "open" (an open relay)
//! trusted = ["127.0.0.0/8", "::1"] # sources that may relay anywhere (default: loopback)
//! store = "memory"                 # or a directory; default: the data directory; or shared:
//!                                  # "redis://127.0.0.1:6379/0?namespace=c1" or
//!                                  # "redis+sentinel://h1:26379,h2:26379/mymaster?namespace=c1"
//! durability = "commit"            # persistent store: a REGISTER's 200 waits for the commit;
//!                                  # "write-behind": written within 100 ms, a crash loses that
//! commit_window_us = 2000          # shortest time between two commits (group commit)
//! metrics = "127.0.0.1:9060"       # Prometheus text on /metrics, the status page on /
//!                                  # (its data: /status.json); absent: off
//! log = "info"                     # tracing filter; RUST_LOG wins
//! log_format = "text"              # or "json": one JSON object per log line (restart)
//! shutdown_grace_ms = 2000
//! drain_grace_s = 30               # SIGTERM / `holdline ctl drain`: new calls and REGISTERs
//!                                  # get 503 (Maintenance) while calls in progress finish,
//!                                  # at most this long
//! drain_idle_ms = 500              # ... finished: nothing in progress for this long
//! # ctl_socket = "/run/holdline/ctl.sock"  # `holdline ctl`; default: ctl.sock in the data
//!                                  # directory; "" turns it off
//!
//! [flood]                          # per-source flood protection (pike); trusted exempt
//! enabled = true
//! limit = 1000                     # requests per source and window ...
//! window_ms = 2000
//! cooldown_ms = 10000              # ... beyond which the source is ignored this long
//! slots = 65536                    # sources tracked per worker
//!
//! [auth]                           # digest authentication; off without users_file
//! users_file = "users.txt"         # `holdline user add --file users.txt alice@example.com`
//! # realm = "example.com"          # default: the domain of the request's user
//! nonce_lifetime_s = 300           # older nonces get stale=true
//! # secret_file = "nonce.key"      # nonces valid across restarts (created if absent);
//!                                  # default: random per process
//! algorithms = ["SHA-256", "MD5"]  # one challenge each, in this order
//! nonce_counts = 65536             # nonces whose nc is remembered (replay protection)
//! failure_limit = 20               # failed authentications per source and window ...
//! failure_window_ms = 10000
//! failure_cooldown_ms = 60000      # ... beyond which the source is ignored this long
//!
//! [limits]
//! max_message_size = 65535
//! max_connections = 10000
//! conn_queue_bytes = 1048576
//! idle_timeout_ms = 120000
//! write_stall_ms = 10000
//! handoff_queue = 4096
//! max_transactions = 4000000       # per worker, lingering ones included
//! transaction_memory_mb = 1024     # per worker; absent: RAM / 4 / workers
//! udp_recv_buffer = 8388608        # default 8 MiB (0: the kernel's default, 208 KiB)
//! transparent_huge_pages = false   # default: the process asks for none (Linux)
//!
//! [timers]
//! t1_ms = 500
//! t2_ms = 4000
//! t4_ms = 5000
//!
//! [registrar]                      # intervals in seconds
//! min_expires = 60                 # shorter requests (under one hour): 423
//! max_expires = 7200
//! default_expires = 3600
//! max_contacts_per_aor = 10
//!
//! [overload]                       # local overload control, on by default
//! local = "occ"                    # occ | queue-delay | queue-limit | bang-bang | none
//! target_occupancy = 0.9           # occ
//! interval_ms = 100                # occ, queue-delay
//! queue_growth = false             # occ: a growing queue counts as occupancy above 1
//! queue_gate_ms = 20               # occ: cut acceptance only while messages or new INVITEs
//!                                  # wait longer than this on average (0: occupancy alone)
//! occupancy_clock = "cpu"          # occ: occupancy = thread CPU / (CPU + wait for work);
//!                                  # "wall": time outside the wait / interval
//! target_delay_ms = 20             # queue-delay
//! queue_limit = 100                # queue-limit, bang-bang (messages waiting)
//! # retry_after_s = 5              # Retry-After in the 503s; default none
//! register_retry_after_s = [10, 60] # REGISTERs rejected for load: Retry-After drawn from this
//! emulate_cost_us = 0              # experiments: CPU µs added to every message handled
//! # emulate_reject_cost_us = 0     # ... to a rejected INVITE instead (default: emulate_cost_us)
//! # emulate_sleep = false          # ... waited (sleep, then spin) instead of spun
//! # smart_forwarding = "ics"       # TCP next hops: off | ics | ecs (seed 000); default ics,
//!                                  # off when local = "none"
//! smart_forwarding_threshold = 16384  # bytes of backlog tolerated before 503 (0: the
//!                                  # paper's "not empty")
//! smart_forwarding_hold_ms = 20    # ... for at least this long (0: at once, the paper's rule)
//! # defer_new_invites = true       # TCP: new INVITEs wait for idle time, their connection
//!                                  # unread meanwhile (default: on unless local = "none")
//! defer_max_wait_ms = 250          # ... and get 503 when none comes within this (over
//!                                  # UDP: when they waited this long in their socket)
//! defer_fairness = "equal"         # ... idle time shared equally among the connections
//!                                  # ("offered": in proportion to the load each upstream
//!                                  # says it is offered, seed 000's end-user-centric fairness;
//!                                  # "poll": connections that bring only new INVITEs (ECS)
//!                                  # served a quantum at a time, the others held closed,
//!                                  # seed 000's poll-based model for many upstreams)
//! defer_poll_quantum_ms = 500      # "poll": how long a connection stays open at least
//! defer_poll_max_hold_ms = 5000    # "poll": the longest a closed connection's INVITE waits
//! defer_poll_open_after_ms = 10    # "poll": idle this long before a closed one is opened
//! advertise_offered_load = false   # tell next hops the new INVITEs offered to them, per
//!                                  # second (Via parameter hl-offered), for the above
//! # udp_invite_socket = true       # UDP: new INVITEs come in on sockets of their own, read
//!                                  # after everything else (default: on unless local = "none")
//! udp_invite_recv_buffer = 262144  # ... whose receive buffer is this small (bytes)
//! rejection_budget = 0.1           # ... and 503s take at most this share of the time
//! # feedback = "loss"              # hop-by-hop control (RFC 7339/7415), client role: none |
//!                                  # loss | rate | explicit-window | "loss,rate" (default loss
//!                                  # unless local = "none"), or window: seed 004's window
//!                                  # without feedback
//! window_threshold_ms = 0          # ... its delay threshold (0: 4 x the smallest delay, >= 20 ms)
//! window_decrease = "collapse"     # ... a cut: collapse (seed 004's W = 1) | halve
//! window_once_per_round = false    # ... cut at most once per round of transactions
//! window_delay = "first-response"  # ... a transaction's delay: to its first response
//!                                  # (a callee's ringing is not load) | final
//! # feedback_answer = true         # server role: answer clients offering `oc` (default: on
//!                                  # with occ)
//! feedback_target_delay_ms = 100   # ... steering new INVITEs' queueing delay to this
//! feedback_validity_ms = 500       # ... oc-validity of the answers
//! feedback_answer_rate = true      # ... also to RFC 7415 rate clients
//! feedback_answer_window = true    # ... and to explicit-window clients
//! feedback_window_delay_ms = 20    # ... whose window is the read rate times this
//! feedback_rate_tolerance = 4.0    # RFC 7415 client: back-to-back INVITEs after a pause
//!
//! [overload.deoc]                  # feedback = "deoc" (seed 003): the paper's values
//! period_ms = 1000                 # T: each target's rate adapted this often
//! ewma_weight = 0.1                # w: the arrival-rate EWMA's weight
//! alpha = 0.2                      # the increase (eq. 11)
//! k = 0.5                          # ... and its exponent
//! beta = 0.125                     # the multiplicative decrease (eq. 4)
//! quiet_s = 100                    # control ends this long after the last rejection (0: never)
//! min_rejections = 1               # rejections in a period that signal overload (and restart)
//! min_rejection_share = 0.0        # ... or fewer, when this share of the period's calls
//! max_decrease = 0.0               # holdline: cut by the overload factor up to this (0: β)
//! timeouts_count = true            # a 408 or no answer counts as a rejection
//! min_rate = 0.1                   # the lowest admission rate, calls/s
//! max_targets = 1024               # targets with state at most
//! status = 503                     # the answer to a gapped call: 480, 486, 500, 503, 600, 603
//! # retry_after_s = 5              # ... its Retry-After (default: [overload] retry_after_s)
//! target = "next-hop"              # a route without deoc_target: its next hop, or
//!                                  # "record-route": the callee's egress edge, learned
//!
//! [[routes]]
//! domain = "*"
//! target = "udp:192.0.2.10:5060"  # or tcp:, or tls: (verified against [tls] ca_file), or a
//!                                  # name resolved with DNS (RFC 3263; always stateful):
//!                                  # "sip:proxy.example.net" (NAPTR, SRV, A/AAAA), with
//!                                  # ";transport=tcp" (SRV, A/AAAA) or ":5070" (A/AAAA)
//! stateless = false
//! # server_name = "sip.example.net" # tls: the name its certificate must carry (default:
//!                                  # the target's IP address)
//! # deoc_target = "E2"             # feedback = "deoc": the egress edge its calls leave by,
//!                                  # DEOC's per-target key (default: the next hop)
//!
//! [load_control]                   # RFC 7200 load-control event package (docs/overload.md)
//! # subscribe = ["udp:10.0.0.2:5060"]  # subscriber: apply these servers' filters to the
//!                                  # new requests sent to them (503 for those turned away)
//! expires_s = 600                  # ... the Expires of our SUBSCRIBEs (refreshed at 80%)
//! retry_s = 5                      # ... after a failed SUBSCRIBE, try again this much later
//! # publish = true                 # notifier: answer SUBSCRIBEs from trusted sources (on
//!                                  # when filters are configured)
//! max_expires_s = 3600             # ... longest subscription granted
//! [[load_control.filters]]         # ... the filters published (SIGHUP re-reads them and
//!                                  # NOTIFYs the subscribers when they changed)
//! id = "hotline"
//! callee = ["sip:hotline@example.com"]  # Request-URIs (or callee_domain = "example.com")
//! # caller = ["sip:bot@example.net"]    # From URIs (or caller_domain = "example.net")
//! methods = ["INVITE"]             # default INVITE
//! rate = 10.0                      # accept at most this many calls/s, or:
//! # loss_percent = 50.0            # turn away this share of them
//! # duration_s = 600               # stop applying this long after the server starts
//!
//! [[hash_routes]]                  # identifier-based load sharing (docs/scaling.md):
//! domain = "example.net"           # requests for this domain (or "*") go to one target,
//! targets = ["udp:10.0.0.1:5060", "udp:10.0.0.2:5060"]  # chosen by rendezvous hashing
//!                                  # (or names: "sip:c1.example.net", resolved with DNS)
//! # weights = [1.0, 1.0]           # of the user's AOR (the To URI of a REGISTER)
//! # failover = true                # on 503/timeout, the user's next target (RFC 3263
//!                                  # §4.3); false when targets do not share registrations
//! # deoc_target = "E2"             # as in [[routes]]
//! # pick = "hash"                  # or "round-robin": each request to the next target in
//!                                  # turn, by weight (any target serves any user)
//!
//! [dns]                            # resolution of sip: route targets (docs/scaling.md)
//! servers = ["127.0.0.1:53"]       # name servers; default: the system's (/etc/resolv.conf)
//! timeout_ms = 500                 # per query and server ...
//! attempts = 2                     # ... this many times
//! min_ttl_s = 1                    # answers kept at least ...
//! max_ttl_s = 3600                 # ... and at most this long, whatever their TTL
//! negative_ttl_ms = 1000           # "no such name" / failed lookups kept at most this long
//! max_stale_s = 300                # expired answers used while asked again
//! failed_hold_ms = 30000           # a target that failed goes last this long
//! park_timeout_ms = 5000           # a request waiting for DNS longer gets 503
//! max_parked_per_name = 256        # requests waiting per name (more: 503) ...
//! max_parked = 4096                # ... and per worker
//! cache_entries = 4096             # answers cached per worker
//! request_uris = false             # also resolve Request-URI host names no route covers
//!
//! [capture]                        # SIP capture: HEP v3 to a collector (docs/operations.md)
//! hep = "udp:127.0.0.1:9060"       # the collector (udp: or tcp:); absent: off
//! agent_id = 2001                  # capture agent id (default 0)
//! # password = "secret"            # sent as the HEP authentication key
//! sample = 1.0                     # share of calls captured, by Call-ID (default 1)
//! # users = ["alice"]              # only calls whose From/To user is one of these ...
//! # call_ids = ["a84b4c76e66710"]  # ... or whose Call-ID is one of these
//! queue = 16384                    # messages waiting for the capture thread (full: dropped)
//! priority = "background"          # the capture thread uses idle CPU only (or "normal")
//!
//! [probing]                        # OPTIONS probes of hash_routes' targets
//! interval_ms = 1000               # 0 (default): off
//! timeout_ms = 500                 # unanswered this long: failed
//! down_after = 2                   # failures in a row that take a target down
//!
//! [tls]                            # TLS (rustls); see docs/security.md
//! cert_file = "server.pem"         # the certificate chain of tls: listeners (PEM) ...
//! key_file = "server.key"          # ... and its private key (PEM: PKCS#8, PKCS#1 or SEC1)
//! # ca_file = "ca.pem"             # CAs trusted for TLS next hops (and client certificates);
//!                                  # default: the system's roots
//! verify_client = false            # tls: listeners require a client certificate that
//!                                  # ca_file's CAs signed (mutual TLS; needs ca_file)
//! # client_cert_file = "client.pem" # presented to TLS next hops that ask (mutual TLS) ...
//! # client_key_file = "client.key" # ... with its private key
//!
//! [[tcp_buffers]]                  # buffer minimization (seed 000), per listener ...
//! listener = "tcp:127.0.0.1:5060"
//! recv_buffer = 4096               # SO_RCVBUF; absent: limits.tcp_recv_buffer
//! read_buffer = 4096               # application read-ahead; absent: limits.tcp_read_buffer
//! # send_buffer = 4096             # SO_SNDBUF; absent: limits.tcp_send_buffer
//! [[tcp_buffers]]                  # ... or per next hop (the connections opened to it)
//! next_hop = "192.0.2.10:5060"
//! send_buffer = 16384
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use holdline_base::Transport;
use holdline_base::toml_loc::{find_key_line, locate};
use holdline_overload::{Algorithm, ControllerConfig};
use holdline_proto::{IpNet, ProxyMode, RelayPolicy};
use serde::Deserialize;

/// A socket the server listens on: `udp:IP:PORT`, `tcp:IP:PORT`, `tls:IP:PORT` or
/// `sctp:IP:PORT` (IPv6 as `[::1]:5060`). For SCTP, IP:PORT is the UDP socket its packets are
/// encapsulated in (RFC 6951; 9899 is IANA's port for it), and the address the server is
/// known by over SCTP (its Via and Record-Route); see `[sctp]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Listener {
    /// UDP, TCP, TLS (over TCP) or SCTP (over UDP).
    pub transport: Transport,
    /// Address and port (port 0: the system picks one; the server reports the bound port).
    pub addr: SocketAddr,
}

impl FromStr for Listener {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (t, addr) = s.split_once(':').ok_or_else(|| {
            format!("`{s}`: expected udp:IP:PORT, tcp:IP:PORT, tls:IP:PORT or sctp:IP:PORT")
        })?;
        let transport = match t.to_ascii_lowercase().as_str() {
            "udp" => Transport::Udp,
            "tcp" => Transport::Tcp,
            "tls" => Transport::Tls,
            "sctp" => Transport::Sctp,
            _ => return Err(format!("`{s}`: transport must be udp, tcp, tls or sctp")),
        };
        let addr = addr
            .parse()
            .map_err(|_| format!("`{s}`: `{addr}` is not IP:PORT"))?;
        Ok(Self { transport, addr })
    }
}

impl fmt::Display for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.transport, self.addr)
    }
}

impl<'de> Deserialize<'de> for Listener {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A trusted source network (`trusted = ["10.0.0.0/8"]`): an [`IpNet`] read from a string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrustedNet(pub IpNet);

impl<'de> Deserialize<'de> for TrustedNet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map(Self).map_err(serde::de::Error::custom)
    }
}

/// Where registrations are stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreSpec {
    /// In memory only (lost at exit).
    Memory,
    /// The persistent store in this directory (created if missing).
    Path(PathBuf),
    /// The location store shared through Redis by the servers of a cluster:
    /// `redis://host:port[/db][?namespace=NAME&wait_replicas=N&wait_timeout_ms=MS]` or
    /// `redis+sentinel://host:port[,host:port...]/master[/db][?...]`
    /// ([`holdline_store::RedisTarget`]; `docs/scaling.md`).
    Redis(holdline_store::RedisTarget),
}

impl FromStr for StoreSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "" => Err("store: empty (use `memory`, a directory or a redis:// URL)".into()),
            "memory" => Ok(Self::Memory),
            r if r.starts_with("redis://") || r.starts_with("redis+sentinel://") => r
                .parse()
                .map(Self::Redis)
                .map_err(|e| format!("store: {e}")),
            p => Ok(Self::Path(PathBuf::from(p))),
        }
    }
}

impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Memory => f.write_str("memory"),
            Self::Path(p) => write!(f, "{}", p.display()),
            Self::Redis(t) => write!(f, "{t}"),
        }
    }
}

impl<'de> Deserialize<'de> for StoreSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The default data directory: `$XDG_DATA_HOME/holdline`, else
/// `$HOME/.local/share/holdline`, else `./holdline-data`.
pub fn default_data_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("holdline");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(h).join(".local/share/holdline");
    }
    PathBuf::from("holdline-data")
}

/// Where a static route sends its requests: an address (`udp:IP:PORT`, `tcp:`, `tls:`) or
/// a name resolved with DNS (`sip:proxy.example.net[:PORT][;transport=T]`,
/// `sips:proxy.example.net`; RFC 3263).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteTarget {
    /// An address.
    Addr(Listener),
    /// A name.
    Dns(holdline_proto::DnsTarget),
}

impl RouteTarget {
    /// The address, for an address target.
    pub fn addr(&self) -> Option<Listener> {
        match self {
            Self::Addr(l) => Some(*l),
            Self::Dns(_) => None,
        }
    }

    /// Whether requests go over TLS (a `tls:` address or a `sips:` name).
    pub fn is_tls(&self) -> bool {
        match self {
            Self::Addr(l) => l.transport == Transport::Tls,
            Self::Dns(t) => t.secure || t.transport == Some(Transport::Tls),
        }
    }
}

impl FromStr for RouteTarget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.trim().to_ascii_lowercase();
        if lower.starts_with("sip:") || lower.starts_with("sips:") {
            return s.parse().map(Self::Dns).map_err(|e| format!("{e}"));
        }
        s.parse().map(Self::Addr).map_err(|e: String| {
            format!("{e} (or a name resolved with DNS: sip:proxy.example.net)")
        })
    }
}

impl fmt::Display for RouteTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Addr(l) => l.fmt(f),
            Self::Dns(t) => t.fmt(f),
        }
    }
}

impl<'de> Deserialize<'de> for RouteTarget {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A static route: requests for `domain` (or every domain, `*`) go to `target`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// The domain of the Request-URI, or `*`.
    pub domain: String,
    /// The next hop: an address, or a name resolved with DNS.
    pub target: RouteTarget,
    /// Forward statelessly (no transaction state).
    #[serde(default)]
    pub stateless: bool,
    /// With a `tls:` target: the name the next hop's certificate must carry (a DNS name or
    /// an IP address). Default: the target's IP address.
    #[serde(default)]
    pub server_name: Option<String>,
    /// With `[overload] feedback = "deoc"`: the target edge of this route's calls (the
    /// egress edge server they leave the network by, however many hops away), the key of
    /// DEOC's per-target state. Default: the next hop.
    #[serde(default)]
    pub deoc_target: Option<String>,
}

impl FromStr for Route {
    type Err = String;
    /// `DOMAIN=udp:IP:PORT`, `DOMAIN=tcp:IP:PORT[,stateless]`,
    /// `DOMAIN=tls:IP:PORT[,stateless][,server_name=NAME]` or `DOMAIN=sip:NAME` (DNS).
    fn from_str(s: &str) -> Result<Self, String> {
        let (domain, rest) = s
            .split_once('=')
            .ok_or_else(|| format!("`{s}`: expected DOMAIN=udp:IP:PORT"))?;
        let mut parts = rest.split(',');
        let target = parts.next().unwrap_or_default();
        let (mut stateless, mut server_name, mut deoc_target) = (false, None, None);
        for p in parts {
            match p.split_once('=') {
                None if p == "stateless" => stateless = true,
                Some(("server_name", name)) => server_name = Some(name.to_owned()),
                Some(("deoc_target", name)) => deoc_target = Some(name.to_owned()),
                _ => {
                    return Err(format!(
                        "`{s}`: unknown option `{p}` (expected stateless, server_name=NAME or \
                         deoc_target=NAME)"
                    ));
                }
            }
        }
        if domain.is_empty() {
            return Err(format!("`{s}`: empty domain"));
        }
        let route = Self {
            domain: domain.to_owned(),
            target: target.parse()?,
            stateless,
            server_name,
            deoc_target,
        };
        route.check().map_err(|e| format!("`{s}`: {e}"))?;
        Ok(route)
    }
}

impl Route {
    /// Checks what serde cannot: `server_name` only with a TLS address target, and a valid
    /// name; a DNS target is never stateless (its failover needs the transaction).
    fn check(&self) -> Result<(), String> {
        if let Some(name) = &self.server_name {
            if self
                .target
                .addr()
                .is_none_or(|l| l.transport != Transport::Tls)
            {
                return Err("server_name needs a tls: target".into());
            }
            crate::tls::server_name(name)?;
        }
        if self.stateless && matches!(self.target, RouteTarget::Dns(_)) {
            return Err("a sip: (DNS) target is always stateful: remove stateless".into());
        }
        check_deoc_target(self.deoc_target.as_deref())
    }
}

/// A `deoc_target` is a name of 1 to 64 characters out of letters, digits, `.`, `-`, `_`
/// and `:` (it is a metrics label value).
fn check_deoc_target(name: Option<&str>) -> Result<(), String> {
    match name {
        Some(n)
            if n.is_empty()
                || n.len() > 64
                || !n
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':')) =>
        {
            Err(format!(
                "deoc_target `{n}`: 1 to 64 letters, digits, `.`, `-`, `_` or `:`"
            ))
        }
        _ => Ok(()),
    }
}

fn yes() -> bool {
    true
}

/// A load-sharing route (`[[hash_routes]]`): requests for `domain` (or `*`) go to one of
/// `targets`, chosen by rendezvous hashing of the user's address-of-record
/// (`holdline_proto::hrw`), so that a user's REGISTERs and calls reach the same target from
/// every server configured alike. Tried before `[[routes]]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HashRouteSettings {
    /// The domain of the Request-URI, or `*`.
    pub domain: String,
    /// The destinations; their text (`udp:10.0.0.1:5060`, or a name resolved with DNS,
    /// `sip:cluster1.example.net`) is their identity in the hash.
    pub targets: Vec<RouteTarget>,
    /// Relative weights, one per target (default: all 1).
    #[serde(default)]
    pub weights: Vec<f64>,
    /// On a 503, a timeout or a transport error, the request goes to the user's next target
    /// (default true): right when the targets share the users' registrations (a shared or
    /// replicated store), wrong when each holds only its own users — the next target can
    /// only answer 404, so a passing overload would reach callers as "no such user".
    #[serde(default = "yes")]
    pub failover: bool,
    /// With `[overload] feedback = "deoc"`: the target edge of this route's calls (see
    /// [`Route::deoc_target`]). Default: the next hop.
    #[serde(default)]
    pub deoc_target: Option<String>,
    /// How an initial request's target is picked: `"hash"` (default) or `"round-robin"`.
    #[serde(default)]
    pub pick: RoutePick,
}

/// `[[hash_routes]] pick`: how a load-sharing route picks an initial request's target.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RoutePick {
    /// Rendezvous hashing of the user's address-of-record: a user's REGISTERs and calls
    /// reach the same target from every server configured alike.
    #[default]
    Hash,
    /// Each request to the next target in turn, by weight (smooth weighted round-robin):
    /// the most even spread when every target serves every user; each worker keeps its
    /// own turn.
    RoundRobin,
}

/// TLS settings (`[tls]`): the certificate of `tls:` listeners, the CAs next hops' (and
/// clients') certificates are verified against, the client certificate for mutual TLS.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsSettings {
    /// The certificate chain `tls:` listeners present (PEM, leaf first). Required with a
    /// `tls:` listener.
    pub cert_file: Option<PathBuf>,
    /// The private key of `cert_file` (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
    /// The CA certificates (PEM) trusted to sign next hops' certificates (and clients' with
    /// `verify_client`). Default: the system's roots (rustls-native-certs).
    pub ca_file: Option<PathBuf>,
    /// `tls:` listeners require a client certificate signed by a CA of `ca_file` (mutual
    /// TLS); a client without one, or with another, is refused in the handshake. Default off.
    pub verify_client: bool,
    /// The certificate chain presented to TLS next hops that ask for one (PEM).
    pub client_cert_file: Option<PathBuf>,
    /// The private key of `client_cert_file`.
    pub client_key_file: Option<PathBuf>,
}

/// TCP buffer sizes for one listener or one next hop (`[[tcp_buffers]]`): seed 000's buffer
/// minimization where it belongs. Each size left out falls back to `[limits]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpBuffers {
    /// A TCP listener of this server (`tcp:IP:PORT`, as written in `listen`): its socket and
    /// every connection accepted on it.
    pub listener: Option<Listener>,
    /// A next hop (`IP:PORT`): every connection this server opens to it.
    pub next_hop: Option<SocketAddr>,
    /// `SO_RCVBUF`, bytes.
    pub recv_buffer: Option<usize>,
    /// `SO_SNDBUF`, bytes.
    pub send_buffer: Option<usize>,
    /// Most bytes read ahead into the application; at least `limits.max_message_size`.
    pub read_buffer: Option<usize>,
    /// `TCP_MAXSEG`, bytes (listeners only: the MSS announced to peers, which bounds the
    /// segments they send). With a receive buffer of a couple of INVITEs, segments of a few
    /// hundred bytes keep the window from stalling the sender.
    pub max_segment: Option<u32>,
}

/// The buffer sizes in effect for one listener or next hop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BufferSizes {
    /// `SO_RCVBUF` (`None`: system default).
    pub recv_buffer: Option<usize>,
    /// `SO_SNDBUF` (`None`: system default).
    pub send_buffer: Option<usize>,
    /// Application read-ahead, bytes.
    pub read_buffer: usize,
    /// `TCP_MAXSEG` (`None`: the path's).
    pub max_segment: Option<u32>,
}

/// Bounds; each hit is counted in the metrics.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Largest SIP message accepted, bytes (UDP datagram or framed TCP message).
    pub max_message_size: usize,
    /// Most inbound TCP connections open at once (excess ones are accepted and closed).
    pub max_connections: usize,
    /// Most bytes queued for writing on one TCP connection.
    pub conn_queue_bytes: usize,
    /// A TCP connection with no traffic for this long is closed, ms.
    pub idle_timeout_ms: u64,
    /// A TCP connection whose queue stays full this long is closed, ms.
    pub write_stall_ms: u64,
    /// Capacity of each worker's hand-off channel, messages.
    pub handoff_queue: usize,
    /// Most SIP transactions per worker, lingering ones included (over UDP a finished
    /// transaction lingers up to 32 s to absorb retransmissions: a call leaves about three).
    /// At the bound, lingering transactions end early, oldest first; when only live ones are
    /// left, new requests outside dialogs are refused (503) at 90% of it, requests of calls in
    /// progress only at the limit. Default 4,000,000; `transaction_memory_mb` is usually the
    /// bound that applies.
    pub max_transactions: usize,
    /// Memory budget of each worker's transaction table, MiB (the table's own estimate:
    /// about 250 bytes per transaction plus the messages kept for retransmission), enforced
    /// like `max_transactions`. Absent: a quarter of the machine's RAM shared among the
    /// workers.
    pub transaction_memory_mb: Option<u64>,
    /// `SO_RCVBUF` for UDP sockets, bytes (default 8 MiB; 0: the kernel's default, which is
    /// 208 KiB on Linux: a few milliseconds of traffic at 20,000 messages/s, so any stall of
    /// the worker drops datagrams that the senders retransmit 500 ms later). Linux caps it at
    /// `net.core.rmem_max`; `holdline serve` says so at start when it does.
    pub udp_recv_buffer: Option<usize>,
    /// `SO_SNDBUF` for UDP sockets, bytes (absent: system default).
    pub udp_send_buffer: Option<usize>,
    /// `SO_SNDBUF` for every TCP connection, bytes (absent: system default); `[[tcp_buffers]]`
    /// sets it per listener or next hop.
    pub tcp_send_buffer: Option<usize>,
    /// `SO_RCVBUF` for every TCP listener and connection, bytes (absent: system default);
    /// `[[tcp_buffers]]` sets it per listener or next hop. Small values are seed 000's buffer
    /// minimization: a receive buffer of a couple of INVITEs makes an overloaded server push
    /// back on its upstream at once. Set it per listener (the side new calls come in on), not
    /// here: on a connection to a next hop a receive buffer far below the loopback or path
    /// MSS makes the kernel send in window-sized dribbles and stall.
    pub tcp_recv_buffer: Option<usize>,
    /// Most bytes read ahead from one TCP connection into the application (absent:
    /// `max_message_size` + 16 KiB). At least `max_message_size`. Small values (with a small
    /// `max_message_size`) are the application half of buffer minimization.
    pub tcp_read_buffer: Option<usize>,
    /// Use recvmmsg/sendmmsg where available.
    pub batched_udp: bool,
    /// Let the kernel back the process's memory with transparent huge pages (Linux; default
    /// off). Off, `holdline serve` asks the kernel for none (`PR_SET_THP_DISABLE`): the
    /// allocator advises huge pages for its regions, and each first touch of one zeroes
    /// 2 MiB inside the worker's step — in a registration storm 300-400 steps of 2-20 ms,
    /// which set the REGISTER latency's p99, and more CPU than 4 KiB pages
    /// (docs/registrar.md, 2026-12-01).
    pub transparent_huge_pages: bool,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_message_size: 65_535,
            max_connections: 10_000,
            conn_queue_bytes: 1024 * 1024,
            idle_timeout_ms: 120_000,
            write_stall_ms: 10_000,
            handoff_queue: 4096,
            max_transactions: 4_000_000,
            transaction_memory_mb: None,
            udp_recv_buffer: Some(DEFAULT_UDP_RECV_BUFFER),
            udp_send_buffer: None,
            tcp_send_buffer: None,
            tcp_recv_buffer: None,
            tcp_read_buffer: None,
            batched_udp: true,
            transparent_huge_pages: false,
        }
    }
}

/// Local overload control (`[overload]`): which controller guards the admission gate of
/// every worker, and its settings. On by default (OCC, target occupancy 0.9).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OverloadSettings {
    /// The algorithm: `occ` (default), `queue-delay`, `queue-limit` (503 on a full queue),
    /// `bang-bang`, or `none` (no gate: the kernel's receive buffer is a drop-tail queue).
    pub local: String,
    /// OCC's target occupancy `ρ_target`, in `(0, 1]`.
    pub target_occupancy: f64,
    /// The measurement interval of OCC and queue-delay, ms.
    pub interval_ms: u64,
    /// OCC: count the growth of the measured queueing delay as occupancy beyond 1, so that a
    /// sudden overload is cut within a few intervals (holdline's extension of OCC).
    pub queue_growth: bool,
    /// OCC's queue gate, ms: acceptance is cut only in intervals whose mean queueing delay
    /// (of admitted calls' messages, or of new INVITEs in their own sockets) exceeds this; a
    /// busy interval without a queue is no overload. 0: occupancy alone (the paper's rule).
    pub queue_gate_ms: u64,
    /// How OCC (and the server role's answers) measure a worker's occupancy: `cpu` (default),
    /// the worker thread's CPU time over that time plus its wait for work, the share of the
    /// CPU it could get that it used (right under a CPU quota, a noisy neighbour or steal);
    /// `wall`, everything outside the event loop's wait over the interval (reads 1.0 under a
    /// quota whenever throttling falls inside a loop iteration).
    pub occupancy_clock: String,
    /// queue-delay's target queueing delay, ms.
    pub target_delay_ms: u64,
    /// queue-limit / bang-bang: reject new INVITEs while this many messages wait in the
    /// receive queue (estimated as queueing delay / mean service time).
    pub queue_limit: usize,
    /// bang-bang: once rejecting, go on until the queue is below this (absent: `queue_limit`).
    pub queue_resume: Option<usize>,
    /// `Retry-After` seconds in the 503s (absent: none, as RFC 7339 §5.2 recommends).
    pub retry_after_s: Option<u32>,
    /// The range, in whole seconds, the `Retry-After` of a REGISTER rejected for load is
    /// drawn from (uniformly), so that a rejected herd of phones comes back spread out
    /// instead of as one second wave (RFC 6357 §4). Default `[10, 60]`.
    pub register_retry_after_s: [u32; 2],
    /// TCP smart forwarding (seed 000): `off`, `ics` (one connection per next hop; a new
    /// INVITE is rejected with 503 when that connection has unsent bytes) or `ecs` (new
    /// INVITEs on a connection of their own per next hop, checked the same way). Absent:
    /// `ics` unless `local` is `none` (see [`Self::smart_forwarding_mode`]).
    pub smart_forwarding: Option<String>,
    /// Smart forwarding: the backlog (kernel unsent + queued bytes) above which a new INVITE
    /// is rejected. 0 is the paper's "not empty", right behind a next hop whose receive
    /// buffer is minimized; the default is 16 KiB (with `smart_forwarding_hold_ms`, so that
    /// a healthy next hop lagging for a moment gets no 503s).
    pub smart_forwarding_threshold: u64,
    /// Smart forwarding: how long the backlog must have stayed above the threshold before
    /// new INVITEs are rejected, ms (0: at once, the paper's rule). Default 20.
    pub smart_forwarding_hold_ms: u64,
    /// Capacity emulation for experiments: this many microseconds of real CPU work added to
    /// every message a worker handles, rejections included (0: off).
    pub emulate_cost_us: u64,
    /// Capacity emulation: the CPU work added to a rejected new INVITE instead, microseconds
    /// (absent: `emulate_cost_us`). The emulated cost stands for the work of routing a call
    /// (lookups, policy, accounting), which a rejection never reaches; setting this lower
    /// models a server whose rejections are cheap next to its calls.
    pub emulate_reject_cost_us: Option<u64>,
    /// Capacity emulation: the worker waits the emulated cost (a sleep, the last 100 µs
    /// spun) instead of spinning it all: as busy and as slow, but the machine's CPU stays
    /// free for the other processes of an experiment (several servers on a small machine).
    pub emulate_sleep: bool,
    /// TCP: a new INVITE read from a connection is handled only when the worker has nothing
    /// else to do (messages of admitted calls first), and that connection is not read
    /// meanwhile, so an overloaded server pushes back on the connections that bring new
    /// calls, which smart forwarding at the previous hop sees (seed 000). Absent: on unless
    /// `local` is `none`.
    pub defer_new_invites: Option<bool>,
    /// The longest a deferred new INVITE waits for idle time before it is answered `503`
    /// (reason `defer_timeout`), ms: bounds how long its connection, and the ACKs and BYEs
    /// behind it, are held when the server never becomes idle. Over UDP with INVITE sockets,
    /// the longest a new INVITE may have waited in its socket (kernel receive time to read)
    /// before it is answered `503` the same way, whatever the gate or an upstream's
    /// exemption would say: its caller has retransmitted by then, and serving it late only
    /// makes a slow call and a long queue.
    pub defer_max_wait_ms: u64,
    /// How a server deferring new INVITEs shares its idle time among the connections that
    /// bring them: `equal` (default; every upstream the same share when all are overloaded:
    /// seed 000's service-provider-centric fairness) or `offered` (in proportion to the load
    /// each upstream says it is offered, from the `hl-offered` Via parameter that
    /// `advertise_offered_load` writes: end-user-centric fairness, seed 000 l. 410; an
    /// upstream that says nothing weighs the mean of those that do), or `poll` (seed 000's
    /// poll-based model for many upstreams, l. 383: a connection that has brought nothing but
    /// new INVITEs (an upstream's ECS INVITE connection), once open for
    /// `defer_poll_quantum_ms`, is held closed — unread, its receive window shut — at its
    /// next INVITE when others compete; the server opens the closed one waiting longest when
    /// it has been idle `defer_poll_open_after_ms` with nothing of an open one waiting; an
    /// INVITE that waited `defer_max_wait_ms` is rejected at its turn. Connections that carry
    /// anything else are served as with `equal`; see docs/overload.md, "Polling").
    pub defer_fairness: String,
    /// `defer_fairness = "poll"`: how long an opened connection stays open, ms. Default 500.
    pub defer_poll_quantum_ms: u64,
    /// `defer_fairness = "poll"`: the longest the INVITE of a closed connection waits before
    /// it is rejected anyway (and its connection opened), ms. Default 5000.
    pub defer_poll_max_hold_ms: u64,
    /// `defer_fairness = "poll"`: how long the server must have been idle, with nothing of
    /// an open connection waiting, before it opens a closed one, ms. Default 10.
    pub defer_poll_open_after_ms: u64,
    /// Write the rate of new INVITEs offered to each next hop (calls/s, counted before smart
    /// forwarding or any other gate rejects them) into the Via of the INVITEs forwarded there,
    /// as the parameter `hl-offered` (a holdline extension; other servers ignore it), for a
    /// next hop with `defer_fairness = "offered"`. Default false.
    pub advertise_offered_load: bool,
    /// UDP: the kernel steers datagrams that start with `INVITE ` to sockets of their own
    /// (a reuseport program), which a worker reads only when it has read everything else: an
    /// overloaded server keeps reading the ACKs, BYEs and responses of the calls it admitted,
    /// and when it cannot keep up the kernel drops new INVITEs from their own small buffer,
    /// at no cost to the server, instead of dropping admitted calls' messages from a shared
    /// one. Rejections of INVITEs read there take at most `rejection_budget` of the time.
    /// Linux only (elsewhere a warning, and one socket as before). Absent: on unless `local`
    /// is `none` (docs/overload.md, "Under a CPU quota").
    pub udp_invite_socket: Option<bool>,
    /// `SO_RCVBUF` of the INVITE sockets, bytes: bounds how long a new INVITE waits when the
    /// server is busy (the kernel drops what does not fit; the caller retransmits). Default
    /// 256 KiB.
    pub udp_invite_recv_buffer: usize,
    /// With `udp_invite_socket`: the largest share of a worker's time that rejecting new
    /// INVITEs (their 503s and the ACKs of those) may take, in `(0, 1]`; while it is spent,
    /// new INVITEs are left in their socket and the kernel drops what does not fit. The time
    /// is also left out of the occupancy OCC steers. Default 0.1.
    pub rejection_budget: f64,
    /// Hop-by-hop overload control, client role (RFC 7339 / RFC 7415): `none`, or the
    /// algorithms offered in the Via of every forwarded request and applied to the answers of
    /// next hops, in order of preference: `loss`, `rate`, `explicit-window` (holdline's
    /// `oc-algo="window"`), e.g. `loss,rate`, `rate,loss`. Absent:
    /// `loss` unless `local` is `none`. With `loss` alone the offer is a bare `;oc` (RFC 7339
    /// §4.2: a missing `oc-algo` means loss), which every Via parser takes; one other
    /// algorithm is a quoted `oc-algo="rate"`. Two are the RFC's quoted list
    /// `oc-algo="loss,rate"`, which Kamailio 5.6.3 cannot parse (it drops the request: "bad
    /// header field [,rate\""): offer two only towards next hops known to take it.
    pub feedback: Option<String>,
    /// With `feedback = "window"`: the window's delay threshold `Z_th`, ms; 0 (default):
    /// four times the smallest transaction delay seen to the next hop, at least 20 ms.
    pub window_threshold_ms: u64,
    /// With `feedback = "window"`: what a cut does to the window, `"collapse"` (default: seed
    /// 004's `W = 1`) or `"halve"` (`W / 2`).
    pub window_decrease: String,
    /// With `feedback = "window"`: cut at most once per round (transactions sent before the
    /// last cut neither cut nor grow the window). Default false (seed 004: every completion).
    pub window_once_per_round: bool,
    /// With `feedback = "window"`: what a transaction's delay is measured to, and when it
    /// stops counting against the window: `"first-response"` (default: the next hop's
    /// `100 Trying`, `180` or final; a callee's ringing is not the next hop's load) or
    /// `"final"` (its final response: right only where callees answer at once).
    pub window_delay: String,
    /// Server role: answer upstream clients that offer `oc` with this server's own load (a
    /// loss percentage, or a share of a rate, from its occupancy and the queueing delay of new
    /// INVITEs: see `holdline_overload::HopServer`), and let their new INVITEs skip the local
    /// gate. Needs the occupancy that local `occ` measures. Absent: on with `occ`.
    pub feedback_answer: Option<bool>,
    /// Server role: the queueing delay of new INVITEs steered to, ms. Default 100 (measured:
    /// 20 ms cut a server whose calls take 6 ms each to 0.82–0.93 of its capacity, below the
    /// queueing its own Poisson arrivals cause at 90% occupancy; 100 ms kept 0.92–0.99, and is
    /// far below T1, so no INVITE is retransmitted for it).
    pub feedback_target_delay_ms: u32,
    /// `oc-validity` of the server role's answers, ms. Default 500 (RFC 7339's default).
    pub feedback_validity_ms: u32,
    /// Server role: also answer RFC 7415 rate-based clients (those preferring `rate`) with an
    /// even share of a total rate estimated from the occupancy (OCC's rule on a rate). Default
    /// true (with `feedback_answer`).
    pub feedback_answer_rate: bool,
    /// Server role: also answer explicit-window clients (those preferring holdline's
    /// `oc-algo="window"`) with an even share of a window of the rate at which this server
    /// reads their new INVITEs times `feedback_window_delay_ms`. Default true (with
    /// `feedback_answer`).
    pub feedback_answer_window: bool,
    /// Server role: the explicit window's queueing target, ms (see
    /// `feedback_answer_window`). Default 20.
    pub feedback_window_delay_ms: u32,
    /// RFC 7415 client: the leaky bucket's tolerance in target intervals (back-to-back
    /// INVITEs after a pause). Default 4.
    pub feedback_rate_tolerance: f64,
    /// `[overload.deoc]`: seed 003's DEOC parameters, with `feedback = "deoc"`.
    pub deoc: DeocSettings,
}

/// `[overload.deoc]`: the parameters of seed 003's DEOC at this edge (`feedback = "deoc"`).
/// Every default is the paper's value (see `holdline_overload::DeocConfig`, whose fields
/// these are, and docs/deoc.md).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeocSettings {
    /// `T`, how often each target's rate is adapted, ms. Default 1000.
    pub period_ms: u64,
    /// `w`, the EWMA weight of a new inter-arrival time, in `(0, 1]`. Default 0.1.
    pub ewma_weight: f64,
    /// `α`, the increase parameter (eq. 11). Default 0.2.
    pub alpha: f64,
    /// `k`, the increase exponent (eq. 11), in `[0, 1)`. Default 0.5.
    pub k: f64,
    /// `β`, the multiplicative decrease (eq. 4), in `(0, 1)`. Default 0.125.
    pub beta: f64,
    /// A target's control ends after this many seconds without a rejection (it admits
    /// everything until the next one); 0: never. Default 100.
    pub quiet_s: u64,
    /// Rejections within one period that signal overload (≥ 1): fewer are read as none, and
    /// a target's ended control restarts at this many. Default 1, the paper's; more keeps
    /// stray 503s from restarting and cutting it.
    pub min_rejections: u32,
    /// With `min_rejections` > 1: fewer rejections still signal overload when they are at
    /// least this share of the calls admitted for the target in the period (or the one
    /// before), in `[0, 1]`. Default 0: the count only.
    pub min_rejection_share: f64,
    /// A decrease in a period with at least 10 admitted calls cuts the rate by the period's
    /// overload factor (rejections / admitted) when it exceeds `beta`, up to this share, in
    /// `[0, 0.9]`. Default 0: every decrease is `beta` (the paper's).
    pub max_decrease: f64,
    /// Timeouts (a 408, or no final response) count as rejections. Default true.
    pub timeouts_count: bool,
    /// The smallest admission rate, calls/s. Default 0.1.
    pub min_rate: f64,
    /// Most targets with state. Default 1024.
    pub max_targets: usize,
    /// The final response to a gapped call: 480, 486, 500, 503, 600 or 603. Default 503.
    pub status: u16,
    /// `Retry-After` of those responses, s. Default: `[overload] retry_after_s` (none).
    pub retry_after_s: Option<u32>,
    /// The target of a call whose route names no `deoc_target`: `"next-hop"` (default) or
    /// `"record-route"`, the egress edge of the callee (else of its domain) learned from the
    /// topmost Record-Route of the responses to earlier calls (the next hop until one came).
    pub target: String,
}

impl Default for DeocSettings {
    fn default() -> Self {
        let d = holdline_overload::DeocConfig::default();
        Self {
            period_ms: u64::try_from(d.period.as_millis()).unwrap_or(1000),
            ewma_weight: d.ewma_weight,
            alpha: d.alpha,
            k: d.k,
            beta: d.beta,
            quiet_s: d.quiet_period.map_or(0, |q| q.as_secs()),
            min_rejections: d.min_rejections,
            min_rejection_share: d.min_rejection_share,
            max_decrease: d.max_decrease,
            timeouts_count: d.timeouts_count,
            min_rate: d.min_rate,
            max_targets: d.max_targets,
            status: d.status,
            retry_after_s: None,
            target: "next-hop".into(),
        }
    }
}

impl Default for OverloadSettings {
    fn default() -> Self {
        Self {
            local: "occ".into(),
            target_occupancy: 0.9,
            interval_ms: 100,
            queue_growth: false,
            queue_gate_ms: 20,
            occupancy_clock: "cpu".into(),
            window_threshold_ms: 0,
            window_decrease: "collapse".to_owned(),
            window_once_per_round: false,
            window_delay: "first-response".to_owned(),
            target_delay_ms: 20,
            queue_limit: 100,
            queue_resume: None,
            retry_after_s: None,
            register_retry_after_s: [10, 60],
            emulate_cost_us: 0,
            emulate_reject_cost_us: None,
            emulate_sleep: false,
            smart_forwarding: None,
            smart_forwarding_threshold: 16_384,
            smart_forwarding_hold_ms: 20,
            defer_new_invites: None,
            defer_max_wait_ms: 250,
            defer_fairness: "equal".to_owned(),
            defer_poll_quantum_ms: 500,
            defer_poll_max_hold_ms: 5000,
            defer_poll_open_after_ms: 10,
            advertise_offered_load: false,
            udp_invite_socket: None,
            udp_invite_recv_buffer: 256 * 1024,
            rejection_budget: 0.1,
            feedback: None,
            feedback_answer: None,
            feedback_validity_ms: 500,
            feedback_answer_rate: true,
            feedback_answer_window: true,
            feedback_window_delay_ms: 20,
            feedback_target_delay_ms: 100,
            feedback_rate_tolerance: 4.0,
            deoc: DeocSettings::default(),
        }
    }
}

impl OverloadSettings {
    /// The smart-forwarding mode in effect: the configured one, else `ics` with local control
    /// on and `off` without (`local = "none"` is the no-control baseline of experiments).
    pub fn smart_forwarding_mode(&self) -> &str {
        match &self.smart_forwarding {
            Some(m) => m,
            None if self.local == "none" => "off",
            None => "ics",
        }
    }

    /// Whether new INVITEs read over TCP wait for idle time (see `defer_new_invites`).
    pub fn defers_new_invites(&self) -> bool {
        self.defer_new_invites.unwrap_or(self.local != "none")
    }

    /// The rejection budget (see `rejection_budget`), over OCC's interval.
    pub fn budget_config(&self) -> holdline_overload::BudgetConfig {
        holdline_overload::BudgetConfig {
            share: self.rejection_budget,
            window: Duration::from_millis(self.interval_ms.max(1)),
        }
    }

    /// Whether new INVITEs over UDP get sockets of their own (see `udp_invite_socket`).
    pub fn separates_udp_invites(&self) -> bool {
        self.udp_invite_socket.unwrap_or(self.local != "none")
    }

    /// The `Retry-After` of every 503 these settings produce.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after_s
            .map(|s| Duration::from_secs(u64::from(s)))
    }

    /// UDP: how long a new INVITE may wait in its INVITE socket before it is answered 503
    /// whatever the gate says (`defer_max_wait_ms`), and the 503s' Retry-After; `None` without
    /// INVITE sockets or control.
    pub fn invite_max_wait(&self) -> Option<(Duration, Option<Duration>)> {
        (self.separates_udp_invites() && self.local != "none").then(|| {
            (
                Duration::from_millis(self.defer_max_wait_ms),
                self.retry_after(),
            )
        })
    }

    /// The deferral of new INVITEs over TCP, if on.
    pub fn defer_config(&self) -> Option<holdline_overload::DeferConfig> {
        self.defers_new_invites()
            .then(|| holdline_overload::DeferConfig {
                max_wait: Duration::from_millis(self.defer_max_wait_ms),
                retry_after: self.retry_after(),
                fairness: match self.defer_fairness.as_str() {
                    "offered" => holdline_overload::DeferFairness::Offered,
                    "poll" => holdline_overload::DeferFairness::Poll {
                        quantum: Duration::from_millis(self.defer_poll_quantum_ms),
                        max_hold: Duration::from_millis(self.defer_poll_max_hold_ms),
                        open_after: Duration::from_millis(self.defer_poll_open_after_ms),
                    },
                    _ => holdline_overload::DeferFairness::Equal,
                },
            })
    }

    /// The hop-by-hop client role in effect: the algorithms offered, in order (empty: off);
    /// or the key and why not.
    pub fn feedback_algos(&self) -> Result<Vec<holdline_sip::OcAlgo>, (String, String)> {
        use holdline_sip::OcAlgo;
        let spec = match &self.feedback {
            Some(s) => s.as_str(),
            None if self.local == "none" => "none",
            None => "loss",
        };
        if matches!(spec.trim(), "none" | "window" | "deoc") {
            return Ok(Vec::new());
        }
        let mut algos = Vec::new();
        for t in spec.split(',').map(str::trim) {
            let a = match t {
                "loss" => OcAlgo::Loss,
                "rate" => OcAlgo::Rate,
                "explicit-window" => OcAlgo::Window,
                other => {
                    return Err((
                        "overload.feedback".to_owned(),
                        format!(
                            "`{other}`: expected none, window, deoc, or some of loss, rate and explicit-window separated by commas"
                        ),
                    ));
                }
            };
            if algos.contains(&a) {
                return Err((
                    "overload.feedback".to_owned(),
                    format!("`{t}` is listed twice"),
                ));
            }
            algos.push(a);
        }
        Ok(algos)
    }

    /// The hop-by-hop client (RFC 7339 / RFC 7415) at the forward gate, if on.
    pub fn feedback_client(
        &self,
    ) -> Result<Option<holdline_overload::HopClientConfig>, (String, String)> {
        use holdline_sip::OcAlgo;
        let algos = self.feedback_algos()?;
        if algos.is_empty() {
            return Ok(None);
        }
        let accept = holdline_overload::Accept {
            loss: algos.contains(&OcAlgo::Loss),
            rate: algos.contains(&OcAlgo::Rate),
            window: algos.contains(&OcAlgo::Window),
        };
        let cfg = holdline_overload::HopClientConfig {
            accept,
            rate_tolerance: self.feedback_rate_tolerance,
            retry_after: self.retry_after(),
            ..holdline_overload::HopClientConfig::default()
        };
        holdline_overload::ControllerFactory::validate(&cfg)
            .map_err(|e| ("overload.feedback_rate_tolerance".to_owned(), e.to_string()))?;
        Ok(Some(cfg))
    }

    /// Seed 004's feedback-free window towards next hops (`feedback = "window"`), if on.
    pub fn window_client(&self) -> Option<holdline_overload::DelayWindowConfig> {
        (self.feedback.as_deref().map(str::trim) == Some("window")).then(|| {
            holdline_overload::DelayWindowConfig {
                threshold: (self.window_threshold_ms > 0)
                    .then(|| Duration::from_millis(self.window_threshold_ms)),
                decrease: holdline_overload::WindowDecrease::parse(self.window_decrease.trim())
                    .unwrap_or_default(),
                once_per_round: self.window_once_per_round,
                delay: holdline_overload::WindowDelay::parse(self.window_delay.trim())
                    .unwrap_or_default(),
                retry_after: self.retry_after(),
                ..holdline_overload::DelayWindowConfig::default()
            }
        })
    }

    /// Seed 003's DEOC at this (edge) server's forward gate (`feedback = "deoc"`), if on:
    /// one controller per target (the route's `deoc_target`, else the next hop), fed with the
    /// final responses and timeouts of the INVITEs forwarded to it; `[overload.deoc]`'s
    /// parameters.
    pub fn deoc_client(&self) -> Option<holdline_overload::DeocConfig> {
        (self.feedback.as_deref().map(str::trim) == Some("deoc")).then(|| self.deoc_config())
    }

    /// `[overload.deoc]` as the controller's configuration (not validated: see
    /// [`Self::check_deoc`]).
    fn deoc_config(&self) -> holdline_overload::DeocConfig {
        let d = &self.deoc;
        holdline_overload::DeocConfig {
            period: Duration::from_millis(d.period_ms),
            ewma_weight: d.ewma_weight,
            alpha: d.alpha,
            k: d.k,
            beta: d.beta,
            quiet_period: (d.quiet_s > 0).then(|| Duration::from_secs(d.quiet_s)),
            min_rejections: d.min_rejections,
            min_rejection_share: d.min_rejection_share,
            max_decrease: d.max_decrease,
            timeouts_count: d.timeouts_count,
            min_rate: d.min_rate,
            max_targets: d.max_targets,
            status: d.status,
            retry_after: d
                .retry_after_s
                .map(|s| Duration::from_secs(u64::from(s)))
                .or_else(|| self.retry_after()),
            ..holdline_overload::DeocConfig::default()
        }
    }

    /// `[overload.deoc]` checked by the controller's own rules, whether DEOC is on or not
    /// (a mistake in it is found before it is switched on); the error names the key.
    pub fn check_deoc(&self) -> Result<(), (String, String)> {
        use holdline_overload::ControllerFactory as _;
        if !matches!(self.deoc.target.trim(), "next-hop" | "record-route") {
            return Err((
                "overload.deoc.target".into(),
                format!("`{}`: \"next-hop\" or \"record-route\"", self.deoc.target),
            ));
        }
        self.deoc_config().validate().map_err(|e| {
            let key = match &e {
                holdline_overload::ConfigError::OutOfRange { field, .. }
                | holdline_overload::ConfigError::ZeroDuration { field } => match *field {
                    "period" => ".period_ms",
                    "quiet_period" => ".quiet_s",
                    f => return (format!("overload.deoc.{f}"), e.to_string()),
                },
                _ => "",
            };
            (format!("overload.deoc{key}"), e.to_string())
        })
    }

    /// The controller at the forward gate for next hops' load: the RFC 7339 / RFC 7415
    /// client, seed 004's window or seed 003's DEOC (they exclude each other), if one is on.
    pub fn hop_controller(&self) -> Result<Option<ControllerConfig>, (String, String)> {
        if let Some(w) = self.window_client() {
            return Ok(Some(ControllerConfig::DelayWindow(w)));
        }
        if let Some(d) = self.deoc_client() {
            return Ok(Some(ControllerConfig::Deoc(d)));
        }
        Ok(self.feedback_client()?.map(ControllerConfig::HopClient))
    }

    /// The server role's estimator, when upstream clients are answered.
    pub fn server_role(&self) -> Option<holdline_overload::HopServerConfig> {
        self.answers_feedback()
            .then(|| holdline_overload::HopServerConfig {
                target_occupancy: self.target_occupancy,
                target_delay: Duration::from_millis(u64::from(self.feedback_target_delay_ms)),
                window_delay: Duration::from_millis(u64::from(self.feedback_window_delay_ms)),
                ..holdline_overload::HopServerConfig::default()
            })
    }

    /// Whether the server role answers upstream clients (see `feedback_answer`).
    pub fn answers_feedback(&self) -> bool {
        self.feedback_answer.unwrap_or(self.local == "occ")
    }

    /// The forward-gate controller (TCP smart forwarding), if on; or the key and why not.
    pub fn forward_controller(&self) -> Result<Option<ControllerConfig>, (String, String)> {
        let split = match self.smart_forwarding_mode() {
            "off" => return Ok(None),
            "ics" => holdline_overload::Split::Implicit,
            "ecs" => holdline_overload::Split::Explicit,
            other => {
                return Err((
                    "overload.smart_forwarding".to_owned(),
                    format!("`{other}`: expected off, ics or ecs"),
                ));
            }
        };
        let retry_after = self.retry_after();
        Ok(Some(ControllerConfig::SmartForwarding(
            holdline_overload::SmartForwardingConfig {
                split,
                threshold: self.smart_forwarding_threshold,
                hold: Duration::from_millis(self.smart_forwarding_hold_ms),
                retry_after,
            },
        )))
    }

    /// The controller configuration these settings describe, or the offending key and why.
    pub fn controller(&self) -> Result<ControllerConfig, (String, String)> {
        use holdline_overload::ControllerFactory as _;
        let algorithm: Algorithm =
            self.local
                .parse()
                .map_err(|e: holdline_overload::UnknownAlgorithm| {
                    ("overload.local".to_owned(), e.to_string())
                })?;
        if algorithm.gate() != holdline_overload::Gate::Ingress
            || !algorithm.is_implemented()
            || !matches!(
                algorithm,
                Algorithm::NoControl
                    | Algorithm::Occupancy
                    | Algorithm::QueueDelay
                    | Algorithm::QueueLimit
                    | Algorithm::BangBang
            )
        {
            return Err((
                "overload.local".to_owned(),
                format!(
                    "`{algorithm}` is not a local control algorithm of this server (use occ, queue-delay, queue-limit, bang-bang or none)"
                ),
            ));
        }
        let interval = Duration::from_millis(self.interval_ms);
        let retry_after = self.retry_after();
        let key_of = |field: &str| -> String {
            match field {
                "target_occupancy" => "overload.target_occupancy",
                "interval" => "overload.interval_ms",
                "queue_gate" => "overload.queue_gate_ms",
                "target_delay" => "overload.target_delay_ms",
                "limit" => "overload.queue_limit",
                "resume" => "overload.queue_resume",
                _ => "overload",
            }
            .to_owned()
        };
        let cfg = match ControllerConfig::default_for(algorithm) {
            Ok(ControllerConfig::Occupancy(mut c)) => {
                c.interval = interval;
                c.target_occupancy = self.target_occupancy;
                c.queue_growth = self.queue_growth;
                c.queue_gate =
                    (self.queue_gate_ms > 0).then(|| Duration::from_millis(self.queue_gate_ms));
                c.retry_after = retry_after;
                ControllerConfig::Occupancy(c)
            }
            Ok(ControllerConfig::QueueDelay(mut c)) => {
                c.interval = interval;
                c.target_delay = Duration::from_millis(self.target_delay_ms);
                c.horizon = c.horizon.max(interval.saturating_mul(2));
                c.retry_after = retry_after;
                ControllerConfig::QueueDelay(c)
            }
            Ok(ControllerConfig::QueueLimit(mut c)) => {
                c.limit = self.queue_limit;
                c.resume = match (algorithm, self.queue_resume) {
                    (_, Some(r)) => r,
                    (Algorithm::BangBang, None) => self.queue_limit / 2,
                    _ => self.queue_limit,
                };
                c.retry_after = retry_after;
                ControllerConfig::QueueLimit(c)
            }
            Ok(other) => other,
            Err(e) => return Err(("overload.local".to_owned(), e.to_string())),
        };
        cfg.validate().map_err(|e| {
            let field = match &e {
                holdline_overload::ConfigError::OutOfRange { field, .. }
                | holdline_overload::ConfigError::ZeroDuration { field } => *field,
                holdline_overload::ConfigError::Inverted { low_field, .. } => {
                    low_field.split_whitespace().next().unwrap_or("")
                }
                _ => "",
            };
            (key_of(field), e.to_string())
        })?;
        Ok(cfg)
    }
}

/// DNS resolution of `sip:` route targets (`[dns]`; RFC 3263, docs/scaling.md). The lookups
/// run on a thread of their own, never on a worker; each worker caches the answers.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DnsSettings {
    /// Name servers (`IP:PORT`), asked over UDP (TCP for truncated answers). Default (empty):
    /// the system's (`/etc/resolv.conf`).
    pub servers: Vec<SocketAddr>,
    /// How long one query waits for a server's answer, ms (default 500).
    pub timeout_ms: u64,
    /// Times a query is sent before it has failed (default 2).
    pub attempts: usize,
    /// Shortest time an answer is kept, s (default 1).
    pub min_ttl_s: u64,
    /// Longest time an answer is kept whatever its TTL, s (default 3600).
    pub max_ttl_s: u64,
    /// Longest time a negative answer or a failed lookup is kept, ms (default 1000, at most
    /// 60,000): the longest a name that resolves again can go on failing.
    pub negative_ttl_ms: u64,
    /// How long after its expiry an answer is still used while it is asked again, s
    /// (default 300).
    pub max_stale_s: u64,
    /// How long a target whose branch failed (timeout, 503, transport error) goes last, ms
    /// (default 30,000).
    pub failed_hold_ms: u64,
    /// How long a request may wait for DNS before it is answered 503, ms (default 5000).
    pub park_timeout_ms: u64,
    /// Most requests waiting for one name, per worker (default 256); more get 503.
    pub max_parked_per_name: usize,
    /// Most requests waiting for DNS, per worker (default 4096); more get 503.
    pub max_parked: usize,
    /// Answers cached, per worker (default 4096).
    pub cache_entries: usize,
    /// Resolve Request-URI (and Route) host names no route covers, instead of answering
    /// 404 (default false). The relay policy applies: such a next hop is not a route.
    pub request_uris: bool,
}

impl Default for DnsSettings {
    fn default() -> Self {
        let d = holdline_proto::DnsConfig::default();
        Self {
            servers: Vec::new(),
            timeout_ms: 500,
            attempts: 2,
            min_ttl_s: d.min_ttl.as_secs(),
            max_ttl_s: d.max_ttl.as_secs(),
            negative_ttl_ms: d.negative_ttl.as_millis() as u64,
            max_stale_s: d.max_stale.as_secs(),
            failed_hold_ms: d.failed_hold.as_millis() as u64,
            park_timeout_ms: d.park_timeout.as_millis() as u64,
            max_parked_per_name: d.max_parked_per_name,
            max_parked: d.max_parked,
            cache_entries: d.max_entries,
            request_uris: d.request_uris,
        }
    }
}

impl DnsSettings {
    /// The proxy core's DNS settings, for a server sending over `transports` (in order of
    /// preference: UDP, TCP, TLS).
    pub fn proxy_config(&self, transports: Vec<Transport>) -> holdline_proto::DnsConfig {
        let mut c = holdline_proto::DnsConfig::default();
        c.min_ttl = Duration::from_secs(self.min_ttl_s);
        c.max_ttl = Duration::from_secs(self.max_ttl_s.max(self.min_ttl_s));
        c.negative_ttl = Duration::from_millis(self.negative_ttl_ms);
        c.max_stale = Duration::from_secs(self.max_stale_s);
        c.failed_hold = Duration::from_millis(self.failed_hold_ms);
        c.park_timeout = Duration::from_millis(self.park_timeout_ms.max(1));
        c.max_parked_per_name = self.max_parked_per_name;
        c.max_parked = self.max_parked;
        c.max_entries = self.cache_entries.max(1);
        c.request_uris = self.request_uris;
        if !transports.is_empty() {
            c.transports = transports;
        }
        c
    }

    /// Checks the bounds.
    fn validate(&self) -> Result<(), (String, String)> {
        let err = |k: &str, m: &str| Err((format!("dns.{k}"), m.to_owned()));
        if self.timeout_ms == 0 {
            return err("timeout_ms", "must be at least 1");
        }
        if self.attempts == 0 {
            return err("attempts", "must be at least 1");
        }
        if self.negative_ttl_ms > 60_000 {
            return err(
                "negative_ttl_ms",
                "at most 60000: a failed lookup must not keep a name failing for long",
            );
        }
        if self.max_ttl_s < self.min_ttl_s {
            return err("max_ttl_s", "must be at least min_ttl_s");
        }
        Ok(())
    }
}

/// OPTIONS probing of the load-sharing routes' targets (`[probing]`; docs/scaling.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbingSettings {
    /// Time between two probes of a target, ms (0, the default: no probing).
    pub interval_ms: u64,
    /// A probe without a final response after this long has failed, ms (default 500).
    pub timeout_ms: u64,
    /// Failed probes in a row that take a target down (default 2).
    pub down_after: u32,
}

impl Default for ProbingSettings {
    fn default() -> Self {
        Self {
            interval_ms: 0,
            timeout_ms: 500,
            down_after: 2,
        }
    }
}

/// RFC 3261 timers, ms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimersConfig {
    /// T1, the round-trip estimate (default 500).
    pub t1_ms: u64,
    /// T2, the longest retransmit interval (default 4000).
    pub t2_ms: u64,
    /// T4, how long a message can stay in the network (default 5000).
    pub t4_ms: u64,
}

impl Default for TimersConfig {
    fn default() -> Self {
        Self {
            t1_ms: 500,
            t2_ms: 4000,
            t4_ms: 5000,
        }
    }
}

/// The registrar's intervals (seconds) and contact limit; the defaults are
/// [`holdline_proto::RegistrarConfig`]'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RegistrarSettings {
    /// Shortest non-zero interval accepted; shorter ones (under one hour) get 423.
    pub min_expires: u32,
    /// Longest interval granted; longer requests are shortened to it.
    pub max_expires: u32,
    /// Interval granted when the REGISTER names none.
    pub default_expires: u32,
    /// Most bindings per address-of-record.
    pub max_contacts_per_aor: usize,
}

impl Default for RegistrarSettings {
    fn default() -> Self {
        let d = holdline_proto::RegistrarConfig::default();
        Self {
            min_expires: d.min_expires,
            max_expires: d.max_expires,
            default_expires: d.default_expires,
            max_contacts_per_aor: d.max_contacts_per_aor,
        }
    }
}

impl From<RegistrarSettings> for holdline_proto::RegistrarConfig {
    fn from(r: RegistrarSettings) -> Self {
        Self {
            min_expires: r.min_expires,
            max_expires: r.max_expires,
            default_expires: r.default_expires,
            max_contacts_per_aor: r.max_contacts_per_aor,
        }
    }
}

/// Everything `holdline serve` needs.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Sockets to listen on (default: UDP and TCP on 127.0.0.1:5060).
    pub listen: Vec<Listener>,
    /// Worker threads; 0 means one per available core.
    pub workers: usize,
    /// Domains this server is responsible for (registrar and proxy).
    pub domains: Vec<String>,
    /// Insert Record-Route in initial dialog-creating requests proxied statefully (double
    /// Record-Route when the request leaves on another listener), so that in-dialog requests
    /// come back through this server. Default `true` (as Kamailio's stock configuration);
    /// `false` turns it off.
    pub record_route: bool,
    /// The `host[:port]` written into Record-Route instead of the listener's address (the
    /// `transport` parameter stays the listener's): the name of the cluster this server
    /// belongs to, so that in-dialog requests survive its death (the first stage routes the
    /// name through the `[[hash_routes]]` or `[[routes]]` entry whose domain it is, with
    /// failover; see `docs/scaling.md`). It is an alias too. Absent (default): the
    /// listener's address.
    pub record_route_host: Option<String>,
    /// `stateful` (default) or `stateless`: seed 001's stateless first stage with stateful
    /// fallback. In `stateless` mode the requests `[[hash_routes]]` carry (initial requests,
    /// and in-dialog requests whose Route names a host a hash route covers) and the
    /// in-dialog requests of the dialogs this server record-routed are forwarded without
    /// transactions (RFC 3261 §16.11), UDP in and UDP out; those that need state (TCP or TLS
    /// on either side, a transport change, digest authentication, a DNS next hop, a retransmission or CANCEL of a request handled
    /// statefully, an error answered here) go the stateful way. `redirect`: a redirect
    /// server, initial requests answered `302` with their targets as Contacts. See
    /// `docs/scaling.md`.
    #[serde(deserialize_with = "deserialize_mode")]
    pub mode: ProxyMode,
    /// Servers every accepted REGISTER that changes a binding is copied to (seed 001's
    /// registration propagation: a primary and its backup without a shared store), as
    /// `TRANSPORT:IP:PORT`; REGISTERs from these addresses are taken as copies (stored
    /// without a challenge, not copied on). Default: none. See `docs/scaling.md`.
    pub propagate_registrations: Vec<Listener>,
    /// Hosts (`host` or `host:port`) that also mean this server: a Request-URI or Route naming
    /// one is ours (the Route is popped, RFC 3261 §16.4, and never forwarded to). Default:
    /// none (the listeners' addresses only).
    pub aliases: Vec<String>,
    /// Relay policy: `restricted` (default) relays only requests for a served domain or the
    /// server itself, requests a static route covers, in-dialog requests that came through
    /// the server's own Record-Route, and requests from a `trusted` source; the rest get
    /// `403`. `open` relays every routable request (an open relay: anyone can reach any host
    /// through the server).
    pub relay: String,
    /// Sources trusted to relay anywhere under `relay = "restricted"` (CIDR or address).
    /// Default: loopback (`127.0.0.0/8`, `::1`); a list replaces the default.
    pub trusted: Vec<TrustedNet>,
    /// Location store; absent: a persistent store in [`data_dir`](Self::data_dir).
    pub store: Option<StoreSpec>,
    /// What a REGISTER's 200 OK promises with the persistent store: `commit` (default) — the
    /// change is on disk (the 200 waits for its group commit); `write-behind` — it reaches
    /// the disk within 100 ms plus two commits, and a crash loses what is inside that window.
    /// See `docs/registrar.md`. With a Redis store, `commit` means the Redis primary executed
    /// the write (and, with the URL's `wait_replicas=N`, N replicas acknowledged it or its
    /// `wait_timeout_ms` passed); see `docs/scaling.md`.
    pub durability: String,
    /// The shortest time between the starts of two commits of the persistent store, µs
    /// (default 2,000): the REGISTERs that arrive within it share one commit. It bounds the
    /// commits per second (and their CPU) and adds at most itself to a REGISTER's latency.
    pub commit_window_us: u64,
    /// Data directory; absent: [`default_data_dir`].
    pub data_dir: Option<PathBuf>,
    /// Address of the Prometheus endpoint (`GET /metrics`), which also serves the status
    /// page (`GET /`, `GET /status.json`); absent: off.
    pub metrics: Option<SocketAddr>,
    /// Log filter (tracing `EnvFilter` syntax); `RUST_LOG` takes precedence.
    pub log: String,
    /// How log lines are written on stderr: `text` (default, for people) or `json` (one
    /// JSON object per line: `timestamp`, `level`, `fields.message` and the event's fields,
    /// `target`; for log shippers). Needs a restart.
    pub log_format: String,
    /// How long workers keep running timers after a shutdown signal, ms.
    pub shutdown_grace_ms: u64,
    /// The longest a drain (SIGTERM, `holdline ctl drain`) waits for the calls in progress
    /// before the server stops anyway, seconds (default 30; 0: SIGTERM stops at once).
    pub drain_grace_s: u64,
    /// A drain is over once no request has been in progress on any worker for this long, ms
    /// (default 500): the in-dialog requests of calls just set up (ACK, BYE) get through.
    pub drain_idle_ms: u64,
    /// The control socket of `holdline ctl` (a Unix socket, mode 0600). Absent: `ctl.sock`
    /// in the data directory; an empty path turns it off.
    pub ctl_socket: Option<PathBuf>,
    /// Bounds.
    pub limits: LimitsConfig,
    /// Transaction timers.
    pub timers: TimersConfig,
    /// Registrar intervals.
    pub registrar: RegistrarSettings,
    /// Static routes, tried in order.
    pub routes: Vec<Route>,
    /// Load-sharing routes, tried before the static routes.
    pub hash_routes: Vec<HashRouteSettings>,
    /// Probing of the load-sharing routes' targets.
    pub probing: ProbingSettings,
    /// DNS resolution of `sip:` route targets.
    pub dns: DnsSettings,
    /// Local overload control.
    pub overload: OverloadSettings,
    /// TCP buffer sizes per listener or next hop.
    pub tcp_buffers: Vec<TcpBuffers>,
    /// Per-source flood protection.
    pub flood: FloodSettings,
    /// Digest authentication.
    pub auth: AuthSettings,
    /// TLS.
    pub tls: TlsSettings,
    /// SIP over SCTP over UDP (the `sctp:` listeners and next hops).
    pub sctp: SctpSettings,
    /// RFC 7200 load control (`[load_control]`), both roles.
    pub load_control: LoadControlSettings,
    /// SIP capture to a HEP v3 collector (`[capture]`).
    pub capture: CaptureSettings,
}

/// SIP capture (`[capture]`, docs/operations.md): a HEP v3 copy of every SIP message the
/// workers receive and send, to a collector (Homer, heplify-server, sngrep), made off the
/// hot path by a capture thread behind a bounded queue (a full queue drops the copy).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CaptureSettings {
    /// The collector, `udp:IP:PORT` (one datagram per message) or `tcp:IP:PORT` (messages
    /// back to back on one connection, written in batches: cheaper per message); absent
    /// (default): no capture.
    pub hep: Option<Listener>,
    /// The capture agent id the collector files the messages under (default 0).
    pub agent_id: u32,
    /// The collector's password, sent in every packet's authentication key chunk; absent:
    /// none.
    pub password: Option<String>,
    /// The share of calls captured, by a hash of the Call-ID (all of a call's messages or
    /// none; default 1: every call).
    pub sample: f64,
    /// Capture only the messages whose From or To URI has one of these users (and those of
    /// `call_ids`); empty with `call_ids` empty (default): every message.
    pub users: Vec<String>,
    /// Capture only the messages with one of these Call-IDs (and those of `users`).
    pub call_ids: Vec<String>,
    /// Messages waiting for the capture thread at most (default 16,384); more are dropped
    /// and counted (`holdline_capture_dropped_total{reason="queue_full"}`).
    pub queue: usize,
    /// The capture thread's CPU priority: `background` (default) — it runs only on CPU time
    /// the workers leave, so capture never takes capacity from calls (on a saturated server
    /// the queue fills and copies are dropped and counted); `normal` — it competes with the
    /// workers (every message captured until the server saturates, at the capture's CPU
    /// cost).
    pub priority: CapturePriority,
}

/// `[capture] priority`: whether SIP capture yields the CPU to calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CapturePriority {
    /// The capture thread runs only when the workers leave a CPU idle (`SCHED_IDLE`).
    #[default]
    Background,
    /// The capture thread competes with the workers for CPU.
    Normal,
}

impl Default for CaptureSettings {
    fn default() -> Self {
        Self {
            hep: None,
            agent_id: 0,
            password: None,
            sample: 1.0,
            users: Vec::new(),
            call_ids: Vec::new(),
            queue: 16_384,
            priority: CapturePriority::Background,
        }
    }
}

impl CaptureSettings {
    fn validate(&self) -> Result<(), (String, String)> {
        let err = |k: &str, m: String| Err((format!("capture.{k}"), m));
        if let Some(h) = self.hep
            && !matches!(h.transport, Transport::Udp | Transport::Tcp)
        {
            return err(
                "hep",
                format!("`{h}`: the collector must be udp:IP:PORT or tcp:IP:PORT"),
            );
        }
        if !(self.sample > 0.0 && self.sample <= 1.0) {
            return err(
                "sample",
                format!("{} is not a share of calls in (0, 1]", self.sample),
            );
        }
        if self.queue == 0 || self.queue > 1 << 20 {
            return err("queue", format!("{} is not within 1..=1048576", self.queue));
        }
        if self.password.as_ref().is_some_and(|p| p.len() > 1024) {
            return err("password", "longer than 1024 bytes".into());
        }
        if self
            .users
            .iter()
            .chain(&self.call_ids)
            .any(String::is_empty)
        {
            let k = if self.users.iter().any(String::is_empty) {
                "users"
            } else {
                "call_ids"
            };
            return err(k, "an empty entry matches nothing".into());
        }
        Ok(())
    }
}

/// RFC 7200's load-control event package (`[load_control]`, docs/overload.md): the
/// subscriber role (apply the filters of the servers subscribed to) and the notifier role
/// (publish filters to trusted subscribers).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoadControlSettings {
    /// Subscriber: the servers (`TRANSPORT:IP:PORT`) whose filters apply to the new requests
    /// sent to them. Default: none.
    pub subscribe: Vec<Listener>,
    /// Subscriber: the Expires of our SUBSCRIBEs, seconds (refreshed at 80%). Default 600.
    pub expires_s: u64,
    /// Subscriber: how long after a failed SUBSCRIBE to try again, seconds. Default 5.
    pub retry_s: u64,
    /// Notifier: answer SUBSCRIBEs for `Event: load-control` from trusted sources (the
    /// `trusted` networks, or anyone with `relay = "open"`). Default: on when `filters` are
    /// configured.
    pub publish: Option<bool>,
    /// Notifier: the longest subscription granted, seconds. Default 3600.
    pub max_expires_s: u64,
    /// Notifier: the filters published.
    pub filters: Vec<LoadFilterSettings>,
}

impl Default for LoadControlSettings {
    fn default() -> Self {
        Self {
            subscribe: Vec::new(),
            expires_s: 600,
            retry_s: 5,
            publish: None,
            max_expires_s: 3600,
            filters: Vec::new(),
        }
    }
}

fn default_filter_methods() -> Vec<String> {
    vec!["INVITE".into()]
}

/// One published filter (`[[load_control.filters]]`): a rule of the RFC 7200 document.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadFilterSettings {
    /// The rule's id (unique).
    pub id: String,
    /// Callees (Request-URIs, `sip:user@host`) the filter is for.
    #[serde(default)]
    pub callee: Vec<String>,
    /// Or every callee of this domain.
    #[serde(default)]
    pub callee_domain: Option<String>,
    /// Callers (From URIs) the filter is for.
    #[serde(default)]
    pub caller: Vec<String>,
    /// Or every caller of this domain.
    #[serde(default)]
    pub caller_domain: Option<String>,
    /// Methods the filter is for. Default `["INVITE"]`.
    #[serde(default = "default_filter_methods")]
    pub methods: Vec<String>,
    /// Accept at most this many matching calls per second (`alg="rate"`).
    #[serde(default)]
    pub rate: Option<f64>,
    /// Or turn away this percentage of the matching calls (`alg="loss"`).
    #[serde(default)]
    pub loss_percent: Option<f64>,
    /// Stop applying the filter this long after the server starts, seconds. Default: never.
    #[serde(default)]
    pub duration_s: Option<u64>,
}

impl LoadControlSettings {
    /// Whether the notifier role is on.
    pub fn publishes(&self) -> bool {
        self.publish.unwrap_or(!self.filters.is_empty())
    }

    fn validate(&self) -> Result<(), (String, String)> {
        let err = |k: String, m: String| Err((k, m));
        if let Some(p) = self
            .subscribe
            .iter()
            .find(|p| p.addr.port() == 0 || p.addr.ip().is_unspecified())
        {
            return err(
                "load_control.subscribe".into(),
                format!("{}: a server's address and port", p.addr),
            );
        }
        if self.expires_s < 10 {
            return err("load_control.expires_s".into(), "at least 10".into());
        }
        if self.retry_s == 0 {
            return err("load_control.retry_s".into(), "must be positive".into());
        }
        if self.max_expires_s < 10 {
            return err("load_control.max_expires_s".into(), "at least 10".into());
        }
        for (i, f) in self.filters.iter().enumerate() {
            let key = |k: &str| format!("load_control.filters[{i}].{k}");
            if f.id.is_empty() || f.id.chars().any(char::is_control) {
                return err(key("id"), "a non-empty name".into());
            }
            if self.filters[..i].iter().any(|g| g.id == f.id) {
                return err(key("id"), format!("`{}` is used by another filter", f.id));
            }
            for (k, uris) in [("callee", &f.callee), ("caller", &f.caller)] {
                if let Some(u) = uris.iter().find(|u| {
                    holdline_sip::Uri::parse(u.as_bytes())
                        .ok()
                        .is_none_or(|p| !p.is_sip() || p.host_bytes().is_none())
                }) {
                    return err(key(k), format!("`{u}`: expected a SIP URI (sip:user@host)"));
                }
            }
            for (k, d) in [
                ("callee_domain", &f.callee_domain),
                ("caller_domain", &f.caller_domain),
            ] {
                if let Some(d) = d
                    && (d.is_empty() || d.contains(['@', ':', '/', ' ', '<', '>', '"']))
                {
                    return err(key(k), format!("`{d}`: expected a domain name"));
                }
            }
            if f.methods
                .iter()
                .any(|m| m.is_empty() || !m.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
            {
                return err(key("methods"), "expected method names".into());
            }
            match (f.rate, f.loss_percent) {
                (Some(r), None) if r.is_finite() && r >= 0.0 => {}
                (Some(_), None) => return err(key("rate"), "calls/s, 0 or more".into()),
                (None, Some(l)) if (0.0..=100.0).contains(&l) => {}
                (None, Some(_)) => return err(key("loss_percent"), "0 to 100".into()),
                (Some(_), Some(_)) => {
                    return err(key("rate"), "give rate or loss_percent, not both".into());
                }
                (None, None) => return err(key("id"), "needs rate or loss_percent".into()),
            }
        }
        Ok(())
    }

    /// The proxy's settings (each worker's `shared` filters must then be made the same).
    pub fn proxy_config(&self) -> holdline_proto::load_control::LoadControlConfig {
        use holdline_base::{Duration, Peer};
        use holdline_proto::load_control::{
            Action, FilterRule, Identity, LoadControlConfig, Many, PublishedFilter,
        };
        let identity = |ones: &[String], domain: &Option<String>| {
            (!ones.is_empty() || domain.is_some()).then(|| Identity {
                ones: ones.to_vec(),
                many: domain
                    .iter()
                    .map(|d| Many {
                        domain: Some(d.clone()),
                        ..Many::default()
                    })
                    .collect(),
            })
        };
        LoadControlConfig {
            filters: self
                .filters
                .iter()
                .map(|f| PublishedFilter {
                    rule: FilterRule {
                        id: f.id.clone(),
                        caller: identity(&f.caller, &f.caller_domain),
                        callee: identity(&f.callee, &f.callee_domain),
                        methods: f.methods.iter().map(|m| m.to_ascii_uppercase()).collect(),
                        valid_from: None,
                        valid_until: None,
                        action: match (f.rate, f.loss_percent) {
                            (_, Some(l)) => Action::Loss(l),
                            (r, None) => Action::Rate(r.unwrap_or(0.0)),
                        },
                    },
                    duration: f.duration_s.map(Duration::from_secs),
                })
                .collect(),
            publish: self.publishes(),
            max_expires: Duration::from_secs(self.max_expires_s),
            subscribe: self
                .subscribe
                .iter()
                .map(|l| Peer {
                    addr: l.addr,
                    transport: l.transport,
                    conn: None,
                })
                .collect(),
            expires: Duration::from_secs(self.expires_s),
            retry: Duration::from_secs(self.retry_s),
            ..LoadControlConfig::default()
        }
    }
}

/// SIP over SCTP over UDP (`[sctp]`; RFC 4168 over RFC 6951, docs/transports.md). Every
/// `sctp:` listener and next hop of the server uses these.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SctpSettings {
    /// Send SIP messages unordered (the U bit): a message is delivered as soon as it is
    /// complete, whatever was lost before it (no head-of-line blocking). Default `false`.
    pub unordered: bool,
    /// Outbound streams; a call's messages go on stream `hash(Call-ID) % streams`, so that
    /// calls do not block each other even with ordered delivery. Default 16.
    pub streams: u16,
    /// The SCTP port in the packets' common header (both ends use it). Default 5060.
    pub sctp_port: u16,
    /// Initial, minimum and maximum retransmission timeout, ms (RFC 4960: 3,000, 1,000 and
    /// 60,000).
    pub rto_initial_ms: u64,
    /// See `rto_initial_ms`.
    pub rto_min_ms: u64,
    /// See `rto_initial_ms`.
    pub rto_max_ms: u64,
    /// The most bytes waiting per association (during its setup and not yet acknowledged);
    /// a message beyond it is dropped and counted (`sctp_queue_full`). Default 4 MiB.
    pub max_queued_bytes: usize,
    /// HEARTBEAT interval on an idle association, ms (RFC 4960 HB.interval: 30,000); 0
    /// sends none. A peer that leaves 10 in a row unanswered (Association.Max.Retrans) is
    /// declared unreachable and its association lost, about 5.5 min after it fell silent
    /// with the defaults.
    pub heartbeat_interval_ms: u64,
    /// Ordered or unordered delivery per listener or per peer, overriding `unordered`
    /// (`[sctp.delivery]`, `"IP:PORT" = "ordered"` or `"unordered"`): an address that is one
    /// of the server's `sctp:` listeners sets what it sends on the associations of that
    /// socket; any other address is a peer's (a next hop's or a client's SCTP listener) and
    /// sets what is sent to it, whichever listener carries it.
    pub delivery: BTreeMap<String, SctpDelivery>,
}

/// How SIP messages are sent on an SCTP association.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SctpDelivery {
    /// In order on their stream (a loss holds back the messages behind it on the stream).
    Ordered,
    /// Unordered (the U bit): each message as soon as it is complete.
    Unordered,
}

impl SctpSettings {
    /// The delivery overrides by address (checked by validation: every key parses).
    pub fn delivery_by_addr(&self) -> BTreeMap<SocketAddr, bool> {
        self.delivery
            .iter()
            .filter_map(|(k, v)| Some((k.parse().ok()?, *v == SctpDelivery::Unordered)))
            .collect()
    }
}

impl Default for SctpSettings {
    fn default() -> Self {
        Self {
            unordered: false,
            streams: 16,
            sctp_port: 5060,
            rto_initial_ms: 3_000,
            rto_min_ms: 1_000,
            rto_max_ms: 60_000,
            max_queued_bytes: 4 << 20,
            heartbeat_interval_ms: 30_000,
            delivery: BTreeMap::new(),
        }
    }
}

/// Digest authentication (`[auth]`, RFC 3261 §22 with RFC 7616 and RFC 8760): on when
/// `users_file` is set. REGISTERs for served domains are challenged with 401, out-of-dialog
/// requests from users of served domains (From) with 407 unless their source is `trusted`.
/// Failed authentications are counted per source (trusted sources exempt) and a source past
/// `failure_limit` within `failure_window_ms` is ignored for `failure_cooldown_ms`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthSettings {
    /// The users file (`user@domain MD5-HA1 SHA-256-HA1` per line; `holdline user add`
    /// writes it), reloaded on SIGHUP. Absent (default): no authentication.
    pub users_file: Option<PathBuf>,
    /// The realm of every challenge. Default: the domain of the user the request acts for
    /// (To of a REGISTER, From otherwise), in lowercase. The HA1s must be computed with it.
    pub realm: Option<String>,
    /// How long a nonce is good for, seconds; older ones get `stale=true`. Default 300.
    pub nonce_lifetime_s: u64,
    /// A file whose bytes (at least 16) key the nonces' MAC, so that nonces stay valid across
    /// restarts and between servers sharing it; created with 32 random bytes if absent.
    /// Default: a random key per process.
    pub secret_file: Option<PathBuf>,
    /// The digest algorithms offered, one challenge each, in this order: `SHA-256`, `MD5`.
    /// Default both, SHA-256 first (clients that read only the first challenge, such as
    /// SIPp 3.6, need `MD5` first).
    pub algorithms: Vec<String>,
    /// How many nonces' counts are remembered for replay protection (shared by the workers;
    /// the one seen longest ago goes first). Default 65,536.
    pub nonce_counts: usize,
    /// Most failed authentications per source and window; 0: no throttling. Default 20.
    pub failure_limit: u32,
    /// The window of `failure_limit`, ms. Default 10,000.
    pub failure_window_ms: u64,
    /// How long a source past `failure_limit` is ignored, ms. Default 60,000.
    pub failure_cooldown_ms: u64,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            users_file: None,
            realm: None,
            nonce_lifetime_s: 300,
            secret_file: None,
            algorithms: vec!["SHA-256".into(), "MD5".into()],
            nonce_counts: 65_536,
            failure_limit: 20,
            failure_window_ms: 10_000,
            failure_cooldown_ms: 60_000,
        }
    }
}

impl AuthSettings {
    /// Whether authentication is on.
    pub fn enabled(&self) -> bool {
        self.users_file.is_some()
    }

    /// The algorithms offered, in order.
    pub fn algorithms(&self) -> Result<Vec<holdline_proto::DigestAlgorithm>, (String, String)> {
        let mut out = Vec::new();
        for a in &self.algorithms {
            let alg =
                holdline_proto::DigestAlgorithm::from_name(a.as_bytes()).ok_or_else(|| {
                    (
                        "auth.algorithms".to_owned(),
                        format!("`{a}`: expected \"SHA-256\" or \"MD5\""),
                    )
                })?;
            if !out.contains(&alg) {
                out.push(alg);
            }
        }
        if out.is_empty() {
            return Err((
                "auth.algorithms".to_owned(),
                "at least one algorithm is required".to_owned(),
            ));
        }
        Ok(out)
    }

    /// Checks the values.
    fn validate(&self) -> Result<(), (String, String)> {
        let err = |k: &str, m: &str| Err((k.to_owned(), m.to_owned()));
        self.algorithms()?;
        if self.nonce_lifetime_s == 0 {
            return err("auth.nonce_lifetime_s", "must be positive");
        }
        if self.nonce_counts == 0 {
            return err("auth.nonce_counts", "must be at least 1");
        }
        if self.realm.as_deref().is_some_and(|r| {
            r.is_empty()
                || r.bytes()
                    .any(|b| b < 0x20 || b == 0x7f || b == b'"' || b == b'\\')
        }) {
            return err(
                "auth.realm",
                "must be non-empty, without quotes, backslashes or control characters",
            );
        }
        if self.failure_limit > 0 {
            if self.failure_window_ms == 0 {
                return err("auth.failure_window_ms", "must be positive");
            }
            if self.failure_cooldown_ms == 0 {
                return err("auth.failure_cooldown_ms", "must be positive");
            }
        }
        Ok(())
    }
}

/// Per-source flood protection (`[flood]`, the job of Kamailio's pike module): a source that
/// is not `trusted` and sends more than `limit` requests within `window_ms` is ignored (its
/// requests dropped unanswered) for `cooldown_ms`. Responses are never affected. Counted
/// per worker, in a table of `slots` sources (the hottest keep their place).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FloodSettings {
    /// On or off. Default on.
    pub enabled: bool,
    /// Most requests per source and window. Default 1,000.
    pub limit: u32,
    /// The counting window, ms. Default 2,000.
    pub window_ms: u64,
    /// How long an offender is ignored, ms. Default 10,000.
    pub cooldown_ms: u64,
    /// Sources tracked per worker (about 48 bytes each). Default 65,536.
    pub slots: usize,
}

impl Default for FloodSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            limit: 1_000,
            window_ms: 2_000,
            cooldown_ms: 10_000,
            slots: 65_536,
        }
    }
}

impl FloodSettings {
    /// The guard's configuration with the slot-hash `key`, when on.
    pub fn guard_config(&self, key: u64) -> Option<holdline_overload::FloodConfig> {
        self.enabled.then(|| holdline_overload::FloodConfig {
            limit: self.limit,
            window: Duration::from_millis(self.window_ms),
            cooldown: Duration::from_millis(self.cooldown_ms),
            slots: self.slots,
            key,
            ..holdline_overload::FloodConfig::default()
        })
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        let lo = SocketAddr::from(([127, 0, 0, 1], 5060));
        Self {
            listen: vec![
                Listener {
                    transport: Transport::Udp,
                    addr: lo,
                },
                Listener {
                    transport: Transport::Tcp,
                    addr: lo,
                },
            ],
            workers: 0,
            domains: Vec::new(),
            record_route: true,
            record_route_host: None,
            mode: ProxyMode::Stateful,
            aliases: Vec::new(),
            relay: "restricted".into(),
            durability: "commit".into(),
            commit_window_us: 2_000,
            trusted: IpNet::loopback().into_iter().map(TrustedNet).collect(),
            store: None,
            data_dir: None,
            metrics: None,
            log: "info".into(),
            log_format: "text".into(),
            shutdown_grace_ms: 2000,
            drain_grace_s: 30,
            drain_idle_ms: 500,
            ctl_socket: None,
            limits: LimitsConfig::default(),
            timers: TimersConfig::default(),
            registrar: RegistrarSettings::default(),
            propagate_registrations: Vec::new(),
            routes: Vec::new(),
            hash_routes: Vec::new(),
            probing: ProbingSettings::default(),
            dns: DnsSettings::default(),
            overload: OverloadSettings::default(),
            tcp_buffers: Vec::new(),
            flood: FloodSettings::default(),
            load_control: LoadControlSettings::default(),
            capture: CaptureSettings::default(),
            auth: AuthSettings::default(),
            tls: TlsSettings::default(),
            sctp: SctpSettings::default(),
        }
    }
}

impl ServerConfig {
    /// The relay policy these settings describe.
    pub fn relay_policy(&self) -> RelayPolicy {
        if self.relay == "open" {
            RelayPolicy::Open
        } else {
            RelayPolicy::Restricted {
                trusted: self.trusted.iter().map(|t| t.0).collect(),
            }
        }
    }
}

/// `mode = "stateful" | "stateless" | "redirect"`, refused with the value and what is expected.
fn deserialize_mode<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ProxyMode, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

/// The default `SO_RCVBUF` of UDP sockets (`[limits] udp_recv_buffer`): 8 MiB, what the bench
/// gives both servers (Kamailio's `maxbuffer`).
pub(crate) const DEFAULT_UDP_RECV_BUFFER: usize = 8 << 20;

/// Command-line values that replace the file's (lists replace lists when given).
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--listen`.
    pub listen: Vec<Listener>,
    /// `--domain`.
    pub domains: Vec<String>,
    /// `--store`.
    pub store: Option<StoreSpec>,
    /// `--workers`.
    pub workers: Option<usize>,
    /// `--metrics`.
    pub metrics: Option<SocketAddr>,
    /// `--record-route`.
    pub record_route: Option<bool>,
    /// `--record-route-host`.
    pub record_route_host: Option<String>,
    /// `--route`.
    pub routes: Vec<Route>,
    /// `--overload`: the local control algorithm.
    pub overload: Option<String>,
    /// `--emulate-cost-us`.
    pub emulate_cost_us: Option<u64>,
    /// `--emulate-reject-cost-us`.
    pub emulate_reject_cost_us: Option<u64>,
    /// `--emulate-sleep`.
    pub emulate_sleep: Option<bool>,
    /// `--smart-forwarding`.
    pub smart_forwarding: Option<String>,
    /// `--defer-new-invites`.
    pub defer_new_invites: Option<bool>,
    /// `--udp-invite-socket`.
    pub udp_invite_socket: Option<bool>,
    /// `--udp-recv-buffer` (0: the kernel's default).
    pub udp_recv_buffer: Option<usize>,
    /// `--feedback`.
    pub feedback: Option<String>,
    /// `--log-format`.
    pub log_format: Option<String>,
}

/// A configuration error located in its file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: key `{key}`: {message}")]
pub struct ConfigError {
    /// The file.
    pub file: String,
    /// 1-based line number (0 when unknown, e.g. the file could not be read).
    pub line: usize,
    /// The dotted key (`limits.max_connections`), or `-` when no key applies.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl ServerConfig {
    /// Parses and validates a TOML file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.display().to_string(),
            line: 0,
            key: "-".into(),
            message: e.to_string(),
        })?;
        Self::from_toml(&path.display().to_string(), &text)
    }

    /// Parses and validates TOML text; `file` names it in errors.
    pub fn from_toml(file: &str, text: &str) -> Result<Self, ConfigError> {
        let cfg: Self = toml::from_str(text).map_err(|e| {
            let (line, key) = match e.span() {
                Some(span) => locate(text, span.start),
                None => (0, "-".into()),
            };
            ConfigError {
                file: file.into(),
                line,
                key,
                message: e.message().trim().to_owned(),
            }
        })?;
        cfg.validate().map_err(|(key, message)| ConfigError {
            file: file.into(),
            line: find_key_line(text, &key),
            key,
            message,
        })?;
        Ok(cfg)
    }

    /// Applies command-line overrides, then validates.
    pub fn apply(&mut self, o: Overrides) -> Result<(), String> {
        if !o.listen.is_empty() {
            self.listen = o.listen;
        }
        if !o.domains.is_empty() {
            self.domains = o.domains;
        }
        if !o.routes.is_empty() {
            self.routes = o.routes;
        }
        if let Some(s) = o.store {
            self.store = Some(s);
        }
        if let Some(w) = o.workers {
            self.workers = w;
        }
        if let Some(m) = o.metrics {
            self.metrics = Some(m);
        }
        if let Some(r) = o.record_route {
            self.record_route = r;
        }
        if let Some(h) = o.record_route_host {
            self.record_route_host = Some(h);
        }
        if let Some(a) = o.overload {
            self.overload.local = a;
        }
        if let Some(c) = o.emulate_cost_us {
            self.overload.emulate_cost_us = c;
        }
        if let Some(c) = o.emulate_reject_cost_us {
            self.overload.emulate_reject_cost_us = Some(c);
        }
        if let Some(s) = o.emulate_sleep {
            self.overload.emulate_sleep = s;
        }
        if let Some(s) = o.smart_forwarding {
            self.overload.smart_forwarding = Some(s);
        }
        if let Some(d) = o.defer_new_invites {
            self.overload.defer_new_invites = Some(d);
        }
        if let Some(d) = o.udp_invite_socket {
            self.overload.udp_invite_socket = Some(d);
        }
        if let Some(b) = o.udp_recv_buffer {
            self.limits.udp_recv_buffer = Some(b);
        }
        if let Some(f) = o.feedback {
            self.overload.feedback = Some(f);
        }
        if let Some(f) = o.log_format {
            self.log_format = f;
        }
        self.validate().map_err(|(k, m)| format!("{k}: {m}"))
    }

    /// Checks values serde cannot: returns the offending key and the reason.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let err = |k: &str, m: &str| Err((k.to_owned(), m.to_owned()));
        if self.listen.is_empty() {
            return err("listen", "at least one listener is required");
        }
        // The flood guard's own checks, named by this file's keys.
        let f = &self.flood;
        if f.enabled {
            if f.limit == 0 {
                return err("flood.limit", "must be at least 1");
            }
            if f.window_ms == 0 {
                return err("flood.window_ms", "must be positive");
            }
            if f.cooldown_ms == 0 {
                return err("flood.cooldown_ms", "must be positive");
            }
            if f.slots < 2 {
                return err("flood.slots", "must be at least 2");
            }
        }
        self.auth.validate()?;
        self.dns.validate()?;
        let c = &self.sctp;
        if c.streams == 0 {
            return err("sctp.streams", "must be at least 1");
        }
        if c.rto_min_ms == 0 || c.rto_min_ms > c.rto_initial_ms || c.rto_initial_ms > c.rto_max_ms {
            return err(
                "sctp.rto_min_ms",
                "expected 0 < rto_min_ms <= rto_initial_ms <= rto_max_ms",
            );
        }
        for k in c.delivery.keys() {
            if k.parse::<SocketAddr>().is_err() {
                return Err((
                    format!("sctp.delivery.{k}"),
                    format!("`{k}`: expected IP:PORT (a listener's or a peer's SCTP address)"),
                ));
            }
        }
        let is_sctp =
            |t: &RouteTarget| matches!(t, RouteTarget::Addr(l) if l.transport == Transport::Sctp);
        let sctp_target = self.routes.iter().any(|r| is_sctp(&r.target))
            || self
                .hash_routes
                .iter()
                .any(|r| r.targets.iter().any(is_sctp));
        if sctp_target && !self.listen.iter().any(|l| l.transport == Transport::Sctp) {
            return err(
                "listen",
                "an sctp: route target needs an sctp: listener (the UDP socket SCTP is carried in)",
            );
        }
        if !matches!(self.log_format.as_str(), "text" | "json") {
            return err("log_format", "expected \"text\" or \"json\"");
        }
        if !matches!(self.durability.as_str(), "commit" | "write-behind") {
            return err("durability", "expected \"commit\" or \"write-behind\"");
        }
        if self.commit_window_us > 1_000_000 {
            return err("commit_window_us", "at most 1000000 (one second)");
        }
        self.overload.check_deoc()?;
        if self.mode == ProxyMode::Stateless
            && (self.overload.window_client().is_some() || self.overload.deoc_client().is_some())
        {
            return err(
                "mode",
                "\"stateless\" forwards INVITEs without the transactions that overload.feedback \
                 = \"window\" or \"deoc\" counts: use mode = \"stateful\" with them",
            );
        }
        if let Some(p) = self
            .propagate_registrations
            .iter()
            .find(|p| p.addr.port() == 0 || p.addr.ip().is_unspecified())
        {
            return err(
                "propagate_registrations",
                &format!("{}: a server's address and port", p.addr),
            );
        }
        self.load_control.validate()?;
        self.capture.validate()?;
        if !matches!(self.relay.as_str(), "restricted" | "open") {
            return err("relay", "expected \"restricted\" or \"open\"");
        }
        if self.workers > 1024 {
            return err("workers", "at most 1024 workers");
        }
        if let Some(Err(e)) = self
            .record_route_host
            .as_deref()
            .map(holdline_proto::check_host_port)
        {
            return err("record_route_host", &e.to_string());
        }
        if let Some(e) = self
            .aliases
            .iter()
            .find_map(|a| holdline_proto::check_host_port(a).err())
        {
            return err("aliases", &e.to_string());
        }
        let l = &self.limits;
        if !(512..=1 << 20).contains(&l.max_message_size) {
            return err("limits.max_message_size", "must be between 512 and 1048576");
        }
        if l.conn_queue_bytes < l.max_message_size {
            return err(
                "limits.conn_queue_bytes",
                "must be at least limits.max_message_size",
            );
        }
        if l.tcp_read_buffer.is_some_and(|n| n < l.max_message_size) {
            return err(
                "limits.tcp_read_buffer",
                "must be at least limits.max_message_size",
            );
        }
        if l.max_transactions < 10 {
            return err("limits.max_transactions", "must be at least 10");
        }
        if l.transaction_memory_mb == Some(0) {
            return err("limits.transaction_memory_mb", "must be at least 1");
        }
        if l.handoff_queue == 0 {
            return err("limits.handoff_queue", "must be at least 1");
        }
        if l.idle_timeout_ms == 0 {
            return err("limits.idle_timeout_ms", "must be positive");
        }
        let t = &self.timers;
        if t.t1_ms == 0 || t.t2_ms < t.t1_ms {
            return err("timers.t2_ms", "need 0 < t1_ms <= t2_ms");
        }
        let r = &self.registrar;
        if r.min_expires == 0 {
            return err("registrar.min_expires", "must be at least 1");
        }
        if r.max_expires < r.min_expires {
            return err(
                "registrar.max_expires",
                "must be at least registrar.min_expires",
            );
        }
        if !(r.min_expires..=r.max_expires).contains(&r.default_expires) {
            return err(
                "registrar.default_expires",
                "must be between registrar.min_expires and registrar.max_expires",
            );
        }
        if r.max_contacts_per_aor == 0 {
            return err("registrar.max_contacts_per_aor", "must be at least 1");
        }
        self.overload.controller()?;
        self.overload.forward_controller()?;
        self.overload.feedback_client()?;
        if holdline_overload::WindowDecrease::parse(self.overload.window_decrease.trim()).is_none()
        {
            return err(
                "overload.window_decrease",
                "must be \"collapse\" (seed 004's W = 1) or \"halve\"",
            );
        }
        if holdline_overload::WindowDelay::parse(self.overload.window_delay.trim()).is_none() {
            return err(
                "overload.window_delay",
                "must be \"first-response\" (the next hop's first answer) or \"final\"",
            );
        }
        if self.overload.feedback_target_delay_ms == 0 {
            return err("overload.feedback_target_delay_ms", "must be positive");
        }
        if self.overload.feedback_window_delay_ms == 0 {
            return err("overload.feedback_window_delay_ms", "must be positive");
        }
        if self.overload.feedback_validity_ms == 0 {
            return err(
                "overload.feedback_validity_ms",
                "must be positive (0 would end control in every answer)",
            );
        }
        if self.overload.emulate_cost_us > 1_000_000 {
            return err("overload.emulate_cost_us", "at most 1000000 (one second)");
        }
        let [lo, hi] = self.overload.register_retry_after_s;
        if lo == 0 || lo > hi || hi > 86_400 {
            return err(
                "overload.register_retry_after_s",
                "expected [min, max] seconds with 1 <= min <= max <= 86400",
            );
        }
        if self.overload.emulate_reject_cost_us.unwrap_or(0) > 1_000_000 {
            return err(
                "overload.emulate_reject_cost_us",
                "at most 1000000 (one second)",
            );
        }
        if self.overload.defer_max_wait_ms == 0 {
            return err("overload.defer_max_wait_ms", "must be positive");
        }
        if !matches!(
            self.overload.defer_fairness.as_str(),
            "equal" | "offered" | "poll"
        ) {
            return err(
                "overload.defer_fairness",
                "must be \"equal\", \"offered\" or \"poll\"",
            );
        }
        if self.overload.defer_poll_quantum_ms == 0 {
            return err("overload.defer_poll_quantum_ms", "must be positive");
        }
        if self.overload.defer_poll_max_hold_ms == 0 {
            return err("overload.defer_poll_max_hold_ms", "must be positive");
        }
        if !matches!(self.overload.occupancy_clock.as_str(), "cpu" | "wall") {
            return err("overload.occupancy_clock", "must be \"cpu\" or \"wall\"");
        }
        if self.overload.udp_invite_recv_buffer == 0 {
            return err("overload.udp_invite_recv_buffer", "must be positive");
        }
        if let Err(e) = self.overload.budget_config().validate() {
            return err("overload.rejection_budget", &e.to_string());
        }
        for (i, b) in self.tcp_buffers.iter().enumerate() {
            let key = |k: &str| format!("tcp_buffers[{i}].{k}");
            match (&b.listener, &b.next_hop) {
                (Some(lst), None) => {
                    if !lst.transport.is_stream() {
                        return err(
                            &key("listener"),
                            &format!("`{lst}` is not a TCP or TLS listener"),
                        );
                    }
                    if !self.listen.contains(lst) {
                        return err(&key("listener"), &format!("`{lst}` is not in `listen`"));
                    }
                }
                (None, Some(_)) => {}
                _ => {
                    return err(
                        &key("listener"),
                        "each [[tcp_buffers]] entry names exactly one of `listener` and `next_hop`",
                    );
                }
            }
            if b.read_buffer.is_some_and(|n| n < l.max_message_size) {
                return err(
                    &key("read_buffer"),
                    "must be at least limits.max_message_size",
                );
            }
        }
        if let Some(r) = self.routes.iter().find(|r| r.domain.is_empty()) {
            return err(
                "routes.domain",
                &format!("empty domain (target {})", r.target),
            );
        }
        for (i, r) in self.routes.iter().enumerate() {
            if let Err(e) = r.check() {
                let key = if e.starts_with("deoc_target") {
                    "deoc_target"
                } else {
                    "server_name"
                };
                return err(&format!("routes[{i}].{key}"), &e);
            }
        }
        for (i, r) in self.hash_routes.iter().enumerate() {
            if r.domain.is_empty() {
                return err(&format!("hash_routes[{i}].domain"), "empty domain");
            }
            if let Err(e) = check_deoc_target(r.deoc_target.as_deref()) {
                return err(&format!("hash_routes[{i}].deoc_target"), &e);
            }
            if r.targets.is_empty() {
                return err(&format!("hash_routes[{i}].targets"), "at least one target");
            }
            if !r.weights.is_empty() && r.weights.len() != r.targets.len() {
                return err(
                    &format!("hash_routes[{i}].weights"),
                    &format!(
                        "{} weights for {} targets (one each, or none)",
                        r.weights.len(),
                        r.targets.len()
                    ),
                );
            }
            if let Some(w) = r.weights.iter().find(|w| !(w.is_finite() && **w > 0.0)) {
                return err(
                    &format!("hash_routes[{i}].weights"),
                    &format!("{w}: a weight is a positive number"),
                );
            }
        }
        crate::tls::check(self)?;
        Ok(())
    }

    /// The number of workers to run (resolving 0 to the available cores).
    pub fn worker_count(&self) -> usize {
        if self.workers > 0 {
            self.workers
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        }
    }

    /// The memory budget of each worker's transaction table in bytes:
    /// `limits.transaction_memory_mb`, or a quarter of the machine's RAM (`/proc/meminfo`;
    /// 4 GiB when it cannot be read) shared among the workers, at least 64 MiB.
    pub fn transaction_memory_bytes(&self) -> usize {
        const MIB: u64 = 1 << 20;
        let bytes = match self.limits.transaction_memory_mb {
            Some(mb) => mb.saturating_mul(MIB),
            None => {
                let total = machine_memory_bytes().unwrap_or(16 << 30);
                (total / 4 / self.worker_count().max(1) as u64).max(64 * MIB)
            }
        };
        usize::try_from(bytes).unwrap_or(usize::MAX)
    }

    /// The data directory in effect.
    pub fn data_dir(&self) -> PathBuf {
        self.data_dir.clone().unwrap_or_else(default_data_dir)
    }

    /// The store in effect: the configured one, or a persistent store in the data directory.
    pub fn store(&self) -> StoreSpec {
        self.store
            .clone()
            .unwrap_or_else(|| StoreSpec::Path(self.data_dir().join("location")))
    }

    /// The control socket in effect (`ctl_socket`, or `ctl.sock` in the data directory);
    /// `None` when turned off (an empty path).
    pub fn ctl_socket_path(&self) -> Option<PathBuf> {
        match &self.ctl_socket {
            Some(p) if p.as_os_str().is_empty() => None,
            Some(p) => Some(p.clone()),
            None => Some(self.data_dir().join("ctl.sock")),
        }
    }

    /// The shutdown grace period.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms)
    }

    /// The `[limits]` buffer sizes, which every TCP socket gets unless `[[tcp_buffers]]`
    /// says otherwise.
    pub fn default_buffers(&self) -> BufferSizes {
        let l = &self.limits;
        BufferSizes {
            recv_buffer: l.tcp_recv_buffer,
            send_buffer: l.tcp_send_buffer,
            read_buffer: l.tcp_read_buffer.unwrap_or(l.max_message_size + 16 * 1024),
            max_segment: None,
        }
    }

    fn merged(&self, pick: impl Fn(&TcpBuffers) -> bool) -> BufferSizes {
        let mut b = self.default_buffers();
        for e in self.tcp_buffers.iter().filter(|e| pick(e)) {
            b.recv_buffer = e.recv_buffer.or(b.recv_buffer);
            b.send_buffer = e.send_buffer.or(b.send_buffer);
            b.read_buffer = e.read_buffer.unwrap_or(b.read_buffer);
            b.max_segment = e.max_segment.or(b.max_segment);
        }
        b
    }

    /// The buffer sizes of a TCP listener and the connections accepted on it.
    pub fn listener_buffers(&self, listener: &Listener) -> BufferSizes {
        self.merged(|e| e.listener.as_ref() == Some(listener))
    }

    /// The buffer sizes of the connections opened to each next hop named in
    /// `[[tcp_buffers]]` (others get [`default_buffers`](Self::default_buffers)).
    pub fn next_hop_buffers(&self) -> Vec<(SocketAddr, BufferSizes)> {
        let mut out: Vec<(SocketAddr, BufferSizes)> = Vec::new();
        for a in self.tcp_buffers.iter().filter_map(|e| e.next_hop) {
            if !out.iter().any(|(x, _)| *x == a) {
                out.push((a, self.merged(|e| e.next_hop == Some(a))));
            }
        }
        out
    }
}

/// `MemTotal` of `/proc/meminfo`, bytes.
fn machine_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_full_file() {
        let c = ServerConfig::from_toml("x.toml", "").expect("empty is default");
        assert_eq!(c, ServerConfig::default());
        let text = r#"
listen = ["udp:127.0.0.1:0", "tcp:[::1]:5070"]
workers = 2
domains = ["example.com"]
record_route = true
store = "memory"
metrics = "127.0.0.1:9999"
[limits]
max_connections = 5
[timers]
t1_ms = 100
[[routes]]
domain = "*"
target = "tcp:127.0.0.1:5080"
stateless = true
"#;
        let c = ServerConfig::from_toml("x.toml", text).expect("parses");
        assert_eq!(c.listen.len(), 2);
        assert_eq!(c.listen[1].to_string(), "tcp:[::1]:5070");
        assert_eq!(c.store(), StoreSpec::Memory);
        assert_eq!(c.limits.max_connections, 5);
        assert_eq!(c.timers.t1_ms, 100);
        assert!(c.routes[0].stateless);
    }

    #[test]
    fn redis_store_values_and_errors() {
        let c = ServerConfig::from_toml(
            "r.toml",
            "workers = 1\nstore = \"redis://127.0.0.1:6379/0?namespace=c1\"\n",
        )
        .expect("parses");
        match c.store() {
            StoreSpec::Redis(t) => assert_eq!(t.namespace, "c1"),
            other => panic!("not a Redis store: {other:?}"),
        }
        assert!(matches!(
            "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster".parse::<StoreSpec>(),
            Ok(StoreSpec::Redis(_))
        ));
        let e = ServerConfig::from_toml(
            "r.toml",
            "workers = 1\nstore = \"redis://127.0.0.1:6379/0?namespace=a:b\"\n",
        )
        .expect_err("bad namespace");
        assert_eq!((e.line, e.key.as_str()), (2, "store"), "{e}");
        assert!(e.to_string().contains("namespace"), "{e}");
    }

    #[test]
    fn record_route_host_and_aliases_are_checked() {
        let c = ServerConfig::from_toml(
            "a.toml",
            "record_route_host = \"c1.example.net\"\naliases = [\"c1.example.net:5070\", \"192.0.2.7\"]\n",
        )
        .expect("valid");
        assert_eq!(c.record_route_host.as_deref(), Some("c1.example.net"));
        assert_eq!(c.aliases.len(), 2);
        let e = ServerConfig::from_toml("a.toml", "workers = 1\nrecord_route_host = \"c1 x\"\n")
            .expect_err("bad host");
        assert_eq!((e.line, e.key.as_str()), (2, "record_route_host"));
        assert!(e.message.contains("`c1 x`"), "{e}");
        let e = ServerConfig::from_toml(
            "a.toml",
            "\n\naliases = [\"ok.example.net\", \"bad.example.net:99999\"]\n",
        )
        .expect_err("bad alias");
        assert_eq!((e.line, e.key.as_str()), (3, "aliases"));
        assert!(e.message.contains("bad.example.net:99999"), "{e}");
        let mut c = ServerConfig::default();
        let err = c
            .apply(Overrides {
                record_route_host: Some("sip:c1".into()),
                ..Overrides::default()
            })
            .expect_err("bad --record-route-host");
        assert!(err.starts_with("record_route_host"), "{err}");
    }

    #[test]
    fn capture_is_read_and_bad_settings_are_refused_where_they_are() {
        let c = ServerConfig::from_toml(
            "c.toml",
            "[capture]\nhep = \"udp:127.0.0.1:9060\"\nagent_id = 7\npassword = \"pw\"\nsample = 0.25\nusers = [\"alice\"]\npriority = \"normal\"\n",
        )
        .expect("valid");
        assert_eq!(
            c.capture.hep,
            Some("udp:127.0.0.1:9060".parse().expect("listener"))
        );
        assert_eq!((c.capture.agent_id, c.capture.sample), (7, 0.25));
        assert_eq!(c.capture.password.as_deref(), Some("pw"));
        assert_eq!(c.capture.users, ["alice"]);
        assert_eq!(c.capture.priority, CapturePriority::Normal);
        assert_eq!(
            ServerConfig::default().capture.priority,
            CapturePriority::Background
        );
        assert_eq!(ServerConfig::default().capture.hep, None);
        for (text, line, key, says) in [
            (
                "[capture]\nhep = \"tls:127.0.0.1:9060\"\n",
                2,
                "capture.hep",
                "udp:IP:PORT",
            ),
            ("\n[capture]\nsample = 0.0\n", 3, "capture.sample", "(0, 1]"),
            ("[capture]\nsample = 2\n", 2, "capture.sample", "(0, 1]"),
            ("[capture]\nqueue = 0\n", 2, "capture.queue", "1..="),
            ("[capture]\nusers = [\"\"]\n", 2, "capture.users", "empty"),
            (
                "[capture]\npriority = \"low\"\n",
                2,
                "capture.priority",
                "background",
            ),
            (
                "[capture]\nhep = \"9060\"\n",
                2,
                "capture.hep",
                "udp:IP:PORT",
            ),
            (
                "[capture]\nagent = 1\n",
                2,
                "capture.agent",
                "unknown field",
            ),
        ] {
            let e = ServerConfig::from_toml("c.toml", text).expect_err(text);
            assert_eq!((e.line, e.key.as_str()), (line, key), "{e}");
            assert!(e.message.contains(says), "{e}");
        }
    }

    #[test]
    fn propagate_registrations_are_servers_and_a_bad_one_is_refused_where_it_is() {
        let c = ServerConfig::from_toml(
            "p.toml",
            "propagate_registrations = [\"udp:10.0.0.2:5060\", \"tcp:10.0.0.3:5060\"]\n",
        )
        .expect("valid");
        assert_eq!(c.propagate_registrations.len(), 2);
        assert_eq!(c.propagate_registrations[1].transport, Transport::Tcp);
        let e = ServerConfig::from_toml(
            "p.toml",
            "workers = 1\npropagate_registrations = [\"udp:10.0.0.2:0\"]\n",
        )
        .expect_err("port 0");
        assert_eq!(
            (e.file.as_str(), e.line, e.key.as_str()),
            ("p.toml", 2, "propagate_registrations"),
            "{e}"
        );
        let e = ServerConfig::from_toml("p.toml", "propagate_registrations = [\"10.0.0.2\"]\n")
            .expect_err("no transport");
        assert_eq!(e.line, 1, "{e}");
    }

    #[test]
    fn load_control_filters_and_subscriptions_are_read_and_bad_ones_refused_where_they_are() {
        let c = ServerConfig::from_toml(
            "lc.toml",
            "[load_control]\nsubscribe = [\"udp:10.0.0.2:5060\"]\nexpires_s = 60\n\
             [[load_control.filters]]\nid = \"hotline\"\ncallee = [\"sip:hotline@example.com\"]\n\
             rate = 10.0\nduration_s = 600\n\
             [[load_control.filters]]\nid = \"bots\"\ncaller_domain = \"bots.example\"\n\
             loss_percent = 50\n",
        )
        .expect("valid");
        let lc = &c.load_control;
        assert!(lc.publishes());
        let p = lc.proxy_config();
        assert_eq!(p.subscribe.len(), 1);
        assert_eq!(p.expires, Duration::from_secs(60));
        assert_eq!(p.filters.len(), 2);
        let doc = p.document(0);
        assert_eq!(
            doc.rules[0].action,
            holdline_proto::load_control::Action::Rate(10.0)
        );
        assert_eq!(doc.rules[0].valid_until, Some(600));
        assert_eq!(doc.rules[0].methods, ["INVITE"]);
        assert_eq!(
            doc.rules[1].action,
            holdline_proto::load_control::Action::Loss(50.0)
        );
        assert!(!ServerConfig::default().load_control.publishes());
        let bad = |text: &str| ServerConfig::from_toml("lc.toml", text).expect_err(text);
        let e = bad("workers = 1\n[load_control]\nsubscribe = [\"udp:10.0.0.2:0\"]\n");
        assert_eq!(
            (e.file.as_str(), e.line, e.key.as_str()),
            ("lc.toml", 3, "load_control.subscribe"),
            "{e}"
        );
        let two = "[[load_control.filters]]\nid = \"a\"\nrate = 1.0\n[[load_control.filters]]\nid = \"b\"\n";
        let e = bad(&format!("{two}rate = -1.0\n"));
        assert_eq!(
            (e.line, e.key.as_str()),
            (6, "load_control.filters[1].rate"),
            "{e}"
        );
        let e = bad(&format!("{two}loss_percent = 101\n"));
        assert_eq!(
            (e.line, e.key.as_str()),
            (6, "load_control.filters[1].loss_percent")
        );
        let e = bad(&format!("{two}rate = 1.0\ncallee = [\"hotline\"]\n"));
        assert_eq!(
            (e.line, e.key.as_str()),
            (7, "load_control.filters[1].callee")
        );
        let e = bad(
            "[[load_control.filters]]\nid = \"a\"\nrate = 1.0\n[[load_control.filters]]\nid = \"a\"\nrate = 2.0\n",
        );
        assert_eq!((e.line, e.key.as_str()), (5, "load_control.filters[1].id"));
        let e = bad("[[load_control.filters]]\nid = \"a\"\n");
        assert_eq!((e.line, e.key.as_str()), (2, "load_control.filters[0].id"));
        let e = bad("[[load_control.filters]]\nid = \"a\"\nrate = 1.0\nloss_percent = 3\n");
        assert_eq!(e.key, "load_control.filters[0].rate");
        let e = bad("[load_control]\nexpires_s = 1\n");
        assert_eq!((e.line, e.key.as_str()), (2, "load_control.expires_s"));
        let e = bad("[[load_control.filters]]\nid = \"a\"\nrates = 1.0\n");
        assert_eq!(e.line, 3, "{e}");
    }

    #[test]
    fn mode_is_stateful_unless_set_and_a_bad_value_is_refused_where_it_is() {
        assert_eq!(ServerConfig::default().mode, ProxyMode::Stateful);
        let c = ServerConfig::from_toml("m.toml", "workers = 1\n").expect("valid");
        assert_eq!(c.mode, ProxyMode::Stateful, "absent: stateful");
        let c = ServerConfig::from_toml("m.toml", "mode = \"stateless\"\n").expect("valid");
        assert_eq!(c.mode, ProxyMode::Stateless);
        let c = ServerConfig::from_toml("m.toml", "mode = \"redirect\"\n").expect("valid");
        assert_eq!(c.mode, ProxyMode::Redirect);
        let e = ServerConfig::from_toml("m.toml", "workers = 1\n\nmode = \"stateles\"\n")
            .expect_err("bad mode");
        assert_eq!(
            (e.file.as_str(), e.line, e.key.as_str()),
            ("m.toml", 3, "mode"),
            "{e}"
        );
        assert!(e.message.contains("`stateles`"), "{e}");
        assert!(e.message.contains("\"stateless\""), "{e}");
        let e = ServerConfig::from_toml("m.toml", "mode = 1\n").expect_err("not a string");
        assert_eq!((e.line, e.key.as_str()), (1, "mode"), "{e}");
        // The window and DEOC controllers count the server's own INVITE transactions.
        let e = ServerConfig::from_toml(
            "m.toml",
            "mode = \"stateless\"\n[overload]\nfeedback = \"window\"\n",
        )
        .expect_err("window without transactions");
        assert_eq!((e.line, e.key.as_str()), (1, "mode"), "{e}");
    }

    #[test]
    fn record_route_is_on_unless_turned_off() {
        assert!(ServerConfig::default().record_route);
        let c = ServerConfig::from_toml("a.toml", "record_route = false\n").expect("valid");
        assert!(!c.record_route);
        let c = ServerConfig::from_toml("a.toml", "workers = 1\n").expect("valid");
        assert!(c.record_route, "absent from the file: on");
    }

    #[test]
    fn transaction_memory_budget_defaults_to_a_share_of_ram() {
        let mut c = ServerConfig {
            workers: 2,
            ..ServerConfig::default()
        };
        let two = c.transaction_memory_bytes();
        c.workers = 1;
        let one = c.transaction_memory_bytes();
        assert!(two >= 64 << 20);
        // Shared among the workers (unless both sit at the 64 MiB floor).
        assert!(one == 2 * two || one == two, "{one} vs {two}");
        assert!(one > two || one == 64 << 20);
        c.limits.transaction_memory_mb = Some(100);
        assert_eq!(c.transaction_memory_bytes(), 100 << 20);
        let e = ServerConfig::from_toml("a.toml", "[limits]\ntransaction_memory_mb = 0\n")
            .expect_err("zero");
        assert_eq!(e.key, "limits.transaction_memory_mb");
    }

    #[test]
    fn sctp_listeners_targets_and_settings() {
        let c = ServerConfig::from_toml(
            "s.toml",
            "listen = [\"udp:127.0.0.1:5060\", \"sctp:127.0.0.1:9899\"]\n\
             [[routes]]\ndomain = \"*\"\ntarget = \"sctp:192.0.2.7:9899\"\n\
             [sctp]\nunordered = true\nstreams = 4\n",
        )
        .expect("an sctp listener and next hop");
        assert_eq!(c.listen[1].transport, Transport::Sctp);
        assert_eq!(c.listen[1].to_string(), "sctp:127.0.0.1:9899");
        assert!(c.sctp.unordered);
        assert_eq!(c.sctp.streams, 4);
        let c = ServerConfig::from_toml(
            "s.toml",
            "[sctp.delivery]\n\"127.0.0.1:9899\" = \"unordered\"\n\"192.0.2.7:9899\" = \"ordered\"\n",
        )
        .expect("delivery per address");
        let by = c.sctp.delivery_by_addr();
        assert_eq!(
            by.get(&"127.0.0.1:9899".parse().expect("addr")),
            Some(&true)
        );
        assert_eq!(
            by.get(&"192.0.2.7:9899".parse().expect("addr")),
            Some(&false)
        );
        let e = ServerConfig::from_toml("s.toml", "[sctp.delivery]\n\"peer\" = \"ordered\"\n")
            .expect_err("not an address");
        assert_eq!(e.key, "sctp.delivery.peer");
        let e = ServerConfig::from_toml(
            "s.toml",
            "[sctp.delivery]\n\"127.0.0.1:1\" = \"sideways\"\n",
        )
        .expect_err("not a delivery");
        assert!(
            e.to_string().contains("sideways") || e.to_string().contains("variant"),
            "{e}"
        );
        let e = ServerConfig::from_toml(
            "s.toml",
            "listen = [\"udp:127.0.0.1:5060\"]\n\
             [[routes]]\ndomain = \"*\"\ntarget = \"sctp:192.0.2.7:9899\"\n",
        )
        .expect_err("an sctp target without an sctp listener");
        assert_eq!(e.key, "listen");
        assert!(e.message.contains("sctp: listener"), "{e}");
        let e = ServerConfig::from_toml("s.toml", "[sctp]\nrto_min_ms = 5000\n")
            .expect_err("RTO.Min above RTO.Initial");
        assert_eq!(e.key, "sctp.rto_min_ms");
        let e = ServerConfig::from_toml("s.toml", "[sctp]\nstreams = 0\n").expect_err("no stream");
        assert_eq!((e.key.as_str(), e.line), ("sctp.streams", 2));
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let e = ServerConfig::from_toml("a.toml", "workers = 2\n[limits]\nmax_conections = 3\n")
            .expect_err("unknown key");
        assert_eq!(
            (e.file.as_str(), e.line, e.key.as_str()),
            ("a.toml", 3, "limits.max_conections")
        );
        let e = ServerConfig::from_toml("a.toml", "\nworkers = \"many\"\n").expect_err("bad value");
        assert_eq!((e.line, e.key.as_str()), (2, "workers"));
        let e = ServerConfig::from_toml(
            "a.toml",
            "listen = [\n  \"udp:1.2.3.4:5\",\n  \"quic:1.2.3.4:5\",\n]\n",
        )
        .expect_err("bad listener");
        assert_eq!((e.line, e.key.as_str()), (1, "listen"));
        assert!(e.message.contains("udp, tcp, tls or sctp"), "{e}");
        let e = ServerConfig::from_toml("a.toml", "[limits]\nhandoff_queue = 0\n")
            .expect_err("invalid");
        assert_eq!((e.line, e.key.as_str()), (2, "limits.handoff_queue"));
        let e = ServerConfig::from_toml("a.toml", "[bogus]\nx = 1\n").expect_err("unknown table");
        assert_eq!((e.line, e.key.as_str()), (1, "bogus"));
        let hashed = "[[hash_routes]]\ndomain = \"example.net\"\n\
                      targets = [\"udp:10.0.0.1:5060\", \"tcp:10.0.0.2:5060\"]\n";
        let c = ServerConfig::from_toml("h.toml", hashed).expect("a load-sharing route");
        assert_eq!(c.hash_routes[0].targets.len(), 2);
        assert!(c.hash_routes[0].failover, "fails over by default");
        let c = ServerConfig::from_toml("h.toml", &format!("{hashed}failover = false\n"))
            .expect("failover off");
        assert!(!c.hash_routes[0].failover);
        assert_eq!(c.hash_routes[0].pick, RoutePick::Hash, "hashes by default");
        let c = ServerConfig::from_toml("h.toml", &format!("{hashed}pick = \"round-robin\"\n"))
            .expect("round-robin");
        assert_eq!(c.hash_routes[0].pick, RoutePick::RoundRobin);
        let e = ServerConfig::from_toml("h.toml", &format!("{hashed}pick = \"random\"\n"))
            .expect_err("unknown pick");
        assert_eq!(e.line, 4, "{e}");
        assert!(e.key.ends_with("pick"), "{e}");
        let e = ServerConfig::from_toml("h.toml", &format!("{hashed}weights = [1.0]\n"))
            .expect_err("one weight for two targets");
        assert_eq!(
            (e.file.as_str(), e.line, e.key.as_str()),
            ("h.toml", 4, "hash_routes[0].weights")
        );
        let e = ServerConfig::from_toml("h.toml", &format!("{hashed}weights = [1.0, -2]\n"))
            .expect_err("a negative weight");
        assert!(e.message.contains("positive"), "{e}");
    }

    #[test]
    fn feedback_settings() {
        use holdline_overload::Accept;
        use holdline_sip::OcAlgo;
        let c = ServerConfig::from_toml("x.toml", "").expect("default");
        assert_eq!(c.overload.feedback_algos(), Ok(vec![OcAlgo::Loss]));
        assert!(c.overload.answers_feedback());
        assert_eq!(
            c.overload
                .feedback_client()
                .expect("valid")
                .map(|h| h.accept),
            Some(Accept::LOSS)
        );
        let c = ServerConfig::from_toml("x.toml", "[overload]\nlocal = \"none\"\n").expect("ok");
        assert_eq!(c.overload.feedback_algos(), Ok(vec![]));
        assert!(!c.overload.answers_feedback(), "no fraction to answer with");
        assert_eq!(c.overload.feedback_client(), Ok(None));
        let c = ServerConfig::from_toml(
            "x.toml",
            "[overload]\nfeedback = \"rate, loss\"\nfeedback_answer = false\nfeedback_rate_tolerance = 9\n",
        )
        .expect("ok");
        assert_eq!(
            c.overload.feedback_algos(),
            Ok(vec![OcAlgo::Rate, OcAlgo::Loss])
        );
        assert!(!c.overload.answers_feedback());
        let h = c.overload.feedback_client().expect("valid").expect("on");
        assert_eq!((h.accept, h.rate_tolerance), (Accept::BOTH, 9.0));
        // The explicit window: offered, applied, answered; a bad delay names its key.
        let c = ServerConfig::from_toml(
            "x.toml",
            "[overload]\nfeedback = \"explicit-window, loss\"\nfeedback_window_delay_ms = 30\n",
        )
        .expect("ok");
        assert_eq!(
            c.overload.feedback_algos(),
            Ok(vec![OcAlgo::Window, OcAlgo::Loss])
        );
        let h = c.overload.feedback_client().expect("valid").expect("on");
        assert!(h.accept.window && h.accept.loss && !h.accept.rate);
        assert_eq!(
            c.overload.server_role().map(|r| r.window_delay),
            Some(Duration::from_millis(30))
        );
        let e = ServerConfig::from_toml("x.toml", "[overload]\nfeedback_window_delay_ms = 0\n")
            .expect_err("zero");
        assert!(
            e.to_string().contains("overload.feedback_window_delay_ms"),
            "{e}"
        );
        // Seed 004's window: no offer, the window controller at the forward gate.
        let c = ServerConfig::from_toml(
            "w.toml",
            "[overload]\nfeedback = \"window\"\nwindow_threshold_ms = 50\n",
        )
        .expect("ok");
        assert_eq!(c.overload.feedback_algos(), Ok(vec![]));
        assert_eq!(c.overload.feedback_client(), Ok(None));
        let w = c.overload.window_client().expect("on");
        assert_eq!(w.threshold, Some(Duration::from_millis(50)));
        assert_eq!(
            (w.decrease, w.once_per_round, w.delay),
            (
                holdline_overload::WindowDecrease::Collapse,
                false,
                holdline_overload::WindowDelay::FirstResponse
            )
        );
        let c = ServerConfig::from_toml(
            "w.toml",
            "[overload]\nfeedback = \"window\"\nwindow_decrease = \"halve\"\nwindow_once_per_round = true\nwindow_delay = \"final\"\n",
        )
        .expect("ok");
        let w = c.overload.window_client().expect("on");
        assert_eq!(
            (w.decrease, w.once_per_round, w.delay),
            (
                holdline_overload::WindowDecrease::Halve,
                true,
                holdline_overload::WindowDelay::Final
            )
        );
        assert!(matches!(
            c.overload.hop_controller(),
            Ok(Some(ControllerConfig::DelayWindow(_)))
        ));
        assert!(ServerConfig::default().overload.window_client().is_none());
        for (text, key) in [
            (
                "[overload]\nfeedback = \"window,loss\"\n",
                "overload.feedback",
            ),
            (
                "[overload]\nfeedback = \"loss,loss\"\n",
                "overload.feedback",
            ),
            (
                "[overload]\nfeedback_rate_tolerance = -1\n",
                "overload.feedback_rate_tolerance",
            ),
            (
                "[overload]\nfeedback = \"window\"\nwindow_decrease = \"half\"\n",
                "overload.window_decrease",
            ),
            (
                "[overload]\nfeedback = \"window\"\nwindow_delay = \"first\"\n",
                "overload.window_delay",
            ),
            (
                "[overload]\nfeedback_validity_ms = 0\n",
                "overload.feedback_validity_ms",
            ),
        ] {
            let e = ServerConfig::from_toml("a.toml", text).expect_err(text);
            assert_eq!((e.file.as_str(), e.key.as_str()), ("a.toml", key), "{e}");
            assert!(e.line > 0, "{e}");
        }
    }

    #[test]
    fn overload_section() {
        use holdline_overload::{Algorithm, ControllerConfig, ControllerFactory as _};
        let c = ServerConfig::from_toml("x.toml", "").expect("default");
        let occ = c.overload.controller().expect("default is valid");
        assert_eq!(
            occ.algorithm(),
            Algorithm::Occupancy,
            "local control on by default"
        );
        let text = "[overload]\nlocal = \"queue-delay\"\ninterval_ms = 50\ntarget_delay_ms = 10\nretry_after_s = 2\nemulate_cost_us = 300\nemulate_reject_cost_us = 5\n";
        let c = ServerConfig::from_toml("x.toml", text).expect("parses");
        match c.overload.controller().expect("valid") {
            ControllerConfig::QueueDelay(q) => {
                assert_eq!(q.interval, Duration::from_millis(50));
                assert_eq!(q.target_delay, Duration::from_millis(10));
                assert_eq!(q.retry_after, Some(Duration::from_secs(2)));
            }
            other => panic!("queue-delay expected, got {other:?}"),
        }
        assert_eq!(
            (
                c.overload.emulate_cost_us,
                c.overload.emulate_reject_cost_us
            ),
            (300, Some(5))
        );
        let c = ServerConfig::from_toml(
            "x.toml",
            "[overload]\nlocal = \"bang-bang\"\nqueue_limit = 40\n",
        )
        .expect("parses");
        match c.overload.controller().expect("valid") {
            ControllerConfig::QueueLimit(q) => assert_eq!((q.limit, q.resume), (40, 20)),
            other => panic!("queue-limit expected, got {other:?}"),
        }
        // Admitted calls first over TCP: on by default, off with no control unless asked for.
        let d = ServerConfig::default().overload.defer_config();
        assert_eq!(d.map(|d| d.max_wait), Some(Duration::from_millis(250)));
        let asked = ServerConfig::from_toml(
            "x.toml",
            "[overload]\nlocal = \"none\"\ndefer_new_invites = true\ndefer_max_wait_ms = 40\nretry_after_s = 3\n",
        )
        .expect("parses");
        let d = asked.overload.defer_config().expect("asked for");
        assert_eq!(
            (d.max_wait, d.retry_after),
            (Duration::from_millis(40), Some(Duration::from_secs(3)))
        );
        let none =
            ServerConfig::from_toml("x.toml", "[overload]\nlocal = \"none\"\n").expect("parses");
        assert_eq!(none.overload.defer_config(), None);
        assert_eq!(
            none.overload.controller().expect("valid").algorithm(),
            Algorithm::NoControl
        );
        // Smart forwarding: ICS by default, off with no control unless asked for.
        let split = |c: &ServerConfig| match c.overload.forward_controller().expect("valid") {
            Some(ControllerConfig::SmartForwarding(sf)) => Some(sf.split),
            _ => None,
        };
        assert_eq!(
            split(&ServerConfig::default()),
            Some(holdline_overload::Split::Implicit)
        );
        assert_eq!(split(&none), None);
        for (text, want) in [
            (
                "local = \"none\"\nsmart_forwarding = \"ecs\"",
                Some(holdline_overload::Split::Explicit),
            ),
            ("smart_forwarding = \"off\"", None),
        ] {
            let c = ServerConfig::from_toml("x.toml", &format!("[overload]\n{text}\n"))
                .expect("parses");
            assert_eq!(split(&c), want, "{text}");
        }
        // Its default threshold and hold, and the paper's rule when asked for.
        let rule = |c: &ServerConfig| match c.overload.forward_controller().expect("valid") {
            Some(ControllerConfig::SmartForwarding(sf)) => (sf.threshold, sf.hold),
            _ => panic!("smart forwarding on"),
        };
        assert_eq!(
            rule(&ServerConfig::default()),
            (16_384, Duration::from_millis(20))
        );
        let paper = ServerConfig::from_toml(
            "x.toml",
            "[overload]\nsmart_forwarding_threshold = 0\nsmart_forwarding_hold_ms = 0\n",
        )
        .expect("parses");
        assert_eq!(rule(&paper), (0, Duration::ZERO));
        // Errors name the line and the key.
        let e =
            ServerConfig::from_toml("a.toml", "workers = 1\n[overload]\nlocal = \"occupancy\"\n")
                .expect_err("unknown algorithm");
        assert_eq!((e.line, e.key.as_str()), (3, "overload.local"));
        assert!(e.message.contains("known: none"), "{e}");
        let e = ServerConfig::from_toml("a.toml", "[overload]\nlocal = \"smart-forwarding\"\n")
            .expect_err("not a local algorithm");
        assert_eq!((e.line, e.key.as_str()), (2, "overload.local"));
        let e = ServerConfig::from_toml("a.toml", "[overload]\n\ntarget_occupancy = 1.5\n")
            .expect_err("out of range");
        assert_eq!((e.line, e.key.as_str()), (3, "overload.target_occupancy"));
        let e = ServerConfig::from_toml("a.toml", "[overload]\ninterval_ms = 0\n")
            .expect_err("zero interval");
        assert_eq!((e.line, e.key.as_str()), (2, "overload.interval_ms"));
        let e = ServerConfig::from_toml("a.toml", "[overload]\nemulate_cost_us = 2000000\n")
            .expect_err("too large");
        assert_eq!((e.line, e.key.as_str()), (2, "overload.emulate_cost_us"));
        // Command-line overrides are checked too.
        let mut c = ServerConfig::default();
        let err = c
            .apply(Overrides {
                overload: Some("fast".into()),
                ..Overrides::default()
            })
            .expect_err("bad --overload");
        assert!(err.starts_with("overload.local"), "{err}");
    }

    #[test]
    fn tcp_buffers_per_listener_and_next_hop() {
        let text = r#"
listen = ["udp:127.0.0.1:5060", "tcp:127.0.0.1:5060", "tcp:127.0.0.1:5061"]
[limits]
max_message_size = 4096
tcp_send_buffer = 65536
[[tcp_buffers]]
listener = "tcp:127.0.0.1:5060"
recv_buffer = 4096
read_buffer = 4096
[[tcp_buffers]]
next_hop = "192.0.2.10:5060"
send_buffer = 16384
"#;
        let c = ServerConfig::from_toml("x.toml", text).expect("parses");
        let trunk = c.listener_buffers(&"tcp:127.0.0.1:5060".parse().expect("l"));
        assert_eq!(
            trunk,
            BufferSizes {
                recv_buffer: Some(4096),
                send_buffer: Some(65536),
                read_buffer: 4096,
                max_segment: None,
            }
        );
        let other = c.listener_buffers(&"tcp:127.0.0.1:5061".parse().expect("l"));
        assert_eq!(other, c.default_buffers());
        assert_eq!(other.read_buffer, 4096 + 16 * 1024);
        let hops = c.next_hop_buffers();
        assert_eq!(hops.len(), 1);
        assert_eq!(hops[0].0, "192.0.2.10:5060".parse().expect("a"));
        assert_eq!(hops[0].1.send_buffer, Some(16384));
        assert_eq!(hops[0].1.recv_buffer, None);

        // Errors name the entry's own line.
        let bad = "listen = [\"tcp:127.0.0.1:5060\"]\n[[tcp_buffers]]\nnext_hop = \"10.0.0.1:5060\"\n[[tcp_buffers]]\nlistener = \"tcp:127.0.0.1:5099\"\n";
        let e = ServerConfig::from_toml("b.toml", bad).expect_err("unknown listener");
        assert_eq!((e.line, e.key.as_str()), (5, "tcp_buffers[1].listener"));
        assert!(e.message.contains("not in `listen`"), "{e}");
        let e = ServerConfig::from_toml(
            "b.toml",
            "[[tcp_buffers]]\nnext_hop = \"10.0.0.1:5060\"\nread_buffer = 100\n",
        )
        .expect_err("read buffer below the largest message");
        assert_eq!((e.line, e.key.as_str()), (3, "tcp_buffers[0].read_buffer"));
        let e = ServerConfig::from_toml("b.toml", "[[tcp_buffers]]\nrecv_buffer = 4096\n")
            .expect_err("neither listener nor next hop");
        assert_eq!(e.key, "tcp_buffers[0].listener");
        let e = ServerConfig::from_toml("b.toml", "[[tcp_buffers]]\nnext_hop = \"x\"\n")
            .expect_err("bad address");
        assert_eq!((e.line, e.key.as_str()), (2, "tcp_buffers.next_hop"));
        let e = ServerConfig::from_toml("b.toml", "[overload]\ndefer_max_wait_ms = 0\n")
            .expect_err("zero wait");
        assert_eq!((e.line, e.key.as_str()), (2, "overload.defer_max_wait_ms"));
        let e = ServerConfig::from_toml(
            "b.toml",
            "[overload]\nlocal = \"occ\"\ndefer_fairness = \"fifo\"\n",
        )
        .expect_err("unknown sharing");
        assert_eq!((e.line, e.key.as_str()), (3, "overload.defer_fairness"));
        let c = ServerConfig::from_toml(
            "b.toml",
            "[overload]\ndefer_fairness = \"offered\"\nadvertise_offered_load = true\n",
        )
        .expect("valid");
        assert_eq!(
            c.overload.defer_config().map(|d| d.fairness),
            Some(holdline_overload::DeferFairness::Offered)
        );
        assert!(c.overload.advertise_offered_load);
        let c = ServerConfig::from_toml(
            "b.toml",
            "[overload]\ndefer_fairness = \"poll\"\ndefer_poll_quantum_ms = 200\n",
        )
        .expect("valid");
        assert_eq!(
            c.overload.defer_config().map(|d| d.fairness),
            Some(holdline_overload::DeferFairness::Poll {
                quantum: Duration::from_millis(200),
                max_hold: Duration::from_millis(5000),
                open_after: Duration::from_millis(10),
            })
        );
        let e = ServerConfig::from_toml(
            "b.toml",
            "[overload]\ndefer_fairness = \"poll\"\n\ndefer_poll_max_hold_ms = 0\n",
        )
        .expect_err("zero hold");
        assert_eq!(
            (e.line, e.key.as_str()),
            (4, "overload.defer_poll_max_hold_ms")
        );
        for bad in ["rejection_budget = 0.0", "rejection_budget = 1.5"] {
            let e =
                ServerConfig::from_toml("b.toml", &format!("[overload]\nlocal = \"occ\"\n{bad}\n"))
                    .expect_err(bad);
            assert_eq!(
                (e.line, e.key.as_str()),
                (3, "overload.rejection_budget"),
                "{bad}"
            );
        }
        let e = ServerConfig::from_toml("b.toml", "[flood]\nenabled = true\nlimit = 0\n")
            .expect_err("zero limit");
        assert_eq!((e.line, e.key.as_str()), (3, "flood.limit"));
        let e = ServerConfig::from_toml("b.toml", "[flood]\nslots = 1\n").expect_err("one slot");
        assert_eq!((e.line, e.key.as_str()), (2, "flood.slots"));
        let off = ServerConfig::from_toml("b.toml", "[flood]\nenabled = false\nlimit = 0\n")
            .expect("off: not checked");
        assert_eq!(off.flood.guard_config(1), None);
        let e = ServerConfig::from_toml("b.toml", "[overload]\nudp_invite_recv_buffer = 0\n")
            .expect_err("zero buffer");
        assert_eq!(
            (e.line, e.key.as_str()),
            (2, "overload.udp_invite_recv_buffer")
        );
        let e = ServerConfig::from_toml(
            "b.toml",
            "[overload]\nlocal = \"occ\"\noccupancy_clock = \"cycles\"\n",
        )
        .expect_err("unknown clock");
        assert_eq!((e.line, e.key.as_str()), (3, "overload.occupancy_clock"));
        let ok = ServerConfig::from_toml("b.toml", "[overload]\noccupancy_clock = \"wall\"\n")
            .expect("wall");
        assert_eq!(ok.overload.occupancy_clock, "wall");
        assert_eq!(ServerConfig::default().overload.occupancy_clock, "cpu");
    }

    #[test]
    fn log_format_setting() {
        assert_eq!(ServerConfig::default().log_format, "text");
        let c = ServerConfig::from_toml("l.toml", "log_format = \"json\"\n").expect("parses");
        assert_eq!(c.log_format, "json");
        let e = ServerConfig::from_toml("l.toml", "workers = 1\nlog_format = \"xml\"\n")
            .expect_err("bad log format");
        assert_eq!((e.line, e.key.as_str()), (2, "log_format"));
        let mut c = ServerConfig::default();
        let err = c
            .apply(Overrides {
                log_format: Some("yaml".into()),
                ..Overrides::default()
            })
            .expect_err("bad --log-format");
        assert!(err.starts_with("log_format"), "{err}");
    }

    #[test]
    fn durability_setting() {
        assert_eq!(ServerConfig::default().durability, "commit");
        let c =
            ServerConfig::from_toml("d.toml", "durability = \"write-behind\"\n").expect("parses");
        assert_eq!(c.durability, "write-behind");
        let e = ServerConfig::from_toml("d.toml", "workers = 1\ndurability = \"sometimes\"\n")
            .expect_err("bad durability");
        assert_eq!((e.line, e.key.as_str()), (2, "durability"));
        assert_eq!(ServerConfig::default().commit_window_us, 2_000);
        let e = ServerConfig::from_toml("d.toml", "workers = 1\ncommit_window_us = 5000000\n")
            .expect_err("too long a window");
        assert_eq!((e.line, e.key.as_str()), (2, "commit_window_us"));
    }

    #[test]
    fn relay_policy_settings() {
        assert_eq!(
            ServerConfig::default().relay_policy(),
            RelayPolicy::default()
        );
        let c = ServerConfig::from_toml(
            "x.toml",
            "relay = \"restricted\"\ntrusted = [\"10.0.0.0/8\", \"2001:db8::1\"]\n",
        )
        .expect("parses");
        let p = c.relay_policy();
        assert!(p.trusts("10.9.8.7".parse().expect("ip")));
        assert!(p.trusts("2001:db8::1".parse().expect("ip")));
        assert!(
            !p.trusts("127.0.0.1".parse().expect("ip")),
            "a list replaces the default"
        );
        let open = ServerConfig::from_toml("x.toml", "relay = \"open\"\n").expect("parses");
        assert_eq!(open.relay_policy(), RelayPolicy::Open);
        let e = ServerConfig::from_toml("b.toml", "workers = 1\nrelay = \"closed\"\n")
            .expect_err("bad relay");
        assert_eq!((e.line, e.key.as_str()), (2, "relay"));
        let e = ServerConfig::from_toml("b.toml", "\ntrusted = [\"10.0.0.0/33\"]\n")
            .expect_err("bad network");
        assert_eq!((e.line, e.key.as_str()), (2, "trusted"));
        assert!(e.message.contains("10.0.0.0/33"), "{}", e.message);
    }

    #[test]
    fn udp_invite_socket_setting() {
        let d = ServerConfig::default();
        assert!(d.overload.separates_udp_invites(), "on by default");
        let none =
            ServerConfig::from_toml("x.toml", "[overload]\nlocal = \"none\"\n").expect("parses");
        assert!(
            !none.overload.separates_udp_invites(),
            "off without control"
        );
        assert_eq!(d.overload.budget_config().share, 0.1);
        let c = ServerConfig::from_toml(
            "x.toml",
            "[overload]\nudp_invite_socket = true\nrejection_budget = 0.25\ninterval_ms = 50\n",
        )
        .expect("parses");
        assert!(c.overload.separates_udp_invites());
        assert_eq!(
            c.overload.budget_config(),
            holdline_overload::BudgetConfig {
                share: 0.25,
                window: Duration::from_millis(50),
            }
        );
    }

    #[test]
    fn auth_section() {
        let c = ServerConfig::from_toml("x.toml", "").expect("default");
        assert!(!c.auth.enabled(), "off by default");
        let text = "[auth]\nusers_file = \"u.txt\"\nrealm = \"example.com\"\n\
                    algorithms = [\"MD5\"]\nfailure_limit = 5\n";
        let c = ServerConfig::from_toml("x.toml", text).expect("parses");
        assert!(c.auth.enabled());
        assert_eq!(
            c.auth.algorithms(),
            Ok(vec![holdline_proto::DigestAlgorithm::Md5])
        );
        assert_eq!((c.auth.failure_limit, c.auth.nonce_lifetime_s), (5, 300));
        for (text, line, key) in [
            ("[auth]\nalgorithms = [\"SHA-1\"]\n", 2, "auth.algorithms"),
            ("[auth]\nalgorithms = []\n", 2, "auth.algorithms"),
            (
                "[auth]\n\nnonce_lifetime_s = 0\n",
                3,
                "auth.nonce_lifetime_s",
            ),
            ("[auth]\nrealm = \"a\\\"b\"\n", 2, "auth.realm"),
            (
                "[auth]\nfailure_window_ms = 0\n",
                2,
                "auth.failure_window_ms",
            ),
            ("[auth]\nuser_file = \"u\"\n", 2, "auth.user_file"),
        ] {
            let e = ServerConfig::from_toml("a.toml", text).expect_err(text);
            assert_eq!((e.line, e.key.as_str()), (line, key), "{text}: {e}");
        }
    }

    #[test]
    fn registrar_section() {
        let c = ServerConfig::from_toml("x.toml", "").expect("default");
        assert_eq!(
            holdline_proto::RegistrarConfig::from(c.registrar),
            holdline_proto::RegistrarConfig::default()
        );
        let text = "[registrar]\nmin_expires = 1\nmax_expires = 600\ndefault_expires = 300\n";
        let c = ServerConfig::from_toml("x.toml", text).expect("parses");
        let r = holdline_proto::RegistrarConfig::from(c.registrar);
        assert_eq!(
            (r.min_expires, r.max_expires, r.default_expires),
            (1, 600, 300)
        );
        assert_eq!(r.max_contacts_per_aor, 10);
        let e =
            ServerConfig::from_toml("a.toml", "[registrar]\nmin_expires = 0\n").expect_err("zero");
        assert_eq!((e.line, e.key.as_str()), (2, "registrar.min_expires"));
        let e =
            ServerConfig::from_toml("a.toml", "[registrar]\nmin_expires = 10\nmax_expires = 5\n")
                .expect_err("max below min");
        assert_eq!((e.line, e.key.as_str()), (3, "registrar.max_expires"));
        let e = ServerConfig::from_toml("a.toml", "[registrar]\nmin_expire = 1\n")
            .expect_err("unknown key");
        assert_eq!((e.line, e.key.as_str()), (2, "registrar.min_expire"));
    }

    #[test]
    fn overrides_replace() {
        let mut c = ServerConfig::default();
        c.apply(Overrides {
            listen: vec!["tcp:127.0.0.1:0".parse().expect("l")],
            workers: Some(3),
            routes: vec![
                "example.com=udp:127.0.0.1:5090,stateless"
                    .parse()
                    .expect("r"),
            ],
            ..Overrides::default()
        })
        .expect("valid");
        assert_eq!(c.listen.len(), 1);
        assert_eq!(c.worker_count(), 3);
        assert!(c.routes[0].stateless);
        assert!("x".parse::<Route>().is_err());
    }

    #[test]
    fn routes_name_dns_targets_and_dns_settings_are_bounded() {
        let c = ServerConfig::from_toml(
            "d.toml",
            "[dns]\nservers = [\"127.0.0.1:5353\"]\nnegative_ttl_ms = 500\n\
             [[routes]]\ndomain = \"example.net\"\ntarget = \"sip:Proxy.Example.NET\"\n\
             [[routes]]\ndomain = \"*\"\ntarget = \"udp:127.0.0.1:5070\"\n",
        )
        .expect("valid");
        match &c.routes[0].target {
            RouteTarget::Dns(t) => assert_eq!(t.to_string(), "sip:proxy.example.net"),
            other => panic!("not a DNS target: {other}"),
        }
        assert!(c.routes[1].target.addr().is_some());
        assert_eq!(c.dns.servers, ["127.0.0.1:5353".parse().expect("addr")]);
        let p = c.dns.proxy_config(vec![Transport::Udp]);
        assert_eq!(p.negative_ttl, Duration::from_millis(500));
        assert_eq!(p.transports, [Transport::Udp]);
        // From the command line too; never stateless.
        let r: Route = "example.net=sip:proxy.example.net;transport=tcp"
            .parse()
            .expect("a DNS route");
        assert!(matches!(r.target, RouteTarget::Dns(_)));
        assert!(
            "example.net=sip:proxy.example.net,stateless"
                .parse::<Route>()
                .is_err()
        );
        assert!("example.net=sip:bad host".parse::<Route>().is_err());
        let e = ServerConfig::from_toml("d.toml", "[dns]\nnegative_ttl_ms = 3600000\n")
            .expect_err("a negative TTL of an hour");
        assert_eq!((e.line, e.key.as_str()), (2, "dns.negative_ttl_ms"));
    }

    #[test]
    fn routes_name_deoc_targets_checked_with_their_line() {
        let c = ServerConfig::from_toml(
            "e.toml",
            "[overload]\nfeedback = \"deoc\"\nemulate_sleep = true\n\
             [[routes]]\ndomain = \"e3.lab\"\ntarget = \"udp:127.0.0.1:5070\"\n\
             deoc_target = \"E3\"\n\
             [[hash_routes]]\ndomain = \"e4.lab\"\ntargets = [\"udp:127.0.0.1:5070\"]\n\
             deoc_target = \"E4\"\n",
        )
        .expect("valid");
        assert_eq!(c.routes[0].deoc_target.as_deref(), Some("E3"));
        assert_eq!(c.hash_routes[0].deoc_target.as_deref(), Some("E4"));
        assert!(c.overload.emulate_sleep);
        let names = crate::deoc_names(&c);
        assert_eq!(names.len(), 2);
        assert!(names.values().any(|n| n == "E4"));
        let r: Route = "e3.lab=udp:127.0.0.1:5070,deoc_target=E3"
            .parse()
            .expect("a route naming its target edge");
        assert_eq!(r.deoc_target.as_deref(), Some("E3"));
        assert!(
            "e3.lab=udp:127.0.0.1:5070,deoc_target="
                .parse::<Route>()
                .is_err()
        );
        let e = ServerConfig::from_toml(
            "e.toml",
            "[[routes]]\ndomain = \"*\"\ntarget = \"udp:127.0.0.1:5070\"\n\
             deoc_target = \"a b\"\n",
        )
        .expect_err("a space in a label");
        assert_eq!(e.key.as_str(), "routes[0].deoc_target");
        let e = ServerConfig::from_toml(
            "e.toml",
            "[[hash_routes]]\ndomain = \"*\"\ntargets = [\"udp:127.0.0.1:5070\"]\n\
             deoc_target = \"\"\n",
        )
        .expect_err("empty");
        assert_eq!((e.line, e.key.as_str()), (4, "hash_routes[0].deoc_target"));
    }

    #[test]
    fn deoc_parameters_come_from_their_table_and_are_checked_with_their_line() {
        let c = ServerConfig::from_toml(
            "e.toml",
            "[overload]\nfeedback = \"deoc\"\nretry_after_s = 7\n\
             [overload.deoc]\nalpha = 0.5\nbeta = 0.25\nquiet_s = 0\nstatus = 480\n\
             min_rejections = 3\nmin_rejection_share = 0.25\nmax_decrease = 0.5\n",
        )
        .expect("valid");
        let d = c.overload.deoc_client().expect("deoc on");
        assert_eq!((d.alpha, d.beta, d.status), (0.5, 0.25, 480));
        assert_eq!((d.min_rejections, d.min_rejection_share), (3, 0.25));
        assert_eq!(d.max_decrease, 0.5);
        assert_eq!(d.quiet_period, None, "0: never terminates");
        assert_eq!(d.retry_after, Some(Duration::from_secs(7)), "[overload]'s");
        assert_eq!(d.k, holdline_overload::DeocConfig::default().k);
        let paper = ServerConfig::from_toml("e.toml", "[overload]\nfeedback = \"deoc\"\n")
            .expect("valid")
            .overload
            .deoc_client()
            .expect("deoc on");
        assert_eq!(paper, holdline_overload::DeocConfig::default());
        for (text, line, key) in [
            ("[overload.deoc]\nk = 1.5\n", 2, "overload.deoc.k"),
            (
                "[overload.deoc]\n\nstatus = 200\n",
                3,
                "overload.deoc.status",
            ),
            (
                "[overload.deoc]\nperiod_ms = 0\n",
                2,
                "overload.deoc.period_ms",
            ),
            ("[overload.deoc]\ngamma = 1\n", 2, "overload.deoc.gamma"),
            (
                "[overload.deoc]\nmin_rejections = 0\n",
                2,
                "overload.deoc.min_rejections",
            ),
            (
                "[overload.deoc]\nmax_decrease = 0.95\n",
                2,
                "overload.deoc.max_decrease",
            ),
            (
                "[overload.deoc]\nmin_rejection_share = 2\n",
                2,
                "overload.deoc.min_rejection_share",
            ),
            (
                "[overload.deoc]\n\ntarget = \"via\"\n",
                3,
                "overload.deoc.target",
            ),
        ] {
            let e = ServerConfig::from_toml("e.toml", text).expect_err(text);
            assert_eq!((e.line, e.key.as_str()), (line, key), "{text}: {e}");
            assert!(e.to_string().contains("e.toml"), "{e}");
        }
    }
}
