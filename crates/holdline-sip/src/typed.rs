//! Typed accessors on [`Message`]: each parses its header value on demand and reports errors
//! with message-relative offsets.

use memchr::memchr;

use crate::addr::NameAddr;
use crate::auth::{Challenge, Credentials};
use crate::contact::Contact;
use crate::scan::{CommaSplit, split_commas, trim_lws};
use crate::uri::Uri;
use crate::via::Via;
use crate::{Header, HeaderName, Message, ParseError, ParseErrorKind, StartLine};

impl<'a> Message<'a> {
    /// The Request-URI, parsed. Errors are [`ParseErrorKind::BadUri`] (or `BadParam`) at
    /// message offsets; a response has no Request-URI and gives
    /// [`ParseErrorKind::BadStartLine`] at the start line.
    pub fn request_uri(&self) -> Result<Uri<'a>, ParseError> {
        match *self.start_line() {
            StartLine::Request { uri, .. } => {
                Uri::parse(self.slice(uri)).map_err(|e| e.shifted(uri.start as usize))
            }
            StartLine::Response { .. } => Err(ParseError::new(
                ParseErrorKind::BadStartLine,
                self.start_offset(),
            )),
        }
    }

    /// The topmost Via value (the first element of the first Via header).
    ///
    /// Errors: [`ParseErrorKind::MissingHeader`] without Via, `BadHeader(Via)` when it is
    /// empty or malformed.
    pub fn top_via(&self) -> Result<Via<'a>, ParseError> {
        if let Some(v) = self.top_via.get() {
            return v;
        }
        let v = self.parse_top_via();
        self.top_via.set(Some(v));
        v
    }

    /// [`top_via`](Self::top_via) without the cache.
    fn parse_top_via(&self) -> Result<Via<'a>, ParseError> {
        const KIND: HeaderName = HeaderName::Via;
        let h = self.required_header(KIND)?;
        let at = h.value_span().start as usize;
        let (start, v) = elements(self.value(h))
            .next()
            .ok_or_else(|| ParseError::new(ParseErrorKind::BadHeader(KIND), at))?;
        let at = at + start;
        Via::parse(v).map_err(|e| e.shifted(at).in_header(KIND))
    }

    /// Every Via value, top first, across comma-separated values and repeated headers.
    pub fn vias(&self) -> impl Iterator<Item = Result<Via<'a>, ParseError>> + '_ {
        self.list_values(HeaderName::Via)
            .map(|(at, v)| Via::parse(v).map_err(|e| e.shifted(at).in_header(HeaderName::Via)))
    }

    /// The From header, parsed. Errors: [`ParseErrorKind::MissingHeader`] without one,
    /// `BadHeader(From)` when malformed or repeated (at the second one).
    pub fn from(&self) -> Result<NameAddr<'a>, ParseError> {
        self.single_name_addr(HeaderName::From)
    }

    /// The To header, parsed. Errors as [`from`](Self::from).
    pub fn to(&self) -> Result<NameAddr<'a>, ParseError> {
        self.single_name_addr(HeaderName::To)
    }

    /// Every Contact value in order. A `*` that is not the only Contact value of the message
    /// is a `BadHeader(Contact)` error.
    pub fn contacts(&self) -> impl Iterator<Item = Result<Contact<'a>, ParseError>> + '_ {
        const KIND: HeaderName = HeaderName::Contact;
        self.list_values(KIND).map(move |(at, v)| {
            let c = Contact::parse(v).map_err(|e| e.shifted(at).in_header(KIND))?;
            if c.is_star() && self.list_values(KIND).nth(1).is_some() {
                return Err(ParseError::new(ParseErrorKind::BadHeader(KIND), at));
            }
            Ok(c)
        })
    }

    /// Every Route value in order (each must be a `name-addr` with `<...>`).
    pub fn routes(&self) -> impl Iterator<Item = Result<NameAddr<'a>, ParseError>> + '_ {
        self.route_list(HeaderName::Route)
    }

    /// Every Record-Route value in order (each must be a `name-addr` with `<...>`).
    pub fn record_routes(&self) -> impl Iterator<Item = Result<NameAddr<'a>, ParseError>> + '_ {
        self.route_list(HeaderName::RecordRoute)
    }

    /// Every Authorization header's credentials, in order.
    pub fn authorizations(&self) -> impl Iterator<Item = Result<Credentials<'a>, ParseError>> + '_ {
        self.auth_list(HeaderName::Authorization, Credentials::parse)
    }

    /// Every Proxy-Authorization header's credentials, in order.
    pub fn proxy_authorizations(
        &self,
    ) -> impl Iterator<Item = Result<Credentials<'a>, ParseError>> + '_ {
        self.auth_list(HeaderName::ProxyAuthorization, Credentials::parse)
    }

    /// Every WWW-Authenticate header's challenge, in order.
    pub fn www_authenticates(
        &self,
    ) -> impl Iterator<Item = Result<Challenge<'a>, ParseError>> + '_ {
        self.auth_list(HeaderName::WwwAuthenticate, Challenge::parse)
    }

    /// Every Proxy-Authenticate header's challenge, in order.
    pub fn proxy_authenticates(
        &self,
    ) -> impl Iterator<Item = Result<Challenge<'a>, ParseError>> + '_ {
        self.auth_list(HeaderName::ProxyAuthenticate, Challenge::parse)
    }

    fn required_header(&self, kind: HeaderName) -> Result<&Header, ParseError> {
        self.first_header(kind)
            .ok_or_else(|| ParseError::new(ParseErrorKind::MissingHeader(kind), self.headers_end()))
    }

    fn single_name_addr(&self, kind: HeaderName) -> Result<NameAddr<'a>, ParseError> {
        let h = self.required_header(kind)?;
        if let Some(dup) = self.headers_of(kind).nth(1) {
            return Err(ParseError::new(
                ParseErrorKind::BadHeader(kind),
                dup.value_span().start as usize,
            ));
        }
        let at = h.value_span().start as usize;
        NameAddr::parse(self.value(h)).map_err(|e| e.shifted(at).in_header(kind))
    }

    fn route_list(
        &self,
        kind: HeaderName,
    ) -> impl Iterator<Item = Result<NameAddr<'a>, ParseError>> + '_ {
        self.list_values(kind).map(move |(at, v)| {
            let a = NameAddr::parse(v).map_err(|e| e.shifted(at).in_header(kind))?;
            if a.angle {
                Ok(a)
            } else {
                Err(ParseError::new(ParseErrorKind::BadHeader(kind), at))
            }
        })
    }

    /// The elements of list header `kind` as `Message::values` gives them, as (message offset,
    /// bytes), starting at the first header of `kind` and splitting only values with a comma.
    fn list_values(&self, kind: HeaderName) -> impl Iterator<Item = (usize, &'a [u8])> + '_ {
        debug_assert!(kind.is_list());
        let buf = self.buffer();
        self.headers_of(kind).flat_map(move |h| {
            let span = h.value_span();
            let base = span.start as usize;
            let v = buf.get(span.range()).unwrap_or_default();
            elements(v).map(move |(a, e)| (base + a, e))
        })
    }

    fn auth_list<T>(
        &self,
        kind: HeaderName,
        parse: fn(&'a [u8]) -> Result<T, ParseError>,
    ) -> impl Iterator<Item = Result<T, ParseError>> + '_
    where
        T: 'a,
    {
        self.headers_of(kind).map(move |h| {
            parse(self.value(h))
                .map_err(|e| e.shifted(h.value_span().start as usize).in_header(kind))
        })
    }
}

/// The elements of a list value as [`split_commas`] finds them, as (offset, bytes); a value
/// without a comma is one element (or none) without running the quote-aware split.
fn elements(v: &[u8]) -> Elements<'_> {
    if memchr(b',', v).is_some() {
        Elements::Split(v, split_commas(v))
    } else {
        let e = trim_lws(v);
        let at = e.as_ptr() as usize - v.as_ptr() as usize;
        Elements::One((!e.is_empty()).then_some((at, e)))
    }
}

enum Elements<'a> {
    One(Option<(usize, &'a [u8])>),
    Split(&'a [u8], CommaSplit<'a>),
}

impl<'a> Iterator for Elements<'a> {
    type Item = (usize, &'a [u8]);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Self::One(e) => e.take(),
            Self::Split(v, it) => {
                let (a, b) = it.next()?;
                Some((a, v.get(a..b).unwrap_or_default()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use holdline_base::Transport;

    use crate::uri::Host;
    use crate::{HeaderName, Limits, Message, ParseError, ParseErrorKind};

    fn parse(s: &[u8]) -> Message<'_> {
        match Message::parse(s, &Limits::DEFAULT) {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        }
    }

    /// The top Via is parsed once and the same value (or the same error) comes back after.
    #[test]
    fn top_via_is_cached_with_its_error() {
        let ok = parse(b"OPTIONS sip:a SIP/2.0\r\nVia: SIP/2.0/UDP h:5;branch=z9hG4bKx\r\n\r\n");
        let first = ok.top_via().expect("via");
        assert_eq!(ok.top_via().expect("via"), first);
        assert_eq!(first.port, Some(5));
        let bad = parse(b"OPTIONS sip:a SIP/2.0\r\nVia: nonsense\r\n\r\n");
        let e = bad.top_via().expect_err("bad Via");
        assert_eq!(bad.top_via().expect_err("bad Via"), e);
        assert_eq!(e, bad.parse_top_via().expect_err("uncached"));
    }

    const INVITE: &[u8] = b"INVITE sip:bob@biloxi.example.com;transport=tcp SIP/2.0\r\n\
Via: SIP/2.0/TCP client.atlanta.example.com:5060;branch=z9hG4bK74bf9, SIP/2.0/UDP p1.example.com;branch=z9hG4bK1\r\n\
v: SIP/2.0/UDP p2.example.com;branch=z9hG4bK2;received=192.0.2.7\r\n\
Max-Forwards: 70\r\n\
f: Alice <sip:alice@atlanta.example.com>;tag=9fxced76sl\r\n\
To: Bob <sip:bob@biloxi.example.com>\r\n\
Call-ID: 3848276298220188511@atlanta.example.com\r\n\
CSeq: 1 INVITE\r\n\
Contact: <sip:alice@client.atlanta.example.com;transport=tcp>;q=0.5, sip:a2@h;expires=10\r\n\
Route: <sip:p1.example.com;lr>, <sip:p2.example.com;lr>\r\n\
Record-Route: <sip:rr.example.com;lr>\r\n\
Proxy-Authorization: Digest username=\"alice\", realm=\"atlanta.example.com\", nonce=\"a,b\", response=\"x\"\r\n\
Authorization: Basic YWxpY2U6c2VjcmV0\r\n\
Content-Length: 0\r\n\r\n";

    #[test]
    fn request_accessors() {
        let m = parse(INVITE);
        let ruri = m.request_uri().expect("ruri");
        assert_eq!(ruri.user(), Some(&b"bob"[..]));
        assert_eq!(ruri.transport(), Some(Transport::Tcp));

        let top = m.top_via().expect("top via");
        assert_eq!(top.host, Host::Name(b"client.atlanta.example.com"));
        assert_eq!(top.branch(), Some(&b"z9hG4bK74bf9"[..]));
        let vias: Vec<_> = m.vias().map(|v| v.expect("via")).collect();
        assert_eq!(vias.len(), 3);
        assert_eq!(vias[1].host, Host::Name(b"p1.example.com"));
        assert_eq!(
            vias[2].received(),
            Some(Host::V4(std::net::Ipv4Addr::new(192, 0, 2, 7)))
        );

        let from = m.from().expect("from");
        assert_eq!(from.display_name, Some(&b"Alice"[..]));
        assert_eq!(from.tag(), Some(&b"9fxced76sl"[..]));
        assert_eq!(m.to().expect("to").tag(), None);

        let contacts: Vec<_> = m.contacts().map(|c| c.expect("contact")).collect();
        assert_eq!(contacts.len(), 2);
        assert_eq!(contacts[0].q(), Some(500));
        assert_eq!(contacts[1].expires(), Some(10));

        let routes: Vec<_> = m.routes().map(|r| r.expect("route")).collect();
        assert_eq!(routes.len(), 2);
        assert!(routes.iter().all(|r| r.uri.lr()));
        assert_eq!(routes[1].uri.host(), Some(Host::Name(b"p2.example.com")));
        assert_eq!(m.record_routes().count(), 1);

        let pa: Vec<_> = m.proxy_authorizations().map(|c| c.expect("pa")).collect();
        assert_eq!(pa.len(), 1);
        assert_eq!(pa[0].nonce(), Some(&b"a,b"[..]));
        let au: Vec<_> = m.authorizations().map(|c| c.expect("auth")).collect();
        assert_eq!(au[0].token68, Some(&b"YWxpY2U6c2VjcmV0"[..]));
        assert_eq!(m.www_authenticates().count(), 0);
        assert_eq!(m.proxy_authenticates().count(), 0);
    }

    #[test]
    fn errors_are_message_relative() {
        let msg = b"OPTIONS sip:h:99999 SIP/2.0\r\nVia: SIP/2.0/UDP h;branch\r\nTo: <sip:a@b\r\nRoute: sip:x\r\n\r\n";
        let m = parse(msg);
        assert_eq!(
            m.request_uri(),
            Err(ParseError::new(ParseErrorKind::BadUri, 14))
        );
        let via_err = m.top_via().expect_err("bad via");
        assert_eq!(via_err.kind, ParseErrorKind::BadHeader(HeaderName::Via));
        assert_eq!(&msg[via_err.offset as usize..][..6], b"branch");
        let to_err = m.to().expect_err("bad to");
        assert_eq!(to_err.kind, ParseErrorKind::BadHeader(HeaderName::To));
        assert_eq!(&msg[to_err.offset as usize..][..3], b"<si");
        let r = m
            .routes()
            .next()
            .expect("one")
            .expect_err("addr-spec route");
        assert_eq!(r.kind, ParseErrorKind::BadHeader(HeaderName::Route));
        assert_eq!(&msg[r.offset as usize..][..5], b"sip:x");
        let from_err = m.from().expect_err("missing");
        assert_eq!(
            from_err.kind,
            ParseErrorKind::MissingHeader(HeaderName::From)
        );
        assert_eq!(from_err.offset as usize, m.headers_end());
    }

    #[test]
    fn response_has_no_request_uri() {
        let m = parse(b"SIP/2.0 200 OK\r\nVia: \r\n\r\n");
        assert_eq!(
            m.request_uri(),
            Err(ParseError::new(ParseErrorKind::BadStartLine, 0))
        );
        assert_eq!(
            m.top_via().map_err(|e| e.kind),
            Err(ParseErrorKind::BadHeader(HeaderName::Via))
        );
        assert_eq!(m.vias().count(), 0);
    }

    #[test]
    fn star_contact_must_be_alone() {
        let m = parse(b"REGISTER sip:r SIP/2.0\r\nContact: *\r\n\r\n");
        assert_eq!(
            m.contacts()
                .map(|c| c.map(|c| c.is_star()))
                .collect::<Vec<_>>(),
            vec![Ok(true)]
        );
        let msg = b"REGISTER sip:r SIP/2.0\r\nContact: <sip:a@b>\r\nm: *\r\n\r\n";
        let m = parse(msg);
        let all: Vec<_> = m.contacts().collect();
        assert!(all[0].is_ok());
        assert_eq!(
            all[1],
            Err(ParseError::new(
                ParseErrorKind::BadHeader(HeaderName::Contact),
                47
            ))
        );
    }

    #[test]
    fn duplicate_from_is_rejected() {
        let msg = b"BYE sip:h SIP/2.0\r\nFrom: <sip:a@b>;tag=1\r\nFrom: <sip:c@d>;tag=2\r\n\r\n";
        let m = parse(msg);
        assert_eq!(
            m.from(),
            Err(ParseError::new(
                ParseErrorKind::BadHeader(HeaderName::From),
                48
            ))
        );
    }

    mod elements {
        use proptest::collection::vec;
        use proptest::prelude::*;
        use proptest::sample::select;

        use crate::scan::split_commas;

        proptest! {
            #[test]
            fn elements_match_split_commas(
                s in vec(select(&["a", ",", " ", "\r", "\n", "\"", "<", ">", "b;c"][..]), 0..12)
                    .prop_map(|v| v.concat()),
            ) {
                let v = s.as_bytes();
                let expected: Vec<_> = split_commas(v).map(|(a, b)| (a, &v[a..b])).collect();
                let got: Vec<_> = super::super::elements(v).collect();
                prop_assert_eq!(got, expected);
            }
        }
    }
}
