use rand_core::{Rng as _, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// A seeded, portable pseudo-random number generator (xoshiro256++).
///
/// The only randomness a pure crate may use: the same seed gives the same sequence on every
/// platform and release, so simulations and tests are reproducible.
#[derive(Clone, Debug)]
pub struct Rng(Xoshiro256PlusPlus);

impl Rng {
    /// A generator seeded from one `u64` (expanded with SplitMix64).
    pub fn seed_from_u64(seed: u64) -> Self {
        Self(Xoshiro256PlusPlus::seed_from_u64(seed))
    }

    /// A uniformly distributed `u64`.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A uniformly distributed `f64` in `[0, 1)` (53 random bits).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniformly distributed integer in `0..n` (`0` when `n == 0`), without modulo bias.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // Lemire's multiply-and-reject method.
        loop {
            let x = self.next_u64();
            let m = u128::from(x) * u128::from(n);
            let low = m as u64;
            if low >= n.wrapping_neg() % n {
                return (m >> 64) as u64;
            }
        }
    }

    /// `true` with probability `p` (clamped to `[0, 1]`).
    pub fn chance(&mut self, p: f64) -> bool {
        self.next_f64() < p
    }

    /// A sample of the exponential distribution with the given mean.
    pub fn exp(&mut self, mean: f64) -> f64 {
        // 1 - U is in (0, 1], so the logarithm is finite.
        -mean * (1.0 - self.next_f64()).ln()
    }

    /// Fills `out` with lowercase alphanumeric characters (for branches, tags, Call-IDs).
    pub fn fill_token(&mut self, out: &mut [u8]) {
        const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        for b in out {
            *b = ALPHABET[self.below(36) as usize];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence() {
        let mut a = Rng::seed_from_u64(7);
        let mut b = Rng::seed_from_u64(7);
        let mut c = Rng::seed_from_u64(8);
        let xa: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let xb: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        let xc: Vec<u64> = (0..8).map(|_| c.next_u64()).collect();
        assert_eq!(xa, xb);
        assert_ne!(xa, xc);
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut r = Rng::seed_from_u64(1);
        let mut seen = [false; 10];
        for _ in 0..1000 {
            let x = r.below(10);
            assert!(x < 10);
            seen[x as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
        assert_eq!(r.below(0), 0);
    }

    #[test]
    fn exp_has_the_requested_mean() {
        let mut r = Rng::seed_from_u64(3);
        let n = 200_000;
        let mean = (0..n).map(|_| r.exp(2.0)).sum::<f64>() / f64::from(n);
        // Standard error is 2/sqrt(n) ~ 0.0045; allow 5 of them.
        assert!((mean - 2.0).abs() < 0.025, "mean {mean}");
    }

    #[test]
    fn f64_is_in_unit_interval() {
        let mut r = Rng::seed_from_u64(4);
        for _ in 0..10_000 {
            let x = r.next_f64();
            assert!((0.0..1.0).contains(&x));
        }
    }
}
