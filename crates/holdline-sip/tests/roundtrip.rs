//! Property tests: generated SIP messages parse into exactly what was generated, and the edits
//! a proxy makes keep every other header line byte for byte.

use std::ops::RangeInclusive;

use holdline_base::Transport;
use holdline_sip::{Editor, HeaderName, Limits, Message};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

/// What a generated header field is, for the checks.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Role {
    Via(Vec<String>),
    Route(Vec<String>),
    MaxForwards(u32),
    Other,
}

#[derive(Clone, Debug)]
struct Field {
    name: String,
    /// White space between the name and the colon.
    before: &'static str,
    /// White space between the colon and the value.
    after: &'static str,
    value: String,
    role: Role,
}

impl Field {
    fn line(&self) -> String {
        format!(
            "{}{}:{}{}\r\n",
            self.name, self.before, self.after, self.value
        )
    }
}

#[derive(Clone, Debug)]
struct Gen {
    leading: &'static str,
    start: String,
    /// Method and Request-URI of a request.
    request: Option<(String, String)>,
    fields: Vec<Field>,
    body: Vec<u8>,
}

impl Gen {
    fn bytes(&self) -> Vec<u8> {
        let mut s = format!("{}{}\r\n", self.leading, self.start);
        for f in &self.fields {
            s.push_str(&f.line());
        }
        s.push_str("\r\n");
        let mut b = s.into_bytes();
        b.extend_from_slice(&self.body);
        b
    }

    fn vias(&self) -> Vec<String> {
        self.fields
            .iter()
            .flat_map(|f| match &f.role {
                Role::Via(v) => v.clone(),
                _ => Vec::new(),
            })
            .collect()
    }

    fn routes(&self) -> Vec<String> {
        self.fields
            .iter()
            .flat_map(|f| match &f.role {
                Role::Route(v) => v.clone(),
                _ => Vec::new(),
            })
            .collect()
    }

    fn max_forwards(&self) -> Option<u32> {
        self.fields.iter().find_map(|f| match f.role {
            Role::MaxForwards(n) => Some(n),
            _ => None,
        })
    }
}

/// `s` with the case of every letter chosen at random.
fn cased(s: &'static str) -> impl Strategy<Value = String> {
    vec(any::<bool>(), s.len()).prop_map(move |up| {
        s.chars()
            .zip(up)
            .map(|(c, u)| {
                if u {
                    c.to_ascii_uppercase()
                } else {
                    c.to_ascii_lowercase()
                }
            })
            .collect()
    })
}

fn name(options: &'static [&'static str]) -> impl Strategy<Value = String> {
    select(options).prop_flat_map(cased)
}

fn spacing() -> impl Strategy<Value = (&'static str, &'static str)> {
    (
        select(&["", "", " ", "\t"][..]),
        select(&["", " ", " ", "  ", "\t"][..]),
    )
}

fn field(
    names: &'static [&'static str],
    value: impl Strategy<Value = String>,
) -> impl Strategy<Value = Field> {
    (name(names), spacing(), value).prop_map(|(name, (before, after), value)| Field {
        name,
        before,
        after,
        value,
        role: Role::Other,
    })
}

fn host() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9]{0,7}(\\.[a-z]{2,5}){0,2}",
        (any::<u8>(), any::<u8>()).prop_map(|(a, b)| format!("10.{a}.{b}.1")),
        Just("[2001:db8::1]".to_string()),
    ]
}

fn via_element() -> impl Strategy<Value = String> {
    (
        select(&["UDP", "TCP", "TLS", "SCTP", "udp"][..]),
        host(),
        proptest::option::of(1u16..),
        "[a-zA-Z0-9]{4,12}",
        any::<bool>(),
    )
        .prop_map(|(t, h, port, branch, rport)| {
            let port = port.map(|p| format!(":{p}")).unwrap_or_default();
            let rport = if rport { ";rport" } else { "" };
            format!("SIP/2.0/{t} {h}{port};branch=z9hG4bK{branch}{rport}")
        })
}

fn route_element() -> impl Strategy<Value = String> {
    (host(), any::<bool>()).prop_map(|(h, lr)| format!("<sip:{h}{}>", if lr { ";lr" } else { "" }))
}

/// `count` elements of a list header, each either on its own line or joined to the previous
/// one with a comma (sometimes across a fold).
fn list_fields(
    names: &'static [&'static str],
    element: impl Strategy<Value = String>,
    count: RangeInclusive<usize>,
    role: fn(Vec<String>) -> Role,
) -> impl Strategy<Value = Vec<Field>> {
    let sep = select(&[", ", ",", " ,  ", ",\r\n ", " ,\r\n\t"][..]);
    vec((element, any::<bool>(), sep, name(names), spacing()), count).prop_map(move |elems| {
        let mut fields: Vec<(Field, Vec<String>)> = Vec::new();
        for (e, join, sep, name, (before, after)) in elems {
            match fields.last_mut() {
                Some((f, list)) if join => {
                    f.value.push_str(sep);
                    f.value.push_str(&e);
                    list.push(e);
                }
                _ => fields.push((
                    Field {
                        name,
                        before,
                        after,
                        value: e.clone(),
                        role: Role::Other,
                    },
                    vec![e],
                )),
            }
        }
        fields
            .into_iter()
            .map(|(mut f, list)| {
                f.role = role(list);
                f
            })
            .collect()
    })
}

/// A header holdline has no special role for, possibly folded.
fn extra_field() -> impl Strategy<Value = Field> {
    let names: &'static [&'static str] = &[
        "Subject",
        "s",
        "Supported",
        "k",
        "Contact",
        "m",
        "User-Agent",
        "Allow",
        "c",
        "Content-Type",
        "X-Custom",
        "P-Asserted-Identity",
        "Record-Route-Not",
    ];
    let value = "[!-~]([ -~]{0,18}[!-~])?";
    let fold = proptest::option::of((select(&["\r\n ", "\r\n\t", "\r\n   "][..]), value));
    (field(names, value), fold).prop_map(|(mut f, fold)| {
        if let Some((fold, more)) = fold {
            f.value = format!("{}{fold}{more}", f.value);
        }
        f
    })
}

fn tagged(names: &'static [&'static str]) -> impl Strategy<Value = Field> {
    let value = (
        proptest::option::of("\"[A-Za-z ]{1,10}\" |[A-Za-z]{1,8} "),
        "[a-z]{1,8}",
        host(),
        "[a-zA-Z0-9]{1,10}",
    )
        .prop_map(|(display, user, host, tag)| {
            format!(
                "{}<sip:{user}@{host}>;tag={tag}",
                display.unwrap_or_default()
            )
        });
    field(names, value)
}

/// The headers every generated message has, plus a body with its Content-Length.
fn common_fields(
    method: String,
    max_forwards: Option<u32>,
) -> impl Strategy<Value = (Vec<Field>, Vec<u8>)> {
    (
        list_fields(&["Via", "v"], via_element(), 1..=3, Role::Via),
        list_fields(&["Route"], route_element(), 0..=2, Role::Route),
        tagged(&["From", "f"]),
        tagged(&["To", "t"]),
        field(
            &["Call-ID", "i"],
            "[a-zA-Z0-9]{6,16}(@[a-z]{1,8}\\.example)?",
        ),
        field(
            &["CSeq"],
            (1u32..100_000).prop_map(move |n| format!("{n} {method}")),
        ),
        vec(extra_field(), 0..=4),
        proptest::option::of("[ -~\r\n]{1,80}"),
        (name(&["Content-Length", "l"]), spacing(), any::<bool>()),
    )
        .prop_map(
            move |(vias, routes, from, to, call_id, cseq, extras, body, (cl_name, (b, a), cl))| {
                let mut fields = vias;
                fields.extend(routes);
                fields.extend([from, to, call_id, cseq]);
                if let Some(n) = max_forwards {
                    fields.push(Field {
                        name: "Max-Forwards".into(),
                        before: "",
                        after: " ",
                        value: n.to_string(),
                        role: Role::MaxForwards(n),
                    });
                }
                fields.extend(extras);
                let body = body.unwrap_or_default().into_bytes();
                if cl || !body.is_empty() {
                    fields.push(Field {
                        name: cl_name,
                        before: b,
                        after: a,
                        value: body.len().to_string(),
                        role: Role::Other,
                    });
                }
                (fields, body)
            },
        )
        .prop_flat_map(|(fields, body)| (Just(fields).prop_shuffle(), Just(body)))
}

fn request() -> impl Strategy<Value = Gen> {
    let method = prop_oneof![
        select(
            &[
                "INVITE",
                "ACK",
                "BYE",
                "CANCEL",
                "OPTIONS",
                "REGISTER",
                "MESSAGE",
                "SUBSCRIBE"
            ][..]
        )
        .prop_map(String::from),
        "[A-Z][A-Za-z0-9.!%*_+`'~-]{1,9}",
    ];
    let uri = prop_oneof![
        (host(), proptest::option::of(1u16..)).prop_map(|(h, p)| format!(
            "sip:bob@{h}{}",
            p.map(|p| format!(":{p}")).unwrap_or_default()
        )),
        (host(), any::<bool>())
            .prop_map(|(h, t)| format!("sips:{h}{}", if t { ";transport=tcp" } else { "" })),
        "tel:\\+[0-9]{5,12}",
    ];
    let max_forwards = proptest::option::weighted(0.9, 1u32..=70);
    (
        select(&["", "\r\n", "\r\n\r\n"][..]),
        method,
        uri,
        max_forwards,
    )
        .prop_flat_map(|(leading, method, uri, mf)| {
            common_fields(method.clone(), mf).prop_map(move |(fields, body)| Gen {
                leading,
                start: format!("{method} {uri} SIP/2.0"),
                request: Some((method.clone(), uri.clone())),
                fields,
                body,
            })
        })
}

fn response() -> impl Strategy<Value = Gen> {
    (100u16..=699, "([A-Za-z]{1,8}( [A-Za-z]{1,8})?)?").prop_flat_map(|(code, reason)| {
        common_fields("INVITE".into(), None).prop_map(move |(fields, body)| Gen {
            leading: "",
            start: format!("SIP/2.0 {code} {reason}"),
            request: None,
            fields,
            body,
        })
    })
}

fn parse(buf: &[u8]) -> Message<'_> {
    match Message::parse(buf, &Limits::DEFAULT) {
        Ok(m) => m,
        Err(e) => panic!("{e}: {}", String::from_utf8_lossy(buf)),
    }
}

fn emit(ed: &Editor<'_, '_>) -> Vec<u8> {
    let mut out = Vec::new();
    ed.emit(&mut out);
    assert_eq!(out.len(), ed.emitted_len());
    out
}

fn values<'a>(msg: &Message<'a>, kind: HeaderName) -> Vec<&'a [u8]> {
    msg.values(kind).map(|v| v.bytes).collect()
}

fn lines<'a>(msg: &Message<'a>) -> Vec<&'a [u8]> {
    msg.headers()
        .iter()
        .map(|h| msg.slice(h.line_span()))
        .collect()
}

/// Index of the header holding the first element of `kind`.
fn first_of(msg: &Message<'_>, kind: HeaderName) -> Option<usize> {
    msg.values(kind).next().map(|v| v.header)
}

fn without(mut v: Vec<&[u8]>, idx: Option<usize>) -> Vec<&[u8]> {
    if let Some(i) = idx {
        v.remove(i);
    }
    v
}

fn check_index(g: &Gen) {
    let buf = g.bytes();
    let msg = parse(&buf);
    assert_eq!(msg.headers().len(), g.fields.len());
    for (h, f) in msg.headers().iter().zip(&g.fields) {
        assert_eq!(msg.name(h), f.name.as_bytes());
        assert_eq!(msg.value(h), f.value.as_bytes());
        let kind = match f.role {
            Role::Via(_) => Some(HeaderName::Via),
            Role::Route(_) => Some(HeaderName::Route),
            Role::MaxForwards(_) => Some(HeaderName::MaxForwards),
            Role::Other => None,
        };
        if let Some(k) = kind {
            assert_eq!(h.kind, k);
        }
    }
    assert_eq!(msg.body(), &g.body[..]);
    let vias = g.vias();
    assert_eq!(
        values(&msg, HeaderName::Via),
        vias.iter().map(|s| s.as_bytes()).collect::<Vec<_>>()
    );
    let routes = g.routes();
    assert_eq!(
        values(&msg, HeaderName::Route),
        routes.iter().map(|s| s.as_bytes()).collect::<Vec<_>>()
    );
    assert_eq!(msg.max_forwards(), Ok(g.max_forwards()));
    match &g.request {
        Some((method, uri)) => {
            assert_eq!(msg.method().map(|m| m.as_bytes()), Some(method.as_bytes()));
            assert_eq!(msg.request_uri_bytes(), Some(uri.as_bytes()));
        }
        None => assert!(!msg.is_request()),
    }
    // Unedited, the emitted message is the message itself.
    assert_eq!(emit(&Editor::new(&msg)), msg.as_bytes());
}

const PUSHED: &str = "SIP/2.0/UDP proxy.example.net:5060;branch=z9hG4bKproxy1;rport";
const PUSHED_LINE: &[u8] =
    b"Via: SIP/2.0/UDP proxy.example.net:5060;branch=z9hG4bKproxy1;rport\r\n";
const RR: &str = "<sip:proxy.example.net;lr>";
const RR_LINE: &[u8] = b"Record-Route: <sip:proxy.example.net;lr>\r\n";

fn check_proxy_edit(g: &Gen) {
    let buf = g.bytes();
    let msg = parse(&buf);
    let mut ed = Editor::new(&msg);
    ed.push_via(
        Transport::Udp,
        b"proxy.example.net:5060",
        b"z9hG4bKproxy1",
        true,
    )
    .expect("push via");
    let mf = ed.decrement_max_forwards().expect("max-forwards");
    ed.add_record_route(RR.as_bytes()).expect("record-route");
    let routes = g.routes();
    let top_route = msg.values(HeaderName::Route).next();
    if routes.is_empty() {
        assert!(ed.pop_route().is_err());
    } else {
        assert_eq!(
            ed.pop_route().expect("pop route").bytes,
            routes[0].as_bytes()
        );
    }
    let out = emit(&ed);
    let edited = parse(&out);

    let mut vias = vec![PUSHED.to_string()];
    vias.extend(g.vias());
    assert_eq!(
        values(&edited, HeaderName::Via),
        vias.iter().map(|s| s.as_bytes()).collect::<Vec<_>>()
    );
    assert_eq!(mf, g.max_forwards().map_or(70, |n| n - 1));
    assert_eq!(edited.max_forwards(), Ok(Some(mf)));
    assert_eq!(
        edited.first_value(HeaderName::RecordRoute),
        Some(RR.as_bytes())
    );
    let rest: Vec<&[u8]> = routes.iter().skip(1).map(|s| s.as_bytes()).collect();
    assert_eq!(values(&edited, HeaderName::Route), rest);
    assert_eq!(edited.request_uri_bytes(), msg.request_uri_bytes());
    assert_eq!(edited.body(), msg.body());

    // Every line not edited is there, byte for byte, in the same order.
    let mut got = lines(&edited);
    for new in [PUSHED_LINE, RR_LINE] {
        let at = got.iter().position(|l| *l == new).expect("new line");
        got.remove(at);
    }
    let mf_line = got
        .iter()
        .position(|l| HeaderName::lookup(name_of(l)) == HeaderName::MaxForwards)
        .expect("max-forwards line");
    got.remove(mf_line);
    if top_route.is_some_and(|r| !r.alone) {
        let i = got
            .iter()
            .position(|l| HeaderName::lookup(name_of(l)) == HeaderName::Route)
            .expect("route line");
        got.remove(i);
    }
    let mut expected = lines(&msg);
    let mut drop: Vec<usize> = [
        msg.first_index(HeaderName::MaxForwards),
        top_route.map(|r| r.header),
    ]
    .into_iter()
    .flatten()
    .collect();
    drop.sort_unstable();
    for i in drop.into_iter().rev() {
        expected.remove(i);
    }
    assert_eq!(got, expected);
}

fn name_of(line: &[u8]) -> &[u8] {
    let colon = line.iter().position(|&b| b == b':').unwrap_or(line.len());
    let name = &line[..colon];
    let end = name
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(0, |e| e + 1);
    &name[..end]
}

fn check_pop_via(g: &Gen) {
    let buf = g.bytes();
    let msg = parse(&buf);
    let mut ed = Editor::new(&msg);
    let top = ed.pop_via().expect("pop via");
    let vias = g.vias();
    assert_eq!(top.bytes, vias[0].as_bytes());
    let out = emit(&ed);
    let edited = parse(&out);
    let rest: Vec<&[u8]> = vias.iter().skip(1).map(|s| s.as_bytes()).collect();
    assert_eq!(values(&edited, HeaderName::Via), rest);
    assert_eq!(edited.status(), msg.status());
    assert_eq!(edited.body(), msg.body());
    let expected = without(lines(&msg), Some(top.header));
    let got = without(
        lines(&edited),
        if top.alone {
            None
        } else {
            first_of(&edited, HeaderName::Via)
        },
    );
    assert_eq!(got, expected);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn requests_index_exactly(g in request()) {
        check_index(&g);
    }

    #[test]
    fn responses_index_exactly(g in response()) {
        check_index(&g);
    }

    #[test]
    fn proxy_edit_keeps_other_lines(g in request()) {
        check_proxy_edit(&g);
    }

    #[test]
    fn response_pop_via_keeps_the_rest(g in response()) {
        check_pop_via(&g);
    }
}
