//! Stateful fuzzing of the proxy/registrar endpoint: operation sequences (messages from a SIP
//! grammar, mutations, raw bytes, time jumps, store commits) with the endpoint's invariants
//! checked after every step (see `holdline_proto::fuzzing`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| holdline_proto::fuzzing::endpoint_ops(data));
