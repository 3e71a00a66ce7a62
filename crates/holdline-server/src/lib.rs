//! holdline's server runtime: thread-per-core workers around sans-IO engines.
//!
//! ```text
//!             SO_REUSEPORT: every worker binds every listener; the kernel spreads sources
//!   worker 0 ─ mio::Poll ─ UDP sockets, TCP listener, its connections, Waker, core 0
//!   worker 1 ─ mio::Poll ─ UDP sockets, TCP listener, its connections, Waker, core 1
//!      │   received message ─ parse index + Call-ID ─ owner = fnv(Call-ID) % workers
//!      │   owner == me: core.handle(now, bytes, peer)
//!      └─> owner != me: bounded channel to the owner + wake it (full: drop, counted)
//!   (TLS: a rustls session inside the connection, between the socket and the framer)
//!   core.poll_transmit ─ UDP: this worker's socket (sendmmsg batch)
//!                      ─ TCP with conn: the connection's owner (ConnId carries it)
//!                      ─ TCP without conn: this worker's pooled connection to the address
//! ```
//!
//! - TCP: one listener per worker with `SO_REUSEPORT` (no acceptor thread, no cross-thread
//!   registration: a connection lives in the Poll of the worker that accepted it). Messages
//!   are framed by [`holdline_sip::Framer`] and sharded like datagrams; replies for a
//!   connection owned by another worker travel back to it through its channel.
//! - Nothing blocks: full channels, full connection queues and UDP sends the socket does not
//!   take are dropped and counted (`holdline_drops_total{reason}`).
//! - [`Server::shutdown`]: stop reading, let cores run their timers until the grace deadline
//!   (or until they have none), then run the shutdown hooks (the store flush goes there).
//!
//! A worker's engine implements [`WorkerCore`]; [`TestCore`] is a trivial one for tests.

mod auth;
mod capture;
mod config;
mod core;
pub mod ctl;
mod dns;
mod engine;
mod metrics;
mod notify;
pub mod reload;
pub mod shard;
mod status;
mod tls;
mod worker;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::Duration;

use holdline_base::{Instant, Rng, Transport};
use holdline_io::Clock;
use holdline_io::tcp::{ConnLimits, TcpListener, TcpOptions};
use holdline_io::udp::{UdpOptions, UdpSocket};
use holdline_overload::ControllerFactory as _;
use holdline_overload::RejectionBudget;
use holdline_sip::Limits;
use mio::{Poll, Waker};

pub use crate::auth::{AuthRuntime, AuthSetupError, load_auth, read_users};
pub use crate::capture::CaptureError;
pub use crate::config::{
    AuthSettings, BufferSizes, CaptureSettings, ConfigError, DnsSettings, LimitsConfig, Listener,
    LoadControlSettings, LoadFilterSettings, OverloadSettings, Overrides, RegistrarSettings, Route,
    RouteTarget, ServerConfig, StoreSpec, TcpBuffers, TimersConfig, TlsSettings, default_data_dir,
};
pub use crate::core::{CoreFactory, HopEvent, TestCore, WorkerCore, default_core_factory};
pub use crate::ctl::{CtlError, LogHook};
pub use crate::dns::DnsSetupError;
pub use crate::engine::{
    Engine, EngineError, OpenedStore, STORE_FILE, open_store, proxy_config, seq_base,
};
pub use crate::metrics::{BUCKETS_US, Close as CloseReason, Drop as DropReason};
use crate::metrics::{MetricsServer, WorkerStats};
pub use crate::reload::ReloadPlan;
use crate::worker::{Settings, Shared, WAKER, Worker};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// A listener could not be bound.
    #[error("cannot listen on {listener}: {source}")]
    Bind {
        /// The listener.
        listener: Listener,
        /// The OS error.
        source: io::Error,
    },
    /// The metrics endpoint could not be bound.
    #[error("cannot serve metrics on {addr}: {source}")]
    Metrics {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: io::Error,
    },
    /// The data directory could not be created.
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: String,
        /// The OS error.
        source: io::Error,
    },
    /// A transport other than UDP, TCP or TLS was configured.
    #[error("unsupported listener {0} (udp, tcp and tls only)")]
    Unsupported(Listener),
    /// Polls, wakers or threads could not be created.
    #[error("runtime setup failed: {0}")]
    Runtime(#[from] io::Error),
    /// The configuration is invalid (a server started without validating it).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The DNS resolver thread could not be set up.
    #[error(transparent)]
    Dns(#[from] DnsSetupError),
    /// SIP capture could not start.
    #[error(transparent)]
    Capture(#[from] CaptureError),
}

/// What [`Server::shutdown`] observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Workers that exited normally.
    pub workers_joined: usize,
    /// Workers that panicked.
    pub workers_panicked: usize,
}

/// A hook run once all workers have stopped.
pub type ShutdownHook = Box<dyn FnOnce() + Send>;

/// A hook run on SIGHUP (e.g. reloading the users file).
pub type ReloadHook = Box<dyn Fn() + Send>;

/// A hook run on every reload (SIGHUP, `holdline ctl reload`) whose outcome goes into the
/// reply: `Ok(note)` (e.g. "users reloaded: 3 users"; empty: nothing to say) or `Err(why)`.
pub type ReportingReloadHook = Box<dyn Fn() -> Result<String, String> + Send>;

/// Reads the configuration again for a reload (the file, with the command line's overrides
/// applied): a bad file is refused with its file, line and key.
pub type ConfigSource = Box<dyn Fn() -> Result<ServerConfig, ConfigError> + Send>;

/// The per-source guard's settings: `[flood]`, and the failed-authentication limits of
/// `[auth]` (the same table counts both; with `[flood]` off but authentication on, only
/// failures are limited).
/// The target edges `config`'s routes name for DEOC (`deoc_target`), by their number at the
/// hop controller.
fn deoc_names(
    config: &ServerConfig,
) -> std::collections::HashMap<holdline_overload::TargetId, String> {
    config
        .routes
        .iter()
        .filter_map(|r| r.deoc_target.as_ref())
        .chain(
            config
                .hash_routes
                .iter()
                .filter_map(|r| r.deoc_target.as_ref()),
        )
        .map(|n| {
            (
                worker::edge_target(holdline_proto::EdgeId::of(n)),
                n.clone(),
            )
        })
        .collect()
}

fn flood_config(config: &ServerConfig, key: u64) -> Option<holdline_overload::FloodConfig> {
    let a = &config.auth;
    let throttle = a.enabled() && a.failure_limit > 0;
    let mut f = match config.flood.guard_config(key) {
        Some(f) => f,
        None if throttle => holdline_overload::FloodConfig {
            limit: u32::MAX,
            key,
            ..holdline_overload::FloodConfig::default()
        },
        None => return None,
    };
    f.auth_limit = if throttle { a.failure_limit } else { 0 };
    f.auth_window = Duration::from_millis(a.failure_window_ms.max(1));
    f.auth_cooldown = Duration::from_millis(a.failure_cooldown_ms.max(1));
    Some(f)
}

/// See [`Server::wake_handle`].
#[derive(Clone)]
pub struct WakeHandle(std::sync::Weak<Shared>);

impl std::fmt::Debug for WakeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WakeHandle")
            .field("running", &(self.0.strong_count() > 0))
            .finish()
    }
}

impl WakeHandle {
    /// Wakes every worker of the server, if it is still running.
    pub fn wake_all(&self) {
        if let Some(shared) = self.0.upgrade() {
            for w in &shared.wakers {
                let _ = w.wake();
            }
        }
    }
}

/// A running server.
pub struct Server {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    /// The DNS resolver thread, when routes name next hops by DNS.
    dns_thread: Option<JoinHandle<()>>,
    bound: Vec<Listener>,
    /// The UDP receive buffer asked for and the one the kernel gave (of the first UDP socket).
    udp_recv_buffer: Option<(usize, usize)>,
    metrics: Option<MetricsServer>,
    hooks: Vec<ShutdownHook>,
    reload_hooks: Vec<ReloadHook>,
    reporting_hooks: Vec<ReportingReloadHook>,
    grace: Duration,
    store: StoreSpec,
    /// When the server started (uptime).
    started: std::time::Instant,
    /// The control socket's path (`None`: off).
    ctl_path: Option<std::path::PathBuf>,
    ctl: Option<ctl::CtlServer>,
    /// Where a reload reads the configuration, and the file it names.
    source: Option<(std::path::PathBuf, ConfigSource)>,
    location: Option<Arc<dyn holdline_proto::LocationStore>>,
    log_hook: Option<LogHook>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("listeners", &self.bound)
            .field("workers", &self.threads.len())
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Binds every listener in every worker, starts the workers and the metrics endpoint,
    /// and creates the store's directory. `factory(i)` makes worker `i`'s engine.
    pub fn start<F>(config: &ServerConfig, factory: F) -> Result<Self, StartError>
    where
        F: Fn(usize) -> Box<dyn WorkerCore>,
    {
        Self::start_with(config, Clock::new(), |i, _| factory(i))
    }

    /// Like [`start`](Self::start), on the given clock (so that state created before the
    /// server, such as a persistent store, shares the workers' time), with a factory that also
    /// gets the bound listeners (port 0 resolved): `factory(i, listeners)`.
    pub fn start_with<F>(
        config: &ServerConfig,
        clock: Clock,
        factory: F,
    ) -> Result<Self, StartError>
    where
        F: Fn(usize, &[Listener]) -> Box<dyn WorkerCore>,
    {
        let n = config.worker_count();
        let store = config.store();
        if let StoreSpec::Path(p) = &store {
            std::fs::create_dir_all(p).map_err(|source| StartError::DataDir {
                path: p.display().to_string(),
                source,
            })?;
        }
        let l = &config.limits;
        let udp_opts = UdpOptions {
            reuse_port: true,
            recv_buffer: l.udp_recv_buffer.filter(|&n| n > 0),
            send_buffer: l.udp_send_buffer,
            batched: l.batched_udp,
            // Kernel receive times: the workers measure their queueing delay with them.
            timestamps: true,
        };
        let tcp_opts_for = |b: BufferSizes| TcpOptions {
            send_buffer: b.send_buffer,
            recv_buffer: b.recv_buffer,
            // Kernel receive times: queueing delay over TCP, and how long a deferred INVITE
            // has really waited.
            timestamps: true,
            max_segment: b.max_segment,
            ..TcpOptions::default()
        };
        let limits_for = |b: BufferSizes| ConnLimits {
            max_read_buffer: b.read_buffer,
            max_queue_bytes: l.conn_queue_bytes,
        };
        // TCP and TLS listeners in the order the workers hold them: their read-ahead limits,
        // and whether they speak TLS.
        let mut listener_limits = Vec::new();
        let mut listener_tls = Vec::new();
        let tls = tls::setup(config)
            .map_err(|(key, message)| StartError::Config(format!("{key}: {message}")))?;
        // Bind: worker 0 first (resolving port 0), the others on the address it got.
        let mut udp: Vec<Vec<UdpSocket>> = (0..n).map(|_| Vec::new()).collect();
        // New INVITEs over UDP on sockets of their own (one per worker and UDP listener, in
        // the same order as `udp`), when on and the kernel takes the steering program.
        let separate_invites = config.overload.separates_udp_invites();
        let invite_opts = UdpOptions {
            recv_buffer: Some(config.overload.udp_invite_recv_buffer),
            ..udp_opts
        };
        let mut invite_udp: Vec<Vec<UdpSocket>> = (0..n).map(|_| Vec::new()).collect();
        let mut tcp: Vec<Vec<TcpListener>> = (0..n).map(|_| Vec::new()).collect();
        // SCTP over UDP: one socket per listener, all in worker 0 with their associations.
        let mut sctp: Vec<(UdpSocket, holdline_sctp::SctpUdp)> = Vec::new();
        let delivery = config.sctp.delivery_by_addr();
        let mut bound = Vec::new();
        let mut udp_recv_buffer = None;
        for lst in &config.listen {
            let mut addr = lst.addr;
            probe_exclusive(lst)?;
            for w in 0..n {
                let err = |source| StartError::Bind {
                    listener: *lst,
                    source,
                };
                match lst.transport {
                    Transport::Udp => {
                        let s = UdpSocket::bind(addr, &udp_opts).map_err(err)?;
                        addr = s.local_addr().map_err(err)?;
                        if let (None, Some(asked)) = (udp_recv_buffer, udp_opts.recv_buffer) {
                            // Linux reports twice what it keeps for the payload.
                            udp_recv_buffer = s.recv_buffer_size().ok().map(|g| (asked, g / 2));
                        }
                        udp[w].push(s);
                    }
                    Transport::Tcp | Transport::Tls => {
                        let b = config.listener_buffers(lst);
                        if w == 0 {
                            listener_limits.push(limits_for(b));
                            listener_tls.push(lst.transport == Transport::Tls);
                        }
                        let s = TcpListener::bind(addr, &tcp_opts_for(b)).map_err(err)?;
                        addr = s.local_addr().map_err(err)?;
                        tcp[w].push(s);
                    }
                    Transport::Sctp if w == 0 => {
                        let opts = UdpOptions {
                            reuse_port: false,
                            batched: true,
                            timestamps: false,
                            ..udp_opts
                        };
                        let s = UdpSocket::bind(addr, &opts).map_err(err)?;
                        addr = s.local_addr().map_err(err)?;
                        sctp.push((
                            s,
                            holdline_sctp::SctpUdp::new(sctp_config(
                                &config.sctp,
                                lst.addr,
                                &delivery,
                            )),
                        ));
                    }
                    Transport::Sctp => {}
                    _ => return Err(StartError::Unsupported(*lst)),
                }
            }
            if lst.transport == Transport::Udp && separate_invites {
                // The group is the workers' sockets, then their INVITE sockets (the order the
                // steering program assumes); the program goes on the group once all joined.
                let err = |source| StartError::Bind {
                    listener: *lst,
                    source,
                };
                let mut extra = Vec::with_capacity(n);
                for _ in 0..n {
                    extra.push(UdpSocket::bind(addr, &invite_opts).map_err(err)?);
                }
                let first = udp[0].last().map(|s| s.steer_invites(n));
                match first {
                    Some(Ok(())) => {
                        for (w, s) in extra.into_iter().enumerate() {
                            invite_udp[w].push(s);
                        }
                    }
                    // Without the program the kernel would spread everything over all the
                    // sockets: close the extra ones (they leave the group) and go on as before.
                    Some(Err(e)) => {
                        tracing::warn!(listener = %lst, error = %e, "cannot steer new INVITEs to sockets of their own; one socket per worker");
                        drop(extra);
                    }
                    None => drop(extra),
                }
            }
            bound.push(Listener {
                transport: lst.transport,
                addr,
            });
        }
        let mut polls = Vec::with_capacity(n);
        let mut wakers = Vec::with_capacity(n);
        let mut senders = Vec::with_capacity(n);
        let mut receivers = Vec::with_capacity(n);
        for _ in 0..n {
            let poll = Poll::new()?;
            wakers.push(Waker::new(poll.registry(), WAKER)?);
            polls.push(poll);
            let (tx, rx) = crossbeam_channel::bounded(l.handoff_queue);
            senders.push(tx);
            receivers.push(rx);
        }
        let inodes = |socks: &[Vec<UdpSocket>]| -> Vec<u64> {
            socks
                .iter()
                .flatten()
                .filter_map(|s| s.inode().ok())
                .collect()
        };
        let udp_inodes = [inodes(&udp), inodes(&invite_udp)];
        // DNS lookups run on a thread of their own, started once the workers' state exists.
        let named = |t: &RouteTarget| matches!(t, RouteTarget::Dns(_));
        let (dns, dns_runner) = if config.dns.request_uris
            || config.routes.iter().any(|r| named(&r.target))
            || config
                .hash_routes
                .iter()
                .any(|r| r.targets.iter().any(named))
        {
            let (handle, runner) = dns::channel(&config.dns);
            (Some(handle), Some(runner))
        } else {
            (None, None)
        };
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            deadline: AtomicU64::new(u64::MAX),
            wakers,
            senders,
            stats: (0..n).map(|_| WorkerStats::default()).collect(),
            open_conns: AtomicUsize::new(0),
            clock,
            accepted: std::sync::Mutex::new(std::collections::HashMap::new()),
            udp_inodes,
            dns,
            draining: AtomicBool::new(false),
            drain_retry_after: AtomicU64::new(config.drain_grace_s.max(1)),
            live: std::sync::Mutex::new(Arc::new(config.clone())),
            live_gen: AtomicU64::new(0),
            capture: capture::start(&config.capture)?,
        });
        let dns_thread = match dns_runner {
            Some(r) => Some(r.spawn(Arc::downgrade(&shared))?),
            None => None,
        };
        let mut limits = Limits::DEFAULT;
        limits.max_message_size(l.max_message_size);
        let settings = Settings {
            limits,
            max_connections: l.max_connections,
            conn_limits: limits_for(config.default_buffers()),
            tcp_opts: tcp_opts_for(config.default_buffers()),
            listener_limits,
            listener_tls,
            tls,
            next_hops: config
                .next_hop_buffers()
                .into_iter()
                .map(|(a, b)| (a, (tcp_opts_for(b), limits_for(b))))
                .collect(),
            idle_timeout: Duration::from_millis(l.idle_timeout_ms),
            write_stall: Duration::from_millis(l.write_stall_ms.max(1)),
            emulate_cost: Duration::from_micros(config.overload.emulate_cost_us),
            emulate_reject_cost: Duration::from_micros(
                config
                    .overload
                    .emulate_reject_cost_us
                    .unwrap_or(config.overload.emulate_cost_us),
            ),
            emulate_sleep: config.overload.emulate_sleep,
            deoc_names: deoc_names(config),
            defer: config.overload.defer_config(),
            invite_max_wait: config.overload.invite_max_wait(),
            cpu_occupancy: config.overload.occupancy_clock == "cpu",
            flood: flood_config(config, engine::random_seed()),
            trusted: config.trusted.iter().map(|t| t.0).collect(),
            register_retry_after: (
                config.overload.register_retry_after_s[0],
                config.overload.register_retry_after_s[1],
            ),
        };
        let overload = config
            .overload
            .controller()
            .map_err(|(key, message)| StartError::Config(format!("{key}: {message}")))?;
        let forward = config
            .overload
            .forward_controller()
            .map_err(|(key, message)| StartError::Config(format!("{key}: {message}")))?;
        let hop = config
            .overload
            .hop_controller()
            .map_err(|(key, message)| StartError::Config(format!("{key}: {message}")))?;
        let mut workers = Vec::with_capacity(n);
        for (i, (((poll, rx), (u, t)), invites)) in polls
            .into_iter()
            .zip(receivers)
            .zip(udp.into_iter().zip(tcp))
            .zip(invite_udp)
            .enumerate()
        {
            let mut w = Worker::new(
                i,
                poll,
                factory(i, &bound),
                shared.clone(),
                rx,
                u,
                t,
                settings.clone(),
                overload
                    .build(
                        shared.clock.now(),
                        Rng::seed_from_u64(0x5eed_0000 + i as u64),
                    )
                    .map_err(|e| StartError::Config(format!("overload: {e}")))?,
                match &forward {
                    Some(cfg) => {
                        let split = match cfg {
                            holdline_overload::ControllerConfig::SmartForwarding(c) => c.split,
                            _ => holdline_overload::Split::Implicit,
                        };
                        Some((
                            cfg.build(shared.clock.now(), Rng::seed_from_u64(0x5f0d + i as u64))
                                .map_err(|e| StartError::Config(format!("overload: {e}")))?,
                            split,
                        ))
                    }
                    None => None,
                },
            );
            w.set_feedback(
                match &hop {
                    Some(cfg) => Some(
                        holdline_overload::ControllerFactory::build(
                            cfg,
                            shared.clock.now(),
                            Rng::seed_from_u64(0x0c0c_0000 + i as u64),
                        )
                        .map_err(|e| StartError::Config(format!("overload.feedback: {e}")))?,
                    ),
                    None => None,
                },
                match config.overload.server_role() {
                    Some(c) => Some(worker::ServerRole::new(
                        holdline_overload::HopServer::new(c)
                            .map_err(|e| StartError::Config(format!("overload: {e}")))?,
                        config.overload.feedback_validity_ms,
                        config.overload.feedback_answer_rate,
                        config.overload.feedback_answer_window,
                    )),
                    None => None,
                },
            );
            w.set_invite_sockets(
                invites,
                RejectionBudget::new(config.overload.budget_config(), shared.clock.now())
                    .map_err(|e| StartError::Config(format!("overload.rejection_budget: {e}")))?,
            );
            if i == 0 {
                w.set_sctp(std::mem::take(&mut sctp));
            }
            w.register()?;
            workers.push(w);
        }
        let metrics = match config.metrics {
            Some(addr) => Some(
                MetricsServer::start(addr, shared.clone())
                    .map_err(|source| StartError::Metrics { addr, source })?,
            ),
            None => None,
        };
        let mut threads = Vec::with_capacity(n);
        for w in workers {
            let name = format!("holdline-w{}", w.index);
            threads.push(
                std::thread::Builder::new()
                    .name(name)
                    .spawn(move || w.run())?,
            );
        }
        tracing::info!(workers = n, listeners = ?bound.iter().map(ToString::to_string).collect::<Vec<_>>(), store = %store, "server started");
        Ok(Self {
            shared,
            threads,
            dns_thread,
            bound,
            udp_recv_buffer,
            metrics,
            hooks: Vec::new(),
            reload_hooks: Vec::new(),
            reporting_hooks: Vec::new(),
            grace: config.shutdown_grace(),
            store,
            started: std::time::Instant::now(),
            ctl_path: config.ctl_socket_path(),
            ctl: None,
            source: None,
            location: None,
            log_hook: None,
        })
    }

    /// The UDP receive buffer (`SO_RCVBUF`) asked for and the one the kernel gave, when one
    /// was asked for and a UDP listener exists: the kernel caps it at `net.core.rmem_max`.
    pub fn udp_recv_buffer(&self) -> Option<(usize, usize)> {
        self.udp_recv_buffer
    }

    /// The listeners as bound (port 0 resolved).
    pub fn local_addrs(&self) -> &[Listener] {
        &self.bound
    }

    /// The first bound listener of `transport`.
    pub fn local_addr(&self, transport: Transport) -> Option<SocketAddr> {
        self.bound
            .iter()
            .find(|l| l.transport == transport)
            .map(|l| l.addr)
    }

    /// The metrics endpoint's address, if enabled.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|m| m.addr)
    }

    /// The store in effect.
    pub fn store(&self) -> &StoreSpec {
        &self.store
    }

    /// A handle that wakes every worker (e.g. from the location store's commit listener, so
    /// that REGISTER responses held for a commit leave at once). It does not keep the server
    /// alive.
    pub fn wake_handle(&self) -> WakeHandle {
        WakeHandle(Arc::downgrade(&self.shared))
    }

    /// The number of workers.
    pub fn workers(&self) -> usize {
        self.threads.len()
    }

    /// The Prometheus text the endpoint serves.
    pub fn metrics_text(&self) -> String {
        metrics::render(&self.shared, Duration::from_millis(250))
    }

    /// Registers a hook run after the workers stopped (e.g. flushing the store).
    pub fn on_shutdown(&mut self, hook: ShutdownHook) {
        self.hooks.push(hook);
    }

    /// Registers a hook run on every SIGHUP (while [`run`](Self::run) waits).
    pub fn on_reload(&mut self, hook: ReloadHook) {
        self.reload_hooks.push(hook);
    }

    /// Registers a hook run on every reload whose outcome goes into the reply of
    /// `holdline ctl reload` (and the log, on SIGHUP).
    pub fn on_reload_report(&mut self, hook: ReportingReloadHook) {
        self.reporting_hooks.push(hook);
    }

    /// Where reloads read the configuration: `file` (named in replies) through `source`
    /// (which applies the command line's overrides). Without one, a reload runs the hooks
    /// only.
    pub fn set_config_source(&mut self, file: std::path::PathBuf, source: ConfigSource) {
        self.source = Some((file, source));
    }

    /// The location store `holdline ctl bindings` reads and edits.
    pub fn set_location_store(&mut self, store: Arc<dyn holdline_proto::LocationStore>) {
        self.location = Some(store);
    }

    /// How `holdline ctl log-level` and a reload that changes `log` set the log filter.
    pub fn set_log_hook(&mut self, hook: LogHook) {
        self.log_hook = Some(hook);
    }

    /// The control socket's path, when on (bound by [`run`](Self::run)).
    pub fn ctl_socket(&self) -> Option<&std::path::Path> {
        self.ctl_path.as_deref()
    }

    /// Opens the control socket, then waits for signals and control requests: SIGHUP and
    /// `ctl reload` reload; SIGTERM drains (with `drain_grace_s` > 0, else stops at once);
    /// `ctl drain` drains; SIGINT stops at once. Prints `ready` on stderr once the signal
    /// handlers are installed and the control socket listens.
    pub fn run(mut self) -> io::Result<ShutdownReport> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let (tx, rx) = std::sync::mpsc::channel();
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
        let signal_handle = signals.handle();
        let signal_tx = tx.clone();
        let signal_thread = std::thread::Builder::new()
            .name("holdline-signals".into())
            .spawn(move || {
                for sig in signals.forever() {
                    if signal_tx.send(ctl::Command::Signal(sig)).is_err() {
                        break;
                    }
                }
            })?;
        if let Some(path) = self.ctl_path.clone() {
            let store_name = match &self.store {
                StoreSpec::Memory => "memory".to_owned(),
                StoreSpec::Path(_) => "persistent".to_owned(),
                _ => "redis".to_owned(),
            };
            let ctx = ctl::Context {
                shared: Arc::downgrade(&self.shared),
                store: self.location.clone(),
                store_name,
                log: self.log_hook.clone(),
                commands: tx.clone(),
                started: self.started,
                config_file: self.source.as_ref().map(|(f, _)| f.clone()),
            };
            match ctl::CtlServer::start(&path, ctx) {
                Ok(c) => {
                    eprintln!(
                        "holdline: control socket {} (holdline ctl --socket {} status)",
                        c.path().display(),
                        c.path().display()
                    );
                    self.ctl = Some(c);
                }
                Err(e) => {
                    tracing::info!(error = %e, "control socket off");
                    eprintln!("holdline: control socket off: {e}");
                    self.ctl_path = None;
                }
            }
        }
        drop(tx);
        tracing::info!("ready; SIGINT stops the server, SIGTERM drains it, SIGHUP reloads");
        eprintln!("holdline: ready (SIGINT to stop, SIGTERM to drain and stop, SIGHUP to reload)");
        // systemd's Type=notify: the listeners are bound, the workers and the control socket run.
        notify::tell(notify::State::Ready);
        while let Ok(cmd) = rx.recv() {
            match cmd {
                ctl::Command::Signal(SIGHUP) => {
                    tracing::info!("SIGHUP: reloading");
                    notify::tell(notify::State::Reloading);
                    let r = self.reload();
                    notify::tell(notify::State::Ready);
                    eprintln!("holdline: reload (SIGHUP): {r}");
                }
                ctl::Command::Signal(SIGTERM) if self.drain_grace() > Duration::ZERO => {
                    tracing::info!("SIGTERM: draining");
                    let started = self.begin_drain();
                    self.wait_drained(&rx, started);
                    break;
                }
                ctl::Command::Signal(sig) => {
                    tracing::info!(
                        signal = sig,
                        grace_ms = self.grace.as_millis() as u64,
                        "shutting down"
                    );
                    break;
                }
                ctl::Command::Ctl(ctl::Request::Reload, reply) => {
                    notify::tell(notify::State::Reloading);
                    let r = self.reload();
                    notify::tell(notify::State::Ready);
                    eprintln!("holdline: reload (ctl): {r}");
                    let _ = reply.send(r);
                }
                ctl::Command::Ctl(ctl::Request::Drain, reply) => {
                    // Draining before the reply: a `status` right after it says so.
                    let started = self.begin_drain();
                    let _ = reply.send(self.drain_reply());
                    self.wait_drained(&rx, started);
                    break;
                }
                ctl::Command::Ctl(_, reply) => {
                    let _ = reply.send(ctl::failure("not handled here"));
                }
            }
        }
        notify::tell(notify::State::Stopping);
        signal_handle.close();
        let _ = signal_thread.join();
        Ok(self.shutdown())
    }

    /// The running configuration's drain grace.
    fn drain_grace(&self) -> Duration {
        Duration::from_secs(self.shared.live_config().drain_grace_s)
    }

    fn drain_reply(&self) -> serde_json::Value {
        let c = self.shared.live_config();
        let in_flight: u64 = self
            .shared
            .stats
            .iter()
            .map(|w| w.in_flight.load(Relaxed))
            .sum();
        serde_json::json!({
            "ok": true,
            "draining": true,
            "grace_s": c.drain_grace_s,
            "idle_ms": c.drain_idle_ms,
            "in_flight": in_flight,
            "retry_after_s": c.drain_grace_s.max(1),
        })
    }

    /// Starts a drain: new calls and registrations get 503 (maintenance) from now on.
    /// Returns when it started.
    fn begin_drain(&self) -> Instant {
        let c = self.shared.live_config();
        let start = self.shared.clock.now();
        self.shared
            .drain_retry_after
            .store(c.drain_grace_s.max(1), Relaxed);
        self.shared.draining.store(true, Relaxed);
        notify::tell(notify::State::Stopping);
        for w in &self.shared.wakers {
            let _ = w.wake();
        }
        tracing::info!(grace_s = c.drain_grace_s, "draining");
        eprintln!(
            "holdline: draining: new calls and registrations get 503 (maintenance); waiting at most {} s for those in progress",
            c.drain_grace_s
        );
        start
    }

    /// Waits for the end of the drain begun at `start`: once no request has been in
    /// progress on any worker for `drain_idle_ms`, or after `drain_grace_s`, or at SIGINT or
    /// a second SIGTERM. Reloads are still served meanwhile.
    fn wait_drained(&mut self, rx: &std::sync::mpsc::Receiver<ctl::Command>, start: Instant) {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let c = self.shared.live_config();
        let clock = self.shared.clock;
        let deadline = start + Duration::from_secs(c.drain_grace_s);
        let idle = Duration::from_millis(c.drain_idle_ms);
        let outcome = loop {
            match rx.recv_timeout(Duration::from_millis(20)) {
                Ok(ctl::Command::Signal(SIGHUP)) => {
                    let r = self.reload();
                    eprintln!("holdline: reload (SIGHUP): {r}");
                }
                Ok(ctl::Command::Signal(SIGINT | SIGTERM)) => break "stopped by a signal",
                Ok(ctl::Command::Ctl(ctl::Request::Reload, reply)) => {
                    let _ = reply.send(self.reload());
                }
                Ok(ctl::Command::Ctl(_, reply)) => {
                    let _ = reply.send(self.drain_reply());
                }
                Ok(ctl::Command::Signal(_)) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break "stopped",
            }
            let now = clock.now();
            let stats = &self.shared.stats;
            let busy = stats.iter().any(|w| w.in_flight.load(Relaxed) > 0);
            let last = stats
                .iter()
                .map(|w| w.last_active_ns.load(Relaxed))
                .max()
                .unwrap_or(0)
                .max(start.as_nanos());
            if !busy && now.as_nanos().saturating_sub(last) >= idle.as_nanos() as u64 {
                break "nothing in progress";
            }
            if now >= deadline {
                break "grace period over";
            }
        };
        let took = clock.now().saturating_duration_since(start);
        tracing::info!(outcome, took_ms = took.as_millis() as u64, "drained");
        eprintln!(
            "holdline: drained ({outcome}) in {} ms; stopping",
            took.as_millis()
        );
    }

    /// Re-reads the configuration and applies its live part on every worker (waiting until
    /// each runs it), runs the reload hooks, and says what was applied and what needs a
    /// restart. A bad file is refused with its file, line and key; the running
    /// configuration stays.
    fn reload(&mut self) -> serde_json::Value {
        use serde_json::json;
        let mut reply = json!({"ok": true});
        if let Some((file, source)) = &self.source {
            match source().map_err(|e| {
                json!({
                    "ok": false,
                    "error": format!("{e}; the running configuration stays"),
                    "file": e.file,
                    "line": e.line,
                    "key": e.key,
                })
            }) {
                Ok(new) => match self.apply(file, &new) {
                    Ok(applied) => {
                        for (k, v) in applied {
                            reply[k] = v;
                        }
                    }
                    Err(refused) => reply = refused,
                },
                Err(refused) => reply = refused,
            }
            if reply["ok"] == false {
                tracing::error!(reply = %reply, "configuration not reloaded; the running one stays");
            }
        } else {
            reply["note"] = json!(
                "no configuration file (serve was started without --config): only the users file and hooks were reloaded"
            );
        }
        // The hooks (the users file, RFC 7200's filters) run even when the file was refused:
        // each keeps what it has on its own errors.
        for h in &self.reload_hooks {
            h();
        }
        let mut notes = Vec::new();
        let mut errors = Vec::new();
        for h in &self.reporting_hooks {
            match h() {
                Ok(n) if n.is_empty() => {}
                Ok(n) => notes.push(n),
                Err(e) => errors.push(e),
            }
        }
        reply["notes"] = json!(notes);
        if !errors.is_empty() {
            let before = reply["error"].as_str().map(str::to_owned);
            reply["ok"] = json!(false);
            reply["error"] = json!(
                before
                    .into_iter()
                    .chain(errors)
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
        tracing::info!(reply = %reply, "reloaded");
        reply
    }

    /// Applies the live part of `new` (read from `file`) on every worker, waiting until each
    /// runs it; the reply's fields, or the refusal.
    fn apply(
        &self,
        file: &std::path::Path,
        new: &ServerConfig,
    ) -> Result<Vec<(&'static str, serde_json::Value)>, serde_json::Value> {
        use serde_json::json;
        let running = self.shared.live_config();
        let plan = reload::plan(&running, new, self.shared.dns.is_some());
        let mut next = (*running).clone();
        reload::apply_live(&mut next, new);
        // Controllers the workers will build: refuse here rather than on a worker.
        if let Err((key, message)) = next
            .overload
            .controller()
            .map(drop)
            .and_then(|()| next.overload.forward_controller().map(drop))
        {
            return Err(json!({
                "ok": false,
                "error": format!("{}: key `{key}`: {message}; the running configuration stays", file.display()),
                "file": file.display().to_string(),
                "line": 0,
                "key": key,
            }));
        }
        let mut generation = self.shared.live_gen.load(Relaxed);
        let workers = self.shared.stats.len();
        let mut workers_applied = workers;
        if next != *running {
            if let Ok(mut g) = self.shared.live.lock() {
                *g = Arc::new(next.clone());
            }
            generation = self
                .shared
                .live_gen
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel)
                + 1;
            for w in &self.shared.wakers {
                let _ = w.wake();
            }
            let until = std::time::Instant::now() + Duration::from_secs(5);
            loop {
                workers_applied = self
                    .shared
                    .stats
                    .iter()
                    .filter(|w| {
                        w.applied_gen.load(std::sync::atomic::Ordering::Acquire) >= generation
                    })
                    .count();
                if workers_applied == workers || std::time::Instant::now() >= until {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        // RUST_LOG wins over the file's `log`, as at start.
        if plan.live.iter().any(|k| k == "log")
            && std::env::var_os("RUST_LOG").is_none()
            && let Some(h) = &self.log_hook
            && let Err(e) = h(&next.log)
        {
            tracing::warn!(error = %e, "log filter not changed");
        }
        let mut out = vec![
            ("file", json!(file.display().to_string())),
            ("config_generation", json!(generation)),
            ("workers_applied", json!(workers_applied)),
            ("applied", json!(plan.live)),
            ("needs_restart", json!(plan.restart)),
        ];
        if workers_applied < workers {
            out.push(("ok", json!(false)));
            out.push((
                "error",
                json!(format!(
                    "only {workers_applied} of {workers} workers applied the configuration within 5 s"
                )),
            ));
        }
        Ok(out)
    }

    /// Stops reading, lets workers run timers until the grace deadline, joins them, stops
    /// the metrics endpoint and runs the shutdown hooks.
    pub fn shutdown(mut self) -> ShutdownReport {
        let deadline: Instant = self.shared.clock.now() + self.grace;
        self.shared.deadline.store(deadline.as_nanos(), Relaxed);
        self.shared.stop.store(true, Relaxed);
        for w in &self.shared.wakers {
            let _ = w.wake();
        }
        let mut report = ShutdownReport {
            workers_joined: 0,
            workers_panicked: 0,
        };
        for t in self.threads.drain(..) {
            match t.join() {
                Ok(()) => report.workers_joined += 1,
                Err(_) => report.workers_panicked += 1,
            }
        }
        // The resolver thread ends when its queue closes (lookups still under way are
        // dropped: no worker waits for them any more).
        if let Some(d) = &self.shared.dns {
            d.close();
        }
        if let Some(t) = self.dns_thread.take() {
            let _ = t.join();
        }
        if let Some(m) = self.metrics.as_mut() {
            m.stop();
        }
        if let Some(mut c) = self.ctl.take() {
            c.stop();
        }
        for hook in self.hooks.drain(..) {
            hook();
        }
        tracing::info!(?report, "server stopped");
        report
    }
}

/// The settings of the SCTP endpoint of listener `listener` from `[sctp]`: the listener's
/// own delivery if `[sctp.delivery]` names it, the peers' overrides beside.
fn sctp_config(
    c: &config::SctpSettings,
    listener: SocketAddr,
    delivery: &std::collections::BTreeMap<SocketAddr, bool>,
) -> holdline_sctp::SctpConfig {
    holdline_sctp::SctpConfig {
        sctp_port: c.sctp_port,
        streams: c.streams,
        unordered: delivery.get(&listener).copied().unwrap_or(c.unordered),
        delivery: delivery.clone(),
        rto_initial_ms: c.rto_initial_ms,
        rto_min_ms: c.rto_min_ms,
        rto_max_ms: c.rto_max_ms,
        max_queued_bytes: c.max_queued_bytes,
        heartbeat_interval_ms: c.heartbeat_interval_ms,
        ..holdline_sctp::SctpConfig::default()
    }
}

/// Fails if another socket already holds `lst`'s address. The workers bind with
/// `SO_REUSEPORT`, which would otherwise let a second server (or one still shutting down)
/// silently share the port and receive part of its traffic. A plain bind without the option
/// fails with "address in use" when any other socket holds the address. Port 0 is skipped.
fn probe_exclusive(lst: &Listener) -> Result<(), StartError> {
    if lst.addr.port() == 0 {
        return Ok(());
    }
    let err = |source| StartError::Bind {
        listener: *lst,
        source,
    };
    match lst.transport {
        Transport::Udp | Transport::Sctp => {
            std::net::UdpSocket::bind(lst.addr).map(drop).map_err(err)
        }
        Transport::Tcp | Transport::Tls => {
            std::net::TcpListener::bind(lst.addr).map(drop).map_err(err)
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sctp_delivery_per_listener_and_per_peer() {
        let c = ServerConfig::from_toml(
            "s.toml",
            "[sctp]\nunordered = false\n[sctp.delivery]\n\"127.0.0.1:9899\" = \"unordered\"\n\"192.0.2.7:9899\" = \"ordered\"\n",
        )
        .expect("config");
        let by = c.sctp.delivery_by_addr();
        let named = sctp_config(&c.sctp, "127.0.0.1:9899".parse().expect("addr"), &by);
        assert!(named.unordered, "the listener [sctp.delivery] names");
        let other = sctp_config(&c.sctp, "127.0.0.1:9900".parse().expect("addr"), &by);
        assert!(
            !other.unordered,
            "a listener it does not name keeps [sctp]'s"
        );
        // Peers' settings reach every listener's endpoint.
        for cfg in [&named, &other] {
            assert_eq!(
                cfg.delivery.get(&"192.0.2.7:9899".parse().expect("addr")),
                Some(&false)
            );
        }
    }
}
