//! Authentication headers: credentials (Authorization, Proxy-Authorization) and challenges
//! (WWW-Authenticate, Proxy-Authenticate), RFC 3261 §22, §25.1 with RFC 7235/7616 syntax.

use std::borrow::Cow;

use crate::scan::{Cursor, unescape_quoted, unquote};
use crate::{ParseError, ParseErrorKind};

/// One `name=value` authentication parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthParam<'a> {
    /// The name, as written.
    pub name: &'a [u8],
    /// The value as written: a token, or a quoted string with its quotes.
    pub value: &'a [u8],
}

impl<'a> AuthParam<'a> {
    /// The value with its quotes stripped (`\x` escapes left as written).
    pub fn unquoted(&self) -> &'a [u8] {
        unquote(self.value).0
    }
}

/// A comma-separated list of `name=value` parameters, already validated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuthParams<'a> {
    raw: &'a [u8],
}

impl<'a> AuthParams<'a> {
    /// The raw text of the list.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.raw
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// The parameters in order.
    pub fn iter(&self) -> AuthParamIter<'a> {
        AuthParamIter {
            c: Cursor::new(self.raw),
        }
    }

    /// The value of the first parameter called `name` (case-insensitive), quotes stripped and
    /// escapes left as written.
    pub fn get(&self, name: &str) -> Option<&'a [u8]> {
        self.iter()
            .find(|p| p.name.eq_ignore_ascii_case(name.as_bytes()))
            .map(|p| p.unquoted())
    }

    /// The value of the first parameter called `name` (case-insensitive) with its quotes
    /// stripped and its `\x` escapes resolved (borrowed unless there was an escape).
    pub fn get_unescaped(&self, name: &str) -> Option<Cow<'a, [u8]>> {
        let p = self
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(name.as_bytes()))?;
        Some(match unquote(p.value) {
            (_, true) => Cow::Owned(unescape_quoted(p.value)),
            (inner, false) => Cow::Borrowed(inner),
        })
    }
}

impl<'a> IntoIterator for AuthParams<'a> {
    type Item = AuthParam<'a>;
    type IntoIter = AuthParamIter<'a>;
    fn into_iter(self) -> AuthParamIter<'a> {
        self.iter()
    }
}

/// Iterator over [`AuthParams`].
#[derive(Clone, Debug)]
pub struct AuthParamIter<'a> {
    c: Cursor<'a>,
}

impl<'a> Iterator for AuthParamIter<'a> {
    type Item = AuthParam<'a>;

    fn next(&mut self) -> Option<AuthParam<'a>> {
        next_param(&mut self.c).ok().flatten()
    }
}

/// Parses the next parameter of a list, skipping empty elements and the comma after it;
/// `Ok(None)` at the end.
fn next_param<'a>(c: &mut Cursor<'a>) -> Result<Option<AuthParam<'a>>, ParseError> {
    loop {
        c.skip_lws();
        if c.is_empty() {
            return Ok(None);
        }
        if !c.eat(b',') {
            break;
        }
    }
    let name = c.token(ParseErrorKind::BadParam)?;
    if !c.eat_sep(b'=') {
        return Err(c.error(ParseErrorKind::BadParam));
    }
    let value = if c.peek() == Some(b'"') {
        c.quoted()?
    } else {
        c.token(ParseErrorKind::BadParam)?
    };
    c.skip_lws();
    if !c.is_empty() && !c.eat(b',') {
        return Err(c.error(ParseErrorKind::BadParam));
    }
    Ok(Some(AuthParam { name, value }))
}

/// The parts shared by credentials and challenges.
struct Parsed<'a> {
    scheme: &'a [u8],
    params: AuthParams<'a>,
    token68: Option<&'a [u8]>,
}

/// `auth-scheme [ 1*SP ( token68 / #auth-param ) ]`.
fn parse_auth(s: &[u8]) -> Result<Parsed<'_>, ParseError> {
    let mut c = Cursor::new(s);
    c.skip_lws();
    let scheme = c.token(ParseErrorKind::BadParam)?;
    let before = c.pos();
    c.skip_lws();
    if c.is_empty() {
        return Ok(Parsed {
            scheme,
            params: AuthParams::default(),
            token68: None,
        });
    }
    if c.pos() == before {
        return Err(c.error(ParseErrorKind::BadParam));
    }
    let start = c.pos();
    // token68: `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`, alone.
    let mut probe = c.clone();
    let t = probe.take_while(|b| {
        b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/')
    });
    probe.take_while(|b| b == b'=');
    let end = probe.pos();
    probe.skip_lws();
    if !t.is_empty() && probe.is_empty() {
        return Ok(Parsed {
            scheme,
            params: AuthParams::default(),
            token68: s.get(start..end),
        });
    }
    let mut last = start;
    while next_param(&mut c)?.is_some() {
        last = c.pos();
    }
    let raw = s.get(start..last).unwrap_or_default();
    Ok(Parsed {
        scheme,
        params: AuthParams { raw },
        token68: None,
    })
}

macro_rules! auth_value {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct $name<'a> {
            /// The scheme as written (`Digest`, `Basic`, ...); compare case-insensitively.
            pub scheme: &'a [u8],
            /// The `name=value` parameters (empty for a token68 value).
            pub params: AuthParams<'a>,
            /// A `token68` value (e.g. the base64 of `Basic`), as written.
            pub token68: Option<&'a [u8]>,
        }

        impl<'a> $name<'a> {
            /// Parses the value: a scheme, then a `token68` or a comma-separated list of
            /// `name=value` parameters (values are tokens or quoted strings; commas inside
            /// quotes do not separate). Errors are [`ParseErrorKind::BadParam`] or
            /// [`ParseErrorKind::BadQuotedString`] with offsets relative to `s`.
            pub fn parse(s: &'a [u8]) -> Result<Self, ParseError> {
                let Parsed { scheme, params, token68 } = parse_auth(s)?;
                Ok(Self { scheme, params, token68 })
            }

            /// Whether the scheme is `Digest` (case-insensitive).
            pub fn is_digest(&self) -> bool {
                self.scheme.eq_ignore_ascii_case(b"Digest")
            }

            /// The parameter `name` (case-insensitive), quotes stripped, escapes as written.
            pub fn param(&self, name: &str) -> Option<&'a [u8]> {
                self.params.get(name)
            }

            /// The `realm` parameter.
            pub fn realm(&self) -> Option<&'a [u8]> {
                self.param("realm")
            }

            /// The `nonce` parameter.
            pub fn nonce(&self) -> Option<&'a [u8]> {
                self.param("nonce")
            }

            /// The `algorithm` parameter (e.g. `MD5`, `SHA-256`).
            pub fn algorithm(&self) -> Option<&'a [u8]> {
                self.param("algorithm")
            }

            /// The `qop` parameter (a list such as `auth,auth-int` in a challenge, one value
            /// in credentials).
            pub fn qop(&self) -> Option<&'a [u8]> {
                self.param("qop")
            }

            /// The `opaque` parameter.
            pub fn opaque(&self) -> Option<&'a [u8]> {
                self.param("opaque")
            }
        }
    };
}

auth_value! {
    /// The value of an Authorization or Proxy-Authorization header.
    Credentials
}

auth_value! {
    /// The value of a WWW-Authenticate or Proxy-Authenticate header.
    Challenge
}

impl<'a> Credentials<'a> {
    /// The `username` parameter.
    pub fn username(&self) -> Option<&'a [u8]> {
        self.param("username")
    }

    /// The `uri` parameter (the digest-uri).
    pub fn uri(&self) -> Option<&'a [u8]> {
        self.param("uri")
    }

    /// The `response` parameter.
    pub fn response(&self) -> Option<&'a [u8]> {
        self.param("response")
    }

    /// The `cnonce` parameter.
    pub fn cnonce(&self) -> Option<&'a [u8]> {
        self.param("cnonce")
    }

    /// The `nc` (nonce count) parameter, as written (8 hex digits).
    pub fn nc(&self) -> Option<&'a [u8]> {
        self.param("nc")
    }

    /// The `nc` parameter's value: exactly 8 hexadecimal digits (RFC 7616 §3.4), else `None`.
    pub fn nonce_count(&self) -> Option<u32> {
        let nc = self.nc()?;
        if nc.len() != 8 || !nc.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        u32::from_str_radix(std::str::from_utf8(nc).ok()?, 16).ok()
    }

    /// The `username` parameter with its escapes resolved (`"a\"b"` is `a"b`).
    pub fn username_unescaped(&self) -> Option<Cow<'a, [u8]>> {
        self.params.get_unescaped("username")
    }
}

/// The parts of a `Digest` challenge (RFC 7616 §3.3) that [`write_digest_challenge`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DigestChallenge<'a> {
    /// The realm (written as a quoted string, `"` and `\` escaped).
    pub realm: &'a [u8],
    /// The nonce (written quoted; must not contain `"` or `\`).
    pub nonce: &'a [u8],
    /// The algorithm token (`MD5`, `SHA-256`).
    pub algorithm: &'a str,
    /// The `qop` options offered (`auth`), written quoted; empty: none.
    pub qop: &'a str,
    /// `stale=true`: the nonce was too old, the credentials were right.
    pub stale: bool,
}

/// Appends the value of a WWW-Authenticate / Proxy-Authenticate header for `c`:
/// `Digest realm="R", nonce="N", algorithm=A, qop="auth"[, stale=true]`. What
/// [`Challenge::parse`] reads back gives the same realm, nonce, algorithm, qop and stale.
pub fn write_digest_challenge(out: &mut Vec<u8>, c: &DigestChallenge<'_>) {
    out.extend_from_slice(b"Digest realm=");
    write_quoted(out, c.realm);
    out.extend_from_slice(b", nonce=");
    write_quoted(out, c.nonce);
    out.extend_from_slice(b", algorithm=");
    out.extend_from_slice(c.algorithm.as_bytes());
    if !c.qop.is_empty() {
        out.extend_from_slice(b", qop=");
        write_quoted(out, c.qop.as_bytes());
    }
    if c.stale {
        out.extend_from_slice(b", stale=true");
    }
}

/// `"..."` with `"` and `\` escaped; CR, LF and other control bytes are left out (they
/// cannot appear in a quoted string).
fn write_quoted(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    for &b in s {
        match b {
            b'"' | b'\\' => {
                out.push(b'\\');
                out.push(b);
            }
            b if b < 0x20 || b == 0x7f => {}
            b => out.push(b),
        }
    }
    out.push(b'"');
}

impl<'a> Challenge<'a> {
    /// Whether `stale=true` (case-insensitive) is present.
    pub fn stale(&self) -> bool {
        self.param("stale")
            .is_some_and(|v| v.eq_ignore_ascii_case(b"true"))
    }

    /// The `domain` parameter.
    pub fn domain(&self) -> Option<&'a [u8]> {
        self.param("domain")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_credentials() {
        let s = br#"Digest username="bob", realm="biloxi.example.com", nonce="dcd98b,7102dd2f0e8b11d0f600bfb0c093",
   uri="sip:bob@biloxi.example.com", qop=auth, nc=00000001, cnonce="0a4f113b",
   response="6629fae49393a05397450978507c4ef1", opaque="5ccc069c403ebaf9f0171e9517f40e41", algorithm=MD5"#;
        let c = Credentials::parse(s).expect("credentials");
        assert!(c.is_digest());
        assert_eq!(c.scheme, b"Digest");
        assert_eq!(c.username(), Some(&b"bob"[..]));
        assert_eq!(c.realm(), Some(&b"biloxi.example.com"[..]));
        assert_eq!(c.nonce(), Some(&b"dcd98b,7102dd2f0e8b11d0f600bfb0c093"[..]));
        assert_eq!(c.uri(), Some(&b"sip:bob@biloxi.example.com"[..]));
        assert_eq!(c.qop(), Some(&b"auth"[..]));
        assert_eq!(c.nc(), Some(&b"00000001"[..]));
        assert_eq!(c.cnonce(), Some(&b"0a4f113b"[..]));
        assert_eq!(c.response(), Some(&b"6629fae49393a05397450978507c4ef1"[..]));
        assert_eq!(c.opaque(), Some(&b"5ccc069c403ebaf9f0171e9517f40e41"[..]));
        assert_eq!(c.algorithm(), Some(&b"MD5"[..]));
        assert_eq!(c.param("USERNAME"), Some(&b"bob"[..]));
        assert_eq!(c.params.iter().count(), 10);
        assert_eq!(c.token68, None);
        let first = c.params.iter().next().expect("first");
        assert_eq!(first.value, br#""bob""#);
        assert_eq!(first.unquoted(), b"bob");
    }

    #[test]
    fn challenge_with_spacing_and_escapes() {
        let s = br#"digest realm = "a \"b\", c" ,, qop="auth,auth-int" , stale=TRUE,domain="sip:x sip:y""#;
        let c = Challenge::parse(s).expect("challenge");
        assert!(c.is_digest());
        assert_eq!(c.realm(), Some(&br#"a \"b\", c"#[..]));
        assert_eq!(c.qop(), Some(&b"auth,auth-int"[..]));
        assert!(c.stale());
        assert_eq!(c.domain(), Some(&b"sip:x sip:y"[..]));
        assert_eq!(c.nonce(), None);
        assert_eq!(c.params.iter().count(), 4);
        assert!(!Challenge::parse(b"Digest stale=false").expect("c").stale());
    }

    #[test]
    fn other_schemes() {
        let c = Credentials::parse(b"Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==").expect("basic");
        assert!(!c.is_digest());
        assert_eq!(c.scheme, b"Basic");
        assert_eq!(c.token68, Some(&b"QWxhZGRpbjpvcGVuIHNlc2FtZQ=="[..]));
        assert!(c.params.is_empty());
        // A lone token (with trailing `=`s) is a token68, not a parameter.
        let c = Credentials::parse(b"Digest a=").expect("token68");
        assert_eq!(c.token68, Some(&b"a="[..]));
        assert_eq!(c.param("a"), None);
        let c = Challenge::parse(b"Bearer").expect("bare scheme");
        assert_eq!(c.scheme, b"Bearer");
        assert_eq!(c.token68, None);
        let c = Challenge::parse(b"Newauth realm=\"apps\", type=1").expect("newauth");
        assert_eq!(c.param("type"), Some(&b"1"[..]));
        assert_eq!(c.realm(), Some(&b"apps"[..]));
    }

    #[test]
    fn malformed() {
        let e = |s: &[u8]| Credentials::parse(s).expect_err("must fail");
        assert_eq!(e(b""), ParseError::new(ParseErrorKind::BadParam, 0));
        assert_eq!(
            e(b"Digest,a=b"),
            ParseError::new(ParseErrorKind::BadParam, 6)
        );
        assert_eq!(
            e(b"Digest a=b,c"),
            ParseError::new(ParseErrorKind::BadParam, 12)
        );
        assert_eq!(
            Credentials::parse(b"Digest a=b,").map(|c| c.params.iter().count()),
            Ok(1)
        );
        assert_eq!(e(b"Digest a=\"x").kind, ParseErrorKind::BadQuotedString);
        assert_eq!(
            e(b"Digest a=b c=d"),
            ParseError::new(ParseErrorKind::BadParam, 11)
        );
        assert_eq!(e(b"Digest a=b, =d").kind, ParseErrorKind::BadParam);
        assert_eq!(e(b"Digest a=<b>").kind, ParseErrorKind::BadParam);
    }

    #[test]
    fn nonce_count_and_escaped_username() {
        let c = Credentials::parse(br#"Digest username="a\"b", nc=0000000a, qop=auth"#)
            .expect("credentials");
        assert_eq!(c.nonce_count(), Some(10));
        assert_eq!(c.username_unescaped().as_deref(), Some(&b"a\"b"[..]));
        let plain = Credentials::parse(b"Digest username=bob, nc=1").expect("credentials");
        assert!(matches!(
            plain.username_unescaped(),
            Some(Cow::Borrowed(b"bob"))
        ));
        assert_eq!(plain.nonce_count(), None, "nc must have 8 digits");
        let bad = Credentials::parse(b"Digest nc=0000000g").expect("credentials");
        assert_eq!(bad.nonce_count(), None);
    }

    #[test]
    fn written_challenges_parse_back() {
        let mut out = Vec::new();
        write_digest_challenge(
            &mut out,
            &DigestChallenge {
                realm: br#"ex"ample\.com"#,
                nonce: b"0123abcd",
                algorithm: "SHA-256",
                qop: "auth",
                stale: true,
            },
        );
        let c = Challenge::parse(&out).expect("challenge");
        assert!(c.is_digest());
        assert_eq!(
            c.params.get_unescaped("realm").as_deref(),
            Some(&br#"ex"ample\.com"#[..])
        );
        assert_eq!(c.nonce(), Some(&b"0123abcd"[..]));
        assert_eq!(c.algorithm(), Some(&b"SHA-256"[..]));
        assert_eq!(c.qop(), Some(&b"auth"[..]));
        assert!(c.stale());
    }

    #[test]
    fn prefixes_never_panic() {
        let s = br#"Digest username="a\"b", realm=r, nonce="x,y", uri="sip:h""#;
        for end in 0..=s.len() {
            let _ = Credentials::parse(&s[..end]);
            let _ = Challenge::parse(&s[end..]);
        }
        assert!(Credentials::parse(s).is_ok());
    }
}
