//! Two endpoints on an in-memory network with a virtual clock: A subscribes to B's load
//! control, B publishes a filter for one number, and callers behind A offer a flash crowd to
//! that number beside ordinary calls.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;

use holdline_base::{Duration, Instant, Peer, Transport};
use holdline_sip::{Limits, Message, Method, build_response};

use crate::Endpoint;
use crate::load_control::{
    Action, FilterRule, Identity, LoadControlConfig, PublishedFilter, SharedFilters,
};
use crate::memstore::MemoryLocationStore;
use crate::proxy::{ListenAddr, ProxyConfig, RelayPolicy, StaticRoute};

const A: SocketAddr = SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1)),
    5060,
);
const B: SocketAddr = SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2)),
    5060,
);
const UAS: SocketAddr = SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 3)),
    5060,
);
const UAC: SocketAddr = SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 9)),
    5060,
);

fn udp(addr: SocketAddr) -> Peer {
    Peer {
        addr,
        transport: Transport::Udp,
        conn: None,
    }
}

fn proxy(me: SocketAddr, next: SocketAddr, seed: u64) -> ProxyConfig {
    ProxyConfig {
        listen: vec![ListenAddr {
            transport: Transport::Udp,
            addr: me,
        }],
        static_routes: vec![StaticRoute {
            domain: "*".into(),
            next_hop: next,
            transport: Transport::Udp,
            stateless: false,
            edge: None,
        }],
        relay: RelayPolicy::Open,
        branch_seed: seed,
        ..ProxyConfig::default()
    }
}

fn hotline_filter(rate: f64) -> PublishedFilter {
    PublishedFilter {
        rule: FilterRule {
            id: "hotline".into(),
            caller: None,
            callee: Some(Identity {
                ones: vec!["sip:hotline@example.com".into()],
                many: Vec::new(),
            }),
            methods: vec!["INVITE".into()],
            valid_from: None,
            valid_until: None,
            action: Action::Rate(rate),
        },
        duration: None,
    }
}

/// A (subscriber) in front of B (notifier, publishing `filters`) in front of a UAS.
struct Net {
    a: Endpoint,
    b: Endpoint,
    now: Instant,
    /// What reached the UAC and the UAS.
    to_uac: Vec<Vec<u8>>,
    to_uas: Vec<Vec<u8>>,
    wire: VecDeque<(SocketAddr, Peer, Vec<u8>)>,
    shared: Arc<SharedFilters>,
}

impl Net {
    fn new(filters: Vec<PublishedFilter>, expires: Duration) -> Self {
        let shared = Arc::new(SharedFilters::new());
        let mut a = proxy(A, B, 1);
        a.load_control = LoadControlConfig {
            subscribe: vec![udp(B)],
            expires,
            shared: shared.clone(),
            ..LoadControlConfig::default()
        };
        let mut b = proxy(B, UAS, 2);
        b.load_control = LoadControlConfig {
            filters,
            publish: true,
            ..LoadControlConfig::default()
        };
        Self {
            a: Endpoint::new(a, Arc::new(MemoryLocationStore::new())),
            b: Endpoint::new(b, Arc::new(MemoryLocationStore::new())),
            now: Instant::ZERO,
            to_uac: Vec::new(),
            to_uas: Vec::new(),
            wire: VecDeque::new(),
            shared,
        }
    }

    fn collect(&mut self) {
        let mut buf = Vec::new();
        for (src, ep) in [(A, &mut self.a), (B, &mut self.b)] {
            while let Some(t) = ep.poll_transmit(self.now, &mut buf) {
                self.wire
                    .push_back((src, t.destination, std::mem::take(&mut buf)));
            }
            while ep.poll_event().is_some() {}
        }
    }

    /// Delivers everything in flight (instantly) until the network is quiet.
    fn settle(&mut self) {
        let mut guard = 0;
        loop {
            self.collect();
            let Some((src, dest, bytes)) = self.wire.pop_front() else {
                return;
            };
            guard += 1;
            assert!(guard < 100_000, "livelock");
            match dest.addr {
                a if a == A => self.a.handle(self.now, &bytes, udp(src), Transport::Udp),
                b if b == B => self.b.handle(self.now, &bytes, udp(src), Transport::Udp),
                u if u == UAS => {
                    // The UAS answers every INVITE 200 at once (no ACK is needed here).
                    if let Ok(m) = Message::parse(&bytes, &Limits::DEFAULT)
                        && m.method() == Some(Method::Invite)
                    {
                        let mut out = Vec::new();
                        build_response(&m, 200, "OK", Some(b"uas"), &[], b"", &mut out);
                        self.wire.push_back((UAS, udp(B), out));
                    }
                    self.to_uas.push(bytes);
                }
                _ => self.to_uac.push(bytes),
            }
        }
    }

    fn advance_to(&mut self, t: Instant) {
        loop {
            let next = [self.a.poll_timeout(), self.b.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(n) if n <= t => {
                    self.now = self.now.max(n);
                    self.a.handle_timeout(self.now);
                    self.b.handle_timeout(self.now);
                    self.settle();
                }
                _ => break,
            }
        }
        self.now = t;
        self.settle();
    }

    fn invite(&mut self, callee: &str, n: u64) {
        let msg = format!(
            "INVITE sip:{callee}@example.com SIP/2.0\r\n\
             Via: SIP/2.0/UDP {UAC};branch=z9hG4bKc{n};rport\r\n\
             Max-Forwards: 70\r\n\
             From: <sip:caller{n}@callers.example>;tag=f{n}\r\n\
             To: <sip:{callee}@example.com>\r\n\
             Call-ID: call-{n}@uac\r\n\
             CSeq: 1 INVITE\r\n\
             Contact: <sip:caller@{UAC}>\r\n\
             Content-Length: 0\r\n\r\n"
        );
        self.a
            .handle(self.now, msg.as_bytes(), udp(UAC), Transport::Udp);
        self.settle();
    }

    /// Final statuses the UAC got, for calls to `callee` (by Call-ID range) — counts of 200
    /// and 503.
    fn finals(&self, calls: std::ops::Range<u64>) -> (usize, usize) {
        let mut ok = std::collections::HashSet::new();
        let mut busy = std::collections::HashSet::new();
        for r in &self.to_uac {
            let Ok(m) = Message::parse(r, &Limits::DEFAULT) else {
                continue;
            };
            let id = String::from_utf8_lossy(m.call_id().unwrap_or_default()).into_owned();
            let n: u64 = id
                .strip_prefix("call-")
                .and_then(|s| s.strip_suffix("@uac"))
                .and_then(|s| s.parse().ok())
                .unwrap_or(u64::MAX);
            if !calls.contains(&n) {
                continue;
            }
            match m.status() {
                Some(200) => {
                    ok.insert(n);
                }
                Some(503) => {
                    busy.insert(n);
                }
                _ => {}
            }
        }
        (ok.len(), busy.len())
    }
}

#[test]
fn a_flash_crowd_to_one_number_is_held_to_the_published_rate_while_other_calls_pass() {
    let mut net = Net::new(vec![hotline_filter(10.0)], Duration::from_secs(4));
    net.advance_to(Instant::from_millis(100));
    assert_eq!(net.a.stats().load_control.subscribes_sent, 1);
    assert_eq!(net.b.stats().load_control.subscriptions, 1);
    assert_eq!(net.a.stats().load_control.notifies_received, 1);
    assert_eq!(net.shared.rules(), 1, "A installed B's filter");
    // 10 s: 100 calls/s to the hotline (Call-IDs 0..), 50 calls/s to 50 other numbers.
    let (mut hot, mut other) = (0u64, 1_000_000u64);
    for ms in 0..10_000u64 {
        net.advance_to(Instant::from_millis(100 + ms));
        if ms % 10 == 0 {
            net.invite("hotline", hot);
            hot += 1;
        }
        if ms % 20 == 5 {
            net.invite(&format!("user{}", other % 50), other);
            other += 1;
        }
    }
    net.advance_to(Instant::from_secs(12));
    let (hot_ok, hot_503) = net.finals(0..hot);
    let (other_ok, other_503) = net.finals(1_000_000..other);
    // 10 calls/s over 10 s, plus the bucket's initial 2.
    assert!((98..=103).contains(&hot_ok), "hotline accepted {hot_ok}");
    assert_eq!(hot_ok + hot_503, 1000);
    assert_eq!((other_ok, other_503), (500, 0));
    assert_eq!(net.a.stats().load_control.rejected, hot_503 as u64);
    assert_eq!(net.a.stats().load_control.accepted, hot_ok as u64);
    // The subscription was refreshed (Expires 4 s: at 80%) and B notified each time.
    let s = net.a.stats().load_control;
    assert!(s.subscribes_sent >= 3, "{s:?}");
    assert_eq!(s.subscribes_failed, 0, "{s:?}");
    assert!(net.b.stats().load_control.notifies_sent >= 3);
    assert_eq!(net.b.stats().load_control.subscriptions, 1);
    assert_eq!(net.shared.rules(), 1);
}

#[test]
fn without_the_subscription_every_call_passes() {
    let mut net = Net::new(vec![hotline_filter(10.0)], Duration::from_secs(600));
    net.a = Endpoint::new(proxy(A, B, 1), Arc::new(MemoryLocationStore::new()));
    for n in 0..200 {
        net.advance_to(Instant::from_millis(10 * n));
        net.invite("hotline", n);
    }
    net.advance_to(Instant::from_secs(5));
    assert_eq!(net.finals(0..200), (200, 0));
}

#[test]
fn a_notifier_that_stops_answering_loses_its_filters_when_the_subscription_runs_out() {
    let mut net = Net::new(vec![hotline_filter(0.0)], Duration::from_secs(10));
    net.advance_to(Instant::from_millis(100));
    assert_eq!(net.shared.rules(), 1);
    // B disappears: nothing reaches it any more.
    net.b = Endpoint::new(proxy(B, UAS, 2), Arc::new(MemoryLocationStore::new()));
    net.advance_to(Instant::from_secs(11));
    assert_eq!(net.shared.rules(), 0, "expired filters are dropped");
    assert!(net.a.stats().load_control.subscribes_failed >= 1);
}

#[test]
fn the_notifier_ends_subscriptions_that_are_not_refreshed() {
    let mut net = Net::new(vec![hotline_filter(1.0)], Duration::from_secs(10));
    net.advance_to(Instant::from_millis(100));
    assert_eq!(net.b.stats().load_control.subscriptions, 1);
    // A goes away; its subscription at B runs out and B sends the last NOTIFY into the void.
    net.a = Endpoint::new(proxy(A, B, 1), Arc::new(MemoryLocationStore::new()));
    net.advance_to(Instant::from_secs(12));
    assert_eq!(net.b.stats().load_control.subscriptions, 0);
}

fn subscribe(event: &str, from: SocketAddr, expires: u32) -> Vec<u8> {
    format!(
        "SUBSCRIBE sip:{B} SIP/2.0\r\n\
         Via: SIP/2.0/UDP {from};branch=z9hG4bKs{n};rport\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:x@{from}>;tag=s1\r\n\
         To: <sip:{B}>\r\n\
         Call-ID: sub-1@x\r\n\
         CSeq: 1 SUBSCRIBE\r\n\
         Contact: <sip:x@{from}>\r\n\
         Event: {event}\r\n\
         Expires: {expires}\r\n\
         Content-Length: 0\r\n\r\n",
        n = event.len()
    )
    .into_bytes()
}

fn answers(ep: &mut Endpoint, now: Instant) -> Vec<(SocketAddr, Vec<u8>)> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(t) = ep.poll_transmit(now, &mut buf) {
        out.push((t.destination.addr, std::mem::take(&mut buf)));
    }
    out
}

fn status(b: &[u8]) -> u16 {
    Message::parse(b, &Limits::DEFAULT)
        .ok()
        .and_then(|m| m.status())
        .unwrap_or(0)
}

#[test]
fn the_notifier_answers_subscribes_as_the_rfc_asks() {
    let mut b = proxy(B, UAS, 2);
    b.relay = RelayPolicy::default(); // loopback only
    b.load_control = LoadControlConfig {
        filters: vec![hotline_filter(5.0)],
        publish: true,
        max_expires: Duration::from_secs(60),
        ..LoadControlConfig::default()
    };
    let mut b = Endpoint::new(b, Arc::new(MemoryLocationStore::new()));
    let now = Instant::ZERO;
    // An untrusted source: 403.
    b.handle(
        now,
        &subscribe("load-control", UAC, 3600),
        udp(UAC),
        Transport::Udp,
    );
    let out = answers(&mut b, now);
    assert_eq!(out.len(), 1);
    assert_eq!(status(&out[0].1), 403);
    // A trusted one: 200 with Expires cut to 60, then a NOTIFY with the document.
    let lo = SocketAddr::from(([127, 0, 0, 1], 5070));
    b.handle(
        now,
        &subscribe("load-control;id=1", lo, 3600),
        udp(lo),
        Transport::Udp,
    );
    let out = answers(&mut b, now);
    assert_eq!(out.len(), 2, "200 and NOTIFY");
    let ok = Message::parse(&out[0].1, &Limits::DEFAULT).expect("200");
    assert_eq!(ok.status(), Some(200));
    assert_eq!(ok.expires().ok().flatten(), Some(60));
    assert!(ok.to().ok().and_then(|t| t.tag()).is_some());
    let notify = Message::parse(&out[1].1, &Limits::DEFAULT).expect("NOTIFY");
    assert_eq!(notify.method(), Some(Method::Notify));
    assert_eq!(out[1].0, lo);
    assert_eq!(
        notify.request_uri_bytes(),
        Some(&format!("sip:x@{lo}").into_bytes()[..])
    );
    assert_eq!(
        notify.first_value(holdline_sip::HeaderName::Event),
        Some(&b"load-control"[..])
    );
    let set = crate::load_control::FilterSet::parse(notify.body()).expect("document");
    assert_eq!(set.rules.len(), 1);
    assert_eq!(set.rules[0].action, Action::Rate(5.0));
    assert!(ok.first_value(holdline_sip::HeaderName::Contact).is_some());
    // Malformed: a bad Expires, no From tag, a refresh of a dialog that does not exist.
    for (from_text, to_text, want) in [
        ("Expires: 3600", "Expires: soon", 400),
        ("tag=s1", "x=1", 400),
        (
            "To: <sip:10.0.0.2:5060>",
            "To: <sip:10.0.0.2:5060>;tag=nope",
            481,
        ),
    ] {
        let m = String::from_utf8(subscribe("load-control", lo, 3600))
            .expect("utf-8")
            .replace(from_text, to_text)
            .replace("z9hG4bKs12", &format!("z9hG4bKbad{want}{}", to_text.len()));
        b.handle(now, m.as_bytes(), udp(lo), Transport::Udp);
        let out = answers(&mut b, now);
        assert_eq!(status(&out[0].1), want, "{to_text}");
    }
    assert_eq!(b.stats().load_control.subscriptions, 1);
    // Another event package is not ours: the request is for this server, 405.
    b.handle(
        now,
        &subscribe("presence", lo, 3600),
        udp(lo),
        Transport::Udp,
    );
    let out = answers(&mut b, now);
    assert_eq!(status(&out[0].1), 405);
}

#[test]
fn a_bad_document_is_refused_and_the_filters_before_it_stay() {
    let mut net = Net::new(vec![hotline_filter(0.0)], Duration::from_secs(600));
    net.advance_to(Instant::from_millis(100));
    assert_eq!(net.shared.rules(), 1);
    // A NOTIFY in A's dialog with a broken body.
    let sub = net.a.lc.client[0].call_id.clone();
    let our_tag = net.a.lc.client[0].our_tag.clone();
    let their_tag = net.a.lc.client[0].their_tag.clone().unwrap_or_default();
    for (ct, body, want) in [
        ("application/load-control+xml", "<ruleset><rule>", 400),
        ("text/plain", "hello", 415),
    ] {
        let msg = format!(
            "NOTIFY sip:holdline@{A} SIP/2.0\r\n\
             Via: SIP/2.0/UDP {B};branch=z9hG4bKn{want};rport\r\n\
             Max-Forwards: 70\r\n\
             From: <sip:{B}>;tag={their_tag}\r\n\
             To: <sip:holdline@{A}>;tag={our_tag}\r\n\
             Call-ID: {sub}\r\n\
             CSeq: 9{want} NOTIFY\r\n\
             Event: load-control\r\n\
             Subscription-State: active;expires=500\r\n\
             Content-Type: {ct}\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        net.a
            .handle(net.now, msg.as_bytes(), udp(B), Transport::Udp);
        let out = answers(&mut net.a, net.now);
        assert_eq!(status(&out[0].1), want);
    }
    assert_eq!(net.shared.rules(), 1);
    assert_eq!(net.a.stats().load_control.documents_refused, 2);
    // A NOTIFY of no subscription of ours: 481.
    let stray = format!(
        "NOTIFY sip:holdline@{A} SIP/2.0\r\n\
         Via: SIP/2.0/UDP {B};branch=z9hG4bKstray;rport\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:{B}>;tag=x\r\n\
         To: <sip:holdline@{A}>;tag=gone\r\n\
         Call-ID: ended@b\r\n\
         CSeq: 1 NOTIFY\r\n\
         Event: load-control\r\n\
         Subscription-State: active\r\n\
         Content-Length: 0\r\n\r\n"
    );
    net.a
        .handle(net.now, stray.as_bytes(), udp(B), Transport::Udp);
    let out = answers(&mut net.a, net.now);
    assert_eq!(status(&out[0].1), 481);
}

#[test]
fn changed_filters_are_notified_to_every_subscriber_at_once() {
    let mut net = Net::new(vec![hotline_filter(10.0)], Duration::from_secs(600));
    net.advance_to(Instant::from_millis(100));
    assert_eq!(net.shared.rules(), 1);
    let sent = net.b.stats().load_control.notifies_sent;
    let mut second = hotline_filter(1.0);
    second.rule.id = "other".into();
    net.b
        .config()
        .load_control
        .updates
        .set(vec![hotline_filter(10.0), second]);
    // No timer of B's is due: the change alone makes it NOTIFY.
    assert_eq!(net.b.poll_timeout(), Some(Instant::ZERO));
    net.advance_to(Instant::from_millis(200));
    assert_eq!(net.b.stats().load_control.notifies_sent, sent + 1);
    assert_eq!(net.shared.rules(), 2);
    // Every filter withdrawn: an empty ruleset, nothing applied.
    net.b.config().load_control.updates.set(Vec::new());
    net.advance_to(Instant::from_millis(300));
    assert_eq!(net.shared.rules(), 0);
    for n in 0..20 {
        net.invite("hotline", n);
    }
    net.advance_to(Instant::from_secs(2));
    assert_eq!(net.finals(0..20), (20, 0));
}

mod arbitrary {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// SUBSCRIBEs and NOTIFYs for `load-control` with arbitrary Expires, Event,
        /// Subscription-State, Content-Type and bodies, to both roles: nothing panics,
        /// everything either endpoint sends parses, and A keeps at most the rules a
        /// document it accepted had.
        #[test]
        fn arbitrary_subscribes_and_notifies_never_break_either_role(
            expires in "[0-9a-z ]{0,6}",
            event in prop_oneof![Just("load-control".to_owned()), "[a-z;=-]{0,16}"],
            state in prop_oneof![
                Just("active;expires=30".to_owned()),
                Just("terminated".to_owned()),
                "[a-z;=0-9]{0,20}",
            ],
            content_type in prop_oneof![Just(crate::load_control::CONTENT_TYPE.to_owned()), "[a-z/+]{0,20}"],
            body in prop_oneof![
                Just(String::new()),
                "[<>/a-z =\"']{0,64}",
                Just("<ruleset><rule id='r'><actions><accept>1</accept></actions></rule></ruleset>".to_owned()),
            ],
            to_tag in prop::bool::ANY,
        ) {
            let mut net = Net::new(vec![hotline_filter(10.0)], Duration::from_secs(600));
            net.advance_to(Instant::from_millis(100));
            let lo = SocketAddr::from(([127, 0, 0, 1], 5070));
            let sub = String::from_utf8(subscribe(&event, lo, 60))
                .expect("utf-8")
                .replace("Expires: 60", &format!("Expires: {expires}"));
            net.b.handle(net.now, sub.as_bytes(), udp(lo), Transport::Udp);
            let c = &net.a.lc.client[0];
            let tag = if to_tag { format!(";tag={}", c.our_tag) } else { String::new() };
            let notify = format!(
                "NOTIFY sip:holdline@{A} SIP/2.0\r\n\
                 Via: SIP/2.0/UDP {B};branch=z9hG4bKarb;rport\r\n\
                 Max-Forwards: 70\r\n\
                 From: <sip:{B}>;tag=x\r\n\
                 To: <sip:holdline@{A}>{tag}\r\n\
                 Call-ID: {}\r\n\
                 CSeq: 77 NOTIFY\r\n\
                 Event: {event}\r\n\
                 Subscription-State: {state}\r\n\
                 Content-Type: {content_type}\r\n\
                 Content-Length: {}\r\n\r\n{body}",
                c.call_id,
                body.len()
            );
            net.a.handle(net.now, notify.as_bytes(), udp(B), Transport::Udp);
            let mut sent = Vec::new();
            for ep in [&mut net.a, &mut net.b] {
                sent.extend(answers(ep, net.now));
            }
            for (_, m) in &sent {
                prop_assert!(Message::parse(m, &Limits::DEFAULT).is_ok());
            }
            prop_assert!(net.shared.rules() <= 1);
            net.advance_to(Instant::from_secs(700));
        }
    }
}
