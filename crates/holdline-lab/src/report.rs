//! The results of `holdline bench`: `results.json`, CSVs, `summary.md`, plots.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde::Serialize;
use serde_json::{Value, json};

use crate::error::{LabError, Result};
use crate::generator::{P99_LIMIT_MS, Step, num};
use crate::plot;
use crate::stats::{Spread, median_json, num_text};
use crate::sustain::{self, SLOPE_FROM_S, SustainRow};

/// Step sizes and ranges of one mode.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Settings {
    pub step_s: f64,
    pub drain_s: f64,
    pub capacity_steps: usize,
    pub call_range: (f64, f64),
    pub register_range: (f64, f64),
    pub cost_rates: Vec<f64>,
    pub register_cost_rates: Vec<f64>,
    pub cost_s: f64,
    pub quota_percent: u64,
    /// `cpu.cfs_period_us` of each overload curve as run, in order.
    pub quota_periods_us: Vec<u64>,
    /// The periods asked for (`--quota-periods-us`); one whose quota would fall under the
    /// kernel's 1 ms minimum ran with the smallest period that allows it.
    pub requested_quota_periods_us: Vec<u64>,
    pub quota_steps: usize,
    pub overload_factors: Vec<f64>,
    pub overload_s: f64,
    /// Seconds of load of each sustained step.
    pub sustain_s: f64,
    /// Tries of the sustained step per server and transport (at most; see
    /// [`sustain::SustainSearch`]).
    pub sustain_tries: usize,
    /// Runs of the whole measurement, interleaved step by step (`--repeat`).
    pub repeat: usize,
}

impl Settings {
    /// About 2 minutes: 3 bisection steps of 2 s, 5 s sustained, cost at 1,000 calls/s, 3
    /// overload points with a 10 ms period.
    pub(crate) fn quick() -> Self {
        Self {
            step_s: 2.0,
            drain_s: 2.0,
            capacity_steps: 3,
            call_range: (1000.0, 8000.0),
            register_range: (4000.0, 32000.0),
            cost_rates: vec![1000.0],
            register_cost_rates: vec![2000.0],
            cost_s: 3.0,
            quota_percent: 25,
            quota_periods_us: vec![10_000],
            requested_quota_periods_us: vec![10_000],
            quota_steps: 2,
            overload_factors: vec![0.5, 2.0, 10.0],
            overload_s: 2.0,
            sustain_s: 5.0,
            sustain_tries: 1,
            repeat: 1,
        }
    }

    /// Under 30 minutes per run: 6 bisection steps of 5 s, 60 s sustained, three cost rates,
    /// 7 overload points with periods of 10 ms and 1 ms.
    pub(crate) fn full() -> Self {
        Self {
            step_s: 5.0,
            drain_s: 4.0,
            capacity_steps: 6,
            call_range: (500.0, 32000.0),
            register_range: (2000.0, 128_000.0),
            cost_rates: vec![1000.0, 2000.0, 4000.0],
            register_cost_rates: vec![2000.0, 8000.0],
            cost_s: 5.0,
            quota_percent: 25,
            quota_periods_us: vec![10_000, 1_000],
            requested_quota_periods_us: vec![10_000, 1_000],
            quota_steps: 4,
            overload_factors: vec![0.5, 1.0, 1.5, 2.0, 4.0, 7.0, 10.0],
            overload_s: 5.0,
            sustain_s: 60.0,
            sustain_tries: 5,
            repeat: 1,
        }
    }
}

/// Facts about the machine and the software measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Machine {
    pub date_utc: String,
    pub cpu_model: String,
    pub cores: usize,
    pub kernel: String,
    pub net_core_rmem_max: String,
    pub kamailio_version: String,
    pub sipp_version: String,
    pub kamailio_children: u32,
    pub kamailio_shm_mb: String,
    pub overload_control_available: bool,
    /// Milliseconds of a fixed integer loop at the start and at the end (the host's speed
    /// drifts; compare runs by it).
    pub calibration_ms_start: f64,
    pub calibration_ms_end: f64,
}

fn first_line(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| {
            let mut t = String::from_utf8_lossy(&o.stdout).into_owned();
            t.push_str(&String::from_utf8_lossy(&o.stderr));
            t.lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default()
}

/// Milliseconds for a fixed amount of integer work.
fn calibrate() -> f64 {
    let t = Instant::now();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..50_000_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    std::hint::black_box(x);
    t.elapsed().as_secs_f64() * 1e3
}

impl Machine {
    pub(crate) fn probe(kamailio_children: u32, overload_control_available: bool) -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .unwrap_or("")
            .trim()
            .to_string();
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .unwrap_or_default()
                .trim()
                .to_string()
        };
        Self {
            date_utc: first_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            cpu_model,
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            kernel: read("/proc/sys/kernel/osrelease"),
            net_core_rmem_max: read("/proc/sys/net/core/rmem_max"),
            kamailio_version: first_line("kamailio", &["-v"]),
            sipp_version: first_line("sipp", &["-v"]),
            kamailio_children,
            kamailio_shm_mb: std::env::var("KAM_SHM_MB").unwrap_or_else(|_| "1024".into()),
            overload_control_available,
            calibration_ms_start: calibrate(),
            calibration_ms_end: 0.0,
        }
    }

    pub(crate) fn finish(&mut self) {
        self.calibration_ms_end = calibrate();
    }
}

/// A capacity figure.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Capacity {
    /// Highest clean offered rate (per second).
    pub value: f64,
    /// Whether any step was clean (if not, `value` is the best goodput seen).
    pub clean_found: bool,
    /// "At least": the server's core was not saturated where the steps failed.
    pub lower_bound: bool,
    /// Server core busy (1.0 = a core) at the capacity step.
    pub server_busy_at_capacity: f64,
    /// Server core busy at the lowest failing step above it.
    pub server_busy_at_first_failure: Option<f64>,
    /// What went wrong at that step.
    pub first_failure: Option<FailureDetail>,
}

/// Why the lowest failing step above a capacity was not clean.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FailureDetail {
    /// Offered rate of that step.
    pub rate: f64,
    /// Calls or REGISTERs that failed.
    pub failed: u64,
    /// 503 responses (a server refusing work: a full table, or overload control).
    pub r503: u64,
    /// PDD or REGISTER latency p99, ms.
    pub p99_ms: f64,
}

/// The highest goodput a server reached along one overload curve under the quota: its
/// saturation throughput (the goodput ceiling when offered more than it can serve), next
/// to its capacity by the p99 rule.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Saturation {
    /// Highest goodput of a point of the curve, calls/s.
    pub goodput_cps: f64,
    /// Offered rate of that point, calls/s.
    pub offered_cps: f64,
    /// Its load factor (x capacity under the quota).
    pub factor: f64,
    /// Server core busy at that point (1.0 = one core; the quota allows `quota_percent`/100).
    pub server_busy: f64,
    /// PDD p99 at that point, ms.
    pub pdd_p99_ms: f64,
    /// `goodput_cps` / the capacity under the quota by the p99 rule.
    pub over_capacity: f64,
}

/// The saturation of `server` in `run` along the curve with `period_us` (all zero when it has
/// no point there).
pub(crate) fn saturation(
    points: &[OverloadPoint],
    run: usize,
    server: &str,
    period_us: u64,
) -> Saturation {
    points
        .iter()
        .filter(|p| p.run == run && p.server == server && p.cfs_period_us == period_us)
        .max_by(|a, b| a.goodput_cps.total_cmp(&b.goodput_cps))
        .map_or_else(Saturation::default, |p| Saturation {
            goodput_cps: p.goodput_cps,
            offered_cps: p.offered_cps,
            factor: p.factor,
            server_busy: p.server_busy,
            pdd_p99_ms: p.pdd_p99_ms,
            over_capacity: p.goodput_cps / p.capacity_under_quota_cps.max(1e-9),
        })
}

/// Sets every point's `goodput_over_saturation` (its goodput / the saturation throughput of
/// its server, run and period).
pub(crate) fn set_saturation_ratios(points: &mut [OverloadPoint]) {
    let sats: Vec<f64> = points
        .iter()
        .map(|p| saturation(points, p.run, &p.server, p.cfs_period_us).goodput_cps)
        .collect();
    for (p, sat) in points.iter_mut().zip(sats) {
        p.goodput_over_saturation = if sat > 0.0 { p.goodput_cps / sat } else { 0.0 };
    }
}

/// One server's figures under the CPU quota with one CFS period.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct QuotaFigures {
    /// `cpu.cfs_period_us` as run.
    pub cfs_period_us: u64,
    /// The period asked for (differs when its quota would be under the kernel's minimum).
    pub requested_cfs_period_us: u64,
    /// `cpu.cfs_quota_us`.
    pub cfs_quota_us: u64,
    /// Capacity under the quota by the p99 rule (bisection).
    pub capacity: Capacity,
    /// Saturation throughput: the highest goodput along the curve.
    pub saturation: Saturation,
}

/// One server's figures of one run.
#[derive(Debug, Clone)]
pub(crate) struct ServerFigures {
    /// Calls over UDP.
    pub udp: Capacity,
    /// Calls over TCP.
    pub tcp: Capacity,
    /// REGISTERs over UDP.
    pub register: Capacity,
    /// The cost steps of calls (UDP), one per cost rate.
    pub cost: Vec<Step>,
    /// The cost steps of REGISTERs, one per rate.
    pub register_cost: Vec<Step>,
    /// Under the quota, one per CFS period.
    pub quota: Vec<QuotaFigures>,
    /// The sustained steps: UDP, then TCP.
    pub sustain: Vec<SustainRow>,
}

impl ServerFigures {
    fn cpu_per_call(&self) -> f64 {
        self.cost.first().map_or(0.0, |s| s.cpu_us_per_op)
    }

    fn cpu_per_register(&self) -> f64 {
        self.register_cost.first().map_or(0.0, |s| s.cpu_us_per_op)
    }

    /// The sustained try over `transport` that counts: the highest rate that held, or else
    /// the last try.
    fn sustained(&self, transport: &str) -> Option<&SustainRow> {
        let tries = || self.sustain.iter().filter(|r| r.transport == transport);
        tries()
            .filter(|r| r.held)
            .max_by(|a, b| a.rate.total_cmp(&b.rate))
            .or_else(|| tries().next_back())
    }

    /// The sustained capacity over `transport`: the rate that held for the whole phase
    /// (0 when none of the tries held).
    fn sustained_capacity(&self, transport: &str) -> f64 {
        self.sustained(transport)
            .filter(|r| r.held)
            .map_or(0.0, |r| r.rate)
    }

    fn to_json(&self) -> Value {
        let cost = |v: &[Step]| -> Vec<Value> {
            v.iter()
                .map(|s| {
                    json!({"rate": s.rate, "cpu_us_per_op": s.cpu_us_per_op, "ok": s.ok,
                           "attempted": s.attempted, "clean": s.clean, "server_busy": s.server_busy,
                           "server_user_us": s.server_user_us, "server_sys_us": s.server_sys_us,
                           "p50_ms": s.p50_ms, "p99_ms": s.p99_ms, "p999_ms": s.p999_ms})
                })
                .collect()
        };
        let first_quota = self.quota.first();
        let quota: Vec<Value> = self
            .quota
            .iter()
            .map(|q| {
                json!({
                    "cfs_period_us": q.cfs_period_us,
                    "requested_cfs_period_us": q.requested_cfs_period_us,
                    "cfs_quota_us": q.cfs_quota_us,
                    "capacity_cps": q.capacity.value,
                    "capacity_lower_bound": q.capacity.lower_bound,
                    "capacity_detail": q.capacity,
                    "saturation_cps": q.saturation.goodput_cps,
                    "saturation": q.saturation,
                })
            })
            .collect();
        let sustained = |t: &str| {
            self.sustained(t)
                .map_or(Value::Null, SustainRow::figures_json)
        };
        let ratio = |t: &str| {
            self.sustained(t)
                .map_or(Value::Null, |r| json!(r.completion_ratio))
        };
        json!({
            "capacity_udp_cps": self.udp.value,
            "capacity_udp_lower_bound": self.udp.lower_bound,
            "capacity_udp_detail": self.udp,
            "capacity_tcp_cps": self.tcp.value,
            "capacity_tcp_lower_bound": self.tcp.lower_bound,
            "capacity_tcp_detail": self.tcp,
            "register_rps": self.register.value,
            "register_lower_bound": self.register.lower_bound,
            "register_detail": self.register,
            "cpu_us_per_call_udp": self.cpu_per_call(),
            "cpu_us_per_register": self.cpu_per_register(),
            "cost_per_call_udp": cost(&self.cost),
            "cost_per_register": cost(&self.register_cost),
            "capacity_under_quota_cps": first_quota.map_or(0.0, |q| q.capacity.value),
            "capacity_under_quota_detail": first_quota.map(|q| &q.capacity),
            "saturation_under_quota_cps": first_quota.map_or(0.0, |q| q.saturation.goodput_cps),
            "quota": quota,
            "sustained_capacity_udp_cps": self.sustained_capacity("udp"),
            "sustained_capacity_tcp_cps": self.sustained_capacity("tcp"),
            "sustain_udp_completion_ratio": ratio("udp"),
            "sustain_tcp_completion_ratio": ratio("tcp"),
            "sustain_udp": sustained("udp"),
            "sustain_tcp": sustained("tcp"),
        })
    }
}

/// One point of the overload curve.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct OverloadPoint {
    pub run: usize,
    pub server: String,
    pub cfs_period_us: u64,
    pub factor: f64,
    pub capacity_under_quota_cps: f64,
    pub offered_cps: f64,
    pub goodput_cps: f64,
    pub goodput_over_capacity: f64,
    /// Goodput / the highest goodput of this server, run and period (its saturation).
    pub goodput_over_saturation: f64,
    pub pdd_p50_ms: f64,
    pub pdd_p99_ms: f64,
    pub pdd_p999_ms: f64,
    pub retrans_200: u64,
    pub retrans_invite: u64,
    pub failed: u64,
    pub r503: u64,
    pub server_busy: f64,
    pub server_user_us: u64,
    pub server_sys_us: u64,
    /// Server CPU over the window / what the quota allows over it (1.0 = all of the quota).
    pub quota_used: f64,
}

impl OverloadPoint {
    /// The point of `s` (a step under the quota of `quota_percent`% with `period_us`), at
    /// `factor` times `base` (the capacity under the quota).
    pub(crate) fn new(
        s: &Step,
        factor: f64,
        base: f64,
        period_us: u64,
        quota_percent: u64,
    ) -> Self {
        Self {
            run: s.run,
            server: s.server.clone(),
            cfs_period_us: period_us,
            factor,
            capacity_under_quota_cps: base,
            offered_cps: s.rate,
            goodput_cps: s.goodput,
            goodput_over_capacity: s.goodput / base.max(1e-9),
            goodput_over_saturation: 0.0,
            pdd_p50_ms: s.p50_ms,
            pdd_p99_ms: s.p99_ms,
            pdd_p999_ms: s.p999_ms,
            retrans_200: s.retrans_200,
            retrans_invite: s.retrans_invite,
            failed: s.failed,
            r503: s.r503,
            server_busy: s.server_busy,
            server_user_us: s.server_user_us,
            server_sys_us: s.server_sys_us,
            quota_used: s.server_busy / (quota_percent.max(1) as f64 / 100.0),
        }
    }
}

/// Both servers' figures of one run.
#[derive(Debug, Clone)]
pub(crate) struct RunFigures {
    /// holdline with its defaults.
    pub holdline: ServerFigures,
    /// Kamailio.
    pub kamailio: ServerFigures,
}

/// Everything the runs measured.
#[derive(Debug)]
pub(crate) struct Results {
    quick: bool,
    settings: Settings,
    machine: Machine,
    runs: Vec<RunFigures>,
    overload: Vec<OverloadPoint>,
    steps: Vec<Step>,
    elapsed_s: f64,
}

/// The four contract figures, in `results.json` and the ratios.
const KEYS: [&str; 4] = [
    "capacity_udp_cps",
    "capacity_tcp_cps",
    "register_rps",
    "cpu_us_per_call_udp",
];

/// Figures whose ratio holdline / Kamailio is reported besides [`KEYS`].
const MORE_RATIOS: [&str; 5] = [
    "sustained_capacity_udp_cps",
    "sustained_capacity_tcp_cps",
    "cpu_us_per_register",
    "capacity_under_quota_cps",
    "saturation_under_quota_cps",
];

/// Figures of each server whose spread over the runs is in `servers.NAME.spread`.
const SPREAD_KEYS: [&str; 11] = [
    "capacity_udp_cps",
    "capacity_tcp_cps",
    "sustained_capacity_udp_cps",
    "sustained_capacity_tcp_cps",
    "register_rps",
    "cpu_us_per_call_udp",
    "cpu_us_per_register",
    "capacity_under_quota_cps",
    "saturation_under_quota_cps",
    "sustain_udp_completion_ratio",
    "sustain_tcp_completion_ratio",
];

/// holdline / Kamailio for each ratio key (`null` where Kamailio's figure is 0).
fn ratios(h: &Value, k: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for key in KEYS.iter().chain(&MORE_RATIOS) {
        let (a, b) = (
            h[*key].as_f64().unwrap_or(0.0),
            k[*key].as_f64().unwrap_or(0.0),
        );
        let r = if b > 0.0 { json!(a / b) } else { Value::Null };
        out.insert((*key).to_string(), r);
    }
    Value::Object(out)
}

/// The server names of the overload curves, in plot and table order.
const CURVE_SERVERS: [&str; 3] = ["holdline", "kamailio", "holdline-off"];

impl Results {
    pub(crate) fn new(
        quick: bool,
        settings: &Settings,
        machine: Machine,
        runs: Vec<RunFigures>,
        overload: Vec<OverloadPoint>,
        steps: Vec<Step>,
        elapsed_s: f64,
    ) -> Self {
        Self {
            quick,
            settings: settings.clone(),
            machine,
            runs,
            overload,
            steps,
            elapsed_s,
        }
    }

    /// Every sustained row: run by run, holdline then Kamailio, UDP then TCP.
    fn sustain_rows(&self) -> Vec<&SustainRow> {
        self.runs
            .iter()
            .flat_map(|r| r.holdline.sustain.iter().chain(&r.kamailio.sustain))
            .collect()
    }

    /// The medians of the overload points of each period, server and load factor over the
    /// runs (field by field), with the goodput's spread.
    fn overload_medians(&self) -> Vec<Value> {
        let mut keys: Vec<(u64, &str, f64)> = Vec::new();
        for p in &self.overload {
            let k = (p.cfs_period_us, p.server.as_str(), p.factor);
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        keys.into_iter()
            .map(|(period, server, factor)| {
                let mine: Vec<&OverloadPoint> = self
                    .overload
                    .iter()
                    .filter(|p| {
                        p.cfs_period_us == period && p.server == server && p.factor == factor
                    })
                    .collect();
                let vals: Vec<Value> = mine
                    .iter()
                    .map(|p| serde_json::to_value(p).unwrap_or(Value::Null))
                    .collect();
                let refs: Vec<&Value> = vals.iter().collect();
                let mut m = median_json(&refs);
                let goodput: Vec<f64> = mine.iter().map(|p| p.goodput_cps).collect();
                if let Some(o) = m.as_object_mut() {
                    o.remove("run");
                    o.insert("runs".into(), json!(mine.len()));
                    o.insert("goodput_spread".into(), json!(Spread::of(&goodput)));
                }
                m
            })
            .collect()
    }

    /// Each period's saturation throughput of each curve's server, over the runs.
    fn saturations(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for &period in &self.settings.quota_periods_us {
            for server in CURVE_SERVERS {
                let sats: Vec<Saturation> = (0..self.runs.len())
                    .map(|run| saturation(&self.overload, run, server, period))
                    .collect();
                let g: Vec<f64> = sats.iter().map(|s| s.goodput_cps).collect();
                let o: Vec<f64> = sats.iter().map(|s| s.over_capacity).collect();
                out.push(json!({
                    "cfs_period_us": period,
                    "server": server,
                    "goodput_cps": Spread::of(&g),
                    "over_capacity": Spread::of(&o),
                    "runs": sats,
                }));
            }
        }
        out
    }

    fn to_json(&self) -> Value {
        let per_run: Vec<(Value, Value)> = self
            .runs
            .iter()
            .map(|r| (r.holdline.to_json(), r.kamailio.to_json()))
            .collect();
        let merged = |pick: fn(&(Value, Value)) -> &Value| -> Value {
            let all: Vec<&Value> = per_run.iter().map(pick).collect();
            let mut m = median_json(&all);
            let mut spread = serde_json::Map::new();
            for key in SPREAD_KEYS {
                let v: Vec<f64> = all.iter().filter_map(|x| x[key].as_f64()).collect();
                spread.insert(key.into(), json!(Spread::of(&v)));
            }
            if let Some(o) = m.as_object_mut() {
                o.insert("spread".into(), Value::Object(spread));
            }
            m
        };
        let h = merged(|x| &x.0);
        let k = merged(|x| &x.1);
        let ratio = ratios(&h, &k);
        let runs: Vec<Value> = per_run
            .iter()
            .enumerate()
            .map(|(i, (a, b))| {
                json!({"run": i, "servers": {"holdline": a, "kamailio": b}, "ratios": ratios(a, b)})
            })
            .collect();
        let rows: Vec<SustainRow> = self.sustain_rows().into_iter().cloned().collect();
        json!({
            "mode": if self.quick { "quick" } else { "full" },
            "command": crate::runner::command_line(),
            "elapsed_s": self.elapsed_s,
            "repeat": self.runs.len(),
            "overload_control_available": self.machine.overload_control_available,
            "machine": self.machine,
            "settings": self.settings,
            "criteria": {
                "clean": format!("no failed call, every call answered, PDD (REGISTER latency) p99 <= {P99_LIMIT_MS} ms, generator kept its schedule"),
                "lower_bound": "no failing step above the capacity, or the server core was under 85% busy at the first failing step",
                "cpu": "utime (user) and stime (sys) of the server's process tree (/proc) from the first arrival to the generator's exit",
                "saturation": "the highest goodput along the overload curve under the quota (per period)",
                "sustain": format!("each server offered its found capacity for {} s; RSS = VmRSS summed over its processes, PSS = Pss summed; slopes by least squares over the samples after {SLOPE_FROM_S} s", self.settings.sustain_s),
                "repeat": "servers.* and ratios are medians over the runs (field by field; a lower bound when any run's is); runs[] has every run's figures",
            },
            "servers": {"holdline": h, "kamailio": k},
            "ratios": ratio,
            "runs": runs,
            "sustain": {
                "duration_s": self.settings.sustain_s,
                "slope_from_s": SLOPE_FROM_S,
                "rows": rows,
                "medians": sustain::medians(&rows),
            },
            "overload": {
                "quota_percent_of_core": self.settings.quota_percent,
                "cfs_period_us": self.settings.quota_periods_us.first(),
                "cfs_periods_us": self.settings.quota_periods_us,
                "requested_cfs_periods_us": self.settings.requested_quota_periods_us,
                "points": self.overload,
                "medians": self.overload_medians(),
                "saturation": self.saturations(),
            },
            "steps": self.steps,
        })
    }
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| LabError::io(format!("write {}", path.display()), e))
}

fn steps_csv(steps: &[Step]) -> String {
    let mut out = String::from(
        "section,server,load,rate,offered_rate,duration_s,attempted,ok,failed,goodput,p50_ms,p99_ms,\
         retrans_200,retrans_invite,r503,server_cpu_us,window_s,server_busy,cpu_us_per_op,clean,\
         p999_ms,server_user_us,server_sys_us,cfs_period_us,run,core_busy,core_interrupt_us\n",
    );
    for s in steps {
        let _ = writeln!(
            out,
            "{},{},{},{},{:.1},{},{},{},{},{:.1},{:.3},{:.3},{},{},{},{},{:.3},{:.3},{:.1},{},{:.3},{},{},{},{},{:.3},{}",
            s.section,
            s.server,
            s.load,
            s.rate,
            s.offered_rate,
            s.duration_s,
            s.attempted,
            s.ok,
            s.failed,
            s.goodput,
            s.p50_ms,
            s.p99_ms,
            s.retrans_200,
            s.retrans_invite,
            s.r503,
            s.server_cpu_us,
            s.window_s,
            s.server_busy,
            s.cpu_us_per_op,
            s.clean,
            s.p999_ms,
            s.server_user_us,
            s.server_sys_us,
            s.cfs_period_us.map_or_else(String::new, |p| p.to_string()),
            s.run,
            s.core_busy,
            s.core_interrupt_us
        );
    }
    out
}

fn overload_csv(points: &[OverloadPoint]) -> String {
    let mut out = String::from(
        "server,factor,capacity_under_quota_cps,offered_cps,goodput_cps,goodput_over_capacity,\
         pdd_p50_ms,pdd_p99_ms,retrans_200,retrans_invite,failed,r503,server_busy,\
         cfs_period_us,run,pdd_p999_ms,goodput_over_saturation,server_user_us,server_sys_us,quota_used\n",
    );
    for p in points {
        let _ = writeln!(
            out,
            "{},{},{:.0},{:.0},{:.1},{:.3},{:.3},{:.3},{},{},{},{},{:.3},{},{},{:.3},{:.3},{},{},{:.3}",
            p.server,
            p.factor,
            p.capacity_under_quota_cps,
            p.offered_cps,
            p.goodput_cps,
            p.goodput_over_capacity,
            p.pdd_p50_ms,
            p.pdd_p99_ms,
            p.retrans_200,
            p.retrans_invite,
            p.failed,
            p.r503,
            p.server_busy,
            p.cfs_period_us,
            p.run,
            p.pdd_p999_ms,
            p.goodput_over_saturation,
            p.server_user_us,
            p.server_sys_us,
            p.quota_used
        );
    }
    out
}

/// A capacity over the runs: the median with its range, "≥" when any run's is a lower
/// bound, and how many runs found no clean step.
fn fig(caps: &[&Capacity]) -> String {
    let values: Vec<f64> = caps.iter().map(|c| c.value).collect();
    let v = Spread::of(&values).text(0);
    let unclean = caps.iter().filter(|c| !c.clean_found).count();
    if unclean == caps.len() {
        format!("no clean step (best {v})")
    } else if caps.iter().any(|c| c.lower_bound) {
        if unclean > 0 {
            format!("≥ {v} (no clean step in {unclean} of {} runs)", caps.len())
        } else {
            format!("≥ {v}")
        }
    } else if unclean > 0 {
        format!("{v} (no clean step in {unclean} of {} runs)", caps.len())
    } else {
        v
    }
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "—".into()
    }
}

/// A period for people: "10 ms", "1 ms", "2.5 ms".
fn period_text(us: u64) -> String {
    let ms = us as f64 / 1000.0;
    if ms.fract() == 0.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{ms} ms")
    }
}

/// Picks one of a server's capacities.
type CapacityOf = fn(&ServerFigures) -> &Capacity;

fn summary(r: &Results, j: &Value) -> String {
    let m = &r.machine;
    let n = r.runs.len();
    let hs: Vec<&ServerFigures> = r.runs.iter().map(|x| &x.holdline).collect();
    let ks: Vec<&ServerFigures> = r.runs.iter().map(|x| &x.kamailio).collect();
    let spread = |v: &[&ServerFigures], f: &dyn Fn(&ServerFigures) -> f64| -> Spread {
        Spread::of(&v.iter().map(|x| f(x)).collect::<Vec<f64>>())
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# holdline bench ({} mode)\n",
        if r.quick { "quick" } else { "full" }
    );
    let _ = writeln!(
        s,
        "{}; {} ({} cores), Linux {}; {}; {}; {:.0} s in all. CPU calibration (fixed loop): {:.0} ms at the start, {:.0} ms at the end.\n",
        m.date_utc,
        m.cpu_model,
        m.cores,
        m.kernel,
        m.kamailio_version,
        m.sipp_version,
        r.elapsed_s,
        m.calibration_ms_start,
        m.calibration_ms_end
    );
    let _ = writeln!(
        s,
        "Each server on core 1 (holdline: one worker; Kamailio: {} UDP + {} TCP children, {} MB shared memory), \
         `holdline load` on core 0, 127.0.0.1, a fresh server per step, steps of the two servers interleaved. \
         Capacity: highest clean offered rate of a {}-step geometric bisection, {} s per step; clean = no failed \
         call, all answered, p99 ≤ {P99_LIMIT_MS} ms, generator on schedule. \"≥\" marks a lower bound (the \
         server's core was under 85% busy where the steps failed, or nothing failed).\n",
        m.kamailio_children,
        m.kamailio_children,
        m.kamailio_shm_mb,
        r.settings.capacity_steps,
        r.settings.step_s
    );
    if n > 1 {
        let _ = writeln!(
            s,
            "{n} runs, interleaved step by step (holdline, Kamailio, holdline, Kamailio, …, run after run at each \
             step): every figure is the median of the runs with the smallest and the largest in parentheses; \
             ratios are ratios of medians; every run's own figures are in `results.json` (`runs`).\n"
        );
    }
    s.push_str(
        "| figure | holdline | Kamailio | holdline / Kamailio |\n| --- | ---: | ---: | ---: |\n",
    );
    let caps = |v: &[&ServerFigures], f: CapacityOf| -> Vec<Capacity> {
        v.iter().map(|x| f(x).clone()).collect()
    };
    let rows: [(&str, CapacityOf); 3] = [
        ("calls/s over UDP (capacity)", |x| &x.udp),
        ("calls/s over TCP (capacity)", |x| &x.tcp),
        ("REGISTER/s over UDP (capacity)", |x| &x.register),
    ];
    for (name, f) in rows {
        let (a, b) = (caps(&hs, f), caps(&ks, f));
        let ar: Vec<&Capacity> = a.iter().collect();
        let br: Vec<&Capacity> = b.iter().collect();
        let (ma, mb) = (
            Spread::of(&a.iter().map(|c| c.value).collect::<Vec<_>>()).median,
            Spread::of(&b.iter().map(|c| c.value).collect::<Vec<_>>()).median,
        );
        let _ = writeln!(
            s,
            "| {name} | {} | {} | {} |",
            fig(&ar),
            fig(&br),
            ratio(ma, mb)
        );
    }
    for t in ["udp", "tcp"] {
        let f = |x: &ServerFigures| x.sustained_capacity(t);
        let (a, b) = (spread(&hs, &f), spread(&ks, &f));
        let _ = writeln!(
            s,
            "| calls/s over {} held for {} s (sustained capacity: ≥ {:.1}% completed) | {} | {} | {} |",
            t.to_uppercase(),
            r.settings.sustain_s,
            sustain::HELD_RATIO * 100.0,
            a.text(0),
            b.text(0),
            ratio(a.median, b.median)
        );
    }
    for (qi, &period) in r.settings.quota_periods_us.iter().enumerate() {
        let q = |v: &[&ServerFigures]| -> Vec<QuotaFigures> {
            v.iter().filter_map(|x| x.quota.get(qi).cloned()).collect()
        };
        let (a, b) = (q(&hs), q(&ks));
        let ac: Vec<&Capacity> = a.iter().map(|x| &x.capacity).collect();
        let bc: Vec<&Capacity> = b.iter().map(|x| &x.capacity).collect();
        let med = |v: &[QuotaFigures], f: fn(&QuotaFigures) -> f64| -> Spread {
            Spread::of(&v.iter().map(f).collect::<Vec<_>>())
        };
        let (ca, cb) = (med(&a, |x| x.capacity.value), med(&b, |x| x.capacity.value));
        let (sa, sb) = (
            med(&a, |x| x.saturation.goodput_cps),
            med(&b, |x| x.saturation.goodput_cps),
        );
        let pt = period_text(period);
        let _ = writeln!(
            s,
            "| calls/s under a {}% CPU quota, period {pt} (UDP, p99 rule) | {} | {} | {} |",
            r.settings.quota_percent,
            fig(&ac),
            fig(&bc),
            ratio(ca.median, cb.median)
        );
        let _ = writeln!(
            s,
            "| saturation goodput under the quota, period {pt} (highest along the curve) | {} | {} | {} |",
            sa.text(0),
            sb.text(0),
            ratio(sa.median, sb.median)
        );
    }
    for (i, rate) in r.settings.cost_rates.iter().enumerate() {
        let f = |x: &ServerFigures| x.cost.get(i).map_or(0.0, |c| c.cpu_us_per_op);
        let (a, b) = (spread(&hs, &f), spread(&ks, &f));
        let _ = writeln!(
            s,
            "| server CPU µs per call at {} calls/s (UDP) | {} | {} | {} |",
            num_text(*rate, 0),
            a.text(1),
            b.text(1),
            ratio(a.median, b.median)
        );
    }
    for (i, rate) in r.settings.register_cost_rates.iter().enumerate() {
        let f = |x: &ServerFigures| x.register_cost.get(i).map_or(0.0, |c| c.cpu_us_per_op);
        let (a, b) = (spread(&hs, &f), spread(&ks, &f));
        let _ = writeln!(
            s,
            "| server CPU µs per REGISTER at {}/s | {} | {} | {} |",
            num_text(*rate, 0),
            a.text(1),
            b.text(1),
            ratio(a.median, b.median)
        );
    }
    for t in ["udp", "tcp"] {
        let f = |x: &ServerFigures| x.sustained(t).map_or(0.0, |r| r.completion_ratio);
        let (a, b) = (spread(&hs, &f), spread(&ks, &f));
        let _ = writeln!(
            s,
            "| completed / placed at its {} sustained capacity (last try) for {} s | {} | {} | {} |",
            t.to_uppercase(),
            r.settings.sustain_s,
            a.text(4),
            b.text(4),
            ratio(a.median, b.median)
        );
    }
    let mut why = String::new();
    for (ri, run) in r.runs.iter().enumerate() {
        for (server, f) in [("holdline", &run.holdline), ("Kamailio", &run.kamailio)] {
            for (what, c) in [("UDP", &f.udp), ("TCP", &f.tcp), ("REGISTER", &f.register)] {
                if let (Some(d), Some(busy)) = (&c.first_failure, c.server_busy_at_first_failure) {
                    let run_tag = if n > 1 {
                        format!("run {}: ", ri + 1)
                    } else {
                        String::new()
                    };
                    let _ = write!(
                        why,
                        "\n- {run_tag}{server} {what}: at {:.0}/s {} failed, {} × 503, p99 {:.0} ms, server core {:.0}% busy",
                        d.rate,
                        d.failed,
                        d.r503,
                        d.p99_ms,
                        busy * 100.0
                    );
                }
            }
        }
    }
    let busy = |v: &[&ServerFigures], f: CapacityOf| -> String {
        Spread::of(
            &v.iter()
                .map(|x| f(x).server_busy_at_capacity * 100.0)
                .collect::<Vec<_>>(),
        )
        .text(0)
    };
    let _ = writeln!(
        s,
        "\nThe first failing step above each capacity:{why}\n\nServer core busy at capacity, % (holdline / Kamailio): UDP {} / {}, TCP {} / {}, REGISTER {} / {}.\n",
        busy(&hs, |x| &x.udp),
        busy(&ks, |x| &x.udp),
        busy(&hs, |x| &x.tcp),
        busy(&ks, |x| &x.tcp),
        busy(&hs, |x| &x.register),
        busy(&ks, |x| &x.register)
    );
    sustain_summary(&mut s, r, j);
    overload_summary(&mut s, r, j);
    let _ = writeln!(
        s,
        "\nRatios in `results.json` (holdline / Kamailio): {}\n\nPlots: `goodput.svg`/`.png` (goodput vs offered load under the quota, first period; \
         `goodput-PERIODus` for the others), `cost.svg`/`.png` (server CPU per call and per REGISTER), `sustain-rss` and \
         `sustain-completed` (the sustained phase over time). Every step, with its CPU split into user and system time \
         and its latency p50/p99/p99.9: `steps.csv`; overload points: `overload.csv`; sustained phase: `sustain.csv`, \
         `sustain-samples.csv`.",
        j["ratios"]
    );
    s
}

/// The sustained phase's table (medians over the runs).
fn sustain_summary(s: &mut String, r: &Results, j: &Value) {
    let _ = writeln!(
        s,
        "## Sustained load at the found capacity ({} s per server and transport)\n\n\
         Each server offered the capacity found above, its process tree sampled every second; a rate at which \
         fewer than 99.9% of the calls completed is retried lower, and the highest rate that held is the \
         sustained capacity. RSS: `VmRSS` summed \
         over the server's processes (Kamailio's shared memory counts once per process that touched it; PSS counts \
         it once); slope: least squares over the samples after {SLOPE_FROM_S:.0} s (none for shorter runs).\n",
        r.settings.sustain_s
    );
    let Some(medians) = j["sustain"]["medians"].as_array() else {
        return;
    };
    let retried: Vec<String> = r
        .runs
        .iter()
        .flat_map(|run| run.holdline.sustain.iter().chain(&run.kamailio.sustain))
        .filter(|row| !row.held)
        .map(|row| {
            format!(
                "{} {} at {}/s (run {}, try {}): {:.4} completed, {} × 503",
                row.server,
                row.transport,
                num_text(row.rate, 0),
                row.run + 1,
                row.attempt + 1,
                row.completion_ratio,
                row.r503
            )
        })
        .collect();
    if !retried.is_empty() {
        let _ = writeln!(
            s,
            "Tries that did not hold (until one holds, each retry offers {:.0}% of the lowest rate that \
             failed; then the midpoint between the highest that held and the lowest that failed, until \
             they are within {:.0}%; at most {} tries; the table shows the highest rate that held):
",
            sustain::BACKOFF * 100.0,
            sustain::RESOLUTION * 100.0,
            r.settings.sustain_tries
        );
        for t in &retried {
            let _ = writeln!(s, "- {t}");
        }
        s.push('\n');
    }
    s.push_str(
        "| server | transport | offered calls/s | completed / placed | 503 | RSS start / end / max MB | RSS slope MB/min | PSS end MB | CPU µs per call (user / sys) | PDD p50 / p99 / p99.9 ms |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for m in medians {
        let f = |k: &str| num(m, &[k]);
        let ratio_text = if m["runs"].as_u64().unwrap_or(1) > 1 {
            format!(
                "{:.4} ({:.4}–{:.4})",
                f("completion_ratio"),
                f("completion_ratio_min"),
                f("completion_ratio_max")
            )
        } else {
            format!("{:.4}", f("completion_ratio"))
        };
        let slope = m["rss_slope_mb_per_min"]
            .as_f64()
            .map_or_else(|| "—".to_string(), |v| format!("{v:+.2}"));
        let pss = m["pss_end_mb"]
            .as_f64()
            .map_or_else(|| "—".to_string(), |v| format!("{v:.1}"));
        let cpu = f("server_cpu_us").max(1.0);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {ratio_text} | {} | {:.1} / {:.1} / {:.1} | {slope} | {pss} | {:.1} ({:.0}% / {:.0}%) | {:.1} / {:.1} / {:.1} |",
            m["server"].as_str().unwrap_or(""),
            m["transport"].as_str().unwrap_or(""),
            num_text(f("rate"), 0),
            f("r503"),
            f("rss_start_mb"),
            f("rss_end_mb"),
            f("rss_max_mb"),
            f("cpu_us_per_call"),
            f("server_user_us") / cpu * 100.0,
            f("server_sys_us") / cpu * 100.0,
            f("pdd_p50_ms"),
            f("pdd_p99_ms"),
            f("pdd_p999_ms"),
        );
    }
    s.push('\n');
}

/// One table of the overload curve per CFS period (medians over the runs).
fn overload_summary(s: &mut String, r: &Results, j: &Value) {
    let n = r.runs.len();
    let medians = j["overload"]["medians"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let sats = j["overload"]["saturation"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (i, &period) in r.settings.quota_periods_us.iter().enumerate() {
        let requested = r
            .settings
            .requested_quota_periods_us
            .get(i)
            .copied()
            .unwrap_or(period);
        let _ = writeln!(
            s,
            "## Overload (UDP, cgroup v1 CPU quota {}% of a core, period {period} µs)\n",
            r.settings.quota_percent
        );
        if requested != period {
            let _ = writeln!(
                s,
                "Asked for a period of {requested} µs: its quota ({} µs) is under the kernel's minimum of 1,000 µs, so \
                 this curve ran with the smallest period that allows a {}% quota.\n",
                requested * r.settings.quota_percent / 100,
                r.settings.quota_percent
            );
        }
        if i == 0 && !r.machine.overload_control_available {
            s.push_str(
                "`holdline serve` has no `--overload` flag in this build (`overload_control_available: false`): \
                 \"holdline-off\" ran with the same arguments as \"holdline\".\n\n",
            );
        }
        let sat_text: Vec<String> = sats
            .iter()
            .filter(|x| x["cfs_period_us"].as_u64() == Some(period))
            .map(|x| {
                let g = &x["goodput_cps"];
                let o = &x["over_capacity"];
                let spread = |v: &Value| Spread {
                    median: num(v, &["median"]),
                    min: num(v, &["min"]),
                    max: num(v, &["max"]),
                    values: v["values"]
                        .as_array()
                        .map(|a| a.iter().filter_map(Value::as_f64).collect())
                        .unwrap_or_default(),
                };
                format!(
                    "{} {} calls/s ({}x its p99-rule capacity under the quota)",
                    x["server"].as_str().unwrap_or(""),
                    spread(g).text(0),
                    spread(o).text(2)
                )
            })
            .collect();
        let _ = writeln!(
            s,
            "Saturation throughput (the highest goodput along the curve): {}.\n",
            sat_text.join("; ")
        );
        s.push_str(
            "| offered (x capacity under quota) | server | offered calls/s | goodput calls/s | goodput / capacity | goodput / saturation | PDD p50 ms | PDD p99 ms | PDD p99.9 ms | quota used | 200 OK retrans | INVITE retrans | failed | 503 |\n\
             | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        );
        for p in medians
            .iter()
            .filter(|p| p["cfs_period_us"].as_u64() == Some(period))
        {
            let f = |k: &str| num(p, &[k]);
            let goodput = if n > 1 {
                let g = &p["goodput_spread"];
                format!(
                    "{:.0} ({:.0}–{:.0})",
                    f("goodput_cps"),
                    num(g, &["min"]),
                    num(g, &["max"])
                )
            } else {
                format!("{:.0}", f("goodput_cps"))
            };
            let _ = writeln!(
                s,
                "| {} | {} | {:.0} | {goodput} | {:.2} | {:.2} | {:.1} | {:.1} | {:.1} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} |",
                f("factor"),
                p["server"].as_str().unwrap_or(""),
                f("offered_cps"),
                f("goodput_over_capacity"),
                f("goodput_over_saturation"),
                f("pdd_p50_ms"),
                f("pdd_p99_ms"),
                f("pdd_p999_ms"),
                f("quota_used"),
                f("retrans_200"),
                f("retrans_invite"),
                f("failed"),
                f("r503")
            );
        }
        s.push('\n');
    }
}

/// Writes `results.json`, `steps.csv`, `overload.csv`, `sustain.csv`, `sustain-samples.csv`,
/// `summary.md` and the plots into `dir`.
pub(crate) fn write_all(dir: &Path, r: &Results) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| LabError::io(format!("create {}", dir.display()), e))?;
    let j = r.to_json();
    let text = serde_json::to_string_pretty(&j).map_err(|e| LabError::Report {
        path: dir.join("results.json"),
        reason: e.to_string(),
    })?;
    write(&dir.join("results.json"), &text)?;
    write(&dir.join("steps.csv"), &steps_csv(&r.steps))?;
    write(&dir.join("overload.csv"), &overload_csv(&r.overload))?;
    let rows: Vec<SustainRow> = r.sustain_rows().into_iter().cloned().collect();
    write(&dir.join("sustain.csv"), &sustain::rows_csv(&rows))?;
    write(
        &dir.join("sustain-samples.csv"),
        &sustain::samples_csv(&rows),
    )?;
    write(&dir.join("summary.md"), &summary(r, &j))?;
    sustain::plots(dir, &rows, r.runs.len())?;
    // The overload curves: medians over the runs, one plot per period.
    let medians = j["overload"]["medians"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (i, &period) in r.settings.quota_periods_us.iter().enumerate() {
        let mut goodput = Vec::new();
        for name in CURVE_SERVERS {
            let pts: Vec<(f64, f64)> = medians
                .iter()
                .filter(|p| p["server"] == name && p["cfs_period_us"].as_u64() == Some(period))
                .map(|p| (num(p, &["offered_cps"]), num(p, &["goodput_cps"])))
                .collect();
            goodput.push((name.to_string(), pts));
        }
        let file = if i == 0 {
            "goodput".to_string()
        } else {
            format!("goodput-{period}us")
        };
        plot::chart(
            dir,
            &file,
            &format!(
                "Goodput under a {}% CPU quota, period {} (UDP)",
                r.settings.quota_percent,
                period_text(period)
            ),
            "offered calls/s",
            "goodput calls/s",
            &goodput,
        )?;
    }
    let series = |f: &ServerFigures, name: &str| -> Vec<(String, Vec<(f64, f64)>)> {
        vec![
            (
                format!("{name} per call"),
                f.cost.iter().map(|s| (s.rate, s.cpu_us_per_op)).collect(),
            ),
            (
                format!("{name} per REGISTER"),
                f.register_cost
                    .iter()
                    .map(|s| (s.rate, s.cpu_us_per_op))
                    .collect(),
            ),
        ]
    };
    let mut cost = Vec::new();
    for (ri, run) in r.runs.iter().enumerate() {
        let suffix = if r.runs.len() > 1 {
            format!(" #{}", ri + 1)
        } else {
            String::new()
        };
        cost.extend(series(&run.holdline, &format!("holdline{suffix}")));
        cost.extend(series(&run.kamailio, &format!("Kamailio{suffix}")));
    }
    plot::chart(
        dir,
        "cost",
        "Server CPU per call / REGISTER (one core)",
        "offered rate (per s)",
        "CPU µs",
        &cost,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generator::{ServerSample, StepRun};
    use crate::soak::UacSecond;

    fn step(section: &str, server: &str, run: usize, rate: f64, goodput: f64) -> Step {
        Step {
            section: section.into(),
            run,
            cfs_period_us: None,
            server: server.into(),
            load: "calls-udp".into(),
            rate,
            offered_rate: rate,
            duration_s: 60.0,
            attempted: (rate * 60.0) as u64,
            ok: (goodput * 60.0) as u64,
            failed: ((rate - goodput) * 60.0) as u64,
            goodput,
            p50_ms: 1.0,
            p99_ms: 5.0,
            p999_ms: 9.0,
            retrans_200: 0,
            retrans_invite: 0,
            r503: 0,
            server_cpu_us: 3_000_000,
            server_user_us: 2_000_000,
            server_sys_us: 1_000_000,
            window_s: 61.0,
            server_busy: 0.2,
            core_busy: 0.23,
            core_interrupt_us: 300_000,
            cpu_us_per_op: 60.0 + run as f64,
            clean: true,
        }
    }

    fn capacity(value: f64) -> Capacity {
        Capacity {
            value,
            clean_found: true,
            lower_bound: false,
            server_busy_at_capacity: 0.5,
            server_busy_at_first_failure: Some(0.9),
            first_failure: None,
        }
    }

    fn sustained(server: &str, run: usize, transport: &str, rate: f64) -> SustainRow {
        let samples = (0..=61)
            .map(|t| ServerSample {
                t_s: f64::from(t),
                rss_mb: 100.0 + f64::from(t.min(32)),
                pss_mb: Some(90.0),
                cpu_s: f64::from(t) * 0.2,
                user_s: f64::from(t) * 0.15,
                sys_s: f64::from(t) * 0.05,
                processes: 1,
            })
            .collect();
        let per_second = (1..=61)
            .map(|t| UacSecond {
                t_s: f64::from(t),
                attempted: rate,
                calls_ok: rate,
                calls_failed: 0.0,
                r503: 0.0,
            })
            .collect();
        let mut st = step(
            "sustain",
            server,
            run,
            rate,
            rate * (0.99 + 0.005 * run as f64),
        );
        st.ok = st.attempted - 10 * (run as u64 + 1);
        SustainRow::new(
            StepRun {
                step: st,
                samples,
                per_second,
            },
            transport,
            true,
            0,
        )
    }

    fn figures(server: &str, run: usize, udp: f64, periods: &[u64]) -> ServerFigures {
        ServerFigures {
            udp: capacity(udp),
            tcp: capacity(udp * 1.2),
            register: capacity(udp * 4.0),
            cost: vec![step("cost", server, run, 1000.0, 1000.0)],
            register_cost: vec![step("cost", server, run, 2000.0, 2000.0)],
            quota: periods
                .iter()
                .map(|&p| QuotaFigures {
                    cfs_period_us: p,
                    requested_cfs_period_us: if p == 4000 { 1000 } else { p },
                    cfs_quota_us: p / 4,
                    capacity: capacity(udp / 4.0),
                    saturation: Saturation::default(),
                })
                .collect(),
            sustain: vec![
                sustained(server, run, "udp", udp),
                sustained(server, run, "tcp", udp * 1.2),
            ],
        }
    }

    fn machine() -> Machine {
        Machine {
            date_utc: "2026-11-25 00:00 UTC".into(),
            cpu_model: "test".into(),
            cores: 2,
            kernel: "6.18".into(),
            net_core_rmem_max: "0".into(),
            kamailio_version: "kamailio 5.6.3".into(),
            sipp_version: "SIPp 3.6.1".into(),
            kamailio_children: 1,
            kamailio_shm_mb: "1024".into(),
            overload_control_available: true,
            calibration_ms_start: 80.0,
            calibration_ms_end: 80.0,
        }
    }

    #[test]
    fn two_runs_and_two_periods_give_medians_ranges_and_every_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut settings = Settings::full();
        settings.quota_periods_us = vec![10_000, 4_000];
        settings.requested_quota_periods_us = vec![10_000, 1_000];
        settings.overload_factors = vec![0.5, 2.0];
        settings.repeat = 2;
        let periods = settings.quota_periods_us.clone();
        let mut runs: Vec<RunFigures> = [(4000.0, 2000.0), (6000.0, 3000.0)]
            .iter()
            .enumerate()
            .map(|(run, &(h, k))| RunFigures {
                holdline: figures("holdline", run, h, &periods),
                kamailio: figures("kamailio", run, k, &periods),
            })
            .collect();
        // Run 1's holdline did not hold 4,400 calls/s over UDP and held 4,000 at its second try.
        let mut missed = sustained("holdline", 0, "udp", 4400.0);
        missed.completion_ratio = 0.99;
        missed.held = false;
        missed.r503 = 2640;
        runs[0].holdline.sustain[0].attempt = 1;
        runs[0].holdline.sustain.insert(0, missed);
        let mut overload = Vec::new();
        for &period in &periods {
            for &factor in &settings.overload_factors {
                for (run, rf) in runs.iter().enumerate() {
                    for (server, base) in [
                        ("holdline", rf.holdline.quota[0].capacity.value),
                        ("kamailio", rf.kamailio.quota[0].capacity.value),
                        ("holdline-off", rf.holdline.quota[0].capacity.value),
                    ] {
                        let offered = base * factor;
                        let goodput = offered.min(base * 1.5) * (1.0 + 0.1 * run as f64);
                        let s = step("overload", server, run, offered, goodput);
                        overload.push(OverloadPoint::new(&s, factor, base, period, 25));
                    }
                }
            }
        }
        set_saturation_ratios(&mut overload);
        for (run, rf) in runs.iter_mut().enumerate() {
            for (name, f) in [
                ("holdline", &mut rf.holdline),
                ("kamailio", &mut rf.kamailio),
            ] {
                for q in &mut f.quota {
                    q.saturation = saturation(&overload, run, name, q.cfs_period_us);
                }
            }
        }
        let steps = vec![step("capacity", "holdline", 0, 1000.0, 1000.0)];
        let r = Results::new(false, &settings, machine(), runs, overload, steps, 1.0);
        write_all(dir.path(), &r).expect("write the results");

        let text = std::fs::read_to_string(dir.path().join("results.json")).expect("json");
        let v: Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(v["repeat"], 2);
        let h = &v["servers"]["holdline"];
        assert_eq!(h["capacity_udp_cps"], 5000.0, "median of 4000 and 6000");
        assert_eq!(h["spread"]["capacity_udp_cps"]["min"], 4000.0);
        assert_eq!(h["spread"]["capacity_udp_cps"]["max"], 6000.0);
        assert_eq!(v["ratios"]["capacity_udp_cps"], 2.0, "ratio of medians");
        assert_eq!(v["runs"].as_array().map(Vec::len), Some(2));
        assert_eq!(
            v["runs"][1]["servers"]["holdline"]["capacity_udp_cps"],
            6000.0
        );
        // Saturation: 1.5x the capacity under the quota (1,000 and 1,500), 10% more in the
        // second run: 1,500 and 2,475.
        let sat = num(h, &["saturation_under_quota_cps"]);
        assert!((sat - (1500.0 + 2475.0) / 2.0).abs() < 1e-6, "{sat}");
        assert_eq!(h["quota"].as_array().map(Vec::len), Some(2));
        assert_eq!(h["quota"][1]["requested_cfs_period_us"], 1000);
        assert_eq!(
            v["overload"]["medians"].as_array().map(Vec::len),
            Some(2 * 3 * 2),
            "periods x servers x factors"
        );
        assert_eq!(v["overload"]["points"].as_array().map(Vec::len), Some(24));
        assert_eq!(v["sustain"]["rows"].as_array().map(Vec::len), Some(9));
        assert_eq!(
            v["runs"][0]["servers"]["holdline"]["sustained_capacity_udp_cps"], 4000.0,
            "the rate that held, not the first try"
        );
        assert_eq!(h["sustained_capacity_udp_cps"], 5000.0);
        assert_eq!(v["sustain"]["medians"].as_array().map(Vec::len), Some(4));
        let slope = num(&v["sustain"]["medians"][0], &["rss_slope_mb_per_min"]);
        assert!(slope.abs() < 1e-9, "flat after 32 s: {slope}");
        for p in v["overload"]["points"].as_array().into_iter().flatten() {
            let g = num(p, &["goodput_over_saturation"]);
            assert!(g > 0.0 && g <= 1.0 + 1e-12, "{p}");
        }

        let summary = std::fs::read_to_string(dir.path().join("summary.md")).expect("summary");
        assert!(
            summary.contains(
                "| calls/s over UDP (capacity) | 5,000 (4,000–6,000) | 2,500 (2,000–3,000) | 2.00 |"
            ),
            "{summary}"
        );
        assert!(summary.contains("2 runs, interleaved"), "{summary}");
        assert!(
            summary.contains("Asked for a period of 1000 µs"),
            "{summary}"
        );
        assert!(summary.contains("period 4000 µs"), "{summary}");
        assert!(summary.contains("## Sustained load"), "{summary}");
        assert!(
            summary.contains(
                "| calls/s over UDP held for 60 s (sustained capacity: ≥ 99.9% completed) | 5,000 (4,000–6,000) |"
            ),
            "{summary}"
        );
        assert!(
            summary
                .contains("- holdline udp at 4,400/s (run 1, try 1): 0.9900 completed, 2640 × 503"),
            "{summary}"
        );
        for f in [
            "goodput.svg",
            "goodput-4000us.png",
            "sustain-rss.svg",
            "sustain-completed.png",
            "cost.svg",
            "sustain.csv",
            "sustain-samples.csv",
            "overload.csv",
            "steps.csv",
        ] {
            assert!(dir.path().join(f).is_file(), "{f}");
        }
        let rows = std::fs::read_to_string(dir.path().join("sustain.csv")).expect("csv");
        assert_eq!(rows.lines().count(), 1 + 9);
    }
}
