//! A first-fit allocator over the data area: rings and zero-copy buffers.

use std::collections::BTreeMap;

/// Allocation granule: 64 bytes (a cache line; rings need 8).
const ALIGN: u64 = 64;

/// Free spans of the data area by offset.
#[derive(Debug)]
pub(crate) struct Alloc {
    free: BTreeMap<u64, u64>,
}

impl Alloc {
    pub(crate) fn new(len: u64) -> Alloc {
        let mut free = BTreeMap::new();
        if len > 0 {
            free.insert(0, len);
        }
        Alloc { free }
    }

    /// `len` bytes (rounded up to 64), if a span that large is free.
    pub(crate) fn alloc(&mut self, len: u64) -> Option<u64> {
        let len = len.max(1).div_ceil(ALIGN) * ALIGN;
        let (&off, &have) = self.free.iter().find(|&(_, &l)| l >= len)?;
        self.free.remove(&off);
        if have > len {
            self.free.insert(off + len, have - len);
        }
        Some(off)
    }

    /// Gives back what `alloc(len)` returned at `off`.
    pub(crate) fn free(&mut self, off: u64, len: u64) {
        let mut off = off;
        let mut len = len.max(1).div_ceil(ALIGN) * ALIGN;
        // Merge with the following span, then the preceding one.
        if let Some(next) = self.free.remove(&(off + len)) {
            len += next;
        }
        if let Some((&poff, &plen)) = self.free.range(..off).next_back()
            && poff + plen == off
        {
            self.free.remove(&poff);
            off = poff;
            len += plen;
        }
        self.free.insert(off, len);
    }

    #[cfg(test)]
    fn spans(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_and_coalesces() {
        let mut a = Alloc::new(1024);
        let x = a.alloc(100).unwrap();
        let y = a.alloc(64).unwrap();
        let z = a.alloc(128).unwrap();
        assert_eq!((x, y, z), (0, 128, 192));
        assert!(a.alloc(1024).is_none());
        a.free(y, 64);
        assert_eq!(a.alloc(10), Some(128), "first fit reuses the hole");
        a.free(128, 10);
        a.free(x, 100);
        a.free(z, 128);
        assert_eq!(a.spans(), 1, "everything merged back");
        assert_eq!(a.alloc(1024), Some(0));
    }
}
