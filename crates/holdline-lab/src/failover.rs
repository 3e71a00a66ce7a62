//! `holdline lab failover`: seed 001's failure drills on real processes. A two-stage service
//! carries calls and re-REGISTERs while one of its parts is killed with SIGKILL; the lab
//! counts what was lost and how long the service took to route around the dead part.
//!
//! The service, all on loopback, fresh for every drill:
//!
//! - **Redis**: a primary, two replicas and three Sentinels (quorum 2,
//!   `down-after-milliseconds` 300): the location store of the second-stage cluster.
//! - **Second stage**: one cluster of two servers, P_a and P_b, registrars of `example.com`
//!   on that store (`redis+sentinel://…?namespace=lab&wait_replicas=1`: a REGISTER's 200
//!   waits until the primary executed its write and a replica acknowledged it), each
//!   record-routing with the cluster's name `c1.example.com` so that calls in progress
//!   survive the death of the one that set them up.
//! - **First stage**: two servers, F_1 and F_2, sharing the users of `example.com` over P_a
//!   and P_b by rendezvous hashing (`[[hash_routes]]`; a user's second choice is its
//!   failover), covering `c1.example.com` the same way, probing both every 200 ms (down
//!   after 2 failures), record-routing with the first stage's own name `edge.example.com`
//!   (both carry it) so that a dialog's BYE can go through either.
//! - **Phones**: `holdline load uas` registers `--users` callees through F_1 and answers
//!   their calls; `holdline load register` keeps `--reg-users` other users registered,
//!   re-REGISTERing every `--refresh` seconds, each user with F_1 or F_2 (`--spread`) and
//!   failing over to the other after 0.5 s of silence or a 503; `holdline load uac` places
//!   `--rate` calls/s, each held `--hold` s, each to F_1 or F_2 at random, its INVITE and
//!   BYE failing over to the other first stage after 0.5 s of silence.
//!
//! The drills (`--drills`): `second-stage` kills P_a, `first-stage` kills F_1, `redis` kills
//! the Redis primary (Sentinel promotes a replica), each `--kill-at` seconds into
//! `--seconds` of load. Measured per drill: calls placed, failed, and the share failed
//! among the calls in progress at the kill or placed within 5 s after it (issue 18: at
//! most 1%); REGISTERs sent, answered 2xx, failed over, and registrations that never got a
//! 2xx; bindings lost (every user whose REGISTER was acknowledged must be in the store and
//! in the surviving second stage's memory: must be 0); the time until the service routed
//! around the dead part (the first stages' probing took P_a down; Sentinel named a new
//! primary) and the first whole second after the kill from which every call placed is
//! answered (issue 18: within 2 s).
//!
//! Output in `--out DIR`: `results.json`, `timeline.csv` (per drill and second: calls
//! placed, answered, failed, failovers; REGISTERs sent, 2xx, failed, failovers),
//! `summary.md`, `timeline-DRILL.svg/png` (calls and REGISTERs per second, the kill
//! marked), and every process's log and report under `runs/`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use serde::Serialize;
use serde_json::Value;

use crate::error::{LabError, Result};
use crate::generator::{GENERATOR_CORE, count, read_json, wait_bounded};
use crate::plot;
use crate::runner::{
    Proc, RunHeader, check_tools, holdline_exe, lab_main, metric, scrape, spawn, with_fresh_ports,
};
use crate::server::{SERVER_CORE, Transport, free_port, wait_bound};

/// The domain of the service.
const DOMAIN: &str = "example.com";
/// The second-stage cluster's name (its servers' Record-Route).
const CLUSTER: &str = "c1.example.com";
/// The first stage's name (its servers' Record-Route).
const EDGE: &str = "edge.example.com";
/// The Redis namespace and the Sentinel's name of the primary.
const NAMESPACE: &str = "lab";
const MASTER: &str = "lab";
/// The phones' failover: no answer at all for this long, seconds.
const FAILOVER_AFTER_S: f64 = 0.5;
/// How often the lab samples the first stages and the Sentinels.
const POLL: Duration = Duration::from_millis(100);
/// Calls placed within this many seconds after the kill count as "during the failover".
const WINDOW_AFTER_S: f64 = 5.0;
/// The longest wait for the callees' registrations.
const REGISTER_LIMIT: Duration = Duration::from_secs(60);

/// `holdline lab failover` options.
#[derive(Debug, Parser)]
#[command(
    name = "holdline lab failover",
    about = "seed 001's failover drills: kill -9 a second-stage server, a first-stage server, the Redis primary, under calls and re-REGISTERs"
)]
pub(crate) struct Args {
    /// Shorter drills (20 s each, the kill at 8 s).
    #[arg(long)]
    pub quick: bool,
    /// Where results go.
    #[arg(long, value_name = "DIR", default_value = "lab-results/failover")]
    pub out: PathBuf,
    /// The drills, comma-separated: second-stage, first-stage, redis.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "second-stage,first-stage,redis"
    )]
    pub drills: Vec<String>,
    /// Calls per second (Poisson).
    #[arg(long, value_name = "N", default_value_t = 100.0)]
    pub rate: f64,
    /// Holding time of every call, seconds.
    #[arg(long, value_name = "S", default_value_t = 3.0)]
    pub hold: f64,
    /// Callees (registered once by the call handler).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub users: u64,
    /// Users re-REGISTERing during the drill.
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub reg_users: u64,
    /// Re-REGISTER interval of each of them, seconds.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub refresh: f64,
    /// Seconds of load per drill (default 60, `--quick` 20).
    #[arg(long, value_name = "S")]
    pub seconds: Option<f64>,
    /// When the victim is killed, seconds into the load (default 30, `--quick` 8).
    #[arg(long, value_name = "S")]
    pub kill_at: Option<f64>,
    /// The `holdline` binary to run (default: this one).
    #[arg(long, value_name = "PATH")]
    pub exe: Option<PathBuf>,
}

/// What a drill kills.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Drill {
    /// P_a, one of the two second-stage servers.
    SecondStage,
    /// F_1, one of the two first-stage servers.
    FirstStage,
    /// The Redis primary.
    Redis,
}

impl Drill {
    fn parse(s: &str) -> std::result::Result<Self, String> {
        match s.trim() {
            "second-stage" => Ok(Self::SecondStage),
            "first-stage" => Ok(Self::FirstStage),
            "redis" => Ok(Self::Redis),
            other => Err(format!(
                "drill `{other}`: expected second-stage, first-stage or redis"
            )),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::SecondStage => "second-stage",
            Self::FirstStage => "first-stage",
            Self::Redis => "redis",
        }
    }
}

/// One second of a drill's timeline (seconds since the calls started).
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Second {
    /// Start of the second.
    pub t_s: f64,
    /// Calls placed.
    pub calls_placed: u64,
    /// 200 OKs to INVITEs.
    pub calls_answered: u64,
    /// Calls failed (counted when they failed).
    pub calls_failed: u64,
    /// INVITEs and BYEs sent again to the other first stage.
    pub call_failovers: u64,
    /// REGISTER transactions started.
    pub reg_sent: u64,
    /// REGISTERs answered 2xx.
    pub reg_ok: u64,
    /// REGISTERs answered 5xx, or other failures, or timed out.
    pub reg_failed: u64,
    /// REGISTERs sent again to the other first stage.
    pub reg_failovers: u64,
}

/// One drill's outcome.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct DrillResult {
    /// What was killed.
    pub drill: Drill,
    /// The process killed (`P_a`, `F_1`, `redis primary :PORT`).
    pub victim: String,
    /// When, seconds after the calls started.
    pub kill_at_s: f64,
    /// Calls placed.
    pub calls_attempted: u64,
    /// Calls completed (200, ACK, BYE answered 2xx).
    pub calls_ok: u64,
    /// Calls failed.
    pub calls_failed: u64,
    /// Calls in progress at the kill or placed within 5 s after it.
    pub calls_in_window: u64,
    /// `calls_failed / calls_in_window` (every failure of the run counts).
    pub failed_share_of_window: f64,
    /// INVITEs and BYEs the callers sent again to the other first stage.
    pub call_failovers: u64,
    /// 503s the callers received.
    pub r503: u64,
    /// Post-dial delay p99 over the run, ms.
    pub pdd_p99_ms: f64,
    /// The longest post-dial delay of the run (first INVITE to 200 OK, failovers
    /// included), ms: no call waited longer for the service.
    pub pdd_max_ms: f64,
    /// REGISTER transactions started.
    pub reg_sent: u64,
    /// REGISTERs answered 2xx.
    pub reg_ok: u64,
    /// REGISTERs answered 5xx.
    pub reg_5xx: u64,
    /// REGISTERs sent again to the other first stage.
    pub reg_failovers: u64,
    /// The longest REGISTER transaction (sent to its final response), ms.
    pub reg_max_ms: f64,
    /// REGISTER attempts (a phone's registration or refresh, with its failovers and
    /// retries) that never got a 2xx.
    pub registrations_failed: u64,
    /// Users whose REGISTER a 2xx acknowledged (the re-REGISTERing ones and the callees).
    pub bindings_acked: u64,
    /// Acknowledged users missing from the store (Redis) at the end: must be 0.
    pub bindings_lost: u64,
    /// Bindings in the surviving second stage's memory at the end.
    pub bindings_on_survivor: u64,
    /// Seconds from the kill until the service routed around it: a first stage took P_a
    /// down (second-stage drill), Sentinel named the new primary (Redis drill); the
    /// callers' own failover time for the first-stage drill.
    pub routed_around_s: Option<f64>,
    /// The first whole second after the kill from which every second's calls are all
    /// answered (≥ 99% of those placed), seconds after the kill (its end).
    pub restored_s: Option<f64>,
    /// Per second.
    pub timeline: Vec<Second>,
}

/// Everything `results.json` holds.
#[derive(Debug, Serialize)]
pub(crate) struct Results {
    #[serde(flatten)]
    header: RunHeader,
    /// Calls per second.
    pub rate: f64,
    /// Holding time, seconds.
    pub hold_s: f64,
    /// Callees.
    pub users: u64,
    /// Re-REGISTERing users and their interval.
    pub reg_users: u64,
    /// Re-REGISTER interval, seconds.
    pub refresh_s: f64,
    /// Seconds of load per drill.
    pub seconds: f64,
    /// Per drill.
    pub drills: Vec<DrillResult>,
    /// Seconds the whole run took.
    pub elapsed_s: f64,
}

/// Runs `holdline lab failover ARGS`.
pub(crate) fn main(args: Vec<String>) -> ExitCode {
    lab_main::<Args, Results>("failover", args, |a| a.out.clone(), run, |r| r.elapsed_s)
}

/// A process the drill may kill.
struct Server {
    proc: Proc,
    port: u16,
    metrics: u16,
}

/// `redis-server` or `redis-sentinel`, stopped (SIGKILL) when dropped.
struct Redis {
    proc: Proc,
    port: u16,
}

/// Runs `redis-cli -p PORT ARGS` (bounded by its own timeout); its output, trimmed.
fn redis_cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("timeout")
        .args(["5", "redis-cli", "-p", &port.to_string()])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn wait_ping(port: u16, what: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if redis_cli(port, &["ping"]).is_some_and(|s| s == "PONG") {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(LabError::Process(format!(
        "{what} on port {port} did not answer PING within 10 s"
    )))
}

fn start_redis(runs: &Path, tag: &str, replica_of: Option<u16>) -> Result<Redis> {
    let port = free_port()?;
    let dir = runs.join(format!("{tag}-redis-{port}"));
    std::fs::create_dir_all(&dir)
        .map_err(|e| LabError::io(format!("create {}", dir.display()), e))?;
    let mut args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        &dir.display().to_string(),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    if let Some(p) = replica_of {
        args.extend(["--replicaof".into(), "127.0.0.1".into(), p.to_string()]);
    }
    let log = runs.join(format!("{tag}-redis-{port}.log"));
    let proc = spawn(SERVER_CORE, Path::new("redis-server"), &args, &log)?;
    wait_ping(port, "redis-server")?;
    Ok(Redis { proc, port })
}

fn start_sentinel(runs: &Path, tag: &str, primary: u16) -> Result<Redis> {
    let port = free_port()?;
    let conf = runs.join(format!("{tag}-sentinel-{port}.conf"));
    let text = format!(
        "port {port}\nbind 127.0.0.1\ndir {}\n\
         sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
         sentinel down-after-milliseconds {MASTER} 300\n\
         sentinel failover-timeout {MASTER} 3000\n\
         sentinel parallel-syncs {MASTER} 2\n",
        runs.display()
    );
    std::fs::write(&conf, text)
        .map_err(|e| LabError::io(format!("write {}", conf.display()), e))?;
    let log = runs.join(format!("{tag}-sentinel-{port}.log"));
    let proc = spawn(
        SERVER_CORE,
        Path::new("redis-sentinel"),
        &[conf.display().to_string()],
        &log,
    )?;
    wait_ping(port, "redis-sentinel")?;
    Ok(Redis { proc, port })
}

/// The primary's port as the Sentinel at `port` names it.
fn sentinel_primary(port: u16) -> Option<u16> {
    let out = redis_cli(port, &["sentinel", "get-master-addr-by-name", MASTER])?;
    out.lines().nth(1)?.trim().parse().ok()
}

/// Starts `holdline serve` with `extra` arguments.
fn start_holdline(exe: &Path, runs: &Path, tag: &str, extra: &[String]) -> Result<Server> {
    let (port, metrics) = (free_port()?, free_port()?);
    let log = runs.join(format!("{tag}.log"));
    let mut args = vec![
        "serve".to_owned(),
        format!("--listen=udp:127.0.0.1:{port}"),
        format!("--metrics=127.0.0.1:{metrics}"),
        "--workers=1".to_owned(),
    ];
    args.extend_from_slice(extra);
    let mut proc = spawn(SERVER_CORE, exe, &args, &log)?;
    wait_bound(
        &mut proc.0,
        port,
        Some(Transport::Udp),
        "holdline serve",
        &log,
    )?;
    Ok(Server {
        proc,
        port,
        metrics,
    })
}

/// The first stages' configuration file.
fn first_stage_config(runs: &Path, tag: &str, second: &[u16]) -> Result<PathBuf> {
    let targets = second
        .iter()
        .map(|p| format!("\"udp:127.0.0.1:{p}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let text = format!(
        "# holdline lab failover: a first stage. Shares {DOMAIN}'s users over the second\n\
         # stage's servers by rendezvous hashing; routes the cluster's name (its servers'\n\
         # Record-Route) over the same servers; probes them; record-routes with the first\n\
         # stage's own name, which every first-stage server carries.\n\
         record_route_host = \"{EDGE}\"\n\n\
         [[hash_routes]]\ndomain = \"{DOMAIN}\"\ntargets = [{targets}]\n\n\
         [[hash_routes]]\ndomain = \"{CLUSTER}\"\ntargets = [{targets}]\n\n\
         [probing]\ninterval_ms = 200\ntimeout_ms = 200\ndown_after = 2\n"
    );
    let path = runs.join(format!("{tag}-first-stage.toml"));
    std::fs::write(&path, text)
        .map_err(|e| LabError::io(format!("write {}", path.display()), e))?;
    Ok(path)
}

/// The whole service of one drill; every process is killed when dropped.
struct Service {
    redis: Vec<Redis>,
    sentinels: Vec<Redis>,
    /// P_a, P_b.
    second: Vec<Option<Server>>,
    /// F_1, F_2.
    first: Vec<Option<Server>>,
    _uas: Proc,
}

fn start_service(exe: &Path, runs: &Path, tag: &str, users: u64) -> Result<Service> {
    let primary = start_redis(runs, tag, None)?;
    let mut redis = vec![primary];
    for _ in 0..2 {
        let r = start_redis(runs, tag, Some(redis[0].port))?;
        redis.push(r);
    }
    // The replicas are in sync before the Sentinels start (bounded wait).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let info = redis_cli(redis[0].port, &["info", "replication"]).unwrap_or_default();
        if info.contains("connected_slaves:2") && !info.contains("state=wait_bgsave") {
            break;
        }
        if Instant::now() >= deadline {
            return Err(LabError::Process(format!(
                "{tag}: the Redis replicas did not connect within 15 s:\n{info}"
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let sentinels = (0..3)
        .map(|_| start_sentinel(runs, tag, redis[0].port))
        .collect::<Result<Vec<_>>>()?;
    let store = format!(
        "redis+sentinel://{}/{MASTER}?namespace={NAMESPACE}&wait_replicas=1&wait_timeout_ms=100",
        sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut second = Vec::new();
    for name in ["pa", "pb"] {
        let s = start_holdline(
            exe,
            runs,
            &format!("{tag}-{name}"),
            &[
                format!("--domain={DOMAIN}"),
                format!("--store={store}"),
                format!("--record-route-host={CLUSTER}"),
            ],
        )?;
        second.push(Some(s));
    }
    let ports: Vec<u16> = second.iter().flatten().map(|s| s.port).collect();
    let conf = first_stage_config(runs, tag, &ports)?;
    let mut first = Vec::new();
    for name in ["f1", "f2"] {
        let s = start_holdline(
            exe,
            runs,
            &format!("{tag}-{name}"),
            &[
                format!("--config={}", conf.display()),
                "--store=memory".to_owned(),
            ],
        )?;
        first.push(Some(s));
    }
    let f1 = first[0].as_ref().map_or(0, |s| s.port);
    let uas_port = free_port()?;
    let log = runs.join(format!("{tag}-uas.log"));
    let uas_args = vec![
        "load".to_owned(),
        "uas".to_owned(),
        format!("--listen=127.0.0.1:{uas_port}"),
        format!("--json={}", runs.join(format!("{tag}-uas.json")).display()),
        "--max-time=900".to_owned(),
        "--progress=off".to_owned(),
        format!("--register={users}"),
        format!("--registrar=127.0.0.1:{f1}"),
        format!("--users=user{{0..{}}}@{DOMAIN}", users.saturating_sub(1)),
        "--register-rate=500".to_owned(),
    ];
    let mut uas = spawn(GENERATOR_CORE, exe, &uas_args, &log)?;
    wait_bound(
        &mut uas.0,
        uas_port,
        Some(Transport::Udp),
        "holdline load uas",
        &log,
    )?;
    let service = Service {
        redis,
        sentinels,
        second,
        first,
        _uas: uas,
    };
    // Every callee is registered: both second stages hold every binding (one wrote it, the
    // other learnt it from the store).
    let deadline = Instant::now() + REGISTER_LIMIT;
    loop {
        let least = service
            .second
            .iter()
            .flatten()
            .map(|s| metric(&scrape(s.metrics), "holdline_store_bindings"))
            .fold(f64::INFINITY, f64::min);
        if least >= users as f64 {
            return Ok(service);
        }
        if Instant::now() >= deadline {
            return Err(LabError::Process(format!(
                "{tag}: {least} of {users} callees registered on both second stages after {} s; logs in {}",
                REGISTER_LIMIT.as_secs(),
                runs.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Kills `p` with SIGKILL now (and reaps it).
fn kill9(p: &mut Proc) {
    let _ = p.0.kill();
    let _ = p.0.wait();
}

/// Reads a generator's per-second CSV into (t_s, column → value) rows.
fn read_csv(path: &Path) -> Vec<(f64, std::collections::HashMap<String, u64>)> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let cols: Vec<&str> = header.split(',').collect();
    lines
        .filter_map(|l| {
            let vals: Vec<&str> = l.split(',').collect();
            let t: f64 = vals.first()?.parse().ok()?;
            let map = cols
                .iter()
                .zip(&vals)
                .skip(1)
                .filter_map(|(c, v)| Some(((*c).to_owned(), v.parse().ok()?)))
                .collect();
            Some((t, map))
        })
        .collect()
}

/// The per-second timeline: the callers' rows, and the registering phones' rows shifted by
/// `reg_offset` seconds (they started that much earlier).
fn timeline(uac_csv: &Path, reg_csv: &Path, reg_offset: f64) -> Vec<Second> {
    let uac = read_csv(uac_csv);
    let reg = read_csv(reg_csv);
    let mut out: Vec<Second> = uac
        .iter()
        .map(|(t, m)| {
            let g = |k: &str| m.get(k).copied().unwrap_or(0);
            Second {
                t_s: t - 1.0,
                calls_placed: g("attempted"),
                calls_answered: g("r200"),
                calls_failed: g("calls_failed"),
                call_failovers: g("failovers"),
                ..Second::default()
            }
        })
        .collect();
    for (t, m) in &reg {
        let g = |k: &str| m.get(k).copied().unwrap_or(0);
        let at = t - 1.0 - reg_offset;
        let Some(s) = out.iter_mut().find(|s| (s.t_s - at).abs() < 0.5) else {
            continue;
        };
        s.reg_sent += g("reg_sent");
        s.reg_ok += g("reg_ok");
        s.reg_failed += g("reg_5xx") + g("reg_fail_other") + g("timeouts");
        s.reg_failovers += g("failovers");
    }
    out
}

/// The first second starting at or after `kill` from which every later second with calls
/// has at least 99% of its calls answered; its end, seconds after the kill. Answers are
/// counted in the second they arrive, so a call placed late in a second and answered after
/// a client failover (0.5 s) lands in the next: a second short of answers passes when it and
/// the next one together have 99% of their calls answered.
fn restored_after(timeline: &[Second], kill: f64, last: f64) -> Option<f64> {
    let after: Vec<&Second> = timeline
        .iter()
        .filter(|s| s.t_s + 1.0 > kill && s.t_s + 1.0 <= last)
        .collect();
    let enough = |s: &[&Second]| {
        let placed: u64 = s.iter().map(|s| s.calls_placed).sum();
        let answered: u64 = s.iter().map(|s| s.calls_answered).sum();
        answered as f64 >= 0.99 * placed as f64
    };
    let good = |j: usize| enough(&after[j..=j]) || enough(&after[j..after.len().min(j + 2)]);
    (0..after.len())
        .find(|&i| (i..after.len()).all(good))
        .map(|i| (after[i].t_s - kill).max(0.0))
}

/// The acknowledged users missing from the store, and how many there were.
fn lost_bindings(acked: &BTreeSet<String>, primary: u16) -> Result<u64> {
    let pattern = format!("holdline:{NAMESPACE}:aor:*");
    let out = Command::new("timeout")
        .args([
            "60",
            "redis-cli",
            "-p",
            &primary.to_string(),
            "--scan",
            "--pattern",
            &pattern,
        ])
        .stderr(Stdio::null())
        .output()
        .map_err(|e| LabError::io("redis-cli --scan", e))?;
    if !out.status.success() {
        return Err(LabError::Process(format!(
            "redis-cli --scan on port {primary} failed"
        )));
    }
    let prefix = format!("holdline:{NAMESPACE}:aor:");
    let held: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix(&prefix).map(str::to_owned))
        .collect();
    Ok(acked.iter().filter(|a| !held.contains(*a)).count() as u64)
}

/// The settings of one drill.
struct Plan<'a> {
    exe: &'a Path,
    runs: &'a Path,
    args: &'a Args,
    seconds: f64,
    kill_at: f64,
}

fn drill(p: &Plan<'_>, d: Drill, started: Instant) -> Result<DrillResult> {
    let tag = d.name();
    let a = p.args;
    let mut svc = start_service(p.exe, p.runs, tag, a.users)?;
    let f: Vec<u16> = svc.first.iter().flatten().map(|s| s.port).collect();
    let drain = 2.0 * a.hold + 10.0;
    // The re-REGISTERing phones: first registrations spread over one refresh interval, then
    // each refreshing: a steady reg_users / refresh REGISTERs per second.
    let reg_json = p.runs.join(format!("{tag}-register.json"));
    let reg_csv = p.runs.join(format!("{tag}-register.csv"));
    let acked_file = p.runs.join(format!("{tag}-acked.txt"));
    let reg_args = vec![
        "load".to_owned(),
        "register".to_owned(),
        format!("--target=127.0.0.1:{}", f[0]),
        format!("--alternate=127.0.0.1:{}", f[1]),
        "--spread".to_owned(),
        format!("--failover-after={FAILOVER_AFTER_S}"),
        format!(
            "--users=reg{{0..{}}}@{DOMAIN}",
            a.reg_users.saturating_sub(1)
        ),
        format!("--rate={}", (a.reg_users as f64 / a.refresh).max(1.0)),
        format!("--refresh={}", a.refresh),
        format!("--duration={}", p.seconds),
        format!("--drain={drain}"),
        format!("--max-time={}", p.seconds + drain + 30.0),
        "--connections=64".to_owned(),
        format!("--acked={}", acked_file.display()),
        format!("--json={}", reg_json.display()),
        format!("--csv={}", reg_csv.display()),
        "--progress=off".to_owned(),
    ];
    let reg_start = Instant::now();
    let mut reg = spawn(
        GENERATOR_CORE,
        p.exe,
        &reg_args,
        &p.runs.join(format!("{tag}-register.log")),
    )?;
    let uac_json = p.runs.join(format!("{tag}-uac.json"));
    let uac_csv = p.runs.join(format!("{tag}-uac.csv"));
    let uac_args = vec![
        "load".to_owned(),
        "uac".to_owned(),
        format!("--target=127.0.0.1:{}", f[0]),
        format!("--alternate=127.0.0.1:{}", f[1]),
        "--spread".to_owned(),
        format!("--failover-after={FAILOVER_AFTER_S}"),
        format!("--rate={}", a.rate),
        "--arrivals=poisson".to_owned(),
        format!("--duration={}", p.seconds),
        format!("--hold=fixed:{}", a.hold),
        format!("--drain={drain}"),
        format!("--max-time={}", p.seconds + drain + 30.0),
        format!("--to=user{{0..{}}}@{DOMAIN}", a.users.saturating_sub(1)),
        format!("--json={}", uac_json.display()),
        format!("--csv={}", uac_csv.display()),
        "--progress=off".to_owned(),
    ];
    let uac_start = Instant::now();
    let reg_offset = uac_start.duration_since(reg_start).as_secs_f64();
    let mut uac = spawn(
        GENERATOR_CORE,
        p.exe,
        &uac_args,
        &p.runs.join(format!("{tag}-uac.log")),
    )?;
    // Until the kill, then sampling what routes around it.
    let kill_time = uac_start + Duration::from_secs_f64(p.kill_at);
    while Instant::now() < kill_time {
        std::thread::sleep(POLL.min(kill_time.saturating_duration_since(Instant::now())));
    }
    let old_primary = svc.redis[0].port;
    let victim = match d {
        Drill::SecondStage => {
            if let Some(mut s) = svc.second[0].take() {
                kill9(&mut s.proc);
            }
            "P_a".to_owned()
        }
        Drill::FirstStage => {
            if let Some(mut s) = svc.first[0].take() {
                kill9(&mut s.proc);
            }
            "F_1".to_owned()
        }
        Drill::Redis => {
            kill9(&mut svc.redis[0].proc);
            format!("redis primary :{old_primary}")
        }
    };
    let killed = Instant::now();
    let kill_at_s = killed.duration_since(uac_start).as_secs_f64();
    eprintln!(
        "failover {:>5.0}s  {tag}: killed {victim} at {kill_at_s:.2} s",
        started.elapsed().as_secs_f64()
    );
    let mut routed_around_s = match d {
        Drill::FirstStage => Some(FAILOVER_AFTER_S),
        _ => None,
    };
    let end = uac_start + Duration::from_secs_f64(p.seconds + drain + 40.0);
    let mut done = false;
    while Instant::now() < end {
        if routed_around_s.is_none() {
            let seen = match d {
                Drill::SecondStage => svc
                    .first
                    .iter()
                    .flatten()
                    .any(|s| metric(&scrape(s.metrics), "holdline_sip_targets_down") >= 1.0),
                Drill::Redis => svc
                    .sentinels
                    .iter()
                    .any(|s| sentinel_primary(s.port).is_some_and(|p| p != old_primary)),
                Drill::FirstStage => true,
            };
            if seen {
                let t = killed.elapsed().as_secs_f64();
                routed_around_s = Some(t);
                eprintln!(
                    "failover {:>5.0}s  {tag}: routed around after {t:.2} s",
                    started.elapsed().as_secs_f64()
                );
            }
        }
        let reg_done = matches!(reg.0.try_wait(), Ok(Some(_)));
        let uac_done = matches!(uac.0.try_wait(), Ok(Some(_)));
        if reg_done && uac_done {
            done = true;
            break;
        }
        std::thread::sleep(POLL);
    }
    if !done {
        let _ = wait_bounded(&mut uac.0, Duration::from_secs(1));
        let _ = wait_bounded(&mut reg.0, Duration::from_secs(1));
        return Err(LabError::Process(format!(
            "{tag}: the generators did not stop in time; logs in {}",
            p.runs.display()
        )));
    }
    // The store and the survivor, as they are now.
    let primary = match d {
        Drill::Redis => svc
            .sentinels
            .iter()
            .find_map(|s| sentinel_primary(s.port))
            .unwrap_or(old_primary),
        _ => old_primary,
    };
    let mut acked: BTreeSet<String> = std::fs::read_to_string(&acked_file)
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().to_ascii_lowercase())
        .filter(|l| !l.is_empty())
        .collect();
    let uas_users = a.users;
    for u in 0..uas_users {
        acked.insert(format!("user{u}@{DOMAIN}"));
    }
    let bindings_lost = lost_bindings(&acked, primary)?;
    let survivor = svc.second.iter().flatten().last().map(|s| s.metrics);
    let bindings_on_survivor =
        survivor.map_or(0.0, |m| metric(&scrape(m), "holdline_store_bindings")) as u64;
    let uacv: Value = read_json(&uac_json)?;
    let regv: Value = read_json(&reg_json)?;
    let tl = timeline(&uac_csv, &reg_csv, reg_offset);
    let calls_in_window = tl
        .iter()
        .filter(|s| s.t_s + 1.0 > kill_at_s - a.hold && s.t_s < kill_at_s + WINDOW_AFTER_S)
        .map(|s| s.calls_placed)
        .sum::<u64>();
    let calls_failed = count(&uacv, &["totals", "calls_failed"]);
    let g = |k: &str| count(&regv, &["totals", k]);
    let reg_failovers = g("failovers");
    let attempts = g("reg_sent")
        .saturating_sub(reg_failovers)
        .saturating_sub(g("reg_retry_after"))
        .saturating_sub(g("reg_retry_timeout"));
    let r = DrillResult {
        drill: d,
        victim,
        kill_at_s,
        calls_attempted: count(&uacv, &["totals", "attempted"]),
        calls_ok: count(&uacv, &["totals", "calls_ok"]),
        calls_failed,
        calls_in_window,
        failed_share_of_window: if calls_in_window > 0 {
            calls_failed as f64 / calls_in_window as f64
        } else {
            0.0
        },
        call_failovers: count(&uacv, &["totals", "failovers"]),
        r503: count(&uacv, &["totals", "r503"]),
        pdd_p99_ms: crate::generator::num(&uacv, &["pdd_p99_ms"]),
        pdd_max_ms: crate::generator::num(&uacv, &["latency", "pdd", "max_ms"]),
        reg_max_ms: crate::generator::num(&regv, &["latency", "register", "max_ms"]),
        reg_sent: g("reg_sent"),
        reg_ok: g("reg_ok"),
        reg_5xx: g("reg_5xx"),
        reg_failovers,
        registrations_failed: attempts.saturating_sub(g("reg_ok")),
        bindings_acked: acked.len() as u64,
        bindings_lost,
        bindings_on_survivor,
        routed_around_s,
        restored_s: restored_after(&tl, kill_at_s, p.seconds),
        timeline: tl,
    };
    drop(svc);
    Ok(r)
}

fn progress(r: &DrillResult, started: Instant) {
    eprintln!(
        "failover {:>5.0}s  {}: calls {} ok / {} failed of {} ({:.2}% of the {} in the window), PDD max {:.0} ms, REGISTERs {} 2xx / {} failed registrations, bindings lost {} of {}, routed around {}, restored {}",
        started.elapsed().as_secs_f64(),
        r.drill.name(),
        r.calls_ok,
        r.calls_failed,
        r.calls_attempted,
        100.0 * r.failed_share_of_window,
        r.calls_in_window,
        r.pdd_max_ms,
        r.reg_ok,
        r.registrations_failed,
        r.bindings_lost,
        r.bindings_acked,
        r.routed_around_s
            .map_or_else(|| "never".to_owned(), |t| format!("{t:.2} s")),
        r.restored_s
            .map_or_else(|| "never".to_owned(), |t| format!("{t:.0} s")),
    );
}

fn run(args: &Args) -> Result<Results> {
    let started = Instant::now();
    check_tools()?;
    for (program, package) in [
        ("redis-server", "redis-server"),
        ("redis-sentinel", "redis-sentinel"),
        ("redis-cli", "redis-tools"),
    ] {
        let ok = Command::new(program)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(LabError::Missing { program, package });
        }
    }
    let exe = holdline_exe(args.exe.as_deref())?;
    let drills = args
        .drills
        .iter()
        .map(|s| Drill::parse(s))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(LabError::Precondition)?;
    let seconds = args.seconds.unwrap_or(if args.quick { 20.0 } else { 60.0 });
    let kill_at = args.kill_at.unwrap_or(if args.quick { 8.0 } else { 30.0 });
    if !(kill_at > 0.0 && kill_at < seconds) {
        return Err(LabError::Precondition(format!(
            "--kill-at {kill_at}: must be inside the {seconds} s of load"
        )));
    }
    for (what, v) in [
        ("--rate", args.rate),
        ("--hold", args.hold),
        ("--refresh", args.refresh),
    ] {
        if !(v > 0.0 && v.is_finite()) {
            return Err(LabError::Precondition(format!(
                "{what} {v}: must be positive"
            )));
        }
    }
    if args.users == 0 || args.reg_users == 0 {
        return Err(LabError::Precondition(
            "--users and --reg-users must be at least 1".into(),
        ));
    }
    let runs = args.out.join("runs");
    std::fs::create_dir_all(&runs)
        .map_err(|e| LabError::io(format!("create {}", runs.display()), e))?;
    eprintln!(
        "failover: {} drill(s), {} calls/s held {} s, {} callees, {} users re-REGISTERing every {} s, {seconds} s each, kill at {kill_at} s",
        drills.len(),
        args.rate,
        args.hold,
        args.users,
        args.reg_users,
        args.refresh
    );
    let plan = Plan {
        exe: &exe,
        runs: &runs,
        args,
        seconds,
        kill_at,
    };
    let mut out = Vec::new();
    for d in &drills {
        let r = with_fresh_ports("failover", d.name(), || drill(&plan, *d, started))?;
        progress(&r, started);
        out.push(r);
    }
    let results = Results {
        header: RunHeader::new("failover", started, args.quick, "udp"),
        rate: args.rate,
        hold_s: args.hold,
        users: args.users,
        reg_users: args.reg_users,
        refresh_s: args.refresh,
        seconds,
        drills: out,
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    write(&args.out, &results)?;
    Ok(results)
}

fn write(out: &Path, r: &Results) -> Result<()> {
    let json = serde_json::to_string_pretty(r).map_err(|e| LabError::Report {
        path: out.join("results.json"),
        reason: e.to_string(),
    })?;
    let path = out.join("results.json");
    std::fs::write(&path, json)
        .map_err(|e| LabError::io(format!("write {}", path.display()), e))?;
    let mut csv = String::from(
        "drill,t_s,calls_placed,calls_answered,calls_failed,call_failovers,reg_sent,reg_ok,reg_failed,reg_failovers\n",
    );
    for d in &r.drills {
        for s in &d.timeline {
            let _ = writeln!(
                csv,
                "{},{:.0},{},{},{},{},{},{},{},{}",
                d.drill.name(),
                s.t_s,
                s.calls_placed,
                s.calls_answered,
                s.calls_failed,
                s.call_failovers,
                s.reg_sent,
                s.reg_ok,
                s.reg_failed,
                s.reg_failovers
            );
        }
    }
    let path = out.join("timeline.csv");
    std::fs::write(&path, csv).map_err(|e| LabError::io(format!("write {}", path.display()), e))?;
    let mut md = format!(
        "# holdline lab failover\n\n{} calls/s (Poisson) held {} s; {} callees; {} users re-REGISTERing every {} s; {} s of load per drill.\n\n\
         | drill | killed at | calls failed / placed | failed / calls in the window | call failovers | PDD max | REGISTERs 2xx | registrations failed | REGISTER failovers | longest REGISTER | bindings lost / acked | on the survivor | routed around | restored |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        r.rate, r.hold_s, r.users, r.reg_users, r.refresh_s, r.seconds
    );
    for d in &r.drills {
        let _ = writeln!(
            md,
            "| {} ({}) | {:.1} s | {} / {} | {:.2}% of {} | {} | {:.0} ms | {} | {} | {} | {:.0} ms | {} / {} | {} | {} | {} |",
            d.drill.name(),
            d.victim,
            d.kill_at_s,
            d.calls_failed,
            d.calls_attempted,
            100.0 * d.failed_share_of_window,
            d.calls_in_window,
            d.call_failovers,
            d.pdd_max_ms,
            d.reg_ok,
            d.registrations_failed,
            d.reg_failovers,
            d.reg_max_ms,
            d.bindings_lost,
            d.bindings_acked,
            d.bindings_on_survivor,
            d.routed_around_s
                .map_or_else(|| "never".to_owned(), |t| format!("{t:.2} s")),
            d.restored_s
                .map_or_else(|| "never".to_owned(), |t| format!("{t:.0} s")),
        );
    }
    for d in &r.drills {
        let _ = writeln!(md, "\n![{0}](timeline-{0}.svg)", d.drill.name());
    }
    let path = out.join("summary.md");
    std::fs::write(&path, md).map_err(|e| LabError::io(format!("write {}", path.display()), e))?;
    for d in &r.drills {
        let pick = |f: fn(&Second) -> u64| -> Vec<(f64, f64)> {
            d.timeline.iter().map(|s| (s.t_s, f(s) as f64)).collect()
        };
        let top = d
            .timeline
            .iter()
            .map(|s| s.calls_placed.max(s.reg_sent))
            .max()
            .unwrap_or(1) as f64;
        let series: Vec<plot::Series> = vec![
            ("calls placed/s".into(), pick(|s| s.calls_placed)),
            ("calls answered/s".into(), pick(|s| s.calls_answered)),
            ("calls failed/s".into(), pick(|s| s.calls_failed)),
            ("call failovers/s".into(), pick(|s| s.call_failovers)),
            ("REGISTER 2xx/s".into(), pick(|s| s.reg_ok)),
            ("REGISTER failed/s".into(), pick(|s| s.reg_failed)),
            ("REGISTER failovers/s".into(), pick(|s| s.reg_failovers)),
            (
                format!("kill -9 {}", d.victim),
                vec![(d.kill_at_s, 0.0), (d.kill_at_s, top)],
            ),
        ];
        plot::chart(
            out,
            &format!("timeline-{}", d.drill.name()),
            &format!("failover drill: kill -9 {} under load", d.victim),
            "time (s)",
            "per second",
            &series,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sec(t: f64, placed: u64, answered: u64) -> Second {
        Second {
            t_s: t,
            calls_placed: placed,
            calls_answered: answered,
            ..Second::default()
        }
    }

    #[test]
    fn drills_parse() {
        assert_eq!(Drill::parse("redis"), Ok(Drill::Redis));
        assert_eq!(Drill::parse(" first-stage"), Ok(Drill::FirstStage));
        assert!(Drill::parse("p_a").is_err());
    }

    #[test]
    fn restoration_is_the_first_second_after_which_every_call_is_answered() {
        // Killed at 10.3 s: the seconds [10, 11) and [11, 12) lose calls, [12, 13) does
        // not, [13, 14) does (a late straggler), then all good from 14.
        let tl = vec![
            sec(9.0, 100, 100),
            sec(10.0, 100, 60),
            sec(11.0, 100, 90),
            sec(12.0, 100, 100),
            sec(13.0, 100, 97),
            sec(14.0, 100, 100),
            sec(15.0, 100, 99),
            sec(16.0, 0, 0),
        ];
        let r = restored_after(&tl, 10.3, 17.0);
        assert!(r.is_some_and(|t| (t - 3.7).abs() < 1e-9), "{r:?}");
        // Never lost anything: restored in the second of the kill (0).
        let fine = vec![sec(10.0, 100, 100), sec(11.0, 100, 100)];
        assert_eq!(restored_after(&fine, 10.3, 12.0), Some(0.0));
        // Never restored.
        let bad = vec![sec(10.0, 100, 10), sec(11.0, 100, 10)];
        assert_eq!(restored_after(&bad, 10.3, 12.0), None);
        // Answers late by a client failover land in the next second: not a loss.
        let late = vec![
            sec(10.0, 100, 100),
            sec(11.0, 114, 110),
            sec(12.0, 95, 99),
            sec(13.0, 100, 100),
        ];
        assert_eq!(restored_after(&late, 10.3, 14.0), Some(0.0));
    }
}
