//! Entry points for the fuzz targets in `fuzz/` (and for the tests that replay them).
//!
//! Each function takes arbitrary bytes, reads them as a sequence of operations on one
//! controller, and panics only when the controller breaks its contract (see the crate's
//! documentation): anything but new work at the controller's own gate admitted; every
//! rejection a `503` with a reason of the algorithm; the snapshot's counts equal to the
//! decisions taken; fractions in `[0, 1]`; a wake-up always in the future; feedback answers
//! inside their ranges. Time only moves forward, as the drivers' monotonic clocks do (the
//! invariant suite separately checks that a clock going backwards panics nothing).

use holdline_base::{Duration, Instant, Rng};

use crate::hop::{HopMeasure, HopServer, HopServerConfig};
use crate::{
    Admission, Algorithm, Class, ControllerConfig, ControllerFactory, Decision, Feedback, Gate,
    Lane, Outcome, RejectReason, Signal, Snapshot, TargetId,
};

/// The crate's contract, checked decision by decision (by [`controller_ops`] and by the
/// invariant suite in `tests/invariants.rs`): it panics on the first breach.
#[derive(Clone, Debug)]
pub struct Contract {
    algorithm: Algorithm,
    decided: u64,
    rejected: u64,
}

impl Contract {
    /// Checks for a controller of `algorithm`.
    pub fn new(algorithm: Algorithm) -> Self {
        Self {
            algorithm,
            decided: 0,
            rejected: 0,
        }
    }

    /// Checks decision `d` taken on `q` by a controller deciding at `gate`: anything but new
    /// work at its own gate (with a target, at the forward gate) admitted; a rejection a
    /// `503` without Retry-After (the defaults) with a reason of the algorithm. Returns
    /// whether the question was one the controller decides (and counts it).
    pub fn decision(&mut self, gate: Gate, q: &Admission, d: &Decision) -> bool {
        let algorithm = self.algorithm;
        let own = q.class.is_rejectable() && q.gate == gate;
        if !own || (q.gate == Gate::Forward && q.target.is_none()) {
            assert!(d.is_admit(), "{algorithm}: {q:?} must be admitted");
            return false;
        }
        self.decided += 1;
        if let Some(rej) = d.rejection() {
            self.rejected += 1;
            assert_eq!(rej.status, 503, "{algorithm}");
            assert_eq!(rej.retry_after, None, "{algorithm}: no Retry-After");
            assert!(
                rejection_reasons(algorithm).contains(&rej.reason),
                "{algorithm}: {:?}",
                rej.reason
            );
        }
        true
    }

    /// Checks the controller's wake-up after it handled `now`: none, or later.
    pub fn wake_up(&self, now: Instant, next: Option<Instant>) {
        if let Some(t) = next {
            assert!(t > now, "{}: wake-up {t} not after {now}", self.algorithm);
        }
    }

    /// Checks a snapshot: its algorithm, fractions in `[0, 1]`, and the decisions and
    /// rejections it counts equal to those checked so far.
    pub fn snapshot(&self, s: &Snapshot) {
        let algorithm = self.algorithm;
        assert_eq!(s.algorithm, algorithm);
        if let Some(f) = s.acceptance {
            assert!((0.0..=1.0).contains(&f), "{algorithm}: f = {f}");
        }
        if let Some(rho) = s.occupancy {
            assert!((0.0..=1.0).contains(&rho), "{algorithm}: ρ = {rho}");
        }
        assert_eq!(
            s.decisions(),
            self.decided,
            "{algorithm}: snapshot counts decisions"
        );
        assert_eq!(s.rejected.total(), self.rejected, "{algorithm}");
        if algorithm == Algorithm::NoControl {
            assert_eq!(self.rejected, 0);
        }
    }

    /// Questions decided so far.
    pub fn decided(&self) -> u64 {
        self.decided
    }

    /// Of those, rejected.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }
}

/// The reasons a controller of `algorithm` may give for a rejection.
pub fn rejection_reasons(algorithm: Algorithm) -> &'static [RejectReason] {
    match algorithm {
        Algorithm::QueueLimit | Algorithm::BangBang => &[RejectReason::QueueFull],
        Algorithm::Occupancy => &[RejectReason::Occupancy],
        Algorithm::QueueDelay => &[RejectReason::QueueDelay],
        Algorithm::SmartForwarding => &[RejectReason::TargetBacklog],
        Algorithm::LossClient => &[RejectReason::LossThrottle, RejectReason::RateThrottle],
        Algorithm::RateClient => &[RejectReason::RateThrottle],
        Algorithm::DelayWindow | Algorithm::WindowClient => &[RejectReason::WindowFull],
        Algorithm::Deoc => &[RejectReason::CallGap],
        _ => &[],
    }
}

/// The algorithms a controller can be built for.
fn implemented() -> impl Iterator<Item = Algorithm> {
    Algorithm::ALL.into_iter().filter(|a| a.is_implemented())
}

/// Arbitrary bytes read as numbers; zeros once they run out.
struct Bytes<'a> {
    data: &'a [u8],
}

impl Bytes<'_> {
    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    fn u32(&mut self) -> u32 {
        u32::from(self.u16()) | (u32::from(self.u16()) << 16)
    }

    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    /// A duration: mostly ordinary (microseconds to about a minute), sometimes an extreme.
    fn duration(&mut self) -> Duration {
        match self.u8() % 8 {
            0 => Duration::ZERO,
            1 => Duration::MAX,
            2 => Duration::from_micros(self.u64()),
            3..=5 => Duration::from_micros(u64::from(self.u16())),
            _ => Duration::from_micros(u64::from(self.u32() % 60_000_000)),
        }
    }

    /// A float: mostly in `[0, 2]`, sometimes any bit pattern (NaN, infinities, negatives).
    fn float(&mut self) -> f64 {
        match self.u8() % 4 {
            0 => f64::from_bits(self.u64()),
            _ => f64::from(self.u16()) / 32_768.0,
        }
    }

    /// One of a few targets (so that state builds up per target), or any.
    fn target(&mut self) -> TargetId {
        match self.u8() % 8 {
            7 => TargetId(self.u64()),
            t => TargetId(u64::from(t % 2)),
        }
    }

    fn class(&mut self) -> Class {
        // New INVITEs half of the time: the questions most controllers decide.
        match self.u8() % 10 {
            0..=4 => Class::NewInvite,
            5 => Class::NewRegistration,
            6 => Class::Refresh,
            7 => Class::InDialog,
            8 => Class::OutOfDialog,
            _ => Class::Response,
        }
    }

    fn lane(&mut self) -> Lane {
        match self.u8() % 3 {
            0 => Lane::Shared,
            1 => Lane::Invite,
            _ => Lane::Other,
        }
    }

    fn feedback(&mut self) -> Feedback {
        let (validity, seq) = (self.duration(), self.u64() % 4_096);
        match self.u8() % 3 {
            0 => Feedback::Loss {
                percent: self.u8(),
                validity,
                seq,
            },
            1 => Feedback::Rate {
                per_second: if self.u8().is_multiple_of(4) {
                    self.u32()
                } else {
                    u32::from(self.u8() % 64)
                },
                validity,
                seq,
            },
            _ => Feedback::Window {
                window: self.u32() % 8,
                validity,
                seq,
            },
        }
    }

    fn signal(&mut self) -> Signal {
        match self.u8() % 12 {
            0 => Signal::Busy(self.duration()),
            1 => Signal::Occupancy(self.float()),
            2 => Signal::QueueLength(usize::from(self.u16())),
            3 => Signal::QueueDelay(self.duration()),
            4 => Signal::NewRequestDelay(self.duration()),
            5 => Signal::Backlog {
                target: self.target(),
                lane: self.lane(),
                unsent: u64::from(self.u32()),
                queued: u64::from(self.u16()),
            },
            6 => Signal::TargetGone(self.target()),
            7 => Signal::Feedback {
                from: self.target(),
                feedback: self.feedback(),
            },
            8 => Signal::Forwarded {
                target: self.target(),
            },
            9 => Signal::Released {
                target: self.target(),
                delay: self.duration(),
            },
            10 => Signal::Completed {
                target: self.target(),
                outcome: Outcome::Final(match self.u8() % 4 {
                    0 => 503,
                    1 => 200,
                    2 => 486,
                    _ => self.u16() % 700,
                }),
                delay: self.duration(),
            },
            _ => Signal::Completed {
                target: self.target(),
                outcome: Outcome::Timeout,
                delay: self.duration(),
            },
        }
    }
}

/// One controller, of the algorithm the first byte names (with its default configuration),
/// driven by the operations the rest of `data` encodes: signals of every kind (including
/// nonsense values), admission questions at both gates, time advancing (to the controller's
/// wake-up or by an arbitrary step), feedback asked for upstream clients, snapshots. The
/// contract is checked after every operation. Returns what was decided, so that a harness
/// can tell whether its inputs reach rejections at all.
pub fn controller_ops(data: &[u8]) -> OpsSummary {
    let mut b = Bytes { data };
    let algorithms: Vec<Algorithm> = implemented().collect();
    let algorithm = algorithms[usize::from(b.u8()) % algorithms.len()];
    let config = match ControllerConfig::default_for(algorithm) {
        Ok(c) => c,
        Err(e) => panic!("{algorithm}: no default configuration: {e}"),
    };
    let seed = b.u64();
    let mut c = match config.build(Instant::ZERO, Rng::seed_from_u64(seed)) {
        Ok(c) => c,
        Err(e) => panic!("{algorithm}: its default configuration does not build: {e}"),
    };
    assert_eq!(c.algorithm(), algorithm);
    let mut now = Instant::ZERO;
    let mut contract = Contract::new(algorithm);
    while !b.is_empty() {
        match b.u8() % 8 {
            0..=2 => c.on_signal(now, b.signal()),
            3 | 4 => {
                let class = b.class();
                let q = match b.u8() % 5 {
                    0 | 1 => Admission::ingress(class),
                    2 | 3 => Admission::forward(class, b.target()),
                    _ => Admission {
                        target: None,
                        ..Admission::forward(class, TargetId(0))
                    },
                };
                let d = c.admit(now, &q);
                contract.decision(c.gate(), &q, &d);
            }
            5 => {
                // To the controller's wake-up, or forward by an arbitrary step.
                now = match (b.u8() % 2, c.poll_timeout()) {
                    (0, Some(t)) if t > now => t,
                    _ => now + b.duration().min(Duration::from_secs(3_600)),
                };
                c.handle_timeout(now);
                contract.wake_up(now, c.poll_timeout());
            }
            6 => {
                if let Some(Feedback::Loss { percent, .. }) = c.feedback(now, b.target()) {
                    assert!(percent <= 100, "{algorithm}: loss answer {percent}%");
                }
            }
            _ => {
                let mut targets = Vec::new();
                c.target_snapshots(&mut targets);
                for t in &targets {
                    for v in [t.rate, t.arrival_rate].into_iter().flatten() {
                        assert!(v.is_finite() && v >= 0.0, "{algorithm}: {t:?}");
                    }
                }
            }
        }
        contract.snapshot(&c.snapshot());
    }
    OpsSummary {
        algorithm,
        decided: contract.decided(),
        rejected: contract.rejected(),
    }
}

/// What one [`controller_ops`] case decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpsSummary {
    /// The controller's algorithm.
    pub algorithm: Algorithm,
    /// Questions about new work at the controller's own gate.
    pub decided: u64,
    /// Of those, rejected.
    pub rejected: u64,
}

/// The server role of RFC 7339 / RFC 7415 and of the explicit window ([`HopServer`]): a
/// configuration drawn from the first bytes (rejected configurations end the case), then
/// control updates with arbitrary measurements. Its answers stay inside their bounds: the
/// acceptance in `[min_acceptance, 1]`, the loss answer at most 100%, a rate finite and at
/// least `min_rate`, a window finite and at least 1.
pub fn hop_server_ops(data: &[u8]) {
    let mut b = Bytes { data };
    let mut config = HopServerConfig::default();
    let choose = b.u8();
    if choose & 1 != 0 {
        config.target_occupancy = b.float();
    }
    if choose & 2 != 0 {
        config.target_delay = b.duration();
    }
    if choose & 4 != 0 {
        config.max_increase = 1.0 + b.float() * 4.0;
    }
    if choose & 8 != 0 {
        config.min_acceptance = b.float();
    }
    if choose & 16 != 0 {
        config.min_rate = b.float() * 100.0;
    }
    if choose & 32 != 0 {
        config.window_delay = b.duration();
    }
    let Ok(mut server) = HopServer::new(config) else {
        return;
    };
    let c = server.config().clone();
    while !b.is_empty() {
        let m = HopMeasure {
            occupancy: (!b.u8().is_multiple_of(8)).then(|| b.float()),
            invite_delay: (!b.u8().is_multiple_of(4)).then(|| b.duration()),
            rate_arrivals: u64::from(b.u16()),
            window_arrivals: u64::from(b.u16()),
            elapsed: b.duration(),
        };
        server.update(&m);
        let g = server.acceptance();
        assert!(
            g >= c.min_acceptance * (1.0 - 1e-9) && g <= 1.0,
            "acceptance {g} outside [{}, 1] after {m:?}",
            c.min_acceptance
        );
        assert!(server.loss_percent() <= 100);
        if let Some(r) = server.rate() {
            assert!(
                r.is_finite() && r >= c.min_rate * (1.0 - 1e-9),
                "rate {r} after {m:?}"
            );
        }
        if let Some(w) = server.window() {
            assert!(w.is_finite() && w >= 1.0, "window {w} after {m:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded stream of random cases through both entry points (the corpus-free part of a
    /// fuzz campaign); returns per algorithm the cases run and the rejections seen.
    fn campaign(cases: u64, seed: u64) -> Vec<(Algorithm, u64, u64)> {
        let mut r = Rng::seed_from_u64(seed);
        let mut seen: Vec<(Algorithm, u64, u64)> = implemented().map(|a| (a, 0, 0)).collect();
        let mut data = Vec::new();
        for case in 0..cases {
            data.clear();
            let len = 4 + r.below(1_500) as usize;
            data.extend((0..len).map(|_| r.next_u64() as u8));
            // Every algorithm in turn, whatever the draw.
            data[0] = case as u8;
            let ops = controller_ops(&data);
            if let Some(s) = seen.iter_mut().find(|s| s.0 == ops.algorithm) {
                s.1 += 1;
                s.2 += ops.rejected;
            }
            hop_server_ops(&data[1..]);
        }
        seen
    }

    #[test]
    fn random_operation_sequences_keep_every_contract_and_reach_rejections() {
        let seen = campaign(4_000, 1);
        for (a, cases, rejected) in seen {
            assert!(cases > 0, "{a}: never drawn");
            // The checks on rejections ran: random operations overload every controller
            // now and then (no control never rejects, by its contract).
            if a == Algorithm::NoControl {
                assert_eq!(rejected, 0);
            } else {
                assert!(rejected > 0, "{a}: no rejection in {cases} cases");
            }
        }
    }

    /// `HOLDLINE_FUZZ_CASES=N cargo test --release -p holdline-overload --lib long_campaign
    /// -- --ignored`: the seeded campaign at length.
    #[test]
    #[ignore = "long; run by hand with HOLDLINE_FUZZ_CASES"]
    fn long_campaign() {
        let cases = std::env::var("HOLDLINE_FUZZ_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100_000);
        let seen = campaign(cases, 2);
        eprintln!("{seen:?}");
    }
}
