//! RFC 7339's `oc` Via parameters (and holdline's window answer): read as an offer and as a
//! report, written back and read again (see `holdline_sip::fuzzing::oc_via`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| holdline_sip::fuzzing::oc_via(data));
