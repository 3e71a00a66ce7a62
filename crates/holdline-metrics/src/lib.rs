//! One definition of every measurement holdline makes.
//!
//! The load generator, the lab and the simulator all count with these types, so "goodput" or
//! "PDD" means the same thing in every result file:
//!
//! - [`Counters`]: event counts (offered, attempted, responses by class, retransmissions by
//!   message type, timeouts, completed calls, goodput, registrations ...), each field
//!   documented with its exact definition;
//! - [`Recorder`]: running totals plus rows cut at a fixed interval (the CSV), with time
//!   supplied by the caller (no clock here);
//! - [`Latencies`]: HDR histograms of post-selection delay, post-dial delay, setup completion,
//!   BYE and REGISTER latency, at microsecond resolution;
//! - [`MessageTable`]: SIPp's per-message screen;
//! - [`Report`]: the JSON file; [`csv_header`]/[`csv_row`], [`progress_line`] and
//!   [`summary_table`] for text;
//! - [`jain_index`]: Jain's fairness index.
#![forbid(unsafe_code)]

mod counters;
mod latency;
mod messages;
mod output;
mod recorder;

pub use counters::Counters;
pub use latency::{Latencies, Latency, LatencySummary};
pub use messages::{MessageTable, Method, MsgKey, MsgStats};
pub use output::{csv_header, csv_row, progress_line, summary_table};
pub use recorder::{MessageRow, Recorder, Report, Row, RowJson};

/// Jain's fairness index of `xs`: `(Σx)² / (n·Σx²)`, 1 when all are equal, `1/n` when one
/// takes everything. Empty or all-zero input counts as perfectly fair (1).
pub fn jain_index(xs: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let sum: f64 = xs.iter().sum();
    let sum_sq: f64 = xs.iter().map(|x| x * x).sum();
    if xs.is_empty() || sum_sq == 0.0 {
        1.0
    } else {
        sum * sum / (n * sum_sq)
    }
}

#[cfg(test)]
mod tests;
