//! The on-disk record of one address-of-record, and the mapping between the caller's
//! [`Instant`] and wall-clock time.
//!
//! Format version 1 (all integers little-endian):
//!
//! ```text
//! record  = version:u8 (=1) count:u32 binding*count
//! binding = expires_unix_ms:u64 (u64::MAX = never) q:u16 cseq:u32
//!           contact_len:u32 contact call_id_len:u32 call_id
//!           source_tag:u8 (0 = none, 4 = IPv4, 6 = IPv6) [address] [transport]
//! IPv4    = ip:[u8;4] port:u16
//! IPv6    = ip:[u8;16] port:u16 flowinfo:u32 scope_id:u32
//! transport = len:u8 token (the Via token: "UDP", "TCP", "TLS", "SCTP")
//! ```
//!
//! The connection id of a source is not stored: connections do not survive a restart.

use core::time::Duration;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::time::{SystemTime, UNIX_EPOCH};

use holdline_base::{Instant, Peer, Transport};
use holdline_proto::Binding;

/// The record format written by this version.
pub(crate) const VERSION: u8 = 1;

/// Why a stored record could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The record is empty (no version byte).
    #[error("empty record")]
    Empty,
    /// The version byte names a format this build does not know.
    #[error("unknown record version {0}")]
    UnknownVersion(u8),
    /// The record ends in the middle of a field.
    #[error("record truncated at byte {0}")]
    Truncated(usize),
    /// Bytes follow the last binding.
    #[error("{0} trailing bytes after the last binding")]
    TrailingBytes(usize),
    /// The source address tag is neither 0, 4 nor 6.
    #[error("unknown source address tag {0}")]
    BadAddressTag(u8),
    /// The transport token is not one this build knows.
    #[error("unknown transport {0:?}")]
    BadTransport(String),
}

/// The mapping between the caller's clock and wall-clock time, fixed when the store opens:
/// `wall_ms` (Unix milliseconds) is the wall-clock time at `now`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WallClock {
    now: Instant,
    wall_ms: u64,
}

impl WallClock {
    /// The mapping "`wall` is `now`".
    pub(crate) fn new(now: Instant, wall: SystemTime) -> Self {
        let since = wall.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        let wall_ms = u64::try_from(since.as_millis()).unwrap_or(u64::MAX - 1);
        Self { now, wall_ms }
    }

    /// `t` as Unix milliseconds (rounded up, so a binding never outlives its expiry early);
    /// [`Instant::MAX`] is `u64::MAX`, "never".
    pub(crate) fn to_unix_ms(self, t: Instant) -> u64 {
        if t == Instant::MAX {
            return u64::MAX;
        }
        if t >= self.now {
            let ahead = (t - self.now).as_nanos().div_ceil(1_000_000);
            let ahead = u64::try_from(ahead).unwrap_or(u64::MAX);
            self.wall_ms.saturating_add(ahead).min(u64::MAX - 1)
        } else {
            let behind = u64::try_from((self.now - t).as_millis()).unwrap_or(u64::MAX);
            self.wall_ms.saturating_sub(behind)
        }
    }

    /// The instant of Unix time `ms`, or `None` if it is not after the mapping's `now`
    /// (the binding has expired).
    pub(crate) fn instant_of_unix_ms(self, ms: u64) -> Option<Instant> {
        if ms == u64::MAX {
            return Some(Instant::MAX);
        }
        (ms > self.wall_ms).then(|| self.now + Duration::from_millis(ms - self.wall_ms))
    }
}

/// A decoded binding, its expiry still in Unix milliseconds.
pub(crate) struct Stored {
    pub(crate) expires_unix_ms: u64,
    /// The binding, with `expires_at` not yet set (it is [`Instant::ZERO`]).
    pub(crate) binding: Binding,
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&bytes[..len as usize]);
}

/// Appends the record of `bindings` to `out` (cleared first).
pub(crate) fn encode(bindings: &[Binding], clock: WallClock, out: &mut Vec<u8>) {
    out.clear();
    out.push(VERSION);
    let count = u32::try_from(bindings.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&count.to_le_bytes());
    for b in bindings.iter().take(count as usize) {
        out.extend_from_slice(&clock.to_unix_ms(b.expires_at).to_le_bytes());
        out.extend_from_slice(&b.q.to_le_bytes());
        out.extend_from_slice(&b.cseq.to_le_bytes());
        put_bytes(out, &b.contact);
        put_bytes(out, &b.call_id);
        match b.source {
            None => out.push(0),
            Some(peer) => {
                match peer.addr {
                    SocketAddr::V4(a) => {
                        out.push(4);
                        out.extend_from_slice(&a.ip().octets());
                        out.extend_from_slice(&a.port().to_le_bytes());
                    }
                    SocketAddr::V6(a) => {
                        out.push(6);
                        out.extend_from_slice(&a.ip().octets());
                        out.extend_from_slice(&a.port().to_le_bytes());
                        out.extend_from_slice(&a.flowinfo().to_le_bytes());
                        out.extend_from_slice(&a.scope_id().to_le_bytes());
                    }
                }
                let token = peer.transport.as_via_str().as_bytes();
                out.push(u8::try_from(token.len()).unwrap_or(0));
                out.extend_from_slice(token);
            }
        }
    }
}

/// A cursor over a record being decoded.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(DecodeError::Truncated(self.pos))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let s = self.take(N)?;
        let mut a = [0; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        self.array().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_le_bytes)
    }

    fn bytes(&mut self) -> Result<Box<[u8]>, DecodeError> {
        let len = self.u32()? as usize;
        self.take(len).map(Into::into)
    }
}

/// Decodes a record into `out` (cleared first); the bindings' `expires_at` are left at
/// [`Instant::ZERO`] for the caller to set from `expires_unix_ms`.
pub(crate) fn decode(record: &[u8], out: &mut Vec<Stored>) -> Result<(), DecodeError> {
    out.clear();
    let mut r = Reader {
        buf: record,
        pos: 0,
    };
    let version = r.u8().map_err(|_| DecodeError::Empty)?;
    if version != VERSION {
        return Err(DecodeError::UnknownVersion(version));
    }
    let count = r.u32()?;
    for _ in 0..count {
        let expires_unix_ms = r.u64()?;
        let q = r.u16()?;
        let cseq = r.u32()?;
        let contact = r.bytes()?;
        let call_id = r.bytes()?;
        let addr = match r.u8()? {
            0 => None,
            4 => {
                let ip = Ipv4Addr::from(r.array::<4>()?);
                Some(SocketAddr::V4(SocketAddrV4::new(ip, r.u16()?)))
            }
            6 => {
                let ip = Ipv6Addr::from(r.array::<16>()?);
                let port = r.u16()?;
                let flowinfo = r.u32()?;
                let scope_id = r.u32()?;
                Some(SocketAddr::V6(SocketAddrV6::new(
                    ip, port, flowinfo, scope_id,
                )))
            }
            tag => return Err(DecodeError::BadAddressTag(tag)),
        };
        let source = match addr {
            None => None,
            Some(addr) => {
                let len = r.u8()? as usize;
                let token = r.take(len)?;
                let transport = Transport::from_token(token).ok_or_else(|| {
                    DecodeError::BadTransport(String::from_utf8_lossy(token).into_owned())
                })?;
                Some(Peer {
                    addr,
                    transport,
                    conn: None,
                })
            }
        };
        out.push(Stored {
            expires_unix_ms,
            binding: Binding {
                contact,
                expires_at: Instant::ZERO,
                q,
                call_id,
                cseq,
                source,
            },
        });
    }
    let rest = record.len() - r.pos;
    if rest != 0 {
        return Err(DecodeError::TrailingBytes(rest));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdline_base::ConnId;

    fn sample() -> Vec<Binding> {
        vec![
            Binding {
                contact: b"sip:bob@192.0.2.4:5060".as_slice().into(),
                expires_at: Instant::from_secs(3_600),
                q: 500,
                call_id: b"a84b4c76e66710".as_slice().into(),
                cseq: 314_159,
                source: Some(Peer {
                    addr: "192.0.2.4:5060".parse().expect("address"),
                    transport: Transport::Tcp,
                    conn: Some(ConnId(7)),
                }),
            },
            Binding {
                contact: b"sip:bob@[2001:db8::1]".as_slice().into(),
                expires_at: Instant::MAX,
                q: 1000,
                call_id: Box::default(),
                cseq: 0,
                source: Some(Peer {
                    addr: "[2001:db8::1%3]:5061".parse().expect("address"),
                    transport: Transport::Tls,
                    conn: None,
                }),
            },
            Binding {
                contact: b"sip:bob@host".as_slice().into(),
                expires_at: Instant::from_secs(10),
                q: 0,
                call_id: b"x".as_slice().into(),
                cseq: u32::MAX,
                source: None,
            },
        ]
    }

    #[test]
    fn round_trip_drops_only_conn() {
        let clock = WallClock::new(
            Instant::from_secs(0),
            UNIX_EPOCH + Duration::from_secs(1_000_000_000),
        );
        let bindings = sample();
        let mut buf = Vec::new();
        encode(&bindings, clock, &mut buf);
        let mut out = Vec::new();
        assert_eq!(decode(&buf, &mut out), Ok(()));
        assert_eq!(out.len(), bindings.len());
        for (stored, orig) in out.into_iter().zip(&bindings) {
            let mut want = orig.clone();
            if let Some(p) = &mut want.source {
                p.conn = None;
            }
            let mut got = stored.binding;
            got.expires_at = clock
                .instant_of_unix_ms(stored.expires_unix_ms)
                .unwrap_or(Instant::ZERO);
            assert_eq!(got, want);
        }
    }

    #[test]
    fn damaged_records_are_errors_not_panics() {
        let clock = WallClock::new(Instant::ZERO, SystemTime::UNIX_EPOCH);
        let mut buf = Vec::new();
        encode(&sample(), clock, &mut buf);
        let mut out = Vec::new();
        assert_eq!(decode(&[], &mut out), Err(DecodeError::Empty));
        assert_eq!(decode(&[9], &mut out), Err(DecodeError::UnknownVersion(9)));
        for cut in 1..buf.len() {
            assert!(decode(&buf[..cut], &mut out).is_err(), "cut at {cut}");
        }
        let mut long = buf.clone();
        long.push(0);
        assert_eq!(decode(&long, &mut out), Err(DecodeError::TrailingBytes(1)));
    }

    #[test]
    fn wall_clock_mapping() {
        let c = WallClock::new(
            Instant::from_secs(100),
            UNIX_EPOCH + Duration::from_secs(1_000),
        );
        assert_eq!(c.to_unix_ms(Instant::from_secs(160)), 1_060_000);
        assert_eq!(c.to_unix_ms(Instant::from_secs(40)), 940_000);
        assert_eq!(
            c.to_unix_ms(Instant::from_nanos(100_000_000_001)),
            1_000_001
        );
        assert_eq!(c.to_unix_ms(Instant::MAX), u64::MAX);
        assert_eq!(
            c.instant_of_unix_ms(1_060_000),
            Some(Instant::from_secs(160))
        );
        assert_eq!(c.instant_of_unix_ms(1_000_000), None);
        assert_eq!(c.instant_of_unix_ms(u64::MAX), Some(Instant::MAX));
    }
}
