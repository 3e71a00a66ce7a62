//! The interface between a worker's event loop and its sans-IO engine, and a trivial engine
//! for tests.

use std::collections::VecDeque;
use std::fmt::Write as _;

use holdline_base::{Instant, Peer, Transmit};
use holdline_overload::{Class, Rejection};
use holdline_sip::{Limits, Message, Method, build_response};

use crate::ServerConfig;

/// One worker's sans-IO engine.
pub trait WorkerCore: Send {
    /// Processes one datagram or framed stream message from `from`.
    fn handle(&mut self, now: Instant, bytes: &[u8], from: Peer);
    /// [`handle`](Self::handle) behind the admission gate: new work — a new INVITE (initial,
    /// no To tag, not a retransmission of one already admitted), a REGISTER for the registrar
    /// (a new registration or a refresh) — is put to `admit` first and, if it answers with a
    /// rejection, answered with it statelessly. Returns whether the message was rejected.
    /// `forward` is asked, for a new INVITE about to be sent to a next hop, whether it may go
    /// there (TCP smart forwarding). `admit`'s arguments: the class of the new work, and
    /// whether the INVITE's upstream client takes the overload answer and is exempt from the
    /// local controller (see `holdline_proto::Endpoint::handle_admitting`). The default
    /// (engines without a gate) handles everything.
    fn handle_admitting(
        &mut self,
        now: Instant,
        bytes: &[u8],
        from: Peer,
        admit: &mut dyn FnMut(Class, bool) -> Option<Rejection>,
        forward: &mut dyn FnMut(Peer, Option<holdline_proto::EdgeId>) -> Option<Rejection>,
    ) -> bool {
        let _ = (admit, forward);
        self.handle(now, bytes, from);
        false
    }
    /// Sets the overload answer sent to upstream clients that offer `oc` (RFC 7339 server
    /// role; see [`holdline_proto::OverloadAnswer`]). Engines without one ignore it.
    fn set_overload_answer(&mut self, answer: Option<holdline_proto::OverloadAnswer>) {
        let _ = answer;
    }
    /// What the server role saw since the previous call (see
    /// [`holdline_proto::Endpoint::take_feedback_tally`]). Engines without one saw nothing.
    fn take_feedback_tally(&mut self) -> holdline_proto::FeedbackTally {
        holdline_proto::FeedbackTally::default()
    }
    /// The next event for the hop-by-hop client at the forward gate: an overload answer a
    /// next hop sent (RFC 7339 / RFC 7415 client role), or the start or end of an INVITE's
    /// client transaction (seed 004's window). Engines without one have none.
    fn poll_hop_event(&mut self) -> Option<HopEvent> {
        None
    }
    /// The source address of the next request that failed authentication (wrong password or
    /// unknown user), for the worker's per-source throttle. Engines without authentication
    /// have none.
    fn poll_auth_failure(&mut self) -> Option<std::net::IpAddr> {
        None
    }
    /// The next DNS lookup the engine needs (RFC 3263 resolution of a route's next hop):
    /// the worker hands it to the resolver thread and feeds the answer back with
    /// [`handle_dns_response`](Self::handle_dns_response). Engines without DNS have none.
    fn poll_dns_query(&mut self) -> Option<holdline_proto::DnsQuery> {
        None
    }
    /// The answer to a lookup from [`poll_dns_query`](Self::poll_dns_query). Engines
    /// without DNS ignore it.
    fn handle_dns_response(&mut self, now: Instant, response: holdline_proto::DnsResponse) {
        let _ = (now, response);
    }
    /// Applies the live part of a reloaded configuration (routes, domains, relay policy,
    /// probing): calls and transactions in progress are kept. Engines without routing ignore
    /// it.
    fn reconfigure(&mut self, config: &ServerConfig) {
        let _ = config;
    }
    /// Requests in progress: proxied requests awaiting or holding their final response and
    /// branches awaiting theirs (a drain waits until none is left on any worker). Engines
    /// that keep none report 0.
    fn in_flight(&self) -> usize {
        0
    }
    /// Fires every timer due at or before `now`.
    fn handle_timeout(&mut self, now: Instant);
    /// Appends the next message to send to `buf` and describes it.
    fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit>;
    /// When [`handle_timeout`](Self::handle_timeout) must next be called.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Prometheus text lines for this worker's counters (the server adds the `worker` label).
    fn metrics(&self, out: &mut String);
}

/// Makes the engine of worker `index`.
pub type CoreFactory = Box<dyn Fn(usize) -> Box<dyn WorkerCore> + Send + Sync>;

/// A factory of [`TestCore`]s, for tests of the runtime itself (`holdline serve` runs the SIP
/// engine, [`Engine`](crate::Engine)).
pub fn default_core_factory(config: &ServerConfig) -> CoreFactory {
    let mut limits = Limits::DEFAULT;
    limits.max_message_size(config.limits.max_message_size);
    Box::new(move |i| Box::new(TestCore::new(i, limits)))
}

/// Most responses a [`TestCore`] holds before dropping.
const TEST_CORE_QUEUE: usize = 65_536;

/// A trivial engine: answers every request except ACK with `200 OK` (To tag `w<index>`, an
/// `X-Worker: <index>` header naming the worker that handled it), a request without a valid
/// Call-ID with `400`, and counts. Enough to test sockets, sharding, framing and limits.
#[derive(Debug)]
pub struct TestCore {
    index: usize,
    limits: Limits,
    out: VecDeque<(Vec<u8>, Peer)>,
    requests: u64,
    responses: u64,
    unparsable: u64,
    bad_requests: u64,
    dropped: u64,
}

impl TestCore {
    /// The engine of worker `index`.
    pub fn new(index: usize, limits: Limits) -> Self {
        Self {
            index,
            limits,
            out: VecDeque::new(),
            requests: 0,
            responses: 0,
            unparsable: 0,
            bad_requests: 0,
            dropped: 0,
        }
    }
}

impl WorkerCore for TestCore {
    fn handle(&mut self, _now: Instant, bytes: &[u8], from: Peer) {
        let Ok(msg) = Message::parse(bytes, &self.limits) else {
            self.unparsable += 1;
            return;
        };
        if !msg.is_request() {
            self.responses += 1;
            return;
        }
        self.requests += 1;
        if msg.method() == Some(Method::Ack) {
            return;
        }
        if self.out.len() >= TEST_CORE_QUEUE {
            self.dropped += 1;
            return;
        }
        let worker = self.index.to_string();
        let tag = format!("w{}", self.index);
        let mut buf = Vec::new();
        let (code, reason) = if msg.call_id().is_ok() {
            (200, "OK")
        } else {
            self.bad_requests += 1;
            (400, "Bad Call-ID")
        };
        build_response(
            &msg,
            code,
            reason,
            Some(tag.as_bytes()),
            &[("X-Worker", worker.as_bytes())],
            b"",
            &mut buf,
        );
        self.out.push_back((buf, from));
    }

    fn handle_timeout(&mut self, _now: Instant) {}

    fn poll_transmit(&mut self, _now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let (bytes, destination) = self.out.pop_front()?;
        buf.extend_from_slice(&bytes);
        Some(Transmit {
            destination,
            size: bytes.len(),
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn metrics(&self, out: &mut String) {
        let _ = writeln!(out, "holdline_testcore_requests_total {}", self.requests);
        let _ = writeln!(out, "holdline_testcore_responses_total {}", self.responses);
        let _ = writeln!(
            out,
            "holdline_testcore_unparsable_total {}",
            self.unparsable
        );
        let _ = writeln!(
            out,
            "holdline_testcore_bad_requests_total {}",
            self.bad_requests
        );
        let _ = writeln!(out, "holdline_testcore_dropped_total {}", self.dropped);
    }
}

/// What the engine tells the worker's hop-by-hop client ([`WorkerCore::poll_hop_event`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum HopEvent {
    /// A next hop's overload answer, from a response to one of our client transactions.
    Feedback(Peer, holdline_sip::OcReport),
    /// An INVITE was forwarded to this next hop, on a route naming this target edge (if any).
    Started(Peer, Option<holdline_proto::EdgeId>),
    /// That INVITE got its first response (or ended without one), this long after it was
    /// sent: no longer unanswered.
    Answered(Peer, Option<holdline_proto::EdgeId>, std::time::Duration),
    /// The client transaction of an INVITE forwarded to `to` ended.
    Ended {
        /// The next hop.
        to: Peer,
        /// The target edge its route named, if any.
        edge: Option<holdline_proto::EdgeId>,
        /// Its final status (408 when `timed_out`).
        status: u16,
        /// No final response came.
        timed_out: bool,
        /// From sending the INVITE to the end.
        delay: std::time::Duration,
    },
}
