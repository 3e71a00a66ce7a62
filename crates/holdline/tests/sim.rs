//! `holdline sim run` end to end: the files are written, identical for one seed whatever
//! `--jobs` is, and a bad scenario is refused with its file, line and key.

use std::path::Path;
use std::process::Command;

const SCENARIO: &str = r#"
name = "cli"
seed = 5
runs = 2
duration_s = 6
drain_s = 1
settle_s = 1
capacity_cps = 100

[[servers]]
name = "proxy"
local = "occ"
service_us = 1666.667

[[uas]]
name = "uas"

[[uac]]
name = "uac"
target = "proxy"
steps = [{ at_s = 0, factor = 0.5 }, { at_s = 3, factor = 5 }]

[[routes]]
server = "proxy"
to = "uas"
"#;

fn sim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_holdline"))
        .arg("sim")
        .args(args)
        .output()
        .expect("run holdline sim")
}

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Runs `holdline sim run FILE ARGS --jobs J --out DIR/PREFIXJ` with 1 and 2 jobs and asserts
/// that `files` are byte-identical in both outputs (results never depend on `--jobs`);
/// returns the two output directories.
fn same_with_one_and_two_jobs(
    dir: &Path,
    file: &str,
    args: &[&str],
    prefix: &str,
    files: &[&str],
) -> Vec<std::path::PathBuf> {
    let outs: Vec<_> = ["1", "2"]
        .iter()
        .map(|jobs| {
            let out = dir.join(format!("{prefix}{jobs}"));
            let mut all = vec!["run", file, "--quiet", "--jobs", jobs];
            all.extend_from_slice(args);
            all.extend(["--out", out.to_str().expect("utf-8")]);
            let o = sim(&all);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            out
        })
        .collect();
    for f in files {
        assert_eq!(
            read(&outs[0].join(f)),
            read(&outs[1].join(f)),
            "{f} differs"
        );
    }
    outs
}

#[test]
fn sim_run_writes_identical_results_for_one_seed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("s.toml");
    std::fs::write(&file, SCENARIO).expect("write scenario");
    let file = file.to_str().expect("utf-8 path");
    let outs = same_with_one_and_two_jobs(
        dir.path(),
        file,
        &[],
        "out",
        &[
            "results.json",
            "timeseries.csv",
            "points.csv",
            "agents.csv",
            "pdd_cdf.csv",
        ],
    );
    let v: serde_json::Value =
        serde_json::from_slice(&read(&outs[0].join("results.json"))).expect("json");
    assert_eq!(v["points"].as_array().map(Vec::len), Some(2));
    assert_eq!(v["run_seeds"].as_array().map(Vec::len), Some(2));
    assert!(
        v["points"][0]["offered_cps"]["mean"]
            .as_f64()
            .is_some_and(|x| x > 20.0)
    );
    let csv = String::from_utf8(read(&outs[0].join("timeseries.csv"))).expect("utf-8");
    assert!(csv.starts_with("run,t_s,server,offered,goodput,"));
    assert!(csv.lines().count() > 10);
}

/// `--pcap` writes every datagram of run 0 (as many records as the run sent messages);
/// the callers' and callees' per-second rows and the PDD distribution are written too; a
/// sweep refuses `--pcap`.
#[test]
fn sim_run_writes_a_capture_of_run_0() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("s.toml");
    std::fs::write(&file, SCENARIO).expect("write scenario");
    let (file, out, cap) = (
        file.to_str().expect("utf-8"),
        dir.path().join("out"),
        dir.path().join("run0.pcap"),
    );
    let o = sim(&[
        "run",
        file,
        "--quiet",
        "--runs",
        "1",
        "--pcap",
        cap.to_str().expect("utf-8"),
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value =
        serde_json::from_slice(&read(&out.join("results.json"))).expect("json");
    let messages = v["messages_per_run"].as_f64().expect("messages");
    let pcap = read(&cap);
    assert_eq!(&pcap[..4], &0xa1b2_3c4d_u32.to_le_bytes());
    let (mut at, mut records) = (24usize, 0u64);
    while at + 16 <= pcap.len() {
        let len = u32::from_le_bytes(pcap[at + 8..at + 12].try_into().expect("4 bytes"));
        at += 16 + len as usize;
        records += 1;
    }
    assert_eq!(at, pcap.len());
    assert_eq!(records as f64, messages);
    let agents = String::from_utf8(read(&out.join("agents.csv"))).expect("utf-8");
    assert!(agents.starts_with("run,agent,t_s,active,"));
    assert!(agents.lines().any(|l| l.starts_with("0,uas,")));
    let cdf = String::from_utf8(read(&out.join("pdd_cdf.csv"))).expect("utf-8");
    let last: f64 = cdf
        .lines()
        .rfind(|l| l.starts_with("0,uac,0,"))
        .and_then(|l| l.rsplit(',').next())
        .and_then(|x| x.parse().ok())
        .expect("a CDF row");
    assert!((last - 1.0).abs() < 1e-9, "a CDF ends at 1");
    let o = sim(&[
        "run",
        file,
        "--quiet",
        "--scale",
        "1,2",
        "--pcap",
        cap.to_str().expect("utf-8"),
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--pcap"));
}

#[test]
fn sim_run_refuses_a_bad_scenario_with_file_line_and_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        SCENARIO.replace(
            "service_us = 1666.667",
            "service_us = 1666.667\nservise = 1",
        ),
    )
    .expect("write scenario");
    let o = sim(&[
        "run",
        file.to_str().expect("utf-8"),
        "--out",
        dir.path().to_str().expect("utf-8"),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.toml:14: key `servers.servise`"), "{err}");
}

#[test]
fn sim_sweep_runs_every_combination_and_does_not_depend_on_jobs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("s.toml");
    std::fs::write(&file, SCENARIO).expect("write scenario");
    let file = file.to_str().expect("utf-8 path");
    let outs = same_with_one_and_two_jobs(
        dir.path(),
        file,
        &[
            "--runs",
            "2",
            "--sweep",
            "servers.*.service_us=1666.667,3333.333",
            "--sweep",
            "uac.uac.arrivals=poisson,constant",
        ],
        "sweep",
        &["sweep.csv", "sweep.json"],
    );
    let point = "servers.all.service_us=3333.333,uac.uac.arrivals=constant";
    assert_eq!(
        read(&outs[0].join(point).join("results.json")),
        read(&outs[1].join(point).join("results.json")),
    );
    let csv = String::from_utf8(read(&outs[0].join("sweep.csv"))).expect("utf-8");
    assert!(
        csv.starts_with("local,scale,servers.*.service_us,uac.uac.arrivals,offered_cps,"),
        "{csv}"
    );
    assert_eq!(csv.lines().count(), 5, "{csv}");
    let v: serde_json::Value =
        serde_json::from_slice(&read(&outs[0].join("sweep.json"))).expect("json");
    let points = v["points"].as_array().expect("points");
    assert_eq!(points.len(), 4);
    assert_eq!(points[0]["sweep"]["servers.*.service_us"], 1666.667);
    assert_eq!(points[3]["sweep"]["uac.uac.arrivals"], "constant");
    assert_eq!(points[3]["point"], point);
    // The swept cost took effect: twice the CPU per message, about half the goodput in
    // overload (the 5x step is most of the window).
    let goodput = |i: usize| points[i]["goodput_cps"]["mean"].as_f64().expect("goodput");
    assert!(
        goodput(2) < 0.8 * goodput(0),
        "{} vs {}",
        goodput(2),
        goodput(0)
    );
}

#[test]
fn sim_sweep_refuses_a_bad_value_naming_the_sweep() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("s.toml");
    std::fs::write(&file, SCENARIO).expect("write scenario");
    let o = sim(&[
        "run",
        file.to_str().expect("utf-8"),
        "--sweep",
        "servers.*.local=occ,fifo",
        "--out",
        dir.path().join("out").to_str().expect("utf-8"),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("s.toml (--sweep servers.*.local=fifo): key `servers[0].local`"),
        "{err}"
    );
}

/// `holdline sim check` (docs/reliability.md): a few seeds pass with their invariants
/// checked and are written to check.json; a seed's printed scenario is one `holdline sim
/// run` reads.
#[test]
fn sim_check_passes_its_seeds_and_prints_a_scenario_sim_run_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().join("check");
    let out = sim(&[
        "check",
        "--seeds",
        "6",
        "--jobs",
        "2",
        "--out",
        out_dir.to_str().expect("utf-8"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value =
        serde_json::from_slice(&read(&out_dir.join("check.json"))).expect("json");
    assert_eq!(v["seeds"], 6, "{v}");
    assert_eq!(v["failed"], serde_json::json!([]), "{v}");
    assert!(v["calls"].as_u64().is_some_and(|c| c > 0), "{v}");
    let seeds: Vec<u64> = v["outcomes"]
        .as_array()
        .expect("outcomes")
        .iter()
        .filter_map(|o| o["seed"].as_u64())
        .collect();
    assert_eq!(seeds, [0, 1, 2, 3, 4, 5]);
    // Some of these seeds draw phones and a registrar that crashes and restarts.
    assert!(v["registrations"].as_u64().is_some_and(|r| r > 0), "{v}");
    assert!(v["crashes"].as_u64().is_some_and(|c| c > 0), "{v}");

    let printed = sim(&["check", "--seed", "4", "--print"]);
    assert!(printed.status.success());
    let text = String::from_utf8(printed.stdout).expect("utf-8");
    assert!(
        text.starts_with("# holdline sim check --seed 4\n"),
        "{text}"
    );
    // Seed 4 has phones: `holdline sim run` reads those too.
    assert!(text.contains("[[phones]]"), "{text}");
    let file = dir.path().join("seed4.toml");
    std::fs::write(&file, &text).expect("write");
    let run_dir = dir.path().join("run");
    let run = sim(&[
        "run",
        file.to_str().expect("utf-8"),
        "--quiet",
        "--out",
        run_dir.to_str().expect("utf-8"),
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(run_dir.join("results.json").exists());
    // Faults are counted per kind.
    assert!(v["faults"]["partitions"]["seeds"].as_u64().is_some(), "{v}");

    // The same file checked with the invariants on (what a shrink writes) runs as its seed.
    let by_file = sim(&["check", "--scenario", file.to_str().expect("utf-8")]);
    let by_seed = sim(&["check", "--seed", "4"]);
    let stderr = String::from_utf8_lossy(&by_file.stderr);
    assert!(by_file.status.success(), "{stderr}");
    let calls = |s: &str| {
        s.split(" calls set up")
            .next()
            .and_then(|h| h.rsplit(' ').next())
            .map(str::to_owned)
    };
    assert_eq!(
        calls(&stderr),
        calls(&String::from_utf8_lossy(&by_seed.stderr)),
        "{stderr}"
    );
    // A file with a bad fault entry is refused with its line and key.
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        format!("{text}[[partitions]]\nnode = \"nowhere\"\nfrom_s = 1\nuntil_s = 2\n"),
    )
    .expect("write");
    let refused = sim(&["check", "--scenario", bad.to_str().expect("utf-8")]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        stderr.contains("key `partitions[0].node`: names no node"),
        "{stderr}"
    );
    // A passing seed has nothing to shrink.
    let shrink = sim(&["check", "--seed", "4", "--shrink", "--max-runs", "3"]);
    assert!(!shrink.status.success());
    assert!(
        String::from_utf8_lossy(&shrink.stderr).contains("nothing to shrink"),
        "{}",
        String::from_utf8_lossy(&shrink.stderr)
    );
}
