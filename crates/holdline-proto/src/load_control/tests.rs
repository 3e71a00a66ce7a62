use std::net::SocketAddr;

use holdline_base::{Duration, Instant};
use proptest::prelude::*;

use super::*;

const HOTLINE_DOC: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<!-- a flash crowd to one number -->
<ruleset xmlns="urn:ietf:params:xml:ns:common-policy"
         xmlns:lc="urn:ietf:params:xml:ns:load-control">
  <rule id="f3g44k1">
    <conditions>
      <lc:call-identity>
        <lc:sip>
          <lc:to>
            <one id="sip:hotline@Example.COM;user=phone"/>
          </lc:to>
        </lc:sip>
      </lc:call-identity>
      <lc:method>INVITE</lc:method>
      <validity>
        <from>2026-11-28T12:00:00-05:00</from>
        <until>2026-11-28T14:00:00-05:00</until>
      </validity>
      <lc:unknown-extension a='1'>ignored</lc:unknown-extension>
    </conditions>
    <actions>
      <lc:accept alg="rate">10</lc:accept>
    </actions>
  </rule>
  <rule id="r2">
    <conditions>
      <lc:call-identity><lc:sip><lc:from>
        <many domain="spam.example"><except id="sip:ok@spam.example"/></many>
      </lc:from></lc:sip></lc:call-identity>
    </conditions>
    <actions><lc:accept alg="loss">25</lc:accept></actions>
  </rule>
</ruleset>
"#;

fn t(s: &str) -> i64 {
    parse_rfc3339(s).unwrap_or(i64::MIN)
}

#[test]
fn the_rfc_style_document_parses() {
    let set = FilterSet::parse(HOTLINE_DOC.as_bytes()).expect("parses");
    assert_eq!(set.rules.len(), 2);
    let r = &set.rules[0];
    assert_eq!(r.id, "f3g44k1");
    assert_eq!(r.methods, ["INVITE"]);
    assert_eq!(
        r.callee.as_ref().map(|c| c.ones.clone()),
        Some(vec!["sip:hotline@Example.COM;user=phone".to_owned()])
    );
    assert_eq!(r.caller, None);
    assert_eq!(r.valid_from, Some(t("2026-11-28T17:00:00Z")));
    assert_eq!(r.valid_until, Some(t("2026-11-28T19:00:00Z")));
    assert_eq!(r.action, Action::Rate(10.0));
    let r2 = &set.rules[1];
    assert_eq!(r2.action, Action::Loss(25.0));
    let many = &r2.caller.as_ref().expect("from").many[0];
    assert_eq!(many.domain.as_deref(), Some("spam.example"));
    assert_eq!(many.except_ids, ["sip:ok@spam.example"]);
}

#[test]
fn built_documents_read_back_the_same() {
    let set = FilterSet::parse(HOTLINE_DOC.as_bytes()).expect("parses");
    let xml = set.to_xml();
    assert_eq!(FilterSet::parse(xml.as_bytes()), Ok(set));
    assert_eq!(
        FilterSet::parse(FilterSet::default().to_xml().as_bytes()),
        Ok(FilterSet::default())
    );
}

#[test]
fn bad_documents_are_typed_errors() {
    let e = |s: &str| FilterSet::parse(s.as_bytes()).expect_err(s);
    assert!(matches!(e(""), DocError::Xml { .. }));
    assert!(matches!(e("<ruleset>"), DocError::Xml { .. }));
    assert!(matches!(e("<ruleset></rule>"), DocError::Xml { .. }));
    assert!(matches!(e("<a/>"), DocError::NotRuleset(n) if n == "a"));
    assert!(matches!(e("<ruleset/><x/>"), DocError::Xml { .. }));
    assert!(matches!(e("<!DOCTYPE x><ruleset/>"), DocError::Xml { .. }));
    assert!(matches!(
        e("<ruleset><rule/></ruleset>"),
        DocError::MissingId(0)
    ));
    assert!(matches!(
        e("<ruleset><rule id='a'><actions/></rule></ruleset>"),
        DocError::BadAction { .. }
    ));
    assert!(matches!(
        e("<ruleset><rule id='a'><actions><accept alg='win'>3</accept></actions></rule></ruleset>"),
        DocError::BadAction { what, .. } if what.contains("win")
    ));
    assert!(matches!(
        e(
            "<ruleset><rule id='a'><actions><accept alg='loss'>120</accept></actions></rule></ruleset>"
        ),
        DocError::BadAction { .. }
    ));
    assert!(matches!(
        e("<ruleset><rule id='a'><actions><accept>-1</accept></actions></rule></ruleset>"),
        DocError::BadAction { .. }
    ));
    assert!(matches!(
        e(
            "<ruleset><rule id='a'><conditions><validity><from>yesterday</from></validity></conditions><actions><accept>1</accept></actions></rule></ruleset>"
        ),
        DocError::BadTime { .. }
    ));
    assert!(matches!(e("<ruleset a='&bogus;'/>"), DocError::Xml { .. }));
    assert!(matches!(
        FilterSet::parse(&[0xff, 0xfe]),
        Err(DocError::NotUtf8)
    ));
    let deep = "<a>".repeat(100);
    assert!(matches!(e(&deep), DocError::Xml { .. }));
    let big = " ".repeat(doc::MAX_DOCUMENT + 1);
    assert!(matches!(e(&big), DocError::TooLarge(_)));
}

#[test]
fn rfc3339_times_round_trip() {
    assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
    assert_eq!(
        parse_rfc3339("2000-03-01T00:00:00.123+01:00"),
        Some(951_865_200)
    );
    assert_eq!(format_rfc3339(951_868_800), "2000-03-01T00:00:00Z");
    for bad in [
        "2000-13-01T00:00:00Z",
        "2000-01-01T00:00:00",
        "2000-01-01T00:00:00+1",
        "x",
    ] {
        assert_eq!(parse_rfc3339(bad), None, "{bad}");
    }
}

fn call<'a>(callee: &'a str, caller: &'a str) -> CallView<'a> {
    CallView {
        method: b"INVITE",
        caller: Some(caller.as_bytes()),
        callee: Some(callee.as_bytes()),
    }
}

fn rate_rule(rate: f64) -> FilterSet {
    FilterSet {
        rules: vec![FilterRule {
            id: "hot".into(),
            caller: None,
            callee: Some(Identity {
                ones: vec!["sip:hotline@example.com".into()],
                many: Vec::new(),
            }),
            methods: vec!["INVITE".into()],
            valid_from: None,
            valid_until: None,
            action: Action::Rate(rate),
        }],
    }
}

/// Offers `offered` calls/s evenly for `secs` seconds on a virtual clock; returns accepted.
fn offer(f: &mut LoadFilter, offered: u64, secs: u64, callee: &str) -> u64 {
    let mut accepted = 0;
    for i in 0..offered * secs {
        let now = Instant::from_nanos(i * 1_000_000_000 / offered);
        if f.decide(now, 0, &call(callee, "sip:a@x.example")) != Verdict::Reject("hot".into()) {
            accepted += 1;
        }
    }
    accepted
}

#[test]
fn a_rate_rule_holds_its_calls_to_the_rate_and_lets_others_pass() {
    let mut f = LoadFilter::new(rate_rule(10.0));
    // 100 calls/s to the hotline for 20 s: 10 calls/s pass (plus the initial burst of 2).
    let accepted = offer(&mut f, 100, 20, "sip:hotline@example.com");
    assert!((200..=203).contains(&accepted), "{accepted}");
    // Every call to another number passes, and nothing is matched.
    let mut f = LoadFilter::new(rate_rule(10.0));
    assert_eq!(offer(&mut f, 100, 20, "sip:user7@example.com"), 2000);
    assert_eq!(
        f.decide(Instant::ZERO, 0, &call("sip:user7@example.com", "sip:a@b")),
        Verdict::NoMatch
    );
    // The same number in another spelling (host case, port, parameters) is the same callee.
    let mut f = LoadFilter::new(rate_rule(1.0));
    let c = call("sip:hotline@EXAMPLE.com:5060;user=phone", "sip:a@b");
    assert_eq!(f.decide(Instant::ZERO, 0, &c), Verdict::Accept);
    assert_eq!(
        f.decide(Instant::ZERO, 0, &c),
        Verdict::Reject("hot".into())
    );
    // Below the rate every call passes.
    let mut f = LoadFilter::new(rate_rule(10.0));
    assert_eq!(offer(&mut f, 5, 20, "sip:hotline@example.com"), 100);
}

#[test]
fn a_loss_rule_turns_away_its_percentage() {
    let mut set = rate_rule(0.0);
    set.rules[0].action = Action::Loss(30.0);
    let mut f = LoadFilter::new(set);
    let accepted = offer(&mut f, 100, 10, "sip:hotline@example.com");
    assert!((699..=701).contains(&accepted), "{accepted}");
}

#[test]
fn validity_times_and_methods_are_honoured() {
    let mut set = rate_rule(0.0);
    set.rules[0].valid_from = Some(1000);
    set.rules[0].valid_until = Some(2000);
    let mut f = LoadFilter::new(set);
    let c = call("sip:hotline@example.com", "sip:a@b");
    // rate 0: the one initial token, then nothing while valid.
    assert_eq!(f.decide(Instant::ZERO, 1500, &c), Verdict::Accept);
    assert_eq!(
        f.decide(Instant::ZERO, 1500, &c),
        Verdict::Reject("hot".into())
    );
    assert_eq!(f.decide(Instant::ZERO, 999, &c), Verdict::NoMatch);
    assert_eq!(f.decide(Instant::ZERO, 2000, &c), Verdict::NoMatch);
    let options = CallView {
        method: b"OPTIONS",
        ..c
    };
    assert_eq!(f.decide(Instant::ZERO, 1500, &options), Verdict::NoMatch);
}

#[test]
fn caller_domains_with_exceptions_match() {
    let set = FilterSet::parse(HOTLINE_DOC.as_bytes()).expect("parses");
    let mut f = LoadFilter::new(set);
    let wall = t("2026-11-28T10:00:00Z"); // the hotline rule is not yet valid
    let spam = call("sip:someone@example.com", "sip:bot@SPAM.example");
    let ok = call("sip:someone@example.com", "sip:ok@spam.example");
    let mut passed = 0;
    for i in 0..100 {
        assert_eq!(f.decide(Instant::from_secs(i), wall, &ok), Verdict::NoMatch);
        if f.decide(Instant::from_secs(i), wall, &spam) == Verdict::Accept {
            passed += 1;
        }
    }
    assert_eq!(passed, 75);
}

#[test]
fn shared_filters_apply_per_notifier_and_are_replaced_whole() {
    let s = SharedFilters::new();
    let (b, c) = (
        SocketAddr::from(([127, 0, 0, 2], 5060)),
        SocketAddr::from(([127, 0, 0, 3], 5060)),
    );
    let hot = call("sip:hotline@example.com", "sip:a@b");
    assert_eq!(s.decide(Instant::ZERO, 0, b, &hot), Verdict::NoMatch);
    s.install(b, rate_rule(0.0));
    assert_eq!(s.rules(), 1);
    assert_eq!(s.decide(Instant::ZERO, 0, b, &hot), Verdict::Accept);
    assert_eq!(
        s.decide(Instant::ZERO, 0, b, &hot),
        Verdict::Reject("hot".into())
    );
    assert_eq!(s.decide(Instant::ZERO, 0, c, &hot), Verdict::NoMatch);
    // The same rule again (a refresh) keeps its empty bucket; a changed one starts full.
    s.install(b, rate_rule(0.0));
    assert_eq!(
        s.decide(Instant::ZERO, 0, b, &hot),
        Verdict::Reject("hot".into())
    );
    s.install(b, rate_rule(0.5));
    assert_eq!(s.decide(Instant::ZERO, 0, b, &hot), Verdict::Accept);
    s.clear(b);
    assert_eq!(s.rules(), 0);
    assert_eq!(s.decide(Instant::ZERO, 0, b, &hot), Verdict::NoMatch);
}

#[test]
fn published_durations_become_until_times() {
    let mut rule = rate_rule(10.0).rules.remove(0);
    rule.valid_until = None;
    let cfg = LoadControlConfig {
        filters: vec![PublishedFilter {
            rule,
            duration: Some(Duration::from_secs(600)),
        }],
        ..LoadControlConfig::default()
    };
    assert_eq!(cfg.document(1000).rules[0].valid_until, Some(1600));
}

proptest! {
    #[test]
    fn any_bytes_parse_or_fail_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = FilterSet::parse(&bytes);
    }

    #[test]
    fn any_tag_soup_parses_or_fails_without_panicking(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("<ruleset>"), Just("</ruleset>"), Just("<rule id='x'>"), Just("</rule>"),
                Just("<actions>"), Just("</actions>"), Just("<accept alg=\"rate\">"),
                Just("</accept>"), Just("5"), Just("&amp;"), Just("&#x41;"), Just("<!--c-->"),
                Just("<one id='sip:a@b'/>"), Just("<a:b c='d'>"), Just("</a:b>"), Just("<"),
            ],
            0..40,
        )
    ) {
        let s: String = parts.concat();
        let _ = FilterSet::parse(s.as_bytes());
    }

    #[test]
    fn built_rules_round_trip(
        id in "[a-zA-Z0-9<>&\"' ]{1,12}",
        user in "[a-z0-9]{1,8}",
        rate in 0u32..100_000,
        loss in proptest::option::of(0u32..=100),
        from in proptest::option::of(0i64..4_000_000_000),
        methods in proptest::collection::vec("[A-Z]{3,8}", 0..3),
    ) {
        let action = match loss {
            Some(l) => Action::Loss(f64::from(l)),
            None => Action::Rate(f64::from(rate) / 10.0),
        };
        let set = FilterSet {
            rules: vec![FilterRule {
                id,
                caller: Some(Identity { ones: Vec::new(), many: vec![Many::default()] }),
                callee: Some(Identity { ones: vec![format!("sip:{user}@example.com")], many: Vec::new() }),
                methods,
                valid_from: from,
                valid_until: from.map(|f| f + 60),
                action,
            }],
        };
        prop_assert_eq!(FilterSet::parse(set.to_xml().as_bytes()), Ok(set));
    }

    #[test]
    fn times_format_and_parse_back(t in 0i64..253_402_300_800) {
        prop_assert_eq!(parse_rfc3339(&format_rfc3339(t)), Some(t));
    }
}

#[test]
fn the_fuzz_seeds_replay() {
    for seed in [
        &include_bytes!("../../../../fuzz/corpus/load_control_doc/seed-hotline")[..],
        &include_bytes!("../../../../fuzz/corpus/load_control_doc/seed-empty")[..],
        HOTLINE_DOC.as_bytes(),
        b"<ruleset><rule id='a'><actions><accept>1e308</accept></actions></rule></ruleset>",
    ] {
        crate::fuzzing::load_control_doc(seed);
        assert!(FilterSet::parse(seed).is_ok());
    }
}
