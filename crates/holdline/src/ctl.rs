//! `holdline ctl`: talks to a running `holdline serve` over its control socket (one JSON
//! line per request and per reply; see `holdline_server::ctl`).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use holdline_server::ServerConfig;
use holdline_server::ctl::{BindingsAction, Request};
use serde_json::Value;

/// `holdline ctl`.
#[derive(Debug, clap::Args)]
pub(crate) struct CtlArgs {
    /// The server's control socket (default: `ctl_socket` of --config, else `ctl.sock` in
    /// the default data directory).
    #[arg(long, value_name = "PATH", global = true)]
    socket: Option<PathBuf>,
    /// The server's configuration file, to find its control socket.
    #[arg(long, value_name = "FILE", global = true)]
    config: Option<PathBuf>,
    /// Print the server's reply as JSON.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: CtlCommand,
}

#[derive(Debug, clap::Subcommand)]
enum CtlCommand {
    /// Uptime, workers and their load, overload state, transactions, connections, store.
    Status,
    /// The location store: show, list or remove registrations.
    Bindings {
        #[command(subcommand)]
        action: BindingsCommand,
    },
    /// The routes, domains and relay policy in effect.
    Routes,
    /// The load-sharing targets: their state and probing.
    NextHops,
    /// Set the log filter (e.g. `debug`, `info,holdline_proto=debug`) until the next reload
    /// that changes `log`.
    LogLevel {
        /// The filter (tracing `EnvFilter` syntax).
        level: String,
    },
    /// Re-read the configuration file and apply what can change live.
    Reload,
    /// Stop admitting new calls and registrations, let those in progress finish, flush the
    /// store and exit.
    Drain,
}

#[derive(Debug, clap::Subcommand)]
enum BindingsCommand {
    /// The bindings of one address-of-record (`user@host`).
    Show {
        /// The address-of-record.
        aor: String,
    },
    /// The registered addresses-of-record.
    List {
        /// Only those starting with this.
        #[arg(long, value_name = "P")]
        prefix: Option<String>,
    },
    /// Remove every binding of one address-of-record.
    Remove {
        /// The address-of-record.
        aor: String,
    },
}

/// Why a request got no reply.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
    /// Nothing listens on the socket.
    #[error(
        "no server listening on {0}: is `holdline serve` running with --ctl-socket {0} (or `ctl_socket` in its configuration)?"
    )]
    NotListening(PathBuf),
    /// The socket is someone else's.
    #[error(
        "permission denied on {0}: the control socket is mode 0600; run as the user the server runs as"
    )]
    Permission(PathBuf),
    /// Reading or writing failed.
    #[error("control socket {path}: {source}")]
    Io {
        /// The socket.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The reply is not JSON.
    #[error("control socket {0}: the reply is not JSON: {1}")]
    BadReply(PathBuf, String),
}

/// Sends one request to the server on `path` and returns its reply.
pub(crate) fn request(path: &Path, req: &Request) -> Result<Value, ClientError> {
    let io = |source: std::io::Error| match source.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
            ClientError::NotListening(path.to_owned())
        }
        std::io::ErrorKind::PermissionDenied => ClientError::Permission(path.to_owned()),
        _ => ClientError::Io {
            path: path.to_owned(),
            source,
        },
    };
    let mut conn = UnixStream::connect(path).map_err(io)?;
    conn.set_read_timeout(Some(Duration::from_secs(40)))
        .map_err(io)?;
    conn.write_all(req.to_line().as_bytes()).map_err(io)?;
    let mut line = String::new();
    BufReader::new(conn).read_line(&mut line).map_err(io)?;
    serde_json::from_str(&line).map_err(|e| ClientError::BadReply(path.to_owned(), e.to_string()))
}

/// The control socket: --socket, or the configuration's.
fn socket_path(args: &CtlArgs) -> Result<PathBuf, String> {
    if let Some(p) = &args.socket {
        return Ok(p.clone());
    }
    let config = match &args.config {
        Some(f) => ServerConfig::from_file(f).map_err(|e| e.to_string())?,
        None => ServerConfig::default(),
    };
    config.ctl_socket_path().ok_or_else(|| {
        "the configuration turns the control socket off (ctl_socket = \"\")".to_owned()
    })
}

/// Runs `holdline ctl`.
pub(crate) fn main(args: &CtlArgs) -> ExitCode {
    let path = match socket_path(args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("holdline ctl: {e}");
            return ExitCode::FAILURE;
        }
    };
    let req = match &args.command {
        CtlCommand::Status => Request::Status,
        CtlCommand::Bindings { action } => Request::Bindings(match action {
            BindingsCommand::Show { aor } => BindingsAction::Show { aor: aor.clone() },
            BindingsCommand::List { prefix } => BindingsAction::List {
                prefix: prefix.clone(),
            },
            BindingsCommand::Remove { aor } => BindingsAction::Remove { aor: aor.clone() },
        }),
        CtlCommand::Routes => Request::Routes,
        CtlCommand::NextHops => Request::NextHops,
        CtlCommand::LogLevel { level } => Request::LogLevel {
            level: level.clone(),
        },
        CtlCommand::Reload => Request::Reload,
        CtlCommand::Drain => Request::Drain,
    };
    let mut reply = match request(&path, &req) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("holdline ctl: {e}");
            return ExitCode::FAILURE;
        }
    };
    let ok = reply.get("ok").and_then(Value::as_bool) == Some(true);
    // The metrics text is the server's raw material: summarised, not printed.
    if let Some(text) = reply
        .as_object_mut()
        .and_then(|o| o.remove("metrics"))
        .and_then(|m| m.as_str().map(str::to_owned))
    {
        let samples = crate::status::parse(&text);
        let report = crate::status::Report::from_samples(&samples);
        match req {
            Request::NextHops => reply["probed"] = report.targets_json(),
            _ => {
                reply["summary"] = report.to_json();
                reply["summary"]["drain_rejected"] = samples
                    .iter()
                    .filter(|x| x.name == "holdline_drain_rejected_total")
                    .map(|x| x.value)
                    .sum::<f64>()
                    .into();
                reply["controllers"] = controllers(&samples);
            }
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&reply).unwrap_or_default()
        );
    } else if ok {
        print!("{}", render(&req, &reply, &path));
    }
    if !ok {
        let error = reply
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("the server refused the request");
        eprintln!("holdline ctl: {error}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// The admission controllers' state per worker, from the metrics text: the local one
/// (`holdline_overload_*`), TCP smart forwarding (`holdline_forward_*`) and hop-by-hop
/// feedback (`holdline_feedback_*`), those the server runs.
fn controllers(samples: &[crate::status::Sample]) -> Value {
    let mut out = serde_json::Map::new();
    for (name, prefix) in [
        ("local", "holdline_overload"),
        ("forward", "holdline_forward"),
        ("feedback", "holdline_feedback"),
    ] {
        let mut workers: std::collections::BTreeMap<String, serde_json::Map<String, Value>> =
            std::collections::BTreeMap::new();
        for smp in samples {
            let Some(field) = smp
                .name
                .strip_prefix(prefix)
                .and_then(|f| f.strip_prefix('_'))
            else {
                continue;
            };
            let Some(w) = smp.labels.get("worker") else {
                continue;
            };
            let e = workers.entry(w.clone()).or_default();
            match field {
                "algorithm" => {
                    if let Some(a) = smp.labels.get("algorithm") {
                        e.insert("algorithm".into(), Value::from(a.clone()));
                    }
                }
                "acceptance_ratio"
                | "occupancy_ratio"
                | "queue_delay_seconds"
                | "queue_length"
                | "admitted_total" => {
                    e.insert(field.into(), Value::from(smp.value));
                }
                "rejected_total" => {
                    let n = e.get(field).and_then(Value::as_f64).unwrap_or(0.0);
                    e.insert(field.into(), Value::from(n + smp.value));
                }
                _ => {}
            }
        }
        if !workers.is_empty() {
            out.insert(
                name.into(),
                workers
                    .into_iter()
                    .map(|(w, m)| (w, Value::Object(m)))
                    .collect::<serde_json::Map<_, _>>()
                    .into(),
            );
        }
    }
    out.into()
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        // Counts summed from the metrics come as floats: 12.0 reads 12.
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 1e15 => format!("{f:.0}"),
            _ => n.to_string(),
        },
        v => v.to_string(),
    }
}

fn list(v: &Value) -> String {
    match v.as_array() {
        Some(a) if !a.is_empty() => a.iter().map(s).collect::<Vec<_>>().join(", "),
        _ => "none".to_owned(),
    }
}

/// The human-readable form of a reply.
fn render(req: &Request, r: &Value, path: &Path) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    match req {
        Request::Status => {
            let _ = writeln!(
                out,
                "holdline pid {} up {} s{}; configuration generation {} ({})",
                s(&r["pid"]),
                s(&r["uptime_s"]),
                if r["draining"].as_bool() == Some(true) {
                    ", DRAINING"
                } else {
                    ""
                },
                s(&r["config_generation"]),
                s(&r["config_file"]),
            );
            let loads: Vec<String> = r["workers"]
                .as_array()
                .map(|ws| {
                    ws.iter()
                        .map(|w| {
                            format!(
                                "{}: {:.0}% ({} in progress)",
                                s(&w["index"]),
                                w["load"].as_f64().unwrap_or(0.0) * 100.0,
                                s(&w["in_flight"])
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            let _ = writeln!(out, "  workers: {}", loads.join("; "));
            let _ = writeln!(
                out,
                "  connections: {}; store: {} ({} bindings)",
                s(&r["connections"]),
                s(&r["store"]["kind"]),
                s(&r["store"]["bindings"])
            );
            if r.get("summary").is_some() {
                let sm = &r["summary"];
                let _ = writeln!(
                    out,
                    "  messages in: {}; requests in progress: {}; transactions: {} ({} lingering)",
                    s(&sm["messages_in"]),
                    s(&sm["requests_in_progress"]),
                    s(&sm["transactions"]),
                    s(&sm["transactions_lingering"])
                );
                let acc: Vec<String> = sm["overload_acceptance"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(w, a)| format!("worker {w} {:.2}", a.as_f64().unwrap_or(0.0)))
                            .collect()
                    })
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "  overload: acceptance {}; rejected {}",
                    if acc.is_empty() {
                        "-".to_owned()
                    } else {
                        acc.join(", ")
                    },
                    s(&sm["overload_rejected"])
                );
            }
            if let Some(ctls) = r["controllers"].as_object() {
                for (name, workers) in ctls {
                    let per: Vec<String> = workers
                        .as_object()
                        .map(|ws| {
                            ws.iter()
                                .map(|(w, c)| {
                                    format!(
                                        "worker {w} {} acceptance {:.2}{} admitted {} rejected {}",
                                        s(&c["algorithm"]),
                                        c["acceptance_ratio"].as_f64().unwrap_or(1.0),
                                        c["occupancy_ratio"]
                                            .as_f64()
                                            .map(|o| format!(" occupancy {o:.2}"))
                                            .unwrap_or_default(),
                                        s(&c["admitted_total"]),
                                        s(&c["rejected_total"]),
                                    )
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    let _ = writeln!(out, "  controller {name}: {}", per.join("; "));
                }
            }
        }
        Request::Bindings(BindingsAction::Show { .. }) => {
            let bs = r["bindings"].as_array().cloned().unwrap_or_default();
            let _ = writeln!(out, "{}: {} binding(s)", s(&r["aor"]), bs.len());
            for b in bs {
                let _ = writeln!(
                    out,
                    "  {}  expires in {} s  q={}  from {}",
                    s(&b["contact"]),
                    s(&b["expires_in_s"]),
                    s(&b["q"]),
                    s(&b["source"])
                );
            }
        }
        Request::Bindings(BindingsAction::List { .. }) => {
            for a in r["aors"].as_array().cloned().unwrap_or_default() {
                let _ = writeln!(out, "{}", s(&a));
            }
            if r["truncated"].as_bool() == Some(true) {
                out.push_str("(truncated: narrow with --prefix)\n");
            }
        }
        Request::Bindings(BindingsAction::Remove { .. }) => {
            let _ = writeln!(
                out,
                "{}: {} binding(s) removed",
                s(&r["aor"]),
                s(&r["removed"])
            );
        }
        Request::Routes => {
            let _ = writeln!(
                out,
                "domains: {}\naliases: {}\nrelay: {}; record-route: {}",
                list(&r["domains"]),
                list(&r["aliases"]),
                s(&r["relay"]),
                s(&r["record_route"])
            );
            for rt in r["routes"].as_array().cloned().unwrap_or_default() {
                let _ = writeln!(
                    out,
                    "route {} -> {}{}",
                    s(&rt["domain"]),
                    s(&rt["target"]),
                    if rt["stateless"].as_bool() == Some(true) {
                        " (stateless)"
                    } else {
                        ""
                    }
                );
            }
            for h in r["hash_routes"].as_array().cloned().unwrap_or_default() {
                let _ = writeln!(
                    out,
                    "hash route {} -> {} (failover {})",
                    s(&h["domain"]),
                    list(&h["targets"]),
                    s(&h["failover"])
                );
            }
        }
        Request::NextHops => {
            let probing = &r["probing"];
            let _ = writeln!(
                out,
                "probing: every {} ms, timeout {} ms, down after {} failures{}",
                s(&probing["interval_ms"]),
                s(&probing["timeout_ms"]),
                s(&probing["down_after"]),
                if probing["interval_ms"].as_u64() == Some(0) {
                    " (off)"
                } else {
                    ""
                }
            );
            let probed = r["probed"].as_object().cloned().unwrap_or_default();
            for t in r["targets"].as_array().cloned().unwrap_or_default() {
                let t = s(&t);
                // The metrics name a target `transport addr`; the configuration `transport:addr`.
                let key = t.replacen(':', " ", 1);
                match probed.get(&key) {
                    Some(p) => {
                        let _ = writeln!(
                            out,
                            "{t:<28} {:<4} (up on {} worker(s), down on {}; {} probe(s) failed in a row)",
                            s(&p["state"]),
                            s(&p["up_on_workers"]),
                            s(&p["down_on_workers"]),
                            s(&p["probe_failures_in_a_row"])
                        );
                    }
                    None => {
                        let _ = writeln!(out, "{t:<28} not probed");
                    }
                }
            }
        }
        Request::LogLevel { .. } => {
            let _ = writeln!(out, "log filter: {}", s(&r["log"]));
        }
        Request::Reload => {
            let _ = writeln!(
                out,
                "reloaded {} (generation {}, applied on {} worker(s))\n  applied live: {}\n  needs a restart: {}",
                s(&r["file"]),
                s(&r["config_generation"]),
                s(&r["workers_applied"]),
                list(&r["applied"]),
                list(&r["needs_restart"]),
            );
            for n in r["notes"].as_array().cloned().unwrap_or_default() {
                let _ = writeln!(out, "  {}", s(&n));
            }
            if let Some(n) = r.get("note") {
                let _ = writeln!(out, "  {}", s(n));
            }
        }
        Request::Drain => {
            let _ = writeln!(
                out,
                "draining: new calls and registrations get 503 (Retry-After {} s); the server exits once nothing has been in progress for {} ms (at most {} s); `holdline ctl --socket {} status` meanwhile",
                s(&r["retry_after_s"]),
                s(&r["idle_ms"]),
                s(&r["grace_s"]),
                path.display()
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controllers_are_read_per_worker_from_the_metrics() {
        let text = "\
holdline_overload_algorithm{worker=\"0\",algorithm=\"occ\"} 1
holdline_overload_acceptance_ratio{worker=\"0\"} 0.75
holdline_overload_rejected_total{worker=\"0\",reason=\"occupancy\"} 3
holdline_overload_rejected_total{worker=\"0\",reason=\"maintenance\"} 2
holdline_forward_acceptance_ratio{worker=\"1\"} 1
holdline_messages_in_total{worker=\"0\",transport=\"udp\"} 10
";
        let c = controllers(&crate::status::parse(text));
        assert_eq!(c["local"]["0"]["algorithm"], "occ");
        assert_eq!(c["local"]["0"]["acceptance_ratio"], 0.75);
        assert_eq!(c["local"]["0"]["rejected_total"], 5.0);
        assert_eq!(c["forward"]["1"]["acceptance_ratio"], 1.0);
        assert!(c.get("feedback").is_none());
    }

    #[test]
    fn counts_print_without_a_fraction() {
        assert_eq!(s(&serde_json::json!(12.0)), "12");
        assert_eq!(s(&serde_json::json!(0.25)), "0.25");
        assert_eq!(s(&serde_json::json!(7)), "7");
        assert_eq!(s(&Value::Null), "-");
    }
}
