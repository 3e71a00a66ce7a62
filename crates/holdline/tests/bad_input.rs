//! Robustness against malformed and hostile input, end to end against `holdline serve`.
//!
//! * The corpus `tests/corpus/malformed/*.sip` (one message per file) goes to holdline over
//!   UDP while SIPp's `uac` → holdline → SIPp's `uas` run is in progress; every file has an
//!   expected outcome (below): a response with a given status and reason phrase, a counted
//!   drop, or nothing (keep-alives). The SIPp run must have no failed call and no unexpected
//!   message.
//! * The same corpus over TCP, one connection per message: a malformed message whose framing
//!   is intact is answered on its connection, which stays usable; framing-breaking input
//!   closes the connection (counted); a connection held open meanwhile is unaffected.
//! * Hostile TCP peers (garbage, a half message that stalls, more connections than
//!   `limits.max_connections`) while a SIPp TCP call run goes through the same holdline.
//!
//! Every process is started here, bounded (`-m`, `-timeout`) and stopped by its PID. Set
//! `HOLDLINE_SKIP_SIPP=1` to skip the SIPp parts (the TCP corpus test does not need SIPp).

mod common;

use std::collections::BTreeSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{
    Background, Holdline, assert_uac_ok, free_port, metric, scrape, sipp_available, sipp_lock,
    start_uas, uac_command, wait_metrics,
};

const WAIT: Duration = Duration::from_secs(5);
const CALLS: u64 = 3_000;
const RATE: u64 = 300;

/// What holdline does with a corpus message sent as one UDP datagram.
#[derive(Clone, Copy, Debug)]
enum Udp {
    /// A response with this status, whose reason phrase contains this text.
    Answer(u16, &'static str),
    /// No response; counted in `holdline_sip_drops_total`.
    Drop,
    /// No response and no count: a keep-alive (empty or CR/LF only).
    Ignored,
    /// Too large for a UDP datagram: the sender's OS refuses it.
    Unsendable,
}

/// What holdline does with a corpus message written on its own TCP connection.
#[derive(Clone, Copy, Debug)]
enum Tcp {
    /// Answered on the connection, which stays usable (a probe after it gets its 200).
    Answer(u16, &'static str),
    /// Framing intact but not answerable: no response, the connection stays usable.
    Drop,
    /// Framing broken (size, line length): no response, the connection is closed and
    /// counted as `holdline_connections_closed_total{reason="framing_error"}`.
    Close,
    /// Framing broken by a bad Content-Length with the header section whole: answered, then
    /// closed and counted like `Close`.
    AnswerClose(u16, &'static str),
    /// An incomplete frame: holdline waits for the rest; after our FIN it closes quietly.
    Waits,
    /// CRLF CRLF pings: answered with CRLF pongs (RFC 5626), then the probe.
    Pong,
    /// Nothing to send (the empty file): the probe is answered.
    Nothing,
}

struct Case {
    file: &'static str,
    udp: Udp,
    tcp: Tcp,
}

const fn case(file: &'static str, udp: Udp, tcp: Tcp) -> Case {
    Case { file, udp, tcp }
}

const fn both(file: &'static str, code: u16, reason: &'static str) -> Case {
    case(file, Udp::Answer(code, reason), Tcp::Answer(code, reason))
}

/// The expected outcome of every corpus file.
const CASES: &[Case] = &[
    // Mandatory headers and CSeq (RFC 3261 §8.1.1, §16.3 step 1).
    both("missing_via", 400, "Missing Via"),
    both("missing_from", 400, "Missing From"),
    both("missing_to", 400, "Missing To"),
    both("missing_call_id", 400, "Missing Call-ID"),
    both("missing_cseq", 400, "Missing CSeq"),
    both("cseq_not_a_number", 400, "Bad CSeq"),
    both("cseq_method_mismatch", 400, "Bad CSeq"),
    both("cseq_no_method", 400, "Bad CSeq"),
    both("max_forwards_not_a_number", 400, "Bad Max-Forwards"),
    both("via_garbage", 400, "Bad Via"),
    both("call_id_invalid", 400, "Bad Call-ID"),
    both("from_unterminated_display_name", 400, "Bad From"),
    both("to_unterminated_angle", 400, "Bad To"),
    both("ruri_scheme_only", 400, "Bad Request-URI"),
    both("ruri_unterminated_ipv6", 400, "Bad Request-URI"),
    // Content-Length: over UDP the request is answered; over TCP it breaks the framing, so
    // the answer is followed by a close.
    case(
        "content_length_negative",
        Udp::Answer(400, "Bad Content-Length"),
        Tcp::AnswerClose(400, "Bad Content-Length"),
    ),
    case(
        "content_length_huge",
        Udp::Answer(400, "Bad Content-Length"),
        Tcp::AnswerClose(400, "Bad Content-Length"),
    ),
    case(
        "content_length_not_a_number",
        Udp::Answer(400, "Bad Content-Length"),
        Tcp::AnswerClose(400, "Bad Content-Length"),
    ),
    case(
        "content_length_duplicate_different",
        Udp::Answer(400, "Bad Content-Length"),
        Tcp::AnswerClose(400, "Bad Content-Length"),
    ),
    case(
        "content_length_exceeds_datagram",
        Udp::Answer(400, "Content-Length Exceeds Body"),
        Tcp::Waits,
    ),
    // Header section syntax: the request line and the headers a response needs are sound.
    both("nul_in_header", 400, "NUL Byte"),
    // `Subject hello world`: a token, blanks, then no colon; read as a bad name.
    both("header_without_colon", 400, "Bad Header Name"),
    both("header_name_only", 400, "Header Without Colon"),
    both("header_name_invalid_chars", 400, "Bad Header Name"),
    both("folded_line_before_any_header", 400, "Bad Header Name"),
    both("too_many_headers_200", 400, "Too Many Headers"),
    both("header_line_9k", 400, "Header Line Too Long"),
    // Versions: a well-formed other version is 505 (RFC 3261 §21.5.7).
    both("request_sip_3_0", 505, "Version Not Supported"),
    case("request_bad_version", Udp::Drop, Tcp::Drop),
    case("response_sip_3_0", Udp::Drop, Tcp::Drop),
    // Start lines that cannot be read as a request: nothing to answer.
    case("start_line_method_only", Udp::Drop, Tcp::Drop),
    case("start_line_no_version", Udp::Drop, Tcp::Drop),
    case("start_line_http", Udp::Drop, Tcp::Drop),
    case("ruri_with_spaces", Udp::Drop, Tcp::Drop),
    case("status_code_two_digits", Udp::Drop, Tcp::Drop),
    // Messages that are never answered.
    case("ack_missing_call_id", Udp::Drop, Tcp::Drop),
    case("response_without_via", Udp::Drop, Tcp::Drop),
    case("binary_garbage", Udp::Drop, Tcp::Waits),
    case("oversize_70k", Udp::Unsendable, Tcp::Close),
    // Valid after all: non-UTF-8 bytes where the grammar allows any octet, bare LF.
    both("non_utf8_display_name", 200, "OK"),
    both("non_utf8_header_value", 200, "OK"),
    both("non_utf8_body", 200, "OK"),
    both("bare_lf_line_ends", 200, "OK"),
    // Keep-alives.
    case("empty", Udp::Ignored, Tcp::Nothing),
    case("only_crlfs", Udp::Ignored, Tcp::Pong),
];

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/malformed")
}

fn load(file: &str) -> Vec<u8> {
    let p = corpus_dir().join(format!("{file}.sip"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The Call-ID the corpus file carries (`<name>@corpus.test`), if it carries it.
fn call_id_of(file: &str, bytes: &[u8]) -> Option<String> {
    let cid = format!("{file}@corpus.test");
    bytes
        .windows(cid.len())
        .any(|w| w == cid.as_bytes())
        .then_some(cid)
}

/// An OPTIONS to the served domain (answered 200 by holdline itself).
fn probe(call_id: &str, n: u32) -> Vec<u8> {
    format!(
        "OPTIONS sip:example.test SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5999;rport;branch=z9hG4bKprobe{n}\r\n\
         Max-Forwards: 70\r\nTo: <sip:example.test>\r\nFrom: <sip:probe@example.test>;tag=p{n}\r\n\
         Call-ID: {call_id}\r\nCSeq: {n} OPTIONS\r\nContent-Length: 0\r\n\r\n"
    )
    .into_bytes()
}

/// Checks a response's status line and, when given, its Call-ID.
fn check_response(what: &str, text: &str, code: u16, reason: &str, call_id: Option<&str>) {
    let first = text.lines().next().unwrap_or_default();
    let want = format!("SIP/2.0 {code} ");
    assert!(
        first.starts_with(&want) && first[want.len()..].contains(reason),
        "{what}: expected {code} …{reason}…, got:\n{text}"
    );
    if let Some(cid) = call_id {
        assert!(
            text.contains(&format!("Call-ID: {cid}\r\n")),
            "{what}: response for another call:\n{text}"
        );
    }
}

fn is_request_drop(text: &str) -> f64 {
    ["Unparsable", "Malformed", "StrayResponse"]
        .iter()
        .map(|r| {
            metric(
                text,
                "holdline_sip_drops_total",
                &[&format!("reason=\"{r}\"")],
            )
        })
        .sum()
}

fn metrics_port() -> (u16, SocketAddr) {
    let p = free_port();
    (p, format!("127.0.0.1:{p}").parse().expect("addr"))
}

/// Waits until the SIPp run has sent INVITEs through holdline.
fn wait_calls_flowing(metrics: SocketAddr) {
    wait_metrics(metrics, Duration::from_secs(20), |t| {
        metric(t, "holdline_sip_requests_in_total", &["method=\"INVITE\""]) >= 50.0
    });
}

#[test]
fn corpus_has_an_expectation_for_every_file() {
    let files: BTreeSet<String> = std::fs::read_dir(corpus_dir())
        .expect("corpus dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter_map(|n| n.strip_suffix(".sip").map(str::to_owned))
        .collect();
    let cases: BTreeSet<String> = CASES.iter().map(|c| c.file.to_owned()).collect();
    assert_eq!(files, cases, "corpus files and expectations differ");
    assert_eq!(cases.len(), CASES.len(), "a file is listed twice");
    assert!(files.len() >= 30);
}

#[test]
fn malformed_corpus_over_udp_during_a_sipp_run() {
    if !sipp_available() {
        return;
    }
    let _one_run_at_a_time = sipp_lock();
    let proxy = free_port();
    let uas = free_port();
    let uac = free_port();
    let (mport, metrics) = metrics_port();
    let dir = tempfile::tempdir().expect("tempdir");
    let _holdline = Holdline::start(&[
        "--listen".into(),
        format!("udp:127.0.0.1:{proxy}"),
        "--route".into(),
        format!("*=udp:127.0.0.1:{uas}"),
        "--domain".into(),
        "example.test".into(),
        "--store".into(),
        "memory".into(),
        "--workers".into(),
        "2".into(),
        "--metrics".into(),
        format!("127.0.0.1:{mport}"),
    ]);
    let _uas = start_uas(dir.path(), uas, "u1");
    let target: SocketAddr = format!("127.0.0.1:{proxy}").parse().expect("addr");
    let run = Background::spawn(uac_command(dir.path(), target, uac, "u1", RATE, CALLS));
    wait_calls_flowing(metrics);
    let before = scrape(metrics);

    // Keep-alives first, so that anything they could provoke would arrive before the
    // probes' answers.
    let mut order: Vec<&Case> = CASES
        .iter()
        .filter(|c| matches!(c.udp, Udp::Ignored))
        .collect();
    order.extend(CASES.iter().filter(|c| !matches!(c.udp, Udp::Ignored)));
    let mut silent: Vec<(&str, UdpSocket)> = Vec::new();
    let mut drops = 0.0;
    let mut answered = 0.0;
    for (n, c) in order.into_iter().enumerate() {
        let bytes = load(c.file);
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
        sock.set_read_timeout(Some(WAIT)).expect("timeout");
        let sent = sock.send_to(&bytes, target);
        let mut buf = vec![0u8; 65_536];
        let mut recv = |what: &str| -> String {
            let (len, _) = sock
                .recv_from(&mut buf)
                .unwrap_or_else(|e| panic!("{}: no response to {what}: {e}", c.file));
            String::from_utf8_lossy(&buf[..len]).into_owned()
        };
        let cid = call_id_of(c.file, &bytes);
        match c.udp {
            Udp::Unsendable => {
                let e = sent.expect_err("a datagram over 64 KiB");
                assert_eq!(e.raw_os_error(), Some(90), "{}: {e}", c.file); // EMSGSIZE
                continue;
            }
            Udp::Answer(code, reason) => {
                sent.expect("send");
                answered += f64::from(u8::from(code != 200));
                let text = recv("the message");
                check_response(c.file, &text, code, reason, cid.as_deref());
                continue;
            }
            Udp::Drop => drops += 1.0,
            Udp::Ignored => {}
        }
        sent.expect("send");
        // A probe on the same socket (same Call-ID, so the same owning worker) is the first
        // thing answered.
        let pcid = cid.unwrap_or_else(|| format!("probe-{}@corpus.test", c.file));
        sock.send_to(&probe(&pcid, n as u32 + 1), target)
            .expect("send probe");
        let text = recv("the probe");
        check_response(c.file, &text, 200, "OK", Some(&pcid));
        assert!(text.contains("tag=p"), "{}: not the probe's answer", c.file);
        silent.push((c.file, sock));
    }
    // Every drop is counted; once the counters show them, anything the server sent for
    // them would already be in our sockets.
    let base_drops = is_request_drop(&before);
    let base_errors = metric(&before, "holdline_sip_parse_errors_total", &[]);
    let after = wait_metrics(metrics, WAIT, |t| is_request_drop(t) >= base_drops + drops);
    assert_eq!(is_request_drop(&after), base_drops + drops, "{after}");
    assert!(
        metric(&after, "holdline_sip_parse_errors_total", &[]) >= base_errors + answered,
        "{after}"
    );
    for (file, sock) in silent {
        sock.set_nonblocking(true).expect("nonblocking");
        let mut buf = [0u8; 2048];
        match sock.recv_from(&mut buf) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            other => panic!(
                "{file}: unexpected datagram {:?}",
                other.map(|(n, _)| String::from_utf8_lossy(&buf[..n]).into_owned())
            ),
        }
    }
    let status = run.finish(Duration::from_secs(60));
    assert_uac_ok(dir.path(), CALLS, status, "udp with malformed corpus");
}

/// A TCP client that reads SIP responses (skipping CRLF pongs, which it counts).
struct Client {
    s: TcpStream,
    buf: Vec<u8>,
    pongs: usize,
}

impl Client {
    fn connect(addr: SocketAddr) -> Self {
        let s = TcpStream::connect_timeout(&addr, WAIT).expect("connect");
        s.set_read_timeout(Some(WAIT)).expect("timeout");
        Self {
            s,
            buf: Vec::new(),
            pongs: 0,
        }
    }

    fn response(&mut self, what: &str) -> String {
        loop {
            while self.buf.starts_with(b"\r\n") {
                self.buf.drain(..2);
                self.pongs += 1;
            }
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head: Vec<u8> = self.buf.drain(..end + 4).collect();
                return String::from_utf8_lossy(&head).into_owned();
            }
            let mut chunk = [0u8; 4096];
            match self.s.read(&mut chunk) {
                Ok(0) => panic!("{what}: connection closed before a response"),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) => panic!("{what}: no response: {e}"),
            }
        }
    }

    /// Reads until the server closes; returns what arrived.
    fn until_closed(&mut self, what: &str) -> Vec<u8> {
        let deadline = Instant::now() + WAIT;
        let mut chunk = [0u8; 4096];
        loop {
            assert!(Instant::now() < deadline, "{what}: not closed");
            match self.s.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
                Err(e) => panic!("{what}: not closed: {e}"),
            }
        }
        std::mem::take(&mut self.buf)
    }
}

#[test]
fn malformed_corpus_over_tcp_one_connection_each() {
    let proxy = free_port();
    let (mport, metrics) = metrics_port();
    let _holdline = Holdline::start(&[
        "--listen".into(),
        format!("tcp:127.0.0.1:{proxy}"),
        "--domain".into(),
        "example.test".into(),
        "--store".into(),
        "memory".into(),
        "--workers".into(),
        "2".into(),
        "--metrics".into(),
        format!("127.0.0.1:{mport}"),
    ]);
    let target: SocketAddr = format!("127.0.0.1:{proxy}").parse().expect("addr");
    // A bystander connection, open throughout.
    let mut bystander = Client::connect(target);
    bystander
        .s
        .write_all(&probe("bystander@corpus.test", 1))
        .expect("write");
    let text = bystander.response("bystander");
    check_response("bystander", &text, 200, "OK", Some("bystander@corpus.test"));
    let before = scrape(metrics);

    let (mut closes, mut eofs) = (0.0, 0.0);
    for (n, c) in CASES.iter().enumerate() {
        let n = n as u32 + 2;
        let bytes = load(c.file);
        let cid = call_id_of(c.file, &bytes);
        let pcid = cid
            .clone()
            .unwrap_or_else(|| format!("probe-{}@corpus.test", c.file));
        let mut cl = Client::connect(target);
        // A write may fail once the server has closed on bad framing (oversize input).
        let wrote = cl.s.write_all(&bytes);
        match c.tcp {
            Tcp::Answer(code, reason) => {
                wrote.expect("write");
                let text = cl.response(c.file);
                check_response(c.file, &text, code, reason, cid.as_deref());
            }
            Tcp::Drop | Tcp::Pong | Tcp::Nothing => wrote.expect("write"),
            Tcp::AnswerClose(code, reason) => {
                closes += 1.0;
                wrote.expect("write");
                let text = cl.response(c.file);
                check_response(c.file, &text, code, reason, cid.as_deref());
                let got = cl.until_closed(c.file);
                assert!(
                    got.is_empty(),
                    "{}: {}",
                    c.file,
                    String::from_utf8_lossy(&got)
                );
                continue;
            }
            Tcp::Close => {
                closes += 1.0;
                let got = cl.until_closed(c.file);
                assert!(
                    got.is_empty(),
                    "{}: {}",
                    c.file,
                    String::from_utf8_lossy(&got)
                );
                continue;
            }
            Tcp::Waits => {
                wrote.expect("write");
                eofs += 1.0;
                cl.s.shutdown(Shutdown::Write).expect("shutdown");
                let got = cl.until_closed(c.file);
                assert!(
                    got.is_empty(),
                    "{}: {}",
                    c.file,
                    String::from_utf8_lossy(&got)
                );
                continue;
            }
        }
        // The connection still works, and nothing came before the probe's answer.
        cl.s.write_all(&probe(&pcid, n)).expect("write probe");
        let text = cl.response(c.file);
        check_response(c.file, &text, 200, "OK", Some(&pcid));
        assert!(
            text.contains(&format!("tag=p{n}")),
            "{}: not the probe's answer:\n{text}",
            c.file
        );
        match c.tcp {
            Tcp::Pong => assert!(cl.pongs >= 1, "{}: no pong", c.file),
            _ => assert_eq!(cl.pongs, 0, "{}", c.file),
        }
    }
    let framing = |t: &str| {
        metric(
            t,
            "holdline_connections_closed_total",
            &["reason=\"framing_error\""],
        )
    };
    let eof = |t: &str| metric(t, "holdline_connections_closed_total", &["reason=\"eof\""]);
    let after = wait_metrics(metrics, WAIT, |t| {
        framing(t) >= framing(&before) + closes && eof(t) >= eof(&before) + eofs
    });
    assert_eq!(framing(&after), framing(&before) + closes, "{after}");
    // The bystander is unaffected.
    bystander
        .s
        .write_all(&probe("bystander@corpus.test", 9999))
        .expect("write");
    let text = bystander.response("bystander after the corpus");
    check_response("bystander", &text, 200, "OK", Some("bystander@corpus.test"));
}

#[test]
fn hostile_tcp_peers_during_a_sipp_tcp_run() {
    if !sipp_available() {
        return;
    }
    let _one_run_at_a_time = sipp_lock();
    const MAX_CONNECTIONS: usize = 32;
    let proxy = free_port();
    let uas = free_port();
    let uac = free_port();
    let (mport, metrics) = metrics_port();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("holdline.toml");
    std::fs::write(
        &config,
        format!(
            "listen = [\"tcp:127.0.0.1:{proxy}\"]\nworkers = 2\nstore = \"memory\"\n\
             metrics = \"127.0.0.1:{mport}\"\n\n[limits]\nmax_connections = {MAX_CONNECTIONS}\n\n\
             [[routes]]\ndomain = \"*\"\ntarget = \"tcp:127.0.0.1:{uas}\"\n"
        ),
    )
    .expect("write config");
    let _holdline = Holdline::start(&["--config".into(), config.display().to_string()]);
    let _uas = start_uas(dir.path(), uas, "t1");
    let target: SocketAddr = format!("127.0.0.1:{proxy}").parse().expect("addr");
    let run = Background::spawn(uac_command(dir.path(), target, uac, "t1", RATE, CALLS));
    wait_calls_flowing(metrics);
    let before = scrape(metrics);
    let closed = |t: &str, why: &str| {
        metric(
            t,
            "holdline_connections_closed_total",
            &[&format!("reason=\"{why}\"")],
        )
    };

    // 1. Garbage without a line end: the line limit breaks the framing; closed.
    let mut garbage = Client::connect(target);
    let junk: Vec<u8> = (0..20_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 | 0x80)
        .collect();
    let _ = garbage.s.write_all(&junk);
    let got = garbage.until_closed("garbage peer");
    assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));

    // 2. Half a message, then silence: held open, harmless.
    let mut stall = Client::connect(target);
    stall
        .s
        .write_all(
            b"INVITE sip:stall@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.1:9;branch=z9hG4bKst\r\nFrom: <sip:",
        )
        .expect("write half");
    wait_metrics(metrics, WAIT, |t| {
        metric(t, "holdline_connections_accepted_total", &[])
            >= metric(&before, "holdline_connections_accepted_total", &[]) + 2.0
    });

    // 3. More idle connections than the limit: the excess is accepted and closed at once.
    let flood: Vec<TcpStream> = (0..MAX_CONNECTIONS + 20)
        .map(|_| TcpStream::connect_timeout(&target, WAIT).expect("connect"))
        .collect();
    for s in &flood {
        s.set_nonblocking(true).expect("nonblocking");
    }
    let refused_now = |flood: &[TcpStream]| {
        flood
            .iter()
            .filter(|s| {
                let mut b = [0u8; 1];
                matches!(s.peek(&mut b), Ok(0))
                    || matches!(s.peek(&mut b), Err(e) if e.kind() == ErrorKind::ConnectionReset)
            })
            .count()
    };
    let refused_metric = wait_metrics(metrics, WAIT, |t| {
        closed(t, "max_connections") >= closed(&before, "max_connections") + 20.0
    });
    // The metric and the sockets' view are read at different moments: poll (bounded) until
    // they agree.
    let deadline = Instant::now() + WAIT;
    let mut want =
        (closed(&refused_metric, "max_connections") - closed(&before, "max_connections")) as usize;
    let mut refused = refused_now(&flood);
    while refused != want && Instant::now() < deadline {
        std::thread::yield_now();
        refused = refused_now(&flood);
        want = (closed(&scrape(metrics), "max_connections") - closed(&before, "max_connections"))
            as usize;
    }
    assert!(
        refused >= 20,
        "only {refused} connections over the limit were refused"
    );
    assert_eq!(refused, want, "refused connections and the metric differ");

    // The stalled peer is still connected (nothing to read, no EOF).
    stall.s.set_nonblocking(true).expect("nonblocking");
    let mut b = [0u8; 1];
    assert!(
        matches!(stall.s.peek(&mut b), Err(e) if e.kind() == ErrorKind::WouldBlock),
        "the stalled peer was disconnected"
    );

    let status = run.finish(Duration::from_secs(60));
    assert_uac_ok(dir.path(), CALLS, status, "tcp with hostile peers");
    let after = scrape(metrics);
    assert!(
        closed(&after, "framing_error") > closed(&before, "framing_error"),
        "{after}"
    );
    assert!(
        closed(&after, "max_connections") >= closed(&before, "max_connections") + 20.0,
        "{after}"
    );
    drop(flood);
}
