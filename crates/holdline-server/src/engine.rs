//! The SIP engine as a worker core: [`holdline_proto::Endpoint`] behind [`WorkerCore`], its
//! configuration derived from [`ServerConfig`], and the location store it shares with the
//! other workers.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use holdline_base::{Duration, Instant, Peer, Transmit, Transport};
use holdline_io::Clock;
use holdline_overload::{Class, Rejection};
use holdline_proto::{
    DropReason, Endpoint, EndpointEvent, EndpointStats, GateRejection, HashRoute, HashTarget,
    ListenAddr, LocationStore, OverloadAnswer, ProxyConfig, StatelessFallback, StaticRoute,
};
use holdline_sip::Limits;

use holdline_store::{
    Durability, MemoryStore, PersistentConfig, PersistentStore, RedisConfig, RedisStore,
    RedisStoreError, StoreError,
};

use crate::core::HopEvent;
use crate::{Listener, ServerConfig, StoreSpec, WorkerCore};

/// How often worker 0 walks the whole store to remove expired bindings: one part of it
/// ([`LocationStore::purge_part`]) at a time, spread over this period, so that no step stalls
/// the worker for the whole store (a million bindings took 33 ms at once).
const PURGE_EVERY: Duration = Duration::from_secs(10);

/// File name of the persistent store inside its directory.
pub const STORE_FILE: &str = "locations.redb";

/// Why the engine could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The persistent store could not be opened.
    #[error("location store: {0}")]
    Store(#[from] StoreError),
    /// The Redis store could not be opened.
    #[error("{0}")]
    Redis(#[from] RedisStoreError),
    /// The store's directory could not be created.
    #[error("cannot create the store directory {path}: {source}")]
    StoreDir {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// The location store a server runs on.
pub struct OpenedStore {
    /// What the engines use.
    pub store: Arc<dyn LocationStore>,
    /// The persistent store, when there is one (to flush at shutdown and report its load).
    pub persistent: Option<Arc<PersistentStore>>,
    /// Where it lives (`None`: memory).
    pub path: Option<PathBuf>,
    /// The Redis store, when the store is shared through Redis (to flush at shutdown and
    /// wake the workers on commits).
    pub redis: Option<Arc<RedisStore>>,
}

impl std::fmt::Debug for OpenedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenedStore")
            .field("path", &self.path)
            .field("bindings", &self.store.len())
            .finish_non_exhaustive()
    }
}

/// Opens the store `config` names (a persistent store at `<dir>/locations.redb` by default),
/// with `clock` mapping its expiry times; expired bindings are dropped on load.
pub fn open_store(config: &ServerConfig, clock: &Clock) -> Result<OpenedStore, EngineError> {
    match config.store() {
        StoreSpec::Memory => Ok(OpenedStore {
            store: Arc::new(MemoryStore::new()),
            persistent: None,
            path: None,
            redis: None,
        }),
        StoreSpec::Redis(target) => {
            let durability = if config.durability == "write-behind" {
                Durability::WriteBehind
            } else {
                Durability::Commit
            };
            let r = Arc::new(RedisStore::open(
                target,
                clock.now(),
                std::time::SystemTime::now(),
                RedisConfig {
                    durability,
                    commit_window: Duration::from_micros(config.commit_window_us),
                    ..RedisConfig::default()
                },
            )?);
            Ok(OpenedStore {
                store: r.clone(),
                persistent: None,
                path: None,
                redis: Some(r),
            })
        }
        StoreSpec::Path(dir) => {
            std::fs::create_dir_all(&dir).map_err(|source| EngineError::StoreDir {
                path: dir.clone(),
                source,
            })?;
            let path = dir.join(STORE_FILE);
            let durability = if config.durability == "write-behind" {
                Durability::WriteBehind
            } else {
                Durability::Commit
            };
            let p = Arc::new(PersistentStore::open_with(
                &path,
                clock.now(),
                std::time::SystemTime::now(),
                PersistentConfig {
                    durability,
                    commit_window: Duration::from_micros(config.commit_window_us),
                    ..PersistentConfig::default()
                },
            )?);
            Ok(OpenedStore {
                store: p.clone(),
                persistent: Some(p),
                path: Some(path),
                redis: None,
            })
        }
    }
}

/// The base of the server role's `oc-seq` ([`ProxyConfig::overload_seq_base`]): the
/// wall-clock time at `clock`'s epoch, in 10 µs units since the Unix epoch, so that the
/// answers of every worker (which share the clock) and of later runs increase.
pub fn seq_base(clock: &Clock) -> u64 {
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| (d.as_nanos() / 10_000) as u64);
    wall.saturating_sub(clock.now().as_nanos() / 10_000)
}

/// The proxy configuration of worker `index`, from the server's configuration and the
/// addresses its listeners are actually bound to. Its RFC 7200 filters
/// (`load_control.shared`) are its own: give every worker of a server the same ones.
pub fn proxy_config(config: &ServerConfig, bound: &[Listener], index: usize) -> ProxyConfig {
    let mut p = ProxyConfig::default();
    live_routing(config, &mut p);
    p.listen = bound
        .iter()
        .map(|l| ListenAddr {
            transport: l.transport,
            addr: l.addr,
        })
        .collect();
    p.mode = config.mode;
    p.record_route_host.clone_from(&config.record_route_host);
    // validate() checked the setting.
    let algos = config.overload.feedback_algos().unwrap_or_default();
    p.overload_offer = (!algos.is_empty()).then(|| holdline_sip::OcOffer::new(&algos));
    p.advertise_offered_load = config.overload.advertise_offered_load;
    // The windows count forwarded INVITEs until answered or ended; DEOC reads their ends.
    p.branch_events = config.overload.window_client().is_some()
        || config.overload.deoc_client().is_some()
        || algos.contains(&holdline_sip::OcAlgo::Window);
    // The server sets the base of its own clock (`seq_base`); now is close to it.
    // validate() checked the setting.
    p.learn_edges = config.overload.deoc_client().is_some()
        && config.overload.deoc.target.trim() == "record-route";
    p.overload_seq_base = seq_base(&Clock::new());
    p.host_addresses = host_addresses();
    p.registrar = config.registrar.into();
    p.load_control = config.load_control.proxy_config();
    p.propagate_registrations = config
        .propagate_registrations
        .iter()
        .map(|l| Peer {
            addr: l.addr,
            transport: l.transport,
            conn: None,
        })
        .collect();
    // DNS targets may use the transports the server listens on (UDP, TCP, TLS in that
    // order of preference).
    let transports = [Transport::Udp, Transport::Tcp, Transport::Tls]
        .into_iter()
        .filter(|t| bound.iter().any(|l| l.transport == *t))
        .collect();
    p.dns = config.dns.proxy_config(transports);
    let mut limits = Limits::DEFAULT;
    limits.max_message_size(config.limits.max_message_size);
    p.limits = limits;
    p.txn
        .t1(Duration::from_millis(config.timers.t1_ms))
        .t2(Duration::from_millis(config.timers.t2_ms))
        .t4(Duration::from_millis(config.timers.t4_ms))
        .max_transactions(config.limits.max_transactions)
        .memory_budget(config.transaction_memory_bytes())
        // Secret per server and run: a peer cannot aim its keys at a hash collision.
        .hash_seed(random_seed());
    // Distinct per worker, so that branches of different workers never collide, and per run:
    // a restarted server must not repeat the branches (and To tags) of its previous run
    // (RFC 3261 §8.1.1.7: unique across space and time).
    p.branch_seed = random_seed() ^ 0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(index as u64 + 1);
    p.shard = Some(holdline_proto::shard::Shard {
        index,
        workers: config.worker_count(),
    });
    // The same for every worker (a rejection one worker builds is acknowledged to the
    // call's owner), different between servers: a hash of the bound listeners.
    p.gate_key = gate_key(bound);
    p
}

/// The part of a worker's proxy configuration a reload replaces live
/// ([`holdline_proto::Endpoint::reconfigure`]): domains, aliases, Record-Route, relay policy,
/// static, DNS and load-sharing routes, probing.
pub(crate) fn live_routing(config: &ServerConfig, p: &mut ProxyConfig) {
    p.domains.clone_from(&config.domains);
    p.record_route = config.record_route;
    p.aliases.clone_from(&config.aliases);
    p.relay = config.relay_policy();
    p.static_routes = config
        .routes
        .iter()
        .filter_map(|r| {
            r.target.addr().map(|t| StaticRoute {
                domain: r.domain.clone(),
                next_hop: t.addr,
                transport: t.transport,
                stateless: r.stateless,
                edge: r.deoc_target.as_deref().map(holdline_proto::EdgeId::of),
            })
        })
        .collect();
    p.dns_routes = config
        .routes
        .iter()
        .filter_map(|r| match &r.target {
            crate::config::RouteTarget::Dns(t) => Some(holdline_proto::DnsRoute {
                domain: r.domain.clone(),
                target: t.clone(),
                edge: r.deoc_target.as_deref().map(holdline_proto::EdgeId::of),
            }),
            crate::config::RouteTarget::Addr(_) => None,
        })
        .collect();
    p.hash_routes = config
        .hash_routes
        .iter()
        .map(|r| HashRoute {
            domain: r.domain.clone(),
            failover: r.failover,
            edge: r.deoc_target.as_deref().map(holdline_proto::EdgeId::of),
            pick: match r.pick {
                crate::config::RoutePick::Hash => holdline_proto::Pick::Hash,
                crate::config::RoutePick::RoundRobin => holdline_proto::Pick::RoundRobin,
            },
            targets: r
                .targets
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let weight = r.weights.get(i).copied().unwrap_or(1.0);
                    match t {
                        crate::config::RouteTarget::Addr(l) => {
                            HashTarget::new(l.addr, l.transport, weight)
                        }
                        crate::config::RouteTarget::Dns(name) => {
                            HashTarget::named(name.clone(), weight)
                        }
                    }
                })
                .collect(),
        })
        .collect();
    let probing = config.probing;
    p.probe = (probing.interval_ms > 0).then(|| holdline_proto::ProbeConfig {
        interval: Duration::from_millis(probing.interval_ms),
        timeout: Duration::from_millis(probing.timeout_ms.max(1)),
        down_after: probing.down_after.max(1),
    });
}

/// The machine's interface addresses (for listeners on `0.0.0.0`/`::`); none when they
/// cannot be read (loopback still counts).
fn host_addresses() -> Vec<std::net::IpAddr> {
    if_addrs::get_if_addrs()
        .map(|ifs| ifs.iter().map(if_addrs::Interface::ip).collect())
        .unwrap_or_default()
}

/// A seed from the standard library's per-process random hasher keys.
pub(crate) fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x686f_6c64_6c69_6e65);
    h.finish()
}

/// The admission gate's tag key of a server listening on `bound`.
fn gate_key(bound: &[Listener]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for l in bound {
        (l.transport as u8, l.addr).hash(&mut h);
    }
    h.finish()
}

/// One worker's SIP engine: the proxy/registrar [`Endpoint`] and, on worker 0, the periodic
/// purge of expired bindings.
pub struct Engine {
    endpoint: Endpoint,
    store: Arc<dyn LocationStore>,
    next_purge: Option<Instant>,
    /// The store part the next purge step walks.
    purge_cursor: usize,
    purged: u64,
    /// Events for the hop-by-hop client not yet taken by the worker
    /// ([`WorkerCore::poll_hop_event`]).
    feedback: std::collections::VecDeque<HopEvent>,
    /// Sources of failed authentications not yet taken by the worker
    /// ([`WorkerCore::poll_auth_failure`]).
    auth_failures: std::collections::VecDeque<std::net::IpAddr>,
    /// The Redis store, whose counters worker 0 renders ([`Engine::with_redis`]).
    redis: Option<Arc<RedisStore>>,
    /// The persistent store, whose counters worker 0 renders ([`Engine::with_persistent`]).
    persistent: Option<Arc<PersistentStore>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("active_calls", &self.endpoint.active_calls())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// The engine of worker `index`.
    pub fn new(config: ProxyConfig, store: Arc<dyn LocationStore>, index: usize) -> Self {
        Self {
            endpoint: Endpoint::new(config, store.clone()),
            store,
            next_purge: (index == 0).then_some(Instant::ZERO),
            purge_cursor: 0,
            purged: 0,
            feedback: std::collections::VecDeque::new(),
            auth_failures: std::collections::VecDeque::new(),
            redis: None,
            persistent: None,
        }
    }

    /// Has worker 0 render `store`'s counters in `/metrics` (`holdline_store_commits_total`,
    /// the commit-time histogram `holdline_store_commit_seconds`, ...).
    #[must_use]
    pub fn with_persistent(mut self, store: Option<Arc<PersistentStore>>) -> Self {
        self.persistent = store;
        self
    }

    /// Has worker 0 render `redis`'s counters in `/metrics` (`holdline_store_redis_*`).
    #[must_use]
    pub fn with_redis(mut self, redis: Option<Arc<RedisStore>>) -> Self {
        self.redis = redis;
        self
    }

    /// The endpoint's counters.
    pub fn stats(&self) -> &EndpointStats {
        self.endpoint.stats()
    }

    fn drain_events(&mut self) {
        // Drops are already counted in the stats; answers of next hops go to the worker's
        // hop-by-hop client (a few per message at most: the worker takes them after each).
        while let Some(e) = self.endpoint.poll_event() {
            match e {
                EndpointEvent::Feedback { from, report } if self.feedback.len() < MAX_FEEDBACK => {
                    self.feedback.push_back(HopEvent::Feedback(from, report));
                }
                EndpointEvent::BranchStarted { to, edge } if self.feedback.len() < MAX_FEEDBACK => {
                    self.feedback.push_back(HopEvent::Started(to, edge));
                }
                EndpointEvent::BranchAnswered { to, edge, delay }
                    if self.feedback.len() < MAX_FEEDBACK =>
                {
                    self.feedback.push_back(HopEvent::Answered(to, edge, delay));
                }
                EndpointEvent::BranchEnded {
                    to,
                    edge,
                    status,
                    timed_out,
                    delay,
                } if self.feedback.len() < MAX_FEEDBACK => {
                    self.feedback.push_back(HopEvent::Ended {
                        to,
                        edge,
                        status,
                        timed_out,
                        delay,
                    });
                }
                EndpointEvent::AuthFailed { from } if self.auth_failures.len() < MAX_FEEDBACK => {
                    self.auth_failures.push_back(from.addr.ip());
                }
                _ => {}
            }
        }
    }
}

/// Most next-hop answers held for the worker.
const MAX_FEEDBACK: usize = 1024;

/// A controller's rejection as the endpoint's gate answer.
fn gate_rejection(r: Rejection) -> GateRejection {
    GateRejection {
        status: r.status,
        reason: reason_phrase(r.status),
        // SIP carries whole seconds: round up.
        retry_after_secs: r
            .retry_after
            .map(|d| u32::try_from(d.as_millis().div_ceil(1000)).unwrap_or(u32::MAX)),
        text: Some(reason_text(r.reason)),
    }
}

/// The reason phrase of a rejection's status (RFC 3261 §21; DEOC's restrictor may answer
/// with any of `holdline_overload::RESTRICTOR_STATUSES`).
fn reason_phrase(status: u16) -> &'static str {
    match status {
        480 => "Temporarily Unavailable",
        486 => "Busy Here",
        500 => "Server Internal Error",
        600 => "Busy Everywhere",
        603 => "Decline",
        _ => "Service Unavailable",
    }
}

/// The `Reason` text of a rejection: this server's own load, or a next hop's.
fn reason_text(r: holdline_overload::RejectReason) -> &'static str {
    use holdline_overload::RejectReason as R;
    match r {
        R::QueueFull => "Overload: queue_full",
        R::Occupancy => "Overload: occupancy",
        R::QueueDelay => "Overload: queue_delay",
        R::DeferTimeout => "Overload: defer_timeout",
        R::TargetBacklog => "Downstream overload: target_backlog",
        R::LossThrottle => "Downstream overload: loss_throttle",
        R::RateThrottle => "Downstream overload: rate_throttle",
        R::WindowFull => "Downstream overload: window_full",
        R::CallGap => "Downstream overload: call_gap",
        R::Maintenance => "Maintenance: draining",
        _ => "Overload",
    }
}

/// The DNS lines of one worker (RFC 3263 resolution of DNS routes' next hops).
fn render_dns(s: &EndpointStats, d: &holdline_proto::DnsStats, out: &mut String) {
    let _ = writeln!(
        out,
        "holdline_dns_lookups_total {}\n\
         holdline_dns_answers_total{{result=\"records\"}} {}\n\
         holdline_dns_answers_total{{result=\"not_found\"}} {}\n\
         holdline_dns_answers_total{{result=\"failed\"}} {}\n\
         holdline_dns_cache_hits_total {}\n\
         holdline_dns_cache_misses_total {}\n\
         holdline_dns_cache_entries {}\n\
         holdline_dns_targets_failed_total {}\n\
         holdline_dns_parked {}\n\
         holdline_dns_parked_total {}\n\
         holdline_dns_rejected_total{{reason=\"parking_full\"}} {}\n\
         holdline_dns_rejected_total{{reason=\"timeout\"}} {}\n\
         holdline_dns_rejected_total{{reason=\"unresolved\"}} {}",
        d.queries,
        d.answers,
        d.not_found,
        d.failures,
        d.cache_hits,
        d.cache_misses,
        d.entries,
        d.targets_marked,
        s.dns_parked,
        s.dns_parked_total,
        s.dns_park_full,
        s.dns_park_timeouts,
        s.dns_unresolved,
    );
}

impl WorkerCore for Engine {
    fn reconfigure(&mut self, config: &ServerConfig) {
        let mut p = self.endpoint.config().clone();
        live_routing(config, &mut p);
        self.endpoint.reconfigure(&p);
    }

    fn in_flight(&self) -> usize {
        self.endpoint.active_calls() + self.endpoint.pending_branches()
    }

    fn handle(&mut self, now: Instant, bytes: &[u8], from: Peer) {
        self.endpoint.handle(now, bytes, from, from.transport);
        self.drain_events();
    }

    fn handle_admitting(
        &mut self,
        now: Instant,
        bytes: &[u8],
        from: Peer,
        admit: &mut dyn FnMut(Class, bool) -> Option<Rejection>,
        forward: &mut dyn FnMut(Peer, Option<holdline_proto::EdgeId>) -> Option<Rejection>,
    ) -> bool {
        let rejected = self.endpoint.handle_admitting(
            now,
            bytes,
            from,
            from.transport,
            &mut |class, exempt| admit(class, exempt).map(gate_rejection),
            &mut |dest, edge| forward(dest, edge).map(gate_rejection),
        );
        self.drain_events();
        rejected
    }

    fn set_overload_answer(&mut self, answer: Option<OverloadAnswer>) {
        self.endpoint.set_overload_answer(answer);
    }

    fn take_feedback_tally(&mut self) -> holdline_proto::FeedbackTally {
        self.endpoint.take_feedback_tally()
    }

    fn poll_hop_event(&mut self) -> Option<HopEvent> {
        self.feedback.pop_front()
    }

    fn poll_dns_query(&mut self) -> Option<holdline_proto::DnsQuery> {
        self.endpoint.poll_dns_query()
    }

    fn handle_dns_response(&mut self, now: Instant, response: holdline_proto::DnsResponse) {
        self.endpoint.handle_dns_response(now, response);
        self.drain_events();
    }

    fn poll_auth_failure(&mut self) -> Option<std::net::IpAddr> {
        self.auth_failures.pop_front()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.endpoint.handle_timeout(now);
        if let Some(t) = self.next_purge.filter(|t| *t <= now) {
            let parts = self.store.purge_parts().max(1);
            let part = self.purge_cursor % parts;
            self.purged += self.store.purge_part(now, part) as u64;
            self.purge_cursor = (part + 1) % parts;
            let step = PURGE_EVERY / u32::try_from(parts).unwrap_or(u32::MAX);
            self.next_purge = Some(t.max(now) + step);
        }
        self.drain_events();
    }

    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.endpoint.poll_transmit(now, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match (self.endpoint.poll_timeout(), self.next_purge) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn metrics(&self, out: &mut String) {
        let s = self.endpoint.stats();
        let m = &s.requests_in;
        for (method, n) in [
            ("INVITE", m.invite),
            ("ACK", m.ack),
            ("BYE", m.bye),
            ("CANCEL", m.cancel),
            ("OPTIONS", m.options),
            ("REGISTER", m.register),
            ("other", m.other),
        ] {
            let _ = writeln!(
                out,
                "holdline_sip_requests_in_total{{method=\"{method}\"}} {n}"
            );
        }
        // Index k counts status class k + 1 (1xx at 0, 6xx at 5).
        for (k, (i, o)) in s.responses_in.iter().zip(&s.responses_out).enumerate() {
            let class = k + 1;
            let _ = writeln!(
                out,
                "holdline_sip_responses_in_total{{class=\"{class}xx\"}} {i}"
            );
            let _ = writeln!(
                out,
                "holdline_sip_responses_out_total{{class=\"{class}xx\"}} {o}"
            );
        }
        let _ = writeln!(out, "holdline_sip_parse_errors_total {}", s.parse_errors);
        for r in DropReason::ALL {
            let _ = writeln!(
                out,
                "holdline_sip_drops_total{{reason=\"{r:?}\"}} {}",
                s.dropped(r)
            );
        }
        let _ = writeln!(out, "holdline_sip_forwarded_total {}", s.forwarded);
        let _ = writeln!(out, "holdline_sip_to_own_socket_total {}", s.to_own_socket);
        let _ = writeln!(out, "holdline_sip_relay_denied_total {}", s.relay_denied);
        if self.endpoint.config().auth.is_some() {
            let a = &s.auth;
            let _ = writeln!(
                out,
                "holdline_auth_challenges_total{{code=\"401\"}} {}\n\
                 holdline_auth_challenges_total{{code=\"407\"}} {}",
                a.challenges_401, a.challenges_407
            );
            for (result, n) in [
                ("ok", a.ok),
                ("failed", a.failed),
                ("stale", a.stale),
                ("replayed", a.replayed),
                ("invalid", a.invalid),
                ("forbidden", a.forbidden),
            ] {
                let _ = writeln!(out, "holdline_auth_total{{result=\"{result}\"}} {n}");
            }
        }
        let _ = writeln!(
            out,
            "holdline_feedback_answers_total {}\n\
             holdline_feedback_gate_exempt_total {}\n\
             holdline_feedback_reports_total{{result=\"valid\"}} {}\n\
             holdline_feedback_reports_total{{result=\"malformed\"}} {}",
            s.overload_answers, s.gate_exempt, s.overload_reports, s.overload_reports_malformed
        );
        if let Some(a) = self.endpoint.overload_answer() {
            let total = |r: holdline_proto::RateAnswer| match r {
                holdline_proto::RateAnswer::Total(n) => n,
                _ => 0,
            };
            let _ = writeln!(
                out,
                "holdline_feedback_answer_loss_percent {}\n\
                 holdline_feedback_answer_rate {}\n\
                 holdline_feedback_answer_window {}",
                a.loss_percent,
                total(a.rate),
                total(a.window)
            );
        }
        let _ = writeln!(
            out,
            "holdline_sip_rejected_overload_total {}",
            s.rejected_by_gate
        );
        let _ = writeln!(
            out,
            "holdline_sip_rejection_acks_absorbed_total {}",
            s.gate_acks_absorbed
        );
        let _ = writeln!(
            out,
            "holdline_sip_rejected_forward_total {}",
            s.rejected_by_forward_gate
        );
        let _ = writeln!(
            out,
            "holdline_sip_stateless_forwarded_total {}",
            s.stateless
        );
        let _ = writeln!(out, "holdline_sip_redirected_total {}", s.redirected);
        let lc = &s.load_control;
        for (name, v) in [
            ("rejected_total", lc.rejected),
            ("accepted_total", lc.accepted),
            ("subscribes_received_total", lc.subscribes_received),
            ("subscriptions", lc.subscriptions),
            ("notifies_sent_total", lc.notifies_sent),
            ("notifies_failed_total", lc.notifies_failed),
            ("subscribes_sent_total", lc.subscribes_sent),
            ("subscribes_failed_total", lc.subscribes_failed),
            ("notifies_received_total", lc.notifies_received),
            ("documents_refused_total", lc.documents_refused),
        ] {
            let _ = writeln!(out, "holdline_load_control_{name} {v}");
        }
        let _ = writeln!(
            out,
            "holdline_registrar_propagated_total {}",
            s.registrations_propagated
        );
        let _ = writeln!(
            out,
            "holdline_registrar_propagation_acked_total {}",
            s.registration_copies_acked
        );
        let _ = writeln!(
            out,
            "holdline_registrar_propagation_failures_total {}",
            s.registration_copies_failed
        );
        for r in StatelessFallback::ALL {
            let _ = writeln!(
                out,
                "holdline_sip_stateless_fallbacks_total{{reason=\"{}\"}} {}",
                r.label(),
                s.fell_back(r)
            );
        }
        let _ = writeln!(
            out,
            "holdline_sip_server_transactions_total {}",
            s.server_transactions_total
        );
        let _ = writeln!(
            out,
            "holdline_sip_retransmissions_absorbed_total {}",
            s.retransmissions_absorbed
        );
        let _ = writeln!(out, "holdline_sip_acks_absorbed_total {}", s.acks_absorbed);
        let _ = writeln!(out, "holdline_sip_failovers_total {}", s.failovers);
        if self.endpoint.config().learn_edges {
            let _ = writeln!(out, "holdline_deoc_edges_learned {}", s.edges_learned);
        }
        if self.endpoint.config().uses_dns() {
            render_dns(s, &self.endpoint.dns_stats(), out);
        }
        let _ = writeln!(
            out,
            "holdline_register_commit_waits_total {}",
            s.register_commit_waits
        );
        let _ = writeln!(
            out,
            "holdline_register_commit_timeouts_total {}",
            s.register_commit_timeouts
        );
        s.register_commit_wait
            .render_prometheus("holdline_register_commit_wait_seconds", "", out);
        let _ = writeln!(out, "holdline_sip_probes_total {}", s.probes_sent);
        let _ = writeln!(out, "holdline_sip_probes_failed_total {}", s.probes_failed);
        let _ = writeln!(out, "holdline_sip_targets_down {}", s.targets_down);
        for t in self.endpoint.probed_targets() {
            let labels = format!(
                "target=\"{}\",transport=\"{}\"",
                t.dest.addr,
                t.dest.transport.as_param_str()
            );
            let _ = writeln!(out, "holdline_sip_target_up{{{labels}}} {}", u8::from(t.up));
            let _ = writeln!(
                out,
                "holdline_sip_target_probe_failures{{{labels}}} {}",
                t.failures
            );
        }
        let t = self.endpoint.transactions().stats();
        let _ = writeln!(out, "holdline_sip_active_transactions {}", t.transactions);
        let _ = writeln!(out, "holdline_txn_lingering {}", t.lingering);
        let _ = writeln!(out, "holdline_txn_memory_bytes {}", t.memory_bytes);
        let _ = writeln!(out, "holdline_txn_kept_bytes {}", t.kept_bytes);
        let _ = writeln!(out, "holdline_txn_index_bytes {}", t.index_bytes);
        let _ = writeln!(out, "holdline_txn_evicted_total {}", t.evicted);
        let _ = writeln!(out, "holdline_txn_refused_total {}", t.refused);
        let _ = writeln!(
            out,
            "holdline_sip_active_calls {}",
            self.endpoint.active_calls()
        );
        if self.next_purge.is_some() {
            let _ = writeln!(
                out,
                "holdline_load_control_filters {}",
                self.endpoint.config().load_control.shared.rules()
            );
            let _ = writeln!(out, "holdline_store_bindings {}", self.store.len());
            let _ = writeln!(out, "holdline_store_purged_total {}", self.purged);
            if let Some(r) = &self.redis {
                render_redis(&r.stats(), out);
            }
            if let Some(p) = &self.persistent {
                render_persistent(&p.stats(), out);
            }
        }
    }
}

/// The persistent store's counters and commit times (worker 0 only: the store is shared).
fn render_persistent(s: &holdline_store::StoreStats, out: &mut String) {
    render_lines(
        &[
            ("holdline_store_commits_total", s.batches_written),
            ("holdline_store_records_written_total", s.records_written),
            ("holdline_store_pending", s.pending as u64),
            ("holdline_store_write_errors_total", s.write_errors),
        ],
        out,
    );
    s.commit_times
        .render_prometheus("holdline_store_commit_seconds", "", out);
}

/// One unlabelled sample per `(name, value)`.
fn render_lines(lines: &[(&str, u64)], out: &mut String) {
    for (name, v) in lines {
        let _ = writeln!(out, "{name} {v}");
    }
}

/// The Redis store's counters (worker 0 only: the store is shared).
fn render_redis(s: &holdline_store::RedisStats, out: &mut String) {
    let lines = [
        ("holdline_store_redis_batches_total", s.batches_written),
        (
            "holdline_store_redis_records_written_total",
            s.records_written,
        ),
        ("holdline_store_redis_pending", s.pending as u64),
        ("holdline_store_redis_write_errors_total", s.write_errors),
        (
            "holdline_store_redis_connect_errors_total",
            s.connect_errors,
        ),
        (
            "holdline_store_redis_replica_shortfalls_total",
            s.replica_shortfalls,
        ),
        (
            "holdline_store_redis_notices_applied_total",
            s.notices_applied,
        ),
        (
            "holdline_store_redis_notices_ignored_total",
            s.notices_ignored,
        ),
        ("holdline_store_redis_bad_records_total", s.bad_records),
        ("holdline_store_redis_resyncs_total", s.resyncs),
        ("holdline_store_redis_reseeds_total", s.reseeds),
        (
            "holdline_store_redis_inbox_overflows_total",
            s.inbox_overflows,
        ),
    ];
    render_lines(&lines, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdline_base::{Peer, Transport};
    use holdline_proto::MemoryLocationStore;

    #[test]
    fn workers_share_the_gate_key_and_not_the_branch_seed() {
        let at = |a: &str| {
            [Listener {
                transport: Transport::Tcp,
                addr: a.parse().expect("addr"),
            }]
        };
        let c = ServerConfig::default();
        let (w0, w1) = (
            proxy_config(&c, &at("127.0.0.1:5060"), 0),
            proxy_config(&c, &at("127.0.0.1:5060"), 1),
        );
        assert_eq!(w0.gate_key, w1.gate_key);
        assert_ne!(w0.branch_seed, w1.branch_seed);
        // A restart (the same worker built again) draws new branches.
        let again = proxy_config(&c, &at("127.0.0.1:5060"), 0);
        assert_ne!(w0.branch_seed, again.branch_seed);
        let other = proxy_config(&c, &at("127.0.0.1:5070"), 0);
        assert_ne!(w0.gate_key, other.gate_key, "another server, another key");
    }

    /// Worker 0's engine with the default configuration, listening on UDP 127.0.0.1:5060.
    fn udp_engine(store: Arc<dyn LocationStore>) -> Engine {
        let bound = [Listener {
            transport: Transport::Udp,
            addr: "127.0.0.1:5060".parse().expect("addr"),
        }];
        Engine::new(proxy_config(&ServerConfig::default(), &bound, 0), store, 0)
    }

    #[test]
    fn metrics_show_the_persistent_stores_commits_and_their_times() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(
            PersistentStore::open(dir.path().join("l.redb"), Instant::ZERO).expect("open"),
        );
        let e = udp_engine(store.clone()).with_persistent(Some(store.clone()));
        for aor in [&b"a@x"[..], b"b@x"] {
            store.modify(aor, Instant::ZERO, &mut |b| {
                b.push(holdline_proto::Binding {
                    contact: b"sip:a@127.0.0.1"[..].into(),
                    expires_at: Instant::from_secs(3_600),
                    q: 1000,
                    call_id: b"c"[..].into(),
                    cseq: 1,
                    source: None,
                });
            });
            store.flush().expect("committed");
        }
        let mut text = String::new();
        e.metrics(&mut text);
        assert!(text.contains("holdline_store_commits_total 2"), "{text}");
        assert!(
            text.contains("holdline_store_commit_seconds_count 2"),
            "{text}"
        );
        let buckets: Vec<u64> = text
            .lines()
            .filter(|l| l.starts_with("holdline_store_commit_seconds_bucket{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        assert_eq!(buckets.len(), holdline_base::WAIT_BOUNDS_US.len() + 1);
        assert!(
            buckets.windows(2).all(|w| w[0] <= w[1]),
            "cumulative: {text}"
        );
        assert_eq!(buckets.last(), Some(&2), "+Inf holds every commit: {text}");
        assert!(
            text.contains("holdline_store_commit_seconds_bucket{le=\"0.000500\"}"),
            "{text}"
        );
    }

    #[test]
    fn metrics_label_status_classes_correctly() {
        let mut e = udp_engine(Arc::new(MemoryLocationStore::new()));
        // A health probe to the engine's own address: answered 200 (class 2).
        let req = b"OPTIONS sip:127.0.0.1:5060 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bKm\r\n\
Max-Forwards: 70\r\nTo: <sip:127.0.0.1:5060>\r\nFrom: <sip:a@127.0.0.1>;tag=1\r\nCall-ID: m@1\r\n\
CSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n";
        let from = Peer {
            addr: "127.0.0.1:9".parse().expect("addr"),
            transport: Transport::Udp,
            conn: None,
        };
        e.handle(Instant::ZERO, req, from);
        let mut buf = Vec::new();
        let t = e
            .poll_transmit(Instant::ZERO, &mut buf)
            .expect("a response");
        assert!(buf[..t.size].starts_with(b"SIP/2.0 200"));
        let mut text = String::new();
        e.metrics(&mut text);
        assert!(
            text.contains("holdline_sip_responses_out_total{class=\"2xx\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("holdline_sip_responses_out_total{class=\"1xx\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("holdline_sip_requests_in_total{method=\"OPTIONS\"} 1"),
            "{text}"
        );
        // Answered here through a server transaction; nothing fell back (stateful mode).
        assert!(
            text.contains("holdline_sip_server_transactions_total 1"),
            "{text}"
        );
        for reason in [
            "transport",
            "auth",
            "dns",
            "transaction",
            "answered",
            "fork",
        ] {
            assert!(
                text.contains(&format!(
                    "holdline_sip_stateless_fallbacks_total{{reason=\"{reason}\"}} 0"
                )),
                "{text}"
            );
        }
    }

    #[test]
    fn the_mode_reaches_the_proxy() {
        let bound = [Listener {
            transport: Transport::Udp,
            addr: "127.0.0.1:5060".parse().expect("addr"),
        }];
        let c = ServerConfig::from_toml("m.toml", "mode = \"stateless\"\n").expect("valid");
        assert_eq!(
            proxy_config(&c, &bound, 0).mode,
            holdline_proto::ProxyMode::Stateless
        );
        assert_eq!(
            proxy_config(&ServerConfig::default(), &bound, 0).mode,
            holdline_proto::ProxyMode::Stateful
        );
    }

    /// Worker 0 purges expired bindings one store part per step, walking the whole store
    /// once per `PURGE_EVERY`: never all at once (a million bindings stalled it 33 ms).
    #[test]
    fn expired_bindings_are_purged_one_part_at_a_time_within_the_period() {
        let store = Arc::new(MemoryStore::new());
        let mut e = udp_engine(store.clone());
        let t0 = Instant::from_secs(100);
        for i in 0..2_000 {
            store.modify(format!("u{i}@example.com").as_bytes(), t0, &mut |v| {
                v.push(holdline_proto::Binding {
                    contact: format!("sip:u{i}@192.0.2.1").into_bytes().into(),
                    expires_at: t0 + Duration::from_secs(1),
                    q: 1000,
                    call_id: b"c".to_vec().into(),
                    cseq: 1,
                    source: None,
                })
            });
        }
        let now = t0 + Duration::from_secs(2);
        let parts = store.purge_parts();
        assert!(parts > 1);
        let mut steps = Vec::new();
        let mut at = now;
        while store.len() > 0 && at < now + PURGE_EVERY * 2 {
            e.handle_timeout(at);
            steps.push(store.len());
            at = e.poll_timeout().expect("the next purge step").max(at);
        }
        assert_eq!(store.len(), 0, "all purged within two periods");
        assert!(
            at <= now + PURGE_EVERY + PURGE_EVERY / 4,
            "in about one period"
        );
        assert!(
            steps.len() >= parts - 1,
            "{} steps for {parts} parts",
            steps.len()
        );
        let largest = steps
            .windows(2)
            .map(|w| w[0] - w[1])
            .chain(std::iter::once(2_000 - steps[0]))
            .max()
            .unwrap_or(0);
        assert!(largest < 2_000 / 8, "a step purged {largest} of 2,000");
    }
}
