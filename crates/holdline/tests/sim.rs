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

#[test]
fn sim_run_writes_identical_results_for_one_seed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("s.toml");
    std::fs::write(&file, SCENARIO).expect("write scenario");
    let file = file.to_str().expect("utf-8 path");
    let outs: Vec<_> = ["1", "2"]
        .iter()
        .map(|jobs| {
            let out = dir.path().join(format!("out{jobs}"));
            let o = sim(&[
                "run",
                file,
                "--quiet",
                "--jobs",
                jobs,
                "--out",
                out.to_str().expect("utf-8"),
            ]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            out
        })
        .collect();
    for f in ["results.json", "timeseries.csv", "points.csv"] {
        assert_eq!(
            read(&outs[0].join(f)),
            read(&outs[1].join(f)),
            "{f} differs"
        );
    }
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
