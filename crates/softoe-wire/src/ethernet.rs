//! Ethernet II frames, with 802.1Q tags read.
//!
//! The view's contract, as for every view in this crate: once
//! [`EthernetFrame::new_checked`] (or `check_len`) has passed, no accessor
//! panics; [`EthernetRepr::parse`] never panics; `emit` never panics into a
//! buffer of `buffer_len()` bytes.

use core::fmt;

use crate::error::{Error, Result};

/// A MAC address.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xff; 6]);

    /// The address in the first six bytes of `bytes`, if there are six.
    pub fn from_bytes(bytes: &[u8]) -> Option<EthernetAddress> {
        let b: [u8; 6] = bytes.get(..6)?.try_into().ok()?;
        Some(EthernetAddress(b))
    }

    /// The six bytes.
    pub const fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Not multicast (which includes broadcast).
    pub const fn is_unicast(&self) -> bool {
        self.0[0] & 0x01 == 0
    }

    /// Group bit set.
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// ff:ff:ff:ff:ff:ff.
    pub fn is_broadcast(&self) -> bool {
        *self == EthernetAddress::BROADCAST
    }

    /// Locally administered bit set.
    pub const fn is_local(&self) -> bool {
        self.0[0] & 0x02 != 0
    }
}

impl fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// EtherType.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EtherType {
    /// 0x0800.
    Ipv4,
    /// 0x0806.
    Arp,
    /// 0x8100: an 802.1Q tag follows.
    Vlan,
    /// Anything else, kept as is.
    Unknown(u16),
}

impl From<u16> for EtherType {
    fn from(v: u16) -> EtherType {
        match v {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x8100 => EtherType::Vlan,
            x => EtherType::Unknown(x),
        }
    }
}

impl From<EtherType> for u16 {
    fn from(v: EtherType) -> u16 {
        match v {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Vlan => 0x8100,
            EtherType::Unknown(x) => x,
        }
    }
}

mod field {
    use core::ops::Range;
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const ETHERTYPE: Range<usize> = 12..14;
    pub const TCI: Range<usize> = 14..16;
    pub const INNER_ETHERTYPE: Range<usize> = 16..18;
}

fn be16(b: &[u8], r: core::ops::Range<usize>) -> u16 {
    match b.get(r) {
        Some(&[x, y]) => u16::from_be_bytes([x, y]),
        _ => 0,
    }
}

/// A view of an Ethernet II frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Untagged header length.
    pub const HEADER_LEN: usize = 14;

    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> EthernetFrame<T> {
        EthernetFrame { buffer }
    }

    /// Wraps a buffer, checking it is long enough for its header.
    pub fn new_checked(buffer: T) -> Result<EthernetFrame<T>> {
        let f = EthernetFrame::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Checks the buffer holds the whole header (tag included).
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < Self::HEADER_LEN || len < self.header_len() {
            Err(Error)
        } else {
            Ok(())
        }
    }

    /// The buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn tagged(&self) -> bool {
        be16(self.buffer.as_ref(), field::ETHERTYPE) == 0x8100
    }

    /// 14, or 18 with an 802.1Q tag.
    pub fn header_len(&self) -> usize {
        if self.tagged() { 18 } else { 14 }
    }

    /// Destination address.
    pub fn dst_addr(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(self.buffer.as_ref().get(field::DST).unwrap_or(&[0; 6]))
            .unwrap_or_default()
    }

    /// Source address.
    pub fn src_addr(&self) -> EthernetAddress {
        EthernetAddress::from_bytes(self.buffer.as_ref().get(field::SRC).unwrap_or(&[0; 6]))
            .unwrap_or_default()
    }

    /// The EtherType of the payload (after an 802.1Q tag, if any).
    pub fn ethertype(&self) -> EtherType {
        let b = self.buffer.as_ref();
        if self.tagged() {
            EtherType::from(be16(b, field::INNER_ETHERTYPE))
        } else {
            EtherType::from(be16(b, field::ETHERTYPE))
        }
    }

    /// The 802.1Q tag control information, if the frame is tagged.
    pub fn vlan_tci(&self) -> Option<u16> {
        self.tagged()
            .then(|| be16(self.buffer.as_ref(), field::TCI))
    }

    /// The payload.
    pub fn payload(&self) -> &[u8] {
        self.buffer.as_ref().get(self.header_len()..).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    fn put(&mut self, r: core::ops::Range<usize>, v: &[u8]) {
        if let Some(d) = self.buffer.as_mut().get_mut(r) {
            d.copy_from_slice(v);
        }
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: EthernetAddress) {
        self.put(field::DST, &a.0);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: EthernetAddress) {
        self.put(field::SRC, &a.0);
    }

    /// Sets the (outer) EtherType.
    pub fn set_ethertype(&mut self, t: EtherType) {
        self.put(field::ETHERTYPE, &u16::from(t).to_be_bytes());
    }

    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let h = self.header_len();
        self.buffer.as_mut().get_mut(h..).unwrap_or(&mut [])
    }
}

/// An Ethernet header, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthernetRepr {
    /// Source.
    pub src_addr: EthernetAddress,
    /// Destination.
    pub dst_addr: EthernetAddress,
    /// EtherType of the payload.
    pub ethertype: EtherType,
    /// 802.1Q tag control information.
    pub vlan_tci: Option<u16>,
}

impl EthernetRepr {
    /// Parses a checked frame's header.
    pub fn parse<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> Result<EthernetRepr> {
        frame.check_len()?;
        Ok(EthernetRepr {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            ethertype: frame.ethertype(),
            vlan_tci: frame.vlan_tci(),
        })
    }

    /// Header length when emitted.
    pub const fn buffer_len(&self) -> usize {
        if self.vlan_tci.is_some() { 18 } else { 14 }
    }

    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut EthernetFrame<T>) {
        frame.set_dst_addr(self.dst_addr);
        frame.set_src_addr(self.src_addr);
        match self.vlan_tci {
            Some(tci) => {
                frame.set_ethertype(EtherType::Vlan);
                frame.put(field::TCI, &tci.to_be_bytes());
                frame.put(
                    field::INNER_ETHERTYPE,
                    &u16::from(self.ethertype).to_be_bytes(),
                );
            }
            None => frame.set_ethertype(self.ethertype),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    const FRAME: [u8; 18] = [
        0x02, 0, 0, 0, 0, 1, // dst
        0x02, 0, 0, 0, 0, 2, // src
        0x08, 0x00, // IPv4
        0xaa, 0xbb, 0xcc, 0xdd,
    ];

    #[test]
    fn deconstruct() {
        let f = EthernetFrame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(f.dst_addr(), EthernetAddress([2, 0, 0, 0, 0, 1]));
        assert_eq!(f.src_addr().to_string(), "02:00:00:00:00:02");
        assert_eq!(f.ethertype(), EtherType::Ipv4);
        assert_eq!(f.vlan_tci(), None);
        assert_eq!(f.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
    }

    #[test]
    fn vlan_tag_is_read() {
        let mut b = [0u8; 22];
        b[12..14].copy_from_slice(&[0x81, 0x00]);
        b[14..16].copy_from_slice(&[0x00, 0x05]);
        b[16..18].copy_from_slice(&[0x08, 0x06]);
        let f = EthernetFrame::new_checked(&b[..]).unwrap();
        assert_eq!(f.vlan_tci(), Some(5));
        assert_eq!(f.ethertype(), EtherType::Arp);
        assert_eq!(f.payload().len(), 4);
        let r = EthernetRepr::parse(&f).unwrap();
        let mut out = [0u8; 22];
        r.emit(&mut EthernetFrame::new_unchecked(&mut out[..]));
        assert_eq!(&out[..18], &b[..18]);
        // A tag without room for itself is truncated.
        assert!(EthernetFrame::new_checked(&b[..16]).is_err());
    }

    #[test]
    fn truncated_and_unknown() {
        assert!(EthernetFrame::new_checked(&FRAME[..13]).is_err());
        let mut b = FRAME;
        b[12..14].copy_from_slice(&[0x12, 0x34]);
        let f = EthernetFrame::new_checked(&b[..]).unwrap();
        assert_eq!(f.ethertype(), EtherType::Unknown(0x1234));
        assert_eq!(u16::from(f.ethertype()), 0x1234);
    }

    #[test]
    fn construct() {
        let mut b = [0u8; 14];
        let r = EthernetRepr {
            src_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
            dst_addr: EthernetAddress::BROADCAST,
            ethertype: EtherType::Arp,
            vlan_tci: None,
        };
        r.emit(&mut EthernetFrame::new_unchecked(&mut b[..]));
        assert_eq!(
            EthernetRepr::parse(&EthernetFrame::new_checked(&b[..]).unwrap()).unwrap(),
            r
        );
        assert!(
            EthernetAddress::BROADCAST.is_broadcast() && EthernetAddress::BROADCAST.is_multicast()
        );
        assert!(r.src_addr.is_unicast() && r.src_addr.is_local());
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            if let Ok(f) = EthernetFrame::new_checked(&bytes[..]) {
                let _ = EthernetRepr::parse(&f);
                let _ = f.payload();
            }
        }
    }
}
