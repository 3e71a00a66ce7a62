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
            /// [`Header::name`](crate::Header::name).
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

            fn lookup_long_table() -> &'static [(&'static str, Self)] {
                &[$(($canonical, Self::$variant)),*]
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

fn lookup_long(name: &[u8]) -> HeaderName {
    // The table is small (36 entries); filtering on length and first letter first leaves
    // one or two case-insensitive comparisons.
    let Some(first) = name.first().map(u8::to_ascii_lowercase) else {
        return HeaderName::Other;
    };
    for (canonical, h) in HeaderName::lookup_long_table() {
        let c = canonical.as_bytes();
        if c.len() == name.len() && c[0].to_ascii_lowercase() == first && c.eq_ignore_ascii_case(name)
        {
            return *h;
        }
    }
    HeaderName::Other
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
            assert_eq!(HeaderName::lookup(h.as_str().to_ascii_uppercase().as_bytes()), *h);
            assert_eq!(HeaderName::lookup(h.as_str().to_ascii_lowercase().as_bytes()), *h);
        }
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
