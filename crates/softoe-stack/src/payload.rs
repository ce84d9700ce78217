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
/// stack reports them acknowledged (or the socket is released). Valid is
/// what memory safety needs; unchanged only what correct data needs: the
/// stack reads payload through [`Device::copy_payload`](crate::Device::copy_payload),
/// into memory of its own, so bytes that change anyway (a program writing
/// a buffer it handed over) make wrong segments, never worse.
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

    /// Copies this reference's bytes, from `offset` bytes into it, to the
    /// front of `dst`, out of `region`: the whole region the reference names
    /// (its `offset` counts from `region`'s start). Returns how many bytes it
    /// copied: `min(dst.len(), self.len() - offset)`, or 0 if the reference
    /// does not lie inside `region`. What a [`Device`](crate::Device) whose
    /// memory is a plain slice does for
    /// [`copy_payload`](crate::Device::copy_payload).
    pub fn copy_from(&self, region: &[u8], offset: usize, dst: &mut [u8]) -> usize {
        let Some(bytes) = self.bytes_in(region) else {
            return 0;
        };
        let src = bytes.get(offset..).unwrap_or(&[]);
        let n = src.len().min(dst.len());
        if let (Some(d), Some(s)) = (dst.get_mut(..n), src.get(..n)) {
            d.copy_from_slice(s);
        }
        n
    }

    /// This reference's bytes in `region` (the whole region it names), if
    /// they lie inside: what a [`Device`](crate::Device) whose memory is a
    /// plain slice of its own lends for
    /// [`payload_in_place`](crate::Device::payload_in_place).
    pub fn bytes_in<'a>(&self, region: &'a [u8]) -> Option<&'a [u8]> {
        let start = usize::try_from(self.offset).ok()?;
        region.get(start..start.checked_add(self.len())?)
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

    #[test]
    fn copy_from_is_bounded_by_reference_region_and_destination() {
        let region: [u8; 16] = core::array::from_fn(|i| i as u8);
        let r = PayloadRef::new(0, 4, 8);
        let mut dst = [0u8; 5];
        assert_eq!(r.copy_from(&region, 0, &mut dst), 5);
        assert_eq!(dst, [4, 5, 6, 7, 8]);
        assert_eq!(r.copy_from(&region, 6, &mut dst), 2);
        assert_eq!(dst[..2], [10, 11]);
        assert_eq!(r.copy_from(&region, 8, &mut dst), 0);
        assert_eq!(r.copy_from(&region, usize::MAX, &mut dst), 0);
        assert_eq!(r.copy_from(&region, 0, &mut []), 0);
        assert_eq!(r.bytes_in(&region), Some(&region[4..12]));
        assert_eq!(PayloadRef::new(0, 12, 8).bytes_in(&region), None);
        // Outside the region: nothing.
        assert_eq!(PayloadRef::new(0, 12, 8).copy_from(&region, 0, &mut dst), 0);
        assert_eq!(
            PayloadRef::new(0, u64::MAX, 1).copy_from(&region, 0, &mut dst),
            0
        );
    }
}
