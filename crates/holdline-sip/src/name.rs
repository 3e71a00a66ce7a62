use core::fmt;

macro_rules! header_names {
    ($( $(#[$doc:meta])* $variant:ident = $canonical:literal $(, compact $compact:literal)? ;)*) => {
        /// A header field name holdline recognises, or [`HeaderName::Other`].
        ///
        /// Recognition is case-insensitive and maps compact forms (RFC 3261 §7.3.3 and later
        /// RFCs: `i m e l f t v s k c o u r b x y`) onto their full names.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        #[repr(u8)]
        pub enum HeaderName {
            $( $(#[$doc])* $variant, )*
            /// Any other header; compare its name with
            /// [`Message::name`](crate::Message::name).
            Other,
        }

        impl HeaderName {
            /// Every recognised name, in declaration order (without `Other`).
            pub const ALL: &'static [Self] = &[$(Self::$variant),*];

            /// The canonical spelling, e.g. `Call-ID`; `"Other"` for [`HeaderName::Other`].
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $canonical, )*
                    Self::Other => "Other",
                }
            }

            /// The compact form, if the header has one (e.g. `v` for Via).
            pub const fn compact(self) -> Option<u8> {
                match self {
                    $( $( Self::$variant => Some($compact), )? )*
                    _ => None,
                }
            }

            /// Looks a header name up, case-insensitively, accepting compact forms.
            pub fn lookup(name: &[u8]) -> Self {
                if let [c] = name {
                    return match c.to_ascii_lowercase() {
                        $( $( $compact => Self::$variant, )? )*
                        _ => Self::Other,
                    };
                }
                lookup_long(name)
            }
        }
    };
}

header_names! {
    /// `Accept`.
    Accept = "Accept";
    /// `Allow`.
    Allow = "Allow";
    /// `Allow-Events` (compact `u`, RFC 6665).
    AllowEvents = "Allow-Events", compact b'u';
    /// `Authorization`.
    Authorization = "Authorization";
    /// `Call-ID` (compact `i`).
    CallId = "Call-ID", compact b'i';
    /// `Contact` (compact `m`).
    Contact = "Contact", compact b'm';
    /// `Content-Encoding` (compact `e`).
    ContentEncoding = "Content-Encoding", compact b'e';
    /// `Content-Length` (compact `l`).
    ContentLength = "Content-Length", compact b'l';
    /// `Content-Type` (compact `c`).
    ContentType = "Content-Type", compact b'c';
    /// `CSeq`.
    CSeq = "CSeq";
    /// `Event` (compact `o`, RFC 6665).
    Event = "Event", compact b'o';
    /// `Expires`.
    Expires = "Expires";
    /// `From` (compact `f`).
    From = "From", compact b'f';
    /// `Identity` (compact `y`, RFC 8224).
    Identity = "Identity", compact b'y';
    /// `Max-Forwards`.
    MaxForwards = "Max-Forwards";
    /// `Min-Expires`.
    MinExpires = "Min-Expires";
    /// `Path` (RFC 3327).
    Path = "Path";
    /// `Proxy-Authenticate`.
    ProxyAuthenticate = "Proxy-Authenticate";
    /// `Proxy-Authorization`.
    ProxyAuthorization = "Proxy-Authorization";
    /// `Proxy-Require`.
    ProxyRequire = "Proxy-Require";
    /// `Record-Route`.
    RecordRoute = "Record-Route";
    /// `Refer-To` (compact `r`, RFC 3515).
    ReferTo = "Refer-To", compact b'r';
    /// `Referred-By` (compact `b`, RFC 3892).
    ReferredBy = "Referred-By", compact b'b';
    /// `Require`.
    Require = "Require";
    /// `Retry-After`.
    RetryAfter = "Retry-After";
    /// `Route`.
    Route = "Route";
    /// `Server`.
    Server = "Server";
    /// `Session-Expires` (compact `x`, RFC 4028).
    SessionExpires = "Session-Expires", compact b'x';
    /// `Subject` (compact `s`).
    Subject = "Subject", compact b's';
    /// `Supported` (compact `k`).
    Supported = "Supported", compact b'k';
    /// `Timestamp`.
    Timestamp = "Timestamp";
    /// `To` (compact `t`).
    To = "To", compact b't';
    /// `Unsupported`.
    Unsupported = "Unsupported";
    /// `User-Agent`.
    UserAgent = "User-Agent";
    /// `Via` (compact `v`).
    Via = "Via", compact b'v';
    /// `WWW-Authenticate`.
    WwwAuthenticate = "WWW-Authenticate";
}

/// Number of [`HeaderName`] variants, `Other` included.
pub(crate) const HEADER_NAME_COUNT: usize = HeaderName::Other as usize + 1;

/// Perfect hash of a long header name: `(len + 11·first + 23·last) mod 128`, on ASCII bytes
/// with bit 5 set (lower case for letters). Chosen so that no two recognised names collide;
/// [`PERFECT`] is built at compile time and compilation fails if one ever does.
const fn perfect_hash(len: usize, first: u8, last: u8) -> usize {
    (len.wrapping_add((first | 0x20) as usize * 11)
        .wrapping_add((last | 0x20) as usize * 23))
        & 127
}

/// Bucket -> 1 + index into [`HeaderName::ALL`], 0 for an empty bucket.
const PERFECT: [u8; 128] = {
    let mut table = [0u8; 128];
    let all = HeaderName::ALL;
    let mut i = 0;
    while i < all.len() {
        let n = all[i].as_str().as_bytes();
        let h = perfect_hash(n.len(), n[0], n[n.len() - 1]);
        assert!(
            table[h] == 0,
            "header name hash collision: change perfect_hash"
        );
        table[h] = i as u8 + 1;
        i += 1;
    }
    table
};

fn lookup_long(name: &[u8]) -> HeaderName {
    match candidate(name) {
        Some(h) if h.as_str().as_bytes().eq_ignore_ascii_case(name) => h,
        _ => HeaderName::Other,
    }
}

/// The only recognised name `name` can be, by its perfect hash.
fn candidate(name: &[u8]) -> Option<HeaderName> {
    let (Some(&first), Some(&last)) = (name.first(), name.last()) else {
        return None;
    };
    match PERFECT[perfect_hash(name.len(), first, last)] {
        0 => None,
        i => Some(HeaderName::ALL[usize::from(i - 1)]),
    }
}

/// [`HeaderName::lookup`] for a name already known to be a `token`: the final comparison
/// then only needs to fold bit 5, eight bytes at a time. (For token bytes, `a | 0x20 ==
/// b | 0x20` against a canonical name made of letters and `-` is exactly ASCII
/// case-insensitive equality: no token byte differs from a letter or `-` in bit 5 alone.)
pub(crate) fn lookup_token(name: &[u8]) -> HeaderName {
    if let [c] = name {
        return HeaderName::lookup(&[*c]);
    }
    match candidate(name) {
        Some(h) if eq_folded(name, h.as_str().as_bytes()) => h,
        _ => HeaderName::Other,
    }
}

fn eq_folded(a: &[u8], b: &[u8]) -> bool {
    const FOLD: u64 = 0x2020_2020_2020_2020;
    fn word(s: &[u8], at: usize) -> u64 {
        s.get(at..at + 8)
            .and_then(|w| <[u8; 8]>::try_from(w).ok())
            .map_or(0, u64::from_le_bytes)
            | FOLD
    }
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 8 {
        return a.iter().zip(b).all(|(x, y)| x | 0x20 == y | 0x20);
    }
    // Up to three overlapping words cover any length from 8 to 24 (names are at most 19).
    let mid = (n / 2).saturating_sub(4);
    word(a, 0) == word(b, 0)
        && word(a, n - 8) == word(b, n - 8)
        && (n <= 16 || word(a, mid) == word(b, mid))
        && (n <= 24
            || a[8..]
                .iter()
                .zip(&b[8..])
                .all(|(x, y)| x | 0x20 == y | 0x20))
}

impl HeaderName {
    /// Whether the header's value is a comma-separated list that may be split into several
    /// header fields (RFC 3261 §7.3.1). Authentication headers are not: their commas separate
    /// parameters.
    pub const fn is_list(self) -> bool {
        matches!(
            self,
            Self::Accept
                | Self::Allow
                | Self::AllowEvents
                | Self::Contact
                | Self::ContentEncoding
                | Self::Path
                | Self::ProxyRequire
                | Self::RecordRoute
                | Self::Require
                | Self::Route
                | Self::Supported
                | Self::Unsupported
                | Self::Via
        )
    }

    pub(crate) const fn bad_reason(self) -> &'static str {
        match self {
            Self::CallId => "Bad Call-ID",
            Self::Contact => "Bad Contact",
            Self::ContentLength => "Bad Content-Length",
            Self::CSeq => "Bad CSeq",
            Self::Expires => "Bad Expires",
            Self::From => "Bad From",
            Self::MaxForwards => "Bad Max-Forwards",
            Self::RecordRoute => "Bad Record-Route",
            Self::Route => "Bad Route",
            Self::To => "Bad To",
            Self::Via => "Bad Via",
            Self::Authorization | Self::ProxyAuthorization => "Bad Credentials",
            Self::WwwAuthenticate | Self::ProxyAuthenticate => "Bad Challenge",
            _ => "Bad Header Value",
        }
    }

    pub(crate) const fn missing_reason(self) -> &'static str {
        match self {
            Self::CallId => "Missing Call-ID",
            Self::CSeq => "Missing CSeq",
            Self::From => "Missing From",
            Self::MaxForwards => "Missing Max-Forwards",
            Self::To => "Missing To",
            Self::Via => "Missing Via",
            Self::ContentLength => "Missing Content-Length",
            _ => "Missing Header",
        }
    }
}

impl fmt::Display for HeaderName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_names_round_trip_case_insensitively() {
        for h in HeaderName::ALL {
            assert_eq!(HeaderName::lookup(h.as_str().as_bytes()), *h);
            assert_eq!(
                HeaderName::lookup(h.as_str().to_ascii_uppercase().as_bytes()),
                *h
            );
            assert_eq!(
                HeaderName::lookup(h.as_str().to_ascii_lowercase().as_bytes()),
                *h
            );
        }
    }

    #[test]
    fn token_lookup_agrees_with_lookup() {
        for h in HeaderName::ALL {
            for v in [
                h.as_str().to_owned(),
                h.as_str().to_ascii_uppercase(),
                h.as_str().to_ascii_lowercase(),
            ] {
                assert_eq!(lookup_token(v.as_bytes()), *h);
            }
        }
        for other in [
            "X-Call-ID",
            "Call-IE",
            "Vias",
            "Content-Lengths",
            "Toe",
            "x",
            "P-Asserted-Identity",
        ] {
            assert_eq!(
                lookup_token(other.as_bytes()),
                HeaderName::lookup(other.as_bytes()),
                "{other}"
            );
        }
        assert_eq!(lookup_token(b"Max.Forwards"), HeaderName::Other);
    }

    #[test]
    fn compact_forms() {
        let pairs = [
            (b'i', HeaderName::CallId),
            (b'm', HeaderName::Contact),
            (b'e', HeaderName::ContentEncoding),
            (b'l', HeaderName::ContentLength),
            (b'f', HeaderName::From),
            (b't', HeaderName::To),
            (b'v', HeaderName::Via),
            (b's', HeaderName::Subject),
            (b'k', HeaderName::Supported),
            (b'c', HeaderName::ContentType),
            (b'o', HeaderName::Event),
            (b'u', HeaderName::AllowEvents),
            (b'r', HeaderName::ReferTo),
            (b'b', HeaderName::ReferredBy),
            (b'x', HeaderName::SessionExpires),
            (b'y', HeaderName::Identity),
        ];
        for (c, h) in pairs {
            assert_eq!(HeaderName::lookup(&[c]), h);
            assert_eq!(HeaderName::lookup(&[c.to_ascii_uppercase()]), h);
            assert_eq!(h.compact(), Some(c));
        }
        assert_eq!(HeaderName::lookup(b"z"), HeaderName::Other);
        assert_eq!(HeaderName::lookup(b""), HeaderName::Other);
        assert_eq!(HeaderName::lookup(b"X-Via"), HeaderName::Other);
    }
}
