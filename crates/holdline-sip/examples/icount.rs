//! Runs one parser operation N times, for instruction counts under callgrind:
//!
//! ```sh
//! cargo build --release -p holdline-sip --example icount
//! valgrind --tool=callgrind target/release/examples/icount index-invite 10000
//! ```
//! Instructions per operation = (total − total at N=0) / N.

use std::hint::black_box;

use holdline_sip::{Limits, Message};

const INVITE: &[u8] = include_bytes!("../tests/data/invite.sip");
const RINGING: &[u8] = include_bytes!("../tests/data/ringing.sip");

fn main() {
    let mut args = std::env::args().skip(1);
    let op = args.next().unwrap_or_else(|| "index-invite".into());
    let n: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let limits = Limits::DEFAULT;
    let mut sink = 0usize;
    for _ in 0..n {
        sink += match op.as_str() {
            "index-invite" => Message::parse(black_box(INVITE), &limits).map_or(0, |m| m.headers().len()),
            "index-ringing" => Message::parse(black_box(RINGING), &limits).map_or(0, |m| m.headers().len()),
            other => {
                eprintln!("unknown operation {other}");
                std::process::exit(2);
            }
        };
    }
    println!("{sink}");
}
