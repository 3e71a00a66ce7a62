//! Fuzzes the RFC 7200 filter document parser (`application/load-control+xml`) and its
//! builder's round trip.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| holdline_proto::fuzzing::load_control_doc(data));
