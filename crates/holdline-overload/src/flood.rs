//! Per-source flood protection: the job of Kamailio's `pike` module, built in.
//!
//! Every request is counted against its source address over windows of `window`; a source
//! that sends more than `limit` requests in one window is an offender and is ignored (its
//! requests are dropped unanswered, so a scanner learns nothing) for `cooldown`. Responses
//! are never counted or dropped: they answer requests this server sent. Trusted sources are
//! the driver's business (it does not ask for them).
//!
//! Memory is bounded: `slots` entries, each source hashed (keyed) to two candidate slots. A
//! source takes its own slot, else an empty or stale one, else evicts the candidate with the
//! smaller count — so the hottest sources keep their place and a flood of spoofed addresses
//! cannot push a real offender out.

use std::net::IpAddr;

use holdline_base::{Duration, Instant};

use crate::algorithm::{ConfigError, check_positive, check_range};

/// The configuration of a [`FloodGuard`].
#[derive(Clone, Debug, PartialEq)]
pub struct FloodConfig {
    /// Most requests one source may send in one window. Default 1,000.
    pub limit: u32,
    /// The counting window. Default 2 s (Kamailio pike's sampling unit).
    pub window: Duration,
    /// How long an offender is ignored. Default 10 s.
    pub cooldown: Duration,
    /// Table entries (memory: about 48 bytes each). Default 65,536.
    pub slots: usize,
    /// Key of the slot hash (draw it at random: a sender that does not know it cannot aim at
    /// a slot). Default 0.
    pub key: u64,
}

impl Default for FloodConfig {
    fn default() -> Self {
        Self {
            limit: 1_000,
            window: Duration::from_secs(2),
            cooldown: Duration::from_secs(10),
            slots: 65_536,
            key: 0,
        }
    }
}

impl FloodConfig {
    /// Checks the values.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_positive("window", self.window)?;
        check_positive("cooldown", self.cooldown)?;
        check_range(
            "flood_limit",
            f64::from(self.limit),
            1.0,
            f64::from(u32::MAX),
            "at least 1",
        )?;
        check_range(
            "flood_slots",
            self.slots as f64,
            2.0,
            f64::MAX,
            "at least 2",
        )
    }
}

/// What [`FloodGuard::check`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Handle the request.
    Pass,
    /// This request made its source an offender: drop it (and its followers).
    Offender,
    /// The source is cooling down: drop the request.
    Blocked,
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    ip: Option<IpAddr>,
    window_start: Instant,
    count: u32,
    blocked_until: Instant,
}

/// Counters of a [`FloodGuard`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FloodStats {
    /// Requests dropped because their source was an offender.
    pub dropped: u64,
    /// Times a source became an offender.
    pub offenders: u64,
    /// Entries taken from another source while it was still counting.
    pub evictions: u64,
}

/// Per-source request counting with a bounded table; see the [module documentation](self).
#[derive(Clone, Debug)]
pub struct FloodGuard {
    config: FloodConfig,
    slots: Vec<Slot>,
    stats: FloodStats,
}

impl FloodGuard {
    /// A guard with a validated `config`.
    pub fn new(config: FloodConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            slots: vec![Slot::default(); config.slots],
            config,
            stats: FloodStats::default(),
        })
    }

    fn candidates(&self, ip: IpAddr) -> (usize, usize) {
        let bits: u128 = match ip.to_canonical() {
            IpAddr::V4(a) => u128::from(u32::from(a)),
            IpAddr::V6(a) => u128::from(a),
        };
        let mut h = self.config.key ^ 0x9e37_79b9_7f4a_7c15;
        for word in [bits as u64, (bits >> 64) as u64] {
            h = (h ^ word).wrapping_mul(0xff51_afd7_ed55_8ccd);
            h ^= h >> 33;
        }
        let n = self.slots.len() as u64;
        let a = (h % n) as usize;
        let b = ((h >> 32).wrapping_mul(0xc4ce_b9fe_1a85_ec53) % n) as usize;
        (
            a,
            if b == a {
                (a + 1) % self.slots.len()
            } else {
                b
            },
        )
    }

    /// Whether a slot holds nothing current at `now` (empty, or its window and cooldown
    /// are over).
    fn stale(&self, s: &Slot, now: Instant) -> bool {
        s.ip.is_none() || (now >= s.blocked_until && now >= s.window_start + self.config.window)
    }

    /// Counts a request from `ip` at `now` and says what to do with it.
    pub fn check(&mut self, ip: IpAddr, now: Instant) -> Verdict {
        let ip = ip.to_canonical();
        let (a, b) = self.candidates(ip);
        let i = if self.slots[a].ip == Some(ip) {
            a
        } else if self.slots[b].ip == Some(ip) {
            b
        } else {
            let pick = if self.stale(&self.slots[a], now) {
                a
            } else if self.stale(&self.slots[b], now) {
                b
            } else {
                // Both taken by current sources: the lighter one goes (a blocked source
                // counts as the heaviest).
                let weight = |s: &Slot| {
                    if now < s.blocked_until {
                        u32::MAX
                    } else {
                        s.count
                    }
                };
                let pick = if weight(&self.slots[a]) <= weight(&self.slots[b]) {
                    a
                } else {
                    b
                };
                if weight(&self.slots[pick]) == u32::MAX {
                    // Both are cooling offenders: count the newcomer nowhere.
                    return Verdict::Pass;
                }
                self.stats.evictions += 1;
                pick
            };
            self.slots[pick] = Slot {
                ip: Some(ip),
                window_start: now,
                count: 0,
                blocked_until: Instant::ZERO,
            };
            pick
        };
        let window = self.config.window;
        let (limit, cooldown) = (self.config.limit, self.config.cooldown);
        let s = &mut self.slots[i];
        if now < s.blocked_until {
            self.stats.dropped += 1;
            return Verdict::Blocked;
        }
        if now >= s.window_start + window {
            s.window_start = now;
            s.count = 0;
        }
        s.count = s.count.saturating_add(1);
        if s.count > limit {
            s.blocked_until = now + cooldown;
            s.count = 0;
            s.window_start = s.blocked_until;
            self.stats.offenders += 1;
            self.stats.dropped += 1;
            return Verdict::Offender;
        }
        Verdict::Pass
    }

    /// The counters.
    pub fn stats(&self) -> FloodStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(limit: u32, slots: usize) -> FloodGuard {
        match FloodGuard::new(FloodConfig {
            limit,
            slots,
            ..FloodConfig::default()
        }) {
            Ok(g) => g,
            Err(e) => panic!("{e}"),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn a_source_over_the_limit_is_ignored_for_the_cooldown() {
        let mut g = guard(3, 64);
        let t = Instant::from_secs(100);
        for _ in 0..3 {
            assert_eq!(g.check(ip("192.0.2.1"), t), Verdict::Pass);
        }
        assert_eq!(g.check(ip("192.0.2.1"), t), Verdict::Offender);
        assert_eq!(g.check(ip("192.0.2.1"), t), Verdict::Blocked);
        // Another source is not affected.
        assert_eq!(g.check(ip("192.0.2.2"), t), Verdict::Pass);
        // Still blocked just before the cooldown ends, counted again after.
        let late = t + Duration::from_millis(9_999);
        assert_eq!(g.check(ip("192.0.2.1"), late), Verdict::Blocked);
        let after = t + Duration::from_secs(10);
        assert_eq!(g.check(ip("192.0.2.1"), after), Verdict::Pass);
        assert_eq!(
            g.stats(),
            FloodStats {
                dropped: 3,
                offenders: 1,
                evictions: 0
            }
        );
    }

    #[test]
    fn the_count_starts_again_each_window() {
        let mut g = guard(3, 64);
        let mut t = Instant::from_secs(1);
        for _ in 0..10 {
            for _ in 0..3 {
                assert_eq!(g.check(ip("2001:db8::1"), t), Verdict::Pass);
            }
            t += Duration::from_secs(2);
        }
        assert_eq!(g.stats().offenders, 0);
        // An IPv4-mapped address is its IPv4 address.
        let t = Instant::from_secs(500);
        for _ in 0..3 {
            assert_eq!(g.check(ip("::ffff:198.51.100.7"), t), Verdict::Pass);
        }
        assert_eq!(g.check(ip("198.51.100.7"), t), Verdict::Offender);
    }

    #[test]
    fn spoofed_sources_cannot_evict_an_offender_and_memory_is_bounded() {
        let mut g = guard(5, 16);
        let t = Instant::from_secs(10);
        for _ in 0..6 {
            g.check(ip("203.0.113.9"), t);
        }
        assert_eq!(g.check(ip("203.0.113.9"), t), Verdict::Blocked);
        // Thousands of one-shot sources through the 16 slots.
        for i in 0..5_000u32 {
            let a = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            assert_eq!(g.check(a, t), Verdict::Pass);
        }
        assert_eq!(g.slots.len(), 16);
        assert_eq!(
            g.check(ip("203.0.113.9"), t),
            Verdict::Blocked,
            "still blocked"
        );
        assert!(g.stats().evictions > 0);
    }

    #[test]
    fn invalid_configs() {
        for c in [
            FloodConfig {
                limit: 0,
                ..FloodConfig::default()
            },
            FloodConfig {
                slots: 1,
                ..FloodConfig::default()
            },
            FloodConfig {
                window: Duration::ZERO,
                ..FloodConfig::default()
            },
            FloodConfig {
                cooldown: Duration::ZERO,
                ..FloodConfig::default()
            },
        ] {
            assert!(c.validate().is_err(), "{c:?}");
        }
    }
}
