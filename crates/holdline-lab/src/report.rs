//! The results of `holdline bench`: `results.json`, CSVs, `summary.md`, plots.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde::Serialize;
use serde_json::{Value, json};

use crate::error::{LabError, Result};
use crate::generator::{P99_LIMIT_MS, Step};
use crate::plot;

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
    pub quota_period_us: u64,
    pub quota_steps: usize,
    pub overload_factors: Vec<f64>,
    pub overload_s: f64,
}

impl Settings {
    /// Under 3 minutes: 3 bisection steps of 2 s, cost at 1,000 calls/s, 3 overload points.
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
            quota_period_us: 10_000,
            quota_steps: 2,
            overload_factors: vec![0.5, 2.0, 10.0],
            overload_s: 2.0,
        }
    }

    /// Under 30 minutes: 6 bisection steps of 5 s, two cost rates, 7 overload points.
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
            quota_period_us: 10_000,
            quota_steps: 4,
            overload_factors: vec![0.5, 1.0, 1.5, 2.0, 4.0, 7.0, 10.0],
            overload_s: 5.0,
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

/// One server's figures.
#[derive(Debug, Clone)]
pub(crate) struct ServerFigures {
    udp: Capacity,
    tcp: Capacity,
    register: Capacity,
    cost: Vec<Step>,
    register_cost: Vec<Step>,
    quota: Capacity,
}

impl ServerFigures {
    pub(crate) fn new(
        udp: Capacity,
        tcp: Capacity,
        register: Capacity,
        cost: &[Step],
        register_cost: &[Step],
        quota: Capacity,
    ) -> Self {
        Self {
            udp,
            tcp,
            register,
            cost: cost.to_vec(),
            register_cost: register_cost.to_vec(),
            quota,
        }
    }

    fn cpu_per_call(&self) -> f64 {
        self.cost.first().map_or(0.0, |s| s.cpu_us_per_op)
    }

    fn cpu_per_register(&self) -> f64 {
        self.register_cost.first().map_or(0.0, |s| s.cpu_us_per_op)
    }

    fn to_json(&self) -> Value {
        let cost = |v: &[Step]| -> Vec<Value> {
            v.iter()
                .map(|s| {
                    json!({"rate": s.rate, "cpu_us_per_op": s.cpu_us_per_op, "ok": s.ok,
                           "attempted": s.attempted, "clean": s.clean, "server_busy": s.server_busy})
                })
                .collect()
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
            "capacity_under_quota_cps": self.quota.value,
            "capacity_under_quota_detail": self.quota,
        })
    }
}

/// One point of the overload curve.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct OverloadPoint {
    pub server: String,
    pub factor: f64,
    pub capacity_under_quota_cps: f64,
    pub offered_cps: f64,
    pub goodput_cps: f64,
    pub goodput_over_capacity: f64,
    pub pdd_p50_ms: f64,
    pub pdd_p99_ms: f64,
    pub retrans_200: u64,
    pub retrans_invite: u64,
    pub failed: u64,
    pub r503: u64,
    pub server_busy: f64,
}

impl OverloadPoint {
    pub(crate) fn new(s: &Step, factor: f64, base: f64) -> Self {
        Self {
            server: s.server.clone(),
            factor,
            capacity_under_quota_cps: base,
            offered_cps: s.rate,
            goodput_cps: s.goodput,
            goodput_over_capacity: s.goodput / base.max(1e-9),
            pdd_p50_ms: s.p50_ms,
            pdd_p99_ms: s.p99_ms,
            retrans_200: s.retrans_200,
            retrans_invite: s.retrans_invite,
            failed: s.failed,
            r503: s.r503,
            server_busy: s.server_busy,
        }
    }
}

/// Everything one run measured.
#[derive(Debug)]
pub(crate) struct Results {
    quick: bool,
    settings: Settings,
    machine: Machine,
    holdline: ServerFigures,
    kamailio: ServerFigures,
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

impl Results {
    pub(crate) fn new(
        quick: bool,
        settings: &Settings,
        machine: Machine,
        mut figures: Vec<ServerFigures>,
        overload: Vec<OverloadPoint>,
        steps: Vec<Step>,
        elapsed_s: f64,
    ) -> Self {
        let kamailio = figures.pop();
        let holdline = figures.pop();
        let (Some(holdline), Some(kamailio)) = (holdline, kamailio) else {
            unreachable!("bench passes the figures of both servers")
        };
        Self {
            quick,
            settings: settings.clone(),
            machine,
            holdline,
            kamailio,
            overload,
            steps,
            elapsed_s,
        }
    }

    fn to_json(&self) -> Value {
        let h = self.holdline.to_json();
        let k = self.kamailio.to_json();
        let mut ratios = serde_json::Map::new();
        for key in KEYS
            .iter()
            .chain(&["cpu_us_per_register", "capacity_under_quota_cps"])
        {
            let (a, b) = (
                h[*key].as_f64().unwrap_or(0.0),
                k[*key].as_f64().unwrap_or(0.0),
            );
            let r = if b > 0.0 { json!(a / b) } else { Value::Null };
            ratios.insert((*key).to_string(), r);
        }
        json!({
            "mode": if self.quick { "quick" } else { "full" },
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "elapsed_s": self.elapsed_s,
            "overload_control_available": self.machine.overload_control_available,
            "machine": self.machine,
            "settings": self.settings,
            "criteria": {
                "clean": format!("no failed call, every call answered, PDD (REGISTER latency) p99 <= {P99_LIMIT_MS} ms, generator kept its schedule"),
                "lower_bound": "no failing step above the capacity, or the server core was under 85% busy at the first failing step",
                "cpu": "utime+stime of the server's process tree (/proc) from the first arrival to the generator's exit",
            },
            "servers": {"holdline": h, "kamailio": k},
            "ratios": ratios,
            "overload": {
                "quota_percent_of_core": self.settings.quota_percent,
                "cfs_period_us": self.settings.quota_period_us,
                "points": self.overload,
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
         retrans_200,retrans_invite,r503,server_cpu_us,window_s,server_busy,cpu_us_per_op,clean\n",
    );
    for s in steps {
        let _ = writeln!(
            out,
            "{},{},{},{},{:.1},{},{},{},{},{:.1},{:.3},{:.3},{},{},{},{},{:.3},{:.3},{:.1},{}",
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
            s.clean
        );
    }
    out
}

fn overload_csv(points: &[OverloadPoint]) -> String {
    let mut out = String::from(
        "server,factor,capacity_under_quota_cps,offered_cps,goodput_cps,goodput_over_capacity,\
         pdd_p50_ms,pdd_p99_ms,retrans_200,retrans_invite,failed,r503,server_busy\n",
    );
    for p in points {
        let _ = writeln!(
            out,
            "{},{},{:.0},{:.0},{:.1},{:.3},{:.3},{:.3},{},{},{},{},{:.3}",
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
            p.server_busy
        );
    }
    out
}

fn fig(c: &Capacity) -> String {
    let v = format!("{:.0}", c.value);
    if !c.clean_found {
        format!("no clean step (best {v})")
    } else if c.lower_bound {
        format!("≥ {v}")
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

fn summary(r: &Results, j: &Value) -> String {
    let (h, k) = (&r.holdline, &r.kamailio);
    let m = &r.machine;
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
    s.push_str(
        "| figure | holdline | Kamailio | holdline / Kamailio |\n| --- | ---: | ---: | ---: |\n",
    );
    let rows = [
        ("calls/s over UDP (capacity)", &h.udp, &k.udp),
        ("calls/s over TCP (capacity)", &h.tcp, &k.tcp),
        ("REGISTER/s over UDP (capacity)", &h.register, &k.register),
        ("calls/s under a 25% CPU quota (UDP)", &h.quota, &k.quota),
    ];
    for (name, a, b) in rows {
        let _ = writeln!(
            s,
            "| {name} | {} | {} | {} |",
            fig(a),
            fig(b),
            ratio(a.value, b.value)
        );
    }
    let mut why = String::new();
    for (server, f) in [("holdline", h), ("Kamailio", k)] {
        for (what, c) in [("UDP", &f.udp), ("TCP", &f.tcp), ("REGISTER", &f.register)] {
            if let (Some(d), Some(busy)) = (&c.first_failure, c.server_busy_at_first_failure) {
                let _ = write!(
                    why,
                    "\n- {server} {what}: at {:.0}/s {} failed, {} × 503, p99 {:.0} ms, server core {:.0}% busy",
                    d.rate,
                    d.failed,
                    d.r503,
                    d.p99_ms,
                    busy * 100.0
                );
            }
        }
    }
    for (i, rate) in r.settings.cost_rates.iter().enumerate() {
        let (a, b) = (h.cost.get(i), k.cost.get(i));
        let (a, b) = (
            a.map_or(0.0, |x| x.cpu_us_per_op),
            b.map_or(0.0, |x| x.cpu_us_per_op),
        );
        let _ = writeln!(
            s,
            "| server CPU µs per call at {rate:.0} calls/s (UDP) | {a:.1} | {b:.1} | {} |",
            ratio(a, b)
        );
    }
    for (i, rate) in r.settings.register_cost_rates.iter().enumerate() {
        let (a, b) = (h.register_cost.get(i), k.register_cost.get(i));
        let (a, b) = (
            a.map_or(0.0, |x| x.cpu_us_per_op),
            b.map_or(0.0, |x| x.cpu_us_per_op),
        );
        let _ = writeln!(
            s,
            "| server CPU µs per REGISTER at {rate:.0}/s | {a:.1} | {b:.1} | {} |",
            ratio(a, b)
        );
    }
    let _ = writeln!(
        s,
        "\nThe first failing step above each capacity:{why}\n\nServer core busy at capacity (holdline / Kamailio): UDP {:.0}% / {:.0}%, TCP {:.0}% / {:.0}%, REGISTER {:.0}% / {:.0}%.\n",
        h.udp.server_busy_at_capacity * 100.0,
        k.udp.server_busy_at_capacity * 100.0,
        h.tcp.server_busy_at_capacity * 100.0,
        k.tcp.server_busy_at_capacity * 100.0,
        h.register.server_busy_at_capacity * 100.0,
        k.register.server_busy_at_capacity * 100.0
    );
    let _ = writeln!(
        s,
        "## Overload (UDP, cgroup v1 CPU quota {}% of a core, period {} µs)\n",
        r.settings.quota_percent, r.settings.quota_period_us
    );
    if !m.overload_control_available {
        s.push_str(
            "`holdline serve` has no `--overload` flag in this build (`overload_control_available: false`): \
             \"holdline-off\" ran with the same arguments as \"holdline\".\n\n",
        );
    }
    s.push_str(
        "| offered (x capacity under quota) | server | offered calls/s | goodput calls/s | goodput / capacity | PDD p50 ms | PDD p99 ms | 200 OK retrans | INVITE retrans | failed | 503 |\n\
         | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for p in &r.overload {
        let _ = writeln!(
            s,
            "| {} | {} | {:.0} | {:.0} | {:.2} | {:.1} | {:.1} | {} | {} | {} | {} |",
            p.factor,
            p.server,
            p.offered_cps,
            p.goodput_cps,
            p.goodput_over_capacity,
            p.pdd_p50_ms,
            p.pdd_p99_ms,
            p.retrans_200,
            p.retrans_invite,
            p.failed,
            p.r503
        );
    }
    let _ = writeln!(
        s,
        "\nRatios in `results.json` (holdline / Kamailio): {}\n\nPlots: `goodput.svg`/`.png` (goodput vs offered load under the quota), \
         `cost.svg`/`.png` (server CPU per call and per REGISTER). Every step: `steps.csv`; overload points: `overload.csv`.",
        j["ratios"]
    );
    s
}

/// Writes `results.json`, `steps.csv`, `overload.csv`, `summary.md` and the plots into `dir`.
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
    write(&dir.join("summary.md"), &summary(r, &j))?;
    let mut goodput = Vec::new();
    for name in ["holdline", "kamailio", "holdline-off"] {
        let pts: Vec<(f64, f64)> = r
            .overload
            .iter()
            .filter(|p| p.server == name)
            .map(|p| (p.offered_cps, p.goodput_cps))
            .collect();
        goodput.push((name.to_string(), pts));
    }
    plot::chart(
        dir,
        "goodput",
        "Goodput under a 25% CPU quota (UDP)",
        "offered calls/s",
        "goodput calls/s",
        &goodput,
    )?;
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
    let mut cost = series(&r.holdline, "holdline");
    cost.extend(series(&r.kamailio, "Kamailio"));
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
