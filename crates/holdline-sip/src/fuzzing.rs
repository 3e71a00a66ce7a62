//! Entry points for the fuzz targets in `fuzz/` (and for tests that replay their corpora).
//!
//! Each function takes arbitrary bytes, drives a parser with them, and panics only if an
//! invariant of this crate is broken; parse errors are expected and ignored.

use holdline_base::Transport;

use crate::{
    Challenge, Credentials, DigestChallenge, Editor, Frame, Framer, HeaderName, Limits, Message,
    OcOffer, OcReport, write_digest_challenge,
};

/// Parses `data` as a datagram and, when it parses, calls every accessor.
pub fn parse_message(data: &[u8]) {
    let Ok(msg) = Message::parse(data, &Limits::DEFAULT) else {
        return;
    };
    exercise(&msg);
}

fn exercise(msg: &Message<'_>) {
    let body = msg.body();
    assert!(body.len() <= msg.buffer().len());
    if let Some(cl) = msg.content_length() {
        assert_eq!(cl as usize, body.len());
    }
    for h in msg.headers() {
        assert!(h.name_span().end <= h.value_span().start);
        assert!(h.value_span().start <= h.value_span().end);
        assert!(h.value_span().end <= h.line_span().end);
        let _ = msg.name(h);
        let _ = msg.value(h);
    }
    for kind in HeaderName::ALL {
        for v in msg.values(*kind) {
            assert_eq!(msg.slice(v.span), v.bytes);
        }
        let _ = msg.first_value_ref(*kind);
    }
    let _ = msg.call_id();
    let _ = msg.cseq();
    let _ = msg.max_forwards();
    let _ = msg.expires();
    let _ = msg.min_expires();
    let _ = msg.check_mandatory();
    let _ = msg.request_uri_bytes();
    let _ = msg.reason();
    typed(msg);
    edit(msg);
}

/// The proxy's edits; whatever is emitted must parse again, with the edits visible.
fn edit(msg: &Message<'_>) {
    let mut ed = Editor::new(msg);
    let mut pushed = false;
    if msg.is_request() {
        pushed = ed
            .push_via(Transport::Udp, b"192.0.2.1:5060", b"z9hG4bKfuzz", true)
            .is_ok();
        let _ = ed.decrement_max_forwards();
        let _ = ed.add_record_route(b"<sip:192.0.2.1;lr>");
        let _ = ed.pop_route();
        let _ = ed.set_request_uri(b"sip:bob@192.0.2.9");
    } else {
        let _ = ed.pop_via();
    }
    let _ = ed.ensure_content_length();
    let mut out = Vec::new();
    ed.emit(&mut out);
    assert_eq!(out.len(), ed.emitted_len());
    let mut limits = Limits::DEFAULT;
    limits
        .max_message_size(usize::MAX)
        .max_headers(usize::MAX)
        .max_header_line(usize::MAX);
    match Message::parse(&out, &limits) {
        Err(e) => panic!("edited output does not parse: {e}"),
        Ok(again) => {
            assert_eq!(again.body(), msg.body());
            if pushed {
                assert_eq!(
                    again.first_value_ref(HeaderName::Via).map(|v| v.bytes),
                    Some(&b"SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKfuzz;rport"[..])
                );
            }
        }
    }
}

/// Every typed accessor, and the methods of what they return.
fn typed(msg: &Message<'_>) {
    if let Ok(uri) = msg.request_uri() {
        let _ = (
            uri.user_unescaped(),
            uri.host_port(),
            uri.transport(),
            uri.lr(),
            uri.maddr(),
        );
        let _ = uri.header_pairs().count();
        let _ = uri.to_string();
    }
    for via in msg.vias().flatten() {
        let _ = (
            via.branch(),
            via.received(),
            via.rport(),
            via.maddr(),
            via.ttl(),
            via.sent_by(),
        );
        oc_round_trip(&via);
    }
    for na in [msg.from(), msg.to()].into_iter().flatten() {
        let _ = (na.tag(), na.display_name_unquoted(), na.uri.host_port());
    }
    for c in msg.contacts().flatten() {
        let _ = (c.expires(), c.q(), c.is_star());
    }
    for r in msg.routes().chain(msg.record_routes()).flatten() {
        let _ = (r.uri.lr(), r.uri.host_port());
    }
    for cred in msg
        .authorizations()
        .chain(msg.proxy_authorizations())
        .flatten()
    {
        let _ = (
            cred.username(),
            cred.realm(),
            cred.nonce(),
            cred.response(),
            cred.uri(),
        );
        for p in cred.params.iter() {
            let _ = p.unquoted();
        }
    }
    for ch in msg
        .www_authenticates()
        .chain(msg.proxy_authenticates())
        .flatten()
    {
        let _ = (ch.realm(), ch.nonce(), ch.stale(), ch.qop(), ch.domain());
    }
}

/// Parses `data` as the value of an Authorization and of a WWW-Authenticate header and
/// calls every accessor; when a challenge parses with a realm and a nonce, writes a challenge
/// with them and checks that it parses back to the same values.
pub fn auth_header(data: &[u8]) {
    if let Ok(c) = Credentials::parse(data) {
        let _ = (
            c.is_digest(),
            c.username(),
            c.username_unescaped(),
            c.realm(),
            c.nonce(),
            c.uri(),
            c.response(),
            c.cnonce(),
            c.nc(),
            c.nonce_count(),
            c.qop(),
            c.algorithm(),
            c.opaque(),
        );
        for p in c.params.iter() {
            assert!(!p.name.is_empty());
            let _ = p.unquoted();
        }
    }
    let Ok(ch) = Challenge::parse(data) else {
        return;
    };
    let _ = (
        ch.stale(),
        ch.domain(),
        ch.qop(),
        ch.algorithm(),
        ch.opaque(),
    );
    let (Some(realm), Some(nonce)) = (ch.params.get_unescaped("realm"), ch.nonce()) else {
        return;
    };
    // A nonce holding a quote or a backslash cannot be written back as it is.
    if nonce
        .iter()
        .any(|&b| b == b'"' || b == b'\\' || b < 0x20 || b == 0x7f)
        || realm.iter().any(|&b| b < 0x20 || b == 0x7f)
    {
        return;
    }
    let mut out = Vec::new();
    write_digest_challenge(
        &mut out,
        &DigestChallenge {
            realm: &realm,
            nonce,
            algorithm: "MD5",
            qop: "auth",
            stale: ch.stale(),
        },
    );
    let again = match Challenge::parse(&out) {
        Ok(c) => c,
        Err(e) => panic!("written challenge does not parse: {e}"),
    };
    assert_eq!(
        again.params.get_unescaped("realm").as_deref(),
        Some(&realm[..])
    );
    assert_eq!(again.nonce(), Some(nonce));
    assert_eq!(again.stale(), ch.stale());
}

/// Feeds `data` to a [`Framer`] in chunks whose size the first byte chooses, then whole, and
/// checks that both ways cut the same frames (one sequence is a prefix of the other: a limit
/// may be hit at a different point) and that every frame lies inside the buffer.
pub fn frame_stream(data: &[u8]) {
    let Some((&chunk, data)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk % 64) + 1;
    let mut limits = Limits::DEFAULT;
    limits.max_message_size(4096).max_header_line(512);
    let chunked = merge_pongs(frames(data, chunk, limits));
    let whole = merge_pongs(frames(data, data.len().max(1), limits));
    let n = chunked.len().min(whole.len());
    assert_eq!(chunked[..n], whole[..n], "chunk size {chunk}");
}

/// Adjacent non-ping keep-alives are equivalent to one (a CRLF flood may be cut at the limit).
fn merge_pongs(frames: Vec<Frame>) -> Vec<Frame> {
    let mut out: Vec<Frame> = Vec::with_capacity(frames.len());
    for f in frames {
        if let (
            Frame::KeepAlive { len, ping: false },
            Some(Frame::KeepAlive {
                len: prev,
                ping: false,
            }),
        ) = (f, out.last_mut())
        {
            *prev += len;
            continue;
        }
        out.push(f);
    }
    out
}

fn frames(data: &[u8], chunk: usize, limits: Limits) -> Vec<Frame> {
    let mut framer = Framer::new(limits);
    let mut buf = Vec::new();
    let mut out = Vec::new();
    for piece in data.chunks(chunk) {
        buf.extend_from_slice(piece);
        loop {
            match framer.poll(&buf) {
                Ok(Frame::Incomplete) => break,
                Ok(f @ (Frame::Message { len } | Frame::KeepAlive { len, .. })) => {
                    assert!(
                        len > 0 && len <= buf.len(),
                        "frame of {len} in {}",
                        buf.len()
                    );
                    if let Frame::Message { .. } = f {
                        parse_message(&buf[..len]);
                    }
                    buf.drain(..len);
                    out.push(f);
                }
                Err(_) => return out,
            }
        }
    }
    out
}

/// Parses `data` as the parameters of a response's top Via (RFC 7339's `oc`, `oc-algo`,
/// `oc-validity`, `oc-seq`, or anything else) and checks both readings of them: an offer
/// (what a client advertises) and a report (what a server answers). Whatever parses is
/// written back with the crate's own writer and must parse to the same value.
pub fn oc_via(data: &[u8]) {
    let mut buf = b"SIP/2.0 100 Trying\r\nVia: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK1".to_vec();
    buf.extend_from_slice(data);
    buf.extend_from_slice(b"\r\nContent-Length: 0\r\n\r\n");
    let Ok(msg) = Message::parse(&buf, &Limits::DEFAULT) else {
        return;
    };
    for via in msg.vias().flatten() {
        oc_round_trip(&via);
    }
}

/// The `oc` parameters of `via`, read as an offer and as a report, written back and read
/// again: the same offer, the same report.
fn oc_round_trip(via: &crate::Via<'_>) {
    // An `oc-algo` naming no known algorithm offers nothing this side can answer (empty,
    // as documented); holdline only ever writes offers that name one.
    if let Some(offer) = OcOffer::from_via(via).filter(|o| o.algos().next().is_some()) {
        let mut params = Vec::new();
        offer.write_params(&mut params);
        let again = reparse_oc(&params, OcOffer::from_via);
        assert_eq!(again, Some(offer), "written offer {params:?}");
    }
    if let Ok(Some(report)) = OcReport::from_via(via) {
        let mut params = Vec::new();
        report.write_params(&mut params);
        let again = reparse_oc(&params, OcReport::from_via);
        assert_eq!(again, Ok(Some(report)), "written report {params:?}");
    }
}

/// Reads `params` (as written by the crate) from a fresh Via with `read`.
fn reparse_oc<T>(params: &[u8], read: impl Fn(&crate::Via<'_>) -> T) -> T {
    let mut buf = b"SIP/2.0 100 Trying\r\nVia: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK1".to_vec();
    buf.extend_from_slice(params);
    buf.extend_from_slice(b"\r\n\r\n");
    let msg = match Message::parse(&buf, &Limits::DEFAULT) {
        Ok(m) => m,
        Err(e) => panic!("written oc parameters do not parse: {e}"),
    };
    match msg.top_via() {
        Ok(v) => read(&v),
        Err(e) => panic!("written Via does not parse: {e}"),
    }
}
