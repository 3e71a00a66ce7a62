use memchr::{memchr, memchr_iter};

use crate::scan::{parse_u32, trim_lws};
use crate::{HeaderName, Limits, ParseError, ParseErrorKind};

/// What [`Framer::poll`] found at the front of a stream buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Frame {
    /// A complete message occupies the first `len` bytes: parse them with
    /// [`Message::parse`](crate::Message::parse), then drop them from the buffer.
    Message {
        /// Bytes in the message (start line, headers, empty line, body).
        len: usize,
    },
    /// Keep-alive bytes occupy the first `len` bytes; drop them. When `ping` is set they were
    /// a double-CRLF ping, which RFC 5626 §4.4.1 says to answer with a single CRLF pong.
    KeepAlive {
        /// Bytes to drop.
        len: usize,
        /// Whether this was a `CRLF CRLF` ping.
        ping: bool,
    },
    /// Not enough bytes yet: read more, append, and poll again.
    Incomplete,
}

/// Cuts SIP messages out of a byte stream (TCP, TLS) by Content-Length (RFC 3261 §18.3).
///
/// The driver owns the buffer: it appends what it reads, calls [`poll`](Self::poll), removes
/// the bytes of each [`Frame::Message`] or [`Frame::KeepAlive`] from the front, and polls
/// again until [`Frame::Incomplete`]. The framer remembers how far it has searched for the
/// end of the header section, so a message that trickles in is not rescanned from the start.
///
/// After an error the stream cannot be resynchronised: answer `400` if possible and close the
/// connection.
#[derive(Clone, Debug)]
pub struct Framer {
    limits: Limits,
    /// How many bytes of the current message have been searched for the header end.
    scanned: usize,
    /// Total length of the current message once its header section has been read.
    total: Option<usize>,
}

impl Framer {
    /// A framer applying `limits` (message size and header line length).
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            scanned: 0,
            total: None,
        }
    }

    /// Looks at the front of `buf` (everything received and not yet consumed).
    ///
    /// Errors: a missing, malformed or repeated-and-different Content-Length, a message over
    /// [`Limits::max_message_size`], or a header section that grows past that size without
    /// ending.
    pub fn poll(&mut self, buf: &[u8]) -> Result<Frame, ParseError> {
        if let Some(total) = self.total {
            return Ok(self.complete_if(buf, total));
        }
        if self.scanned == 0 && matches!(buf.first(), Some(b'\r' | b'\n')) {
            return Ok(keep_alive(buf, self.limits.max_header_line));
        }
        let Some(body_start) = self.find_header_end(buf) else {
            if buf.len() > self.limits.max_message_size {
                return Err(ParseError::new(
                    ParseErrorKind::TooLarge,
                    self.limits.max_message_size,
                ));
            }
            self.check_line_length(buf)?;
            self.scanned = buf.len();
            return Ok(Frame::Incomplete);
        };
        let cl = content_length(&buf[..body_start])?;
        let total = body_start
            .checked_add(cl as usize)
            .filter(|t| *t <= self.limits.max_message_size)
            .ok_or_else(|| ParseError::new(ParseErrorKind::TooLarge, body_start))?;
        self.total = Some(total);
        Ok(self.complete_if(buf, total))
    }

    /// Forgets any partial message (e.g. when the connection is reused after an error).
    pub fn reset(&mut self) {
        self.scanned = 0;
        self.total = None;
    }

    fn complete_if(&mut self, buf: &[u8], total: usize) -> Frame {
        if buf.len() >= total {
            self.reset();
            Frame::Message { len: total }
        } else {
            Frame::Incomplete
        }
    }

    /// Offset just past the empty line ending the header section, if it is in `buf`.
    fn find_header_end(&self, buf: &[u8]) -> Option<usize> {
        // Resume a little before where the last search stopped: the terminator may straddle.
        let from = self.scanned.saturating_sub(3);
        for lf in memchr_iter(b'\n', &buf[from..]).map(|i| from + i) {
            match buf.get(lf + 1) {
                Some(b'\n') => return Some(lf + 2),
                Some(b'\r') if buf.get(lf + 2) == Some(&b'\n') => return Some(lf + 3),
                _ => {}
            }
        }
        None
    }

    /// Rejects a partial message whose current line already exceeds the line limit, so that a
    /// peer cannot make us buffer a message-sized line before we notice.
    fn check_line_length(&self, buf: &[u8]) -> Result<(), ParseError> {
        let last_lf = memchr::memrchr(b'\n', buf).map_or(0, |i| i + 1);
        if buf.len() - last_lf > self.limits.max_header_line {
            return Err(ParseError::new(ParseErrorKind::HeaderLineTooLong, last_lf));
        }
        Ok(())
    }
}

impl Default for Framer {
    fn default() -> Self {
        Self::new(Limits::DEFAULT)
    }
}

/// Classifies CR/LF bytes at the front of the stream. A `CRLF CRLF` is a ping. Any other run
/// of CR/LF bytes is consumed once a byte that is not CR/LF follows it (so the result does not
/// depend on how the bytes were split into reads), or once it exceeds `max_run` bytes (so a
/// flood of CRLFs cannot grow the buffer).
fn keep_alive(buf: &[u8], max_run: usize) -> Frame {
    if buf.starts_with(b"\r\n\r\n") {
        return Frame::KeepAlive { len: 4, ping: true };
    }
    match buf.iter().position(|&b| b != b'\r' && b != b'\n') {
        Some(len) => Frame::KeepAlive { len, ping: false },
        None if buf.len() > max_run => Frame::KeepAlive {
            len: buf.len(),
            ping: false,
        },
        None => Frame::Incomplete,
    }
}

/// Finds and checks Content-Length in a header section (start line included).
fn content_length(head: &[u8]) -> Result<u32, ParseError> {
    let mut found: Option<u32> = None;
    let mut pos = memchr(b'\n', head).map_or(head.len(), |i| i + 1);
    while pos < head.len() {
        let end = memchr(b'\n', &head[pos..]).map_or(head.len(), |i| pos + i);
        let line = &head[pos..end];
        if let Some(colon) = memchr(b':', line) {
            let name = trim_lws(&line[..colon]);
            if HeaderName::lookup(name) == HeaderName::ContentLength {
                let v = trim_lws(&line[colon + 1..]);
                let at = pos + colon + 1;
                let n = parse_u32(v, u32::MAX)
                    .ok_or_else(|| ParseError::new(ParseErrorKind::BadContentLength, at))?;
                if found.is_some_and(|f| f != n) {
                    return Err(ParseError::new(ParseErrorKind::BadContentLength, at));
                }
                found = Some(n);
            }
        }
        pos = end + 1;
    }
    found.ok_or_else(|| {
        ParseError::new(
            ParseErrorKind::MissingHeader(HeaderName::ContentLength),
            head.len(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSG: &[u8] = b"OPTIONS sip:a@b SIP/2.0\r\nContent-Length: 4\r\n\r\nbody";

    #[test]
    fn complete_message_and_trailing_bytes() {
        let mut f = Framer::default();
        let mut buf = MSG.to_vec();
        buf.extend_from_slice(b"INV");
        assert_eq!(f.poll(&buf), Ok(Frame::Message { len: MSG.len() }));
        assert_eq!(f.poll(&buf[MSG.len()..]), Ok(Frame::Incomplete));
    }

    #[test]
    fn byte_by_byte_arrival() {
        let mut f = Framer::default();
        for n in 0..MSG.len() {
            assert_eq!(f.poll(&MSG[..n]), Ok(Frame::Incomplete), "at {n}");
        }
        assert_eq!(f.poll(MSG), Ok(Frame::Message { len: MSG.len() }));
    }

    #[test]
    fn several_messages_with_keepalives_between() {
        let mut stream = Vec::new();
        stream.extend_from_slice(b"\r\n\r\n");
        stream.extend_from_slice(MSG);
        stream.extend_from_slice(b"\r\n");
        stream.extend_from_slice(MSG);
        let mut f = Framer::default();
        let mut rest = &stream[..];
        let mut seen = Vec::new();
        loop {
            match f.poll(rest).expect("frame") {
                Frame::Incomplete => break,
                Frame::Message { len } => {
                    seen.push("msg");
                    rest = &rest[len..];
                }
                Frame::KeepAlive { len, ping } => {
                    seen.push(if ping { "ping" } else { "pong" });
                    rest = &rest[len..];
                }
            }
        }
        assert_eq!(seen, ["ping", "msg", "pong", "msg"]);
        assert!(rest.is_empty());
    }

    #[test]
    fn crlf_runs_wait_for_what_follows() {
        let mut f = Framer::default();
        assert_eq!(f.poll(b"\r\n"), Ok(Frame::Incomplete));
        assert_eq!(
            f.poll(b"\r\n\r\n"),
            Ok(Frame::KeepAlive { len: 4, ping: true })
        );
        assert_eq!(f.poll(b"\r\n\n"), Ok(Frame::Incomplete));
        assert_eq!(
            f.poll(b"\r\n\nO"),
            Ok(Frame::KeepAlive {
                len: 3,
                ping: false
            })
        );
        let mut limits = Limits::DEFAULT;
        limits.max_header_line(8);
        let flood = [b'\n'; 9];
        assert_eq!(
            Framer::new(limits).poll(&flood),
            Ok(Frame::KeepAlive {
                len: 9,
                ping: false
            })
        );
    }

    #[test]
    fn content_length_is_required_and_checked() {
        let mut f = Framer::default();
        let e = f
            .poll(b"OPTIONS sip:a SIP/2.0\r\nVia: x\r\n\r\n")
            .expect_err("no CL");
        assert_eq!(
            e.kind,
            ParseErrorKind::MissingHeader(HeaderName::ContentLength)
        );
        let e = Framer::default()
            .poll(b"OPTIONS sip:a SIP/2.0\r\nl: -1\r\n\r\n")
            .expect_err("neg");
        assert_eq!(e.kind, ParseErrorKind::BadContentLength);
        let e = Framer::default()
            .poll(b"OPTIONS sip:a SIP/2.0\r\nl: 1\r\nContent-Length: 2\r\n\r\nab")
            .expect_err("two values");
        assert_eq!(e.kind, ParseErrorKind::BadContentLength);
        let e = Framer::default()
            .poll(b"OPTIONS sip:a SIP/2.0\r\nl: 99999999999\r\n\r\n")
            .expect_err("huge");
        assert_eq!(e.kind, ParseErrorKind::BadContentLength);
        let e = Framer::default()
            .poll(b"OPTIONS sip:a SIP/2.0\r\nl: 70000\r\n\r\n")
            .expect_err("big");
        assert_eq!(e.kind, ParseErrorKind::TooLarge);
    }

    #[test]
    fn compact_and_spaced_content_length() {
        let m = b"OPTIONS sip:a SIP/2.0\r\ncontent-LENGTH  :   2  \r\n\r\nab";
        assert_eq!(
            Framer::default().poll(m),
            Ok(Frame::Message { len: m.len() })
        );
        let m = b"OPTIONS sip:a SIP/2.0\r\nL:0\r\n\r\n";
        assert_eq!(
            Framer::default().poll(m),
            Ok(Frame::Message { len: m.len() })
        );
    }

    #[test]
    fn endless_header_section_is_bounded() {
        let mut limits = Limits::DEFAULT;
        limits.max_message_size(1000).max_header_line(100);
        let mut f = Framer::new(limits);
        let mut buf = b"OPTIONS sip:a SIP/2.0\r\n".to_vec();
        buf.extend(std::iter::repeat_n(b'a', 101));
        assert_eq!(
            f.poll(&buf).map_err(|e| e.kind),
            Err(ParseErrorKind::HeaderLineTooLong)
        );
        let mut f = Framer::new(limits);
        let mut buf = b"OPTIONS sip:a SIP/2.0\r\n".to_vec();
        for _ in 0..200 {
            buf.extend_from_slice(b"X: y\r\n");
        }
        assert_eq!(
            f.poll(&buf).map_err(|e| e.kind),
            Err(ParseErrorKind::TooLarge)
        );
    }
}
