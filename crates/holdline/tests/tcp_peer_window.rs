//! Smart forwarding's backlog signal, `TcpConn::peer_held_bytes` (issue 19 item 4): bytes the
//! kernel has not sent count only when the next hop's advertised window holds them back.
//!
//! - On loopback, a receiver that stops reading closes its window: the unsent bytes are the
//!   peer's doing and are reported.
//! - Across a 60 ms `holdline netem` link (root; skipped with a note otherwise), a burst right
//!   after the handshake waits for the sender's congestion window (slow start), not for the
//!   peer, whose window is wide open: nothing is reported, although bytes are unsent — the
//!   false rejections at the start of a WAN connection that issue 19 measured.

use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener as StdListener};
use std::time::{Duration, Instant};

use holdline_base::Duration as LinkDuration;
use holdline_io::tcp::{ConnLimits, TcpConn, TcpOptions};
use holdline_netem::{Clock, Emulator, EmulatorConfig, Topology, netns};
use holdline_netmodel::LinkConfig;

const LIMITS: ConnLimits = ConnLimits {
    max_read_buffer: 64 * 1024,
    max_queue_bytes: 8 << 20,
};

/// Connects a `TcpConn` to `addr` and waits (bounded) for the handshake.
fn connect(addr: SocketAddr) -> TcpConn {
    let mut c = TcpConn::connect(addr, &TcpOptions::default(), LIMITS).expect("connect");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match c.finish_connect() {
            Ok(true) => return c,
            Ok(false) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("connect: {e}"),
        }
        assert!(Instant::now() < deadline, "no handshake in 5 s");
        std::thread::yield_now();
    }
}

#[test]
fn a_closed_peer_window_is_reported() {
    // Nobody reads the receiving end: its window closes.
    let listener = StdListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let mut client = connect(addr);
    let (_server, _) = listener.accept().expect("accept");
    client.enqueue(&vec![b'x'; 4 << 20]).expect("queue");
    // Write until the kernel takes no more: the peer's window is then full.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let _ = client.flush();
        if client.unsent_bytes().expect("SIOCOUTQNSD") > 0 && client.queued_bytes() > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the send buffer never filled");
        std::thread::yield_now();
    }
    let unsent = client.unsent_bytes().expect("unsent");
    let window = client.peer_window().expect("tcpi_snd_wnd (Linux 5.4+)");
    let held = client.peer_held_bytes().expect("peer held");
    assert!(unsent > 0);
    assert_eq!(
        held, unsent,
        "window {window} B: the peer holds the unsent bytes back"
    );
}

#[test]
fn bytes_waiting_for_slow_start_across_a_wan_link_are_not_reported() {
    if !netns::is_root() {
        eprintln!("skipped: needs root (network namespaces and TUN devices)");
        return;
    }
    let topo = Topology::create(&format!("hlpw{}", std::process::id())).expect("topology");
    let link = LinkConfig {
        delay: LinkDuration::from_millis(60),
        overhead_bytes: 0,
        ..LinkConfig::default()
    };
    let emu = Emulator::start(
        &topo,
        &EmulatorConfig {
            a_to_b: link,
            b_to_a: link,
            seed: 1,
        },
        Clock::start(),
    )
    .expect("emulator");
    let server_addr = SocketAddr::from((topo.addr_b, 9_070));
    let listener = netns::run_in(&topo.ns_b, move || StdListener::bind(server_addr))
        .expect("namespace B")
        .expect("bind");
    // The receiver reads everything: its window stays open.
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut buf = vec![0u8; 64 * 1024];
        let mut total = 0;
        while total < 40_000 {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
        total
    });
    let (unsent, held, window) = netns::run_in(&topo.ns_a, move || {
        let mut c = connect(server_addr);
        // 40 KB at once: the initial congestion window (10 segments, 14.5 KB) sends part,
        // the rest waits a round trip (120 ms) for the ACKs. The peer's window (64 KB or
        // more at the start) would take all of it.
        c.enqueue(&vec![b'x'; 40_000]).expect("queue");
        c.flush().expect("flush");
        (
            c.unsent_bytes().expect("unsent"),
            c.peer_held_bytes().expect("held"),
            c.peer_window().expect("tcpi_snd_wnd (Linux 5.4+)"),
        )
    })
    .expect("namespace A");
    assert!(
        unsent > 16 * 1024,
        "only {unsent} B unsent: slow start held nothing back?"
    );
    assert_eq!(
        held, 0,
        "{unsent} B unsent with the peer's window at {window} B: the congestion window's doing"
    );
    assert!(window as usize >= 40_000, "window {window}");
    assert_eq!(reader.join().expect("reader"), 40_000);
    drop(emu);
}
