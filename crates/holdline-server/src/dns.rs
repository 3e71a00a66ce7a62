//! DNS lookups for the workers, off their threads (RFC 3263 resolution of `sip:` route
//! targets).
//!
//! ```text
//!  worker i: Endpoint ──poll_dns_query──> DnsHandle::submit (try_send, never waits)
//!                                              │ bounded queue
//!                                              v
//!  resolver thread: tokio current-thread runtime, one task per lookup (hickory-resolver,
//!                   NAPTR / SRV / A+AAAA, its own cache off: the workers' caches decide)
//!                                              │ Handoff::Dns(answer) + wake worker i
//!  worker i: Endpoint::handle_dns_response <───┘
//! ```
//!
//! The workers never wait for DNS: a lookup leaves the sans-IO core as a query and comes back
//! as an input. Every lookup is a task of its own, so a slow server or name delays only the
//! requests waiting for that name.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::rr::{RData, RecordType};
use hickory_resolver::{Resolver, TokioResolver};
use holdline_proto::DnsResponse;
use holdline_proto::dns::{DnsAnswer, DnsQuery, DnsRecords, NaptrRecord, QueryKind, SrvRecord};

use crate::config::DnsSettings;
use crate::worker::{Handoff, Shared};

/// Lookups waiting for the resolver thread (beyond: failed at once).
const QUEUE: usize = 4096;

/// Why the resolver could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DnsSetupError {
    /// No name servers configured and the system's configuration could not be read.
    #[error("dns: cannot read the system's resolver configuration ({0}); set [dns] servers")]
    SystemConfig(String),
    /// The resolver could not be built.
    #[error("dns: cannot build the resolver: {0}")]
    Build(String),
    /// The runtime or the thread could not be created.
    #[error("dns: cannot start the resolver thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// The resolver thread's counters.
#[derive(Debug, Default)]
pub(crate) struct ResolverStats {
    /// Lookups taken from the workers.
    pub(crate) submitted: AtomicU64,
    /// Lookups refused because the queue was full (failed at once).
    pub(crate) refused: AtomicU64,
    /// Lookups finished (answered, negative or failed).
    pub(crate) done: AtomicU64,
    /// Answers lost because the worker's hand-off queue was full.
    pub(crate) undelivered: AtomicU64,
    /// Total time of the finished lookups, ns.
    pub(crate) busy_ns: AtomicU64,
}

/// The workers' end of the resolver thread's queue (in [`Shared`]).
#[derive(Debug)]
pub(crate) struct DnsHandle {
    tx: Mutex<Option<tokio::sync::mpsc::Sender<Job>>>,
    pub(crate) stats: Arc<ResolverStats>,
}

#[derive(Debug)]
struct Job {
    worker: usize,
    query: DnsQuery,
}

impl DnsHandle {
    /// Queues a lookup for worker `worker`; `false` when it cannot be taken (the queue is
    /// full or closed). Never waits.
    pub(crate) fn submit(&self, worker: usize, query: DnsQuery) -> bool {
        let Ok(guard) = self.tx.lock() else {
            return false;
        };
        let taken = guard
            .as_ref()
            .is_some_and(|tx| tx.try_send(Job { worker, query }).is_ok());
        if taken {
            self.stats.submitted.fetch_add(1, Relaxed);
        } else {
            self.stats.refused.fetch_add(1, Relaxed);
        }
        taken
    }

    /// Closes the queue: the resolver thread ends.
    pub(crate) fn close(&self) {
        if let Ok(mut g) = self.tx.lock() {
            g.take();
        }
    }

    /// Prometheus lines of the resolver thread.
    pub(crate) fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let s = &self.stats;
        let _ = write!(
            out,
            "# HELP holdline_dns_resolver_lookups_total DNS lookups taken by the resolver thread.\n\
             # TYPE holdline_dns_resolver_lookups_total counter\n\
             holdline_dns_resolver_lookups_total {}\n\
             # HELP holdline_dns_resolver_refused_total DNS lookups refused (resolver queue full): failed at once.\n\
             # TYPE holdline_dns_resolver_refused_total counter\n\
             holdline_dns_resolver_refused_total {}\n\
             # HELP holdline_dns_resolver_done_total DNS lookups finished (answered, negative or failed).\n\
             # TYPE holdline_dns_resolver_done_total counter\n\
             holdline_dns_resolver_done_total {}\n\
             # HELP holdline_dns_resolver_undelivered_total DNS answers lost to a full worker hand-off queue.\n\
             # TYPE holdline_dns_resolver_undelivered_total counter\n\
             holdline_dns_resolver_undelivered_total {}\n\
             # HELP holdline_dns_resolver_seconds_total Time the finished DNS lookups took.\n\
             # TYPE holdline_dns_resolver_seconds_total counter\n\
             holdline_dns_resolver_seconds_total {:.6}\n",
            s.submitted.load(Relaxed),
            s.refused.load(Relaxed),
            s.done.load(Relaxed),
            s.undelivered.load(Relaxed),
            s.busy_ns.load(Relaxed) as f64 / 1e9,
        );
    }
}

/// The resolver thread's end, before it runs.
pub(crate) struct DnsRunner {
    rx: tokio::sync::mpsc::Receiver<Job>,
    settings: DnsSettings,
    stats: Arc<ResolverStats>,
}

/// The queue between the workers and the resolver thread.
pub(crate) fn channel(settings: &DnsSettings) -> (DnsHandle, DnsRunner) {
    let (tx, rx) = tokio::sync::mpsc::channel(QUEUE);
    let stats = Arc::new(ResolverStats::default());
    (
        DnsHandle {
            tx: Mutex::new(Some(tx)),
            stats: stats.clone(),
        },
        DnsRunner {
            rx,
            settings: settings.clone(),
            stats,
        },
    )
}

/// A hickory resolver for `settings`: its name servers (else the system's), timeout and
/// attempts; its own cache kept out of the way (the workers cache, with their rules).
fn build_resolver(settings: &DnsSettings) -> Result<TokioResolver, DnsSetupError> {
    let provider = TokioRuntimeProvider::default();
    let mut builder = if settings.servers.is_empty() {
        Resolver::builder(provider).map_err(|e| DnsSetupError::SystemConfig(e.to_string()))?
    } else {
        let mut config = ResolverConfig::default();
        for s in &settings.servers {
            config.add_name_server(name_server(*s));
        }
        Resolver::builder_with_config(config, provider)
    };
    let opts: &mut ResolverOpts = builder.options_mut();
    opts.timeout = Duration::from_millis(settings.timeout_ms.max(1));
    opts.attempts = settings.attempts.max(1);
    opts.cache_size = 0;
    opts.positive_max_ttl = Some(Duration::ZERO);
    opts.negative_max_ttl = Some(Duration::ZERO);
    // Names are asked fully qualified: no search domains.
    opts.ndots = 0;
    builder
        .build()
        .map_err(|e| DnsSetupError::Build(e.to_string()))
}

/// A name server at `addr`, over UDP and TCP (truncated answers), on its port.
fn name_server(addr: SocketAddr) -> NameServerConfig {
    let mut ns = NameServerConfig::udp_and_tcp(addr.ip());
    for c in &mut ns.connections {
        c.port = addr.port();
    }
    ns
}

impl DnsRunner {
    /// Starts the resolver thread; answers go to the workers of `shared` (while it lives).
    pub(crate) fn spawn(self, shared: Weak<Shared>) -> Result<JoinHandle<()>, DnsSetupError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let resolver = {
            let _guard = runtime.enter();
            Arc::new(build_resolver(&self.settings)?)
        };
        let Self { mut rx, stats, .. } = self;
        let thread = std::thread::Builder::new()
            .name("holdline-dns".into())
            .spawn(move || {
                runtime.block_on(async move {
                    while let Some(job) = rx.recv().await {
                        let resolver = resolver.clone();
                        let shared = shared.clone();
                        let stats = stats.clone();
                        // One task per lookup: a slow one holds up nothing else.
                        tokio::spawn(async move {
                            let t0 = std::time::Instant::now();
                            let answer = lookup(&resolver, &job.query).await;
                            stats
                                .busy_ns
                                .fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
                            stats.done.fetch_add(1, Relaxed);
                            let response = DnsResponse {
                                query: job.query,
                                answer,
                            };
                            deliver(&shared, job.worker, response, &stats);
                        });
                    }
                });
            })?;
        Ok(thread)
    }
}

/// Hands an answer to the worker that asked, and wakes it.
fn deliver(shared: &Weak<Shared>, worker: usize, response: DnsResponse, stats: &ResolverStats) {
    let Some(shared) = shared.upgrade() else {
        return;
    };
    let (Some(tx), Some(waker)) = (shared.senders.get(worker), shared.wakers.get(worker)) else {
        return;
    };
    if tx.try_send(Handoff::Dns(response)).is_err() {
        // The worker asks again once its wait for this answer ends.
        stats.undelivered.fetch_add(1, Relaxed);
        return;
    }
    let _ = waker.wake();
}

/// The fully qualified form of `name` (no search domains).
fn fqdn(name: &str) -> String {
    format!("{}.", name.trim_end_matches('.'))
}

/// One lookup, its answer in the core's terms.
async fn lookup(resolver: &TokioResolver, query: &DnsQuery) -> DnsAnswer {
    let name = fqdn(&query.name);
    let result = match query.kind {
        QueryKind::Naptr => resolver.lookup(name.as_str(), RecordType::NAPTR).await,
        QueryKind::Srv => resolver.lookup(name.as_str(), RecordType::SRV).await,
        QueryKind::Addr => resolver
            .lookup_ip(name.as_str())
            .await
            .map(|l| l.as_lookup().clone()),
    };
    let lookup = match result {
        Ok(l) => l,
        Err(e) => return failure(&e),
    };
    let mut ttl = u32::MAX;
    let mut naptr = Vec::new();
    let mut srv = Vec::new();
    let mut addrs = Vec::new();
    for r in lookup.answers() {
        let used = match (&r.data, query.kind) {
            (RData::NAPTR(n), QueryKind::Naptr) => {
                naptr.push(NaptrRecord {
                    order: n.order,
                    preference: n.preference,
                    flags: String::from_utf8_lossy(&n.flags).into_owned(),
                    services: String::from_utf8_lossy(&n.services).into_owned(),
                    replacement: n.replacement.to_ascii(),
                });
                true
            }
            (RData::SRV(s), QueryKind::Srv) => {
                srv.push(SrvRecord {
                    priority: s.priority,
                    weight: s.weight,
                    port: s.port,
                    target: s
                        .target
                        .to_ascii()
                        .trim_end_matches('.')
                        .to_ascii_lowercase(),
                });
                true
            }
            (RData::A(a), QueryKind::Addr) => {
                addrs.push(std::net::IpAddr::V4(a.0));
                true
            }
            (RData::AAAA(a), QueryKind::Addr) => {
                addrs.push(std::net::IpAddr::V6(a.0));
                true
            }
            _ => false,
        };
        if used {
            ttl = ttl.min(r.ttl);
        }
    }
    let records = match query.kind {
        QueryKind::Naptr if !naptr.is_empty() => DnsRecords::Naptr(naptr),
        QueryKind::Srv if !srv.is_empty() => DnsRecords::Srv(srv),
        QueryKind::Addr if !addrs.is_empty() => DnsRecords::Addr(addrs),
        _ => return DnsAnswer::NotFound { ttl: None },
    };
    DnsAnswer::Records {
        records,
        ttl: Duration::from_secs(u64::from(ttl)),
    }
}

/// A failed lookup in the core's terms: an authoritative "no such name or record" (with
/// its negative TTL), or no answer.
fn failure(e: &NetError) -> DnsAnswer {
    match e {
        NetError::Dns(DnsError::NoRecordsFound(nr)) => DnsAnswer::NotFound {
            ttl: nr.negative_ttl.map(|s| Duration::from_secs(u64::from(s))),
        },
        _ => DnsAnswer::Failed,
    }
}
