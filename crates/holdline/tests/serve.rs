//! `holdline serve` as a process: `--check-config` diagnostics and graceful SIGTERM.
#![allow(missing_docs, clippy::unwrap_used)]

use std::net::UdpSocket;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

mod common;

use common::BIN;

fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("holdline-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn check(text: &str, name: &str) -> (bool, String) {
    let file = temp_file(name, text);
    let out = Command::new(BIN)
        .args(["serve", "--check-config"])
        .arg(&file)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    let msg =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    (
        out.status.success(),
        msg.replace(&file.display().to_string(), "FILE"),
    )
}

#[test]
fn check_config_names_file_line_and_key() {
    let (ok, msg) = check(
        "workers = 2\n\n[limits]\nmax_conections = 5\n",
        "unknown.toml",
    );
    assert!(!ok);
    assert!(
        msg.starts_with("FILE:4: key `limits.max_conections`: unknown field"),
        "{msg}"
    );
    let (ok, msg) = check(
        "listen = [\"udp:127.0.0.1:5060\"]\nworkers = \"many\"\n",
        "bad.toml",
    );
    assert!(!ok);
    assert!(
        msg.starts_with("FILE:2: key `workers`: invalid type"),
        "{msg}"
    );
    let (ok, msg) = check(
        "[timers]\nt1_ms = 100\n[limits]\nidle_timeout_ms = 0\n",
        "invalid.toml",
    );
    assert!(!ok);
    assert!(
        msg.starts_with("FILE:4: key `limits.idle_timeout_ms`"),
        "{msg}"
    );
    let (ok, msg) = check("workers = 2\nstore = \"memory\"\n", "good.toml");
    assert!(ok, "{msg}");
}

#[test]
fn serve_answers_and_exits_zero_on_sigterm() {
    // `Holdline` stops the server by PID if an assertion fails first.
    let server = common::Holdline::start(
        &[
            "--listen",
            "udp:127.0.0.1:0",
            "--listen",
            "tcp:127.0.0.1:0",
            "--store",
            "memory",
            "--workers",
            "2",
            "--domain",
            "example.test",
        ]
        .map(String::from),
    );
    assert!(
        server.startup.contains("holdline: store in memory"),
        "{}",
        server.startup
    );
    let udp = server.udp_addr();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let port = udp.port();
    // A health probe addressed to the server itself.
    let req = format!(
        "OPTIONS sip:127.0.0.1:{port} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:1;rport;branch=z9hG4bK1\r\n\
         Max-Forwards: 70\r\nTo: <sip:127.0.0.1:{port}>\r\nFrom: <sip:y@127.0.0.1>;tag=1\r\n\
         Call-ID: sig@t\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
    );
    client.send_to(req.as_bytes(), udp).unwrap();
    let mut buf = [0; 4096];
    let (n, _) = client.recv_from(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(text.starts_with("SIP/2.0 200 OK"), "{text}");
    assert!(text.contains("Call-ID: sig@t"), "{text}");
    // A REGISTER for the served domain goes to the registrar, which lists the binding.
    let reg = "REGISTER sip:example.test SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:1;rport;branch=z9hG4bK2\r\n\
         Max-Forwards: 70\r\nTo: <sip:alice@example.test>\r\nFrom: <sip:alice@example.test>;tag=2\r\n\
         Call-ID: reg@t\r\nCSeq: 1 REGISTER\r\nContact: <sip:alice@127.0.0.1:9>;expires=600\r\n\
         Content-Length: 0\r\n\r\n";
    client.send_to(reg.as_bytes(), udp).unwrap();
    let (n, _) = client.recv_from(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(text.starts_with("SIP/2.0 200 OK"), "{text}");
    assert!(text.contains("<sip:alice@127.0.0.1:9>;expires="), "{text}");

    let (status, rest) = server.terminate();
    assert!(status.success(), "exit status {status:?}\n{rest}");
}

/// One UDP worker with `/metrics` and an emulated cost per message (`extra` flags added):
/// the server and its metrics address.
fn emulated_server(cost_us: u32, extra: &[&str]) -> (common::Holdline, std::net::SocketAddr) {
    let metrics = common::free_port();
    let mut args = vec![
        "--listen=udp:127.0.0.1:0".to_string(),
        format!("--metrics=127.0.0.1:{metrics}"),
        "--store=memory".into(),
        "--workers=1".into(),
        format!("--emulate-cost-us={cost_us}"),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let server = common::Holdline::start(&args);
    (
        server,
        std::net::SocketAddr::from(([127, 0, 0, 1], metrics)),
    )
}

/// An OPTIONS to `port`, its branch, tag and Call-ID made from `id`.
fn options_request(port: u16, id: &str) -> String {
    format!(
        "OPTIONS sip:x@127.0.0.1:{port} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:1;rport;branch=z9hG4bKd{id}\r\n\
         Max-Forwards: 70\r\nTo: <sip:x@127.0.0.1>\r\nFrom: <sip:y@127.0.0.1>;tag={id}\r\n\
         Call-ID: drop{id}@t\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"
    )
}

/// What the kernel sheds is counted: a server with a tiny UDP receive buffer and an
/// emulated 20 ms per message gets 2,000 OPTIONS at once; most never reach it, and every
/// one is accounted for, read (`holdline_messages_in_total`) or dropped by the kernel on the
/// server's socket (`holdline_udp_kernel_drops_total`, from /proc/net/udp).
#[test]
fn datagrams_the_kernel_drops_on_our_sockets_are_counted() {
    let (server, metrics) = emulated_server(20_000, &["--udp-recv-buffer=4096"]);
    let udp = server.udp_addr();
    let client = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let sent = 2_000u32;
    for i in 0..sent {
        let req = options_request(udp.port(), &i.to_string());
        client.send_to(req.as_bytes(), udp).expect("send");
    }
    let text = common::wait_metrics(metrics, Duration::from_secs(30), |m| {
        let read = common::metric(m, "holdline_messages_in_total", &["transport=\"udp\""]);
        let dropped = common::metric(m, "holdline_udp_kernel_drops_total", &[]);
        read + dropped >= f64::from(sent)
    });
    let dropped = common::metric(&text, "holdline_udp_kernel_drops_total", &[]);
    let read = common::metric(&text, "holdline_messages_in_total", &["transport=\"udp\""]);
    assert!(
        dropped > f64::from(sent) / 2.0,
        "dropped {dropped}, read {read}"
    );
    assert_eq!(
        read + dropped,
        f64::from(sent),
        "every datagram accounted for"
    );
    drop(server);
}

/// A scrape while a worker is busy past the wait (250 ms) gets that worker's protocol-core
/// lines as they were last rendered, and says how old they are: an emulated 1 s per message
/// keeps the worker on one OPTIONS while the scrape waits.
#[test]
fn a_busy_workers_core_lines_come_with_their_age() {
    let (server, metrics) = emulated_server(1_000_000, &[]);
    let age = |text: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with("holdline_core_metrics_age_seconds{worker=\"0\"}"))
            .unwrap_or_else(|| panic!("no age line:\n{text}"));
        line.rsplit_once(' ')
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or_else(|| panic!("{line}"))
    };
    let options = |m: &str| common::metric(m, "holdline_sip_requests_in_total", &["OPTIONS"]);
    // Idle: rendered for this answer.
    let idle = common::scrape(metrics);
    assert!(age(&idle) < 0.2, "{}", age(&idle));
    assert_eq!(options(&idle), 0.0);

    let udp = server.udp_addr();
    let client = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let req = options_request(udp.port(), "age");
    client.send_to(req.as_bytes(), udp).expect("send");
    // The first answer that counts the datagram read started after the read: the worker is
    // on it for 1 s, so its core lines are the old ones, at least the wait old.
    let busy = common::wait_metrics(metrics, Duration::from_secs(10), |m| {
        common::metric(m, "holdline_messages_in_total", &["transport=\"udp\""]) >= 1.0
    });
    assert_eq!(
        options(&busy),
        0.0,
        "stale lines: the OPTIONS not yet counted"
    );
    assert!(age(&busy) >= 0.25, "age {}", age(&busy));
    // Done with it: fresh lines again, the OPTIONS counted.
    let after = common::wait_metrics(metrics, Duration::from_secs(10), |m| options(m) >= 1.0);
    assert!(age(&after) < 0.2, "{}", age(&after));
    drop(server);
}

/// The ready-made configurations shipped in `ops/` (the S_n P_m files of docs/scaling.md)
/// are valid: a key renamed in the server without updating them fails here.
#[test]
fn shipped_configurations_pass_check_config() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../ops/scaling");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    for f in files {
        let out = Command::new(BIN)
            .args(["serve", "--check-config"])
            .arg(&f)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            f.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `--log-format json` (the file's `log_format`): every log line on stderr is one JSON object
/// with a timestamp, a level and the event's fields — the ready event among them — while
/// the default stays text; an unknown format is refused before the server starts.
#[test]
fn logs_are_json_lines_when_asked() {
    let args = |format: &str| {
        [
            "--listen",
            "udp:127.0.0.1:0",
            "--store",
            "memory",
            "--workers",
            "1",
            "--log-format",
            format,
        ]
        .map(String::from)
    };
    let json_lines = |text: &str| -> Vec<serde_json::Value> {
        text.lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    };
    let run = |format: &str| {
        let server = common::Holdline::start(&args(format));
        let startup = server.startup.clone();
        let (status, rest) = server.terminate();
        assert!(status.success(), "exit status {status:?}\n{startup}{rest}");
        format!("{startup}{rest}")
    };
    let rest = run("json");
    let events = json_lines(&rest);
    let ready = events
        .iter()
        .find(|e| {
            e["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("ready"))
        })
        .unwrap_or_else(|| panic!("no JSON ready event in:\n{rest}"));
    assert_eq!(ready["level"], "INFO", "{ready}");
    assert!(ready["timestamp"].is_string(), "{ready}");
    // Every tracing line is JSON: the only other lines are the plain `holdline: ...` notes.
    for line in rest.lines().filter(|l| !l.starts_with('{')) {
        assert!(line.starts_with("holdline: ") || line.is_empty(), "{line}");
    }

    let rest = run("text");
    assert!(json_lines(&rest).is_empty(), "{rest}");
    assert!(rest.contains("ready; SIGINT"), "{rest}");

    let out = Command::new(BIN)
        .arg("serve")
        .args(args("xml"))
        .output()
        .expect("run holdline serve");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("log_format"), "{err}");
}

/// The kernel's `THP_enabled` flag of process `pid` (`/proc/PID/status`, Linux ≥ 5.0).
fn thp_enabled(pid: u32) -> Option<bool> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let v = status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))?;
    Some(v.trim() == "1")
}

/// `holdline serve` asks the kernel for no transparent huge pages unless
/// `limits.transparent_huge_pages` is on (a first touch of a huge page zeroes 2 MiB inside a
/// worker's step: docs/registrar.md).
#[test]
fn serve_turns_transparent_huge_pages_off_unless_configured() {
    if thp_enabled(std::process::id()).is_none() {
        eprintln!("skipped: this kernel has no THP_enabled in /proc/PID/status");
        return;
    }
    let args = |extra: &[&str]| {
        [
            "--listen",
            "udp:127.0.0.1:0",
            "--store",
            "memory",
            "--workers",
            "1",
        ]
        .iter()
        .chain(extra)
        .map(|s| (*s).to_string())
        .collect::<Vec<_>>()
    };
    let server = common::Holdline::start(&args(&[]));
    assert_eq!(thp_enabled(server.pid()), Some(false), "default: off");
    let (status, rest) = server.terminate();
    assert!(status.success(), "exit status {status:?}\n{rest}");

    let config = temp_file("thp-on.toml", "[limits]\ntransparent_huge_pages = true\n");
    let config = config.display().to_string();
    let server = common::Holdline::start(&args(&["--config", &config]));
    assert_eq!(thp_enabled(server.pid()), Some(true), "configured on");
    let (status, rest) = server.terminate();
    assert!(status.success(), "exit status {status:?}\n{rest}");
}
