//! Each driver, over real loopback sockets, forwards INVITEs to the UAS and their 200 OKs
//! back to the caller, statelessly and statefully. Every read is bounded by a socket
//! timeout; nothing sleeps to synchronise.

use super::*;

/// How long a test socket waits for one datagram.
const WAIT: Duration = Duration::from_secs(3);

fn socket() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
    s.set_read_timeout(Some(WAIT)).expect("timeout");
    s
}

fn recv(s: &UdpSocket) -> String {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let (n, _) = s
        .recv_from(&mut buf)
        .expect("a datagram within the timeout");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn invite(caller: SocketAddr, call: &str) -> String {
    format!(
        "INVITE sip:user7@example.com SIP/2.0\r\n\
         Via: SIP/2.0/UDP {caller};branch=z9hG4bK-{call}\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:caller@example.com>;tag=f-{call}\r\n\
         To: <sip:user7@example.com>\r\n\
         Call-ID: {call}\r\n\
         CSeq: 1 INVITE\r\n\
         Contact: <sip:caller@{caller}>\r\n\
         Content-Length: 0\r\n\r\n"
    )
}

/// The header lines of `msg` named `name` (full or compact form), in order.
fn headers<'a>(msg: &'a str, name: &str, compact: &str) -> Vec<&'a str> {
    msg.split("\r\n")
        .filter(|l| {
            let lower = l.to_ascii_lowercase();
            lower.starts_with(&format!("{name}:")) || lower.starts_with(&format!("{compact}:"))
        })
        .collect()
}

/// The sent-by address of a Via line.
fn sent_by(via: &str) -> SocketAddr {
    let after = via.split_once("UDP ").expect("a UDP Via").1;
    let host_port = after.split([';', ' ', ',']).next().expect("sent-by");
    host_port.parse().expect("an IP:port sent-by")
}

/// The UAS's 200 OK to a forwarded INVITE (every Via copied, a To tag added).
fn ok_for(inv: &str, uas: SocketAddr) -> String {
    let mut r = String::from("SIP/2.0 200 OK\r\n");
    for v in headers(inv, "via", "v") {
        r.push_str(v);
        r.push_str("\r\n");
    }
    for rr in headers(inv, "record-route", "") {
        r.push_str(rr);
        r.push_str("\r\n");
    }
    for (name, compact) in [("from", "f"), ("call-id", "i"), ("cseq", "")] {
        for h in headers(inv, name, compact) {
            r.push_str(h);
            r.push_str("\r\n");
        }
    }
    let to = headers(inv, "to", "t");
    r.push_str(to.first().expect("To"));
    r.push_str(";tag=uas\r\n");
    r.push_str(&format!(
        "Contact: <sip:user7@{uas}>\r\nContent-Length: 0\r\n\r\n"
    ));
    r
}

/// `calls` calls from `callers` (round robin) through the driver at `proxy` to `uas`: the
/// INVITE arrives at the UAS with the proxy's Via on top, and the 200 OK comes back to the
/// caller with only its own Via.
fn calls_through(
    proxy: SocketAddr,
    uas: &UdpSocket,
    callers: &[UdpSocket],
    calls: usize,
    tag: &str,
) {
    for i in 0..calls {
        let caller = &callers[i % callers.len()];
        let me = caller.local_addr().expect("addr");
        let call = format!("{tag}-{i}");
        caller
            .send_to(invite(me, &call).as_bytes(), proxy)
            .expect("send INVITE");
        let fwd = recv(uas);
        assert!(fwd.starts_with("INVITE "), "{fwd}");
        assert!(fwd.contains(&call), "{fwd}");
        let vias = headers(&fwd, "via", "v");
        assert_eq!(vias.len(), 2, "the proxy pushed its Via: {fwd}");
        let back_to = sent_by(vias[0]);
        uas.send_to(
            ok_for(&fwd, uas.local_addr().expect("addr")).as_bytes(),
            back_to,
        )
        .expect("send 200");
        // A stateful proxy may send 100 Trying first.
        let mut got = recv(caller);
        for _ in 0..3 {
            if !got.starts_with("SIP/2.0 100") {
                break;
            }
            got = recv(caller);
        }
        assert!(got.starts_with("SIP/2.0 200"), "{got}");
        assert!(got.contains(&call), "{got}");
        let vias = headers(&got, "via", "v");
        assert_eq!(vias.len(), 1, "the proxy popped its Via: {got}");
        assert_eq!(sent_by(vias[0]), me);
    }
}

fn spec(stateful: bool, uas: SocketAddr) -> Spec {
    Spec {
        stateful,
        uas,
        pool: 3,
        cost: Duration::ZERO,
    }
}

fn check(driver: Driver) {
    for stateful in [false, true] {
        let uas = socket();
        let callers = [socket(), socket()];
        let s = spec(stateful, uas.local_addr().expect("addr"));
        let mut r = start(driver, "127.0.0.1:0".parse().expect("addr"), &s).expect("start");
        calls_through(
            r.addr,
            &uas,
            &callers,
            12,
            &format!("{}-{stateful}", driver.name()),
        );
        r.stop();
        assert_eq!(r.drops.load(Ordering::Relaxed), 0);
    }
}

#[test]
fn event_loop_forwards_calls() {
    check(Driver::Event);
}

#[test]
fn thread_per_message_forwards_calls() {
    check(Driver::ThreadPerMessage);
}

#[test]
fn pool_thread_per_message_forwards_calls() {
    check(Driver::PoolThreadPerMessage);
}

#[test]
fn thread_pool_with_lock_striping_forwards_calls() {
    check(Driver::ThreadPool);
}

#[test]
fn process_pool_members_share_a_port_and_get_their_own_answers() {
    for stateful in [false, true] {
        let uas = socket();
        let s = spec(stateful, uas.local_addr().expect("addr"));
        let mut first =
            start_pool_member("127.0.0.1:0".parse().expect("addr"), &s, 1).expect("member 1");
        let mut second = start_pool_member(first.addr, &s, 2).expect("member 2 on the same port");
        assert_eq!(first.addr, second.addr);
        // Many source ports, so that the kernel's hash spreads them over both members.
        let callers: Vec<UdpSocket> = (0..8).map(|_| socket()).collect();
        calls_through(first.addr, &uas, &callers, 24, &format!("pool-{stateful}"));
        first.stop();
        second.stop();
    }
}

#[test]
fn holdline_is_not_a_lab_driver() {
    let s = spec(false, "127.0.0.1:9".parse().expect("addr"));
    assert!(start(Driver::Holdline, "127.0.0.1:0".parse().expect("addr"), &s).is_err());
}

#[test]
fn sets_follow_the_call_id() {
    let a = invite("127.0.0.1:5000".parse().expect("addr"), "call-a");
    let same = a.replace("CSeq: 1 INVITE", "CSeq: 2 INVITE");
    assert_eq!(set_of(a.as_bytes(), SETS), set_of(same.as_bytes(), SETS));
    assert_eq!(
        set_of(a.as_bytes(), SETS),
        holdline_proto::shard::shard_of(b"call-a", SETS)
    );
    assert_eq!(set_of(b"garbage", SETS), 0);
    assert!(
        Driver::ALL
            .iter()
            .all(|d| Driver::parse(d.name()) == Ok(*d))
    );
    assert!(Driver::parse("fork-per-call").is_err());
}
