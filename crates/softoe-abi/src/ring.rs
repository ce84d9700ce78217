//! Single-producer/single-consumer rings in shared memory.
//!
//! The shape of io_uring's rings and rtrb: free-running `u32` indices that
//! wrap, a power-of-two number of entries, each index on its own cache line
//! with one writer. The producer writes an entry, then publishes it with one
//! Release store of its tail; the consumer loads the tail with Acquire, copies
//! the entry out, then frees it with a Release store of its head. Each side
//! keeps its own index privately and a cached copy of the other's, which it
//! reloads only when the ring looks full (producer) or empty (consumer).
//!
//! The other side may be hostile: an index read from shared memory that
//! claims more entries than the ring holds is [`RingError::Corrupt`], and
//! nothing is read or written through it. Entries are plain integers, so any
//! bytes are a valid entry; what an entry *means* is checked by
//! [`decode`](crate::decode) and the engine.

use core::marker::PhantomData;
use core::sync::atomic::{AtomicU32, Ordering};

/// A ring's shared words and entries (built by [`Region`](crate::Region)).
#[derive(Debug)]
pub(crate) struct RingPtrs<T> {
    pub(crate) head: *const AtomicU32,
    pub(crate) tail: *const AtomicU32,
    pub(crate) entries: *mut T,
    pub(crate) size: u32,
}

impl<T> RingPtrs<T> {
    fn head(&self) -> &AtomicU32 {
        // SAFETY: built by `Region` from a header word that lives as long as
        // the region, which the region's creator guarantees outlives its
        // views.
        unsafe { &*self.head }
    }

    fn tail(&self) -> &AtomicU32 {
        // SAFETY: as for `head`.
        unsafe { &*self.tail }
    }

    fn slot(&self, index: u32) -> *mut T {
        // SAFETY: `index & (size - 1) < size`, and the region holds `size`
        // entries at `entries`.
        unsafe { self.entries.add((index & (self.size - 1)) as usize) }
    }
}

/// The other side broke the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RingError {
    /// The producer pushed into a full ring.
    Full,
    /// An index read from shared memory is impossible (the peer claims more
    /// entries than the ring holds): the peer is broken or hostile.
    Corrupt,
}

impl core::fmt::Display for RingError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RingError::Full => f.write_str("ring full"),
            RingError::Corrupt => f.write_str("ring index corrupt"),
        }
    }
}

/// The producing side of a ring.
#[derive(Debug)]
pub struct Producer<T> {
    ring: RingPtrs<T>,
    tail: u32,
    cached_head: u32,
    _t: PhantomData<T>,
}

// SAFETY: a producer owns its side of the ring; moving it to another thread
// moves that ownership (entries are `Copy` records of integers).
unsafe impl<T: Copy + Send> Send for Producer<T> {}

impl<T: Copy> Producer<T> {
    pub(crate) fn new(ring: RingPtrs<T>) -> Producer<T> {
        let tail = ring.tail().load(Ordering::Relaxed);
        let cached_head = ring.head().load(Ordering::Acquire);
        Producer {
            ring,
            tail,
            cached_head,
            _t: PhantomData,
        }
    }

    /// Entries the ring holds.
    pub fn capacity(&self) -> u32 {
        self.ring.size
    }

    /// Free entries, reloading the consumer's index.
    pub fn free(&mut self) -> Result<u32, RingError> {
        let head = self.ring.head().load(Ordering::Acquire);
        let used = self.tail.wrapping_sub(head);
        if used > self.ring.size {
            return Err(RingError::Corrupt);
        }
        // Cached only once checked: a bad index must not stick.
        self.cached_head = head;
        Ok(self.ring.size - used)
    }

    /// Writes `v` without publishing it (see [`publish`](Self::publish)).
    pub fn write(&mut self, v: &T) -> Result<(), RingError> {
        let mut used = self.tail.wrapping_sub(self.cached_head);
        if used >= self.ring.size {
            used = self.ring.size - self.free()?;
            if used == self.ring.size {
                return Err(RingError::Full);
            }
        }
        // SAFETY: the slot is inside the ring and not visible to the consumer
        // until `publish`; a hostile consumer reading it early sees a torn
        // record of integers, which is its own problem.
        unsafe { core::ptr::write_volatile(self.ring.slot(self.tail), *v) };
        self.tail = self.tail.wrapping_add(1);
        Ok(())
    }

    /// Makes everything written visible to the consumer (one Release store).
    pub fn publish(&mut self) {
        self.ring.tail().store(self.tail, Ordering::Release);
    }

    /// Writes and publishes one entry.
    pub fn push(&mut self, v: &T) -> Result<(), RingError> {
        self.write(v)?;
        self.publish();
        Ok(())
    }
}

/// The consuming side of a ring.
#[derive(Debug)]
pub struct Consumer<T> {
    ring: RingPtrs<T>,
    head: u32,
    cached_tail: u32,
    _t: PhantomData<T>,
}

// SAFETY: as for `Producer`.
unsafe impl<T: Copy + Send> Send for Consumer<T> {}

impl<T: Copy> Consumer<T> {
    pub(crate) fn new(ring: RingPtrs<T>) -> Consumer<T> {
        let head = ring.head().load(Ordering::Relaxed);
        Consumer {
            cached_tail: head,
            ring,
            head,
            _t: PhantomData,
        }
    }

    /// Entries waiting, reloading the producer's index.
    pub fn available(&mut self) -> Result<u32, RingError> {
        let tail = self.ring.tail().load(Ordering::Acquire);
        let n = tail.wrapping_sub(self.head);
        if n > self.ring.size {
            return Err(RingError::Corrupt);
        }
        // Cached only once checked: a bad index must not stick.
        self.cached_tail = tail;
        Ok(n)
    }

    /// Copies the next entry out without freeing its slot (see
    /// [`release`](Self::release)); `None` when the ring is empty.
    pub fn read(&mut self) -> Result<Option<T>, RingError> {
        if self.head == self.cached_tail && self.available()? == 0 {
            return Ok(None);
        }
        // SAFETY: the producer published this slot (Acquire above) and the
        // index is masked into the ring; the entry is copied out, so a
        // producer overwriting it later cannot affect the copy.
        let v = unsafe { core::ptr::read_volatile(self.ring.slot(self.head)) };
        self.head = self.head.wrapping_add(1);
        Ok(Some(v))
    }

    /// Frees every slot read so far for the producer (one Release store).
    pub fn release(&mut self) {
        self.ring.head().store(self.head, Ordering::Release);
    }

    /// Reads and frees one entry.
    pub fn pop(&mut self) -> Result<Option<T>, RingError> {
        let v = self.read()?;
        if v.is_some() {
            self.release();
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;
    use std::vec::Vec;

    struct Mem {
        words: std::boxed::Box<[AtomicU32; 2]>,
        entries: Vec<u64>,
    }

    fn ring(m: &mut Mem) -> RingPtrs<u64> {
        RingPtrs {
            head: &raw const m.words[0],
            tail: &raw const m.words[1],
            entries: m.entries.as_mut_ptr(),
            size: m.entries.len() as u32,
        }
    }

    fn mem(size: usize, start: u32) -> Mem {
        Mem {
            words: std::boxed::Box::new([AtomicU32::new(start), AtomicU32::new(start)]),
            entries: std::vec![0; size],
        }
    }

    proptest! {
        /// The ring behaves as a bounded queue, across index wrap-around.
        #[test]
        fn model_checked_against_a_queue(
            ops in proptest::collection::vec((any::<bool>(), 1u8..6), 1..400),
            start in prop_oneof![Just(0u32), Just(u32::MAX - 20), any::<u32>()],
        ) {
            let mut m = mem(8, start);
            let mut p = Producer::new(ring(&mut m));
            let mut c = Consumer::new(ring(&mut m));
            let mut model = VecDeque::new();
            let mut next = 0u64;
            for (push, n) in ops {
                for _ in 0..n {
                    if push {
                        let r = p.push(&next);
                        if model.len() == 8 {
                            prop_assert_eq!(r, Err(RingError::Full));
                        } else {
                            prop_assert_eq!(r, Ok(()));
                            model.push_back(next);
                        }
                        next += 1;
                    } else {
                        prop_assert_eq!(c.pop(), Ok(model.pop_front()));
                    }
                }
                prop_assert_eq!(c.available(), Ok(model.len() as u32));
                prop_assert_eq!(p.free(), Ok(8 - model.len() as u32));
            }
        }
    }

    #[test]
    fn a_lying_producer_is_caught() {
        let mut m = mem(4, 0);
        let mut c = Consumer::new(ring(&mut m));
        m.words[1].store(5, Ordering::Release);
        assert_eq!(c.pop(), Err(RingError::Corrupt));
        m.words[1].store(u32::MAX, Ordering::Release);
        assert_eq!(c.pop(), Err(RingError::Corrupt));
        m.words[1].store(4, Ordering::Release);
        for i in 0..4 {
            assert_eq!(c.pop(), Ok(Some(0)), "entry {i}");
        }
        assert_eq!(c.pop(), Ok(None));
    }

    #[test]
    fn a_lying_consumer_is_caught() {
        let mut m = mem(4, 0);
        let mut p = Producer::new(ring(&mut m));
        for i in 0..4 {
            p.push(&i).unwrap();
        }
        // The consumer claims to have read entries that were never written.
        m.words[0].store(9, Ordering::Release);
        assert_eq!(p.push(&1), Err(RingError::Corrupt));
        assert_eq!(p.free(), Err(RingError::Corrupt));
    }

    #[test]
    fn batches_publish_once() {
        let mut m = mem(4, 0);
        let mut p = Producer::new(ring(&mut m));
        let mut c = Consumer::new(ring(&mut m));
        p.write(&1).unwrap();
        p.write(&2).unwrap();
        assert_eq!(c.pop(), Ok(None), "unpublished entries are invisible");
        p.publish();
        assert_eq!(c.read(), Ok(Some(1)));
        assert_eq!(c.read(), Ok(Some(2)));
        assert_eq!(p.free(), Ok(2), "unreleased entries stay owned");
        c.release();
        assert_eq!(p.free(), Ok(4));
    }

    #[test]
    fn threads_pass_every_entry_in_order() {
        let mut m = mem(16, u32::MAX - 1000);
        let mut p = Producer::new(ring(&mut m));
        let mut c = Consumer::new(ring(&mut m));
        const N: u64 = 200_000;
        std::thread::scope(|s| {
            s.spawn(move || {
                let mut i = 0;
                while i < N {
                    if p.push(&i).is_ok() {
                        i += 1;
                    } else {
                        std::thread::yield_now();
                    }
                }
            });
            let mut want = 0;
            while want < N {
                match c.pop() {
                    Ok(Some(v)) => {
                        assert_eq!(v, want);
                        want += 1;
                    }
                    Ok(None) => std::thread::yield_now(),
                    Err(e) => panic!("{e}"),
                }
            }
        });
    }
}
