//! Digest authentication end to end: `holdline serve` with `[auth]` against the real SIPp
//! (its `[authentication]` keyword answers the challenges) and against raw SIP from here:
//! REGISTER without credentials gets 401, with the right ones 200, with a wrong password 401
//! again and a counted failure; a call from a user gets 407, then goes through; a password
//! guesser is throttled (answered nothing) while another source's calls go on; the users
//! file is managed with `holdline user` and reloaded on SIGHUP.
//!
//! The SIPp clients run from 127.0.0.2 and 127.0.0.3, which the test configuration does not
//! trust (only 127.0.0.1 is): they are challenged, counted and throttled like any Internet
//! source. Every process is bounded (`-m`, `-timeout`, deadlines) and stopped by its PID.
//! Set `HOLDLINE_SKIP_SIPP=1` to skip the SIPp tests on a machine without SIPp.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use common::{
    BIN, Background, Guard, Holdline, free_port, last_stats, metric, scrape, sipp_available, stat,
    status_code, wait_udp_bound,
};
use holdline_proto::auth::{DigestAlgorithm, digest_response};

const DOMAIN: &str = "example.test";

/// A SIPp scenario of this crate's tests, or of the lab (`lab/scenarios`, the attackers
/// `holdline lab soak --attack` runs too).
fn scenario(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let here = root.join("tests/scenarios").join(name);
    if here.exists() {
        here
    } else {
        root.join("../../lab/scenarios").join(name)
    }
}

/// `holdline user add --file FILE USER@DOMAIN`, the password on standard input.
fn user_add(file: &Path, user: &str, password: &str) {
    use std::io::Write as _;
    let mut child = Command::new(BIN)
        .args(["user", "add", "--file"])
        .arg(file)
        .arg(user)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn holdline user add");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(format!("{password}\n").as_bytes())
        .expect("write password");
    let out = child.wait_with_output().expect("holdline user add");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A server for `example.test` with the users of `users`, trusting only 127.0.0.1;
/// `extra` is appended to the `[auth]` section.
fn start(dir: &Path, users: &[(&str, &str)], extra: &str) -> (Holdline, SocketAddr, SocketAddr) {
    let file = dir.join("users.txt");
    for (u, p) in users {
        user_add(&file, &format!("{u}@{DOMAIN}"), p);
    }
    let config = dir.join("holdline.toml");
    std::fs::write(
        &config,
        format!(
            "trusted = [\"127.0.0.1\"]\n[auth]\nusers_file = \"{}\"\n\
             # SIPp 3.6 answers only the first challenge, and only MD5.\n\
             algorithms = [\"MD5\", \"SHA-256\"]\n{extra}",
            file.display()
        ),
    )
    .expect("write config");
    let port = free_port();
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let h = Holdline::start(&[
        format!("--config={}", config.display()),
        format!("--listen=udp:127.0.0.1:{port}"),
        format!("--domain={DOMAIN}"),
        "--store=memory".into(),
        "--workers=2".into(),
        format!("--metrics={metrics}"),
    ]);
    assert!(
        h.startup
            .contains(&format!("authentication on: {} users", users.len())),
        "{}",
        h.startup
    );
    let addr = h.udp_addr();
    (h, addr, metrics)
}

/// A SIPp client scenario from `ip` against `target`, to completion.
fn sipp_client(
    dir: &Path,
    name: &str,
    ip: &str,
    target: SocketAddr,
    args: &[&str],
) -> (ExitStatus, Vec<(String, String)>, String) {
    let stats = dir.join(format!("{name}.csv"));
    let errors = dir.join(format!("{name}_errors.log"));
    let status = sipp_command(dir, name, ip, target, args)
        .status()
        .expect("run sipp");
    let errors = std::fs::read_to_string(errors).unwrap_or_default();
    (
        status,
        last_stats(&stats),
        errors.chars().take(3000).collect(),
    )
}

fn sipp_command(dir: &Path, name: &str, ip: &str, target: SocketAddr, args: &[&str]) -> Command {
    let mut c = Command::new("sipp");
    c.arg(target.to_string())
        .args(["-i", ip, "-p", &free_port().to_string(), "-t", "u1"])
        .args(args)
        .args(["-nostdin", "-timeout", "60s", "-timeout_error"])
        .args(["-trace_stat", "-fd", "1", "-stf"])
        .arg(dir.join(format!("{name}.csv")))
        .args(["-trace_err", "-error_file"])
        .arg(dir.join(format!("{name}_errors.log")))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// A SIPp UAS on 127.0.0.1:`port` that copies Record-Route into its answers (so the
/// caller's ACK and BYE follow the route through the proxy); returns once it listens.
fn start_uas(dir: &Path, port: u16) -> Guard {
    let child = Command::new("sipp")
        .arg("-sf")
        .arg(scenario("uas_rr.xml"))
        .args(["-i", "127.0.0.1", "-p", &port.to_string(), "-t", "u1"])
        .args(["-nostdin", "-timeout", "90s", "-timeout_error"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sipp uas");
    let guard = Guard(child);
    wait_udp_bound(port, Duration::from_secs(10));
    guard
}

/// A SIPp injection file: `SEQUENTIAL`, then one line of `;`-separated fields per entry.
fn injection(path: &Path, rows: impl Iterator<Item = String>) {
    let mut text = String::from("SEQUENTIAL\n");
    for r in rows {
        text.push_str(&r);
        text.push_str(";\n");
    }
    std::fs::write(path, text).expect("write injection file");
}

#[test]
fn sipp_registers_with_digest_and_wrong_passwords_are_refused_and_counted() {
    let _one_run_at_a_time = common::sipp_lock();
    if !sipp_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (_h, target, metrics) = start(
        dir.path(),
        &[("alice", "wonderland"), ("bob", "builder")],
        "",
    );
    // SIPp's [authentication] takes the user and password from -au / -ap; the To user comes
    // from the injection file.
    let run = |name: &str, sf: &str, user: &str, password: &str, calls: &str| {
        injection(
            &dir.path().join(format!("{name}.csv")),
            std::iter::once(user.to_owned()),
        );
        let sf = scenario(sf).display().to_string();
        let inf = format!("{name}.csv");
        sipp_client(
            dir.path(),
            name,
            "127.0.0.2",
            target,
            &[
                "-sf", &sf, "-inf", &inf, "-au", user, "-ap", password, "-r", "20", "-m", calls,
            ],
        )
    };

    // The right password: 401 first, then 200, 20 times.
    let (status, s, errors) = run("register", "register_auth.xml", "alice", "wonderland", "20");
    assert_eq!(stat(&s, "SuccessfulCall(C)"), 20, "{s:?}\n{errors}");
    assert!(status.success(), "sipp exit {status:?}\n{errors}");

    // A wrong password twice, and an unknown user: 401 again, each counted as a failure.
    let (status, s, errors) = run("wrong", "register_guess.xml", "bob", "wonderland", "2");
    assert_eq!(stat(&s, "SuccessfulCall(C)"), 2, "{s:?}\n{errors}");
    assert!(status.success(), "sipp exit {status:?}\n{errors}");
    let (status, s, errors) = run("unknown", "register_guess.xml", "nobody", "builder", "1");
    assert_eq!(stat(&s, "SuccessfulCall(C)"), 1, "{s:?}\n{errors}");
    assert!(status.success(), "sipp exit {status:?}\n{errors}");

    let text = scrape(metrics);
    let auth = |r: &str| metric(&text, "holdline_auth_total", &[&format!("result=\"{r}\"")]);
    assert_eq!(auth("ok"), 20.0, "{text}");
    assert_eq!(auth("failed"), 3.0, "{text}");
    assert_eq!(
        metric(&text, "holdline_auth_challenges_total", &["code=\"401\""]),
        26.0,
        "20 + 3 first challenges, 3 after the wrong answers"
    );
    assert_eq!(
        metric(&text, "holdline_drops_total", &["reason=\"auth_failures\""]),
        0.0,
        "3 failures are far from the limit"
    );
}

#[test]
fn sipp_calls_from_a_user_get_407_then_go_through() {
    let _one_run_at_a_time = common::sipp_lock();
    if !sipp_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (_h, target, metrics) = start(dir.path(), &[("alice", "wonderland")], "");
    let uas = free_port();
    let _uas = start_uas(dir.path(), uas);
    injection(
        &dir.path().join("caller.csv"),
        std::iter::once(format!("alice;-;127.0.0.1:{uas}")),
    );
    let calls = 100;
    let sf = scenario("uac_auth.xml").display().to_string();
    let (status, s, errors) = sipp_client(
        dir.path(),
        "uac",
        "127.0.0.2",
        target,
        &[
            "-sf",
            &sf,
            "-inf",
            "caller.csv",
            "-au",
            "alice",
            "-ap",
            "wonderland",
            "-r",
            "50",
            "-m",
            "100",
            "-d",
            "0",
        ],
    );
    assert_eq!(stat(&s, "SuccessfulCall(C)"), calls, "{s:?}\n{errors}");
    assert_eq!(stat(&s, "FailedCall(C)"), 0, "{errors}");
    assert!(status.success(), "sipp exit {status:?}\n{errors}");
    let text = scrape(metrics);
    assert_eq!(
        metric(&text, "holdline_auth_challenges_total", &["code=\"407\""]),
        calls as f64
    );
    assert_eq!(
        metric(&text, "holdline_auth_total", &["result=\"ok\""]),
        calls as f64
    );
    assert_eq!(metric(&text, "holdline_sip_relay_denied_total", &[]), 0.0);
}

#[test]
fn a_password_guesser_is_throttled_while_another_sources_calls_go_on() {
    let _one_run_at_a_time = common::sipp_lock();
    if !sipp_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (_h, target, metrics) = start(
        dir.path(),
        &[("alice", "wonderland"), ("bob", "builder")],
        "failure_limit = 20\nfailure_window_ms = 10000\nfailure_cooldown_ms = 60000\n",
    );
    let uas = free_port();
    let _uas = start_uas(dir.path(), uas);
    // The guesser: 100 guesses of bob's password at 20/s from 127.0.0.3.
    injection(
        &dir.path().join("guesses.csv"),
        std::iter::once("bob".to_owned()),
    );
    let sf = scenario("register_guess.xml").display().to_string();
    let guesser = Background::spawn(sipp_command(
        dir.path(),
        "guesser",
        "127.0.0.3",
        target,
        &[
            "-sf",
            &sf,
            "-inf",
            "guesses.csv",
            "-au",
            "bob",
            "-ap",
            "guess",
            "-r",
            "20",
            "-m",
            "100",
        ],
    ));
    // Meanwhile alice calls from 127.0.0.2: 200 calls at 40/s.
    injection(
        &dir.path().join("caller.csv"),
        std::iter::once(format!("alice;-;127.0.0.1:{uas}")),
    );
    let sf = scenario("uac_auth.xml").display().to_string();
    let (status, s, errors) = sipp_client(
        dir.path(),
        "uac",
        "127.0.0.2",
        target,
        &[
            "-sf",
            &sf,
            "-inf",
            "caller.csv",
            "-au",
            "alice",
            "-ap",
            "wonderland",
            "-r",
            "40",
            "-m",
            "200",
            "-d",
            "0",
        ],
    );
    let guesser_status = guesser.finish(Duration::from_secs(90));
    assert_eq!(stat(&s, "SuccessfulCall(C)"), 200, "{s:?}\n{errors}");
    assert_eq!(stat(&s, "FailedCall(C)"), 0, "{errors}");
    assert!(status.success(), "sipp exit {status:?}\n{errors}");

    // The guesser had its 20 failures answered (and the 21st, which tripped the limit), then
    // nothing: its other guesses time out unanswered.
    let g = last_stats(&dir.path().join("guesser.csv"));
    let answered = stat(&g, "SuccessfulCall(C)");
    eprintln!("guesser: {answered} of 100 guesses answered");
    assert!((20..=22).contains(&answered), "{g:?}");
    assert_eq!(stat(&g, "FailedCall(C)"), 100 - answered, "{g:?}");
    assert!(!guesser_status.success());
    let text = scrape(metrics);
    let failed = metric(&text, "holdline_auth_total", &["result=\"failed\""]);
    assert!((21.0..=23.0).contains(&failed), "{failed}\n{text}");
    assert!(metric(&text, "holdline_auth_throttled_sources_total", &[]) >= 1.0);
    assert!(
        metric(&text, "holdline_drops_total", &["reason=\"auth_failures\""]) >= 70.0,
        "{text}"
    );
}

// ---------------------------------------------------------------- raw SIP from here

/// Sends `req` from `sock` and returns the first response with its Call-ID.
fn exchange(sock: &UdpSocket, to: SocketAddr, req: &str, call_id: &str) -> String {
    sock.send_to(req.as_bytes(), to).expect("send");
    let mut buf = vec![0; 65_535];
    loop {
        let (n, _) = sock
            .recv_from(&mut buf)
            .unwrap_or_else(|e| panic!("no response ({e}) to:\n{req}"));
        let resp = String::from_utf8_lossy(&buf[..n]).into_owned();
        if resp.contains(&format!("Call-ID: {call_id}\r\n")) && !resp.starts_with("SIP/2.0 1") {
            return resp;
        }
    }
}

fn register(port: u16, user: &str, cseq: u32, auth: &str) -> String {
    format!(
        "REGISTER sip:{DOMAIN} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{port};branch=z9hG4bKraw{cseq}\r\n\
         Max-Forwards: 70\r\nTo: <sip:{user}@{DOMAIN}>\r\nFrom: <sip:{user}@{DOMAIN}>;tag=t\r\n\
         Call-ID: raw-{user}@test\r\nCSeq: {cseq} REGISTER\r\nContact: <sip:{user}@127.0.0.1:{port}>\r\n\
         {auth}Expires: 60\r\nContent-Length: 0\r\n\r\n"
    )
}

/// REGISTERs `user` with `password`, answering the `alg` challenge; returns the status.
fn raw_register(server: SocketAddr, user: &str, password: &str, alg: DigestAlgorithm) -> u16 {
    raw_register_replayed(server, user, password, alg).0
}

/// [`raw_register`], then the authenticated REGISTER again with the same credentials (a
/// replay: same nonce, same nonce count) as a new transaction; returns both statuses.
fn raw_register_replayed(
    server: SocketAddr,
    user: &str,
    password: &str,
    alg: DigestAlgorithm,
) -> (u16, u16) {
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    sock.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let port = sock.local_addr().expect("addr").port();
    let call_id = format!("raw-{user}@test");
    let first = exchange(&sock, server, &register(port, user, 1, ""), &call_id);
    assert_eq!(status_code(&first), 401, "{first}");
    let challenge = first
        .lines()
        .filter_map(|l| l.strip_prefix("WWW-Authenticate: "))
        .find(|c| c.contains(&format!("algorithm={}", alg.name())))
        .unwrap_or_else(|| panic!("no {alg} challenge:\n{first}"));
    let param = |name: &str| {
        let start = challenge.find(&format!("{name}=\"")).expect("param") + name.len() + 2;
        let end = challenge[start..].find('"').expect("quote") + start;
        challenge[start..end].to_owned()
    };
    let (realm, nonce) = (param("realm"), param("nonce"));
    let ha1 = alg.ha1(user.as_bytes(), realm.as_bytes(), password.as_bytes());
    let uri = format!("sip:{DOMAIN}");
    let r = digest_response(
        alg,
        ha1.as_bytes(),
        nonce.as_bytes(),
        Some((b"00000001", b"f00d", b"auth")),
        b"REGISTER",
        uri.as_bytes(),
    );
    let auth = format!(
        "Authorization: Digest username=\"{user}\", realm=\"{realm}\", nonce=\"{nonce}\", \
         uri=\"{uri}\", response=\"{r}\", algorithm={}, qop=auth, nc=00000001, cnonce=\"f00d\"\r\n",
        alg.name()
    );
    let second = exchange(&sock, server, &register(port, user, 2, &auth), &call_id);
    let replay = exchange(&sock, server, &register(port, user, 3, &auth), &call_id);
    (status_code(&second), status_code(&replay))
}

#[test]
fn sha256_credentials_users_managed_with_holdline_user_and_reloaded_on_sighup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (h, target, metrics) = start(dir.path(), &[("alice", "wonderland")], "");
    assert_eq!(
        raw_register_replayed(target, "alice", "wonderland", DigestAlgorithm::Sha256),
        (200, 401),
        "the replayed credentials are refused"
    );
    let text = scrape(metrics);
    assert_eq!(
        metric(&text, "holdline_auth_total", &["result=\"replayed\""]),
        1.0
    );
    assert_eq!(
        raw_register(target, "alice", "wonderland", DigestAlgorithm::Md5),
        200
    );
    assert_eq!(
        raw_register(target, "carol", "c4r0l", DigestAlgorithm::Sha256),
        401,
        "not a user yet"
    );
    // Add carol, list, SIGHUP: she may register.
    let file = dir.path().join("users.txt");
    user_add(&file, &format!("carol@{DOMAIN}"), "c4r0l");
    let list = Command::new(BIN)
        .args(["user", "list", "--file"])
        .arg(&file)
        .output()
        .expect("holdline user list");
    assert_eq!(
        String::from_utf8_lossy(&list.stdout),
        format!("alice@{DOMAIN}\ncarol@{DOMAIN}\n")
    );
    let hup = |h: &Holdline| {
        let ok = Command::new("kill")
            .args(["-HUP", &h.pid().to_string()])
            .status()
            .expect("kill -HUP");
        assert!(ok.success());
        h.wait_line("holdline: users reloaded", Duration::from_secs(10));
    };
    hup(&h);
    assert_eq!(
        raw_register(target, "carol", "c4r0l", DigestAlgorithm::Sha256),
        200
    );
    // Remove alice: refused after the next SIGHUP.
    let rm = Command::new(BIN)
        .args(["user", "remove", "--file"])
        .arg(&file)
        .arg(format!("alice@{DOMAIN}"))
        .status()
        .expect("holdline user remove");
    assert!(rm.success());
    hup(&h);
    assert_eq!(
        raw_register(target, "alice", "wonderland", DigestAlgorithm::Md5),
        401
    );
}

#[test]
fn bad_users_files_are_reported_with_file_line_and_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let users = dir.path().join("users.txt");
    std::fs::write(&users, "# users\nalice@example.test 1234 5678\n").expect("write");
    let config = dir.path().join("holdline.toml");
    std::fs::write(
        &config,
        format!("[auth]\nusers_file = \"{}\"\n", users.display()),
    )
    .expect("write");
    let out = Command::new(BIN)
        .args(["serve", "--check-config"])
        .arg(&config)
        .output()
        .expect("check-config");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{}:2: key `alice@example.test`: the MD5 HA1 must be 32 hex digits",
            users.display()
        )),
        "{err}"
    );
    std::fs::write(
        &config,
        "[auth]\nusers_file = \"u\"\nnonce_lifetime_s = 0\n",
    )
    .expect("write");
    let out = Command::new(BIN)
        .args(["serve", "--check-config"])
        .arg(&config)
        .output()
        .expect("check-config");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(":3: key `auth.nonce_lifetime_s`: must be positive"),
        "{err}"
    );
}
