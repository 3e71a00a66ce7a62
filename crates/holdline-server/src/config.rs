//! The server's configuration: a TOML file (`deny_unknown_fields`) plus command-line
//! overrides, checked with errors that name the file, the line and the key.
//!
//! ```toml
//! listen = ["udp:127.0.0.1:5060", "tcp:127.0.0.1:5060"]
//! workers = 4                      # 0: one per available core
//! domains = ["example.com"]
//! record_route = true
//! store = "memory"                 # or a directory; default: the data directory
//! metrics = "127.0.0.1:9060"       # Prometheus text on /metrics; absent: off
//! log = "info"                     # tracing filter; RUST_LOG wins
//! shutdown_grace_ms = 2000
//!
//! [limits]
//! max_message_size = 65535
//! max_connections = 10000
//! conn_queue_bytes = 1048576
//! idle_timeout_ms = 120000
//! write_stall_ms = 10000
//! handoff_queue = 4096
//! udp_recv_buffer = 4194304        # optional
//!
//! [timers]
//! t1_ms = 500
//! t2_ms = 4000
//! t4_ms = 5000
//!
//! [registrar]                      # intervals in seconds
//! min_expires = 60                 # shorter requests (under one hour): 423
//! max_expires = 7200
//! default_expires = 3600
//! max_contacts_per_aor = 10
//!
//! [[routes]]
//! domain = "*"
//! target = "udp:192.0.2.10:5060"
//! stateless = false
//! ```

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use holdline_base::Transport;
use serde::Deserialize;

/// A socket the server listens on: `udp:IP:PORT` or `tcp:IP:PORT` (IPv6 as `[::1]:5060`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Listener {
    /// UDP or TCP.
    pub transport: Transport,
    /// Address and port (port 0: the system picks one; the server reports the bound port).
    pub addr: SocketAddr,
}

impl FromStr for Listener {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (t, addr) = s
            .split_once(':')
            .ok_or_else(|| format!("`{s}`: expected udp:IP:PORT or tcp:IP:PORT"))?;
        let transport = match t.to_ascii_lowercase().as_str() {
            "udp" => Transport::Udp,
            "tcp" => Transport::Tcp,
            _ => return Err(format!("`{s}`: transport must be udp or tcp")),
        };
        let addr = addr
            .parse()
            .map_err(|_| format!("`{s}`: `{addr}` is not IP:PORT"))?;
        Ok(Self { transport, addr })
    }
}

impl fmt::Display for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.transport, self.addr)
    }
}

impl<'de> Deserialize<'de> for Listener {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Where registrations are stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreSpec {
    /// In memory only (lost at exit).
    Memory,
    /// The persistent store in this directory (created if missing).
    Path(PathBuf),
}

impl FromStr for StoreSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "" => Err("store: empty (use `memory` or a directory)".into()),
            "memory" => Ok(Self::Memory),
            p => Ok(Self::Path(PathBuf::from(p))),
        }
    }
}

impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Memory => f.write_str("memory"),
            Self::Path(p) => write!(f, "{}", p.display()),
        }
    }
}

impl<'de> Deserialize<'de> for StoreSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The default data directory: `$XDG_DATA_HOME/holdline`, else
/// `$HOME/.local/share/holdline`, else `./holdline-data`.
pub fn default_data_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("holdline");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(h).join(".local/share/holdline");
    }
    PathBuf::from("holdline-data")
}

/// A static route: requests for `domain` (or every domain, `*`) go to `target`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// The domain of the Request-URI, or `*`.
    pub domain: String,
    /// The next hop.
    pub target: Listener,
    /// Forward statelessly (no transaction state).
    #[serde(default)]
    pub stateless: bool,
}

impl FromStr for Route {
    type Err = String;
    /// `DOMAIN=udp:IP:PORT` or `DOMAIN=tcp:IP:PORT[,stateless]`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (domain, rest) = s
            .split_once('=')
            .ok_or_else(|| format!("`{s}`: expected DOMAIN=udp:IP:PORT"))?;
        let (target, stateless) = match rest.strip_suffix(",stateless") {
            Some(t) => (t, true),
            None => (rest, false),
        };
        if domain.is_empty() {
            return Err(format!("`{s}`: empty domain"));
        }
        Ok(Self {
            domain: domain.to_owned(),
            target: target.parse()?,
            stateless,
        })
    }
}

/// Bounds; each hit is counted in the metrics.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Largest SIP message accepted, bytes (UDP datagram or framed TCP message).
    pub max_message_size: usize,
    /// Most inbound TCP connections open at once (excess ones are accepted and closed).
    pub max_connections: usize,
    /// Most bytes queued for writing on one TCP connection.
    pub conn_queue_bytes: usize,
    /// A TCP connection with no traffic for this long is closed, ms.
    pub idle_timeout_ms: u64,
    /// A TCP connection whose queue stays full this long is closed, ms.
    pub write_stall_ms: u64,
    /// Capacity of each worker's hand-off channel, messages.
    pub handoff_queue: usize,
    /// `SO_RCVBUF` for UDP sockets, bytes (absent: system default).
    pub udp_recv_buffer: Option<usize>,
    /// `SO_SNDBUF` for UDP sockets, bytes (absent: system default).
    pub udp_send_buffer: Option<usize>,
    /// `SO_SNDBUF` for TCP connections, bytes (absent: system default).
    pub tcp_send_buffer: Option<usize>,
    /// Use recvmmsg/sendmmsg where available.
    pub batched_udp: bool,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_message_size: 65_535,
            max_connections: 10_000,
            conn_queue_bytes: 1024 * 1024,
            idle_timeout_ms: 120_000,
            write_stall_ms: 10_000,
            handoff_queue: 4096,
            udp_recv_buffer: None,
            udp_send_buffer: None,
            tcp_send_buffer: None,
            batched_udp: true,
        }
    }
}

/// RFC 3261 timers, ms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimersConfig {
    /// T1, the round-trip estimate (default 500).
    pub t1_ms: u64,
    /// T2, the longest retransmit interval (default 4000).
    pub t2_ms: u64,
    /// T4, how long a message can stay in the network (default 5000).
    pub t4_ms: u64,
}

impl Default for TimersConfig {
    fn default() -> Self {
        Self {
            t1_ms: 500,
            t2_ms: 4000,
            t4_ms: 5000,
        }
    }
}

/// The registrar's intervals (seconds) and contact limit; the defaults are
/// [`holdline_proto::RegistrarConfig`]'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RegistrarSettings {
    /// Shortest non-zero interval accepted; shorter ones (under one hour) get 423.
    pub min_expires: u32,
    /// Longest interval granted; longer requests are shortened to it.
    pub max_expires: u32,
    /// Interval granted when the REGISTER names none.
    pub default_expires: u32,
    /// Most bindings per address-of-record.
    pub max_contacts_per_aor: usize,
}

impl Default for RegistrarSettings {
    fn default() -> Self {
        let d = holdline_proto::RegistrarConfig::default();
        Self {
            min_expires: d.min_expires,
            max_expires: d.max_expires,
            default_expires: d.default_expires,
            max_contacts_per_aor: d.max_contacts_per_aor,
        }
    }
}

impl From<RegistrarSettings> for holdline_proto::RegistrarConfig {
    fn from(r: RegistrarSettings) -> Self {
        Self {
            min_expires: r.min_expires,
            max_expires: r.max_expires,
            default_expires: r.default_expires,
            max_contacts_per_aor: r.max_contacts_per_aor,
        }
    }
}

/// Everything `holdline serve` needs.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Sockets to listen on (default: UDP and TCP on 127.0.0.1:5060).
    pub listen: Vec<Listener>,
    /// Worker threads; 0 means one per available core.
    pub workers: usize,
    /// Domains this server is responsible for (registrar and proxy).
    pub domains: Vec<String>,
    /// Insert Record-Route.
    pub record_route: bool,
    /// Location store; absent: a persistent store in [`data_dir`](Self::data_dir).
    pub store: Option<StoreSpec>,
    /// Data directory; absent: [`default_data_dir`].
    pub data_dir: Option<PathBuf>,
    /// Address of the Prometheus endpoint (`GET /metrics`); absent: off.
    pub metrics: Option<SocketAddr>,
    /// Log filter (tracing `EnvFilter` syntax); `RUST_LOG` takes precedence.
    pub log: String,
    /// How long workers keep running timers after a shutdown signal, ms.
    pub shutdown_grace_ms: u64,
    /// Bounds.
    pub limits: LimitsConfig,
    /// Transaction timers.
    pub timers: TimersConfig,
    /// Registrar intervals.
    pub registrar: RegistrarSettings,
    /// Static routes, tried in order.
    pub routes: Vec<Route>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        let lo = SocketAddr::from(([127, 0, 0, 1], 5060));
        Self {
            listen: vec![
                Listener {
                    transport: Transport::Udp,
                    addr: lo,
                },
                Listener {
                    transport: Transport::Tcp,
                    addr: lo,
                },
            ],
            workers: 0,
            domains: Vec::new(),
            record_route: false,
            store: None,
            data_dir: None,
            metrics: None,
            log: "info".into(),
            shutdown_grace_ms: 2000,
            limits: LimitsConfig::default(),
            timers: TimersConfig::default(),
            registrar: RegistrarSettings::default(),
            routes: Vec::new(),
        }
    }
}

/// Command-line values that replace the file's (lists replace lists when given).
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--listen`.
    pub listen: Vec<Listener>,
    /// `--domain`.
    pub domains: Vec<String>,
    /// `--store`.
    pub store: Option<StoreSpec>,
    /// `--workers`.
    pub workers: Option<usize>,
    /// `--metrics`.
    pub metrics: Option<SocketAddr>,
    /// `--record-route`.
    pub record_route: Option<bool>,
    /// `--route`.
    pub routes: Vec<Route>,
}

/// A configuration error located in its file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: key `{key}`: {message}")]
pub struct ConfigError {
    /// The file.
    pub file: String,
    /// 1-based line number (0 when unknown, e.g. the file could not be read).
    pub line: usize,
    /// The dotted key (`limits.max_connections`), or `-` when no key applies.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl ServerConfig {
    /// Parses and validates a TOML file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.display().to_string(),
            line: 0,
            key: "-".into(),
            message: e.to_string(),
        })?;
        Self::from_toml(&path.display().to_string(), &text)
    }

    /// Parses and validates TOML text; `file` names it in errors.
    pub fn from_toml(file: &str, text: &str) -> Result<Self, ConfigError> {
        let cfg: Self = toml::from_str(text).map_err(|e| {
            let (line, key) = match e.span() {
                Some(span) => locate(text, span.start),
                None => (0, "-".into()),
            };
            ConfigError {
                file: file.into(),
                line,
                key,
                message: e.message().trim().to_owned(),
            }
        })?;
        cfg.validate().map_err(|(key, message)| ConfigError {
            file: file.into(),
            line: find_key_line(text, &key),
            key,
            message,
        })?;
        Ok(cfg)
    }

    /// Applies command-line overrides, then validates.
    pub fn apply(&mut self, o: Overrides) -> Result<(), String> {
        if !o.listen.is_empty() {
            self.listen = o.listen;
        }
        if !o.domains.is_empty() {
            self.domains = o.domains;
        }
        if !o.routes.is_empty() {
            self.routes = o.routes;
        }
        if let Some(s) = o.store {
            self.store = Some(s);
        }
        if let Some(w) = o.workers {
            self.workers = w;
        }
        if let Some(m) = o.metrics {
            self.metrics = Some(m);
        }
        if let Some(r) = o.record_route {
            self.record_route = r;
        }
        self.validate().map_err(|(k, m)| format!("{k}: {m}"))
    }

    /// Checks values serde cannot: returns the offending key and the reason.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let err = |k: &str, m: &str| Err((k.to_owned(), m.to_owned()));
        if self.listen.is_empty() {
            return err("listen", "at least one listener is required");
        }
        if self.workers > 1024 {
            return err("workers", "at most 1024 workers");
        }
        let l = &self.limits;
        if !(512..=1 << 20).contains(&l.max_message_size) {
            return err("limits.max_message_size", "must be between 512 and 1048576");
        }
        if l.conn_queue_bytes < l.max_message_size {
            return err(
                "limits.conn_queue_bytes",
                "must be at least limits.max_message_size",
            );
        }
        if l.handoff_queue == 0 {
            return err("limits.handoff_queue", "must be at least 1");
        }
        if l.idle_timeout_ms == 0 {
            return err("limits.idle_timeout_ms", "must be positive");
        }
        let t = &self.timers;
        if t.t1_ms == 0 || t.t2_ms < t.t1_ms {
            return err("timers.t2_ms", "need 0 < t1_ms <= t2_ms");
        }
        let r = &self.registrar;
        if r.min_expires == 0 {
            return err("registrar.min_expires", "must be at least 1");
        }
        if r.max_expires < r.min_expires {
            return err(
                "registrar.max_expires",
                "must be at least registrar.min_expires",
            );
        }
        if !(r.min_expires..=r.max_expires).contains(&r.default_expires) {
            return err(
                "registrar.default_expires",
                "must be between registrar.min_expires and registrar.max_expires",
            );
        }
        if r.max_contacts_per_aor == 0 {
            return err("registrar.max_contacts_per_aor", "must be at least 1");
        }
        if let Some(r) = self.routes.iter().find(|r| r.domain.is_empty()) {
            return err(
                "routes.domain",
                &format!("empty domain (target {})", r.target),
            );
        }
        Ok(())
    }

    /// The number of workers to run (resolving 0 to the available cores).
    pub fn worker_count(&self) -> usize {
        if self.workers > 0 {
            self.workers
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        }
    }

    /// The data directory in effect.
    pub fn data_dir(&self) -> PathBuf {
        self.data_dir.clone().unwrap_or_else(default_data_dir)
    }

    /// The store in effect: the configured one, or a persistent store in the data directory.
    pub fn store(&self) -> StoreSpec {
        self.store
            .clone()
            .unwrap_or_else(|| StoreSpec::Path(self.data_dir().join("location")))
    }

    /// The shutdown grace period.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms)
    }
}

/// The 1-based line of byte `offset` and the dotted key written on that line (or the nearest
/// line above that assigns one, for values spanning lines), prefixed by its table.
fn locate(text: &str, offset: usize) -> (usize, String) {
    let offset = offset.min(text.len());
    let lines: Vec<&str> = text.split('\n').collect();
    let line_idx = text[..offset].matches('\n').count();
    let mut key = None;
    for l in lines[..=line_idx.min(lines.len().saturating_sub(1))]
        .iter()
        .rev()
    {
        let t = l.trim();
        if let Some(h) = table_header(t) {
            // The error is in the header itself (e.g. an unknown table).
            key = Some(key.unwrap_or_else(|| h.to_owned()));
            break;
        }
        if let Some((k, _)) = t.split_once('=')
            && !t.starts_with('#')
            && key.is_none()
        {
            key = Some(k.trim().trim_matches('"').to_owned());
            break;
        }
    }
    let key = key.unwrap_or_else(|| "-".into());
    let table = lines[..line_idx.min(lines.len())]
        .iter()
        .rev()
        .find_map(|l| table_header(l.trim()));
    let key = match table {
        Some(t) if t != key && !key.starts_with(&format!("{t}.")) => format!("{t}.{key}"),
        _ => key,
    };
    (line_idx + 1, key)
}

fn table_header(t: &str) -> Option<&str> {
    let inner = t.strip_prefix("[[").and_then(|s| s.split("]]").next());
    let inner = inner.or_else(|| t.strip_prefix('[').and_then(|s| s.split(']').next()));
    inner.map(str::trim)
}

/// The 1-based line where dotted `key` is assigned (0 when absent).
fn find_key_line(text: &str, key: &str) -> usize {
    let (table, name) = key.rsplit_once('.').unwrap_or(("", key));
    let mut current = "";
    for (i, l) in text.lines().enumerate() {
        let t = l.trim();
        if let Some(h) = table_header(t) {
            current = h;
            continue;
        }
        if current == table
            && let Some((k, _)) = t.split_once('=')
            && k.trim().trim_matches('"') == name
        {
            return i + 1;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_full_file() {
        let c = ServerConfig::from_toml("x.toml", "").expect("empty is default");
        assert_eq!(c, ServerConfig::default());
        let text = r#"
listen = ["udp:127.0.0.1:0", "tcp:[::1]:5070"]
workers = 2
domains = ["example.com"]
record_route = true
store = "memory"
metrics = "127.0.0.1:9999"
[limits]
max_connections = 5
[timers]
t1_ms = 100
[[routes]]
domain = "*"
target = "tcp:127.0.0.1:5080"
stateless = true
"#;
        let c = ServerConfig::from_toml("x.toml", text).expect("parses");
        assert_eq!(c.listen.len(), 2);
        assert_eq!(c.listen[1].to_string(), "tcp:[::1]:5070");
        assert_eq!(c.store(), StoreSpec::Memory);
        assert_eq!(c.limits.max_connections, 5);
        assert_eq!(c.timers.t1_ms, 100);
        assert!(c.routes[0].stateless);
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let e = ServerConfig::from_toml("a.toml", "workers = 2\n[limits]\nmax_conections = 3\n")
            .expect_err("unknown key");
        assert_eq!(
            (e.file.as_str(), e.line, e.key.as_str()),
            ("a.toml", 3, "limits.max_conections")
        );
        let e = ServerConfig::from_toml("a.toml", "\nworkers = \"many\"\n").expect_err("bad value");
        assert_eq!((e.line, e.key.as_str()), (2, "workers"));
        let e = ServerConfig::from_toml(
            "a.toml",
            "listen = [\n  \"udp:1.2.3.4:5\",\n  \"sctp:x\",\n]\n",
        )
        .expect_err("bad listener");
        assert_eq!((e.line, e.key.as_str()), (1, "listen"));
        assert!(e.message.contains("udp or tcp"), "{e}");
        let e = ServerConfig::from_toml("a.toml", "[limits]\nhandoff_queue = 0\n")
            .expect_err("invalid");
        assert_eq!((e.line, e.key.as_str()), (2, "limits.handoff_queue"));
        let e = ServerConfig::from_toml("a.toml", "[bogus]\nx = 1\n").expect_err("unknown table");
        assert_eq!((e.line, e.key.as_str()), (1, "bogus"));
    }

    #[test]
    fn registrar_section() {
        let c = ServerConfig::from_toml("x.toml", "").expect("default");
        assert_eq!(
            holdline_proto::RegistrarConfig::from(c.registrar),
            holdline_proto::RegistrarConfig::default()
        );
        let text = "[registrar]\nmin_expires = 1\nmax_expires = 600\ndefault_expires = 300\n";
        let c = ServerConfig::from_toml("x.toml", text).expect("parses");
        let r = holdline_proto::RegistrarConfig::from(c.registrar);
        assert_eq!(
            (r.min_expires, r.max_expires, r.default_expires),
            (1, 600, 300)
        );
        assert_eq!(r.max_contacts_per_aor, 10);
        let e =
            ServerConfig::from_toml("a.toml", "[registrar]\nmin_expires = 0\n").expect_err("zero");
        assert_eq!((e.line, e.key.as_str()), (2, "registrar.min_expires"));
        let e =
            ServerConfig::from_toml("a.toml", "[registrar]\nmin_expires = 10\nmax_expires = 5\n")
                .expect_err("max below min");
        assert_eq!((e.line, e.key.as_str()), (3, "registrar.max_expires"));
        let e = ServerConfig::from_toml("a.toml", "[registrar]\nmin_expire = 1\n")
            .expect_err("unknown key");
        assert_eq!((e.line, e.key.as_str()), (2, "registrar.min_expire"));
    }

    #[test]
    fn overrides_replace() {
        let mut c = ServerConfig::default();
        c.apply(Overrides {
            listen: vec!["tcp:127.0.0.1:0".parse().expect("l")],
            workers: Some(3),
            routes: vec![
                "example.com=udp:127.0.0.1:5090,stateless"
                    .parse()
                    .expect("r"),
            ],
            ..Overrides::default()
        })
        .expect("valid");
        assert_eq!(c.listen.len(), 1);
        assert_eq!(c.worker_count(), 3);
        assert!(c.routes[0].stateless);
        assert!("x".parse::<Route>().is_err());
    }
}
