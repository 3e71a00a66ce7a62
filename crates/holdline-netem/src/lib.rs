//! `holdline netem`: a user-space network emulator (issue 19 item 2).
//!
//! The kernel's `netem` qdisc is not available everywhere (this project's build machine
//! lacks it), and the lab's experiments need links with delay, loss and router queues. This
//! crate joins two network namespaces with a TUN device in each and forwards every IP
//! packet between them through the link models of [`holdline_netmodel`] — the same pure
//! code the simulator uses — so one configuration means the same link in `holdline sim` and
//! on real processes.
//!
//! - [`Topology`]: the namespaces and devices (created, or attached to existing namespaces).
//! - [`Emulator`]: the forwarding threads, two per direction, and their counters.
//! - [`traffic::Traffic`]: competing long-lived TCP transfers and web-like sessions (seed 002).
//! - [`probe::measure`]: one-way delay and loss measured end to end with UDP probes, for the
//!   accuracy table of `docs/netem.md`.
//!
//! Raw IO lives here (the TUN `ioctl`, `poll`, `setns`), so the crate is not
//! `forbid(unsafe_code)`: each `unsafe` block is one system call with its reasoning.
#![deny(unsafe_code)]

mod emulator;
mod error;
mod host;
pub mod netns;
pub mod probe;
pub mod traffic;
mod tun;

pub use emulator::{
    ADDR_A, ADDR_B, Clock, DEVICE, DirectionStats, Emulator, EmulatorConfig, MAX_HELD, Topology,
};
pub use error::{NetemError, Result};
pub use host::HostDrops;
pub use tun::Tun;
