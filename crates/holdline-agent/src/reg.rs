//! REGISTER load: N users registered at a rate, refreshed at an interval, retried once with
//! Min-Expires on 423, retried after a 5xx's Retry-After (when honoured) and after a timeout
//! (RFC 5626's backoff, when on), non-INVITE transaction timers E/F. User `u` registers
//! over leg `u mod legs` (its own connection or source port when there are as many legs as
//! users: a phone), with that leg's address as Contact unless one is configured. With
//! several registrars (`RegisterConfig::hops`), a REGISTER that hears nothing for
//! `failover_after`, or is answered `503`, goes to the user's next registrar as a new
//! transaction (RFC 3263 §4.3), and the user stays there.

use std::net::SocketAddr;

use holdline_base::{ConnId, Duration, Instant, Peer};
use holdline_metrics::{Method as M, MsgKey};
use holdline_sip::{HeaderName, Message};

use crate::build::{self, LegText, num};
use crate::config::{MAX_HOPS, MAX_REGISTER_RETRIES, MAX_REGISTER_RETRY_WAIT};
use crate::holddown::HoldDowns;
use crate::timers::{Entry, Kind};
use crate::{Arrivals, Ctx, RegisterConfig};

#[derive(Debug, Default)]
struct User {
    cseq: u32,
    expires: u32,
    pending: bool,
    t_sent: Instant,
    interval: Duration,
    timer_e: Option<Instant>,
    timer_f: Option<Instant>,
    refresh_at: Option<Instant>,
    retried_423: bool,
    /// A 2xx answered one of this user's REGISTERs.
    acked: bool,
    /// When this user's first REGISTER left (the start of its time to get registered).
    first_sent: Option<Instant>,
    /// The REGISTER scheduled again after a Retry-After or a timeout, and how many times
    /// that happened.
    retry_at: Option<Instant>,
    retries: u32,
    /// Consecutive timeouts (the exponent of the backoff after a timeout).
    timeouts: u32,
    /// The registrar this user sends to (index into `Reg::hops`).
    hop: u8,
    /// The registrars the REGISTER in progress was sent to, one bit each.
    tried: u8,
    /// When the REGISTER in progress fails over if its registrar has not answered at all.
    failover_at: Option<Instant>,
}

/// The registration role.
#[derive(Debug)]
pub(crate) struct Reg {
    cfg: RegisterConfig,
    /// The legs; user `u` sends over `legs[u % legs.len()]`.
    legs: Vec<LegText>,
    /// `@host:port;transport=..>\r\n`: the Contact line after the user, one per leg (each
    /// leg's own address), or a single one for every user (a configured contact).
    contacts: Vec<Vec<u8>>,
    pub(crate) arrivals: Arrivals,
    users: Vec<User>,
    /// Transactions in progress plus refreshes scheduled.
    pub(crate) outstanding: u64,
    end: Option<Instant>,
    /// The registrar and then the alternates.
    hops: Vec<SocketAddr>,
    /// Until when each registrar is avoided by users starting a registration, after it failed.
    down: HoldDowns,
}

const PREFIX: &[u8] = b"-r";

impl Reg {
    /// `legs` must not be empty; `contact`: the one Contact every user registers, else each
    /// registers its leg's address.
    pub(crate) fn new(
        cfg: RegisterConfig,
        legs: Vec<LegText>,
        arrivals: Arrivals,
        contact: Option<&LegText>,
    ) -> Self {
        // What follows the user in the Contact line.
        let tail = |l: &LegText| {
            let mut c = b"@".to_vec();
            c.extend_from_slice(&l.hostport);
            c.extend_from_slice(l.uri_tp);
            c.extend_from_slice(b">\r\n");
            c
        };
        let contacts = match contact {
            Some(c) => vec![tail(c)],
            None => legs.iter().map(tail).collect(),
        };
        let end = cfg.duration.map(|d| arrivals.start() + d);
        let mut hops = vec![cfg.registrar];
        hops.extend(cfg.hops.alternates.iter().copied());
        hops.truncate(MAX_HOPS);
        Self {
            down: HoldDowns::new(hops.len()),
            hops,
            cfg,
            legs,
            contacts,
            arrivals,
            users: Vec::new(),
            outstanding: 0,
            end,
        }
    }

    /// Until when users re-register (`refresh` on: the end of `duration`, or never);
    /// `None` without refreshes.
    pub(crate) fn refresh_end(&self) -> Option<Instant> {
        self.cfg.refresh.map(|_| self.end.unwrap_or(Instant::MAX))
    }

    pub(crate) fn is_done(&self) -> bool {
        self.arrivals.is_done() && self.outstanding == 0
    }

    /// The users (by number) a 2xx answered at least once.
    pub(crate) fn acked(&self) -> impl Iterator<Item = u64> + '_ {
        self.users
            .iter()
            .enumerate()
            .filter(|(_, u)| u.acked)
            .map(|(i, _)| i as u64)
    }

    /// The leg of `user`.
    fn leg_of(&self, user: u32) -> usize {
        user as usize % self.legs.len().max(1)
    }

    pub(crate) fn poll_arrivals(&mut self, cx: &mut Ctx<'_>) {
        while self.arrivals.poll(cx.now, cx.rng).is_some() {
            let user = self.users.len() as u32;
            let hop = self.first_hop(cx.now, user);
            self.users.push(User {
                expires: self.cfg.expires,
                hop,
                ..User::default()
            });
            self.outstanding += 1;
            self.send(cx, user, false);
            if self.arrivals.is_done() {
                cx.rec.mark_load_end(cx.now);
            }
        }
    }

    /// The registrar a new user starts at: `u mod n` with `spread`, else the first; the next
    /// one not held down if that one is.
    fn first_hop(&self, now: Instant, user: u32) -> u8 {
        let n = self.hops.len();
        let start = if self.cfg.hops.spread {
            user as usize % n
        } else {
            0
        };
        (0..n)
            .map(|k| (start + k) % n)
            .find(|&h| self.down.is_up(h, now))
            .unwrap_or(start) as u8
    }

    /// Sends the user's REGISTER: a new transaction (a new CSeq, so a new branch) unless
    /// `retrans`. A new transaction that is not a failover starts a new set of tried
    /// registrars; one whose registrar is held down moves to the next that is not.
    fn send(&mut self, cx: &mut Ctx<'_>, user: u32, retrans: bool) {
        self.send_to(cx, user, retrans, false);
    }

    fn send_to(&mut self, cx: &mut Ctx<'_>, user: u32, retrans: bool, failover: bool) {
        let li = self.leg_of(user);
        let now = cx.now;
        let n = self.hops.len();
        let moved = (!retrans && !failover && n > 1)
            .then(|| {
                let u = self.users.get(user as usize)?;
                self.down.moved_from(usize::from(u.hop), now)
            })
            .flatten();
        let failover_after = self.cfg.hops.failover_after.filter(|_| n > 1);
        let Some(u) = self.users.get_mut(user as usize) else {
            return;
        };
        if let Some(h) = moved {
            u.hop = h as u8;
        }
        let peer = Peer {
            addr: self.hops[usize::from(u.hop).min(n - 1)],
            transport: cx.transport,
            conn: Some(ConnId(li as u64)),
        };
        if !retrans {
            if !failover {
                u.tried = 0;
            }
            u.tried |= 1 << u.hop;
            u.failover_at = failover_after.map(|d| now + d);
            u.cseq += 1;
            u.pending = true;
            u.t_sent = cx.now;
            u.interval = cx.t.t1;
            u.timer_e = (!cx.reliable).then(|| cx.now + cx.t.t1);
            u.timer_f = Some(cx.now + cx.t.timeout());
            u.first_sent.get_or_insert(cx.now);
            cx.timers.arm(
                user,
                u.cseq,
                [
                    (u.timer_e, Kind::RegE),
                    (u.timer_f, Kind::RegF),
                    (u.failover_at, Kind::RegFailover),
                ],
            );
            cx.rec.c.reg_sent += 1;
            cx.rec.msgs.row(MsgKey::Request(M::Register)).sent += 1;
        }
        let (cseq, expires) = (u.cseq, u.expires);
        let start = cx.out.begin();
        let out = cx.out.buf();
        let mut name = Vec::with_capacity(32);
        self.cfg.users.write_user(u64::from(user), &mut name);
        let domain = self.cfg.users.domain().as_bytes();
        out.extend_from_slice(b"REGISTER sip:");
        out.extend_from_slice(domain);
        out.extend_from_slice(b" SIP/2.0\r\n");
        let (leg, contact) = (
            &self.legs[li],
            &self.contacts[li.min(self.contacts.len() - 1)],
        );
        out.extend_from_slice(&leg.via_prefix);
        out.extend_from_slice(cx.token);
        out.extend_from_slice(PREFIX);
        num(out, user);
        out.push(b'-');
        num(out, cseq);
        out.extend_from_slice(b";rport\r\nMax-Forwards: 70\r\nFrom: <sip:");
        out.extend_from_slice(&name);
        out.push(b'@');
        out.extend_from_slice(domain);
        out.extend_from_slice(b">;tag=");
        out.extend_from_slice(cx.token);
        num(out, user);
        out.extend_from_slice(b"\r\nTo: <sip:");
        out.extend_from_slice(&name);
        out.push(b'@');
        out.extend_from_slice(domain);
        out.extend_from_slice(b">\r\nCall-ID: ");
        out.extend_from_slice(cx.token);
        out.extend_from_slice(PREFIX);
        num(out, user);
        out.push(b'@');
        out.extend_from_slice(&leg.hostport);
        out.extend_from_slice(b"\r\nCSeq: ");
        num(out, cseq);
        out.extend_from_slice(b" REGISTER\r\n");
        out.extend_from_slice(b"Contact: <sip:");
        out.extend_from_slice(&name);
        out.extend_from_slice(contact);
        out.extend_from_slice(b"Expires: ");
        num(out, expires);
        out.extend_from_slice(b"\r\n");
        build::body(out, b"");
        cx.out.end(start, peer);
    }

    /// A response whose Call-ID is `{token}-r{user}@...`. Returns false if it is not ours.
    pub(crate) fn handle_response(
        &mut self,
        cx: &mut Ctx<'_>,
        msg: &Message<'_>,
        code: u16,
    ) -> bool {
        let Some(user) = msg.call_id().ok().and_then(|c| {
            let rest = c.strip_prefix(cx.token)?.strip_prefix(PREFIX)?;
            let end = rest.iter().position(|&b| b == b'@')?;
            std::str::from_utf8(&rest[..end]).ok()?.parse::<u32>().ok()
        }) else {
            return false;
        };
        let key = MsgKey::Response(code, M::Register);
        let cseq = msg.cseq().map_or(0, |c| c.seq);
        let Some(u) = self
            .users
            .get_mut(user as usize)
            .filter(|u| u.pending && u.cseq == cseq)
        else {
            cx.rec.msgs.row(key).unexpected += 1;
            cx.rec.c.unexpected += 1;
            return true;
        };
        cx.rec.msgs.row(key).received += 1;
        // Any answer: this registrar is alive.
        u.failover_at = None;
        if code < 200 {
            return true;
        }
        cx.rec
            .record_register(code, cx.now.saturating_duration_since(u.t_sent));
        // A 503 before its Retry-After: a user with a registrar left to try goes there now.
        if code == 503 && self.fail_over(cx, user) {
            return true;
        }
        self.finish(cx, msg, user, code);
        true
    }

    /// The final response `code` ended the user's REGISTER transaction: retry, refresh or
    /// done.
    fn finish(&mut self, cx: &mut Ctx<'_>, msg: &Message<'_>, user: u32, code: u16) {
        let end = self.end;
        let refresh = self.cfg.refresh;
        let Some(u) = self.users.get_mut(user as usize) else {
            return;
        };
        u.pending = false;
        u.timer_e = None;
        u.timer_f = None;
        if (200..300).contains(&code) && !u.acked {
            let since = u.first_sent.unwrap_or(u.t_sent);
            cx.rec
                .lat
                .registered
                .record(cx.now.saturating_duration_since(since));
        }
        u.acked |= (200..300).contains(&code);
        // A 5xx with Retry-After: come back then, as a phone does (within the run).
        if (500..600).contains(&code)
            && let Some(cap) = self.cfg.retry_after_cap
            && u.retries < MAX_REGISTER_RETRIES
            && let Some(after) = retry_after(msg)
        {
            let at = cx.now + after.min(cap);
            if end.is_none_or(|e| at < e) {
                u.retries += 1;
                u.retry_at = Some(at);
                cx.rec.c.reg_retry_after += 1;
                cx.timers.schedule(Entry {
                    at,
                    slot: user,
                    gen_: u.cseq,
                    kind: Kind::RegRetry,
                });
                return;
            }
        }
        if code == 423
            && !u.retried_423
            && let Ok(Some(min)) = msg.min_expires()
        {
            u.expires = min;
            u.retried_423 = true;
            self.send(cx, user, false);
            return;
        }
        match refresh {
            // A de-registration that succeeded: nothing left to refresh.
            Some(_) if code < 300 && u.expires == 0 => self.outstanding -= 1,
            Some(every) if code < 300 && end.is_none_or(|e| cx.now + every < e) => {
                let at = cx.now + every;
                u.refresh_at = Some(at);
                cx.timers.schedule(Entry {
                    at,
                    slot: user,
                    gen_: u.cseq,
                    kind: Kind::RegRefresh,
                });
            }
            _ => self.outstanding -= 1,
        }
    }

    /// Registration failover (RFC 3263 §4.3): the user's REGISTER goes, as a new
    /// transaction, to the next registrar it has not tried in this attempt (one not held
    /// down if there is one), where the user stays; the one that failed is held down.
    /// Returns false, changing nothing, when every registrar has been tried (or there is
    /// only one, or failover is off).
    fn fail_over(&mut self, cx: &mut Ctx<'_>, user: u32) -> bool {
        let n = self.hops.len();
        let now = cx.now;
        if n < 2 || self.cfg.hops.failover_after.is_none() {
            return false;
        }
        let Some(u) = self.users.get(user as usize) else {
            return false;
        };
        let (from, tried) = (usize::from(u.hop), u.tried);
        let Some(hop) = self
            .down
            .fail_over(from, tried, now, self.cfg.hops.hold_down)
        else {
            return false;
        };
        if let Some(u) = self.users.get_mut(user as usize) {
            u.hop = hop as u8;
        }
        cx.rec.c.failovers += 1;
        self.send_to(cx, user, false, true);
        true
    }

    pub(crate) fn fire(&mut self, cx: &mut Ctx<'_>, e: Entry) {
        let Some(u) = self.users.get_mut(e.slot as usize) else {
            return;
        };
        if u.cseq != e.gen_ {
            return;
        }
        match e.kind {
            Kind::RegFailover if u.pending && u.failover_at == Some(e.at) => {
                u.failover_at = None;
                // No answer at all from this registrar: the next one (the current
                // transaction keeps running to its Timer F if none is left).
                self.fail_over(cx, e.slot);
            }
            Kind::RegE if u.pending && u.timer_e == Some(e.at) => {
                u.interval = (u.interval * 2).min(cx.t.t2);
                let at = cx.now + u.interval;
                u.timer_e = Some(at);
                cx.timers.schedule(Entry {
                    at,
                    slot: e.slot,
                    gen_: e.gen_,
                    kind: Kind::RegE,
                });
                cx.rec.c.retrans_other += 1;
                cx.rec.msgs.row(MsgKey::Request(M::Register)).retransmitted += 1;
                self.send(cx, e.slot, true);
            }
            Kind::RegF if u.pending && u.timer_f == Some(e.at) => {
                u.pending = false;
                u.timer_e = None;
                u.timer_f = None;
                cx.rec.c.timeouts += 1;
                cx.rec.msgs.row(MsgKey::Request(M::Register)).timeouts += 1;
                // No answer at all: come back later, as a phone does (RFC 5626 §4.5).
                if let Some(base) = self.cfg.retry_timeout_base
                    && u.retries < MAX_REGISTER_RETRIES
                {
                    u.timeouts += 1;
                    let doubled = base.saturating_mul(1 << u.timeouts.min(16).saturating_sub(1));
                    let wait = doubled
                        .min(MAX_REGISTER_RETRY_WAIT)
                        .mul_f64(0.5 + 0.5 * cx.rng.next_f64());
                    let at = cx.now + wait;
                    if self.end.is_none_or(|end| at < end) {
                        u.retries += 1;
                        u.retry_at = Some(at);
                        cx.rec.c.reg_retry_timeout += 1;
                        cx.timers.schedule(Entry {
                            at,
                            slot: e.slot,
                            gen_: e.gen_,
                            kind: Kind::RegRetry,
                        });
                        return;
                    }
                }
                self.outstanding -= 1;
            }
            Kind::RegRetry if u.retry_at == Some(e.at) => {
                u.retry_at = None;
                self.send(cx, e.slot, false);
            }
            Kind::RegRefresh if u.refresh_at == Some(e.at) => {
                u.refresh_at = None;
                u.retried_423 = false;
                if self
                    .cfg
                    .deregister_every
                    .is_some_and(|k| k > 0 && u64::from(e.slot) % k == 0)
                {
                    // This user leaves: its binding removed instead of refreshed.
                    u.expires = 0;
                }
                if self.end.is_some_and(|end| cx.now >= end) {
                    self.outstanding -= 1;
                } else {
                    self.send(cx, e.slot, false);
                }
            }
            _ => {}
        }
    }

    pub(crate) fn abort(&mut self) {
        self.arrivals.stop();
        self.outstanding = 0;
    }
}

/// The delay a response's `Retry-After` asks for: its leading whole seconds (RFC 3261
/// §20.33; a comment or parameters after them are ignored). `None` when absent or not a
/// number.
fn retry_after(msg: &Message<'_>) -> Option<Duration> {
    let v = msg.first_value(HeaderName::RetryAfter)?.trim_ascii_start();
    let digits = v.iter().take_while(|b| b.is_ascii_digit()).count();
    let secs: u64 = std::str::from_utf8(&v[..digits]).ok()?.parse().ok()?;
    Some(Duration::from_secs(secs))
}
