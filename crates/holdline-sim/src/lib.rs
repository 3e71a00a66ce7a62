//! holdline's discrete-event simulator: networks of SIP servers running holdline's own code
//! under a virtual clock.
//!
//! Every server is a real [`holdline_proto::Endpoint`] (the code `holdline serve` runs, parsing
//! and building real message bytes) with a real `holdline-overload` controller; callers and
//! callees are `holdline-agent` user agents (the load generator's logic); links are
//! `holdline-netmodel` models. The simulator adds what the real machine provides: time (a
//! virtual clock that jumps to the next event), the network, and each server's CPU and
//! receive queues.
//!
//! ```text
//!   UAC agents ──link──> [ main queue    ] ─┐  CPU: one message at a time, service time
//!   (one per step)       [ INVITE queue  ] ─┴─> per kind; Busy / QueueDelay / QueueLength /
//!                          bounded, drop-tail    NewRequestDelay -> controller; gate asks it
//!                                                       │ Endpoint::handle_admitting
//!                                   UAS agent <──link───┘ transmits leave when service ends
//! ```
//!
//! - [`engine::EventQueue`]: a binary heap of `(time, sequence)`; ties leave in scheduling
//!   order, so a run is a function of the scenario and its seed.
//! - [`scenario::Scenario`]: the TOML scenario file.
//! - [`world::World`]: one run; [`run_scenario`] runs them all and [`report::Results`]
//!   aggregates them (mean and 95% confidence interval per point).
//!
//! Pure: no clock, no thread, no socket, no system randomness; the binary (`holdline sim`)
//! reads files, prints progress and writes results.
#![forbid(unsafe_code)]

pub mod check;
pub mod engine;
pub mod report;
pub mod scenario;
pub mod shrink;
pub mod store;
pub mod world;

pub use report::{Estimate, Point, Results, agents_csv, jain_index, pcap, pdd_cdf_csv, series_csv};
pub use scenario::{Scenario, ScenarioError, Sweep, sweep_points};
pub use world::{Captured, RunOutput, SimError, World, run_seed};

/// Runs `runs` runs of `sc` one after the other; `progress(run, simulated_second)` is called
/// once per simulated second.
pub fn run_scenario(
    sc: &Scenario,
    runs: u64,
    mut progress: impl FnMut(u64, u64),
) -> Result<Vec<RunOutput>, SimError> {
    let mut out = Vec::new();
    for r in 0..runs {
        let w = World::new(sc, r)?;
        out.push(w.run(|t| progress(r, t)));
    }
    Ok(out)
}

/// The speed benchmark's scenario (`cargo bench -p holdline-sim`, `holdline sim bench`): one
/// proxy with 1 ms of CPU per call (capacity ≈ 1,000 calls/s) offered `factor` × its
/// capacity for `seconds` simulated seconds, controller `local`.
pub fn bench_scenario(local: &str, factor: f64, seconds: f64) -> Result<Scenario, ScenarioError> {
    let text = format!(
        r#"
duration_s = {seconds}
drain_s = 1
capacity_cps = 1000
[[servers]]
name = "proxy"
local = "{local}"
service_us = 166.667
[[uas]]
name = "uas"
[[uac]]
name = "uac"
target = "proxy"
steps = [{{ at_s = 0, factor = {factor} }}]
[[routes]]
server = "proxy"
to = "uas"
"#
    );
    Scenario::from_toml("bench.toml", &text)
}
