//! The load-control filter document (`application/load-control+xml`, RFC 7200 §6) on the
//! common-policy framework (RFC 4745): parsed from and built into XML.
//!
//! ```xml
//! <ruleset xmlns="urn:ietf:params:xml:ns:common-policy"
//!          xmlns:lc="urn:ietf:params:xml:ns:load-control">
//!   <rule id="hotline">
//!     <conditions>
//!       <lc:call-identity><lc:sip><lc:to>
//!         <one id="sip:hotline@example.com"/>
//!       </lc:to></lc:sip></lc:call-identity>
//!       <lc:method>INVITE</lc:method>
//!       <validity><from>2026-11-28T20:00:00Z</from><until>2026-11-28T22:00:00Z</until></validity>
//!     </conditions>
//!     <actions><lc:accept alg="rate">10</lc:accept></actions>
//!   </rule>
//! </ruleset>
//! ```
//!
//! Elements are matched by local name (any namespace prefix); elements this reader does not
//! know are skipped, as common-policy's extensibility asks. The XML reader is a small subset
//! reader of its own: elements, attributes, character data, the five predefined entities and
//! character references, comments, processing instructions and the XML declaration; no DTD,
//! no CDATA. Nothing in it panics on any input; depth and size are bounded.

use std::fmt::Write as _;

/// The MIME type of the document.
pub const CONTENT_TYPE: &str = "application/load-control+xml";
/// The event package name (RFC 7200 §4).
pub const EVENT_PACKAGE: &str = "load-control";
/// The load-control namespace.
pub const NS_LOAD_CONTROL: &str = "urn:ietf:params:xml:ns:load-control";
/// The common-policy namespace (RFC 4745).
pub const NS_COMMON_POLICY: &str = "urn:ietf:params:xml:ns:common-policy";

/// Largest document accepted, bytes.
pub const MAX_DOCUMENT: usize = 64 * 1024;
/// Deepest element nesting accepted.
const MAX_DEPTH: usize = 32;
/// Most rules in one document.
pub const MAX_RULES: usize = 256;

/// Why a document was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DocError {
    /// Larger than [`MAX_DOCUMENT`].
    #[error("document of {0} bytes (at most {MAX_DOCUMENT})")]
    TooLarge(usize),
    /// Not UTF-8.
    #[error("document is not UTF-8")]
    NotUtf8,
    /// Malformed XML at a byte offset.
    #[error("malformed XML at byte {at}: {what}")]
    Xml {
        /// Byte offset in the document.
        at: usize,
        /// What was wrong.
        what: &'static str,
    },
    /// The root element is not `<ruleset>`.
    #[error("root element is <{0}>, expected <ruleset>")]
    NotRuleset(String),
    /// More than [`MAX_RULES`] rules.
    #[error("more than {MAX_RULES} rules")]
    TooManyRules,
    /// A rule without its `id` attribute.
    #[error("rule #{0} has no id")]
    MissingId(usize),
    /// A rule's `<accept>` is absent, or has an algorithm this reader does not know.
    #[error("rule {rule}: {what}")]
    BadAction {
        /// The rule's id.
        rule: String,
        /// What was wrong.
        what: String,
    },
    /// A validity time is not an RFC 3339 date-time.
    #[error("rule {rule}: validity time `{value}` is not an RFC 3339 date-time")]
    BadTime {
        /// The rule's id.
        rule: String,
        /// The text.
        value: String,
    },
}

/// A set of filters: the whole state a NOTIFY carries (RFC 7200 §4: full state).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FilterSet {
    /// The rules, in document order.
    pub rules: Vec<FilterRule>,
}

/// One `<rule>`: conditions and the action on the calls that meet them.
#[derive(Clone, Debug, PartialEq)]
pub struct FilterRule {
    /// The rule's `id`.
    pub id: String,
    /// `<call-identity><sip><from>`: the callers (From URI) the rule is for; `None`: any.
    pub caller: Option<Identity>,
    /// `<call-identity><sip><to>`: the callees (Request-URI) the rule is for; `None`: any.
    pub callee: Option<Identity>,
    /// `<method>`: the methods the rule is for (upper case); empty: any.
    pub methods: Vec<String>,
    /// `<validity><from>`: Unix time (seconds) the rule starts to apply.
    pub valid_from: Option<i64>,
    /// `<validity><until>`: Unix time (seconds) the rule stops applying.
    pub valid_until: Option<i64>,
    /// What happens to the matching calls.
    pub action: Action,
}

/// A common-policy identity condition: `<one id=...>` and `<many domain=...>` children.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// `<one id="sip:user@host"/>`: exact identities.
    pub ones: Vec<String>,
    /// `<many domain="host"/>` (domain `None`: every identity), with its `<except>`s.
    pub many: Vec<Many>,
}

/// A `<many>` element.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Many {
    /// `domain`: the host identities must have; `None`: any.
    pub domain: Option<String>,
    /// `<except domain=...>`: hosts left out.
    pub except_domains: Vec<String>,
    /// `<except id=...>`: identities left out.
    pub except_ids: Vec<String>,
}

/// The `<accept>` action of a rule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Action {
    /// `alg="rate"`: accept at most this many matching calls per second.
    Rate(f64),
    /// `alg="loss"`: reject this percentage (0 to 100) of the matching calls.
    Loss(f64),
}

// ------------------------------------------------------------------ the XML subset reader

/// An element: its local name, attributes (local names) and children; text kept trimmed.
#[derive(Debug, Default)]
struct Element {
    name: String,
    attrs: Vec<(String, String)>,
    children: Vec<Self>,
    text: String,
}

impl Element {
    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn child(&self, name: &str) -> Option<&Self> {
        self.children.iter().find(|c| c.name == name)
    }

    fn children_named<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s Self> + 's {
        self.children.iter().filter(move |c| c.name == name)
    }
}

fn local(name: &str) -> &str {
    name.rsplit_once(':').map_or(name, |(_, l)| l)
}

struct Reader<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Reader<'a> {
    fn err(&self, what: &'static str) -> DocError {
        DocError::Xml { at: self.pos, what }
    }

    fn rest(&self) -> &'a str {
        self.s.get(self.pos..).unwrap_or("")
    }

    fn skip_ws(&mut self) {
        let r = self.rest();
        self.pos += r.len() - r.trim_start().len();
    }

    /// Skips the XML declaration, processing instructions and comments (and the whitespace
    /// around them).
    fn skip_misc(&mut self) -> Result<(), DocError> {
        loop {
            self.skip_ws();
            let r = self.rest();
            if r.starts_with("<?") {
                let end = r.find("?>").ok_or_else(|| self.err("unterminated <?"))?;
                self.pos += end + 2;
            } else if let Some(body) = r.strip_prefix("<!--") {
                let end = body
                    .find("-->")
                    .ok_or_else(|| self.err("unterminated comment"))?;
                self.pos += 4 + end + 3;
            } else if r.starts_with("<!") {
                return Err(self.err("DTDs and CDATA are not accepted"));
            } else {
                return Ok(());
            }
        }
    }

    fn name(&mut self) -> Result<&'a str, DocError> {
        let r = self.rest();
        let n = r
            .find(|c: char| c.is_whitespace() || matches!(c, '/' | '>' | '=' | '<'))
            .unwrap_or(r.len());
        if n == 0 {
            return Err(self.err("expected a name"));
        }
        let name = &r[..n];
        if name.contains(['"', '\'', '&']) {
            return Err(self.err("bad character in a name"));
        }
        self.pos += n;
        Ok(name)
    }

    fn element(&mut self, depth: usize) -> Result<Element, DocError> {
        if depth > MAX_DEPTH {
            return Err(self.err("nested too deep"));
        }
        if !self.rest().starts_with('<') {
            return Err(self.err("expected <"));
        }
        self.pos += 1;
        let qname = self.name()?;
        let mut el = Element {
            name: local(qname).to_owned(),
            ..Element::default()
        };
        loop {
            self.skip_ws();
            let r = self.rest();
            if r.starts_with("/>") {
                self.pos += 2;
                return Ok(el);
            }
            if r.starts_with('>') {
                self.pos += 1;
                break;
            }
            let an = self.name()?;
            self.skip_ws();
            if !self.rest().starts_with('=') {
                return Err(self.err("expected = after an attribute name"));
            }
            self.pos += 1;
            self.skip_ws();
            let q = self
                .rest()
                .chars()
                .next()
                .filter(|c| matches!(c, '"' | '\''))
                .ok_or_else(|| self.err("expected a quoted attribute value"))?;
            self.pos += 1;
            let end = self
                .rest()
                .find(q)
                .ok_or_else(|| self.err("unterminated attribute value"))?;
            let raw = &self.rest()[..end];
            if raw.contains('<') {
                return Err(self.err("< in an attribute value"));
            }
            let v = unescape(raw).ok_or_else(|| self.err("bad entity reference"))?;
            self.pos += end + 1;
            // Namespace declarations are not attributes of the document's model.
            if an != "xmlns" && !an.starts_with("xmlns:") {
                el.attrs.push((local(an).to_owned(), v));
            }
        }
        // Content: text, children, comments, until the matching end tag.
        loop {
            let r = self.rest();
            if r.is_empty() {
                return Err(self.err("unterminated element"));
            }
            if r.starts_with("</") {
                self.pos += 2;
                let end = self.name()?;
                if end != qname {
                    return Err(self.err("end tag does not match"));
                }
                self.skip_ws();
                if !self.rest().starts_with('>') {
                    return Err(self.err("expected > after an end tag"));
                }
                self.pos += 1;
                let t = el.text.trim();
                if t.len() != el.text.len() {
                    el.text = t.to_owned();
                }
                return Ok(el);
            }
            if r.starts_with("<!--") || r.starts_with("<?") || r.starts_with("<!") {
                self.skip_misc()?;
                continue;
            }
            if r.starts_with('<') {
                let child = self.element(depth + 1)?;
                el.children.push(child);
                continue;
            }
            let n = r.find('<').unwrap_or(r.len());
            let t = unescape(&r[..n]).ok_or_else(|| self.err("bad entity reference"))?;
            el.text.push_str(&t);
            self.pos += n;
        }
    }
}

/// Replaces the predefined entities and character references; `None` for a bad one.
fn unescape(s: &str) -> Option<String> {
    if !s.contains('&') {
        return Some(s.to_owned());
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let end = after.find(';')?;
        let ent = &after[..end];
        let c = match ent {
            "lt" => '<',
            "gt" => '>',
            "amp" => '&',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let n = if let Some(h) = ent.strip_prefix("#x") {
                    u32::from_str_radix(h, 16).ok()?
                } else {
                    ent.strip_prefix('#')?.parse::<u32>().ok()?
                };
                char::from_u32(n)?
            }
        };
        out.push(c);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Some(out)
}

fn escape(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
}

fn parse_xml(bytes: &[u8]) -> Result<Element, DocError> {
    if bytes.len() > MAX_DOCUMENT {
        return Err(DocError::TooLarge(bytes.len()));
    }
    let s = std::str::from_utf8(bytes).map_err(|_| DocError::NotUtf8)?;
    let s = s.strip_prefix('\u{feff}').unwrap_or(s);
    let mut r = Reader { s, pos: 0 };
    r.skip_misc()?;
    let root = r.element(0)?;
    r.skip_misc()?;
    if !r.rest().is_empty() {
        return Err(r.err("content after the root element"));
    }
    Ok(root)
}

// ------------------------------------------------------------------ the document model

impl FilterSet {
    /// Parses an `application/load-control+xml` document.
    pub fn parse(bytes: &[u8]) -> Result<Self, DocError> {
        let root = parse_xml(bytes)?;
        if root.name != "ruleset" {
            return Err(DocError::NotRuleset(root.name));
        }
        let mut rules = Vec::new();
        for (i, r) in root.children_named("rule").enumerate() {
            if i >= MAX_RULES {
                return Err(DocError::TooManyRules);
            }
            rules.push(FilterRule::from_element(i, r)?);
        }
        Ok(Self { rules })
    }

    /// The document, as [`parse`](Self::parse) reads it back.
    pub fn to_xml(&self) -> String {
        let mut o = String::with_capacity(256 + 400 * self.rules.len());
        o.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let _ = writeln!(
            o,
            "<ruleset xmlns=\"{NS_COMMON_POLICY}\" xmlns:lc=\"{NS_LOAD_CONTROL}\">"
        );
        for r in &self.rules {
            r.write_xml(&mut o);
        }
        o.push_str("</ruleset>\n");
        o
    }
}

fn identity_from(el: &Element) -> Identity {
    let mut id = Identity::default();
    for c in &el.children {
        match c.name.as_str() {
            "one" => {
                if let Some(v) = c.attr("id") {
                    id.ones.push(v.to_owned());
                }
            }
            "many" => {
                let mut m = Many {
                    domain: c.attr("domain").map(str::to_owned),
                    ..Many::default()
                };
                for e in c.children_named("except") {
                    if let Some(d) = e.attr("domain") {
                        m.except_domains.push(d.to_owned());
                    }
                    if let Some(i) = e.attr("id") {
                        m.except_ids.push(i.to_owned());
                    }
                }
                id.many.push(m);
            }
            _ => {}
        }
    }
    id
}

impl FilterRule {
    fn from_element(index: usize, r: &Element) -> Result<Self, DocError> {
        let id = r
            .attr("id")
            .filter(|s| !s.is_empty())
            .ok_or(DocError::MissingId(index))?
            .to_owned();
        let mut rule = Self {
            id,
            caller: None,
            callee: None,
            methods: Vec::new(),
            valid_from: None,
            valid_until: None,
            action: Action::Rate(0.0),
        };
        if let Some(c) = r.child("conditions") {
            if let Some(sip) = c.child("call-identity").and_then(|ci| ci.child("sip")) {
                rule.caller = sip.child("from").map(identity_from);
                rule.callee = sip.child("to").map(identity_from);
            }
            for m in c.children_named("method") {
                if !m.text.is_empty() {
                    rule.methods.push(m.text.to_ascii_uppercase());
                }
            }
            if let Some(v) = c.child("validity") {
                let time = |name: &str| -> Result<Option<i64>, DocError> {
                    match v.child(name) {
                        None => Ok(None),
                        Some(e) => {
                            parse_rfc3339(&e.text)
                                .map(Some)
                                .ok_or_else(|| DocError::BadTime {
                                    rule: rule.id.clone(),
                                    value: e.text.clone(),
                                })
                        }
                    }
                };
                rule.valid_from = time("from")?;
                rule.valid_until = time("until")?;
            }
        }
        let bad = |what: String| DocError::BadAction {
            rule: rule.id.clone(),
            what,
        };
        let accept = r
            .child("actions")
            .and_then(|a| a.child("accept"))
            .ok_or_else(|| bad("no <accept> action".into()))?;
        let value: f64 = accept
            .text
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| {
                bad(format!(
                    "<accept> value `{}` is not a number >= 0",
                    accept.text
                ))
            })?;
        rule.action = match accept.attr("alg").unwrap_or("rate") {
            "rate" => Action::Rate(value),
            "loss" if value <= 100.0 => Action::Loss(value),
            "loss" => return Err(bad(format!("loss of {value}% (at most 100)"))),
            other => return Err(bad(format!("unknown algorithm `{other}`"))),
        };
        Ok(rule)
    }

    fn write_xml(&self, o: &mut String) {
        o.push_str("  <rule id=\"");
        escape(&self.id, o);
        o.push_str("\">\n    <conditions>\n");
        if self.caller.is_some() || self.callee.is_some() {
            o.push_str("      <lc:call-identity><lc:sip>\n");
            for (tag, id) in [("from", &self.caller), ("to", &self.callee)] {
                if let Some(id) = id {
                    let _ = writeln!(o, "        <lc:{tag}>");
                    write_identity(id, o);
                    let _ = writeln!(o, "        </lc:{tag}>");
                }
            }
            o.push_str("      </lc:sip></lc:call-identity>\n");
        }
        for m in &self.methods {
            o.push_str("      <lc:method>");
            escape(m, o);
            o.push_str("</lc:method>\n");
        }
        if self.valid_from.is_some() || self.valid_until.is_some() {
            o.push_str("      <validity>");
            if let Some(t) = self.valid_from {
                let _ = write!(o, "<from>{}</from>", format_rfc3339(t));
            }
            if let Some(t) = self.valid_until {
                let _ = write!(o, "<until>{}</until>", format_rfc3339(t));
            }
            o.push_str("</validity>\n");
        }
        o.push_str("    </conditions>\n    <actions>\n");
        let (alg, v) = match self.action {
            Action::Rate(v) => ("rate", v),
            Action::Loss(v) => ("loss", v),
        };
        let _ = writeln!(o, "      <lc:accept alg=\"{alg}\">{v}</lc:accept>");
        o.push_str("    </actions>\n  </rule>\n");
    }
}

fn write_identity(id: &Identity, o: &mut String) {
    for one in &id.ones {
        o.push_str("          <one id=\"");
        escape(one, o);
        o.push_str("\"/>\n");
    }
    for m in &id.many {
        o.push_str("          <many");
        if let Some(d) = &m.domain {
            o.push_str(" domain=\"");
            escape(d, o);
            o.push('"');
        }
        if m.except_domains.is_empty() && m.except_ids.is_empty() {
            o.push_str("/>\n");
            continue;
        }
        o.push_str(">\n");
        for d in &m.except_domains {
            o.push_str("            <except domain=\"");
            escape(d, o);
            o.push_str("\"/>\n");
        }
        for i in &m.except_ids {
            o.push_str("            <except id=\"");
            escape(i, o);
            o.push_str("\"/>\n");
        }
        o.push_str("          </many>\n");
    }
}

// ------------------------------------------------------------------ RFC 3339 times

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn digits(s: &str, range: std::ops::Range<usize>) -> Option<i64> {
    let t = s.get(range)?;
    if !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
}

/// An RFC 3339 date-time (`2026-11-28T20:00:00Z`, fractions and offsets allowed) as Unix
/// seconds (fractions dropped).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let s = s.trim();
    let b = s.as_bytes();
    if b.len() < 20
        || b.get(4) != Some(&b'-')
        || b.get(7) != Some(&b'-')
        || !matches!(b.get(10), Some(b'T' | b't' | b' '))
        || b.get(13) != Some(&b':')
        || b.get(16) != Some(&b':')
    {
        return None;
    }
    let (y, mo, d) = (digits(s, 0..4)?, digits(s, 5..7)?, digits(s, 8..10)?);
    let (h, mi, sec) = (digits(s, 11..13)?, digits(s, 14..16)?, digits(s, 17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b.get(i + 3) == Some(&b':') => {
            let (oh, om) = (digits(s, i + 1..i + 3)?, digits(s, i + 4..i + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let o = oh * 3600 + om * 60;
            if *sign == b'+' { o } else { -o }
        }
        _ => return None,
    };
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset)
}

/// Unix seconds as an RFC 3339 date-time in UTC.
pub fn format_rfc3339(t: i64) -> String {
    let (days, secs) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}
