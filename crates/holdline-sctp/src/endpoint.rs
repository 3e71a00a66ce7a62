//! [`SctpUdp`]: every SCTP association of one UDP socket, sans-IO.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sctp_proto::{
    Association, AssociationHandle, ClientConfig, DatagramEvent, Endpoint, EndpointConfig, Event,
    Payload, PayloadProtocolIdentifier, ReliabilityType, ServerConfig, StreamEvent,
    TransportConfig,
};

/// The UDP port for SCTP encapsulation registered with IANA ("sctp-tunneling", RFC 6951).
pub const DEFAULT_UDP_PORT: u16 = 9899;

/// How SIP is carried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SctpConfig {
    /// The SCTP port in the common header, ours and the peer's (the SIP port; both sides use
    /// the same one, as with kernel SCTP listening on 5060). Default 5060.
    pub sctp_port: u16,
    /// Outbound streams messages are spread over (`key % streams`). Default 16.
    pub streams: u16,
    /// Send every SIP message unordered (the U bit): a message is delivered as soon as it
    /// is complete, whatever was lost before it on its stream. Default `false` (ordered).
    pub unordered: bool,
    /// Peers (by encapsulation address) whose messages go otherwise than `unordered` says:
    /// `true` unordered, `false` ordered. Default none.
    pub delivery: BTreeMap<SocketAddr, bool>,
    /// The largest SIP message sent or accepted, bytes. Default 65,535.
    pub max_message: u32,
    /// The most bytes waiting per association (queued during the handshake plus not yet
    /// acknowledged); beyond it [`SctpUdp::send`] refuses. Default 4 MiB.
    pub max_queued_bytes: usize,
    /// Initial retransmission timeout, ms (RFC 4960 RTO.Initial: 3,000).
    pub rto_initial_ms: u64,
    /// Minimum retransmission timeout, ms (RFC 4960 RTO.Min: 1,000).
    pub rto_min_ms: u64,
    /// Maximum retransmission timeout, ms (RFC 4960 RTO.Max: 60,000).
    pub rto_max_ms: u64,
    /// Retransmissions of a DATA chunk before the association is declared dead (RFC 4960
    /// Association.Max.Retrans: 10).
    pub max_retransmits: usize,
    /// Retransmissions of INIT before the association setup fails (RFC 4960
    /// Max.Init.Retransmits: 8).
    pub max_init_retransmits: usize,
    /// HEARTBEAT interval, ms (RFC 4960 HB.interval: 30,000); 0 sends none. An association
    /// from which nothing was heard for this long plus RTO.Min gets a HEARTBEAT, and another
    /// after each such wait while it stays unanswered; more than `max_retransmits`
    /// unanswered in a row and the peer is declared unreachable (RFC 4960 §8.1, §8.3):
    /// the association is lost and what waited on it dropped.
    pub heartbeat_interval_ms: u64,
    /// Accept associations that peers start. Default `true`.
    pub accept: bool,
    /// The most associations at once. Default 10,000.
    pub max_associations: u32,
}

impl Default for SctpConfig {
    fn default() -> Self {
        Self {
            sctp_port: 5060,
            streams: 16,
            unordered: false,
            delivery: BTreeMap::new(),
            max_message: 65_535,
            max_queued_bytes: 4 << 20,
            rto_initial_ms: 3_000,
            rto_min_ms: 1_000,
            rto_max_ms: 60_000,
            max_retransmits: 10,
            max_init_retransmits: 8,
            heartbeat_interval_ms: 30_000,
            accept: true,
            max_associations: 10_000,
        }
    }
}

/// One SIP message received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// The peer's encapsulation address (its UDP source address).
    pub from: SocketAddr,
    /// The SCTP stream it came on.
    pub stream: u16,
    /// The message.
    pub data: Bytes,
}

/// Why a message was not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The association to this peer already holds [`SctpConfig::max_queued_bytes`].
    #[error("SCTP association to {peer}: {queued} bytes already waiting (limit {limit})")]
    QueueFull {
        /// The peer.
        peer: SocketAddr,
        /// Bytes waiting.
        queued: usize,
        /// The limit.
        limit: usize,
    },
    /// The message is larger than [`SctpConfig::max_message`].
    #[error("SIP message of {len} bytes is larger than the SCTP limit of {limit}")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        limit: u32,
    },
    /// No association could be started (too many, or an invalid address).
    #[error("cannot start an SCTP association to {peer}: {reason}")]
    Connect {
        /// The peer.
        peer: SocketAddr,
        /// sctp-proto's reason.
        reason: String,
    },
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SctpStats {
    /// Associations established (either side started them).
    pub established: u64,
    /// Associations whose setup failed.
    pub setup_failures: u64,
    /// Associations lost after being established (peer aborted or timed out).
    pub lost: u64,
    /// Associations open now.
    pub open: u64,
    /// SIP messages handed to SCTP.
    pub messages_sent: u64,
    /// SIP messages delivered.
    pub messages_received: u64,
    /// Messages dropped because their association failed before they were sent.
    pub messages_dropped: u64,
    /// Messages sctp-proto refused to take (a stream it would not open or write).
    pub messages_refused: u64,
    /// Datagrams received that belong to no association and start none.
    pub stray_datagrams: u64,
    /// Datagrams produced.
    pub datagrams_out: u64,
    /// Datagrams consumed.
    pub datagrams_in: u64,
    /// Retransmission timeouts (T3-rtx) of the associations open now.
    pub t3_timeouts: u64,
    /// Fast retransmissions of the associations open now.
    pub fast_retransmits: u64,
    /// Bytes waiting in the associations open now (for their setup, or not yet
    /// acknowledged).
    pub queued_bytes: u64,
    /// DATA chunks the peer reported receiving twice (the duplicate TSNs of its SACKs): our
    /// retransmissions that were not needed (seed 002 subtracts them from the
    /// retransmissions to find the loss SCTP actually met).
    pub duplicate_tsns: u64,
    /// HEARTBEATs sent.
    pub heartbeats_sent: u64,
    /// HEARTBEAT ACKs received for them.
    pub heartbeat_acks: u64,
    /// Associations declared lost because their peer answered no HEARTBEAT (also counted
    /// in `lost`).
    pub heartbeat_failures: u64,
}

impl std::ops::AddAssign for SctpStats {
    /// Adds every counter of `o` (the endpoints of one process summed).
    fn add_assign(&mut self, o: Self) {
        self.established += o.established;
        self.setup_failures += o.setup_failures;
        self.lost += o.lost;
        self.open += o.open;
        self.messages_sent += o.messages_sent;
        self.messages_received += o.messages_received;
        self.messages_dropped += o.messages_dropped;
        self.messages_refused += o.messages_refused;
        self.stray_datagrams += o.stray_datagrams;
        self.datagrams_out += o.datagrams_out;
        self.datagrams_in += o.datagrams_in;
        self.t3_timeouts += o.t3_timeouts;
        self.fast_retransmits += o.fast_retransmits;
        self.queued_bytes += o.queued_bytes;
        self.duplicate_tsns += o.duplicate_tsns;
        self.heartbeats_sent += o.heartbeats_sent;
        self.heartbeat_acks += o.heartbeat_acks;
        self.heartbeat_failures += o.heartbeat_failures;
    }
}

/// One association and what holdline keeps beside it.
struct Assoc {
    a: Association,
    /// Where its datagrams go: the peer's last seen encapsulation address.
    peer: SocketAddr,
    /// The address it is known by in `by_peer` (the one first used).
    key: SocketAddr,
    connected: bool,
    /// Messages waiting for the handshake: (stream, message).
    queued: VecDeque<(u16, Bytes)>,
    queued_bytes: usize,
    /// Streams opened for sending.
    opened: Vec<bool>,
    /// Whether what we send on it goes unordered (the peer's setting, or the endpoint's).
    unordered: bool,
    /// The peer's verification tag, read from the packets sctp-proto sends it (0 until the
    /// handshake is done): what a HEARTBEAT of ours must carry.
    peer_tag: u32,
    /// When a datagram last came from the peer.
    heard: Instant,
    /// HEARTBEATs sent since the peer was last heard, and when the last went out.
    hb_unanswered: u32,
    hb_sent: Option<Instant>,
}

impl Assoc {
    fn new(a: Association, peer: SocketAddr, cfg: &SctpConfig, now: Instant) -> Self {
        Self {
            a,
            peer,
            key: peer,
            connected: false,
            queued: VecDeque::new(),
            queued_bytes: 0,
            opened: vec![false; usize::from(cfg.streams.max(1))],
            unordered: cfg.delivery.get(&peer).copied().unwrap_or(cfg.unordered),
            peer_tag: 0,
            heard: now,
            hb_unanswered: 0,
            hb_sent: None,
        }
    }

    /// When the next HEARTBEAT is due (`None`: heartbeats off, or no handshake yet).
    fn heartbeat_due(&self, cfg: &SctpConfig) -> Option<Instant> {
        if cfg.heartbeat_interval_ms == 0 || !self.connected || self.peer_tag == 0 {
            return None;
        }
        let wait = Duration::from_millis(cfg.heartbeat_interval_ms + cfg.rto_min_ms);
        Some(self.hb_sent.unwrap_or(self.heard).max(self.heard) + wait)
    }
}

/// Every SCTP association of one UDP socket. See the crate documentation.
pub struct SctpUdp {
    cfg: SctpConfig,
    endpoint: Endpoint,
    client: ClientConfig,
    assocs: HashMap<AssociationHandle, Assoc>,
    by_peer: HashMap<SocketAddr, AssociationHandle>,
    received: VecDeque<Received>,
    transmits: VecDeque<(SocketAddr, Bytes)>,
    stats: SctpStats,
    /// Associations with input not yet run: driven once before the next output is taken
    /// (sctp-proto walks every unacknowledged chunk each time it is asked for packets, so
    /// asking once per batch rather than once per message matters at thousands of messages
    /// per second).
    dirty: Vec<AssociationHandle>,
    /// The latest instant the driver gave.
    now: Option<Instant>,
}

/// The most bytes handed to sctp-proto and not yet acknowledged, per association; the rest
/// waits in the association's own queue. sctp-proto walks every unacknowledged chunk on
/// each SACK and each request for packets, so what it holds must stay small for its cost
/// per message to stay flat (256 KiB: ≈ 600 SIP messages, far more than one round trip
/// carries at 10,000 messages per second on a LAN).
const IN_SCTP: usize = 256 << 10;

/// PPID of SIP messages: 0, "no application identifier specified" (RFC 9260 §3.3.1); whether
/// RFC 4168 names another is to re-check against its text. sctp-proto's `Unknown`, patched to
/// be 0 on the wire (vendor/README.md).
const PPID: PayloadProtocolIdentifier = PayloadProtocolIdentifier::Unknown;

impl SctpUdp {
    /// An endpoint with no association yet.
    pub fn new(cfg: SctpConfig) -> Self {
        let transport = Arc::new(
            TransportConfig::default()
                .with_max_send_message_size(cfg.max_message)
                .with_max_receive_message_size(cfg.max_message)
                .with_max_num_outbound_streams(cfg.streams.max(1))
                .with_max_num_inbound_streams(u16::MAX)
                .with_rto_initial_ms(cfg.rto_initial_ms)
                .with_rto_min_ms(cfg.rto_min_ms)
                .with_rto_max_ms(cfg.rto_max_ms)
                .with_max_data_retransmits(Some(cfg.max_retransmits))
                .with_max_init_retransmits(Some(cfg.max_init_retransmits))
                .with_local_port(cfg.sctp_port)
                .with_remote_port(cfg.sctp_port),
        );
        let server = cfg.accept.then(|| {
            let mut s = ServerConfig::new();
            s.transport = Arc::clone(&transport);
            Arc::new(s)
        });
        let mut client = ClientConfig::new();
        client.transport = transport;
        // The payload size of a datagram: 1,500 (Ethernet) - 20 (IPv4) - 8 (UDP).
        let mut ep = EndpointConfig::new();
        // The user data of one DATA chunk in a datagram that fits a 1,500-byte IP packet:
        // 1,500 - 20 (IPv4) - 8 (UDP) - 12 (SCTP common header) - 16 (DATA chunk header).
        ep.max_payload_size(1_444);
        Self {
            endpoint: Endpoint::new(Arc::new(ep), server),
            client,
            assocs: HashMap::new(),
            by_peer: HashMap::new(),
            received: VecDeque::new(),
            transmits: VecDeque::new(),
            stats: SctpStats::default(),
            dirty: Vec::new(),
            now: None,
            cfg,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SctpConfig {
        &self.cfg
    }

    /// Counters so far.
    pub fn stats(&mut self) -> SctpStats {
        let (mut t3, mut fast, mut queued) = (0, 0, 0);
        for x in self.assocs.values_mut() {
            let mut a = x.a.stats();
            t3 += a.get_num_t3timeouts();
            fast += a.get_num_fast_retrans();
            queued += (x.queued_bytes + buffered(&mut x.a, &x.opened)) as u64;
        }
        SctpStats {
            open: self.assocs.len() as u64,
            t3_timeouts: t3,
            fast_retransmits: fast,
            queued_bytes: queued,
            ..self.stats
        }
    }

    /// Starts an association with `to` now, ahead of the first message (a caller that
    /// wants its set-up, a lost INIT included, out of the way before it measures
    /// anything); nothing when there is one already.
    pub fn open(&mut self, now: Instant, to: SocketAddr) -> Result<(), SendError> {
        if !self.by_peer.contains_key(&to) {
            let h = self.connect(now, to)?;
            self.now = Some(now);
            self.mark(h);
        }
        Ok(())
    }

    /// Whether an association with `peer` is established.
    pub fn is_connected(&mut self, peer: SocketAddr) -> bool {
        self.drive_dirty();
        self.by_peer
            .get(&peer)
            .and_then(|h| self.assocs.get(h))
            .is_some_and(|a| a.connected)
    }

    /// Feeds one datagram the socket received from `from`.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        self.stats.datagrams_in += 1;
        // A HEARTBEAT ACK answers one of ours: sctp-proto neither sends HEARTBEATs nor
        // takes their acknowledgements, so it stops here.
        if let Some(nonce) = heartbeat_ack_nonce(data) {
            let h = self.by_peer.get(&from).copied().or_else(|| {
                self.assocs
                    .iter()
                    .find(|(_, x)| x.peer == from)
                    .map(|(h, _)| *h)
            });
            match h.and_then(|h| self.assocs.get_mut(&h)) {
                Some(x) if nonce == heartbeat_nonce(x.peer_tag) => {
                    self.stats.heartbeat_acks += 1;
                    x.heard = now;
                    x.hb_unanswered = 0;
                    x.hb_sent = None;
                }
                _ => self.stats.stray_datagrams += 1,
            }
            return;
        }
        self.stats.duplicate_tsns += sack_duplicates(data);
        let Some((h, event)) =
            self.endpoint
                .handle(now, from, None, None, Bytes::copy_from_slice(data))
        else {
            self.stats.stray_datagrams += 1;
            self.drain_endpoint_transmits(from);
            return;
        };
        match event {
            DatagramEvent::NewAssociation(a) => {
                self.assocs.insert(h, Assoc::new(a, from, &self.cfg, now));
                // A peer that started an association carries our messages to it too,
                // unless we already started one of our own.
                self.by_peer.entry(from).or_insert(h);
            }
            DatagramEvent::AssociationEvent(ev) => {
                if let Some(x) = self.assocs.get_mut(&h) {
                    // RFC 6951: follow the peer's encapsulation port.
                    x.peer = from;
                    // The peer's own HEARTBEAT says nothing of whether ours reach it (a path
                    // broken one way); anything else it sends answers something of ours.
                    if data.get(12) != Some(&CHUNK_HEARTBEAT) {
                        x.heard = now;
                        x.hb_unanswered = 0;
                        x.hb_sent = None;
                    }
                    x.a.handle_event(ev);
                }
            }
        }
        self.drain_endpoint_transmits(from);
        self.now = Some(now);
        self.mark(h);
    }

    /// Sends one SIP message to `to` on stream `key % streams`, starting an association if
    /// there is none.
    pub fn send(
        &mut self,
        now: Instant,
        to: SocketAddr,
        key: u64,
        message: &[u8],
    ) -> Result<(), SendError> {
        if message.len() > self.cfg.max_message as usize {
            return Err(SendError::TooLarge {
                len: message.len(),
                limit: self.cfg.max_message,
            });
        }
        let h = match self.by_peer.get(&to) {
            Some(&h) => h,
            None => self.connect(now, to)?,
        };
        let stream = (key % u64::from(self.cfg.streams.max(1))) as u16;
        let limit = self.cfg.max_queued_bytes;
        let Some(x) = self.assocs.get_mut(&h) else {
            return Err(SendError::Connect {
                peer: to,
                reason: "association vanished".to_owned(),
            });
        };
        let queued = x.queued_bytes + buffered(&mut x.a, &x.opened);
        if queued + message.len() > limit {
            return Err(SendError::QueueFull {
                peer: to,
                queued,
                limit,
            });
        }
        let data = Bytes::copy_from_slice(message);
        if x.connected && x.queued.is_empty() && queued - x.queued_bytes < IN_SCTP {
            if !write(x, stream, &data) {
                self.stats.messages_refused += 1;
            }
        } else {
            x.queued_bytes += data.len();
            x.queued.push_back((stream, data));
        }
        self.stats.messages_sent += 1;
        self.now = Some(now);
        self.mark(h);
        Ok(())
    }

    /// The next datagram to send: (destination, payload).
    pub fn poll_transmit(&mut self) -> Option<(SocketAddr, Bytes)> {
        self.drive_dirty();
        let t = self.transmits.pop_front();
        if t.is_some() {
            self.stats.datagrams_out += 1;
        }
        t
    }

    /// The next SIP message received.
    pub fn poll_received(&mut self) -> Option<Received> {
        self.drive_dirty();
        self.received.pop_front()
    }

    /// When [`SctpUdp::handle_timeout`] must be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.assocs
            .values()
            .flat_map(|x| [x.a.poll_timeout(), x.heartbeat_due(&self.cfg)])
            .flatten()
            .min()
    }

    /// Runs the timers due at `now` (retransmissions, delayed acknowledgements, setup).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = Some(now);
        self.drive_dirty();
        let due: Vec<AssociationHandle> = self
            .assocs
            .iter()
            .filter(|(_, x)| x.a.poll_timeout().is_some_and(|t| t <= now))
            .map(|(h, _)| *h)
            .collect();
        for h in due {
            if let Some(x) = self.assocs.get_mut(&h) {
                x.a.handle_timeout(now);
            }
            self.drive(h, now);
        }
        self.heartbeats(now);
    }

    /// Sends the HEARTBEATs due at `now`; declares lost the associations whose peer left
    /// more than `max_retransmits` of them unanswered.
    fn heartbeats(&mut self, now: Instant) {
        let due: Vec<AssociationHandle> = self
            .assocs
            .iter()
            .filter(|(_, x)| x.heartbeat_due(&self.cfg).is_some_and(|t| t <= now))
            .map(|(h, _)| *h)
            .collect();
        for h in due {
            let Some(x) = self.assocs.get_mut(&h) else {
                continue;
            };
            if x.hb_unanswered as usize >= self.cfg.max_retransmits {
                // RFC 4960 §8.1: the peer is unreachable. sctp-proto reports the loss
                // (AssociationLost), which the drive below counts and cleans up.
                self.stats.heartbeat_failures += 1;
                let _ = x.a.close();
                self.drive(h, now);
                continue;
            }
            x.hb_unanswered += 1;
            x.hb_sent = Some(now);
            self.stats.heartbeats_sent += 1;
            let packet = heartbeat_packet(self.cfg.sctp_port, x.peer_tag);
            self.transmits.push_back((x.peer, packet));
        }
    }

    /// Starts shutting every association down gracefully (SHUTDOWN); keep driving until
    /// [`SctpStats::open`] is 0 or a deadline passes.
    pub fn shutdown_all(&mut self, now: Instant) {
        let hs: Vec<AssociationHandle> = self.assocs.keys().copied().collect();
        for h in hs {
            if let Some(x) = self.assocs.get_mut(&h) {
                let _ = x.a.shutdown();
            }
            self.drive(h, now);
        }
    }

    fn mark(&mut self, h: AssociationHandle) {
        if !self.dirty.contains(&h) {
            self.dirty.push(h);
        }
    }

    fn drive_dirty(&mut self) {
        let Some(now) = self.now else {
            return;
        };
        for h in std::mem::take(&mut self.dirty) {
            self.drive(h, now);
        }
    }

    fn connect(&mut self, now: Instant, to: SocketAddr) -> Result<AssociationHandle, SendError> {
        let (h, a) = self
            .endpoint
            .connect(self.client.clone(), to)
            .map_err(|e| SendError::Connect {
                peer: to,
                reason: e.to_string(),
            })?;
        self.assocs.insert(h, Assoc::new(a, to, &self.cfg, now));
        self.by_peer.insert(to, h);
        Ok(h)
    }

    fn drain_endpoint_transmits(&mut self, to: SocketAddr) {
        while let Some(t) = self.endpoint.poll_transmit() {
            push_payload(&mut self.transmits, to, t.payload);
        }
    }

    /// Runs association `h` until it has nothing more to say: its events, the endpoint's,
    /// its datagrams; removes it when it is over.
    fn drive(&mut self, h: AssociationHandle, now: Instant) {
        let Some(x) = self.assocs.get_mut(&h) else {
            return;
        };
        let mut over = false;
        loop {
            let mut progressed = false;
            while let Some(ev) = x.a.poll() {
                progressed = true;
                match ev {
                    Event::Connected => {
                        x.connected = true;
                        self.stats.established += 1;
                    }
                    Event::HandshakeFailed { .. } => {
                        self.stats.setup_failures += 1;
                        over = true;
                    }
                    Event::AssociationLost { .. } => {
                        if x.connected {
                            self.stats.lost += 1;
                        } else {
                            self.stats.setup_failures += 1;
                        }
                        over = true;
                    }
                    Event::Stream(StreamEvent::Readable { id }) => {
                        read_all(x, id, &mut self.received, &mut self.stats);
                    }
                    Event::Stream(StreamEvent::Opened { .. }) => {
                        // Streams the peer opened: nothing to keep; reading finds them.
                        while x.a.accept_stream().is_some() {}
                    }
                    _ => {}
                }
            }
            while let Some(ev) = x.a.poll_endpoint_event() {
                progressed = true;
                if let Some(back) = self.endpoint.handle_event(h, ev) {
                    x.a.handle_event(back);
                }
            }
            // Hand sctp-proto what waits, up to IN_SCTP bytes not yet acknowledged.
            if x.connected && !x.queued.is_empty() {
                let mut inside = buffered(&mut x.a, &x.opened);
                while inside < IN_SCTP {
                    let Some((stream, data)) = x.queued.pop_front() else {
                        break;
                    };
                    x.queued_bytes -= data.len();
                    inside += data.len();
                    progressed = true;
                    if !write(x, stream, &data) {
                        self.stats.messages_refused += 1;
                    }
                }
            }
            while let Some(t) = x.a.poll_transmit(now) {
                progressed = true;
                if x.connected
                    && let Payload::RawEncode(parts) = &t.payload
                    && let Some(tag) = parts.first().and_then(|b| b.get(4..8))
                {
                    // The common header's verification tag: the peer's.
                    let tag = u32::from_be_bytes([tag[0], tag[1], tag[2], tag[3]]);
                    if tag != 0 {
                        x.peer_tag = tag;
                    }
                }
                push_payload(&mut self.transmits, x.peer, t.payload);
            }
            if !progressed {
                break;
            }
        }
        if over || x.a.is_drained() {
            self.stats.messages_dropped += x.queued.len() as u64;
            let key = x.key;
            self.assocs.remove(&h);
            if self.by_peer.get(&key) == Some(&h) {
                self.by_peer.remove(&key);
            }
        }
    }
}

/// Bytes not yet acknowledged on the association's open streams.
fn buffered(a: &mut Association, opened: &[bool]) -> usize {
    opened
        .iter()
        .enumerate()
        .filter(|(_, o)| **o)
        .filter_map(|(id, _)| a.stream(id as u16).ok()?.buffered_amount().ok())
        .sum()
}

/// Writes one message on `stream`, opening it first if needed (a stream the peer opened
/// already exists: it is set up for our sending the same way), ordered or not as the
/// association says. False when sctp-proto refused the message.
fn write(x: &mut Assoc, stream: u16, data: &Bytes) -> bool {
    let unordered = x.unordered;
    let i = usize::from(stream);
    let result = if x.opened.get(i).copied().unwrap_or(false) {
        x.a.stream(stream)
    } else {
        let opened = match x.a.open_stream(stream, PPID) {
            Err(sctp_proto::Error::ErrStreamAlreadyExist) => x.a.stream(stream),
            other => other,
        };
        opened.and_then(|mut s| {
            s.set_reliability_params(unordered, ReliabilityType::Reliable, 0)?;
            Ok(s)
        })
    };
    match result {
        Ok(mut s) => {
            if let Some(o) = x.opened.get_mut(i) {
                *o = true;
            }
            s.write_sctp(data, PPID).is_ok()
        }
        Err(_) => false,
    }
}

/// Reads every complete message waiting on stream `id`.
fn read_all(x: &mut Assoc, id: u16, out: &mut VecDeque<Received>, stats: &mut SctpStats) {
    let Ok(mut s) = x.a.stream(id) else {
        return;
    };
    while let Ok(Some(chunks)) = s.read_sctp() {
        let mut buf = vec![0u8; chunks.len()];
        if chunks.read(&mut buf).is_ok() {
            stats.messages_received += 1;
            out.push_back(Received {
                from: x.peer,
                stream: id,
                data: Bytes::from(buf),
            });
        }
    }
}

fn push_payload(out: &mut VecDeque<(SocketAddr, Bytes)>, to: SocketAddr, p: Payload) {
    if let Payload::RawEncode(parts) = p {
        for b in parts {
            out.push_back((to, b));
        }
    }
}

/// SCTP chunk types (RFC 9260 §3.2).
const CHUNK_SACK: u8 = 3;
const CHUNK_HEARTBEAT: u8 = 4;
const CHUNK_HEARTBEAT_ACK: u8 = 5;
/// Heartbeat Info parameter type (RFC 9260 §3.3.5).
const PARAM_HEARTBEAT_INFO: u16 = 1;

/// CRC32c, SCTP's checksum (RFC 9260 Appendix A), as sctp-proto computes it.
const CRC32C: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);

/// What a HEARTBEAT of ours carries as its Heartbeat Info, for its ACK to be recognised: a
/// value derived from the peer's tag (known to both ends of the association, constant for
/// its life) and a fixed marker, so a stale or forged ACK from another association does not
/// count.
fn heartbeat_nonce(peer_tag: u32) -> u64 {
    (u64::from(peer_tag) << 32) | 0x686c_6862 // "hlhb"
}

/// An SCTP packet of one HEARTBEAT chunk to the peer whose verification tag is `tag`.
fn heartbeat_packet(port: u16, tag: u32) -> Bytes {
    let mut p = Vec::with_capacity(12 + 4 + 12);
    p.extend_from_slice(&port.to_be_bytes());
    p.extend_from_slice(&port.to_be_bytes());
    p.extend_from_slice(&tag.to_be_bytes());
    p.extend_from_slice(&[0; 4]);
    // HEARTBEAT: type, flags, length (4 + the 12-byte parameter).
    p.extend_from_slice(&[CHUNK_HEARTBEAT, 0]);
    p.extend_from_slice(&16u16.to_be_bytes());
    // Heartbeat Info: type, length (4 + 8), the nonce.
    p.extend_from_slice(&PARAM_HEARTBEAT_INFO.to_be_bytes());
    p.extend_from_slice(&12u16.to_be_bytes());
    p.extend_from_slice(&heartbeat_nonce(tag).to_be_bytes());
    let crc = CRC32C.checksum(&p);
    p[8..12].copy_from_slice(&crc.to_le_bytes());
    Bytes::from(p)
}

/// The nonce of a packet holding a HEARTBEAT ACK whose Heartbeat Info is 8 bytes (ours are),
/// with a valid checksum; `None` for anything else.
fn heartbeat_ack_nonce(d: &[u8]) -> Option<u64> {
    if d.len() < 28 || d[12] != CHUNK_HEARTBEAT_ACK {
        return None;
    }
    let chunk_len = u16::from_be_bytes([d[14], d[15]]);
    let param = u16::from_be_bytes([d[16], d[17]]);
    let param_len = u16::from_be_bytes([d[18], d[19]]);
    if chunk_len != 16 || param != PARAM_HEARTBEAT_INFO || param_len != 12 {
        return None;
    }
    let mut check = d.to_vec();
    check[8..12].copy_from_slice(&[0; 4]);
    let sum = u32::from_le_bytes([d[8], d[9], d[10], d[11]]);
    if CRC32C.checksum(&check) != sum {
        return None;
    }
    let mut n = [0u8; 8];
    n.copy_from_slice(&d[20..28]);
    Some(u64::from_be_bytes(n))
}

/// The duplicate TSNs the SACK chunks of packet `d` report (RFC 9260 §3.3.4: after the
/// cumulative TSN, the window, the counts of gap blocks and of duplicates, and the gap
/// blocks); 0 for a packet without SACK or one too short to hold what it announces.
fn sack_duplicates(d: &[u8]) -> u64 {
    let mut at = 12;
    let mut dups = 0;
    while at + 4 <= d.len() {
        let len = usize::from(u16::from_be_bytes([d[at + 2], d[at + 3]]));
        if len < 4 {
            break;
        }
        if d[at] == CHUNK_SACK && len >= 16 && at + 16 <= d.len() {
            dups += u64::from(u16::from_be_bytes([d[at + 14], d[at + 15]]));
        }
        at += len.next_multiple_of(4);
    }
    dups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sack_duplicates_are_counted_and_bad_lengths_stop_the_walk() {
        // Common header, then a SACK: cum TSN 7, a_rwnd, 1 gap block, 2 duplicates, the
        // block (2..3) and the duplicate TSNs 5 and 6.
        let mut p = vec![0u8; 12];
        p.extend_from_slice(&[CHUNK_SACK, 0, 0, 28]);
        p.extend_from_slice(&7u32.to_be_bytes());
        p.extend_from_slice(&65_535u32.to_be_bytes());
        p.extend_from_slice(&1u16.to_be_bytes());
        p.extend_from_slice(&2u16.to_be_bytes());
        p.extend_from_slice(&[0, 2, 0, 3]);
        p.extend_from_slice(&5u32.to_be_bytes());
        p.extend_from_slice(&6u32.to_be_bytes());
        assert_eq!(sack_duplicates(&p), 2);
        // A DATA chunk before it is skipped.
        let mut q = vec![0u8; 12];
        q.extend_from_slice(&[0, 3, 0, 17]);
        q.extend_from_slice(&[0; 13]);
        q.extend_from_slice(&[0; 3]);
        q.extend_from_slice(&p[12..]);
        assert_eq!(sack_duplicates(&q), 2);
        // A zero length ends the walk; a truncated SACK counts nothing.
        let mut z = vec![0u8; 12];
        z.extend_from_slice(&[CHUNK_SACK, 0, 0, 0]);
        assert_eq!(sack_duplicates(&z), 0);
        assert_eq!(sack_duplicates(&p[..20]), 0);
        assert_eq!(sack_duplicates(&[]), 0);
    }
}
