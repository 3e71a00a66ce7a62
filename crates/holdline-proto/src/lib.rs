//! holdline's SIP engine, sans-IO: the transaction layer ([`txn`], RFC 3261 §17 with RFC
//! 6026's corrections), the stateful proxy core ([`proxy`], §16), the registrar
//! ([`registrar`], §10.3) over the [`LocationStore`] trait (with an in-memory store,
//! [`memstore`]), and the [`Endpoint`] that owns them for one worker.
//!
//! # Design
//!
//! A [`Transactions`](txn::Transactions) table is a pure state machine owned by one worker
//! (the IO driver runs one per core and shards by Call-ID). It never reads a clock and never
//! touches a socket: every call takes `now`, and what the table wants to send or be woken for
//! is pulled out with `poll_*`.
//!
//! ```text
//!                 transaction user (proxy / UA logic)
//!        ^ RequestOutcome   | respond()          ^ ResponseOutcome  | send_request()
//!        | TxnEvent         v                    | TxnEvent         v cancel()
//!   +-------------------------------------------------------------------------+
//!   | Transactions (one per worker)                                           |
//!   |   server txns: HashMap<id, ServerTxn>   keys: branch+sent-by+method     |
//!   |   client txns: HashMap<id, ClientTxn>   keys: branch+CSeq method        |
//!   |   timers: min-heap of (deadline, txn, slot), stale entries skipped lazily|
//!   |   out queue: (Peer, bytes | stored-message reference)                   |
//!   +-------------------------------------------------------------------------+
//!        ^ handle_request(now, bytes, from)     | poll_transmit(now, &mut buf)
//!        | handle_response(now, bytes, from)    v poll_timeout() / handle_timeout(now)
//!                 driver (sockets and clock, or the simulator)
//! ```
//!
//! # Call contract
//!
//! After every `handle_request`, `handle_response`, `respond`, `send_request`, `cancel` and
//! `handle_timeout`, the driver drains [`poll_transmit`](txn::Transactions::poll_transmit)
//! and [`poll_event`](txn::Transactions::poll_event) until they return `None`, then arms one
//! timer for [`poll_timeout`](txn::Transactions::poll_timeout) and calls
//! [`handle_timeout`](txn::Transactions::handle_timeout) when it expires. `now` must never go
//! backwards (a smaller `now` is treated as no time having passed).
//!
//! Messages are given as bytes and parsed with [`holdline_sip::Message`]; a transaction keeps
//! only the bytes it may have to retransmit (its request, its ACK, its last response) and a
//! compact matching key. Nothing here panics on any input; malformed bytes come back as
//! typed errors.
#![forbid(unsafe_code)]

pub mod auth;
pub mod dns;
pub mod endpoint;
pub mod fuzzing;
pub mod hrw;
pub mod load_control;
pub mod location;
pub mod memstore;
pub mod proxy;
pub mod registrar;
pub mod shard;
pub mod txn;

pub use auth::{
    AuthConfig, AuthDecision, Authenticator, ChallengeReason, DigestAlgorithm, HexHash,
    NonceCounts, Role, SharedUsers, UserDirectory, UserEntry, Users, UsersFileError,
};
pub use dns::{DnsCache, DnsConfig, DnsQuery, DnsResponse, DnsStats, DnsTarget};
pub use endpoint::{
    AuthStats, DropReason, Endpoint, EndpointEvent, EndpointStats, FeedbackTally, GateRejection,
    LoadControlStats, MethodCounters, OverloadAnswer, ProbedTarget, RateAnswer, StatelessFallback,
};
pub use location::{Binding, LocationStore};
pub use memstore::MemoryLocationStore;
pub use proxy::{
    DnsRoute, EdgeId, HashRoute, HashTarget, HostPortError, IpNet, ListenAddr, Pick, ProbeConfig,
    ProxyConfig, ProxyMode, ProxyModeError, RelayPolicy, StaticRoute, check_host_port,
};
pub use registrar::{Registered, Registrar, RegistrarConfig};
