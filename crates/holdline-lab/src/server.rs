//! The servers under test as child processes: `holdline serve` and Kamailio (`run.sh`),
//! pinned to core 1, optionally born inside a CPU cgroup, started fresh for every step.

use std::fs::File;
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{LabError, Result};
use crate::procfs;

/// Core the server under test runs on.
pub(crate) const SERVER_CORE: &str = "1";
/// The domain both servers serve as registrar.
pub(crate) const DOMAIN: &str = "example.test";

/// SIP transport of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    Udp,
    Tcp,
    /// TLS over TCP, with the certificates of [`crate::pki`].
    Tls,
}

impl Transport {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Udp => "udp",
            Self::Tcp => "tcp",
            Self::Tls => "tls",
        }
    }
}

/// Which server, and how it is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `holdline serve` with its default overload control.
    Holdline,
    /// `holdline serve` with overload control off (`--overload none`, when the flag exists).
    HoldlineOff,
    /// Kamailio through `lab/kamailio/run.sh`.
    Kamailio,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Holdline => "holdline",
            Self::HoldlineOff => "holdline-off",
            Self::Kamailio => "kamailio",
        }
    }
}

/// What every server start needs to know.
#[derive(Debug, Clone)]
pub(crate) struct Env {
    /// The `holdline` binary.
    pub exe: PathBuf,
    /// `lab/kamailio` with `run.sh` and `stop.sh`.
    pub kamailio_dir: PathBuf,
    /// Where configs and logs go.
    pub work: PathBuf,
    /// Kamailio worker processes per transport.
    pub kamailio_children: u32,
    /// Whether `holdline serve` has `--overload`.
    pub overload_flag: bool,
}

/// A server process, stopped when dropped.
#[derive(Debug)]
pub(crate) struct Running {
    child: Option<Child>,
    kind: Kind,
    kamailio_dir: PathBuf,
    log: PathBuf,
}

/// Whether something is bound on 127.0.0.1:`port` for UDP (`Some(Udp)`), TCP, or both (`None`).
fn port_taken(port: u16, only: Option<Transport>) -> bool {
    let udp = || UdpSocket::bind(("127.0.0.1", port)).is_err();
    let tcp = || TcpListener::bind(("127.0.0.1", port)).is_err();
    match only {
        Some(Transport::Udp) => udp(),
        Some(Transport::Tcp | Transport::Tls) => tcp(),
        None => udp() && tcp(),
    }
}

/// A port free for UDP and TCP on 127.0.0.1, outside the ephemeral range (see
/// [`crate::ports`]).
pub(crate) fn free_port() -> Result<u16> {
    crate::ports::free_port()
        .ok_or_else(|| LabError::Process("no free port on 127.0.0.1 after 1,000 tries".into()))
}

/// Waits (bounded) until `port` is bound (for `only` that transport, else for UDP and TCP),
/// failing early if `child` exits.
pub(crate) fn wait_bound(
    child: &mut Child,
    port: u16,
    only: Option<Transport>,
    what: &str,
    log: &Path,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if port_taken(port, only) {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            if text.contains("Address already in use") {
                return Err(LabError::PortTaken {
                    what: what.into(),
                    port,
                    log: log.to_path_buf(),
                });
            }
            return Err(LabError::Process(format!(
                "{what} exited ({status}) before listening on port {port}; log {}:\n{}",
                log.display(),
                tail(log)
            )));
        }
        if Instant::now() >= deadline {
            return Err(LabError::Process(format!(
                "{what} not listening on port {port} after 15 s"
            )));
        }
        // Bounded readiness poll of a child process.
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The last lines of a log file, for error messages.
pub(crate) fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// Starts a server on 127.0.0.1:`port`, forwarding calls to the UAS at `uas_port` over
/// `next_hop`, pinned to the server core and, with `cgroup_procs`, inside that CPU group.
pub(crate) fn start(
    env: &Env,
    kind: Kind,
    port: u16,
    uas_port: u16,
    next_hop: Transport,
    cgroup_procs: Option<&Path>,
    tag: &str,
) -> Result<Running> {
    let log = env.work.join(format!("{tag}-{}.log", kind.name()));
    let mut cmd = Command::new("sh");
    // The shell writes its own PID into the group (if any), then execs taskset, which execs
    // the server: the child's PID is the server's, and all it forks stays in the group.
    cmd.arg("-c")
        .arg(r#"if [ -n "$0" ]; then echo $$ > "$0" || exit 97; fi; exec "$@""#)
        .arg(
            cgroup_procs
                .map(|p| p.as_os_str().to_owned())
                .unwrap_or_default(),
        )
        .args(["taskset", "-c", SERVER_CORE]);
    match kind {
        Kind::Holdline | Kind::HoldlineOff => {
            let cfg = env.work.join("holdline.toml");
            if !cfg.exists() {
                std::fs::write(
                    &cfg,
                    "# holdline bench: the same 8 MiB UDP buffers as Kamailio's maxbuffer\n\
                     [limits]\nudp_recv_buffer = 8388608\nudp_send_buffer = 8388608\n",
                )
                .map_err(|e| LabError::io(format!("write {}", cfg.display()), e))?;
            }
            cmd.arg(&env.exe)
                .arg("serve")
                .arg("--config")
                .arg(&cfg)
                .arg(format!("--listen=udp:127.0.0.1:{port}"))
                .arg(format!("--listen=tcp:127.0.0.1:{port}"))
                .args(["--workers", "1", "--store", "memory", "--domain", DOMAIN])
                .arg(format!(
                    "--route=*={}:127.0.0.1:{uas_port}",
                    next_hop.name()
                ));
            if kind == Kind::HoldlineOff && env.overload_flag {
                cmd.args(["--overload", "none"]);
            }
        }
        Kind::Kamailio => {
            let rundir = env.work.join("kamailio-run");
            cmd.arg(env.kamailio_dir.join("run.sh"))
                .arg("127.0.0.1")
                .arg(port.to_string())
                .arg(format!("127.0.0.1:{uas_port}"))
                .arg(next_hop.name())
                .arg(env.kamailio_children.to_string())
                .arg("--")
                .arg("-A")
                .arg(format!("DOMAIN=\"{DOMAIN}\""))
                .env("KAM_RUNDIR", rundir);
        }
    }
    let logf =
        File::create(&log).map_err(|e| LabError::io(format!("create {}", log.display()), e))?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(logf)
        .spawn()
        .map_err(|e| LabError::io(format!("start {}", kind.name()), e))?;
    let mut running = Running {
        child: Some(child),
        kind,
        kamailio_dir: env.kamailio_dir.clone(),
        log,
    };
    if let Some(c) = running.child.as_mut() {
        wait_bound(c, port, None, kind.name(), &running.log)?;
    }
    Ok(running)
}

impl Running {
    /// The server's main PID.
    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// CPU time so far of the server and all its processes, user and system.
    pub(crate) fn cpu_split(&self) -> procfs::CpuSplit {
        procfs::tree_cpu_split(self.pid())
    }

    /// Stops the server (bounded) and reaps it.
    pub(crate) fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if self.kind == Kind::Kamailio {
            // stop.sh: SIGTERM until obeyed, SIGKILL of it and its workers after 5 s.
            let _ = Command::new(self.kamailio_dir.join("stop.sh"))
                .arg(child.id().to_string())
                .stdout(Stdio::null())
                .status();
        } else {
            // In-memory store: nothing to flush; SIGKILL skips the 2 s shutdown grace.
            let _ = child.kill();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
                // Bounded wait for the child's exit.
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child that writes `msg` to its log and exits without binding anything.
    fn failing_child(dir: &Path, msg: &str) -> (Child, PathBuf) {
        let log = dir.join("child.log");
        let f = File::create(&log).expect("log");
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("echo '{msg}' >&2; exit 1"))
            .stderr(f)
            .spawn()
            .expect("sh");
        (child, log)
    }

    #[test]
    fn a_child_that_found_its_port_taken_is_told_apart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port().expect("port");
        let (mut c, log) = failing_child(
            dir.path(),
            "ERROR: udp_init(): bind(4) on 127.0.0.1: Address already in use",
        );
        let e = wait_bound(&mut c, port, None, "server", &log).expect_err("exited");
        assert!(
            matches!(e, LabError::PortTaken { port: p, .. } if p == port),
            "{e}"
        );
        let (mut c, log) = failing_child(dir.path(), "ERROR: bad config");
        let e = wait_bound(&mut c, port, None, "server", &log).expect_err("exited");
        assert!(matches!(e, LabError::Process(_)), "{e}");
    }
}
