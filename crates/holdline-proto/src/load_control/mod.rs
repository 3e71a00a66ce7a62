//! RFC 7200, the SIP load-control event package: load-filtering policies one SIP server
//! distributes to the servers that send it calls (SUBSCRIBE/NOTIFY, RFC 6665).
//!
//! - [`doc`]: the filter document, `application/load-control+xml` (parse and build).
//! - [`filter`]: the subscriber's side, applying received filters to new calls with
//!   injected time ([`LoadFilter`], [`SharedFilters`]).
//! - [`LoadControlConfig`]: both roles' settings; the [`Endpoint`](crate::Endpoint) runs the
//!   subscriptions (notifier: answers SUBSCRIBE for `Event: load-control`, NOTIFYs the
//!   configured filters; subscriber: SUBSCRIBEs to its notifiers, refreshes, installs what
//!   their NOTIFYs carry and answers the calls a filter turns away with `503`).

pub mod doc;
pub mod filter;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use holdline_base::{Duration, Peer};

pub use doc::{
    Action, CONTENT_TYPE, DocError, EVENT_PACKAGE, FilterRule, FilterSet, Identity, Many,
    format_rfc3339, parse_rfc3339,
};
pub use filter::{CallView, LoadFilter, SharedFilters, Verdict};

/// A filter the notifier role publishes, as configured: its validity given relative to the
/// server's start ([`FilterRule`] carries absolute times).
#[derive(Clone, Debug, PartialEq)]
pub struct PublishedFilter {
    /// The rule; its `valid_until` is ignored when [`duration`](Self::duration) is set.
    pub rule: FilterRule,
    /// How long after the server starts the rule stops applying; `None`: for ever.
    pub duration: Option<Duration>,
}

/// The notifier's filters when they change at run time (a configuration reload), shared by
/// every worker: a worker that sees a new [`generation`](Self::generation) NOTIFYs its
/// subscribers the new document. Generation 0: none set, the configuration's
/// [`LoadControlConfig::filters`] apply.
#[derive(Debug, Default)]
pub struct PublishedFilters {
    generation: AtomicU64,
    filters: Mutex<Vec<PublishedFilter>>,
}

impl PublishedFilters {
    /// None set yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the published filters (the next generation).
    pub fn set(&self, filters: Vec<PublishedFilter>) {
        let mut g = self.filters.lock().unwrap_or_else(PoisonError::into_inner);
        *g = filters;
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// How many times they were set.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The filters set last, with their generation.
    pub fn get(&self) -> (u64, Vec<PublishedFilter>) {
        let g = self.filters.lock().unwrap_or_else(PoisonError::into_inner);
        (self.generation(), g.clone())
    }
}

/// Both roles of RFC 7200 (see the [module documentation](self)).
#[derive(Clone, Debug)]
pub struct LoadControlConfig {
    /// Notifier role: answer SUBSCRIBEs for `Event: load-control` from trusted sources
    /// ([`RelayPolicy::trusts`](crate::RelayPolicy::trusts)) and NOTIFY them these filters.
    /// Off unless [`publish`](Self::publish) is set.
    pub filters: Vec<PublishedFilter>,
    /// Notifier role: the filters that replace [`filters`](Self::filters) at run time (give
    /// every worker the same `Arc`); subscribers are NOTIFYed when they change.
    pub updates: Arc<PublishedFilters>,
    /// Whether the notifier role is on (with no filters: an empty ruleset is published).
    pub publish: bool,
    /// Longest subscription granted (the SUBSCRIBE's Expires is cut to this). Default 1 h.
    pub max_expires: Duration,
    /// Subscriber role: the notifiers to subscribe to; their filters are applied to the new
    /// requests this server sends them.
    pub subscribe: Vec<Peer>,
    /// The Expires asked for in our SUBSCRIBEs. Default 600 s.
    pub expires: Duration,
    /// After a failed SUBSCRIBE, when to try again. Default 5 s.
    pub retry: Duration,
    /// The filters applied by every worker (give each worker's config the same `Arc`).
    pub shared: Arc<SharedFilters>,
}

impl Default for LoadControlConfig {
    fn default() -> Self {
        Self {
            filters: Vec::new(),
            publish: false,
            max_expires: Duration::from_secs(3600),
            subscribe: Vec::new(),
            expires: Duration::from_secs(600),
            retry: Duration::from_secs(5),
            shared: Arc::new(SharedFilters::new()),
            updates: Arc::new(PublishedFilters::new()),
        }
    }
}

impl LoadControlConfig {
    /// The document the notifier publishes, its relative validity made absolute from
    /// `start_s` (Unix seconds at the server's start).
    pub fn document(&self, start_s: i64) -> FilterSet {
        Self::document_of(&self.filters, start_s)
    }

    /// The document of `filters` (see [`document`](Self::document)).
    pub fn document_of(filters: &[PublishedFilter], start_s: i64) -> FilterSet {
        FilterSet {
            rules: filters
                .iter()
                .map(|f| {
                    let mut r = f.rule.clone();
                    if let Some(d) = f.duration {
                        let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
                        r.valid_until = Some(start_s.saturating_add(secs));
                    }
                    r
                })
                .collect(),
        }
    }
}
