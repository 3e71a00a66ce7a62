//! Low-level scanning shared by every typed parser: character classes, a cursor that treats
//! folded lines as whitespace, comma splitting that respects quotes and angle brackets, and
//! `;name=value` parameter lists.
//!
//! Header values are indexed, not copied, so a folded value still contains its `CRLF SP`
//! continuation bytes. Every whitespace skip here treats `CR`/`LF` followed by `SP`/`HT` as
//! linear white space (RFC 3261 §25.1 `LWS`), which is what makes unfolding unnecessary.

use memchr::{memchr2, memchr3};

use crate::{ParseError, ParseErrorKind};

/// Bit 0: `token` character (RFC 3261 §25.1). Bit 1: `word` character (Call-ID). Bit 2:
/// `gen-value` character of an unquoted header parameter (`token` plus `[`, `]`, `:`).
const CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        let alnum = b.is_ascii_alphanumeric();
        let token_extra = matches!(
            b,
            b'-' | b'.' | b'!' | b'%' | b'*' | b'_' | b'+' | b'`' | b'\'' | b'~'
        );
        let word_extra = matches!(
            b,
            b'(' | b')'
                | b'<'
                | b'>'
                | b':'
                | b'\\'
                | b'"'
                | b'/'
                | b'['
                | b']'
                | b'?'
                | b'{'
                | b'}'
        );
        if alnum || token_extra {
            t[c] |= 0b111;
        } else if word_extra {
            t[c] |= 0b10;
        }
        if matches!(b, b'[' | b']' | b':') {
            t[c] |= 0b100;
        }
        c += 1;
    }
    t
};

/// Whether `b` may appear in a `token`.
#[inline]
pub fn is_token_char(b: u8) -> bool {
    CLASS[b as usize] & 1 != 0
}

/// Whether `b` may appear in a `word` (the Call-ID grammar).
#[inline]
pub fn is_word_char(b: u8) -> bool {
    CLASS[b as usize] & 2 != 0
}

/// Whether `b` may appear in an unquoted header parameter name or value (`token` characters
/// plus `[`, `]` and `:` for IPv6 references).
#[inline]
pub fn is_gen_value_char(b: u8) -> bool {
    CLASS[b as usize] & 4 != 0
}

/// Whether all of `s` is a non-empty `token`.
pub fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| is_token_char(b))
}

/// Space or horizontal tab.
#[inline]
pub fn is_wsp(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// Trims linear white space (SP, HT, and the CR/LF of folded lines) from both ends.
pub fn trim_lws(s: &[u8]) -> &[u8] {
    let lws = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    let start = s.iter().position(|b| !lws(b)).unwrap_or(s.len());
    let end = s.iter().rposition(|b| !lws(b)).map_or(start, |e| e + 1);
    &s[start..end]
}

/// A forward-only cursor over a header value, for hand-written recursive-descent parsers.
///
/// Offsets in the errors it builds are relative to the start of the slice it was made from.
#[derive(Clone, Debug)]
pub struct Cursor<'a> {
    s: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `s`.
    #[inline]
    pub fn new(s: &'a [u8]) -> Self {
        Self { s, pos: 0 }
    }

    /// The current offset.
    #[inline]
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// The whole input.
    #[inline]
    pub fn input(&self) -> &'a [u8] {
        self.s
    }

    /// What is left.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        &self.s[self.pos..]
    }

    /// Whether nothing is left.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pos >= self.s.len()
    }

    /// The next byte, without consuming it.
    #[inline]
    pub fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    /// Consumes one byte.
    #[inline]
    pub fn bump(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.pos += 1;
        Some(b)
    }

    /// Consumes `b` if it is next; says whether it was.
    #[inline]
    pub fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Consumes `b` or fails with `kind` at the current offset.
    pub fn expect(&mut self, b: u8, kind: ParseErrorKind) -> Result<(), ParseError> {
        if self.eat(b) {
            Ok(())
        } else {
            Err(self.error(kind))
        }
    }

    /// Skips linear white space, folded line breaks included.
    #[inline]
    pub fn skip_lws(&mut self) {
        while let Some(b) = self.peek() {
            match b {
                b' ' | b'\t' => self.pos += 1,
                b'\r' | b'\n' => {
                    // Only a line break followed by white space is LWS (a fold).
                    let mut p = self.pos + 1;
                    if b == b'\r' && self.s.get(p) == Some(&b'\n') {
                        p += 1;
                    }
                    if self.s.get(p).is_some_and(|&c| is_wsp(c)) {
                        self.pos = p;
                    } else {
                        return;
                    }
                }
                _ => return,
            }
        }
    }

    /// Skips white space, then consumes `b` and following white space if `b` is next
    /// (the RFC's `SWS b SWS` separators such as `EQUAL`, `SEMI`, `COMMA`).
    #[inline]
    pub fn eat_sep(&mut self, b: u8) -> bool {
        let save = self.pos;
        self.skip_lws();
        if self.eat(b) {
            self.skip_lws();
            true
        } else {
            self.pos = save;
            false
        }
    }

    /// Consumes the longest run of bytes satisfying `f` (possibly empty).
    #[inline]
    pub fn take_while(&mut self, f: impl Fn(u8) -> bool) -> &'a [u8] {
        let start = self.pos;
        while self.peek().is_some_and(&f) {
            self.pos += 1;
        }
        &self.s[start..self.pos]
    }

    /// Consumes a non-empty `token` or fails with `kind`.
    #[inline]
    pub fn token(&mut self, kind: ParseErrorKind) -> Result<&'a [u8], ParseError> {
        let t = self.take_while(is_token_char);
        if t.is_empty() {
            Err(self.error(kind))
        } else {
            Ok(t)
        }
    }

    /// Consumes a quoted string starting at `"` and returns it with its quotes (escapes are
    /// left in place; see [`unquote`]).
    pub fn quoted(&mut self) -> Result<&'a [u8], ParseError> {
        let start = self.pos;
        self.expect(b'"', ParseErrorKind::BadQuotedString)?;
        loop {
            match self.bump() {
                None => return Err(ParseError::new(ParseErrorKind::BadQuotedString, start)),
                Some(b'"') => return Ok(&self.s[start..self.pos]),
                Some(b'\\') => {
                    if self.bump().is_none() {
                        return Err(ParseError::new(ParseErrorKind::BadQuotedString, start));
                    }
                }
                Some(_) => {}
            }
        }
    }

    /// An error of `kind` at the current offset.
    pub fn error(&self, kind: ParseErrorKind) -> ParseError {
        ParseError::new(kind, self.pos)
    }
}

/// Strips the quotes of a quoted string and reports whether it contains escapes.
///
/// Returns the raw inside of `"..."` (with `\x` escapes still present) and `true` if any
/// backslash is present; a value that is not quoted is returned as it is with `false`.
pub fn unquote(s: &[u8]) -> (&[u8], bool) {
    match s {
        [b'"', inner @ .., b'"'] => (inner, inner.contains(&b'\\')),
        _ => (s, false),
    }
}

/// The inside of a quoted string with its `\x` escapes resolved (allocates).
pub fn unescape_quoted(s: &[u8]) -> Vec<u8> {
    let (inner, _) = unquote(s);
    let mut out = Vec::with_capacity(inner.len());
    let mut it = inner.iter();
    while let Some(&b) = it.next() {
        if b == b'\\' {
            if let Some(&n) = it.next() {
                out.push(n);
            }
        } else {
            out.push(b);
        }
    }
    out
}

/// Finds the first `needle` outside quoted strings and angle brackets, from `from`.
///
/// Jumps with `memchr` between the bytes that matter (`needle`, `"`, `<`, `>`, `\` inside
/// quotes). A `>` without a matching `<` is ignored.
pub fn find_unquoted(s: &[u8], from: usize, needle: u8) -> Option<usize> {
    if matches!(needle, b'"' | b'<' | b'>' | b'\\') {
        return find_unquoted_bytewise(s, from, needle);
    }
    let mut i = from;
    let mut angle = 0usize;
    loop {
        let rest = s.get(i..)?;
        if angle == 0 {
            let j = i + memchr3(needle, b'"', b'<', rest)?;
            match s.get(j) {
                Some(&b) if b == needle => return Some(j),
                Some(b'"') => i = skip_quoted(s, j + 1)?,
                _ => {
                    angle = 1;
                    i = j + 1;
                }
            }
        } else {
            let j = i + memchr3(b'"', b'<', b'>', rest)?;
            match s.get(j) {
                Some(b'"') => i = skip_quoted(s, j + 1)?,
                Some(b'<') => {
                    angle += 1;
                    i = j + 1;
                }
                _ => {
                    angle -= 1;
                    i = j + 1;
                }
            }
        }
    }
}

/// [`find_unquoted`] one byte at a time, for needles that are themselves special.
fn find_unquoted_bytewise(s: &[u8], from: usize, needle: u8) -> Option<usize> {
    let mut in_quotes = false;
    let mut angle = 0usize;
    let mut i = from;
    while let Some(&b) = s.get(i) {
        if in_quotes {
            match b {
                b'\\' => i += 1,
                b'"' => in_quotes = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_quotes = true,
                b'<' => angle += 1,
                b'>' => angle = angle.saturating_sub(1),
                _ if b == needle && angle == 0 => return Some(i),
                _ => {}
            }
        }
        i += 1;
    }
    None
}

/// The offset just past the closing quote of a quoted string whose inside starts at `from`.
fn skip_quoted(s: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    loop {
        let j = i + memchr2(b'"', b'\\', s.get(i..)?)?;
        if s.get(j) == Some(&b'\\') {
            i = j + 2;
        } else {
            return Some(j + 1);
        }
    }
}

/// Iterator over the comma-separated values of a list header, as `(start, end)` offsets into
/// the value, with surrounding white space trimmed and empty elements skipped.
///
/// Commas inside quoted strings and angle brackets do not separate values.
#[derive(Clone, Debug)]
pub struct CommaSplit<'a> {
    s: &'a [u8],
    pos: usize,
}

/// Splits a list header's value at commas outside quotes and angle brackets.
pub fn split_commas(s: &[u8]) -> CommaSplit<'_> {
    CommaSplit { s, pos: 0 }
}

impl Iterator for CommaSplit<'_> {
    type Item = (usize, usize);

    fn next(&mut self) -> Option<(usize, usize)> {
        while self.pos < self.s.len() {
            let start = self.pos;
            let end = find_unquoted(self.s, start, b',').unwrap_or(self.s.len());
            self.pos = end + 1;
            let elem = &self.s[start..end];
            let lead = elem.len() - trim_start_len(elem);
            let trimmed = trim_lws(elem);
            if !trimmed.is_empty() {
                let a = start + lead;
                return Some((a, a + trimmed.len()));
            }
        }
        None
    }
}

fn trim_start_len(s: &[u8]) -> usize {
    let lws = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    s.len() - s.iter().position(|b| !lws(b)).unwrap_or(s.len())
}

/// A `;`-separated list of `name[=value]` parameters, borrowed from a header value.
///
/// Iterating yields [`Param`]s in order; values keep their quotes (see [`unquote`]). Names
/// compare case-insensitively.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Params<'a> {
    raw: &'a [u8],
}

/// One parameter of a [`Params`] list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param<'a> {
    /// The name, as written.
    pub name: &'a [u8],
    /// The value as written (quotes included), or `None` for a flag parameter.
    pub value: Option<&'a [u8]>,
}

impl<'a> Params<'a> {
    /// Wraps raw parameter text. It may start with `;`; it must already be known to be
    /// well-formed (see [`Params::parse`]).
    pub fn from_raw(raw: &'a [u8]) -> Self {
        Self { raw }
    }

    /// Parses `*( SEMI name [EQUAL value] )` from `c`, stopping at the first byte that cannot
    /// continue the list, and returns the list. `value_char` says which bytes an unquoted value
    /// may contain (e.g. URI parameters allow `:` and `[` `]`).
    pub fn parse(c: &mut Cursor<'a>, value_char: impl Fn(u8) -> bool) -> Result<Self, ParseError> {
        let start = c.pos();
        let mut end = start;
        while c.eat_sep(b';') {
            let name = c.take_while(&value_char);
            if name.is_empty() {
                return Err(c.error(ParseErrorKind::BadParam));
            }
            if c.eat_sep(b'=') {
                if c.peek() == Some(b'"') {
                    c.quoted()?;
                } else if c.take_while(&value_char).is_empty() {
                    return Err(c.error(ParseErrorKind::BadParam));
                }
            }
            end = c.pos();
        }
        // Leave trailing white space for the caller.
        let mut back = c.clone();
        back.pos = end;
        *c = back;
        Ok(Self {
            raw: &c.input()[start..end],
        })
    }

    /// The raw text (starting with `;` unless empty).
    pub fn as_bytes(&self) -> &'a [u8] {
        self.raw
    }

    /// Whether there are no parameters.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// The parameters in order.
    pub fn iter(&self) -> ParamIter<'a> {
        ParamIter {
            raw: self.raw,
            pos: 0,
        }
    }

    /// The first parameter called `name` (case-insensitive): `Some(None)` for a flag,
    /// `Some(Some(value))` with a value, `None` if absent.
    pub fn get(&self, name: &str) -> Option<Option<&'a [u8]>> {
        self.iter()
            .find(|p| p.name.eq_ignore_ascii_case(name.as_bytes()))
            .map(|p| p.value)
    }

    /// Whether a parameter called `name` is present.
    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }
}

impl<'a> IntoIterator for Params<'a> {
    type Item = Param<'a>;
    type IntoIter = ParamIter<'a>;
    fn into_iter(self) -> ParamIter<'a> {
        self.iter()
    }
}

/// One parameter's value remembered while parsing (the `tag` of an address, the `branch` of
/// a Via), valid only for the very list it was found in: a caller may replace a public
/// `params` field, and then the lookup goes through [`Params::get`] again.
#[derive(Clone, Copy, Default)]
pub(crate) struct CachedParam<'a> {
    /// The list the value was found in.
    of: &'a [u8],
    /// The value, flattened as `Params::get(name).flatten()` would give it.
    value: Option<&'a [u8]>,
}

impl<'a> CachedParam<'a> {
    pub(crate) fn new(of: Params<'a>, value: Option<&'a [u8]>) -> Self {
        Self { of: of.raw, value }
    }

    /// Looks `name` up in `params` through the cache when it was made for `params`.
    #[inline]
    pub(crate) fn get(&self, params: &Params<'a>, name: &str) -> Option<&'a [u8]> {
        if core::ptr::eq(params.raw, self.of) {
            self.value
        } else {
            params.get(name).flatten()
        }
    }
}

/// Iterator over a [`Params`] list.
#[derive(Clone, Debug)]
pub struct ParamIter<'a> {
    raw: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for ParamIter<'a> {
    type Item = Param<'a>;

    fn next(&mut self) -> Option<Param<'a>> {
        loop {
            if self.pos >= self.raw.len() {
                return None;
            }
            let start = self.pos;
            let end = find_unquoted(self.raw, start, b';').unwrap_or(self.raw.len());
            self.pos = end + 1;
            let item = trim_lws(&self.raw[start..end]);
            if item.is_empty() {
                continue;
            }
            return Some(match item.iter().position(|&b| b == b'=') {
                Some(eq) => Param {
                    name: trim_lws(&item[..eq]),
                    value: Some(trim_lws(&item[eq + 1..])),
                },
                None => Param {
                    name: item,
                    value: None,
                },
            });
        }
    }
}

/// Parses a decimal number of at most `max` (no sign, no white space).
pub fn parse_u32(s: &[u8], max: u32) -> Option<u32> {
    if s.is_empty() || s.len() > 10 {
        return None;
    }
    let mut v: u64 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u64::from(b - b'0');
    }
    u32::try_from(v).ok().filter(|v| *v <= max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(s: &[u8]) -> Vec<&[u8]> {
        split_commas(s).map(|(a, b)| &s[a..b]).collect()
    }

    #[test]
    fn comma_split_respects_quotes_and_brackets() {
        let v = br#""Doe, John" <sip:a@b;x=1,2>;q=0.5 , <sip:c@d>,,  sip:e@f "#;
        assert_eq!(
            pieces(v),
            vec![
                &br#""Doe, John" <sip:a@b;x=1,2>;q=0.5"#[..],
                b"<sip:c@d>",
                b"sip:e@f"
            ]
        );
        assert_eq!(pieces(br#""a\",b", c"#), vec![&br#""a\",b""#[..], b"c"]);
        assert!(pieces(b" , ,").is_empty());
    }

    #[test]
    fn lws_skips_folds_but_not_line_ends() {
        let mut c = Cursor::new(b" \r\n\tx");
        c.skip_lws();
        assert_eq!(c.peek(), Some(b'x'));
        let mut c = Cursor::new(b" \r\nx");
        c.skip_lws();
        assert_eq!(c.peek(), Some(b'\r'));
    }

    #[test]
    fn params_parse_and_lookup() {
        let mut c = Cursor::new(br#" ; Branch = z9hG4bK1 ;rport; tag="a;b" rest"#);
        let p = Params::parse(&mut c, is_token_char).expect("params");
        assert_eq!(c.rest(), b" rest");
        assert_eq!(p.get("branch"), Some(Some(&b"z9hG4bK1"[..])));
        assert_eq!(p.get("RPORT"), Some(None));
        assert_eq!(p.get("tag"), Some(Some(&br#""a;b""#[..])));
        assert_eq!(p.get("nope"), None);
        assert_eq!(p.iter().count(), 3);
    }

    #[test]
    fn params_reject_empty_names_and_values() {
        assert!(Params::parse(&mut Cursor::new(b";=x"), is_token_char).is_err());
        assert!(Params::parse(&mut Cursor::new(b";a="), is_token_char).is_err());
        assert!(Params::parse(&mut Cursor::new(br#";a="open"#), is_token_char).is_err());
    }

    #[test]
    fn quoted_strings_and_escapes() {
        let mut c = Cursor::new(br#""a\"b" x"#);
        let q = c.quoted().expect("quoted");
        assert_eq!(q, br#""a\"b""#);
        assert_eq!(unquote(q), (&br#"a\"b"#[..], true));
        assert_eq!(unescape_quoted(q), b"a\"b");
        assert!(Cursor::new(br#""abc\"#).quoted().is_err());
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_u32(b"0", 10), Some(0));
        assert_eq!(parse_u32(b"4294967295", u32::MAX), Some(u32::MAX));
        assert_eq!(parse_u32(b"4294967296", u32::MAX), None);
        assert_eq!(parse_u32(b"99999999999999", u32::MAX), None);
        assert_eq!(parse_u32(b"-1", u32::MAX), None);
        assert_eq!(parse_u32(b"", u32::MAX), None);
        assert_eq!(parse_u32(b"71", 70), None);
    }

    #[test]
    fn token_classes() {
        assert!(is_token(b"INVITE"));
        assert!(is_token(b"a.b-c!%*_+`'~"));
        assert!(!is_token(b"a b"));
        assert!(!is_token(b""));
        assert!(!is_word_char(b'@') && is_word_char(b'<'));
    }

    mod fast_search {
        use proptest::collection::vec;
        use proptest::prelude::*;
        use proptest::sample::select;

        use super::super::*;

        proptest! {
            #[test]
            fn find_unquoted_matches_bytewise(
                s in vec(select(&["a", ",", ";", "\"", "\\", "<", ">", " ", "x=1"][..]), 0..16)
                    .prop_map(|v| v.concat()),
                from in 0usize..20,
                needle in select(&[b',', b';', b'a', b'"', b'<', b'>', b'\\'][..]),
            ) {
                let b = s.as_bytes();
                prop_assert_eq!(find_unquoted(b, from, needle), find_unquoted_bytewise(b, from, needle));
            }
        }
    }
}
