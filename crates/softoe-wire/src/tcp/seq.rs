//! TCP sequence numbers: arithmetic and comparison modulo 2³².

use core::{cmp, fmt, ops};

/// A TCP sequence number (RFC 9293 §3.4): arithmetic and comparison modulo
/// 2³².
///
/// Adding or subtracting a length wraps (the length is taken modulo 2³²);
/// nothing here panics. The ordering compares by the sign of the wrapping
/// difference, as RFC 1982 serial numbers do: `a < b` when `b - a`, read as
/// a signed 32-bit number, is positive. This is **not a total order** — it is
/// not transitive around the circle, and two numbers exactly 2³¹ apart are
/// each "less" than the other — but it is the right order for numbers less
/// than 2³¹ apart, which is all TCP ever compares (windows are at most 2³⁰).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpSeqNumber(pub u32);

impl TcpSeqNumber {
    /// `self - other` as a signed distance (positive when `self` is later).
    pub const fn wrapping_diff(self, other: TcpSeqNumber) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// The later of the two (by [`wrapping_diff`](Self::wrapping_diff)).
    pub const fn max(self, other: TcpSeqNumber) -> TcpSeqNumber {
        if self.wrapping_diff(other) < 0 {
            other
        } else {
            self
        }
    }

    /// The earlier of the two (by [`wrapping_diff`](Self::wrapping_diff)).
    pub const fn min(self, other: TcpSeqNumber) -> TcpSeqNumber {
        if self.wrapping_diff(other) < 0 {
            self
        } else {
            other
        }
    }
}

impl ops::Add<usize> for TcpSeqNumber {
    type Output = TcpSeqNumber;
    /// Wrapping: the length is taken modulo 2³².
    fn add(self, rhs: usize) -> TcpSeqNumber {
        TcpSeqNumber(self.0.wrapping_add(rhs as u32))
    }
}

impl ops::Sub<usize> for TcpSeqNumber {
    type Output = TcpSeqNumber;
    /// Wrapping: the length is taken modulo 2³².
    fn sub(self, rhs: usize) -> TcpSeqNumber {
        TcpSeqNumber(self.0.wrapping_sub(rhs as u32))
    }
}

impl ops::AddAssign<usize> for TcpSeqNumber {
    fn add_assign(&mut self, rhs: usize) {
        *self = *self + rhs;
    }
}

impl PartialOrd for TcpSeqNumber {
    /// By the sign of the wrapping difference; never `None`, but not a total
    /// order (see the type's docs).
    fn partial_cmp(&self, other: &TcpSeqNumber) -> Option<cmp::Ordering> {
        Some(self.wrapping_diff(*other).cmp(&0))
    }
}

impl fmt::Display for TcpSeqNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for TcpSeqNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use proptest::prelude::*;

    #[test]
    fn wraps() {
        let a = TcpSeqNumber(u32::MAX);
        assert_eq!(a + 1, TcpSeqNumber(0));
        assert!(a < a + 1);
        assert!(a + 1 > a);
        assert_eq!((a + 10).wrapping_diff(a), 10);
        assert_eq!(a.wrapping_diff(a + 10), -10);
        assert_eq!(a.max(a + 3), a + 3);
        assert_eq!((a + 3).min(a), a);
        assert_eq!(TcpSeqNumber(2) - 3, TcpSeqNumber(u32::MAX));
        let mut b = a;
        b += 2;
        assert_eq!(b, TcpSeqNumber(1));
        // Lengths past 2^32 wrap too (no panic).
        assert_eq!(TcpSeqNumber(5) + (1usize << 40), TcpSeqNumber(5));
        assert_eq!(format!("{a} {a:?}"), "4294967295 4294967295");
    }

    #[test]
    fn not_a_total_order() {
        // Exactly 2^31 apart: each compares less than the other.
        let (a, b) = (TcpSeqNumber(0), TcpSeqNumber(1 << 31));
        assert!(a < b);
        assert!(b < a);
    }

    proptest! {
        #[test]
        fn arithmetic_is_modular(x in any::<u32>(), n in 0usize..(1 << 31)) {
            let a = TcpSeqNumber(x);
            prop_assert_eq!((a + n) - n, a);
            prop_assert_eq!((a + n).wrapping_diff(a), n as i32);
            if n > 0 {
                prop_assert!(a < a + n);
                prop_assert_eq!(a.max(a + n), a + n);
                prop_assert_eq!((a + n).min(a), a);
            } else {
                prop_assert_eq!(a.partial_cmp(&(a + n)), Some(cmp::Ordering::Equal));
            }
        }
    }
}
