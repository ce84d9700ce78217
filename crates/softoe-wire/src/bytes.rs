//! Reading big-endian header fields out of a buffer: the one helper every
//! view uses. A field the buffer is too short for reads as zero (views
//! checked with `new_checked` never are; a view built `new_unchecked` over a
//! short buffer reads zeros instead of panicking).

/// The `N` bytes at `at`, if the buffer holds them.
fn array_at<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..)?.first_chunk::<N>().copied()
}

/// The byte at `at`, or zero.
pub(crate) fn u8_at(b: &[u8], at: usize) -> u8 {
    b.get(at).copied().unwrap_or(0)
}

/// The big-endian `u16` at `at`, or zero.
pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    array_at(b, at).map_or(0, u16::from_be_bytes)
}

/// The big-endian `u32` at `at`, or zero.
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    array_at(b, at).map_or(0, u32::from_be_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_big_endian_fields() {
        let b = [0x12, 0x34, 0x56, 0x78, 0x9a];
        assert_eq!(u8_at(&b, 4), 0x9a);
        assert_eq!(u16_at(&b, 0), 0x1234);
        assert_eq!(u16_at(&b, 3), 0x789a);
        assert_eq!(u32_at(&b, 0), 0x1234_5678);
        assert_eq!(u32_at(&b, 1), 0x3456_789a);
    }

    #[test]
    fn short_buffer_reads_zero() {
        let b = [0xff, 0xff, 0xff];
        assert_eq!(u8_at(&b, 3), 0);
        assert_eq!(u16_at(&b, 2), 0);
        assert_eq!(u32_at(&b, 0), 0);
        assert_eq!(u16_at(&b, usize::MAX), 0);
        assert_eq!(u32_at(&[], 0), 0);
    }
}
