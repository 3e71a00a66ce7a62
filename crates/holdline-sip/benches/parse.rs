//! Parser and proxy-edit benchmarks on typical messages (`cargo bench -p holdline-sip`).
//!
//! - `index`: `Message::parse` alone (start line, header index, Content-Length).
//! - `proxy_headers`: index plus the headers a proxy reads on every message.
//! - `proxy_edit`: index, the headers read, and the full forwarding edit emitted into a
//!   reused buffer.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use holdline_sip::{Limits, Message};

const INVITE: &[u8] = include_bytes!("../tests/data/invite.sip");
const RINGING: &[u8] = include_bytes!("../tests/data/ringing.sip");

fn index(c: &mut Criterion) {
    let limits = Limits::DEFAULT;
    let mut g = c.benchmark_group("index");
    for (name, msg) in [("invite_896B", INVITE), ("ringing_417B", RINGING)] {
        g.throughput(Throughput::Bytes(msg.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| {
                let m = Message::parse(black_box(msg), &limits);
                black_box(m.map(|m| m.headers().len()).unwrap_or(0))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, index);
criterion_main!(benches);
