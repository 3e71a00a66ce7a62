//! The emulator's errors: each says what it was doing.

use holdline_netmodel::LinkError;

/// Why the emulator could not start or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetemError {
    /// A system call or file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, e.g. `create TUN device nt0 in hln12-a`.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// An `ip` command failed (its stderr).
    #[error("{command}: {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A link configuration out of range.
    #[error("link {direction}: {source}")]
    Link {
        /// `a->b` or `b->a`.
        direction: &'static str,
        /// The error.
        #[source]
        source: LinkError,
    },
    /// Not running as root (namespaces and TUN devices need `CAP_NET_ADMIN`).
    #[error(
        "holdline netem needs root (CAP_NET_ADMIN) to create network namespaces and TUN devices"
    )]
    NotRoot,
}

impl NetemError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, NetemError>;
