//! Real sockets on 127.0.0.1; every wait is bounded by a poll timeout.
#![allow(missing_docs)]

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use holdline_io::tcp::{ConnLimits, QueueFull, TcpConn, TcpListener, TcpOptions};
use holdline_io::udp::{RecvBatch, SendBatch, UdpOptions, UdpSocket};
use mio::{Events, Interest, Poll, Token};

fn lo() -> SocketAddr {
    "127.0.0.1:0".parse().expect("addr")
}

/// Polls until `f` returns Some, at most 5 s.
fn until<T>(poll: &mut Poll, mut f: impl FnMut() -> io::Result<Option<T>>) -> T {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut events = Events::with_capacity(16);
    loop {
        if let Some(v) = f().expect("io") {
            return v;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "timed out");
        poll.poll(&mut events, Some(left.min(Duration::from_millis(100))))
            .expect("poll");
    }
}

fn udp_round_trip(batched: bool) {
    let opts = UdpOptions {
        batched,
        recv_buffer: Some(256 * 1024),
        ..UdpOptions::default()
    };
    let mut a = UdpSocket::bind(lo(), &opts).expect("bind a");
    let mut b = UdpSocket::bind(lo(), &opts).expect("bind b");
    assert!(b.recv_buffer_size().expect("rcvbuf") >= 256 * 1024);
    let mut poll = Poll::new().expect("poll");
    poll.registry()
        .register(&mut a, Token(0), Interest::READABLE)
        .expect("reg");
    poll.registry()
        .register(&mut b, Token(1), Interest::READABLE)
        .expect("reg");
    let to = b.local_addr().expect("addr");
    let mut out = SendBatch::new();
    for i in 0..40u8 {
        out.push(to, &[i; 7]);
    }
    let mut errors = 0;
    let sent = a.send_batch(&mut out, &mut errors);
    assert_eq!((sent, errors), (40, 0));
    assert!(out.is_empty());
    let mut batch = RecvBatch::new(32, 100);
    let mut seen = Vec::new();
    let from = a.local_addr().expect("addr");
    until(&mut poll, || {
        loop {
            match b.recv_batch(&mut batch) {
                Ok(n) => {
                    for i in 0..n {
                        let d = batch.get(i).expect("datagram");
                        assert_eq!(d.source, from);
                        assert!(!d.truncated);
                        seen.push(d.payload.to_vec());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok((seen.len() == 40).then_some(()))
    });
    for (i, p) in seen.iter().enumerate() {
        assert_eq!(p, &vec![i as u8; 7]);
    }
    // An oversized datagram is reported as truncated.
    a.send_to(&[1; 150], to).expect("send");
    let mut small = RecvBatch::new(4, 100);
    until(&mut poll, || match b.recv_batch(&mut small) {
        Ok(_) => Ok(Some(())),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    });
    let d = small.get(0).expect("one");
    assert!(d.truncated);
    assert_eq!(d.payload.len(), 100);
}

#[test]
fn udp_batched_round_trip() {
    udp_round_trip(true);
}

#[test]
fn udp_fallback_round_trip() {
    udp_round_trip(false);
}

#[test]
fn udp_reuse_port_binds_twice() {
    let a = UdpSocket::bind(lo(), &UdpOptions::default()).expect("a");
    let addr = a.local_addr().expect("addr");
    let b = UdpSocket::bind(addr, &UdpOptions::default()).expect("b shares the port");
    assert_eq!(b.local_addr().expect("addr"), addr);
    let no_reuse = UdpOptions {
        reuse_port: false,
        ..UdpOptions::default()
    };
    assert!(UdpSocket::bind(addr, &no_reuse).is_err());
}

/// Two "workers": sockets 0 and 1 for everything, 2 and 3 for new calls. Every datagram
/// must land where the steering program says, by its first bytes and its source port.
#[test]
fn udp_invites_are_steered_to_their_own_sockets() {
    const WORKERS: usize = 2;
    let first = UdpSocket::bind(lo(), &UdpOptions::default()).expect("bind");
    let addr = first.local_addr().expect("addr");
    let mut group = vec![first];
    for _ in 1..2 * WORKERS {
        group.push(UdpSocket::bind(addr, &UdpOptions::default()).expect("bind in group"));
    }
    group[0].steer_invites(WORKERS).expect("attach the program");
    assert!(
        group[0].steer_invites(0).is_err(),
        "zero workers is refused"
    );
    let mut poll = Poll::new().expect("poll");
    for (i, s) in group.iter_mut().enumerate() {
        poll.registry()
            .register(s, Token(i), Interest::READABLE)
            .expect("reg");
    }
    let payloads: [&[u8]; 5] = [
        b"INVITE sip:bob@example.com SIP/2.0\r\n\r\n",
        b"ACK sip:bob@example.com SIP/2.0\r\n\r\n",
        b"SIP/2.0 200 OK\r\n\r\n",
        b"INVITEX sip:x SIP/2.0\r\n\r\n",
        b"INV",
    ];
    // (source port, payload) → the socket it must reach.
    let mut expected = Vec::new();
    let mut senders = Vec::new();
    for _ in 0..4 {
        let s = UdpSocket::bind(lo(), &UdpOptions::default()).expect("sender");
        let port = s.local_addr().expect("addr").port();
        for p in payloads {
            s.send_to(p, addr).expect("send");
            let h = usize::from(port) % WORKERS;
            let to = if p.starts_with(b"INVITE ") {
                WORKERS + h
            } else if p.len() < 7 {
                0 // the program's load fails: socket 0
            } else {
                h
            };
            expected.push((port, p.to_vec(), to));
        }
        senders.push(s);
    }
    let mut got = Vec::new();
    let mut batch = RecvBatch::new(32, 200);
    until(&mut poll, || {
        for (i, s) in group.iter().enumerate() {
            loop {
                match s.recv_batch(&mut batch) {
                    Ok(n) => {
                        for k in 0..n {
                            let d = batch.get(k).expect("datagram");
                            got.push((d.source.port(), d.payload.to_vec(), i));
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
        }
        Ok((got.len() == expected.len()).then_some(()))
    });
    expected.sort();
    got.sort();
    assert_eq!(got, expected);
}

#[test]
fn tcp_connect_accept_read_write_and_bounds() {
    let opts = TcpOptions::default();
    let mut listener = TcpListener::bind(lo(), &opts).expect("listen");
    let addr = listener.local_addr().expect("addr");
    let mut poll = Poll::new().expect("poll");
    poll.registry()
        .register(&mut listener, Token(0), Interest::READABLE)
        .expect("reg");
    let limits = ConnLimits {
        max_read_buffer: 64 * 1024,
        max_queue_bytes: 1000,
    };
    let mut client = TcpConn::connect(addr, &opts, limits).expect("connect");
    poll.registry()
        .register(
            &mut client,
            Token(1),
            Interest::READABLE | Interest::WRITABLE,
        )
        .expect("reg");
    client.enqueue(b"hello ").expect("queue while connecting");
    assert_eq!(client.enqueue(&[0; 2000]), Err(QueueFull));
    let mut server = until(&mut poll, || match listener.accept(limits) {
        Ok(c) => Ok(Some(c)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    });
    poll.registry()
        .register(
            &mut server,
            Token(2),
            Interest::READABLE | Interest::WRITABLE,
        )
        .expect("reg");
    until(&mut poll, || {
        client.finish_connect().map(|c| c.then_some(()))
    });
    client.enqueue(b"world").expect("queue");
    client.flush().expect("flush");
    assert_eq!(client.queued_bytes(), 0);
    assert!(client.unsent_bytes().is_ok());
    until(&mut poll, || {
        let r = server.read()?;
        assert!(!r.eof);
        Ok((server.buffered().len() == 11).then_some(()))
    });
    assert_eq!(server.buffered(), b"hello world");
    assert!(server.read_buffer_capacity() >= 11);
    server.consume(6);
    assert_eq!(server.buffered(), b"world");
    server.consume(5);
    assert!(server.buffered().is_empty());
    // Everything consumed: an idle connection keeps no more than a small read buffer.
    assert!(
        server.read_buffer_capacity() <= holdline_io::tcp::IDLE_READ_BUFFER,
        "{}",
        server.read_buffer_capacity()
    );
    drop(client);
    until(&mut poll, || Ok(server.read()?.eof.then_some(())));
}

#[test]
fn udp_receive_timestamps_are_the_kernels_receive_time() {
    let stamped = UdpOptions {
        timestamps: true,
        ..UdpOptions::default()
    };
    let a = UdpSocket::bind(lo(), &UdpOptions::default()).expect("bind a");
    let mut b = UdpSocket::bind(lo(), &stamped).expect("bind b");
    let mut plain = UdpSocket::bind(lo(), &UdpOptions::default()).expect("bind c");
    let mut poll = Poll::new().expect("poll");
    poll.registry()
        .register(&mut b, Token(1), Interest::READABLE)
        .expect("reg");
    poll.registry()
        .register(&mut plain, Token(2), Interest::READABLE)
        .expect("reg");
    let epoch_ns = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos() as u64
    };
    let before = epoch_ns();
    a.send_to(b"one", b.local_addr().expect("addr"))
        .expect("send");
    a.send_to(b"two", plain.local_addr().expect("addr"))
        .expect("send");
    let mut batch = RecvBatch::new(4, 100);
    let stamp = until(&mut poll, || match b.recv_batch(&mut batch) {
        Ok(_) => Ok(Some(batch.get(0).expect("one datagram").received_at)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    });
    let after = epoch_ns();
    let stamp = stamp.expect("a stamped socket reports the receive time");
    assert!(
        (before..=after).contains(&stamp),
        "{before} <= {stamp} <= {after}"
    );
    let unstamped = until(&mut poll, || match plain.recv_batch(&mut batch) {
        Ok(_) => Ok(Some(batch.get(0).expect("one datagram").received_at)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    });
    assert_eq!(unstamped, None, "no stamp unless asked for");
}

#[test]
fn tcp_receive_timestamps_bound_the_age_of_what_was_read() {
    let epoch_ns = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos() as u64
    };
    let stamped = TcpOptions {
        timestamps: true,
        ..TcpOptions::default()
    };
    let limits = ConnLimits::default();
    let mut poll = Poll::new().expect("poll");
    // A stamped listener (accepted connections inherit the option) and a plain one.
    let mut conns = Vec::new();
    for (i, opts) in [stamped, TcpOptions::default()].iter().enumerate() {
        let mut listener = TcpListener::bind(lo(), opts).expect("listen");
        poll.registry()
            .register(&mut listener, Token(10 + i), Interest::READABLE)
            .expect("reg");
        let mut client = TcpConn::connect(
            listener.local_addr().expect("addr"),
            &TcpOptions::default(),
            limits,
        )
        .expect("connect");
        poll.registry()
            .register(&mut client, Token(20 + i), Interest::WRITABLE)
            .expect("reg");
        let mut server = until(&mut poll, || match listener.accept(limits) {
            Ok(c) => Ok(Some(c)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        });
        poll.registry()
            .register(&mut server, Token(30 + i), Interest::READABLE)
            .expect("reg");
        until(&mut poll, || {
            client.finish_connect().map(|c| c.then_some(()))
        });
        conns.push((client, server));
    }
    let (client, server) = &mut conns[0];
    // Exchange one word (read whole, then consumed), return the newest stamp its reads
    // reported.
    let mut exchange = |word: &[u8]| {
        client.enqueue(word).expect("queue");
        client.flush().expect("flush");
        let mut stamp = None;
        until(&mut poll, || {
            let r = server.read()?;
            stamp = r.rx_ns.or(stamp);
            Ok((server.buffered().len() == word.len()).then_some(()))
        });
        assert_eq!(server.buffered(), word);
        server.consume(word.len());
        stamp
    };
    // Linux turns receive stamping on system-wide from a work queue when the first socket
    // asks, so the first bytes may go unstamped until that work has run (on a loaded machine,
    // after many exchanges): warm up until a stamp comes, for at most 10 s.
    let deadline = Instant::now() + Duration::from_secs(10);
    let warm = std::iter::from_fn(|| (Instant::now() < deadline).then(|| exchange(b"w")))
        .any(|s| s.is_some());
    assert!(warm, "no receive stamp within 10 s of exchanges");
    let mut last = 0;
    for word in [&b"first "[..], b"second"] {
        let before = epoch_ns();
        let stamp = exchange(word).expect("a stamped connection reports the receive time");
        let after = epoch_ns();
        assert!(
            (before..=after).contains(&stamp),
            "{before} <= {stamp} <= {after}"
        );
        assert!(stamp >= last, "later data, later stamp");
        last = stamp;
    }
    let (client, server) = &mut conns[1];
    client.enqueue(b"plain").expect("queue");
    client.flush().expect("flush");
    let unstamped = until(&mut poll, || {
        let r = server.read()?;
        Ok((r.bytes > 0).then_some(r.rx_ns))
    });
    assert_eq!(unstamped, None, "no stamp unless asked for");
}
