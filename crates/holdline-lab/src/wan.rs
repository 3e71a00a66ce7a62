//! Where a lab process runs: on this machine's loopback (every experiment's default) or in
//! one of the two network namespaces of an emulated WAN link (`holdline-netem`), and the link
//! itself.
//!
//! ```text
//!  namespace PREFIX-a (10.203.0.1)          lab process           namespace PREFIX-b (10.203.0.2)
//!  UACs -> SEs ── nt0 ══> holdline-netem Emulator (delay d each way) ══> nt0 ── RE -> UAS
//! ```
//!
//! A process is started in a namespace by a thread that entered it (`setns`): the child
//! inherits the thread's network namespace, and its PID is the program's own (as with
//! [`spawn`]), so it is stopped by PID like every other lab process. The servers' metrics
//! listen on the namespace's own loopback; they are scraped by a thread that entered it.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use holdline_netem::traffic::{Traffic, TrafficConfig};
use holdline_netem::{Clock, DirectionStats, Emulator, EmulatorConfig, Topology, netns};
use holdline_netmodel::LinkConfig;

use crate::error::{LabError, Result};
use crate::runner::{Proc, scrape, spawn};
use crate::server::{Transport, tail, wait_bound};

/// Where a process runs and the address it is reached at.
#[derive(Clone, Debug)]
pub(crate) struct Site {
    /// The network namespace (`None`: this process's own, on loopback).
    ns: Option<String>,
    /// The address its SIP sockets bind and are reached at.
    ip: Ipv4Addr,
}

impl Site {
    /// This machine's loopback, 127.0.0.1: what every experiment uses by default.
    pub(crate) fn loopback() -> Self {
        Self {
            ns: None,
            ip: Ipv4Addr::LOCALHOST,
        }
    }

    /// The address SIP sockets bind here.
    pub(crate) fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    /// The namespace, if not this process's own.
    pub(crate) fn ns(&self) -> Option<&str> {
        self.ns.as_deref()
    }

    /// [`spawn`] here: pinned to `core`, inside the namespace if there is one.
    pub(crate) fn spawn(
        &self,
        core: &str,
        exe: &Path,
        args: &[String],
        log: &Path,
    ) -> Result<Proc> {
        let Some(ns) = &self.ns else {
            return spawn(core, exe, args, log);
        };
        let (core, exe, args, log) = (
            core.to_owned(),
            exe.to_path_buf(),
            args.to_vec(),
            log.to_path_buf(),
        );
        in_ns(ns, move || spawn(&core, &exe, &args, &log))?
    }

    /// Waits (bounded, 15 s) until something listens on this site's `ip:port` for
    /// `transport`, failing early when `child` exits. On loopback: [`wait_bound`] itself.
    pub(crate) fn wait_bound(
        &self,
        child: &mut Child,
        port: u16,
        transport: Transport,
        what: &str,
        log: &Path,
    ) -> Result<()> {
        let Some(ns) = &self.ns else {
            return wait_bound(child, port, Some(transport), what, log);
        };
        let addr = SocketAddr::from((self.ip, port));
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let taken = in_ns(ns, move || match transport {
                Transport::Udp => UdpSocket::bind(addr).is_err(),
                Transport::Tcp | Transport::Tls => TcpListener::bind(addr).is_err(),
            })?;
            if taken {
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(LabError::Process(format!(
                    "{what} exited ({status}) before listening on {addr} in namespace {ns}; log {}:\n{}",
                    log.display(),
                    tail(log)
                )));
            }
            if Instant::now() >= deadline {
                return Err(LabError::Process(format!(
                    "{what} not listening on {addr} in namespace {ns} after 15 s"
                )));
            }
            // Bounded readiness poll of a child process.
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `GET /metrics` of a server here whose metrics listen on 127.0.0.1:`port` (of its
    /// namespace); empty when it does not answer.
    pub(crate) fn scrape(&self, port: u16) -> String {
        match &self.ns {
            None => scrape(port),
            Some(ns) => in_ns(ns, move || scrape(port)).unwrap_or_default(),
        }
    }

    /// Moves the calling thread into this site's namespace (nothing on loopback): for a
    /// thread of its own that scrapes it repeatedly.
    pub(crate) fn enter(&self) -> Result<()> {
        match &self.ns {
            None => Ok(()),
            Some(ns) => netns::enter(ns)
                .map_err(|e| LabError::io(format!("enter network namespace {ns}"), e)),
        }
    }
}

/// Runs `f` on a thread of its own inside network namespace `ns`.
pub(crate) fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    netns::run_in(ns, f).map_err(|e| LabError::Process(format!("network namespace {ns}: {e}")))
}

/// Namespaces created by this process so far (each link gets a prefix of its own).
static LINKS: AtomicU32 = AtomicU32::new(0);

/// An emulated WAN link between two network namespaces it created: side A
/// (`hlw<PID>n<N>-a`, 10.203.0.1) and side B (`-b`, 10.203.0.2), the same one-way delay in
/// each direction, no loss, no rate limit. Dropping it stops the emulator, then deletes the
/// namespaces: drop every process started in them first.
pub(crate) struct Wan {
    /// The one-way delay, ms.
    pub delay_ms: f64,
    /// Side A (the SEs and their UACs).
    pub a: Site,
    /// Side B (the RE and the UAS).
    pub b: Site,
    // Fields drop in order: the emulator's threads stop before the namespaces go.
    emulator: Option<Emulator>,
    topology: Topology,
}

/// What crossed an emulated link, per direction.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WanStats {
    /// A to B (the SEs' requests to the RE).
    pub a_to_b: DirectionStats,
    /// B to A (the RE's responses).
    pub b_to_a: DirectionStats,
}

impl Wan {
    /// Creates the namespaces and starts forwarding with `delay_ms` each way. Needs root.
    pub(crate) fn start(delay_ms: f64) -> Result<Self> {
        let link = LinkConfig {
            delay: Duration::from_micros((delay_ms * 1e3).round() as u64),
            // Whole IP packets cross the TUN devices; nothing to add (no rate limit anyway).
            overhead_bytes: 0,
            ..LinkConfig::default()
        };
        Self::with_link(delay_ms, link, 1)
    }

    /// Like [`start`](Self::start) with `link` each way (loss, queue...: `holdline lab
    /// holb`), its random draws seeded with `seed`; `delay_ms` is `link`'s delay, kept for
    /// the reports.
    pub(crate) fn with_link(delay_ms: f64, link: LinkConfig, seed: u64) -> Result<Self> {
        if !(0.0..=10_000.0).contains(&delay_ms) {
            return Err(LabError::Precondition(format!(
                "a WAN delay of {delay_ms} ms: between 0 and 10,000 ms"
            )));
        }
        let prefix = format!(
            "hlw{}n{}",
            std::process::id(),
            LINKS.fetch_add(1, Ordering::Relaxed)
        );
        let topology = Topology::create(&prefix)
            .map_err(|e| LabError::Process(format!("create the WAN link's namespaces: {e}")))?;
        let emulator = Emulator::start(
            &topology,
            &EmulatorConfig {
                a_to_b: link,
                b_to_a: link,
                seed,
            },
            Clock::start(),
        )
        .map_err(|e| LabError::Process(format!("start the WAN link's emulator: {e}")))?;
        Ok(Self {
            delay_ms,
            a: Site {
                ns: Some(topology.ns_a.clone()),
                ip: topology.addr_a,
            },
            b: Site {
                ns: Some(topology.ns_b.clone()),
                ip: topology.addr_b,
            },
            emulator: Some(emulator),
            topology,
        })
    }

    /// Starts competing traffic across the link (`holdline lab holb`); stop it before the
    /// link is dropped.
    pub(crate) fn traffic(&self, config: &TrafficConfig) -> Result<Traffic> {
        Ok(Traffic::start(&self.topology, config)?)
    }

    /// Sets TCP's congestion control in both namespaces (`net.ipv4.tcp_congestion_control`,
    /// a per-namespace setting whose default is the host's): for the connections opened
    /// afterwards. An error names the ones the kernel has.
    pub(crate) fn set_congestion_control(&self, name: &str) -> Result<()> {
        const PATH: &str = "/proc/sys/net/ipv4/tcp_congestion_control";
        for site in [&self.a, &self.b] {
            let Some(ns) = site.ns() else { continue };
            let value = name.to_owned();
            in_ns(ns, move || std::fs::write(PATH, value))?.map_err(|e| {
                let read = |what: &str| {
                    std::fs::read_to_string(format!("/proc/sys/net/ipv4/tcp_{what}"))
                        .unwrap_or_default()
                        .trim()
                        .to_owned()
                };
                // A namespace other than the host's may only pick the allowed ones.
                LabError::Precondition(format!(
                    "TCP congestion control `{name}` in namespace {ns}: {e} (available: {}; \
                     allowed outside the host's namespace: {}, see \
                     net.ipv4.tcp_allowed_congestion_control)",
                    read("available_congestion_control"),
                    read("allowed_congestion_control")
                ))
            })?;
        }
        Ok(())
    }

    /// TCP's congestion control in side A's namespace (where the SEs open their connections
    /// to the RE), empty if unknown.
    pub(crate) fn congestion_control(&self) -> String {
        let Some(ns) = self.a.ns() else {
            return String::new();
        };
        in_ns(ns, || {
            std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
                .map(|s| s.trim().to_owned())
                .unwrap_or_default()
        })
        .unwrap_or_default()
    }

    /// Stops the emulator; what crossed the link (zeros if already stopped).
    pub(crate) fn stop(&mut self) -> WanStats {
        self.emulator
            .take()
            .map(|e| {
                let (a_to_b, b_to_a) = e.stop();
                WanStats { a_to_b, b_to_a }
            })
            .unwrap_or_default()
    }
}

/// `ss -tin` of the established TCP connections in namespace `ns` to `dst` (run with
/// `ip netns exec`, which waits for it), or empty when it fails.
pub(crate) fn ss_to(ns: &str, dst: Ipv4Addr) -> String {
    Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "ss",
            "-tinH",
            "state",
            "established",
            "dst",
        ])
        .arg(dst.to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// One `ss -ti` connection's figures that tell the SF backlog apart from the link's round
/// trip: its smoothed RTT (ms), congestion window (segments) and bytes not yet sent.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct SsSample {
    /// `rtt:` smoothed RTT, ms.
    pub rtt_ms: f64,
    /// `cwnd:` segments.
    pub cwnd: u64,
    /// `notsent:` bytes written and not sent yet (what `SIOCOUTQNSD` reads); 0 when absent.
    pub notsent: u64,
    /// `unacked:` segments sent and not acknowledged yet; 0 when absent.
    pub unacked: u64,
}

/// The connections in `ss -ti` output (one info line per connection, with `rtt:` in it).
pub(crate) fn parse_ss(text: &str) -> Vec<SsSample> {
    text.lines()
        .filter(|l| l.contains(" rtt:") || l.trim_start().starts_with("rtt:"))
        .map(|l| {
            let mut s = SsSample::default();
            for field in l.split_whitespace() {
                let Some((key, value)) = field.split_once(':') else {
                    continue;
                };
                match key {
                    "rtt" => {
                        s.rtt_ms = value
                            .split('/')
                            .next()
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0.0)
                    }
                    "cwnd" => s.cwnd = value.parse().unwrap_or(0),
                    "notsent" => s.notsent = value.parse().unwrap_or(0),
                    "unacked" => s.unacked = value.parse().unwrap_or(0),
                    _ => {}
                }
            }
            s
        })
        .collect()
}

/// The `ss` samples of one point and where they were written.
#[derive(Debug, Default)]
pub(crate) struct SsLog {
    /// Every connection of every sample.
    pub samples: Vec<SsSample>,
    /// The raw samples, `# t=S` before each.
    pub text: String,
}

impl SsLog {
    /// Adds one sample taken `t` seconds into the point.
    pub(crate) fn push(&mut self, t: f64, raw: &str) {
        self.text.push_str(&format!("# t={t:.1}\n{raw}"));
        self.samples.extend(parse_ss(raw));
    }

    /// Writes the raw samples to `path`.
    pub(crate) fn write(&self, path: &Path) -> Result<()> {
        std::fs::write(path, &self.text)
            .map_err(|e| LabError::io(format!("write {}", path.display()), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ss_lines_give_rtt_cwnd_and_unsent_bytes() {
        let text = "ESTAB 0 0 10.203.0.1:40000 10.203.0.2:5080\n\t cubic wscale:7,7 rto:244 rtt:40.5/0.3 ato:40 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:10 bytes_sent:1200 bytes_acked:1201 segs_out:3 segs_in:2 send 2.9Mbps lastsnd:4 unacked:2 notsent:2048 minrtt:40.1\n";
        let s = parse_ss(text);
        assert_eq!(
            s,
            vec![SsSample {
                rtt_ms: 40.5,
                cwnd: 10,
                notsent: 2048,
                unacked: 2
            }]
        );
        assert!(parse_ss("").is_empty());
        assert_eq!(parse_ss("\t cubic rtt:1/0.5 cwnd:10\n")[0].notsent, 0);
    }

    #[test]
    fn loopback_is_this_namespace_at_127_0_0_1() {
        let s = Site::loopback();
        assert_eq!((s.ns(), s.ip()), (None, Ipv4Addr::LOCALHOST));
        assert!(s.enter().is_ok());
    }
}
