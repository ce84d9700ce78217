//! The UMEM: the frames the kernel and the port pass between them by
//! address, and who owns each frame at any moment.
//!
//! The UMEM is one page-aligned anonymous mapping cut into equal frames
//! (chunks). The first half of the frames receives: each is either on the
//! fill ring or the RX ring (the kernel's) or, between being read and
//! being put back on the fill ring, the port's. The second half sends:
//! each is free (the port's), or on the TX or completion ring (the
//! kernel's). [`Frames`] records each frame's owner, and every address the
//! kernel hands back — an RX descriptor, a completion — is checked against
//! it before it is used: a descriptor outside the UMEM, crossing a frame,
//! or naming a frame the kernel does not hold is counted and skipped. So
//! the port never reads a frame the kernel may be writing, never hands a
//! frame to the kernel twice, and never reaches outside the mapping,
//! whatever the kernel writes into the rings.
//!
//! Bytes are only ever reached through [`Umem`]'s methods, for a frame the
//! port owns at that moment, which is what makes the slices they lend
//! sound: the kernel touches a frame only while it is on one of its rings.

use std::io;

use super::ring::Mmap;
use super::sys::XdpDesc;

/// Who holds a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    /// A receive frame on the fill ring or the RX ring.
    Kernel,
    /// A receive frame read and waiting to go back on the fill ring.
    Refill,
    /// A send frame free for the next frame out.
    Free,
    /// A send frame the port is writing.
    Writing,
    /// A send frame on the TX ring or the completion ring.
    Sending,
}

/// Why a descriptor the kernel returned was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BadDesc {
    /// Its bytes lie outside the UMEM or cross a frame's end.
    OutOfBounds,
    /// It names a frame the kernel does not hold (or one of the other half).
    NotKernels,
}

/// Frame ownership: the bookkeeping half of the UMEM, without memory (so
/// it is tested without a kernel).
#[derive(Debug)]
pub(crate) struct Frames {
    frame_size: u64,
    rx_count: u32,
    owner: Vec<Owner>,
    free: Vec<u32>,
}

impl Frames {
    /// `count` frames of `frame_size` bytes (a power of two), the first
    /// `rx_count` receiving (all on the fill ring to start with), the rest
    /// sending (all free).
    pub(crate) fn new(frame_size: u32, count: u32, rx_count: u32) -> Frames {
        let rx_count = rx_count.min(count);
        let owner = (0..count)
            .map(|i| {
                if i < rx_count {
                    Owner::Kernel
                } else {
                    Owner::Free
                }
            })
            .collect();
        // Popped from the end: lowest first.
        let free = (rx_count..count).rev().collect();
        Frames {
            frame_size: u64::from(frame_size),
            rx_count,
            owner,
            free,
        }
    }

    pub(crate) fn frame_size(&self) -> usize {
        self.frame_size as usize
    }

    /// The UMEM address of frame `i`.
    pub(crate) fn addr(&self, i: u32) -> u64 {
        u64::from(i) * self.frame_size
    }

    /// Every receive frame's address (what goes on the fill ring first).
    pub(crate) fn rx_addrs(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.rx_count).map(|i| self.addr(i))
    }

    /// Checks a received descriptor and takes its frame from the kernel:
    /// returns the frame, and the byte range in the UMEM.
    pub(crate) fn take_rx(
        &mut self,
        d: &XdpDesc,
    ) -> Result<(u32, std::ops::Range<usize>), BadDesc> {
        let len = u64::from(d.len);
        let end = d.addr.checked_add(len).ok_or(BadDesc::OutOfBounds)?;
        let frame = d.addr / self.frame_size;
        let offset = d.addr % self.frame_size;
        if offset + len > self.frame_size {
            return Err(BadDesc::OutOfBounds);
        }
        let i = u32::try_from(frame).map_err(|_| BadDesc::OutOfBounds)?;
        let start = usize::try_from(d.addr).map_err(|_| BadDesc::OutOfBounds)?;
        let end = usize::try_from(end).map_err(|_| BadDesc::OutOfBounds)?;
        match self.owner.get_mut(i as usize) {
            None => Err(BadDesc::OutOfBounds),
            Some(o @ Owner::Kernel) if i < self.rx_count => {
                *o = Owner::Refill;
                Ok((i, start..end))
            }
            Some(_) => Err(BadDesc::NotKernels),
        }
    }

    /// Frame `i`, read, goes back to the kernel (it was pushed on the fill
    /// ring). `false` if it was not waiting to.
    pub(crate) fn refilled(&mut self, i: u32) -> bool {
        match self.owner.get_mut(i as usize) {
            Some(o @ Owner::Refill) => {
                *o = Owner::Kernel;
                true
            }
            _ => false,
        }
    }

    /// A free send frame, now the port's to write; `None` if none is free.
    pub(crate) fn alloc_tx(&mut self) -> Option<u32> {
        let i = self.free.pop()?;
        if let Some(o) = self.owner.get_mut(i as usize) {
            *o = Owner::Writing;
        }
        Some(i)
    }

    /// Frame `i` (from [`alloc_tx`](Self::alloc_tx)) was not used after all.
    pub(crate) fn unalloc_tx(&mut self, i: u32) {
        if let Some(o @ Owner::Writing) = self.owner.get_mut(i as usize) {
            *o = Owner::Free;
            self.free.push(i);
        }
    }

    /// Frame `i` (from [`alloc_tx`](Self::alloc_tx)) went on the TX ring.
    pub(crate) fn sent(&mut self, i: u32) {
        if let Some(o @ Owner::Writing) = self.owner.get_mut(i as usize) {
            *o = Owner::Sending;
        }
    }

    /// Whether the port is writing frame `i`.
    fn writing(&self, i: u32) -> bool {
        self.owner.get(i as usize) == Some(&Owner::Writing)
    }

    /// The kernel completed the send frame at `addr`: it is free again.
    /// Refused (and nothing changes) unless `addr` is the start of a send
    /// frame the kernel holds.
    pub(crate) fn complete(&mut self, addr: u64) -> Result<(), BadDesc> {
        if !addr.is_multiple_of(self.frame_size) {
            return Err(BadDesc::OutOfBounds);
        }
        let i = u32::try_from(addr / self.frame_size).map_err(|_| BadDesc::OutOfBounds)?;
        match self.owner.get_mut(i as usize) {
            None => Err(BadDesc::OutOfBounds),
            Some(o @ Owner::Sending) => {
                *o = Owner::Free;
                self.free.push(i);
                Ok(())
            }
            Some(_) => Err(BadDesc::NotKernels),
        }
    }

    /// Send frames free now.
    pub(crate) fn free_tx(&self) -> usize {
        self.free.len()
    }

    /// Frame `i`'s owner.
    #[cfg(test)]
    pub(crate) fn owner(&self, i: u32) -> Option<Owner> {
        self.owner.get(i as usize).copied()
    }
}

/// The UMEM: its memory and who owns each frame.
#[derive(Debug)]
pub(crate) struct Umem {
    map: Mmap,
    pub(crate) frames: Frames,
}

impl Umem {
    /// Maps `count` frames of `frame_size` bytes.
    pub(crate) fn new(frame_size: u32, count: u32, rx_count: u32) -> io::Result<Umem> {
        let len = (frame_size as usize)
            .checked_mul(count as usize)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "UMEM too large"))?;
        let map = Mmap::anonymous(len)?;
        Ok(Umem {
            map,
            frames: Frames::new(frame_size, count, rx_count),
        })
    }

    /// Start of the mapping (for `XDP_UMEM_REG`).
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.map.as_ptr()
    }

    /// Its length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Checks received descriptor `d`, copies its frame into the front of
    /// `dst` and takes the frame from the kernel. Returns the frame (for
    /// the fill ring) and the bytes copied (`None` when `dst` is too small:
    /// nothing is copied, the frame is still taken).
    pub(crate) fn read_rx(
        &mut self,
        d: &XdpDesc,
        dst: &mut [u8],
    ) -> Result<(u32, Option<usize>), BadDesc> {
        let (i, range) = self.frames.take_rx(d)?;
        let n = range.len();
        let Some(dst) = dst.get_mut(..n) else {
            return Ok((i, None));
        };
        if range.end > self.map.len() {
            // `take_rx` bounds it by the frames, which the mapping holds;
            // kept as a second check, never a panic.
            return Err(BadDesc::OutOfBounds);
        }
        // SAFETY: `range` lies inside the mapping (checked just above) and
        // inside frame `i`, which `take_rx` has just moved from the kernel
        // to the port: the kernel wrote it before publishing the RX entry
        // (made visible by the ring's Acquire load) and will not touch it
        // again until it is back on the fill ring. `dst` is the caller's
        // own buffer, never inside the UMEM.
        unsafe {
            std::ptr::copy_nonoverlapping(self.map.as_ptr().add(range.start), dst.as_mut_ptr(), n)
        };
        Ok((i, Some(n)))
    }

    /// Send frame `i` (from `frames.alloc_tx`, not yet sent): its bytes,
    /// the port's to write.
    pub(crate) fn tx_frame(&mut self, i: u32) -> Option<&mut [u8]> {
        let fs = self.frames.frame_size();
        let start = (i as usize).checked_mul(fs)?;
        if start.checked_add(fs)? > self.map.len() || !self.frames.writing(i) {
            return None;
        }
        // SAFETY: the frame lies inside the mapping (checked above). It is a
        // send frame the port is writing (taken from the free list, not yet
        // on the TX ring: checked above), so the kernel does not touch it; the returned borrow of
        // `self` keeps any other slice of it from being made meanwhile.
        Some(unsafe { std::slice::from_raw_parts_mut(self.map.as_ptr().add(start), fs) })
    }
}
