//! Competing traffic across the emulated link (seed 002, Sections VI-B and VI-C): long-lived
//! TCP transfers that always have data to send, and web-like sessions (a session downloads
//! a page of three objects, 85 KB in all, three times, with a think time between
//! downloads), both carrying their data from side A to side B, the SIP traffic's direction.
//!
//! Bounded: every thread stops when [`Traffic::stop`] is called (or the value is dropped);
//! sockets have timeouts so no thread waits on the network for more than a second.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use holdline_base::Rng;

use crate::emulator::Topology;
use crate::error::{NetemError, Result};
use crate::netns;

/// The port the bulk sink listens on in namespace B.
pub const BULK_PORT: u16 = 9_081;
/// The port the web server listens on in namespace A.
pub const WEB_PORT: u16 = 9_080;

/// What competes with the SIP traffic.
#[derive(Clone, Debug)]
pub struct TrafficConfig {
    /// Long-lived TCP connections, each writing as fast as the link lets it.
    pub long_lived: u32,
    /// New web sessions per second (Poisson arrivals); 0 for none.
    pub web_sessions_per_s: f64,
    /// Downloads per web session.
    pub web_downloads: u32,
    /// Think time between a session's downloads.
    pub web_think: Duration,
    /// The objects of a page, bytes each (seed 002: an HTML file and two pictures, 85 KB).
    pub web_objects: Vec<usize>,
    /// Seed of the session arrivals.
    pub seed: u64,
}

impl Default for TrafficConfig {
    fn default() -> Self {
        Self {
            long_lived: 0,
            web_sessions_per_s: 0.0,
            web_downloads: 3,
            web_think: Duration::from_secs(10),
            web_objects: vec![15_000, 35_000, 35_000],
            seed: 1,
        }
    }
}

/// Counters of the competing traffic.
#[derive(Debug, Default)]
struct Counters {
    bulk_bytes: AtomicU64,
    bulk_connections: AtomicU64,
    web_sessions: AtomicU64,
    web_objects: AtomicU64,
    web_bytes: AtomicU64,
    web_failures: AtomicU64,
}

/// A snapshot of the competing traffic's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrafficStats {
    /// Bytes the bulk sink received.
    pub bulk_bytes: u64,
    /// Bulk connections established.
    pub bulk_connections: u64,
    /// Web sessions started.
    pub web_sessions: u64,
    /// Web objects downloaded whole.
    pub web_objects: u64,
    /// Web bytes received.
    pub web_bytes: u64,
    /// Downloads that failed (connect or read error, or cut short by the stop).
    pub web_failures: u64,
}

/// Running competing traffic.
pub struct Traffic {
    stop: Arc<AtomicBool>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
    counters: Arc<Counters>,
}

/// Socket timeouts: the longest a thread waits before looking at the stop flag.
const TICK: Duration = Duration::from_secs(1);

impl Traffic {
    /// Starts the sink and web server, the long-lived senders and the web-session
    /// arrivals.
    pub fn start(topology: &Topology, config: &TrafficConfig) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let threads = Arc::new(Mutex::new(Vec::new()));
        let t = Self {
            stop,
            threads,
            counters,
        };
        let bulk_addr = SocketAddr::from((topology.addr_b, BULK_PORT));
        let web_addr = SocketAddr::from((topology.addr_a, WEB_PORT));
        if config.long_lived > 0 {
            let sink = netns::run_in(&topology.ns_b, move || TcpListener::bind(bulk_addr))?
                .map_err(|e| NetemError::io(format!("bind the bulk sink {bulk_addr}"), e))?;
            t.spawn_sink(sink)?;
            for _ in 0..config.long_lived {
                t.spawn_bulk_sender(&topology.ns_a, bulk_addr)?;
            }
        }
        if config.web_sessions_per_s > 0.0 {
            let server = netns::run_in(&topology.ns_a, move || TcpListener::bind(web_addr))?
                .map_err(|e| NetemError::io(format!("bind the web server {web_addr}"), e))?;
            t.spawn_web_server(server)?;
            t.spawn_web_arrivals(&topology.ns_b, web_addr, config.clone())?;
        }
        Ok(t)
    }

    /// The counters so far.
    pub fn stats(&self) -> TrafficStats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let c = &self.counters;
        TrafficStats {
            bulk_bytes: g(&c.bulk_bytes),
            bulk_connections: g(&c.bulk_connections),
            web_sessions: g(&c.web_sessions),
            web_objects: g(&c.web_objects),
            web_bytes: g(&c.web_bytes),
            web_failures: g(&c.web_failures),
        }
    }

    /// Stops every thread (bounded by the socket timeouts) and returns the counters.
    pub fn stop(mut self) -> TrafficStats {
        self.halt();
        self.stats()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        loop {
            let batch: Vec<JoinHandle<()>> = match self.threads.lock() {
                Ok(mut v) => v.drain(..).collect(),
                Err(p) => p.into_inner().drain(..).collect(),
            };
            if batch.is_empty() {
                break;
            }
            for h in batch {
                let _ = h.join();
            }
        }
    }

    fn spawn(&self, name: &str, f: impl FnOnce() + Send + 'static) -> Result<()> {
        spawn_into(&self.threads, name, f)
    }

    fn spawn_sink(&self, listener: TcpListener) -> Result<()> {
        let (stop, c, threads) = (
            Arc::clone(&self.stop),
            Arc::clone(&self.counters),
            Arc::clone(&self.threads),
        );
        self.spawn("traffic-sink", move || {
            accept_loop(&listener, &stop, |mut s| {
                let _ = s.set_read_timeout(Some(TICK));
                c.bulk_connections.fetch_add(1, Ordering::Relaxed);
                let (stop, c) = (Arc::clone(&stop), Arc::clone(&c));
                let _ = spawn_into(&threads, "traffic-sink-conn", move || {
                    let mut buf = vec![0u8; 65_536];
                    while !stop.load(Ordering::Relaxed) {
                        match s.read(&mut buf) {
                            Ok(0) => break,
                            Ok(n) => {
                                c.bulk_bytes.fetch_add(n as u64, Ordering::Relaxed);
                            }
                            Err(e) if is_timeout(&e) => {}
                            Err(_) => break,
                        }
                    }
                });
            });
        })
    }

    fn spawn_bulk_sender(&self, ns: &str, to: SocketAddr) -> Result<()> {
        let (stop, ns) = (Arc::clone(&self.stop), ns.to_owned());
        self.spawn("traffic-bulk", move || {
            if netns::enter(&ns).is_err() {
                return;
            }
            let Ok(mut s) = TcpStream::connect_timeout(&to, Duration::from_secs(5)) else {
                return;
            };
            let _ = s.set_write_timeout(Some(TICK));
            let chunk = vec![0x5au8; 65_536];
            while !stop.load(Ordering::Relaxed) {
                match s.write(&chunk) {
                    Ok(_) => {}
                    Err(e) if is_timeout(&e) => {}
                    Err(_) => break,
                }
            }
            let _ = s.shutdown(Shutdown::Both);
        })
    }

    fn spawn_web_server(&self, listener: TcpListener) -> Result<()> {
        let (stop, threads) = (Arc::clone(&self.stop), Arc::clone(&self.threads));
        self.spawn("traffic-web", move || {
            accept_loop(&listener, &stop, |mut s| {
                let _ = s.set_read_timeout(Some(TICK));
                let _ = s.set_write_timeout(Some(TICK));
                let stop = Arc::clone(&stop);
                let _ = spawn_into(&threads, "traffic-web-conn", move || {
                    serve_object(&mut s, &stop);
                });
            });
        })
    }

    fn spawn_web_arrivals(&self, ns: &str, server: SocketAddr, cfg: TrafficConfig) -> Result<()> {
        let (stop, c, threads, ns) = (
            Arc::clone(&self.stop),
            Arc::clone(&self.counters),
            Arc::clone(&self.threads),
            ns.to_owned(),
        );
        self.spawn("traffic-web-arrivals", move || {
            let mut rng = Rng::seed_from_u64(cfg.seed);
            while !stop.load(Ordering::Relaxed) {
                let gap = Duration::from_secs_f64(rng.exp(1.0 / cfg.web_sessions_per_s));
                if !sleep_unless_stopped(gap, &stop) {
                    break;
                }
                c.web_sessions.fetch_add(1, Ordering::Relaxed);
                let (stop, c, ns, cfg) =
                    (Arc::clone(&stop), Arc::clone(&c), ns.clone(), cfg.clone());
                let _ = spawn_into(&threads, "traffic-web-session", move || {
                    if netns::enter(&ns).is_err() {
                        return;
                    }
                    for d in 0..cfg.web_downloads {
                        if d > 0 && !sleep_unless_stopped(cfg.web_think, &stop) {
                            return;
                        }
                        for &size in &cfg.web_objects {
                            match download(server, size, &stop) {
                                Some(n) => {
                                    c.web_objects.fetch_add(1, Ordering::Relaxed);
                                    c.web_bytes.fetch_add(n, Ordering::Relaxed);
                                }
                                None => {
                                    c.web_failures.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                    }
                });
            }
        })
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.halt();
    }
}

fn spawn_into(
    threads: &Mutex<Vec<JoinHandle<()>>>,
    name: &str,
    f: impl FnOnce() + Send + 'static,
) -> Result<()> {
    let h = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(f)
        .map_err(|e| NetemError::io(format!("start thread {name}"), e))?;
    match threads.lock() {
        Ok(mut v) => v.push(h),
        Err(p) => p.into_inner().push(h),
    }
    Ok(())
}

/// Accepts connections on `listener` until `stop` (looking at it every 20 ms), handing each
/// to `on` in blocking mode; ends at the first error other than "nothing to accept".
fn accept_loop(listener: &TcpListener, stop: &AtomicBool, mut on: impl FnMut(TcpStream)) {
    let _ = listener.set_nonblocking(true);
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((s, _)) => {
                let _ = s.set_nonblocking(false);
                on(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(_) => break,
        }
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Sleeps `d` in ticks of at most 100 ms; false when stopped meanwhile.
fn sleep_unless_stopped(d: Duration, stop: &AtomicBool) -> bool {
    let end = std::time::Instant::now() + d;
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
}

/// The web server's side of one download: reads the request (the object's size as 8
/// bytes), writes that many bytes, closes.
fn serve_object(s: &mut TcpStream, stop: &AtomicBool) {
    let mut req = [0u8; 8];
    if s.read_exact(&mut req).is_err() {
        return;
    }
    let mut left = u64::from_be_bytes(req).min(10_000_000) as usize;
    let chunk = [0xa5u8; 16_384];
    while left > 0 && !stop.load(Ordering::Relaxed) {
        match s.write(&chunk[..left.min(chunk.len())]) {
            Ok(n) => left -= n,
            Err(e) if is_timeout(&e) => {}
            Err(_) => return,
        }
    }
    let _ = s.shutdown(Shutdown::Write);
}

/// One object downloaded whole: its byte count, or `None`.
fn download(server: SocketAddr, size: usize, stop: &AtomicBool) -> Option<u64> {
    let mut s = TcpStream::connect_timeout(&server, Duration::from_secs(5)).ok()?;
    s.set_read_timeout(Some(TICK)).ok()?;
    s.write_all(&(size as u64).to_be_bytes()).ok()?;
    let mut buf = vec![0u8; 16_384];
    let mut got = 0usize;
    while !stop.load(Ordering::Relaxed) {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if is_timeout(&e) => {}
            Err(_) => return None,
        }
    }
    (got == size).then_some(got as u64)
}
