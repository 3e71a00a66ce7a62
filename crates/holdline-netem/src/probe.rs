//! Measuring an emulated link from its ends: UDP probes sent from namespace A to namespace
//! B at a fixed rate, each carrying its sequence number and its send instant on a clock the
//! receiver shares (one process, one monotonic clock), so that the one-way delay of every
//! probe is measured, not estimated from round trips.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::mpsc;
use std::time::Duration;

use crate::emulator::DEVICE;
use crate::emulator::{Clock, Topology};
use crate::error::{NetemError, Result};
use crate::host::HostDrops;
use crate::netns;

/// The UDP port probes are sent to.
pub const PROBE_PORT: u16 = 9_077;

/// How a measurement sends.
#[derive(Clone, Copy, Debug)]
pub struct ProbeConfig {
    /// Probes per second.
    pub rate: f64,
    /// Probes sent in all.
    pub count: u64,
    /// UDP payload bytes per probe (at least 16).
    pub size: usize,
    /// How long the receiver keeps listening after the last probe was sent.
    pub drain: Duration,
}

/// What the receiver saw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProbeReport {
    /// Probes sent.
    pub sent: u64,
    /// Distinct probes received.
    pub received: u64,
    /// Probes received after a probe with a higher sequence number.
    pub reordered: u64,
    /// One-way delays of the received probes, ns, sorted.
    pub delays_ns: Vec<u64>,
    /// Seconds from the first probe sent to the last one sent.
    pub send_span_s: f64,
    /// Seconds from the first probe received to the last one received.
    pub receive_span_s: f64,
    /// Sequence numbers of the probes that did not arrive, ascending.
    pub lost_seqs: Vec<u64>,
    /// What the host's kernels dropped in both namespaces during the measurement (not the
    /// link's doing: a sender's device queue or the receiver's socket buffer was full).
    pub host: HostDrops,
}

impl ProbeReport {
    /// The link's loss as seen end to end: the fraction of probes that did not arrive, less
    /// those the host's kernels dropped (`host`), which are the machine's, not the link's.
    pub fn loss(&self) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            self.link_missing() as f64 / self.sent as f64
        }
    }

    /// Probes that did not arrive and that the host did not drop: the link's.
    pub fn link_missing(&self) -> u64 {
        self.sent
            .saturating_sub(self.received)
            .saturating_sub(self.host.total())
    }

    /// Mean one-way delay, ms.
    pub fn mean_ms(&self) -> f64 {
        if self.delays_ns.is_empty() {
            return 0.0;
        }
        self.delays_ns.iter().map(|&d| d as f64).sum::<f64>() / self.delays_ns.len() as f64 / 1e6
    }

    /// The `q` quantile (0 to 1) of the one-way delay, ms.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.delays_ns.is_empty() {
            return 0.0;
        }
        let i = ((self.delays_ns.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
        self.delays_ns[i] as f64 / 1e6
    }

    /// Lag-1 autocorrelation of the loss indicator over the probes sent (0 for independent
    /// losses; what `--correlation` asks for).
    pub fn loss_autocorrelation(&self) -> f64 {
        let n = self.sent;
        if n < 2 || self.lost_seqs.is_empty() {
            return 0.0;
        }
        let m = self.lost_seqs.len() as f64 / n as f64;
        if m >= 1.0 {
            return 0.0;
        }
        // Pairs (i, i+1) both lost.
        let both = self
            .lost_seqs
            .windows(2)
            .filter(|w| w[1] == w[0] + 1)
            .count() as f64;
        let joint = both / (n - 1) as f64;
        (joint - m * m) / (m - m * m)
    }

    /// Throughput at the receiver, bits per second of UDP payload plus 28 bytes of IPv4 and
    /// UDP headers per probe.
    pub fn received_bps(&self, size: usize) -> f64 {
        if self.receive_span_s <= 0.0 || self.received < 2 {
            return 0.0;
        }
        (self.received - 1) as f64 * (size + 28) as f64 * 8.0 / self.receive_span_s
    }
}

/// Sends `config.count` probes from side A to side B through the emulator and reports what
/// arrived. Bounded: the sender stops after its count, the receiver `drain` after that.
pub fn measure(topology: &Topology, config: &ProbeConfig, clock: Clock) -> Result<ProbeReport> {
    let size = config.size.max(16);
    let dst = SocketAddr::from((topology.addr_b, PROBE_PORT));
    let (ready_tx, ready_rx) = mpsc::channel::<std::io::Result<()>>();
    let (done_tx, done_rx) = mpsc::channel::<(u64, f64)>();
    let ns_b = topology.ns_b.clone();
    let drain = config.drain;
    let before = host_drops(topology)?;
    let receiver = std::thread::spawn(move || -> std::io::Result<ProbeReport> {
        netns::enter(&ns_b)?;
        let sock = match UdpSocket::bind(dst) {
            Ok(s) => s,
            Err(e) => {
                let _ = ready_tx.send(Err(std::io::Error::new(e.kind(), e.to_string())));
                return Err(e);
            }
        };
        sock.set_read_timeout(Some(Duration::from_millis(20)))?;
        // Room for a second of probes: a receiver descheduled for a moment on a busy host
        // must not read as a lossy link (what it still drops is counted in `host`).
        force_recv_buffer(&sock, RECEIVE_BUFFER);
        let _ = ready_tx.send(Ok(()));
        receive(&sock, &done_rx, drain, clock)
    });
    match ready_rx.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            let _ = receiver.join();
            return Err(NetemError::io(format!("bind the probe receiver {dst}"), e));
        }
        Err(_) => {
            return Err(receiver_failed(receiver));
        }
    }
    let ns_a = topology.ns_a.clone();
    let src = topology.addr_a;
    let rate = config.rate;
    let count = config.count;
    let sender = std::thread::spawn(move || -> std::io::Result<(u64, f64)> {
        netns::enter(&ns_a)?;
        send(src, dst, rate, count, size, clock)
    });
    let sent = sender
        .join()
        .map_err(|_| NetemError::io("probe sender", std::io::Error::other("panicked")))?
        .map_err(|e| NetemError::io("send probes", e))?;
    let _ = done_tx.send(sent);
    let mut report = match receiver.join() {
        Ok(r) => r.map_err(|e| NetemError::io("receive probes", e))?,
        Err(_) => {
            return Err(NetemError::io(
                "probe receiver",
                std::io::Error::other("panicked"),
            ));
        }
    };
    report.host = host_drops(topology)?.since(&before);
    Ok(report)
}

/// The receive buffer asked for the probe socket, bytes.
const RECEIVE_BUFFER: usize = 8 << 20;

/// The drop counters of both namespaces, summed.
fn host_drops(topology: &Topology) -> Result<HostDrops> {
    let a = HostDrops::read(&topology.ns_a, DEVICE)?;
    Ok(a.plus(&HostDrops::read(&topology.ns_b, DEVICE)?))
}

/// Sets the receive buffer to `bytes`, past `net.core.rmem_max` when the process may
/// (`SO_RCVBUFFORCE`, root), else as far as the limit allows. Best effort: a smaller buffer
/// only makes host drops likelier, and those are counted.
#[allow(unsafe_code)]
fn force_recv_buffer(sock: &UdpSocket, bytes: usize) {
    use std::os::fd::AsRawFd;
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: setsockopt(2) with a pointer to a live c_int and its size, on an open
        // socket this function borrows.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            return;
        }
    }
}

fn receiver_failed(h: std::thread::JoinHandle<std::io::Result<ProbeReport>>) -> NetemError {
    match h.join() {
        Ok(Err(e)) => NetemError::io("start the probe receiver", e),
        _ => NetemError::io("probe receiver", std::io::Error::other("stopped")),
    }
}

/// Sends `count` probes at `rate` per second on a fixed schedule (a late probe does not
/// push the later ones back). Returns how many were sent and the span in seconds.
fn send(
    src: Ipv4Addr,
    dst: SocketAddr,
    rate: f64,
    count: u64,
    size: usize,
    clock: Clock,
) -> std::io::Result<(u64, f64)> {
    let sock = UdpSocket::bind(SocketAddr::from((src, 0)))?;
    let mut buf = vec![0u8; size];
    let interval_ns = (1e9 / rate.max(0.001)) as u64;
    let start = clock.now().as_nanos();
    let mut sent = 0;
    let mut last = start;
    for seq in 0..count {
        let due = start + seq * interval_ns;
        loop {
            let now = clock.now().as_nanos();
            if now >= due {
                break;
            }
            std::thread::sleep(Duration::from_nanos(due - now));
        }
        let now = clock.now().as_nanos();
        buf[..8].copy_from_slice(&seq.to_be_bytes());
        buf[8..16].copy_from_slice(&now.to_be_bytes());
        // A full socket buffer loses the probe here, not on the link: count only what left.
        if sock.send_to(&buf, dst).is_ok() {
            sent += 1;
        }
        last = now;
    }
    Ok((sent, (last - start) as f64 / 1e9))
}

fn receive(
    sock: &UdpSocket,
    done: &mpsc::Receiver<(u64, f64)>,
    drain: Duration,
    clock: Clock,
) -> std::io::Result<ProbeReport> {
    let mut seen = std::collections::HashSet::new();
    let mut report = ProbeReport::default();
    let mut highest: Option<u64> = None;
    let mut first_rx: Option<u64> = None;
    let mut last_rx = 0;
    let mut deadline: Option<u64> = None;
    let mut buf = [0u8; 2048];
    loop {
        if deadline.is_none()
            && let Ok((sent, span)) = done.try_recv()
        {
            report.sent = sent;
            report.send_span_s = span;
            deadline = Some(clock.now().as_nanos() + drain.as_nanos() as u64);
        }
        if let Some(d) = deadline
            && clock.now().as_nanos() >= d
        {
            break;
        }
        let n = match sock.recv(&mut buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) => return Err(e),
        };
        let now = clock.now().as_nanos();
        if n < 16 {
            continue;
        }
        let seq = u64::from_be_bytes(buf[..8].try_into().unwrap_or([0; 8]));
        let sent_at = u64::from_be_bytes(buf[8..16].try_into().unwrap_or([0; 8]));
        if !seen.insert(seq) {
            continue;
        }
        if highest.is_some_and(|h| seq < h) {
            report.reordered += 1;
        }
        highest = Some(highest.map_or(seq, |h| h.max(seq)));
        report.delays_ns.push(now.saturating_sub(sent_at));
        first_rx.get_or_insert(now);
        last_rx = now;
    }
    report.received = seen.len() as u64;
    report.lost_seqs = (0..report.sent).filter(|s| !seen.contains(s)).collect();
    report.receive_span_s = first_rx.map_or(0.0, |f| (last_rx - f) as f64 / 1e9);
    report.delays_ns.sort_unstable();
    Ok(report)
}
