//! The Internet checksum (RFC 1071, RFC 1624), with the hooks a TOE needs.
//!
//! - [`data`] sums a buffer fast: 32 bytes per step, each 64-bit load split
//!   into two 32-bit lanes added into 64-bit accumulators, folded once at the
//!   end. The loads are native-endian and the folded sum is byte-swapped once
//!   on little-endian machines: the one's-complement sum is independent of
//!   byte order (RFC 1071 §2(B)), and skipping a byte swap per word lets the
//!   compiler vectorise the loop. There is no per-byte loop except for the
//!   last three bytes.
//! - [`Accumulator`] sums a packet given as several pieces — headers built in
//!   one place, payload referenced from another — with pieces of any length,
//!   odd ones included.
//! - [`pseudo_header`] is what a port with checksum offload wants in the
//!   checksum field (virtio-net `NEEDS_CSUM`): the pseudo-header sum alone.
//! - [`update`] and [`update32`] patch a stored checksum when one field
//!   changes (RFC 1624 eqn. 3), for segmentation and rewrites without
//!   re-reading the payload.
//! - [`Checksum`] and [`ChecksumCaps`] say, per protocol, whether software or
//!   the port verifies received checksums and computes transmitted ones.
//!
//! Every sum here is *folded but not complemented*; the value written to a
//! checksum field is `!sum`, and a received packet is intact when the sum
//! over it (checksum field included) is `0xffff`.
//!
//! The functions are total: none panics on any input.

use crate::ipv4::{IpProtocol, Ipv4Address};

/// Bytes summed per step of the main loop.
const STEP: usize = 32;

/// Bytes summed before the lane accumulators are folded into the total.
/// Each lane gains less than 2³² per step, so 2²⁴ steps cannot overflow.
const BLOCK: usize = STEP << 24;

/// One's-complement addition of two 64-bit values (end-around carry).
#[inline(always)]
const fn add64(a: u64, b: u64) -> u64 {
    let (s, carry) = a.overflowing_add(b);
    s + carry as u64
}

/// Folds a 64-bit one's-complement sum to 16 bits. The result is zero only
/// when `s` is zero.
#[inline(always)]
const fn fold(s: u64) -> u16 {
    let s = (s & 0xffff_ffff) + (s >> 32); // < 2^33
    let s = (s & 0xffff_ffff) + (s >> 32); // < 2^32
    let s = (s & 0xffff) + (s >> 16); // < 2^17
    let s = (s & 0xffff) + (s >> 16); // ≤ 0x1_0000
    let s = (s & 0xffff) + (s >> 16); // ≤ 0xffff
    s as u16
}

/// Reads eight bytes in native order; `c` always has eight bytes.
#[inline(always)]
fn ne64(c: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(c);
    u64::from_ne_bytes(b)
}

/// Sums a block of at most [`BLOCK`] bytes' worth of 32-byte steps, in
/// native byte order, unfolded.
#[inline(always)]
fn sum_steps_ne(steps: &[u8]) -> u64 {
    let mut lanes = [0u64; 4];
    for c in steps.chunks_exact(STEP) {
        for (lane, w) in lanes.iter_mut().zip(c.chunks_exact(8)) {
            let w = ne64(w);
            *lane += (w >> 32) + (w & 0xffff_ffff);
        }
    }
    lanes.iter().fold(0, |acc, &l| add64(acc, l))
}

/// The folded sum of `bytes`, a word-aligned stream (the first byte is a high
/// byte).
#[inline]
fn sum(bytes: &[u8]) -> u16 {
    let whole = bytes.len() - bytes.len() % STEP;
    let (steps, rest) = bytes.split_at(whole);
    let mut acc = 0u64;
    for block in steps.chunks(BLOCK) {
        acc = add64(acc, sum_steps_ne(block));
    }
    let mut words = rest.chunks_exact(4);
    for c in &mut words {
        let mut b = [0u8; 4];
        b.copy_from_slice(c);
        acc = add64(acc, u64::from(u32::from_ne_bytes(b)));
    }
    let mut s = fold(acc);
    if cfg!(target_endian = "little") {
        // The native-order sum of byte-swapped words is the byte-swapped sum.
        s = s.swap_bytes();
    }
    let tail = match *words.remainder() {
        [a] => u64::from(a) << 8,
        [a, b] => u64::from(u16::from_be_bytes([a, b])),
        [a, b, c] => u64::from(u16::from_be_bytes([a, b])) + (u64::from(c) << 8),
        _ => 0,
    };
    fold(u64::from(s) + tail)
}

/// The folded one's-complement sum of `bytes` as big-endian 16-bit words (an
/// odd trailing byte is the high byte of a word), not complemented.
///
/// Zero only when every byte is zero. A buffer with a correct checksum field
/// sums to `0xffff`.
///
/// ```
/// // RFC 1071 §3's example.
/// assert_eq!(softoe_wire::checksum::data(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]), 0xddf2);
/// ```
pub fn data(bytes: &[u8]) -> u16 {
    sum(bytes)
}

/// One's-complement addition of folded partial sums (each of an even-length
/// piece, or of the last piece).
pub fn combine(sums: &[u16]) -> u16 {
    fold(sums.iter().fold(0u64, |acc, &s| acc + u64::from(s)))
}

/// The pseudo-header sum for a TCP or UDP packet of `length` bytes (header
/// and payload) from `src` to `dst` (RFC 793 §3.1, RFC 768). Folded, not
/// complemented: this is the value a port with checksum offload expects in
/// the checksum field.
pub fn pseudo_header(src: Ipv4Address, dst: Ipv4Address, protocol: IpProtocol, length: u32) -> u16 {
    let (s, d) = (u64::from(src.to_bits()), u64::from(dst.to_bits()));
    let acc = (s >> 16)
        + (s & 0xffff)
        + (d >> 16)
        + (d & 0xffff)
        + u64::from(u8::from(protocol))
        + u64::from(length >> 16)
        + u64::from(length & 0xffff);
    fold(acc)
}

/// A streaming checksum over a packet given in pieces.
///
/// Pieces may have any length: after an odd-length piece, the next byte is
/// the low byte of the word the previous piece began (the accumulator tracks
/// this *phase*). [`add_u16`](Self::add_u16) and [`add_sum`](Self::add_sum)
/// add whole words as if their two (or an even number of) bytes came next in
/// the stream, so they too are right at either phase.
///
/// ```
/// use softoe_wire::checksum::{self, Accumulator};
/// let bytes = [1u8, 2, 3, 4, 5, 6, 7];
/// let mut acc = Accumulator::new();
/// acc.add(&bytes[..3]);
/// acc.add(&bytes[3..]);
/// assert_eq!(acc.finish(), checksum::data(&bytes));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Accumulator {
    /// One's-complement sum so far (end-around carried, never overflows).
    acc: u64,
    /// An odd number of bytes has been added: the next byte is a low byte.
    odd: bool,
}

impl Accumulator {
    /// An empty sum.
    pub const fn new() -> Accumulator {
        Accumulator { acc: 0, odd: false }
    }

    /// Adds a folded sum of bytes that start at the current phase.
    #[inline]
    fn add_at_phase(&mut self, folded: u16) {
        // Shifting a byte stream by one byte position multiplies its sum by
        // 256 modulo 0xffff, which is a byte swap of the folded sum.
        let v = if self.odd {
            folded.swap_bytes()
        } else {
            folded
        };
        self.acc = add64(self.acc, u64::from(v));
    }

    /// Adds the next piece of the packet. Pieces may have any length.
    pub fn add(&mut self, bytes: &[u8]) {
        self.add_at_phase(sum(bytes));
        self.odd ^= bytes.len() % 2 == 1;
    }

    /// Adds a 16-bit word (big-endian, as it would appear on the wire) as
    /// the next two bytes of the stream. Meant for even phase (after pieces
    /// of even total length), where it is the plain word; at odd phase it is
    /// still right, as its two bytes straddle two words.
    pub fn add_u16(&mut self, v: u16) {
        self.add_at_phase(v);
    }

    /// Adds a folded partial sum — [`pseudo_header`], or [`data`] of a piece
    /// of even length — as if that piece came next in the stream. Meant for
    /// even phase; at odd phase it is still right for an even-length piece.
    pub fn add_sum(&mut self, folded: u16) {
        self.add_at_phase(folded);
    }

    /// Whether an odd number of bytes has been added so far.
    pub const fn is_odd(&self) -> bool {
        self.odd
    }

    /// The folded sum so far (not complemented).
    pub const fn finish(self) -> u16 {
        fold(self.acc)
    }
}

/// RFC 1624 eqn. 3: the new value of a stored (complemented) checksum field
/// when a 16-bit word of the data it covers changes from `old` to `new`:
/// `HC' = ~(~HC + ~m + m')`.
///
/// The result is the same as recomputing, up to the two representations of
/// zero (`0x0000` and `0xffff`) that the one's-complement sum cannot tell
/// apart; both verify.
pub fn update(checksum_field: u16, old: u16, new: u16) -> u16 {
    let s = u64::from(!checksum_field) + u64::from(!old) + u64::from(new);
    !fold(s)
}

/// [`update`] for a 32-bit field (two words), such as a sequence number or
/// an IPv4 address.
pub fn update32(checksum_field: u16, old: u32, new: u32) -> u16 {
    let s = u64::from(!checksum_field)
        + u64::from(!(old >> 16) & 0xffff)
        + u64::from(!old & 0xffff)
        + u64::from(new >> 16)
        + u64::from(new & 0xffff);
    !fold(s)
}

/// Who handles one protocol's checksum: software (this crate, on behalf of
/// the stack) or the port (NIC checksum offload).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Checksum {
    /// Software verifies on receive and computes on transmit.
    #[default]
    Both,
    /// Software verifies on receive only (the port computes on transmit).
    Rx,
    /// Software computes on transmit only (the port verified on receive).
    Tx,
    /// Neither: the port does both.
    None,
}

impl Checksum {
    /// Whether software verifies received checksums (`Both` or `Rx`).
    pub const fn rx(&self) -> bool {
        matches!(self, Checksum::Both | Checksum::Rx)
    }

    /// Whether software computes transmitted checksums (`Both` or `Tx`).
    pub const fn tx(&self) -> bool {
        matches!(self, Checksum::Both | Checksum::Tx)
    }
}

/// Checksum behaviour per protocol, passed to every `parse` and `emit`: the
/// hook through which a port's checksum offload reaches the wire code.
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
    pub const fn ignored() -> ChecksumCaps {
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
    use proptest::prelude::*;

    /// Byte at a time, as RFC 1071 describes it.
    fn reference(bytes: &[u8]) -> u16 {
        let mut s: u64 = 0;
        for (i, &b) in bytes.iter().enumerate() {
            s += if i % 2 == 0 {
                u64::from(b) << 8
            } else {
                u64::from(b)
            };
        }
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    /// Same checksum, allowing for the two zeros of one's complement.
    fn same(a: u16, b: u16) -> bool {
        a == b || (a | b == 0xffff && a & b == 0)
    }

    #[test]
    fn rfc1071_example() {
        let b = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(data(&b), 0xddf2);
        assert_eq!(data(&[]), 0);
        assert_eq!(data(&[0; 100]), 0);
        assert_eq!(data(&[0xff, 0xff]), 0xffff);
        assert_eq!(data(&[0xab]), 0xab00);
        assert_eq!(data(&[0x12, 0x34, 0x56]), 0x1234 + 0x5600);
        assert_eq!(combine(&[data(&b[..4]), data(&b[4..])]), 0xddf2);
    }

    #[test]
    fn all_ones_and_long_runs() {
        // Exercises carries in every lane.
        for n in [31usize, 32, 33, 63, 64, 65, 1500, 65_536, 65_537] {
            let b = alloc::vec![0xffu8; n];
            assert_eq!(data(&b), reference(&b), "{n}");
        }
    }

    #[test]
    fn pseudo_header_by_hand() {
        let s = pseudo_header(
            Ipv4Address::new(10, 0, 0, 1),
            Ipv4Address::new(10, 0, 0, 2),
            IpProtocol::Tcp,
            40,
        );
        let bytes = [10, 0, 0, 1, 10, 0, 0, 2, 0, 6, 0, 40];
        assert_eq!(s, reference(&bytes));
        // A length past 64 KiB carries into the high word.
        let s = pseudo_header(
            Ipv4Address::BROADCAST,
            Ipv4Address::BROADCAST,
            IpProtocol::Unknown(255),
            0x0001_fffe,
        );
        let bytes = [
            255, 255, 255, 255, 255, 255, 255, 255, 0, 255, 0, 1, 0xff, 0xfe,
        ];
        assert_eq!(s, reference(&bytes));
    }

    #[test]
    fn accumulator_phase() {
        let mut acc = Accumulator::new();
        acc.add(&[0x12]);
        assert!(acc.is_odd());
        acc.add(&[0x34, 0x56]);
        acc.add(&[]);
        acc.add(&[0x78]);
        assert!(!acc.is_odd());
        assert_eq!(acc.finish(), 0x1234 + 0x5678);
        // Words and sums at odd phase.
        let mut acc = Accumulator::new();
        acc.add(&[0x01]);
        acc.add_u16(0x0203);
        acc.add_sum(data(&[0x04, 0x05]));
        acc.add(&[0x06]);
        assert_eq!(acc.finish(), reference(&[1, 2, 3, 4, 5, 6]));
    }

    #[test]
    fn update_by_hand() {
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

    #[test]
    fn caps() {
        assert!(Checksum::Both.rx() && Checksum::Both.tx());
        assert!(Checksum::Rx.rx() && !Checksum::Rx.tx());
        assert!(!Checksum::Tx.rx() && Checksum::Tx.tx());
        assert!(!Checksum::None.rx() && !Checksum::None.tx());
        assert_eq!(ChecksumCaps::default().tcp, Checksum::Both);
        assert_eq!(ChecksumCaps::ignored().ipv4, Checksum::None);
    }

    proptest! {
        #[test]
        fn fast_equals_reference(bytes in proptest::collection::vec(any::<u8>(), 0..2000),
                                 skip in 0usize..8) {
            // Every length 0..2000 and every alignment of the start.
            let b = bytes.get(skip.min(bytes.len())..).unwrap_or(&[]);
            prop_assert_eq!(data(b), reference(b));
        }

        #[test]
        fn accumulator_any_split(bytes in proptest::collection::vec(any::<u8>(), 0..2000),
                                 cuts in proptest::collection::vec(0usize..2000, 0..8)) {
            let mut cuts: Vec<usize> = cuts.into_iter().filter(|&c| c <= bytes.len()).collect();
            cuts.sort_unstable();
            let mut acc = Accumulator::new();
            let mut last = 0;
            for c in cuts {
                acc.add(&bytes[last..c]);
                last = c;
            }
            acc.add(&bytes[last..]);
            prop_assert_eq!(acc.finish(), reference(&bytes));
            prop_assert_eq!(acc.is_odd(), bytes.len() % 2 == 1);
        }

        #[test]
        fn combine_even_pieces(bytes in proptest::collection::vec(any::<u8>(), 0..600), cut in 0usize..300) {
            let cut = (cut * 2).min(bytes.len() & !1);
            let (a, b) = bytes.split_at(cut);
            prop_assert!(same(combine(&[data(a), data(b)]), reference(&bytes)));
        }

        #[test]
        fn update_equals_recompute(mut bytes in proptest::collection::vec(any::<u8>(), 4..200),
                                   at in 0usize..100, new16 in any::<u16>(), new32 in any::<u32>()) {
            // Bytes 0..2 hold the checksum field; a word elsewhere changes.
            let fill = |b: &mut Vec<u8>| {
                b[0] = 0;
                b[1] = 0;
                let c = !data(b);
                b[..2].copy_from_slice(&c.to_be_bytes());
                c
            };
            let field = fill(&mut bytes);
            let at = 2 + (at * 2) % (bytes.len() - 3) / 2 * 2;
            let old = u16::from_be_bytes([bytes[at], bytes[at + 1]]);
            bytes[at..at + 2].copy_from_slice(&new16.to_be_bytes());
            let patched = update(field, old, new16);
            let recomputed = fill(&mut bytes);
            prop_assert!(same(patched, recomputed), "{:x} vs {:x}", patched, recomputed);
            bytes[..2].copy_from_slice(&patched.to_be_bytes());
            prop_assert_eq!(data(&bytes), 0xffff);

            if bytes.len() >= 8 {
                let field = fill(&mut bytes);
                let at = 2 + (at % ((bytes.len() - 6) / 2)) * 2;
                let old = u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
                bytes[at..at + 4].copy_from_slice(&new32.to_be_bytes());
                let patched = update32(field, old, new32);
                let recomputed = fill(&mut bytes);
                prop_assert!(same(patched, recomputed), "{:x} vs {:x}", patched, recomputed);
            }
        }
    }
}
