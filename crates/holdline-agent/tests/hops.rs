//! A UAC with several first hops: calls spread over them at random (seed 001's loaders), and
//! client failover (RFC 3263 §4.3) to the next hop when one is silent or answers `503`.

mod common;

use common::*;
use holdline_agent::{Agent, AgentConfig, ConfigError, Hops, UasConfig};
use holdline_base::{Duration, Instant, Transport};
use holdline_metrics::{Method as M, MsgKey};

const UAS2: &str = "127.0.0.1:5003";
/// An address nobody answers at.
const DEAD: &str = "127.0.0.1:5009";

fn uas_at(at: &str, uas: UasConfig, seed: u64) -> Agent {
    let mut c = AgentConfig::new(Transport::Udp, vec![]);
    c.uas_addr = Some(addr(at));
    c.uas = Some(uas);
    c.seed = seed;
    Agent::new(c, Instant::from_secs(1)).unwrap_or_else(|e| panic!("{e}"))
}

/// A UAC offering `calls` at `rate` to `target` with `hops`, and UASes at `uases`.
fn net(target: &str, hops: Hops, rate: f64, calls: u64, uases: Vec<(&str, UasConfig)>) -> Net {
    let mut c = uac_config(Transport::Udp, rate, calls);
    if let Some(u) = c.uac.as_mut() {
        u.target = addr(target);
        u.hops = hops;
    }
    let uac = Agent::new(c, Instant::from_secs(1)).unwrap_or_else(|e| panic!("{e}"));
    let mut agents = vec![(addr(UAC), uac)];
    for (i, (at, cfg)) in uases.into_iter().enumerate() {
        agents.push((addr(at), uas_at(at, cfg, 8 + i as u64)));
    }
    Net::new(Transport::Udp, agents)
}

#[test]
fn spread_calls_share_the_hops_at_random() {
    let hops = Hops {
        alternates: vec![addr(UAS2)],
        spread: true,
        ..Hops::default()
    };
    let uas = UasConfig::default();
    let mut net = net(UAS, hops, 200.0, 400, vec![(UAS, uas.clone()), (UAS2, uas)]);
    assert!(net.run_to_completion(Duration::from_secs(30)));
    let c = &net.agent(0).recorder().c;
    assert_eq!((c.calls_ok, c.calls_failed, c.failovers), (400, 0, 0));
    let (a, b) = (
        net.agent(1).recorder().c.uas_invites,
        net.agent(2).recorder().c.uas_invites,
    );
    assert_eq!(a + b, 400);
    // Binomial(400, 1/2): 6 standard deviations either side of 200.
    assert!((140..=260).contains(&a), "hop shares {a} / {b}");
    // Every request of a call goes to the hop its INVITE went to.
    for i in [1, 2] {
        let r = net.agent(i).recorder();
        assert_eq!(
            r.msgs.get(MsgKey::Request(M::Bye)).received,
            r.c.uas_invites
        );
    }
}

#[test]
fn a_silent_hop_is_failed_over_within_the_call_and_held_down() {
    let hops = Hops {
        alternates: vec![addr(UAS)],
        spread: false,
        failover_after: Some(Duration::from_millis(500)),
        hold_down: Duration::from_secs(60),
    };
    // 100 calls/s for 1 s: the calls placed before the first failover (at 0.5 s) all find
    // the first hop silent; later calls go straight to the second hop.
    let mut net = net(DEAD, hops, 100.0, 100, vec![(UAS, UasConfig::default())]);
    assert!(net.run_to_completion(Duration::from_secs(40)));
    let c = &net.agent(0).recorder().c;
    assert_eq!((c.calls_ok, c.calls_failed, c.timeouts), (100, 0, 0));
    assert!(
        (49..=51).contains(&c.failovers),
        "failovers {}",
        c.failovers
    );
    let to_dead = net.log.iter().filter(|p| p.to == addr(DEAD)).count() as u64;
    // Each failed-over call's INVITE and its retransmissions (Timer A: 0, 0.5 s) went there,
    // nothing else.
    assert!(
        to_dead >= c.failovers && to_dead <= 2 * c.failovers,
        "{to_dead}"
    );
    assert_eq!(net.agent(1).recorder().c.uas_invites, 100);
}

#[test]
fn a_hop_held_down_is_tried_again_after_the_hold_down() {
    let hops = Hops {
        alternates: vec![addr(UAS)],
        spread: false,
        failover_after: Some(Duration::from_millis(200)),
        hold_down: Duration::from_millis(300),
    };
    // 10 calls/s for 3 s: the dead first hop is retried every time its hold-down ends, so
    // failovers keep happening (a permanent blacklist would make just one or two).
    let mut net = net(DEAD, hops, 10.0, 30, vec![(UAS, UasConfig::default())]);
    assert!(net.run_to_completion(Duration::from_secs(40)));
    let c = &net.agent(0).recorder().c;
    assert_eq!((c.calls_ok, c.calls_failed), (30, 0));
    assert!(c.failovers >= 5, "failovers {}", c.failovers);
    assert!(c.failovers < 30, "failovers {}", c.failovers);
}

#[test]
fn a_503_is_acknowledged_and_the_call_fails_over() {
    let hops = Hops {
        alternates: vec![addr(UAS2)],
        spread: false,
        failover_after: Some(Duration::from_secs(2)),
        hold_down: Duration::ZERO,
    };
    let busy = UasConfig {
        mix: vec![(503, 1.0)],
        ..UasConfig::default()
    };
    let mut net = net(
        UAS,
        hops,
        100.0,
        50,
        vec![(UAS, busy), (UAS2, UasConfig::default())],
    );
    assert!(net.run_to_completion(Duration::from_secs(40)));
    let c = &net.agent(0).recorder().c;
    // No hold-down: every call meets the 503 first, then completes on the second hop.
    assert_eq!((c.calls_ok, c.calls_failed), (50, 0));
    assert_eq!((c.r503, c.failovers), (50, 50));
    let busy = net.agent(1).recorder();
    assert_eq!(busy.msgs.get(MsgKey::Request(M::Ack)).received, 50);
    assert_eq!(
        busy.c.retrans_other, 0,
        "the 503s were acknowledged at once"
    );
    assert_eq!(net.agent(2).recorder().c.uas_invites, 50);
}

#[test]
fn when_every_hop_answers_503_the_call_fails_once() {
    let hops = Hops {
        alternates: vec![addr(UAS2)],
        spread: false,
        failover_after: Some(Duration::from_secs(2)),
        hold_down: Duration::ZERO,
    };
    let busy = UasConfig {
        mix: vec![(503, 1.0)],
        ..UasConfig::default()
    };
    let mut net = net(
        UAS,
        hops,
        100.0,
        20,
        vec![(UAS, busy.clone()), (UAS2, busy)],
    );
    assert!(net.run_to_completion(Duration::from_secs(40)));
    let c = &net.agent(0).recorder().c;
    assert_eq!((c.calls_ok, c.calls_failed), (0, 20));
    assert_eq!((c.r503, c.failovers), (40, 20));
}

#[test]
fn late_answers_from_an_abandoned_hop_are_not_the_calls() {
    let hops = Hops {
        alternates: vec![addr(UAS2)],
        spread: false,
        failover_after: Some(Duration::from_millis(200)),
        hold_down: Duration::ZERO,
    };
    // The first hop answers, but only after 1 s and without a 100: the UAC has moved on.
    let slow = UasConfig {
        trying: false,
        ring_delay: Duration::from_secs(1),
        ..UasConfig::default()
    };
    let mut net = net(
        UAS,
        hops,
        50.0,
        20,
        vec![(UAS, slow), (UAS2, UasConfig::default())],
    );
    // The calls hold for 2 s: they are still up when the late answers come.
    if let Some(u) = net.agents[0].1.config().uac.clone() {
        let mut c = net.agents[0].1.config().clone();
        c.uac = Some(holdline_agent::UacConfig {
            hold: holdline_agent::Hold::Fixed(Duration::from_secs(2)),
            ..u
        });
        net.agents[0].1 = Agent::new(c, Instant::from_secs(1)).unwrap_or_else(|e| panic!("{e}"));
    }
    assert!(net.run_to_completion(Duration::from_secs(40)));
    let c = &net.agent(0).recorder().c;
    assert_eq!((c.calls_ok, c.calls_failed, c.failovers), (20, 0, 20));
    // The slow hop's 180 and 200 of each call belong to the abandoned transaction; its
    // 200s are acknowledged so that it stops retransmitting.
    assert_eq!(c.unexpected, 40);
    assert_eq!(c.retrans_other, 0);
    let slow = net.agent(1).recorder();
    assert_eq!(slow.msgs.get(MsgKey::Request(M::Ack)).received, 20);
    assert_eq!(net.agent(2).recorder().c.uas_invites, 20);
}

#[test]
fn hops_over_tcp_need_a_connection_each() {
    let mut c = uac_config(Transport::Tcp, 10.0, 1);
    if let Some(u) = c.uac.as_mut() {
        u.hops.alternates = vec![addr(UAS2)];
    }
    match Agent::new(c.clone(), Instant::from_secs(1)) {
        Err(ConfigError::HopsNeedLegs { hops: 2, legs: 1 }) => {}
        other => panic!("{:?}", other.map(|_| ())),
    }
    c.legs.push(addr("127.0.0.1:5011"));
    assert!(Agent::new(c, Instant::from_secs(1)).is_ok());
}

#[test]
fn a_bye_whose_first_hop_died_fails_over_and_later_byes_avoid_it() {
    let hops = Hops {
        alternates: vec![addr(UAS2)],
        spread: false,
        failover_after: Some(Duration::from_millis(500)),
        hold_down: Duration::from_secs(60),
    };
    // 10 calls at 10/s to the first hop (a UAS), each held 2 s; the first hop dies at 2.5 s
    // (virtual, 1.5 s into the run): every call is set up there, every BYE meets it dead.
    let mut c = uac_config(Transport::Udp, 10.0, 10);
    if let Some(u) = c.uac.as_mut() {
        u.hops = hops;
        u.hold = holdline_agent::Hold::Fixed(Duration::from_secs(2));
    }
    let uac = Agent::new(c, Instant::from_secs(1)).unwrap_or_else(|e| panic!("{e}"));
    let agents = vec![
        (addr(UAC), uac),
        (addr(UAS), uas_at(UAS, UasConfig::default(), 8)),
        (addr(UAS2), uas_at(UAS2, UasConfig::default(), 9)),
    ];
    let mut net = Net::new(Transport::Udp, agents);
    let dies = Instant::from_millis(2_500);
    let dead = addr(UAS);
    net.filter = Box::new(move |p| !(p.at >= dies && (p.to == dead || p.from == dead)));
    assert!(net.run_to_completion(Duration::from_secs(40)));
    let c = &net.agent(0).recorder().c;
    // Every call ended with an answer to its BYE (the second hop, which does not know the
    // dialog, answers it), none waited for Timer F.
    assert_eq!(c.calls_ok + c.calls_failed, 10);
    assert_eq!(c.timeouts, 0);
    assert_eq!(net.agent(1).recorder().c.uas_invites, 10);
    let byes = net.sent("BYE ");
    let to_second: Vec<_> = byes.iter().filter(|p| p.to == addr(UAS2)).collect();
    assert_eq!(
        to_second.len(),
        10,
        "one BYE per call reached the second hop"
    );
    // The first BYE (at 3.0 s) failed over after 0.5 s, as a new transaction; the BYEs
    // after that went to the second hop at once (the first being held down).
    let branch = |p: &&&Packet| {
        String::from_utf8_lossy(&p.bytes)
            .lines()
            .find(|l| l.starts_with("Via:"))
            .unwrap_or("")
            .to_owned()
    };
    let failed_over: Vec<_> = to_second
        .iter()
        .filter(|p| branch(p).contains("-b1;"))
        .collect();
    assert_eq!(c.failovers as usize, failed_over.len());
    assert!(!failed_over.is_empty());
    let first_failover = failed_over.iter().map(|p| p.at).min();
    // Only the BYEs sent to the dead hop before that failover held it down failed over
    // (each 0.5 s after it was sent); the ones after it went to the second hop at once.
    let mut first_sent = std::collections::BTreeMap::new();
    for p in byes.iter().filter(|p| p.to == dead) {
        first_sent.entry(branch(&p)).or_insert(p.at);
    }
    assert!(
        first_sent.values().all(|at| Some(*at) <= first_failover),
        "no new BYE to the dead hop after it was held down: {first_sent:?}"
    );
    let direct = to_second.len() - failed_over.len();
    assert!(direct > 0, "later BYEs went straight to the second hop");
    assert_eq!(
        byes.iter()
            .filter(|p| p.to == dead)
            .map(|p| branch(&p))
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        failed_over.len(),
        "one first BYE to the dead hop per failed-over call (retransmissions aside)"
    );
}
