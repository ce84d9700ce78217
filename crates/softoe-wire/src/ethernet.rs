//! Ethernet II frames, with 802.1Q VLAN tags.
//!
//! [`EthernetFrame`] is a view over a frame's bytes (destination, source,
//! EtherType, payload; no FCS). A frame whose outer EtherType is 0x8100
//! carries an 802.1Q tag: its header is 18 bytes, [`EthernetFrame::vlan_tci`]
//! is the tag control information and [`EthernetFrame::ethertype`] the
//! EtherType after the tag, so a stack that ignores VLANs reads a tagged frame
//! like an untagged one.
//!
//! ## Contract
//!
//! As for every view in this crate: once [`EthernetFrame::check_len`] (or
//! `new_checked`) has passed — at least 14 bytes, 18 when tagged — no
//! accessor panics (every accessor here is in fact total).
//! [`EthernetRepr::parse`] never panics on any bytes; [`EthernetRepr::emit`]
//! never panics into a buffer of [`EthernetRepr::buffer_len`] bytes (nor into
//! a shorter one: what does not fit is not written).

use core::fmt;

use crate::bytes::u16_at;
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
        u16_at(self.buffer.as_ref(), field::ETHERTYPE.start) == 0x8100
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
            EtherType::from(u16_at(b, field::INNER_ETHERTYPE.start))
        } else {
            EtherType::from(u16_at(b, field::ETHERTYPE.start))
        }
    }

    /// The 802.1Q tag control information, if the frame is tagged.
    pub fn vlan_tci(&self) -> Option<u16> {
        self.tagged()
            .then(|| u16_at(self.buffer.as_ref(), field::TCI.start))
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

    /// Sets the outer EtherType (the EtherType of an untagged frame).
    pub fn set_ethertype(&mut self, t: EtherType) {
        self.put(field::ETHERTYPE, &u16::from(t).to_be_bytes());
    }

    /// Tags the frame (outer EtherType 0x8100, then `tci`) or, with `None`,
    /// leaves the outer EtherType for [`set_ethertype`](Self::set_ethertype).
    /// Tagging moves the payload start to byte 18 and overwrites what was
    /// there; set the inner EtherType with
    /// [`set_inner_ethertype`](Self::set_inner_ethertype).
    pub fn set_vlan_tci(&mut self, tci: Option<u16>) {
        if let Some(tci) = tci {
            self.set_ethertype(EtherType::Vlan);
            self.put(field::TCI, &tci.to_be_bytes());
        }
    }

    /// Sets the EtherType after the 802.1Q tag of a tagged frame.
    pub fn set_inner_ethertype(&mut self, t: EtherType) {
        self.put(field::INNER_ETHERTYPE, &u16::from(t).to_be_bytes());
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
    /// Parses a frame's header (checking its length first).
    pub fn parse<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> Result<EthernetRepr> {
        frame.check_len()?;
        Ok(EthernetRepr {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            ethertype: frame.ethertype(),
            vlan_tci: frame.vlan_tci(),
        })
    }

    /// Header length when emitted: 14, or 18 with a tag.
    pub const fn buffer_len(&self) -> usize {
        if self.vlan_tci.is_some() { 18 } else { 14 }
    }

    /// Writes the header (with the 802.1Q tag when `vlan_tci` is set) into
    /// a buffer of at least [`buffer_len`](Self::buffer_len) bytes; the
    /// payload is not touched. (An untagged `EtherType::Vlan` makes a frame
    /// that reads back as tagged: it is the caller's to avoid.)
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut EthernetFrame<T>) {
        frame.set_dst_addr(self.dst_addr);
        frame.set_src_addr(self.src_addr);
        match self.vlan_tci {
            Some(tci) => {
                frame.set_vlan_tci(Some(tci));
                frame.set_inner_ethertype(self.ethertype);
            }
            None => frame.set_ethertype(self.ethertype),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::string::ToString;
    use alloc::vec;
    use proptest::prelude::*;

    const FRAME: [u8; 18] = [
        0x02, 0, 0, 0, 0, 1, // dst
        0x02, 0, 0, 0, 0, 2, // src
        0x08, 0x00, // IPv4
        0xaa, 0xbb, 0xcc, 0xdd, // payload
    ];

    const TAGGED: [u8; 20] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // dst
        0x02, 0, 0, 0, 0, 2, // src
        0x81, 0x00, 0x20, 0x05, // 802.1Q: PCP 1, VID 5
        0x08, 0x06, // ARP
        0x01, 0x02, // payload
    ];

    #[test]
    fn deconstruct() {
        let f = EthernetFrame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(f.header_len(), 14);
        assert_eq!(f.dst_addr(), EthernetAddress([2, 0, 0, 0, 0, 1]));
        assert_eq!(f.src_addr().to_string(), "02:00:00:00:00:02");
        assert_eq!(f.ethertype(), EtherType::Ipv4);
        assert_eq!(f.vlan_tci(), None);
        assert_eq!(f.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(f.into_inner(), &FRAME[..]);
    }

    #[test]
    fn construct() {
        let mut b = [0u8; 18];
        let mut f = EthernetFrame::new_unchecked(&mut b[..]);
        f.set_dst_addr(EthernetAddress([2, 0, 0, 0, 0, 1]));
        f.set_src_addr(EthernetAddress([2, 0, 0, 0, 0, 2]));
        f.set_ethertype(EtherType::Ipv4);
        f.payload_mut().copy_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(b, FRAME);
    }

    #[test]
    fn vlan_tag() {
        let f = EthernetFrame::new_checked(&TAGGED[..]).unwrap();
        assert_eq!(f.header_len(), 18);
        assert_eq!(f.vlan_tci(), Some(0x2005));
        assert_eq!(f.ethertype(), EtherType::Arp);
        assert_eq!(f.payload(), &[1, 2]);
        let r = EthernetRepr::parse(&f).unwrap();
        assert_eq!(r.buffer_len(), 18);
        let mut out = [0u8; 20];
        r.emit(&mut EthernetFrame::new_unchecked(&mut out[..]));
        out[18..].copy_from_slice(&TAGGED[18..]);
        assert_eq!(out, TAGGED);
        // Built with the setters.
        let mut b = [0u8; 20];
        let mut f = EthernetFrame::new_unchecked(&mut b[..]);
        f.set_dst_addr(EthernetAddress::BROADCAST);
        f.set_src_addr(EthernetAddress([2, 0, 0, 0, 0, 2]));
        f.set_vlan_tci(Some(0x2005));
        f.set_inner_ethertype(EtherType::Arp);
        f.payload_mut().copy_from_slice(&[1, 2]);
        assert_eq!(b, TAGGED);
    }

    #[test]
    fn truncated() {
        for n in 0..14 {
            assert!(EthernetFrame::new_checked(&FRAME[..n]).is_err(), "{n}");
            assert!(EthernetRepr::parse(&EthernetFrame::new_unchecked(&FRAME[..n])).is_err());
        }
        assert!(EthernetFrame::new_checked(&FRAME[..14]).is_ok());
        // A tag without room for itself.
        for n in 14..18 {
            assert!(EthernetFrame::new_checked(&TAGGED[..n]).is_err(), "{n}");
        }
        assert_eq!(
            EthernetFrame::new_checked(&TAGGED[..18]).unwrap().payload(),
            &[]
        );
        // Unchecked views answer anyway.
        let f = EthernetFrame::new_unchecked(&TAGGED[..15]);
        let _ = (
            f.dst_addr(),
            f.src_addr(),
            f.ethertype(),
            f.vlan_tci(),
            f.payload(),
        );
        let mut short = [0u8; 3];
        let mut f = EthernetFrame::new_unchecked(&mut short[..]);
        f.set_src_addr(EthernetAddress::BROADCAST);
        f.set_vlan_tci(Some(1));
        assert!(f.payload_mut().is_empty());
    }

    #[test]
    fn unknown_ethertypes_round_trip() {
        let mut b = FRAME;
        b[12..14].copy_from_slice(&[0x86, 0xdd]);
        let f = EthernetFrame::new_checked(&b[..]).unwrap();
        assert_eq!(f.ethertype(), EtherType::Unknown(0x86dd));
        assert_eq!(u16::from(f.ethertype()), 0x86dd);
        for v in [0x0800u16, 0x0806, 0x8100, 0, 0xffff] {
            assert_eq!(u16::from(EtherType::from(v)), v);
        }
    }

    #[test]
    fn addresses() {
        let a = EthernetAddress([0x02, 0xab, 0, 0, 0, 0x01]);
        assert_eq!(a.to_string(), "02:ab:00:00:00:01");
        assert_eq!(format!("{a:?}"), "02:ab:00:00:00:01");
        assert!(a.is_unicast() && a.is_local() && !a.is_multicast() && !a.is_broadcast());
        assert_eq!(a.as_bytes(), &[0x02, 0xab, 0, 0, 0, 1]);
        let m = EthernetAddress([0x01, 0x00, 0x5e, 0, 0, 1]);
        assert!(m.is_multicast() && !m.is_unicast() && !m.is_broadcast() && !m.is_local());
        let b = EthernetAddress::BROADCAST;
        assert!(b.is_broadcast() && b.is_multicast());
        assert_eq!(EthernetAddress::from_bytes(&[1, 2, 3, 4, 5]), None);
        assert_eq!(
            EthernetAddress::from_bytes(&[1, 2, 3, 4, 5, 6, 7]),
            Some(EthernetAddress([1, 2, 3, 4, 5, 6]))
        );
        assert_eq!(EthernetAddress::default(), EthernetAddress([0; 6]));
    }

    proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let f = EthernetFrame::new_unchecked(&bytes[..]);
            let _ = (f.dst_addr(), f.src_addr(), f.ethertype(), f.vlan_tci(), f.payload());
            if let Ok(f) = EthernetFrame::new_checked(&bytes[..]) {
                let r = EthernetRepr::parse(&f).unwrap();
                prop_assert_eq!(r.buffer_len(), f.header_len());
            }
        }

        #[test]
        fn emit_parse_roundtrip(src in any::<[u8; 6]>(), dst in any::<[u8; 6]>(), ty in any::<u16>(),
                                tci in proptest::option::of(any::<u16>()), payload in 0usize..8) {
            let ethertype = EtherType::from(ty);
            prop_assume!(tci.is_some() || ethertype != EtherType::Vlan);
            let r = EthernetRepr { src_addr: EthernetAddress(src), dst_addr: EthernetAddress(dst), ethertype, vlan_tci: tci };
            let mut b = vec![0u8; r.buffer_len() + payload];
            r.emit(&mut EthernetFrame::new_unchecked(&mut b[..]));
            let f = EthernetFrame::new_checked(&b[..]).unwrap();
            prop_assert_eq!(EthernetRepr::parse(&f).unwrap(), r);
            prop_assert_eq!(f.payload().len(), payload);
        }
    }
}
