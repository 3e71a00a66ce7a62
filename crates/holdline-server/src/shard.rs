//! Which worker owns a message: its Call-ID's owner ([`holdline_proto::shard`]).

use holdline_sip::{Limits, Message};

pub use holdline_proto::shard::{hash_call_id, shard_of};

/// The owner of a message: parses the index and the Call-ID only; `None` when the message
/// has no parsable Call-ID (the receiving worker handles it, so it can be answered `400`).
pub fn owner_of(bytes: &[u8], limits: &Limits, workers: usize) -> Option<usize> {
    let msg = Message::parse(bytes, limits).ok()?;
    let call_id = msg.call_id().ok()?;
    Some(shard_of(call_id, workers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_and_spread() {
        assert_eq!(shard_of(b"abc@h", 1), 0);
        assert_eq!(shard_of(b"abc@h", 4), shard_of(b"abc@h", 4));
        let mut seen = [0usize; 4];
        for i in 0..400 {
            seen[shard_of(format!("call-{i}@host").as_bytes(), 4)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "{seen:?}");
        let m = b"OPTIONS sip:a SIP/2.0\r\nCall-ID: x@y\r\n\r\n";
        assert_eq!(owner_of(m, &Limits::DEFAULT, 3), Some(shard_of(b"x@y", 3)));
        assert_eq!(owner_of(b"junk", &Limits::DEFAULT, 3), None);
    }
}
