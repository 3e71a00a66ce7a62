//! SIP over SCTP over UDP: RFC 4168's SCTP transport for SIP, carried in UDP datagrams as
//! RFC 6951 specifies, so that it runs in user space on any host (this project's build
//! machine has no kernel SCTP).
//!
//! [`SctpUdp`] is one UDP socket's worth of SCTP: every association with every peer that
//! talks to that socket. It is sans-IO, like the rest of holdline's protocol cores: the
//! driver hands it the datagrams the socket received ([`SctpUdp::handle_datagram`]) and the
//! SIP messages to send ([`SctpUdp::send`]), calls [`SctpUdp::handle_timeout`] when
//! [`SctpUdp::poll_timeout`] says, and takes out the datagrams to send
//! ([`SctpUdp::poll_transmit`]) and the SIP messages received ([`SctpUdp::poll_received`]).
//! The SCTP protocol itself (association setup with cookies, DATA/SACK, retransmission with
//! RTO, fast retransmit, congestion control, fragmentation, streams, ordered and unordered
//! delivery, shutdown and abort) is `sctp-proto`'s, a sans-IO SCTP maintained by the str0m
//! project.
//!
//! What this crate adds:
//! - **RFC 6951 encapsulation**: an SCTP packet is one UDP datagram's payload. The peer's
//!   *encapsulation address* (its IP and UDP port) is learnt from every datagram received on
//!   an association and used for everything sent on it, so a peer behind a NAT that changes
//!   its port keeps its association (sctp-proto fixes the address at creation).
//! - **RFC 4168 mapping**: one SIP message per SCTP user message (no Content-Length framing),
//!   the stream chosen from a key the caller gives (a hash of the Call-ID: the messages of a
//!   call share a stream and stay in order on it, different calls do not block each other),
//!   and every message sent ordered or unordered (the U bit) as configured.
//! - **Associations on demand**: sending to a peer with no association starts one; messages
//!   wait for it in a bounded queue. An association the peer started is used for our
//!   messages to it too.
//! - **Bounds**: per association at most [`SctpConfig::max_queued_bytes`] wait to be sent
//!   (the handshake's queue plus sctp-proto's send buffers); beyond it [`SctpUdp::send`]
//!   refuses with [`SendError::QueueFull`] instead of growing — the same never-blocking rule
//!   as holdline's TCP connections.
//!
//! - **Heartbeats** (sctp-proto answers HEARTBEATs but sends none): on an idle association,
//!   every [`SctpConfig::heartbeat_interval_ms`] + RTO.Min; a peer that leaves
//!   [`SctpConfig::max_retransmits`] unanswered is declared unreachable.
//! - **Ordered or unordered per peer** ([`SctpConfig::delivery`]) and the stream key of a
//!   SIP message ([`call_id_key`]).
//!
//! sctp-proto itself is vendored with four fixes (`vendor/README.md`). Not provided:
//! multihoming, and an RFC 6951 restart with a new encapsulation port (the port is simply
//! followed).
#![forbid(unsafe_code)]

mod endpoint;
mod key;

pub use endpoint::{DEFAULT_UDP_PORT, Received, SctpConfig, SctpStats, SctpUdp, SendError};
pub use key::call_id_key;
