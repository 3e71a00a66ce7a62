//! The stream key of a SIP message (RFC 4168: the messages of a call on one stream).

/// A hash (FNV-1a) of the message's Call-ID, found by a scan of the header lines (`Call-ID`
/// or its compact form `i`) without parsing the message: the key [`crate::SctpUdp::send`]
/// takes, so that a call's messages share a stream (and stay in order on it) while different
/// calls spread over the streams. A message without one gets 0.
pub fn call_id_key(message: &[u8]) -> u64 {
    for line in message.split(|&b| b == b'\n').skip(1) {
        if line.is_empty() || line == b"\r" {
            break; // the end of the header section
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let name = line[..colon].trim_ascii();
        if name.eq_ignore_ascii_case(b"call-id") || name.eq_ignore_ascii_case(b"i") {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for &b in line[colon + 1..].trim_ascii() {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
            return h;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::call_id_key;

    #[test]
    fn the_stream_key_is_the_call_ids_hash_in_either_form() {
        let long = b"INVITE sip:b@x SIP/2.0\r\nVia: SIP/2.0/SCTP h\r\nCall-ID:  abc@h \r\n\r\n";
        let compact = b"SIP/2.0 200 OK\r\ni: abc@h\r\nCSeq: 1 INVITE\r\n\r\nCall-ID: other\r\n";
        let other = b"SIP/2.0 200 OK\r\nCall-ID: abd@h\r\n\r\n";
        assert_eq!(call_id_key(long), call_id_key(compact));
        assert_ne!(call_id_key(long), call_id_key(other));
        assert_ne!(call_id_key(long), 0);
        // Only the header section counts; no Call-ID at all gives 0.
        assert_eq!(
            call_id_key(b"OPTIONS sip:x SIP/2.0\r\n\r\nCall-ID: body\r\n"),
            0
        );
    }
}
