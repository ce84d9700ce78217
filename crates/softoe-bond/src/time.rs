//! A `no_std` instant: time since an epoch the caller picks.
//!
//! This crate has no clock. Every entry point that needs the time takes an
//! [`Instant`]; the caller reads its clock (or a simulator's) and passes it
//! in. The type is our own rather than `softoe_stack::Instant` so that the
//! bonding core depends on nothing but the packet formats.

use core::ops::{Add, Sub};
use core::time::Duration;

/// A point in time: a [`Duration`] since an arbitrary epoch fixed by the
/// caller. Only differences between instants mean anything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(Duration);

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant(Duration::ZERO);

    /// `d` after the epoch.
    pub const fn from_duration(d: Duration) -> Instant {
        Instant(d)
    }

    /// `ms` milliseconds after the epoch.
    pub const fn from_millis(ms: u64) -> Instant {
        Instant(Duration::from_millis(ms))
    }

    /// The time since the epoch.
    pub const fn since_epoch(self) -> Duration {
        self.0
    }

    /// `self - earlier`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// `self + d`, saturating at the largest instant.
    pub fn saturating_add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// Saturates rather than overflow.
    fn add(self, d: Duration) -> Instant {
        self.saturating_add(d)
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturates at zero.
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}
