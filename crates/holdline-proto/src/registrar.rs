//! The registrar (RFC 3261 §10.3): validates a REGISTER, updates the [`LocationStore`] and
//! writes the response. Pure: the caller passes `now` and the store; nothing here reads a clock
//! or touches a socket.
//!
//! ```text
//!  REGISTER ──> Method, Call-ID, CSeq, To (AOR key), Require, Expires, Contact(s) checks
//!                  │ 400 / 404 / 405 / 420 / 423 written here, store untouched
//!                  v
//!           no Contact: store.lookup ─────────────────────┐
//!           Contact(s) / `*`: store.modify(aor, now, f)   │  f works on a copy of the
//!               all-or-nothing: 500 (out-of-order CSeq),  │  bindings and commits only if
//!               403 (too many contacts), else commit      │  every update succeeds
//!                  v                                      v
//!           200 OK listing every current binding: `<uri>;expires=<remaining>[;q=...]`
//! ```
//!
//! # Decisions
//!
//! - **Status codes.** Missing or malformed To, Call-ID, CSeq, Expires or Contact: `400` with
//!   the parse error's reason. CSeq method other than REGISTER: `400 Bad CSeq`. A request
//!   whose method is not REGISTER: `405` with `Allow: REGISTER`. A To URI that has no
//!   address-of-record key (see [`Registrar::aor_key`]): `404`. A `Require` header (no
//!   extension is supported yet): `420` with `Unsupported` listing its option tags. An
//!   interval below `min_expires` (and below one hour, step 6): `423` with `Min-Expires`.
//!   A binding with the request's Call-ID and a CSeq not lower than the request's: `500`
//!   (step 7: "the update MUST be aborted and the request fails", and a failed update is a
//!   `500`), with no change at all. More than `max_contacts_per_aor` bindings after the
//!   request, when it adds any: `403 Too Many Contacts` (a policy refusal, not a server fault;
//!   refreshes and removals are never refused for this reason).
//! - **Contact URI comparison** (step 7) follows RFC 3261 §19.1.4 ([`uri_equivalent`]):
//!   `sip` and `sips` differ; user and password compare case-sensitively after unescaping;
//!   host case-insensitively (a name never equals an address); ports must both be absent or
//!   equal (`h` ≠ `h:5060`); `user`, `ttl`, `method`, `maddr` and `transport` parameters must
//!   match when either side has them; other parameters must match only when both have them;
//!   URI headers must match as a set. Other schemes compare byte for byte, ignoring case.
//! - **Refresh.** A refreshed binding takes the request's contact URI as written, its expiry,
//!   its `q` (absent means 1.0), Call-ID, CSeq and source.
//! - **Duplicates in one request.** A contact listed twice: the later one wins.
//! - **To tag.** Responses carry a To tag derived from the request's Call-ID and From (FNV-1a,
//!   16 hex digits): deterministic, identical for retransmissions.

use std::borrow::Cow;
use std::io::Write as _;

use holdline_base::{Duration, Instant, Peer};
use holdline_sip::scan::{Params, trim_lws};
use holdline_sip::{Contact, HeaderName, Host, Message, Method, Scheme, Uri, percent_decode};

use crate::location::{Binding, LocationStore};

/// What [`Registrar::register`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registered {
    /// The status code of the response written.
    pub status: u16,
    /// Whether the store was changed (the response is a 200 promising the change).
    pub changed: bool,
}

/// Configuration of a [`Registrar`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegistrarConfig {
    /// The shortest non-zero interval accepted, in seconds; a shorter requested interval
    /// (when also under one hour, RFC 3261 §10.3 step 6) is answered `423 Interval Too Brief`
    /// with this value in `Min-Expires`. Default 60.
    pub min_expires: u32,
    /// The longest interval granted, in seconds; longer requests are shortened to it.
    /// Raised to `min_expires` (and to 1) if below. Default 7200.
    pub max_expires: u32,
    /// The interval granted when the request gives neither a Contact `expires` parameter nor
    /// an Expires header, in seconds. Brought into `min_expires..=max_expires`. Default 3600.
    pub default_expires: u32,
    /// The most bindings one address-of-record may have; a request that adds bindings beyond
    /// it is refused with `403` and changes nothing. Default 10.
    pub max_contacts_per_aor: usize,
}

impl Default for RegistrarConfig {
    fn default() -> Self {
        Self {
            min_expires: 60,
            max_expires: 7200,
            default_expires: 3600,
            max_contacts_per_aor: 10,
        }
    }
}

/// The registrar: stateless apart from its configuration; bindings live in the
/// [`LocationStore`] given to each call.
#[derive(Clone, Debug)]
pub struct Registrar {
    config: RegistrarConfig,
}

/// A refusal: status, reason phrase and at most one extra header.
struct Reject {
    code: u16,
    reason: &'static str,
    header: Option<(&'static str, Vec<u8>)>,
}

impl Reject {
    fn new(code: u16, reason: &'static str) -> Self {
        Self {
            code,
            reason,
            header: None,
        }
    }

    fn with(mut self, name: &'static str, value: Vec<u8>) -> Self {
        self.header = Some((name, value));
        self
    }

    fn bad(e: holdline_sip::ParseError) -> Self {
        Self::new(400, e.kind.reason())
    }
}

/// What a REGISTER asks for, once validated.
enum Update<'a> {
    /// No Contact: fetch the bindings.
    Query,
    /// `Contact: *` with `Expires: 0`.
    RemoveAll,
    /// Contacts with their granted intervals.
    Contacts(Vec<Requested<'a>>),
}

struct Requested<'a> {
    uri: Uri<'a>,
    /// Granted interval in seconds (0 removes).
    expires: u32,
    /// In thousandths.
    q: u16,
}

/// The 200's Contact values: one buffer, one range per binding.
#[derive(Default)]
struct ContactList {
    text: Vec<u8>,
    ends: Vec<usize>,
}

impl ContactList {
    fn fill(&mut self, bindings: &[Binding], now: Instant) {
        self.text.clear();
        self.ends.clear();
        for b in bindings {
            self.text.push(b'<');
            self.text.extend_from_slice(&b.contact);
            self.text.extend_from_slice(b">;expires=");
            push_decimal(&mut self.text, remaining_secs(b.expires_at, now));
            if b.q < 1000 {
                self.text.extend_from_slice(b";q=");
                push_qvalue(&mut self.text, b.q);
            }
            self.ends.push(self.text.len());
        }
    }

    fn headers(&self) -> Vec<(&'static str, &[u8])> {
        let mut start = 0;
        self.ends
            .iter()
            .map(|&end| {
                let v = self.text.get(start..end).unwrap_or_default();
                start = end;
                ("Contact", v)
            })
            .collect()
    }
}

/// Intervals of one hour or more are never answered with 423 (RFC 3261 §10.3 step 6).
const ONE_HOUR: u32 = 3600;

impl Registrar {
    /// A registrar with `config` (normalised: `max_expires` at least `min_expires` and 1,
    /// `default_expires` within `min_expires..=max_expires`).
    pub fn new(config: RegistrarConfig) -> Self {
        let mut config = config;
        config.max_expires = config.max_expires.max(config.min_expires).max(1);
        config.default_expires = config.default_expires.clamp(
            config.min_expires.min(config.max_expires),
            config.max_expires,
        );
        Self { config }
    }

    /// The configuration in force (after normalisation).
    pub fn config(&self) -> &RegistrarConfig {
        &self.config
    }

    /// Handles a REGISTER whose Request-URI domain this server serves: validates it, updates
    /// `store`, appends the complete response (200 listing all current bindings with
    /// `;expires=` remaining seconds, or 400/423/500/...) to `out`, returns its status code.
    ///
    /// The store is changed only when the answer is 200, and then atomically for the
    /// address-of-record (one [`LocationStore::modify`] call). See the module documentation
    /// for the status codes.
    pub fn handle_register(
        &self,
        now: Instant,
        req: &Message<'_>,
        source: Peer,
        store: &dyn LocationStore,
        out: &mut Vec<u8>,
    ) -> u16 {
        self.register(now, req, source, store, out).status
    }

    /// [`handle_register`](Self::handle_register), also saying whether the store was changed
    /// (a 200 to a REGISTER with Contacts): such a 200 promises a stored binding, so with a
    /// store that issues [commit tickets](LocationStore::commit_ticket) it must wait for
    /// the commit.
    pub fn register(
        &self,
        now: Instant,
        req: &Message<'_>,
        source: Peer,
        store: &dyn LocationStore,
        out: &mut Vec<u8>,
    ) -> Registered {
        let tag = to_tag(req);
        let mut contacts = ContactList::default();
        let mut changed = false;
        match self.process(now, req, source, store, &mut contacts, &mut changed) {
            Ok(()) => {
                let headers = contacts.headers();
                holdline_sip::build_response(req, 200, "OK", Some(&tag), &headers, b"", out);
                Registered {
                    status: 200,
                    changed,
                }
            }
            Err(r) => {
                let extra: Vec<(&str, &[u8])> = r
                    .header
                    .as_ref()
                    .map(|(n, v)| (*n, v.as_slice()))
                    .into_iter()
                    .collect();
                holdline_sip::build_response(req, r.code, r.reason, Some(&tag), &extra, b"", out);
                Registered {
                    status: r.code,
                    changed: false,
                }
            }
        }
    }

    fn process(
        &self,
        now: Instant,
        req: &Message<'_>,
        source: Peer,
        store: &dyn LocationStore,
        contacts: &mut ContactList,
        changed: &mut bool,
    ) -> Result<(), Reject> {
        if req.method() != Some(Method::Register) {
            return Err(Reject::new(405, "Method Not Allowed").with("Allow", b"REGISTER".to_vec()));
        }
        let call_id = req.call_id().map_err(Reject::bad)?;
        let cseq = req.cseq().map_err(Reject::bad)?;
        if cseq.method != Method::Register {
            return Err(Reject::new(
                400,
                holdline_sip::ParseErrorKind::BadHeader(HeaderName::CSeq).reason(),
            ));
        }
        let to = req.to().map_err(Reject::bad)?;
        let mut key = Vec::with_capacity(64);
        if !Self::aor_key(&to.uri, &mut key) {
            return Err(Reject::new(404, "Not Found"));
        }
        check_require(req)?;
        let update = self.parse_update(req)?;

        match update {
            Update::Query => {
                let mut bindings = Vec::new();
                store.lookup(&key, now, &mut bindings);
                contacts.fill(&bindings, now);
                Ok(())
            }
            Update::RemoveAll | Update::Contacts(_) => {
                let max = self.config.max_contacts_per_aor;
                let mut outcome = Ok(());
                store.modify(&key, now, &mut |bindings| {
                    outcome = apply(&update, bindings, call_id, cseq.seq, now, source, max);
                    if outcome.is_ok() {
                        contacts.fill(bindings, now);
                    }
                });
                *changed = outcome.is_ok();
                outcome
            }
        }
    }

    /// Reads Contact and Expires into an [`Update`], enforcing step 6 (`*` rules, 423).
    fn parse_update<'a>(&self, req: &Message<'a>) -> Result<Update<'a>, Reject> {
        let expires_header = req.expires().map_err(Reject::bad)?;
        let mut count = 0usize;
        let mut star = false;
        for v in req.values(HeaderName::Contact) {
            count += 1;
            star |= trim_lws(v.bytes) == b"*";
        }
        if count == 0 {
            return Ok(Update::Query);
        }
        if star {
            if count > 1 {
                return Err(Reject::new(400, "Contact * Must Be The Only Contact"));
            }
            if expires_header != Some(0) {
                return Err(Reject::new(400, "Contact * Requires Expires: 0"));
            }
            return Ok(Update::RemoveAll);
        }
        let cfg = &self.config;
        let mut list = Vec::with_capacity(count);
        for c in req.contacts() {
            let c = c.map_err(Reject::bad)?;
            let Contact::Addr(addr) = c else {
                // `*` was handled above; contacts() reports a misplaced one as an error.
                return Err(Reject::new(400, "Contact * Must Be The Only Contact"));
            };
            let expires = match c.expires().or(expires_header) {
                Some(requested) => {
                    if requested > 0 && requested < ONE_HOUR && requested < cfg.min_expires {
                        let mut v = Vec::with_capacity(10);
                        push_decimal(&mut v, cfg.min_expires);
                        return Err(Reject::new(423, "Interval Too Brief").with("Min-Expires", v));
                    }
                    requested.min(cfg.max_expires)
                }
                None => cfg.default_expires,
            };
            list.push(Requested {
                uri: addr.uri,
                expires,
                q: c.q().unwrap_or(1000),
            });
        }
        Ok(Update::Contacts(list))
    }

    /// Writes the canonical address-of-record key of `uri` into `out` (cleared first):
    /// `user@host` with the user unescaped, host lower-cased, `:port` only if present and not
    /// the scheme default, no parameters; `sips:` and `sip:` map to the same key. Returns false
    /// if the URI has no user or is not sip/sips.
    ///
    /// `tel:` (and every other scheme) has no key: `false`. RFC 3261 §10.2
    /// requires the address-of-record of a REGISTER to be a SIP or SIPS URI, and a telephone
    /// number has no domain to be served; a proxy reaches numbers through `sip:` URIs with
    /// `user=phone` (whose key is `number@host`, the `user` parameter dropped).
    ///
    /// An empty user (`sip:@h`) counts as no user. IP addresses are written in their canonical
    /// form (`[::1]` for `[0:0::1]`); the default port is 5060 for `sip:` and 5061 for `sips:`.
    /// On `false`, `out` is left empty.
    pub fn aor_key(uri: &Uri<'_>, out: &mut Vec<u8>) -> bool {
        out.clear();
        let default_port = match uri.scheme() {
            Scheme::Sip => 5060,
            Scheme::Sips => 5061,
            _ => return false,
        };
        let (Some(user), Some(host)) = (uri.user_unescaped(), uri.host()) else {
            return false;
        };
        if user.is_empty() {
            return false;
        }
        out.extend_from_slice(&user);
        out.push(b'@');
        // Writing into a Vec cannot fail.
        let _ = match host {
            Host::Name(n) => {
                out.extend(n.iter().map(u8::to_ascii_lowercase));
                Ok(())
            }
            Host::V4(a) => write!(out, "{a}"),
            Host::V6(a) => write!(out, "[{a}]"),
            _ => {
                out.extend(
                    uri.host_bytes()
                        .unwrap_or_default()
                        .iter()
                        .map(u8::to_ascii_lowercase),
                );
                Ok(())
            }
        };
        if let Some(port) = uri.port()
            && port != default_port
        {
            out.push(b':');
            push_decimal(out, u32::from(port));
        }
        true
    }
}

/// Step 2 (§8.2.2.3): no option tag is supported, so any `Require` is answered `420`.
fn check_require(req: &Message<'_>) -> Result<(), Reject> {
    let mut tags = Vec::new();
    for v in req.values(HeaderName::Require) {
        let t = trim_lws(v.bytes);
        if t.is_empty() {
            continue;
        }
        if !tags.is_empty() {
            tags.extend_from_slice(b", ");
        }
        tags.extend_from_slice(t);
    }
    if tags.is_empty() {
        Ok(())
    } else {
        Err(Reject::new(420, "Bad Extension").with("Unsupported", tags))
    }
}

/// Step 6 (`*`) and step 7 on the bindings of one AOR: all or nothing. On error `bindings` is
/// left as it was.
fn apply(
    update: &Update<'_>,
    bindings: &mut Vec<Binding>,
    call_id: &[u8],
    cseq: u32,
    now: Instant,
    source: Peer,
    max_contacts: usize,
) -> Result<(), Reject> {
    let stale = |b: &Binding| &*b.call_id == call_id && cseq <= b.cseq;
    let out_of_order = || Reject::new(500, "Out-of-Order REGISTER (CSeq Not Higher)");
    let requested = match update {
        Update::Query => return Ok(()),
        Update::RemoveAll => {
            if bindings.iter().any(stale) {
                return Err(out_of_order());
            }
            bindings.clear();
            return Ok(());
        }
        Update::Contacts(list) => list,
    };
    let position = |bindings: &[Binding], r: &Requested<'_>| {
        bindings.iter().position(|b| match Uri::parse(&b.contact) {
            Ok(stored) => uri_equivalent(&stored, &r.uri),
            Err(_) => *b.contact == *r.uri.as_bytes(),
        })
    };
    // A replay of the request that wrote the bindings as they are (same Call-ID and CSeq,
    // every contact it adds there from it, every one it removes gone): its transaction was
    // lost, by a restart between the commit and the 200 OK, and the phone retransmits.
    // Answer 200 with the bindings, as that transaction would have; changing nothing. Without
    // this, a `kill -9` drill answered `500 Out-of-Order` to 12-28 phones whose registration
    // was stored (`holdline lab storm`).
    // (Cheap first: only a binding written by this very Call-ID and CSeq can make it one, so a
    // refresh or a new user parses no stored URI here.)
    let written_by_it = |b: &Binding| *b.call_id == *call_id && b.cseq == cseq;
    let replay = (bindings.iter().any(written_by_it) || requested.iter().all(|r| r.expires == 0))
        && requested.iter().all(|r| match position(bindings, r) {
            Some(i) => r.expires > 0 && written_by_it(&bindings[i]),
            None => r.expires == 0,
        });
    if replay {
        return Ok(());
    }
    // Tentative updates go to a copy, committed only if every one succeeds.
    let mut next = bindings.clone();
    // Whether each binding of `next` was already written by this request.
    let mut touched = vec![false; next.len()];
    let mut added = false;
    for r in requested {
        let found = position(&next, r);
        match found {
            Some(i) => {
                if !touched[i] && stale(&next[i]) {
                    return Err(out_of_order());
                }
                if r.expires == 0 {
                    next.remove(i);
                    touched.remove(i);
                } else {
                    next[i] = new_binding(r, call_id, cseq, now, source);
                    touched[i] = true;
                }
            }
            None if r.expires > 0 => {
                next.push(new_binding(r, call_id, cseq, now, source));
                touched.push(true);
                added = true;
            }
            None => {}
        }
    }
    if added && next.len() > max_contacts {
        return Err(Reject::new(403, "Too Many Contacts"));
    }
    *bindings = next;
    Ok(())
}

fn new_binding(
    r: &Requested<'_>,
    call_id: &[u8],
    cseq: u32,
    now: Instant,
    source: Peer,
) -> Binding {
    Binding {
        contact: r.uri.as_bytes().into(),
        expires_at: now + Duration::from_secs(u64::from(r.expires)),
        q: r.q,
        call_id: call_id.into(),
        cseq,
        source: Some(source),
    }
}

/// Whether two URIs are equivalent per RFC 3261 §19.1.4 (see the module documentation).
pub fn uri_equivalent(a: &Uri<'_>, b: &Uri<'_>) -> bool {
    let sip = |s: Scheme<'_>| matches!(s, Scheme::Sip | Scheme::Sips);
    if !sip(a.scheme()) || !sip(b.scheme()) {
        return a.as_bytes().eq_ignore_ascii_case(b.as_bytes());
    }
    if a.scheme() != b.scheme()
        || a.user_unescaped() != b.user_unescaped()
        || a.password_unescaped() != b.password_unescaped()
        || a.port() != b.port()
    {
        return false;
    }
    let hosts_match = match (a.host(), b.host()) {
        (Some(Host::Name(x)), Some(Host::Name(y))) => x.eq_ignore_ascii_case(y),
        (x, y) => x == y,
    };
    hosts_match && params_match(a.params(), b.params()) && headers_match(a, b)
}

/// Parameters that must be present in both URIs or neither (§19.1.4).
const STRICT_PARAMS: [&[u8]; 5] = [b"user", b"ttl", b"method", b"maddr", b"transport"];

fn find_param<'a>(params: Params<'a>, name: &[u8]) -> Option<Option<&'a [u8]>> {
    params
        .iter()
        .find(|p| p.name.eq_ignore_ascii_case(name))
        .map(|p| p.value)
}

fn unescape(v: &[u8]) -> Cow<'_, [u8]> {
    percent_decode(v).unwrap_or(Cow::Borrowed(v))
}

fn values_match(x: Option<&[u8]>, y: Option<&[u8]>) -> bool {
    match (x, y) {
        (None, None) => true,
        (Some(x), Some(y)) => unescape(x).eq_ignore_ascii_case(&unescape(y)),
        _ => false,
    }
}

fn params_match(a: Params<'_>, b: Params<'_>) -> bool {
    for name in STRICT_PARAMS {
        match (find_param(a, name), find_param(b, name)) {
            (None, None) => {}
            (Some(x), Some(y)) if values_match(x, y) => {}
            _ => return false,
        }
    }
    a.iter().all(|p| {
        STRICT_PARAMS.iter().any(|s| p.name.eq_ignore_ascii_case(s))
            || find_param(b, p.name).is_none_or(|v| values_match(p.value, v))
    })
}

fn headers_match(a: &Uri<'_>, b: &Uri<'_>) -> bool {
    let same = |(n1, v1): (&[u8], &[u8]), (n2, v2): (&[u8], &[u8])| {
        unescape(n1).eq_ignore_ascii_case(&unescape(n2))
            && unescape(v1).eq_ignore_ascii_case(&unescape(v2))
    };
    let contained = |x: &Uri<'_>, y: &Uri<'_>| {
        x.header_pairs()
            .all(|h| y.header_pairs().any(|g| same(h, g)))
    };
    a.header_pairs().count() == b.header_pairs().count() && contained(a, b) && contained(b, a)
}

/// Whole seconds left until `at`, rounded up (a live binding never shows `expires=0`).
fn remaining_secs(at: Instant, now: Instant) -> u32 {
    let nanos = (at - now).as_nanos();
    u32::try_from(nanos.div_ceil(1_000_000_000)).unwrap_or(u32::MAX)
}

fn push_decimal(out: &mut Vec<u8>, n: u32) {
    let mut digits = [0u8; 10];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// A qvalue below 1 from thousandths: `0`, `0.5`, `0.05`, `0.123`.
fn push_qvalue(out: &mut Vec<u8>, q: u16) {
    out.push(b'0');
    if q == 0 {
        return;
    }
    let mut frac = [
        b'0' + (q / 100 % 10) as u8,
        b'0' + (q / 10 % 10) as u8,
        b'0' + (q % 10) as u8,
    ]
    .to_vec();
    while frac.last() == Some(&b'0') {
        frac.pop();
    }
    out.push(b'.');
    out.extend_from_slice(&frac);
}

/// A To tag from the request's Call-ID and From values as written (FNV-1a 64, hex).
fn to_tag(req: &Message<'_>) -> [u8; 16] {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let call_id = req.first_value(HeaderName::CallId).unwrap_or_default();
    let from = req.first_value(HeaderName::From).unwrap_or_default();
    for &b in call_id.iter().chain(&[0]).chain(from) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut tag = [0u8; 16];
    for (i, t) in tag.iter_mut().enumerate() {
        let nibble = (h >> (60 - 4 * i)) & 0xf;
        *t = b"0123456789abcdef"[nibble as usize];
    }
    tag
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use holdline_base::Transport;
    use holdline_sip::Limits;

    use super::*;
    use crate::memstore::MemoryLocationStore;

    const AOR: &[u8] = b"alice@example.com";

    fn peer(port: u16) -> Peer {
        Peer {
            addr: SocketAddr::from(([192, 0, 2, 1], port)),
            transport: Transport::Udp,
            conn: None,
        }
    }

    /// A REGISTER for alice with the given Call-ID, CSeq, Contact values (one header each)
    /// and extra header lines.
    fn register(call_id: &str, cseq: u32, contacts: &[&str], extra: &[&str]) -> Vec<u8> {
        let mut s = format!(
            "REGISTER sip:example.com SIP/2.0\r\n\
             Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKreg{cseq}\r\n\
             Max-Forwards: 70\r\n\
             To: Alice <sip:alice@example.com>\r\n\
             From: Alice <sip:alice@example.com>;tag=456248\r\n\
             Call-ID: {call_id}\r\n\
             CSeq: {cseq} REGISTER\r\n"
        );
        for c in contacts {
            s.push_str(&format!("Contact: {c}\r\n"));
        }
        for e in extra {
            s.push_str(e);
            s.push_str("\r\n");
        }
        s.push_str("Content-Length: 0\r\n\r\n");
        s.into_bytes()
    }

    struct Fixture {
        reg: Registrar,
        store: MemoryLocationStore,
    }

    /// A response's status, reason and Contact values as (uri, expires, q).
    struct Resp {
        code: u16,
        reason: String,
        contacts: Vec<(String, Option<u32>, Option<u16>)>,
        min_expires: Option<u32>,
        raw: Vec<u8>,
    }

    impl Fixture {
        fn new() -> Self {
            Self {
                reg: Registrar::new(RegistrarConfig::default()),
                store: MemoryLocationStore::new(),
            }
        }

        fn send(&self, now_secs: u64, req: &[u8]) -> Resp {
            self.send_from(now_secs, req, peer(5060))
        }

        fn send_from(&self, now_secs: u64, req: &[u8], source: Peer) -> Resp {
            let msg = Message::parse(req, &Limits::DEFAULT).expect("request parses");
            let mut out = Vec::new();
            let code = self.reg.handle_register(
                Instant::from_secs(now_secs),
                &msg,
                source,
                &self.store,
                &mut out,
            );
            let resp = Message::parse(&out, &Limits::DEFAULT).expect("response parses");
            assert_eq!(resp.status(), Some(code));
            let contacts = resp
                .contacts()
                .map(|c| {
                    let c = c.expect("response contact parses");
                    let uri = c.addr().expect("not *").uri.as_bytes();
                    (
                        String::from_utf8_lossy(uri).into_owned(),
                        c.expires(),
                        c.q(),
                    )
                })
                .collect();
            Resp {
                code,
                reason: String::from_utf8_lossy(resp.reason().unwrap_or_default()).into_owned(),
                contacts,
                min_expires: resp.min_expires().expect("Min-Expires parses"),
                raw: out.clone(),
            }
        }

        fn bindings(&self, now_secs: u64) -> Vec<Binding> {
            let mut v = Vec::new();
            self.store.lookup(AOR, Instant::from_secs(now_secs), &mut v);
            v
        }
    }

    fn contacts(list: &[(&str, u32)]) -> Vec<(String, Option<u32>, Option<u16>)> {
        list.iter()
            .map(|(u, e)| ((*u).to_owned(), Some(*e), None))
            .collect()
    }

    #[test]
    fn register_refresh_and_remove_one_contact() {
        let f = Fixture::new();
        let r = f.send(100, &register("c1", 1, &["<sip:alice@192.0.2.1>"], &[]));
        assert_eq!((r.code, r.reason.as_str()), (200, "OK"));
        assert_eq!(r.contacts, contacts(&[("sip:alice@192.0.2.1", 3600)]));
        let b = f.bindings(100);
        assert_eq!(b.len(), 1);
        assert_eq!(&*b[0].contact, b"sip:alice@192.0.2.1");
        assert_eq!(b[0].expires_at, Instant::from_secs(3700));
        assert_eq!(b[0].q, 1000);
        assert_eq!(&*b[0].call_id, b"c1");
        assert_eq!(b[0].cseq, 1);
        assert_eq!(b[0].source, Some(peer(5060)));

        // 1000 s later the binding shows 2600 s left; a refresh from a new port resets it.
        let r = f.send(1100, &register("c1", 2, &[], &[]));
        assert_eq!(r.contacts, contacts(&[("sip:alice@192.0.2.1", 2600)]));
        let r = f.send_from(
            1100,
            &register("c1", 3, &["<sip:alice@192.0.2.1>;expires=1800"], &[]),
            peer(5070),
        );
        assert_eq!(r.contacts, contacts(&[("sip:alice@192.0.2.1", 1800)]));
        let b = f.bindings(1100);
        assert_eq!((b[0].cseq, b[0].source), (3, Some(peer(5070))));
        assert_eq!(b[0].expires_at, Instant::from_secs(2900));

        // Expires 0 removes it; the 200 lists nothing.
        let r = f.send(
            1200,
            &register("c1", 4, &["<sip:alice@192.0.2.1>;expires=0"], &[]),
        );
        assert_eq!(r.code, 200);
        assert!(r.contacts.is_empty());
        assert!(f.store.is_empty());
    }

    #[test]
    fn several_contacts_in_one_and_in_separate_requests() {
        let f = Fixture::new();
        let r = f.send(
            0,
            &register(
                "c1",
                1,
                &["<sip:a@10.0.0.1>, <sip:a@10.0.0.2>;expires=120"],
                &["Expires: 600"],
            ),
        );
        assert_eq!(
            r.contacts,
            contacts(&[("sip:a@10.0.0.1", 600), ("sip:a@10.0.0.2", 120)])
        );
        // Another device (other Call-ID) adds a third; the 200 lists all three.
        let r = f.send(10, &register("c2", 1, &["<sip:a@10.0.0.3>"], &[]));
        assert_eq!(
            r.contacts,
            contacts(&[
                ("sip:a@10.0.0.1", 590),
                ("sip:a@10.0.0.2", 110),
                ("sip:a@10.0.0.3", 3600)
            ])
        );
        // Remove one, refresh another, in one request.
        let r = f.send(
            20,
            &register(
                "c1",
                2,
                &["<sip:a@10.0.0.1>;expires=0", "<sip:a@10.0.0.2>;expires=300"],
                &[],
            ),
        );
        assert_eq!(
            r.contacts,
            contacts(&[("sip:a@10.0.0.2", 300), ("sip:a@10.0.0.3", 3590)])
        );
        assert_eq!(f.store.len(), 2);
    }

    #[test]
    fn expiry_from_param_header_default_and_clamp() {
        let f = Fixture::new();
        let r = f.send(
            0,
            &register(
                "c1",
                1,
                &[
                    "<sip:a@10.0.0.1>;expires=90",
                    "<sip:a@10.0.0.2>",
                    "<sip:a@10.0.0.3>;expires=99999",
                ],
                &["Expires: 240"],
            ),
        );
        assert_eq!(
            r.contacts,
            contacts(&[
                ("sip:a@10.0.0.1", 90),
                ("sip:a@10.0.0.2", 240),
                ("sip:a@10.0.0.3", 7200)
            ])
        );
        let r = f.send(0, &register("c2", 1, &["<sip:a@10.0.0.4>"], &[]));
        assert_eq!(
            r.contacts.last(),
            Some(&("sip:a@10.0.0.4".to_owned(), Some(3600), None))
        );
        let r = f.send(
            0,
            &register("c3", 1, &["<sip:a@10.0.0.5>"], &["Expires: 100000"]),
        );
        assert_eq!(
            r.contacts.last(),
            Some(&("sip:a@10.0.0.5".to_owned(), Some(7200), None))
        );
    }

    #[test]
    fn too_brief_interval_is_423_with_min_expires() {
        let f = Fixture::new();
        f.send(0, &register("c1", 1, &["<sip:a@10.0.0.1>"], &[]));
        let before = f.bindings(0);
        let r = f.send(
            0,
            &register(
                "c1",
                2,
                &["<sip:a@10.0.0.1>", "<sip:a@10.0.0.2>;expires=30"],
                &[],
            ),
        );
        assert_eq!((r.code, r.reason.as_str()), (423, "Interval Too Brief"));
        assert_eq!(r.min_expires, Some(60));
        assert!(r.contacts.is_empty());
        assert_eq!(f.bindings(0), before);
        // From the Expires header too; exactly the minimum is fine.
        let r = f.send(
            0,
            &register("c1", 3, &["<sip:a@10.0.0.2>"], &["Expires: 59"]),
        );
        assert_eq!((r.code, r.min_expires), (423, Some(60)));
        let r = f.send(
            0,
            &register("c1", 4, &["<sip:a@10.0.0.2>"], &["Expires: 60"]),
        );
        assert_eq!(r.code, 200);
        // A configured minimum above one hour never refuses an hour or more (step 6).
        let strict = Fixture {
            reg: Registrar::new(RegistrarConfig {
                min_expires: 5000,
                max_expires: 10000,
                default_expires: 6000,
                max_contacts_per_aor: 10,
            }),
            store: MemoryLocationStore::new(),
        };
        let r = strict.send(0, &register("c1", 1, &["<sip:a@h>;expires=3600"], &[]));
        assert_eq!(r.code, 200);
        let r = strict.send(0, &register("c1", 2, &["<sip:a@h>;expires=3599"], &[]));
        assert_eq!((r.code, r.min_expires), (423, Some(5000)));
    }

    #[test]
    fn star_with_expires_zero_removes_all() {
        let f = Fixture::new();
        f.send(
            0,
            &register("c1", 1, &["<sip:a@10.0.0.1>", "<sip:a@10.0.0.2>"], &[]),
        );
        f.send(0, &register("c2", 7, &["<sip:a@10.0.0.3>"], &[]));
        assert_eq!(f.store.len(), 3);
        let r = f.send(10, &register("c1", 2, &["*"], &["Expires: 0"]));
        assert_eq!(r.code, 200);
        assert!(r.contacts.is_empty());
        assert!(f.store.is_empty());
    }

    #[test]
    fn misused_star_is_400() {
        let f = Fixture::new();
        f.send(0, &register("c1", 1, &["<sip:a@10.0.0.1>"], &[]));
        for (contacts, extra, reason) in [
            (
                &["*"][..],
                &["Expires: 10"][..],
                "Contact * Requires Expires: 0",
            ),
            (&["*"][..], &[][..], "Contact * Requires Expires: 0"),
            (
                &["*", "<sip:a@10.0.0.1>"][..],
                &["Expires: 0"][..],
                "Contact * Must Be The Only Contact",
            ),
            (
                &["<sip:a@10.0.0.1>, *"][..],
                &["Expires: 0"][..],
                "Contact * Must Be The Only Contact",
            ),
        ] {
            let r = f.send(0, &register("c1", 5, contacts, extra));
            assert_eq!((r.code, r.reason.as_str()), (400, reason), "{contacts:?}");
        }
        assert_eq!(f.store.len(), 1);
    }

    #[test]
    fn same_call_id_with_cseq_not_higher_is_500_and_changes_nothing() {
        let f = Fixture::new();
        f.send(0, &register("c1", 5, &["<sip:a@10.0.0.1>"], &[]));
        let before = f.bindings(0);
        for cseq in [5, 4] {
            let r = f.send(
                10,
                &register(
                    "c1",
                    cseq,
                    &["<sip:a@10.0.0.2>", "<sip:a@10.0.0.1>;expires=0"],
                    &[],
                ),
            );
            assert_eq!(r.code, 500, "cseq {cseq}");
            assert!(r.reason.starts_with("Out-of-Order"));
            assert_eq!(f.bindings(10), before);
        }
        // `*` obeys the same rule.
        let r = f.send(10, &register("c1", 5, &["*"], &["Expires: 0"]));
        assert_eq!(r.code, 500);
        assert_eq!(f.store.len(), 1);
        // A higher CSeq succeeds.
        let r = f.send(10, &register("c1", 6, &["<sip:a@10.0.0.1>;expires=0"], &[]));
        assert_eq!(r.code, 200);
        assert!(f.store.is_empty());
    }

    #[test]
    fn a_replay_of_the_request_that_wrote_the_bindings_is_200() {
        let f = Fixture::new();
        let first = register("c1", 5, &["<sip:a@10.0.0.1>", "<sip:a@10.0.0.3>"], &[]);
        assert_eq!(f.send(0, &first).code, 200);
        let before = f.bindings(0);
        // The same request again (its transaction lost in a restart): 200, nothing changes.
        let r = f.send(3, &first);
        assert_eq!(r.code, 200);
        assert_eq!(f.bindings(3), before);
        // A de-registration replayed after it took effect: 200 as well.
        let gone = register("c1", 6, &["<sip:a@10.0.0.3>;expires=0"], &[]);
        assert_eq!(f.send(4, &gone).code, 200);
        assert_eq!(f.send(5, &gone).code, 200);
        assert_eq!(f.bindings(5).len(), 1);
        // Same Call-ID and CSeq as the stored binding, but a contact that request did not
        // add: not a replay.
        let other = register("c1", 5, &["<sip:a@10.0.0.1>", "<sip:a@10.0.0.9>"], &[]);
        assert_eq!(f.send(6, &other).code, 500);
        // The first request again, now that one of its contacts is gone: out of order.
        assert_eq!(f.send(7, &first).code, 500);
        assert_eq!(f.bindings(7).len(), 1);
    }

    #[test]
    fn different_call_id_replaces_whatever_the_cseq() {
        let f = Fixture::new();
        f.send(0, &register("c1", 50, &["<sip:a@10.0.0.1>;q=0.5"], &[]));
        let r = f.send_from(
            10,
            &register(
                "c2",
                1,
                &["<sip:a@10.0.0.1;transport=udp>;expires=120"],
                &[],
            ),
            peer(6000),
        );
        assert_eq!(r.code, 200);
        // Transport present on one side only: a different contact (§19.1.4) -> two bindings.
        assert_eq!(r.contacts.len(), 2);
        let r = f.send_from(
            20,
            &register("c3", 1, &["<sip:a@10.0.0.1>;expires=120"], &[]),
            peer(6001),
        );
        assert_eq!(
            r.contacts,
            contacts(&[
                ("sip:a@10.0.0.1", 120),
                ("sip:a@10.0.0.1;transport=udp", 110)
            ])
        );
        let b = f.bindings(20);
        assert_eq!((&*b[0].call_id, b[0].cseq, b[0].q), (&b"c3"[..], 1, 1000));
        assert_eq!(b[0].source, Some(peer(6001)));
    }

    #[test]
    fn contacts_match_per_rfc_3261_uri_comparison() {
        let f = Fixture::new();
        f.send(
            0,
            &register("c1", 1, &["<sip:Bob@Host.Example.COM;foo=1>"], &[]),
        );
        // Host case and a parameter present on one side only do not matter: a refresh.
        let r = f.send(
            0,
            &register("c2", 1, &["<sip:%42ob@host.example.com;bar=2>"], &[]),
        );
        assert_eq!(
            r.contacts,
            contacts(&[("sip:%42ob@host.example.com;bar=2", 3600)])
        );
        // User case does.
        let r = f.send(0, &register("c3", 1, &["<sip:bob@host.example.com>"], &[]));
        assert_eq!(r.contacts.len(), 2);

        let p = |s: &'static str| Uri::parse(s.as_bytes()).expect("uri");
        assert!(uri_equivalent(
            &p("sip:a@H;Transport=TCP"),
            &p("sip:a@h;transport=tcp")
        ));
        assert!(!uri_equivalent(&p("sip:a@h"), &p("sip:a@h:5060")));
        assert!(!uri_equivalent(&p("sip:a@h"), &p("sips:a@h")));
        assert!(!uri_equivalent(&p("sip:a@h;foo=1"), &p("sip:a@h;foo=2")));
        assert!(!uri_equivalent(&p("sip:a@h;maddr=1.2.3.4"), &p("sip:a@h")));
        assert!(!uri_equivalent(&p("sip:a@h?x=1"), &p("sip:a@h")));
        assert!(uri_equivalent(&p("sip:a@h?x=%41"), &p("sip:a@h?X=a")));
        assert!(!uri_equivalent(
            &p("sip:a@127.0.0.1"),
            &p("sip:a@localhost")
        ));
        assert!(uri_equivalent(&p("tel:+1555"), &p("TEL:+1555")));
    }

    #[test]
    fn register_without_contact_is_a_query() {
        let f = Fixture::new();
        let r = f.send(0, &register("c9", 1, &[], &[]));
        assert_eq!(r.code, 200);
        assert!(r.contacts.is_empty());
        f.send(
            0,
            &register("c1", 1, &["<sip:a@10.0.0.1>;q=0.3"], &["Expires: 300"]),
        );
        let r = f.send(100, &register("c9", 2, &[], &[]));
        assert_eq!(
            r.contacts,
            vec![("sip:a@10.0.0.1".to_owned(), Some(200), Some(300))]
        );
        assert_eq!(f.store.len(), 1);
    }

    #[test]
    fn bindings_expire() {
        let f = Fixture::new();
        f.send(
            0,
            &register("c1", 1, &["<sip:a@10.0.0.1>;expires=100"], &[]),
        );
        f.send(
            0,
            &register("c2", 1, &["<sip:a@10.0.0.2>;expires=200"], &[]),
        );
        assert_eq!(f.bindings(99).len(), 2);
        assert_eq!(f.bindings(100).len(), 1);
        assert!(f.bindings(200).is_empty());
        // Remaining time is rounded up: at 99.5 s the first shows expires=1.
        let msg = register("c9", 1, &[], &[]);
        let msg = Message::parse(&msg, &Limits::DEFAULT).expect("parses");
        let mut out = Vec::new();
        f.reg.handle_register(
            Instant::from_millis(99_500),
            &msg,
            peer(1),
            &f.store,
            &mut out,
        );
        let resp = Message::parse(&out, &Limits::DEFAULT).expect("parses");
        let first = resp.contacts().next().expect("one").expect("parses");
        assert_eq!(first.expires(), Some(1));

        assert_eq!(f.store.purge_expired(Instant::from_secs(150)), 1);
        assert_eq!(f.store.len(), 1);
        assert_eq!(f.store.purge_expired(Instant::from_secs(200)), 1);
        assert!(f.store.is_empty());
        let r = f.send(300, &register("c9", 2, &[], &[]));
        assert!(r.contacts.is_empty());
    }

    #[test]
    fn q_values_round_trip() {
        let f = Fixture::new();
        let r = f.send(
            0,
            &register(
                "c1",
                1,
                &["<sip:a@10.0.0.1>;q=0.5, <sip:a@10.0.0.2>;q=1, <sip:a@10.0.0.3>;q=0.05, <sip:a@10.0.0.4>;q=0"],
                &[],
            ),
        );
        let q: Vec<_> = r.contacts.iter().map(|c| c.2).collect();
        assert_eq!(q, [Some(500), None, Some(50), Some(0)]);
        let text = String::from_utf8_lossy(&r.raw).into_owned();
        assert!(
            text.contains("Contact: <sip:a@10.0.0.1>;expires=3600;q=0.5\r\n"),
            "{text}"
        );
        assert!(text.contains("Contact: <sip:a@10.0.0.3>;expires=3600;q=0.05\r\n"));
        assert!(text.contains("Contact: <sip:a@10.0.0.4>;expires=3600;q=0\r\n"));
        let stored: Vec<u16> = f.bindings(0).iter().map(|b| b.q).collect();
        assert_eq!(stored, [500, 1000, 50, 0]);
    }

    #[test]
    fn too_many_contacts_is_403_but_refresh_is_allowed() {
        let f = Fixture {
            reg: Registrar::new(RegistrarConfig {
                max_contacts_per_aor: 2,
                ..RegistrarConfig::default()
            }),
            store: MemoryLocationStore::new(),
        };
        let r = f.send(
            0,
            &register("c1", 1, &["<sip:a@10.0.0.1>", "<sip:a@10.0.0.2>"], &[]),
        );
        assert_eq!(r.code, 200);
        let r = f.send(0, &register("c2", 1, &["<sip:a@10.0.0.3>"], &[]));
        assert_eq!((r.code, r.reason.as_str()), (403, "Too Many Contacts"));
        assert_eq!(f.store.len(), 2);
        // Replacing one binding by another in one request stays within the limit.
        let r = f.send(
            0,
            &register(
                "c1",
                2,
                &["<sip:a@10.0.0.1>;expires=0", "<sip:a@10.0.0.3>"],
                &[],
            ),
        );
        assert_eq!(r.code, 200);
        let r = f.send(
            0,
            &register("c1", 3, &["<sip:a@10.0.0.2>", "<sip:a@10.0.0.3>"], &[]),
        );
        assert_eq!(r.code, 200);
    }

    #[test]
    fn malformed_requests_get_400_with_the_parse_reason() {
        let f = Fixture::new();
        let base = register("c1", 1, &["<sip:a@10.0.0.1>"], &[]);
        let text = String::from_utf8_lossy(&base).into_owned();
        for (from, to, code, reason) in [
            ("Call-ID: c1\r\n", "", 400, "Missing Call-ID"),
            ("CSeq: 1 REGISTER\r\n", "", 400, "Missing CSeq"),
            ("CSeq: 1 REGISTER", "CSeq: x REGISTER", 400, "Bad CSeq"),
            ("CSeq: 1 REGISTER", "CSeq: 1 INVITE", 400, "Bad CSeq"),
            (
                "To: Alice <sip:alice@example.com>\r\n",
                "",
                400,
                "Missing To",
            ),
            (
                "To: Alice <sip:alice@example.com>",
                "To: <sip:alice@example.com",
                400,
                "Bad To",
            ),
            (
                "Contact: <sip:a@10.0.0.1>",
                "Contact: <sip:a@10.0.0.1>;q=2",
                400,
                "Bad Contact",
            ),
            (
                "Content-Length",
                "Expires: soon\r\nContent-Length",
                400,
                "Bad Expires",
            ),
            (
                "To: Alice <sip:alice@example.com>",
                "To: <tel:+15551234>",
                404,
                "Not Found",
            ),
            (
                "To: Alice <sip:alice@example.com>",
                "To: <sip:example.com>",
                404,
                "Not Found",
            ),
            (
                "Content-Length",
                "Require: gruu, outbound\r\nContent-Length",
                420,
                "Bad Extension",
            ),
        ] {
            let req = text.replacen(from, to, 1);
            let r = f.send(0, req.as_bytes());
            assert_eq!(
                (r.code, r.reason.as_str()),
                (code, reason),
                "{from} -> {to}"
            );
        }
        let req = text.replacen(
            "Content-Length",
            "Require: gruu, outbound\r\nContent-Length",
            1,
        );
        let r = f.send(0, req.as_bytes());
        assert!(String::from_utf8_lossy(&r.raw).contains("\r\nUnsupported: gruu, outbound\r\n"));
        let req = text.replace("REGISTER", "OPTIONS");
        let r = f.send(0, req.as_bytes());
        assert_eq!(r.code, 405);
        assert!(String::from_utf8_lossy(&r.raw).contains("\r\nAllow: REGISTER\r\n"));
        assert!(f.store.is_empty());
    }

    #[test]
    fn response_is_complete_and_tagged_deterministically() {
        let f = Fixture::new();
        let req = register(
            "c1",
            1,
            &["\"A\" <sip:a@10.0.0.1;transport=tcp>;expires=600;+sip.instance=\"<urn:x>\""],
            &[],
        );
        let r1 = f.send(0, &req);
        let r2 = f.send(0, &register("c1", 2, &[], &[]));
        let resp = Message::parse(&r1.raw, &Limits::DEFAULT).expect("parses");
        assert_eq!(resp.call_id().expect("call-id"), b"c1");
        let cseq = resp.cseq().expect("cseq");
        assert_eq!((cseq.seq, cseq.method), (1, Method::Register));
        assert_eq!(resp.headers_of(HeaderName::Via).count(), 1);
        let tag1 = resp.to().expect("to").tag().map(<[u8]>::to_vec);
        let tag2 = Message::parse(&r2.raw, &Limits::DEFAULT)
            .expect("parses")
            .to()
            .expect("to")
            .tag()
            .map(<[u8]>::to_vec);
        assert_eq!(tag1.as_ref().map(Vec::len), Some(16));
        // Same Call-ID and From: same tag; a response to a different Call-ID differs.
        assert_eq!(tag1, tag2);
        let r3 = f.send(0, &register("c2", 1, &[], &[]));
        let tag3 = Message::parse(&r3.raw, &Limits::DEFAULT)
            .expect("parses")
            .to()
            .expect("to")
            .tag()
            .map(<[u8]>::to_vec);
        assert_ne!(tag1, tag3);
        // The 200's Contact list is exactly the store's bindings.
        let stored: Vec<_> = f
            .bindings(0)
            .iter()
            .map(|b| {
                (
                    String::from_utf8_lossy(&b.contact).into_owned(),
                    Some(600),
                    None,
                )
            })
            .collect();
        assert_eq!(r1.contacts, stored);
        assert_eq!(stored[0].0, "sip:a@10.0.0.1;transport=tcp");
    }

    fn key(s: &str) -> Option<String> {
        let uri = Uri::parse(s.as_bytes()).expect("uri parses");
        let mut out = b"junk".to_vec();
        let ok = Registrar::aor_key(&uri, &mut out);
        ok.then(|| String::from_utf8(out).expect("utf-8"))
    }

    #[test]
    fn aor_key_canonicalisation() {
        assert_eq!(
            key("sip:alice@example.com").as_deref(),
            Some("alice@example.com")
        );
        assert_eq!(
            key("sip:%61lice@Example.COM").as_deref(),
            Some("alice@example.com")
        );
        assert_eq!(
            key("sip:Alice@example.com").as_deref(),
            Some("Alice@example.com")
        );
        assert_eq!(
            key("sip:alice@example.com:5060").as_deref(),
            Some("alice@example.com")
        );
        assert_eq!(
            key("sips:alice@example.com:5061").as_deref(),
            Some("alice@example.com")
        );
        assert_eq!(
            key("sips:alice@example.com").as_deref(),
            Some("alice@example.com")
        );
        assert_eq!(
            key("sip:alice@example.com:5061").as_deref(),
            Some("alice@example.com:5061")
        );
        assert_eq!(
            key("sips:alice@example.com:5060").as_deref(),
            Some("alice@example.com:5060")
        );
        assert_eq!(
            key("sip:alice:secret@example.com;transport=tcp;user=phone?subject=x").as_deref(),
            Some("alice@example.com")
        );
        assert_eq!(
            key("sip:bob@[0:0::1]:5070").as_deref(),
            Some("bob@[::1]:5070")
        );
        assert_eq!(key("sip:bob@192.0.2.7").as_deref(), Some("bob@192.0.2.7"));
        assert_eq!(key("sip:a%40b@h").as_deref(), Some("a@b@h"));
        assert_eq!(key("sip:example.com"), None);
        assert_eq!(key("tel:+1-555-0100"), None);
        assert_eq!(key("urn:service:sos"), None);
        let uri = Uri::parse(b"tel:+1").expect("uri");
        let mut out = b"junk".to_vec();
        assert!(!Registrar::aor_key(&uri, &mut out));
        assert!(out.is_empty());
    }

    #[test]
    fn config_is_normalised() {
        let reg = Registrar::new(RegistrarConfig {
            min_expires: 100,
            max_expires: 50,
            default_expires: 10,
            max_contacts_per_aor: 1,
        });
        assert_eq!(reg.config().max_expires, 100);
        assert_eq!(reg.config().default_expires, 100);
    }
}
