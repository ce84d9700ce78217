//! The four AF_XDP rings behind a safe type: single-producer,
//! single-consumer rings of descriptors in memory shared with the kernel.
//!
//! Each ring is a power-of-two array of descriptors and two free-running
//! `u32` indices: the producer's (where the next entry goes) and the
//! consumer's (the next entry to take). Entries `consumer..producer` are
//! the consumer's to read; `producer..consumer + size` the producer's to
//! write. The side that writes entries publishes them with one `Release`
//! store of its index after writing a whole batch; the other side's
//! `Acquire` load of that index makes the entries visible. Each side keeps
//! a cached copy of the other's index and loads it again only when the
//! cached view runs out (rtrb's and libxdp's scheme), so a batch costs one
//! load and one store of shared memory, not one per entry.
//!
//! The kernel writes the other index, and the port treats it as input:
//! an index that claims more entries than the ring holds (the two indices
//! more than `size` apart, either way) is ignored and counted
//! ([`Producer::bad_indices`], [`Consumer::bad_indices`]), the cached view
//! stays as it was, and no entry outside the array is ever touched — every
//! position is masked.

use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::mem::{align_of, size_of};
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering, fence};

use super::sys::{RingOffset, XDP_RING_NEED_WAKEUP};

/// An anonymous or file mapping, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mmap {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is process-wide memory owned by this value; moving
// the owner to another thread moves nothing the kernel ties to a thread.
unsafe impl Send for Mmap {}

impl Mmap {
    /// `len` bytes of zeroed, private, anonymous memory (page aligned).
    pub(crate) fn anonymous(len: usize) -> io::Result<Mmap> {
        // SAFETY: a fresh anonymous mapping at an address the kernel picks
        // touches no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mmap { ptr: p.cast(), len })
    }

    /// `len` bytes of socket `fd` at `offset` (one of an AF_XDP socket's
    /// rings), shared with the kernel.
    pub(crate) fn socket(fd: &OwnedFd, len: usize, offset: libc::off_t) -> io::Result<Mmap> {
        // SAFETY: a new shared mapping of the socket at an address the
        // kernel picks touches no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mmap { ptr: p.cast(), len })
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are a mapping this value made and owns; every
        // pointer into it is held by owners that borrow or own this value,
        // so none is used after this.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// What keeps a ring's memory alive.
enum Backing {
    /// The kernel's ring, mapped from the socket.
    Map(#[allow(dead_code)] Mmap),
    /// A ring in this process's heap (the tests play the kernel on it).
    #[cfg(test)]
    Heap(#[allow(dead_code)] std::sync::Arc<HeapRing>),
}

/// The shared words and entries of a ring.
struct Shared<T> {
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: NonNull<AtomicU32>,
    descs: NonNull<T>,
    mask: u32,
    _keep: Backing,
    _t: PhantomData<T>,
}

// SAFETY: the pointers name memory owned by `_keep` (a mapping or a heap
// block), which moves with the value; the shared words are atomics, and
// entries are plain `Copy` descriptors read and written only by the side
// that owns them at the time (see the module docs).
unsafe impl<T: Send> Send for Shared<T> {}

impl<T: Copy> Shared<T> {
    /// Maps ring `pgoff` of socket `fd`, `size` entries at the offsets the
    /// kernel gave, checking those offsets lie inside the mapping.
    fn map(fd: &OwnedFd, off: &RingOffset, size: u32, pgoff: libc::off_t) -> io::Result<Shared<T>> {
        if !size.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ring size {size} is not a power of two"),
            ));
        }
        let bad = |what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the kernel's ring offsets put {what} outside the ring or misaligned"),
            )
        };
        let descs_len = (size as u64)
            .checked_mul(size_of::<T>() as u64)
            .and_then(|n| n.checked_add(off.desc))
            .ok_or_else(|| bad("the descriptors"))?;
        let len = usize::try_from(descs_len).map_err(|_| bad("the descriptors"))?;
        let word = |o: u64, what: &str| -> io::Result<usize> {
            let o = usize::try_from(o).map_err(|_| bad(what))?;
            if o % align_of::<AtomicU32>() != 0 || o.checked_add(4).is_none_or(|e| e > len) {
                return Err(bad(what));
            }
            Ok(o)
        };
        let p = word(off.producer, "the producer index")?;
        let c = word(off.consumer, "the consumer index")?;
        let f = word(off.flags, "the flags")?;
        let d = usize::try_from(off.desc).map_err(|_| bad("the descriptors"))?;
        if d % align_of::<T>() != 0 {
            return Err(bad("the descriptors"));
        }
        let map = Mmap::socket(fd, len, pgoff)?;
        let base = map.as_ptr();
        // SAFETY: every offset was checked above to leave its object (a
        // 4-byte word, or `size` entries) inside the `len`-byte mapping,
        // aligned for its type (the mapping is page aligned); the mapping
        // lives as long as `_keep` and is shared only with the kernel,
        // which follows the same ring protocol.
        unsafe {
            Shared::from_raw(
                base.add(p).cast(),
                base.add(c).cast(),
                base.add(f).cast(),
                base.add(d).cast(),
                size,
                Backing::Map(map),
            )
        }
    }

    /// # Safety
    /// The three words must be valid, aligned `AtomicU32`s and `descs`
    /// valid and aligned for `size` entries of `T`, all as long as `keep`
    /// lives; `size` is a power of two. The memory may be shared with one
    /// other party that follows the ring protocol.
    unsafe fn from_raw(
        producer: *mut AtomicU32,
        consumer: *mut AtomicU32,
        flags: *mut AtomicU32,
        descs: *mut T,
        size: u32,
        keep: Backing,
    ) -> io::Result<Shared<T>> {
        let nn = |p| NonNull::new(p).ok_or_else(|| io::Error::other("null ring pointer"));
        Ok(Shared {
            producer: nn(producer)?,
            consumer: nn(consumer)?,
            flags: nn(flags)?,
            descs: NonNull::new(descs).ok_or_else(|| io::Error::other("null ring pointer"))?,
            mask: size - 1,
            _keep: keep,
            _t: PhantomData,
        })
    }

    fn size(&self) -> u32 {
        self.mask + 1
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: valid and aligned while `self` lives (constructor).
        unsafe { self.producer.as_ref() }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as above.
        unsafe { self.consumer.as_ref() }
    }

    fn flags(&self) -> &AtomicU32 {
        // SAFETY: as above.
        unsafe { self.flags.as_ref() }
    }

    /// Writes entry `index` (masked: always inside the array).
    fn write(&self, index: u32, v: T) {
        let i = (index & self.mask) as usize;
        // SAFETY: `i ≤ mask < size`, inside the array (constructor). The
        // caller owns the slot (it lies in the producer's part), so the
        // other side neither reads nor writes it until it is published.
        unsafe { self.descs.as_ptr().add(i).write_volatile(v) }
    }

    /// Reads entry `index` (masked).
    fn read(&self, index: u32) -> T {
        let i = (index & self.mask) as usize;
        // SAFETY: as in `write`; the caller owns the slot (it lies in the
        // consumer's part, published by the `Acquire` load that showed
        // it), and `T` is plain data valid with any bits the kernel wrote.
        unsafe { self.descs.as_ptr().add(i).read_volatile() }
    }

    /// Whether the ring's owner set `XDP_RING_NEED_WAKEUP`. The full fence
    /// orders the index just published before this read, so a kernel that
    /// sets the flag and then looks at the ring cannot miss both.
    fn needs_wakeup(&self) -> bool {
        fence(Ordering::SeqCst);
        self.flags().load(Ordering::Acquire) & XDP_RING_NEED_WAKEUP != 0
    }
}

/// This process's end of a ring it fills (the fill and TX rings).
pub(crate) struct Producer<T> {
    ring: Shared<T>,
    /// The producer index as last published.
    published: u32,
    /// Entries written since (not yet visible to the consumer).
    pending: u32,
    /// The consumer index as last read.
    cached_consumer: u32,
    bad_indices: u64,
}

impl<T> fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("size", &(self.ring.mask + 1))
            .field("published", &self.published)
            .field("pending", &self.pending)
            .field("cached_consumer", &self.cached_consumer)
            .finish()
    }
}

impl<T: Copy> Producer<T> {
    pub(crate) fn map(
        fd: &OwnedFd,
        off: &RingOffset,
        size: u32,
        pgoff: libc::off_t,
    ) -> io::Result<Producer<T>> {
        Ok(Producer::new(Shared::map(fd, off, size, pgoff)?))
    }

    fn new(ring: Shared<T>) -> Producer<T> {
        let published = ring.producer().load(Ordering::Relaxed);
        let cached_consumer = ring.consumer().load(Ordering::Acquire);
        Producer {
            ring,
            published,
            pending: 0,
            cached_consumer,
            bad_indices: 0,
        }
    }

    /// Entries in flight: written (published or not) and not yet taken,
    /// as last seen.
    fn used(&self) -> u32 {
        self.published
            .wrapping_add(self.pending)
            .wrapping_sub(self.cached_consumer)
    }

    /// Free slots; reads the consumer's index again only when fewer than
    /// `want` are free by the cached view.
    pub(crate) fn free(&mut self, want: u32) -> u32 {
        let size = self.ring.size();
        let free = size - self.used().min(size);
        if free >= want {
            return free;
        }
        let c = self.ring.consumer().load(Ordering::Acquire);
        // The consumer may only move towards our published index: one
        // behind where it was, or past what we published, is not a ring.
        let ahead = self.published.wrapping_sub(c);
        let before = self.published.wrapping_sub(self.cached_consumer);
        if ahead > before {
            self.bad_indices += 1;
            return free;
        }
        self.cached_consumer = c;
        size - self.used().min(size)
    }

    /// Writes one entry; `false` when the ring is full. Not visible to the
    /// consumer until [`submit`](Self::submit).
    pub(crate) fn push(&mut self, v: T) -> bool {
        if self.free(1) == 0 {
            return false;
        }
        self.ring
            .write(self.published.wrapping_add(self.pending), v);
        self.pending += 1;
        true
    }

    /// Publishes what was pushed (one `Release` store); how many.
    pub(crate) fn submit(&mut self) -> u32 {
        let n = self.pending;
        if n > 0 {
            self.published = self.published.wrapping_add(n);
            self.pending = 0;
            self.ring
                .producer()
                .store(self.published, Ordering::Release);
        }
        n
    }

    /// Entries pushed and not yet published.
    pub(crate) fn pending(&self) -> u32 {
        self.pending
    }

    /// Published entries the consumer has not taken yet (reads its index).
    pub(crate) fn outstanding(&mut self) -> u32 {
        self.free(self.ring.size());
        self.published.wrapping_sub(self.cached_consumer)
    }

    /// Whether the kernel asks for a system call to look at this ring.
    pub(crate) fn needs_wakeup(&self) -> bool {
        self.ring.needs_wakeup()
    }

    /// Consumer indices ignored as impossible.
    pub(crate) fn bad_indices(&self) -> u64 {
        self.bad_indices
    }
}

/// This process's end of a ring the kernel fills (the RX and completion
/// rings).
pub(crate) struct Consumer<T> {
    ring: Shared<T>,
    /// The consumer index as last published.
    released: u32,
    /// Entries read since (not yet given back).
    taken: u32,
    /// The producer index as last read.
    cached_producer: u32,
    bad_indices: u64,
}

impl<T> fmt::Debug for Consumer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer")
            .field("size", &(self.ring.mask + 1))
            .field("released", &self.released)
            .field("taken", &self.taken)
            .field("cached_producer", &self.cached_producer)
            .finish()
    }
}

impl<T: Copy> Consumer<T> {
    pub(crate) fn map(
        fd: &OwnedFd,
        off: &RingOffset,
        size: u32,
        pgoff: libc::off_t,
    ) -> io::Result<Consumer<T>> {
        Ok(Consumer::new(Shared::map(fd, off, size, pgoff)?))
    }

    fn new(ring: Shared<T>) -> Consumer<T> {
        let released = ring.consumer().load(Ordering::Relaxed);
        Consumer {
            ring,
            released,
            taken: 0,
            cached_producer: released,
            bad_indices: 0,
        }
    }

    /// Entries ready to read; reads the producer's index again only when
    /// the cached view has none left.
    pub(crate) fn available(&mut self) -> u32 {
        let next = self.released.wrapping_add(self.taken);
        let avail = self.cached_producer.wrapping_sub(next);
        if avail > 0 {
            return avail;
        }
        let p = self.ring.producer().load(Ordering::Acquire);
        // The producer may hold at most `size` entries beyond our
        // released index, and never move back past what we have read.
        let beyond = p.wrapping_sub(self.released);
        if beyond > self.ring.size() || beyond < self.taken {
            self.bad_indices += 1;
            return 0;
        }
        self.cached_producer = p;
        p.wrapping_sub(next)
    }

    /// Takes the next entry, if one is ready. Its slot stays ours until
    /// [`release`](Self::release).
    pub(crate) fn pop(&mut self) -> Option<T> {
        if self.available() == 0 {
            return None;
        }
        let v = self.ring.read(self.released.wrapping_add(self.taken));
        self.taken += 1;
        Some(v)
    }

    /// Gives the taken slots back to the producer (one `Release` store).
    pub(crate) fn release(&mut self) {
        if self.taken > 0 {
            self.released = self.released.wrapping_add(self.taken);
            self.taken = 0;
            self.ring.consumer().store(self.released, Ordering::Release);
        }
    }

    /// Entries taken and not yet released.
    pub(crate) fn taken(&self) -> u32 {
        self.taken
    }

    /// Producer indices ignored as impossible.
    pub(crate) fn bad_indices(&self) -> u64 {
        self.bad_indices
    }
}

/// A ring in the heap, for tests: both ends in one process.
#[cfg(test)]
pub(crate) struct HeapRing {
    words: [AtomicU32; 3],
    descs: Box<[std::cell::UnsafeCell<u64>]>,
}

// SAFETY: the entries are only reached through the ring protocol, which
// gives each slot to one side at a time (with Acquire/Release on the
// indices in between).
#[cfg(test)]
unsafe impl Sync for HeapRing {}

/// A producer and a consumer over one heap ring of `size` `u64`s, the
/// indices starting at `start` (to cross the `u32` wrap). The tests play
/// the kernel with one end, or the port with both.
#[cfg(test)]
pub(crate) fn heap_pair(size: u32, start: u32) -> (Producer<u64>, Consumer<u64>) {
    let ring = std::sync::Arc::new(HeapRing {
        words: [
            AtomicU32::new(start),
            AtomicU32::new(start),
            AtomicU32::new(0),
        ],
        descs: (0..size).map(|_| std::cell::UnsafeCell::new(0)).collect(),
    });
    let end = |r: &std::sync::Arc<HeapRing>| {
        let p = r.words.as_ptr().cast_mut();
        // SAFETY: the words and entries live in the `Arc` the backing
        // keeps; `size` entries, aligned; `size` a power of two (tests).
        unsafe {
            Shared::from_raw(
                p,
                p.add(1),
                p.add(2),
                r.descs.as_ptr().cast_mut().cast::<u64>(),
                size,
                Backing::Heap(r.clone()),
            )
        }
        .map_err(|e| e.to_string())
    };
    match (end(&ring), end(&ring)) {
        (Ok(a), Ok(b)) => (Producer::new(a), Consumer::new(b)),
        _ => unreachable!("heap pointers are not null"),
    }
}

#[cfg(test)]
impl<T: Copy> Producer<T> {
    /// Sets the shared consumer index as a misbehaving kernel would.
    pub(crate) fn poke_consumer(&self, v: u32) {
        self.ring.consumer().store(v, Ordering::Release);
    }
}

#[cfg(test)]
impl<T: Copy> Consumer<T> {
    /// Sets the shared producer index as a misbehaving kernel would.
    pub(crate) fn poke_producer(&self, v: u32) {
        self.ring.producer().store(v, Ordering::Release);
    }
}
