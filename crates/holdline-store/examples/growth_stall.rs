//! How long single store operations stall their caller at a million registrations: the
//! slowest inserts (growth steps of a shard's table) and the whole-store purge against one
//! part of it (issue 14: no step of the worker loop may stall for more than ~1 ms; issue 21:
//! a million bindings).
//!
//! `cargo run --release -p holdline-store --example growth_stall [N]` (N bindings, default
//! 1,000,000). Prints the inserts that took over 0.5 ms (count, longest, and their total) and
//! the purge times.

use std::time::{Duration, Instant as Clock};

use holdline_base::Instant;
use holdline_proto::{Binding, LocationStore};
use holdline_store::MemoryStore;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let store = MemoryStore::new();
    let now = Instant::from_secs(10);
    let mut slow: Vec<(u64, Duration)> = Vec::new();
    let started = Clock::now();
    for i in 0..n {
        let aor = format!("user{i}@bench.test");
        let contact = format!("sip:user{i}@192.0.2.1:5060");
        let t = Clock::now();
        store.modify(aor.as_bytes(), now, &mut |v| {
            v.push(Binding {
                contact: contact.as_bytes().into(),
                expires_at: Instant::from_secs(3600),
                q: 1000,
                call_id: b"growth-stall".to_vec().into(),
                cseq: 1,
                source: None,
            });
        });
        let d = t.elapsed();
        if d > Duration::from_micros(500) {
            slow.push((i, d));
        }
    }
    let total: Duration = slow.iter().map(|s| s.1).sum();
    let longest = slow.iter().map(|s| s.1).max().unwrap_or_default();
    println!(
        "{n} inserts in {:.2?}: {} over 0.5 ms, longest {longest:.2?}, {total:.2?} in all",
        started.elapsed(),
        slow.len()
    );
    let t = Clock::now();
    store.purge_expired(Instant::from_secs(20));
    println!("purge of the whole store: {:.2?}", t.elapsed());
    let mut worst = Duration::ZERO;
    for part in 0..store.purge_parts() {
        let t = Clock::now();
        store.purge_part(Instant::from_secs(20), part);
        worst = worst.max(t.elapsed());
    }
    println!(
        "purge of one part (of {}): at most {worst:.2?}",
        store.purge_parts()
    );
}
