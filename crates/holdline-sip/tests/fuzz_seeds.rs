//! Replays the fuzz targets' seed corpora and the fixture messages through the fuzz entry
//! points, so a broken invariant shows up in `cargo test`, not only under the fuzzer.

use std::fs;
use std::path::Path;

fn files(dir: &Path) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| fs::read(e.path()).unwrap_or_else(|err| panic!("{}: {err}", e.path().display())))
        .collect();
    out.sort();
    out
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn fixtures_parse_and_survive_the_parse_target() {
    let fixtures = files(&root().join("tests/data"));
    assert!(fixtures.len() >= 8, "fixtures missing");
    for f in &fixtures {
        let msg =
            holdline_sip::Message::parse(f, &holdline_sip::Limits::DEFAULT).unwrap_or_else(|e| {
                panic!(
                    "fixture does not parse: {e}\n{}",
                    String::from_utf8_lossy(f)
                )
            });
        msg.check_mandatory()
            .unwrap_or_else(|e| panic!("fixture incomplete: {e}"));
        holdline_sip::fuzzing::parse_message(f);
    }
}

#[test]
fn fuzz_seed_corpora_replay() {
    let corpus = root().join("../../fuzz/corpus");
    let parse = files(&corpus.join("parse_message"));
    let frame = files(&corpus.join("frame_stream"));
    let auth = files(&corpus.join("auth_header"));
    let oc = files(&corpus.join("oc_via"));
    assert!(!parse.is_empty() && !frame.is_empty() && !auth.is_empty() && !oc.is_empty());
    oc.iter().for_each(|d| holdline_sip::fuzzing::oc_via(d));
    auth.iter()
        .for_each(|d| holdline_sip::fuzzing::auth_header(d));
    parse
        .iter()
        .for_each(|d| holdline_sip::fuzzing::parse_message(d));
    frame
        .iter()
        .for_each(|d| holdline_sip::fuzzing::frame_stream(d));
}

#[test]
fn every_prefix_of_every_fixture_is_handled() {
    // Truncations are the commonest malformed input; none may panic or mis-frame.
    for f in files(&root().join("tests/data")) {
        for n in 0..=f.len() {
            holdline_sip::fuzzing::parse_message(&f[..n]);
            let mut framed = vec![(n % 13) as u8];
            framed.extend_from_slice(&f[..n]);
            holdline_sip::fuzzing::frame_stream(&framed);
        }
    }
}

#[test]
fn oc_parameters_of_the_corpus_read_back_as_written() {
    // The committed oc_via seeds (not what a local fuzzer added beside them) hold offers and
    // reports; each must read as one (the round trip in `oc_via` checks nothing when nothing
    // parses).
    let mut offers = 0;
    let mut reports = 0;
    let dir = root().join("../../fuzz/corpus/oc_via");
    let seeds = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("seed-"))
        .map(|e| fs::read(e.path()).unwrap_or_else(|err| panic!("{err}")));
    for d in seeds {
        let mut buf = b"SIP/2.0 100 Trying\r\nVia: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK1".to_vec();
        buf.extend_from_slice(&d);
        buf.extend_from_slice(b"\r\n\r\n");
        let msg = holdline_sip::Message::parse(&buf, &holdline_sip::Limits::DEFAULT)
            .unwrap_or_else(|e| panic!("seed does not parse: {e}"));
        let via = msg.top_via().unwrap_or_else(|e| panic!("seed Via: {e}"));
        offers += usize::from(holdline_sip::OcOffer::from_via(&via).is_some());
        reports += usize::from(matches!(
            holdline_sip::OcReport::from_via(&via),
            Ok(Some(_))
        ));
    }
    assert!(
        offers >= 6 && reports >= 4,
        "offers {offers}, reports {reports}"
    );
}
