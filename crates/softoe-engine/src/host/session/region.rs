//! The session's direct hold on its program's shared memory: the region
//! made on the memory the program shares (a memfd's mapping, or a test
//! program's vector), its data area lent to the stack's `Memory`, and
//! plain records viewed as the bytes written there. The one session
//! module that uses `unsafe`, each use proved beside it; the others reach
//! the shared memory only through [`Region`]'s safe accessors.

use std::io;

use softoe_abi::{Layout, Region, TcpInfoRecord};

use super::fds::{Fds, Session};
#[cfg(any(test, feature = "fuzzing"))]
use super::local::Local;
use super::{Program, SessionCore};
use crate::memory::Memory;

// `TcpInfoRecord` has no padding: eight `u32`, six `u64` (at offset 32,
// 8-aligned), four `u32`. Every byte of it is an initialised integer byte.
const _: () = assert!(size_of::<TcpInfoRecord>() == 8 * 4 + 6 * 8 + 4 * 4);

/// `rec` as the bytes `INFO` writes to the data area.
pub(super) fn record_bytes(rec: &TcpInfoRecord) -> &[u8] {
    // SAFETY: `rec` is `#[repr(C)]` plain integers with no padding (the
    // assertion above), so all `size_of::<TcpInfoRecord>()` bytes it spans
    // are initialised; the slice borrows `rec` and does not outlive it.
    unsafe {
        std::slice::from_raw_parts(
            std::ptr::from_ref(rec).cast::<u8>(),
            size_of::<TcpInfoRecord>(),
        )
    }
}

impl Session {
    /// The session of a program that attached: its region is the memfd's
    /// mapping (at least `layout.region_len()` bytes, zeroed), made here
    /// before the program can see it.
    pub(in crate::host) fn open(
        id: u32,
        (pid, uid): (i32, u32),
        layout: Layout,
        fds: Fds,
    ) -> io::Result<Session> {
        let (base, len) = fds.region_memory();
        if (len as u64) < layout.region_len() {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        // SAFETY: the mapping is `region_len` bytes, page-aligned, zeroed
        // (fresh memfd), and lives as long as this session, which holds it
        // (in `Fds`, dropped with the session); the program gets the memfd
        // only after this returns.
        let region = unsafe { Region::init(base, layout, id) };
        Ok(SessionCore::new(id, pid, uid, region, fds))
    }
}

#[cfg(any(test, feature = "fuzzing"))]
impl SessionCore<Local> {
    /// A session on `program`'s region, as the engine makes one at attach
    /// (number `id`, process and user 0).
    pub(crate) fn local(id: u32, mut program: Local) -> SessionCore<Local> {
        let (base, layout) = program.region_memory();
        // SAFETY: `words` is zeroed, 16-aligned (`u128`), at least
        // `region_len` bytes, and nothing else uses it yet. It is a heap
        // buffer that stays put when `program` moves (into the session) and
        // is never resized or touched through the vector again; it lives as
        // long as the session, which owns `program`; copies of the region
        // (`SessionCore::region`) are used only while the session lives.
        let region = unsafe { Region::init(base, layout, id) };
        SessionCore::new(id, 0, 0, region, program)
    }
}

impl<P: Program> SessionCore<P> {
    /// The region's data area as a `Memory` region (made once): payload
    /// references name it, and the stack writes TCP rings there itself.
    pub(super) fn data_region(&mut self, mem: &mut Memory) -> u32 {
        if let Some(m) = self.mem {
            return m;
        }
        let l = *self.region.layout();
        // SAFETY: the data area lies inside the region's memory, which this
        // session's program owns (a mapping, or ordinary memory) and frees
        // only when the session is dropped, in `reclaim` after removing this
        // region. The engine makes no reference into it (`Region` copies in
        // and out through raw pointers, `Memory` by volatile reads).
        let m = unsafe {
            mem.add_shared(
                self.region.base().add(l.data_offset() as usize),
                l.data_len() as usize,
            )
        };
        self.mem = Some(m);
        m
    }
}
