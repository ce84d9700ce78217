//! UDP (RFC 768).
//!
//! [`UdpPacket`] is a view over a datagram (the IPv4 payload); its payload
//! ends at the length field, not at the end of the buffer. [`UdpRepr`] is the
//! two ports; the payload is read from the view and written by a closure, so
//! it can come from wherever the caller keeps it.
//!
//! ## Contract
//!
//! Once [`UdpPacket::check_len`] (or `new_checked`) has passed — at least 8
//! bytes, and 8 ≤ length field ≤ buffer length — no accessor panics (every
//! accessor here is in fact total). [`UdpRepr::parse`] never panics on any
//! bytes; [`UdpRepr::emit`] never panics into a buffer of
//! `header_len() + payload_len` bytes, nor into a shorter one.

use crate::bytes::u16_at;
use crate::checksum::{self, ChecksumCaps};
use crate::error::{Error, Result};
use crate::ipv4::{IpProtocol, Ipv4Address};

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
    pub const PAYLOAD: usize = 8;
}

/// Header length.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// A view of a UDP datagram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> UdpPacket<T> {
        UdpPacket { buffer }
    }

    /// Wraps a buffer and checks its length field.
    pub fn new_checked(buffer: T) -> Result<UdpPacket<T>> {
        let p = UdpPacket::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// At least 8 bytes; 8 ≤ length field ≤ buffer.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        let l = usize::from(self.len());
        if len < HEADER_LEN || l < HEADER_LEN || l > len {
            Err(Error)
        } else {
            Ok(())
        }
    }

    /// The buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::SRC_PORT)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::DST_PORT)
    }
    /// Length field (header and payload).
    pub fn len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::LENGTH)
    }
    /// Whether the length field says there is no payload.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Payload, up to the length field.
    pub fn payload(&self) -> &[u8] {
        self.buffer
            .as_ref()
            .get(HEADER_LEN..usize::from(self.len()))
            .unwrap_or(&[])
    }

    /// Whether the checksum over the datagram (up to the length field), with
    /// the pseudo-header from `src` to `dst`, is right. A zero field means
    /// the sender computed none: true.
    pub fn verify_checksum(&self, src: &Ipv4Address, dst: &Ipv4Address) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let l = usize::from(self.len());
        let mut acc = checksum::Accumulator::new();
        acc.add_sum(checksum::pseudo_header(
            *src,
            *dst,
            IpProtocol::Udp,
            l as u32,
        ));
        acc.add(self.buffer.as_ref().get(..l).unwrap_or(&[]));
        acc.finish() == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    fn set16(&mut self, at: usize, v: u16) {
        if let Some(b) = self.buffer.as_mut().get_mut(at..at + 2) {
            b.copy_from_slice(&v.to_be_bytes());
        }
    }
    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        self.set16(field::SRC_PORT, v);
    }
    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        self.set16(field::DST_PORT, v);
    }
    /// Sets the length field.
    pub fn set_len(&mut self, v: u16) {
        self.set16(field::LENGTH, v);
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.set16(field::CHECKSUM, v);
    }
    /// Payload, mutably (to the end of the buffer).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        self.buffer
            .as_mut()
            .get_mut(HEADER_LEN..)
            .unwrap_or(&mut [])
    }
    /// Computes and stores the checksum over the datagram (up to the length
    /// field); a computed 0 is sent as 0xffff, since 0 means "none".
    pub fn fill_checksum(&mut self, src: &Ipv4Address, dst: &Ipv4Address) {
        self.set_checksum(0);
        let l = usize::from(self.len());
        let mut acc = checksum::Accumulator::new();
        acc.add_sum(checksum::pseudo_header(
            *src,
            *dst,
            IpProtocol::Udp,
            l as u32,
        ));
        acc.add(self.buffer.as_ref().get(..l).unwrap_or(&[]));
        let s = !acc.finish();
        self.set_checksum(if s == 0 { 0xffff } else { s });
    }
}

/// A UDP header, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl UdpRepr {
    /// Parses a header (checking the lengths first). Destination port 0 is
    /// an error; the checksum is verified when `caps.udp.rx()` and the field
    /// is nonzero.
    pub fn parse<T: AsRef<[u8]>>(
        p: &UdpPacket<T>,
        src: &Ipv4Address,
        dst: &Ipv4Address,
        caps: &ChecksumCaps,
    ) -> Result<UdpRepr> {
        p.check_len()?;
        if p.dst_port() == 0 {
            return Err(Error);
        }
        if caps.udp.rx() && !p.verify_checksum(src, dst) {
            return Err(Error);
        }
        Ok(UdpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
        })
    }

    /// 8.
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header with length `8 + payload_len`, then lets
    /// `emit_payload` fill the payload (it gets `payload_len` bytes, fewer if
    /// the buffer is short). When `caps.udp.tx()` the checksum is computed;
    /// otherwise the field holds the pseudo-header sum
    /// ([`checksum::pseudo_header`]), which is what a port with checksum
    /// offload (virtio-net `NEEDS_CSUM`, start at the UDP header, offset 6)
    /// finishes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        p: &mut UdpPacket<T>,
        src: &Ipv4Address,
        dst: &Ipv4Address,
        payload_len: usize,
        emit_payload: impl FnOnce(&mut [u8]),
        caps: &ChecksumCaps,
    ) {
        let len = (HEADER_LEN + payload_len).min(65_535);
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len(len as u16);
        let pl = p.payload_mut();
        let n = pl.len().min(payload_len);
        emit_payload(pl.get_mut(..n).unwrap_or(&mut []));
        if caps.udp.tx() {
            p.fill_checksum(src, dst);
        } else {
            p.set_checksum(checksum::pseudo_header(
                *src,
                *dst,
                IpProtocol::Udp,
                len as u32,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use proptest::prelude::*;

    const SRC: Ipv4Address = Ipv4Address::new(192, 168, 1, 1);
    const DST: Ipv4Address = Ipv4Address::new(192, 168, 1, 2);

    /// Ports 48896 → 53, "abcd"; checksum by hand for 192.168.1.1 → .2.
    const DGRAM: [u8; 12] = [
        0xbf, 0x00, 0x00, 0x35, 0x00, 0x0c, 0xf8, 0x85, b'a', b'b', b'c', b'd',
    ];

    #[test]
    fn deconstruct() {
        let p = UdpPacket::new_checked(&DGRAM[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.len()), (48896, 53, 12));
        assert_eq!(p.checksum(), 0xf885);
        assert_eq!(p.payload(), b"abcd");
        assert!(!p.is_empty());
        assert!(p.verify_checksum(&SRC, &DST));
        assert!(!p.verify_checksum(&SRC, &Ipv4Address::new(10, 0, 0, 3)));
        assert_eq!(p.into_inner(), &DGRAM[..]);
    }

    #[test]
    fn construct() {
        let mut b = [0xffu8; 12];
        let mut p = UdpPacket::new_unchecked(&mut b[..]);
        p.set_src_port(48896);
        p.set_dst_port(53);
        p.set_len(12);
        p.payload_mut().copy_from_slice(b"abcd");
        p.fill_checksum(&SRC, &DST);
        assert_eq!(b, DGRAM);
    }

    #[test]
    fn parse_and_emit() {
        let r = UdpRepr {
            src_port: 48896,
            dst_port: 53,
        };
        let p = UdpPacket::new_checked(&DGRAM[..]).unwrap();
        assert_eq!(
            UdpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::default()),
            Ok(r)
        );
        assert_eq!(r.header_len(), 8);
        let mut b = [0u8; 12];
        r.emit(
            &mut UdpPacket::new_unchecked(&mut b[..]),
            &SRC,
            &DST,
            4,
            |p| p.copy_from_slice(b"abcd"),
            &ChecksumCaps::default(),
        );
        assert_eq!(b, DGRAM);
        // A damaged checksum; zero means none.
        b[9] ^= 1;
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert!(UdpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::default()).is_err());
        assert!(UdpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::ignored()).is_ok());
        b[6..8].fill(0);
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum(&SRC, &DST));
        assert!(UdpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::default()).is_ok());
    }

    #[test]
    fn computed_zero_is_sent_as_ffff() {
        // Choose the payload word so that the sum is 0xffff.
        let mut b = [0u8; 10];
        let mut p = UdpPacket::new_unchecked(&mut b[..]);
        p.set_src_port(1);
        p.set_dst_port(2);
        p.set_len(10);
        let mut acc = checksum::Accumulator::new();
        acc.add_sum(checksum::pseudo_header(SRC, DST, IpProtocol::Udp, 10));
        acc.add(&p.into_inner()[..]);
        let word = !acc.finish();
        b[8..10].copy_from_slice(&word.to_be_bytes());
        let mut p = UdpPacket::new_unchecked(&mut b[..]);
        p.fill_checksum(&SRC, &DST);
        assert_eq!(p.checksum(), 0xffff);
        assert!(p.verify_checksum(&SRC, &DST));
    }

    #[test]
    fn offload_leaves_pseudo_header_sum() {
        let r = UdpRepr {
            src_port: 1,
            dst_port: 2,
        };
        let mut b = vec![0u8; 8 + 3];
        let caps = ChecksumCaps {
            udp: crate::Checksum::Rx,
            ..ChecksumCaps::default()
        };
        r.emit(
            &mut UdpPacket::new_unchecked(&mut b[..]),
            &SRC,
            &DST,
            3,
            |p| p.copy_from_slice(b"abc"),
            &caps,
        );
        assert_eq!(
            UdpPacket::new_unchecked(&b[..]).checksum(),
            checksum::pseudo_header(SRC, DST, IpProtocol::Udp, 11)
        );
        // A port finishing the sum from offset 0 gets a valid packet.
        let s = !checksum::data(&b);
        b[6..8].copy_from_slice(&s.to_be_bytes());
        assert!(
            UdpPacket::new_checked(&b[..])
                .unwrap()
                .verify_checksum(&SRC, &DST)
        );
    }

    #[test]
    fn truncated_and_bad_lengths() {
        for n in 0..12 {
            assert!(UdpPacket::new_checked(&DGRAM[..n]).is_err(), "{n}");
            let p = UdpPacket::new_unchecked(&DGRAM[..n]);
            assert!(UdpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::ignored()).is_err());
            let _ = (p.payload(), p.verify_checksum(&SRC, &DST), p.checksum());
            let mut short = vec![0u8; n];
            UdpRepr {
                src_port: 1,
                dst_port: 2,
            }
            .emit(
                &mut UdpPacket::new_unchecked(&mut short[..]),
                &SRC,
                &DST,
                4,
                |p| p.fill(7),
                &ChecksumCaps::default(),
            );
        }
        let mut b = DGRAM;
        b[5] = 7; // length 7 < 8
        assert!(UdpPacket::new_checked(&b[..]).is_err());
        b[5] = 13; // beyond the buffer
        assert!(UdpPacket::new_checked(&b[..]).is_err());
        // Trailing bytes after the length field are not payload.
        let mut padded = [0u8; 30];
        padded[..12].copy_from_slice(&DGRAM);
        let p = UdpPacket::new_checked(&padded[..]).unwrap();
        assert_eq!(p.payload(), b"abcd");
        assert!(p.verify_checksum(&SRC, &DST));
        // Destination port 0.
        let mut b = DGRAM;
        b[2..4].fill(0);
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert!(UdpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::ignored()).is_err());
        // Empty payload.
        let mut b = [0u8; 8];
        b[3] = 9;
        b[5] = 8;
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert!(p.is_empty() && p.payload().is_empty());
    }

    proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let p = UdpPacket::new_unchecked(&bytes[..]);
            let _ = (p.payload(), p.verify_checksum(&SRC, &DST));
            let _ = UdpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::default());
            let _ = UdpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::ignored());
        }

        #[test]
        fn emit_parse_roundtrip(src_port in any::<u16>(), dst_port in 1u16.., src in any::<u32>(), dst in any::<u32>(),
                                payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let (s, d) = (Ipv4Address::from_bits(src), Ipv4Address::from_bits(dst));
            let r = UdpRepr { src_port, dst_port };
            let mut b = vec![0u8; r.header_len() + payload.len()];
            r.emit(&mut UdpPacket::new_unchecked(&mut b[..]), &s, &d, payload.len(),
                   |p| p.copy_from_slice(&payload), &ChecksumCaps::default());
            let p = UdpPacket::new_checked(&b[..]).unwrap();
            prop_assert!(p.checksum() != 0);
            prop_assert_eq!(UdpRepr::parse(&p, &s, &d, &ChecksumCaps::default()).unwrap(), r);
            prop_assert_eq!(p.payload(), &payload[..]);
        }
    }
}
