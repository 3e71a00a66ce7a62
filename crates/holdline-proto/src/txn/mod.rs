//! The SIP transaction layer: RFC 3261 §17 with RFC 6026's `Accepted` states.
//!
//! One [`Transactions`] table per worker holds every client and server transaction, INVITE
//! and non-INVITE. The transaction user (TU: the proxy core, a UA) talks to it with:
//!
//! | input | result |
//! | --- | --- |
//! | [`handle_request`](Transactions::handle_request) | [`RequestOutcome`]: a new server transaction the TU must answer, or something the layer absorbed or does not own |
//! | [`handle_response`](Transactions::handle_response) | [`ResponseOutcome`]: pass to the TU, absorbed, or stray |
//! | [`respond`](Transactions::respond) | sends a response through a server transaction |
//! | [`send_request`](Transactions::send_request) / [`cancel`](Transactions::cancel) | starts a client transaction |
//! | [`handle_timeout`](Transactions::handle_timeout) | fires the due timers |
//!
//! and drains [`poll_transmit`](Transactions::poll_transmit), [`poll_event`](Transactions::poll_event)
//! and [`poll_timeout`](Transactions::poll_timeout) after each of them.
//!
//! # State machines
//!
//! ```text
//! client INVITE:  Calling --1xx--> Proceeding --2xx--> Accepted --M--> gone   (2xx: to TU)
//!                    |  A: resend, ×2      |--300-699 (send ACK)--> Completed --D--> gone
//!                    +--B--> ClientTimeout, gone
//! client non-INV: Trying --1xx--> Proceeding --final--> Completed --K--> gone
//!                    E: resend, ×2 up to T2;  F --> ClientTimeout, gone
//! server INVITE:  Proceeding --TU 2xx--> Accepted --L--> gone (absorbs INVITE, ACK to TU)
//!                    |--TU 300-699--> Completed --ACK--> Confirmed --I--> gone
//!                                       G: resend, ×2 up to T2;  H --> ServerTimeout, gone
//! server non-INV: Trying --TU 1xx--> Proceeding --TU final--> Completed --J--> gone
//! ```
//!
//! A server transaction waits for its TU without a timer in `Trying`/`Proceeding`: the TU
//! must answer every [`RequestOutcome::New`] (a proxy does so with Timer C); the table's
//! bounds ([`TxnConfig::max_transactions`], [`TxnConfig::memory_budget`]) limit the damage of
//! a TU that does not.
//!
//! A transaction that has finished its work and only lingers to absorb retransmissions
//! (server `Accepted`, `Confirmed`, non-INVITE `Completed`; client `Accepted`, `Completed`)
//! is kept compact, and is the first to go when the table is full: see
//! [`Transactions`]' memory section.
//!
//! Responses are sent to the [`Peer`] the request came from (address, transport and
//! connection: symmetric response routing, as with RFC 3581 `rport`); the TU that wants
//! §18.2.2's Via-based routing must take it up with the driver.

mod config;
mod fifo;
mod key;
mod keymap;
mod slab;
#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BinaryHeap, VecDeque};

use fifo::ChunkQueue;
use keymap::{Entry, KeyMap, Keys};
use slab::Slab;
use std::hash::Hasher;

use holdline_base::{Duration, Instant, Peer, Transmit};
use holdline_sip::{HeaderName, MAGIC_COOKIE, Message, Method, ParseError, ParseErrorKind};

pub use config::TxnConfig;

/// Identifies a server transaction inside its [`Transactions`] table. Never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerTxnId(u64);

/// Identifies a client transaction inside its [`Transactions`] table. Never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientTxnId(u64);

/// Either kind of transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TxnId {
    /// A client transaction.
    Client(ClientTxnId),
    /// A server transaction.
    Server(ServerTxnId),
}

/// The state of a live client transaction (a terminated one is gone from the table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientState {
    /// INVITE sent, nothing heard yet (Timers A and B run).
    Calling,
    /// Non-INVITE request sent, nothing heard yet (Timers E and F run).
    Trying,
    /// A provisional response arrived.
    Proceeding,
    /// INVITE only (RFC 6026): a 2xx arrived; further 2xx go to the TU until Timer M.
    Accepted,
    /// A final response arrived (INVITE: 300–699, ACKed); retransmissions are absorbed until
    /// Timer D (INVITE) or K.
    Completed,
}

/// The state of a live server transaction (a terminated one is gone from the table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerState {
    /// Non-INVITE request received, the TU has not answered yet.
    Trying,
    /// INVITE received, or a provisional response sent.
    Proceeding,
    /// INVITE only (RFC 6026): a 2xx was sent; retransmitted INVITEs are absorbed and further
    /// 2xx from the TU are sent until Timer L.
    Accepted,
    /// A final response was sent (INVITE: 300–699, retransmitted by Timer G until the ACK).
    Completed,
    /// INVITE only: the ACK for the non-2xx final arrived; ACKs are absorbed until Timer I.
    Confirmed,
}

/// What [`Transactions::handle_request`] did with a request.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestOutcome {
    /// A new server transaction: the TU must process the request and answer it with
    /// [`Transactions::respond`]. For a CANCEL, [`Transactions::cancel_target`] names the
    /// INVITE transaction it targets.
    New(ServerTxnId),
    /// A retransmission of the request of this transaction, absorbed; the last response, if
    /// the state calls for it, is queued again.
    Retransmission(ServerTxnId),
    /// The ACK for this INVITE transaction's non-2xx final response, absorbed.
    AckAbsorbed(ServerTxnId),
    /// Not transaction business: an ACK for a 2xx (it matches no transaction, or one in
    /// `Accepted`) or an ACK matching nothing. The TU handles it (a proxy forwards it).
    PassThrough,
    /// A new request, but the table is full ([`TxnConfig::max_transactions`]): no
    /// transaction was created. The TU may answer `503` statelessly.
    TooMany,
    /// The bytes are not a usable request (parse error, a response, a missing or malformed
    /// Via, CSeq, Call-ID, From or To, or a CSeq method different from the request's).
    Malformed(ParseError),
}

/// What [`Transactions::handle_response`] did with a response.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResponseOutcome {
    /// Pass the response to the TU: a provisional, the first final, or (INVITE, RFC 6026) a
    /// 2xx in `Accepted`.
    ForTu(ClientTxnId),
    /// Absorbed by the transaction (a retransmitted final; for an INVITE non-2xx the ACK was
    /// queued again).
    Absorbed(ClientTxnId),
    /// Matches no transaction. A stateful proxy forwards a stray 2xx statelessly and drops
    /// anything else.
    Stray,
    /// The bytes are not a usable response (parse error, a request, a malformed Via or
    /// CSeq).
    Malformed(ParseError),
}

/// What the table reports to its TU, from [`Transactions::poll_event`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TxnEvent {
    /// Timer B or F fired: no final response arrived. The TU acts as if it had received a
    /// `408 Request Timeout`. A [`Terminated`](Self::Terminated) follows.
    ClientTimeout(ClientTxnId),
    /// Timer H fired: the ACK for the INVITE's non-2xx final never came. A
    /// [`Terminated`](Self::Terminated) follows.
    ServerTimeout(ServerTxnId),
    /// The driver reported a transport failure for this transaction
    /// ([`Transactions::handle_transport_error`]). A [`Terminated`](Self::Terminated) follows.
    TransportError(TxnId),
    /// The transaction ended and left the table; the TU may drop its state for it.
    Terminated(TxnId),
}

/// Why an operation on a [`Transactions`] table failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TxnError {
    /// The table holds [`TxnConfig::max_transactions`] transactions already.
    #[error("too many transactions")]
    TooMany,
    /// No live transaction has this id (it never existed or has terminated).
    #[error("unknown or terminated transaction")]
    UnknownTransaction,
    /// The transaction's state does not allow this (e.g. a second final response, a CANCEL
    /// before any provisional response).
    #[error("not allowed in the transaction's state")]
    InvalidState,
    /// The message does not parse, or lacks a header the transaction needs.
    #[error("malformed message: {0}")]
    Malformed(ParseError),
    /// A response was expected.
    #[error("not a response")]
    NotAResponse,
    /// A request was expected.
    #[error("not a request")]
    NotARequest,
    /// The request's top Via has no branch parameter.
    #[error("top Via has no branch")]
    MissingBranch,
    /// An ACK is never sent through a client transaction (the table builds the ACK for a
    /// non-2xx; the ACK for a 2xx is the TU's, sent without a transaction).
    #[error("ACK does not create a transaction")]
    AckNotTransaction,
    /// A live client transaction already has this branch and method.
    #[error("a transaction with this branch and method exists")]
    DuplicateTransaction,
}

/// A matching key (RFC 3261 §17.1.3, §17.2.3) as stored: a 128-bit keyed hash of its
/// length-prefixed encoding ([`key`]). Two different keys collide with probability 2⁻¹²⁸,
/// and a peer that does not know [`TxnConfig::hash_seed`] cannot aim at a collision; 16 bytes
/// replace two heap copies of the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct KeyHash([u64; 2]);

impl KeyHash {
    fn of(seed: u64, key: &[u8]) -> Self {
        let half = |salt: u64| {
            let mut h = DefaultHasher::new();
            h.write_u64(seed ^ salt);
            h.write(key);
            h.finish()
        };
        Self([half(0x243f_6a88_85a3_08d3), half(0x1319_8a2e_0370_7344)])
    }
}

/// The retransmission timer (A, E or G) of a transaction, in the heap. Live only while the
/// transaction's `retx_at` equals `at` (lazy deletion: cancelling is setting `None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct RetxEntry {
    at: Instant,
    id: TxnId,
}

/// The queues of end timers. Every end timer of a kind has the same duration, so a FIFO per
/// kind is ordered by deadline without a heap: pushing is O(1), and the front is the next to
/// fire. An entry is live only while the transaction's `end_at` equals its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EndQueue {
    /// B, F, H (64·T1): the end of a transaction still at work.
    Live = 0,
    /// J, L, M (64·T1): a finished transaction lingering to absorb retransmissions.
    Linger64 = 1,
    /// I, K (T4): same, shorter.
    LingerT4 = 2,
    /// D (Timer D): a client INVITE that got a non-2xx, resending its ACK.
    LingerD = 3,
}

const END_QUEUES: usize = 4;

/// An end-timer queue entry: the deadline and the transaction (client ids carry
/// [`CLIENT_BIT`]; ids come from one counter, so the raw id alone names the transaction).
type EndEntry = (Instant, u64);

const CLIENT_BIT: u64 = 1 << 63;

fn raw_id(id: TxnId) -> u64 {
    match id {
        TxnId::Client(c) => c.0 | CLIENT_BIT,
        TxnId::Server(s) => s.0,
    }
}

fn from_raw(raw: u64) -> TxnId {
    if raw & CLIENT_BIT != 0 {
        TxnId::Client(ClientTxnId(raw & !CLIENT_BIT))
    } else {
        TxnId::Server(ServerTxnId(raw))
    }
}

/// An optional deadline in 8 bytes (`Option<Instant>` takes 16, and every transaction has
/// two: issue 14's memory per lingering transaction). [`Instant::MAX`] stands for none: a
/// deadline there would never be reached anyway.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Deadline(Instant);

impl Deadline {
    const NONE: Self = Self(Instant::MAX);

    /// The deadline `at`.
    fn at(at: Instant) -> Self {
        Self(at)
    }

    fn get(self) -> Option<Instant> {
        (self != Self::NONE).then_some(self.0)
    }
}

impl Default for Deadline {
    fn default() -> Self {
        Self::NONE
    }
}

impl std::fmt::Debug for Deadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// The timers of one transaction.
#[derive(Clone, Copy, Debug, Default)]
struct Timers {
    retx_at: Deadline,
    end_at: Deadline,
    /// The current retransmission interval, nanoseconds.
    retx_every_ns: u64,
}

impl Timers {
    fn retx_every(&self) -> Duration {
        Duration::from_nanos(self.retx_every_ns)
    }

    fn set_retx_every(&mut self, d: Duration) {
        self.retx_every_ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    }
}

#[derive(Debug)]
struct ClientTxn {
    key: KeyHash,
    peer: Peer,
    /// While at work: the request (resent by A/E, the source of a CANCEL and of the ACK of a
    /// non-2xx). INVITE `Completed`: the ACK, resent on every retransmitted final. Empty once
    /// nothing needs it.
    bytes: Box<[u8]>,
    timers: Timers,
    invite: bool,
    state: ClientState,
    /// Counted in [`TxnStats::lingering`] (entered a lingering state over an unreliable
    /// transport; over a reliable one such a state ends the transaction at once).
    linger: bool,
}

impl ClientTxn {
    /// Whether the transaction only absorbs retransmissions until its end timer.
    fn lingering(&self) -> bool {
        matches!(self.state, ClientState::Accepted | ClientState::Completed)
    }
}

/// RFC 2543 fallback matching of a server transaction (a request without a `z9hG4bK`
/// branch): rare, so kept out of line.
#[derive(Debug)]
struct Rfc2543 {
    /// The key prefix shared with the ACK key (everything but method and To tag).
    prefix: Box<[u8]>,
    /// The key under which the ACK of the final response matches (it carries the
    /// response's To tag).
    ack_key: Option<KeyHash>,
}

#[derive(Debug)]
struct ServerTxn {
    key: KeyHash,
    rfc2543: Option<Box<Rfc2543>>,
    peer: Peer,
    /// The last response kept for retransmission (provisional or non-2xx final); empty in
    /// `Accepted` and `Confirmed`, which resend nothing.
    response: Box<[u8]>,
    /// For a CANCEL: the id of the INVITE transaction it targets, 0 for none (never an id).
    cancel_target: u64,
    timers: Timers,
    invite: bool,
    state: ServerState,
    /// Counted in [`TxnStats::lingering`] (see [`ClientTxn::linger`]).
    linger: bool,
}

/// Replaces kept bytes, keeping the table's byte count exact.
fn keep(kept: &mut usize, slot: &mut Box<[u8]>, bytes: Box<[u8]>) {
    *kept = kept.saturating_sub(slot.len()) + bytes.len();
    *slot = bytes;
}

/// A message waiting for [`Transactions::poll_transmit`].
#[derive(Debug)]
enum Out {
    /// Bytes sent once (a response the transaction does not keep, or keeps a copy of).
    Owned(Peer, Vec<u8>),
    /// The client transaction's request, sent to its peer (skipped once it no longer has it).
    Request(ClientTxnId),
    /// The client transaction's ACK (INVITE `Completed` only).
    Ack(ClientTxnId),
    /// The server transaction's kept response.
    Response(ServerTxnId),
}

/// Counters and sizes of a [`Transactions`] table (see [`Transactions::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TxnStats {
    /// Live transactions, client and server (lingering ones included).
    pub transactions: usize,
    /// Of those, the ones that have finished their work and only absorb retransmissions
    /// until their end timer (Timers D, I, J, K, L, M).
    pub lingering: usize,
    /// The table's memory estimate, bytes ([`Transactions::memory_bytes`]).
    pub memory_bytes: usize,
    /// Bytes of messages kept for retransmission (part of `memory_bytes`).
    pub kept_bytes: usize,
    /// Bytes the two matching-key indexes' buckets really hold, whatever their fill (the
    /// estimate in `memory_bytes` counts a share per transaction instead, so that ending
    /// transactions lowers it).
    pub index_bytes: usize,
    /// Lingering transactions ended before their timer to make room (oldest first).
    pub evicted: u64,
    /// New transactions refused because the table was full of live ones.
    pub refused: u64,
}

/// The transaction table of one worker: every client and server transaction, their timers,
/// and the messages waiting to be sent. See the [module documentation](self).
///
/// # Memory
///
/// A transaction that has done its work and only lingers to absorb retransmissions (RFC 3261
/// Timers D, I, J, K, L, M: up to 32 s over UDP) keeps its 16-byte key hash, its peer, its
/// timers and, where the RFC resends something, the bytes it resends (a non-INVITE's final
/// response, a non-2xx's ACK); a client transaction drops its request as soon as it has a
/// final response. End timers live in per-duration FIFO queues (no heap entry). The table is
/// bounded by [`TxnConfig::max_transactions`] and [`TxnConfig::memory_budget`]: when a new
/// transaction would exceed either, the lingering transactions that finished first are ended
/// early (reported [`Terminated`](TxnEvent::Terminated), counted in
/// [`TxnStats::evicted`]); live ones never are.
#[derive(Debug)]
pub struct Transactions {
    config: TxnConfig,
    clients: Slab<ClientTxn>,
    client_keys: KeyMap,
    servers: Slab<ServerTxn>,
    server_keys: KeyMap,
    retx: BinaryHeap<Reverse<RetxEntry>>,
    ends: [ChunkQueue<EndEntry>; END_QUEUES],
    out: VecDeque<Out>,
    events: VecDeque<TxnEvent>,
    scratch: Vec<u8>,
    lingering: usize,
    kept: usize,
    evicted: u64,
    refused: u64,
}

/// The status code of a response whose start line begins `SIP/2.0 NNN ` with `NNN` in
/// 100–699, without parsing the rest; `None` for anything else (the caller parses it).
fn quick_status(response: &[u8]) -> Option<u16> {
    let rest = response.strip_prefix(b"SIP/2.0 ")?;
    match rest {
        [a @ b'1'..=b'6', b @ b'0'..=b'9', c @ b'0'..=b'9', b' ', ..] => {
            Some(u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0'))
        }
        _ => None,
    }
}

fn malformed_at(kind: ParseErrorKind, offset: usize) -> ParseError {
    ParseError::new(kind, offset)
}

/// The memory one transaction costs beside the bytes it keeps: its slab slot, its key index
/// entry (with hashbrown's control byte, at a load of about 1/3: the index grows below half
/// full, see `keymap`) and two end-timer queue entries. An estimate, checked against the
/// process's RSS in `docs/benchmarks.md`; `holdline_txn_index_bytes` shows the index's real
/// size.
pub const TXN_OVERHEAD_BYTES: usize = {
    let server = size_of::<Option<ServerTxn>>() + 8;
    let client = size_of::<Option<ClientTxn>>() + 8;
    let entry = if server > client { server } else { client };
    let key = size_of::<Entry>() + 1;
    entry + key * 3 + 2 * size_of::<EndEntry>()
};

// The compact layout is a design target (issue 14: at most 256 bytes per lingering
// transaction beside what it resends): a field that breaks it fails the build.
const _: () = assert!(TXN_OVERHEAD_BYTES <= 256);

impl Transactions {
    /// An empty table.
    pub fn new(config: TxnConfig) -> Self {
        Self {
            config,
            clients: Slab::new(),
            client_keys: KeyMap::new(),
            servers: Slab::new(),
            server_keys: KeyMap::new(),
            retx: BinaryHeap::new(),
            ends: Default::default(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            scratch: Vec::with_capacity(256),
            lingering: 0,
            kept: 0,
            evicted: 0,
            refused: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &TxnConfig {
        &self.config
    }

    /// The number of live transactions, client and server.
    pub fn len(&self) -> usize {
        self.clients.len() + self.servers.len()
    }

    /// Whether no transaction is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The table's memory estimate in bytes: [`TXN_OVERHEAD_BYTES`] per transaction plus the
    /// bytes kept for retransmission. This is what [`TxnConfig::memory_budget`] bounds.
    pub fn memory_bytes(&self) -> usize {
        self.len() * TXN_OVERHEAD_BYTES + self.kept
    }

    /// One line per live transaction (side, method class, state, transport, timers): for
    /// diagnostics and the fuzzers' leak reports, not for the hot path.
    pub fn describe(&self) -> Vec<String> {
        let servers = self.servers.iter().map(|t| {
            format!(
                "server invite={} {:?} {:?} retx_at={:?} end_at={:?}",
                t.invite, t.state, t.peer.transport, t.timers.retx_at, t.timers.end_at
            )
        });
        let clients = self.clients.iter().map(|t| {
            format!(
                "client invite={} {:?} {:?} retx_at={:?} end_at={:?}",
                t.invite, t.state, t.peer.transport, t.timers.retx_at, t.timers.end_at
            )
        });
        servers.chain(clients).collect()
    }

    /// Counters and sizes.
    pub fn stats(&self) -> TxnStats {
        TxnStats {
            transactions: self.len(),
            lingering: self.lingering,
            memory_bytes: self.memory_bytes(),
            kept_bytes: self.kept,
            index_bytes: self.client_keys.bytes() + self.server_keys.bytes(),
            evicted: self.evicted,
            refused: self.refused,
        }
    }

    /// The state of a client transaction, `None` once it has terminated.
    pub fn client_state(&self, id: ClientTxnId) -> Option<ClientState> {
        self.clients.get(id.0).map(|t| t.state)
    }

    /// The state of a server transaction, `None` once it has terminated.
    pub fn server_state(&self, id: ServerTxnId) -> Option<ServerState> {
        self.servers.get(id.0).map(|t| t.state)
    }

    /// For a server transaction created by a CANCEL: the INVITE server transaction it
    /// targets (RFC 3261 §9.2), if that one was live when the CANCEL arrived and still is.
    ///
    /// Matching follows §17.2.3 with the method taken as INVITE: branch and sent-by of the
    /// top Via for RFC 3261 branches; Request-URI, To tag, From tag, Call-ID, CSeq number and
    /// top Via otherwise.
    pub fn cancel_target(&self, cancel: ServerTxnId) -> Option<ServerTxnId> {
        let target = self.servers.get(cancel.0)?.cancel_target;
        (target != 0 && self.servers.contains(target)).then_some(ServerTxnId(target))
    }

    fn hash(&self, key: &[u8]) -> KeyHash {
        KeyHash::of(self.config.hash_seed, key)
    }

    /// Whether `msg`, a request, matches a live server transaction (RFC 3261 §17.2.3): a
    /// retransmission, or an ACK/CANCEL of a transaction this table holds. `Ok(false)` for a
    /// request that would start a new transaction; an error when the request cannot be
    /// matched at all (bad Via, CSeq, Call-ID, From or To). Reads the table only.
    pub fn matches_server(&mut self, msg: &Message<'_>) -> Result<bool, ParseError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let found = self.request_key(msg, &mut scratch).map(|_| {
            self.server_keys
                .get(&self.hash(&scratch), &self.servers)
                .is_some()
        });
        self.scratch = scratch;
        found
    }

    /// Whether `msg`, a CANCEL, targets a live INVITE server transaction of this table
    /// (RFC 3261 §9.2, matched as [`cancel_target`](Self::cancel_target) does), without
    /// creating anything. `false` for any other request or one that cannot be matched.
    pub fn matches_cancel_target(&mut self, msg: &Message<'_>) -> bool {
        if msg.method() != Some(Method::Cancel) {
            return false;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let found = self
            .request_key(msg, &mut scratch)
            .ok()
            .and_then(|(_, prefix_len)| self.find_cancel_target(msg, &scratch, prefix_len))
            .is_some();
        self.scratch = scratch;
        found
    }

    /// Makes room for one more transaction: ends lingering transactions, oldest first, while
    /// the table is at its count or memory bound. Requests that start something new
    /// (`in_dialog` false) get only 90% of either bound, so that a table filled by new calls
    /// never refuses the BYE of a call it admitted. `false` when the live transactions alone
    /// fill the bound.
    fn make_room(&mut self, in_dialog: bool) -> bool {
        // Each slab's slots stay addressable by the key index.
        let max_n = self.config.max_transactions.min(keymap::MAX_INDEX);
        let (max_n, max_b) = (max_n, self.config.memory_budget);
        let (max_n, max_b) = if in_dialog {
            (max_n, max_b)
        } else {
            (max_n - max_n / 10, max_b - max_b / 10)
        };
        while self.len() >= max_n || self.memory_bytes() + TXN_OVERHEAD_BYTES > max_b {
            if !self.evict_oldest() {
                self.refused += 1;
                return false;
            }
        }
        true
    }

    /// Ends the lingering transaction that finished first, if any.
    fn evict_oldest(&mut self) -> bool {
        let lingering = [
            (EndQueue::Linger64, self.config.t1x64()),
            (EndQueue::LingerT4, self.config.t4),
            (EndQueue::LingerD, self.config.timer_d),
        ];
        loop {
            // The queue whose front finished first (deadline minus the queue's duration).
            let mut best: Option<(u128, usize)> = None;
            for (q, dur) in lingering {
                if let Some(&(at, _)) = self.ends[q as usize].front() {
                    let since = u128::from(at.as_nanos()).saturating_sub(dur.as_nanos());
                    if best.is_none_or(|(b, _)| since < b) {
                        best = Some((since, q as usize));
                    }
                }
            }
            let Some((_, q)) = best else {
                return false;
            };
            let Some((at, raw)) = self.ends[q].pop_front() else {
                return false;
            };
            let id = from_raw(raw);
            if self.end_at(id) == Some(at) {
                self.evicted += 1;
                self.terminate(id);
                return true;
            }
        }
    }

    /// Processes a request that arrived from `from` (server side, RFC 3261 §17.2).
    ///
    /// Matches it against the server transactions (§17.2.3: branch + sent-by + method for
    /// `z9hG4bK` branches, ACK matching its INVITE, CANCEL its own; the RFC 2543 fields
    /// otherwise) and either creates a transaction ([`RequestOutcome::New`]) or lets the
    /// matched one absorb it. Queues retransmitted responses for
    /// [`poll_transmit`](Self::poll_transmit).
    pub fn handle_request(&mut self, now: Instant, bytes: &[u8], from: Peer) -> RequestOutcome {
        match Message::parse(bytes, &self.config.limits) {
            Ok(m) => self.handle_parsed_request(now, &m, from),
            Err(e) => RequestOutcome::Malformed(e),
        }
    }

    /// [`handle_request`](Self::handle_request) for a request the caller has parsed already
    /// (with this table's [`limits`](TxnConfig::limits)): a proxy parses each message once.
    pub fn handle_parsed_request(
        &mut self,
        now: Instant,
        msg: &Message<'_>,
        from: Peer,
    ) -> RequestOutcome {
        let mut scratch = std::mem::take(&mut self.scratch);
        let reply_to = response_peer(msg, from);
        let outcome = match self.request_key(msg, &mut scratch) {
            Ok((method, prefix_len)) => {
                let key = self.hash(&scratch);
                match self.server_id(&key) {
                    Some(id) => self.matched_request(now, id, method, reply_to),
                    None if method == Method::Ack => RequestOutcome::PassThrough,
                    None => self.new_server(msg, key, &scratch, method, prefix_len, reply_to),
                }
            }
            Err(e) => RequestOutcome::Malformed(e),
        };
        self.scratch = scratch;
        self.prune_timers();
        outcome
    }

    /// Validates a request and writes its matching key into `out`. Returns the method and,
    /// when the RFC 2543 fallback applies, the length of the key prefix without method and
    /// To tag.
    fn request_key<'a>(
        &self,
        msg: &Message<'a>,
        out: &mut Vec<u8>,
    ) -> Result<(Method<'a>, Option<usize>), ParseError> {
        let method = msg
            .method()
            .ok_or_else(|| malformed_at(ParseErrorKind::BadStartLine, msg.start_offset()))?;
        let via = msg.top_via()?;
        let cseq = msg.cseq()?;
        msg.call_id()?;
        msg.from()?;
        let to = msg.to()?;
        if cseq.method != method {
            let at = msg
                .first_header(HeaderName::CSeq)
                .map_or(0, |h| h.value_span().start as usize);
            return Err(malformed_at(
                ParseErrorKind::BadHeader(HeaderName::CSeq),
                at,
            ));
        }
        match via.branch().filter(|b| b.starts_with(MAGIC_COOKIE)) {
            Some(branch) => {
                key::server_3261(out, &via, branch, key::method_class(method));
                Ok((method, None))
            }
            None => {
                let prefix = key::server_2543_prefix(out, msg)?;
                key::server_2543_finish(out, method.as_bytes(), to.tag().unwrap_or_default());
                Ok((method, Some(prefix)))
            }
        }
    }

    fn matched_request(
        &mut self,
        now: Instant,
        id: u64,
        method: Method<'_>,
        from: Peer,
    ) -> RequestOutcome {
        let sid = ServerTxnId(id);
        let Some(t) = self.servers.get_mut(id) else {
            return RequestOutcome::PassThrough;
        };
        t.peer = from;
        if method == Method::Ack {
            return match t.state {
                ServerState::Completed => {
                    t.state = ServerState::Confirmed;
                    t.timers.retx_at = Deadline::NONE;
                    keep(&mut self.kept, &mut t.response, Box::default());
                    if t.peer.transport.is_reliable() {
                        self.terminate(TxnId::Server(sid));
                    } else {
                        self.lingering += 1;
                        t.linger = true;
                        let at = now + self.config.t4;
                        t.timers.end_at = Deadline::at(at);
                        push_end(&mut self.ends, EndQueue::LingerT4, at, TxnId::Server(sid));
                    }
                    RequestOutcome::AckAbsorbed(sid)
                }
                ServerState::Confirmed => RequestOutcome::AckAbsorbed(sid),
                _ => RequestOutcome::PassThrough,
            };
        }
        let resend = match t.state {
            ServerState::Proceeding | ServerState::Completed => !t.response.is_empty(),
            ServerState::Trying | ServerState::Accepted | ServerState::Confirmed => false,
        };
        if resend {
            self.out.push_back(Out::Response(sid));
        }
        RequestOutcome::Retransmission(sid)
    }

    fn new_server(
        &mut self,
        msg: &Message<'_>,
        key: KeyHash,
        key_bytes: &[u8],
        method: Method<'_>,
        prefix_len: Option<usize>,
        from: Peer,
    ) -> RequestOutcome {
        // Requests of dialogs already established (a To tag) and CANCELs may use the whole
        // table; requests that start something new only 90% of it.
        let in_dialog = method == Method::Cancel || msg.to().is_ok_and(|to| to.tag().is_some());
        if !self.make_room(in_dialog) {
            return RequestOutcome::TooMany;
        }
        let cancel_target = if method == Method::Cancel {
            self.find_cancel_target(msg, key_bytes, prefix_len)
                .map_or(0, |t| t.0)
        } else {
            0
        };
        let rfc2543 = prefix_len.and_then(|n| key_bytes.get(..n)).map(|prefix| {
            self.kept += prefix.len();
            Box::new(Rfc2543 {
                prefix: prefix.into(),
                ack_key: None,
            })
        });
        let invite = method == Method::Invite;
        let id = self.servers.insert(ServerTxn {
            key,
            rfc2543,
            peer: from,
            response: Box::default(),
            cancel_target,
            timers: Timers::default(),
            invite,
            state: if invite {
                ServerState::Proceeding
            } else {
                ServerState::Trying
            },
            linger: false,
        });
        if let Some(e) = Entry::main(slab::index_of(id)) {
            self.server_keys.insert(&key, e, &self.servers);
        }
        RequestOutcome::New(ServerTxnId(id))
    }

    fn find_cancel_target(
        &self,
        msg: &Message<'_>,
        cancel_key: &[u8],
        prefix_len: Option<usize>,
    ) -> Option<ServerTxnId> {
        let mut k = Vec::with_capacity(cancel_key.len());
        if let Some(n) = prefix_len {
            k.extend_from_slice(cancel_key.get(..n)?);
            let to = msg.to().ok()?;
            key::server_2543_finish(&mut k, b"INVITE", to.tag().unwrap_or_default());
        } else {
            let via = msg.top_via().ok()?;
            key::server_3261(&mut k, &via, via.branch()?, b"INVITE");
        }
        let id = self.server_id(&self.hash(&k))?;
        self.servers
            .get(id)
            .is_some_and(|t| t.invite)
            .then_some(ServerTxnId(id))
    }
}

fn push_end(ends: &mut [ChunkQueue<EndEntry>; END_QUEUES], q: EndQueue, at: Instant, id: TxnId) {
    ends[q as usize].push_back((at, raw_id(id)));
}

fn arm_retx(heap: &mut BinaryHeap<Reverse<RetxEntry>>, id: TxnId, at: Instant) {
    heap.push(Reverse(RetxEntry { at, id }));
}

impl Transactions {
    /// Sends `response` through server transaction `id` (RFC 3261 §17.2.1, §17.2.2, RFC 6026).
    ///
    /// - INVITE, `Proceeding`: a 1xx is sent and kept (resent on a retransmitted INVITE); a
    ///   2xx is sent and moves to `Accepted` (Timer L), where further 2xx are sent too; a
    ///   300–699 is sent, kept and moves to `Completed` (Timer G resends it over UDP until the
    ///   ACK; Timer H gives up).
    /// - non-INVITE, `Trying`/`Proceeding`: a 1xx moves to `Proceeding`; a final moves to
    ///   `Completed` (Timer J over UDP; over reliable transports the transaction ends).
    ///
    /// Errors: [`TxnError::Malformed`] / [`TxnError::NotAResponse`] for bad bytes,
    /// [`TxnError::UnknownTransaction`], [`TxnError::InvalidState`] (e.g. a second final).
    pub fn respond(
        &mut self,
        now: Instant,
        id: ServerTxnId,
        response: Vec<u8>,
    ) -> Result<(), TxnError> {
        // The status from the start line; the whole response is parsed only when it must be
        // (a status line that is not plain `SIP/2.0 NNN `, or an INVITE's final response, whose
        // To tag keys the ACK): responses come from the TU, which built or parsed them.
        let status = match quick_status(&response) {
            Some(s) => s,
            None => Message::parse(&response, &self.config.limits)
                .map_err(TxnError::Malformed)?
                .status()
                .ok_or(TxnError::NotAResponse)?,
        };
        let limits = self.config.limits;
        let to_tag = |response: &[u8]| -> Result<Vec<u8>, TxnError> {
            let msg = Message::parse(response, &limits).map_err(TxnError::Malformed)?;
            Ok(msg
                .to()
                .ok()
                .and_then(|t| t.tag())
                .unwrap_or_default()
                .to_vec())
        };
        let t1 = self.config.eff_t1();
        let t1x64 = self.config.t1x64();
        let seed = self.config.hash_seed;
        let tid = TxnId::Server(id);
        let t = self
            .servers
            .get_mut(id.0)
            .ok_or(TxnError::UnknownTransaction)?;
        let reliable = t.peer.transport.is_reliable();
        let provisional = status < 200;
        let success = (200..300).contains(&status);
        match (t.invite, t.state) {
            (true, ServerState::Proceeding) if provisional => {
                keep(&mut self.kept, &mut t.response, response.as_slice().into());
                self.out.push_back(Out::Owned(t.peer, response));
            }
            (true, ServerState::Proceeding) if success => {
                let to_tag = to_tag(&response)?;
                t.state = ServerState::Accepted;
                self.lingering += 1;
                t.linger = true;
                keep(&mut self.kept, &mut t.response, Box::default());
                let at = now + t1x64;
                t.timers.end_at = Deadline::at(at);
                push_end(&mut self.ends, EndQueue::Linger64, at, tid);
                self.out.push_back(Out::Owned(t.peer, response));
                if let Some(k) = Self::ack_key(t, &to_tag, seed)
                    && let Some(e) = Entry::ack(slab::index_of(id.0))
                {
                    self.server_keys.insert_if_absent(&k, e, &self.servers);
                }
            }
            (true, ServerState::Accepted) if success => {
                self.out.push_back(Out::Owned(t.peer, response));
            }
            (true, ServerState::Proceeding) => {
                let to_tag = to_tag(&response)?;
                t.state = ServerState::Completed;
                keep(&mut self.kept, &mut t.response, response.into_boxed_slice());
                if !reliable {
                    t.timers.set_retx_every(t1);
                    let at = now + t1;
                    t.timers.retx_at = Deadline::at(at);
                    arm_retx(&mut self.retx, tid, at);
                }
                let at = now + t1x64;
                t.timers.end_at = Deadline::at(at);
                push_end(&mut self.ends, EndQueue::Live, at, tid);
                self.out.push_back(Out::Response(id));
                if let Some(k) = Self::ack_key(t, &to_tag, seed)
                    && let Some(e) = Entry::ack(slab::index_of(id.0))
                {
                    self.server_keys.insert_if_absent(&k, e, &self.servers);
                }
            }
            (false, ServerState::Trying | ServerState::Proceeding) if provisional => {
                t.state = ServerState::Proceeding;
                keep(&mut self.kept, &mut t.response, response.as_slice().into());
                self.out.push_back(Out::Owned(t.peer, response));
            }
            (false, ServerState::Trying | ServerState::Proceeding) => {
                t.state = ServerState::Completed;
                if reliable {
                    self.out.push_back(Out::Owned(t.peer, response));
                    self.terminate(tid);
                } else {
                    self.lingering += 1;
                    t.linger = true;
                    keep(&mut self.kept, &mut t.response, response.into_boxed_slice());
                    let at = now + t1x64;
                    t.timers.end_at = Deadline::at(at);
                    push_end(&mut self.ends, EndQueue::Linger64, at, tid);
                    self.out.push_back(Out::Response(id));
                }
            }
            _ => return Err(TxnError::InvalidState),
        }
        self.prune_timers();
        Ok(())
    }

    /// RFC 2543 fallback: from the final response on, the INVITE's ACK matches under the
    /// response's To tag. Records that key in the transaction and returns it for the index
    /// (`None` when the transaction has no such key or has it already).
    fn ack_key(t: &mut ServerTxn, to_tag: &[u8], seed: u64) -> Option<KeyHash> {
        let r = t.rfc2543.as_mut()?;
        if r.ack_key.is_some() {
            return None;
        }
        let mut k = r.prefix.to_vec();
        key::server_2543_finish(&mut k, b"ACK", to_tag);
        let k = KeyHash::of(seed, &k);
        r.ack_key = Some(k);
        Some(k)
    }

    /// The server transaction indexed under `key`.
    fn server_id(&self, key: &KeyHash) -> Option<u64> {
        let e = self.server_keys.get(key, &self.servers)?;
        self.servers.id_at(e.index())
    }

    /// The client transaction indexed under `key`.
    fn client_id(&self, key: &KeyHash) -> Option<u64> {
        let e = self.client_keys.get(key, &self.clients)?;
        self.clients.id_at(e.index())
    }

    /// Starts a client transaction for `request`, to be sent to `to` (RFC 3261 §17.1).
    ///
    /// The request must be complete, its top Via carrying the branch (`z9hG4bK…`) that
    /// identifies the transaction. Over UDP it is retransmitted (Timer A for INVITE, E
    /// otherwise) until a response arrives, and the transaction times out with
    /// [`TxnEvent::ClientTimeout`] after 64·T1 (B, F). For an INVITE answered with 300–699
    /// the table builds and sends the ACK itself (§17.1.1.3).
    ///
    /// Errors: [`TxnError::Malformed`] (including a missing Call-ID, From, To or CSeq),
    /// [`TxnError::NotARequest`], [`TxnError::AckNotTransaction`],
    /// [`TxnError::MissingBranch`], [`TxnError::DuplicateTransaction`], [`TxnError::TooMany`].
    pub fn send_request(
        &mut self,
        now: Instant,
        request: Vec<u8>,
        to: Peer,
    ) -> Result<ClientTxnId, TxnError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let r = self.client_key(&request, &mut scratch);
        let key = self.hash(&scratch);
        self.scratch = scratch;
        let invite = r?;
        if self.client_id(&key).is_some() {
            return Err(TxnError::DuplicateTransaction);
        }
        if !self.make_room(true) {
            return Err(TxnError::TooMany);
        }
        let id = self.clients.next_id();
        let cid = ClientTxnId(id);
        let mut timers = Timers::default();
        let t1 = self.config.eff_t1();
        if !to.transport.is_reliable() {
            timers.set_retx_every(t1);
            timers.retx_at = Deadline::at(now + t1);
            arm_retx(&mut self.retx, TxnId::Client(cid), now + t1);
        }
        let end = now + self.config.t1x64();
        timers.end_at = Deadline::at(end);
        push_end(&mut self.ends, EndQueue::Live, end, TxnId::Client(cid));
        let bytes: Box<[u8]> = request.into_boxed_slice();
        self.kept += bytes.len();
        let inserted = self.clients.insert(ClientTxn {
            key,
            peer: to,
            bytes,
            timers,
            invite,
            state: if invite {
                ClientState::Calling
            } else {
                ClientState::Trying
            },
            linger: false,
        });
        debug_assert_eq!(inserted, id);
        if let Some(e) = Entry::main(slab::index_of(id)) {
            self.client_keys.insert(&key, e, &self.clients);
        }
        self.out.push_back(Out::Request(cid));
        Ok(cid)
    }

    /// Validates a request to send and writes its client key; returns whether it is an INVITE.
    fn client_key(&self, request: &[u8], out: &mut Vec<u8>) -> Result<bool, TxnError> {
        let msg = Message::parse(request, &self.config.limits).map_err(TxnError::Malformed)?;
        let method = msg.method().ok_or(TxnError::NotARequest)?;
        if method == Method::Ack {
            return Err(TxnError::AckNotTransaction);
        }
        let via = msg.top_via().map_err(TxnError::Malformed)?;
        let branch = via.branch().ok_or(TxnError::MissingBranch)?;
        msg.cseq().map_err(TxnError::Malformed)?;
        msg.call_id().map_err(TxnError::Malformed)?;
        msg.from().map_err(TxnError::Malformed)?;
        msg.to().map_err(TxnError::Malformed)?;
        key::client(out, branch, method.as_bytes());
        Ok(method == Method::Invite)
    }

    /// Sends a CANCEL for the INVITE client transaction `invite` (RFC 3261 §9.1) as a new
    /// non-INVITE client transaction to the same peer: same Request-URI, Call-ID, From, To,
    /// CSeq number and top Via as the INVITE, its Route headers, method CANCEL.
    ///
    /// Allowed only in `Proceeding`: before a provisional response the CANCEL must wait
    /// ([`TxnError::InvalidState`]; retry after the next [`ResponseOutcome::ForTu`]), after a
    /// final one it is pointless.
    pub fn cancel(&mut self, now: Instant, invite: ClientTxnId) -> Result<ClientTxnId, TxnError> {
        let t = self
            .clients
            .get(invite.0)
            .ok_or(TxnError::UnknownTransaction)?;
        if !t.invite || t.state != ClientState::Proceeding {
            return Err(TxnError::InvalidState);
        }
        let peer = t.peer;
        let cancel = build_in_txn_request(&t.bytes, b"CANCEL", None, &self.config.limits)
            .map_err(TxnError::Malformed)?;
        let cancel_id = self.send_request(now, cancel, peer)?;
        // RFC 3261 §9.1: without a final response to the INVITE within 64·T1 of the CANCEL,
        // the INVITE transaction counts as cancelled and is destroyed. A `Proceeding` INVITE
        // client transaction has no timer of its own (Timer B stopped at the provisional), so
        // without this one a next hop that never sends the final (487 or other) kept it, and
        // its call, forever (found by the endpoint fuzzer, issue 23).
        let at = now + self.config.t1x64();
        if let Some(t) = self.clients.get_mut(invite.0)
            && t.state == ClientState::Proceeding
            && t.timers.end_at.get().is_none_or(|e| e > at)
        {
            t.timers.end_at = Deadline::at(at);
            push_end(&mut self.ends, EndQueue::Live, at, TxnId::Client(invite));
        }
        Ok(cancel_id)
    }

    /// Processes a response that arrived from `from` (client side, RFC 3261 §17.1).
    ///
    /// Matches it to a client transaction by top Via branch and CSeq method (§17.1.3): a
    /// response to a CANCEL never matches the INVITE's transaction.
    pub fn handle_response(&mut self, now: Instant, bytes: &[u8], from: Peer) -> ResponseOutcome {
        match Message::parse(bytes, &self.config.limits) {
            Ok(m) => self.handle_parsed_response(now, &m, from),
            Err(e) => ResponseOutcome::Malformed(e),
        }
    }

    /// [`handle_response`](Self::handle_response) for a response the caller has parsed already.
    pub fn handle_parsed_response(
        &mut self,
        now: Instant,
        msg: &Message<'_>,
        from: Peer,
    ) -> ResponseOutcome {
        let Some(status) = msg.status() else {
            return ResponseOutcome::Malformed(malformed_at(
                ParseErrorKind::BadStartLine,
                msg.start_offset(),
            ));
        };
        let via = match msg.top_via() {
            Ok(v) => v,
            Err(e) => return ResponseOutcome::Malformed(e),
        };
        let cseq = match msg.cseq() {
            Ok(c) => c,
            Err(e) => return ResponseOutcome::Malformed(e),
        };
        let Some(branch) = via.branch() else {
            return ResponseOutcome::Stray;
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        key::client(&mut scratch, branch, cseq.method.as_bytes());
        let found = self.client_id(&self.hash(&scratch));
        self.scratch = scratch;
        let Some(id) = found else {
            return ResponseOutcome::Stray;
        };
        let outcome = self.client_response(now, id, status, msg, from);
        self.prune_timers();
        outcome
    }

    fn client_response(
        &mut self,
        now: Instant,
        id: u64,
        status: u16,
        msg: &Message<'_>,
        from: Peer,
    ) -> ResponseOutcome {
        let cid = ClientTxnId(id);
        let tid = TxnId::Client(cid);
        let limits = self.config.limits;
        let t1x64 = self.config.t1x64();
        let Some(t) = self.clients.get_mut(id) else {
            return ResponseOutcome::Stray;
        };
        if t.peer.conn.is_none()
            && t.peer.transport.is_stream()
            && from.transport == t.peer.transport
        {
            t.peer.conn = from.conn;
        }
        let reliable = t.peer.transport.is_reliable();
        let provisional = status < 200;
        let success = (200..300).contains(&status);
        match t.state {
            ClientState::Calling | ClientState::Trying | ClientState::Proceeding if provisional => {
                if t.invite && t.state == ClientState::Calling {
                    // Timers A and B stop; the TU guards the rest (Timer C in a proxy). A
                    // later provisional keeps the timer a CANCEL set (§9.1): clearing it
                    // again left a cancelled INVITE to a next hop that keeps ringing alive
                    // forever (found by the endpoint fuzzer, issue 23).
                    t.timers = Timers::default();
                }
                t.state = ClientState::Proceeding;
                ResponseOutcome::ForTu(cid)
            }
            ClientState::Calling | ClientState::Proceeding if t.invite && success => {
                t.state = ClientState::Accepted;
                self.lingering += 1;
                t.linger = true;
                keep(&mut self.kept, &mut t.bytes, Box::default());
                t.timers = Timers::default();
                let at = now + t1x64;
                t.timers.end_at = Deadline::at(at);
                push_end(&mut self.ends, EndQueue::Linger64, at, tid);
                ResponseOutcome::ForTu(cid)
            }
            ClientState::Calling | ClientState::Proceeding if t.invite => {
                t.state = ClientState::Completed;
                t.timers = Timers::default();
                let to = msg.first_value(HeaderName::To);
                let ack = build_in_txn_request(&t.bytes, b"ACK", to, &limits).unwrap_or_default();
                if reliable {
                    if !ack.is_empty() {
                        self.out.push_back(Out::Owned(t.peer, ack));
                    }
                    self.terminate(tid);
                } else {
                    self.lingering += 1;
                    t.linger = true;
                    keep(&mut self.kept, &mut t.bytes, ack.into_boxed_slice());
                    let at = now + self.config.timer_d;
                    t.timers.end_at = Deadline::at(at);
                    push_end(&mut self.ends, EndQueue::LingerD, at, tid);
                    self.out.push_back(Out::Ack(cid));
                }
                ResponseOutcome::ForTu(cid)
            }
            ClientState::Trying | ClientState::Proceeding => {
                t.state = ClientState::Completed;
                t.timers = Timers::default();
                if reliable {
                    self.terminate(tid);
                } else {
                    self.lingering += 1;
                    t.linger = true;
                    keep(&mut self.kept, &mut t.bytes, Box::default());
                    let at = now + self.config.t4;
                    t.timers.end_at = Deadline::at(at);
                    push_end(&mut self.ends, EndQueue::LingerT4, at, tid);
                }
                ResponseOutcome::ForTu(cid)
            }
            ClientState::Accepted if success => ResponseOutcome::ForTu(cid),
            ClientState::Completed if t.invite && status >= 300 => {
                self.out.push_back(Out::Ack(cid));
                ResponseOutcome::Absorbed(cid)
            }
            ClientState::Calling | ClientState::Accepted | ClientState::Completed => {
                ResponseOutcome::Absorbed(cid)
            }
        }
    }

    /// Ends transaction `id` because the driver could not send its message (RFC 3261 §17.1.4,
    /// §17.2.4): reports [`TxnEvent::TransportError`] then [`TxnEvent::Terminated`]. Unknown
    /// ids are ignored.
    pub fn handle_transport_error(&mut self, id: TxnId) {
        let live = match id {
            TxnId::Client(c) => self.clients.contains(c.0),
            TxnId::Server(s) => self.servers.contains(s.0),
        };
        if live {
            self.events.push_back(TxnEvent::TransportError(id));
            self.terminate(id);
            self.prune_timers();
        }
    }

    /// Ends a transaction at once because its user no longer wants it (e.g. a proxy that
    /// forwarded an unmatched CANCEL statelessly, or gave up on a branch whose CANCEL was never
    /// answered). Unlike [`handle_transport_error`](Self::handle_transport_error) no
    /// [`TxnEvent::TransportError`] is reported, only [`TxnEvent::Terminated`]; pending
    /// retransmissions are not sent. Unknown ids are ignored.
    pub fn abandon(&mut self, id: TxnId) {
        self.terminate(id);
        self.prune_timers();
    }

    /// Removes a transaction and its keys, and reports [`TxnEvent::Terminated`].
    fn terminate(&mut self, id: TxnId) {
        match id {
            TxnId::Client(c) => {
                if let Some(t) = self.clients.remove(c.0) {
                    if let Some(e) = Entry::main(slab::index_of(c.0)) {
                        self.client_keys.remove_if(&t.key, e);
                    }
                    self.kept = self.kept.saturating_sub(t.bytes.len());
                    if t.linger {
                        self.lingering = self.lingering.saturating_sub(1);
                    }
                    self.events.push_back(TxnEvent::Terminated(id));
                }
            }
            TxnId::Server(s) => {
                if let Some(t) = self.servers.remove(s.0) {
                    let i = slab::index_of(s.0);
                    if let Some(e) = Entry::main(i) {
                        self.server_keys.remove_if(&t.key, e);
                    }
                    if let Some(k) = t.rfc2543.as_ref().and_then(|r| r.ack_key)
                        && let Some(e) = Entry::ack(i)
                    {
                        self.server_keys.remove_if(&k, e);
                    }
                    let prefix = t.rfc2543.as_ref().map_or(0, |r| r.prefix.len());
                    self.kept = self.kept.saturating_sub(t.response.len() + prefix);
                    if t.linger {
                        self.lingering = self.lingering.saturating_sub(1);
                    }
                    self.events.push_back(TxnEvent::Terminated(id));
                }
            }
        }
    }

    /// Fires every timer due at or before `now` (retransmissions, timeouts, state ends).
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(Reverse(e)) = self.retx.peek().copied() {
            if e.at > now {
                break;
            }
            self.retx.pop();
            if self.retx_at(e.id) == Some(e.at) {
                self.fire_retx(now, e.id);
            }
        }
        for q in 0..END_QUEUES {
            while let Some(&(at, raw)) = self.ends[q].front() {
                if at > now {
                    break;
                }
                self.ends[q].pop_front();
                let id = from_raw(raw);
                if self.end_at(id) == Some(at) {
                    self.fire_end(id);
                }
            }
        }
        self.prune_timers();
    }

    fn retx_at(&self, id: TxnId) -> Option<Instant> {
        match id {
            TxnId::Client(c) => self.clients.get(c.0)?.timers.retx_at.get(),
            TxnId::Server(s) => self.servers.get(s.0)?.timers.retx_at.get(),
        }
    }

    fn end_at(&self, id: TxnId) -> Option<Instant> {
        match id {
            TxnId::Client(c) => self.clients.get(c.0)?.timers.end_at.get(),
            TxnId::Server(s) => self.servers.get(s.0)?.timers.end_at.get(),
        }
    }

    fn fire_retx(&mut self, now: Instant, id: TxnId) {
        let t2 = self.config.eff_t2();
        let floor = Duration::from_millis(1);
        match id {
            TxnId::Client(c) => {
                let Some(t) = self.clients.get_mut(c.0) else {
                    return;
                };
                // A doubles without bound; E doubles up to T2, and is T2 in Proceeding.
                let next = if t.invite {
                    t.timers.retx_every().saturating_mul(2)
                } else if t.state == ClientState::Proceeding {
                    t2
                } else {
                    t.timers.retx_every().saturating_mul(2).min(t2)
                }
                .max(floor);
                t.timers.set_retx_every(next);
                t.timers.retx_at = Deadline::at(now + next);
                arm_retx(&mut self.retx, id, now + next);
                self.out.push_back(Out::Request(c));
            }
            TxnId::Server(s) => {
                let Some(t) = self.servers.get_mut(s.0) else {
                    return;
                };
                let next = t.timers.retx_every().saturating_mul(2).min(t2).max(floor);
                t.timers.set_retx_every(next);
                t.timers.retx_at = Deadline::at(now + next);
                arm_retx(&mut self.retx, id, now + next);
                self.out.push_back(Out::Response(s));
            }
        }
    }

    fn fire_end(&mut self, id: TxnId) {
        match id {
            TxnId::Client(c) => {
                let Some(t) = self.clients.get(c.0) else {
                    return;
                };
                if matches!(
                    t.state,
                    ClientState::Calling | ClientState::Trying | ClientState::Proceeding
                ) {
                    self.events.push_back(TxnEvent::ClientTimeout(c));
                }
            }
            TxnId::Server(s) => {
                let Some(t) = self.servers.get(s.0) else {
                    return;
                };
                if t.invite && t.state == ServerState::Completed {
                    self.events.push_back(TxnEvent::ServerTimeout(s));
                }
            }
        }
        self.terminate(id);
    }

    /// Drops cancelled entries from the front of the timer queues (so that
    /// [`poll_timeout`](Self::poll_timeout) is exact), and rebuilds the retransmission heap
    /// when cancelled entries outnumber live ones by far.
    fn prune_timers(&mut self) {
        while let Some(Reverse(e)) = self.retx.peek().copied() {
            if self.retx_at(e.id) == Some(e.at) {
                break;
            }
            self.retx.pop();
        }
        for q in 0..END_QUEUES {
            while let Some(&(at, raw)) = self.ends[q].front() {
                if self.end_at(from_raw(raw)) == Some(at) {
                    break;
                }
                self.ends[q].pop_front();
            }
        }
        if self.retx.len() > 4 * self.len() + 64 {
            let mut v = std::mem::take(&mut self.retx).into_vec();
            v.retain(|Reverse(e)| self.retx_at(e.id) == Some(e.at));
            self.retx = BinaryHeap::from(v);
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called, if any timer runs.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let retx = self.retx.peek().map(|Reverse(e)| e.at);
        self.ends
            .iter()
            .filter_map(|q| q.front().map(|&(at, _)| at))
            .chain(retx)
            .min()
    }

    /// Appends the next message to send to `buf` and says where it goes, or returns `None`
    /// when nothing is waiting. Call until `None` after every input.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let _ = now;
        while let Some(out) = self.out.pop_front() {
            let (peer, bytes): (Peer, &[u8]) = match &out {
                Out::Owned(peer, bytes) => (*peer, bytes),
                Out::Request(c) => match self.clients.get(c.0) {
                    Some(t) if !t.lingering() => (t.peer, &t.bytes),
                    _ => continue,
                },
                Out::Ack(c) => match self.clients.get(c.0) {
                    Some(t) if t.state == ClientState::Completed => (t.peer, &t.bytes),
                    _ => continue,
                },
                Out::Response(s) => match self.servers.get(s.0) {
                    Some(t) => (t.peer, &t.response),
                    None => continue,
                },
            };
            if bytes.is_empty() {
                continue;
            }
            buf.extend_from_slice(bytes);
            return Some(Transmit {
                destination: peer,
                size: bytes.len(),
            });
        }
        None
    }

    /// The next event for the TU, or `None`.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<TxnEvent> {
        self.events.pop_front()
    }
}

/// Builds an ACK for a non-2xx (§17.1.1.3) or a CANCEL (§9.1) from the INVITE `request`:
/// its Request-URI, top Via only, Route headers, From, Call-ID and CSeq number; To from
/// `to` (the response's, for an ACK) or from the request; Max-Forwards 70, no body.
fn build_in_txn_request(
    request: &[u8],
    method: &[u8],
    to: Option<&[u8]>,
    limits: &holdline_sip::Limits,
) -> Result<Vec<u8>, ParseError> {
    let msg = Message::parse(request, limits)?;
    let missing = |h| malformed_at(ParseErrorKind::MissingHeader(h), msg.headers_end());
    let uri = msg
        .request_uri_bytes()
        .ok_or_else(|| malformed_at(ParseErrorKind::BadStartLine, msg.start_offset()))?;
    let via = msg
        .first_value_ref(HeaderName::Via)
        .ok_or_else(|| missing(HeaderName::Via))?
        .bytes;
    let from = msg
        .first_value(HeaderName::From)
        .ok_or_else(|| missing(HeaderName::From))?;
    let to = match to {
        Some(to) => to,
        None => msg
            .first_value(HeaderName::To)
            .ok_or_else(|| missing(HeaderName::To))?,
    };
    let call_id = msg.call_id()?;
    let seq = msg.cseq()?.seq;
    let mut out = Vec::with_capacity(request.len().min(1024));
    let mut line = |parts: &[&[u8]]| {
        for p in parts {
            out.extend_from_slice(p);
        }
        out.extend_from_slice(b"\r\n");
    };
    line(&[method, b" ", uri, b" SIP/2.0"]);
    line(&[b"Via: ", via]);
    for h in msg.headers_of(HeaderName::Route) {
        line(&[b"Route: ", msg.value(h)]);
    }
    line(&[b"From: ", from]);
    line(&[b"To: ", to]);
    line(&[b"Call-ID: ", call_id]);
    let seq = seq.to_string();
    line(&[b"CSeq: ", seq.as_bytes(), b" ", method]);
    line(&[b"Max-Forwards: 70"]);
    line(&[b"Content-Length: 0"]);
    line(&[]);
    Ok(out)
}

/// Where the responses of a server transaction go (RFC 3261 §18.2.2, RFC 3581 §4): over a
/// reliable transport, back on the connection the request came on; over UDP, to the
/// request's source address, on the source port when the top Via asks for `rport`, else on
/// the port of the Via's sent-by (default 5060). (`maddr` multicast responses are not
/// supported: they go to the source like any other.)
pub(crate) fn response_peer(msg: &Message<'_>, from: Peer) -> Peer {
    if from.transport.is_reliable() {
        return from;
    }
    match msg.top_via() {
        Ok(via) if via.rport().is_none() => Peer {
            addr: std::net::SocketAddr::new(
                from.addr.ip(),
                via.port.unwrap_or_else(|| from.transport.default_port()),
            ),
            ..from
        },
        _ => from,
    }
}

impl Keys for Slab<ClientTxn> {
    fn key_of(&self, e: Entry) -> Option<KeyHash> {
        let t = self.at(e.index())?;
        (!e.is_ack()).then_some(t.key)
    }
}

impl Keys for Slab<ServerTxn> {
    fn key_of(&self, e: Entry) -> Option<KeyHash> {
        let t = self.at(e.index())?;
        if e.is_ack() {
            t.rfc2543.as_ref()?.ack_key
        } else {
            Some(t.key)
        }
    }
}
