/// Hard limits applied while parsing and framing, so that no input can make the parser use
/// unbounded time or memory.
///
/// The defaults suit a proxy on the public Internet: a SIP message over UDP cannot exceed
/// 65,535 bytes, real INVITEs are 0.5–4 KB, and a header line longer than 8 KB or more than
/// 128 headers indicate abuse rather than a real user agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Largest message (start line, headers and body) in bytes. Default 65,535.
    pub max_message_size: usize,
    /// Most header fields (after unfolding; a comma-separated line counts once). Default 128.
    /// Values above 65,535 are treated as 65,535.
    pub max_headers: usize,
    /// Longest start line or header field (including its folded continuation lines), in
    /// bytes. Default 8,192.
    pub max_header_line: usize,
}

impl Limits {
    /// The default limits (see the type's documentation).
    pub const DEFAULT: Self = Self {
        max_message_size: 65_535,
        max_headers: 128,
        max_header_line: 8_192,
    };

    /// Sets [`max_message_size`](Self::max_message_size).
    pub fn max_message_size(&mut self, bytes: usize) -> &mut Self {
        self.max_message_size = bytes;
        self
    }

    /// Sets [`max_headers`](Self::max_headers).
    pub fn max_headers(&mut self, count: usize) -> &mut Self {
        self.max_headers = count.min(usize::from(u16::MAX));
        self
    }

    /// Sets [`max_header_line`](Self::max_header_line).
    pub fn max_header_line(&mut self, bytes: usize) -> &mut Self {
        self.max_header_line = bytes;
        self
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self::DEFAULT
    }
}
