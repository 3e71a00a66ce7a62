//! Entry points for the fuzz targets in `fuzz/` (and for tests that replay their corpora).
//!
//! Each function takes arbitrary bytes, drives a parser with them, and panics only if an
//! invariant of this crate is broken; parse errors are expected and ignored.

use crate::{Frame, Framer, HeaderName, Limits, Message};

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
        if let (Frame::KeepAlive { len, ping: false }, Some(Frame::KeepAlive { len: prev, ping: false })) =
            (f, out.last_mut())
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
                    assert!(len > 0 && len <= buf.len(), "frame of {len} in {}", buf.len());
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
