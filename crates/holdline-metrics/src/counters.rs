//! The counters: one field per measurement, defined once with its name and meaning.

use serde::Serialize;

macro_rules! counters {
    ($($(#[doc = $doc:literal])+ $name:ident,)+) => {
        /// Event counts of a run or of one interval of it. Every field is a count of events
        /// (never a gauge), so intervals are differences of running totals.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
        pub struct Counters {
            $($(#[doc = $doc])+ pub $name: u64,)+
        }

        impl Counters {
            /// Field names in declaration order: the CSV columns and the JSON keys.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($name),)+];

            /// Field values in declaration order (the order of [`Counters::NAMES`]).
            pub fn values(&self) -> [u64; Self::NAMES.len()] {
                [$(self.$name,)+]
            }

            /// `self - earlier`, field by field (saturating: counters only grow).
            #[must_use]
            pub fn since(&self, earlier: &Self) -> Self {
                Self { $($name: self.$name.saturating_sub(earlier.$name),)+ }
            }

            /// Adds `other` field by field (merging the counts of two agents).
            pub fn add(&mut self, other: &Self) {
                $(self.$name += other.$name;)+
            }
        }
    };
}

counters! {
    /// Calls the arrival process generated (offered load), whether or not they were placed.
    offered,
    /// Calls placed: the first transmission of their INVITE.
    attempted,
    /// Calls the arrival process generated but the generator did not place because
    /// `--max-active` calls were already in progress.
    blocked,
    /// First `100 Trying` of a call received by the UAC.
    r100,
    /// First `180 Ringing` of a call received by the UAC.
    r180,
    /// First `200 OK` to an INVITE received by the UAC.
    r200,
    /// `503 Service Unavailable` to an INVITE received by the UAC.
    r503,
    /// Other final failures to an INVITE (300–699 except 503) received by the UAC.
    r_fail_other,
    /// Transaction timeouts: Timer B (INVITE), Timer F (BYE, CANCEL, REGISTER) at the UAC,
    /// and 2xx retransmission giving up without an ACK (64*T1) at the UAS.
    timeouts,
    /// INVITE retransmissions sent by the UAC (Timer A).
    retrans_invite,
    /// BYE retransmissions sent (Timer E).
    retrans_bye,
    /// 200 OK retransmissions sent by the UAS while waiting for the ACK (RFC 3261
    /// §13.3.1.4), on every transport.
    retrans_200,
    /// Other retransmissions sent: CANCEL, REGISTER, and responses repeated on a request
    /// retransmission.
    retrans_other,
    /// Calls set up end to end: the ACK of the 200 OK reached the UAS. Counted at the UAS
    /// when this process runs one, otherwise when the UAC sends the ACK.
    completed,
    /// Calls whose 200 OK arrived within the goodput window (default 10 s) of their first
    /// INVITE, as in the DEOC paper.
    goodput,
    /// Calls the UAC finished without failure: 200 OK, ACK, BYE and its 200 OK.
    calls_ok,
    /// Calls the UAC gave up: a final failure, a timeout, or the run ended before setup.
    calls_failed,
    /// Calls cancelled by the UAC after the no-answer time.
    cancelled,
    /// New INVITEs received by the UAS.
    uas_invites,
    /// Final failure responses the UAS sent by its configured response mix.
    uas_rejected,
    /// REGISTER transactions started (first transmission).
    reg_sent,
    /// REGISTER transactions answered with 2xx.
    reg_ok,
    /// REGISTER transactions answered with `423 Interval Too Brief`.
    reg_423,
    /// REGISTER transactions answered with 5xx.
    reg_5xx,
    /// REGISTER transactions answered with another failure.
    reg_fail_other,
    /// REGISTERs sent again after a 5xx's Retry-After.
    reg_retry_after,
    /// REGISTERs sent again after a timeout (RFC 5626 §4.5 backoff).
    reg_retry_timeout,
    /// Messages that matched no transaction or call (late retransmissions, strays).
    unexpected,
    /// Received bytes that did not parse as a SIP message.
    parse_errors,
    /// Messages the driver could not send (socket errors, full queues).
    send_errors,
    /// INVITEs sent again to another first hop (client failover after a timeout or `503`).
    failovers,
}
