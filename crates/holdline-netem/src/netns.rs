//! Network namespaces: created with `ip netns add`, deleted when their guard is dropped, and
//! entered by one thread at a time with `setns(2)`.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};

use crate::error::{NetemError, Result};

/// Network namespaces this process created, deleted in reverse order when dropped.
#[derive(Debug, Default)]
pub struct Netns {
    names: Vec<String>,
}

impl Netns {
    /// No namespaces yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Creates namespace `name` (kept for deletion even if a later step fails) and brings
    /// its loopback up.
    pub fn add(&mut self, name: &str) -> Result<()> {
        ip(&["netns", "add", name])?;
        self.names.push(name.to_owned());
        ip(&["-n", name, "link", "set", "lo", "up"])
    }

    /// The namespaces held, in creation order.
    pub fn names(&self) -> &[String] {
        &self.names
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for name in self.names.iter().rev() {
            let _ = Command::new("ip")
                .args(["netns", "del", name])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Runs `ip ARGS`; an error carries its stderr.
pub fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| NetemError::io(format!("run ip {}", args.join(" ")), e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(NetemError::Command {
            command: format!("ip {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

/// Moves the calling thread into network namespace `ns` (`/run/netns/NS`). Only this
/// thread changes namespace; sockets and devices it creates afterwards live in `ns`.
#[allow(unsafe_code)]
pub fn enter(ns: &str) -> std::io::Result<()> {
    let f = File::open(format!("/run/netns/{ns}"))?;
    // SAFETY: setns(2) on a namespace file we hold open; it changes only the calling
    // thread's network namespace.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Runs `f` on a thread of its own inside namespace `ns` and returns its result.
pub fn run_in<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    let name = ns.to_owned();
    std::thread::spawn(move || enter(&name).map(|()| f()))
        .join()
        .map_err(|_| {
            NetemError::io(
                format!("a thread in namespace {ns}"),
                std::io::Error::other("panicked"),
            )
        })?
        .map_err(|e| NetemError::io(format!("enter namespace {ns}"), e))
}

/// Whether the process runs as root.
#[allow(unsafe_code)]
pub fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
