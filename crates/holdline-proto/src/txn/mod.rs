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
//! must answer every [`RequestOutcome::New`] (a proxy does so with Timer C); the table's cap
//! ([`TxnConfig::max_transactions`]) bounds the damage of a TU that does not.
//!
//! Responses are sent to the [`Peer`] the request came from (address, transport and
//! connection: symmetric response routing, as with RFC 3581 `rport`); the TU that wants
//! §18.2.2's Via-based routing must take it up with the driver.

mod config;
mod key;
#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::BuildHasher;

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

/// A hasher factory seeded by [`TxnConfig::hash_seed`]: deterministic for a seed, and keys a
/// peer chooses cannot be made to collide without knowing it.
#[derive(Clone, Copy, Debug)]
struct SeededState(u64);

impl BuildHasher for SeededState {
    type Hasher = DefaultHasher;
    fn build_hasher(&self) -> DefaultHasher {
        use std::hash::Hasher;
        let mut h = DefaultHasher::new();
        h.write_u64(self.0);
        h
    }
}

type Map<K, V> = HashMap<K, V, SeededState>;

/// Which of a transaction's two timers a heap entry is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Slot {
    /// A, E or G: retransmission.
    Retx,
    /// B, D, F, H, I, J, K, L or M: the state's end.
    End,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct TimerEntry {
    at: Instant,
    id: TxnId,
    slot: Slot,
}

/// The two timers of a transaction. A heap entry is live only while its deadline equals the
/// one recorded here (lazy deletion: cancelling is setting `None`).
#[derive(Clone, Copy, Debug, Default)]
struct Timers {
    retx_at: Option<Instant>,
    retx_every: Duration,
    end_at: Option<Instant>,
}

impl Timers {
    fn at(&self, slot: Slot) -> Option<Instant> {
        match slot {
            Slot::Retx => self.retx_at,
            Slot::End => self.end_at,
        }
    }
}

fn arm(heap: &mut BinaryHeap<Reverse<TimerEntry>>, id: TxnId, slot: Slot, at: Instant) {
    heap.push(Reverse(TimerEntry { at, id, slot }));
}

#[derive(Debug)]
struct ClientTxn {
    key: Box<[u8]>,
    invite: bool,
    state: ClientState,
    peer: Peer,
    request: Vec<u8>,
    ack: Vec<u8>,
    timers: Timers,
}

#[derive(Debug)]
struct ServerTxn {
    key: Box<[u8]>,
    /// RFC 2543 fallback only: the key under which the ACK of the final response matches
    /// (it carries the response's To tag).
    ack_key: Option<Box<[u8]>>,
    /// RFC 2543 fallback only: length of the key prefix shared with the ACK key.
    prefix_len: Option<usize>,
    invite: bool,
    state: ServerState,
    peer: Peer,
    /// The last response kept for retransmission (provisional or non-2xx final).
    response: Vec<u8>,
    cancel_target: Option<ServerTxnId>,
    timers: Timers,
}

/// A message waiting for [`Transactions::poll_transmit`].
#[derive(Debug)]
enum Out {
    /// Bytes sent once (a response the transaction does not keep, or keeps a copy of).
    Owned(Peer, Vec<u8>),
    /// The client transaction's request, sent to its peer.
    Request(ClientTxnId),
    /// The client transaction's ACK.
    Ack(ClientTxnId),
    /// The server transaction's kept response.
    Response(ServerTxnId),
}

/// The transaction table of one worker: every client and server transaction, their timers,
/// and the messages waiting to be sent. See the [module documentation](self).
#[derive(Debug)]
pub struct Transactions {
    config: TxnConfig,
    next_id: u64,
    clients: Map<u64, ClientTxn>,
    client_keys: Map<Box<[u8]>, u64>,
    servers: Map<u64, ServerTxn>,
    server_keys: Map<Box<[u8]>, u64>,
    timers: BinaryHeap<Reverse<TimerEntry>>,
    out: VecDeque<Out>,
    events: VecDeque<TxnEvent>,
    scratch: Vec<u8>,
}

fn malformed_at(kind: ParseErrorKind, offset: usize) -> ParseError {
    ParseError::new(kind, offset)
}

impl Transactions {
    /// An empty table.
    pub fn new(config: TxnConfig) -> Self {
        let s = SeededState(config.hash_seed);
        Self {
            config,
            next_id: 0,
            clients: HashMap::with_hasher(s),
            client_keys: HashMap::with_hasher(s),
            servers: HashMap::with_hasher(s),
            server_keys: HashMap::with_hasher(s),
            timers: BinaryHeap::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            scratch: Vec::with_capacity(256),
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

    /// The state of a client transaction, `None` once it has terminated.
    pub fn client_state(&self, id: ClientTxnId) -> Option<ClientState> {
        self.clients.get(&id.0).map(|t| t.state)
    }

    /// The state of a server transaction, `None` once it has terminated.
    pub fn server_state(&self, id: ServerTxnId) -> Option<ServerState> {
        self.servers.get(&id.0).map(|t| t.state)
    }

    /// For a server transaction created by a CANCEL: the INVITE server transaction it
    /// targets (RFC 3261 §9.2), if that one was live when the CANCEL arrived and still is.
    ///
    /// Matching follows §17.2.3 with the method taken as INVITE: branch and sent-by of the
    /// top Via for RFC 3261 branches; Request-URI, To tag, From tag, Call-ID, CSeq number and
    /// top Via otherwise.
    pub fn cancel_target(&self, cancel: ServerTxnId) -> Option<ServerTxnId> {
        let target = self.servers.get(&cancel.0)?.cancel_target?;
        self.servers.contains_key(&target.0).then_some(target)
    }

    /// Whether `msg`, a request, matches a live server transaction (RFC 3261 §17.2.3): a
    /// retransmission, or an ACK/CANCEL of a transaction this table holds. `Ok(false)` for a
    /// request that would start a new transaction; an error when the request cannot be
    /// matched at all (bad Via, CSeq, Call-ID, From or To). Reads the table only.
    pub fn matches_server(&mut self, msg: &Message<'_>) -> Result<bool, ParseError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let found = self
            .request_key(msg, &mut scratch)
            .map(|_| self.server_keys.contains_key(scratch.as_slice()));
        self.scratch = scratch;
        found
    }

    fn alloc_id(&mut self) -> u64 {
        self.next_id = self.next_id.wrapping_add(1);
        self.next_id
    }

    /// Processes a request that arrived from `from` (server side, RFC 3261 §17.2).
    ///
    /// Matches it against the server transactions (§17.2.3: branch + sent-by + method for
    /// `z9hG4bK` branches, ACK matching its INVITE, CANCEL its own; the RFC 2543 fields
    /// otherwise) and either creates a transaction ([`RequestOutcome::New`]) or lets the
    /// matched one absorb it. Queues retransmitted responses for
    /// [`poll_transmit`](Self::poll_transmit).
    pub fn handle_request(&mut self, now: Instant, bytes: &[u8], from: Peer) -> RequestOutcome {
        let msg = match Message::parse(bytes, &self.config.limits) {
            Ok(m) => m,
            Err(e) => return RequestOutcome::Malformed(e),
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        let reply_to = response_peer(&msg, from);
        let outcome = match self.request_key(&msg, &mut scratch) {
            Ok((method, rfc2543, prefix_len)) => {
                match self.server_keys.get(scratch.as_slice()).copied() {
                    Some(id) => self.matched_request(now, id, method, reply_to),
                    None if method == Method::Ack => RequestOutcome::PassThrough,
                    None => self.new_server(&msg, &scratch, method, rfc2543, prefix_len, reply_to),
                }
            }
            Err(e) => RequestOutcome::Malformed(e),
        };
        self.scratch = scratch;
        self.prune_timers();
        outcome
    }

    /// Validates a request and writes its matching key into `out`. Returns the method,
    /// whether the RFC 2543 fallback applies, and (for it) the length of the key prefix
    /// without method and To tag.
    fn request_key<'a>(
        &self,
        msg: &Message<'a>,
        out: &mut Vec<u8>,
    ) -> Result<(Method<'a>, bool, Option<usize>), ParseError> {
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
                Ok((method, false, None))
            }
            None => {
                let prefix = key::server_2543_prefix(out, msg)?;
                key::server_2543_finish(out, method.as_bytes(), to.tag().unwrap_or_default());
                Ok((method, true, Some(prefix)))
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
        let Some(t) = self.servers.get_mut(&id) else {
            return RequestOutcome::PassThrough;
        };
        t.peer = from;
        if method == Method::Ack {
            return match t.state {
                ServerState::Completed => {
                    t.state = ServerState::Confirmed;
                    t.timers.retx_at = None;
                    if t.peer.transport.is_reliable() {
                        self.terminate(TxnId::Server(sid));
                    } else {
                        let at = now + self.config.t4;
                        t.timers.end_at = Some(at);
                        arm(&mut self.timers, TxnId::Server(sid), Slot::End, at);
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
        key: &[u8],
        method: Method<'_>,
        rfc2543: bool,
        prefix_len: Option<usize>,
        from: Peer,
    ) -> RequestOutcome {
        // Requests of dialogs already established (a To tag) and CANCELs may use the whole
        // table; requests that start something new only 90% of it, so that a table filled by
        // new calls never refuses the BYE of a call it admitted.
        let in_dialog = method == Method::Cancel || msg.to().is_ok_and(|to| to.tag().is_some());
        let max = self.config.max_transactions;
        let limit = if in_dialog { max } else { max - max / 10 };
        if self.len() >= limit {
            return RequestOutcome::TooMany;
        }
        let cancel_target = if method == Method::Cancel {
            self.find_cancel_target(msg, key, rfc2543, prefix_len)
        } else {
            None
        };
        let id = self.alloc_id();
        let invite = method == Method::Invite;
        let key: Box<[u8]> = key.into();
        self.server_keys.insert(key.clone(), id);
        self.servers.insert(
            id,
            ServerTxn {
                key,
                ack_key: None,
                prefix_len,
                invite,
                state: if invite {
                    ServerState::Proceeding
                } else {
                    ServerState::Trying
                },
                peer: from,
                response: Vec::new(),
                cancel_target,
                timers: Timers::default(),
            },
        );
        RequestOutcome::New(ServerTxnId(id))
    }

    fn find_cancel_target(
        &self,
        msg: &Message<'_>,
        cancel_key: &[u8],
        rfc2543: bool,
        prefix_len: Option<usize>,
    ) -> Option<ServerTxnId> {
        let mut k = Vec::with_capacity(cancel_key.len());
        if rfc2543 {
            let prefix = cancel_key.get(..prefix_len?)?;
            k.extend_from_slice(prefix);
            let to = msg.to().ok()?;
            key::server_2543_finish(&mut k, b"INVITE", to.tag().unwrap_or_default());
        } else {
            let via = msg.top_via().ok()?;
            key::server_3261(&mut k, &via, via.branch()?, b"INVITE");
        }
        let id = *self.server_keys.get(k.as_slice())?;
        self.servers
            .get(&id)
            .is_some_and(|t| t.invite)
            .then_some(ServerTxnId(id))
    }
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
        let (status, to_tag) = {
            let msg =
                Message::parse(&response, &self.config.limits).map_err(TxnError::Malformed)?;
            let status = msg.status().ok_or(TxnError::NotAResponse)?;
            let to_tag: Vec<u8> = msg
                .to()
                .ok()
                .and_then(|t| t.tag())
                .unwrap_or_default()
                .to_vec();
            (status, to_tag)
        };
        let t1 = self.config.eff_t1();
        let t1x64 = self.config.t1x64();
        let tid = TxnId::Server(id);
        let t = self
            .servers
            .get_mut(&id.0)
            .ok_or(TxnError::UnknownTransaction)?;
        let reliable = t.peer.transport.is_reliable();
        let provisional = status < 200;
        let success = (200..300).contains(&status);
        match (t.invite, t.state) {
            (true, ServerState::Proceeding) if provisional => {
                t.response.clone_from(&response);
                self.out.push_back(Out::Owned(t.peer, response));
            }
            (true, ServerState::Proceeding) if success => {
                t.state = ServerState::Accepted;
                t.response = Vec::new();
                let at = now + t1x64;
                t.timers.end_at = Some(at);
                arm(&mut self.timers, tid, Slot::End, at);
                self.out.push_back(Out::Owned(t.peer, response));
                Self::register_ack_key(&mut self.server_keys, t, id, &to_tag);
            }
            (true, ServerState::Accepted) if success => {
                self.out.push_back(Out::Owned(t.peer, response));
            }
            (true, ServerState::Proceeding) => {
                t.state = ServerState::Completed;
                t.response = response;
                if !reliable {
                    t.timers.retx_every = t1;
                    let at = now + t1;
                    t.timers.retx_at = Some(at);
                    arm(&mut self.timers, tid, Slot::Retx, at);
                }
                let at = now + t1x64;
                t.timers.end_at = Some(at);
                arm(&mut self.timers, tid, Slot::End, at);
                self.out.push_back(Out::Response(id));
                Self::register_ack_key(&mut self.server_keys, t, id, &to_tag);
            }
            (false, ServerState::Trying | ServerState::Proceeding) if provisional => {
                t.state = ServerState::Proceeding;
                t.response.clone_from(&response);
                self.out.push_back(Out::Owned(t.peer, response));
            }
            (false, ServerState::Trying | ServerState::Proceeding) => {
                t.state = ServerState::Completed;
                if reliable {
                    self.out.push_back(Out::Owned(t.peer, response));
                    self.terminate(tid);
                } else {
                    t.response = response;
                    let at = now + t1x64;
                    t.timers.end_at = Some(at);
                    arm(&mut self.timers, tid, Slot::End, at);
                    self.out.push_back(Out::Response(id));
                }
            }
            _ => return Err(TxnError::InvalidState),
        }
        self.prune_timers();
        Ok(())
    }

    /// RFC 2543 fallback: from the final response on, the INVITE's ACK matches under the
    /// response's To tag.
    fn register_ack_key(
        keys: &mut Map<Box<[u8]>, u64>,
        t: &mut ServerTxn,
        id: ServerTxnId,
        to_tag: &[u8],
    ) {
        let Some(prefix) = t.prefix_len.and_then(|n| t.key.get(..n)) else {
            return;
        };
        if t.ack_key.is_some() {
            return;
        }
        let mut k = prefix.to_vec();
        key::server_2543_finish(&mut k, b"ACK", to_tag);
        let k: Box<[u8]> = k.into();
        keys.entry(k.clone()).or_insert(id.0);
        t.ack_key = Some(k);
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
        let r = r.and_then(|invite| {
            if self.len() >= self.config.max_transactions {
                return Err(TxnError::TooMany);
            }
            if self.client_keys.contains_key(scratch.as_slice()) {
                return Err(TxnError::DuplicateTransaction);
            }
            Ok(invite)
        });
        let invite = match r {
            Ok(invite) => invite,
            Err(e) => {
                self.scratch = scratch;
                return Err(e);
            }
        };
        let id = self.alloc_id();
        let cid = ClientTxnId(id);
        let key: Box<[u8]> = scratch.as_slice().into();
        self.scratch = scratch;
        self.client_keys.insert(key.clone(), id);
        let mut timers = Timers::default();
        let t1 = self.config.eff_t1();
        if !to.transport.is_reliable() {
            timers.retx_every = t1;
            timers.retx_at = Some(now + t1);
            arm(&mut self.timers, TxnId::Client(cid), Slot::Retx, now + t1);
        }
        let end = now + self.config.t1x64();
        timers.end_at = Some(end);
        arm(&mut self.timers, TxnId::Client(cid), Slot::End, end);
        self.clients.insert(
            id,
            ClientTxn {
                key,
                invite,
                state: if invite {
                    ClientState::Calling
                } else {
                    ClientState::Trying
                },
                peer: to,
                request,
                ack: Vec::new(),
                timers,
            },
        );
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
            .get(&invite.0)
            .ok_or(TxnError::UnknownTransaction)?;
        if !t.invite || t.state != ClientState::Proceeding {
            return Err(TxnError::InvalidState);
        }
        let peer = t.peer;
        let cancel = build_in_txn_request(&t.request, b"CANCEL", None, &self.config.limits)
            .map_err(TxnError::Malformed)?;
        self.send_request(now, cancel, peer)
    }

    /// Processes a response that arrived from `from` (client side, RFC 3261 §17.1).
    ///
    /// Matches it to a client transaction by top Via branch and CSeq method (§17.1.3): a
    /// response to a CANCEL never matches the INVITE's transaction.
    pub fn handle_response(&mut self, now: Instant, bytes: &[u8], from: Peer) -> ResponseOutcome {
        let msg = match Message::parse(bytes, &self.config.limits) {
            Ok(m) => m,
            Err(e) => return ResponseOutcome::Malformed(e),
        };
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
        let found = self.client_keys.get(scratch.as_slice()).copied();
        self.scratch = scratch;
        let Some(id) = found else {
            return ResponseOutcome::Stray;
        };
        let outcome = self.client_response(now, id, status, &msg, from);
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
        let Some(t) = self.clients.get_mut(&id) else {
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
                t.state = ClientState::Proceeding;
                if t.invite {
                    // Timers A and B stop; the TU guards the rest (Timer C in a proxy).
                    t.timers = Timers::default();
                }
                ResponseOutcome::ForTu(cid)
            }
            ClientState::Calling | ClientState::Proceeding if t.invite && success => {
                t.state = ClientState::Accepted;
                t.timers = Timers::default();
                let at = now + t1x64;
                t.timers.end_at = Some(at);
                arm(&mut self.timers, tid, Slot::End, at);
                ResponseOutcome::ForTu(cid)
            }
            ClientState::Calling | ClientState::Proceeding if t.invite => {
                t.state = ClientState::Completed;
                t.timers = Timers::default();
                let to = msg.first_value(HeaderName::To);
                let ack = build_in_txn_request(&t.request, b"ACK", to, &limits).unwrap_or_default();
                if reliable {
                    if !ack.is_empty() {
                        self.out.push_back(Out::Owned(t.peer, ack));
                    }
                    self.terminate(tid);
                } else {
                    t.ack = ack;
                    let at = now + self.config.timer_d;
                    t.timers.end_at = Some(at);
                    arm(&mut self.timers, tid, Slot::End, at);
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
                    let at = now + self.config.t4;
                    t.timers.end_at = Some(at);
                    arm(&mut self.timers, tid, Slot::End, at);
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
            TxnId::Client(c) => self.clients.contains_key(&c.0),
            TxnId::Server(s) => self.servers.contains_key(&s.0),
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
                if let Some(t) = self.clients.remove(&c.0) {
                    if self.client_keys.get(&t.key) == Some(&c.0) {
                        self.client_keys.remove(&t.key);
                    }
                    self.events.push_back(TxnEvent::Terminated(id));
                }
            }
            TxnId::Server(s) => {
                if let Some(t) = self.servers.remove(&s.0) {
                    for k in std::iter::once(&t.key).chain(t.ack_key.as_ref()) {
                        if self.server_keys.get(k) == Some(&s.0) {
                            self.server_keys.remove(k);
                        }
                    }
                    self.events.push_back(TxnEvent::Terminated(id));
                }
            }
        }
    }

    /// Fires every timer due at or before `now` (retransmissions, timeouts, state ends).
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(Reverse(e)) = self.timers.peek().copied() {
            if e.at > now {
                break;
            }
            self.timers.pop();
            if self.timer_at(e.id, e.slot) != Some(e.at) {
                continue; // cancelled or rescheduled
            }
            self.fire(now, e.id, e.slot);
        }
        self.prune_timers();
    }

    fn timer_at(&self, id: TxnId, slot: Slot) -> Option<Instant> {
        match id {
            TxnId::Client(c) => self.clients.get(&c.0)?.timers.at(slot),
            TxnId::Server(s) => self.servers.get(&s.0)?.timers.at(slot),
        }
    }

    fn fire(&mut self, now: Instant, id: TxnId, slot: Slot) {
        let t2 = self.config.eff_t2();
        let floor = Duration::from_millis(1);
        match (id, slot) {
            (TxnId::Client(c), Slot::Retx) => {
                let Some(t) = self.clients.get_mut(&c.0) else {
                    return;
                };
                // A doubles without bound; E doubles up to T2, and is T2 in Proceeding.
                let next = if t.invite {
                    t.timers.retx_every.saturating_mul(2)
                } else if t.state == ClientState::Proceeding {
                    t2
                } else {
                    t.timers.retx_every.saturating_mul(2).min(t2)
                }
                .max(floor);
                t.timers.retx_every = next;
                t.timers.retx_at = Some(now + next);
                arm(&mut self.timers, id, Slot::Retx, now + next);
                self.out.push_back(Out::Request(c));
            }
            (TxnId::Client(c), Slot::End) => {
                let Some(t) = self.clients.get(&c.0) else {
                    return;
                };
                if matches!(
                    t.state,
                    ClientState::Calling | ClientState::Trying | ClientState::Proceeding
                ) {
                    self.events.push_back(TxnEvent::ClientTimeout(c));
                }
                self.terminate(id);
            }
            (TxnId::Server(s), Slot::Retx) => {
                let Some(t) = self.servers.get_mut(&s.0) else {
                    return;
                };
                let next = t.timers.retx_every.saturating_mul(2).min(t2).max(floor);
                t.timers.retx_every = next;
                t.timers.retx_at = Some(now + next);
                arm(&mut self.timers, id, Slot::Retx, now + next);
                self.out.push_back(Out::Response(s));
            }
            (TxnId::Server(s), Slot::End) => {
                let Some(t) = self.servers.get(&s.0) else {
                    return;
                };
                if t.invite && t.state == ServerState::Completed {
                    self.events.push_back(TxnEvent::ServerTimeout(s));
                }
                self.terminate(id);
            }
        }
    }

    /// Drops cancelled entries from the top of the timer heap (so that
    /// [`poll_timeout`](Self::poll_timeout) is exact), and rebuilds the heap when cancelled
    /// entries outnumber live ones by far.
    fn prune_timers(&mut self) {
        while let Some(Reverse(e)) = self.timers.peek().copied() {
            if self.timer_at(e.id, e.slot) == Some(e.at) {
                break;
            }
            self.timers.pop();
        }
        if self.timers.len() > 4 * self.len() + 64 {
            let mut v = std::mem::take(&mut self.timers).into_vec();
            v.retain(|Reverse(e)| self.timer_at(e.id, e.slot) == Some(e.at));
            self.timers = BinaryHeap::from(v);
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) must next be called, if any timer runs.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse(e)| e.at)
    }

    /// Appends the next message to send to `buf` and says where it goes, or returns `None`
    /// when nothing is waiting. Call until `None` after every input.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let _ = now;
        while let Some(out) = self.out.pop_front() {
            let (peer, bytes): (Peer, &[u8]) = match &out {
                Out::Owned(peer, bytes) => (*peer, bytes),
                Out::Request(c) => match self.clients.get(&c.0) {
                    Some(t) => (t.peer, &t.request),
                    None => continue,
                },
                Out::Ack(c) => match self.clients.get(&c.0) {
                    Some(t) => (t.peer, &t.ack),
                    None => continue,
                },
                Out::Response(s) => match self.servers.get(&s.0) {
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
