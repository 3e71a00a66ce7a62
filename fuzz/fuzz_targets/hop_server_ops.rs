//! The server role of RFC 7339 / RFC 7415 and of the explicit window: arbitrary
//! configurations and measurements, its answers kept inside their bounds (see
//! `holdline_overload::fuzzing::hop_server_ops`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| holdline_overload::fuzzing::hop_server_ops(data));
