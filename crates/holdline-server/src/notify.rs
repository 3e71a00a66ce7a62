//! Readiness notification for systemd's `Type=notify` services (`sd_notify(3)`'s protocol,
//! without libsystemd): one datagram such as `READY=1` to the Unix socket named by
//! `$NOTIFY_SOCKET` — a path, or an abstract name when it starts with `@`. Without the
//! variable (not started by systemd) nothing is sent.

use std::io;
use std::os::unix::net::UnixDatagram;

/// What the server tells its service manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// `READY=1`: the listeners are bound and the workers run.
    Ready,
    /// `STOPPING=1`: shutdown has begun.
    Stopping,
    /// `RELOADING=1`: a reload has begun (followed by [`State::Ready`] when done).
    Reloading,
}

impl State {
    fn message(self) -> String {
        match self {
            Self::Ready => format!(
                "READY=1\nSTATUS=holdline {} serving\nMAINPID={}",
                env!("CARGO_PKG_VERSION"),
                std::process::id()
            ),
            Self::Stopping => "STOPPING=1\nSTATUS=stopping".to_owned(),
            Self::Reloading => "RELOADING=1\nSTATUS=reloading".to_owned(),
        }
    }
}

/// Sends `state` to `$NOTIFY_SOCKET`. Returns `Ok(false)` when the variable is not set,
/// `Ok(true)` when the datagram was sent.
pub(crate) fn notify(state: State) -> io::Result<bool> {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(false);
    };
    let sock = UnixDatagram::unbound()?;
    let msg = state.message();
    let bytes = path.as_encoded_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        sock.send_to_addr(msg.as_bytes(), &addr)?;
    } else {
        sock.send_to(msg.as_bytes(), std::path::Path::new(&path))?;
    }
    Ok(true)
}

/// [`notify`], a failure logged (the server runs on without its manager knowing).
pub(crate) fn tell(state: State) {
    if let Err(e) = notify(state) {
        tracing::warn!(error = %e, ?state, "could not notify the service manager ($NOTIFY_SOCKET)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_follow_sd_notify() {
        assert!(State::Ready.message().starts_with("READY=1\n"));
        assert!(State::Stopping.message().starts_with("STOPPING=1"));
        assert!(State::Reloading.message().starts_with("RELOADING=1"));
    }
}
