//! Two `SctpUdp` endpoints joined by holdline-netmodel links under a virtual clock: the
//! handshake, SIP messages both ways, recovery from loss and reordering, unordered delivery
//! past a gap (no head-of-line blocking) against ordered delivery (blocking), many streams,
//! and the bound on what waits for a peer that never answers.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use holdline_base::{Duration as LinkDuration, Instant as LinkInstant, Rng};
use holdline_netmodel::{Fate, Link, LinkConfig, Loss};
use holdline_sctp::{Received, SctpConfig, SctpUdp, SendError};

/// A datagram on the wire: (arrival ns, sequence, towards B?, payload).
type InFlight = Reverse<(u64, u64, bool, Vec<u8>)>;

/// Decides whether an A→B datagram is dropped (after the link's own fate).
type DropFilter = Box<dyn FnMut(&[u8]) -> bool>;

struct Pair {
    a: SctpUdp,
    b: SctpUdp,
    addr_a: SocketAddr,
    addr_b: SocketAddr,
    ab: Link,
    ba: Link,
    wire: BinaryHeap<InFlight>,
    seq: u64,
    base: Instant,
    now: u64,
    /// Drops an A→B datagram when it returns true (after the link's own fate).
    drop_ab: DropFilter,
    /// Drops a B→A datagram when it returns true.
    drop_ba: DropFilter,
    got_a: Vec<(u64, Received)>,
    got_b: Vec<(u64, Received)>,
    /// A→B datagrams put on the wire.
    sent_ab: u64,
    /// Every A→B datagram A produced, when asked for (`Some`).
    kept_ab: Option<Vec<Vec<u8>>>,
}

impl Pair {
    fn new(cfg_a: SctpConfig, cfg_b: SctpConfig, link: LinkConfig, seed: u64) -> Self {
        Self {
            a: SctpUdp::new(cfg_a),
            b: SctpUdp::new(cfg_b),
            addr_a: "192.0.2.1:9899".parse().expect("addr"),
            addr_b: "192.0.2.2:9899".parse().expect("addr"),
            ab: Link::new(link, Rng::seed_from_u64(seed)).expect("link"),
            ba: Link::new(link, Rng::seed_from_u64(seed + 1)).expect("link"),
            wire: BinaryHeap::new(),
            seq: 0,
            base: Instant::now(),
            now: 0,
            drop_ab: Box::new(|_| false),
            drop_ba: Box::new(|_| false),
            got_a: Vec::new(),
            got_b: Vec::new(),
            sent_ab: 0,
            kept_ab: None,
        }
    }

    fn t(&self) -> Instant {
        self.base + Duration::from_nanos(self.now)
    }

    /// Moves what both endpoints want to send onto the links, and what they received into
    /// the logs.
    fn pump(&mut self) {
        let now = LinkInstant::from_nanos(self.now);
        while let Some((to, p)) = self.a.poll_transmit() {
            assert_eq!(to, self.addr_b);
            if let Some(k) = self.kept_ab.as_mut() {
                k.push(p.to_vec());
            }
            if let Fate::Deliver(at) = self.ab.send(now, p.len())
                && !(self.drop_ab)(&p)
            {
                self.sent_ab += 1;
                self.seq += 1;
                self.wire
                    .push(Reverse((at.as_nanos(), self.seq, true, p.to_vec())));
            }
        }
        while let Some((to, p)) = self.b.poll_transmit() {
            assert_eq!(to, self.addr_a);
            if let Fate::Deliver(at) = self.ba.send(now, p.len())
                && !(self.drop_ba)(&p)
            {
                self.seq += 1;
                self.wire
                    .push(Reverse((at.as_nanos(), self.seq, false, p.to_vec())));
            }
        }
        while let Some(r) = self.a.poll_received() {
            self.got_a.push((self.now, r));
        }
        while let Some(r) = self.b.poll_received() {
            self.got_b.push((self.now, r));
        }
    }

    /// Runs events until virtual time `until_ms`.
    fn run_until(&mut self, until_ms: u64) {
        let end = until_ms * 1_000_000;
        loop {
            self.pump();
            let base = self.base;
            let ns = |i: Instant| i.saturating_duration_since(base).as_nanos() as u64;
            let next = [
                self.wire.peek().map(|Reverse((at, ..))| *at),
                self.a.poll_timeout().map(ns),
                self.b.poll_timeout().map(ns),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(next) = next.filter(|&n| n <= end) else {
                self.now = end;
                return;
            };
            self.now = self.now.max(next);
            let t = self.t();
            while self
                .wire
                .peek()
                .is_some_and(|Reverse((at, ..))| *at <= self.now)
            {
                let Some(Reverse((_, _, to_b, p))) = self.wire.pop() else {
                    break;
                };
                if to_b {
                    self.b.handle_datagram(t, self.addr_a, &p);
                } else {
                    self.a.handle_datagram(t, self.addr_b, &p);
                }
            }
            self.a.handle_timeout(t);
            self.b.handle_timeout(t);
        }
    }

    fn send_a(&mut self, key: u64, msg: &[u8]) -> Result<(), SendError> {
        let (t, to) = (self.t(), self.addr_b);
        self.a.send(t, to, key, msg)
    }
}

fn cfg(unordered: bool) -> SctpConfig {
    SctpConfig {
        unordered,
        ..SctpConfig::default()
    }
}

fn link(delay_ms: u64) -> LinkConfig {
    LinkConfig {
        delay: LinkDuration::from_millis(delay_ms),
        overhead_bytes: 0,
        ..LinkConfig::default()
    }
}

/// A SIP-like message numbered `n`.
fn message(n: u64) -> Vec<u8> {
    format!(
        "INVITE sip:bob@example.com SIP/2.0\r\nCall-ID: call-{n:06}\r\nContent-Length: 0\r\n\r\n"
    )
    .into_bytes()
}

fn number(r: &Received) -> u64 {
    let s = std::str::from_utf8(&r.data).expect("utf-8");
    let i = s.find("call-").expect("call id") + 5;
    s[i..i + 6].parse().expect("number")
}

#[test]
fn handshake_then_messages_both_ways_on_one_association() {
    let mut p = Pair::new(cfg(false), cfg(false), link(10), 1);
    for n in 0..50 {
        p.send_a(n, &message(n)).expect("send");
    }
    p.run_until(1_000);
    assert!(p.a.is_connected(p.addr_b));
    assert_eq!(p.got_b.len(), 50, "messages A→B");
    // INIT, INIT-ACK, COOKIE-ECHO, COOKIE-ACK: the first message cannot arrive before
    // 1.5 round trips (30 ms) plus the link's 10 ms.
    assert!(p.got_b[0].0 >= 30_000_000, "first at {} ns", p.got_b[0].0);
    // B answers on the association A started: no second one.
    for r in p.got_b.clone() {
        let t = p.t();
        p.b.send(t, p.addr_a, number(&r.1), &r.1.data)
            .expect("answer");
    }
    p.run_until(2_000);
    assert_eq!(
        p.got_a.len(),
        50,
        "messages B→A; A {:?} B {:?}",
        p.a.stats(),
        p.b.stats()
    );
    assert_eq!(p.a.stats().established, 1);
    assert_eq!(p.b.stats().established, 1);
    assert_eq!(p.b.stats().open, 1);
    let mut seen: Vec<u64> = p.got_a.iter().map(|(_, r)| number(r)).collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..50).collect::<Vec<_>>());
}

#[test]
fn every_message_arrives_once_across_loss_and_reordering() {
    let mut l = link(20);
    l.loss = Loss::Random(0.05);
    l.jitter = LinkDuration::from_millis(10);
    l.keep_order = false;
    let mut p = Pair::new(cfg(false), cfg(false), l, 7);
    for n in 0..2_000 {
        p.send_a(n, &message(n)).expect("send");
        p.run_until(n / 2);
    }
    p.run_until(60_000);
    let mut seen: Vec<u64> = p.got_b.iter().map(|(_, r)| number(r)).collect();
    assert_eq!(seen.len(), 2_000, "every message once");
    // Ordered delivery: within a stream, messages arrive in the order sent.
    for stream in 0..16u16 {
        let on: Vec<u64> = p
            .got_b
            .iter()
            .filter(|(_, r)| r.stream == stream)
            .map(|(_, r)| number(r))
            .collect();
        assert!(
            on.windows(2).all(|w| w[0] < w[1]),
            "stream {stream} out of order"
        );
    }
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), 2_000);
    assert!(p.ab.stats().lost > 0, "the link lost nothing");
}

/// Drops the first A→B datagram carrying message 0; then sends 1..=9 on the same stream.
/// Returns when each message arrived at B (ns) and the RTO floor.
fn gap(unordered: bool) -> (Vec<(u64, u64)>, u64) {
    gap_with(cfg(unordered), cfg(unordered))
}

/// [`gap`] with A's and B's configurations given.
fn gap_with(a: SctpConfig, b: SctpConfig) -> (Vec<(u64, u64)>, u64) {
    let mut p = Pair::new(a, b, link(20), 3);
    // Set up the association first, with a message on another stream.
    p.send_a(1, &message(100)).expect("send");
    p.run_until(500);
    assert!(p.a.is_connected(p.addr_b));
    let mut dropped = false;
    p.drop_ab = Box::new(move |d: &[u8]| {
        if !dropped && d.windows(11).any(|w| w == b"call-000000") {
            dropped = true;
            return true;
        }
        false
    });
    // Messages 0..=9 on stream 0, 5 ms apart: 0 is lost, 1..=9 arrive.
    for n in 0..10 {
        p.send_a(0, &message(n)).expect("send");
        p.run_until(500 + 5 * (n + 1));
    }
    p.run_until(10_000);
    let times: Vec<(u64, u64)> = p
        .got_b
        .iter()
        .filter(|(_, r)| number(r) < 10)
        .map(|(t, r)| (number(r), *t))
        .collect();
    (times, p.a.config().rto_min_ms * 1_000_000)
}

#[test]
fn unordered_delivery_does_not_wait_for_a_lost_message() {
    let (times, rto) = gap(true);
    assert_eq!(times.len(), 10, "{times:?}");
    let lost_at = times
        .iter()
        .find(|(n, _)| *n == 0)
        .expect("0 retransmitted")
        .1;
    // Message 0 comes after a retransmission (fast retransmit on the SACKs of 1..=9, or
    // the RTO); 1..=9 each one link delay after being sent, not waiting for it.
    assert!(
        lost_at >= 505_000_000 + 40_000_000,
        "message 0 at {lost_at}: not lost?"
    );
    let _ = rto;
    let first_after = times.iter().filter(|(n, _)| *n > 0).map(|(_, t)| *t).min();
    assert!(
        first_after.is_some_and(|t| t < lost_at),
        "nothing overtook message 0 (at {lost_at}): {times:?}"
    );
    for &(n, t) in &times {
        if n > 0 {
            let sent = 500_000_000 + 5_000_000 * n;
            assert!(
                t < sent + 50_000_000,
                "message {n} at {t}, sent {sent}: blocked"
            );
        }
    }
}

#[test]
fn ordered_delivery_holds_the_stream_behind_a_lost_message() {
    let (times, _) = gap(false);
    assert_eq!(times.len(), 10, "{times:?}");
    let first = times
        .iter()
        .find(|(n, _)| *n == 0)
        .expect("0 retransmitted")
        .1;
    // Head-of-line blocking: nothing behind message 0 is delivered before it.
    for &(n, t) in &times {
        assert!(
            t >= first,
            "message {n} delivered at {t} before message 0 at {first}"
        );
    }
    // And the order is kept.
    let order: Vec<u64> = times.iter().map(|(n, _)| *n).collect();
    assert_eq!(order, (0..10).collect::<Vec<_>>());
}

#[test]
fn calls_spread_over_all_streams() {
    let c = SctpConfig {
        streams: 64,
        ..SctpConfig::default()
    };
    let mut p = Pair::new(c.clone(), c, link(1), 5);
    for n in 0..1_000 {
        p.send_a(n, &message(n)).expect("send");
    }
    p.run_until(2_000);
    assert_eq!(p.got_b.len(), 1_000);
    let mut streams: Vec<u16> = p.got_b.iter().map(|(_, r)| r.stream).collect();
    streams.sort_unstable();
    streams.dedup();
    assert_eq!(streams, (0..64).collect::<Vec<_>>());
    // The stream is the key's: a call's messages share one.
    assert!(
        p.got_b
            .iter()
            .all(|(_, r)| u64::from(r.stream) == number(r) % 64)
    );
}

#[test]
fn a_silent_peer_gets_a_bounded_queue_and_the_setup_fails() {
    let c = SctpConfig {
        max_queued_bytes: 10_000,
        rto_initial_ms: 100,
        rto_min_ms: 100,
        rto_max_ms: 400,
        max_init_retransmits: 3,
        ..SctpConfig::default()
    };
    let mut p = Pair::new(c.clone(), c, link(5), 9);
    // B never hears anything.
    p.drop_ab = Box::new(|_| true);
    let mut accepted = 0;
    let mut refused = 0;
    for n in 0..1_000 {
        match p.send_a(n, &message(n)) {
            Ok(()) => accepted += 1,
            Err(SendError::QueueFull { .. }) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        accepted > 0 && refused > 0,
        "{accepted} accepted, {refused} refused"
    );
    assert!(accepted * message(0).len() <= 10_000);
    p.run_until(30_000);
    let s = p.a.stats();
    assert_eq!(s.setup_failures, 1, "{s:?}");
    assert_eq!(s.open, 0, "{s:?}");
    assert_eq!(s.messages_dropped, accepted as u64, "{s:?}");
    assert!(p.got_b.is_empty());
    // INIT sent 1 + 3 retransmissions, then given up.
    assert!(
        p.sent_ab == 0 && p.ab.stats().offered <= 5,
        "{:?}",
        p.ab.stats()
    );
}

/// A second loss while the sender is in Fast Recovery for a first one: RFC 9260 §7.2.4's
/// HTNA rule counts miss indications on every SACK, so both are fast-retransmitted about a
/// round trip after the loss, long before RTO.Min (1 s). sctp-proto 0.10.8 counted none in
/// Fast Recovery until the cumulative TSN advanced, which the second loss stops: it waited
/// for the T3-rtx timer (holdline's vendored copy is patched; see vendor/README.md).
#[test]
fn a_second_loss_during_fast_recovery_is_fast_retransmitted() {
    for unordered in [false, true] {
        let mut p = Pair::new(cfg(unordered), cfg(unordered), link(20), 11);
        p.send_a(1, &message(100)).expect("send");
        p.run_until(500);
        assert!(p.a.is_connected(p.addr_b));
        // Messages 5 and 8 are lost once each; 8 is the first loss after Fast Recovery
        // starts for 5 (on the SACK of message 9).
        let mut dropped = [false; 2];
        p.drop_ab = Box::new(move |d: &[u8]| {
            for (i, tag) in [&b"call-000005"[..], &b"call-000008"[..]]
                .iter()
                .enumerate()
            {
                if !dropped[i] && d.windows(11).any(|w| w == *tag) {
                    dropped[i] = true;
                    return true;
                }
            }
            false
        });
        // One message every 5 ms on one stream, each in a packet of its own.
        for n in 0..40 {
            p.send_a(0, &message(n)).expect("send");
            p.run_until(500 + 5 * (n + 1));
        }
        p.run_until(5_000);
        let at = |m: u64| {
            p.got_b
                .iter()
                .find(|(_, r)| number(r) == m)
                .map(|(t, _)| *t)
        };
        for m in [5, 8] {
            let sent = 500_000_000 + 5_000_000 * m;
            let got = at(m).unwrap_or_else(|| panic!("message {m} never arrived"));
            assert!(
                got > sent + 40_000_000 && got < sent + 300_000_000,
                "unordered {unordered}: message {m} sent at {sent} ns arrived at {got} ns: \
                 not lost, or recovered by the T3 timer; {:?}",
                p.a.stats()
            );
        }
        let s = p.a.stats();
        assert_eq!(s.t3_timeouts, 0, "unordered {unordered}: {s:?}");
        assert!(s.fast_retransmits >= 2, "unordered {unordered}: {s:?}");
    }
}

fn heartbeat_cfg(interval_ms: u64, max_retransmits: usize) -> SctpConfig {
    SctpConfig {
        heartbeat_interval_ms: interval_ms,
        max_retransmits,
        ..SctpConfig::default()
    }
}

/// An idle association (RFC 4960 §8.3): HEARTBEATs every interval + RTO.Min once nothing is
/// heard, each answered by the peer's HEARTBEAT ACK; the association stays up.
#[test]
fn an_idle_association_is_kept_alive_by_heartbeats() {
    let c = heartbeat_cfg(1_000, 3);
    let mut p = Pair::new(c.clone(), c, link(10), 21);
    p.send_a(1, &message(1)).expect("send");
    p.run_until(500);
    assert!(p.a.is_connected(p.addr_b));
    // 20 s of silence: a HEARTBEAT each 2 s (1 s interval + 1 s RTO.Min) from each side.
    p.run_until(20_500);
    for (side, s) in [("A", p.a.stats()), ("B", p.b.stats())] {
        assert!(
            (8..=11).contains(&s.heartbeats_sent),
            "{side}: {} heartbeats in 20 s: {s:?}",
            s.heartbeats_sent
        );
        assert_eq!(s.heartbeat_acks, s.heartbeats_sent, "{side}: {s:?}");
        assert_eq!(
            (s.open, s.lost, s.heartbeat_failures),
            (1, 0, 0),
            "{side}: {s:?}"
        );
    }
    // And the association still carries messages.
    p.send_a(2, &message(2)).expect("send");
    p.run_until(21_000);
    assert_eq!(p.got_b.len(), 2);
}

/// A peer that stops answering on an idle association is found unreachable after
/// `max_retransmits` unanswered HEARTBEATs (RFC 4960 §8.1), and what waited on the
/// association is dropped; without heartbeats nothing would notice until the next message.
#[test]
fn a_silent_peer_is_found_unreachable_by_heartbeats() {
    let c = heartbeat_cfg(1_000, 3);
    let mut p = Pair::new(c.clone(), c, link(10), 23);
    p.send_a(1, &message(1)).expect("send");
    p.run_until(500);
    assert!(p.a.is_connected(p.addr_b));
    // B falls silent for A: nothing from A reaches it, so it answers nothing.
    p.drop_ab = Box::new(|_| true);
    // Each wait is 2 s: three unanswered, then the fourth wait declares the loss (~8.5 s).
    p.run_until(8_000);
    assert_eq!(p.a.stats().lost, 0, "{:?}", p.a.stats());
    p.run_until(12_000);
    let s = p.a.stats();
    assert_eq!((s.lost, s.heartbeat_failures, s.open), (1, 1, 0), "{s:?}");
    assert_eq!(s.heartbeats_sent, 3, "{s:?}");
    assert!(!p.a.is_connected(p.addr_b));
}

/// Whether message 0 (lost once) held back the messages sent after it on its stream.
fn blocked(times: &[(u64, u64)]) -> bool {
    let lost_at = times
        .iter()
        .find(|(n, _)| *n == 0)
        .map(|(_, t)| *t)
        .expect("message 0 retransmitted");
    times.iter().all(|&(n, t)| n == 0 || t >= lost_at)
}

/// Ordered or unordered delivery per peer (`SctpConfig::delivery`, the server's
/// `[sctp.delivery]` for a next hop) overrides the endpoint's default, both ways round.
#[test]
fn delivery_per_peer_overrides_the_endpoints_default() {
    let b: SocketAddr = "192.0.2.2:9899".parse().expect("addr");
    // Ordered by default, unordered towards B: nothing waits for the lost message.
    let mut a = cfg(false);
    a.delivery.insert(b, true);
    let (times, _) = gap_with(a, cfg(false));
    assert_eq!(times.len(), 10, "{times:?}");
    assert!(
        !blocked(&times),
        "unordered towards B, yet blocked: {times:?}"
    );
    // Unordered by default, ordered towards B: everything waits for it.
    let mut a = cfg(true);
    a.delivery.insert(b, false);
    let (times, _) = gap_with(a, cfg(true));
    assert_eq!(times.len(), 10, "{times:?}");
    assert!(
        blocked(&times),
        "ordered towards B, yet not blocked: {times:?}"
    );
    // And another peer keeps the default.
    let mut a = cfg(true);
    a.delivery
        .insert("192.0.2.9:9899".parse().expect("addr"), false);
    let (times, _) = gap_with(a, cfg(true));
    assert!(!blocked(&times), "{times:?}");
}

/// Datagrams stay within the 1,472 bytes of UDP payload a 1,500-byte IP packet carries
/// (sctp-proto 0.10.8 bundled DATA chunks past its MTU, so SIP messages of ~700 bytes
/// travelled two to a 1,489-byte datagram: an IP fragment, twice as exposed to loss), and
/// SIP messages carry PPID 0, "unspecified" (0.10.8 sent 58).
#[test]
fn datagrams_fit_an_ethernet_mtu_and_carry_ppid_0() {
    let mut p = Pair::new(cfg(false), cfg(false), link(10), 31);
    p.send_a(1, &message(0)).expect("send");
    p.run_until(200);
    assert!(p.a.is_connected(p.addr_b));
    p.kept_ab = Some(Vec::new());
    // Bursts of SIP messages of 600-1,400 bytes: bundled wherever two fit.
    for n in 0..400u64 {
        let mut m = message(n);
        let pad = 600 + (n as usize * 37) % 800;
        m.extend(std::iter::repeat_n(b'v', pad));
        p.send_a(n, &m).expect("send");
        if n % 8 == 7 {
            p.run_until(200 + n);
        }
    }
    p.run_until(5_000);
    assert_eq!(p.got_b.len(), 401);
    let kept = p.kept_ab.take().expect("kept");
    let mut data_chunks = 0;
    for d in &kept {
        assert!(d.len() <= 1_472, "a datagram of {} bytes", d.len());
        // Walk the chunks: type, flags, length; DATA's PPID after TSN, stream, SSN.
        let mut at = 12;
        while at + 4 <= d.len() {
            let len = usize::from(u16::from_be_bytes([d[at + 2], d[at + 3]]));
            if d[at] == 0 {
                data_chunks += 1;
                let ppid = u32::from_be_bytes([d[at + 12], d[at + 13], d[at + 14], d[at + 15]]);
                assert_eq!(ppid, 0, "a DATA chunk with PPID {ppid}");
            }
            at += len.next_multiple_of(4).max(4);
        }
    }
    assert!(data_chunks >= 400, "{data_chunks} DATA chunks seen");
    let bundled = kept.iter().filter(|d| d.len() > 1_000).count();
    assert!(
        bundled > 0,
        "no datagram over 1,000 bytes: nothing was bundled?"
    );
}

/// Retransmissions that were not needed are counted from the peer's SACKs (their duplicate
/// TSNs): B's acknowledgements are lost for a while, A retransmits on T3 what B already had,
/// and B's next SACK says so.
#[test]
fn needless_retransmissions_are_counted_from_duplicate_tsns() {
    // RTO.Initial 1 s: the T3 timer fires while B's SACKs are still being lost.
    let c = SctpConfig {
        rto_initial_ms: 1_000,
        ..SctpConfig::default()
    };
    let mut p = Pair::new(c.clone(), c, link(10), 41);
    p.send_a(1, &message(0)).expect("send");
    p.run_until(200);
    assert!(p.a.is_connected(p.addr_b));
    // Every packet from B is lost until t = 1.5 s, so A hears no SACK for what it sends now.
    let until = 1_500_000_000u64;
    let clock = std::rc::Rc::new(std::cell::Cell::new(0u64));
    let c = std::rc::Rc::clone(&clock);
    p.drop_ba = Box::new(move |_| c.get() < until);
    for n in 1..=5 {
        p.send_a(n, &message(n)).expect("send");
    }
    while p.now < 4_000_000_000 {
        clock.set(p.now);
        let next = p.now / 1_000_000 + 10;
        p.run_until(next);
    }
    assert_eq!(p.got_b.len(), 6, "each message delivered once");
    let s = p.a.stats();
    assert!(s.t3_timeouts >= 1, "{s:?}");
    assert!(s.duplicate_tsns >= 1, "B reported no duplicate: {s:?}");
}
