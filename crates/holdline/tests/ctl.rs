//! `holdline ctl` end to end, with real processes: `holdline serve` with a configuration
//! file and its control socket, `holdline load` as callers, answerers and registering
//! phones, and the `holdline ctl` binary itself.
//!
//! - Under load (`HOLDLINE_CTL_TEST_RATE` calls/s, default 2,000, which the debug build
//!   sustains on two shared cores; lower it on a slower machine):
//!   10 reloads that change the route (between two answering UASes) and the overload
//!   settings, one refused broken file (the reply names file, line and key; the server
//!   keeps serving), then `ctl drain`: no call fails but those the drain turned away (503),
//!   both UASes answered calls, the server exits by itself after flushing its store.
//! - `ctl bindings` sees the registrations `holdline load register` made, `remove` removes
//!   one; the socket is mode 0600; SIGHUP reloads; errors say what to do; SIGTERM drains: a
//!   REGISTER during the drain gets 503 with `Retry-After` and a maintenance `Reason`.
//!
//! Every process is bounded (`--duration`, `--max-time`) and stopped by PID when a test
//! fails.

mod common;

use std::net::UdpSocket;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{BIN, Holdline, free_port};

fn s(v: &str) -> String {
    v.to_owned()
}

/// `holdline ctl --socket SOCKET ARGS`, bounded by the client's own timeout.
fn ctl(socket: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("ctl")
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .expect("run holdline ctl")
}

/// `holdline ctl --json ...`: the exit status and the reply.
fn ctl_json(socket: &Path, args: &[&str]) -> (bool, serde_json::Value) {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    let out = ctl(socket, &a);
    let text = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "ctl {args:?}: not JSON ({e}): {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.success(), v)
}

/// Waits (bounded) until something holds UDP `port` on 127.0.0.1.
fn wait_port_taken(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while UdpSocket::bind(("127.0.0.1", port)).is_ok() {
        assert!(Instant::now() < deadline, "nothing bound udp port {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The configuration of the tests' server: UDP on `port`, every request routed to `uas`,
/// overload control with the given occupancy target and gate.
fn config(dir: &Path, port: u16, uas: u16, occupancy: f64, gate_ms: u64, idle_ms: u64) -> String {
    format!(
        "listen = [\"udp:127.0.0.1:{port}\"]\n\
         workers = 2\n\
         domains = [\"example.com\"]\n\
         data_dir = \"{dir}\"\n\
         ctl_socket = \"{dir}/ctl.sock\"\n\
         shutdown_grace_ms = 500\n\
         drain_grace_s = 30\n\
         drain_idle_ms = {idle_ms}\n\
         [[routes]]\n\
         domain = \"*\"\n\
         target = \"udp:127.0.0.1:{uas}\"\n\
         [overload]\n\
         target_occupancy = {occupancy}\n\
         queue_gate_ms = {gate_ms}\n",
        dir = dir.display()
    )
}

fn total(v: &serde_json::Value, key: &str) -> u64 {
    v["totals"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("no totals.{key}"))
}

/// Under load: 10 reloads switching the route between two UASes and changing the overload
/// settings, a broken file refused, then a drain: no call fails but those the drain turned
/// away.
#[test]
fn reloads_and_a_drain_under_load_fail_no_call() {
    let _one_run_at_a_time = common::sipp_lock();
    let rate: u32 = std::env::var("HOLDLINE_CTL_TEST_RATE")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(2000);
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, uas_a, uas_b) = (free_port(), free_port(), free_port());
    let file = dir.path().join("holdline.toml");
    // The drain ends 6 s after the last request in progress: after the load's last arrival
    // (2 s after the drain by the test's clock; a generator starved of CPU runs late).
    let idle_ms = 6000;
    std::fs::write(&file, config(dir.path(), port, uas_a, 0.9, 20, idle_ms)).expect("write");
    let duration_s = 14;
    let mut uases = Vec::new();
    for (name, p) in [("a", uas_a), ("b", uas_b)] {
        let json = dir.path().join(format!("uas-{name}.json"));
        uases.push((
            json.clone(),
            common::load(&[
                s("uas"),
                s("--listen"),
                format!("127.0.0.1:{p}"),
                s("--max-time"),
                format!("{}", duration_s + 30),
                s("--progress"),
                s("off"),
                s("--json"),
                json.display().to_string(),
            ]),
        ));
        wait_port_taken(p);
    }
    let server = Holdline::start(&[s("--config"), file.display().to_string()]);
    let socket = dir.path().join("ctl.sock");
    let mode = std::fs::metadata(&socket)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "control socket mode {mode:o}");
    let uac_json = dir.path().join("uac.json");
    let mut uac = common::load(&[
        s("uac"),
        s("--target"),
        format!("127.0.0.1:{port}"),
        s("--rate"),
        rate.to_string(),
        s("--duration"),
        duration_s.to_string(),
        s("--arrivals"),
        s("constant"),
        // Calls last a second: reloads and the drain happen with calls up, whose BYEs
        // (record-routed through the server) must get through.
        s("--hold"),
        s("fixed:1"),
        // A domain the server does not serve: the static route carries the calls.
        s("--to"),
        s("user{0..9999}@pstn.test"),
        s("--drain"),
        s("20"),
        s("--progress"),
        s("off"),
        s("--json"),
        uac_json.display().to_string(),
    ]);
    let start = Instant::now();
    // 10 reloads, one every 0.9 s from 1 s on: the route alternates between the UASes, the
    // overload settings change every time.
    for i in 1..=10u32 {
        let at = Duration::from_millis(100 + 900 * u64::from(i));
        // Paces the reloads through the load (not a synchronisation).
        std::thread::sleep(at.saturating_sub(start.elapsed()));
        let uas = if i % 2 == 1 { uas_b } else { uas_a };
        let occupancy = if i % 2 == 1 { 0.95 } else { 0.9 };
        let gate = 20 + u64::from(i);
        std::fs::write(
            &file,
            config(dir.path(), port, uas, occupancy, gate, idle_ms),
        )
        .expect("write");
        let (ok, r) = ctl_json(&socket, &["reload"]);
        assert!(ok, "reload {i}: {r}");
        assert_eq!(r["config_generation"], i, "reload {i}: {r}");
        assert_eq!(r["workers_applied"], 2, "reload {i}: {r}");
        assert_eq!(
            r["applied"],
            serde_json::json!(["routes", "overload"]),
            "{r}"
        );
        assert_eq!(r["needs_restart"], serde_json::json!([]), "{r}");
        let (_, routes) = ctl_json(&socket, &["routes"]);
        assert_eq!(
            routes["routes"][0]["target"],
            format!("udp:127.0.0.1:{uas}"),
            "{routes}"
        );
        if i == 5 {
            // A broken file (and a listener change beside it) is refused whole.
            let good = std::fs::read_to_string(&file).expect("read");
            std::fs::write(&file, good.replace("target_occupancy", "target_ocupancy"))
                .expect("write");
            let (ok, r) = ctl_json(&socket, &["reload"]);
            assert!(!ok, "a broken file is refused: {r}");
            assert_eq!(r["file"], file.display().to_string(), "{r}");
            assert_eq!(r["key"], "overload.target_ocupancy", "{r}");
            assert_eq!(r["line"], 13, "{r}");
            let out = ctl(&socket, &["reload"]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains(&format!(
                    "{}:13: key `overload.target_ocupancy`",
                    file.display()
                )) && err.contains("the running configuration stays"),
                "{err}"
            );
            let (_, st) = ctl_json(&socket, &["status"]);
            assert_eq!(st["config_generation"], i, "nothing applied: {st}");
            std::fs::write(&file, good).expect("write");
        }
    }
    // A listener change is reported as needing a restart, and not applied.
    let moved = config(dir.path(), port, uas_a, 0.9, 20, idle_ms)
        .replace(&format!("127.0.0.1:{port}\"]"), "127.0.0.1:1\"]");
    std::fs::write(&file, moved).expect("write");
    let (ok, r) = ctl_json(&socket, &["reload"]);
    assert!(ok, "{r}");
    assert_eq!(r["needs_restart"], serde_json::json!(["listen"]), "{r}");
    // The drain two seconds before the last arrival.
    let drain_at = Duration::from_secs(duration_s - 2);
    std::thread::sleep(drain_at.saturating_sub(start.elapsed()));
    let (ok, r) = ctl_json(&socket, &["drain"]);
    assert!(ok && r["draining"] == true, "{r}");
    let (_, st) = ctl_json(&socket, &["status"]);
    assert_eq!(st["draining"], true, "{st}");
    let status = uac
        .wait_for(Duration::from_secs(u64::from(duration_s as u32) + 40))
        .expect("holdline load uac stops by itself");
    assert!(status.success(), "uac: {status:?}");
    let (status, rest) = server.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "serve: {status:?}\n{rest}");
    assert!(
        rest.contains("drained (nothing in progress)") && rest.contains("store flushed"),
        "{rest}"
    );
    assert!(!socket.exists(), "the control socket is removed at exit");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&uac_json).expect("uac report"))
            .expect("json");
    let attempted = total(&v, "attempted");
    let r503 = total(&v, "r503");
    eprintln!(
        "rate {rate}/s: attempted {attempted}, ok {}, turned away by the drain {r503}, failed {}",
        total(&v, "calls_ok"),
        total(&v, "calls_failed")
    );
    assert!(
        attempted >= u64::from(rate) * (duration_s - 1),
        "the load ran: {attempted}"
    );
    assert!(r503 > 0, "the drain turned calls away: {v}");
    assert_eq!(total(&v, "timeouts"), 0, "{v}");
    assert_eq!(total(&v, "r_fail_other"), 0, "{v}");
    assert_eq!(
        total(&v, "calls_failed"),
        r503,
        "every failed call is one the drain turned away"
    );
    assert_eq!(total(&v, "calls_ok") + r503, attempted, "{v}");
    for (json, mut guard) in uases {
        let _ = Command::new("kill")
            .args(["-INT", &guard.0.id().to_string()])
            .status();
        let _ = guard.wait_for(Duration::from_secs(10));
        let u: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).expect("uas report"))
                .expect("json");
        assert!(
            total(&u, "completed") > u64::from(rate),
            "both routes carried calls: {}",
            json.display()
        );
    }
}

/// One REGISTER for `user@example.com` from `sock` to `to`; the response's text.
fn register(sock: &UdpSocket, to: std::net::SocketAddr, user: &str) -> String {
    let me = sock.local_addr().expect("addr");
    let msg = format!(
        "REGISTER sip:example.com SIP/2.0\r\n\
         Via: SIP/2.0/UDP {me};branch=z9hG4bK-{user}-{n}\r\n\
         Max-Forwards: 70\r\n\
         From: <sip:{user}@example.com>;tag=1\r\n\
         To: <sip:{user}@example.com>\r\n\
         Call-ID: reg-{user}-{n}\r\n\
         CSeq: 1 REGISTER\r\n\
         Contact: <sip:{user}@{me}>\r\n\
         Expires: 600\r\n\
         Content-Length: 0\r\n\r\n",
        n = std::process::id()
    );
    sock.send_to(msg.as_bytes(), to).expect("send");
    let mut buf = [0u8; 4096];
    sock.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let n = sock.recv(&mut buf).expect("a response");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// `ctl bindings` sees and removes registrations; the socket is 0600; SIGHUP reloads;
/// errors say what to do; SIGTERM drains (a REGISTER meanwhile gets 503 Maintenance).
#[test]
fn bindings_reload_by_signal_errors_and_a_drain_on_sigterm() {
    // Not beside the load test: on two cores its generator would run late.
    let _one_run_at_a_time = common::sipp_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, uas) = (free_port(), free_port());
    let file = dir.path().join("holdline.toml");
    std::fs::write(&file, config(dir.path(), port, uas, 0.9, 20, 3000)).expect("write");
    let server = Holdline::start(&[s("--config"), file.display().to_string()]);
    let socket = dir.path().join("ctl.sock");
    let mode = std::fs::metadata(&socket)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "control socket mode {mode:o}");
    assert!(
        server
            .startup_line("holdline: control socket ")
            .is_some_and(|l| l.contains(&socket.display().to_string())),
        "{}",
        server.startup
    );
    let json = dir.path().join("reg.json");
    let v = common::run_load_report(
        &[
            s("register"),
            s("--target"),
            format!("127.0.0.1:{port}"),
            s("--users"),
            s("user{0..9}@example.com"),
            s("--rate"),
            s("100"),
            s("--progress"),
            s("off"),
            s("--json"),
            json.display().to_string(),
        ],
        &json,
        Duration::from_secs(30),
    );
    assert_eq!(v["register_by_code"]["200"], 10, "{v}");
    let (ok, r) = ctl_json(&socket, &["bindings", "list"]);
    assert!(ok, "{r}");
    let aors: Vec<String> = (0..10).map(|i| format!("user{i}@example.com")).collect();
    assert_eq!(r["aors"], serde_json::json!(aors), "{r}");
    let (_, r) = ctl_json(&socket, &["bindings", "list", "--prefix", "user3"]);
    assert_eq!(r["aors"], serde_json::json!(["user3@example.com"]), "{r}");
    let (ok, r) = ctl_json(&socket, &["bindings", "show", "sip:user3@example.com"]);
    assert!(ok, "{r}");
    assert_eq!(r["bindings"].as_array().map(Vec::len), Some(1), "{r}");
    let out = ctl(&socket, &["bindings", "show", "user3@example.com"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("user3@example.com: 1 binding(s)"),
        "{text}"
    );
    let (ok, r) = ctl_json(&socket, &["bindings", "remove", "user3@example.com"]);
    assert!(ok && r["removed"] == 1, "{r}");
    let (_, r) = ctl_json(&socket, &["bindings", "show", "user3@example.com"]);
    assert_eq!(r["bindings"], serde_json::json!([]), "{r}");
    let (_, r) = ctl_json(&socket, &["bindings", "list"]);
    assert_eq!(r["aors"].as_array().map(Vec::len), Some(9), "{r}");
    let out = ctl(&socket, &["bindings", "remove", "user3@example.com"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no bindings for user3@example.com"), "{err}");
    // Status.
    let (ok, st) = ctl_json(&socket, &["status"]);
    assert!(ok, "{st}");
    assert_eq!(st["workers"].as_array().map(Vec::len), Some(2), "{st}");
    assert_eq!(st["store"]["kind"], "persistent", "{st}");
    assert_eq!(st["store"]["bindings"], 9, "{st}");
    assert!(st["summary"]["messages_in"].as_f64() >= Some(10.0), "{st}");
    assert!(
        st["uptime_s"].is_number() && st["draining"] == false,
        "{st}"
    );
    let (ok, nh) = ctl_json(&socket, &["next-hops"]);
    assert!(ok && nh["probing"]["interval_ms"].is_number(), "{nh}");
    // Log level: a bad filter is refused with an example, a good one taken.
    let out = ctl(&socket, &["log-level", "info,[bad"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("e.g. `info`"),
        "{out:?}"
    );
    assert!(ctl(&socket, &["log-level", "debug"]).status.success());
    // SIGHUP reloads the file like `ctl reload`.
    let other = free_port();
    std::fs::write(&file, config(dir.path(), port, other, 0.9, 20, 3000)).expect("write");
    let sent = Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    let line = server.wait_line("holdline: reload (SIGHUP)", Duration::from_secs(10));
    assert!(line.contains("\"applied\":[\"routes\"]"), "{line}");
    let (_, r) = ctl_json(&socket, &["routes"]);
    assert_eq!(
        r["routes"][0]["target"],
        format!("udp:127.0.0.1:{other}"),
        "{r}"
    );
    // The registrations are untouched by the reload.
    let (_, r) = ctl_json(&socket, &["bindings", "list"]);
    assert_eq!(r["aors"].as_array().map(Vec::len), Some(9), "{r}");
    // The human form of the status names the workers and the controllers.
    let out = ctl(&socket, &["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && text.contains("configuration generation 1")
            && text.contains("store: persistent (9 bindings)")
            && text.contains("controller local: worker 0 occ acceptance"),
        "{text}"
    );
    // Nothing listening: the error says what to do.
    let nowhere = dir.path().join("nowhere.sock");
    let out = ctl(&nowhere, &["status"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("no server listening on {}", nowhere.display()))
            && err.contains("--ctl-socket"),
        "{err}"
    );
    // SIGTERM drains: a REGISTER is turned away with a maintenance reason and Retry-After.
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let to = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    assert!(register(&sock, to, "early").starts_with("SIP/2.0 200"));
    let sent = Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    server.wait_line("holdline: draining", Duration::from_secs(10));
    let reply = register(&sock, to, "late");
    assert!(reply.starts_with("SIP/2.0 503"), "{reply}");
    assert!(reply.contains("Retry-After: 30"), "{reply}");
    assert!(reply.contains("Maintenance: draining"), "{reply}");
    let (_, st) = ctl_json(&socket, &["status"]);
    assert_eq!(st["draining"], true, "{st}");
    assert_eq!(st["summary"]["drain_rejected"], 1.0, "{st}");
    let (status, rest) = server.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status:?}\n{rest}");
    assert!(rest.contains("drained (nothing in progress)"), "{rest}");
}

/// `ctl next-hops` shows each hash-route target's probing state: a target that answers up,
/// one that does not down; a reload that drops the dead one keeps the live one's state.
#[test]
fn next_hops_show_probed_targets_and_follow_a_reload() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, live, dead) = (free_port(), free_port(), free_port());
    let file = dir.path().join("holdline.toml");
    let write = |targets: &str| {
        std::fs::write(
            &file,
            format!(
                "listen = [\"udp:127.0.0.1:{port}\"]\nworkers = 2\nstore = \"memory\"\n\
                 data_dir = \"{dir}\"\n\
                 [[hash_routes]]\ndomain = \"*\"\ntargets = [{targets}]\n\
                 [probing]\ninterval_ms = 200\ntimeout_ms = 100\ndown_after = 2\n",
                dir = dir.path().display()
            ),
        )
        .expect("write");
    };
    write(&format!(
        "\"udp:127.0.0.1:{live}\", \"udp:127.0.0.1:{dead}\""
    ));
    let _uas = common::load(&[
        s("uas"),
        s("--listen"),
        format!("127.0.0.1:{live}"),
        s("--max-time"),
        s("30"),
        s("--progress"),
        s("off"),
    ]);
    wait_port_taken(live);
    let server = Holdline::start(&[s("--config"), file.display().to_string()]);
    let socket = dir.path().join("ctl.sock");
    let (live_key, dead_key) = (
        format!("udp 127.0.0.1:{live}"),
        format!("udp 127.0.0.1:{dead}"),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (ok, r) = ctl_json(&socket, &["next-hops"]);
        assert!(ok, "{r}");
        // Each worker probes on its own clock: the target reads down as soon as one worker
        // has seen it fail `down_after` times, and the other follows within an interval.
        if r["probed"][&dead_key]["state"] == "down"
            && r["probed"][&dead_key]["down_on_workers"] == 2
            && r["probed"][&live_key]["state"] == "up"
            && r["probed"][&live_key]["up_on_workers"] == 2
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "probing never told them apart on both workers: {r}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = ctl(&socket, &["next-hops"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with(&format!("udp:127.0.0.1:{dead}")) && l.contains("down")),
        "{text}"
    );
    // Drop the dead target: it leaves the probed set, the live one stays up.
    write(&format!("\"udp:127.0.0.1:{live}\""));
    let (ok, r) = ctl_json(&socket, &["reload"]);
    assert!(
        ok && r["applied"] == serde_json::json!(["hash_routes"]),
        "{r}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, r) = ctl_json(&socket, &["next-hops"]);
        if r["probed"].get(&dead_key).is_none() && r["probed"][&live_key]["state"] == "up" {
            assert_eq!(
                r["targets"],
                serde_json::json!([format!("udp:127.0.0.1:{live}")])
            );
            break;
        }
        assert!(Instant::now() < deadline, "the dropped target stays: {r}");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(server);
}

/// The control socket's file removed while the server runs (a data directory cleaned up,
/// a package purged): SIGINT still stops the server within its grace — the control thread's
/// blocking accept is woken by shutting the listener down, not by connecting to the path.
#[test]
fn the_server_stops_when_its_control_socket_file_is_gone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, uas) = (free_port(), free_port());
    let file = dir.path().join("holdline.toml");
    std::fs::write(&file, config(dir.path(), port, uas, 0.9, 20, 500)).expect("config");
    let server = Holdline::start(&[s("--config"), file.display().to_string()]);
    let sock = dir.path().join("ctl.sock");
    let (ok, _) = ctl_json(&sock, &["status"]);
    assert!(ok, "the control socket answers");
    std::fs::remove_file(&sock).expect("remove the socket file");
    let status = Command::new("kill")
        .args(["-INT", &server.pid().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let (status, rest) = server.wait_exit(Duration::from_secs(15));
    assert!(status.success(), "{status:?}\n{rest}");
}
