//! Per-worker counters (atomics written by their worker only), their Prometheus text, and
//! the `/metrics` HTTP/1.0 responder.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::worker::Shared;

macro_rules! reasons {
    ($name:ident { $($v:ident => $s:literal),* $(,)? }) => {
        /// A reason label.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[allow(missing_docs)]
        pub enum $name { $($v),* }
        impl $name {
            /// Every value, in label order.
            pub const ALL: &'static [Self] = &[$(Self::$v),*];
            /// The label value.
            pub const fn label(self) -> &'static str {
                match self { $(Self::$v => $s),* }
            }
        }
    };
}

reasons!(Drop {
    HandoffFull => "handoff_full",
    TooLarge => "too_large",
    ConnQueueFull => "conn_queue_full",
    ConnGone => "conn_gone",
    UdpSendBlocked => "udp_send_blocked",
    SendError => "send_error",
    FramingError => "framing_error",
    NoListener => "no_listener",
    ConnectFailed => "connect_failed",
    Unsupported => "unsupported_transport",
    Shutdown => "shutdown",
    Flood => "flood",
    AuthThrottle => "auth_failures",
    SctpQueueFull => "sctp_queue_full",
});

reasons!(Close {
    Eof => "eof",
    Error => "error",
    Idle => "idle",
    Stalled => "stalled",
    Framing => "framing_error",
    MaxConnections => "max_connections",
    Shutdown => "shutdown",
    Tls => "tls_error",
});

/// Upper bounds of the latency histograms' buckets, µs.
pub const BUCKETS_US: [u64; 18] = [
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000,
    250_000, 1_000_000,
];

/// A latency histogram with the [`BUCKETS_US`] bounds, written by one worker.
#[derive(Debug, Default)]
pub(crate) struct Histogram {
    counts: [AtomicU64; BUCKETS_US.len() + 1],
    sum_ns: AtomicU64,
}

impl Histogram {
    /// Counts one observation.
    pub(crate) fn record(&self, d: Duration) {
        let us = d.as_micros().min(u128::from(u64::MAX)) as u64;
        let b = BUCKETS_US
            .iter()
            .position(|&le| us <= le)
            .unwrap_or(BUCKETS_US.len());
        self.counts[b].fetch_add(1, Relaxed);
        self.sum_ns
            .fetch_add(d.as_nanos().min(u128::from(u64::MAX)) as u64, Relaxed);
    }

    /// Appends the Prometheus lines of this histogram, `labels` (e.g. `worker="0"`) on each.
    fn render(&self, name: &str, labels: &str, out: &mut String) {
        let counts: Vec<u64> = self.counts.iter().map(|c| c.load(Relaxed)).collect();
        let sum = self.sum_ns.load(Relaxed) as f64 / 1e9;
        holdline_base::render_histogram(out, name, labels, &BUCKETS_US, &counts, sum);
    }
}

/// Picks one of a worker's histograms.
type PickHistogram = fn(&WorkerStats) -> &Histogram;

/// The counters of one worker.
#[derive(Debug, Default)]
pub(crate) struct WorkerStats {
    pub(crate) msgs_in: [AtomicU64; 4],
    pub(crate) msgs_out: [AtomicU64; 4],
    /// SCTP associations (worker 0): `[open, established, setup failures, lost, messages
    /// dropped, T3-rtx timeouts, fast retransmits, bytes queued]` (the last three of the
    /// associations open).
    pub(crate) sctp: [AtomicU64; 11],
    pub(crate) drops: [AtomicU64; Drop::ALL.len()],
    pub(crate) closes: [AtomicU64; Close::ALL.len()],
    /// TLS handshakes by side (server, client) and result (completed, failed):
    /// `[server ok, server failed, client ok, client failed]`.
    pub(crate) tls_handshakes: [AtomicU64; 4],
    pub(crate) handoffs_out: AtomicU64,
    pub(crate) handoffs_in: AtomicU64,
    pub(crate) conns_accepted: AtomicU64,
    pub(crate) conns_outbound: AtomicU64,
    /// Messages sent over a connection the peer opened, found by its address.
    pub(crate) conns_reused: AtomicU64,
    /// Datagrams read from the sockets new INVITEs are steered to (`udp_invite_socket`).
    pub(crate) invite_socket_in: AtomicU64,
    pub(crate) conns_open: AtomicI64,
    pub(crate) pongs: AtomicU64,
    pub(crate) busy_ns: AtomicU64,
    pub(crate) loop_ns: AtomicU64,
    /// Handling one message (parse, transaction, proxy logic, building what it sends).
    pub(crate) processing: Histogram,
    /// Kernel receive to read, for the messages of admitted calls and everything but new
    /// INVITEs on their own sockets (one sample per receive batch or TCP read).
    pub(crate) queue_delay: Histogram,
    /// Kernel receive to read for new INVITEs on their own sockets (one sample per batch).
    pub(crate) invite_queue_delay: Histogram,
    /// The busy part of one event-loop iteration: what everything waiting behind it waits.
    pub(crate) loop_busy: Histogram,
    /// The core's own lines, rendered by the worker on request: their generation, the text,
    /// and when they were rendered.
    pub(crate) core_text: Mutex<(u64, String, Option<std::time::Instant>)>,
    pub(crate) core_ready: Condvar,
    pub(crate) core_wanted: AtomicBool,
    /// The configuration generation the worker runs (a reload waits for every worker's).
    pub(crate) applied_gen: AtomicU64,
    /// Requests in progress at the end of its last loop iteration (see
    /// [`WorkerCore::in_flight`](crate::WorkerCore::in_flight)).
    pub(crate) in_flight: AtomicU64,
    /// When it last ended a loop iteration with requests in progress, ns on the server's
    /// clock (a drain waits until every worker has been idle for `drain_idle_ms`).
    pub(crate) last_active_ns: AtomicU64,
}

/// The counters' index of a transport: UDP 0, TCP 1, TLS 2, SCTP 3.
pub(crate) fn transport_idx(t: holdline_base::Transport) -> usize {
    match t {
        holdline_base::Transport::Tls => 2,
        holdline_base::Transport::Sctp => 3,
        t => usize::from(t.is_stream()),
    }
}

impl WorkerStats {
    pub(crate) fn drop(&self, why: Drop) {
        self.drops[why as usize].fetch_add(1, Relaxed);
    }
    pub(crate) fn close(&self, why: Close) {
        self.closes[why as usize].fetch_add(1, Relaxed);
    }
    pub(crate) fn record_processing(&self, d: Duration) {
        self.processing.record(d);
    }
}

/// Appends `worker="i"` to every sample line of a core's text.
fn label_core_lines(worker: usize, text: &str, out: &mut String) {
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(brace) = line.find('{') {
            let _ = writeln!(
                out,
                "{}{{worker=\"{worker}\",{}",
                &line[..brace],
                &line[brace + 1..]
            );
        } else if let Some(sp) = line.find(' ') {
            let _ = writeln!(out, "{}{{worker=\"{worker}\"}}{}", &line[..sp], &line[sp..]);
        }
    }
}

/// Renders every worker's counters (with a `worker` label) and the cores' lines, asking
/// each worker for fresh core lines and waiting at most `wait` for them.
pub(crate) fn render(shared: &Shared, wait: Duration) -> String {
    let gens: Vec<u64> = shared
        .stats
        .iter()
        .map(|s| s.core_text.lock().map_or(0, |g| g.0))
        .collect();
    for (s, w) in shared.stats.iter().zip(&shared.wakers) {
        s.core_wanted.store(true, Relaxed);
        let _ = w.wake();
    }
    let mut out = String::with_capacity(8192);
    let counter = |out: &mut String, name: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    };
    let each = |out: &mut String, f: &dyn Fn(usize, &WorkerStats, &mut String)| {
        for (i, s) in shared.stats.iter().enumerate() {
            f(i, s, out);
        }
    };
    for (name, help, pick) in [
        (
            "holdline_messages_in_total",
            "Messages received (datagrams and framed stream messages).",
            0,
        ),
        (
            "holdline_messages_out_total",
            "Messages handed to a socket or connection queue.",
            1,
        ),
    ] {
        counter(&mut out, name, help);
        each(&mut out, &|i, s, out| {
            for (t, label) in [(0, "udp"), (1, "tcp"), (2, "tls"), (3, "sctp")] {
                let v = if pick == 0 {
                    &s.msgs_in[t]
                } else {
                    &s.msgs_out[t]
                };
                let _ = writeln!(
                    out,
                    "{name}{{worker=\"{i}\",transport=\"{label}\"}} {}",
                    v.load(Relaxed)
                );
            }
        });
    }
    counter(
        &mut out,
        "holdline_drops_total",
        "Messages dropped, by reason.",
    );
    each(&mut out, &|i, s, out| {
        for d in Drop::ALL {
            let _ = writeln!(
                out,
                "holdline_drops_total{{worker=\"{i}\",reason=\"{}\"}} {}",
                d.label(),
                s.drops[*d as usize].load(Relaxed)
            );
        }
    });
    let _ = writeln!(
        out,
        "# HELP holdline_sctp_associations SCTP associations open (SIP over SCTP over UDP; worker 0 holds them).\n# TYPE holdline_sctp_associations gauge"
    );
    each(&mut out, &|i, s, out| {
        let _ = writeln!(
            out,
            "holdline_sctp_associations{{worker=\"{i}\"}} {}",
            s.sctp[0].load(Relaxed)
        );
    });
    let _ = writeln!(
        out,
        "# HELP holdline_sctp_queued_bytes Bytes waiting in SCTP associations (for their setup, or not yet acknowledged).\n# TYPE holdline_sctp_queued_bytes gauge"
    );
    each(&mut out, &|i, s, out| {
        let _ = writeln!(
            out,
            "holdline_sctp_queued_bytes{{worker=\"{i}\"}} {}",
            s.sctp[7].load(Relaxed)
        );
    });
    for (k, name, help) in [
        (
            1,
            "holdline_sctp_associations_established_total",
            "SCTP associations established.",
        ),
        (
            2,
            "holdline_sctp_association_setup_failures_total",
            "SCTP associations whose setup failed.",
        ),
        (
            3,
            "holdline_sctp_associations_lost_total",
            "Established SCTP associations lost (aborted or timed out).",
        ),
        (
            4,
            "holdline_sctp_messages_dropped_total",
            "SIP messages that waited for an SCTP association that failed.",
        ),
        (
            5,
            "holdline_sctp_t3_timeouts_total",
            "SCTP retransmission timeouts (T3-rtx) of the associations open.",
        ),
        (
            6,
            "holdline_sctp_fast_retransmits_total",
            "SCTP fast retransmissions of the associations open.",
        ),
        (
            8,
            "holdline_sctp_heartbeats_total",
            "SCTP HEARTBEATs sent on idle associations.",
        ),
        (
            9,
            "holdline_sctp_heartbeat_failures_total",
            "SCTP associations declared lost because their peer answered no HEARTBEAT.",
        ),
        (
            10,
            "holdline_sctp_duplicate_tsns_total",
            "DATA chunks the peer reported receiving twice (retransmissions not needed).",
        ),
    ] {
        counter(&mut out, name, help);
        each(&mut out, &|i, s, out| {
            let _ = writeln!(out, "{name}{{worker=\"{i}\"}} {}", s.sctp[k].load(Relaxed));
        });
    }
    counter(
        &mut out,
        "holdline_connections_closed_total",
        "TCP and TLS connections closed, by reason.",
    );
    each(&mut out, &|i, s, out| {
        for c in Close::ALL {
            let _ = writeln!(
                out,
                "holdline_connections_closed_total{{worker=\"{i}\",reason=\"{}\"}} {}",
                c.label(),
                s.closes[*c as usize].load(Relaxed)
            );
        }
    });
    counter(
        &mut out,
        "holdline_tls_handshakes_total",
        "TLS handshakes by side (server: accepted connections, client: connections to next hops) and result (a failed one: bad or unverifiable certificate, protocol error; its connection is closed with reason tls_error).",
    );
    each(&mut out, &|i, s, out| {
        for (k, side, result) in [
            (0, "server", "ok"),
            (1, "server", "failed"),
            (2, "client", "ok"),
            (3, "client", "failed"),
        ] {
            let _ = writeln!(
                out,
                "holdline_tls_handshakes_total{{worker=\"{i}\",side=\"{side}\",result=\"{result}\"}} {}",
                s.tls_handshakes[k].load(Relaxed)
            );
        }
    });
    for (name, help, get) in [
        (
            "holdline_handoffs_out_total",
            "Messages handed to the worker owning their call.",
            (|s: &WorkerStats| s.handoffs_out.load(Relaxed)) as fn(&WorkerStats) -> u64,
        ),
        (
            "holdline_handoffs_in_total",
            "Messages received from other workers.",
            |s| s.handoffs_in.load(Relaxed),
        ),
        (
            "holdline_connections_accepted_total",
            "Inbound TCP connections accepted.",
            |s| s.conns_accepted.load(Relaxed),
        ),
        (
            "holdline_connections_outbound_total",
            "Outbound TCP connections opened.",
            |s| s.conns_outbound.load(Relaxed),
        ),
        (
            "holdline_connections_reused_total",
            "Messages to an address without a connection of their own sent over the connection that peer opened to us (connection reuse).",
            |s| s.conns_reused.load(Relaxed),
        ),
        (
            "holdline_udp_invite_socket_messages_total",
            "Datagrams read from the UDP sockets the kernel steers new INVITEs to (read after every other message; overload.udp_invite_socket).",
            |s| s.invite_socket_in.load(Relaxed),
        ),
        (
            "holdline_keepalive_pongs_total",
            "CRLFCRLF pings answered.",
            |s| s.pongs.load(Relaxed),
        ),
        (
            "holdline_worker_busy_seconds_total",
            "Time spent handling (not waiting in poll).",
            |s| s.busy_ns.load(Relaxed),
        ),
        (
            "holdline_worker_seconds_total",
            "Time in the event loop.",
            |s| s.loop_ns.load(Relaxed),
        ),
    ] {
        counter(&mut out, name, help);
        let secs = name.contains("seconds");
        each(&mut out, &|i, s, out| {
            let v = get(s);
            if secs {
                let _ = writeln!(out, "{name}{{worker=\"{i}\"}} {:.6}", v as f64 / 1e9);
            } else {
                let _ = writeln!(out, "{name}{{worker=\"{i}\"}} {v}");
            }
        });
    }
    counter(
        &mut out,
        "holdline_udp_kernel_drops_total",
        "Datagrams the kernel dropped on the server's UDP sockets because their receive buffer was full (from /proc/net/udp): messages shed before the server read them.",
    );
    for (kind, inodes) in [
        ("shared", &shared.udp_inodes[0]),
        ("invite", &shared.udp_inodes[1]),
    ] {
        if !inodes.is_empty()
            && let Ok(n) = holdline_io::udp::kernel_drops(inodes)
        {
            let _ = writeln!(
                out,
                "holdline_udp_kernel_drops_total{{socket=\"{kind}\"}} {n}"
            );
        }
    }
    if let Some(cap) = &shared.capture {
        let c = &cap.stats;
        counter(
            &mut out,
            "holdline_capture_sent_total",
            "SIP messages sent to the HEP collector ([capture]).",
        );
        let _ = writeln!(out, "holdline_capture_sent_total {}", c.sent.load(Relaxed));
        counter(
            &mut out,
            "holdline_capture_dropped_total",
            "SIP messages not captured: the capture queue was full (queue_full), or the collector's socket did not take them (send).",
        );
        for (reason, n) in [("queue_full", &c.dropped_queue), ("send", &c.dropped_send)] {
            let _ = writeln!(
                out,
                "holdline_capture_dropped_total{{reason=\"{reason}\"}} {}",
                n.load(Relaxed)
            );
        }
        counter(
            &mut out,
            "holdline_capture_skipped_total",
            "SIP messages left out of the capture by its sample, users or call_ids.",
        );
        let _ = writeln!(
            out,
            "holdline_capture_skipped_total {}",
            c.skipped.load(Relaxed)
        );
    }
    let _ = writeln!(
        out,
        "# HELP holdline_connections_open TCP connections open.\n# TYPE holdline_connections_open gauge"
    );
    each(&mut out, &|i, s, out| {
        let _ = writeln!(
            out,
            "holdline_connections_open{{worker=\"{i}\"}} {}",
            s.conns_open.load(Relaxed)
        );
    });
    let _ = writeln!(
        out,
        "# HELP holdline_worker_busy_ratio Busy fraction since start.\n# TYPE holdline_worker_busy_ratio gauge"
    );
    each(&mut out, &|i, s, out| {
        let total = s.loop_ns.load(Relaxed).max(1) as f64;
        let _ = writeln!(
            out,
            "holdline_worker_busy_ratio{{worker=\"{i}\"}} {:.4}",
            s.busy_ns.load(Relaxed) as f64 / total
        );
    });
    if let Some(rss) = resident_memory_bytes() {
        let _ = writeln!(
            out,
            "# HELP process_resident_memory_bytes Resident memory of the server process.\n# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes {rss}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP holdline_build_info The server's version (value 1).\n# TYPE holdline_build_info gauge\nholdline_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    if let Some(d) = &shared.dns {
        d.render(&mut out);
    }
    let histograms: [(&str, &str, PickHistogram); 4] = [
        (
            "holdline_processing_seconds",
            "Time a core takes to handle one message.",
            |s| &s.processing,
        ),
        (
            "holdline_queue_delay_seconds",
            "Kernel receive to read: messages of admitted calls and all but new INVITEs on their own sockets (one sample per receive batch or TCP read).",
            |s| &s.queue_delay,
        ),
        (
            "holdline_invite_queue_delay_seconds",
            "Kernel receive to read: new INVITEs on their own sockets (one sample per receive batch).",
            |s| &s.invite_queue_delay,
        ),
        (
            "holdline_loop_busy_seconds",
            "Busy part of one event-loop iteration (a stall delays everything behind it).",
            |s| &s.loop_busy,
        ),
    ];
    for (name, help, hist) in histograms {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        each(&mut out, &|i, s, out| {
            hist(s).render(name, &format!("worker=\"{i}\""), out);
        });
    }
    let deadline = std::time::Instant::now() + wait;
    let mut ages = Vec::with_capacity(shared.stats.len());
    for (i, (s, g0)) in shared.stats.iter().zip(gens).enumerate() {
        let Ok(mut guard) = s.core_text.lock() else {
            continue;
        };
        while guard.0 == g0 {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            match s.core_ready.wait_timeout(guard, left) {
                Ok((g, _)) => guard = g,
                Err(_) => return out,
            }
        }
        label_core_lines(i, &guard.1, &mut out);
        ages.push((i, guard.2.map(|t| t.elapsed().as_secs_f64())));
    }
    // A worker busy past the wait answers with the lines it rendered last: say how old.
    let _ = writeln!(
        out,
        "# HELP holdline_core_metrics_age_seconds How old each worker's protocol-core lines \
         in this answer are (0 when rendered for it; a worker busy longer than the wait answers \
         with its last lines).\n# TYPE holdline_core_metrics_age_seconds gauge"
    );
    for (i, age) in ages {
        match age {
            Some(a) => {
                let _ = writeln!(
                    out,
                    "holdline_core_metrics_age_seconds{{worker=\"{i}\"}} {a:.3}"
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "holdline_core_metrics_age_seconds{{worker=\"{i}\"}} NaN"
                );
            }
        }
    }
    out
}

/// The process's resident set size, from `VmRSS` in `/proc/self/status` (Linux), bytes.
fn resident_memory_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// The `/metrics` responder thread (and the status page, `/` and `/status.json`).
pub(crate) struct MetricsServer {
    pub(crate) addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    pub(crate) fn start(addr: SocketAddr, shared: Arc<Shared>) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        // The status page's uptime: from the endpoint's start, which is the server's.
        let started = std::time::Instant::now();
        let thread = std::thread::Builder::new()
            .name("holdline-metrics".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop2.load(Relaxed) {
                        break;
                    }
                    let Ok(mut conn) = conn else { continue };
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                    let _ = conn.set_write_timeout(Some(Duration::from_secs(2)));
                    let mut req = [0u8; 2048];
                    let mut n = 0;
                    while n < req.len() {
                        match conn.read(&mut req[n..]) {
                            Ok(0) | Err(_) => break,
                            Ok(k) => n += k,
                        }
                        if req[..n].windows(4).any(|w| w == b"\r\n\r\n") || req[..n].windows(2).any(|w| w == b"\n\n") {
                            break;
                        }
                    }
                    let head = String::from_utf8_lossy(&req[..n]);
                    let path = head.split_whitespace().nth(1).unwrap_or("");
                    let path = path.split_once('?').map_or(path, |(p, _)| p);
                    let ok = |kind: &str, body: &str| {
                        format!("HTTP/1.0 200 OK\r\nContent-Type: {kind}\r\nCache-Control: no-store\r\nContent-Length: {}\r\n\r\n{body}", body.len())
                    };
                    let resp = match (head.starts_with("GET "), path) {
                        (true, "/metrics") => {
                            ok("text/plain; version=0.0.4", &render(&shared, Duration::from_millis(250)))
                        }
                        // The status page and what it polls (crate::status).
                        (true, "/" | "/index.html") => ok("text/html; charset=utf-8", crate::status::PAGE),
                        (true, "/status.json") => {
                            let text = render(&shared, Duration::from_millis(250));
                            let body = crate::status::json(&text, started.elapsed(), shared.stats.len());
                            ok("application/json", &body)
                        }
                        _ => "HTTP/1.0 404 Not Found\r\nContent-Length: 10\r\n\r\nnot found\n".to_owned(),
                    };
                    let _ = conn.write_all(resp.as_bytes());
                }
            })?;
        Ok(Self {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Relaxed);
        // Unblock accept() with one connection of our own.
        let _ = std::net::TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Prometheus lines for a worker's overload controller, names starting with `prefix` (the
/// server adds the `worker` label):
/// the algorithm, its acceptance fraction and load measures, admissions and rejections by
/// reason.
pub(crate) fn render_overload(prefix: &str, s: &holdline_overload::Snapshot, out: &mut String) {
    let _ = writeln!(out, "{prefix}_algorithm{{algorithm=\"{}\"}} 1", s.algorithm);
    let _ = writeln!(
        out,
        "{prefix}_acceptance_ratio {}",
        s.acceptance.unwrap_or(1.0)
    );
    if let Some(rho) = s.occupancy {
        let _ = writeln!(out, "{prefix}_occupancy_ratio {rho}");
    }
    if let Some(d) = s.queue_delay {
        let _ = writeln!(out, "{prefix}_queue_delay_seconds {}", d.as_secs_f64());
    }
    if let Some(n) = s.queue_length {
        let _ = writeln!(out, "{prefix}_queue_length {n}");
    }
    let _ = writeln!(out, "{prefix}_intervals_total {}", s.intervals);
    let _ = writeln!(out, "{prefix}_admitted_total {}", s.admitted);
    for (reason, n) in s.rejected.iter() {
        let _ = writeln!(
            out,
            "{prefix}_rejected_total{{reason=\"{}\"}} {n}",
            reason.as_str()
        );
    }
}

/// At most this many targets of the hop controller get series of their own (per worker):
/// the label set stays bounded whatever the traffic (the controller keeps up to 1,024).
const MAX_TARGET_SERIES: usize = 64;

/// Per-target state of the hop controller (DEOC): `target` is the edge's name from a route's
/// `deoc_target`, or the next hop's address (`127.0.0.1:5060`); named edges first, then the
/// next hops with the most admitted calls, at most [`MAX_TARGET_SERIES`].
pub(crate) fn render_deoc_targets(
    targets: &[holdline_overload::TargetSnapshot],
    names: &std::collections::HashMap<holdline_overload::TargetId, String>,
    out: &mut String,
) {
    for (name, t) in target_rows(targets, names) {
        let l = format!("target=\"{name}\"");
        let _ = writeln!(
            out,
            "holdline_deoc_target_state{{{l},state=\"{}\"}} 1",
            t.state
        );
        if let Some(r) = t.rate {
            let _ = writeln!(out, "holdline_deoc_target_rate{{{l}}} {r}");
        }
        if let Some(a) = t.arrival_rate {
            let _ = writeln!(out, "holdline_deoc_target_arrival_rate{{{l}}} {a}");
        }
        let _ = writeln!(
            out,
            "holdline_deoc_target_admitted_total{{{l}}} {}",
            t.admitted
        );
        let _ = writeln!(
            out,
            "holdline_deoc_target_gapped_total{{{l}}} {}",
            t.restricted
        );
        let _ = writeln!(
            out,
            "holdline_deoc_target_rejections_total{{{l}}} {}",
            t.rejections
        );
        let _ = writeln!(
            out,
            "holdline_deoc_target_timeouts_total{{{l}}} {}",
            t.timeouts
        );
    }
}

/// The targets that get series, with their labels: named edges first, then the most
/// admitted calls, at most [`MAX_TARGET_SERIES`], in label order.
fn target_rows<'a>(
    targets: &'a [holdline_overload::TargetSnapshot],
    names: &std::collections::HashMap<holdline_overload::TargetId, String>,
) -> Vec<(String, &'a holdline_overload::TargetSnapshot)> {
    let mut rows: Vec<(String, bool, &holdline_overload::TargetSnapshot)> = targets
        .iter()
        .map(|t| match names.get(&t.target) {
            Some(n) => (n.clone(), true, t),
            None => (target_label(t.target), false, t),
        })
        .collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.admitted.cmp(&a.2.admitted)));
    rows.truncate(MAX_TARGET_SERIES);
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows.into_iter().map(|(name, _, t)| (name, t)).collect()
}

/// Per-next-hop state of seed 004's window (`feedback = "window"`): the window `W`, the
/// INVITEs outstanding there, the average delay it judges, its cuts, and the new INVITEs it
/// admitted and turned away; at most [`MAX_TARGET_SERIES`] next hops, the busiest.
pub(crate) fn render_window_targets(
    targets: &[holdline_overload::TargetSnapshot],
    out: &mut String,
) {
    for (name, t) in target_rows(targets, &std::collections::HashMap::new()) {
        let l = format!("target=\"{name}\"");
        let _ = writeln!(
            out,
            "holdline_window_target_full{{{l}}} {}",
            u8::from(t.state == holdline_overload::WINDOW_FULL)
        );
        if let Some(w) = t.window {
            let _ = writeln!(out, "holdline_window_target_window{{{l}}} {w}");
        }
        if let Some(n) = t.outstanding {
            let _ = writeln!(out, "holdline_window_target_outstanding{{{l}}} {n}");
        }
        if let Some(d) = t.delay {
            let _ = writeln!(out, "holdline_window_target_delay_seconds{{{l}}} {d:.6}");
        }
        let _ = writeln!(
            out,
            "holdline_window_target_cuts_total{{{l}}} {}\n\
             holdline_window_target_admitted_total{{{l}}} {}\n\
             holdline_window_target_rejected_total{{{l}}} {}",
            t.cuts, t.admitted, t.restricted
        );
    }
}

/// A next hop's label from its number (`worker::target_of`): `IP:PORT` for IPv4, an egress
/// edge learned from a Record-Route `edge:IP:PORT`, else the number in hex.
fn target_label(t: holdline_overload::TargetId) -> String {
    if t.0 >> 48 == 0 {
        let ip = std::net::Ipv4Addr::from((t.0 >> 16) as u32);
        format!("{ip}:{}", t.0 & 0xffff)
    } else if let Some(a) = (t.0 >> 63 == 1)
        .then(|| holdline_proto::EdgeId(t.0).address())
        .flatten()
    {
        // An egress edge learned from a Record-Route (`[overload.deoc] target`).
        format!("edge:{a}")
    } else {
        format!("{:016x}", t.0)
    }
}

/// The deferral of new INVITEs read over TCP (`overload.defer_new_invites`).
pub(crate) fn render_defer(
    waiting: usize,
    open: usize,
    s: &holdline_overload::DeferStats,
    out: &mut String,
) {
    let _ = writeln!(
        out,
        "holdline_overload_deferred_invites {waiting}\n\
         holdline_overload_deferred_invites_max {}\n\
         holdline_overload_deferred_invites_total {}\n\
         holdline_overload_deferred_released_total{{outcome=\"handled\"}} {}\n\
         holdline_overload_deferred_released_total{{outcome=\"rejected\"}} {}\n\
         holdline_overload_deferred_wait_seconds_total {:.6}\n\
         holdline_overload_deferred_polls_total {}\n\
         holdline_overload_deferred_open_connections {open}",
        s.max_len,
        s.deferred,
        s.admitted,
        s.rejected,
        s.wait.as_secs_f64(),
        s.opened,
    );
}

/// The rejection budget's lines (workers with INVITE sockets of their own).
pub(crate) fn render_budget(b: &holdline_overload::RejectionBudget, out: &mut String) {
    let _ = writeln!(
        out,
        "holdline_overload_rejection_seconds_total {:.6}\n\
         holdline_overload_rejection_budget_pauses_total {}",
        b.total().as_secs_f64(),
        b.pauses()
    );
}
