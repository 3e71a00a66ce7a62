use core::fmt;
use core::ops::Range;

use memchr::memchr;
use smallvec::SmallVec;

use crate::name::HEADER_NAME_COUNT;
use crate::scan::{self, Cursor, is_token, is_word_char, parse_u32, split_commas, trim_lws};
use crate::{HeaderName, Limits, ParseError, ParseErrorKind};

/// A byte range `start..end` into the buffer a [`Message`] was parsed from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    /// First byte.
    pub start: u32,
    /// One past the last byte.
    pub end: u32,
}

impl Span {
    pub(crate) fn new(start: usize, end: usize) -> Self {
        // Offsets are bounded by Limits::max_message_size, checked before indexing; a buffer
        // over 4 GiB is rejected as TooLarge before any Span is built.
        Self {
            start: start as u32,
            end: end as u32,
        }
    }

    /// As a `Range<usize>` for slicing.
    pub fn range(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }

    /// Length in bytes.
    pub fn len(self) -> usize {
        (self.end - self.start) as usize
    }

    /// Whether the span is empty.
    pub fn is_empty(self) -> bool {
        self.end == self.start
    }
}

/// A SIP method. Methods are case-sensitive (RFC 3261 §7.1); unknown ones are kept as
/// [`Method::Other`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Method<'a> {
    /// `ACK`.
    Ack,
    /// `BYE`.
    Bye,
    /// `CANCEL`.
    Cancel,
    /// `INFO` (RFC 6086).
    Info,
    /// `INVITE`.
    Invite,
    /// `MESSAGE` (RFC 3428).
    Message,
    /// `NOTIFY` (RFC 6665).
    Notify,
    /// `OPTIONS`.
    Options,
    /// `PRACK` (RFC 3262).
    Prack,
    /// `PUBLISH` (RFC 3903).
    Publish,
    /// `REFER` (RFC 3515).
    Refer,
    /// `REGISTER`.
    Register,
    /// `SUBSCRIBE` (RFC 6665).
    Subscribe,
    /// `UPDATE` (RFC 3311).
    Update,
    /// Any other `token`.
    Other(&'a [u8]),
}

impl<'a> Method<'a> {
    /// Recognises a method; any other non-empty token becomes [`Method::Other`].
    pub fn from_bytes(s: &'a [u8]) -> Option<Self> {
        Some(match s {
            b"ACK" => Self::Ack,
            b"BYE" => Self::Bye,
            b"CANCEL" => Self::Cancel,
            b"INFO" => Self::Info,
            b"INVITE" => Self::Invite,
            b"MESSAGE" => Self::Message,
            b"NOTIFY" => Self::Notify,
            b"OPTIONS" => Self::Options,
            b"PRACK" => Self::Prack,
            b"PUBLISH" => Self::Publish,
            b"REFER" => Self::Refer,
            b"REGISTER" => Self::Register,
            b"SUBSCRIBE" => Self::Subscribe,
            b"UPDATE" => Self::Update,
            other if is_token(other) => Self::Other(other),
            _ => return None,
        })
    }

    /// The method as written on the wire.
    pub fn as_bytes(&self) -> &'a [u8] {
        match self {
            Self::Ack => b"ACK",
            Self::Bye => b"BYE",
            Self::Cancel => b"CANCEL",
            Self::Info => b"INFO",
            Self::Invite => b"INVITE",
            Self::Message => b"MESSAGE",
            Self::Notify => b"NOTIFY",
            Self::Options => b"OPTIONS",
            Self::Prack => b"PRACK",
            Self::Publish => b"PUBLISH",
            Self::Refer => b"REFER",
            Self::Register => b"REGISTER",
            Self::Subscribe => b"SUBSCRIBE",
            Self::Update => b"UPDATE",
            Self::Other(s) => s,
        }
    }
}

impl fmt::Display for Method<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.as_bytes()))
    }
}

/// The first line of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StartLine<'a> {
    /// `Method SP Request-URI SP SIP/2.0`.
    Request {
        /// The method.
        method: Method<'a>,
        /// Where the Request-URI is (not parsed yet; see `Message::request_uri`).
        uri: Span,
    },
    /// `SIP/2.0 SP Status-Code SP Reason-Phrase`.
    Response {
        /// The status code, 100..=699.
        code: u16,
        /// Where the reason phrase is (may be empty).
        reason: Span,
    },
}

/// One header field of a [`Message`]: its name's kind and where its parts are.
///
/// A header written on several folded lines is one `Header`; a header line with
/// comma-separated values is one `Header` too (see [`Message::values`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The recognised name, or [`HeaderName::Other`].
    pub kind: HeaderName,
    line_start: u32,
    name_end: u32,
    value_start: u32,
    value_end: u32,
    line_end: u32,
}

impl Header {
    /// Where the name is.
    pub fn name_span(&self) -> Span {
        Span {
            start: self.line_start,
            end: self.name_end,
        }
    }

    /// Where the value is: from its first non-blank byte to its last, folds included.
    pub fn value_span(&self) -> Span {
        Span {
            start: self.value_start,
            end: self.value_end,
        }
    }

    /// The whole field: from the name to just past the line terminator of its last line.
    pub fn line_span(&self) -> Span {
        Span {
            start: self.line_start,
            end: self.line_end,
        }
    }
}

/// One element of a list header, located in the message (see [`Message::values`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValueRef<'a> {
    /// Index of the header field in [`Message::headers`].
    pub header: usize,
    /// Where the element is.
    pub span: Span,
    /// The element's bytes.
    pub bytes: &'a [u8],
    /// Whether it is the only element of its header field.
    pub alone: bool,
}

const NONE: u16 = u16::MAX;

/// A parsed SIP message borrowing the buffer it was parsed from.
///
/// Parsing ([`Message::parse`]) makes one pass over the start line and the header section: it
/// validates the start line, finds every header's name and value, recognises well-known names
/// and records where the first of each kind is, and checks Content-Length. Header values are
/// not parsed until an accessor asks for them, so a message costs only what is looked at.
#[derive(Clone, Debug)]
pub struct Message<'a> {
    buf: &'a [u8],
    start: StartLine<'a>,
    /// Offset of the start line (after any leading CRLFs).
    start_offset: u32,
    /// Offset of the first header field.
    headers_start: u32,
    /// Offset of the empty line ending the header section (or of the end of the buffer).
    headers_end: u32,
    body: Span,
    content_length: Option<u32>,
    headers: SmallVec<[Header; 20]>,
    first: [u16; HEADER_NAME_COUNT],
    /// The top Via, parsed the first time [`top_via`](Self::top_via) is asked for it: a
    /// proxy looks at it some five times per message (transaction key, response address,
    /// the gate, loop detection, the forwarded copy), and parsing it was the largest single
    /// item of a call's user-space CPU (issue 14's profile: 25 Via parses per call).
    pub(crate) top_via: std::cell::Cell<Option<Result<crate::Via<'a>, ParseError>>>,
}

impl<'a> Message<'a> {
    /// Parses a whole message: a datagram, or one message cut out of a stream by
    /// [`Framer`](crate::Framer).
    ///
    /// The body is what follows the header section: all of it when there is no
    /// Content-Length (RFC 3261 §18.3, datagrams), else the first Content-Length bytes (extra
    /// bytes are ignored; fewer is [`ParseErrorKind::BodyTruncated`]). CRLFs before the start
    /// line are skipped. A buffer that ends without the empty line after the last header is
    /// accepted as a message without body.
    pub fn parse(buf: &'a [u8], limits: &Limits) -> Result<Self, ParseError> {
        if buf.len() > limits.max_message_size || buf.len() > u32::MAX as usize {
            return Err(ParseError::new(
                ParseErrorKind::TooLarge,
                limits.max_message_size,
            ));
        }
        let start_offset = buf
            .iter()
            .position(|&b| b != b'\r' && b != b'\n')
            .ok_or_else(|| ParseError::new(ParseErrorKind::Empty, 0))?;
        let (line_end, next) = line_at(buf, start_offset);
        if line_end - start_offset > limits.max_header_line {
            return Err(ParseError::new(
                ParseErrorKind::HeaderLineTooLong,
                start_offset,
            ));
        }
        let start = parse_start_line(buf, start_offset, line_end)?;

        let mut msg = Self {
            buf,
            start,
            start_offset: start_offset as u32,
            headers_start: next as u32,
            headers_end: buf.len() as u32,
            body: Span::new(buf.len(), buf.len()),
            content_length: None,
            headers: SmallVec::new(),
            first: [NONE; HEADER_NAME_COUNT],
            top_via: std::cell::Cell::new(None),
        };
        let body_start = msg.index_headers(next, limits)?;
        if let Some(nul) = memchr(0, &buf[start_offset..msg.headers_end as usize]) {
            return Err(ParseError::new(ParseErrorKind::NulByte, start_offset + nul));
        }
        msg.content_length = msg.scan_content_length()?;
        let available = buf.len() - body_start;
        let body_len = match msg.content_length {
            Some(cl) if cl as usize > available => {
                let at = msg
                    .first_header(HeaderName::ContentLength)
                    .map_or(body_start, |h| h.value_start as usize);
                return Err(ParseError::new(ParseErrorKind::BodyTruncated, at));
            }
            Some(cl) => cl as usize,
            None => available,
        };
        msg.body = Span::new(body_start, body_start + body_len);
        Ok(msg)
    }

    /// Indexes header fields from `pos`; returns the offset where the body starts.
    fn index_headers(&mut self, mut pos: usize, limits: &Limits) -> Result<usize, ParseError> {
        let buf = self.buf;
        let max_headers = limits.max_headers.min(usize::from(NONE) - 1);
        while pos < buf.len() {
            let (content_end, next) = line_at(buf, pos);
            if content_end == pos {
                // The empty line: end of the header section.
                self.headers_end = pos as u32;
                return Ok(next);
            }
            if scan::is_wsp(buf[pos]) {
                // A continuation (folded) line extends the previous field.
                let Some(h) = self.headers.last_mut() else {
                    return Err(ParseError::new(ParseErrorKind::BadHeaderName, pos));
                };
                if next - h.line_start as usize > limits.max_header_line {
                    return Err(ParseError::new(ParseErrorKind::HeaderLineTooLong, pos));
                }
                let cont = trim_lws(&buf[pos..content_end]);
                if !cont.is_empty() {
                    let cont_start = cont.as_ptr() as usize - buf.as_ptr() as usize;
                    if h.value_start == h.value_end {
                        h.value_start = cont_start as u32;
                    }
                    h.value_end = (cont_start + cont.len()) as u32;
                }
                h.line_end = next as u32;
                pos = next;
                continue;
            }
            if content_end - pos > limits.max_header_line {
                return Err(ParseError::new(ParseErrorKind::HeaderLineTooLong, pos));
            }
            if self.headers.len() >= max_headers {
                return Err(ParseError::new(ParseErrorKind::TooManyHeaders, pos));
            }
            // One scalar pass validates the name as a token and stops at the colon (or at the
            // white space before it): no separate search for ':'.
            let name_len = buf[pos..content_end]
                .iter()
                .position(|&b| !scan::is_token_char(b))
                .unwrap_or(content_end - pos);
            let mut i = pos + name_len;
            let name = &buf[pos..i];
            while i < content_end && scan::is_wsp(buf[i]) {
                i += 1;
            }
            if i >= content_end {
                return Err(ParseError::new(ParseErrorKind::MissingColon, pos));
            }
            if buf[i] != b':' || name.is_empty() {
                return Err(ParseError::new(ParseErrorKind::BadHeaderName, i));
            }
            i += 1;
            while i < content_end && scan::is_wsp(buf[i]) {
                i += 1;
            }
            let value_start = i;
            let mut value_end = content_end;
            while value_end > value_start && scan::is_wsp(buf[value_end - 1]) {
                value_end -= 1;
            }
            let kind = crate::name::lookup_token(name);
            let idx = self.headers.len();
            if self.first[kind as usize] == NONE {
                self.first[kind as usize] = idx as u16;
            }
            self.headers.push(Header {
                kind,
                line_start: pos as u32,
                name_end: (pos + name.len()) as u32,
                value_start: value_start as u32,
                value_end: value_end as u32,
                line_end: next as u32,
            });
            pos = next;
        }
        self.headers_end = buf.len() as u32;
        Ok(buf.len())
    }

    fn scan_content_length(&self) -> Result<Option<u32>, ParseError> {
        let mut found: Option<u32> = None;
        for h in self.headers_of(HeaderName::ContentLength) {
            let v = self.value(h);
            let n = parse_u32(v, u32::MAX).ok_or_else(|| {
                ParseError::new(ParseErrorKind::BadContentLength, h.value_start as usize)
            })?;
            if found.is_some_and(|f| f != n) {
                return Err(ParseError::new(
                    ParseErrorKind::BadContentLength,
                    h.value_start as usize,
                ));
            }
            found = Some(n);
        }
        Ok(found)
    }

    /// The buffer the message was parsed from.
    pub fn buffer(&self) -> &'a [u8] {
        self.buf
    }

    /// The message's own bytes: from the start line to the end of the body (leading CRLFs
    /// and bytes past Content-Length excluded).
    pub fn as_bytes(&self) -> &'a [u8] {
        &self.buf[self.start_offset as usize..self.body.end as usize]
    }

    /// The start line.
    pub fn start_line(&self) -> &StartLine<'a> {
        &self.start
    }

    /// Offset of the start line in the buffer.
    pub fn start_offset(&self) -> usize {
        self.start_offset as usize
    }

    /// Offset of the first header field (just after the start line).
    pub fn headers_start(&self) -> usize {
        self.headers_start as usize
    }

    /// Offset of the empty line that ends the header section.
    pub fn headers_end(&self) -> usize {
        self.headers_end as usize
    }

    /// Whether this is a request.
    pub fn is_request(&self) -> bool {
        matches!(self.start, StartLine::Request { .. })
    }

    /// The method of a request; `None` for a response.
    pub fn method(&self) -> Option<Method<'a>> {
        match self.start {
            StartLine::Request { method, .. } => Some(method),
            StartLine::Response { .. } => None,
        }
    }

    /// The status code of a response; `None` for a request.
    pub fn status(&self) -> Option<u16> {
        match self.start {
            StartLine::Response { code, .. } => Some(code),
            StartLine::Request { .. } => None,
        }
    }

    /// The reason phrase of a response; `None` for a request.
    pub fn reason(&self) -> Option<&'a [u8]> {
        match self.start {
            StartLine::Response { reason, .. } => Some(self.slice(reason)),
            StartLine::Request { .. } => None,
        }
    }

    /// The Request-URI as written; `None` for a response.
    pub fn request_uri_bytes(&self) -> Option<&'a [u8]> {
        match self.start {
            StartLine::Request { uri, .. } => Some(self.slice(uri)),
            StartLine::Response { .. } => None,
        }
    }

    /// Where the Request-URI is; `None` for a response.
    pub fn request_uri_span(&self) -> Option<Span> {
        match self.start {
            StartLine::Request { uri, .. } => Some(uri),
            StartLine::Response { .. } => None,
        }
    }

    /// Every header field, in order.
    pub fn headers(&self) -> &[Header] {
        &self.headers
    }

    /// The first header field of `kind`, found in constant time.
    pub fn first_header(&self, kind: HeaderName) -> Option<&Header> {
        match self.first[kind as usize] {
            NONE => None,
            i => self.headers.get(usize::from(i)),
        }
    }

    /// Index in [`headers`](Self::headers) of the first field of `kind`.
    pub fn first_index(&self, kind: HeaderName) -> Option<usize> {
        match self.first[kind as usize] {
            NONE => None,
            i => Some(usize::from(i)),
        }
    }

    /// Every header field of `kind`, in order.
    pub fn headers_of(&self, kind: HeaderName) -> impl Iterator<Item = &Header> + '_ {
        let from = match self.first[kind as usize] {
            NONE => self.headers.len(),
            i => usize::from(i),
        };
        self.headers[from..].iter().filter(move |h| h.kind == kind)
    }

    /// Every header field whose name is `name` (case-insensitive; compact forms match their
    /// full names), for headers holdline does not recognise.
    pub fn headers_named<'m>(&'m self, name: &'m [u8]) -> impl Iterator<Item = &'m Header> + 'm {
        let kind = crate::name::lookup_token(name);
        self.headers.iter().filter(move |h| {
            h.kind == kind && (kind != HeaderName::Other || self.name(h).eq_ignore_ascii_case(name))
        })
    }

    /// A header's name as written.
    pub fn name(&self, h: &Header) -> &'a [u8] {
        self.slice(h.name_span())
    }

    /// A header's value as written (folds included; trimmed at both ends).
    pub fn value(&self, h: &Header) -> &'a [u8] {
        self.slice(h.value_span())
    }

    /// The value of the first header of `kind`.
    pub fn first_value(&self, kind: HeaderName) -> Option<&'a [u8]> {
        self.first_header(kind).map(|h| self.value(h))
    }

    /// Every element of a list header `kind` across all its fields, in order
    /// (`Via: a, b` then `Via: c` gives a, b, c). See [`HeaderName::is_list`]; for other
    /// headers, each field is one element.
    pub fn values(&self, kind: HeaderName) -> impl Iterator<Item = ValueRef<'a>> + '_ {
        let buf = self.buf;
        let list = kind.is_list();
        self.headers
            .iter()
            .enumerate()
            .filter(move |(_, h)| h.kind == kind)
            .flat_map(move |(i, h)| {
                let base = h.value_start as usize;
                let v = &buf[h.value_span().range()];
                let mut parts: SmallVec<[(usize, usize); 4]> = if list {
                    split_commas(v).collect()
                } else if v.is_empty() {
                    SmallVec::new()
                } else {
                    smallvec::smallvec![(0, v.len())]
                };
                let alone = parts.len() == 1;
                parts.iter_mut().for_each(|p| *p = (p.0 + base, p.1 + base));
                parts.into_iter().map(move |(a, b)| ValueRef {
                    header: i,
                    span: Span::new(a, b),
                    bytes: &buf[a..b],
                    alone,
                })
            })
    }

    /// The first element of list header `kind` (e.g. the top Via).
    pub fn first_value_ref(&self, kind: HeaderName) -> Option<ValueRef<'a>> {
        let i = self.first_index(kind)?;
        let h = self.headers[i];
        let v = self.value(&h);
        let (a, b) = if kind.is_list() {
            let mut it = split_commas(v);
            let first = it.next()?;
            let alone = it.next().is_none();
            let base = h.value_start as usize;
            return Some(ValueRef {
                header: i,
                span: Span::new(base + first.0, base + first.1),
                bytes: &v[first.0..first.1],
                alone,
            });
        } else {
            (0, v.len())
        };
        Some(ValueRef {
            header: i,
            span: Span::new(h.value_start as usize + a, h.value_start as usize + b),
            bytes: &v[a..b],
            alone: true,
        })
    }

    /// The body (empty when there is none).
    pub fn body(&self) -> &'a [u8] {
        self.slice(self.body)
    }

    /// Where the body is.
    pub fn body_span(&self) -> Span {
        self.body
    }

    /// The Content-Length value, if the message has one (already validated by `parse`).
    pub fn content_length(&self) -> Option<u32> {
        self.content_length
    }

    /// The Call-ID (`word ["@" word]`, RFC 3261 §25.1).
    pub fn call_id(&self) -> Result<&'a [u8], ParseError> {
        let h = self.required(HeaderName::CallId)?;
        let v = self.value(h);
        let valid = match memchr(b'@', v) {
            Some(at) => is_word(&v[..at]) && is_word(&v[at + 1..]),
            None => is_word(v),
        };
        if valid {
            Ok(v)
        } else {
            Err(ParseError::new(
                ParseErrorKind::BadHeader(HeaderName::CallId),
                h.value_start as usize,
            ))
        }
    }

    /// The CSeq header: sequence number and method.
    pub fn cseq(&self) -> Result<CSeq<'a>, ParseError> {
        let h = self.required(HeaderName::CSeq)?;
        CSeq::parse(self.value(h)).map_err(|e| e.shifted(h.value_start as usize))
    }

    /// The Max-Forwards value, `None` when absent.
    pub fn max_forwards(&self) -> Result<Option<u32>, ParseError> {
        self.delta(HeaderName::MaxForwards, false)
    }

    /// The Expires value in seconds, `None` when absent. Values of 2³² or more read as
    /// 2³²−1 (RFC 3261 §20.19).
    pub fn expires(&self) -> Result<Option<u32>, ParseError> {
        self.delta(HeaderName::Expires, true)
    }

    /// The Min-Expires value in seconds, `None` when absent.
    pub fn min_expires(&self) -> Result<Option<u32>, ParseError> {
        self.delta(HeaderName::MinExpires, true)
    }

    /// Checks that a message carries the headers every SIP message needs (Via, From, To,
    /// Call-ID, CSeq; RFC 3261 §8.1.1) with a valid Call-ID and CSeq, and, for a request, that
    /// the CSeq method equals the request's method and that Max-Forwards, when present, is a
    /// number. A missing Max-Forwards passes: a proxy accepts it (§16.3 step 3) and adds one.
    pub fn check_mandatory(&self) -> Result<(), ParseError> {
        for kind in [HeaderName::Via, HeaderName::From, HeaderName::To] {
            self.required(kind)?;
        }
        self.call_id()?;
        let cseq = self.cseq()?;
        if let Some(m) = self.method() {
            if cseq.method != m {
                let h = self.required(HeaderName::CSeq)?;
                return Err(ParseError::new(
                    ParseErrorKind::BadHeader(HeaderName::CSeq),
                    h.value_start as usize,
                ));
            }
            self.max_forwards()?;
        }
        Ok(())
    }

    fn required(&self, kind: HeaderName) -> Result<&Header, ParseError> {
        self.first_header(kind).ok_or_else(|| {
            ParseError::new(
                ParseErrorKind::MissingHeader(kind),
                self.headers_end as usize,
            )
        })
    }

    fn delta(&self, kind: HeaderName, saturate: bool) -> Result<Option<u32>, ParseError> {
        let Some(h) = self.first_header(kind) else {
            return Ok(None);
        };
        let v = self.value(h);
        let bad = || ParseError::new(ParseErrorKind::BadHeader(kind), h.value_start as usize);
        if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
            return Err(bad());
        }
        match parse_u32(v, u32::MAX) {
            Some(n) => Ok(Some(n)),
            None if saturate => Ok(Some(u32::MAX)),
            None => Err(bad()),
        }
    }

    /// The bytes of `span`.
    pub fn slice(&self, span: Span) -> &'a [u8] {
        self.buf.get(span.range()).unwrap_or_default()
    }
}

/// The CSeq header: `1*DIGIT LWS Method` (RFC 3261 §20.16).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CSeq<'a> {
    /// The sequence number (below 2³¹ per the RFC; holdline accepts any `u32`).
    pub seq: u32,
    /// The method.
    pub method: Method<'a>,
}

impl<'a> CSeq<'a> {
    /// Parses a CSeq value; error offsets are relative to `v`.
    pub fn parse(v: &'a [u8]) -> Result<Self, ParseError> {
        let bad = |at| ParseError::new(ParseErrorKind::BadHeader(HeaderName::CSeq), at);
        let mut c = Cursor::new(v);
        c.skip_lws();
        let digits = c.take_while(|b| b.is_ascii_digit());
        let seq = parse_u32(digits, u32::MAX).ok_or_else(|| bad(c.pos()))?;
        let before = c.pos();
        c.skip_lws();
        if c.pos() == before {
            return Err(bad(c.pos()));
        }
        let m = c.take_while(scan::is_token_char);
        let method = Method::from_bytes(m).ok_or_else(|| bad(c.pos()))?;
        c.skip_lws();
        if !c.is_empty() {
            return Err(bad(c.pos()));
        }
        Ok(Self { seq, method })
    }
}

fn is_word(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| is_word_char(b))
}

fn trim_wsp_end(s: &[u8]) -> &[u8] {
    let end = s
        .iter()
        .rposition(|&b| !scan::is_wsp(b))
        .map_or(0, |e| e + 1);
    &s[..end]
}

/// The line starting at `pos`: returns (end of its content, start of the next line). The
/// terminator is CRLF or, leniently, a bare LF; a last line without terminator ends the buffer.
fn line_at(buf: &[u8], pos: usize) -> (usize, usize) {
    match memchr(b'\n', &buf[pos..]) {
        Some(i) => {
            let lf = pos + i;
            let end = if lf > pos && buf[lf - 1] == b'\r' {
                lf - 1
            } else {
                lf
            };
            (end, lf + 1)
        }
        None => {
            let end = if buf.last() == Some(&b'\r') {
                buf.len() - 1
            } else {
                buf.len()
            };
            (end.max(pos), buf.len())
        }
    }
}

fn parse_start_line(buf: &[u8], start: usize, end: usize) -> Result<StartLine<'_>, ParseError> {
    let line = &buf[start..end];
    let err = |kind, at: usize| ParseError::new(kind, start + at);
    if line.len() >= 4 && line[..4].eq_ignore_ascii_case(b"SIP/") {
        // Status-Line.
        let sp = memchr(b' ', line).ok_or_else(|| err(ParseErrorKind::BadStartLine, line.len()))?;
        check_version(&line[..sp]).map_err(|k| err(k, 0))?;
        let mut i = sp;
        while line.get(i) == Some(&b' ') {
            i += 1;
        }
        let code = line
            .get(i..i + 3)
            .ok_or_else(|| err(ParseErrorKind::BadStatusCode, i))?;
        let code = parse_u32(code, 699)
            .filter(|c| *c >= 100)
            .ok_or_else(|| err(ParseErrorKind::BadStatusCode, i))?;
        let mut r = i + 3;
        match line.get(r) {
            None => {}
            Some(b' ' | b'\t') => r += 1,
            Some(_) => return Err(err(ParseErrorKind::BadStatusCode, i)),
        }
        return Ok(StartLine::Response {
            code: code as u16,
            reason: Span::new(start + r.min(line.len()), end),
        });
    }
    // Request-Line.
    let sp1 = memchr(b' ', line).ok_or_else(|| err(ParseErrorKind::BadStartLine, 0))?;
    let method =
        Method::from_bytes(&line[..sp1]).ok_or_else(|| err(ParseErrorKind::BadMethod, 0))?;
    let mut u = sp1;
    while line.get(u) == Some(&b' ') {
        u += 1;
    }
    let uri_end = line[u..]
        .iter()
        .position(|&b| b == b' ')
        .map(|p| u + p)
        .ok_or_else(|| err(ParseErrorKind::BadStartLine, u))?;
    let uri = &line[u..uri_end];
    let scheme_ok = uri.first().is_some_and(u8::is_ascii_alphabetic)
        && memchr(b':', uri).is_some_and(|c| {
            uri[..c]
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        })
        && uri.iter().all(|&b| b > 0x20 && b != 0x7f);
    if !scheme_ok {
        return Err(err(ParseErrorKind::BadUri, u));
    }
    let mut v = uri_end;
    while line.get(v) == Some(&b' ') {
        v += 1;
    }
    check_version(trim_wsp_end(&line[v..])).map_err(|k| err(k, v))?;
    Ok(StartLine::Request {
        method,
        uri: Span::new(start + u, start + uri_end),
    })
}

/// `SIP/2.0` is accepted; another well-formed version is `UnsupportedVersion` (answer 505);
/// anything else is `BadVersion`.
fn check_version(v: &[u8]) -> Result<(), ParseErrorKind> {
    if v.len() >= 4 && v[..4].eq_ignore_ascii_case(b"SIP/") {
        let rest = &v[4..];
        if rest == b"2.0" {
            return Ok(());
        }
        if let Some(dot) = memchr(b'.', rest) {
            let (a, b) = (&rest[..dot], &rest[dot + 1..]);
            if !a.is_empty() && !b.is_empty() && a.iter().chain(b).all(u8::is_ascii_digit) {
                return Err(ParseErrorKind::UnsupportedVersion);
            }
        }
    }
    Err(ParseErrorKind::BadVersion)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, cseq_method: &str, extra: &str) -> Vec<u8> {
        format!(
            "{method} sip:b@example.com SIP/2.0\r\nVia: SIP/2.0/UDP a.example;branch=z9hG4bK1\r\n\
             From: <sip:a@example.com>;tag=1\r\nTo: <sip:b@example.com>\r\nCall-ID: c1@a\r\n\
             CSeq: 7 {cseq_method}\r\n{extra}Content-Length: 0\r\n\r\n"
        )
        .into_bytes()
    }

    fn check(bytes: &[u8]) -> Result<(), ParseErrorKind> {
        Message::parse(bytes, &Limits::DEFAULT)
            .and_then(|m| m.check_mandatory())
            .map_err(|e| e.kind)
    }

    #[test]
    fn max_forwards_is_optional_but_must_be_a_number() {
        assert_eq!(check(&req("INVITE", "INVITE", "")), Ok(()));
        assert_eq!(
            check(&req("INVITE", "INVITE", "Max-Forwards: 70\r\n")),
            Ok(())
        );
        assert_eq!(
            check(&req("INVITE", "INVITE", "Max-Forwards: x\r\n")),
            Err(ParseErrorKind::BadHeader(HeaderName::MaxForwards))
        );
    }

    #[test]
    fn cseq_method_must_match_for_every_method() {
        for m in ["INVITE", "ACK", "CANCEL", "BYE", "FOO"] {
            assert_eq!(check(&req(m, m, "")), Ok(()), "{m}");
        }
        for (m, c) in [("ACK", "INVITE"), ("CANCEL", "INVITE"), ("BYE", "INVITE")] {
            assert_eq!(
                check(&req(m, c, "")),
                Err(ParseErrorKind::BadHeader(HeaderName::CSeq)),
                "{m} with CSeq {c}"
            );
        }
    }

    #[test]
    fn missing_headers_are_named() {
        let full = req("OPTIONS", "OPTIONS", "");
        for (line, kind) in [
            ("Via: ", HeaderName::Via),
            ("From: ", HeaderName::From),
            ("To: ", HeaderName::To),
            ("Call-ID: ", HeaderName::CallId),
            ("CSeq: ", HeaderName::CSeq),
        ] {
            let text = String::from_utf8_lossy(&full);
            let without: String = text
                .split_inclusive("\r\n")
                .filter(|l| !l.starts_with(line))
                .collect();
            assert_eq!(
                check(without.as_bytes()),
                Err(ParseErrorKind::MissingHeader(kind)),
                "{line}"
            );
        }
    }
}
