//! Runs one benchmarked operation N times, for instruction counts under callgrind:
//!
//! ```sh
//! cargo build --release -p holdline-sip --example icount
//! valgrind --tool=callgrind target/release/examples/icount index-invite 0
//! valgrind --tool=callgrind target/release/examples/icount index-invite 10000
//! ```
//! Instructions per operation = (total at N − total at 0) / N. Operations: `index-invite`,
//! `index-ringing`, `headers-invite`, `headers-ringing`, `edit-invite`.

use std::hint::black_box;

use holdline_sip::bench_ops::{INVITE, RINGING, index, proxy_edit, proxy_headers};

fn main() {
    let mut args = std::env::args().skip(1);
    let op = args.next().unwrap_or_else(|| "index-invite".into());
    let n: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let mut out = Vec::with_capacity(2048);
    let mut sink = 0usize;
    for _ in 0..n {
        sink += match op.as_str() {
            "index-invite" => index(black_box(INVITE)),
            "index-ringing" => index(black_box(RINGING)),
            "headers-invite" => proxy_headers(black_box(INVITE)),
            "headers-ringing" => proxy_headers(black_box(RINGING)),
            "edit-invite" => proxy_edit(black_box(INVITE), &mut out),
            other => {
                eprintln!("unknown operation {other}");
                std::process::exit(2);
            }
        };
    }
    println!("{sink}");
}
