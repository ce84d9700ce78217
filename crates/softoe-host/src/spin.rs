//! How long a waiting thread spins before it sleeps, learnt from how its
//! recent waits ended.
//!
//! Spinning buys latency with CPU: a wait that ends within the spin costs
//! no wake-up (on these VMs a wake-up across cores costs 20–30 µs), while
//! a wait that outlasts it has burnt the whole spin for nothing. Request /
//! response waits are short and gain from spinning; a bulk sender waiting
//! for window space or for a zero-copy buffer's release waits far longer,
//! and every spin is wasted CPU — the host-CPU-per-byte figure an offload
//! engine exists to lower. So each kind of wait keeps its own budget, as
//! adaptive mutexes and io_uring's hybrid polling do: a wait that ended
//! within the longest spin moves the budget toward twice its length, one
//! that outlasted it halves the budget. A run of long waits sleeps at once
//! after a few rounds; one short wait starts spinning again.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// One kind of wait's spin budget (nanoseconds, shared by its threads).
#[derive(Debug)]
pub(crate) struct Spin {
    ns: AtomicU32,
}

impl Spin {
    /// Starts at the longest spin: a new kind of wait spins until it has
    /// learnt otherwise.
    pub(crate) fn new(max: Duration) -> Spin {
        Spin {
            ns: AtomicU32::new(nanos(max)),
        }
    }

    /// How long to spin now.
    pub(crate) fn budget(&self) -> Duration {
        Duration::from_nanos(u64::from(self.ns.load(Ordering::Relaxed)))
    }

    /// Records a wait that took `waited` from its start to the condition
    /// (or to giving up), against the longest spin `max`.
    pub(crate) fn ended(&self, waited: Duration, max: Duration) {
        let cur = self.ns.load(Ordering::Relaxed);
        let next = if waited <= max {
            // Spinning would have caught it (or did): head for twice its
            // length, so that a slightly longer one is caught too.
            let want = nanos(waited.saturating_mul(2)).min(nanos(max));
            cur / 2 + want / 2 + (cur & want & 1)
        } else {
            cur / 2
        };
        // Threads racing here each store a sensible value; the last wins.
        self.ns.store(next, Ordering::Relaxed);
    }
}

fn nanos(d: Duration) -> u32 {
    u32::try_from(d.as_nanos()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Duration = Duration::from_micros(30);

    #[test]
    fn long_waits_stop_the_spinning_and_short_ones_bring_it_back() {
        let s = Spin::new(MAX);
        assert_eq!(s.budget(), MAX);
        // A bulk sender: every wait far longer than any spin.
        for _ in 0..6 {
            s.ended(Duration::from_micros(400), MAX);
        }
        assert!(s.budget() < Duration::from_micros(1), "{:?}", s.budget());
        // Request/response: 8 µs waits. The budget heads for 16 µs.
        for _ in 0..12 {
            s.ended(Duration::from_micros(8), MAX);
        }
        let b = s.budget();
        assert!(
            b > Duration::from_micros(15) && b <= Duration::from_micros(16),
            "{b:?}"
        );
        // Never beyond the longest spin.
        for _ in 0..12 {
            s.ended(Duration::from_micros(29), MAX);
        }
        assert!(s.budget() <= MAX);
        assert!(s.budget() > Duration::from_micros(29));
    }
}
