use std::time::Instant as StdInstant;

use holdline_base::{Duration, Instant};

/// The driver's clock: [`holdline_base::Instant`]s are nanoseconds since the epoch taken when
/// the clock was created.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    epoch: StdInstant,
}

impl Clock {
    /// A clock whose epoch is now.
    pub fn new() -> Self {
        Self {
            epoch: StdInstant::now(),
        }
    }

    /// A clock with the given epoch (several workers share one epoch).
    pub fn with_epoch(epoch: StdInstant) -> Self {
        Self { epoch }
    }

    /// The epoch as a standard instant.
    pub fn epoch(&self) -> StdInstant {
        self.epoch
    }

    /// The current time.
    pub fn now(&self) -> Instant {
        self.from_std(StdInstant::now())
    }

    /// Converts a standard instant (before the epoch maps to [`Instant::ZERO`]).
    pub fn from_std(&self, t: StdInstant) -> Instant {
        let d = t.saturating_duration_since(self.epoch);
        Instant::from_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    /// Converts back to a standard instant (saturating far in the future).
    pub fn to_std(&self, t: Instant) -> StdInstant {
        self.epoch
            .checked_add(t.since_epoch())
            .unwrap_or_else(|| self.epoch + Duration::from_secs(86_400 * 365 * 100))
    }

    /// How long from now until `t` (zero if `t` has passed).
    pub fn until(&self, t: Instant) -> Duration {
        t.saturating_duration_since(self.now())
    }
}

/// The CPU time the calling thread has used so far (`CLOCK_THREAD_CPUTIME_ID`), or `None`
/// where it cannot be read. Unlike the wall time between two instants it does not grow while
/// the thread waits for a CPU: a CPU quota's throttling, another process on its core, or the
/// hypervisor's steal. One system call; read it per measurement interval, not per message.
pub fn thread_cpu_time() -> Option<Duration> {
    crate::sys::thread_cpu_time().ok()
}

/// Lowers the calling thread to the lowest scheduling class (`SCHED_IDLE` on Linux): it gets
/// a CPU only when no thread of normal priority wants it, so the work it does (SIP capture)
/// never takes CPU time from the workers. Errors where the platform has no such class.
pub fn set_thread_background() -> std::io::Result<()> {
    crate::sys::set_thread_idle_priority()
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_is_monotonic() {
        let clock = Clock::new();
        let a = clock.now();
        let b = clock.now();
        assert!(b >= a);
        let t = Instant::from_millis(1500);
        assert_eq!(clock.from_std(clock.to_std(t)), t);
        assert_eq!(
            clock.from_std(clock.epoch() - Duration::from_secs(0)),
            Instant::ZERO
        );
        assert!(clock.until(Instant::ZERO).is_zero());
    }
}
