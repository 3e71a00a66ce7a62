//! The egress edges of callees, learned from the Record-Route of responses: the target of
//! seed 003's end-to-end overload control (DEOC) when no route names one
//! ([`ProxyConfig::learn_edges`]; issue 17 item 2).
//!
//! DEOC keeps its state per *target edge*, the edge server a call leaves the network by,
//! however many hops away. A route may name it (`deoc_target`); otherwise the proxy can learn
//! it from the calls themselves. Every record-routing proxy on a call's path puts itself on
//! top of the INVITE's Record-Route, and the callee copies that list into its provisional
//! and 2xx responses (RFC 3261 §12.1.1, §16.6 step 4). The topmost Record-Route of such a
//! response is therefore the last record-routing proxy before the callee: the egress edge.
//! The proxy remembers it per callee (the Request-URI's address of record) and per domain
//! (its host), and later calls to that callee, or to a callee of that domain never called
//! yet, are counted against it. The first calls to a domain (until an answer came), and
//! every call when no server beyond this one record-routes, are counted against the next
//! hop, as without learning.
//!
//! What is learned is bounded ([`MAX_LEARNED`] callees and domains, each forgotten [`LEARNED_TTL`] after
//! it was last confirmed) and deterministic (no random hashing), so the simulator replays it.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use holdline_base::{Duration, Instant};
use holdline_sip::{Message, Scheme};

use super::{EdgeId, Fnv, ProxyConfig, is_me_uri};
use crate::registrar::Registrar;

/// The most callees whose egress edge is remembered.
pub(crate) const MAX_LEARNED: usize = 4096;

/// A learned egress edge is forgotten this long after a response last confirmed it.
pub(crate) const LEARNED_TTL: Duration = Duration::from_secs(600);

/// Egress edges by callee and by domain ([`LearnKeys`]) → (edge, when last confirmed).
#[derive(Debug, Default)]
pub(crate) struct LearnedEdges {
    map: BTreeMap<u64, (EdgeId, Instant)>,
}

impl LearnedEdges {
    /// The egress edge learned for `key`, if confirmed within [`LEARNED_TTL`].
    fn get(&self, now: Instant, key: u64) -> Option<EdgeId> {
        self.map
            .get(&key)
            .filter(|(_, at)| now.saturating_duration_since(*at) < LEARNED_TTL)
            .map(|(e, _)| *e)
    }

    /// The egress edge of a call with `keys`: its callee's, else its domain's.
    pub(crate) fn edge_of(&self, now: Instant, keys: LearnKeys) -> Option<EdgeId> {
        keys.callee
            .and_then(|k| self.get(now, k))
            .or_else(|| keys.domain.and_then(|k| self.get(now, k)))
    }

    /// Records (or confirms) that the callee and the domain of `keys` are reached through
    /// `edge`.
    pub(crate) fn learn_keys(&mut self, now: Instant, keys: LearnKeys, edge: EdgeId) {
        for k in [keys.callee, keys.domain].into_iter().flatten() {
            self.learn(now, k, edge);
        }
    }

    /// Records (or confirms) that `key` is reached through `edge`. When full, the expired
    /// entries go, then the least recently confirmed half.
    fn learn(&mut self, now: Instant, key: u64, edge: EdgeId) {
        if self.map.len() >= MAX_LEARNED && !self.map.contains_key(&key) {
            self.map
                .retain(|_, (_, at)| now.saturating_duration_since(*at) < LEARNED_TTL);
            if self.map.len() >= MAX_LEARNED {
                let mut ages: Vec<Instant> = self.map.values().map(|(_, at)| *at).collect();
                ages.sort_unstable();
                let cut = ages[ages.len() / 2];
                self.map.retain(|_, (_, at)| *at > cut);
            }
        }
        self.map.insert(key, (edge, now));
    }

    /// How many callees and domains have an egress edge remembered (expired ones included
    /// until purged).
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Forgets everything (the routes changed).
    pub(crate) fn clear(&mut self) {
        self.map.clear();
    }
}

/// What a call's egress edge is remembered under: its callee (the Request-URI's address of
/// record, canonical as the registrar compares them) and the callee's domain (the host,
/// in lower case, with its port if any). An edge is learned for both; a call takes its
/// callee's, else its domain's. The domain carries the knowledge to callees never called
/// yet (most of them, when a domain has many users and each gets few calls); the callee
/// keeps it right where one domain's users leave by several edges (a sharded cluster).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LearnKeys {
    callee: Option<u64>,
    domain: Option<u64>,
}

impl LearnKeys {
    /// The keys of a call to `ruri` (`None` when it has neither a user nor a host).
    pub(crate) fn of(ruri: &holdline_sip::Uri<'_>) -> Option<Self> {
        let mut aor = Vec::new();
        let callee = Registrar::aor_key(ruri, &mut aor).then(|| Fnv::new().field(&aor).finish());
        let domain = ruri.host().map(|h| {
            let host = h.to_string().to_ascii_lowercase();
            let port = ruri.port().unwrap_or(0).to_le_bytes();
            Fnv::new()
                .field(b"domain")
                .field(host.as_bytes())
                .field(&port)
                .finish()
        });
        (callee.is_some() || domain.is_some()).then_some(Self { callee, domain })
    }
}

/// The egress edge a provisional or 2xx response to an INVITE names: its topmost
/// Record-Route, unless that is this proxy (nobody beyond it record-routes) or unreadable.
pub(crate) fn egress_edge(config: &ProxyConfig, response: &Message<'_>) -> Option<EdgeId> {
    let top = response.record_routes().next()?.ok()?;
    let uri = &top.uri;
    if is_me_uri(config, uri) {
        return None;
    }
    let host = uri.host()?;
    let port = uri.port().unwrap_or_else(|| match uri.scheme() {
        Scheme::Sips => 5061,
        _ => 5060,
    });
    Some(match host.ip() {
        Some(ip) => EdgeId::at(SocketAddr::new(ip, port)),
        None => EdgeId::of(&format!("{}:{port}", host.to_string().to_ascii_lowercase())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u64) -> Instant {
        Instant::from_secs(s)
    }

    #[test]
    fn an_edge_is_forgotten_after_its_ttl_and_the_oldest_half_goes_when_full() {
        let mut l = LearnedEdges::default();
        let e = EdgeId::at("192.0.2.1:5060".parse().expect("addr"));
        l.learn(at(0), 1, e);
        assert_eq!(l.get(at(599), 1), Some(e));
        assert_eq!(l.get(at(600), 1), None, "expired");
        l.learn(at(600), 1, e);
        assert_eq!(l.get(at(1100), 1), Some(e), "confirmed again");
        let mut l = LearnedEdges::default();
        for k in 0..MAX_LEARNED as u64 {
            l.learn(at(k / 100), k, e);
        }
        assert_eq!(l.len(), MAX_LEARNED);
        l.learn(at(100), u64::MAX, e);
        assert!(l.len() <= MAX_LEARNED / 2 + 1, "{}", l.len());
        assert_eq!(l.get(at(100), u64::MAX), Some(e), "the new one stays");
        assert_eq!(l.get(at(100), 0), None, "the oldest went");
        assert_eq!(
            l.get(at(100), MAX_LEARNED as u64 - 1),
            Some(e),
            "the newest stayed"
        );
    }
}
