//! The timer queue: a FIFO for deadlines that arrive in order (timers scheduled at a fixed
//! offset from a non-decreasing now) plus a heap for the rest. Entries are never removed
//! early; a fired entry is checked against its call's current deadline.
//!
//! Long timers (64*T1 = 32 s: Timers B, F, H) are not queued when they are set: almost every
//! call ends within milliseconds, and queueing one entry per call for 32 s would hold
//! `rate * 32` stale entries. Instead a checkpoint entry T1 later arms the long timer only if
//! the call is still alive then.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use holdline_base::Instant;

/// Which role and timer an entry belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    /// UAC INVITE retransmission (Timer A).
    UacA,
    /// UAC INVITE timeout (Timer B).
    UacB,
    /// UAC no-answer CANCEL.
    UacCancel,
    /// UAC hang-up after the holding time.
    UacHold,
    /// UAC non-INVITE retransmission (Timer E; BYE or CANCEL).
    UacE,
    /// UAC non-INVITE timeout (Timer F).
    UacF,
    /// UAC client failover: no response to the INVITE from this hop yet.
    UacFailover,
    /// UAS 180 after the ring delay.
    UasRing,
    /// UAS final response after the answer delay.
    UasAnswer,
    /// UAS final response retransmission (2xx per §13.3.1.4, non-2xx Timer G).
    UasG,
    /// UAS ACK wait (64*T1, Timer H).
    UasH,
    /// UAS checkpoint T1 after a long timer (H) was set: arms it if the call still lives.
    UasCheck,
    /// UAC checkpoint T1 after a long timer (B, F) was set: arms it if the call still lives.
    UacCheck,
    /// REGISTER retransmission (Timer E).
    RegE,
    /// REGISTER timeout (Timer F).
    RegF,
    /// REGISTER refresh.
    RegRefresh,
    /// A REGISTER's resend after a 5xx's Retry-After.
    RegRetry,
    /// Registration failover: no response to the REGISTER from this registrar yet.
    RegFailover,
}

/// A timer entry: when, which slot (and its generation), which timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Entry {
    pub(crate) at: Instant,
    pub(crate) slot: u32,
    pub(crate) gen_: u32,
    pub(crate) kind: Kind,
}

/// FIFO lanes: each holds entries in deadline order. Timers set at a fixed offset from a
/// non-decreasing now (T1 for A, G and the checkpoints; 64*T1 for B, F, H) each keep one lane
/// in order by themselves; a lane of their own keeps one kind of offset from pushing the other
/// into the heap.
const LANES: usize = 4;

#[derive(Debug, Default)]
pub(crate) struct TimerQueue {
    lanes: [VecDeque<Entry>; LANES],
    heap: BinaryHeap<Reverse<Entry>>,
}

impl TimerQueue {
    pub(crate) fn schedule(&mut self, e: Entry) {
        // The lane whose last deadline is the latest one not after `e` (the tightest fit); an
        // empty lane if none fits; the heap if every lane is taken and none fits.
        let mut best: Option<(usize, Instant)> = None;
        let mut empty = None;
        for (i, lane) in self.lanes.iter().enumerate() {
            match lane.back() {
                Some(b) if b.at <= e.at => {
                    if best.is_none_or(|(_, at)| b.at > at) {
                        best = Some((i, b.at));
                    }
                }
                Some(_) => {}
                None => {
                    if empty.is_none() {
                        empty = Some(i);
                    }
                }
            }
        }
        match best.map(|(i, _)| i).or(empty) {
            Some(i) => self.lanes[i].push_back(e),
            None => self.heap.push(Reverse(e)),
        }
    }

    /// Schedules, for `slot` of generation `gen_`, each timer whose deadline is set.
    pub(crate) fn arm(
        &mut self,
        slot: u32,
        gen_: u32,
        timers: impl IntoIterator<Item = (Option<Instant>, Kind)>,
    ) {
        for (at, kind) in timers {
            if let Some(at) = at {
                self.schedule(Entry {
                    at,
                    slot,
                    gen_,
                    kind,
                });
            }
        }
    }

    pub(crate) fn next(&self) -> Option<Instant> {
        let lanes = self.lanes.iter().filter_map(|l| l.front().map(|e| e.at));
        lanes.chain(self.heap.peek().map(|Reverse(e)| e.at)).min()
    }

    /// Removes and returns the earliest entry due at `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<Entry> {
        let mut best: Option<(usize, Instant)> = None;
        for (i, lane) in self.lanes.iter().enumerate() {
            if let Some(f) = lane.front()
                && f.at <= now
                && best.is_none_or(|(_, at)| f.at < at)
            {
                best = Some((i, f.at));
            }
        }
        let heap = self
            .heap
            .peek()
            .map(|Reverse(e)| e.at)
            .filter(|at| *at <= now);
        match (best, heap) {
            (Some((_, a)), Some(h)) if h < a => self.heap.pop().map(|Reverse(e)| e),
            (Some((i, _)), _) => self.lanes[i].pop_front(),
            (None, Some(_)) => self.heap.pop().map(|Reverse(e)| e),
            (None, None) => None,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.lanes.iter().map(VecDeque::len).sum::<usize>() + self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(ms: u64, slot: u32) -> Entry {
        Entry {
            at: Instant::from_millis(ms),
            slot,
            gen_: 0,
            kind: Kind::UacA,
        }
    }

    #[test]
    fn pops_in_deadline_order_whatever_the_insertion_order() {
        let mut q = TimerQueue::default();
        let mut rng = holdline_base::Rng::seed_from_u64(5);
        let mut want = Vec::new();
        let mut now = 0;
        for i in 0..5000u32 {
            now += rng.below(3);
            // Offsets like the agent's: T1, 64*T1, and random ones.
            let at = match i % 3 {
                0 => now + 500,
                1 => now + 32_000,
                _ => now + rng.below(40_000),
            };
            q.schedule(e(at, i));
            want.push((at, i));
        }
        want.sort();
        assert_eq!(q.len(), 5000);
        assert_eq!(q.next(), Some(Instant::from_millis(want[0].0)));
        let mut got = Vec::new();
        while let Some(x) = q.pop_due(Instant::MAX) {
            got.push((x.at.as_nanos() / 1_000_000, x.slot));
        }
        let got_times: Vec<u64> = got.iter().map(|g| g.0).collect();
        let want_times: Vec<u64> = want.iter().map(|w| w.0).collect();
        assert_eq!(got_times, want_times);
        assert_eq!(q.pop_due(Instant::MAX), None);
    }

    #[test]
    fn nothing_pops_before_its_time() {
        let mut q = TimerQueue::default();
        q.schedule(e(10, 1));
        q.schedule(e(5, 2));
        assert_eq!(q.pop_due(Instant::from_millis(4)), None);
        assert_eq!(q.pop_due(Instant::from_millis(5)).map(|x| x.slot), Some(2));
        assert_eq!(q.pop_due(Instant::from_millis(9)), None);
        assert_eq!(q.pop_due(Instant::from_millis(10)).map(|x| x.slot), Some(1));
    }
}
