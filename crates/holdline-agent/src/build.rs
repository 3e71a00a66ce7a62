//! Message text: the static parts of every leg computed once, numbers with `itoa`.

use std::net::SocketAddr;

use holdline_base::Transport;
use holdline_sip::{HeaderName, Message};

/// What a leg's messages share: addresses in text, prefixes, the SDP body.
#[derive(Clone, Debug)]
pub(crate) struct LegText {
    /// `1.2.3.4:5060` or `[::1]:5060`.
    pub(crate) hostport: Vec<u8>,
    /// `Via: SIP/2.0/UDP 1.2.3.4:5060;branch=z9hG4bK-`
    pub(crate) via_prefix: Vec<u8>,
    /// `;transport=tcp`, `;transport=tls`, `;transport=sctp` (RFC 4168) or empty (UDP).
    pub(crate) uri_tp: &'static [u8],
    /// The SDP offer/answer.
    pub(crate) sdp: Vec<u8>,
}

impl LegText {
    pub(crate) fn new(addr: SocketAddr, transport: Transport) -> Self {
        let hostport = match addr {
            SocketAddr::V4(a) => format!("{}:{}", a.ip(), a.port()),
            SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
        };
        let ip = addr.ip();
        let fam = if ip.is_ipv4() { "IP4" } else { "IP6" };
        let sdp = format!(
            "v=0\r\no=holdline 53655765 2353687637 IN {fam} {ip}\r\ns=-\r\nc=IN {fam} {ip}\r\nt=0 0\r\nm=audio 6000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
        );
        let via_prefix = format!(
            "Via: SIP/2.0/{} {hostport};branch=z9hG4bK-",
            transport.as_via_str()
        );
        Self {
            hostport: hostport.into_bytes(),
            via_prefix: via_prefix.into_bytes(),
            uri_tp: match transport {
                Transport::Tcp => b";transport=tcp",
                Transport::Tls => b";transport=tls",
                Transport::Sctp => b";transport=sctp",
                _ => b"",
            },
            sdp: sdp.into_bytes(),
        }
    }
}

/// Appends a decimal number.
pub(crate) fn num(out: &mut Vec<u8>, n: impl itoa::Integer) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b.format(n).as_bytes());
}

/// Appends `Content-Length: n\r\n\r\n` and the body.
pub(crate) fn body(out: &mut Vec<u8>, body: &[u8]) {
    out.extend_from_slice(b"Content-Length: ");
    num(out, body.len());
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
}

/// Appends the status line.
pub(crate) fn status_line(out: &mut Vec<u8>, code: u16) {
    out.extend_from_slice(b"SIP/2.0 ");
    num(out, code);
    out.push(b' ');
    out.extend_from_slice(reason(code).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// A reason phrase for the codes the agents send.
pub(crate) fn reason(code: u16) -> &'static str {
    match code {
        100 => "Trying",
        180 => "Ringing",
        183 => "Session Progress",
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        480 => "Temporarily Unavailable",
        481 => "Call/Transaction Does Not Exist",
        486 => "Busy Here",
        487 => "Request Terminated",
        500 => "Server Internal Error",
        503 => "Service Unavailable",
        600 => "Busy Everywhere",
        603 => "Decline",
        _ => "Response",
    }
}

/// The URI inside a name-addr value (`<sip:x>;p` → `sip:x`), or the value up to `;`.
pub(crate) fn uri_of(v: &[u8]) -> &[u8] {
    if let Some(open) = v.iter().position(|&b| b == b'<') {
        let rest = &v[open + 1..];
        let close = rest.iter().position(|&b| b == b'>').unwrap_or(rest.len());
        return &rest[..close];
    }
    let end = v.iter().position(|&b| b == b';').unwrap_or(v.len());
    trim(&v[..end])
}

/// Trims spaces and tabs.
pub(crate) fn trim(v: &[u8]) -> &[u8] {
    let s = v
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(v.len());
    let e = v
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(s, |e| e + 1);
    &v[s..e]
}

/// Appends `Route:` lines for the reversed Record-Route set of a response (the UAC's route
/// set, RFC 3261 §12.1.2), and returns the remote target (the Contact URI).
pub(crate) fn route_set(resp: &Message<'_>, routes: &mut Vec<u8>) -> Vec<u8> {
    let rr: Vec<&[u8]> = resp
        .values(HeaderName::RecordRoute)
        .map(|v| v.bytes)
        .collect();
    for v in rr.iter().rev() {
        routes.extend_from_slice(b"Route: ");
        routes.extend_from_slice(trim(v));
        routes.extend_from_slice(b"\r\n");
    }
    resp.first_value_ref(HeaderName::Contact)
        .map(|c| uri_of(c.bytes).to_vec())
        .unwrap_or_default()
}

/// Appends the header line `name: value\r\n` for every header of `msg` of kind `kind`.
pub(crate) fn copy_headers(msg: &Message<'_>, kind: HeaderName, name: &[u8], out: &mut Vec<u8>) {
    for h in msg.headers_of(kind) {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(msg.value(h));
        out.extend_from_slice(b"\r\n");
    }
}

/// Builds an ACK for a final response to an INVITE without any call state (a late or
/// retransmitted response of a call that already ended): RFC 3261 §17.1.1.3 for non-2xx
/// (same branch, original Request-URI, which the To URI stands in for here) and §13.2.2.4
/// for 2xx (Contact as Request-URI, route set from Record-Route).
pub(crate) fn stateless_ack(resp: &Message<'_>, code: u16, out: &mut Vec<u8>) -> bool {
    let (Some(to), Some(via), Ok(cseq)) = (
        resp.first_value(HeaderName::To),
        resp.first_value_ref(HeaderName::Via),
        resp.cseq(),
    ) else {
        return false;
    };
    let mut routes = Vec::new();
    let target = if code < 300 {
        route_set(resp, &mut routes)
    } else {
        uri_of(to).to_vec()
    };
    if target.is_empty() {
        return false;
    }
    out.extend_from_slice(b"ACK ");
    out.extend_from_slice(&target);
    out.extend_from_slice(b" SIP/2.0\r\nVia: ");
    let via = trim(via.bytes);
    match (code < 300).then(|| find(via, b"branch=")).flatten() {
        // A 2xx ACK is its own transaction: derive a distinct branch.
        Some(at) => {
            let rest = &via[at + 7..];
            let end = at
                + 7
                + rest
                    .iter()
                    .position(|b| b";, \t".contains(b))
                    .unwrap_or(rest.len());
            out.extend_from_slice(&via[..end]);
            out.extend_from_slice(b"-ack");
            out.extend_from_slice(&via[end..]);
        }
        None => out.extend_from_slice(via),
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&routes);
    out.extend_from_slice(b"Max-Forwards: 70\r\n");
    copy_headers(resp, HeaderName::From, b"From", out);
    out.extend_from_slice(b"To: ");
    out.extend_from_slice(to);
    out.extend_from_slice(b"\r\n");
    copy_headers(resp, HeaderName::CallId, b"Call-ID", out);
    out.extend_from_slice(b"CSeq: ");
    num(out, cseq.seq);
    out.extend_from_slice(b" ACK\r\n");
    body(out, b"");
    true
}

/// Position of `needle` in `hay`.
pub(crate) fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
