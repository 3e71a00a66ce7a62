//! `holdline lab deoc`: seed 003's end-to-end overload control (DEOC) with real processes,
//! issue 17. Seed 003's topology 2 scaled down to one machine: two ingress edges, two cores in
//! series, two egress edges, every one a `holdline serve` (one worker, UDP on 127.0.0.1, the
//! kernel's receive buffer, record-routing), calls from `holdline load uac` (one per
//! (ingress, egress) pair, a quarter of the load each) to `holdline load uas` (one behind each
//! egress edge):
//!
//! ```text
//!   UACs e1-to-e3, e1-to-e4 -> E1 ─┐                  ┌─> E3 -> UAS
//!                                  ├─> C1 ──> C2 ─────┤
//!   UACs e2-to-e3, e2-to-e4 -> E2 ─┘                  └─> E4 -> UAS
//! ```
//!
//! `--topology domains` runs seed 003's topology 2 itself, in small (eight servers, twelve
//! flows: every edge calls each of the other three, a twelfth of the load each; a UAS
//! behind every edge; `lab/sim/seed003-lab-deoc-t2.toml` is its model):
//!
//! ```text
//!   domain A                                   domain B
//!   UACs e1-to-* -> E1 ─┬─> C1 ─┬──────┬─> C3 ─┬─> E3 -> UAS   <- UACs e3-to-*
//!   UACs e2-to-* -> E2 ─┴─> C2 ─┴──────┴─> C4 ─┴─> E4 -> UAS   <- UACs e4-to-*
//! ```
//!
//! A call within a domain crosses one of its cores, a call between the domains one core of
//! each: a core's upstream neighbours are its domain's edges *and* the other domain's cores
//! (the paper's l. 327-335, where OCC-Hop's rejections load the cores in between). Where two
//! next hops exist the callee is hashed to one (`[[hash_routes]]`, `failover = false`: a
//! core's 503 goes back upstream, as the paper's servers do). Every core costs
//! `--core-cost-us`; each carries 5/12 of the calls, so the nominal capacity is 12/5 of a
//! core's.
//!
//! The cores carry an emulated cost per message (`--core-cost-us` at C2, `--c1-cost-ratio` of it
//! at C1), waited rather than spun (`holdline serve --emulate-sleep`: as busy a worker, the
//! machine's CPU free for the other eight processes), a rejection as costly as any message
//! (seed 003's model, l. 301); C2, two hops from the ingress edges, is the bottleneck, the
//! paper's situation. The edges have no emulated cost. Mechanisms, seed 003's four:
//!
//! | mechanism | edges E1, E2 | cores and egress edges |
//! | --- | --- | --- |
//! | `none` (No Control) | `--overload none --feedback none` | the same |
//! | `occ` (OCC-Local) | local OCC, `--feedback none` | local OCC, `--feedback none` |
//! | `occ+hop` (OCC-Hop) | local OCC, RFC 7339 loss feedback (holdline's default) | the same: every server answers its upstream neighbours |
//! | `occ+deoc` (DEOC) | local OCC, `--feedback deoc`, routes naming their target edge (`deoc_target=E3` / `E4`) | local OCC, `--feedback none` |
//!
//! Phases, each point with fresh processes: **capacity** (mechanism `none`, 0.8× to 1.0× the
//! nominal capacity of C2 — seven messages per call — the highest offered rate whose calls all
//! completed with PDD p99 ≤ 500 ms and no INVITE retransmission), then **the curve** (every
//! load factor and mechanism), then **the simulator's prediction** of the same points
//! (`holdline sim run` on `lab/sim/seed003-lab-deoc.toml` with the run's capacity, durations
//! and the cores' measured cost per message) and the comparison, point by point.
//!
//! Measured per point: offered load, steady goodput (200 OK within 10 s, over the second half
//! of the load window: DEOC with the paper's β = 1/8 per 1 s period needs about 12 periods to
//! cut a flow from 5× to its share, so the points are 30 s long, with `--quick` too), calls set
//! up end to end over the same window (the ACK reached the callee: a 200 OK within 10 s whose
//! ACK then dies in a congested core counts as goodput, not here), PDD, who rejected what (the edges' DEOC gaps and loss
//! throttling, the cores' own and forwarded rejections, from their metrics), Jain's index
//! over the four flows, the servers' CPU. Output in `--out DIR`: `results.json`, `points.csv`,
//! `agreement.csv` (real vs simulated goodput), `summary.md`, plots `goodput`, `setup` and `pdd`
//! (SVG and PNG; the simulated curves beside the real ones), the simulator's files under `sim/`,
//! every process's report and log under `runs/`; `index.html` is written after the run.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{LabError, Result};
use crate::generator::{GENERATOR_CORE, count, num, read_json, terminate, wait_bounded};
use crate::plot;
use crate::procfs;
use crate::runner::{
    Proc, SweepArgs, check_tools, holdline_exe, lab_main, machine, metric_where,
    processing_us_above, scrape, spawn, window_sum,
};
use crate::server::{SERVER_CORE, Transport, free_port, tail, wait_bound};

/// Messages a core handles per call: INVITE, 100 Trying (from the next proxy), 180, 200,
/// ACK, BYE, 200.
const MESSAGES_PER_CALL: f64 = 7.0;
/// A call counts as goodput when its 200 OK came within this (seed 003's window).
const GOODPUT_WINDOW_S: f64 = 10.0;
/// The mechanisms, in plotting order.
const MECHANISMS: [&str; 4] = ["none", "occ", "occ+hop", "occ+deoc"];
/// The simulator's scenario of this topology (the lab writes a copy with the run's values).
const SCENARIO: &str = include_str!("../../../lab/sim/seed003-lab-deoc.toml");
/// The simulated goodput agrees when within this fraction of the real one.
const AGREEMENT: f64 = 0.10;
/// The simulator's scenario of the two-domain topology.
const SCENARIO_DOMAINS: &str = include_str!("../../../lab/sim/seed003-lab-deoc-t2.toml");
/// The edges, in both topologies.
const EDGES: [&str; 4] = ["E1", "E2", "E3", "E4"];

/// The servers' topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Topology {
    /// E1, E2 -> C1 -> C2 -> E3, E4: every call crosses both cores; C2, two hops from the
    /// ingress edges, is the bottleneck.
    #[default]
    Chain,
    /// Seed 003's topology 2 in small: domain A (edges E1, E2, cores C1, C2) and domain B
    /// (E3, E4, C3, C4); every edge calls each of the other three; a call between the
    /// domains crosses a core of each (hashed per callee), a call within one a core of its
    /// own. Every core has C2's cost.
    Domains,
}

impl Topology {
    /// The servers, in the order of their ports.
    fn servers(self) -> &'static [&'static str] {
        match self {
            Self::Chain => &["E1", "E2", "E3", "E4", "C1", "C2"],
            Self::Domains => &["E1", "E2", "E3", "E4", "C1", "C2", "C3", "C4"],
        }
    }

    /// The cores.
    fn cores(self) -> &'static [&'static str] {
        match self {
            Self::Chain => &["C1", "C2"],
            Self::Domains => &["C1", "C2", "C3", "C4"],
        }
    }

    /// The flows: (ingress edge, egress edge) by index into [`EDGES`].
    fn flows(self) -> Vec<(usize, usize)> {
        match self {
            Self::Chain => vec![(0, 2), (0, 3), (1, 2), (1, 3)],
            Self::Domains => (0..4)
                .flat_map(|i| (0..4).filter(move |&j| j != i).map(move |j| (i, j)))
                .collect(),
        }
    }

    /// The edges callers enter by (they run the mechanism's edge role), by index.
    fn ingress(self) -> &'static [usize] {
        match self {
            Self::Chain => &[0, 1],
            Self::Domains => &[0, 1, 2, 3],
        }
    }

    /// Nominal capacity, calls/s, when the most loaded core costs `cost_us` per message:
    /// the chain's C2 carries every call; in the two domains a core carries 5/12 of them
    /// (its domain's internal third once, the calls between the domains once each way,
    /// over two cores).
    fn nominal(self, cost_us: u64) -> f64 {
        let core = 1e6 / (MESSAGES_PER_CALL * cost_us as f64);
        match self {
            Self::Chain => core,
            Self::Domains => core * 12.0 / 5.0,
        }
    }

    /// The simulator's scenario.
    fn scenario(self) -> &'static str {
        match self {
            Self::Chain => SCENARIO,
            Self::Domains => SCENARIO_DOMAINS,
        }
    }

    /// The plots' title.
    fn title(self) -> &'static str {
        match self {
            Self::Chain => "E1,E2 -> C1 -> C2 -> E3,E4",
            Self::Domains => "two domains (E1, E2, C1, C2 | E3, E4, C3, C4)",
        }
    }

    /// Capacity steps (fractions of the nominal capacity) of a run without `--capacity`:
    /// the two domains' cores are loaded unevenly (each callee is hashed to one), so their
    /// capacity sits lower under the nominal one.
    fn capacity_steps(self, quick: bool) -> Vec<f64> {
        match (self, quick) {
            (Self::Chain, true) => vec![0.9],
            (Self::Chain, false) => vec![0.8, 0.9, 1.0],
            (Self::Domains, true) => vec![0.8],
            (Self::Domains, false) => vec![0.7, 0.8, 0.9],
        }
    }
}

/// One server of a topology: its name, whether it runs the edge role, its emulated cost per
/// message (0: none), its static routes (`--route`) and its hashed routes (domain, targets,
/// DEOC target), written to a configuration file.
struct Node {
    name: &'static str,
    ingress: bool,
    cost_us: u64,
    routes: Vec<String>,
    hashed: Vec<(String, Vec<u16>, Option<&'static str>)>,
}

/// The servers of `topology` in the order they start (each next hop before its upstream
/// where the topology has an order), given every server's SIP port (`port(name)`), the UAS
/// port behind each edge (`uas[i]`, 0: none), whether the ingress edges run DEOC, and the
/// cores' costs.
fn nodes(
    topology: Topology,
    port: &dyn Fn(&str) -> u16,
    uas: &[u16; 4],
    deoc: bool,
    c1_cost_us: u64,
    c2_cost_us: u64,
) -> Vec<Node> {
    let domain = |i: usize| EDGES[i].to_ascii_lowercase() + ".lab";
    let udp = |p: u16| format!("udp:127.0.0.1:{p}");
    let target = |i: usize| deoc.then_some(EDGES[i]);
    match topology {
        Topology::Chain => {
            let mut v = Vec::new();
            for i in [2usize, 3] {
                v.push(Node {
                    name: EDGES[i],
                    ingress: false,
                    cost_us: 0,
                    routes: vec![format!("{}={}", domain(i), udp(uas[i]))],
                    hashed: Vec::new(),
                });
            }
            v.push(Node {
                name: "C2",
                ingress: false,
                cost_us: c2_cost_us,
                routes: [2usize, 3]
                    .iter()
                    .map(|&i| format!("{}={}", domain(i), udp(port(EDGES[i]))))
                    .collect(),
                hashed: Vec::new(),
            });
            v.push(Node {
                name: "C1",
                ingress: false,
                cost_us: c1_cost_us,
                routes: vec![format!("*={}", udp(port("C2")))],
                hashed: Vec::new(),
            });
            for i in [0usize, 1] {
                v.push(Node {
                    name: EDGES[i],
                    ingress: true,
                    cost_us: 0,
                    routes: [2usize, 3]
                        .iter()
                        .map(|&j| {
                            let named =
                                target(j).map_or_else(String::new, |t| format!(",deoc_target={t}"));
                            format!("{}={}{named}", domain(j), udp(port("C1")))
                        })
                        .collect(),
                    hashed: Vec::new(),
                });
            }
            v
        }
        Topology::Domains => {
            // Domain A: E1, E2, C1, C2; domain B: E3, E4, C3, C4.
            let cores_of = |i: usize| if i < 2 { ["C1", "C2"] } else { ["C3", "C4"] };
            let mut v = Vec::new();
            for (k, core) in ["C1", "C2", "C3", "C4"].into_iter().enumerate() {
                let own = if k < 2 { 0 } else { 2 };
                let other = cores_of(2 - own);
                v.push(Node {
                    name: core,
                    ingress: false,
                    cost_us: c2_cost_us,
                    routes: [own, own + 1]
                        .iter()
                        .map(|&j| format!("{}={}", domain(j), udp(port(EDGES[j]))))
                        .collect(),
                    hashed: (0..4)
                        .filter(|&j| j / 2 != own / 2)
                        .map(|j| (domain(j), other.iter().map(|c| port(c)).collect(), None))
                        .collect(),
                });
            }
            for i in 0..4 {
                let mine = cores_of(i);
                v.push(Node {
                    name: EDGES[i],
                    ingress: true,
                    cost_us: 0,
                    routes: vec![format!("{}={}", domain(i), udp(uas[i]))],
                    hashed: (0..4)
                        .filter(|&j| j != i)
                        .map(|j| (domain(j), mine.iter().map(|c| port(c)).collect(), target(j)))
                        .collect(),
                });
            }
            v
        }
    }
}

/// A server's configuration file: its DEOC settings (`[overload.deoc]`, `KEY=VALUE` each)
/// and its hashed routes.
fn server_config(
    hashed: &[(String, Vec<u16>, Option<&str>)],
    deoc: &[String],
    pick: Pick,
) -> String {
    let mut s = String::new();
    if !deoc.is_empty() {
        s.push_str(
            "# holdline lab deoc --deoc: the ingress edge's DEOC settings.\n[overload.deoc]\n",
        );
        for kv in deoc {
            if let Some((k, v)) = kv.split_once('=') {
                s.push_str(&format!("{} = {}\n", k.trim(), toml_value(v.trim())));
            }
        }
        s.push('\n');
    }
    s.push_str(&hash_routes_config(hashed, pick));
    s
}

/// A `--deoc` value as TOML: numbers, booleans and quoted strings as given, any other word
/// quoted (`target=record-route`).
fn toml_value(v: &str) -> String {
    if v.parse::<f64>().is_ok() || v == "true" || v == "false" || v.starts_with('"') {
        v.to_string()
    } else {
        format!("\"{v}\"")
    }
}

/// The `--deoc KEY=VALUE` settings, checked: a key of letters and `_`, a value.
fn check_deoc_settings(settings: &[String]) -> Result<()> {
    for kv in settings {
        let ok = kv.split_once('=').is_some_and(|(k, v)| {
            let k = k.trim();
            !k.is_empty()
                && k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                && !v.trim().is_empty()
        });
        if !ok {
            return Err(LabError::Precondition(format!(
                "--deoc {kv}: expected KEY=VALUE with a key of [overload.deoc] (alpha=0.5)"
            )));
        }
    }
    Ok(())
}

/// The edges' DEOC settings for the simulator, as one-value sweeps over every server (DEOC
/// runs at the ingress edges only). `target`: learning from Record-Route is the model's too
/// (its edges learn the same way); otherwise the lab's routes name the targets, as the
/// model's domains do.
fn deoc_sweeps(settings: &[String]) -> Vec<String> {
    let mut args = Vec::new();
    for kv in settings {
        if let Some((k, v)) = kv.split_once('=').filter(|(k, _)| k.trim() != "target") {
            args.push("--sweep".to_string());
            args.push(format!("servers.*.deoc.{}={}", k.trim(), v.trim()));
        }
    }
    if learns_targets(settings) {
        args.push("--sweep".to_string());
        args.push("servers.*.deoc.target=record-route".to_string());
    }
    args
}

/// Whether the edges' DEOC settings make them learn their targets from Record-Route
/// (`target = "record-route"`) rather than read them from the routes.
fn learns_targets(settings: &[String]) -> bool {
    settings.iter().any(|kv| {
        kv.split_once('=').is_some_and(|(k, v)| {
            k.trim() == "target" && v.trim().trim_matches('"') == "record-route"
        })
    })
}

/// A server's configuration file of load-sharing routes (`[[hash_routes]]`, picking as
/// `pick` says, `failover = false`: a core's 503 goes back upstream, as in the paper).
fn hash_routes_config(hashed: &[(String, Vec<u16>, Option<&str>)], pick: Pick) -> String {
    let mut s = String::from(
        "# holdline lab deoc: load-shared next hops; a 503 goes back upstream rather than to\n\
         # the other next hop, as seed 003's servers do.\n",
    );
    for (domain, targets, deoc) in hashed {
        let list = targets
            .iter()
            .map(|p| format!("\"udp:127.0.0.1:{p}\""))
            .collect::<Vec<_>>()
            .join(", ");
        s.push_str(&format!(
            "\n[[hash_routes]]\ndomain = \"{domain}\"\ntargets = [{list}]\nfailover = false\n\
             pick = \"{}\"\n",
            pick.as_str()
        ));
        if let Some(t) = deoc {
            s.push_str(&format!("deoc_target = \"{t}\"\n"));
        }
    }
    s
}

/// `holdline lab deoc` options.
#[derive(Debug, Parser)]
#[command(
    name = "holdline lab deoc",
    about = "Seed 003's DEOC with real processes: 2 ingress edges -> C1 -> C2 -> 2 egress edges, No Control vs OCC-Local vs OCC-Hop vs DEOC, and the simulator's prediction of the same run"
)]
pub struct Args {
    /// The sweep's options (mechanisms: none, occ, occ+hop, occ+deoc; default all, quick:
    /// none,occ+deoc; loads default 0.5,1,2,3,5, quick 1,5). `--cost-us` and
    /// `--reject-cost-us` are not used: see `--core-cost-us`.
    #[command(flatten)]
    pub sweep: SweepArgs,
    /// Results directory.
    #[arg(long, value_name = "DIR", default_value = "lab-results/deoc")]
    pub out: PathBuf,
    /// Emulated cost per message at C2 (the bottleneck), µs; rejections cost the same.
    #[arg(long, value_name = "US", default_value_t = 2000,
          value_parser = clap::value_parser!(u64).range(200..=100_000))]
    pub core_cost_us: u64,
    /// C1's cost per message as a fraction of C2's.
    #[arg(long, value_name = "F", default_value_t = 0.8)]
    pub c1_cost_ratio: f64,
    /// Skip the capacity phase and use this capacity (calls/s).
    #[arg(long, value_name = "CPS")]
    pub capacity: Option<f64>,
    /// Simulated runs per point (0: no simulation).
    #[arg(long, value_name = "N")]
    pub sim_runs: Option<u32>,
    /// The servers' topology: `chain` (E1, E2 -> C1 -> C2 -> E3, E4) or `domains` (seed
    /// 003's topology 2 in small: two domains of two edges and two cores, every core at
    /// `--core-cost-us`, every edge calling the three others).
    #[arg(long, value_enum, default_value_t = Topology::Chain)]
    pub topology: Topology,
    /// A DEOC setting of the ingress edges, `KEY=VALUE` (repeatable): a key of the server's
    /// `[overload.deoc]` table (`alpha`, `k`, `beta`, `period_ms`, …) and its TOML value,
    /// given to the simulator's edges alike. Default: the paper's values.
    #[arg(long = "deoc", value_name = "KEY=VALUE")]
    pub deoc: Vec<String>,
    /// How a server with two next hops picks one: `hash` (rendezvous hashing of the
    /// callee) or `round-robin` (each call to the next in turn: seed 003's load balancing,
    /// l. 301); the simulator's routes alike.
    #[arg(long, value_enum, default_value_t = Pick::Hash)]
    pub pick: Pick,
}

/// How a server with two next hops picks one (`[[hash_routes]] pick`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pick {
    /// Rendezvous hashing of the callee.
    #[default]
    Hash,
    /// Each call to the next in turn.
    RoundRobin,
}

impl Pick {
    /// The value of `pick` in a configuration or scenario file.
    fn as_str(self) -> &'static str {
        match self {
            Self::Hash => "hash",
            Self::RoundRobin => "round-robin",
        }
    }
}

/// One measured point (one row of `points.csv`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    /// `none`, `occ`, `occ+hop` or `occ+deoc`.
    pub mechanism: String,
    /// Offered load / capacity.
    pub load_factor: f64,
    /// Offered calls per second, all UACs (measured at the UACs).
    pub offered_cps: f64,
    /// The capacity the load factors refer to.
    pub capacity_cps: f64,
    /// Calls whose ACK reached a UAS while the load was offered, per second.
    pub throughput_cps: f64,
    /// Calls whose 200 OK came within 10 s, per second of load, all UACs.
    pub goodput_cps: f64,
    /// The same over the second half of the load window (no drain).
    pub goodput_steady_cps: f64,
    /// `goodput_steady_cps / capacity_cps`.
    pub goodput_of_capacity: f64,
    /// Calls set up end to end (their ACK reached the UAS) over the second half of the load
    /// window, per second: the steady form of `throughput_cps`. A 200 OK within 10 s counts
    /// as goodput even when its ACK is lost in a congested core and the call then fails, so
    /// this is the figure that shows a collapse of No Control (zero in results written
    /// before it existed).
    #[serde(default)]
    pub setup_steady_cps: f64,
    /// Steady goodput per flow (E1→E3, E1→E4, E2→E3, E2→E4).
    pub per_flow_goodput_cps: Vec<f64>,
    /// Jain's index over the flows' steady goodput.
    pub fairness: f64,
    /// PDD (first INVITE to 200 OK) p50, ms: the UACs' p50s weighted by their calls.
    pub pdd_p50_ms: f64,
    /// PDD mean over every call, ms.
    pub pdd_mean_ms: f64,
    /// PDD p99, ms: the largest of the UACs' p99s.
    pub pdd_p99_ms: f64,
    /// Calls placed.
    pub calls_attempted: u64,
    /// Calls completed.
    pub calls_ok: u64,
    /// 503s at the UACs.
    pub r503: u64,
    /// Other final failures at the UACs (a proxy's 500 for a lone downstream 503).
    pub r_other: u64,
    /// Calls that timed out.
    pub timeouts: u64,
    /// INVITE retransmissions by the UACs.
    pub retrans_invite: u64,
    /// New INVITEs DEOC gapped at E1 and E2 (`reason="call_gap"`).
    pub edge_gapped: u64,
    /// New INVITEs E1 and E2 dropped on C1's loss answers (`reason="loss_throttle"`).
    pub edge_throttled: u64,
    /// New INVITEs E1 and E2 rejected by their own local control.
    pub edge_local_rejected: u64,
    /// New INVITEs C1 rejected at its admission gate, every reason (its local control, stale
    /// INVITEs: `holdline_sip_rejected_overload_total`).
    pub c1_rejected: u64,
    /// New INVITEs C1 dropped on C2's loss answers.
    pub c1_throttled: u64,
    /// New INVITEs C2 rejected at its admission gate, every reason.
    pub c2_rejected: u64,
    /// New INVITEs each core rejected at its admission gate (C1, C2, …; empty in results
    /// written before the two-domain topology).
    #[serde(default)]
    pub cores_rejected: Vec<u64>,
    /// New INVITEs each core dropped on its next hops' loss answers.
    #[serde(default)]
    pub cores_throttled: Vec<u64>,
    /// DEOC's per-target state at E1 when the load ended: (target, state, rate).
    pub deoc_targets: Vec<(String, String, Option<f64>)>,
    /// CPU of the servers together over the point, seconds.
    pub servers_cpu_s: f64,
    /// That CPU over the point's wall time (1.0 = one core).
    pub servers_cpu_share: f64,
    /// Mean wall time C1 and C2 spent on a message served at full emulated cost, µs.
    pub c1_service_us: Option<f64>,
    /// The same of C2.
    pub c2_service_us: Option<f64>,
}

/// The simulator's prediction of one point, beside the real one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Agreement {
    /// Mechanism.
    pub mechanism: String,
    /// Load factor.
    pub load_factor: f64,
    /// Real steady goodput, calls/s.
    pub real_goodput_cps: f64,
    /// Simulated goodput (mean of the runs), calls/s.
    pub sim_goodput_cps: f64,
    /// Its 95% confidence half-interval.
    pub sim_goodput_ci95: f64,
    /// `sim / real`.
    pub ratio: f64,
    /// Within [`AGREEMENT`].
    pub agrees: bool,
    /// Real PDD p50, ms.
    pub real_pdd_p50_ms: f64,
    /// Simulated PDD p50, ms.
    pub sim_pdd_p50_ms: f64,
    /// Real calls set up end to end per second (`Point::setup_steady_cps`).
    #[serde(default)]
    pub real_setup_cps: f64,
    /// Simulated calls set up end to end per second (the simulator's `throughput_cps`: ACKs
    /// at a UAS over the point's window), mean of the runs (absent in results written
    /// before it existed).
    #[serde(default)]
    pub sim_setup_cps: Option<f64>,
}

/// Everything a run measured (`results.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    /// `deoc`.
    pub experiment: String,
    /// The servers' topology.
    #[serde(default)]
    pub topology: Topology,
    /// The ingress edges' DEOC settings (`--deoc KEY=VALUE`; empty: the paper's values).
    #[serde(default)]
    pub deoc_settings: Vec<String>,
    /// How the servers pick one of two next hops (`--pick`).
    #[serde(default)]
    pub pick: Pick,
    /// The command line.
    pub command: String,
    /// Start time, seconds since the Unix epoch.
    pub started_unix_s: u64,
    /// Quick mode.
    pub quick: bool,
    /// Machine facts.
    pub machine: Value,
    /// C2's emulated cost per message, µs.
    pub c2_cost_us: u64,
    /// C1's, µs.
    pub c1_cost_us: u64,
    /// Nominal capacity (C2: seven messages per call at its cost), calls/s.
    pub nominal_capacity_cps: f64,
    /// The capacity load factors refer to (the highest clean capacity step, or `--capacity`).
    pub capacity_cps: f64,
    /// Seconds of load per point.
    pub duration_s: f64,
    /// Capacity steps (mechanism `none`).
    pub capacity_steps: Vec<Point>,
    /// The curve.
    pub points: Vec<Point>,
    /// The simulator's prediction, point by point (empty without simulation).
    pub agreement: Vec<Agreement>,
    /// Simulated runs per point.
    pub sim_runs: u32,
    /// Wall time of the run, s.
    pub elapsed_s: f64,
}

/// Entry point of `holdline lab deoc ARGS`.
pub fn main(args: Vec<String>) -> ExitCode {
    lab_main(
        "deoc",
        args,
        |a: &Args| a.out.clone(),
        run,
        |r: &Results| r.elapsed_s,
    )
}

/// The servers' extra arguments under mechanism `m`: (ingress edges, every other server).
fn mechanism_args(m: &str) -> Result<(Vec<String>, Vec<String>)> {
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    Ok(match m {
        "none" => (
            v(&["--overload=none", "--feedback=none"]),
            v(&["--overload=none", "--feedback=none"]),
        ),
        "occ" => (v(&["--feedback=none"]), v(&["--feedback=none"])),
        // holdline's defaults: local OCC, loss feedback offered and answered.
        "occ+hop" => (v(&["--feedback=loss"]), v(&["--feedback=loss"])),
        "occ+deoc" => (v(&["--feedback=deoc"]), v(&["--feedback=none"])),
        other => {
            return Err(LabError::Precondition(format!(
                "unknown mechanism `{other}` (known: {})",
                MECHANISMS.join(", ")
            )));
        }
    })
}

/// What one point is.
struct Spec<'a> {
    mechanism: &'a str,
    rate: f64,
    duration_s: f64,
    drain_s: f64,
    c1_cost_us: u64,
    c2_cost_us: u64,
    topology: Topology,
    deoc_settings: &'a [String],
    pick: Pick,
    tag: String,
}

/// `holdline serve` on UDP 127.0.0.1:`port`, one worker, in-memory store, metrics on
/// `metrics`, the kernel's receive buffer.
fn server_args(port: u16, metrics: u16) -> Vec<String> {
    vec![
        "serve".into(),
        format!("--listen=udp:127.0.0.1:{port}"),
        "--workers=1".into(),
        "--store=memory".into(),
        format!("--udp-recv-buffer={}", crate::KERNEL_UDP_RECV_BUFFER),
        format!("--metrics=127.0.0.1:{metrics}"),
    ]
}

/// [`run_point_once`], again with fresh ports when a process could not bind its port.
fn run_point(exe: &Path, runs: &Path, spec: &Spec<'_>, capacity: f64) -> Result<Point> {
    crate::runner::with_fresh_ports("deoc", &spec.tag, || {
        run_point_once(exe, runs, spec, capacity)
    })
}

/// A started server: the process, its SIP port and its metrics port.
struct Server {
    proc: Proc,
    port: u16,
    metrics: u16,
}

#[allow(clippy::too_many_arguments)]
fn start_server(
    exe: &Path,
    runs: &Path,
    tag: &str,
    name: &str,
    core: &str,
    args: Vec<String>,
    port: u16,
    metrics: u16,
) -> Result<Server> {
    let log = runs.join(format!("{tag}-{name}.log"));
    let mut p = spawn(core, exe, &args, &log)?;
    wait_bound(&mut p.0, port, Some(Transport::Udp), name, &log)?;
    Ok(Server {
        proc: p,
        port,
        metrics,
    })
}

/// Runs one point with fresh processes; their reports and logs stay in `runs` (`TAG-…`).
fn run_point_once(exe: &Path, runs: &Path, spec: &Spec<'_>, capacity: f64) -> Result<Point> {
    let (edge_extra, other_extra) = mechanism_args(spec.mechanism)?;
    let deoc = spec.mechanism.contains("deoc");
    let topology = spec.topology;
    let flows = topology.flows();
    let tag = &spec.tag;
    let limit = spec.duration_s + spec.drain_s + 5.0;
    let names = topology.servers();
    let ports: Vec<(u16, u16)> = names
        .iter()
        .map(|_| Ok((free_port()?, free_port()?)))
        .collect::<Result<_>>()?;
    let port_of = |name: &str| -> u16 {
        names
            .iter()
            .position(|n| *n == name)
            .map_or(0, |i| ports[i].0)
    };
    // A UAS behind every edge some flow leaves by.
    let mut uas_ports = [0u16; 4];
    let uas_started = Instant::now();
    let mut uases = Vec::new();
    for (e, port) in uas_ports.iter_mut().enumerate() {
        if flows.iter().any(|&(_, to)| to == e) {
            *port = free_port()?;
            let name = format!("uas{}", e + 1);
            uases.push((
                name.clone(),
                start_uas(exe, runs, tag, &name, *port, limit + 3.0)?,
            ));
        }
    }
    let mut servers: Vec<(&'static str, Server)> = Vec::with_capacity(names.len());
    // `--deoc target=record-route`: the edges learn the targets, so the routes name none.
    for node in nodes(
        topology,
        &port_of,
        &uas_ports,
        deoc && !learns_targets(spec.deoc_settings),
        spec.c1_cost_us,
        spec.c2_cost_us,
    ) {
        let idx = names.iter().position(|n| *n == node.name).unwrap_or(0);
        let (port, metrics) = ports[idx];
        let lower = node.name.to_ascii_lowercase();
        let mut args = server_args(port, metrics);
        args.extend(if node.ingress {
            edge_extra.clone()
        } else {
            other_extra.clone()
        });
        if node.cost_us > 0 {
            args.push(format!("--emulate-cost-us={}", node.cost_us));
            args.push("--emulate-sleep".to_string());
        }
        args.extend(node.routes.iter().map(|r| format!("--route={r}")));
        let settings = if node.ingress && deoc {
            spec.deoc_settings
        } else {
            &[]
        };
        if !node.hashed.is_empty() || !settings.is_empty() {
            let conf = runs.join(format!("{tag}-{lower}.toml"));
            std::fs::write(&conf, server_config(&node.hashed, settings, spec.pick))
                .map_err(|e| LabError::io(format!("write {}", conf.display()), e))?;
            args.push(format!("--config={}", conf.display()));
        }
        let core = if node.cost_us > 0 {
            SERVER_CORE
        } else {
            GENERATOR_CORE
        };
        let s = start_server(exe, runs, tag, &lower, core, args, port, metrics)?;
        servers.push((node.name, s));
    }
    let server = |name: &str| -> &Server {
        &servers
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or(&servers[0])
            .1
    };
    let cpu0: u64 = servers
        .iter()
        .map(|(_, s)| procfs::tree_cpu_us(s.proc.0.id()))
        .sum();
    let t0 = Instant::now();
    let offset = t0.saturating_duration_since(uas_started).as_secs_f64();
    let mut uacs = Vec::with_capacity(flows.len());
    for (i, &(from, to)) in flows.iter().enumerate() {
        let port = server(EDGES[from]).port;
        let domain = format!("{}.lab", EDGES[to].to_ascii_lowercase());
        let args: Vec<String> = vec![
            "load".into(),
            "uac".into(),
            "--transport=udp".into(),
            format!("--target=127.0.0.1:{port}"),
            format!("--to=user{{0..9999}}@{domain}"),
            format!("--rate={}", spec.rate / flows.len() as f64),
            format!("--duration={}", spec.duration_s),
            format!("--drain={}", spec.drain_s),
            format!("--goodput-window={GOODPUT_WINDOW_S}"),
            format!("--max-time={limit}"),
            format!("--seed={}", i + 1),
            format!(
                "--json={}",
                runs.join(format!("{tag}-uac{i}.json")).display()
            ),
            format!("--csv={}", runs.join(format!("{tag}-uac{i}.csv")).display()),
            "--progress=off".into(),
        ];
        let log = runs.join(format!("{tag}-uac{i}.log"));
        uacs.push(spawn(GENERATOR_CORE, exe, &args, &log)?);
    }
    // DEOC's per-target state as the load ends (one scrape; the sleep is bounded by the
    // load's duration).
    std::thread::sleep(
        (t0 + Duration::from_secs_f64(spec.duration_s)).saturating_duration_since(Instant::now()),
    );
    let at_end = scrape(server("E1").metrics);
    let mut overran = None;
    for (i, u) in uacs.iter_mut().enumerate() {
        let left = Duration::from_secs_f64(limit + 5.0).saturating_sub(t0.elapsed());
        if !wait_bounded(&mut u.0, left) && overran.is_none() {
            overran = Some(i);
        }
    }
    let window = t0.elapsed().as_secs_f64();
    let cpu1: u64 = servers
        .iter()
        .map(|(_, s)| procfs::tree_cpu_us(s.proc.0.id()))
        .sum();
    let edge_texts: Vec<String> = topology
        .ingress()
        .iter()
        .map(|&i| scrape(server(EDGES[i]).metrics))
        .collect();
    let core_texts: Vec<String> = topology
        .cores()
        .iter()
        .map(|c| scrape(server(c).metrics))
        .collect();
    // Each server's last scrape stays beside its log (`TAG-NAME.metrics`), for diagnosis.
    let ingress: Vec<&str> = topology.ingress().iter().map(|&i| EDGES[i]).collect();
    let cores = topology.cores();
    for (name, text) in ingress
        .iter()
        .zip(&edge_texts)
        .chain(cores.iter().zip(&core_texts))
    {
        let file = runs.join(format!("{tag}-{}.metrics", name.to_lowercase()));
        std::fs::write(&file, text)
            .map_err(|e| LabError::io(format!("write {}", file.display()), e))?;
    }
    for (_, u) in &uases {
        terminate(&u.0);
    }
    for (_, u) in &mut uases {
        wait_bounded(&mut u.0, Duration::from_secs(5));
    }
    let uas_names: Vec<String> = uases.iter().map(|(n, _)| n.clone()).collect();
    drop(servers);
    drop(uases);
    if let Some(i) = overran {
        return Err(LabError::Process(format!(
            "{tag}: UAC {i} overran its time limit; log {}",
            tail(&runs.join(format!("{tag}-uac{i}.log")))
        )));
    }
    let mut reports = Vec::with_capacity(flows.len());
    for i in 0..flows.len() {
        reports.push(read_json(&runs.join(format!("{tag}-uac{i}.json")))?);
    }
    let sum = |path: &[&str]| reports.iter().map(|r| count(r, path)).sum::<u64>();
    let pdd_n: Vec<f64> = reports
        .iter()
        .map(|r| num(r, &["latency", "pdd", "count"]))
        .collect();
    let total_n: f64 = pdd_n.iter().sum();
    let weighted = |key: &[&str]| {
        if total_n > 0.0 {
            reports
                .iter()
                .zip(&pdd_n)
                .map(|(r, n)| num(r, key) * n)
                .sum::<f64>()
                / total_n
        } else {
            0.0
        }
    };
    let half = spec.duration_s / 2.0;
    let per_flow: Vec<f64> = (0..flows.len())
        .map(|i| {
            window_sum(
                &runs.join(format!("{tag}-uac{i}.csv")),
                "goodput",
                half,
                spec.duration_s,
            ) / half.max(1e-3)
        })
        .collect();
    let goodput_steady: f64 = per_flow.iter().sum();
    // Calls whose ACK reached a UAS from `from` to `to` seconds of load, per second.
    let set_up = |from: f64, to: f64| -> f64 {
        uas_names
            .iter()
            .map(|u| {
                window_sum(
                    &runs.join(format!("{tag}-{u}.csv")),
                    "completed",
                    offset + from,
                    offset + to,
                )
            })
            .sum::<f64>()
            / (to - from).max(1e-3)
    };
    let setup_steady = set_up(half, spec.duration_s);
    let edges = |name: &str, label: &str| -> u64 {
        edge_texts
            .iter()
            .map(|t| metric_where(t, name, &[label]))
            .sum::<f64>() as u64
    };
    let cores_rejected: Vec<u64> = core_texts
        .iter()
        .map(|t| metric_where(t, "holdline_sip_rejected_overload_total", &[]) as u64)
        .collect();
    let cores_throttled: Vec<u64> = core_texts
        .iter()
        .map(|t| {
            metric_where(
                t,
                "holdline_feedback_rejected_total",
                &["reason=\"loss_throttle\""],
            ) as u64
        })
        .collect();
    let (c1, c2) = (&core_texts[0], &core_texts[1]);
    let throughput = set_up(0.0, spec.duration_s);
    let cpu_s = cpu1.saturating_sub(cpu0) as f64 / 1e6;
    Ok(Point {
        mechanism: spec.mechanism.to_string(),
        load_factor: ratio_of(spec.rate, capacity),
        offered_cps: reports.iter().map(|r| num(r, &["offered_cps"])).sum(),
        capacity_cps: capacity,
        throughput_cps: throughput,
        goodput_cps: reports.iter().map(|r| num(r, &["goodput_cps"])).sum(),
        goodput_steady_cps: goodput_steady,
        goodput_of_capacity: ratio_of(goodput_steady, capacity),
        setup_steady_cps: setup_steady,
        fairness: holdline_metrics::jain_index(&per_flow),
        per_flow_goodput_cps: per_flow,
        pdd_p50_ms: weighted(&["pdd_p50_ms"]),
        pdd_mean_ms: weighted(&["latency", "pdd", "mean_ms"]),
        pdd_p99_ms: reports
            .iter()
            .map(|r| num(r, &["pdd_p99_ms"]))
            .fold(0.0f64, f64::max),
        calls_attempted: sum(&["totals", "attempted"]),
        calls_ok: sum(&["totals", "calls_ok"]),
        r503: sum(&["totals", "r503"]),
        r_other: sum(&["totals", "r_fail_other"]),
        timeouts: sum(&["totals", "timeouts"]),
        retrans_invite: sum(&["totals", "retrans_invite"]),
        edge_gapped: edges("holdline_feedback_rejected_total", "reason=\"call_gap\""),
        edge_throttled: edges(
            "holdline_feedback_rejected_total",
            "reason=\"loss_throttle\"",
        ),
        edge_local_rejected: edges("holdline_overload_rejected_total", "reason=\"occupancy\""),
        c1_rejected: cores_rejected[0],
        c1_throttled: cores_throttled[0],
        c2_rejected: cores_rejected[1],
        cores_rejected,
        cores_throttled,
        deoc_targets: deoc_targets(&at_end),
        servers_cpu_s: cpu_s,
        servers_cpu_share: cpu_s / window.max(1e-3),
        c1_service_us: processing_us_above(c1, 0.0005),
        c2_service_us: processing_us_above(c2, 0.0005),
    })
}

/// `holdline load uas` on the generator core at 127.0.0.1:`port`, writing `TAG-NAME.json`,
/// `TAG-NAME.csv` and its log in `runs`; returned once it listens.
fn start_uas(
    exe: &Path,
    runs: &Path,
    tag: &str,
    name: &str,
    port: u16,
    max_time_s: f64,
) -> Result<Proc> {
    let log = runs.join(format!("{tag}-{name}.log"));
    let args = vec![
        "load".to_owned(),
        "uas".to_owned(),
        "--transport=udp".to_owned(),
        format!("--listen=127.0.0.1:{port}"),
        format!(
            "--json={}",
            runs.join(format!("{tag}-{name}.json")).display()
        ),
        format!("--csv={}", runs.join(format!("{tag}-{name}.csv")).display()),
        format!("--max-time={max_time_s}"),
        "--progress=off".to_owned(),
    ];
    let mut p = spawn(GENERATOR_CORE, exe, &args, &log)?;
    wait_bound(
        &mut p.0,
        port,
        Some(Transport::Udp),
        "holdline load uas",
        &log,
    )?;
    Ok(p)
}

/// DEOC's per-target state in an edge's metrics: (target, state, admitted rate).
fn deoc_targets(text: &str) -> Vec<(String, String, Option<f64>)> {
    let label = |l: &str, key: &str| -> Option<String> {
        let start = l.find(&format!("{key}=\""))? + key.len() + 2;
        let end = l[start..].find('"')? + start;
        Some(l[start..end].to_string())
    };
    let mut out: Vec<(String, String, Option<f64>)> = Vec::new();
    for l in text.lines() {
        if l.starts_with("holdline_deoc_target_state{")
            && let (Some(t), Some(s)) = (label(l, "target"), label(l, "state"))
        {
            out.push((t, s, None));
        }
    }
    for l in text.lines() {
        if l.starts_with("holdline_deoc_target_rate{")
            && let Some(t) = label(l, "target")
            && let Some(v) = l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok())
            && let Some(row) = out.iter_mut().find(|r| r.0 == t)
        {
            row.2 = Some(v);
        }
    }
    out
}

/// Each core's rejections and loss throttles, `C1 r/t, C2 r/t, …` (results written before
/// the per-core lists: C1's and C2's own fields).
fn cores_cell(p: &Point) -> String {
    let (rejected, throttled) = if p.cores_rejected.is_empty() {
        (vec![p.c1_rejected, p.c2_rejected], vec![p.c1_throttled, 0])
    } else {
        (p.cores_rejected.clone(), p.cores_throttled.clone())
    };
    rejected
        .iter()
        .enumerate()
        .map(|(i, r)| format!("C{} {r}/{}", i + 1, throttled.get(i).copied().unwrap_or(0)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn progress(i: usize, n: usize, p: &Point, started: Instant) {
    eprintln!(
        "[{i}/{n} {:>5.0} s] {:<8} {:>4.2}x offered {:>6.1}/s  goodput {:>6.1}/s ({:.2})  PDD p50 {:>7.1} ms p99 {:>8.1} ms  503 {:>5} 500 {:>5}  edges gapped {:>5} throttled {:>5}  cores rejected/throttled {}  Jain {:.3}  servers' CPU {:.0}%",
        started.elapsed().as_secs_f64(),
        p.mechanism,
        p.load_factor,
        p.offered_cps,
        p.goodput_steady_cps,
        p.goodput_of_capacity,
        p.pdd_p50_ms,
        p.pdd_p99_ms,
        p.r503,
        p.r_other,
        p.edge_gapped,
        p.edge_throttled,
        cores_cell(p),
        p.fairness,
        p.servers_cpu_share * 100.0,
    );
}

/// Runs the experiment and writes its results.
pub fn run(args: &Args) -> Result<Results> {
    if args.sweep.replot {
        let r: Results = crate::runner::read_results(&args.out)?;
        write(&args.out, &r)?;
        return Ok(r);
    }
    check_tools()?;
    let started = Instant::now();
    let quick = args.sweep.quick;
    let exe = holdline_exe(args.sweep.exe.as_deref())?;
    let duration = args.sweep.duration.unwrap_or(30.0);
    let drain = if quick { 5.0 } else { GOODPUT_WINDOW_S };
    let loads = if !args.sweep.loads.is_empty() {
        args.sweep.loads.clone()
    } else if quick {
        vec![1.0, 5.0]
    } else {
        vec![0.5, 1.0, 2.0, 3.0, 5.0]
    };
    let mechanisms: Vec<String> = if !args.sweep.mechanisms.is_empty() {
        args.sweep.mechanisms.clone()
    } else if quick {
        vec!["none".into(), "occ+deoc".into()]
    } else {
        MECHANISMS.iter().map(|s| s.to_string()).collect()
    };
    for m in &mechanisms {
        mechanism_args(m)?;
    }
    check_deoc_settings(&args.deoc)?;
    if loads
        .iter()
        .any(|&f| !(f.is_finite() && f > 0.0 && f <= 20.0))
    {
        return Err(LabError::Precondition(
            "--loads: each load factor must be in (0, 20]".into(),
        ));
    }
    if !(args.c1_cost_ratio.is_finite() && (0.1..=1.0).contains(&args.c1_cost_ratio)) {
        return Err(LabError::Precondition(
            "--c1-cost-ratio: from 0.1 to 1 (C2 is the bottleneck)".into(),
        ));
    }
    if !(2.0..=120.0).contains(&duration) {
        return Err(LabError::Precondition(
            "--duration: from 2 to 120 seconds".into(),
        ));
    }
    let sim_runs = args.sim_runs.unwrap_or(if quick { 2 } else { 5 }).min(20);
    let c2_cost = args.core_cost_us;
    // Every core of the two domains costs C2's.
    let c1_cost = match args.topology {
        Topology::Chain => (c2_cost as f64 * args.c1_cost_ratio).round() as u64,
        Topology::Domains => c2_cost,
    };
    let runs = args.out.join("runs");
    std::fs::create_dir_all(&runs)
        .map_err(|e| LabError::io(format!("create {}", runs.display()), e))?;
    let topology = args.topology;
    let nominal = topology.nominal(c2_cost);
    let steps: Vec<f64> = if args.capacity.is_some() {
        Vec::new()
    } else {
        topology.capacity_steps(quick)
    };
    let total = steps.len() + loads.len() * mechanisms.len();
    let mut done = 0;
    let costs = match topology {
        Topology::Chain => format!("C2 {c2_cost} µs per message, C1 {c1_cost} µs"),
        Topology::Domains => format!("C1..C4 {c2_cost} µs per message"),
    };
    eprintln!(
        "deoc: {}; {costs} (waited, rejections alike), nominal capacity {nominal:.1} calls/s; {total} points of {duration:.0} s; loads {loads:?}; mechanisms {mechanisms:?}; {sim_runs} simulated runs per point",
        topology.title()
    );

    // Phase 1: the capacity (no control).
    let mut capacity_steps = Vec::new();
    let mut capacity = args.capacity.unwrap_or(0.0);
    for &f in &steps {
        let rate = (nominal * f).round();
        let spec = Spec {
            mechanism: "none",
            rate,
            duration_s: duration,
            drain_s: drain,
            c1_cost_us: c1_cost,
            c2_cost_us: c2_cost,
            topology,
            deoc_settings: &args.deoc,
            pick: args.pick,
            tag: format!("capacity-{rate}"),
        };
        let mut p = run_point(&exe, &runs, &spec, 0.0)?;
        p.load_factor = f;
        done += 1;
        progress(done, total, &p, started);
        if p.calls_attempted > 0
            && p.calls_ok == p.calls_attempted
            && p.pdd_p99_ms <= 500.0
            && p.retrans_invite == 0
        {
            capacity = capacity.max(rate);
        }
        capacity_steps.push(p);
    }
    if capacity <= 0.0 {
        capacity = (nominal * steps.first().copied().unwrap_or(1.0)).round();
        eprintln!(
            "deoc: no capacity step was clean; using {capacity:.0} calls/s (the lowest step)"
        );
    }
    eprintln!("deoc: capacity {capacity:.0} calls/s; load factors of it");

    // Phase 2: the curves.
    let mut points = Vec::new();
    for &f in &loads {
        for m in &mechanisms {
            let spec = Spec {
                mechanism: m,
                rate: (capacity * f).round(),
                duration_s: duration,
                drain_s: drain,
                c1_cost_us: c1_cost,
                c2_cost_us: c2_cost,
                topology,
                deoc_settings: &args.deoc,
                pick: args.pick,
                tag: format!("{m}-{f}x"),
            };
            let mut p = run_point(&exe, &runs, &spec, capacity)?;
            // The factor asked for (the rate is rounded to whole calls/s): the simulator's
            // point of the same factor is its prediction.
            p.load_factor = f;
            done += 1;
            progress(done, total, &p, started);
            if p.offered_cps < 0.9 * spec.rate {
                eprintln!(
                    "deoc: the UACs offered only {:.0} of {:.0} calls/s: the generators' core is saturated",
                    p.offered_cps, spec.rate
                );
            }
            points.push(p);
            crate::runner::write_partial(&args.out, "deoc", capacity, &points)?;
        }
    }

    // Phase 3: the simulator's prediction of the same points.
    let agreement = if sim_runs > 0 && !points.is_empty() {
        simulate(
            &exe,
            topology,
            &args.deoc,
            args.pick,
            &args.out,
            &points,
            &mechanisms,
            &loads,
            capacity,
            duration,
            drain,
            sim_runs,
        )?
    } else {
        Vec::new()
    };

    let results = Results {
        experiment: "deoc".into(),
        topology,
        deoc_settings: args.deoc.clone(),
        pick: args.pick,
        command: crate::runner::command_line(),
        started_unix_s: crate::runner::started_unix_s(started),
        quick,
        machine: machine(),
        c2_cost_us: c2_cost,
        c1_cost_us: c1_cost,
        nominal_capacity_cps: nominal,
        capacity_cps: capacity,
        duration_s: duration,
        capacity_steps,
        points,
        agreement,
        sim_runs,
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    write(&args.out, &results)?;
    let _ = std::fs::remove_file(args.out.join("results.partial.json"));
    Ok(results)
}

/// The median of the cores' measured cost per message over the points, µs (`None`: none
/// measured).
fn measured(points: &[Point], f: fn(&Point) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = points.iter().filter_map(f).collect();
    (!v.is_empty()).then(|| crate::runner::median(v))
}

/// The scenario text for this run: the topology's file, with the run's capacity, durations
/// and the cores' cost per message (measured where the run measured it; in the two domains
/// every core at the mean of C1's and C2's).
#[allow(clippy::too_many_arguments)]
fn scenario_text(
    topology: Topology,
    capacity: f64,
    duration: f64,
    drain: f64,
    runs: u32,
    c1_us: f64,
    c2_us: f64,
    pick: Pick,
) -> String {
    let mut server = String::new();
    let mut out = String::new();
    let (c1_us, c2_us) = match topology {
        Topology::Chain => (c1_us, c2_us),
        Topology::Domains => ((c1_us + c2_us) / 2.0, (c1_us + c2_us) / 2.0),
    };
    for line in topology.scenario().lines() {
        let key = line.split('=').next().unwrap_or_default().trim();
        if line.starts_with("name = ") && out.contains("[[servers]]") {
            server = line
                .trim_start_matches("name = ")
                .trim_matches('"')
                .to_string();
        }
        let replaced = match key {
            "capacity_cps" => Some(format!("capacity_cps = {capacity}")),
            "duration_s" => Some(format!("duration_s = {duration}")),
            "drain_s" => Some(format!("drain_s = {drain}")),
            "settle_s" => Some(format!("settle_s = {}", duration / 2.0)),
            "runs" => Some(format!("runs = {runs}")),
            "to_any" => Some(format!("{line}\npick = \"{}\"", pick.as_str())),
            "service_us" | "reject_us" if server == "c1" => Some(format!("{key} = {c1_us:.1}")),
            "service_us" | "reject_us" if server.starts_with('c') && server != "c1" => {
                Some(format!("{key} = {c2_us:.1}"))
            }
            _ => None,
        };
        out.push_str(&replaced.unwrap_or_else(|| line.to_string()));
        out.push('\n');
    }
    out
}

/// Runs `holdline sim run` on this run's copy of the scenario for every mechanism and load
/// factor, and compares its goodput with the real one, point by point.
#[allow(clippy::too_many_arguments)]
fn simulate(
    exe: &Path,
    topology: Topology,
    deoc_settings: &[String],
    pick: Pick,
    out: &Path,
    points: &[Point],
    mechanisms: &[String],
    loads: &[f64],
    capacity: f64,
    duration: f64,
    drain: f64,
    runs: u32,
) -> Result<Vec<Agreement>> {
    let dir = out.join("sim");
    std::fs::create_dir_all(&dir)
        .map_err(|e| LabError::io(format!("create {}", dir.display()), e))?;
    let c1 = measured(points, |p| p.c1_service_us).unwrap_or(1600.0);
    let c2 = measured(points, |p| p.c2_service_us).unwrap_or(2000.0);
    let scenario = dir.join("scenario.toml");
    std::fs::write(
        &scenario,
        scenario_text(topology, capacity, duration, drain, runs, c1, c2, pick),
    )
    .map_err(|e| LabError::io(format!("write {}", scenario.display()), e))?;
    let list = |v: Vec<String>| v.join(",");
    let mut args = vec![
        "sim".to_string(),
        "run".to_string(),
        scenario.display().to_string(),
        "--mechanism".to_string(),
        list(mechanisms.to_vec()),
        "--scale".to_string(),
        list(loads.iter().map(|l| l.to_string()).collect()),
        "--runs".to_string(),
        runs.to_string(),
        "--jobs".to_string(),
        "1".to_string(),
        "--out".to_string(),
        dir.display().to_string(),
    ];
    args.extend(deoc_sweeps(deoc_settings));
    eprintln!(
        "deoc: simulating the same points ({runs} runs each; C1 {c1:.0} µs, C2 {c2:.0} µs per message as measured): holdline {}",
        args.join(" ")
    );
    let log = dir.join("sim.log");
    let logf = std::fs::File::create(&log)
        .map_err(|e| LabError::io(format!("create {}", log.display()), e))?;
    let mut child = Command::new(exe)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(logf)
        .spawn()
        .map_err(|e| LabError::io("spawn holdline sim run", e))?;
    // Bounded: a few seconds of simulation per run and point.
    let limit =
        Duration::from_secs(60 + 30 * u64::from(runs) * (loads.len() * mechanisms.len()) as u64);
    if !wait_bounded(&mut child, limit) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(LabError::Process(format!(
            "holdline sim run did not finish within {limit:?}; log {}",
            tail(&log)
        )));
    }
    let sweep = read_json(&dir.join("sweep.json"))?;
    let empty = Vec::new();
    let sim_points = sweep["points"].as_array().unwrap_or(&empty);
    let mut rows = Vec::new();
    for p in points {
        let Some(s) = sim_points.iter().find(|s| {
            s["local"].as_str() == Some(p.mechanism.as_str())
                && (s["scale"].as_f64().unwrap_or(-1.0) - p.load_factor).abs() < 1e-3
        }) else {
            continue;
        };
        let g = num(s, &["goodput_cps", "mean"]);
        // Both nothing: they agree; nothing real but something simulated: far off (99, a
        // finite number for the JSON).
        let ratio = match (p.goodput_steady_cps > 0.0, g > 0.0) {
            (true, _) => (g / p.goodput_steady_cps).min(99.0),
            (false, false) => 1.0,
            (false, true) => 99.0,
        };
        rows.push(Agreement {
            mechanism: p.mechanism.clone(),
            load_factor: p.load_factor,
            real_goodput_cps: p.goodput_steady_cps,
            sim_goodput_cps: g,
            sim_goodput_ci95: num(s, &["goodput_cps", "ci95"]),
            ratio,
            agrees: (ratio - 1.0).abs() <= AGREEMENT,
            real_pdd_p50_ms: p.pdd_p50_ms,
            sim_pdd_p50_ms: num(s, &["pdd_p50_ms", "mean"]),
            real_setup_cps: p.setup_steady_cps,
            sim_setup_cps: Some(num(s, &["throughput_cps", "mean"])),
        });
    }
    Ok(rows)
}

/// The series label of a mechanism.
fn label(m: &str) -> &str {
    match m {
        "none" => "No Control",
        "occ" => "OCC-Local",
        "occ+hop" => "OCC-Hop",
        "occ+deoc" => "DEOC",
        other => other,
    }
}

fn write(out: &Path, r: &Results) -> Result<()> {
    let json = serde_json::to_string_pretty(r).map_err(|e| LabError::Report {
        path: out.join("results.json"),
        reason: e.to_string(),
    })?;
    std::fs::write(out.join("results.json"), json)
        .map_err(|e| LabError::io("write results.json", e))?;
    let mut csv = String::from(
        "mechanism,load_factor,offered_cps,capacity_cps,throughput_cps,goodput_cps,goodput_steady_cps,goodput_of_capacity,setup_steady_cps,fairness,pdd_p50_ms,pdd_mean_ms,pdd_p99_ms,calls_attempted,calls_ok,r503,r_other,timeouts,retrans_invite,edge_gapped,edge_throttled,edge_local_rejected,c1_rejected,c1_throttled,c2_rejected,servers_cpu_share,c1_service_us,c2_service_us,cores_rejected,cores_throttled,per_flow_goodput_cps\n",
    );
    let opt = |x: Option<f64>| x.map_or_else(String::new, |v| format!("{v:.0}"));
    let join = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(";");
    for p in r.capacity_steps.iter().chain(&r.points) {
        csv.push_str(&format!(
            "{},{:.3},{:.1},{:.1},{:.1},{:.1},{:.1},{:.3},{:.1},{:.4},{:.1},{:.1},{:.1},{},{},{},{},{},{},{},{},{},{},{},{},{:.3},{},{},{},{},{}\n",
            p.mechanism,
            p.load_factor,
            p.offered_cps,
            p.capacity_cps,
            p.throughput_cps,
            p.goodput_cps,
            p.goodput_steady_cps,
            p.goodput_of_capacity,
            p.setup_steady_cps,
            p.fairness,
            p.pdd_p50_ms,
            p.pdd_mean_ms,
            p.pdd_p99_ms,
            p.calls_attempted,
            p.calls_ok,
            p.r503,
            p.r_other,
            p.timeouts,
            p.retrans_invite,
            p.edge_gapped,
            p.edge_throttled,
            p.edge_local_rejected,
            p.c1_rejected,
            p.c1_throttled,
            p.c2_rejected,
            p.servers_cpu_share,
            opt(p.c1_service_us),
            opt(p.c2_service_us),
            join(&p.cores_rejected),
            join(&p.cores_throttled),
            p.per_flow_goodput_cps
                .iter()
                .map(|x| format!("{x:.1}"))
                .collect::<Vec<_>>()
                .join(";"),
        ));
    }
    std::fs::write(out.join("points.csv"), csv).map_err(|e| LabError::io("write points.csv", e))?;
    let mut agree = String::from(
        "mechanism,load_factor,real_goodput_cps,sim_goodput_cps,sim_goodput_ci95,ratio,agrees,real_pdd_p50_ms,sim_pdd_p50_ms\n",
    );
    for a in &r.agreement {
        agree.push_str(&format!(
            "{},{:.3},{:.1},{:.1},{:.1},{:.3},{},{:.1},{:.1}\n",
            a.mechanism,
            a.load_factor,
            a.real_goodput_cps,
            a.sim_goodput_cps,
            a.sim_goodput_ci95,
            a.ratio,
            a.agrees,
            a.real_pdd_p50_ms,
            a.sim_pdd_p50_ms
        ));
    }
    std::fs::write(out.join("agreement.csv"), agree)
        .map_err(|e| LabError::io("write agreement.csv", e))?;
    std::fs::write(out.join("summary.md"), summary(r))
        .map_err(|e| LabError::io("write summary.md", e))?;

    let mut mechanisms: Vec<&str> = Vec::new();
    for p in &r.points {
        if !mechanisms.contains(&p.mechanism.as_str()) {
            mechanisms.push(&p.mechanism);
        }
    }
    let series_of = |f: fn(&Point) -> f64| {
        mechanisms
            .iter()
            .map(|m| {
                let mut pts: Vec<(f64, f64)> = r
                    .points
                    .iter()
                    .filter(|p| p.mechanism == *m)
                    .map(|p| (p.load_factor, f(p)))
                    .collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                (label(m).to_string(), pts)
            })
            .collect::<Vec<_>>()
    };
    let mut xs: Vec<f64> = r.points.iter().map(|p| p.load_factor).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    // The real series of `real`, the simulated ones of `sim` beside them, and the capacity.
    let chart_series = |real: fn(&Point) -> f64, sim: fn(&Agreement) -> Option<f64>| {
        let mut series = series_of(real);
        for m in &mechanisms {
            let mut pts: Vec<(f64, f64)> = r
                .agreement
                .iter()
                .filter(|a| a.mechanism == *m)
                .filter_map(|a| Some((a.load_factor, sim(a)?)))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            if !pts.is_empty() {
                series.push((format!("{} (simulated)", label(m)), pts));
            }
        }
        series.push((
            "capacity".to_string(),
            xs.iter().map(|x| (*x, r.capacity_cps)).collect(),
        ));
        series
    };
    let goodput = chart_series(|p| p.goodput_steady_cps, |a| Some(a.sim_goodput_cps));
    plot::chart(
        out,
        "goodput",
        &format!(
            "{} (C2 {} µs/message, capacity {:.0} calls/s): steady goodput vs load",
            r.topology.title(),
            r.c2_cost_us,
            r.capacity_cps
        ),
        "offered load / capacity",
        "calls/s (200 OK within 10 s)",
        &goodput,
    )?;
    // Calls set up end to end: the figure where No Control's collapse shows (its 200 OKs
    // still come within 10 s, its ACKs die in the cores).
    let setup = chart_series(|p| p.setup_steady_cps, |a| a.sim_setup_cps);
    plot::chart(
        out,
        "setup",
        &format!(
            "calls set up end to end (ACK at the callee), capacity {:.0} calls/s",
            r.capacity_cps
        ),
        "offered load / capacity",
        "calls/s (ACK reached the callee)",
        &setup,
    )?;
    plot::chart(
        out,
        "pdd",
        &format!(
            "{}: call setup delay (INVITE to 200 OK) p50 vs load",
            r.topology.title()
        ),
        "offered load / capacity",
        "setup delay p50, ms",
        &series_of(|p| p.pdd_p50_ms),
    )?;
    Ok(())
}

/// `x / of`, 0 when `of` is 0.
fn ratio_of(x: f64, of: f64) -> f64 {
    if of > 0.0 { x / of } else { 0.0 }
}

/// One line per load above capacity (`- 2.0×: DEOC 150.1 > …`): the mechanisms by `key`,
/// highest first.
fn ordering(points: &[Point], key: impl Fn(&Point) -> f64) -> String {
    let rows: Vec<(&str, f64, f64)> = points
        .iter()
        .map(|p| (p.mechanism.as_str(), p.load_factor, key(p)))
        .collect();
    ordering_of(&rows)
}

/// [`ordering`] over `(mechanism, load factor, value)` rows.
fn ordering_of(rows: &[(&str, f64, f64)]) -> String {
    let mut loads: Vec<f64> = rows.iter().map(|r| r.1).collect();
    loads.sort_by(f64::total_cmp);
    loads.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
    let mut s = String::new();
    for &l in loads.iter().filter(|&&l| l > 1.0 + 1e-9) {
        let mut at: Vec<&(&str, f64, f64)> =
            rows.iter().filter(|r| (r.1 - l).abs() < 1e-9).collect();
        at.sort_by(|a, b| b.2.total_cmp(&a.2));
        s.push_str(&format!(
            "- {l:.1}×: {}\n",
            at.iter()
                .map(|r| format!("{} {:.1}", label(r.0), r.2))
                .collect::<Vec<_>>()
                .join(" > ")
        ));
    }
    s
}

/// `summary.md`: the curve per mechanism, the criteria of issue 17, the simulator beside it.
fn summary(r: &Results) -> String {
    let mut s = format!(
        "# holdline lab deoc\n\n`{}`\n\nTopology: {}. C2 {} µs per message, C1 {} µs (waited: `--emulate-sleep`; rejections alike; in the two domains C3 and C4 as C2), edges no emulated cost; nominal capacity {:.1} calls/s, measured capacity **{:.0} calls/s** (the load factors' unit); {:.0} s of load per point.\n\n",
        r.command,
        r.topology.title(),
        r.c2_cost_us,
        r.c1_cost_us,
        r.nominal_capacity_cps,
        r.capacity_cps,
        r.duration_s
    );
    if !r.deoc_settings.is_empty() {
        s.push_str(&format!(
            "DEOC settings at the ingress edges (and in the simulator): `{}`.\n\n",
            r.deoc_settings.join("`, `")
        ));
    }
    s.push_str("| mechanism | load | offered/s | goodput/s (÷ capacity) | set up end to end/s (÷ capacity) | setup delay p50 / p99 ms | 503 / 500 at the callers | DEOC gaps / loss throttles at the ingress edges | cores rejected / throttled | Jain | servers' CPU |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for p in &r.points {
        s.push_str(&format!(
            "| {} | {:.1}× | {:.0} | {:.1} ({:.2}) | {:.1} ({:.2}) | {:.0} / {:.0} | {} / {} | {} / {} | {} | {:.3} | {:.0}% |\n",
            label(&p.mechanism),
            p.load_factor,
            p.offered_cps,
            p.goodput_steady_cps,
            p.goodput_of_capacity,
            p.setup_steady_cps,
            ratio_of(p.setup_steady_cps, p.capacity_cps),
            p.pdd_p50_ms,
            p.pdd_p99_ms,
            p.r503,
            p.r_other,
            p.edge_gapped,
            p.edge_throttled,
            cores_cell(p),
            p.fairness,
            p.servers_cpu_share * 100.0
        ));
    }
    s.push_str("\n## Ordering above capacity (goodput, highest first)\n\n");
    s.push_str(&ordering(&r.points, |p| p.goodput_steady_cps));
    s.push_str("\n## Ordering above capacity (calls set up end to end, highest first)\n\nThe ACK reached the callee, second half of the load. A call whose 200 OK came within 10 s counts as goodput even when its ACK is then lost in a congested core and the call fails; this ordering does not count it.\n\n");
    s.push_str(&ordering(&r.points, |p| p.setup_steady_cps));
    if let Some(p) = r
        .points
        .iter()
        .filter(|p| p.mechanism == "occ+deoc")
        .max_by(|a, b| a.load_factor.total_cmp(&b.load_factor))
    {
        s.push_str(&format!(
            "\nDEOC at {:.1}×: goodput {:.1} calls/s = **{:.2}** of the capacity (issue 17: ≥ 0.9 at 5×).\n",
            p.load_factor, p.goodput_steady_cps, p.goodput_of_capacity
        ));
    }
    if !r.agreement.is_empty() {
        let agree = r.agreement.iter().filter(|a| a.agrees).count();
        s.push_str(&format!(
            "\n## The simulator's prediction ({} runs per point; `sim/`)\n\n**{agree} of {} points within {:.0}%** of the real goodput.\n\n| mechanism | load | goodput real | simulated (± 95% CI) | sim / real | setup delay p50 ms real / sim | set up end to end/s real / sim |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
            r.sim_runs,
            r.agreement.len(),
            AGREEMENT * 100.0
        ));
        for a in &r.agreement {
            s.push_str(&format!(
                "| {} | {:.1}× | {:.1} | {:.1} ± {:.1} | {}{:.2}{} | {:.0} / {:.0} | {:.1} / {} |\n",
                label(&a.mechanism),
                a.load_factor,
                a.real_goodput_cps,
                a.sim_goodput_cps,
                a.sim_goodput_ci95,
                if a.agrees { "" } else { "**" },
                a.ratio,
                if a.agrees { "" } else { "**" },
                a.real_pdd_p50_ms,
                a.sim_pdd_p50_ms,
                a.real_setup_cps,
                a.sim_setup_cps
                    .map_or_else(|| "–".to_string(), |v| format!("{v:.1}"))
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ordering_lists_each_load_above_capacity_highest_first() {
        let rows = [
            ("none", 1.0, 130.0),
            ("none", 2.0, 50.0),
            ("occ+deoc", 2.0, 150.0),
            ("occ", 2.0, 80.0),
            ("occ+deoc", 5.0, 140.0),
            ("none", 5.0, 160.0),
        ];
        assert_eq!(
            ordering_of(&rows),
            "- 2.0×: DEOC 150.0 > OCC-Local 80.0 > No Control 50.0\n- 5.0×: No Control 160.0 > DEOC 140.0\n"
        );
    }

    #[test]
    fn mechanisms_name_their_servers() {
        let (e, o) = mechanism_args("occ+deoc").expect("deoc");
        assert_eq!(e, ["--feedback=deoc"]);
        assert_eq!(o, ["--feedback=none"]);
        let (e, o) = mechanism_args("none").expect("none");
        assert_eq!(e, o);
        assert!(e.contains(&"--overload=none".to_string()));
        assert!(mechanism_args("occ+bogus").is_err());
    }

    #[test]
    fn the_scenario_copy_takes_the_runs_values_and_parses() {
        let text = scenario_text(
            Topology::Chain,
            80.0,
            6.0,
            4.0,
            2,
            1700.0,
            2100.0,
            Pick::Hash,
        );
        assert!(text.contains("capacity_cps = 80\n"), "{text}");
        assert!(text.contains("settle_s = 3\n"));
        assert!(text.contains("service_us = 2100.0"));
        assert!(text.contains("reject_us = 1700.0"));
        // The edges keep theirs.
        assert!(text.contains("service_us = 20\n"));
        let sc = holdline_sim::Scenario::from_toml("scenario.toml", &text).expect("valid");
        assert_eq!(sc.runs, 2);
        assert_eq!(sc.ingress_edges().len(), 2);
        assert_eq!(sc.egress_edges().len(), 2);
    }

    #[test]
    fn the_two_domain_scenario_copy_gives_every_core_the_measured_cost() {
        let text = scenario_text(
            Topology::Domains,
            120.0,
            6.0,
            4.0,
            2,
            1900.0,
            2100.0,
            Pick::RoundRobin,
        );
        assert!(text.contains("capacity_cps = 120\n"), "{text}");
        assert_eq!(text.matches("service_us = 2000.0").count(), 4, "{text}");
        assert_eq!(text.matches("service_us = 20\n").count(), 4, "{text}");
        let sc = holdline_sim::Scenario::from_toml("scenario.toml", &text).expect("valid");
        assert_eq!(sc.ingress_edges().len(), 4);
        assert_eq!(sc.egress_edges().len(), 4);
        let spread: Vec<_> = sc.routes.iter().filter(|r| !r.to_any.is_empty()).collect();
        assert!(!spread.is_empty() && spread.iter().all(|r| r.round_robin()));
        assert_eq!(Topology::Domains.flows().len(), 12);
        assert!((Topology::Domains.nominal(2000) - 171.43).abs() < 0.01);
    }

    #[test]
    fn every_name_a_topology_uses_is_one_of_its_servers() {
        // The run looks servers' ports and processes up by name and falls back to the
        // first one: this is what keeps the fallback unused.
        for topology in [Topology::Chain, Topology::Domains] {
            let names = topology.servers();
            let asked = std::cell::RefCell::new(Vec::new());
            let port = |n: &str| {
                asked.borrow_mut().push(n.to_string());
                5000
            };
            let v = nodes(topology, &port, &[6001, 6002, 6003, 6004], true, 1600, 2000);
            let mut built: Vec<&str> = v.iter().map(|n| n.name).collect();
            built.sort_unstable();
            let mut all = names.to_vec();
            all.sort_unstable();
            assert_eq!(built, all, "{topology:?}: one node per server");
            for n in asked.borrow().iter() {
                assert!(names.contains(&n.as_str()), "{topology:?}: port of `{n}`");
            }
            assert!(!asked.borrow().is_empty());
        }
    }

    #[test]
    fn the_two_domains_route_through_their_own_cores_then_the_others() {
        let names = Topology::Domains.servers();
        let port = |n: &str| 5000 + names.iter().position(|x| *x == n).unwrap_or(99) as u16;
        let uas = [6001, 6002, 6003, 6004];
        let v = nodes(Topology::Domains, &port, &uas, true, 1600, 2000);
        assert_eq!(v.len(), 8);
        let node = |n: &str| v.iter().find(|x| x.name == n).expect(n);
        // E1: its own callees to its UAS, the three other edges hashed over C1, C2, each
        // named as DEOC's target.
        let e1 = node("E1");
        assert!(e1.ingress && e1.cost_us == 0);
        assert_eq!(e1.routes, ["e1.lab=udp:127.0.0.1:6001"]);
        let (c1, c2) = (port("C1"), port("C2"));
        assert_eq!(
            e1.hashed,
            [
                ("e2.lab".to_string(), vec![c1, c2], Some("E2")),
                ("e3.lab".to_string(), vec![c1, c2], Some("E3")),
                ("e4.lab".to_string(), vec![c1, c2], Some("E4")),
            ]
        );
        assert_eq!(node("E4").hashed[0].1, vec![port("C3"), port("C4")]);
        // C3 (domain B): its own edges directly, domain A's edges hashed over C1, C2; every
        // core at C2's cost, no DEOC target.
        let c3 = node("C3");
        assert!(!c3.ingress && c3.cost_us == 2000);
        assert_eq!(
            c3.routes,
            [
                format!("e3.lab=udp:127.0.0.1:{}", port("E3")),
                format!("e4.lab=udp:127.0.0.1:{}", port("E4"))
            ]
        );
        assert_eq!(
            c3.hashed,
            [
                ("e1.lab".to_string(), vec![c1, c2], None),
                ("e2.lab".to_string(), vec![c1, c2], None),
            ]
        );
        let conf = hash_routes_config(&e1.hashed, Pick::Hash);
        assert_eq!(conf.matches("[[hash_routes]]").count(), 3, "{conf}");
        assert_eq!(conf.matches("failover = false").count(), 3, "{conf}");
        assert!(conf.contains("deoc_target = \"E3\""), "{conf}");
        assert_eq!(conf.matches("pick = \"hash\"").count(), 3, "{conf}");
        let rr = hash_routes_config(&e1.hashed, Pick::RoundRobin);
        assert_eq!(rr.matches("pick = \"round-robin\"").count(), 3, "{rr}");
        // Without DEOC no route names a target.
        let plain = nodes(Topology::Domains, &port, &uas, false, 1600, 2000);
        assert!(plain.iter().all(|n| n.hashed.iter().all(|h| h.2.is_none())));
        // The chain keeps its order (next hops first) and C1's own cost.
        let chain = nodes(Topology::Chain, &port, &uas, true, 1600, 2000);
        let order: Vec<&str> = chain.iter().map(|n| n.name).collect();
        assert_eq!(order, ["E3", "E4", "C2", "C1", "E1", "E2"]);
        assert_eq!(chain[3].cost_us, 1600);
        assert!(chain[4].routes[0].ends_with(",deoc_target=E3"));
    }

    #[test]
    fn deoc_settings_go_to_the_edges_table_and_are_checked() {
        let hashed = [("e3.lab".to_string(), vec![5001, 5002], Some("E3"))];
        let conf = server_config(
            &hashed,
            &["alpha=1".to_string(), " k = 0.75".to_string()],
            Pick::Hash,
        );
        assert!(
            conf.contains("[overload.deoc]\nalpha = 1\nk = 0.75\n"),
            "{conf}"
        );
        assert!(conf.contains("[[hash_routes]]"), "{conf}");
        assert!(!server_config(&[], &[], Pick::Hash).contains("overload"));
        assert!(check_deoc_settings(&["alpha=0.5".to_string(), "beta=0.25".to_string()]).is_ok());
        for bad in ["alpha", "=1", "alpha=", "Alpha=1", "a.b=1"] {
            assert!(check_deoc_settings(&[bad.to_string()]).is_err(), "{bad}");
        }
        // A word is quoted for TOML; learning the targets takes them out of the routes.
        let learn = ["target=record-route".to_string()];
        let conf = server_config(&[], &learn, Pick::Hash);
        assert!(conf.contains("target = \"record-route\"\n"), "{conf}");
        let parsed = holdline_server::ServerConfig::from_toml("e1.toml", &conf).expect("valid");
        assert_eq!(parsed.overload.deoc.target, "record-route");
        assert!(learns_targets(&learn));
        assert!(learns_targets(&["target=\"record-route\"".to_string()]));
        assert!(!learns_targets(&[
            "target=next-hop".to_string(),
            "alpha=1".to_string()
        ]));
        // The simulator's edges learn too, and take every other setting as a sweep.
        assert_eq!(
            deoc_sweeps(&["alpha=1".to_string(), "target=record-route".to_string()]),
            [
                "--sweep",
                "servers.*.deoc.alpha=1",
                "--sweep",
                "servers.*.deoc.target=record-route"
            ]
        );
        assert_eq!(
            deoc_sweeps(&["target=next-hop".to_string()]),
            Vec::<String>::new()
        );
    }

    #[test]
    fn deoc_targets_are_read_from_the_metrics() {
        let text = "holdline_deoc_target_state{worker=\"0\",target=\"E3\",state=\"overload_recovery\"} 1\n\
                    holdline_deoc_target_rate{worker=\"0\",target=\"E3\"} 12.5\n\
                    holdline_deoc_target_state{worker=\"0\",target=\"E4\",state=\"terminated\"} 1\n";
        let t = deoc_targets(text);
        assert_eq!(
            t,
            vec![
                (
                    "E3".to_string(),
                    "overload_recovery".to_string(),
                    Some(12.5)
                ),
                ("E4".to_string(), "terminated".to_string(), None),
            ]
        );
    }
}
