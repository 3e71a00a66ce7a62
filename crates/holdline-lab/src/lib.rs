//! holdline's lab: measurements that run real processes on this machine.
//!
//! [`bench`] is `holdline bench`: holdline against Kamailio, each pinned to one core, driven
//! by `holdline load` on the other core, for capacity, sustained load at that capacity, CPU
//! cost per call and overload curves under a cgroup CPU quota. The `holdline` binary calls
//! [`bench::run`].
//!
//! [`lab`] is `holdline lab NAME`: the papers' experiments ([`udp_overload`], [`tcp_overload`],
//! [`feedback`], [`window`]; `architectures`, seed 001 §6's server architectures around
//! holdline's own `Endpoint`).

mod architectures;
pub mod bench;
mod cgroup;
pub mod deoc;
mod error;
mod failover;
pub mod feedback;
mod generator;
pub mod holb;
pub mod index;
pub mod lab;
mod pki;
pub mod plot;
pub mod ports;
mod procfs;
mod report;
mod runner;
mod scaling;
mod server;
mod soak;
mod stats;
mod storm;
mod sustain;
pub mod tcp_buffers;
pub mod tcp_fairness;
pub mod tcp_overload;
pub mod udp_overload;
mod vrrp;
mod wan;
pub mod window;

pub use error::LabError;
pub use runner::{metric, metric_where};

/// Linux's default `SO_RCVBUF` (`net.core.rmem_default`, 212,992 bytes): the papers'
/// experiments give the server this receive buffer (`--udp-recv-buffer`), as their servers
/// had it and as the simulator's scenarios model it; `holdline serve`'s own default is 8 MiB.
pub(crate) const KERNEL_UDP_RECV_BUFFER: usize = 212_992;
