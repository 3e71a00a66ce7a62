//! Building a response to a request (RFC 3261 §8.2.6.2): the Via headers in order, From,
//! To (with a tag added when the request's To has none and the caller gives one), Call-ID and
//! CSeq copied as they are, then the caller's headers and body.

use crate::{HeaderName, Message};

/// Appends to `out` a response to `req` with status `code` and `reason`.
///
/// Copies every Via field (in order), From, To, Call-ID and CSeq byte for byte; adds
/// `;tag=<to_tag>` to To when the request's To has no tag and `to_tag` is given; then appends
/// `extra` headers, `Content-Length` and `body`. Works on any request `Message::parse`
/// accepted, even one whose mandatory headers are missing or malformed (they are then simply
/// absent from the response), so a `400` can always be built.
pub fn build_response(
    req: &Message<'_>,
    code: u16,
    reason: &str,
    to_tag: Option<&[u8]>,
    extra: &[(&str, &[u8])],
    body: &[u8],
    out: &mut Vec<u8>,
) {
    out.reserve(256 + body.len());
    out.extend_from_slice(b"SIP/2.0 ");
    let code = code.clamp(100, 699);
    out.extend_from_slice(&[
        b'0' + (code / 100) as u8,
        b'0' + (code / 10 % 10) as u8,
        b'0' + (code % 10) as u8,
        b' ',
    ]);
    out.extend_from_slice(sanitize(reason.as_bytes()));
    out.extend_from_slice(b"\r\n");
    for h in req.headers() {
        let name = match h.kind {
            HeaderName::Via => "Via",
            HeaderName::From => "From",
            HeaderName::CallId => "Call-ID",
            HeaderName::CSeq => "CSeq",
            HeaderName::To => {
                out.extend_from_slice(b"To: ");
                out.extend_from_slice(req.value(h));
                if let Some(tag) = to_tag {
                    let has_tag = req.to().ok().is_some_and(|t| t.tag().is_some());
                    if !has_tag {
                        out.extend_from_slice(b";tag=");
                        out.extend_from_slice(sanitize(tag));
                    }
                }
                out.extend_from_slice(b"\r\n");
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(req.value(h));
        out.extend_from_slice(b"\r\n");
    }
    for (name, value) in extra {
        out.extend_from_slice(sanitize(name.as_bytes()));
        out.extend_from_slice(b": ");
        out.extend_from_slice(sanitize(value));
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Content-Length: ");
    out.extend_from_slice(&itoa_buf(body.len()));
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
}

/// Cuts a caller-supplied value at the first CR, LF or NUL so it cannot inject lines.
fn sanitize(s: &[u8]) -> &[u8] {
    let end = s
        .iter()
        .position(|&b| b == b'\r' || b == b'\n' || b == 0)
        .unwrap_or(s.len());
    &s[..end]
}

fn itoa_buf(mut n: usize) -> smallvec::SmallVec<[u8; 20]> {
    let mut digits = smallvec::SmallVec::<[u8; 20]>::new();
    loop {
        digits.push(b'0' + (n % 10) as u8);
        n /= 10;
        if n == 0 {
            break;
        }
    }
    digits.reverse();
    digits
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Limits;

    const REQ: &[u8] = b"INVITE sip:bob@b.example SIP/2.0\r\n\
Via: SIP/2.0/UDP p1.example;branch=z9hG4bK2, SIP/2.0/UDP a.example;branch=z9hG4bK1\r\n\
v: SIP/2.0/UDP c.example;branch=z9hG4bK0\r\n\
Max-Forwards: 70\r\n\
To: Bob <sip:bob@b.example>\r\n\
From: Alice <sip:alice@a.example>;tag=9fxced76sl\r\n\
Call-ID: 3848276298220188511@a.example\r\n\
CSeq: 1 INVITE\r\n\
Contact: <sip:alice@a.example>\r\n\
Content-Length: 0\r\n\r\n";

    #[test]
    fn copies_the_transaction_headers_and_adds_a_tag() {
        let req = Message::parse(REQ, &Limits::DEFAULT).expect("parse");
        let mut out = Vec::new();
        build_response(
            &req,
            486,
            "Busy Here",
            Some(b"xyz"),
            &[("Retry-After", b"30")],
            b"",
            &mut out,
        );
        let expected = b"SIP/2.0 486 Busy Here\r\n\
Via: SIP/2.0/UDP p1.example;branch=z9hG4bK2, SIP/2.0/UDP a.example;branch=z9hG4bK1\r\n\
Via: SIP/2.0/UDP c.example;branch=z9hG4bK0\r\n\
To: Bob <sip:bob@b.example>;tag=xyz\r\n\
From: Alice <sip:alice@a.example>;tag=9fxced76sl\r\n\
Call-ID: 3848276298220188511@a.example\r\n\
CSeq: 1 INVITE\r\n\
Retry-After: 30\r\n\
Content-Length: 0\r\n\r\n";
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(expected)
        );
        let resp = Message::parse(&out, &Limits::DEFAULT).expect("response parses");
        assert_eq!(resp.status(), Some(486));
        assert_eq!(resp.to().ok().and_then(|t| t.tag()), Some(&b"xyz"[..]));
    }

    #[test]
    fn keeps_an_existing_tag_and_sets_the_body_length() {
        let req = REQ.replace_first(
            b"To: Bob <sip:bob@b.example>",
            b"To: Bob <sip:bob@b.example>;tag=old",
        );
        let req = Message::parse(&req, &Limits::DEFAULT).expect("parse");
        let mut out = Vec::new();
        build_response(&req, 200, "OK", Some(b"new"), &[], b"v=0\r\n", &mut out);
        let resp = Message::parse(&out, &Limits::DEFAULT).expect("response parses");
        assert_eq!(resp.to().ok().and_then(|t| t.tag()), Some(&b"old"[..]));
        assert_eq!(resp.body(), b"v=0\r\n");
        assert_eq!(resp.content_length(), Some(5));
    }

    #[test]
    fn a_400_can_be_built_for_a_request_missing_headers() {
        let req = Message::parse(
            b"OPTIONS sip:x SIP/2.0\r\nCSeq: nonsense\r\n\r\n",
            &Limits::DEFAULT,
        )
        .expect("indexes");
        let mut out = Vec::new();
        build_response(
            &req,
            400,
            "Bad CSeq\r\nInjected: yes",
            None,
            &[],
            b"",
            &mut out,
        );
        assert_eq!(
            out,
            b"SIP/2.0 400 Bad CSeq\r\nCSeq: nonsense\r\nContent-Length: 0\r\n\r\n"
        );
    }

    trait ReplaceFirst {
        fn replace_first(&self, from: &[u8], to: &[u8]) -> Vec<u8>;
    }

    impl ReplaceFirst for [u8] {
        fn replace_first(&self, from: &[u8], to: &[u8]) -> Vec<u8> {
            let at = self
                .windows(from.len())
                .position(|w| w == from)
                .unwrap_or(self.len());
            let mut v = self[..at].to_vec();
            v.extend_from_slice(to);
            v.extend_from_slice(self.get(at + from.len()..).unwrap_or_default());
            v
        }
    }
}
