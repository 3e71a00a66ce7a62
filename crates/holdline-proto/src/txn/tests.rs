//! Deterministic tests of the transaction layer: two tables exchanging messages through an
//! in-memory network, time jumping to the next wake-up (quinn-proto's `Pair` is the model).

use std::net::SocketAddr;

use holdline_base::{ConnId, Duration, Instant, Peer, Transport};
use holdline_sip::{HeaderName, Limits, Message};

use super::*;

// ---------------------------------------------------------------- message builders

const CALL_ID: &str = "a84b4c76e66710@pc33.atlanta.example.com";

/// A request from the client side (10.0.0.1) with two Route headers.
fn request(method: &str, branch: &str, cseq: u32, transport: Transport) -> Vec<u8> {
    request_full(
        method,
        Some(branch),
        cseq,
        method,
        None,
        transport,
        "10.0.0.1:5060",
    )
}

fn request_full(
    method: &str,
    branch: Option<&str>,
    cseq: u32,
    cseq_method: &str,
    to_tag: Option<&str>,
    transport: Transport,
    sent_by: &str,
) -> Vec<u8> {
    let branch = branch.map(|b| format!(";branch={b}")).unwrap_or_default();
    let to_tag = to_tag.map(|t| format!(";tag={t}")).unwrap_or_default();
    let body = if method == "INVITE" { "v=0\r\n" } else { "" };
    format!(
        "{method} sip:bob@biloxi.example.com SIP/2.0\r\n\
         Via: SIP/2.0/{t} {sent_by}{branch}\r\n\
         Route: <sip:p1.example.com;lr>\r\n\
         Route: <sip:p2.example.com;lr>, <sip:p3.example.com;lr>\r\n\
         Max-Forwards: 69\r\n\
         From: Alice <sip:alice@atlanta.example.com>;tag=1928301774\r\n\
         To: Bob <sip:bob@biloxi.example.com>{to_tag}\r\n\
         Call-ID: {CALL_ID}\r\n\
         CSeq: {cseq} {cseq_method}\r\n\
         Contact: <sip:alice@10.0.0.1>\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len(),
        t = transport.as_via_str(),
    )
    .into_bytes()
}

/// A response to `req`: its Vias, From, To (with `to_tag` added), Call-ID and CSeq.
fn response(req: &[u8], status: u16, to_tag: Option<&str>) -> Vec<u8> {
    let msg = Message::parse(req, &Limits::DEFAULT).expect("test request parses");
    let mut out = format!("SIP/2.0 {status} Whatever\r\n").into_bytes();
    for h in msg.headers() {
        let keep = matches!(
            h.kind,
            HeaderName::Via | HeaderName::From | HeaderName::CallId | HeaderName::CSeq
        );
        if keep {
            out.extend_from_slice(msg.slice(h.line_span()));
        } else if h.kind == HeaderName::To {
            out.extend_from_slice(b"To: ");
            out.extend_from_slice(msg.value(h));
            if let Some(tag) = to_tag {
                out.extend_from_slice(format!(";tag={tag}").as_bytes());
            }
            out.extend_from_slice(b"\r\n");
        }
    }
    out.extend_from_slice(b"Content-Length: 0\r\n\r\n");
    out
}

fn status_of(bytes: &[u8]) -> u16 {
    Message::parse(bytes, &Limits::DEFAULT)
        .ok()
        .and_then(|m| m.status())
        .unwrap_or(0)
}

fn method_of(bytes: &[u8]) -> String {
    Message::parse(bytes, &Limits::DEFAULT)
        .ok()
        .and_then(|m| m.method())
        .map(|m| m.to_string())
        .unwrap_or_default()
}

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

fn addr(last: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, last], 5060))
}

fn peer(last: u8, transport: Transport) -> Peer {
    Peer {
        addr: addr(last),
        transport,
        conn: transport.is_stream().then_some(ConnId(u64::from(last))),
    }
}

// ---------------------------------------------------------------- the harness

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Client,
    Server,
}

#[derive(Clone, Debug)]
struct Wire {
    at: Instant,
    from: Side,
    bytes: Vec<u8>,
}

/// One table and what happened at it.
struct Node {
    txns: Transactions,
    me: u8,
    requests: Vec<(Instant, RequestOutcome, Vec<u8>)>,
    responses: Vec<(Instant, ResponseOutcome, u16)>,
    events: Vec<(Instant, TxnEvent)>,
}

impl Node {
    fn new(config: TxnConfig, me: u8) -> Self {
        Self {
            txns: Transactions::new(config),
            me,
            requests: Vec::new(),
            responses: Vec::new(),
            events: Vec::new(),
        }
    }

    /// The id of the last server transaction created here.
    fn last_new(&self) -> ServerTxnId {
        self.requests
            .iter()
            .rev()
            .find_map(|(_, o, _)| match o {
                RequestOutcome::New(id) => Some(*id),
                _ => None,
            })
            .expect("a New request")
    }
}

/// Two tables (a client at 10.0.0.1, a server at 10.0.0.2) joined by a network with a fixed
/// latency that can drop messages; every message sent is captured in `sent`.
struct Pair {
    now: Instant,
    transport: Transport,
    latency: Duration,
    client: Node,
    server: Node,
    in_flight: Vec<Wire>,
    sent: Vec<Wire>,
    drop: Box<dyn FnMut(&Wire) -> bool>,
    steps: usize,
}

const MAX_STEPS: usize = 10_000;

impl Pair {
    fn new(transport: Transport) -> Self {
        Self::with_config(transport, TxnConfig::default())
    }

    fn with_config(transport: Transport, config: TxnConfig) -> Self {
        Self {
            now: Instant::ZERO,
            transport,
            latency: Duration::from_millis(10),
            client: Node::new(config, 1),
            server: Node::new(config, 2),
            in_flight: Vec::new(),
            sent: Vec::new(),
            drop: Box::new(|_| false),
            steps: 0,
        }
    }

    fn node(&mut self, side: Side) -> &mut Node {
        match side {
            Side::Client => &mut self.client,
            Side::Server => &mut self.server,
        }
    }

    /// Client sends `req` to the server.
    fn send(&mut self, req: Vec<u8>) -> ClientTxnId {
        let to = peer(2, self.transport);
        let id = self
            .client
            .txns
            .send_request(self.now, req, to)
            .expect("send_request");
        self.flush();
        id
    }

    /// Server answers `id`.
    fn respond(&mut self, id: ServerTxnId, resp: Vec<u8>) {
        let now = self.now;
        self.server.txns.respond(now, id, resp).expect("respond");
        self.flush();
    }

    /// Moves every queued transmit onto the network and every event into the node's log.
    fn flush(&mut self) {
        let now = self.now;
        for side in [Side::Client, Side::Server] {
            loop {
                let node = self.node(side);
                let mut buf = b"junk-before".to_vec();
                let Some(t) = node.txns.poll_transmit(now, &mut buf) else {
                    break;
                };
                let bytes = buf.split_off(11);
                assert_eq!(t.size, bytes.len(), "Transmit.size is the appended length");
                let other = if node.me == 1 { 2 } else { 1 };
                assert_eq!(t.destination.addr, addr(other));
                let w = Wire {
                    at: now,
                    from: side,
                    bytes,
                };
                self.sent.push(w.clone());
                if !(self.drop)(&w) {
                    self.in_flight.push(Wire {
                        at: now + self.latency,
                        ..w
                    });
                }
            }
            let node = self.node(side);
            while let Some(e) = node.txns.poll_event() {
                node.events.push((now, e));
            }
        }
    }

    fn next_wake(&self) -> Option<Instant> {
        let net = self.in_flight.iter().map(|w| w.at).min();
        [
            net,
            self.client.txns.poll_timeout(),
            self.server.txns.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Jumps to the next wake-up and processes it; `false` when nothing is pending.
    fn step(&mut self) -> bool {
        self.flush();
        let Some(next) = self.next_wake() else {
            return false;
        };
        self.steps += 1;
        assert!(self.steps < MAX_STEPS, "livelock guard: {MAX_STEPS} steps");
        self.now = self.now.max(next);
        let now = self.now;
        let (due, later): (Vec<Wire>, Vec<Wire>) = std::mem::take(&mut self.in_flight)
            .into_iter()
            .partition(|w| w.at <= now);
        self.in_flight = later;
        for w in due {
            let (to, from_addr) = match w.from {
                Side::Client => (Side::Server, 1),
                Side::Server => (Side::Client, 2),
            };
            let from = peer(from_addr, self.transport);
            let node = self.node(to);
            if w.bytes.starts_with(b"SIP/2.0 ") {
                let o = node.txns.handle_response(now, &w.bytes, from);
                node.responses.push((now, o, status_of(&w.bytes)));
            } else {
                let o = node.txns.handle_request(now, &w.bytes, from);
                node.requests.push((now, o, w.bytes));
            }
        }
        self.client.txns.handle_timeout(now);
        self.server.txns.handle_timeout(now);
        self.flush();
        true
    }

    /// Runs until nothing is pending.
    fn run(&mut self) {
        while self.step() {}
    }

    /// Runs every wake-up up to and including `t`, then sets the clock to `t`.
    fn run_until(&mut self, t: Instant) {
        self.flush();
        while self.next_wake().is_some_and(|w| w <= t) {
            self.step();
        }
        self.now = self.now.max(t);
    }

    /// Send times of messages from `side` whose first line starts with `prefix`.
    fn times(&self, side: Side, prefix: &str) -> Vec<Instant> {
        self.sent
            .iter()
            .filter(|w| w.from == side && w.bytes.starts_with(prefix.as_bytes()))
            .map(|w| w.at)
            .collect()
    }
}

fn secs(list: &[f64]) -> Vec<Instant> {
    list.iter()
        .map(|s| Instant::from_nanos((s * 1e9).round() as u64))
        .collect()
}

// ---------------------------------------------------------------- client transactions

#[test]
fn invite_client_udp_retransmits_with_doubling_until_timer_b() {
    let mut p = Pair::new(Transport::Udp);
    p.drop = Box::new(|_| true);
    let id = p.send(request("INVITE", "z9hG4bKinv1", 1, Transport::Udp));
    assert_eq!(p.client.txns.client_state(id), Some(ClientState::Calling));
    p.run();
    // Timer A: 0.5, 1, 2, 4, 8, 16 s between sends; Timer B at 64·T1 = 32 s.
    assert_eq!(
        p.times(Side::Client, "INVITE"),
        secs(&[0.0, 0.5, 1.5, 3.5, 7.5, 15.5, 31.5])
    );
    assert_eq!(
        p.client.events,
        vec![
            (ms(32_000), TxnEvent::ClientTimeout(id)),
            (ms(32_000), TxnEvent::Terminated(TxnId::Client(id))),
        ]
    );
    assert!(p.client.txns.is_empty());
    assert_eq!(p.client.txns.poll_timeout(), None);
}

#[test]
fn invite_client_tcp_does_not_retransmit() {
    let mut p = Pair::new(Transport::Tcp);
    p.drop = Box::new(|_| true);
    let id = p.send(request("INVITE", "z9hG4bKinv1", 1, Transport::Tcp));
    p.run();
    assert_eq!(p.times(Side::Client, "INVITE"), secs(&[0.0]));
    assert_eq!(
        p.client.events[0],
        (ms(32_000), TxnEvent::ClientTimeout(id))
    );
}

#[test]
fn non_invite_client_timer_e_doubles_caps_at_t2_and_f_times_out() {
    let mut p = Pair::new(Transport::Udp);
    p.drop = Box::new(|_| true);
    let id = p.send(request("OPTIONS", "z9hG4bKopt1", 1, Transport::Udp));
    assert_eq!(p.client.txns.client_state(id), Some(ClientState::Trying));
    p.run();
    assert_eq!(
        p.times(Side::Client, "OPTIONS"),
        secs(&[0.0, 0.5, 1.5, 3.5, 7.5, 11.5, 15.5, 19.5, 23.5, 27.5, 31.5])
    );
    assert_eq!(
        p.client.events[0],
        (ms(32_000), TxnEvent::ClientTimeout(id))
    );
}

#[test]
fn non_invite_client_timer_e_is_t2_in_proceeding_and_k_ends_it() {
    let mut p = Pair::new(Transport::Udp);
    let req = request("REGISTER", "z9hG4bKreg1", 7, Transport::Udp);
    let id = p.send(req.clone());
    p.run_until(ms(10));
    let sid = p.server.last_new();
    assert_eq!(p.server.txns.server_state(sid), Some(ServerState::Trying));
    p.respond(sid, response(&req, 100, None));
    p.run_until(ms(2_000));
    assert_eq!(
        p.client.txns.client_state(id),
        Some(ClientState::Proceeding)
    );
    // Sends at 0 and 0.5 (E fired in Trying); from then on every T2 = 4 s.
    p.run_until(ms(9_000));
    assert_eq!(
        p.times(Side::Client, "REGISTER"),
        secs(&[0.0, 0.5, 4.5, 8.5])
    );
    // Each retransmission made the server resend its 100.
    assert_eq!(p.times(Side::Server, "SIP/2.0 100").len(), 4);
    p.respond(sid, response(&req, 200, Some("srv")));
    p.run_until(ms(9_010));
    assert_eq!(p.client.txns.client_state(id), Some(ClientState::Completed));
    // Timer K = T4 = 5 s; Timer J = 64·T1 on the server.
    p.run_until(ms(14_010));
    assert_eq!(p.client.txns.client_state(id), None);
    assert_eq!(p.client.events.last().map(|e| e.0), Some(ms(14_010)));
    p.run();
    assert_eq!(p.server.txns.server_state(sid), None);
    assert_eq!(
        p.server.events.last().map(|e| e.0),
        Some(ms(9_000 + 32_000))
    );
}

#[test]
fn non_invite_over_tcp_ends_at_once_on_final() {
    let mut p = Pair::new(Transport::Tcp);
    let req = request("OPTIONS", "z9hG4bKopt2", 1, Transport::Tcp);
    let id = p.send(req.clone());
    p.run_until(ms(10));
    let sid = p.server.last_new();
    p.respond(sid, response(&req, 200, Some("x")));
    // Timer J is zero over TCP, yet the response was still sent.
    assert_eq!(p.server.txns.server_state(sid), None);
    p.run_until(ms(20));
    assert_eq!(
        p.client.responses,
        vec![(ms(20), ResponseOutcome::ForTu(id), 200)]
    );
    // Timer K is zero too.
    assert_eq!(p.client.txns.client_state(id), None);
    assert_eq!(p.times(Side::Client, "OPTIONS").len(), 1);
}

#[test]
fn invite_client_builds_the_ack_for_a_non_2xx() {
    let mut t = Transactions::new(TxnConfig::default());
    let now = Instant::ZERO;
    let invite = request("INVITE", "z9hG4bKack1", 314_159, Transport::Udp);
    let id = t
        .send_request(now, invite.clone(), peer(2, Transport::Udp))
        .expect("send");
    let mut buf = Vec::new();
    let tx = t.poll_transmit(now, &mut buf).expect("the INVITE");
    assert_eq!(buf, invite);
    assert_eq!(tx.destination, peer(2, Transport::Udp));
    buf.clear();
    // A response with a second Via (as from a proxy chain's view) and a To tag.
    let mut resp = response(&invite, 486, Some("8321234356"));
    let at = resp
        .windows(5)
        .position(|w| w == b"From:")
        .expect("From in response");
    resp.splice(
        at..at,
        b"Via: SIP/2.0/UDP 10.9.9.9;branch=z9hG4bKother\r\n".to_vec(),
    );
    assert_eq!(
        t.handle_response(ms(100), &resp, peer(2, Transport::Udp)),
        ResponseOutcome::ForTu(id)
    );
    assert_eq!(t.client_state(id), Some(ClientState::Completed));
    assert!(t.poll_transmit(ms(100), &mut buf).is_some());
    let expected = "ACK sip:bob@biloxi.example.com SIP/2.0\r\n\
                    Via: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bKack1\r\n\
                    Route: <sip:p1.example.com;lr>\r\n\
                    Route: <sip:p2.example.com;lr>, <sip:p3.example.com;lr>\r\n\
                    From: Alice <sip:alice@atlanta.example.com>;tag=1928301774\r\n\
                    To: Bob <sip:bob@biloxi.example.com>;tag=8321234356\r\n\
                    Call-ID: a84b4c76e66710@pc33.atlanta.example.com\r\n\
                    CSeq: 314159 ACK\r\n\
                    Max-Forwards: 70\r\n\
                    Content-Length: 0\r\n\r\n";
    assert_eq!(String::from_utf8_lossy(&buf), expected);
    assert!(Message::parse(&buf, &Limits::DEFAULT).is_ok_and(|m| m.check_mandatory().is_ok()));
    // A retransmitted 486 is absorbed and the same ACK is sent again.
    buf.clear();
    assert_eq!(
        t.handle_response(ms(600), &resp, peer(2, Transport::Udp)),
        ResponseOutcome::Absorbed(id)
    );
    assert!(t.poll_transmit(ms(600), &mut buf).is_some());
    assert_eq!(String::from_utf8_lossy(&buf), expected);
    // No INVITE retransmission after the final response; Timer D (32 s) ends it.
    assert_eq!(t.poll_timeout(), Some(ms(100 + 32_000)));
    t.handle_timeout(ms(100 + 32_000));
    assert_eq!(t.client_state(id), None);
    assert_eq!(
        t.poll_event(),
        Some(TxnEvent::Terminated(TxnId::Client(id)))
    );
}

#[test]
fn invite_client_accepted_state_passes_every_2xx_to_the_tu() {
    let mut p = Pair::new(Transport::Udp);
    let invite = request("INVITE", "z9hG4bKacc1", 1, Transport::Udp);
    let id = p.send(invite.clone());
    p.run_until(ms(10));
    let sid = p.server.last_new();
    p.respond(sid, response(&invite, 200, Some("fork1")));
    p.run_until(ms(20));
    assert_eq!(p.client.txns.client_state(id), Some(ClientState::Accepted));
    // Forked 2xx from another branch of the call, then a stray 486 and a 180.
    let now = p.now;
    let from = peer(2, Transport::Udp);
    let c = &mut p.client.txns;
    let r2 = response(&invite, 200, Some("fork2"));
    assert_eq!(
        c.handle_response(now, &r2, from),
        ResponseOutcome::ForTu(id)
    );
    let r3 = response(&invite, 486, Some("fork3"));
    assert_eq!(
        c.handle_response(now, &r3, from),
        ResponseOutcome::Absorbed(id)
    );
    let r4 = response(&invite, 180, Some("fork4"));
    assert_eq!(
        c.handle_response(now, &r4, from),
        ResponseOutcome::Absorbed(id)
    );
    p.run();
    // The client sent no ACK (the 2xx ACK is the TU's) and no retransmission after the 2xx.
    assert_eq!(p.times(Side::Client, "ACK"), vec![]);
    assert_eq!(p.times(Side::Client, "INVITE"), secs(&[0.0]));
    // Timer M = 64·T1 from the first 2xx; no timeout event.
    assert_eq!(
        p.client.events,
        vec![(ms(20 + 32_000), TxnEvent::Terminated(TxnId::Client(id)))]
    );
}

#[test]
fn response_matching_uses_branch_and_cseq_method() {
    let mut p = Pair::new(Transport::Udp);
    let invite = request("INVITE", "z9hG4bKcan1", 5, Transport::Udp);
    let inv = p.send(invite.clone());
    p.run_until(ms(10));
    let s_inv = p.server.last_new();
    // Before any provisional response a CANCEL must wait.
    assert_eq!(
        p.client.txns.cancel(p.now, inv),
        Err(TxnError::InvalidState)
    );
    p.respond(s_inv, response(&invite, 180, Some("b")));
    p.run_until(ms(20));
    let can = p.client.txns.cancel(p.now, inv).expect("cancel");
    p.flush();
    p.run_until(ms(30));
    // The server matched the CANCEL to its own transaction, targeting the INVITE.
    let s_can = p.server.last_new();
    assert_ne!(s_can, s_inv);
    assert_eq!(p.server.txns.cancel_target(s_can), Some(s_inv));
    let cancel_bytes = p.server.requests.last().expect("cancel").2.clone();
    assert_eq!(method_of(&cancel_bytes), "CANCEL");
    let cmsg = Message::parse(&cancel_bytes, &Limits::DEFAULT).expect("cancel parses");
    assert_eq!(cmsg.cseq().map(|c| c.seq), Ok(5));
    assert_eq!(cmsg.to().ok().and_then(|t| t.tag()), None);
    assert_eq!(cmsg.values(HeaderName::Route).count(), 3);
    // 200 to the CANCEL goes to the CANCEL transaction only.
    p.respond(s_can, response(&cancel_bytes, 200, Some("b")));
    p.run_until(ms(40));
    assert_eq!(
        p.client.responses.last(),
        Some(&(ms(40), ResponseOutcome::ForTu(can), 200))
    );
    assert_eq!(
        p.client.txns.client_state(inv),
        Some(ClientState::Proceeding)
    );
    assert_eq!(
        p.client.txns.client_state(can),
        Some(ClientState::Completed)
    );
    // The 487 ends the INVITE.
    p.respond(s_inv, response(&invite, 487, Some("b")));
    p.run_until(ms(50));
    assert_eq!(
        p.client.responses.last(),
        Some(&(ms(50), ResponseOutcome::ForTu(inv), 487))
    );
    assert_eq!(
        p.client.txns.client_state(inv),
        Some(ClientState::Completed)
    );
    p.run_until(ms(60));
    assert!(
        matches!(p.server.requests.last(), Some((_, RequestOutcome::AckAbsorbed(s), _)) if *s == s_inv)
    );
}

#[test]
fn stray_responses() {
    let mut t = Transactions::new(TxnConfig::default());
    let from = peer(2, Transport::Udp);
    let req = request("INVITE", "z9hG4bKnobody", 1, Transport::Udp);
    assert_eq!(
        t.handle_response(Instant::ZERO, &response(&req, 200, Some("x")), from),
        ResponseOutcome::Stray
    );
    let no_branch = request_full("INVITE", None, 1, "INVITE", None, Transport::Udp, "h");
    assert_eq!(
        t.handle_response(Instant::ZERO, &response(&no_branch, 200, None), from),
        ResponseOutcome::Stray
    );
    // Same branch, other CSeq method.
    t.send_request(Instant::ZERO, req, from).expect("send");
    let options = request("OPTIONS", "z9hG4bKnobody", 1, Transport::Udp);
    assert_eq!(
        t.handle_response(Instant::ZERO, &response(&options, 200, None), from),
        ResponseOutcome::Stray
    );
}

// ---------------------------------------------------------------- server transactions

#[test]
fn server_invite_absorbs_retransmission_and_resends_last_provisional() {
    let mut p = Pair::new(Transport::Udp);
    let invite = request("INVITE", "z9hG4bKsrv1", 1, Transport::Udp);
    // The first 180 is lost.
    let mut dropped = false;
    p.drop = Box::new(move |w| {
        let first_180 = !dropped && w.bytes.starts_with(b"SIP/2.0 180");
        dropped |= first_180;
        first_180
    });
    let id = p.send(invite.clone());
    p.run_until(ms(10));
    let sid = p.server.last_new();
    assert_eq!(
        p.server.txns.server_state(sid),
        Some(ServerState::Proceeding)
    );
    p.respond(sid, response(&invite, 180, Some("t")));
    p.run_until(ms(600));
    // The client's retransmission at 0.5 s was absorbed and the 180 resent.
    assert_eq!(
        (p.server.requests[1].0, p.server.requests[1].1),
        (ms(510), RequestOutcome::Retransmission(sid))
    );
    assert_eq!(p.times(Side::Server, "SIP/2.0 180"), vec![ms(10), ms(510)]);
    assert_eq!(
        p.client.responses,
        vec![(ms(520), ResponseOutcome::ForTu(id), 180)]
    );
    // No more INVITE retransmissions once Proceeding.
    p.run_until(ms(5_000));
    assert_eq!(p.times(Side::Client, "INVITE"), vec![ms(0), ms(500)]);
}

#[test]
fn server_non_2xx_retransmitted_by_g_until_ack_then_confirmed_and_i() {
    let mut p = Pair::new(Transport::Udp);
    p.latency = Duration::ZERO;
    let invite = request("INVITE", "z9hG4bKsrv2", 1, Transport::Udp);
    // The client's first two ACKs are lost.
    let mut acks = 0;
    p.drop = Box::new(move |w| {
        let ack = w.bytes.starts_with(b"ACK");
        acks += usize::from(ack);
        ack && acks <= 2
    });
    let id = p.send(invite.clone());
    p.run_until(Instant::ZERO);
    let sid = p.server.last_new();
    p.respond(sid, response(&invite, 486, Some("busy")));
    p.run_until(ms(2_000));
    // 486 at 0, G at 0.5 (ACK lost again), 1.5 (ACK gets through).
    assert_eq!(p.times(Side::Server, "SIP/2.0 486"), secs(&[0.0, 0.5, 1.5]));
    assert_eq!(p.times(Side::Client, "ACK"), secs(&[0.0, 0.5, 1.5]));
    assert_eq!(
        p.server.txns.server_state(sid),
        Some(ServerState::Confirmed)
    );
    assert_eq!(
        p.client.responses.iter().map(|r| r.1).collect::<Vec<_>>(),
        vec![
            ResponseOutcome::ForTu(id),
            ResponseOutcome::Absorbed(id),
            ResponseOutcome::Absorbed(id)
        ]
    );
    assert!(
        matches!(p.server.requests.last(), Some((_, RequestOutcome::AckAbsorbed(s), _)) if *s == sid)
    );
    // A retransmitted ACK in Confirmed is absorbed too.
    let ack = p
        .sent
        .iter()
        .rfind(|w| w.bytes.starts_with(b"ACK"))
        .expect("ack")
        .bytes
        .clone();
    let now = p.now;
    assert_eq!(
        p.server
            .txns
            .handle_request(now, &ack, peer(1, Transport::Udp)),
        RequestOutcome::AckAbsorbed(sid)
    );
    // Timer I = T4 = 5 s after the ACK.
    p.run();
    assert_eq!(p.times(Side::Server, "SIP/2.0 486").len(), 3);
    assert_eq!(
        p.server.events,
        vec![(ms(6_500), TxnEvent::Terminated(TxnId::Server(sid)))]
    );
}

#[test]
fn server_timer_h_fires_without_ack() {
    let mut p = Pair::new(Transport::Udp);
    p.latency = Duration::ZERO;
    p.drop = Box::new(|w| w.bytes.starts_with(b"ACK"));
    let invite = request("INVITE", "z9hG4bKsrv3", 1, Transport::Udp);
    p.send(invite.clone());
    p.run_until(Instant::ZERO);
    let sid = p.server.last_new();
    p.respond(sid, response(&invite, 603, Some("no")));
    p.run();
    assert_eq!(
        p.times(Side::Server, "SIP/2.0 603"),
        secs(&[0.0, 0.5, 1.5, 3.5, 7.5, 11.5, 15.5, 19.5, 23.5, 27.5, 31.5])
    );
    assert_eq!(
        p.server.events,
        vec![
            (ms(32_000), TxnEvent::ServerTimeout(sid)),
            (ms(32_000), TxnEvent::Terminated(TxnId::Server(sid))),
        ]
    );
}

#[test]
fn server_invite_over_tcp_has_no_g_and_zero_i() {
    let mut p = Pair::new(Transport::Tcp);
    let invite = request("INVITE", "z9hG4bKsrv4", 1, Transport::Tcp);
    let id = p.send(invite.clone());
    p.run_until(ms(10));
    let sid = p.server.last_new();
    p.respond(sid, response(&invite, 404, Some("nf")));
    p.run_until(ms(30));
    assert_eq!(p.times(Side::Server, "SIP/2.0 404"), vec![ms(10)]);
    // The ACK arrived at 30 ms and ended the transaction at once (Timer I = 0).
    assert_eq!(p.server.txns.server_state(sid), None);
    // The client's D is zero over TCP as well.
    assert_eq!(p.client.txns.client_state(id), None);
    assert_eq!(p.times(Side::Client, "ACK"), vec![ms(20)]);
}

#[test]
fn server_invite_accepted_state() {
    let mut t = Transactions::new(TxnConfig::default());
    let from = peer(1, Transport::Udp);
    let invite = request("INVITE", "z9hG4bKsrv5", 1, Transport::Udp);
    let RequestOutcome::New(sid) = t.handle_request(Instant::ZERO, &invite, from) else {
        panic!("new transaction expected");
    };
    let mut buf = Vec::new();
    t.respond(ms(1), sid, response(&invite, 200, Some("ok")))
        .expect("respond");
    assert!(t.poll_transmit(ms(1), &mut buf).is_some());
    assert_eq!(status_of(&buf), 200);
    assert_eq!(t.server_state(sid), Some(ServerState::Accepted));
    // A retransmitted INVITE is absorbed without resending anything (the TU resends 2xx).
    assert_eq!(
        t.handle_request(ms(500), &invite, from),
        RequestOutcome::Retransmission(sid)
    );
    assert_eq!(t.poll_transmit(ms(500), &mut buf), None);
    // Further 2xx from the TU go out.
    buf.clear();
    t.respond(ms(600), sid, response(&invite, 200, Some("ok")))
        .expect("second 2xx");
    assert!(t.poll_transmit(ms(600), &mut buf).is_some());
    // A non-2xx is refused.
    assert_eq!(
        t.respond(ms(600), sid, response(&invite, 500, Some("ok"))),
        Err(TxnError::InvalidState)
    );
    // The 2xx ACK (new branch) is not transaction business; neither is one reusing the branch.
    let ack = request_full(
        "ACK",
        Some("z9hG4bKnew"),
        1,
        "ACK",
        Some("ok"),
        Transport::Udp,
        "10.0.0.1:5060",
    );
    assert_eq!(
        t.handle_request(ms(700), &ack, from),
        RequestOutcome::PassThrough
    );
    let ack_same = request_full(
        "ACK",
        Some("z9hG4bKsrv5"),
        1,
        "ACK",
        Some("ok"),
        Transport::Udp,
        "10.0.0.1:5060",
    );
    assert_eq!(
        t.handle_request(ms(700), &ack_same, from),
        RequestOutcome::PassThrough
    );
    // Timer L = 64·T1 after the first 2xx.
    assert_eq!(t.poll_timeout(), Some(ms(1 + 32_000)));
    t.handle_timeout(ms(1 + 32_000));
    assert_eq!(
        t.poll_event(),
        Some(TxnEvent::Terminated(TxnId::Server(sid)))
    );
    assert!(t.is_empty());
}

#[test]
fn server_non_invite_states_and_misuse() {
    let mut t = Transactions::new(TxnConfig::default());
    let from = peer(1, Transport::Udp);
    let req = request("BYE", "z9hG4bKbye1", 2, Transport::Udp);
    let RequestOutcome::New(sid) = t.handle_request(Instant::ZERO, &req, from) else {
        panic!("new transaction expected");
    };
    let mut buf = Vec::new();
    // Retransmission in Trying: absorbed, nothing to resend.
    assert_eq!(
        t.handle_request(ms(500), &req, from),
        RequestOutcome::Retransmission(sid)
    );
    assert_eq!(t.poll_transmit(ms(500), &mut buf), None);
    t.respond(ms(600), sid, response(&req, 200, Some("z")))
        .expect("200");
    assert!(t.poll_transmit(ms(600), &mut buf).is_some());
    assert_eq!(t.server_state(sid), Some(ServerState::Completed));
    // Retransmission in Completed: the final is resent.
    buf.clear();
    assert_eq!(
        t.handle_request(ms(700), &req, from),
        RequestOutcome::Retransmission(sid)
    );
    assert!(t.poll_transmit(ms(700), &mut buf).is_some());
    assert_eq!(status_of(&buf), 200);
    assert_eq!(
        t.respond(ms(800), sid, response(&req, 500, None)),
        Err(TxnError::InvalidState)
    );
    assert_eq!(
        t.respond(ms(800), sid, req.clone()),
        Err(TxnError::NotAResponse)
    );
    assert!(matches!(
        t.respond(ms(800), sid, b"garbage".to_vec()),
        Err(TxnError::Malformed(_))
    ));
    assert_eq!(
        t.respond(ms(800), ServerTxnId(999), response(&req, 200, None)),
        Err(TxnError::UnknownTransaction)
    );
    // Timer J.
    t.handle_timeout(ms(600 + 32_000));
    assert_eq!(t.server_state(sid), None);
    assert_eq!(
        t.respond(ms(40_000), sid, response(&req, 200, None)),
        Err(TxnError::UnknownTransaction)
    );
}

// ---------------------------------------------------------------- matching

#[test]
fn server_matching_uses_branch_sent_by_and_method() {
    let mut t = Transactions::new(TxnConfig::default());
    let from = peer(1, Transport::Udp);
    let a = request_full(
        "INVITE",
        Some("z9hG4bKm1"),
        1,
        "INVITE",
        None,
        Transport::Udp,
        "10.0.0.1:5060",
    );
    let RequestOutcome::New(sa) = t.handle_request(Instant::ZERO, &a, from) else {
        panic!("new");
    };
    // Same branch from another sent-by: a different transaction.
    let b = request_full(
        "INVITE",
        Some("z9hG4bKm1"),
        1,
        "INVITE",
        None,
        Transport::Udp,
        "10.0.0.7:5060",
    );
    assert!(matches!(t.handle_request(Instant::ZERO, &b, from), RequestOutcome::New(s) if s != sa));
    // Sent-by host compares case-insensitively.
    let c = request_full(
        "INVITE",
        Some("z9hG4bKm2"),
        1,
        "INVITE",
        None,
        Transport::Udp,
        "Host.Example.com",
    );
    let d = request_full(
        "INVITE",
        Some("z9hG4bKm2"),
        1,
        "INVITE",
        None,
        Transport::Udp,
        "host.example.COM",
    );
    let RequestOutcome::New(sc) = t.handle_request(Instant::ZERO, &c, from) else {
        panic!("new");
    };
    assert_eq!(
        t.handle_request(Instant::ZERO, &d, from),
        RequestOutcome::Retransmission(sc)
    );
    // A CANCEL with the INVITE's branch: its own transaction, targeting the INVITE.
    let cancel = request_full(
        "CANCEL",
        Some("z9hG4bKm1"),
        1,
        "CANCEL",
        None,
        Transport::Udp,
        "10.0.0.1:5060",
    );
    let RequestOutcome::New(scan) = t.handle_request(Instant::ZERO, &cancel, from) else {
        panic!("new");
    };
    assert_eq!(t.cancel_target(scan), Some(sa));
    assert_eq!(
        t.handle_request(Instant::ZERO, &cancel, from),
        RequestOutcome::Retransmission(scan)
    );
    // A CANCEL for nothing.
    let lone = request_full(
        "CANCEL",
        Some("z9hG4bKzz"),
        1,
        "CANCEL",
        None,
        Transport::Udp,
        "10.0.0.1:5060",
    );
    let RequestOutcome::New(slone) = t.handle_request(Instant::ZERO, &lone, from) else {
        panic!("new");
    };
    assert_eq!(t.cancel_target(slone), None);
    // An ACK for a non-2xx before any final response: not absorbed.
    let ack = request_full(
        "ACK",
        Some("z9hG4bKm1"),
        1,
        "ACK",
        Some("t"),
        Transport::Udp,
        "10.0.0.1:5060",
    );
    assert_eq!(
        t.handle_request(Instant::ZERO, &ack, from),
        RequestOutcome::PassThrough
    );
    // An ACK matching nothing.
    let stray = request_full(
        "ACK",
        Some("z9hG4bKnone"),
        1,
        "ACK",
        Some("t"),
        Transport::Udp,
        "10.0.0.1:5060",
    );
    assert_eq!(
        t.handle_request(Instant::ZERO, &stray, from),
        RequestOutcome::PassThrough
    );
}

#[test]
fn rfc2543_matching_without_magic_cookie() {
    let from = peer(1, Transport::Udp);
    for branch in [None, Some("oldstyle42")] {
        let mut t = Transactions::new(TxnConfig::default());
        let inv = |cseq| {
            request_full(
                "INVITE",
                branch,
                cseq,
                "INVITE",
                None,
                Transport::Udp,
                "10.0.0.1",
            )
        };
        let RequestOutcome::New(s) = t.handle_request(Instant::ZERO, &inv(1), from) else {
            panic!("new");
        };
        assert_eq!(
            t.handle_request(ms(1), &inv(1), from),
            RequestOutcome::Retransmission(s)
        );
        // Another CSeq is another transaction.
        assert!(matches!(t.handle_request(ms(1), &inv(2), from), RequestOutcome::New(o) if o != s));
        // CANCEL: same Request-URI, tags, Call-ID, CSeq number and Via.
        let cancel = request_full(
            "CANCEL",
            branch,
            1,
            "CANCEL",
            None,
            Transport::Udp,
            "10.0.0.1",
        );
        let RequestOutcome::New(c) = t.handle_request(ms(2), &cancel, from) else {
            panic!("new");
        };
        assert_eq!(t.cancel_target(c), Some(s));
        // The ACK matches with the To tag of the final response only.
        t.respond(ms(3), s, response(&inv(1), 487, Some("resp-tag")))
            .expect("487");
        let ack = |tag| {
            request_full(
                "ACK",
                branch,
                1,
                "ACK",
                Some(tag),
                Transport::Udp,
                "10.0.0.1",
            )
        };
        assert_eq!(
            t.handle_request(ms(4), &ack("other"), from),
            RequestOutcome::PassThrough
        );
        assert_eq!(
            t.handle_request(ms(4), &ack("resp-tag"), from),
            RequestOutcome::AckAbsorbed(s)
        );
        assert_eq!(t.server_state(s), Some(ServerState::Confirmed));
        // A different top Via is a different transaction.
        let other_via = request_full(
            "INVITE",
            branch,
            1,
            "INVITE",
            None,
            Transport::Udp,
            "10.0.0.9",
        );
        assert!(
            matches!(t.handle_request(ms(5), &other_via, from), RequestOutcome::New(o) if o != s)
        );
    }
}

// ---------------------------------------------------------------- robustness and bounds

#[test]
fn malformed_input_is_reported_not_panicked_on() {
    let mut t = Transactions::new(TxnConfig::default());
    let from = peer(1, Transport::Udp);
    let now = Instant::ZERO;
    for bad in [
        &b""[..],
        b"\r\n\r\n",
        b"garbage",
        b"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\n\r\n",
        b"INVITE sip:a@b SIP/2.0\r\nVia: nonsense\r\nCSeq: 1 INVITE\r\n\r\n",
    ] {
        assert!(matches!(
            t.handle_request(now, bad, from),
            RequestOutcome::Malformed(_)
        ));
        assert!(matches!(
            t.handle_response(now, bad, from),
            ResponseOutcome::Malformed(_)
        ));
    }
    // CSeq method differing from the request's.
    let mismatch = request_full(
        "INVITE",
        Some("z9hG4bKx"),
        1,
        "BYE",
        None,
        Transport::Udp,
        "h",
    );
    assert!(matches!(
        t.handle_request(now, &mismatch, from),
        RequestOutcome::Malformed(_)
    ));
    // A response given as a request and the other way round.
    let req = request("INVITE", "z9hG4bKx", 1, Transport::Udp);
    assert!(matches!(
        t.handle_request(now, &response(&req, 200, None), from),
        RequestOutcome::Malformed(_)
    ));
    assert!(matches!(
        t.handle_response(now, &req, from),
        ResponseOutcome::Malformed(_)
    ));
    // send_request refuses what it cannot run.
    let no_branch = request_full("INVITE", None, 1, "INVITE", None, Transport::Udp, "h");
    assert_eq!(
        t.send_request(now, no_branch, from),
        Err(TxnError::MissingBranch)
    );
    let ack = request_full("ACK", Some("z9hG4bKa"), 1, "ACK", None, Transport::Udp, "h");
    assert_eq!(
        t.send_request(now, ack, from),
        Err(TxnError::AckNotTransaction)
    );
    assert!(matches!(
        t.send_request(now, b"x".to_vec(), from),
        Err(TxnError::Malformed(_))
    ));
    assert_eq!(
        t.send_request(now, response(&req, 200, None), from),
        Err(TxnError::NotARequest)
    );
    t.send_request(now, req.clone(), from).expect("first");
    assert_eq!(
        t.send_request(now, req, from),
        Err(TxnError::DuplicateTransaction)
    );
    assert_eq!(t.len(), 1);
}

#[test]
fn a_full_table_keeps_room_for_requests_of_dialogs() {
    let mut config = TxnConfig::default();
    config.max_transactions(10);
    let mut t = Transactions::new(config);
    let from = peer(1, Transport::Udp);
    // New INVITEs fill the table up to 90%.
    for i in 0..9 {
        let inv = request("INVITE", &format!("z9hG4bKn{i}"), 1, Transport::Udp);
        assert!(matches!(
            t.handle_request(Instant::ZERO, &inv, from),
            RequestOutcome::New(_)
        ));
    }
    let inv = request("INVITE", "z9hG4bKn9", 1, Transport::Udp);
    assert_eq!(
        t.handle_request(Instant::ZERO, &inv, from),
        RequestOutcome::TooMany,
        "a new INVITE at 90%"
    );
    // The BYE of an established call still gets its transaction.
    let bye = request_full(
        "BYE",
        Some("z9hG4bKbye"),
        2,
        "BYE",
        Some("b1"),
        Transport::Udp,
        "10.0.0.1:5060",
    );
    assert!(matches!(
        t.handle_request(Instant::ZERO, &bye, from),
        RequestOutcome::New(_)
    ));
    assert_eq!(t.len(), 10);
}

#[test]
fn transaction_cap() {
    let mut config = TxnConfig::default();
    config.max_transactions(2);
    let mut t = Transactions::new(config);
    let from = peer(1, Transport::Udp);
    let r = |b: &str| request("INVITE", b, 1, Transport::Udp);
    assert!(matches!(
        t.handle_request(Instant::ZERO, &r("z9hG4bK1"), from),
        RequestOutcome::New(_)
    ));
    assert!(matches!(
        t.handle_request(Instant::ZERO, &r("z9hG4bK2"), from),
        RequestOutcome::New(_)
    ));
    assert_eq!(
        t.handle_request(Instant::ZERO, &r("z9hG4bK3"), from),
        RequestOutcome::TooMany
    );
    // Retransmissions of live transactions are still absorbed.
    assert!(matches!(
        t.handle_request(Instant::ZERO, &r("z9hG4bK1"), from),
        RequestOutcome::Retransmission(_)
    ));
    assert_eq!(
        t.send_request(Instant::ZERO, r("z9hG4bK4"), peer(2, Transport::Udp)),
        Err(TxnError::TooMany)
    );
    assert_eq!(t.len(), 2);
}

#[test]
fn transport_error_ends_a_transaction() {
    let mut t = Transactions::new(TxnConfig::default());
    let id = t
        .send_request(
            Instant::ZERO,
            request("INVITE", "z9hG4bKte", 1, Transport::Tcp),
            peer(2, Transport::Tcp),
        )
        .expect("send");
    t.handle_transport_error(TxnId::Client(id));
    assert_eq!(
        t.poll_event(),
        Some(TxnEvent::TransportError(TxnId::Client(id)))
    );
    assert_eq!(
        t.poll_event(),
        Some(TxnEvent::Terminated(TxnId::Client(id)))
    );
    // Its queued request is not sent and its timers are gone.
    assert_eq!(t.poll_transmit(Instant::ZERO, &mut Vec::new()), None);
    assert_eq!(t.poll_timeout(), None);
    t.handle_transport_error(TxnId::Client(id));
    assert_eq!(t.poll_event(), None);
}

#[test]
fn abandon_ends_a_transaction_without_a_transport_error() {
    let mut t = Transactions::new(TxnConfig::default());
    let id = t
        .send_request(
            Instant::ZERO,
            request("INVITE", "z9hG4bKab", 1, Transport::Udp),
            peer(2, Transport::Udp),
        )
        .expect("send");
    t.abandon(TxnId::Client(id));
    assert_eq!(
        t.poll_event(),
        Some(TxnEvent::Terminated(TxnId::Client(id)))
    );
    assert_eq!(t.poll_event(), None);
    // Nothing is sent, no retransmission timer remains, and the id is gone.
    assert_eq!(t.poll_transmit(Instant::ZERO, &mut Vec::new()), None);
    assert_eq!(t.poll_timeout(), None);
    assert_eq!(t.client_state(id), None);
    t.abandon(TxnId::Client(id));
    assert_eq!(t.poll_event(), None);
}

#[test]
fn cancelled_timers_do_not_pile_up() {
    let mut t = Transactions::new(TxnConfig::default());
    let from = peer(2, Transport::Udp);
    let mut buf = Vec::new();
    for i in 0..1_000 {
        let req = request("INVITE", &format!("z9hG4bKpile{i}"), 1, Transport::Udp);
        t.send_request(Instant::ZERO, req.clone(), from)
            .expect("send");
        // A 100 cancels A and B at once.
        let _ = t.handle_response(Instant::ZERO, &response(&req, 100, None), from);
        buf.clear();
        while t.poll_transmit(Instant::ZERO, &mut buf).is_some() {}
    }
    assert_eq!(t.len(), 1_000);
    assert_eq!(t.poll_timeout(), None);
    assert!(t.retx.len() <= 4 * t.len() + 64);
    assert!(t.ends.iter().all(|q| q.is_empty()));
}

#[test]
fn zero_t1_does_not_loop() {
    let mut config = TxnConfig::default();
    config.t1(Duration::ZERO).t2(Duration::ZERO);
    let mut t = Transactions::new(config);
    t.send_request(
        Instant::ZERO,
        request("OPTIONS", "z9hG4bKz", 1, Transport::Udp),
        peer(2, Transport::Udp),
    )
    .expect("send");
    let mut steps = 0;
    while let Some(at) = t.poll_timeout() {
        t.handle_timeout(at);
        steps += 1;
        assert!(steps < 1_000);
    }
    assert!(t.is_empty());
}

proptest::proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
        let mut t = Transactions::new(TxnConfig::default());
        let from = peer(1, Transport::Udp);
        let _ = t.handle_request(Instant::ZERO, &bytes, from);
        let _ = t.handle_response(Instant::ZERO, &bytes, from);
        let _ = t.send_request(Instant::ZERO, bytes.clone(), from);
    }

    #[test]
    fn mutated_requests_never_panic(pos in 0usize..400, byte in proptest::num::u8::ANY, cut in 0usize..400) {
        let mut t = Transactions::new(TxnConfig::default());
        let from = peer(1, Transport::Udp);
        let mut req = request("INVITE", "z9hG4bKfuzz", 1, Transport::Udp);
        if let Some(b) = req.get_mut(pos) {
            *b = byte;
        }
        req.truncate(cut.max(1).min(req.len()));
        if let RequestOutcome::New(id) = t.handle_request(Instant::ZERO, &req, from) {
            let _ = t.respond(ms(1), id, response(&request("INVITE", "z9hG4bKfuzz", 1, Transport::Udp), 486, Some("x")));
            let _ = t.handle_request(ms(2), &req, from);
        }
        if let Ok(id) = t.send_request(Instant::ZERO, req.clone(), from) {
            let _ = t.handle_response(ms(1), &response(&request("INVITE", "z9hG4bKfuzz", 1, Transport::Udp), 486, Some("x")), from);
            let _ = t.cancel(ms(1), id);
        }
        while let Some(at) = t.poll_timeout() {
            t.handle_timeout(at);
            while t.poll_transmit(at, &mut Vec::new()).is_some() {}
        }
    }
}

#[test]
fn udp_responses_go_to_the_via_port_unless_rport_is_asked() {
    // RFC 3261 §18.2.2: source IP, sent-by port; RFC 3581: the source port with `rport`.
    let from = Peer {
        addr: SocketAddr::from(([10, 0, 0, 9], 40_000)),
        transport: Transport::Udp,
        conn: None,
    };
    for (sent_by, want_port) in [
        ("10.0.0.9:5070", 5070),
        ("10.0.0.9", 5060),
        ("10.0.0.9:5070;rport", 40_000),
        ("host.example:5070", 5070),
    ] {
        let mut t = Transactions::new(TxnConfig::default());
        let req = request_full(
            "OPTIONS",
            Some("z9hG4bKrp"),
            1,
            "OPTIONS",
            None,
            Transport::Udp,
            sent_by,
        );
        let RequestOutcome::New(id) = t.handle_request(Instant::ZERO, &req, from) else {
            panic!("new transaction for {sent_by}");
        };
        let resp = response(&req, 200, Some("tt"));
        t.respond(Instant::ZERO, id, resp).expect("respond");
        let mut buf = Vec::new();
        let tx = t.poll_transmit(Instant::ZERO, &mut buf).expect("sent");
        assert_eq!(
            tx.destination.addr,
            SocketAddr::from(([10, 0, 0, 9], want_port)),
            "{sent_by}"
        );
    }
    // Over TCP the response goes back on the request's connection whatever the Via says.
    let mut t = Transactions::new(TxnConfig::default());
    let tcp = peer(9, Transport::Tcp);
    let req = request_full(
        "OPTIONS",
        Some("z9hG4bKrq"),
        1,
        "OPTIONS",
        None,
        Transport::Tcp,
        "10.0.0.9:5070",
    );
    let RequestOutcome::New(id) = t.handle_request(Instant::ZERO, &req, tcp) else {
        panic!("new transaction over tcp");
    };
    t.respond(Instant::ZERO, id, response(&req, 200, Some("tt")))
        .expect("respond");
    let tx = t
        .poll_transmit(Instant::ZERO, &mut Vec::new())
        .expect("sent");
    assert_eq!(tx.destination, tcp);
}

/// Server INVITE transactions answered with a 2xx: they linger (Timer L) and are evictable.
fn accepted_invites(t: &mut Transactions, n: usize, at: Instant) -> Vec<ServerTxnId> {
    let from = peer(1, Transport::Udp);
    (0..n)
        .map(|i| {
            let inv = request("INVITE", &format!("z9hG4bKacc{i}"), 1, Transport::Udp);
            let RequestOutcome::New(id) = t.handle_request(at, &inv, from) else {
                panic!("INVITE {i} not new");
            };
            t.respond(at, id, response(&inv, 200, Some("x")))
                .expect("2xx");
            while t.poll_transmit(at, &mut Vec::new()).is_some() {}
            id
        })
        .collect()
}

#[test]
fn a_full_table_evicts_the_oldest_lingering_transaction_first() {
    let mut config = TxnConfig::default();
    config.max_transactions(10);
    let mut t = Transactions::new(config);
    let ids = accepted_invites(&mut t, 9, ms(0));
    assert_eq!(t.stats().lingering, 9);
    while t.poll_event().is_some() {}
    // A new INVITE at 90%: the oldest lingering transaction goes, the newest stay.
    let inv = request("INVITE", "z9hG4bKnew", 1, Transport::Udp);
    assert!(matches!(
        t.handle_request(ms(10), &inv, peer(1, Transport::Udp)),
        RequestOutcome::New(_)
    ));
    assert_eq!(
        t.poll_event(),
        Some(TxnEvent::Terminated(TxnId::Server(ids[0])))
    );
    assert_eq!(t.poll_event(), None);
    assert_eq!(t.server_state(ids[0]), None);
    assert_eq!(t.server_state(ids[1]), Some(ServerState::Accepted));
    assert_eq!(t.stats().evicted, 1);
    assert_eq!(t.stats().lingering, 8);
    assert_eq!(t.len(), 9);
}

#[test]
fn live_transactions_are_never_evicted() {
    let mut config = TxnConfig::default();
    config.max_transactions(10);
    let mut t = Transactions::new(config);
    let from = peer(1, Transport::Udp);
    let _lingering = accepted_invites(&mut t, 2, ms(0));
    // Seven live INVITEs (no final response yet): 9 transactions, 90%.
    for i in 0..7 {
        let inv = request("INVITE", &format!("z9hG4bKlive{i}"), 1, Transport::Udp);
        assert!(matches!(
            t.handle_request(ms(1), &inv, from),
            RequestOutcome::New(_)
        ));
    }
    // Two more new INVITEs take the two lingering transactions' room.
    for i in 0..2 {
        let inv = request("INVITE", &format!("z9hG4bKmore{i}"), 1, Transport::Udp);
        assert!(matches!(
            t.handle_request(ms(2), &inv, from),
            RequestOutcome::New(_)
        ));
    }
    assert_eq!(t.stats().evicted, 2);
    // Now every transaction is live: the next new INVITE is refused, nothing is evicted.
    let inv = request("INVITE", "z9hG4bKrefused", 1, Transport::Udp);
    assert_eq!(t.handle_request(ms(3), &inv, from), RequestOutcome::TooMany);
    assert_eq!(t.stats().evicted, 2);
    assert_eq!(t.stats().refused, 1);
    assert_eq!(t.stats().lingering, 0);
    assert_eq!(t.len(), 9);
}

#[test]
fn the_memory_budget_bounds_the_table_and_evicts_lingering_first() {
    let mut config = TxnConfig::default();
    // Room for about ten transactions without kept bytes.
    config.memory_budget(10 * TXN_OVERHEAD_BYTES + TXN_OVERHEAD_BYTES / 2);
    let mut t = Transactions::new(config);
    let from = peer(1, Transport::Udp);
    // Non-INVITEs answered over UDP linger (Timer J) keeping their final response.
    let mut first = None;
    for i in 0..20 {
        let req = request("OPTIONS", &format!("z9hG4bKopt{i}"), 1, Transport::Udp);
        match t.handle_request(ms(i), &req, from) {
            RequestOutcome::New(id) => {
                first.get_or_insert(id);
                t.respond(ms(i), id, response(&req, 200, Some("o")))
                    .expect("final");
            }
            other => panic!("OPTIONS {i}: {other:?}"),
        }
        assert!(t.memory_bytes() <= t.config().memory_budget);
    }
    let s = t.stats();
    assert!(s.evicted >= 10, "{s:?}");
    assert!(s.kept_bytes > 0);
    assert_eq!(s.lingering, t.len());
    assert_eq!(first.and_then(|id| t.server_state(id)), None, "oldest gone");
    // The rest still absorb their retransmissions and resend the kept response.
    let last = request("OPTIONS", "z9hG4bKopt19", 1, Transport::Udp);
    assert!(matches!(
        t.handle_request(ms(30), &last, from),
        RequestOutcome::Retransmission(_)
    ));
    // When every timer has run, nothing is kept and the estimate is back to zero.
    while let Some(at) = t.poll_timeout() {
        t.handle_timeout(at);
    }
    assert!(t.is_empty());
    assert_eq!(t.memory_bytes(), 0);
    assert_eq!(t.stats().lingering, 0);
}

#[test]
fn finished_transactions_drop_what_they_no_longer_resend() {
    let mut t = Transactions::new(TxnConfig::default());
    let to = peer(2, Transport::Udp);
    let inv = request("INVITE", "z9hG4bKdrop", 1, Transport::Udp);
    let cid = t.send_request(ms(0), inv.clone(), to).expect("send");
    while t.poll_transmit(ms(0), &mut Vec::new()).is_some() {}
    assert_eq!(t.stats().kept_bytes, inv.len(), "the request, for Timer A");
    // A 2xx: Accepted keeps no bytes (a further 2xx only goes to the TU).
    let ok = response(&inv, 200, Some("t"));
    assert_eq!(
        t.handle_response(ms(5), &ok, to),
        ResponseOutcome::ForTu(cid)
    );
    assert_eq!(t.stats().kept_bytes, 0);
    assert_eq!(t.stats().lingering, 1);
    // Retransmitted 2xx still reach the TU until Timer M.
    assert_eq!(
        t.handle_response(ms(600), &ok, to),
        ResponseOutcome::ForTu(cid)
    );
    // Timer A does not resend a request it no longer has.
    t.handle_timeout(ms(1_000));
    assert_eq!(t.poll_transmit(ms(1_000), &mut Vec::new()), None);
    // A non-2xx: Completed keeps only the ACK, resent for every retransmitted final.
    let inv2 = request("INVITE", "z9hG4bKdrop2", 1, Transport::Udp);
    let c2 = t.send_request(ms(0), inv2.clone(), to).expect("send");
    while t.poll_transmit(ms(0), &mut Vec::new()).is_some() {}
    let busy = response(&inv2, 486, Some("b"));
    assert_eq!(
        t.handle_response(ms(5), &busy, to),
        ResponseOutcome::ForTu(c2)
    );
    let mut buf = Vec::new();
    assert!(t.poll_transmit(ms(5), &mut buf).is_some());
    assert_eq!(method_of(&buf), "ACK");
    assert_eq!(t.stats().kept_bytes, buf.len());
    assert_eq!(
        t.handle_response(ms(600), &busy, to),
        ResponseOutcome::Absorbed(c2)
    );
    buf.clear();
    assert!(t.poll_transmit(ms(600), &mut buf).is_some());
    assert_eq!(method_of(&buf), "ACK");
}

#[test]
fn the_lingering_count_is_exact_over_tcp_too() {
    // Over TCP an INVITE answered 2xx lingers in Accepted (Timer L is 64*T1 on every
    // transport); a non-INVITE ends at its final response and never lingers, so it must not
    // take from the count either.
    let mut t = Transactions::new(TxnConfig::default());
    let from = peer(1, Transport::Tcp);
    let inv = request("INVITE", "z9hG4bKtinv", 1, Transport::Tcp);
    let RequestOutcome::New(id) = t.handle_request(ms(0), &inv, from) else {
        panic!("new");
    };
    t.respond(ms(0), id, response(&inv, 200, Some("i")))
        .expect("2xx");
    assert_eq!((t.len(), t.stats().lingering), (1, 1));
    for i in 0..5 {
        let opt = request("OPTIONS", &format!("z9hG4bKto{i}"), 1, Transport::Tcp);
        let RequestOutcome::New(o) = t.handle_request(ms(0), &opt, from) else {
            panic!("new");
        };
        t.respond(ms(0), o, response(&opt, 200, Some("o")))
            .expect("final");
    }
    assert_eq!((t.len(), t.stats().lingering), (1, 1));
    while let Some(at) = t.poll_timeout() {
        t.handle_timeout(at);
    }
    assert_eq!((t.len(), t.stats().lingering), (0, 0));
}

#[test]
fn quick_status_reads_plain_status_lines_only() {
    assert_eq!(quick_status(b"SIP/2.0 180 Ringing\r\n"), Some(180));
    assert_eq!(quick_status(b"SIP/2.0 699 X\r\n"), Some(699));
    for other in [
        &b"SIP/2.0 700 X\r\n"[..],
        b"SIP/2.0 18 X\r\n",
        b"SIP/2.0 2000 OK\r\n",
        b"SIP/2.0 200",
        b"INVITE sip:a SIP/2.0\r\n",
        b"sip/2.0 200 OK\r\n",
    ] {
        assert_eq!(
            quick_status(other),
            None,
            "{:?}",
            String::from_utf8_lossy(other)
        );
    }
}

/// RFC 3261 §9.1: a cancelled INVITE whose final never comes is destroyed 64·T1 after the
/// CANCEL (with a timeout for the TU), not kept forever in `Proceeding`.
#[test]
fn a_cancelled_invite_without_a_final_ends_64_t1_after_the_cancel() {
    let mut p = Pair::new(Transport::Udp);
    let invite = request("INVITE", "z9hG4bKcan9", 5, Transport::Udp);
    let inv = p.send(invite.clone());
    p.run_until(ms(10));
    let s_inv = p.server.last_new();
    p.respond(s_inv, response(&invite, 180, Some("b")));
    p.run_until(ms(20));
    p.client.txns.cancel(p.now, inv).expect("cancel");
    p.flush();
    // The next hop answers the CANCEL but never the INVITE.
    p.run_until(ms(30));
    let s_can = p.server.last_new();
    let cancel_bytes = p.server.requests.last().expect("cancel").2.clone();
    p.respond(s_can, response(&cancel_bytes, 200, Some("b")));
    p.run_until(ms(20 + 32_000 - 1));
    assert_eq!(
        p.client.txns.client_state(inv),
        Some(ClientState::Proceeding)
    );
    p.run_until(ms(20 + 32_000));
    assert_eq!(p.client.txns.client_state(inv), None);
    assert!(
        p.client
            .events
            .iter()
            .any(|(t, e)| *t == ms(20 + 32_000) && *e == TxnEvent::ClientTimeout(inv)),
        "{:?}",
        p.client.events
    );
}
