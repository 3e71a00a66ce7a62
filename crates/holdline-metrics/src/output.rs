//! Text output: CSV lines, the live progress line and the final table.

use std::fmt::Write as _;

use crate::{Counters, Report, Row};

/// The CSV header: `t_s`, every counter, `active`.
pub fn csv_header() -> String {
    let mut s = String::from("t_s");
    for n in Counters::NAMES {
        s.push(',');
        s.push_str(n);
    }
    s.push_str(",active\n");
    s
}

/// One CSV line for `row` (same columns as [`csv_header`]).
pub fn csv_row(row: &Row) -> String {
    let mut s = String::with_capacity(16 + Counters::NAMES.len() * 4);
    let _ = write!(s, "{}.{:03}", row.t_ms / 1000, row.t_ms % 1000);
    for v in row.counts.values() {
        let _ = write!(s, ",{v}");
    }
    let _ = writeln!(s, ",{}", row.active);
    s
}

/// The live one-line progress display for the latest row and the totals.
pub fn progress_line(row: &Row, totals: &Counters) -> String {
    let c = &row.counts;
    let mut s = format!("t={:>5.1}s", row.t_ms as f64 / 1000.0);
    if totals.attempted > 0 || totals.uas_invites > 0 {
        let _ = write!(
            s,
            " | calls/s offered {} attempted {} 200 {} 503 {} fail {} | completed {} (total {}) | active {} | retrans inv {} 200 {} | timeouts {}",
            c.offered,
            c.attempted,
            c.r200,
            c.r503,
            c.r_fail_other,
            c.completed,
            totals.completed,
            row.active,
            c.retrans_invite,
            c.retrans_200,
            totals.timeouts,
        );
    }
    if totals.reg_sent > 0 {
        let _ = write!(
            s,
            " | REGISTER/s sent {} ok {} 423 {} 5xx {} | total ok {} | timeouts {}",
            c.reg_sent, c.reg_ok, c.reg_423, c.reg_5xx, totals.reg_ok, totals.timeouts
        );
    }
    s
}

/// The final summary (SIPp's screen): the message table, the main counters and latencies.
pub fn summary_table(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<18} {:>10} {:>10} {:>10} {:>9} {:>10}",
        "message", "sent", "received", "retrans", "timeouts", "unexpected"
    );
    for m in &r.messages {
        let _ = writeln!(
            s,
            "{:<18} {:>10} {:>10} {:>10} {:>9} {:>10}",
            m.message,
            m.stats.sent,
            m.stats.received,
            m.stats.retransmitted,
            m.stats.timeouts,
            m.stats.unexpected
        );
    }
    let t = &r.totals;
    let _ = writeln!(
        s,
        "calls: attempted {} completed {} ok {} failed {} (503: {}, other: {}, timeouts: {}) cancelled {}",
        r.calls_attempted,
        r.calls_completed,
        t.calls_ok,
        r.calls_failed,
        t.r503,
        t.r_fail_other,
        t.timeouts,
        t.cancelled
    );
    let _ = writeln!(
        s,
        "rates over {:.1} s: offered {:.1}/s, throughput {:.1}/s, goodput {:.1}/s (200 within {:.0} s)",
        r.load_duration_s, r.offered_cps, r.throughput_cps, r.goodput_cps, r.goodput_window_s
    );
    if t.reg_sent > 0 {
        let _ = writeln!(
            s,
            "registrations: sent {} ok {} 423 {} 5xx {} other {} ({:.1}/s ok)",
            t.reg_sent, t.reg_ok, t.reg_423, t.reg_5xx, t.reg_fail_other, r.register_rps
        );
    }
    let _ = writeln!(
        s,
        "retransmissions: INVITE {} BYE {} 200 {} other {}; unexpected {} parse errors {} send errors {}",
        t.retrans_invite,
        t.retrans_bye,
        t.retrans_200,
        t.retrans_other,
        t.unexpected,
        t.parse_errors,
        t.send_errors
    );
    for (name, l) in &r.latency {
        if l.count > 0 {
            let _ = writeln!(
                s,
                "{name:<9} n={} p50 {:.3} ms p90 {:.3} p99 {:.3} p99.9 {:.3} max {:.3}",
                l.count, l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms
            );
        }
    }
    s
}
