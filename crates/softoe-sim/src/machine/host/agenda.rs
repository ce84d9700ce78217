//! A node's agenda: its events in time order, cheap to keep.
//!
//! A bulk transfer puts several events per frame through a node (the DMA,
//! the job's start, its end, the frames it releases), so the queue is on
//! the hot path of the whole simulator. The heap holds only small keys —
//! (time, sequence, slot) — and the events themselves sit in a slab, so
//! sifting moves 24 bytes rather than a frame's bookkeeping; and an event
//! for the very instant being processed skips the heap for a FIFO, which
//! is drained before the heap is looked at again. Events are therefore
//! handled in time order, in the order they were made at one instant,
//! except that those made *at* the instant being processed come before
//! those made earlier for it — a fixed rule, so a run replays exactly.

use core::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use softoe_stack::Instant;

/// Events of type `E` in time order.
pub(super) struct Agenda<E> {
    heap: BinaryHeap<Reverse<(Instant, u64, u32)>>,
    slots: Vec<Option<E>>,
    free: Vec<u32>,
    fifo: VecDeque<E>,
    /// The instant being processed.
    now: Instant,
    seq: u64,
}

impl<E> Agenda<E> {
    pub(super) fn new() -> Agenda<E> {
        Agenda {
            heap: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            fifo: VecDeque::new(),
            now: Instant::ZERO,
            seq: 0,
        }
    }

    /// Schedules `ev` at `at` (an instant already past counts as now).
    pub(super) fn push(&mut self, at: Instant, ev: E) {
        if at <= self.now {
            self.fifo.push_back(ev);
            return;
        }
        let slot = match self.free.pop() {
            Some(i) => {
                if let Some(s) = self.slots.get_mut(i as usize) {
                    *s = Some(ev);
                }
                i
            }
            None => {
                self.slots.push(Some(ev));
                (self.slots.len() - 1) as u32
            }
        };
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, slot)));
    }

    /// When the next event is due.
    pub(super) fn next_at(&self) -> Option<Instant> {
        if !self.fifo.is_empty() {
            return Some(self.now);
        }
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// The next event due by `limit`, with its time.
    pub(super) fn pop(&mut self, limit: Instant) -> Option<(Instant, E)> {
        if let Some(ev) = self.fifo.pop_front() {
            return Some((self.now, ev));
        }
        loop {
            let &Reverse((at, _, slot)) = self.heap.peek()?;
            if at > limit {
                return None;
            }
            self.heap.pop();
            let ev = self.slots.get_mut(slot as usize).and_then(Option::take);
            self.free.push(slot);
            if let Some(ev) = ev {
                self.now = at;
                return Some((at, ev));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_time_order_and_the_current_instant_first() {
        let mut a = Agenda::new();
        let t = Instant::from_micros;
        a.push(t(5), "b");
        a.push(t(1), "a");
        a.push(t(5), "c");
        a.push(t(9), "late");
        assert_eq!(a.next_at(), Some(t(1)));
        assert_eq!(a.pop(t(6)), Some((t(1), "a")));
        assert_eq!(a.pop(t(6)), Some((t(5), "b")));
        // Made at 5 for 5: before "c", made earlier for 5.
        a.push(t(5), "now");
        a.push(t(2), "past");
        assert_eq!(a.next_at(), Some(t(5)));
        assert_eq!(a.pop(t(6)), Some((t(5), "now")));
        assert_eq!(a.pop(t(6)), Some((t(5), "past")));
        assert_eq!(a.pop(t(6)), Some((t(5), "c")));
        assert_eq!(a.pop(t(6)), None, "9 is past the limit");
        assert_eq!(a.pop(t(9)), Some((t(9), "late")));
        assert_eq!(a.pop(Instant::MAX), None);
        // Slots are reused.
        for i in 0..10 {
            a.push(t(20 + i), "x");
            assert!(a.pop(Instant::MAX).is_some());
        }
        assert!(a.slots.len() <= 4, "{}", a.slots.len());
    }
}
