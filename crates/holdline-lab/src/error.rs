//! Typed errors of the lab.

use std::path::PathBuf;

/// What can go wrong while running a lab measurement.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A program the measurement needs is not installed.
    #[error(
        "{program} not found: install the Debian package {package} (apt-get install -y {package})"
    )]
    Missing {
        /// The program looked for on PATH.
        program: &'static str,
        /// The Debian package that provides it.
        package: &'static str,
    },
    /// A precondition of the machine is not met (root, cgroup v1, the Kamailio scripts).
    #[error("{0}")]
    Precondition(String),
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A report file of the generator could not be read or parsed.
    #[error("report {path}: {reason}")]
    Report {
        /// The report file.
        path: PathBuf,
        /// Why it is unusable.
        reason: String,
    },
    /// A server or generator process did not start or misbehaved.
    #[error("{0}")]
    Process(String),
    /// A child exited before listening because its port was taken between the pick and its
    /// `bind` (another process of the machine took it); the caller may retry on a new port.
    #[error(
        "{what} exited before listening: port {port} taken (\"Address already in use\"); log {log}"
    )]
    PortTaken {
        /// The child that failed.
        what: String,
        /// The port it could not bind.
        port: u16,
        /// Its log file.
        log: PathBuf,
    },
    /// Drawing a plot failed.
    #[error("plot {path}: {reason}")]
    Plot {
        /// The output file.
        path: PathBuf,
        /// What the plotting library said.
        reason: String,
    },
}

impl LabError {
    /// An [`LabError::Io`] with a description of the operation.
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }
}

/// Result of lab operations.
pub(crate) type Result<T> = std::result::Result<T, LabError>;

impl From<holdline_netem::NetemError> for LabError {
    fn from(e: holdline_netem::NetemError) -> Self {
        Self::Process(e.to_string())
    }
}
