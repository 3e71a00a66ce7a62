//! Per-source flood protection: the job of Kamailio's `pike` module, built in.
//!
//! Every request is counted against its source address over windows of `window`; a source
//! that sends more than `limit` requests in one window is an offender and is ignored (its
//! requests are dropped unanswered, so a scanner learns nothing) for `cooldown`. Responses
//! are never counted or dropped: they answer requests this server sent. Trusted sources are
//! the driver's business (it does not ask for them).
//!
//! The same table counts **failed authentications** (wrong passwords, unknown users: the
//! driver reports them with [`FloodGuard::auth_failure`]): a source with more than
//! `auth_limit` failures within `auth_window` is ignored for `auth_cooldown` (a password
//! guesser gets no more answers; fail2ban's job), its requests reported as
//! [`Verdict::Throttled`].
//!
//! Memory is bounded: `slots` entries, each source hashed (keyed) to two candidate slots. A
//! source takes its own slot, else an empty or stale one, else evicts the candidate with the
//! smaller weight (requests in the window, plus failed authentications weighted so that
//! `auth_limit` of them weigh as much as `limit` requests) — so the hottest sources keep
//! their place and a flood of spoofed addresses cannot push a real offender out.

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
    /// Most failed authentications one source may have in `auth_window`; 0: not counted.
    /// Default 20.
    pub auth_limit: u32,
    /// The window failed authentications are counted over. Default 10 s.
    pub auth_window: Duration,
    /// How long a source past `auth_limit` is ignored. Default 60 s.
    pub auth_cooldown: Duration,
}

impl Default for FloodConfig {
    fn default() -> Self {
        Self {
            limit: 1_000,
            window: Duration::from_secs(2),
            cooldown: Duration::from_secs(10),
            slots: 65_536,
            key: 0,
            auth_limit: 20,
            auth_window: Duration::from_secs(10),
            auth_cooldown: Duration::from_secs(60),
        }
    }
}

impl FloodConfig {
    /// Checks the values.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_positive("window", self.window)?;
        check_positive("cooldown", self.cooldown)?;
        if self.auth_limit > 0 {
            check_positive("auth_window", self.auth_window)?;
            check_positive("auth_cooldown", self.auth_cooldown)?;
        }
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
    /// The source is cooling down after a request flood: drop the request.
    Blocked,
    /// The source is cooling down after too many failed authentications: drop the request.
    Throttled,
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    ip: Option<IpAddr>,
    window_start: Instant,
    count: u32,
    blocked_until: Instant,
    /// The block in force is for failed authentications.
    throttled: bool,
    auth_window_start: Instant,
    auth_count: u32,
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
    /// Failed authentications counted.
    pub auth_failures: u64,
    /// Times a source was throttled for failed authentications.
    pub auth_offenders: u64,
    /// Requests dropped because their source was throttled for failed authentications
    /// (also in `dropped`).
    pub throttled: u64,
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

    /// Whether a slot holds nothing current at `now` (empty, or its windows and cooldown
    /// are over).
    fn stale(&self, s: &Slot, now: Instant) -> bool {
        s.ip.is_none()
            || (now >= s.blocked_until
                && now >= s.window_start + self.config.window
                && (s.auth_count == 0 || now >= s.auth_window_start + self.config.auth_window))
    }

    /// How much a slot weighs against a newcomer (a cooling source: the most).
    fn weight(&self, s: &Slot, now: Instant) -> u32 {
        if now < s.blocked_until {
            return u32::MAX - 1;
        }
        let per_failure = (self.config.limit / self.config.auth_limit.max(1)).max(1);
        s.count
            .saturating_add(s.auth_count.saturating_mul(per_failure))
            .min(u32::MAX - 2)
    }

    /// The slot of `ip` (canonical), taking one if it has none; `None` when both candidates
    /// hold cooling offenders.
    fn slot_of(&mut self, ip: IpAddr, now: Instant) -> Option<usize> {
        let (a, b) = self.candidates(ip);
        Some(if self.slots[a].ip == Some(ip) {
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
                let (wa, wb) = (
                    self.weight(&self.slots[a], now),
                    self.weight(&self.slots[b], now),
                );
                let pick = if wa <= wb { a } else { b };
                if wa.min(wb) == u32::MAX - 1 {
                    // Both are cooling offenders: count the newcomer nowhere.
                    return None;
                }
                self.stats.evictions += 1;
                pick
            };
            self.slots[pick] = Slot {
                ip: Some(ip),
                window_start: now,
                auth_window_start: now,
                ..Slot::default()
            };
            pick
        })
    }

    /// Counts a request from `ip` at `now` and says what to do with it.
    pub fn check(&mut self, ip: IpAddr, now: Instant) -> Verdict {
        let ip = ip.to_canonical();
        let Some(i) = self.slot_of(ip, now) else {
            return Verdict::Pass;
        };
        let window = self.config.window;
        let (limit, cooldown) = (self.config.limit, self.config.cooldown);
        let s = &mut self.slots[i];
        if now < s.blocked_until {
            self.stats.dropped += 1;
            if s.throttled {
                self.stats.throttled += 1;
                return Verdict::Throttled;
            }
            return Verdict::Blocked;
        }
        if now >= s.window_start + window {
            s.window_start = now;
            s.count = 0;
        }
        s.count = s.count.saturating_add(1);
        if s.count > limit {
            s.blocked_until = now + cooldown;
            s.throttled = false;
            s.count = 0;
            s.window_start = s.blocked_until;
            self.stats.offenders += 1;
            self.stats.dropped += 1;
            return Verdict::Offender;
        }
        Verdict::Pass
    }

    /// Counts a failed authentication of `ip` at `now` (a wrong password or an unknown user;
    /// the driver leaves trusted sources out). Returns `true` when this failure put the source
    /// over `auth_limit`: from now on its requests are [`Verdict::Throttled`] for
    /// `auth_cooldown`. Does nothing when `auth_limit` is 0.
    pub fn auth_failure(&mut self, ip: IpAddr, now: Instant) -> bool {
        if self.config.auth_limit == 0 {
            return false;
        }
        let ip = ip.to_canonical();
        let Some(i) = self.slot_of(ip, now) else {
            return false;
        };
        self.stats.auth_failures += 1;
        let (window, limit) = (self.config.auth_window, self.config.auth_limit);
        let cooldown = self.config.auth_cooldown;
        let s = &mut self.slots[i];
        if now >= s.auth_window_start + window {
            s.auth_window_start = now;
            s.auth_count = 0;
        }
        s.auth_count = s.auth_count.saturating_add(1);
        if s.auth_count > limit && now >= s.blocked_until {
            s.blocked_until = now + cooldown;
            s.throttled = true;
            s.auth_count = 0;
            s.auth_window_start = s.blocked_until;
            self.stats.auth_offenders += 1;
            return true;
        }
        false
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
                ..FloodStats::default()
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
    fn too_many_failed_authentications_throttle_a_source_and_no_other() {
        let mut g = guard(1_000, 64);
        let t = Instant::from_secs(100);
        let guesser = ip("198.51.100.1");
        // 20 failures within 10 s are tolerated; the 21st throttles.
        for k in 0..20u64 {
            let at = t + Duration::from_millis(400 * k);
            assert_eq!(g.check(guesser, at), Verdict::Pass);
            assert!(!g.auth_failure(guesser, at), "failure {k}");
        }
        let at = t + Duration::from_secs(9);
        assert!(g.auth_failure(guesser, at));
        assert_eq!(g.check(guesser, at), Verdict::Throttled);
        assert_eq!(g.check(ip("198.51.100.2"), at), Verdict::Pass);
        let late = at + Duration::from_millis(59_999);
        assert_eq!(g.check(guesser, late), Verdict::Throttled);
        assert_eq!(
            g.check(guesser, at + Duration::from_secs(60)),
            Verdict::Pass
        );
        let s = g.stats();
        assert_eq!((s.auth_failures, s.auth_offenders, s.throttled), (21, 1, 2));
        assert_eq!(s.offenders, 0, "not a request flood");
    }

    #[test]
    fn failures_spread_over_windows_are_forgiven() {
        let mut g = guard(1_000, 64);
        let mut t = Instant::from_secs(5);
        for _ in 0..10 {
            for _ in 0..20 {
                assert!(!g.auth_failure(ip("192.0.2.50"), t));
            }
            t += Duration::from_secs(10);
        }
        assert_eq!(g.check(ip("192.0.2.50"), t), Verdict::Pass);
        // Off: nothing is counted.
        let mut off = match FloodGuard::new(FloodConfig {
            auth_limit: 0,
            ..FloodConfig::default()
        }) {
            Ok(g) => g,
            Err(e) => panic!("{e}"),
        };
        for _ in 0..100 {
            assert!(!off.auth_failure(ip("192.0.2.50"), t));
        }
        assert_eq!(off.stats().auth_failures, 0);
    }

    #[test]
    fn a_guesser_keeps_its_slot_against_one_shot_sources() {
        let mut g = guard(1_000, 16);
        let t = Instant::from_secs(10);
        let guesser = ip("203.0.113.77");
        for _ in 0..15 {
            g.check(guesser, t);
            g.auth_failure(guesser, t);
        }
        for i in 0..5_000u32 {
            let a = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            g.check(a, t);
        }
        for _ in 0..5 {
            assert!(!g.auth_failure(guesser, t));
        }
        assert!(g.auth_failure(guesser, t), "its count survived the sweep");
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
            FloodConfig {
                auth_window: Duration::ZERO,
                ..FloodConfig::default()
            },
            FloodConfig {
                auth_cooldown: Duration::ZERO,
                ..FloodConfig::default()
            },
        ] {
            assert!(c.validate().is_err(), "{c:?}");
        }
    }
}
