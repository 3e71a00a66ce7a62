//! `holdline lab vrrp`: IP takeover with VRRP (keepalived) under load, and a `kill -9` drill
//! (issue 18, item 6).
//!
//! As root, the lab builds a small network out of network namespaces of its own (names
//! `hlv<PID>-…`, deleted at the end, on error too):
//!
//! ```text
//!   hlv<PID>-sw: bridge br0 ── veth ── hlv<PID>-a  10.201.0.11  holdline A + keepalived A
//!                          ├── veth ── hlv<PID>-b  10.201.0.12  holdline B + keepalived B
//!                          ├── veth ── hlv<PID>-r  10.201.0.5   redis-server
//!                          └── veth ── hlv<PID>-c  10.201.0.100 the phones (holdline load)
//!   VIP 10.201.0.10/24: on A (VRRP master) until A's holdline dies, then on B
//! ```
//!
//! - **holdline** on A and B: `holdline serve --listen udp:VIP:5060` with
//!   `net.ipv4.ip_nonlocal_bind = 1` in their namespaces, so both are bound to the VIP before
//!   they hold it: the one that holds it gets the VIP's packets, and everything it sends
//!   leaves from the VIP (its Via and Record-Route name the VIP too;
//!   `--record-route-host VIP` says so explicitly). `--domain example.com`, one shared
//!   location store on Redis (`redis://10.201.0.5:6379/0?namespace=vrrp-<PID>`): B holds every
//!   binding A wrote. `/metrics` on each server's own address (port 9090). A configuration
//!   file (`runs/holdline.toml`) trusts the phones' address: it stands for thousands of
//!   phones, and the per-source flood protection, which exempts only trusted sources, would
//!   otherwise ignore it for 10 s each time it sends more than 1,000 requests in 2 s (the
//!   first full run, before this: 79% of
//!   the calls failed, before the kill too).
//! - **keepalived** in A's and B's namespaces (`--vrrp --dont-fork --log-console`, their own
//!   configuration and pid files under `runs/`): VRRP version 3 with `advert_int 0.1`
//!   (fractional intervals need version 3), both `state BACKUP` with `nopreempt`, A at
//!   priority 150 and started first, B at 100. A `vrrp_script` health check of the local
//!   holdline: `GET /metrics` on its own address must answer `200` within 0.5 s, every 1 s
//!   (keepalived 2.2's shortest script interval), `fall 1`, `rise 2`. A killed holdline refuses
//!   the connection at once, so one check fails: the master goes to FAULT, drops the VIP and
//!   sends a priority-0 advert, and B takes over after its skew time ((256 - 100) / 256 ×
//!   0.1 s ≈ 61 ms) and sends gratuitous ARPs. keepalived's event-driven `track_process`
//!   would see a death at once but cannot run inside a network namespace (the kernel's
//!   process-event connector exists only in the initial one); see docs/scaling.md.
//! - **The phones**, in the client namespace, all through the VIP: `holdline load uas
//!   --register N` (the called users, registered before the drill), `holdline load register
//!   --refresh S --acked FILE` (a population re-REGISTERing during the whole drill) and
//!   `holdline load uac --hold fixed:H` (calls to the UAS's users).
//!
//! The drill: at `--kill-at` seconds the lab sends SIGKILL to A's holdline (by its PID). Two
//! threads watch the VIP on A and B every 20 ms (the namespaces' addresses, read with
//! `getifaddrs` from a thread inside each namespace), and a third sends an `OPTIONS` to the
//! VIP every 20 ms from the client namespace: the takeover time is the kill to the VIP on B,
//! the service restored time the kill to the first answered OPTIONS sent after it. At the end
//! the lab asks the VIP (B by then) for the bindings of every user (a REGISTER without
//! Contact, RFC 3261 §10.2.3, per user of the `--acked` file and of the UAS), counts the
//! Redis keys `holdline:<namespace>:aor:*` (`redis-cli --scan`) and reads B's
//! `holdline_store_bindings`.
//!
//! Output in `--out DIR`: `results.json`, `timeline.csv` (per second: calls placed, answered
//! and failed, REGISTERs answered 200 and failed, OPTIONS probes answered, which server holds
//! the VIP), `summary.md`, `timeline.svg/png` (the kill marked), `takeover.svg/png` (the
//! OPTIONS probes answered per 100 ms from 1 s before the kill to 3 s after it) and every
//! process's log and report, the keepalived and check files under `runs/`.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use serde::Serialize;

use holdline_netem::netns::{self, Netns};

use crate::error::{LabError, Result};
use crate::generator::{count, num, read_json};
use crate::plot;
use crate::runner::{RunHeader, holdline_exe, is_root, lab_main, metric, require};
use crate::wan::in_ns;

/// The domain the servers serve.
const DOMAIN: &str = "example.com";
/// The virtual IP address, on A or B.
const VIP: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 10);
/// Server A's own address.
const ADDR_A: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 11);
/// Server B's own address.
const ADDR_B: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 12);
/// Redis's address.
const ADDR_REDIS: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 5);
/// The phones' address.
const ADDR_CLIENT: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 100);
/// Prefix length of the lab's subnet, 10.201.0.0/24.
const PREFIX: u8 = 24;
/// SIP port of both servers (on the VIP).
const SIP_PORT: u16 = 5060;
/// `/metrics` port of both servers (on their own addresses).
const METRICS_PORT: u16 = 9090;
/// Redis's port.
const REDIS_PORT: u16 = 6379;
/// The UAS's port in the client namespace.
const UAS_PORT: u16 = 5070;
/// The VRRP virtual router id.
const VRID: u8 = 51;
/// keepalived priorities: A (the first master) and B.
const PRIORITY_A: u8 = 150;
/// B's priority.
const PRIORITY_B: u8 = 100;
/// How often the VIP watchers and the OPTIONS prober look.
const POLL: Duration = Duration::from_millis(20);
/// The drill's progress line comes this often.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// The issue's bound on the time to restore service, seconds.
const RESTORE_BOUND_S: f64 = 2.0;
/// The issue's bound on the share of calls failed around the failover.
const FAILED_BOUND: f64 = 0.01;
/// Bindings queried at once after the drill.
const QUERY_WINDOW: usize = 64;
/// A binding query is sent again after this long without an answer.
const QUERY_RESEND: Duration = Duration::from_millis(500);
/// ... at most this many times.
const QUERY_TRIES: u32 = 6;
/// REGISTERs per second of the UAS's users before the drill.
const UAS_REGISTER_RATE: f64 = 1000.0;
/// The zoomed plot starts this long before the kill ...
const ZOOM_BEFORE_S: f64 = 1.0;
/// ... and ends this long after it.
const ZOOM_AFTER_S: f64 = 3.0;
/// Its bins.
const ZOOM_BIN: Duration = Duration::from_millis(100);
/// Width of the kill mark at its base, as a share of the plot's time axis.
const KILL_MARK_WIDTH: f64 = 0.004;

/// `holdline lab vrrp` options.
#[derive(Debug, Parser)]
#[command(
    name = "holdline lab vrrp",
    about = "IP takeover with VRRP (keepalived) in network namespaces: kill -9 of the active holdline under calls and re-REGISTERs; takeover time, calls failed, registrations lost"
)]
pub(crate) struct Args {
    /// A short, light drill (about 30 s in all).
    #[arg(long)]
    pub quick: bool,
    /// Where results go (no whitespace or quotes: keepalived's configuration names files in
    /// it).
    #[arg(long, value_name = "DIR", default_value = "lab-results/vrrp")]
    pub out: PathBuf,
    /// Seconds of load (calls and re-REGISTERs); default 60, `--quick` 14.
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,
    /// When A's holdline is killed, seconds after the load started; default half of
    /// `--duration`.
    #[arg(long, value_name = "S")]
    pub kill_at: Option<f64>,
    /// Calls per second (Poisson); default 150, `--quick` 40.
    #[arg(long, value_name = "CPS")]
    pub rate: Option<f64>,
    /// Holding time of every call, seconds.
    #[arg(long, value_name = "S", default_value_t = 2.0)]
    pub hold: f64,
    /// Users the UAS registers (the called users); default 2000, `--quick` 100.
    #[arg(long, value_name = "N")]
    pub users: Option<u64>,
    /// Users of the re-REGISTERing population; default 3000, `--quick` 200.
    #[arg(long, value_name = "N")]
    pub reg_users: Option<u64>,
    /// Each of them re-REGISTERs this long after its last success, seconds; default 15,
    /// `--quick` 4.
    #[arg(long, value_name = "S")]
    pub refresh: Option<f64>,
    /// New registrations per second of the population's first round (default: users /
    /// refresh, so that REGISTERs flow evenly all along).
    #[arg(long, value_name = "N")]
    pub register_rate: Option<f64>,
    /// VRRP advertisement interval, seconds (VRRPv3: centiseconds).
    #[arg(long, value_name = "S", default_value_t = 0.1)]
    pub advert_int: f64,
    /// Seconds between two health checks of the local holdline (keepalived 2.2: at least
    /// 1, whole seconds).
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub check_interval: u32,
    /// Failed checks in a row that take a server's VRRP instance down.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub fall: u32,
    /// Passed checks in a row that bring it back.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub rise: u32,
    /// Worker threads of each `holdline serve`.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub workers: u32,
    /// The `holdline` binary to run (default: this one).
    #[arg(long, value_name = "PATH")]
    pub exe: Option<PathBuf>,
}

/// The drill's parameters, defaults applied.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Plan {
    /// The VIP.
    pub vip: String,
    /// Server A's and B's own addresses.
    pub server_a: String,
    /// Server B's own address.
    pub server_b: String,
    /// Redis's address.
    pub redis: String,
    /// The phones' address.
    pub client: String,
    /// Seconds of load.
    pub duration_s: f64,
    /// Kill instant, seconds after the load started.
    pub kill_at_s: f64,
    /// Calls per second.
    pub rate_cps: f64,
    /// Holding time, seconds.
    pub hold_s: f64,
    /// Users registered by the UAS (called).
    pub users: u64,
    /// Users of the re-REGISTERing population.
    pub reg_users: u64,
    /// Their refresh interval, seconds.
    pub refresh_s: f64,
    /// Their first round's rate.
    pub register_rate: f64,
    /// VRRP advertisement interval, seconds.
    pub advert_int_s: f64,
    /// Health check interval, seconds.
    pub check_interval_s: u32,
    /// Health check `fall`.
    pub fall: u32,
    /// Health check `rise`.
    pub rise: u32,
    /// Workers per server.
    pub workers: u32,
    /// The shared store's URL.
    pub store: String,
}

/// One change of the VIP's place.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct VipChange {
    /// Seconds since the load started (negative: before).
    pub t_s: f64,
    /// `A` or `B`.
    pub server: String,
    /// Whether the VIP was added (true) or removed.
    pub has_vip: bool,
}

/// Calls, from the UAC's report.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Calls {
    /// Calls placed.
    pub attempted: u64,
    /// Calls that ended cleanly (200, ACK, BYE, 200).
    pub ok: u64,
    /// Calls that ended without a 200 or whose BYE failed.
    pub failed: u64,
    /// 503s received.
    pub r503: u64,
    /// Timer B/F expiries.
    pub timeouts: u64,
    /// INVITE retransmissions.
    pub retrans_invite: u64,
    /// BYE retransmissions.
    pub retrans_bye: u64,
    /// Calls in progress at the kill or placed until a second after service came back
    /// (placed from `kill - hold - 1 s` to `kill + restored + 1 s`).
    pub around_failover: u64,
    /// `failed / around_failover` (every failure counted, wherever it happened).
    pub failed_share_around_failover: f64,
    /// `failed / attempted`.
    pub failed_share: f64,
    /// Post-dial delay p50, ms.
    pub pdd_p50_ms: f64,
    /// Post-dial delay p99, ms.
    pub pdd_p99_ms: f64,
    /// Post-dial delay max, ms.
    pub pdd_max_ms: f64,
}

/// REGISTERs of the refreshing population, from its report.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Registrations {
    /// REGISTER transactions.
    pub sent: u64,
    /// Answered 2xx.
    pub ok: u64,
    /// Answered 5xx, other failures, or timed out.
    pub failed: u64,
    /// 5xx answers.
    pub r5xx: u64,
    /// Timer F expiries.
    pub timeouts: u64,
    /// REGISTER retransmissions.
    pub retransmissions: u64,
    /// Users a 2xx answered at least once (lines of the `--acked` file).
    pub acked_users: u64,
    /// REGISTER latency p99, ms.
    pub p99_ms: f64,
    /// REGISTER latency max, ms.
    pub max_ms: f64,
}

/// The check of every binding after the drill.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Bindings {
    /// Users expected to have a binding: the population's acknowledged users and the UAS's.
    pub expected: u64,
    /// Of them, answered with a Contact by the VIP's holder (B) to a REGISTER query.
    pub found_on_backup: u64,
    /// Expected users without a binding on the backup.
    pub lost: u64,
    /// Up to 20 of them.
    pub lost_examples: Vec<String>,
    /// Queries never answered (counted as lost).
    pub unanswered_queries: u64,
    /// Expected users without a key in Redis.
    pub missing_in_redis: u64,
    /// Keys `holdline:<namespace>:aor:*` in Redis.
    pub redis_keys: u64,
    /// B's `holdline_store_bindings` after the drill.
    pub backup_store_bindings: f64,
}

/// One second of the drill.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Second {
    /// End of the second, seconds since the load started.
    pub t_s: f64,
    /// Calls placed.
    pub calls_attempted: u64,
    /// 200s to INVITE received.
    pub calls_200: u64,
    /// Calls that ended well.
    pub calls_ok: u64,
    /// Calls that failed.
    pub calls_failed: u64,
    /// REGISTER transactions sent.
    pub reg_sent: u64,
    /// REGISTERs answered 2xx.
    pub reg_ok: u64,
    /// REGISTERs failed (5xx, other, timeout).
    pub reg_failed: u64,
    /// OPTIONS probes sent (by the lab, to the VIP).
    pub options_sent: u64,
    /// Of them, answered.
    pub options_answered: u64,
    /// Who holds the VIP at the end of the second: `A`, `B`, `-` or `A+B`.
    pub vip: String,
}

/// OPTIONS probes sent in one 100 ms bin around the kill.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ProbeBin {
    /// Start of the bin, seconds since the load started.
    pub t_s: f64,
    /// Probes sent in it.
    pub sent: u64,
    /// Share of them answered, percent.
    pub answered_percent: f64,
}

/// Whether the issue's done-when holds.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Verdict {
    /// At most 1% of the calls in progress or arriving around the failover failed.
    pub calls: bool,
    /// Every acknowledged binding found on the backup.
    pub bindings: bool,
    /// Service restored within 2 s of the kill.
    pub restored_within_2s: bool,
}

/// Everything `results.json` holds.
#[derive(Debug, Serialize)]
pub(crate) struct Results {
    #[serde(flatten)]
    header: RunHeader,
    /// The drill's parameters.
    pub plan: Plan,
    /// The killed holdline's PID.
    pub killed_pid: u32,
    /// When it was killed, seconds since the load started.
    pub killed_at_s: f64,
    /// Whether A held the VIP right before the kill.
    pub vip_on_a_at_kill: bool,
    /// Whether the VIP ended on B.
    pub vip_moved_to_b: bool,
    /// Kill → the VIP removed from A, seconds.
    pub vip_left_a_s: Option<f64>,
    /// Kill → the VIP on B, seconds (the takeover time).
    pub takeover_s: Option<f64>,
    /// Kill → first answer to an OPTIONS sent to the VIP after the kill, seconds.
    pub service_restored_s: Option<f64>,
    /// OPTIONS probes sent to the VIP.
    pub options_sent: u64,
    /// OPTIONS probes sent after the kill and never answered.
    pub options_lost_after_kill: u64,
    /// Calls.
    pub calls: Calls,
    /// The re-REGISTERing population.
    pub registrations: Registrations,
    /// Bindings after the drill.
    pub bindings: Bindings,
    /// Every change of the VIP's place.
    pub vip_changes: Vec<VipChange>,
    /// Per second.
    pub timeline: Vec<Second>,
    /// Around the kill, per 100 ms: the OPTIONS probes sent and the share answered.
    pub probe_bins: Vec<ProbeBin>,
    /// The done-when.
    pub verdict: Verdict,
    /// Seconds the whole run took.
    pub elapsed_s: f64,
}

/// Runs `holdline lab vrrp ARGS`.
pub(crate) fn main(args: Vec<String>) -> ExitCode {
    lab_main::<Args, Results>("vrrp", args, |a| a.out.clone(), run, |r| r.elapsed_s)
}

// ---------------------------------------------------------------------------------------
// Namespaces and processes

/// Runs `ip ARGS` (holdline-netem's); an error carries its stderr.
fn ip(args: &[&str]) -> Result<()> {
    netns::ip(args).map_err(|e| LabError::Process(e.to_string()))
}

/// The namespace names of this run.
#[derive(Clone)]
struct Names {
    sw: String,
    a: String,
    b: String,
    redis: String,
    client: String,
}

impl Names {
    fn new(pid: u32) -> Self {
        let n = |s: &str| format!("hlv{pid}-{s}");
        Self {
            sw: n("sw"),
            a: n("a"),
            b: n("b"),
            redis: n("r"),
            client: n("c"),
        }
    }
}

/// Creates the namespaces, the bridge and the veth pairs, and sets the addresses. Every veth
/// pair is created inside the switch namespace with its peer in the node's: nothing of the
/// lab's ever lives in the initial namespace.
fn build_network(names: &Names, netns: &mut Netns) -> Result<()> {
    netns.add(&names.sw)?;
    ip(&["-n", &names.sw, "link", "add", "br0", "type", "bridge"])?;
    ip(&["-n", &names.sw, "link", "set", "br0", "up"])?;
    ip(&["-n", &names.sw, "link", "set", "lo", "up"])?;
    for (ns, port, addr) in [
        (&names.a, "va", ADDR_A),
        (&names.b, "vb", ADDR_B),
        (&names.redis, "vr", ADDR_REDIS),
        (&names.client, "vc", ADDR_CLIENT),
    ] {
        netns.add(ns)?;
        ip(&[
            "-n", &names.sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns",
            ns,
        ])?;
        ip(&["-n", &names.sw, "link", "set", port, "master", "br0"])?;
        ip(&["-n", &names.sw, "link", "set", port, "up"])?;
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
        ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{addr}/{PREFIX}"),
            "dev",
            "eth0",
        ])?;
        ip(&["-n", ns, "link", "set", "eth0", "up"])?;
    }
    // holdline on A and B binds the VIP whether or not its namespace holds it.
    for ns in [&names.a, &names.b] {
        let ns2 = ns.clone();
        in_ns(ns, move || {
            std::fs::write("/proc/sys/net/ipv4/ip_nonlocal_bind", "1")
                .map_err(|e| LabError::io(format!("{ns2}: net.ipv4.ip_nonlocal_bind = 1"), e))
        })??;
    }
    Ok(())
}

/// A process started in a namespace (`ip netns exec NS PROGRAM …`: `ip` execs the program,
/// so the child's PID is the program's), stopped by its PID when dropped: SIGTERM first
/// (bounded) when `term_first`, then SIGKILL.
struct NsProc {
    child: Child,
    what: String,
    log: PathBuf,
    term_first: bool,
}

impl NsProc {
    fn spawn(
        ns: &str,
        program: &Path,
        args: &[String],
        log: &Path,
        what: &str,
        term_first: bool,
    ) -> Result<Self> {
        let out =
            File::create(log).map_err(|e| LabError::io(format!("create {}", log.display()), e))?;
        let err = out
            .try_clone()
            .map_err(|e| LabError::io(format!("open {}", log.display()), e))?;
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| LabError::io(format!("start {what}"), e))?;
        Ok(Self {
            child,
            what: what.to_owned(),
            log: log.to_owned(),
            term_first,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// An error unless the process still runs (with its log's tail).
    fn alive(&mut self) -> Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(LabError::Process(format!(
                "{} exited ({status}); log {}:\n{}",
                self.what,
                self.log.display(),
                crate::server::tail(&self.log)
            ))),
            Err(e) => Err(LabError::io(format!("wait for {}", self.what), e)),
        }
    }

    /// Whether it exited by itself.
    fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL (by PID) and reap.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, up to `limit` for it to exit, then SIGKILL.
    fn stop(&mut self, limit: Duration) {
        if self.exited() {
            return;
        }
        crate::generator::terminate(&self.child);
        crate::generator::wait_bounded(&mut self.child, limit);
        self.kill();
    }
}

impl Drop for NsProc {
    fn drop(&mut self) {
        if self.term_first {
            self.stop(Duration::from_secs(3));
        }
        self.kill();
    }
}

/// Waits (bounded) until `ready()` says so, failing early when `p` exits.
fn wait_until(
    p: &mut NsProc,
    limit: Duration,
    what: &str,
    mut ready: impl FnMut() -> bool,
) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        if ready() {
            return Ok(());
        }
        p.alive()?;
        if Instant::now() >= deadline {
            return Err(LabError::Process(format!(
                "{what}: not ready after {:.0} s; log {}:\n{}",
                limit.as_secs_f64(),
                p.log.display(),
                crate::server::tail(&p.log)
            )));
        }
        // Bounded readiness poll.
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------------------
// Looking into the namespaces

/// Whether this thread's namespace has `addr` on an interface (`None`: could not tell).
fn has_addr(addr: Ipv4Addr) -> Option<bool> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = false;
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: a non-null ifa_addr points to a sockaddr of the family it names; an
            // AF_INET one is a sockaddr_in.
            let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
            if family == libc::AF_INET {
                // SAFETY: as above.
                let sin = unsafe { &*ifa.ifa_addr.cast::<libc::sockaddr_in>() };
                if u32::from_be(sin.sin_addr.s_addr) == u32::from(addr) {
                    found = true;
                }
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: frees the list getifaddrs allocated, once.
    unsafe { libc::freeifaddrs(list) };
    Some(found)
}

/// Whether namespace `ns` holds the VIP now.
fn vip_in(ns: &str) -> bool {
    in_ns(ns, || has_addr(VIP).unwrap_or(false)).unwrap_or(false)
}

/// A thread that looks at namespace `ns`'s addresses every [`POLL`] until `stop` (or
/// `limit`), recording every change of "holds the VIP" with its instant.
fn watch_vip(
    ns: &str,
    stop: Arc<AtomicBool>,
    limit: Duration,
) -> std::thread::JoinHandle<std::io::Result<Vec<(Instant, bool)>>> {
    let ns = ns.to_owned();
    std::thread::spawn(move || {
        netns::enter(&ns)?;
        let deadline = Instant::now() + limit;
        let mut changes = Vec::new();
        let mut last = None;
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            if let Some(now) = has_addr(VIP)
                && last != Some(now)
            {
                changes.push((Instant::now(), now));
                last = Some(now);
            }
            // Bounded poll of the namespace's addresses.
            std::thread::sleep(POLL);
        }
        Ok(changes)
    })
}

/// One OPTIONS probe: when it was sent and when (if) it was answered.
#[derive(Debug, Clone, Copy)]
struct Probe {
    sent: Instant,
    answered: Option<Instant>,
}

/// The `Call-ID` number of a SIP message whose Call-ID is `{prefix}{N}@…`.
fn call_id_number(msg: &str, prefix: &str) -> Option<usize> {
    msg.lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            let name = name.trim();
            (name.eq_ignore_ascii_case("call-id") || name.eq_ignore_ascii_case("i"))
                .then(|| value.trim())
        })
        .and_then(|v| v.strip_prefix(prefix))
        .and_then(|v| v.split('@').next())
        .and_then(|n| n.parse().ok())
}

/// The status code of a SIP response.
fn status_code(msg: &str) -> Option<u16> {
    msg.strip_prefix("SIP/2.0 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok())
}

/// A thread in the client namespace sending an OPTIONS to the VIP every [`POLL`] until
/// `stop` (or `limit`), recording each probe's answer.
fn probe_vip(
    ns: &str,
    stop: Arc<AtomicBool>,
    limit: Duration,
) -> std::thread::JoinHandle<std::io::Result<Vec<Probe>>> {
    let ns = ns.to_owned();
    std::thread::spawn(move || {
        netns::enter(&ns)?;
        let sock = UdpSocket::bind((ADDR_CLIENT, 0))?;
        let port = sock.local_addr()?.port();
        sock.set_read_timeout(Some(Duration::from_millis(2)))?;
        let target = SocketAddr::from((VIP, SIP_PORT));
        let deadline = Instant::now() + limit;
        let mut probes: Vec<Probe> = Vec::new();
        let mut next = Instant::now();
        let mut buf = vec![0u8; 65_536];
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            if Instant::now() >= next {
                let n = probes.len();
                let msg = format!(
                    "OPTIONS sip:{VIP}:{SIP_PORT} SIP/2.0\r\n\
                     Via: SIP/2.0/UDP {ADDR_CLIENT}:{port};branch=z9hG4bK-vrrp-probe-{n};rport\r\n\
                     Max-Forwards: 70\r\n\
                     From: <sip:probe@{ADDR_CLIENT}>;tag=vrrp-probe\r\n\
                     To: <sip:{VIP}:{SIP_PORT}>\r\n\
                     Call-ID: vrrp-probe-{n}@{ADDR_CLIENT}\r\n\
                     CSeq: 1 OPTIONS\r\n\
                     Content-Length: 0\r\n\r\n"
                );
                // A send error (no route for a moment) is a probe not answered.
                let _ = sock.send_to(msg.as_bytes(), target);
                probes.push(Probe {
                    sent: Instant::now(),
                    answered: None,
                });
                next += POLL;
            }
            match sock.recv_from(&mut buf) {
                Ok((len, _)) => {
                    let text = String::from_utf8_lossy(&buf[..len]);
                    if status_code(&text).is_some_and(|c| c >= 200)
                        && let Some(n) = call_id_number(&text, "vrrp-probe-")
                        && let Some(p) = probes.get_mut(n)
                        && p.answered.is_none()
                    {
                        p.answered = Some(Instant::now());
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::ConnectionRefused
                    ) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(probes)
    })
}

/// Asks the VIP's holder for the bindings of every user of `aors` (a REGISTER without
/// Contact each, at most [`QUERY_WINDOW`] at a time, each sent again after
/// [`QUERY_RESEND`] up to [`QUERY_TRIES`] times); per user, `Some(true)` when the 200 lists
/// a Contact, `Some(false)` when it lists none, `None` when never answered 200.
fn query_bindings(ns: &str, aors: Vec<String>) -> Result<Vec<Option<bool>>> {
    in_ns(ns, move || -> std::io::Result<Vec<Option<bool>>> {
        let sock = UdpSocket::bind((ADDR_CLIENT, 0))?;
        let port = sock.local_addr()?.port();
        sock.set_read_timeout(Some(Duration::from_millis(5)))?;
        let target = SocketAddr::from((VIP, SIP_PORT));
        let mut result: Vec<Option<bool>> = vec![None; aors.len()];
        // Per user: tries so far and when the last was sent.
        let mut sent: Vec<(u32, Option<Instant>)> = vec![(0, None); aors.len()];
        let mut next_new = 0usize;
        let mut open: Vec<usize> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut buf = vec![0u8; 65_536];
        let send = |i: usize, tries: u32| -> std::io::Result<()> {
            let aor = &aors[i];
            let msg = format!(
                "REGISTER sip:{DOMAIN} SIP/2.0\r\n\
                 Via: SIP/2.0/UDP {ADDR_CLIENT}:{port};branch=z9hG4bK-vrrp-q-{i}-{tries};rport\r\n\
                 Max-Forwards: 70\r\n\
                 From: <sip:{aor}>;tag=vrrp-q\r\n\
                 To: <sip:{aor}>\r\n\
                 Call-ID: vrrp-q-{i}@{ADDR_CLIENT}\r\n\
                 CSeq: {} REGISTER\r\n\
                 Content-Length: 0\r\n\r\n",
                tries + 1
            );
            sock.send_to(msg.as_bytes(), target).map(|_| ())
        };
        while (next_new < aors.len() || !open.is_empty()) && Instant::now() < deadline {
            while open.len() < QUERY_WINDOW && next_new < aors.len() {
                send(next_new, 0)?;
                sent[next_new] = (1, Some(Instant::now()));
                open.push(next_new);
                next_new += 1;
            }
            match sock.recv_from(&mut buf) {
                Ok((len, _)) => {
                    let text = String::from_utf8_lossy(&buf[..len]);
                    if let (Some(code), Some(i)) =
                        (status_code(&text), call_id_number(&text, "vrrp-q-"))
                        && code == 200
                        && i < result.len()
                        && result[i].is_none()
                    {
                        let contact = text.lines().skip(1).any(|l| {
                            l.split_once(':').is_some_and(|(n, _)| {
                                let n = n.trim();
                                n.eq_ignore_ascii_case("contact") || n.eq_ignore_ascii_case("m")
                            })
                        });
                        result[i] = Some(contact);
                        open.retain(|&j| j != i);
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(e),
            }
            let now = Instant::now();
            let mut gave_up = Vec::new();
            for &i in &open {
                let (tries, last) = sent[i];
                if last.is_some_and(|t| now.duration_since(t) >= QUERY_RESEND) {
                    if tries >= QUERY_TRIES {
                        gave_up.push(i);
                    } else {
                        send(i, tries)?;
                        sent[i] = (tries + 1, Some(now));
                    }
                }
            }
            open.retain(|i| !gave_up.contains(i));
        }
        Ok(result)
    })?
    .map_err(|e| LabError::io("query the bindings through the VIP", e))
}

/// `GET /metrics` of the server at `addr` from inside namespace `ns` (empty on failure).
fn scrape_in(ns: &str, addr: Ipv4Addr) -> String {
    in_ns(ns, move || {
        let Ok(mut s) = TcpStream::connect_timeout(
            &SocketAddr::from((addr, METRICS_PORT)),
            Duration::from_secs(2),
        ) else {
            return String::new();
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n");
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        text
    })
    .unwrap_or_default()
}

/// Runs a program inside namespace `ns` (bounded) and returns its standard output.
fn output_in(ns: &str, program: &str, args: &[&str], limit: Duration) -> Result<String> {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, program])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| LabError::io(format!("start {program}"), e))?;
    let mut stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(o) = stdout.as_mut() {
            let _ = o.read_to_string(&mut text);
        }
        text
    });
    if !crate::generator::wait_bounded(&mut child, limit) {
        return Err(LabError::Process(format!(
            "{program} {} ran over {:.0} s",
            args.join(" "),
            limit.as_secs_f64()
        )));
    }
    reader
        .join()
        .map_err(|_| LabError::Process(format!("reading {program}'s output panicked")))
}

// ---------------------------------------------------------------------------------------
// Configuration files

/// The health check keepalived runs (with `/bin/bash`, so that `enable_script_security`
/// checks a root-owned interpreter wherever the file lies): `/metrics` of the local holdline
/// must answer `200` within 0.5 s.
const CHECK_SCRIPT: &str = r#"#!/bin/bash
# keepalived's health check of the local holdline (written by `holdline lab vrrp`).
# Usage: check-holdline.sh ADDRESS PORT. Exit 0 when holdline's /metrics answers 200 within
# 0.5 s. A holdline killed with SIGKILL refuses the connection at once; a hung one does
# not answer in time.
exec 3<>"/dev/tcp/$1/$2" || exit 1
printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3
IFS= read -r -t 0.5 status <&3 || exit 1
case $status in
  "HTTP/1."*" 200 "*) exit 0 ;;
esac
exit 1
"#;

/// keepalived's configuration for one server.
pub(crate) fn keepalived_conf(
    name: &str,
    own: Ipv4Addr,
    priority: u8,
    check: &Path,
    plan: &Plan,
) -> String {
    format!(
        "# keepalived for holdline server {name} (written by `holdline lab vrrp`).\n\
         global_defs {{\n\
         \x20   router_id holdline_{name}\n\
         \x20   # Health checks run as root; keepalived refuses scripts a non-root user could\n\
         \x20   # change (the interpreter is /bin/bash).\n\
         \x20   script_user root\n\
         \x20   enable_script_security\n\
         \x20   # VRRPv3: advertisement intervals in centiseconds (v2 has whole seconds).\n\
         \x20   vrrp_version 3\n\
         }}\n\
         \n\
         # Is the local holdline alive? /metrics on its own address answers 200 within 0.5 s.\n\
         vrrp_script holdline_alive {{\n\
         \x20   script \"/bin/bash {check} {own} {METRICS_PORT}\"\n\
         \x20   interval {interval}     # seconds between checks (keepalived's minimum is 1)\n\
         \x20   timeout 1\n\
         \x20   fall {fall}         # failed checks in a row before the instance goes to FAULT\n\
         \x20   rise {rise}         # passed checks in a row before it may serve again\n\
         }}\n\
         \n\
         vrrp_instance holdline_vip {{\n\
         \x20   state BACKUP        # both start as backups; the higher priority wins the election\n\
         \x20   nopreempt           # a recovered server does not take the VIP back\n\
         \x20   interface eth0\n\
         \x20   virtual_router_id {VRID}\n\
         \x20   priority {priority}\n\
         \x20   advert_int {advert}\n\
         \x20   virtual_ipaddress {{\n\
         \x20       {VIP}/{PREFIX} dev eth0\n\
         \x20   }}\n\
         \x20   track_script {{\n\
         \x20       holdline_alive  # weight 0: a failing check puts the instance in FAULT\n\
         \x20   }}\n\
         }}\n",
        check = check.display(),
        interval = plan.check_interval_s,
        fall = plan.fall,
        rise = plan.rise,
        advert = plan.advert_int_s,
    )
}

// ---------------------------------------------------------------------------------------
// The run

/// The plan from the arguments, defaults applied and checked.
fn plan(args: &Args, pid: u32) -> Result<Plan> {
    let q = args.quick;
    let duration = args.duration.unwrap_or(if q { 14.0 } else { 60.0 });
    let kill_at = args.kill_at.unwrap_or(duration / 2.0);
    let p = Plan {
        vip: VIP.to_string(),
        server_a: ADDR_A.to_string(),
        server_b: ADDR_B.to_string(),
        redis: ADDR_REDIS.to_string(),
        client: ADDR_CLIENT.to_string(),
        duration_s: duration,
        kill_at_s: kill_at,
        rate_cps: args.rate.unwrap_or(if q { 40.0 } else { 150.0 }),
        hold_s: args.hold,
        users: args.users.unwrap_or(if q { 100 } else { 2000 }),
        reg_users: args.reg_users.unwrap_or(if q { 200 } else { 3000 }),
        refresh_s: args.refresh.unwrap_or(if q { 4.0 } else { 15.0 }),
        register_rate: 0.0,
        advert_int_s: args.advert_int,
        check_interval_s: args.check_interval,
        fall: args.fall,
        rise: args.rise,
        workers: args.workers,
        store: format!("redis://{ADDR_REDIS}:{REDIS_PORT}/0?namespace=vrrp-{pid}"),
    };
    let mut p = p;
    p.register_rate = args
        .register_rate
        .unwrap_or_else(|| p.reg_users as f64 / p.refresh_s.max(1e-3));
    let bad = |m: String| Err(LabError::Precondition(m));
    if !(p.duration_s >= 4.0 && p.duration_s <= 3600.0) {
        return bad(format!("--duration {}: 4 to 3600 s", p.duration_s));
    }
    if !(p.kill_at_s >= 1.0 && p.kill_at_s <= p.duration_s - 2.0) {
        return bad(format!(
            "--kill-at {}: from 1 s to 2 s before the end of --duration",
            p.kill_at_s
        ));
    }
    if !(p.rate_cps > 0.0 && p.rate_cps <= 5000.0) {
        return bad(format!("--rate {}: above 0, at most 5000", p.rate_cps));
    }
    if !(p.hold_s >= 0.0 && p.hold_s <= 60.0) {
        return bad(format!("--hold {}: 0 to 60 s", p.hold_s));
    }
    if p.users == 0 || p.reg_users == 0 || p.users > 1_000_000 || p.reg_users > 1_000_000 {
        return bad("--users and --reg-users: 1 to 1,000,000".into());
    }
    if !(p.refresh_s >= 1.0 && p.register_rate > 0.0) {
        return bad("--refresh: at least 1 s; --register-rate above 0".into());
    }
    if !(p.advert_int_s >= 0.01 && p.advert_int_s <= 40.0) {
        return bad(format!(
            "--advert-int {}: 0.01 to 40 s (VRRPv3)",
            p.advert_int_s
        ));
    }
    if p.check_interval_s == 0 || p.fall == 0 || p.rise == 0 || p.workers == 0 {
        return bad("--check-interval, --fall, --rise and --workers: at least 1".into());
    }
    Ok(p)
}

/// What the drill measured, before the final checks.
struct Drill {
    killed_pid: u32,
    /// Instants: the load's start and the kill.
    t0: Instant,
    kill: Instant,
    vip_on_a_at_kill: bool,
    changes_a: Vec<(Instant, bool)>,
    changes_b: Vec<(Instant, bool)>,
    probes: Vec<Probe>,
}

/// Seconds from `t0` to `t` (negative when earlier).
fn secs(t0: Instant, t: Instant) -> f64 {
    if t >= t0 {
        t.duration_since(t0).as_secs_f64()
    } else {
        -t0.duration_since(t).as_secs_f64()
    }
}

fn run(args: &Args) -> Result<Results> {
    let started = Instant::now();
    if !is_root() {
        return Err(LabError::Precondition(
            "holdline lab vrrp creates network namespaces: run it as root".into(),
        ));
    }
    require("ip", "iproute2", "-V")?;
    require("keepalived", "keepalived", "--version")?;
    require("redis-server", "redis-server", "--version")?;
    require("redis-cli", "redis-tools", "--version")?;
    let out_text = args.out.display().to_string();
    if out_text.contains(|c: char| c.is_whitespace() || c == '"' || c == '\'') {
        return Err(LabError::Precondition(format!(
            "--out {out_text:?}: no whitespace or quotes (keepalived's configuration names files in it)"
        )));
    }
    let pid = std::process::id();
    let plan = plan(args, pid)?;
    let exe = holdline_exe(args.exe.as_deref())?;
    std::fs::create_dir_all(&args.out)
        .map_err(|e| LabError::io(format!("create {}", args.out.display()), e))?;
    let out = args
        .out
        .canonicalize()
        .map_err(|e| LabError::io(format!("resolve {}", args.out.display()), e))?;
    let runs = out.join("runs");
    std::fs::create_dir_all(&runs)
        .map_err(|e| LabError::io(format!("create {}", runs.display()), e))?;

    let names = Names::new(pid);
    // Declared first: dropped last, after every process in the namespaces is gone.
    let mut netns = Netns::new();
    build_network(&names, &mut netns)?;
    eprintln!(
        "vrrp: namespaces {} … {} up; VIP {VIP}, A {ADDR_A}, B {ADDR_B}, Redis {ADDR_REDIS}, phones {ADDR_CLIENT}",
        names.sw, names.client
    );

    // Redis, in its own namespace.
    let mut redis = NsProc::spawn(
        &names.redis,
        Path::new("redis-server"),
        &[
            "--bind".into(),
            ADDR_REDIS.to_string(),
            "--port".into(),
            REDIS_PORT.to_string(),
            "--protected-mode".into(),
            "no".into(),
            "--save".into(),
            String::new(),
            "--appendonly".into(),
            "no".into(),
            "--dir".into(),
            runs.display().to_string(),
        ],
        &runs.join("redis.log"),
        "redis-server",
        false,
    )?;
    let redis_ns = names.redis.clone();
    wait_until(&mut redis, Duration::from_secs(10), "redis-server", || {
        output_in(
            &redis_ns,
            "redis-cli",
            &[
                "-h",
                &ADDR_REDIS.to_string(),
                "-p",
                &REDIS_PORT.to_string(),
                "ping",
            ],
            Duration::from_secs(3),
        )
        .is_ok_and(|o| o.contains("PONG"))
    })?;

    // holdline on A and B, both bound to the VIP. The phones' one address stands for
    // thousands of phones: trusted, so that the per-source flood protection (which exempts
    // only trusted sources) does not take it for one flooding host.
    let config = runs.join("holdline.toml");
    std::fs::write(
        &config,
        format!(
            "# holdline lab vrrp: the phones' address (many phones behind one) is trusted.\n\
             trusted = [\"127.0.0.0/8\", \"{ADDR_CLIENT}\"]\n"
        ),
    )
    .map_err(|e| LabError::io(config.display().to_string(), e))?;
    let serve = |ns: &str, own: Ipv4Addr, tag: &str| -> Result<NsProc> {
        let args: Vec<String> = vec![
            "serve".into(),
            format!("--config={}", config.display()),
            format!("--listen=udp:{VIP}:{SIP_PORT}"),
            format!("--metrics={own}:{METRICS_PORT}"),
            format!("--domain={DOMAIN}"),
            format!("--store={}", plan.store),
            format!("--record-route-host={VIP}"),
            format!("--workers={}", plan.workers),
        ];
        let mut p = NsProc::spawn(
            ns,
            &exe,
            &args,
            &runs.join(format!("holdline-{tag}.log")),
            &format!("holdline serve on {tag}"),
            false,
        )?;
        let ns2 = ns.to_owned();
        wait_until(
            &mut p,
            Duration::from_secs(20),
            &format!("holdline serve on {tag}"),
            || scrape_in(&ns2, own).contains("holdline_"),
        )?;
        Ok(p)
    };
    let mut holdline_a = serve(&names.a, ADDR_A, "A")?;
    let mut holdline_b = serve(&names.b, ADDR_B, "B")?;
    eprintln!(
        "vrrp: holdline A (PID {}) and B (PID {}) serve on {VIP}:{SIP_PORT}, store {}",
        holdline_a.pid(),
        holdline_b.pid(),
        plan.store
    );

    // keepalived: A first (it becomes the master), then B.
    let check = runs.join("check-holdline.sh");
    std::fs::write(&check, CHECK_SCRIPT)
        .map_err(|e| LabError::io(format!("write {}", check.display()), e))?;
    let keepalived = |ns: &str, tag: &str, own: Ipv4Addr, prio: u8| -> Result<NsProc> {
        let conf = runs.join(format!("keepalived-{tag}.conf"));
        std::fs::write(&conf, keepalived_conf(tag, own, prio, &check, &plan))
            .map_err(|e| LabError::io(format!("write {}", conf.display()), e))?;
        let args: Vec<String> = vec![
            "--vrrp".into(),
            "--dont-fork".into(),
            "--log-console".into(),
            "--log-detail".into(),
            "--use-file".into(),
            conf.display().to_string(),
            "--pid".into(),
            runs.join(format!("keepalived-{tag}.pid"))
                .display()
                .to_string(),
            "--vrrp_pid".into(),
            runs.join(format!("keepalived-{tag}-vrrp.pid"))
                .display()
                .to_string(),
        ];
        NsProc::spawn(
            ns,
            Path::new("keepalived"),
            &args,
            &runs.join(format!("keepalived-{tag}.log")),
            &format!("keepalived on {tag}"),
            true,
        )
    };
    let mut keepalived_a = keepalived(&names.a, "A", ADDR_A, PRIORITY_A)?;
    let ns_a = names.a.clone();
    wait_until(
        &mut keepalived_a,
        Duration::from_secs(15),
        "keepalived on A: the VIP on A",
        || vip_in(&ns_a),
    )?;
    let mut keepalived_b = keepalived(&names.b, "B", ADDR_B, PRIORITY_B)?;
    let log_b = runs.join("keepalived-B.log");
    wait_until(
        &mut keepalived_b,
        Duration::from_secs(15),
        "keepalived on B: BACKUP state",
        || std::fs::read_to_string(&log_b).is_ok_and(|t| t.contains("Entering BACKUP STATE")),
    )?;
    eprintln!(
        "vrrp: keepalived A is MASTER (VIP on A), B is BACKUP; advert_int {} s, health check every {} s (fall {}, rise {})",
        plan.advert_int_s, plan.check_interval_s, plan.fall, plan.rise
    );

    let limit = Duration::from_secs_f64(plan.duration_s + 120.0);
    let stop = Arc::new(AtomicBool::new(false));
    let watch_a = watch_vip(&names.a, stop.clone(), limit);
    let watch_b = watch_vip(&names.b, stop.clone(), limit);
    let prober = probe_vip(&names.client, stop.clone(), limit);
    // Stops the threads whatever happens below (they are bounded by `limit` too).
    struct StopOnDrop(Arc<AtomicBool>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let _stop_threads = StopOnDrop(stop.clone());

    // The called users register through the VIP (with A).
    let uas_users = format!("user{{0..{}}}@{DOMAIN}", plan.users - 1);
    let file = |n: &str| runs.join(n).display().to_string();
    let load_max = plan.duration_s + 60.0;
    let mut uas = NsProc::spawn(
        &names.client,
        &exe,
        &[
            "load".into(),
            "uas".into(),
            format!("--listen={ADDR_CLIENT}:{UAS_PORT}"),
            format!("--register={}", plan.users),
            format!("--registrar={VIP}:{SIP_PORT}"),
            format!("--users={uas_users}"),
            format!("--register-rate={UAS_REGISTER_RATE}"),
            format!("--max-time={}", load_max + 60.0),
            format!("--json={}", file("uas.json")),
            format!("--csv={}", file("uas.csv")),
            "--progress=off".into(),
        ],
        &runs.join("uas.log"),
        "holdline load uas",
        true,
    )?;
    let ns_b = names.b.clone();
    let want = plan.users as f64;
    wait_until(
        &mut uas,
        Duration::from_secs_f64(30.0 + plan.users as f64 / UAS_REGISTER_RATE),
        "the UAS's users registered and on B",
        || metric(&scrape_in(&ns_b, ADDR_B), "holdline_store_bindings") >= want,
    )?;
    eprintln!(
        "vrrp: {} called users registered through the VIP (with A); B holds all of them",
        plan.users
    );

    // The load: re-REGISTERs and calls, both through the VIP.
    let acked = runs.join("register.acked");
    let t0 = Instant::now();
    let mut register = NsProc::spawn(
        &names.client,
        &exe,
        &[
            "load".into(),
            "register".into(),
            format!("--listen={ADDR_CLIENT}:0"),
            format!("--target={VIP}:{SIP_PORT}"),
            format!("--users=reg{{0..{}}}@{DOMAIN}", plan.reg_users - 1),
            format!("--rate={}", plan.register_rate),
            format!("--refresh={}", plan.refresh_s),
            format!("--duration={}", plan.duration_s),
            "--drain=10".into(),
            format!("--max-time={load_max}"),
            format!("--acked={}", acked.display()),
            format!("--json={}", file("register.json")),
            format!("--csv={}", file("register.csv")),
            "--progress=off".into(),
        ],
        &runs.join("register.log"),
        "holdline load register",
        true,
    )?;
    let mut uac = NsProc::spawn(
        &names.client,
        &exe,
        &[
            "load".into(),
            "uac".into(),
            format!("--listen={ADDR_CLIENT}:0"),
            format!("--target={VIP}:{SIP_PORT}"),
            format!("--to={uas_users}"),
            format!("--rate={}", plan.rate_cps),
            format!("--duration={}", plan.duration_s),
            format!("--hold=fixed:{}", plan.hold_s),
            "--drain=35".into(),
            format!("--max-time={load_max}"),
            format!("--json={}", file("uac.json")),
            format!("--csv={}", file("uac.csv")),
            "--progress=off".into(),
        ],
        &runs.join("uac.log"),
        "holdline load uac",
        true,
    )?;
    eprintln!(
        "vrrp: load started: {} calls/s held {} s for {} s, {} users re-REGISTERing every {} s; kill -9 of A's holdline at {} s",
        plan.rate_cps, plan.hold_s, plan.duration_s, plan.reg_users, plan.refresh_s, plan.kill_at_s
    );

    let kill_due = t0 + Duration::from_secs_f64(plan.kill_at_s);
    let deadline = t0 + Duration::from_secs_f64(load_max + 10.0);
    let mut kill: Option<(Instant, bool)> = None;
    let mut next_progress = t0 + PROGRESS_EVERY;
    loop {
        let now = Instant::now();
        if kill.is_none() && now >= kill_due {
            let on_a = vip_in(&names.a);
            let at = Instant::now();
            holdline_a.kill();
            kill = Some((at, on_a));
            eprintln!(
                "vrrp: t={:.1} s: SIGKILL to holdline A (PID {}); the VIP was {}on A",
                secs(t0, at),
                holdline_a.pid(),
                if on_a { "" } else { "NOT " }
            );
        }
        if now >= next_progress {
            let holder = match (vip_in(&names.a), vip_in(&names.b)) {
                (true, false) => "A",
                (false, true) => "B",
                (true, true) => "A and B",
                (false, false) => "nobody",
            };
            eprintln!(
                "vrrp: t={:.0} s: VIP on {holder}; B's store holds {:.0} bindings",
                secs(t0, now),
                metric(&scrape_in(&names.b, ADDR_B), "holdline_store_bindings")
            );
            next_progress += PROGRESS_EVERY;
        }
        if kill.is_some() && uac.exited() && register.exited() {
            break;
        }
        if now >= deadline {
            return Err(LabError::Process(format!(
                "the load generators ran over {:.0} s",
                load_max + 10.0
            )));
        }
        // Bounded poll of the drill's clock and the generators' exits.
        std::thread::sleep(Duration::from_millis(10));
    }
    let Some((kill_at, vip_on_a_at_kill)) = kill else {
        return Err(LabError::Process("the kill never happened".into()));
    };
    // A little more of the probes and watchers after the load, then stop them.
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let join = |h: std::thread::JoinHandle<std::io::Result<Vec<(Instant, bool)>>>, what: &str| {
        h.join()
            .map_err(|_| LabError::Process(format!("the {what} watcher panicked")))?
            .map_err(|e| LabError::io(format!("watch the VIP on {what}"), e))
    };
    let changes_a = join(watch_a, "A")?;
    let changes_b = join(watch_b, "B")?;
    let probes = prober
        .join()
        .map_err(|_| LabError::Process("the OPTIONS prober panicked".into()))?
        .map_err(|e| LabError::io("probe the VIP", e))?;
    uas.stop(Duration::from_secs(5));
    let drill = Drill {
        killed_pid: holdline_a.pid(),
        t0,
        kill: kill_at,
        vip_on_a_at_kill,
        changes_a,
        changes_b,
        probes,
    };

    // Every binding: asked of the VIP's holder (B), in Redis, and B's count.
    eprintln!("vrrp: load over; asking the VIP for every user's bindings");
    let acked_text = std::fs::read_to_string(&acked).map_err(|e| LabError::Report {
        path: acked.clone(),
        reason: e.to_string(),
    })?;
    let mut expected: Vec<String> = acked_text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    let acked_users = expected.len() as u64;
    expected.extend((0..plan.users).map(|i| format!("user{i}@{DOMAIN}")));
    let answers = query_bindings(&names.client, expected.clone())?;
    let keys_text = output_in(
        &names.redis,
        "redis-cli",
        &[
            "-h",
            &ADDR_REDIS.to_string(),
            "-p",
            &REDIS_PORT.to_string(),
            "--scan",
            "--pattern",
            &format!("holdline:vrrp-{pid}:aor:*"),
        ],
        Duration::from_secs(60),
    )?;
    let prefix = format!("holdline:vrrp-{pid}:aor:");
    let keys: HashSet<&str> = keys_text
        .lines()
        .filter_map(|l| l.trim().strip_prefix(prefix.as_str()))
        .collect();
    let backup_bindings = metric(&scrape_in(&names.b, ADDR_B), "holdline_store_bindings");
    holdline_b.alive()?;
    let lost: Vec<&String> = expected
        .iter()
        .zip(&answers)
        .filter(|(_, a)| **a != Some(true))
        .map(|(u, _)| u)
        .collect();
    let bindings = Bindings {
        expected: expected.len() as u64,
        found_on_backup: answers.iter().filter(|a| **a == Some(true)).count() as u64,
        lost: lost.len() as u64,
        lost_examples: lost.iter().take(20).map(|s| (*s).clone()).collect(),
        unanswered_queries: answers.iter().filter(|a| a.is_none()).count() as u64,
        missing_in_redis: expected
            .iter()
            .filter(|u| !keys.contains(u.as_str()))
            .count() as u64,
        redis_keys: keys.len() as u64,
        backup_store_bindings: backup_bindings,
    };
    drop((
        uac,
        register,
        uas,
        keepalived_b,
        keepalived_a,
        holdline_b,
        holdline_a,
        redis,
    ));
    drop(netns);

    let results = summarize(args, plan, &drill, &runs, acked_users, bindings, started)?;
    write(&out, &results)?;
    let r = &results;
    eprintln!(
        "vrrp: takeover {} (VIP on B), service restored {} after the kill; calls failed {} of {} ({} around the failover: {:.2}%); REGISTERs failed {} of {}; bindings lost {} of {}",
        fmt_s(r.takeover_s),
        fmt_s(r.service_restored_s),
        r.calls.failed,
        r.calls.attempted,
        r.calls.around_failover,
        r.calls.failed_share_around_failover * 100.0,
        r.registrations.failed,
        r.registrations.sent,
        r.bindings.lost,
        r.bindings.expected
    );
    eprintln!(
        "vrrp: done-when (≤ 1% of calls around the failover failed, no binding lost, restored within 2 s): {}",
        if r.verdict.calls && r.verdict.bindings && r.verdict.restored_within_2s {
            "met"
        } else {
            "NOT met"
        }
    );
    Ok(results)
}

fn fmt_s(x: Option<f64>) -> String {
    x.map_or_else(|| "never".to_owned(), |s| format!("{:.0} ms", s * 1000.0))
}

/// Rows of a `holdline load` per-second CSV as maps from column to value.
fn csv_rows(path: &Path) -> Vec<HashMap<String, f64>> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let cols: Vec<&str> = header.split(',').collect();
    lines
        .map(|l| {
            cols.iter()
                .zip(l.split(','))
                .filter_map(|(c, v)| Some(((*c).to_owned(), v.trim().parse().ok()?)))
                .collect()
        })
        .collect()
}

/// Who holds the VIP at `t` after the changes seen by the two watchers.
fn holder_at(a: &[(Instant, bool)], b: &[(Instant, bool)], t: Instant) -> String {
    let state = |c: &[(Instant, bool)]| {
        c.iter()
            .take_while(|(at, _)| *at <= t)
            .last()
            .is_some_and(|(_, v)| *v)
    };
    match (state(a), state(b)) {
        (true, false) => "A",
        (false, true) => "B",
        (true, true) => "A+B",
        (false, false) => "-",
    }
    .to_owned()
}

/// The per-second timeline: the UAC's and the register generator's CSV rows (by their
/// `t_s`, one row per second of each process), the probes and the VIP's place.
fn timeline(runs: &Path, drill: &Drill) -> Vec<Second> {
    let uac = csv_rows(&runs.join("uac.csv"));
    let reg = csv_rows(&runs.join("register.csv"));
    let at = |rows: &[HashMap<String, f64>], t: u64, col: &str| -> u64 {
        rows.iter()
            .filter(|r| r.get("t_s").is_some_and(|x| x.round() as u64 == t))
            .map(|r| r.get(col).copied().unwrap_or(0.0))
            .sum::<f64>() as u64
    };
    let last = |rows: &[HashMap<String, f64>]| {
        rows.iter()
            .filter_map(|r| r.get("t_s"))
            .fold(0.0f64, |a, b| a.max(*b))
            .round() as u64
    };
    let end = last(&uac).max(last(&reg));
    (1..=end)
        .map(|t| {
            let from = drill.t0 + Duration::from_secs(t - 1);
            let to = drill.t0 + Duration::from_secs(t);
            let in_second: Vec<&Probe> = drill
                .probes
                .iter()
                .filter(|p| p.sent >= from && p.sent < to)
                .collect();
            Second {
                t_s: t as f64,
                calls_attempted: at(&uac, t, "attempted"),
                calls_200: at(&uac, t, "r200"),
                calls_ok: at(&uac, t, "calls_ok"),
                calls_failed: at(&uac, t, "calls_failed"),
                reg_sent: at(&reg, t, "reg_sent"),
                reg_ok: at(&reg, t, "reg_ok"),
                reg_failed: at(&reg, t, "reg_5xx")
                    + at(&reg, t, "reg_fail_other")
                    + at(&reg, t, "timeouts"),
                options_sent: in_second.len() as u64,
                options_answered: in_second.iter().filter(|p| p.answered.is_some()).count() as u64,
                vip: holder_at(&drill.changes_a, &drill.changes_b, to),
            }
        })
        .collect()
}

fn summarize(
    args: &Args,
    plan: Plan,
    drill: &Drill,
    runs: &Path,
    acked_users: u64,
    bindings: Bindings,
    started: Instant,
) -> Result<Results> {
    let (t0, kill) = (drill.t0, drill.kill);
    let first_after = |c: &[(Instant, bool)], want: bool| {
        c.iter()
            .find(|(at, v)| *at >= kill && *v == want)
            .map(|(at, _)| secs(kill, *at))
    };
    let vip_left_a_s = first_after(&drill.changes_a, false);
    let takeover_s = first_after(&drill.changes_b, true);
    let after_kill: Vec<&Probe> = drill.probes.iter().filter(|p| p.sent >= kill).collect();
    let service_restored_s = after_kill
        .iter()
        .filter_map(|p| p.answered)
        .min()
        .map(|at| secs(kill, at));
    let vip_moved_to_b = drill.changes_b.last().is_some_and(|(_, v)| *v)
        && !drill.changes_a.last().is_some_and(|(_, v)| *v);
    let mut vip_changes: Vec<VipChange> = drill
        .changes_a
        .iter()
        .map(|c| ("A", c))
        .chain(drill.changes_b.iter().map(|c| ("B", c)))
        .map(|(s, (at, v))| VipChange {
            t_s: secs(t0, *at),
            server: s.into(),
            has_vip: *v,
        })
        .collect();
    vip_changes.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));

    let uac = read_json(&runs.join("uac.json"))?;
    let reg = read_json(&runs.join("register.json"))?;
    let timeline = timeline(runs, drill);
    let kill_s = secs(t0, kill);
    let restored = service_restored_s.unwrap_or(plan.duration_s);
    let (from, to) = (kill_s - plan.hold_s - 1.0, kill_s + restored + 1.0);
    let around: u64 = timeline
        .iter()
        .filter(|s| s.t_s > from && s.t_s - 1.0 < to)
        .map(|s| s.calls_attempted)
        .sum();
    let attempted = count(&uac, &["totals", "attempted"]);
    let failed = count(&uac, &["totals", "calls_failed"]);
    let share = |n: u64, d: u64| if d > 0 { n as f64 / d as f64 } else { 0.0 };
    let calls = Calls {
        attempted,
        ok: count(&uac, &["totals", "calls_ok"]),
        failed,
        r503: count(&uac, &["totals", "r503"]),
        timeouts: count(&uac, &["totals", "timeouts"]),
        retrans_invite: count(&uac, &["totals", "retrans_invite"]),
        retrans_bye: count(&uac, &["totals", "retrans_bye"]),
        around_failover: around,
        failed_share_around_failover: if around > 0 {
            share(failed, around)
        } else if failed > 0 {
            1.0
        } else {
            0.0
        },
        failed_share: share(failed, attempted),
        pdd_p50_ms: num(&uac, &["pdd_p50_ms"]),
        pdd_p99_ms: num(&uac, &["pdd_p99_ms"]),
        pdd_max_ms: num(&uac, &["latency", "pdd", "max_ms"]),
    };
    let r5xx = count(&reg, &["totals", "reg_5xx"]);
    let timeouts = count(&reg, &["totals", "timeouts"]);
    let registrations = Registrations {
        sent: count(&reg, &["totals", "reg_sent"]),
        ok: count(&reg, &["totals", "reg_ok"]),
        failed: r5xx + count(&reg, &["totals", "reg_fail_other"]) + timeouts,
        r5xx,
        timeouts,
        retransmissions: count(&reg, &["totals", "retrans_other"]),
        acked_users,
        p99_ms: num(&reg, &["latency", "register", "p99_ms"]),
        max_ms: num(&reg, &["latency", "register", "max_ms"]),
    };
    let verdict = Verdict {
        calls: attempted > 0 && calls.failed_share_around_failover <= FAILED_BOUND,
        bindings: bindings.expected > 0 && bindings.lost == 0,
        restored_within_2s: service_restored_s.is_some_and(|s| s <= RESTORE_BOUND_S),
    };
    Ok(Results {
        header: RunHeader::new("vrrp", started, args.quick, "udp"),
        plan,
        killed_pid: drill.killed_pid,
        killed_at_s: kill_s,
        vip_on_a_at_kill: drill.vip_on_a_at_kill,
        vip_moved_to_b,
        vip_left_a_s,
        takeover_s,
        service_restored_s,
        options_sent: drill.probes.len() as u64,
        options_lost_after_kill: after_kill.iter().filter(|p| p.answered.is_none()).count() as u64,
        calls,
        registrations,
        bindings,
        vip_changes,
        timeline,
        probe_bins: probe_bins(drill),
        verdict,
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

/// The OPTIONS probes sent from [`ZOOM_BEFORE_S`] before the kill to [`ZOOM_AFTER_S`] after
/// it, per [`ZOOM_BIN`].
fn probe_bins(drill: &Drill) -> Vec<ProbeBin> {
    let bins = ((ZOOM_BEFORE_S + ZOOM_AFTER_S) / ZOOM_BIN.as_secs_f64()).round() as u32;
    let start = drill.kill - Duration::from_secs_f64(ZOOM_BEFORE_S);
    (0..bins)
        .map(|i| {
            let from = start + ZOOM_BIN * i;
            let to = from + ZOOM_BIN;
            let inside: Vec<&Probe> = drill
                .probes
                .iter()
                .filter(|p| p.sent >= from && p.sent < to)
                .collect();
            let answered = inside.iter().filter(|p| p.answered.is_some()).count();
            ProbeBin {
                t_s: secs(drill.t0, from),
                sent: inside.len() as u64,
                answered_percent: if inside.is_empty() {
                    0.0
                } else {
                    answered as f64 * 100.0 / inside.len() as f64
                },
            }
        })
        .collect()
}

/// `timeline.csv`.
fn timeline_csv(r: &Results) -> String {
    let mut csv = String::from(
        "t_s,calls_attempted,calls_200,calls_ok,calls_failed,reg_sent,reg_ok,reg_failed,options_sent,options_answered,vip\n",
    );
    for s in &r.timeline {
        let _ = writeln!(
            csv,
            "{:.0},{},{},{},{},{},{},{},{},{},{}",
            s.t_s,
            s.calls_attempted,
            s.calls_200,
            s.calls_ok,
            s.calls_failed,
            s.reg_sent,
            s.reg_ok,
            s.reg_failed,
            s.options_sent,
            s.options_answered,
            s.vip
        );
    }
    csv
}

/// `summary.md`.
fn summary_md(r: &Results) -> String {
    let p = &r.plan;
    let yes = |b: bool| if b { "yes" } else { "**no**" };
    let mut md = format!(
        "# holdline lab vrrp\n\n\
         Two `holdline serve` (A, B) on VIP {vip} with keepalived (VRRPv3, advert_int {adv} s, \
         health check `GET /metrics` every {ci} s, fall {fall}, rise {rise}), one shared Redis store; \
         {rate} calls/s held {hold} s to {users} users, {reg} users re-REGISTERing every {refresh} s, \
         {dur} s of load; SIGKILL of A's holdline (PID {pid}) at {kill:.1} s.\n\n\
         | measure | value |\n| --- | ---: |\n\
         | VIP on A at the kill | {on_a} |\n\
         | VIP left A (after the kill) | {left} |\n\
         | **takeover: VIP on B** | **{takeover}** |\n\
         | **service restored** (first OPTIONS through the VIP answered) | **{restored}** |\n\
         | OPTIONS probes sent after the kill and lost | {lost_opt} |\n\
         | calls placed / ok / failed | {att} / {ok} / {failed} |\n\
         | calls in progress or arriving around the failover | {around} |\n\
         | **failed share of them** | **{share:.2}%** |\n\
         | INVITE / BYE retransmissions | {ri} / {rb} |\n\
         | PDD p50 / p99 / max | {p50:.1} / {p99:.1} / {pmax:.0} ms |\n\
         | REGISTERs sent / ok / **failed** | {rs} / {rok} / **{rf}** |\n\
         | REGISTER retransmissions; latency p99 / max | {rr}; {rp99:.1} / {rmax:.0} ms |\n\
         | users with a binding expected (acknowledged + called) | {exp} |\n\
         | found on the backup (REGISTER query through the VIP) | {found} |\n\
         | **bindings lost** | **{blost}** |\n\
         | missing in Redis; Redis keys; B's `holdline_store_bindings` | {miss}; {keys}; {bb:.0} |\n\n\
         Done-when (issue 18): ≤ 1% of calls around the failover failed: {vc}; every binding on the \
         backup: {vb}; service restored within 2 s: {vr}.\n\n\
         ![timeline](timeline.svg)\n\n![takeover](takeover.svg)\n",
        vip = p.vip,
        adv = p.advert_int_s,
        ci = p.check_interval_s,
        fall = p.fall,
        rise = p.rise,
        rate = p.rate_cps,
        hold = p.hold_s,
        users = p.users,
        reg = p.reg_users,
        refresh = p.refresh_s,
        dur = p.duration_s,
        pid = r.killed_pid,
        kill = r.killed_at_s,
        on_a = yes(r.vip_on_a_at_kill),
        left = fmt_s(r.vip_left_a_s),
        takeover = fmt_s(r.takeover_s),
        restored = fmt_s(r.service_restored_s),
        lost_opt = r.options_lost_after_kill,
        att = r.calls.attempted,
        ok = r.calls.ok,
        failed = r.calls.failed,
        around = r.calls.around_failover,
        share = r.calls.failed_share_around_failover * 100.0,
        ri = r.calls.retrans_invite,
        rb = r.calls.retrans_bye,
        p50 = r.calls.pdd_p50_ms,
        p99 = r.calls.pdd_p99_ms,
        pmax = r.calls.pdd_max_ms,
        rs = r.registrations.sent,
        rok = r.registrations.ok,
        rf = r.registrations.failed,
        rr = r.registrations.retransmissions,
        rp99 = r.registrations.p99_ms,
        rmax = r.registrations.max_ms,
        exp = r.bindings.expected,
        found = r.bindings.found_on_backup,
        blost = r.bindings.lost,
        miss = r.bindings.missing_in_redis,
        keys = r.bindings.redis_keys,
        bb = r.bindings.backup_store_bindings,
        vc = yes(r.verdict.calls),
        vb = yes(r.verdict.bindings),
        vr = yes(r.verdict.restored_within_2s),
    );
    if !r.bindings.lost_examples.is_empty() {
        let _ = writeln!(md, "\nLost: {}", r.bindings.lost_examples.join(", "));
    }
    md
}

/// Writes `results.json`, `timeline.csv`, `summary.md` and `timeline.svg/png`.
fn write(out: &Path, r: &Results) -> Result<()> {
    let json = serde_json::to_string_pretty(r).map_err(|e| LabError::Report {
        path: out.join("results.json"),
        reason: e.to_string(),
    })?;
    for (name, text) in [
        ("results.json", json),
        ("timeline.csv", timeline_csv(r)),
        ("summary.md", summary_md(r)),
    ] {
        std::fs::write(out.join(name), text)
            .map_err(|e| LabError::io(format!("write {name}"), e))?;
    }
    let series = |f: fn(&Second) -> u64| -> Vec<(f64, f64)> {
        r.timeline.iter().map(|s| (s.t_s, f(s) as f64)).collect()
    };
    let calls_200 = series(|s| s.calls_200);
    let reg_ok = series(|s| s.reg_ok);
    let calls_failed = series(|s| s.calls_failed);
    let reg_failed = series(|s| s.reg_failed);
    let top = calls_200
        .iter()
        .chain(&reg_ok)
        .map(|p| p.1)
        .fold(1.0, f64::max);
    let end = r.timeline.last().map_or(1.0, |s| s.t_s);
    let width = end.max(1.0) * KILL_MARK_WIDTH;
    let k = r.killed_at_s;
    let kill_mark = vec![(k, 0.0), (k + width / 2.0, top), (k + width, 0.0)];
    let on_b = vip_on_b_step(r, 0.0, end, top * 0.5);
    // Series names choose their colours in plot.rs (a name starting with a digit takes a
    // palette colour by its hash): these give green, blue, orange, red, grey and purple.
    plot::chart(
        out,
        "timeline",
        &format!(
            "VRRP takeover: kill -9 of the active holdline at {k:.1} s (VIP on B {} later)",
            fmt_s(r.takeover_s)
        ),
        "seconds since the load started",
        "per second",
        &[
            (
                "200 OK to INVITE (calls answered) per second".into(),
                calls_200,
            ),
            ("200 OKs to REGISTER per second".into(), reg_ok),
            (
                "3xx-6xx or no answer: calls failed per second".into(),
                calls_failed,
            ),
            (
                "4xx-6xx or timeout: REGISTERs failed per second".into(),
                reg_failed,
            ),
            ("9 (SIGKILL) sent to server A's holdline".into(), kill_mark),
            ("10.201.0.10 (the VIP) on server B".into(), on_b),
        ],
    )?;
    // Around the kill: the share of OPTIONS probes answered per 100 ms.
    let origin = k - ZOOM_BEFORE_S;
    let bins: Vec<(f64, f64)> = r
        .probe_bins
        .iter()
        .map(|b| ((b.t_s - origin) * 1000.0, b.answered_percent))
        .collect();
    let zoom_end = ZOOM_BEFORE_S + ZOOM_AFTER_S;
    let (kill_ms, width) = (ZOOM_BEFORE_S * 1000.0, zoom_end * 1000.0 * KILL_MARK_WIDTH);
    let kill_mark = vec![
        (kill_ms, 0.0),
        (kill_ms + width / 2.0, 100.0),
        (kill_ms + width, 0.0),
    ];
    let on_b: Vec<(f64, f64)> = vip_on_b_step(r, origin, origin + zoom_end, 50.0)
        .into_iter()
        .map(|(t, v)| ((t - origin) * 1000.0, v))
        .collect();
    plot::chart(
        out,
        "takeover",
        &format!(
            "Around the kill: OPTIONS to the VIP every 20 ms (service back {} after the kill)",
            fmt_s(r.service_restored_s)
        ),
        &format!("milliseconds since {ZOOM_BEFORE_S:.0} s before the kill"),
        "% answered",
        &[
            ("100 ms bins: OPTIONS to the VIP answered (%)".into(), bins),
            ("9 (SIGKILL) sent to server A's holdline".into(), kill_mark),
            ("10.201.0.10 (the VIP) on server B".into(), on_b),
        ],
    )
}

/// "The VIP is on B" from `from` to `to` (seconds since the load started) as a step of
/// height `h` at the takeover (at 0 without one).
fn vip_on_b_step(r: &Results, from: f64, to: f64, h: f64) -> Vec<(f64, f64)> {
    match r.takeover_s {
        Some(t) => {
            let at = (r.killed_at_s + t).clamp(from, to);
            vec![(from, 0.0), (at, 0.0), (at, h), (to, h)]
        }
        None => vec![(from, 0.0), (to, 0.0)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_ids_and_status_codes_are_read_from_responses() {
        let msg = "SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 10.201.0.100:4000;branch=z9hG4bK-x\r\n\
                   i: vrrp-probe-17@10.201.0.100\r\nCSeq: 1 OPTIONS\r\n\r\n";
        assert_eq!(status_code(msg), Some(200));
        assert_eq!(call_id_number(msg, "vrrp-probe-"), Some(17));
        assert_eq!(call_id_number(msg, "vrrp-q-"), None);
        let msg = "SIP/2.0 503 Service Unavailable\r\nCall-ID: vrrp-q-4@x\r\n\r\n";
        assert_eq!(status_code(msg), Some(503));
        assert_eq!(call_id_number(msg, "vrrp-q-"), Some(4));
        assert_eq!(status_code("OPTIONS sip:x SIP/2.0\r\n"), None);
    }

    #[test]
    fn the_holder_follows_the_watchers_changes() {
        let t = Instant::now();
        let at = |ms: u64| t + Duration::from_millis(ms);
        let a = [(at(0), true), (at(500), false)];
        let b = [(at(0), false), (at(700), true)];
        assert_eq!(holder_at(&a, &b, at(100)), "A");
        assert_eq!(holder_at(&a, &b, at(600)), "-");
        assert_eq!(holder_at(&a, &b, at(800)), "B");
        assert_eq!(holder_at(&[], &[], at(800)), "-");
    }

    #[test]
    fn the_keepalived_configuration_has_the_recipe() {
        let args = Args::try_parse_from(["vrrp", "--quick"]).expect("args");
        let p = plan(&args, 7).expect("plan");
        let conf = keepalived_conf("A", ADDR_A, PRIORITY_A, Path::new("/x/check.sh"), &p);
        for want in [
            "vrrp_version 3",
            "script \"/bin/bash /x/check.sh 10.201.0.11 9090\"",
            "interval 1 ",
            "fall 1 ",
            "rise 2 ",
            "state BACKUP",
            "nopreempt",
            "priority 150",
            "advert_int 0.1",
            "10.201.0.10/24 dev eth0",
            "holdline_alive",
        ] {
            assert!(conf.contains(want), "{want} in\n{conf}");
        }
        assert_eq!(p.store, "redis://10.201.0.5:6379/0?namespace=vrrp-7");
        assert!(
            plan(
                &Args::try_parse_from(["vrrp", "--kill-at", "59"]).expect("a"),
                1
            )
            .is_err()
        );
    }
}
