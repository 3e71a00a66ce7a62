//! The timer queue: a FIFO for deadlines that arrive in order (every 64*T1 timeout is
//! scheduled at a fixed offset from a non-decreasing now) plus a heap for the rest. Entries
//! are never removed early; a fired entry is checked against its call's current deadline.

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
    /// UAS 180 after the ring delay.
    UasRing,
    /// UAS final response after the answer delay.
    UasAnswer,
    /// UAS final response retransmission (2xx per §13.3.1.4, non-2xx Timer G).
    UasG,
    /// UAS ACK wait (64*T1, Timer H).
    UasH,
    /// UAS linger after the call ended (absorbs retransmitted BYEs).
    UasLinger,
    /// REGISTER retransmission (Timer E).
    RegE,
    /// REGISTER timeout (Timer F).
    RegF,
    /// REGISTER refresh.
    RegRefresh,
}

/// A timer entry: when, which slot (and its generation), which timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Entry {
    pub(crate) at: Instant,
    pub(crate) slot: u32,
    pub(crate) gen_: u32,
    pub(crate) kind: Kind,
}

#[derive(Debug, Default)]
pub(crate) struct TimerQueue {
    fifo: VecDeque<Entry>,
    heap: BinaryHeap<Reverse<Entry>>,
}

impl TimerQueue {
    pub(crate) fn schedule(&mut self, e: Entry) {
        if self.fifo.back().is_none_or(|b| e.at >= b.at) {
            self.fifo.push_back(e);
        } else {
            self.heap.push(Reverse(e));
        }
    }

    pub(crate) fn next(&self) -> Option<Instant> {
        match (self.fifo.front(), self.heap.peek()) {
            (Some(a), Some(Reverse(b))) => Some(a.at.min(b.at)),
            (Some(a), None) => Some(a.at),
            (None, Some(Reverse(b))) => Some(b.at),
            (None, None) => None,
        }
    }

    /// Removes and returns the earliest entry due at `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<Entry> {
        let f = self.fifo.front().map(|e| e.at);
        let h = self.heap.peek().map(|Reverse(e)| e.at);
        match (f, h) {
            (Some(a), Some(b)) if a <= b && a <= now => self.fifo.pop_front(),
            (_, Some(b)) if b <= now => self.heap.pop().map(|Reverse(e)| e),
            (Some(a), None) if a <= now => self.fifo.pop_front(),
            _ => None,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.fifo.len() + self.heap.len()
    }
}
