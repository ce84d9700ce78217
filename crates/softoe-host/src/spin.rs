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
//! adaptive mutexes and io_uring's hybrid polling do: a wait the spin
//! caught raises the budget to twice its length (if it was lower), three
//! in a row that outlasted the spin halve it. Only waits the spin itself
//! caught count as short: a
//! wait that slept measures the wake-up too (20–30 µs here), and counting
//! those made the budget hover near the longest spin for waits of 40 µs,
//! spinning and then sleeping anyway (a request/response server fell to a
//! third of its rate). With the budget at zero, a wait now and then spins
//! the longest spin, to notice that waits became short again: one in 8,
//! backing off to one in 256 while such probes fail.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// One kind of wait's spin budget (nanoseconds, shared by its threads).
#[derive(Debug)]
pub(crate) struct Spin {
    ns: AtomicU32,
    /// Waits since the budget fell to zero (for the probes).
    idle: AtomicU32,
    /// Waits in a row that outlasted the spin.
    misses: AtomicU32,
    /// With no budget, one wait in this many spins the longest spin: 8
    /// after a probe that caught its wait, doubling (to 256) after each
    /// that did not.
    every: AtomicU32,
}

const PROBE_FIRST: u32 = 8;
const PROBE_LAST: u32 = 256;

impl Spin {
    /// Starts at the longest spin: a new kind of wait spins until it has
    /// learnt otherwise.
    pub(crate) fn new(max: Duration) -> Spin {
        Spin {
            ns: AtomicU32::new(nanos(max)),
            idle: AtomicU32::new(0),
            misses: AtomicU32::new(0),
            every: AtomicU32::new(PROBE_FIRST),
        }
    }

    /// How long to spin now (pass it back to [`ended`](Self::ended)).
    pub(crate) fn budget(&self, max: Duration) -> Duration {
        let ns = self.ns.load(Ordering::Relaxed);
        let every = self.every.load(Ordering::Relaxed).max(1);
        if ns == 0 && self.idle.fetch_add(1, Ordering::Relaxed) % every == every - 1 {
            return max;
        }
        Duration::from_nanos(u64::from(ns))
    }

    /// Records a wait that spun up to `spun` and took `waited` from its
    /// start to the condition (or to giving up), against the longest spin
    /// `max`.
    pub(crate) fn ended(&self, waited: Duration, spun: Duration, max: Duration) {
        // Found at the first look: says nothing about how long waits are
        // (a zero-copy sender finds most buffers released already, and
        // those must not keep its budget up).
        if waited < Duration::from_micros(1) {
            return;
        }
        let cur = self.ns.load(Ordering::Relaxed);
        if cur == 0 && spun > Duration::ZERO {
            // A probe: probe more often if it paid, less if not.
            let e = self.every.load(Ordering::Relaxed);
            let e = if waited < spun {
                PROBE_FIRST
            } else {
                (e * 2).min(PROBE_LAST)
            };
            self.every.store(e, Ordering::Relaxed);
        }
        let next = if waited < spun {
            // The spin caught it: cover twice its length, so that a
            // slightly longer one is caught too.
            self.misses.store(0, Ordering::Relaxed);
            cur.max(nanos(waited.saturating_mul(2)).min(nanos(max)))
        } else if self.misses.fetch_add(1, Ordering::Relaxed) % 3 == 2 {
            // Under a microsecond a spin buys nothing: stop.
            if cur < 2000 { 0 } else { cur / 2 }
        } else {
            cur
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

    /// Runs one wait of `w` with the budget the spin gives.
    fn wait(s: &Spin, w: Duration) {
        let b = s.budget(MAX);
        s.ended(w, b, MAX);
    }

    #[test]
    fn long_waits_stop_the_spinning_and_short_ones_bring_it_back() {
        let s = Spin::new(MAX);
        assert_eq!(s.budget(MAX), MAX);
        let ns = |s: &Spin| Duration::from_nanos(u64::from(s.ns.load(Ordering::Relaxed)));
        // A bulk sender: every wait far longer than any spin.
        for _ in 0..30 {
            wait(&s, Duration::from_micros(400));
        }
        assert_eq!(ns(&s), Duration::ZERO);
        // Waits of 40 µs (a round trip that outlasts the longest spin, or
        // a short one plus the wake-up) never bring the spin back.
        for _ in 0..200 {
            wait(&s, Duration::from_micros(40));
        }
        let spins = (0..64).filter(|_| s.budget(MAX) > Duration::ZERO).count();
        assert!(spins <= 2, "probes only: {spins}");
        // Request/response with 8 µs waits: a probe catches one (within 256
        // waits), and the budget covers 16 µs, even with a longer wait now
        // and then.
        for i in 0..600 {
            let w = if i % 10 == 9 { 25 } else { 8 };
            wait(&s, Duration::from_micros(w));
        }
        assert_eq!(ns(&s), Duration::from_micros(16));
        // Never beyond the longest spin.
        for _ in 0..12 {
            s.ended(Duration::from_micros(29), MAX, MAX);
        }
        assert!(ns(&s) <= MAX);
        assert!(ns(&s) > Duration::from_micros(29));
        // Conditions found at once teach nothing: long waits between them
        // still stop the spinning.
        for _ in 0..40 {
            wait(&s, Duration::from_nanos(200));
            wait(&s, Duration::from_micros(400));
        }
        assert_eq!(ns(&s), Duration::ZERO);
    }
}
