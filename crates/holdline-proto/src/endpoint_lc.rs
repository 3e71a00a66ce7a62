//! The [`Endpoint`]'s RFC 7200 subscriptions (see [`crate::load_control`]), both roles.
//!
//! Notifier: a SUBSCRIBE for `Event: load-control` addressed to this server from a trusted
//! source is answered `200` with the granted Expires, and a NOTIFY with the whole filter
//! document follows (RFC 6665 §4.2.1), again at every refresh; when the subscription
//! expires (or is ended with `Expires: 0`), a last NOTIFY says `terminated`. NOTIFYs go to
//! where the SUBSCRIBE came from (its source address and connection), with its Contact as
//! their Request-URI. A NOTIFY answered `481` or not at all ends the subscription.
//!
//! Subscriber: one worker (index 0) SUBSCRIBEs to every configured notifier with a Call-ID
//! it owns (so that the NOTIFYs come back to it), refreshes at 80% of the granted time,
//! installs the filters each NOTIFY carries into the [`SharedFilters`] every worker applies,
//! and answers the NOTIFY `200` (`400` for a document that does not parse, the filters
//! before it stay). A failed or terminated subscription drops that notifier's filters and
//! is tried again after [`LoadControlConfig::retry`](crate::load_control::LoadControlConfig).

use std::collections::HashMap;

use holdline_base::{Duration, Instant, Peer};
use holdline_sip::{HeaderName, Message, build_response};

use super::{DropReason, Endpoint};
use crate::load_control::{
    CONTENT_TYPE, EVENT_PACKAGE, FilterSet, LoadControlConfig, SharedFilters,
};
use crate::proxy::host_port;
use crate::txn::{ClientTxnId, ServerTxnId};

/// Counters of both roles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadControlStats {
    /// Notifier: SUBSCRIBEs for `load-control` received (refreshes included).
    pub subscribes_received: u64,
    /// Notifier: subscriptions held (a gauge).
    pub subscriptions: u64,
    /// Notifier: NOTIFYs sent.
    pub notifies_sent: u64,
    /// Notifier: NOTIFYs refused (`481` or any other failure) or unanswered.
    pub notifies_failed: u64,
    /// Subscriber: SUBSCRIBEs sent (refreshes included).
    pub subscribes_sent: u64,
    /// Subscriber: SUBSCRIBEs refused or unanswered.
    pub subscribes_failed: u64,
    /// Subscriber: NOTIFYs received and accepted.
    pub notifies_received: u64,
    /// Subscriber: NOTIFYs whose document was refused (`400`/`415`).
    pub documents_refused: u64,
    /// New requests a filter turned away (answered `503`).
    pub rejected: u64,
    /// New requests a filter matched and let through.
    pub accepted: u64,
}

/// A subscription this server (notifier) holds.
#[derive(Debug)]
struct Notified {
    call_id: String,
    /// The subscriber's tag (From of its SUBSCRIBE) and ours (the To tag we gave).
    their_tag: String,
    our_tag: String,
    their_uri: String,
    our_uri: String,
    /// The NOTIFYs' Request-URI (the SUBSCRIBE's Contact) and where they go.
    target: String,
    dest: Peer,
    cseq: u32,
    expires_at: Instant,
}

/// Where one of our subscriptions (subscriber) stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SubState {
    /// No subscription: SUBSCRIBE at this time.
    Idle(Instant),
    /// A SUBSCRIBE in flight.
    Pending,
    /// Subscribed: refresh at this time, expired at the second.
    Active(Instant, Instant),
}

/// One of our subscriptions (subscriber role).
#[derive(Debug)]
struct Subscribing {
    notifier: Peer,
    call_id: String,
    our_tag: String,
    their_tag: Option<String>,
    cseq: u32,
    state: SubState,
}

/// What a client transaction of ours carries.
#[derive(Debug, Clone, Copy)]
enum LcTxn {
    /// A SUBSCRIBE of subscription `i`.
    Subscribe(usize),
    /// A NOTIFY of the subscription with this Call-ID hash and our tag (looked up again when
    /// its answer comes; the subscription may be gone).
    Notify(u64),
}

/// Both roles' state in one worker.
#[derive(Debug, Default)]
pub(super) struct LcState {
    subs: Vec<Notified>,
    client: Vec<Subscribing>,
    txns: HashMap<ClientTxnId, LcTxn>,
    started: bool,
    /// The notifier's document, built once per generation of the published filters.
    doc: Option<String>,
    doc_generation: u64,
}

fn key_of(call_id: &str, our_tag: &str) -> u64 {
    let mut h = crate::proxy::Fnv::new();
    h.field(call_id.as_bytes()).field(our_tag.as_bytes());
    h.finish()
}

/// Whether the request's Event header names the load-control package.
pub(super) fn is_load_control(msg: &Message<'_>) -> bool {
    msg.first_value(HeaderName::Event).is_some_and(|v| {
        let pkg = v.split(|&b| b == b';').next().unwrap_or_default();
        pkg.trim_ascii()
            .eq_ignore_ascii_case(EVENT_PACKAGE.as_bytes())
    })
}

/// The `expires` parameter of a Subscription-State value, and whether it is `terminated`.
fn subscription_state(v: &[u8]) -> (bool, Option<u64>) {
    let mut parts = v.split(|&b| b == b';');
    let state = parts.next().unwrap_or_default().trim_ascii();
    let expires = parts.find_map(|p| {
        let (k, val) = p.split_at(p.iter().position(|&b| b == b'=')?);
        k.trim_ascii()
            .eq_ignore_ascii_case(b"expires")
            .then(|| {
                std::str::from_utf8(val.get(1..)?.trim_ascii())
                    .ok()?
                    .parse()
                    .ok()
            })
            .flatten()
    });
    (state.eq_ignore_ascii_case(b"terminated"), expires)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl Endpoint {
    /// Unix seconds at `now` (the driver's wall clock at the epoch, from
    /// [`ProxyConfig::overload_seq_base`](crate::ProxyConfig)).
    pub(super) fn wall_s(&self, now: Instant) -> i64 {
        let base = (self.config.overload_seq_base / 100_000) as i64;
        base.saturating_add((now.as_nanos() / 1_000_000_000) as i64)
    }

    /// The filters every worker applies.
    pub(super) fn lc_filters(&self) -> &SharedFilters {
        &self.config.load_control.shared
    }

    fn lc_document(&mut self) -> String {
        let updates = &self.config.load_control.updates;
        if self.lc.doc.is_none() || updates.generation() != self.lc.doc_generation {
            let start = self.wall_s(Instant::ZERO);
            let (generation, set) = if updates.generation() == 0 {
                (0, self.config.load_control.document(start))
            } else {
                let (g, filters) = updates.get();
                (g, LoadControlConfig::document_of(&filters, start))
            };
            self.lc.doc = Some(set.to_xml());
            self.lc.doc_generation = generation;
        }
        self.lc.doc.clone().unwrap_or_default()
    }

    /// Whether the published filters changed since this worker's document was built.
    fn lc_changed(&self) -> bool {
        self.config.load_control.updates.generation() != self.lc.doc_generation
    }

    /// A SUBSCRIBE for `Event: load-control` addressed to this server (notifier role).
    pub(super) fn lc_subscribe(
        &mut self,
        now: Instant,
        sid: ServerTxnId,
        msg: &Message<'_>,
        from: Peer,
    ) {
        self.stats.load_control.subscribes_received += 1;
        if !self.config.load_control.publish {
            self.respond(now, sid, msg, 489, "Bad Event", &[]);
            return;
        }
        if !self.config.relay.trusts(from.addr.ip()) {
            self.respond(now, sid, msg, 403, "Forbidden", &[]);
            return;
        }
        let (Ok(call_id), Ok(f), Ok(to)) = (msg.call_id(), msg.from(), msg.to()) else {
            self.respond(now, sid, msg, 400, "Bad Request", &[]);
            return;
        };
        let Some(their_tag) = f.tag() else {
            self.respond(now, sid, msg, 400, "Missing From Tag", &[]);
            return;
        };
        let max = self.config.load_control.max_expires.as_secs();
        let asked = match msg.expires() {
            Ok(e) => e.map_or(max, u64::from),
            Err(_) => {
                self.respond(now, sid, msg, 400, "Bad Expires", &[]);
                return;
            }
        };
        let granted = asked.min(max);
        let (call_id, their_tag) = (text(call_id), text(their_tag));
        let existing = match to.tag() {
            Some(t) => {
                let t = text(t);
                match self.lc.subs.iter().position(|s| {
                    s.call_id == call_id && s.their_tag == their_tag && s.our_tag == t
                }) {
                    Some(i) => Some(i),
                    None => {
                        self.respond(now, sid, msg, 481, "Subscription Does Not Exist", &[]);
                        return;
                    }
                }
            }
            None => None,
        };
        let target = msg
            .contacts()
            .next()
            .and_then(|c| match c {
                Ok(holdline_sip::Contact::Addr(a)) => Some(text(a.uri.as_bytes())),
                _ => None,
            })
            .unwrap_or_else(|| text(f.uri.as_bytes()));
        let i = match existing {
            Some(i) => i,
            None => {
                let tag = text(&self.new_tag());
                self.lc.subs.push(Notified {
                    call_id,
                    their_tag,
                    our_tag: tag,
                    their_uri: text(f.uri.as_bytes()),
                    our_uri: text(to.uri.as_bytes()),
                    target: String::new(),
                    dest: from,
                    cseq: 0,
                    expires_at: now,
                });
                self.lc.subs.len() - 1
            }
        };
        let s = &mut self.lc.subs[i];
        s.target = target;
        s.dest = from;
        s.expires_at = now + Duration::from_secs(granted);
        let tag = s.our_tag.clone();
        let mut out = Vec::with_capacity(512);
        let expires = granted.to_string();
        // The 2xx creates the dialog: its Contact is where in-dialog requests reach us.
        let contact = self
            .config
            .listener(from.transport)
            .map(|l| {
                format!(
                    "<sip:{};transport={}>",
                    host_port(l.addr),
                    from.transport.as_param_str()
                )
            })
            .unwrap_or_default();
        let mut extra: Vec<(&str, &[u8])> = vec![("Expires", expires.as_bytes())];
        if !contact.is_empty() {
            extra.push(("Contact", contact.as_bytes()));
        }
        build_response(msg, 200, "OK", Some(tag.as_bytes()), &extra, b"", &mut out);
        if self.txns.respond(now, sid, out).is_err() {
            self.drop_msg(DropReason::Internal);
        }
        self.lc_notify(now, i, granted == 0);
        if granted == 0 {
            self.lc.subs.swap_remove(i);
        }
        self.stats.load_control.subscriptions = self.lc.subs.len() as u64;
    }

    /// Sends subscription `i` a NOTIFY with the whole document (`terminated`: the last one).
    fn lc_notify(&mut self, now: Instant, i: usize, terminated: bool) {
        let doc = self.lc_document();
        let Some(s) = self.lc.subs.get_mut(i) else {
            return;
        };
        s.cseq += 1;
        let dest = s.dest;
        let Some(l) = self.config.listener(dest.transport).copied() else {
            self.stats.load_control.notifies_failed += 1;
            return;
        };
        let s = &self.lc.subs[i];
        let sent_by = host_port(l.addr);
        let state = if terminated {
            "terminated;reason=timeout".to_owned()
        } else {
            let left = s.expires_at.saturating_duration_since(now).as_secs();
            format!("active;expires={left}")
        };
        let key = key_of(&s.call_id, &s.our_tag);
        let mut branch = [0u8; 10];
        self.rng.fill_token(&mut branch);
        let request = format!(
            "NOTIFY {target} SIP/2.0\r\n\
             Via: SIP/2.0/{via} {sent_by};branch=z9hG4bK{branch};rport\r\n\
             Max-Forwards: 70\r\n\
             From: <{our_uri}>;tag={our_tag}\r\n\
             To: <{their_uri}>;tag={their_tag}\r\n\
             Call-ID: {call_id}\r\n\
             CSeq: {cseq} NOTIFY\r\n\
             Contact: <sip:{sent_by};transport={tp}>\r\n\
             Event: {EVENT_PACKAGE}\r\n\
             Subscription-State: {state}\r\n\
             Content-Type: {CONTENT_TYPE}\r\n\
             Content-Length: {len}\r\n\r\n{doc}",
            target = s.target,
            via = dest.transport.as_via_str(),
            branch = text(&branch),
            our_uri = s.our_uri,
            our_tag = s.our_tag,
            their_uri = s.their_uri,
            their_tag = s.their_tag,
            call_id = s.call_id,
            cseq = s.cseq,
            tp = dest.transport.as_param_str(),
            len = doc.len(),
        );
        match self.txns.send_request(now, request.into_bytes(), dest) {
            Ok(cid) => {
                self.stats.load_control.notifies_sent += 1;
                self.lc.txns.insert(cid, LcTxn::Notify(key));
            }
            Err(_) => self.stats.load_control.notifies_failed += 1,
        }
    }

    /// A NOTIFY for `Event: load-control`: ours (subscriber role) when its Call-ID and To tag
    /// are one of our subscriptions'; `false` when it is not ours (it is then proxied).
    pub(super) fn lc_notify_in(
        &mut self,
        now: Instant,
        sid: ServerTxnId,
        msg: &Message<'_>,
    ) -> bool {
        let call_id = msg.call_id().unwrap_or_default();
        let our_tag = msg.to().ok().and_then(|t| t.tag().map(text));
        let Some(i) = self.lc.client.iter().position(|c| {
            c.call_id.as_bytes() == call_id && our_tag.as_deref() == Some(&c.our_tag)
        }) else {
            return false;
        };
        let state = msg
            .headers_named(b"Subscription-State")
            .next()
            .map(|h| subscription_state(msg.value(h)));
        let body = msg.body();
        let content_type = msg.first_value(HeaderName::ContentType).unwrap_or_default();
        let ct_ok = content_type
            .split(|&b| b == b';')
            .next()
            .unwrap_or_default()
            .trim_ascii()
            .eq_ignore_ascii_case(CONTENT_TYPE.as_bytes());
        let notifier = self.lc.client[i].notifier;
        if !body.is_empty() && !ct_ok {
            self.stats.load_control.documents_refused += 1;
            self.respond(
                now,
                sid,
                msg,
                415,
                "Unsupported Media Type",
                &[("Accept", CONTENT_TYPE.as_bytes())],
            );
            return true;
        }
        if !body.is_empty() {
            match FilterSet::parse(body) {
                Ok(set) => self.lc_filters().install(notifier.addr, set),
                Err(_) => {
                    self.stats.load_control.documents_refused += 1;
                    self.respond(now, sid, msg, 400, "Bad Load-Control Document", &[]);
                    return true;
                }
            }
        }
        self.stats.load_control.notifies_received += 1;
        let c = &mut self.lc.client[i];
        if c.their_tag.is_none() {
            c.their_tag = msg.from().ok().and_then(|f| f.tag().map(text));
        }
        match state {
            Some((true, _)) => {
                self.lc_filters().clear(notifier.addr);
                let retry = self.config.load_control.retry;
                let c = &mut self.lc.client[i];
                c.state = SubState::Idle(now + retry);
                c.their_tag = None;
            }
            Some((false, Some(left))) => {
                let left = Duration::from_secs(left);
                c.state = SubState::Active(now + left.mul_f64(0.8), now + left);
            }
            _ => {}
        }
        self.respond(now, sid, msg, 200, "OK", &[]);
        true
    }

    /// The answer to one of our SUBSCRIBEs or NOTIFYs, or `false` when `cid` is not ours.
    pub(super) fn lc_response(
        &mut self,
        now: Instant,
        cid: ClientTxnId,
        status: u16,
        msg: Option<&Message<'_>>,
    ) -> bool {
        let Some(&what) = self.lc.txns.get(&cid) else {
            return false;
        };
        if status < 200 {
            return true;
        }
        self.lc.txns.remove(&cid);
        match what {
            LcTxn::Notify(key) => {
                if status >= 300 {
                    self.stats.load_control.notifies_failed += 1;
                    // The subscriber is gone (481) or will not take them: end it.
                    self.lc
                        .subs
                        .retain(|s| key_of(&s.call_id, &s.our_tag) != key);
                    self.stats.load_control.subscriptions = self.lc.subs.len() as u64;
                }
            }
            LcTxn::Subscribe(i) => {
                let retry = self.config.load_control.retry;
                let filters = self.config.load_control.shared.clone();
                let Some(c) = self.lc.client.get_mut(i) else {
                    return true;
                };
                if (200..300).contains(&status) {
                    if c.their_tag.is_none() {
                        c.their_tag = msg.and_then(|m| m.to().ok()?.tag().map(text));
                    }
                    let granted = msg
                        .and_then(|m| m.expires().ok().flatten())
                        .map_or(self.config.load_control.expires, |e| {
                            Duration::from_secs(u64::from(e))
                        });
                    // A NOTIFY may have come first and set the times already.
                    if c.state == SubState::Pending {
                        c.state = SubState::Active(now + granted.mul_f64(0.8), now + granted);
                    }
                } else {
                    self.stats.load_control.subscribes_failed += 1;
                    filters.clear(c.notifier.addr);
                    c.state = SubState::Idle(now + retry);
                    c.their_tag = None;
                    c.call_id.clear();
                }
            }
        }
        true
    }

    /// A client transaction of ours that failed without an answer (timeout, transport).
    pub(super) fn lc_failed(&mut self, now: Instant, cid: ClientTxnId) -> bool {
        if !self.lc.txns.contains_key(&cid) {
            return false;
        }
        self.lc_response(now, cid, 408, None);
        true
    }

    /// Starts the subscriber role, sends due SUBSCRIBEs and refreshes, drops expired
    /// subscriptions (both roles).
    pub(super) fn run_load_control(&mut self, now: Instant) {
        let lc = &self.config.load_control;
        if lc.subscribe.is_empty() && !lc.publish {
            return;
        }
        if !self.lc.started {
            self.lc.started = true;
            if self.config.shard.is_none_or(|s| s.index == 0) {
                let notifiers = lc.subscribe.clone();
                for notifier in notifiers {
                    let tag = text(&self.new_tag());
                    self.lc.client.push(Subscribing {
                        notifier,
                        call_id: String::new(),
                        our_tag: tag,
                        their_tag: None,
                        cseq: 0,
                        state: SubState::Idle(now),
                    });
                }
            }
        }
        // Notifier: new filters go to every subscriber at once (the whole document).
        if self.lc_changed() {
            self.lc_document();
            for i in 0..self.lc.subs.len() {
                if self.lc.subs[i].expires_at > now {
                    self.lc_notify(now, i, false);
                }
            }
        }
        // Notifier: subscriptions that ran out get their last NOTIFY.
        while let Some(i) = self.lc.subs.iter().position(|s| s.expires_at <= now) {
            self.lc_notify(now, i, true);
            self.lc.subs.swap_remove(i);
        }
        self.stats.load_control.subscriptions = self.lc.subs.len() as u64;
        // Subscriber.
        for i in 0..self.lc.client.len() {
            let due = match self.lc.client[i].state {
                SubState::Idle(at) => at <= now,
                SubState::Pending => false,
                SubState::Active(refresh, expires) => {
                    if expires <= now {
                        // Not refreshed in time: its filters go.
                        let n = self.lc.client[i].notifier.addr;
                        self.lc_filters().clear(n);
                        let c = &mut self.lc.client[i];
                        c.their_tag = None;
                        c.call_id.clear();
                    }
                    refresh <= now
                }
            };
            if due {
                self.lc_send_subscribe(now, i);
            }
        }
    }

    /// When [`run_load_control`](Self::run_load_control) is next due.
    pub(super) fn lc_timeout(&self) -> Option<Instant> {
        let lc = &self.config.load_control;
        if lc.subscribe.is_empty() && !lc.publish {
            return None;
        }
        if !self.lc.started || self.lc_changed() {
            return Some(Instant::ZERO);
        }
        let client = self.lc.client.iter().filter_map(|c| match c.state {
            SubState::Idle(at) => Some(at),
            SubState::Pending => None,
            SubState::Active(refresh, _) => Some(refresh),
        });
        self.lc
            .subs
            .iter()
            .map(|s| s.expires_at)
            .chain(client)
            .min()
    }

    fn lc_send_subscribe(&mut self, now: Instant, i: usize) {
        let notifier = self.lc.client[i].notifier;
        let Some(l) = self.config.listener(notifier.transport).copied() else {
            self.stats.load_control.subscribes_failed += 1;
            self.lc.client[i].state = SubState::Idle(now + self.config.load_control.retry);
            return;
        };
        let sent_by = host_port(l.addr);
        if self.lc.client[i].call_id.is_empty() {
            // A new dialog: a Call-ID this worker owns, so that the NOTIFYs come back here.
            let tries = self.config.shard.map_or(1, |s| 64 * s.workers.max(1));
            let mut call_id = String::new();
            for _ in 0..tries {
                call_id = format!("lc-{}@{sent_by}", text(&self.new_tag()));
                if self.config.shard.is_none_or(|s| s.owns(call_id.as_bytes())) {
                    break;
                }
            }
            let c = &mut self.lc.client[i];
            c.call_id = call_id;
            c.their_tag = None;
        }
        let mut branch = [0u8; 10];
        self.rng.fill_token(&mut branch);
        let expires = self.config.load_control.expires.as_secs();
        let c = &mut self.lc.client[i];
        c.cseq += 1;
        let target = host_port(notifier.addr);
        let tp = notifier.transport.as_param_str();
        let to_tag = c
            .their_tag
            .as_ref()
            .map(|t| format!(";tag={t}"))
            .unwrap_or_default();
        let request = format!(
            "SUBSCRIBE sip:{target};transport={tp} SIP/2.0\r\n\
             Via: SIP/2.0/{via} {sent_by};branch=z9hG4bK{branch};rport\r\n\
             Max-Forwards: 70\r\n\
             From: <sip:holdline@{sent_by}>;tag={our_tag}\r\n\
             To: <sip:{target}>{to_tag}\r\n\
             Call-ID: {call_id}\r\n\
             CSeq: {cseq} SUBSCRIBE\r\n\
             Contact: <sip:holdline@{sent_by};transport={tp}>\r\n\
             Event: {EVENT_PACKAGE}\r\n\
             Accept: {CONTENT_TYPE}\r\n\
             Expires: {expires}\r\n\
             Content-Length: 0\r\n\r\n",
            via = notifier.transport.as_via_str(),
            branch = text(&branch),
            our_tag = c.our_tag,
            call_id = c.call_id,
            cseq = c.cseq,
        );
        match self.txns.send_request(now, request.into_bytes(), notifier) {
            Ok(cid) => {
                self.stats.load_control.subscribes_sent += 1;
                self.lc.client[i].state = SubState::Pending;
                self.lc.txns.insert(cid, LcTxn::Subscribe(i));
            }
            Err(_) => {
                self.stats.load_control.subscribes_failed += 1;
                self.lc.client[i].state = SubState::Idle(now + self.config.load_control.retry);
            }
        }
    }
}

#[cfg(test)]
#[path = "endpoint_lc_tests.rs"]
mod tests;
