//! Five of seed 001's six server architectures (§6) as small UDP proxies around holdline's
//! own `Endpoint`; the sixth is `holdline serve` itself.
//!
//! Every driver does the same work per message: read a datagram, hand it to an `Endpoint`
//! (`handle`), fire that endpoint's due timers, collect what it wants sent while it is still
//! held, send it after letting go of it, and spin for the emulated cost (if any). They
//! differ only in who reads, who handles and what is locked:
//!
//! ```text
//! event                    1 thread: poll(2) + recvfrom + handle + sendto, one Endpoint, no lock
//! thread-per-message       listener thread spawns a thread per datagram; one Endpoint in a Mutex
//! pool-thread-per-message  listener thread -> bounded channel -> N threads; one Endpoint in a Mutex
//! thread-pool              N threads all recvfrom the socket; 100 Endpoints, a Mutex each,
//!                          chosen by hash of the Call-ID (the paper's 100 sets)
//! process-pool             N processes, each an `event` loop on its own SO_REUSEPORT socket
//!                          of the shared port, plus a private port for its Via and Record-Route
//! ```
//!
//! Timers: a set's due timers fire after every message handled in it, and every [`TICK`]
//! whichever thread wakes first sweeps every set (a reader waits at most one tick).

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use holdline_base::{Instant, Peer, Transport};
use holdline_proto::{
    Endpoint, ListenAddr, LocationStore, MemoryLocationStore, ProxyConfig, ProxyMode, StaticRoute,
};
use socket2::{Domain, Protocol, Socket, Type};

use crate::error::{LabError, Result};

/// The paper's lock striping: the thread pool's state is split into this many sets.
pub(crate) const SETS: usize = 100;
/// The longest a thread waits for input before it looks at the timers (and the stop flag).
pub(crate) const TICK: Duration = Duration::from_millis(5);
/// Live per-message threads at most (thread-per-message): a datagram beyond is dropped.
pub(crate) const MAX_THREADS: usize = 1000;
/// The pool-thread-per-message hand-off queue's bound: a datagram beyond is dropped.
pub(crate) const QUEUE: usize = 8192;
/// Receive and send buffer asked of every socket (the same 8 MiB `holdline bench` gives
/// `holdline serve`; the kernel caps it at `net.core.rmem_max`).
pub(crate) const SOCKET_BUFFER: usize = 8 << 20;
/// Datagrams one event loop reads from one socket before it looks at the others.
const BATCH: usize = 64;
/// Largest datagram read.
const MAX_DATAGRAM: usize = 65_535;
/// The domain the proxies serve (as `holdline bench`'s servers).
pub(crate) const DOMAIN: &str = crate::server::DOMAIN;

/// One of the six architectures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Driver {
    /// One thread, one event loop, no locks.
    Event,
    /// A listener thread that spawns a thread per message.
    ThreadPerMessage,
    /// A listener thread handing messages to a fixed pool (sipd's original architecture).
    PoolThreadPerMessage,
    /// A pool of threads that all read the socket, the state in 100 locked sets.
    ThreadPool,
    /// A pool of processes on one port by `SO_REUSEPORT` (SER's architecture).
    ProcessPool,
    /// `holdline serve`: a thread per core, messages handed to their Call-ID's owner.
    Holdline,
}

impl Driver {
    /// All six, in the paper's order with holdline's last.
    pub(crate) const ALL: [Self; 6] = [
        Self::Event,
        Self::ThreadPerMessage,
        Self::PoolThreadPerMessage,
        Self::ThreadPool,
        Self::ProcessPool,
        Self::Holdline,
    ];

    /// The name on the command line and in the result files.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Event => "event",
            Self::ThreadPerMessage => "thread-per-message",
            Self::PoolThreadPerMessage => "pool-thread-per-message",
            Self::ThreadPool => "thread-pool",
            Self::ProcessPool => "process-pool",
            Self::Holdline => "holdline",
        }
    }

    /// The driver named `s`.
    pub(crate) fn parse(s: &str) -> std::result::Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|d| d.name() == s.trim())
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|d| d.name()).collect();
                format!(
                    "unknown driver `{s}` (expected one of {})",
                    names.join(", ")
                )
            })
    }
}

/// What every driver is given.
#[derive(Clone, Debug)]
pub(crate) struct Spec {
    /// Transaction-stateful proxy (else stateless: `mode = "stateless"` and a stateless route).
    pub stateful: bool,
    /// The next hop of every call (the static route `*`).
    pub uas: SocketAddr,
    /// Threads of a pool (pool-thread-per-message, thread-pool).
    pub pool: usize,
    /// Emulated CPU work per message: the handling of a message lasts at least this long
    /// (`holdline serve --emulate-cost-us`'s rule), spun after the lock is let go.
    pub cost: Duration,
}

/// The proxy configuration of one endpoint: listening on `listen` (the first is the address
/// its Via and Record-Route name), the domain of `holdline bench`, the static route `*` to
/// the UAS, stateless or stateful as `spec` says, branches drawn from `seed`.
pub(crate) fn proxy_config(listen: &[SocketAddr], spec: &Spec, seed: u64) -> ProxyConfig {
    let mut p = ProxyConfig::default();
    p.domains = vec![DOMAIN.to_owned()];
    p.listen = listen
        .iter()
        .map(|&addr| ListenAddr {
            transport: Transport::Udp,
            addr,
        })
        .collect();
    p.static_routes = vec![StaticRoute {
        domain: "*".into(),
        next_hop: spec.uas,
        transport: Transport::Udp,
        stateless: !spec.stateful,
        edge: None,
    }];
    p.mode = if spec.stateful {
        ProxyMode::Stateful
    } else {
        ProxyMode::Stateless
    };
    p.branch_seed = seed;
    p.gate_key = 0x5e5e_d001;
    p
}

/// The drivers' clock: `holdline_base::Instant` counted from the driver's start.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock(std::time::Instant);

impl Clock {
    /// A clock starting now.
    pub(crate) fn new() -> Self {
        Self(std::time::Instant::now())
    }

    /// Now, for the endpoints.
    pub(crate) fn now(self) -> Instant {
        Instant::from_nanos(u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}

/// Locks `m`, also when a thread panicked while holding it (its endpoint is still usable
/// for a measurement; the panic is reported by that thread).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What one thread sends: collected while the endpoint is held, sent after it is let go.
#[derive(Default)]
pub(crate) struct Outbox {
    buf: Vec<u8>,
    items: Vec<(SocketAddr, std::ops::Range<usize>)>,
}

impl Outbox {
    /// Takes everything `ep` wants sent (and drops its events, which no driver uses).
    fn collect(&mut self, ep: &mut Endpoint, now: Instant) {
        loop {
            let start = self.buf.len();
            let Some(t) = ep.poll_transmit(now, &mut self.buf) else {
                self.buf.truncate(start);
                break;
            };
            self.buf.truncate(start + t.size);
            self.items.push((t.destination.addr, start..start + t.size));
        }
        while ep.poll_event().is_some() {}
    }

    /// Sends what was collected over `sock` (a datagram the kernel refuses is lost, as it
    /// is for `holdline serve`).
    fn flush(&mut self, sock: &UdpSocket) {
        for (to, range) in self.items.drain(..) {
            if let Some(bytes) = self.buf.get(range) {
                let _ = sock.send_to(bytes, to);
            }
        }
        self.buf.clear();
    }
}

/// The per-message work every driver does while it holds the endpoint.
fn on_message(ep: &mut Endpoint, now: Instant, bytes: &[u8], from: SocketAddr, out: &mut Outbox) {
    let peer = Peer {
        addr: from,
        transport: Transport::Udp,
        conn: None,
    };
    ep.handle(now, bytes, peer, Transport::Udp);
    on_timers(ep, now, out);
}

/// Fires `ep`'s due timers and collects what it wants sent.
fn on_timers(ep: &mut Endpoint, now: Instant, out: &mut Outbox) {
    if ep.poll_timeout().is_some_and(|t| t <= now) {
        ep.handle_timeout(now);
    }
    out.collect(ep, now);
}

/// Spins until `cost` has passed since `start` (real CPU work, as `--emulate-cost-us`).
fn burn(start: std::time::Instant, cost: Duration) {
    if cost.is_zero() {
        return;
    }
    while start.elapsed() < cost {
        std::hint::spin_loop();
    }
}

/// A UDP socket bound to `addr` with the drivers' buffers; `reuseport` lets the members of a
/// process pool bind the same port.
pub(crate) fn udp_socket(addr: SocketAddr, reuseport: bool) -> Result<UdpSocket> {
    let what = |e: std::io::Error| LabError::io(format!("UDP socket on {addr}"), e);
    let s =
        Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP)).map_err(what)?;
    if reuseport {
        s.set_reuse_port(true).map_err(what)?;
    }
    // Best effort: the kernel caps both at its maxima.
    let _ = s.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = s.set_send_buffer_size(SOCKET_BUFFER);
    s.bind(&addr.into()).map_err(what)?;
    Ok(s.into())
}

/// A running driver: its threads stop (and are joined) when it is stopped or dropped.
pub(crate) struct Running {
    /// The address it takes calls on.
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Live per-message threads (thread-per-message), waited for at the stop.
    live: Arc<AtomicUsize>,
    /// Datagrams dropped because a bound was hit (threads, hand-off queue).
    pub drops: Arc<AtomicU64>,
}

impl Running {
    fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
            live: Arc::new(AtomicUsize::new(0)),
            drops: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Spawns a named thread of this driver.
    fn spawn(&mut self, name: &str, f: impl FnOnce() + Send + 'static) -> Result<()> {
        let h = std::thread::Builder::new()
            .name(name.into())
            .spawn(f)
            .map_err(|e| LabError::io(format!("spawn thread {name}"), e))?;
        self.threads.push(h);
        Ok(())
    }

    /// Stops every thread: each sees the flag within a tick; per-message threads are waited
    /// for at most two seconds.
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while self.live.load(Ordering::Acquire) > 0 && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts `driver` (one of the five of this module; [`Driver::ProcessPool`] here is one
/// member of the pool, see [`start_pool_member`]) on `bind` (port 0: any).
pub(crate) fn start(driver: Driver, bind: SocketAddr, spec: &Spec) -> Result<Running> {
    match driver {
        Driver::Event => start_event(bind, spec),
        Driver::ThreadPerMessage => start_thread_per_message(bind, spec),
        Driver::PoolThreadPerMessage => start_pool_thread_per_message(bind, spec),
        Driver::ThreadPool => start_thread_pool(bind, spec),
        Driver::ProcessPool => start_pool_member(bind, spec, 1),
        Driver::Holdline => Err(LabError::Precondition(
            "the holdline driver is `holdline serve`, not a lab driver".into(),
        )),
    }
}

/// A store shared by a process's endpoints (no registrations: every call takes the static
/// route after its lookup misses, as in `holdline serve --store memory`).
fn store() -> Arc<dyn LocationStore> {
    Arc::new(MemoryLocationStore::new())
}

/// Waits (at most `timeout`) until one of `socks` is readable.
fn wait_readable(socks: &[&UdpSocket], timeout: Duration) {
    let mut fds: Vec<libc::pollfd> = socks
        .iter()
        .map(|s| libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: `fds` is a valid, initialised array of `fds.len()` pollfd entries that lives
    // across the call; poll(2) writes only their `revents`.
    let _ = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
}

/// The event loop of `event` and of every process-pool member: poll the sockets, read up
/// to [`BATCH`] datagrams from each (non-blocking), handle each to the end, repeat.
fn event_loop(socks: Vec<UdpSocket>, mut ep: Endpoint, cost: Duration, stop: Arc<AtomicBool>) {
    let clock = Clock::new();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    let mut out = Outbox::default();
    let refs: Vec<&UdpSocket> = socks.iter().collect();
    // What a pool member sends leaves by its private socket (the last one), so that the
    // answers come back to it; `event` has one socket.
    let Some(send) = socks.last() else {
        return;
    };
    while !stop.load(Ordering::Relaxed) {
        wait_readable(&refs, TICK);
        for sock in &socks {
            for _ in 0..BATCH {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    break;
                };
                let start = std::time::Instant::now();
                on_message(&mut ep, clock.now(), &buf[..n], from, &mut out);
                out.flush(send);
                burn(start, cost);
            }
        }
        on_timers(&mut ep, clock.now(), &mut out);
        out.flush(send);
    }
}

/// (a) One thread, one socket, one endpoint.
fn start_event(bind: SocketAddr, spec: &Spec) -> Result<Running> {
    let sock = udp_socket(bind, false)?;
    sock.set_nonblocking(true)
        .map_err(|e| LabError::io("non-blocking socket", e))?;
    let addr = sock
        .local_addr()
        .map_err(|e| LabError::io("local address", e))?;
    let ep = Endpoint::new(proxy_config(&[addr], spec, 1), store());
    let mut r = Running::new(addr);
    let (stop, cost) = (r.stop.clone(), spec.cost);
    r.spawn("event", move || event_loop(vec![sock], ep, cost, stop))?;
    Ok(r)
}

/// (e) One member of a process pool: a socket on the shared port `bind` with
/// `SO_REUSEPORT` (the kernel picks a member by a hash of the datagram's source), and a
/// private socket on a port of its own that its Via and Record-Route name, so that the
/// responses and in-dialog requests of the transactions it created come back to it (its
/// transactions are its own: the members share no memory; `seed` keeps their branches
/// apart). Runs `event`'s loop over both.
pub(crate) fn start_pool_member(bind: SocketAddr, spec: &Spec, seed: u64) -> Result<Running> {
    let shared = udp_socket(bind, true)?;
    let addr = shared
        .local_addr()
        .map_err(|e| LabError::io("local address", e))?;
    let private = udp_socket(SocketAddr::new(addr.ip(), 0), false)?;
    let own = private
        .local_addr()
        .map_err(|e| LabError::io("local address", e))?;
    for s in [&shared, &private] {
        s.set_nonblocking(true)
            .map_err(|e| LabError::io("non-blocking socket", e))?;
    }
    let ep = Endpoint::new(proxy_config(&[own, addr], spec, seed), store());
    let mut r = Running::new(addr);
    let (stop, cost) = (r.stop.clone(), spec.cost);
    r.spawn("pool-member", move || {
        event_loop(vec![shared, private], ep, cost, stop);
    })?;
    Ok(r)
}

/// Whether the timers of every set are due for a sweep now, claimed by this caller (one
/// sweep per tick among all threads).
fn claim_sweep(next: &AtomicU64, clock: Clock) -> bool {
    let now = clock.now().as_nanos();
    let due = next.load(Ordering::Relaxed);
    now >= due
        && next
            .compare_exchange(
                due,
                now + TICK.as_nanos() as u64,
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
}

/// A blocking socket with a read timeout of one tick, shared by threads.
fn shared_socket(bind: SocketAddr) -> Result<(Arc<UdpSocket>, SocketAddr)> {
    let sock = udp_socket(bind, false)?;
    sock.set_read_timeout(Some(TICK))
        .map_err(|e| LabError::io("read timeout", e))?;
    let addr = sock
        .local_addr()
        .map_err(|e| LabError::io("local address", e))?;
    Ok((Arc::new(sock), addr))
}

/// (b) A listener thread reads; every datagram gets a thread of its own, which handles it
/// against the one endpoint (locked) and ends.
fn start_thread_per_message(bind: SocketAddr, spec: &Spec) -> Result<Running> {
    let (sock, addr) = shared_socket(bind)?;
    let ep = Arc::new(Mutex::new(Endpoint::new(
        proxy_config(&[addr], spec, 1),
        store(),
    )));
    let mut r = Running::new(addr);
    let (stop, live, drops, cost) = (r.stop.clone(), r.live.clone(), r.drops.clone(), spec.cost);
    r.spawn("listener", move || {
        let clock = Clock::new();
        let next_sweep = AtomicU64::new(0);
        let mut buf = vec![0u8; MAX_DATAGRAM];
        let mut out = Outbox::default();
        while !stop.load(Ordering::Relaxed) {
            if let Ok((n, from)) = sock.recv_from(&mut buf) {
                if live.load(Ordering::Acquire) >= MAX_THREADS {
                    drops.fetch_add(1, Ordering::Relaxed);
                } else {
                    let msg = buf[..n].to_vec();
                    let (ep, sock, live2) = (ep.clone(), sock.clone(), live.clone());
                    live.fetch_add(1, Ordering::AcqRel);
                    let spawned = std::thread::Builder::new().spawn(move || {
                        let start = std::time::Instant::now();
                        let mut out = Outbox::default();
                        on_message(&mut lock(&ep), clock.now(), &msg, from, &mut out);
                        out.flush(&sock);
                        burn(start, cost);
                        live2.fetch_sub(1, Ordering::AcqRel);
                    });
                    if spawned.is_err() {
                        live.fetch_sub(1, Ordering::AcqRel);
                        drops.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            if claim_sweep(&next_sweep, clock) {
                on_timers(&mut lock(&ep), clock.now(), &mut out);
                out.flush(&sock);
            }
        }
    })?;
    Ok(r)
}

/// (c) A listener thread reads and hands every datagram to a fixed pool through a bounded
/// channel; a pool thread handles it against the one endpoint (locked).
fn start_pool_thread_per_message(bind: SocketAddr, spec: &Spec) -> Result<Running> {
    let (sock, addr) = shared_socket(bind)?;
    let ep = Arc::new(Mutex::new(Endpoint::new(
        proxy_config(&[addr], spec, 1),
        store(),
    )));
    let (tx, rx) = crossbeam_channel::bounded::<(Vec<u8>, SocketAddr)>(QUEUE);
    let mut r = Running::new(addr);
    let clock = Clock::new();
    let next_sweep = Arc::new(AtomicU64::new(0));
    for i in 0..spec.pool.max(1) {
        let (ep, sock, rx, stop, next_sweep, cost) = (
            ep.clone(),
            sock.clone(),
            rx.clone(),
            r.stop.clone(),
            next_sweep.clone(),
            spec.cost,
        );
        r.spawn(&format!("pool-{i}"), move || {
            let mut out = Outbox::default();
            while !stop.load(Ordering::Relaxed) {
                if let Ok((msg, from)) = rx.recv_timeout(TICK) {
                    let start = std::time::Instant::now();
                    on_message(&mut lock(&ep), clock.now(), &msg, from, &mut out);
                    out.flush(&sock);
                    burn(start, cost);
                }
                if claim_sweep(&next_sweep, clock) {
                    on_timers(&mut lock(&ep), clock.now(), &mut out);
                    out.flush(&sock);
                }
            }
        })?;
    }
    let (stop, drops) = (r.stop.clone(), r.drops.clone());
    r.spawn("listener", move || {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        while !stop.load(Ordering::Relaxed) {
            if let Ok((n, from)) = sock.recv_from(&mut buf)
                && tx.try_send((buf[..n].to_vec(), from)).is_err()
            {
                drops.fetch_add(1, Ordering::Relaxed);
            }
        }
    })?;
    Ok(r)
}

/// The set of a message: the hash of its Call-ID (as holdline's shards), set 0 without one.
pub(crate) fn set_of(bytes: &[u8], sets: usize) -> usize {
    let limits = holdline_sip::Limits::DEFAULT;
    holdline_sip::Message::parse(bytes, &limits)
        .ok()
        .and_then(|m| {
            m.call_id()
                .ok()
                .map(|c| holdline_proto::shard::shard_of(c, sets))
        })
        .unwrap_or(0)
}

/// (d) A pool of threads that all read the one socket (the kernel lets one at a time in);
/// the state is [`SETS`] endpoints, each behind its own lock, a message going to the set of
/// its Call-ID (a transaction and its responses always meet in one set).
fn start_thread_pool(bind: SocketAddr, spec: &Spec) -> Result<Running> {
    let (sock, addr) = shared_socket(bind)?;
    let store = store();
    let sets: Arc<Vec<Mutex<Endpoint>>> = Arc::new(
        (0..SETS)
            .map(|i| {
                Mutex::new(Endpoint::new(
                    proxy_config(&[addr], spec, 1 + i as u64),
                    store.clone(),
                ))
            })
            .collect(),
    );
    let mut r = Running::new(addr);
    let clock = Clock::new();
    let next_sweep = Arc::new(AtomicU64::new(0));
    for i in 0..spec.pool.max(1) {
        let (sets, sock, stop, next_sweep, cost) = (
            sets.clone(),
            sock.clone(),
            r.stop.clone(),
            next_sweep.clone(),
            spec.cost,
        );
        r.spawn(&format!("pool-{i}"), move || {
            let mut buf = vec![0u8; MAX_DATAGRAM];
            let mut out = Outbox::default();
            while !stop.load(Ordering::Relaxed) {
                if let Ok((n, from)) = sock.recv_from(&mut buf) {
                    let start = std::time::Instant::now();
                    let msg = &buf[..n];
                    if let Some(set) = sets.get(set_of(msg, SETS)) {
                        on_message(&mut lock(set), clock.now(), msg, from, &mut out);
                    }
                    out.flush(&sock);
                    burn(start, cost);
                }
                if claim_sweep(&next_sweep, clock) {
                    for set in sets.iter() {
                        on_timers(&mut lock(set), clock.now(), &mut out);
                    }
                    out.flush(&sock);
                }
            }
        })?;
    }
    Ok(r)
}

#[cfg(test)]
mod tests;
