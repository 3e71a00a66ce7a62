//! `holdline bench`: holdline against Kamailio on this machine.
//!
//! For each server — `holdline serve` (one worker) and Kamailio (`lab/kamailio/run.sh`) —
//! pinned to core 1 while `holdline load` runs on core 0, and restarted for every step:
//!
//! 1. **capacity**: the offered rate is bisected (geometrically) until calls fail or PDD p99
//!    exceeds 100 ms, for calls over UDP and TCP (INVITE/100/180/200/ACK/BYE/200) and for
//!    REGISTER; a figure whose server core was not saturated at the first failing step (or
//!    that never failed) is reported as a lower bound (`*_lower_bound: true`);
//! 2. **sustained load**: each server offered its found UDP and then TCP capacity for
//!    `--sustain-seconds` (60; quick 5), its process tree's RSS and CPU sampled every second:
//!    completion ratio, 503s, RSS at the start, end and maximum and its slope after 32 s,
//!    CPU per call, PDD (see [`crate::sustain`]);
//! 3. **cost per call**: server CPU time (utime and stime over its process tree) per
//!    completed call and per REGISTER at fixed offered rates;
//! 4. **overload curve**: both servers in one cgroup v1 CPU group with the same quota (25%),
//!    once per CFS period of `--quota-periods-us` (10 ms and 1 ms; quick 10 ms), offered 0.5x
//!    to 10x their capacity under that quota; holdline with overload control on and off; each
//!    server's saturation throughput (the highest goodput along the curve) next to its
//!    capacity by the p99 rule.
//!
//! Every step records the server's CPU split into user and system time and the latency
//! p50/p99/p99.9. Steps of the two servers are interleaved (A, B, A, B) so drifts of the host
//! hit both; with `--repeat N` the N runs advance together, interleaved at every step (A, B,
//! A, B, … once per run), and the figures are their medians with min and max.
//! Output (`--out DIR`): `results.json`, `steps.csv`, `overload.csv`, `sustain.csv`,
//! `sustain-samples.csv`, `summary.md`, `goodput.svg/png` (and `goodput-PERIODus.svg/png` for
//! further periods), `cost.svg/png`, `sustain-rss.svg/png`, `sustain-completed.svg/png`, and
//! the per-step generator reports and logs in `raw/`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use clap::Parser;

use crate::cgroup::{self, CpuGroup};
use crate::error::{LabError, Result};
use crate::generator::{self, Load, Plan, SATURATED, Step, StepRun};
use crate::report::{
    self, Capacity, FailureDetail, Machine, OverloadPoint, QuotaFigures, Results, RunFigures,
    Saturation, ServerFigures, Settings,
};
use crate::server::{self, Env, Kind, Transport};
use crate::sustain::{self, SustainRow};

/// Command line of `holdline bench`.
#[derive(Debug, Parser)]
#[command(
    name = "holdline bench",
    about = "Compare holdline with Kamailio: capacity, sustained load, cost per call, overload curves"
)]
struct Args {
    /// Few short steps (~2 s each), under 3 minutes in all.
    #[arg(long)]
    quick: bool,
    /// Results directory (created).
    #[arg(long, value_name = "DIR", default_value = "bench-results")]
    out: PathBuf,
    /// Directory with Kamailio's run.sh/stop.sh/kamailio.cfg (default: lab/kamailio of the
    /// source tree this binary was built from).
    #[arg(long, value_name = "DIR")]
    kamailio_dir: Option<PathBuf>,
    /// Seconds of load per step (capacity, cost and overload steps), instead of the mode's
    /// (quick 2, full 5). Steps longer than 32 s show the steady state of UDP transactions.
    #[arg(long, value_name = "S", value_parser = parse_seconds)]
    step_seconds: Option<f64>,
    /// Kamailio worker processes per transport (1: no reordering, fair on one core).
    #[arg(long, value_name = "N", default_value_t = 1)]
    kamailio_children: u32,
    /// Seconds each server is held at its found UDP and at its found TCP capacity in the
    /// sustained phase, RSS sampled every second (default 60; 5 with --quick).
    #[arg(long, value_name = "S", value_parser = parse_sustain_seconds)]
    sustain_seconds: Option<f64>,
    /// `cpu.cfs_period_us` of the overload curves under the 25% quota, one curve each,
    /// comma-separated (default 10000,1000; 10000 with --quick). A period whose quota would
    /// be under the kernel's 1 ms minimum runs with the smallest period that allows it (1000
    /// at 25%: 4000) and results.json says so.
    #[arg(long, value_name = "US[,US...]", value_delimiter = ',', value_parser = parse_period)]
    quota_periods_us: Vec<u64>,
    /// Runs of the whole measurement, interleaved step by step (holdline, Kamailio, holdline,
    /// Kamailio, …); summary.md and results.json report medians with min-max, and every
    /// run's own figures.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=20))]
    repeat: u32,
}

fn parse_seconds(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.5..=600.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}`: expected seconds between 0.5 and 600")),
    }
}

fn parse_sustain_seconds(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (1.0..=1800.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}`: expected seconds between 1 and 1800")),
    }
}

fn parse_period(s: &str) -> std::result::Result<u64, String> {
    match s.parse::<u64>() {
        Ok(v) if (cgroup::MIN_QUOTA_US..=cgroup::MAX_PERIOD_US).contains(&v) => Ok(v),
        _ => Err(format!(
            "`{s}`: expected a period in µs between {} and {}",
            cgroup::MIN_QUOTA_US,
            cgroup::MAX_PERIOD_US
        )),
    }
}

/// Runs `holdline bench ARGS` (arguments after the subcommand name) and returns the exit
/// status: 0 when the results were written, 1 when a measurement failed, 2 for bad arguments
/// or a missing prerequisite (Kamailio, SIPp, root).
pub fn run(args: Vec<String>) -> ExitCode {
    let args = match Args::try_parse_from(std::iter::once("holdline bench".to_string()).chain(args))
    {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    let env = match prerequisites(&args) {
        Ok(env) => env,
        Err(e) => {
            eprintln!("holdline bench: {e}");
            return ExitCode::from(2);
        }
    };
    match bench(&args, env) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("holdline bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Finds `name` on PATH (as `run.sh` does: Debian puts kamailio in /usr/sbin, on root's PATH).
fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The `lab/kamailio` directory: the flag, else next to an ancestor of the binary, else the
/// source tree this crate was built from.
fn kamailio_dir(flag: Option<&Path>) -> Option<PathBuf> {
    if let Some(d) = flag {
        return Some(d.to_owned());
    }
    let exe_based = std::env::current_exe().ok().and_then(|exe| {
        exe.ancestors()
            .map(|a| a.join("lab/kamailio"))
            .find(|d| d.join("run.sh").is_file())
    });
    exe_based.or_else(|| {
        let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab/kamailio");
        built.join("run.sh").is_file().then_some(built)
    })
}

fn prerequisites(args: &Args) -> Result<Env> {
    if which("kamailio").is_none() {
        return Err(LabError::Missing {
            program: "kamailio",
            package: "kamailio",
        });
    }
    if which("sipp").is_none() {
        return Err(LabError::Missing {
            program: "sipp",
            package: "sip-tester",
        });
    }
    if which("taskset").is_none() {
        return Err(LabError::Missing {
            program: "taskset",
            package: "util-linux",
        });
    }
    if !crate::runner::is_root() {
        return Err(LabError::Precondition(
            "must run as root (cgroup CPU quota for the overload curve)".into(),
        ));
    }
    if std::thread::available_parallelism().map_or(1, usize::from) < 2 {
        return Err(LabError::Precondition(
            "needs 2 cores (server on core 1, generator on core 0)".into(),
        ));
    }
    let kdir = kamailio_dir(args.kamailio_dir.as_deref()).ok_or_else(|| {
        LabError::Precondition(
            "lab/kamailio (run.sh, stop.sh) not found: pass --kamailio-dir DIR".into(),
        )
    })?;
    for f in ["run.sh", "stop.sh", "kamailio.cfg"] {
        if !kdir.join(f).is_file() {
            return Err(LabError::Precondition(format!(
                "{} has no {f}",
                kdir.display()
            )));
        }
    }
    if args.kamailio_children == 0 {
        return Err(LabError::Precondition(
            "--kamailio-children must be at least 1".into(),
        ));
    }
    let exe = std::env::current_exe().map_err(|e| LabError::io("locate the holdline binary", e))?;
    let help = Command::new(&exe)
        .args(["serve", "--help"])
        .stderr(Stdio::null())
        .output()
        .map_err(|e| LabError::io("holdline serve --help", e))?;
    let overload_flag = String::from_utf8_lossy(&help.stdout).contains("--overload");
    let work = args.out.join("raw");
    std::fs::create_dir_all(&work)
        .map_err(|e| LabError::io(format!("create {}", work.display()), e))?;
    let work = work
        .canonicalize()
        .map_err(|e| LabError::io(format!("resolve {}", work.display()), e))?;
    Ok(Env {
        exe,
        kamailio_dir: kdir,
        work,
        kamailio_children: args.kamailio_children,
        overload_flag,
    })
}

/// Geometric bisection of a rate between a low and a high bound.
#[derive(Debug)]
struct Search {
    lo: f64,
    hi: f64,
    best_clean: Option<Step>,
    first_fail: Option<Step>,
    all: Vec<Step>,
}

impl Search {
    fn new(lo: f64, hi: f64) -> Self {
        Self {
            lo,
            hi,
            best_clean: None,
            first_fail: None,
            all: Vec::new(),
        }
    }

    fn next_rate(&self) -> f64 {
        ((self.lo * self.hi).sqrt() / 10.0).round() * 10.0
    }

    fn record(&mut self, step: Step) {
        if step.clean {
            self.lo = step.rate;
            self.best_clean = Some(step.clone());
        } else {
            self.hi = step.rate;
            self.first_fail = Some(step.clone());
        }
        self.all.push(step);
    }

    /// The highest clean rate; a lower bound when nothing above it failed or the server's
    /// core was not saturated at the lowest failing rate above it.
    fn result(&self) -> Capacity {
        let fail_busy = self.first_fail.as_ref().map(Step::saturation);
        let first_failure = self.first_fail.as_ref().map(|s| FailureDetail {
            rate: s.rate,
            failed: s.failed,
            r503: s.r503,
            p99_ms: s.p99_ms,
        });
        match &self.best_clean {
            Some(c) => Capacity {
                value: c.rate,
                clean_found: true,
                lower_bound: fail_busy.is_none_or(|b| b < SATURATED),
                server_busy_at_capacity: c.saturation(),
                server_busy_at_first_failure: fail_busy,
                first_failure,
            },
            None => Capacity {
                // No clean step: what the lowest (failing) step delivered, flagged.
                value: self.all.iter().map(|s| s.goodput).fold(0.0, f64::max),
                clean_found: false,
                lower_bound: false,
                server_busy_at_capacity: 0.0,
                server_busy_at_first_failure: fail_busy,
                first_failure,
            },
        }
    }
}

/// Runs the steps, keeps every record, prints progress.
struct Runner {
    env: Env,
    start: Instant,
    n: usize,
    /// Steps planned in all (for the progress lines).
    total: usize,
    /// Runs of the measurement (`--repeat`).
    runs: usize,
    steps: Vec<Step>,
}

/// Where a step runs: its run of the measurement and, under a CPU quota, the group and its
/// period.
#[derive(Clone, Copy)]
struct Place<'a> {
    run: usize,
    quota: Option<(&'a CpuGroup, u64)>,
}

impl Runner {
    /// One step on a fresh server.
    fn step(&mut self, kind: Kind, plan: Plan, section: &str, at: Place<'_>) -> Result<StepRun> {
        self.n += 1;
        let run_tag = if self.runs > 1 {
            format!("-r{}", at.run + 1)
        } else {
            String::new()
        };
        let tag = format!("{:03}{run_tag}-{section}-{}", self.n, plan.load.name());
        let next_hop = match plan.load {
            Load::Calls(t) => t,
            Load::Register => Transport::Udp,
        };
        let procs = at.quota.map(|(g, _)| g.procs_file());
        // A port can be taken between the pick and the server's bind (by another process of
        // the machine): up to three picks.
        let mut attempt = 0;
        let (mut srv, port, uas_port) = loop {
            attempt += 1;
            let port = server::free_port()?;
            let uas_port = loop {
                let p = server::free_port()?;
                if p != port {
                    break p;
                }
            };
            match server::start(
                &self.env,
                kind,
                port,
                uas_port,
                next_hop,
                procs.as_deref(),
                &tag,
            ) {
                Ok(srv) => break (srv, port, uas_port),
                Err(e @ LabError::PortTaken { .. }) if attempt < 3 => {
                    eprintln!("bench: {e}; retrying on another port");
                }
                Err(e) => return Err(e),
            }
        };
        let outcome = generator::run_step(
            &self.env.exe,
            &self.env.work,
            &tag,
            &srv,
            port,
            uas_port,
            plan,
        );
        srv.stop();
        let mut out = match outcome {
            Ok(r) => r,
            Err(e) => {
                eprintln!("bench: step {tag} on {} failed: {e}", kind.name());
                StepRun {
                    step: failed_step(plan),
                    samples: Vec::new(),
                    per_second: Vec::new(),
                }
            }
        };
        let step = &mut out.step;
        step.section = section.into();
        step.server = kind.name().into();
        step.run = at.run;
        step.cfs_period_us = at.quota.map(|(_, p)| p);
        let mut where_ = String::new();
        if self.runs > 1 {
            where_.push_str(&format!(" run {}/{}", at.run + 1, self.runs));
        }
        if let Some(p) = step.cfs_period_us {
            where_.push_str(&format!(" period {p} µs"));
        }
        eprintln!(
            "[bench {:>6.1}s {:>3}/{}] {section:<15} {:<12} {:<12} {:>7.0}/s: {} ok {}/{} goodput {:.0}/s p50/p99/p99.9 {:.1}/{:.1}/{:.1} ms, server core {:.0}% (user {:.0}% sys {:.0}% softirq {:.0}%), {:.1} µs/op{where_}",
            self.start.elapsed().as_secs_f64(),
            self.n,
            self.total,
            step.server,
            step.load,
            step.rate,
            if step.clean { "clean " } else { "FAILED" },
            step.ok,
            step.attempted,
            step.goodput,
            step.p50_ms,
            step.p99_ms,
            step.p999_ms,
            step.saturation() * 100.0,
            step.server_user_us as f64 / 1e4 / step.window_s.max(1e-3),
            step.server_sys_us as f64 / 1e4 / step.window_s.max(1e-3),
            step.core_interrupt_us as f64 / 1e4 / step.window_s.max(1e-3),
            step.cpu_us_per_op,
        );
        self.steps.push(out.step.clone());
        Ok(out)
    }
}

fn failed_step(plan: Plan) -> Step {
    Step {
        section: String::new(),
        run: 0,
        cfs_period_us: None,
        server: String::new(),
        load: plan.load.name().into(),
        rate: plan.rate,
        offered_rate: 0.0,
        duration_s: plan.duration_s,
        attempted: 0,
        ok: 0,
        failed: 0,
        goodput: 0.0,
        p50_ms: 0.0,
        p99_ms: 0.0,
        p999_ms: 0.0,
        retrans_200: 0,
        retrans_invite: 0,
        r503: 0,
        server_cpu_us: 0,
        server_user_us: 0,
        server_sys_us: 0,
        window_s: 0.0,
        server_busy: 0.0,
        core_busy: 0.0,
        core_interrupt_us: 0,
        cpu_us_per_op: 0.0,
        clean: false,
    }
}

/// The two servers compared (holdline with its default overload control).
const SERVERS: [Kind; 2] = [Kind::Holdline, Kind::Kamailio];

/// The servers of the overload curve, and whose capacity under the quota is their base.
const CURVE: [(Kind, usize); 3] = [
    (Kind::Holdline, 0),
    (Kind::Kamailio, 1),
    (Kind::HoldlineOff, 0),
];

/// What one run of the measurement has found so far.
struct RunState {
    /// Capacity searches per load (UDP calls, TCP calls, REGISTER) and server.
    searches: Vec<Vec<Search>>,
    /// Sustained rows per server.
    sustain: [Vec<SustainRow>; 2],
    /// Cost steps of calls per server.
    cost: [Vec<Step>; 2],
    /// Cost steps of REGISTERs per server.
    reg_cost: [Vec<Step>; 2],
    /// Figures under the quota per server, one per period.
    quota: [Vec<QuotaFigures>; 2],
}

/// The periods to run (`requested` after [`cgroup::feasible_quota`], duplicates dropped) with
/// the period asked for and the quota: `(period_us, requested_us, quota_us)`.
fn quota_periods(requested: &[u64], percent: u64) -> Vec<(u64, u64, u64)> {
    let mut out: Vec<(u64, u64, u64)> = Vec::new();
    for &want in requested {
        let (period, quota) = cgroup::feasible_quota(want, percent);
        if period != want {
            eprintln!(
                "bench: cpu.cfs_period_us {want} with a {percent}% quota needs cpu.cfs_quota_us {}, under the kernel's minimum of {} µs: running that curve with period {period} µs (quota {quota} µs)",
                want * percent / 100,
                cgroup::MIN_QUOTA_US
            );
        }
        if out.iter().any(|(p, ..)| *p == period) {
            eprintln!("bench: period {period} µs is already measured; not twice");
            continue;
        }
        out.push((period, want, quota));
    }
    out
}

fn bench(args: &Args, env: Env) -> Result<()> {
    let mut s = if args.quick {
        Settings::quick()
    } else {
        Settings::full()
    };
    if let Some(secs) = args.step_seconds {
        s.step_s = secs;
        s.cost_s = secs;
        s.overload_s = secs;
    }
    if let Some(secs) = args.sustain_seconds {
        s.sustain_s = secs;
    }
    if !args.quota_periods_us.is_empty() {
        s.requested_quota_periods_us = args.quota_periods_us.clone();
    }
    let periods = quota_periods(&s.requested_quota_periods_us, s.quota_percent);
    s.quota_periods_us = periods.iter().map(|p| p.0).collect();
    s.requested_quota_periods_us = periods.iter().map(|p| p.1).collect();
    s.repeat = args.repeat as usize;
    let runs = s.repeat;
    let start = Instant::now();
    let per_run = s.capacity_steps * 3 * 2
        + 2 * 2
        + (s.cost_rates.len() + s.register_cost_rates.len()) * 2
        + periods.len() * (s.quota_steps * 2 + s.overload_factors.len() * CURVE.len());
    eprintln!(
        "holdline bench ({} mode, {runs} run(s), {} steps): servers on core {}, generator on core {}; results in {}",
        if args.quick { "quick" } else { "full" },
        per_run * runs,
        server::SERVER_CORE,
        generator::GENERATOR_CORE,
        args.out.display()
    );
    let mut machine = Machine::probe(env.kamailio_children, env.overload_flag);
    let mut r = Runner {
        env,
        start,
        n: 0,
        total: per_run * runs,
        runs,
        steps: Vec::new(),
    };

    // 1. Capacity, interleaved: for each bisection step, each load, each run, holdline then
    //    Kamailio.
    let loads = [
        Load::Calls(Transport::Udp),
        Load::Calls(Transport::Tcp),
        Load::Register,
    ];
    let mut st: Vec<RunState> = (0..runs)
        .map(|_| RunState {
            searches: loads
                .iter()
                .map(|l| {
                    let (lo, hi) = match l {
                        Load::Register => s.register_range,
                        Load::Calls(_) => s.call_range,
                    };
                    SERVERS.iter().map(|_| Search::new(lo, hi)).collect()
                })
                .collect(),
            sustain: [Vec::new(), Vec::new()],
            cost: [Vec::new(), Vec::new()],
            reg_cost: [Vec::new(), Vec::new()],
            quota: [Vec::new(), Vec::new()],
        })
        .collect();
    for _ in 0..s.capacity_steps {
        for (li, load) in loads.iter().enumerate() {
            for (run, rs) in st.iter_mut().enumerate() {
                for (si, kind) in SERVERS.iter().enumerate() {
                    let plan = Plan {
                        load: *load,
                        rate: rs.searches[li][si].next_rate(),
                        duration_s: s.step_s,
                        drain_s: s.drain_s,
                        sample: false,
                    };
                    let at = Place { run, quota: None };
                    let step = r.step(*kind, plan, "capacity", at)?.step;
                    rs.searches[li][si].record(step);
                }
            }
        }
    }

    // 2. Sustained load at each found call capacity, UDP then TCP; a rate that does not
    //    hold for the whole phase is retried lower (a capacity that does not hold for a
    //    minute is not a capacity).
    for (li, transport) in [(0, Transport::Udp), (1, Transport::Tcp)] {
        for (run, rs) in st.iter_mut().enumerate() {
            for (si, kind) in SERVERS.iter().enumerate() {
                let cap = rs.searches[li][si].result();
                let mut search = sustain::SustainSearch::new(cap.value);
                for attempt in 0..s.sustain_tries {
                    let Some(rate) = search.next_rate() else {
                        break;
                    };
                    if attempt > 0 {
                        r.total += 1;
                    }
                    let plan = Plan {
                        load: Load::Calls(transport),
                        rate,
                        duration_s: s.sustain_s,
                        drain_s: s.drain_s,
                        sample: true,
                    };
                    let at = Place { run, quota: None };
                    let row = SustainRow::new(
                        r.step(*kind, plan, "sustain", at)?,
                        transport.name(),
                        cap.lower_bound,
                        attempt,
                    );
                    eprintln!(
                        "[bench {:>6.1}s] sustain {} {} at {:.0}/s for {:.0} s (try {}): completed {}/{} ({:.4}: {}), 503 {}, RSS {:.1} -> {:.1} MB (max {:.1}, slope after 32 s {}), {:.1} µs CPU per call",
                        r.start.elapsed().as_secs_f64(),
                        row.server,
                        row.transport,
                        row.rate,
                        row.duration_s,
                        attempt + 1,
                        row.completed,
                        row.attempted,
                        row.completion_ratio,
                        if row.held { "held" } else { "did not hold" },
                        row.r503,
                        row.rss_start_mb,
                        row.rss_end_mb,
                        row.rss_max_mb,
                        row.rss_slope_mb_per_min
                            .map_or_else(|| "n/a".to_string(), |v| format!("{v:+.2} MB/min")),
                        row.cpu_us_per_call
                    );
                    search.record(rate, row.held);
                    rs.sustain[si].push(row);
                }
                eprintln!(
                    "[bench {:>6.1}s] sustained capacity of {} over {}: {}",
                    r.start.elapsed().as_secs_f64(),
                    kind.name(),
                    transport.name(),
                    search
                        .sustained()
                        .map_or_else(|| "none held".to_string(), |v| format!("{v:.0} calls/s"))
                );
            }
        }
    }

    // 3. Cost per call and per REGISTER at fixed rates.
    for (load, rates) in [
        (Load::Calls(Transport::Udp), &s.cost_rates),
        (Load::Register, &s.register_cost_rates),
    ] {
        for &rate in rates {
            for (run, rs) in st.iter_mut().enumerate() {
                for (si, kind) in SERVERS.iter().enumerate() {
                    let plan = Plan {
                        load,
                        rate,
                        duration_s: s.cost_s,
                        drain_s: s.drain_s,
                        sample: false,
                    };
                    let step = r
                        .step(*kind, plan, "cost", Place { run, quota: None })?
                        .step;
                    match load {
                        Load::Register => rs.reg_cost[si].push(step),
                        Load::Calls(_) => rs.cost[si].push(step),
                    }
                }
            }
        }
    }

    // 4. Overload curves under a CPU quota, one per CFS period.
    let mut overload = Vec::new();
    for &(period, requested, quota_us) in &periods {
        let group = CpuGroup::create(
            &format!("holdline-bench-{}-{period}", std::process::id()),
            period,
            quota_us,
        )?;
        let mut quota_search: Vec<Vec<Search>> = st
            .iter()
            .map(|rs| {
                (0..2)
                    .map(|si| {
                        let full = rs.searches[0][si].result().value.max(100.0);
                        Search::new(full * 0.1, full)
                    })
                    .collect()
            })
            .collect();
        for _ in 0..s.quota_steps {
            for (run, qs) in quota_search.iter_mut().enumerate() {
                for (si, kind) in SERVERS.iter().enumerate() {
                    let plan = Plan {
                        load: Load::Calls(Transport::Udp),
                        rate: qs[si].next_rate(),
                        duration_s: s.overload_s,
                        drain_s: s.drain_s,
                        sample: false,
                    };
                    let at = Place {
                        run,
                        quota: Some((&group, period)),
                    };
                    let step = r.step(*kind, plan, "quota-capacity", at)?.step;
                    qs[si].record(step);
                }
            }
        }
        let quota_cap: Vec<Vec<Capacity>> = quota_search
            .iter()
            .map(|qs| qs.iter().map(Search::result).collect())
            .collect();
        for &factor in &s.overload_factors {
            for (run, caps) in quota_cap.iter().enumerate() {
                for (kind, base) in CURVE {
                    let base_rate = caps[base].value.max(50.0);
                    let plan = Plan {
                        load: Load::Calls(Transport::Udp),
                        rate: (base_rate * factor).round().max(10.0),
                        duration_s: s.overload_s,
                        drain_s: s.drain_s,
                        sample: false,
                    };
                    let at = Place {
                        run,
                        quota: Some((&group, period)),
                    };
                    let step = r.step(kind, plan, "overload", at)?.step;
                    overload.push(OverloadPoint::new(
                        &step,
                        factor,
                        base_rate,
                        period,
                        s.quota_percent,
                    ));
                }
            }
        }
        drop(group);
        for (rs, caps) in st.iter_mut().zip(quota_cap) {
            for (si, cap) in caps.into_iter().enumerate() {
                rs.quota[si].push(QuotaFigures {
                    cfs_period_us: period,
                    requested_cfs_period_us: requested,
                    cfs_quota_us: quota_us,
                    capacity: cap,
                    saturation: Saturation::default(),
                });
            }
        }
    }
    report::set_saturation_ratios(&mut overload);
    for (run, rs) in st.iter_mut().enumerate() {
        for (si, kind) in SERVERS.iter().enumerate() {
            for q in &mut rs.quota[si] {
                q.saturation = report::saturation(&overload, run, kind.name(), q.cfs_period_us);
            }
        }
    }

    // 5. Results.
    machine.finish();
    let figures: Vec<RunFigures> = st
        .into_iter()
        .map(|rs| {
            let RunState {
                searches,
                sustain,
                cost,
                reg_cost,
                quota,
            } = rs;
            let [sus_h, sus_k] = sustain;
            let [cost_h, cost_k] = cost;
            let [reg_h, reg_k] = reg_cost;
            let [quota_h, quota_k] = quota;
            let fig = |si: usize,
                       sustain: Vec<SustainRow>,
                       cost: Vec<Step>,
                       register_cost: Vec<Step>,
                       quota: Vec<QuotaFigures>| ServerFigures {
                udp: searches[0][si].result(),
                tcp: searches[1][si].result(),
                register: searches[2][si].result(),
                cost,
                register_cost,
                quota,
                sustain,
            };
            RunFigures {
                holdline: fig(0, sus_h, cost_h, reg_h, quota_h),
                kamailio: fig(1, sus_k, cost_k, reg_k, quota_k),
            }
        })
        .collect();
    let results = Results::new(
        args.quick,
        &s,
        machine,
        figures,
        overload,
        std::mem::take(&mut r.steps),
        start.elapsed().as_secs_f64(),
    );
    report::write_all(&args.out, &results)?;
    crate::index::after_run(&args.out, "holdline bench: holdline against Kamailio");
    eprintln!(
        "holdline bench: done in {:.0} s; {}",
        start.elapsed().as_secs_f64(),
        args.out.join("summary.md").display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_under_the_minimum_quota_are_raised_and_not_run_twice() {
        assert_eq!(
            quota_periods(&[10_000, 1_000], 25),
            vec![(10_000, 10_000, 2_500), (4_000, 1_000, 1_000)]
        );
        assert_eq!(
            quota_periods(&[1_000, 2_000, 4_000], 25),
            vec![(4_000, 1_000, 1_000)]
        );
    }

    #[test]
    fn options_parse_and_are_bounded() {
        let a = Args::try_parse_from([
            "holdline bench",
            "--quick",
            "--sustain-seconds",
            "12",
            "--quota-periods-us",
            "10000,1000",
            "--repeat",
            "3",
        ])
        .expect("valid options");
        assert_eq!(a.sustain_seconds, Some(12.0));
        assert_eq!(a.quota_periods_us, vec![10_000, 1_000]);
        assert_eq!(a.repeat, 3);
        let d = Args::try_parse_from(["holdline bench"]).expect("defaults");
        assert_eq!(d.repeat, 1);
        assert!(d.quota_periods_us.is_empty() && d.sustain_seconds.is_none());
        for bad in [
            &["--repeat", "0"][..],
            &["--quota-periods-us", "500"],
            &["--sustain-seconds", "0"],
        ] {
            assert!(
                Args::try_parse_from(std::iter::once("holdline bench").chain(bad.iter().copied()))
                    .is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_bisection_keeps_the_highest_clean_rate() {
        let mut search = Search::new(1000.0, 8000.0);
        assert_eq!(search.next_rate(), 2830.0);
        let mut step = failed_step(Plan {
            load: Load::Calls(Transport::Udp),
            rate: 2830.0,
            duration_s: 2.0,
            drain_s: 2.0,
            sample: false,
        });
        step.clean = true;
        search.record(step.clone());
        step.rate = 4760.0;
        step.clean = false;
        // The server's processes used 80% of the core, its softirq work the rest: saturated.
        step.server_busy = 0.80;
        step.core_busy = 0.97;
        search.record(step.clone());
        let c = search.result();
        assert_eq!(c.value, 2830.0);
        assert!(c.clean_found && !c.lower_bound);
        // Core not saturated where the step failed: a lower bound.
        let mut search = Search::new(1000.0, 8000.0);
        step.clean = true;
        step.rate = 2830.0;
        search.record(step.clone());
        step.rate = 4760.0;
        step.clean = false;
        step.core_busy = 0.70;
        step.server_busy = 0.65;
        search.record(step);
        assert!(search.result().lower_bound);
    }
}
