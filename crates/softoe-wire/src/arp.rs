//! ARP (RFC 826) for Ethernet and IPv4.

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
}

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
        if b.len() < 8 || b.len() < 8 + 2 * (self.hardware_len() + self.protocol_len()) {
            Err(Error)
        } else {
            Ok(())
        }
    }

    /// The buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn be16(&self, r: core::ops::Range<usize>) -> u16 {
        match self.buffer.as_ref().get(r) {
            Some(&[a, b]) => u16::from_be_bytes([a, b]),
            _ => 0,
        }
    }

    /// Hardware type (1 = Ethernet).
    pub fn hardware_type(&self) -> u16 {
        self.be16(field::HTYPE)
    }

    /// Protocol type (0x0800 = IPv4).
    pub fn protocol_type(&self) -> u16 {
        self.be16(field::PTYPE)
    }

    /// Hardware address length.
    pub fn hardware_len(&self) -> usize {
        usize::from(self.buffer.as_ref().get(field::HLEN).copied().unwrap_or(0))
    }

    /// Protocol address length.
    pub fn protocol_len(&self) -> usize {
        usize::from(self.buffer.as_ref().get(field::PLEN).copied().unwrap_or(0))
    }

    /// Operation.
    pub fn operation(&self) -> ArpOperation {
        ArpOperation::from(self.be16(field::OPER))
    }

    fn slice(&self, start: usize, len: usize) -> &[u8] {
        self.buffer.as_ref().get(start..start + len).unwrap_or(&[])
    }

    /// Sender hardware address bytes.
    pub fn source_hardware_addr(&self) -> &[u8] {
        self.slice(8, self.hardware_len())
    }

    /// Sender protocol address bytes.
    pub fn source_protocol_addr(&self) -> &[u8] {
        self.slice(8 + self.hardware_len(), self.protocol_len())
    }

    /// Target hardware address bytes.
    pub fn target_hardware_addr(&self) -> &[u8] {
        self.slice(
            8 + self.hardware_len() + self.protocol_len(),
            self.hardware_len(),
        )
    }

    /// Target protocol address bytes.
    pub fn target_protocol_addr(&self) -> &[u8] {
        self.slice(
            8 + 2 * self.hardware_len() + self.protocol_len(),
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
        self.put(0, &v.to_be_bytes());
    }
    /// Sets the protocol type.
    pub fn set_protocol_type(&mut self, v: u16) {
        self.put(2, &v.to_be_bytes());
    }
    /// Sets the hardware address length.
    pub fn set_hardware_len(&mut self, v: u8) {
        self.put(4, &[v]);
    }
    /// Sets the protocol address length.
    pub fn set_protocol_len(&mut self, v: u8) {
        self.put(5, &[v]);
    }
    /// Sets the operation.
    pub fn set_operation(&mut self, v: ArpOperation) {
        self.put(6, &u16::from(v).to_be_bytes());
    }
    /// Sets the sender hardware address.
    pub fn set_source_hardware_addr(&mut self, v: &[u8]) {
        self.put(8, v);
    }
    /// Sets the sender protocol address.
    pub fn set_source_protocol_addr(&mut self, v: &[u8]) {
        let at = 8 + self.hardware_len();
        self.put(at, v);
    }
    /// Sets the target hardware address.
    pub fn set_target_hardware_addr(&mut self, v: &[u8]) {
        let at = 8 + self.hardware_len() + self.protocol_len();
        self.put(at, v);
    }
    /// Sets the target protocol address.
    pub fn set_target_protocol_addr(&mut self, v: &[u8]) {
        let at = 8 + 2 * self.hardware_len() + self.protocol_len();
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
        if p.hardware_type() != 1
            || p.protocol_type() != 0x0800
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

    /// Writes the packet into a buffer of at least 28 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut ArpPacket<T>) {
        p.set_hardware_type(1);
        p.set_protocol_type(0x0800);
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

    const REQ: [u8; 28] = [
        0, 1, 0x08, 0, 6, 4, 0, 1, // Ethernet/IPv4 request
        2, 0, 0, 0, 0, 2, 10, 0, 0, 2, // sender
        0, 0, 0, 0, 0, 0, 10, 0, 0, 1, // target
    ];

    #[test]
    fn parse_and_emit() {
        let p = ArpPacket::new_checked(&REQ[..]).unwrap();
        let r = ArpRepr::parse(&p).unwrap();
        assert_eq!(r.operation, ArpOperation::Request);
        assert_eq!(r.source_protocol_addr, Ipv4Address::new(10, 0, 0, 2));
        assert_eq!(r.target_protocol_addr, Ipv4Address::new(10, 0, 0, 1));
        let mut out = [0u8; 28];
        r.emit(&mut ArpPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, REQ);
    }

    #[test]
    fn rejects_other_kinds_and_truncation() {
        assert!(ArpPacket::new_checked(&REQ[..27]).is_err());
        let mut b = REQ;
        b[5] = 16; // IPv6-sized protocol addresses: longer than the buffer
        assert!(ArpPacket::new_checked(&b[..]).is_err());
        let mut b = REQ;
        b[1] = 6; // not Ethernet
        assert!(ArpRepr::parse(&ArpPacket::new_checked(&b[..]).unwrap()).is_err());
        let mut b = REQ;
        b[7] = 9;
        let r = ArpRepr::parse(&ArpPacket::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(r.operation, ArpOperation::Unknown(9));
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            if let Ok(p) = ArpPacket::new_checked(&bytes[..]) {
                let _ = ArpRepr::parse(&p);
                let _ = (p.target_protocol_addr(), p.target_hardware_addr());
            }
        }
    }
}
