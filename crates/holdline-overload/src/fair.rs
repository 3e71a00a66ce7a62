//! `fair`: per-upstream max-min fair admission at a core server (seed 003's future work,
//! l. 442-444).
//!
//! When only some edge servers run DEOC, the ones that do back off on the core's 503s and the
//! ones that do not keep pushing: a core that rejects each new INVITE with the same
//! probability (OCC) hands the capacity the DEOC edges give up to the others, and the DEOC
//! edges' rates fall towards their floor. [`FairShare`] sits *behind* the core's local
//! controller: the local controller still decides **how many** new INVITEs the core admits
//! (its admissions per interval are the allowance `A`); `FairShare` decides **whose**. It
//! measures every upstream's arrival rate `λ_u` (per previous hop: the driver names it with a
//! [`TargetId`]), computes the max-min fair share `s` of `A` over the active upstreams
//! ([`max_min_share`]: `Σ_u min(λ_u, s) = A`) and admits each upstream's new INVITEs with
//! the fraction `p_u = min(1, s/λ_u)`: an upstream sending less than its share is never
//! rejected, the ones sending more are cut to `s`.
//!
//! ```text
//!  new INVITE from u ──> local controller (OCC, ...) ──decision──> FairShare ──> admit / 503
//!                         counts towards A                          │
//!                   every interval: λ_u ← (1−w)·λ_u + w·(arrivals_u / interval)
//!                                   A   = the local controller's admissions / interval
//!                                   s   = max-min share of A over {λ_u};  p_u = min(1, s/λ_u)
//! ```
//!
//! - **Active only under overload**: while the local controller rejected nothing in the last
//!   interval its decisions pass through unchanged (no measurement lag when there is nothing
//!   to share). After an interval with rejections, the decisions are `FairShare`'s until an
//!   interval ends without any rejection from the local controller.
//! - **Deterministic**: admission by credit, not by drawing: each arrival of `u` adds `p_u`
//!   to its credit, a call is admitted when the credit reaches 1 (and 1 is taken off), so an
//!   upstream at `p_u = 0.25` has exactly every fourth call admitted.
//! - **Rejections** are 503s with the reason (and `Retry-After`) of the local controller's
//!   latest rejection (the fairness layer only moves the local controller's rejections from
//!   one upstream to another; [`RejectReason::Occupancy`] before the first).
//! - An upstream seen for the first time while active has no rate yet: the local
//!   controller's decision applies to it until the next interval's end.
//! - Memory is bounded: at most `max_upstreams` upstreams; one idle for `forget_after` is
//!   forgotten; when the table is full the one idle longest makes room.
//!
//! **Where it plugs into the real server** (not wired there yet): `holdline-server`'s worker
//! asks the local controller at the ingress gate (`Engine::admit` / the gate callback of
//! `Endpoint::handle_admitting`) knowing the datagram's source address or the connection; the
//! worker would number the previous hop (the source address, or the `ConnId` for streams, as
//! the forward-gate controllers number next hops) and pass the local controller's decision
//! through [`FairShare::decide`], one `FairShare` per worker (each worker sees its share of
//! each upstream's calls, sharded by Call-ID, so the shares agree).

use std::collections::BTreeMap;

use holdline_base::{Duration, Instant};

use crate::admission::{Decision, RejectReason, Rejection, TargetId};
use crate::algorithm::{ConfigError, check_nonzero, check_positive, check_range};
use crate::common::secs;

/// The max-min fair share of `capacity` over `demands`: the level `s` such that
/// `Σ min(d, s) = capacity`. When the demands fit (`Σ d ≤ capacity`) every demand is served
/// and `s` is the largest demand (or `capacity` when there is none). Negative or NaN demands
/// count as 0.
///
/// ```
/// use holdline_overload::fair::max_min_share;
/// // Two small upstreams (2 and 3) keep what they send; the two large ones share the rest.
/// let s = max_min_share(25.0, &[2.0, 3.0, 40.0, 40.0]);
/// assert!((s - 10.0).abs() < 1e-9);
/// ```
pub fn max_min_share(capacity: f64, demands: &[f64]) -> f64 {
    let capacity = if capacity.is_finite() {
        capacity.max(0.0)
    } else {
        0.0
    };
    let mut d: Vec<f64> = demands
        .iter()
        .map(|&x| if x.is_finite() { x.max(0.0) } else { 0.0 })
        .collect();
    if d.is_empty() {
        return capacity;
    }
    d.sort_by(f64::total_cmp);
    let mut left = capacity;
    let mut n = d.len();
    for &x in &d {
        let level = left / n as f64;
        if x >= level {
            return level;
        }
        left -= x;
        n -= 1;
    }
    // Every demand fits.
    d.last().copied().unwrap_or(capacity)
}

/// The configuration of [`FairShare`].
#[derive(Clone, Debug, PartialEq)]
pub struct FairShareConfig {
    /// How often the upstreams' rates, the allowance and the shares are updated. Default
    /// 1 s (seed 003's OCC interval; set it to the local controller's interval).
    pub interval: Duration,
    /// Weight of the last interval's arrival rate in each upstream's rate (EWMA), in
    /// `(0, 1]`. Default 0.5.
    pub ewma_weight: f64,
    /// Most upstreams with state (≥ 1). Default 1,024.
    pub max_upstreams: usize,
    /// An upstream without an arrival for this long is forgotten. Default 60 s.
    pub forget_after: Duration,
}

impl Default for FairShareConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            ewma_weight: 0.5,
            max_upstreams: 1024,
            forget_after: Duration::from_secs(60),
        }
    }
}

impl FairShareConfig {
    /// Checks the configuration.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_positive("interval", self.interval)?;
        check_range(
            "ewma_weight",
            self.ewma_weight,
            f64::MIN_POSITIVE,
            1.0,
            "greater than 0, at most 1",
        )?;
        check_positive("forget_after", self.forget_after)?;
        check_nonzero("max_upstreams", self.max_upstreams)
    }
}

/// One upstream's state, for metrics and tests.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FairUpstream {
    /// Its new INVITEs per second (EWMA over intervals), once an interval has ended.
    pub rate: Option<f64>,
    /// The fraction of its new INVITEs admitted while active, `min(1, s/λ_u)`.
    pub admit_fraction: f64,
    /// New INVITEs asked about in all.
    pub arrivals: u64,
    /// New INVITEs admitted in all.
    pub admitted: u64,
    /// New INVITEs rejected in all.
    pub rejected: u64,
}

#[derive(Clone, Debug)]
struct Upstream {
    view: FairUpstream,
    /// Arrivals in the current interval.
    interval_arrivals: u64,
    credit: f64,
    last_seen: Instant,
}

/// Per-upstream max-min fair admission behind a local controller (see the
/// [module documentation](self)).
#[derive(Clone, Debug)]
pub struct FairShare {
    config: FairShareConfig,
    upstreams: BTreeMap<TargetId, Upstream>,
    interval_start: Instant,
    next_tick: Instant,
    latest: Instant,
    /// The local controller's admissions and rejections in the current interval.
    inner_admitted: u64,
    inner_rejected: u64,
    /// The last interval's allowance (admissions per second) and share, when active.
    allowance: Option<f64>,
    share: Option<f64>,
    /// The local controller's latest rejection (reason and Retry-After reused).
    last_rejection: Option<Rejection>,
    intervals: u64,
}

impl FairShare {
    /// A new instance with a validated `config`, its first interval starting at `now`.
    pub fn new(config: FairShareConfig, now: Instant) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            next_tick: now + config.interval,
            config,
            upstreams: BTreeMap::new(),
            interval_start: now,
            latest: now,
            inner_admitted: 0,
            inner_rejected: 0,
            allowance: None,
            share: None,
            last_rejection: None,
            intervals: 0,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &FairShareConfig {
        &self.config
    }

    /// Whether the decisions are this layer's (the local controller rejected calls in the
    /// last interval).
    pub fn active(&self) -> bool {
        self.allowance.is_some()
    }

    /// The current max-min fair share `s`, new INVITEs per second, while active.
    pub fn share(&self) -> Option<f64> {
        self.share
    }

    /// The allowance `A` (the local controller's admissions per second in the last
    /// interval), while active.
    pub fn allowance(&self) -> Option<f64> {
        self.allowance
    }

    /// The state of `upstream`, if it has any.
    pub fn upstream(&self, upstream: TargetId) -> Option<FairUpstream> {
        self.upstreams.get(&upstream).map(|u| u.view)
    }

    /// Every upstream's arrival rate (new INVITEs per second), where measured.
    pub fn rates(&self) -> impl Iterator<Item = (TargetId, f64)> + '_ {
        self.upstreams
            .iter()
            .filter_map(|(&k, u)| u.view.rate.map(|r| (k, r)))
    }

    /// Completed intervals.
    pub fn intervals(&self) -> u64 {
        self.intervals
    }

    /// The local controller decided `inner` for a new INVITE from `upstream`: the decision
    /// to apply. Ask it for new INVITEs only (every other message is admitted by contract).
    pub fn decide(&mut self, now: Instant, upstream: TargetId, inner: Decision) -> Decision {
        self.latest = self.latest.max(now);
        let now = self.latest;
        self.roll(now);
        match inner {
            Decision::Admit => self.inner_admitted = self.inner_admitted.saturating_add(1),
            Decision::Reject(r) => {
                self.inner_rejected = self.inner_rejected.saturating_add(1);
                self.last_rejection = Some(r);
            }
        }
        let active = self.active();
        let fallback = self.last_rejection.unwrap_or(Rejection::service_unavailable(
            RejectReason::Occupancy,
            None,
        ));
        let u = self.entry(upstream, now);
        u.interval_arrivals = u.interval_arrivals.saturating_add(1);
        u.view.arrivals = u.view.arrivals.saturating_add(1);
        let decision = if active && u.view.rate.is_some() {
            u.credit += u.view.admit_fraction;
            if u.credit >= 1.0 {
                u.credit -= 1.0;
                Decision::Admit
            } else {
                Decision::Reject(fallback)
            }
        } else {
            inner
        };
        if decision.is_admit() {
            u.view.admitted = u.view.admitted.saturating_add(1);
        } else {
            u.view.rejected = u.view.rejected.saturating_add(1);
        }
        decision
    }

    /// The state of `upstream`, made (and room made for it) if needed.
    fn entry(&mut self, upstream: TargetId, now: Instant) -> &mut Upstream {
        if !self.upstreams.contains_key(&upstream)
            && self.upstreams.len() >= self.config.max_upstreams
        {
            let victim = self
                .upstreams
                .iter()
                .min_by_key(|(_, u)| u.last_seen)
                .map(|(&k, _)| k);
            if let Some(k) = victim {
                self.upstreams.remove(&k);
            }
        }
        let u = self.upstreams.entry(upstream).or_insert_with(|| Upstream {
            view: FairUpstream {
                rate: None,
                admit_fraction: 1.0,
                arrivals: 0,
                admitted: 0,
                rejected: 0,
            },
            interval_arrivals: 0,
            credit: 0.0,
            last_seen: now,
        });
        u.last_seen = now;
        u
    }

    /// Ends the interval(s) due at `now`: rates, allowance, share and fractions.
    fn roll(&mut self, now: Instant) {
        if now < self.next_tick {
            return;
        }
        let elapsed = secs(now.saturating_duration_since(self.interval_start)).max(1e-9);
        self.interval_start = now;
        self.next_tick = now + self.config.interval;
        self.intervals = self.intervals.saturating_add(1);
        let w = self.config.ewma_weight;
        let forget = self.config.forget_after;
        self.upstreams
            .retain(|_, u| now.saturating_duration_since(u.last_seen) < forget);
        for u in self.upstreams.values_mut() {
            let sample = u.interval_arrivals as f64 / elapsed;
            u.view.rate = Some(match u.view.rate {
                None => sample,
                Some(r) => (1.0 - w) * r + w * sample,
            });
            u.interval_arrivals = 0;
        }
        let rejected = std::mem::take(&mut self.inner_rejected);
        let admitted = std::mem::take(&mut self.inner_admitted);
        if rejected == 0 {
            self.allowance = None;
            self.share = None;
            for u in self.upstreams.values_mut() {
                u.view.admit_fraction = 1.0;
                u.credit = 0.0;
            }
            return;
        }
        let allowance = admitted as f64 / elapsed;
        let demands: Vec<f64> = self
            .upstreams
            .values()
            .filter_map(|u| u.view.rate)
            .collect();
        let share = max_min_share(allowance, &demands);
        for u in self.upstreams.values_mut() {
            u.view.admit_fraction = match u.view.rate {
                Some(r) if r > share => share / r,
                _ => 1.0,
            };
        }
        self.allowance = Some(allowance);
        self.share = Some(share);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_min_share_water_fills() {
        assert!((max_min_share(30.0, &[10.0, 10.0, 10.0]) - 10.0).abs() < 1e-12);
        assert!((max_min_share(30.0, &[5.0, 100.0]) - 25.0).abs() < 1e-12);
        // Everything fits: the largest demand.
        assert!((max_min_share(100.0, &[5.0, 20.0]) - 20.0).abs() < 1e-12);
        assert_eq!(max_min_share(7.0, &[]), 7.0);
        assert_eq!(max_min_share(-1.0, &[1.0]), 0.0);
        assert!((max_min_share(4.0, &[f64::NAN, 10.0]) - 4.0).abs() < 1e-12);
    }

    #[test]
    fn nonsense_configs_are_refused() {
        assert_eq!(FairShareConfig::default().validate(), Ok(()));
        for c in [
            FairShareConfig {
                interval: Duration::ZERO,
                ..FairShareConfig::default()
            },
            FairShareConfig {
                ewma_weight: 0.0,
                ..FairShareConfig::default()
            },
            FairShareConfig {
                ewma_weight: f64::NAN,
                ..FairShareConfig::default()
            },
            FairShareConfig {
                max_upstreams: 0,
                ..FairShareConfig::default()
            },
        ] {
            assert!(c.validate().is_err(), "{c:?}");
        }
    }
}
