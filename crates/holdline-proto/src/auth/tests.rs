//! Tests of the digest module: the RFCs' test vectors, the users file, and every decision of
//! the verifier under a virtual clock.

use holdline_sip::Limits;

use super::*;

// ---------------------------------------------------------------- test vectors

#[test]
fn rfc7616_section_3_9_1_md5_and_sha256() {
    // RFC 7616 §3.9.1: user Mufasa, password "Circle of Life", GET /dir/index.html.
    let nonce = b"7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v";
    let cnonce = b"f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ";
    let realm = b"http-auth@example.org";
    for (alg, want) in [
        (DigestAlgorithm::Md5, "8ca523f5e9506fed4657c9700eebdbec"),
        (
            DigestAlgorithm::Sha256,
            "753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1",
        ),
    ] {
        let ha1 = alg.ha1(b"Mufasa", realm, b"Circle of Life");
        let r = digest_response(
            alg,
            ha1.as_bytes(),
            nonce,
            Some((b"00000001", cnonce, b"auth")),
            b"GET",
            b"/dir/index.html",
        );
        assert_eq!(r.as_str(), want, "{alg}");
        assert!(r.matches(want.to_ascii_uppercase().as_bytes()), "hex case");
    }
}

#[test]
fn rfc2617_section_3_5_md5() {
    let alg = DigestAlgorithm::Md5;
    let ha1 = alg.ha1(b"Mufasa", b"testrealm@host.com", b"Circle Of Life");
    let r = digest_response(
        alg,
        ha1.as_bytes(),
        b"dcd98b7102dd2f0e8b11d0f600bfb0c093",
        Some((b"00000001", b"0a4f113b", b"auth")),
        b"GET",
        b"/dir/index.html",
    );
    assert_eq!(r.as_str(), "6629fae49393a05397450978507c4ef1");
}

#[test]
fn hex_hashes() {
    assert!(HexHash::parse(DigestAlgorithm::Md5, b"0123456789ABCDEF0123456789abcdef").is_some());
    assert!(HexHash::parse(DigestAlgorithm::Md5, b"0123456789abcdef").is_none());
    assert!(HexHash::parse(DigestAlgorithm::Sha256, &[b'g'; 64]).is_none());
    let h = DigestAlgorithm::Md5.hash(&[b"a"]);
    assert_eq!(h.as_str(), "0cc175b9c0f1b6a831c399e269772661");
    assert!(!h.matches(b"0cc175b9c0f1b6a831c399e26977266"));
    assert!(!h.matches(b"0cc175b9c0f1b6a831c399e269772660"));
}

// ---------------------------------------------------------------- users file

#[test]
fn users_file_round_trip_and_lookup() {
    let mut users = Users::new();
    users.insert(
        "alice",
        "Example.COM",
        UserEntry::new(b"alice", b"example.com", b"s3cret"),
    );
    users.insert(
        "bob",
        "example.com",
        UserEntry::new(b"bob", b"example.com", b"pw"),
    );
    let text = users.to_text();
    let again = Users::parse(&text).expect("parses");
    assert_eq!(again.len(), 2);
    assert_eq!(
        again.ha1(b"alice", b"example.com.", DigestAlgorithm::Md5),
        Some(DigestAlgorithm::Md5.ha1(b"alice", b"example.com", b"s3cret"))
    );
    assert_eq!(
        again.ha1(b"alice", b"EXAMPLE.com", DigestAlgorithm::Sha256),
        Some(DigestAlgorithm::Sha256.ha1(b"alice", b"example.com", b"s3cret"))
    );
    assert_eq!(
        again.ha1(b"Alice", b"example.com", DigestAlgorithm::Md5),
        None
    );
    let mut again = again;
    assert!(again.remove("bob", "example.com"));
    assert!(!again.remove("bob", "example.com"));
    assert_eq!(again.sorted().len(), 1);
}

#[test]
fn users_file_errors_name_line_and_entry() {
    let md5 = "0cc175b9c0f1b6a831c399e269772661";
    let sha = "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb";
    let ok = format!("# comment\n\nalice@example.com {md5} {sha}\n");
    assert_eq!(Users::parse(&ok).map(|u| u.len()), Ok(1));
    let cases = [
        (
            format!("{ok}bob@example.com {md5}\n"),
            4,
            "bob@example.com",
            UsersFileErrorKind::MissingField,
        ),
        (
            format!("{ok}bob {md5} {sha}\n"),
            4,
            "bob",
            UsersFileErrorKind::NotAUser,
        ),
        (
            format!("{ok}@example.com {md5} {sha}\n"),
            4,
            "@example.com",
            UsersFileErrorKind::NotAUser,
        ),
        (
            format!("{ok}bob@example.com {sha} {sha}\n"),
            4,
            "bob@example.com",
            UsersFileErrorKind::BadHash(DigestAlgorithm::Md5),
        ),
        (
            format!("{ok}bob@example.com {md5} {md5}\n"),
            4,
            "bob@example.com",
            UsersFileErrorKind::BadHash(DigestAlgorithm::Sha256),
        ),
        (
            format!("{ok}bob@example.com {md5} {sha} x\n"),
            4,
            "bob@example.com",
            UsersFileErrorKind::ExtraField,
        ),
        (
            format!("{ok}alice@EXAMPLE.com {md5} {sha}\n"),
            4,
            "alice@EXAMPLE.com",
            UsersFileErrorKind::Duplicate(3),
        ),
    ];
    for (text, line, entry, kind) in cases {
        let e = Users::parse(&text).expect_err("must fail");
        assert_eq!(
            e,
            UsersFileError {
                line,
                entry: entry.to_owned(),
                kind: kind.clone()
            }
        );
        assert!(
            e.to_string()
                .starts_with(&format!("line {line}: `{entry}`: ")),
            "{e}"
        );
    }
}

// ---------------------------------------------------------------- the verifier

const PASSWORD: &str = "correct horse";

fn users() -> Arc<SharedUsers> {
    let mut u = Users::new();
    u.insert(
        "alice",
        "example.com",
        UserEntry::new(b"alice", b"example.com", PASSWORD.as_bytes()),
    );
    Arc::new(SharedUsers::new(u))
}

fn authenticator(counts: Arc<NonceCounts>, secret: u8) -> Authenticator {
    let mut c = AuthConfig::new(users(), [secret; 32]);
    c.nonce_counts = counts;
    c.wall_clock_at_zero_ms = 1_800_000_000_000;
    Authenticator::new(c)
}

fn secs(n: u64) -> Instant {
    Instant::from_secs(n)
}

/// The nonce of the first challenge `a` writes at `now`.
fn nonce(a: &Authenticator, now: Instant, salt: u64) -> String {
    let ch = a.challenges(now, salt, b"example.com", false);
    let first = holdline_sip::Challenge::parse(&ch[0]).expect("challenge parses");
    String::from_utf8(first.nonce().expect("nonce").to_vec()).expect("ascii")
}

struct Creds<'a> {
    user: &'a str,
    password: &'a str,
    nonce: &'a str,
    nc: u32,
    alg: DigestAlgorithm,
}

/// A REGISTER for alice with an Authorization header computed like a client would.
fn register(c: &Creds<'_>, extra: &str) -> Vec<u8> {
    let uri = "sip:example.com";
    let realm = "example.com";
    let ha1 = c
        .alg
        .ha1(c.user.as_bytes(), realm.as_bytes(), c.password.as_bytes());
    let nc = format!("{:08x}", c.nc);
    let response = digest_response(
        c.alg,
        ha1.as_bytes(),
        c.nonce.as_bytes(),
        Some((nc.as_bytes(), b"c0ffee", b"auth")),
        b"REGISTER",
        uri.as_bytes(),
    );
    format!(
        "REGISTER {uri} SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKa\r\n\
         Max-Forwards: 70\r\nTo: <sip:alice@example.com>\r\nFrom: <sip:alice@example.com>;tag=1\r\n\
         Call-ID: c1\r\nCSeq: 2 REGISTER\r\n{extra}\
         Authorization: Digest username=\"{}\", realm=\"{realm}\", nonce=\"{}\", uri=\"{uri}\", \
         response=\"{response}\", algorithm={}, qop=auth, nc={nc}, cnonce=\"c0ffee\"\r\n\
         Content-Length: 0\r\n\r\n",
        c.user,
        c.nonce,
        c.alg.name()
    )
    .into_bytes()
}

fn check(a: &Authenticator, now: Instant, bytes: &[u8], user: &str) -> AuthDecision {
    let msg = Message::parse(bytes, &Limits::DEFAULT).expect("parses");
    a.check(now, &msg, Role::Registrar, user.as_bytes(), b"example.com")
}

fn alice<'a>(nonce: &'a str, nc: u32) -> Creds<'a> {
    Creds {
        user: "alice",
        password: PASSWORD,
        nonce,
        nc,
        alg: DigestAlgorithm::Md5,
    }
}

#[test]
fn right_credentials_of_either_algorithm_are_accepted_and_their_line_reported() {
    let a = authenticator(Arc::new(NonceCounts::new(64)), 1);
    let n = nonce(&a, secs(10), 1);
    assert_eq!(n.len(), 64);
    for (i, alg) in DigestAlgorithm::ALL.into_iter().enumerate() {
        let c = Creds {
            alg,
            ..alice(&n, i as u32 + 1)
        };
        let bytes = register(&c, "");
        match check(&a, secs(11), &bytes, "alice") {
            AuthDecision::Accept { consumed } => {
                let line = &bytes[consumed.range()];
                assert!(line.starts_with(b"Authorization: Digest"), "{alg}");
                assert!(line.ends_with(b"\r\n"), "{alg}");
            }
            d => panic!("{alg}: {d:?}"),
        }
    }
}

#[test]
fn no_credentials_or_credentials_for_another_realm_are_challenged() {
    let a = authenticator(Arc::new(NonceCounts::new(64)), 1);
    let n = nonce(&a, secs(10), 1);
    let plain = register(&alice(&n, 1), "");
    let text = String::from_utf8(plain).expect("utf-8");
    let cut = text.find("Authorization").expect("header");
    let end = text[cut..].find("\r\n").expect("eol") + cut + 2;
    let without = format!("{}{}", &text[..cut], &text[end..]);
    assert_eq!(
        check(&a, secs(11), without.as_bytes(), "alice"),
        AuthDecision::Challenge(ChallengeReason::NoCredentials)
    );
    let other_realm = text.replace("realm=\"example.com\"", "realm=\"other.example\"");
    assert_eq!(
        check(&a, secs(11), other_realm.as_bytes(), "alice"),
        AuthDecision::Challenge(ChallengeReason::NoCredentials)
    );
}

#[test]
fn challenges_offer_each_algorithm_with_one_fresh_nonce() {
    let a = authenticator(Arc::new(NonceCounts::new(64)), 1);
    let ch = a.challenges(secs(1), 42, b"Example.COM", true);
    assert_eq!(ch.len(), 2);
    let parsed: Vec<_> = ch
        .iter()
        .map(|c| holdline_sip::Challenge::parse(c).expect("parses"))
        .collect();
    assert_eq!(parsed[0].algorithm(), Some(&b"SHA-256"[..]));
    assert_eq!(parsed[1].algorithm(), Some(&b"MD5"[..]));
    assert_eq!(parsed[0].nonce(), parsed[1].nonce());
    assert_eq!(
        parsed[0].realm(),
        Some(&b"example.com"[..]),
        "realm in lowercase"
    );
    assert!(
        parsed
            .iter()
            .all(|c| c.stale() && c.qop() == Some(&b"auth"[..]))
    );
    assert_ne!(nonce(&a, secs(1), 43), nonce(&a, secs(1), 42), "salted");
}

#[test]
fn unknown_user_fails_exactly_like_a_wrong_password() {
    let a = authenticator(Arc::new(NonceCounts::new(64)), 1);
    let n = nonce(&a, secs(10), 1);
    let wrong = Creds {
        password: "guess",
        ..alice(&n, 1)
    };
    let unknown = Creds {
        user: "mallory",
        ..alice(&n, 2)
    };
    let d1 = check(&a, secs(11), &register(&wrong, ""), "alice");
    let d2 = check(&a, secs(11), &register(&unknown, ""), "mallory");
    assert_eq!(
        d1,
        AuthDecision::Challenge(ChallengeReason::WrongCredentials)
    );
    assert_eq!(d1, d2);
    // A wrong password is a failure even with an expired nonce (no stale hint for guessers).
    let late = secs(10 + 301);
    assert_eq!(
        check(&a, late, &register(&wrong, ""), "alice"),
        AuthDecision::Challenge(ChallengeReason::WrongCredentials)
    );
}

#[test]
fn an_expired_nonce_with_right_credentials_is_stale() {
    let a = authenticator(Arc::new(NonceCounts::new(64)), 1);
    let n = nonce(&a, secs(10), 1);
    assert!(matches!(
        check(&a, secs(10 + 300), &register(&alice(&n, 1), ""), "alice"),
        AuthDecision::Accept { .. }
    ));
    assert_eq!(
        check(&a, secs(10 + 301), &register(&alice(&n, 2), ""), "alice"),
        AuthDecision::Challenge(ChallengeReason::Stale)
    );
    assert!(ChallengeReason::Stale.stale());
    assert!(!ChallengeReason::WrongCredentials.stale());
}

#[test]
fn replayed_or_lower_nonce_counts_are_refused_across_workers() {
    let counts = Arc::new(NonceCounts::new(64));
    let w0 = authenticator(counts.clone(), 1);
    let w1 = authenticator(counts, 1);
    let n = nonce(&w0, secs(10), 1);
    let first = register(&alice(&n, 1), "");
    assert!(matches!(
        check(&w0, secs(11), &first, "alice"),
        AuthDecision::Accept { .. }
    ));
    // The same request again (a replay), at the other worker.
    assert_eq!(
        check(&w1, secs(12), &first, "alice"),
        AuthDecision::Challenge(ChallengeReason::Replayed)
    );
    assert!(matches!(
        check(&w1, secs(12), &register(&alice(&n, 5), ""), "alice"),
        AuthDecision::Accept { .. }
    ));
    assert_eq!(
        check(&w0, secs(12), &register(&alice(&n, 3), ""), "alice"),
        AuthDecision::Challenge(ChallengeReason::Replayed),
        "lower than the highest seen"
    );
    // A wrong response does not touch the counts.
    let wrong = Creds {
        password: "x",
        ..alice(&n, 9)
    };
    assert_eq!(
        check(&w0, secs(12), &register(&wrong, ""), "alice"),
        AuthDecision::Challenge(ChallengeReason::WrongCredentials)
    );
    assert!(matches!(
        check(&w0, secs(12), &register(&alice(&n, 6), ""), "alice"),
        AuthDecision::Accept { .. }
    ));
}

#[test]
fn nonces_are_good_at_every_worker_and_after_a_restart_with_the_same_secret_only() {
    let issuer = authenticator(Arc::new(NonceCounts::new(64)), 7);
    let n = nonce(&issuer, secs(10), 99);
    let restarted = authenticator(Arc::new(NonceCounts::new(64)), 7);
    assert!(matches!(
        check(&restarted, secs(20), &register(&alice(&n, 1), ""), "alice"),
        AuthDecision::Accept { .. }
    ));
    let other_secret = authenticator(Arc::new(NonceCounts::new(64)), 8);
    assert_eq!(
        check(
            &other_secret,
            secs(20),
            &register(&alice(&n, 1), ""),
            "alice"
        ),
        AuthDecision::Challenge(ChallengeReason::InvalidNonce)
    );
    // A tampered nonce (an older issue time, to dodge expiry) is invalid.
    let mut tampered = n.into_bytes();
    tampered[15] = if tampered[15] == b'0' { b'1' } else { b'0' };
    let tampered = String::from_utf8(tampered).expect("ascii");
    assert_eq!(
        check(
            &issuer,
            secs(20),
            &register(&alice(&tampered, 1), ""),
            "alice"
        ),
        AuthDecision::Challenge(ChallengeReason::InvalidNonce)
    );
}

#[test]
fn evicted_nonces_are_stale_not_replayable() {
    // One shard of one entry: the second nonce pushes the first out.
    let a = authenticator(Arc::new(NonceCounts::new(1)), 1);
    let n1 = nonce(&a, secs(10), 1);
    let n2 = nonce(&a, secs(11), 2);
    let first = register(&alice(&n1, 1), "");
    assert!(matches!(
        check(&a, secs(12), &first, "alice"),
        AuthDecision::Accept { .. }
    ));
    assert!(matches!(
        check(&a, secs(12), &register(&alice(&n2, 1), ""), "alice"),
        AuthDecision::Accept { .. }
    ));
    assert_eq!(
        check(&a, secs(13), &first, "alice"),
        AuthDecision::Challenge(ChallengeReason::Forgotten)
    );
    assert!(ChallengeReason::Forgotten.stale());
}

#[test]
fn credentials_of_another_user_are_forbidden() {
    let a = authenticator(Arc::new(NonceCounts::new(64)), 1);
    let n = nonce(&a, secs(10), 1);
    // alice's right credentials on a request acting for bob.
    assert_eq!(
        check(&a, secs(11), &register(&alice(&n, 1), ""), "bob"),
        AuthDecision::Forbidden
    );
}

#[test]
fn malformed_credentials_and_algorithms_not_offered_are_challenged() {
    let counts = Arc::new(NonceCounts::new(64));
    let mut c = AuthConfig::new(users(), [1; 32]);
    c.nonce_counts = counts;
    c.algorithms = vec![DigestAlgorithm::Sha256];
    let a = Authenticator::new(c);
    let n = nonce(&a, secs(10), 1);
    assert_eq!(
        check(&a, secs(11), &register(&alice(&n, 1), ""), "alice"),
        AuthDecision::Challenge(ChallengeReason::Malformed),
        "MD5 not offered"
    );
    let sha = Creds {
        alg: DigestAlgorithm::Sha256,
        ..alice(&n, 1)
    };
    let good = String::from_utf8(register(&sha, "")).expect("utf-8");
    assert!(matches!(
        check(&a, secs(11), good.as_bytes(), "alice"),
        AuthDecision::Accept { .. }
    ));
    for broken in [
        good.replace("qop=auth, ", ""),
        good.replace("nc=00000001", "nc=1"),
        good.replace("cnonce=\"c0ffee\"", "x=y"),
        good.replace("qop=auth,", "qop=auth-int,"),
    ] {
        assert_eq!(
            check(&a, secs(11), broken.as_bytes(), "alice"),
            AuthDecision::Challenge(ChallengeReason::Malformed),
            "{broken}"
        );
    }
}

#[test]
fn users_reloaded_take_effect_at_once() {
    let shared = users();
    let mut c = AuthConfig::new(shared.clone(), [1; 32]);
    c.nonce_counts = Arc::new(NonceCounts::new(64));
    let a = Authenticator::new(c);
    let n = nonce(&a, secs(10), 1);
    assert!(matches!(
        check(&a, secs(11), &register(&alice(&n, 1), ""), "alice"),
        AuthDecision::Accept { .. }
    ));
    shared.replace(Users::new());
    assert_eq!(
        check(&a, secs(11), &register(&alice(&n, 2), ""), "alice"),
        AuthDecision::Challenge(ChallengeReason::WrongCredentials)
    );
}
