//! `holdline lab soak`: sustained load for minutes, to show that the server's capacity holds
//! and that its memory stays flat.
//!
//! Each point (one per `--rate`, run one after another, each with a fresh server) starts
//! `holdline serve --workers 1 --store memory` pinned to core 1 (8 MiB UDP buffers, one
//! listener on the chosen transport, `--metrics`, every call routed to the UAS), a
//! `holdline load uas` on core 0 and a `holdline load uac` on core 0 offering `--rate` calls
//! per second (the generator's default Poisson arrivals, zero holding time) for `--duration`
//! seconds. Every second, from the UAC's start to its exit, the lab samples the server's RSS
//! (`VmRSS` of `/proc/PID/status`), its CPU time (utime + stime) and its `/metrics`:
//! `holdline_sip_active_transactions`, `holdline_sip_active_calls`, the BYEs it took (the
//! calls completed so far), every metric named `holdline_sip_txn_*` or `holdline_txn_*`, and
//! local overload control's rejections, occupancy and acceptance, as far as the server exports
//! them (summed over labels; absent ones are absent from the sample).
//!
//! A transaction lives up to 64×T1 = 32 s after it ends (Timer B, F, L and friends), so a
//! server under constant load reaches its steady memory after about 32 s: the RSS is reported
//! at the start, at 32 s, at its maximum and at the end, and its slope (least squares, MB per
//! minute) is fitted over the samples after 40 s up to the end of the offered load (absent
//! for runs too short to have one). Memory is flat when that slope is about 0.
//!
//! Output in `--out DIR`: `results.json` (machine, command line, one object per point with
//! its per-second samples and the UAC's per-second counts), `samples.csv` (one row per point
//! per second), `rss.svg/png`, `transactions.svg/png` and `completed.svg/png` (one line per
//! point), and every process's log and report under `runs/`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{LabError, Result};
use crate::generator::{GENERATOR_CORE, count, num, read_json, terminate, wait_bounded};
use crate::plot;
use crate::procfs;
use crate::runner::{
    Proc, RunHeader, check_tools, holdline_exe, lab_main, scrape, spawn, start_uas,
};
use crate::server::{SERVER_CORE, Transport, free_port, tail, wait_bound};

/// The rate of a run without `--rate`, and of `--quick`'s one point, calls per second.
const DEFAULT_RATE: f64 = 2000.0;
/// Seconds of offered load per point without `--duration`.
const DEFAULT_DURATION_S: f64 = 90.0;
/// Seconds of offered load of `--quick`.
const QUICK_DURATION_S: f64 = 20.0;
/// The UAC's wait for calls in progress after its last arrival: Timer B (64×T1) and a
/// second, so that every call ends by itself (a run ends as soon as all calls have ended).
const DRAIN_S: f64 = 33.0;
/// Where the RSS is read once transactions of the first second have expired (64×T1).
const RSS_SETTLED_AT_S: f64 = 32.0;
/// Start of the steady part over which the RSS slope is fitted.
const STEADY_FROM_S: f64 = 40.0;
/// Length of the windows of the completed ratio, s.
const WINDOW_S: f64 = 10.0;
/// Sampling period.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// Prefixes of the metrics recorded when the server exports them: the transaction table's,
/// and local overload control's rejections (all reasons summed), occupancy and acceptance
/// (a 503 in a soak below capacity is a false alarm to explain).
const TXN_PREFIXES: [&str; 5] = [
    "holdline_sip_txn_",
    "holdline_txn_",
    "holdline_overload_rejected_total",
    "holdline_overload_occupancy_ratio",
    "holdline_overload_acceptance_ratio",
];

/// `holdline lab soak` options.
#[derive(Debug, Parser)]
#[command(
    name = "holdline lab soak",
    about = "Sustained load for minutes: completed calls, RSS, transactions and CPU per call over time"
)]
pub(crate) struct Args {
    /// Offered calls per second; a comma-separated list runs one point per rate, one after
    /// another, each with a fresh server (default 2000).
    #[arg(long, value_name = "CPS[,CPS...]", value_delimiter = ',')]
    pub rate: Vec<f64>,
    /// Seconds of offered load per point (default 90; 20 with --quick).
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,
    /// SIP transport between UAC, server and UAS.
    #[arg(long, value_name = "udp|tcp|tls", default_value = "udp", value_parser = ["udp", "tcp", "tls"])]
    pub transport: String,
    /// Results directory.
    #[arg(long, value_name = "DIR", default_value = "lab-results/soak")]
    pub out: PathBuf,
    /// One short point: 2,000 calls/s for 20 s (an explicit --rate or --duration still
    /// applies; only the first rate runs).
    #[arg(long)]
    pub quick: bool,
    /// The `holdline` binary to run (default: this one).
    #[arg(long, value_name = "PATH")]
    pub exe: Option<PathBuf>,
    /// Redraw the plots and `samples.csv` from `--out`'s `results.json` (no measurement).
    #[arg(long)]
    pub replot: bool,
    /// Attack the server while the calls run (they come from 127.0.0.1, a trusted source):
    /// `scanner` — SIPp from 127.0.0.2 sweeping it with OPTIONS, a new Call-ID and user
    /// each, at `--scanner-rate`, never waiting for an answer; `guesser` — SIPp from
    /// 127.0.0.3 guessing a user's password (REGISTER, 401, REGISTER with a wrong
    /// password) at `--guess-rate`; with it, the server has authentication on (one user).
    /// Comma-separated; the attackers run on the generator's core.
    #[arg(long, value_name = "scanner,guesser", value_delimiter = ',', value_parser = ["scanner", "guesser"])]
    pub attack: Vec<String>,
    /// The scanner's OPTIONS per second.
    #[arg(long, value_name = "N", default_value_t = 10_000.0)]
    pub scanner_rate: f64,
    /// The guesser's guesses per second (two requests each).
    #[arg(long, value_name = "N", default_value_t = 200.0)]
    pub guess_rate: f64,
    /// Turn the server's protection off (`[flood] enabled = false`, `[auth]
    /// failure_limit = 0`): what the attack costs without it.
    #[arg(long)]
    pub unprotected: bool,
    /// SIP capture on: every message the server receives and sends goes to this HEP v3
    /// collector (`[capture] hep`), e.g. `udp:127.0.0.1:9060`: what capture costs.
    #[arg(long, value_name = "udp:IP:PORT")]
    pub capture: Option<String>,
    /// With --capture: the share of calls captured (`[capture] sample`).
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    pub capture_sample: f64,
    /// With --capture: the capture thread's priority (`[capture] priority`, `background`
    /// or `normal`).
    #[arg(long, value_name = "P", default_value = "background")]
    pub capture_priority: String,
}

/// The scanner's SIPp scenario (`lab/scenarios/scanner_options.xml`).
const SCANNER_XML: &str = include_str!("../../../lab/scenarios/scanner_options.xml");
/// The guesser's SIPp scenario (`lab/scenarios/register_guess.xml`).
const GUESSER_XML: &str = include_str!("../../../lab/scenarios/register_guess.xml");
/// The served domain, and its one user, whose password the guesser tries.
const ATTACK_DOMAIN: &str = "example.test";
const ATTACK_USER: &str = "bob";
/// The metrics that tell what an attack cost and what the protection did, recorded at the
/// end of an attacked point (summed over their labels unless a label is given).
const ATTACK_METRICS: [(&str, &str, &str); 8] = [
    ("flood_drops", "holdline_drops_total", "reason=\"flood\""),
    (
        "auth_throttle_drops",
        "holdline_drops_total",
        "reason=\"auth_failures\"",
    ),
    ("flood_offenders", "holdline_flood_offenders_total", ""),
    (
        "options_handled",
        "holdline_sip_requests_in_total",
        "method=\"OPTIONS\"",
    ),
    (
        "register_handled",
        "holdline_sip_requests_in_total",
        "method=\"REGISTER\"",
    ),
    ("auth_ok", "holdline_auth_total", "result=\"ok\""),
    ("auth_failed", "holdline_auth_total", "result=\"failed\""),
    ("auth_challenges", "holdline_auth_challenges_total", ""),
];

/// The attack run beside the calls of every point (`--attack`).
#[derive(Debug, Clone, Default)]
struct Attack {
    /// The scanner's OPTIONS per second.
    scanner: Option<f64>,
    /// The guesser's guesses per second, and the scenario's injection file.
    guesser: Option<f64>,
    /// The server's protection is off.
    unprotected: bool,
}

impl Attack {
    fn from_args(args: &Args) -> Result<Self> {
        let has = |w: &str| args.attack.iter().any(|a| a == w);
        for (name, rate) in [
            ("--scanner-rate", args.scanner_rate),
            ("--guess-rate", args.guess_rate),
        ] {
            if !(rate.is_finite() && rate > 0.0) {
                return Err(LabError::Precondition(format!(
                    "{name} {rate}: must be a positive rate"
                )));
            }
        }
        Ok(Self {
            scanner: has("scanner").then_some(args.scanner_rate),
            guesser: has("guesser").then_some(args.guess_rate),
            unprotected: args.unprotected,
        })
    }

    fn any(&self) -> bool {
        self.scanner.is_some() || self.guesser.is_some()
    }

    /// `none`, `scanner`, `guesser` or `scanner+guesser`, then `+unprotected` if so.
    fn label(&self) -> String {
        let mut parts: Vec<&str> = Vec::new();
        if self.scanner.is_some() {
            parts.push("scanner");
        }
        if self.guesser.is_some() {
            parts.push("guesser");
        }
        if parts.is_empty() {
            parts.push("none");
        }
        if self.unprotected {
            parts.push("unprotected");
        }
        parts.join("+")
    }

    /// The server configuration's lines for the attack: the calls' source trusted, the
    /// guesser's target user in a users file (written into `runs` with `holdline user add`),
    /// and the protection off when asked. `top` goes before any table, `tables` after.
    fn server_toml(&self, exe: &Path, runs: &Path) -> Result<(String, String)> {
        if !self.any() && !self.unprotected {
            return Ok((String::new(), String::new()));
        }
        let top = "# the calls come from 127.0.0.1; the attackers from elsewhere\n\
                   trusted = [\"127.0.0.1\"]\n"
            .to_string();
        let mut tables = String::new();
        if self.unprotected {
            tables.push_str("[flood]\nenabled = false\n");
        }
        if self.guesser.is_some() {
            let users = runs.join("users.txt");
            let _ = std::fs::remove_file(&users);
            let mut child = std::process::Command::new(exe)
                .args(["user", "add", "--file"])
                .arg(&users)
                .arg(format!("{ATTACK_USER}@{ATTACK_DOMAIN}"))
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| LabError::io("start holdline user add", e))?;
            if let Some(mut stdin) = child.stdin.take() {
                use std::io::Write as _;
                stdin
                    .write_all(b"the right one\n")
                    .map_err(|e| LabError::io("write to holdline user add", e))?;
            }
            let out = child
                .wait_with_output()
                .map_err(|e| LabError::io("run holdline user add", e))?;
            if !out.status.success() {
                return Err(LabError::Process(format!(
                    "holdline user add: {}",
                    String::from_utf8_lossy(&out.stderr)
                )));
            }
            // SIPp answers only the first challenge, and only MD5.
            let _ = write!(
                tables,
                "[auth]\nusers_file = {:?}\nalgorithms = [\"MD5\", \"SHA-256\"]\n{}",
                users.display().to_string(),
                if self.unprotected {
                    "failure_limit = 0\n"
                } else {
                    ""
                }
            );
        }
        Ok((top, tables))
    }

    /// Starts the attackers against 127.0.0.1:`port` on the generator's core, each bounded
    /// to `duration_s` of requests and its own timeout; their scenarios are written into
    /// `runs`.
    fn start(&self, runs: &Path, tag: &str, port: u16, duration_s: f64) -> Result<Vec<Proc>> {
        let mut procs = Vec::new();
        let sipp = Path::new("sipp");
        let common = |name: &str, ip: &str, rate: f64| -> Result<Vec<String>> {
            Ok(vec![
                format!("127.0.0.1:{port}"),
                "-i".into(),
                ip.into(),
                "-p".into(),
                free_port()?.to_string(),
                "-r".into(),
                format!("{rate:.0}"),
                "-m".into(),
                format!("{:.0}", (rate * duration_s).ceil()),
                "-timeout".into(),
                format!("{:.0}s", duration_s + 5.0),
                "-nostdin".into(),
                "-trace_stat".into(),
                "-fd".into(),
                "1".into(),
                "-stf".into(),
                runs.join(format!("{tag}-{name}.csv")).display().to_string(),
            ])
        };
        if let Some(rate) = self.scanner {
            let sf = runs.join("scanner.xml");
            std::fs::write(&sf, SCANNER_XML)
                .map_err(|e| LabError::io(format!("write {}", sf.display()), e))?;
            let mut args = common("scanner", "127.0.0.2", rate)?;
            args.extend(["-sf".into(), sf.display().to_string()]);
            let log = runs.join(format!("{tag}-scanner.log"));
            procs.push(spawn(GENERATOR_CORE, sipp, &args, &log)?);
        }
        if let Some(rate) = self.guesser {
            let (sf, inf) = (runs.join("guesser.xml"), runs.join("guesses.csv"));
            for (path, text) in [
                (&sf, GUESSER_XML.to_string()),
                (&inf, format!("SEQUENTIAL\n{ATTACK_USER};\n")),
            ] {
                std::fs::write(path, text)
                    .map_err(|e| LabError::io(format!("write {}", path.display()), e))?;
            }
            let mut args = common("guesser", "127.0.0.3", rate)?;
            args.extend([
                "-sf".into(),
                sf.display().to_string(),
                "-inf".into(),
                inf.display().to_string(),
                "-au".into(),
                ATTACK_USER.into(),
                "-ap".into(),
                "a wrong guess".into(),
            ]);
            let log = runs.join(format!("{tag}-guesser.log"));
            procs.push(spawn(GENERATOR_CORE, sipp, &args, &log)?);
        }
        Ok(procs)
    }
}

/// The number of SIPp "calls" (requests, for the attackers) an attacker created, from the
/// last row of its statistics file (`None` if it wrote none).
fn sipp_created(path: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next()?.split(';').collect();
    let col = header.iter().position(|h| *h == "TotalCallCreated")?;
    lines.last()?.split(';').nth(col)?.parse().ok()
}

/// One sample of the server, taken every second.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Sample {
    /// Seconds since the UAC started.
    pub t_s: f64,
    /// Resident set size (`VmRSS`), MiB.
    pub rss_mb: f64,
    /// CPU time (utime + stime) since the server started, s.
    pub cpu_s: f64,
    /// `holdline_sip_active_transactions` (absent when `/metrics` did not answer).
    pub transactions: Option<f64>,
    /// `holdline_sip_active_calls`.
    pub calls: Option<f64>,
    /// BYEs the server took so far (`holdline_sip_requests_in_total{method="BYE"}`): the
    /// calls completed through it.
    pub completed: Option<f64>,
    /// Every `holdline_sip_txn_*` and `holdline_txn_*` metric the server exports, summed
    /// over its labels; missing ones are absent.
    pub txn: BTreeMap<String, f64>,
}

/// One row of the UAC's per-second CSV.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct UacSecond {
    /// End of the second, s since the UAC started.
    pub t_s: f64,
    /// Calls placed in that second.
    pub attempted: f64,
    /// Calls that ended cleanly in that second.
    pub calls_ok: f64,
    /// Calls that ended without a 200 in that second.
    pub calls_failed: f64,
    /// 503 responses in that second.
    pub r503: f64,
}

/// The completed ratio of one window of the load.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Window {
    /// Start of the window, s.
    pub from_s: f64,
    /// End of the window, s (the last window also counts the calls that ended in the drain).
    pub to_s: f64,
    /// Calls placed in the window.
    pub attempted: f64,
    /// Calls that ended cleanly in the window.
    pub completed: f64,
    /// `completed / attempted` (absent when nothing was placed); calls straddling a window
    /// edge can push one window a little above 1.
    pub ratio: Option<f64>,
}

/// One soak point.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Point {
    /// Rate asked of the UAC, calls per second.
    pub rate: f64,
    /// `udp` or `tcp`.
    pub transport: String,
    /// Seconds of offered load.
    pub duration_s: f64,
    /// Rate the UAC actually offered, calls per second.
    pub offered_cps: f64,
    /// Calls placed.
    pub attempted: u64,
    /// Calls that ended cleanly (200, ACK, BYE, 200): the UAC's `calls_ok`.
    pub completed: u64,
    /// Calls that ended without a 200 (incl. cut by the drain limit).
    pub failed: u64,
    /// 503 responses at the UAC.
    pub r503: u64,
    /// `completed / attempted`.
    pub completed_ratio: f64,
    /// The completed ratio per 10 s window of the load.
    pub windows: Vec<Window>,
    /// RSS before the load, MiB.
    pub rss_start_mb: f64,
    /// RSS at 32 s (the first sample at or after it; absent for shorter runs), MiB.
    pub rss_32s_mb: Option<f64>,
    /// Highest RSS sampled, MiB.
    pub rss_max_mb: f64,
    /// RSS when the UAC exited, MiB.
    pub rss_end_mb: f64,
    /// Least-squares slope of the RSS over the steady part (after `rss_slope_from_s`, up to
    /// the end of the load), MiB per minute; absent with fewer than 3 samples there (a run
    /// shorter than about 43 s has no steady part: transactions still accumulate up to
    /// 64×T1 = 32 s).
    pub rss_slope_mb_per_min: Option<f64>,
    /// Start of the steady part the slope is fitted over, s (its end is `duration_s`).
    pub rss_slope_from_s: f64,
    /// Highest `holdline_sip_active_transactions` sampled.
    pub transactions_max: f64,
    /// Server CPU from the UAC's start to its exit, s.
    pub server_cpu_s: f64,
    /// Server core busy over that window (1.0 = one core).
    pub server_busy: f64,
    /// Server CPU per completed call, µs.
    pub cpu_us_per_call: f64,
    /// Post-dial delay p50 at the UAC, ms.
    pub pdd_p50_ms: f64,
    /// PDD p99, ms.
    pub pdd_p99_ms: f64,
    /// Wall time from the UAC's start to its exit, s.
    pub window_s: f64,
    /// The server samples, one per second.
    pub samples: Vec<Sample>,
    /// The UAC's per-second counts.
    pub per_second: Vec<UacSecond>,
    /// The attack during the point (`none`, `scanner`, `guesser`, `scanner+guesser`), and
    /// `+unprotected` when the server's protection was off.
    #[serde(default)]
    pub attack: String,
    /// What the attack cost the server and what its protection did: the
    /// [`ATTACK_METRICS`] at the end of the point, and each attacker's requests sent
    /// (`scanner_sent`, `guesser_sent`, from SIPp's statistics).
    #[serde(default)]
    pub attack_stats: BTreeMap<String, f64>,
}

/// Everything a run measured (`results.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Results {
    /// `soak`, the command, when, quick mode, the machine, the transport.
    #[serde(flatten)]
    pub run: RunHeader,
    /// Seconds of offered load per point.
    pub duration_s: f64,
    /// The UAC's arrival process.
    pub arrivals: String,
    /// The points, in the order they ran.
    pub points: Vec<Point>,
    /// Wall time of the run, s.
    pub elapsed_s: f64,
}

/// Entry point of `holdline lab soak ARGS`.
pub(crate) fn main(args: Vec<String>) -> ExitCode {
    lab_main(
        "soak",
        args,
        |a: &Args| a.out.clone(),
        run,
        |r: &Results| r.elapsed_s,
    )
}

/// Runs the experiment (or redraws it) and writes its results.
pub(crate) fn run(args: &Args) -> Result<Results> {
    if args.replot {
        return replot(&args.out);
    }
    check_tools()?;
    let started = Instant::now();
    let exe = holdline_exe(args.exe.as_deref())?;
    let transport = match args.transport.as_str() {
        "tcp" => Transport::Tcp,
        "tls" => Transport::Tls,
        _ => Transport::Udp,
    };
    let duration = args.duration.unwrap_or(if args.quick {
        QUICK_DURATION_S
    } else {
        DEFAULT_DURATION_S
    });
    if !(duration.is_finite() && duration > 0.0) {
        return Err(LabError::Precondition(format!(
            "--duration {duration}: must be a positive number of seconds"
        )));
    }
    let mut rates = if args.rate.is_empty() {
        vec![DEFAULT_RATE]
    } else {
        args.rate.clone()
    };
    if args.quick {
        rates.truncate(1);
    }
    if let Some(bad) = rates.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
        return Err(LabError::Precondition(format!(
            "--rate {bad}: must be a positive number of calls per second"
        )));
    }
    let attack = Attack::from_args(args)?;
    if attack.any() && transport != Transport::Udp {
        return Err(LabError::Precondition(
            "--attack runs over UDP only (the attackers are SIPp over UDP)".into(),
        ));
    }
    if attack.any() && !crate::runner::sipp_available() {
        return Err(LabError::Missing {
            program: "sipp",
            package: "sip-tester",
        });
    }
    let runs = args.out.join("runs");
    std::fs::create_dir_all(&runs)
        .map_err(|e| LabError::io(format!("create {}", runs.display()), e))?;
    let config = runs.join("soak.toml");
    let (top, tables) = attack.server_toml(&exe, &runs)?;
    let mut text = format!(
        "# holdline lab soak: 8 MiB UDP buffers, as in holdline bench\n{top}\
         [limits]\nudp_recv_buffer = 8388608\nudp_send_buffer = 8388608\n{tables}",
    );
    if transport == Transport::Tls {
        text.push_str(&crate::pki::Pki::in_dir(&runs)?.server_toml());
    }
    if let Some(hep) = &args.capture {
        text.push_str(&format!(
            "[capture]\nhep = {hep:?}\nagent_id = 1\nsample = {}\npriority = {:?}\n",
            args.capture_sample, args.capture_priority
        ));
    }
    std::fs::write(&config, text)
        .map_err(|e| LabError::io(format!("write {}", config.display()), e))?;
    eprintln!(
        "soak: {} point(s) of {duration:.0} s over {} ({} calls/s)",
        rates.len(),
        transport.name(),
        rates
            .iter()
            .map(|r| format!("{r}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut points = Vec::with_capacity(rates.len());
    for (i, &rate) in rates.iter().enumerate() {
        let spec = Spec {
            rate,
            duration_s: duration,
            transport,
            tag: if attack.any() || attack.unprotected {
                format!("{rate}-{}-{}", transport.name(), attack.label())
            } else {
                format!("{rate}-{}", transport.name())
            },
            attack: attack.clone(),
        };
        let p = crate::runner::with_fresh_ports("soak", &spec.tag, || {
            run_point_once(&exe, &runs, &config, &spec)
        })?;
        eprintln!(
            "[{}/{} {:>4.0} s] {rate:.0}/s {}: completed {}/{} ({:.4}), 503 {}, RSS {:.1} -> {:.1} MB (max {:.1}, slope {}), transactions max {:.0}, {:.1} µs CPU per call, PDD p50 {:.1} ms p99 {:.1} ms",
            i + 1,
            rates.len(),
            started.elapsed().as_secs_f64(),
            p.transport,
            p.completed,
            p.attempted,
            p.completed_ratio,
            p.r503,
            p.rss_start_mb,
            p.rss_end_mb,
            p.rss_max_mb,
            p.rss_slope_mb_per_min
                .map_or_else(|| "n/a".to_string(), |s| format!("{s:+.3} MB/min")),
            p.transactions_max,
            p.cpu_us_per_call,
            p.pdd_p50_ms,
            p.pdd_p99_ms
        );
        if attack.any() {
            eprintln!("    attack {}: {:?}", p.attack, p.attack_stats);
        }
        points.push(p);
    }
    let results = Results {
        run: RunHeader::new("soak", started, args.quick, transport.name()),
        duration_s: duration,
        arrivals: "poisson".into(),
        points,
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    write(&args.out, &results)?;
    Ok(results)
}

/// What one point is.
struct Spec {
    rate: f64,
    duration_s: f64,
    transport: Transport,
    tag: String,
    attack: Attack,
}

/// Runs one point with fresh processes: server, UAS, UAC; samples the server every second
/// while the UAC runs.
fn run_point_once(exe: &Path, runs: &Path, config: &Path, spec: &Spec) -> Result<Point> {
    let (port, uas_port, metrics_port) = (free_port()?, free_port()?, free_port()?);
    let tag = &spec.tag;
    let t = spec.transport.name();
    let limit = spec.duration_s + DRAIN_S + 5.0;

    let serve_log = runs.join(format!("{tag}-serve.log"));
    let mut serve_args: Vec<String> = vec![
        "serve".into(),
        format!("--config={}", config.display()),
        format!("--listen={t}:127.0.0.1:{port}"),
        format!("--route=*={t}:127.0.0.1:{uas_port}"),
        "--workers=1".into(),
        "--store=memory".into(),
        format!("--metrics=127.0.0.1:{metrics_port}"),
    ];
    if spec.attack.guesser.is_some() {
        serve_args.push(format!("--domain={ATTACK_DOMAIN}"));
    }
    let mut server = spawn(SERVER_CORE, exe, &serve_args, &serve_log)?;
    wait_bound(
        &mut server.0,
        port,
        Some(spec.transport),
        "holdline serve",
        &serve_log,
    )?;
    wait_metrics(&mut server, metrics_port, &serve_log)?;

    let mut uas = start_uas(exe, runs, tag, uas_port, spec.transport, false, limit + 3.0)?;

    let uac_json = runs.join(format!("{tag}-uac.json"));
    let uac_csv = runs.join(format!("{tag}-uac.csv"));
    let uac_log = runs.join(format!("{tag}-uac.log"));
    let _ = std::fs::remove_file(&uac_json);
    let pid = server.0.id();
    let mut samples = vec![sample(pid, metrics_port, 0.0)?];
    let t0 = Instant::now();
    let mut uac_args = vec![
        "load".into(),
        "uac".into(),
        format!("--transport={t}"),
        format!("--target=127.0.0.1:{port}"),
        format!("--rate={}", spec.rate),
        format!("--duration={}", spec.duration_s),
        format!("--drain={DRAIN_S}"),
        format!("--max-time={limit}"),
        format!("--json={}", uac_json.display()),
        format!("--csv={}", uac_csv.display()),
        "--progress=off".into(),
    ];
    if spec.transport == Transport::Tls {
        uac_args.push(crate::pki::Pki::in_dir(runs)?.uac_arg());
    }
    let mut uac = spawn(GENERATOR_CORE, exe, &uac_args, &uac_log)?;
    let attackers = spec.attack.start(runs, tag, port, spec.duration_s)?;
    progress(tag, &samples[0]);
    let deadline = t0 + Duration::from_secs_f64(limit + 5.0);
    let mut next = t0 + SAMPLE_EVERY;
    let exited = loop {
        match uac.0.try_wait() {
            Ok(Some(_)) | Err(_) => break true,
            Ok(None) => {}
        }
        if let Ok(Some(status)) = server.0.try_wait() {
            return Err(LabError::Process(format!(
                "{tag}: holdline serve exited ({status}) during the soak; log {}:\n{}",
                serve_log.display(),
                tail(&serve_log)
            )));
        }
        let now = Instant::now();
        if now >= deadline {
            break false;
        }
        if now >= next {
            let s = sample(pid, metrics_port, t0.elapsed().as_secs_f64())?;
            progress(tag, &s);
            samples.push(s);
            // The next tick on the 1 s grid (ticks missed by a slow scrape are skipped).
            while next <= Instant::now() {
                next += SAMPLE_EVERY;
            }
        }
        // Bounded poll of the UAC's exit between samples.
        std::thread::sleep(Duration::from_millis(20));
    };
    let window_s = t0.elapsed().as_secs_f64();
    let last = sample(pid, metrics_port, window_s)?;
    progress(tag, &last);
    samples.push(last);
    // What the attack cost, counted while the server still runs; the attackers stop here.
    let attack_text = spec.attack.any().then(|| scrape(metrics_port));
    drop(attackers);
    // The UAS writes its report on SIGTERM.
    terminate(&uas.0);
    wait_bounded(&mut uas.0, Duration::from_secs(5));
    drop(uac);
    drop(uas);
    drop(server);
    if !exited {
        return Err(LabError::Process(format!(
            "{tag}: the UAC overran its time limit; log {}:\n{}",
            uac_log.display(),
            tail(&uac_log)
        )));
    }
    let uac_r = read_json(&uac_json)?;
    let per_second = uac_rows(&uac_csv)?;
    let mut point = summarize(spec, &uac_r, samples, per_second, window_s);
    point.attack = spec.attack.label();
    if let Some(text) = attack_text {
        let all = families(&text);
        for (key, name, label) in ATTACK_METRICS {
            let v = if label.is_empty() {
                all.get(name).copied()
            } else {
                labelled(&text, name, label)
            };
            point.attack_stats.insert(key.into(), v.unwrap_or(0.0));
        }
        for name in ["scanner", "guesser"] {
            if let Some(n) = sipp_created(&runs.join(format!("{tag}-{name}.csv"))) {
                point.attack_stats.insert(format!("{name}_sent"), n);
            }
        }
    }
    Ok(point)
}

/// Waits (bounded, 5 s) until the server's `/metrics` answers.
fn wait_metrics(server: &mut Proc, port: u16, log: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if scrape(port).contains("holdline_") {
            return Ok(());
        }
        if let Ok(Some(status)) = server.0.try_wait() {
            return Err(LabError::Process(format!(
                "holdline serve exited ({status}); log {}:\n{}",
                log.display(),
                tail(log)
            )));
        }
        if Instant::now() >= deadline {
            return Err(LabError::Process(format!(
                "holdline serve: /metrics on port {port} not answering after 5 s"
            )));
        }
        // Bounded readiness poll of the metrics endpoint.
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One sample of the server `pid` with metrics on `port`.
fn sample(pid: u32, port: u16, t_s: f64) -> Result<Sample> {
    let status_path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&status_path)
        .map_err(|e| LabError::io(format!("read {status_path}"), e))?;
    let rss_kb = procfs::vm_rss_kb(&status).ok_or_else(|| {
        LabError::Process(format!("{status_path}: no VmRSS line (the server exited?)"))
    })?;
    let cpu_us = procfs::tree_cpu_us(pid);
    let text = scrape(port);
    let families = families(&text);
    Ok(Sample {
        t_s,
        rss_mb: rss_kb as f64 / 1024.0,
        cpu_s: cpu_us as f64 / 1e6,
        transactions: families.get("holdline_sip_active_transactions").copied(),
        calls: families.get("holdline_sip_active_calls").copied(),
        completed: labelled(&text, "holdline_sip_requests_in_total", "method=\"BYE\""),
        txn: families
            .into_iter()
            .filter(|(name, _)| TXN_PREFIXES.iter().any(|p| name.starts_with(p)))
            .collect(),
    })
}

/// Every metric of a Prometheus text exposition, by name, summed over its labels.
fn families(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(v) = value.parse::<f64>() else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series).trim();
        if name.starts_with("holdline_") && v.is_finite() {
            *out.entry(name.to_string()).or_insert(0.0) += v;
        }
    }
    out
}

/// Sum of the series of `name` whose labels contain `label` (`None` when there is none).
fn labelled(text: &str, name: &str, label: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines() {
        let Some((series, value)) = line.trim().rsplit_once(' ') else {
            continue;
        };
        let Some(labels) = series.strip_prefix(name) else {
            continue;
        };
        if labels.starts_with('{')
            && labels.contains(label)
            && let Ok(v) = value.parse::<f64>()
        {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

/// The progress line of one sample.
fn progress(tag: &str, s: &Sample) {
    let opt = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |v| format!("{v:.0}"));
    let mut line = format!(
        "soak {tag}: t={:>5.1} s  rss {:>7.1} MB  cpu {:>7.2} s  transactions {:>7}  calls {:>6}  completed {:>9}",
        s.t_s,
        s.rss_mb,
        s.cpu_s,
        opt(s.transactions),
        opt(s.calls),
        opt(s.completed)
    );
    for (name, v) in &s.txn {
        let _ = write!(line, "  {name} {v:.0}");
    }
    eprintln!("{line}");
}

/// The rows of a `holdline load` per-second CSV (the columns the soak needs).
pub(crate) fn uac_rows(csv: &Path) -> Result<Vec<UacSecond>> {
    let bad = |reason: String| LabError::Report {
        path: csv.to_owned(),
        reason,
    };
    let text = std::fs::read_to_string(csv).map_err(|e| bad(e.to_string()))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .ok_or_else(|| bad("empty".into()))?
        .split(',')
        .collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| bad(format!("no column {name}")))
    };
    let cols = [
        col("t_s")?,
        col("attempted")?,
        col("calls_ok")?,
        col("calls_failed")?,
        col("r503")?,
    ];
    let mut rows = Vec::new();
    for (i, line) in lines.enumerate() {
        let f: Vec<&str> = line.split(',').collect();
        let mut v = [0.0f64; 5];
        for (slot, &c) in v.iter_mut().zip(&cols) {
            *slot = f
                .get(c)
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| bad(format!("row {}: bad or missing field {c}", i + 2)))?;
        }
        rows.push(UacSecond {
            t_s: v[0],
            attempted: v[1],
            calls_ok: v[2],
            calls_failed: v[3],
            r503: v[4],
        });
    }
    Ok(rows)
}

/// The completed ratio per [`WINDOW_S`] window of `(0, duration]`; the last window also
/// takes the rows after the load (the drain).
fn windows(rows: &[UacSecond], duration: f64) -> Vec<Window> {
    let n = (duration / WINDOW_S).ceil().max(1.0) as usize;
    (0..n)
        .map(|k| {
            let from = k as f64 * WINDOW_S;
            let to = (from + WINDOW_S).min(duration);
            let last = k + 1 == n;
            let inside = |r: &&UacSecond| r.t_s > from + 1e-6 && (last || r.t_s <= to + 1e-6);
            let attempted: f64 = rows.iter().filter(inside).map(|r| r.attempted).sum();
            let completed: f64 = rows.iter().filter(inside).map(|r| r.calls_ok).sum();
            Window {
                from_s: from,
                to_s: to,
                attempted,
                completed,
                ratio: (attempted > 0.0).then(|| completed / attempted),
            }
        })
        .collect()
}

/// Least-squares slope of `(x, y)` (`None` with fewer than 3 points or no spread in x).
pub(crate) fn slope(points: &[(f64, f64)]) -> Option<f64> {
    if points.len() < 3 {
        return None;
    }
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// The point from the UAC's report, the samples and the UAC's per-second rows.
fn summarize(
    spec: &Spec,
    uac: &Value,
    samples: Vec<Sample>,
    per_second: Vec<UacSecond>,
    window_s: f64,
) -> Point {
    let attempted = count(uac, &["totals", "attempted"]);
    let completed = count(uac, &["totals", "calls_ok"]);
    let first = samples.first();
    let last = samples.last();
    let rss_start_mb = first.map_or(0.0, |s| s.rss_mb);
    let rss_end_mb = last.map_or(0.0, |s| s.rss_mb);
    let rss_max_mb = samples.iter().map(|s| s.rss_mb).fold(0.0, f64::max);
    let rss_32s_mb = samples
        .iter()
        .find(|s| s.t_s >= RSS_SETTLED_AT_S - 0.05 && s.t_s < RSS_SETTLED_AT_S + 1.5)
        .map(|s| s.rss_mb);
    let from = STEADY_FROM_S;
    let steady: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.t_s > from && s.t_s <= spec.duration_s + 0.5)
        .map(|s| (s.t_s / 60.0, s.rss_mb))
        .collect();
    let server_cpu_s = match (first, last) {
        (Some(a), Some(b)) => (b.cpu_s - a.cpu_s).max(0.0),
        _ => 0.0,
    };
    Point {
        rate: spec.rate,
        transport: spec.transport.name().into(),
        duration_s: spec.duration_s,
        offered_cps: num(uac, &["offered_cps"]),
        attempted,
        completed,
        failed: count(uac, &["totals", "calls_failed"]),
        r503: count(uac, &["totals", "r503"]),
        completed_ratio: if attempted > 0 {
            completed as f64 / attempted as f64
        } else {
            0.0
        },
        windows: windows(&per_second, spec.duration_s),
        rss_start_mb,
        rss_32s_mb,
        rss_max_mb,
        rss_end_mb,
        rss_slope_mb_per_min: slope(&steady),
        rss_slope_from_s: from,
        transactions_max: samples
            .iter()
            .filter_map(|s| s.transactions)
            .fold(0.0, f64::max),
        server_cpu_s,
        server_busy: server_cpu_s / window_s.max(1e-3),
        cpu_us_per_call: if completed > 0 {
            server_cpu_s * 1e6 / completed as f64
        } else {
            0.0
        },
        pdd_p50_ms: num(uac, &["pdd_p50_ms"]),
        pdd_p99_ms: num(uac, &["pdd_p99_ms"]),
        window_s,
        samples,
        per_second,
        attack: String::new(),
        attack_stats: BTreeMap::new(),
    }
}

/// Rewrites `samples.csv` and the plots from `DIR/results.json`.
fn replot(out: &Path) -> Result<Results> {
    let r: Results = crate::runner::read_results(out)?;
    write(out, &r)?;
    Ok(r)
}

/// The legend name of a point.
fn label(p: &Point) -> String {
    if p.attack.is_empty() || p.attack == "none" {
        format!("{:.0} calls/s {}", p.rate, p.transport)
    } else {
        format!("{:.0} calls/s {}, attack {}", p.rate, p.transport, p.attack)
    }
}

/// `samples.csv`: one row per point per second; the transaction metrics any sample has get
/// a column each (empty where a sample lacks it).
fn samples_csv(r: &Results) -> String {
    let extra: BTreeSet<&str> = r
        .points
        .iter()
        .flat_map(|p| &p.samples)
        .flat_map(|s| s.txn.keys().map(String::as_str))
        .collect();
    let mut csv = String::from("rate,transport,t_s,rss_mb,cpu_s,transactions,calls,completed");
    for name in &extra {
        csv.push(',');
        csv.push_str(name);
    }
    csv.push('\n');
    let opt = |x: Option<f64>| x.map_or_else(String::new, |v| format!("{v}"));
    for p in &r.points {
        for s in &p.samples {
            let _ = write!(
                csv,
                "{},{},{:.3},{:.3},{:.3},{},{},{}",
                p.rate,
                p.transport,
                s.t_s,
                s.rss_mb,
                s.cpu_s,
                opt(s.transactions),
                opt(s.calls),
                opt(s.completed)
            );
            for name in &extra {
                csv.push(',');
                csv.push_str(&opt(s.txn.get(*name).copied()));
            }
            csv.push('\n');
        }
    }
    csv
}

/// Writes `results.json`, `samples.csv` and the plots.
fn write(out: &Path, r: &Results) -> Result<()> {
    std::fs::create_dir_all(out)
        .map_err(|e| LabError::io(format!("create {}", out.display()), e))?;
    let json = serde_json::to_string_pretty(r).map_err(|e| LabError::Report {
        path: out.join("results.json"),
        reason: e.to_string(),
    })?;
    std::fs::write(out.join("results.json"), json)
        .map_err(|e| LabError::io("write results.json", e))?;
    std::fs::write(out.join("samples.csv"), samples_csv(r))
        .map_err(|e| LabError::io("write samples.csv", e))?;
    let series = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<(String, Vec<(f64, f64)>)> {
        r.points
            .iter()
            .map(|p| {
                (
                    label(p),
                    p.samples
                        .iter()
                        .filter_map(|s| f(s).map(|y| (s.t_s, y)))
                        .collect(),
                )
            })
            .collect()
    };
    let what = format!(
        "{}, one worker, {:.0} s of load",
        r.run.transport, r.duration_s
    );
    plot::chart(
        out,
        "rss",
        &format!("Server RSS over time ({what})"),
        "seconds since the load started",
        "RSS, MiB",
        &series(&|s| Some(s.rss_mb)),
    )?;
    plot::chart(
        out,
        "transactions",
        &format!("Server transactions in memory over time ({what})"),
        "seconds since the load started",
        "holdline_sip_active_transactions",
        &series(&|s| s.transactions),
    )?;
    let completed: Vec<(String, Vec<(f64, f64)>)> = r
        .points
        .iter()
        .map(|p| {
            (
                label(p),
                p.per_second.iter().map(|s| (s.t_s, s.calls_ok)).collect(),
            )
        })
        .collect();
    plot::chart(
        out,
        "completed",
        &format!("Calls completed per second at the UAC ({what})"),
        "seconds since the load started",
        "calls/s",
        &completed,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_families_sum_labels_and_keep_only_present_ones() {
        let text = "# HELP x y\n\
                    holdline_sip_active_transactions{worker=\"0\"} 10\n\
                    holdline_sip_active_transactions{worker=\"1\"} 5\n\
                    holdline_txn_lingering{worker=\"0\"} 7\n\
                    holdline_sip_requests_in_total{worker=\"0\",method=\"BYE\"} 42\n\
                    holdline_sip_requests_in_total{worker=\"0\",method=\"INVITE\"} 50\n";
        let f = families(text);
        assert_eq!(f.get("holdline_sip_active_transactions"), Some(&15.0));
        assert_eq!(f.get("holdline_txn_lingering"), Some(&7.0));
        assert_eq!(f.get("holdline_txn_memory_bytes"), None);
        assert_eq!(
            labelled(text, "holdline_sip_requests_in_total", "method=\"BYE\""),
            Some(42.0)
        );
        assert_eq!(
            labelled(text, "holdline_sip_requests_in_total", "method=\"CANCEL\""),
            None
        );
    }

    #[test]
    fn slope_of_a_line_and_of_too_few_points() {
        let pts: Vec<(f64, f64)> = (0..10)
            .map(|i| (f64::from(i), 3.0 + 0.5 * f64::from(i)))
            .collect();
        let s = slope(&pts).expect("slope");
        assert!((s - 0.5).abs() < 1e-9, "{s}");
        assert_eq!(slope(&pts[..2]), None);
        assert_eq!(slope(&[(1.0, 1.0), (1.0, 2.0), (1.0, 3.0)]), None);
    }

    #[test]
    fn windows_cover_the_load_and_the_drain() {
        let rows: Vec<UacSecond> = (1..=25)
            .map(|t| UacSecond {
                t_s: f64::from(t),
                attempted: if t <= 20 { 10.0 } else { 0.0 },
                calls_ok: match t {
                    1 => 9.0,
                    2..=21 => 10.0,
                    _ => 0.0,
                },
                calls_failed: 0.0,
                r503: 0.0,
            })
            .collect();
        let w = windows(&rows, 20.0);
        assert_eq!(w.len(), 2);
        assert_eq!((w[0].attempted, w[0].completed), (100.0, 99.0));
        // The second window takes the call completed in the drain (t = 21).
        assert_eq!((w[1].attempted, w[1].completed), (100.0, 110.0));
    }
}
