//! `holdline`: the command-line entry point.
//!
//! A thin `main` over the libraries. Subcommands that are not built yet say so and exit
//! with status 2, so scripts can tell "not available" from "failed".

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod ctl;
mod load;
mod netem;
mod sim;
mod status;

/// mimalloc instead of glibc's malloc: the workers allocate and free message buffers on
/// every loop, and glibc's per-thread arenas answered that with an `mprotect` call per few
/// messages (measured with strace at 2,000 calls/s: 1,400 per second).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use holdline_server::{Listener, Overrides, Route, Server, ServerConfig, StoreSpec};

/// A SIP proxy and registrar that keeps carrying calls at full capacity under overload, and the
/// lab that proves it.
#[derive(Debug, Parser)]
#[command(name = "holdline", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the SIP proxy and registrar.
    Serve(ServeArgs),
    /// Manage the users file of digest authentication (`[auth] users_file`).
    User(UserArgs),
    /// Generate SIP load or answer calls (uac, uas, register, pair).
    Load(load::LoadArgs),
    /// Compare holdline with Kamailio: capacity, cost per call, overload curves.
    #[command(disable_help_flag = true)]
    Bench(Rest),
    /// Run a named experiment of the lab (`holdline lab --help` lists them).
    #[command(disable_help_flag = true)]
    Lab(Rest),
    /// Run the discrete-event simulator.
    Sim(sim::SimArgs),
    /// Run the user-space network emulator (`run`) or measure its accuracy (`check`).
    Netem(netem::NetemArgs),
    /// What a running server is doing: calls, overload, store, probed targets (from its
    /// `/metrics`).
    Status(status::StatusArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff, man(7)) on stdout: `holdline man | man -l -`.
    Man,
    /// Control a running server over its control socket: status, bindings, routes,
    /// next-hops, log-level, reload, drain.
    Ctl(ctl::CtlArgs),
}

/// Installs the global logger on stderr — human-readable text or one JSON object per line
/// (`log_format`) — behind a filter that `holdline ctl log-level` and reloads replace.
fn init_logging(
    filter: tracing_subscriber::EnvFilter,
    format: &str,
) -> tracing_subscriber::reload::Handle<tracing_subscriber::EnvFilter, tracing_subscriber::Registry>
{
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    let output = if format == "json" {
        tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .boxed()
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(output)
        .init();
    handle
}

/// Arguments handed unparsed to a subcommand with its own parser (`bench`, `lab`).
#[derive(Debug, clap::Args)]
struct Rest {
    /// Arguments for the subcommand.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// `holdline serve`: command-line values override the configuration file's.
#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// TOML configuration file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Listen on udp:IP:PORT, tcp:IP:PORT or tls:IP:PORT (repeatable; replaces the file's
    /// list; tls needs `[tls] cert_file` and `key_file`).
    #[arg(long, value_name = "TRANSPORT:IP:PORT")]
    listen: Vec<Listener>,
    /// A domain this server is responsible for (repeatable).
    #[arg(long, value_name = "NAME")]
    domain: Vec<String>,
    /// Location store: `memory`, a directory, or shared through Redis:
    /// `redis://HOST:PORT[/DB][?namespace=NAME]` or
    /// `redis+sentinel://HOST:PORT[,HOST:PORT]/MASTER[?namespace=NAME]`.
    #[arg(long, value_name = "memory|PATH|redis://...")]
    store: Option<StoreSpec>,
    /// Worker threads (default: one per core).
    #[arg(long, value_name = "N")]
    workers: Option<usize>,
    /// Serve Prometheus metrics on IP:PORT (GET /metrics), and the status page (GET /).
    #[arg(long, value_name = "IP:PORT")]
    metrics: Option<SocketAddr>,
    /// Record-Route initial dialog-creating requests (default on).
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    record_route: Option<bool>,
    /// Write HOST[:PORT] (a cluster's name) into Record-Route instead of the listener's
    /// address, and take a Route naming it as this server's (`record_route_host`).
    #[arg(long, value_name = "HOST[:PORT]")]
    record_route_host: Option<String>,
    /// Static route DOMAIN=udp:IP:PORT (or tcp:, tls:; `*` for any domain; `,stateless`,
    /// `,deoc_target=NAME` (DEOC's target edge) and, for tls, `,server_name=NAME` suffixes),
    /// or DOMAIN=sip:NAME resolved with DNS (RFC 3263: NAPTR, SRV, A/AAAA; `[dns]` in the
    /// config file).
    #[arg(long, value_name = "DOMAIN=TRANSPORT:IP:PORT")]
    route: Vec<Route>,
    /// Local overload control: occ (default), queue-delay, queue-limit, bang-bang, or none
    /// (no admission gate).
    #[arg(long, value_name = "ALGORITHM")]
    overload: Option<String>,
    /// Capacity emulation for experiments: add N microseconds of CPU work to every message
    /// handled, rejections included.
    #[arg(long, value_name = "N")]
    emulate_cost_us: Option<u64>,
    /// Capacity emulation: the CPU work added to a rejected INVITE instead, microseconds
    /// (default: --emulate-cost-us).
    #[arg(long, value_name = "N")]
    emulate_reject_cost_us: Option<u64>,
    /// Capacity emulation: wait the emulated cost (a sleep, the last 100 µs spun) instead of
    /// spinning it: as busy and as slow, the machine's CPU free.
    #[arg(long)]
    emulate_sleep: bool,
    /// TCP smart forwarding to next hops: off, ics or ecs (default ics; off with
    /// `--overload none`).
    #[arg(long, value_name = "off|ics|ecs")]
    smart_forwarding: Option<String>,
    /// TCP: new INVITEs wait until the worker has nothing else to do, their connection unread
    /// meanwhile (default: on unless --overload none).
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    defer_new_invites: Option<bool>,
    /// UDP: new INVITEs come in on sockets of their own, read after every other message
    /// (default: on unless --overload none).
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    udp_invite_socket: Option<bool>,
    /// SO_RCVBUF of the UDP sockets, bytes (default 8 MiB; 0: the kernel's default).
    #[arg(long, value_name = "BYTES")]
    udp_recv_buffer: Option<usize>,
    /// Hop-by-hop overload control (RFC 7339 / RFC 7415), client role: the algorithms offered
    /// to next hops and applied to their answers, in order of preference (default: loss
    /// unless --overload none): `loss`, `rate`, `explicit-window` (holdline's
    /// `oc-algo="window"`: at most the next hop's window of new INVITEs unanswered); or
    /// `window`: seed 004's window of outstanding INVITEs per next hop, without feedback;
    /// `deoc`: seed 003's end-to-end control at an edge (per next hop, on its 503s and
    /// timeouts).
    #[arg(
        long,
        value_name = "none|loss|rate|explicit-window|loss,rate|window|deoc"
    )]
    feedback: Option<String>,
    /// Log lines on stderr as `text` (default) or `json`, one object per line for log
    /// shippers (the file's `log_format`; the filter is `log` or RUST_LOG).
    #[arg(long, value_name = "text|json")]
    log_format: Option<String>,
    /// The control socket of `holdline ctl` (Unix socket, mode 0600; default: `ctl_socket`,
    /// else ctl.sock in the data directory).
    #[arg(long, value_name = "PATH")]
    ctl_socket: Option<PathBuf>,
    /// Check a configuration file, report errors with file, line and key, and exit.
    #[arg(long, value_name = "FILE")]
    check_config: Option<PathBuf>,
}

/// `holdline user`: add, remove or list the users of a users file.
#[derive(Debug, clap::Args)]
struct UserArgs {
    #[command(subcommand)]
    action: UserAction,
}

#[derive(Debug, Subcommand)]
enum UserAction {
    /// Add a user (or change its password): writes its HA1s for MD5 and SHA-256. The
    /// password is read from the first line of standard input unless --password is given.
    Add {
        /// The users file (created if absent).
        #[arg(long, value_name = "FILE")]
        file: PathBuf,
        /// The user, as user@domain.
        user: String,
        /// The password (visible to other users of the machine in the process list: prefer
        /// standard input).
        #[arg(long, value_name = "P")]
        password: Option<String>,
        /// The realm the server challenges with (`[auth] realm`); default: the domain.
        #[arg(long, value_name = "REALM")]
        realm: Option<String>,
    },
    /// Remove a user.
    Remove {
        /// The users file.
        #[arg(long, value_name = "FILE")]
        file: PathBuf,
        /// The user, as user@domain.
        user: String,
    },
    /// List the users.
    List {
        /// The users file.
        #[arg(long, value_name = "FILE")]
        file: PathBuf,
    },
}

fn user(args: UserArgs) -> ExitCode {
    match user_command(args.action) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("holdline user: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The users in `file`; an absent file is an empty one when `may_be_absent`.
fn read_users_file(
    file: &std::path::Path,
    may_be_absent: bool,
) -> anyhow::Result<holdline_proto::Users> {
    if may_be_absent && !file.exists() {
        return Ok(holdline_proto::Users::new());
    }
    Ok(holdline_server::read_users(file)?)
}

/// Writes `users` to `file` through a temporary file renamed over it (never half written).
fn write_users_file(file: &std::path::Path, users: &holdline_proto::Users) -> anyhow::Result<()> {
    let name = file
        .file_name()
        .ok_or_else(|| anyhow::anyhow!("{}: not a file name", file.display()))?;
    let tmp = file.with_file_name(format!(".{}.tmp", name.to_string_lossy()));
    std::fs::write(&tmp, users.to_text()).map_err(|e| anyhow::anyhow!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, file).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    Ok(())
}

fn user_command(action: UserAction) -> anyhow::Result<()> {
    let split = |u: &str| {
        holdline_proto::auth::split_user(u)
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .ok_or_else(|| anyhow::anyhow!("`{u}`: expected user@domain"))
    };
    match action {
        UserAction::Add {
            file,
            user,
            password,
            realm,
        } => {
            let (name, domain) = split(&user)?;
            let password = match password {
                Some(p) => p,
                None => {
                    let mut line = String::new();
                    std::io::stdin()
                        .read_line(&mut line)
                        .map_err(|e| anyhow::anyhow!("reading the password: {e}"))?;
                    line.trim_end_matches(['\r', '\n']).to_owned()
                }
            };
            if password.is_empty() {
                anyhow::bail!("empty password");
            }
            // The server's default realm: the domain in lowercase, without a trailing dot.
            let realm = realm.unwrap_or_else(|| domain.trim_end_matches('.').to_ascii_lowercase());
            let mut users = read_users_file(&file, true)?;
            let entry = holdline_proto::UserEntry::new(
                name.as_bytes(),
                realm.as_bytes(),
                password.as_bytes(),
            );
            let replaced = users.insert(&name, &domain, entry);
            write_users_file(&file, &users)?;
            eprintln!(
                "holdline user: {} {user} (realm {realm}) in {}; `kill -HUP` the server to reload",
                if replaced { "updated" } else { "added" },
                file.display()
            );
        }
        UserAction::Remove { file, user } => {
            let (name, domain) = split(&user)?;
            let mut users = read_users_file(&file, false)?;
            if !users.remove(&name, &domain) {
                anyhow::bail!("{user}: not in {}", file.display());
            }
            write_users_file(&file, &users)?;
            eprintln!("holdline user: removed {user} from {}", file.display());
        }
        UserAction::List { file } => {
            for (u, _) in read_users_file(&file, false)?.sorted() {
                println!("{u}");
            }
        }
    }
    Ok(())
}

fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" | "true" | "yes" => Ok(true),
        "off" | "false" | "no" => Ok(false),
        _ => Err(format!("`{s}`: expected on or off")),
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    if let Some(file) = &args.check_config {
        return match ServerConfig::from_file(file) {
            // The users file too (the secret file is left alone: it may not exist yet).
            Ok(config) => match config
                .auth
                .users_file
                .as_deref()
                .map(holdline_server::read_users)
                .transpose()
            {
                Ok(_) => {
                    println!("{}: ok", file.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::FAILURE
                }
            },
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        };
    }
    match run_server(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("holdline serve: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// File descriptors kept for everything but connections: listeners, the store's files,
/// the metrics endpoint and its clients, each worker's poller and wakers.
const RESERVED_FILES: u64 = 256;

/// Raises the open-file limit to what `limits.max_connections` needs (every connection is a
/// file descriptor); when the hard limit is lower, lowers `max_connections` to what fits, so
/// that the server refuses connections it cannot hold (counted) instead of failing to accept
/// them. Returns the startup line that says which.
fn open_files(config: &mut ServerConfig) -> String {
    let max = config.limits.max_connections as u64;
    let per_worker = 16 * config.workers.max(1) as u64;
    let need = max + RESERVED_FILES + per_worker;
    match holdline_io::raise_open_files(need) {
        Ok(l) if l.enough() => format!(
            "open-file limit {} (limits.max_connections = {max} needs {need})",
            l.soft
        ),
        Ok(l) => {
            let fit = l.soft.saturating_sub(RESERVED_FILES + per_worker).max(1);
            config.limits.max_connections = usize::try_from(fit).unwrap_or(usize::MAX);
            format!(
                "open-file limit {} is below the {need} that limits.max_connections = {max} needs, \
                 and the hard limit ({}) stops it there: at most {fit} connections will be held, \
                 more are refused; raise the hard limit (systemd LimitNOFILE=, or `ulimit -Hn` as \
                 root) or lower limits.max_connections",
                l.soft, l.hard
            )
        }
        Err(e) => format!("open-file limit unknown ({e}); limits.max_connections = {max}"),
    }
}

fn run_server(args: ServeArgs) -> anyhow::Result<()> {
    let config_file = args.config.clone();
    let mut config = match &args.config {
        Some(file) => ServerConfig::from_file(file)?,
        None => ServerConfig::default(),
    };
    let ctl_socket = args.ctl_socket.clone();
    let overrides = Overrides {
        listen: args.listen,
        domains: args.domain,
        store: args.store,
        workers: args.workers,
        metrics: args.metrics,
        record_route: args.record_route,
        record_route_host: args.record_route_host,
        routes: args.route,
        overload: args.overload,
        emulate_cost_us: args.emulate_cost_us,
        emulate_reject_cost_us: args.emulate_reject_cost_us,
        emulate_sleep: args.emulate_sleep.then_some(true),
        smart_forwarding: args.smart_forwarding,
        defer_new_invites: args.defer_new_invites,
        udp_invite_socket: args.udp_invite_socket,
        udp_recv_buffer: args.udp_recv_buffer,
        feedback: args.feedback,
        log_format: args.log_format,
    };
    config
        .apply(overrides.clone())
        .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    if let Some(p) = &ctl_socket {
        config.ctl_socket = Some(p.clone());
    }
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(&config.log))
        .map_err(|e| anyhow::anyhow!("log filter `{}`: {e}", config.log))?;
    let log_handle = init_logging(filter, &config.log_format);
    let file_max_connections = config.limits.max_connections;
    let files = open_files(&mut config);
    // Before the store loads and the workers start: huge pages, if allowed, back what they
    // touch from here on.
    if let Err(e) = holdline_io::set_transparent_huge_pages(config.limits.transparent_huge_pages) {
        tracing::warn!(error = %e, "limits.transparent_huge_pages: cannot set it (prctl)");
    }
    let max_connections = config.limits.max_connections;
    let auth = holdline_server::load_auth(&config)?;
    let clock = holdline_io::Clock::new();
    let opened = holdline_server::open_store(&config, &clock)?;
    let store = opened.store.clone();
    let store_for_ctl = opened.store.clone();
    let redis = opened.redis.clone();
    let persistent = opened.persistent.clone();
    let engine_config = config.clone();
    let seq_base = holdline_server::seq_base(&clock);
    let engine_auth = auth.clone();
    // RFC 7200: the filters received from notifiers, applied by every worker.
    let load_filters = std::sync::Arc::new(holdline_proto::load_control::SharedFilters::new());
    // ... and the filters this server publishes, replaced on SIGHUP.
    let published = std::sync::Arc::new(holdline_proto::load_control::PublishedFilters::new());
    let engine_published = published.clone();
    let mut server = Server::start_with(&config, clock, move |i, bound| {
        let mut proxy = holdline_server::proxy_config(&engine_config, bound, i);
        proxy.load_control.shared = load_filters.clone();
        proxy.load_control.updates = engine_published.clone();
        proxy.overload_seq_base = seq_base;
        // seq_base counts 10 µs units: the wall clock at the engines' zero, in ms.
        proxy.auth = engine_auth.as_ref().map(|a| a.proxy_auth(seq_base / 100));
        Box::new(
            holdline_server::Engine::new(proxy, store.clone(), i)
                .with_redis(redis.clone())
                .with_persistent(persistent.clone()),
        )
    })?;
    if let Some(p) = &opened.persistent {
        // REGISTER 200s wait for their commit (durability = commit): wake the workers
        // holding them as soon as a batch is on disk.
        let wake = server.wake_handle();
        p.set_commit_listener(std::sync::Arc::new(move |_| wake.wake_all()));
    }
    if let Some(r) = &opened.redis {
        // The same for the Redis store: a batch acknowledged by the primary.
        let wake = server.wake_handle();
        r.set_commit_listener(std::sync::Arc::new(move |_| wake.wake_all()));
    }
    match &auth {
        Some(a) => {
            eprintln!(
                "holdline: authentication on: {} users from {} (SIGHUP reloads), algorithms {}, nonce lifetime {} s, failures throttled at {} per {} ms",
                a.user_count(),
                a.users_file().display(),
                config.auth.algorithms.join(","),
                config.auth.nonce_lifetime_s,
                config.auth.failure_limit,
                config.auth.failure_window_ms
            );
            let a = a.clone();
            server.on_reload_report(Box::new(move || match a.reload() {
                Ok(n) => {
                    tracing::info!(users = n, file = %a.users_file().display(), "users reloaded");
                    eprintln!("holdline: users reloaded: {n} users");
                    Ok(format!(
                        "users reloaded: {n} users from {}",
                        a.users_file().display()
                    ))
                }
                Err(e) => {
                    tracing::error!(error = %e, "users file not reloaded; the previous users stay");
                    eprintln!("holdline: users file not reloaded ({e}); the previous users stay");
                    Err(format!(
                        "users file not reloaded ({e}); the previous users stay"
                    ))
                }
            }));
        }
        None => eprintln!(
            "holdline: authentication off ([auth] users_file): REGISTERs for served domains are accepted from anyone"
        ),
    }
    if let Some(file) = config_file.clone() {
        // Reloads (SIGHUP, `holdline ctl reload`) read the file again, with the command
        // line's overrides on top, and the open-file limit's cap on connections.

        let f = file.clone();
        server.set_config_source(
            file,
            Box::new(move || {
                let mut c = ServerConfig::from_file(&f)?;
                c.apply(overrides.clone()).map_err(|m| {
                    let (key, message) = m.split_once(": ").unwrap_or(("-", m.as_str()));
                    holdline_server::ConfigError {
                        file: f.display().to_string(),
                        line: 0,
                        key: key.to_owned(),
                        message: format!("{message} (with the command line's options)"),
                    }
                })?;
                if let Some(p) = &ctl_socket {
                    c.ctl_socket = Some(p.clone());
                }
                if c.limits.max_connections == file_max_connections {
                    c.limits.max_connections = max_connections;
                }
                Ok(c)
            }),
        );
    }
    server.set_location_store(store_for_ctl);
    server.set_log_hook(std::sync::Arc::new(move |level: &str| {
        let f = tracing_subscriber::EnvFilter::try_new(level).map_err(|e| e.to_string())?;
        log_handle.reload(f).map_err(|e| e.to_string())
    }));
    if let Some(file) = config_file.filter(|_| config.load_control.publishes()) {
        // RFC 7200 notifier: SIGHUP re-reads the published filters; subscribers are
        // NOTIFYed when they changed.
        let wake = server.wake_handle();
        let last = std::sync::Mutex::new(config.load_control.filters.clone());
        server.on_reload(Box::new(move || match ServerConfig::from_file(&file) {
            Ok(c) => {
                let mut last = last
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if *last != c.load_control.filters {
                    published.set(c.load_control.proxy_config().filters);
                    *last = c.load_control.filters;
                    wake.wake_all();
                    eprintln!(
                        "holdline: load-control filters reloaded: {} filters, subscribers notified",
                        last.len()
                    );
                }
            }
            Err(e) => {
                eprintln!(
                    "holdline: load-control filters not reloaded ({e}); the previous ones stay"
                )
            }
        }));
    }
    eprintln!("holdline: {files}");
    eprintln!("holdline: data directory {}", config.data_dir().display());
    match (&opened.path, &opened.persistent) {
        (Some(path), Some(p)) => {
            let r = p.load_report();
            eprintln!(
                "holdline: store {} ({} bindings of {} addresses-of-record loaded, {} expired dropped)",
                path.display(),
                r.loaded,
                r.aors,
                r.expired_dropped
            );
            let p = p.clone();
            server.on_shutdown(Box::new(move || match p.flush() {
                Ok(()) => eprintln!("holdline: store flushed"),
                Err(e) => eprintln!("holdline: store flush failed: {e}"),
            }));
        }
        _ => match &opened.redis {
            Some(r) => {
                let st = r.stats();
                eprintln!(
                    "holdline: store redis {} ({} bindings of {} addresses-of-record loaded, {} records read)",
                    r.target(),
                    holdline_proto::LocationStore::len(&**r),
                    r.aor_count(),
                    st.last_resync_records
                );
                let r = r.clone();
                server.on_shutdown(Box::new(move || {
                    match r.flush(std::time::Duration::from_secs(5)) {
                        Ok(()) => eprintln!("holdline: store flushed"),
                        Err(e) => eprintln!("holdline: store flush failed: {e}"),
                    }
                }));
            }
            None => eprintln!("holdline: store in memory (bindings are lost at exit)"),
        },
    }
    if config.domains.is_empty() {
        eprintln!(
            "holdline: no --domain: REGISTERs are not accepted; requests follow static routes and IP literals"
        );
    } else {
        eprintln!("holdline: serving domains {}", config.domains.join(", "));
    }
    eprintln!("holdline: logs to stderr (filter: RUST_LOG or `log` in the config)");
    for l in server.local_addrs() {
        eprintln!("holdline: listening on {l}");
    }
    if let Some((asked, got)) = server.udp_recv_buffer()
        && got < asked
    {
        eprintln!(
            "holdline: UDP receive buffer {got} bytes, not the {asked} asked: net.core.rmem_max caps it \
             (raise it: sysctl -w net.core.rmem_max={asked}); a stall of the worker drops what does not fit"
        );
    }
    match server.metrics_addr() {
        Some(a) => eprintln!("holdline: metrics on http://{a}/metrics, status page on http://{a}/"),
        None => eprintln!("holdline: metrics off (--metrics IP:PORT)"),
    }
    eprintln!(
        "holdline: {} workers, overload control {}{}{}{}{}",
        server.workers(),
        config.overload.local,
        match (
            config.overload.defers_new_invites(),
            config.overload.separates_udp_invites()
        ) {
            (true, true) => ", new INVITEs over TCP deferred, over UDP on sockets of their own",
            (true, false) => ", new INVITEs over TCP deferred",
            (false, true) => ", new INVITEs over UDP on sockets of their own",
            (false, false) => "",
        },
        match config.overload.smart_forwarding_mode() {
            "off" => String::new(),
            sf => format!(", smart forwarding {sf}"),
        },
        {
            let algos = config.overload.feedback_algos().unwrap_or_default();
            let names: Vec<&str> = algos.iter().map(|a| a.as_str()).collect();
            let window = if config.overload.window_client().is_some() {
                ", delay window towards next hops"
            } else if config.overload.deoc_client().is_some() {
                ", DEOC towards next hops"
            } else {
                ""
            };
            window.to_owned()
                + &match (names.is_empty(), config.overload.answers_feedback()) {
                    (true, false) => String::new(),
                    (true, true) => ", feedback answered".to_owned(),
                    (false, false) => format!(", feedback offered ({})", names.join(",")),
                    (false, true) => {
                        format!(", feedback offered ({}) and answered", names.join(","))
                    }
                }
        },
        if config.overload.emulate_cost_us > 0 {
            format!(
                ", emulated cost {} µs per message",
                config.overload.emulate_cost_us
            )
        } else {
            String::new()
        }
    );
    let report = server.run()?;
    if report.workers_panicked > 0 {
        anyhow::bail!("{} worker(s) panicked", report.workers_panicked);
    }
    Ok(())
}

/// `holdline man`: the manual page of `holdline` and, as its sections, of each subcommand.
fn man() -> ExitCode {
    let cmd = <Cli as clap::CommandFactory>::command();
    let mut out = Vec::new();
    let mut page = || -> std::io::Result<()> {
        let man = clap_mangen::Man::new(cmd.clone());
        man.render_title(&mut out)?;
        man.render_name_section(&mut out)?;
        man.render_synopsis_section(&mut out)?;
        man.render_description_section(&mut out)?;
        // Each subcommand's options, under a section of its own.
        for sub in cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        {
            let name = format!("holdline {}", sub.get_name());
            let sub = sub.clone().bin_name(name.clone());
            out.extend_from_slice(format!(".SH \"{}\"\n", name.to_uppercase()).as_bytes());
            let m = clap_mangen::Man::new(sub);
            let mut body = Vec::new();
            m.render_synopsis_section(&mut body)?;
            m.render_description_section(&mut body)?;
            m.render_options_section(&mut body)?;
            // Demote the subcommand's own section headings under its section.
            let body = String::from_utf8_lossy(&body).replace(".SH ", ".SS ");
            out.extend_from_slice(body.as_bytes());
        }
        out.extend_from_slice(
            b".SH FILES\n.TP\n/etc/holdline/holdline.toml\nthe configuration holdline.service runs with\n\
              .TP\n/var/lib/holdline\nthe data directory (location store)\n\
              .SH SEE ALSO\nsystemctl(1), journalctl(1); docs/operations.md in the source\n",
        );
        man.render_version_section(&mut out)?;
        std::io::Write::write_all(&mut std::io::stdout(), &out)
    };
    match page() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("holdline man: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve(args),
        Command::User(args) => user(args),
        Command::Load(args) => load::main(args),
        Command::Bench(rest) => holdline_lab::bench::run(rest.args),
        Command::Lab(rest) => holdline_lab::lab::run(rest.args),
        Command::Sim(args) => sim::main(args),
        Command::Netem(args) => netem::main(args),
        Command::Status(args) => status::main(&args),
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut <Cli as clap::CommandFactory>::command(),
                "holdline",
                &mut std::io::stdout(),
            );
            ExitCode::SUCCESS
        }
        Command::Man => man(),
        Command::Ctl(args) => ctl::main(&args),
    }
}
