//! `name-addr` / `addr-spec` values with header parameters: From, To, Contact, Route,
//! Record-Route (RFC 3261 §20.10, §25.1).

use core::fmt;
use std::borrow::Cow;

use memchr::{memchr, memchr2};

use crate::scan::{
    CachedParam, Cursor, Params, is_gen_value_char, is_token_char, unescape_quoted, unquote,
};
use crate::uri::Uri;
use crate::{ParseError, ParseErrorKind};

/// An address with header parameters: `[display-name] <uri> *(;param)` or `uri *(;param)`.
///
/// In the addr-spec form (no angle brackets) the URI ends at the first `;`: everything after
/// it is a header parameter (RFC 3261 §20.10), so `sip:a@b;tag=1` has the tag as a header
/// parameter and no URI parameters.
#[derive(Clone, Copy)]
#[non_exhaustive]
pub struct NameAddr<'a> {
    /// The display name as written: a sequence of tokens (`A B`), or a quoted string with its
    /// quotes (`"A"`). See [`display_name_unquoted`](Self::display_name_unquoted).
    pub display_name: Option<&'a [u8]>,
    /// The URI.
    pub uri: Uri<'a>,
    /// Whether the URI was enclosed in `<...>`.
    pub angle: bool,
    /// The header parameters (after `>`, or after the URI in the addr-spec form).
    pub params: Params<'a>,
    /// The `tag` value found while parsing.
    tag: CachedParam<'a>,
}

impl PartialEq for NameAddr<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.display_name == other.display_name
            && self.uri == other.uri
            && self.angle == other.angle
            && self.params == other.params
    }
}

impl Eq for NameAddr<'_> {}

impl fmt::Debug for NameAddr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NameAddr")
            .field("display_name", &self.display_name)
            .field("uri", &self.uri)
            .field("angle", &self.angle)
            .field("params", &self.params)
            .finish()
    }
}

impl<'a> NameAddr<'a> {
    /// Parses one address (one element of a list header; surrounding white space is allowed,
    /// white space inside `<...>` is not). Offsets in errors are relative to `s`; kinds are
    /// [`ParseErrorKind::BadUri`] for the address and URI, [`ParseErrorKind::BadParam`] for
    /// parameters and [`ParseErrorKind::BadQuotedString`] for the display name.
    pub fn parse(s: &'a [u8]) -> Result<Self, ParseError> {
        if let Some(a) = Self::parse_fast(s) {
            return Ok(a);
        }
        Self::parse_strict(s)
    }

    /// The common shapes (`"Name" <uri>;params`, `Name <uri>;params`, `<uri>;params`,
    /// `uri;params`) without white space outside the display name, without escapes in a
    /// quoted display name and with a URI [`Uri::parse`] accepts. Returns `None` for anything
    /// else (every error included), which [`Self::parse_strict`] then handles; what it
    /// accepts is exactly what the strict parser accepts, with the same result.
    #[inline]
    fn parse_fast(s: &'a [u8]) -> Option<Self> {
        let mut display_name = None;
        let mut angle = true;
        let mut i = match s.first()? {
            b'"' => {
                let mut close = 1;
                while s.get(close).is_some_and(|&b| b != b'"' && b != b'\\') {
                    close += 1;
                }
                if s.get(close) != Some(&b'"') {
                    return None;
                }
                display_name = s.get(..=close);
                let mut i = close + 1;
                while matches!(s.get(i), Some(b' ' | b'\t')) {
                    i += 1;
                }
                if s.get(i) != Some(&b'<') {
                    return None;
                }
                i + 1
            }
            b'<' => 1,
            _ => {
                // `*(token LWS) "<"`, or else an addr-spec.
                let mut i = 0;
                let mut last_end = 0;
                loop {
                    let start = i;
                    while s.get(i).is_some_and(|&b| is_display_char(b)) {
                        i += 1;
                    }
                    if i == start {
                        break;
                    }
                    last_end = i;
                    while matches!(s.get(i), Some(b' ' | b'\t')) {
                        i += 1;
                    }
                }
                match s.get(i) {
                    Some(b'<') if last_end > 0 => {
                        display_name = s.get(..last_end);
                        i + 1
                    }
                    // A fold (or a stray line break) between tokens: leave it to the strict
                    // parser.
                    Some(b'\r' | b'\n') => return None,
                    _ => {
                        angle = false;
                        0
                    }
                }
            }
        };
        let uri_start = i;
        if angle && let Some((uri, end)) = Uri::parse_sip_prefix(s, i) {
            // The URI stops right at `>`: it is all of the text the strict parser takes.
            if s.get(end) == Some(&b'>') {
                return Self::params_fast(s, display_name, uri, true, end + 1);
            }
        }
        let uri_text = if angle {
            let gt = i + memchr(b'>', s.get(i..)?)?;
            i = gt + 1;
            s.get(uri_start..gt)?
        } else {
            while s
                .get(i)
                .is_some_and(|&b| !matches!(b, b';' | b' ' | b'\t' | b'\r' | b'\n'))
            {
                i += 1;
            }
            s.get(uri_start..i)?
        };
        let uri = Uri::parse(uri_text).ok()?;
        Self::params_fast(s, display_name, uri, angle, i)
    }

    /// The end of [`Self::parse_fast`]: the header parameters from `i` to the end of `s`.
    #[inline]
    fn params_fast(
        s: &'a [u8],
        display_name: Option<&'a [u8]>,
        uri: Uri<'a>,
        angle: bool,
        mut i: usize,
    ) -> Option<Self> {
        let params_start = i;
        let mut tag = None;
        let mut seen_tag = false;
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
            if s.get(i) == Some(&b'=') {
                i += 1;
                let value_start = i;
                if s.get(i) == Some(&b'"') {
                    i += 1 + memchr2(b'"', b'\\', s.get(i + 1..)?)?;
                    if s.get(i) != Some(&b'"') {
                        return None;
                    }
                    i += 1;
                } else {
                    while s.get(i).is_some_and(|&b| is_gen_value_char(b)) {
                        i += 1;
                    }
                    if i == value_start {
                        return None;
                    }
                }
                value = s.get(value_start..i);
            }
            if !seen_tag && name.len() == 3 && name.eq_ignore_ascii_case(b"tag") {
                seen_tag = true;
                tag = value;
            }
        }
        if i != s.len() {
            return None;
        }
        let params = Params::from_raw(s.get(params_start..i)?);
        Some(Self {
            display_name,
            uri,
            angle,
            params,
            tag: CachedParam::new(params, tag),
        })
    }

    /// The full parser, with every error and its offset.
    fn parse_strict(s: &'a [u8]) -> Result<Self, ParseError> {
        let mut c = Cursor::new(s);
        c.skip_lws();
        let start = c.pos();
        let mut display_name = None;
        let mut angle = false;
        match c.peek() {
            Some(b'"') => {
                display_name = Some(c.quoted()?);
                c.skip_lws();
                if !c.eat(b'<') {
                    return Err(c.error(ParseErrorKind::BadUri));
                }
                angle = true;
            }
            Some(b'<') => {
                c.bump();
                angle = true;
            }
            _ => {
                // `*(token LWS) "<"`, or else an addr-spec.
                let mut probe = c.clone();
                let mut last_end = start;
                loop {
                    if probe.take_while(is_display_char).is_empty() {
                        break;
                    }
                    last_end = probe.pos();
                    probe.skip_lws();
                }
                if last_end > start && probe.eat(b'<') {
                    display_name = s.get(start..last_end);
                    c = probe;
                    angle = true;
                }
            }
        }
        let uri_start = c.pos();
        let uri_text = if angle {
            let text = c.take_while(|b| b != b'>');
            if !c.eat(b'>') {
                return Err(ParseError::new(
                    ParseErrorKind::BadUri,
                    uri_start.saturating_sub(1),
                ));
            }
            text
        } else {
            c.take_while(|b| !matches!(b, b';' | b' ' | b'\t' | b'\r' | b'\n'))
        };
        let uri = Uri::parse(uri_text).map_err(|e| e.shifted(uri_start))?;
        let params = Params::parse(&mut c, is_param_char)?;
        c.skip_lws();
        if !c.is_empty() {
            return Err(c.error(if angle {
                ParseErrorKind::BadParam
            } else {
                ParseErrorKind::BadUri
            }));
        }
        Ok(Self {
            display_name,
            uri,
            angle,
            params,
            tag: CachedParam::new(params, params.get("tag").flatten()),
        })
    }

    /// The display name without quotes and with `\x` escapes resolved (allocates only when
    /// there are escapes). A token display name is returned as written.
    pub fn display_name_unquoted(&self) -> Option<Cow<'a, [u8]>> {
        let d = self.display_name?;
        if d.first() != Some(&b'"') {
            return Some(Cow::Borrowed(d));
        }
        Some(match unquote(d) {
            (inner, false) => Cow::Borrowed(inner),
            (_, true) => Cow::Owned(unescape_quoted(d)),
        })
    }

    /// The header parameter `name` (case-insensitive): `Some(None)` for a flag,
    /// `Some(Some(v))` with its value as written (quotes kept), `None` if absent.
    pub fn param(&self, name: &str) -> Option<Option<&'a [u8]>> {
        self.params.get(name)
    }

    /// The `tag` parameter's value.
    pub fn tag(&self) -> Option<&'a [u8]> {
        self.tag.get(&self.params, "tag")
    }
}

/// A display-name token byte; bytes above 0x7F are accepted too (unquoted UTF-8 names).
fn is_display_char(b: u8) -> bool {
    is_token_char(b) || b >= 0x80
}

/// `gen-value` characters: `token / host` (`[`, `]` and `:` for IPv6 references).
pub(crate) fn is_param_char(b: u8) -> bool {
    is_token_char(b) || matches!(b, b'[' | b']' | b':')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uri::{Host, Scheme};

    fn na(s: &str) -> NameAddr<'_> {
        match NameAddr::parse(s.as_bytes()) {
            Ok(a) => a,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    fn err(s: &str) -> ParseError {
        match NameAddr::parse(s.as_bytes()) {
            Ok(a) => panic!("{s} parsed: {a:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn quoted_display_name_without_space() {
        let a = na(r#""A"<sip:x@h>"#);
        assert_eq!(a.display_name, Some(&br#""A""#[..]));
        assert_eq!(a.display_name_unquoted().as_deref(), Some(&b"A"[..]));
        assert!(a.angle);
        assert_eq!(a.uri.user(), Some(&b"x"[..]));
        assert!(a.params.is_empty());
        assert_eq!(a.tag(), None);
    }

    #[test]
    fn quoted_display_name_with_escapes_and_commas() {
        let a = na(r#" "Doe, \"JD\" John"   <sips:j@h;lr>;tag=9 "#);
        assert_eq!(a.display_name, Some(&br#""Doe, \"JD\" John""#[..]));
        assert_eq!(
            a.display_name_unquoted().as_deref(),
            Some(&br#"Doe, "JD" John"#[..])
        );
        assert_eq!(a.uri.scheme(), Scheme::Sips);
        assert!(a.uri.lr());
        assert_eq!(a.tag(), Some(&b"9"[..]));
        let a = na(r#""" <sip:h>"#);
        assert_eq!(a.display_name_unquoted().as_deref(), Some(&b""[..]));
    }

    #[test]
    fn token_display_names() {
        let a = na("A B <sip:x@h>");
        assert_eq!(a.display_name, Some(&b"A B"[..]));
        assert_eq!(a.display_name_unquoted().as_deref(), Some(&b"A B"[..]));
        let a = na("Bob\r\n <sip:x@h>");
        assert_eq!(a.display_name, Some(&b"Bob"[..]));
        let a = na("J\u{f6}rg <sip:x@h>");
        assert_eq!(a.display_name, Some("J\u{f6}rg".as_bytes()));
    }

    #[test]
    fn spacing_around_params() {
        let a = na("<sip:x@h> ; tag = 1 ;foo; bar=\"q;v\"");
        assert_eq!(a.display_name, None);
        assert!(a.angle);
        assert_eq!(a.tag(), Some(&b"1"[..]));
        assert_eq!(a.param("FOO"), Some(None));
        assert_eq!(a.param("bar"), Some(Some(&b"\"q;v\""[..])));
        assert_eq!(a.params.iter().count(), 3);
    }

    #[test]
    fn addr_spec_params_are_header_params() {
        let a = na("sip:x@h;tag=1");
        assert!(!a.angle);
        assert_eq!(a.uri.as_bytes(), b"sip:x@h");
        assert!(a.uri.params().is_empty());
        assert_eq!(a.tag(), Some(&b"1"[..]));
        let a = na("sip:x@h;transport=tcp ; tag=2");
        assert_eq!(a.uri.transport(), None);
        assert_eq!(a.param("transport"), Some(Some(&b"tcp"[..])));
        assert_eq!(a.tag(), Some(&b"2"[..]));
        let a = na("<sip:x@h;transport=tcp>;tag=2");
        assert_eq!(a.uri.transport(), Some(holdline_base::Transport::Tcp));
        assert_eq!(a.param("transport"), None);
        let a = na("  sip:x@[::1]:5060  ");
        assert_eq!(a.uri.host(), Some(Host::V6(std::net::Ipv6Addr::LOCALHOST)));
        assert_eq!(a.uri.port(), Some(5060));
    }

    #[test]
    fn other_schemes_in_addresses() {
        let a = na("<urn:service:sos>;x=1");
        assert_eq!(a.uri.scheme(), Scheme::Other(b"urn"));
        assert_eq!(a.param("x"), Some(Some(&b"1"[..])));
        let a = na("\"T\" <tel:+1-555>");
        assert_eq!(a.uri.number(), Some(&b"+1-555"[..]));
        let a = na("<sip:h>;+sip.instance=\"<urn:uuid:0001>\"");
        assert_eq!(
            a.param("+sip.instance"),
            Some(Some(&b"\"<urn:uuid:0001>\""[..]))
        );
    }

    #[test]
    fn malformed_addresses() {
        assert_eq!(err("<sip:x@h").kind, ParseErrorKind::BadUri);
        assert_eq!(err("<sip:x@h").offset, 0);
        assert_eq!(err("< sip:x@h>").offset, 1);
        assert_eq!(err("<sip:x@h >").offset, 8);
        assert_eq!(err("\"A sip:x@h").kind, ParseErrorKind::BadQuotedString);
        assert_eq!(err("\"A\" sip:x@h").offset, 4);
        assert_eq!(err("<sip:x@h> junk").kind, ParseErrorKind::BadParam);
        assert_eq!(err("<sip:x@h>;").kind, ParseErrorKind::BadParam);
        assert_eq!(err("<sip:x@h>;tag=").kind, ParseErrorKind::BadParam);
        assert_eq!(
            err("<sip:x@h>;tag=\"open").kind,
            ParseErrorKind::BadQuotedString
        );
        assert_eq!(err("sip:x@h junk").offset, 8);
        assert_eq!(err("A B sip:x@h").kind, ParseErrorKind::BadUri);
        assert_eq!(err("<>").offset, 1);
        assert_eq!(err("").kind, ParseErrorKind::BadUri);
        assert_eq!(err("sip:user;x@host").offset, 10);
        assert_eq!(err("<sip:a@b>>").offset, 9);
    }

    #[test]
    fn prefixes_never_panic() {
        let s = br#" "A\"b" <sips:u:p@[::1]:1;lr?h=v> ; tag = "x;y" ;q=0.5"#;
        for end in 0..=s.len() {
            let _ = NameAddr::parse(&s[..end]);
            let _ = NameAddr::parse(&s[end..]);
        }
        assert!(NameAddr::parse(s).is_ok());
    }

    mod fast_path {
        use proptest::prelude::*;
        use proptest::sample::select;

        use super::super::*;

        fn name_addr_text() -> impl Strategy<Value = String> {
            let display = select(
                &[
                    "",
                    "\"Alice\" ",
                    "\"Alice\"",
                    "\"A\\\"b\" ",
                    "\"A,<b>;\" ",
                    "Bob ",
                    "A B ",
                    "J\u{f6}rg ",
                    " ",
                    "Bob\r\n ",
                    "\"open ",
                    "A\t",
                    "<",
                    "x:y ",
                ][..],
            );
            let open = select(&["<", "", "< "][..]);
            let uri = select(
                &[
                    "sip:bob@biloxi.example.com",
                    "sip:proxy.example.com;lr",
                    "sips:a@192.0.2.1:5061",
                    "sip:a:b@h",
                    "sip:h;ttl=1",
                    "tel:+1-555",
                    "urn:x",
                    "sip:h?a=b",
                    "sip:",
                    "sip:h ",
                    "sip:u@h>",
                    "sip:a,b@h",
                    "SIP:h",
                ][..],
            );
            let close = select(&[">", "", " >", ">>"][..]);
            let params = proptest::collection::vec(
                select(
                    &[
                        ";tag=1928301774",
                        ";TAG=x",
                        ";tag",
                        ";tag=\"a;b\"",
                        ";tag=\"a\\\"b\"",
                        ";tag=\"open",
                        ";x",
                        ";y=[::1]:5",
                        " ; z = 1",
                        ";",
                        ";=",
                        ";a=",
                        " junk",
                        ",",
                        ";q=0.5",
                        " ",
                    ][..],
                ),
                0..4,
            )
            .prop_map(|v| v.concat());
            (display, open, uri, close, params)
                .prop_map(|(a, b, c, d, e)| format!("{a}{b}{c}{d}{e}"))
        }

        proptest! {
            #[test]
            fn fast_name_addr_matches_strict(s in name_addr_text()) {
                let b = s.as_bytes();
                let strict = NameAddr::parse_strict(b);
                let parsed = NameAddr::parse(b);
                prop_assert_eq!(parsed, strict);
                if let Some(fast) = NameAddr::parse_fast(b) {
                    let strict = strict.expect("strict accepts what the fast path accepts");
                    prop_assert_eq!(fast, strict);
                    prop_assert_eq!(fast.tag(), strict.params.get("tag").flatten());
                    prop_assert_eq!(fast.uri.lr(), strict.uri.params().contains("lr"));
                }
                if let Ok(a) = parsed {
                    prop_assert_eq!(a.tag(), a.params.get("tag").flatten());
                }
            }
        }

        #[test]
        fn fast_path_covers_the_common_shapes() {
            for s in [
                "\"Alice\" <sip:alice@atlanta.example.com>;tag=1928301774",
                "Bob <sip:bob@biloxi.example.com>",
                "<sip:proxy.biloxi.example.com;lr>",
                "sip:a@b;tag=1",
            ] {
                assert!(NameAddr::parse_fast(s.as_bytes()).is_some(), "{s}");
            }
        }

        #[test]
        fn replaced_params_are_looked_up_again() {
            let mut a = NameAddr::parse(b"<sip:a@b>;tag=1").expect("addr");
            let other = NameAddr::parse(b"<sip:a@b>;tag=2").expect("addr");
            a.params = other.params;
            assert_eq!(a.tag(), Some(&b"2"[..]));
            assert_eq!(a, other);
        }
    }
}
