//! First hops (or registrars) held down after they failed: the client side of RFC 3263
//! §4.3, shared by the calling role ([`Uac`](crate::uac)) and the registration role.

use holdline_base::{Duration, Instant};

/// Until when each of `n` hops is avoided, after it failed.
#[derive(Clone, Debug)]
pub(crate) struct HoldDowns {
    until: Vec<Option<Instant>>,
}

impl HoldDowns {
    /// `n` hops, none held down.
    pub(crate) fn new(n: usize) -> Self {
        Self {
            until: vec![None; n],
        }
    }

    /// Whether hop `h` is not held down at `now`.
    pub(crate) fn is_up(&self, h: usize, now: Instant) -> bool {
        self.until.get(h).is_none_or(|t| t.is_none_or(|t| t <= now))
    }

    /// The hop after `from` (in ring order) a request sent to `from` goes to when `from`
    /// is held down at `now`: the next one that is not. `None` when `from` is up, or when
    /// every hop is held down.
    pub(crate) fn moved_from(&self, from: usize, now: Instant) -> Option<usize> {
        let n = self.until.len();
        if n < 2 || self.is_up(from, now) {
            return None;
        }
        (1..n).map(|k| (from + k) % n).find(|&h| self.is_up(h, now))
    }

    /// Failover from hop `from`, which failed at `now`: the next hop in ring order that
    /// `tried` (one bit per hop) lacks, preferring one that is up; `from` is held down for
    /// `hold`. `None`, holding nothing down, when every hop has been tried.
    pub(crate) fn fail_over(
        &mut self,
        from: usize,
        tried: u8,
        now: Instant,
        hold: Duration,
    ) -> Option<usize> {
        let n = self.until.len();
        let untried = (1..n)
            .map(|k| (from + k) % n)
            .filter(|&h| tried & (1 << h) == 0);
        let hop = untried
            .clone()
            .find(|&h| self.is_up(h, now))
            .or_else(|| untried.clone().next())?;
        if let Some(t) = self.until.get_mut(from) {
            *t = Some(now + hold);
        }
        Some(hop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failover_prefers_an_untried_hop_that_is_up_and_holds_the_failed_one_down() {
        let t0 = Instant::from_nanos(1_000);
        let hold = Duration::from_secs(10);
        let mut h = HoldDowns::new(3);
        // From hop 0 (tried): hop 1.
        assert_eq!(h.fail_over(0, 0b001, t0, hold), Some(1));
        assert!(!h.is_up(0, t0));
        assert!(h.is_up(0, t0 + hold));
        // A request for hop 0 moves to hop 1 while 0 is held down.
        assert_eq!(h.moved_from(0, t0), Some(1));
        assert_eq!(h.moved_from(1, t0), None);
        // From hop 1 with 0 and 1 tried: hop 2.
        assert_eq!(h.fail_over(1, 0b011, t0, hold), Some(2));
        // Hop 2 fails too, everything tried: nothing, and 2 stays up.
        assert_eq!(h.fail_over(2, 0b111, t0, hold), None);
        assert!(h.is_up(2, t0));
        // From 2 with only 2 tried: 0 and 1 are down, so the first untried (0) anyway.
        assert_eq!(h.fail_over(2, 0b100, t0, hold), Some(0));
        // Every hop down: nowhere to move.
        assert_eq!(h.moved_from(0, t0), None);
    }
}
