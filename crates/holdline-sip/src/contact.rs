//! One Contact value (RFC 3261 §20.10, §25.1).

use crate::addr::NameAddr;
use crate::scan::{parse_u32, trim_lws};
use crate::uri::offset_in;
use crate::{ParseError, ParseErrorKind};

/// One Contact value: `*` or an address with `expires`/`q` and other parameters.
///
/// `Contact: *` (remove all bindings, RFC 3261 §10.2.2) must be the only Contact value of a
/// message; [`Message::contacts`](crate::Message::contacts) enforces that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
// Boxing the address would allocate on the parse path; a Contact lives on the stack briefly.
#[allow(clippy::large_enum_variant)]
pub enum Contact<'a> {
    /// `*`.
    Star,
    /// An address.
    Addr(NameAddr<'a>),
}

impl<'a> Contact<'a> {
    /// Parses one Contact value. `expires` must be a decimal number and `q` a `qvalue`
    /// (0 to 1 with at most three decimals), else [`ParseErrorKind::BadParam`] at the
    /// parameter's name; other errors as [`NameAddr::parse`]. Offsets are relative to `s`.
    pub fn parse(s: &'a [u8]) -> Result<Self, ParseError> {
        if trim_lws(s) == b"*" {
            return Ok(Self::Star);
        }
        let a = NameAddr::parse(s)?;
        for p in a.params.iter() {
            let ok = if p.name.eq_ignore_ascii_case(b"expires") {
                p.value.is_some_and(|v| parse_expires(v).is_some())
            } else if p.name.eq_ignore_ascii_case(b"q") {
                p.value.is_some_and(|v| parse_qvalue(v).is_some())
            } else {
                true
            };
            if !ok {
                return Err(ParseError::new(
                    ParseErrorKind::BadParam,
                    offset_in(s, p.name),
                ));
            }
        }
        Ok(Self::Addr(a))
    }

    /// Whether this is `*`.
    pub fn is_star(&self) -> bool {
        matches!(self, Self::Star)
    }

    /// The address, unless this is `*`.
    pub fn addr(&self) -> Option<&NameAddr<'a>> {
        match self {
            Self::Star => None,
            Self::Addr(a) => Some(a),
        }
    }

    /// The `expires` parameter in seconds; values of 2³² or more read as 2³²−1.
    pub fn expires(&self) -> Option<u32> {
        self.addr()?
            .param("expires")
            .flatten()
            .and_then(parse_expires)
    }

    /// The `q` parameter in thousandths (`q=0.5` is 500, `q=1` is 1000).
    pub fn q(&self) -> Option<u16> {
        self.addr()?.param("q").flatten().and_then(parse_qvalue)
    }
}

/// `delta-seconds`, saturating.
fn parse_expires(v: &[u8]) -> Option<u32> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(parse_u32(v, u32::MAX).unwrap_or(u32::MAX))
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`, in thousandths.
fn parse_qvalue(v: &[u8]) -> Option<u16> {
    let (int, frac) = match v.iter().position(|&b| b == b'.') {
        Some(dot) => (v.get(..dot)?, v.get(dot + 1..)?),
        None => (v, &b""[..]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths = 0u16;
    for i in 0..3 {
        thousandths = thousandths * 10 + frac.get(i).map_or(0, |d| u16::from(d - b'0'));
    }
    match int {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contact(s: &str) -> Contact<'_> {
        match Contact::parse(s.as_bytes()) {
            Ok(c) => c,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    #[test]
    fn star() {
        assert_eq!(contact(" * "), Contact::Star);
        assert!(contact("*").is_star());
        assert_eq!(contact("*").expires(), None);
        assert_eq!(contact("*").q(), None);
        assert!(contact("*").addr().is_none());
        assert!(Contact::parse(b"* ;expires=0").is_err());
    }

    #[test]
    fn expires_and_q() {
        let c = contact("\"Alice\" <sip:alice@192.0.2.4:5070;transport=tcp>;expires=3600;q=0.7");
        assert_eq!(c.expires(), Some(3600));
        assert_eq!(c.q(), Some(700));
        let a = c.addr().expect("addr");
        assert_eq!(a.uri.port(), Some(5070));
        assert_eq!(a.display_name, Some(&b"\"Alice\""[..]));
        assert_eq!(contact("<sip:h>;q=1").q(), Some(1000));
        assert_eq!(contact("<sip:h>;q=1.000").q(), Some(1000));
        assert_eq!(contact("<sip:h>;q=0").q(), Some(0));
        assert_eq!(contact("<sip:h>;q=0.").q(), Some(0));
        assert_eq!(contact("<sip:h>;q=0.05").q(), Some(50));
        assert_eq!(contact("<sip:h>;q=0.123").q(), Some(123));
        assert_eq!(contact("<sip:h>;expires=0").expires(), Some(0));
        assert_eq!(
            contact("<sip:h>;expires=99999999999999999999").expires(),
            Some(u32::MAX)
        );
        assert_eq!(
            contact("<sip:h>;expires=4294967296").expires(),
            Some(u32::MAX)
        );
        assert_eq!(contact("sip:h;expires=60").expires(), Some(60));
        assert_eq!(contact("<sip:h>").expires(), None);
        assert_eq!(contact("<sip:h>").q(), None);
    }

    #[test]
    fn bad_q_and_expires() {
        for bad in [
            "<sip:h>;q=1.001",
            "<sip:h>;q=2",
            "<sip:h>;q=0.1234",
            "<sip:h>;q=.5",
            "<sip:h>;q=00.5",
            "<sip:h>;q=0.5x",
            "<sip:h>;q",
            "<sip:h>;Q=-1",
            "<sip:h>;expires=-1",
            "<sip:h>;expires",
            "<sip:h>;expires=\"10\"",
        ] {
            let e = Contact::parse(bad.as_bytes()).expect_err(bad);
            assert_eq!(e, ParseError::new(ParseErrorKind::BadParam, 8), "{bad}");
        }
        assert_eq!(
            Contact::parse(b"<sip:h").map_err(|e| e.kind),
            Err(ParseErrorKind::BadUri)
        );
        assert_eq!(
            Contact::parse(b"**").map_err(|e| e.kind),
            Err(ParseErrorKind::BadUri)
        );
    }
}
