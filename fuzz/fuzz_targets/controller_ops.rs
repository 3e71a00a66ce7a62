//! Every overload controller driven by arbitrary signal sequences, admission questions and
//! time steps, with its contract checked after every operation (see
//! `holdline_overload::fuzzing::controller_ops`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = holdline_overload::fuzzing::controller_ops(data);
});
