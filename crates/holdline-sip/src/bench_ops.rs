//! The operations measured by `benches/parse.rs` and `examples/icount.rs`, defined once.

use holdline_base::Transport;

use crate::{Editor, HeaderName, Limits, Message};

/// A typical 896-byte INVITE with an SDP body.
pub const INVITE: &[u8] = include_bytes!("../tests/data/invite.sip");
/// A typical 417-byte 180 Ringing.
pub const RINGING: &[u8] = include_bytes!("../tests/data/ringing.sip");

/// Parses and indexes; returns the header count.
pub fn index(msg: &[u8]) -> usize {
    Message::parse(msg, &Limits::DEFAULT).map_or(0, |m| m.headers().len())
}

/// Parses, then reads what a proxy reads on every message; returns a checksum.
pub fn proxy_headers(msg: &[u8]) -> usize {
    let Ok(m) = Message::parse(msg, &Limits::DEFAULT) else {
        return 0;
    };
    read_proxy_headers(&m)
}

fn read_proxy_headers(m: &Message<'_>) -> usize {
    let mut sum = 0;
    if let Ok(uri) = m.request_uri() {
        sum += uri.host_port().map_or(0, |h| usize::from(h.port_or(5060)));
    }
    if let Ok(via) = m.top_via() {
        sum += via.branch().map_or(0, <[u8]>::len);
    }
    sum += m.call_id().map_or(0, <[u8]>::len);
    sum += m.cseq().map_or(0, |c| c.seq as usize);
    sum += m.from().ok().and_then(|f| f.tag()).map_or(0, <[u8]>::len);
    sum += m.to().ok().and_then(|t| t.tag()).map_or(0, <[u8]>::len);
    sum += m.max_forwards().ok().flatten().unwrap_or(0) as usize;
    if let Some(Ok(route)) = m.routes().next() {
        sum += usize::from(route.uri.lr());
    }
    sum + m.content_length().unwrap_or(0) as usize
}

/// Parses, reads the proxy headers, applies the forwarding edit and emits into `out`
/// (cleared first); returns the emitted length.
pub fn proxy_edit(msg: &[u8], out: &mut Vec<u8>) -> usize {
    let Ok(m) = Message::parse(msg, &Limits::DEFAULT) else {
        return 0;
    };
    let sum = read_proxy_headers(&m);
    let mut ed = Editor::new(&m);
    let ok = ed
        .push_via(
            Transport::Udp,
            b"192.0.2.1:5060",
            b"z9hG4bK-hl-0123456789abcdef",
            true,
        )
        .and_then(|()| ed.decrement_max_forwards().map(drop))
        .and_then(|()| ed.add_record_route(b"<sip:192.0.2.1;lr>"))
        .and_then(|()| {
            if m.first_header(HeaderName::Route).is_some() {
                ed.pop_route().map(drop)
            } else {
                Ok(())
            }
        });
    if ok.is_err() {
        return 0;
    }
    out.clear();
    ed.emit(out);
    out.len() + sum % 2
}
