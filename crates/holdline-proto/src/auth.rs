//! Digest authentication, sans-IO: RFC 3261 §22 with RFC 7616 (`qop=auth`) and RFC 8760
//! (SHA-256 beside MD5). Nonces are stateless, counts of their use are bounded and shared;
//! nothing here reads a clock, a file or system randomness.
//!
//! ```text
//!  request ─ credentials (Authorization / Proxy-Authorization) for our realm? ─no─> challenge
//!               │ yes                                               (one per algorithm offered)
//!               v
//!  algorithm offered, qop=auth, nc, cnonce, uri, response present? ──no──> challenge (malformed)
//!  nonce's MAC right (HMAC-SHA-256 with the server secret)?         ──no──> challenge (invalid)
//!  response == KD(HA1, nonce:nc:cnonce:auth:H(method:uri))?          ──no──> failed: challenge,
//!     (an unknown user gets a keyed dummy HA1: same work, same answer)          counted
//!  nonce younger than its lifetime?                                  ──no──> challenge, stale=true
//!  nc above the highest seen for this nonce (shared table)?          ──no──> replayed: challenge
//!  username = the user the request acts for (To / From user)?        ──no──> 403
//!               v
//!           accepted (the consumed header's line is reported, to strip before forwarding)
//! ```
//!
//! # Nonces
//!
//! `hex(issued wall-clock ms, 8 bytes) hex(salt, 8 bytes) hex(MAC, 16 bytes)`, 64 characters,
//! where MAC is HMAC-SHA-256 keyed by the server secret over the issue time, the salt and the
//! realm, cut to 128 bits. Any worker (and a restarted server with the same secret) can check a
//! nonce it did not issue; time is the wall clock (`AuthConfig::wall_clock_at_zero_ms` plus the
//! caller's [`Instant`]), so a nonce keeps its age across restarts.
//!
//! # Replays
//!
//! [`NonceCounts`] holds the highest `nc` accepted per nonce, in a fixed number of entries
//! shared by all workers (sharded mutexes; the entry first seen longest ago goes first). A
//! nonce whose entry was evicted while still young is answered `stale=true` rather than
//! trusted again (each shard remembers the newest issue time it evicted), so eviction never
//! opens a window for a replay.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use hmac::{Hmac, Mac};
use holdline_base::{Duration, Instant};
use holdline_sip::{
    Credentials, DigestChallenge, HeaderName, Message, Span, write_digest_challenge,
};
use md5::{Digest as _, Md5};

use crate::proxy::IpNet;
use sha2::Sha256;

/// A digest algorithm (RFC 7616 §3.3, RFC 8760).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DigestAlgorithm {
    /// `MD5` (RFC 2617; what most SIP user agents speak).
    Md5,
    /// `SHA-256` (RFC 7616, RFC 8760).
    Sha256,
}

impl DigestAlgorithm {
    /// Both, the preferred first.
    pub const ALL: [Self; 2] = [Self::Sha256, Self::Md5];

    /// The `algorithm` token.
    pub fn name(self) -> &'static str {
        match self {
            Self::Md5 => "MD5",
            Self::Sha256 => "SHA-256",
        }
    }

    /// The algorithm an `algorithm` token names (case-insensitive); `None` for others
    /// (including the `-sess` variants, not supported).
    pub fn from_name(s: &[u8]) -> Option<Self> {
        if s.eq_ignore_ascii_case(b"MD5") {
            Some(Self::Md5)
        } else if s.eq_ignore_ascii_case(b"SHA-256") {
            Some(Self::Sha256)
        } else {
            None
        }
    }

    /// Hex digits of its hash (32 or 64).
    pub fn hex_len(self) -> usize {
        match self {
            Self::Md5 => 32,
            Self::Sha256 => 64,
        }
    }

    /// The hash of the concatenation of `parts`, in lowercase hex.
    pub fn hash(self, parts: &[&[u8]]) -> HexHash {
        match self {
            Self::Md5 => {
                let mut h = Md5::new();
                for p in parts {
                    h.update(p);
                }
                HexHash::from_bytes(&h.finalize())
            }
            Self::Sha256 => {
                let mut h = Sha256::new();
                for p in parts {
                    h.update(p);
                }
                HexHash::from_bytes(&h.finalize())
            }
        }
    }

    /// `H(user:realm:password)` (RFC 7616 §3.4.2): what the users file stores.
    pub fn ha1(self, user: &[u8], realm: &[u8], password: &[u8]) -> HexHash {
        self.hash(&[user, b":", realm, b":", password])
    }
}

impl fmt::Display for DigestAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A hash in lowercase hex (MD5: 32 digits, SHA-256: 64), kept inline.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct HexHash {
    len: u8,
    hex: [u8; 64],
}

impl HexHash {
    fn from_bytes(bytes: &[u8]) -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut hex = [0u8; 64];
        let n = bytes.len().min(32);
        for (i, b) in bytes.iter().take(n).enumerate() {
            hex[2 * i] = HEX[usize::from(b >> 4)];
            hex[2 * i + 1] = HEX[usize::from(b & 0xf)];
        }
        Self {
            len: (2 * n) as u8,
            hex,
        }
    }

    /// Reads `s` as the hex of an `algorithm` hash: exactly [`DigestAlgorithm::hex_len`]
    /// hex digits (either case; kept in lowercase).
    pub fn parse(algorithm: DigestAlgorithm, s: &[u8]) -> Option<Self> {
        if s.len() != algorithm.hex_len() || !s.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        let mut hex = [0u8; 64];
        for (d, c) in hex.iter_mut().zip(s) {
            *d = c.to_ascii_lowercase();
        }
        Some(Self {
            len: s.len() as u8,
            hex,
        })
    }

    /// The hex digits.
    pub fn as_bytes(&self) -> &[u8] {
        &self.hex[..usize::from(self.len)]
    }

    /// The hex digits as text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }

    /// Compares with `other` (hex, either case) in time independent of where they differ.
    pub fn matches(&self, other: &[u8]) -> bool {
        let mine = self.as_bytes();
        if mine.len() != other.len() {
            return false;
        }
        let diff = mine
            .iter()
            .zip(other)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b.to_ascii_lowercase()));
        diff == 0
    }
}

impl fmt::Debug for HexHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for HexHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `response` of RFC 7616 §3.4.1 with `qop=auth` (RFC 2617 §3.2.2.1): `KD(HA1,
/// nonce:nc:cnonce:qop:HA2)` with `HA2 = H(method:uri)`; without `qop` (`None`, RFC 2069)
/// `KD(HA1, nonce:HA2)`. `ha1` is hex.
#[allow(clippy::too_many_arguments)]
pub fn digest_response(
    algorithm: DigestAlgorithm,
    ha1: &[u8],
    nonce: &[u8],
    qop: Option<(&[u8], &[u8], &[u8])>,
    method: &[u8],
    uri: &[u8],
) -> HexHash {
    let ha2 = algorithm.hash(&[method, b":", uri]);
    match qop {
        Some((nc, cnonce, qop)) => algorithm.hash(&[
            ha1,
            b":",
            nonce,
            b":",
            nc,
            b":",
            cnonce,
            b":",
            qop,
            b":",
            ha2.as_bytes(),
        ]),
        None => algorithm.hash(&[ha1, b":", nonce, b":", ha2.as_bytes()]),
    }
}

// ------------------------------------------------------------------------------ users

/// Where HA1s come from: the users file, or another credential source.
pub trait UserDirectory: Send + Sync {
    /// The HA1 of `user` at `domain` (lowercase, without a trailing dot) for `algorithm`, if
    /// the user exists.
    fn ha1(&self, user: &[u8], domain: &[u8], algorithm: DigestAlgorithm) -> Option<HexHash>;
}

/// One user's HA1s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserEntry {
    /// `MD5(user:realm:password)` in hex.
    pub md5: HexHash,
    /// `SHA-256(user:realm:password)` in hex.
    pub sha256: HexHash,
}

impl UserEntry {
    /// Both HA1s of `user` with `password` in `realm`.
    pub fn new(user: &[u8], realm: &[u8], password: &[u8]) -> Self {
        Self {
            md5: DigestAlgorithm::Md5.ha1(user, realm, password),
            sha256: DigestAlgorithm::Sha256.ha1(user, realm, password),
        }
    }

    /// The HA1 for `algorithm`.
    pub fn ha1(&self, algorithm: DigestAlgorithm) -> HexHash {
        match algorithm {
            DigestAlgorithm::Md5 => self.md5,
            DigestAlgorithm::Sha256 => self.sha256,
        }
    }
}

/// Why a users file does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UsersFileErrorKind {
    /// A line has fewer than three fields.
    #[error("expected `user@domain MD5-HA1 SHA-256-HA1`")]
    MissingField,
    /// A line has more than three fields.
    #[error("unexpected text after the SHA-256 HA1")]
    ExtraField,
    /// The first field is not `user@domain`.
    #[error("expected `user@domain` (a non-empty user and domain)")]
    NotAUser,
    /// An HA1 is not the hex of a hash of its algorithm.
    #[error("the {0} HA1 must be {len} hex digits", len = .0.hex_len())]
    BadHash(DigestAlgorithm),
    /// The user appears on an earlier line too.
    #[error("duplicate user (first on line {0})")]
    Duplicate(usize),
}

/// A users file error, with its 1-based line and the entry (first field) it concerns.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: `{entry}`: {kind}")]
pub struct UsersFileError {
    /// The line (1-based).
    pub line: usize,
    /// The line's first field (the user, or what stands in its place).
    pub entry: String,
    /// What is wrong.
    pub kind: UsersFileErrorKind,
}

/// The users file: one user per line, `user@domain MD5-HA1 SHA-256-HA1` (fields separated by
/// white space; `#` starts a comment line; blank lines ignored). The HA1s are
/// `H(user:realm:password)` with the realm the server challenges with for that domain (the
/// domain itself unless `[auth] realm` is set). Domains compare case-insensitively; users
/// exactly.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Users {
    /// `user@domain` (domain lowercase) → HA1s, and the line it came from.
    map: HashMap<Vec<u8>, (UserEntry, usize)>,
}

/// `user@domain` with the domain in lowercase and without a trailing dot.
fn user_key(user: &[u8], domain: &[u8]) -> Vec<u8> {
    let domain = domain.strip_suffix(b".").unwrap_or(domain);
    let mut k = Vec::with_capacity(user.len() + 1 + domain.len());
    k.extend_from_slice(user);
    k.push(b'@');
    k.extend(domain.iter().map(u8::to_ascii_lowercase));
    k
}

/// Splits `user@domain` at its last `@`; both parts non-empty, no white space.
pub fn split_user(s: &str) -> Option<(&str, &str)> {
    let (u, d) = s.rsplit_once('@')?;
    let ok = |x: &str| !x.is_empty() && !x.bytes().any(|b| b.is_ascii_whitespace() || b < 0x20);
    (ok(u) && ok(d)).then_some((u, d))
}

impl Users {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses a users file's text.
    pub fn parse(text: &str) -> Result<Self, UsersFileError> {
        let mut map: HashMap<Vec<u8>, (UserEntry, usize)> = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let mut fields = t.split_whitespace();
            let entry = fields.next().unwrap_or_default();
            let err = |kind| UsersFileError {
                line: n,
                entry: entry.to_owned(),
                kind,
            };
            let (user, domain) =
                split_user(entry).ok_or_else(|| err(UsersFileErrorKind::NotAUser))?;
            let (Some(md5), Some(sha)) = (fields.next(), fields.next()) else {
                return Err(err(UsersFileErrorKind::MissingField));
            };
            if fields.next().is_some() {
                return Err(err(UsersFileErrorKind::ExtraField));
            }
            let md5 = HexHash::parse(DigestAlgorithm::Md5, md5.as_bytes())
                .ok_or_else(|| err(UsersFileErrorKind::BadHash(DigestAlgorithm::Md5)))?;
            let sha256 = HexHash::parse(DigestAlgorithm::Sha256, sha.as_bytes())
                .ok_or_else(|| err(UsersFileErrorKind::BadHash(DigestAlgorithm::Sha256)))?;
            let key = user_key(user.as_bytes(), domain.as_bytes());
            if let Some((_, first)) = map.get(&key) {
                return Err(err(UsersFileErrorKind::Duplicate(*first)));
            }
            map.insert(key, (UserEntry { md5, sha256 }, n));
        }
        Ok(Self { map })
    }

    /// The file's text: a comment naming the format, then one line per user, sorted.
    pub fn to_text(&self) -> String {
        let mut out = String::from(
            "# holdline users file: user@domain MD5-HA1 SHA-256-HA1 (HA1 = H(user:realm:password))\n",
        );
        for (k, e) in self.sorted() {
            out.push_str(&k);
            out.push(' ');
            out.push_str(e.md5.as_str());
            out.push(' ');
            out.push_str(e.sha256.as_str());
            out.push('\n');
        }
        out
    }

    /// Every user (`user@domain`) with its HA1s, sorted.
    pub fn sorted(&self) -> Vec<(String, UserEntry)> {
        let mut v: Vec<(String, UserEntry)> = self
            .map
            .iter()
            .map(|(k, (e, _))| (String::from_utf8_lossy(k).into_owned(), *e))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Adds or replaces `user@domain`; returns whether it replaced an entry.
    pub fn insert(&mut self, user: &str, domain: &str, entry: UserEntry) -> bool {
        self.map
            .insert(user_key(user.as_bytes(), domain.as_bytes()), (entry, 0))
            .is_some()
    }

    /// Removes `user@domain`; returns whether it was there.
    pub fn remove(&mut self, user: &str, domain: &str) -> bool {
        self.map
            .remove(&user_key(user.as_bytes(), domain.as_bytes()))
            .is_some()
    }

    /// How many users.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl UserDirectory for Users {
    fn ha1(&self, user: &[u8], domain: &[u8], algorithm: DigestAlgorithm) -> Option<HexHash> {
        self.map
            .get(&user_key(user, domain))
            .map(|(e, _)| e.ha1(algorithm))
    }
}

/// A [`Users`] table that can be replaced while workers read it (a reload on SIGHUP).
#[derive(Debug, Default)]
pub struct SharedUsers {
    inner: RwLock<Arc<Users>>,
}

impl SharedUsers {
    /// Starts with `users`.
    pub fn new(users: Users) -> Self {
        Self {
            inner: RwLock::new(Arc::new(users)),
        }
    }

    /// Replaces the table; readers see the new one from their next lookup.
    pub fn replace(&self, users: Users) {
        *self.inner.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(users);
    }

    /// The table in force.
    pub fn current(&self) -> Arc<Users> {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl UserDirectory for SharedUsers {
    fn ha1(&self, user: &[u8], domain: &[u8], algorithm: DigestAlgorithm) -> Option<HexHash> {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .ha1(user, domain, algorithm)
    }
}

// ------------------------------------------------------------------------------ nonce counts

/// What [`NonceCounts::record`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NonceUse {
    /// `nc` is above every count seen for this nonce: accepted and recorded.
    Fresh,
    /// `nc` was seen already, or a higher one: a replay.
    Replayed,
    /// The nonce's entry may have been evicted: its counts are unknown (answer `stale=true`).
    Forgotten,
}

#[derive(Debug, Default)]
struct NcShard {
    counts: HashMap<[u8; 16], u32>,
    /// First-seen order, for eviction.
    order: VecDeque<[u8; 16]>,
    /// The newest issue time (wall ms) of a nonce evicted from this shard.
    evicted_upto_ms: u64,
}

/// The highest `nc` accepted per nonce, for every worker of a server: a fixed number of
/// entries in mutex-guarded shards; when a shard is full the nonce it first saw longest ago
/// goes. See the [module documentation](self).
#[derive(Debug)]
pub struct NonceCounts {
    shards: Box<[Mutex<NcShard>]>,
    per_shard: usize,
}

/// Shards of a [`NonceCounts`] (fewer when its capacity is small).
const NC_SHARDS: usize = 64;

impl NonceCounts {
    /// A table of about `capacity` nonces (at least one per shard).
    pub fn new(capacity: usize) -> Self {
        let shards = NC_SHARDS.min(capacity.max(1));
        Self {
            shards: (0..shards)
                .map(|_| Mutex::new(NcShard::default()))
                .collect(),
            per_shard: capacity.max(1).div_ceil(shards),
        }
    }

    /// How many nonces it holds.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .counts
                    .len()
            })
            .sum()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records use `nc` of the nonce issued at `issued_ms` (wall-clock ms) with MAC `mac`.
    pub fn record(&self, issued_ms: u64, mac: &[u8; 16], nc: u32) -> NonceUse {
        let key = nc_key(issued_ms, mac);
        // The MAC is keyed: its bytes are as good as a random hash.
        let i = usize::from(key[8]) % self.shards.len();
        let mut s = self.shards[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(seen) = s.counts.get_mut(&key) {
            if nc <= *seen {
                return NonceUse::Replayed;
            }
            *seen = nc;
            return NonceUse::Fresh;
        }
        if issued_ms <= s.evicted_upto_ms {
            return NonceUse::Forgotten;
        }
        if s.counts.len() >= self.per_shard
            && let Some(old) = s.order.pop_front()
            && s.counts.remove(&old).is_some()
        {
            s.evicted_upto_ms = s.evicted_upto_ms.max(issued_of(&old));
        }
        s.counts.insert(key, nc);
        s.order.push_back(key);
        NonceUse::Fresh
    }
}

/// The issue time a [`NonceCounts`] key carries (see [`nc_key`]).
fn issued_of(key: &[u8; 16]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&key[..8]);
    u64::from_be_bytes(b)
}

/// The [`NonceCounts`] key of a nonce: its issue time, then the first 8 bytes of its MAC (unique per
/// nonce, and unforgeable: only valid nonces get here).
fn nc_key(issued_ms: u64, mac: &[u8; 16]) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&issued_ms.to_be_bytes());
    k[8..].copy_from_slice(&mac[..8]);
    k
}

// ------------------------------------------------------------------------------ config

/// The authentication settings of a [`ProxyConfig`](crate::ProxyConfig).
#[derive(Clone)]
#[non_exhaustive]
pub struct AuthConfig {
    /// The realm of every challenge; `None` (default): the domain the request is for (To of
    /// a REGISTER, From of a proxied request), in lowercase.
    pub realm: Option<String>,
    /// The algorithms offered, one challenge each, in this order (clients that read only the
    /// first challenge use the first). Credentials of any of them are accepted. Default
    /// SHA-256, MD5.
    pub algorithms: Vec<DigestAlgorithm>,
    /// How long a nonce is good for; older ones get `stale=true`. Default 300 s.
    pub nonce_lifetime: Duration,
    /// The key of the nonces' MAC (and of unknown users' dummy HA1s). Draw it at random, or
    /// read it from a file so that nonces survive a restart.
    pub secret: [u8; 32],
    /// Where HA1s come from.
    pub users: Arc<dyn UserDirectory>,
    /// The nonce-count table, shared by all workers.
    pub nonce_counts: Arc<NonceCounts>,
    /// The wall-clock time at [`Instant::ZERO`], ms since the Unix epoch (the driver fills it
    /// in; nonces carry wall-clock times). Default 0.
    pub wall_clock_at_zero_ms: u64,
    /// Sources whose out-of-dialog requests are not challenged (gateways and SBCs that
    /// authenticated their users already). REGISTERs are challenged whatever their source.
    /// Default: none.
    pub trusted: Vec<IpNet>,
}

impl AuthConfig {
    /// Settings with `users` and `secret` and defaults for the rest (a nonce-count table of
    /// 65,536 nonces).
    pub fn new(users: Arc<dyn UserDirectory>, secret: [u8; 32]) -> Self {
        Self {
            realm: None,
            algorithms: DigestAlgorithm::ALL.to_vec(),
            nonce_lifetime: Duration::from_secs(300),
            secret,
            users,
            nonce_counts: Arc::new(NonceCounts::new(65_536)),
            wall_clock_at_zero_ms: 0,
            trusted: Vec::new(),
        }
    }
}

impl AuthConfig {
    /// A MAC key from secret material of any length (its SHA-256).
    pub fn secret_from(material: &[u8]) -> [u8; 32] {
        let mut key = [0u8; 32];
        key.copy_from_slice(&Sha256::digest(material));
        key
    }
}

impl fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthConfig")
            .field("realm", &self.realm)
            .field("algorithms", &self.algorithms)
            .field("nonce_lifetime", &self.nonce_lifetime)
            .field("wall_clock_at_zero_ms", &self.wall_clock_at_zero_ms)
            .field("trusted", &self.trusted)
            .finish_non_exhaustive()
    }
}

// ------------------------------------------------------------------------------ decisions

/// Who challenges: the registrar (401, WWW-Authenticate / Authorization) or the proxy (407,
/// Proxy-Authenticate / Proxy-Authorization).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A registrar or user agent server: `401 Unauthorized`.
    Registrar,
    /// A proxy: `407 Proxy Authentication Required`.
    Proxy,
}

impl Role {
    /// The challenge's status code.
    pub fn status(self) -> u16 {
        match self {
            Self::Registrar => 401,
            Self::Proxy => 407,
        }
    }

    /// The challenge's reason phrase.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Registrar => "Unauthorized",
            Self::Proxy => "Proxy Authentication Required",
        }
    }

    /// The header that carries the challenges.
    pub fn challenge_header(self) -> &'static str {
        match self {
            Self::Registrar => "WWW-Authenticate",
            Self::Proxy => "Proxy-Authenticate",
        }
    }

    /// The header that carries the credentials.
    pub fn credentials_header(self) -> HeaderName {
        match self {
            Self::Registrar => HeaderName::Authorization,
            Self::Proxy => HeaderName::ProxyAuthorization,
        }
    }
}

/// Why a request is challenged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChallengeReason {
    /// No Digest credentials for our realm.
    NoCredentials,
    /// Credentials for our realm lacking a field, or with an algorithm or qop not offered.
    Malformed,
    /// A nonce this server (or one sharing its secret) did not issue.
    InvalidNonce,
    /// A wrong response: a wrong password or an unknown user (indistinguishable on the
    /// wire). The failures the throttle counts.
    WrongCredentials,
    /// The credentials were right but the nonce is older than its lifetime (`stale=true`).
    Stale,
    /// The credentials were right but their `nc` was used already (a replay).
    Replayed,
    /// The credentials were right but the nonce's count was forgotten (`stale=true`).
    Forgotten,
}

impl ChallengeReason {
    /// Whether the challenge says `stale=true` (the client may retry without asking its
    /// user for the password again).
    pub fn stale(self) -> bool {
        matches!(self, Self::Stale | Self::Forgotten)
    }
}

/// What to do with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthDecision {
    /// Authenticated; the header line whose credentials were consumed (to remove before
    /// forwarding, RFC 3261 §22.3).
    Accept {
        /// The consumed header's line.
        consumed: Span,
    },
    /// Answer with a challenge (401 or 407) carrying fresh nonces.
    Challenge(ChallengeReason),
    /// The credentials are right but name another user than the one the request acts for:
    /// `403 Forbidden`.
    Forbidden,
}

/// Wall-clock slack for nonces issued "in the future" (another server's clock).
const FUTURE_SLACK_MS: u64 = 60_000;

/// The verifier: checks credentials and writes challenges. One per worker; the state it
/// shares (users, nonce counts) sits behind `Arc`s in its [`AuthConfig`].
#[derive(Clone, Debug)]
pub struct Authenticator {
    config: AuthConfig,
}

/// A checked nonce.
struct NonceParts {
    issued_ms: u64,
    mac: [u8; 16],
}

impl Authenticator {
    /// A verifier with `config` (an empty algorithm list means both).
    pub fn new(mut config: AuthConfig) -> Self {
        if config.algorithms.is_empty() {
            config.algorithms = DigestAlgorithm::ALL.to_vec();
        }
        config.algorithms.dedup();
        Self { config }
    }

    /// The settings.
    pub fn config(&self) -> &AuthConfig {
        &self.config
    }

    /// The realm for requests on behalf of users of `domain`.
    pub fn realm<'d>(&'d self, domain: &'d [u8]) -> Cow<'d, [u8]> {
        match &self.config.realm {
            Some(r) => Cow::Borrowed(r.as_bytes()),
            None => {
                let d = domain.strip_suffix(b".").unwrap_or(domain);
                if d.iter().any(u8::is_ascii_uppercase) {
                    Cow::Owned(d.to_ascii_lowercase())
                } else {
                    Cow::Borrowed(d)
                }
            }
        }
    }

    fn wall_ms(&self, now: Instant) -> u64 {
        self.config
            .wall_clock_at_zero_ms
            .saturating_add(now.as_nanos() / 1_000_000)
    }

    fn mac(&self, issued_ms: u64, salt: u64, realm: &[u8]) -> [u8; 16] {
        let mut out = [0u8; 16];
        // HMAC takes a key of any length: this cannot fail.
        if let Ok(mut m) = Hmac::<Sha256>::new_from_slice(&self.config.secret) {
            m.update(b"holdline-nonce\0");
            m.update(&issued_ms.to_be_bytes());
            m.update(&salt.to_be_bytes());
            m.update(realm);
            let tag = m.finalize().into_bytes();
            out.copy_from_slice(&tag[..16]);
        }
        out
    }

    /// A fresh nonce for `realm` issued at `now`, made unique by `salt`.
    pub fn nonce(&self, now: Instant, salt: u64, realm: &[u8]) -> String {
        let issued = self.wall_ms(now);
        let mac = self.mac(issued, salt, realm);
        let mut s = format!("{issued:016x}{salt:016x}");
        s.push_str(HexHash::from_bytes(&mac).as_str());
        s
    }

    fn check_nonce(&self, nonce: &[u8], realm: &[u8]) -> Option<NonceParts> {
        if nonce.len() != 64 {
            return None;
        }
        let field = |r: std::ops::Range<usize>| {
            let s = std::str::from_utf8(nonce.get(r)?).ok()?;
            u64::from_str_radix(s, 16).ok()
        };
        let issued_ms = field(0..16)?;
        let salt = field(16..32)?;
        let mac = self.mac(issued_ms, salt, realm);
        HexHash::from_bytes(&mac)
            .matches(nonce.get(32..)?)
            .then_some(NonceParts { issued_ms, mac })
    }

    /// The challenge header values (one per algorithm offered, in order) for `domain`,
    /// with a fresh nonce from `salt`; `stale` adds `stale=true`.
    pub fn challenges(&self, now: Instant, salt: u64, domain: &[u8], stale: bool) -> Vec<Vec<u8>> {
        let realm = self.realm(domain);
        let nonce = self.nonce(now, salt, &realm);
        self.config
            .algorithms
            .iter()
            .map(|a| {
                let mut v = Vec::with_capacity(160);
                write_digest_challenge(
                    &mut v,
                    &DigestChallenge {
                        realm: &realm,
                        nonce: nonce.as_bytes(),
                        algorithm: a.name(),
                        qop: "auth",
                        stale,
                    },
                );
                v
            })
            .collect()
    }

    /// The HA1 to check with: the user's, or for an unknown user a keyed dummy (the same
    /// work follows and the answer is the same as for a wrong password).
    fn ha1_or_dummy(&self, user: &[u8], domain: &[u8], algorithm: DigestAlgorithm) -> HexHash {
        if let Some(h) = self.config.users.ha1(user, domain, algorithm) {
            return h;
        }
        let mut out = HexHash::from_bytes(&[]);
        if let Ok(mut m) = Hmac::<Sha256>::new_from_slice(&self.config.secret) {
            m.update(b"holdline-unknown-user\0");
            m.update(algorithm.name().as_bytes());
            m.update(&user_key(user, domain));
            let tag = m.finalize().into_bytes();
            out = HexHash::from_bytes(&tag[..algorithm.hex_len() / 2]);
        }
        out
    }

    /// The first digest credentials of `msg` for this server's realm of `domain`, and the
    /// line that carries them.
    fn own<'m>(
        &self,
        msg: &'m Message<'_>,
        role: Role,
        domain: &[u8],
    ) -> Option<(Credentials<'m>, Span)> {
        let realm = self.realm(domain);
        for v in msg.values(role.credentials_header()) {
            let Ok(c) = Credentials::parse(v.bytes) else {
                continue;
            };
            if c.is_digest()
                && c.params
                    .get_unescaped("realm")
                    .is_some_and(|r| r.as_ref() == realm.as_ref())
            {
                let line = msg.headers().get(v.header).map(|h| h.line_span());
                return Some((c, line.unwrap_or(v.span)));
            }
        }
        None
    }

    /// The line of `msg`'s credentials for this server's realm of `domain`, unchecked: what
    /// a proxy removes from a request it forwards without authenticating it (an in-dialog
    /// request into which a UA copied its credentials, one from a trusted source), so that
    /// they never travel past the server they are for (RFC 3261 §22.3).
    pub fn own_credentials(&self, msg: &Message<'_>, role: Role, domain: &[u8]) -> Option<Span> {
        self.own(msg, role, domain).map(|(_, line)| line)
    }

    /// Checks the credentials of `msg` for `role`, on behalf of `user` at `domain` (the To
    /// user of a REGISTER, the From user of a proxied request; `user` is compared with the
    /// credentials' `username`). Credentials of other realms are ignored (they are for
    /// another server). `now` is the caller's time; see the module documentation for the
    /// order of the checks.
    pub fn check(
        &self,
        now: Instant,
        msg: &Message<'_>,
        role: Role,
        user: &[u8],
        domain: &[u8],
    ) -> AuthDecision {
        let realm = self.realm(domain);
        let Some((c, consumed)) = self.own(msg, role, domain) else {
            return AuthDecision::Challenge(ChallengeReason::NoCredentials);
        };
        let algorithm = match c.algorithm() {
            None => Some(DigestAlgorithm::Md5),
            Some(a) => DigestAlgorithm::from_name(a),
        }
        .filter(|a| self.config.algorithms.contains(a));
        let (
            Some(algorithm),
            Some(username),
            Some(nonce),
            Some(uri),
            Some(response),
            Some(qop),
            Some(nc_text),
            Some(nc),
            Some(cnonce),
        ) = (
            algorithm,
            c.username_unescaped(),
            c.nonce(),
            c.params.get_unescaped("uri"),
            c.response(),
            c.qop(),
            c.nc(),
            c.nonce_count(),
            c.cnonce(),
        )
        else {
            return AuthDecision::Challenge(ChallengeReason::Malformed);
        };
        if !qop.eq_ignore_ascii_case(b"auth") {
            return AuthDecision::Challenge(ChallengeReason::Malformed);
        }
        let Some(parts) = self.check_nonce(nonce, &realm) else {
            return AuthDecision::Challenge(ChallengeReason::InvalidNonce);
        };
        let method = msg.method().map(|m| m.as_bytes()).unwrap_or_default();
        let ha1 = self.ha1_or_dummy(&username, domain, algorithm);
        let expected = digest_response(
            algorithm,
            ha1.as_bytes(),
            nonce,
            Some((nc_text, cnonce, qop)),
            method,
            &uri,
        );
        if !expected.matches(response) {
            return AuthDecision::Challenge(ChallengeReason::WrongCredentials);
        }
        let now_ms = self.wall_ms(now);
        let lifetime_ms = u64::try_from(self.config.nonce_lifetime.as_millis()).unwrap_or(u64::MAX);
        if parts.issued_ms.saturating_add(lifetime_ms) < now_ms
            || parts.issued_ms > now_ms.saturating_add(FUTURE_SLACK_MS)
        {
            return AuthDecision::Challenge(ChallengeReason::Stale);
        }
        match self
            .config
            .nonce_counts
            .record(parts.issued_ms, &parts.mac, nc)
        {
            NonceUse::Fresh => {}
            NonceUse::Replayed => return AuthDecision::Challenge(ChallengeReason::Replayed),
            NonceUse::Forgotten => return AuthDecision::Challenge(ChallengeReason::Forgotten),
        }
        if username.as_ref() != user {
            return AuthDecision::Forbidden;
        }
        AuthDecision::Accept { consumed }
    }
}

#[cfg(test)]
mod tests;
