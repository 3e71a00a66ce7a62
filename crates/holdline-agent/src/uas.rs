//! The answering side: 100/180/final per configured delays and mix, 2xx retransmission until
//! the ACK (RFC 3261 §13.3.1.4, on every transport), non-2xx retransmission over UDP (Timer
//! G), BYE and CANCEL handling.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;

use foldhash::fast::FixedState;
use holdline_base::{Duration, Instant, Peer};
use holdline_metrics::{Method as M, MsgKey};
use holdline_sip::{HeaderName, Message};

use crate::build::{self, num};
use crate::timers::{Entry, Kind};
use crate::{Ctx, UasConfig};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// INVITE received; 180 not sent yet.
    Trying,
    /// 180 sent; final response not yet.
    Ringing,
    /// Final response sent; waiting for the ACK.
    Answered,
    /// ACK of a 2xx received; waiting for BYE.
    Confirmed,
}

#[derive(Debug)]
struct Call {
    call_id: Box<[u8]>,
    hash: u64,
    peer: Peer,
    state: State,
    status: u16,
    cseq: u32,
    /// Via, From, Call-ID, CSeq and Record-Route lines of the INVITE.
    common: Vec<u8>,
    /// `To: ...;tag=...\r\n`.
    to: Vec<u8>,
    /// The last response sent to the INVITE.
    last: Vec<u8>,
    interval: Duration,
    timer_g: Option<Instant>,
    timer_h: Option<Instant>,
    ring_at: Option<Instant>,
    answer_at: Option<Instant>,
    sent_stamp: Option<u64>,
}

#[derive(Debug, Default)]
struct Slot {
    gen_: u32,
    call: Option<Call>,
}

/// The UAS role.
#[derive(Debug)]
pub(crate) struct Uas {
    cfg: UasConfig,
    contact: Vec<u8>,
    /// The Contact line of a call that arrived over leg `i` (a connection this agent opened,
    /// e.g. to register over it, as a phone does): that leg's address, so that the dialog's
    /// requests come back over the same connection.
    leg_contacts: Vec<Vec<u8>>,
    sdp: Vec<u8>,
    /// Call-ID hash → slot (the slot's Call-ID is compared on lookup).
    map: HashMap<u64, u32, FixedState>,
    hasher: FixedState,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Calls in progress.
    pub(crate) active: u64,
    /// Hashes of the Call-IDs of calls that ended over UDP, to answer a retransmitted BYE
    /// (Timer J) without keeping the calls: `recent[0]` is the generation started at
    /// `recent_since`, `recent[1]` the one before. Generations rotate every 64*T1, so an ended
    /// call is remembered between 64*T1 and 128*T1; a rotated-out set is cleared and reused,
    /// so after the first rotation no set grows (no long rehash pauses).
    recent: [HashSet<u64, FixedState>; 2],
    recent_since: Instant,
    /// Calls finished (BYE answered, rejected and acknowledged, or timed out).
    pub(crate) finished: u64,
    mix_total: f64,
}

impl Uas {
    pub(crate) fn new(
        cfg: UasConfig,
        leg: &build::LegText,
        user: &str,
        legs: &[build::LegText],
    ) -> Self {
        let line = |l: &build::LegText| {
            let mut contact = b"Contact: <sip:".to_vec();
            contact.extend_from_slice(user.as_bytes());
            contact.push(b'@');
            contact.extend_from_slice(&l.hostport);
            contact.extend_from_slice(l.uri_tp);
            contact.extend_from_slice(b">\r\n");
            contact
        };
        let mix_total = cfg.mix.iter().map(|(_, w)| w.max(0.0)).sum();
        Self {
            cfg,
            contact: line(leg),
            leg_contacts: legs.iter().map(line).collect(),
            sdp: leg.sdp.clone(),
            map: HashMap::with_hasher(FixedState::default()),
            hasher: FixedState::default(),
            slots: Vec::new(),
            free: Vec::new(),
            active: 0,
            recent: [
                HashSet::with_hasher(FixedState::default()),
                HashSet::with_hasher(FixedState::default()),
            ],
            recent_since: Instant::ZERO,
            finished: 0,
            mix_total,
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.cfg.calls.is_some_and(|n| self.finished >= n) && self.active == 0
    }

    fn pick_status(&self, cx: &mut Ctx<'_>) -> u16 {
        if self.cfg.mix.len() <= 1 || self.mix_total <= 0.0 {
            return self.cfg.mix.first().map_or(200, |m| m.0);
        }
        let mut x = cx.rng.next_f64() * self.mix_total;
        for (code, w) in &self.cfg.mix {
            x -= w.max(0.0);
            if x < 0.0 {
                return *code;
            }
        }
        self.cfg.mix.last().map_or(200, |m| m.0)
    }

    fn lookup(&self, call_id: &[u8]) -> Option<u32> {
        let slot = *self.map.get(&self.hasher.hash_one(call_id))?;
        let call = self.slots.get(slot as usize)?.call.as_ref()?;
        (&*call.call_id == call_id).then_some(slot)
    }

    /// Writes a response to the INVITE of `slot` into the outbox and keeps a copy.
    fn respond(&mut self, cx: &mut Ctx<'_>, slot: u32, code: u16) {
        let Some(call) = self.slots[slot as usize].call.as_mut() else {
            return;
        };
        let mut msg = std::mem::take(&mut call.last);
        msg.clear();
        msg.reserve(call.common.len() + call.to.len() + self.contact.len() + self.sdp.len() + 128);
        build::status_line(&mut msg, code);
        msg.extend_from_slice(&call.common);
        // The To tag goes on every response, 100 included (§8.2.6.2 allows it there).
        msg.extend_from_slice(&call.to);
        if (180..300).contains(&code) {
            let over_leg = call
                .peer
                .conn
                .and_then(|c| self.leg_contacts.get(usize::try_from(c.0).ok()?));
            msg.extend_from_slice(over_leg.unwrap_or(&self.contact));
        }
        if (200..300).contains(&code) {
            msg.extend_from_slice(b"Content-Type: application/sdp\r\n");
            build::body(&mut msg, &self.sdp);
        } else {
            build::body(&mut msg, b"");
        }
        cx.out.push(call.peer, &msg);
        call.status = code;
        call.last = msg;
        cx.rec.msgs.row(MsgKey::Response(code, M::Invite)).sent += 1;
    }

    fn schedule(cx: &mut Ctx<'_>, slot: u32, gen_: u32, at: Option<Instant>, kind: Kind) {
        if let Some(at) = at {
            cx.timers.schedule(Entry {
                at,
                slot,
                gen_,
                kind,
            });
        }
    }

    /// Sends the final response and arms its retransmission and the ACK wait.
    fn answer(&mut self, cx: &mut Ctx<'_>, slot: u32) {
        let code = self.pick_status(cx);
        self.respond(cx, slot, code);
        let gen_ = self.slots[slot as usize].gen_;
        let Some(call) = self.slots[slot as usize].call.as_mut() else {
            return;
        };
        call.state = State::Answered;
        call.answer_at = None;
        call.interval = cx.t.t1;
        // 2xx: retransmitted on every transport until the ACK (§13.3.1.4). Non-2xx: only over
        // unreliable transports (Timer G).
        call.timer_g = (code < 300 || !cx.reliable).then(|| cx.now + cx.t.t1);
        call.timer_h = Some(cx.now + cx.t.timeout());
        if code >= 300 {
            cx.rec.c.uas_rejected += 1;
        }
        Self::schedule(cx, slot, gen_, call.timer_g, Kind::UasG);
        Self::schedule(cx, slot, gen_, Some(cx.now + cx.t.t1), Kind::UasCheck);
    }

    fn ring(&mut self, cx: &mut Ctx<'_>, slot: u32) {
        self.respond(cx, slot, 180);
        let gen_ = self.slots[slot as usize].gen_;
        let Some(call) = self.slots[slot as usize].call.as_mut() else {
            return;
        };
        call.state = State::Ringing;
        call.ring_at = None;
        if self.cfg.answer_delay.is_zero() {
            self.answer(cx, slot);
        } else {
            let at = cx.now + self.cfg.answer_delay;
            call.answer_at = Some(at);
            Self::schedule(cx, slot, gen_, Some(at), Kind::UasAnswer);
        }
    }

    /// Ends the call: it stops counting as active and is forgotten; over UDP its Call-ID is
    /// remembered for 64*T1 to answer a retransmitted BYE.
    fn finish(&mut self, cx: &mut Ctx<'_>, slot: u32) {
        let Some(call) = self.slots[slot as usize].call.as_ref() else {
            return;
        };
        self.active -= 1;
        self.finished += 1;
        if !cx.reliable {
            self.recent[0].insert(call.hash);
        }
        self.remove(slot);
    }

    fn forget_old(&mut self, cx: &Ctx<'_>) {
        if cx.now.saturating_duration_since(self.recent_since) >= cx.t.timeout() {
            self.recent[1].clear();
            self.recent.swap(0, 1);
            self.recent_since = cx.now;
        }
    }

    fn is_recent(&self, call_id: &[u8]) -> bool {
        if self.recent.iter().all(HashSet::is_empty) {
            return false;
        }
        let h = self.hasher.hash_one(call_id);
        self.recent.iter().any(|set| set.contains(&h))
    }

    fn remove(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        if let Some(call) = s.call.take() {
            if self.map.get(&call.hash) == Some(&slot) {
                self.map.remove(&call.hash);
            }
            s.gen_ = s.gen_.wrapping_add(1);
            self.free.push(slot);
        }
    }

    /// A request (not ACK) answered statelessly from its own headers.
    fn reply(cx: &mut Ctx<'_>, msg: &Message<'_>, from: Peer, code: u16, method: M) {
        let start = cx.out.begin();
        let out = cx.out.buf();
        // An in-dialog BYE's To already carries the tag: skip parsing To to look for it.
        let tag: Option<&[u8]> = if method == M::Bye { None } else { Some(b"hl") };
        holdline_sip::build_response(msg, code, build::reason(code), tag, &[], b"", out);
        cx.out.end(start, from);
        cx.rec.msgs.row(MsgKey::Response(code, method)).sent += 1;
    }

    pub(crate) fn handle_request(&mut self, cx: &mut Ctx<'_>, msg: &Message<'_>, from: Peer) {
        let Some(method) = msg.method() else { return };
        let m = M::from_bytes(method.as_bytes());
        let Ok(call_id) = msg.call_id() else {
            cx.rec.c.parse_errors += 1;
            return;
        };
        let key = MsgKey::Request(m);
        self.forget_old(cx);
        let slot = self.lookup(call_id);
        if slot.is_none() && self.is_recent(call_id) {
            // A late retransmission of a call that ended: answer a BYE again, absorb the rest.
            cx.rec.msgs.row(key).received += 1;
            if m == M::Bye {
                cx.rec.c.retrans_other += 1;
                cx.rec.msgs.row(MsgKey::Response(200, M::Bye)).retransmitted += 1;
                let start = cx.out.begin();
                holdline_sip::build_response(msg, 200, "OK", None, &[], b"", cx.out.buf());
                cx.out.end(start, from);
            }
            return;
        }
        match (m, slot) {
            (M::Invite, None) => {
                cx.rec.msgs.row(key).received += 1;
                self.new_invite(cx, msg, from, call_id);
            }
            (M::Invite, Some(slot)) => {
                cx.rec.msgs.row(key).received += 1;
                let Some(call) = self.slots[slot as usize].call.as_ref() else {
                    return;
                };
                let cseq = msg.cseq().map_or(0, |c| c.seq);
                if cseq == call.cseq && !call.last.is_empty() {
                    // A retransmission: repeat the last response.
                    cx.out.push(call.peer, &call.last);
                    cx.rec.c.retrans_other += 1;
                    cx.rec
                        .msgs
                        .row(MsgKey::Response(call.status, M::Invite))
                        .retransmitted += 1;
                } else if cseq != call.cseq {
                    // A re-INVITE: accept it (no media here).
                    Self::reply(cx, msg, from, 200, M::Invite);
                }
            }
            (M::Ack, Some(slot)) => {
                cx.rec.msgs.row(key).received += 1;
                self.ack(cx, msg, slot);
            }
            (M::Ack, None) => {
                cx.rec.msgs.row(key).unexpected += 1;
                cx.rec.c.unexpected += 1;
            }
            (M::Bye, Some(slot)) => {
                cx.rec.msgs.row(key).received += 1;
                Self::reply(cx, msg, from, 200, M::Bye);
                self.finish(cx, slot);
            }
            (M::Cancel, Some(slot)) => {
                cx.rec.msgs.row(key).received += 1;
                Self::reply(cx, msg, from, 200, M::Cancel);
                let pending = self.slots[slot as usize]
                    .call
                    .as_ref()
                    .is_some_and(|c| matches!(c.state, State::Trying | State::Ringing));
                if pending {
                    self.respond(cx, slot, 487);
                    let gen_ = self.slots[slot as usize].gen_;
                    if let Some(call) = self.slots[slot as usize].call.as_mut() {
                        call.state = State::Answered;
                        call.ring_at = None;
                        call.answer_at = None;
                        call.interval = cx.t.t1;
                        call.timer_g = (!cx.reliable).then(|| cx.now + cx.t.t1);
                        call.timer_h = Some(cx.now + cx.t.timeout());
                        Self::schedule(cx, slot, gen_, call.timer_g, Kind::UasG);
                        Self::schedule(cx, slot, gen_, Some(cx.now + cx.t.t1), Kind::UasCheck);
                    }
                }
            }
            (M::Bye | M::Cancel, None) => {
                cx.rec.msgs.row(key).unexpected += 1;
                cx.rec.c.unexpected += 1;
                Self::reply(cx, msg, from, 481, m);
            }
            (M::Other, _) if method.as_bytes() == b"OPTIONS" => {
                cx.rec.msgs.row(key).received += 1;
                Self::reply(cx, msg, from, 200, m);
            }
            _ => {
                cx.rec.msgs.row(key).unexpected += 1;
                cx.rec.c.unexpected += 1;
                Self::reply(cx, msg, from, 405, m);
            }
        }
    }

    fn new_invite(&mut self, cx: &mut Ctx<'_>, msg: &Message<'_>, from: Peer, call_id: &[u8]) {
        if msg.to().ok().and_then(|t| t.tag()).is_some() {
            // An in-dialog INVITE for a dialog we do not know.
            Self::reply(cx, msg, from, 481, M::Invite);
            return;
        }
        cx.rec.c.uas_invites += 1;
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(Slot::default());
                (self.slots.len() - 1) as u32
            }
        };
        let gen_ = self.slots[slot as usize].gen_;
        let mut common = Vec::with_capacity(512);
        for h in msg.headers() {
            let name: &[u8] = match h.kind {
                HeaderName::Via => b"Via",
                HeaderName::From => b"From",
                HeaderName::CallId => b"Call-ID",
                HeaderName::CSeq => b"CSeq",
                HeaderName::RecordRoute => b"Record-Route",
                _ => continue,
            };
            common.extend_from_slice(name);
            common.extend_from_slice(b": ");
            common.extend_from_slice(msg.value(h));
            common.extend_from_slice(b"\r\n");
        }
        let mut to = b"To: ".to_vec();
        to.extend_from_slice(msg.first_value(HeaderName::To).unwrap_or_default());
        to.extend_from_slice(b";tag=");
        num(&mut to, u64::from(slot));
        to.push(b'x');
        num(&mut to, gen_);
        to.extend_from_slice(b"\r\n");
        let sent_stamp = if cx.shared_clock {
            msg.headers_named(b"X-Holdline-Sent")
                .next()
                .and_then(|h| std::str::from_utf8(msg.value(h)).ok())
                .and_then(|v| v.trim().parse().ok())
        } else {
            None
        };
        let call = Call {
            call_id: call_id.into(),
            hash: self.hasher.hash_one(call_id),
            peer: from,
            state: State::Trying,
            status: 0,
            cseq: msg.cseq().map_or(0, |c| c.seq),
            common,
            to,
            last: Vec::new(),
            interval: cx.t.t1,
            timer_g: None,
            timer_h: None,
            ring_at: None,
            answer_at: None,
            sent_stamp,
        };
        self.map.insert(call.hash, slot);
        self.slots[slot as usize].call = Some(call);
        self.active += 1;
        if self.cfg.trying {
            self.respond(cx, slot, 100);
        }
        if self.cfg.ring_delay.is_zero() {
            self.ring(cx, slot);
        } else {
            let at = cx.now + self.cfg.ring_delay;
            if let Some(call) = self.slots[slot as usize].call.as_mut() {
                call.ring_at = Some(at);
            }
            Self::schedule(cx, slot, gen_, Some(at), Kind::UasRing);
        }
    }

    fn ack(&mut self, cx: &mut Ctx<'_>, msg: &Message<'_>, slot: u32) {
        let Some(call) = self.slots[slot as usize].call.as_mut() else {
            return;
        };
        if call.state != State::Answered {
            // A repeated ACK (our retransmitted 200 crossed it).
            return;
        }
        let _ = msg;
        call.timer_g = None;
        call.timer_h = None;
        if call.status < 300 {
            call.state = State::Confirmed;
            // Nothing is retransmitted any more: free the response copies.
            call.last = Vec::new();
            call.common = Vec::new();
            call.to = Vec::new();
            cx.rec.c.completed += 1;
            if let Some(stamp) = call.sent_stamp {
                cx.rec.lat.setup.record(Duration::from_nanos(
                    cx.now.as_nanos().saturating_sub(stamp),
                ));
            }
        } else {
            self.finish(cx, slot);
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
        match e.kind {
            Kind::UasRing if call.ring_at == Some(e.at) => self.ring(cx, e.slot),
            Kind::UasAnswer if call.answer_at == Some(e.at) => self.answer(cx, e.slot),
            Kind::UasG if call.timer_g == Some(e.at) => {
                call.interval = (call.interval * 2).min(cx.t.t2);
                let at = cx.now + call.interval;
                call.timer_g = Some(at);
                cx.timers.schedule(Entry {
                    at,
                    slot: e.slot,
                    gen_: e.gen_,
                    kind: Kind::UasG,
                });
                cx.out.push(call.peer, &call.last);
                if call.status < 300 {
                    cx.rec.c.retrans_200 += 1;
                } else {
                    cx.rec.c.retrans_other += 1;
                }
                cx.rec
                    .msgs
                    .row(MsgKey::Response(call.status, M::Invite))
                    .retransmitted += 1;
            }
            Kind::UasH if call.timer_h == Some(e.at) => {
                // No ACK within 64*T1 (§13.3.1.4 / Timer H).
                cx.rec.c.timeouts += 1;
                cx.rec
                    .msgs
                    .row(MsgKey::Response(call.status, M::Invite))
                    .timeouts += 1;
                self.finish(cx, e.slot);
            }
            Kind::UasCheck => {
                if let Some(at) = call.timer_h {
                    cx.timers.schedule(Entry {
                        at,
                        slot: e.slot,
                        gen_: e.gen_,
                        kind: Kind::UasH,
                    });
                }
            }
            _ => {}
        }
    }

    /// Hard stop.
    pub(crate) fn abort(&mut self) {
        for i in 0..self.slots.len() {
            self.remove(i as u32);
        }
        self.active = 0;
    }
}
