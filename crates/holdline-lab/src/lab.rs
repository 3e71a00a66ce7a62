//! `holdline lab NAME [--quick] [--out DIR]`: the experiments of the papers, run on this
//! machine with real processes.

use std::process::ExitCode;

/// The experiments: name and one line on what each does.
pub const EXPERIMENTS: &[(&str, &str)] = &[
    (
        "udp-overload",
        "local control over UDP (seed 003): no control vs 503 on a full queue vs OCC, 0.5x-10x",
    ),
    (
        "tcp-overload",
        "SIP-over-TCP overload control (seed 000): SEs -> RE, no control vs ICS/ECS + BM + SF, 0.5x-10x, 1/3/10 SEs",
    ),
    (
        "tcp-buffers",
        "seed 000's buffer sweeps: RE receive/application buffer and SE send buffer at 2.5x and 12.5x, the 10-SE receive-buffer sweep (where 200 OK retransmissions begin), the paper's recommendation vs holdline's defaults",
    ),
    (
        "tcp-fairness",
        "seed 000's unequal load: three SEs offered 3:2:1, per-SE throughput 0.5x-10x, equal (service-provider-centric) vs offered-load (end-user-centric) sharing at the RE",
    ),
    (
        "feedback",
        "hop-by-hop overload control (RFC 7339) over UDP: SEs -> RE, no control vs local OCC vs loss feedback, 0.5x-10x, 1/3/10 SEs",
    ),
    (
        "deoc",
        "seed 003's DEOC with real processes: 2 ingress edges -> C1 -> C2 -> 2 egress edges, No Control vs OCC-Local vs OCC-Hop vs DEOC, 0.5x-5x, beside the simulator's prediction of the same run",
    ),
    (
        "window",
        "seed 004's dual-proxy trapezoid over UDP: UAC -> upstream -> capacity-limited downstream (holdline or Kamailio), no control vs the feedback-free delay window, 0.14x-10x",
    ),
    (
        "holb",
        "seed 002's head-of-line blocking: P1 -> emulated lossy link -> P2 over SCTP ordered/unordered/streams, TCP, UDP; 95th percentile of post-selection delay with CIs and KS tests (root)",
    ),
    (
        "soak",
        "sustained load for minutes: completed ratio, RSS and transactions over time",
    ),
    (
        "storm",
        "REGISTER storm (1,000,000 users at 20,000/s) with kill -9 drills: 200/503/retries per second, RSS, time to register everyone, acknowledged bindings lost",
    ),
    (
        "scaling",
        "seed 001's two-stage SnPm configurations (SIPstone Proxy 200), each server under a CPU quota: throughput vs offered load beside the paper's model",
    ),
    (
        "failover",
        "seed 001's failover drills: kill -9 a second-stage server, a first-stage server and the Redis primary under calls and re-REGISTERs; calls and registrations lost, bindings lost, time to recover",
    ),
    (
        "architectures",
        "seed 001 §6: the same protocol code as event loop, thread per message, pool thread per message, 100-set thread pool, process pool and holdline's thread per core; stateless and stateful, 1 and 2 cores: calls/s at saturation, CPU and context switches per call",
    ),
    (
        "vrrp",
        "IP takeover with VRRP (keepalived) in network namespaces: kill -9 of the active holdline under calls and re-REGISTERs; takeover time, calls failed, bindings lost",
    ),
];

/// The usage and the list of experiments, one line each.
fn usage_text() -> String {
    let mut s = String::from(
        "usage: holdline lab NAME [--quick] [--out DIR] [options; NAME --help]\nexperiments:\n",
    );
    for (name, what) in EXPERIMENTS {
        s.push_str(&format!("  {name:<14} {what}\n"));
    }
    s.push_str("  index DIR      (re)write DIR/index.html: every plot of a results directory with its summary next to it\n");
    s
}

fn usage() {
    eprint!("{}", usage_text());
}

/// The `--out DIR` of an experiment's arguments (`--out DIR` or `--out=DIR`), or its
/// default `lab-results/NAME`.
fn out_dir(name: &str, args: &[String]) -> std::path::PathBuf {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--out" {
            if let Some(v) = it.next() {
                return v.into();
            }
        } else if let Some(v) = a.strip_prefix("--out=") {
            return v.into();
        }
    }
    std::path::Path::new("lab-results").join(name)
}

/// Runs `holdline lab ARGS`; after an experiment that succeeded, writes `index.html` beside
/// its results (every plot with the summary next to it; [`crate::index`]).
pub fn run(args: Vec<String>) -> ExitCode {
    let name = args.first().cloned().unwrap_or_default();
    let help = args.iter().any(|a| a == "-h" || a == "--help");
    let out = out_dir(&name, args.get(1..).unwrap_or_default());
    let code = dispatch(args);
    let experiment = EXPERIMENTS.iter().any(|(n, _)| *n == name);
    if experiment && !help && code == ExitCode::SUCCESS && out.is_dir() {
        let dir = out.file_name().map_or_else(
            || out.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        crate::index::after_run(&out, &format!("holdline lab {name}: {dir}"));
    }
    code
}

fn dispatch(args: Vec<String>) -> ExitCode {
    let mut it = args.into_iter();
    match it.next().as_deref() {
        Some("udp-overload") => crate::udp_overload::main(it.collect()),
        Some("tcp-overload") => crate::tcp_overload::main(it.collect()),
        Some("tcp-buffers") => crate::tcp_buffers::main(it.collect()),
        Some("tcp-fairness") => crate::tcp_fairness::main(it.collect()),
        Some("feedback") => crate::feedback::main(it.collect()),
        Some("window") => crate::window::main(it.collect()),
        Some("deoc") => crate::deoc::main(it.collect()),
        Some("holb") => crate::holb::main(it.collect()),
        Some("soak") => crate::soak::main(it.collect()),
        Some("storm") => crate::storm::main(it.collect()),
        Some("scaling") => crate::scaling::main(it.collect()),
        Some("failover") => crate::failover::main(it.collect()),
        Some("vrrp") => crate::vrrp::main(it.collect()),
        Some("architectures") => crate::architectures::main(it.collect()),
        Some("index") => crate::index::main(it.collect()),
        // Started by `architectures` itself: one driver process (not listed).
        Some("architectures-driver") => crate::architectures::driver_main(it.collect()),
        Some("-h" | "--help" | "help") => {
            print!("{}", usage_text());
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprintln!("holdline lab: unknown experiment `{other}`");
            usage();
            ExitCode::from(2)
        }
        None => {
            usage();
            ExitCode::from(2)
        }
    }
}
