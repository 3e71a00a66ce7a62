//! Simulator speed: simulated SIP messages per second of wall time (criterion reports them
//! as "elements/s"). One proxy (1 ms of CPU per call, capacity ≈ 1,000 calls/s) offered 0.9x
//! and 5x its capacity for 5 simulated seconds; every message is real bytes, parsed and
//! built by the endpoint and the agents at every hop.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use holdline_sim::{Scenario, World};

/// The allocator of the `holdline` binary (which runs `holdline sim`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn scenario(local: &str, factor: f64) -> Scenario {
    match holdline_sim::bench_scenario(local, factor, 5.0) {
        Ok(s) => s,
        Err(e) => panic!("bench scenario: {e}"),
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("sim");
    g.sample_size(10);
    for (name, local, factor) in [
        ("occ-0.9x", "occ", 0.9),
        ("occ-5x", "occ", 5.0),
        ("none-5x", "none", 5.0),
    ] {
        let sc = scenario(local, factor);
        let run = || match World::new(&sc, 0) {
            Ok(w) => w.run(|_| {}),
            Err(e) => panic!("world: {e}"),
        };
        let messages = run().messages;
        g.throughput(Throughput::Elements(messages));
        g.bench_function(name, |b| b.iter(run));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
