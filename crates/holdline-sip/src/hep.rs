//! HEP version 3 (the Homer Encapsulation Protocol, also called EEP): the envelope a SIP
//! message travels in to a capture server such as Homer, heplify-server or sngrep.
//!
//! Written from the HEP3 network protocol specification (sipcapture, revision 37):
//!
//! ```text
//!  packet:  "HEP3" (4 octets) | total length (u16, the whole packet) | chunk | chunk | ...
//!  chunk:   vendor id (u16) | type id (u16) | length (u16, header included) | payload
//!           all numbers in network byte order; vendor 0x0000: the generic chunk types
//!
//!  type  payload        what                         written here
//!  0x01  u8             IP protocol family           2 (IPv4) or 10 (IPv6)
//!  0x02  u8             IP protocol id               17 UDP, 6 TCP (and TLS), 132 SCTP
//!  0x03  4 octets       IPv4 source address          |  IPv4 packets
//!  0x04  4 octets       IPv4 destination address     |
//!  0x05  16 octets      IPv6 source address          |  IPv6 packets
//!  0x06  16 octets      IPv6 destination address     |
//!  0x07  u16            source port
//!  0x08  u16            destination port
//!  0x09  u32            timestamp, seconds since the Unix epoch
//!  0x0a  u32            microseconds added to it
//!  0x0b  u8             protocol type                1 = SIP
//!  0x0c  u32            capture agent id
//!  0x0e  octets         authentication key           when a password is set
//!  0x11  octets         correlation id               when given
//!  0x0f  octets         the captured payload         the SIP message
//! ```
//!
//! The encoder appends to a caller's buffer (no allocation once the buffer has grown) and
//! never panics; a packet longer than the 16-bit length allows is refused.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// The chunk vendor id of the generic chunk types.
pub const VENDOR_GENERIC: u16 = 0x0000;

/// Generic chunk type ids (vendor [`VENDOR_GENERIC`]).
pub mod chunk {
    /// IP protocol family (u8: 2 IPv4, 10 IPv6).
    pub const IP_FAMILY: u16 = 0x0001;
    /// IP protocol id (u8: 17 UDP, 6 TCP, 132 SCTP).
    pub const IP_PROTO: u16 = 0x0002;
    /// IPv4 source address.
    pub const IPV4_SRC: u16 = 0x0003;
    /// IPv4 destination address.
    pub const IPV4_DST: u16 = 0x0004;
    /// IPv6 source address.
    pub const IPV6_SRC: u16 = 0x0005;
    /// IPv6 destination address.
    pub const IPV6_DST: u16 = 0x0006;
    /// Source port (u16).
    pub const SRC_PORT: u16 = 0x0007;
    /// Destination port (u16).
    pub const DST_PORT: u16 = 0x0008;
    /// Timestamp, seconds since the Unix epoch (u32).
    pub const TIME_SEC: u16 = 0x0009;
    /// Microseconds added to the timestamp (u32).
    pub const TIME_USEC: u16 = 0x000a;
    /// Protocol type of the payload (u8, [`super::PROTO_SIP`] for SIP).
    pub const PROTO_TYPE: u16 = 0x000b;
    /// Capture agent id (u32).
    pub const AGENT_ID: u16 = 0x000c;
    /// Authentication key (octets): the collector's password.
    pub const AUTH_KEY: u16 = 0x000e;
    /// The captured payload (octets).
    pub const PAYLOAD: u16 = 0x000f;
    /// Internal correlation id (octets).
    pub const CORRELATION_ID: u16 = 0x0011;
}

/// The protocol type of a SIP payload (chunk [`chunk::PROTO_TYPE`]).
pub const PROTO_SIP: u8 = 0x01;

/// The IP protocol a captured message travelled over (chunk [`chunk::IP_PROTO`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpProto {
    /// UDP (17).
    Udp,
    /// TCP (6); TLS is carried over TCP and captured decrypted under this id.
    Tcp,
    /// SCTP (132).
    Sctp,
}

impl IpProto {
    /// The IANA protocol number.
    pub fn number(self) -> u8 {
        match self {
            Self::Udp => 17,
            Self::Tcp => 6,
            Self::Sctp => 132,
        }
    }
}

/// One captured message and what the envelope says about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HepMessage<'a> {
    /// Where the message came from.
    pub src: SocketAddr,
    /// Where it went.
    pub dst: SocketAddr,
    /// The transport it travelled over.
    pub proto: IpProto,
    /// When it was captured: seconds since the Unix epoch ...
    pub secs: u32,
    /// ... plus microseconds (below 1,000,000).
    pub micros: u32,
    /// The capture agent id the collector files it under.
    pub agent_id: u32,
    /// The collector's password (authentication key chunk), if any.
    pub auth_key: Option<&'a [u8]>,
    /// A correlation id (e.g. to tie other captures to a call), if any.
    pub correlation_id: Option<&'a [u8]>,
    /// The SIP message.
    pub payload: &'a [u8],
}

/// Why a message could not be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HepError {
    /// The packet would be longer than the 16-bit total length can say.
    #[error("HEP packet of {len} octets exceeds 65535")]
    TooLong {
        /// The length it would have had.
        len: usize,
    },
}

/// The octets a packet for `m` takes.
pub fn encoded_len(m: &HepMessage<'_>) -> usize {
    let addr = if is_v4(m) { 4 } else { 16 };
    let fixed = 6 // header
        + (6 + 1) * 2 // family, proto
        + (6 + addr) * 2
        + (6 + 2) * 2 // ports
        + (6 + 4) * 2 // timestamp
        + (6 + 1) // protocol type
        + (6 + 4); // agent id
    fixed
        + m.auth_key.map_or(0, |k| 6 + k.len())
        + m.correlation_id.map_or(0, |c| 6 + c.len())
        + 6
        + m.payload.len()
}

/// Both addresses IPv4 (an IPv4 address beside an IPv6 one is written IPv4-mapped).
fn is_v4(m: &HepMessage<'_>) -> bool {
    m.src.is_ipv4() && m.dst.is_ipv4()
}

fn v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

fn put_chunk(out: &mut Vec<u8>, kind: u16, payload: &[u8]) {
    out.extend_from_slice(&VENDOR_GENERIC.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    // Callers have checked the whole packet fits in 16 bits, so every chunk does.
    let len = u16::try_from(6 + payload.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(payload);
}

/// Appends the HEP3 packet of `m` to `out`; returns its length. On error nothing is
/// appended.
pub fn encode(m: &HepMessage<'_>, out: &mut Vec<u8>) -> Result<usize, HepError> {
    let len = encoded_len(m);
    let total = u16::try_from(len).map_err(|_| HepError::TooLong { len })?;
    out.reserve(len);
    out.extend_from_slice(b"HEP3");
    out.extend_from_slice(&total.to_be_bytes());
    if is_v4(m) {
        put_chunk(out, chunk::IP_FAMILY, &[2]);
        put_chunk(out, chunk::IP_PROTO, &[m.proto.number()]);
        if let (IpAddr::V4(s), IpAddr::V4(d)) = (m.src.ip(), m.dst.ip()) {
            put_chunk(out, chunk::IPV4_SRC, &s.octets());
            put_chunk(out, chunk::IPV4_DST, &d.octets());
        }
    } else {
        put_chunk(out, chunk::IP_FAMILY, &[10]);
        put_chunk(out, chunk::IP_PROTO, &[m.proto.number()]);
        put_chunk(out, chunk::IPV6_SRC, &v6(m.src.ip()).octets());
        put_chunk(out, chunk::IPV6_DST, &v6(m.dst.ip()).octets());
    }
    put_chunk(out, chunk::SRC_PORT, &m.src.port().to_be_bytes());
    put_chunk(out, chunk::DST_PORT, &m.dst.port().to_be_bytes());
    put_chunk(out, chunk::TIME_SEC, &m.secs.to_be_bytes());
    put_chunk(out, chunk::TIME_USEC, &m.micros.to_be_bytes());
    put_chunk(out, chunk::PROTO_TYPE, &[PROTO_SIP]);
    put_chunk(out, chunk::AGENT_ID, &m.agent_id.to_be_bytes());
    if let Some(k) = m.auth_key {
        put_chunk(out, chunk::AUTH_KEY, k);
    }
    if let Some(c) = m.correlation_id {
        put_chunk(out, chunk::CORRELATION_ID, c);
    }
    put_chunk(out, chunk::PAYLOAD, m.payload);
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s
            .bytes()
            .filter(u8::is_ascii_hexdigit)
            .map(|b| match b {
                b'0'..=b'9' => b - b'0',
                b'a'..=b'f' => b - b'a' + 10,
                _ => b - b'A' + 10,
            })
            .collect();
        digits.chunks(2).map(|p| p[0] << 4 | p[1]).collect()
    }

    /// The example packet of the specification (revision 37, "Example HEP3 packet"):
    /// 212.202.0.1:12010 -> 82.116.0.211:5060 over UDP at 1313440459.120000, capture id 228,
    /// payload "INVITE sip:bob"; 113 octets.
    #[test]
    fn the_specifications_example_packet_is_reproduced_octet_for_octet() {
        let m = HepMessage {
            src: "212.202.0.1:12010".parse().expect("address"),
            dst: "82.116.0.211:5060".parse().expect("address"),
            proto: IpProto::Udp,
            secs: 1_313_440_459,
            micros: 120_000,
            agent_id: 228,
            auth_key: None,
            correlation_id: None,
            payload: b"INVITE sip:bob",
        };
        let want = hex("48 45 50 33  00 71
             00 00 00 01 00 07 02
             00 00 00 02 00 07 11
             00 00 00 03 00 0a d4 ca 00 01
             00 00 00 04 00 0a 52 74 00 d3
             00 00 00 07 00 08 2e ea
             00 00 00 08 00 08 13 c4
             00 00 00 09 00 0a 4e 49 82 cb
             00 00 00 0a 00 0a 00 01 d4 c0
             00 00 00 0b 00 07 01
             00 00 00 0c 00 0a 00 00 00 e4
             00 00 00 0f 00 14 49 4e 56 49 54 45 20 73 69 70 3a 62 6f 62");
        assert_eq!(want.len(), 113);
        let mut out = b"kept".to_vec();
        assert_eq!(encode(&m, &mut out), Ok(113));
        assert_eq!(&out[..4], b"kept", "appends");
        assert_eq!(out[4..], want[..]);
        assert_eq!(encoded_len(&m), 113);
    }

    /// IPv6 over TCP with a password and a correlation id, computed by hand:
    /// header 6 + family 7 + proto 7 + 2 x (6 + 16) + ports 2 x 8 + time 2 x 10 + type 7 +
    /// agent 10 + key (6 + 2) + correlation (6 + 3) + payload (6 + 3) = 143 = 0x8f.
    #[test]
    fn ipv6_with_a_key_and_a_correlation_id() {
        let m = HepMessage {
            src: "[2001:db8::1]:5060".parse().expect("address"),
            dst: "[::1]:40000".parse().expect("address"),
            proto: IpProto::Tcp,
            secs: 0x6566_6768,
            micros: 999_999,
            agent_id: 0x0102_0304,
            auth_key: Some(b"pw"),
            correlation_id: Some(b"c@h"),
            payload: b"BYE",
        };
        let want = hex("48 45 50 33  00 8f
             0000 0001 0007 0a
             0000 0002 0007 06
             0000 0005 0016 2001 0db8 0000 0000 0000 0000 0000 0001
             0000 0006 0016 0000 0000 0000 0000 0000 0000 0000 0001
             0000 0007 0008 13c4
             0000 0008 0008 9c40
             0000 0009 000a 6566 6768
             0000 000a 000a 000f 423f
             0000 000b 0007 01
             0000 000c 000a 0102 0304
             0000 000e 0008 7077
             0000 0011 0009 6340 68
             0000 000f 0009 4259 45");
        let mut out = Vec::new();
        assert_eq!(encode(&m, &mut out), Ok(143));
        assert_eq!(out, want);
    }

    #[test]
    fn an_ipv4_address_beside_an_ipv6_one_is_written_mapped() {
        let m = HepMessage {
            src: "10.0.0.1:1".parse().expect("address"),
            dst: "[::1]:2".parse().expect("address"),
            proto: IpProto::Sctp,
            secs: 0,
            micros: 0,
            agent_id: 0,
            auth_key: None,
            correlation_id: None,
            payload: b"",
        };
        let mut out = Vec::new();
        let n = encode(&m, &mut out).expect("fits");
        assert_eq!(n, out.len());
        // family 10, protocol 132, source ::ffff:10.0.0.1
        assert_eq!(out[6..20], hex("0000 0001 0007 0a 0000 0002 0007 84")[..]);
        assert_eq!(
            out[20..42],
            hex("0000 0005 0016 0000 0000 0000 0000 0000 ffff 0a00 0001")[..]
        );
    }

    #[test]
    fn a_packet_longer_than_its_length_field_is_refused_and_nothing_written() {
        let big = vec![b'x'; 65_535];
        let m = HepMessage {
            src: "10.0.0.1:1".parse().expect("address"),
            dst: "10.0.0.2:2".parse().expect("address"),
            proto: IpProto::Udp,
            secs: 0,
            micros: 0,
            agent_id: 0,
            auth_key: None,
            correlation_id: None,
            payload: &big,
        };
        let mut out = Vec::new();
        assert!(matches!(
            encode(&m, &mut out),
            Err(HepError::TooLong { .. })
        ));
        assert!(out.is_empty());
        // The largest payload that fits: 65535 - 6 - everything else.
        let room = 65_535 - (encoded_len(&HepMessage { payload: b"", ..m }));
        let m = HepMessage {
            payload: &big[..room],
            ..m
        };
        assert_eq!(encode(&m, &mut out), Ok(65_535));
        assert_eq!(out[4..6], [0xff, 0xff]);
    }
}
