//! Payload by reference.
//!
//! The stack never owns application memory and never copies send data. A
//! [`PayloadRef`] names bytes that live somewhere the runtime knows about — a
//! process's shared region, an engine buffer, a simulator arena — by
//! `(region, offset, len)`. The stack keeps references in its send queue until
//! the peer acknowledges the bytes, slices them into segments, and hands them
//! back to the runtime in [`TxFrame`](crate::TxFrame)s; the runtime resolves
//! them to bytes (with `writev`, DMA, or a copy in a simulator).

/// A run of payload bytes owned by the runtime.
///
/// The runtime promises that the bytes a reference names stay valid and
/// unchanged from the moment it hands the reference to the stack until the
/// stack reports them acknowledged (or the socket is released).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct PayloadRef {
    /// Which memory the bytes live in; meaningful only to the runtime.
    pub region: u32,
    /// Length in bytes.
    pub len: u32,
    /// Byte offset within the region.
    pub offset: u64,
}

impl PayloadRef {
    /// A reference to `len` bytes at `offset` in `region`.
    pub const fn new(region: u32, offset: u64, len: u32) -> PayloadRef {
        PayloadRef {
            region,
            len,
            offset,
        }
    }

    /// Length in bytes, as `usize`.
    pub const fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the reference names no bytes.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The sub-range `[start, start + len)` of this reference, clamped to it.
    pub fn slice(&self, start: u32, len: u32) -> PayloadRef {
        let start = start.min(self.len);
        let len = len.min(self.len - start);
        PayloadRef {
            region: self.region,
            len,
            offset: self.offset + u64::from(start),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_clamps() {
        let r = PayloadRef::new(7, 100, 10);
        assert_eq!(r.slice(2, 3), PayloadRef::new(7, 102, 3));
        assert_eq!(r.slice(8, 5), PayloadRef::new(7, 108, 2));
        assert_eq!(r.slice(20, 5), PayloadRef::new(7, 110, 0));
    }
}
