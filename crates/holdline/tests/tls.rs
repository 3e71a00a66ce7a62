//! SIP over TLS (rustls), end to end, everything on loopback with certificates generated
//! here (rcgen): a CA, server certificates naming `sip.test.example` and 127.0.0.1, client
//! certificates, and a second CA nobody trusts.
//!
//! - Calls: SIPp uac (TCP) → holdline A → TLS → holdline B (`tls:` listener) → SIPp uas
//!   (TCP), 100 calls at 50/s, every message of every call over the TLS hop (both proxies
//!   record-route; `scenarios/uas_rr.xml` and `call_chain.xml`), B's responses and the
//!   dialog's ACK and BYE on A's connection (B never opens one back), with mutual TLS (A
//!   presents a client certificate, B has `verify_client`). Debian's SIPp is built without
//!   TLS (no `-t l1`), so holdline A is the TLS client SIPp cannot be.
//! - `verify_client`: a client presenting a certificate of the untrusted CA, or none, is
//!   refused in the handshake (and counted); one of the trusted CA gets its OPTIONS answered.
//! - A TLS next hop whose certificate does not carry the route's `server_name` fails the
//!   handshake: nothing is sent to it, the failure is counted on both sides.
//!
//! Every process is started here, bounded, and stopped by its PID. `HOLDLINE_SKIP_SIPP=1`
//! skips the SIPp test.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::{Ca, Holdline, free_port, metric, sipp_available, wait_metrics};

const NAME: &str = "sip.test.example";

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scenarios")
        .join(name)
}

/// The certificates of a test, as files in `dir`.
struct Pki {
    dir: PathBuf,
    trusted: Ca,
    untrusted: Ca,
}

impl Pki {
    fn new(dir: &Path) -> Self {
        let pki = Self {
            dir: dir.to_owned(),
            trusted: Ca::new("holdline test CA"),
            untrusted: Ca::new("nobody's CA"),
        };
        pki.write("ca.pem", &pki.trusted.pem);
        pki
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, text).expect("write pem");
        p
    }

    /// A leaf of the trusted (or untrusted) CA written as `NAME.pem` and `NAME.key`.
    fn leaf_files(&self, name: &str, names: &[&str], trusted: bool) -> (PathBuf, PathBuf) {
        let ca = if trusted {
            &self.trusted
        } else {
            &self.untrusted
        };
        let (cert, key) = ca.leaf(names);
        (
            self.write(&format!("{name}.pem"), &cert),
            self.write(&format!("{name}.key"), &key),
        )
    }
}

/// A configuration file `name` in `dir` with `text`; returns its path as an argument.
fn config_file(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write config");
    p.display().to_string()
}

fn toml_path(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}

fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

#[test]
fn sipp_calls_cross_a_mutual_tls_hop_between_two_holdlines() {
    let _one_run_at_a_time = common::sipp_lock();
    if !sipp_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(dir.path());
    let (b_cert, b_key) = pki.leaf_files("b", &[NAME, "127.0.0.1"], true);
    let (a_cert, a_key) = pki.leaf_files("a", &["proxy-a.test.example"], true);
    let (a, b, uas, uac) = (free_port(), free_port(), free_port(), free_port());
    let (a_metrics, b_metrics) = (free_port(), free_port());
    let calls = 100;

    let _uas = common::Guard(
        Command::new("sipp")
            .arg("-sf")
            .arg(scenario("uas_rr.xml"))
            .args(["-i", "127.0.0.1", "-p", &uas.to_string(), "-t", "t1"])
            .args(["-nostdin", "-timeout", "60s", "-timeout_error"])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sipp uas"),
    );
    common::wait_bound(false, uas, Duration::from_secs(10));

    // B: a TLS listener requiring client certificates of the test CA.
    let b_config = config_file(
        dir.path(),
        "b.toml",
        &format!(
            "[tls]\ncert_file = {}\nkey_file = {}\nca_file = {}\nverify_client = true\n",
            toml_path(&b_cert),
            toml_path(&b_key),
            toml_path(&dir.path().join("ca.pem"))
        ),
    );
    let _b = Holdline::start(&[
        "--config".into(),
        b_config,
        "--listen".into(),
        format!("tls:127.0.0.1:{b}"),
        "--route".into(),
        format!("*=tcp:127.0.0.1:{uas}"),
        "--store".into(),
        "memory".into(),
        "--metrics".into(),
        format!("127.0.0.1:{b_metrics}"),
    ]);
    // A: TCP for SIPp, B as its TLS next hop verified by name, its own client certificate.
    let a_config = config_file(
        dir.path(),
        "a.toml",
        &format!(
            "[tls]\nca_file = {}\nclient_cert_file = {}\nclient_key_file = {}\n",
            toml_path(&dir.path().join("ca.pem")),
            toml_path(&a_cert),
            toml_path(&a_key)
        ),
    );
    let _a = Holdline::start(&[
        "--config".into(),
        a_config,
        "--listen".into(),
        format!("tcp:127.0.0.1:{a}"),
        "--route".into(),
        format!("*=tls:127.0.0.1:{b},server_name={NAME}"),
        "--store".into(),
        "memory".into(),
        "--metrics".into(),
        format!("127.0.0.1:{a_metrics}"),
    ]);

    let stats = dir.path().join("uac.csv");
    let status = Command::new("sipp")
        .arg("-sf")
        .arg(scenario("call_chain.xml"))
        .arg(local(a).to_string())
        .args(["-i", "127.0.0.1", "-p", &uac.to_string(), "-t", "t1"])
        .args(["-r", "50", "-m", &calls.to_string(), "-d", "0"])
        .args(["-nostdin", "-timeout", "60s", "-timeout_error"])
        .args(["-trace_stat", "-fd", "1", "-stf"])
        .arg(&stats)
        .args(["-trace_err", "-error_file"])
        .arg(dir.path().join("uac_errors.log"))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run sipp uac");
    common::assert_uac_ok(dir.path(), calls, status, "sipp -> A -> tls -> B -> sipp");

    let am = common::scrape(local(a_metrics));
    let bm = common::scrape(local(b_metrics));
    let hs = |text: &str, side: &str, result: &str| {
        metric(
            text,
            "holdline_tls_handshakes_total",
            &[&format!("side=\"{side}\""), &format!("result=\"{result}\"")],
        )
    };
    assert!(hs(&am, "client", "ok") >= 1.0, "{am}");
    assert_eq!(hs(&am, "client", "failed"), 0.0, "{am}");
    assert!(hs(&bm, "server", "ok") >= 1.0, "{bm}");
    assert_eq!(hs(&bm, "server", "failed"), 0.0, "{bm}");
    // Connection reuse: B answered and received the whole dialog on A's connection, never
    // opening one of its own towards A.
    assert_eq!(
        hs(&bm, "client", "ok") + hs(&bm, "client", "failed"),
        0.0,
        "{bm}"
    );
    // INVITE, ACK, BYE per call came in over TLS at B, and B's responses left over TLS.
    let tls_in = metric(&bm, "holdline_messages_in_total", &["transport=\"tls\""]);
    let tls_out = metric(&bm, "holdline_messages_out_total", &["transport=\"tls\""]);
    assert!(tls_in >= 3.0 * calls as f64, "{tls_in}\n{bm}");
    assert!(tls_out >= 3.0 * calls as f64, "{tls_out}\n{bm}");
    assert_eq!(
        metric(
            &bm,
            "holdline_connections_closed_total",
            &["reason=\"tls_error\""]
        ),
        0.0,
        "{bm}"
    );
}

/// A rustls client configuration trusting the test CA, with an optional client certificate.
fn client_config(pki: &Pki, cert: Option<(&Path, &Path)>) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(pki.dir.join("ca.pem")).expect("ca") {
        roots.add(c.expect("ca cert")).expect("add ca");
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    Arc::new(match cert {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(cert)
                    .expect("cert")
                    .collect::<Result<Vec<_>, _>>()
                    .expect("certs"),
                PrivateKeyDer::from_pem_file(key).expect("key"),
            )
            .expect("client auth"),
        None => builder.with_no_client_auth(),
    })
}

/// Connects to `server` over TLS (verifying it as `NAME`), sends an OPTIONS for the server
/// itself and returns what came back before the connection ended or 5 s passed: the
/// response, or the error that ended the session.
fn options_over_tls(
    server: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> Result<String, String> {
    let name = rustls::pki_types::ServerName::try_from(NAME).expect("name");
    let conn = rustls::ClientConnection::new(config, name).expect("client session");
    let sock = TcpStream::connect(server).expect("connect");
    sock.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let local = sock.local_addr().expect("local");
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let request = format!(
        "OPTIONS sip:{server};transport=tls SIP/2.0\r\nVia: SIP/2.0/TLS {local};branch=z9hG4bKtls1\r\n\
         Max-Forwards: 70\r\nTo: <sip:{server}>\r\nFrom: <sip:probe@127.0.0.1>;tag=t1\r\n\
         Call-ID: tls-probe-{}@127.0.0.1\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n",
        local.port()
    );
    tls.write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tls.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                if got.windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            Err(e) if got.is_empty() => return Err(e.to_string()),
            Err(_) => break,
        }
    }
    if got.is_empty() {
        return Err("closed without an answer".into());
    }
    Ok(String::from_utf8_lossy(&got).into_owned())
}

#[test]
fn verify_client_refuses_untrusted_and_missing_client_certificates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(dir.path());
    let (cert, key) = pki.leaf_files("server", &[NAME], true);
    let (good_cert, good_key) = pki.leaf_files("good", &["client.test.example"], true);
    let (bad_cert, bad_key) = pki.leaf_files("bad", &["client.test.example"], false);
    let (port, metrics) = (free_port(), free_port());
    let config = config_file(
        dir.path(),
        "s.toml",
        &format!(
            "[tls]\ncert_file = {}\nkey_file = {}\nca_file = {}\nverify_client = true\n",
            toml_path(&cert),
            toml_path(&key),
            toml_path(&dir.path().join("ca.pem"))
        ),
    );
    let _server = Holdline::start(&[
        "--config".into(),
        config,
        "--listen".into(),
        format!("tls:127.0.0.1:{port}"),
        "--store".into(),
        "memory".into(),
        "--metrics".into(),
        format!("127.0.0.1:{metrics}"),
        "--workers".into(),
        "1".into(),
    ]);
    let server = local(port);

    let untrusted = options_over_tls(server, client_config(&pki, Some((&bad_cert, &bad_key))));
    assert!(
        untrusted.is_err(),
        "untrusted client answered: {untrusted:?}"
    );
    let anonymous = options_over_tls(server, client_config(&pki, None));
    assert!(
        anonymous.is_err(),
        "client without certificate answered: {anonymous:?}"
    );
    let trusted = options_over_tls(server, client_config(&pki, Some((&good_cert, &good_key))))
        .expect("the trusted client is served");
    assert!(trusted.starts_with("SIP/2.0 200"), "{trusted}");

    let text = wait_metrics(local(metrics), Duration::from_secs(10), |t| {
        metric(
            t,
            "holdline_tls_handshakes_total",
            &["side=\"server\"", "result=\"failed\""],
        ) >= 2.0
    });
    assert!(
        metric(
            &text,
            "holdline_connections_closed_total",
            &["reason=\"tls_error\""]
        ) >= 2.0,
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            "holdline_tls_handshakes_total",
            &["side=\"server\"", "result=\"ok\""]
        ),
        1.0,
        "{text}"
    );
}

#[test]
fn a_tls_next_hop_with_the_wrong_name_fails_and_is_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(dir.path());
    let (cert, key) = pki.leaf_files("hop", &[NAME, "127.0.0.1"], true);
    let (a, b, a_metrics, b_metrics) = (free_port(), free_port(), free_port(), free_port());
    let b_config = config_file(
        dir.path(),
        "b.toml",
        &format!(
            "[tls]\ncert_file = {}\nkey_file = {}\n",
            toml_path(&cert),
            toml_path(&key)
        ),
    );
    let _b = Holdline::start(&[
        "--config".into(),
        b_config,
        "--listen".into(),
        format!("tls:127.0.0.1:{b}"),
        "--store".into(),
        "memory".into(),
        "--metrics".into(),
        format!("127.0.0.1:{b_metrics}"),
    ]);
    let a_config = config_file(
        dir.path(),
        "a.toml",
        &format!(
            "[tls]\nca_file = {}\n",
            toml_path(&dir.path().join("ca.pem"))
        ),
    );
    let _a = Holdline::start(&[
        "--config".into(),
        a_config,
        "--listen".into(),
        format!("udp:127.0.0.1:{a}"),
        "--route".into(),
        format!("*=tls:127.0.0.1:{b},server_name=other.test.example"),
        "--store".into(),
        "memory".into(),
        "--metrics".into(),
        format!("127.0.0.1:{a_metrics}"),
    ]);
    // An OPTIONS for a foreign domain from loopback (trusted): relayed by the route.
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let port = sock.local_addr().expect("addr").port();
    let request = format!(
        "OPTIONS sip:someone@foreign.example SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{port};branch=z9hG4bKwrong1\r\n\
         Max-Forwards: 70\r\nTo: <sip:someone@foreign.example>\r\nFrom: <sip:probe@127.0.0.1>;tag=w1\r\n\
         Call-ID: wrong-name@127.0.0.1\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
    );
    sock.send_to(request.as_bytes(), local(a)).expect("send");

    let am = wait_metrics(local(a_metrics), Duration::from_secs(10), |t| {
        metric(
            t,
            "holdline_tls_handshakes_total",
            &["side=\"client\"", "result=\"failed\""],
        ) >= 1.0
    });
    assert!(
        metric(
            &am,
            "holdline_connections_closed_total",
            &["reason=\"tls_error\""]
        ) >= 1.0,
        "{am}"
    );
    // The OPTIONS waited for the handshake and was lost with it.
    assert!(
        metric(&am, "holdline_drops_total", &["reason=\"connect_failed\""]) >= 1.0,
        "{am}"
    );
    assert_eq!(
        metric(&am, "holdline_messages_out_total", &["transport=\"tls\""]),
        1.0,
        "queued once, never sent: {am}"
    );
    assert_eq!(
        metric(&am, "holdline_tls_handshakes_total", &["result=\"ok\""]),
        0.0,
        "{am}"
    );
    // B saw the client give up (A's alert) and never got a message.
    let bm = wait_metrics(local(b_metrics), Duration::from_secs(10), |t| {
        metric(
            t,
            "holdline_tls_handshakes_total",
            &["side=\"server\"", "result=\"failed\""],
        ) >= 1.0
    });
    assert_eq!(
        metric(&bm, "holdline_messages_in_total", &["transport=\"tls\""]),
        0.0,
        "{bm}"
    );
}

/// A TLS next hop that completes the handshake and then reads nothing, with a 4 KiB receive
/// buffer: what is forwarded to it backs up in the kernel and in holdline's queue.
fn stalled_tls_next_hop(
    pki: &Pki,
) -> (
    u16,
    std::thread::JoinHandle<Option<rustls::StreamOwned<rustls::ServerConnection, TcpStream>>>,
) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use socket2::{Domain, Socket, Type};
    let (cert, key) = pki.leaf_files("stalled", &[NAME], true);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            CertificateDer::pem_file_iter(&cert)
                .expect("cert")
                .collect::<Result<Vec<_>, _>>()
                .expect("certs"),
            PrivateKeyDer::from_pem_file(&key).expect("key"),
        )
        .expect("server config");
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    s.set_recv_buffer_size(4096).expect("rcvbuf");
    s.bind(&local(0).into()).expect("bind");
    s.listen(4).expect("listen");
    let l: std::net::TcpListener = s.into();
    let port = l.local_addr().expect("addr").port();
    let held = std::thread::spawn(move || {
        let (sock, _) = l.accept().ok()?;
        sock.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        let mut tls =
            rustls::StreamOwned::new(rustls::ServerConnection::new(Arc::new(config)).ok()?, sock);
        while tls.conn.is_handshaking() {
            tls.conn.complete_io(&mut tls.sock).ok()?;
        }
        // Held, never read again.
        Some(tls)
    });
    (port, held)
}

#[test]
fn smart_forwarding_rejects_invites_to_a_backed_up_tls_next_hop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(dir.path());
    let (stalled, held) = stalled_tls_next_hop(&pki);
    let (proxy, metrics) = (free_port(), free_port());
    let config = config_file(
        dir.path(),
        "a.toml",
        &format!(
            "[tls]\nca_file = {}\n",
            toml_path(&dir.path().join("ca.pem"))
        ),
    );
    let server = Holdline::start(&[
        "--config".into(),
        config,
        "--listen".into(),
        format!("udp:127.0.0.1:{proxy}"),
        "--route".into(),
        format!("*=tls:127.0.0.1:{stalled},server_name={NAME}"),
        "--store".into(),
        "memory".into(),
        "--workers".into(),
        "1".into(),
        "--metrics".into(),
        format!("127.0.0.1:{metrics}"),
        "--smart-forwarding".into(),
        "ics".into(),
    ]);
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let port = sock.local_addr().expect("addr").port();
    // Bounded waits for an answer between INVITEs: the loop ends at the first 503.
    sock.set_read_timeout(Some(Duration::from_millis(3)))
        .expect("timeout");
    let body = "v=0\r\n".repeat(300);
    let mut buf = vec![0u8; 65_535];
    let mut rejected = None;
    for i in 0..900 {
        let invite = format!(
            "INVITE sip:callee@far.example SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{port};branch=z9hG4bKsf{i}\r\n\
             Max-Forwards: 70\r\nTo: <sip:callee@far.example>\r\nFrom: <sip:caller@127.0.0.1>;tag=sf{i}\r\n\
             Call-ID: sf-{i}@127.0.0.1\r\nCSeq: 1 INVITE\r\nContact: <sip:caller@127.0.0.1:{port}>\r\n\
             Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        sock.send_to(invite.as_bytes(), local(proxy)).expect("send");
        while let Ok((n, _)) = sock.recv_from(&mut buf) {
            if buf[..n].starts_with(b"SIP/2.0 503") {
                rejected = Some(i);
            }
        }
        if rejected.is_some() {
            break;
        }
    }
    let m = common::scrape(local(metrics));
    let i = rejected.unwrap_or_else(|| panic!("no 503 for 900 INVITEs:\n{m}"));
    assert!(i > 3, "rejected from the start ({i}): {m}");
    assert!(
        metric(
            &m,
            "holdline_forward_rejected_total",
            &["reason=\"target_backlog\""]
        ) >= 1.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "holdline_tls_handshakes_total",
            &["side=\"client\"", "result=\"ok\""]
        ),
        1.0,
        "{m}"
    );
    drop(server);
    let _ = held.join();
}
