//! Unit tests of RFC 3263 resolution: targets, NAPTR selection, SRV ordering, TTLs, negative
//! caching and failed-target marking, all with injected time and a seeded RNG.

use super::*;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn target(s: &str) -> DnsTarget {
    s.parse().expect("a valid target")
}

fn srv(priority: u16, weight: u16, port: u16, target: &str) -> SrvRecord {
    SrvRecord {
        priority,
        weight,
        port,
        target: target.to_owned(),
    }
}

fn naptr(order: u16, preference: u16, services: &str, replacement: &str) -> NaptrRecord {
    NaptrRecord {
        order,
        preference,
        flags: "s".to_owned(),
        services: services.to_owned(),
        replacement: replacement.to_owned(),
    }
}

fn answer(name: &str, kind: QueryKind, records: DnsRecords, ttl: u64) -> DnsResponse {
    DnsResponse {
        query: DnsQuery {
            name: name.to_owned(),
            kind,
        },
        answer: DnsAnswer::Records {
            records,
            ttl: secs(ttl),
        },
    }
}

fn nothing(name: &str, kind: QueryKind) -> DnsResponse {
    DnsResponse {
        query: DnsQuery {
            name: name.to_owned(),
            kind,
        },
        answer: DnsAnswer::NotFound { ttl: None },
    }
}

fn addr(name: &str, ips: &[&str], ttl: u64) -> DnsResponse {
    let ips = ips
        .iter()
        .map(|i| i.parse().expect("an IP address"))
        .collect();
    answer(name, QueryKind::Addr, DnsRecords::Addr(ips), ttl)
}

fn queries(c: &mut DnsCache) -> Vec<(String, QueryKind)> {
    std::iter::from_fn(|| c.poll_query())
        .map(|q| (q.name, q.kind))
        .collect()
}

fn addrs(r: &Resolution) -> Vec<String> {
    match r {
        Resolution::Ready(p) => p
            .iter()
            .map(|p| format!("{}:{}", p.transport.as_param_str(), p.addr))
            .collect(),
        other => panic!("not ready: {other:?}"),
    }
}

#[test]
fn targets_parse_and_print() {
    let t = target("sip:Proxy.Example.NET.");
    assert_eq!(t.host, "proxy.example.net");
    assert_eq!((t.port, t.transport, t.secure), (None, None, false));
    assert_eq!(t.to_string(), "sip:proxy.example.net");
    let t = target("sip:proxy.example.net:5070;transport=tcp");
    assert_eq!((t.port, t.transport), (Some(5070), Some(Transport::Tcp)));
    assert_eq!(t.to_string(), "sip:proxy.example.net:5070;transport=tcp");
    let t = target("sips:[2001:db8::1]:5061");
    assert_eq!((t.host.as_str(), t.secure), ("2001:db8::1", true));
    assert_eq!(t.to_string(), "sips:[2001:db8::1]:5061");
    for bad in [
        "proxy.example.net",
        "udp:10.0.0.1:5060",
        "sip:",
        "sip:a b",
        "sip:x:0",
        "sip:x:99999",
        "sip:x;lr",
        "sip:x;transport=carrier-pigeon",
        "sips:x;transport=udp",
        "sip:2001:db8::1",
    ] {
        assert!(bad.parse::<DnsTarget>().is_err(), "{bad} accepted");
    }
}

#[test]
fn an_ip_target_needs_no_lookup() {
    let mut c = DnsCache::new(DnsConfig::default());
    let mut rng = Rng::seed_from_u64(1);
    let r = c.resolve(at(0), &target("sip:192.0.2.1"), &mut rng);
    assert_eq!(addrs(&r), ["udp:192.0.2.1:5060"]);
    let r = c.resolve(at(0), &target("sips:192.0.2.1"), &mut rng);
    assert_eq!(addrs(&r), ["tls:192.0.2.1:5061"]);
    assert!(queries(&mut c).is_empty());
}

#[test]
fn naptr_then_srv_then_addresses_in_order_of_priority() {
    let mut c = DnsCache::new(DnsConfig::default());
    let mut rng = Rng::seed_from_u64(1);
    let t = target("sip:example.com");
    assert_eq!(c.resolve(at(0), &t, &mut rng), Resolution::Pending);
    assert_eq!(queries(&mut c), [("example.com".into(), QueryKind::Naptr)]);
    // Asked once however many requests wait.
    assert_eq!(c.resolve(at(1), &t, &mut rng), Resolution::Pending);
    assert!(queries(&mut c).is_empty());
    c.handle_response(
        at(2),
        answer(
            "example.com",
            QueryKind::Naptr,
            DnsRecords::Naptr(vec![
                naptr(20, 10, "SIP+D2U", "_sip._udp.example.com."),
                naptr(10, 10, "SIP+D2T", "_sip._tcp.example.com."),
                // Not supported here: skipped.
                naptr(5, 10, "SIPS+D2T", "_sips._tcp.example.com."),
                naptr(5, 10, "E2U+sip", "ignored.example.com."),
            ]),
            300,
        ),
    );
    assert_eq!(c.resolve(at(3), &t, &mut rng), Resolution::Pending);
    assert_eq!(
        queries(&mut c),
        [
            ("_sip._tcp.example.com".into(), QueryKind::Srv),
            ("_sip._udp.example.com".into(), QueryKind::Srv),
        ]
    );
    c.handle_response(
        at(4),
        answer(
            "_sip._tcp.example.com",
            QueryKind::Srv,
            DnsRecords::Srv(vec![
                srv(20, 0, 5070, "backup.example.com."),
                srv(10, 0, 5060, "primary.example.com."),
            ]),
            300,
        ),
    );
    c.handle_response(at(4), nothing("_sip._udp.example.com", QueryKind::Srv));
    assert_eq!(c.resolve(at(5), &t, &mut rng), Resolution::Pending);
    let mut q = queries(&mut c);
    q.sort();
    assert_eq!(
        q,
        [
            ("backup.example.com".into(), QueryKind::Addr),
            ("primary.example.com".into(), QueryKind::Addr),
        ]
    );
    c.handle_response(at(6), addr("primary.example.com", &["10.0.0.1"], 300));
    assert_eq!(c.resolve(at(6), &t, &mut rng), Resolution::Pending);
    c.handle_response(at(6), addr("backup.example.com", &["10.0.0.2", "::2"], 300));
    let r = c.resolve(at(7), &t, &mut rng);
    assert_eq!(
        addrs(&r),
        ["tcp:10.0.0.1:5060", "tcp:10.0.0.2:5070", "tcp:[::2]:5070"]
    );
    let s = c.stats();
    assert_eq!((s.queries, s.answers, s.not_found), (5, 4, 1));
    // Everything is cached now: no query, a hit.
    let hits = s.cache_hits;
    assert_eq!(addrs(&c.resolve(at(8), &t, &mut rng)).len(), 3);
    assert!(queries(&mut c).is_empty());
    assert_eq!(c.stats().cache_hits, hits + 1);
}

#[test]
fn without_naptr_srv_per_transport_then_the_name_itself() {
    let mut c = DnsCache::new(DnsConfig::default());
    let mut rng = Rng::seed_from_u64(1);
    let t = target("sip:host.example.com");
    assert_eq!(c.resolve(at(0), &t, &mut rng), Resolution::Pending);
    c.handle_response(at(0), nothing("host.example.com", QueryKind::Naptr));
    queries(&mut c);
    assert_eq!(c.resolve(at(0), &t, &mut rng), Resolution::Pending);
    assert_eq!(
        queries(&mut c),
        [
            ("_sip._udp.host.example.com".into(), QueryKind::Srv),
            ("_sip._tcp.host.example.com".into(), QueryKind::Srv),
        ]
    );
    c.handle_response(at(0), nothing("_sip._udp.host.example.com", QueryKind::Srv));
    c.handle_response(
        at(0),
        DnsResponse {
            query: DnsQuery {
                name: "_sip._tcp.host.example.com".into(),
                kind: QueryKind::Srv,
            },
            answer: DnsAnswer::Failed,
        },
    );
    assert_eq!(c.resolve(at(0), &t, &mut rng), Resolution::Pending);
    assert_eq!(
        queries(&mut c),
        [("host.example.com".into(), QueryKind::Addr)]
    );
    c.handle_response(at(0), addr("host.example.com", &["192.0.2.7"], 60));
    assert_eq!(
        addrs(&c.resolve(at(0), &t, &mut rng)),
        ["udp:192.0.2.7:5060"]
    );
    // An explicit port: A/AAAA only; an explicit transport: its SRV name only.
    let mut c = DnsCache::new(DnsConfig::default());
    assert_eq!(
        c.resolve(at(0), &target("sip:h.example.com:5080"), &mut rng),
        Resolution::Pending
    );
    assert_eq!(queries(&mut c), [("h.example.com".into(), QueryKind::Addr)]);
    assert_eq!(
        c.resolve(at(0), &target("sip:h.example.com;transport=tcp"), &mut rng),
        Resolution::Pending
    );
    assert_eq!(
        queries(&mut c),
        [("_sip._tcp.h.example.com".into(), QueryKind::Srv)]
    );
    assert_eq!(
        c.resolve(at(0), &target("sips:h.example.com"), &mut rng),
        Resolution::Pending
    );
    assert_eq!(
        queries(&mut c),
        [("h.example.com".into(), QueryKind::Naptr)]
    );
}

#[test]
fn naptr_selection_follows_order_preference_and_support() {
    let recs = vec![
        naptr(50, 50, "SIP+D2U", "_sip._udp.a."),
        naptr(50, 10, "SIP+D2T", "_sip._tcp.a."),
        naptr(10, 90, "SIPS+D2T", "_sips._tcp.a."),
        naptr(10, 10, "SIP+D2S", "_sip._sctp.a."),
        NaptrRecord {
            flags: "u".into(),
            ..naptr(1, 1, "SIP+D2U", "_other._udp.a.")
        },
    ];
    let all = [
        Transport::Udp,
        Transport::Tcp,
        Transport::Tls,
        Transport::Sctp,
    ];
    let c = naptr_candidates(&recs, &all);
    let got: Vec<_> = c
        .iter()
        .map(|(t, n)| format!("{}={n}", t.as_param_str()))
        .collect();
    assert_eq!(
        got,
        [
            "sctp=_sip._sctp.a",
            "tls=_sips._tcp.a",
            "tcp=_sip._tcp.a",
            "udp=_sip._udp.a"
        ]
    );
    let c = naptr_candidates(&recs, &[Transport::Udp]);
    assert_eq!(c, [(Transport::Udp, "_sip._udp.a".to_owned())]);
    assert!(naptr_candidates(&recs, &[]).is_empty());
}

#[test]
fn srv_order_is_by_priority_then_weighted_random() {
    let recs = vec![
        srv(20, 1, 1, "low"),
        srv(10, 30, 1, "a"),
        srv(10, 10, 1, "b"),
        srv(10, 0, 1, "zero"),
    ];
    let mut rng = Rng::seed_from_u64(7);
    let n = 20_000;
    let mut first = BTreeMap::<&str, u32>::new();
    for _ in 0..n {
        let o = order_srv(&recs, &mut rng);
        assert_eq!(o.len(), 4);
        // Priority 20 always last.
        assert_eq!(o[3].target, "low");
        *first.entry(o[0].target.as_str()).or_default() += 1;
    }
    // Among priority 10 (weights 30, 10, 0; total 40): first with probability ≈ 30/41,
    // 10/41 and 1/41 (a weight-0 record keeps a small chance).
    let share = |t: &str| f64::from(first.get(t).copied().unwrap_or(0)) / f64::from(n);
    assert!((share("a") - 30.0 / 41.0).abs() < 0.02, "a: {}", share("a"));
    assert!((share("b") - 10.0 / 41.0).abs() < 0.02, "b: {}", share("b"));
    assert!(
        (share("zero") - 1.0 / 41.0).abs() < 0.01,
        "zero: {}",
        share("zero")
    );
    // Deterministic for a seed.
    let a: Vec<_> = order_srv(&recs, &mut Rng::seed_from_u64(3))
        .iter()
        .map(|r| r.target.clone())
        .collect();
    let b: Vec<_> = order_srv(&recs, &mut Rng::seed_from_u64(3))
        .iter()
        .map(|r| r.target.clone())
        .collect();
    assert_eq!(a, b);
    // All zero weights: every order possible, none lost.
    let zeros = vec![srv(1, 0, 1, "x"), srv(1, 0, 1, "y")];
    assert_eq!(order_srv(&zeros, &mut rng).len(), 2);
}

/// A cache that resolves `sip:svc.test` through SRV records only (no NAPTR).
fn srv_only(c: &mut DnsCache, now: Instant, recs: Vec<SrvRecord>, ttl: u64) {
    c.handle_response(now, nothing("svc.test", QueryKind::Naptr));
    c.handle_response(
        now,
        answer(
            "_sip._udp.svc.test",
            QueryKind::Srv,
            DnsRecords::Srv(recs),
            ttl,
        ),
    );
    c.handle_response(now, nothing("_sip._tcp.svc.test", QueryKind::Srv));
}

#[test]
fn positive_ttls_are_clamped_and_refreshed_without_waiting() {
    let cfg = DnsConfig {
        min_ttl: secs(5),
        max_ttl: secs(60),
        ..DnsConfig::default()
    };
    let mut c = DnsCache::new(cfg);
    let mut rng = Rng::seed_from_u64(1);
    let t = target("sip:svc.test");
    srv_only(&mut c, at(0), vec![srv(1, 1, 5060, "h1.test")], 3600);
    // TTL 0 is kept min_ttl (5 s).
    c.handle_response(at(0), addr("h1.test", &["10.0.0.1"], 0));
    assert_eq!(addrs(&c.resolve(at(999), &t, &mut rng)).len(), 1);
    assert!(queries(&mut c).is_empty());
    // The negative answers (1 s) expired: used while asked again, in the background.
    assert_eq!(addrs(&c.resolve(at(4_999), &t, &mut rng)).len(), 1);
    assert_eq!(
        queries(&mut c),
        [
            ("svc.test".into(), QueryKind::Naptr),
            ("_sip._tcp.svc.test".into(), QueryKind::Srv),
        ]
    );
    // The address expired at 5 s: the request goes on with it, a refresh is asked.
    assert_eq!(
        addrs(&c.resolve(at(5_000), &t, &mut rng)),
        ["udp:10.0.0.1:5060"]
    );
    assert_eq!(queries(&mut c), [("h1.test".into(), QueryKind::Addr)]);
    c.handle_response(at(5_000), addr("h1.test", &["10.0.0.9"], 3600));
    assert_eq!(
        addrs(&c.resolve(at(5_001), &t, &mut rng)),
        ["udp:10.0.0.9:5060"]
    );
    // The SRV's TTL of an hour is kept at most max_ttl (60 s).
    assert!(queries(&mut c).is_empty());
    assert_eq!(addrs(&c.resolve(at(60_000), &t, &mut rng)).len(), 1);
    let q = queries(&mut c);
    assert!(
        q.contains(&("_sip._udp.svc.test".into(), QueryKind::Srv)),
        "{q:?}"
    );
    // A failed refresh keeps the records; past max_stale nothing old is used.
    c.handle_response(
        at(60_001),
        DnsResponse {
            query: DnsQuery {
                name: "_sip._udp.svc.test".into(),
                kind: QueryKind::Srv,
            },
            answer: DnsAnswer::Failed,
        },
    );
    assert_eq!(addrs(&c.resolve(at(60_002), &t, &mut rng)).len(), 1);
    assert_eq!(c.resolve(at(400_000), &t, &mut rng), Resolution::Pending);
}

#[test]
fn negative_answers_and_failures_are_kept_only_briefly() {
    let cfg = DnsConfig {
        negative_ttl: secs(1),
        ..DnsConfig::default()
    };
    let mut c = DnsCache::new(cfg);
    let mut rng = Rng::seed_from_u64(1);
    let t = target("sip:gone.test:5060");
    assert_eq!(c.resolve(at(0), &t, &mut rng), Resolution::Pending);
    queries(&mut c);
    // NXDOMAIN with the SOA's negative TTL of a day: kept 1 s, no more.
    c.handle_response(
        at(10),
        DnsResponse {
            query: DnsQuery {
                name: "gone.test".into(),
                kind: QueryKind::Addr,
            },
            answer: DnsAnswer::NotFound {
                ttl: Some(secs(86_400)),
            },
        },
    );
    assert_eq!(c.resolve(at(500), &t, &mut rng), Resolution::Failed);
    assert!(queries(&mut c).is_empty(), "the negative answer is used");
    // Once it expired, the next request asks again, and the name that resolves now works.
    assert_eq!(c.resolve(at(1_010), &t, &mut rng), Resolution::Pending);
    assert_eq!(queries(&mut c), [("gone.test".into(), QueryKind::Addr)]);
    c.handle_response(at(1_020), addr("gone.test", &["10.1.1.1"], 60));
    assert_eq!(
        addrs(&c.resolve(at(1_021), &t, &mut rng)),
        ["udp:10.1.1.1:5060"]
    );
    // A shorter negative TTL from the server wins; a failure (timeout) is kept the bound.
    let mut c = DnsCache::new(DnsConfig::default());
    let _ = c.resolve(at(0), &t, &mut rng);
    queries(&mut c);
    c.handle_response(
        at(0),
        DnsResponse {
            query: DnsQuery {
                name: "gone.test".into(),
                kind: QueryKind::Addr,
            },
            answer: DnsAnswer::NotFound {
                ttl: Some(Duration::from_millis(200)),
            },
        },
    );
    assert_eq!(c.resolve(at(199), &t, &mut rng), Resolution::Failed);
    assert_eq!(c.resolve(at(200), &t, &mut rng), Resolution::Pending);
    queries(&mut c);
    c.handle_response(
        at(200),
        DnsResponse {
            query: DnsQuery {
                name: "gone.test".into(),
                kind: QueryKind::Addr,
            },
            answer: DnsAnswer::Failed,
        },
    );
    assert_eq!(c.resolve(at(1_199), &t, &mut rng), Resolution::Failed);
    assert_eq!(c.resolve(at(1_200), &t, &mut rng), Resolution::Pending);
    assert_eq!(c.stats().failures, 1);
}

#[test]
fn a_lost_answer_is_asked_again_after_the_park_timeout() {
    let mut c = DnsCache::new(DnsConfig::default());
    let mut rng = Rng::seed_from_u64(1);
    let t = target("sip:slow.test:5060");
    assert_eq!(c.resolve(at(0), &t, &mut rng), Resolution::Pending);
    assert_eq!(queries(&mut c).len(), 1);
    assert_eq!(c.resolve(at(4_999), &t, &mut rng), Resolution::Pending);
    assert!(queries(&mut c).is_empty());
    assert_eq!(c.resolve(at(5_000), &t, &mut rng), Resolution::Pending);
    assert_eq!(queries(&mut c).len(), 1);
}

#[test]
fn failed_targets_go_last_for_a_while() {
    let cfg = DnsConfig {
        failed_hold: secs(10),
        ..DnsConfig::default()
    };
    let mut c = DnsCache::new(cfg);
    let mut rng = Rng::seed_from_u64(1);
    let t = target("sip:svc.test");
    srv_only(
        &mut c,
        at(0),
        vec![srv(10, 1, 5060, "p.test"), srv(20, 1, 5070, "b.test")],
        300,
    );
    c.handle_response(at(0), addr("p.test", &["10.0.0.1"], 300));
    c.handle_response(at(0), addr("b.test", &["10.0.0.2"], 300));
    let r = c.resolve(at(0), &t, &mut rng);
    assert_eq!(addrs(&r), ["udp:10.0.0.1:5060", "udp:10.0.0.2:5070"]);
    let Resolution::Ready(peers) = r else {
        unreachable!()
    };
    c.mark_failed(at(1_000), &peers[0]);
    assert_eq!(
        addrs(&c.resolve(at(1_000), &t, &mut rng)),
        ["udp:10.0.0.2:5070", "udp:10.0.0.1:5060"]
    );
    assert_eq!(
        addrs(&c.resolve(at(11_000), &t, &mut rng)),
        ["udp:10.0.0.1:5060", "udp:10.0.0.2:5070"]
    );
}

#[test]
fn the_cache_is_bounded() {
    let cfg = DnsConfig {
        max_entries: 4,
        ..DnsConfig::default()
    };
    let mut c = DnsCache::new(cfg);
    for i in 0..10u64 {
        c.handle_response(at(i), addr(&format!("h{i}.test"), &["10.0.0.1"], 100 + i));
    }
    assert_eq!(c.stats().entries, 4);
    // The soonest to expire went: the newest are there.
    let mut rng = Rng::seed_from_u64(1);
    let r = c.resolve(at(20), &target("sip:h9.test:5060"), &mut rng);
    assert_eq!(addrs(&r), ["udp:10.0.0.1:5060"]);
}

#[test]
fn targets_from_uris_keep_port_transport_and_scheme() {
    let t = |s: &str| {
        let uri = holdline_sip::Uri::parse(s.as_bytes()).expect("uri");
        DnsTarget::from_uri(&uri)
    };
    assert_eq!(
        t("sip:bob@Far.Example.TEST:5070;transport=tcp").map(|t| t.to_string()),
        Some("sip:far.example.test:5070;transport=tcp".to_owned())
    );
    assert_eq!(
        t("sips:bob@far.example.test").map(|t| (t.secure, t.port)),
        Some((true, None))
    );
    // IP addresses need no DNS; sips over UDP is no target.
    assert_eq!(t("sip:bob@192.0.2.1"), None);
    assert_eq!(t("sip:bob@[2001:db8::1]"), None);
    assert_eq!(t("sips:bob@far.example.test;transport=udp"), None);
}
