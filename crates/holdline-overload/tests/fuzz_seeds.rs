//! Replays the committed seeds of the controller fuzz targets (`fuzz/corpus/controller_ops`,
//! `fuzz/corpus/hop_server_ops`) through their entry points, so that a broken contract shows
//! up in `cargo test`, not only under the fuzzer.
#![allow(missing_docs)]

use std::fs;
use std::path::PathBuf;

/// The committed inputs (`seed-*`) of one target's corpus; what a local fuzzer added beside
/// them is not replayed.
fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut out: Vec<Vec<u8>> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("seed-"))
        .map(|e| fs::read(e.path()).unwrap_or_else(|err| panic!("{}: {err}", e.path().display())))
        .collect();
    out.sort();
    out
}

#[test]
fn controller_seeds_replay_and_cover_every_algorithm() {
    let seeds = seeds("controller_ops");
    let mut algorithms: Vec<_> = seeds
        .iter()
        .map(|d| holdline_overload::fuzzing::controller_ops(d).algorithm)
        .collect();
    algorithms.sort_by_key(|a| a.as_str());
    algorithms.dedup();
    let implemented = holdline_overload::Algorithm::ALL
        .into_iter()
        .filter(|a| a.is_implemented())
        .count();
    assert_eq!(algorithms.len(), implemented, "seeds for {algorithms:?}");
}

#[test]
fn hop_server_seeds_replay() {
    let seeds = seeds("hop_server_ops");
    assert!(!seeds.is_empty());
    seeds
        .iter()
        .for_each(|d| holdline_overload::fuzzing::hop_server_ops(d));
}
