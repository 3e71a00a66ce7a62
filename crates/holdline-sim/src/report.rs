//! Aggregation over runs: mean and 95% confidence interval per point, and the result file's
//! JSON (deterministic: no wall-clock value goes in).

use serde::Serialize;

use crate::scenario::Scenario;
use crate::world::{Captured, RunOutput, SeriesRow, ServerCounters};

/// Mean and 95% confidence interval (Student's t) of one measure over runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Estimate {
    /// The mean.
    pub mean: f64,
    /// Half-width of the 95% confidence interval (0 with one run).
    pub ci95: f64,
    /// Lowest run.
    pub min: f64,
    /// Highest run.
    pub max: f64,
}

/// Two-sided 97.5% quantiles of Student's t for 1..=30 degrees of freedom.
const T975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

impl Estimate {
    /// The estimate of `xs` (empty: all zero).
    pub fn of(xs: &[f64]) -> Self {
        let n = xs.len();
        if n == 0 {
            return Self {
                mean: 0.0,
                ci95: 0.0,
                min: 0.0,
                max: 0.0,
            };
        }
        let mean = xs.iter().sum::<f64>() / n as f64;
        let ci95 = if n > 1 {
            let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            let t = T975.get(n - 2).copied().unwrap_or(1.96);
            t * (var / n as f64).sqrt()
        } else {
            0.0
        };
        Self {
            mean,
            ci95,
            min: xs.iter().copied().fold(f64::INFINITY, f64::min),
            max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

/// One point of the results: one step of one UAC population, over every run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Point {
    /// The UAC population.
    pub population: String,
    /// The step's index in its profile.
    pub step: usize,
    /// The step's factor of `capacity_cps`, if it was given as one.
    pub load_factor: Option<f64>,
    /// The step's nominal rate, calls per second.
    pub rate_cps: f64,
    /// Seconds each run's point covers (the step minus `settle_s`).
    pub window_s: f64,
    /// Calls offered per second.
    pub offered_cps: Estimate,
    /// Calls set up end to end per second: the ACK of their 200 OK reached the UAS (counted
    /// at every UAS by arrival time over the point's window).
    pub throughput_cps: Estimate,
    /// Calls of this step the UAC finished without failure (200 OK, ACK, BYE and its 200 OK)
    /// per second.
    pub calls_ok_cps: Estimate,
    /// 200 OKs within the goodput window per second.
    pub goodput_cps: Estimate,
    /// 503s received per second.
    pub rejected_cps: Estimate,
    /// Other final failures and timeouts per second (e.g. the 500 a stateful proxy sends
    /// upstream for a lone downstream 503, RFC 3261 §16.7).
    pub failed_other_cps: Estimate,
    /// INVITE retransmissions per second.
    pub retrans_invite_cps: Estimate,
    /// Median post-dial delay (first INVITE to 200 OK), milliseconds.
    pub pdd_p50_ms: Estimate,
    /// 90th percentile of the post-dial delay, milliseconds.
    pub pdd_p90_ms: Estimate,
    /// 99th percentile of the post-dial delay, milliseconds.
    pub pdd_p99_ms: Estimate,
    /// Mean post-dial delay, milliseconds.
    pub pdd_mean_ms: Estimate,
}

/// A server's totals, mean over runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServerTotals {
    /// The server.
    pub server: String,
    /// Messages handled.
    pub handled: Estimate,
    /// New INVITEs admitted by its gate.
    pub admitted: Estimate,
    /// New INVITEs rejected at its gate.
    pub rejected: Estimate,
    /// Messages dropped at its full queues.
    pub queue_drops: Estimate,
    /// CPU busy seconds.
    pub busy_s: Estimate,
    /// New INVITEs rejected at its forward gate (DEOC, a next hop's loss answer).
    pub forward_rejected: Estimate,
    /// Requests it sent on to a further target of an `srv` route after one failed (the
    /// endpoint's `failovers`).
    pub failovers: Estimate,
    /// Callees and domains whose egress edge it learned from Record-Route (DEOC with
    /// `target = "record-route"`), at the end of the run.
    pub edges_learned: Estimate,
    /// INVITEs its endpoint received (retransmissions included).
    pub invites_in: Estimate,
    /// ACKs it received.
    pub acks_in: Estimate,
    /// BYEs it received.
    pub byes_in: Estimate,
    /// 1xx responses it received.
    pub responses_1xx_in: Estimate,
    /// 2xx responses it received.
    pub responses_2xx_in: Estimate,
    /// 3xx-6xx responses it received.
    pub responses_3xx_6xx_in: Estimate,
    /// Its worker loop's iterations.
    pub iterations: Estimate,
    /// Receive calls on its main queue that returned datagrams.
    pub main_reads: Estimate,
    /// Receive calls on its INVITE queue that returned datagrams.
    pub invite_reads: Estimate,
    /// The mean wait of the first datagram of a main-queue read, milliseconds (the real
    /// server's `holdline_queue_delay_seconds` sum over count).
    pub queue_delay_ms: Estimate,
    /// The same for the INVITE queue (`holdline_invite_queue_delay_seconds`).
    pub invite_queue_delay_ms: Estimate,
}

/// Jain's fairness index of `xs`: `(Σx)² / (n·Σx²)`, 1 when all are equal; `None` when
/// every value is 0 (or there are none).
pub fn jain_index(xs: &[f64]) -> Option<f64> {
    let sq: f64 = xs.iter().map(|x| x * x).sum();
    if xs.is_empty() || sq <= 0.0 {
        return None;
    }
    let sum: f64 = xs.iter().sum();
    Some(sum * sum / (xs.len() as f64 * sq))
}

/// The results of all runs of a scenario (`results.json`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Results {
    /// The scenario's name.
    pub scenario: String,
    /// The scenario's seed.
    pub seed: u64,
    /// The runs' seeds.
    pub run_seeds: Vec<u64>,
    /// Load phase, seconds.
    pub duration_s: f64,
    /// Reference capacity, calls per second.
    pub capacity_cps: Option<f64>,
    /// One per step of each UAC population.
    pub points: Vec<Point>,
    /// One per server.
    pub servers: Vec<ServerTotals>,
    /// Jain's fairness index of the goodput of the scenario's `fairness_flows` (every UAC
    /// step when it names none), per run; over the runs where some flow had goodput.
    pub jain_index: Option<Estimate>,
    /// SIP messages sent over links per run (mean).
    pub messages_per_run: f64,
    /// Messages lost or dropped by links per run (mean).
    pub link_drops_per_run: f64,
    /// Retransmissions by the user agents per run (callers' INVITEs and BYEs, callees'
    /// 2xx): where a server's load differs from the real one's, which timers made it.
    pub retransmitted: RetransmittedTotals,
}

/// Retransmissions by the user agents over the runs (`results.json`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RetransmittedTotals {
    /// INVITEs sent again by callers (Timer A).
    pub invite: Estimate,
    /// 2xx responses to INVITEs sent again by callees until their ACK came.
    pub r200: Estimate,
    /// BYEs sent again by callers (Timer E).
    pub bye: Estimate,
}

impl Results {
    /// Aggregates `runs` of `sc`.
    pub fn from_runs(sc: &Scenario, runs: &[RunOutput]) -> Self {
        let mut points = Vec::new();
        if let Some(first) = runs.first() {
            for (i, s) in first.steps.iter().enumerate() {
                let col = |f: &dyn Fn(&crate::world::StepOutcome) -> f64| {
                    let xs: Vec<f64> = runs.iter().filter_map(|r| r.steps.get(i)).map(f).collect();
                    Estimate::of(&xs)
                };
                let factor = sc
                    .uac
                    .iter()
                    .find(|u| u.name == s.population)
                    .and_then(|u| u.steps.get(s.step))
                    .and_then(|st| st.factor);
                points.push(Point {
                    population: s.population.clone(),
                    step: s.step,
                    load_factor: factor,
                    rate_cps: s.rate_cps,
                    window_s: s.window_s,
                    offered_cps: col(&|p| p.offered_cps),
                    throughput_cps: col(&|p| p.throughput_cps),
                    calls_ok_cps: col(&|p| p.calls_ok_cps),
                    goodput_cps: col(&|p| p.goodput_cps),
                    rejected_cps: col(&|p| p.rejected_cps),
                    failed_other_cps: col(&|p| p.failed_other_cps),
                    retrans_invite_cps: col(&|p| p.retrans_invite_cps),
                    pdd_p50_ms: col(&|p| p.pdd_p50_ms),
                    pdd_p90_ms: col(&|p| p.pdd_p90_ms),
                    pdd_p99_ms: col(&|p| p.pdd_p99_ms),
                    pdd_mean_ms: col(&|p| p.pdd_mean_ms),
                });
            }
        }
        let mut servers = Vec::new();
        if let Some(first) = runs.first() {
            for (i, (name, _)) in first.servers.iter().enumerate() {
                let col = |f: &dyn Fn(&ServerCounters) -> f64| {
                    let xs: Vec<f64> = runs
                        .iter()
                        .filter_map(|r| r.servers.get(i))
                        .map(|(_, c)| f(c))
                        .collect();
                    Estimate::of(&xs)
                };
                servers.push(ServerTotals {
                    server: name.clone(),
                    handled: col(&|c| c.handled as f64),
                    admitted: col(&|c| c.admitted as f64),
                    rejected: col(&|c| c.rejected as f64),
                    queue_drops: col(&|c| (c.queue_drops + c.invite_queue_drops) as f64),
                    busy_s: col(&|c| c.busy_ns as f64 / 1e9),
                    forward_rejected: col(&|c| c.forward_rejected as f64),
                    failovers: col(&|c| c.failovers as f64),
                    edges_learned: col(&|c| c.edges_learned as f64),
                    invites_in: col(&|c| c.received.invite as f64),
                    acks_in: col(&|c| c.received.ack as f64),
                    byes_in: col(&|c| c.received.bye as f64),
                    responses_1xx_in: col(&|c| c.received.r1xx as f64),
                    responses_2xx_in: col(&|c| c.received.r2xx as f64),
                    responses_3xx_6xx_in: col(&|c| c.received.r3xx_6xx as f64),
                    iterations: col(&|c| c.iterations as f64),
                    main_reads: col(&|c| c.main_reads as f64),
                    invite_reads: col(&|c| c.invite_reads as f64),
                    queue_delay_ms: col(&|c| mean_ms(c.main_wait_ns, c.main_reads)),
                    invite_queue_delay_ms: col(&|c| mean_ms(c.invite_wait_ns, c.invite_reads)),
                });
            }
        }
        let mean = |f: &dyn Fn(&RunOutput) -> f64| {
            if runs.is_empty() {
                0.0
            } else {
                runs.iter().map(f).sum::<f64>() / runs.len() as f64
            }
        };
        let jain: Vec<f64> = runs
            .iter()
            .filter_map(|r| {
                let xs: Vec<f64> = r
                    .steps
                    .iter()
                    .filter(|s| {
                        sc.fairness_flows.is_empty() || sc.fairness_flows.contains(&s.population)
                    })
                    .map(|s| s.goodput_cps)
                    .collect();
                jain_index(&xs)
            })
            .collect();
        Self {
            jain_index: (!jain.is_empty()).then(|| Estimate::of(&jain)),
            scenario: sc.name.clone(),
            seed: sc.seed,
            run_seeds: runs.iter().map(|r| r.seed).collect(),
            duration_s: sc.duration_s,
            capacity_cps: sc.capacity_cps,
            points,
            servers,
            messages_per_run: mean(&|r| r.messages as f64),
            link_drops_per_run: mean(&|r| r.link_drops as f64),
            retransmitted: {
                let est = |f: &dyn Fn(&RunOutput) -> u64| {
                    Estimate::of(&runs.iter().map(|r| f(r) as f64).collect::<Vec<_>>())
                };
                RetransmittedTotals {
                    invite: est(&|r| r.retransmitted.invite),
                    r200: est(&|r| r.retransmitted.r200),
                    bye: est(&|r| r.retransmitted.bye),
                }
            },
        }
    }

    /// Pretty JSON, byte-identical for identical runs.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// A libpcap file (nanosecond timestamps, link type RAW: IPv4 or IPv6 packets) of the
/// datagrams of a captured run ([`crate::World::capture`]), each in an IP and UDP header
/// with valid checksums, stamped with its simulated time: Wireshark, tshark or a script
/// reads a simulated run as it reads a capture of the real lab (`dumpcap -i lo`).
pub fn pcap(capture: &[Captured]) -> Vec<u8> {
    let mut f = Vec::with_capacity(24 + capture.iter().map(|c| c.bytes.len() + 64).sum::<usize>());
    f.extend_from_slice(&0xa1b2_3c4d_u32.to_le_bytes()); // nanosecond resolution
    f.extend_from_slice(&2u16.to_le_bytes());
    f.extend_from_slice(&4u16.to_le_bytes());
    f.extend_from_slice(&0i32.to_le_bytes());
    f.extend_from_slice(&0u32.to_le_bytes());
    f.extend_from_slice(&262_144u32.to_le_bytes()); // snapshot length
    f.extend_from_slice(&101u32.to_le_bytes()); // LINKTYPE_RAW
    for c in capture {
        let packet = ip_udp(c);
        let ns = c.at.as_nanos();
        f.extend_from_slice(
            &u32::try_from(ns / 1_000_000_000)
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        f.extend_from_slice(&((ns % 1_000_000_000) as u32).to_le_bytes());
        let len = u32::try_from(packet.len()).unwrap_or(u32::MAX);
        f.extend_from_slice(&len.to_le_bytes());
        f.extend_from_slice(&len.to_le_bytes());
        f.extend_from_slice(&packet);
    }
    f
}

/// The Internet checksum (RFC 1071) of `data` added to `sum`, not yet folded.
fn sum16(mut sum: u32, data: &[u8]) -> u32 {
    for pair in data.chunks(2) {
        let hi = u32::from(pair[0]) << 8;
        let lo = pair.get(1).map_or(0, |b| u32::from(*b));
        sum += hi | lo;
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// `c` as an IP packet with its UDP header (checksums computed; a zero UDP checksum is sent
/// as 0xffff, RFC 768).
fn ip_udp(c: &Captured) -> Vec<u8> {
    use std::net::IpAddr;
    let udp_len = 8 + c.bytes.len();
    let mut udp = Vec::with_capacity(udp_len);
    udp.extend_from_slice(&c.from.port().to_be_bytes());
    udp.extend_from_slice(&c.to.port().to_be_bytes());
    udp.extend_from_slice(&(udp_len.min(0xffff) as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(&c.bytes);
    let pseudo = |src: &[u8], dst: &[u8]| {
        let mut p = sum16(0, src);
        p = sum16(p, dst);
        p + 17 + udp_len as u32
    };
    match (c.from.ip(), c.to.ip()) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let mut ck = fold(sum16(pseudo(&a.octets(), &b.octets()), &udp));
            if ck == 0 {
                ck = 0xffff;
            }
            udp[6..8].copy_from_slice(&ck.to_be_bytes());
            let total = (20 + udp_len).min(0xffff) as u16;
            let mut ip = vec![0x45, 0];
            ip.extend_from_slice(&total.to_be_bytes());
            ip.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
            ip.extend_from_slice(&a.octets());
            ip.extend_from_slice(&b.octets());
            let hk = fold(sum16(0, &ip));
            ip[10..12].copy_from_slice(&hk.to_be_bytes());
            ip.extend_from_slice(&udp);
            ip
        }
        (from, to) => {
            let v6 = |ip: IpAddr| match ip {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            let (a, b) = (v6(from), v6(to));
            let mut ck = fold(sum16(pseudo(&a.octets(), &b.octets()), &udp));
            if ck == 0 {
                ck = 0xffff;
            }
            udp[6..8].copy_from_slice(&ck.to_be_bytes());
            let mut ip = vec![0x60, 0, 0, 0];
            ip.extend_from_slice(&(udp_len.min(0xffff) as u16).to_be_bytes());
            ip.extend_from_slice(&[17, 64]);
            ip.extend_from_slice(&a.octets());
            ip.extend_from_slice(&b.octets());
            ip.extend_from_slice(&udp);
            ip
        }
    }
}

/// `sum_ns / n` in milliseconds (0 when `n` is 0).
fn mean_ms(sum_ns: u64, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        sum_ns as f64 / n as f64 / 1e6
    }
}

/// The PDD distribution of every UAC step of every run as CSV (`pdd_cdf.csv`): `run,
/// population, step, pdd_ms, share` with the share of the step's answered calls whose PDD
/// is at most `pdd_ms`.
pub fn pdd_cdf_csv(runs: &[RunOutput]) -> String {
    let mut s = String::from("run,population,step,pdd_ms,share\n");
    for (i, r) in runs.iter().enumerate() {
        for st in &r.steps {
            for (ms, share) in &st.pdd_cdf {
                s.push_str(&format!(
                    "{i},{},{},{ms:.3},{share:.6}\n",
                    st.population, st.step
                ));
            }
        }
    }
    s
}

/// The user agents' per-second rows of every run as CSV (`agents.csv`): the columns of
/// `holdline load`'s per-second CSV, so a simulated caller or callee compares with a real one
/// row by row.
pub fn agents_csv(runs: &[RunOutput]) -> String {
    let names = holdline_metrics::Counters::NAMES;
    let mut s = format!("run,agent,t_s,active,{}\n", names.join(","));
    for (i, r) in runs.iter().enumerate() {
        for (agent, rows) in &r.agent_series {
            for row in rows {
                let values: Vec<String> = row.counts.values().iter().map(u64::to_string).collect();
                s.push_str(&format!(
                    "{i},{agent},{:.3},{},{}\n",
                    row.t_ms as f64 / 1e3,
                    row.active,
                    values.join(",")
                ));
            }
        }
    }
    s
}

/// The per-second time series of every run as CSV.
pub fn series_csv(runs: &[RunOutput]) -> String {
    let mut s = String::from(
        "run,t_s,server,offered,goodput,completed,calls_ok,r503,pdd_mean_ms,admitted,rejected,queue,invite_queue,queue_drops,busy,occupancy,acceptance,iterations,main_reads,invite_reads\n",
    );
    for (i, r) in runs.iter().enumerate() {
        for row in &r.series {
            push_row(&mut s, i, row);
        }
    }
    s
}

fn push_row(s: &mut String, run: usize, r: &SeriesRow) {
    use std::fmt::Write;
    let opt = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.4}"));
    let _ = writeln!(
        s,
        "{run},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.4},{},{},{},{},{}",
        r.t_s,
        r.server,
        r.offered,
        r.goodput,
        r.completed,
        r.calls_ok,
        r.r503,
        opt(r.pdd_mean_ms),
        r.admitted,
        r.rejected,
        r.queue,
        r.invite_queue,
        r.queue_drops,
        r.busy,
        opt(r.occupancy),
        opt(r.acceptance),
        r.iterations,
        r.main_reads,
        r.invite_reads,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confidence_interval_of_known_samples() {
        let e = Estimate::of(&[1.0, 2.0, 3.0]);
        assert_eq!(e.mean, 2.0);
        // s = 1, n = 3: 4.303 / sqrt(3).
        assert!((e.ci95 - 4.303 / 3f64.sqrt()).abs() < 1e-9);
        assert_eq!(Estimate::of(&[5.0]).ci95, 0.0);
        assert_eq!((e.min, e.max), (1.0, 3.0));
    }

    /// An IPv6 datagram gets a 40-byte header and a UDP checksum over the IPv6 pseudo-header
    /// (mandatory there); an odd-length payload is padded for the sum only.
    #[test]
    fn an_ipv6_datagram_has_a_valid_udp_checksum() {
        let c = Captured {
            at: holdline_base::Instant::ZERO,
            from: "[2001:db8::1]:5060".parse().expect("address"),
            to: "[2001:db8::2]:5070".parse().expect("address"),
            bytes: b"OPTIONS sip:x SIP/2.0\r\n\r\nodd".to_vec(),
        };
        let ip = ip_udp(&c);
        assert_eq!(ip[0] >> 4, 6);
        assert_eq!(ip[6], 17);
        let udp = &ip[40..];
        assert_eq!(usize::from(u16::from_be_bytes([ip[4], ip[5]])), udp.len());
        assert_eq!(u16::from_be_bytes([udp[0], udp[1]]), 5060);
        assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), 5070);
        let pseudo = sum16(sum16(0, &ip[8..40]), &[]) + 17 + udp.len() as u32;
        assert_eq!(
            fold(sum16(pseudo, udp)),
            0,
            "the sum over a valid checksum folds to 0"
        );
        assert_eq!(&udp[8..], c.bytes.as_slice());
    }
}
