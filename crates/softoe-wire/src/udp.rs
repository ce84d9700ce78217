//! UDP (RFC 768).

use crate::checksum::{self, ChecksumCaps};
use crate::error::{Error, Result};
use crate::ipv4::{IpProtocol, Ipv4Address};

/// Header length.
pub const HEADER_LEN: usize = 8;

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

    fn be16(&self, at: usize) -> u16 {
        match self.buffer.as_ref().get(at..at + 2) {
            Some(&[a, b]) => u16::from_be_bytes([a, b]),
            _ => 0,
        }
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        self.be16(0)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        self.be16(2)
    }
    /// Length field (header and payload).
    pub fn len(&self) -> u16 {
        self.be16(4)
    }
    /// Whether the length field says there is no payload.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        self.be16(6)
    }
    /// Payload, up to the length field.
    pub fn payload(&self) -> &[u8] {
        self.buffer
            .as_ref()
            .get(HEADER_LEN..usize::from(self.len()))
            .unwrap_or(&[])
    }

    /// Whether the checksum is right (a zero field means "none": true).
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
        self.set16(0, v);
    }
    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        self.set16(2, v);
    }
    /// Sets the length field.
    pub fn set_len(&mut self, v: u16) {
        self.set16(4, v);
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.set16(6, v);
    }
    /// Payload, mutably (to the end of the buffer).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        self.buffer
            .as_mut()
            .get_mut(HEADER_LEN..)
            .unwrap_or(&mut [])
    }
    /// Computes and stores the checksum (a computed 0 goes out as 0xffff).
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
    /// Parses a header; checksum verified when `caps.udp.rx()` and nonzero.
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

    /// Writes header and payload (`emit_payload` fills the payload). The
    /// checksum is filled when `caps.udp.tx()`; otherwise the field holds the
    /// pseudo-header sum, which is what a port with checksum offload needs.
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

    const SRC: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
    const DST: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);

    #[test]
    fn roundtrip_and_checksum() {
        let r = UdpRepr {
            src_port: 4000,
            dst_port: 53,
        };
        let mut b = [0u8; 8 + 5];
        r.emit(
            &mut UdpPacket::new_unchecked(&mut b[..]),
            &SRC,
            &DST,
            5,
            |p| p.copy_from_slice(b"hello"),
            &ChecksumCaps::default(),
        );
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum(&SRC, &DST));
        assert_eq!(
            UdpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::default()).unwrap(),
            r
        );
        assert_eq!(p.payload(), b"hello");
        assert!(!p.verify_checksum(&SRC, &Ipv4Address::new(10, 0, 0, 3)));
        // Zero checksum: none.
        b[6] = 0;
        b[7] = 0;
        assert!(
            UdpPacket::new_checked(&b[..])
                .unwrap()
                .verify_checksum(&SRC, &DST)
        );
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
    fn bad_lengths() {
        let mut b = [0u8; 12];
        b[3] = 1;
        b[5] = 7; // length 7 < 8
        assert!(UdpPacket::new_checked(&b[..]).is_err());
        b[5] = 13; // beyond buffer
        assert!(UdpPacket::new_checked(&b[..]).is_err());
        b[5] = 12;
        b[3] = 0; // dst port 0
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert!(UdpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::ignored()).is_err());
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..40)) {
            if let Ok(p) = UdpPacket::new_checked(&bytes[..]) {
                let _ = UdpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::default());
                let _ = p.payload();
            }
        }
    }
}
