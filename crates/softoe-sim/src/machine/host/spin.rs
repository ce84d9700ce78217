//! A waiting program's spin budget, learnt from how its waits ended: the
//! rule of softoe-host's `Spin`, in virtual time.
//!
//! The real client spins before it sleeps, up to `SOFTOE_SPIN_US`, and each
//! kind of wait learns its own budget: a wait the spin caught raises the
//! budget to twice its length, three in a row that outlasted the spin halve
//! it (under 2 µs, to zero), and a budget of zero still spins the longest
//! spin now and then (one wait in 8, backing off to one in 256 while such
//! probes fail) to notice that waits became short again. A request/response
//! program so spins through its round trips; a bulk sender, whose waits for
//! send space are long, stops spinning. The model follows the same rule so
//! that its wake-ups and its host CPU follow the real program's.

use core::time::Duration;

const PROBE_FIRST: u32 = 8;
const PROBE_LAST: u32 = 256;

/// One kind of wait's budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SpinBudget {
    budget: Duration,
    /// Waits since the budget fell to zero (for the probes).
    idle: u32,
    /// Waits in a row that outlasted the spin.
    misses: u32,
    /// With no budget, one wait in this many probes with the longest spin.
    every: u32,
}

impl SpinBudget {
    /// Starts at the longest spin, as the real client does.
    pub(super) fn new(max: Duration) -> SpinBudget {
        SpinBudget {
            budget: max,
            idle: 0,
            misses: 0,
            every: PROBE_FIRST,
        }
    }

    /// How long the next wait spins.
    pub(super) fn next(&mut self, max: Duration) -> Duration {
        if self.budget.is_zero() && !max.is_zero() {
            self.idle = self.idle.wrapping_add(1);
            if self.idle.is_multiple_of(self.every.max(1)) {
                return max;
            }
        }
        self.budget
    }

    /// A wait that spun up to `spun` ended after `waited`.
    pub(super) fn ended(&mut self, waited: Duration, spun: Duration, max: Duration) {
        if waited < Duration::from_micros(1) {
            return;
        }
        if self.budget.is_zero() && !spun.is_zero() {
            self.every = if waited < spun {
                PROBE_FIRST
            } else {
                (self.every * 2).min(PROBE_LAST)
            };
        }
        self.budget = if waited < spun {
            self.misses = 0;
            self.budget.max(waited.saturating_mul(2).min(max))
        } else {
            self.misses += 1;
            if self.misses.is_multiple_of(3) {
                if self.budget < Duration::from_micros(2) {
                    Duration::ZERO
                } else {
                    self.budget / 2
                }
            } else {
                self.budget
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Duration = Duration::from_micros(30);

    fn wait(s: &mut SpinBudget, w: Duration) -> Duration {
        let b = s.next(MAX);
        s.ended(w, b, MAX);
        b
    }

    #[test]
    fn short_waits_keep_the_spin_and_long_ones_stop_it() {
        let mut s = SpinBudget::new(MAX);
        for _ in 0..20 {
            assert_eq!(wait(&mut s, Duration::from_micros(10)), MAX);
        }
        // Long waits halve it every third, down to nothing.
        for _ in 0..30 {
            wait(&mut s, Duration::from_millis(1));
        }
        assert_eq!(s.budget, Duration::ZERO);
        // With no budget, one wait in eight probes with the longest spin.
        let spins: Vec<_> = (0..16)
            .map(|_| wait(&mut s, Duration::from_millis(1)))
            .collect();
        assert!(
            spins.iter().filter(|b| !b.is_zero()).count() >= 1,
            "{spins:?}"
        );
        // A probe that catches a short wait brings the budget back.
        let mut s = SpinBudget::new(MAX);
        for _ in 0..30 {
            wait(&mut s, Duration::from_millis(1));
        }
        let mut caught = false;
        for _ in 0..300 {
            if !wait(&mut s, Duration::from_micros(5)).is_zero() {
                caught = true;
                break;
            }
        }
        assert!(caught);
        assert_eq!(s.budget, Duration::from_micros(10));
    }
}
