//! Helpers shared by the end-to-end tests that run `holdline serve` and SIPp as processes:
//! free ports, the SIPp check, a `holdline serve` child stopped by PID when dropped, SIPp's
//! `-trace_stat` CSV, and raw SIP over a UDP socket.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_holdline");

/// A port free on 127.0.0.1 for both UDP and TCP at the time of the call, outside the
/// ephemeral range so that no connecting socket of a parallel test takes it before the
/// server binds it.
pub fn free_port() -> u16 {
    holdline_lab::ports::free_port().expect("a free port on 127.0.0.1")
}

/// Whether to run SIPp tests: false (with a note) when `HOLDLINE_SKIP_SIPP` is set; a missing
/// SIPp otherwise fails the test.
pub fn sipp_available() -> bool {
    if std::env::var_os("HOLDLINE_SKIP_SIPP").is_some() {
        eprintln!("SKIPPED: HOLDLINE_SKIP_SIPP is set");
        return false;
    }
    let ok = Command::new("sipp")
        .arg("-v")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(
        ok,
        "SIPp is not installed: apt-get install sip-tester (or set HOLDLINE_SKIP_SIPP=1)"
    );
    true
}

/// Kills a child by PID when dropped (so a failing assertion leaves no process behind).
pub struct Guard(pub Child);

impl Guard {
    /// Waits for the child to exit, up to `limit`; `None` if it is still running then.
    pub fn wait_for(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            match self.0.try_wait().expect("try_wait") {
                Some(s) => return Some(s),
                None if Instant::now() >= deadline => return None,
                // Bounded poll of the child's state.
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `holdline ...` as a command, inside network namespace `ns` when given (`ip netns exec NS
/// holdline ...`: `ip` execs the program, so the PID is holdline's).
pub fn holdline_in(ns: Option<&str>) -> Command {
    match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, BIN]);
            c
        }
        None => Command::new(BIN),
    }
}

/// `holdline load ARGS` in the background, output discarded, stopped by PID when dropped.
pub fn load(args: &[String]) -> Guard {
    load_in(None, args)
}

/// [`load`] inside network namespace `ns` when given.
pub fn load_in(ns: Option<&str>, args: &[String]) -> Guard {
    Guard(
        holdline_in(ns)
            .arg("load")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn holdline load"),
    )
}

/// Runs `holdline load ARGS` (which writes its report to `json`) to its end, at most
/// `limit`; asserts it exited 0 and returns the report.
pub fn run_load_report(args: &[String], json: &Path, limit: Duration) -> serde_json::Value {
    run_load_report_in(None, args, json, limit)
}

/// [`run_load_report`] inside network namespace `ns` when given.
pub fn run_load_report_in(
    ns: Option<&str>,
    args: &[String],
    json: &Path,
    limit: Duration,
) -> serde_json::Value {
    let status = load_in(ns, args)
        .wait_for(limit)
        .expect("holdline load stops by itself");
    assert!(status.success(), "holdline load {args:?}: {status:?}");
    serde_json::from_str(&std::fs::read_to_string(json).expect("load report")).expect("json")
}

/// A running `holdline serve`: its stderr up to the ready line, the rest on demand.
pub struct Holdline {
    child: Guard,
    lines: Receiver<String>,
    /// Stderr lines up to and including `holdline: ready`.
    pub startup: String,
}

impl Holdline {
    /// Starts `holdline serve ARGS` and waits (bounded) for its ready line.
    pub fn start(args: &[String]) -> Self {
        Self::start_in(None, args)
    }

    /// Like [`start`](Self::start), inside network namespace `ns` when given (`ip netns exec
    /// NS holdline serve ARGS`: `ip` execs the server, so the PID is the server's).
    pub fn start_in(ns: Option<&str>, args: &[String]) -> Self {
        let mut child = holdline_in(ns)
            .arg("serve")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn holdline");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        // Reads stderr to its end, so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let child = Guard(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut startup = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    startup.push_str(&line);
                    startup.push('\n');
                    if line.starts_with("holdline: ready") {
                        break;
                    }
                }
                Err(e) => panic!("holdline did not become ready ({e:?}):\n{startup}"),
            }
        }
        Self {
            child,
            lines: rx,
            startup,
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// Waits (bounded) for a stderr line after startup starting with `prefix`; returns it.
    pub fn wait_line(&self, prefix: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(line) if line.starts_with(prefix) => return line,
                Ok(_) => {}
                Err(e) => panic!("no line `{prefix}` within {limit:?} ({e:?})"),
            }
        }
    }

    /// The first startup line starting with `prefix`.
    pub fn startup_line(&self, prefix: &str) -> Option<&str> {
        self.startup.lines().find(|l| l.starts_with(prefix))
    }

    /// The address of its first `udp:` listener (from the `holdline: listening on` lines).
    pub fn udp_addr(&self) -> SocketAddr {
        self.startup_line("holdline: listening on udp:")
            .and_then(|l| l.strip_prefix("holdline: listening on udp:"))
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no udp listener:\n{}", self.startup))
    }

    /// Sends SIGTERM, waits (bounded) for stderr to close and the process to exit; returns
    /// its exit status and the stderr written after the ready line.
    pub fn terminate(self) -> (ExitStatus, String) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.0.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
        self.wait_exit(Duration::from_secs(15))
    }

    /// Waits (at most `limit`) for stderr to close and the process to exit (after a drain,
    /// a signal sent by the caller...); returns its exit status and the stderr not read yet.
    pub fn wait_exit(mut self, limit: Duration) -> (ExitStatus, String) {
        let deadline = Instant::now() + limit;
        let mut rest = String::new();
        loop {
            match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(line) => {
                    rest.push_str(&line);
                    rest.push('\n');
                }
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => panic!("no exit within {limit:?}:\n{rest}"),
            }
        }
        let status = self
            .child
            .wait_for(Duration::from_secs(5))
            .unwrap_or_else(|| panic!("stderr closed but no exit:\n{rest}"));
        (status, rest)
    }
}

/// The last row of a SIPp `-trace_stat` CSV as (column, value) pairs.
pub fn last_stats(path: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header = lines.next().expect("header");
    let last = lines.next_back().expect("a data row");
    header
        .split(';')
        .zip(last.split(';'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// A numeric column of [`last_stats`].
pub fn stat(stats: &[(String, String)], name: &str) -> u64 {
    stats
        .iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no numeric column {name}"))
}

/// Whether a socket is bound to 127.0.0.1:`port` (UDP) or listening on it (TCP), read
/// from `/proc/net` so that checking never takes the port (binding it to test would race
/// with the process that is about to bind it).
pub fn port_bound(udp: bool, port: u16) -> bool {
    let files: &[&str] = if udp {
        &["/proc/net/udp", "/proc/net/udp6"]
    } else {
        &["/proc/net/tcp", "/proc/net/tcp6"]
    };
    let want = format!(":{port:04X}");
    files.iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|text| {
            text.lines().skip(1).any(|line| {
                let mut cols = line.split_whitespace();
                let local = cols.nth(1).unwrap_or_default();
                let state = cols.nth(1).unwrap_or_default();
                // TCP: 0A is LISTEN; UDP sockets are 07 (unconnected).
                local.ends_with(&want) && (udp || state == "0A")
            })
        })
    })
}

/// Waits (bounded) until something is bound to / listening on `port`; panics after `limit`.
pub fn wait_bound(udp: bool, port: u16, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !port_bound(udp, port) {
        assert!(
            Instant::now() < deadline,
            "nothing bound {} port {port}",
            if udp { "udp" } else { "tcp" }
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// [`wait_bound`] for UDP.
pub fn wait_udp_bound(port: u16, limit: Duration) {
    wait_bound(true, port, limit);
}

/// A SIP client over one UDP socket: sends a request, returns the first final response
/// (skipping 1xx) with a matching Call-ID.
pub struct SipClient {
    sock: UdpSocket,
    server: SocketAddr,
    seq: u64,
}

impl SipClient {
    pub fn new(server: SocketAddr) -> Self {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind client");
        sock.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        Self {
            sock,
            server,
            seq: 0,
        }
    }

    pub fn local_port(&self) -> u16 {
        self.sock.local_addr().expect("addr").port()
    }

    /// Sends `request` (with `{call_id}`, `{branch}` and `{port}` replaced) and returns the
    /// final response's text.
    fn exchange(&mut self, request: &str) -> String {
        self.seq += 1;
        let call_id = format!("t{}-{}@127.0.0.1", self.local_port(), self.seq);
        let text = request
            .replace("{call_id}", &call_id)
            .replace("{branch}", &format!("z9hG4bKt{}", self.seq))
            .replace("{port}", &self.local_port().to_string());
        self.sock
            .send_to(text.as_bytes(), self.server)
            .expect("send");
        let mut buf = vec![0; 65_535];
        loop {
            let (n, _) = self
                .sock
                .recv_from(&mut buf)
                .unwrap_or_else(|e| panic!("no response ({e}) to:\n{text}"));
            let resp = String::from_utf8_lossy(&buf[..n]).into_owned();
            let same_call = resp
                .lines()
                .any(|l| l.strip_prefix("Call-ID: ") == Some(call_id.as_str()));
            if same_call && !resp.starts_with("SIP/2.0 1") {
                return resp;
            }
        }
    }

    /// REGISTER `user@domain` with `contact` (`None`: a query) and `Expires: expires`.
    pub fn register(
        &mut self,
        user: &str,
        domain: &str,
        contact: Option<&str>,
        expires: u32,
    ) -> String {
        let contact = contact
            .map(|c| format!("Contact: <{c}>\r\nExpires: {expires}\r\n"))
            .unwrap_or_default();
        self.exchange(&format!(
            "REGISTER sip:{domain} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{{port}};branch={{branch}}\r\n\
             Max-Forwards: 70\r\nTo: <sip:{user}@{domain}>\r\nFrom: <sip:{user}@{domain}>;tag=r1\r\n\
             Call-ID: {{call_id}}\r\nCSeq: 1 REGISTER\r\n{contact}Content-Length: 0\r\n\r\n"
        ))
    }

    /// INVITE `uri` (no body); returns the final response. A non-2xx final response is
    /// acknowledged.
    pub fn invite(&mut self, uri: &str) -> String {
        let resp = self.exchange(&format!(
            "INVITE {uri} SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:{{port}};branch={{branch}}\r\n\
             Max-Forwards: 70\r\nTo: <{uri}>\r\nFrom: <sip:caller@127.0.0.1>;tag=i1\r\n\
             Call-ID: {{call_id}}\r\nCSeq: 1 INVITE\r\nContact: <sip:caller@127.0.0.1:{{port}}>\r\n\
             Content-Length: 0\r\n\r\n"
        ));
        if !resp.starts_with("SIP/2.0 2") {
            let header = |name: &str| {
                resp.lines()
                    .find_map(|l| l.strip_prefix(name))
                    .unwrap_or_default()
                    .to_owned()
            };
            let ack = format!(
                "ACK {uri} SIP/2.0\r\nVia: {}\r\nMax-Forwards: 70\r\nTo: {}\r\nFrom: {}\r\n\
                 Call-ID: {}\r\nCSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n",
                header("Via: "),
                header("To: "),
                header("From: "),
                header("Call-ID: "),
            );
            self.sock
                .send_to(ack.as_bytes(), self.server)
                .expect("send ack");
        }
        resp
    }
}

/// The Contact header values of a response.
pub fn contacts(resp: &str) -> Vec<&str> {
    resp.lines()
        .filter_map(|l| l.strip_prefix("Contact: "))
        .collect()
}

/// The status code of a response.
pub fn status_code(resp: &str) -> u16 {
    resp.get(8..11)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not a response: {resp}"))
}

// ---- shared with the malformed-input and hostile-peer tests (bad_input.rs)

/// Held by a test for the length of its SIPp run, so that the runs of one test binary do
/// not compete for the CPU (a poisoned lock is still a lock).
pub static SIPP_RUN: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn sipp_lock() -> std::sync::MutexGuard<'static, ()> {
    SIPP_RUN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// SIPp's built-in `uas` on `port` (`sipp_t`: `u1` or `t1`), bounded by `-timeout`; returns
/// once the port is taken (a bounded wait on the port, not a sleep).
pub fn start_uas(dir: &Path, port: u16, sipp_t: &str) -> Guard {
    let child = Command::new("sipp")
        .args(["-sn", "uas", "-i", "127.0.0.1", "-p", &port.to_string()])
        .args(["-t", sipp_t])
        // Large socket buffers (capped by net.core.rmem_max, which .ci/run raises): with the
        // default ones SIPp loses datagrams when the test binary runs other tests beside it.
        .args(["-buff_size", "8388608"])
        .args(["-nostdin", "-timeout", "90s", "-timeout_error"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sipp uas");
    let guard = Guard(child);
    wait_bound(sipp_t == "u1", port, Duration::from_secs(10));
    guard
}

/// The SIPp `uac` command line: `calls` calls at `rate`/s to `target`, stats in
/// `dir/uac.csv`, errors in `dir/uac_errors.log`.
pub fn uac_command(
    dir: &Path,
    target: SocketAddr,
    port: u16,
    sipp_t: &str,
    rate: u64,
    calls: u64,
) -> Command {
    let mut c = Command::new("sipp");
    c.args(["-sn", "uac", &target.to_string(), "-i", "127.0.0.1"])
        .args(["-p", &port.to_string(), "-t", sipp_t])
        .args(["-r", &rate.to_string(), "-m", &calls.to_string(), "-d", "0"])
        .args(["-buff_size", "8388608"])
        .args(["-nostdin", "-timeout", "80s", "-timeout_error"])
        .args(["-trace_stat", "-fd", "1", "-stf"])
        .arg(dir.join("uac.csv"))
        .args(["-trace_err", "-error_file"])
        .arg(dir.join("uac_errors.log"))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// Asserts that the uac run in `dir` completed `calls` calls with no failure and no
/// unexpected message, and exited successfully.
pub fn assert_uac_ok(dir: &Path, calls: u64, status: ExitStatus, what: &str) {
    let s = last_stats(&dir.join("uac.csv"));
    let errors = std::fs::read_to_string(dir.join("uac_errors.log")).unwrap_or_default();
    let excerpt: String = errors.chars().take(3000).collect();
    assert_eq!(
        stat(&s, "SuccessfulCall(C)"),
        calls,
        "{what}: {s:?}\n{excerpt}"
    );
    assert_eq!(stat(&s, "FailedCall(C)"), 0, "{what}: {excerpt}");
    assert_eq!(
        stat(&s, "FailedUnexpectedMessage(C)"),
        0,
        "{what}: {excerpt}"
    );
    assert!(
        status.success(),
        "{what}: sipp uac exit {status:?}\n{excerpt}"
    );
}

/// A child running in the background: its exit is reported by a thread blocked in
/// `wait()`; if it has not been seen to exit when this is dropped, it is killed by PID.
pub struct Background {
    pid: u32,
    rx: Receiver<ExitStatus>,
    done: bool,
}

impl Background {
    pub fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd.spawn().expect("spawn");
        let pid = child.id();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            if let Ok(s) = child.wait() {
                let _ = tx.send(s);
            }
        });
        Self {
            pid,
            rx,
            done: false,
        }
    }

    /// Waits at most `limit` for the exit.
    pub fn finish(mut self, limit: Duration) -> ExitStatus {
        let s = self
            .rx
            .recv_timeout(limit)
            .unwrap_or_else(|e| panic!("pid {} did not exit within {limit:?}: {e:?}", self.pid));
        self.done = true;
        s
    }
}

/// `GET /metrics` from the server's metrics listener.
pub fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("metrics");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").expect("get");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read metrics");
    assert!(text.starts_with("HTTP/1.0 200"), "{text}");
    text
}

/// The sum over every sample of `name` whose labels contain each of `labels` (e.g.
/// `reason="eof"`), all workers together.
pub fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let rest = series.strip_prefix(name)?;
            if !(rest.is_empty() || rest.starts_with('{')) {
                return None;
            }
            labels
                .iter()
                .all(|want| rest.contains(want))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// Scrapes until `pred` holds for the metrics text (bounded by `limit`); returns the text.
pub fn wait_metrics(addr: SocketAddr, limit: Duration, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + limit;
    loop {
        let text = scrape(addr);
        if pred(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "metrics condition not reached within {limit:?}:\n{text}"
        );
    }
}

/// `holdline load register --target 127.0.0.1:PORT --users USERS --rate RATE --progress off`,
/// its output discarded; the caller adds the rest (`--drain`, `--json`, `--acked`, ...).
pub fn load_register(port: u16, users: &str, rate: u32) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["load", "register", "--target"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--users", users, "--rate", &rate.to_string()])
        .args(["--progress", "off"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

// ---- certificates for the TLS tests (tls.rs, softphone.rs)

/// A CA generated here (rcgen) that signs leaf certificates.
pub struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    /// Its certificate, PEM.
    pub pem: String,
}

impl Ca {
    pub fn new(cn: &str) -> Self {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("ca key");
        let cert = params.self_signed(&key).expect("ca cert");
        Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A leaf certificate for `names` (DNS names or IP addresses): (certificate, key) PEM.
    pub fn leaf(&self, names: &[&str]) -> (String, String) {
        let params = rcgen::CertificateParams::new(
            names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>(),
        )
        .expect("leaf params");
        let key = rcgen::KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("leaf cert");
        (cert.pem(), key.serialize_pem())
    }
}

/// Runs `holdline lab ARGS --out OUT` to its end (at most `limit`; stderr read on a thread,
/// so the lab never blocks on a full pipe), asserts it succeeded; returns its stderr.
pub fn run_lab(args: &[&str], out: &Path, limit: Duration) -> String {
    let child = Command::new(BIN)
        .arg("lab")
        .args(args)
        .arg("--out")
        .arg(out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn holdline lab");
    let mut guard = Guard(child);
    let mut stderr = guard.0.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut err = String::new();
        let _ = stderr.read_to_string(&mut err);
        err
    });
    let status = guard.wait_for(limit).expect("holdline lab stops by itself");
    let err = reader.join().unwrap_or_default();
    assert!(status.success(), "{status:?}\n{err}");
    err
}

/// Whether the test runs as root (from `/proc/self/status`: the effective uid).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|uid| uid == "0"))
        })
        .unwrap_or(false)
}

/// Fails the test with `hint` when `tool ARG` does not run and exit 0 (a tool the test
/// needs is missing: `scripts/install-test-deps` installs them).
pub fn require_tool(tool: &str, arg: &str, hint: &str) {
    let ok = Command::new(tool)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "{tool} is not installed: {hint}");
}
