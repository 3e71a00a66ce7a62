//! The registration role against a scripted registrar: every REGISTER counter, 423 with
//! Min-Expires retried once, 5xx, timeouts with Timer E retransmissions, refreshes.

use std::net::SocketAddr;

use holdline_agent::{Agent, AgentConfig, ArrivalKind, Hops, RegisterConfig, UserPattern};
use holdline_base::{ConnId, Duration, Instant, Peer, Transport};
use holdline_metrics::{Method as M, MsgKey};
use holdline_sip::{HeaderName, Limits, Message};

fn addr(s: &str) -> SocketAddr {
    s.parse()
        .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 9)))
}

fn agent(users: &str, rate: f64, refresh: Option<Duration>, duration: Option<Duration>) -> Agent {
    Agent::new(
        config(users, rate, refresh, duration),
        Instant::from_secs(1),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The agent's configuration: `users` registered at `rate`, no retries.
fn config(
    users: &str,
    rate: f64,
    refresh: Option<Duration>,
    duration: Option<Duration>,
) -> AgentConfig {
    let mut c = AgentConfig::new(Transport::Udp, vec![addr("127.0.0.1:5001")]);
    let users = UserPattern::parse(users).unwrap_or_else(|e| panic!("{e}"));
    c.register = Some(RegisterConfig {
        registrar: addr("127.0.0.1:5060"),
        count: users.len(),
        users,
        rate,
        arrivals: ArrivalKind::Constant,
        expires: 600,
        refresh,
        duration,
        contact: None,
        retry_after_cap: None,
        retry_timeout_base: None,
        hops: Hops::default(),
        deregister_every: None,
    });
    c
}

/// An agent registering one user at 10/s, with `set` applied to its REGISTER settings.
fn solo_agent(set: impl FnOnce(&mut RegisterConfig)) -> Agent {
    let mut c = config("solo@example.com", 10.0, None, None);
    if let Some(r) = c.register.as_mut() {
        set(r);
    }
    Agent::new(c, Instant::from_secs(1)).unwrap_or_else(|e| panic!("{e}"))
}

/// Answers a REGISTER: `status`, with Min-Expires when 423.
fn answer(req: &[u8], status: u16) -> Vec<u8> {
    let msg = Message::parse(req, &Limits::default()).unwrap_or_else(|e| panic!("{e:?}"));
    let mut out = Vec::new();
    let extra: Vec<(&str, &[u8])> = if status == 423 {
        vec![("Min-Expires", b"1800")]
    } else {
        vec![]
    };
    holdline_sip::build_response(&msg, status, "R", Some(b"reg"), &extra, b"", &mut out);
    out
}

fn expires_of(req: &[u8]) -> u32 {
    let msg = Message::parse(req, &Limits::default()).unwrap_or_else(|e| panic!("{e:?}"));
    msg.first_value(HeaderName::Expires)
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn sent(a: &mut Agent) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    a.drain_transmits(|_, b| out.push(b.to_vec()));
    out
}

fn registrar() -> Peer {
    Peer {
        addr: addr("127.0.0.1:5060"),
        transport: Transport::Udp,
        conn: Some(ConnId(0)),
    }
}

#[test]
fn outcomes_are_counted_by_class() {
    // Four users at 1,000/s: answered 200, 423 (then 200 with the Min-Expires), 503, 404.
    let mut a = agent("u{0..3}@example.com", 1000.0, None, None);
    let mut now = Instant::from_secs(1);
    let mut reqs = Vec::new();
    for _ in 0..5 {
        now += Duration::from_millis(1);
        a.handle_timeout(now);
        reqs.extend(sent(&mut a));
    }
    assert_eq!(reqs.len(), 4);
    for (req, status) in reqs.iter().zip([200u16, 423, 503, 404]) {
        a.handle(now, registrar(), &answer(req, status));
    }
    // The 423 was retried at once with the registrar's minimum.
    let retry = sent(&mut a);
    assert_eq!(retry.len(), 1);
    assert_eq!(expires_of(&retry[0]), 1800);
    a.handle(now, registrar(), &answer(&retry[0], 200));
    let r = a.recorder();
    assert_eq!(r.c.reg_sent, 5);
    assert_eq!(
        (r.c.reg_ok, r.c.reg_423, r.c.reg_5xx, r.c.reg_fail_other),
        (2, 1, 1, 1)
    );
    assert_eq!(r.reg_statuses.get(&200), Some(&2));
    assert_eq!(r.lat.register.count(), 5);
    assert_eq!(r.msgs.get(MsgKey::Request(M::Register)).sent, 5);
    assert_eq!(r.msgs.get(MsgKey::Response(423, M::Register)).received, 1);
    assert!(a.is_done());
    // A duplicate final response is unexpected, not counted twice.
    a.handle(now, registrar(), &answer(&reqs[0], 200));
    assert_eq!(a.recorder().c.reg_ok, 2);
    assert_eq!(a.recorder().c.unexpected, 1);
}

#[test]
fn unanswered_register_retransmits_then_times_out() {
    let mut a = agent("solo@example.com", 10.0, None, None);
    let mut now = Instant::from_secs(1);
    let mut times = Vec::new();
    // Poll through 40 s of virtual time in 10 ms steps, answering nothing.
    for _ in 0..4000 {
        now += Duration::from_millis(10);
        a.handle_timeout(now);
        for _ in sent(&mut a) {
            times.push(now);
        }
    }
    let r = a.recorder();
    // Timer E: 0.5, 1, 2, 4, 4, ... s (capped at T2) until Timer F at 32 s.
    let gaps: Vec<u64> = times
        .windows(2)
        .map(|w| w[1].saturating_duration_since(w[0]).as_millis() as u64)
        .collect();
    assert_eq!(&gaps[..4], &[500, 1000, 2000, 4000]);
    assert!(gaps[4..].iter().all(|g| *g == 4000), "{gaps:?}");
    assert_eq!(r.c.reg_sent, 1);
    assert_eq!(r.c.retrans_other, times.len() as u64 - 1);
    assert_eq!(r.c.timeouts, 1);
    assert_eq!(r.msgs.get(MsgKey::Request(M::Register)).timeouts, 1);
    assert!(a.is_done());
}

#[test]
fn refreshes_until_the_duration_ends() {
    let mut a = agent(
        "solo@example.com",
        10.0,
        Some(Duration::from_secs(2)),
        Some(Duration::from_secs(7)),
    );
    let mut now = Instant::from_secs(1);
    let mut count = 0;
    let mut load_done_at = None;
    for _ in 0..1000 {
        now += Duration::from_millis(10);
        a.handle_timeout(now);
        for req in sent(&mut a) {
            count += 1;
            a.handle(now, registrar(), &answer(&req, 200));
        }
        if a.load_done(now) {
            load_done_at.get_or_insert(now);
        }
    }
    // The one user arrived at once, but the load goes on while it refreshes: the driver's
    // drain starts at the end of the duration, not after the last arrival.
    assert!(a.arrivals_done());
    assert_eq!(load_done_at, Some(Instant::from_secs(8)));
    // At 0.01 s, then 2 s after each success while that stays before 7 s: 2.01, 4.01, 6.01
    // (8.01 would not).
    assert_eq!(count, 4);
    assert_eq!(a.recorder().c.reg_ok, 4);
    assert!(a.is_done());
}

/// Answers a REGISTER with 503 and a Retry-After.
fn busy(req: &[u8], retry_after: &str) -> Vec<u8> {
    let msg = Message::parse(req, &Limits::default()).unwrap_or_else(|e| panic!("{e:?}"));
    let mut out = Vec::new();
    let extra: Vec<(&str, &[u8])> = vec![("Retry-After", retry_after.as_bytes())];
    holdline_sip::build_response(&msg, 503, "Busy", Some(b"reg"), &extra, b"", &mut out);
    out
}

/// With Retry-After honoured, a 503 sends the REGISTER again exactly that long later (cut to
/// the cap), the user counts as registered from its first attempt, and the run is not done
/// while a retry is pending; without it, the 503 ends the user.
#[test]
fn a_503_with_retry_after_is_retried_then_and_registration_time_counts_from_the_first_try() {
    let mut a = agent("solo@example.com", 10.0, None, None);
    let mut now = Instant::from_secs(1);
    let mut first = Vec::new();
    while first.is_empty() {
        now += Duration::from_millis(1);
        a.handle_timeout(now);
        first = sent(&mut a);
    }
    // The default agent ignores Retry-After: one 503 ends it.
    a.handle(now, registrar(), &busy(&first[0], "7"));
    assert!(a.is_done());
    assert_eq!(a.recorder().c.reg_retry_after, 0);

    let t0 = Instant::from_secs(1);
    let mut a = solo_agent(|r| r.retry_after_cap = Some(Duration::from_secs(30)));
    let mut now = t0;
    let mut reqs = Vec::new();
    while reqs.is_empty() {
        now += Duration::from_millis(1);
        a.handle_timeout(now);
        reqs = sent(&mut a);
    }
    let started = now;
    // 7 s, then a Retry-After of an hour cut to the 30 s cap, then 200.
    let mut resent_at = Vec::new();
    for retry_after in ["7", "3600;duration=10 (busy)"] {
        a.handle(now, registrar(), &busy(&reqs[0], retry_after));
        assert!(!a.is_done(), "a retry is pending");
        reqs.clear();
        while reqs.is_empty() {
            now += Duration::from_millis(100);
            a.handle_timeout(now);
            reqs = sent(&mut a);
            assert!(now < started + Duration::from_secs(60), "no retry");
        }
        resent_at.push(now);
    }
    assert_eq!(
        resent_at[0].saturating_duration_since(started),
        Duration::from_secs(7)
    );
    assert_eq!(
        resent_at[1].saturating_duration_since(resent_at[0]),
        Duration::from_secs(30)
    );
    now += Duration::from_millis(5);
    a.handle(now, registrar(), &answer(&reqs[0], 200));
    assert!(a.is_done());
    let r = a.recorder();
    assert_eq!(
        (r.c.reg_sent, r.c.reg_5xx, r.c.reg_ok, r.c.reg_retry_after),
        (3, 2, 1, 2)
    );
    assert_eq!(r.lat.registered.count(), 1);
    let registered_ms = r.lat.registered.summary().max_ms;
    assert!(
        (36_900.0..37_300.0).contains(&registered_ms),
        "registered after {registered_ms} ms"
    );
}

/// A REGISTER that gets no answer at all is sent again after RFC 5626's backoff: Timer F
/// (64·T1) ends the transaction, then the new one leaves after `base · U(0.5, 1)`, and after a
/// second timeout after `2·base · U(0.5, 1)`; the user counts as registered from its first
/// attempt. Without the backoff, the timeout ends the user.
#[test]
fn a_register_that_timed_out_is_sent_again_after_the_rfc_5626_backoff() {
    let mut a = solo_agent(|r| r.retry_timeout_base = Some(Duration::from_secs(30)));
    let mut now = Instant::from_secs(1);
    let started = loop {
        now += Duration::from_millis(1);
        a.handle_timeout(now);
        if !sent(&mut a).is_empty() {
            break now;
        }
    };
    // Nothing ever answers: retransmissions (Timer E), then Timer F at 32 s, then a new
    // REGISTER (a new CSeq) after the backoff. Find when each new transaction leaves.
    let mut firsts = vec![started];
    let mut last_cseq = 1;
    let mut reqs = Vec::new();
    while firsts.len() < 3 {
        now += Duration::from_millis(100);
        assert!(
            now < started + Duration::from_secs(300),
            "no retry after a timeout"
        );
        a.handle_timeout(now);
        for r in sent(&mut a) {
            let msg = Message::parse(&r, &Limits::default()).unwrap_or_else(|e| panic!("{e:?}"));
            let cseq = msg.cseq().map_or(0, |c| c.seq);
            if cseq != last_cseq {
                last_cseq = cseq;
                firsts.push(now);
            }
            reqs.push(r);
        }
    }
    let gap = |i: usize| {
        firsts[i]
            .saturating_duration_since(firsts[i - 1])
            .as_secs_f64()
    };
    // 32 s of Timer F, then 15-30 s; 32 s, then 30-60 s.
    assert!(
        (47.0..=62.2).contains(&gap(1)),
        "first retry {} s later",
        gap(1)
    );
    assert!(
        (62.0..=92.2).contains(&gap(2)),
        "second retry {} s later",
        gap(2)
    );
    assert!(!a.is_done(), "a REGISTER is in progress");
    let last = reqs.last().cloned().unwrap_or_default();
    now += Duration::from_millis(5);
    a.handle(now, registrar(), &answer(&last, 200));
    assert!(a.is_done());
    let r = a.recorder();
    assert_eq!((r.c.reg_ok, r.c.reg_retry_timeout, r.c.timeouts), (1, 2, 2));
    let registered_s = r.lat.registered.summary().max_ms / 1000.0;
    assert!(
        (gap(1) + gap(2) - 0.5..gap(1) + gap(2) + 0.5).contains(&registered_s),
        "registered after {registered_s} s"
    );

    // The default: a timeout ends the user's attempt.
    let mut a = agent("solo@example.com", 10.0, None, None);
    let mut now = Instant::from_secs(1);
    while !a.is_done() {
        now += Duration::from_millis(100);
        assert!(now < Instant::from_secs(60), "the timeout ends the run");
        a.handle_timeout(now);
        let _ = sent(&mut a);
    }
    assert_eq!(a.recorder().c.reg_retry_timeout, 0);
}

/// With as many legs as users, each user is a phone on its own leg: its REGISTERs leave over
/// that leg (connection or source port), with the leg's address in Via, Call-ID and Contact.
#[test]
fn each_user_registers_over_its_own_leg_with_its_address_as_contact() {
    let legs = [
        addr("127.0.0.2:40001"),
        addr("127.0.0.3:40002"),
        addr("127.0.0.2:40003"),
    ];
    let mut c = config("p{0..5}@example.com", 1000.0, None, None);
    c.transport = Transport::Tcp;
    c.legs = legs.to_vec();
    let mut a = Agent::new(c, Instant::from_secs(1)).unwrap_or_else(|e| panic!("{e}"));
    let mut now = Instant::from_secs(1);
    let mut out: Vec<(Peer, Vec<u8>)> = Vec::new();
    for _ in 0..10 {
        now += Duration::from_millis(1);
        a.handle_timeout(now);
        a.drain_transmits(|p, b| out.push((*p, b.to_vec())));
    }
    assert_eq!(out.len(), 6);
    for (peer, req) in &out {
        let msg = Message::parse(req, &Limits::default()).unwrap_or_else(|e| panic!("{e:?}"));
        let to = String::from_utf8_lossy(msg.first_value(HeaderName::To).unwrap_or_default())
            .into_owned();
        let user: usize = to
            .trim_start_matches("<sip:p")
            .split('@')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("user in {to}"));
        let leg = user % legs.len();
        assert_eq!(peer.conn, Some(ConnId(leg as u64)), "{to}");
        let contact =
            String::from_utf8_lossy(msg.first_value(HeaderName::Contact).unwrap_or_default())
                .into_owned();
        assert_eq!(
            contact,
            format!("<sip:p{user}@{};transport=tcp>", legs[leg]),
            "{to}"
        );
        let via = String::from_utf8_lossy(msg.first_value(HeaderName::Via).unwrap_or_default())
            .into_owned();
        assert!(
            via.starts_with(&format!("SIP/2.0/TCP {}", legs[leg])),
            "{via}"
        );
    }
}

/// Every request sent, with the registrar it went to.
fn sent_to(a: &mut Agent) -> Vec<(SocketAddr, Vec<u8>)> {
    let mut out = Vec::new();
    a.drain_transmits(|p, b| out.push((p.addr, b.to_vec())));
    out
}

fn cseq_of(req: &[u8]) -> u32 {
    let msg = Message::parse(req, &Limits::default()).unwrap_or_else(|e| panic!("{e:?}"));
    msg.cseq().map_or(0, |c| c.seq)
}

const BACKUP: &str = "127.0.0.1:5062";

#[test]
fn a_silent_registrar_is_failed_over_and_the_user_stays_on_the_next() {
    // Two users at 10/s, refreshing every 5 s for 20 s; the first registrar never answers.
    let mut c = config(
        "u{0..1}@example.com",
        10.0,
        Some(Duration::from_secs(5)),
        Some(Duration::from_secs(20)),
    );
    if let Some(r) = c.register.as_mut() {
        r.hops = Hops {
            alternates: vec![addr(BACKUP)],
            spread: false,
            failover_after: Some(Duration::from_millis(500)),
            hold_down: Duration::from_secs(60),
        };
    }
    let mut a = Agent::new(c, Instant::from_secs(1)).unwrap_or_else(|e| panic!("{e}"));
    let mut now = Instant::from_secs(1);
    let mut log: Vec<(Instant, SocketAddr, u32)> = Vec::new();
    for _ in 0..2500 {
        now += Duration::from_millis(10);
        a.handle_timeout(now);
        for (to, req) in sent_to(&mut a) {
            log.push((now, to, cseq_of(&req)));
            if to == addr(BACKUP) {
                a.handle(now, registrar(), &answer(&req, 200));
            }
        }
    }
    let primary: Vec<_> = log
        .iter()
        .filter(|l| l.1 == addr("127.0.0.1:5060"))
        .collect();
    let backup: Vec<_> = log.iter().filter(|l| l.1 == addr(BACKUP)).collect();
    // User 0 (at 0.01 s) found the first registrar silent: its Timer E retransmission at
    // 0.51 s races the failover; the second user (0.11 s) went there too, before the first
    // failover held it down. Nothing else ever went to it.
    assert!(
        primary.iter().all(|l| l.0 <= Instant::from_millis(1_700)),
        "{primary:?}"
    );
    // Each user failed over with a new CSeq (a new transaction) 0.5 s after its first
    // REGISTER, then refreshed at the backup every 5 s until 20 s: 1 + 3 REGISTERs each.
    assert_eq!(backup.len(), 8, "{backup:?}");
    assert!(backup.iter().all(|l| l.2 >= 2));
    let r = a.recorder();
    assert_eq!(r.c.failovers, 2);
    assert_eq!(r.c.reg_ok, 8);
    assert_eq!(r.c.timeouts, 0);
    assert_eq!(a.acked_registrations().len(), 2);
    assert!(a.is_done());
}

#[test]
fn a_503_fails_over_at_once_and_a_new_user_avoids_the_held_down_registrar() {
    let mut c = config("u{0..1}@example.com", 10.0, None, None);
    if let Some(r) = c.register.as_mut() {
        r.hops = Hops {
            alternates: vec![addr(BACKUP)],
            spread: false,
            failover_after: Some(Duration::from_secs(2)),
            hold_down: Duration::from_secs(60),
        };
    }
    let mut a = Agent::new(c, Instant::from_secs(1)).unwrap_or_else(|e| panic!("{e}"));
    let mut now = Instant::from_secs(1);
    let mut log = Vec::new();
    for _ in 0..300 {
        now += Duration::from_millis(10);
        a.handle_timeout(now);
        for (to, req) in sent_to(&mut a) {
            log.push(to);
            let status = if to == addr(BACKUP) { 200 } else { 503 };
            a.handle(now, registrar(), &answer(&req, status));
        }
    }
    // User 0: 503 from the first, then 200 from the backup; user 1 (0.1 s later) starts at
    // the backup, the first being held down.
    assert_eq!(
        log,
        vec![addr("127.0.0.1:5060"), addr(BACKUP), addr(BACKUP)]
    );
    let r = a.recorder();
    assert_eq!((r.c.failovers, r.c.reg_ok, r.c.reg_5xx), (1, 2, 1));
    assert!(a.is_done());
}

#[test]
fn several_registrars_need_udp() {
    let mut c = config("u{0..1}@example.com", 10.0, None, None);
    c.transport = Transport::Tcp;
    if let Some(r) = c.register.as_mut() {
        r.hops.alternates = vec![addr(BACKUP)];
    }
    assert!(Agent::new(c, Instant::from_secs(1)).is_err());
}

#[test]
fn every_kth_user_de_registers_instead_of_its_first_refresh_and_stops() {
    // Users 0..4, every second one (0 and 2) leaves: Expires 0 at its first refresh.
    let mut c = config(
        "u{0..3}@example.com",
        100.0,
        Some(Duration::from_secs(2)),
        Some(Duration::from_secs(9)),
    );
    if let Some(r) = c.register.as_mut() {
        r.deregister_every = Some(2);
    }
    let mut a = Agent::new(c, Instant::from_secs(1)).unwrap_or_else(|e| panic!("{e}"));
    let mut now = Instant::from_secs(1);
    let mut per_user: std::collections::BTreeMap<String, Vec<u32>> = Default::default();
    for _ in 0..1200 {
        now += Duration::from_millis(10);
        a.handle_timeout(now);
        for req in sent(&mut a) {
            let msg = Message::parse(&req, &Limits::default()).unwrap_or_else(|e| panic!("{e:?}"));
            let to = String::from_utf8_lossy(msg.first_value(HeaderName::To).unwrap_or_default())
                .into_owned();
            per_user.entry(to).or_default().push(expires_of(&req));
            a.handle(now, registrar(), &answer(&req, 200));
        }
    }
    let expires: Vec<Vec<u32>> = per_user.into_values().collect();
    // u0 and u2: registered, then removed, then nothing; u1 and u3 refresh until the end.
    assert_eq!(expires[0], [600, 0]);
    assert_eq!(expires[2], [600, 0]);
    assert_eq!(expires[1], [600, 600, 600, 600, 600]);
    assert_eq!(expires[3], expires[1]);
    assert!(a.is_done());
}
