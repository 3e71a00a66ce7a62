//! TLS inside [`TcpConn`]: a client and a server session over a loopback connection, driven
//! by a mio poll like the server's workers drive them. What is checked: plaintext in and out,
//! plaintext enqueued before the handshake counted and sent after it, the write queue
//! counting TLS records (more than the plaintext), and a name mismatch failing with a
//! [`rustls::Error`] the caller can tell apart.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use holdline_io::tcp::{ConnLimits, TcpConn, TcpListener, TcpOptions, TlsState, tls_error};
use mio::{Events, Interest, Poll, Token};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};

const NAME: &str = "io.test.example";

struct Pair {
    poll: Poll,
    client: TcpConn,
    server: TcpConn,
}

fn configs() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let ck = rcgen::generate_simple_self_signed(vec![NAME.to_owned()]).expect("cert");
    let cert = CertificateDer::from(ck.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()));
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .expect("server config");
    // The self-signed certificate is its own trust anchor.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).expect("root");
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    (Arc::new(server), Arc::new(client))
}

fn pair(name: &str) -> Pair {
    let (server_cfg, client_cfg) = configs();
    let opts = TcpOptions {
        reuse_port: false,
        ..TcpOptions::default()
    };
    let mut listener =
        TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)), &opts).expect("listen");
    let addr = listener.local_addr().expect("addr");
    let mut poll = Poll::new().expect("poll");
    poll.registry()
        .register(&mut listener, Token(9), Interest::READABLE)
        .expect("register listener");
    let mut client = TcpConn::connect(addr, &opts, ConnLimits::default()).expect("connect");
    let name = ServerName::try_from(name.to_owned()).expect("name");
    client.start_tls(rustls::Connection::Client(
        rustls::ClientConnection::new(client_cfg, name).expect("client session"),
    ));
    let mut events = Events::with_capacity(8);
    let mut server = loop {
        match listener.accept(ConnLimits::default()) {
            Ok(c) => break c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                poll.poll(&mut events, Some(Duration::from_secs(5)))
                    .expect("poll");
                assert!(!events.is_empty(), "no connection within 5 s");
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    server.start_tls(rustls::Connection::Server(
        rustls::ServerConnection::new(server_cfg).expect("server session"),
    ));
    let both = Interest::READABLE | Interest::WRITABLE;
    poll.registry()
        .register(&mut client, Token(1), both)
        .expect("register client");
    poll.registry()
        .register(&mut server, Token(2), both)
        .expect("register server");
    Pair {
        poll,
        client,
        server,
    }
}

impl Pair {
    /// Drives both ends on readiness until `done` holds (bounded: 5 s without an event).
    fn drive(&mut self, mut done: impl FnMut(&mut Self) -> bool) -> std::io::Result<()> {
        let mut events = Events::with_capacity(8);
        while !done(self) {
            self.poll
                .poll(&mut events, Some(Duration::from_secs(5)))
                .expect("poll");
            assert!(!events.is_empty(), "stuck: no event within 5 s");
            for ev in &events {
                let c = if ev.token() == Token(1) {
                    &mut self.client
                } else {
                    &mut self.server
                };
                if c.is_connecting() && !c.finish_connect()? {
                    continue;
                }
                c.flush()?;
                if ev.is_readable() {
                    c.read()?;
                }
            }
        }
        Ok(())
    }
}

#[test]
fn plaintext_crosses_and_the_queue_counts_tls_records() {
    let mut p = pair(NAME);
    // Before the handshake: the plaintext waits, counted.
    let first = b"OPTIONS sip:a SIP/2.0\r\nContent-Length: 0\r\n\r\n";
    p.client.enqueue(first).expect("enqueue");
    assert_eq!(p.client.tls_state(), Some(TlsState::Handshaking));
    assert!(p.client.queued_bytes() >= first.len());
    p.drive(|p| p.server.buffered().len() >= first.len())
        .expect("handshake and first message");
    assert_eq!(p.server.buffered(), first);
    p.server.consume(first.len());
    assert_eq!(p.client.tls_state(), Some(TlsState::Established));
    assert_eq!(p.server.tls_state(), Some(TlsState::Established));

    // After it: what is queued is TLS records, larger than the plaintext.
    let big = vec![b'x'; 10_000];
    p.server.enqueue(&big).expect("enqueue");
    assert!(
        p.server.queued_bytes() > big.len(),
        "records {} for {} bytes of plaintext",
        p.server.queued_bytes(),
        big.len()
    );
    p.server.flush().expect("flush");
    p.drive(|p| p.client.buffered().len() >= big.len())
        .expect("reply");
    assert_eq!(p.client.buffered(), &big[..]);
}

#[test]
fn a_certificate_for_another_name_fails_with_a_tls_error() {
    let mut p = pair("other.test.example");
    p.client.enqueue(b"lost\r\n").expect("enqueue");
    let e = p.drive(|_| false).expect_err("verification fails");
    let tls = tls_error(&e).expect("a TLS error");
    assert!(
        matches!(tls, rustls::Error::InvalidCertificate(_)),
        "{tls:?}"
    );
    assert_eq!(p.client.tls_state(), Some(TlsState::Handshaking));
}
