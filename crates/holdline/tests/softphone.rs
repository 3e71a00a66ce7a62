//! Two real softphones through holdline (issue 13): Debian's baresip (package `baresip-core`,
//! 1.0.0 on Debian 12) as alice and bob of `test.example`, each registering to holdline over
//! TCP, then over TLS, from the ephemeral port of the connection it opens; alice calls bob,
//! bob answers automatically, alice hangs up.
//!
//! What it proves, once per transport:
//!
//! - **Registration with digest authentication**: both REGISTERs are challenged (401) and
//!   accepted (200) against a users file written by `holdline user add`; the phones are not
//!   trusted (`trusted = []`), so alice's INVITE is challenged too (407), her credentials are
//!   accepted and consumed (bob's INVITE carries no Proxy-Authorization).
//! - **The call**: "Call established" on both phones, alice's BYE answered 200 by bob through
//!   holdline, bob's session closed by it; every response the phones saw is one of 100,
//!   180, 200, 401, 407 (no 408, no 5xx).
//! - **Ephemeral ports, connection reuse**: each phone opens one connection from an ephemeral
//!   port and every message of the test, both ways, goes over it: holdline reached bob (the
//!   INVITE, then the ACK and BYE) over the connection bob opened, never one of its own
//!   (`holdline_connections_outbound_total` 0, `_accepted_total` 2, `_reused_total` ≥ 1).
//!   baresip's REGISTER Contact names its listening socket (`sip_listen`, another address
//!   and port), not the connection; the test prints both.
//! - **TLS**: holdline's `tls:` listener with a certificate of a CA generated here (rcgen);
//!   the phones are given the CA (`sip_cafile`), two server handshakes, no failure, no
//!   message over any other transport. baresip 1.0 loads the CA but does not verify the
//!   server's certificate (it has no setting to), so this checks holdline's side only.
//!
//! How: holdline runs with its defaults plus a TCP or TLS listener, the domain, the users
//! file, a `/metrics` listener and the two settings baresip 1.0 needs (below). Each phone is
//! a `baresip -f DIR -s` process with a config and an account written here: SIP on
//! 127.0.0.2 (alice) or 127.0.0.3 (bob), holdline as outbound proxy
//! (`outbound="sip:127.0.0.1:PORT;transport=tcp|tls"`), audio through `aubridge` (no sound
//! card), no STUN/ICE, DNS pointed at a socket of this test that must receive nothing. The
//! test drives the phones through baresip's `stdio` module (`/dial`, `/hangup`, `/quit` on
//! standard input) and waits, with deadlines, on lines of their output and on baresip's SIP
//! trace (`-s`), which it parses for the messages' addresses and contents.
//!
//! baresip 1.0 (libre 1.1) compatibility: it answers only MD5 challenges and gives up
//! ("Register: Function not implemented") on a response carrying any other, even beside an
//! MD5 one, so holdline offers MD5 alone (`[auth] algorithms = ["MD5"]`). Its outgoing
//! connections come from 127.0.0.1 whatever its `sip_listen` address, so the default
//! `trusted` (loopback) would spare its calls the 407: `trusted = []` makes them Internet
//! phones.
//!
//! Every process is started here, bounded (`baresip -t`, deadlines) and stopped by its PID.
//! Set `HOLDLINE_SKIP_BARESIP=1` to skip these tests on a machine without baresip (they
//! print that they were skipped); without it a missing baresip is a failure
//! (`scripts/install-test-deps` installs it).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use common::{BIN, Ca, Guard, Holdline, free_port, metric, wait_metrics};

const DOMAIN: &str = "test.example";
/// The deadline of each step (registration, call set-up, hang-up).
const STEP: Duration = Duration::from_secs(20);

/// The two test runs of this binary take turns: four phones and two servers on two cores
/// at once would measure the machine.
static ONE_CALL_AT_A_TIME: Mutex<()> = Mutex::new(());

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    Tcp,
    Tls,
}

impl Transport {
    /// In URIs, holdline's listeners and its metrics' labels.
    fn name(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Tls => "tls",
        }
    }

    /// In baresip's trace and registration lines.
    fn upper(self) -> &'static str {
        match self {
            Self::Tcp => "TCP",
            Self::Tls => "TLS",
        }
    }
}

/// baresip's module directory, or `None` (with a note) when `HOLDLINE_SKIP_BARESIP` is set;
/// a missing baresip otherwise fails the test.
fn baresip_modules() -> Option<PathBuf> {
    if std::env::var_os("HOLDLINE_SKIP_BARESIP").is_some() {
        eprintln!("SKIPPED: HOLDLINE_SKIP_BARESIP is set");
        return None;
    }
    let installed = Command::new("baresip")
        .arg("-h")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    let dir = [
        "/usr/lib/baresip/modules",
        "/usr/local/lib/baresip/modules",
        "/usr/lib/x86_64-linux-gnu/baresip/modules",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|d| d.join("g711.so").is_file() && d.join("aubridge.so").is_file());
    match (installed, dir) {
        (true, Some(dir)) => Some(dir),
        _ => panic!(
            "baresip (with its g711 and aubridge modules) is not installed: run \
             scripts/install-test-deps as root, or apt-get install baresip-core \
             (or set HOLDLINE_SKIP_BARESIP=1)"
        ),
    }
}

/// What a phone printed so far, standard output and error apart, and whether both ended.
#[derive(Default)]
struct Output {
    out: Vec<u8>,
    err: Vec<u8>,
    closed: u8,
}

/// A running baresip: its standard input for commands, its output collected by two threads.
struct Phone {
    aor: String,
    child: Guard,
    stdin: ChildStdin,
    output: Arc<(Mutex<Output>, Condvar)>,
}

/// Lines of baresip's output that end a wait at once: a failed registration or call.
const FAILURES: &[&str] = &[
    "Register: ",
    "init failed",
    "session closed: 4",
    "session closed: 5",
    "session closed: 6",
];

impl Phone {
    /// Starts baresip as `user` of [`DOMAIN`] with SIP on `ip`, registering through `proxy`
    /// over `transport`; `dns` is the only DNS server it may ask, `ca` the CA file it is given
    /// (TLS), `auto_answer` whether it answers calls by itself.
    #[allow(clippy::too_many_arguments)]
    fn start(
        dir: &Path,
        modules: &Path,
        (user, password): (&str, &str),
        ip: &str,
        proxy: SocketAddr,
        transport: Transport,
        dns: SocketAddr,
        ca: Option<&Path>,
        auto_answer: bool,
    ) -> Self {
        let home = dir.join(user);
        std::fs::create_dir_all(&home).expect("phone dir");
        let ca = ca
            .map(|p| format!("sip_cafile\t\t{}\n", p.display()))
            .unwrap_or_default();
        // Headless and loopback only: SIP and RTP on `ip`, audio through aubridge (each
        // phone's player feeds its source), no STUN/TURN/ICE module, DNS to the test.
        let config = format!(
            "poll_method\t\tepoll\n\
             sip_listen\t\t{ip}:0\n\
             {ca}\
             net_interface\t\t{ip}\n\
             dns_server\t\t{dns}\n\
             audio_player\t\taubridge,{user}\n\
             audio_source\t\taubridge,{user}\n\
             audio_alert\t\taubridge,{user}\n\
             module_path\t\t{}\n\
             module\t\t\tstdio.so\n\
             module\t\t\tg711.so\n\
             module\t\t\taubridge.so\n\
             module_tmp\t\taccount.so\n\
             module_app\t\tmenu.so\n\
             statmode_default\toff\n",
            modules.display()
        );
        std::fs::write(home.join("config"), config).expect("write config");
        let t = transport.name();
        let answer = if auto_answer { ";answermode=auto" } else { "" };
        std::fs::write(
            home.join("accounts"),
            format!(
                "<sip:{user}@{DOMAIN}>;auth_pass={password};\
                 outbound=\"sip:{proxy};transport={t}\";regint=600{answer}\n"
            ),
        )
        .expect("write accounts");
        // baresip prints through stdio, block-buffered into a pipe: stdbuf (coreutils) makes
        // it line-buffered, so that each line is read when it is printed.
        let mut child = Command::new("stdbuf")
            .args(["-oL", "-eL", "baresip", "-f"])
            .arg(&home)
            // -s: SIP trace on standard output; -t: quits by itself after 120 s.
            .args(["-s", "-t", "120"])
            .env("HOME", &home)
            .current_dir(&home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn baresip (through stdbuf, from coreutils)");
        let stdin = child.stdin.take().expect("stdin");
        let output = Arc::new((Mutex::new(Output::default()), Condvar::new()));
        let out = child.stdout.take().expect("stdout");
        let err = child.stderr.take().expect("stderr");
        collect(out, Arc::clone(&output), false);
        collect(err, Arc::clone(&output), true);
        Self {
            aor: format!("{user}@{DOMAIN}"),
            child: Guard(child),
            stdin,
            output,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Output> {
        self.output.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A command line for baresip's menu (through the stdio module).
    fn command(&mut self, line: &str) {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| self.stdin.flush())
            .unwrap_or_else(|e| panic!("{}: command {line}: {e}", self.aor));
    }

    /// Waits until `done` holds for the standard output so far (at most [`STEP`]); returns it.
    /// Fails at once on a line of [`FAILURES`] or when baresip has exited.
    fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + STEP;
        let mut o = self.lock();
        loop {
            let out = String::from_utf8_lossy(&o.out).into_owned();
            if done(&out) {
                return out;
            }
            let err = String::from_utf8_lossy(&o.err);
            if let Some(f) = FAILURES
                .iter()
                .find(|f| out.contains(**f) || err.contains(**f))
            {
                panic!(
                    "{}: `{f}` while waiting for {what}:\n{out}\n{err}",
                    self.aor
                );
            }
            assert!(
                o.closed < 2,
                "{}: baresip exited before {what}:\n{out}\n{err}",
                self.aor
            );
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "{}: no {what} within {STEP:?}:\n{out}\n{err}",
                self.aor
            );
            o = self
                .output
                .1
                .wait_timeout(o, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Waits for the 200 OK to its REGISTER over `transport`.
    fn wait_registered(&self, transport: Transport) {
        let line = format!("{}: {{0/{}/v4}} 200 OK", self.aor, transport.upper());
        self.wait_for("its registration", |out| out.contains(&line));
    }

    /// `/quit` (baresip unregisters, then exits), bounded; the guard kills it otherwise.
    fn quit(mut self) {
        self.command("/quit");
        let _ = self.child.wait_for(Duration::from_secs(10));
    }
}

/// Reads `from` to its end into `output` (standard error if `err`), waking the waiters.
fn collect(mut from: impl Read + Send + 'static, output: Arc<(Mutex<Output>, Condvar)>, err: bool) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            let n = from.read(&mut buf).unwrap_or(0);
            let mut o = output.0.lock().unwrap_or_else(PoisonError::into_inner);
            if n == 0 {
                o.closed += 1;
            } else if err {
                o.err.extend_from_slice(&buf[..n]);
            } else {
                o.out.extend_from_slice(&buf[..n]);
            }
            output.1.notify_all();
            if n == 0 {
                return;
            }
        }
    });
}

/// One SIP message of baresip's trace: the transport line (`TCP 127.0.0.1:41234 ->
/// 127.0.0.1:5060`) and the message, its lines ending in CRLF.
#[derive(Debug)]
struct Traced {
    transport: String,
    src: SocketAddr,
    dst: SocketAddr,
    text: String,
}

impl Traced {
    fn first_line(&self) -> &str {
        self.text.lines().next().unwrap_or_default()
    }

    /// The value of the first header `name` (full form, as baresip and holdline write them).
    fn header(&self, name: &str) -> Option<&str> {
        self.text
            .lines()
            .take_while(|l| !l.is_empty())
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
    }

    /// The status code of a response.
    fn code(&self) -> Option<u16> {
        self.first_line()
            .strip_prefix("SIP/2.0 ")?
            .get(..3)?
            .parse()
            .ok()
    }

    /// The method of the CSeq header.
    fn cseq_method(&self) -> &str {
        self.header("CSeq")
            .and_then(|c| c.split_whitespace().nth(1))
            .unwrap_or_default()
    }

    fn is_request(&self, method: &str) -> bool {
        self.first_line().starts_with(&format!("{method} "))
    }

    fn is_response(&self, code: u16, method: &str) -> bool {
        self.code() == Some(code) && self.cseq_method() == method
    }
}

/// The messages of baresip's SIP trace (`-s`) in `out`, in order.
fn trace(out: &str) -> Vec<Traced> {
    let mut found = Vec::new();
    let mut lines = out.split('\n').peekable();
    while let Some(line) = lines.next() {
        let mut words = line.split(' ');
        let (Some(t), Some(src), Some("->"), Some(dst), None) = (
            words.next(),
            words.next(),
            words.next(),
            words.next(),
            words.next(),
        ) else {
            continue;
        };
        let (Ok(src), Ok(dst)) = (src.parse(), dst.parse()) else {
            continue;
        };
        if !matches!(t, "UDP" | "TCP" | "TLS") {
            continue;
        }
        let mut text = String::new();
        while let Some(l) = lines.peek().and_then(|l| l.strip_suffix('\r')) {
            text.push_str(l);
            text.push_str("\r\n");
            lines.next();
        }
        found.push(Traced {
            transport: t.to_owned(),
            src,
            dst,
            text,
        });
    }
    found
}

/// `holdline user add --file FILE USER@DOMAIN --password PASSWORD`.
fn user_add(file: &Path, user: &str, password: &str) {
    let out = Command::new(BIN)
        .args(["user", "add", "--file"])
        .arg(file)
        .arg(format!("{user}@{DOMAIN}"))
        .args(["--password", password])
        .stdin(Stdio::null())
        .output()
        .expect("run holdline user add");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn toml_path(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}

/// The kernel's ephemeral port range (`ip_local_port_range`).
fn ephemeral_ports() -> Option<(u16, u16)> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut w = text.split_whitespace().map(str::parse::<u16>);
    Some((w.next()?.ok()?, w.next()?.ok()?))
}

/// Checks one phone's side of the test in its trace: every message over `transport` on the
/// one connection it opened to `proxy` from an ephemeral port; its registration challenged
/// and accepted; no response outside `allowed`. Returns that connection's local address.
fn check_connection(
    name: &str,
    msgs: &[Traced],
    transport: Transport,
    proxy: SocketAddr,
    allowed: &[u16],
) -> SocketAddr {
    let register = msgs
        .iter()
        .find(|m| m.is_request("REGISTER"))
        .unwrap_or_else(|| panic!("{name}: no REGISTER in the trace: {msgs:#?}"));
    let conn = register.src;
    for m in msgs {
        assert_eq!(m.transport, transport.upper(), "{name}: {m:#?}");
        assert!(
            (m.src, m.dst) == (conn, proxy) || (m.src, m.dst) == (proxy, conn),
            "{name}: a message beside the connection {conn} <-> {proxy}: {m:#?}"
        );
        if let Some(code) = m.code() {
            assert!(allowed.contains(&code), "{name}: {m:#?}");
        }
    }
    assert!(conn.ip().is_loopback(), "{name}: {conn}");
    if let Some((low, high)) = ephemeral_ports() {
        assert!(
            (low..=high).contains(&conn.port()),
            "{name}: connection from {conn}, outside the ephemeral ports {low}-{high}"
        );
    }
    let got = |code: u16| {
        msgs.iter()
            .any(|m| m.dst == conn && m.is_response(code, "REGISTER"))
    };
    assert!(
        got(401) && got(200),
        "{name}: REGISTER not 401 then 200: {msgs:#?}"
    );
    assert!(
        msgs.iter()
            .any(|m| m.is_request("REGISTER") && m.header("Authorization").is_some()),
        "{name}: {msgs:#?}"
    );
    eprintln!(
        "{name}: connection from {conn} (ephemeral) to {proxy}; REGISTER Contact: {}",
        register.header("Contact").unwrap_or("(none)")
    );
    conn
}

fn call_through_holdline(transport: Transport) {
    let _one_at_a_time = ONE_CALL_AT_A_TIME
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let Some(modules) = baresip_modules() else {
        return;
    };
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let (alice, bob) = (("alice", "wonderland"), ("bob", "builder"));
    let users = dir.path().join("users.txt");
    for (user, password) in [alice, bob] {
        user_add(&users, user, password);
    }
    // holdline's defaults, plus: the users (digest authentication on), MD5 alone (baresip
    // 1.0 gives up on any other challenge), and no trusted source (the phones connect from
    // 127.0.0.1, which the default `trusted` would spare the 407 challenge).
    let mut config = format!(
        "trusted = []\n[auth]\nusers_file = {}\nalgorithms = [\"MD5\"]\n",
        toml_path(&users)
    );
    let ca_file = (transport == Transport::Tls).then(|| {
        let ca = Ca::new("holdline softphone test CA");
        let (cert, key) = ca.leaf(&["sip.test.example", "127.0.0.1"]);
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).expect("write pem");
            p
        };
        let (cert, key) = (write("server.pem", &cert), write("server.key", &key));
        config.push_str(&format!(
            "[tls]\ncert_file = {}\nkey_file = {}\n",
            toml_path(&cert),
            toml_path(&key)
        ));
        write("ca.pem", &ca.pem)
    });
    let config_file = dir.path().join("holdline.toml");
    std::fs::write(&config_file, config).expect("write config");
    let (port, metrics_port) = (free_port(), free_port());
    let t = transport.name();
    let holdline = Holdline::start(&[
        format!("--config={}", config_file.display()),
        format!("--listen={t}:127.0.0.1:{port}"),
        format!("--domain={DOMAIN}"),
        "--store=memory".into(),
        format!("--metrics=127.0.0.1:{metrics_port}"),
    ]);
    assert!(
        holdline.startup.contains("authentication on: 2 users"),
        "{}",
        holdline.startup
    );
    let proxy = SocketAddr::from(([127, 0, 0, 1], port));
    let metrics = SocketAddr::from(([127, 0, 0, 1], metrics_port));
    // The phones' DNS server: nothing may reach it (every address here is a literal).
    let dns = UdpSocket::bind("127.0.0.1:0").expect("bind dns");
    dns.set_nonblocking(true).expect("nonblocking");
    let dns_addr = dns.local_addr().expect("dns addr");

    let start = |user, ip, auto_answer| {
        Phone::start(
            dir.path(),
            &modules,
            user,
            ip,
            proxy,
            transport,
            dns_addr,
            ca_file.as_deref(),
            auto_answer,
        )
    };
    let bob = start(bob, "127.0.0.3", true);
    let mut alice = start(alice, "127.0.0.2", false);
    bob.wait_registered(transport);
    alice.wait_registered(transport);

    alice.command(&format!("/dial sip:bob@{DOMAIN}"));
    alice.wait_for("the call established", |out| {
        out.contains(&format!(
            "alice@{DOMAIN}: Call established: sip:bob@{DOMAIN}"
        ))
    });
    bob.wait_for("the call established", |out| {
        out.contains(&format!(
            "bob@{DOMAIN}: Call established: sip:alice@{DOMAIN}"
        ))
    });
    alice.command("/hangup");
    let alice_out = alice.wait_for("the 200 OK to its BYE", |out| {
        trace(out)
            .iter()
            .any(|m| m.src == proxy && m.is_response(200, "BYE"))
    });
    // The BYE closes bob's session ("Connection reset by peer" is how baresip reports a
    // BYE received). baresip 1.0 prints its "Call ... terminated" line only when the call
    // object goes, which a call hung up within a second never sees.
    let bob_out = bob.wait_for("the end of the call", |out| {
        out.contains(&format!("sip:alice@{DOMAIN}: session closed: "))
    });
    let (a, b) = (trace(&alice_out), trace(&bob_out));

    // Each phone: one connection from an ephemeral port, registered with credentials.
    let a_conn = check_connection("alice", &a, transport, proxy, &[100, 180, 200, 401, 407]);
    let b_conn = check_connection("bob", &b, transport, proxy, &[100, 180, 200, 401]);
    // alice: challenged (407), then the call, its ACK and BYE, the BYE answered.
    let sent = |m: &Traced| m.src == a_conn;
    assert!(
        a.iter().any(|m| !sent(m) && m.is_response(407, "INVITE")),
        "{a:#?}"
    );
    assert!(
        a.iter().any(|m| sent(m)
            && m.is_request("INVITE")
            && m.header("Proxy-Authorization").is_some()),
        "{a:#?}"
    );
    assert!(
        a.iter().any(|m| !sent(m) && m.is_response(200, "INVITE")),
        "{a:#?}"
    );
    assert!(a.iter().any(|m| sent(m) && m.is_request("BYE")), "{a:#?}");
    // bob: the INVITE (without alice's credentials for holdline's realm, consumed there),
    // the ACK and the BYE, all on the connection bob opened; the BYE answered 200.
    let received = |m: &Traced| m.src == proxy && m.dst == b_conn;
    let invite = b
        .iter()
        .find(|m| received(m) && m.is_request("INVITE"))
        .unwrap_or_else(|| panic!("bob got no INVITE: {b:#?}"));
    assert_eq!(invite.header("Proxy-Authorization"), None, "{invite:#?}");
    assert!(invite.header("Record-Route").is_some(), "{invite:#?}");
    for method in ["ACK", "BYE"] {
        assert!(
            b.iter().any(|m| received(m) && m.is_request(method)),
            "bob got no {method}: {b:#?}"
        );
    }
    assert!(
        b.iter()
            .any(|m| m.src == b_conn && m.is_response(200, "BYE")),
        "{b:#?}"
    );
    eprintln!(
        "bob's Contact in its 200 to the INVITE: {}",
        b.iter()
            .find(|m| m.src == b_conn && m.is_response(200, "INVITE"))
            .and_then(|m| m.header("Contact"))
            .unwrap_or("(none)")
    );

    // holdline's side: both phones' connections accepted, none opened by holdline, the
    // callee reached over its own; the credentials accepted; nothing dropped; the call over.
    let m = wait_metrics(metrics, STEP, |m| {
        metric(m, "holdline_sip_active_calls", &[]) == 0.0
    });
    let count = |name: &str, labels: &[&str]| metric(&m, name, labels);
    assert_eq!(
        count("holdline_connections_accepted_total", &[]),
        2.0,
        "{m}"
    );
    assert_eq!(
        count("holdline_connections_outbound_total", &[]),
        0.0,
        "{m}"
    );
    assert!(
        count("holdline_connections_reused_total", &[]) >= 1.0,
        "{m}"
    );
    assert!(
        count("holdline_auth_total", &["result=\"ok\""]) >= 3.0,
        "{m}"
    );
    assert!(
        count("holdline_auth_challenges_total", &["code=\"401\""]) >= 2.0,
        "{m}"
    );
    assert!(
        count("holdline_auth_challenges_total", &["code=\"407\""]) >= 1.0,
        "{m}"
    );
    for result in ["failed", "stale", "replayed", "invalid", "forbidden"] {
        let label = format!("result=\"{result}\"");
        assert_eq!(count("holdline_auth_total", &[&label]), 0.0, "{m}");
    }
    assert_eq!(count("holdline_drops_total", &[]), 0.0, "{m}");
    for other in ["udp", "tcp", "tls"].into_iter().filter(|o| *o != t) {
        let label = format!("transport=\"{other}\"");
        assert_eq!(count("holdline_messages_in_total", &[&label]), 0.0, "{m}");
        assert_eq!(count("holdline_messages_out_total", &[&label]), 0.0, "{m}");
    }
    if transport == Transport::Tls {
        let hs = |side: &str, result: &str| {
            let (side, result) = (format!("side=\"{side}\""), format!("result=\"{result}\""));
            count("holdline_tls_handshakes_total", &[&side, &result])
        };
        assert_eq!(hs("server", "ok"), 2.0, "{m}");
        assert_eq!(hs("server", "failed"), 0.0, "{m}");
        assert_eq!(hs("client", "ok") + hs("client", "failed"), 0.0, "{m}");
    }
    let mut buf = [0u8; 512];
    if let Ok((n, from)) = dns.recv_from(&mut buf) {
        panic!("a phone asked DNS ({n} bytes from {from})");
    }

    alice.quit();
    bob.quit();
    let (status, log) = holdline.terminate();
    assert!(status.success(), "holdline: {status:?}\n{log}");
    assert!(
        !log.lines()
            .any(|l| l.contains(" WARN ") || l.contains(" ERROR ")),
        "holdline logged a warning or an error:\n{log}"
    );
    eprintln!(
        "{}: registered, called, hung up in {:.1} s",
        transport.upper(),
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn baresip_phones_register_and_call_over_tcp() {
    call_through_holdline(Transport::Tcp);
}

#[test]
fn baresip_phones_register_and_call_over_tls() {
    call_through_holdline(Transport::Tls);
}
