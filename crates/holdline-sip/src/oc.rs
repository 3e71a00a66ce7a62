//! The overload-control Via parameters of RFC 7339 (loss-based) and RFC 7415 (rate-based):
//! `oc`, `oc-algo`, `oc-validity`, `oc-seq`.
//!
//! A client that supports overload control *offers* it in the Via it adds to a request: a
//! valueless `oc` and the algorithms it supports, in order of preference, in `oc-algo`
//! (`;oc;oc-algo="loss,rate"`; `loss` is the mandatory one, RFC 7339 §4.2, so a missing
//! `oc-algo` means `loss`). The server that receives the request *answers* in the same Via of
//! its responses: `oc=<value>` (a loss percentage, or a rate in requests per second),
//! exactly one chosen algorithm in `oc-algo`, how long the value holds in `oc-validity`
//! (milliseconds; absent means 500; `0` ends control), and a sequence `oc-seq`
//! (`1*12DIGIT "." 1*5DIGIT`, RFC 7339 §13.1) that orders answers from one server.
//!
//! Parsing is strict where a wrong value would change behaviour — a non-numeric `oc`, a loss
//! above 100, several algorithms in an answer, a malformed `oc-seq` — and such an answer is an
//! [`OcError`], which a client ignores (RFC 7339: an invalid value is not 0, which has a
//! meaning of its own).
//!
//! ```
//! use holdline_sip::{Limits, Message, OcAlgo, OcOffer, OcReport};
//!
//! let req = b"INVITE sip:b@example.com SIP/2.0\r\n\
//!             Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK1;oc;oc-algo=\"loss,rate\"\r\n\r\n";
//! let via = Message::parse(req, &Limits::DEFAULT)?.top_via()?;
//! let offer = OcOffer::from_via(&via).expect("offered");
//! assert_eq!(offer.preferred(&[OcAlgo::Rate, OcAlgo::Loss]), Some(OcAlgo::Loss));
//!
//! let resp = b"SIP/2.0 100 Trying\r\n\
//!              Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK1;oc=20;oc-algo=\"loss\";oc-validity=1000;oc-seq=1282321615.782\r\n\r\n";
//! let via = Message::parse(resp, &Limits::DEFAULT)?.top_via()?;
//! let report = OcReport::from_via(&via)?.expect("an answer");
//! assert_eq!((report.algo, report.value, report.validity_ms), (OcAlgo::Loss, 20, 1000));
//! assert_eq!(report.seq, 128_232_161_578_200);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use core::fmt;

use crate::via::Via;

/// Validity of an answer without `oc-validity` (RFC 7339 §5.2): 500 ms.
pub const DEFAULT_VALIDITY_MS: u32 = 500;

/// An overload-control algorithm named in `oc-algo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OcAlgo {
    /// `loss` (RFC 7339 §7): `oc` is the percentage of requests to drop.
    Loss,
    /// `rate` (RFC 7415): `oc` is the most requests per second to send.
    Rate,
    /// `window`, holdline's explicit window (not an IANA-registered algorithm; RFC 7339 §5
    /// leaves room for others, and a client that does not offer it never gets it): `oc` is the
    /// most new INVITEs the client may have sent to the server and not yet seen answered
    /// (by any response). The window form of Shen, Schulzrinne and Nahum's feedback.
    Window,
}

impl OcAlgo {
    /// The token as written in `oc-algo`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Loss => "loss",
            Self::Rate => "rate",
            Self::Window => "window",
        }
    }

    fn from_token(t: &[u8]) -> Option<Self> {
        if t.eq_ignore_ascii_case(b"loss") {
            Some(Self::Loss)
        } else if t.eq_ignore_ascii_case(b"rate") {
            Some(Self::Rate)
        } else if t.eq_ignore_ascii_case(b"window") {
            Some(Self::Window)
        } else {
            None
        }
    }
}

impl fmt::Display for OcAlgo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a client offered in a request's Via: which known algorithms, in its order of
/// preference (unknown tokens are skipped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OcOffer {
    algos: [Option<OcAlgo>; 3],
}

impl OcOffer {
    /// An offer of `algos` in this order (duplicates are ignored).
    pub fn new(algos: &[OcAlgo]) -> Self {
        let mut o = Self { algos: [None; 3] };
        for &a in algos {
            o.push(a);
        }
        o
    }

    fn push(&mut self, a: OcAlgo) {
        if self.algos.contains(&Some(a)) {
            return;
        }
        if let Some(slot) = self.algos.iter_mut().find(|s| s.is_none()) {
            *slot = Some(a);
        }
    }

    /// The offer in a request's Via, `None` when it has no `oc` parameter. A valueless `oc`
    /// without `oc-algo` offers `loss` (the mandatory algorithm); an `oc-algo` naming no known
    /// algorithm offers nothing this side can answer (`algos()` is empty).
    pub fn from_via(via: &Via<'_>) -> Option<Self> {
        via.param("oc")?;
        let mut o = Self { algos: [None; 3] };
        match via.param("oc-algo") {
            Some(Some(v)) => {
                for t in unquote(v).split(|&b| b == b',') {
                    if let Some(a) = OcAlgo::from_token(t.trim_ascii()) {
                        o.push(a);
                    }
                }
            }
            _ => o.push(OcAlgo::Loss),
        }
        Some(o)
    }

    /// The offered algorithms, in the client's order of preference.
    pub fn algos(&self) -> impl Iterator<Item = OcAlgo> + '_ {
        self.algos.iter().flatten().copied()
    }

    /// Whether `algo` was offered.
    pub fn offers(&self, algo: OcAlgo) -> bool {
        self.algos.contains(&Some(algo))
    }

    /// The client's most preferred algorithm among those this side supports, in the client's
    /// order (RFC 7339 §5.2: the server picks one the client offered).
    pub fn preferred(&self, supported: &[OcAlgo]) -> Option<OcAlgo> {
        self.algos().find(|a| supported.contains(a))
    }

    /// The Via parameters of the offer: `;oc;oc-algo="loss,rate"` (or `;oc` alone for an offer
    /// of `loss` only, which is what a missing `oc-algo` means). Appended to `out`.
    pub fn write_params(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b";oc");
        let mut algos = self.algos().peekable();
        let Some(first) = algos.next() else { return };
        if first == OcAlgo::Loss && algos.peek().is_none() {
            return;
        }
        out.extend_from_slice(b";oc-algo=\"");
        out.extend_from_slice(first.as_str().as_bytes());
        for a in algos {
            out.push(b',');
            out.extend_from_slice(a.as_str().as_bytes());
        }
        out.push(b'"');
    }
}

/// A server's answer in a response's Via.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OcReport {
    /// The algorithm the server chose.
    pub algo: OcAlgo,
    /// `oc`: a loss percentage (0–100) or a rate in requests per second.
    pub value: u32,
    /// `oc-validity` in milliseconds ([`DEFAULT_VALIDITY_MS`] when absent); 0 ends control.
    pub validity_ms: u32,
    /// `oc-seq` as an integer: its integer part times 10^5 plus its fraction scaled to five
    /// digits (`1282321615.782` is `128232161578200`), so that later answers compare greater.
    pub seq: u64,
}

/// Why an answer's overload-control parameters were refused (the answer is then ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OcError {
    /// `oc` is not a decimal number (or too large).
    #[error("oc: not a number")]
    BadValue,
    /// A loss answer above 100 percent.
    #[error("oc: loss above 100%")]
    LossAbove100,
    /// `oc-algo` names no known algorithm, or more than one.
    #[error("oc-algo: not exactly one known algorithm")]
    BadAlgo,
    /// `oc-validity` is not a decimal number.
    #[error("oc-validity: not a number")]
    BadValidity,
    /// `oc-seq` is missing.
    #[error("oc-seq: missing")]
    MissingSeq,
    /// `oc-seq` is not `1*12DIGIT "." 1*5DIGIT`.
    #[error("oc-seq: not 1*12DIGIT \".\" 1*5DIGIT")]
    BadSeq,
}

impl OcReport {
    /// The answer in a response's top Via. `Ok(None)`: no answer (no `oc`, or a valueless
    /// `oc`, as the request carried it). An answer without `oc-algo` is a `loss` answer.
    pub fn from_via(via: &Via<'_>) -> Result<Option<Self>, OcError> {
        let Some(Some(v)) = via.param("oc") else {
            return Ok(None);
        };
        let value = decimal(v, 12).ok_or(OcError::BadValue)?;
        let algo = match via.param("oc-algo") {
            None => OcAlgo::Loss,
            Some(None) => return Err(OcError::BadAlgo),
            Some(Some(a)) => {
                let a = unquote(a);
                if a.contains(&b',') {
                    return Err(OcError::BadAlgo);
                }
                OcAlgo::from_token(a.trim_ascii()).ok_or(OcError::BadAlgo)?
            }
        };
        let value = u32::try_from(value).map_err(|_| OcError::BadValue)?;
        if algo == OcAlgo::Loss && value > 100 {
            return Err(OcError::LossAbove100);
        }
        let validity_ms = match via.param("oc-validity") {
            None => DEFAULT_VALIDITY_MS,
            Some(v) => v
                .and_then(|v| decimal(v, 10))
                .and_then(|v| u32::try_from(v).ok())
                .ok_or(OcError::BadValidity)?,
        };
        let seq = match via.param("oc-seq") {
            None => return Err(OcError::MissingSeq),
            Some(v) => parse_seq(v.ok_or(OcError::BadSeq)?)?,
        };
        Ok(Some(Self {
            algo,
            value,
            validity_ms,
            seq,
        }))
    }

    /// The Via parameters of the answer (`;oc=20;oc-algo="loss";oc-validity=500;oc-seq=…`),
    /// appended to `out`; `seq` is written back in its `secs.fraction` form.
    pub fn write_params(&self, out: &mut Vec<u8>) {
        use std::io::Write as _;
        let _ = write!(
            out,
            ";oc={};oc-algo=\"{}\";oc-validity={};oc-seq={}.{:05}",
            self.value,
            self.algo,
            self.validity_ms,
            self.seq / 100_000,
            self.seq % 100_000
        );
    }
}

/// The names of the overload-control Via parameters, which a server replaces as a whole.
pub const OC_PARAMS: [&str; 4] = ["oc", "oc-algo", "oc-validity", "oc-seq"];

fn unquote(v: &[u8]) -> &[u8] {
    match v {
        [b'"', inner @ .., b'"'] => inner,
        _ => v,
    }
}

/// `1*max_digits DIGIT` as a number.
fn decimal(v: &[u8], max_digits: usize) -> Option<u64> {
    if v.is_empty() || v.len() > max_digits || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')))
}

/// `1*12DIGIT "." 1*5DIGIT` → integer part × 10^5 + fraction scaled to five digits.
fn parse_seq(v: &[u8]) -> Result<u64, OcError> {
    let dot = v.iter().position(|&b| b == b'.').ok_or(OcError::BadSeq)?;
    let (int, frac) = (&v[..dot], &v[dot + 1..]);
    let int = decimal(int, 12).ok_or(OcError::BadSeq)?;
    let f = decimal(frac, 5).ok_or(OcError::BadSeq)?;
    let scale = 10u64.pow(5 - frac.len() as u32);
    Ok(int * 100_000 + f * scale)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Limits, Message};

    fn via_of(params: &str) -> Vec<u8> {
        format!("SIP/2.0 100 Trying\r\nVia: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK1{params}\r\n\r\n")
            .into_bytes()
    }

    fn report(params: &str) -> Result<Option<OcReport>, OcError> {
        let buf = via_of(params);
        let msg = Message::parse(&buf, &Limits::DEFAULT).expect("parses");
        OcReport::from_via(&msg.top_via().expect("via"))
    }

    fn offer(params: &str) -> Option<OcOffer> {
        let buf = via_of(params);
        let msg = Message::parse(&buf, &Limits::DEFAULT).expect("parses");
        OcOffer::from_via(&msg.top_via().expect("via"))
    }

    #[test]
    fn offers() {
        assert_eq!(offer(""), None);
        let o = offer(";oc").expect("offer");
        assert_eq!(o.algos().collect::<Vec<_>>(), [OcAlgo::Loss]);
        let o = offer(";oc;oc-algo=\"rate,loss\"").expect("offer");
        assert_eq!(o.algos().collect::<Vec<_>>(), [OcAlgo::Rate, OcAlgo::Loss]);
        assert_eq!(o.preferred(&[OcAlgo::Loss]), Some(OcAlgo::Loss));
        assert_eq!(
            o.preferred(&[OcAlgo::Loss, OcAlgo::Rate]),
            Some(OcAlgo::Rate)
        );
        let o = offer(";oc;oc-algo=\"win,x\"").expect("offer");
        assert_eq!(o.preferred(&[OcAlgo::Loss, OcAlgo::Rate]), None);
        // Unquoted, spaced, mixed case.
        let o = offer(";OC;OC-ALGO=Loss").expect("offer");
        assert!(o.offers(OcAlgo::Loss) && !o.offers(OcAlgo::Rate));
        // holdline's window, beside the RFCs' algorithms.
        let o = offer(";oc;oc-algo=\"window,loss\"").expect("offer");
        assert_eq!(
            o.algos().collect::<Vec<_>>(),
            [OcAlgo::Window, OcAlgo::Loss]
        );
        assert_eq!(o.preferred(&[OcAlgo::Loss]), Some(OcAlgo::Loss));
        assert_eq!(
            o.preferred(&[OcAlgo::Loss, OcAlgo::Window]),
            Some(OcAlgo::Window)
        );
    }

    #[test]
    fn offer_params_round_trip() {
        for algos in [
            &[OcAlgo::Loss][..],
            &[OcAlgo::Rate],
            &[OcAlgo::Loss, OcAlgo::Rate],
            &[OcAlgo::Rate, OcAlgo::Loss],
            &[OcAlgo::Window],
            &[OcAlgo::Window, OcAlgo::Loss, OcAlgo::Rate],
        ] {
            let o = OcOffer::new(algos);
            let mut p = Vec::new();
            o.write_params(&mut p);
            let back = offer(std::str::from_utf8(&p).expect("ascii")).expect("offer");
            assert_eq!(back, o, "{}", String::from_utf8_lossy(&p));
        }
        let mut p = Vec::new();
        OcOffer::new(&[OcAlgo::Loss]).write_params(&mut p);
        assert_eq!(p, b";oc");
    }

    #[test]
    fn reports() {
        assert_eq!(report(""), Ok(None));
        assert_eq!(report(";oc;oc-algo=\"loss\""), Ok(None));
        let r = report(";oc=20;oc-algo=\"loss\";oc-validity=0;oc-seq=12.5")
            .expect("valid")
            .expect("answer");
        assert_eq!(
            r,
            OcReport {
                algo: OcAlgo::Loss,
                value: 20,
                validity_ms: 0,
                seq: 1_250_000
            }
        );
        let r = report(";oc=300;oc-algo=rate;oc-seq=1.00001")
            .expect("valid")
            .expect("answer");
        assert_eq!(
            (r.algo, r.value, r.validity_ms, r.seq),
            (OcAlgo::Rate, 300, 500, 100_001)
        );
        // A window above 100 is no loss percentage: taken as it is.
        let r = report(";oc=250;oc-algo=\"window\";oc-validity=400;oc-seq=2.5")
            .expect("valid")
            .expect("answer");
        assert_eq!(
            (r.algo, r.value, r.validity_ms, r.seq),
            (OcAlgo::Window, 250, 400, 250_000)
        );
        // No oc-algo: loss.
        let r = report(";oc=5;oc-seq=1.1").expect("valid").expect("answer");
        assert_eq!(r.algo, OcAlgo::Loss);
    }

    #[test]
    fn malformed_reports_are_errors_not_zero() {
        for (p, e) in [
            (";oc=abc;oc-seq=1.1", OcError::BadValue),
            (";oc=-1;oc-seq=1.1", OcError::BadValue),
            (";oc=1e3;oc-seq=1.1", OcError::BadValue),
            (";oc=9999999999999;oc-seq=1.1", OcError::BadValue),
            (";oc=101;oc-algo=loss;oc-seq=1.1", OcError::LossAbove100),
            (";oc=10;oc-algo=\"loss,rate\";oc-seq=1.1", OcError::BadAlgo),
            (";oc=10;oc-algo=\"windows\";oc-seq=1.1", OcError::BadAlgo),
            (";oc=10;oc-algo;oc-seq=1.1", OcError::BadAlgo),
            (";oc=10;oc-validity=soon;oc-seq=1.1", OcError::BadValidity),
            (";oc=10;oc-validity;oc-seq=1.1", OcError::BadValidity),
            (";oc=10", OcError::MissingSeq),
            (";oc=10;oc-seq", OcError::BadSeq),
            (";oc=10;oc-seq=12", OcError::BadSeq),
            (";oc=10;oc-seq=.5", OcError::BadSeq),
            (";oc=10;oc-seq=1.123456", OcError::BadSeq),
            (";oc=10;oc-seq=1234567890123.1", OcError::BadSeq),
            (";oc=10;oc-seq=1.x", OcError::BadSeq),
        ] {
            assert_eq!(report(p), Err(e), "{p}");
        }
    }

    #[test]
    fn report_params_round_trip() {
        let r = OcReport {
            algo: OcAlgo::Loss,
            value: 37,
            validity_ms: 750,
            seq: 170_000_000_000_042,
        };
        let mut p = Vec::new();
        r.write_params(&mut p);
        assert_eq!(
            p,
            b";oc=37;oc-algo=\"loss\";oc-validity=750;oc-seq=1700000000.00042"
        );
        let back = report(std::str::from_utf8(&p).expect("ascii"));
        assert_eq!(back, Ok(Some(r)));
    }
}
