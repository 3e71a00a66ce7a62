//! The recorder: running totals, per-interval rows, histograms and the message table of one
//! agent, with time supplied by the caller.

use std::collections::BTreeMap;

use holdline_base::{Duration, Instant};
use serde::Serialize;

use crate::{Counters, Latencies, MessageTable};

/// One interval of a run (a CSV line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    /// End of the interval, in milliseconds since the start of the run.
    pub t_ms: u64,
    /// Events in the interval.
    pub counts: Counters,
    /// Calls in progress at the end of the interval (a gauge).
    pub active: u64,
}

/// Everything one agent measures. Agents increment [`Recorder::c`] directly; the driver (or
/// the simulator) calls [`Recorder::tick`] with the current time to cut intervals.
#[derive(Clone, Debug)]
pub struct Recorder {
    start: Instant,
    interval: Duration,
    next_cut: Instant,
    last: Counters,
    rows: Vec<Row>,
    /// Running totals.
    pub c: Counters,
    /// Final failure responses to INVITE received by the UAC, by status code.
    pub failures: BTreeMap<u16, u64>,
    /// Final responses to REGISTER by status code.
    pub reg_statuses: BTreeMap<u16, u64>,
    /// Latency histograms.
    pub lat: Latencies,
    /// Per-message counts.
    pub msgs: MessageTable,
    /// Calls in progress now (set by the agent).
    pub active: u64,
    /// A 200 OK counts as goodput when it arrives this soon after the first INVITE.
    pub goodput_window: Duration,
    /// Calls whose first INVITE was sent at or after this also go into
    /// [`Latencies::pdd_steady`](crate::Latencies::pdd_steady). `None`: no steady-state PDD.
    pub steady_from: Option<Instant>,
    load_end: Option<Instant>,
    /// Goodput answers that arrived while calls were still being offered (before
    /// [`Recorder::mark_load_end`]).
    goodput_in_load: u64,
    /// Answers recorded and the sum of their PDDs (a mean over any span: two readings).
    pdd_sum: (u64, Duration),
}

impl Recorder {
    /// A recorder for a run starting at `start`, cutting rows every `interval`.
    pub fn new(start: Instant, interval: Duration, goodput_window: Duration) -> Self {
        let interval = interval.max(Duration::from_millis(1));
        Self {
            start,
            interval,
            next_cut: start.checked_add(interval).unwrap_or(Instant::MAX),
            last: Counters::default(),
            rows: Vec::new(),
            c: Counters::default(),
            failures: BTreeMap::new(),
            reg_statuses: BTreeMap::new(),
            lat: Latencies::default(),
            msgs: MessageTable::default(),
            active: 0,
            goodput_window,
            steady_from: None,
            load_end: None,
            goodput_in_load: 0,
            pdd_sum: (0, Duration::ZERO),
        }
    }

    /// When the run started.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// The row interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// When the next row will be cut.
    pub fn next_cut(&self) -> Instant {
        self.next_cut
    }

    /// Cuts every interval that ended at or before `now`. Returns how many rows were added.
    /// Events counted since the previous call belong to the first interval cut.
    pub fn tick(&mut self, now: Instant) -> usize {
        let mut added = 0;
        while now >= self.next_cut {
            self.cut(self.next_cut);
            self.next_cut = self
                .next_cut
                .checked_add(self.interval)
                .unwrap_or(Instant::MAX);
            added += 1;
        }
        added
    }

    fn cut(&mut self, at: Instant) {
        let t_ms =
            u64::try_from(at.saturating_duration_since(self.start).as_millis()).unwrap_or(u64::MAX);
        self.rows.push(Row {
            t_ms,
            counts: self.c.since(&self.last),
            active: self.active,
        });
        self.last = self.c;
    }

    /// Ends the run at `now`: cuts the elapsed intervals and a last partial one when it holds
    /// events.
    pub fn finish(&mut self, now: Instant) {
        self.tick(now);
        if self.c != self.last || self.rows.is_empty() {
            self.cut(now.max(self.start));
        }
    }

    /// Records that the arrival phase ended at `now` (the load duration used for rates).
    pub fn mark_load_end(&mut self, now: Instant) {
        if self.load_end.is_none() {
            self.load_end = Some(now);
        }
    }

    /// When the arrival phase ended, if it has.
    pub fn load_end(&self) -> Option<Instant> {
        self.load_end
    }

    /// Rows cut so far.
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// Records a 200 OK to an INVITE arriving `pdd` after the first INVITE: the PDD histogram
    /// and goodput.
    pub fn record_answer(&mut self, pdd: Duration) {
        self.lat.pdd.record(pdd);
        self.pdd_sum.0 += 1;
        self.pdd_sum.1 = self.pdd_sum.1.saturating_add(pdd);
        if pdd <= self.goodput_window {
            self.c.goodput += 1;
            if self.load_end.is_none() {
                self.goodput_in_load += 1;
            }
        }
    }

    /// [`record_answer`](Self::record_answer) for a call whose first INVITE was sent at
    /// `sent`, answered at `now`; its PDD also goes into the steady-state histogram when
    /// `sent` is at or after [`steady_from`](Self::steady_from).
    pub fn record_answer_sent(&mut self, sent: Instant, now: Instant) {
        let pdd = now.saturating_duration_since(sent);
        if self.steady_from.is_some_and(|s| sent >= s) {
            self.lat.pdd_steady.record(pdd);
        }
        self.record_answer(pdd);
    }

    /// The answers recorded so far and the sum of their PDDs: the difference of two readings
    /// gives the mean PDD of the answers in between (the simulator's per-second setup delay).
    pub fn pdd_sum(&self) -> (u64, Duration) {
        self.pdd_sum
    }

    /// Records a final failure status to an INVITE.
    pub fn record_failure(&mut self, status: u16) {
        *self.failures.entry(status).or_default() += 1;
        if status == 503 {
            self.c.r503 += 1;
        } else {
            self.c.r_fail_other += 1;
        }
    }

    /// Records a final response to a REGISTER after `latency`.
    pub fn record_register(&mut self, status: u16, latency: Duration) {
        *self.reg_statuses.entry(status).or_default() += 1;
        self.lat.register.record(latency);
        match status {
            200..=299 => self.c.reg_ok += 1,
            423 => self.c.reg_423 += 1,
            500..=599 => self.c.reg_5xx += 1,
            _ => self.c.reg_fail_other += 1,
        }
    }

    /// Merges another recorder of the same run (e.g. the UAS side of `pair`): totals,
    /// histograms, tables and failures. Rows are not merged; merge before cutting or keep
    /// one recorder per process.
    pub fn merge(&mut self, other: &Self) {
        self.c.add(&other.c);
        self.goodput_in_load += other.goodput_in_load;
        for (k, v) in &other.failures {
            *self.failures.entry(*k).or_default() += v;
        }
        for (k, v) in &other.reg_statuses {
            *self.reg_statuses.entry(*k).or_default() += v;
        }
        self.lat.merge(&other.lat);
        self.msgs.merge(&other.msgs);
        self.active += other.active;
    }

    /// The final report at `end` (call [`Recorder::finish`] first for complete rows).
    pub fn report(&self, end: Instant, meta: serde_json::Value) -> Report {
        let duration = end.saturating_duration_since(self.start);
        let load = self
            .load_end
            .map_or(duration, |e| e.saturating_duration_since(self.start))
            .max(Duration::from_millis(1));
        let secs = load.as_secs_f64();
        let rate = |n: u64| n as f64 / secs;
        let pdd = self.lat.pdd.summary();
        Report {
            calls_attempted: self.c.attempted,
            calls_completed: self.c.completed,
            calls_failed: self.c.calls_failed,
            goodput_cps: rate(self.c.goodput),
            goodput_in_load_cps: rate(self.goodput_in_load),
            throughput_cps: rate(self.c.completed),
            offered_cps: rate(self.c.offered),
            pdd_p50_ms: pdd.p50_ms,
            pdd_p99_ms: pdd.p99_ms,
            retrans_200: self.c.retrans_200,
            retrans_invite: self.c.retrans_invite,
            retrans_bye: self.c.retrans_bye,
            register_rps: rate(self.c.reg_ok),
            duration_s: duration.as_secs_f64(),
            load_duration_s: secs,
            goodput_window_s: self.goodput_window.as_secs_f64(),
            totals: self.c,
            failures_by_code: self
                .failures
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            register_by_code: self
                .reg_statuses
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            latency: self
                .lat
                .named()
                .iter()
                .map(|(n, l)| ((*n).to_owned(), l.summary()))
                .collect(),
            messages: self
                .msgs
                .sorted()
                .into_iter()
                .map(|(k, s)| MessageRow {
                    message: k.label(),
                    stats: s,
                })
                .collect(),
            per_second: self.rows.iter().map(RowJson::from).collect(),
            meta,
        }
    }
}

/// A row of the message table in the JSON report.
#[derive(Clone, Debug, Serialize)]
pub struct MessageRow {
    /// `INVITE`, `200 (INVITE)`, ...
    pub message: String,
    /// Its counts.
    #[serde(flatten)]
    pub stats: crate::MsgStats,
}

/// A row in the JSON report.
#[derive(Clone, Debug, Serialize)]
pub struct RowJson {
    /// End of the interval in seconds since the start.
    pub t_s: f64,
    /// Events in the interval.
    #[serde(flatten)]
    pub counts: Counters,
    /// Calls in progress at the end of the interval.
    pub active: u64,
}

impl From<&Row> for RowJson {
    fn from(r: &Row) -> Self {
        Self {
            t_s: r.t_ms as f64 / 1000.0,
            counts: r.counts,
            active: r.active,
        }
    }
}

/// The JSON report of a run (`--json FILE`). The top-level numeric fields are the contract
/// other tools read; `totals`, `latency`, `messages` and `per_second` hold everything else.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Calls placed.
    pub calls_attempted: u64,
    /// Calls whose ACK reached the UAS (see [`Counters::completed`]).
    pub calls_completed: u64,
    /// Calls the UAC gave up.
    pub calls_failed: u64,
    /// Goodput per second of the load phase: every 200 OK within the goodput window of its
    /// INVITE, also those that arrive after the load phase (while the run drains).
    pub goodput_cps: f64,
    /// Goodput answers that arrived *during* the load phase, per second of it: what a server
    /// sustains. An overloaded server with a backlog keeps answering after the arrivals stop
    /// (a queue of seconds drains within the goodput window), which `goodput_cps` credits
    /// to the load phase; this figure does not (a few answers in flight at its end are
    /// left out: PDD / duration of them).
    pub goodput_in_load_cps: f64,
    /// Completed calls per second of the load phase.
    pub throughput_cps: f64,
    /// Offered calls per second of the load phase.
    pub offered_cps: f64,
    /// Median post-dial delay.
    pub pdd_p50_ms: f64,
    /// 99th percentile post-dial delay.
    pub pdd_p99_ms: f64,
    /// 200 OK retransmissions sent by the UAS.
    pub retrans_200: u64,
    /// INVITE retransmissions sent by the UAC.
    pub retrans_invite: u64,
    /// BYE retransmissions sent.
    pub retrans_bye: u64,
    /// Successful REGISTERs per second of the load phase.
    pub register_rps: f64,
    /// Whole run, seconds.
    pub duration_s: f64,
    /// Arrival phase, seconds (the denominator of the rates).
    pub load_duration_s: f64,
    /// The goodput window, seconds.
    pub goodput_window_s: f64,
    /// Every counter's total.
    pub totals: Counters,
    /// INVITE failures by status.
    pub failures_by_code: BTreeMap<String, u64>,
    /// REGISTER final responses by status.
    pub register_by_code: BTreeMap<String, u64>,
    /// Latency summaries by name (psd, pdd, setup, bye, register).
    pub latency: BTreeMap<String, crate::LatencySummary>,
    /// The per-message table.
    pub messages: Vec<MessageRow>,
    /// The per-interval rows.
    pub per_second: Vec<RowJson>,
    /// What the driver adds: mode, transport, rate, command line...
    pub meta: serde_json::Value,
}

impl Report {
    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}
