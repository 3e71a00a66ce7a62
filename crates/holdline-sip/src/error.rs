use core::fmt;

use crate::HeaderName;

/// Why a message, or a part of it, could not be parsed.
///
/// Every variant maps to a short reason phrase ([`ParseErrorKind::reason`]) that a server puts
/// into its `400 Bad Request` so the sender learns what is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ParseErrorKind {
    /// A header's value is not valid for its grammar (named by the header).
    BadHeader(HeaderName),
    /// A header name is empty or contains characters outside `token`.
    BadHeaderName,
    /// The Content-Length value is not a non-negative decimal integer, or is repeated with
    /// different values.
    BadContentLength,
    /// A method is not a `token`.
    BadMethod,
    /// A `name=value` parameter is malformed.
    BadParam,
    /// A quoted string is not terminated.
    BadQuotedString,
    /// The start line is neither a Request-Line nor a Status-Line.
    BadStartLine,
    /// The status code of a Status-Line is not three digits in 100..=699.
    BadStatusCode,
    /// A URI is malformed.
    BadUri,
    /// The SIP-Version is not `SIP/2.0`.
    BadVersion,
    /// The Content-Length announces more body bytes than the datagram (or frame) holds.
    BodyTruncated,
    /// The buffer holds nothing but whitespace.
    Empty,
    /// A header line exceeds [`Limits::max_header_line`](crate::Limits::max_header_line).
    HeaderLineTooLong,
    /// A header line has no `:`.
    MissingColon,
    /// A header the message must carry is absent.
    MissingHeader(HeaderName),
    /// The header section does not end with an empty line.
    MissingHeaderEnd,
    /// A NUL byte appears in the start line or the header section.
    NulByte,
    /// The message exceeds [`Limits::max_message_size`](crate::Limits::max_message_size).
    TooLarge,
    /// The message has more headers than [`Limits::max_headers`](crate::Limits::max_headers).
    TooManyHeaders,
    /// A well-formed SIP-Version other than `SIP/2.0` (answer `505`).
    UnsupportedVersion,
}

impl ParseErrorKind {
    /// A short reason phrase for a `400` response, e.g. `Bad Via`.
    pub fn reason(self) -> &'static str {
        match self {
            Self::BadHeader(h) => h.bad_reason(),
            Self::BadHeaderName => "Bad Header Name",
            Self::BadContentLength => "Bad Content-Length",
            Self::BadMethod => "Bad Method",
            Self::BadParam => "Bad Parameter",
            Self::BadQuotedString => "Unterminated Quoted String",
            Self::BadStartLine => "Bad Start Line",
            Self::BadStatusCode => "Bad Status Code",
            Self::BadUri => "Bad Request-URI",
            Self::BadVersion => "Bad SIP Version",
            Self::BodyTruncated => "Content-Length Exceeds Body",
            Self::Empty => "Empty Message",
            Self::HeaderLineTooLong => "Header Line Too Long",
            Self::MissingColon => "Header Without Colon",
            Self::MissingHeader(h) => h.missing_reason(),
            Self::MissingHeaderEnd => "Missing Empty Line After Headers",
            Self::NulByte => "NUL Byte In Headers",
            Self::TooLarge => "Message Too Large",
            Self::TooManyHeaders => "Too Many Headers",
            Self::UnsupportedVersion => "Version Not Supported",
        }
    }
}

/// A parse failure: what went wrong and where.
///
/// `offset` is the byte offset, from the start of the buffer that was parsed, of the first
/// byte found to be wrong (for a typed header value, from the start of that value).
/// Constructing one never allocates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[error("{} at byte {offset}", kind.reason())]
pub struct ParseError {
    /// What is wrong.
    pub kind: ParseErrorKind,
    /// Where: the byte offset of the problem.
    pub offset: u32,
}

impl ParseError {
    /// An error of `kind` at `offset` (saturating at `u32::MAX`).
    pub fn new(kind: ParseErrorKind, offset: usize) -> Self {
        Self {
            kind,
            offset: u32::try_from(offset).unwrap_or(u32::MAX),
        }
    }

    /// The same error with its offset moved by `base` (to make a value-relative offset
    /// message-relative).
    #[must_use]
    pub fn shifted(self, base: usize) -> Self {
        Self::new(self.kind, (self.offset as usize).saturating_add(base))
    }

    /// The same error, reported as a bad value of header `name` (keeps the offset).
    #[must_use]
    pub fn in_header(self, name: HeaderName) -> Self {
        Self {
            kind: ParseErrorKind::BadHeader(name),
            offset: self.offset,
        }
    }
}

impl fmt::Display for ParseErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}
