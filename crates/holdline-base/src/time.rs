use core::fmt;
use core::ops::{Add, AddAssign, Sub};
use core::time::Duration;

/// A point in time, in nanoseconds since an epoch chosen by the driver.
///
/// Pure crates never read a clock: the driver passes `now` in. A real driver maps the
/// operating system's monotonic clock onto this type from an epoch taken at start-up; a
/// simulator starts at [`Instant::ZERO`]. Arithmetic saturates instead of panicking, so a
/// driver can never crash a state machine with an extreme value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The epoch: time zero of a run.
    pub const ZERO: Self = Self(0);
    /// The largest representable instant (about 584 years after the epoch).
    pub const MAX: Self = Self(u64::MAX);

    /// The instant `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Self(nanos)
    }

    /// The instant `micros` microseconds after the epoch (saturating).
    pub const fn from_micros(micros: u64) -> Self {
        Self(micros.saturating_mul(1_000))
    }

    /// The instant `millis` milliseconds after the epoch (saturating).
    pub const fn from_millis(millis: u64) -> Self {
        Self(millis.saturating_mul(1_000_000))
    }

    /// The instant `secs` seconds after the epoch (saturating).
    pub const fn from_secs(secs: u64) -> Self {
        Self(secs.saturating_mul(1_000_000_000))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// The span since the epoch.
    pub const fn since_epoch(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    /// The span from `earlier` to `self`, or zero if `earlier` is later.
    pub const fn saturating_duration_since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, or `None` past [`Instant::MAX`].
    pub fn checked_add(self, d: Duration) -> Option<Self> {
        let nanos = u64::try_from(d.as_nanos()).ok()?;
        self.0.checked_add(nanos).map(Self)
    }

    /// `self - d`, or `None` before the epoch.
    pub fn checked_sub(self, d: Duration) -> Option<Self> {
        let nanos = u64::try_from(d.as_nanos()).ok()?;
        self.0.checked_sub(nanos).map(Self)
    }
}

impl Add<Duration> for Instant {
    type Output = Self;
    /// Saturates at [`Instant::MAX`].
    fn add(self, d: Duration) -> Self {
        self.checked_add(d).unwrap_or(Self::MAX)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub for Instant {
    type Output = Duration;
    /// Saturates at zero when `rhs` is later than `self`.
    fn sub(self, rhs: Self) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl fmt::Display for Instant {
    /// Seconds since the epoch with microsecond precision, e.g. `12.000250s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:06}s",
            self.0 / 1_000_000_000,
            (self.0 % 1_000_000_000) / 1_000
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_millis(5);
        assert_eq!(t + Duration::from_millis(1), Instant::from_millis(6));
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!(Instant::ZERO - t, Duration::ZERO);
        assert_eq!(t - Instant::ZERO, Duration::from_millis(5));
        assert_eq!(Instant::ZERO.checked_sub(Duration::from_nanos(1)), None);
        assert_eq!(Instant::ZERO.checked_add(Duration::MAX), None);
    }

    #[test]
    fn display_is_seconds_with_micros() {
        assert_eq!(Instant::from_micros(12_000_250).to_string(), "12.000250s");
    }
}
