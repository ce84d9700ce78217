//! The region: its header, where everything lies, and a view over it.

use core::mem::{offset_of, size_of};
use core::ptr::addr_of_mut;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::record::{Command, Completion};
use crate::request::RingSpan;
use crate::ring::{Consumer, Producer, RingPtrs};
use crate::slot::{SlotView, SockSlot};

/// The first eight bytes of every region: `b"softoe\0\x01"` read as a
/// little-endian `u64`.
pub const MAGIC: u64 = 0x0100_656f_7466_6f73;
/// The ABI version this crate speaks. A program refuses a region whose
/// version differs.
pub const VERSION: u32 = 5;

/// The engine is polling its rings (`RegionHeader::engine_state`).
pub const ENGINE_POLLING: u32 = 0;
/// The engine sleeps: ring its doorbell after posting commands.
pub const ENGINE_SLEEPING: u32 = 1;
/// The engine has closed this session (the program broke the protocol or
/// the engine is stopping): every socket is gone.
pub const SESSION_CLOSED: u32 = 2;

const LINE: usize = 128;
const PAGE: u64 = 4096;

/// The header at offset 0 of a region, 1 KiB. Line 0 is written once by the
/// engine when it creates the region; every other line holds one word with
/// one writer, alone on its 128-byte line so the two sides do not share
/// cache lines (x86-64 prefetches line pairs).
#[repr(C)]
#[derive(Debug)]
pub struct RegionHeader {
    /// [`MAGIC`].
    pub magic: u64,
    /// [`VERSION`].
    pub version: u32,
    /// `size_of::<RegionHeader>()`.
    pub header_len: u32,
    /// Bytes in the whole region.
    pub region_len: u64,
    /// Offset of the command ring's entries.
    pub cmd_offset: u64,
    /// Offset of the completion ring's entries.
    pub cmp_offset: u64,
    /// Offset of the socket table.
    pub socks_offset: u64,
    /// Offset of the data area.
    pub data_offset: u64,
    /// Bytes in the data area.
    pub data_len: u64,
    /// Entries in the command ring (a power of two).
    pub cmd_entries: u32,
    /// Entries in the completion ring (a power of two).
    pub cmp_entries: u32,
    /// Entries in the socket table: socket ids are `0..socks_entries`.
    pub socks_entries: u32,
    /// The engine's number for this session (as `softoe stat` shows it).
    pub session: u32,
    /// Unused (zero). ABI 3 kept a session secret here that let whoever
    /// read the region adopt its sockets; authority over a socket is now
    /// holding its descriptor ([`BellOp::Claim`](crate::BellOp::Claim)).
    pub _reserved: [u64; 2],
    /// Offset of the changed-sockets bitmap: one bit per socket id, set by
    /// the engine whenever it bumps that slot's `seq`, taken (swapped to
    /// zero) by the program's selector — readiness for many sockets at a
    /// cost that grows with the sockets that changed, not with those open.
    pub changed_offset: u64,
    /// The name of the interface the engine's port is on, NUL-padded (all
    /// zero: not told): what `SO_BINDTODEVICE` may name. Written once by
    /// the engine before the program sees the region, as two words.
    pub device: [u8; 16],
    /// The congestion control algorithm the engine gives a TCP socket that
    /// asks for none ([`CONGESTION_RENO`](crate::CONGESTION_RENO),
    /// [`CONGESTION_CUBIC`](crate::CONGESTION_CUBIC); 0: not told).
    /// Written once by the engine before the program sees the region.
    pub congestion: u32,
    _pad0: [u8; 4],
    /// Commands the engine has consumed (engine writes).
    pub cmd_head: u32,
    _pad1: [u8; 124],
    /// Commands the program has posted (program writes).
    pub cmd_tail: u32,
    _pad2: [u8; 124],
    /// Completions the program has consumed (program writes).
    pub cmp_head: u32,
    _pad3: [u8; 124],
    /// Completions the engine has posted (engine writes).
    pub cmp_tail: u32,
    _pad4: [u8; 124],
    /// [`ENGINE_POLLING`], [`ENGINE_SLEEPING`] or [`SESSION_CLOSED`]
    /// (engine writes).
    pub engine_state: u32,
    _pad5: [u8; 124],
    /// How many of the program's threads sleep waiting for the engine; the
    /// engine rings the program's doorbell only when this is non-zero
    /// (program writes).
    pub app_waiting: u32,
    _pad6a: u32,
    /// Waiter doorbells armed, one bit per index registered with a
    /// [`Bell`](crate::Bell) message: the engine rings each armed bell (and
    /// the session's own doorbell only for waiters without one) when it
    /// rings the program (program writes).
    pub bells_armed: u64,
    _pad6: [u8; 112],
    /// Bumped by the engine after every batch of completions or socket
    /// events; a futex word a program may wait on (engine writes).
    pub event_seq: u32,
    _pad7: [u8; 124],
}

const _: () = {
    assert!(size_of::<RegionHeader>() == 8 * LINE);
    assert!(offset_of!(RegionHeader, _reserved) == 80);
    assert!(offset_of!(RegionHeader, changed_offset) == 96);
    assert!(offset_of!(RegionHeader, device) == 104);
    assert!(offset_of!(RegionHeader, congestion) == 120);
    assert!(offset_of!(RegionHeader, cmd_head) == LINE);
    assert!(offset_of!(RegionHeader, cmd_tail) == 2 * LINE);
    assert!(offset_of!(RegionHeader, cmp_head) == 3 * LINE);
    assert!(offset_of!(RegionHeader, cmp_tail) == 4 * LINE);
    assert!(offset_of!(RegionHeader, engine_state) == 5 * LINE);
    assert!(offset_of!(RegionHeader, app_waiting) == 6 * LINE);
    assert!(offset_of!(RegionHeader, bells_armed) == 6 * LINE + 8);
    assert!(offset_of!(RegionHeader, event_seq) == 7 * LINE);
};

/// Why a layout or a region is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayoutError {
    /// A ring's entry count is not a power of two in `2..=65536`.
    RingSize,
    /// The socket table is empty or holds more than 65536 slots.
    TableSize,
    /// The data area is larger than 64 GiB.
    DataSize,
    /// The region does not start with [`MAGIC`].
    Magic,
    /// The region speaks another ABI version (the one it has).
    Version(u32),
    /// The header's sizes and offsets do not describe a region of this
    /// length.
    Geometry,
}

impl core::fmt::Display for LayoutError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LayoutError::RingSize => f.write_str("ring entries must be a power of two, 2..=65536"),
            LayoutError::TableSize => f.write_str("socket table must hold 1..=65536 slots"),
            LayoutError::DataSize => f.write_str("data area larger than 64 GiB"),
            LayoutError::Magic => f.write_str("not a softoe region (bad magic)"),
            LayoutError::Version(v) => {
                write!(f, "softoe ABI version {v}, this program speaks {VERSION}")
            }
            LayoutError::Geometry => f.write_str("region header does not match its length"),
        }
    }
}

/// Where everything lies in a region. The engine computes it once and keeps
/// its own copy; it never trusts the header again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    cmd_entries: u32,
    cmp_entries: u32,
    socks: u32,
    cmd_offset: u64,
    cmp_offset: u64,
    socks_offset: u64,
    changed_offset: u64,
    data_offset: u64,
    data_len: u64,
    region_len: u64,
}

fn ring_ok(n: u32) -> bool {
    n.is_power_of_two() && (2..=65_536).contains(&n)
}

fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

impl Layout {
    /// A layout with these ring sizes, socket slots and data bytes. Sections
    /// start on page boundaries; the data area is rounded up to whole pages.
    pub fn new(
        cmd_entries: u32,
        cmp_entries: u32,
        socks: u32,
        data_len: u64,
    ) -> Result<Layout, LayoutError> {
        if !ring_ok(cmd_entries) || !ring_ok(cmp_entries) {
            return Err(LayoutError::RingSize);
        }
        if !(1..=65_536).contains(&socks) {
            return Err(LayoutError::TableSize);
        }
        if data_len > 64 << 30 {
            return Err(LayoutError::DataSize);
        }
        let cmd_offset = PAGE;
        let cmp_offset = round_up(
            cmd_offset + u64::from(cmd_entries) * size_of::<Command>() as u64,
            PAGE,
        );
        let socks_offset = round_up(
            cmp_offset + u64::from(cmp_entries) * size_of::<Completion>() as u64,
            PAGE,
        );
        let changed_offset = round_up(
            socks_offset + u64::from(socks) * size_of::<SockSlot>() as u64,
            PAGE,
        );
        let data_offset = round_up(changed_offset + u64::from(socks.div_ceil(64)) * 8, PAGE);
        let data_len = round_up(data_len, PAGE);
        Ok(Layout {
            cmd_entries,
            cmp_entries,
            socks,
            cmd_offset,
            cmp_offset,
            socks_offset,
            changed_offset,
            data_offset,
            data_len,
            region_len: data_offset + data_len,
        })
    }

    /// The layout a header describes, if it is self-consistent and fits in
    /// `len` bytes.
    pub fn from_header(h: &RegionHeader, len: u64) -> Result<Layout, LayoutError> {
        if h.magic != MAGIC {
            return Err(LayoutError::Magic);
        }
        if h.version != VERSION {
            return Err(LayoutError::Version(h.version));
        }
        let l = Layout::new(h.cmd_entries, h.cmp_entries, h.socks_entries, h.data_len)?;
        let same = h.header_len as usize == size_of::<RegionHeader>()
            && h.cmd_offset == l.cmd_offset
            && h.cmp_offset == l.cmp_offset
            && h.socks_offset == l.socks_offset
            && h.changed_offset == l.changed_offset
            && h.data_offset == l.data_offset
            && h.data_len == l.data_len
            && h.region_len == l.region_len
            && l.region_len <= len;
        if same {
            Ok(l)
        } else {
            Err(LayoutError::Geometry)
        }
    }

    /// Bytes in the whole region.
    pub fn region_len(&self) -> u64 {
        self.region_len
    }

    /// Entries in the command ring.
    pub fn cmd_entries(&self) -> u32 {
        self.cmd_entries
    }

    /// Entries in the completion ring.
    pub fn cmp_entries(&self) -> u32 {
        self.cmp_entries
    }

    /// Socket slots.
    pub fn socks(&self) -> u32 {
        self.socks
    }

    /// Offset of the data area in the region.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Bytes in the data area.
    pub fn data_len(&self) -> u64 {
        self.data_len
    }

    /// Whether `[offset, offset + len)` lies inside the data area (offsets
    /// are relative to the data area's start).
    pub fn data_contains(&self, offset: u64, len: u64) -> bool {
        offset
            .checked_add(len)
            .is_some_and(|end| end <= self.data_len)
    }
}

/// A view of a mapped region: raw pointers and the trusted [`Layout`].
///
/// Both sides hold one. Every shared word is read and written atomically;
/// ring entries and data bytes are copied in and out, never borrowed, so a
/// peer scribbling on them concurrently cannot break this side's memory
/// safety — only its own data.
#[derive(Clone, Copy, Debug)]
pub struct Region {
    base: *mut u8,
    layout: Layout,
}

// SAFETY: a `Region` is a pair of a pointer to shared memory and a layout.
// All access through it is atomic (indices, slot words) or by raw copies
// (records, data bytes), which is exactly what sharing the region with
// another process already requires; threads are no different.
unsafe impl Send for Region {}
// SAFETY: as for `Send`: no method hands out a reference into the region.
unsafe impl Sync for Region {}

impl Region {
    /// Writes a fresh header for `layout` at `base` (the engine, once, on a
    /// zeroed region).
    ///
    /// # Safety
    /// `base` must be valid for reads and writes of `layout.region_len()`
    /// bytes, aligned to 16, for as long as this `Region` and its copies are
    /// used; no one else may be using it yet.
    pub unsafe fn init(base: *mut u8, layout: Layout, session: u32) -> Region {
        let h = base.cast::<RegionHeader>();
        // SAFETY: the caller guarantees `base` is valid and aligned for the
        // header (1 KiB ≤ region), and that nobody else touches it yet.
        unsafe {
            core::ptr::write_bytes(base, 0, size_of::<RegionHeader>());
            (*h).magic = MAGIC;
            (*h).version = VERSION;
            (*h).header_len = size_of::<RegionHeader>() as u32;
            (*h).region_len = layout.region_len;
            (*h).cmd_offset = layout.cmd_offset;
            (*h).cmp_offset = layout.cmp_offset;
            (*h).socks_offset = layout.socks_offset;
            (*h).changed_offset = layout.changed_offset;
            (*h).data_offset = layout.data_offset;
            (*h).data_len = layout.data_len;
            (*h).cmd_entries = layout.cmd_entries;
            (*h).cmp_entries = layout.cmp_entries;
            (*h).socks_entries = layout.socks;
            (*h).session = session;
        }
        Region { base, layout }
    }

    /// A view of a region someone else created (the program, after the
    /// engine sent it the memfd), if its header is valid for `len` bytes.
    ///
    /// # Safety
    /// `base` must be valid for reads and writes of `len` bytes, aligned to
    /// 16, for as long as this `Region` and its copies are used.
    pub unsafe fn attach(base: *mut u8, len: u64) -> Result<Region, LayoutError> {
        if len < size_of::<RegionHeader>() as u64 {
            return Err(LayoutError::Geometry);
        }
        // SAFETY: `base` is valid for `len` ≥ header bytes; the header's line
        // 0 is written once by the engine before the region is shared.
        let h = unsafe { core::ptr::read(base.cast::<RegionHeader>()) };
        let layout = Layout::from_header(&h, len)?;
        Ok(Region { base, layout })
    }

    /// The first byte of the region (the header).
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// The trusted layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The session number the engine gave this region.
    pub fn session(&self) -> u32 {
        // SAFETY: line 0 is immutable after `init`; `base` is valid.
        unsafe { core::ptr::read_volatile(addr_of_mut!((*self.header()).session)) }
    }

    fn header(&self) -> *mut RegionHeader {
        self.base.cast()
    }

    fn word(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: `offset` is one of the header's word offsets (checked by
        // the const asserts above), inside the region and 4-aligned; the
        // word is only ever accessed atomically.
        unsafe { AtomicU32::from_ptr(self.base.add(offset).cast()) }
    }

    fn ring<T: Copy>(&self, head: usize, tail: usize, offset: u64, entries: u32) -> RingPtrs<T> {
        RingPtrs {
            head: core::ptr::from_ref(self.word(head)),
            tail: core::ptr::from_ref(self.word(tail)),
            // SAFETY: the layout puts `entries` records at `offset`, inside
            // the region.
            entries: unsafe { self.base.add(offset as usize).cast() },
            size: entries,
        }
    }

    /// The command ring's producing side (the program).
    pub fn command_producer(&self) -> Producer<Command> {
        Producer::new(self.ring(
            offset_of!(RegionHeader, cmd_head),
            offset_of!(RegionHeader, cmd_tail),
            self.layout.cmd_offset,
            self.layout.cmd_entries,
        ))
    }

    /// The command ring's consuming side (the engine).
    pub fn command_consumer(&self) -> Consumer<Command> {
        Consumer::new(self.ring(
            offset_of!(RegionHeader, cmd_head),
            offset_of!(RegionHeader, cmd_tail),
            self.layout.cmd_offset,
            self.layout.cmd_entries,
        ))
    }

    /// The completion ring's producing side (the engine).
    pub fn completion_producer(&self) -> Producer<Completion> {
        Producer::new(self.ring(
            offset_of!(RegionHeader, cmp_head),
            offset_of!(RegionHeader, cmp_tail),
            self.layout.cmp_offset,
            self.layout.cmp_entries,
        ))
    }

    /// The completion ring's consuming side (the program).
    pub fn completion_consumer(&self) -> Consumer<Completion> {
        Consumer::new(self.ring(
            offset_of!(RegionHeader, cmp_head),
            offset_of!(RegionHeader, cmp_tail),
            self.layout.cmp_offset,
            self.layout.cmp_entries,
        ))
    }

    /// Socket slot `id`, if the table has it.
    pub fn slot(&self, id: u32) -> Option<SlotView<'_>> {
        if id >= self.layout.socks {
            return None;
        }
        let off = self.layout.socks_offset + u64::from(id) * size_of::<SockSlot>() as u64;
        // SAFETY: `id` is inside the table, which the layout places inside
        // the region; slots are 128-aligned (page-aligned table, 128-byte
        // slots). The bitmap word for `id` is inside the changed section.
        Some(unsafe {
            SlotView::new(
                self.base.add(off as usize).cast(),
                core::ptr::from_ref(self.changed_word(id as usize / 64)),
                1 << (id % 64),
            )
        })
    }

    fn changed_word(&self, i: usize) -> &AtomicU64 {
        // SAFETY: callers pass `i < socks.div_ceil(64)`: the word lies in
        // the changed section (page-aligned, so 8-aligned), inside the
        // region, and is only accessed atomically.
        unsafe {
            AtomicU64::from_ptr(
                self.base
                    .add(self.layout.changed_offset as usize + 8 * i)
                    .cast(),
            )
        }
    }

    /// Takes every socket id whose slot changed ([`SlotView::bump_seq`])
    /// since the last call and calls `f` with each: the bits are swapped
    /// to zero, so each change is reported to one taker once. Costs one
    /// load per 64 sockets of the table when little changed. Read a
    /// socket's state *after* taking its bit: a change published after
    /// that sets the bit again.
    pub fn take_changed(&self, mut f: impl FnMut(u32)) {
        for i in 0..self.layout.socks.div_ceil(64) as usize {
            let w = self.changed_word(i);
            if w.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut bits = w.swap(0, Ordering::Acquire);
            while bits != 0 {
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                f(i as u32 * 64 + b);
            }
        }
    }

    /// A pointer to `len` bytes at `offset` in the data area, if they lie
    /// inside it. The bytes may change under the caller (the other side
    /// shares them): copy them, or hand the pointer to a system call.
    pub fn data_ptr(&self, offset: u64, len: u64) -> Option<*mut u8> {
        if !self.layout.data_contains(offset, len) {
            return None;
        }
        // SAFETY: checked just above to lie inside the data area, which lies
        // inside the region.
        Some(unsafe { self.base.add((self.layout.data_offset + offset) as usize) })
    }

    /// Copies `src` into `ring` at free-running position `pos` (wrapping at
    /// the ring's end). `false` if the ring is not inside the data area or
    /// `src` is longer than the ring.
    pub fn ring_write(&self, ring: RingSpan, pos: u64, src: &[u8]) -> bool {
        let n = src.len() as u64;
        let Some(base) = self.data_ptr(ring.offset, ring.len) else {
            return false;
        };
        if ring.len == 0 || n > ring.len {
            return false;
        }
        let at = pos % ring.len;
        let first = n.min(ring.len - at) as usize;
        // SAFETY: `base..base + ring.len` is inside the data area (checked
        // by `data_ptr`); `at + first ≤ ring.len` and `n - first ≤ at`, so
        // both copies stay inside the ring. `src` is our own memory and
        // does not overlap the ring (this crate never hands out slices of
        // a region).
        unsafe {
            core::ptr::copy_nonoverlapping(src.as_ptr(), base.add(at as usize), first);
            core::ptr::copy_nonoverlapping(src.as_ptr().add(first), base, src.len() - first);
        }
        true
    }

    /// Copies `dst.len()` bytes out of `ring` from free-running position
    /// `pos`; `false` as for [`ring_write`](Self::ring_write).
    pub fn ring_read(&self, ring: RingSpan, pos: u64, dst: &mut [u8]) -> bool {
        let n = dst.len() as u64;
        let Some(base) = self.data_ptr(ring.offset, ring.len) else {
            return false;
        };
        if ring.len == 0 || n > ring.len {
            return false;
        }
        let at = pos % ring.len;
        let first = n.min(ring.len - at) as usize;
        // SAFETY: as in `ring_write`, with the copies reversed; `dst` is the
        // caller's exclusive memory.
        unsafe {
            core::ptr::copy_nonoverlapping(base.add(at as usize), dst.as_mut_ptr(), first);
            core::ptr::copy_nonoverlapping(base, dst.as_mut_ptr().add(first), dst.len() - first);
        }
        true
    }

    /// The engine's state word ([`ENGINE_POLLING`], …).
    pub fn engine_state(&self) -> &AtomicU32 {
        self.word(offset_of!(RegionHeader, engine_state))
    }

    /// The number of program threads waiting for the engine.
    pub fn app_waiting(&self) -> &AtomicU32 {
        self.word(offset_of!(RegionHeader, app_waiting))
    }

    /// The name of the interface the engine's port is on (empty: the
    /// engine was not told), NUL-padded.
    pub fn device(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        for i in 0..2 {
            let w = self.device_word(i).load(Ordering::Acquire);
            out[8 * i..8 * i + 8].copy_from_slice(&w.to_ne_bytes());
        }
        out
    }

    /// Writes the interface's name (the engine, before the program sees
    /// the region): at most 15 bytes are kept, NUL-padded.
    pub fn set_device(&self, name: &[u8]) {
        let mut raw = [0u8; 16];
        let n = name.len().min(15);
        raw[..n].copy_from_slice(&name[..n]);
        for i in 0..2 {
            let mut w = [0u8; 8];
            w.copy_from_slice(&raw[8 * i..8 * i + 8]);
            self.device_word(i)
                .store(u64::from_ne_bytes(w), Ordering::Release);
        }
    }

    /// The engine's default congestion control algorithm (0: not told).
    pub fn congestion(&self) -> u32 {
        self.word(offset_of!(RegionHeader, congestion))
            .load(Ordering::Acquire)
    }

    /// Writes the default algorithm (the engine, before the program sees
    /// the region).
    pub fn set_congestion(&self, c: u32) {
        self.word(offset_of!(RegionHeader, congestion))
            .store(c, Ordering::Release);
    }

    fn device_word(&self, i: usize) -> &AtomicU64 {
        // SAFETY: `device` is 16 bytes at offset 104 of line 0 (checked by
        // the const asserts), 8-aligned, accessed only as these two atomic
        // words.
        unsafe {
            AtomicU64::from_ptr(
                self.base
                    .add(offset_of!(RegionHeader, device) + 8 * (i & 1))
                    .cast(),
            )
        }
    }

    /// The waiter doorbells armed (bit `i`: the bell registered as `i`).
    pub fn bells_armed(&self) -> &AtomicU64 {
        // SAFETY: `bells_armed` is 8-aligned inside the header (const
        // assert above), inside the region, and only accessed atomically.
        unsafe { AtomicU64::from_ptr(self.base.add(offset_of!(RegionHeader, bells_armed)).cast()) }
    }

    /// The event sequence: bumped by the engine after each batch of
    /// completions and socket events; a futex word.
    pub fn event_seq(&self) -> &AtomicU32 {
        self.word(offset_of!(RegionHeader, event_seq))
    }

    /// Bumps the event sequence (engine).
    pub fn bump_events(&self) -> u32 {
        self.event_seq().fetch_add(1, Ordering::Release)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;
    use std::vec::Vec;

    #[test]
    fn magic_spells_softoe() {
        assert_eq!(MAGIC.to_le_bytes(), *b"softoe\0\x01");
    }

    #[test]
    fn sections_are_page_aligned_and_disjoint() {
        let l = Layout::new(256, 1024, 4096, 10_000).unwrap();
        assert_eq!(l.cmd_offset % PAGE, 0);
        assert!(l.cmp_offset >= l.cmd_offset + 256 * 64);
        assert!(l.socks_offset >= l.cmp_offset + 1024 * 32);
        assert!(l.changed_offset >= l.socks_offset + 4096 * 128);
        assert_eq!(l.changed_offset % PAGE, 0);
        assert!(l.data_offset >= l.changed_offset + 4096 / 8);
        assert_eq!(l.data_len, 3 * PAGE);
        assert_eq!(l.region_len, l.data_offset + l.data_len);
    }

    #[test]
    fn bad_layouts_are_refused() {
        assert_eq!(Layout::new(3, 4, 1, 0), Err(LayoutError::RingSize));
        assert_eq!(Layout::new(4, 1 << 17, 1, 0), Err(LayoutError::RingSize));
        assert_eq!(Layout::new(4, 4, 0, 0), Err(LayoutError::TableSize));
        assert_eq!(Layout::new(4, 4, 1, 1 << 40), Err(LayoutError::DataSize));
    }

    #[test]
    fn attach_checks_the_header() {
        let l = Layout::new(8, 8, 4, 4096).unwrap();
        let mut mem = vec![0u128; l.region_len() as usize / 16];
        let base = mem.as_mut_ptr().cast::<u8>();
        // SAFETY: `mem` is large enough, 16-aligned and outlives the views.
        unsafe {
            assert_eq!(
                Region::attach(base, l.region_len()).err(),
                Some(LayoutError::Magic)
            );
            let r = Region::init(base, l, 9);
            assert_eq!(r.session(), 9);
            let a = Region::attach(base, l.region_len()).unwrap();
            assert_eq!(*a.layout(), l);
            // Shorter than the header says.
            assert_eq!(
                Region::attach(base, l.region_len() - 1).err(),
                Some(LayoutError::Geometry)
            );
            // A tampered offset.
            (*base.cast::<RegionHeader>()).data_offset += 8;
            assert_eq!(
                Region::attach(base, l.region_len()).err(),
                Some(LayoutError::Geometry)
            );
            (*base.cast::<RegionHeader>()).version = 7;
            assert_eq!(
                Region::attach(base, l.region_len()).err(),
                Some(LayoutError::Version(7))
            );
        }
    }

    #[test]
    fn the_engine_tells_the_program_its_device_and_algorithm() {
        let l = Layout::new(8, 8, 4, 4096).unwrap();
        let mut mem = vec![0u128; l.region_len() as usize / 16];
        let base = mem.as_mut_ptr().cast::<u8>();
        // SAFETY: `mem` is large enough, 16-aligned and outlives the views.
        unsafe {
            let r = Region::init(base, l, 1);
            assert_eq!(r.device(), [0; 16], "not told: empty");
            assert_eq!(r.congestion(), 0);
            r.set_congestion(crate::CONGESTION_RENO);
            r.set_device(b"sotap12");
            let a = Region::attach(base, l.region_len()).unwrap();
            assert_eq!(&a.device()[..8], b"sotap12\0");
            assert_eq!(a.congestion(), crate::CONGESTION_RENO);
            // Longer than an interface name: cut to 15 bytes and a NUL.
            r.set_device(b"a-name-far-too-long");
            assert_eq!(&a.device(), b"a-name-far-too-\0");
        }
    }

    #[test]
    fn changed_sockets_are_taken_once() {
        let l = Layout::new(8, 8, 200, 4096).unwrap();
        let mut mem = vec![0u128; l.region_len() as usize / 16];
        // SAFETY: `mem` is large enough, 16-aligned and outlives the view.
        let r = unsafe { Region::init(mem.as_mut_ptr().cast(), l, 1) };
        let taken = |r: &Region| {
            let mut v = Vec::new();
            r.take_changed(|id| v.push(id));
            v
        };
        assert!(taken(&r).is_empty());
        for id in [199, 0, 64, 63, 0] {
            let s = r.slot(id).unwrap();
            let seq = s.seq();
            s.bump_seq();
            assert_eq!(s.seq(), seq.wrapping_add(1));
        }
        assert_eq!(taken(&r), [0, 63, 64, 199]);
        assert!(taken(&r).is_empty(), "each change is reported once");
        r.slot(5).unwrap().bump_seq();
        assert_eq!(taken(&r), [5]);
        // Plain writes (the program's own, or `set_seq`) mark nothing.
        r.slot(6).unwrap().set_seq(9);
        assert!(taken(&r).is_empty());
    }

    #[test]
    fn data_bounds() {
        let l = Layout::new(8, 8, 4, 8192).unwrap();
        assert!(l.data_contains(0, 8192));
        assert!(l.data_contains(8192, 0));
        assert!(!l.data_contains(1, 8192));
        assert!(!l.data_contains(u64::MAX, 2));
    }
}
