//! ARP (RFC 826).
//!
//! [`ArpPacket`] reads any ARP packet, whatever its hardware and protocol
//! address lengths; [`ArpRepr`] is the one kind a stack on Ethernet and IPv4
//! speaks (hardware type 1, protocol type 0x0800, lengths 6 and 4).
//!
//! ## Contract
//!
//! Once [`ArpPacket::check_len`] (or `new_checked`) has passed — the 8-byte
//! fixed part and the four addresses its length fields declare — no accessor
//! panics (every accessor here is in fact total: an address that does not
//! fit reads as empty). [`ArpRepr::parse`] never panics on any bytes and
//! rejects anything but Ethernet/IPv4; [`ArpRepr::emit`] never panics into a
//! buffer of [`ArpRepr::buffer_len`] (28) bytes, nor into a shorter one.

use crate::bytes::{u8_at, u16_at};
use crate::error::{Error, Result};
use crate::ethernet::EthernetAddress;
use crate::ipv4::Ipv4Address;

/// ARP operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArpOperation {
    /// 1.
    Request,
    /// 2.
    Reply,
    /// Anything else.
    Unknown(u16),
}

impl From<u16> for ArpOperation {
    fn from(v: u16) -> ArpOperation {
        match v {
            1 => ArpOperation::Request,
            2 => ArpOperation::Reply,
            x => ArpOperation::Unknown(x),
        }
    }
}

impl From<ArpOperation> for u16 {
    fn from(v: ArpOperation) -> u16 {
        match v {
            ArpOperation::Request => 1,
            ArpOperation::Reply => 2,
            ArpOperation::Unknown(x) => x,
        }
    }
}

mod field {
    use core::ops::Range;
    pub const HTYPE: Range<usize> = 0..2;
    pub const PTYPE: Range<usize> = 2..4;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: Range<usize> = 6..8;
    /// The addresses follow, their lengths given by HLEN and PLEN.
    pub const ADDRS: usize = 8;
}

/// Hardware type of Ethernet.
pub const HARDWARE_ETHERNET: u16 = 1;

/// Protocol type of IPv4.
pub const PROTOCOL_IPV4: u16 = 0x0800;

/// A view of an ARP packet (any hardware and protocol address lengths).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> ArpPacket<T> {
        ArpPacket { buffer }
    }

    /// Wraps a buffer, checking its length against the lengths it declares.
    pub fn new_checked(buffer: T) -> Result<ArpPacket<T>> {
        let p = ArpPacket::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the buffer holds the fixed header and all four addresses.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < field::ADDRS
            || b.len() < field::ADDRS + 2 * (self.hardware_len() + self.protocol_len())
        {
            Err(Error)
        } else {
            Ok(())
        }
    }

    /// The buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Hardware type (1 = Ethernet).
    pub fn hardware_type(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::HTYPE.start)
    }

    /// Protocol type (0x0800 = IPv4).
    pub fn protocol_type(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::PTYPE.start)
    }

    /// Hardware address length.
    pub fn hardware_len(&self) -> usize {
        usize::from(u8_at(self.buffer.as_ref(), field::HLEN))
    }

    /// Protocol address length.
    pub fn protocol_len(&self) -> usize {
        usize::from(u8_at(self.buffer.as_ref(), field::PLEN))
    }

    /// Operation.
    pub fn operation(&self) -> ArpOperation {
        ArpOperation::from(u16_at(self.buffer.as_ref(), field::OPER.start))
    }

    fn slice(&self, start: usize, len: usize) -> &[u8] {
        self.buffer.as_ref().get(start..start + len).unwrap_or(&[])
    }

    /// Sender hardware address bytes.
    pub fn source_hardware_addr(&self) -> &[u8] {
        self.slice(field::ADDRS, self.hardware_len())
    }

    /// Sender protocol address bytes.
    pub fn source_protocol_addr(&self) -> &[u8] {
        self.slice(field::ADDRS + self.hardware_len(), self.protocol_len())
    }

    /// Target hardware address bytes.
    pub fn target_hardware_addr(&self) -> &[u8] {
        self.slice(
            field::ADDRS + self.hardware_len() + self.protocol_len(),
            self.hardware_len(),
        )
    }

    /// Target protocol address bytes.
    pub fn target_protocol_addr(&self) -> &[u8] {
        self.slice(
            field::ADDRS + 2 * self.hardware_len() + self.protocol_len(),
            self.protocol_len(),
        )
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    fn put(&mut self, start: usize, v: &[u8]) {
        if let Some(d) = self.buffer.as_mut().get_mut(start..start + v.len()) {
            d.copy_from_slice(v);
        }
    }

    /// Sets the hardware type.
    pub fn set_hardware_type(&mut self, v: u16) {
        self.put(field::HTYPE.start, &v.to_be_bytes());
    }

    /// Sets the protocol type.
    pub fn set_protocol_type(&mut self, v: u16) {
        self.put(field::PTYPE.start, &v.to_be_bytes());
    }

    /// Sets the hardware address length.
    pub fn set_hardware_len(&mut self, v: u8) {
        self.put(field::HLEN, &[v]);
    }

    /// Sets the protocol address length.
    pub fn set_protocol_len(&mut self, v: u8) {
        self.put(field::PLEN, &[v]);
    }

    /// Sets the operation.
    pub fn set_operation(&mut self, v: ArpOperation) {
        self.put(field::OPER.start, &u16::from(v).to_be_bytes());
    }

    /// Sets the sender hardware address (set the lengths first; its length
    /// should be the hardware length).
    pub fn set_source_hardware_addr(&mut self, v: &[u8]) {
        self.put(field::ADDRS, v);
    }

    /// Sets the sender protocol address.
    pub fn set_source_protocol_addr(&mut self, v: &[u8]) {
        let at = field::ADDRS + self.hardware_len();
        self.put(at, v);
    }

    /// Sets the target hardware address.
    pub fn set_target_hardware_addr(&mut self, v: &[u8]) {
        let at = field::ADDRS + self.hardware_len() + self.protocol_len();
        self.put(at, v);
    }

    /// Sets the target protocol address.
    pub fn set_target_protocol_addr(&mut self, v: &[u8]) {
        let at = field::ADDRS + 2 * self.hardware_len() + self.protocol_len();
        self.put(at, v);
    }
}

/// An Ethernet/IPv4 ARP packet, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpRepr {
    /// Request or reply.
    pub operation: ArpOperation,
    /// Sender MAC.
    pub source_hardware_addr: EthernetAddress,
    /// Sender IP.
    pub source_protocol_addr: Ipv4Address,
    /// Target MAC.
    pub target_hardware_addr: EthernetAddress,
    /// Target IP.
    pub target_protocol_addr: Ipv4Address,
}

impl ArpRepr {
    /// Parses an Ethernet/IPv4 ARP packet; anything else is an error.
    pub fn parse<T: AsRef<[u8]>>(p: &ArpPacket<T>) -> Result<ArpRepr> {
        p.check_len()?;
        if p.hardware_type() != HARDWARE_ETHERNET
            || p.protocol_type() != PROTOCOL_IPV4
            || p.hardware_len() != 6
            || p.protocol_len() != 4
        {
            return Err(Error);
        }
        Ok(ArpRepr {
            operation: p.operation(),
            source_hardware_addr: EthernetAddress::from_bytes(p.source_hardware_addr())
                .ok_or(Error)?,
            source_protocol_addr: Ipv4Address::from_bytes(p.source_protocol_addr()).ok_or(Error)?,
            target_hardware_addr: EthernetAddress::from_bytes(p.target_hardware_addr())
                .ok_or(Error)?,
            target_protocol_addr: Ipv4Address::from_bytes(p.target_protocol_addr()).ok_or(Error)?,
        })
    }

    /// 28 bytes.
    pub const fn buffer_len(&self) -> usize {
        28
    }

    /// Writes the packet into a buffer of at least 28 bytes (what does not
    /// fit in a shorter one is not written).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut ArpPacket<T>) {
        p.set_hardware_type(HARDWARE_ETHERNET);
        p.set_protocol_type(PROTOCOL_IPV4);
        p.set_hardware_len(6);
        p.set_protocol_len(4);
        p.set_operation(self.operation);
        p.set_source_hardware_addr(&self.source_hardware_addr.0);
        p.set_source_protocol_addr(&self.source_protocol_addr.0);
        p.set_target_hardware_addr(&self.target_hardware_addr.0);
        p.set_target_protocol_addr(&self.target_protocol_addr.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const REQ: [u8; 28] = [
        0, 1, 0x08, 0, 6, 4, 0, 1, // Ethernet/IPv4 request
        2, 0, 0, 0, 0, 2, 10, 0, 0, 2, // sender
        0, 0, 0, 0, 0, 0, 10, 0, 0, 1, // target
    ];

    fn req() -> ArpRepr {
        ArpRepr {
            operation: ArpOperation::Request,
            source_hardware_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
            source_protocol_addr: Ipv4Address::new(10, 0, 0, 2),
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: Ipv4Address::new(10, 0, 0, 1),
        }
    }

    #[test]
    fn deconstruct() {
        let p = ArpPacket::new_checked(&REQ[..]).unwrap();
        assert_eq!(p.hardware_type(), 1);
        assert_eq!(p.protocol_type(), 0x0800);
        assert_eq!((p.hardware_len(), p.protocol_len()), (6, 4));
        assert_eq!(p.operation(), ArpOperation::Request);
        assert_eq!(p.source_hardware_addr(), &[2, 0, 0, 0, 0, 2]);
        assert_eq!(p.source_protocol_addr(), &[10, 0, 0, 2]);
        assert_eq!(p.target_hardware_addr(), &[0; 6]);
        assert_eq!(p.target_protocol_addr(), &[10, 0, 0, 1]);
        assert_eq!(p.into_inner(), &REQ[..]);
    }

    #[test]
    fn construct() {
        let mut b = [0xffu8; 28];
        let mut p = ArpPacket::new_unchecked(&mut b[..]);
        p.set_hardware_type(1);
        p.set_protocol_type(0x0800);
        p.set_hardware_len(6);
        p.set_protocol_len(4);
        p.set_operation(ArpOperation::Request);
        p.set_source_hardware_addr(&[2, 0, 0, 0, 0, 2]);
        p.set_source_protocol_addr(&[10, 0, 0, 2]);
        p.set_target_hardware_addr(&[0; 6]);
        p.set_target_protocol_addr(&[10, 0, 0, 1]);
        assert_eq!(b, REQ);
    }

    #[test]
    fn parse_and_emit() {
        let p = ArpPacket::new_checked(&REQ[..]).unwrap();
        assert_eq!(ArpRepr::parse(&p).unwrap(), req());
        let mut out = [0u8; 28];
        assert_eq!(req().buffer_len(), 28);
        req().emit(&mut ArpPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, REQ);
        // Trailing bytes (Ethernet padding) are ignored.
        let mut padded = [0u8; 46];
        padded[..28].copy_from_slice(&REQ);
        assert_eq!(
            ArpRepr::parse(&ArpPacket::new_checked(&padded[..]).unwrap()).unwrap(),
            req()
        );
    }

    #[test]
    fn other_kinds_truncation_and_impossible_lengths() {
        for n in 0..28 {
            assert!(ArpPacket::new_checked(&REQ[..n]).is_err(), "{n}");
            assert!(ArpRepr::parse(&ArpPacket::new_unchecked(&REQ[..n])).is_err());
        }
        let mut b = REQ;
        b[5] = 16; // IPv6-sized protocol addresses: longer than the buffer
        assert!(ArpPacket::new_checked(&b[..]).is_err());
        let p = ArpPacket::new_unchecked(&b[..]);
        assert!(p.target_protocol_addr().is_empty());
        let mut b = [0u8; 8 + 2 * (255 + 255)];
        b[4] = 255;
        b[5] = 255;
        let p = ArpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(p.target_protocol_addr().len(), 255);
        assert!(ArpRepr::parse(&p).is_err());
        for (at, v) in [(1, 6), (2, 0x86), (4, 8), (5, 6)] {
            let mut b = [0u8; 40];
            b[..28].copy_from_slice(&REQ);
            b[at] = v; // not Ethernet, not IPv4, wrong lengths
            assert!(
                ArpRepr::parse(&ArpPacket::new_checked(&b[..]).unwrap()).is_err(),
                "{at}"
            );
        }
        // Unknown operations round-trip.
        let mut b = REQ;
        b[7] = 9;
        let r = ArpRepr::parse(&ArpPacket::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(r.operation, ArpOperation::Unknown(9));
        let mut out = [0u8; 28];
        r.emit(&mut ArpPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
        assert_eq!(u16::from(ArpOperation::from(2)), 2);
        // Emitting into a short buffer writes what fits.
        let mut short = [0u8; 10];
        req().emit(&mut ArpPacket::new_unchecked(&mut short[..]));
        assert_eq!(&short[..8], &REQ[..8]);
    }

    proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let p = ArpPacket::new_unchecked(&bytes[..]);
            let _ = (p.source_hardware_addr(), p.source_protocol_addr(),
                     p.target_hardware_addr(), p.target_protocol_addr(), p.operation());
            let _ = ArpRepr::parse(&p);
        }

        #[test]
        fn emit_parse_roundtrip(op in any::<u16>(), sha in any::<[u8; 6]>(), spa in any::<[u8; 4]>(),
                                tha in any::<[u8; 6]>(), tpa in any::<[u8; 4]>()) {
            let r = ArpRepr {
                operation: ArpOperation::from(op),
                source_hardware_addr: EthernetAddress(sha),
                source_protocol_addr: Ipv4Address(spa),
                target_hardware_addr: EthernetAddress(tha),
                target_protocol_addr: Ipv4Address(tpa),
            };
            let mut b = [0u8; 28];
            r.emit(&mut ArpPacket::new_unchecked(&mut b[..]));
            prop_assert_eq!(ArpRepr::parse(&ArpPacket::new_checked(&b[..]).unwrap()).unwrap(), r);
        }
    }
}
