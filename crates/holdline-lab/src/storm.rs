//! `holdline lab storm`: a registration storm against one registrar, with `kill -9` drills
//! at random instants, and a check user by user that no acknowledged registration was lost
//! (issue 21, item 5; it replaces `docs/results/2026-11-25-register-storm/storm.sh`).
//!
//! One storm per `--rate`, one after another, each on a fresh store: `holdline serve
//! --workers 1` pinned to the server core (core 1; with `--cpu-quota`, inside a cgroup v1 CPU
//! group with that share of a core, period 100 ms), the persistent store in `runs/` (default
//! `durability = "commit"`: a 200 OK leaves only once its binding is on disk) or the memory
//! store, `--metrics` on a port of its own; `holdline load register` on the generator core
//! (core 0) registering `--users` new users at `--rate` per second (constant arrivals,
//! Retry-After honoured, `--acked FILE --csv FILE --json FILE`), for `users / rate` seconds
//! plus a drain for the answers and the REGISTERs re-sent after a Retry-After.
//!
//! **Drills.** The storm's arrival period is cut into `--drills` equal slots and one instant
//! is drawn in each (seeded, `--seed`). At each instant the lab reads the store's
//! `holdline_store_bindings` and the server's RSS, kills the server it started with SIGKILL,
//! reaps it and starts it again on the same store directory and ports (same cgroup), then
//! waits for its `ready` line and for its `/metrics` (conditions, not sleeps). The generator
//! keeps running: the REGISTERs in flight retransmit (Timer E) until the new server answers
//! them. Per drill: when, the bindings before the kill, the bindings the restarted server
//! loaded from disk (its start line) and its first `holdline_store_bindings`, the time from
//! the kill to its `ready` line.
//!
//! **The check.** Once the generator has exited, the server is stopped (SIGKILL too), the
//! store file is opened and every user of the generator's `--acked` file (a 2xx answered one
//! of its REGISTERs) is looked up: an acknowledged user without a binding is a lost
//! registration. No user de-registers and no binding expires within a run, so a binding lost
//! at any drill is still missing at the end. With `--store memory` the check is skipped (the
//! memory store promises nothing and loses everything at a kill), and said so.
//!
//! Output in `--out DIR`: `results.json` (machine, command line, one object per storm with its
//! totals, latencies, drills, per-second samples of the server and per-second counts of the
//! generator), `storm.csv` (one row per storm per second: REGISTERs sent, 200, 503, re-sent
//! after a Retry-After, retransmitted, timed out; the server's RSS and bindings),
//! `drills.csv` (one row per drill), `storm.svg/png` (200 and 503 per second, kill instants
//! marked) and `rss.svg/png` (the server's RSS, kill instants marked) — with several rates,
//! one pair of plots per storm (`storm-RATE.svg`, `rss-RATE.svg`) — and every process's log
//! and report under `runs/`. The exit status is non-zero when an acknowledged registration
//! was lost.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use holdline_proto::LocationStore as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cgroup::{CpuGroup, feasible_quota};
use crate::error::{LabError, Result};
use crate::generator::{GENERATOR_CORE, count, num, read_json, wait_bounded};
use crate::plot::{self, Series};
use crate::procfs;
use crate::runner::{
    Proc, RunHeader, check_tools, holdline_exe, lab_main, metric, metric_where, scrape, spawn,
    spawn_in, with_fresh_ports,
};
use crate::server::{DOMAIN, SERVER_CORE, Transport, free_port, tail};

/// Users of a full run.
const DEFAULT_USERS: u64 = 1_000_000;
/// Users of `--quick`.
const QUICK_USERS: u64 = 20_000;
/// New registrations per second of a full run.
const DEFAULT_RATE: f64 = 20_000.0;
/// New registrations per second of `--quick`.
const QUICK_RATE: f64 = 4_000.0;
/// Drills of a full run.
const DEFAULT_DRILLS: usize = 10;
/// Drills of `--quick`.
const QUICK_DRILLS: usize = 2;
/// The generator's wait after its last arrival, full run: Retry-After is drawn from 10-60 s
/// by default and a user may be sent back up to 20 times (storm.sh used 240 s). The
/// generator exits as soon as every REGISTER is answered.
const DEFAULT_DRAIN_S: f64 = 240.0;
/// The drain of `--quick` (Timer F and a few seconds).
const QUICK_DRAIN_S: f64 = 40.0;
/// The file of the persistent store in its directory (`holdline_server::STORE_FILE`).
const STORE_FILE: &str = "locations.redb";
/// The CFS period of `--cpu-quota`, µs (storm.sh's).
const QUOTA_PERIOD_US: u64 = 100_000;
/// The longest wait for a (re)started server's `ready` line and `/metrics`: loading 1,000,000
/// bindings takes about a second.
const START_LIMIT: Duration = Duration::from_secs(60);
/// Sampling period.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// The poll period of the storm's loop (generator exit, drill instants, samples).
const POLL: Duration = Duration::from_millis(20);
/// Each drill's instant is drawn in its slot of the storm away from the slot's edges by this
/// share of the slot (so two kills are never back to back).
const SLOT_MARGIN: f64 = 0.1;
/// At most this many lost users are named in `results.json`.
const LOST_EXAMPLES: usize = 10;
/// The width of a kill mark in the plots at its base, share of the storm's length.
const KILL_MARK_WIDTH: f64 = 0.004;
/// The start line of `holdline serve` that tells what the persistent store loaded.
const STORE_LINE: &str = "holdline: store ";
/// The line `holdline serve` prints once it serves.
const READY_LINE: &str = "holdline: ready";

/// `holdline lab storm` options.
#[derive(Debug, Parser)]
#[command(
    name = "holdline lab storm",
    about = "A registration storm with kill -9 drills: per-second 200/503/retries, latency, RSS, time until every user is registered, acknowledged bindings lost"
)]
pub(crate) struct Args {
    /// 20,000 users at 4,000/s with 2 drills (well under a minute); explicit options still
    /// apply, only the first rate runs.
    #[arg(long)]
    pub quick: bool,
    /// Results directory.
    #[arg(long, value_name = "DIR", default_value = "lab-results/storm")]
    pub out: PathBuf,
    /// Users registering, each once, `u0@example.test` upwards (default 1,000,000; 20,000
    /// with --quick).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub users: Option<u64>,
    /// New registrations per second; a comma-separated list runs one storm per rate, one after
    /// another, each on a fresh store (default 20,000; 4,000 with --quick).
    #[arg(long, value_name = "R[,R...]", value_delimiter = ',')]
    pub rate: Vec<f64>,
    /// Seconds of arrivals: at most `rate × S` of the users are offered (default: all of them,
    /// `users / rate` seconds).
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,
    /// The generator's wait after its last arrival for the answers and for the REGISTERs
    /// re-sent after a Retry-After (default 240; 40 with --quick); it exits earlier once
    /// everything is answered.
    #[arg(long, value_name = "S")]
    pub drain: Option<f64>,
    /// SIP transport. `holdline load register` does not reconnect a TCP connection the server
    /// closed, so TCP runs only with `--drills 0`.
    #[arg(long, value_name = "udp|tcp", default_value = "udp", value_parser = ["udp", "tcp"])]
    pub transport: String,
    /// The server's location store: `persistent` (holdline's default: redb, durability
    /// "commit") or `memory` (no promise; the loss check is skipped).
    #[arg(long, value_name = "persistent|memory", default_value = "persistent",
          value_parser = ["persistent", "memory"])]
    pub store: String,
    /// kill -9 drills at random instants of each storm (default 10; 2 with --quick).
    #[arg(long, value_name = "K")]
    pub drills: Option<usize>,
    /// Run the server in a cgroup v1 CPU group with this quota, percent of one core (period
    /// 100 ms; the restarted servers too). Needs root.
    #[arg(long, value_name = "PCT", value_parser = clap::value_parser!(u64).range(1..=100))]
    pub cpu_quota: Option<u64>,
    /// Seed of the drill instants (storm i uses seed + i) and of the generator.
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,
    /// The `holdline` binary to run (default: this one).
    #[arg(long, value_name = "PATH")]
    pub exe: Option<PathBuf>,
    /// Redraw the plots and the CSV files from `--out`'s `results.json` (no measurement).
    #[arg(long)]
    pub replot: bool,
}

/// One kill -9 and restart.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Drill {
    /// 1-based number of the drill in its storm.
    pub n: usize,
    /// The instant drawn for it, s since the generator started.
    pub planned_at_s: f64,
    /// When the SIGKILL was sent, s since the generator started (later than planned when
    /// the previous restart was still under way).
    pub killed_at_s: f64,
    /// The PID killed.
    pub pid_killed: u32,
    /// `holdline_store_bindings` right before the kill (absent if `/metrics` did not answer).
    pub bindings_before_kill: Option<f64>,
    /// The server's RSS right before the kill, MiB.
    pub rss_before_kill_mb: f64,
    /// The PID of the restarted server.
    pub pid_restarted: u32,
    /// Bindings the restarted server loaded from disk (its start line; 0 for the memory
    /// store).
    pub loaded: u64,
    /// Its first `holdline_store_bindings` once `/metrics` answered.
    pub bindings_after_restart: f64,
    /// From the kill to the restarted server's `ready` line and `/metrics`, s.
    pub restart_s: f64,
}

/// One sample of the server, every second.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Sample {
    /// s since the generator started.
    pub t_s: f64,
    /// The server's RSS, MiB.
    pub rss_mb: f64,
    /// CPU time of the servers so far (the killed ones' up to their last sample), s.
    pub cpu_s: f64,
    /// `holdline_store_bindings` (absent when `/metrics` did not answer).
    pub bindings: Option<f64>,
    /// `holdline_overload_rejected_total` (all reasons; absent when not exported).
    pub rejected: Option<f64>,
    /// Which server: 0 the first, i after drill i.
    pub incarnation: usize,
    /// The persistent store's commits so far (`holdline_store_commit_seconds_count`; this
    /// incarnation's; absent with the memory store).
    #[serde(default)]
    pub commits: Option<f64>,
    /// Those that took longer than 10 ms (the disk's fsync stalls).
    #[serde(default)]
    pub commits_over_10ms: Option<f64>,
    /// The longest commit so far, ms.
    #[serde(default)]
    pub commit_max_ms: Option<f64>,
    /// REGISTER 200s held for their commit so far (`holdline_register_commit_wait_seconds`).
    #[serde(default)]
    pub held: Option<f64>,
    /// Those held longer than 10 ms.
    #[serde(default)]
    pub held_over_10ms: Option<f64>,
}

/// One row of the generator's per-second CSV.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct Second {
    /// End of the second, s since the generator started.
    pub t_s: f64,
    /// REGISTER transactions started (new users, re-sent after a Retry-After).
    pub sent: f64,
    /// 2xx received.
    pub ok: f64,
    /// 5xx received (503 with Retry-After from the admission gate, 500 from the registrar).
    pub rejected: f64,
    /// 5xx whose Retry-After was honoured (the REGISTER is sent again after it).
    pub retried: f64,
    /// REGISTER retransmissions (Timer E: no answer within T1, 2×T1, …).
    pub retransmissions: f64,
    /// REGISTERs given up without an answer (Timer F, 32 s).
    pub timeouts: f64,
}

/// The generator's columns behind [`Second`]'s fields, in order.
const CSV_COLUMNS: [&str; 7] = [
    "t_s",
    "reg_sent",
    "reg_ok",
    "reg_5xx",
    "reg_retry_after",
    "retrans_other",
    "timeouts",
];

/// One storm.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Storm {
    /// New registrations per second asked of the generator.
    pub rate: f64,
    /// Users offered (each registers once).
    pub users: u64,
    /// `udp` or `tcp`.
    pub transport: String,
    /// `persistent` or `memory`.
    pub store: String,
    /// Seconds of arrivals (`users / rate`).
    pub arrivals_s: f64,
    /// Drills asked for.
    pub drills_planned: usize,
    /// The drills done.
    pub drills: Vec<Drill>,
    /// Users a 2xx answered (lines of the generator's `--acked` file).
    pub acknowledged: u64,
    /// Whether the store was checked user by user (persistent store).
    pub checked: bool,
    /// Acknowledged users without a binding in the store after the storm (absent when not
    /// checked).
    pub bindings_lost: Option<u64>,
    /// The first few of them.
    pub lost_examples: Vec<String>,
    /// Users never acknowledged whose binding is in the store all the same (absent when not
    /// checked): their REGISTER was committed, and then the server was killed before its 200
    /// left or the restarted server answered the retransmission otherwise.
    pub stored_not_acknowledged: Option<u64>,
    /// `holdline_store_bindings` when the generator had exited.
    pub bindings_at_end: Option<f64>,
    /// REGISTER transactions started (new users and re-sent after a Retry-After).
    pub sent: u64,
    /// 2xx received.
    pub ok: u64,
    /// 5xx received: 503 (with Retry-After) from the admission gate, or any 5xx from the
    /// registrar (a REGISTER it could not apply).
    pub rejected: u64,
    /// Final answers to REGISTERs by status code.
    pub by_code: BTreeMap<String, u64>,
    /// 5xx whose Retry-After was honoured.
    pub retried: u64,
    /// REGISTER retransmissions.
    pub retransmissions: u64,
    /// REGISTERs that timed out (those users gave up).
    pub timeouts: u64,
    /// Datagrams or segments the generator could not send.
    pub send_errors: u64,
    /// REGISTER latency (each transaction: sent to final answer) p50, ms.
    pub register_p50_ms: f64,
    /// p99, ms.
    pub register_p99_ms: f64,
    /// p99.9, ms.
    pub register_p999_ms: f64,
    /// Users registered (first REGISTER to first 2xx), from the generator's report.
    pub registered: u64,
    /// Time to get registered p50, ms.
    pub registered_p50_ms: f64,
    /// p99, ms.
    pub registered_p99_ms: f64,
    /// The longest, ms.
    pub registered_max_ms: f64,
    /// When the last user got its 2xx, s since the storm's start (the end of the
    /// generator's second in which the 2xx count reached the users); absent when some user
    /// never did.
    pub all_registered_at_s: Option<f64>,
    /// The persistent store's commits over the storm (every incarnation, up to its last
    /// sample; absent with the memory store).
    #[serde(default)]
    pub commits: Option<u64>,
    /// Those that took longer than 10 ms: each holds every REGISTER answered meanwhile.
    #[serde(default)]
    pub commits_over_10ms: Option<u64>,
    /// The longest commit, ms.
    #[serde(default)]
    pub commit_max_ms: Option<f64>,
    /// REGISTER 200s the servers held for their commit (every incarnation).
    #[serde(default)]
    pub held: Option<u64>,
    /// Those held longer than 10 ms (the server's side of the REGISTER latency's tail).
    #[serde(default)]
    pub held_over_10ms: Option<u64>,
    /// The highest RSS sampled, MiB.
    pub rss_max_mb: f64,
    /// The RSS when the generator exited, MiB.
    pub rss_end_mb: f64,
    /// CPU time of the servers over the storm (every incarnation), s.
    pub server_cpu_s: f64,
    /// Server CPU per 2xx, µs.
    pub cpu_us_per_register: f64,
    /// From the generator's start to its exit, s.
    pub window_s: f64,
    /// The server, every second.
    pub samples: Vec<Sample>,
    /// The generator's per-second counts.
    pub per_second: Vec<Second>,
}

/// Everything a run measured (`results.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Results {
    /// `storm`, the command, when, quick mode, the machine, the transport.
    #[serde(flatten)]
    pub run: RunHeader,
    /// `persistent` or `memory`.
    pub store: String,
    /// What a 200 OK promises: `commit` (persistent store, the server's default) or `none`.
    pub durability: String,
    /// The server's CPU quota, percent of a core (absent: none).
    pub cpu_quota_percent: Option<u64>,
    /// The seed.
    pub seed: u64,
    /// The storms, in the order they ran.
    pub storms: Vec<Storm>,
    /// Acknowledged registrations lost, all storms (absent when nothing was checked).
    pub bindings_lost: Option<u64>,
    /// Wall time of the run, s.
    pub elapsed_s: f64,
}

/// Entry point of `holdline lab storm ARGS`.
pub(crate) fn main(args: Vec<String>) -> ExitCode {
    lab_main(
        "storm",
        args,
        |a: &Args| a.out.clone(),
        run,
        |r: &Results| r.elapsed_s,
    )
}

/// What every storm of a run shares.
struct Ctx {
    exe: PathBuf,
    runs: PathBuf,
    transport: Transport,
    memory: bool,
    drain_s: f64,
    cgroup_procs: Option<PathBuf>,
}

/// What one storm is.
struct Spec {
    rate: f64,
    users: u64,
    drills: usize,
    seed: u64,
    tag: String,
}

/// Runs the storms (or redraws them), writes the results, and fails when an acknowledged
/// registration was lost.
pub(crate) fn run(args: &Args) -> Result<Results> {
    let results = if args.replot {
        crate::runner::read_results(&args.out)?
    } else {
        measure(args)?
    };
    write(&args.out, &results)?;
    match results.bindings_lost {
        Some(lost) if lost > 0 => Err(LabError::Process(format!(
            "{lost} acknowledged registration(s) lost after kill -9 (results in {})",
            args.out.display()
        ))),
        _ => Ok(results),
    }
}

/// Checks the options, runs every storm and gathers the results.
fn measure(args: &Args) -> Result<Results> {
    check_tools()?;
    let started = Instant::now();
    let exe = holdline_exe(args.exe.as_deref())?;
    let transport = if args.transport == "tcp" {
        Transport::Tcp
    } else {
        Transport::Udp
    };
    let memory = args.store == "memory";
    let users = args.users.unwrap_or(if args.quick {
        QUICK_USERS
    } else {
        DEFAULT_USERS
    });
    let drills = args.drills.unwrap_or(if args.quick {
        QUICK_DRILLS
    } else {
        DEFAULT_DRILLS
    });
    let drain_s = args.drain.unwrap_or(if args.quick {
        QUICK_DRAIN_S
    } else {
        DEFAULT_DRAIN_S
    });
    let mut rates = if args.rate.is_empty() {
        vec![if args.quick { QUICK_RATE } else { DEFAULT_RATE }]
    } else {
        args.rate.clone()
    };
    if args.quick {
        rates.truncate(1);
    }
    if let Some(bad) = rates.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
        return Err(LabError::Precondition(format!(
            "--rate {bad}: must be a positive number of REGISTERs per second"
        )));
    }
    if let Some(d) = args.duration
        && !(d.is_finite() && d > 0.0)
    {
        return Err(LabError::Precondition(format!(
            "--duration {d}: must be a positive number of seconds"
        )));
    }
    if !(drain_s.is_finite() && drain_s >= 0.0) {
        return Err(LabError::Precondition(format!(
            "--drain {drain_s}: must be a number of seconds, 0 or more"
        )));
    }
    if transport == Transport::Tcp && drills > 0 {
        return Err(LabError::Precondition(format!(
            "--transport tcp with {drills} drill(s): holdline load register does not reconnect \
             a TCP connection the server closed, so nothing would reach the restarted server; \
             use --drills 0 over TCP"
        )));
    }
    let runs = args.out.join("runs");
    std::fs::create_dir_all(&runs)
        .map_err(|e| LabError::io(format!("create {}", runs.display()), e))?;
    let group = match args.cpu_quota {
        Some(pct) => {
            let (period, quota) = feasible_quota(QUOTA_PERIOD_US, pct);
            Some(CpuGroup::create(
                &format!("holdline-storm-{}", std::process::id()),
                period,
                quota,
            )?)
        }
        None => None,
    };
    let ctx = Ctx {
        exe,
        runs,
        transport,
        memory,
        drain_s,
        cgroup_procs: group.as_ref().map(CpuGroup::procs_file),
    };
    eprintln!(
        "storm: {} storm(s) over {}, {} store, {drills} kill -9 drill(s) each ({} REGISTERs/s)",
        rates.len(),
        transport.name(),
        args.store,
        rates
            .iter()
            .map(|r| format!("{r}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut storms = Vec::with_capacity(rates.len());
    for (i, &rate) in rates.iter().enumerate() {
        let offered = match args.duration {
            Some(d) => users.min(((rate * d).round() as u64).max(1)),
            None => users,
        };
        let spec = Spec {
            rate,
            users: offered,
            drills,
            seed: args.seed.wrapping_add(i as u64),
            tag: format!("{rate}-{}-{}", transport.name(), args.store),
        };
        let s = with_fresh_ports("storm", &spec.tag, || run_storm(&ctx, &spec))?;
        eprintln!(
            "[{}/{} {:>4.0} s] {}: {} users at {rate:.0}/s: 200 {} / 5xx {} ({}) / retransmitted {} / timed out {}; REGISTER p50 {:.1} ms p99 {:.1} ms; {}; registered {}/{}, {}; RSS max {:.0} MB; {} drill(s); acknowledged {}, lost {}",
            i + 1,
            rates.len(),
            started.elapsed().as_secs_f64(),
            spec.tag,
            s.users,
            s.ok,
            s.rejected,
            s.by_code
                .iter()
                .map(|(code, n)| format!("{code}: {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            s.retransmissions,
            s.timeouts,
            s.register_p50_ms,
            s.register_p99_ms,
            match (s.commits, s.commits_over_10ms, s.commit_max_ms) {
                (Some(n), Some(slow), Some(max)) => format!(
                    "commits {n}, {slow} over 10 ms, longest {max:.1} ms; 200s held {}, {} over 10 ms",
                    s.held.unwrap_or(0),
                    s.held_over_10ms.unwrap_or(0)
                ),
                _ => "no commits (memory store)".to_string(),
            },
            s.registered,
            s.users,
            s.all_registered_at_s
                .map_or_else(|| "not all".to_string(), |t| format!("all after {t:.0} s")),
            s.rss_max_mb,
            s.drills.len(),
            s.acknowledged,
            s.bindings_lost.map_or_else(
                || "not checked (memory store)".to_string(),
                |n| n.to_string()
            ),
        );
        storms.push(s);
    }
    drop(group);
    let checked: Vec<u64> = storms.iter().filter_map(|s| s.bindings_lost).collect();
    Ok(Results {
        run: RunHeader::new("storm", started, args.quick, transport.name()),
        store: args.store.clone(),
        durability: if memory { "none" } else { "commit" }.into(),
        cpu_quota_percent: args.cpu_quota,
        seed: args.seed,
        storms,
        bindings_lost: (!checked.is_empty()).then(|| checked.iter().sum()),
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

/// The drill instants of a storm of `arrivals_s` seconds: one drawn uniformly in each of
/// `drills` equal slots, away from the slot's edges by [`SLOT_MARGIN`] of it; ascending.
pub(crate) fn drill_instants(arrivals_s: f64, drills: usize, seed: u64) -> Vec<f64> {
    let mut rng = holdline_base::Rng::seed_from_u64(seed);
    let slot = arrivals_s / drills.max(1) as f64;
    (0..drills)
        .map(|i| slot * (i as f64 + SLOT_MARGIN + (1.0 - 2.0 * SLOT_MARGIN) * rng.next_f64()))
        .collect()
}

/// A running `holdline serve` of a storm.
struct Server {
    proc: Proc,
    pid: u32,
}

/// The ports and store of a storm's server (the same for every restart).
struct ServerSpec<'a> {
    ctx: &'a Ctx,
    tag: &'a str,
    port: u16,
    metrics_port: u16,
    store_dir: &'a Path,
}

/// Starts `holdline serve` (incarnation `n`: 0 the first, i after drill i) and waits until it
/// is ready and its `/metrics` shows the store. Returns it, the bindings it loaded from disk
/// and its first `holdline_store_bindings`.
fn start_server(s: &ServerSpec<'_>, n: usize) -> Result<(Server, u64, f64)> {
    let t = s.ctx.transport.name();
    let store = if s.ctx.memory {
        "memory".to_string()
    } else {
        s.store_dir.display().to_string()
    };
    let log = s.ctx.runs.join(format!("{}-serve{n}.log", s.tag));
    let args = [
        "serve".to_string(),
        format!("--listen={t}:127.0.0.1:{}", s.port),
        format!("--domain={DOMAIN}"),
        "--workers=1".into(),
        format!("--store={store}"),
        format!("--metrics=127.0.0.1:{}", s.metrics_port),
    ];
    let mut proc = spawn_in(
        SERVER_CORE,
        s.ctx.cgroup_procs.as_deref(),
        &s.ctx.exe,
        &args,
        &log,
    )?;
    let pid = proc.0.id();
    let deadline = Instant::now() + START_LIMIT;
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.lines().any(|l| l.starts_with(READY_LINE)) {
            let metrics = scrape(s.metrics_port);
            if metrics.contains("holdline_store_bindings") {
                let first = metric(&metrics, "holdline_store_bindings");
                return Ok((Server { proc, pid }, loaded_from(&text), first));
            }
        }
        if let Ok(Some(status)) = proc.0.try_wait() {
            return Err(LabError::Process(format!(
                "holdline serve exited ({status}) before it was ready; log {}:\n{}",
                log.display(),
                tail(&log)
            )));
        }
        if Instant::now() >= deadline {
            return Err(LabError::Process(format!(
                "holdline serve not ready with /metrics on port {} after {} s; log {}",
                s.metrics_port,
                START_LIMIT.as_secs(),
                log.display()
            )));
        }
        // Bounded poll of the server's start (its log and its metrics endpoint).
        std::thread::sleep(POLL);
    }
}

/// The bindings `holdline serve` says it loaded from its persistent store (0 when its log has
/// no such line: the memory store).
pub(crate) fn loaded_from(log: &str) -> u64 {
    log.lines()
        .filter_map(|l| l.strip_prefix(STORE_LINE))
        .filter_map(|rest| rest.split_once(" ("))
        .find_map(|(_, figures)| figures.split_once(" bindings of "))
        .and_then(|(n, _)| n.trim().parse().ok())
        .unwrap_or(0)
}

/// The server's RSS (MiB), CPU (s), bindings and REGISTERs rejected at the gate right now.
fn sample(
    server: &Server,
    metrics_port: u16,
    t_s: f64,
    cpu_base_s: f64,
    incarnation: usize,
) -> Sample {
    let (cpu, mem) = procfs::tree_sample(server.pid);
    let text = scrape(metrics_port);
    let has = |name: &str| text.contains(name);
    let commits = histogram_figures(&text, "holdline_store_commit_seconds");
    let held = histogram_figures(&text, "holdline_register_commit_wait_seconds");
    Sample {
        t_s,
        rss_mb: mem.rss_kb as f64 / 1024.0,
        cpu_s: cpu_base_s + cpu.total_us() as f64 / 1e6,
        bindings: has("holdline_store_bindings").then(|| metric(&text, "holdline_store_bindings")),
        rejected: has("holdline_overload_rejected_total")
            .then(|| metric(&text, "holdline_overload_rejected_total")),
        incarnation,
        commits: commits.map(|h| h.0),
        commits_over_10ms: commits.map(|h| h.1),
        commit_max_ms: commits.map(|h| h.2),
        held: held.map(|h| h.0),
        held_over_10ms: held.map(|h| h.1),
    }
}

/// A wait histogram's figures in `/metrics` text (`holdline_base::WaitHistogram` as the
/// server renders it under `base`): how many, how many over 10 ms, the longest in ms.
/// `None` when the server does not export it.
fn histogram_figures(text: &str, base: &str) -> Option<(f64, f64, f64)> {
    let count = format!("{base}_count");
    text.contains(&count).then(|| {
        let n = metric(text, &count);
        let fast = metric_where(text, &format!("{base}_bucket"), &["le=\"0.010000\""]);
        (n, n - fast, metric(text, &format!("{base}_max")) * 1e3)
    })
}

/// The progress line of one sample.
fn progress(tag: &str, s: &Sample, before: Option<&Sample>, drills: (usize, usize)) {
    let opt = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |v| format!("{v:.0}"));
    let per_s = match (
        s.bindings,
        before.and_then(|b| b.bindings.map(|v| (b.t_s, v))),
    ) {
        (Some(now), Some((t, then))) if s.t_s > t => {
            format!("{:+.0}/s", (now - then) / (s.t_s - t))
        }
        _ => "-".to_string(),
    };
    eprintln!(
        "storm {tag}: t={:>6.1} s  bindings {:>9} ({per_s:>8})  rejected {:>8}  rss {:>7.1} MB  cpu {:>7.2} s  drills {}/{}",
        s.t_s,
        opt(s.bindings),
        opt(s.rejected),
        s.rss_mb,
        s.cpu_s,
        drills.0,
        drills.1
    );
}

/// Runs one storm: a fresh store, the server, the generator, the drills, the check.
fn run_storm(ctx: &Ctx, spec: &Spec) -> Result<Storm> {
    let tag = spec.tag.as_str();
    let store_dir = ctx.runs.join(format!("{tag}-store"));
    if store_dir.exists() {
        std::fs::remove_dir_all(&store_dir)
            .map_err(|e| LabError::io(format!("remove {}", store_dir.display()), e))?;
    }
    let (port, metrics_port) = (free_port()?, free_port()?);
    let ss = ServerSpec {
        ctx,
        tag,
        port,
        metrics_port,
        store_dir: &store_dir,
    };
    let (mut server, _, _) = start_server(&ss, 0)?;

    let arrivals_s = spec.users as f64 / spec.rate;
    let instants = drill_instants(arrivals_s, spec.drills, spec.seed);
    let limit = arrivals_s + ctx.drain_s + 10.0;
    let file = |what: &str| ctx.runs.join(format!("{tag}-register.{what}"));
    let (json, csv, acked, log) = (file("json"), file("csv"), file("acked"), file("log"));
    for f in [&json, &csv, &acked] {
        let _ = std::fs::remove_file(f);
    }
    let gen_args = vec![
        "load".to_string(),
        "register".into(),
        format!("--target=127.0.0.1:{port}"),
        format!("--transport={}", ctx.transport.name()),
        format!("--users=u{{0..{}}}@{DOMAIN}", spec.users - 1),
        format!("--rate={}", spec.rate),
        format!("--drain={}", ctx.drain_s),
        format!("--max-time={limit}"),
        format!("--seed={}", spec.seed),
        format!("--acked={}", acked.display()),
        format!("--csv={}", csv.display()),
        format!("--json={}", json.display()),
        "--progress=off".into(),
    ];
    let mut cpu_base_s = 0.0;
    let mut incarnation = 0;
    let mut samples = vec![sample(&server, metrics_port, 0.0, cpu_base_s, incarnation)];
    let t0 = Instant::now();
    let mut generator = spawn(GENERATOR_CORE, &ctx.exe, &gen_args, &log)?;
    progress(tag, &samples[0], None, (0, spec.drills));
    let deadline = t0 + Duration::from_secs_f64(limit + 10.0);
    let mut next = t0 + SAMPLE_EVERY;
    let mut drills = Vec::with_capacity(spec.drills);
    let exited = loop {
        match generator.0.try_wait() {
            Ok(Some(_)) | Err(_) => break true,
            Ok(None) => {}
        }
        if Instant::now() >= deadline {
            break false;
        }
        if let Ok(Some(status)) = server.proc.0.try_wait() {
            return Err(LabError::Process(format!(
                "{tag}: holdline serve exited ({status}) during the storm; log {}:\n{}",
                ctx.runs
                    .join(format!("{tag}-serve{incarnation}.log"))
                    .display(),
                tail(&ctx.runs.join(format!("{tag}-serve{incarnation}.log")))
            )));
        }
        let t = t0.elapsed().as_secs_f64();
        if let Some(&planned) = instants.get(drills.len())
            && t >= planned
        {
            let before = sample(&server, metrics_port, t, cpu_base_s, incarnation);
            let killed_at = Instant::now();
            let pid_killed = server.pid;
            // SIGKILL of the server this storm started (its PID: taskset execs it).
            server
                .proc
                .0
                .kill()
                .map_err(|e| LabError::io(format!("kill -9 {pid_killed}"), e))?;
            wait_bounded(&mut server.proc.0, Duration::from_secs(10));
            cpu_base_s = before.cpu_s;
            incarnation += 1;
            let (restarted, loaded, first) = start_server(&ss, incarnation)?;
            server = restarted;
            let d = Drill {
                n: drills.len() + 1,
                planned_at_s: planned,
                killed_at_s: killed_at.duration_since(t0).as_secs_f64(),
                pid_killed,
                bindings_before_kill: before.bindings,
                rss_before_kill_mb: before.rss_mb,
                pid_restarted: server.pid,
                loaded,
                bindings_after_restart: first,
                restart_s: killed_at.elapsed().as_secs_f64(),
            };
            eprintln!(
                "storm {tag}: drill {}/{} at t={:.2} s: kill -9 pid {} with {} bindings; back after {:.2} s as pid {}, {} bindings loaded from disk",
                d.n,
                spec.drills,
                d.killed_at_s,
                d.pid_killed,
                d.bindings_before_kill
                    .map_or_else(|| "?".to_string(), |b| format!("{b:.0}")),
                d.restart_s,
                d.pid_restarted,
                d.loaded
            );
            samples.push(before);
            drills.push(d);
            continue;
        }
        let now = Instant::now();
        if now >= next {
            let s = sample(&server, metrics_port, t, cpu_base_s, incarnation);
            progress(tag, &s, samples.last(), (drills.len(), spec.drills));
            samples.push(s);
            // The next tick on the 1 s grid (ticks missed by a restart are skipped).
            while next <= Instant::now() {
                next += SAMPLE_EVERY;
            }
        }
        // Bounded poll of the generator's exit, the drill instants and the sampling grid.
        std::thread::sleep(POLL);
    };
    let window_s = t0.elapsed().as_secs_f64();
    let last = sample(&server, metrics_port, window_s, cpu_base_s, incarnation);
    progress(tag, &last, samples.last(), (drills.len(), spec.drills));
    let bindings_at_end = last.bindings;
    samples.push(last);
    drop(generator);
    // The final stop is a SIGKILL too: whatever was acknowledged must be on disk already.
    drop(server);
    if !exited {
        return Err(LabError::Process(format!(
            "{tag}: the generator overran its time limit ({limit:.0} s); log {}:\n{}",
            log.display(),
            tail(&log)
        )));
    }
    if drills.len() < spec.drills {
        eprintln!(
            "storm {tag}: only {} of {} drills done (the generator exited first)",
            drills.len(),
            spec.drills
        );
    }
    let report = read_json(&json)?;
    let per_second = seconds(&csv)?;
    let acked_text = std::fs::read_to_string(&acked).map_err(|e| LabError::Report {
        path: acked.clone(),
        reason: e.to_string(),
    })?;
    let acked_users: Vec<&str> = acked_text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let check = if ctx.memory {
        eprintln!(
            "storm {tag}: memory store: no check of the acknowledged users (the memory store promises nothing; a kill loses every binding)"
        );
        None
    } else {
        let c = check(&store_dir.join(STORE_FILE), spec.users, &acked_users)?;
        eprintln!(
            "storm {tag}: {} acknowledged users looked up in the store: {} missing; {} users stored but never acknowledged",
            acked_users.len(),
            c.lost.len(),
            c.stored_not_acknowledged
        );
        Some(c)
    };
    Ok(summarize(
        spec,
        ctx,
        &report,
        Outcome {
            drills,
            samples,
            per_second,
            acknowledged: acked_users.len() as u64,
            check,
            bindings_at_end,
            window_s,
            arrivals_s,
        },
    ))
}

/// What the persistent store held after a storm.
struct Check {
    /// The acknowledged users without a binding.
    lost: Vec<String>,
    /// The users never acknowledged with a binding.
    stored_not_acknowledged: u64,
}

/// Looks up in the persistent store at `path` (opened once the server is gone) every user of
/// `acked` and every other user of the storm's `users` (`u0@DOMAIN` upwards).
fn check(path: &Path, users: u64, acked: &[&str]) -> Result<Check> {
    let db =
        holdline_store::PersistentStore::open(path, holdline_base::Instant::ZERO).map_err(|e| {
            LabError::Report {
                path: path.to_owned(),
                reason: format!("open the store after the storm: {e}"),
            }
        })?;
    let stored = |aor: &str| db.has_bindings(aor.as_bytes(), holdline_base::Instant::ZERO);
    let lost = acked
        .iter()
        .filter(|aor| !stored(aor))
        .map(|aor| (*aor).to_owned())
        .collect();
    let acked: HashSet<&str> = acked.iter().copied().collect();
    let stored_not_acknowledged = (0..users)
        .map(|i| format!("u{i}@{DOMAIN}"))
        .filter(|aor| !acked.contains(aor.as_str()) && stored(aor))
        .count() as u64;
    Ok(Check {
        lost,
        stored_not_acknowledged,
    })
}

/// The rows of the generator's per-second CSV ([`CSV_COLUMNS`]).
pub(crate) fn seconds(csv: &Path) -> Result<Vec<Second>> {
    let text = std::fs::read_to_string(csv).map_err(|e| LabError::Report {
        path: csv.to_owned(),
        reason: e.to_string(),
    })?;
    parse_seconds(&text).map_err(|reason| LabError::Report {
        path: csv.to_owned(),
        reason,
    })
}

/// [`seconds`] of a CSV text.
fn parse_seconds(text: &str) -> std::result::Result<Vec<Second>, String> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().ok_or("empty")?.split(',').collect();
    let mut cols = [0usize; CSV_COLUMNS.len()];
    for (slot, name) in cols.iter_mut().zip(CSV_COLUMNS) {
        *slot = header
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| format!("no column {name}"))?;
    }
    let mut rows = Vec::new();
    for (i, line) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(',').collect();
        let mut v = [0.0f64; CSV_COLUMNS.len()];
        for (slot, &c) in v.iter_mut().zip(&cols) {
            *slot = f
                .get(c)
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| format!("row {}: bad or missing field {c}", i + 2))?;
        }
        let [t_s, sent, ok, rejected, retried, retransmissions, timeouts] = v;
        rows.push(Second {
            t_s,
            sent,
            ok,
            rejected,
            retried,
            retransmissions,
            timeouts,
        });
    }
    Ok(rows)
}

/// When the 2xx count reached `users` (the end of that second), if it did.
pub(crate) fn all_registered_at(rows: &[Second], users: u64) -> Option<f64> {
    let mut total = 0.0;
    rows.iter().find_map(|r| {
        total += r.ok;
        (total >= users as f64).then_some(r.t_s)
    })
}

/// What a storm's run gathered besides the generator's report.
struct Outcome {
    drills: Vec<Drill>,
    samples: Vec<Sample>,
    per_second: Vec<Second>,
    acknowledged: u64,
    check: Option<Check>,
    bindings_at_end: Option<f64>,
    window_s: f64,
    arrivals_s: f64,
}

/// The storm's figures from the generator's report and what the lab gathered.
fn summarize(spec: &Spec, ctx: &Ctx, report: &Value, o: Outcome) -> Storm {
    let total = |k: &str| count(report, &["totals", k]);
    let reg = |k: &str| num(report, &["latency", "register", k]);
    let registered = |k: &str| num(report, &["latency", "registered", k]);
    let ok = total("reg_ok");
    let server_cpu_s = o.samples.last().map_or(0.0, |s| s.cpu_s);
    Storm {
        rate: spec.rate,
        users: spec.users,
        transport: ctx.transport.name().into(),
        store: if ctx.memory { "memory" } else { "persistent" }.into(),
        arrivals_s: o.arrivals_s,
        drills_planned: spec.drills,
        drills: o.drills,
        acknowledged: o.acknowledged,
        checked: o.check.is_some(),
        bindings_lost: o.check.as_ref().map(|c| c.lost.len() as u64),
        stored_not_acknowledged: o.check.as_ref().map(|c| c.stored_not_acknowledged),
        lost_examples: o
            .check
            .map(|c| c.lost)
            .unwrap_or_default()
            .into_iter()
            .take(LOST_EXAMPLES)
            .collect(),
        bindings_at_end: o.bindings_at_end,
        sent: total("reg_sent"),
        ok,
        rejected: total("reg_5xx"),
        by_code: report
            .get("register_by_code")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(code, n)| Some((code.clone(), n.as_u64()?)))
                    .collect()
            })
            .unwrap_or_default(),
        retried: total("reg_retry_after"),
        retransmissions: total("retrans_other"),
        timeouts: total("timeouts"),
        send_errors: total("send_errors"),
        register_p50_ms: reg("p50_ms"),
        register_p99_ms: reg("p99_ms"),
        register_p999_ms: reg("p999_ms"),
        registered: count(report, &["latency", "registered", "count"]),
        registered_p50_ms: registered("p50_ms"),
        registered_p99_ms: registered("p99_ms"),
        registered_max_ms: registered("max_ms"),
        all_registered_at_s: all_registered_at(&o.per_second, spec.users),
        commits: per_incarnation_total(&o.samples, |s| s.commits),
        commits_over_10ms: per_incarnation_total(&o.samples, |s| s.commits_over_10ms),
        commit_max_ms: o
            .samples
            .iter()
            .filter_map(|s| s.commit_max_ms)
            .reduce(f64::max),
        held: per_incarnation_total(&o.samples, |s| s.held),
        held_over_10ms: per_incarnation_total(&o.samples, |s| s.held_over_10ms),
        rss_max_mb: o.samples.iter().map(|s| s.rss_mb).fold(0.0, f64::max),
        rss_end_mb: o.samples.last().map_or(0.0, |s| s.rss_mb),
        server_cpu_s,
        cpu_us_per_register: if ok > 0 {
            server_cpu_s * 1e6 / ok as f64
        } else {
            0.0
        },
        window_s: o.window_s,
        samples: o.samples,
        per_second: o.per_second,
    }
}

/// A counter of the servers summed over incarnations (each restart counts from zero): the
/// last value each incarnation's samples show. `None` when no sample has it.
fn per_incarnation_total(samples: &[Sample], f: impl Fn(&Sample) -> Option<f64>) -> Option<u64> {
    let mut last: BTreeMap<usize, f64> = BTreeMap::new();
    for s in samples {
        if let Some(v) = f(s) {
            last.insert(s.incarnation, v);
        }
    }
    (!last.is_empty()).then(|| last.values().map(|v| v.round() as u64).sum())
}

/// The sample closest to `t_s` within half a second.
fn sample_at(samples: &[Sample], t_s: f64) -> Option<&Sample> {
    samples
        .iter()
        .filter(|s| (s.t_s - t_s).abs() <= 0.5)
        .min_by(|a, b| (a.t_s - t_s).abs().total_cmp(&(b.t_s - t_s).abs()))
}

/// `storm.csv`: one row per storm per second of the generator, with the server's sample of
/// that second (empty where there is none).
fn storm_csv(r: &Results) -> String {
    let mut csv = String::from(
        "rate,t_s,sent,ok_200,rejected_5xx,retried,retransmissions,timeouts,rss_mb,bindings,gate_rejected\n",
    );
    let opt = |x: Option<f64>| x.map_or_else(String::new, |v| format!("{v}"));
    for s in &r.storms {
        for p in &s.per_second {
            let at = sample_at(&s.samples, p.t_s);
            let _ = writeln!(
                csv,
                "{},{:.3},{},{},{},{},{},{},{},{},{}",
                s.rate,
                p.t_s,
                p.sent,
                p.ok,
                p.rejected,
                p.retried,
                p.retransmissions,
                p.timeouts,
                at.map_or_else(String::new, |a| format!("{:.3}", a.rss_mb)),
                opt(at.and_then(|a| a.bindings)),
                opt(at.and_then(|a| a.rejected)),
            );
        }
    }
    csv
}

/// `drills.csv`: one row per drill.
fn drills_csv(r: &Results) -> String {
    let mut csv = String::from(
        "rate,drill,planned_at_s,killed_at_s,pid_killed,bindings_before_kill,rss_before_kill_mb,restart_s,loaded,bindings_after_restart,pid_restarted\n",
    );
    for s in &r.storms {
        for d in &s.drills {
            let _ = writeln!(
                csv,
                "{},{},{:.3},{:.3},{},{},{:.3},{:.3},{},{},{}",
                s.rate,
                d.n,
                d.planned_at_s,
                d.killed_at_s,
                d.pid_killed,
                d.bindings_before_kill
                    .map_or_else(String::new, |b| format!("{b}")),
                d.rss_before_kill_mb,
                d.restart_s,
                d.loaded,
                d.bindings_after_restart,
                d.pid_restarted
            );
        }
    }
    csv
}

/// The kill instants as one series of spikes from 0 to `height`, `width` seconds wide at the
/// base (a line straight up and back down is not drawn by the PNG backend).
pub(crate) fn kill_marks(drills: &[Drill], height: f64, width: f64) -> Series {
    let points = drills
        .iter()
        .flat_map(|d| {
            let t = d.killed_at_s;
            [(t, 0.0), (t + width / 2.0, height), (t + width, 0.0)]
        })
        .collect();
    ("kill -9 and restart".to_string(), points)
}

/// Writes `results.json`, `storm.csv`, `drills.csv` and the plots.
fn write(out: &Path, r: &Results) -> Result<()> {
    std::fs::create_dir_all(out)
        .map_err(|e| LabError::io(format!("create {}", out.display()), e))?;
    let json = serde_json::to_string_pretty(r).map_err(|e| LabError::Report {
        path: out.join("results.json"),
        reason: e.to_string(),
    })?;
    for (name, text) in [
        ("results.json", json),
        ("storm.csv", storm_csv(r)),
        ("drills.csv", drills_csv(r)),
    ] {
        std::fs::write(out.join(name), text)
            .map_err(|e| LabError::io(format!("write {name}"), e))?;
    }
    let several = r.storms.len() > 1;
    for s in &r.storms {
        // Spikes about 3 pixels wide at the base.
        let spike = s.window_s.max(1.0) * KILL_MARK_WIDTH;
        let suffix = if several {
            format!("-{}", s.rate)
        } else {
            String::new()
        };
        let what = format!(
            "{} users at {:.0}/s over {}, {} store, one worker{}",
            s.users,
            s.rate,
            s.transport,
            s.store,
            r.cpu_quota_percent
                .map_or_else(String::new, |q| format!(", {q}% of a core"))
        );
        // Series names pick their colours in plot.rs: these give green, orange, light blue
        // and blue.
        let ok: Vec<(f64, f64)> = s.per_second.iter().map(|p| (p.t_s, p.ok)).collect();
        let rejected: Vec<(f64, f64)> = s.per_second.iter().map(|p| (p.t_s, p.rejected)).collect();
        let retrans: Vec<(f64, f64)> = s
            .per_second
            .iter()
            .map(|p| (p.t_s, p.retransmissions))
            .collect();
        let top = ok
            .iter()
            .chain(&rejected)
            .chain(&retrans)
            .map(|p| p.1)
            .fold(1.0, f64::max);
        plot::chart(
            out,
            &format!("storm{suffix}"),
            &format!("REGISTER answers per second ({what})"),
            "seconds since the storm started",
            "per second",
            &[
                ("200 (registered) per second".to_string(), ok),
                ("500/503 per second".to_string(), rejected),
                ("REGISTER retransmissions per second".to_string(), retrans),
                kill_marks(&s.drills, top, spike),
            ],
        )?;
        let rss: Vec<(f64, f64)> = s.samples.iter().map(|p| (p.t_s, p.rss_mb)).collect();
        let top = rss.iter().map(|p| p.1).fold(1.0, f64::max);
        plot::chart(
            out,
            &format!("rss{suffix}"),
            &format!("Server RSS ({what})"),
            "seconds since the storm started",
            "RSS, MiB",
            &[
                ("1 server: RSS, MiB".to_string(), rss),
                kill_marks(&s.drills, top, spike),
            ],
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_is_summed_over_the_restarted_servers() {
        let at = |incarnation, commits: Option<f64>| Sample {
            t_s: 0.0,
            rss_mb: 0.0,
            cpu_s: 0.0,
            bindings: None,
            rejected: None,
            incarnation,
            commits,
            commits_over_10ms: None,
            commit_max_ms: None,
            held: None,
            held_over_10ms: None,
        };
        let samples = [
            at(0, Some(10.0)),
            at(0, Some(20.0)),
            at(1, None),
            at(1, Some(5.0)),
            at(1, Some(7.0)),
        ];
        assert_eq!(per_incarnation_total(&samples, |s| s.commits), Some(27));
        assert_eq!(
            per_incarnation_total(&samples, |s| s.commits_over_10ms),
            None
        );
    }

    #[test]
    fn drill_instants_are_seeded_one_per_slot_and_ascending() {
        let a = drill_instants(50.0, 10, 7);
        assert_eq!(a, drill_instants(50.0, 10, 7), "same seed, same instants");
        assert_ne!(a, drill_instants(50.0, 10, 8));
        assert_eq!(a.len(), 10);
        for (i, t) in a.iter().enumerate() {
            let lo = 5.0 * i as f64 + 0.5;
            let hi = 5.0 * (i + 1) as f64 - 0.5;
            assert!(
                (lo..=hi).contains(t),
                "drill {i} at {t} outside [{lo}, {hi}]"
            );
        }
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        assert!(drill_instants(5.0, 0, 1).is_empty());
    }

    #[test]
    fn the_loaded_count_comes_from_the_servers_start_line() {
        let log = "holdline: data directory /tmp/x\n\
                   holdline: store /tmp/x/locations.redb (12345 bindings of 12000 addresses-of-record loaded, 0 expired dropped)\n\
                   holdline: ready (SIGINT/SIGTERM to stop, SIGHUP to reload)\n";
        assert_eq!(loaded_from(log), 12_345);
        assert_eq!(
            loaded_from("holdline: store in memory (bindings are lost at exit)\n"),
            0
        );
    }

    #[test]
    fn the_store_file_is_the_servers() {
        assert_eq!(STORE_FILE, holdline_server::STORE_FILE);
    }

    #[test]
    fn per_second_rows_and_the_time_everyone_was_registered() {
        let text = "t_s,offered,reg_sent,reg_ok,reg_5xx,reg_retry_after,retrans_other,timeouts,active\n\
                    1.000,0,100,90,10,10,3,0,0\n\
                    2.000,0,110,100,0,0,0,0,0\n\
                    3.000,0,10,10,0,0,0,1,0\n";
        let rows = parse_seconds(text).expect("rows");
        assert_eq!(rows.len(), 3);
        assert_eq!(
            rows[0],
            Second {
                t_s: 1.0,
                sent: 100.0,
                ok: 90.0,
                rejected: 10.0,
                retried: 10.0,
                retransmissions: 3.0,
                timeouts: 0.0,
            }
        );
        assert_eq!(all_registered_at(&rows, 190), Some(2.0));
        assert_eq!(all_registered_at(&rows, 200), Some(3.0));
        assert_eq!(all_registered_at(&rows, 201), None);
        assert!(parse_seconds("t_s,reg_ok\n1,2\n").is_err());
        assert!(parse_seconds(&text.replace("1.000,0,100", "1.000,0,x")).is_err());
    }

    #[test]
    fn kill_marks_are_spikes_at_the_kills() {
        let d = |t: f64| Drill {
            n: 1,
            planned_at_s: t,
            killed_at_s: t,
            pid_killed: 1,
            bindings_before_kill: None,
            rss_before_kill_mb: 0.0,
            pid_restarted: 2,
            loaded: 0,
            bindings_after_restart: 0.0,
            restart_s: 0.1,
        };
        let (_, p) = kill_marks(&[d(1.5), d(4.0)], 10.0, 0.5);
        assert_eq!(
            p,
            vec![
                (1.5, 0.0),
                (1.75, 10.0),
                (2.0, 0.0),
                (4.0, 0.0),
                (4.25, 10.0),
                (4.5, 0.0)
            ]
        );
    }
}
