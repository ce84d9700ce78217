//! A program in this process for tests and fuzzing: its region and its
//! private memory are ordinary vectors, its doorbells counters. Built with
//! the unit tests and with feature `fuzzing` only.

use softoe_abi::{Layout, errno};

use super::Program;

/// A program in this process: its region in ordinary memory, its private
/// memory a byte vector (addresses are offsets into it), its doorbells
/// counters. Drives a [`SessionCore`] without descriptors, root or another
/// process: in unit tests, in fuzzing, in-process.
#[derive(Debug)]
pub(crate) struct Local {
    /// The region's bytes, as 16-byte words for alignment. Never touched
    /// through the vector once the region is made (only through pointers
    /// into it), and never resized: its heap buffer stays where it is.
    words: Vec<u128>,
    layout: Layout,
    /// The program's private memory: `SEND_REMOTE` reads and `RECV_REMOTE`
    /// placement write at offsets into it.
    pub(crate) memory: Vec<u8>,
    /// Times the session's doorbell rang.
    pub(crate) session_rings: u64,
    /// Waiter doorbells the program registered (their indices), and how
    /// many times each rang.
    pub(crate) waiter_rings: Vec<u64>,
    /// The user it runs as now, when a test says so (else the session's).
    pub(crate) uid: Option<u32>,
    /// Whether it has `CAP_NET_BIND_SERVICE` (tests say; true by default).
    pub(crate) privileged: bool,
}

impl Local {
    /// A program with a zeroed region of `layout` and `memory` bytes of
    /// private memory.
    pub(crate) fn new(layout: Layout, memory: usize) -> Local {
        Local {
            words: vec![0u128; (layout.region_len() as usize).div_ceil(16)],
            layout,
            memory: vec![0u8; memory],
            session_rings: 0,
            waiter_rings: Vec::new(),
            uid: None,
            privileged: true,
        }
    }
}

impl Program for Local {
    fn ring_session(&mut self) {
        self.session_rings += 1;
    }

    fn ring_waiter(&mut self, index: u32) -> bool {
        match self.waiter_rings.get_mut(index as usize) {
            Some(n) => {
                *n += 1;
                true
            }
            None => false,
        }
    }

    fn uid(&mut self) -> Option<u32> {
        self.uid
    }

    fn may_bind_privileged(&mut self) -> bool {
        self.privileged
    }

    fn read(&mut self, addr: u64, dst: &mut [u8]) -> Result<usize, i32> {
        let from = usize::try_from(addr).map_err(|_| errno::EFAULT)?;
        let src = self.memory.get(from..).ok_or(errno::EFAULT)?;
        let n = dst.len().min(src.len());
        if n == 0 && !dst.is_empty() {
            return Err(errno::EFAULT);
        }
        dst[..n].copy_from_slice(&src[..n]);
        Ok(n)
    }

    fn write(&mut self, addr: u64, a: &[u8], b: &[u8]) -> Result<usize, i32> {
        let from = usize::try_from(addr).map_err(|_| errno::EFAULT)?;
        let dst = self.memory.get_mut(from..).ok_or(errno::EFAULT)?;
        let n1 = a.len().min(dst.len());
        dst[..n1].copy_from_slice(&a[..n1]);
        let n2 = b.len().min(dst.len() - n1);
        dst[n1..n1 + n2].copy_from_slice(&b[..n2]);
        if n1 + n2 == 0 && a.len() + b.len() > 0 {
            return Err(errno::EFAULT);
        }
        Ok(n1 + n2)
    }
}

impl Local {
    /// The region's memory and layout: the start of `words` (16-aligned,
    /// `layout.region_len()` bytes at least), which never moves (the vector
    /// is never resized).
    pub(super) fn region_memory(&mut self) -> (*mut u8, Layout) {
        (self.words.as_mut_ptr().cast::<u8>(), self.layout)
    }
}
