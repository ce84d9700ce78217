//! Memory the engine sends from: regions that payload references name.
//!
//! Engine buffers are *owned* regions (built-in services send from them,
//! the host interface's copy rings live in them); each attached program
//! adds its data area as a *shared* region, so the stack sends straight
//! from the memory the program wrote.
//!
//! # The contract, and why it is sound
//!
//! A shared region is a `MAP_SHARED` mapping that the program may write at
//! any moment, from another process or, for the in-process API
//! ([`app`](crate::app)), from another thread through its own mapping. The
//! engine trusts nothing a program does: it may rewrite a zero-copy buffer
//! it handed over while a segment is being built from it. Rust's rules
//! forbid a `&[u8]` to such memory outright — a shared reference promises
//! the compiler that the bytes do not change while it lives, and the
//! compiler may use that promise (reading twice, or once, as it likes) — so
//! nothing here makes one, whatever the program promised:
//!
//! - [`Memory::get`] and [`Memory::region`] return [`Bytes`], a bounds-checked
//!   span borrowed from the `Memory`. For an owned region it lends the
//!   plain slice ([`Bytes::owned`]); for a shared one it holds only a
//!   pointer and a length.
//! - Bytes that only go to the kernel (the ports' `writev` and `sendmsg`
//!   iovecs) go as [`Bytes::as_ptr`] and [`Bytes::len`]: the kernel copies
//!   them, and a byte the program changes meanwhile changes only what is
//!   sent.
//! - Bytes Rust must read (the stack's software checksum and small-frame
//!   copy through [`Device::copy_payload`](softoe_stack::Device::copy_payload),
//!   the pcap writer, tests) are copied out with [`Bytes::copy_to`] into
//!   the caller's own buffer. For a shared region that copy is made of
//!   volatile reads, as the command ring reads its entries
//!   (`softoe_abi::ring`): each byte is read exactly once, by a load the
//!   compiler may neither repeat, drop nor assume the value of, and every
//!   bit pattern is a valid `u8`. Whatever the program does, the engine
//!   gets *some* bytes, and only the program's own data can be wrong.
//!   (An owned region's bytes the stack sums in place, through
//!   [`Device::payload_in_place`](softoe_stack::Device::payload_in_place):
//!   only the engine writes those.)
//!
//! - The one thing the engine writes there is a socket's receive ring
//!   ([`Memory::ring_write`], the stack's in-order bytes straight from the
//!   frame): only bytes past the ring's tail, which the program does not
//!   read until the session publishes a tail that covers them (a release
//!   store the program's acquire load pairs with), and before its head
//!   comes round, so the two sides never touch the same byte at once
//!   unless the program misreads its own ring, which can only garble its
//!   own bytes. Writes go by raw pointer; no reference is made.
//!
//! What keeps the pointer valid is the lifetime: a [`Bytes`] borrows the
//! `Memory`, and a region leaves only through [`Memory::remove`], which
//! takes it mutably; [`Memory::add_shared`]'s caller promises the mapping
//! lives until then.
//!
//! Volatile reads are Rust's means for memory that something outside the
//! program changes, and a program in another process is outside it. The
//! in-process program is a thread of this process: it writes its data area
//! through raw pointers into its own mapping of the memfd
//! (`softoe_abi::Region` never makes a slice of a region), so neither side
//! holds a reference, and a write racing one of the engine's reads gives
//! the engine stale or mixed bytes of that program's data and nothing
//! else. Strictly, Rust's memory model calls any race between two threads'
//! non-atomic accesses undefined, volatile or not; atomics would define it
//! only if the program's writes were atomic too, which the engine cannot
//! make a hostile program do. What volatile guarantees there is what it
//! guarantees against another process — one load per byte, no value
//! assumed, no reference — which is what the rings rely on too.

#![allow(unsafe_code)]

use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd};

use softoe_stack::{PayloadRef, RxRing};

#[derive(Debug)]
enum Backing {
    Owned(Box<[u8]>),
    /// A process's shared data area, mapped by its session.
    Shared {
        ptr: *mut u8,
        len: usize,
    },
}

impl Backing {
    fn bytes(&self) -> Bytes<'_> {
        match self {
            Backing::Owned(b) => Bytes {
                inner: Inner::Owned(b),
            },
            &Backing::Shared { ptr, len } => Bytes {
                inner: Inner::Shared {
                    ptr: ptr.cast_const(),
                    len,
                    _memory: PhantomData,
                },
            },
        }
    }
}

/// Bytes of a region of a [`Memory`], bounds-checked, valid while the memory
/// is borrowed. Engine memory lends its slice ([`owned`](Self::owned));
/// memory a program shares can only be copied out
/// ([`copy_to`](Self::copy_to)) or handed to a system call by address
/// ([`as_ptr`](Self::as_ptr)). See the [module docs](self).
#[derive(Clone, Copy)]
pub struct Bytes<'a> {
    inner: Inner<'a>,
}

#[derive(Clone, Copy)]
enum Inner<'a> {
    Owned(&'a [u8]),
    /// `len` bytes at `ptr`, readable (but not stable) while the `Memory`
    /// they came from is borrowed.
    Shared {
        ptr: *const u8,
        len: usize,
        _memory: PhantomData<&'a Memory>,
    },
}

impl std::fmt::Debug for Bytes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The contents are not read: a shared region's may be anything.
        f.debug_struct("Bytes")
            .field("len", &self.len())
            .field("shared", &self.is_shared())
            .finish()
    }
}

impl<'a> Bytes<'a> {
    /// Bytes in the span.
    pub fn len(&self) -> usize {
        match self.inner {
            Inner::Owned(b) => b.len(),
            Inner::Shared { len, .. } => len,
        }
    }

    /// Whether the span is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the bytes are a program's shared memory (which may change
    /// under the engine at any time).
    pub fn is_shared(&self) -> bool {
        matches!(self.inner, Inner::Shared { .. })
    }

    /// The first byte's address, for a system call that copies the bytes
    /// (an `iovec` for `writev` or `sendmsg`). Valid for reads of
    /// [`len`](Self::len) bytes while this span lives; never to be turned
    /// into a reference (see the [module docs](self)).
    pub fn as_ptr(&self) -> *const u8 {
        match self.inner {
            Inner::Owned(b) => b.as_ptr(),
            Inner::Shared { ptr, .. } => ptr,
        }
    }

    /// The bytes as a slice, if they are the engine's own (an owned
    /// region); `None` for shared memory.
    pub fn owned(&self) -> Option<&'a [u8]> {
        match self.inner {
            Inner::Owned(b) => Some(b),
            Inner::Shared { .. } => None,
        }
    }

    /// The `len` bytes from `start`, if they lie inside.
    pub fn get(&self, start: usize, len: usize) -> Option<Bytes<'a>> {
        let end = start.checked_add(len)?;
        let inner = match self.inner {
            Inner::Owned(b) => Inner::Owned(b.get(start..end)?),
            Inner::Shared { ptr, len: all, .. } => {
                if end > all {
                    return None;
                }
                Inner::Shared {
                    // `start + len ≤ all`: the result stays inside the span
                    // (`wrapping_add` only because no unsafe is needed).
                    ptr: ptr.wrapping_add(start),
                    len,
                    _memory: PhantomData,
                }
            }
        };
        Some(Bytes { inner })
    }

    /// Copies the bytes from `offset` into the front of `dst`; returns how
    /// many: `min(dst.len(), len - offset)`, 0 once `offset` reaches the
    /// end. Shared bytes are read with volatile loads, each once.
    pub fn copy_to(&self, offset: usize, dst: &mut [u8]) -> usize {
        let len = self.len();
        if offset >= len {
            return 0;
        }
        let n = dst.len().min(len - offset);
        let Some(dst) = dst.get_mut(..n) else {
            return 0;
        };
        match self.inner {
            Inner::Owned(b) => {
                if let Some(src) = b.get(offset..offset + n) {
                    dst.copy_from_slice(src);
                }
            }
            // SAFETY: `offset + n ≤ len` (checked above), so the source is
            // inside this span, which is valid for reads while it lives
            // (the `Memory` is borrowed and `add_shared`'s caller keeps the
            // mapping until `remove`). `dst` is the caller's exclusive
            // memory, and cannot overlap shared memory: nothing in this
            // process holds a reference into a data area.
            Inner::Shared { ptr, .. } => unsafe { volatile_copy(ptr.add(offset), dst) },
        }
        n
    }

    /// Appends every byte to `v` (for copies that outlive the call: the
    /// pcap writer, a port holding a frame back, tests).
    pub fn append_to(&self, v: &mut Vec<u8>) {
        match self.inner {
            Inner::Owned(b) => v.extend_from_slice(b),
            Inner::Shared { len, .. } => {
                let start = v.len();
                v.resize(start + len, 0);
                if let Some(dst) = v.get_mut(start..) {
                    self.copy_to(0, dst);
                }
            }
        }
    }

    /// The bytes, copied.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        self.append_to(&mut v);
        v
    }
}

/// Copies `dst.len()` bytes from `src` into `dst` with volatile reads, each
/// source byte read once: bytes up to an 8-byte boundary of `src`, then
/// aligned 8-byte words, then the last bytes.
///
/// # Safety
/// `src` must be valid for reads of `dst.len()` bytes, and must not overlap
/// `dst`. The bytes may change concurrently (that is the point).
unsafe fn volatile_copy(src: *const u8, dst: &mut [u8]) {
    // `align_offset` may answer "never" (usize::MAX): then every byte goes
    // through the byte loop, which is slower but still right.
    let head = src.align_offset(align_of::<u64>()).min(dst.len());
    let (head_dst, rest) = dst.split_at_mut(head);
    for (i, d) in head_dst.iter_mut().enumerate() {
        // SAFETY: `i < head ≤ dst.len()`: inside the source (caller).
        *d = unsafe { src.add(i).read_volatile() };
    }
    // SAFETY: `head ≤ dst.len()`: at most one past the source's end.
    let mut p = unsafe { src.add(head) };
    let mut words = rest.chunks_exact_mut(size_of::<u64>());
    for d in &mut words {
        // SAFETY: `p` is 8-aligned (`head` was `src`'s distance to an
        // 8-byte boundary, and `p` moves by 8) and the 8 bytes at `p` are
        // the source of `d`, inside it (caller). Any bits are a valid u64.
        let w = unsafe { p.cast::<u64>().read_volatile() };
        d.copy_from_slice(&w.to_ne_bytes());
        // SAFETY: stays inside the source or one past its end.
        p = unsafe { p.add(size_of::<u64>()) };
    }
    for (i, d) in words.into_remainder().iter_mut().enumerate() {
        // SAFETY: the remainder's source follows the words' and is inside
        // the source (caller).
        *d = unsafe { p.add(i).read_volatile() };
    }
}

/// A set of byte regions, addressed by [`PayloadRef`].
#[derive(Debug, Default)]
pub struct Memory {
    regions: Vec<Option<Backing>>,
    free: Vec<u32>,
}

// SAFETY: the only non-Send part is the pointer of a shared mapping, which
// is process-wide memory valid until `remove` (see `add_shared`) and is
// only ever read with volatile copies or by the kernel, from whichever
// thread owns the `Memory`.
unsafe impl Send for Memory {}

impl Memory {
    /// Empty.
    pub fn new() -> Memory {
        Memory::default()
    }

    fn insert(&mut self, b: Backing) -> u32 {
        if let Some(i) = self.free.pop() {
            self.regions[i as usize] = Some(b);
            return i;
        }
        self.regions.push(Some(b));
        (self.regions.len() - 1) as u32
    }

    /// Adds a region; returns its number.
    pub fn add(&mut self, bytes: Box<[u8]>) -> u32 {
        self.insert(Backing::Owned(bytes))
    }

    /// Adds `len` bytes of shared memory at `ptr` (a process's data area).
    /// The engine reads it only by volatile copies or through the kernel,
    /// and writes only receive rings past their published tail
    /// ([`ring_write`](Self::ring_write); see the [module docs](self)); the
    /// other side may write it at any time.
    ///
    /// # Safety
    /// `ptr` must stay valid for reads and writes of `len` bytes until
    /// [`remove`](Self::remove) is called with the returned number, and no
    /// Rust reference to those bytes may exist meanwhile (their writers use
    /// raw pointers, or live in another process).
    pub unsafe fn add_shared(&mut self, ptr: *mut u8, len: usize) -> u32 {
        self.insert(Backing::Shared { ptr, len })
    }

    /// Forgets a region (the stack must hold no reference into it); its
    /// number may be reused.
    pub fn remove(&mut self, i: u32) {
        if let Some(slot) = self.regions.get_mut(i as usize)
            && slot.take().is_some()
        {
            self.free.push(i);
        }
    }

    /// A region's bytes.
    pub fn region(&self, i: u32) -> Option<Bytes<'_>> {
        self.regions.get(i as usize)?.as_ref().map(Backing::bytes)
    }

    /// An owned region's bytes, mutably (for engine-side buffers such as
    /// echo rings; the caller must not overwrite bytes the stack still
    /// references). Shared regions are written only by their session.
    pub fn region_mut(&mut self, i: u32) -> Option<&mut [u8]> {
        match self.regions.get_mut(i as usize)?.as_mut()? {
            Backing::Owned(b) => Some(&mut b[..]),
            Backing::Shared { .. } => None,
        }
    }

    /// The bytes `r` names, if it lies inside its region.
    pub fn get(&self, r: &PayloadRef) -> Option<Bytes<'_>> {
        self.region(r.region)?
            .get(usize::try_from(r.offset).ok()?, r.len())
    }

    /// Copies the bytes of `r` from `offset` into the front of `dst`
    /// ([`Bytes::copy_to`]); 0 if `r` does not lie inside its region.
    pub fn copy(&self, r: &PayloadRef, offset: usize, dst: &mut [u8]) -> usize {
        self.get(r).map_or(0, |b| b.copy_to(offset, dst))
    }

    /// Writes `src` into the receive ring `ring` of a shared region at
    /// free-running position `pos` (wrapping at the ring's end): the stack's
    /// in-order bytes, straight into a program's socket ring
    /// ([`Device::deliver`](softoe_stack::Device::deliver)). `false` if the
    /// ring does not lie inside a shared region or `src` is longer than
    /// it. See the [module docs](self) for why writing there is sound.
    pub fn ring_write(&self, ring: &RxRing, pos: u64, src: &[u8]) -> bool {
        let Some(Some(Backing::Shared { ptr, len })) = self.regions.get(ring.region as usize)
        else {
            return false;
        };
        let (Ok(off), Ok(rlen)) = (usize::try_from(ring.offset), usize::try_from(ring.len)) else {
            return false;
        };
        if rlen == 0 || src.len() > rlen || off.checked_add(rlen).is_none_or(|end| end > *len) {
            return false;
        }
        let at = (pos % ring.len) as usize;
        let first = src.len().min(rlen - at);
        // SAFETY: `ptr..ptr + len` is a live shared mapping, valid for
        // writes (`add_shared`'s contract), and `off + rlen ≤ len`, so the
        // ring is inside it; `at + first ≤ rlen` and `src.len() - first ≤
        // at`, so both copies stay inside the ring. `src` is the engine's
        // own memory (a received frame), not the region. The program does
        // not read these bytes until the tail that covers them is
        // published, after this returns (module docs).
        unsafe {
            let base = ptr.add(off);
            std::ptr::copy_nonoverlapping(src.as_ptr(), base.add(at), first);
            std::ptr::copy_nonoverlapping(src.as_ptr().add(first), base, src.len() - first);
        }
        true
    }

    /// Writes `heads` (the engine's own bytes) and then the bytes of the
    /// payload references `refs`, in that order, to `fd` in one system
    /// call, `how` says which; the kernel copies them, so a shared region
    /// goes by address and length, never as a slice (module docs). Empty
    /// spans are left out. `InvalidData` if a reference lies outside its
    /// region or there are more than [`MAX_SPANS`] spans; the call's own
    /// error otherwise (`WouldBlock` when the device or socket is full).
    pub(crate) fn write_gathered(
        &self,
        fd: BorrowedFd<'_>,
        heads: &[&[u8]],
        refs: &[PayloadRef],
        how: Gather,
    ) -> io::Result<usize> {
        let invalid = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let mut iov = [empty; MAX_SPANS];
        let mut n = 0;
        let mut push = |ptr: *const u8, len: usize| -> io::Result<()> {
            if len == 0 {
                return Ok(());
            }
            let v = iov
                .get_mut(n)
                .ok_or_else(|| invalid("too many payload references"))?;
            *v = libc::iovec {
                iov_base: ptr.cast_mut().cast(),
                iov_len: len,
            };
            n += 1;
            Ok(())
        };
        for h in heads {
            push(h.as_ptr(), h.len())?;
        }
        for r in refs {
            let b = self
                .get(r)
                .ok_or_else(|| invalid("payload reference outside its region"))?;
            push(b.as_ptr(), b.len())?;
        }
        let iov = iov.get(..n).unwrap_or_default();
        let rc = match how {
            // SAFETY: `iov` describes `n` live spans: `heads`, borrowed for
            // the call, and payload `Bytes` bounds-checked by `get` and
            // readable while `self` is borrowed (`add_shared`'s contract);
            // writev only reads through them, and a program writing its
            // shared payload meanwhile changes only what is sent.
            Gather::Write => unsafe {
                libc::writev(fd.as_raw_fd(), iov.as_ptr(), n as libc::c_int)
            },
            Gather::SendDontWait => {
                // SAFETY: `msghdr` is plain old data; all zeroes (no name,
                // no control) is a valid value.
                let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
                msg.msg_iov = iov.as_ptr().cast_mut();
                msg.msg_iovlen = n as _;
                // SAFETY: `msg` names `iov`, the spans described above,
                // which sendmsg only reads; no name and no control.
                unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_DONTWAIT) }
            }
        };
        usize::try_from(rc).map_err(|_| io::Error::last_os_error())
    }

    /// Whether `r` lies inside its region (checked before the stack takes it).
    pub fn contains(&self, r: &PayloadRef) -> bool {
        self.get(r).is_some()
    }
}

/// How [`Memory::write_gathered`] hands its spans to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gather {
    /// `writev` (a TAP device, opened non-blocking).
    Write,
    /// `sendmsg` with `MSG_DONTWAIT` and no address (a bound socket).
    SendDontWait,
}

/// Most spans one [`Memory::write_gathered`] takes.
pub(crate) const MAX_SPANS: usize = 80;

/// A deterministic pseudo-random pattern for built-in services: any
/// misplaced byte shows.
pub fn pattern(len: usize, seed: u64) -> Box<[u8]> {
    let mut x = seed ^ 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use softoe_stack::{
        Device, DeviceCaps, Endpoint, Instant, RxMeta, Stack, StackConfig, TxBusy, TxFrame,
    };
    use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};

    use super::*;

    /// Memory another thread may write: a heap buffer only ever touched
    /// through raw pointers once shared.
    struct Scribbled {
        ptr: *mut u8,
        len: usize,
    }

    impl Scribbled {
        fn new(bytes: Vec<u8>) -> Scribbled {
            let len = bytes.len();
            Scribbled {
                ptr: Box::into_raw(bytes.into_boxed_slice()).cast(),
                len,
            }
        }
    }

    impl Drop for Scribbled {
        fn drop(&mut self) {
            // SAFETY: made by `Box::into_raw` of a `len`-byte slice in `new`,
            // and dropped once, after every user (tests join their threads
            // and remove the region first).
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr, self.len)) });
        }
    }

    /// The address of a [`Scribbled`], to move to a writer thread.
    #[derive(Clone, Copy)]
    struct Addr(*mut u8, usize);
    // SAFETY: the writer only writes through it with volatile stores while
    // the buffer lives (the test joins the writer before dropping it).
    unsafe impl Send for Addr {}

    /// A thread writing `a` and `b` alternately over every byte of a
    /// buffer, pass after pass, until dropped.
    struct Scribbler {
        stop: Arc<AtomicBool>,
        passes: Arc<AtomicU64>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl Scribbler {
        /// Starts writing at `at`; returns once the first pass is done, so
        /// that the writer is surely running.
        fn start(at: Addr, a: u8, b: u8) -> Scribbler {
            let stop = Arc::new(AtomicBool::new(false));
            let passes = Arc::new(AtomicU64::new(0));
            let (st, ps) = (stop.clone(), passes.clone());
            let thread = std::thread::spawn(move || {
                let at = at;
                let mut n = 0u64;
                while !st.load(Ordering::Relaxed) {
                    let v = if n.is_multiple_of(2) { a } else { b };
                    for i in 0..at.1 {
                        // SAFETY: `i < len` of a live buffer (see `Addr`).
                        unsafe { at.0.add(i).write_volatile(v) };
                    }
                    n += 1;
                    ps.store(n, Ordering::Relaxed);
                }
            });
            while passes.load(Ordering::Relaxed) == 0 {
                std::thread::yield_now();
            }
            Scribbler {
                stop,
                passes,
                thread: Some(thread),
            }
        }

        fn passes(&self) -> u64 {
            self.passes.load(Ordering::Relaxed)
        }
    }

    impl Drop for Scribbler {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    /// Runs `turn` at least `min` times and until the writer has made
    /// three more passes (a minute at most: a starved writer must not hang
    /// the test); returns the passes made meanwhile.
    fn while_writing(w: &Scribbler, min: usize, mut turn: impl FnMut(usize)) -> u64 {
        let first = w.passes();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut i = 0;
        while i < min || (w.passes() < first + 3 && std::time::Instant::now() < deadline) {
            turn(i);
            i += 1;
        }
        w.passes() - first
    }

    #[test]
    fn bounds_are_checked() {
        let mut m = Memory::new();
        let r = m.add(vec![1u8; 100].into_boxed_slice());
        assert_eq!(
            m.get(&PayloadRef::new(r, 90, 10)).map(|b| b.len()),
            Some(10)
        );
        assert!(m.get(&PayloadRef::new(r, 95, 10)).is_none());
        assert!(m.get(&PayloadRef::new(r, u64::MAX, 1)).is_none());
        assert!(m.get(&PayloadRef::new(9, 0, 1)).is_none());
        let s = Scribbled::new(vec![2u8; 100]);
        // SAFETY: `s` outlives `m`'s use of it (removed below).
        let sh = unsafe { m.add_shared(s.ptr, s.len) };
        assert_eq!(
            m.get(&PayloadRef::new(sh, 90, 10)).map(|b| b.len()),
            Some(10)
        );
        assert!(m.get(&PayloadRef::new(sh, 95, 10)).is_none());
        assert!(m.get(&PayloadRef::new(sh, u64::MAX, 1)).is_none());
        let mut dst = [0u8; 16];
        assert_eq!(m.copy(&PayloadRef::new(sh, 95, 10), 0, &mut dst), 0);
        assert_eq!(m.copy(&PayloadRef::new(sh, 90, 10), 4, &mut dst), 6);
        assert_eq!(m.copy(&PayloadRef::new(sh, 90, 10), 10, &mut dst), 0);
        assert_eq!(
            m.copy(&PayloadRef::new(sh, 90, 10), usize::MAX, &mut dst),
            0
        );
        assert_eq!(m.copy(&PayloadRef::new(sh, 0, 100), 0, &mut dst), 16);
        assert_eq!(m.copy(&PayloadRef::new(sh, 0, 100), 0, &mut []), 0);
        let b = m.region(sh).unwrap();
        assert!(b.get(100, 0).is_some_and(|b| b.is_empty()));
        assert!(b.get(101, 0).is_none());
        assert!(b.get(1, usize::MAX).is_none());
        m.remove(sh);
    }

    #[test]
    fn removed_regions_are_gone_and_reused() {
        let mut m = Memory::new();
        let a = m.add(vec![1u8; 10].into_boxed_slice());
        let s = Scribbled::new(vec![2u8; 10]);
        // SAFETY: `s` outlives its registration (removed below).
        let b = unsafe { m.add_shared(s.ptr, s.len) };
        let shared = m.region(b).unwrap();
        assert!(shared.is_shared() && shared.owned().is_none());
        assert_eq!(shared.to_vec(), [2u8; 10]);
        assert!(
            m.region_mut(b).is_none(),
            "shared regions are read-only here"
        );
        m.remove(b);
        assert!(m.region(b).is_none());
        m.remove(b);
        let c = m.add(vec![3u8; 1].into_boxed_slice());
        assert_eq!(c, b, "numbers are reused");
        assert_eq!(m.region(a).and_then(|b| b.owned()), Some(&[1u8; 10][..]));
    }

    #[test]
    fn shared_copies_match_owned_at_every_alignment_and_length() {
        let bytes = pattern(200, 7);
        let mut m = Memory::new();
        let owned = m.add(bytes.clone());
        let s = Scribbled::new(bytes.to_vec());
        // SAFETY: `s` outlives its registration (removed below).
        let shared = unsafe { m.add_shared(s.ptr, s.len) };
        for start in 0..24u64 {
            for len in [0u32, 1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 150] {
                for offset in [0usize, 1, 3, 8, 11] {
                    for room in [0usize, 1, 5, 8, 13, 200] {
                        let mut want = vec![0xeeu8; room];
                        let mut got = vec![0xeeu8; room];
                        let n = m.copy(&PayloadRef::new(owned, start, len), offset, &mut want);
                        let k = m.copy(&PayloadRef::new(shared, start, len), offset, &mut got);
                        assert_eq!((n, &got), (k, &want), "{start} {len} {offset} {room}");
                        assert_eq!(n, room.min((len as usize).saturating_sub(offset)));
                    }
                }
                let r = PayloadRef::new(shared, start, len);
                let mut v = vec![9u8];
                m.get(&r).unwrap().append_to(&mut v);
                let s = start as usize;
                assert_eq!(v[1..], bytes[s..s + len as usize]);
            }
        }
        m.remove(shared);
    }

    #[test]
    fn copies_of_memory_another_thread_writes_are_bounded_and_whole() {
        let mut m = Memory::new();
        let s = Scribbled::new(vec![0x11; 64 * 1024 + 3]);
        // SAFETY: `s` outlives its registration: the writer is joined and
        // the region removed before it drops.
        let r = unsafe { m.add_shared(s.ptr, s.len) };
        let w = Scribbler::start(Addr(s.ptr, s.len), 0x11, 0x22);
        let mut dst = vec![0u8; 4096 + 5];
        let passes = while_writing(&w, 2000, |round| {
            let off = (round * 37) % 4096;
            let p = PayloadRef::new(r, off as u64 + 1, 60 * 1024);
            dst.fill(0);
            let n = m.copy(&p, round % 9, &mut dst);
            assert_eq!(n, dst.len());
            // Every byte is one the writer wrote, stale or fresh, never
            // anything else.
            assert!(dst.iter().all(|&b| b == 0x11 || b == 0x22));
            // Bounded by the reference, not the destination: the rest of
            // `dst` is left alone.
            dst.fill(0);
            assert_eq!(m.copy(&p, 60 * 1024 - 3, &mut dst), 3);
            assert!(dst[3..].iter().all(|&b| b == 0));
        });
        drop(w);
        assert!(passes > 0);
        m.remove(r);
    }

    /// A port over a [`Memory`], as the engine's is: the stack reads
    /// payload through copies, frames are copied out whole.
    struct MemDev<'a> {
        mem: &'a Memory,
        out: Vec<Vec<u8>>,
    }

    impl Device for MemDev<'_> {
        fn copy_payload(&self, r: &PayloadRef, offset: usize, dst: &mut [u8]) -> usize {
            self.mem.copy(r, offset, dst)
        }
        fn payload_in_place(&self, r: &PayloadRef) -> Option<&[u8]> {
            self.mem.get(r)?.owned()
        }
        fn transmit(&mut self, f: &TxFrame<'_>) -> Result<(), TxBusy> {
            let mut bytes = f.header.to_vec();
            for r in f.payload {
                self.mem.get(r).unwrap().append_to(&mut bytes);
            }
            assert_eq!(bytes.len(), f.len());
            self.out.push(bytes);
            Ok(())
        }
    }

    #[test]
    fn the_stack_checksums_memory_another_thread_writes() {
        const LEN: usize = 256 * 1024;
        let cfg = |n: u8| {
            let mut c = StackConfig::new(
                EthernetAddress([2, 0, 0, 0, 0, n]),
                Ipv4Cidr::new(Ipv4Address::new(10, 0, 0, n), 24).unwrap(),
            );
            c.seed = u64::from(n);
            // The stack sums payload itself: no checksum offload, no TSO.
            c.caps = DeviceCaps::default();
            c
        };
        let mut a = Stack::new(cfg(1)).unwrap();
        let mut b = Stack::new(cfg(2)).unwrap();
        let mut m = Memory::new();
        let s = Scribbled::new(vec![0x33; LEN]);
        // SAFETY: `s` outlives its registration: the writer is joined and
        // the region removed before it drops.
        let r = unsafe { m.add_shared(s.ptr, s.len) };
        let other = Memory::new();
        let w = Scribbler::start(Addr(s.ptr, s.len), 0x33, 0x44);

        let server = Endpoint::new(Ipv4Address::new(10, 0, 0, 2), 80);
        let lst = b.tcp_listen(server, 8, None).unwrap();
        let mut now = Instant::from_millis(1);
        let conn = a.tcp_connect(now, server, None, None).unwrap();
        let mut sent = 0usize;
        let (mut frames, mut received) = (0usize, 0usize);
        let mut peer = None;
        let mut buf = vec![0u8; 64 * 1024];
        let (mut to_a, mut to_b) = (Vec::new(), Vec::new());
        let passes = while_writing(&w, 3000, |_| {
            // The same region, over and over.
            let at = sent % LEN;
            if let Ok(n) = a.tcp_send(conn, PayloadRef::new(r, at as u64, (LEN - at) as u32)) {
                sent += n;
            }
            // Frames sent while receiving cross the wire next turn.
            let mut da = MemDev {
                mem: &m,
                out: std::mem::take(&mut to_b),
            };
            let mut db = MemDev {
                mem: &other,
                out: std::mem::take(&mut to_a),
            };
            a.poll(now, &mut da);
            b.poll(now, &mut db);
            let (from_a, from_b) = (std::mem::take(&mut da.out), std::mem::take(&mut db.out));
            for f in from_a {
                frames += 1;
                b.receive(now, &f, RxMeta::default(), &mut db);
            }
            for f in from_b {
                a.receive(now, &f, RxMeta::default(), &mut da);
            }
            (to_b, to_a) = (da.out, db.out);
            if peer.is_none() {
                peer = b.tcp_accept(lst).unwrap();
            }
            if let Some(p) = peer {
                // What arrived intact is the writer's bytes.
                while let Ok(n) = b.tcp_recv(p, &mut buf)
                    && n > 0
                {
                    assert!(buf[..n].iter().all(|&x| x == 0x33 || x == 0x44));
                    received += n;
                }
            }
            now += std::time::Duration::from_millis(1);
        });
        drop(w);
        assert!(passes > 0);
        assert!(frames > 100 && received > 0, "{frames} {received}");
        drop(a);
        m.remove(r);
    }

    /// A gathered write sends the heads, then each reference's bytes (a
    /// shared region's by address), in order, leaving out empty spans; a
    /// reference outside its region or too many spans send nothing.
    #[test]
    fn a_gathered_write_sends_heads_then_payload_in_order() {
        use std::io::Read;
        use std::os::fd::AsFd;
        let mut m = Memory::new();
        let owned = m.add(b"0123456789".to_vec().into_boxed_slice());
        let s = Scribbled::new(b"abcdef".to_vec());
        // SAFETY: `s` lives until after `remove` below, touched meanwhile
        // only through this memory.
        let shared = unsafe { m.add_shared(s.ptr, s.len) };
        let (r, w) = rustix::pipe::pipe().unwrap();
        let refs = [
            PayloadRef::new(owned, 2, 3),
            PayloadRef::new(shared, 1, 0),
            PayloadRef::new(shared, 4, 2),
        ];
        let n = m
            .write_gathered(w.as_fd(), &[b"H", b"", b"dr"], &refs, Gather::Write)
            .unwrap();
        assert_eq!(n, 8);
        let mut got = [0u8; 8];
        std::fs::File::from(r.try_clone().unwrap())
            .read_exact(&mut got)
            .unwrap();
        assert_eq!(&got, b"Hdr234ef");

        let outside = [PayloadRef::new(shared, 5, 2)];
        let e = m
            .write_gathered(w.as_fd(), &[b"x"], &outside, Gather::Write)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let many = vec![PayloadRef::new(owned, 0, 1); MAX_SPANS];
        let e = m
            .write_gathered(w.as_fd(), &[b"x"], &many, Gather::Write)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let e = m
            .write_gathered(w.as_fd(), &[b"x"], &[], Gather::SendDontWait)
            .unwrap_err();
        assert_eq!(
            e.raw_os_error(),
            Some(libc::ENOTSOCK),
            "a pipe is no socket"
        );
        rustix::fs::fcntl_setfl(&r, rustix::fs::OFlags::NONBLOCK).unwrap();
        let mut rest = [0u8; 4];
        assert!(
            std::fs::File::from(r).read(&mut rest).is_err(),
            "nothing else was sent"
        );
        m.remove(shared);
    }
}
