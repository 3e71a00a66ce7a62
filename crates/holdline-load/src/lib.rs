//! The socket loop of `holdline load`: one thread, mio readiness, batched UDP
//! (`recvmmsg`/`sendmmsg`), non-blocking TCP connections, or SCTP over UDP (RFC 4168 over
//! RFC 6951, [`holdline_sctp::SctpUdp`]), around one [`holdline_agent::Agent`].
//!
//! Sockets:
//! - the calling legs (UAC and registration): `--connections M` UDP sockets (M source ports)
//!   or M TCP connections to the target, or over SCTP M UDP sockets each carrying its own
//!   SCTP endpoint (M associations to the target); leg `i` is `ConnId(i)` for the agent;
//! - the UAS: one UDP socket, or a TCP listener whose accepted connections answer on
//!   themselves, or one UDP socket whose SCTP endpoint accepts every association and
//!   answers each message on the association it came on.
//!
//! The loop hands every received message to the agent, sends what the agent queued, fires
//! its timers when due, writes a CSV row and a progress line each second, and stops when the
//! agent is done, when the drain time after the last arrival passes (the hard stop), or when
//! the caller's stop flag is raised (SIGINT/SIGTERM in the binary).

use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration as StdDuration;
use std::time::Instant as StdInstant;

use holdline_agent::{Agent, AgentConfig};
use holdline_base::{ConnId, Duration, Instant, Peer, Transport};
use holdline_io::Clock;
use holdline_io::tcp::{ConnLimits, TcpConn, TcpListener, TcpOptions};
use holdline_io::udp::{RecvBatch, SendBatch, UdpOptions, UdpSocket};
use holdline_metrics::{Report, csv_header, csv_row, progress_line, summary_table};
use holdline_sctp::{SctpStats, SctpUdp, call_id_key};
use holdline_sip::{Frame, Framer, Limits};
use mio::{Events, Interest, Poll, Token};
use slab::Slab;

/// The settings of the SCTP endpoints of a `Transport::Sctp` run (streams, ordered or
/// unordered, bounds; see [`LoadConfig::sctp`]).
pub use holdline_sctp::SctpConfig;

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// One line rewritten in place on a terminal, plain lines otherwise.
    Auto,
    /// Plain lines (one per interval) on stderr.
    Lines,
    /// Nothing.
    Quiet,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// The agent; its `legs` and `uas_addr` are filled in from the bound sockets.
    pub agent: AgentConfig,
    /// Where the UAS listens; for a UAC alone, the local address its legs bind (port 0:
    /// ephemeral; otherwise leg `i` binds port + i over UDP).
    pub listen: SocketAddr,
    /// Calling legs: UDP source ports or TCP connections.
    pub connections: usize,
    /// After the last arrival, wait at most this long for calls in progress (then stop hard).
    pub drain: Duration,
    /// Stop after this long whatever happens (a UAS without limits runs until then or until
    /// the stop flag).
    pub max_time: Option<Duration>,
    /// Per-interval CSV file.
    pub csv: Option<PathBuf>,
    /// Progress display.
    pub progress: Progress,
    /// Under load, wake at most once per this interval: after a wake-up that handled many
    /// messages (16 or more), the loop waits until this long after it before polling again,
    /// so that messages arriving in between are read and answered in batches (one
    /// `recvmmsg`/`sendmmsg` for many) instead of one system call per message. Adds at most
    /// this much delay per hop under load and none at light load; zero disables it.
    pub coalesce: Duration,
    /// SO_RCVBUF/SO_SNDBUF for every socket, bytes.
    pub socket_buffer: Option<usize>,
    /// The UAC calls the in-process UAS (`holdline load pair`): its target is set to the
    /// UAS's bound address.
    pub target_uas: bool,
    /// Free-form facts copied into the report's `meta`.
    pub meta: serde_json::Value,
    /// At the end, write here the address of every user a 2xx answered a REGISTER for (one
    /// per line): what the registrar acknowledged, to check against its store after a crash.
    pub acked_file: Option<PathBuf>,
    /// The TLS sessions of a `Transport::Tls` run.
    pub tls: Option<LoadTls>,
    /// Source addresses of the calling legs' TCP/TLS connections, taken in turn (leg `i`
    /// binds `local_ips[i % len]`); empty: the kernel's choice. One address has one
    /// ephemeral port range (about 28,000 ports), so tens of thousands of connections to
    /// one server need several (127.0.0.2, 127.0.0.3, ... on loopback).
    pub local_ips: Vec<std::net::IpAddr>,
    /// The SCTP endpoints of a `Transport::Sctp` run: every calling leg's (one association
    /// each to its target) and the UAS's (accepting). The defaults match `holdline serve`'s
    /// `[sctp]` defaults (SCTP port 5060 in the common header, 16 streams, ordered).
    pub sctp: SctpConfig,
    /// Set every calling leg's association (SCTP) or connection (TCP, TLS) up before the
    /// first call, waiting at most this long: the calls then measure the path, not the
    /// set-up (a lost INIT or SYN holds the first calls for a second or three).
    pub connect_first: Option<Duration>,
}

/// TLS for the connections of a run over `Transport::Tls`: the calling legs are TLS clients
/// that verify the target's certificate, the UAS's accepted connections TLS servers.
#[derive(Clone, Debug)]
pub struct LoadTls {
    /// For the calling legs, and the name the target's certificate must carry.
    pub client: Option<(
        Arc<rustls::ClientConfig>,
        rustls::pki_types::ServerName<'static>,
    )>,
    /// For the connections the UAS accepts.
    pub server: Option<Arc<rustls::ServerConfig>>,
}

impl LoadTls {
    /// The sessions from PEM files: `ca` (the CAs the target's certificate is verified
    /// against) and `server_name` (the name it must carry; its IP address by default) for
    /// the calling side, `cert` + `key` for the answering side. An error names the file or
    /// the option at fault.
    pub fn from_files(
        ca: Option<&Path>,
        server_name: Option<&str>,
        target: Option<SocketAddr>,
        cert_key: Option<(&Path, &Path)>,
    ) -> Result<Self, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client = match (ca, target) {
            (Some(ca), Some(target)) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in holdline_io::pem::certificates(ca)? {
                    roots
                        .add(c)
                        .map_err(|e| format!("`{}`: unusable CA certificate: {e}", ca.display()))?;
                }
                let config = rustls::ClientConfig::builder_with_provider(provider.clone())
                    .with_safe_default_protocol_versions()
                    .map_err(|e| e.to_string())?
                    .with_root_certificates(roots)
                    .with_no_client_auth();
                let name = match server_name {
                    Some(n) => {
                        rustls::pki_types::ServerName::try_from(n.to_owned()).map_err(|_| {
                            format!("--tls-server-name `{n}`: not a DNS name or IP address")
                        })?
                    }
                    None => rustls::pki_types::ServerName::IpAddress(target.ip().into()),
                };
                Some((Arc::new(config), name))
            }
            (None, Some(_)) => return Err("a TLS caller needs --tls-ca FILE".into()),
            _ => None,
        };
        let server = match cert_key {
            Some((cert, key)) => {
                let config = rustls::ServerConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|e| e.to_string())?
                    .with_no_client_auth()
                    .with_single_cert(
                        holdline_io::pem::certificates(cert)?,
                        holdline_io::pem::private_key(key)?,
                    )
                    .map_err(|e| format!("`{}` with `{}`: {e}", key.display(), cert.display()))?;
                Some(Arc::new(config))
            }
            None => None,
        };
        Ok(Self { client, server })
    }
}

/// Why a run could not start or continue.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Binding or connecting failed.
    #[error("{what} {addr}: {source}")]
    Socket {
        /// What was being done.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: io::Error,
    },
    /// The agent refused its configuration.
    #[error(transparent)]
    Agent(#[from] holdline_agent::ConfigError),
    /// The CSV file could not be written.
    #[error("CSV file {path}: {source}")]
    Csv {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// Polling failed.
    #[error("poll: {0}")]
    Poll(io::Error),
    /// A TLS run lacks the session for one of its sides, or a session could not start.
    #[error("TLS: {0}")]
    Tls(String),
}

const LEG_BASE: usize = 1;
const UAS_UDP: Token = Token(1 << 20);
const LISTENER: Token = Token(1 << 21);
const CONN_BASE: usize = 1 << 22;
const UAS_UDP_ID: u64 = 1 << 31;
const ACCEPTED_ID: u64 = 1 << 32;
const RECV_SLOTS: usize = 64;
const RECV_SLOT: usize = 16 * 1024;
const UDP_BUDGET: usize = 16;
/// Coalesce only after a wake-up that handled at least this many messages.
const COALESCE_MIN: usize = 16;
/// Datagrams taken from an SCTP endpoint per `sendmmsg`.
const SCTP_SEND_BATCH: usize = 32;
/// At the end of an SCTP run, how long the associations get to shut down gracefully (the
/// peer acknowledges what is outstanding, then SHUTDOWN, SHUTDOWN ACK, SHUTDOWN COMPLETE).
const SCTP_SHUTDOWN_WAIT: StdDuration = StdDuration::from_millis(500);

/// One UDP socket carrying SCTP, with its endpoint (every association of the socket).
struct SctpSock {
    socket: UdpSocket,
    ep: SctpUdp,
    /// Datagrams on their way to the socket.
    sends: SendBatch,
    /// Queued in `Io::sctp_dirty` for the next flush.
    dirty: bool,
}

impl SctpSock {
    fn new(socket: UdpSocket, cfg: &SctpConfig) -> Self {
        Self {
            socket,
            ep: SctpUdp::new(cfg.clone()),
            sends: SendBatch::new(),
            dirty: false,
        }
    }
}

/// The SCTP socket of leg `leg`, or the UAS's (`None`).
fn sctp_sock<'a>(
    legs: &'a mut [SctpSock],
    uas: &'a mut Option<SctpSock>,
    leg: Option<usize>,
) -> Option<&'a mut SctpSock> {
    match leg {
        Some(l) => legs.get_mut(l),
        None => uas.as_mut(),
    }
}

/// Queues SCTP socket `leg` for the next flush (once).
fn mark_sctp_dirty(dirty: &mut Vec<Option<usize>>, s: &mut SctpSock, leg: Option<usize>) {
    if !s.dirty {
        s.dirty = true;
        dirty.push(leg);
    }
}

struct Conn {
    tcp: TcpConn,
    framer: Framer,
    id: ConnId,
    dirty: bool,
}

struct Io {
    transport: Transport,
    tls: Option<LoadTls>,
    legs_udp: Vec<UdpSocket>,
    leg_batches: Vec<SendBatch>,
    uas_udp: Option<UdpSocket>,
    uas_batch: SendBatch,
    listener: Option<TcpListener>,
    conns: Slab<Conn>,
    leg_conns: Vec<usize>,
    recv: RecvBatch,
    poll: Poll,
    send_errors: u64,
    limits: Limits,
    /// Messages handled since the last poll (decides whether to coalesce).
    handled: usize,
    /// Connections with bytes queued since the last flush.
    dirty: Vec<usize>,
    /// SCTP: the calling legs' sockets, one endpoint (one association) each.
    legs_sctp: Vec<SctpSock>,
    /// SCTP: the UAS's socket, whose endpoint accepts associations.
    uas_sctp: Option<SctpSock>,
    /// SCTP sockets with something to send since the last flush (leg, or `None`: the UAS).
    sctp_dirty: Vec<Option<usize>>,
    /// The earliest SCTP timer, as of the last time it was computed.
    sctp_next: Option<StdInstant>,
    /// SCTP datagrams the sockets did not take (SCTP retransmits what they carried).
    sctp_blocked: u64,
}

/// Queues connection `key` for the next flush (once).
fn mark_dirty(dirty: &mut Vec<usize>, c: &mut Conn, key: usize) {
    if !c.dirty {
        c.dirty = true;
        dirty.push(key);
    }
}

fn sock_err(what: &'static str, addr: SocketAddr) -> impl FnOnce(io::Error) -> LoadError {
    move |source| LoadError::Socket { what, addr, source }
}

impl Io {
    /// Queues one message of the agent on its socket or connection.
    fn dispatch(&mut self, peer: &Peer, bytes: &[u8]) {
        let id = peer.conn.map_or(0, |c| c.0);
        match self.transport {
            Transport::Udp => {
                let batch = if id == UAS_UDP_ID {
                    &mut self.uas_batch
                } else if let Some(b) = self.leg_batches.get_mut(id as usize) {
                    b
                } else {
                    self.send_errors += 1;
                    return;
                };
                batch.push(peer.addr, bytes);
            }
            Transport::Sctp => {
                let leg = (id != UAS_UDP_ID).then_some(id as usize);
                let Some(s) = sctp_sock(&mut self.legs_sctp, &mut self.uas_sctp, leg) else {
                    self.send_errors += 1;
                    return;
                };
                // On the association with `peer.addr`: the target for a leg, the peer's
                // encapsulation address for the UAS's answers (the association the request
                // came on). A full association refuses (never blocks): a send error, as a
                // TCP connection's full queue.
                match s
                    .ep
                    .send(StdInstant::now(), peer.addr, call_id_key(bytes), bytes)
                {
                    Ok(()) => mark_sctp_dirty(&mut self.sctp_dirty, s, leg),
                    Err(_) => self.send_errors += 1,
                }
            }
            _ => {
                let key = if id >= ACCEPTED_ID {
                    Some((id - ACCEPTED_ID) as usize)
                } else {
                    self.leg_conns.get(id as usize).copied()
                };
                let conn = key.and_then(|k| Some((k, self.conns.get_mut(k)?)));
                match conn {
                    Some((k, c)) => match c.tcp.enqueue(bytes) {
                        Ok(()) => mark_dirty(&mut self.dirty, c, k),
                        Err(_) => self.send_errors += 1,
                    },
                    None => self.send_errors += 1,
                }
            }
        }
    }

    /// Sends every queued datagram and flushes every connection written to.
    fn flush(&mut self) {
        let mut errors = 0usize;
        // `send_batch` sends until the socket would block; what it could not send now (socket
        // buffer full) is dropped, like a lossy link.
        for (s, b) in self.legs_udp.iter().zip(self.leg_batches.iter_mut()) {
            if !b.is_empty() {
                s.send_batch(b, &mut errors);
                errors += b.clear();
            }
        }
        if let Some(s) = &self.uas_udp
            && !self.uas_batch.is_empty()
        {
            s.send_batch(&mut self.uas_batch, &mut errors);
            errors += self.uas_batch.clear();
        }
        self.send_errors += errors as u64;
        self.flush_sctp();
        // Only the connections written to since the last flush (not a scan of all of them).
        let mut dirty = std::mem::take(&mut self.dirty);
        for k in dirty.drain(..) {
            let Some(c) = self.conns.get_mut(k) else {
                continue;
            };
            c.dirty = false;
            // A connection still connecting is flushed when it reports writable.
            if !c.tcp.is_connecting() && c.tcp.flush().is_err() {
                self.close(k);
            }
        }
        self.dirty = dirty;
    }

    /// Sends what the SCTP endpoints written to (or fed) since the last flush produced.
    /// Never blocks: a datagram the socket does not take is dropped and counted, and SCTP
    /// retransmits it.
    fn flush_sctp(&mut self) {
        if self.sctp_dirty.is_empty() {
            return;
        }
        let now = StdInstant::now();
        let mut dirty = std::mem::take(&mut self.sctp_dirty);
        for leg in dirty.drain(..) {
            let Some(s) = sctp_sock(&mut self.legs_sctp, &mut self.uas_sctp, leg) else {
                continue;
            };
            s.dirty = false;
            // Runs what waits (and the timers due) at the instant the packets leave.
            s.ep.handle_timeout(now);
            loop {
                while s.sends.len() < SCTP_SEND_BATCH {
                    let Some((to, b)) = s.ep.poll_transmit() else {
                        break;
                    };
                    s.sends.push(to, &b);
                }
                if s.sends.is_empty() {
                    break;
                }
                let mut errors = 0usize;
                s.socket.send_batch(&mut s.sends, &mut errors);
                self.sctp_blocked += (errors + s.sends.clear()) as u64;
            }
        }
        self.sctp_dirty = dirty;
    }

    /// The earliest timer of every SCTP endpoint.
    fn sctp_timeout(&self) -> Option<StdInstant> {
        self.legs_sctp
            .iter()
            .chain(self.uas_sctp.iter())
            .filter_map(|s| s.ep.poll_timeout())
            .min()
    }

    /// The counters of every SCTP endpoint, summed.
    fn sctp_stats(&mut self) -> SctpStats {
        let mut t = SctpStats::default();
        for s in self.legs_sctp.iter_mut().chain(self.uas_sctp.iter_mut()) {
            t += s.ep.stats();
        }
        t
    }

    fn close(&mut self, key: usize) {
        if self.conns.contains(key) {
            let mut c = self.conns.remove(key);
            let _ = self.poll.registry().deregister(&mut c.tcp);
        }
    }
}

/// Runs a load (or answering) session to its end and returns the report.
pub fn run(mut cfg: LoadConfig, stop: &AtomicBool) -> Result<Report, LoadError> {
    let transport = cfg.agent.transport;
    let poll = Poll::new().map_err(LoadError::Poll)?;
    let udp_opts = UdpOptions {
        reuse_port: false,
        recv_buffer: cfg.socket_buffer,
        send_buffer: cfg.socket_buffer,
        batched: true,
        timestamps: false,
    };
    let tcp_opts = TcpOptions {
        reuse_port: false,
        recv_buffer: cfg.socket_buffer,
        send_buffer: cfg.socket_buffer,
        ..TcpOptions::default()
    };
    let limits = ConnLimits {
        max_read_buffer: 256 * 1024,
        max_queue_bytes: 64 * 1024 * 1024,
    };
    if transport == Transport::Tls && cfg.tls.is_none() {
        return Err(LoadError::Tls("no TLS settings for a TLS run".into()));
    }
    let mut io = Io {
        transport,
        tls: cfg.tls.clone(),
        legs_udp: Vec::new(),
        leg_batches: Vec::new(),
        uas_udp: None,
        uas_batch: SendBatch::new(),
        listener: None,
        conns: Slab::new(),
        leg_conns: Vec::new(),
        recv: RecvBatch::new(RECV_SLOTS, RECV_SLOT),
        poll,
        send_errors: 0,
        limits: Limits::default(),
        handled: 0,
        dirty: Vec::new(),
        legs_sctp: Vec::new(),
        uas_sctp: None,
        sctp_dirty: Vec::new(),
        sctp_next: None,
        sctp_blocked: 0,
    };
    // Every connection (or SCTP leg's socket) is a file descriptor: raise the soft limit as
    // far as the hard one allows (the default 1,024 is far below 50,000 phones).
    if transport != Transport::Udp {
        let want = cfg.connections as u64 + 256;
        match holdline_io::raise_open_files(want) {
            Ok(l) if !l.enough() => eprintln!(
                "holdline load: open-file limit {} (hard {}) is below the {want} that {} connections need: connections beyond it fail",
                l.soft, l.hard, cfg.connections
            ),
            Ok(_) => {}
            Err(e) => eprintln!("holdline load: cannot read or raise the open-file limit: {e}"),
        }
    }
    let has_uas = cfg.agent.uas.is_some();
    // The UAS socket first, so a pair's legs bind next to it.
    if has_uas {
        match transport {
            Transport::Udp | Transport::Sctp => {
                // One UDP socket; over SCTP it carries the encapsulation, its address is the
                // UAS's (Via, Contact `;transport=sctp`) and its endpoint accepts every
                // association.
                let mut s = UdpSocket::bind(cfg.listen, &udp_opts)
                    .map_err(sock_err("bind UDP", cfg.listen))?;
                io.poll
                    .registry()
                    .register(&mut s, UAS_UDP, Interest::READABLE)
                    .map_err(LoadError::Poll)?;
                cfg.agent.uas_addr =
                    Some(s.local_addr().map_err(sock_err("bind UDP", cfg.listen))?);
                if transport == Transport::Sctp {
                    io.uas_sctp = Some(SctpSock::new(s, &cfg.sctp));
                } else {
                    io.uas_udp = Some(s);
                }
            }
            _ => {
                let mut l = TcpListener::bind(cfg.listen, &tcp_opts)
                    .map_err(sock_err("listen TCP", cfg.listen))?;
                io.poll
                    .registry()
                    .register(&mut l, LISTENER, Interest::READABLE)
                    .map_err(LoadError::Poll)?;
                cfg.agent.uas_addr =
                    Some(l.local_addr().map_err(sock_err("listen TCP", cfg.listen))?);
                io.listener = Some(l);
            }
        }
    }
    if cfg.target_uas
        && let (Some(u), Some(a)) = (cfg.agent.uac.as_mut(), cfg.agent.uas_addr)
    {
        u.target = a;
    }
    // Where each leg's connection goes: the UAC's first hops in turn (leg `i` to hop
    // `i mod hops`, the agent's convention), else the registrar.
    let leg_targets: Vec<SocketAddr> = match (&cfg.agent.uac, &cfg.agent.register) {
        (Some(u), _) => std::iter::once(u.target)
            .chain(u.hops.alternates.iter().copied())
            .collect(),
        (None, Some(r)) => vec![r.registrar],
        (None, None) => Vec::new(),
    };
    let mut legs = Vec::new();
    if !leg_targets.is_empty() {
        let n = cfg.connections.max(1);
        for i in 0..n {
            let target = leg_targets[i % leg_targets.len()];
            match transport {
                Transport::Udp | Transport::Sctp => {
                    let mut local = cfg.listen;
                    if has_uas || local.port() == 0 {
                        local.set_port(0);
                    } else {
                        local.set_port(local.port().saturating_add(i as u16));
                    }
                    let mut s =
                        UdpSocket::bind(local, &udp_opts).map_err(sock_err("bind UDP", local))?;
                    io.poll
                        .registry()
                        .register(&mut s, Token(LEG_BASE + i), Interest::READABLE)
                        .map_err(LoadError::Poll)?;
                    legs.push(s.local_addr().map_err(sock_err("bind UDP", local))?);
                    if transport == Transport::Sctp {
                        // Its own endpoint: the leg's association to its target starts with
                        // the first message sent.
                        io.legs_sctp.push(SctpSock::new(s, &cfg.sctp));
                    } else {
                        io.legs_udp.push(s);
                        io.leg_batches.push(SendBatch::new());
                    }
                }
                _ => {
                    let mut tcp = match cfg.local_ips.get(i % cfg.local_ips.len().max(1)) {
                        Some(ip) => TcpConn::connect_from(
                            SocketAddr::new(*ip, 0),
                            target,
                            &tcp_opts,
                            limits,
                        ),
                        None => TcpConn::connect(target, &tcp_opts, limits),
                    }
                    .map_err(sock_err("connect TCP", target))?;
                    if transport == Transport::Tls {
                        let Some((config, name)) = io.tls.as_ref().and_then(|t| t.client.clone())
                        else {
                            return Err(LoadError::Tls("a TLS caller needs a CA".into()));
                        };
                        let session = rustls::ClientConnection::new(config, name)
                            .map_err(|e| LoadError::Tls(e.to_string()))?;
                        tcp.start_tls(rustls::Connection::Client(session));
                    }
                    legs.push(tcp.local_addr().map_err(sock_err("connect TCP", target))?);
                    let entry = io.conns.vacant_entry();
                    let key = entry.key();
                    let mut conn = Conn {
                        tcp,
                        framer: Framer::new(io.limits),
                        id: ConnId(i as u64),
                        dirty: false,
                    };
                    io.poll
                        .registry()
                        .register(
                            &mut conn.tcp,
                            Token(CONN_BASE + key),
                            Interest::READABLE | Interest::WRITABLE,
                        )
                        .map_err(LoadError::Poll)?;
                    entry.insert(conn);
                    io.leg_conns.push(key);
                }
            }
        }
    }
    cfg.agent.legs = legs;
    let connected = cfg
        .connect_first
        .map(|wait| connect_first(&mut io, &leg_targets, wait));
    let clock = Clock::new();
    let start = clock.now();
    let mut agent = Agent::new(cfg.agent.clone(), start)?;
    let mut csv = match &cfg.csv {
        Some(path) => {
            let f = File::create(path).map_err(|source| LoadError::Csv {
                path: path.clone(),
                source,
            })?;
            let mut w = BufWriter::new(f);
            w.write_all(csv_header().as_bytes())
                .map_err(|source| LoadError::Csv {
                    path: path.clone(),
                    source,
                })?;
            Some(w)
        }
        None => None,
    };
    let tty = cfg.progress == Progress::Auto && io::stderr().is_terminal();
    let mut printed = 0usize;
    let mut events = Events::with_capacity(256);
    let max_end = cfg.max_time.map(|d| start + d);
    let mut drain_end: Option<Instant> = None;
    // UDP sockets whose last read stopped at the budget, not at an empty queue.
    let mut pending: Vec<Option<usize>> = Vec::new();
    loop {
        let now = clock.now();
        if stop.load(Ordering::Relaxed) || max_end.is_some_and(|e| now >= e) {
            agent.abort(now);
            break;
        }
        // The drain limit applies to generating runs (a UAC, or REGISTER load alone); a UAS
        // that registers its users first keeps answering after its registrations are done.
        let generating = agent.config().uac.is_some()
            || (agent.config().register.is_some() && agent.config().uas.is_none());
        if drain_end.is_none() && generating && agent.load_done(now) {
            drain_end = Some(now + cfg.drain);
        }
        if drain_end.is_some_and(|e| now >= e) {
            agent.abort(now);
            break;
        }
        if agent.poll_timeout().is_some_and(|t| t <= now) {
            agent.handle_timeout(now);
        }
        if io.sctp_next.is_some_and(|t| clock.from_std(t) <= now) {
            sctp_timers(&mut io, &mut agent, &clock);
        }
        agent.drain_transmits(|p, b| io.dispatch(p, b));
        io.flush();
        if agent.is_done() {
            break;
        }
        // Rows cut so far: CSV and progress.
        let rows = agent.recorder().rows();
        if rows.len() > printed {
            for row in &rows[printed..] {
                if let (Some(w), Some(path)) = (csv.as_mut(), cfg.csv.as_ref()) {
                    w.write_all(csv_row(row).as_bytes())
                        .map_err(|source| LoadError::Csv {
                            path: path.clone(),
                            source,
                        })?;
                }
            }
            if let Some(row) = rows.last() {
                let line = progress_line(row, &agent.recorder().c);
                match cfg.progress {
                    Progress::Quiet => {}
                    _ if tty => eprint!("\r\x1b[K{line}"),
                    _ => eprintln!("{line}"),
                }
            }
            printed = rows.len();
        }
        // Busy (many messages per wake-up): let the next batch accumulate. Idle or light
        // load: poll at once, adding no delay.
        if !cfg.coalesce.is_zero() && io.handled >= COALESCE_MIN {
            let since = clock.now().saturating_duration_since(now);
            if since < cfg.coalesce {
                std::thread::sleep(cfg.coalesce - since);
            }
        }
        io.sctp_next = io.sctp_timeout();
        let wake = [
            agent.poll_timeout(),
            drain_end,
            max_end,
            io.sctp_next.map(|t| clock.from_std(t)),
        ]
        .into_iter()
        .flatten()
        .min();
        let timeout = if pending.is_empty() {
            wake.map_or(StdDuration::from_millis(100), |t| {
                clock.until(t).min(StdDuration::from_millis(100))
            })
        } else {
            StdDuration::ZERO
        };
        io.handled = 0;
        match io.poll.poll(&mut events, Some(timeout)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(LoadError::Poll(e)),
        }
        for leg in std::mem::take(&mut pending) {
            if !read_udp(&mut io, &mut agent, &clock, leg) {
                pending.push(leg);
            }
        }
        for ev in &events {
            let token = ev.token();
            if token == LISTENER {
                accept_all(&mut io);
            } else if token == UAS_UDP {
                if !read_udp(&mut io, &mut agent, &clock, None) && !pending.contains(&None) {
                    pending.push(None);
                }
            } else if token.0 >= CONN_BASE {
                let key = token.0 - CONN_BASE;
                if ev.is_writable()
                    && let Some(c) = io.conns.get_mut(key)
                {
                    if c.tcp.is_connecting() && c.tcp.finish_connect().is_err() {
                        io.close(key);
                        continue;
                    }
                    mark_dirty(&mut io.dirty, c, key);
                }
                if ev.is_readable() || ev.is_read_closed() {
                    read_tcp(&mut io, &mut agent, &clock, key);
                }
            } else if token.0 >= LEG_BASE {
                let leg = Some(token.0 - LEG_BASE);
                if !read_udp(&mut io, &mut agent, &clock, leg) && !pending.contains(&leg) {
                    pending.push(leg);
                }
            }
            agent.drain_transmits(|p, b| io.dispatch(p, b));
            io.flush();
        }
    }
    let end = clock.now();
    agent.drain_transmits(|p, b| io.dispatch(p, b));
    io.flush();
    // SCTP: the counters as the run ended (retransmissions are those of the associations
    // open), then a bounded graceful shutdown of every association.
    let sctp_stats = (transport == Transport::Sctp).then(|| io.sctp_stats());
    if sctp_stats.is_some() {
        sctp_shutdown(&mut io);
    }
    agent.recorder_mut().c.send_errors += io.send_errors;
    agent.recorder_mut().finish(end);
    if let (Some(w), Some(path)) = (csv.as_mut(), cfg.csv.as_ref()) {
        for row in &agent.recorder().rows()[printed..] {
            w.write_all(csv_row(row).as_bytes())
                .map_err(|source| LoadError::Csv {
                    path: path.clone(),
                    source,
                })?;
        }
        w.flush().map_err(|source| LoadError::Csv {
            path: path.clone(),
            source,
        })?;
    }
    if tty {
        eprintln!();
    }
    if let Some(path) = &cfg.acked_file {
        let mut text = String::new();
        for a in agent.acked_registrations() {
            text.push_str(&a);
            text.push('\n');
        }
        std::fs::write(path, text).map_err(|source| LoadError::Csv {
            path: path.clone(),
            source,
        })?;
    }
    let mut meta = cfg.meta.clone();
    if let Some(obj) = meta.as_object_mut() {
        obj.insert("transport".into(), transport.as_param_str().into());
        obj.insert(
            "legs".into(),
            agent
                .config()
                .legs
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .into(),
        );
        if let Some(a) = agent.config().uas_addr {
            obj.insert("uas_addr".into(), a.to_string().into());
        }
        if let Some(c) = connected {
            obj.insert(
                "connect_first".into(),
                serde_json::json!({"up": c.up, "of": c.of, "seconds": c.seconds}),
            );
        }
        if let Some(st) = sctp_stats {
            obj.insert(
                "sctp".into(),
                serde_json::json!({
                    "streams": cfg.sctp.streams,
                    "unordered": cfg.sctp.unordered,
                    "associations_established": st.established,
                    "association_setup_failures": st.setup_failures,
                    "associations_lost": st.lost,
                    "messages_sent": st.messages_sent,
                    "messages_received": st.messages_received,
                    "messages_dropped": st.messages_dropped + st.messages_refused,
                    "datagrams_out": st.datagrams_out,
                    "datagrams_in": st.datagrams_in,
                    "datagrams_blocked": io.sctp_blocked,
                    "t3_timeouts": st.t3_timeouts,
                    "fast_retransmits": st.fast_retransmits,
                    "duplicate_tsns": st.duplicate_tsns,
                    "heartbeats_sent": st.heartbeats_sent,
                }),
            );
        }
    }
    Ok(agent.recorder().report(end, meta))
}

/// The final table printed after a run (with a line on the SCTP associations of an SCTP
/// run).
pub fn summary(report: &Report) -> String {
    use std::fmt::Write as _;
    let mut s = summary_table(report);
    let sctp = &report.meta["sctp"];
    if sctp.is_object() {
        let n = |k: &str| sctp[k].as_u64().unwrap_or(0);
        let _ = writeln!(
            s,
            "sctp ({}, {} streams): associations established {} failed {} lost {}; messages sent {} received {} dropped {}; T3 timeouts {} fast retransmits {}",
            if sctp["unordered"].as_bool().unwrap_or(false) {
                "unordered"
            } else {
                "ordered"
            },
            n("streams"),
            n("associations_established"),
            n("association_setup_failures"),
            n("associations_lost"),
            n("messages_sent"),
            n("messages_received"),
            n("messages_dropped"),
            n("t3_timeouts"),
            n("fast_retransmits"),
        );
    }
    s
}

fn accept_all(io: &mut Io) {
    let Some(listener) = io.listener.as_ref() else {
        return;
    };
    let limits = ConnLimits {
        max_read_buffer: 256 * 1024,
        max_queue_bytes: 64 * 1024 * 1024,
    };
    let mut accepted = Vec::new();
    loop {
        match listener.accept(limits) {
            Ok(c) => accepted.push(c),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    for mut tcp in accepted {
        if io.transport == Transport::Tls {
            let session = io
                .tls
                .as_ref()
                .and_then(|t| t.server.clone())
                .map(rustls::ServerConnection::new);
            match session {
                Some(Ok(s)) => tcp.start_tls(rustls::Connection::Server(s)),
                _ => {
                    io.send_errors += 1;
                    continue;
                }
            }
        }
        let entry = io.conns.vacant_entry();
        let key = entry.key();
        let mut conn = Conn {
            tcp,
            framer: Framer::new(io.limits),
            id: ConnId(ACCEPTED_ID + key as u64),
            dirty: false,
        };
        if io
            .poll
            .registry()
            .register(
                &mut conn.tcp,
                Token(CONN_BASE + key),
                Interest::READABLE | Interest::WRITABLE,
            )
            .is_ok()
        {
            entry.insert(conn);
        }
    }
}

/// Reads up to a budget of batches; returns false when the socket may still hold data (the
/// caller must come back without waiting for readiness: with a full buffer no new datagram
/// arrives to re-arm edge-triggered readiness).
fn read_udp(io: &mut Io, agent: &mut Agent, clock: &Clock, leg: Option<usize>) -> bool {
    if io.transport == Transport::Sctp {
        return read_sctp(io, agent, clock, leg);
    }
    let id = leg.map_or(UAS_UDP_ID, |l| l as u64);
    for _ in 0..UDP_BUDGET {
        let sock = match leg {
            Some(l) => io.legs_udp.get(l),
            None => io.uas_udp.as_ref(),
        };
        let Some(sock) = sock else { return true };
        match sock.recv_batch(&mut io.recv) {
            Ok(0) => return true,
            Ok(n) => {
                let drained = n < io.recv.capacity();
                let now = clock.now();
                for i in 0..n {
                    if let Some(d) = io.recv.get(i) {
                        let from = Peer {
                            addr: d.source,
                            transport: Transport::Udp,
                            conn: Some(ConnId(id)),
                        };
                        agent.handle(now, from, d.payload);
                        io.handled += 1;
                    }
                }
                agent.drain_transmits(|p, b| io.dispatch(p, b));
                io.flush();
                // A short batch emptied the socket: reading again would only return EAGAIN
                // (edge-triggered readiness fires again for anything arriving later).
                if drained {
                    return true;
                }
            }
            Err(_) => return true,
        }
    }
    false
}

/// [`read_udp`] for an SCTP socket: its datagrams go to its endpoint, the SIP messages they
/// complete to the agent (from the peer's encapsulation address, on the leg or the UAS).
fn read_sctp(io: &mut Io, agent: &mut Agent, clock: &Clock, leg: Option<usize>) -> bool {
    let id = leg.map_or(UAS_UDP_ID, |l| l as u64);
    for _ in 0..UDP_BUDGET {
        let Some(s) = sctp_sock(&mut io.legs_sctp, &mut io.uas_sctp, leg) else {
            return true;
        };
        let n = match s.socket.recv_batch(&mut io.recv) {
            Ok(0) | Err(_) => return true,
            Ok(n) => n,
        };
        let drained = n < io.recv.capacity();
        let t = StdInstant::now();
        for i in 0..n {
            if let Some(d) = io.recv.get(i) {
                s.ep.handle_datagram(t, d.source, d.payload);
            }
        }
        let now = clock.now();
        while let Some(r) = s.ep.poll_received() {
            let from = Peer {
                addr: r.from,
                transport: Transport::Sctp,
                conn: Some(ConnId(id)),
            };
            agent.handle(now, from, &r.data);
            io.handled += 1;
        }
        // Its acknowledgements (and anything the datagrams released) go out with the flush.
        mark_sctp_dirty(&mut io.sctp_dirty, s, leg);
        agent.drain_transmits(|p, b| io.dispatch(p, b));
        io.flush();
        if drained {
            return true;
        }
    }
    false
}

/// Runs the SCTP timers that are due (retransmissions, delayed acknowledgements) and hands
/// the agent what they completed.
fn sctp_timers(io: &mut Io, agent: &mut Agent, clock: &Clock) {
    let t = StdInstant::now();
    let now = clock.now();
    let legs = (0..io.legs_sctp.len()).map(Some);
    let uas = io.uas_sctp.is_some().then_some(None);
    for leg in legs.chain(uas) {
        let Some(s) = sctp_sock(&mut io.legs_sctp, &mut io.uas_sctp, leg) else {
            continue;
        };
        if s.ep.poll_timeout().is_none_or(|d| d > t) {
            continue;
        }
        s.ep.handle_timeout(t);
        let id = leg.map_or(UAS_UDP_ID, |l| l as u64);
        while let Some(r) = s.ep.poll_received() {
            let from = Peer {
                addr: r.from,
                transport: Transport::Sctp,
                conn: Some(ConnId(id)),
            };
            agent.handle(now, from, &r.data);
        }
        mark_sctp_dirty(&mut io.sctp_dirty, s, leg);
    }
    io.sctp_next = io.sctp_timeout();
}

/// What [`connect_first`] achieved.
#[derive(Clone, Copy, Debug)]
struct Connected {
    /// Legs up when the calls started.
    up: usize,
    /// Legs that connect (SCTP associations, TCP/TLS connections).
    of: usize,
    /// How long it took, seconds.
    seconds: f64,
}

/// `--connect-first`: starts every SCTP leg's association (to its target, leg `i` to
/// `targets[i mod len]`) and waits, at most `wait`, until those and the TCP/TLS legs'
/// connections are established (INIT and SYN retransmissions included). Legs still down
/// then carry their first calls as they would have anyway; stderr says so.
fn connect_first(io: &mut Io, targets: &[SocketAddr], wait: StdDuration) -> Connected {
    let start = StdInstant::now();
    let deadline = start + wait;
    if !targets.is_empty() {
        for (i, s) in io.legs_sctp.iter_mut().enumerate() {
            // A failure shows as a leg that never comes up.
            let _ = s.ep.open(start, targets[i % targets.len()]);
            mark_sctp_dirty(&mut io.sctp_dirty, s, Some(i));
        }
    }
    let of = io.legs_sctp.len() + io.leg_conns.len();
    let mut events = Events::with_capacity(64);
    loop {
        io.flush();
        let mut up = 0;
        for (i, s) in io.legs_sctp.iter_mut().enumerate() {
            if targets
                .get(i % targets.len().max(1))
                .is_some_and(|t| s.ep.is_connected(*t))
            {
                up += 1;
            }
        }
        up += io
            .leg_conns
            .iter()
            .filter(|&&k| io.conns.get(k).is_some_and(|c| !c.tcp.is_connecting()))
            .count();
        let now = StdInstant::now();
        if up == of || now >= deadline {
            if up < of {
                eprintln!(
                    "holdline load: --connect-first: {up} of {of} legs up after {:.1} s; calling anyway",
                    wait.as_secs_f64()
                );
            }
            return Connected {
                up,
                of,
                seconds: (now - start).as_secs_f64(),
            };
        }
        let wake = io.sctp_timeout().map_or(deadline, |t| t.min(deadline));
        match io
            .poll
            .poll(&mut events, Some(wake.saturating_duration_since(now)))
        {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => continue,
        }
        for ev in &events {
            let token = ev.token();
            if token.0 >= CONN_BASE && ev.is_writable() {
                let key = token.0 - CONN_BASE;
                if let Some(c) = io.conns.get_mut(key)
                    && c.tcp.is_connecting()
                    && c.tcp.finish_connect().is_err()
                {
                    io.close(key);
                }
            }
        }
        // Every SCTP leg, readiness or not (few sockets, a short phase): the handshake's
        // chunks in, its timers (INIT and COOKIE ECHO retransmissions) run.
        let t = StdInstant::now();
        for (i, s) in io.legs_sctp.iter_mut().enumerate() {
            read_sctp_discarding(s, &mut io.recv);
            if s.ep.poll_timeout().is_some_and(|d| d <= t) {
                s.ep.handle_timeout(t);
            }
            // No SIP has been sent yet: nothing is expected.
            while s.ep.poll_received().is_some() {}
            mark_sctp_dirty(&mut io.sctp_dirty, s, Some(i));
        }
    }
}

/// Outside the run (set-up, shutdown): reads what SCTP socket `s` has (bounded by
/// [`UDP_BUDGET`] batches) into its endpoint, dropping any SIP message it completes.
fn read_sctp_discarding(s: &mut SctpSock, recv: &mut RecvBatch) {
    for _ in 0..UDP_BUDGET {
        let n = match s.socket.recv_batch(recv) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let t = StdInstant::now();
        for i in 0..n {
            if let Some(d) = recv.get(i) {
                s.ep.handle_datagram(t, d.source, d.payload);
            }
        }
        while s.ep.poll_received().is_some() {}
        if n < recv.capacity() {
            return;
        }
    }
}

/// Shuts every SCTP association down gracefully (what is outstanding acknowledged first),
/// waiting at most [`SCTP_SHUTDOWN_WAIT`]; SIP messages still arriving are dropped (the
/// agent is done).
fn sctp_shutdown(io: &mut Io) {
    let start = StdInstant::now();
    let deadline = start + SCTP_SHUTDOWN_WAIT;
    for s in io.legs_sctp.iter_mut() {
        s.ep.shutdown_all(start);
    }
    if let Some(s) = io.uas_sctp.as_mut() {
        s.ep.shutdown_all(start);
    }
    let all: Vec<Option<usize>> = (0..io.legs_sctp.len())
        .map(Some)
        .chain(io.uas_sctp.is_some().then_some(None))
        .collect();
    let mut events = Events::with_capacity(64);
    loop {
        for &leg in &all {
            if let Some(s) = sctp_sock(&mut io.legs_sctp, &mut io.uas_sctp, leg) {
                mark_sctp_dirty(&mut io.sctp_dirty, s, leg);
            }
        }
        io.flush();
        let now = StdInstant::now();
        if io.sctp_stats().open == 0 || now >= deadline {
            return;
        }
        let wake = io.sctp_timeout().map_or(deadline, |t| t.min(deadline));
        match io
            .poll
            .poll(&mut events, Some(wake.saturating_duration_since(now)))
        {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
        // Every socket, readiness or not: the loop is short and bounded.
        for &leg in &all {
            if let Some(s) = sctp_sock(&mut io.legs_sctp, &mut io.uas_sctp, leg) {
                read_sctp_discarding(s, &mut io.recv);
            }
        }
    }
}

fn read_tcp(io: &mut Io, agent: &mut Agent, clock: &Clock, key: usize) {
    loop {
        let Some(c) = io.conns.get_mut(key) else {
            return;
        };
        let Ok(outcome) = c.tcp.read() else {
            io.close(key);
            return;
        };
        let now = clock.now();
        let from = Peer {
            addr: c.tcp.peer_addr(),
            transport: io.transport,
            conn: Some(c.id),
        };
        loop {
            match c.framer.poll(c.tcp.buffered()) {
                Ok(Frame::Message { len }) => {
                    agent.handle(now, from, &c.tcp.buffered()[..len]);
                    io.handled += 1;
                    c.tcp.consume(len);
                }
                Ok(Frame::KeepAlive { len, .. }) => c.tcp.consume(len),
                Ok(_) => break,
                Err(_) => {
                    agent.recorder_mut().c.parse_errors += 1;
                    io.close(key);
                    return;
                }
            }
        }
        // A TLS session may have records to send of its own (its handshake).
        if let Some(c) = io.conns.get_mut(key)
            && c.tcp.queued_bytes() > 0
        {
            mark_dirty(&mut io.dirty, c, key);
        }
        agent.drain_transmits(|p, b| io.dispatch(p, b));
        io.flush();
        if outcome.eof {
            io.close(key);
            return;
        }
        if outcome.drained {
            return;
        }
    }
}
