//! `holdline bench`: holdline against Kamailio on this machine.
//!
//! For each server — `holdline serve` (one worker) and Kamailio (`lab/kamailio/run.sh`) —
//! pinned to core 1 while `holdline load` runs on core 0, and restarted for every step:
//!
//! 1. **capacity**: the offered rate is bisected (geometrically) until calls fail or PDD p99
//!    exceeds 100 ms, for calls over UDP and TCP (INVITE/100/180/200/ACK/BYE/200) and for
//!    REGISTER; a figure whose server core was not saturated at the first failing step (or
//!    that never failed) is reported as a lower bound (`*_lower_bound: true`);
//! 2. **cost per call**: server CPU time (utime+stime over its process tree) per completed
//!    call and per REGISTER at fixed offered rates;
//! 3. **overload curve**: both servers in one cgroup v1 CPU group with the same quota,
//!    offered 0.5x to 10x their capacity under that quota; holdline with overload control on
//!    and off.
//!
//! Steps of the two servers are interleaved (A, B, A, B) so drifts of the host hit both.
//! Output (`--out DIR`): `results.json`, `steps.csv`, `overload.csv`, `summary.md`,
//! `goodput.svg/png`, `cost.svg/png`, and the per-step generator reports and logs in `raw/`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use clap::Parser;

use crate::cgroup::CpuGroup;
use crate::error::{LabError, Result};
use crate::generator::{self, Load, Plan, SATURATED, Step};
use crate::report::{
    self, Capacity, FailureDetail, Machine, OverloadPoint, Results, ServerFigures, Settings,
};
use crate::server::{self, Env, Kind, Transport};

/// Command line of `holdline bench`.
#[derive(Debug, Parser)]
#[command(
    name = "holdline bench",
    about = "Compare holdline with Kamailio: capacity, cost per call, overload curves"
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
}

fn parse_seconds(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.5..=600.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}`: expected seconds between 0.5 and 600")),
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
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
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
        let fail_busy = self.first_fail.as_ref().map(|s| s.server_busy);
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
                server_busy_at_capacity: c.server_busy,
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
    steps: Vec<Step>,
}

impl Runner {
    /// One step on a fresh server.
    fn step(
        &mut self,
        kind: Kind,
        plan: Plan,
        section: &str,
        cgroup: Option<&CpuGroup>,
    ) -> Result<Step> {
        self.n += 1;
        let tag = format!("{:03}-{section}-{}", self.n, plan.load.name());
        let next_hop = match plan.load {
            Load::Calls(t) => t,
            Load::Register => Transport::Udp,
        };
        let procs = cgroup.map(CpuGroup::procs_file);
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
        let mut step = match outcome {
            Ok((s, _)) => s,
            Err(e) => {
                eprintln!("bench: step {tag} on {} failed: {e}", kind.name());
                failed_step(plan)
            }
        };
        step.section = section.into();
        step.server = kind.name().into();
        eprintln!(
            "[bench {:>6.1}s] {section:<15} {:<12} {:<12} {:>7.0}/s: {} ok {}/{} goodput {:.0}/s p99 {:.1} ms, server core {:.0}%, {:.1} µs/op",
            self.start.elapsed().as_secs_f64(),
            step.server,
            step.load,
            step.rate,
            if step.clean { "clean " } else { "FAILED" },
            step.ok,
            step.attempted,
            step.goodput,
            step.p99_ms,
            step.server_busy * 100.0,
            step.cpu_us_per_op,
        );
        self.steps.push(step.clone());
        Ok(step)
    }
}

fn failed_step(plan: Plan) -> Step {
    Step {
        section: String::new(),
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
        retrans_200: 0,
        retrans_invite: 0,
        r503: 0,
        server_cpu_us: 0,
        window_s: 0.0,
        server_busy: 0.0,
        cpu_us_per_op: 0.0,
        clean: false,
    }
}

/// The two servers compared (holdline with its default overload control).
const SERVERS: [Kind; 2] = [Kind::Holdline, Kind::Kamailio];

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
    let start = Instant::now();
    eprintln!(
        "holdline bench ({} mode): servers on core {}, generator on core {}; results in {}",
        if args.quick { "quick" } else { "full" },
        server::SERVER_CORE,
        generator::GENERATOR_CORE,
        args.out.display()
    );
    let mut machine = Machine::probe(env.kamailio_children, env.overload_flag);
    let mut r = Runner {
        env,
        start,
        n: 0,
        steps: Vec::new(),
    };

    // 1. Capacity, interleaved: for each bisection step, each load, holdline then Kamailio.
    let loads = [
        Load::Calls(Transport::Udp),
        Load::Calls(Transport::Tcp),
        Load::Register,
    ];
    let mut searches: Vec<Vec<Search>> = loads
        .iter()
        .map(|l| {
            let (lo, hi) = match l {
                Load::Register => s.register_range,
                Load::Calls(_) => s.call_range,
            };
            SERVERS.iter().map(|_| Search::new(lo, hi)).collect()
        })
        .collect();
    for _ in 0..s.capacity_steps {
        for (li, load) in loads.iter().enumerate() {
            for (si, kind) in SERVERS.iter().enumerate() {
                let plan = Plan {
                    load: *load,
                    rate: searches[li][si].next_rate(),
                    duration_s: s.step_s,
                    drain_s: s.drain_s,
                };
                let step = r.step(*kind, plan, "capacity", None)?;
                searches[li][si].record(step);
            }
        }
    }

    // 2. Cost per call and per REGISTER at fixed rates.
    let mut cost: Vec<Vec<Step>> = vec![Vec::new(), Vec::new()];
    let mut reg_cost: Vec<Vec<Step>> = vec![Vec::new(), Vec::new()];
    for &rate in &s.cost_rates {
        for (si, kind) in SERVERS.iter().enumerate() {
            let plan = Plan {
                load: Load::Calls(Transport::Udp),
                rate,
                duration_s: s.cost_s,
                drain_s: s.drain_s,
            };
            cost[si].push(r.step(*kind, plan, "cost", None)?);
        }
    }
    for &rate in &s.register_cost_rates {
        for (si, kind) in SERVERS.iter().enumerate() {
            let plan = Plan {
                load: Load::Register,
                rate,
                duration_s: s.cost_s,
                drain_s: s.drain_s,
            };
            reg_cost[si].push(r.step(*kind, plan, "cost", None)?);
        }
    }

    // 3. Overload curve under a CPU quota.
    let group = CpuGroup::create(
        &format!("holdline-bench-{}", std::process::id()),
        s.quota_period_us,
        s.quota_period_us * s.quota_percent / 100,
    )?;
    let mut quota_search: Vec<Search> = (0..2)
        .map(|si| {
            let full = searches[0][si].result().value.max(100.0);
            Search::new(full * 0.1, full)
        })
        .collect();
    for _ in 0..s.quota_steps {
        for (si, kind) in SERVERS.iter().enumerate() {
            let plan = Plan {
                load: Load::Calls(Transport::Udp),
                rate: quota_search[si].next_rate(),
                duration_s: s.overload_s,
                drain_s: s.drain_s,
            };
            let step = r.step(*kind, plan, "quota-capacity", Some(&group))?;
            quota_search[si].record(step);
        }
    }
    let quota_cap: Vec<Capacity> = quota_search.iter().map(Search::result).collect();
    let mut overload = Vec::new();
    for &factor in &s.overload_factors {
        for (kind, base) in [
            (Kind::Holdline, &quota_cap[0]),
            (Kind::Kamailio, &quota_cap[1]),
            (Kind::HoldlineOff, &quota_cap[0]),
        ] {
            let base_rate = base.value.max(50.0);
            let plan = Plan {
                load: Load::Calls(Transport::Udp),
                rate: (base_rate * factor).round().max(10.0),
                duration_s: s.overload_s,
                drain_s: s.drain_s,
            };
            let step = r.step(kind, plan, "overload", Some(&group))?;
            overload.push(OverloadPoint::new(&step, factor, base_rate));
        }
    }
    drop(group);

    // 4. Results.
    machine.finish();
    let figures: Vec<ServerFigures> = (0..2)
        .map(|si| {
            ServerFigures::new(
                searches[0][si].result(),
                searches[1][si].result(),
                searches[2][si].result(),
                &cost[si],
                &reg_cost[si],
                quota_cap[si].clone(),
            )
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
    eprintln!(
        "holdline bench: done in {:.0} s; {}",
        start.elapsed().as_secs_f64(),
        args.out.join("summary.md").display()
    );
    Ok(())
}
