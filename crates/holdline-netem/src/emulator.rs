//! The forwarding loop: per direction, one thread reads packets from the sending side's TUN
//! device and asks the direction's [`Link`] what becomes of each; a second thread writes the
//! delivered packets into the other side's device when their time comes.
//!
//! ```text
//!  namespace A                      holdline netem                        namespace B
//!  10.203.0.1 ─ nt0 ══ read ─> Link a->b (queue, loss, delay) ─> heap ─> write ══ nt0 ─ 10.203.0.2
//!             nt0 ══ write <─ heap <─ Link b->a (queue, loss, delay) <─ read ══ nt0
//! ```
//!
//! Time: `holdline_base::Instant` counts nanoseconds from the emulator's start
//! ([`Clock`]); the link is given the instant each packet was read.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use holdline_base::{Instant, Rng};
use holdline_netmodel::{Fate, Link, LinkConfig};

use crate::error::{NetemError, Result};
use crate::netns::{self, Netns};
use crate::tun::Tun;

/// The most packets held for later delivery per direction; beyond it a packet is dropped
/// and counted (`overflow`), so the emulator's memory stays bounded whatever the link.
pub const MAX_HELD: usize = 200_000;

/// The largest packet read (TUN MTU is 1,500 by default; GSO is not enabled).
const MAX_PACKET: usize = 65_536;

/// How often the threads look at the stop flag when idle.
const IDLE: Duration = Duration::from_millis(50);

/// The emulator's clock: nanoseconds since its start, as the link models expect.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    epoch: std::time::Instant,
}

impl Clock {
    /// A clock whose zero is now.
    pub fn start() -> Self {
        Self {
            epoch: std::time::Instant::now(),
        }
    }

    /// A clock whose zero is `epoch` (to share one time base with a measurement).
    pub fn from_epoch(epoch: std::time::Instant) -> Self {
        Self { epoch }
    }

    /// Now, on this clock.
    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    /// The operating system's instant of `at`.
    pub fn to_std(&self, at: Instant) -> std::time::Instant {
        self.epoch + Duration::from_nanos(at.as_nanos())
    }
}

/// Two network namespaces, each with a TUN device `nt0` holding one address and a route to
/// the other's address through the device.
#[derive(Debug)]
pub struct Topology {
    /// Namespace of side A.
    pub ns_a: String,
    /// Namespace of side B.
    pub ns_b: String,
    /// Side A's address.
    pub addr_a: Ipv4Addr,
    /// Side B's address.
    pub addr_b: Ipv4Addr,
    tun_a: Arc<Tun>,
    tun_b: Arc<Tun>,
    /// Deletes the namespaces this topology created (none when attached to existing ones).
    _netns: Netns,
}

/// The TUN device's name inside each namespace.
pub const DEVICE: &str = "nt0";

/// Side A's default address.
pub const ADDR_A: Ipv4Addr = Ipv4Addr::new(10, 203, 0, 1);
/// Side B's default address.
pub const ADDR_B: Ipv4Addr = Ipv4Addr::new(10, 203, 0, 2);

impl Topology {
    /// Creates namespaces `PREFIX-a` and `PREFIX-b` with the default addresses; they are
    /// deleted when the topology is dropped.
    pub fn create(prefix: &str) -> Result<Self> {
        if !netns::is_root() {
            return Err(NetemError::NotRoot);
        }
        let mut guard = Netns::new();
        let ns_a = format!("{prefix}-a");
        let ns_b = format!("{prefix}-b");
        guard.add(&ns_a)?;
        guard.add(&ns_b)?;
        Self::build(ns_a, ns_b, ADDR_A, ADDR_B, guard)
    }

    /// Joins two existing namespaces (left in place when dropped; their `nt0` devices go
    /// when the emulator's descriptors close).
    pub fn attach(ns_a: &str, ns_b: &str, addr_a: Ipv4Addr, addr_b: Ipv4Addr) -> Result<Self> {
        if !netns::is_root() {
            return Err(NetemError::NotRoot);
        }
        Self::build(
            ns_a.to_owned(),
            ns_b.to_owned(),
            addr_a,
            addr_b,
            Netns::new(),
        )
    }

    fn build(
        ns_a: String,
        ns_b: String,
        addr_a: Ipv4Addr,
        addr_b: Ipv4Addr,
        guard: Netns,
    ) -> Result<Self> {
        let tun_a = side(&ns_a, addr_a, addr_b)?;
        let tun_b = side(&ns_b, addr_b, addr_a)?;
        Ok(Self {
            ns_a,
            ns_b,
            addr_a,
            addr_b,
            tun_a: Arc::new(tun_a),
            tun_b: Arc::new(tun_b),
            _netns: guard,
        })
    }
}

/// Packets the kernel queues for the emulator's reader per device.
const DEVICE_QUEUE: u32 = 10_000;

/// Creates `nt0` in `ns` with `local`, a route to `peer` through it, and brings it up.
fn side(ns: &str, local: Ipv4Addr, peer: Ipv4Addr) -> Result<Tun> {
    // No IPv6 on the device: its router solicitations and MLD reports would cross the
    // link too and take draws from its loss model.
    netns::run_in(ns, || {
        std::fs::write("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1")
    })?
    .map_err(|e| NetemError::io(format!("{ns}: net.ipv6.conf.default.disable_ipv6 = 1"), e))?;
    let tun = netns::run_in(ns, || Tun::create(DEVICE))?
        .map_err(|e| NetemError::io(format!("create TUN device {DEVICE} in {ns}"), e))?;
    let local = local.to_string();
    let peer = peer.to_string();
    netns::ip(&[
        "-n", ns, "addr", "add", &local, "peer", &peer, "dev", DEVICE,
    ])?;
    // The kernel's queue into the emulator (500 packets by default) only fills when the
    // reader is descheduled; the link's queue is the emulator's own model, so this one must
    // never be the one that drops (a second of a busy link).
    netns::ip(&[
        "-n",
        ns,
        "link",
        "set",
        DEVICE,
        "txqueuelen",
        &DEVICE_QUEUE.to_string(),
        "up",
    ])?;
    Ok(tun)
}

/// One direction's counters, updated by its threads.
#[derive(Debug, Default)]
struct Counters {
    offered: AtomicU64,
    lost: AtomicU64,
    queue_drops: AtomicU64,
    random_drops: AtomicU64,
    overflow: AtomicU64,
    delivered: AtomicU64,
    delivered_bytes: AtomicU64,
    write_errors: AtomicU64,
    late_sum_ns: AtomicU64,
    late_max_ns: AtomicU64,
    late_over_1ms: AtomicU64,
    cpu_ns: AtomicU64,
}

/// A snapshot of one direction's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectionStats {
    /// Packets read from the sending side.
    pub offered: u64,
    /// Lost on the wire (the link's loss model).
    pub lost: u64,
    /// Dropped at a full queue (tail drop).
    pub queue_drops: u64,
    /// Dropped early by derivative random drop.
    pub random_drops: u64,
    /// Dropped because [`MAX_HELD`] packets were already waiting.
    pub overflow: u64,
    /// Written to the receiving side.
    pub delivered: u64,
    /// Bytes (IP packets) written to the receiving side.
    pub delivered_bytes: u64,
    /// Writes the kernel refused.
    pub write_errors: u64,
    /// Sum over delivered packets of how late each was written after its instant, ns.
    pub late_sum_ns: u64,
    /// The latest write, ns after its instant.
    pub late_max_ns: u64,
    /// Packets written more than 1 ms after their instant.
    pub late_over_1ms: u64,
    /// CPU time of the direction's two threads, ns (known once the emulator stopped).
    pub cpu_ns: u64,
}

impl DirectionStats {
    /// Mean lateness of a write, µs (the emulator's own overhead on top of the link).
    pub fn late_mean_us(&self) -> f64 {
        if self.delivered == 0 {
            0.0
        } else {
            self.late_sum_ns as f64 / self.delivered as f64 / 1e3
        }
    }
}

impl Counters {
    fn snapshot(&self) -> DirectionStats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DirectionStats {
            offered: g(&self.offered),
            lost: g(&self.lost),
            queue_drops: g(&self.queue_drops),
            random_drops: g(&self.random_drops),
            overflow: g(&self.overflow),
            delivered: g(&self.delivered),
            delivered_bytes: g(&self.delivered_bytes),
            write_errors: g(&self.write_errors),
            late_sum_ns: g(&self.late_sum_ns),
            late_max_ns: g(&self.late_max_ns),
            late_over_1ms: g(&self.late_over_1ms),
            cpu_ns: g(&self.cpu_ns),
        }
    }
}

/// Packets waiting for their delivery instant, earliest first (ties in arrival order).
#[derive(Default)]
struct Held {
    heap: BinaryHeap<Reverse<(u64, u64, Vec<u8>)>>,
    seq: u64,
}

/// What the reader and writer of one direction share.
struct Shared {
    held: Mutex<Held>,
    ready: Condvar,
    counters: Counters,
}

/// The links of both directions and the seed of their randomness.
#[derive(Clone, Copy, Debug)]
pub struct EmulatorConfig {
    /// Link from A to B.
    pub a_to_b: LinkConfig,
    /// Link from B to A.
    pub b_to_a: LinkConfig,
    /// Seed of the links' random draws (A→B uses it, B→A the next value).
    pub seed: u64,
}

/// A running emulator. Dropping it stops its threads.
pub struct Emulator {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    ab: Arc<Shared>,
    ba: Arc<Shared>,
    clock: Clock,
}

impl Emulator {
    /// Starts forwarding between the topology's two devices.
    pub fn start(topology: &Topology, config: &EmulatorConfig, clock: Clock) -> Result<Self> {
        let link_ab =
            Link::new(config.a_to_b, Rng::seed_from_u64(config.seed)).map_err(|source| {
                NetemError::Link {
                    direction: "a->b",
                    source,
                }
            })?;
        let link_ba = Link::new(
            config.b_to_a,
            Rng::seed_from_u64(config.seed.wrapping_add(1)),
        )
        .map_err(|source| NetemError::Link {
            direction: "b->a",
            source,
        })?;
        let stop = Arc::new(AtomicBool::new(false));
        let new_shared = || {
            Arc::new(Shared {
                held: Mutex::new(Held::default()),
                ready: Condvar::new(),
                counters: Counters::default(),
            })
        };
        let (ab, ba) = (new_shared(), new_shared());
        let mut threads = Vec::with_capacity(4);
        for (name, link, from, to, shared) in [
            ("ab", link_ab, &topology.tun_a, &topology.tun_b, &ab),
            ("ba", link_ba, &topology.tun_b, &topology.tun_a, &ba),
        ] {
            let (from, sh, st) = (Arc::clone(from), Arc::clone(shared), Arc::clone(&stop));
            threads.push(
                std::thread::Builder::new()
                    .name(format!("netem-read-{name}"))
                    .spawn(move || reader(&from, link, &sh, &st, clock))
                    .map_err(|e| NetemError::io("start a netem thread", e))?,
            );
            let (to, sh, st) = (Arc::clone(to), Arc::clone(shared), Arc::clone(&stop));
            threads.push(
                std::thread::Builder::new()
                    .name(format!("netem-write-{name}"))
                    .spawn(move || writer(&to, &sh, &st, clock))
                    .map_err(|e| NetemError::io("start a netem thread", e))?,
            );
        }
        Ok(Self {
            stop,
            threads,
            ab,
            ba,
            clock,
        })
    }

    /// The counters of A→B and B→A.
    pub fn stats(&self) -> (DirectionStats, DirectionStats) {
        (self.ab.counters.snapshot(), self.ba.counters.snapshot())
    }

    /// The emulator's clock.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Stops the threads (packets still held are discarded) and returns the final counters.
    pub fn stop(mut self) -> (DirectionStats, DirectionStats) {
        self.halt();
        self.stats()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for s in [&self.ab, &self.ba] {
            s.ready.notify_all();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.halt();
    }
}

fn reader(from: &Tun, mut link: Link, shared: &Shared, stop: &AtomicBool, clock: Clock) {
    let c = &shared.counters;
    let mut buf = vec![0u8; MAX_PACKET];
    while !stop.load(Ordering::Relaxed) {
        let n = match from.recv(&mut buf, IDLE) {
            Ok(Some(n)) if n > 0 => n,
            Ok(_) => continue,
            // The device went away (its namespace was deleted): nothing more to read.
            Err(_) => break,
        };
        let now = clock.now();
        c.offered.fetch_add(1, Ordering::Relaxed);
        match link.send(now, n) {
            Fate::Deliver(at) => {
                let mut held = lock(&shared.held);
                if held.heap.len() >= MAX_HELD {
                    c.overflow.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                held.seq += 1;
                let seq = held.seq;
                held.heap
                    .push(Reverse((at.as_nanos(), seq, buf[..n].to_vec())));
                drop(held);
                shared.ready.notify_one();
            }
            Fate::Lost => {
                c.lost.fetch_add(1, Ordering::Relaxed);
            }
            Fate::QueueFull => {
                c.queue_drops.fetch_add(1, Ordering::Relaxed);
            }
            Fate::RandomDrop => {
                c.random_drops.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    c.cpu_ns.fetch_add(thread_cpu_ns(), Ordering::Relaxed);
}

fn writer(to: &Tun, shared: &Shared, stop: &AtomicBool, clock: Clock) {
    fine_timer_slack();
    let c = &shared.counters;
    let mut held = lock(&shared.held);
    while !stop.load(Ordering::Relaxed) {
        let next = held.heap.peek().map(|Reverse((at, _, _))| *at);
        let now = clock.now().as_nanos();
        match next {
            None => {
                held = wait(&shared.ready, held, IDLE);
            }
            Some(at) if at > now => {
                held = wait(
                    &shared.ready,
                    held,
                    Duration::from_nanos(at - now).min(IDLE),
                );
            }
            Some(_) => {
                let Some(Reverse((at, _, packet))) = held.heap.pop() else {
                    continue;
                };
                drop(held);
                let late = clock.now().as_nanos().saturating_sub(at);
                match to.send(&packet) {
                    Ok(()) => {
                        c.delivered.fetch_add(1, Ordering::Relaxed);
                        c.delivered_bytes
                            .fetch_add(packet.len() as u64, Ordering::Relaxed);
                        c.late_sum_ns.fetch_add(late, Ordering::Relaxed);
                        c.late_max_ns.fetch_max(late, Ordering::Relaxed);
                        if late > 1_000_000 {
                            c.late_over_1ms.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(_) => {
                        c.write_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                held = lock(&shared.held);
            }
        }
    }
    c.cpu_ns.fetch_add(thread_cpu_ns(), Ordering::Relaxed);
}

fn lock(m: &Mutex<Held>) -> std::sync::MutexGuard<'_, Held> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn wait<'a>(
    cv: &Condvar,
    guard: std::sync::MutexGuard<'a, Held>,
    d: Duration,
) -> std::sync::MutexGuard<'a, Held> {
    match cv.wait_timeout(guard, d) {
        Ok((g, _)) => g,
        Err(p) => p.into_inner().0,
    }
}

/// The calling thread's CPU time so far, ns.
#[allow(unsafe_code)]
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Asks the kernel to wake this thread within 1 µs of its timeouts rather than the default
/// 50 µs of slack (a delivery instant is a timeout).
#[allow(unsafe_code)]
fn fine_timer_slack() {
    // SAFETY: prctl(PR_SET_TIMERSLACK, ns) only sets the calling thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong, 0, 0, 0);
    }
}
