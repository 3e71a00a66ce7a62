//! Applying load-control filters to new calls (RFC 7200's subscriber role), with injected
//! time: a [`LoadFilter`] per notifier, and [`SharedFilters`], the filters every worker of a
//! server applies.
//!
//! A new request meets a rule when its method, caller (From URI), callee (Request-URI) and
//! the wall-clock time meet every condition the rule has. The first rule (in document
//! order) a call meets decides: `rate` rules admit calls through a token bucket filling at
//! the rule's rate (holding at most [`BURST_SECONDS`] of it, at least one call), `loss`
//! rules turn away that percentage of their calls, evenly spread (an accumulator, not a
//! random draw). Calls that meet no rule pass.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use holdline_base::Instant;
use holdline_sip::Uri;

use super::doc::{Action, FilterRule, FilterSet, Identity};

/// How many seconds of a rate rule's calls its bucket holds (at least one call): a burst
/// after a pause passes up to this, the long-run rate stays the rule's.
pub const BURST_SECONDS: f64 = 0.2;

/// What a call is matched on.
#[derive(Clone, Copy, Debug)]
pub struct CallView<'a> {
    /// The request's method, e.g. `b"INVITE"`.
    pub method: &'a [u8],
    /// The From URI (the caller).
    pub caller: Option<&'a [u8]>,
    /// The Request-URI (the callee).
    pub callee: Option<&'a [u8]>,
}

/// What the filters decided for a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No rule is for this call.
    NoMatch,
    /// A rule is for it and admits it.
    Accept,
    /// A rule is for it and turns it away (the rule's id).
    Reject(String),
}

/// `user@host` of a SIP URI, the host in lower case (scheme, port and parameters left
/// out): how identities are compared.
fn identity_key(uri: &[u8]) -> Option<String> {
    let u = Uri::parse(uri).ok()?;
    let host = String::from_utf8_lossy(u.host_bytes()?).to_ascii_lowercase();
    let host = host.trim_end_matches('.');
    Some(match u.user() {
        Some(user) => format!("{}@{host}", String::from_utf8_lossy(user)),
        None => host.to_owned(),
    })
}

fn host_of(key: &str) -> &str {
    key.rsplit_once('@').map_or(key, |(_, h)| h)
}

/// An [`Identity`] with its identities in comparable form.
#[derive(Clone, Debug)]
struct IdentityMatcher {
    ones: Vec<String>,
    many: Vec<(Option<String>, Vec<String>, Vec<String>)>,
}

impl IdentityMatcher {
    fn new(id: &Identity) -> Self {
        let key = |s: &String| identity_key(s.as_bytes()).unwrap_or_else(|| s.clone());
        Self {
            ones: id.ones.iter().map(key).collect(),
            many: id
                .many
                .iter()
                .map(|m| {
                    (
                        m.domain.as_ref().map(|d| d.to_ascii_lowercase()),
                        m.except_domains
                            .iter()
                            .map(|d| d.to_ascii_lowercase())
                            .collect(),
                        m.except_ids.iter().map(key).collect(),
                    )
                })
                .collect(),
        }
    }

    fn matches(&self, key: Option<&str>) -> bool {
        let Some(key) = key else { return false };
        let host = host_of(key);
        self.ones.iter().any(|o| o == key)
            || self.many.iter().any(|(domain, ex_domains, ex_ids)| {
                domain.as_deref().is_none_or(|d| d == host)
                    && !ex_domains.iter().any(|d| d == host)
                    && !ex_ids.iter().any(|i| i == key)
            })
    }
}

/// One rule and its admission state.
#[derive(Clone, Debug)]
struct RuleState {
    rule: FilterRule,
    caller: Option<IdentityMatcher>,
    callee: Option<IdentityMatcher>,
    /// Rate: tokens in the bucket and when it was last filled. Loss: the accumulator.
    tokens: f64,
    filled: Option<Instant>,
}

impl RuleState {
    fn capacity(rate: f64) -> f64 {
        (rate * BURST_SECONDS).max(1.0)
    }

    fn new(rule: FilterRule) -> Self {
        let tokens = match rule.action {
            Action::Rate(r) => Self::capacity(r),
            Action::Loss(_) => 0.0,
        };
        Self {
            caller: rule.caller.as_ref().map(IdentityMatcher::new),
            callee: rule.callee.as_ref().map(IdentityMatcher::new),
            rule,
            tokens,
            filled: None,
        }
    }

    fn meets(
        &self,
        wall_s: i64,
        call: &CallView<'_>,
        caller: Option<&str>,
        callee: Option<&str>,
    ) -> bool {
        let r = &self.rule;
        (r.methods.is_empty() || r.methods.iter().any(|m| m.as_bytes() == call.method))
            && r.valid_from.is_none_or(|t| wall_s >= t)
            && r.valid_until.is_none_or(|t| wall_s < t)
            && self.caller.as_ref().is_none_or(|m| m.matches(caller))
            && self.callee.as_ref().is_none_or(|m| m.matches(callee))
    }

    fn admit(&mut self, now: Instant) -> bool {
        match self.rule.action {
            Action::Rate(rate) => {
                let cap = Self::capacity(rate);
                if let Some(at) = self.filled {
                    let dt = now.saturating_duration_since(at).as_secs_f64();
                    self.tokens = (self.tokens + dt * rate).min(cap);
                }
                // A `now` older than the last fill (another worker's clock read) adds nothing.
                if self.filled.is_none_or(|at| now > at) {
                    self.filled = Some(now);
                }
                if self.tokens >= 1.0 {
                    self.tokens -= 1.0;
                    true
                } else {
                    false
                }
            }
            Action::Loss(loss) => {
                self.tokens += (100.0 - loss) / 100.0;
                if self.tokens >= 1.0 {
                    self.tokens -= 1.0;
                    true
                } else {
                    false
                }
            }
        }
    }
}

/// The filters received from one notifier, with their admission state.
#[derive(Clone, Debug, Default)]
pub struct LoadFilter {
    rules: Vec<RuleState>,
}

impl LoadFilter {
    /// The filters of `set`, every rate bucket full.
    pub fn new(set: FilterSet) -> Self {
        Self {
            rules: set.rules.into_iter().map(RuleState::new).collect(),
        }
    }

    /// Takes over the admission state of `old`'s rules that are unchanged here.
    fn keep_state_of(&mut self, old: Self) {
        for r in &mut self.rules {
            if let Some(o) = old.rules.iter().find(|o| o.rule == r.rule) {
                r.tokens = o.tokens;
                r.filled = o.filled;
            }
        }
    }

    /// How many rules there are.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether there is no rule.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Decides for a new call at `now` (the injected monotonic clock, for the rates) and
    /// `wall_s` (Unix seconds, for the validity times).
    pub fn decide(&mut self, now: Instant, wall_s: i64, call: &CallView<'_>) -> Verdict {
        if self.rules.is_empty() {
            return Verdict::NoMatch;
        }
        let caller = call.caller.and_then(identity_key);
        let callee = call.callee.and_then(identity_key);
        let Some(rule) = self
            .rules
            .iter_mut()
            .find(|r| r.meets(wall_s, call, caller.as_deref(), callee.as_deref()))
        else {
            return Verdict::NoMatch;
        };
        if rule.admit(now) {
            Verdict::Accept
        } else {
            Verdict::Reject(rule.rule.id.clone())
        }
    }
}

/// The filters a server applies, shared by its workers: one [`LoadFilter`] per notifier
/// (by address), applied to the new requests sent to that notifier.
#[derive(Debug, Default)]
pub struct SharedFilters {
    active: AtomicBool,
    by_notifier: Mutex<Vec<(SocketAddr, LoadFilter)>>,
}

impl SharedFilters {
    /// No filters.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(SocketAddr, LoadFilter)>> {
        self.by_notifier
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Replaces the filters of `notifier` with `set` (a NOTIFY carries the whole state). A
    /// rule that comes again unchanged (a refresh's NOTIFY) keeps its admission state: its
    /// bucket is not refilled.
    pub fn install(&self, notifier: SocketAddr, set: FilterSet) {
        let mut g = self.lock();
        let old = g
            .iter()
            .position(|(n, _)| *n == notifier)
            .map(|i| g.swap_remove(i).1);
        if !set.rules.is_empty() {
            let mut f = LoadFilter::new(set);
            if let Some(old) = old {
                f.keep_state_of(old);
            }
            g.push((notifier, f));
        }
        self.active.store(!g.is_empty(), Ordering::Release);
    }

    /// Drops the filters of `notifier` (its subscription ended).
    pub fn clear(&self, notifier: SocketAddr) {
        self.install(notifier, FilterSet::default());
    }

    /// How many rules are installed, over every notifier.
    pub fn rules(&self) -> usize {
        if !self.active.load(Ordering::Acquire) {
            return 0;
        }
        self.lock().iter().map(|(_, f)| f.len()).sum()
    }

    /// Decides for a new call sent to `dest` (see [`LoadFilter::decide`]); without filters
    /// for `dest`, [`Verdict::NoMatch`] (no lock taken while there are no filters at all).
    pub fn decide(
        &self,
        now: Instant,
        wall_s: i64,
        dest: SocketAddr,
        call: &CallView<'_>,
    ) -> Verdict {
        if !self.active.load(Ordering::Acquire) {
            return Verdict::NoMatch;
        }
        let mut g = self.lock();
        match g.iter_mut().find(|(n, _)| *n == dest) {
            Some((_, f)) => f.decide(now, wall_s, call),
            None => Verdict::NoMatch,
        }
    }
}
