//! Scenario files: TOML with `deny_unknown_fields`, checked with errors that name the file,
//! the line and the key (the convention of `holdline serve`'s configuration).
//!
//! The binary reads the file; this module only parses text, so it stays pure.

use std::collections::BTreeSet;

use holdline_base::Duration;
use holdline_base::toml_loc::{find_key_line, locate};
use holdline_netmodel::{GilbertElliott, LinkConfig, Loss, QueueDrop, RateLimit};
use holdline_overload::{Algorithm, ControllerConfig};
use serde::Deserialize;

/// A scenario that cannot be run, located in its file (or, for a value a `--sweep` set, in
/// the command line: `FILE (--sweep KEY=VALUE): key …`, without a line).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ScenarioError {
    /// The file (as given by the caller), with the sweep's setting when one is to blame.
    pub file: String,
    /// 1-based line number (0 when unknown, or when a sweep's setting is to blame).
    pub line: usize,
    /// The dotted key, e.g. `servers[0].local`.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 {
            write!(f, "{}: key `{}`: {}", self.file, self.key, self.message)
        } else {
            write!(
                f,
                "{}:{}: key `{}`: {}",
                self.file, self.line, self.key, self.message
            )
        }
    }
}

/// One `--sweep KEY=V1,V2,...` of `holdline sim run`: a dotted key of the scenario and the
/// values it takes, each a point of the sweep (see [`Scenario::from_toml_with`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sweep {
    /// The dotted key: a top-level key (`duration_s`), `default_link.KEY`,
    /// `servers.NAME.KEY`, `uac.NAME.KEY`, `uas.NAME.KEY` (`NAME` a node's name or `*` for
    /// every one); `KEY` may itself be dotted (`servers.*.deoc.alpha`).
    pub key: String,
    /// The values as written (TOML scalars; bare words are strings).
    pub values: Vec<String>,
}

impl std::str::FromStr for Sweep {
    type Err = String;

    /// `KEY=V1,V2,...`.
    fn from_str(arg: &str) -> Result<Self, String> {
        let (key, values) = arg
            .split_once('=')
            .ok_or_else(|| format!("--sweep {arg}: expected KEY=V1,V2,..."))?;
        let key = key.trim();
        if key.is_empty() || key.split('.').any(|p| p.trim().is_empty()) {
            return Err(format!("--sweep {arg}: `{key}` is not a dotted key"));
        }
        let values: Vec<String> = values.split(',').map(|v| v.trim().to_owned()).collect();
        if values.iter().any(String::is_empty) {
            return Err(format!("--sweep {arg}: an empty value"));
        }
        Ok(Self {
            key: key.to_owned(),
            values,
        })
    }
}

/// Every combination of the sweeps' values (the cartesian product, the first sweep varying
/// slowest), as `(key, value)` settings; one empty combination without sweeps.
pub fn sweep_points(sweeps: &[Sweep]) -> Vec<Vec<(String, String)>> {
    let mut out: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for s in sweeps {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                s.values.iter().map(move |v| {
                    let mut p = prefix.clone();
                    p.push((s.key.clone(), v.clone()));
                    p
                })
            })
            .collect();
    }
    out
}

/// A sweep's value as TOML reads it: a number, a boolean, a quoted string (any TOML value);
/// anything else (a bare word) is a string.
pub fn sweep_value(text: &str) -> toml::Value {
    let text = text.trim();
    toml::from_str::<toml::Table>(&format!("v = {text}"))
        .ok()
        .filter(|t| t.len() == 1)
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(text.to_owned()))
}

/// A sweep's value as [`sweep_value`] reads it, for JSON reports.
pub fn sweep_json(text: &str) -> serde_json::Value {
    match sweep_value(text) {
        toml::Value::Integer(i) => serde_json::json!(i),
        toml::Value::Float(f) => serde_json::json!(f),
        toml::Value::Boolean(b) => serde_json::json!(b),
        toml::Value::String(s) => serde_json::json!(s),
        other => serde_json::Value::String(other.to_string()),
    }
}

/// Sets `key` (see [`Sweep::key`]) to `value` in the scenario document `doc`.
fn apply_setting(doc: &mut toml::Table, key: &str, value: &toml::Value) -> Result<(), String> {
    let parts: Vec<&str> = key.split('.').map(str::trim).collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(format!("`{key}` is not a dotted key"));
    }
    match parts.as_slice() {
        [kind @ ("servers" | "uac" | "uas"), name, rest @ ..] if !rest.is_empty() => {
            let entries = doc
                .get_mut(*kind)
                .and_then(toml::Value::as_array_mut)
                .ok_or_else(|| format!("the scenario has no `{kind}`"))?;
            let mut n = 0;
            for t in entries.iter_mut().filter_map(toml::Value::as_table_mut) {
                if *name == "*" || t.get("name").and_then(toml::Value::as_str) == Some(name) {
                    set_path(t, rest, value)?;
                    n += 1;
                }
            }
            if n == 0 {
                return Err(format!("`{name}` names no entry of `{kind}`"));
            }
            Ok(())
        }
        ["servers" | "uac" | "uas", ..] => Err(format!(
            "`{key}`: give {}.NAME.KEY (NAME a node's name, or * for every one)",
            parts[0]
        )),
        ["links" | "routes" | "fairness_flows", ..] => Err(format!(
            "`{key}`: only top-level keys, default_link.KEY, servers.NAME.KEY, uac.NAME.KEY \
             and uas.NAME.KEY can be swept"
        )),
        _ => set_path(doc, &parts, value),
    }
}

/// Sets the dotted `path` under `table`, creating tables on the way.
fn set_path(table: &mut toml::Table, path: &[&str], value: &toml::Value) -> Result<(), String> {
    let Some((last, head)) = path.split_last() else {
        return Err("an empty key".into());
    };
    let mut cur = table;
    for p in head {
        cur = cur
            .entry((*p).to_owned())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .ok_or_else(|| format!("`{p}` is not a table"))?;
    }
    cur.insert((*last).to_owned(), value.clone());
    Ok(())
}

/// A whole scenario: see `docs/sim.md` for the reference.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// A name for reports. Default: empty.
    #[serde(default)]
    pub name: String,
    /// Seed of run 0; run `i` uses a seed derived from `seed` and `i`. Default 1.
    #[serde(default = "one")]
    pub seed: u64,
    /// Runs (repetitions with different seeds). Default 1.
    #[serde(default = "one")]
    pub runs: u64,
    /// Length of the load phase, seconds.
    pub duration_s: f64,
    /// Time after the load phase to let calls finish, seconds. Default 5.
    #[serde(default = "five")]
    pub drain_s: f64,
    /// The reference capacity that step `factor`s multiply, calls per second.
    #[serde(default)]
    pub capacity_cps: Option<f64>,
    /// Seconds at the start of every step left out of its point (the transient). Default 2.
    #[serde(default = "two")]
    pub settle_s: f64,
    /// Goodput window: a 200 OK counts as goodput when it arrives this soon after the first
    /// INVITE, seconds. Default 10.
    #[serde(default = "ten")]
    pub goodput_window_s: f64,
    /// The link used between nodes no `[[links]]` entry names.
    #[serde(default)]
    pub default_link: LinkSpec,
    /// SIP servers (holdline-proto endpoints with a CPU model and a controller).
    #[serde(default)]
    pub servers: Vec<ServerSpec>,
    /// User agent servers (answer every call).
    #[serde(default)]
    pub uas: Vec<UasSpec>,
    /// Calling populations.
    #[serde(default)]
    pub uac: Vec<UacSpec>,
    /// Links between named nodes (both directions, independent instances).
    #[serde(default)]
    pub links: Vec<LinkEntry>,
    /// Static routes of the servers.
    #[serde(default)]
    pub routes: Vec<RouteSpec>,
    /// UAC populations whose goodput Jain's fairness index is computed over (seed 003's
    /// admitted call flows that share a bottleneck); empty: every population.
    #[serde(default)]
    pub fairness_flows: Vec<String>,
    /// Servers that are also registrars, with a simulated durable store (and, for the
    /// checker, a crash and restart).
    #[serde(default)]
    pub registrars: Vec<RegistrarSpec>,
    /// Populations of phones that register with a registrar and refresh.
    #[serde(default)]
    pub phones: Vec<PhoneSpec>,
    /// Crashes and restarts of servers (any server; a registrar's store survives unless
    /// `new_disk`).
    #[serde(default)]
    pub crashes: Vec<CrashSpec>,
    /// Partitions that heal: a link, or every link of a node, drops every datagram sent in
    /// `[from_s, until_s)`.
    #[serde(default)]
    pub partitions: Vec<PartitionSpec>,
    /// Forward jumps of a server's clock (a VM pause, an NTP step of a monotonic clock).
    #[serde(default)]
    pub clock_jumps: Vec<ClockJumpSpec>,
}

/// A crash and restart of a server (`[[crashes]]`): its process dies at `at_s` — endpoint,
/// transactions, receive queues, unsent datagrams, local controller and uncommitted store
/// writes lost, datagrams to it lost while it is down — and starts again `restart_after_s`
/// later with a new endpoint and controller (a registrar's over its store).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CrashSpec {
    /// The server.
    pub server: String,
    /// When it dies, seconds.
    pub at_s: f64,
    /// How long it stays down, seconds. Default 1.
    #[serde(default = "one_f")]
    pub restart_after_s: f64,
    /// A registrar restarts without its store (a new disk): its committed bindings are
    /// lost. The durable-binding invariant is suspended for its bindings acknowledged
    /// before this restart. Registrars only. Default false.
    #[serde(default)]
    pub new_disk: bool,
}

/// A partition that heals (`[[partitions]]`): every datagram sent in `[from_s, until_s)`
/// on the link `between` two nodes (both directions), or on every link of `node`, is lost.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionSpec {
    /// The two nodes of the link (give this or `node`).
    #[serde(default)]
    pub between: Option<[String; 2]>,
    /// Every link of this node.
    #[serde(default)]
    pub node: Option<String>,
    /// Start, seconds.
    pub from_s: f64,
    /// End (healed), seconds.
    pub until_s: f64,
}

impl PartitionSpec {
    /// Whether the partition cuts the link from node `a` to node `b` (names).
    pub fn cuts(&self, a: &str, b: &str) -> bool {
        match (&self.between, &self.node) {
            (Some([x, y]), _) => (x == a && y == b) || (x == b && y == a),
            (None, Some(n)) => n == a || n == b,
            (None, None) => false,
        }
    }
}

/// A forward jump of a server's clock (`[[clock_jumps]]`): from `at_s` on, the time its
/// endpoint, controller and store see is `jump_s` ahead of the others' (jumps add up).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockJumpSpec {
    /// The server.
    pub server: String,
    /// When, seconds (the simulation's time).
    pub at_s: f64,
    /// How far ahead, seconds (forward only: more than 0, at most 3,600).
    pub jump_s: f64,
}

/// A server's registrar role (`[[registrars]]`): it serves `domain`, keeps its bindings in a
/// simulated durable store whose commits take a drawn time, and may crash and restart.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistrarSpec {
    /// The server (a `[[servers]]` name).
    pub server: String,
    /// The domain it is registrar for. Default `reg.sim`.
    #[serde(default = "reg_domain")]
    pub domain: String,
    /// A commit of the store takes between these many milliseconds (uniform). Default 1-20.
    #[serde(default = "commit_min")]
    pub commit_min_ms: f64,
    /// See `commit_min_ms`.
    #[serde(default = "commit_max")]
    pub commit_max_ms: f64,
    /// The server crashes at this time, seconds: its endpoint, transactions, queues and
    /// uncommitted writes are lost; the store's committed contents are kept. Default: never.
    #[serde(default)]
    pub crash_at_s: Option<f64>,
    /// It restarts this long after the crash, loading its bindings from the committed store
    /// (expired ones dropped), seconds. Default 1.
    #[serde(default = "one_f")]
    pub restart_after_s: f64,
    /// The commit in flight at the crash reaches the disk (a transaction that committed just
    /// before the process died) instead of being lost. Default false.
    #[serde(default)]
    pub inflight_survives: bool,
}

fn reg_domain() -> String {
    "reg.sim".into()
}
fn commit_min() -> f64 {
    1.0
}
fn commit_max() -> f64 {
    20.0
}

/// A population of phones (`[[phones]]`): `holdline-agent`'s registration role, user `k`
/// registering `sip:userK@DOMAIN` with contact `sip:userK@ADDR` and refreshing it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhoneSpec {
    /// Its name (unique among nodes).
    pub name: String,
    /// The registrar's server name (it must have a `[[registrars]]` entry).
    pub registrar: String,
    /// How many users.
    pub users: u64,
    /// New registrations per second.
    pub rate: f64,
    /// The Expires asked for, seconds (60 to 7200: granted as asked).
    #[serde(default = "expires_default")]
    pub expires: u32,
    /// Re-register each user this long after its last 200, seconds, until the load phase
    /// ends. Default: never.
    #[serde(default)]
    pub refresh_s: Option<f64>,
    /// Every `deregister_every`-th user (user numbers that are multiples of it) removes its
    /// binding (a REGISTER with Expires 0) instead of its first refresh, and stops. Needs
    /// `refresh_s`. Default: none.
    #[serde(default)]
    pub deregister_every: Option<u64>,
}

fn expires_default() -> u32 {
    3600
}

fn one() -> u64 {
    1
}
fn two() -> f64 {
    2.0
}
fn five() -> f64 {
    5.0
}
fn ten() -> f64 {
    10.0
}

/// A SIP server node.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSpec {
    /// Its name (unique among nodes).
    pub name: String,
    /// Local overload control, as `[overload] local` of `holdline serve`: `none`,
    /// `queue-limit`, `bang-bang`, `occ`, `queue-delay` (with their defaults). Default `occ`.
    #[serde(default = "occ")]
    pub local: String,
    /// The local controller's measurement interval, milliseconds, for `occ` (holdline's
    /// default: 100; seed 003's OCC-Local and OCC-Hop: 1,000). Default: the controller's.
    #[serde(default)]
    pub local_interval_ms: Option<f64>,
    /// OCC's queue gate, milliseconds (the server's `[overload] queue_gate_ms`: an interval
    /// is cut only when its queueing delay exceeds this; 0 turns the gate off, the paper's
    /// rule). Default: the controller's (20 ms).
    #[serde(default)]
    pub local_queue_gate_ms: Option<f64>,
    /// CPU time per message handled, microseconds (the server's `emulate_cost_us`).
    pub service_us: f64,
    /// CPU time per INVITE handled, microseconds. Default: `service_us`.
    #[serde(default)]
    pub invite_us: Option<f64>,
    /// CPU time per new INVITE rejected at the gate (and per absorbed ACK of its 503),
    /// microseconds (the server's `emulate_reject_cost_us` plus its real work). Default 15.
    #[serde(default = "fifteen")]
    pub reject_us: f64,
    /// CPU time per datagram received, microseconds, besides the handling above: the
    /// receive system call's share (the real worker spends it outside its per-message
    /// handling, in `recvmmsg`). Default 0 (the service times include everything).
    #[serde(default)]
    pub recv_us: f64,
    /// CPU time per datagram sent, microseconds, besides the handling (`sendmmsg` and, on
    /// loopback, the delivery into the receiver's socket, which the sender's CPU does).
    /// Charged to the message whose handling queued the datagram. Default 0.
    #[serde(default)]
    pub send_us: f64,
    /// CPU per destination of a send batch, microseconds: the first datagram of a batch
    /// to a node (a `sendmmsg` between two reads or flushes) wakes the process waiting on
    /// its socket, which the sender's CPU does on loopback; the more peers, the more
    /// wake-ups. Charged to the message whose handling queued that datagram. Default 0.
    #[serde(default)]
    pub wake_us: f64,
    /// Receive queue bound, messages (the socket's receive buffer). Default 256.
    #[serde(default = "queue_default")]
    pub queue: usize,
    /// New INVITEs wait in a queue of their own, served only when the main queue is empty
    /// (the server's `udp_invite_socket`). Default: on unless `local = "none"`.
    #[serde(default)]
    pub invite_queue: Option<bool>,
    /// Bound of the INVITE queue, messages. Default: `queue`.
    #[serde(default)]
    pub invite_queue_bound: Option<usize>,
    /// With the INVITE queue and control on: a new INVITE that waited longer than this in it
    /// is answered 503 whatever the controller says (the server's `defer_max_wait_ms`),
    /// milliseconds. Default 250.
    #[serde(default = "max_wait_default")]
    pub invite_max_wait_ms: f64,
    /// With the INVITE queue: the largest share of time rejections may take (the server's
    /// `rejection_budget`). Default 0.1.
    #[serde(default = "budget_default")]
    pub rejection_budget: f64,
    /// The main receive queue bounded in bytes as Linux counts a UDP socket's receive buffer
    /// (`SO_RCVBUF`: each datagram takes its `truesize`, see [`truesize`]) instead of in
    /// messages (`queue`). The kernel's default is 212,992. Default: none (`queue` applies).
    #[serde(default)]
    pub recv_buffer: Option<usize>,
    /// The INVITE queue bounded in bytes the same way (the server's
    /// `udp_invite_recv_buffer` of 262,144, which Linux doubles: 524,288). Default: none
    /// (`invite_queue_bound` applies).
    #[serde(default)]
    pub invite_recv_buffer: Option<usize>,
    /// Datagrams read per receive call (the worker's `recvmmsg` batch). Default 32.
    #[serde(default = "batch_default")]
    pub batch: usize,
    /// Receive calls per readiness of the main queue before the worker turns to its other
    /// work (the worker's `UDP_BUDGET`), fewer when one returns less than `batch` (the
    /// socket drained). Default 8.
    #[serde(default = "read_batches_default")]
    pub read_batches: usize,
    /// Queue discipline: `holdline` (the worker: admitted calls' messages first, new INVITEs
    /// in their own queue when `invite_queue`) or `paper` (seed 003's servers: one FIFO
    /// queue, a new INVITE about to be rejected is rejected as soon as it arrives — "early
    /// rejection" — and its 503 costs `service_us` like any message). Default `holdline`.
    #[serde(default = "discipline_default")]
    pub discipline: String,
    /// How long the worker, waiting in `poll`, takes to start when a datagram arrives
    /// (scheduler wake-up), microseconds. Default 0.
    #[serde(default)]
    pub wakeup_us: f64,
    /// End-to-end control at this server's forward gate when it is an ingress edge: `none`
    /// or `deoc` (seed 003's DEOC, one controller per target edge; see `docs/sim.md`).
    /// Default `none`.
    #[serde(default = "none_str")]
    pub edge: String,
    /// DEOC's parameters (with `edge = "deoc"`); every one defaults to the paper's value.
    #[serde(default)]
    pub deoc: DeocSpec,
    /// Hop-by-hop feedback: `none`, `loss` (RFC 7339: this server offers `oc` to its next
    /// hops and applies their loss answers at its forward gate, and answers its upstream
    /// clients from its local controller's occupancy — OCC-Hop) or `rate` (RFC 7415: the
    /// same with `oc-algo="rate"`, each client held to its share of the rate the server
    /// answers). Every server answers both. Or `window`: seed 004's window without feedback
    /// (`holdline_overload::DelayWindow` with its defaults, the server's `feedback =
    /// "window"`): a window of new INVITEs outstanding per next hop, judged by their delays,
    /// what does not fit answered 503. Default `none`.
    #[serde(default = "none_str")]
    pub feedback: String,
    /// `oc-validity` of this server's loss answers, milliseconds (the server's
    /// `feedback_validity_ms`). Default 500.
    #[serde(default = "validity_default")]
    pub feedback_validity_ms: u32,
    /// Fairness among upstreams behind the local controller: `none` or `per-upstream`
    /// (`holdline_overload::FairShare`: when the local controller must reject, the previous
    /// hops sending more than their max-min fair share of its admissions are cut to it, the
    /// others are not rejected). Default `none`.
    #[serde(default = "none_str")]
    pub local_fairness: String,
    /// This server reports its headroom in the responses to INVITEs it sends upstream (a
    /// `Load-Report` header, combined with the one from downstream: the smaller headroom
    /// wins), for DEOC edges with `deoc = { signal = "load-report" }`. Needs `local = "occ"`
    /// (the headroom is OCC's next acceptance before clipping, per upstream with
    /// `local_fairness`). Default false.
    #[serde(default)]
    pub load_report: bool,
}

/// DEOC's parameters in a scenario (`deoc = { alpha = 0.2, k = 0.5 }`); absent ones take
/// [`DeocConfig`](holdline_overload::DeocConfig)'s defaults (the paper's values).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeocSpec {
    /// `T`, the control period, milliseconds (1,000).
    #[serde(default)]
    pub period_ms: Option<f64>,
    /// `w`, the EWMA weight of eq. 1 (0.1).
    #[serde(default)]
    pub ewma_weight: Option<f64>,
    /// `α` of eq. 11 (0.2).
    #[serde(default)]
    pub alpha: Option<f64>,
    /// `k` of eq. 11 (0.5).
    #[serde(default)]
    pub k: Option<f64>,
    /// `β` of eq. 4 (1/8).
    #[serde(default)]
    pub beta: Option<f64>,
    /// Seconds without a rejection after which a target's DEOC terminates (100).
    #[serde(default)]
    pub quiet_s: Option<f64>,
    /// Rejections within one period that signal overload and restart a terminated target
    /// (1, the paper's).
    #[serde(default)]
    pub min_rejections: Option<u32>,
    /// ... or fewer when they are this share of the period's calls (0: the count only).
    #[serde(default)]
    pub min_rejection_share: Option<f64>,
    /// A decrease cuts by the period's overload factor, up to this share (0: `β` only).
    #[serde(default)]
    pub max_decrease: Option<f64>,
    /// Timeouts (408, no final response) count as rejections (true).
    #[serde(default)]
    pub timeouts_count: Option<bool>,
    /// A `500` on a branch counts as an overload rejection, as a `503` does (true): a
    /// stateful proxy answers a lone downstream 503 with 500 (RFC 3261 §16.7 step 6), so a
    /// rejection two hops away reaches the ingress edge as a 500 (see `docs/sim.md`).
    #[serde(default)]
    pub count_500: Option<bool>,
    /// What the rate adaptation reads: `binary` (the paper's: 503s seen in the period) or
    /// `load-report` (the `Load-Report` headroom of the servers on the path; see
    /// `holdline_overload::DeocSignal`). Default `binary`.
    #[serde(default)]
    pub signal: Option<String>,
    /// With `load-report`: the share of the reported correction applied per period (1).
    #[serde(default)]
    pub gain: Option<f64>,
    /// With `load-report`: the largest headroom used, ≥ 1 (2).
    #[serde(default)]
    pub max_growth: Option<f64>,
    /// With `load-report`: periods a report stays in force without a fresh one (3).
    #[serde(default)]
    pub max_age: Option<u32>,
    /// How a call's target edge is found: `domain` (default: the egress edge the scenario's
    /// routes give the Request-URI's domain, as a route naming its `deoc_target` does in the
    /// server) or `record-route` (the proxy core learns it from the topmost Record-Route of
    /// the answers, per callee and per domain, as `[overload.deoc] target = "record-route"`
    /// does in the server; a call before any answer goes by its next hop).
    #[serde(default)]
    pub target: Option<String>,
}

impl DeocSpec {
    /// The controller's configuration: the defaults with these values on top.
    pub fn config(&self) -> Result<holdline_overload::DeocConfig, String> {
        let mut c = holdline_overload::DeocConfig::default();
        let secs = |field: &str, v: f64| {
            if v.is_finite() && v > 0.0 && v <= 1e6 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(format!("{field} must be a positive number, got {v}"))
            }
        };
        if let Some(v) = self.period_ms {
            c.period = secs("period_ms", v / 1000.0)?;
        }
        if let Some(v) = self.ewma_weight {
            c.ewma_weight = v;
        }
        if let Some(v) = self.alpha {
            c.alpha = v;
        }
        if let Some(v) = self.k {
            c.k = v;
        }
        if let Some(v) = self.beta {
            c.beta = v;
        }
        if let Some(v) = self.quiet_s {
            c.quiet_period = Some(secs("quiet_s", v)?);
        }
        if let Some(v) = self.timeouts_count {
            c.timeouts_count = v;
        }
        if let Some(v) = self.min_rejections {
            c.min_rejections = v;
        }
        if let Some(v) = self.min_rejection_share {
            c.min_rejection_share = v;
        }
        if let Some(v) = self.max_decrease {
            c.max_decrease = v;
        }
        self.learns_targets()?;
        match self.signal.as_deref() {
            None | Some("binary") => {
                if self.gain.is_some() || self.max_growth.is_some() || self.max_age.is_some() {
                    return Err("gain, max_growth and max_age need signal = \"load-report\"".into());
                }
            }
            Some("load-report") => {
                let d = holdline_overload::DeocSignal::load_report();
                if let holdline_overload::DeocSignal::LoadReport {
                    gain,
                    max_growth,
                    max_age,
                } = d
                {
                    c.signal = holdline_overload::DeocSignal::LoadReport {
                        gain: self.gain.unwrap_or(gain),
                        max_growth: self.max_growth.unwrap_or(max_growth),
                        max_age: self.max_age.unwrap_or(max_age),
                    };
                }
            }
            Some(o) => return Err(format!("signal must be binary or load-report, got `{o}`")),
        }
        holdline_overload::ControllerFactory::validate(&c).map_err(|e| e.to_string())?;
        Ok(c)
    }

    /// Whether a `500` counts as a rejection (default true).
    pub fn counts_500(&self) -> bool {
        self.count_500.unwrap_or(true)
    }

    /// Whether the target edge is learned from Record-Route (`target = "record-route"`)
    /// rather than taken from the scenario's domains (`"domain"`, the default).
    pub fn learns_targets(&self) -> Result<bool, String> {
        match self.target.as_deref() {
            None | Some("domain") => Ok(false),
            Some("record-route") => Ok(true),
            Some(o) => Err(format!("target must be domain or record-route, got `{o}`")),
        }
    }
}

fn none_str() -> String {
    "none".into()
}
fn validity_default() -> u32 {
    500
}

/// The memory a datagram of `len` payload bytes takes in a UDP socket's receive buffer on
/// Linux (its `truesize`), measured on loopback with Linux 6.x: the number of datagrams of
/// each size a 212,992-byte buffer holds is 166 from 198 to 645 bytes, 92 up to 1,669 and 48
/// above (up to 197 bytes it held 256, a limit other than the buffer's; SIP messages are
/// larger).
pub fn truesize(len: usize) -> usize {
    match len {
        0..=197 => 768,
        198..=645 => 1280,
        646..=1669 => 2304,
        _ => 4352,
    }
}

fn batch_default() -> usize {
    32
}
fn read_batches_default() -> usize {
    8
}
fn discipline_default() -> String {
    "holdline".into()
}

fn occ() -> String {
    "occ".into()
}
fn fifteen() -> f64 {
    15.0
}
fn queue_default() -> usize {
    256
}
fn budget_default() -> f64 {
    0.1
}
fn max_wait_default() -> f64 {
    250.0
}

impl ServerSpec {
    /// The controller configuration of `local`.
    pub fn controller(&self) -> Result<ControllerConfig, String> {
        let alg: Algorithm = self.local.parse().map_err(|e| format!("{e}"))?;
        if alg.gate() != holdline_overload::Gate::Ingress {
            return Err(format!(
                "`{alg}` is not a local (ingress) controller: use none, queue-limit, bang-bang, occ or queue-delay"
            ));
        }
        let mut cfg = ControllerConfig::default_for(alg).map_err(|e| e.to_string())?;
        if let Some((key, why)) = self.local_setting_error() {
            return Err(format!("{key} {why}"));
        }
        // Only OCC's settings are set here; the other controllers keep theirs.
        if let ControllerConfig::Occupancy(c) = &mut cfg {
            if let Some(ms) = self.local_interval_ms {
                c.interval = Duration::from_secs_f64(ms / 1000.0);
            }
            if let Some(ms) = self.local_queue_gate_ms {
                c.queue_gate = (ms > 0.0).then(|| Duration::from_secs_f64(ms / 1000.0));
            }
        }
        Ok(cfg)
    }

    /// The first of the local controller's numeric settings out of its range: its key and
    /// why (one check for the scenario file's errors and for [`Self::controller`]).
    fn local_setting_error(&self) -> Option<(&'static str, &'static str)> {
        if self
            .local_interval_ms
            .is_some_and(|ms| !(ms.is_finite() && ms > 0.0 && ms <= 3_600_000.0))
        {
            return Some((
                "local_interval_ms",
                "must be a positive number of milliseconds (at most an hour)",
            ));
        }
        if self
            .local_queue_gate_ms
            .is_some_and(|ms| !(ms.is_finite() && (0.0..=60_000.0).contains(&ms)))
        {
            return Some((
                "local_queue_gate_ms",
                "must be 0 (off) to 60000 milliseconds",
            ));
        }
        None
    }

    /// Whether new INVITEs have a queue of their own.
    pub fn has_invite_queue(&self) -> bool {
        self.discipline != "paper" && self.invite_queue.unwrap_or(self.local != "none")
    }
}

/// A UAS node: answers every INVITE with 180 then 200, and BYE with 200.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UasSpec {
    /// Its name.
    pub name: String,
    /// Delay before the 180, milliseconds. Default 0.
    #[serde(default)]
    pub ring_ms: f64,
    /// Delay from the 180 to the 200, milliseconds. Default 0.
    #[serde(default)]
    pub answer_ms: f64,
    /// The final response to every INVITE (e.g. 503: a callee out of service, for failover
    /// scenarios), 200 to 699. Default 200.
    #[serde(default = "status_ok")]
    pub status: u16,
    /// The agent's loop as `holdline load`'s: under load (16 or more messages read in one
    /// wake-up) it handles messages and timers at most this often, microseconds (`holdline
    /// load --coalesce-us`, whose default is 1,000); what it sends in one iteration leaves
    /// together, the answers to what it read first. Default 0: an ideal agent that handles
    /// every message and timer the instant it comes.
    #[serde(default)]
    pub coalesce_us: f64,
    /// From this time on (seconds) the callee answers nothing: every message that reaches
    /// it is dropped (a next hop that went silent; 0: from the start). Default: never.
    #[serde(default)]
    pub silent_from_s: Option<f64>,
}

fn status_ok() -> u16 {
    200
}

/// A calling population: one UAC per step of its load profile.
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "UacToml")]
pub struct UacSpec {
    /// Its name.
    pub name: String,
    /// The node its calls go to first (a server or a UAS).
    pub target: String,
    /// The domain of the Request-URIs (`user{0..999}@DOMAIN`). Default `example.com`.
    #[serde(default = "domain")]
    pub domain: String,
    /// `poisson` or `constant`. Default `poisson`.
    #[serde(default = "poisson")]
    pub arrivals: String,
    /// Call holding time (fixed), milliseconds: BYE this long after the ACK. Default 0.
    #[serde(default)]
    pub hold_ms: f64,
    /// `fixed` (every call held `hold_ms`) or `exp` (exponentially distributed with mean
    /// `hold_ms`, seed 003's holding time). Default `fixed`.
    #[serde(default = "fixed")]
    pub hold: String,
    /// The agent's loop under load, as [`UasSpec::coalesce_us`]. Default 0.
    pub coalesce_us: f64,
    /// CANCEL a call that has no final response this long after its INVITE, milliseconds
    /// (`holdline load uac --cancel-after`); absent (default): never.
    pub cancel_after_ms: Option<f64>,
    /// The load profile: steps in time order, the first at 0.
    pub steps: Vec<StepSpec>,
    /// The indices of the steps reached by a linear ramp (`ramp = true` in the file): the
    /// rate goes from the previous step's at its `at_s` to this one's at this `at_s`, so
    /// the previous step's interval is a ramp (see [`UacSpec::ramp_end`]). Kept beside
    /// `steps` so that a [`StepSpec`] stays a plain step.
    pub ramp_steps: Vec<usize>,
}

impl UacSpec {
    /// Whether the rate ramps into step `k` (it ramps over step `k - 1`'s interval).
    pub fn ramps_into(&self, k: usize) -> bool {
        k > 0 && k < self.steps.len() && self.ramp_steps.contains(&k)
    }

    /// For step `k`'s interval: the step the rate ramps to at its end (`k + 1`), if it
    /// does.
    pub fn ramp_end(&self, k: usize) -> Option<&StepSpec> {
        self.ramps_into(k + 1).then(|| &self.steps[k + 1])
    }
}

/// [`UacSpec`] as written: steps may say `ramp = true`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UacToml {
    name: String,
    target: String,
    #[serde(default = "domain")]
    domain: String,
    #[serde(default = "poisson")]
    arrivals: String,
    #[serde(default)]
    hold_ms: f64,
    #[serde(default = "fixed")]
    hold: String,
    #[serde(default)]
    coalesce_us: f64,
    #[serde(default)]
    cancel_after_ms: Option<f64>,
    steps: Vec<StepToml>,
}

/// A [`StepSpec`] as written, with its `ramp` flag.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StepToml {
    at_s: f64,
    #[serde(default)]
    rate_cps: Option<f64>,
    #[serde(default)]
    factor: Option<f64>,
    #[serde(default)]
    ramp: bool,
}

impl From<UacToml> for UacSpec {
    fn from(u: UacToml) -> Self {
        Self {
            name: u.name,
            target: u.target,
            domain: u.domain,
            arrivals: u.arrivals,
            hold_ms: u.hold_ms,
            hold: u.hold,
            coalesce_us: u.coalesce_us,
            cancel_after_ms: u.cancel_after_ms,
            ramp_steps: (u.steps.iter().enumerate())
                .filter(|(_, s)| s.ramp)
                .map(|(k, _)| k)
                .collect(),
            steps: u
                .steps
                .into_iter()
                .map(|s| StepSpec {
                    at_s: s.at_s,
                    rate_cps: s.rate_cps,
                    factor: s.factor,
                })
                .collect(),
        }
    }
}

fn fixed() -> String {
    "fixed".into()
}
fn domain() -> String {
    "example.com".into()
}
fn poisson() -> String {
    "poisson".into()
}

/// One step of a load profile: from `at_s` until the next step (or the end of the load),
/// calls arrive at `rate_cps`, or at `factor` × the scenario's `capacity_cps`.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepSpec {
    /// Start of the step, seconds from the start of the run.
    pub at_s: f64,
    /// Calls per second.
    #[serde(default)]
    pub rate_cps: Option<f64>,
    /// Multiple of `capacity_cps`.
    #[serde(default)]
    pub factor: Option<f64>,
}

/// A link's parameters (each direction gets its own instance).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// One-way delay, milliseconds. Default 0.5.
    #[serde(default = "half")]
    pub delay_ms: f64,
    /// Uniform jitter on top, milliseconds. Default 0.
    #[serde(default)]
    pub jitter_ms: f64,
    /// Independent loss probability. Default 0.
    #[serde(default)]
    pub loss: f64,
    /// Probability that a datagram delivered is delivered twice (the copy up to 1 ms
    /// later: netem's `duplicate`), in `[0, 1]`. Default 0.
    #[serde(default)]
    pub duplicate: f64,
    /// Correlation of successive losses at the rate `loss`, in `[0, 1)`: netem's
    /// "loss P% C%", as [`holdline_netmodel::Loss::correlated`] reads it. Default none
    /// (independent loss).
    #[serde(default)]
    pub loss_correlation: Option<f64>,
    /// Gilbert-Elliott correlated loss instead of `loss`.
    #[serde(default)]
    pub gilbert_elliott: Option<GeSpec>,
    /// Rate limit, megabits per second. Default none.
    #[serde(default)]
    pub rate_mbps: Option<f64>,
    /// Queue of the rate limit, kilobytes (drop-tail). Default 64.
    #[serde(default = "queue_kb")]
    pub queue_kb: f64,
    /// Queue of the rate limit, packets (the one being serialised included), on top of
    /// `queue_kb`. Default none.
    #[serde(default)]
    pub queue_packets: Option<u64>,
    /// Derivative random drop's low threshold, packets (with `drd_max_packets` and
    /// `drd_max_probability`; see [`holdline_netmodel::QueueDrop::Derivative`]). Default
    /// none (drop-tail).
    #[serde(default)]
    pub drd_min_packets: Option<u64>,
    /// Derivative random drop's high threshold, packets.
    #[serde(default)]
    pub drd_max_packets: Option<u64>,
    /// Derivative random drop's probability at the high threshold (seed 002: 0.95).
    #[serde(default)]
    pub drd_max_probability: Option<f64>,
}

fn half() -> f64 {
    0.5
}
fn queue_kb() -> f64 {
    64.0
}

impl Default for LinkSpec {
    fn default() -> Self {
        Self {
            delay_ms: half(),
            jitter_ms: 0.0,
            loss: 0.0,
            duplicate: 0.0,
            loss_correlation: None,
            gilbert_elliott: None,
            rate_mbps: None,
            queue_kb: queue_kb(),
            queue_packets: None,
            drd_min_packets: None,
            drd_max_packets: None,
            drd_max_probability: None,
        }
    }
}

/// Gilbert-Elliott parameters (see [`holdline_netmodel::GilbertElliott`]).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GeSpec {
    /// Good → bad, per packet.
    pub p_good_to_bad: f64,
    /// Bad → good, per packet.
    pub p_bad_to_good: f64,
    /// Loss in the good state. Default 0.
    #[serde(default)]
    pub loss_good: f64,
    /// Loss in the bad state. Default 1.
    #[serde(default = "one_f")]
    pub loss_bad: f64,
}

fn one_f() -> f64 {
    1.0
}

impl LinkSpec {
    /// The link model's configuration.
    pub fn to_config(&self) -> Result<LinkConfig, String> {
        if !(0.0..=1.0).contains(&self.duplicate) {
            return Err(format!(
                "duplicate must be in [0, 1], got {}",
                self.duplicate
            ));
        }
        let ms = |field: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(Duration::from_secs_f64(v / 1000.0))
            } else {
                Err(format!("{field} must be a non-negative number, got {v}"))
            }
        };
        let loss = match (self.gilbert_elliott, self.loss_correlation) {
            (Some(_), Some(_)) => {
                return Err("give `gilbert_elliott` or `loss_correlation`, not both".into());
            }
            (Some(g), None) => Loss::GilbertElliott(GilbertElliott {
                p_good_to_bad: g.p_good_to_bad,
                p_bad_to_good: g.p_bad_to_good,
                loss_good: g.loss_good,
                loss_bad: g.loss_bad,
            }),
            (None, Some(c)) => Loss::correlated(self.loss, c).map_err(|e| e.to_string())?,
            (None, None) if self.loss > 0.0 => Loss::Random(self.loss),
            (None, None) => Loss::None,
        };
        let drop = match (
            self.drd_min_packets,
            self.drd_max_packets,
            self.drd_max_probability,
        ) {
            (None, None, None) => QueueDrop::Tail,
            (Some(min_packets), Some(max_packets), Some(max_probability)) => {
                QueueDrop::Derivative {
                    min_packets,
                    max_packets,
                    max_probability,
                }
            }
            _ => {
                return Err(
                    "derivative random drop needs all of drd_min_packets, drd_max_packets \
                     and drd_max_probability (or none of them)"
                        .into(),
                );
            }
        };
        let rate = match self.rate_mbps {
            Some(r) if r.is_finite() && r > 0.0 && self.queue_kb.is_finite() => Some(RateLimit {
                queue_packets: self.queue_packets,
                drop,
                ..RateLimit::new((r * 1e6) as u64, (self.queue_kb.max(0.0) * 1000.0) as u64)
            }),
            Some(r) => return Err(format!("rate_mbps must be a positive number, got {r}")),
            None if self.queue_packets.is_some() || drop != QueueDrop::Tail => {
                return Err(
                    "queue_packets and drd_* need rate_mbps (the queue is the rate limit's)".into(),
                );
            }
            None => None,
        };
        let cfg = LinkConfig {
            delay: ms("delay_ms", self.delay_ms)?,
            jitter: ms("jitter_ms", self.jitter_ms)?,
            loss,
            rate,
            ..LinkConfig::default()
        };
        cfg.validate().map_err(|e| e.to_string())?;
        Ok(cfg)
    }
}

/// A link between two named nodes.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkEntry {
    /// The two nodes.
    pub between: [String; 2],
    /// Its parameters.
    #[serde(flatten)]
    pub spec: LinkSpec,
}

/// A static route of a server: requests whose Request-URI host is `domain` (or any, `*`)
/// go to the node `to`, or to one of the nodes `to_any`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSpec {
    /// The server this route belongs to.
    pub server: String,
    /// The Request-URI host, or `*`. Default `*`.
    #[serde(default = "star")]
    pub domain: String,
    /// The next hop node (give this or `to_any`).
    #[serde(default)]
    pub to: String,
    /// Several next hops: each call goes to one of them, chosen as `pick` says
    /// (`holdline-proto`'s hash routes).
    #[serde(default)]
    pub to_any: Vec<String>,
    /// With `to_any`: `"hash"` (default), rendezvous hashing of the callee's
    /// address-of-record, so that a user's calls take one next hop; or `"round-robin"`, each
    /// call to the next of them in turn (seed 003's load balancing, l. 301), per server.
    #[serde(default = "hash")]
    pub pick: String,
    /// With `to_any`: a call whose next hop answers 503 or times out goes on to the user's
    /// next target in the same transaction (RFC 3263 §4.3; holdline's `[[hash_routes]]
    /// failover`, on by default there and here). Seed 003's servers forward a 503 upstream
    /// instead (round-robin, no retry): its scenarios set `false`.
    #[serde(default = "yes")]
    pub failover: bool,
    /// DNS-like next hops (RFC 3263 with RFC 2782 SRV records), instead of `to`/`to_any`:
    /// the server resolves the route's name to these targets — lowest `priority` first, a
    /// weighted random order within a priority, drawn per request from the run's seed — and
    /// a request that times out, gets a 503 or fails to be sent goes on to the next target
    /// in a new branch of the same transaction (`holdline-proto`'s DNS routes, with the
    /// simulator as the DNS server).
    #[serde(default)]
    pub srv: Vec<SrvSpec>,
}

/// One SRV record of a route (`{ to = "a", priority = 10, weight = 60 }`).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SrvSpec {
    /// The node.
    pub to: String,
    /// Lower first.
    pub priority: u16,
    /// Relative weight within its priority (0: chosen first only rarely, RFC 2782).
    pub weight: u16,
}

impl RouteSpec {
    /// Whether `to_any` picks by round-robin (`pick = "round-robin"`).
    pub fn round_robin(&self) -> bool {
        self.pick == "round-robin"
    }

    /// The next hops of this route (`to`, `to_any`, or the `srv` targets).
    pub fn next_hops(&self) -> Vec<&str> {
        if !self.srv.is_empty() {
            self.srv.iter().map(|t| t.to.as_str()).collect()
        } else if self.to_any.is_empty() {
            vec![self.to.as_str()]
        } else {
            self.to_any.iter().map(String::as_str).collect()
        }
    }
}

fn hash() -> String {
    "hash".into()
}

fn star() -> String {
    "*".into()
}

fn yes() -> bool {
    true
}

/// A TOML error of `text`, located by its span.
fn located(file: &str, text: &str, e: &toml::de::Error) -> ScenarioError {
    let (line, key) = match e.span() {
        Some(span) => locate(text, span.start),
        None => (0, "-".into()),
    };
    ScenarioError {
        file: file.into(),
        line,
        key,
        message: e.message().trim().to_owned(),
    }
}

impl Scenario {
    /// Parses and checks TOML `text`; `file` names it in errors.
    pub fn from_toml(file: &str, text: &str) -> Result<Self, ScenarioError> {
        let sc: Self = toml::from_str(text).map_err(|e| located(file, text, &e))?;
        sc.validate().map_err(|(key, message)| ScenarioError {
            file: file.into(),
            line: find_key_line(text, &key),
            key,
            message,
        })?;
        Ok(sc)
    }

    /// Parses TOML `text`, sets each `(key, value)` of `settings` in the document (a
    /// `--sweep` point: see [`Sweep`]), and checks the result. An error the file has by
    /// itself is located in the file as [`from_toml`](Self::from_toml) does; one a setting
    /// causes names the setting instead of a line (`FILE (--sweep KEY=VALUE): key …`).
    pub fn from_toml_with(
        file: &str,
        text: &str,
        settings: &[(String, String)],
    ) -> Result<Self, ScenarioError> {
        if settings.is_empty() {
            return Self::from_toml(file, text);
        }
        let doc: toml::Table = toml::from_str(text).map_err(|e| located(file, text, &e))?;
        let blame = |set: &[(String, String)], key: String, message: String| {
            let what: Vec<String> = set.iter().map(|(k, v)| format!("{k}={v}")).collect();
            ScenarioError {
                file: format!("{file} (--sweep {})", what.join(" --sweep ")),
                line: 0,
                key,
                message,
            }
        };
        let apply = |set: &[(String, String)]| -> Result<Self, (String, String)> {
            let mut d = doc.clone();
            for (k, v) in set {
                apply_setting(&mut d, k, &sweep_value(v)).map_err(|m| (k.clone(), m))?;
            }
            let sc: Self = toml::Value::Table(d)
                .try_into()
                .map_err(|e: toml::de::Error| {
                    let key = set.last().map_or_else(String::new, |s| s.0.clone());
                    (key, e.message().trim().to_owned())
                })?;
            sc.validate()?;
            Ok(sc)
        };
        match apply(settings) {
            Ok(sc) => Ok(sc),
            Err((key, message)) => {
                // The file's own error, where it is in the file.
                if let Err(e) = Self::from_toml(file, text)
                    && e.message == message
                {
                    return Err(e);
                }
                // The first setting that fails on its own, or all of them together.
                for s in settings {
                    if let Err((key, message)) = apply(std::slice::from_ref(s)) {
                        return Err(blame(std::slice::from_ref(s), key, message));
                    }
                }
                Err(blame(settings, key, message))
            }
        }
    }

    /// Every node name: servers, UASs, UAC populations, in that order (the node ids).
    pub fn node_names(&self) -> Vec<&str> {
        self.servers
            .iter()
            .map(|s| s.name.as_str())
            .chain(self.uas.iter().map(|u| u.name.as_str()))
            .chain(self.uac.iter().map(|u| u.name.as_str()))
            .chain(self.phones.iter().map(|p| p.name.as_str()))
            .collect()
    }

    /// The rate of a step, calls per second.
    pub fn step_rate(&self, step: &StepSpec) -> f64 {
        match (step.rate_cps, step.factor) {
            (Some(r), _) => r,
            (None, Some(f)) => f * self.capacity_cps.unwrap_or(0.0),
            (None, None) => 0.0,
        }
    }

    fn validate(&self) -> Result<(), (String, String)> {
        let bad = |key: String, msg: &str| Err((key, msg.to_owned()));
        let pos = |v: f64| v.is_finite() && v > 0.0;
        if !pos(self.duration_s) {
            return bad("duration_s".into(), "must be a positive number of seconds");
        }
        if !(self.drain_s.is_finite() && self.drain_s >= 0.0) {
            return bad("drain_s".into(), "must be zero or more seconds");
        }
        if !(self.settle_s.is_finite() && self.settle_s >= 0.0) {
            return bad("settle_s".into(), "must be zero or more seconds");
        }
        if !pos(self.goodput_window_s) {
            return bad("goodput_window_s".into(), "must be a positive number");
        }
        if self.runs == 0 || self.runs > 1000 {
            return bad("runs".into(), "must be 1 to 1000");
        }
        if self.capacity_cps.is_some_and(|c| !pos(c)) {
            return bad("capacity_cps".into(), "must be a positive number");
        }
        let names = self.node_names();
        let mut seen = BTreeSet::new();
        for (i, n) in names.iter().enumerate() {
            if n.is_empty() || !seen.insert(*n) {
                let key = self.name_key(i);
                return bad(key, "node names must be non-empty and unique");
            }
        }
        if names.len() > 60_000 {
            return bad("servers".into(), "too many nodes");
        }
        let known = |n: &str| names.contains(&n);
        for (i, s) in self.servers.iter().enumerate() {
            if let Some((key, why)) = s.local_setting_error() {
                return bad(format!("servers[{i}].{key}"), why);
            }
            if let Err(m) = s.controller() {
                return bad(format!("servers[{i}].local"), &m);
            }
            let us = |v: f64| v.is_finite() && (0.0..=1e6).contains(&v);
            if !us(s.service_us)
                || s.invite_us.is_some_and(|v| !us(v))
                || !us(s.reject_us)
                || !us(s.wakeup_us)
            {
                return bad(
                    format!("servers[{i}].service_us"),
                    "service times must be 0 to 1000000 µs",
                );
            }
            for (key, v) in [
                ("recv_us", s.recv_us),
                ("send_us", s.send_us),
                ("wake_us", s.wake_us),
            ] {
                if !us(v) {
                    return bad(
                        format!("servers[{i}].{key}"),
                        "must be 0 to 1000000 µs per datagram",
                    );
                }
            }
            if !(s.invite_max_wait_ms.is_finite() && s.invite_max_wait_ms >= 0.0) {
                return bad(
                    format!("servers[{i}].invite_max_wait_ms"),
                    "must be zero or more milliseconds",
                );
            }
            if s.queue == 0 || s.invite_queue_bound == Some(0) {
                return bad(
                    format!("servers[{i}].queue"),
                    "queue bounds must be at least 1",
                );
            }
            if s.recv_buffer == Some(0) || s.invite_recv_buffer == Some(0) {
                return bad(
                    format!("servers[{i}].recv_buffer"),
                    "receive buffers must be at least 1 byte",
                );
            }
            if !(1..=1024).contains(&s.batch) || !(1..=1024).contains(&s.read_batches) {
                return bad(
                    format!("servers[{i}].batch"),
                    "batch sizes must be 1 to 1024",
                );
            }
            if s.discipline != "holdline" && s.discipline != "paper" {
                return bad(
                    format!("servers[{i}].discipline"),
                    "must be holdline or paper",
                );
            }
            if s.edge != "none" && s.edge != "deoc" {
                return bad(format!("servers[{i}].edge"), "must be none or deoc");
            }
            if let Err(m) = s.deoc.config() {
                return bad(format!("servers[{i}].deoc"), &m);
            }
            if s.local_fairness != "none" && s.local_fairness != "per-upstream" {
                return bad(
                    format!("servers[{i}].local_fairness"),
                    "must be none or per-upstream",
                );
            }
            if s.load_report && s.local != "occ" {
                return bad(
                    format!("servers[{i}].load_report"),
                    "needs local = \"occ\" (the reported headroom is OCC's)",
                );
            }
            if !matches!(s.feedback.as_str(), "none" | "loss" | "rate" | "window") {
                return bad(
                    format!("servers[{i}].feedback"),
                    "must be none, loss, rate or window",
                );
            }
            if s.feedback_validity_ms == 0 {
                return bad(
                    format!("servers[{i}].feedback_validity_ms"),
                    "must be at least 1 ms",
                );
            }
            if !(s.rejection_budget > 0.0 && s.rejection_budget <= 1.0) {
                return bad(
                    format!("servers[{i}].rejection_budget"),
                    "must be greater than 0, at most 1",
                );
            }
        }
        for (i, u) in self.uas.iter().enumerate() {
            let ms = |v: f64| v.is_finite() && v >= 0.0;
            if !ms(u.ring_ms) || !ms(u.answer_ms) {
                return bad(format!("uas[{i}].ring_ms"), "delays must be zero or more");
            }
            if !(200..=699).contains(&u.status) {
                return bad(
                    format!("uas[{i}].status"),
                    "must be a final status, 200 to 699",
                );
            }
            if !(u.coalesce_us.is_finite() && (0.0..=100_000.0).contains(&u.coalesce_us)) {
                return bad(
                    format!("uas[{i}].coalesce_us"),
                    "must be 0 to 100000 (microseconds)",
                );
            }
            if u.silent_from_s
                .is_some_and(|t| !(t.is_finite() && t >= 0.0))
            {
                return bad(
                    format!("uas[{i}].silent_from_s"),
                    "must be zero or more seconds",
                );
            }
        }
        for (i, u) in self.uac.iter().enumerate() {
            if !known(&u.target) {
                return bad(format!("uac[{i}].target"), "names no node");
            }
            if u.arrivals != "poisson" && u.arrivals != "constant" {
                return bad(format!("uac[{i}].arrivals"), "must be poisson or constant");
            }
            if !(u.coalesce_us.is_finite() && (0.0..=100_000.0).contains(&u.coalesce_us)) {
                return bad(
                    format!("uac[{i}].coalesce_us"),
                    "must be 0 to 100000 (microseconds)",
                );
            }
            if !(u.hold_ms.is_finite() && u.hold_ms >= 0.0) {
                return bad(format!("uac[{i}].hold_ms"), "must be zero or more");
            }
            if u.cancel_after_ms
                .is_some_and(|ms| !(ms.is_finite() && ms > 0.0))
            {
                return bad(
                    format!("uac[{i}].cancel_after_ms"),
                    "must be more than zero",
                );
            }
            if u.hold != "fixed" && u.hold != "exp" {
                return bad(format!("uac[{i}].hold"), "must be fixed or exp");
            }
            if u.domain.is_empty() || u.domain.contains(['{', '}', ' ', '@']) {
                return bad(format!("uac[{i}].domain"), "is not a host name");
            }
            if u.steps.is_empty() || u.steps.len() > 1000 {
                return bad(format!("uac[{i}].steps"), "needs 1 to 1000 steps");
            }
            let mut prev = -1.0;
            for s in &u.steps {
                if !(s.at_s.is_finite() && s.at_s > prev && s.at_s < self.duration_s) {
                    return bad(
                        format!("uac[{i}].steps"),
                        "steps must start in increasing order within duration_s",
                    );
                }
                prev = s.at_s;
                match (s.rate_cps, s.factor) {
                    (Some(r), None) if r.is_finite() && r >= 0.0 => {}
                    (None, Some(f)) if f.is_finite() && f >= 0.0 => {
                        if self.capacity_cps.is_none() {
                            return bad(
                                format!("uac[{i}].steps"),
                                "a step with `factor` needs `capacity_cps`",
                            );
                        }
                    }
                    _ => {
                        return bad(
                            format!("uac[{i}].steps"),
                            "each step needs either rate_cps or factor (non-negative)",
                        );
                    }
                }
            }
            if u.steps[0].at_s != 0.0 {
                return bad(format!("uac[{i}].steps"), "the first step must start at 0");
            }
            if u.ramp_steps.contains(&0) {
                return bad(
                    format!("uac[{i}].steps"),
                    "the first step cannot be a ramp (`ramp = true` ramps from the previous step)",
                );
            }
        }
        for (i, f) in self.fairness_flows.iter().enumerate() {
            if !self.uac.iter().any(|u| &u.name == f) {
                return bad(
                    "fairness_flows".into(),
                    &format!("`{f}` names no UAC population (entry {i})"),
                );
            }
        }
        if let Err(m) = self.default_link.to_config() {
            return bad("default_link.delay_ms".into(), &m);
        }
        for (i, l) in self.links.iter().enumerate() {
            if !known(&l.between[0]) || !known(&l.between[1]) || l.between[0] == l.between[1] {
                return bad(
                    format!("links[{i}].between"),
                    "must name two different nodes",
                );
            }
            if let Err(m) = l.spec.to_config() {
                return bad(format!("links[{i}].delay_ms"), &m);
            }
        }
        for (i, r) in self.routes.iter().enumerate() {
            if !self.servers.iter().any(|s| s.name == r.server) {
                return bad(format!("routes[{i}].server"), "names no server");
            }
            if !r.srv.is_empty() {
                if !r.to.is_empty() || !r.to_any.is_empty() {
                    return bad(
                        format!("routes[{i}].srv"),
                        "give `to`, `to_any` or `srv`, only one",
                    );
                }
                let mut seen = BTreeSet::new();
                if r.srv.len() > 32
                    || r.srv
                        .iter()
                        .any(|t| !known(&t.to) || t.to == r.server || !seen.insert(&t.to))
                {
                    return bad(
                        format!("routes[{i}].srv"),
                        "must name 1 to 32 other nodes, each once",
                    );
                }
            } else if r.to_any.is_empty() {
                if !known(&r.to) || r.to == r.server {
                    return bad(format!("routes[{i}].to"), "names no other node");
                }
            } else {
                if !r.to.is_empty() {
                    return bad(format!("routes[{i}].to"), "give `to` or `to_any`, not both");
                }
                if r.to_any.len() > 64 || r.to_any.iter().any(|t| !known(t) || *t == r.server) {
                    return bad(
                        format!("routes[{i}].to_any"),
                        "must name 1 to 64 other nodes",
                    );
                }
            }
            if !matches!(r.pick.as_str(), "hash" | "round-robin") {
                return bad(
                    format!("routes[{i}].pick"),
                    "expected \"hash\" or \"round-robin\"",
                );
            }
            if r.round_robin() && r.to_any.is_empty() {
                return bad(
                    format!("routes[{i}].pick"),
                    "\"round-robin\" needs `to_any`",
                );
            }
        }
        self.validate_registrations()
    }

    /// The `[[registrars]]` and `[[phones]]` entries.
    fn validate_registrations(&self) -> Result<(), (String, String)> {
        let bad = |key: String, msg: &str| Err((key, msg.to_owned()));
        let mut seen = BTreeSet::new();
        for (i, r) in self.registrars.iter().enumerate() {
            if !self.servers.iter().any(|s| s.name == r.server) || !seen.insert(&r.server) {
                return bad(
                    format!("registrars[{i}].server"),
                    "must name a server, once",
                );
            }
            if r.domain.is_empty() || r.domain.contains(|c: char| c.is_whitespace() || c == '@') {
                return bad(format!("registrars[{i}].domain"), "must be a host name");
            }
            let ms = |v: f64| v.is_finite() && (0.0..=60_000.0).contains(&v);
            if !ms(r.commit_min_ms) || !ms(r.commit_max_ms) || r.commit_max_ms < r.commit_min_ms {
                return bad(
                    format!("registrars[{i}].commit_max_ms"),
                    "commit_min_ms <= commit_max_ms, both 0 to 60,000 ms",
                );
            }
            if r.crash_at_s.is_some_and(|t| !(t.is_finite() && t >= 0.0)) {
                return bad(
                    format!("registrars[{i}].crash_at_s"),
                    "must be zero or more seconds",
                );
            }
            if !(r.restart_after_s.is_finite() && r.restart_after_s > 0.0) {
                return bad(
                    format!("registrars[{i}].restart_after_s"),
                    "must be a positive number of seconds",
                );
            }
        }
        for (i, p) in self.phones.iter().enumerate() {
            if !self.registrars.iter().any(|r| r.server == p.registrar) {
                return bad(
                    format!("phones[{i}].registrar"),
                    "names no server with a [[registrars]] entry",
                );
            }
            if p.users == 0 || p.users > 100_000 {
                return bad(format!("phones[{i}].users"), "must be 1 to 100,000");
            }
            if !(p.rate.is_finite() && p.rate > 0.0) {
                return bad(format!("phones[{i}].rate"), "must be a positive number");
            }
            if !(60..=7200).contains(&p.expires) {
                return bad(format!("phones[{i}].expires"), "must be 60 to 7200 seconds");
            }
            if p.refresh_s.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
                return bad(
                    format!("phones[{i}].refresh_s"),
                    "must be a positive number of seconds",
                );
            }
            if p.deregister_every
                .is_some_and(|k| k == 0 || p.refresh_s.is_none())
            {
                return bad(
                    format!("phones[{i}].deregister_every"),
                    "must be 1 or more, with refresh_s",
                );
            }
        }
        self.validate_faults()
    }

    /// The `[[crashes]]`, `[[partitions]]` and `[[clock_jumps]]` entries.
    fn validate_faults(&self) -> Result<(), (String, String)> {
        let bad = |key: String, msg: &str| Err((key, msg.to_owned()));
        let secs = |t: f64| t.is_finite() && t >= 0.0;
        let server = |n: &str| self.servers.iter().any(|s| s.name == n);
        for (i, c) in self.crashes.iter().enumerate() {
            if !server(&c.server) {
                return bad(format!("crashes[{i}].server"), "must name a server");
            }
            if !secs(c.at_s) {
                return bad(format!("crashes[{i}].at_s"), "must be zero or more seconds");
            }
            if !(c.restart_after_s.is_finite() && c.restart_after_s > 0.0) {
                return bad(
                    format!("crashes[{i}].restart_after_s"),
                    "must be a positive number of seconds",
                );
            }
            if c.new_disk && !self.registrars.iter().any(|r| r.server == c.server) {
                return bad(
                    format!("crashes[{i}].new_disk"),
                    "only a registrar has a disk",
                );
            }
        }
        let names = self.node_names();
        for (i, p) in self.partitions.iter().enumerate() {
            match (&p.between, &p.node) {
                (Some([a, b]), None) => {
                    if !names.contains(&a.as_str()) || !names.contains(&b.as_str()) || a == b {
                        return bad(
                            format!("partitions[{i}].between"),
                            "must name two different nodes",
                        );
                    }
                }
                (None, Some(n)) => {
                    if !names.contains(&n.as_str()) {
                        return bad(format!("partitions[{i}].node"), "names no node");
                    }
                }
                _ => {
                    return bad(
                        format!("partitions[{i}].from_s"),
                        "give `between` or `node`, not both",
                    );
                }
            }
            if !secs(p.from_s) {
                return bad(
                    format!("partitions[{i}].from_s"),
                    "must be zero or more seconds",
                );
            }
            if !(p.until_s.is_finite() && p.until_s > p.from_s) {
                return bad(
                    format!("partitions[{i}].until_s"),
                    "must be later than from_s",
                );
            }
        }
        for (i, j) in self.clock_jumps.iter().enumerate() {
            if !server(&j.server) {
                return bad(format!("clock_jumps[{i}].server"), "must name a server");
            }
            if !secs(j.at_s) {
                return bad(
                    format!("clock_jumps[{i}].at_s"),
                    "must be zero or more seconds",
                );
            }
            if !(j.jump_s.is_finite() && j.jump_s > 0.0 && j.jump_s <= 3600.0) {
                return bad(
                    format!("clock_jumps[{i}].jump_s"),
                    "must be more than 0, at most 3,600 seconds (forward only)",
                );
            }
        }
        Ok(())
    }

    /// The egress edge of each domain: the server whose route for it leaves the network
    /// (goes to a user agent, not to another server). DEOC's target of a call is the egress
    /// edge of its Request-URI's domain. Domains routed to user agents by several servers
    /// are left out (no single egress).
    pub fn egress_edges(&self) -> std::collections::BTreeMap<String, String> {
        let servers: BTreeSet<&str> = self.servers.iter().map(|s| s.name.as_str()).collect();
        let mut out: std::collections::BTreeMap<String, Option<String>> = Default::default();
        for r in &self.routes {
            if r.domain == "*" || r.next_hops().iter().any(|h| servers.contains(h)) {
                continue;
            }
            let key = r.domain.to_ascii_lowercase();
            match out.get(&key) {
                Some(Some(s)) if *s != r.server => {
                    out.insert(key, None);
                }
                Some(_) => {}
                None => {
                    out.insert(key, Some(r.server.clone()));
                }
            }
        }
        out.into_iter()
            .filter_map(|(d, s)| s.map(|s| (d, s)))
            .collect()
    }

    /// The ingress edges: every server a UAC population sends its calls to.
    pub fn ingress_edges(&self) -> BTreeSet<String> {
        self.uac
            .iter()
            .filter(|u| self.servers.iter().any(|s| s.name == u.target))
            .map(|u| u.target.clone())
            .collect()
    }

    /// This scenario with one of seed 003's mechanisms (the `--mechanism` sweep of
    /// `holdline sim run`): `LOCAL[+hop][+deoc|+asis][+probe][+fair]`, e.g. `none`, `occ`,
    /// `occ+hop`, `occ+deoc`, `occ+asis+fair`. Every server's `local` is set to `LOCAL`;
    /// `+hop` turns on RFC 7339 loss feedback at every server (OCC-Hop), `+deoc` DEOC at
    /// every ingress edge (without it, and without `+asis`, DEOC is off everywhere); `+asis`
    /// keeps each server's `edge` as the file sets it (mixed DEOC and non-DEOC edges);
    /// `+probe` gives every DEOC edge the load-report signal and turns on `load_report` at
    /// every server (with `+fair`, per upstream); `+fair` sets `local_fairness =
    /// "per-upstream"` at every server. Without `+probe` and `+fair`, both are off.
    pub fn with_mechanism(&self, mechanism: &str) -> Result<Self, String> {
        let mut parts = mechanism.split('+');
        let local = parts.next().unwrap_or_default().trim();
        let (mut hop, mut deoc, mut asis, mut probe, mut fair) =
            (false, false, false, false, false);
        for p in parts {
            match p.trim() {
                "hop" => hop = true,
                "deoc" => deoc = true,
                "asis" => asis = true,
                "probe" => probe = true,
                "fair" => fair = true,
                o => {
                    return Err(format!(
                        "mechanism `{mechanism}`: `{o}` is not hop, deoc, asis, probe or fair"
                    ));
                }
            }
        }
        if deoc && asis {
            return Err(format!(
                "mechanism `{mechanism}`: give deoc (every ingress edge) or asis (the file's), not both"
            ));
        }
        let mut sc = self.clone();
        let ingress = self.ingress_edges();
        for s in &mut sc.servers {
            s.local = local.to_owned();
            s.controller()
                .map_err(|e| format!("mechanism `{mechanism}`: {e}"))?;
            s.feedback = if hop { "loss" } else { "none" }.to_owned();
            if !asis {
                s.edge = if deoc && ingress.contains(&s.name) {
                    "deoc"
                } else {
                    "none"
                }
                .to_owned();
            }
            s.local_fairness = if fair { "per-upstream" } else { "none" }.to_owned();
            s.load_report = probe;
            s.deoc.signal = probe.then(|| "load-report".to_owned());
            if !probe {
                (s.deoc.gain, s.deoc.max_growth, s.deoc.max_age) = (None, None, None);
            }
            if probe && local != "occ" {
                return Err(format!(
                    "mechanism `{mechanism}`: probe needs occ (the headroom is OCC's)"
                ));
            }
        }
        Ok(sc)
    }

    fn name_key(&self, i: usize) -> String {
        let (s, u) = (self.servers.len(), self.uas.len());
        if i < s {
            format!("servers[{i}].name")
        } else if i < s + u {
            format!("uas[{}].name", i - s)
        } else if i < s + u + self.uac.len() {
            format!("uac[{}].name", i - s - u)
        } else {
            format!("phones[{}].name", i - s - u - self.uac.len())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
duration_s = 10
capacity_cps = 100

[[servers]]
name = "proxy"
local = "occ"
service_us = 100

[[uas]]
name = "uas"

[[uac]]
name = "uac"
target = "proxy"
steps = [{ at_s = 0, factor = 0.5 }, { at_s = 5, rate_cps = 400 }]

[[routes]]
server = "proxy"
to = "uas"
"#;

    #[test]
    fn parses_a_scenario() {
        let s = Scenario::from_toml("s.toml", GOOD).expect("valid");
        assert_eq!(s.node_names(), ["proxy", "uas", "uac"]);
        assert_eq!(s.step_rate(&s.uac[0].steps[0]), 50.0);
        assert_eq!(s.step_rate(&s.uac[0].steps[1]), 400.0);
        assert!(s.servers[0].has_invite_queue());
    }

    #[test]
    fn unknown_keys_name_file_line_and_key() {
        let text = GOOD.replace("service_us = 100", "service_us = 100\nbogus = 1");
        let e = Scenario::from_toml("s.toml", &text).expect_err("unknown key");
        assert_eq!(e.file, "s.toml");
        assert_eq!(e.line, 9);
        assert_eq!(e.key, "servers.bogus");
        assert!(e.to_string().starts_with("s.toml:9: key `servers.bogus`"));
    }

    #[test]
    fn semantic_errors_name_the_key() {
        let text = GOOD.replace("local = \"occ\"", "local = \"loss-client\"");
        let e = Scenario::from_toml("s.toml", &text).expect_err("forward gate");
        assert_eq!((e.line, e.key.as_str()), (7, "servers[0].local"));
        let text = GOOD.replace("target = \"proxy\"", "target = \"nowhere\"");
        let e = Scenario::from_toml("s.toml", &text).expect_err("unknown node");
        assert_eq!((e.line, e.key.as_str()), (15, "uac[0].target"));
        for key in ["recv_us", "send_us", "wake_us"] {
            let text = GOOD.replace("local = \"occ\"", &format!("local = \"occ\"\n{key} = -1"));
            let e = Scenario::from_toml("s.toml", &text).expect_err("negative cost");
            assert_eq!(e.key, format!("servers[0].{key}"));
        }
    }

    #[test]
    fn occs_queue_gate_can_be_set_or_turned_off() {
        let gate = |text: &str| match Scenario::from_toml("s.toml", text).expect("valid").servers[0]
            .controller()
            .expect("controller")
        {
            ControllerConfig::Occupancy(c) => c.queue_gate,
            other => panic!("not OCC: {other:?}"),
        };
        assert_eq!(gate(GOOD), Some(Duration::from_millis(20)), "the default");
        let set = |v: &str| {
            GOOD.replace(
                "service_us = 100",
                &format!("service_us = 100\nlocal_queue_gate_ms = {v}"),
            )
        };
        assert_eq!(gate(&set("150")), Some(Duration::from_millis(150)));
        assert_eq!(gate(&set("0")), None, "0 is the paper's rule");
        let e = Scenario::from_toml("s.toml", &set("-1")).expect_err("negative");
        assert_eq!(
            (e.line, e.key.as_str()),
            (9, "servers[0].local_queue_gate_ms")
        );
    }

    #[test]
    fn registrars_and_phones_are_checked_with_file_line_and_key() {
        let reg = "\n[[registrars]]\nserver = \"proxy\"\ncrash_at_s = 2\n\
                   [[phones]]\nname = \"ph\"\nregistrar = \"proxy\"\nusers = 10\nrate = 5\n";
        let text = format!("{GOOD}{reg}");
        let s = Scenario::from_toml("s.toml", &text).expect("loads");
        assert_eq!(s.registrars[0].domain, "reg.sim");
        assert_eq!(s.registrars[0].crash_at_s, Some(2.0));
        assert_eq!(
            (s.registrars[0].commit_min_ms, s.registrars[0].commit_max_ms),
            (1.0, 20.0)
        );
        assert_eq!((s.phones[0].expires, s.phones[0].refresh_s), (3600, None));
        assert_eq!(
            s.node_names().last(),
            Some(&"ph"),
            "phones are the last nodes"
        );
        for (from, to, key) in [
            (
                "server = \"proxy\"",
                "server = \"uas\"",
                "registrars[0].server",
            ),
            (
                "crash_at_s = 2",
                "crash_at_s = -1",
                "registrars[0].crash_at_s",
            ),
            (
                "registrar = \"proxy\"",
                "registrar = \"uas\"",
                "phones[0].registrar",
            ),
            ("users = 10", "users = 0", "phones[0].users"),
            ("name = \"ph\"", "name = \"uas\"", "phones[0].name"),
        ] {
            let text = format!("{GOOD}{}", reg.replace(from, to));
            let line = 1 + text
                .lines()
                .collect::<Vec<_>>()
                .iter()
                .rposition(|l| *l == to)
                .expect("replaced");
            let e = Scenario::from_toml("s.toml", &text).expect_err(key);
            assert_eq!((e.line, e.key.as_str()), (line, key), "{e}");
        }
        let text = format!(
            "{GOOD}{}",
            reg.replace("crash_at_s = 2", "commit_max_ms = 0.5")
        );
        let e = Scenario::from_toml("s.toml", &text).expect_err("max < min");
        assert_eq!(e.key, "registrars[0].commit_max_ms");
        let text = format!("{GOOD}{reg}expires = 30\n");
        let e = Scenario::from_toml("s.toml", &text).expect_err("expires");
        assert_eq!(e.key, "phones[0].expires");
    }

    #[test]
    fn edge_and_feedback_settings_are_checked_with_file_line_and_key() {
        let text = GOOD.replace("service_us = 100", "service_us = 100\nedge = \"deoc\"");
        let s = Scenario::from_toml("s.toml", &text).expect("deoc is an edge setting");
        assert_eq!(s.servers[0].edge, "deoc");
        assert_eq!(s.servers[0].deoc.config().expect("defaults").alpha, 0.2);

        let text = GOOD.replace("service_us = 100", "service_us = 100\nedge = \"e2e\"");
        let e = Scenario::from_toml("s.toml", &text).expect_err("bad edge");
        assert_eq!((e.line, e.key.as_str()), (9, "servers[0].edge"));
        assert!(
            e.to_string()
                .starts_with("s.toml:9: key `servers[0].edge`: must be none or deoc"),
            "{e}"
        );

        let text = GOOD.replace(
            "service_us = 100",
            "service_us = 100\nedge = \"deoc\"\ndeoc = { k = 1.5 }",
        );
        let e = Scenario::from_toml("s.toml", &text).expect_err("k out of range");
        assert_eq!((e.line, e.key.as_str()), (10, "servers[0].deoc"));
        assert!(e.message.contains('k'), "{e}");

        let text = GOOD.replace("service_us = 100", "service_us = 100\ndeoc = { gamma = 1 }");
        let e = Scenario::from_toml("s.toml", &text).expect_err("unknown DEOC parameter");
        assert_eq!((e.line, e.key.as_str()), (9, "servers.deoc"));
        assert!(e.message.contains("unknown field `gamma`"), "{e}");

        let text = GOOD.replace(
            "service_us = 100",
            "service_us = 100\nfeedback = \"windows\"",
        );
        let e = Scenario::from_toml("s.toml", &text).expect_err("bad feedback");
        assert_eq!((e.line, e.key.as_str()), (9, "servers[0].feedback"));
    }

    #[test]
    fn fairness_and_load_report_settings_are_checked_with_file_line_and_key() {
        let with =
            |keys: &str| GOOD.replace("service_us = 100", &format!("service_us = 100\n{keys}"));
        let s = Scenario::from_toml(
            "s.toml",
            &with("local_fairness = \"per-upstream\"\nload_report = true\nedge = \"deoc\"\ndeoc = { signal = \"load-report\", gain = 0.5 }"),
        )
        .expect("valid");
        assert_eq!(s.servers[0].local_fairness, "per-upstream");
        assert!(s.servers[0].load_report);
        let c = s.servers[0].deoc.config().expect("deoc");
        assert_eq!(
            c.signal,
            holdline_overload::DeocSignal::LoadReport {
                gain: 0.5,
                max_growth: 2.0,
                max_age: 3
            }
        );
        // The default is the paper's binary signal.
        let s = Scenario::from_toml("s.toml", GOOD).expect("valid");
        assert_eq!(
            s.servers[0].deoc.config().expect("deoc").signal,
            holdline_overload::DeocSignal::Binary
        );
        let refused = [
            (
                "local_fairness = \"fifo\"",
                "servers[0].local_fairness",
                "none or per-upstream",
            ),
            (
                "local = \"none\"\nload_report = true",
                "servers[0].load_report",
                "needs local",
            ),
            (
                "deoc = { signal = \"ecn\" }",
                "servers[0].deoc",
                "binary or load-report",
            ),
            ("deoc = { gain = 0.5 }", "servers[0].deoc", "need signal"),
            (
                "deoc = { target = \"via\" }",
                "servers[0].deoc",
                "domain or record-route",
            ),
            (
                "deoc = { signal = \"load-report\", max_growth = 0.5 }",
                "servers[0].deoc",
                "max_growth",
            ),
        ];
        for (keys, key, message) in refused {
            let text = with(keys).replace(
                "local = \"occ\"\nservice_us = 100\nlocal = \"none\"",
                "local = \"none\"\nservice_us = 100",
            );
            let e = Scenario::from_toml("s.toml", &text).expect_err(keys);
            assert_eq!(e.key, key, "{keys}: {e}");
            assert!(e.line > 0, "{keys}: {e}");
            assert!(e.message.contains(message), "{keys}: {e}");
        }
    }

    #[test]
    fn routes_to_any_egress_edges_and_mechanisms() {
        let text = r#"
duration_s = 10
[[servers]]
name = "e1"
service_us = 100
[[servers]]
name = "c1"
service_us = 100
[[servers]]
name = "c2"
service_us = 100
[[servers]]
name = "e2"
service_us = 100
[[uas]]
name = "ua2"
[[uac]]
name = "ua1"
target = "e1"
domain = "e2.example"
steps = [{ at_s = 0, rate_cps = 1 }]
[[routes]]
server = "e1"
domain = "e2.example"
to_any = ["c1", "c2"]
[[routes]]
server = "c1"
domain = "e2.example"
to = "e2"
[[routes]]
server = "c2"
domain = "e2.example"
to = "e2"
[[routes]]
server = "e2"
domain = "E2.example"
to = "ua2"
"#;
        let s = Scenario::from_toml("t.toml", text).expect("valid");
        assert_eq!(s.routes[0].next_hops(), ["c1", "c2"]);
        let egress: Vec<(String, String)> = s.egress_edges().into_iter().collect();
        assert_eq!(egress, [("e2.example".to_owned(), "e2".to_owned())]);
        assert_eq!(s.ingress_edges().into_iter().collect::<Vec<_>>(), ["e1"]);
        let m = s.with_mechanism("occ+hop+deoc").expect("mechanism");
        let roles: Vec<(&str, &str, &str)> = m
            .servers
            .iter()
            .map(|v| (v.local.as_str(), v.edge.as_str(), v.feedback.as_str()))
            .collect();
        assert_eq!(
            roles,
            [
                ("occ", "deoc", "loss"),
                ("occ", "none", "loss"),
                ("occ", "none", "loss"),
                ("occ", "none", "loss"),
            ]
        );
        assert!(s.with_mechanism("occ+e2e").is_err());
        assert!(s.with_mechanism("occ+deoc+asis").is_err());
        assert!(s.with_mechanism("none+deoc+probe").is_err());
        let m = s.with_mechanism("occ+deoc+probe+fair").expect("mechanism");
        assert!(
            m.servers
                .iter()
                .all(|v| v.load_report && v.local_fairness == "per-upstream")
        );
        assert_eq!(m.servers[0].deoc.signal.as_deref(), Some("load-report"));
        // `+asis` keeps the file's edges; without `+probe`/`+fair` both are off.
        let mut mixed = s.clone();
        mixed.servers[3].edge = "deoc".into();
        mixed.servers[1].local_fairness = "per-upstream".into();
        let m = mixed.with_mechanism("occ+asis").expect("mechanism");
        let edges: Vec<&str> = m.servers.iter().map(|v| v.edge.as_str()).collect();
        assert_eq!(edges, ["none", "none", "none", "deoc"]);
        assert!(
            m.servers
                .iter()
                .all(|v| v.local_fairness == "none" && !v.load_report)
        );
        assert!(s.with_mechanism("loss-client").is_err());

        let bad = text.replace(
            "to_any = [\"c1\", \"c2\"]",
            "to = \"c1\"\nto_any = [\"c2\"]",
        );
        let e = Scenario::from_toml("t.toml", &bad).expect_err("both");
        assert_eq!(e.key, "routes[0].to");
        let bad = text.replace("to_any = [\"c1\", \"c2\"]", "to_any = [\"c1\", \"c9\"]");
        let e = Scenario::from_toml("t.toml", &bad).expect_err("unknown");
        assert_eq!((e.line, e.key.as_str()), (25, "routes[0].to_any"));
        assert!(!s.routes[0].round_robin(), "hashes by default");
        let rr = text.replace(
            "to_any = [\"c1\", \"c2\"]",
            "to_any = [\"c1\", \"c2\"]\npick = \"round-robin\"",
        );
        let r = Scenario::from_toml("t.toml", &rr).expect("round-robin");
        assert!(r.routes[0].round_robin());
        let bad = text.replace(
            "to_any = [\"c1\", \"c2\"]",
            "to_any = [\"c1\", \"c2\"]\npick = \"random\"",
        );
        let e = Scenario::from_toml("t.toml", &bad).expect_err("unknown pick");
        assert_eq!(e.key, "routes[0].pick");
    }

    #[test]
    fn link_queue_packets_drd_and_loss_correlation() {
        let with = |keys: &str| {
            format!("{GOOD}\n[[links]]\nbetween = [\"proxy\", \"uas\"]\ndelay_ms = 20\n{keys}\n")
        };
        let text = with(
            "loss = 0.02\nloss_correlation = 0.8\nrate_mbps = 10\nqueue_kb = 100\n\
             queue_packets = 60\ndrd_min_packets = 50\ndrd_max_packets = 60\n\
             drd_max_probability = 0.95",
        );
        let s = Scenario::from_toml("s.toml", &text).expect("valid");
        let cfg = s.links[0].spec.to_config().expect("valid link");
        assert_eq!(cfg.loss, Loss::correlated(0.02, 0.8).expect("valid"));
        assert!(matches!(cfg.loss, Loss::GilbertElliott(_)));
        let rate = cfg.rate.expect("rate limit");
        assert_eq!(rate.bits_per_second, 10_000_000);
        assert_eq!(rate.queue_bytes, 100_000);
        assert_eq!(rate.queue_packets, Some(60));
        assert_eq!(
            rate.drop,
            QueueDrop::Derivative {
                min_packets: 50,
                max_packets: 60,
                max_probability: 0.95
            }
        );

        // Without the new keys: drop-tail bounded in bytes, independent loss, as before.
        let s = Scenario::from_toml("s.toml", &with("loss = 0.02\nrate_mbps = 10")).expect("ok");
        let cfg = s.links[0].spec.to_config().expect("valid link");
        assert_eq!(cfg.loss, Loss::Random(0.02));
        assert_eq!(cfg.rate, Some(RateLimit::new(10_000_000, 64_000)));
        let s = Scenario::from_toml("s.toml", &with("loss_correlation = 0.5")).expect("ok");
        let cfg = s.links[0].spec.to_config().expect("no loss to correlate");
        assert_eq!((cfg.loss, cfg.rate), (Loss::None, None));

        let refused = [
            (
                "rate_mbps = 1\ndrd_min_packets = 10\ndrd_max_packets = 20",
                "drd_max_probability",
            ),
            (
                "rate_mbps = 1\ndrd_max_probability = 0.9",
                "or none of them",
            ),
            (
                "rate_mbps = 1\ndrd_min_packets = 20\ndrd_max_packets = 10\ndrd_max_probability = 0.9",
                "must be below max_packets",
            ),
            (
                "rate_mbps = 1\ndrd_min_packets = 1\ndrd_max_packets = 10\ndrd_max_probability = 2",
                "max_probability = 2 is not a probability",
            ),
            (
                "rate_mbps = 1\nqueue_packets = 0",
                "queue_packets must be at least 1",
            ),
            ("queue_packets = 10", "need rate_mbps"),
            (
                "drd_min_packets = 10\ndrd_max_packets = 20\ndrd_max_probability = 0.9",
                "need rate_mbps",
            ),
            ("loss = 0.01\nloss_correlation = 1.0", "below 1"),
            ("loss = 1.5\nloss_correlation = 0.5", "not a probability"),
            (
                "loss_correlation = 0.5\ngilbert_elliott = { p_good_to_bad = 0.1, p_bad_to_good = 0.5 }",
                "not both",
            ),
        ];
        for (keys, message) in refused {
            let e = Scenario::from_toml("s.toml", &with(keys)).expect_err(keys);
            assert_eq!(e.key, "links[0].delay_ms", "{keys}");
            assert!(e.message.contains(message), "{keys}: {e}");
        }
        let e = Scenario::from_toml("s.toml", &with("queue_packets = -1")).expect_err("negative");
        assert!(e.message.contains("u64"), "{e}");
    }

    #[test]
    fn sweep_settings_are_applied_to_the_document_before_it_is_checked() {
        let set = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let s = Scenario::from_toml_with(
            "s.toml",
            GOOD,
            &set(&[
                ("duration_s", "20"),
                ("servers.*.local", "none"),
                ("servers.proxy.service_us", "250"),
                ("servers.*.deoc.alpha", "0.3"),
                ("uac.uac.arrivals", "constant"),
                ("uas.*.ring_ms", "5"),
                ("default_link.delay_ms", "2"),
            ]),
        )
        .expect("valid");
        assert_eq!(s.duration_s, 20.0);
        assert_eq!(s.servers[0].local, "none");
        assert_eq!(s.servers[0].service_us, 250.0);
        assert_eq!(s.servers[0].deoc.alpha, Some(0.3));
        assert_eq!(s.uac[0].arrivals, "constant");
        assert_eq!(s.uas[0].ring_ms, 5.0);
        assert_eq!(s.default_link.delay_ms, 2.0);
        // The file alone is untouched by an empty point.
        let plain = Scenario::from_toml_with("s.toml", GOOD, &[]).expect("valid");
        assert_eq!(plain.servers[0].local, "occ");

        // A value the scenario refuses names the sweep, its key and value.
        let e = Scenario::from_toml_with(
            "s.toml",
            GOOD,
            &set(&[("duration_s", "20"), ("servers.*.local", "fifo")]),
        )
        .expect_err("bad local");
        assert_eq!(e.file, "s.toml (--sweep servers.*.local=fifo)");
        assert_eq!((e.line, e.key.as_str()), (0, "servers[0].local"));
        assert!(
            e.to_string()
                .starts_with("s.toml (--sweep servers.*.local=fifo): key `servers[0].local`: "),
            "{e}"
        );
        let refused = [
            (
                "servers.nobody.local",
                "occ",
                "`nobody` names no entry of `servers`",
            ),
            ("servers.*.bogus", "1", "unknown field `bogus`"),
            ("duration_s", "-1", "positive number"),
            ("duration_s", "ten", "invalid type: string \"ten\""),
            ("routes.*.to", "uas", "can be swept"),
            ("servers.local", "occ", "servers.NAME.KEY"),
        ];
        for (k, v, message) in refused {
            let e = Scenario::from_toml_with("s.toml", GOOD, &set(&[(k, v)])).expect_err(k);
            assert_eq!(e.file, format!("s.toml (--sweep {k}={v})"), "{e}");
            assert!(e.message.contains(message), "{k}={v}: {e}");
        }
        // An error of the file itself stays located in the file.
        let text = GOOD.replace("service_us = 100", "service_us = 100\nbogus = 1");
        let e = Scenario::from_toml_with("s.toml", &text, &set(&[("duration_s", "5")]))
            .expect_err("the file's error");
        assert_eq!((e.file.as_str(), e.line), ("s.toml", 9));
        assert_eq!(e.key, "servers.bogus");
    }

    #[test]
    fn sweep_arguments_values_and_points() {
        let s: Sweep = "servers.*.local = none, occ ,queue-limit"
            .parse()
            .expect("sweep");
        assert_eq!(s.key, "servers.*.local");
        assert_eq!(s.values, ["none", "occ", "queue-limit"]);
        assert!("duration_s".parse::<Sweep>().is_err());
        assert!("servers..local=occ".parse::<Sweep>().is_err());
        assert!("duration_s=1,,2".parse::<Sweep>().is_err());
        let t: Sweep = "duration_s=10,20".parse().expect("sweep");
        let points = sweep_points(&[s, t]);
        assert_eq!(points.len(), 6);
        let first: Vec<(&str, &str)> = points[0]
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(first, [("servers.*.local", "none"), ("duration_s", "10")]);
        assert_eq!(points[1][1].1, "20");
        assert_eq!(points[5][0].1, "queue-limit");
        assert_eq!(sweep_points(&[]), vec![Vec::new()]);
        assert_eq!(sweep_value("10"), toml::Value::Integer(10));
        assert_eq!(sweep_value("0.5"), toml::Value::Float(0.5));
        assert_eq!(sweep_value("true"), toml::Value::Boolean(true));
        assert_eq!(sweep_value("occ"), toml::Value::String("occ".into()));
        assert_eq!(sweep_value("\"a b\""), toml::Value::String("a b".into()));
        assert_eq!(sweep_json("2.5"), serde_json::json!(2.5));
    }

    #[test]
    fn the_lab_scenarios_parse() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lab/sim");
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&dir).expect("lab/sim") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "toml") {
                let text = std::fs::read_to_string(&path).expect("readable");
                let name = path.display().to_string();
                if let Err(e) = Scenario::from_toml(&name, &text) {
                    panic!("{e}");
                }
                names.extend(path.file_name().and_then(|f| f.to_str()).map(str::to_owned));
            }
        }
        assert!(names.len() >= 5, "{names:?} in {}", dir.display());
        // Seed 001's two-stage architectures are among them.
        for f in [
            "seed001-s1p1.toml",
            "seed001-s2p2.toml",
            "seed001-s3p3.toml",
        ] {
            assert!(names.iter().any(|n| n == f), "{f} missing: {names:?}");
        }
    }
}
