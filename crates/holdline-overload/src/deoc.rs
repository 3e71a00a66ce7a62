//! `deoc`: distributed end-to-end overload control at the ingress edge (seed 003).
//!
//! An ingress edge server keeps one DEOC per *target* — the egress edge server a call leaves
//! the network by (its last hop, seed 003 l. 94-98) — and throttles new calls towards that
//! target with nothing but what comes back: "were 503s received in the last period?". No
//! cooperation from the core is needed, so any vendor's core servers are protected. Per target
//! (seed 003 Fig. 3, l. 108-126):
//!
//! ```text
//!  new INVITE ──> measurer ──────────> restrictor ──admit──> forwarded to the target edge
//!  for target     ΔI ← (1−w)ΔI + wΔi   call gapping: after an      │
//!                 λ = 1/ΔI      (1)    admitted call, reject        │ 503 / 408 / no final
//!                      │               for τ  (reason CallGap)      │ response (timeout)
//!                      │ λ_t                 ^ τ_{t+1} = max(0, 1/r_{t+1} − 1/λ_t)   (2)
//!                      v                     │                      v
//!                 ┌──────────── controller, every T (Fig. 4) ────────────────────┐
//!                 │ rejections in T > 0   → overload recovery:                   │
//!                 │      r ← r − βr   (4)  unless this T's overload factor        │
//!                 │                        (rejections / admitted) < the last T's │
//!                 │ none, λ_t > r_t       → overload prevention:                  │
//!                 │      r ← r₀ + [(1−k)α·n]^(1/(1−k))  (12), n-th step of the    │
//!                 │      epoch that began at r₀ (the solution of (11))            │
//!                 │ none, λ_t ≤ r_t       → underload: r ← λ_t, τ = 0             │
//!                 └───────────────────────────────────────────────────────────────┘
//!  100 s without a rejection: terminated (admit all, measure only); the next rejection
//!  restarts it in underload with r = λ.
//! ```
//!
//! # Parameters and where they come from
//!
//! Line numbers are those of `../shared/seeds/003_dcdf7fa089d59c52.txt`; the errata and
//! choices of `../shared/seeds/NOTES.md` ("003 — DEOC") apply.
//!
//! | field | default | source |
//! | --- | --- | --- |
//! | `period` (`T`) | 1 s | l. 118 (the controller runs every `T`), l. 307 (`T` = 1 s) |
//! | `ewma_weight` (`w`) | 0.1 | eq. 1 (l. 114), l. 307 |
//! | `alpha` (`α`) | 0.2 | eq. 11 (l. 236), l. 307 ("0.2 unless otherwise specified") |
//! | `k` | 0.5 | eq. 11, l. 288 ("we set k as 1/2") |
//! | `beta` (`β`) | 1/8 | eq. 4 (l. 174), l. 307 ("as used by" its ref. 41) |
//! | `overload_factor` | on | l. 151, l. 156 |
//! | `quiet_period` | 100 s | l. 307 ("terminated if there is no call rejection received within 100 s") |
//! | `min_rejections`, `min_rejection_share` | 1, 0 | Fig. 4, l. 307 (any rejection in `T` counts, the next one restarts); holdline: more, or a share of the calls |
//! | `max_decrease` | 0 (off: `β`) | eq. 4 (l. 174: `β`); holdline: a target of many calls per period is cut by its overload factor, up to this |
//! | `increase` | [`IncreaseLaw::ClosedForm`] | **gap**, see below |
//! | `factor_resets_when_quiet` | on | **gap**: what "the latest" overload factor is (l. 151) |
//! | `start_terminated` | on | **gap**: whether DEOC runs before its first rejection |
//! | `open_gap` | on | **gap**: eq. 1 never lowers `λ` while no call arrives |
//! | `min_rate` | 0.1 calls/s | **gap**: eq. 4 has no floor, eq. 2 divides by `r` |
//! | `timeouts_count` | on | beyond the paper: l. 134 leaves timeouts to future work |
//! | `max_targets`, `forget_after` | 1,024, 600 s | holdline: bounded memory |
//!
//! **The increase law (the gap that matters).** Eq. 11, `r_{t+1} = r_t + α(r_t − r₀)^k`, taken
//! literally never leaves `r₀` for `0 < k < 1`: at the start of an epoch `r_t = r₀` and
//! `0^k = 0`. The paper's analysis (eq. 12-17, Tables 1 and 3, Fig. 7) uses eq. 12,
//! `r(t) = r₀ + [(1−k)αt]^(1/(1−k))`, the non-trivial solution of eq. 11's continuous form
//! (l. 202-206, 236-244). By default DEOC evaluates eq. 12 at whole periods
//! ([`IncreaseLaw::ClosedForm`]): the `n`-th increase of an epoch sets
//! `r = r₀ + [(1−k)α·n]^(1/(1−k))`, so the stable duration in periods is `⌈T_s⌉` of eq. 16
//! exactly. [`IncreaseLaw::Recurrence`] runs eq. 11 itself, its first step taken from eq. 12
//! (`r₁ = r₀ + [(1−k)α]^(1/(1−k))`); it grows a little slower than eq. 12 (it lags by about a
//! period at the paper's values). For `k = 0` both are the additive increase `r + α` (eq. 3).
//! `α` is per period: `t` in eq. 11-12 is counted in periods of `T` (l. 118, l. 176).
//!
//! **Epochs.** `r₀` (l. 244: "by definition r₀ = r(0)", the rate at the start of a control
//! epoch) is the rate when the controller enters overload prevention from another state: after
//! a decrease, after a period of overload recovery without one, or after underload.
//!
//! **The overload factor** (l. 151-156): each period's factor is rejections / admitted calls of
//! that period (`∞` when rejections came back but nothing was admitted, 0 without rejections).
//! In overload recovery the decrease is skipped when this period's factor is smaller than "the
//! latest one"; equal or larger decreases. With `factor_resets_when_quiet` (default) "the
//! latest" is the previous period's factor, 0 after a period without rejections, so the first
//! period of every overload episode decreases; without it, it is the factor of the last period
//! that had rejections, however long ago.
//!
//! **Termination** (l. 307): a running DEOC whose last rejection (or restart) is `quiet_period`
//! old at the end of a period terminates: it admits everything and stops adapting, but keeps
//! measuring `λ`. The next counted rejection restarts it at once in underload with `r = λ` (the
//! underload rule's value: every call was being admitted), and that rejection counts in the
//! restarted period, so the period's end decreases `r`. (Gap: a `λ` measured over fewer than
//! `1/w` gaps is not taken as `r`; the restarted period then has none, and its end decreases
//! from the `λ` measured by then.) With `min_rejections` = `n` > 1
//! (holdline), a period is one with rejections only when `n` came in it: a terminated
//! controller restarts at the `n`-th (all `n` count in the restarted period), a running one
//! enters overload recovery only then, and fewer neither keep it from terminating nor count
//! as overload (the state machine reads them as none); with `min_rejection_share` = `f`,
//! fewer also count when they are at least `f` of the calls admitted in the period (or the
//! one before, whichever is more), so that a target of a few calls per period still reacts
//! to one. The paper says underload is the
//! initial state (l. 145) but not whether DEOC runs before any rejection: with
//! `start_terminated` (default) a new target starts terminated, since it has had no rejection
//! "within 100 s", and the literal reading (`false`) costs 100 s of restrictor rejections
//! caused only by the noise of `λ` (the EWMA of exponential gaps at `w = 0.1` has a
//! coefficient of variation of about 0.23).
//!
//! **The measurer** sees every new INVITE for the target, before the restrictor (Fig. 3). The
//! first gap seeds the average, and until `1/w` gaps were seen each weighs `1/n` (the plain
//! mean of the first `n`; gap: eq. 1 does not say how the average starts, and one tiny first
//! gap would otherwise read as a huge `λ` for tens of arrivals — a restart then set `r`
//! there and gapped nothing for seconds, seen in a CI run); before two arrivals there is no
//! `λ` (treated as "unknown": the gap is then `1/r`). With `open_gap` (default), at the end
//! of a period in which no call
//! arrived and whose open gap since the last arrival exceeds the average, `λ_t` is read as if a
//! call arrived now (`(1−w)ΔI + w·open`); the stored average is not changed. Without it, `λ`
//! stays at its last value while calls stop — and in overload prevention `r` then keeps
//! growing with nothing arriving.
//!
//! **The restrictor** (l. 120-126) compares each arrival with the last admitted call: it is
//! admitted when at least `τ` has passed, so a new `τ` applies to the running gap at once. Eq. 2
//! assumes Poisson arrivals (l. 122): the admitted rate is `r` on average for Poisson arrivals,
//! and more regular arrivals pass more.
//!
//! **Beyond the paper** (issue 17 item 2): a timeout (a `408`, or no final response:
//! [`DeocReply::Timeout`]) counts as a rejection while `timeouts_count` is on (default), the
//! implicit signal of l. 134 that the paper left to future work, so DEOC also protects against
//! cores that drop rather than reject. A 503 the driver identified as maintenance
//! ([`DeocReply::Maintenance`]) never counts: l. 444 asks for a 503 reason header to tell the
//! two apart; holdline has no such header yet (issue 15 item 4), so the driver decides and
//! passes [`DeocReply::Final`]`(503)` for every other 503.
//!
//! **Load reports** ([`DeocSignal::LoadReport`], seed 003's future work, l. 442: "a more
//! complex and accurate feedback than the binary one"; off by default). The servers on a
//! call's path report in its responses how much they want the load they receive multiplied
//! by — their *headroom* `g` (below 1: overloaded; above 1: room) — with a sequence number
//! per reporter ([`LoadReport`], fed by [`Deoc::on_load_report`]). At the end of a period in
//! which a fresh report came for a target, `r ← a·(1 + gain·(g − 1))`, where `a` is the calls
//! admitted for the target in the *previous* period per second (what the reporter measured:
//! a report describes the reporter's last closed interval, which ended before the period the
//! report arrives in when its interval is `T`, as OCC's 1 s interval and seed 003's `T` are;
//! applying it to the current period's admissions would apply one cut twice) and `g` the mean headroom of the period's fresh reports (capped at `max_growth`);
//! the state is overload recovery when `g < 1`, else prevention or underload as `λ` compares
//! with the new `r`. Instead of cutting by `β` and probing back up along eq. 12, the edge
//! jumps to what the reporter can take. Each (reporter, sequence number) is used once per
//! target: a report repeated in many responses of one interval is not applied again. A period
//! without a fresh report holds the rate while the last report is less than `max_age` periods
//! old, and then falls back to the paper's binary rule (the reporters stopped reporting, or
//! nothing was admitted). A report with `g < 1` restarts a terminated controller and resets
//! its quiet period, as a rejection does.
//!
//! **Only new INVITEs** are measured and gapped (seed 003 l. 94: "overload control only deals
//! with INVITE requests"): a new registration or refresh asked at the forward gate is admitted
//! (and counted as admitted); everything else passes uncounted, as in every controller.
//!
//! **Memory is bounded**: at most `max_targets` targets have state (a fixed-size record of a
//! few hundred bytes each, about 300 KiB at the default 1,024); a target without an arrival or a reply for `forget_after` is forgotten at
//! the next period's end, and when the table is full a new target takes the place of a
//! terminated target first, else of the one idle longest.
//!
//! Inputs through [`Controller`]: [`Signal::Completed`] (its [`Outcome`] read as a
//! [`DeocReply`]: `Final(503)` overload, `Final(408)` and `Timeout` timeouts),
//! [`Signal::TargetGone`]. [`Signal::Forwarded`] is not needed: the admitted calls of a period
//! are the restrictor's own admissions. Gate: [`Gate::Forward`](crate::Gate::Forward), reason
//! [`CallGap`](crate::RejectReason::CallGap). Drivers that do not use the trait call
//! [`Deoc::admit_call`], [`Deoc::on_response`], [`Controller::poll_timeout`] and
//! [`Controller::handle_timeout`] directly.

use std::collections::BTreeMap;

use holdline_base::{Duration, Instant, Rng};

use crate::admission::{Admission, Class, Decision, RejectReason, SERVICE_UNAVAILABLE, TargetId};
use crate::algorithm::{Algorithm, ConfigError, check_nonzero, check_positive, check_range};
use crate::common::{Counters, decides, secs};
use crate::controller::{Controller, ControllerFactory};
use crate::fair::max_min_share;
use crate::signal::{Outcome, Signal};
use crate::snapshot::{Snapshot, TargetSnapshot};

/// The final responses the restrictor may answer a gapped call with
/// ([`DeocConfig::status`]): final, not asking for credentials or a redirect, and each with
/// a meaning a caller acts on (try later, busy, failed, declined).
pub const RESTRICTOR_STATUSES: [u16; 6] = [480, 486, 500, 503, 600, 603];

/// The smallest mean inter-arrival time the measurer uses, seconds: calls arriving at the
/// same instant (a virtual clock, a burst read in one system call) would make `λ` infinite.
/// `λ` is thus at most 10⁶ calls/s.
const MIN_MEAN_GAP: f64 = 1e-6;

/// The longest restrictor gap, when `1/r` does not fit a [`Duration`] (never with a valid
/// `min_rate`, which bounds the gap by `1/min_rate`).
const MAX_GAP: Duration = Duration::from_secs(86_400);

/// How overload prevention increases the admission rate (seed 003 §4.3; see the
/// [module documentation](self) for why this is a setting).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IncreaseLaw {
    /// Eq. 12 at whole periods: the `n`-th increase of an epoch that began at `r₀` sets
    /// `r = r₀ + [(1−k)α·n]^(1/(1−k))`. The paper's analysis (eq. 15-17) holds exactly on the
    /// period grid. The default.
    ClosedForm,
    /// Eq. 11 step by step, `r ← r + α(r − r₀)^k`, its first step (where eq. 11 gives 0 for
    /// `k > 0`) taken from eq. 12: `r₁ = r₀ + [(1−k)α]^(1/(1−k))`.
    Recurrence,
}

/// The configuration of [`Deoc`]. Every default is the paper's value where the paper gives
/// one; the [module documentation](self) lists the sources and the gaps.
#[derive(Clone, Debug, PartialEq)]
pub struct DeocConfig {
    /// `T`, how often the rate-adaptation controller runs. Seed 003 l. 118, l. 307: 1 s.
    pub period: Duration,
    /// `w`, the EWMA weight of a new inter-arrival time in eq. 1 (l. 114), in `(0, 1]`.
    /// l. 307: 0.1.
    pub ewma_weight: f64,
    /// `α`, the increase parameter of eq. 11 (l. 236), per period, `> 0`. l. 307: 0.2.
    pub alpha: f64,
    /// `k`, the exponent of eq. 11, in `[0, 1)` (l. 236). l. 288: 1/2.
    pub k: f64,
    /// `β`, the multiplicative decrease of eq. 4 (l. 174), in `(0, 1)`. l. 307: 1/8.
    pub beta: f64,
    /// Eq. 11 or eq. 12 for the increase. Gap (eq. 11 stalls at `r₀` for `k > 0`): default
    /// [`IncreaseLaw::ClosedForm`].
    pub increase: IncreaseLaw,
    /// Skip the decrease in a period whose overload factor is smaller than the latest one
    /// (l. 151-156). `false` decreases on every period with rejections (the plain RA of §4).
    /// Default `true`.
    pub overload_factor: bool,
    /// Gap (l. 151, "maintain the latest one"): `true` (default) compares with the previous
    /// period's factor, 0 when it had no rejections; `false` with the factor of the last period
    /// that had rejections.
    pub factor_resets_when_quiet: bool,
    /// Terminate after this long without a rejection; `None` never terminates. l. 307: 100 s.
    pub quiet_period: Option<Duration>,
    /// The binary signal's threshold, ≥ 1: a period is one "with rejections" (overload
    /// recovery, eq. 4) when at least this many counted rejections came in it, and a
    /// terminated controller restarts at the this-many-th within a period. The paper's is 1
    /// (Fig. 4: "rejections in T > 0"; l. 307: restart on the next one), the default.
    /// holdline: a larger value keeps stray 503s (a healthy path's occasional busy callee,
    /// one server's hiccup) from restarting the controller at `r = λ`, cutting it by `β`
    /// and keeping it from terminating; fewer rejections in a period count as none.
    pub min_rejections: u32,
    /// With `min_rejections` > 1: a period with fewer rejections still counts when they are
    /// at least this share of the calls admitted for the target in it (or in the period
    /// before, whichever is more), in `[0, 1]`; 0 (default): only the count. holdline: a
    /// target of a few calls per period is then still controlled on one rejection (1 of 2
    /// calls is 50%) while one of tens of calls is not.
    pub min_rejection_share: f64,
    /// holdline (eq. 4 cuts by `β` alone): the largest share of `r` one decrease may cut, in
    /// `[0, 0.9]`. A decrease in a period with at least [`FACTOR_CUT_MIN_CALLS`] admitted
    /// calls cuts `r` by the period's overload factor `f` (rejections / admitted) when `f`
    /// exceeds `β`, up to this: `r ← r·(1 − min(f, max_decrease))`. At or below `β` (the
    /// default, 0) every decrease is eq. 4's. A flash crowd at 5× a target's share otherwise
    /// takes tens of periods of `β` cuts (most skipped by the overload-factor rule while the
    /// factor falls) to come down from the restart's `r = λ`, with the cores spending their
    /// time on the rejections meanwhile.
    pub max_decrease: f64,
    /// Gap (l. 145 vs l. 307): a target seen for the first time starts terminated (`true`,
    /// default: it has had no rejection) or running in underload (`false`).
    pub start_terminated: bool,
    /// Gap (eq. 1 updates only on arrivals): read `λ_t` with the open gap since the last
    /// arrival as a sample when it exceeds both the average and the period. Default `true`.
    pub open_gap: bool,
    /// Gap (eq. 4 has no floor; eq. 2 divides by `r`): the smallest admission rate, calls per
    /// second, `> 0`. The restrictor's gap is at most `1/min_rate`. Default 0.1 (a probe call
    /// every 10 s at most).
    pub min_rate: f64,
    /// Beyond the paper (l. 134, future work): a timeout (`408`, or no final response) counts
    /// as a rejection. Default `true`.
    pub timeouts_count: bool,
    /// Most targets with state (≥ 1). Default 1,024.
    pub max_targets: usize,
    /// A target without an arrival or a reply for this long is forgotten. Default 600 s.
    pub forget_after: Duration,
    /// `Retry-After` for the restrictor's 503s. Default `None` (l. 301: 503 without
    /// Retry-After).
    pub retry_after: Option<Duration>,
    /// The restrictor's final response to a gapped call: one of [`RESTRICTOR_STATUSES`].
    /// Default 503 (l. 301). An operator may prefer a status the callers' phones do not treat
    /// as the server being down (e.g. 480 Temporarily Unavailable): a 503 makes some phones
    /// fail over to another server (RFC 3263 §4.3).
    pub status: u16,
    /// What the rate adaptation reads: the paper's binary signal ([`DeocSignal::Binary`],
    /// default) or the servers' load reports ([`DeocSignal::LoadReport`], seed 003's future
    /// work, l. 442).
    pub signal: DeocSignal,
}

/// What DEOC's rate adaptation reads at the end of a period (see the
/// [module documentation](self), "Load reports").
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DeocSignal {
    /// The paper's signal: were rejections (503s, and timeouts if counted) received in the
    /// period. The default.
    Binary,
    /// The servers on the path report their headroom in the responses of the calls DEOC
    /// admitted ([`Deoc::on_load_report`]); a period with a fresh report sets
    /// `r ← a·(1 + gain·(g − 1))`, `a` the calls admitted in the previous period per second
    /// (the interval the report measured) and `g`
    /// the mean of its fresh reports' headroom (at most `max_growth`). Without a fresh report
    /// for `max_age` periods, the paper's binary rule applies.
    LoadReport {
        /// How much of the reported correction is applied per period, in `(0, 1]`
        /// (default 1: all of it).
        gain: f64,
        /// The largest headroom used, `≥ 1` (default 2: at most doubling per period).
        max_growth: f64,
        /// Periods a report stays in force when no fresh one comes (the rate is held), `≥ 1`
        /// (default 3); after that, the binary rule.
        max_age: u32,
    },
}

impl DeocSignal {
    /// [`DeocSignal::LoadReport`] with its defaults (gain 1, growth at most 2×, 3 periods).
    pub const fn load_report() -> Self {
        Self::LoadReport {
            gain: 1.0,
            max_growth: 2.0,
            max_age: 3,
        }
    }
}

/// A load report read from a response of a call DEOC admitted: one server on the call's path
/// (the most constrained one, when the servers combine their reports on the way back) says how
/// much it wants the load it receives from its upstream multiplied by.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoadReport {
    /// The reporting server (the driver's numbering). Freshness is per reporter.
    pub reporter: u64,
    /// The report's sequence number at the reporter (its measurement interval): each
    /// (reporter, seq) is used once per target, so a report repeated in many responses is
    /// not applied again and again.
    pub seq: u64,
    /// The headroom `g`: below 1 the reporter is overloaded and asks for `g` times the load;
    /// above 1 it has room for `g` times the load.
    pub headroom: f64,
}

impl Default for DeocConfig {
    fn default() -> Self {
        Self {
            period: Duration::from_secs(1),
            ewma_weight: 0.1,
            alpha: 0.2,
            k: 0.5,
            beta: 0.125,
            increase: IncreaseLaw::ClosedForm,
            overload_factor: true,
            factor_resets_when_quiet: true,
            quiet_period: Some(Duration::from_secs(100)),
            min_rejections: 1,
            min_rejection_share: 0.0,
            max_decrease: 0.0,
            start_terminated: true,
            open_gap: true,
            min_rate: 0.1,
            timeouts_count: true,
            max_targets: 1024,
            forget_after: Duration::from_secs(600),
            retry_after: None,
            status: SERVICE_UNAVAILABLE,
            signal: DeocSignal::Binary,
        }
    }
}

impl ControllerFactory for DeocConfig {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Deoc
    }

    fn validate(&self) -> Result<(), ConfigError> {
        check_positive("period", self.period)?;
        check_range(
            "ewma_weight",
            self.ewma_weight,
            f64::MIN_POSITIVE,
            1.0,
            "greater than 0, at most 1",
        )?;
        check_range(
            "alpha",
            self.alpha,
            f64::MIN_POSITIVE,
            1e9,
            "greater than 0, at most 1e9",
        )?;
        // k < 1 (eq. 11's domain): the upper bound excludes 1 itself.
        check_range("k", self.k, 0.0, 1.0 - f64::EPSILON, "at least 0, below 1")?;
        check_range(
            "beta",
            self.beta,
            f64::MIN_POSITIVE,
            1.0 - f64::EPSILON,
            "greater than 0, below 1",
        )?;
        check_range(
            "min_rate",
            self.min_rate,
            1e-4,
            1e6,
            "between 0.0001 and 1,000,000 calls/s",
        )?;
        if let Some(q) = self.quiet_period {
            check_positive("quiet_period", q)?;
        }
        check_positive("forget_after", self.forget_after)?;
        check_nonzero("min_rejections", self.min_rejections as usize)?;
        check_range(
            "min_rejection_share",
            self.min_rejection_share,
            0.0,
            1.0,
            "between 0 and 1",
        )?;
        check_range(
            "max_decrease",
            self.max_decrease,
            0.0,
            0.9,
            "between 0 (off) and 0.9",
        )?;
        if !RESTRICTOR_STATUSES.contains(&self.status) {
            return Err(ConfigError::OutOfRange {
                field: "status",
                value: f64::from(self.status),
                expected: "one of 480, 486, 500, 503, 600, 603",
            });
        }
        if let DeocSignal::LoadReport {
            gain,
            max_growth,
            max_age,
        } = self.signal
        {
            check_range(
                "gain",
                gain,
                f64::MIN_POSITIVE,
                1.0,
                "greater than 0, at most 1",
            )?;
            check_range("max_growth", max_growth, 1.0, 1e6, "at least 1")?;
            check_nonzero("max_age", max_age as usize)?;
        }
        check_nonzero("max_targets", self.max_targets)
    }

    fn build(&self, now: Instant, _rng: Rng) -> Result<Box<dyn Controller>, ConfigError> {
        Ok(Box::new(Deoc::new(self.clone(), now)?))
    }
}

/// The state of one target's rate-adaptation controller (seed 003 Fig. 4, l. 141-156), plus
/// termination (l. 307).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeocState {
    /// Terminated (or never started): every call admitted, `λ` still measured; the next
    /// counted rejection restarts the controller in [`Underload`](Self::Underload).
    Terminated,
    /// No rejection and `λ_t ≤ r_t`: `r = λ_t`, no gap (l. 145). The initial state.
    Underload,
    /// No rejection and `λ_t > r_t`: `r` increases by eq. 11/12, calls are gapped (l. 147-149).
    OverloadPrevention,
    /// Rejections in the period: `r` decreases by eq. 4 unless the overload factor fell
    /// (l. 151-156).
    OverloadRecovery,
}

impl DeocState {
    /// The metrics label, e.g. `overload_prevention`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Terminated => "terminated",
            Self::Underload => "underload",
            Self::OverloadPrevention => "overload_prevention",
            Self::OverloadRecovery => "overload_recovery",
        }
    }
}

/// How the INVITE transaction of a call DEOC admitted ended, as DEOC reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeocReply {
    /// A final response with this status. `503` is the paper's rejection signal (l. 132);
    /// `408` is a timeout (counted with `timeouts_count`); any other status changes nothing.
    Final(u16),
    /// A `503` whose reason the driver identified as maintenance, not overload (l. 444): never
    /// counted. holdline defines no such reason yet (issue 15 item 4); the driver decides.
    Maintenance,
    /// No final response: Timer B (or C) fired. Counted with `timeouts_count`.
    Timeout,
}

impl From<Outcome> for DeocReply {
    fn from(o: Outcome) -> Self {
        match o {
            Outcome::Final(s) => Self::Final(s),
            Outcome::Timeout => Self::Timeout,
        }
    }
}

/// One target's DEOC, for metrics and tests.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeocTarget {
    /// The controller's state.
    pub state: DeocState,
    /// `r`, the admission rate for the current period (calls/s); `None` while not limiting
    /// (terminated, or no measurement yet).
    pub rate: Option<f64>,
    /// `λ_t` read at the end of the last period (calls/s), if measured.
    pub arrival_rate: Option<f64>,
    /// `τ`, the restrictor's current gap (zero: every call admitted).
    pub gap: Duration,
    /// `r₀` of the current epoch while in overload prevention.
    pub epoch_start: Option<f64>,
    /// Increases so far in the current epoch.
    pub epoch_steps: u32,
    /// The latest overload factor (rejections / admitted calls of a period).
    pub overload_factor: f64,
    /// Calls admitted in the current period.
    pub period_admitted: u64,
    /// Rejections (503s, and timeouts if counted) received in the current period.
    pub period_rejections: u64,
    /// Calls admitted in all.
    pub admitted: u64,
    /// Calls the restrictor rejected in all.
    pub restricted: u64,
    /// Overload 503s received in all.
    pub rejections: u64,
    /// Timeouts (408, no final response) received in all, counted or not.
    pub timeouts: u64,
    /// Maintenance 503s received (never counted).
    pub maintenance: u64,
    /// Decreases of `r` (eq. 4) so far.
    pub decreases: u64,
    /// Restarts after termination (the first start included).
    pub restarts: u64,
    /// When the last counted rejection came.
    pub last_rejection: Option<Instant>,
    /// Fresh load reports received in all ([`DeocSignal::LoadReport`]).
    pub reports: u64,
    /// The headroom applied at the last period with a fresh report.
    pub headroom: Option<f64>,
}

/// One target's measurer, restrictor and controller.
#[derive(Clone, Debug)]
struct Target {
    view: DeocTarget,
    /// Measurer: the last arrival and the mean gap ΔI_avg (seconds).
    last_arrival: Option<Instant>,
    mean_gap: Option<f64>,
    /// Gaps measured so far (the average's warm-up).
    gaps: u32,
    /// Restrictor: the last admitted call.
    last_admit: Option<Instant>,
    /// The factor of the previous period (what "the latest" compares with).
    latest_factor: f64,
    /// Since when the controller has been quiet: its last rejection or its (re)start.
    quiet_since: Instant,
    /// The last arrival or reply (for forgetting and eviction).
    last_active: Instant,
    /// Fresh load reports of the current period: sum of headroom, count.
    period_reports: (f64, u32),
    /// Calls admitted in the previous period (what a report arriving in this one measured).
    prev_admitted: u64,
    /// Periods since the last one with a fresh report (`None`: never had one).
    report_age: Option<u32>,
    /// The last sequence number used per reporter (bounded, oldest dropped).
    seen: Vec<(u64, u64)>,
    /// The reporter of the last fresh report: the targets one server reports on share the
    /// budget it gives this edge.
    last_reporter: u64,
}

/// What one reporter's fresh reports ask of this edge in a period: the sum of the rates
/// asked of each target, and the targets (with their arrival rates and headroom).
type ReporterBudget = (f64, Vec<(TargetId, f64, f64)>);

/// Reporters whose last sequence number a target remembers.
const MAX_REPORTERS: usize = 16;

impl Target {
    fn new(now: Instant, start_terminated: bool) -> Self {
        Self {
            view: DeocTarget {
                state: if start_terminated {
                    DeocState::Terminated
                } else {
                    DeocState::Underload
                },
                rate: None,
                arrival_rate: None,
                gap: Duration::ZERO,
                epoch_start: None,
                epoch_steps: 0,
                overload_factor: 0.0,
                period_admitted: 0,
                period_rejections: 0,
                admitted: 0,
                restricted: 0,
                rejections: 0,
                timeouts: 0,
                maintenance: 0,
                decreases: 0,
                restarts: u64::from(!start_terminated),
                last_rejection: None,
                reports: 0,
                headroom: None,
            },
            last_arrival: None,
            mean_gap: None,
            gaps: 0,
            last_admit: None,
            latest_factor: 0.0,
            quiet_since: now,
            last_active: now,
            period_reports: (0.0, 0),
            prev_admitted: 0,
            report_age: None,
            seen: Vec::new(),
            last_reporter: 0,
        }
    }

    /// Takes a load report: true when it is fresh (its reporter's sequence number is new).
    fn report(&mut self, r: &LoadReport) -> bool {
        if !r.headroom.is_finite() || r.headroom < 0.0 {
            return false;
        }
        match self.seen.iter_mut().find(|(who, _)| *who == r.reporter) {
            Some((_, seq)) if *seq >= r.seq => return false,
            Some((_, seq)) => *seq = r.seq,
            None => {
                if self.seen.len() >= MAX_REPORTERS {
                    self.seen.remove(0);
                }
                self.seen.push((r.reporter, r.seq));
            }
        }
        self.last_reporter = r.reporter;
        self.period_reports.0 += r.headroom;
        self.period_reports.1 = self.period_reports.1.saturating_add(1);
        self.view.reports = self.view.reports.saturating_add(1);
        true
    }

    /// The end of a period with [`DeocSignal::LoadReport`]: true when the reports decided
    /// (a fresh one, or one still in force); false: the paper's rule applies.
    /// This period's fresh reports applied to the previous period's admissions: the rate the
    /// reporter asks of this target alone, `a·(1 + gain·(g − 1))`, and `g`; `None` without a
    /// fresh report.
    fn proposal(
        &self,
        c: &DeocConfig,
        lambda: Option<f64>,
        gain: f64,
        max_growth: f64,
    ) -> Option<(f64, f64)> {
        let (sum, n) = self.period_reports;
        if n == 0 {
            return None;
        }
        let g = (sum / f64::from(n)).clamp(0.0, max_growth);
        // The report measured the reporter's last closed interval: the calls this edge
        // admitted in its previous period (the one before the report arrived).
        let admitted = self.prev_admitted as f64 / secs(c.period);
        let base = if admitted > 0.0 {
            admitted
        } else {
            self.view.rate.or(lambda).unwrap_or(c.min_rate)
        };
        Some(((base * (1.0 + gain * (g - 1.0))).max(c.min_rate), g))
    }

    /// The end of a period with [`DeocSignal::LoadReport`]: true when the reports decided
    /// (`fresh`: the share of its reporter's budget this target gets, and `g`; or a report
    /// still in force); false: the paper's rule applies.
    fn adapt_reported(
        &mut self,
        c: &DeocConfig,
        lambda: Option<f64>,
        fresh: Option<(f64, f64)>,
        max_age: u32,
    ) -> bool {
        self.period_reports = (0.0, 0);
        let v = &mut self.view;
        if fresh.is_none() {
            let age = self.report_age.map(|a| a.saturating_add(1));
            self.report_age = age;
            if age.is_none_or(|a| a >= max_age) {
                return false;
            }
            // A report still in force: hold the rate (gapping only while λ exceeds it).
            if let Some(r) = v.rate {
                if lambda.is_some_and(|l| l > r) {
                    if v.state == DeocState::Underload {
                        v.state = DeocState::OverloadPrevention;
                    }
                } else {
                    v.state = DeocState::Underload;
                }
            }
        } else if let Some((share, g)) = fresh {
            self.report_age = Some(0);
            let r = match lambda {
                Some(l) if l <= share => l,
                _ => share,
            }
            .max(c.min_rate);
            v.rate = Some(r);
            v.headroom = Some(g);
            // Gapping only while the calls arriving exceed the share.
            v.state = if !lambda.is_some_and(|l| l > r) {
                DeocState::Underload
            } else if g < 1.0 {
                v.decreases = v.decreases.saturating_add(1);
                DeocState::OverloadRecovery
            } else {
                DeocState::OverloadPrevention
            };
        }
        v.arrival_rate = lambda;
        v.epoch_start = None;
        v.epoch_steps = 0;
        self.latest_factor = 0.0;
        v.overload_factor = 0.0;
        v.gap = match (v.state, v.rate) {
            (DeocState::Underload | DeocState::Terminated, _) | (_, None) => Duration::ZERO,
            (_, Some(r)) => gap(r, lambda),
        };
        v.period_admitted = 0;
        v.period_rejections = 0;
        true
    }

    fn running(&self) -> bool {
        self.view.state != DeocState::Terminated
    }

    /// Eq. 1: one more arrival.
    fn arrival(&mut self, now: Instant, w: f64) {
        if let Some(last) = self.last_arrival {
            let sample = secs(now - last);
            self.gaps = self.gaps.saturating_add(1);
            // Until `1/w` gaps were seen the weight is `1/n` (their plain mean): seeded by
            // the first gap alone, two calls a microsecond apart would read as a million
            // calls/s for tens of arrivals, and a restart in that time set `r` there.
            let weight = if self.warmed_up(w) {
                w
            } else {
                1.0 / f64::from(self.gaps)
            };
            self.mean_gap = Some(match self.mean_gap {
                None => sample,
                Some(avg) => (1.0 - weight) * avg + weight * sample,
            });
        }
        self.last_arrival = Some(now);
    }

    /// Whether the measurer has seen `1/w` gaps: before, its average is their plain mean and
    /// a restart does not take its `λ` as `r`.
    fn warmed_up(&self, w: f64) -> bool {
        f64::from(self.gaps) * w >= 1.0
    }

    /// `λ = 1/ΔI_avg` at `now`, with the open gap read as a sample when it exceeds both the
    /// average and `period` (see `open_gap`).
    fn lambda(&self, now: Instant, w: f64, open_gap: Option<f64>) -> Option<f64> {
        let avg = self.mean_gap?;
        let avg = match (open_gap, self.last_arrival) {
            (Some(period), Some(last)) => {
                let open = secs(now - last);
                if open > avg && open > period {
                    (1.0 - w) * avg + w * open
                } else {
                    avg
                }
            }
            _ => avg,
        };
        Some(1.0 / avg.max(MIN_MEAN_GAP))
    }

    /// Restarts a terminated controller in underload at `r = λ` (a new period begins), or
    /// without an `r` when `λ` rests on fewer than `1/w` gaps: the period's end then reads the
    /// `λ` it measured (a decrease starts from it, as for any controller without an `r`).
    fn restart(&mut self, now: Instant, lambda: Option<f64>, min_rate: f64, w: f64) {
        // A target learned at its first answer and rejected at once (a callee that fails
        // every call) restarts after a gap or two, perhaps of a burst: a clean-clone CI run
        // set r = 1,909 calls/s against 70 arriving that way, and the cuts did not reach it.
        let measured = self.warmed_up(w);
        let v = &mut self.view;
        v.state = DeocState::Underload;
        v.rate = lambda.filter(|_| measured).map(|l| l.max(min_rate));
        v.gap = Duration::ZERO;
        v.epoch_start = None;
        v.epoch_steps = 0;
        v.period_admitted = 0;
        v.period_rejections = 0;
        v.overload_factor = 0.0;
        v.restarts = v.restarts.saturating_add(1);
        self.latest_factor = 0.0;
        self.quiet_since = now;
    }

    fn terminate(&mut self) {
        let v = &mut self.view;
        v.state = DeocState::Terminated;
        v.rate = None;
        v.gap = Duration::ZERO;
        v.epoch_start = None;
        v.epoch_steps = 0;
        v.period_admitted = 0;
        v.period_rejections = 0;
    }

    /// The restrictor: admits a call when the gap since the last admitted one has passed.
    fn restrict(&mut self, now: Instant) -> bool {
        let v = &mut self.view;
        let open = v.gap.is_zero() || self.last_admit.is_none_or(|t| now >= t + v.gap);
        if open {
            self.last_admit = Some(now);
            v.admitted = v.admitted.saturating_add(1);
            v.period_admitted = v.period_admitted.saturating_add(1);
        } else {
            v.restricted = v.restricted.saturating_add(1);
        }
        open
    }

    /// The end of a period: the rate-adaptation controller of Fig. 4.
    fn adapt(&mut self, c: &DeocConfig, lambda: Option<f64>) {
        let prev_admitted = self.prev_admitted;
        let v = &mut self.view;
        v.arrival_rate = lambda;
        // Below the threshold a period's rejections are read as none.
        let rejections =
            if Threshold::of(c).signals(v.period_rejections, v.period_admitted, prev_admitted) {
                v.period_rejections
            } else {
                0
            };
        let factor = if rejections == 0 {
            0.0
        } else if v.period_admitted == 0 {
            f64::INFINITY
        } else {
            rejections as f64 / v.period_admitted as f64
        };
        // `r_t`; a controller without one (just restarted without a measurement) is not
        // limiting: as if r_t were infinite, and λ_t stands in for it when decreasing.
        let r_t = v.rate;
        if rejections > 0 {
            // Overload recovery (l. 151): decrease unless the factor fell.
            v.state = DeocState::OverloadRecovery;
            v.epoch_start = None;
            v.epoch_steps = 0;
            let decrease = !c.overload_factor || factor >= self.latest_factor;
            if decrease && let Some(r) = r_t.or(lambda) {
                // Eq. 4: r_{t+1} = r_t − β·r_t (holdline: by the factor, see `max_decrease`).
                let cut = c.cut(factor, v.period_admitted);
                v.rate = Some((r - cut * r).max(c.min_rate));
                v.decreases = v.decreases.saturating_add(1);
            }
            self.latest_factor = factor;
        } else {
            match (lambda, r_t) {
                (Some(l), Some(r)) if l > r => {
                    // Overload prevention (l. 147): increase (eq. 11/12).
                    if v.state != DeocState::OverloadPrevention || v.epoch_start.is_none() {
                        v.epoch_start = Some(r);
                        v.epoch_steps = 0;
                    }
                    v.state = DeocState::OverloadPrevention;
                    let r0 = v.epoch_start.unwrap_or(r);
                    let n = v.epoch_steps.saturating_add(1);
                    v.rate = Some(increase(c, r, r0, n).max(c.min_rate));
                    v.epoch_steps = n;
                }
                _ => {
                    // Underload (l. 145): r_{t+1} = λ_t, no gap.
                    v.state = DeocState::Underload;
                    v.epoch_start = None;
                    v.epoch_steps = 0;
                    if let Some(l) = lambda {
                        v.rate = Some(l.max(c.min_rate));
                    }
                }
            }
            if c.factor_resets_when_quiet {
                self.latest_factor = 0.0;
            }
        }
        v.overload_factor = self.latest_factor;
        // Eq. 2 for the next period; no gap in underload (l. 145).
        v.gap = match (v.state, v.rate) {
            (DeocState::Underload | DeocState::Terminated, _) | (_, None) => Duration::ZERO,
            (_, Some(r)) => gap(r, lambda),
        };
        v.period_admitted = 0;
        v.period_rejections = 0;
    }
}

/// The fewest calls admitted in a period for its overload factor to set the decrease
/// ([`DeocConfig::max_decrease`]): with fewer, one rejection more or less moves the factor by
/// a tenth or more, and the decrease is eq. 4's `β`.
pub const FACTOR_CUT_MIN_CALLS: u64 = 10;

impl DeocConfig {
    /// The share of `r` a decrease cuts: `β` (eq. 4), or with `max_decrease` above `β` and
    /// at least [`FACTOR_CUT_MIN_CALLS`] admitted, the period's overload factor between the
    /// two.
    fn cut(&self, factor: f64, admitted: u64) -> f64 {
        if self.max_decrease > self.beta && admitted >= FACTOR_CUT_MIN_CALLS && factor.is_finite() {
            factor.clamp(self.beta, self.max_decrease)
        } else {
            self.beta
        }
    }
}

/// When a period's rejections are the binary signal ("rejections in this T"): the paper's
/// any one, or holdline's `min_rejections`, or `min_rejection_share` of the admitted calls.
#[derive(Clone, Copy, Debug)]
struct Threshold {
    count: u32,
    share: f64,
}

impl Threshold {
    fn of(c: &DeocConfig) -> Self {
        Self {
            count: c.min_rejections,
            share: c.min_rejection_share,
        }
    }

    /// Whether `rejections` signal overload, given the calls admitted in the period and in
    /// the period before.
    fn signals(self, rejections: u64, admitted: u64, prev_admitted: u64) -> bool {
        rejections > 0
            && (rejections >= u64::from(self.count)
                || (self.share > 0.0
                    && rejections as f64 >= self.share * admitted.max(prev_admitted) as f64))
    }
}

/// The `n`-th increase (n ≥ 1) of an epoch that began at `r0`, from the current `r`.
fn increase(c: &DeocConfig, r: f64, r0: f64, n: u32) -> f64 {
    let one_minus_k = 1.0 - c.k;
    match c.increase {
        // Eq. 12 at t = n.
        IncreaseLaw::ClosedForm => r0 + eq12_growth(c.k, c.alpha, f64::from(n)),
        // Eq. 12 at t = 1 for the first step, eq. 11 after.
        IncreaseLaw::Recurrence if n <= 1 => r0 + (one_minus_k * c.alpha).powf(1.0 / one_minus_k),
        IncreaseLaw::Recurrence => r + c.alpha * (r - r0).max(0.0).powf(c.k),
    }
}

/// `[(1−k)α·t]^(1/(1−k))`, eq. 12's growth after `t` periods.
fn eq12_growth(k: f64, alpha: f64, t: f64) -> f64 {
    let one_minus_k = 1.0 - k;
    (one_minus_k * alpha * t).powf(1.0 / one_minus_k)
}

/// Eq. 2: `τ = max(0, 1/r − 1/λ)`; an unknown `λ` counts as `1/λ = 0` (the gap is `1/r`).
fn gap(r: f64, lambda: Option<f64>) -> Duration {
    let inv_lambda = lambda.map_or(0.0, |l| 1.0 / l);
    let tau = (1.0 / r - inv_lambda).max(0.0);
    Duration::try_from_secs_f64(tau).map_or(MAX_GAP, |d| d.min(MAX_GAP))
}

/// Eq. 16: the stable duration `T_s = (β·r_m)^(1−k) / ((1−k)α)`, in periods: how long the
/// increase takes from `(1−β)·r_m` back to `r_m` (the corrected form: eq. 12 with exponent
/// `1/(1−k)`; Appendix A.1 prints `1−k`).
pub fn stable_duration(k: f64, alpha: f64, beta: f64, r_m: f64) -> f64 {
    let one_minus_k = 1.0 - k;
    (beta * r_m).powf(one_minus_k) / (one_minus_k * alpha)
}

/// Eq. 17: the effective rate `E[r(t)] = r_m − β·r_m / (2 − k)`, the mean admission rate over
/// a control epoch of the ideal model (the decrease period omitted, Appendix A).
pub fn effective_rate(k: f64, beta: f64, r_m: f64) -> f64 {
    r_m - beta * r_m / (2.0 - k)
}

/// Eq. 15: the periods needed to increase the rate from `r_m` to `m·r_m` (the inverse of
/// aggressiveness), `[(m−1)·r_m]^(1−k) / ((1−k)α)`.
pub fn aggressiveness_time(k: f64, alpha: f64, m: f64, r_m: f64) -> f64 {
    let one_minus_k = 1.0 - k;
    ((m - 1.0) * r_m).powf(one_minus_k) / (one_minus_k * alpha)
}

/// DEOC at an ingress edge: one measurer, restrictor and rate-adaptation controller per target
/// edge (see the [module documentation](self)).
#[derive(Clone, Debug)]
pub struct Deoc {
    config: DeocConfig,
    /// Ordered, so that iteration (and eviction among equals) is deterministic.
    targets: BTreeMap<TargetId, Target>,
    /// The end of the current period (one grid for all targets).
    next_tick: Instant,
    latest: Instant,
    ticks: u64,
    evictions: u64,
    forgotten: u64,
    counters: Counters,
}

impl Deoc {
    /// A controller with a validated `config` and no target yet; its first period starts at
    /// `now`.
    pub fn new(config: DeocConfig, now: Instant) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            next_tick: now + config.period,
            config,
            targets: BTreeMap::new(),
            latest: now,
            ticks: 0,
            evictions: 0,
            forgotten: 0,
            counters: Counters::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &DeocConfig {
        &self.config
    }

    /// The state of `target`, if it has any.
    pub fn target(&self, target: TargetId) -> Option<DeocTarget> {
        self.targets.get(&target).map(|t| t.view)
    }

    /// Every target with state, in target order.
    pub fn targets(&self) -> impl Iterator<Item = (TargetId, DeocTarget)> + '_ {
        self.targets.iter().map(|(&k, t)| (k, t.view))
    }

    /// Periods completed so far.
    pub fn ticks(&self) -> u64 {
        self.ticks
    }

    /// Targets forgotten to make room (the table was full).
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// Targets forgotten for being idle `forget_after`.
    pub fn forgotten(&self) -> u64 {
        self.forgotten
    }

    fn clock(&mut self, now: Instant) -> Instant {
        self.latest = self.latest.max(now);
        self.latest
    }

    /// The state of `target`, made (and room made for it) if needed.
    fn entry(&mut self, target: TargetId, now: Instant) -> &mut Target {
        if !self.targets.contains_key(&target) {
            if self.targets.len() >= self.config.max_targets {
                let victim = self
                    .targets
                    .iter()
                    .min_by_key(|(_, t)| (t.running(), t.last_active))
                    .map(|(&k, _)| k);
                if let Some(k) = victim {
                    self.targets.remove(&k);
                    self.evictions = self.evictions.saturating_add(1);
                }
            }
            if self.targets.is_empty() && self.next_tick <= now {
                // Idle until now: the grid restarts with the first target.
                self.next_tick = now + self.config.period;
            }
        }
        let start_terminated = self.config.start_terminated;
        let t = self
            .targets
            .entry(target)
            .or_insert_with(|| Target::new(now, start_terminated));
        t.last_active = now;
        t
    }

    /// Asks whether a new call (new INVITE) for `target` may be forwarded: the measurer sees
    /// it, then the restrictor decides. A rejection is a `503` with reason
    /// [`CallGap`](RejectReason::CallGap).
    pub fn admit_call(&mut self, now: Instant, target: TargetId) -> Decision {
        let now = self.clock(now);
        let w = self.config.ewma_weight;
        let t = self.entry(target, now);
        t.arrival(now, w);
        if t.restrict(now) {
            self.counters.admit()
        } else {
            let (status, retry_after) = (self.config.status, self.config.retry_after);
            self.counters
                .reject_with(RejectReason::CallGap, status, retry_after)
        }
    }

    /// How the INVITE transaction of a call admitted for `target` ended. An overload 503, and
    /// a timeout with `timeouts_count`, count as a rejection of the current period and restart
    /// a terminated controller.
    pub fn on_response(&mut self, now: Instant, target: TargetId, reply: DeocReply) {
        let now = self.clock(now);
        let c = &self.config;
        let (w, open_gap, min_rate, timeouts_count) = (
            c.ewma_weight,
            c.open_gap.then(|| secs(c.period)),
            c.min_rate,
            c.timeouts_count,
        );
        let threshold = Threshold::of(c);
        let t = self.entry(target, now);
        let counted = match reply {
            DeocReply::Final(503) => {
                t.view.rejections = t.view.rejections.saturating_add(1);
                true
            }
            DeocReply::Final(408) | DeocReply::Timeout => {
                t.view.timeouts = t.view.timeouts.saturating_add(1);
                timeouts_count
            }
            DeocReply::Maintenance => {
                t.view.maintenance = t.view.maintenance.saturating_add(1);
                false
            }
            DeocReply::Final(_) => false,
        };
        if !counted {
            return;
        }
        let pending = t.view.period_rejections.saturating_add(1);
        let signal = threshold.signals(pending, t.view.period_admitted, t.prev_admitted);
        if !t.running() && signal {
            let lambda = t.lambda(now, w, open_gap);
            t.restart(now, lambda, min_rate, w);
        }
        // While terminated, the period's rejections accumulate towards the restart (the
        // period's end clears them); after it they all count in the restarted period.
        t.view.period_rejections = pending;
        t.view.last_rejection = Some(now);
        if signal {
            t.quiet_since = now;
        }
    }

    /// A load report read from a response of a call admitted for `target`
    /// ([`DeocSignal::LoadReport`]; ignored with [`DeocSignal::Binary`]). A fresh report
    /// counts in the current period; one asking for less load (`headroom < 1`) also restarts
    /// a terminated controller and keeps it from terminating, as a rejection does.
    pub fn on_load_report(&mut self, now: Instant, target: TargetId, report: LoadReport) {
        let now = self.clock(now);
        if self.config.signal == DeocSignal::Binary {
            return;
        }
        let c = &self.config;
        let (w, open_gap, min_rate) = (
            c.ewma_weight,
            c.open_gap.then(|| secs(c.period)),
            c.min_rate,
        );
        let t = self.entry(target, now);
        if !t.report(&report) || report.headroom >= 1.0 {
            return;
        }
        if !t.running() {
            let lambda = t.lambda(now, w, open_gap);
            // The period's admissions and reports so far still count at its end.
            let kept = (t.period_reports, t.view.period_admitted);
            t.restart(now, lambda, min_rate, w);
            (t.period_reports, t.view.period_admitted) = kept;
        }
        t.quiet_since = now;
    }

    /// Forgets `target` (the route is gone).
    pub fn forget(&mut self, target: TargetId) {
        self.targets.remove(&target);
    }
}

impl Controller for Deoc {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Deoc
    }

    fn admit(&mut self, now: Instant, req: &Admission) -> Decision {
        if !decides(self.gate(), req) {
            return Decision::Admit;
        }
        let Some(target) = req.target else {
            return Decision::Admit;
        };
        if req.class != Class::NewInvite {
            // DEOC controls calls only (l. 94).
            self.clock(now);
            return self.counters.admit();
        }
        self.admit_call(now, target)
    }

    fn on_signal(&mut self, now: Instant, signal: Signal) {
        match signal {
            Signal::Completed {
                target, outcome, ..
            } => self.on_response(now, target, outcome.into()),
            Signal::TargetGone(target) => self.forget(target),
            _ => {
                self.clock(now);
            }
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        (!self.targets.is_empty()).then_some(self.next_tick)
    }

    fn handle_timeout(&mut self, now: Instant) {
        let now = self.clock(now);
        if now < self.next_tick {
            return;
        }
        self.next_tick = now + self.config.period;
        if self.targets.is_empty() {
            return;
        }
        self.ticks = self.ticks.saturating_add(1);
        let c = &self.config;
        let open_gap = c.open_gap.then(|| secs(c.period));
        let before = self.targets.len();
        self.targets
            .retain(|_, t| now.saturating_duration_since(t.last_active) < c.forget_after);
        self.forgotten = self
            .forgotten
            .saturating_add((before - self.targets.len()) as u64);
        // Load reports: each reporter's budget for this edge — the sum of what its fresh
        // reports ask of each target it reported on — shared max-min over those targets by
        // their arrival rates (scaling each target's own rate would keep any unfairness
        // among them for ever: multiplicative increase and decrease alone do not converge).
        let mut shares: BTreeMap<TargetId, (f64, f64)> = BTreeMap::new();
        if let DeocSignal::LoadReport {
            gain, max_growth, ..
        } = c.signal
        {
            let mut groups: BTreeMap<u64, ReporterBudget> = BTreeMap::new();
            for (&id, t) in &self.targets {
                if !t.running() {
                    continue;
                }
                let lambda = t.lambda(now, c.ewma_weight, open_gap);
                if let Some((ask, g)) = t.proposal(c, lambda, gain, max_growth) {
                    let e = groups.entry(t.last_reporter).or_default();
                    e.0 += ask;
                    e.1.push((id, lambda.unwrap_or(ask), g));
                }
            }
            for (budget, members) in groups.into_values() {
                let demands: Vec<f64> = members.iter().map(|m| m.1).collect();
                let s = max_min_share(budget, &demands);
                for (id, _, g) in members {
                    shares.insert(id, (s, g));
                }
            }
        }
        for (id, t) in self.targets.iter_mut() {
            let admitted = t.view.period_admitted;
            if !t.running() {
                t.prev_admitted = admitted;
                // The period's counts start again (a restart within the next period reads
                // only that period's admissions).
                t.view.period_admitted = 0;
                t.view.period_rejections = 0;
                continue;
            }
            let lambda = t.lambda(now, c.ewma_weight, open_gap);
            let reported = match c.signal {
                DeocSignal::LoadReport { max_age, .. } => {
                    t.adapt_reported(c, lambda, shares.get(id).copied(), max_age)
                }
                DeocSignal::Binary => false,
            };
            if !reported {
                t.adapt(c, lambda);
            }
            t.prev_admitted = admitted;
            if c.quiet_period
                .is_some_and(|q| now.saturating_duration_since(t.quiet_since) >= q)
            {
                t.terminate();
            }
        }
    }

    fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot::new(Algorithm::Deoc);
        s.throttled_targets = Some(
            self.targets
                .values()
                .filter(|t| !t.view.gap.is_zero())
                .count(),
        );
        s.intervals = self.ticks;
        s.admitted = self.counters.admitted;
        s.rejected = self.counters.rejected;
        s
    }

    fn target_snapshots(&self, out: &mut Vec<TargetSnapshot>) {
        out.extend(self.targets.iter().map(|(&id, t)| {
            let v = &t.view;
            let mut s = TargetSnapshot::new(id, v.state.as_str());
            s.rate = v.rate;
            s.arrival_rate = v.arrival_rate;
            s.admitted = v.admitted;
            s.restricted = v.restricted;
            s.rejections = v.rejections;
            s.timeouts = v.timeouts;
            s
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eq2_gap() {
        assert_eq!(gap(10.0, Some(10.0)), Duration::ZERO);
        assert_eq!(gap(20.0, Some(10.0)), Duration::ZERO);
        let g = gap(5.0, Some(10.0));
        assert!((secs(g) - 0.1).abs() < 1e-9, "{g:?}");
        assert!((secs(gap(4.0, None)) - 0.25).abs() < 1e-9);
        assert_eq!(gap(1e-300, Some(1.0)), MAX_GAP);
    }

    #[test]
    fn eq12_matches_eq3_for_k_zero() {
        let c = DeocConfig {
            k: 0.0,
            alpha: 2.0,
            ..DeocConfig::default()
        };
        for n in 1..10 {
            let closed = increase(&c, 0.0, 100.0, n);
            assert!((closed - (100.0 + 2.0 * f64::from(n))).abs() < 1e-9);
        }
        let rec = DeocConfig {
            increase: IncreaseLaw::Recurrence,
            ..c
        };
        assert!((increase(&rec, 100.0, 100.0, 1) - 102.0).abs() < 1e-12);
        assert!((increase(&rec, 102.0, 100.0, 2) - 104.0).abs() < 1e-12);
    }

    #[test]
    fn defaults_validate_and_nonsense_does_not() {
        assert_eq!(DeocConfig::default().validate(), Ok(()));
        let bad = [
            DeocConfig {
                k: 1.0,
                ..DeocConfig::default()
            },
            DeocConfig {
                k: -0.1,
                ..DeocConfig::default()
            },
            DeocConfig {
                beta: 1.0,
                ..DeocConfig::default()
            },
            DeocConfig {
                beta: 0.0,
                ..DeocConfig::default()
            },
            DeocConfig {
                alpha: 0.0,
                ..DeocConfig::default()
            },
            DeocConfig {
                alpha: f64::NAN,
                ..DeocConfig::default()
            },
            DeocConfig {
                ewma_weight: 0.0,
                ..DeocConfig::default()
            },
            DeocConfig {
                period: Duration::ZERO,
                ..DeocConfig::default()
            },
            DeocConfig {
                min_rate: 0.0,
                ..DeocConfig::default()
            },
            DeocConfig {
                quiet_period: Some(Duration::ZERO),
                ..DeocConfig::default()
            },
            DeocConfig {
                status: 200,
                ..DeocConfig::default()
            },
            DeocConfig {
                status: 401,
                ..DeocConfig::default()
            },
            DeocConfig {
                max_targets: 0,
                ..DeocConfig::default()
            },
            DeocConfig {
                forget_after: Duration::ZERO,
                ..DeocConfig::default()
            },
        ];
        for config in bad {
            assert!(config.validate().is_err(), "{config:?}");
        }
    }
}
