//! The stack's notion of time: a monotonic instant supplied by the caller.
//!
//! The stack has no clock. Every entry point takes `now: Instant`; the runtime
//! reads its clock (or the simulator its virtual clock) and passes it in. This is
//! what makes a run replayable bit for bit.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};
use core::time::Duration;

/// A point on a monotonic timeline, in nanoseconds since an arbitrary origin
/// chosen by the caller.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant {
    nanos: u64,
}

impl Instant {
    /// The origin of the timeline.
    pub const ZERO: Instant = Instant { nanos: 0 };
    /// The largest representable instant; used as "never".
    pub const MAX: Instant = Instant { nanos: u64::MAX };

    /// An instant `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Instant {
        Instant { nanos }
    }

    /// An instant `micros` microseconds after the origin.
    pub const fn from_micros(micros: u64) -> Instant {
        Instant {
            nanos: micros.saturating_mul(1_000),
        }
    }

    /// An instant `millis` milliseconds after the origin.
    pub const fn from_millis(millis: u64) -> Instant {
        Instant {
            nanos: millis.saturating_mul(1_000_000),
        }
    }

    /// An instant `secs` seconds after the origin.
    pub const fn from_secs(secs: u64) -> Instant {
        Instant {
            nanos: secs.saturating_mul(1_000_000_000),
        }
    }

    /// Nanoseconds since the origin.
    pub const fn total_nanos(self) -> u64 {
        self.nanos
    }

    /// Microseconds since the origin.
    pub const fn total_micros(self) -> u64 {
        self.nanos / 1_000
    }

    /// Milliseconds since the origin.
    pub const fn total_millis(self) -> u64 {
        self.nanos / 1_000_000
    }

    /// The time elapsed from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.nanos.saturating_sub(earlier.nanos))
    }

    /// `self + d`, saturating at [`Instant::MAX`].
    pub fn saturating_add(self, d: Duration) -> Instant {
        let add = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Instant {
            nanos: self.nanos.saturating_add(add),
        }
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        self.saturating_add(rhs)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = self.saturating_add(rhs);
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating: an earlier minus a later instant is zero.
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, rhs: Duration) -> Instant {
        let sub = u64::try_from(rhs.as_nanos()).unwrap_or(u64::MAX);
        Instant {
            nanos: self.nanos.saturating_sub(sub),
        }
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}s",
            self.nanos / 1_000_000_000,
            self.nanos % 1_000_000_000
        )
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_millis(5);
        assert_eq!(t + Duration::from_millis(1), Instant::from_millis(6));
        assert_eq!(t - Duration::from_secs(1), Instant::ZERO);
        assert_eq!(Instant::ZERO - t, Duration::ZERO);
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!(t.total_micros(), 5_000);
    }
}
