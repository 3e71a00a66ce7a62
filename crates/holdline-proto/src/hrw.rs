//! Identifier-based load sharing (seed 001): rendezvous (highest random weight, HRW)
//! hashing of a user's address-of-record over a set of destinations, so that every request
//! for one user — its REGISTERs and the calls to it — reaches the same destination, from
//! whichever node computes it.
//!
//! ```text
//!   node seed  = XXH3-64(node id, seed = CLUSTER_SEED)
//!   score      = XXH3-64(key, seed = node seed)                  key: the AOR's canonical bytes
//!   weighted   = -weight / ln((score + 0.5) / 2^64)              (Schindelhauer–Schomaker 2005)
//!   order      = descending weighted score, ties by node id      the first is the destination,
//!                                                               the next ones its failover order
//! ```
//!
//! The specification is fixed: XXH3's output is frozen since xxHash 0.8.0 (the same on every
//! platform and version), nothing goes through std's `Hash` (not portable), and the node id
//! is the destination as written in the configuration (`udp:10.0.0.1:5060`), so every node
//! of a cluster configured alike picks alike. Test vectors in the tests below and in
//! `docs/scaling.md`. Removing a destination moves exactly the keys it had (to their
//! second-highest score); adding one moves about 1/(n+1) of them, all to it.

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The seed of node seeds: the ASCII bytes of "holdline" read as a big-endian integer.
pub const CLUSTER_SEED: u64 = 0x686f_6c64_6c69_6e65;

/// One destination of a rendezvous set.
#[derive(Clone, Debug, PartialEq)]
pub struct HrwNode {
    /// The identity every node hashes (the destination as configured).
    pub id: String,
    /// Its relative weight (> 0; 1.0 for an even share).
    pub weight: f64,
    seed: u64,
}

impl HrwNode {
    /// A destination named `id` with `weight`.
    pub fn new(id: impl Into<String>, weight: f64) -> Self {
        let id = id.into();
        let seed = xxh3_64_with_seed(id.as_bytes(), CLUSTER_SEED);
        Self { id, weight, seed }
    }

    /// Its raw score for `key`: `XXH3-64(key, seed = XXH3-64(id, CLUSTER_SEED))`.
    pub fn score(&self, key: &[u8]) -> u64 {
        xxh3_64_with_seed(key, self.seed)
    }

    /// Its weighted score for `key` (higher wins).
    pub fn weighted_score(&self, key: &[u8]) -> f64 {
        let u = (self.score(key) as f64 + 0.5) / 18_446_744_073_709_551_616.0;
        -self.weight / u.ln()
    }
}

/// The index of the destination of `key` among `nodes` (`None` when empty).
pub fn pick(key: &[u8], nodes: &[HrwNode]) -> Option<usize> {
    pick_by(key, nodes.iter())
}

/// [`pick`] over nodes held elsewhere (e.g. inside route targets).
pub fn pick_by<'n>(key: &[u8], nodes: impl Iterator<Item = &'n HrwNode>) -> Option<usize> {
    let mut best: Option<(f64, usize, &HrwNode)> = None;
    for (i, n) in nodes.enumerate() {
        let s = n.weighted_score(key);
        let better = match best {
            None => true,
            Some((b, _, m)) => s > b || (s == b && n.id < m.id),
        };
        if better {
            best = Some((s, i, n));
        }
    }
    best.map(|(_, i, _)| i)
}

/// Every index of `nodes` in `key`'s order: the destination first, then its failover order.
pub fn rank(key: &[u8], nodes: &[HrwNode], out: &mut Vec<usize>) {
    rank_by(key, nodes.iter(), out);
}

/// [`rank`] over nodes held elsewhere (e.g. inside route targets).
pub fn rank_by<'n>(key: &[u8], nodes: impl Iterator<Item = &'n HrwNode>, out: &mut Vec<usize>) {
    let mut scored: Vec<(f64, &HrwNode, usize)> = nodes
        .enumerate()
        .map(|(i, n)| (n.weighted_score(key), n, i))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.id.cmp(&b.1.id)));
    out.clear();
    out.extend(scored.iter().map(|s| s.2));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(ids: &[&str]) -> Vec<HrwNode> {
        ids.iter().map(|id| HrwNode::new(*id, 1.0)).collect()
    }

    #[test]
    fn xxh3_is_the_frozen_specification() {
        // XXH3-64 of the empty input with seed 0 (xxHash's own test vector).
        assert_eq!(xxh3_64_with_seed(b"", 0), 0x2D06_8005_38D3_94C2);
    }

    /// Published vectors (docs/scaling.md): any change to the hash, the seeds or the
    /// weighting moves users between clusters, so it must fail here first.
    #[test]
    fn test_vectors() {
        let n = HrwNode::new("udp:10.0.0.1:5060", 1.0);
        assert_eq!(n.score(b"alice@example.com"), VECTOR_SCORE);
        let set = nodes(&[
            "udp:10.0.0.1:5060",
            "udp:10.0.0.2:5060",
            "udp:10.0.0.3:5060",
        ]);
        let picks: Vec<usize> = VECTOR_KEYS
            .iter()
            .map(|k| pick(k.as_bytes(), &set).expect("a node"))
            .collect();
        assert_eq!(picks, VECTOR_PICKS);
    }

    const VECTOR_SCORE: u64 = 0xB835_EAE6_6899_55A5;
    const VECTOR_KEYS: [&str; 6] = [
        "alice@example.com",
        "bob@example.com",
        "carol@example.com",
        "dave@example.com",
        "erin@example.com",
        "frank@example.com",
    ];
    const VECTOR_PICKS: [usize; 6] = [0, 0, 1, 2, 0, 0];

    #[test]
    fn rank_starts_with_pick_and_covers_every_node() {
        let set = nodes(&["a", "b", "c", "d"]);
        let mut r = Vec::new();
        for i in 0..1000 {
            let key = format!("user{i}@example.com");
            rank(key.as_bytes(), &set, &mut r);
            assert_eq!(Some(r[0]), pick(key.as_bytes(), &set));
            let mut sorted = r.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, [0, 1, 2, 3]);
        }
    }

    #[test]
    fn shares_are_even_and_weights_scale_them() {
        let keys: Vec<String> = (0..30_000).map(|i| format!("u{i}@example.com")).collect();
        let count = |set: &[HrwNode]| {
            let mut c = vec![0usize; set.len()];
            for k in &keys {
                c[pick(k.as_bytes(), set).expect("a node")] += 1;
            }
            c
        };
        for c in count(&nodes(&["a", "b", "c"])) {
            assert!((9_400..=10_600).contains(&c), "{c}");
        }
        let weighted = [HrwNode::new("a", 2.0), HrwNode::new("b", 1.0)];
        let c = count(&weighted);
        assert!((19_400..=20_600).contains(&c[0]), "{c:?}");
    }

    #[test]
    fn removing_a_node_moves_exactly_its_keys_and_adding_one_moves_a_fair_share_to_it() {
        let three = nodes(&["a", "b", "c"]);
        let four = nodes(&["a", "b", "c", "d"]);
        let (mut moved_add, total) = (0usize, 20_000usize);
        for i in 0..total {
            let key = format!("u{i}@example.com");
            let k = key.as_bytes();
            let before = &three[pick(k, &three).expect("a node")].id;
            let after = &four[pick(k, &four).expect("a node")].id;
            if before != after {
                assert_eq!(after, "d", "a key moves only to the new node");
                moved_add += 1;
            }
            // Without b: b's keys go to their second choice, the others stay.
            let without_b = nodes(&["a", "c"]);
            let now = &without_b[pick(k, &without_b).expect("a node")].id;
            if before == "b" {
                let mut r = Vec::new();
                rank(k, &three, &mut r);
                assert_eq!(now, &three[r[1]].id);
            } else {
                assert_eq!(now, before);
            }
        }
        let share = moved_add as f64 / total as f64;
        assert!((0.23..=0.27).contains(&share), "{share}");
    }
}
