//! A driver in a process of its own (`holdline lab architectures-driver`), and the lab's
//! handle on it.
//!
//! The child binds, prints `ready IP:PORT` on stdout, then answers every `usage` line on
//! stdin with `usage USER_US SYS_US VOLUNTARY INVOLUNTARY DROPS`: its own `getrusage(2)`
//! (`RUSAGE_SELF`: every thread, those that already ended included, which `/proc` would
//! miss for thread-per-message). End of stdin (or `quit`) stops it.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Parser;

use super::drivers::{self, Driver, Spec};
use crate::error::{LabError, Result};

/// How long the lab waits for a child's `ready` or `usage` line.
const ANSWER_WITHIN: Duration = Duration::from_secs(15);

/// `holdline lab architectures-driver` options (started by `lab architectures`).
#[derive(Debug, Parser)]
#[command(
    name = "holdline lab architectures-driver",
    about = "one server-architecture driver of `holdline lab architectures`, controlled on stdin"
)]
struct ChildArgs {
    /// The driver (`process-pool`: one member of the pool).
    #[arg(long, value_parser = Driver::parse)]
    driver: Driver,
    /// Where it takes calls.
    #[arg(long, value_name = "IP:PORT")]
    listen: SocketAddr,
    /// The next hop of every call.
    #[arg(long, value_name = "IP:PORT")]
    uas: SocketAddr,
    /// Transaction-stateful (else stateless).
    #[arg(long)]
    stateful: bool,
    /// Threads of a pool.
    #[arg(long, default_value_t = 4)]
    pool: usize,
    /// Emulated CPU work per message, µs.
    #[arg(long, default_value_t = 0)]
    cost_us: u64,
    /// A process-pool member's number (its branches' seed).
    #[arg(long, default_value_t = 1)]
    member: u64,
}

/// CPU time and context switches of a process (or a set of them), summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Usage {
    /// User CPU time, µs.
    pub user_us: u64,
    /// System CPU time, µs.
    pub sys_us: u64,
    /// Voluntary context switches (the thread blocked: waiting for input or a lock).
    pub voluntary: u64,
    /// Involuntary context switches (preempted).
    pub involuntary: u64,
    /// Datagrams a driver dropped at one of its bounds.
    pub drops: u64,
}

impl Usage {
    /// The usage since `earlier` (0 where a counter went backwards).
    pub(crate) fn since(self, earlier: Self) -> Self {
        Self {
            user_us: self.user_us.saturating_sub(earlier.user_us),
            sys_us: self.sys_us.saturating_sub(earlier.sys_us),
            voluntary: self.voluntary.saturating_sub(earlier.voluntary),
            involuntary: self.involuntary.saturating_sub(earlier.involuntary),
            drops: self.drops.saturating_sub(earlier.drops),
        }
    }

    /// The sum of two usages.
    pub(crate) fn plus(self, o: Self) -> Self {
        Self {
            user_us: self.user_us + o.user_us,
            sys_us: self.sys_us + o.sys_us,
            voluntary: self.voluntary + o.voluntary,
            involuntary: self.involuntary + o.involuntary,
            drops: self.drops + o.drops,
        }
    }

    /// The answer line of a child.
    fn line(self) -> String {
        format!(
            "usage {} {} {} {} {}",
            self.user_us, self.sys_us, self.voluntary, self.involuntary, self.drops
        )
    }

    /// Parses an answer line.
    pub(crate) fn parse(line: &str) -> Option<Self> {
        let mut f = line.split_whitespace();
        (f.next()? == "usage").then_some(())?;
        let mut n = || f.next()?.parse::<u64>().ok();
        Some(Self {
            user_us: n()?,
            sys_us: n()?,
            voluntary: n()?,
            involuntary: n()?,
            drops: n()?,
        })
    }
}

/// This process's own usage (`getrusage(RUSAGE_SELF)`).
fn own_usage(drops: u64) -> Usage {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage that outlives the call.
    let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } == 0;
    if !ok {
        return Usage::default();
    }
    let us = |t: libc::timeval| {
        u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000 + u64::try_from(t.tv_usec).unwrap_or(0)
    };
    Usage {
        user_us: us(ru.ru_utime),
        sys_us: us(ru.ru_stime),
        voluntary: u64::try_from(ru.ru_nvcsw).unwrap_or(0),
        involuntary: u64::try_from(ru.ru_nivcsw).unwrap_or(0),
        drops,
    }
}

/// Runs `holdline lab architectures-driver ARGS` (the exit code: 0 stopped, 2 bad
/// arguments, 1 failed).
pub(crate) fn main(args: Vec<String>) -> ExitCode {
    let parsed = match ChildArgs::try_parse_from(
        std::iter::once("holdline lab architectures-driver".to_owned()).chain(args),
    ) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(2);
        }
    };
    match serve(&parsed) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("holdline lab architectures-driver: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve(a: &ChildArgs) -> Result<()> {
    let spec = Spec {
        stateful: a.stateful,
        uas: a.uas,
        pool: a.pool,
        cost: Duration::from_micros(a.cost_us),
    };
    let mut running = match a.driver {
        Driver::ProcessPool => drivers::start_pool_member(a.listen, &spec, a.member)?,
        d => drivers::start(d, a.listen, &spec)?,
    };
    let mut out = std::io::stdout().lock();
    let say = |out: &mut std::io::StdoutLock<'_>, s: &str| -> Result<()> {
        writeln!(out, "{s}")
            .and_then(|()| out.flush())
            .map_err(|e| LabError::io("write to the lab", e))
    };
    say(&mut out, &format!("ready {}", running.addr))?;
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        match line.trim() {
            "usage" => {
                let drops = running.drops.load(Ordering::Relaxed);
                say(&mut out, &own_usage(drops).line())?;
            }
            "quit" => break,
            _ => {}
        }
    }
    running.stop();
    Ok(())
}

/// A driver process started by the lab: stopped (stdin closed, then SIGKILL after a
/// second) and reaped when dropped.
pub(crate) struct DriverProc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: crossbeam_channel::Receiver<String>,
    /// Where it takes calls.
    pub addr: SocketAddr,
}

impl DriverProc {
    /// Starts `exe lab architectures-driver ARGS` pinned to `cores` (`taskset -c`) and,
    /// with `cgroup_procs`, born inside that CPU group, its stderr to `log`; returned once it
    /// said `ready`.
    pub(crate) fn start(
        cores: &str,
        cgroup_procs: Option<&Path>,
        exe: &Path,
        args: &[String],
        log: &Path,
    ) -> Result<Self> {
        let logf = std::fs::File::create(log)
            .map_err(|e| LabError::io(format!("create {}", log.display()), e))?;
        // The shell writes its own PID into the group (if any), then execs taskset, which
        // execs the driver: everything the driver starts stays in the group.
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#"if [ -n "$0" ]; then echo $$ > "$0" || exit 97; fi; exec "$@""#)
            .arg(
                cgroup_procs
                    .map(|p| p.as_os_str().to_owned())
                    .unwrap_or_default(),
            )
            .arg("taskset")
            .args(["-c", cores])
            .arg(exe)
            .args(["lab", "architectures-driver"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(logf)
            .spawn()
            .map_err(|e| LabError::io("start a driver process", e))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let (tx, lines) = crossbeam_channel::bounded(16);
        if let Some(stdout) = stdout {
            // Ends when the child's stdout closes.
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let mut p = Self {
            child,
            stdin,
            lines,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        let line = p.answer().map_err(|e| {
            LabError::Process(format!(
                "{e}; log {}:\n{}",
                log.display(),
                crate::server::tail(log)
            ))
        })?;
        p.addr = line
            .strip_prefix("ready ")
            .and_then(|a| a.trim().parse().ok())
            .ok_or_else(|| LabError::Process(format!("driver said `{line}`, not ready")))?;
        Ok(p)
    }

    /// The next line of the child (bounded wait).
    fn answer(&mut self) -> Result<String> {
        self.lines.recv_timeout(ANSWER_WITHIN).map_err(|_| {
            LabError::Process(format!(
                "driver process {} did not answer within {} s",
                self.child.id(),
                ANSWER_WITHIN.as_secs()
            ))
        })
    }

    /// Its CPU time and context switches so far.
    pub(crate) fn usage(&mut self) -> Result<Usage> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| LabError::Process("driver process already stopped".into()))?;
        writeln!(stdin, "usage")
            .and_then(|()| stdin.flush())
            .map_err(|e| LabError::io("ask a driver process", e))?;
        let line = self.answer()?;
        Usage::parse(&line).ok_or_else(|| LabError::Process(format!("driver said `{line}`")))
    }

    /// Stops the child: end of stdin, one second to exit, then SIGKILL; reaped.
    pub(crate) fn stop(&mut self) {
        self.stdin = None;
        // Kills and reaps it if it has not exited by then.
        crate::generator::wait_bounded(&mut self.child, Duration::from_secs(1));
    }
}

impl Drop for DriverProc {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_lines_round_trip() {
        let u = Usage {
            user_us: 1,
            sys_us: 2,
            voluntary: 3,
            involuntary: 4,
            drops: 5,
        };
        assert_eq!(Usage::parse(&u.line()), Some(u));
        assert_eq!(Usage::parse("ready 127.0.0.1:5060"), None);
        assert_eq!(Usage::parse("usage 1 2 3"), None);
        assert_eq!(u.plus(u).since(u), u);
        assert_eq!(u.since(u.plus(u)), Usage::default());
    }

    #[test]
    fn own_usage_counts_cpu_and_switches() {
        let u0 = own_usage(0);
        let t = std::time::Instant::now();
        let mut x = 1u64;
        while t.elapsed() < Duration::from_millis(30) {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        }
        // A voluntary switch: the thread blocks (not a synchronisation).
        std::thread::sleep(Duration::from_millis(1));
        assert!(x != 0);
        let d = own_usage(0).since(u0);
        assert!(d.user_us + d.sys_us >= 10_000, "{d:?}");
        assert!(d.voluntary + d.involuntary >= 1, "{d:?}");
    }
}
