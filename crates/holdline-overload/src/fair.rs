//! `fair`: per-upstream max-min fair admission at a core server (seed 003's future work,
//! l. 442-444).
//!
//! When only some edge servers run DEOC, the ones that do back off on the core's 503s and the
//! ones that do not keep pushing: a core that rejects each new INVITE with the same
//! probability (OCC) hands the capacity the DEOC edges give up to the others, and the DEOC
//! edges' rates fall towards their floor. [`FairShare`] sits *behind* the core's local
//! controller: the local controller still decides **how many** new INVITEs the core rejects
//! (every rejection it decides is one rejection to hand out); `FairShare` decides **whose**.
//! It keeps, per upstream (the previous hop: the driver names it with a [`TargetId`]), the
//! number of its new INVITEs admitted recently (a count decaying with time constant
//! `window`), and hands each rejection to an upstream among the **top admitters**:
//!
//! ```text
//!  new INVITE from u ──> local controller (OCC, ...) ──decision──> FairShare ──> admit / 503
//!
//!  top    = max over upstreams of admitted_v (decayed counts)
//!  u on top ⇔ admitted_u ≥ (1 − tolerance)·top
//!  reject  & u on top       → reject
//!  reject  & u not on top   → admit it, owe one rejection (debt + 1, at most max_debt)
//!  admit   & debt > 0 & on top → reject it instead (debt − 1)
//!  admit   otherwise        → admit
//! ```
//!
//! Rejections thus always fall on the largest admitted flows: they are cut down towards each
//! other while the smaller ones keep everything they send — the water-filling of max-min
//! fairness ([`max_min_share`]: `Σ_u min(λ_u, s) = A`) reached decision by decision, without
//! estimating the capacity `A`: the local controller's own rejections carry it, at once, so a
//! local controller that oscillates (OCC with seed 003's 1 s interval swings between
//! admitting all and nearly nothing) is followed without lag. The number of rejections is the
//! local controller's (up to the debt still owed); only who gets them changes. With one
//! upstream, or when the local controller rejects nothing, every decision passes through.
//!
//! - **Tolerance** (10%): an upstream within 10% of the top counts as on top; flows of a few
//!   calls per second counted over a few seconds are noisy, and an upstream holding itself
//!   just below the others (a DEOC edge) must not be rejected for the noise.
//! - **Deterministic**: no draw; the same arrivals and decisions give the same answers.
//! - **Rejections** are 503s with the reason (and `Retry-After`) of the local controller's
//!   latest rejection ([`RejectReason::Occupancy`] before the first).
//! - Arrival rates are measured too (EWMA over `interval`s, [`FairShare::rates`]) for what a
//!   server reports upstream (the simulator's load reports: an upstream's max-min share over
//!   its rate).
//! - Memory is bounded: at most `max_upstreams` upstreams; one idle for `forget_after` is
//!   forgotten; when the table is full the one idle longest makes room.
//!
//! **Where it plugs into the real server** (not wired there yet): `holdline-server`'s worker
//! asks the local controller at the ingress gate (the gate callback it gives
//! `Endpoint::handle_admitting`) knowing the datagram's source address or the connection; the
//! worker would number the previous hop (the source address, or the `ConnId` for streams, as
//! the forward-gate controllers number next hops) and pass the local controller's decision
//! for each new INVITE through [`FairShare::decide`], one `FairShare` per worker (each worker
//! sees its share of each upstream's calls, sharded by Call-ID, so the counts agree).

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
    /// Time constant of the decaying admitted counts: how far back "admitted recently"
    /// looks. Default 4 s (four of seed 003's DEOC periods).
    pub window: Duration,
    /// An upstream within this fraction of the top admitted count is on top, in `[0, 1)`.
    /// Default 0.1.
    pub tolerance: f64,
    /// Most rejections owed at once (≥ 1): admissions handed to upstreams below the top that
    /// the top admitters have not yet paid back. Default 16.
    pub max_debt: u32,
    /// How often the upstreams' arrival rates are updated (for reports). Default 1 s.
    pub interval: Duration,
    /// Weight of the last interval in each upstream's arrival rate (EWMA), in `(0, 1]`.
    /// Default 0.5.
    pub ewma_weight: f64,
    /// Most upstreams with state (≥ 1). Default 1,024.
    pub max_upstreams: usize,
    /// An upstream without an arrival for this long is forgotten. Default 60 s.
    pub forget_after: Duration,
}

impl Default for FairShareConfig {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(4),
            tolerance: 0.1,
            max_debt: 16,
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
        check_positive("window", self.window)?;
        check_range(
            "tolerance",
            self.tolerance,
            0.0,
            1.0 - f64::EPSILON,
            "at least 0, below 1",
        )?;
        check_nonzero("max_debt", self.max_debt as usize)?;
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
    /// Its recent admissions: the decaying count (time constant `window`).
    pub recent: f64,
    /// New INVITEs asked about in all.
    pub arrivals: u64,
    /// New INVITEs admitted in all.
    pub admitted: u64,
    /// New INVITEs rejected in all.
    pub rejected: u64,
    /// Of those admitted, the ones the local controller had rejected (given a rejection
    /// owed by a top admitter instead).
    pub spared: u64,
    /// Of those rejected, the ones the local controller had admitted (paying a debt).
    pub charged: u64,
}

#[derive(Clone, Debug)]
struct Upstream {
    view: FairUpstream,
    /// When `view.recent` was last brought up to date.
    recent_at: Instant,
    /// Arrivals in the current interval.
    interval_arrivals: u64,
    last_seen: Instant,
}

impl Upstream {
    /// The decayed admitted count at `now`.
    fn recent(&self, now: Instant, window: f64) -> f64 {
        let age = secs(now.saturating_duration_since(self.recent_at));
        self.view.recent * (-age / window).exp()
    }
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
    /// Rejections owed by the top admitters.
    debt: u32,
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
            debt: 0,
            last_rejection: None,
            intervals: 0,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &FairShareConfig {
        &self.config
    }

    /// Rejections currently owed by the top admitters.
    pub fn debt(&self) -> u32 {
        self.debt
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

    /// The admission rate of the top admitters at `now` (new INVITEs per second, the
    /// largest decaying count over `window`): the level the rejections cut the largest flows
    /// to — their current max-min share.
    pub fn top_rate(&self, now: Instant) -> f64 {
        let window = secs(self.config.window);
        let now = self.latest.max(now);
        self.upstreams
            .values()
            .map(|u| u.recent(now, window))
            .fold(0.0, f64::max)
            / window
    }

    /// Completed rate intervals.
    pub fn intervals(&self) -> u64 {
        self.intervals
    }

    /// The local controller decided `inner` for a new INVITE from `upstream`: the decision
    /// to apply. Ask it for new INVITEs only (every other message is admitted by contract).
    pub fn decide(&mut self, now: Instant, upstream: TargetId, inner: Decision) -> Decision {
        self.latest = self.latest.max(now);
        let now = self.latest;
        self.roll(now);
        let window = secs(self.config.window);
        self.entry(upstream, now);
        let top = self
            .upstreams
            .values()
            .map(|u| u.recent(now, window))
            .fold(0.0, f64::max);
        let tolerance = self.config.tolerance;
        let max_debt = self.config.max_debt;
        if let Decision::Reject(r) = inner {
            self.last_rejection = Some(r);
        }
        let fallback = self
            .last_rejection
            .unwrap_or(Rejection::service_unavailable(
                RejectReason::Occupancy,
                None,
            ));
        let Some(u) = self.upstreams.get_mut(&upstream) else {
            return inner;
        };
        let mine = u.recent(now, window);
        let on_top = mine >= (1.0 - tolerance) * top;
        u.view.arrivals = u.view.arrivals.saturating_add(1);
        u.interval_arrivals = u.interval_arrivals.saturating_add(1);
        let decision = match inner {
            Decision::Reject(_) if !on_top && self.debt < max_debt => {
                self.debt += 1;
                u.view.spared = u.view.spared.saturating_add(1);
                Decision::Admit
            }
            Decision::Admit if on_top && self.debt > 0 => {
                self.debt -= 1;
                u.view.charged = u.view.charged.saturating_add(1);
                Decision::Reject(fallback)
            }
            d => d,
        };
        u.view.recent = mine;
        u.recent_at = now;
        if decision.is_admit() {
            u.view.recent += 1.0;
            u.view.admitted = u.view.admitted.saturating_add(1);
        } else {
            u.view.rejected = u.view.rejected.saturating_add(1);
        }
        decision
    }

    /// Makes room for `upstream` and its state if needed.
    fn entry(&mut self, upstream: TargetId, now: Instant) {
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
                recent: 0.0,
                arrivals: 0,
                admitted: 0,
                rejected: 0,
                spared: 0,
                charged: 0,
            },
            recent_at: now,
            interval_arrivals: 0,
            last_seen: now,
        });
        u.last_seen = now;
    }

    /// Ends the interval(s) due at `now`: arrival rates, forgetting.
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
        if self.upstreams.is_empty() {
            self.debt = 0;
        }
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
            FairShareConfig {
                window: Duration::ZERO,
                ..FairShareConfig::default()
            },
            FairShareConfig {
                tolerance: 1.0,
                ..FairShareConfig::default()
            },
            FairShareConfig {
                max_debt: 0,
                ..FairShareConfig::default()
            },
        ] {
            assert!(c.validate().is_err(), "{c:?}");
        }
    }
}
