//! SIP capture: a HEP v3 copy of every SIP message the workers receive and send, to a
//! collector (`[capture]`).
//!
//! ```text
//!   worker: message read or sent ─ append to the worker's batch ─ end of the loop
//!           (+ addresses, transport, wall time)     iteration: the batch, whole, to a
//!                                                   bounded queue (full: dropped, counted)
//!   capture thread: recv a batch ─ match (parse) ─ hep::encode ─ sendmmsg / one write ─
//!                   collector; the emptied batch back to the pool
//! ```
//!
//! A worker never waits for the collector: it appends the message to a batch of its own
//! (one `memcpy` into a buffer that is reused) and hands the batch over whole, once per
//! loop iteration (or when it holds [`WORKER_BATCH_BYTES`]), to a bounded queue; when the
//! queue is full the batch's messages are dropped and counted. Per message a worker pays a
//! clock read and a copy, no channel operation and no atomic. Sampling is decided by the
//! worker (a Call-ID hash); matching users and Call-IDs parses the message, so it happens on
//! the capture thread.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use holdline_base::Transport;
use holdline_io::udp::{SendBatch, UdpOptions, UdpSocket};
use holdline_sip::hep::{self, HepMessage, IpProto};
use holdline_sip::{Limits, Message};

use crate::config::{CapturePriority, CaptureSettings};

/// Packets sent with one `sendmmsg` (UDP); a TCP write carries up to [`TCP_WRITE`] bytes.
const BATCH: usize = 64;
/// Bytes of packets written to a TCP collector at once.
const TCP_WRITE: usize = 256 << 10;
/// How long the capture thread sleeps when the queue is empty. It polls rather than blocks:
/// a blocked receiver would make every worker's hand-over a futex wake-up (a system call
/// and a context switch per batch); polling costs ~100 wake-ups a second, and the queue
/// holds what arrives meanwhile (16,384 messages by default: 10 ms of 1.6 million a
/// second).
const IDLE: Duration = Duration::from_millis(10);
/// Wait before connecting again to a TCP collector that failed.
const RECONNECT: Duration = Duration::from_secs(1);
/// A worker hands its batch over when it holds this many bytes, even in the middle of a
/// loop iteration.
pub(crate) const WORKER_BATCH_BYTES: usize = 64 << 10;
/// Pooled batches whose buffer grew larger than this are not kept.
const POOL_BATCH_MAX: usize = 4 * WORKER_BATCH_BYTES;
/// Emptied batches kept for the workers to reuse.
const POOL_BATCHES: usize = 64;

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

/// Where and when one captured message went; its bytes are the next `len` bytes of its
/// batch's buffer.
#[derive(Debug, Clone, Copy)]
struct Meta {
    len: usize,
    src: SocketAddr,
    dst: SocketAddr,
    proto: IpProto,
    secs: u32,
    micros: u32,
}

/// Copied messages, back to back, and where each went: what a worker hands to the capture
/// thread at once.
#[derive(Debug, Default)]
struct Records {
    metas: Vec<Meta>,
    bytes: Vec<u8>,
}

impl Records {
    fn clear(&mut self) {
        self.metas.clear();
        self.bytes.clear();
    }

    /// Each message with its metadata, in the order they were added.
    fn iter(&self) -> impl Iterator<Item = (&Meta, &[u8])> {
        let mut at = 0;
        self.metas.iter().map(move |m| {
            let b = &self.bytes[at..at + m.len];
            at += m.len;
            (m, b)
        })
    }
}

/// The workers' shared end: hands each worker a [`Batch`]. Held in the workers' shared
/// state; the capture thread ends once it and every [`Batch`] are dropped and the queue is
/// empty.
#[derive(Debug)]
pub(crate) struct Capture {
    ends: CaptureHandle,
    pub(crate) stats: Arc<CaptureStats>,
}

/// A worker's batch: the messages it captured since it last handed a batch over.
#[derive(Debug)]
pub(crate) struct Batch {
    shared: CaptureHandle,
    records: Records,
    /// The wall-clock time of the worker's loop iteration, in µs since the epoch
    /// ([`Batch::stamp`]).
    now_us: u64,
    /// The last timestamp given to a message.
    last_us: u64,
}

/// The queue's ends a [`Batch`] uses (each worker's batch has a clone).
#[derive(Debug, Clone)]
struct CaptureHandle {
    tx: Sender<Records>,
    /// Emptied batches the capture thread returns.
    pool: Receiver<Records>,
    /// Messages in the queue (the capture thread takes them off when it receives a batch).
    queued: Arc<AtomicUsize>,
    /// The queue's bound, in messages (`[capture] queue`).
    limit: usize,
    /// `sample`'s threshold (see [`sampled_out`]); `u64::MAX`: every call.
    threshold: u64,
    stats: Arc<CaptureStats>,
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

impl Capture {
    /// A batch for one worker.
    pub(crate) fn batch(&self) -> Batch {
        Batch {
            shared: self.ends.clone(),
            records: Records::default(),
            now_us: 0,
            last_us: 0,
        }
    }
}

impl Batch {
    /// Reads the wall clock for the loop iteration that begins (the worker calls this when
    /// its poll returns): the messages of the iteration are stamped from it, not from a
    /// clock read each.
    pub(crate) fn stamp(&mut self) {
        self.now_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
    }

    /// The timestamp of the next message: the iteration's time, at least one microsecond
    /// after the previous message's, so that a worker's messages have distinct timestamps
    /// in the order it received and sent them (a collector that sorts by time shows them in
    /// that order; an iteration's messages run ahead of the clock by at most one
    /// microsecond each).
    fn next_stamp(&mut self) -> (u32, u32) {
        let t = self.now_us.max(self.last_us + 1);
        self.last_us = t;
        ((t / 1_000_000) as u32, (t % 1_000_000) as u32)
    }

    /// Adds a copy of `bytes`, which went from `src` to `dst` over `transport`, to the
    /// batch (handed over at once when it holds [`WORKER_BATCH_BYTES`]); never blocks.
    pub(crate) fn offer(&mut self, bytes: &[u8], src: SocketAddr, dst: SocketAddr, t: Transport) {
        if sampled_out(self.shared.threshold, bytes) {
            self.shared.stats.skipped.fetch_add(1, Relaxed);
            return;
        }
        let proto = match t {
            Transport::Udp => IpProto::Udp,
            Transport::Tcp | Transport::Tls => IpProto::Tcp,
            Transport::Sctp => IpProto::Sctp,
            _ => return,
        };
        if self.now_us == 0 {
            self.stamp();
        }
        let (secs, micros) = self.next_stamp();
        self.records.bytes.extend_from_slice(bytes);
        self.records.metas.push(Meta {
            len: bytes.len(),
            src,
            dst,
            proto,
            secs,
            micros,
        });
        if self.records.bytes.len() >= WORKER_BATCH_BYTES {
            self.flush();
        }
    }

    /// Hands what the batch holds to the capture thread (the worker calls this once per
    /// loop iteration); when the queue cannot take it, its messages are dropped and
    /// counted.
    pub(crate) fn flush(&mut self) {
        let n = self.records.metas.len();
        if n == 0 {
            return;
        }
        let h = &self.shared;
        if h.queued.load(Relaxed) + n > h.limit {
            h.stats.dropped_queue.fetch_add(n as u64, Relaxed);
            self.records.clear();
            return;
        }
        let mut next = h.pool.try_recv().unwrap_or_default();
        next.clear();
        let full = std::mem::replace(&mut self.records, next);
        h.queued.fetch_add(n, Relaxed);
        if let Err(TrySendError::Full(r) | TrySendError::Disconnected(r)) = h.tx.try_send(full) {
            h.queued.fetch_sub(n, Relaxed);
            h.stats.dropped_queue.fetch_add(n as u64, Relaxed);
            // Keep the larger buffer.
            self.records = r;
            self.records.clear();
        }
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.flush();
    }
}

fn recycle(pool: &Sender<Records>, mut r: Records) {
    if r.bytes.capacity() <= POOL_BATCH_MAX {
        r.clear();
        let _ = pool.try_send(r);
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
            buf: Vec::with_capacity(TCP_WRITE + (64 << 10)),
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
    // At least one message per batch: `queue` batches never hold more than `queue`
    // messages, and `queued` keeps the bound in messages.
    let (tx, rx) = crossbeam_channel::bounded(s.queue.max(1));
    let pool = crossbeam_channel::bounded(POOL_BATCHES);
    let stats = Arc::new(CaptureStats::default());
    let queued = Arc::new(AtomicUsize::new(0));
    let mut thread = Thread {
        rx,
        queued: queued.clone(),
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
    let priority = s.priority;
    std::thread::Builder::new()
        .name("holdline-capture".into())
        .spawn(move || {
            if priority == CapturePriority::Background
                && let Err(e) = holdline_io::set_thread_background()
            {
                tracing::warn!(error = %e, "capture: cannot lower the capture thread's priority; it competes with the workers");
            }
            thread.run();
        })
        .map_err(CaptureError::Thread)?;
    tracing::info!(%collector, agent_id = s.agent_id, sample = s.sample, ?priority, "SIP capture (HEP v3) on");
    Ok(Some(Capture {
        ends: CaptureHandle {
            tx,
            pool: pool.1,
            queued,
            limit: s.queue.max(1),
            threshold: threshold_of(s.sample),
            stats: stats.clone(),
        },
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
    rx: Receiver<Records>,
    queued: Arc<AtomicUsize>,
    pool: Sender<Records>,
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
                Ok(records) => {
                    self.queued.fetch_sub(records.metas.len(), Relaxed);
                    for (meta, bytes) in records.iter() {
                        self.add(meta, bytes);
                        if self.batch_full() {
                            self.flush();
                        }
                    }
                    recycle(&self.pool, records);
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

    /// Whether the packets waiting make a whole `sendmmsg` (UDP) or write (TCP).
    fn batch_full(&self) -> bool {
        match &self.sink {
            Sink::Tcp { buf, .. } => buf.len() >= TCP_WRITE,
            Sink::Udp { .. } => self.packets >= BATCH,
        }
    }

    fn add(&mut self, c: &Meta, bytes: &[u8]) {
        if self.filter.wants(bytes) {
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
                payload: bytes,
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

    /// A `Capture` whose queue is never read, and its receiving end.
    fn unread(queue: usize) -> (Capture, Receiver<Records>) {
        let (tx, rx) = crossbeam_channel::bounded(queue);
        let stats = Arc::new(CaptureStats::default());
        let cap = Capture {
            ends: CaptureHandle {
                tx,
                pool: crossbeam_channel::bounded(4).1,
                queued: Arc::new(AtomicUsize::new(0)),
                limit: queue,
                threshold: u64::MAX,
                stats: stats.clone(),
            },
            stats,
        };
        (cap, rx)
    }

    #[test]
    fn a_worker_hands_its_messages_over_in_one_batch() {
        let (cap, rx) = unread(16);
        let mut batch = cap.batch();
        let (a, b): (SocketAddr, SocketAddr) = (
            "127.0.0.1:5060".parse().expect("a"),
            "127.0.0.1:5070".parse().expect("b"),
        );
        batch.offer(b"OPTIONS sip:x SIP/2.0\r\n\r\n", a, b, Transport::Udp);
        batch.offer(b"SIP/2.0 200 OK\r\n\r\n", b, a, Transport::Tls);
        assert!(rx.is_empty(), "nothing handed over before the flush");
        batch.flush();
        batch.flush();
        assert_eq!(rx.len(), 1, "one batch, and an empty flush sends nothing");
        assert_eq!(cap.ends.queued.load(Relaxed), 2);
        let r = rx.try_recv().expect("queued");
        let got: Vec<_> = r
            .iter()
            .map(|(m, bytes)| (m.src, m.dst, m.proto, bytes))
            .collect();
        assert_eq!(
            got,
            [
                (a, b, IpProto::Udp, &b"OPTIONS sip:x SIP/2.0\r\n\r\n"[..]),
                (b, a, IpProto::Tcp, &b"SIP/2.0 200 OK\r\n\r\n"[..]),
            ]
        );
        assert!(r.metas[0].secs > 1_700_000_000, "wall-clock time");
        let us = |m: &Meta| u64::from(m.secs) * 1_000_000 + u64::from(m.micros);
        assert_eq!(us(&r.metas[1]), us(&r.metas[0]) + 1, "in order, distinct");
        // A new iteration's stamp is never before the last message's.
        batch.stamp();
        let (s, m) = batch.next_stamp();
        assert!(u64::from(s) * 1_000_000 + u64::from(m) > us(&r.metas[1]));
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_the_worker_never_waits() {
        // Room for 3 messages: a batch of 2 goes in, the next batch of 2 would not fit.
        let (cap, rx) = unread(3);
        let mut batch = cap.batch();
        let (a, b): (SocketAddr, SocketAddr) = (
            "127.0.0.1:5060".parse().expect("a"),
            "127.0.0.1:5070".parse().expect("b"),
        );
        for _ in 0..3 {
            for _ in 0..2 {
                batch.offer(b"OPTIONS sip:x SIP/2.0\r\n\r\n", a, b, Transport::Udp);
            }
            batch.flush();
        }
        assert_eq!(rx.len(), 1);
        assert_eq!(cap.stats.dropped_queue.load(Relaxed), 4);
        assert_eq!(cap.ends.queued.load(Relaxed), 2);
        // A batch that reaches its size is handed over without waiting for the flush.
        let (cap, rx) = unread(1 << 20);
        let mut batch = cap.batch();
        let big = vec![b'x'; 1000];
        for _ in 0..WORKER_BATCH_BYTES.div_ceil(1000) {
            batch.offer(&big, a, b, Transport::Udp);
        }
        assert_eq!(rx.len(), 1);
        batch.offer(&big, a, b, Transport::Udp);
        drop(batch);
        assert_eq!(
            rx.len(),
            2,
            "a batch dropped (worker exit) hands over the rest"
        );
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
        let mut batch = cap.batch();
        let (a, b): (SocketAddr, SocketAddr) = (
            "127.0.0.1:5060".parse().expect("a"),
            "127.0.0.1:5070".parse().expect("b"),
        );
        let msg = invite("c-1", "alice", "bob");
        batch.offer(&msg, a, b, Transport::Tls);
        batch.flush();
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
        let mut batch = cap.batch();
        for m in &msgs {
            batch.offer(m, a, b, Transport::Udp);
        }
        batch.flush();
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
