//! A small deterministic PRNG (SplitMix64).
//!
//! The stack needs a little randomness — ephemeral ports, timestamp offsets,
//! jitter on challenge-ACK budgets — and none of it may come from the outside
//! world, or runs would not replay. The caller seeds it through
//! [`StackConfig::seed`](crate::StackConfig::seed). Security-relevant values
//! (ISNs) do not come from here but from the keyed hash in [`isn`](crate::isn).

/// SplitMix64: tiny, fast, and good enough for non-cryptographic choices.
#[derive(Clone, Debug)]
pub struct Rand {
    state: u64,
}

impl Rand {
    /// A generator started from `seed`.
    pub const fn new(seed: u64) -> Rand {
        Rand { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// A uniformly distributed value in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u32) -> u32 {
        if n == 0 {
            return 0;
        }
        // Lemire's multiply-shift; the tiny bias is irrelevant here.
        ((u64::from(self.next_u32()) * u64::from(n)) >> 32) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_bounded() {
        let mut a = Rand::new(42);
        let mut b = Rand::new(42);
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
            assert!(a.below(7) < 7);
            b.below(7);
        }
        assert_eq!(Rand::new(1).below(0), 0);
        assert_ne!(Rand::new(1).next_u64(), Rand::new(2).next_u64());
    }
}
