//! Deterministic tests of the proxy core: an [`Endpoint`] between scripted user agents on an
//! in-memory network, time jumping to the next wake-up (quinn-proto's `Pair` is the model),
//! with a livelock guard.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use holdline_base::{Duration, Instant, Peer, Transport};
use holdline_sip::{HeaderName, Limits, Message, build_response};

use super::*;
use crate::dns::{DnsAnswer, DnsQuery, DnsRecords, DnsResponse, QueryKind, SrvRecord};
use crate::endpoint::{DropReason, Endpoint, StatelessFallback};
use crate::location::{Binding, LocationStore};

// ---------------------------------------------------------------- location store

#[derive(Default)]
struct MemStore(Mutex<HashMap<Vec<u8>, Vec<Binding>>>);

impl LocationStore for MemStore {
    fn lookup(&self, aor: &[u8], now: Instant, out: &mut Vec<Binding>) -> usize {
        let map = self.0.lock().expect("lock");
        let before = out.len();
        if let Some(v) = map.get(aor) {
            out.extend(v.iter().filter(|b| b.expires_at > now).cloned());
        }
        out.len() - before
    }

    fn modify(&self, aor: &[u8], now: Instant, f: &mut dyn FnMut(&mut Vec<Binding>)) {
        let mut map = self.0.lock().expect("lock");
        let mut v = map.remove(aor).unwrap_or_default();
        v.retain(|b| b.expires_at > now);
        f(&mut v);
        if !v.is_empty() {
            map.insert(aor.to_vec(), v);
        }
    }

    fn purge_expired(&self, now: Instant) -> usize {
        let mut map = self.0.lock().expect("lock");
        let mut n = 0;
        for v in map.values_mut() {
            let before = v.len();
            v.retain(|b| b.expires_at > now);
            n += before - v.len();
        }
        map.retain(|_, v| !v.is_empty());
        n
    }

    fn len(&self) -> usize {
        self.0.lock().expect("lock").values().map(Vec::len).sum()
    }
}

// ---------------------------------------------------------------- addresses and messages

const PROXY: SocketAddr = SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 100)), 5060);
const RR: &str = "<sip:10.0.0.100:5060;transport=udp;lr>";

fn ua_addr(last: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, last], 5060))
}

fn udp(addr: SocketAddr) -> Peer {
    Peer {
        addr,
        transport: Transport::Udp,
        conn: None,
    }
}

fn config() -> ProxyConfig {
    ProxyConfig {
        domains: vec!["example.com".into()],
        listen: vec![ListenAddr {
            transport: Transport::Udp,
            addr: PROXY,
        }],
        branch_seed: 7,
        ..ProxyConfig::default()
    }
}

/// A request from `from` with defaults for every mandatory header; `headers` replace a
/// default of the same name (an empty value removes it) or are appended.
fn request(
    method: &str,
    ruri: &str,
    from: SocketAddr,
    branch: &str,
    cseq: u32,
    headers: &[(&str, &str)],
) -> Vec<u8> {
    let defaults = [
        ("Via", format!("SIP/2.0/UDP {from};branch={branch};rport")),
        ("Max-Forwards", "70".to_string()),
        ("From", "<sip:alice@example.com>;tag=a1".to_string()),
        ("To", "<sip:bob@example.com>".to_string()),
        ("Call-ID", "call-1@test".to_string()),
        ("CSeq", format!("{cseq} {method}")),
        ("Contact", format!("<sip:alice@{from}>")),
    ];
    let mut out = format!("{method} {ruri} SIP/2.0\r\n");
    for (name, value) in &defaults {
        let value = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map_or(value.as_str(), |(_, v)| *v);
        if !value.is_empty() {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    for (name, value) in headers {
        if !defaults.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    out.push_str("Content-Length: 0\r\n\r\n");
    out.into_bytes()
}

fn parse(bytes: &[u8]) -> Message<'_> {
    Message::parse(bytes, &Limits::DEFAULT).expect("test message parses")
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

fn cseq_method(bytes: &[u8]) -> String {
    parse(bytes)
        .cseq()
        .map(|c| c.method.to_string())
        .unwrap_or_default()
}

fn header(bytes: &[u8], kind: HeaderName) -> Option<String> {
    parse(bytes)
        .first_value(kind)
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

fn top_branch(bytes: &[u8]) -> String {
    let m = parse(bytes);
    let via = m.top_via().expect("via");
    String::from_utf8_lossy(via.branch().unwrap_or_default()).into_owned()
}

fn reason(bytes: &[u8]) -> String {
    String::from_utf8_lossy(parse(bytes).reason().unwrap_or_default()).into_owned()
}

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

// ---------------------------------------------------------------- scripted user agents

/// How a user agent answers an INVITE.
#[derive(Clone, Copy, Debug)]
struct Script {
    /// Send 100 at once.
    trying: bool,
    /// Send 180 after this long.
    ring: Option<u64>,
    /// Send the final response after this long (ms) with this status.
    answer: Option<(u64, u16)>,
    /// Answer CANCEL (200, then 487 for the INVITE).
    answer_cancel: bool,
    /// Answer anything at all.
    silent: bool,
}

impl Script {
    const UAC: Self = Self {
        trying: false,
        ring: None,
        answer: None,
        answer_cancel: true,
        silent: false,
    };

    fn answers(ring: u64, answer: u64, status: u16) -> Self {
        Self {
            trying: true,
            ring: Some(ring),
            answer: Some((answer, status)),
            answer_cancel: true,
            silent: false,
        }
    }

    fn rings_forever() -> Self {
        Self {
            trying: true,
            ring: Some(10),
            answer: None,
            answer_cancel: true,
            silent: false,
        }
    }
}

enum Action {
    Send(Vec<u8>),
    /// The final response to the INVITE with this branch, unless one was sent already.
    Final(String, u16),
}

struct Ua {
    addr: SocketAddr,
    script: Script,
    tag: String,
    inbox: Vec<(Instant, Vec<u8>)>,
    /// INVITEs received, by branch: the request and whether it got a final response.
    invites: BTreeMap<String, (Vec<u8>, bool)>,
    scheduled: Vec<(Instant, Action)>,
}

impl Ua {
    fn new(last: u8, script: Script) -> Self {
        Self {
            addr: ua_addr(last),
            script,
            tag: format!("tag{last}"),
            inbox: Vec::new(),
            invites: BTreeMap::new(),
            scheduled: Vec::new(),
        }
    }

    fn respond(&self, req: &[u8], status: u16) -> Vec<u8> {
        let m = parse(req);
        let contact = format!("<sip:bob@{}>", self.addr);
        let mut extra: Vec<(&str, &[u8])> = m
            .values(HeaderName::RecordRoute)
            .map(|v| ("Record-Route", v.bytes))
            .collect();
        if status > 100 && status < 300 {
            extra.push(("Contact", contact.as_bytes()));
        }
        let tag = (status > 100).then_some(self.tag.as_bytes());
        let mut out = Vec::new();
        build_response(&m, status, "Scripted", tag, &extra, b"", &mut out);
        out
    }

    fn receive(&mut self, now: Instant, bytes: Vec<u8>) {
        self.inbox.push((now, bytes.clone()));
        if self.script.silent {
            return;
        }
        let method = method_of(&bytes);
        match method.as_str() {
            "" if self.script.answer.is_none()
                && status_of(&bytes) >= 300
                && cseq_method(&bytes) == "INVITE" =>
            {
                // A UAC's INVITE transaction ACKs a non-2xx final hop by hop (§17.1.1.3).
                let m = parse(&bytes);
                let mut ack = b"ACK sip:bob@example.com SIP/2.0\r\n".to_vec();
                for h in m.headers() {
                    if matches!(
                        h.kind,
                        HeaderName::Via | HeaderName::From | HeaderName::To | HeaderName::CallId
                    ) {
                        ack.extend_from_slice(m.slice(h.line_span()));
                    }
                }
                let seq = m.cseq().map(|c| c.seq).unwrap_or_default();
                ack.extend_from_slice(
                    format!("CSeq: {seq} ACK\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n")
                        .as_bytes(),
                );
                self.scheduled.push((now, Action::Send(ack)));
            }
            "" | "ACK" => {}
            "INVITE" => {
                let branch = top_branch(&bytes);
                if self.invites.contains_key(&branch) {
                    return; // retransmission
                }
                self.invites.insert(branch.clone(), (bytes.clone(), false));
                if self.script.trying {
                    let r = self.respond(&bytes, 100);
                    self.scheduled.push((now, Action::Send(r)));
                }
                if let Some(d) = self.script.ring {
                    let r = self.respond(&bytes, 180);
                    self.scheduled
                        .push((now + Duration::from_millis(d), Action::Send(r)));
                }
                if let Some((d, status)) = self.script.answer {
                    self.scheduled.push((
                        now + Duration::from_millis(d),
                        Action::Final(branch, status),
                    ));
                }
            }
            "CANCEL" => {
                if !self.script.answer_cancel {
                    return;
                }
                let r = self.respond(&bytes, 200);
                self.scheduled.push((now, Action::Send(r)));
                self.scheduled
                    .push((now, Action::Final(top_branch(&bytes), 487)));
            }
            _ => {
                let r = self.respond(&bytes, 200);
                self.scheduled.push((now, Action::Send(r)));
            }
        }
    }

    /// Messages due at `now`.
    fn due(&mut self, now: Instant) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut later = Vec::new();
        for (at, action) in std::mem::take(&mut self.scheduled) {
            if at > now {
                later.push((at, action));
                continue;
            }
            match action {
                Action::Send(b) => out.push(b),
                Action::Final(branch, status) => {
                    if let Some((req, done)) = self.invites.get_mut(&branch)
                        && !*done
                    {
                        *done = true;
                        let req = req.clone();
                        out.push(self.respond(&req, status));
                    }
                }
            }
        }
        self.scheduled = later;
        out
    }

    fn next_wake(&self) -> Option<Instant> {
        self.scheduled.iter().map(|(at, _)| *at).min()
    }

    /// Received requests of `method`.
    fn requests(&self, method: &str) -> Vec<Vec<u8>> {
        self.inbox
            .iter()
            .filter(|(_, b)| method_of(b) == method)
            .map(|(_, b)| b.clone())
            .collect()
    }

    /// Received responses with `status` to requests of `method`.
    fn responses(&self, status: u16, method: &str) -> Vec<(Instant, Vec<u8>)> {
        self.inbox
            .iter()
            .filter(|(_, b)| status_of(b) == status && cseq_method(b) == method)
            .cloned()
            .collect()
    }
}

// ---------------------------------------------------------------- the network

struct Packet {
    at: Instant,
    seq: u64,
    from: SocketAddr,
    to: SocketAddr,
    bytes: Vec<u8>,
}

struct Net {
    now: Instant,
    proxy: Endpoint,
    uas: Vec<Ua>,
    wire: Vec<Packet>,
    seq: u64,
    latency: Duration,
    /// Everything the proxy sent: (time, destination, bytes).
    sent: Vec<(Instant, SocketAddr, Vec<u8>)>,
    /// The DNS zone the proxy's lookups are answered from (absent: not found).
    zone: BTreeMap<DnsQuery, DnsAnswer>,
    /// Names whose answers take this long (others take `latency`); `Duration::MAX`: never.
    slow_names: HashMap<String, Duration>,
    /// Answers on their way back to the proxy.
    dns_wire: Vec<(Instant, DnsResponse)>,
    /// Every lookup the proxy asked for.
    dns_asked: Vec<DnsQuery>,
}

impl Net {
    fn new(config: ProxyConfig, uas: Vec<Ua>) -> Self {
        let store = Arc::new(MemStore::default());
        Self {
            now: Instant::ZERO,
            proxy: Endpoint::new(config, store),
            uas,
            wire: Vec::new(),
            seq: 0,
            latency: Duration::from_millis(1),
            sent: Vec::new(),
            zone: BTreeMap::new(),
            slow_names: HashMap::new(),
            dns_wire: Vec::new(),
            dns_asked: Vec::new(),
        }
    }

    fn ua(&self, last: u8) -> &Ua {
        let addr = ua_addr(last);
        self.uas.iter().find(|u| u.addr == addr).expect("ua exists")
    }

    fn put(&mut self, from: SocketAddr, to: SocketAddr, bytes: Vec<u8>) {
        self.seq += 1;
        self.wire.push(Packet {
            at: self.now + self.latency,
            seq: self.seq,
            from,
            to,
            bytes,
        });
    }

    /// A user agent sends `bytes` to the proxy now.
    fn send(&mut self, from_last: u8, bytes: Vec<u8>) {
        self.put(ua_addr(from_last), PROXY, bytes);
    }

    fn flush(&mut self) {
        let mut buf = Vec::new();
        while let Some(t) = self.proxy.poll_transmit(self.now, &mut buf) {
            let bytes = buf[..t.size].to_vec();
            buf.clear();
            self.sent
                .push((self.now, t.destination.addr, bytes.clone()));
            self.put(PROXY, t.destination.addr, bytes);
        }
        while self.proxy.poll_event().is_some() {}
        while let Some(q) = self.proxy.poll_dns_query() {
            self.dns_asked.push(q.clone());
            let delay = self
                .slow_names
                .get(&q.name)
                .copied()
                .unwrap_or(self.latency);
            if delay == Duration::MAX {
                continue;
            }
            let answer = self
                .zone
                .get(&q)
                .cloned()
                .unwrap_or(DnsAnswer::NotFound { ttl: None });
            self.dns_wire
                .push((self.now + delay, DnsResponse { query: q, answer }));
        }
        for i in 0..self.uas.len() {
            let now = self.now;
            let from = self.uas[i].addr;
            for b in self.uas[i].due(now) {
                self.put(from, PROXY, b);
            }
        }
    }

    fn next_wake(&self) -> Option<Instant> {
        let wire = self.wire.iter().map(|p| p.at).min();
        let uas = self.uas.iter().filter_map(Ua::next_wake).min();
        let dns = self.dns_wire.iter().map(|d| d.0).min();
        [wire, uas, dns, self.proxy.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Advances to the next event at or before `limit`; `false` when there is none.
    fn step(&mut self, limit: Instant) -> bool {
        self.flush();
        let Some(t) = self.next_wake().filter(|t| *t <= limit) else {
            return false;
        };
        self.now = self.now.max(t);
        let now = self.now;
        let mut due: Vec<Packet> = Vec::new();
        let mut i = 0;
        while i < self.wire.len() {
            if self.wire[i].at <= now {
                due.push(self.wire.swap_remove(i));
            } else {
                i += 1;
            }
        }
        due.sort_by_key(|p| (p.at, p.seq));
        let (answers, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.dns_wire)
            .into_iter()
            .partition(|d| d.0 <= now);
        self.dns_wire = later;
        for (_, r) in answers {
            self.proxy.handle_dns_response(now, r);
            self.flush();
        }
        for p in due {
            if p.to == PROXY {
                self.proxy
                    .handle(now, &p.bytes, udp(p.from), Transport::Udp);
                self.flush();
            } else if let Some(ua) = self.uas.iter_mut().find(|u| u.addr == p.to) {
                ua.receive(now, p.bytes);
            }
        }
        if self.proxy.poll_timeout().is_some_and(|t| t <= now) {
            self.proxy.handle_timeout(now);
        }
        self.flush();
        true
    }

    fn run_until(&mut self, limit: Instant) {
        let mut guard = 0;
        while self.step(limit) {
            guard += 1;
            assert!(guard < 100_000, "livelock at {}", self.now);
        }
        self.now = self.now.max(limit);
    }

    /// Runs until nothing is left to happen.
    fn run(&mut self) {
        self.run_until(Instant::MAX);
    }

    /// Registers `user@example.com` at the UA `last`, through the proxy.
    fn register(&mut self, user: &str, last: u8) {
        let contact = format!("<sip:{user}@{}>", ua_addr(last));
        let to = format!("<sip:{user}@example.com>");
        let branch = format!("z9hG4bKreg{last}{user}");
        let call_id = format!("reg-{user}-{last}");
        let req = request(
            "REGISTER",
            "sip:example.com",
            ua_addr(last),
            &branch,
            1,
            &[
                ("To", &to),
                ("From", &format!("{to};tag=r{last}")),
                ("Contact", &contact),
                ("Call-ID", &call_id),
                ("Expires", "3600"),
            ],
        );
        self.send(last, req);
        let until = self.now + Duration::from_millis(10);
        self.run_until(until);
        let ok = self
            .ua(last)
            .responses(200, "REGISTER")
            .iter()
            .any(|(_, b)| parse(b).call_id().ok() == Some(call_id.as_bytes()));
        assert!(ok, "REGISTER answered 200");
    }
}

fn alice() -> Ua {
    Ua::new(1, Script::UAC)
}

fn invite(branch: &str) -> Vec<u8> {
    request("INVITE", "sip:bob@example.com", ua_addr(1), branch, 1, &[])
}

/// Checks that the proxy keeps no state once everything has settled.
fn assert_idle(net: &Net) {
    assert!(net.proxy.transactions().is_empty(), "transactions left");
    assert_eq!(net.proxy.active_calls(), 0);
    assert_eq!(net.proxy.stats().server_transactions, 0);
    assert_eq!(net.proxy.stats().client_transactions, 0);
    assert_eq!(net.proxy.poll_timeout(), None);
}

// ---------------------------------------------------------------- tests: calls

#[test]
fn full_call_with_record_route_ack_and_bye_through_the_proxy() {
    let mut net = Net::new(
        config(),
        vec![alice(), Ua::new(2, Script::answers(10, 50, 200))],
    );
    net.register("bob", 2);
    net.send(1, invite("z9hG4bKinv1"));
    net.run_until(ms(500));

    // Bob got one INVITE: Request-URI from the binding, Record-Route, our Via on top.
    let invites = net.ua(2).requests("INVITE");
    assert_eq!(invites.len(), 1);
    let inv = parse(&invites[0]);
    assert_eq!(inv.request_uri_bytes(), Some(&b"sip:bob@10.0.0.2:5060"[..]));
    assert_eq!(
        header(&invites[0], HeaderName::RecordRoute).as_deref(),
        Some(RR)
    );
    assert_eq!(inv.max_forwards().ok().flatten(), Some(69));
    let vias: Vec<_> = inv.vias().flatten().collect();
    assert_eq!(vias.len(), 2);
    assert!(is_our_via(net.proxy.config(), &vias[0]));
    assert!(vias[0].branch().is_some_and(|b| b.starts_with(b"z9hG4bK")));
    // The original Via was annotated (RFC 3581).
    assert_eq!(vias[1].rport(), Some(Some(5060)));
    assert!(vias[1].received().is_some());

    // Alice got 100 (from the proxy), 180 and 200, with our Via gone and the Record-Route.
    let a = net.ua(1);
    assert_eq!(a.responses(100, "INVITE").len(), 1);
    assert_eq!(a.responses(180, "INVITE").len(), 1);
    let ok = a.responses(200, "INVITE");
    assert_eq!(ok.len(), 1);
    let ok = ok[0].1.clone();

    // The branch is final: no record of it is kept but the pair that forwards a 2xx that
    // bob resends before the ACK (RFC 6026) up through alice's server transaction.
    assert_eq!(net.proxy.pending_branches(), 0);
    let again = net.ua(2).respond(&invites[0], 200);
    net.send(2, again);
    net.run_until(ms(550));
    assert_eq!(net.ua(1).responses(200, "INVITE").len(), 2, "2xx resent");
    assert_eq!(parse(&ok).vias().count(), 1);
    assert_eq!(header(&ok, HeaderName::RecordRoute).as_deref(), Some(RR));
    let to = header(&ok, HeaderName::To).expect("To");
    assert!(to.contains("tag=tag2"));

    // ACK and BYE follow the route set through the proxy.
    let ack = request(
        "ACK",
        "sip:bob@10.0.0.2:5060",
        ua_addr(1),
        "z9hG4bKack1",
        1,
        &[("To", &to), ("Route", RR)],
    );
    net.send(1, ack);
    net.run_until(ms(600));
    let acks = net.ua(2).requests("ACK");
    assert_eq!(acks.len(), 1, "2xx ACK forwarded once");
    assert_eq!(
        header(&acks[0], HeaderName::Route),
        None,
        "our Route popped"
    );
    assert!(
        top_branch(&acks[0]).starts_with("z9hG4bKs"),
        "stateless branch"
    );
    assert_eq!(parse(&acks[0]).vias().count(), 2);

    let bye = request(
        "BYE",
        "sip:bob@10.0.0.2:5060",
        ua_addr(1),
        "z9hG4bKbye1",
        2,
        &[("To", &to), ("Route", RR)],
    );
    net.send(1, bye);
    net.run_until(ms(700));
    assert_eq!(net.ua(2).requests("BYE").len(), 1);
    assert_eq!(
        header(&net.ua(2).requests("BYE")[0], HeaderName::Route),
        None
    );
    assert_eq!(net.ua(1).responses(200, "BYE").len(), 1);
    // Both answered: no response context is left, while the call's four transactions
    // (Timers L, M, J, K) and the REGISTER's (J) linger, holding only what absorbing
    // retransmissions needs.
    assert_eq!(net.proxy.active_calls(), 0, "contexts freed once final");
    assert_eq!(net.proxy.pending_branches(), 0, "branches freed once final");
    let t = net.proxy.transactions().stats();
    assert_eq!((t.transactions, t.lingering), (5, 5));

    net.run();
    assert_idle(&net);
    let s = net.proxy.stats();
    assert_eq!(s.requests_in.invite, 1);
    assert_eq!(s.requests_in.ack, 1);
    assert_eq!(s.requests_in.bye, 1);
    assert_eq!(s.requests_in.register, 1);
    assert_eq!(s.forwarded, 2, "INVITE and BYE through client transactions");
    assert_eq!(s.stateless, 1, "the ACK");
    assert_eq!(s.responses_in[0], 2, "100 and 180 from bob");
    assert!(s.responses_out[1] >= 3, "REGISTER, INVITE and BYE 200s");
}

#[test]
fn udp_invite_retransmission_is_absorbed() {
    let mut net = Net::new(
        config(),
        vec![alice(), Ua::new(2, Script::answers(1000, 2000, 200))],
    );
    net.register("bob", 2);
    let inv = invite("z9hG4bKrtx");
    net.send(1, inv.clone());
    net.run_until(ms(500));
    net.send(1, inv.clone());
    net.run_until(ms(1500));
    net.send(1, inv);
    net.run_until(ms(3000));
    assert_eq!(
        net.ua(2).requests("INVITE").len(),
        1,
        "one INVITE downstream"
    );
    // The proxy's 100, then the kept 180 replayed after it, on each retransmission.
    assert_eq!(net.ua(1).responses(100, "INVITE").len(), 2);
    assert_eq!(net.ua(1).responses(180, "INVITE").len(), 2);
    assert_eq!(net.ua(1).responses(200, "INVITE").len(), 1);
    assert_eq!(net.proxy.stats().retransmissions_absorbed, 2);
}

#[test]
fn cancel_is_answered_and_propagated() {
    let mut net = Net::new(config(), vec![alice(), Ua::new(2, Script::rings_forever())]);
    net.register("bob", 2);
    net.send(1, invite("z9hG4bKc1"));
    net.run_until(ms(100));
    let cancel = request(
        "CANCEL",
        "sip:bob@example.com",
        ua_addr(1),
        "z9hG4bKc1",
        1,
        &[],
    );
    net.send(1, cancel);
    net.run_until(ms(200));

    let a = net.ua(1);
    assert_eq!(a.responses(200, "CANCEL").len(), 1, "200 for the CANCEL");
    let busy = a.responses(487, "INVITE");
    assert_eq!(busy.len(), 1, "487 for the INVITE");
    let cancels = net.ua(2).requests("CANCEL");
    assert_eq!(cancels.len(), 1, "bob got a CANCEL");
    let inv = &net.ua(2).requests("INVITE")[0];
    assert_eq!(
        top_branch(&cancels[0]),
        top_branch(inv),
        "CANCEL matches the INVITE"
    );
    // The proxy ACKed bob's 487 itself.
    assert_eq!(net.ua(2).requests("ACK").len(), 1);

    // Alice ACKs the 487 hop by hop; the proxy absorbs it.
    let to = header(&busy[0].1, HeaderName::To).expect("To");
    let ack = request(
        "ACK",
        "sip:bob@example.com",
        ua_addr(1),
        "z9hG4bKc1",
        1,
        &[("To", &to)],
    );
    net.send(1, ack);
    net.run();
    assert_eq!(
        net.ua(2).requests("ACK").len(),
        1,
        "hop-by-hop ACK not forwarded"
    );
    assert_idle(&net);
}

#[test]
fn cancel_before_any_provisional_waits_for_one() {
    // Bob sends nothing for 300 ms, then rings: the CANCEL may go only then (§9.1).
    let bob = Script {
        trying: false,
        ring: Some(300),
        answer: None,
        answer_cancel: true,
        silent: false,
    };
    let mut net = Net::new(config(), vec![alice(), Ua::new(2, bob)]);
    net.register("bob", 2);
    net.send(1, invite("z9hG4bKc2"));
    net.run_until(ms(50));
    net.send(
        1,
        request(
            "CANCEL",
            "sip:bob@example.com",
            ua_addr(1),
            "z9hG4bKc2",
            1,
            &[],
        ),
    );
    net.run_until(ms(250));
    assert!(net.ua(2).requests("CANCEL").is_empty());
    net.run_until(ms(1000));
    assert_eq!(net.ua(2).requests("CANCEL").len(), 1);
    assert_eq!(net.ua(1).responses(487, "INVITE").len(), 1);
}

#[test]
fn unmatched_cancel_is_forwarded_statelessly() {
    let mut net = Net::new(config(), vec![alice(), Ua::new(2, Script::rings_forever())]);
    net.register("bob", 2);
    net.send(
        1,
        request(
            "CANCEL",
            "sip:bob@example.com",
            ua_addr(1),
            "z9hG4bKnone",
            1,
            &[],
        ),
    );
    net.run_until(ms(100));
    let cancels = net.ua(2).requests("CANCEL");
    assert_eq!(cancels.len(), 1);
    assert!(top_branch(&cancels[0]).starts_with("z9hG4bKs"));
    assert_eq!(
        net.ua(1).responses(200, "CANCEL").len(),
        1,
        "answer routed back by Via"
    );
    net.run();
    assert_idle(&net);
}

#[test]
fn forking_first_2xx_wins_and_the_other_branch_is_cancelled() {
    let mut net = Net::new(
        config(),
        vec![
            alice(),
            Ua::new(2, Script::answers(10, 100, 200)),
            Ua::new(3, Script::rings_forever()),
        ],
    );
    net.register("bob", 2);
    net.register("bob", 3);
    net.send(1, invite("z9hG4bKf1"));
    net.run_until(ms(1000));
    assert_eq!(net.ua(2).requests("INVITE").len(), 1);
    assert_eq!(net.ua(3).requests("INVITE").len(), 1);
    assert!(net.ua(2).requests("CANCEL").is_empty());
    assert_eq!(
        net.ua(3).requests("CANCEL").len(),
        1,
        "losing branch cancelled"
    );
    let a = net.ua(1);
    assert_eq!(a.responses(200, "INVITE").len(), 1);
    assert_eq!(a.responses(180, "INVITE").len(), 2, "both rings forwarded");
    assert!(
        a.responses(487, "INVITE").is_empty(),
        "487 of the loser not forwarded"
    );
}

#[test]
fn forking_every_2xx_is_forwarded() {
    let mut net = Net::new(
        config(),
        vec![
            alice(),
            Ua::new(2, Script::answers(10, 50, 200)),
            Ua::new(3, Script::answers(10, 50, 200)),
        ],
    );
    net.register("bob", 2);
    net.register("bob", 3);
    net.send(1, invite("z9hG4bKf2"));
    net.run_until(ms(1000));
    let oks = net.ua(1).responses(200, "INVITE");
    assert_eq!(oks.len(), 2, "both 2xx forwarded");
    let tags: HashSet<String> = oks
        .iter()
        .filter_map(|(_, b)| header(b, HeaderName::To))
        .collect();
    assert_eq!(tags.len(), 2);
}

#[test]
fn forking_best_final_response_is_chosen_when_all_branches_fail() {
    let mut net = Net::new(
        config(),
        vec![
            alice(),
            Ua::new(2, Script::answers(10, 50, 486)),
            Ua::new(3, Script::answers(10, 80, 503)),
        ],
    );
    net.register("bob", 2);
    net.register("bob", 3);
    net.send(1, invite("z9hG4bKf3"));
    net.run_until(ms(1000));
    let a = net.ua(1);
    assert_eq!(a.responses(486, "INVITE").len(), 1, "4xx beats 5xx");
    assert!(a.responses(503, "INVITE").is_empty());
    // Alice's ACK of the 486 ends at the proxy (hop by hop): an ACK, not a retransmission.
    assert_eq!(net.ua(2).requests("ACK").len(), 1, "the proxy's own ACK");
    let s = net.proxy.stats();
    assert_eq!((s.acks_absorbed, s.retransmissions_absorbed), (1, 0));
}

#[test]
fn a_lone_503_goes_upstream_as_500() {
    let mut net = Net::new(
        config(),
        vec![alice(), Ua::new(2, Script::answers(10, 50, 503))],
    );
    net.register("bob", 2);
    net.send(1, invite("z9hG4bK503"));
    net.run_until(ms(1000));
    let r = net.ua(1).responses(500, "INVITE");
    assert_eq!(r.len(), 1);
    assert!(net.ua(1).responses(503, "INVITE").is_empty());
    // The 500 says what it stands for (RFC 3326), for end-to-end control upstream.
    let m = parse(&r[0].1);
    let reason = m
        .headers_named(b"Reason")
        .map(|h| String::from_utf8_lossy(m.value(h)).into_owned())
        .collect::<Vec<_>>();
    assert_eq!(reason, ["SIP;cause=503;text=\"Service Unavailable\""]);
}

/// The 500 that stands for a lone 503 keeps the 503's Retry-After (RFC 3261 §21.5.1), so
/// that a caller honouring it comes back (a phone re-registering behind an overloaded
/// second stage); without one the 500 has none.
#[test]
fn a_lone_503s_retry_after_goes_up_with_its_500() {
    for (extra, want) in [
        (&[("Retry-After", &b"7"[..])][..], vec!["7".to_string()]),
        (&[][..], Vec::new()),
    ] {
        let mut e = Endpoint::new(routed_config(), Arc::new(MemStore::default()));
        let fwd = forward_far(&mut e, 0, "z9hG4bKra");
        let mut busy = Vec::new();
        build_response(
            &parse(&fwd),
            503,
            "Service Unavailable",
            Some(b"t1"),
            extra,
            b"",
            &mut busy,
        );
        e.handle(ms(10), &busy, udp(ua_addr(5)), Transport::Udp);
        let up = drain_to(&mut e, ms(10))
            .into_iter()
            .find(|(p, b)| p.addr == ua_addr(1) && b.starts_with(b"SIP/2.0 500"))
            .map(|(_, b)| b)
            .expect("a 500 upstream");
        let m = parse(&up);
        let got: Vec<String> = m
            .headers_named(b"Retry-After")
            .map(|h| String::from_utf8_lossy(m.value(h)).into_owned())
            .collect();
        assert_eq!(got, want);
    }
}

#[test]
fn a_6xx_cancels_the_other_branches_and_is_chosen() {
    let mut net = Net::new(
        config(),
        vec![
            alice(),
            Ua::new(2, Script::answers(10, 50, 603)),
            Ua::new(3, Script::rings_forever()),
        ],
    );
    net.register("bob", 2);
    net.register("bob", 3);
    net.send(1, invite("z9hG4bK6xx"));
    net.run_until(ms(1000));
    assert_eq!(net.ua(3).requests("CANCEL").len(), 1);
    assert_eq!(net.ua(1).responses(603, "INVITE").len(), 1);
    assert!(net.ua(1).responses(487, "INVITE").is_empty());
}

// ---------------------------------------------------------------- tests: timers

#[test]
fn client_timeout_gives_408_upstream() {
    let silent = Script {
        silent: true,
        ..Script::UAC
    };
    let mut net = Net::new(config(), vec![alice(), Ua::new(2, silent)]);
    net.register("bob", 2);
    let start = net.now;
    net.send(1, invite("z9hG4bKto"));
    net.run_until(start + Duration::from_secs(40));
    let timeouts = net.ua(1).responses(408, "INVITE");
    assert_eq!(timeouts.len(), 1);
    let at = timeouts[0].0 - start;
    assert!(
        at >= Duration::from_secs(32) && at < Duration::from_secs(33),
        "Timer B: {at:?}"
    );
    // Timer A retransmitted the INVITE to bob: 0.5, 1, 2, 4, 8, 16 s.
    assert_eq!(net.ua(2).requests("INVITE").len(), 7);
}

#[test]
fn non_invite_timeout_sends_no_408() {
    let silent = Script {
        silent: true,
        ..Script::UAC
    };
    let mut net = Net::new(config(), vec![alice(), Ua::new(2, silent)]);
    net.register("bob", 2);
    let msg = request(
        "MESSAGE",
        "sip:bob@example.com",
        ua_addr(1),
        "z9hG4bKnto",
        1,
        &[],
    );
    net.send(1, msg);
    net.run();
    assert!(net.ua(1).responses(408, "MESSAGE").is_empty(), "RFC 4320");
    assert_eq!(
        net.ua(2).requests("MESSAGE").len(),
        11,
        "Timer E: 0.5, 1, 2, 4, 4, ... s"
    );
    assert_idle(&net);
}

#[test]
fn timer_c_cancels_a_ringing_branch() {
    let mut net = Net::new(config(), vec![alice(), Ua::new(2, Script::rings_forever())]);
    net.register("bob", 2);
    let start = net.now;
    net.send(1, invite("z9hG4bKtc"));
    net.run_until(start + Duration::from_secs(200));
    let cancels: Vec<_> = net
        .ua(2)
        .inbox
        .iter()
        .filter(|(_, b)| method_of(b) == "CANCEL")
        .map(|(t, _)| *t - start)
        .collect();
    assert_eq!(cancels.len(), 1);
    assert!(cancels[0] >= Duration::from_secs(180) && cancels[0] < Duration::from_secs(181));
    assert_eq!(net.ua(1).responses(487, "INVITE").len(), 1);
}

/// One call ringing (its Timer C 180 s away) while 1,500 others come and go: their stale
/// Timer C entries are swept, not kept behind the ringing one for 180 s, and the ringing
/// call's Timer C still fires.
#[test]
fn stale_timer_c_entries_behind_a_ringing_call_are_swept() {
    let mut net = Net::new(
        config(),
        vec![
            alice(),
            Ua::new(2, Script::rings_forever()),
            Ua::new(3, Script::answers(1, 2, 200)),
        ],
    );
    net.register("bob", 2);
    net.register("carol", 3);
    let start = net.now;
    net.send(1, invite("z9hG4bKring"));
    net.run_until(start + Duration::from_millis(50));
    for i in 0..1500 {
        let call_id = format!("short-{i}@test");
        let req = request(
            "INVITE",
            "sip:carol@example.com",
            ua_addr(1),
            &format!("z9hG4bKshort{i}"),
            1,
            &[("Call-ID", &call_id), ("To", "<sip:carol@example.com>")],
        );
        net.send(1, req);
        let until = net.now + Duration::from_millis(1);
        net.run_until(until);
    }
    net.run_until(net.now + Duration::from_millis(100));
    assert_eq!(net.ua(1).responses(200, "INVITE").len(), 1500);
    // Two entries per short call (its start and its 180): 3,000 without the sweep.
    assert_eq!(net.proxy.pending_branches(), 1, "only the ringing call");
    let held = net.proxy.timer_entries();
    assert!((1..=1026).contains(&held), "{held} Timer C entries held");
    net.run_until(start + Duration::from_secs(200));
    assert_eq!(net.ua(2).requests("CANCEL").len(), 1, "its Timer C fired");
    assert_eq!(net.ua(1).responses(487, "INVITE").len(), 1);
}

#[test]
fn timer_c_then_unanswered_cancel_gives_408() {
    let deaf = Script {
        answer_cancel: false,
        ..Script::rings_forever()
    };
    let mut net = Net::new(config(), vec![alice(), Ua::new(2, deaf)]);
    net.register("bob", 2);
    let start = net.now;
    net.send(1, invite("z9hG4bKtc2"));
    net.run_until(start + Duration::from_secs(300));
    let t = net.ua(1).responses(408, "INVITE");
    assert_eq!(t.len(), 1);
    let at = t[0].0 - start;
    assert!(
        at >= Duration::from_secs(212) && at < Duration::from_secs(213),
        "{at:?}"
    );
    net.run();
    assert_idle(&net);
}

// ---------------------------------------------------------------- tests: validation

fn answer_to(net: &mut Net, req: Vec<u8>) -> Vec<u8> {
    net.send(1, req);
    let until = net.now + Duration::from_millis(10);
    net.run_until(until);
    net.ua(1).inbox.last().expect("an answer").1.clone()
}

#[test]
fn max_forwards_zero_gives_483_but_options_to_us_gives_200() {
    let mut net = Net::new(config(), vec![alice()]);
    let r = answer_to(
        &mut net,
        request(
            "INVITE",
            "sip:bob@example.com",
            ua_addr(1),
            "z9hG4bKmf",
            1,
            &[("Max-Forwards", "0")],
        ),
    );
    assert_eq!(status_of(&r), 483);
    let r = answer_to(
        &mut net,
        request(
            "OPTIONS",
            "sip:10.0.0.100:5060",
            ua_addr(1),
            "z9hG4bKmf2",
            1,
            &[("Max-Forwards", "0")],
        ),
    );
    assert_eq!(status_of(&r), 200);
}

#[test]
fn options_to_the_proxy_is_answered_with_allow() {
    let mut net = Net::new(config(), vec![alice()]);
    for (i, uri) in [
        "sip:10.0.0.100",
        "sip:example.com",
        "sip:10.0.0.100:5060;transport=udp",
    ]
    .into_iter()
    .enumerate()
    {
        let r = answer_to(
            &mut net,
            request("OPTIONS", uri, ua_addr(1), &format!("z9hG4bKo{i}"), 1, &[]),
        );
        assert_eq!(status_of(&r), 200, "{uri}");
        assert!(header(&r, HeaderName::Allow).is_some_and(|a| a.contains("INVITE")));
        assert!(header(&r, HeaderName::To).is_some_and(|t| t.contains(";tag=")));
    }
}

#[test]
fn proxy_require_gives_420_with_unsupported() {
    let mut net = Net::new(config(), vec![alice()]);
    let r = answer_to(
        &mut net,
        request(
            "INVITE",
            "sip:bob@example.com",
            ua_addr(1),
            "z9hG4bKpr",
            1,
            &[("Proxy-Require", "foo, bar")],
        ),
    );
    assert_eq!(status_of(&r), 420);
    assert_eq!(
        header(&r, HeaderName::Unsupported).as_deref(),
        Some("foo, bar")
    );
}

#[test]
fn malformed_requests_get_400_with_the_reason() {
    let mut net = Net::new(config(), vec![alice()]);
    let cases: [(&[(&str, &str)], &str); 4] = [
        (&[("Call-ID", "")], "Missing Call-ID"),
        (&[("CSeq", "abc INVITE")], "Bad CSeq"),
        (&[("CSeq", "1 BYE")], "Bad CSeq"),
        (&[("From", "")], "Missing From"),
    ];
    for (i, (headers, phrase)) in cases.into_iter().enumerate() {
        let r = answer_to(
            &mut net,
            request(
                "INVITE",
                "sip:bob@example.com",
                ua_addr(1),
                &format!("z9hG4bKbad{i}"),
                1,
                headers,
            ),
        );
        assert_eq!(status_of(&r), 400, "{phrase}");
        assert_eq!(reason(&r), phrase);
    }
    // Alice ACKs each 400; the ACKs without Call-ID or From are malformed too and dropped.
    assert_eq!(net.proxy.stats().parse_errors, 6);
    assert_eq!(net.proxy.stats().dropped(DropReason::Malformed), 2);
    assert!(net.proxy.transactions().is_empty());
}

#[test]
fn unparsable_requests_are_answered_when_a_response_can_be_built() {
    let mut net = Net::new(config(), vec![alice()]);
    let base = request(
        "OPTIONS",
        "sip:bob@example.com",
        ua_addr(1),
        "z9hG4bKu",
        1,
        &[],
    );
    let text = String::from_utf8(base).expect("ascii");
    let cases = [
        (
            text.replacen("SIP/2.0\r\n", "SIP/3.0\r\n", 1),
            505,
            "Version Not Supported",
        ),
        (
            text.replacen("\r\n\r\n", "\r\nSubject: a\0b\r\n\r\n", 1),
            400,
            "NUL Byte In Headers",
        ),
        (
            text.replacen("Content-Length: 0", "Content-Length: -1", 1),
            400,
            "Bad Content-Length",
        ),
    ];
    for (req, code, phrase) in cases {
        let r = answer_to(&mut net, req.into_bytes());
        assert_eq!(status_of(&r), code, "{phrase}");
        assert_eq!(reason(&r), phrase);
    }
    // Not a request, or a request line that cannot be read: dropped and counted.
    let before = net.proxy.stats().dropped(DropReason::Unparsable);
    net.send(
        1,
        text.replacen(
            "OPTIONS sip:bob@example.com SIP/2.0",
            "OPTIONS sip:bob@example.com SIP/2.x",
            1,
        )
        .into_bytes(),
    );
    net.send(
        1,
        text.replacen("OPTIONS sip:bob@example.com SIP/2.0", "SIP/3.0 200 OK", 1)
            .into_bytes(),
    );
    let until = net.now + Duration::from_millis(10);
    net.run_until(until);
    assert_eq!(
        net.proxy.stats().dropped(DropReason::Unparsable),
        before + 2
    );
    assert_eq!(net.proxy.stats().parse_errors, 5);
}

#[test]
fn unknown_user_in_a_served_domain_gets_404() {
    let mut net = Net::new(config(), vec![alice()]);
    let r = answer_to(
        &mut net,
        request(
            "INVITE",
            "sip:nobody@example.com",
            ua_addr(1),
            "z9hG4bK404",
            1,
            &[],
        ),
    );
    assert_eq!(status_of(&r), 404);
    // Unroutable host name (no DNS yet) too.
    let r = answer_to(
        &mut net,
        request(
            "MESSAGE",
            "sip:x@nowhere.invalid",
            ua_addr(1),
            "z9hG4bK4042",
            1,
            &[],
        ),
    );
    assert_eq!(status_of(&r), 404);
}

#[test]
fn a_user_at_the_proxy_address_follows_the_default_route_without_a_binding() {
    let mut c = config();
    c.static_routes = vec![StaticRoute {
        domain: "*".into(),
        next_hop: ua_addr(5),
        transport: Transport::Udp,
        stateless: false,
        edge: None,
    }];
    let mut net = Net::new(c, vec![alice(), Ua::new(5, Script::answers(10, 20, 200))]);
    // What SIPp's built-in uac sends: the Request-URI is the proxy's own address.
    let ruri = format!("sip:service@{PROXY}");
    net.send(1, request("INVITE", &ruri, ua_addr(1), "z9hG4bKme", 1, &[]));
    net.run_until(ms(100));
    let got = net.ua(5).requests("INVITE");
    assert_eq!(got.len(), 1, "forwarded once to the default route");
    assert_eq!(parse(&got[0]).request_uri_bytes(), Some(ruri.as_bytes()));
    // Without a static route the same request is a 404.
    let mut net = Net::new(config(), vec![alice()]);
    let r = answer_to(
        &mut net,
        request("INVITE", &ruri, ua_addr(1), "z9hG4bKme2", 1, &[]),
    );
    assert_eq!(status_of(&r), 404);
}

#[test]
fn a_request_routed_to_the_proxy_itself_gets_482_and_is_never_sent_there() {
    // The default route points back at the proxy's own socket.
    let mut c = config();
    c.static_routes = vec![StaticRoute {
        domain: "*".into(),
        next_hop: PROXY,
        transport: Transport::Udp,
        stateless: false,
        edge: None,
    }];
    let mut net = Net::new(c, vec![alice()]);
    net.send(
        1,
        request(
            "INVITE",
            "sip:carol@elsewhere.example",
            ua_addr(1),
            "z9hG4bKloop",
            1,
            &[],
        ),
    );
    net.run_until(ms(100));
    assert_eq!(net.ua(1).responses(482, "INVITE").len(), 1);
    let to_self = net.sent.iter().filter(|(_, to, _)| *to == PROXY).count();
    assert_eq!(to_self, 0, "nothing is sent to our own socket");
    assert_eq!(net.proxy.stats().to_own_socket, 1);
}

#[test]
fn a_request_that_comes_back_through_another_proxy_gets_482() {
    // Everything for elsewhere goes to proxy 5, which (misconfigured) sends it back.
    let mut c = config();
    c.static_routes = vec![StaticRoute {
        domain: "*".into(),
        next_hop: ua_addr(5),
        transport: Transport::Udp,
        stateless: false,
        edge: None,
    }];
    let mut net = Net::new(c, vec![alice(), Ua::new(5, Script::rings_forever())]);
    net.send(
        1,
        request(
            "INVITE",
            "sip:carol@elsewhere.example",
            ua_addr(1),
            "z9hG4bKloop2",
            1,
            &[],
        ),
    );
    net.run_until(ms(50));
    let relayed = net.ua(5).requests("INVITE");
    assert_eq!(relayed.len(), 1);
    // Proxy 5 relays it back with its own Via on top: §16.3 step 4 finds our Via with the
    // same loop hash.
    let text = String::from_utf8(relayed[0].clone()).expect("utf-8");
    let (line, rest) = text.split_once("\r\n").expect("start line");
    let back = format!(
        "{line}\r\nVia: SIP/2.0/UDP {};branch=z9hG4bKp5back\r\n{rest}",
        ua_addr(5)
    );
    net.put(ua_addr(5), PROXY, back.into_bytes());
    net.run_until(ms(100));
    assert_eq!(net.ua(5).responses(482, "INVITE").len(), 1);
}

#[test]
fn options_to_the_proxy_address_without_a_port_is_answered_not_forwarded() {
    // The proxy listens on 10.0.0.100:15060; `sip:100@10.0.0.100` (no port, a user) is for
    // it, although the `*` route would otherwise take it (a health check or a scanner).
    let at = SocketAddr::from(([10, 0, 0, 100], 15060));
    let mut c = config();
    c.listen = vec![ListenAddr {
        transport: Transport::Udp,
        addr: at,
    }];
    // Relaying to a literal address is the point of the last part: allowed for this test.
    c.relay = RelayPolicy::Open;
    c.static_routes = vec![StaticRoute {
        domain: "*".into(),
        next_hop: ua_addr(5),
        transport: Transport::Udp,
        stateless: false,
        edge: None,
    }];
    let mut net = Net::new(c, vec![alice(), Ua::new(5, Script::answers(1, 2, 200))]);
    let r = answer_to(
        &mut net,
        request(
            "OPTIONS",
            "sip:100@10.0.0.100",
            ua_addr(1),
            "z9hG4bKo1",
            1,
            &[],
        ),
    );
    assert_eq!(status_of(&r), 200);
    assert!(header(&r, HeaderName::Allow).is_some());
    assert!(net.ua(5).requests("OPTIONS").is_empty(), "not forwarded");
    // A port that is not ours is somebody else's (another server on the same host): the
    // request goes there.
    let other = SocketAddr::from(([10, 0, 0, 100], 5099));
    net.send(
        1,
        request(
            "OPTIONS",
            "sip:100@10.0.0.100:5099",
            ua_addr(1),
            "z9hG4bKo2",
            1,
            &[],
        ),
    );
    net.run_until(ms(100));
    let sent = net
        .sent
        .iter()
        .filter(|(_, to, b)| *to == other && method_of(b) == "OPTIONS")
        .count();
    assert!(sent >= 1, "forwarded to {other}");
}

#[test]
fn a_wildcard_listener_answers_to_the_host_addresses() {
    let mut c = config();
    c.listen = vec![ListenAddr {
        transport: Transport::Udp,
        addr: SocketAddr::from(([0, 0, 0, 0], 5060)),
    }];
    c.host_addresses = vec![IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 100))];
    let me = |u: &str| {
        let b = format!("INVITE {u} SIP/2.0\r\nContent-Length: 0\r\n\r\n");
        let m = Message::parse(b.as_bytes(), &Limits::DEFAULT).expect("parse");
        let uri = m.request_uri().expect("uri");
        is_me_uri(&c, &uri)
    };
    assert!(me("sip:10.0.0.100"));
    assert!(me("sip:x@10.0.0.100:5060"));
    assert!(me("sip:127.0.0.1"), "loopback");
    assert!(!me("sip:10.0.0.101"), "not a host address");
    assert!(!me("sip:10.0.0.100:5070"), "not our port");
    assert!(!me("sip:[::1]"), "another family");
}

#[test]
fn spiral_through_a_different_request_uri_is_not_a_loop() {
    let c = config();
    let msg_bytes = request(
        "INVITE",
        "sip:bob@example.com",
        ua_addr(1),
        "z9hG4bKx",
        1,
        &[],
    );
    let m = parse(&msg_bytes);
    let plan = RoutePlan::new(&c, &m).expect("plan");
    let h1 = plan.loop_hash(&m);
    let other = request("INVITE", "sip:bob@10.0.0.2", ua_addr(1), "z9hG4bKx", 1, &[]);
    let m2 = parse(&other);
    let h2 = RoutePlan::new(&c, &m2).expect("plan").loop_hash(&m2);
    assert_ne!(h1, h2);
    let branch = format!("z9hG4bK{h1:016x}.abc");
    assert_eq!(branch_loop_hash(branch.as_bytes()), Some(h1));
    assert_eq!(branch_loop_hash(b"z9hG4bKs0123456789abcdef"), None);
}

// ---------------------------------------------------------------- tests: routing

#[test]
fn stateless_static_route_keeps_no_state() {
    let mut c = config();
    c.static_routes = vec![StaticRoute {
        domain: "stateless.example".into(),
        next_hop: ua_addr(4),
        transport: Transport::Udp,
        stateless: true,
        edge: None,
    }];
    let mut net = Net::new(c, vec![alice(), Ua::new(4, Script::answers(10, 20, 200))]);
    let msg = request(
        "MESSAGE",
        "sip:x@stateless.example",
        ua_addr(1),
        "z9hG4bKsl",
        1,
        &[],
    );
    net.send(1, msg.clone());
    net.run_until(ms(5));
    assert!(net.proxy.transactions().is_empty());
    net.send(1, msg);
    net.run_until(ms(50));
    let got = net.ua(4).requests("MESSAGE");
    assert_eq!(got.len(), 2, "each copy forwarded");
    assert_eq!(
        top_branch(&got[0]),
        top_branch(&got[1]),
        "same branch for a retransmission"
    );
    assert_eq!(
        net.ua(1).responses(200, "MESSAGE").len(),
        2,
        "responses routed back by Via"
    );
    assert!(net.proxy.transactions().is_empty());
    assert_eq!(net.proxy.stats().server_transactions, 0);
    assert_eq!(net.proxy.stats().stateless, 4);

    // A stateless INVITE: its provisional and final responses come back by Via too.
    let inv = request(
        "INVITE",
        "sip:x@stateless.example",
        ua_addr(1),
        "z9hG4bKsl2",
        2,
        &[],
    );
    net.send(1, inv);
    net.run_until(ms(200));
    assert_eq!(net.ua(1).responses(180, "INVITE").len(), 1);
    assert_eq!(net.ua(1).responses(200, "INVITE").len(), 1);
    assert!(net.proxy.transactions().is_empty());
}

#[test]
fn static_route_forwards_statefully() {
    let mut c = config();
    c.static_routes = vec![StaticRoute {
        domain: "*".into(),
        next_hop: ua_addr(5),
        transport: Transport::Udp,
        stateless: false,
        edge: None,
    }];
    let mut net = Net::new(c, vec![alice(), Ua::new(5, Script::answers(10, 20, 200))]);
    net.send(
        1,
        request(
            "INVITE",
            "sip:carol@carrier.example",
            ua_addr(1),
            "z9hG4bKsr",
            1,
            &[],
        ),
    );
    net.run_until(ms(100));
    let got = net.ua(5).requests("INVITE");
    assert_eq!(got.len(), 1);
    assert_eq!(
        parse(&got[0]).request_uri_bytes(),
        Some(&b"sip:carol@carrier.example"[..])
    );
    assert_eq!(net.ua(1).responses(200, "INVITE").len(), 1);
}

#[test]
fn ip_literal_request_uri_uses_its_port_and_transport() {
    let c = config();
    let m_bytes = request(
        "INVITE",
        "sip:bob@10.0.0.9:5070;transport=tcp",
        ua_addr(1),
        "z9hG4bKip",
        1,
        &[],
    );
    let m = parse(&m_bytes);
    let plan = RoutePlan::new(&c, &m).expect("plan");
    let dest = resolve_uri(&c, &plan.ruri, true).expect("resolves");
    assert_eq!(dest.addr, SocketAddr::from(([10, 0, 0, 9], 5070)));
    assert_eq!(dest.transport, Transport::Tcp);
}

#[test]
fn strict_router_fix_up_and_loose_route_pop() {
    let c = config();
    // A strict router sent us the request with our Record-Route value as Request-URI.
    let bytes = request(
        "BYE",
        "sip:10.0.0.100:5060;transport=udp;lr",
        ua_addr(1),
        "z9hG4bKsr1",
        2,
        &[("Route", "<sip:p2.example;lr>, <sip:bob@10.0.0.2:5060>")],
    );
    let m = parse(&bytes);
    let plan = RoutePlan::new(&c, &m).expect("plan");
    assert_eq!(plan.ruri.as_bytes(), b"sip:bob@10.0.0.2:5060");
    assert_eq!(
        plan.next_route.map(|u| u.as_bytes()),
        Some(&b"sip:p2.example;lr"[..])
    );
    let mut ed = holdline_sip::Editor::new(&m);
    for s in &plan.remove {
        ed.replace(*s, b"").expect("remove");
    }
    let mut out = Vec::new();
    ed.emit(&mut out);
    assert_eq!(
        header(&out, HeaderName::Route).as_deref(),
        Some("<sip:p2.example;lr>")
    );

    // Loose routing: our own Route on top (alone on its line, then in a list) is removed.
    for route in [
        &[("Route", RR), ("Route", "<sip:p3.example;lr>")][..],
        &[("Route", "<sip:10.0.0.100;lr>, <sip:p3.example;lr>")][..],
    ] {
        let bytes = request(
            "BYE",
            "sip:bob@10.0.0.2",
            ua_addr(1),
            "z9hG4bKsr2",
            2,
            route,
        );
        let m = parse(&bytes);
        let plan = RoutePlan::new(&c, &m).expect("plan");
        assert_eq!(
            plan.next_route.map(|u| u.as_bytes()),
            Some(&b"sip:p3.example;lr"[..])
        );
        let mut ed = holdline_sip::Editor::new(&m);
        for s in &plan.remove {
            ed.replace(*s, b"").expect("remove");
        }
        let mut out = Vec::new();
        ed.emit(&mut out);
        let routes: Vec<String> = parse(&out)
            .values(HeaderName::Route)
            .map(|v| String::from_utf8_lossy(v.bytes).into_owned())
            .collect();
        assert_eq!(routes, ["<sip:p3.example;lr>"]);
    }
}

#[test]
fn tcp_binding_is_reached_over_its_connection_with_double_record_route() {
    use holdline_base::ConnId;
    let mut c = config();
    let tcp_addr = SocketAddr::from(([10, 0, 0, 100], 5060));
    c.listen.push(ListenAddr {
        transport: Transport::Tcp,
        addr: tcp_addr,
    });
    let mut p = Endpoint::new(c, Arc::new(MemStore::default()));
    let bob = Peer {
        addr: SocketAddr::from(([10, 0, 0, 2], 40000)),
        transport: Transport::Tcp,
        conn: Some(ConnId(9)),
    };
    let reg = request(
        "REGISTER",
        "sip:example.com",
        ua_addr(2),
        "z9hG4bKtcpreg",
        1,
        &[
            ("Via", "SIP/2.0/TCP 10.0.0.2:5060;branch=z9hG4bKtcpreg"),
            ("To", "<sip:bob@example.com>"),
            ("Contact", "<sip:bob@10.0.0.2:5060;transport=tcp>"),
        ],
    );
    let mut buf = Vec::new();
    p.handle(ms(1), &reg, bob, Transport::Tcp);
    let t = p.poll_transmit(ms(1), &mut buf).expect("REGISTER answered");
    assert_eq!(t.destination, bob, "response on the incoming connection");
    assert_eq!(status_of(&buf), 200);
    buf.clear();

    // An INVITE without Content-Length over UDP goes out over bob's connection, framed.
    let mut inv = invite("z9hG4bKtcp");
    let cl = b"Content-Length: 0\r\n";
    let at = inv.windows(cl.len()).position(|w| w == cl).expect("has CL");
    inv.drain(at..at + cl.len());
    p.handle(ms(2), &inv, udp(ua_addr(1)), Transport::Udp);
    let mut out = Vec::new();
    while let Some(t) = p.poll_transmit(ms(2), &mut buf) {
        out.push((t.destination, buf[..t.size].to_vec()));
        buf.clear();
    }
    let (dest, fwd) = out
        .iter()
        .find(|(_, b)| method_of(b) == "INVITE")
        .expect("forwarded");
    assert_eq!(*dest, bob);
    let m = parse(fwd);
    assert_eq!(m.content_length(), Some(0));
    assert_eq!(m.top_via().expect("via").transport, Some(Transport::Tcp));
    let rrs: Vec<String> = m
        .values(HeaderName::RecordRoute)
        .map(|v| String::from_utf8_lossy(v.bytes).into_owned())
        .collect();
    assert_eq!(
        rrs,
        [
            "<sip:10.0.0.100:5060;transport=tcp;lr>",
            "<sip:10.0.0.100:5060;transport=udp;lr>"
        ]
    );
    // In-dialog, both of our Route values are consumed.
    let bye = request(
        "BYE",
        "sip:bob@10.0.0.2:5060;transport=tcp",
        ua_addr(1),
        "z9hG4bKtcpbye",
        2,
        &[
            ("To", "<sip:bob@example.com>;tag=b"),
            (
                "Route",
                "<sip:10.0.0.100:5060;transport=udp;lr>, <sip:10.0.0.100:5060;transport=tcp;lr>",
            ),
        ],
    );
    let m = parse(&bye);
    let plan = RoutePlan::new(p.config(), &m).expect("plan");
    assert!(plan.next_route.is_none());
    assert_eq!(plan.remove.len(), 1, "the whole Route line");
}

#[test]
fn best_response_ranking() {
    let best = |codes: &[u16]| {
        *codes
            .iter()
            .min_by_key(|c| response_rank(**c))
            .expect("one")
    };
    assert_eq!(best(&[486, 302, 500]), 302);
    assert_eq!(best(&[486, 603, 302]), 603);
    assert_eq!(best(&[404, 407, 486]), 407);
    assert_eq!(best(&[503, 502]), 502);
}

#[test]
fn responses_with_a_foreign_via_are_dropped() {
    let mut net = Net::new(config(), vec![alice()]);
    let req = request(
        "OPTIONS",
        "sip:x@example.net",
        ua_addr(1),
        "z9hG4bKfv",
        1,
        &[],
    );
    let mut resp = Vec::new();
    build_response(&parse(&req), 200, "OK", Some(b"t"), &[], b"", &mut resp);
    net.send(1, resp);
    net.run_until(ms(10));
    assert_eq!(net.proxy.stats().dropped(DropReason::StrayResponse), 1);
    assert!(net.sent.is_empty());
}

// ---------------------------------------------------------------- malformed input

mod fuzz {
    use proptest::prelude::*;

    use super::*;

    fn feed(bytes: &[u8]) {
        let mut p = Endpoint::new(config(), Arc::new(MemStore::default()));
        let from = udp(ua_addr(1));
        p.handle(ms(1), bytes, from, Transport::Udp);
        let mut buf = Vec::new();
        let mut now = ms(1);
        for _ in 0..64 {
            while p.poll_transmit(now, &mut buf).is_some() {}
            while p.poll_event().is_some() {}
            match p.poll_timeout() {
                Some(t) => {
                    now = t.max(now);
                    p.handle_timeout(now);
                }
                None => break,
            }
        }
    }

    fn templates() -> Vec<Vec<u8>> {
        let inv = request(
            "INVITE",
            "sip:bob@example.com",
            ua_addr(1),
            "z9hG4bKfz",
            1,
            &[("Route", RR), ("Proxy-Require", "x")],
        );
        let mut resp = Vec::new();
        build_response(
            &parse(&inv),
            180,
            "Ringing",
            Some(b"t"),
            &[],
            b"",
            &mut resp,
        );
        let mut ours = Vec::new();
        let via_ours = request(
            "INVITE",
            "sip:bob@example.com",
            ua_addr(1),
            "z9hG4bKfz",
            1,
            &[(
                "Via",
                "SIP/2.0/UDP 10.0.0.100:5060;branch=z9hG4bKs0011223344556677, SIP/2.0/UDP 10.0.0.1;rport=5060;received=10.0.0.1",
            )],
        );
        build_response(
            &parse(&via_ours),
            200,
            "OK",
            Some(b"t"),
            &[],
            b"",
            &mut ours,
        );
        vec![
            inv,
            resp,
            ours,
            request(
                "CANCEL",
                "sip:10.0.0.100",
                ua_addr(1),
                "z9hG4bKfz",
                1,
                &[("Route", "<sip:bob@10.0.0.2>")],
            ),
            request(
                "ACK",
                "sip:bob@example.com",
                ua_addr(1),
                "z9hG4bKfz",
                1,
                &[],
            ),
        ]
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            feed(&bytes);
        }

        #[test]
        fn mutated_messages_never_panic(
            which in 0usize..5,
            edits in proptest::collection::vec((0usize..700, any::<u8>()), 1..6),
            cut in 0usize..700,
        ) {
            let mut m = templates().swap_remove(which);
            for (pos, byte) in edits {
                if !m.is_empty() {
                    let i = pos % m.len();
                    m[i] = byte;
                }
            }
            m.truncate(cut.max(1).min(m.len()));
            feed(&m);
        }
    }
}

// ---------------------------------------------------------------- tests: admission gate

fn gate_endpoint() -> Endpoint {
    Endpoint::new(config(), Arc::new(MemStore::default()))
}

fn drain(e: &mut Endpoint) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(t) = e.poll_transmit(ms(0), &mut buf) {
        out.push(buf[..t.size].to_vec());
        buf.clear();
    }
    out
}

const REJECT: crate::endpoint::GateRejection = crate::endpoint::GateRejection {
    status: 503,
    reason: "Service Unavailable",
    retry_after_secs: None,
    text: None,
};

#[test]
fn gate_rejects_a_new_invite_statelessly_with_503() {
    let mut e = gate_endpoint();
    let mut asked = 0;
    let rejected = e.handle_admitting(
        ms(0),
        &invite("z9hG4bKg1"),
        udp(ua_addr(1)),
        Transport::Udp,
        &mut |_, _| {
            asked += 1;
            Some(REJECT)
        },
        &mut |_, _| None,
    );
    assert!(rejected);
    assert_eq!(asked, 1);
    let out = drain(&mut e);
    assert_eq!(
        out.len(),
        1,
        "only the 503, no 100 Trying and nothing forwarded"
    );
    assert_eq!(status_of(&out[0]), 503);
    assert_eq!(header(&out[0], HeaderName::RetryAfter), None);
    assert!(!String::from_utf8_lossy(&out[0]).contains("Reason:"));
    assert!(
        header(&out[0], HeaderName::To).is_some_and(|t| t.contains("tag=")),
        "the 503 carries a To tag"
    );
    assert!(
        e.transactions().is_empty(),
        "no transaction for a rejected INVITE"
    );
    assert_eq!(e.stats().rejected_by_gate, 1);
    assert_eq!(e.stats().requests_in.invite, 1);
}

/// A REGISTER for the registrar is new work: the gate is asked once, as a new registration
/// while its address-of-record has no binding and as a refresh once it has one; a rejected
/// REGISTER gets the 503 with its Retry-After and stores nothing; a retransmission of an
/// admitted REGISTER is answered by its transaction without asking again.
#[test]
fn gate_classifies_registers_as_new_registrations_or_refreshes() {
    use holdline_overload::Class;
    let mut e = gate_endpoint();
    let from = udp(ua_addr(1));
    let reg = |branch: &str, cseq: u32| {
        request(
            "REGISTER",
            "sip:example.com",
            ua_addr(1),
            branch,
            cseq,
            &[("To", "<sip:bob@example.com>"), ("Expires", "600")],
        )
    };
    let mut asked = Vec::new();
    // Puts `msg` through the gate answering `answer`; whether it ended there, what went out.
    let mut put = |e: &mut Endpoint, at: u64, msg: &[u8], answer| {
        let ended = e.handle_admitting(
            ms(at),
            msg,
            from,
            Transport::Udp,
            &mut |ask, _| {
                asked.push(ask);
                answer
            },
            &mut |_, _| None,
        );
        (ended, drain(e))
    };
    // Rejected: 503 with the driver's Retry-After, no binding.
    let r = crate::endpoint::GateRejection {
        retry_after_secs: Some(37),
        ..REJECT
    };
    let (ended, out) = put(&mut e, 0, &reg("z9hG4bKr1", 1), Some(r));
    assert!(ended);
    assert_eq!(out.len(), 1);
    assert_eq!(status_of(&out[0]), 503);
    assert_eq!(
        header(&out[0], HeaderName::RetryAfter).as_deref(),
        Some("37")
    );
    assert_eq!(e.stats().requests_in.register, 1);
    assert_eq!(e.stats().requests_in.invite, 0);
    // Admitted: 200, and the binding is there.
    let admitted = reg("z9hG4bKr2", 2);
    let (ended, out) = put(&mut e, 1, &admitted, None);
    assert!(!ended);
    assert_eq!(
        status_of(&out[0]),
        200,
        "{}",
        String::from_utf8_lossy(&out[0])
    );
    // Its retransmission: answered again by the transaction, not asked about.
    let (ended, out) = put(&mut e, 2, &admitted, Some(REJECT));
    assert!(!ended);
    assert_eq!(status_of(&out[0]), 200);
    // The next REGISTER of that address-of-record is a refresh.
    let (ended, _) = put(&mut e, 3, &reg("z9hG4bKr3", 3), Some(REJECT));
    assert!(ended);
    assert_eq!(
        asked,
        vec![
            Class::NewRegistration,
            Class::NewRegistration,
            Class::Refresh
        ]
    );
    assert_eq!(e.stats().rejected_by_gate, 2);
}

#[test]
fn gate_puts_retry_after_when_configured() {
    let mut e = gate_endpoint();
    let r = crate::endpoint::GateRejection {
        retry_after_secs: Some(3),
        text: Some("Overload: occupancy"),
        ..REJECT
    };
    assert!(e.handle_admitting(
        ms(0),
        &invite("z9hG4bKg2"),
        udp(ua_addr(1)),
        Transport::Udp,
        &mut |_, _| Some(r),
        &mut |_, _| None,
    ));
    let out = drain(&mut e);
    assert_eq!(
        header(&out[0], HeaderName::RetryAfter).as_deref(),
        Some("3")
    );
    assert!(
        String::from_utf8_lossy(&out[0])
            .contains("\r\nReason: SIP;cause=503;text=\"Overload: occupancy\"\r\n"),
        "{}",
        String::from_utf8_lossy(&out[0])
    );
}

#[test]
fn gate_is_never_asked_about_admitted_calls_or_other_messages() {
    let mut e = gate_endpoint();
    let from = udp(ua_addr(1));
    // Admit one INVITE: it creates a server transaction.
    let inv = invite("z9hG4bKg3");
    assert!(!e.handle_admitting(
        ms(0),
        &inv,
        from,
        Transport::Udp,
        &mut |_, _| None,
        &mut |_, _| { None }
    ));
    assert!(!e.transactions().is_empty());
    drain(&mut e);
    let mut asked = 0;
    let mut gate = |_, _| {
        asked += 1;
        Some(REJECT)
    };
    // Its retransmission, a re-INVITE (To tag), ACK, BYE, CANCEL, a REGISTER for a domain
    // served elsewhere (proxied, not registered), OPTIONS and a response are all handled as
    // usual, without asking the gate.
    let to = [("To", "<sip:bob@example.com>;tag=b1")];
    let msgs = [
        inv.clone(),
        request(
            "INVITE",
            "sip:bob@example.com",
            ua_addr(1),
            "z9hG4bKg4",
            2,
            &to,
        ),
        request(
            "ACK",
            "sip:bob@example.com",
            ua_addr(1),
            "z9hG4bKg5",
            2,
            &to,
        ),
        request(
            "BYE",
            "sip:bob@example.com",
            ua_addr(1),
            "z9hG4bKg6",
            3,
            &to,
        ),
        request(
            "CANCEL",
            "sip:bob@example.com",
            ua_addr(1),
            "z9hG4bKg3",
            1,
            &[],
        ),
        request(
            "REGISTER",
            "sip:elsewhere.example.org",
            ua_addr(1),
            "z9hG4bKg7",
            1,
            &[("To", "<sip:bob@elsewhere.example.org>")],
        ),
        request(
            "OPTIONS",
            "sip:bob@example.com",
            ua_addr(1),
            "z9hG4bKg8",
            1,
            &[],
        ),
    ];
    for m in &msgs {
        assert!(!e.handle_admitting(ms(1), m, from, Transport::Udp, &mut gate, &mut |_, _| None));
    }
    let mut resp = Vec::new();
    build_response(
        &parse(&inv),
        180,
        "Ringing",
        Some(b"b1"),
        &[],
        b"",
        &mut resp,
    );
    assert!(!e.handle_admitting(
        ms(1),
        &resp,
        udp(ua_addr(2)),
        Transport::Udp,
        &mut gate,
        &mut |_, _| None
    ));
    // A malformed INVITE goes the usual way too (400), not to the gate.
    let bad = request(
        "INVITE",
        "sip:bob@example.com",
        ua_addr(1),
        "z9hG4bKg9",
        1,
        &[("CSeq", "x")],
    );
    assert!(
        !e.handle_admitting(ms(1), &bad, from, Transport::Udp, &mut gate, &mut |_, _| {
            None
        })
    );
    assert_eq!(asked, 0, "the gate is asked about new work only");
    assert_eq!(e.stats().rejected_by_gate, 0);
    assert_eq!(
        e.stats().retransmissions_absorbed,
        1,
        "the INVITE retransmission"
    );
}

#[test]
fn gate_absorbs_the_ack_of_its_rejection_and_nothing_else() {
    let mut e = gate_endpoint();
    let from = udp(ua_addr(1));
    let inv = invite("z9hG4bKga");
    assert!(e.handle_admitting(
        ms(0),
        &inv,
        from,
        Transport::Udp,
        &mut |_, _| Some(REJECT),
        &mut |_, _| None
    ));
    let out = drain(&mut e);
    let to = header(&out[0], HeaderName::To).expect("To");
    // The same INVITE rejected again (a retransmission) gets the same To tag: stateless.
    assert!(e.handle_admitting(
        ms(1),
        &inv,
        from,
        Transport::Udp,
        &mut |_, _| Some(REJECT),
        &mut |_, _| None
    ));
    assert_eq!(header(&drain(&mut e)[0], HeaderName::To), Some(to.clone()));
    // The caller's ACK (same branch, CSeq number, Call-ID, From tag; the 503's To tag).
    let ack = request(
        "ACK",
        "sip:bob@example.com",
        ua_addr(1),
        "z9hG4bKga",
        1,
        &[("To", &to)],
    );
    let mut asked = 0;
    assert!(e.handle_admitting(
        ms(2),
        &ack,
        from,
        Transport::Udp,
        &mut |_, _| {
            asked += 1;
            None
        },
        &mut |_, _| None
    ));
    assert_eq!(asked, 0);
    assert!(
        drain(&mut e).is_empty(),
        "the ACK is absorbed, not forwarded"
    );
    assert_eq!(e.stats().gate_acks_absorbed, 1);
    // An ACK whose tag only looks like ours (other branch) goes the usual way.
    let other = request(
        "ACK",
        "sip:bob@example.com",
        ua_addr(1),
        "z9hG4bKgb",
        1,
        &[("To", &to)],
    );
    assert!(!e.handle_admitting(
        ms(3),
        &other,
        from,
        Transport::Udp,
        &mut |_, _| None,
        &mut |_, _| None
    ));
    assert_eq!(e.stats().gate_acks_absorbed, 1);
}

#[test]
fn another_worker_with_the_same_gate_key_absorbs_the_ack_of_a_rejection() {
    // Workers of one server differ in their branch seeds and share the gate key: a 503
    // built by the worker that read the INVITE (a deferred INVITE that waited too long) is
    // acknowledged to the worker that owns the call.
    let worker = |branch_seed, gate_key| {
        Endpoint::new(
            ProxyConfig {
                branch_seed,
                gate_key,
                ..config()
            },
            Arc::new(MemStore::default()),
        )
    };
    let (mut reader, mut owner, mut stranger) = (worker(1, 42), worker(2, 42), worker(3, 43));
    let from = udp(ua_addr(1));
    assert!(reader.handle_admitting(
        ms(0),
        &invite("z9hG4bKgk"),
        from,
        Transport::Udp,
        &mut |_, _| Some(REJECT),
        &mut |_, _| None
    ));
    let to = header(&drain(&mut reader)[0], HeaderName::To).expect("To");
    let ack = request(
        "ACK",
        "sip:bob@example.com",
        ua_addr(1),
        "z9hG4bKgk",
        1,
        &[("To", &to)],
    );
    assert!(owner.handle_admitting(
        ms(1),
        &ack,
        from,
        Transport::Udp,
        &mut |_, _| None,
        &mut |_, _| { None }
    ));
    assert!(drain(&mut owner).is_empty(), "absorbed, not forwarded");
    assert_eq!(owner.stats().gate_acks_absorbed, 1);
    // A server with another key does not take the tag for its own.
    assert!(!stranger.handle_admitting(
        ms(1),
        &ack,
        from,
        Transport::Udp,
        &mut |_, _| None,
        &mut |_, _| None
    ));
    assert_eq!(stranger.stats().gate_acks_absorbed, 0);
}

#[test]
fn forward_gate_rejects_a_new_invite_when_every_next_hop_refuses_it() {
    let mut e = gate_endpoint();
    let from = udp(ua_addr(1));
    // bob is registered at 10.0.0.2: the INVITE has one next hop.
    let reg = request(
        "REGISTER",
        "sip:example.com",
        ua_addr(2),
        "z9hG4bKfr",
        1,
        &[
            ("To", "<sip:bob@example.com>"),
            ("From", "<sip:bob@example.com>;tag=r"),
            ("Contact", "<sip:bob@10.0.0.2:5060>"),
        ],
    );
    e.handle(ms(0), &reg, udp(ua_addr(2)), Transport::Udp);
    drain(&mut e);
    let mut asked = Vec::new();
    let rejected = e.handle_admitting(
        ms(1),
        &invite("z9hG4bKf1"),
        from,
        Transport::Udp,
        &mut |_, _| None,
        &mut |dest, _| {
            asked.push(dest.addr);
            Some(REJECT)
        },
    );
    assert!(!rejected, "admitted at ingress");
    assert_eq!(asked, vec![ua_addr(2)], "asked about the one next hop");
    let out = drain(&mut e);
    let statuses: Vec<u16> = out.iter().map(|m| status_of(m)).collect();
    assert_eq!(
        statuses,
        vec![503],
        "503 upstream, nothing forwarded (no 100 either)"
    );
    assert_eq!(e.stats().rejected_by_forward_gate, 1);
    assert_eq!(e.stats().forwarded, 0);
    // Re-INVITEs and other requests are never put to the forward gate.
    let mut asked = 0;
    let reinvite = request(
        "INVITE",
        "sip:bob@example.com",
        ua_addr(1),
        "z9hG4bKf2",
        2,
        &[("To", "<sip:bob@example.com>;tag=b")],
    );
    let bye = request(
        "BYE",
        "sip:bob@example.com",
        ua_addr(1),
        "z9hG4bKf3",
        3,
        &[("To", "<sip:bob@example.com>;tag=b")],
    );
    for m in [reinvite, bye] {
        e.handle_admitting(
            ms(2),
            &m,
            from,
            Transport::Udp,
            &mut |_, _| None,
            &mut |_, _| {
                asked += 1;
                Some(REJECT)
            },
        );
    }
    assert_eq!(asked, 0);
    assert_eq!(e.stats().forwarded, 2, "re-INVITE and BYE forwarded");
}

// ---------------------------------------------------------------- tests: relay policy

/// Alice (10.0.0.1, not trusted by default) asks the proxy to relay `ruri` with `headers`;
/// returns the net after the exchange settled.
fn relay_attempt(c: ProxyConfig, method: &str, ruri: &str, headers: &[(&str, &str)]) -> Net {
    let mut net = Net::new(c, vec![alice(), Ua::new(9, Script::answers(5, 10, 200))]);
    net.send(
        1,
        request(method, ruri, ua_addr(1), "z9hG4bKrelay", 1, headers),
    );
    net.run_until(ms(100));
    net
}

#[test]
fn an_untrusted_source_cannot_relay_to_a_host_the_proxy_does_not_serve() {
    let net = relay_attempt(config(), "INVITE", "sip:victim@10.0.0.9", &[]);
    assert!(net.ua(9).requests("INVITE").is_empty(), "relayed");
    assert_eq!(net.ua(1).responses(403, "INVITE").len(), 1);
    assert_eq!(net.proxy.stats().relay_denied, 1);
    // A pre-loaded Route to a foreign host is relaying too, even behind one of ours.
    let route = format!("{RR}, <sip:10.0.0.9;lr>");
    let net = relay_attempt(
        config(),
        "INVITE",
        "sip:bob@example.com",
        &[("Route", &route)],
    );
    assert!(net.ua(9).requests("INVITE").is_empty(), "relayed by Route");
    assert_eq!(net.ua(1).responses(403, "INVITE").len(), 1);
}

#[test]
fn trusted_sources_open_relay_routes_and_dialogs_are_relayed() {
    // A trusted network.
    let mut c = config();
    c.relay = RelayPolicy::Restricted {
        trusted: vec!["10.0.0.0/24".parse().expect("cidr")],
    };
    let net = relay_attempt(c, "INVITE", "sip:x@10.0.0.9", &[]);
    assert_eq!(net.ua(9).requests("INVITE").len(), 1);
    assert_eq!(net.proxy.stats().relay_denied, 0);
    // `relay = open`.
    let mut c = config();
    c.relay = RelayPolicy::Open;
    let net = relay_attempt(c, "INVITE", "sip:x@10.0.0.9", &[]);
    assert_eq!(net.ua(9).requests("INVITE").len(), 1);
    // A configured route covers the destination (here `*`).
    let mut c = config();
    c.static_routes = vec![StaticRoute {
        domain: "*".into(),
        next_hop: ua_addr(9),
        transport: Transport::Udp,
        stateless: false,
        edge: None,
    }];
    let net = relay_attempt(c, "INVITE", "sip:carol@elsewhere.example", &[]);
    assert_eq!(net.ua(9).requests("INVITE").len(), 1);
    // An in-dialog request that came through our Record-Route, to the remote target.
    let net = relay_attempt(
        config(),
        "BYE",
        "sip:bob@10.0.0.9",
        &[("Route", RR), ("To", "<sip:bob@example.com>;tag=b9")],
    );
    assert_eq!(net.ua(9).requests("BYE").len(), 1);
    assert_eq!(net.proxy.stats().relay_denied, 0);
    // The same without our Route (we never record-routed that dialog): not relayed.
    let net = relay_attempt(
        config(),
        "BYE",
        "sip:bob@10.0.0.9",
        &[("To", "<sip:bob@example.com>;tag=b9")],
    );
    assert!(net.ua(9).requests("BYE").is_empty());
    assert_eq!(net.ua(1).responses(403, "BYE").len(), 1);
}

#[test]
fn ip_networks_parse_and_match() {
    let n: IpNet = "10.1.0.0/16".parse().expect("v4");
    assert!(n.contains("10.1.255.3".parse().expect("ip")));
    assert!(!n.contains("10.2.0.1".parse().expect("ip")));
    assert!(n.contains("::ffff:10.1.2.3".parse().expect("mapped")));
    let host: IpNet = "192.0.2.7".parse().expect("host");
    assert!(host.contains("192.0.2.7".parse().expect("ip")));
    assert!(!host.contains("192.0.2.8".parse().expect("ip")));
    let v6: IpNet = "2001:db8::/32".parse().expect("v6");
    assert!(v6.contains("2001:db8:1::1".parse().expect("ip")));
    assert!(!v6.contains("10.1.2.3".parse().expect("ip")));
    let all: IpNet = "0.0.0.0/0".parse().expect("all");
    assert!(all.contains("203.0.113.1".parse().expect("ip")));
    for bad in ["10.0.0.0/33", "::/129", "10.0.0/8", "x", "10.0.0.0/"] {
        assert!(bad.parse::<IpNet>().is_err(), "{bad}");
    }
    assert_eq!(n.to_string(), "10.1.0.0/16");
    assert!(RelayPolicy::default().trusts("127.0.0.1".parse().expect("ip")));
    assert!(RelayPolicy::default().trusts("::1".parse().expect("ip")));
    assert!(!RelayPolicy::default().trusts("10.0.0.1".parse().expect("ip")));
}

// ---------------------------------------------------------------- tests: overload feedback

fn routed_config() -> ProxyConfig {
    let mut c = config();
    c.static_routes = vec![StaticRoute {
        domain: "*".into(),
        next_hop: ua_addr(5),
        transport: Transport::Udp,
        stateless: false,
        edge: None,
    }];
    c
}

fn far_invite(branch: &str) -> Vec<u8> {
    request(
        "INVITE",
        "sip:bob@far.example.net",
        ua_addr(1),
        branch,
        1,
        &[],
    )
}

/// Hands `far_invite(branch)` from UA 1 to `e` at `at` ms; returns the INVITE it forwarded to
/// UA 5 (the routed next hop).
fn forward_far(e: &mut Endpoint, at: u64, branch: &str) -> Vec<u8> {
    e.handle(ms(at), &far_invite(branch), udp(ua_addr(1)), Transport::Udp);
    drain_to(e, ms(at))
        .into_iter()
        .find(|(p, b)| p.addr == ua_addr(5) && b.starts_with(b"INVITE"))
        .map(|(_, b)| b)
        .expect("forwarded")
}

fn drain_to(e: &mut Endpoint, now: Instant) -> Vec<(Peer, Vec<u8>)> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(t) = e.poll_transmit(now, &mut buf) {
        out.push((t.destination, buf[..t.size].to_vec()));
        buf.clear();
    }
    out
}

/// `resp` with `params` in place of the overload parameters of its top Via.
fn with_answer(resp: &[u8], params: &str) -> Vec<u8> {
    let m = parse(resp);
    let mut ed = holdline_sip::Editor::new(&m);
    ed.set_top_via_params(&holdline_sip::OC_PARAMS, params.as_bytes())
        .expect("edit");
    let mut out = Vec::new();
    ed.emit(&mut out);
    out
}

/// The first Via line's value (each Via of these tests is on a line of its own; the value
/// may contain a quoted comma).
fn top_via(bytes: &[u8]) -> String {
    header(bytes, HeaderName::Via).unwrap_or_default()
}

#[test]
fn the_client_role_offers_oc_and_reports_answers_of_matched_responses_only() {
    use holdline_sip::{OcAlgo, OcOffer};
    let mut c = routed_config();
    c.overload_offer = Some(OcOffer::new(&[OcAlgo::Loss, OcAlgo::Rate]));
    let mut e = Endpoint::new(c, Arc::new(MemStore::default()));
    e.handle(
        ms(0),
        &far_invite("z9hG4bKc1"),
        udp(ua_addr(1)),
        Transport::Udp,
    );
    let out = drain_to(&mut e, ms(0));
    let fwd = out
        .iter()
        .find(|(p, b)| p.addr == ua_addr(5) && b.starts_with(b"INVITE"))
        .map(|(_, b)| b.clone())
        .expect("forwarded");
    assert!(
        top_via(&fwd).ends_with(";rport;oc;oc-algo=\"loss,rate\""),
        "{}",
        top_via(&fwd)
    );
    // The next hop answers in our Via.
    let mut ringing = Vec::new();
    build_response(
        &parse(&fwd),
        180,
        "Ringing",
        Some(b"b1"),
        &[],
        b"",
        &mut ringing,
    );
    let ringing = with_answer(
        &ringing,
        ";oc=40;oc-algo=\"loss\";oc-validity=800;oc-seq=100.5",
    );
    e.handle(ms(1), &ringing, udp(ua_addr(5)), Transport::Udp);
    let mut events = Vec::new();
    while let Some(ev) = e.poll_event() {
        events.push(ev);
    }
    assert_eq!(
        events,
        [crate::EndpointEvent::Feedback {
            from: udp(ua_addr(5)),
            report: holdline_sip::OcReport {
                algo: OcAlgo::Loss,
                value: 40,
                validity_ms: 800,
                seq: 10_050_000,
            },
        }]
    );
    // The 180 goes upstream without our Via (and its answer).
    let up = drain_to(&mut e, ms(1));
    let up180 = up
        .iter()
        .find(|(p, b)| p.addr == ua_addr(1) && status_of(b) == 180)
        .expect("180 upstream");
    assert!(!String::from_utf8_lossy(&up180.1).contains("oc=40"));
    // A malformed answer is counted and ignored.
    let mut r183 = Vec::new();
    build_response(
        &parse(&fwd),
        183,
        "Progress",
        Some(b"b1"),
        &[],
        b"",
        &mut r183,
    );
    let r183 = with_answer(&r183, ";oc=lots;oc-seq=101.0");
    e.handle(ms(2), &r183, udp(ua_addr(5)), Transport::Udp);
    assert!(e.poll_event().is_none());
    assert_eq!(e.stats().overload_reports_malformed, 1);
    // A response matching no client transaction (a forged one) is never reported.
    let stray = String::from_utf8_lossy(&r183)
        .replace("oc=lots", "oc=100")
        .replace(";branch=z9hG4bK", ";branch=z9hG4bKforged");
    e.handle(ms(3), stray.as_bytes(), udp(ua_addr(5)), Transport::Udp);
    while let Some(ev) = e.poll_event() {
        assert!(
            !matches!(ev, crate::EndpointEvent::Feedback { .. }),
            "stray answer reported"
        );
    }
    assert_eq!(e.stats().overload_reports, 1);
}

#[test]
fn without_an_offer_nothing_is_added_or_reported() {
    let mut e = Endpoint::new(routed_config(), Arc::new(MemStore::default()));
    e.handle(
        ms(0),
        &far_invite("z9hG4bKc2"),
        udp(ua_addr(1)),
        Transport::Udp,
    );
    let out = drain_to(&mut e, ms(0));
    let (_, fwd) = out
        .iter()
        .find(|(p, _)| p.addr == ua_addr(5))
        .expect("forwarded");
    assert!(!top_via(fwd).contains(";oc"), "{}", top_via(fwd));
    let mut ringing = Vec::new();
    build_response(
        &parse(fwd),
        180,
        "Ringing",
        Some(b"b1"),
        &[],
        b"",
        &mut ringing,
    );
    let ringing = with_answer(&ringing, ";oc=40;oc-seq=1.0");
    e.handle(ms(1), &ringing, udp(ua_addr(5)), Transport::Udp);
    assert!(e.poll_event().is_none());
}

fn invite_offering(branch: &str, call: &str, via_params: &str) -> Vec<u8> {
    invite_from(1, branch, call, via_params)
}

/// A new INVITE from user agent `client` with `via_params` after the Via's branch and rport.
fn invite_from(client: u8, branch: &str, call: &str, via_params: &str) -> Vec<u8> {
    let via = format!(
        "SIP/2.0/UDP {};branch={branch};rport{via_params}",
        ua_addr(client)
    );
    request(
        "INVITE",
        "sip:bob@far.example.net",
        ua_addr(client),
        branch,
        1,
        &[("Via", &via), ("Call-ID", call)],
    )
}

fn oc_params(via: &str) -> Option<holdline_sip::OcReport> {
    let buf = format!("SIP/2.0 100 Trying\r\nVia: {via}\r\n\r\n");
    let m = parse(buf.as_bytes());
    holdline_sip::OcReport::from_via(&m.top_via().expect("via")).expect("well-formed")
}

#[test]
fn the_server_role_answers_clients_that_offered_and_exempts_them_from_the_gate() {
    let mut c = routed_config();
    c.overload_seq_base = 170_000_000_000_000;
    let mut e = Endpoint::new(c, Arc::new(MemStore::default()));
    e.set_overload_answer(Some(crate::OverloadAnswer {
        loss_percent: 30,
        validity_ms: 700,
        exempt: true,
        window_exempt: true,
        rate: crate::RateAnswer::Off,
        window: crate::RateAnswer::Off,
    }));
    // The driver's gate: rejects what is not exempt (as an overloaded server's would).
    let mut asked = Vec::new();
    // A client that offered oc: exempt from the gate, and answered in the 100 Trying.
    let rejected = e.handle_admitting(
        ms(10),
        &invite_offering("z9hG4bKs1", "s1@test", ";oc;oc-algo=\"loss,rate\""),
        udp(ua_addr(1)),
        Transport::Udp,
        &mut |_, exempt| {
            asked.push(exempt);
            (!exempt).then_some(REJECT)
        },
        &mut |_, _| None,
    );
    assert!(!rejected);
    assert_eq!((asked.as_slice(), e.stats().gate_exempt), (&[true][..], 1));
    let out = drain_to(&mut e, ms(10));
    let trying = out
        .iter()
        .find(|(p, b)| p.addr == ua_addr(1) && status_of(b) == 100)
        .map(|(_, b)| top_via(b))
        .expect("100 Trying");
    let first = oc_params(&trying).expect("answered");
    assert_eq!(
        (first.algo, first.value, first.validity_ms),
        // 700 ms stretched over the 70 % let through.
        (holdline_sip::OcAlgo::Loss, 30, 1000)
    );
    assert_eq!(first.seq, 170_000_000_000_000 + 1_000);
    assert!(trying.contains(";rport=5060"), "{trying}");
    // Forwarded downstream, the client's offer stays in its own (second) Via only.
    let fwd = out
        .iter()
        .find(|(p, _)| p.addr == ua_addr(5))
        .map(|(_, b)| b.clone())
        .expect("forwarded");
    assert!(!top_via(&fwd).contains(";oc"));
    // A client that did not offer: put to the gate, and its 503 carries no answer.
    let rejected = e.handle_admitting(
        ms(20),
        &invite_offering("z9hG4bKs2", "s2@test", ""),
        udp(ua_addr(1)),
        Transport::Udp,
        &mut |_, exempt| {
            asked.push(exempt);
            (!exempt).then_some(REJECT)
        },
        &mut |_, _| None,
    );
    assert!(rejected);
    assert_eq!(asked, [true, false]);
    assert_eq!(e.stats().gate_exempt, 1);
    let out = drain_to(&mut e, ms(20));
    assert_eq!(status_of(&out[0].1), 503);
    assert_eq!(oc_params(&top_via(&out[0].1)), None);
    // No load: `oc=0` with validity 0 ends control; the sequence grows.
    e.set_overload_answer(Some(crate::OverloadAnswer {
        loss_percent: 0,
        validity_ms: 700,
        exempt: true,
        window_exempt: true,
        rate: crate::RateAnswer::Off,
        window: crate::RateAnswer::Off,
    }));
    e.handle(
        ms(30),
        &invite_offering("z9hG4bKs3", "s3@test", ";oc"),
        udp(ua_addr(1)),
        Transport::Udp,
    );
    let out = drain_to(&mut e, ms(30));
    let idle = out
        .iter()
        .find(|(_, b)| status_of(b) == 100)
        .and_then(|(_, b)| oc_params(&top_via(b)))
        .expect("answered");
    assert_eq!((idle.value, idle.validity_ms), (0, 0));
    assert!(idle.seq > first.seq);
    // Without an answer set, nothing is stamped.
    e.set_overload_answer(None);
    e.handle(
        ms(40),
        &invite_offering("z9hG4bKs4", "s4@test", ";oc"),
        udp(ua_addr(1)),
        Transport::Udp,
    );
    let out = drain_to(&mut e, ms(40));
    let t = out.iter().find(|(_, b)| status_of(b) == 100).expect("100");
    assert_eq!(oc_params(&top_via(&t.1)), None);
    assert!(e.stats().overload_answers >= 2);
}

#[test]
fn the_server_role_answers_rate_clients_with_an_even_share_of_its_rate() {
    use holdline_sip::OcAlgo;
    let mut e = Endpoint::new(routed_config(), Arc::new(MemStore::default()));
    let answer = |rate| crate::OverloadAnswer {
        loss_percent: 40,
        validity_ms: 500,
        exempt: true,
        window_exempt: true,
        rate,
        window: crate::RateAnswer::Off,
    };
    e.set_overload_answer(Some(answer(crate::RateAnswer::Total(1_000))));
    // Two rate clients (different source addresses) and a loss-only one.
    let mut sent = 0;
    for (i, (client, params)) in [
        (1u8, ";oc;oc-algo=\"rate,loss\""),
        (2, ";oc;oc-algo=\"rate\""),
        (3, ";oc"),
    ]
    .into_iter()
    .enumerate()
    {
        let inv = invite_from(
            client,
            &format!("z9hG4bKr{i}"),
            &format!("r{i}@test"),
            params,
        );
        assert!(!e.handle_admitting(
            ms(1),
            &inv,
            udp(ua_addr(client)),
            Transport::Udp,
            &mut |_, exempt| (!exempt).then_some(REJECT),
            &mut |_, _| None,
        ));
        sent += 1;
    }
    assert_eq!(e.stats().gate_exempt, sent);
    let out = drain_to(&mut e, ms(1));
    let answer_to = |client: u8| {
        out.iter()
            .find(|(p, b)| p.addr == ua_addr(client) && status_of(b) == 100)
            .and_then(|(_, b)| oc_params(&top_via(b)))
            .expect("answered")
    };
    let (a1, a2, a3) = (answer_to(1), answer_to(2), answer_to(3));
    assert_eq!(
        (a1.algo, a1.value, a1.validity_ms),
        (OcAlgo::Rate, 500, 500)
    );
    assert_eq!((a2.algo, a2.value), (OcAlgo::Rate, 500));
    assert_eq!((a3.algo, a3.value), (OcAlgo::Loss, 40));
    // A loss answer lasts as many offered INVITEs as its configured validity: 500 ms over
    // the 60 % let through.
    assert_eq!(a3.validity_ms, 833);
    assert_eq!(
        e.take_feedback_tally(),
        crate::FeedbackTally {
            rate_invites: 2,
            rate_clients: 2,
            ..crate::FeedbackTally::default()
        }
    );
    assert_eq!(e.take_feedback_tally(), crate::FeedbackTally::default());
    // A small rate: the answer's validity outlives the gaps between the INVITEs it admits
    // (`RATE_VALIDITY_GAPS` of them), not the configured 500 ms, so that it does not expire
    // between two calls and let the client's whole load through.
    // The answer in the 100 Trying to a new INVITE of rate client 1.
    let rate_answer = |e: &mut Endpoint, branch: &str, call: &str| {
        let inv = invite_from(1, branch, call, ";oc;oc-algo=\"rate\"");
        e.handle(ms(2), &inv, udp(ua_addr(1)), Transport::Udp);
        drain_to(e, ms(2))
            .iter()
            .find(|(_, b)| status_of(b) == 100)
            .and_then(|(_, b)| oc_params(&top_via(b)))
            .expect("answered")
    };
    e.set_overload_answer(Some(answer(crate::RateAnswer::Total(3))));
    let small = rate_answer(&mut e, "z9hG4bKr8", "r8@test");
    assert!((1..=3).contains(&small.value), "{}", small.value);
    assert_eq!(
        small.validity_ms,
        crate::endpoint::RATE_VALIDITY_GAPS * 1000 / small.value
    );
    assert!(small.validity_ms > 500);
    // No rate control now: rate clients get an idle rate answer.
    e.set_overload_answer(Some(answer(crate::RateAnswer::Idle)));
    let idle = rate_answer(&mut e, "z9hG4bKr9", "r9@test");
    assert_eq!(
        (idle.algo, idle.value, idle.validity_ms),
        (OcAlgo::Rate, 0, 0)
    );
    // Rate not answered at all: a rate-only client gets nothing, and is not exempt.
    e.set_overload_answer(Some(answer(crate::RateAnswer::Off)));
    let inv = invite_from(1, "z9hG4bKr10", "r10@test", ";oc;oc-algo=\"rate\"");
    let mut asked = Vec::new();
    e.handle_admitting(
        ms(3),
        &inv,
        udp(ua_addr(1)),
        Transport::Udp,
        &mut |_, exempt| {
            asked.push(exempt);
            None
        },
        &mut |_, _| None,
    );
    assert_eq!(asked, [false]);
    let out = drain_to(&mut e, ms(3));
    let t = out.iter().find(|(_, b)| status_of(b) == 100).expect("100");
    assert_eq!(oc_params(&top_via(&t.1)), None);
}

// ---------------------------------------------------------------- tests: authentication

fn auth_config(trusted: Vec<IpNet>) -> ProxyConfig {
    use crate::auth::{AuthConfig, UserEntry, Users};
    let mut users = Users::new();
    users.insert(
        "alice",
        "example.com",
        UserEntry::new(b"alice", b"example.com", b"pw"),
    );
    let mut a = AuthConfig::new(Arc::new(users), [9; 32]);
    a.trusted = trusted;
    let mut c = config();
    c.auth = Some(a);
    c
}

/// The credentials answering the `alg` challenge (a `kind` header) of `challenge` as `user`
/// with `password`, for `method` and `uri`, with nonce count `nc`.
#[allow(clippy::too_many_arguments)]
fn answer_challenge(
    challenge: &[u8],
    kind: HeaderName,
    alg: &str,
    user: &str,
    password: &str,
    method: &str,
    uri: &str,
    nc: u32,
) -> String {
    use crate::auth::{DigestAlgorithm, digest_response};
    let m = parse(challenge);
    let ch = m
        .values(kind)
        .filter_map(|v| holdline_sip::Challenge::parse(v.bytes).ok())
        .find(|c| c.algorithm() == Some(alg.as_bytes()))
        .expect("a challenge of that algorithm");
    let realm = String::from_utf8(ch.realm().expect("realm").to_vec()).expect("utf-8");
    let nonce = String::from_utf8(ch.nonce().expect("nonce").to_vec()).expect("utf-8");
    let a = DigestAlgorithm::from_name(alg.as_bytes()).expect("algorithm");
    let ha1 = a.ha1(user.as_bytes(), realm.as_bytes(), password.as_bytes());
    let nc = format!("{nc:08x}");
    let r = digest_response(
        a,
        ha1.as_bytes(),
        nonce.as_bytes(),
        Some((nc.as_bytes(), b"abc", b"auth")),
        method.as_bytes(),
        uri.as_bytes(),
    );
    format!(
        "Digest username=\"{user}\", realm=\"{realm}\", nonce=\"{nonce}\", uri=\"{uri}\", \
         response=\"{r}\", algorithm={alg}, qop=auth, nc={nc}, cnonce=\"abc\""
    )
}

fn auth_register(user: &str, branch: &str, cseq: u32, extra: &[(&str, &str)]) -> Vec<u8> {
    let to = format!("<sip:{user}@example.com>");
    let from = format!("{to};tag=r1");
    let contact = format!("<sip:{user}@{}>", ua_addr(1));
    let mut headers = vec![
        ("To", to.as_str()),
        ("From", from.as_str()),
        ("Contact", contact.as_str()),
        ("Call-ID", "reg-auth@test"),
        ("Expires", "600"),
    ];
    headers.extend_from_slice(extra);
    request(
        "REGISTER",
        "sip:example.com",
        ua_addr(1),
        branch,
        cseq,
        &headers,
    )
}

#[test]
fn register_is_challenged_with_401_then_accepted() {
    let mut net = Net::new(auth_config(Vec::new()), vec![alice()]);
    let r = answer_to(&mut net, auth_register("alice", "z9hG4bKra1", 1, &[]));
    assert_eq!(status_of(&r), 401, "{}", String::from_utf8_lossy(&r));
    let m = parse(&r);
    let algs: Vec<String> = m
        .values(HeaderName::WwwAuthenticate)
        .filter_map(|v| holdline_sip::Challenge::parse(v.bytes).ok())
        .map(|c| String::from_utf8_lossy(c.algorithm().unwrap_or_default()).into_owned())
        .collect();
    assert_eq!(algs, ["SHA-256", "MD5"], "SHA-256 first, then MD5");
    // Both algorithms, on the same nonce with increasing nonce counts.
    for (nc, alg) in [(1, "MD5"), (2, "SHA-256")] {
        let creds = answer_challenge(
            &r,
            HeaderName::WwwAuthenticate,
            alg,
            "alice",
            "pw",
            "REGISTER",
            "sip:example.com",
            nc,
        );
        let branch = format!("z9hG4bKra2{alg}");
        let ok = answer_to(
            &mut net,
            auth_register("alice", &branch, 1 + nc, &[("Authorization", &creds)]),
        );
        assert_eq!(
            status_of(&ok),
            200,
            "{alg}: {}",
            String::from_utf8_lossy(&ok)
        );
    }
    let a = net.proxy.stats().auth;
    assert_eq!((a.challenges_401, a.ok, a.failed), (1, 2, 0));
}

/// A response with what legitimately differs between two answers masked: the nonce, the To
/// tag, and `user` (the only difference of the two requests) replaced.
fn masked(resp: &[u8], user: &str) -> String {
    let text = String::from_utf8_lossy(resp).replace(user, "USER");
    let mut out = String::new();
    for line in text.split("\r\n") {
        let mut l = line.to_owned();
        for key in ["nonce=\"", ";tag="] {
            if let Some(i) = l.find(key) {
                let start = i + key.len();
                let end = l[start..]
                    .find(['"', ';', '>', ','])
                    .map_or(l.len(), |e| start + e);
                l.replace_range(start..end, "X");
            }
        }
        out.push_str(&l);
        out.push('\n');
    }
    out
}

#[test]
fn an_unknown_user_gets_the_same_answer_as_a_wrong_password() {
    let mut net = Net::new(auth_config(Vec::new()), vec![alice()]);
    let first = answer_to(&mut net, auth_register("alice", "z9hG4bKu1", 1, &[]));
    let wrong = answer_challenge(
        &first,
        HeaderName::WwwAuthenticate,
        "MD5",
        "alice",
        "guess",
        "REGISTER",
        "sip:example.com",
        1,
    );
    let unknown = answer_challenge(
        &first,
        HeaderName::WwwAuthenticate,
        "MD5",
        "mallory",
        "guess",
        "REGISTER",
        "sip:example.com",
        2,
    );
    let r1 = answer_to(
        &mut net,
        auth_register("alice", "z9hG4bKu2", 2, &[("Authorization", &wrong)]),
    );
    let r2 = answer_to(
        &mut net,
        auth_register("mallory", "z9hG4bKu3", 3, &[("Authorization", &unknown)]),
    );
    assert_eq!(status_of(&r1), 401);
    assert_eq!(
        masked(&r1, "alice")
            .replace("z9hG4bKu2", "B")
            .replace("CSeq: 2", "CSeq: N"),
        masked(&r2, "mallory")
            .replace("z9hG4bKu3", "B")
            .replace("CSeq: 3", "CSeq: N"),
    );
    assert_eq!(net.proxy.stats().auth.failed, 2);
}

#[test]
fn wrong_credentials_are_reported_with_their_source() {
    let store = Arc::new(MemStore::default());
    let mut e = Endpoint::new(auth_config(Vec::new()), store);
    let src = udp(ua_addr(1));
    e.handle(
        ms(1),
        &auth_register("alice", "z9hG4bKw1", 1, &[]),
        src,
        Transport::Udp,
    );
    let mut buf = Vec::new();
    let t = e.poll_transmit(ms(1), &mut buf).expect("401");
    let challenge = buf[..t.size].to_vec();
    assert_eq!(e.poll_event(), None, "a challenge alone is no failure");
    let wrong = answer_challenge(
        &challenge,
        HeaderName::WwwAuthenticate,
        "SHA-256",
        "alice",
        "nope",
        "REGISTER",
        "sip:example.com",
        1,
    );
    e.handle(
        ms(2),
        &auth_register("alice", "z9hG4bKw2", 2, &[("Authorization", &wrong)]),
        src,
        Transport::Udp,
    );
    assert_eq!(
        e.poll_event(),
        Some(crate::EndpointEvent::AuthFailed { from: src })
    );
}

#[test]
fn an_invite_from_a_user_gets_407_then_is_relayed_without_its_credentials() {
    let uri = "sip:carol@10.0.0.9";
    // Without authentication an untrusted source may not relay there.
    let net = relay_attempt(config(), "INVITE", uri, &[]);
    assert_eq!(net.ua(1).responses(403, "INVITE").len(), 1);
    let mut net = Net::new(
        auth_config(Vec::new()),
        vec![alice(), Ua::new(9, Script::answers(5, 10, 200))],
    );
    let r = answer_to(
        &mut net,
        request("INVITE", uri, ua_addr(1), "z9hG4bKi1", 1, &[]),
    );
    assert_eq!(status_of(&r), 407, "{}", String::from_utf8_lossy(&r));
    assert!(header(&r, HeaderName::ProxyAuthenticate).is_some());
    let creds = answer_challenge(
        &r,
        HeaderName::ProxyAuthenticate,
        "MD5",
        "alice",
        "pw",
        "INVITE",
        uri,
        1,
    );
    // Another proxy's credentials pass untouched.
    let theirs =
        "Digest username=\"a\", realm=\"upstream.example\", nonce=\"n\", uri=\"u\", response=\"r\"";
    net.send(
        1,
        request(
            "INVITE",
            uri,
            ua_addr(1),
            "z9hG4bKi2",
            2,
            &[
                ("Proxy-Authorization", &creds),
                ("Proxy-Authorization", theirs),
            ],
        ),
    );
    net.run_until(ms(200));
    let got = net.ua(9).requests("INVITE");
    assert_eq!(got.len(), 1, "relayed once authenticated");
    let fwd = parse(&got[0]);
    let left: Vec<&[u8]> = fwd
        .values(HeaderName::ProxyAuthorization)
        .map(|v| v.bytes)
        .collect();
    assert_eq!(left, [theirs.as_bytes()], "ours consumed, theirs kept");
    assert_eq!(net.ua(1).responses(200, "INVITE").len(), 1);
    let a = net.proxy.stats().auth;
    assert_eq!((a.challenges_407, a.ok), (1, 1));
    assert_eq!(net.proxy.stats().relay_denied, 0);
}

#[test]
fn in_dialog_requests_trusted_sources_and_foreign_users_are_not_challenged() {
    let uri = "sip:carol@10.0.0.9";
    // In-dialog (To tag): not challenged (the relay policy answers it here).
    let net = relay_attempt(
        auth_config(Vec::new()),
        "BYE",
        uri,
        &[("To", "<sip:carol@10.0.0.9>;tag=x")],
    );
    assert!(net.ua(1).responses(407, "BYE").is_empty());
    // A trusted source.
    let net = relay_attempt(
        auth_config(vec!["10.0.0.0/24".parse().expect("cidr")]),
        "INVITE",
        "sip:bob@example.com",
        &[],
    );
    assert!(net.ua(1).responses(407, "INVITE").is_empty());
    assert_eq!(net.ua(1).responses(404, "INVITE").len(), 1);
    // From a user of a domain the proxy does not serve.
    let net = relay_attempt(
        auth_config(Vec::new()),
        "INVITE",
        "sip:bob@example.com",
        &[("From", "<sip:eve@elsewhere.example>;tag=e")],
    );
    assert!(net.ua(1).responses(407, "INVITE").is_empty());
    assert_eq!(net.proxy.stats().auth.challenges_407, 0);
}

#[test]
fn registering_another_users_address_is_forbidden() {
    let mut net = Net::new(auth_config(Vec::new()), vec![alice()]);
    let first = answer_to(&mut net, auth_register("bob", "z9hG4bKf1", 1, &[]));
    assert_eq!(status_of(&first), 401);
    let creds = answer_challenge(
        &first,
        HeaderName::WwwAuthenticate,
        "MD5",
        "alice",
        "pw",
        "REGISTER",
        "sip:example.com",
        1,
    );
    let r = answer_to(
        &mut net,
        auth_register("bob", "z9hG4bKf2", 2, &[("Authorization", &creds)]),
    );
    assert_eq!(status_of(&r), 403);
    assert_eq!(net.proxy.stats().auth.forbidden, 1);
}

#[test]
fn a_routes_target_edge_reaches_the_forward_gate_and_the_branch_events() {
    // Two routes through the same next hop to two target edges, and a default route
    // without one: the gate and the events name the edge of the route the call took.
    let mut c = config();
    let route = |domain: &str, edge: Option<&str>| StaticRoute {
        domain: domain.into(),
        next_hop: ua_addr(5),
        transport: Transport::Udp,
        stateless: false,
        edge: edge.map(EdgeId::of),
    };
    c.static_routes = vec![
        route("e2.example.net", Some("E2")),
        route("e3.example.net", Some("E3")),
        route("*", None),
    ];
    c.branch_events = true;
    let mut e = Endpoint::new(c, Arc::new(MemStore::default()));
    let mut asked = Vec::new();
    for (i, host) in ["e2.example.net", "e3.example.net", "far.example.net"]
        .iter()
        .enumerate()
    {
        let ruri = format!("sip:bob@{host}");
        let branch = format!("z9hG4bKedge{i}");
        let msg = request("INVITE", &ruri, ua_addr(1), &branch, 1, &[]);
        assert!(!e.handle_admitting(
            ms(0),
            &msg,
            udp(ua_addr(1)),
            Transport::Udp,
            &mut |_, _| None,
            &mut |dest, edge| {
                asked.push((dest.addr, edge));
                None
            },
        ));
    }
    let (e2, e3) = (EdgeId::of("E2"), EdgeId::of("E3"));
    assert_ne!(e2, e3);
    assert_eq!(
        asked,
        [
            (ua_addr(5), Some(e2)),
            (ua_addr(5), Some(e3)),
            (ua_addr(5), None)
        ]
    );
    let mut started = Vec::new();
    while let Some(ev) = e.poll_event() {
        if let crate::EndpointEvent::BranchStarted { to, edge } = ev {
            started.push((to.addr, edge));
        }
    }
    assert_eq!(started, asked, "each branch carries its route's edge");
}

#[test]
fn branch_events_report_each_forwarded_invite_and_how_and_when_it_ended() {
    let mut c = routed_config();
    c.branch_events = true;
    let mut e = Endpoint::new(c, Arc::new(MemStore::default()));
    // Starts and ends (the first answers are the next test's).
    let events = |e: &mut Endpoint| {
        let mut v = Vec::new();
        while let Some(ev) = e.poll_event() {
            if !matches!(ev, crate::EndpointEvent::BranchAnswered { .. }) {
                v.push(ev);
            }
        }
        v
    };
    // Answered: started at 0, ended by the next hop's 486 at 30 ms.
    let fwd = forward_far(&mut e, 0, "z9hG4bKb1");
    assert_eq!(
        events(&mut e),
        [crate::EndpointEvent::BranchStarted {
            to: udp(ua_addr(5)),
            edge: None,
        }]
    );
    let mut busy = Vec::new();
    build_response(
        &parse(&fwd),
        486,
        "Busy Here",
        Some(b"t1"),
        &[],
        b"",
        &mut busy,
    );
    e.handle(ms(30), &busy, udp(ua_addr(5)), Transport::Udp);
    assert_eq!(
        events(&mut e),
        [crate::EndpointEvent::BranchEnded {
            to: udp(ua_addr(5)),
            edge: None,
            status: 486,
            timed_out: false,
            delay: Duration::from_millis(30),
        }]
    );
    // A 500 standing for a 503 further on (RFC 3326 Reason) ends the branch as a 503.
    let fwd = forward_far(&mut e, 40, "z9hG4bKb5");
    let _ = events(&mut e);
    let mut overloaded = Vec::new();
    build_response(
        &parse(&fwd),
        500,
        "Server Internal Error",
        Some(b"t5"),
        &[("Reason", b"SIP;cause=503;text=\"Service Unavailable\"")],
        b"",
        &mut overloaded,
    );
    e.handle(ms(50), &overloaded, udp(ua_addr(5)), Transport::Udp);
    assert!(
        matches!(
            events(&mut e)[..],
            [crate::EndpointEvent::BranchEnded { status: 503, .. }]
        ),
        "reported as the 503 it stands for"
    );
    // Never answered: Timer B ends it as a timeout, 64·T1 after it was sent.
    e.handle(
        ms(100),
        &far_invite("z9hG4bKb2"),
        udp(ua_addr(1)),
        Transport::Udp,
    );
    let _ = drain_to(&mut e, ms(100));
    assert_eq!(events(&mut e).len(), 1);
    let mut now = ms(100);
    let mut ended = None;
    while ended.is_none() && now < ms(100_000) {
        now = e
            .poll_timeout()
            .unwrap_or(now + Duration::from_millis(500))
            .max(now);
        e.handle_timeout(now);
        let _ = drain_to(&mut e, now);
        ended = events(&mut e).into_iter().find_map(|ev| match ev {
            crate::EndpointEvent::BranchEnded {
                timed_out, delay, ..
            } => Some((timed_out, delay)),
            _ => None,
        });
    }
    let (timed_out, delay) = ended.expect("the branch ended");
    assert!(timed_out);
    assert!(delay >= Duration::from_secs(32), "{delay:?}");
    // Without the setting, nothing is reported.
    let mut quiet = Endpoint::new(routed_config(), Arc::new(MemStore::default()));
    quiet.handle(
        ms(0),
        &far_invite("z9hG4bKb3"),
        udp(ua_addr(1)),
        Transport::Udp,
    );
    assert!(quiet.poll_event().is_none());
}

// ---------------------------------------------------------------- durable registrations

fn sent_statuses(ep: &mut Endpoint, now: Instant) -> Vec<u16> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(t) = ep.poll_transmit(now, &mut buf) {
        out.push(status_of(&buf[..t.size]));
        buf.clear();
    }
    out
}

fn register_from(last: u8, user: &str, branch: &str, contact: bool) -> Vec<u8> {
    let to = format!("<sip:{user}@example.com>");
    let c = if contact {
        format!("<sip:{user}@{}>", ua_addr(last))
    } else {
        String::new()
    };
    request(
        "REGISTER",
        "sip:example.com",
        ua_addr(last),
        branch,
        1,
        &[
            ("To", &to),
            ("From", &format!("{to};tag=r{last}")),
            ("Contact", &c),
            ("Call-ID", &format!("reg-{user}")),
            ("Expires", "3600"),
        ],
    )
}

/// With a store that issues commit tickets, the 200 to a REGISTER that changed a binding
/// leaves only once the change is committed (its retransmissions are absorbed meanwhile); a
/// query is answered at once; a commit that does not come in time gets a 500 with
/// Retry-After.
#[test]
fn a_register_200_waits_for_the_store_commit() {
    let store = Arc::new(crate::fuzzing::ManualCommitStore::default());
    let mut ep = Endpoint::new(config(), Arc::clone(&store) as Arc<dyn LocationStore>);
    let t0 = ms(0);
    let reg = register_from(1, "bob", "z9hG4bKd1", true);
    ep.handle(t0, &reg, udp(ua_addr(1)), Transport::Udp);
    assert_eq!(sent_statuses(&mut ep, t0), Vec::<u16>::new(), "held");
    assert_eq!(ep.held_responses(), 1);
    assert_eq!(store.len(), 1, "served from memory at once");
    ep.handle(ms(500), &reg, udp(ua_addr(1)), Transport::Udp);
    assert_eq!(sent_statuses(&mut ep, ms(500)), Vec::<u16>::new());
    store.commit();
    ep.handle_committed(ms(501));
    assert_eq!(sent_statuses(&mut ep, ms(501)), vec![200]);
    assert_eq!(ep.held_responses(), 0);

    let query = register_from(2, "bob", "z9hG4bKq1", false);
    ep.handle(ms(600), &query, udp(ua_addr(2)), Transport::Udp);
    assert_eq!(
        sent_statuses(&mut ep, ms(600)),
        vec![200],
        "a query changes nothing"
    );

    let late = register_from(3, "carol", "z9hG4bKl1", true);
    ep.handle(ms(700), &late, udp(ua_addr(3)), Transport::Udp);
    assert_eq!(sent_statuses(&mut ep, ms(700)), Vec::<u16>::new());
    let deadline = ep.poll_timeout().expect("the held response has a deadline");
    assert_eq!(deadline, ms(700) + Duration::from_secs(2));
    ep.handle_timeout(deadline);
    let mut buf = Vec::new();
    let t = ep.poll_transmit(deadline, &mut buf).expect("an answer");
    assert_eq!(status_of(&buf[..t.size]), 500);
    assert_eq!(
        header(&buf[..t.size], HeaderName::RetryAfter).as_deref(),
        Some("5")
    );
    assert_eq!(ep.stats().register_commit_waits, 2);
    assert_eq!(ep.stats().register_commit_timeouts, 1);
    // One held 501 ms, the other 2 s (its commit timeout).
    let w = &ep.stats().register_commit_wait;
    assert_eq!(w.count(), 2, "{w:?}");
    assert_eq!((w.max_us, w.sum_us), (2_000_000, 2_501_000), "{w:?}");
    assert_eq!(w.slower_than(500_000), 2);
    assert_eq!(w.slower_than(1_000_000), 1);
}

#[test]
fn credentials_for_this_server_are_removed_even_when_not_checked() {
    // A trusted source is not challenged, and an in-dialog request is not either; a UA may
    // still carry credentials for this server's realm in them (phones copy them into the
    // dialog's requests): they are removed, another realm's pass (RFC 3261 §22.3).
    let uri = "sip:carol@10.0.0.9";
    let ours =
        "Digest username=\"alice\", realm=\"example.com\", nonce=\"n\", uri=\"u\", response=\"r\"";
    let theirs =
        "Digest username=\"a\", realm=\"upstream.example\", nonce=\"n\", uri=\"u\", response=\"r\"";
    let lan: IpNet = "10.0.0.0/24".parse().expect("cidr");
    let mut c = auth_config(vec![lan]);
    c.relay = RelayPolicy::Restricted { trusted: vec![lan] };
    let mut net = Net::new(c, vec![alice(), Ua::new(9, Script::answers(5, 10, 200))]);
    net.send(
        1,
        request(
            "INVITE",
            uri,
            ua_addr(1),
            "z9hG4bKc1",
            1,
            &[
                ("Proxy-Authorization", ours),
                ("Proxy-Authorization", theirs),
            ],
        ),
    );
    net.run_until(ms(200));
    let got = net.ua(9).requests("INVITE");
    assert_eq!(got.len(), 1);
    let left: Vec<&[u8]> = parse(&got[0])
        .values(HeaderName::ProxyAuthorization)
        .map(|v| v.bytes)
        .collect();
    assert_eq!(left, [theirs.as_bytes()], "ours removed, theirs kept");
    assert_eq!(net.proxy.stats().auth.ok, 0, "nothing was checked");
}

/// A proxy whose one load-sharing route is `route` (over UAs 5, 6 and 7, each answering
/// 200), with alice as UA 1.
fn three_target_net(route: HashRoute) -> Net {
    let mut c = config();
    c.hash_routes = vec![route];
    Net::new(
        c,
        vec![
            alice(),
            Ua::new(5, Script::answers(1, 2, 200)),
            Ua::new(6, Script::answers(1, 2, 200)),
            Ua::new(7, Script::answers(1, 2, 200)),
        ],
    )
}

#[test]
fn a_hash_route_sends_a_users_registers_and_calls_to_the_same_target() {
    // A first-stage proxy: example.net is not served here, its users are shared among three
    // second-stage servers (UAs 5, 6, 7) by rendezvous hashing of their AOR.
    let targets: Vec<HashTarget> = [5, 6, 7]
        .iter()
        .map(|&n| HashTarget::new(ua_addr(n), Transport::Udp, 1.0))
        .collect();
    let mut net = three_target_net(HashRoute {
        domain: "example.net".into(),
        failover: true,
        targets: targets.clone(),
        edge: None,
        pick: Pick::Hash,
    });
    let users = [
        "ann", "ben", "cid", "dee", "eve", "fay", "gus", "hal", "ivy", "joe",
    ];
    for (i, u) in users.iter().enumerate() {
        let aor = format!("<sip:{u}@example.net>");
        net.send(
            1,
            request(
                "REGISTER",
                "sip:example.net",
                ua_addr(1),
                &format!("z9hG4bKhr{i}"),
                1,
                &[
                    ("To", &aor),
                    ("From", &format!("{aor};tag=h{i}")),
                    ("Call-ID", &format!("hr-reg-{i}")),
                ],
            ),
        );
        net.send(
            1,
            request(
                "INVITE",
                &format!("sip:{u}@Example.NET"),
                ua_addr(1),
                &format!("z9hG4bKhi{i}"),
                1,
                &[("Call-ID", &format!("hr-inv-{i}"))],
            ),
        );
    }
    net.run_until(ms(500));
    let mut used = BTreeSet::new();
    for (i, u) in users.iter().enumerate() {
        let expect = crate::hrw::pick_by(
            format!("{u}@example.net").as_bytes(),
            targets.iter().map(|t| &t.node),
        )
        .expect("a target");
        let ua = [5, 6, 7][expect];
        used.insert(ua);
        let got = |method: &str, id: &str| {
            [5u8, 6, 7]
                .iter()
                .filter(|&&n| {
                    net.ua(n)
                        .requests(method)
                        .iter()
                        .any(|r| String::from_utf8_lossy(r).contains(id))
                })
                .copied()
                .collect::<Vec<_>>()
        };
        assert_eq!(
            got("REGISTER", &format!("hr-reg-{i}")),
            [ua],
            "{u}'s REGISTER"
        );
        assert_eq!(got("INVITE", &format!("hr-inv-{i}")), [ua], "{u}'s INVITE");
    }
    assert!(
        used.len() >= 2,
        "ten users spread over the targets: {used:?}"
    );
}

#[test]
fn a_round_robin_route_spreads_one_users_calls_over_its_targets_by_weight() {
    // Seed 003's load balancing: every call to the next target in turn, whoever the callee.
    // Eight calls to one user over weights 1, 1, 2: hashing would send all eight to one.
    let weights = [1.0, 1.0, 2.0];
    let targets: Vec<HashTarget> = [5, 6, 7]
        .iter()
        .zip(weights)
        .map(|(&n, w)| HashTarget::new(ua_addr(n), Transport::Udp, w))
        .collect();
    let mut net = three_target_net(HashRoute {
        domain: "example.net".into(),
        failover: false,
        targets,
        edge: None,
        pick: Pick::RoundRobin,
    });
    for i in 0..8 {
        net.send(
            1,
            request(
                "INVITE",
                "sip:ann@example.net",
                ua_addr(1),
                &format!("z9hG4bKrr{i}"),
                1,
                &[("Call-ID", &format!("rr-inv-{i}"))],
            ),
        );
    }
    net.run_until(ms(500));
    let counts: Vec<usize> = [5u8, 6, 7]
        .iter()
        .map(|&n| net.ua(n).requests("INVITE").len())
        .collect();
    assert_eq!(counts, [2, 2, 4], "two rounds of weights 1, 1, 2");
}

/// A hash route over UAs 5 and 6 for `user`, with `first` the script of the target the
/// user hashes to and the other answering 200; returns the net after the call and which UA
/// was first.
fn failover_net(user: &str, first: Script, run_ms: u64) -> (Net, u8) {
    failover_net_with(user, first, run_ms, true)
}

/// [`failover_net`] with the route's `failover` switch.
fn failover_net_with(user: &str, first: Script, run_ms: u64, failover: bool) -> (Net, u8) {
    let mut c = config();
    let targets: Vec<HashTarget> = [5, 6]
        .iter()
        .map(|&n| HashTarget::new(ua_addr(n), Transport::Udp, 1.0))
        .collect();
    let nodes: Vec<crate::hrw::HrwNode> = targets.iter().map(|t| t.node.clone()).collect();
    let mut order = Vec::new();
    crate::hrw::rank(format!("{user}@example.net").as_bytes(), &nodes, &mut order);
    let (a, b) = ([5u8, 6][order[0]], [5u8, 6][order[1]]);
    c.hash_routes = vec![HashRoute {
        domain: "example.net".into(),
        failover,
        targets,
        edge: None,
        pick: Pick::Hash,
    }];
    let mut net = Net::new(
        c,
        vec![
            alice(),
            Ua::new(a, first),
            Ua::new(b, Script::answers(1, 2, 200)),
        ],
    );
    net.send(
        1,
        request(
            "INVITE",
            &format!("sip:{user}@example.net"),
            ua_addr(1),
            "z9hG4bKfo1",
            1,
            &[],
        ),
    );
    net.run_until(ms(run_ms));
    (net, a)
}

#[test]
fn a_hash_routed_request_fails_over_to_the_next_target_on_503_or_timeout() {
    // The first target answers 503: the next one gets the INVITE at once and answers.
    let (net, first) = failover_net("kim", Script::answers(1, 2, 503), 500);
    let second = if first == 5 { 6 } else { 5 };
    assert_eq!(net.ua(first).requests("INVITE").len(), 1);
    assert_eq!(net.ua(second).requests("INVITE").len(), 1, "failed over");
    assert_eq!(net.ua(1).responses(200, "INVITE").len(), 1);
    assert!(net.ua(1).responses(500, "INVITE").is_empty());
    assert_eq!(net.proxy.stats().failovers, 1);
    // The first target never answers: after Timer B (64 × T1) the next one gets it.
    let silent = Script {
        silent: true,
        ..Script::UAC
    };
    let (net, first) = failover_net("kim", silent, 40_000);
    let second = if first == 5 { 6 } else { 5 };
    assert_eq!(net.ua(second).requests("INVITE").len(), 1, "failed over");
    assert_eq!(net.ua(1).responses(200, "INVITE").len(), 1);
    assert_eq!(net.proxy.stats().failovers, 1);
    // A 486 is an answer, not a failure: no failover.
    let (net, first) = failover_net("kim", Script::answers(1, 2, 486), 500);
    let second = if first == 5 { 6 } else { 5 };
    assert!(net.ua(second).requests("INVITE").is_empty());
    assert_eq!(net.ua(1).responses(486, "INVITE").len(), 1);
    assert_eq!(net.proxy.stats().failovers, 0);
}

#[test]
fn a_hash_route_without_failover_leaves_a_503_with_the_users_own_target() {
    // Targets that each hold their own users: the next one could only answer 404, so the
    // first one's 503 goes back to the caller (as a 500 carrying the cause, RFC 3261
    // §16.7 / RFC 3326) and the other target never hears of the call.
    let (net, first) = failover_net_with("kim", Script::answers(1, 2, 503), 500, false);
    let second = if first == 5 { 6 } else { 5 };
    assert_eq!(net.ua(first).requests("INVITE").len(), 1);
    assert!(net.ua(second).requests("INVITE").is_empty(), "no failover");
    assert_eq!(net.ua(1).responses(500, "INVITE").len(), 1);
    assert!(net.ua(1).responses(200, "INVITE").is_empty());
    assert_eq!(net.proxy.stats().failovers, 0);
}

#[test]
fn probing_takes_a_dead_target_out_of_its_users_way() {
    // UAs 5 and 6 share example.net; "kim" hashes to `first`, which never answers anything.
    let targets: Vec<HashTarget> = [5, 6]
        .iter()
        .map(|&n| HashTarget::new(ua_addr(n), Transport::Udp, 1.0))
        .collect();
    let nodes: Vec<crate::hrw::HrwNode> = targets.iter().map(|t| t.node.clone()).collect();
    let mut order = Vec::new();
    crate::hrw::rank(b"kim@example.net", &nodes, &mut order);
    let (first, second) = ([5u8, 6][order[0]], [5u8, 6][order[1]]);
    let mut c = config();
    c.hash_routes = vec![HashRoute {
        domain: "example.net".into(),
        failover: true,
        targets,
        edge: None,
        pick: Pick::Hash,
    }];
    c.probe = Some(ProbeConfig::default());
    let silent = Script {
        silent: true,
        ..Script::UAC
    };
    let mut net = Net::new(
        c,
        vec![
            alice(),
            Ua::new(first, silent),
            Ua::new(second, Script::answers(1, 2, 200)),
        ],
    );
    // Probes every second, failed after 500 ms, down after two: down within 2 s.
    net.run_until(ms(2_500));
    let s = net.proxy.stats();
    assert_eq!(s.targets_down, 1, "{s:?}");
    assert!(net.ua(second).requests("OPTIONS").len() >= 2);
    assert!(net.ua(first).requests("OPTIONS").len() >= 2);
    // Kim's call goes to the live target at once: no INVITE to the dead one, no failover.
    net.send(
        1,
        request(
            "INVITE",
            "sip:kim@example.net",
            ua_addr(1),
            "z9hG4bKpr1",
            1,
            &[],
        ),
    );
    net.run_until(ms(3_000));
    assert!(net.ua(first).requests("INVITE").is_empty());
    assert_eq!(net.ua(second).requests("INVITE").len(), 1);
    assert_eq!(net.ua(1).responses(200, "INVITE").len(), 1);
    assert_eq!(net.proxy.stats().failovers, 0);
}

/// A worker among four starts its probes with Call-IDs it owns: the server hands every
/// answer to the owner of its Call-ID, so a probe with another worker's Call-ID is never
/// answered to its sender (with two workers, half the probes of a live target failed).
#[test]
fn probes_carry_a_call_id_their_worker_owns() {
    let mut c = config();
    c.hash_routes = vec![HashRoute {
        domain: "example.net".into(),
        failover: true,
        targets: vec![
            HashTarget::new(ua_addr(5), Transport::Udp, 1.0),
            HashTarget::new(ua_addr(6), Transport::Udp, 1.0),
        ],
        edge: None,
        pick: Pick::Hash,
    }];
    c.probe = Some(ProbeConfig::default());
    let shard = crate::shard::Shard {
        index: 1,
        workers: 4,
    };
    c.shard = Some(shard);
    let mut net = Net::new(
        c,
        vec![
            alice(),
            Ua::new(5, Script::answers(1, 2, 200)),
            Ua::new(6, Script::answers(1, 2, 200)),
        ],
    );
    net.run_until(ms(10_500));
    let probes: Vec<Vec<u8>> = [5, 6]
        .iter()
        .flat_map(|&n| net.ua(n).requests("OPTIONS"))
        .collect();
    assert!(probes.len() >= 20, "{} probes", probes.len());
    for p in &probes {
        let m = parse(p);
        let call_id = m.call_id().expect("Call-ID");
        assert!(
            shard.owns(call_id),
            "{} is worker {}'s",
            String::from_utf8_lossy(call_id),
            crate::shard::shard_of(call_id, 4)
        );
    }
    assert_eq!(net.proxy.stats().probes_failed, 0);
}

// ---------------------------------------------------------------- DNS routes (RFC 3263)

fn dns_answer(net: &mut Net, name: &str, kind: QueryKind, records: DnsRecords) {
    net.zone.insert(
        DnsQuery {
            name: name.into(),
            kind,
        },
        DnsAnswer::Records {
            records,
            ttl: Duration::from_secs(300),
        },
    );
}

/// A proxy routing example.net to `sip:svc.example.net`, whose SRV records give UA 5
/// (priority 10) and UA 6 (priority 20); no NAPTR.
fn dns_net(primary: Script, backup: Script) -> Net {
    let mut c = config();
    c.dns_routes = vec![DnsRoute {
        domain: "example.net".into(),
        target: "sip:svc.example.net".parse().expect("target"),
        edge: None,
    }];
    // Another domain on a static route, to the backup.
    c.static_routes = vec![StaticRoute {
        domain: "other.net".into(),
        next_hop: ua_addr(6),
        transport: Transport::Udp,
        stateless: false,
        edge: None,
    }];
    let mut net = Net::new(c, vec![alice(), Ua::new(5, primary), Ua::new(6, backup)]);
    dns_answer(
        &mut net,
        "_sip._udp.svc.example.net",
        QueryKind::Srv,
        DnsRecords::Srv(vec![
            SrvRecord {
                priority: 20,
                weight: 1,
                port: 5060,
                target: "backup.example.net".into(),
            },
            SrvRecord {
                priority: 10,
                weight: 1,
                port: 5060,
                target: "primary.example.net".into(),
            },
        ]),
    );
    for (host, last) in [("primary.example.net", 5), ("backup.example.net", 6)] {
        dns_answer(
            &mut net,
            host,
            QueryKind::Addr,
            DnsRecords::Addr(vec![ua_addr(last).ip()]),
        );
    }
    net
}

fn invite_to(user: &str, call: &str) -> Vec<u8> {
    request(
        "INVITE",
        &format!("sip:{user}@example.net"),
        ua_addr(1),
        &format!("z9hG4bK{call}"),
        1,
        &[("Call-ID", call)],
    )
}

/// INVITEs `ua` received for Call-ID `call` (retransmissions included).
fn invites_of(net: &Net, last: u8, call: &str) -> usize {
    net.ua(last)
        .requests("INVITE")
        .iter()
        .filter(|b| parse(b).call_id().ok() == Some(call.as_bytes()))
        .count()
}

#[test]
fn a_dns_routed_call_waits_for_its_lookups_then_fails_over_to_the_srv_backup() {
    let silent = Script {
        silent: true,
        ..Script::UAC
    };
    let mut net = dns_net(silent, Script::answers(1, 2, 200));
    net.send(1, invite_to("kim", "dns-1"));
    net.run_until(ms(10));
    // Parked, answered 100 meanwhile; NAPTR first, then SRV per transport, then A/AAAA.
    assert_eq!(net.ua(1).responses(100, "INVITE").len(), 1);
    let asked: Vec<String> = net
        .dns_asked
        .iter()
        .map(|q| format!("{} {}", q.kind, q.name))
        .collect();
    assert_eq!(
        asked[..3],
        [
            "NAPTR svc.example.net",
            "SRV _sip._udp.svc.example.net",
            "SRV _sip._tcp.svc.example.net"
        ]
    );
    assert_eq!(invites_of(&net, 5, "dns-1"), 1, "sent to the primary");
    assert_eq!(net.proxy.stats().dns_parked, 0);
    assert_eq!(net.proxy.stats().dns_parked_total, 1);
    // The primary never answers: after Timer B (64 × T1 = 32 s) the backup gets the INVITE
    // in a new branch of the same transaction, and the call completes.
    net.run_until(ms(40_000));
    assert_eq!(invites_of(&net, 6, "dns-1"), 1, "failed over");
    assert_eq!(net.ua(1).responses(200, "INVITE").len(), 1);
    assert_eq!(net.proxy.stats().failovers, 1);
    // The next call goes to the backup at once: the primary is marked failed, and the
    // answers are cached (the expired negative ones are asked again in the background,
    // the call does not wait for them).
    net.send(1, invite_to("lee", "dns-2"));
    net.run_until(ms(40_100));
    assert_eq!(invites_of(&net, 5, "dns-2"), 0);
    assert_eq!(invites_of(&net, 6, "dns-2"), 1);
    assert_eq!(net.ua(1).responses(200, "INVITE").len(), 2);
    assert_eq!(net.proxy.stats().dns_parked_total, 1, "not parked");
    assert_eq!(net.proxy.stats().failovers, 1);
    assert!(net.proxy.dns_stats().cache_hits >= 1);
}

#[test]
fn a_503_from_the_primary_fails_over_at_once() {
    let mut net = dns_net(Script::answers(1, 2, 503), Script::answers(1, 2, 200));
    net.send(1, invite_to("kim", "dns-3"));
    net.run_until(ms(100));
    assert_eq!(invites_of(&net, 5, "dns-3"), 1);
    assert_eq!(invites_of(&net, 6, "dns-3"), 1);
    assert_eq!(net.ua(1).responses(200, "INVITE").len(), 1);
    assert!(net.ua(1).responses(503, "INVITE").is_empty());
    assert_eq!(net.proxy.stats().failovers, 1);
}

#[test]
fn a_slow_lookup_delays_only_the_requests_waiting_for_it() {
    let mut net = dns_net(Script::answers(1, 2, 200), Script::answers(1, 2, 200));
    net.slow_names
        .insert("svc.example.net".into(), Duration::MAX);
    net.send(1, invite_to("kim", "slow-1"));
    net.run_until(ms(5));
    assert_eq!(net.proxy.stats().dns_parked, 1);
    // A request on another route goes on at once, its answer relayed while the other waits.
    net.send(
        1,
        request(
            "INVITE",
            "sip:bob@other.net",
            ua_addr(1),
            "z9hG4bKip1",
            1,
            &[("Call-ID", "ip-1")],
        ),
    );
    net.run_until(ms(20));
    assert_eq!(invites_of(&net, 6, "ip-1"), 1);
    assert_eq!(net.ua(1).responses(200, "INVITE").len(), 1);
    assert_eq!(net.proxy.stats().dns_parked, 1);
    // The lookup never comes back: the waiting request is answered 503 after park_timeout.
    net.run_until(ms(5_100));
    assert_eq!(net.ua(1).responses(503, "INVITE").len(), 1);
    let s = net.proxy.stats();
    assert_eq!((s.dns_parked, s.dns_park_timeouts), (0, 1));
    assert_eq!(invites_of(&net, 5, "slow-1"), 0);
}

#[test]
fn a_failed_lookup_stops_failing_once_the_name_resolves() {
    let mut net = dns_net(Script::answers(1, 2, 200), Script::answers(1, 2, 200));
    let saved = std::mem::take(&mut net.zone);
    net.send(1, invite_to("kim", "nx-1"));
    net.run_until(ms(100));
    assert_eq!(net.ua(1).responses(503, "INVITE").len(), 1);
    assert_eq!(net.proxy.stats().dns_unresolved, 1);
    // Within the negative TTL (1 s) the failure is answered from the cache: no lookup.
    let asked = net.dns_asked.len();
    net.send(1, invite_to("kim", "nx-2"));
    net.run_until(ms(200));
    assert_eq!(net.ua(1).responses(503, "INVITE").len(), 2);
    assert_eq!(net.dns_asked.len(), asked);
    // The records appear; once the negative answer is a second old, the very next call asks
    // again and goes through.
    net.zone = saved;
    net.run_until(ms(1_200));
    net.send(1, invite_to("kim", "nx-3"));
    net.run_until(ms(1_300));
    assert_eq!(invites_of(&net, 5, "nx-3"), 1);
    assert_eq!(net.ua(1).responses(200, "INVITE").len(), 1);
    assert_eq!(net.ua(1).responses(503, "INVITE").len(), 2);
}

#[test]
fn parking_is_bounded_and_a_cancel_ends_a_parked_invite() {
    let mut c = config();
    c.dns_routes = vec![DnsRoute {
        domain: "*".into(),
        target: "sip:svc.example.net".parse().expect("target"),
        edge: None,
    }];
    c.dns.max_parked_per_name = 2;
    let mut net = Net::new(c, vec![alice()]);
    net.slow_names
        .insert("svc.example.net".into(), Duration::MAX);
    for i in 0..3 {
        net.send(1, invite_to("kim", &format!("park-{i}")));
    }
    net.run_until(ms(10));
    let s = net.proxy.stats();
    assert_eq!((s.dns_parked, s.dns_park_full), (2, 1));
    assert_eq!(net.ua(1).responses(503, "INVITE").len(), 1);
    // One lookup for the three requests.
    assert_eq!(net.dns_asked.len(), 1);
    // CANCEL the first parked INVITE: 200 for the CANCEL, 487 for the INVITE, nothing sent.
    net.send(
        1,
        request(
            "CANCEL",
            "sip:kim@example.net",
            ua_addr(1),
            "z9hG4bKpark-0",
            1,
            &[("Call-ID", "park-0")],
        ),
    );
    net.run_until(ms(20));
    assert_eq!(net.ua(1).responses(200, "CANCEL").len(), 1);
    assert_eq!(net.ua(1).responses(487, "INVITE").len(), 1);
    assert_eq!(net.proxy.stats().dns_parked, 1);
}

#[test]
fn hash_route_targets_may_be_names_resolved_with_dns() {
    // Two clusters by name, each one address (port given: A/AAAA only).
    let names = ["sip:c5.example.test:5060", "sip:c6.example.test:5060"];
    let targets: Vec<HashTarget> = names
        .iter()
        .map(|n| HashTarget::named(n.parse().expect("target"), 1.0))
        .collect();
    let nodes: Vec<crate::hrw::HrwNode> = targets.iter().map(|t| t.node.clone()).collect();
    assert_eq!(nodes[0].id, "sip:c5.example.test:5060");
    let mut order = Vec::new();
    crate::hrw::rank(b"kim@example.net", &nodes, &mut order);
    let (first, second) = ([5u8, 6][order[0]], [5u8, 6][order[1]]);
    let mut c = config();
    c.hash_routes = vec![HashRoute {
        domain: "example.net".into(),
        failover: true,
        targets,
        edge: None,
        pick: Pick::Hash,
    }];
    c.probe = Some(ProbeConfig::default());
    let mut net = Net::new(
        c,
        vec![
            alice(),
            Ua::new(first, Script::answers(1, 2, 503)),
            Ua::new(second, Script::answers(1, 2, 200)),
        ],
    );
    for last in [5u8, 6] {
        dns_answer(
            &mut net,
            &format!("c{last}.example.test"),
            QueryKind::Addr,
            DnsRecords::Addr(vec![ua_addr(last).ip()]),
        );
    }
    net.send(1, invite_to("kim", "named-1"));
    net.run_until(ms(200));
    // Kim's target by the hash got it first, answered 503: the other cluster got it in a new
    // branch of the same transaction.
    assert_eq!(invites_of(&net, first, "named-1"), 1);
    assert_eq!(invites_of(&net, second, "named-1"), 1);
    assert_eq!(net.ua(1).responses(200, "INVITE").len(), 1);
    assert_eq!(net.proxy.stats().failovers, 1);
    assert_eq!(net.proxy.stats().dns_parked_total, 1);
    // Named targets are not probed (their address is DNS's business).
    assert!(net.ua(first).requests("OPTIONS").is_empty());
    assert_eq!(net.proxy.stats().probes_sent, 0);
}

#[test]
fn request_uri_host_names_are_resolved_when_on_and_the_source_may_relay() {
    let mut c = config();
    c.dns.request_uris = true;
    c.relay = RelayPolicy::Restricted {
        trusted: vec!["10.0.0.1".parse().expect("net")],
    };
    let mut net = Net::new(
        c,
        vec![
            alice(),
            Ua::new(6, Script::answers(1, 2, 200)),
            Ua::new(9, Script::UAC),
        ],
    );
    // No NAPTR, no SRV: the name's address on the default port.
    dns_answer(
        &mut net,
        "far.example.test",
        QueryKind::Addr,
        DnsRecords::Addr(vec![ua_addr(6).ip()]),
    );
    net.send(
        1,
        request(
            "INVITE",
            "sip:bob@far.example.test",
            ua_addr(1),
            "z9hG4bKfar1",
            1,
            &[("Call-ID", "far-1")],
        ),
    );
    net.run_until(ms(100));
    assert_eq!(invites_of(&net, 6, "far-1"), 1);
    assert_eq!(net.ua(1).responses(200, "INVITE").len(), 1);
    // An untrusted source may not relay to a host no route covers: 403 before any lookup.
    let asked = net.dns_asked.len();
    net.send(
        9,
        request(
            "INVITE",
            "sip:bob@other.example.test",
            ua_addr(9),
            "z9hG4bKfar2",
            1,
            &[("Call-ID", "far-2")],
        ),
    );
    net.run_until(ms(200));
    assert_eq!(net.ua(9).responses(403, "INVITE").len(), 1);
    assert_eq!(
        net.dns_asked.len(),
        asked,
        "no lookup for a source that may not relay"
    );
    assert_eq!(net.proxy.stats().dns_parked, 0);
}

// ---------------------------------------------------------------- cluster Record-Route

const CLUSTER_RR: &str = "<sip:c1.example.net;transport=udp;lr>";

/// The branches (client transactions) of the `method` requests UA `last` received:
/// retransmissions counted once.
fn branches(net: &Net, last: u8, method: &str) -> BTreeSet<String> {
    net.ua(last)
        .requests(method)
        .iter()
        .map(|r| top_branch(r))
        .collect()
}

#[test]
fn a_cluster_record_route_names_the_cluster_and_its_route_is_popped_as_ours() {
    let mut c = config();
    c.record_route_host = Some("c1.example.net".into());
    let mut net = Net::new(c, vec![alice(), Ua::new(2, Script::answers(10, 50, 200))]);
    net.register("bob", 2);
    net.send(1, invite("z9hG4bKcl1"));
    net.run_until(ms(500));
    // The Record-Route names the cluster, with the listener's transport.
    let invites = net.ua(2).requests("INVITE");
    assert_eq!(invites.len(), 1);
    assert_eq!(
        header(&invites[0], HeaderName::RecordRoute).as_deref(),
        Some(CLUSTER_RR)
    );
    let ok = net.ua(1).responses(200, "INVITE");
    assert_eq!(ok.len(), 1);
    assert_eq!(
        header(&ok[0].1, HeaderName::RecordRoute).as_deref(),
        Some(CLUSTER_RR)
    );
    let to = header(&ok[0].1, HeaderName::To).expect("To");
    // A BYE whose Route names the cluster (any case, a trailing dot) is ours: popped, and
    // the BYE goes to the Request-URI, never to the name.
    let bye = request(
        "BYE",
        "sip:bob@10.0.0.2:5060",
        ua_addr(1),
        "z9hG4bKclbye",
        2,
        &[
            ("To", &to),
            ("Route", "<sip:C1.Example.NET.;transport=udp;lr>"),
        ],
    );
    net.send(1, bye);
    net.run_until(ms(700));
    let byes = net.ua(2).requests("BYE");
    assert_eq!(byes.len(), 1);
    assert_eq!(
        header(&byes[0], HeaderName::Route),
        None,
        "our Route popped"
    );
    assert_eq!(net.ua(1).responses(200, "BYE").len(), 1);

    // Aliases: a name with a port counts with that port only, an address by value; the
    // record_route_host is one without being listed.
    let mut c = config();
    c.record_route_host = Some("c1.example.net".into());
    c.aliases = vec!["alias.example.net:5070".into(), "192.0.2.7".into()];
    for (route, ours) in [
        ("<sip:alias.example.net:5070;lr>", true),
        ("<sip:ALIAS.example.net;lr>", true),
        ("<sip:alias.example.net:5071;lr>", false),
        ("<sip:192.0.2.7;lr>", true),
        ("<sip:192.0.2.7:5060;lr>", true),
        ("<sip:192.0.2.8;lr>", false),
        ("<sip:c1.example.net:5060;transport=tcp;lr>", true),
        ("<sip:c2.example.net;lr>", false),
    ] {
        let bytes = request(
            "BYE",
            "sip:bob@10.0.0.2",
            ua_addr(1),
            "z9hG4bKal",
            2,
            &[("Route", route)],
        );
        let m = parse(&bytes);
        let plan = RoutePlan::new(&c, &m).expect("plan");
        assert_eq!(plan.own_route, ours, "{route}");
        assert_eq!(plan.next_route.is_none(), ours, "{route}");
    }
    for good in [
        "c1.example.net",
        "c1.example.net.",
        "c1.example.net:5070",
        "192.0.2.7",
        "192.0.2.7:5060",
        "[2001:db8::1]",
        "[2001:db8::1]:5060",
    ] {
        assert_eq!(check_host_port(good), Ok(()), "{good}");
    }
    for bad in [
        "",
        "c1 example",
        "c1.example.net:0",
        "c1.example.net:70000",
        "c1.example.net:x",
        "-c1.example.net",
        "c1..example.net",
        "sip:c1.example.net",
        "2001:db8::1",
        "[2001:db8::1",
        "c1.example.net;lr",
    ] {
        assert!(check_host_port(bad).is_err(), "{bad}");
    }
}

/// A first stage whose hash route covers the cluster name `c1.example.net` with UAs 5 and
/// 6; UA `dead` never answers, the other answers everything. Returns the net and a Call-ID
/// that ranks the dead UA first.
fn cluster_net(dead: u8, probe: bool) -> (Net, String) {
    let targets: Vec<HashTarget> = [5, 6]
        .iter()
        .map(|&n| HashTarget::new(ua_addr(n), Transport::Udp, 1.0))
        .collect();
    let nodes: Vec<crate::hrw::HrwNode> = targets.iter().map(|t| t.node.clone()).collect();
    let call_id = (0..100)
        .map(|i| format!("dlg-{i}@test"))
        .find(|id| {
            let mut order = Vec::new();
            crate::hrw::rank(id.as_bytes(), &nodes, &mut order);
            [5u8, 6][order[0]] == dead
        })
        .expect("a Call-ID ranking the dead UA first");
    let mut c = config();
    c.hash_routes = vec![HashRoute {
        domain: "c1.example.net".into(),
        failover: true,
        targets,
        edge: None,
        pick: Pick::Hash,
    }];
    c.probe = probe.then(ProbeConfig::default);
    let live = if dead == 5 { 6 } else { 5 };
    let silent = Script {
        silent: true,
        ..Script::UAC
    };
    let net = Net::new(
        c,
        vec![
            alice(),
            Ua::new(dead, silent),
            Ua::new(live, Script::answers(1, 2, 200)),
        ],
    );
    (net, call_id)
}

/// An in-dialog request of `call_id` through this proxy (its Record-Route first) and the
/// cluster `c1.example.net`.
fn in_dialog_to_cluster(method: &str, call_id: &str, cseq: u32) -> Vec<u8> {
    let routes = format!("{RR}, {CLUSTER_RR}");
    request(
        method,
        "sip:bob@10.0.0.9:5060",
        ua_addr(1),
        &format!("z9hG4bKdl{method}{cseq}"),
        cseq,
        &[
            ("To", "<sip:bob@example.com>;tag=b1"),
            ("Call-ID", call_id),
            ("Route", &routes),
        ],
    )
}

#[test]
fn a_bye_to_a_cluster_name_fails_over_to_the_other_member_on_timeout() {
    for dead in [5u8, 6] {
        let live = if dead == 5 { 6 } else { 5 };
        let (mut net, call_id) = cluster_net(dead, false);
        net.send(1, in_dialog_to_cluster("BYE", &call_id, 2));
        net.run_until(ms(1_000));
        // The Call-ID ranks the dead member first: the BYE went there, Route kept (the
        // member pops its alias), not to the Request-URI's host nor to the name.
        let first = net.ua(dead).requests("BYE");
        assert_eq!(parse(&first[0]).call_id().ok(), Some(call_id.as_bytes()));
        assert_eq!(
            header(&first[0], HeaderName::Route).as_deref(),
            Some(CLUSTER_RR)
        );
        assert!(net.ua(live).requests("BYE").is_empty());
        assert!(net.ua(1).responses(200, "BYE").is_empty());
        // Timer F (64 × T1): the next member gets it in a new branch, and answers.
        net.run_until(ms(40_000));
        let second = net.ua(live).requests("BYE");
        assert_eq!(second.len(), 1, "failed over");
        assert_eq!(
            header(&second[0], HeaderName::Route).as_deref(),
            Some(CLUSTER_RR)
        );
        assert_ne!(top_branch(&first[0]), top_branch(&second[0]));
        assert_eq!(net.ua(1).responses(200, "BYE").len(), 1);
        assert_eq!(net.proxy.stats().failovers, 1);
    }
}

#[test]
fn a_bye_to_a_cluster_name_goes_to_the_live_member_when_probing_found_the_other_down() {
    let (mut net, call_id) = cluster_net(5, true);
    net.run_until(ms(2_500));
    assert_eq!(net.proxy.stats().targets_down, 1);
    // The 2xx ACK (stateless) and the BYE go to the live member at once.
    net.send(1, in_dialog_to_cluster("ACK", &call_id, 1));
    net.send(1, in_dialog_to_cluster("BYE", &call_id, 2));
    net.run_until(ms(2_700));
    assert!(net.ua(5).requests("ACK").is_empty());
    assert!(net.ua(5).requests("BYE").is_empty());
    assert_eq!(net.ua(6).requests("ACK").len(), 1);
    let byes = net.ua(6).requests("BYE");
    assert_eq!(byes.len(), 1);
    assert_eq!(
        header(&byes[0], HeaderName::Route).as_deref(),
        Some(CLUSTER_RR)
    );
    assert_eq!(net.ua(1).responses(200, "BYE").len(), 1);
    assert_eq!(net.proxy.stats().failovers, 0);
    // A BYE sent to it while it was still counted up fails over when probing takes it
    // down, without waiting for Timer F.
    let (mut net, call_id) = cluster_net(5, true);
    net.send(1, in_dialog_to_cluster("BYE", &call_id, 2));
    net.run_until(ms(2_500));
    assert_eq!(branches(&net, 5, "BYE").len(), 1);
    assert_eq!(branches(&net, 6, "BYE").len(), 1);
    assert_eq!(net.ua(1).responses(200, "BYE").len(), 1);
    assert_eq!(net.proxy.stats().failovers, 1);
}

#[test]
fn a_route_naming_a_dns_routes_domain_goes_through_its_srv_targets() {
    // dns_net routes example.net to svc.example.net: SRV primary UA 5 (silent here), backup
    // UA 6. A BYE whose Route names example.net fails over to the backup like a call would.
    let silent = Script {
        silent: true,
        ..Script::UAC
    };
    let mut net = dns_net(silent, Script::answers(1, 2, 200));
    let routes = format!("{RR}, <sip:example.net;transport=udp;lr>");
    net.send(
        1,
        request(
            "BYE",
            "sip:bob@10.0.0.9:5060",
            ua_addr(1),
            "z9hG4bKdnsbye",
            2,
            &[("To", "<sip:bob@example.com>;tag=b1"), ("Route", &routes)],
        ),
    );
    net.run_until(ms(40_000));
    assert_eq!(branches(&net, 5, "BYE").len(), 1);
    assert_eq!(branches(&net, 6, "BYE").len(), 1);
    assert_eq!(net.ua(1).responses(200, "BYE").len(), 1);
    assert_eq!(net.proxy.stats().failovers, 1);
}

// ---------------------------------------------------------------- stateless first stage

/// A stateless first stage ([`ProxyMode::Stateless`]) sharing example.net's users between
/// UAs 5 and 6, `user` hashing to the one with script `first` (the other runs `second`).
/// Returns the net and the two UAs in the user's rendezvous order.
fn stateless_net(user: &str, first: Script, second: Script, probe: bool) -> (Net, u8, u8) {
    let targets: Vec<HashTarget> = [5, 6]
        .iter()
        .map(|&n| HashTarget::new(ua_addr(n), Transport::Udp, 1.0))
        .collect();
    let nodes: Vec<crate::hrw::HrwNode> = targets.iter().map(|t| t.node.clone()).collect();
    let mut order = Vec::new();
    crate::hrw::rank(format!("{user}@example.net").as_bytes(), &nodes, &mut order);
    let (a, b) = ([5u8, 6][order[0]], [5u8, 6][order[1]]);
    let mut c = config();
    c.mode = ProxyMode::Stateless;
    c.hash_routes = vec![HashRoute {
        domain: "example.net".into(),
        failover: true,
        targets,
        edge: None,
        pick: Pick::Hash,
    }];
    c.probe = probe.then(ProbeConfig::default);
    let net = Net::new(c, vec![alice(), Ua::new(a, first), Ua::new(b, second)]);
    (net, a, b)
}

fn invite_for(user: &str, branch: &str, call_id: &str) -> Vec<u8> {
    request(
        "INVITE",
        &format!("sip:{user}@example.net"),
        ua_addr(1),
        branch,
        1,
        &[
            ("To", &format!("<sip:{user}@example.net>")),
            ("Call-ID", call_id),
        ],
    )
}

/// Nothing the stateless path did created a server transaction or fell back.
fn assert_stateless(net: &Net) {
    let s = net.proxy.stats();
    assert_eq!(s.server_transactions_total, 0, "{s:?}");
    assert_eq!(s.stateless_fallbacks, [0; 6], "{s:?}");
    assert_eq!(net.proxy.active_calls(), 0);
}

#[test]
fn a_stateless_first_stage_forwards_a_call_to_the_hashed_target_without_a_transaction() {
    let (mut net, first, other) = stateless_net(
        "kim",
        Script::answers(10, 50, 200),
        Script::answers(10, 50, 200),
        false,
    );
    net.send(1, invite_for("kim", "z9hG4bKsl1", "sl-call-1"));
    net.run_until(ms(1));
    assert_eq!(net.sent.len(), 1, "forwarded at once");
    // Sent on at once, without a transaction (no 100 Trying of our own either).
    assert!(net.proxy.transactions().is_empty());
    assert_eq!(net.proxy.poll_timeout(), None, "no timer");
    assert!(net.ua(1).responses(100, "INVITE").is_empty());
    // The caller retransmits before anything came back: the same copy goes to the same
    // target (the target absorbs it as a retransmission).
    net.send(1, invite_for("kim", "z9hG4bKsl1", "sl-call-1"));
    net.run_until(ms(500));
    let got = net.ua(first).requests("INVITE");
    assert_eq!(got.len(), 2, "each copy forwarded");
    assert!(net.ua(other).requests("INVITE").is_empty());
    let branch = top_branch(&got[0]);
    assert!(branch.starts_with("z9hG4bKs"), "{branch}");
    assert_eq!(
        branch,
        top_branch(&got[1]),
        "same branch for a retransmission"
    );
    assert_eq!(got[0], got[1], "the same copy");
    // Record-routed as the stateful first stage does; no overload offer.
    assert_eq!(
        header(&got[0], HeaderName::RecordRoute).as_deref(),
        Some(RR)
    );
    assert_eq!(parse(&got[0]).vias().count(), 2);
    // The responses came back by their Via: 100 (the target's), 180, 200.
    assert_eq!(net.ua(1).responses(100, "INVITE").len(), 1);
    assert_eq!(net.ua(1).responses(180, "INVITE").len(), 1);
    let ok = net.ua(1).responses(200, "INVITE");
    assert_eq!(ok.len(), 1);
    assert_eq!(parse(&ok[0].1).vias().count(), 1, "our Via popped");
    // The ACK and the BYE of the dialog (through our Record-Route, then the target's
    // Contact) go to the same target, statelessly too.
    let contact = format!("sip:bob@{}", ua_addr(first));
    for (method, cseq, branch) in [("ACK", 1, "z9hG4bKsla"), ("BYE", 2, "z9hG4bKslb")] {
        net.send(
            1,
            request(
                method,
                &contact,
                ua_addr(1),
                branch,
                cseq,
                &[
                    ("To", &format!("<sip:kim@example.net>;tag=tag{first}")),
                    ("Call-ID", "sl-call-1"),
                    ("Route", RR),
                ],
            ),
        );
    }
    net.run_until(ms(1_000));
    assert_eq!(net.ua(first).requests("ACK").len(), 1);
    let bye = net.ua(first).requests("BYE");
    assert_eq!(bye.len(), 1);
    assert_eq!(header(&bye[0], HeaderName::Route), None, "our Route popped");
    assert_eq!(net.ua(1).responses(200, "BYE").len(), 1);
    assert_stateless(&net);
    // Forwarded: INVITE ×2, ACK, BYE; relayed: 100, 180, 200, 200.
    assert_eq!(net.proxy.stats().stateless, 8);
    assert!(net.proxy.transactions().is_empty());
}

#[test]
fn a_stateless_cancel_and_the_ack_of_the_487_follow_the_invite() {
    let (mut net, first, other) = stateless_net(
        "kim",
        Script::rings_forever(),
        Script::rings_forever(),
        false,
    );
    // The caller acknowledges the 487 below (the scripted one would write another
    // Request-URI).
    net.uas[0].script.answer = Some((0, 200));
    net.send(1, invite_for("kim", "z9hG4bKslc", "sl-call-2"));
    net.run_until(ms(100));
    assert_eq!(net.ua(1).responses(180, "INVITE").len(), 1);
    net.send(
        1,
        request(
            "CANCEL",
            "sip:kim@example.net",
            ua_addr(1),
            "z9hG4bKslc",
            1,
            &[("To", "<sip:kim@example.net>"), ("Call-ID", "sl-call-2")],
        ),
    );
    net.run_until(ms(500));
    let invite = net.ua(first).requests("INVITE");
    let cancel = net.ua(first).requests("CANCEL");
    assert_eq!(cancel.len(), 1);
    assert_eq!(
        top_branch(&cancel[0]),
        top_branch(&invite[0]),
        "the INVITE's branch"
    );
    // The target answered the CANCEL (200) and the INVITE (487): both relayed; the caller's
    // ACK of the 487 goes to the target with the INVITE's branch too.
    assert_eq!(net.ua(1).responses(200, "CANCEL").len(), 1);
    assert_eq!(net.ua(1).responses(487, "INVITE").len(), 1);
    net.send(
        1,
        request(
            "ACK",
            "sip:kim@example.net",
            ua_addr(1),
            "z9hG4bKslc",
            1,
            &[
                ("To", &format!("<sip:kim@example.net>;tag=tag{first}")),
                ("Call-ID", "sl-call-2"),
            ],
        ),
    );
    net.run_until(ms(600));
    let ack = net.ua(first).requests("ACK");
    assert_eq!(ack.len(), 1);
    assert_eq!(top_branch(&ack[0]), top_branch(&invite[0]));
    assert!(
        net.ua(other).inbox.is_empty(),
        "nothing to the other target"
    );
    assert_stateless(&net);
    assert!(net.proxy.transactions().is_empty());
}

#[test]
fn a_stateless_first_stage_skips_a_target_probing_took_down() {
    let silent = Script {
        silent: true,
        ..Script::UAC
    };
    let (mut net, dead, live) = stateless_net("kim", silent, Script::answers(1, 2, 200), true);
    // Sent before probing found anything: to the (dead) first target.
    net.send(1, invite_for("kim", "z9hG4bKslp1", "sl-call-3"));
    net.run_until(ms(100));
    assert_eq!(net.ua(dead).requests("INVITE").len(), 1);
    // Probes every second, failed after 500 ms, down after two: down within 2 s.
    net.run_until(ms(2_500));
    assert_eq!(net.proxy.stats().targets_down, 1);
    // No failover within the request (there is no transaction): the caller's own
    // retransmission, routed again, reaches the next target, with the same branch.
    assert!(net.ua(live).requests("INVITE").is_empty());
    net.send(1, invite_for("kim", "z9hG4bKslp1", "sl-call-3"));
    // A new call for the same user goes straight to the live target.
    net.send(1, invite_for("kim", "z9hG4bKslp2", "sl-call-4"));
    net.run_until(ms(3_000));
    let got = net.ua(live).requests("INVITE");
    assert_eq!(got.len(), 2);
    assert_eq!(
        top_branch(&got[0]),
        top_branch(&net.ua(dead).requests("INVITE")[0]),
        "the retransmission keeps its branch"
    );
    assert_eq!(net.ua(dead).requests("INVITE").len(), 1);
    assert_eq!(net.ua(1).responses(200, "INVITE").len(), 2);
    let s = net.proxy.stats();
    assert_eq!(s.failovers, 0);
    assert!(
        s.probes_sent >= 4,
        "probes are the proxy's own transactions"
    );
    assert_stateless(&net);
}

#[test]
fn a_transport_change_falls_back_to_the_stateful_path() {
    let (mut net, first, _) = stateless_net(
        "kim",
        Script::rings_forever(),
        Script::rings_forever(),
        false,
    );
    // The caller reaches the first stage over TCP; the second stages are UDP targets.
    let tcp = Peer {
        addr: ua_addr(1),
        transport: Transport::Tcp,
        conn: None,
    };
    let mut c = net.proxy.config().clone();
    c.listen.push(ListenAddr {
        transport: Transport::Tcp,
        addr: PROXY,
    });
    net.proxy = Endpoint::new(c, Arc::new(MemStore::default()));
    let via = format!("SIP/2.0/TCP {};branch=z9hG4bKsltcp", ua_addr(1));
    let over_tcp = |method: &str| {
        request(
            method,
            "sip:kim@example.net",
            ua_addr(1),
            "z9hG4bKsltcp",
            1,
            &[
                ("Via", &via),
                ("To", "<sip:kim@example.net>"),
                ("Call-ID", "sl-call-5"),
            ],
        )
    };
    let now = net.now;
    net.proxy
        .handle(now, &over_tcp("INVITE"), tcp, Transport::Tcp);
    net.run_until(ms(100));
    let s = net.proxy.stats();
    assert_eq!(s.fell_back(StatelessFallback::Transport), 1, "{s:?}");
    assert_eq!(s.server_transactions_total, 1);
    assert_eq!(s.forwarded, 1, "through a client transaction");
    let got = net.ua(first).requests("INVITE");
    assert_eq!(got.len(), 1);
    assert!(
        !top_branch(&got[0]).starts_with("z9hG4bKs"),
        "a stateful branch"
    );
    // The stateful path double record-routes the transport change and answers 100 itself.
    assert_eq!(parse(&got[0]).values(HeaderName::RecordRoute).count(), 2);
    assert_eq!(
        net.ua(1).responses(100, "INVITE").len(),
        1,
        "ours (100 is hop by hop)"
    );
    // The CANCEL goes to the INVITE's transaction: answered here, and a CANCEL of the
    // client transaction goes to the target.
    let now = net.now;
    net.proxy
        .handle(now, &over_tcp("CANCEL"), tcp, Transport::Tcp);
    net.run_until(ms(500));
    let s = net.proxy.stats();
    assert_eq!(s.fell_back(StatelessFallback::Transaction), 1, "{s:?}");
    let cancel = net.ua(first).requests("CANCEL");
    assert_eq!(cancel.len(), 1);
    assert_eq!(top_branch(&cancel[0]), top_branch(&got[0]));
    assert_eq!(net.ua(1).responses(200, "CANCEL").len(), 1);
    assert_eq!(net.ua(1).responses(487, "INVITE").len(), 1);
}

#[test]
fn proxy_authentication_falls_back_to_the_stateful_path() {
    let (net, _, _) = stateless_net(
        "kim",
        Script::answers(1, 2, 200),
        Script::answers(1, 2, 200),
        false,
    );
    // The first stage serves example.com (alice's domain, in From): her calls must
    // authenticate (no source trusted).
    let mut c = auth_config(Vec::new());
    c.mode = ProxyMode::Stateless;
    c.hash_routes = net.proxy.config().hash_routes.clone();
    let mut net = Net::new(c, net.uas);
    net.send(1, invite_for("kim", "z9hG4bKslauth", "sl-call-6"));
    net.run_until(ms(100));
    let s = net.proxy.stats();
    assert_eq!(s.fell_back(StatelessFallback::Authentication), 1, "{s:?}");
    assert_eq!(net.ua(1).responses(407, "INVITE").len(), 1);
    assert_eq!(s.stateless, 0);
}

// ---------------------------------------------------------------- tests: redirect mode

fn contacts(bytes: &[u8]) -> Vec<String> {
    parse(bytes)
        .values(HeaderName::Contact)
        .map(|v| String::from_utf8_lossy(v.bytes).into_owned())
        .collect()
}

#[test]
fn redirect_mode_answers_an_invite_with_the_users_bindings_and_forwards_nothing() {
    let mut c = config();
    c.mode = ProxyMode::Redirect;
    let mut net = Net::new(
        c,
        vec![
            alice(),
            Ua::new(2, Script::answers(10, 50, 200)),
            Ua::new(3, Script::answers(10, 50, 200)),
        ],
    );
    net.register("bob", 2);
    net.register("bob", 3);
    let sent_before = net.sent.len();
    net.send(1, invite("z9hG4bKredir1"));
    net.run_until(ms(1_000));
    // Nothing went to bob's phones: the caller got his contacts instead.
    assert!(net.ua(2).requests("INVITE").is_empty());
    assert!(net.ua(3).requests("INVITE").is_empty());
    let a = net.ua(1);
    assert!(
        a.responses(100, "INVITE").is_empty(),
        "no 100 for a redirect"
    );
    let moved = a.responses(302, "INVITE");
    assert_eq!(moved.len(), 1, "one 302");
    let got = contacts(&moved[0].1);
    assert_eq!(got.len(), 2, "{got:?}");
    let mut uris: Vec<&str> = got
        .iter()
        .map(|c| c.split(';').next().unwrap_or_default())
        .collect();
    uris.sort_unstable();
    assert_eq!(
        uris,
        vec!["<sip:bob@10.0.0.2:5060>", "<sip:bob@10.0.0.3:5060>"],
        "{got:?}"
    );
    assert!(
        got[0].ends_with(";q=1.0") && got[1].ends_with(";q=0.9"),
        "{got:?}"
    );
    // Only the 302 (and its retransmissions until alice's ACK) left the proxy.
    assert!(
        net.sent[sent_before..]
            .iter()
            .all(|(_, to, b)| *to == ua_addr(1) && status_of(b) == 302),
        "the proxy sent something else"
    );
    assert_eq!(net.proxy.stats().redirected, 1);
    net.run();
    assert_idle(&net);
}

#[test]
fn redirect_mode_answers_404_for_a_user_without_bindings_and_takes_registrations() {
    let mut c = config();
    c.mode = ProxyMode::Redirect;
    let mut net = Net::new(c, vec![alice(), Ua::new(2, Script::answers(10, 50, 200))]);
    // The registrar works as in any mode (`register` asserts the 200).
    net.register("carol", 2);
    net.send(1, invite("z9hG4bKredir404"));
    net.run_until(ms(1_000));
    assert_eq!(net.ua(1).responses(404, "INVITE").len(), 1);
    assert!(net.ua(1).responses(302, "INVITE").is_empty());
    assert_eq!(net.proxy.stats().redirected, 0);
}

#[test]
fn redirect_mode_on_a_first_stage_sends_the_caller_to_the_hashed_cluster_then_its_backup() {
    let targets: Vec<HashTarget> = [5, 6]
        .iter()
        .map(|&n| HashTarget::new(ua_addr(n), Transport::Udp, 1.0))
        .collect();
    let nodes: Vec<crate::hrw::HrwNode> = targets.iter().map(|t| t.node.clone()).collect();
    let mut order = Vec::new();
    crate::hrw::rank(b"kim@example.net", &nodes, &mut order);
    let (first, second) = ([5u8, 6][order[0]], [5u8, 6][order[1]]);
    let mut c = config();
    c.mode = ProxyMode::Redirect;
    c.hash_routes = vec![HashRoute {
        domain: "example.net".into(),
        failover: true,
        targets,
        edge: None,
        pick: Pick::Hash,
    }];
    let mut net = Net::new(
        c,
        vec![
            alice(),
            Ua::new(5, Script::answers(10, 50, 200)),
            Ua::new(6, Script::answers(10, 50, 200)),
        ],
    );
    net.send(1, invite_for("kim", "z9hG4bKredirh", "redir-hash-1"));
    net.run_until(ms(1_000));
    assert!(net.ua(5).requests("INVITE").is_empty());
    assert!(net.ua(6).requests("INVITE").is_empty());
    let moved = net.ua(1).responses(302, "INVITE");
    assert_eq!(moved.len(), 1);
    assert_eq!(
        contacts(&moved[0].1),
        vec![
            format!("<sip:kim@{}>;q=1.0", ua_addr(first)),
            format!("<sip:kim@{}>;q=0.9", ua_addr(second)),
        ]
    );
}

#[test]
fn redirect_mode_proxies_requests_within_a_dialog() {
    let mut c = config();
    c.mode = ProxyMode::Redirect;
    let mut net = Net::new(c, vec![alice(), Ua::new(2, Script::answers(10, 50, 200))]);
    net.register("bob", 2);
    // A BYE of a dialog set up around this server still reaches bob.
    net.send(
        1,
        request(
            "BYE",
            "sip:bob@example.com",
            ua_addr(1),
            "z9hG4bKredirbye",
            2,
            &[("To", "<sip:bob@example.com>;tag=b2")],
        ),
    );
    net.run_until(ms(1_000));
    assert_eq!(net.ua(2).requests("BYE").len(), 1);
    assert_eq!(net.ua(1).responses(200, "BYE").len(), 1);
    assert_eq!(net.proxy.stats().redirected, 0);
}

// ---------------------------------------------------------------- tests: registration propagation

fn propagating_config(backup: u8) -> ProxyConfig {
    let mut c = config();
    c.propagate_registrations = vec![udp(ua_addr(backup))];
    c
}

#[test]
fn an_accepted_register_is_copied_to_the_backup_with_the_phones_address() {
    let mut net = Net::new(
        propagating_config(9),
        vec![alice(), Ua::new(2, Script::UAC), Ua::new(9, Script::UAC)],
    );
    net.register("bob", 2);
    net.run_until(ms(1_000));
    let copies = net.ua(9).requests("REGISTER");
    assert_eq!(copies.len(), 1, "one copy to the backup");
    let m = parse(&copies[0]);
    let vias: Vec<_> = m.vias().flatten().collect();
    assert_eq!(vias.len(), 2, "our Via over the phone's");
    assert!(is_our_via(net.proxy.config(), &vias[0]));
    // The phone's Via says where the phone is (the backup routes calls there).
    assert_eq!(
        via_destination(&vias[1]).map(|p| p.addr),
        Some(ua_addr(2)),
        "{}",
        String::from_utf8_lossy(&copies[0])
    );
    assert_eq!(
        header(&copies[0], HeaderName::Contact).as_deref(),
        Some("<sip:bob@10.0.0.2:5060>")
    );
    assert_eq!(
        m.call_id().ok(),
        Some(&b"reg-bob-2"[..]),
        "the phone's Call-ID"
    );
    let s = net.proxy.stats();
    assert_eq!(
        (
            s.registrations_propagated,
            s.registration_copies_acked,
            s.registration_copies_failed
        ),
        (1, 1, 0)
    );
    // The backup's 200 went nowhere else: the phone got exactly one 200.
    assert_eq!(net.ua(2).responses(200, "REGISTER").len(), 1);
    net.run();
    assert_idle(&net);
}

#[test]
fn a_copy_from_the_peer_is_stored_for_the_phone_and_not_copied_back() {
    // This server is the backup: 10.0.0.9 propagates to it, and it names 10.0.0.9 back.
    let mut net = Net::new(
        propagating_config(9),
        vec![
            alice(),
            Ua::new(2, Script::answers(10, 50, 200)),
            Ua::new(9, Script::UAC),
        ],
    );
    let copy = request(
        "REGISTER",
        "sip:example.com",
        ua_addr(9),
        "z9hG4bKprimary1",
        1,
        &[
            ("To", "<sip:bob@example.com>"),
            ("From", "<sip:bob@example.com>;tag=r2"),
            ("Contact", "<sip:bob@10.0.0.2:5060>"),
            ("Call-ID", "reg-bob-2"),
            ("Expires", "3600"),
        ],
    );
    // The phone's Via under the primary's, annotated by the primary.
    let text = String::from_utf8(copy).expect("utf8").replacen(
        "Max-Forwards",
        "Via: SIP/2.0/UDP 10.0.0.2:5060;branch=z9hG4bKphone1;received=10.0.0.2;rport=5060\r\nMax-Forwards",
        1,
    );
    net.send(9, text.into_bytes());
    net.run_until(ms(100));
    assert_eq!(
        net.ua(9).responses(200, "REGISTER").len(),
        1,
        "the copy was stored"
    );
    assert!(
        !net.sent
            .iter()
            .any(|(_, to, b)| *to == ua_addr(9) && method_of(b) == "REGISTER"),
        "a copy is not copied back"
    );
    assert_eq!(net.proxy.stats().registrations_propagated, 0);
    // A call for bob now goes to the phone, not to the server that sent the copy.
    net.send(1, invite("z9hG4bKaftercopy"));
    net.run_until(ms(1_000));
    assert_eq!(net.ua(2).requests("INVITE").len(), 1);
    assert!(net.ua(9).requests("INVITE").is_empty());
}

#[test]
fn an_unanswered_copy_is_counted_as_failed_and_does_not_hold_the_phones_200() {
    let mut net = Net::new(
        propagating_config(9),
        vec![
            alice(),
            Ua::new(2, Script::UAC),
            Ua::new(
                9,
                Script {
                    silent: true,
                    ..Script::UAC
                },
            ),
        ],
    );
    // `register` asserts the phone's 200 within 10 ms.
    net.register("bob", 2);
    net.run_until(ms(40_000));
    // Retransmitted (Timer E) to the silent backup, then given up (Timer F).
    assert!(net.ua(9).requests("REGISTER").len() > 1);
    let s = net.proxy.stats();
    assert_eq!(
        (s.registrations_propagated, s.registration_copies_failed),
        (1, 1)
    );
}

#[test]
fn forwarded_invites_tell_the_next_hop_the_load_offered_to_it() {
    let forward = |advertise: bool| {
        let mut config = routed_config();
        config.advertise_offered_load = advertise;
        let mut e = Endpoint::new(config, Arc::new(MemStore::default()));
        let mut last = String::new();
        // 20 new INVITEs per second offered for 3 s.
        for i in 0..60u64 {
            let now = ms(i * 50);
            let invite = request(
                "INVITE",
                "sip:bob@far.example.net",
                ua_addr(1),
                &format!("z9hG4bKo{i}"),
                i as u32 + 1,
                &[],
            );
            // The forward gate (smart forwarding) rejects every other one: the next hop
            // is told the load offered, not the load that got through.
            let reject = i % 2 == 1;
            e.handle_admitting(
                now,
                &invite,
                udp(ua_addr(1)),
                Transport::Udp,
                &mut |_, _| None,
                &mut |_, _| reject.then_some(REJECT),
            );
            let out = drain_to(&mut e, now);
            if let Some((_, fwd)) = out.iter().find(|(p, _)| p.addr == ua_addr(5)) {
                last = top_via(fwd);
            }
        }
        last
    };
    let via = forward(true);
    let rate: f64 = via
        .split(";hl-offered=")
        .nth(1)
        .and_then(|r| r.split([';', ',']).next())
        .and_then(|r| r.trim().parse().ok())
        .unwrap_or_else(|| panic!("no hl-offered in {via}"));
    assert!((rate - 20.0).abs() < 2.0, "{via}");
    assert!(!forward(false).contains("hl-offered"), "off by default");
}

#[test]
fn a_reconfigured_route_takes_new_calls_and_the_call_in_progress_finishes_where_it_went() {
    let route = |ua: u8| {
        vec![StaticRoute {
            domain: "*".into(),
            next_hop: ua_addr(ua),
            transport: Transport::Udp,
            stateless: false,
            edge: None,
        }]
    };
    let mut c = config();
    c.static_routes = route(5);
    let mut net = Net::new(
        c,
        vec![
            alice(),
            Ua::new(5, Script::answers(10, 20, 200)),
            Ua::new(6, Script::answers(10, 20, 200)),
        ],
    );
    let ruri = "sip:carol@elsewhere.example";
    net.send(
        1,
        request("INVITE", ruri, ua_addr(1), "z9hG4bKfirst", 1, &[]),
    );
    net.run_until(ms(5));
    assert_eq!(
        net.ua(5).requests("INVITE").len(),
        1,
        "sent before the reload"
    );
    // The reload: the route now goes to 6; calls and transactions stay.
    let mut new = net.proxy.config().clone();
    new.static_routes = route(6);
    new.domains = vec!["example.org".into()];
    net.proxy.reconfigure(&new);
    assert_eq!(net.proxy.config().domains, ["example.org"]);
    net.send(
        1,
        request(
            "INVITE",
            ruri,
            ua_addr(1),
            "z9hG4bKsecond",
            1,
            &[("Call-ID", "call-2@test")],
        ),
    );
    net.run_until(ms(100));
    assert_eq!(net.ua(5).requests("INVITE").len(), 1, "nothing new to 5");
    assert_eq!(net.ua(6).requests("INVITE").len(), 1, "the new call to 6");
    assert_eq!(
        net.ua(1).responses(200, "INVITE").len(),
        2,
        "both calls answered"
    );
}

#[test]
fn a_forwarded_invite_is_answered_once_by_its_first_response_or_its_end() {
    use crate::EndpointEvent::{BranchAnswered, BranchEnded, BranchStarted};
    let mut c = routed_config();
    c.branch_events = true;
    let mut e = Endpoint::new(c, Arc::new(MemStore::default()));
    let kinds = |e: &mut Endpoint| {
        let mut v = Vec::new();
        while let Some(ev) = e.poll_event() {
            v.push(match ev {
                BranchStarted { .. } => "started".to_owned(),
                // The delay to the first response: the next hop's, without any ringing.
                BranchAnswered { delay, .. } => format!("answered {} ms", delay.as_millis()),
                BranchEnded { .. } => "ended".to_owned(),
                _ => "other".to_owned(),
            });
        }
        v
    };
    let respond = |e: &mut Endpoint, at: u64, fwd: &[u8], status: u16| {
        let mut r = Vec::new();
        build_response(&parse(fwd), status, "X", Some(b"t1"), &[], b"", &mut r);
        e.handle(ms(at), &r, udp(ua_addr(5)), Transport::Udp);
    };
    let forward = forward_far;
    // 100, 180, then 200: answered by the 100, once.
    let fwd = forward(&mut e, 0, "z9hG4bKa1");
    assert_eq!(kinds(&mut e), ["started"]);
    respond(&mut e, 5, &fwd, 100);
    assert_eq!(kinds(&mut e), ["answered 5 ms"]);
    respond(&mut e, 6, &fwd, 180);
    respond(&mut e, 3_000, &fwd, 200);
    assert_eq!(kinds(&mut e), ["ended"]);
    // A final response first: answered, then ended.
    let fwd = forward(&mut e, 10, "z9hG4bKa2");
    assert_eq!(kinds(&mut e), ["started"]);
    respond(&mut e, 12, &fwd, 486);
    assert_eq!(kinds(&mut e), ["answered 2 ms", "ended"]);
    // No response at all: answered and ended by Timer B.
    forward(&mut e, 20, "z9hG4bKa3");
    assert_eq!(kinds(&mut e), ["started"]);
    let mut now = ms(20);
    let mut seen = Vec::new();
    while !seen.iter().any(|k: &String| k == "ended") && now < ms(100_000) {
        now = e
            .poll_timeout()
            .unwrap_or(now + Duration::from_millis(500))
            .max(now);
        e.handle_timeout(now);
        let _ = drain_to(&mut e, now);
        seen.extend(kinds(&mut e));
    }
    assert_eq!(seen, ["answered 32000 ms", "ended"]);
}

#[test]
fn the_server_role_answers_window_clients_with_an_even_share_of_its_window() {
    use holdline_sip::OcAlgo;
    let mut e = Endpoint::new(routed_config(), Arc::new(MemStore::default()));
    let answer = |window, window_exempt| crate::OverloadAnswer {
        loss_percent: 40,
        validity_ms: 500,
        exempt: true,
        window_exempt,
        rate: crate::RateAnswer::Off,
        window,
    };
    e.set_overload_answer(Some(answer(crate::RateAnswer::Total(9), true)));
    let mut asked = Vec::new();
    for (i, (client, params)) in [
        (1u8, ";oc;oc-algo=\"window,loss\""),
        (2, ";oc;oc-algo=\"window\""),
        (3, ";oc"),
    ]
    .into_iter()
    .enumerate()
    {
        let inv = invite_from(
            client,
            &format!("z9hG4bKw{i}"),
            &format!("w{i}@test"),
            params,
        );
        e.handle_admitting(
            ms(1),
            &inv,
            udp(ua_addr(client)),
            Transport::Udp,
            &mut |_, exempt| {
                asked.push(exempt);
                None
            },
            &mut |_, _| None,
        );
    }
    assert_eq!(asked, [true, true, true]);
    let out = drain_to(&mut e, ms(1));
    let answer_to = |client: u8| {
        out.iter()
            .find(|(p, b)| p.addr == ua_addr(client) && status_of(b) == 100)
            .and_then(|(_, b)| oc_params(&top_via(b)))
            .expect("answered")
    };
    // 9 over two window clients, rounded up; the loss-only client gets the loss answer.
    let (a1, a2, a3) = (answer_to(1), answer_to(2), answer_to(3));
    assert_eq!(
        (a1.algo, a1.value, a1.validity_ms),
        (OcAlgo::Window, 5, 500)
    );
    assert_eq!((a2.algo, a2.value), (OcAlgo::Window, 5));
    assert_eq!((a3.algo, a3.value), (OcAlgo::Loss, 40));
    let t = e.take_feedback_tally();
    assert_eq!((t.window_invites, t.window_clients), (2, 2));
    assert_eq!((t.rate_invites, t.rate_clients), (0, 0));
    // A backlog beyond the window's target: window clients go to the gate, loss ones not.
    e.set_overload_answer(Some(answer(crate::RateAnswer::Total(9), false)));
    let mut asked = Vec::new();
    for (i, (client, params)) in [(1u8, ";oc;oc-algo=\"window\""), (3, ";oc")]
        .into_iter()
        .enumerate()
    {
        let inv = invite_from(
            client,
            &format!("z9hG4bKx{i}"),
            &format!("x{i}@test"),
            params,
        );
        e.handle_admitting(
            ms(2),
            &inv,
            udp(ua_addr(client)),
            Transport::Udp,
            &mut |_, exempt| {
                asked.push(exempt);
                None
            },
            &mut |_, _| None,
        );
    }
    assert_eq!(asked, [false, true]);
    // Not controlling: an idle window answer; windows not answered: a window-only client
    // gets nothing.
    e.set_overload_answer(Some(answer(crate::RateAnswer::Idle, true)));
    let _ = drain_to(&mut e, ms(2));
    let inv = invite_from(2, "z9hG4bKw9", "w9@test", ";oc;oc-algo=\"window\"");
    e.handle(ms(3), &inv, udp(ua_addr(2)), Transport::Udp);
    let out = drain_to(&mut e, ms(3));
    let idle = out
        .iter()
        .find(|(_, b)| status_of(b) == 100)
        .and_then(|(_, b)| oc_params(&top_via(b)))
        .expect("answered");
    assert_eq!(
        (idle.algo, idle.value, idle.validity_ms),
        (OcAlgo::Window, 0, 0)
    );
    e.set_overload_answer(Some(answer(crate::RateAnswer::Off, true)));
    let inv = invite_from(2, "z9hG4bKw10", "w10@test", ";oc;oc-algo=\"window\"");
    e.handle(ms(4), &inv, udp(ua_addr(2)), Transport::Udp);
    let out = drain_to(&mut e, ms(4));
    let t = out.iter().find(|(_, b)| status_of(b) == 100).expect("100");
    assert_eq!(oc_params(&top_via(&t.1)), None);
}

/// Sends INVITE `ruri` (CSeq `n`, at `n`·10 ms) through `e` to the default route's next hop,
/// answers it `status` with `rr` as its Record-Route (top first), and returns the edge the
/// forward gate was asked with.
fn invite_answered_with_record_route(
    e: &mut Endpoint,
    n: u32,
    ruri: &str,
    status: u16,
    rr: &[&str],
) -> Option<EdgeId> {
    let at = ms(u64::from(n) * 10);
    let msg = request(
        "INVITE",
        ruri,
        ua_addr(1),
        &format!("z9hG4bKlearn{n}"),
        n,
        &[],
    );
    let mut asked = None;
    e.handle_admitting(
        at,
        &msg,
        udp(ua_addr(1)),
        Transport::Udp,
        &mut |_, _| None,
        &mut |_, edge| {
            asked = Some(edge);
            None
        },
    );
    let fwd = drain_to(e, at)
        .into_iter()
        .find(|(p, b)| p.addr == ua_addr(5) && b.starts_with(b"INVITE"))
        .map(|(_, b)| b)
        .expect("forwarded");
    let extra: Vec<(&str, &[u8])> = rr.iter().map(|v| ("Record-Route", v.as_bytes())).collect();
    let mut resp = Vec::new();
    build_response(
        &parse(&fwd),
        status,
        "Ringing",
        Some(b"t1"),
        &extra,
        b"",
        &mut resp,
    );
    e.handle(
        at + Duration::from_millis(5),
        &resp,
        udp(ua_addr(5)),
        Transport::Udp,
    );
    asked.expect("the forward gate was asked")
}

#[test]
fn learned_edges_come_from_the_top_record_route_of_answers_and_routes_still_win() {
    let mut c = routed_config();
    c.static_routes.insert(
        0,
        StaticRoute {
            domain: "e2.example.net".into(),
            next_hop: ua_addr(5),
            transport: Transport::Udp,
            stateless: false,
            edge: Some(EdgeId::of("E2")),
        },
    );
    c.branch_events = true;
    c.learn_edges = true;
    let mut e = Endpoint::new(c, Arc::new(MemStore::default()));
    let egress: SocketAddr = "192.0.2.7:5080".parse().expect("addr");
    let beyond = format!("<sip:{egress};lr>");
    let core = "<sip:10.0.0.5:5060;lr>";
    let ours = format!("<sip:{PROXY};lr>");
    let mut call = |n: u32, ruri: &str, status: u16, rr: &[&str]| {
        invite_answered_with_record_route(&mut e, n, ruri, status, rr)
    };
    // The first call to bob: the next hop (nothing learned yet); its 180 names the egress.
    assert_eq!(
        call(1, "sip:bob@far.example.net", 180, &[&beyond, core, &ours]),
        None
    );
    let learned = Some(EdgeId::at(egress));
    assert_eq!(learned.and_then(EdgeId::address), Some(egress), "readable");
    // Every later call to bob counts against it; the case of the host does not matter. So
    // does a call to a callee of bob's domain never called before (the domain's edge).
    assert_eq!(
        call(2, "sip:bob@FAR.example.net", 200, &[&beyond, &ours]),
        learned
    );
    assert_eq!(
        call(3, "sip:carol@far.example.net", 180, &[&beyond]),
        learned
    );
    // Another domain is not bob's, and an answer where this proxy is the top Record-Route
    // (nobody beyond it record-routes), or without one, teaches nothing.
    assert_eq!(call(4, "sip:carol@other.example.net", 180, &[&ours]), None);
    assert_eq!(call(5, "sip:carol@other.example.net", 183, &[]), None);
    assert_eq!(call(6, "sip:carol@other.example.net", 180, &[core]), None);
    let via_core = Some(EdgeId::at("10.0.0.5:5060".parse().expect("addr")));
    assert_eq!(call(7, "sip:carol@other.example.net", 180, &[]), via_core);
    // One of far's callees that leaves elsewhere: learned for dave, and far's new callees
    // follow the latest answer; bob keeps his own.
    assert_eq!(call(8, "sip:dave@far.example.net", 180, &[core]), learned);
    assert_eq!(call(9, "sip:dave@far.example.net", 180, &[core]), via_core);
    assert_eq!(call(10, "sip:erin@far.example.net", 180, &[core]), via_core);
    assert_eq!(
        call(11, "sip:bob@far.example.net", 180, &[&beyond]),
        learned
    );
    // A route naming its edge keeps it whatever the answers say.
    let e2 = Some(EdgeId::of("E2"));
    assert_eq!(call(12, "sip:dave@e2.example.net", 180, &[&beyond]), e2);
    assert_eq!(call(13, "sip:dave@e2.example.net", 180, &[&beyond]), e2);
    // bob, carol, dave and erin at far.example.net, far itself, carol at other, other.
    assert_eq!(e.stats().edges_learned, 7);
    let started: Vec<Option<EdgeId>> = std::iter::from_fn(|| e.poll_event())
        .filter_map(|ev| match ev {
            crate::EndpointEvent::BranchStarted { edge, .. } => Some(edge),
            _ => None,
        })
        .collect();
    assert_eq!(started[1], learned, "the branch carries the learned edge");
}

#[test]
fn nothing_is_learned_when_learning_is_off() {
    let mut c = routed_config();
    c.branch_events = true;
    let mut e = Endpoint::new(c, Arc::new(MemStore::default()));
    let asked: Vec<Option<EdgeId>> = (1..=2u32)
        .map(|n| {
            let rr = ["<sip:192.0.2.7:5080;lr>"];
            invite_answered_with_record_route(&mut e, n, "sip:bob@far.example.net", 180, &rr)
        })
        .collect();
    assert_eq!(asked, [None, None]);
    assert_eq!(e.stats().edges_learned, 0);
}
