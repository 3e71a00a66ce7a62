//! Scenario files: TOML with `deny_unknown_fields`, checked with errors that name the file,
//! the line and the key (the convention of `holdline serve`'s configuration).
//!
//! The binary reads the file; this module only parses text, so it stays pure.

use std::collections::BTreeSet;

use holdline_base::Duration;
use holdline_base::toml_loc::{find_key_line, locate};
use holdline_netmodel::{GilbertElliott, LinkConfig, Loss, RateLimit};
use holdline_overload::{Algorithm, ControllerConfig};
use serde::Deserialize;

/// A scenario that cannot be run, located in its file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: key `{key}`: {message}")]
pub struct ScenarioError {
    /// The file (as given by the caller).
    pub file: String,
    /// 1-based line number (0 when unknown).
    pub line: usize,
    /// The dotted key, e.g. `servers[0].local`.
    pub key: String,
    /// What is wrong.
    pub message: String,
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
    /// CPU time per message handled, microseconds (the server's `emulate_cost_us`).
    pub service_us: f64,
    /// CPU time per INVITE handled, microseconds. Default: `service_us`.
    #[serde(default)]
    pub invite_us: Option<f64>,
    /// CPU time per new INVITE rejected at the gate (and per absorbed ACK of its 503),
    /// microseconds (the server's `emulate_reject_cost_us` plus its real work). Default 15.
    #[serde(default = "fifteen")]
    pub reject_us: f64,
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
    /// work (the worker's `UDP_BUDGET`). Default 8.
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
        ControllerConfig::default_for(alg).map_err(|e| e.to_string())
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
}

/// A calling population: one UAC per step of its load profile.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
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
    /// The load profile: steps in time order, the first at 0.
    pub steps: Vec<StepSpec>,
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
    /// Gilbert-Elliott correlated loss instead of `loss`.
    #[serde(default)]
    pub gilbert_elliott: Option<GeSpec>,
    /// Rate limit, megabits per second. Default none.
    #[serde(default)]
    pub rate_mbps: Option<f64>,
    /// Queue of the rate limit, kilobytes (drop-tail). Default 64.
    #[serde(default = "queue_kb")]
    pub queue_kb: f64,
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
            gilbert_elliott: None,
            rate_mbps: None,
            queue_kb: queue_kb(),
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
        let ms = |field: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(Duration::from_secs_f64(v / 1000.0))
            } else {
                Err(format!("{field} must be a non-negative number, got {v}"))
            }
        };
        let loss = match self.gilbert_elliott {
            Some(g) => Loss::GilbertElliott(GilbertElliott {
                p_good_to_bad: g.p_good_to_bad,
                p_bad_to_good: g.p_bad_to_good,
                loss_good: g.loss_good,
                loss_bad: g.loss_bad,
            }),
            None if self.loss > 0.0 => Loss::Random(self.loss),
            None => Loss::None,
        };
        let rate = match self.rate_mbps {
            Some(r) if r.is_finite() && r > 0.0 && self.queue_kb.is_finite() => Some(RateLimit {
                bits_per_second: (r * 1e6) as u64,
                queue_bytes: (self.queue_kb.max(0.0) * 1000.0) as u64,
            }),
            Some(r) => return Err(format!("rate_mbps must be a positive number, got {r}")),
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
/// go to the node `to`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSpec {
    /// The server this route belongs to.
    pub server: String,
    /// The Request-URI host, or `*`. Default `*`.
    #[serde(default = "star")]
    pub domain: String,
    /// The next hop node.
    pub to: String,
}

fn star() -> String {
    "*".into()
}

impl Scenario {
    /// Parses and checks TOML `text`; `file` names it in errors.
    pub fn from_toml(file: &str, text: &str) -> Result<Self, ScenarioError> {
        let sc: Self = toml::from_str(text).map_err(|e| {
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
        })?;
        sc.validate().map_err(|(key, message)| ScenarioError {
            file: file.into(),
            line: find_key_line(text, &key),
            key,
            message,
        })?;
        Ok(sc)
    }

    /// Every node name: servers, UASs, UAC populations, in that order (the node ids).
    pub fn node_names(&self) -> Vec<&str> {
        self.servers
            .iter()
            .map(|s| s.name.as_str())
            .chain(self.uas.iter().map(|u| u.name.as_str()))
            .chain(self.uac.iter().map(|u| u.name.as_str()))
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
        }
        for (i, u) in self.uac.iter().enumerate() {
            if !known(&u.target) {
                return bad(format!("uac[{i}].target"), "names no node");
            }
            if u.arrivals != "poisson" && u.arrivals != "constant" {
                return bad(format!("uac[{i}].arrivals"), "must be poisson or constant");
            }
            if !(u.hold_ms.is_finite() && u.hold_ms >= 0.0) {
                return bad(format!("uac[{i}].hold_ms"), "must be zero or more");
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
            if !known(&r.to) || r.to == r.server {
                return bad(format!("routes[{i}].to"), "names no other node");
            }
        }
        Ok(())
    }

    fn name_key(&self, i: usize) -> String {
        let (s, u) = (self.servers.len(), self.uas.len());
        if i < s {
            format!("servers[{i}].name")
        } else if i < s + u {
            format!("uas[{}].name", i - s)
        } else {
            format!("uac[{}].name", i - s - u)
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
    }
}
