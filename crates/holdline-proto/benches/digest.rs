//! CPU per digest verification (`cargo bench -p holdline-proto --bench digest`): what a
//! challenged REGISTER costs the server beyond an unauthenticated one.
//!
//! - `challenge`: the two challenge headers (SHA-256 and MD5) with a fresh nonce (one HMAC).
//! - `verify_ok/{MD5,SHA-256}`: a REGISTER with right credentials: parse the Authorization
//!   header, check the nonce's MAC, compute the expected response (HA2 and KD), record the
//!   nonce count in the shared table.
//! - `verify_wrong/MD5`: a wrong password (the same work, no count recorded).
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use holdline_base::Instant;
use holdline_proto::auth::{
    AuthConfig, AuthDecision, Authenticator, DigestAlgorithm, NonceCounts, Role, UserEntry, Users,
    digest_response,
};
use holdline_sip::{Limits, Message};

fn authenticator() -> Authenticator {
    let mut users = Users::new();
    for i in 0..10_000 {
        let u = format!("user{i}");
        users.insert(
            &u,
            "example.com",
            UserEntry::new(u.as_bytes(), b"example.com", b"pw"),
        );
    }
    let mut c = AuthConfig::new(Arc::new(users), [3; 32]);
    c.nonce_counts = Arc::new(NonceCounts::new(65_536));
    Authenticator::new(c)
}

fn register(alg: DigestAlgorithm, nonce: &str, nc: u32, password: &str) -> Vec<u8> {
    let uri = "sip:example.com";
    let ha1 = alg.ha1(b"user42", b"example.com", password.as_bytes());
    let nc = format!("{nc:08x}");
    let r = digest_response(
        alg,
        ha1.as_bytes(),
        nonce.as_bytes(),
        Some((nc.as_bytes(), b"0a4f113b", b"auth")),
        b"REGISTER",
        uri.as_bytes(),
    );
    format!(
        "REGISTER {uri} SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bK776asdhds\r\n\
         Max-Forwards: 70\r\nTo: <sip:user42@example.com>\r\nFrom: <sip:user42@example.com>;tag=456248\r\n\
         Call-ID: 843817637684230@998sdasdh09\r\nCSeq: 1827 REGISTER\r\n\
         Contact: <sip:user42@192.0.2.1:5060>\r\nExpires: 3600\r\n\
         Authorization: Digest username=\"user42\", realm=\"example.com\", nonce=\"{nonce}\", \
         uri=\"{uri}\", response=\"{r}\", algorithm={}, qop=auth, nc={nc}, cnonce=\"0a4f113b\"\r\n\
         Content-Length: 0\r\n\r\n",
        alg.name()
    )
    .into_bytes()
}

fn benches(c: &mut Criterion) {
    let a = authenticator();
    let now = Instant::from_secs(1);
    let mut g = c.benchmark_group("digest");
    let mut salt = 0u64;
    g.bench_function("challenge", |b| {
        b.iter(|| {
            salt += 1;
            black_box(a.challenges(now, salt, b"example.com", false))
        })
    });
    let check = |bytes: &[u8]| {
        let msg = Message::parse(bytes, &Limits::DEFAULT).expect("parses");
        a.check(now, &msg, Role::Registrar, b"user42", b"example.com")
    };
    for (k, alg) in [DigestAlgorithm::Md5, DigestAlgorithm::Sha256]
        .into_iter()
        .enumerate()
    {
        let mut nc = 0u32;
        // Nonces of their own per algorithm (a reused one would be a replay).
        let mut salt = (k as u64 + 1) << 40;
        g.bench_function(format!("verify_ok/{alg}"), |b| {
            b.iter_batched(
                || {
                    // A fresh nonce every 1,000 uses keeps the table's entry count realistic.
                    nc += 1;
                    if nc % 1000 == 1 {
                        salt += 1;
                    }
                    let nonce = a.nonce(now, salt, b"example.com");
                    register(alg, &nonce, nc, "pw")
                },
                |bytes| {
                    let d = check(&bytes);
                    assert!(matches!(d, AuthDecision::Accept { .. }), "{d:?}");
                },
                BatchSize::SmallInput,
            )
        });
    }
    let nonce = a.nonce(now, 7, b"example.com");
    let wrong = register(DigestAlgorithm::Md5, &nonce, 1, "guess");
    g.bench_function("verify_wrong/MD5", |b| b.iter(|| black_box(check(&wrong))));
    g.finish();
}

criterion_group!(digest, benches);
criterion_main!(digest);
