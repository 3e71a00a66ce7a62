//! What the lab's experiments share: starting and stopping processes, scraping a server's
//! metrics, reading the generators' per-second CSV, describing the machine.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::error::{LabError, Result};
use crate::generator::spawn_pinned;

pub(crate) fn check_tools() -> Result<()> {
    let ok = Command::new("taskset")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(())
    } else {
        Err(LabError::Missing {
            program: "taskset",
            package: "util-linux",
        })
    }
}

/// A child process stopped (SIGKILL) and reaped when dropped.
pub(crate) struct Proc(pub(crate) Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn spawn(core: &str, exe: &Path, args: &[String], log: &Path) -> Result<Proc> {
    spawn_pinned(core, exe, args, log).map(Proc)
}

/// `GET /metrics` (bounded).
pub(crate) fn scrape(port: u16) -> String {
    let Ok(mut s) = TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(2),
    ) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}

/// Sum of the samples of `name` (all labels).
pub(crate) fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let rest = series.strip_prefix(name)?;
            (rest.is_empty() || rest.starts_with('{'))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// The mean per second of `column` in a `holdline load` CSV over rows with `t_s` in
/// `(duration / 4, duration]` (0 when the file or column is missing).
pub(crate) fn steady(csv: &Path, column: &str, duration: f64) -> f64 {
    let Ok(text) = std::fs::read_to_string(csv) else {
        return 0.0;
    };
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return 0.0;
    };
    let cols: Vec<&str> = header.split(',').collect();
    let (Some(t), Some(c)) = (
        cols.iter().position(|h| *h == "t_s"),
        cols.iter().position(|h| *h == column),
    ) else {
        return 0.0;
    };
    let vals: Vec<f64> = lines
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let ts: f64 = f.get(t)?.parse().ok()?;
            let v: f64 = f.get(c)?.parse().ok()?;
            (ts > duration / 4.0 && ts <= duration).then_some(v)
        })
        .collect();
    if vals.is_empty() {
        0.0
    } else {
        vals.iter().sum::<f64>() / vals.len() as f64
    }
}

/// The sum of `column` in a `holdline load` CSV over the rows (one per second of that
/// process) whose end `t_s` lies in `(from + 0.5, to + 0.5]`: what it counted from about
/// `from` to about `to` seconds after it started (0 when the file or column is missing).
pub(crate) fn window_sum(csv: &Path, column: &str, from: f64, to: f64) -> f64 {
    let Ok(text) = std::fs::read_to_string(csv) else {
        return 0.0;
    };
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return 0.0;
    };
    let cols: Vec<&str> = header.split(',').collect();
    let (Some(t), Some(c)) = (
        cols.iter().position(|h| *h == "t_s"),
        cols.iter().position(|h| *h == column),
    ) else {
        return 0.0;
    };
    lines
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let ts: f64 = f.get(t)?.parse().ok()?;
            let v: f64 = f.get(c)?.parse().ok()?;
            (ts > from + 0.5 && ts <= to + 0.5).then_some(v)
        })
        .sum()
}

pub(crate) fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let rmem = std::fs::read_to_string("/proc/sys/net/core/rmem_default")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    serde_json::json!({
        "cpu": cpu,
        "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "kernel": kernel,
        "udp_rmem_default": rmem,
    })
}
