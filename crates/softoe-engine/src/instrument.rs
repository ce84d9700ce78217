//! What the engine's loop measures and emulates, behind one interface.
//!
//! Stage profiling (`profile_stages`: time per stage) and the slowed
//! engine (`speed` below 1: a busy-wait in proportion to the work) both
//! watch the same points of a turn. [`Instrument`] is those points: the
//! loop calls it at each and reads as the work alone, and its default
//! ([`Instrument::off`]) does nothing at any of them.

use std::time::Instant;

use crate::counters::EngineCounters;
use crate::emulate::{self, SlowClock};

/// The profiler and the slowed engine's clock, as the loop sees them.
#[derive(Default)]
pub(crate) struct Instrument {
    /// Time each stage (`profile_stages`).
    profile: bool,
    /// Whether turns are timed (the engine is slowed or profiles stages).
    timed: bool,
    /// The slowed engine's busy-wait (`1/speed − 1` ns per ns of work, 0
    /// at full speed).
    slow: SlowClock,
}

impl Instrument {
    /// Nothing measured, nothing emulated: every hook is a no-op.
    #[cfg(test)]
    pub(crate) fn off() -> Instrument {
        Instrument::default()
    }

    /// An engine slowed by `slowdown` ns of wait per ns of work (0: full
    /// speed), profiling its stages or not.
    pub(crate) fn new(slowdown: f64, profile: bool) -> Instrument {
        Instrument {
            profile,
            timed: slowdown > 0.0 || profile,
            slow: SlowClock::new(slowdown),
        }
    }

    /// Whether stages are timed.
    pub(crate) fn profiles(&self) -> bool {
        self.profile
    }

    /// Whether turns are timed at all.
    pub(crate) fn timed(&self) -> bool {
        self.timed
    }

    /// A turn that is timed starts.
    pub(crate) fn start_turn(&mut self) {
        self.slow.start();
    }

    /// A timed turn ends: `mem` ns of it were emulated memory delay (an
    /// emulated wait, not work; a slower core does not make memory or the
    /// wire slower). A turn that sent a frame worked, even if it reports
    /// no work.
    pub(crate) fn end_turn(&mut self, busy: bool, mem: u64, counters: &mut EngineCounters) {
        if busy || self.slow.paid() > 0 {
            counters.work_nanos += self.slow.work(mem);
            self.slow.pay(mem);
        }
        counters.slowdown_nanos += self.slow.paid();
    }

    /// A stage's start, when stages are profiled.
    pub(crate) fn stage_clock(&self) -> Option<Instant> {
        self.profile.then(Instant::now)
    }

    /// A stage's start when it did work worth timing (`worked`).
    pub(crate) fn stage_clock_if(&self, worked: bool) -> Option<Instant> {
        (self.profile && worked).then(Instant::now)
    }

    /// A frame is about to leave: it leaves when a slower core would have
    /// made it.
    pub(crate) fn before_send(&mut self) {
        self.slow.pay(0);
    }

    /// The slowed engine's busy-waits so far this turn (wall time).
    pub(crate) fn spun(&self) -> u64 {
        self.slow.spun()
    }

    /// The receive batch began waiting for more frames at `now`
    /// (interrupt coalescing): remembered in `since` on timed turns, as
    /// the wait is not work.
    pub(crate) fn coalescing_from(&self, since: &mut Option<Instant>, now: Instant) {
        if self.timed {
            since.get_or_insert(now);
        }
    }

    /// The wait for more frames that began at `since` is over.
    pub(crate) fn coalesced(&mut self, since: Option<Instant>) {
        if let Some(t) = since {
            self.slow.waited(emulate::nanos(t.elapsed()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Off, the hooks measure nothing, wait for nothing and count nothing.
    #[test]
    fn the_default_instrument_does_nothing() {
        let mut i = Instrument::off();
        assert!(!i.timed() && !i.profiles());
        assert_eq!(i.stage_clock(), None);
        assert_eq!(i.stage_clock_if(true), None);
        let mut since = None;
        i.coalescing_from(&mut since, Instant::now());
        assert_eq!(since, None);
        i.start_turn();
        i.before_send();
        i.coalesced(since);
        let mut c = EngineCounters::default();
        i.end_turn(true, 0, &mut c);
        assert_eq!(i.spun(), 0);
        assert_eq!(c.slowdown_nanos, 0);
    }

    /// Profiling alone times turns and stages but never slows the engine.
    #[test]
    fn profiling_times_without_slowing() {
        let mut i = Instrument::new(0.0, true);
        assert!(i.timed() && i.profiles());
        assert!(i.stage_clock().is_some());
        assert_eq!(i.stage_clock_if(false), None);
        i.start_turn();
        i.before_send();
        let mut c = EngineCounters::default();
        i.end_turn(true, 0, &mut c);
        assert_eq!((i.spun(), c.slowdown_nanos), (0, 0));
    }
}
