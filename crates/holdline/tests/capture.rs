//! SIP capture (HEP v3, `[capture]`) end to end, decoded by real decoders:
//!
//! ```text
//!  holdline load uac ─UDP/TCP─> holdline serve ─UDP─> holdline load uas
//!                                   │ [capture] hep = udp:127.0.0.1:H, agent_id, password
//!                                   v
//!   the test's collector on H: every datagram decoded by the `hep` crate (a third-party
//!   HEP parser: agent id, key, family, protocol, addresses, ports, time, payload) and
//!   forwarded to ──> sngrep -L udp:127.0.0.1:S (its HEP listener, password checked)
//!                      -O capture.pcap ──> tshark -r: SIP methods, Call-IDs, addresses, ports
//! ```
//!
//! Needs sngrep and tshark (`scripts/install-test-deps`); `HOLDLINE_SKIP_CAPTURE=1` skips.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{Guard, Holdline, free_port, require_tool};

fn s(v: &str) -> String {
    v.to_owned()
}

/// Whether to run: false (with a note) under `HOLDLINE_SKIP_CAPTURE`; a missing sngrep or
/// tshark otherwise fails the test.
fn tools_available() -> bool {
    if std::env::var_os("HOLDLINE_SKIP_CAPTURE").is_some() {
        eprintln!("SKIPPED: HOLDLINE_SKIP_CAPTURE is set");
        return false;
    }
    for (tool, arg) in [("sngrep", "-V"), ("tshark", "-v")] {
        require_tool(
            tool,
            arg,
            "scripts/install-test-deps, or apt-get install sngrep tshark (or set HOLDLINE_SKIP_CAPTURE=1)",
        );
    }
    true
}

/// One HEP packet as the `hep` crate decoded it, with the time the collector got it.
struct Decoded {
    chunk: hep::Chunk,
    got: f64,
}

/// The test's collector: receives the server's HEP datagrams on `port`, decodes each with
/// the `hep` crate and forwards it unchanged to `forward` (sngrep).
struct Collector {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Decoded>>,
    count: Arc<std::sync::atomic::AtomicU64>,
}

impl Collector {
    fn start(port: u16, forward: SocketAddr) -> Self {
        let sock = UdpSocket::bind(("127.0.0.1", port)).expect("bind the collector");
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (stop2, count2) = (stop.clone(), count.clone());
        let thread = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = vec![0u8; 65_536];
            while !stop2.load(Ordering::Relaxed) {
                let Ok((n, _)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                sock.send_to(&buf[..n], forward).expect("forward to sngrep");
                let chunk = hep::parse_packet(&buf[..n]).expect("a HEP packet");
                got.push(Decoded {
                    chunk,
                    got: now_secs(),
                });
                count2.fetch_add(1, Ordering::Relaxed);
            }
            got
        });
        Self {
            stop,
            thread,
            count,
        }
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn finish(self) -> Vec<Decoded> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("collector thread")
    }
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
}

/// sngrep listening for HEP on `port` (password `pass`), writing what it decoded to `pcap`.
fn start_sngrep(dir: &Path, port: u16, pass: &str, pcap: &Path) -> Guard {
    let conf = dir.join("sngrep.conf");
    std::fs::write(&conf, format!("set eep.listen.pass {pass}\n")).expect("sngrep config");
    let child = Command::new("sngrep")
        .arg("-f")
        .arg(&conf)
        .args(["-N", "-q", "-L", &format!("udp:127.0.0.1:{port}"), "-O"])
        .arg(pcap)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sngrep");
    let guard = Guard(child);
    common::wait_udp_bound(port, Duration::from_secs(10));
    guard
}

/// Stops sngrep by its PID with SIGINT (it writes its pcap out) and waits for it.
fn stop_sngrep(mut g: Guard) {
    let st = Command::new("kill")
        .args(["-INT", &g.0.id().to_string()])
        .status()
        .expect("kill");
    assert!(st.success());
    g.wait_for(Duration::from_secs(10))
        .expect("sngrep exits on SIGINT");
}

/// One SIP message as tshark read it from sngrep's pcap.
#[derive(Debug)]
struct Row {
    src: String,
    dst: String,
    sport: u16,
    dport: u16,
    method: String,
    status: String,
    call_id: String,
    cseq_method: String,
}

/// The SIP messages in `pcap`, read by tshark (SIP decoded on `ports`, UDP and TCP).
fn tshark_rows(pcap: &Path, ports: &[u16]) -> Vec<Row> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(pcap);
    for p in ports {
        cmd.args(["-d", &format!("udp.port=={p},sip")]);
        cmd.args(["-d", &format!("tcp.port=={p},sip")]);
    }
    cmd.args(["-Y", "sip", "-T", "fields", "-E", "separator=|"]);
    for f in [
        "ip.src",
        "ip.dst",
        "udp.srcport",
        "udp.dstport",
        "tcp.srcport",
        "tcp.dstport",
        "sip.Method",
        "sip.Status-Code",
        "sip.Call-ID",
        "sip.CSeq.method",
    ] {
        cmd.args(["-e", f]);
    }
    let out = cmd.stderr(Stdio::null()).output().expect("run tshark");
    assert!(out.status.success(), "tshark: {:?}", out.status);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let c: Vec<&str> = l.split('|').collect();
            assert_eq!(c.len(), 10, "{l}");
            let tcp = !c[4].is_empty();
            let port = |u: &str, t: &str| if tcp { t } else { u }.parse::<u16>().expect(l);
            Row {
                src: c[0].into(),
                dst: c[1].into(),
                sport: port(c[2], c[4]),
                dport: port(c[3], c[5]),
                method: c[6].into(),
                status: c[7].into(),
                call_id: c[8].into(),
                cseq_method: c[9].into(),
            }
        })
        .collect()
}

fn header<'a>(msg: &'a str, name: &str) -> &'a str {
    msg.lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then_some(v.trim())
        })
        .unwrap_or("")
}

/// The scene: a server with `capture` (the `[capture]` table's lines) between a caller and
/// a callee, a collector and sngrep. Returns the running pieces.
struct Scene {
    dir: tempfile::TempDir,
    proxy: u16,
    uas: u16,
    metrics: SocketAddr,
    server: Holdline,
    uas_load: Guard,
    collector: Collector,
    sngrep: Guard,
    pcap: std::path::PathBuf,
}

fn scene(capture: &str, calls: u64) -> Scene {
    let dir = tempfile::tempdir().expect("tempdir");
    let (proxy, uas, hep_port, sng, mport) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let pcap = dir.path().join("capture.pcap");
    let sngrep = start_sngrep(dir.path(), sng, "s3cret", &pcap);
    let collector = Collector::start(hep_port, ([127, 0, 0, 1], sng).into());
    let conf = dir.path().join("holdline.toml");
    std::fs::write(
        &conf,
        format!(
            "listen = [\"udp:127.0.0.1:{proxy}\", \"tcp:127.0.0.1:{proxy}\"]\n\
             workers = 2\nstore = \"memory\"\nmetrics = \"127.0.0.1:{mport}\"\n\
             [capture]\nhep = \"udp:127.0.0.1:{hep_port}\"\nagent_id = 4242\n\
             password = \"s3cret\"\n{capture}\n"
        ),
    )
    .expect("config");
    let server = Holdline::start(&[
        format!("--config={}", conf.display()),
        s("--route"),
        format!("*=udp:127.0.0.1:{uas}"),
    ]);
    let uas_load = common::load(&[
        s("uas"),
        s("--listen"),
        format!("127.0.0.1:{uas}"),
        s("--calls"),
        calls.to_string(),
        s("--max-time"),
        s("60"),
        s("--progress"),
        s("off"),
    ]);
    common::wait_udp_bound(uas, Duration::from_secs(10));
    Scene {
        dir,
        proxy,
        uas,
        metrics: ([127, 0, 0, 1], mport).into(),
        server,
        uas_load,
        collector,
        sngrep,
        pcap,
    }
}

impl Scene {
    /// The scheduling policy of the server's capture thread (`/proc/PID/task/*/stat` field
    /// 41: 0 `SCHED_OTHER`, 5 `SCHED_IDLE`).
    fn capture_policy(&self) -> u32 {
        let tasks = format!("/proc/{}/task", self.server.pid());
        for t in std::fs::read_dir(&tasks).expect("tasks").flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if comm.trim() != "holdline-captur" {
                continue;
            }
            let stat = std::fs::read_to_string(t.path().join("stat")).expect("stat");
            // Fields after the command's closing parenthesis start at field 3.
            let rest = &stat[stat.rfind(')').expect("stat") + 1..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            return f[41 - 3].parse().expect("policy");
        }
        panic!("no capture thread in {tasks}");
    }

    /// `calls` calls from `from` over `transport`, all of which must complete.
    fn calls(&self, transport: &str, from: &str, calls: u64) {
        let json = self.dir.path().join(format!("uac-{transport}-{from}.json"));
        let v = common::run_load_report(
            &[
                s("uac"),
                s("--target"),
                format!("127.0.0.1:{}", self.proxy),
                s("--transport"),
                s(transport),
                s("--from"),
                s(from),
                s("--rate"),
                s("20"),
                s("--calls"),
                calls.to_string(),
                s("--progress"),
                s("off"),
                s("--json"),
                json.display().to_string(),
            ],
            &json,
            Duration::from_secs(60),
        );
        assert_eq!(v["calls_completed"], calls, "{transport}: {v}");
    }

    /// Waits (bounded) until the server's counters settle (every message it received and
    /// sent is sent to the collector, skipped or dropped) and the collector has every packet
    /// sent, then stops everything; returns the `hep` crate's packets, tshark's rows and the
    /// server's last metrics.
    fn finish(self) -> (Vec<Decoded>, Vec<Row>, String) {
        let deadline = Instant::now() + Duration::from_secs(15);
        let metrics = loop {
            let m = common::scrape(self.metrics);
            let seen = common::metric(&m, "holdline_messages_in_total", &[])
                + common::metric(&m, "holdline_messages_out_total", &[]);
            let sent = common::metric(&m, "holdline_capture_sent_total", &[]);
            let done = sent
                + common::metric(&m, "holdline_capture_skipped_total", &[])
                + common::metric(&m, "holdline_capture_dropped_total", &[]);
            if done == seen && self.collector.count() == sent as u64 {
                break m;
            }
            assert!(
                Instant::now() < deadline,
                "collector got {} packets:\n{m}",
                self.collector.count()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let decoded = self.collector.finish();
        stop_sngrep(self.sngrep);
        drop(self.uas_load);
        let (status, _) = self.server.terminate();
        assert!(status.success(), "{status:?}");
        let rows = tshark_rows(&self.pcap, &[self.proxy, self.uas]);
        (decoded, rows, metrics)
    }
}

/// Every message of 20 UDP calls and 20 TCP calls is captured once, as the server received
/// or sent it; the `hep` crate reads the agent id, the password, the addresses, ports,
/// transports and times; sngrep accepts every packet (its password check) and tshark reads
/// the same SIP messages back out of sngrep's pcap.
#[test]
fn every_message_is_captured_and_read_back_by_sngrep_and_tshark() {
    let _one_run_at_a_time = common::sipp_lock();
    if !tools_available() {
        return;
    }
    let t0 = now_secs();
    let sc = scene("", 40);
    let (proxy, uas) = (sc.proxy, sc.uas);
    sc.calls("udp", "alice", 20);
    sc.calls("tcp", "bob", 20);
    assert_eq!(
        sc.capture_policy(),
        5,
        "priority background (default): SCHED_IDLE"
    );
    // Every message the server counted (in + out) arrives at the collector, no more.
    let (decoded, rows, text) = sc.finish();
    let t1 = now_secs();
    let total = (common::metric(&text, "holdline_messages_in_total", &[])
        + common::metric(&text, "holdline_messages_out_total", &[])) as u64;
    assert_eq!(decoded.len() as u64, total, "{text}");
    assert_eq!(
        common::metric(&text, "holdline_capture_skipped_total", &[]),
        0.0
    );
    assert_eq!(
        common::metric(&text, "holdline_capture_dropped_total", &[]),
        0.0
    );
    // 40 calls: INVITE, 100, 180, 200, ACK, BYE, 200 on each side at least.
    assert!(total >= 40 * 13, "{total}");

    // The hep crate's reading of every packet.
    let mut by_call: BTreeMap<String, Vec<(&Decoded, String)>> = BTreeMap::new();
    for d in &decoded {
        let c = &d.chunk;
        assert_eq!(c.capture_agent_id, 4242);
        assert_eq!(c.authenticate_key, "s3cret");
        assert_eq!(c.ip_protocol_family, 2, "IPv4");
        assert_eq!(c.ipv4_src_address, std::net::Ipv4Addr::LOCALHOST);
        assert_eq!(c.ipv4_dst_address, std::net::Ipv4Addr::LOCALHOST);
        assert!(
            matches!(c.proto_type, hep::CapProtoType::Sip),
            "{:?}",
            c.proto_type
        );
        let at = f64::from(c.timestamp_seconds) + f64::from(c.timestamp_micro_seconds_offset) / 1e6;
        assert!(
            at >= t0 - 1.0 && at <= t1 && at <= d.got + 0.001,
            "{at} {t0} {t1}"
        );
        // One end is the server's listener, or (towards the callee) the callee.
        assert!(
            c.proto_src_port == proxy || c.proto_dst_port == proxy || c.proto_dst_port == uas,
            "{}:{}",
            c.proto_src_port,
            c.proto_dst_port
        );
        let call_id = header(&c.packet_payload, "Call-ID").to_owned();
        assert!(!call_id.is_empty(), "{}", c.packet_payload);
        let first = c.packet_payload.lines().next().unwrap_or("").to_owned();
        by_call.entry(call_id).or_default().push((d, first));
    }
    assert_eq!(by_call.len(), 40, "one Call-ID per call");
    let mut tcp_calls = 0;
    for (call_id, msgs) in &by_call {
        let has = |start: &str, to_callee: bool| {
            msgs.iter().any(|(d, first)| {
                first.starts_with(start) && (d.chunk.proto_dst_port == uas) == to_callee
            })
        };
        for m in ["INVITE ", "ACK ", "BYE "] {
            assert!(has(m, false), "{call_id}: {m} received");
            assert!(has(m, true), "{call_id}: {m} forwarded");
        }
        assert!(
            msgs.iter()
                .filter(|(_, f)| f.starts_with("SIP/2.0 200"))
                .count()
                >= 4,
            "{call_id}: the 200s of INVITE and BYE, both sides"
        );
        // The caller's side is TCP for bob's calls, the callee's side always UDP.
        let invite_in = msgs
            .iter()
            .find(|(d, f)| f.starts_with("INVITE ") && d.chunk.proto_dst_port == proxy)
            .map(|(d, _)| d.chunk.ip_protocol_id);
        let from_bob = msgs
            .iter()
            .any(|(d, _)| header(&d.chunk.packet_payload, "From").contains("bob@"));
        assert_eq!(invite_in, Some(if from_bob { 6 } else { 17 }), "{call_id}");
        tcp_calls += usize::from(from_bob);
        assert!(
            msgs.iter()
                .filter(|(d, _)| d.chunk.proto_dst_port == uas || d.chunk.proto_src_port == uas)
                .all(|(d, _)| d.chunk.ip_protocol_id == 17),
            "{call_id}: the callee's side is UDP"
        );
    }
    assert_eq!(tcp_calls, 20);

    // sngrep took every packet (right password) and tshark reads the same messages.
    assert_eq!(rows.len(), decoded.len(), "sngrep -> tshark rows");
    let ids: BTreeSet<&str> = rows.iter().map(|r| r.call_id.as_str()).collect();
    assert_eq!(ids, by_call.keys().map(String::as_str).collect());
    for r in &rows {
        assert_eq!((r.src.as_str(), r.dst.as_str()), ("127.0.0.1", "127.0.0.1"));
        assert!(
            r.sport == proxy || r.dport == proxy || r.dport == uas,
            "{r:?}"
        );
        assert!(!r.method.is_empty() || !r.status.is_empty(), "{r:?}");
        assert!(!r.cseq_method.is_empty(), "{r:?}");
    }
    let count = |f: &dyn Fn(&Row) -> bool| rows.iter().filter(|r| f(r)).count();
    assert_eq!(count(&|r| r.method == "INVITE" && r.dport == proxy), 40);
    assert_eq!(count(&|r| r.method == "INVITE" && r.dport == uas), 40);
    assert_eq!(count(&|r| r.method == "BYE" && r.dport == uas), 40);
    // (sngrep writes every message into its pcap as UDP, whatever the HEP packet's
    // protocol: the transport is checked on the hep crate's reading above.)
    // Timestamps are the capture's, not sngrep's arrival time: none after the collector's.
    assert!(decoded.iter().all(|d| d.got >= t0));
}

/// `users = ["carol"]`: only carol's calls are captured, every message of them; the rest
/// are counted as skipped.
#[test]
fn only_the_calls_of_the_matching_users_are_captured() {
    let _one_run_at_a_time = common::sipp_lock();
    if !tools_available() {
        return;
    }
    let sc = scene("users = [\"carol\"]\npriority = \"normal\"", 20);
    sc.calls("udp", "carol", 10);
    sc.calls("udp", "dave", 10);
    assert_eq!(sc.capture_policy(), 0, "priority = \"normal\": SCHED_OTHER");
    let (decoded, rows, m) = sc.finish();
    let sent = common::metric(&m, "holdline_capture_sent_total", &[]) as u64;
    let skipped = common::metric(&m, "holdline_capture_skipped_total", &[]) as u64;
    assert_eq!(decoded.len() as u64, sent);
    let calls: BTreeSet<String> = decoded
        .iter()
        .map(|d| header(&d.chunk.packet_payload, "Call-ID").to_owned())
        .collect();
    assert_eq!(calls.len(), 10, "carol's calls");
    assert!(
        decoded
            .iter()
            .all(|d| header(&d.chunk.packet_payload, "From").contains("carol@"))
    );
    // About as many messages were left out (dave's calls) as were captured.
    assert!(
        skipped * 10 >= sent * 8 && skipped * 10 <= sent * 12,
        "{sent} {skipped}"
    );
    assert_eq!(rows.len() as u64, sent);
}
