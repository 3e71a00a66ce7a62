//! Scripted exchanges between a UAC agent and a UAS agent over a virtual network: every
//! counter, the RFC 3261 timers, the hard stops.

mod common;

use common::*;
use holdline_agent::{Agent, UasConfig};
use holdline_base::{Duration, Instant, Transport};
use holdline_metrics::{Method as M, MsgKey};

#[test]
fn clean_calls_count_every_message() {
    let mut net = pair(
        Transport::Udp,
        100.0,
        50,
        UasConfig {
            trying: true,
            ..UasConfig::default()
        },
    );
    assert!(net.run_to_completion(Duration::from_secs(10)));
    let uac = net.agent(0).recorder();
    let uas = net.agent(1).recorder();
    let c = &uac.c;
    assert_eq!((c.offered, c.attempted, c.blocked), (50, 50, 0));
    assert_eq!((c.r100, c.r180, c.r200), (50, 50, 50));
    assert_eq!((c.r503, c.r_fail_other, c.timeouts), (0, 0, 0));
    assert_eq!((c.calls_ok, c.calls_failed, c.goodput), (50, 0, 50));
    // Without a UAS in the process, the UAC counts a call completed when it sends the ACK.
    assert_eq!(c.completed, 50);
    assert_eq!((c.retrans_invite, c.retrans_bye, c.retrans_200), (0, 0, 0));
    assert_eq!(uas.c.uas_invites, 50);
    assert_eq!(uas.c.completed, 50);
    assert_eq!(uas.c.retrans_200, 0);
    // Per-message tables on both sides.
    assert_eq!(uac.msgs.get(MsgKey::Request(M::Invite)).sent, 50);
    assert_eq!(uac.msgs.get(MsgKey::Request(M::Ack)).sent, 50);
    assert_eq!(uac.msgs.get(MsgKey::Request(M::Bye)).sent, 50);
    assert_eq!(uac.msgs.get(MsgKey::Response(180, M::Invite)).received, 50);
    assert_eq!(uac.msgs.get(MsgKey::Response(200, M::Bye)).received, 50);
    assert_eq!(uas.msgs.get(MsgKey::Request(M::Ack)).received, 50);
    assert_eq!(uas.msgs.get(MsgKey::Response(200, M::Invite)).sent, 50);
    // Latencies: PDD and PSD are two one-way delays (1 ms each) here.
    assert_eq!(uac.lat.pdd.count(), 50);
    assert!((uac.lat.pdd.quantile_ms(0.5) - 2.0).abs() < 0.01);
    assert!((uac.lat.psd.quantile_ms(0.99) - 2.0).abs() < 0.01);
    // Wire counts: 7 messages per call plus the 100.
    assert_eq!(net.sent("INVITE ").len(), 50);
    assert_eq!(net.sent("SIP/2.0 100").len(), 50);
    assert_eq!(net.sent("ACK ").len(), 50);
    assert_eq!(net.sent("BYE ").len(), 50);
    assert_eq!(net.sent("SIP/2.0 200").len(), 100);
    assert_eq!(net.agent(0).active() + net.agent(1).active(), 0);
}

#[test]
fn constant_arrivals_are_evenly_spaced_and_stop_at_the_call_count() {
    let mut net = pair(Transport::Udp, 200.0, 30, UasConfig::default());
    assert!(net.run_to_completion(Duration::from_secs(10)));
    let invites = net.sent("INVITE ");
    assert_eq!(invites.len(), 30);
    for w in invites.windows(2) {
        let gap = w[1].at.saturating_duration_since(w[0].at);
        assert_eq!(gap, Duration::from_millis(5), "constant 200/s spacing");
    }
}

#[test]
fn duration_is_a_hard_stop() {
    let start = Instant::from_secs(1);
    let mut cfg = uac_config(Transport::Udp, 1000.0, 1_000_000);
    if let Some(u) = cfg.uac.as_mut() {
        u.calls = None;
        u.duration = Some(Duration::from_millis(500));
    }
    let uac = Agent::new(cfg, start).unwrap_or_else(|e| panic!("{e}"));
    let uas = Agent::new(uas_config(Transport::Udp, UasConfig::default()), start)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut net = Net::new(Transport::Udp, vec![(addr(UAC), uac), (addr(UAS), uas)]);
    assert!(net.run_to_completion(Duration::from_secs(10)));
    let invites = net.sent("INVITE ");
    // Arrivals at 0, 1, ..., 499 ms: exactly 500, none at or after 500 ms.
    assert_eq!(invites.len(), 500);
    assert!(
        invites
            .iter()
            .all(|p| p.at < start + Duration::from_millis(500))
    );
    assert_eq!(
        net.agent(0).recorder().load_end(),
        Some(start + Duration::from_millis(499))
    );
}

#[test]
fn lost_invites_retransmit_on_timer_a_and_time_out_on_timer_b() {
    let mut net = pair(Transport::Udp, 10.0, 1, UasConfig::default());
    net.filter = Box::new(|p| !p.bytes.starts_with(b"INVITE "));
    assert!(net.run_to_completion(Duration::from_secs(40)));
    let c = &net.agent(0).recorder().c;
    // Timer A: 0.5, 1.5, 3.5, 7.5, 15.5, 31.5 s; Timer B at 32 s.
    assert_eq!(c.retrans_invite, 6);
    assert_eq!((c.timeouts, c.calls_failed, c.r200), (1, 1, 0));
    let invites = net.sent("INVITE ");
    let t0 = invites[0].at;
    let offsets: Vec<u64> = invites
        .iter()
        .map(|p| p.at.saturating_duration_since(t0).as_millis() as u64)
        .collect();
    assert_eq!(offsets, vec![0, 500, 1500, 3500, 7500, 15500, 31500]);
    assert_eq!(
        net.agent(0)
            .recorder()
            .msgs
            .get(MsgKey::Request(M::Invite))
            .timeouts,
        1
    );
}

#[test]
fn over_tcp_invites_are_not_retransmitted() {
    let mut net = pair(Transport::Tcp, 10.0, 1, UasConfig::default());
    net.filter = Box::new(|p| !p.bytes.starts_with(b"INVITE "));
    assert!(net.run_to_completion(Duration::from_secs(40)));
    let c = &net.agent(0).recorder().c;
    assert_eq!((c.retrans_invite, c.timeouts, c.calls_failed), (0, 1, 1));
}

/// SCTP (RFC 4168) is reliable: no Timer A. Its Via says `SCTP`, and the Request-URI and both
/// Contacts carry `;transport=sctp`, so a proxy sends the ACK and the BYE to the UAS over SCTP
/// too.
#[test]
fn over_sctp_messages_say_sctp_and_invites_are_not_retransmitted() {
    let mut net = pair(Transport::Sctp, 10.0, 3, UasConfig::default());
    assert!(net.run_to_completion(Duration::from_secs(10)));
    let invite = String::from_utf8_lossy(&net.sent("INVITE ")[0].bytes).into_owned();
    assert!(
        invite.starts_with("INVITE sip:user0@example.com;transport=sctp SIP/2.0\r\n"),
        "{invite}"
    );
    assert!(
        invite.contains("\r\nVia: SIP/2.0/SCTP 127.0.0.1:5001;"),
        "{invite}"
    );
    assert!(
        invite.contains("\r\nContact: <sip:caller@127.0.0.1:5001;transport=sctp>\r\n"),
        "{invite}"
    );
    let ok = net
        .sent("SIP/2.0 200")
        .into_iter()
        .map(|p| String::from_utf8_lossy(&p.bytes).into_owned())
        .find(|t| t.contains(" INVITE\r\n"))
        .unwrap_or_else(|| panic!("no 200 to INVITE"));
    assert!(ok.contains(";transport=sctp>\r\n"), "{ok}");
    let c = &net.agent(0).recorder().c;
    assert_eq!((c.calls_ok, c.retrans_invite, c.retrans_bye), (3, 0, 0));
}

/// RFC 3261 §13.3.1.4: the UAS retransmits 2xx from T1 doubling to T2 until the ACK, on every
/// transport; here over TCP with every ACK lost, until 64*T1.
#[test]
fn uas_retransmits_200_over_tcp_until_ack_timeout() {
    let mut net = pair(Transport::Tcp, 10.0, 1, UasConfig::default());
    net.filter = Box::new(|p| !p.bytes.starts_with(b"ACK ") && !p.bytes.starts_with(b"BYE "));
    let end = net.now + Duration::from_secs(40);
    net.run_until(end);
    let uas = net.agent(1).recorder();
    let oks: Vec<_> = net
        .sent("SIP/2.0 200")
        .into_iter()
        .filter(|p| p.from == addr(UAS) && String::from_utf8_lossy(&p.bytes).contains("INVITE\r\n"))
        .collect();
    let t0 = oks[0].at;
    let offsets: Vec<u64> = oks
        .iter()
        .map(|p| p.at.saturating_duration_since(t0).as_millis() as u64)
        .collect();
    // 0.5, 1.5, 3.5, 7.5 then every 4 s (T2) until 32 s.
    assert_eq!(
        offsets,
        vec![
            0, 500, 1500, 3500, 7500, 11500, 15500, 19500, 23500, 27500, 31500
        ]
    );
    assert_eq!(uas.c.retrans_200, 10);
    assert_eq!(uas.c.timeouts, 1);
    assert_eq!(uas.c.completed, 0);
    // The UAC ACKed each retransmission (those ACKs were lost too).
    assert_eq!(
        net.agent(0)
            .recorder()
            .msgs
            .get(MsgKey::Request(M::Ack))
            .retransmitted,
        10
    );
}

#[test]
fn late_ack_stops_200_retransmissions() {
    let mut net = pair(Transport::Tcp, 10.0, 1, UasConfig::default());
    let mut cfg = uac_config(Transport::Tcp, 10.0, 1);
    if let Some(u) = cfg.uac.as_mut() {
        u.hold = holdline_agent::Hold::Fixed(Duration::from_secs(2));
    }
    net.agents[0].1 = Agent::new(cfg, net.now).unwrap_or_else(|e| panic!("{e}"));
    // The first ACK is lost: the UAS retransmits the 200 at T1, which the UAC ACKs again.
    let mut first = true;
    net.filter = Box::new(move |p| {
        if p.bytes.starts_with(b"ACK ") && first {
            first = false;
            return false;
        }
        true
    });
    assert!(net.run_to_completion(Duration::from_secs(10)));
    let uas = net.agent(1).recorder();
    assert_eq!(uas.c.retrans_200, 1);
    assert_eq!(uas.c.completed, 1);
    assert_eq!(uas.c.timeouts, 0);
    assert_eq!(net.agent(0).recorder().c.calls_ok, 1);
}

#[test]
fn failures_are_counted_by_code_and_acknowledged() {
    let uas = UasConfig {
        mix: vec![(503, 1.0)],
        ..UasConfig::default()
    };
    let mut net = pair(Transport::Udp, 100.0, 20, uas);
    assert!(net.run_to_completion(Duration::from_secs(10)));
    let c = &net.agent(0).recorder().c;
    assert_eq!(
        (c.r503, c.r200, c.calls_failed, c.calls_ok, c.goodput),
        (20, 0, 20, 0, 0)
    );
    assert_eq!(net.agent(0).recorder().failures.get(&503), Some(&20));
    assert_eq!(net.sent("ACK ").len(), 20);
    let uas = &net.agent(1).recorder().c;
    assert_eq!(
        (uas.uas_rejected, uas.completed, uas.retrans_other),
        (20, 0, 0)
    );
}

#[test]
fn response_mix_follows_weights() {
    let uas = UasConfig {
        mix: vec![(200, 3.0), (486, 1.0)],
        ..UasConfig::default()
    };
    let mut net = pair(Transport::Udp, 1000.0, 4000, uas);
    assert!(net.run_to_completion(Duration::from_secs(20)));
    let c = &net.agent(0).recorder().c;
    assert_eq!(c.r200 + c.r_fail_other, 4000);
    // Binomial(4000, 0.25): sd ≈ 27; allow 5 sd.
    assert!(
        (c.r_fail_other as i64 - 1000).abs() < 140,
        "486s: {}",
        c.r_fail_other
    );
}

#[test]
fn cancel_after_no_answer() {
    let uas = UasConfig {
        answer_delay: Duration::from_secs(5),
        ..UasConfig::default()
    };
    let mut cfg_net = pair(Transport::Udp, 10.0, 3, uas);
    // Rebuild the UAC with a CANCEL time.
    let start = cfg_net.now;
    let mut cfg = uac_config(Transport::Udp, 10.0, 3);
    if let Some(u) = cfg.uac.as_mut() {
        u.cancel_after = Some(Duration::from_secs(1));
    }
    cfg_net.agents[0].1 = Agent::new(cfg, start).unwrap_or_else(|e| panic!("{e}"));
    assert!(cfg_net.run_to_completion(Duration::from_secs(20)));
    let c = &cfg_net.agent(0).recorder().c;
    assert_eq!((c.cancelled, c.calls_failed, c.r200), (3, 3, 0));
    // 487 after CANCEL is the expected outcome, not a failure response.
    assert_eq!(c.r_fail_other, 0);
    assert_eq!(cfg_net.sent("CANCEL ").len(), 3);
    assert_eq!(cfg_net.sent("SIP/2.0 487").len(), 3);
}

#[test]
fn lost_bye_retransmits_on_timer_e() {
    let mut net = pair(Transport::Udp, 10.0, 1, UasConfig::default());
    let mut dropped = 0;
    net.filter = Box::new(move |p| {
        if p.bytes.starts_with(b"BYE ") && dropped < 2 {
            dropped += 1;
            return false;
        }
        true
    });
    assert!(net.run_to_completion(Duration::from_secs(10)));
    let c = &net.agent(0).recorder().c;
    assert_eq!((c.retrans_bye, c.calls_ok), (2, 1));
    let byes = net.sent("BYE ");
    let gap = byes[2].at.saturating_duration_since(byes[1].at);
    assert_eq!(gap, Duration::from_secs(1), "E doubles: 0.5 s then 1 s");
}

#[test]
fn rows_add_up_to_totals() {
    let mut net = pair(Transport::Udp, 100.0, 300, UasConfig::default());
    assert!(net.run_to_completion(Duration::from_secs(20)));
    let rec = net.agent(0).recorder();
    let sum: u64 = rec.rows().iter().map(|r| r.counts.attempted).sum();
    assert_eq!(sum, rec.c.attempted);
    assert!(rec.rows().len() >= 3);
}

/// Timer J over UDP: the UAS's 200 to BYE is lost, the UAC retransmits the BYE after the
/// UAS forgot the call, and the UAS still answers it with 200 (not 481).
#[test]
fn retransmitted_bye_after_the_call_ended_gets_200() {
    let mut net = pair(Transport::Udp, 10.0, 1, UasConfig::default());
    let mut dropped = false;
    net.filter = Box::new(move |p| {
        let bye_ok = p.bytes.starts_with(b"SIP/2.0 200")
            && String::from_utf8_lossy(&p.bytes).contains(" BYE\r\n");
        if bye_ok && !dropped {
            dropped = true;
            return false;
        }
        true
    });
    assert!(net.run_to_completion(Duration::from_secs(10)));
    let uac = &net.agent(0).recorder().c;
    assert_eq!((uac.calls_ok, uac.retrans_bye, uac.calls_failed), (1, 1, 0));
    let uas = &net.agent(1).recorder().c;
    assert_eq!(
        (uas.completed, uas.retrans_other, uas.unexpected),
        (1, 1, 0)
    );
    assert_eq!(net.sent("SIP/2.0 481").len(), 0);
}
