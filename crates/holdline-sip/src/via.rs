//! One Via value (RFC 3261 §20.42, §25.1; `rport` from RFC 3581).

use std::net::IpAddr;

use holdline_base::Transport;

use core::fmt;

use crate::addr::is_param_char;
use crate::scan::{CachedParam, Cursor, Params, is_gen_value_char, is_token_char, parse_u32};
use crate::uri::{Host, HostPort, offset_in, parse_ipv4, parse_ipv6, parse_ttl, scan_host};
use crate::{HeaderName, ParseError, ParseErrorKind};

/// The branch prefix of RFC 3261 transactions (§8.1.1.7).
pub const MAGIC_COOKIE: &[u8] = b"z9hG4bK";

/// One `via-parm`: `SIP / 2.0 / UDP host[:port] *(;param)`.
#[derive(Clone, Copy)]
#[non_exhaustive]
pub struct Via<'a> {
    /// The protocol name as written (`SIP`).
    pub protocol_name: &'a [u8],
    /// The protocol version as written (`2.0`).
    pub protocol_version: &'a [u8],
    /// The transport, when it is one holdline knows (`UDP`, `TCP`, `TLS`, `SCTP`).
    pub transport: Option<Transport>,
    /// The transport as written (e.g. `WS` for an unknown one).
    pub transport_raw: &'a [u8],
    /// The host of `sent-by`.
    pub host: Host<'a>,
    /// The port of `sent-by`, if written.
    pub port: Option<u16>,
    /// The parameters.
    pub params: Params<'a>,
    /// The `branch` value found while parsing.
    branch: CachedParam<'a>,
}

impl PartialEq for Via<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.protocol_name == other.protocol_name
            && self.protocol_version == other.protocol_version
            && self.transport == other.transport
            && self.transport_raw == other.transport_raw
            && self.host == other.host
            && self.port == other.port
            && self.params == other.params
    }
}

impl Eq for Via<'_> {}

impl fmt::Debug for Via<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Via")
            .field("protocol_name", &self.protocol_name)
            .field("protocol_version", &self.protocol_version)
            .field("transport", &self.transport)
            .field("transport_raw", &self.transport_raw)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("params", &self.params)
            .finish()
    }
}

impl<'a> Via<'a> {
    /// Parses one Via value (one comma-separated element). White space is allowed around `/`,
    /// `:`, `;` and `=`. Offsets in errors are relative to `s`; kinds are
    /// `BadHeader(HeaderName::Via)` for the protocol and `sent-by`,
    /// [`ParseErrorKind::BadParam`] for parameters (`branch` needs a value, `ttl` is 0..=255,
    /// `rport` is a flag or a port, `maddr` a host, `received` an address or host).
    pub fn parse(s: &'a [u8]) -> Result<Self, ParseError> {
        if let Some(via) = Self::parse_fast(s) {
            return Ok(via);
        }
        Self::parse_strict(s)
    }

    /// The common `SIP/2.0/T host[:port];params` shape in one pass (no white space but the
    /// one run before `sent-by`, no IPv6 reference, no quoted value). Returns `None` for
    /// anything else (every error included), which [`Self::parse_strict`] then handles; what
    /// it accepts is exactly what the strict parser accepts, with the same result.
    #[inline]
    fn parse_fast(s: &'a [u8]) -> Option<Self> {
        if !s.starts_with(b"SIP/2.0/") {
            return None;
        }
        let mut i = 8;
        while s.get(i).is_some_and(|&b| is_token_char(b)) {
            i += 1;
        }
        let transport_raw = s.get(8..i)?;
        let transport = match transport_raw {
            b"UDP" => Some(Transport::Udp),
            b"TCP" => Some(Transport::Tcp),
            b"TLS" => Some(Transport::Tls),
            _ => Transport::from_token(transport_raw),
        };
        if transport_raw.is_empty() || !matches!(s.get(i), Some(b' ' | b'\t')) {
            return None;
        }
        while matches!(s.get(i), Some(b' ' | b'\t')) {
            i += 1;
        }
        let (end, host) = scan_host(s, i);
        let host = host?;
        i = end;
        let mut port = None;
        if s.get(i) == Some(&b':') {
            i += 1;
            // `parse_port`: one to ten digits (leading zeros allowed) worth at most 65535.
            let start = i;
            let mut value = 0u32;
            while let Some(&b) = s.get(i).filter(|b| b.is_ascii_digit()) {
                value = value * 10 + u32::from(b - b'0');
                if value > u32::from(u16::MAX) || i - start >= 10 {
                    return None;
                }
                i += 1;
            }
            if i == start {
                return None;
            }
            port = u16::try_from(value).ok();
        }
        let params_start = i;
        let mut branch = None;
        let mut seen_branch = false;
        while s.get(i) == Some(&b';') {
            i += 1;
            let name_start = i;
            while s.get(i).is_some_and(|&b| is_gen_value_char(b)) {
                i += 1;
            }
            let name = s.get(name_start..i)?;
            if name.is_empty() {
                return None;
            }
            let mut value = None;
            let mut value_is_token = false;
            if s.get(i) == Some(&b'=') {
                i += 1;
                let value_start = i;
                while s.get(i).is_some_and(|&b| is_token_char(b)) {
                    i += 1;
                }
                value_is_token = true;
                while s.get(i).is_some_and(|&b| is_gen_value_char(b)) {
                    value_is_token = false;
                    i += 1;
                }
                if i == value_start {
                    return None;
                }
                value = s.get(value_start..i);
            }
            if name.len() == 6 && name.eq_ignore_ascii_case(b"branch") {
                // `param_ok` for a branch: a token value.
                if !value_is_token {
                    return None;
                }
                if !seen_branch {
                    seen_branch = true;
                    branch = value;
                }
            } else if !param_ok(name, value) {
                return None;
            }
        }
        if i != s.len() {
            return None;
        }
        let params = Params::from_raw(s.get(params_start..i)?);
        Some(Self {
            protocol_name: s.get(..3)?,
            protocol_version: s.get(4..7)?,
            transport,
            transport_raw,
            host,
            port,
            params,
            branch: CachedParam::new(params, branch),
        })
    }

    /// The full parser, with every error and its offset.
    fn parse_strict(s: &'a [u8]) -> Result<Self, ParseError> {
        let kind = ParseErrorKind::BadHeader(HeaderName::Via);
        let mut c = Cursor::new(s);
        c.skip_lws();
        let protocol_name = c.token(kind)?;
        if !c.eat_sep(b'/') {
            return Err(c.error(kind));
        }
        let protocol_version = c.token(kind)?;
        if !c.eat_sep(b'/') {
            return Err(c.error(kind));
        }
        let transport_raw = c.token(kind)?;
        let before = c.pos();
        c.skip_lws();
        if c.pos() == before {
            return Err(c.error(kind));
        }
        let host_start = c.pos();
        let host_raw = if c.eat(b'[') {
            c.take_while(|b| b != b']');
            if !c.eat(b']') {
                return Err(ParseError::new(kind, host_start));
            }
            s.get(host_start..c.pos()).unwrap_or_default()
        } else {
            c.take_while(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        };
        let host = Host::parse(host_raw).map_err(|_| ParseError::new(kind, host_start))?;
        let mut port = None;
        if c.eat_sep(b':') {
            let at = c.pos();
            let digits = c.take_while(|b| b.is_ascii_digit());
            let p =
                parse_u32(digits, u32::from(u16::MAX)).ok_or_else(|| ParseError::new(kind, at))?;
            port = u16::try_from(p).ok();
        }
        let params = Params::parse(&mut c, is_param_char)?;
        c.skip_lws();
        if !c.is_empty() {
            return Err(c.error(kind));
        }
        check_params(&params, s)?;
        Ok(Self {
            protocol_name,
            protocol_version,
            transport: Transport::from_token(transport_raw),
            transport_raw,
            host,
            port,
            params,
            branch: CachedParam::new(params, params.get("branch").flatten()),
        })
    }

    /// `sent-by` as a host and optional port.
    pub fn sent_by(&self) -> HostPort<'a> {
        HostPort {
            host: self.host,
            port: self.port,
        }
    }

    /// The parameter `name` (case-insensitive): `Some(None)` for a flag, `Some(Some(v))` with
    /// its value as written, `None` if absent.
    pub fn param(&self, name: &str) -> Option<Option<&'a [u8]>> {
        self.params.get(name)
    }

    /// The `branch` parameter.
    pub fn branch(&self) -> Option<&'a [u8]> {
        self.branch.get(&self.params, "branch")
    }

    /// Whether the branch starts with the RFC 3261 magic cookie `z9hG4bK` (case-sensitive).
    pub fn has_magic_cookie(&self) -> bool {
        self.branch().is_some_and(|b| b.starts_with(MAGIC_COOKIE))
    }

    /// The `received` parameter: an IP address (IPv6 with or without brackets) as
    /// [`Host::V4`]/[`Host::V6`]; any other value as [`Host::Name`] with the bytes as written.
    pub fn received(&self) -> Option<Host<'a>> {
        let v = self.param("received").flatten()?;
        Some(match parse_received(v) {
            Some(IpAddr::V4(a)) => Host::V4(a),
            Some(IpAddr::V6(a)) => Host::V6(a),
            None => Host::Name(v),
        })
    }

    /// The `rport` parameter (RFC 3581): `Some(None)` for the bare flag (a request asking for
    /// it), `Some(Some(port))` once filled in, `None` if absent.
    pub fn rport(&self) -> Option<Option<u16>> {
        self.param("rport").map(|v| v.and_then(parse_port))
    }

    /// The `maddr` parameter.
    pub fn maddr(&self) -> Option<Host<'a>> {
        self.param("maddr")
            .flatten()
            .and_then(|m| Host::parse(m).ok())
    }

    /// The `ttl` parameter.
    pub fn ttl(&self) -> Option<u8> {
        self.param("ttl").flatten().and_then(parse_ttl)
    }
}

fn parse_port(v: &[u8]) -> Option<u16> {
    parse_u32(v, u32::from(u16::MAX)).and_then(|p| u16::try_from(p).ok())
}

fn parse_received(v: &[u8]) -> Option<IpAddr> {
    if let Some(a) = parse_ipv4(v) {
        return Some(IpAddr::V4(a));
    }
    let inner = match v {
        [b'[', inner @ .., b']'] => inner,
        _ => v,
    };
    parse_ipv6(inner).map(IpAddr::V6)
}

fn check_params(params: &Params<'_>, s: &[u8]) -> Result<(), ParseError> {
    for p in params.iter() {
        if !param_ok(p.name, p.value) {
            return Err(ParseError::new(
                ParseErrorKind::BadParam,
                offset_in(s, p.name),
            ));
        }
    }
    Ok(())
}

/// Whether a parameter whose syntax the RFC fixes has a valid value (`branch` a token, `ttl`
/// 0..=255, `rport` a flag or a port, `maddr` a host, `received` unquoted).
fn param_ok(name: &[u8], value: Option<&[u8]>) -> bool {
    match name.len() {
        6 if name.eq_ignore_ascii_case(b"branch") => {
            value.is_some_and(|v| v.iter().all(|&b| is_token_char(b)))
        }
        3 if name.eq_ignore_ascii_case(b"ttl") => value.and_then(parse_ttl).is_some(),
        5 if name.eq_ignore_ascii_case(b"rport") => value.is_none_or(|v| parse_port(v).is_some()),
        5 if name.eq_ignore_ascii_case(b"maddr") => value.is_some_and(|v| Host::parse(v).is_ok()),
        8 if name.eq_ignore_ascii_case(b"received") => {
            value.is_some_and(|v| v.first() != Some(&b'"'))
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    fn via(s: &str) -> Via<'_> {
        match Via::parse(s.as_bytes()) {
            Ok(v) => v,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    fn err(s: &str) -> ParseError {
        match Via::parse(s.as_bytes()) {
            Ok(v) => panic!("{s} parsed: {v:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn typical_via() {
        let v = via("SIP/2.0/UDP pc33.atlanta.example.com:5066;branch=z9hG4bK776asdhds;rport");
        assert_eq!(v.protocol_name, b"SIP");
        assert_eq!(v.protocol_version, b"2.0");
        assert_eq!(v.transport, Some(Transport::Udp));
        assert_eq!(v.transport_raw, b"UDP");
        assert_eq!(v.host, Host::Name(b"pc33.atlanta.example.com"));
        assert_eq!(v.port, Some(5066));
        assert_eq!(v.sent_by().port_or(5060), 5066);
        assert_eq!(v.branch(), Some(&b"z9hG4bK776asdhds"[..]));
        assert!(v.has_magic_cookie());
        assert_eq!(v.rport(), Some(None));
        assert_eq!(v.received(), None);
        assert_eq!(v.ttl(), None);
        assert_eq!(v.maddr(), None);
    }

    #[test]
    fn spacing_and_case() {
        let v = via(
            "sip / 2.0 / tcp\r\n  192.0.2.1 : 5060 ; Branch = Z9HG4BKabc ;received=192.0.2.9; rport = 4000",
        );
        assert_eq!(v.protocol_name, b"sip");
        assert_eq!(v.transport, Some(Transport::Tcp));
        assert_eq!(v.host, Host::V4(Ipv4Addr::new(192, 0, 2, 1)));
        assert_eq!(v.port, Some(5060));
        assert_eq!(v.branch(), Some(&b"Z9HG4BKabc"[..]));
        assert!(!v.has_magic_cookie());
        assert_eq!(v.received(), Some(Host::V4(Ipv4Addr::new(192, 0, 2, 9))));
        assert_eq!(v.rport(), Some(Some(4000)));
    }

    #[test]
    fn ipv6_unknown_transport_and_extensions() {
        let v = via(
            "SIP/2.0/WS [2001:db8::9]:443;branch=z9hG4bK1;received=2001:db8::2;maddr=[ff02::1];ttl=1;x;y=\"q\"",
        );
        assert_eq!(v.transport, None);
        assert_eq!(v.transport_raw, b"WS");
        assert_eq!(v.host, Host::V6("2001:db8::9".parse().expect("v6")));
        assert_eq!(v.port, Some(443));
        assert_eq!(
            v.received(),
            Some(Host::V6("2001:db8::2".parse().expect("v6")))
        );
        assert_eq!(v.maddr(), Some(Host::V6("ff02::1".parse().expect("v6"))));
        assert_eq!(v.ttl(), Some(1));
        assert_eq!(v.param("x"), Some(None));
        assert_eq!(v.param("Y"), Some(Some(&b"\"q\""[..])));
        assert_eq!(v.rport(), None);
        let v = via("SIP/2.0/TLS h;branch=z9hG4bK2;received=[::1]");
        assert_eq!(v.received(), Some(Host::V6(Ipv6Addr::LOCALHOST)));
        assert_eq!(v.port, None);
        let v = via("SIP/2.0/SCTP h;received=lazy-proxy.example");
        assert_eq!(v.transport, Some(Transport::Sctp));
        assert_eq!(v.received(), Some(Host::Name(b"lazy-proxy.example")));
        assert_eq!(v.branch(), None);
        assert!(!v.has_magic_cookie());
    }

    #[test]
    fn malformed_vias() {
        let bad = ParseErrorKind::BadHeader(HeaderName::Via);
        assert_eq!(err(""), ParseError::new(bad, 0));
        assert_eq!(err("SIP"), ParseError::new(bad, 3));
        assert_eq!(err("SIP/2.0"), ParseError::new(bad, 7));
        assert_eq!(err("SIP/2.0/"), ParseError::new(bad, 8));
        assert_eq!(err("SIP/2.0/UDP"), ParseError::new(bad, 11));
        assert_eq!(err("SIP/2.0/UDPhost"), ParseError::new(bad, 15));
        assert_eq!(err("SIP/2.0/UDP  "), ParseError::new(bad, 13));
        assert_eq!(err("SIP/2.0/UDP h:"), ParseError::new(bad, 14));
        assert_eq!(err("SIP/2.0/UDP h:65536"), ParseError::new(bad, 14));
        assert_eq!(err("SIP/2.0/UDP [::1"), ParseError::new(bad, 12));
        assert_eq!(err("SIP/2.0/UDP 2001:db8::1"), ParseError::new(bad, 12));
        assert_eq!(err("SIP/2.0/UDP h junk"), ParseError::new(bad, 14));
        assert_eq!(err("SIP/2.0/UDP h;branch").kind, ParseErrorKind::BadParam);
        assert_eq!(err("SIP/2.0/UDP h;branch").offset, 14);
        assert_eq!(err("SIP/2.0/UDP h;ttl=300").kind, ParseErrorKind::BadParam);
        assert_eq!(err("SIP/2.0/UDP h;rport=x").kind, ParseErrorKind::BadParam);
        assert_eq!(
            err("SIP/2.0/UDP h;rport=70000").kind,
            ParseErrorKind::BadParam
        );
        assert_eq!(
            err("SIP/2.0/UDP h;maddr=a..b").kind,
            ParseErrorKind::BadParam
        );
        assert_eq!(err("SIP/2.0/UDP h;received").kind, ParseErrorKind::BadParam);
        assert_eq!(
            err("SIP/2.0/UDP h;branch=\"x\"").kind,
            ParseErrorKind::BadParam
        );
        assert_eq!(err("SIP/2.0/UDP h;").kind, ParseErrorKind::BadParam);
    }

    #[test]
    fn prefixes_never_panic() {
        let s =
            b"SIP / 2.0 / UDP [2001:db8::1] : 5060 ; branch = z9hG4bK1 ; rport ; received=1.2.3.4";
        for end in 0..=s.len() {
            let _ = Via::parse(&s[..end]);
            let _ = Via::parse(&s[end..]);
        }
        assert!(Via::parse(s).is_ok());
    }

    mod fast_path {
        use proptest::prelude::*;
        use proptest::sample::select;

        use super::super::*;

        fn via_text() -> impl Strategy<Value = String> {
            let proto = select(
                &[
                    "SIP/2.0/",
                    "sip/2.0/",
                    "SIP / 2.0 / ",
                    "SIP/2.0",
                    "SIP/3.0/",
                ][..],
            );
            let transport = select(&["UDP", "TCP", "TLS", "SCTP", "udp", "WS", "", "U;P"][..]);
            let ws = select(&[" ", "  ", "\t", "", "\r\n ", "\r\n"][..]);
            let host = select(
                &[
                    "192.0.2.10",
                    "pc33.atlanta.example.com",
                    "h",
                    "example.com.",
                    "256.1.1.1",
                    "a..b",
                    "-a",
                    "[::1]",
                    "",
                    "1.2.3",
                    "a_b",
                ][..],
            );
            let port = select(
                &[
                    "",
                    ":5060",
                    " : 5060",
                    ":65536",
                    ":",
                    ":0000000005060",
                    ":00000000005060",
                ][..],
            );
            let params = proptest::collection::vec(
                select(
                    &[
                        ";branch=z9hG4bK776asdhds-1-0",
                        ";branch=z9[x]",
                        ";branch",
                        ";Branch=B2",
                        ";branch=\"q\"",
                        ";rport",
                        ";rport=5060",
                        ";rport=x",
                        ";rport=70000",
                        ";received=192.0.2.9",
                        ";received",
                        ";received=\"x\"",
                        ";ttl=1",
                        ";ttl=300",
                        ";maddr=[ff02::1]",
                        ";maddr=a..b",
                        ";x",
                        ";y=\"q;v\"",
                        " ; x = 1",
                        ";",
                        ";=",
                        ";a=",
                        ";k=[::1]:5",
                        ",",
                        " ",
                    ][..],
                ),
                0..5,
            )
            .prop_map(|v| v.concat());
            (proto, transport, ws, host, port, params)
                .prop_map(|(a, b, c, d, e, f)| format!("{a}{b}{c}{d}{e}{f}"))
        }

        proptest! {
            #[test]
            fn fast_via_matches_strict(s in via_text()) {
                let b = s.as_bytes();
                let strict = Via::parse_strict(b);
                let parsed = Via::parse(b);
                prop_assert_eq!(parsed, strict);
                if let Some(fast) = Via::parse_fast(b) {
                    let strict = strict.expect("strict accepts what the fast path accepts");
                    prop_assert_eq!(fast, strict);
                    prop_assert_eq!(fast.transport, strict.transport);
                    prop_assert_eq!(fast.branch(), strict.params.get("branch").flatten());
                }
                if let Ok(v) = parsed {
                    prop_assert_eq!(v.branch(), v.params.get("branch").flatten());
                }
            }
        }

        #[test]
        fn fast_path_covers_the_common_shape() {
            let v = Via::parse_fast(b"SIP/2.0/UDP 192.0.2.10:5060;branch=z9hG4bK776;rport")
                .expect("fast");
            assert_eq!(v.branch(), Some(&b"z9hG4bK776"[..]));
            assert_eq!(v.rport(), Some(None));
        }

        #[test]
        fn replaced_params_are_looked_up_again() {
            let mut v = Via::parse(b"SIP/2.0/UDP h;branch=z9hG4bK1").expect("via");
            let other = Via::parse(b"SIP/2.0/UDP h;branch=z9hG4bK2").expect("via");
            v.params = other.params;
            assert_eq!(v.branch(), Some(&b"z9hG4bK2"[..]));
            assert_eq!(v, other);
        }
    }
}
