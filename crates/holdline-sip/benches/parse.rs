//! Parser and proxy-edit benchmarks on typical messages (`cargo bench -p holdline-sip`).
//!
//! - `index`: `Message::parse` alone (start line, header index, Content-Length).
//! - `proxy_headers`: index plus what a proxy reads on every message: Request-URI, top Via
//!   (branch), Call-ID, CSeq, From and To tags, Max-Forwards, top Route.
//! - `proxy_edit`: `proxy_headers`, then the forwarding edit (push Via, decrement
//!   Max-Forwards, add Record-Route, pop Route) emitted into a reused buffer.
//!
//! The work itself lives in `holdline_sip::bench_ops` so that `examples/icount.rs` measures
//! exactly the same operations under callgrind.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use holdline_sip::bench_ops::{INVITE, RINGING, index, proxy_edit, proxy_headers};

fn benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("sip");
    for (name, msg) in [("invite_896B", INVITE), ("ringing_417B", RINGING)] {
        g.throughput(Throughput::Bytes(msg.len() as u64));
        g.bench_function(format!("index/{name}"), |b| {
            b.iter(|| index(black_box(msg)))
        });
        g.bench_function(format!("proxy_headers/{name}"), |b| {
            b.iter(|| proxy_headers(black_box(msg)))
        });
    }
    g.throughput(Throughput::Bytes(INVITE.len() as u64));
    let mut out = Vec::with_capacity(2048);
    g.bench_function("proxy_edit/invite_896B", |b| {
        b.iter(|| proxy_edit(black_box(INVITE), &mut out))
    });
    g.finish();
}

criterion_group!(sip, benches);
criterion_main!(sip);
