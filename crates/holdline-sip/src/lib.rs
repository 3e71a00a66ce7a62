//! SIP message syntax for holdline: zero-copy parsing with a header index, typed header
//! values, stream framing and an edit list. No IO, no clock, no panics on any input.
//!
//! # How a message is looked at
//!
//! ```text
//!  bytes ──Framer (streams only)──> one message ──Message::parse──> index
//!                                                                     │
//!   start line (method, Request-URI span | status, reason)            │ one pass: memchr for
//!   [Header { kind, name span, value span, line span }; N]  <─────────┘ line ends, name lookup
//!   first[kind] -> index of the first header of each known kind
//!   body span (Content-Length checked)
//!
//!  accessors parse on demand:  msg.call_id()  msg.cseq()  msg.top_via()  msg.from() ...
//!  Editor: edits anchored at spans  ──emit──> new bytes; untouched bytes copied as they are
//! ```
//!
//! [`Message::parse`] makes a single pass: it validates the start line, finds every header's
//! name and value, recognises well-known names (case-insensitively, compact forms included;
//! see [`HeaderName`]) and checks Content-Length. Nothing else is parsed until asked for: a
//! proxy that reads Via, CSeq and Call-ID never pays for Contact or the body. Every value a
//! typed accessor returns borrows from the original buffer.
//!
//! Folded header lines (RFC 3261 §7.3.1) are not copied into an unfolded buffer: every
//! scanner in this crate treats `CRLF` followed by white space as linear white space.
//!
//! # Guarantees
//!
//! - Parsing never panics, whatever the input; errors are [`ParseError`]s carrying a
//!   [`ParseErrorKind`] (with a reason phrase for a `400`) and the byte offset.
//! - Work and memory are bounded by [`Limits`]: message size, header count, line length.
//! - Emitting an edited message copies every byte that no edit touches as it was.
#![forbid(unsafe_code)]

mod addr;
mod auth;
#[doc(hidden)]
pub mod bench_ops;
mod contact;
mod edit;
mod error;
mod framing;
#[doc(hidden)]
pub mod fuzzing;
pub mod hep;
mod limits;
mod message;
mod name;
mod oc;
mod response;
pub mod scan;
mod typed;
mod uri;
mod via;

pub use addr::NameAddr;
pub use auth::{
    AuthParam, AuthParamIter, AuthParams, Challenge, Credentials, DigestChallenge,
    write_digest_challenge,
};
pub use contact::Contact;
pub use edit::{EditError, Editor};
pub use error::{ParseError, ParseErrorKind};
pub use framing::{Frame, Framer};
pub use limits::Limits;
pub use message::{CSeq, Header, Message, Method, Span, StartLine, ValueRef};
pub use name::HeaderName;
pub use oc::{DEFAULT_VALIDITY_MS, OC_PARAMS, OcAlgo, OcError, OcOffer, OcReport};
pub use response::build_response;
pub use uri::{Host, HostPort, Scheme, Uri, UriHeaders, percent_decode};
pub use via::{MAGIC_COOKIE, Via};
