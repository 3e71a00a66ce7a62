//! Whole-message syntax tests in the spirit of RFC 4475 (written for holdline, not copied):
//! odd but valid messages must parse to the right values, broken ones must fail with the
//! right error, and nothing may panic. Only the public API is used.

use std::borrow::Cow;
use std::net::{Ipv4Addr, Ipv6Addr};

use holdline_base::Transport;
use holdline_sip::{
    Challenge, Contact, Credentials, HeaderName, Host, Limits, Message, Method, NameAddr,
    ParseError, ParseErrorKind, Scheme, StartLine, Uri, Via, percent_decode,
};
use proptest::prelude::*;

/// Joins lines with CRLF; the caller ends the header section with an empty line.
fn sip(lines: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in lines {
        out.extend_from_slice(l.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn parse(buf: &[u8]) -> Message<'_> {
    match Message::parse(buf, &Limits::DEFAULT) {
        Ok(m) => m,
        Err(e) => panic!("message did not parse: {e:?}"),
    }
}

fn parse_err(buf: &[u8]) -> ParseError {
    match Message::parse(buf, &Limits::DEFAULT) {
        Ok(m) => panic!("message parsed: {:?}", m.start_line()),
        Err(e) => e,
    }
}

fn offset_of(buf: &[u8], needle: &[u8]) -> u32 {
    let i = buf
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("needle present");
    u32::try_from(i).expect("small")
}

#[test]
fn folded_lines_and_odd_spacing() {
    let buf = sip(&[
        "INVITE sip:vivekg@chair-dnrc.example.com;unknownparam SIP/2.0",
        "TO :",
        " sip:vivekg@chair-dnrc.example.com ;   tag    = 1918181833n",
        "from   : \"J Rosenberg \\\\\\\"\"       <sip:jdrosen@example.com>",
        "  ;",
        "  tag = 98asjd8",
        "MaX-fOrWaRdS: 0068",
        "Call-ID: wsinv.ndaksdj@192.0.2.1",
        "Content-Length   : 0",
        "cseq: 0009",
        "  INVITE",
        "Via  : SIP  /   2.0",
        " /UDP",
        "    192.0.2.2;branch=390skdjuw",
        "s :",
        "NewFangledHeader:   newfangled value",
        " continued newfangled value",
        "UnknownHeaderWithUnusualValue: ;;,,;;,;",
        "Contact:",
        " <sip:user@host.example.com;lr>;Q=0.1",
        "",
    ]);
    let m = parse(&buf);
    assert_eq!(m.method(), Some(Method::Invite));
    let ruri = m.request_uri().expect("ruri");
    assert_eq!(ruri.host(), Some(Host::Name(b"chair-dnrc.example.com")));
    assert_eq!(ruri.param("unknownparam"), Some(None));

    let to = m.to().expect("to");
    assert!(!to.angle);
    assert_eq!(to.uri.user(), Some(&b"vivekg"[..]));
    assert_eq!(to.tag(), Some(&b"1918181833n"[..]));

    let from = m.from().expect("from");
    assert_eq!(from.display_name, Some(&br#""J Rosenberg \\\"""#[..]));
    assert_eq!(
        from.display_name_unquoted().as_deref(),
        Some(&br#"J Rosenberg \""#[..])
    );
    assert_eq!(from.uri.user(), Some(&b"jdrosen"[..]));
    assert_eq!(from.tag(), Some(&b"98asjd8"[..]));

    assert_eq!(m.max_forwards(), Ok(Some(68)));
    let cseq = m.cseq().expect("cseq");
    assert_eq!((cseq.seq, cseq.method), (9, Method::Invite));

    let via = m.top_via().expect("via");
    assert_eq!(via.protocol_name, b"SIP");
    assert_eq!(via.protocol_version, b"2.0");
    assert_eq!(via.transport, Some(Transport::Udp));
    assert_eq!(via.host, Host::V4(Ipv4Addr::new(192, 0, 2, 2)));
    assert_eq!(via.branch(), Some(&b"390skdjuw"[..]));
    assert!(!via.has_magic_cookie());

    let contacts: Vec<Contact<'_>> = m.contacts().map(|c| c.expect("contact")).collect();
    assert_eq!(contacts.len(), 1);
    assert_eq!(contacts[0].q(), Some(100));
    assert!(contacts[0].addr().is_some_and(|a| a.uri.lr()));

    let subject = m.first_header(HeaderName::Subject).expect("subject");
    assert!(m.value(subject).is_empty());
    let nf = m
        .headers_named(b"newfangledheader")
        .next()
        .expect("unknown header");
    assert_eq!(
        m.value(nf),
        b"newfangled value\r\n continued newfangled value"
    );
    assert_eq!(m.content_length(), Some(0));
    assert!(m.body().is_empty());
    assert_eq!(m.check_mandatory(), Ok(()));
}

#[test]
fn escaped_uris_everywhere() {
    let buf = sip(&[
        "INVITE sip:sip%3Auser%40example.com@example.net;tel=%22%0D%0A%22;%6C%72?Subject=hi%20there&Priority=urgent SIP/2.0",
        "To: \"%61lice\" <sip:%61lice:p%40ss@atlanta.example.com>",
        "From: <sip:I%20have%20spaces@example.net>;tag=938",
        "Via: SIP/2.0/UDP 192.0.2.9;branch=z9hG4bKkdjuw",
        "Call-ID: esc01.239409asdfakjkn23onasd0-3234",
        "CSeq: 1 INVITE",
        "Max-Forwards: 70",
        "Content-Length: 0",
        "",
    ]);
    let m = parse(&buf);
    let ruri = m.request_uri().expect("ruri");
    assert_eq!(ruri.scheme(), Scheme::Sip);
    assert_eq!(ruri.user(), Some(&b"sip%3Auser%40example.com"[..]));
    assert_eq!(
        ruri.user_unescaped().as_deref(),
        Some(&b"sip:user@example.com"[..])
    );
    assert_eq!(ruri.host(), Some(Host::Name(b"example.net")));
    assert_eq!(ruri.param("tel"), Some(Some(&b"%22%0D%0A%22"[..])));
    assert_eq!(
        percent_decode(b"%22%0D%0A%22").map(Cow::into_owned),
        Ok(b"\"\r\n\"".to_vec())
    );
    // An escaped parameter name is not the `lr` flag it decodes to.
    assert!(!ruri.lr());
    assert_eq!(ruri.param("%6C%72"), Some(None));
    let pairs: Vec<_> = ruri.header_pairs().collect();
    assert_eq!(
        pairs,
        vec![
            (&b"Subject"[..], &b"hi%20there"[..]),
            (&b"Priority"[..], &b"urgent"[..])
        ]
    );

    let to = m.to().expect("to");
    assert_eq!(to.display_name_unquoted().as_deref(), Some(&b"%61lice"[..]));
    assert_eq!(to.uri.user_unescaped().as_deref(), Some(&b"alice"[..]));
    assert_eq!(to.uri.password_unescaped().as_deref(), Some(&b"p@ss"[..]));

    let from = m.from().expect("from");
    assert_eq!(
        from.uri.user_unescaped().as_deref(),
        Some(&b"I have spaces"[..])
    );
    assert_eq!(from.tag(), Some(&b"938"[..]));
}

#[test]
fn bad_escapes_and_ports_fail_in_accessors_only() {
    let buf = sip(&[
        "OPTIONS sip:user%4@example.com:70000 SIP/2.0",
        "To: <sip:bob@[2001:db8::1>",
        "From: <sip:alice@example.com>;tag=1",
        "Contact: <sip:a@b>;q=1.5",
        "Via: SIP/2.0/UDP h;branch=z9hG4bK1",
        "",
    ]);
    let m = parse(&buf);
    assert_eq!(
        m.request_uri(),
        Err(ParseError::new(
            ParseErrorKind::BadUri,
            offset_of(&buf, b"%4@") as usize
        ))
    );
    let to = m.to().expect_err("unterminated [");
    assert_eq!(to.kind, ParseErrorKind::BadHeader(HeaderName::To));
    assert_eq!(to.offset, offset_of(&buf, b"bob@[") + 4);
    let c = m
        .contacts()
        .next()
        .expect("one contact")
        .expect_err("q > 1");
    assert_eq!(
        c,
        ParseError::new(
            ParseErrorKind::BadHeader(HeaderName::Contact),
            offset_of(&buf, b"q=1.5") as usize
        )
    );
    assert!(m.from().is_ok());
    assert!(m.top_via().is_ok());
}

#[test]
fn spaces_inside_uris_are_rejected() {
    // A space in the Request-URI splits the start line into too many parts.
    let e = parse_err(b"INVITE sip:a b@example.com SIP/2.0\r\n\r\n");
    assert_eq!(e.kind, ParseErrorKind::BadVersion);
    // Angle brackets in the Request-URI are not a URI.
    let e = parse_err(b"INVITE <sip:bob@example.com> SIP/2.0\r\n\r\n");
    assert_eq!(e, ParseError::new(ParseErrorKind::BadUri, 7));
    // Spaces inside <...> in an address.
    let buf = sip(&[
        "OPTIONS sip:h SIP/2.0",
        "To: \"Watson\" < sip:w@example.org >",
        "",
    ]);
    let m = parse(&buf);
    let e = m.to().expect_err("spaces in addr-spec");
    assert_eq!(e.kind, ParseErrorKind::BadHeader(HeaderName::To));
    assert_eq!(e.offset, offset_of(&buf, b" sip:w"));
}

#[test]
fn compact_forms_and_multiple_vias() {
    let buf = sip(&[
        "SIP/2.0 180 Ringing",
        "v: SIP/2.0/TCP a.example.com;branch=z9hG4bKa, SIP/2.0/UDP b.example.com:5070;branch=z9hG4bKb;rport=5071;received=192.0.2.5",
        "Via: SIP/2.0/TLS c.example.com;branch=z9hG4bKc,",
        "  SIP/2.0/SCTP d.example.com;branch=z9hG4bKd",
        "V: SIP/2.0/WS e.invalid;branch=z9hG4bKe",
        "i: compact@example.com",
        "f: <sip:a@example.com>;tag=f1",
        "t: <sip:b@example.com>;tag=t1",
        "m: <sip:b@192.0.2.44>",
        "CSeq: 4 INVITE",
        "l: 0",
        "",
    ]);
    let m = parse(&buf);
    assert_eq!(m.status(), Some(180));
    assert_eq!(m.reason(), Some(&b"Ringing"[..]));
    let top = m.top_via().expect("top");
    assert_eq!(top.host, Host::Name(b"a.example.com"));
    assert_eq!(top.transport, Some(Transport::Tcp));
    let vias: Vec<Via<'_>> = m.vias().map(|v| v.expect("via")).collect();
    let hosts: Vec<_> = vias.iter().map(|v| v.host).collect();
    assert_eq!(
        hosts,
        vec![
            Host::Name(b"a.example.com"),
            Host::Name(b"b.example.com"),
            Host::Name(b"c.example.com"),
            Host::Name(b"d.example.com"),
            Host::Name(b"e.invalid"),
        ]
    );
    assert_eq!(vias[1].port, Some(5070));
    assert_eq!(vias[1].rport(), Some(Some(5071)));
    assert_eq!(
        vias[1].received(),
        Some(Host::V4(Ipv4Addr::new(192, 0, 2, 5)))
    );
    assert_eq!(vias[2].transport, Some(Transport::Tls));
    assert_eq!(vias[3].transport, Some(Transport::Sctp));
    assert_eq!(vias[4].transport, None);
    assert_eq!(vias[4].transport_raw, b"WS");
    assert!(vias.iter().all(Via::has_magic_cookie));
    assert_eq!(m.call_id(), Ok(&b"compact@example.com"[..]));
    assert_eq!(m.from().expect("f").tag(), Some(&b"f1"[..]));
    assert_eq!(m.to().expect("t").tag(), Some(&b"t1"[..]));
    let c = m.contacts().next().expect("m").expect("contact");
    assert_eq!(
        c.addr().and_then(|a| a.uri.host()),
        Some(Host::V4(Ipv4Addr::new(192, 0, 2, 44)))
    );
    assert_eq!(m.content_length(), Some(0));
    assert_eq!(m.check_mandatory(), Ok(()));
}

#[test]
fn duplicated_headers() {
    let buf = sip(&[
        "BYE sip:h.example.com SIP/2.0",
        "Via: SIP/2.0/UDP a;branch=z9hG4bK1",
        "To: <sip:b@example.com>;tag=1",
        "From: <sip:a@example.com>;tag=2",
        "To: <sip:c@example.com>;tag=3",
        "Record-Route: <sip:p1.example.com;lr>",
        "Record-Route: <sip:p2.example.com;lr>, <sip:p3.example.com;lr>",
        "Content-Length: 0",
        "Content-Length: 0",
        "",
    ]);
    let m = parse(&buf);
    let e = m.to().expect_err("two To headers");
    assert_eq!(
        e,
        ParseError::new(
            ParseErrorKind::BadHeader(HeaderName::To),
            offset_of(&buf, b"<sip:c@") as usize
        )
    );
    assert_eq!(m.from().map(|f| f.tag()), Ok(Some(&b"2"[..])));
    let rr: Vec<_> = m
        .record_routes()
        .map(|r| r.expect("rr").uri.host().and_then(|h| h.name()))
        .collect();
    assert_eq!(
        rr,
        vec![
            Some(&b"p1.example.com"[..]),
            Some(&b"p2.example.com"[..]),
            Some(&b"p3.example.com"[..])
        ]
    );
    assert_eq!(m.content_length(), Some(0));

    let conflicting = sip(&["BYE sip:h SIP/2.0", "Content-Length: 0", "l: 2", "", "ab"]);
    assert_eq!(
        parse_err(&conflicting).kind,
        ParseErrorKind::BadContentLength
    );
}

#[test]
fn very_long_values() {
    let long_param = "a".repeat(5000);
    let long_header = format!("X-Long: {}", "x".repeat(5000));
    let via = format!("Via: SIP/2.0/UDP host.example.com;branch=z9hG4bK{long_param}");
    let to = format!(
        "To: \"{}\" <sip:{}@example.com>",
        "n".repeat(3000),
        "u".repeat(3000)
    );
    let buf = sip(&["MESSAGE sip:h SIP/2.0", &via, &long_header, &to, ""]);
    let m = parse(&buf);
    assert_eq!(
        m.top_via().expect("via").branch().map(<[u8]>::len),
        Some(5007)
    );
    let x = m.headers_named(b"x-long").next().expect("x-long");
    assert_eq!(m.value(x).len(), 5000);
    let to = m.to().expect("to");
    assert_eq!(to.display_name.map(<[u8]>::len), Some(3002));
    assert_eq!(to.uri.user().map(<[u8]>::len), Some(3000));
}

#[test]
fn unknown_schemes_methods_and_headers() {
    let buf = sip(&[
        "NEWMETHOD urn:service:sos SIP/2.0",
        "To: <http://www.example.com/contact?x=1>",
        "From: <mailto:a@example.com>;tag=z",
        "Contact: <tel:+1-201-555-0123;phone-context=example.com>;expires=99999999999",
        "Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKu",
        "CSeq: 1 NEWMETHOD",
        "Call-ID: x",
        "Max-Forwards: 1",
        "X-Extension_1: ~!%*_+`'",
        "",
    ]);
    let m = parse(&buf);
    assert_eq!(m.method(), Some(Method::Other(b"NEWMETHOD")));
    let ruri = m.request_uri().expect("urn");
    assert_eq!(ruri.scheme(), Scheme::Other(b"urn"));
    assert_eq!(ruri.opaque(), Some(&b"service:sos"[..]));
    let to = m.to().expect("http to");
    assert_eq!(to.uri.scheme(), Scheme::Other(b"http"));
    assert_eq!(to.uri.opaque(), Some(&b"//www.example.com/contact?x=1"[..]));
    assert_eq!(
        m.from().expect("mailto").uri.scheme(),
        Scheme::Other(b"mailto")
    );
    let c = m.contacts().next().expect("one").expect("tel contact");
    assert_eq!(c.expires(), Some(u32::MAX));
    let uri = c.addr().map(|a| a.uri).expect("addr");
    assert_eq!(uri.scheme(), Scheme::Tel);
    assert_eq!(uri.number(), Some(&b"+1-201-555-0123"[..]));
    assert_eq!(uri.param("phone-context"), Some(Some(&b"example.com"[..])));
    let x = m.headers_named(b"X-EXTENSION_1").next().expect("ext");
    assert_eq!(x.kind, HeaderName::Other);
    assert_eq!(m.value(x), b"~!%*_+`'");
    assert_eq!(m.check_mandatory(), Ok(()));
}

#[test]
fn nul_byte_is_rejected() {
    let mut buf = sip(&["OPTIONS sip:h SIP/2.0", "Subject: a", ""]);
    let at = offset_of(&buf, b"a\r\n") as usize;
    buf[at] = 0;
    assert_eq!(
        parse_err(&buf),
        ParseError::new(ParseErrorKind::NulByte, at)
    );
}

#[test]
fn non_utf8_bytes_in_values() {
    let mut buf = b"MESSAGE sip:h SIP/2.0\r\nSubject: caf\xe9 \xff\xfe\r\nFrom: \"J\xf6rg \xc3\x28\" <sip:j@example.com>;tag=1\r\n".to_vec();
    buf.extend_from_slice(b"To: \xe4\xb8\xad <sip:k@example.com>\r\n\r\n");
    let m = parse(&buf);
    assert_eq!(
        m.first_value(HeaderName::Subject),
        Some(&b"caf\xe9 \xff\xfe"[..])
    );
    let from = m.from().expect("from");
    assert_eq!(
        from.display_name_unquoted().as_deref(),
        Some(&b"J\xf6rg \xc3\x28"[..])
    );
    assert_eq!(from.tag(), Some(&b"1"[..]));
    let to = m.to().expect("to");
    assert_eq!(to.display_name, Some(&b"\xe4\xb8\xad"[..]));
}

#[test]
fn content_length_errors() {
    let neg = sip(&["OPTIONS sip:h SIP/2.0", "Content-Length: -1", ""]);
    assert_eq!(
        parse_err(&neg),
        ParseError::new(
            ParseErrorKind::BadContentLength,
            offset_of(&neg, b"-1") as usize
        )
    );
    let huge = sip(&[
        "OPTIONS sip:h SIP/2.0",
        "Content-Length: 99999999999999999999",
        "",
    ]);
    assert_eq!(parse_err(&huge).kind, ParseErrorKind::BadContentLength);
    let over = sip(&["OPTIONS sip:h SIP/2.0", "Content-Length: 4294967296", ""]);
    assert_eq!(parse_err(&over).kind, ParseErrorKind::BadContentLength);
    let text = sip(&["OPTIONS sip:h SIP/2.0", "Content-Length: ten", ""]);
    assert_eq!(parse_err(&text).kind, ParseErrorKind::BadContentLength);

    let mut short = sip(&["MESSAGE sip:h SIP/2.0", "Content-Length: 5000", ""]);
    short.extend_from_slice(b"only a few bytes");
    assert_eq!(
        parse_err(&short),
        ParseError::new(
            ParseErrorKind::BodyTruncated,
            offset_of(&short, b"5000") as usize
        )
    );

    let mut extra = sip(&["MESSAGE sip:h SIP/2.0", "Content-Length: 4", ""]);
    extra.extend_from_slice(b"bodyIGNORED");
    let m = parse(&extra);
    assert_eq!(m.body(), b"body");
    let mut none = sip(&["MESSAGE sip:h SIP/2.0", ""]);
    none.extend_from_slice(b"all of it");
    assert_eq!(parse(&none).body(), b"all of it");
}

#[test]
fn star_contact() {
    let buf = sip(&[
        "REGISTER sip:registrar.example.com SIP/2.0",
        "Contact: *",
        "Expires: 0",
        "",
    ]);
    let m = parse(&buf);
    let all: Vec<_> = m.contacts().collect();
    assert_eq!(all, vec![Ok(Contact::Star)]);
    assert_eq!(m.expires(), Ok(Some(0)));

    let buf = sip(&[
        "REGISTER sip:r SIP/2.0",
        "Contact: *, <sip:a@example.com>",
        "",
    ]);
    let m = parse(&buf);
    let all: Vec<_> = m.contacts().collect();
    assert_eq!(
        all[0],
        Err(ParseError::new(
            ParseErrorKind::BadHeader(HeaderName::Contact),
            offset_of(&buf, b"*") as usize
        ))
    );
    assert!(all[1].is_ok());
}

#[test]
fn digest_with_quoted_commas() {
    let buf = sip(&[
        "REGISTER sip:example.com SIP/2.0",
        "Authorization: Digest username=\"bob, jr\",realm = \"example.com\" ,",
        "  nonce=\"ea9c8e88df84f1cec4341ae6cbe5a359\", opaque=\"\", uri=\"sip:example.com;lr,x\",",
        "  response=\"dfe56131d1958046689d83306477ecc\", qop=auth, nc=0000000a, cnonce=\"c,n\", algorithm=MD5",
        "Proxy-Authorization: Basic Ym9iOnNlY3JldA==",
        "Proxy-Authorization: Digest username=\"a\\\"b\"",
        "",
    ]);
    let m = parse(&buf);
    let creds: Vec<Credentials<'_>> = m.authorizations().map(|c| c.expect("auth")).collect();
    assert_eq!(creds.len(), 1);
    let c = &creds[0];
    assert!(c.is_digest());
    assert_eq!(c.username(), Some(&b"bob, jr"[..]));
    assert_eq!(c.realm(), Some(&b"example.com"[..]));
    assert_eq!(c.nonce(), Some(&b"ea9c8e88df84f1cec4341ae6cbe5a359"[..]));
    assert_eq!(c.opaque(), Some(&b""[..]));
    assert_eq!(c.uri(), Some(&b"sip:example.com;lr,x"[..]));
    assert_eq!(c.response(), Some(&b"dfe56131d1958046689d83306477ecc"[..]));
    assert_eq!(c.qop(), Some(&b"auth"[..]));
    assert_eq!(c.nc(), Some(&b"0000000a"[..]));
    assert_eq!(c.cnonce(), Some(&b"c,n"[..]));
    assert_eq!(c.algorithm(), Some(&b"MD5"[..]));
    assert_eq!(c.params.iter().count(), 10);

    let pa: Vec<_> = m.proxy_authorizations().map(|c| c.expect("pa")).collect();
    assert_eq!(pa[0].scheme, b"Basic");
    assert_eq!(pa[0].token68, Some(&b"Ym9iOnNlY3JldA=="[..]));
    assert_eq!(pa[1].username(), Some(&br#"a\"b"#[..]));

    let bad = sip(&[
        "REGISTER sip:example.com SIP/2.0",
        "Authorization: Digest username=\"open",
        "",
    ]);
    let m = parse(&bad);
    let e = m
        .authorizations()
        .next()
        .expect("one")
        .expect_err("unterminated");
    assert_eq!(e.kind, ParseErrorKind::BadHeader(HeaderName::Authorization));
    assert_eq!(e.offset, offset_of(&bad, b"\"open"));
}

#[test]
fn challenges_in_a_401() {
    let buf = sip(&[
        "SIP/2.0 401 Unauthorized",
        "WWW-Authenticate: Digest realm=\"atlanta.example.com\", qop=\"auth,auth-int\",",
        " nonce=\"84a4cc6f3082121f32b42a2187831a9e\", stale=TRUE, algorithm=SHA-256",
        "Proxy-Authenticate: Digest realm=\"p\", nonce=\"n\"",
        "",
    ]);
    let m = parse(&buf);
    let ch: Vec<Challenge<'_>> = m.www_authenticates().map(|c| c.expect("ch")).collect();
    assert_eq!(ch[0].realm(), Some(&b"atlanta.example.com"[..]));
    assert_eq!(ch[0].qop(), Some(&b"auth,auth-int"[..]));
    assert!(ch[0].stale());
    assert_eq!(ch[0].algorithm(), Some(&b"SHA-256"[..]));
    let pch: Vec<_> = m.proxy_authenticates().map(|c| c.expect("pch")).collect();
    assert_eq!(pch[0].nonce(), Some(&b"n"[..]));
    assert!(!pch[0].stale());
}

#[test]
fn versions() {
    let e = parse_err(b"INVITE sip:h SIP/3.0\r\n\r\n");
    assert_eq!(e, ParseError::new(ParseErrorKind::UnsupportedVersion, 13));
    let e = parse_err(b"SIP/3.0 200 OK\r\n\r\n");
    assert_eq!(e, ParseError::new(ParseErrorKind::UnsupportedVersion, 0));
    assert_eq!(
        parse_err(b"INVITE sip:h SIP/2\r\n\r\n").kind,
        ParseErrorKind::BadVersion
    );
    assert_eq!(
        parse_err(b"INVITE sip:h HTTP/1.1\r\n\r\n").kind,
        ParseErrorKind::BadVersion
    );
    let m = parse(b"INVITE sip:h sip/2.0\r\n\r\n");
    assert_eq!(m.method(), Some(Method::Invite));
}

#[test]
fn status_lines() {
    let m = parse(b"SIP/2.0 200\r\n\r\n");
    assert_eq!((m.status(), m.reason()), (Some(200), Some(&b""[..])));
    let m = parse(b"SIP/2.0 183 Session  Progress \xe2\x9c\x93\r\n\r\n");
    assert_eq!(m.reason(), Some(&b"Session  Progress \xe2\x9c\x93"[..]));
    let m = parse(b"\r\n\r\nSIP/2.0 699 \r\n\r\n");
    assert_eq!(m.status(), Some(699));
    assert_eq!(m.start_offset(), 4);
    assert!(matches!(
        m.start_line(),
        StartLine::Response { code: 699, .. }
    ));
    assert!(m.request_uri().is_err());
    for bad in [
        &b"SIP/2.0 099 Low\r\n\r\n"[..],
        b"SIP/2.0 700 High\r\n\r\n",
        b"SIP/2.0 20 OK\r\n\r\n",
        b"SIP/2.0 2000 OK\r\n\r\n",
        b"SIP/2.0 2x0 OK\r\n\r\n",
    ] {
        assert_eq!(
            parse_err(bad).kind,
            ParseErrorKind::BadStatusCode,
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    assert_eq!(parse_err(b"\r\n\r\n").kind, ParseErrorKind::Empty);
}

#[test]
fn ipv6_everywhere() {
    let buf = sip(&[
        "REGISTER sip:[2001:db8::10]:5070;maddr=[2001:db8::11] SIP/2.0",
        "Via: SIP/2.0/UDP [2001:db8::9] : 5060 ;received=2001:db8::9;branch=z9hG4bKv6",
        "To: <sip:user@[2001:db8::10]>",
        "",
    ]);
    let m = parse(&buf);
    let r = m.request_uri().expect("ruri");
    let v6 = |s: &str| s.parse::<Ipv6Addr>().expect("v6");
    assert_eq!(r.host(), Some(Host::V6(v6("2001:db8::10"))));
    assert_eq!(r.port(), Some(5070));
    assert_eq!(r.maddr(), Some(Host::V6(v6("2001:db8::11"))));
    let via = m.top_via().expect("via");
    assert_eq!(via.sent_by().host, Host::V6(v6("2001:db8::9")));
    assert_eq!(via.port, Some(5060));
    assert_eq!(via.received(), Some(Host::V6(v6("2001:db8::9"))));
    assert_eq!(
        m.to().expect("to").uri.host_bytes(),
        Some(&b"[2001:db8::10]"[..])
    );
}

#[test]
fn limits_are_enforced() {
    let many = sip(&[
        "OPTIONS sip:h SIP/2.0",
        "A: 1",
        "B: 2",
        "C: 3",
        "D: 4",
        "E: 5",
        "F: 6",
        "",
    ]);
    let mut limits = Limits::DEFAULT;
    limits.max_headers(5);
    let e = Message::parse(&many, &limits).expect_err("too many headers");
    assert_eq!(
        e,
        ParseError::new(
            ParseErrorKind::TooManyHeaders,
            offset_of(&many, b"F: 6") as usize
        )
    );
    limits.max_headers(6);
    assert_eq!(
        Message::parse(&many, &limits).map(|m| m.headers().len()),
        Ok(6)
    );

    let line = format!("Subject: {}", "s".repeat(200));
    let long = sip(&["OPTIONS sip:h SIP/2.0", &line, ""]);
    let mut limits = Limits::DEFAULT;
    limits.max_header_line(100).max_headers(10);
    let e = Message::parse(&long, &limits).expect_err("line too long");
    assert_eq!(
        e,
        ParseError::new(
            ParseErrorKind::HeaderLineTooLong,
            offset_of(&long, b"Subject") as usize
        )
    );

    // Folded continuation lines count towards the same field.
    let folded = sip(&[
        "OPTIONS sip:h SIP/2.0",
        "Subject: 0123456789",
        &format!(" {}", "9".repeat(95)),
        "",
    ]);
    let e = Message::parse(&folded, &limits).expect_err("folded too long");
    assert_eq!(e.kind, ParseErrorKind::HeaderLineTooLong);

    let mut limits = Limits::DEFAULT;
    limits.max_message_size(30);
    let e = Message::parse(&long, &limits).expect_err("too large");
    assert_eq!(e.kind, ParseErrorKind::TooLarge);
    assert!(Message::parse(&long, &Limits::DEFAULT).is_ok());
}

#[test]
fn standalone_parsers_agree_with_accessors() {
    let na = NameAddr::parse(b"Bob <sips:bob@example.com>;tag=a48s").expect("name-addr");
    assert_eq!(na.uri.scheme(), Scheme::Sips);
    assert_eq!(na.tag(), Some(&b"a48s"[..]));
    let u = Uri::parse(b"sip:carol@chicago.example.com;transport=udp?Subject=x").expect("uri");
    assert_eq!(u.transport(), Some(Transport::Udp));
    assert_eq!(u.headers(), Some(&b"Subject=x"[..]));
    assert_eq!(
        Uri::parse(b"sip:h:70000").map_err(|e| e.kind),
        Err(ParseErrorKind::BadUri)
    );
}

fn exercise(m: &Message<'_>) {
    let _ = m.request_uri();
    let _ = m.top_via();
    let _ = m.from();
    let _ = m.to();
    m.vias().for_each(drop);
    m.contacts().for_each(drop);
    m.routes().for_each(drop);
    m.record_routes().for_each(drop);
    m.authorizations().for_each(drop);
    m.proxy_authorizations().for_each(drop);
    m.www_authenticates().for_each(drop);
    m.proxy_authenticates().for_each(drop);
    let _ = m.check_mandatory();
}

const SEED: &[u8] = b"INVITE sip:a%20b:pw@[::1]:5060;lr;maddr=h?x=y SIP/2.0\r\n\
Via: SIP/2.0/UDP h:1;branch=z9hG4bK1;rport;received=1.2.3.4, SIP/2.0/TCP [::2]\r\n\
From: \"A\\\"B\" <sip:a@b>;tag=1\r\nTo: c <tel:+1;x=y>\r\nContact: *, <sip:x>;q=0.5;expires=9\r\n\
Route: <sip:r;lr>\r\nAuthorization: Digest a=\"b,c\", d=e\r\nWWW-Authenticate: Basic x==\r\n\
Content-Length: 2\r\n\r\nhi";

proptest! {
    #[test]
    fn typed_parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = Uri::parse(&bytes);
        let _ = NameAddr::parse(&bytes);
        let _ = Via::parse(&bytes);
        let _ = Contact::parse(&bytes);
        let _ = Credentials::parse(&bytes);
        let _ = Challenge::parse(&bytes);
        let _ = percent_decode(&bytes);
        let _ = Host::parse(&bytes);
        if let Ok(m) = Message::parse(&bytes, &Limits::DEFAULT) {
            exercise(&m);
        }
    }

    #[test]
    fn mutated_messages_never_panic(
        edits in proptest::collection::vec((0..SEED.len(), any::<u8>()), 1..8),
        cut in 0..SEED.len(),
    ) {
        let mut buf = SEED.to_vec();
        for (i, b) in edits {
            buf[i] = b;
        }
        for candidate in [&buf[..], &buf[..cut], &buf[cut..]] {
            if let Ok(m) = Message::parse(candidate, &Limits::DEFAULT) {
                exercise(&m);
            }
        }
    }
}

#[test]
fn seed_message_is_valid() {
    let m = parse(SEED);
    let r = m.request_uri().expect("ruri");
    assert_eq!(r.user_unescaped().as_deref(), Some(&b"a b"[..]));
    assert_eq!(r.maddr(), Some(Host::Name(b"h")));
    assert_eq!(m.vias().filter(Result::is_ok).count(), 2);
    assert_eq!(
        m.from().expect("from").display_name_unquoted().as_deref(),
        Some(&b"A\"B"[..])
    );
    assert_eq!(m.to().expect("to").uri.number(), Some(&b"+1"[..]));
    let contacts: Vec<_> = m.contacts().collect();
    assert!(contacts[0].is_err());
    assert_eq!(contacts[1].as_ref().map(Contact::q), Ok(Some(500)));
    assert_eq!(m.routes().filter_map(Result::ok).count(), 1);
    assert_eq!(
        m.authorizations()
            .filter_map(Result::ok)
            .next()
            .and_then(|c| c.param("a")),
        Some(&b"b,c"[..])
    );
    assert_eq!(
        m.www_authenticates()
            .filter_map(Result::ok)
            .next()
            .and_then(|c| c.token68),
        Some(&b"x=="[..])
    );
    assert_eq!(m.body(), b"hi");
}
