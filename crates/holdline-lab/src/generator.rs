//! One measured step: `holdline load` (UAS and UAC, or REGISTER) pinned to the generator
//! core against a running server, with the server's CPU time (user and system) over the load
//! window and, for a sustained step, the server's memory and CPU sampled every second.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use crate::error::{LabError, Result};
use crate::procfs::{self, CpuSplit};
use crate::server::{self, DOMAIN, Running, Transport};
use crate::soak::{UacSecond, uac_rows};

/// Core the generator processes run on.
pub(crate) const GENERATOR_CORE: &str = "0";
/// PDD (or REGISTER latency) p99 above this makes a step unclean.
pub(crate) const P99_LIMIT_MS: f64 = 100.0;
/// A server core busier than this fraction counts as saturated.
pub(crate) const SATURATED: f64 = 0.85;
/// Sampling period of a sustained step.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// A sustained step prints a progress line every this many samples.
const PROGRESS_EVERY_SAMPLES: usize = 10;

/// What a step offers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Load {
    /// Calls INVITE/180/200/ACK/BYE/200 with zero holding time.
    Calls(Transport),
    /// REGISTERs of distinct users of the served domain, over UDP.
    Register,
}

impl Load {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Calls(Transport::Udp) => "calls-udp",
            Self::Calls(Transport::Tcp) => "calls-tcp",
            Self::Calls(Transport::Tls) => "calls-tls",
            Self::Register => "register-udp",
        }
    }
}

/// The measured outcome of one step (one row of `steps.csv`).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Step {
    /// Part of the bench: capacity, sustain, cost, quota-capacity, overload.
    pub section: String,
    /// Which run of the measurement (`--repeat`), from 0.
    pub run: usize,
    /// `cpu.cfs_period_us` of the CPU quota the server ran under (quota steps only).
    pub cfs_period_us: Option<u64>,
    /// Server configuration name.
    pub server: String,
    /// calls-udp, calls-tcp or register-udp.
    pub load: String,
    /// Offered rate asked of the generator (per second).
    pub rate: f64,
    /// Rate the generator actually offered (per second).
    pub offered_rate: f64,
    /// Seconds of arrivals.
    pub duration_s: f64,
    /// Calls or REGISTERs sent.
    pub attempted: u64,
    /// Calls that got their 200 OK (and were ACKed), or REGISTERs answered 200.
    pub ok: u64,
    /// Calls or REGISTERs that ended without success (incl. cut by the drain limit).
    pub failed: u64,
    /// Successful calls (200 within the goodput window, received while calls were offered:
    /// a backlog drained after the load phase is left out) or REGISTERs per second of load.
    pub goodput: f64,
    /// PDD (calls) or REGISTER latency p50, ms.
    pub p50_ms: f64,
    /// PDD (calls) or REGISTER latency p99, ms.
    pub p99_ms: f64,
    /// PDD (calls) or REGISTER latency p99.9, ms.
    pub p999_ms: f64,
    /// 200 OK retransmissions sent by the UAS.
    pub retrans_200: u64,
    /// INVITE (or REGISTER) retransmissions sent by the UAC.
    pub retrans_invite: u64,
    /// 503 responses received.
    pub r503: u64,
    /// Server CPU time over the load window, µs (all its processes): user + system.
    pub server_cpu_us: u64,
    /// Its user part (utime), µs.
    pub server_user_us: u64,
    /// Its system part (stime), µs.
    pub server_sys_us: u64,
    /// Load window, s (first arrival to the generator's exit).
    pub window_s: f64,
    /// Server CPU time over the window (1.0 = one core): its processes' user + system time.
    pub server_busy: f64,
    /// The server core's busy share over the window (`/proc/stat`): the server's processes
    /// and everything else that ran on that core, softirq work included (on loopback, the
    /// delivery of what the server sends: 10-15% of the core at holdline's capacity; the
    /// kernel charges the part that interrupts the server to its system time, not the part
    /// run by `ksoftirqd` or while the core idled). What says whether the core was saturated.
    pub core_busy: f64,
    /// The server core's softirq and irq time over the window, µs.
    pub core_interrupt_us: u64,
    /// Server CPU per successful call or REGISTER, µs.
    pub cpu_us_per_op: f64,
    /// No failure, p99 within the limit, and the generator kept its schedule.
    pub clean: bool,
}

impl Step {
    /// How busy the server's core was: its busy share from `/proc/stat` (softirq work
    /// included), or the server's own CPU time where that could not be read.
    pub(crate) fn saturation(&self) -> f64 {
        self.core_busy.max(self.server_busy)
    }
}

/// Starts `exe ARGS` in the background pinned to `core` (`taskset`), stderr to `log`.
pub(crate) fn spawn_pinned(core: &str, exe: &Path, args: &[String], log: &Path) -> Result<Child> {
    spawn_pinned_in(core, None, exe, args, log)
}

/// [`spawn_pinned`], and with `cgroup_procs` born inside that CPU group: a shell writes its
/// own PID into the group's `cgroup.procs`, then execs `taskset`, which execs `exe`, so the
/// child's PID is `exe`'s and everything it forks stays in the group.
pub(crate) fn spawn_pinned_in(
    core: &str,
    cgroup_procs: Option<&Path>,
    exe: &Path,
    args: &[String],
    log: &Path,
) -> Result<Child> {
    let logf =
        File::create(log).map_err(|e| LabError::io(format!("create {}", log.display()), e))?;
    let mut cmd = match cgroup_procs {
        Some(procs) => {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(r#"echo $$ > "$0" || exit 97; exec "$@""#)
                .arg(procs)
                .arg("taskset");
            c
        }
        None => Command::new("taskset"),
    };
    cmd.args(["-c", core])
        .arg(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(logf)
        .spawn()
        .map_err(|e| LabError::io(format!("start {} {}", exe.display(), args.join(" ")), e))
}

/// Starts a background `holdline load` process pinned to the generator core.
fn spawn_load(exe: &Path, args: &[String], log: &Path) -> Result<Child> {
    let mut all = vec!["load".to_string()];
    all.extend_from_slice(args);
    spawn_pinned(GENERATOR_CORE, exe, &all, log)
}

/// Waits for a child at most `limit`, then kills it. True if it exited by itself.
pub(crate) fn wait_bounded(child: &mut Child, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            // Bounded wait for the generator's exit.
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Sends SIGTERM to a child we started (the UAS writes its report on SIGTERM).
pub(crate) fn terminate(child: &Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) on the PID of a child we hold and have not reaped.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
}

/// A generator's JSON report.
pub(crate) fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| LabError::Report {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    serde_json::from_str(&text).map_err(|e| LabError::Report {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

/// The number at `path` in a report (0 when absent).
pub(crate) fn num(v: &Value, path: &[&str]) -> f64 {
    let mut cur = v;
    for p in path {
        match cur.get(p) {
            Some(x) => cur = x,
            None => return 0.0,
        }
    }
    cur.as_f64().unwrap_or(0.0)
}

/// The count at `path` in a report (0 when absent or not positive).
pub(crate) fn count(v: &Value, path: &[&str]) -> u64 {
    let x = num(v, path);
    if x.is_finite() && x > 0.0 {
        x as u64
    } else {
        0
    }
}

/// Parameters of one step.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub load: Load,
    pub rate: f64,
    pub duration_s: f64,
    /// Longest wait for calls in progress after the last arrival.
    pub drain_s: f64,
    /// Sample the server's memory and CPU every second and keep the UAC's per-second counts
    /// (a sustained step).
    pub sample: bool,
}

/// One sample of the server's process tree during a sustained step.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ServerSample {
    /// Seconds since the UAC started (0: right before).
    pub t_s: f64,
    /// `VmRSS` summed over the server's processes, MiB.
    pub rss_mb: f64,
    /// `Pss` summed over the server's processes, MiB (shared pages counted once).
    pub pss_mb: Option<f64>,
    /// Server CPU time since the first sample, s (user + system).
    pub cpu_s: f64,
    /// Its user part, s.
    pub user_s: f64,
    /// Its system part, s.
    pub sys_s: f64,
    /// Processes in the server's tree.
    pub processes: usize,
}

impl ServerSample {
    fn take(pid: u32, t_s: f64, cpu_start: CpuSplit) -> (Self, CpuSplit) {
        let (cpu, mem) = procfs::tree_sample(pid);
        let d = cpu.since(cpu_start);
        let sample = Self {
            t_s,
            rss_mb: mem.rss_kb as f64 / 1024.0,
            pss_mb: mem.pss_kb.map(|k| k as f64 / 1024.0),
            cpu_s: d.total_us() as f64 / 1e6,
            user_s: d.user_us as f64 / 1e6,
            sys_s: d.sys_us as f64 / 1e6,
            processes: mem.processes,
        };
        (sample, cpu)
    }
}

/// A step's outcome with, for a sustained step, its samples.
#[derive(Debug, Clone)]
pub(crate) struct StepRun {
    /// The step's figures.
    pub step: Step,
    /// The server sampled every second (empty unless [`Plan::sample`]).
    pub samples: Vec<ServerSample>,
    /// The UAC's per-second counts (empty unless [`Plan::sample`] and a call load).
    pub per_second: Vec<UacSecond>,
}

/// Runs one step against a server that listens on `server_port` and forwards calls to
/// `uas_port`. Reads the server's CPU time right before the load and right after the
/// generator exits (before the server is stopped); with [`Plan::sample`] also every second
/// in between, with its memory.
pub(crate) fn run_step(
    exe: &Path,
    work: &Path,
    tag: &str,
    server: &Running,
    server_port: u16,
    uas_port: u16,
    plan: Plan,
) -> Result<StepRun> {
    let uac_json = work.join(format!("{tag}-uac.json"));
    let uas_json = work.join(format!("{tag}-uas.json"));
    let uac_csv = work.join(format!("{tag}-uac.csv"));
    let _ = std::fs::remove_file(&uac_json);
    let _ = std::fs::remove_file(&uas_json);
    let _ = std::fs::remove_file(&uac_csv);
    let limit = plan.duration_s + plan.drain_s + 3.0;
    let common = |json: &PathBuf| -> Vec<String> {
        vec![
            "--progress".into(),
            "off".into(),
            "--json".into(),
            json.display().to_string(),
            "--max-time".into(),
            format!("{limit}"),
        ]
    };
    let mut uas = None;
    let args: Vec<String> = match plan.load {
        Load::Calls(t) => {
            let mut a = vec![
                "uas".into(),
                "--listen".into(),
                format!("127.0.0.1:{uas_port}"),
                "--transport".into(),
                t.name().into(),
            ];
            a.extend(common(&uas_json));
            let log = work.join(format!("{tag}-uas.log"));
            let mut child = spawn_load(exe, &a, &log)?;
            let bound =
                server::wait_bound(&mut child, uas_port, Some(t), "holdline load uas", &log);
            uas = Some(child);
            bound?;
            let mut a = vec![
                "uac".into(),
                "--target".into(),
                format!("127.0.0.1:{server_port}"),
                "--transport".into(),
                t.name().into(),
                "--arrivals".into(),
                "constant".into(),
            ];
            a.extend(common(&uac_json));
            a
        }
        Load::Register => {
            let users = (plan.rate * plan.duration_s).ceil() as u64 + 10;
            let mut a = vec![
                "register".into(),
                "--target".into(),
                format!("127.0.0.1:{server_port}"),
                "--users".into(),
                format!("user{{0..{}}}@{DOMAIN}", users - 1),
            ];
            a.extend(common(&uac_json));
            a
        }
    };
    let mut args = args;
    args.extend([
        "--rate".into(),
        format!("{}", plan.rate),
        "--duration".into(),
        format!("{}", plan.duration_s),
        "--drain".into(),
        format!("{}", plan.drain_s),
    ]);
    if plan.sample {
        args.extend(["--csv".into(), uac_csv.display().to_string()]);
    }
    let pid = server.pid();
    let mut samples = Vec::new();
    let cpu0 = if plan.sample {
        // The first sample's CPU counters start the series: its own CPU figures are 0.
        let (mut first, cpu) = ServerSample::take(pid, 0.0, CpuSplit::default());
        (first.cpu_s, first.user_s, first.sys_s) = (0.0, 0.0, 0.0);
        samples.push(first);
        cpu
    } else {
        server.cpu_split()
    };
    let core0 = procfs::core_times(server::SERVER_CORE);
    let t0 = Instant::now();
    let mut uac = spawn_load(exe, &args, &work.join(format!("{tag}-uac.log")))?;
    let exited = if plan.sample {
        wait_sampling(&mut uac, limit + 5.0, t0, tag, pid, cpu0, &mut samples)
    } else {
        wait_bounded(&mut uac, Duration::from_secs_f64(limit + 5.0))
    };
    let window_s = t0.elapsed().as_secs_f64();
    let core1 = procfs::core_times(server::SERVER_CORE);
    let cpu1 = if plan.sample {
        let (last, cpu) = ServerSample::take(pid, window_s, cpu0);
        samples.push(last);
        cpu
    } else {
        server.cpu_split()
    };
    let mut uas_report = Value::Null;
    if let Some(mut u) = uas {
        terminate(&u);
        wait_bounded(&mut u, Duration::from_secs(5));
        uas_report = read_json(&uas_json).unwrap_or(Value::Null);
    }
    if !exited {
        return Err(LabError::Process(format!(
            "{tag}: the generator overran its time limit"
        )));
    }
    let uac_report = read_json(&uac_json)?;
    let per_second = match plan.load {
        Load::Calls(_) if plan.sample => uac_rows(&uac_csv)?,
        _ => Vec::new(),
    };
    let cpu = cpu1.since(cpu0);
    let server_cpu_us = cpu.total_us();
    let load_s = num(&uac_report, &["load_duration_s"]).max(1e-3);
    let (attempted, ok, failed, goodput, p50, p99, p999, retrans_req, offered) = match plan.load {
        Load::Calls(_) => {
            let attempted = count(&uac_report, &["totals", "attempted"]);
            (
                attempted,
                // A call counts once its 200 OK arrived and was ACKed, whatever the order
                // of its 180 (a multi-process server may reorder them).
                count(&uac_report, &["totals", "calls_ok"]),
                count(&uac_report, &["totals", "calls_failed"]),
                // Answers a backlog drains after the arrivals stopped are not the server's
                // sustained goodput (a 5 s step of an overloaded server with seconds of
                // queue doubled it): only those that came during the load phase count.
                num(&uac_report, &["goodput_in_load_cps"]),
                num(&uac_report, &["pdd_p50_ms"]),
                num(&uac_report, &["pdd_p99_ms"]),
                num(&uac_report, &["latency", "pdd", "p999_ms"]),
                count(&uac_report, &["totals", "retrans_invite"]),
                num(&uac_report, &["offered_cps"]),
            )
        }
        Load::Register => {
            let sent = count(&uac_report, &["totals", "reg_sent"]);
            let ok = count(&uac_report, &["totals", "reg_ok"]);
            (
                sent,
                ok,
                sent.saturating_sub(ok),
                num(&uac_report, &["register_rps"]),
                num(&uac_report, &["latency", "register", "p50_ms"]),
                num(&uac_report, &["latency", "register", "p99_ms"]),
                num(&uac_report, &["latency", "register", "p999_ms"]),
                count(&uac_report, &["totals", "retrans_other"]),
                sent as f64 / load_s,
            )
        }
    };
    let planned = plan.rate * plan.duration_s;
    let kept_schedule = (attempted as f64) >= 0.97 * planned && offered >= 0.95 * plan.rate;
    let clean =
        attempted > 0 && failed == 0 && ok == attempted && p99 <= P99_LIMIT_MS && kept_schedule;
    let step = Step {
        section: String::new(),
        run: 0,
        cfs_period_us: None,
        server: String::new(),
        load: plan.load.name().into(),
        rate: plan.rate,
        offered_rate: offered,
        duration_s: plan.duration_s,
        attempted,
        ok,
        failed,
        goodput,
        p50_ms: p50,
        p99_ms: p99,
        p999_ms: p999,
        retrans_200: count(&uas_report, &["totals", "retrans_200"]),
        retrans_invite: retrans_req,
        r503: count(&uac_report, &["totals", "r503"]),
        server_cpu_us,
        server_user_us: cpu.user_us,
        server_sys_us: cpu.sys_us,
        window_s,
        server_busy: server_cpu_us as f64 / 1e6 / window_s.max(1e-3),
        core_busy: match (core0, core1) {
            (Some(a), Some(b)) => b.busy_since(a),
            _ => 0.0,
        },
        core_interrupt_us: match (core0, core1) {
            (Some(a), Some(b)) => b.interrupt_us.saturating_sub(a.interrupt_us),
            _ => 0,
        },
        cpu_us_per_op: if ok > 0 {
            server_cpu_us as f64 / ok as f64
        } else {
            0.0
        },
        clean,
    };
    Ok(StepRun {
        step,
        samples,
        per_second,
    })
}

/// Waits for the UAC at most `limit_s` seconds (then kills it), sampling the server `pid`
/// every second into `samples` and printing a progress line every ten. True if the UAC
/// exited by itself.
fn wait_sampling(
    uac: &mut Child,
    limit_s: f64,
    t0: Instant,
    tag: &str,
    pid: u32,
    cpu0: CpuSplit,
    samples: &mut Vec<ServerSample>,
) -> bool {
    let deadline = t0 + Duration::from_secs_f64(limit_s);
    let mut next = t0 + SAMPLE_EVERY;
    loop {
        match uac.try_wait() {
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) => {}
        }
        let now = Instant::now();
        if now >= deadline {
            let _ = uac.kill();
            let _ = uac.wait();
            return false;
        }
        if now >= next {
            let t_s = t0.elapsed().as_secs_f64();
            let (s, _) = ServerSample::take(pid, t_s, cpu0);
            samples.push(s);
            if samples.len() % PROGRESS_EVERY_SAMPLES == 1 {
                let prev_cpu = samples
                    .len()
                    .checked_sub(PROGRESS_EVERY_SAMPLES + 1)
                    .and_then(|i| samples.get(i))
                    .map_or((0.0, 0.0), |p| (p.t_s, p.cpu_s));
                if let Some(s) = samples.last() {
                    let busy = (s.cpu_s - prev_cpu.1) / (s.t_s - prev_cpu.0).max(1e-3);
                    eprintln!(
                        "bench: {tag}: t={:>4.0} s  RSS {:>7.1} MB  PSS {}  server core {:>3.0}% over the last {:.0} s",
                        s.t_s,
                        s.rss_mb,
                        s.pss_mb
                            .map_or_else(|| "n/a".to_string(), |p| format!("{p:>7.1} MB")),
                        busy * 100.0,
                        s.t_s - prev_cpu.0
                    );
                }
            }
            // The next tick on the 1 s grid (ticks missed by a slow read are skipped).
            while next <= Instant::now() {
                next += SAMPLE_EVERY;
            }
        }
        // Bounded poll of the UAC's exit between samples.
        std::thread::sleep(Duration::from_millis(5));
    }
}
