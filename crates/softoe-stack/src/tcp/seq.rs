//! Sequence-number arithmetic, modulo 2³².
//!
//! Every comparison of sequence numbers in the TCP code goes through these
//! helpers, so that wrap-around (an ISN of `0xFFFF_FFFF`, say) behaves exactly
//! like any other point of the circle.

use softoe_wire::TcpSeqNumber;

/// `a - b` as a distance, modulo 2³². Meaningful when `a` is at or after `b`.
#[inline]
pub(crate) fn dist(a: TcpSeqNumber, b: TcpSeqNumber) -> u32 {
    a.0.wrapping_sub(b.0)
}

/// `a + n`, modulo 2³².
#[inline]
pub(crate) fn add(a: TcpSeqNumber, n: u32) -> TcpSeqNumber {
    TcpSeqNumber(a.0.wrapping_add(n))
}

/// `a - n`, modulo 2³².
#[inline]
pub(crate) fn sub(a: TcpSeqNumber, n: u32) -> TcpSeqNumber {
    TcpSeqNumber(a.0.wrapping_sub(n))
}

/// `a < b` on the circle.
#[inline]
pub(crate) fn lt(a: TcpSeqNumber, b: TcpSeqNumber) -> bool {
    (a.0.wrapping_sub(b.0) as i32) < 0
}

/// `a <= b` on the circle.
#[inline]
pub(crate) fn le(a: TcpSeqNumber, b: TcpSeqNumber) -> bool {
    (a.0.wrapping_sub(b.0) as i32) <= 0
}

/// `a > b` on the circle.
#[inline]
pub(crate) fn gt(a: TcpSeqNumber, b: TcpSeqNumber) -> bool {
    lt(b, a)
}

/// `a >= b` on the circle.
#[inline]
pub(crate) fn ge(a: TcpSeqNumber, b: TcpSeqNumber) -> bool {
    le(b, a)
}

/// The later of `a` and `b`.
#[inline]
pub(crate) fn max(a: TcpSeqNumber, b: TcpSeqNumber) -> TcpSeqNumber {
    if lt(a, b) { b } else { a }
}

/// `lo <= x < hi` on the circle (the interval starting at `lo`).
#[inline]
pub(crate) fn in_range(x: TcpSeqNumber, lo: TcpSeqNumber, hi: TcpSeqNumber) -> bool {
    dist(x, lo) < dist(hi, lo)
}

/// Timestamps compare the same way (RFC 7323 §5.3, PAWS).
#[inline]
pub(crate) fn ts_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: TcpSeqNumber = TcpSeqNumber(u32::MAX);

    #[test]
    fn wraps() {
        assert_eq!(add(MAX, 1), TcpSeqNumber(0));
        assert_eq!(dist(TcpSeqNumber(5), MAX), 6);
        assert!(lt(MAX, TcpSeqNumber(0)));
        assert!(gt(TcpSeqNumber(3), MAX));
        assert!(in_range(TcpSeqNumber(1), MAX, TcpSeqNumber(10)));
        assert!(!in_range(TcpSeqNumber(10), MAX, TcpSeqNumber(10)));
        assert!(!in_range(sub(MAX, 1), MAX, TcpSeqNumber(10)));
        assert_eq!(max(MAX, TcpSeqNumber(2)), TcpSeqNumber(2));
        assert!(ts_lt(u32::MAX, 1));
    }
}
