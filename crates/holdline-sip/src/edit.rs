//! The edit list: changes to a parsed message recorded as byte-range edits ("lumps") and
//! applied in one pass.
//!
//! See [`Editor`].

use core::fmt;
use std::net::IpAddr;

use holdline_base::Transport;
use memchr::{memchr, memchr3};
use smallvec::SmallVec;

use crate::name::HEADER_NAME_COUNT;
use crate::scan::is_token;
use crate::{HeaderName, Message, Span, ValueRef};

// One bit per HeaderName in the `u64` sets below.
const _: () = assert!(HEADER_NAME_COUNT <= 64);

/// Why an edit was refused. A refused edit leaves the [`Editor`] as it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum EditError {
    /// The edit overlaps an edit already recorded, or repeats one that may be made only once
    /// (popping the top Via twice, decrementing Max-Forwards twice, setting a header twice,
    /// editing Content-Length both by hand and through the body).
    #[error("edit conflicts with an earlier edit")]
    Conflict,
    /// The message has no header of this kind to edit (e.g. popping a Route when there is
    /// none).
    #[error("no {0} header to edit")]
    Missing(HeaderName),
    /// Max-Forwards is zero: the request must not be forwarded (answer `483 Too Many Hops`).
    #[error("Max-Forwards is zero")]
    TooManyHops,
    /// The Max-Forwards value is not a decimal number.
    #[error("Max-Forwards is not a number")]
    BadMaxForwards,
    /// The edit applies to requests only (the Request-URI) and the message is a response.
    #[error("the message is not a request")]
    NotARequest,
    /// Bytes given by the caller would break the message's syntax (a line break in a header
    /// value, white space in a Request-URI, a branch that is not a token, ...); names what.
    #[error("invalid {0}")]
    InvalidValue(&'static str),
    /// A span given to [`Editor::replace`] lies outside the start line and header section, or
    /// its start is after its end.
    #[error("span outside the start line and header section")]
    OutOfBounds,
    /// The inserted bytes would exceed 4 GiB.
    #[error("edit too large")]
    TooLarge,
}

/// What an edit writes in place of its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fill {
    /// Bytes from the arena.
    Bytes,
    /// The final body length, replacing a Content-Length value.
    ClValue,
    /// A whole `Content-Length: N` line with the final body length.
    ClLine,
}

/// One edit: replace `start..end` of the original buffer with `fill` (arena `from..to` for
/// [`Fill::Bytes`]). `start == end` is an insert.
#[derive(Clone, Copy, Debug)]
struct Edit {
    start: u32,
    end: u32,
    from: u32,
    to: u32,
    fill: Fill,
}

impl Edit {
    /// Sort key: by offset, inserts before a replacement starting at the same offset.
    fn key(&self) -> (u32, bool) {
        (self.start, self.start != self.end)
    }
}

/// Where an insert goes among inserts already recorded at the same offset.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Before them (a new top of stack: Via, Record-Route).
    Front,
    /// After them (appended headers).
    Back,
}

/// How Content-Length is being taken care of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClState {
    /// Not touched.
    Untouched,
    /// Every Content-Length value is rewritten with the final body length.
    Rewritten,
    /// A `Content-Length` line is added.
    Inserted,
}

const ANNOTATED_VIA: u8 = 1;
const MAX_FORWARDS: u8 = 2;

/// Records edits to a [`Message`] and writes the edited message with [`emit`](Self::emit).
///
/// An `Editor` borrows a [`Message`] and records edits anchored at byte offsets of the
/// original buffer: insert bytes at an offset, replace a range, delete a range. Nothing is
/// copied until [`Editor::emit`], which walks the message once, copying every byte no edit
/// touches as it is and writing the edits in between. Inserted bytes live in one inline arena
/// (spilling to the heap only past 256 bytes), and edits are kept ordered as they are recorded,
/// so an editor costs no allocation for a typical proxy edit.
///
/// Edits never overlap. An edit that would overlap one already recorded (popping the top Via
/// twice, decrementing Max-Forwards twice, replacing the value of a header whose line was
/// removed) is refused with [`EditError::Conflict`] and leaves the editor as it was. Inserts at
/// the same offset are all kept: lines appended with [`Editor::add_header`] come out in the
/// order they were added, while [`Editor::push_via`] and [`Editor::add_record_route`] put the
/// newest line on top.
///
/// What [`Editor::emit`] writes is the message from its start line to the end of its body
/// (leading CRLFs and bytes past Content-Length are not part of it). A message that was
/// accepted without the empty line ending its header section gets that line (and the missing
/// terminator of its last line) so that it can be framed on a stream.
///
/// ```
/// use holdline_base::Transport;
/// use holdline_sip::{Editor, Limits, Message};
///
/// let buf = b"OPTIONS sip:bob@example.com SIP/2.0\r\n\
///             Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK776\r\n\
///             Max-Forwards: 70\r\n\
///             Content-Length: 0\r\n\r\n";
/// let msg = Message::parse(buf, &Limits::DEFAULT)?;
/// let mut ed = Editor::new(&msg);
/// ed.push_via(Transport::Udp, b"proxy.example.com", b"z9hG4bKp1", true)?;
/// ed.decrement_max_forwards()?;
/// let mut out = Vec::new();
/// ed.emit(&mut out);
/// assert_eq!(
///     out,
///     b"OPTIONS sip:bob@example.com SIP/2.0\r\n\
///       Via: SIP/2.0/UDP proxy.example.com;branch=z9hG4bKp1;rport\r\n\
///       Via: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK776\r\n\
///       Max-Forwards: 69\r\n\
///       Content-Length: 0\r\n\r\n"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Every method either records its whole change or, with an [`EditError`], none of it.
/// "Top Via" and "top Route" always mean those of the original message:
/// [`push_via`](Self::push_via) does not change which Via
/// [`annotate_top_via`](Self::annotate_top_via) or [`pop_via`](Self::pop_via) act on.
#[derive(Clone, Debug)]
pub struct Editor<'m, 'a> {
    msg: &'m Message<'a>,
    /// Ordered by [`Edit::key`]; never overlapping.
    edits: SmallVec<[Edit; 8]>,
    arena: Arena,
    /// The replacement body, in the arena.
    body: Option<(u32, u32)>,
    cl: ClState,
    done: u8,
    /// Kinds passed to `set_header`.
    set_kinds: u64,
    /// Kinds passed to `remove_headers`.
    removed_kinds: u64,
}

impl<'m, 'a> Editor<'m, 'a> {
    /// An editor with no edits for `msg`. Does not allocate.
    pub fn new(msg: &'m Message<'a>) -> Self {
        Self {
            msg,
            edits: SmallVec::new(),
            arena: Arena::new(),
            body: None,
            cl: ClState::Untouched,
            done: 0,
            set_kinds: 0,
            removed_kinds: 0,
        }
    }

    /// The message being edited.
    pub fn message(&self) -> &'m Message<'a> {
        self.msg
    }

    /// Whether no edit has been recorded (emitting copies the message as it is).
    pub fn is_empty(&self) -> bool {
        self.edits.is_empty() && self.body.is_none()
    }

    /// Forgets every edit, keeping the memory for new ones.
    pub fn clear(&mut self) {
        self.edits.clear();
        self.arena.clear();
        self.body = None;
        self.cl = ClState::Untouched;
        self.done = 0;
        self.set_kinds = 0;
        self.removed_kinds = 0;
    }

    // ----- Via ---------------------------------------------------------------------------

    /// Inserts `Via: SIP/2.0/<TRANSPORT> <sent_by>;branch=<branch>[;rport]` above the first
    /// Via line (at the start of the header section if there is none). A second push goes
    /// above the first.
    ///
    /// `sent_by` is `host[:port]` (an IPv6 host in brackets); `branch` must be a token and
    /// should start with the magic cookie `z9hG4bK`.
    pub fn push_via(
        &mut self,
        transport: Transport,
        sent_by: &[u8],
        branch: &[u8],
        rport: bool,
    ) -> Result<(), EditError> {
        self.push_via_with(transport, sent_by, branch, rport, b"")
    }

    /// [`push_via`](Self::push_via) with more parameters after the others: `params` is
    /// `*(;name[=value])`, e.g. the overload-control offer `;oc;oc-algo="loss,rate"` of
    /// RFC 7339 (see [`OcOffer::write_params`](crate::OcOffer::write_params)).
    pub fn push_via_with(
        &mut self,
        transport: Transport,
        sent_by: &[u8],
        branch: &[u8],
        rport: bool,
        params: &[u8],
    ) -> Result<(), EditError> {
        if !params.is_empty() && !is_param_list(params) {
            return Err(EditError::InvalidValue("Via parameters"));
        }
        if sent_by.is_empty()
            || !sent_by
                .iter()
                .all(|&b| b.is_ascii_graphic() && b != b';' && b != b',')
        {
            return Err(EditError::InvalidValue("sent-by"));
        }
        if !is_token(branch) {
            return Err(EditError::InvalidValue("branch"));
        }
        let at = self.line_start_or_top(HeaderName::Via);
        let rport: &[u8] = if rport { b";rport" } else { b"" };
        self.insert_parts(
            at,
            &[
                b"Via: SIP/2.0/",
                transport.as_via_str().as_bytes(),
                b" ",
                sent_by,
                b";branch=",
                branch,
                rport,
                params,
                b"\r\n",
            ],
            Place::Front,
        )
    }

    /// Replaces parameters of the top Via: every parameter named in `remove`
    /// (case-insensitive) goes, with its `;`, and `append` (`*(;name[=value])`) is added at the
    /// end of the Via. A server's overload-control answer (RFC 7339 §5.2) in a response going
    /// upstream: `remove` = [`OC_PARAMS`](crate::OC_PARAMS), `append` = the answer. May be
    /// called once; conflicts with [`annotate_top_via`](Self::annotate_top_via) only if both
    /// touch the same parameter.
    pub fn set_top_via_params(&mut self, remove: &[&str], append: &[u8]) -> Result<(), EditError> {
        if !append.is_empty() && !is_param_list(append) {
            return Err(EditError::InvalidValue("Via parameters"));
        }
        let top = self
            .top_element(HeaderName::Via)
            .ok_or(EditError::Missing(HeaderName::Via))?;
        let base = top.span.start;
        let elem = top.bytes;
        // The segments `;name[=value]` to remove, as absolute ranges.
        let mut gone: SmallVec<[(u32, u32); 4]> = SmallVec::new();
        let mut semi = crate::scan::find_unquoted(elem, 0, b';');
        while let Some(i) = semi {
            let next = crate::scan::find_unquoted(elem, i + 1, b';');
            let seg_end = next.unwrap_or(elem.len());
            let name_end = elem[i + 1..seg_end]
                .iter()
                .position(|&b| b == b'=')
                .map_or(seg_end, |p| i + 1 + p);
            let (ns, ne) = trim_range(elem, i + 1, name_end);
            let name = &elem[ns..ne];
            if remove
                .iter()
                .any(|r| name.eq_ignore_ascii_case(r.as_bytes()))
            {
                gone.push((base + i as u32, base + seg_end as u32));
            }
            semi = next;
        }
        // The element is trimmed: the appended text goes right after its last parameter.
        let end = top.span.end;
        for &(s, e) in &gone {
            self.check(s, e)?;
        }
        if !append.is_empty() {
            self.check(end, end)?;
        }
        for &(s, e) in &gone {
            let from = self.arena.len() as u32;
            self.record_staged(s, e, from, Place::Back);
        }
        if !append.is_empty() {
            let from = self.stage(&[append])?;
            let to = self.arena.len() as u32;
            self.record(end, end, from, to, Fill::Bytes, Place::Back);
        }
        Ok(())
    }

    /// Removes the top Via (a response going upstream) and returns it.
    ///
    /// The whole line goes when the Via is alone on it; in `Via: a, b` only `a, ` goes.
    pub fn pop_via(&mut self) -> Result<ValueRef<'a>, EditError> {
        self.pop_first_value(HeaderName::Via)
    }

    /// Adds `;received=<received>` to the top Via and fills its `rport` (RFC 3261 §18.2.1,
    /// RFC 3581), without rewriting the rest of it.
    ///
    /// With `received`, an existing `received` value is replaced, else the parameter is
    /// appended. With `rport`, an `rport` flag becomes `rport=<port>` (an existing value is
    /// replaced); a Via without `rport` is left alone. Whether `received` is needed (the
    /// sent-by host differs from the source address, or `rport` is present) is the caller's
    /// decision. Returns whether the top Via carries `rport`. May be called once.
    pub fn annotate_top_via(
        &mut self,
        received: Option<IpAddr>,
        rport: Option<u16>,
    ) -> Result<bool, EditError> {
        if self.done & ANNOTATED_VIA != 0 {
            return Err(EditError::Conflict);
        }
        let top = self
            .top_element(HeaderName::Via)
            .ok_or(EditError::Missing(HeaderName::Via))?;
        let params = ViaParams::scan(top.bytes);
        let base = top.span.start;

        // Plan, check, then record, so that a refused call records nothing.
        let rport_edit = match (rport, params.rport) {
            (Some(_), Some(p)) => Some(p),
            _ => None,
        };
        let received_edit = received.map(|_| params.received);
        let end = top.span.end;
        for p in rport_edit.iter().chain(received_edit.iter().flatten()) {
            let (s, e) = p.target(base);
            self.check(s, e)?;
        }
        if received_edit == Some(None) {
            self.check(end, end)?;
        }

        self.reserve_small()?;
        if let (Some(port), Some(p)) = (rport, rport_edit) {
            let (s, e) = p.target(base);
            let eq: &[u8] = if p.value.is_none() { b"=" } else { b"" };
            let digits = Text::decimal(u64::from(port));
            let from = self.arena.len() as u32;
            self.arena
                .push_parts(&[eq, digits.as_bytes()], eq.len() + digits.len);
            self.record_staged(s, e, from, Place::Back);
        }
        if let (Some(ip), Some(existing)) = (received, received_edit) {
            let (prefix, (s, e)): (&[u8], _) = match existing {
                Some(p) if p.value.is_none() => (b"=", p.target(base)),
                Some(p) => (b"", p.target(base)),
                None => (b";received=", (end, end)),
            };
            let text = Text::ip(ip);
            let from = self.arena.len() as u32;
            self.arena
                .push_parts(&[prefix, text.as_bytes()], prefix.len() + text.len);
            self.record_staged(s, e, from, Place::Back);
        }
        self.done |= ANNOTATED_VIA;
        Ok(params.rport.is_some())
    }

    // ----- Max-Forwards ------------------------------------------------------------------

    /// Decrements Max-Forwards and returns the new value; adds `Max-Forwards: 70` (and
    /// returns 70) when there is none (RFC 3261 §16.6 step 3). Refuses a value of zero with
    /// [`EditError::TooManyHops`]: check first and answer `483`. May be called once.
    pub fn decrement_max_forwards(&mut self) -> Result<u32, EditError> {
        if self.done & MAX_FORWARDS != 0 {
            return Err(EditError::Conflict);
        }
        let value = self
            .msg
            .max_forwards()
            .map_err(|_| EditError::BadMaxForwards)?;
        let new = match (value, self.msg.first_header(HeaderName::MaxForwards)) {
            (Some(0), _) => return Err(EditError::TooManyHops),
            (Some(n), Some(h)) => {
                let v = h.value_span();
                self.check(v.start, v.end)?;
                self.reserve_small()?;
                let from = self.arena.len() as u32;
                self.arena
                    .extend_from_slice(Text::decimal(u64::from(n - 1)).as_bytes());
                self.record_staged(v.start, v.end, from, Place::Back);
                n - 1
            }
            _ => {
                let at = self.msg.headers_end() as u32;
                self.insert_parts(at, &[b"Max-Forwards: 70\r\n"], Place::Back)?;
                70
            }
        };
        self.done |= MAX_FORWARDS;
        Ok(new)
    }

    // ----- Route and Record-Route --------------------------------------------------------

    /// Inserts `Record-Route: <value>` above the first Record-Route line (at the start of the
    /// header section if there is none). `value` is the whole field value, e.g.
    /// `<sip:proxy.example.com;lr>`. A second call goes above the first.
    pub fn add_record_route(&mut self, value: &[u8]) -> Result<(), EditError> {
        check_value(value, "Record-Route")?;
        let at = self.line_start_or_top(HeaderName::RecordRoute);
        self.insert_parts(at, &[b"Record-Route: ", value, b"\r\n"], Place::Front)
    }

    /// Removes the top Route and returns it (same rules as [`pop_via`](Self::pop_via)).
    pub fn pop_route(&mut self) -> Result<ValueRef<'a>, EditError> {
        self.pop_first_value(HeaderName::Route)
    }

    /// Removes the first element of list header `kind` and returns it: the whole header line
    /// when the element is alone on it, else the element and the separator after it. For a
    /// header that is not a list ([`HeaderName::is_list`]), the first non-empty field goes.
    pub fn pop_first_value(&mut self, kind: HeaderName) -> Result<ValueRef<'a>, EditError> {
        let (top, next) = self
            .top_element_and_next(kind)
            .ok_or(EditError::Missing(kind))?;
        let span = match next {
            None => self
                .msg
                .headers()
                .get(top.header)
                .ok_or(EditError::Missing(kind))?
                .line_span(),
            Some(next) => Span {
                start: top.span.start,
                end: next,
            },
        };
        self.check(span.start, span.end)?;
        self.record(span.start, span.end, 0, 0, Fill::Bytes, Place::Back);
        Ok(top)
    }

    // ----- Start line --------------------------------------------------------------------

    /// Replaces the Request-URI with `uri` (not checked beyond containing no white space or
    /// control characters).
    pub fn set_request_uri(&mut self, uri: &[u8]) -> Result<(), EditError> {
        let span = self.msg.request_uri_span().ok_or(EditError::NotARequest)?;
        if uri.is_empty() || !uri.iter().all(|&b| b > 0x20 && b != 0x7f) {
            return Err(EditError::InvalidValue("Request-URI"));
        }
        self.replace_parts(span, &[uri])
    }

    // ----- Headers -----------------------------------------------------------------------

    /// Appends `name: value` at the end of the header section. Several calls append in
    /// order.
    pub fn add_header(&mut self, name: &[u8], value: &[u8]) -> Result<(), EditError> {
        if !is_token(name) {
            return Err(EditError::InvalidValue("header name"));
        }
        check_value(value, "header value")?;
        let is_cl = HeaderName::lookup(name) == HeaderName::ContentLength;
        if is_cl && self.cl != ClState::Untouched {
            return Err(EditError::Conflict);
        }
        let at = self.msg.headers_end() as u32;
        self.insert_parts(at, &[name, b": ", value, b"\r\n"], Place::Back)?;
        if is_cl {
            self.set_kinds |= 1u64 << HeaderName::ContentLength as u32;
        }
        Ok(())
    }

    /// Replaces the value of the first header of `kind` with `value`, or appends
    /// `<Canonical-Name>: value` if there is none. The whole field value is replaced (all
    /// elements of a list header). May be called once per kind; `kind` may not be
    /// [`HeaderName::Other`] (use [`add_header`](Self::add_header)).
    pub fn set_header(&mut self, kind: HeaderName, value: &[u8]) -> Result<(), EditError> {
        if kind == HeaderName::Other {
            return Err(EditError::InvalidValue("header name"));
        }
        check_value(value, "header value")?;
        let bit = 1u64 << kind as u32;
        if self.set_kinds & bit != 0
            || (kind == HeaderName::ContentLength && self.cl != ClState::Untouched)
        {
            return Err(EditError::Conflict);
        }
        match self.msg.first_header(kind) {
            Some(h) => self.replace_parts(h.value_span(), &[value])?,
            None => {
                let at = self.msg.headers_end() as u32;
                self.insert_parts(
                    at,
                    &[kind.as_str().as_bytes(), b": ", value, b"\r\n"],
                    Place::Back,
                )?;
            }
        }
        self.set_kinds |= bit;
        Ok(())
    }

    /// Removes every header field of `kind` (folded lines included) and returns how many;
    /// `kind` may not be [`HeaderName::Other`] (use
    /// [`remove_headers_named`](Self::remove_headers_named)).
    pub fn remove_headers(&mut self, kind: HeaderName) -> Result<usize, EditError> {
        if kind == HeaderName::Other {
            return Err(EditError::InvalidValue("header name"));
        }
        if kind == HeaderName::ContentLength && self.cl != ClState::Untouched {
            return Err(EditError::Conflict);
        }
        let n = self.remove_lines(|msg| msg.headers_of(kind).map(|h| h.line_span()).collect())?;
        self.removed_kinds |= 1u64 << kind as u32;
        Ok(n)
    }

    /// Removes every header field called `name` (case-insensitive; a compact form and its
    /// full name are the same header) and returns how many.
    pub fn remove_headers_named(&mut self, name: &[u8]) -> Result<usize, EditError> {
        let kind = HeaderName::lookup(name);
        if kind != HeaderName::Other {
            return self.remove_headers(kind);
        }
        self.remove_lines(|msg| msg.headers_named(name).map(|h| h.line_span()).collect())
    }

    fn remove_lines(
        &mut self,
        lines: impl FnOnce(&'m Message<'a>) -> SmallVec<[Span; 4]>,
    ) -> Result<usize, EditError> {
        let spans = lines(self.msg);
        for s in &spans {
            self.check(s.start, s.end)?;
        }
        for s in &spans {
            self.record(s.start, s.end, 0, 0, Fill::Bytes, Place::Back);
        }
        Ok(spans.len())
    }

    // ----- Body and Content-Length -------------------------------------------------------

    /// Replaces the body with `body` and makes Content-Length match it: every Content-Length
    /// value is rewritten, or `Content-Length: N` is appended if there is none. Calling it
    /// again replaces the body again. Content-Type is left to the caller
    /// ([`set_header`](Self::set_header)).
    pub fn set_body(&mut self, body: &[u8]) -> Result<(), EditError> {
        if self.cl_by_hand() {
            return Err(EditError::Conflict);
        }
        let mark = self.arena.len();
        let from = self.stage(&[body])?;
        if self.cl == ClState::Untouched
            && let Err(e) = self.take_over_content_length(true)
        {
            self.arena.truncate(mark);
            return Err(e);
        }
        self.body = Some((from, self.arena.len() as u32));
        Ok(())
    }

    /// Makes sure the emitted message carries a Content-Length that matches its body, as a
    /// stream transport requires: appends `Content-Length: N` when the message has none.
    /// A message with a Content-Length and an unchanged body is left as it is.
    pub fn ensure_content_length(&mut self) -> Result<(), EditError> {
        if self.cl != ClState::Untouched {
            return Ok(());
        }
        if self.cl_by_hand() {
            return Err(EditError::Conflict);
        }
        self.take_over_content_length(false)
    }

    fn cl_by_hand(&self) -> bool {
        let bit = 1u64 << HeaderName::ContentLength as u32;
        (self.set_kinds | self.removed_kinds) & bit != 0
    }

    /// Records the Content-Length edits: value rewrites (if `rewrite` and there are values),
    /// or a new line.
    fn take_over_content_length(&mut self, rewrite: bool) -> Result<(), EditError> {
        let msg = self.msg;
        if msg.first_header(HeaderName::ContentLength).is_some() {
            if !rewrite {
                return Ok(());
            }
            for h in msg.headers_of(HeaderName::ContentLength) {
                let v = h.value_span();
                self.check(v.start, v.end)?;
            }
            for h in msg.headers_of(HeaderName::ContentLength) {
                let v = h.value_span();
                self.record(v.start, v.end, 0, 0, Fill::ClValue, Place::Back);
            }
            self.cl = ClState::Rewritten;
        } else {
            let at = msg.headers_end() as u32;
            self.check(at, at)?;
            self.record(at, at, 0, 0, Fill::ClLine, Place::Back);
            self.cl = ClState::Inserted;
        }
        Ok(())
    }

    // ----- Raw edits ---------------------------------------------------------------------

    /// Replaces the bytes of `span` with `bytes` (an empty span inserts, empty bytes delete).
    ///
    /// For edits the methods above do not cover, such as rewriting a Contact URI. The span
    /// must lie within the start line and header section, and `bytes` may not contain CR, LF
    /// or NUL; keeping the result well-formed is up to the caller.
    pub fn replace(&mut self, span: Span, bytes: &[u8]) -> Result<(), EditError> {
        let lo = self.msg.start_offset() as u32;
        let hi = self.msg.headers_end() as u32;
        if span.start > span.end || span.start < lo || span.end > hi {
            return Err(EditError::OutOfBounds);
        }
        if memchr3(b'\r', b'\n', 0, bytes).is_some() {
            return Err(EditError::InvalidValue("replacement bytes"));
        }
        self.replace_parts(span, &[bytes])
    }

    // ----- Output ------------------------------------------------------------------------

    /// The exact number of bytes [`emit`](Self::emit) appends.
    pub fn emitted_len(&self) -> usize {
        let msg = self.msg;
        let mut n = (msg.body_span().start as usize).saturating_sub(msg.start_offset());
        let body_len = self.body_len();
        for e in &self.edits {
            n += self.fill_len(e, body_len);
            n = n.saturating_sub((e.end - e.start) as usize);
        }
        let (before, after) = self.end_fix();
        n + before.len() + after.len() + body_len
    }

    /// Appends the edited message to `out`: every byte of the original message outside the
    /// edits, unchanged and in order, with the edits applied.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let msg = self.msg;
        let buf = msg.buffer();
        out.reserve(self.emitted_len());
        let head_end = msg.headers_end();
        let body_len = self.body_len();
        let (before, after) = self.end_fix();
        let mut fixed = before.is_empty();
        let mut pos = msg.start_offset();
        for e in &self.edits {
            let (start, end) = (e.start as usize, e.end as usize);
            if start > pos {
                out.extend_from_slice(buf.get(pos..start).unwrap_or_default());
                pos = start;
            }
            if !fixed && start >= head_end {
                out.extend_from_slice(before);
                fixed = true;
            }
            self.write_fill(e, body_len, out);
            pos = pos.max(end);
        }
        let body = msg.body_span();
        out.extend_from_slice(buf.get(pos..body.start as usize).unwrap_or_default());
        if !fixed {
            out.extend_from_slice(before);
        }
        out.extend_from_slice(after);
        match self.body {
            Some((from, to)) => out.extend_from_slice(self.arena_bytes(from, to)),
            None => out.extend_from_slice(msg.body()),
        }
    }

    // ----- Internals ---------------------------------------------------------------------

    fn body_len(&self) -> usize {
        match self.body {
            Some((from, to)) => (to - from) as usize,
            None => self.msg.body_span().len(),
        }
    }

    fn arena_bytes(&self, from: u32, to: u32) -> &[u8] {
        self.arena.get(from as usize, to as usize)
    }

    /// Whether a rewritten Content-Length value keeps the original bytes.
    fn cl_unchanged(&self, body_len: usize) -> bool {
        self.msg
            .content_length()
            .is_some_and(|cl| cl as usize == body_len)
    }

    fn fill_len(&self, e: &Edit, body_len: usize) -> usize {
        match e.fill {
            Fill::Bytes => (e.to - e.from) as usize,
            Fill::ClValue if self.cl_unchanged(body_len) => (e.end - e.start) as usize,
            Fill::ClValue => decimal_len(body_len),
            Fill::ClLine => CL_PREFIX.len() + decimal_len(body_len) + 2,
        }
    }

    fn write_fill(&self, e: &Edit, body_len: usize, out: &mut Vec<u8>) {
        match e.fill {
            Fill::Bytes => out.extend_from_slice(self.arena_bytes(e.from, e.to)),
            Fill::ClValue if self.cl_unchanged(body_len) => out.extend_from_slice(
                self.msg
                    .buffer()
                    .get(e.start as usize..e.end as usize)
                    .unwrap_or_default(),
            ),
            Fill::ClValue => write_decimal(out, body_len),
            Fill::ClLine => {
                out.extend_from_slice(CL_PREFIX);
                write_decimal(out, body_len);
                out.extend_from_slice(b"\r\n");
            }
        }
    }

    /// For a message without the empty line after its headers: the bytes that end its last
    /// line (emitted before inserts at the end of the header section) and the empty line.
    fn end_fix(&self) -> (&'static [u8], &'static [u8]) {
        let msg = self.msg;
        let end = msg.headers_end();
        if msg.body_span().start as usize > end {
            return (b"", b"");
        }
        // Find the last byte written before `end`, skipping the inserts at `end`.
        let mut p = end;
        let mut last = None;
        for e in self.edits.iter().rev() {
            let (s, t) = (e.start as usize, e.end as usize);
            if s == end && t == end {
                continue;
            }
            if t != p {
                break;
            }
            let fill_last = match e.fill {
                Fill::Bytes => self.arena_bytes(e.from, e.to).last().copied(),
                Fill::ClValue => Some(b'0'),
                Fill::ClLine => Some(b'\n'),
            };
            if fill_last.is_some() {
                last = fill_last;
                break;
            }
            p = s;
        }
        if last.is_none() && p > msg.start_offset() {
            last = msg.buffer().get(p - 1).copied();
        }
        match last {
            Some(b'\n') => (b"", b"\r\n"),
            Some(b'\r') => (b"\n", b"\r\n"),
            _ => (b"\r\n", b"\r\n"),
        }
    }

    /// The first element of `kind` (as `Message::values(kind).next()` finds it).
    fn top_element(&self, kind: HeaderName) -> Option<ValueRef<'a>> {
        self.top_element_and_next(kind).map(|(v, _)| v)
    }

    /// The first element of `kind` and, when it is not alone in its field, where the next
    /// element of that field starts.
    fn top_element_and_next(&self, kind: HeaderName) -> Option<(ValueRef<'a>, Option<u32>)> {
        let msg = self.msg;
        let first = msg.first_index(kind)?;
        let headers = msg.headers().get(first..)?;
        for (i, h) in headers.iter().enumerate().filter(|(_, h)| h.kind == kind) {
            let v = msg.value(h);
            let base = h.value_span().start;
            let (a, b, next) = if kind.is_list() {
                match first_element(v) {
                    Some(found) => found,
                    None => continue,
                }
            } else if v.is_empty() {
                continue;
            } else {
                (0, v.len(), None)
            };
            let top = ValueRef {
                header: first + i,
                span: Span {
                    start: base + a as u32,
                    end: base + b as u32,
                },
                bytes: v.get(a..b).unwrap_or_default(),
                alone: next.is_none(),
            };
            return Some((top, next.map(|n| base + n as u32)));
        }
        None
    }

    /// Start of the first line of `kind`, or of the header section.
    fn line_start_or_top(&self, kind: HeaderName) -> u32 {
        self.msg
            .first_header(kind)
            .map_or_else(|| self.msg.headers_start() as u32, |h| h.line_span().start)
    }

    /// Refuses an edit of `start..end` that would overlap a recorded one.
    fn check(&self, start: u32, end: u32) -> Result<(), EditError> {
        let clash = self.edits.iter().any(|e| {
            if start == end {
                e.start < start && start < e.end
            } else if e.start == e.end {
                start < e.start && e.start < end
            } else {
                start < e.end && e.start < end
            }
        });
        if clash {
            Err(EditError::Conflict)
        } else {
            Ok(())
        }
    }

    /// Appends `parts` to the arena; returns where they start.
    fn stage(&mut self, parts: &[&[u8]]) -> Result<u32, EditError> {
        let total = parts
            .iter()
            .map(|p| p.len())
            .fold(self.arena.len(), usize::saturating_add);
        if total > u32::MAX as usize {
            return Err(EditError::TooLarge);
        }
        let from = self.arena.len();
        self.arena.push_parts(parts, total - from);
        let from = from as u32;
        Ok(from)
    }

    /// Makes sure a few short values (numbers, an address) can be staged with offsets that
    /// fit in `u32`.
    fn reserve_small(&self) -> Result<(), EditError> {
        if self.arena.len() > u32::MAX as usize - 256 {
            Err(EditError::TooLarge)
        } else {
            Ok(())
        }
    }

    /// Records arena bytes `from..` (up to the arena's end) as the fill of `start..end`,
    /// which was already checked (and the arena's size with [`Self::reserve_small`]).
    fn record_staged(&mut self, start: u32, end: u32, from: u32, place: Place) {
        let to = self.arena.len() as u32;
        self.record(start, end, from, to, Fill::Bytes, place);
    }

    fn insert_parts(&mut self, at: u32, parts: &[&[u8]], place: Place) -> Result<(), EditError> {
        self.check(at, at)?;
        let from = self.stage(parts)?;
        let to = self.arena.len() as u32;
        self.record(at, at, from, to, Fill::Bytes, place);
        Ok(())
    }

    fn replace_parts(&mut self, span: Span, parts: &[&[u8]]) -> Result<(), EditError> {
        self.check(span.start, span.end)?;
        let from = self.stage(parts)?;
        let to = self.arena.len() as u32;
        self.record(span.start, span.end, from, to, Fill::Bytes, Place::Back);
        Ok(())
    }

    /// Inserts an edit (already checked) in order.
    fn record(&mut self, start: u32, end: u32, from: u32, to: u32, fill: Fill, place: Place) {
        let edit = Edit {
            start,
            end,
            from,
            to,
            fill,
        };
        let key = edit.key();
        // Most edits come in ascending order: search from the end.
        let idx = match place {
            Place::Back => self
                .edits
                .iter()
                .rposition(|e| e.key() <= key)
                .map_or(0, |i| i + 1),
            Place::Front => self
                .edits
                .iter()
                .rposition(|e| e.key() < key)
                .map_or(0, |i| i + 1),
        };
        if idx == self.edits.len() {
            self.edits.push(edit);
        } else {
            self.edits.insert(idx, edit);
        }
    }
}

/// Bytes of an inline arena before it moves to the heap.
const INLINE: usize = 256;

/// Where inserted bytes live: inline up to [`INLINE`] bytes, then in a `Vec` (kept by
/// [`Arena::clear`]). Offsets stay valid when it spills.
#[derive(Clone)]
struct Arena {
    inline: [u8; INLINE],
    len: usize,
    heap: Vec<u8>,
    spilled: bool,
}

impl fmt::Debug for Arena {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Arena")
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl Arena {
    fn new() -> Self {
        Self {
            inline: [0; INLINE],
            len: 0,
            heap: Vec::new(),
            spilled: false,
        }
    }

    fn len(&self) -> usize {
        if self.spilled {
            self.heap.len()
        } else {
            self.len
        }
    }

    fn get(&self, from: usize, to: usize) -> &[u8] {
        let bytes = if self.spilled {
            &self.heap[..]
        } else {
            self.inline.get(..self.len).unwrap_or_default()
        };
        bytes.get(from..to).unwrap_or_default()
    }

    /// Appends `parts`, which are `total` bytes long.
    fn push_parts(&mut self, parts: &[&[u8]], total: usize) {
        if !self.spilled {
            if let Some(room) = self
                .inline
                .get_mut(self.len..self.len.saturating_add(total))
            {
                let mut at = 0;
                for p in parts {
                    if let Some(dst) = room.get_mut(at..at + p.len()) {
                        dst.copy_from_slice(p);
                    }
                    at += p.len();
                }
                self.len += total;
                return;
            }
            self.heap.clear();
            self.heap.reserve((self.len + total).max(2 * INLINE));
            self.heap
                .extend_from_slice(self.inline.get(..self.len).unwrap_or_default());
            self.spilled = true;
        }
        for p in parts {
            self.heap.extend_from_slice(p);
        }
    }

    fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.push_parts(&[bytes], bytes.len());
    }

    fn truncate(&mut self, len: usize) {
        if self.spilled {
            self.heap.truncate(len);
        } else {
            self.len = self.len.min(len);
        }
    }

    fn clear(&mut self) {
        self.heap.clear();
        self.len = 0;
        self.spilled = false;
    }
}

const CL_PREFIX: &[u8] = b"Content-Length: ";

/// A Via parameter found in the top Via: where its name ends and where its value is,
/// relative to the element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FoundParam {
    name_end: usize,
    value: Option<(usize, usize)>,
}

impl FoundParam {
    /// The range to edit (absolute): the value, or the empty range after a flag's name.
    fn target(&self, base: u32) -> (u32, u32) {
        match self.value {
            Some((a, b)) => (base + a as u32, base + b as u32),
            None => (base + self.name_end as u32, base + self.name_end as u32),
        }
    }
}

/// The `rport` and `received` parameters of a Via element.
#[derive(Clone, Copy, Debug, Default)]
struct ViaParams {
    rport: Option<FoundParam>,
    received: Option<FoundParam>,
}

impl ViaParams {
    fn scan(elem: &[u8]) -> Self {
        let mut found = Self::default();
        let mut semi = crate::scan::find_unquoted(elem, 0, b';');
        while let Some(i) = semi {
            let seg_start = i + 1;
            let next = crate::scan::find_unquoted(elem, seg_start, b';');
            let seg_end = next.unwrap_or(elem.len());
            let eq = elem[seg_start..seg_end]
                .iter()
                .position(|&b| b == b'=')
                .map(|p| seg_start + p);
            let (ns, ne) = trim_range(elem, seg_start, eq.unwrap_or(seg_end));
            let param = FoundParam {
                name_end: ne,
                value: eq.map(|q| trim_range(elem, q + 1, seg_end)),
            };
            let name = &elem[ns..ne];
            if name.eq_ignore_ascii_case(b"rport") && found.rport.is_none() {
                found.rport = Some(param);
            } else if name.eq_ignore_ascii_case(b"received") && found.received.is_none() {
                found.received = Some(param);
            }
            semi = next;
        }
        found
    }
}

/// Whether `p` is `1*(;name[=value])` with token names and token or quoted values, no white
/// space, no line breaks.
fn is_param_list(p: &[u8]) -> bool {
    if p.first() != Some(&b';') {
        return false;
    }
    p[1..].split(|&b| b == b';').all(|seg| {
        let (name, value) = match seg.iter().position(|&b| b == b'=') {
            Some(i) => (&seg[..i], Some(&seg[i + 1..])),
            None => (seg, None),
        };
        is_token(name)
            && value.is_none_or(|v| {
                is_token(v)
                    || (v.len() >= 2
                        && v[0] == b'"'
                        && v[v.len() - 1] == b'"'
                        && v[1..v.len() - 1].iter().all(|&b| {
                            (b.is_ascii_graphic() && b != b'"' && b != b'\\') || b == b' '
                        }))
            })
    })
}

/// The first non-empty comma-separated element of a list value, as
/// [`split_commas`](crate::scan::split_commas) finds it: `(start, end, start of the next
/// non-empty element)`.
fn first_element(v: &[u8]) -> Option<(usize, usize, Option<usize>)> {
    if memchr(b',', v).is_none() {
        // No separator at all: the whole value is the only element (or there is none).
        let (a, b) = trim_range(v, 0, v.len());
        return (a < b).then_some((a, b, None));
    }
    let mut seg = 0;
    loop {
        let comma = crate::scan::find_unquoted(v, seg, b',');
        let (a, b) = trim_range(v, seg, comma.unwrap_or(v.len()));
        if a < b {
            let next = comma.and_then(|c| {
                let rest = v.get(c + 1..)?;
                let p = rest
                    .iter()
                    .position(|&x| !matches!(x, b' ' | b'\t' | b'\r' | b'\n' | b','))?;
                Some(c + 1 + p)
            });
            return Some((a, b, next));
        }
        seg = comma? + 1;
    }
}

/// `a..b` of `s` without surrounding linear white space.
fn trim_range(s: &[u8], mut a: usize, mut b: usize) -> (usize, usize) {
    let lws = |c: u8| matches!(c, b' ' | b'\t' | b'\r' | b'\n');
    while a < b && lws(s[a]) {
        a += 1;
    }
    while b > a && lws(s[b - 1]) {
        b -= 1;
    }
    (a, b)
}

fn check_value(v: &[u8], what: &'static str) -> Result<(), EditError> {
    if memchr3(b'\r', b'\n', 0, v).is_some() {
        Err(EditError::InvalidValue(what))
    } else {
        Ok(())
    }
}

/// The decimal digits of `n`, right-aligned in a 20-byte buffer; returns where they start.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> usize {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return i;
        }
    }
}

fn decimal_len(n: usize) -> usize {
    let mut buf = [0; 20];
    20 - decimal(n as u64, &mut buf)
}

fn write_decimal(out: &mut Vec<u8>, n: usize) {
    let mut buf = [0; 20];
    let i = decimal(n as u64, &mut buf);
    out.extend_from_slice(&buf[i..]);
}

/// A short text (a number, an address) formatted on the stack.
struct Text {
    buf: [u8; 48],
    len: usize,
}

impl Text {
    fn decimal(n: u64) -> Self {
        let mut digits = [0; 20];
        let at = decimal(n, &mut digits);
        let mut t = Self {
            buf: [0; 48],
            len: 0,
        };
        t.push(&digits[at..]);
        t
    }

    fn ip(ip: IpAddr) -> Self {
        let mut t = Self {
            buf: [0; 48],
            len: 0,
        };
        match ip {
            IpAddr::V4(v4) => {
                for (i, o) in v4.octets().into_iter().enumerate() {
                    if i > 0 {
                        t.push(b".");
                    }
                    let mut digits = [0; 20];
                    let at = decimal(u64::from(o), &mut digits);
                    t.push(&digits[at..]);
                }
            }
            // At most 45 bytes; writing into the buffer cannot fail.
            IpAddr::V6(v6) => drop(fmt::Write::write_fmt(&mut t, format_args!("{v6}"))),
        }
        t
    }

    fn push(&mut self, bytes: &[u8]) {
        if let Some(dst) = self.buf.get_mut(self.len..self.len + bytes.len()) {
            dst.copy_from_slice(bytes);
            self.len += bytes.len();
        }
    }

    fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
    }
}

impl fmt::Write for Text {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.push(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;
    use crate::Limits;

    fn parse(b: &[u8]) -> Message<'_> {
        Message::parse(b, &Limits::DEFAULT).expect("parse")
    }

    /// Emits, checks `emitted_len` and that the output parses, returns it as text.
    fn out(ed: &Editor<'_, '_>) -> String {
        let mut out = b"prefix".to_vec();
        ed.emit(&mut out);
        assert_eq!(out.len() - 6, ed.emitted_len());
        let out = out.split_off(6);
        Message::parse(&out, &Limits::DEFAULT).expect("output parses");
        String::from_utf8(out).expect("utf-8")
    }

    const INVITE: &[u8] = b"INVITE sip:bob@biloxi.example.com SIP/2.0\r\n\
        Via: SIP/2.0/UDP pc33.atlanta.example.com;branch=z9hG4bK776asdhds;rport\r\n\
        Max-Forwards: 70\r\n\
        Route: <sip:p1.example.com;lr>, <sip:p2.example.com;lr>\r\n\
        To: Bob <sip:bob@biloxi.example.com>\r\n\
        From: Alice <sip:alice@atlanta.example.com>;tag=1928301774\r\n\
        Call-ID: a84b4c76e66710@pc33.atlanta.example.com\r\n\
        CSeq: 314159 INVITE\r\n\
        Subject: a long\r\n \t folded subject\r\n\
        Content-Type: application/sdp\r\n\
        Content-Length: 4\r\n\
        \r\n\
        v=0\n";

    #[test]
    fn via_with_overload_offer() {
        let msg = parse(INVITE);
        let mut ed = Editor::new(&msg);
        ed.push_via_with(
            Transport::Udp,
            b"p1.example.com",
            b"z9hG4bKp1",
            true,
            b";oc;oc-algo=\"loss,rate\"",
        )
        .expect("push");
        let o = out(&ed);
        assert!(
            o.contains("Via: SIP/2.0/UDP p1.example.com;branch=z9hG4bKp1;rport;oc;oc-algo=\"loss,rate\"\r\n"),
            "{o}"
        );
        let msg2 = parse(o.as_bytes());
        let offer = crate::OcOffer::from_via(&msg2.top_via().expect("via")).expect("offer");
        assert!(offer.offers(crate::OcAlgo::Rate));
        for bad in [&b"oc"[..], b";oc\r\nX: y", b";oc=\"a", b"; oc", b";oc,x"] {
            let mut ed = Editor::new(&msg);
            assert_eq!(
                ed.push_via_with(Transport::Udp, b"p1", b"z9hG4bKp1", false, bad),
                Err(EditError::InvalidValue("Via parameters")),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn top_via_overload_answer_replaces_the_offer() {
        let resp = b"SIP/2.0 100 Trying\r\n\
            Via: SIP/2.0/UDP a.example.com;branch=z9hG4bK1;OC;rport=5;oc-algo=\"loss,rate\" , SIP/2.0/UDP b;branch=z9hG4bK2;oc\r\n\
            Via: SIP/2.0/UDP c;branch=z9hG4bK3;oc\r\n\
            Content-Length: 0\r\n\r\n";
        let msg = parse(resp);
        let mut ed = Editor::new(&msg);
        ed.set_top_via_params(
            &crate::OC_PARAMS,
            b";oc=20;oc-algo=\"loss\";oc-validity=500;oc-seq=1.5",
        )
        .expect("set");
        let o = out(&ed);
        assert!(
            o.contains("Via: SIP/2.0/UDP a.example.com;branch=z9hG4bK1;rport=5;oc=20;oc-algo=\"loss\";oc-validity=500;oc-seq=1.5 , SIP/2.0/UDP b;branch=z9hG4bK2;oc\r\n"),
            "{o}"
        );
        assert!(
            o.contains("Via: SIP/2.0/UDP c;branch=z9hG4bK3;oc\r\n"),
            "{o}"
        );
        let m = parse(o.as_bytes());
        let r = crate::OcReport::from_via(&m.top_via().expect("via"))
            .expect("valid")
            .expect("answer");
        assert_eq!((r.value, r.seq), (20, 150_000));
        // Removing alone, and a Via without any of them.
        let mut ed = Editor::new(&msg);
        ed.set_top_via_params(&crate::OC_PARAMS, b"")
            .expect("strip");
        assert!(out(&ed).contains("a.example.com;branch=z9hG4bK1;rport=5 , SIP"));
        let plain = parse(INVITE);
        let mut ed = Editor::new(&plain);
        ed.set_top_via_params(&crate::OC_PARAMS, b";oc=0")
            .expect("append");
        assert!(out(&ed).contains("branch=z9hG4bK776asdhds;rport;oc=0\r\n"));
        // Combined with received/rport annotation of the same Via.
        let mut ed = Editor::new(&plain);
        ed.annotate_top_via(Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9))), Some(7))
            .expect("annotate");
        ed.set_top_via_params(&crate::OC_PARAMS, b";oc=1;oc-seq=1.1")
            .expect("both");
        let o = out(&ed);
        assert!(
            o.contains(";rport=7;received=192.0.2.9;oc=1;oc-seq=1.1\r\n"),
            "{o}"
        );
    }

    #[test]
    fn no_edits_copies_the_message() {
        let msg = parse(INVITE);
        let ed = Editor::new(&msg);
        assert!(ed.is_empty());
        assert_eq!(out(&ed).as_bytes(), INVITE);
    }

    #[test]
    fn full_proxy_edit() {
        let msg = parse(INVITE);
        let mut ed = Editor::new(&msg);
        assert_eq!(
            ed.annotate_top_via(Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 101))), Some(5070)),
            Ok(true)
        );
        ed.push_via(Transport::Tcp, b"p1.example.com:5060", b"z9hG4bKp1x", false)
            .expect("push");
        assert_eq!(ed.decrement_max_forwards(), Ok(69));
        ed.add_record_route(b"<sip:p1.example.com;lr>").expect("rr");
        let popped = ed.pop_route().expect("pop route");
        assert_eq!(popped.bytes, b"<sip:p1.example.com;lr>");
        assert_eq!(
            out(&ed),
            "INVITE sip:bob@biloxi.example.com SIP/2.0\r\n\
             Record-Route: <sip:p1.example.com;lr>\r\n\
             Via: SIP/2.0/TCP p1.example.com:5060;branch=z9hG4bKp1x\r\n\
             Via: SIP/2.0/UDP pc33.atlanta.example.com;branch=z9hG4bK776asdhds;rport=5070;received=192.0.2.101\r\n\
             Max-Forwards: 69\r\n\
             Route: <sip:p2.example.com;lr>\r\n\
             To: Bob <sip:bob@biloxi.example.com>\r\n\
             From: Alice <sip:alice@atlanta.example.com>;tag=1928301774\r\n\
             Call-ID: a84b4c76e66710@pc33.atlanta.example.com\r\n\
             CSeq: 314159 INVITE\r\n\
             Subject: a long\r\n \t folded subject\r\n\
             Content-Type: application/sdp\r\n\
             Content-Length: 4\r\n\
             \r\n\
             v=0\n"
        );
    }

    #[test]
    fn push_via_goes_above_the_first_via_line() {
        let buf =
            b"OPTIONS sip:a@b SIP/2.0\r\nTo: <sip:a@b>\r\nv: SIP/2.0/UDP h;branch=z9hG4bK1\r\n\r\n";
        let msg = parse(buf);
        let mut ed = Editor::new(&msg);
        ed.push_via(Transport::Udp, b"[2001:db8::1]:5062", b"z9hG4bKa", true)
            .expect("push");
        ed.push_via(Transport::Sctp, b"h2", b"z9hG4bKb", false)
            .expect("push");
        assert_eq!(
            out(&ed),
            "OPTIONS sip:a@b SIP/2.0\r\nTo: <sip:a@b>\r\n\
             Via: SIP/2.0/SCTP h2;branch=z9hG4bKb\r\n\
             Via: SIP/2.0/UDP [2001:db8::1]:5062;branch=z9hG4bKa;rport\r\n\
             v: SIP/2.0/UDP h;branch=z9hG4bK1\r\n\r\n"
        );
        // Without any Via, at the top of the header section.
        let buf = b"OPTIONS sip:a@b SIP/2.0\r\nTo: <sip:a@b>\r\n\r\n";
        let msg = parse(buf);
        let mut ed = Editor::new(&msg);
        ed.push_via(Transport::Tls, b"h", b"z9hG4bKc", false)
            .expect("push");
        assert_eq!(
            out(&ed),
            "OPTIONS sip:a@b SIP/2.0\r\nVia: SIP/2.0/TLS h;branch=z9hG4bKc\r\nTo: <sip:a@b>\r\n\r\n"
        );
    }

    #[test]
    fn push_via_rejects_bad_values() {
        let msg = parse(INVITE);
        let mut ed = Editor::new(&msg);
        let e = ed.push_via(Transport::Udp, b"h\r\nX: y", b"z9hG4bK1", false);
        assert_eq!(e, Err(EditError::InvalidValue("sent-by")));
        let e = ed.push_via(Transport::Udp, b"h", b"z9hG4bK1;x", false);
        assert_eq!(e, Err(EditError::InvalidValue("branch")));
        assert_eq!(
            ed.push_via(Transport::Udp, b"", b"b", false),
            Err(EditError::InvalidValue("sent-by"))
        );
        assert!(ed.is_empty());
    }

    const RESPONSE: &[u8] = b"SIP/2.0 200 OK\r\n\
        Via: SIP/2.0/UDP p1.example.com;branch=z9hG4bKp, SIP/2.0/TCP p2;branch=z9hG4bKq\r\n\
        v: SIP/2.0/UDP ua.example.com;branch=z9hG4bKu\r\n\
        To: <sip:b@x>;tag=2\r\nFrom: <sip:a@x>;tag=1\r\nCall-ID: c\r\nCSeq: 1 INVITE\r\n\
        Content-Length: 0\r\n\r\n";

    #[test]
    fn pop_via_first_of_a_comma_list() {
        let msg = parse(RESPONSE);
        let mut ed = Editor::new(&msg);
        let top = ed.pop_via().expect("pop");
        assert_eq!(top.bytes, b"SIP/2.0/UDP p1.example.com;branch=z9hG4bKp");
        assert_eq!(ed.pop_via(), Err(EditError::Conflict));
        let o = out(&ed);
        assert_eq!(
            o,
            "SIP/2.0 200 OK\r\n\
             Via: SIP/2.0/TCP p2;branch=z9hG4bKq\r\n\
             v: SIP/2.0/UDP ua.example.com;branch=z9hG4bKu\r\n\
             To: <sip:b@x>;tag=2\r\nFrom: <sip:a@x>;tag=1\r\nCall-ID: c\r\nCSeq: 1 INVITE\r\n\
             Content-Length: 0\r\n\r\n"
        );
        // Popping again from the output removes the line, then the compact line.
        let msg2 = parse(o.as_bytes());
        let mut ed2 = Editor::new(&msg2);
        ed2.pop_via().expect("pop");
        let o2 = out(&ed2);
        assert!(
            o2.starts_with(
                "SIP/2.0 200 OK\r\nv: SIP/2.0/UDP ua.example.com;branch=z9hG4bKu\r\nTo:"
            )
        );
        let msg3 = parse(o2.as_bytes());
        let mut ed3 = Editor::new(&msg3);
        assert_eq!(
            ed3.pop_via().expect("pop").bytes,
            b"SIP/2.0/UDP ua.example.com;branch=z9hG4bKu"
        );
        assert!(out(&ed3).starts_with("SIP/2.0 200 OK\r\nTo:"));
        let msg4 = parse(b"SIP/2.0 200 OK\r\nTo: <sip:b@x>\r\n\r\n");
        assert_eq!(
            Editor::new(&msg4).pop_via(),
            Err(EditError::Missing(HeaderName::Via))
        );
    }

    #[test]
    fn pop_via_over_a_fold() {
        let buf = b"SIP/2.0 180 Ringing\r\nVia: SIP/2.0/UDP a;branch=z9hG4bK1 ,\r\n SIP/2.0/UDP b;branch=z9hG4bK2\r\nVia: SIP/2.0/UDP c;branch=z9hG4bK3\r\n\r\n";
        let msg = parse(buf);
        let mut ed = Editor::new(&msg);
        ed.pop_via().expect("pop");
        let o = out(&ed);
        assert_eq!(
            o,
            "SIP/2.0 180 Ringing\r\nVia: SIP/2.0/UDP b;branch=z9hG4bK2\r\nVia: SIP/2.0/UDP c;branch=z9hG4bK3\r\n\r\n"
        );
    }

    #[test]
    fn annotate_top_via() {
        let ip = Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
        let via = |v: &str| {
            format!("REGISTER sip:r SIP/2.0\r\nVia: {v}\r\nVia: SIP/2.0/UDP z;rport\r\n\r\n")
        };
        let run = |v: &str, ip, port| {
            let buf = via(v);
            let msg = parse(buf.as_bytes());
            let mut ed = Editor::new(&msg);
            let r = ed.annotate_top_via(ip, port).expect("annotate");
            (r, out(&ed))
        };
        // rport in the middle, received appended.
        assert_eq!(
            run("SIP/2.0/UDP h:5060;rport;branch=z9hG4bK1", ip, Some(1024)),
            (
                true,
                via("SIP/2.0/UDP h:5060;rport=1024;branch=z9hG4bK1;received=10.0.0.1")
            )
        );
        // rport last, with spaces, only rport.
        assert_eq!(
            run("SIP/2.0/UDP h ; branch=z9hG4bK1 ; RPORT", None, Some(7)),
            (true, via("SIP/2.0/UDP h ; branch=z9hG4bK1 ; RPORT=7"))
        );
        // Existing received and rport values are replaced.
        assert_eq!(
            run(
                "SIP/2.0/UDP h;received=1.1.1.1;rport=9;branch=z9hG4bK1",
                ip,
                Some(8)
            ),
            (
                true,
                via("SIP/2.0/UDP h;received=10.0.0.1;rport=8;branch=z9hG4bK1")
            )
        );
        // No rport: left alone; IPv6 received.
        let v6 = Some(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)));
        assert_eq!(
            run("SIP/2.0/UDP h;branch=z9hG4bK1", v6, Some(5)),
            (
                false,
                via("SIP/2.0/UDP h;branch=z9hG4bK1;received=2001:db8::1")
            )
        );
        // No parameters at all.
        assert_eq!(
            run("SIP/2.0/UDP h", ip, None),
            (false, via("SIP/2.0/UDP h;received=10.0.0.1"))
        );
        // Top of a comma list.
        assert_eq!(
            run("SIP/2.0/UDP h;rport, SIP/2.0/UDP g;rport", ip, Some(3)),
            (
                true,
                via("SIP/2.0/UDP h;rport=3;received=10.0.0.1, SIP/2.0/UDP g;rport")
            )
        );
    }

    #[test]
    fn annotate_conflicts() {
        let msg = parse(RESPONSE);
        let mut ed = Editor::new(&msg);
        ed.annotate_top_via(None, Some(1)).expect("annotate");
        assert_eq!(ed.annotate_top_via(None, Some(1)), Err(EditError::Conflict));
        let mut ed = Editor::new(&msg);
        ed.pop_via().expect("pop");
        let ip = Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(ed.annotate_top_via(ip, None), Err(EditError::Conflict));
        // The refused call recorded nothing and may be retried after clear().
        ed.clear();
        assert!(ed.is_empty());
        ed.annotate_top_via(ip, None).expect("annotate");
        assert!(out(&ed).contains("branch=z9hG4bKp;received=127.0.0.1, SIP/2.0/TCP p2"));
    }

    #[test]
    fn max_forwards() {
        let msg = parse(INVITE);
        let mut ed = Editor::new(&msg);
        assert_eq!(ed.decrement_max_forwards(), Ok(69));
        assert_eq!(ed.decrement_max_forwards(), Err(EditError::Conflict));
        assert!(out(&ed).contains("\r\nMax-Forwards: 69\r\n"));

        let msg = parse(b"MESSAGE sip:a@b SIP/2.0\r\nMax-Forwards:   1 \r\nTo: <sip:a@b>\r\n\r\n");
        let mut ed = Editor::new(&msg);
        assert_eq!(ed.decrement_max_forwards(), Ok(0));
        assert_eq!(
            out(&ed),
            "MESSAGE sip:a@b SIP/2.0\r\nMax-Forwards:   0 \r\nTo: <sip:a@b>\r\n\r\n"
        );

        let buf = b"MESSAGE sip:a@b SIP/2.0\r\nMax-Forwards: 0\r\n\r\n";
        let msg = parse(buf);
        assert_eq!(
            Editor::new(&msg).decrement_max_forwards(),
            Err(EditError::TooManyHops)
        );
        let msg = parse(b"MESSAGE sip:a@b SIP/2.0\r\nMax-Forwards: x\r\n\r\n");
        assert_eq!(
            Editor::new(&msg).decrement_max_forwards(),
            Err(EditError::BadMaxForwards)
        );

        // Missing: added at the end of the header section, before the body.
        let msg = parse(b"MESSAGE sip:a@b SIP/2.0\r\nTo: <sip:a@b>\r\nl: 2\r\n\r\nhi");
        let mut ed = Editor::new(&msg);
        assert_eq!(ed.decrement_max_forwards(), Ok(70));
        assert_eq!(ed.decrement_max_forwards(), Err(EditError::Conflict));
        assert_eq!(
            out(&ed),
            "MESSAGE sip:a@b SIP/2.0\r\nTo: <sip:a@b>\r\nl: 2\r\nMax-Forwards: 70\r\n\r\nhi"
        );
    }

    #[test]
    fn record_route_and_route() {
        let buf = b"BYE sip:b@x SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\n\
            Record-Route: <sip:old>\r\nRoute: <sip:r1;lr>,<sip:r2;lr> , <sip:r3;lr>\r\nRoute: <sip:r4>\r\n\r\n";
        let msg = parse(buf);
        let mut ed = Editor::new(&msg);
        ed.add_record_route(b"<sip:me;lr>").expect("rr");
        ed.add_record_route(b"<sip:me2;lr>").expect("rr");
        assert_eq!(ed.pop_route().expect("pop").bytes, b"<sip:r1;lr>");
        assert_eq!(ed.pop_route(), Err(EditError::Conflict));
        assert_eq!(
            out(&ed),
            "BYE sip:b@x SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\n\
             Record-Route: <sip:me2;lr>\r\nRecord-Route: <sip:me;lr>\r\nRecord-Route: <sip:old>\r\n\
             Route: <sip:r2;lr> , <sip:r3;lr>\r\nRoute: <sip:r4>\r\n\r\n"
        );
        // A Route alone on its line goes with its line.
        let buf = b"BYE sip:b@x SIP/2.0\r\nRoute: <sip:r1;lr>\r\nRoute: <sip:r2;lr>\r\nTo: <sip:b@x>\r\n\r\n";
        let msg = parse(buf);
        let mut ed = Editor::new(&msg);
        ed.pop_route().expect("pop");
        assert_eq!(
            out(&ed),
            "BYE sip:b@x SIP/2.0\r\nRoute: <sip:r2;lr>\r\nTo: <sip:b@x>\r\n\r\n"
        );
        assert_eq!(
            Editor::new(&parse(b"BYE sip:b@x SIP/2.0\r\n\r\n")).pop_route(),
            Err(EditError::Missing(HeaderName::Route))
        );
        assert_eq!(
            Editor::new(&msg).add_record_route(b"<sip:a>\r\nX: y"),
            Err(EditError::InvalidValue("Record-Route"))
        );
    }

    #[test]
    fn request_uri() {
        let msg = parse(INVITE);
        let mut ed = Editor::new(&msg);
        assert_eq!(
            ed.set_request_uri(b"sip:a b"),
            Err(EditError::InvalidValue("Request-URI"))
        );
        ed.set_request_uri(b"sip:bob@192.0.2.4:5080;transport=tcp")
            .expect("ruri");
        assert_eq!(ed.set_request_uri(b"sip:x"), Err(EditError::Conflict));
        let o = out(&ed);
        assert!(o.starts_with("INVITE sip:bob@192.0.2.4:5080;transport=tcp SIP/2.0\r\nVia: "));
        assert_eq!(o.len(), INVITE.len() + 10);
        let msg = parse(RESPONSE);
        assert_eq!(
            Editor::new(&msg).set_request_uri(b"sip:x"),
            Err(EditError::NotARequest)
        );
    }

    #[test]
    fn headers_add_set_remove() {
        let msg = parse(INVITE);
        let mut ed = Editor::new(&msg);
        ed.add_header(b"X-A", b"1").expect("add");
        ed.add_header(b"X-B", b"").expect("add");
        ed.set_header(HeaderName::Subject, b"short").expect("set");
        assert_eq!(
            ed.set_header(HeaderName::Subject, b"again"),
            Err(EditError::Conflict)
        );
        ed.set_header(HeaderName::UserAgent, b"holdline")
            .expect("set");
        assert_eq!(ed.remove_headers(HeaderName::Route), Ok(1));
        assert_eq!(ed.remove_headers(HeaderName::Contact), Ok(0));
        assert_eq!(ed.remove_headers_named(b"content-TYPE"), Ok(1));
        assert_eq!(
            ed.remove_headers(HeaderName::Subject),
            Err(EditError::Conflict)
        );
        assert_eq!(
            ed.add_header(b"Bad Name", b"x"),
            Err(EditError::InvalidValue("header name"))
        );
        assert_eq!(
            ed.add_header(b"X", b"a\nb"),
            Err(EditError::InvalidValue("header value"))
        );
        assert_eq!(
            ed.set_header(HeaderName::Other, b"x"),
            Err(EditError::InvalidValue("header name"))
        );
        assert_eq!(
            out(&ed),
            "INVITE sip:bob@biloxi.example.com SIP/2.0\r\n\
             Via: SIP/2.0/UDP pc33.atlanta.example.com;branch=z9hG4bK776asdhds;rport\r\n\
             Max-Forwards: 70\r\n\
             To: Bob <sip:bob@biloxi.example.com>\r\n\
             From: Alice <sip:alice@atlanta.example.com>;tag=1928301774\r\n\
             Call-ID: a84b4c76e66710@pc33.atlanta.example.com\r\n\
             CSeq: 314159 INVITE\r\n\
             Subject: short\r\n\
             Content-Length: 4\r\n\
             X-A: 1\r\n\
             X-B: \r\n\
             User-Agent: holdline\r\n\
             \r\n\
             v=0\n"
        );
    }

    #[test]
    fn remove_folded_and_unknown_headers() {
        let buf = b"OPTIONS sip:a@b SIP/2.0\r\nx-foo: 1\r\nSubject: a\r\n\tb\r\nX-FOO:2\r\nTo: <sip:a@b>\r\n\r\n";
        let msg = parse(buf);
        let mut ed = Editor::new(&msg);
        assert_eq!(ed.remove_headers_named(b"X-Foo"), Ok(2));
        assert_eq!(ed.remove_headers_named(b"s"), Ok(1));
        assert_eq!(out(&ed), "OPTIONS sip:a@b SIP/2.0\r\nTo: <sip:a@b>\r\n\r\n");
    }

    #[test]
    fn body_and_content_length() {
        // Compact and repeated Content-Length values are all rewritten.
        let buf = b"MESSAGE sip:a@b SIP/2.0\r\nl: 5\r\nContent-Length: 05\r\n\r\nhello";
        let msg = parse(buf);
        let mut ed = Editor::new(&msg);
        ed.ensure_content_length().expect("ensure");
        assert!(ed.is_empty());
        assert_eq!(out(&ed).as_bytes(), buf);
        ed.set_body(b"a longer body").expect("body");
        assert_eq!(
            out(&ed),
            "MESSAGE sip:a@b SIP/2.0\r\nl: 13\r\nContent-Length: 13\r\n\r\na longer body"
        );
        ed.set_body(b"").expect("body");
        ed.ensure_content_length().expect("ensure");
        assert_eq!(
            out(&ed),
            "MESSAGE sip:a@b SIP/2.0\r\nl: 0\r\nContent-Length: 0\r\n\r\n"
        );
        // The same length keeps the original bytes.
        ed.set_body(b"HELLO").expect("body");
        assert_eq!(
            out(&ed).as_bytes(),
            b"MESSAGE sip:a@b SIP/2.0\r\nl: 5\r\nContent-Length: 05\r\n\r\nHELLO"
        );
        assert_eq!(
            ed.set_header(HeaderName::ContentLength, b"1"),
            Err(EditError::Conflict)
        );
        assert_eq!(
            ed.remove_headers(HeaderName::ContentLength),
            Err(EditError::Conflict)
        );

        // Without Content-Length (a datagram): added when asked, counting the whole body.
        let buf = b"MESSAGE sip:a@b SIP/2.0\r\nTo: <sip:a@b>\r\n\r\nbody bytes";
        let msg = parse(buf);
        let mut ed = Editor::new(&msg);
        ed.add_header(b"X-Last", b"1").expect("add");
        ed.ensure_content_length().expect("ensure");
        assert_eq!(
            out(&ed),
            "MESSAGE sip:a@b SIP/2.0\r\nTo: <sip:a@b>\r\nX-Last: 1\r\nContent-Length: 10\r\n\r\nbody bytes"
        );
        ed.set_body(b"v=0\r\n").expect("body");
        assert_eq!(
            out(&ed),
            "MESSAGE sip:a@b SIP/2.0\r\nTo: <sip:a@b>\r\nX-Last: 1\r\nContent-Length: 5\r\n\r\nv=0\r\n"
        );

        // Content-Length edited by hand first: the body may not take it over.
        let msg = parse(b"MESSAGE sip:a@b SIP/2.0\r\n\r\n");
        let mut ed = Editor::new(&msg);
        ed.set_header(HeaderName::ContentLength, b"0").expect("set");
        assert_eq!(ed.set_body(b"x"), Err(EditError::Conflict));
        assert_eq!(ed.ensure_content_length(), Err(EditError::Conflict));
        assert_eq!(
            out(&ed),
            "MESSAGE sip:a@b SIP/2.0\r\nContent-Length: 0\r\n\r\n"
        );
    }

    #[test]
    fn bytes_past_content_length_and_leading_crlfs_are_dropped() {
        let buf = b"\r\n\r\nSIP/2.0 100 Trying\r\nVia: SIP/2.0/UDP a;branch=z9hG4bK1\r\nContent-Length: 0\r\n\r\nJUNK";
        let msg = parse(buf);
        let ed = Editor::new(&msg);
        assert_eq!(
            out(&ed),
            "SIP/2.0 100 Trying\r\nVia: SIP/2.0/UDP a;branch=z9hG4bK1\r\nContent-Length: 0\r\n\r\n"
        );
        let mut ed = Editor::new(&msg);
        ed.pop_via().expect("pop");
        assert_eq!(out(&ed), "SIP/2.0 100 Trying\r\nContent-Length: 0\r\n\r\n");
    }

    #[test]
    fn missing_empty_line_is_added() {
        let msg = parse(b"OPTIONS sip:a@b SIP/2.0\r\nTo: <sip:a@b>\r\n");
        let ed = Editor::new(&msg);
        assert_eq!(out(&ed), "OPTIONS sip:a@b SIP/2.0\r\nTo: <sip:a@b>\r\n\r\n");

        let msg = parse(b"OPTIONS sip:a@b SIP/2.0\r\nTo: <sip:a@b>");
        let mut ed = Editor::new(&msg);
        assert_eq!(out(&ed), "OPTIONS sip:a@b SIP/2.0\r\nTo: <sip:a@b>\r\n\r\n");
        ed.add_header(b"X", b"1").expect("add");
        ed.ensure_content_length().expect("ensure");
        assert_eq!(
            out(&ed),
            "OPTIONS sip:a@b SIP/2.0\r\nTo: <sip:a@b>\r\nX: 1\r\nContent-Length: 0\r\n\r\n"
        );
        ed.set_body(b"xyz").expect("body");
        assert_eq!(
            out(&ed),
            "OPTIONS sip:a@b SIP/2.0\r\nTo: <sip:a@b>\r\nX: 1\r\nContent-Length: 3\r\n\r\nxyz"
        );
        // The last line replaced by bytes without a terminator.
        let msg = parse(b"OPTIONS sip:a@b SIP/2.0\r\nTo: <sip:a@b>\r\nX: 1\r\n");
        let mut ed = Editor::new(&msg);
        let line = msg.headers()[1].line_span();
        ed.replace(line, b"Y: 2").expect("replace");
        assert_eq!(
            out(&ed),
            "OPTIONS sip:a@b SIP/2.0\r\nTo: <sip:a@b>\r\nY: 2\r\n\r\n"
        );
        // Only a start line, unterminated.
        let msg = parse(b"OPTIONS sip:a@b SIP/2.0");
        let mut ed = Editor::new(&msg);
        ed.push_via(Transport::Udp, b"h", b"z9hG4bK1", false)
            .expect("push");
        assert_eq!(
            out(&ed),
            "OPTIONS sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\n\r\n"
        );
    }

    #[test]
    fn bare_lf_lines() {
        let msg = parse(
            b"OPTIONS sip:a@b SIP/2.0\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\nMax-Forwards: 10\n\n",
        );
        let mut ed = Editor::new(&msg);
        ed.push_via(Transport::Udp, b"p", b"z9hG4bK2", false)
            .expect("push");
        ed.decrement_max_forwards().expect("mf");
        assert_eq!(
            out(&ed),
            "OPTIONS sip:a@b SIP/2.0\nVia: SIP/2.0/UDP p;branch=z9hG4bK2\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\nMax-Forwards: 9\n\n"
        );
    }

    proptest::proptest! {
        #[test]
        fn first_element_agrees_with_split_commas(v in "[a ,;\"<>\\\\\r\n]{0,24}") {
            let v = v.as_bytes();
            let all: Vec<(usize, usize)> = crate::scan::split_commas(v).collect();
            let expected = all.first().map(|&(a, b)| (a, b, all.get(1).map(|n| n.0)));
            proptest::prop_assert_eq!(first_element(v), expected);
        }
    }

    #[test]
    fn arena_spills_to_the_heap() {
        let msg = parse(INVITE);
        let mut ed = Editor::new(&msg);
        let long = vec![b'x'; 300];
        ed.add_header(b"X-Short", b"1").expect("add");
        ed.add_header(b"X-Long", &long).expect("add");
        ed.add_header(b"X-After", b"2").expect("add");
        let o = out(&ed);
        let tail = format!(
            "X-Short: 1\r\nX-Long: {}\r\nX-After: 2\r\n\r\nv=0\n",
            "x".repeat(300)
        );
        assert!(o.ends_with(&tail));
        ed.clear();
        ed.add_header(b"X-Again", b"3").expect("add");
        assert!(out(&ed).ends_with("X-Again: 3\r\n\r\nv=0\n"));
    }

    #[test]
    fn raw_replace_bounds_and_conflicts() {
        let msg = parse(INVITE);
        let mut ed = Editor::new(&msg);
        let body = msg.body_span();
        assert_eq!(ed.replace(body, b"x"), Err(EditError::OutOfBounds));
        assert_eq!(
            ed.replace(Span { start: 5, end: 4 }, b"x"),
            Err(EditError::OutOfBounds)
        );
        assert_eq!(
            ed.replace(Span { start: 0, end: 6 }, b"A\r"),
            Err(EditError::InvalidValue("replacement bytes"))
        );
        ed.replace(Span { start: 0, end: 6 }, b"UPDATE")
            .expect("replace");
        assert_eq!(
            ed.replace(Span { start: 3, end: 3 }, b"x"),
            Err(EditError::Conflict)
        );
        ed.replace(Span { start: 6, end: 6 }, b"")
            .expect("empty insert at the boundary");
        let to = msg.first_header(HeaderName::To).expect("to").value_span();
        ed.replace(to, b"<sip:carol@x>").expect("replace");
        let o = out(&ed);
        assert!(o.starts_with("UPDATE sip:bob@biloxi.example.com SIP/2.0\r\n"));
        assert!(o.contains("\r\nTo: <sip:carol@x>\r\n"));
        // A refused multi-line removal records nothing.
        let mut ed = Editor::new(&msg);
        ed.replace(msg.headers()[2].value_span(), b"<sip:x>")
            .expect("replace route");
        let before = out(&ed);
        assert_eq!(
            ed.remove_headers(HeaderName::Route),
            Err(EditError::Conflict)
        );
        assert_eq!(out(&ed), before);
    }
}
