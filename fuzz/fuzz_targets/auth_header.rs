//! Fuzzes the credentials and challenge parsers (Authorization / WWW-Authenticate values) and
//! the challenge writer's round trip.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| holdline_sip::fuzzing::auth_header(data));
