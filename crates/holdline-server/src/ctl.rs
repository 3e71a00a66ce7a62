//! The control interface of a running server (`holdline ctl`): a Unix socket (mode 0600)
//! served by one IO-side thread that never blocks a worker.
//!
//! Protocol: the client connects, writes one request as one line of JSON, reads one reply
//! as one line of JSON, and may send further requests on the same connection.
//!
//! ```text
//! -> {"cmd":"status"}
//! <- {"ok":true,"uptime_s":12.5,"workers":[...],"store":{...},"metrics":"..."}
//! -> {"cmd":"bindings","action":"show","aor":"alice@example.com"}
//! -> {"cmd":"bindings","action":"list","prefix":"alice"}
//! -> {"cmd":"bindings","action":"remove","aor":"alice@example.com"}
//! -> {"cmd":"routes"}            -> {"cmd":"next-hops"}
//! -> {"cmd":"log-level","level":"debug"}
//! -> {"cmd":"reload"}            -> {"cmd":"drain"}
//! <- {"ok":false,"error":"...","file":"...","line":3,"key":"routes"}   (a refused reload)
//! ```
//!
//! Replies always carry `ok`; a failed request has `error` (what went wrong and what to
//! do). Requests that read state (`status`, `bindings`, `routes`, `next-hops`) are answered
//! by the control thread from shared snapshots and the location store; `reload` and `drain`
//! are handed to the thread running [`Server::run`](crate::Server::run), which applies
//! them and answers.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Weak, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use holdline_proto::LocationStore;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::worker::Shared;

/// One request on the control socket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Request {
    /// Uptime, workers and their load, overload state, transactions, connections, store.
    Status,
    /// The location store.
    Bindings(BindingsAction),
    /// The routes, domains and relay policy in effect.
    Routes,
    /// The load-sharing targets: their state and probing.
    NextHops,
    /// Sets the log filter (tracing `EnvFilter` syntax, e.g. `debug` or
    /// `info,holdline_proto=debug`) until the next reload that changes `log`.
    LogLevel {
        /// The filter.
        level: String,
    },
    /// Re-reads the configuration file and applies what can change live.
    Reload,
    /// Stops admitting new calls and registrations, lets those in progress finish, flushes
    /// the store and exits.
    Drain,
}

/// What `bindings` does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case", deny_unknown_fields)]
pub enum BindingsAction {
    /// The bindings of one address-of-record.
    Show {
        /// `user@host` (a `sip:` prefix is accepted).
        aor: String,
    },
    /// The addresses-of-record with bindings.
    List {
        /// Only those starting with this.
        #[serde(default)]
        prefix: Option<String>,
    },
    /// Removes every binding of one address-of-record.
    Remove {
        /// `user@host`.
        aor: String,
    },
}

/// Why a request line could not be read.
#[derive(Debug, thiserror::Error)]
#[error("bad request: {0} (one JSON object per line, e.g. {{\"cmd\":\"status\"}})")]
pub struct ParseError(String);

impl Request {
    /// Parses one request line.
    pub fn parse(line: &str) -> Result<Self, ParseError> {
        serde_json::from_str(line.trim()).map_err(|e| ParseError(e.to_string()))
    }

    /// The request as one line of JSON (with its newline).
    pub fn to_line(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned());
        s.push('\n');
        s
    }
}

/// The most addresses-of-record `bindings list` returns.
pub const LIST_LIMIT: usize = 10_000;

/// A request the control thread hands to the thread running the server, with where to
/// send the reply.
#[derive(Debug)]
pub(crate) enum Command {
    /// A signal: SIGHUP reloads, SIGTERM drains (or stops at once without a drain grace),
    /// SIGINT stops at once.
    Signal(i32),
    /// `reload` or `drain` from the control socket.
    Ctl(Request, mpsc::Sender<Value>),
}

/// Sets the log filter; returns why not.
pub type LogHook = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// What the control thread reads and calls.
pub(crate) struct Context {
    pub(crate) shared: Weak<Shared>,
    pub(crate) store: Option<Arc<dyn LocationStore>>,
    pub(crate) store_name: String,
    pub(crate) log: Option<LogHook>,
    pub(crate) commands: mpsc::Sender<Command>,
    pub(crate) started: std::time::Instant,
    pub(crate) config_file: Option<PathBuf>,
}

/// The running control thread.
pub(crate) struct CtlServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// The listening socket (a second handle): shut down to wake the blocking `accept`
    /// even when the socket's file is gone.
    listener: Option<UnixListener>,
}

/// Why the control socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// Another server answers on the path.
    #[error(
        "{0}: another holdline server answers on this control socket (set `ctl_socket` or --ctl-socket to another path)"
    )]
    InUse(PathBuf),
    /// Binding or setting permissions failed.
    #[error("cannot create the control socket {path}: {source}")]
    Io {
        /// The socket's path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

impl CtlServer {
    /// Binds `path` (mode 0600; a stale socket file left by a dead server is replaced) and
    /// starts the control thread.
    pub(crate) fn start(path: &Path, ctx: Context) -> Result<Self, CtlError> {
        let io = |source| CtlError::Io {
            path: path.to_owned(),
            source,
        };
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(CtlError::InUse(path.to_owned()));
            }
            std::fs::remove_file(path).map_err(io)?;
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        // The socket is created with the process umask: tighten it before anyone may
        // connect (umask 077 around the bind would race with other threads' files).
        let listener = UnixListener::bind(path).map_err(io)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let waker = listener.try_clone().ok();
        let thread = std::thread::Builder::new()
            .name("holdline-ctl".into())
            .spawn(move || serve(&listener, &ctx, &stop2))
            .map_err(io)?;
        Ok(Self {
            path: path.to_owned(),
            stop,
            thread: Some(thread),
            listener: waker,
        })
    }

    /// The socket's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Stops the thread and removes the socket file.
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Relaxed);
        // Wake the blocking accept: shutting the listener down makes it fail at once (Linux:
        // EINVAL), even when the socket's file was removed meanwhile (a connection to the
        // path would then not reach it, and the join below would wait forever).
        if let Some(l) = &self.listener {
            let _ = socket2::SockRef::from(l).shutdown(std::net::Shutdown::Both);
        }
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for CtlServer {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.stop();
        }
    }
}

/// The accept loop: one client at a time (control traffic is a few requests per minute).
fn serve(listener: &UnixListener, ctx: &Context, stop: &AtomicBool) {
    for conn in listener.incoming() {
        if stop.load(Relaxed) {
            break;
        }
        let Ok(conn) = conn else { continue };
        let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
        let _ = conn.set_write_timeout(Some(Duration::from_secs(5)));
        let Ok(mut writer) = conn.try_clone() else {
            continue;
        };
        let mut reader = std::io::Read::take(BufReader::new(conn), 1 << 20);
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if line.trim().is_empty() {
                continue;
            }
            let reply = match Request::parse(&line) {
                Ok(r) => handle(ctx, r),
                Err(e) => failure(e.to_string()),
            };
            let mut out = reply.to_string();
            out.push('\n');
            if writer.write_all(out.as_bytes()).is_err() {
                break;
            }
        }
    }
}

/// A failed request's reply.
pub(crate) fn failure(error: impl Into<String>) -> Value {
    json!({"ok": false, "error": error.into()})
}

/// The canonical address-of-record of a user's text: without `sip:`/`sips:`, host in
/// lower case (as the registrar stores it).
pub fn canonical_aor(text: &str) -> String {
    let t = text.trim();
    let t = t
        .strip_prefix("sips:")
        .or_else(|| t.strip_prefix("sip:"))
        .unwrap_or(t);
    match t.rsplit_once('@') {
        Some((user, host)) => format!("{user}@{}", host.to_ascii_lowercase()),
        None => t.to_ascii_lowercase(),
    }
}

fn handle(ctx: &Context, req: Request) -> Value {
    let Some(shared) = ctx.shared.upgrade() else {
        return failure("the server is stopping");
    };
    match req {
        Request::Status => status(ctx, &shared),
        Request::Bindings(a) => bindings(ctx, &shared, a),
        Request::Routes => routes(&shared),
        Request::NextHops => next_hops(&shared),
        Request::LogLevel { level } => match &ctx.log {
            Some(hook) => match hook(&level) {
                Ok(()) => json!({"ok": true, "log": level}),
                Err(e) => failure(format!(
                    "log filter `{level}`: {e} (e.g. `info`, `debug`, `info,holdline_proto=debug`)"
                )),
            },
            None => failure("this server cannot change its log filter (RUST_LOG is set)"),
        },
        Request::Reload | Request::Drain => {
            drop(shared);
            let (tx, rx) = mpsc::channel();
            if ctx.commands.send(Command::Ctl(req, tx)).is_err() {
                return failure("the server is stopping");
            }
            rx.recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| failure("no answer from the server within 30 s"))
        }
    }
}

fn status(ctx: &Context, shared: &Shared) -> Value {
    // The workers' load over a short window: busy time / loop time.
    let sample = |s: &Shared| -> Vec<(u64, u64)> {
        s.stats
            .iter()
            .map(|w| (w.busy_ns.load(Relaxed), w.loop_ns.load(Relaxed)))
            .collect()
    };
    let before = sample(shared);
    std::thread::sleep(Duration::from_millis(200));
    let after = sample(shared);
    let workers: Vec<Value> = shared
        .stats
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let (b0, l0) = before[i];
            let (b1, l1) = after[i];
            let load = if l1 > l0 {
                (b1 - b0) as f64 / (l1 - l0) as f64
            } else {
                0.0
            };
            json!({
                "index": i,
                "load": (load * 1000.0).round() / 1000.0,
                "in_flight": w.in_flight.load(Relaxed),
                "config_generation": w.applied_gen.load(Relaxed),
            })
        })
        .collect();
    let store = match &ctx.store {
        Some(s) => json!({"kind": ctx.store_name, "bindings": s.len()}),
        None => json!({"kind": ctx.store_name}),
    };
    json!({
        "ok": true,
        "pid": std::process::id(),
        "uptime_s": (ctx.started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        "draining": shared.draining.load(Relaxed),
        "config_generation": shared.live_gen.load(Relaxed),
        "config_file": ctx.config_file.as_ref().map(|p| p.display().to_string()),
        "workers": workers,
        "connections": shared.open_conns.load(Relaxed),
        "store": store,
        "metrics": crate::metrics::render(shared, Duration::from_millis(250)),
    })
}

fn bindings(ctx: &Context, shared: &Shared, action: BindingsAction) -> Value {
    let Some(store) = &ctx.store else {
        return failure("this server has no location store");
    };
    let now = shared.clock.now();
    match action {
        BindingsAction::Show { aor } => {
            let aor = canonical_aor(&aor);
            let mut out = Vec::new();
            store.lookup(aor.as_bytes(), now, &mut out);
            let list: Vec<Value> = out
                .iter()
                .map(|b| {
                    json!({
                        "contact": String::from_utf8_lossy(&b.contact),
                        "expires_in_s": b.expires_at.saturating_duration_since(now).as_secs(),
                        "q": f64::from(b.q) / 1000.0,
                        "call_id": String::from_utf8_lossy(&b.call_id),
                        "cseq": b.cseq,
                        "source": b.source.map(|p| format!("{}:{}", p.transport.to_string().to_ascii_lowercase(), p.addr)),
                    })
                })
                .collect();
            json!({"ok": true, "aor": aor, "bindings": list})
        }
        BindingsAction::List { prefix } => {
            let prefix = prefix.map(|p| canonical_aor(&p)).unwrap_or_default();
            let mut aors = Vec::new();
            if !store.list_aors(prefix.as_bytes(), LIST_LIMIT, &mut aors) {
                return failure(format!(
                    "the {} store cannot list its addresses-of-record; use `bindings show AOR`",
                    ctx.store_name
                ));
            }
            let mut names: Vec<String> = aors
                .iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            names.sort();
            json!({"ok": true, "prefix": prefix, "truncated": names.len() >= LIST_LIMIT, "aors": names})
        }
        BindingsAction::Remove { aor } => {
            let aor = canonical_aor(&aor);
            let mut removed = 0;
            store.modify(aor.as_bytes(), now, &mut |b| {
                removed = b.len();
                b.clear();
            });
            if removed == 0 {
                return failure(format!(
                    "no bindings for {aor} (`holdline ctl bindings list` shows the registered ones)"
                ));
            }
            json!({"ok": true, "aor": aor, "removed": removed})
        }
    }
}

fn routes(shared: &Shared) -> Value {
    let c = shared.live_config();
    let routes: Vec<Value> = c
        .routes
        .iter()
        .map(|r| json!({"domain": r.domain, "target": r.target.to_string(), "stateless": r.stateless}))
        .collect();
    let hash: Vec<Value> = c
        .hash_routes
        .iter()
        .map(|r| {
            json!({
                "domain": r.domain,
                "targets": r.targets.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "weights": r.weights,
                "failover": r.failover,
            })
        })
        .collect();
    json!({
        "ok": true,
        "config_generation": shared.live_gen.load(Relaxed),
        "domains": c.domains,
        "aliases": c.aliases,
        "relay": c.relay,
        "record_route": c.record_route,
        "routes": routes,
        "hash_routes": hash,
    })
}

fn next_hops(shared: &Shared) -> Value {
    let c = shared.live_config();
    let targets: Vec<String> = c
        .hash_routes
        .iter()
        .flat_map(|r| r.targets.iter().map(ToString::to_string))
        .collect();
    json!({
        "ok": true,
        "targets": targets,
        "probing": {
            "interval_ms": c.probing.interval_ms,
            "timeout_ms": c.probing.timeout_ms,
            "down_after": c.probing.down_after,
        },
        "metrics": crate::metrics::render(shared, Duration::from_millis(250)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_from_one_json_line() {
        assert_eq!(
            Request::parse("{\"cmd\":\"status\"}\n").ok(),
            Some(Request::Status)
        );
        assert_eq!(
            Request::parse(r#"{"cmd":"bindings","action":"show","aor":"a@b"}"#).ok(),
            Some(Request::Bindings(BindingsAction::Show {
                aor: "a@b".into()
            }))
        );
        assert_eq!(
            Request::parse(r#"{"cmd":"bindings","action":"list"}"#).ok(),
            Some(Request::Bindings(BindingsAction::List { prefix: None }))
        );
        assert_eq!(
            Request::parse(r#"{"cmd":"log-level","level":"debug"}"#).ok(),
            Some(Request::LogLevel {
                level: "debug".into()
            })
        );
        assert_eq!(
            Request::parse(r#"{"cmd":"next-hops"}"#).ok(),
            Some(Request::NextHops)
        );
    }

    #[test]
    fn requests_round_trip_through_their_line() {
        for r in [
            Request::Status,
            Request::Routes,
            Request::NextHops,
            Request::Reload,
            Request::Drain,
            Request::LogLevel {
                level: "info".into(),
            },
            Request::Bindings(BindingsAction::List {
                prefix: Some("al".into()),
            }),
            Request::Bindings(BindingsAction::Remove { aor: "a@b".into() }),
        ] {
            let line = r.to_line();
            assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
            assert_eq!(Request::parse(&line).ok(), Some(r));
        }
    }

    #[test]
    fn bad_requests_say_what_is_expected() {
        for bad in [
            "status",
            "{}",
            r#"{"cmd":"reboot"}"#,
            r#"{"cmd":"bindings","action":"show"}"#,
            r#"{"cmd":"log-level"}"#,
        ] {
            let e = Request::parse(bad).expect_err(bad).to_string();
            assert!(e.contains("one JSON object per line"), "{e}");
        }
    }

    #[test]
    fn addresses_of_record_are_canonical() {
        assert_eq!(canonical_aor("sip:Alice@Example.COM"), "Alice@example.com");
        assert_eq!(canonical_aor(" bob@h "), "bob@h");
    }
}
