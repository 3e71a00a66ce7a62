//! The shared vocabulary of holdline's crates.
//!
//! Every protocol and control algorithm in holdline is a pure state machine: it never reads a
//! clock, opens a socket or draws system randomness. This crate holds the few types those
//! machines and their drivers (the server, the load generator, the simulator) agree on:
//!
//! ```text
//!            +-------------------- driver (IO or simulator) --------------------+
//!            |  now = clock()            bytes = socket.recv()                  |
//!            |     |                          |                                 |
//!            v     v                          v                                 |
//!   machine.handle(now, input)      machine.handle_timeout(now)                 |
//!            |                                                                  |
//!   while let Some(t) = machine.poll_transmit(now, &mut buf) { socket.send(t) } |
//!   sleep_until(machine.poll_timeout())                                         |
//!            +------------------------------------------------------------------+
//! ```
//!
//! - [`Instant`]: holdline's own monotonic instant, nanoseconds since an arbitrary epoch that
//!   the driver chooses (a simulation starts at [`Instant::ZERO`]). Spans are
//!   [`core::time::Duration`], re-exported as [`Duration`].
//! - [`Transport`], [`ConnId`], [`Peer`] and [`Transmit`]: where a message came from and where
//!   one must go.
//! - [`Rng`]: a seeded, portable pseudo-random generator (xoshiro256++), the only randomness a
//!   pure crate may use.
//! - [`Machine`]: the drive contract.
//! - [`WaitHistogram`]: waits counted in fixed buckets, rendered for Prometheus.
#![forbid(unsafe_code)]

mod growth;
mod machine;
mod net;
mod rng;
mod time;
pub mod toml_loc;
mod waits;

pub use core::time::Duration;
pub use growth::EarlyGrowth;
pub use machine::Machine;
pub use net::{ConnId, Peer, Transmit, Transport, UnknownTransport};
pub use rng::Rng;
pub use time::Instant;
pub use waits::{WAIT_BOUNDS_US, WaitHistogram, render_histogram};
