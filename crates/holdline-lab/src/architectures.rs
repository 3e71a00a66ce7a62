//! `holdline lab architectures`: seed 001 §6's question — which server architecture
//! performs best — asked of holdline's own protocol code.
//!
//! The same `holdline_proto::Endpoint` is driven six ways ([`drivers`]): (a) one event
//! loop, (b) a thread per message, (c) a listener thread handing messages to a thread pool
//! (sipd), (d) a thread pool whose threads all read the socket, the state split into the
//! paper's 100 locked sets by Call-ID, (e) a process pool on one port by `SO_REUSEPORT`
//! (SER), and (f) `holdline serve` itself (a thread per core, messages handed to the owner
//! of their Call-ID: the paper's two-stage thread pool). Each is measured as a stateless and
//! as a transaction-stateful proxy, pinned to one core (core 1) and to two (cores 0 and 1;
//! the generator, on core 0, then shares a core with it).
//!
//! For every (cores, mode, driver) the lab searches the saturation rate: a fresh driver
//! process and a fresh `holdline load uas` per point, `holdline load uac` (one process,
//! [`UAC_PORTS`] source ports so that `SO_REUSEPORT` spreads the calls) offering Poisson
//! calls INVITE/180/200/ACK/BYE/200 with zero holding time for `--point-seconds`; a point is
//! clean when at least 99.9% of the calls completed, PDD p99 ≤ 100 ms and the generator
//! kept its schedule. The rate grows ×1.4 from a start (`--start-rate` for the first
//! driver, else 0.7× the event loop's result) while clean, falls ×0.6 while not, then
//! bisects until the bracket is within 15% or `--max-points` are spent. Reported per
//! driver: calls/s at saturation (completed calls per second of the highest clean point), the
//! ratio to the event loop's in the same run (what the paper's Fig. 23 shows), CPU µs per
//! call and context switches per call of the driver's processes over that point's steady
//! part (from a third of the arrivals to their end, divided by the calls completed in it at
//! the point's mean rate; a fresh driver's first page faults are left out) — from the
//! drivers' own `getrusage(2)` (threads that ended included), and for `holdline serve` from
//! `/proc/PID/stat` and `/proc/PID/task/*/status` (its threads live as long as it does).
//! As root each driver runs in a CPU group of its own (cgroup v1, quota = its cores,
//! `cpu.shares` of one nice-5 process): on a machine shared with other work the scheduler
//! then gives a driver the same share whether it has one thread or eight.
//!
//! Output in `--out DIR`: `results.json`, `points.csv` (every point), `summary.md` (the
//! table beside the paper's Tables 1 and 2), `ratios-stateless.svg/png` and
//! `ratios-stateful.svg/png`, and the processes' logs and reports under `runs/`.

mod child;
pub(crate) mod drivers;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use serde::{Deserialize, Serialize};

use self::child::{DriverProc, Usage};
use self::drivers::Driver;
use crate::cgroup::CpuGroup;
use crate::error::{LabError, Result};
use crate::generator::{GENERATOR_CORE, P99_LIMIT_MS, count, num, read_json, wait_bounded};
use crate::plot;
use crate::runner::{
    Proc, RunHeader, check_tools, holdline_exe, is_root, lab_main, spawn, spawn_in,
};
use crate::server::{DOMAIN, SERVER_CORE, Transport, free_port, wait_bound};

/// Source ports of the UAC (`--connections`): `SO_REUSEPORT` picks a process-pool member
/// by a hash of the source address, so one port would feed one member.
pub(crate) const UAC_PORTS: usize = 8;
/// A point is clean when at least this share of its calls completed.
const CLEAN_SHARE: f64 = 0.999;
/// The UAC waits this long for calls in progress after its last arrival.
const DRAIN_S: f64 = 2.0;
/// The rate grows by this factor while points are clean.
const UP: f64 = 1.4;
/// The rate falls by this factor while points are not clean.
const DOWN: f64 = 0.6;
/// The search ends once the failing rate is within this factor of the clean one.
const BRACKET: f64 = 1.15;

/// `holdline lab architectures` options.
#[derive(Debug, Parser)]
#[command(
    name = "holdline lab architectures",
    about = "seed 001 §6: the same protocol code as event loop, thread per message, pool thread per message, striped thread pool, process pool and holdline's thread per core; saturation, CPU and context switches per call"
)]
pub(crate) struct Args {
    /// Shorter points, fewer per search (about 3 minutes).
    #[arg(long)]
    pub quick: bool,
    /// Where results go.
    #[arg(long, value_name = "DIR", default_value = "lab-results/architectures")]
    pub out: PathBuf,
    /// Drivers, comma-separated: event, thread-per-message, pool-thread-per-message,
    /// thread-pool, process-pool, holdline (default: all; the event loop is always measured
    /// first, being the reference of the ratios).
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = Driver::parse)]
    pub drivers: Vec<Driver>,
    /// Proxy modes, comma-separated: stateless, stateful.
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "stateless,stateful", value_parser = ["stateless", "stateful"])]
    pub modes: Vec<String>,
    /// Cores given to the driver, comma-separated: 1 (`--one-core`, core 1 by default)
    /// and/or 2 (cores 0 and 1, shared with the generator on `--generator-core`).
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_value = "1,2", value_parser = clap::value_parser!(u8).range(1..=2))]
    pub cores: Vec<u8>,
    /// Threads (or processes) of the pools.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub pool: usize,
    /// Seconds of offered load per point (default 3, `--quick` 1.5).
    #[arg(long, value_name = "S")]
    pub point_seconds: Option<f64>,
    /// Points per saturation search at most (default 5, `--quick` 3).
    #[arg(long, value_name = "N")]
    pub max_points: Option<usize>,
    /// The first rate of the first search, calls/s.
    #[arg(long, value_name = "CPS", default_value_t = 4000.0)]
    pub start_rate: f64,
    /// Emulated CPU work per message in every driver, µs (`holdline serve
    /// --emulate-cost-us`); 0: holdline's real cost only.
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub cost_us: u64,
    /// Redraw the plots, `points.csv` and `summary.md` of the results already in `--out`
    /// (no measurement).
    #[arg(long)]
    pub replot: bool,
    /// The core of a driver given one core (default 1, the lab's server core; 0 puts it
    /// beside the generator, for when another process holds core 1).
    #[arg(long, value_name = "CPU", default_value = SERVER_CORE)]
    pub one_core: String,
    /// The core of the generator (`holdline load uac` and `uas`).
    #[arg(long, value_name = "CPU", default_value = GENERATOR_CORE)]
    pub generator_core: String,
    /// The `holdline` binary to run (default: this one).
    #[arg(long, value_name = "PATH")]
    pub exe: Option<PathBuf>,
}

impl Args {
    fn point_seconds(&self) -> f64 {
        self.point_seconds
            .unwrap_or(if self.quick { 1.5 } else { 3.0 })
    }

    fn max_points(&self) -> usize {
        self.max_points
            .unwrap_or(if self.quick { 3 } else { 5 })
            .max(1)
    }

    /// The drivers to measure, the event loop first.
    fn drivers(&self) -> Vec<Driver> {
        let mut d: Vec<Driver> = if self.drivers.is_empty() {
            Driver::ALL.to_vec()
        } else {
            self.drivers.clone()
        };
        d.retain(|x| *x != Driver::Event);
        d.insert(0, Driver::Event);
        d
    }
}

/// The cores of a driver given `n` cores: `one` (the `--one-core` option) or both.
fn core_list(n: u8, one: &str) -> String {
    if n >= 2 {
        "0,1".to_owned()
    } else {
        one.to_owned()
    }
}

/// One measured point.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Point {
    /// The driver.
    pub driver: Driver,
    /// `stateless` or `stateful`.
    pub mode: String,
    /// Cores the driver had.
    pub cores: u8,
    /// Offered calls/s asked of the UAC.
    pub rate: f64,
    /// Calls/s the UAC actually offered.
    pub offered_cps: f64,
    /// Seconds of arrivals.
    pub duration_s: f64,
    /// Calls placed.
    pub attempted: u64,
    /// Calls completed (200 OK received and ACKed).
    pub ok: u64,
    /// Calls failed.
    pub failed: u64,
    /// Completed calls per second of arrivals.
    pub completed_cps: f64,
    /// PDD p99, ms.
    pub pdd_p99_ms: f64,
    /// The driver's CPU time and context switches over the measuring window.
    pub usage: Usage,
    /// The measuring window: from a third of the arrivals to their end, s.
    pub window_s: f64,
    /// The machine's 1-minute load average when the point started (`/proc/loadavg`): how
    /// much else ran on the shared cores.
    pub loadavg: f64,
    /// CPU µs per completed call.
    pub cpu_us_per_call: f64,
    /// Context switches (voluntary + involuntary) per completed call.
    pub switches_per_call: f64,
    /// Clean: ≥ 99.9% completed, p99 ≤ 100 ms, schedule kept.
    pub clean: bool,
}

/// One driver's result in one (cores, mode).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Row {
    /// The driver.
    pub driver: Driver,
    /// `stateless` or `stateful`.
    pub mode: String,
    /// Cores the driver had.
    pub cores: u8,
    /// Completed calls/s at the highest clean point (0: none was clean).
    pub saturation_cps: f64,
    /// `saturation_cps` over the event loop's (same mode and cores, same run).
    pub ratio_to_event: Option<f64>,
    /// CPU µs per call at that point.
    pub cpu_us_per_call: f64,
    /// Context switches per call at that point.
    pub switches_per_call: f64,
    /// Voluntary ones per call.
    pub voluntary_per_call: f64,
    /// Involuntary ones per call.
    pub involuntary_per_call: f64,
    /// The lowest rate that was not clean, if one was found.
    pub first_unclean_cps: Option<f64>,
    /// Points measured.
    pub points: usize,
    /// The paper's ratio to event-based for the matching architecture: on a single
    /// processor (1×P and 1×S for 1 core) or multiprocessor (4×P and 2×S for 2 cores).
    pub paper: Vec<(String, f64)>,
}

/// The paper's Table 1 (stateless proxy, Proxy 200 test, CPS), read from seed 001 l. 399-405:
/// architecture and CPS on 1×P, 4×P, 1×S, 2×S.
pub(crate) const TABLE1: [(&str, [f64; 4]); 5] = [
    ("Event-based", [1550.0, 400.0, 150.0, 600.0]),
    ("Thread per message", [1300.0, 500.0, 100.0, 500.0]),
    (
        "Pool-thread per message (sipd)",
        [1400.0, 850.0, 110.0, 600.0],
    ),
    ("Thread pool", [1500.0, 1300.0, 152.0, 750.0]),
    ("Process pool", [1600.0, 1350.0, 160.0, 1000.0]),
];

/// The paper's Table 2 (stateful proxy, CPS), read from seed 001 l. 441-447: architecture
/// and CPS on 1×P, 4×P, 1×S (a 360 MHz UltraSPARC-III here), 2×S.
pub(crate) const TABLE2: [(&str, [f64; 4]); 4] = [
    ("Event-based", [1150.0, 300.0, 160.0, 400.0]),
    ("Thread per message", [600.0, 175.0, 90.0, 300.0]),
    ("Thread pool (sipd)", [850.0, 340.0, 120.0, 300.0]),
    ("Two-stage thread pool", [1100.0, 550.0, 155.0, 500.0]),
];

/// The paper's hardware columns.
pub(crate) const PLATFORMS: [&str; 4] = ["1×P", "4×P", "1×S", "2×S"];

/// The paper's row that corresponds to `driver` in `mode`, if the paper measured one.
pub(crate) fn paper_row(driver: Driver, stateful: bool) -> Option<(&'static str, [f64; 4])> {
    let i = if stateful {
        match driver {
            Driver::Event => 0,
            Driver::ThreadPerMessage => 1,
            Driver::PoolThreadPerMessage => 2,
            Driver::Holdline => 3,
            // The paper: "We have not yet evaluated the stateful proxy in process pool
            // model"; its striped sets are described for the stateless pool only.
            Driver::ThreadPool | Driver::ProcessPool => return None,
        }
    } else {
        match driver {
            Driver::Event => 0,
            Driver::ThreadPerMessage => 1,
            Driver::PoolThreadPerMessage => 2,
            Driver::ThreadPool => 3,
            Driver::ProcessPool => 4,
            // The stateless counterpart of the two-stage pool is the paper's thread pool.
            Driver::Holdline => 3,
        }
    };
    if stateful {
        TABLE2.get(i).copied()
    } else {
        TABLE1.get(i).copied()
    }
}

/// The paper's ratios to event-based for `driver`, on the platforms comparable with
/// `cores` (1: 1×P, 1×S; 2: 4×P, 2×S).
pub(crate) fn paper_ratios(driver: Driver, stateful: bool, cores: u8) -> Vec<(String, f64)> {
    let (Some((_, row)), Some((_, event))) = (
        paper_row(driver, stateful),
        paper_row(Driver::Event, stateful),
    ) else {
        return Vec::new();
    };
    let cols: [usize; 2] = if cores >= 2 { [1, 3] } else { [0, 2] };
    cols.iter()
        .map(|&c| (PLATFORMS[c].to_owned(), row[c] / event[c]))
        .collect()
}

/// The whole run.
#[derive(Debug, Serialize, Deserialize)]
struct Results {
    #[serde(flatten)]
    header: RunHeader,
    /// Seconds of offered load per point.
    point_seconds: f64,
    /// Threads or processes of the pools.
    pool: usize,
    /// Emulated cost per message, µs.
    cost_us: u64,
    /// Lock sets of the thread pool.
    sets: usize,
    /// Source ports of the UAC.
    uac_ports: usize,
    /// Whether each driver ran in a CPU group of its own (root only).
    cpu_groups: bool,
    /// The core of a driver given one core.
    one_core: String,
    /// The generator's core.
    generator_core: String,
    /// The result per driver, mode and cores.
    rows: Vec<Row>,
    /// Every point.
    points: Vec<Point>,
    /// Seconds the run took.
    elapsed_s: f64,
}

/// Runs `holdline lab architectures ARGS`.
pub(crate) fn main(args: Vec<String>) -> ExitCode {
    lab_main::<Args, Results>(
        "architectures",
        args,
        |a| a.out.clone(),
        run,
        |r| r.elapsed_s,
    )
}

/// Runs `holdline lab architectures-driver ARGS` (started by the lab itself).
pub(crate) fn driver_main(args: Vec<String>) -> ExitCode {
    child::main(args)
}

/// The CFS period of the drivers' CPU groups, µs.
const GROUP_PERIOD_US: u64 = 100_000;
/// The drivers' CPU groups weigh as one process at nice 5 (`cpu.shares`), however many
/// threads or processes a driver has.
const GROUP_SHARES: u64 = 335;

/// What every point needs.
struct Env {
    exe: PathBuf,
    /// The core of a driver given one core.
    one_core: String,
    /// The generator's core.
    generator_core: String,
    /// Per core count (index 0: 1 core, 1: 2 cores), the driver's CPU group, as root.
    groups: [Option<CpuGroup>; 2],
    runs: PathBuf,
    args_pool: usize,
    cost_us: u64,
    point_s: f64,
}

/// The driver's processes during a point.
enum Under {
    /// Lab drivers (one process, or the members of a process pool).
    Own(Vec<DriverProc>),
    /// `holdline serve`.
    Serve(Proc),
}

impl Under {
    fn usage(&mut self) -> Result<Usage> {
        match self {
            Self::Own(procs) => {
                let mut total = Usage::default();
                for p in procs.iter_mut() {
                    total = total.plus(p.usage()?);
                }
                Ok(total)
            }
            Self::Serve(p) => Ok(proc_usage(p.0.id())),
        }
    }
}

/// CPU time of a process (`/proc/PID/stat`, every thread) and the context switches of its
/// threads alive now (`/proc/PID/task/*/status`).
fn proc_usage(pid: u32) -> Usage {
    let cpu = crate::procfs::tree_cpu_split(pid);
    let mut u = Usage {
        user_us: cpu.user_us,
        sys_us: cpu.sys_us,
        ..Usage::default()
    };
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in dir.flatten() {
            if let Ok(text) = std::fs::read_to_string(t.path().join("status")) {
                let (v, n) = switches(&text);
                u.voluntary += v;
                u.involuntary += n;
            }
        }
    }
    u
}

/// The voluntary and involuntary context switches of a `/proc/…/status` text.
pub(crate) fn switches(status: &str) -> (u64, u64) {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    (
        field("voluntary_ctxt_switches:"),
        field("nonvoluntary_ctxt_switches:"),
    )
}

/// Starts `driver` on `port` pinned to `cores`, forwarding to `uas_port`.
fn start_driver(
    env: &Env,
    driver: Driver,
    stateful: bool,
    cores: u8,
    port: u16,
    uas_port: u16,
    tag: &str,
) -> Result<Under> {
    let cpus = core_list(cores, &env.one_core);
    let cpus = cpus.as_str();
    let group = env
        .groups
        .get(usize::from(cores.clamp(1, 2) - 1))
        .and_then(Option::as_ref)
        .map(CpuGroup::procs_file);
    let listen = format!("127.0.0.1:{port}");
    let uas = format!("127.0.0.1:{uas_port}");
    match driver {
        Driver::Holdline => {
            let mode = if stateful { "stateful" } else { "stateless" };
            let cfg = env.runs.join(format!("holdline-{mode}.toml"));
            std::fs::write(
                &cfg,
                format!(
                    "# holdline lab architectures: the drivers' buffers, no overload control\n\
                     mode = \"{mode}\"\n[limits]\nudp_recv_buffer = {b}\nudp_send_buffer = {b}\n",
                    b = drivers::SOCKET_BUFFER
                ),
            )
            .map_err(|e| LabError::io(format!("write {}", cfg.display()), e))?;
            let mut args = vec![
                "serve".to_owned(),
                "--config".to_owned(),
                cfg.display().to_string(),
                format!("--listen=udp:{listen}"),
                format!("--workers={cores}"),
                "--store=memory".to_owned(),
                format!("--domain={DOMAIN}"),
                format!(
                    "--route=*=udp:{uas}{}",
                    if stateful { "" } else { ",stateless" }
                ),
                "--overload=none".to_owned(),
            ];
            if env.cost_us > 0 {
                args.push(format!("--emulate-cost-us={}", env.cost_us));
            }
            let log = env.runs.join(format!("{tag}-holdline.log"));
            let mut p = spawn_in(cpus, group.as_deref(), &env.exe, &args, &log)?;
            wait_bound(&mut p.0, port, Some(Transport::Udp), "holdline serve", &log)?;
            Ok(Under::Serve(p))
        }
        _ => {
            let members = if driver == Driver::ProcessPool {
                env.args_pool.max(1)
            } else {
                1
            };
            let mut procs = Vec::with_capacity(members);
            for m in 0..members {
                let mut args = vec![
                    format!("--driver={}", driver.name()),
                    format!("--listen={listen}"),
                    format!("--uas={uas}"),
                    format!("--pool={}", env.args_pool),
                    format!("--cost-us={}", env.cost_us),
                    format!("--member={}", m + 1),
                ];
                if stateful {
                    args.push("--stateful".to_owned());
                }
                let log = env.runs.join(format!("{tag}-driver{m}.log"));
                procs.push(DriverProc::start(
                    cpus,
                    group.as_deref(),
                    &env.exe,
                    &args,
                    &log,
                )?);
            }
            Ok(Under::Own(procs))
        }
    }
}

/// One point: a fresh UAS and driver, the UAC at `rate` for the point's seconds.
fn point(env: &Env, driver: Driver, stateful: bool, cores: u8, rate: f64) -> Result<Point> {
    let mode = if stateful { "stateful" } else { "stateless" };
    let tag = format!("{}-{mode}-{cores}c-{:.0}", driver.name(), rate);
    crate::runner::with_fresh_ports("architectures", &tag, || {
        point_once(env, driver, stateful, cores, rate, &tag)
    })
}

fn point_once(
    env: &Env,
    driver: Driver,
    stateful: bool,
    cores: u8,
    rate: f64,
    tag: &str,
) -> Result<Point> {
    let loadavg = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    let (port, uas_port) = (free_port()?, free_port()?);
    let max_time = env.point_s + DRAIN_S + 4.0;
    let uas_log = env.runs.join(format!("{tag}-uas.log"));
    let uas_args = vec![
        "load".to_owned(),
        "uas".to_owned(),
        "--transport=udp".to_owned(),
        format!("--listen=127.0.0.1:{uas_port}"),
        format!(
            "--json={}",
            env.runs.join(format!("{tag}-uas.json")).display()
        ),
        format!("--max-time={}", max_time + 5.0),
        "--progress=off".to_owned(),
    ];
    let mut uas = spawn(&env.generator_core, &env.exe, &uas_args, &uas_log)?;
    wait_bound(
        &mut uas.0,
        uas_port,
        Some(Transport::Udp),
        "holdline load uas",
        &uas_log,
    )?;
    let mut under = start_driver(env, driver, stateful, cores, port, uas_port, tag)?;
    let json = env.runs.join(format!("{tag}-uac.json"));
    let _ = std::fs::remove_file(&json);
    let args = vec![
        "load".to_owned(),
        "uac".to_owned(),
        "--transport=udp".to_owned(),
        format!("--target=127.0.0.1:{port}"),
        format!("--connections={UAC_PORTS}"),
        format!("--rate={rate}"),
        format!("--duration={}", env.point_s),
        format!("--drain={DRAIN_S}"),
        format!("--max-time={max_time}"),
        format!("--json={}", json.display()),
        "--progress=off".to_owned(),
    ];
    let mut uac = spawn(
        &env.generator_core,
        &env.exe,
        &args,
        &env.runs.join(format!("{tag}-uac.log")),
    )?;
    // The driver's usage over the steady part of the load: from a third of the arrivals to
    // their end (a fresh driver's first page faults and the idle drain left out).
    let t0 = Instant::now();
    let (from, to) = (env.point_s / 3.0, env.point_s);
    wait_until(t0 + Duration::from_secs_f64(from));
    let u0 = under.usage()?;
    wait_until(t0 + Duration::from_secs_f64(to));
    let u1 = under.usage()?;
    let window_s = (t0.elapsed().as_secs_f64() - from).max(1e-3);
    let exited = wait_bounded(&mut uac.0, Duration::from_secs_f64(max_time + 5.0));
    drop(under);
    drop(uas);
    if !exited {
        return Err(LabError::Process(format!(
            "{tag}: the UAC overran its time limit"
        )));
    }
    let report = read_json(&json)?;
    let attempted = count(&report, &["totals", "attempted"]);
    let ok = count(&report, &["totals", "calls_ok"]);
    let failed = count(&report, &["totals", "calls_failed"]);
    let offered = num(&report, &["offered_cps"]);
    let p99 = num(&report, &["pdd_p99_ms"]);
    let usage = u1.since(u0);
    let completed_cps = ok as f64 / env.point_s.max(1e-3);
    // Calls completed in the window, at the point's mean completion rate.
    let window_calls = completed_cps * window_s;
    let per_call = |x: u64| {
        if window_calls > 0.0 {
            x as f64 / window_calls
        } else {
            0.0
        }
    };
    let planned = rate * env.point_s;
    let clean = attempted > 0
        && ok as f64 >= CLEAN_SHARE * attempted as f64
        && p99 <= P99_LIMIT_MS
        && attempted as f64 >= 0.97 * planned
        && offered >= 0.95 * rate;
    Ok(Point {
        driver,
        mode: (if stateful { "stateful" } else { "stateless" }).to_owned(),
        cores,
        rate,
        offered_cps: offered,
        duration_s: env.point_s,
        attempted,
        ok,
        failed,
        completed_cps,
        pdd_p99_ms: p99,
        usage,
        window_s,
        loadavg,
        cpu_us_per_call: per_call(usage.user_us + usage.sys_us),
        switches_per_call: per_call(usage.voluntary + usage.involuntary),
        clean,
    })
}

/// Waits until `t` (a bounded wait on the clock while the load runs; nothing is
/// synchronised by it).
fn wait_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

/// The next rate of a search, or `None` when it is done: up by [`UP`] while every point was
/// clean, down by [`DOWN`] while none was, then halfway between the best clean and the lowest
/// unclean rate until they are within [`BRACKET`].
pub(crate) fn next_rate(
    best_clean: Option<f64>,
    lowest_unclean: Option<f64>,
    last: f64,
) -> Option<f64> {
    match (best_clean, lowest_unclean) {
        (Some(_), None) => Some(last * UP),
        (None, Some(_)) => (last * DOWN >= 50.0).then_some(last * DOWN),
        (Some(c), Some(u)) if u / c > BRACKET => Some((c + u) / 2.0),
        _ => None,
    }
}

/// The saturation search of one driver.
fn search(
    env: &Env,
    driver: Driver,
    stateful: bool,
    cores: u8,
    start: f64,
    max_points: usize,
    points: &mut Vec<Point>,
) -> Result<Row> {
    let (mut best, mut unclean): (Option<Point>, Option<f64>) = (None, None);
    let mut rate = start;
    let mut n = 0;
    while n < max_points {
        let p = point(env, driver, stateful, cores, rate)?;
        n += 1;
        eprintln!(
            "architectures: {} {} {} core(s): {:>6.0} calls/s offered -> {:>6.0} completed, {} failed, p99 {:.1} ms, {:.1} µs CPU and {:.2} switches per call{}",
            driver.name(),
            p.mode,
            cores,
            p.rate,
            p.completed_cps,
            p.failed,
            p.pdd_p99_ms,
            p.cpu_us_per_call,
            p.switches_per_call,
            if p.clean { "" } else { "  (not clean)" }
        );
        if p.clean {
            if best
                .as_ref()
                .is_none_or(|b| p.completed_cps > b.completed_cps)
            {
                best = Some(p.clone());
            }
        } else {
            unclean = Some(unclean.map_or(p.rate, |u: f64| u.min(p.rate)));
        }
        points.push(p);
        let best_rate = best.as_ref().map(|b| b.rate);
        match next_rate(best_rate, unclean, rate) {
            Some(r) => rate = r,
            None => break,
        }
    }
    let mode = if stateful { "stateful" } else { "stateless" }.to_owned();
    let per = |p: &Point, x: u64| {
        let calls = p.completed_cps * p.window_s;
        if calls > 0.0 { x as f64 / calls } else { 0.0 }
    };
    Ok(Row {
        driver,
        mode,
        cores,
        saturation_cps: best.as_ref().map_or(0.0, |b| b.completed_cps),
        ratio_to_event: None,
        cpu_us_per_call: best.as_ref().map_or(0.0, |b| b.cpu_us_per_call),
        switches_per_call: best.as_ref().map_or(0.0, |b| b.switches_per_call),
        voluntary_per_call: best.as_ref().map_or(0.0, |b| per(b, b.usage.voluntary)),
        involuntary_per_call: best.as_ref().map_or(0.0, |b| per(b, b.usage.involuntary)),
        first_unclean_cps: unclean,
        points: n,
        paper: paper_ratios(driver, stateful, cores),
    })
}

fn run(a: &Args) -> Result<Results> {
    if a.replot {
        let path = a.out.join("results.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| LabError::io(format!("read {}", path.display()), e))?;
        let r: Results = serde_json::from_str(&text).map_err(|e| LabError::Report {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        write_results(&a.out, &r)?;
        return Ok(r);
    }
    check_tools()?;
    let started = Instant::now();
    let exe = holdline_exe(a.exe.as_deref())?;
    let runs = a.out.join("runs");
    std::fs::create_dir_all(&runs)
        .map_err(|e| LabError::io(format!("create {}", runs.display()), e))?;
    // As root, each driver runs in a CPU group of its own (one per core count, quota = its
    // cores): on a machine shared with other work, a driver of four threads would otherwise
    // get four times the share of a driver of one. Without root, a note.
    let groups = if is_root() {
        let mk = |n: u64| -> Result<CpuGroup> {
            let g = CpuGroup::create(
                &format!("holdline-architectures-{n}c-{}", std::process::id()),
                GROUP_PERIOD_US,
                n * GROUP_PERIOD_US,
            )?;
            g.set_shares(GROUP_SHARES)?;
            Ok(g)
        };
        [Some(mk(1)?), Some(mk(2)?)]
    } else {
        eprintln!(
            "architectures: not root: no CPU groups, so on a busy machine drivers with more \
             threads get a larger share of the cores"
        );
        [None, None]
    };
    let cpu_groups = groups[0].is_some();
    let env = Env {
        one_core: a.one_core.clone(),
        generator_core: a.generator_core.clone(),
        groups,
        exe,
        runs,
        args_pool: a.pool.max(1),
        cost_us: a.cost_us,
        point_s: a.point_seconds(),
    };
    let mut rows = Vec::new();
    let mut points = Vec::new();
    let mut start = a.start_rate;
    for &cores in &a.cores {
        for mode in &a.modes {
            let stateful = mode == "stateful";
            let mut event_cps: Option<f64> = None;
            for driver in a.drivers() {
                let first = event_cps.map_or(start, |e| (0.7 * e).max(100.0));
                let mut row = search(
                    &env,
                    driver,
                    stateful,
                    cores,
                    first,
                    a.max_points(),
                    &mut points,
                )?;
                if driver == Driver::Event {
                    event_cps = (row.saturation_cps > 0.0).then_some(row.saturation_cps);
                    if let Some(e) = event_cps {
                        start = e;
                    }
                }
                row.ratio_to_event = event_cps.map(|e| row.saturation_cps / e);
                rows.push(row);
                write_partial(&a.out, &rows, &points)?;
            }
        }
    }
    let results = Results {
        header: RunHeader::new("architectures", started, a.quick, "udp"),
        point_seconds: env.point_s,
        pool: env.args_pool,
        cost_us: a.cost_us,
        sets: drivers::SETS,
        uac_ports: UAC_PORTS,
        cpu_groups,
        one_core: env.one_core.clone(),
        generator_core: env.generator_core.clone(),
        rows,
        points,
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    write_results(&a.out, &results)?;
    Ok(results)
}

fn write_partial(out: &Path, rows: &[Row], points: &[Point]) -> Result<()> {
    let v = serde_json::json!({"experiment": "architectures", "partial": true, "rows": rows, "points": points});
    std::fs::write(
        out.join("results.partial.json"),
        serde_json::to_string_pretty(&v).unwrap_or_default(),
    )
    .map_err(|e| LabError::io("write results.partial.json", e))
}

fn write_results(out: &Path, r: &Results) -> Result<()> {
    let json = serde_json::to_string_pretty(r).map_err(|e| LabError::Report {
        path: out.join("results.json"),
        reason: e.to_string(),
    })?;
    std::fs::write(out.join("results.json"), json)
        .map_err(|e| LabError::io("write results.json", e))?;
    let _ = std::fs::remove_file(out.join("results.partial.json"));
    std::fs::write(out.join("points.csv"), points_csv(&r.points))
        .map_err(|e| LabError::io("write points.csv", e))?;
    std::fs::write(out.join("summary.md"), summary(r))
        .map_err(|e| LabError::io("write summary.md", e))?;
    for mode in ["stateless", "stateful"] {
        plot_ratios(out, mode, &r.rows)?;
    }
    Ok(())
}

/// `points.csv`: every point.
fn points_csv(points: &[Point]) -> String {
    let mut s = String::from(
        "driver,mode,cores,rate,offered_cps,duration_s,window_s,attempted,ok,failed,completed_cps,pdd_p99_ms,user_us,sys_us,voluntary,involuntary,drops,cpu_us_per_call,switches_per_call,loadavg,clean\n",
    );
    for p in points {
        let _ = writeln!(
            s,
            "{},{},{},{:.0},{:.1},{},{:.2},{},{},{},{:.1},{:.2},{},{},{},{},{},{:.2},{:.3},{:.2},{}",
            p.driver.name(),
            p.mode,
            p.cores,
            p.rate,
            p.offered_cps,
            p.duration_s,
            p.window_s,
            p.attempted,
            p.ok,
            p.failed,
            p.completed_cps,
            p.pdd_p99_ms,
            p.usage.user_us,
            p.usage.sys_us,
            p.usage.voluntary,
            p.usage.involuntary,
            p.usage.drops,
            p.cpu_us_per_call,
            p.switches_per_call,
            p.loadavg,
            p.clean
        );
    }
    s
}

/// `summary.md`: the table per mode, beside the paper's.
fn summary(r: &Results) -> String {
    let mut s = String::from("# holdline lab architectures (seed 001 §6)\n\n");
    let _ = writeln!(
        s,
        "Command: `{}`\n\n{:.1} s per point, pools of {} threads/processes, {} lock sets, \
         emulated cost {} µs per message, UAC from {} source ports; {}; 1-core drivers on \
         core {}, 2-core drivers on cores 0 and 1, the generator on core {}. Load average of \
         the machine at the points: median {:.1}, highest {:.1} (absolute rates depend on what \
         else ran; the 2-core drivers share the generator's core). Compare the ratios to the \
         event loop measured in the same run, as the paper does.\n",
        r.header.command,
        r.point_seconds,
        r.pool,
        r.sets,
        r.cost_us,
        r.uac_ports,
        if r.cpu_groups {
            "each driver in a CPU group of its own weighing as one nice-5 process"
        } else {
            "no CPU groups (not root)"
        },
        r.one_core,
        r.generator_core,
        crate::runner::median(r.points.iter().map(|p| p.loadavg).collect()),
        r.points.iter().map(|p| p.loadavg).fold(0.0, f64::max),
    );
    for mode in ["stateless", "stateful"] {
        let rows: Vec<&Row> = r.rows.iter().filter(|x| x.mode == mode).collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(s, "## {mode} proxy\n");
        s.push_str(
            "| driver | cores | calls/s at saturation | ratio to event | CPU µs/call | context switches/call (vol + invol) | paper's ratio (platform) |\n\
             | --- | --- | --- | --- | --- | --- | --- |\n",
        );
        for x in rows {
            let paper = if x.paper.is_empty() {
                "not measured".to_owned()
            } else {
                x.paper
                    .iter()
                    .map(|(p, v)| format!("{v:.2} ({p})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let _ = writeln!(
                s,
                "| {} | {} | {:.0}{} | {} | {:.1} | {:.2} ({:.2} + {:.2}) | {} |",
                x.driver.name(),
                x.cores,
                x.saturation_cps,
                x.first_unclean_cps.map_or_else(
                    || " (no unclean point found)".to_owned(),
                    |u| format!(" (< {u:.0})")
                ),
                x.ratio_to_event
                    .map_or_else(|| "-".to_owned(), |v| format!("{v:.2}")),
                x.cpu_us_per_call,
                x.switches_per_call,
                x.voluntary_per_call,
                x.involuntary_per_call,
                paper
            );
        }
        s.push('\n');
    }
    s.push_str("## The paper's tables (seed 001, CPS, Proxy 200 test)\n\n");
    for (title, table) in [
        ("Table 1, stateless proxy", &TABLE1[..]),
        ("Table 2, stateful proxy", &TABLE2[..]),
    ] {
        let _ = writeln!(
            s,
            "{title}:\n\n| architecture | 1×P | 4×P | 1×S | 2×S |\n| --- | --- | --- | --- | --- |"
        );
        let event = table.first().map_or([1.0; 4], |(_, r)| *r);
        for (name, row) in table {
            let cells: Vec<String> = row
                .iter()
                .zip(event)
                .map(|(v, e)| format!("{v:.0} ({:.2})", v / e))
                .collect();
            let _ = writeln!(s, "| {name} | {} |", cells.join(" | "));
        }
        s.push('\n');
    }
    s.push_str(
        "Ratios in parentheses are to event-based on the same hardware (the paper's Fig. 23). \
         Matching: stateless thread pool ↔ `thread-pool` (and `holdline`), stateful \
         thread pool (sipd) ↔ `pool-thread-per-message`, two-stage thread pool ↔ `holdline`; \
         the paper measured no stateful process pool.\n",
    );
    s
}

/// `ratios-MODE.svg/png`: ratio to the event loop per driver (x: the driver's number in
/// [`Driver::ALL`]), one line per core count, and the paper's per platform.
fn plot_ratios(out: &Path, mode: &str, rows: &[Row]) -> Result<()> {
    let stateful = mode == "stateful";
    let mut series: Vec<plot::Series> = Vec::new();
    for cores in [1u8, 2] {
        let pts: Vec<(f64, f64)> = Driver::ALL
            .iter()
            .enumerate()
            .filter_map(|(i, d)| {
                rows.iter()
                    .find(|r| r.driver == *d && r.mode == mode && r.cores == cores)
                    .and_then(|r| r.ratio_to_event)
                    .map(|v| ((i + 1) as f64, v))
            })
            .collect();
        if !pts.is_empty() {
            let label = if cores == 1 { "1 core" } else { "2 cores" };
            series.push((format!("measured, {label}"), pts));
        }
    }
    // Drawn even without a measured ratio (no clean event-loop point): the paper's lines.
    for (c, platform) in PLATFORMS.iter().enumerate() {
        let pts: Vec<(f64, f64)> = Driver::ALL
            .iter()
            .enumerate()
            .filter_map(|(i, d)| {
                let (_, row) = paper_row(*d, stateful)?;
                let (_, event) = paper_row(Driver::Event, stateful)?;
                Some(((i + 1) as f64, row[c] / event[c]))
            })
            .collect();
        series.push((format!("paper {platform}"), pts));
    }
    plot::chart(
        out,
        &format!("ratios-{mode}"),
        &format!("{mode} proxy: calls/s relative to the event loop"),
        "1 event, 2 thread/msg, 3 pool-thread/msg, 4 thread pool (100 sets), 5 process pool, 6 holdline",
        "ratio to event-based",
        &series,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_ratios_are_read_from_its_tables() {
        // Fig. 23's example: stateless thread pool on 4×P is about three times event-based.
        let r = paper_ratios(Driver::ThreadPool, false, 2);
        assert_eq!(r[0].0, "4×P");
        assert!((r[0].1 - 3.25).abs() < 1e-9);
        assert!((paper_ratios(Driver::ProcessPool, false, 1)[0].1 - 1600.0 / 1550.0).abs() < 1e-9);
        assert!((paper_ratios(Driver::Holdline, true, 2)[1].1 - 1.25).abs() < 1e-9);
        assert!(paper_ratios(Driver::ProcessPool, true, 1).is_empty());
        assert!(
            paper_ratios(Driver::Event, true, 1)
                .iter()
                .all(|(_, v)| *v == 1.0)
        );
    }

    #[test]
    fn the_search_climbs_falls_and_bisects() {
        assert_eq!(next_rate(Some(1000.0), None, 1000.0), Some(1400.0));
        assert_eq!(next_rate(None, Some(1000.0), 1000.0), Some(600.0));
        assert_eq!(next_rate(Some(1000.0), Some(1400.0), 1400.0), Some(1200.0));
        assert_eq!(next_rate(Some(1200.0), Some(1300.0), 1300.0), None);
        assert_eq!(next_rate(None, Some(60.0), 60.0), None);
    }

    #[test]
    fn context_switches_from_proc_status() {
        let text = "Name:\tx\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(switches(text), (12, 3));
        assert_eq!(switches("Name:\tx\n"), (0, 0));
        // This process's own threads.
        let u = proc_usage(std::process::id());
        assert!(u.voluntary + u.involuntary > 0, "{u:?}");
    }

    #[test]
    fn the_event_loop_is_measured_first() {
        let a =
            Args::try_parse_from(["x", "--drivers", "holdline,event,thread-pool"]).expect("args");
        assert_eq!(
            a.drivers(),
            vec![Driver::Event, Driver::Holdline, Driver::ThreadPool]
        );
        assert!(Args::try_parse_from(["x", "--drivers", "fibers"]).is_err());
        assert!(Args::try_parse_from(["x", "--cores", "3"]).is_err());
    }
}
