//! SIP capture: a HEP v3 copy of every SIP message the workers receive and send, to a
//! collector (`[capture]`).
//!
//! ```text
//!   worker: message read or sent ─ copy into a pooled buffer ─ try_send ─┐ full: dropped,
//!                                  (+ addresses, transport, wall time)   │ counted, the
//!                                                                        │ buffer goes back
//!   capture thread: recv ─ sample / match (parse) ─ hep::encode ─ sendmmsg batch ─ collector
//!                   └─ the buffer back to the pool
//! ```
//!
//! A worker never waits for the collector: it copies the message (one `memcpy` into a
//! buffer taken from a pool the capture thread refills) and offers it to a bounded queue;
//! when the queue is full the copy is dropped and counted. Sampling and matching parse the
//! message, so they happen on the capture thread.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use holdline_base::Transport;
use holdline_io::udp::{SendBatch, UdpOptions, UdpSocket};
use holdline_sip::hep::{self, HepMessage, IpProto};
use holdline_sip::{Limits, Message};

use crate::config::CaptureSettings;

/// Packets sent with one `sendmmsg` (UDP) or one write (TCP).
const BATCH: usize = 64;
/// How long the capture thread sleeps when the queue is empty. It polls rather than blocks:
/// a blocked receiver would make every worker's `try_send` a futex wake-up (a system call
/// and a context switch per captured message); polling costs ~200 wake-ups a second, and
/// the queue holds what arrives meanwhile (16,384 by default: 5 ms of 3 million messages a
/// second).
const IDLE: Duration = Duration::from_millis(5);
/// Wait before connecting again to a TCP collector that failed.
const RECONNECT: Duration = Duration::from_secs(1);
/// Pooled buffers larger than this are not kept (a rare large message does not pin memory
/// in every slot of the pool).
const POOL_BUF_MAX: usize = 8192;
/// A fresh buffer's capacity: most SIP messages fit.
const POOL_BUF_NEW: usize = 2048;

/// Counters of the capture, rendered as `holdline_capture_*`.
#[derive(Debug, Default)]
pub(crate) struct CaptureStats {
    /// HEP packets the collector's socket took.
    pub(crate) sent: AtomicU64,
    /// Copies dropped because the queue was full.
    pub(crate) dropped_queue: AtomicU64,
    /// Packets the socket did not take (full send buffer, error) or could not encode.
    pub(crate) dropped_send: AtomicU64,
    /// Messages left out by `sample`, `users` or `call_ids`.
    pub(crate) skipped: AtomicU64,
}

/// One copied message waiting for the capture thread.
struct Captured {
    bytes: Vec<u8>,
    src: SocketAddr,
    dst: SocketAddr,
    proto: IpProto,
    secs: u32,
    micros: u32,
}

/// The workers' end: offers copies to the capture thread. Held in the workers' shared
/// state; the capture thread ends once it is dropped and the queue is empty.
#[derive(Debug)]
pub(crate) struct Capture {
    tx: Sender<Captured>,
    pool: (Sender<Vec<u8>>, Receiver<Vec<u8>>),
    /// `sample`'s threshold (see [`sampled_out`]); `u64::MAX`: every call.
    threshold: u64,
    pub(crate) stats: Arc<CaptureStats>,
}

/// Whether `sample` leaves the call of `bytes` out: its Call-ID's hash (a plain scan of
/// the header lines, no parse: the worker pays for it) is at or above `threshold`.
fn sampled_out(threshold: u64, bytes: &[u8]) -> bool {
    threshold != u64::MAX && spread(call_id_hash(bytes)) >= threshold
}

/// The FNV-1a hash of the Call-ID of `bytes`: found with a vectorised search for the usual
/// `\r\nCall-ID:` first, with a scan of every header line (compact form, other cases) when
/// that fails.
fn call_id_hash(bytes: &[u8]) -> u64 {
    const NAME: &[u8] = b"\r\nCall-ID:";
    if let Some(at) = memchr::memmem::find(bytes, NAME) {
        let value = &bytes[at + NAME.len()..];
        let end = memchr::memchr(b'\r', value).unwrap_or(value.len());
        return holdline_proto::shard::hash_call_id(value[..end].trim_ascii());
    }
    holdline_sctp::call_id_key(bytes)
}

/// `sample`'s threshold: captured when the spread hash is below `sample * 2^64`.
fn threshold_of(sample: f64) -> u64 {
    if sample >= 1.0 {
        u64::MAX
    } else {
        (sample * u64::MAX as f64) as u64
    }
}

impl std::fmt::Debug for Captured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Captured")
            .field("len", &self.bytes.len())
            .field("src", &self.src)
            .field("dst", &self.dst)
            .finish_non_exhaustive()
    }
}

impl Capture {
    /// Offers a copy of `bytes`, which went from `src` to `dst` over `transport`, to the
    /// capture thread; never blocks.
    pub(crate) fn offer(&self, bytes: &[u8], src: SocketAddr, dst: SocketAddr, t: Transport) {
        if sampled_out(self.threshold, bytes) {
            self.stats.skipped.fetch_add(1, Relaxed);
            return;
        }
        let proto = match t {
            Transport::Udp => IpProto::Udp,
            Transport::Tcp | Transport::Tls => IpProto::Tcp,
            Transport::Sctp => IpProto::Sctp,
            _ => return,
        };
        let (secs, micros) = match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => (d.as_secs() as u32, d.subsec_micros()),
            Err(_) => (0, 0),
        };
        let mut buf = self
            .pool
            .1
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(POOL_BUF_NEW));
        buf.clear();
        buf.extend_from_slice(bytes);
        let c = Captured {
            bytes: buf,
            src,
            dst,
            proto,
            secs,
            micros,
        };
        match self.tx.try_send(c) {
            Ok(()) => {}
            Err(TrySendError::Full(c) | TrySendError::Disconnected(c)) => {
                self.stats.dropped_queue.fetch_add(1, Relaxed);
                recycle(&self.pool.0, c.bytes);
            }
        }
    }
}

fn recycle(pool: &Sender<Vec<u8>>, buf: Vec<u8>) {
    if buf.capacity() <= POOL_BUF_MAX {
        let _ = pool.try_send(buf);
    }
}

/// Which messages the capture thread keeps (`sample` is the workers' business): only those
/// of some users or Call-IDs, when listed.
#[derive(Debug)]
struct Filter {
    users: Vec<Vec<u8>>,
    call_ids: Vec<Vec<u8>>,
    limits: Limits,
}

/// A Call-ID's FNV-1a hash spread over the whole `u64` range (a finalizer), so that
/// `sample` of the calls fall below `sample * 2^64`.
fn spread(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

impl Filter {
    fn new(s: &CaptureSettings) -> Self {
        let mut limits = Limits::DEFAULT;
        limits.max_message_size(usize::MAX);
        Self {
            users: s.users.iter().map(|u| u.as_bytes().to_vec()).collect(),
            call_ids: s.call_ids.iter().map(|c| c.as_bytes().to_vec()).collect(),
            limits,
        }
    }

    fn is_open(&self) -> bool {
        self.users.is_empty() && self.call_ids.is_empty()
    }

    /// Whether `bytes` is captured (a message without a Call-ID only when everything is).
    fn wants(&self, bytes: &[u8]) -> bool {
        if self.is_open() {
            return true;
        }
        let Ok(m) = Message::parse(bytes, &self.limits) else {
            return false;
        };
        let Ok(call_id) = m.call_id() else {
            return false;
        };
        if self.call_ids.iter().any(|c| c[..] == *call_id) {
            return true;
        }
        [m.from(), m.to()]
            .into_iter()
            .filter_map(|a| a.ok().and_then(|a| a.uri.user()))
            .any(|u| self.users.iter().any(|w| w[..] == *u))
    }
}

/// Why capture could not start.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The socket towards the collector could not be opened.
    #[error("capture: cannot open a socket towards {collector}: {source}")]
    Socket {
        /// The collector.
        collector: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The capture thread could not be started.
    #[error("capture: cannot start its thread: {0}")]
    Thread(std::io::Error),
}

/// Starts the capture thread when `[capture] hep` is set; the [`Capture`] goes into the
/// workers' shared state.
pub(crate) fn start(s: &CaptureSettings) -> Result<Option<Capture>, CaptureError> {
    let Some(hep) = s.hep else {
        return Ok(None);
    };
    let collector = hep.addr;
    let sink = if hep.transport == Transport::Tcp {
        Sink::Tcp {
            stream: None,
            retry_at: std::time::Instant::now(),
            buf: Vec::with_capacity(64 << 10),
        }
    } else {
        let local: SocketAddr = if collector.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let opts = UdpOptions {
            reuse_port: false,
            send_buffer: Some(4 << 20),
            ..UdpOptions::default()
        };
        let socket = UdpSocket::bind(local, &opts)
            .map_err(|source| CaptureError::Socket { collector, source })?;
        Sink::Udp {
            socket,
            batch: SendBatch::new(),
        }
    };
    let (tx, rx) = crossbeam_channel::bounded(s.queue);
    let pool = crossbeam_channel::bounded(s.queue);
    let stats = Arc::new(CaptureStats::default());
    let mut thread = Thread {
        rx,
        pool: pool.0.clone(),
        sink,
        collector,
        agent_id: s.agent_id,
        password: s.password.clone().map(String::into_bytes),
        filter: Filter::new(s),
        stats: stats.clone(),
        packets: 0,
        packet: Vec::with_capacity(4096),
    };
    std::thread::Builder::new()
        .name("holdline-capture".into())
        .spawn(move || thread.run())
        .map_err(CaptureError::Thread)?;
    tracing::info!(%collector, agent_id = s.agent_id, sample = s.sample, "SIP capture (HEP v3) on");
    Ok(Some(Capture {
        tx,
        pool,
        threshold: threshold_of(s.sample),
        stats,
    }))
}

/// Where the packets go: a UDP socket (one datagram per packet, `sendmmsg` batches) or a
/// TCP connection (packets back to back, one write per batch; connected on demand and again
/// after a failure, at most once per [`RECONNECT`]).
enum Sink {
    Udp {
        socket: UdpSocket,
        batch: SendBatch,
    },
    Tcp {
        stream: Option<std::net::TcpStream>,
        retry_at: std::time::Instant,
        buf: Vec<u8>,
    },
}

struct Thread {
    rx: Receiver<Captured>,
    pool: Sender<Vec<u8>>,
    sink: Sink,
    collector: SocketAddr,
    agent_id: u32,
    password: Option<Vec<u8>>,
    filter: Filter,
    stats: Arc<CaptureStats>,
    /// Packets in the current batch.
    packets: usize,
    packet: Vec<u8>,
}

impl Thread {
    fn run(&mut self) {
        // Ends when the workers' end is gone and everything queued has been sent.
        loop {
            match self.rx.try_recv() {
                Ok(c) => {
                    self.add(c);
                    if self.packets >= BATCH {
                        self.flush();
                    }
                }
                Err(crossbeam_channel::TryRecvError::Empty) => {
                    self.flush();
                    std::thread::sleep(IDLE);
                }
                Err(crossbeam_channel::TryRecvError::Disconnected) => break,
            }
        }
        self.flush();
    }

    fn add(&mut self, c: Captured) {
        if self.filter.wants(&c.bytes) {
            self.packet.clear();
            let m = HepMessage {
                src: c.src,
                dst: c.dst,
                proto: c.proto,
                secs: c.secs,
                micros: c.micros,
                agent_id: self.agent_id,
                auth_key: self.password.as_deref(),
                correlation_id: None,
                payload: &c.bytes,
            };
            let encoded = match &mut self.sink {
                Sink::Udp { batch, .. } => hep::encode(&m, &mut self.packet)
                    .map(|_| batch.push(self.collector, &self.packet)),
                // Straight into the write buffer.
                Sink::Tcp { buf, .. } => hep::encode(&m, buf).map(|_| ()),
            };
            match encoded {
                Ok(()) => self.packets += 1,
                Err(_) => {
                    self.stats.dropped_send.fetch_add(1, Relaxed);
                }
            }
        } else {
            self.stats.skipped.fetch_add(1, Relaxed);
        }
        recycle(&self.pool, c.bytes);
    }

    /// Sends the batch; what the socket does not take after a few short waits is dropped
    /// (the capture thread may wait, the workers never do: the queue takes up the slack).
    fn flush(&mut self) {
        let packets = std::mem::take(&mut self.packets) as u64;
        if packets == 0 {
            return;
        }
        match &mut self.sink {
            Sink::Udp { socket, batch } => {
                let mut errors = 0;
                for attempt in 0..4 {
                    let n = socket.send_batch(batch, &mut errors);
                    self.stats.sent.fetch_add(n as u64, Relaxed);
                    if batch.is_empty() {
                        break;
                    }
                    if attempt < 3 {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
                let lost = batch.clear() + errors;
                self.stats.dropped_send.fetch_add(lost as u64, Relaxed);
            }
            Sink::Tcp {
                stream,
                retry_at,
                buf,
            } => {
                use std::io::Write as _;
                let now = std::time::Instant::now();
                if stream.is_none() && now >= *retry_at {
                    *retry_at = now + RECONNECT;
                    match std::net::TcpStream::connect_timeout(&self.collector, RECONNECT) {
                        Ok(s) => {
                            let _ = s.set_nodelay(true);
                            let _ = s.set_write_timeout(Some(RECONNECT));
                            *stream = Some(s);
                        }
                        Err(e) => {
                            tracing::warn!(collector = %self.collector, error = %e, "capture: cannot connect to the HEP collector");
                        }
                    }
                }
                let sent = stream.as_mut().is_some_and(|s| s.write_all(buf).is_ok());
                if sent {
                    self.stats.sent.fetch_add(packets, Relaxed);
                } else {
                    // A broken or slow connection: the batch is lost, the next one goes on a
                    // new connection (a partial write leaves the stream out of step).
                    if stream.take().is_some() {
                        tracing::warn!(collector = %self.collector, "capture: the HEP collector's connection failed");
                    }
                    self.stats.dropped_send.fetch_add(packets, Relaxed);
                }
                buf.clear();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(users: &[&str], call_ids: &[&str]) -> CaptureSettings {
        CaptureSettings {
            users: users.iter().map(|s| s.to_string()).collect(),
            call_ids: call_ids.iter().map(|s| s.to_string()).collect(),
            ..CaptureSettings::default()
        }
    }

    fn invite(call_id: &str, from: &str, to: &str) -> Vec<u8> {
        format!(
            "INVITE sip:{to}@example.com SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK1\r\n\
             From: <sip:{from}@example.com>;tag=1\r\nTo: <sip:{to}@example.com>\r\n\
             Call-ID: {call_id}\r\nCSeq: 1 INVITE\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
        )
        .into_bytes()
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_the_worker_never_waits() {
        let (tx, rx) = crossbeam_channel::bounded(2);
        let pool = crossbeam_channel::bounded(4);
        let cap = Capture {
            tx,
            pool,
            threshold: u64::MAX,
            stats: Arc::new(CaptureStats::default()),
        };
        let (a, b): (SocketAddr, SocketAddr) = (
            "127.0.0.1:5060".parse().expect("a"),
            "127.0.0.1:5070".parse().expect("b"),
        );
        for _ in 0..5 {
            cap.offer(b"OPTIONS sip:x SIP/2.0\r\n\r\n", a, b, Transport::Udp);
        }
        assert_eq!(cap.stats.dropped_queue.load(Relaxed), 3);
        assert_eq!(rx.len(), 2);
        // A dropped copy's buffer goes back to the pool and is the next message's: one
        // buffer served the three drops.
        assert_eq!(cap.pool.1.len(), 1);
        let c = rx.try_recv().expect("queued");
        assert_eq!((c.src, c.dst, c.proto), (a, b, IpProto::Udp));
        assert_eq!(c.bytes, b"OPTIONS sip:x SIP/2.0\r\n\r\n");
        assert!(c.secs > 1_700_000_000, "wall-clock time");
    }

    #[test]
    fn the_capture_thread_sends_hep_packets_to_the_collector() {
        let collector = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        collector
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let hep: crate::config::Listener = format!("udp:{}", collector.local_addr().expect("addr"))
            .parse()
            .expect("listener");
        let s = CaptureSettings {
            hep: Some(hep),
            agent_id: 9,
            password: Some("pw".into()),
            ..CaptureSettings::default()
        };
        let cap = start(&s).expect("start").expect("on");
        let (a, b): (SocketAddr, SocketAddr) = (
            "127.0.0.1:5060".parse().expect("a"),
            "127.0.0.1:5070".parse().expect("b"),
        );
        let msg = invite("c-1", "alice", "bob");
        cap.offer(&msg, a, b, Transport::Tls);
        let mut buf = [0u8; 4096];
        let n = collector.recv(&mut buf).expect("a HEP packet");
        let p = &buf[..n];
        assert_eq!(&p[..4], b"HEP3");
        assert_eq!(usize::from(u16::from_be_bytes([p[4], p[5]])), n);
        // IP protocol 6 for TLS, agent id 9, the key, and the message at the end.
        assert_eq!(p[6..20], [0, 0, 0, 1, 0, 7, 2, 0, 0, 0, 2, 0, 7, 6]);
        let agent = [0, 0, 0, 12, 0, 10, 0, 0, 0, 9];
        assert!(p.windows(10).any(|w| w == agent));
        assert!(p.windows(8).any(|w| w == [0, 0, 0, 14, 0, 8, b'p', b'w']));
        assert!(p.ends_with(&msg));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while cap.stats.sent.load(Relaxed) < 1 {
            assert!(std::time::Instant::now() < deadline, "counted");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_tcp_collector_gets_the_packets_back_to_back() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let hep: crate::config::Listener = format!("tcp:{}", listener.local_addr().expect("addr"))
            .parse()
            .expect("listener");
        let s = CaptureSettings {
            hep: Some(hep),
            agent_id: 3,
            ..CaptureSettings::default()
        };
        let cap = start(&s).expect("start").expect("on");
        let (a, b): (SocketAddr, SocketAddr) = (
            "127.0.0.1:5060".parse().expect("a"),
            "[::1]:5070".parse().expect("b"),
        );
        let msgs: Vec<Vec<u8>> = (0..3)
            .map(|i| invite(&format!("c-{i}"), "alice", "bob"))
            .collect();
        for m in &msgs {
            cap.offer(m, a, b, Transport::Udp);
        }
        let (mut conn, _) = listener.accept().expect("the capture thread connects");
        conn.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        use std::io::Read as _;
        for m in &msgs {
            let mut head = [0u8; 6];
            conn.read_exact(&mut head).expect("header");
            assert_eq!(&head[..4], b"HEP3");
            let len = usize::from(u16::from_be_bytes([head[4], head[5]]));
            let mut rest = vec![0u8; len - 6];
            conn.read_exact(&mut rest).expect("packet");
            // IPv6 (the source written IPv4-mapped), UDP, and the message at the end.
            assert_eq!(rest[..14], [0, 0, 0, 1, 0, 7, 10, 0, 0, 0, 2, 0, 7, 17]);
            assert!(rest.ends_with(m));
        }
    }

    #[test]
    fn users_and_call_ids_select_messages() {
        let f = Filter::new(&settings(&["alice"], &["c-7"]));
        assert!(f.wants(&invite("c-1", "alice", "bob")));
        assert!(f.wants(&invite("c-2", "carol", "alice")));
        assert!(f.wants(&invite("c-7", "carol", "dave")));
        assert!(!f.wants(&invite("c-3", "carol", "dave")));
        assert!(!f.wants(b"garbage"));
        let all = Filter::new(&settings(&[], &[]));
        assert!(all.wants(b"garbage"), "everything when nothing narrows it");
    }

    #[test]
    fn sampling_takes_its_share_of_calls_and_whole_calls() {
        let t = threshold_of(0.25);
        let n = 4000;
        let taken = (0..n)
            .filter(|i| !sampled_out(t, &invite(&format!("call-{i}@h"), "a", "b")))
            .count();
        assert!((800..1200).contains(&taken), "{taken} of {n}");
        // The same call, the same answer, whatever the message (and the header's form).
        for i in 0..50 {
            let id = format!("call-{i}@h");
            let compact = format!("BYE sip:b@h SIP/2.0\r\ni:   {id}\r\n\r\n");
            assert_eq!(
                sampled_out(t, &invite(&id, "a", "b")),
                sampled_out(t, compact.as_bytes())
            );
        }
        assert!(!sampled_out(threshold_of(1.0), b"anything"));
        // Both ways of finding the Call-ID give the same hash.
        let m = invite("x-1@h", "a", "b");
        assert_eq!(call_id_hash(&m), holdline_sctp::call_id_key(&m));
        assert_eq!(
            call_id_hash(&m),
            holdline_proto::shard::hash_call_id(b"x-1@h")
        );
    }
}
