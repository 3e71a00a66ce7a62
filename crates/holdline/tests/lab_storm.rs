//! `holdline lab storm --quick` end to end: 20,000 new users at 4,000 REGISTER/s against one
//! worker with the default persistent store, the server killed with SIGKILL and restarted
//! twice during the storm. Checks that both drills happened (a new server each time, loading
//! from disk what the previous one had committed, the store growing between them), that the
//! acknowledged users were all found in the store afterwards, and that the CSV files and
//! plots were written. No speed is asserted. Skipped (with the reason printed) when `taskset`
//! is missing.

mod common;

use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use common::{BIN, Guard};

fn taskset_available() -> bool {
    Command::new("taskset")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `holdline lab storm ARGS` (stderr to `dir/stderr.txt`), bounded by `limit`; returns
/// its exit status and its stderr.
fn lab_storm(dir: &Path, args: &[&str], limit: Duration) -> (ExitStatus, String) {
    let err_path = dir.join("stderr.txt");
    let err = std::fs::File::create(&err_path).expect("stderr file");
    let child = Command::new(BIN)
        .args(["lab", "storm"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .expect("spawn holdline lab storm");
    let mut guard = Guard(child);
    let status = guard.wait_for(limit);
    let text = std::fs::read_to_string(&err_path).unwrap_or_default();
    let status = status.unwrap_or_else(|| panic!("holdline lab storm still running:\n{text}"));
    (status, text)
}

#[test]
fn quick_storm_survives_two_kill_9_drills_without_losing_an_acknowledged_binding() {
    if !taskset_available() {
        eprintln!("SKIPPED: taskset not found (apt-get install util-linux)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("storm");
    let out_s = out.display().to_string();
    let (status, err) = lab_storm(
        dir.path(),
        &["--quick", "--out", &out_s],
        Duration::from_secs(90),
    );
    assert!(status.success(), "{status:?}\n{err}");
    assert!(
        err.contains("storm 4000-udp-persistent: t="),
        "progress is shown:\n{err}"
    );

    let text = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["experiment"], "storm");
    assert_eq!(v["durability"], "commit");
    assert_eq!(v["bindings_lost"], 0, "{}", v["bindings_lost"]);
    let storms = v["storms"].as_array().expect("storms");
    assert_eq!(storms.len(), 1);
    let s = &storms[0];
    assert_eq!(s["users"], 20_000);
    assert_eq!(s["checked"], true);
    assert_eq!(s["bindings_lost"], 0, "lost: {}", s["lost_examples"]);
    assert_eq!(s["drills_planned"], 2);
    // Every user got its 200, also those whose REGISTER was committed just before a kill
    // and retransmitted to the restarted server (a replay, answered 200: before the
    // registrar knew replays, a few per run got `500 Out-of-Order` and were stored without
    // an acknowledgement).
    assert_eq!(s["acknowledged"], 20_000, "{}", s["by_code"]);
    assert_eq!(s["stored_not_acknowledged"], 0, "{s}");

    // Both drills happened: the server was killed and a new one (another PID) came back on
    // the same store with what the killed one had committed, and the store kept growing.
    let drills = s["drills"].as_array().expect("drills");
    assert_eq!(drills.len(), 2, "{}", s["drills"]);
    let num = |d: &serde_json::Value, k: &str| {
        d[k].as_f64()
            .unwrap_or_else(|| panic!("{k} not a number in {d}"))
    };
    let mut last_kill = 0.0;
    for d in drills {
        assert_ne!(d["pid_killed"], d["pid_restarted"], "{d}");
        assert!(num(d, "killed_at_s") > last_kill, "{d}");
        last_kill = num(d, "killed_at_s");
        assert!(num(d, "restart_s") > 0.0, "{d}");
        assert!(num(d, "bindings_before_kill") > 0.0, "{d}");
        assert!(num(d, "loaded") > 0.0, "the restart loaded the store: {d}");
        assert!(num(d, "bindings_after_restart") >= num(d, "loaded"), "{d}");
    }
    assert!(
        num(&drills[1], "loaded") > num(&drills[0], "loaded"),
        "the store grew between the drills: {}",
        s["drills"]
    );
    let acknowledged = num(s, "acknowledged");
    assert!(
        acknowledged > num(&drills[1], "loaded"),
        "registrations were acknowledged after the last restart: {acknowledged}, {}",
        s["drills"]
    );
    assert!(
        err.contains("drill 1/2") && err.contains("drill 2/2"),
        "the drills are shown:\n{err}"
    );

    // Per-second series and the files.
    assert!(
        s["per_second"].as_array().is_some_and(|a| a.len() >= 3),
        "{}",
        s["per_second"]
    );
    assert!(s["samples"].as_array().is_some_and(|a| a.len() >= 3));
    for key in ["register_p50_ms", "register_p99_ms", "rss_max_mb"] {
        assert!(num(s, key) > 0.0, "{key} in {s}");
    }
    let storm_csv = std::fs::read_to_string(out.join("storm.csv")).expect("storm.csv");
    assert!(storm_csv.starts_with("rate,t_s,sent,ok_200,rejected_5xx"));
    assert!(storm_csv.lines().count() >= 4, "{storm_csv}");
    let drills_csv = std::fs::read_to_string(out.join("drills.csv")).expect("drills.csv");
    assert_eq!(drills_csv.lines().count(), 3, "{drills_csv}");
    for plot in ["storm.svg", "rss.svg"] {
        let svg = std::fs::read_to_string(out.join(plot)).expect(plot);
        assert!(svg.contains("<svg"), "{plot}");
    }
}

#[test]
fn tcp_drills_are_refused_with_the_reason() {
    if !taskset_available() {
        eprintln!("SKIPPED: taskset not found (apt-get install util-linux)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("storm").display().to_string();
    let (status, err) = lab_storm(
        dir.path(),
        &["--transport", "tcp", "--drills", "1", "--out", &out],
        Duration::from_secs(30),
    );
    assert!(!status.success(), "{err}");
    assert!(err.contains("does not reconnect"), "{err}");
}
