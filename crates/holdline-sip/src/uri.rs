//! URIs: `sip:`/`sips:` (RFC 3261 §19.1, §25.1), `tel:` (RFC 3966) and any other absolute URI
//! kept as written.
//!
//! Parsing validates the whole text once and records where each part is; nothing is copied.
//! User, password, parameters and headers keep their `%XX` escapes; [`percent_decode`] (or
//! [`Uri::user_unescaped`]) resolves them when a caller needs the decoded bytes.

use core::fmt;
use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use holdline_base::Transport;
use memchr::memchr;

use crate::scan::{Cursor, Params};
use crate::{ParseError, ParseErrorKind};

/// A URI scheme, recognised case-insensitively.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scheme<'a> {
    /// `sip:`.
    Sip,
    /// `sips:` (SIP over TLS end to end).
    Sips,
    /// `tel:` (RFC 3966).
    Tel,
    /// Any other scheme, as written (without the `:`).
    Other(&'a [u8]),
}

impl<'a> Scheme<'a> {
    /// The scheme as written on the wire (`sip`, `sips`, `tel` in lower case for the known ones).
    pub fn as_bytes(&self) -> &'a [u8] {
        match self {
            Self::Sip => b"sip",
            Self::Sips => b"sips",
            Self::Tel => b"tel",
            Self::Other(s) => s,
        }
    }
}

/// The host of a SIP URI or a Via `sent-by`: a domain name or an IP address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Host<'a> {
    /// A host name (`alphanum`, `-` and `.`), as written. Host names compare
    /// case-insensitively (derived `PartialEq` compares bytes).
    Name(&'a [u8]),
    /// A dotted-quad IPv4 address.
    V4(Ipv4Addr),
    /// An IPv6 address (written as a `[...]` reference).
    V6(Ipv6Addr),
}

impl<'a> Host<'a> {
    /// Parses `hostname / IPv4address / IPv6reference` (RFC 3261 §25.1). A dotted quad that is
    /// a valid IPv4 address becomes [`Host::V4`]; IPv6 addresses must be in brackets. Errors
    /// are [`ParseErrorKind::BadUri`] at offset 0.
    pub fn parse(s: &'a [u8]) -> Result<Self, ParseError> {
        let bad = || ParseError::new(ParseErrorKind::BadUri, 0);
        if let [b'[', inner @ .., b']'] = s {
            return parse_ipv6(inner).map(Self::V6).ok_or_else(bad);
        }
        if let Some(v4) = parse_ipv4(s) {
            return Ok(Self::V4(v4));
        }
        if is_hostname(s) {
            Ok(Self::Name(s))
        } else {
            Err(bad())
        }
    }

    /// The address, if the host is an IP address.
    pub fn ip(&self) -> Option<IpAddr> {
        match *self {
            Self::Name(_) => None,
            Self::V4(a) => Some(IpAddr::V4(a)),
            Self::V6(a) => Some(IpAddr::V6(a)),
        }
    }

    /// The name, if the host is a host name.
    pub fn name(&self) -> Option<&'a [u8]> {
        match *self {
            Self::Name(n) => Some(n),
            _ => None,
        }
    }

    /// Whether the host is an IP address.
    pub fn is_ip(&self) -> bool {
        !matches!(self, Self::Name(_))
    }
}

impl fmt::Display for Host<'_> {
    /// Writes the host as it would appear in a URI (IPv6 in brackets).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(n) => f.write_str(&String::from_utf8_lossy(n)),
            Self::V4(a) => write!(f, "{a}"),
            Self::V6(a) => write!(f, "[{a}]"),
        }
    }
}

/// A host and an optional port, as in a URI's `hostport` or a Via's `sent-by`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HostPort<'a> {
    /// The host.
    pub host: Host<'a>,
    /// The port, if one was written.
    pub port: Option<u16>,
}

impl HostPort<'_> {
    /// The port, or `default` when none was written.
    pub fn port_or(&self, default: u16) -> u16 {
        self.port.unwrap_or(default)
    }
}

/// A parsed URI borrowing its text.
///
/// Which parts are present depends on the scheme: `sip:`/`sips:` URIs have a host and may
/// have user, password, port, parameters and headers; `tel:` URIs have a [`number`](Self::number)
/// and parameters; other schemes keep everything after the `:` as [`opaque`](Self::opaque).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Uri<'a> {
    raw: &'a [u8],
    scheme: Scheme<'a>,
    user: Option<&'a [u8]>,
    password: Option<&'a [u8]>,
    host: Option<Host<'a>>,
    host_raw: Option<&'a [u8]>,
    port: Option<u16>,
    params: Params<'a>,
    headers: Option<&'a [u8]>,
    /// The tel number or the opaque part of another scheme.
    rest: Option<&'a [u8]>,
    /// Whether `params` has an `lr` parameter (a function of `raw`, like every other field).
    lr: bool,
}

impl fmt::Debug for Uri<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Uri")
            .field("raw", &self.raw)
            .field("scheme", &self.scheme)
            .field("user", &self.user)
            .field("password", &self.password)
            .field("host", &self.host)
            .field("host_raw", &self.host_raw)
            .field("port", &self.port)
            .field("params", &self.params)
            .field("headers", &self.headers)
            .field("rest", &self.rest)
            .finish()
    }
}

impl<'a> Uri<'a> {
    /// Parses a URI (no surrounding white space or angle brackets). Errors are
    /// [`ParseErrorKind::BadUri`] (or [`ParseErrorKind::BadParam`] for a malformed `maddr` or
    /// `ttl`) with offsets relative to `s`.
    pub fn parse(s: &'a [u8]) -> Result<Self, ParseError> {
        if let Some(uri) = Self::parse_sip_fast(s) {
            return Ok(uri);
        }
        Self::parse_strict(s)
    }

    /// The common `sip:[user@]host[:port][;params]` shape in one pass: lower-case scheme, no
    /// password, escapes, IPv6 reference, `maddr`/`ttl` or `?headers`. Returns `None` for
    /// anything else (including every error), which [`Self::parse_strict`] then handles; what
    /// it accepts is exactly what the strict parser accepts, with the same result.
    #[inline]
    fn parse_sip_fast(s: &'a [u8]) -> Option<Self> {
        match Self::parse_sip_prefix(s, 0) {
            Some((uri, end)) if end == s.len() => Some(uri),
            _ => None,
        }
    }

    /// Parses the fast-path shape (see [`Self::parse_sip_fast`]) from `start`, stopping at the
    /// first byte that cannot continue it; returns the URI made of `s[start..end]` and `end`.
    /// The bytes it consumes never include `@` after the user, `>`, white space or `?`, so
    /// when the caller checks what follows (the end of the text, or the `>` of a name-addr),
    /// the result is what [`Self::parse_strict`] gives for `s[start..end]`.
    pub(crate) fn parse_sip_prefix(s: &'a [u8], start: usize) -> Option<(Self, usize)> {
        let (scheme, body) = match s.get(start..)? {
            [b's', b'i', b'p', b':', ..] => (Scheme::Sip, start + 4),
            [b's', b'i', b'p', b's', b':', ..] => (Scheme::Sips, start + 5),
            _ => return None,
        };
        // A host-name run; if `@` follows (directly, or after more user characters), it was
        // the user. The first `@` ends the user in the strict parser too.
        let (mut i, mut host) = scan_host(s, body);
        let mut user = None;
        let user_end = match s.get(i) {
            Some(b'@') => Some(i),
            Some(&b) if has(b, USER) => {
                let mut j = i;
                while s.get(j).is_some_and(|&b| has(b, USER)) {
                    j += 1;
                }
                (s.get(j) == Some(&b'@')).then_some(j)
            }
            _ => None,
        };
        let mut host_start = body;
        if let Some(at) = user_end {
            if at == body {
                return None;
            }
            user = s.get(body..at);
            host_start = at + 1;
            (i, host) = scan_host(s, host_start);
        }
        let host = host?;
        let host_raw = s.get(host_start..i)?;
        let mut port = None;
        if s.get(i) == Some(&b':') {
            i += 1;
            let digits_start = i;
            while s.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            let p = crate::scan::parse_u32(s.get(digits_start..i)?, u32::from(u16::MAX))?;
            port = u16::try_from(p).ok();
        }
        let params_start = i;
        let mut lr = false;
        while s.get(i) == Some(&b';') {
            i += 1;
            let name_start = i;
            while s.get(i).is_some_and(|&b| has(b, PARAM)) {
                i += 1;
            }
            let name = s.get(name_start..i)?;
            if name.is_empty() {
                return None;
            }
            if s.get(i) == Some(&b'=') {
                i += 1;
                let value_start = i;
                while s.get(i).is_some_and(|&b| has(b, PARAM)) {
                    i += 1;
                }
                if i == value_start {
                    return None;
                }
            }
            match name.len() {
                2 if name.eq_ignore_ascii_case(b"lr") => lr = true,
                3 if name.eq_ignore_ascii_case(b"ttl") => return None,
                5 if name.eq_ignore_ascii_case(b"maddr") => return None,
                _ => {}
            }
        }
        let uri = Self {
            raw: s.get(start..i)?,
            scheme,
            user,
            password: None,
            host: Some(host),
            host_raw: Some(host_raw),
            port,
            params: Params::from_raw(s.get(params_start..i)?),
            headers: None,
            rest: None,
            lr,
        };
        Some((uri, i))
    }

    /// The full parser: every scheme, every error with its offset.
    fn parse_strict(s: &'a [u8]) -> Result<Self, ParseError> {
        let colon =
            memchr(b':', s).ok_or_else(|| ParseError::new(ParseErrorKind::BadUri, s.len()))?;
        let name = s.get(..colon).unwrap_or_default();
        let scheme_ok = name.first().is_some_and(u8::is_ascii_alphabetic)
            && name
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
        if !scheme_ok {
            return Err(ParseError::new(ParseErrorKind::BadUri, 0));
        }
        let scheme = if name.eq_ignore_ascii_case(b"sip") {
            Scheme::Sip
        } else if name.eq_ignore_ascii_case(b"sips") {
            Scheme::Sips
        } else if name.eq_ignore_ascii_case(b"tel") {
            Scheme::Tel
        } else {
            Scheme::Other(name)
        };
        let mut uri = Self {
            raw: s,
            scheme,
            user: None,
            password: None,
            host: None,
            host_raw: None,
            port: None,
            params: Params::default(),
            headers: None,
            rest: None,
            lr: false,
        };
        let body = colon + 1;
        match scheme {
            Scheme::Sip | Scheme::Sips => uri.parse_sip(body)?,
            Scheme::Tel => uri.parse_tel(body)?,
            Scheme::Other(_) => uri.parse_other(body)?,
        }
        uri.lr = uri.params.contains("lr");
        Ok(uri)
    }

    fn parse_sip(&mut self, body: usize) -> Result<(), ParseError> {
        let s = self.raw;
        let rest = s.get(body..).unwrap_or_default();
        let mut host_start = body;
        if let Some(at) = memchr(b'@', rest) {
            let userinfo = rest.get(..at).unwrap_or_default();
            let (user, password) = match memchr(b':', userinfo) {
                Some(c) => (
                    userinfo.get(..c).unwrap_or_default(),
                    Some(userinfo.get(c + 1..).unwrap_or_default()),
                ),
                None => (userinfo, None),
            };
            if user.is_empty() {
                return Err(ParseError::new(ParseErrorKind::BadUri, body));
            }
            check_escaped(user, body, is_user_char)?;
            if let Some(p) = password {
                check_escaped(p, body + user.len() + 1, is_password_char)?;
            }
            self.user = Some(user);
            self.password = password;
            host_start = body + at + 1;
        }

        let mut c = Cursor::new(s);
        skip_to(&mut c, host_start);
        let bad = |at: usize| ParseError::new(ParseErrorKind::BadUri, at);
        let host_raw = if c.peek() == Some(b'[') {
            c.bump();
            c.take_while(|b| b != b']');
            if !c.eat(b']') {
                return Err(bad(host_start));
            }
            s.get(host_start..c.pos()).unwrap_or_default()
        } else {
            c.take_while(|b| has(b, HOST))
        };
        if host_raw.is_empty() {
            return Err(bad(host_start));
        }
        self.host = Some(Host::parse(host_raw).map_err(|e| e.shifted(host_start))?);
        self.host_raw = Some(host_raw);

        if c.eat(b':') {
            let at = c.pos();
            let digits = c.take_while(|b| b.is_ascii_digit());
            let port =
                crate::scan::parse_u32(digits, u32::from(u16::MAX)).ok_or_else(|| bad(at))?;
            self.port = u16::try_from(port).ok();
        }

        self.params = uri_params(&mut c)?;
        check_uri_params(&self.params, s)?;

        if c.eat(b'?') {
            let start = c.pos();
            let headers = c.rest();
            check_headers(headers, start)?;
            skip_to(&mut c, s.len());
            self.headers = Some(headers);
        }
        if !c.is_empty() {
            return Err(bad(c.pos()));
        }
        Ok(())
    }

    fn parse_tel(&mut self, body: usize) -> Result<(), ParseError> {
        let s = self.raw;
        let mut c = Cursor::new(s);
        skip_to(&mut c, body);
        let number = c.take_while(|b| {
            b.is_ascii_hexdigit() || matches!(b, b'*' | b'#' | b'+' | b'-' | b'.' | b'(' | b')')
        });
        if !is_tel_number(number) {
            return Err(ParseError::new(ParseErrorKind::BadUri, body));
        }
        self.rest = Some(number);
        self.params = uri_params(&mut c)?;
        if !c.is_empty() {
            return Err(c.error(ParseErrorKind::BadUri));
        }
        Ok(())
    }

    fn parse_other(&mut self, body: usize) -> Result<(), ParseError> {
        let opaque = self.raw.get(body..).unwrap_or_default();
        if opaque.is_empty() {
            return Err(ParseError::new(ParseErrorKind::BadUri, body));
        }
        check_escaped(opaque, body, |b| {
            b.is_ascii_graphic()
                && !matches!(
                    b,
                    b'<' | b'>' | b'"' | b'\\' | b'^' | b'{' | b'}' | b'|' | b'`'
                )
        })?;
        self.rest = Some(opaque);
        Ok(())
    }

    /// The whole URI as written.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.raw
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme<'a> {
        self.scheme
    }

    /// Whether this is a `sip:` or `sips:` URI.
    pub fn is_sip(&self) -> bool {
        matches!(self.scheme, Scheme::Sip | Scheme::Sips)
    }

    /// The user part of a SIP URI, as written (escapes kept).
    pub fn user(&self) -> Option<&'a [u8]> {
        self.user
    }

    /// The user part with its `%XX` escapes resolved (allocates only if it has escapes).
    pub fn user_unescaped(&self) -> Option<Cow<'a, [u8]>> {
        self.user.map(decode_checked)
    }

    /// The password of a SIP URI, as written (escapes kept; may be empty).
    pub fn password(&self) -> Option<&'a [u8]> {
        self.password
    }

    /// The password with its `%XX` escapes resolved.
    pub fn password_unescaped(&self) -> Option<Cow<'a, [u8]>> {
        self.password.map(decode_checked)
    }

    /// The host of a SIP URI.
    pub fn host(&self) -> Option<Host<'a>> {
        self.host
    }

    /// The host of a SIP URI as written (IPv6 with its brackets).
    pub fn host_bytes(&self) -> Option<&'a [u8]> {
        self.host_raw
    }

    /// The port of a SIP URI, if written.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// Host and port of a SIP URI together.
    pub fn host_port(&self) -> Option<HostPort<'a>> {
        self.host.map(|host| HostPort {
            host,
            port: self.port,
        })
    }

    /// The URI parameters (SIP and tel URIs; empty otherwise).
    pub fn params(&self) -> Params<'a> {
        self.params
    }

    /// The URI parameter `name` (case-insensitive): `Some(None)` for a flag, `Some(Some(v))`
    /// with its value as written, `None` if absent.
    pub fn param(&self, name: &str) -> Option<Option<&'a [u8]>> {
        self.params.get(name)
    }

    /// The `transport=` parameter, when present and one holdline knows (`udp`, `tcp`, `tls`,
    /// `sctp`); read [`param`](Self::param) for others such as `ws`.
    pub fn transport(&self) -> Option<Transport> {
        self.param("transport")
            .flatten()
            .and_then(Transport::from_token)
    }

    /// Whether the `lr` (loose routing) parameter is present.
    pub fn lr(&self) -> bool {
        self.lr
    }

    /// The `maddr=` parameter (validated as a host when the URI was parsed).
    pub fn maddr(&self) -> Option<Host<'a>> {
        self.param("maddr")
            .flatten()
            .and_then(|m| Host::parse(m).ok())
    }

    /// The `ttl=` parameter (validated as 0..=255 when the URI was parsed).
    pub fn ttl(&self) -> Option<u8> {
        self.param("ttl").flatten().and_then(parse_ttl)
    }

    /// The `user=` parameter (e.g. `phone`).
    pub fn user_param(&self) -> Option<&'a [u8]> {
        self.param("user").flatten()
    }

    /// The `method=` parameter.
    pub fn method_param(&self) -> Option<&'a [u8]> {
        self.param("method").flatten()
    }

    /// The text after `?` of a SIP URI, as written.
    pub fn headers(&self) -> Option<&'a [u8]> {
        self.headers
    }

    /// The `name=value` pairs of the `?` part, split at `&` (escapes kept).
    pub fn header_pairs(&self) -> UriHeaders<'a> {
        UriHeaders {
            rest: self.headers.unwrap_or_default(),
        }
    }

    /// The number of a `tel:` URI, as written (e.g. `+1-201-555-0123`).
    pub fn number(&self) -> Option<&'a [u8]> {
        match self.scheme {
            Scheme::Tel => self.rest,
            _ => None,
        }
    }

    /// Everything after the `:` of a URI whose scheme holdline does not parse.
    pub fn opaque(&self) -> Option<&'a [u8]> {
        match self.scheme {
            Scheme::Other(_) => self.rest,
            _ => None,
        }
    }
}

impl fmt::Display for Uri<'_> {
    /// Writes the URI as it was written (non-UTF-8 bytes replaced).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.raw))
    }
}

/// Iterator over the `name=value` headers of a SIP URI (see [`Uri::header_pairs`]).
#[derive(Clone, Debug)]
pub struct UriHeaders<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for UriHeaders<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.rest.is_empty() {
                return None;
            }
            let (item, rest) = match memchr(b'&', self.rest) {
                Some(i) => (
                    self.rest.get(..i).unwrap_or_default(),
                    self.rest.get(i + 1..).unwrap_or_default(),
                ),
                None => (self.rest, &b""[..]),
            };
            self.rest = rest;
            if item.is_empty() {
                continue;
            }
            return Some(match memchr(b'=', item) {
                Some(e) => (
                    item.get(..e).unwrap_or_default(),
                    item.get(e + 1..).unwrap_or_default(),
                ),
                None => (item, &b""[..]),
            });
        }
    }
}

/// Resolves `%XX` escapes. Borrows when there are none; a `%` not followed by two hex digits
/// is a [`ParseErrorKind::BadUri`] at its offset.
pub fn percent_decode(s: &[u8]) -> Result<Cow<'_, [u8]>, ParseError> {
    let Some(first) = memchr(b'%', s) else {
        return Ok(Cow::Borrowed(s));
    };
    let mut out = Vec::with_capacity(s.len());
    out.extend_from_slice(s.get(..first).unwrap_or_default());
    let mut i = first;
    while let Some(&b) = s.get(i) {
        if b == b'%' {
            let v = escape_at(s, i).ok_or_else(|| ParseError::new(ParseErrorKind::BadUri, i))?;
            out.push(v);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    Ok(Cow::Owned(out))
}

/// Decodes text whose escapes were validated by [`Uri::parse`].
fn decode_checked(s: &[u8]) -> Cow<'_, [u8]> {
    percent_decode(s).unwrap_or(Cow::Borrowed(s))
}

/// The byte encoded by `%HH` at `i`.
fn escape_at(s: &[u8], i: usize) -> Option<u8> {
    let h = s.get(i + 1).and_then(|&b| hex(b))?;
    let l = s.get(i + 2).and_then(|&b| hex(b))?;
    Some(h << 4 | l)
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Checks that every byte of `s` satisfies `ok` or starts a valid `%HH` escape; `base` is the
/// offset of `s` for errors.
fn check_escaped(s: &[u8], base: usize, ok: impl Fn(u8) -> bool) -> Result<(), ParseError> {
    let mut i = 0;
    while let Some(&b) = s.get(i) {
        if b == b'%' {
            if escape_at(s, i).is_none() {
                return Err(ParseError::new(ParseErrorKind::BadUri, base + i));
            }
            i += 3;
        } else if ok(b) {
            i += 1;
        } else {
            return Err(ParseError::new(ParseErrorKind::BadUri, base + i));
        }
    }
    Ok(())
}

/// Moves `c` forward to `pos`.
fn skip_to(c: &mut Cursor<'_>, pos: usize) {
    while c.pos() < pos && c.bump().is_some() {}
}

/// `unreserved` (RFC 3261 §25.1): alphanumerics and marks.
const fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'_' | b'.' | b'!' | b'~' | b'*' | b'\'' | b'(' | b')'
        )
}

const USER: u8 = 1;
const PASSWORD: u8 = 2;
const PARAM: u8 = 4;
const HEADER: u8 = 8;
/// `alphanum`, `-` and `.`: the bytes a host name or dotted quad is made of.
const HOST: u8 = 16;
const ALNUM: u8 = 32;

/// Character classes of SIP URI parts, one bit each (escapes are checked separately).
static URI_CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        let unreserved = is_unreserved(b);
        if unreserved || matches!(b, b'&' | b'=' | b'+' | b'$' | b',' | b';' | b'?' | b'/') {
            t[c] |= USER;
        }
        if unreserved || matches!(b, b'&' | b'=' | b'+' | b'$' | b',') {
            t[c] |= PASSWORD;
        }
        if unreserved || matches!(b, b'[' | b']' | b'/' | b':' | b'&' | b'+' | b'$') {
            t[c] |= PARAM;
        }
        if unreserved || matches!(b, b'[' | b']' | b'/' | b'?' | b':' | b'+' | b'$') {
            t[c] |= HEADER;
        }
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'.' {
            t[c] |= HOST;
        }
        if b.is_ascii_alphanumeric() {
            t[c] |= ALNUM;
        }

        c += 1;
    }
    t
};

#[inline]
fn has(b: u8, class: u8) -> bool {
    URI_CLASS[b as usize] & class != 0
}

fn is_user_char(b: u8) -> bool {
    has(b, USER)
}

fn is_password_char(b: u8) -> bool {
    has(b, PASSWORD)
}

/// `paramchar` without the escapes (checked separately).
fn is_param_char(b: u8) -> bool {
    has(b, PARAM)
}

/// `hnv-unreserved / unreserved`.
fn is_header_char(b: u8) -> bool {
    has(b, HEADER)
}

/// Consumes a run of `ok` bytes and `%HH` escapes.
fn take_escaped<'a>(c: &mut Cursor<'a>, ok: impl Fn(u8) -> bool) -> Result<&'a [u8], ParseError> {
    let start = c.pos();
    while let Some(b) = c.peek() {
        if b == b'%' {
            if escape_at(c.input(), c.pos()).is_none() {
                return Err(c.error(ParseErrorKind::BadUri));
            }
            c.bump();
            c.bump();
            c.bump();
        } else if ok(b) {
            c.bump();
        } else {
            break;
        }
    }
    Ok(c.input().get(start..c.pos()).unwrap_or_default())
}

/// `*( ";" pname [ "=" pvalue ] )` without white space.
fn uri_params<'a>(c: &mut Cursor<'a>) -> Result<Params<'a>, ParseError> {
    let start = c.pos();
    while c.eat(b';') {
        if take_escaped(c, is_param_char)?.is_empty() {
            return Err(c.error(ParseErrorKind::BadUri));
        }
        if c.eat(b'=') && take_escaped(c, is_param_char)?.is_empty() {
            return Err(c.error(ParseErrorKind::BadUri));
        }
    }
    Ok(Params::from_raw(
        c.input().get(start..c.pos()).unwrap_or_default(),
    ))
}

/// Checks the values of the parameters whose syntax the RFC fixes (`maddr`, `ttl`).
fn check_uri_params(params: &Params<'_>, s: &[u8]) -> Result<(), ParseError> {
    for p in params.iter() {
        let at = || ParseError::new(ParseErrorKind::BadParam, offset_in(s, p.name));
        if p.name.eq_ignore_ascii_case(b"maddr") && p.value.is_none_or(|v| Host::parse(v).is_err())
        {
            return Err(at());
        }
        if p.name.eq_ignore_ascii_case(b"ttl") && p.value.and_then(parse_ttl).is_none() {
            return Err(at());
        }
    }
    Ok(())
}

/// `hname "=" hvalue *( "&" hname "=" hvalue )`.
fn check_headers(h: &[u8], base: usize) -> Result<(), ParseError> {
    let mut off = 0;
    for item in h.split(|&b| b == b'&') {
        let bad = |at: usize| ParseError::new(ParseErrorKind::BadUri, base + off + at);
        let eq = memchr(b'=', item).ok_or_else(|| bad(0))?;
        if eq == 0 {
            return Err(bad(0));
        }
        check_escaped(
            item.get(..eq).unwrap_or_default(),
            base + off,
            is_header_char,
        )?;
        check_escaped(
            item.get(eq + 1..).unwrap_or_default(),
            base + off + eq + 1,
            is_header_char,
        )?;
        off += item.len() + 1;
    }
    Ok(())
}

/// The offset of `sub` (a subslice) within `s`.
pub(crate) fn offset_in(s: &[u8], sub: &[u8]) -> usize {
    (sub.as_ptr() as usize)
        .saturating_sub(s.as_ptr() as usize)
        .min(s.len())
}

/// `1*3DIGIT` in 0..=255.
pub(crate) fn parse_ttl(v: &[u8]) -> Option<u8> {
    if v.len() > 3 {
        return None;
    }
    crate::scan::parse_u32(v, 255).and_then(|n| u8::try_from(n).ok())
}

/// A `global-number` (`+` then digits and visual separators) or a `local-number`.
fn is_tel_number(n: &[u8]) -> bool {
    let visual = |b: u8| matches!(b, b'-' | b'.' | b'(' | b')');
    match n {
        [b'+', digits @ ..] => {
            digits.iter().any(u8::is_ascii_digit)
                && digits.iter().all(|&b| b.is_ascii_digit() || visual(b))
        }
        _ => {
            n.iter()
                .any(|&b| b.is_ascii_hexdigit() || b == b'*' || b == b'#')
                && n.iter()
                    .all(|&b| b.is_ascii_hexdigit() || matches!(b, b'*' | b'#') || visual(b))
        }
    }
}

/// Takes the run of host-name bytes (`alphanum`, `-`, `.`) from `start` and validates it in
/// the same pass. Returns the host (exactly what [`Host::parse`] gives for the run) and
/// where the run ends; when the run is not a host, the offset returned may be short of the
/// run's end (every byte before it is still a host-name byte).
#[inline]
pub(crate) fn scan_host(s: &[u8], start: usize) -> (usize, Option<Host<'_>>) {
    let alnum = |i: usize| s.get(i).is_some_and(|&b| has(b, ALNUM));
    let mut i = start;
    // The first byte of the last label: a host name's top label starts with a letter, an
    // IPv4 address's with a digit.
    let mut top_first;
    let mut final_dot = false;
    loop {
        // A label: alphanumerics, with inner runs of `-`.
        match s.get(i) {
            Some(&b) if has(b, ALNUM) => top_first = b,
            _ => return (i, None),
        }
        i += 1;
        loop {
            while alnum(i) {
                i += 1;
            }
            if s.get(i) != Some(&b'-') {
                break;
            }
            while s.get(i) == Some(&b'-') {
                i += 1;
            }
            if !alnum(i) {
                return (i, None);
            }
        }
        if s.get(i) != Some(&b'.') {
            break;
        }
        i += 1;
        if !s.get(i).is_some_and(|&b| has(b, HOST)) {
            // A final `.` (a fully qualified name) ends the run.
            final_dot = true;
            break;
        }
    }
    let raw = s.get(start..i).unwrap_or_default();
    if !top_first.is_ascii_alphabetic() {
        // Never a host name; maybe a dotted quad.
        return (i, parse_ipv4(raw).map(Host::V4));
    }
    let len = raw.len() - usize::from(final_dot);
    (i, (len <= 255).then_some(Host::Name(raw)))
}

/// A dotted quad, with exactly the grammar of `Ipv4Addr::from_str`: four decimal octets of one
/// to three digits, each at most 255 and without a leading zero.
pub(crate) fn parse_ipv4(s: &[u8]) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut n = 0;
    let mut value = 0u32;
    let mut digits = 0;
    for &b in s {
        if b.is_ascii_digit() {
            if digits == 1 && value == 0 {
                return None;
            }
            value = value * 10 + u32::from(b - b'0');
            digits += 1;
            if value > 255 {
                return None;
            }
        } else if b == b'.' && digits > 0 && n < 3 {
            *octets.get_mut(n)? = value as u8;
            n += 1;
            value = 0;
            digits = 0;
        } else {
            return None;
        }
    }
    if digits == 0 || n != 3 {
        return None;
    }
    octets[3] = value as u8;
    Some(Ipv4Addr::from(octets))
}

pub(crate) fn parse_ipv6(s: &[u8]) -> Option<Ipv6Addr> {
    if s.is_empty()
        || !s
            .iter()
            .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
    {
        return None;
    }
    core::str::from_utf8(s).ok()?.parse().ok()
}

/// `hostname = *( domainlabel "." ) toplabel [ "." ]`: labels of alphanumerics and inner
/// `-`, the last one starting with a letter. One pass.
fn is_hostname(s: &[u8]) -> bool {
    let s = s.strip_suffix(b".").unwrap_or(s);
    if s.is_empty() || s.len() > 255 {
        return false;
    }
    // `prev` starts as a virtual `.` so that the first label is checked like the others.
    let mut prev = b'.';
    let mut top_first = 0u8;
    for &b in s {
        if b == b'.' {
            // An empty label, or one ending with `-`.
            if !prev.is_ascii_alphanumeric() {
                return false;
            }
        } else if b == b'-' {
            if prev == b'.' {
                return false;
            }
        } else if !b.is_ascii_alphanumeric() {
            return false;
        } else if prev == b'.' {
            top_first = b;
        }
        prev = b;
    }
    prev.is_ascii_alphanumeric() && top_first.is_ascii_alphabetic()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(s: &str) -> Uri<'_> {
        match Uri::parse(s.as_bytes()) {
            Ok(u) => u,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    fn err(s: &str) -> ParseError {
        match Uri::parse(s.as_bytes()) {
            Ok(u) => panic!("{s} parsed: {u:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn plain_sip_uri() {
        let u = uri("sip:alice@atlanta.example.com");
        assert_eq!(u.scheme(), Scheme::Sip);
        assert!(u.is_sip());
        assert_eq!(u.user(), Some(&b"alice"[..]));
        assert_eq!(u.password(), None);
        assert_eq!(u.host(), Some(Host::Name(b"atlanta.example.com")));
        assert_eq!(u.port(), None);
        assert!(u.params().is_empty());
        assert_eq!(u.headers(), None);
        assert_eq!(u.as_bytes(), b"sip:alice@atlanta.example.com");
        assert_eq!(u.to_string(), "sip:alice@atlanta.example.com");
    }

    #[test]
    fn scheme_is_case_insensitive() {
        assert_eq!(uri("SIP:host").scheme(), Scheme::Sip);
        assert_eq!(uri("SiPs:host").scheme(), Scheme::Sips);
        assert_eq!(uri("TEL:+1").scheme(), Scheme::Tel);
        assert_eq!(Scheme::Sips.as_bytes(), b"sips");
    }

    #[test]
    fn escaped_user_and_password() {
        let u = uri("sip:%61lice:se%63ret@host");
        assert_eq!(u.user(), Some(&b"%61lice"[..]));
        assert_eq!(u.user_unescaped().as_deref(), Some(&b"alice"[..]));
        assert_eq!(u.password(), Some(&b"se%63ret"[..]));
        assert_eq!(u.password_unescaped().as_deref(), Some(&b"secret"[..]));
        let u = uri("sip:bob:pa%24%24@h");
        assert_eq!(u.password(), Some(&b"pa%24%24"[..]));
        assert_eq!(u.password_unescaped().as_deref(), Some(&b"pa$$"[..]));
        assert!(matches!(
            uri("sip:bob@h").user_unescaped(),
            Some(Cow::Borrowed(b"bob"))
        ));
        let u = uri("sip:bob:@h");
        assert_eq!(u.password(), Some(&b""[..]));
        let u = uri("sip:user;par=1?x@h");
        assert_eq!(u.user(), Some(&b"user;par=1?x"[..]));
        assert!(u.params().is_empty());
    }

    #[test]
    fn password_rejects_semicolon() {
        assert_eq!(err("sip:%61lice:se%63ret;x@host").offset, 20);
    }

    #[test]
    fn hosts_and_ports() {
        let u = uri("sip:[2001:db8::1]:5070");
        assert_eq!(u.host(), Some(Host::V6("2001:db8::1".parse().expect("v6"))));
        assert_eq!(u.host_bytes(), Some(&b"[2001:db8::1]"[..]));
        assert_eq!(u.port(), Some(5070));
        let hp = u.host_port().expect("hostport");
        assert_eq!(hp.port_or(5060), 5070);
        assert_eq!(hp.host.to_string(), "[2001:db8::1]");
        let u = uri("sips:bob@192.0.2.4:5061");
        assert_eq!(u.host(), Some(Host::V4(Ipv4Addr::new(192, 0, 2, 4))));
        assert_eq!(u.port(), Some(5061));
        assert_eq!(u.host_port().map(|h| h.port_or(1)), Some(5061));
        assert_eq!(uri("sip:h:65535").port(), Some(65535));
        assert_eq!(uri("sip:h:0").port(), Some(0));
        assert_eq!(
            uri("sip:example.com.").host(),
            Some(Host::Name(b"example.com."))
        );
        assert_eq!(uri("sip:a-b.c9").host(), Some(Host::Name(b"a-b.c9")));
        assert_eq!(
            uri("sip:1.2.3.4").host().and_then(|h| h.ip()),
            Some(IpAddr::V4(Ipv4Addr::new(1, 2, 3, 4)))
        );
        assert!(uri("sip:[::1]").host().is_some_and(|h| h.is_ip()));
        assert_eq!(uri("sip:h").host().and_then(|h| h.name()), Some(&b"h"[..]));
    }

    #[test]
    fn bad_hosts_and_ports() {
        assert_eq!(err("sip:").offset, 4);
        assert_eq!(err("sip:user@").offset, 9);
        assert_eq!(err("sip:user@:5060").kind, ParseErrorKind::BadUri);
        assert_eq!(err("sip:h:70000").offset, 6);
        assert_eq!(err("sip:h:").offset, 6);
        assert_eq!(err("sip:h:50x").offset, 8);
        assert_eq!(err("sip:[2001:db8::1").offset, 4);
        assert_eq!(err("sip:[2001:db8::1]x").offset, 17);
        assert_eq!(err("sip:[nothex]").offset, 4);
        assert_eq!(err("sip:[]").offset, 4);
        assert_eq!(err("sip:2001:db8::1").kind, ParseErrorKind::BadUri);
        assert_eq!(err("sip:256.1.1.1").offset, 4);
        assert_eq!(err("sip:1.2.3").offset, 4);
        assert_eq!(err("sip:a..b").offset, 4);
        assert_eq!(err("sip:-a.b").offset, 4);
        assert_eq!(err("sip:a-.b").offset, 4);
        assert_eq!(err("sip:under_score.com").offset, 9);
        assert_eq!(err("sip:@host").offset, 4);
    }

    #[test]
    fn bad_escapes_and_spaces() {
        assert_eq!(err("sip:%6@host").offset, 4);
        assert_eq!(err("sip:%zzlice@host").offset, 4);
        assert_eq!(err("sip:a%@host").offset, 5);
        assert_eq!(err("sip:a:b%4@host").offset, 7);
        assert_eq!(err("sip:h;p=%g1").offset, 8);
        assert_eq!(err("sip:alice @host").offset, 9);
        assert_eq!(err("sip:alice@ho st").offset, 12);
        assert_eq!(err("sip:alice@host ").offset, 14);
        assert_eq!(err("sip:h;lr ;x").offset, 8);
        assert_eq!(err("sip:a\"b@h").offset, 5);
        assert_eq!(err("sip:a\x00b@h").offset, 5);
        assert_eq!(Uri::parse(b"sip:h\x80").map_err(|e| e.offset), Err(5));
    }

    #[test]
    fn percent_decode_standalone() {
        assert_eq!(
            percent_decode(b"abc").map(|c| c.into_owned()),
            Ok(b"abc".to_vec())
        );
        assert!(matches!(percent_decode(b"abc"), Ok(Cow::Borrowed(_))));
        assert_eq!(
            percent_decode(b"%41%2cb%7E").map(|c| c.into_owned()),
            Ok(b"A,b~".to_vec())
        );
        assert_eq!(
            percent_decode(b"a%4"),
            Err(ParseError::new(ParseErrorKind::BadUri, 1))
        );
        assert_eq!(
            percent_decode(b"ab%"),
            Err(ParseError::new(ParseErrorKind::BadUri, 2))
        );
        assert_eq!(
            percent_decode(b"%%41"),
            Err(ParseError::new(ParseErrorKind::BadUri, 0))
        );
    }

    #[test]
    fn uri_parameters() {
        let u = uri(
            "sip:proxy.example.com;lr;transport=TCP;maddr=[::1];ttl=16;user=phone;method=INVITE;x=%41",
        );
        assert!(u.lr());
        assert_eq!(u.transport(), Some(Transport::Tcp));
        assert_eq!(u.maddr(), Some(Host::V6(Ipv6Addr::LOCALHOST)));
        assert_eq!(u.ttl(), Some(16));
        assert_eq!(u.user_param(), Some(&b"phone"[..]));
        assert_eq!(u.method_param(), Some(&b"INVITE"[..]));
        assert_eq!(u.param("X"), Some(Some(&b"%41"[..])));
        assert_eq!(u.param("LR"), Some(None));
        assert_eq!(u.param("nope"), None);
        assert_eq!(u.params().iter().count(), 7);
        assert_eq!(u.host(), Some(Host::Name(b"proxy.example.com")));

        let u = uri("sip:h;transport=ws;maddr=239.255.255.1");
        assert_eq!(u.transport(), None);
        assert_eq!(u.param("transport"), Some(Some(&b"ws"[..])));
        assert_eq!(u.maddr(), Some(Host::V4(Ipv4Addr::new(239, 255, 255, 1))));
        assert!(!u.lr());

        assert_eq!(err("sip:h;").offset, 6);
        assert_eq!(err("sip:h;=x").offset, 6);
        assert_eq!(err("sip:h;a=").offset, 8);
        assert_eq!(err("sip:h;ttl=256").kind, ParseErrorKind::BadParam);
        assert_eq!(err("sip:h;ttl").offset, 6);
        assert_eq!(err("sip:h;maddr=bad_host").kind, ParseErrorKind::BadParam);
    }

    #[test]
    fn uri_headers() {
        let u = uri("sip:bob@h;lr?subject=project%20x&priority=urgent&empty=");
        assert!(u.lr());
        assert_eq!(
            u.headers(),
            Some(&b"subject=project%20x&priority=urgent&empty="[..])
        );
        let pairs: Vec<_> = u.header_pairs().collect();
        assert_eq!(
            pairs,
            vec![
                (&b"subject"[..], &b"project%20x"[..]),
                (&b"priority"[..], &b"urgent"[..]),
                (&b"empty"[..], &b""[..])
            ]
        );
        assert_eq!(uri("sip:h").header_pairs().count(), 0);
        assert_eq!(err("sip:h?").offset, 6);
        assert_eq!(err("sip:h?a").offset, 6);
        assert_eq!(err("sip:h?a=1&=2").offset, 10);
        assert_eq!(err("sip:h?a=1&b=%2").offset, 12);
        assert_eq!(err("sip:h?a=<x>").offset, 8);
    }

    #[test]
    fn tel_uris() {
        let u = uri("tel:+1-201-555-0123;phone-context=example.com;ext=22");
        assert_eq!(u.scheme(), Scheme::Tel);
        assert_eq!(u.number(), Some(&b"+1-201-555-0123"[..]));
        assert_eq!(u.param("phone-context"), Some(Some(&b"example.com"[..])));
        assert_eq!(u.param("ext"), Some(Some(&b"22"[..])));
        assert_eq!(u.host(), None);
        assert_eq!(u.user(), None);
        assert!(!u.is_sip());
        assert_eq!(
            uri("tel:*67#;phone-context=+1").number(),
            Some(&b"*67#"[..])
        );
        assert_eq!(uri("tel:7042").opaque(), None);
        assert_eq!(err("tel:").offset, 4);
        assert_eq!(err("tel:+").offset, 4);
        assert_eq!(err("tel:1+2").offset, 4);
        assert_eq!(err("tel:+12 34").offset, 7);
        assert_eq!(err("tel:+1234?x=y").offset, 9);
    }

    #[test]
    fn unknown_schemes_are_kept_raw() {
        let u = uri("http://www.example.com/a?b=c");
        assert_eq!(u.scheme(), Scheme::Other(b"http"));
        assert_eq!(u.opaque(), Some(&b"//www.example.com/a?b=c"[..]));
        assert_eq!(u.host(), None);
        assert_eq!(u.number(), None);
        let u = uri("urn:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6");
        assert_eq!(u.scheme(), Scheme::Other(b"urn"));
        assert_eq!(u.scheme().as_bytes(), b"urn");
        assert_eq!(
            uri("mailto:a@b.example").opaque(),
            Some(&b"a@b.example"[..])
        );
        assert_eq!(err("urn:").offset, 4);
        assert_eq!(err("urn:a b").offset, 5);
        assert_eq!(err("urn:a<b").offset, 5);
        assert_eq!(err("no-colon").offset, 8);
        assert_eq!(err("1sip:h").offset, 0);
        assert_eq!(err(":h").offset, 0);
        assert_eq!(err("s_p:h").offset, 0);
        assert_eq!(err("").offset, 0);
    }

    #[test]
    fn host_parse_directly() {
        assert_eq!(Host::parse(b"example.com"), Ok(Host::Name(b"example.com")));
        assert_eq!(Host::parse(b"[::1]"), Ok(Host::V6(Ipv6Addr::LOCALHOST)));
        assert!(Host::parse(b"::1").is_err());
        assert!(Host::parse(b"").is_err());
        assert!(Host::parse(b"[").is_err());
        assert!(Host::parse(b"]").is_err());
        assert!(Host::parse(b".").is_err());
        assert_eq!(Host::V4(Ipv4Addr::LOCALHOST).to_string(), "127.0.0.1");
        assert_eq!(Host::Name(b"h").to_string(), "h");
    }

    #[test]
    fn arbitrary_prefixes_never_panic() {
        let s = b"sips:%41b:c%42@[2001:db8::1]:5061;lr;maddr=[::2];ttl=1?h=%20&i=j";
        for end in 0..=s.len() {
            let _ = Uri::parse(&s[..end]);
            let _ = Uri::parse(&s[end..]);
        }
        assert!(Uri::parse(s).is_ok());
    }

    mod fast_path {
        use proptest::collection::vec;
        use proptest::prelude::*;
        use proptest::sample::select;

        use super::super::*;

        /// The previous two-pass host-name check, kept as the reference.
        fn is_hostname_reference(s: &[u8]) -> bool {
            let s = s.strip_suffix(b".").unwrap_or(s);
            if s.is_empty() || s.len() > 255 {
                return false;
            }
            let label_ok = |l: &[u8]| {
                matches!((l.first(), l.last()), (Some(a), Some(z)) if a.is_ascii_alphanumeric() && z.is_ascii_alphanumeric())
                    && l.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'-')
            };
            let mut last: &[u8] = &[];
            for label in s.split(|&b| b == b'.') {
                if !label_ok(label) {
                    return false;
                }
                last = label;
            }
            last.first().is_some_and(u8::is_ascii_alphabetic)
        }

        fn text(pieces: &'static [&'static str], max: usize) -> impl Strategy<Value = String> {
            vec(select(pieces), 0..max).prop_map(|v| v.concat())
        }

        const HOST_PIECES: &[&str] = &[
            "a", "Z", "0", "1", "9", "25", "256", "01", "00", "-", ".", "..", "_", "com", "x-y",
            "192", "168", "255", "1234", ":", ";", "@", "\u{e9}",
        ];

        const URI_PIECES: &[&str] = &[
            "sip:",
            "sips:",
            "SIP:",
            "tel:",
            "urn:",
            "bob",
            "alice",
            "+1555",
            "a.b",
            "@",
            "@@",
            ":",
            "5060",
            "65535",
            "65536",
            "0000000005060",
            "00000000005060",
            ";",
            "lr",
            "LR",
            "=",
            "ttl=1",
            "ttl=300",
            "maddr=h",
            "maddr=_",
            "x",
            "%41",
            "%4",
            "[::1]",
            "[",
            "192.0.2.1",
            "256.1.1.1",
            "01.2.3.4",
            "-",
            ".",
            "?",
            "h=v",
            "&",
            " ",
            ">",
            ",",
            "\"",
            "_",
            "transport=udp",
            "example.com",
            "com.",
            "1.2.3",
            "user",
            "\r\n",
            "/",
        ];

        fn uri_text() -> impl Strategy<Value = String> {
            let scheme = select(&["sip:", "sips:", "Sip:", "tel:", "sip", ""][..]);
            let user = select(
                &[
                    "", "bob@", "a.b-c@", "+1-555@", "u;p=1?x@", "a:b@", "%41@", "@", "a b@", "-x@",
                ][..],
            );
            let host = select(
                &[
                    "h",
                    "biloxi.example.com",
                    "example.com.",
                    "a-b.c9",
                    "192.0.2.10",
                    "0.0.0.0",
                    "256.1.1.1",
                    "1.2.3",
                    "1.2.3.4.",
                    "01.2.3.4",
                    "a..b",
                    "-a.b",
                    "a-.b",
                    "9a.1b",
                    "[::1]",
                    "",
                    ".",
                    "a_b",
                    "x.-y",
                    "1.2.3.4a",
                ][..],
            );
            let port = select(
                &[
                    "",
                    ":5060",
                    ":0",
                    ":65535",
                    ":65536",
                    ":",
                    ":0000000005060",
                    ":x",
                ][..],
            );
            let params = text(
                &[
                    ";lr",
                    ";LR",
                    ";lr=1",
                    ";transport=tcp",
                    ";ttl=16",
                    ";ttl=300",
                    ";maddr=[::1]",
                    ";maddr=a..b",
                    ";",
                    ";=x",
                    ";a=",
                    ";x=%41",
                    ";x=%4",
                    ";p=a@b",
                    ";p=a,b",
                ][..],
                4,
            );
            let tail = select(&["", "?a=b", "?", " ", ">", "@x", ",x", "\r\n"][..]);
            (scheme, user, host, port, params, tail)
                .prop_map(|(a, b, c, d, e, f)| format!("{a}{b}{c}{d}{e}{f}"))
        }

        proptest! {
            #[test]
            fn ipv4_matches_std(s in text(&["0", "1", "2", "5", "9", "00", "25", "255", "256", ".", "1234"], 9)) {
                let expected = s.parse::<Ipv4Addr>().ok();
                prop_assert_eq!(parse_ipv4(s.as_bytes()), expected);
            }

            #[test]
            fn hostname_matches_reference(s in text(HOST_PIECES, 8)) {
                prop_assert_eq!(is_hostname(s.as_bytes()), is_hostname_reference(s.as_bytes()));
            }

            #[test]
            fn scan_host_matches_take_and_parse(s in text(HOST_PIECES, 8)) {
                let b = s.as_bytes();
                let run = b.iter().position(|&c| !has(c, HOST)).unwrap_or(b.len());
                let (end, host) = scan_host(b, 0);
                let expected = Host::parse(&b[..run]).ok();
                prop_assert_eq!(host, expected);
                if host.is_some() {
                    prop_assert_eq!(end, run);
                } else {
                    prop_assert!(end <= run);
                }
            }

            #[test]
            fn fast_uri_matches_strict(s in uri_text()) {
                let b = s.as_bytes();
                let strict = Uri::parse_strict(b);
                prop_assert_eq!(Uri::parse(b), strict);
                if let Some(fast) = Uri::parse_sip_fast(b) {
                    prop_assert_eq!(Ok(fast), strict);
                    prop_assert_eq!(fast.lr(), fast.params().contains("lr"));
                    prop_assert_eq!(fast.user(), strict.ok().and_then(|u| u.user()));
                    prop_assert_eq!(fast.host_bytes(), strict.ok().and_then(|u| u.host_bytes()));
                }
                if let Ok(u) = strict {
                    prop_assert_eq!(u.lr(), u.params().contains("lr"));
                }
            }

            #[test]
            fn random_uri_pieces_match_strict(s in text(URI_PIECES, 10)) {
                let b = s.as_bytes();
                prop_assert_eq!(Uri::parse(b), Uri::parse_strict(b));
            }

            #[test]
            fn prefix_parse_matches_strict_on_the_prefix(s in uri_text()) {
                let b = s.as_bytes();
                if let Some((uri, end)) = Uri::parse_sip_prefix(b, 0) {
                    prop_assert_eq!(Ok(uri), Uri::parse_strict(&b[..end]));
                    prop_assert_eq!(uri.lr(), uri.params().contains("lr"));
                }
            }
        }

        #[test]
        fn fast_path_covers_the_common_shapes() {
            for s in [
                "sip:bob@biloxi.example.com",
                "sip:proxy.biloxi.example.com;lr",
                "sips:alice@192.0.2.4:5061;transport=tls",
                "sip:+15551234@gw.example.com;user=phone",
                "sip:example.com.",
            ] {
                assert!(Uri::parse_sip_fast(s.as_bytes()).is_some(), "{s}");
            }
            for s in [
                "sip:a:b@h",
                "sip:%41@h",
                "sip:[::1]",
                "sip:h;ttl=1",
                "sip:h?a=b",
                "SIP:h",
            ] {
                assert!(Uri::parse_sip_fast(s.as_bytes()).is_none(), "{s}");
                assert!(Uri::parse(s.as_bytes()).is_ok(), "{s}");
            }
        }
    }
}
