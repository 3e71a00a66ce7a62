//! Fuzzes the stream `Framer`: chunked and whole feeding must cut the same frames.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| holdline_sip::fuzzing::frame_stream(data));
