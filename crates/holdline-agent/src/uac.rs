//! The calling side: arrivals, INVITE client transactions (Timers A/B), ACK, BYE with its
//! non-INVITE transaction (Timers E/F), CANCEL after a no-answer time.

use std::net::SocketAddr;

use holdline_base::{ConnId, Duration, Instant, Peer};
use holdline_metrics::{Method as M, MsgKey};
use holdline_sip::Message;

use crate::build::{self, LegText, num};
use crate::holddown::HoldDowns;
use crate::timers::{Entry, Kind};
use crate::{Arrivals, Ctx, Hold, MAX_HOPS, UacConfig};

/// Branch suffixes of the INVITE transaction (INVITE, its CANCEL and the ACK of a failure) by
/// attempt: each failover to another hop is a new transaction (RFC 3263 §4.3), so a new branch.
const INVITE_BRANCH: [&[u8]; MAX_HOPS] = [
    b"-i", b"-i1", b"-i2", b"-i3", b"-i4", b"-i5", b"-i6", b"-i7",
];

/// Branch suffixes of the BYE by attempt: a BYE failed over to another first hop is a new
/// transaction.
const BYE_BRANCH: [&[u8]; MAX_HOPS] = [
    b"-b", b"-b1", b"-b2", b"-b3", b"-b4", b"-b5", b"-b6", b"-b7",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// INVITE sent, nothing back.
    Calling,
    /// A provisional response came.
    Proceeding,
    /// CANCEL sent; waiting for the final response (487).
    Cancelling,
    /// 200 OK acknowledged; holding.
    Confirmed,
    /// BYE sent.
    Closing,
}

#[derive(Debug)]
struct Call {
    leg: u16,
    user: u64,
    /// The first hop this call's requests go to (index into `Uac::hops`).
    hop: u8,
    /// How many times the INVITE failed over to another hop.
    attempt: u8,
    /// The hops tried so far, one bit each.
    tried: u8,
    /// When the call's INVITE (or BYE) fails over if the hop has not answered at all.
    failover_at: Option<Instant>,
    /// How many times the BYE failed over to another hop.
    bye_attempt: u8,
    /// The hops the BYE was sent to, one bit each.
    bye_tried: u8,
    state: State,
    t_invite: Instant,
    stamp: u64,
    a_interval: Duration,
    timer_a: Option<Instant>,
    timer_b: Option<Instant>,
    cancel_at: Option<Instant>,
    cancel_pending: bool,
    hold_at: Option<Instant>,
    got_100: bool,
    got_180: bool,
    to_tag: Vec<u8>,
    target: Vec<u8>,
    routes: Vec<u8>,
    /// The non-INVITE transaction in progress (BYE or CANCEL).
    nit: Option<M>,
    t_nit: Instant,
    e_interval: Duration,
    timer_e: Option<Instant>,
    timer_f: Option<Instant>,
}

/// The requests a UAC call sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Req {
    Invite,
    Ack { failure: bool },
    Bye,
    Cancel,
}

#[derive(Debug, Default)]
struct Slot {
    gen_: u32,
    call: Option<Call>,
}

/// The UAC role.
#[derive(Debug)]
pub(crate) struct Uac {
    cfg: UacConfig,
    legs: Vec<LegText>,
    pub(crate) arrivals: Arrivals,
    slots: Vec<Slot>,
    free: Vec<u32>,
    pub(crate) active: u64,
    next_leg: usize,
    placed: u64,
    /// `target` and then the alternates.
    hops: Vec<SocketAddr>,
    /// Until when each hop is avoided by new calls, after it failed.
    down: HoldDowns,
}

/// Identifies the call of a message: `{token}-{slot}-{gen}` in Call-ID and tags.
fn parse_id(token: &[u8], call_id: &[u8]) -> Option<(u32, u32)> {
    let rest = call_id.strip_prefix(token)?.strip_prefix(b"-")?;
    let end = rest.iter().position(|&b| b == b'@').unwrap_or(rest.len());
    let mut it = rest[..end].split(|&b| b == b'-');
    let slot = std::str::from_utf8(it.next()?).ok()?.parse().ok()?;
    let gen_ = std::str::from_utf8(it.next()?).ok()?.parse().ok()?;
    it.next().is_none().then_some((slot, gen_))
}

fn write_id(out: &mut Vec<u8>, token: &[u8], slot: u32, gen_: u32) {
    out.extend_from_slice(token);
    out.push(b'-');
    num(out, slot);
    out.push(b'-');
    num(out, gen_);
}

impl Uac {
    pub(crate) fn new(cfg: UacConfig, legs: Vec<LegText>, arrivals: Arrivals) -> Self {
        let mut hops = vec![cfg.target];
        hops.extend(cfg.hops.alternates.iter().copied());
        hops.truncate(MAX_HOPS);
        Self {
            down: HoldDowns::new(hops.len()),
            hops,
            cfg,
            legs,
            arrivals,
            slots: Vec::new(),
            free: Vec::new(),
            active: 0,
            next_leg: 0,
            placed: 0,
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.arrivals.is_done() && self.active == 0
    }

    /// Places the calls whose arrival is due.
    pub(crate) fn poll_arrivals(&mut self, cx: &mut Ctx<'_>) {
        while self.arrivals.poll(cx.now, cx.rng).is_some() {
            cx.rec.c.offered += 1;
            if self.cfg.max_active.is_some_and(|m| self.active >= m) {
                cx.rec.c.blocked += 1;
            } else {
                self.start_call(cx);
            }
            if self.arrivals.is_done() {
                cx.rec.mark_load_end(cx.now);
            }
        }
    }

    fn start_call(&mut self, cx: &mut Ctx<'_>) {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(Slot::default());
                (self.slots.len() - 1) as u32
            }
        };
        let now = cx.now;
        let hop = self.choose_hop(cx);
        let leg = self.leg_for(hop, cx.reliable);
        let user = self.placed;
        self.placed += 1;
        let reliable = cx.reliable;
        let t1 = cx.t.t1;
        let failover_at = self
            .cfg
            .hops
            .failover_after
            .filter(|_| self.hops.len() > 1)
            .map(|d| now + d);
        let call = Call {
            leg,
            user,
            hop: hop as u8,
            attempt: 0,
            tried: 1 << hop,
            failover_at,
            bye_attempt: 0,
            bye_tried: 0,
            state: State::Calling,
            t_invite: now,
            stamp: now.as_nanos(),
            a_interval: t1,
            timer_a: (!reliable).then(|| now + t1),
            timer_b: Some(now + cx.t.timeout()),
            cancel_at: self.cfg.cancel_after.map(|d| now + d),
            cancel_pending: false,
            hold_at: None,
            got_100: false,
            got_180: false,
            to_tag: Vec::new(),
            target: Vec::new(),
            routes: Vec::new(),
            nit: None,
            t_nit: now,
            e_interval: t1,
            timer_e: None,
            timer_f: None,
        };
        let gen_ = self.slots[slot as usize].gen_;
        // Timer B is armed by the checkpoint T1 from now, if the call still lives then.
        let check = Some(now + t1);
        cx.timers.arm(
            slot,
            gen_,
            [
                (call.timer_a, Kind::UacA),
                (check, Kind::UacCheck),
                (call.cancel_at, Kind::UacCancel),
                (call.failover_at, Kind::UacFailover),
            ],
        );
        self.slots[slot as usize].call = Some(call);
        self.active += 1;
        cx.rec.c.attempted += 1;
        cx.rec.msgs.row(MsgKey::Request(M::Invite)).sent += 1;
        self.send_invite(cx, slot);
    }

    /// The hop a new call starts at: one at random among those not held down (`spread`), or
    /// the first not held down; when every hop is held down, as if none were.
    fn choose_hop(&self, cx: &mut Ctx<'_>) -> usize {
        let n = self.hops.len();
        if n == 1 {
            return 0;
        }
        let now = cx.now;
        let up = |i: &usize| self.down.is_up(*i, now);
        let ups = (0..n).filter(up).count();
        if self.cfg.hops.spread {
            if ups == 0 {
                return cx.rng.below(n as u64) as usize;
            }
            let k = cx.rng.below(ups as u64) as usize;
            (0..n).filter(up).nth(k).unwrap_or(0)
        } else {
            (0..n).find(up).unwrap_or(0)
        }
    }

    /// The leg a request to `hop` leaves on. Over a connection-oriented transport with
    /// several hops, leg `i` is connected to hop `i mod hops`: the call takes the next of
    /// that hop's legs. Otherwise legs take turns whatever the hop.
    fn leg_for(&mut self, hop: usize, reliable: bool) -> u16 {
        let legs = self.legs.len().max(1);
        let n = self.hops.len();
        let k = self.next_leg;
        self.next_leg = self.next_leg.wrapping_add(1);
        if reliable && n > 1 {
            // Legs hop, hop + n, hop + 2n, ... (at least one: legs >= hops is checked).
            let own = (legs - hop).div_ceil(n).max(1);
            (hop + (k % own) * n) as u16
        } else {
            (k % legs) as u16
        }
    }

    fn peer(&self, cx: &Ctx<'_>, call: &Call) -> Peer {
        Peer {
            addr: self.hops[usize::from(call.hop)],
            transport: cx.transport,
            conn: Some(ConnId(u64::from(call.leg))),
        }
    }

    fn request_uri(&self, out: &mut Vec<u8>, leg: &LegText, user: u64) {
        out.extend_from_slice(b"sip:");
        self.cfg.to.write_user(user, out);
        out.push(b'@');
        out.extend_from_slice(self.cfg.to.domain().as_bytes());
        if self.cfg.uri_transport {
            out.extend_from_slice(leg.uri_tp);
        }
    }

    /// The lines every request of a call shares after the Via: From, To, Call-ID.
    fn dialog_lines(&self, token: &[u8], out: &mut Vec<u8>, slot: u32, call: &Call, to_tag: bool) {
        let leg = &self.legs[call.leg as usize];
        let gen_ = self.slots[slot as usize].gen_;
        out.extend_from_slice(b"From: \"");
        out.extend_from_slice(self.cfg.from_user.as_bytes());
        out.extend_from_slice(b"\" <sip:");
        out.extend_from_slice(self.cfg.from_user.as_bytes());
        out.push(b'@');
        out.extend_from_slice(&leg.hostport);
        out.extend_from_slice(b">;tag=");
        write_id(out, token, slot, gen_);
        out.extend_from_slice(b"\r\nTo: <sip:");
        self.cfg.to.write_user(call.user, out);
        out.push(b'@');
        out.extend_from_slice(self.cfg.to.domain().as_bytes());
        out.push(b'>');
        if to_tag && !call.to_tag.is_empty() {
            out.extend_from_slice(b";tag=");
            out.extend_from_slice(&call.to_tag);
        }
        out.extend_from_slice(b"\r\nCall-ID: ");
        write_id(out, token, slot, gen_);
        out.push(b'@');
        out.extend_from_slice(&leg.hostport);
        out.extend_from_slice(b"\r\n");
    }

    fn via(&self, token: &[u8], out: &mut Vec<u8>, slot: u32, leg: u16, suffix: &[u8]) {
        let leg = &self.legs[leg as usize];
        out.extend_from_slice(&leg.via_prefix);
        write_id(out, token, slot, self.slots[slot as usize].gen_);
        out.extend_from_slice(suffix);
        out.extend_from_slice(b";rport\r\n");
    }

    fn send_invite(&self, cx: &mut Ctx<'_>, slot: u32) {
        self.send(cx, slot, Req::Invite);
    }

    fn send_ack(&self, cx: &mut Ctx<'_>, slot: u32, failure: bool) {
        self.send(cx, slot, Req::Ack { failure });
    }

    /// Sends BYE (in-dialog) or CANCEL (same branch as the INVITE).
    fn send_nit(&self, cx: &mut Ctx<'_>, slot: u32, method: M) {
        self.send(
            cx,
            slot,
            if method == M::Bye {
                Req::Bye
            } else {
                Req::Cancel
            },
        );
    }

    /// Writes one request of the call into the outbox.
    fn send(&self, cx: &mut Ctx<'_>, slot: u32, req: Req) {
        let Some(call) = self.slots[slot as usize].call.as_ref() else {
            return;
        };
        // Method, in-dialog (remote target, route set), branch suffix, To tag, CSeq line.
        // ACK of a failure and CANCEL belong to the INVITE transaction (same branch,
        // §17.1.1.3, §9.1); ACK of a 2xx and BYE are transactions of their own (§13.2.2.4).
        let inv = INVITE_BRANCH[usize::from(call.attempt).min(MAX_HOPS - 1)];
        let (method, dialog, branch, to_tag, cseq): (&[u8], bool, &[u8], bool, &[u8]) = match req {
            Req::Invite => (b"INVITE ", false, inv, false, b"CSeq: 1 INVITE\r\n"),
            Req::Ack { failure: true } => (b"ACK ", false, inv, true, b"CSeq: 1 ACK\r\n"),
            Req::Ack { failure: false } => (b"ACK ", true, b"-a", true, b"CSeq: 1 ACK\r\n"),
            Req::Bye => (
                b"BYE ",
                true,
                BYE_BRANCH[usize::from(call.bye_attempt).min(MAX_HOPS - 1)],
                true,
                b"CSeq: 2 BYE\r\n",
            ),
            Req::Cancel => (b"CANCEL ", false, inv, false, b"CSeq: 1 CANCEL\r\n"),
        };
        let leg = &self.legs[call.leg as usize];
        let peer = self.peer(cx, call);
        let token = cx.token;
        let shared_clock = cx.shared_clock;
        let start = cx.out.begin();
        let out = cx.out.buf();
        out.extend_from_slice(method);
        if dialog && !call.target.is_empty() {
            out.extend_from_slice(&call.target);
        } else {
            self.request_uri(out, leg, call.user);
        }
        out.extend_from_slice(b" SIP/2.0\r\n");
        self.via(token, out, slot, call.leg, branch);
        if dialog {
            out.extend_from_slice(&call.routes);
        }
        out.extend_from_slice(b"Max-Forwards: 70\r\n");
        self.dialog_lines(token, out, slot, call, to_tag);
        out.extend_from_slice(cseq);
        if req == Req::Invite {
            out.extend_from_slice(b"Contact: <sip:");
            out.extend_from_slice(self.cfg.from_user.as_bytes());
            out.push(b'@');
            out.extend_from_slice(&leg.hostport);
            out.extend_from_slice(leg.uri_tp);
            out.extend_from_slice(
                b">\r\nSubject: Performance Test\r\nContent-Type: application/sdp\r\n",
            );
            if shared_clock {
                out.extend_from_slice(b"X-Holdline-Sent: ");
                num(out, call.stamp);
                out.extend_from_slice(b"\r\n");
            }
            build::body(out, &leg.sdp);
        } else {
            build::body(out, b"");
        }
        cx.out.end(start, peer);
    }

    fn start_nit(&mut self, cx: &mut Ctx<'_>, slot: u32, method: M) {
        let gen_ = self.slots[slot as usize].gen_;
        let Some(call) = self.slots[slot as usize].call.as_mut() else {
            return;
        };
        let now = cx.now;
        call.nit = Some(method);
        call.t_nit = now;
        call.e_interval = cx.t.t1;
        call.timer_e = (!cx.reliable).then(|| now + cx.t.t1);
        call.timer_f = Some(now + cx.t.timeout());
        let check = Some(now + cx.t.t1);
        cx.timers.arm(
            slot,
            gen_,
            [(call.timer_e, Kind::UacE), (check, Kind::UacCheck)],
        );
        cx.rec.msgs.row(MsgKey::Request(method)).sent += 1;
        self.send_nit(cx, slot, method);
    }

    fn free(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        if s.call.take().is_some() {
            s.gen_ = s.gen_.wrapping_add(1);
            self.free.push(slot);
            self.active -= 1;
        }
    }

    fn hang_up(&mut self, cx: &mut Ctx<'_>, slot: u32) {
        let now = cx.now;
        let n = self.hops.len();
        // A first hop held down (it failed another call) is not where the BYE goes: the
        // next one that is not (any first hop routes the dialog's Route set).
        let moved = self.slots[slot as usize]
            .call
            .as_ref()
            .and_then(|c| self.down.moved_from(usize::from(c.hop), now));
        let leg = moved.map(|h| self.leg_for(h, cx.reliable));
        let after = self.cfg.hops.failover_after.filter(|_| n > 1);
        let gen_ = self.slots[slot as usize].gen_;
        if let Some(call) = self.slots[slot as usize].call.as_mut() {
            call.state = State::Closing;
            call.hold_at = None;
            if let (Some(h), Some(leg)) = (moved, leg) {
                call.hop = h as u8;
                call.leg = leg;
            }
            call.bye_tried = 1 << call.hop;
            call.failover_at = after.map(|d| now + d);
            cx.timers
                .arm(slot, gen_, [(call.failover_at, Kind::UacFailover)]);
        }
        self.start_nit(cx, slot, M::Bye);
    }

    /// The common part of the INVITE's (`bye` false) and the BYE's failover: the call moves
    /// to the next hop its request has not tried (the failed one held down), on that hop's
    /// leg, with the attempt counted and the next failover check set. False, changing
    /// nothing, when every hop has been tried.
    fn move_to_next_hop(&mut self, cx: &Ctx<'_>, slot: u32, bye: bool) -> bool {
        let now = cx.now;
        let Some(call) = self.slots[slot as usize].call.as_ref() else {
            return false;
        };
        let tried = if bye { call.bye_tried } else { call.tried };
        let from = usize::from(call.hop);
        let Some(hop) = self
            .down
            .fail_over(from, tried, now, self.cfg.hops.hold_down)
        else {
            return false;
        };
        let leg = self.leg_for(hop, cx.reliable);
        let after = self.cfg.hops.failover_after;
        let Some(call) = self.slots[slot as usize].call.as_mut() else {
            return false;
        };
        call.hop = hop as u8;
        call.leg = leg;
        if bye {
            call.bye_tried |= 1 << hop;
            call.bye_attempt += 1;
        } else {
            call.tried |= 1 << hop;
            call.attempt += 1;
        }
        call.failover_at = after.map(|d| now + d);
        true
    }

    /// Client failover of a BYE that heard nothing from its first hop: sent again, as a new
    /// transaction, to the next hop not yet tried (one not held down if there is one); the
    /// silent hop is held down. Returns false when every hop has been tried.
    fn bye_fail_over(&mut self, cx: &mut Ctx<'_>, slot: u32) -> bool {
        if !self.move_to_next_hop(cx, slot, true) {
            return false;
        }
        let gen_ = self.slots[slot as usize].gen_;
        let Some(call) = self.slots[slot as usize].call.as_mut() else {
            return false;
        };
        cx.timers
            .arm(slot, gen_, [(call.failover_at, Kind::UacFailover)]);
        cx.rec.c.failovers += 1;
        self.start_nit(cx, slot, M::Bye);
        true
    }

    /// A response whose Call-ID is ours. Returns false when it matches no call.
    pub(crate) fn handle_response(
        &mut self,
        cx: &mut Ctx<'_>,
        msg: &Message<'_>,
        code: u16,
        from: Peer,
    ) -> bool {
        let Some((slot, gen_)) = msg.call_id().ok().and_then(|c| parse_id(cx.token, c)) else {
            return false;
        };
        let Ok(cseq) = msg.cseq() else { return false };
        let method = M::from_bytes(cseq.method.as_bytes());
        let key = MsgKey::Response(code, method);
        let live = self
            .slots
            .get(slot as usize)
            .is_some_and(|s| s.gen_ == gen_ && s.call.is_some());
        if !live {
            cx.rec.msgs.row(key).unexpected += 1;
            cx.rec.c.unexpected += 1;
            if method == M::Invite && code >= 200 {
                // A late final response: acknowledge it so the server stops retransmitting.
                cx.stateless_ack(msg, code, from);
            }
            return true;
        }
        if self.hops.len() > 1
            && matches!(method, M::Invite | M::Cancel)
            && self.is_from_abandoned_attempt(msg, slot)
        {
            // From a hop this call failed over from: not this transaction's.
            cx.rec.msgs.row(key).unexpected += 1;
            cx.rec.c.unexpected += 1;
            if method == M::Invite && code >= 200 {
                cx.stateless_ack(msg, code, from);
            }
            return true;
        }
        cx.rec.msgs.row(key).received += 1;
        match method {
            M::Invite => self.invite_response(cx, msg, slot, code),
            M::Bye | M::Cancel => self.nit_response(cx, slot, method, code),
            _ => {
                cx.rec.msgs.row(key).unexpected += 1;
                cx.rec.c.unexpected += 1;
            }
        }
        true
    }

    /// Whether a response to the INVITE transaction belongs to an earlier attempt of the call
    /// (its top Via's branch is not the current attempt's).
    fn is_from_abandoned_attempt(&self, msg: &Message<'_>, slot: u32) -> bool {
        let Some(call) = self.slots[slot as usize].call.as_ref() else {
            return false;
        };
        let want = INVITE_BRANCH[usize::from(call.attempt).min(MAX_HOPS - 1)];
        let branch = msg.top_via().ok().and_then(|v| v.branch());
        !branch.is_some_and(|b| b.ends_with(want))
    }

    /// Client failover (RFC 3263 §4.3): the call's INVITE goes, as a new transaction, to the
    /// next hop it has not tried (one not held down if there is one); the hop that failed is
    /// held down. Returns false, changing nothing, when every hop has been tried.
    fn fail_over(&mut self, cx: &mut Ctx<'_>, slot: u32) -> bool {
        let now = cx.now;
        if !self.move_to_next_hop(cx, slot, false) {
            return false;
        }
        let gen_ = self.slots[slot as usize].gen_;
        let Some(call) = self.slots[slot as usize].call.as_mut() else {
            return false;
        };
        call.state = State::Calling;
        call.a_interval = cx.t.t1;
        call.timer_a = (!cx.reliable).then(|| now + cx.t.t1);
        call.timer_b = Some(now + cx.t.timeout());
        call.to_tag.clear();
        let check = Some(now + cx.t.t1);
        cx.timers.arm(
            slot,
            gen_,
            [
                (call.timer_a, Kind::UacA),
                (check, Kind::UacCheck),
                (call.failover_at, Kind::UacFailover),
            ],
        );
        cx.rec.c.failovers += 1;
        cx.rec.msgs.row(MsgKey::Request(M::Invite)).sent += 1;
        self.send_invite(cx, slot);
        true
    }

    fn invite_response(&mut self, cx: &mut Ctx<'_>, msg: &Message<'_>, slot: u32, code: u16) {
        let hold = self.cfg.hold;
        let Some(call) = self.slots[slot as usize].call.as_mut() else {
            return;
        };
        let now = cx.now;
        let answered = matches!(call.state, State::Confirmed | State::Closing);
        match code {
            100..=199 => {
                if answered {
                    return;
                }
                if call.state == State::Calling {
                    call.state = State::Proceeding;
                }
                call.timer_a = None;
                call.failover_at = None;
                if code == 100 && !call.got_100 {
                    call.got_100 = true;
                    cx.rec.c.r100 += 1;
                }
                if code == 180 && !call.got_180 {
                    call.got_180 = true;
                    cx.rec.c.r180 += 1;
                    cx.rec
                        .lat
                        .psd
                        .record(now.saturating_duration_since(call.t_invite));
                }
                if call.cancel_pending {
                    call.cancel_pending = false;
                    call.state = State::Cancelling;
                    cx.rec.c.cancelled += 1;
                    self.start_nit(cx, slot, M::Cancel);
                }
            }
            200..=299 => {
                if answered {
                    // The 200 was retransmitted: our ACK was lost or late. ACK again.
                    cx.rec.msgs.row(MsgKey::Request(M::Ack)).retransmitted += 1;
                    cx.rec.c.retrans_other += 1;
                    self.send_ack(cx, slot, false);
                    return;
                }
                cx.rec.c.r200 += 1;
                cx.rec.record_answer_sent(call.t_invite, now);
                call.timer_a = None;
                call.timer_b = None;
                call.failover_at = None;
                call.cancel_at = None;
                call.cancel_pending = false;
                if let Some(tag) = msg.to().ok().and_then(|t| t.tag()) {
                    call.to_tag = tag.to_vec();
                }
                call.target = build::route_set(msg, &mut call.routes);
                call.state = State::Confirmed;
                // A CANCEL that crossed the 200 is moot now.
                if call.nit == Some(M::Cancel) {
                    call.nit = None;
                    call.timer_e = None;
                    call.timer_f = None;
                }
                cx.rec.msgs.row(MsgKey::Request(M::Ack)).sent += 1;
                if !cx.has_uas {
                    cx.rec.c.completed += 1;
                }
                let hold_for = match hold {
                    Hold::Fixed(d) => d,
                    Hold::Exp(mean) => {
                        Duration::from_nanos(cx.rng.exp(mean.as_nanos() as f64).min(1e18) as u64)
                    }
                };
                self.send_ack(cx, slot, false);
                if hold_for.is_zero() {
                    self.hang_up(cx, slot);
                } else if let Some(call) = self.slots[slot as usize].call.as_mut() {
                    let at = now + hold_for;
                    call.hold_at = Some(at);
                    let gen_ = self.slots[slot as usize].gen_;
                    cx.timers.schedule(Entry {
                        at,
                        slot,
                        gen_,
                        kind: Kind::UacHold,
                    });
                }
            }
            _ => {
                if answered {
                    return;
                }
                if call.to_tag.is_empty()
                    && let Some(tag) = msg.to().ok().and_then(|t| t.tag())
                {
                    call.to_tag = tag.to_vec();
                }
                if !(code == 487 && call.state == State::Cancelling) {
                    cx.rec.record_failure(code);
                }
                if code == 503
                    && call.state != State::Cancelling
                    && self.cfg.hops.failover_after.is_some()
                    && self.hops.len() > 1
                {
                    // Acknowledge the 503 (its own transaction's branch), then try the next
                    // hop; the call fails only when every hop has been tried.
                    cx.rec.msgs.row(MsgKey::Request(M::Ack)).sent += 1;
                    self.send_ack(cx, slot, true);
                    if self.fail_over(cx, slot) {
                        return;
                    }
                    cx.rec.c.calls_failed += 1;
                    self.free(slot);
                    return;
                }
                cx.rec.c.calls_failed += 1;
                cx.rec.msgs.row(MsgKey::Request(M::Ack)).sent += 1;
                self.send_ack(cx, slot, true);
                self.free(slot);
            }
        }
    }

    fn nit_response(&mut self, cx: &mut Ctx<'_>, slot: u32, method: M, code: u16) {
        let Some(call) = self.slots[slot as usize].call.as_mut() else {
            return;
        };
        if call.nit == Some(M::Bye) && method == M::Bye {
            // Any answer: the hop is alive.
            call.failover_at = None;
        }
        if call.nit != Some(method) || code < 200 {
            return;
        }
        call.nit = None;
        call.timer_e = None;
        call.timer_f = None;
        if method == M::Bye {
            cx.rec
                .lat
                .bye
                .record(cx.now.saturating_duration_since(call.t_nit));
            if code < 300 {
                cx.rec.c.calls_ok += 1;
            } else {
                cx.rec.c.calls_failed += 1;
            }
            self.free(slot);
        }
    }

    pub(crate) fn fire(&mut self, cx: &mut Ctx<'_>, e: Entry) {
        let Some(s) = self.slots.get_mut(e.slot as usize) else {
            return;
        };
        if s.gen_ != e.gen_ {
            return;
        }
        let Some(call) = s.call.as_mut() else { return };
        let now = cx.now;
        let gen_ = s.gen_;
        match e.kind {
            Kind::UacA if call.timer_a == Some(e.at) => {
                call.a_interval *= 2;
                let at = now + call.a_interval;
                call.timer_a = Some(at);
                cx.timers.schedule(Entry {
                    at,
                    slot: e.slot,
                    gen_,
                    kind: Kind::UacA,
                });
                cx.rec.c.retrans_invite += 1;
                cx.rec.msgs.row(MsgKey::Request(M::Invite)).retransmitted += 1;
                self.send_invite(cx, e.slot);
            }
            Kind::UacB if call.timer_b == Some(e.at) => {
                cx.rec.c.timeouts += 1;
                cx.rec.c.calls_failed += 1;
                cx.rec.msgs.row(MsgKey::Request(M::Invite)).timeouts += 1;
                self.free(e.slot);
            }
            Kind::UacCancel if call.cancel_at == Some(e.at) => {
                call.cancel_at = None;
                match call.state {
                    // §9.1: no CANCEL before a provisional response; send it on the first.
                    State::Calling => call.cancel_pending = true,
                    State::Proceeding => {
                        call.state = State::Cancelling;
                        cx.rec.c.cancelled += 1;
                        self.start_nit(cx, e.slot, M::Cancel);
                    }
                    _ => {}
                }
            }
            Kind::UacHold if call.hold_at == Some(e.at) => self.hang_up(cx, e.slot),
            Kind::UacFailover if call.failover_at == Some(e.at) => {
                call.failover_at = None;
                if call.state == State::Calling {
                    // Not even a 100 from this hop: try the next one (the call keeps its
                    // Timer B if none is left).
                    self.fail_over(cx, e.slot);
                } else if call.state == State::Closing && call.nit == Some(M::Bye) {
                    // The BYE heard nothing: the same (its Timer F runs on if none is left).
                    self.bye_fail_over(cx, e.slot);
                }
            }
            Kind::UacCheck => {
                cx.timers.arm(
                    e.slot,
                    gen_,
                    [(call.timer_b, Kind::UacB), (call.timer_f, Kind::UacF)],
                );
            }
            Kind::UacE if call.timer_e == Some(e.at) => {
                call.e_interval = (call.e_interval * 2).min(cx.t.t2);
                let at = now + call.e_interval;
                call.timer_e = Some(at);
                cx.timers.schedule(Entry {
                    at,
                    slot: e.slot,
                    gen_,
                    kind: Kind::UacE,
                });
                let Some(m) = call.nit else { return };
                if m == M::Bye {
                    cx.rec.c.retrans_bye += 1;
                } else {
                    cx.rec.c.retrans_other += 1;
                }
                cx.rec.msgs.row(MsgKey::Request(m)).retransmitted += 1;
                self.send_nit(cx, e.slot, m);
            }
            Kind::UacF if call.timer_f == Some(e.at) => {
                let Some(m) = call.nit.take() else { return };
                call.timer_e = None;
                call.timer_f = None;
                cx.rec.c.timeouts += 1;
                cx.rec.msgs.row(MsgKey::Request(m)).timeouts += 1;
                if m == M::Bye {
                    cx.rec.c.calls_failed += 1;
                    self.free(e.slot);
                }
            }
            _ => {}
        }
    }

    /// Hard stop: every call still in progress ends now; those not yet answered count as
    /// failed.
    pub(crate) fn abort(&mut self, cx: &mut Ctx<'_>) {
        for i in 0..self.slots.len() {
            if let Some(call) = self.slots[i].call.as_ref() {
                if matches!(
                    call.state,
                    State::Calling | State::Proceeding | State::Cancelling
                ) {
                    cx.rec.c.calls_failed += 1;
                }
                self.free(i as u32);
            }
        }
        self.arrivals.stop();
    }
}
