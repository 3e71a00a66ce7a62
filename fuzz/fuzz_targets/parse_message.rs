//! Fuzzes `Message::parse` and every accessor on what parses.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| holdline_sip::fuzzing::parse_message(data));
