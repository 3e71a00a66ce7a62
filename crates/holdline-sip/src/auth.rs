//! Authentication headers: credentials (Authorization, Proxy-Authorization) and challenges
//! (WWW-Authenticate, Proxy-Authenticate), RFC 3261 §22, §25.1 with RFC 7235/7616 syntax.

use crate::scan::{Cursor, unquote};
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
    fn prefixes_never_panic() {
        let s = br#"Digest username="a\"b", realm=r, nonce="x,y", uri="sip:h""#;
        for end in 0..=s.len() {
            let _ = Credentials::parse(&s[..end]);
            let _ = Challenge::parse(&s[end..]);
        }
        assert!(Credentials::parse(s).is_ok());
    }
}
