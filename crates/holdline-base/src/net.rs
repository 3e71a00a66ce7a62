use core::fmt;
use core::str::FromStr;
use std::net::SocketAddr;

/// A SIP transport (RFC 3261 §18, RFC 4168 for SCTP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Transport {
    /// SCTP (RFC 4168); in holdline it runs over UDP encapsulation (RFC 6951).
    Sctp,
    /// TCP.
    Tcp,
    /// TLS over TCP (a `sips:` target).
    Tls,
    /// UDP.
    Udp,
}

impl Transport {
    /// The token used in a Via header (`UDP`, `TCP`, `TLS`, `SCTP`).
    pub const fn as_via_str(self) -> &'static str {
        match self {
            Self::Sctp => "SCTP",
            Self::Tcp => "TCP",
            Self::Tls => "TLS",
            Self::Udp => "UDP",
        }
    }

    /// The value of a URI `transport=` parameter (`udp`, `tcp`, `tls`, `sctp`).
    pub const fn as_param_str(self) -> &'static str {
        match self {
            Self::Sctp => "sctp",
            Self::Tcp => "tcp",
            Self::Tls => "tls",
            Self::Udp => "udp",
        }
    }

    /// Whether the transport delivers a byte stream that must be framed by Content-Length.
    pub const fn is_stream(self) -> bool {
        matches!(self, Self::Tcp | Self::Tls)
    }

    /// Whether the transport is reliable (no SIP retransmission of requests, RFC 3261 §17).
    pub const fn is_reliable(self) -> bool {
        !matches!(self, Self::Udp)
    }

    /// The default port: 5061 for TLS, 5060 otherwise (RFC 3261 §19.1.2).
    pub const fn default_port(self) -> u16 {
        match self {
            Self::Tls => 5061,
            _ => 5060,
        }
    }

    /// Parses a transport token case-insensitively (Via and URI forms).
    pub fn from_token(token: &[u8]) -> Option<Self> {
        [Self::Udp, Self::Tcp, Self::Tls, Self::Sctp]
            .into_iter()
            .find(|t| token.eq_ignore_ascii_case(t.as_via_str().as_bytes()))
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_param_str())
    }
}

/// The error of parsing a [`Transport`] from a string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownTransport(pub String);

impl fmt::Display for UnknownTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown transport `{}` (expected udp, tcp, tls or sctp)",
            self.0
        )
    }
}

impl std::error::Error for UnknownTransport {}

impl FromStr for Transport {
    type Err = UnknownTransport;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_token(s.as_bytes()).ok_or_else(|| UnknownTransport(s.to_owned()))
    }
}

/// Identifies one connection of a connection-oriented transport inside a driver.
///
/// The driver assigns ids; pure crates only carry them from an input to the transmit that
/// answers it, so that a response goes back on the connection its request arrived on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// The far end of a message: its address, its transport and, for connections, which one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Peer {
    /// The remote socket address.
    pub addr: SocketAddr,
    /// The transport the message used.
    pub transport: Transport,
    /// The connection, for connection-oriented transports; `None` lets the driver pick or open one.
    pub conn: Option<ConnId>,
}

/// What a state machine wants sent: metadata for bytes it wrote into a caller-owned buffer.
///
/// Returned by `poll_transmit`; the payload is the first `size` bytes the machine appended to
/// the buffer the driver passed in.
#[must_use = "a Transmit describes bytes that must be sent"]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Where to send.
    pub destination: Peer,
    /// The payload's length in bytes.
    pub size: usize,
}
