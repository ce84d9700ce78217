//! The Internet checksum (RFC 1071), with the hooks a TOE needs.
//!
//! - [`data`] sums a buffer fast: eight bytes per step into a 64-bit
//!   accumulator (the end-around carry is folded once at the end), not a
//!   byte or a word at a time.
//! - [`Accumulator`] sums a packet given as several pieces — headers built in
//!   one place, payload referenced from another — with any piece of odd length.
//! - [`pseudo_header`] is what a port with checksum offload wants in the
//!   checksum field (virtio-net `NEEDS_CSUM`): the pseudo-header sum alone.
//! - [`update`] patches a stored checksum when one field changes (RFC 1624),
//!   for segmentation and NAT-like rewrites without re-reading the payload.
//!
//! All sums here are *folded but not complemented*; the value written to a
//! checksum field is `!sum`.

use crate::ipv4::{IpProtocol, Ipv4Address};

/// Folds a 64-bit one's-complement accumulator to 16 bits.
#[inline]
fn fold(mut s: u64) -> u16 {
    s = (s & 0xffff_ffff) + (s >> 32);
    s = (s & 0xffff_ffff) + (s >> 32);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// Sums `bytes` into a 64-bit accumulator (unfolded). Big-endian words;
/// a trailing odd byte is the high byte of a word.
#[inline]
fn sum_bytes(bytes: &[u8]) -> u64 {
    let mut acc: u64 = 0;
    let mut chunks = bytes.chunks_exact(32);
    for c in &mut chunks {
        // Four 64-bit loads; each added as two 32-bit halves so no carry is
        // lost (a 64-bit add of 32-bit values cannot overflow for < 2^32 steps).
        let mut w = [0u64; 4];
        for (i, word) in w.iter_mut().enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(c.get(i * 8..i * 8 + 8).unwrap_or(&[0; 8]));
            *word = u64::from_be_bytes(b);
        }
        for word in w {
            acc += (word >> 32) + (word & 0xffff_ffff);
        }
    }
    let rest = chunks.remainder();
    let mut words = rest.chunks_exact(4);
    for c in &mut words {
        let mut b = [0u8; 4];
        b.copy_from_slice(c);
        acc += u64::from(u32::from_be_bytes(b));
    }
    let tail = words.remainder();
    match tail.len() {
        1 => acc += u64::from(tail[0]) << 8,
        2 => acc += u64::from(u16::from_be_bytes([tail[0], tail[1]])),
        3 => acc += (u64::from(u16::from_be_bytes([tail[0], tail[1]]))) + (u64::from(tail[2]) << 8),
        _ => {}
    }
    acc
}

/// The folded one's-complement sum of `bytes` (not complemented).
pub fn data(bytes: &[u8]) -> u16 {
    fold(sum_bytes(bytes))
}

/// One's-complement sum of folded partial sums.
pub fn combine(sums: &[u16]) -> u16 {
    fold(sums.iter().map(|&s| u64::from(s)).sum())
}

/// The pseudo-header sum for a TCP or UDP packet of `length` bytes (header
/// and payload) from `src` to `dst`. Folded, not complemented.
pub fn pseudo_header(src: Ipv4Address, dst: Ipv4Address, protocol: IpProtocol, length: u32) -> u16 {
    let mut acc = u64::from(src.to_bits() >> 16) + u64::from(src.to_bits() & 0xffff);
    acc += u64::from(dst.to_bits() >> 16) + u64::from(dst.to_bits() & 0xffff);
    acc += u64::from(u8::from(protocol));
    acc += u64::from(length >> 16) + u64::from(length & 0xffff);
    fold(acc)
}

/// A streaming checksum over a packet given in pieces.
#[derive(Clone, Copy, Debug, Default)]
pub struct Accumulator {
    acc: u64,
    /// An odd number of bytes has been added: the next byte is a low byte.
    odd: bool,
}

impl Accumulator {
    /// An empty sum.
    pub const fn new() -> Accumulator {
        Accumulator { acc: 0, odd: false }
    }

    /// Adds the next piece of the packet. Pieces may have any length.
    pub fn add(&mut self, bytes: &[u8]) {
        let mut bytes = bytes;
        if self.odd {
            let Some((&first, rest)) = bytes.split_first() else {
                return;
            };
            self.acc += u64::from(first);
            self.odd = false;
            bytes = rest;
        }
        self.acc += sum_bytes(bytes);
        if bytes.len() % 2 == 1 {
            self.odd = true;
        }
        // Keep headroom: fold now and then on very long streams.
        if self.acc > (1 << 60) {
            self.acc = u64::from(fold(self.acc));
        }
    }

    /// Adds a 16-bit word. Only meaningful at an even position.
    pub fn add_u16(&mut self, v: u16) {
        self.acc += u64::from(v);
    }

    /// Adds a folded partial sum (e.g. [`pseudo_header`]). Even position only.
    pub fn add_sum(&mut self, folded: u16) {
        self.acc += u64::from(folded);
    }

    /// The folded sum so far (not complemented).
    pub fn finish(self) -> u16 {
        fold(self.acc)
    }
}

/// RFC 1624 eqn. 3: the new value of a stored checksum field when a 16-bit
/// word of the covered data changes from `old` to `new`.
pub fn update(checksum_field: u16, old: u16, new: u16) -> u16 {
    // HC' = ~(~HC + ~m + m')
    let s = u64::from(!checksum_field) + u64::from(!old) + u64::from(new);
    !fold(s)
}

/// [`update`] for a 32-bit field (two words).
pub fn update32(checksum_field: u16, old: u32, new: u32) -> u16 {
    let c = update(checksum_field, (old >> 16) as u16, (new >> 16) as u16);
    update(c, old as u16, new as u16)
}

/// Which checksums the software computes and verifies. What the port does
/// instead is what makes checksum offload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Checksum {
    /// Verify on receive and compute on transmit.
    #[default]
    Both,
    /// Verify on receive only (the port computes on transmit).
    Rx,
    /// Compute on transmit only (the port verified on receive).
    Tx,
    /// Neither.
    None,
}

impl Checksum {
    /// Whether software verifies received checksums.
    pub fn rx(&self) -> bool {
        matches!(self, Checksum::Both | Checksum::Rx)
    }

    /// Whether software computes transmitted checksums.
    pub fn tx(&self) -> bool {
        matches!(self, Checksum::Both | Checksum::Tx)
    }
}

/// Checksum behaviour per protocol, passed to `parse` and `emit`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChecksumCaps {
    /// IPv4 header checksum.
    pub ipv4: Checksum,
    /// UDP checksum.
    pub udp: Checksum,
    /// TCP checksum.
    pub tcp: Checksum,
    /// ICMPv4 checksum.
    pub icmpv4: Checksum,
}

impl ChecksumCaps {
    /// No checksum is verified or computed by software.
    pub fn ignored() -> ChecksumCaps {
        ChecksumCaps {
            ipv4: Checksum::None,
            udp: Checksum::None,
            tcp: Checksum::None,
            icmpv4: Checksum::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn reference(bytes: &[u8]) -> u16 {
        let mut s: u32 = 0;
        let mut i = 0;
        while i + 1 < bytes.len() {
            s += u32::from(u16::from_be_bytes([bytes[i], bytes[i + 1]]));
            i += 2;
        }
        if i < bytes.len() {
            s += u32::from(bytes[i]) << 8;
        }
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        assert_eq!(
            data(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0xddf2
        );
        assert_eq!(data(&[]), 0);
        assert_eq!(data(&[0xff, 0xff]), 0xffff);
    }

    #[test]
    fn update_matches_recompute() {
        let mut pkt: Vec<u8> = (0..64u8).collect();
        let field = !data(&pkt);
        let old = u16::from_be_bytes([pkt[10], pkt[11]]);
        pkt[10] = 0xab;
        pkt[11] = 0xcd;
        assert_eq!(update(field, old, 0xabcd), !data(&pkt));
        let old32 = u32::from_be_bytes([pkt[20], pkt[21], pkt[22], pkt[23]]);
        let field = !data(&pkt);
        pkt[20..24].copy_from_slice(&0xdead_beefu32.to_be_bytes());
        assert_eq!(update32(field, old32, 0xdead_beef), !data(&pkt));
    }

    proptest::proptest! {
        #[test]
        fn fast_equals_reference(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..2000)) {
            proptest::prop_assert_eq!(data(&bytes), reference(&bytes));
        }

        #[test]
        fn accumulator_any_split(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600),
                                 cuts in proptest::collection::vec(0usize..600, 0..6)) {
            let mut cuts: Vec<usize> = cuts.into_iter().filter(|&c| c <= bytes.len()).collect();
            cuts.sort_unstable();
            let mut acc = Accumulator::new();
            let mut last = 0;
            for c in cuts {
                acc.add(&bytes[last..c]);
                last = c;
            }
            acc.add(&bytes[last..]);
            proptest::prop_assert_eq!(acc.finish(), reference(&bytes));
        }
    }
}
