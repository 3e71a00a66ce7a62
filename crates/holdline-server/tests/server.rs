//! The server on real loopback sockets, two workers, the test core. Every wait is bounded by
//! a socket timeout or a bounded poll loop; nothing sleeps to synchronise.
#![allow(missing_docs, clippy::unwrap_used)]

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant as StdInstant};

use holdline_base::{Instant, Peer, Transmit, Transport};
use holdline_server::shard::shard_of;
use holdline_server::{Server, ServerConfig, StoreSpec, TestCore, WorkerCore};
use holdline_sip::{Frame, Framer, Limits, Message};

const WAIT: Duration = Duration::from_secs(5);

fn config(workers: usize) -> ServerConfig {
    let mut c = ServerConfig {
        listen: vec![
            "udp:127.0.0.1:0".parse().unwrap(),
            "tcp:127.0.0.1:0".parse().unwrap(),
        ],
        workers,
        store: Some(StoreSpec::Memory),
        metrics: Some("127.0.0.1:0".parse().unwrap()),
        ..ServerConfig::default()
    };
    c.limits.max_connections = 100;
    c
}

fn start(c: &ServerConfig) -> Server {
    Server::start(c, |i| {
        Box::new(TestCore::new(i, Limits::DEFAULT)) as Box<dyn WorkerCore>
    })
    .unwrap()
}

/// A Call-ID owned by `worker` of `n`.
fn call_id_for(worker: usize, n: usize, salt: &str) -> String {
    (0..10_000)
        .map(|i| format!("{salt}-{i}@test"))
        .find(|c| shard_of(c.as_bytes(), n) == worker)
        .unwrap()
}

fn request(call_id: &str, transport: &str) -> Vec<u8> {
    format!(
        "OPTIONS sip:srv@127.0.0.1 SIP/2.0\r\n\
Via: SIP/2.0/{transport} 127.0.0.1:5999;branch=z9hG4bK-{call_id}\r\n\
Max-Forwards: 70\r\n\
To: <sip:srv@127.0.0.1>\r\n\
From: <sip:t@127.0.0.1>;tag=1\r\n\
Call-ID: {call_id}\r\n\
CSeq: 1 OPTIONS\r\n\
Content-Length: 0\r\n\r\n"
    )
    .into_bytes()
}

/// (status, Call-ID, X-Worker) of a response.
fn summary(bytes: &[u8]) -> (u16, String, usize) {
    let m = Message::parse(bytes, &Limits::DEFAULT).unwrap();
    let worker = m
        .headers_named(b"X-Worker")
        .next()
        .map(|h| std::str::from_utf8(m.value(h)).unwrap().parse().unwrap())
        .unwrap();
    (
        m.status().unwrap(),
        String::from_utf8(m.call_id().unwrap().to_vec()).unwrap(),
        worker,
    )
}

fn tcp(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, WAIT).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Reads until `n` messages are framed (or panics at the timeout).
fn read_messages(s: &mut TcpStream, buf: &mut Vec<u8>, n: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut framer = Framer::default();
    let deadline = StdInstant::now() + WAIT;
    loop {
        while let Frame::Message { len } = framer.poll(buf).unwrap() {
            out.push(buf.drain(..len).collect());
        }
        if out.len() >= n {
            return out;
        }
        assert!(
            StdInstant::now() < deadline,
            "timed out waiting for {n} messages"
        );
        let mut chunk = [0; 4096];
        let k = s.read(&mut chunk).unwrap();
        assert!(k > 0, "connection closed");
        buf.extend_from_slice(&chunk[..k]);
    }
}

/// Whether the server closes `s` within the timeout.
fn closed_by_server(s: &mut TcpStream) -> bool {
    let mut b = [0; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

fn metric_sum(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = tcp(addr);
    write!(s, "GET {path} HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

#[test]
fn udp_requests_are_answered_by_their_owner_worker() {
    let server = start(&config(2));
    let addr = server.local_addr(Transport::Udp).unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.set_read_timeout(Some(WAIT)).unwrap();
    let ids = [call_id_for(0, 2, "udp"), call_id_for(1, 2, "udp")];
    for id in &ids {
        client.send_to(&request(id, "UDP"), addr).unwrap();
    }
    let mut seen = Vec::new();
    for _ in 0..2 {
        let mut buf = [0; 65_536];
        let (n, from) = client.recv_from(&mut buf).unwrap();
        assert_eq!(from, addr);
        seen.push(summary(&buf[..n]));
    }
    seen.sort();
    for (status, call_id, worker) in &seen {
        assert_eq!(*status, 200);
        assert_eq!(*worker, shard_of(call_id.as_bytes(), 2), "{call_id}");
    }
    // Every datagram of one client lands on one worker: one of the two was handed off.
    let text = server.metrics_text();
    assert!(
        metric_sum(&text, "holdline_handoffs_out_total") >= 1,
        "{text}"
    );
    assert_eq!(
        metric_sum(&text, "holdline_handoffs_in_total"),
        metric_sum(&text, "holdline_handoffs_out_total")
    );
    assert_eq!(metric_sum(&text, "holdline_testcore_requests_total"), 2);
    let report = server.shutdown();
    assert_eq!(report.workers_joined, 2);
}

/// With `udp_invite_socket`, the kernel steers INVITEs to sockets of their own: every
/// request is still answered by its owner, and exactly the INVITEs came in on those sockets.
#[test]
fn udp_invites_come_in_on_sockets_of_their_own() {
    let mut c = config(2);
    c.overload.udp_invite_socket = Some(true);
    let server = start(&c);
    let addr = server.local_addr(Transport::Udp).unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.set_read_timeout(Some(WAIT)).unwrap();
    let mut sent = Vec::new();
    for (i, method) in ["INVITE", "OPTIONS", "INVITE", "OPTIONS", "INVITE"]
        .iter()
        .enumerate()
    {
        let id = call_id_for(i % 2, 2, &format!("inv{i}"));
        let req = String::from_utf8(request(&id, "UDP"))
            .unwrap()
            .replace("OPTIONS", method);
        client.send_to(req.as_bytes(), addr).unwrap();
        sent.push(id);
    }
    let mut seen = Vec::new();
    for _ in 0..sent.len() {
        let mut buf = [0; 65_536];
        let (n, _) = client.recv_from(&mut buf).unwrap();
        seen.push(summary(&buf[..n]));
    }
    for (status, call_id, worker) in &seen {
        assert_eq!(*status, 200);
        assert_eq!(*worker, shard_of(call_id.as_bytes(), 2), "{call_id}");
    }
    let text = server.metrics_text();
    assert_eq!(
        metric_sum(&text, "holdline_udp_invite_socket_messages_total"),
        3,
        "{text}"
    );
    assert_eq!(metric_sum(&text, "holdline_testcore_requests_total"), 5);
    server.shutdown();
}

/// A source over the flood limit is ignored; another source and trusted sources are not.
#[test]
fn a_flooding_source_is_ignored_and_others_are_served() {
    let flood = |trusted: bool| {
        let mut c = config(1);
        c.flood.limit = 5;
        if !trusted {
            c.trusted.clear();
        }
        let server = start(&c);
        let addr = server.local_addr(Transport::Udp).unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client.set_read_timeout(Some(WAIT)).unwrap();
        for i in 0..10 {
            client
                .send_to(&request(&format!("flood-{i}@test"), "UDP"), addr)
                .unwrap();
        }
        // Another address on loopback, sent after the flood: one worker, one socket, so the
        // flood was handled before its answer comes.
        let other = UdpSocket::bind("127.0.0.2:0").unwrap();
        other.set_read_timeout(Some(WAIT)).unwrap();
        other.send_to(&request("other@test", "UDP"), addr).unwrap();
        let mut buf = [0; 65_536];
        let (n, _) = other.recv_from(&mut buf).unwrap();
        assert_eq!(summary(&buf[..n]).1, "other@test");
        let text = server.metrics_text();
        server.shutdown();
        text
    };
    let text = flood(false);
    assert_eq!(
        metric_sum(&text, "holdline_testcore_requests_total"),
        6,
        "{text}"
    );
    assert_eq!(
        metric_sum(&text, "holdline_drops_total{worker=\"0\",reason=\"flood\"}"),
        5,
        "{text}"
    );
    assert_eq!(metric_sum(&text, "holdline_flood_offenders_total"), 1);
    // Loopback is trusted by default: nothing is dropped.
    let text = flood(true);
    assert_eq!(
        metric_sum(&text, "holdline_testcore_requests_total"),
        11,
        "{text}"
    );
    assert_eq!(metric_sum(&text, "holdline_flood_offenders_total"), 0);
}

#[test]
fn tcp_responses_on_the_same_connection_batched_split_and_ping() {
    let server = start(&config(2));
    let addr = server.local_addr(Transport::Tcp).unwrap();
    let mut s = tcp(addr);
    let mut buf = Vec::new();
    // Two messages in one write, owned by different workers.
    let (a, b) = (call_id_for(0, 2, "tcp"), call_id_for(1, 2, "tcp"));
    let mut both = request(&a, "TCP");
    both.extend_from_slice(&request(&b, "TCP"));
    s.write_all(&both).unwrap();
    let mut got: Vec<_> = read_messages(&mut s, &mut buf, 2)
        .iter()
        .map(|m| summary(m))
        .collect();
    got.sort();
    let mut want = vec![(200, a.clone(), 0), (200, b, 1)];
    want.sort();
    assert_eq!(got, want);
    // One message split across writes.
    let one = request(&call_id_for(1, 2, "split"), "TCP");
    for part in one.chunks(17) {
        s.write_all(part).unwrap();
        s.flush().unwrap();
    }
    let got = read_messages(&mut s, &mut buf, 1);
    assert_eq!(summary(&got[0]).0, 200);
    // CRLFCRLF ping, CRLF pong.
    s.write_all(b"\r\n\r\n").unwrap();
    let mut pong = [0; 2];
    s.read_exact(&mut pong).unwrap();
    assert_eq!(&pong, b"\r\n");
    // Still usable after the ping.
    s.write_all(&request(&a, "TCP")).unwrap();
    assert_eq!(summary(&read_messages(&mut s, &mut buf, 1)[0]).1, a);
    let text = server.metrics_text();
    assert_eq!(metric_sum(&text, "holdline_keepalive_pongs_total"), 1);
    assert_eq!(metric_sum(&text, "holdline_messages_in_total"), 4);
    server.shutdown();
}

#[test]
fn garbage_and_stalls_affect_only_their_connection() {
    let server = start(&config(2));
    let addr = server.local_addr(Transport::Tcp).unwrap();
    let mut stalled = tcp(addr);
    let half = request("half@test", "TCP");
    stalled.write_all(&half[..half.len() / 2]).unwrap();
    let mut bad = tcp(addr);
    bad.write_all(b"GARBAGE sip:x SIP/2.0\r\nVia: x\r\n\r\n")
        .unwrap();
    assert!(closed_by_server(&mut bad), "garbage connection closed");
    let mut good = tcp(addr);
    let mut buf = Vec::new();
    for i in 0..2 {
        let id = call_id_for(i, 2, "good");
        good.write_all(&request(&id, "TCP")).unwrap();
        assert_eq!(summary(&read_messages(&mut good, &mut buf, 1)[0]).1, id);
    }
    // The stalled connection completes later and is answered.
    stalled.write_all(&half[half.len() / 2..]).unwrap();
    let mut sbuf = Vec::new();
    assert_eq!(
        summary(&read_messages(&mut stalled, &mut sbuf, 1)[0]).1,
        "half@test"
    );
    let text = server.metrics_text();
    assert_eq!(
        metric_sum(
            &text,
            "holdline_drops_total{worker=\"0\",reason=\"framing_error\"}"
        ) + metric_sum(
            &text,
            "holdline_drops_total{worker=\"1\",reason=\"framing_error\"}"
        ),
        1
    );
    server.shutdown();
}

#[test]
fn max_connections_enforced() {
    let mut c = config(2);
    c.limits.max_connections = 2;
    let server = start(&c);
    let addr = server.local_addr(Transport::Tcp).unwrap();
    let mut kept = Vec::new();
    for i in 0..2 {
        let mut s = tcp(addr);
        let mut buf = Vec::new();
        s.write_all(&request(&format!("max-{i}@t"), "TCP")).unwrap();
        read_messages(&mut s, &mut buf, 1);
        kept.push(s);
    }
    let mut third = tcp(addr);
    assert!(
        closed_by_server(&mut third),
        "the third connection is closed at once"
    );
    let text = server.metrics_text();
    assert_eq!(
        metric_sum(
            &text,
            "holdline_connections_closed_total{worker=\"0\",reason=\"max_connections\"}"
        ) + metric_sum(
            &text,
            "holdline_connections_closed_total{worker=\"1\",reason=\"max_connections\"}"
        ),
        1
    );
    // Closing one makes room for another.
    drop(kept.pop());
    let deadline = StdInstant::now() + WAIT;
    while metric_sum(&server.metrics_text(), "holdline_connections_open") != 1 {
        assert!(StdInstant::now() < deadline, "close not seen");
    }
    let mut s = tcp(addr);
    let mut buf = Vec::new();
    s.write_all(&request("again@t", "TCP")).unwrap();
    read_messages(&mut s, &mut buf, 1);
    server.shutdown();
}

#[test]
fn idle_connections_are_closed() {
    let mut c = config(1);
    c.limits.idle_timeout_ms = 200;
    let server = start(&c);
    let mut s = tcp(server.local_addr(Transport::Tcp).unwrap());
    let mut buf = Vec::new();
    s.write_all(&request("idle@t", "TCP")).unwrap();
    read_messages(&mut s, &mut buf, 1);
    assert!(closed_by_server(&mut s), "idle connection closed");
    let text = server.metrics_text();
    assert_eq!(
        metric_sum(
            &text,
            "holdline_connections_closed_total{worker=\"0\",reason=\"idle\"}"
        ),
        1
    );
    server.shutdown();
}

#[test]
fn metrics_endpoint_and_shutdown_hook() {
    let mut server = start(&config(2));
    let udp = server.local_addr(Transport::Udp).unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.set_read_timeout(Some(WAIT)).unwrap();
    client.send_to(&request("m@t", "UDP"), udp).unwrap();
    client.send_to(b"\x00\x01 not sip", udp).unwrap();
    let mut buf = [0; 4096];
    client.recv_from(&mut buf).unwrap();
    let maddr = server.metrics_addr().unwrap();
    // Counters are updated before the response leaves; the bad datagram may still be in
    // flight, so poll (bounded) for it.
    let deadline = StdInstant::now() + WAIT;
    let text = loop {
        let text = http_get(maddr, "/metrics");
        // The core's counters and the worker's (messages, processing histogram) are updated
        // at slightly different moments: wait until all of them have seen both datagrams.
        let settled = metric_sum(&text, "holdline_testcore_unparsable_total") == 1
            && metric_sum(&text, "holdline_messages_in_total") == 2
            && metric_sum(&text, "holdline_processing_seconds_count") == 2;
        if settled || StdInstant::now() > deadline {
            break text;
        }
    };
    assert!(text.starts_with("HTTP/1.0 200 OK"), "{text}");
    for needle in [
        "holdline_messages_in_total{worker=\"0\",transport=\"udp\"}",
        "holdline_drops_total{worker=\"1\",reason=\"handoff_full\"} 0",
        "holdline_processing_seconds_bucket{worker=\"0\",le=\"+Inf\"}",
        "holdline_queue_delay_seconds_bucket{worker=\"1\",le=\"0.001000\"}",
        "holdline_invite_queue_delay_seconds_count{worker=\"0\"}",
        "holdline_worker_busy_ratio{worker=\"1\"}",
        "holdline_connections_open{worker=\"0\"} 0",
        "holdline_testcore_requests_total{worker=\"0\"}",
    ] {
        assert!(text.contains(needle), "missing {needle}:\n{text}");
    }
    assert_eq!(metric_sum(&text, "holdline_testcore_requests_total"), 1);
    assert_eq!(metric_sum(&text, "holdline_testcore_unparsable_total"), 1);
    assert_eq!(metric_sum(&text, "holdline_messages_in_total"), 2);
    assert_eq!(metric_sum(&text, "holdline_processing_seconds_count"), 2);
    // Every loop iteration that did work is one observation; the datagrams made some.
    assert!(metric_sum(&text, "holdline_loop_busy_seconds_count") >= 1);
    // Receive timestamps (on Linux) give one queue-delay sample per batch read.
    #[cfg(target_os = "linux")]
    assert!(metric_sum(&text, "holdline_queue_delay_seconds_count") >= 1);
    assert!(http_get(maddr, "/nope").starts_with("HTTP/1.0 404"));
    let flushed = Arc::new(AtomicBool::new(false));
    let f = flushed.clone();
    server.on_shutdown(Box::new(move || f.store(true, Ordering::SeqCst)));
    let t = StdInstant::now();
    let report = server.shutdown();
    assert!(t.elapsed() < Duration::from_secs(3));
    assert_eq!((report.workers_joined, report.workers_panicked), (2, 0));
    assert!(flushed.load(Ordering::SeqCst));
}

/// Forwards every UDP message over TCP to `target` without a connection id.
/// Forwards what it receives over TCP, without a connection, to `target` (which may be set
/// after the start); with `only_udp`, only what came over UDP.
struct ForwardCore {
    target: Arc<std::sync::Mutex<Option<SocketAddr>>>,
    only_udp: bool,
    out: Vec<Vec<u8>>,
}

impl ForwardCore {
    fn new(target: Option<SocketAddr>, only_udp: bool) -> Self {
        Self::shared(Arc::new(std::sync::Mutex::new(target)), only_udp)
    }

    fn shared(target: Arc<std::sync::Mutex<Option<SocketAddr>>>, only_udp: bool) -> Self {
        Self {
            target,
            only_udp,
            out: Vec::new(),
        }
    }
}

impl WorkerCore for ForwardCore {
    fn handle(&mut self, _: Instant, bytes: &[u8], from: Peer) {
        if !self.only_udp || from.transport == Transport::Udp {
            self.out.push(bytes.to_vec());
        }
    }
    fn handle_timeout(&mut self, _: Instant) {}
    fn poll_transmit(&mut self, _: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let target = (*self.target.lock().unwrap())?;
        let b = self.out.pop()?;
        buf.extend_from_slice(&b);
        Some(Transmit {
            destination: Peer {
                addr: target,
                transport: Transport::Tcp,
                conn: None,
            },
            size: b.len(),
        })
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn metrics(&self, _: &mut String) {}
}

#[test]
fn outbound_tcp_uses_one_pooled_connection() {
    let next_hop = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = next_hop.local_addr().unwrap();
    let mut c = config(1);
    c.listen.truncate(1);
    let server = Server::start(&c, move |_| {
        Box::new(ForwardCore::new(Some(target), false)) as Box<dyn WorkerCore>
    })
    .unwrap();
    let udp = server.local_addr(Transport::Udp).unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.send_to(&request("fwd-1@t", "UDP"), udp).unwrap();
    let (mut conn, _) = next_hop.accept().unwrap();
    conn.set_read_timeout(Some(WAIT)).unwrap();
    let mut buf = Vec::new();
    assert_eq!(
        summary_call_id(&read_messages(&mut conn, &mut buf, 1)[0]),
        "fwd-1@t"
    );
    client.send_to(&request("fwd-2@t", "UDP"), udp).unwrap();
    assert_eq!(
        summary_call_id(&read_messages(&mut conn, &mut buf, 1)[0]),
        "fwd-2@t"
    );
    let text = server.metrics_text();
    assert_eq!(metric_sum(&text, "holdline_connections_outbound_total"), 1);
    server.shutdown();
}

fn summary_call_id(bytes: &[u8]) -> String {
    let m = Message::parse(bytes, &Limits::DEFAULT).unwrap();
    String::from_utf8(m.call_id().unwrap().to_vec()).unwrap()
}

#[test]
fn a_second_server_on_the_same_address_is_refused() {
    // The first server binds real ports; a second one asking for the same addresses must
    // fail loudly instead of sharing them through SO_REUSEPORT.
    let first = start(&config(2));
    let mut c = config(2);
    c.listen = first.local_addrs().to_vec();
    c.metrics = None;
    let err = Server::start(&c, |i| {
        Box::new(TestCore::new(i, Limits::DEFAULT)) as Box<dyn WorkerCore>
    })
    .expect_err("the address is taken");
    let text = err.to_string();
    assert!(text.starts_with("cannot listen on"), "{text}");
    assert!(text.contains("in use"), "{text}");
    first.shutdown();
}

#[test]
fn a_message_to_a_peer_that_connected_to_us_goes_over_its_connection() {
    // A softphone registered over TCP: its Contact is the ephemeral port of its connection,
    // where nothing listens. Two workers: the connection and the calls may have different
    // owners.
    let target = Arc::new(std::sync::Mutex::new(None));
    let c = config(2);
    let t = target.clone();
    let server = Server::start(&c, move |_| {
        // Only what comes over UDP is forwarded (not the phone's own keepalive).
        Box::new(ForwardCore::shared(t.clone(), true)) as Box<dyn WorkerCore>
    })
    .unwrap();
    let mut phone = tcp(server.local_addr(Transport::Tcp).unwrap());
    *target.lock().unwrap() = Some(phone.local_addr().unwrap());
    // Make sure the server has accepted the connection before anything is sent to it.
    phone.write_all(b"\r\n\r\n").unwrap();
    let mut buf = Vec::new();
    let mut pong = [0; 2];
    phone.read_exact(&mut pong).unwrap();
    let udp = server.local_addr(Transport::Udp).unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    for w in 0..2 {
        let call_id = call_id_for(w, 2, "reuse");
        client.send_to(&request(&call_id, "UDP"), udp).unwrap();
        let got = read_messages(&mut phone, &mut buf, 1);
        assert_eq!(summary_call_id(&got[0]), call_id, "worker {w}'s message");
    }
    let text = server.metrics_text();
    assert_eq!(metric_sum(&text, "holdline_connections_reused_total"), 2);
    assert_eq!(metric_sum(&text, "holdline_connections_outbound_total"), 0);
    // Once the phone's connection is gone, its address is forgotten: the next message opens
    // a new connection (refused: nothing listens there) instead of using a stale one.
    drop(phone);
    let deadline = StdInstant::now() + WAIT;
    while metric_sum(&server.metrics_text(), "holdline_connections_open") > 0 {
        assert!(StdInstant::now() < deadline, "connection not closed");
        std::thread::yield_now();
    }
    client
        .send_to(&request(&call_id_for(0, 2, "after"), "UDP"), udp)
        .unwrap();
    let deadline = StdInstant::now() + WAIT;
    while metric_sum(
        &server.metrics_text(),
        "holdline_connections_outbound_total",
    ) == 0
    {
        assert!(StdInstant::now() < deadline, "no new connection attempted");
        std::thread::yield_now();
    }
    assert_eq!(
        metric_sum(&server.metrics_text(), "holdline_connections_reused_total"),
        2
    );
    server.shutdown();
}
