//! holdline's IO layer: the sockets and the clock under the server's sans-IO cores.
//!
//! ```text
//!   UdpSocket ──recv_batch (recvmmsg)──> RecvBatch ──> (bytes, source) per datagram
//!   SendBatch <── queued (destination, bytes) ──sendmmsg──> UdpSocket
//!   TcpListener ──accept──> TcpConn: read buffer (append, consume) + bounded write queue
//!                            (optionally a rustls session between socket and buffers: TLS)
//!   Clock: std::time::Instant  <──>  holdline_base::Instant (nanoseconds since start)
//! ```
//!
//! - [`udp`]: UDP sockets opened with socket2 (`SO_REUSEPORT`, buffer sizes, non-blocking),
//!   receiving and sending in batches with `recvmmsg`/`sendmmsg` on Linux and one datagram
//!   per system call elsewhere (or when [`udp::UdpOptions::batched`] is off).
//! - [`tcp`]: listeners (optionally `SO_REUSEPORT`, one per worker), non-blocking connections
//!   with a byte-level read buffer (framing is the caller's business) and a write queue
//!   bounded in bytes: a full queue refuses, it never blocks. [`tcp::siocoutq`] reports the
//!   bytes the kernel has not sent yet. [`tcp::TcpConn::start_tls`] puts a rustls session
//!   (client or server) inside a connection, driven sans-IO style by the same reads and
//!   flushes; the queue then holds TLS records.
//! - [`raise_open_files`]: the open-file limit a server with many connections needs;
//!   [`set_transparent_huge_pages`]: whether the kernel backs memory with huge pages.
//! - [`pem`]: certificate chains and private keys from PEM files, for TLS.
//! - [`Clock`]: maps the operating system's monotonic clock onto [`holdline_base::Instant`];
//!   [`thread_cpu_time`]: the CPU time the calling thread has used.
//!
//! This is the only crate of the workspace allowed `unsafe`: the `libc` calls for batched
//! datagrams, `SIOCOUTQ` and the thread's CPU clock, each block with a `// SAFETY:` comment, all in [`sys`].

mod clock;
mod limits;
pub mod pem;
mod sys;
pub mod tcp;
pub mod udp;

pub use clock::{Clock, set_thread_background, thread_cpu_time};
pub use limits::{
    OpenFiles, raise_open_files, set_transparent_huge_pages, transparent_huge_pages_disabled,
};
