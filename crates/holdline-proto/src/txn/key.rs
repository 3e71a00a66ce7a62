//! Matching keys (RFC 3261 §17.1.3, §17.2.3), encoded as small owned byte strings.
//!
//! Every component is length-prefixed, so two different tuples never encode to the same
//! bytes (no hash collisions to worry about, even under adversarial input).

use holdline_sip::{Host, Message, Method, ParseError, Via};

const SERVER_3261: u8 = 1;
const SERVER_2543: u8 = 2;
const CLIENT: u8 = 3;

fn push_part(out: &mut Vec<u8>, part: &[u8]) {
    let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(part);
}

/// The method a request is matched under: an ACK belongs to its INVITE's transaction.
pub(crate) fn method_class<'a>(m: Method<'a>) -> &'a [u8] {
    match m {
        Method::Ack => b"INVITE",
        other => other.as_bytes(),
    }
}

fn push_host(out: &mut Vec<u8>, via: &Via<'_>) {
    match via.host {
        Host::Name(n) => {
            out.push(0);
            let len = u32::try_from(n.len()).unwrap_or(u32::MAX);
            out.extend_from_slice(&len.to_le_bytes());
            // Host names compare case-insensitively.
            out.extend(n.iter().map(u8::to_ascii_lowercase));
        }
        Host::V4(a) => {
            out.push(4);
            out.extend_from_slice(&a.octets());
        }
        Host::V6(a) => {
            out.push(6);
            out.extend_from_slice(&a.octets());
        }
        other => {
            out.push(9);
            push_part(out, other.to_string().as_bytes());
        }
    }
    match via.port {
        Some(p) => {
            out.push(1);
            out.extend_from_slice(&p.to_be_bytes());
        }
        None => out.push(0),
    }
}

/// §17.2.3 key of a request whose top Via branch has the magic cookie: branch, sent-by and
/// method (ACK as INVITE). `class` overrides the method (CANCEL → INVITE target lookup).
pub(crate) fn server_3261(out: &mut Vec<u8>, via: &Via<'_>, branch: &[u8], class: &[u8]) {
    out.clear();
    out.push(SERVER_3261);
    push_part(out, branch);
    push_host(out, via);
    push_part(out, class);
}

/// The RFC 2543 fallback key, first part: Request-URI, From tag, Call-ID, CSeq number and
/// the top Via as written. Returns the prefix length; [`server_2543_finish`] appends the
/// method class and the To tag (an ACK is looked up with class `ACK` and its own To tag,
/// which is the tag of the response it acknowledges).
pub(crate) fn server_2543_prefix(
    out: &mut Vec<u8>,
    msg: &Message<'_>,
) -> Result<usize, ParseError> {
    out.clear();
    out.push(SERVER_2543);
    push_part(out, msg.request_uri_bytes().unwrap_or_default());
    let from = msg.from()?;
    push_part(out, from.tag().unwrap_or_default());
    push_part(out, msg.call_id()?);
    out.extend_from_slice(&msg.cseq()?.seq.to_le_bytes());
    let top = msg
        .first_value_ref(holdline_sip::HeaderName::Via)
        .map(|v| v.bytes)
        .unwrap_or_default();
    push_part(out, top);
    Ok(out.len())
}

/// The RFC 2543 fallback key, second part: the method (not its class) and the To tag.
pub(crate) fn server_2543_finish(out: &mut Vec<u8>, method: &[u8], to_tag: &[u8]) {
    push_part(out, method);
    push_part(out, to_tag);
}

/// §17.1.3 key of a client transaction: top Via branch and CSeq method.
pub(crate) fn client(out: &mut Vec<u8>, branch: &[u8], cseq_method: &[u8]) {
    out.clear();
    out.push(CLIENT);
    push_part(out, branch);
    push_part(out, cseq_method);
}
