//! IPv4 (RFC 791): addresses, prefixes, protocol numbers, and the packet
//! header.
//!
//! Options are skipped (the payload starts at the header length), fragments
//! are recognised ([`Ipv4Packet::is_fragment`]) so a stack can count and drop
//! them, and the payload ends at the total length, not at the end of the
//! buffer (Ethernet pads short frames to 60 bytes).
//!
//! ## Contract
//!
//! Once [`Ipv4Packet::check_len`] (or `new_checked`) has passed — at least
//! 20 bytes, and 20 ≤ header length ≤ total length ≤ buffer length — no
//! accessor panics (every accessor here is in fact total).
//! [`Ipv4Repr::parse`] never panics on any bytes; it rejects a version other
//! than 4 and, when `caps.ipv4.rx()`, a bad header checksum.
//! [`Ipv4Repr::emit`] never panics into a buffer of
//! [`Ipv4Repr::buffer_len`] (20) bytes, nor into a shorter one.

use core::fmt;
use core::str::FromStr;

use crate::bytes::{u8_at, u16_at};
use crate::checksum::{self, ChecksumCaps};
use crate::error::{Error, Result};

/// An IPv4 address.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Ipv4Address(pub [u8; 4]);

impl Ipv4Address {
    /// 0.0.0.0.
    pub const UNSPECIFIED: Ipv4Address = Ipv4Address([0; 4]);
    /// 255.255.255.255.
    pub const BROADCAST: Ipv4Address = Ipv4Address([255; 4]);

    /// a.b.c.d.
    pub const fn new(a: u8, b: u8, c: u8, d: u8) -> Ipv4Address {
        Ipv4Address([a, b, c, d])
    }

    /// The address in the first four bytes of `bytes`, if there are four.
    pub fn from_bytes(bytes: &[u8]) -> Option<Ipv4Address> {
        Some(Ipv4Address(bytes.get(..4)?.try_into().ok()?))
    }

    /// The four bytes.
    pub const fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// As a host-order integer.
    pub const fn to_bits(self) -> u32 {
        u32::from_be_bytes(self.0)
    }

    /// From a host-order integer.
    pub const fn from_bits(bits: u32) -> Ipv4Address {
        Ipv4Address(bits.to_be_bytes())
    }

    /// 0.0.0.0.
    pub const fn is_unspecified(&self) -> bool {
        self.to_bits() == 0
    }

    /// 255.255.255.255.
    pub const fn is_broadcast(&self) -> bool {
        self.to_bits() == u32::MAX
    }

    /// 224.0.0.0/4.
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0xf0 == 0xe0
    }

    /// 127.0.0.0/8.
    pub const fn is_loopback(&self) -> bool {
        self.0[0] == 127
    }

    /// 169.254.0.0/16.
    pub const fn is_link_local(&self) -> bool {
        self.0[0] == 169 && self.0[1] == 254
    }

    /// Neither unspecified, broadcast nor multicast.
    pub const fn is_unicast(&self) -> bool {
        !(self.is_unspecified() || self.is_broadcast() || self.is_multicast())
    }
}

impl From<[u8; 4]> for Ipv4Address {
    fn from(b: [u8; 4]) -> Ipv4Address {
        Ipv4Address(b)
    }
}

impl fmt::Display for Ipv4Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}.{}", self.0[0], self.0[1], self.0[2], self.0[3])
    }
}

impl fmt::Debug for Ipv4Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A decimal number of 1 to `max_digits` ASCII digits, without a leading
/// zero unless it is `0`.
fn decimal(s: &str, max_digits: usize) -> Result<u32> {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > max_digits || (b.len() > 1 && b[0] == b'0') {
        return Err(Error);
    }
    b.iter().try_fold(0u32, |acc, &d| {
        if d.is_ascii_digit() {
            Ok(acc * 10 + u32::from(d - b'0'))
        } else {
            Err(Error)
        }
    })
}

impl FromStr for Ipv4Address {
    type Err = Error;
    /// A strict dotted quad: four decimal octets of one to three digits,
    /// no leading zeros (they would read as octal elsewhere), no sign, no
    /// spaces.
    fn from_str(s: &str) -> Result<Ipv4Address> {
        let mut out = [0u8; 4];
        let mut parts = s.split('.');
        for o in &mut out {
            *o = decimal(parts.next().ok_or(Error)?, 3)?
                .try_into()
                .map_err(|_| Error)?;
        }
        if parts.next().is_some() {
            return Err(Error);
        }
        Ok(Ipv4Address(out))
    }
}

/// An address with a prefix length, e.g. 10.0.0.1/24.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Ipv4Cidr {
    address: Ipv4Address,
    prefix_len: u8,
}

impl Ipv4Cidr {
    /// `address/prefix_len`; `None` if the prefix is longer than 32.
    pub const fn new(address: Ipv4Address, prefix_len: u8) -> Option<Ipv4Cidr> {
        if prefix_len > 32 {
            None
        } else {
            Some(Ipv4Cidr {
                address,
                prefix_len,
            })
        }
    }

    /// The address.
    pub const fn address(&self) -> Ipv4Address {
        self.address
    }

    /// The prefix length.
    pub const fn prefix_len(&self) -> u8 {
        self.prefix_len
    }

    /// The netmask.
    pub const fn netmask(&self) -> Ipv4Address {
        let bits = if self.prefix_len == 0 {
            0
        } else {
            u32::MAX << (32 - self.prefix_len as u32)
        };
        Ipv4Address::from_bits(bits)
    }

    /// The network address.
    pub const fn network(&self) -> Ipv4Address {
        Ipv4Address::from_bits(self.address.to_bits() & self.netmask().to_bits())
    }

    /// The directed broadcast address (none for /31 and /32).
    pub const fn broadcast(&self) -> Option<Ipv4Address> {
        if self.prefix_len >= 31 {
            None
        } else {
            Some(Ipv4Address::from_bits(
                self.address.to_bits() | !self.netmask().to_bits(),
            ))
        }
    }

    /// Whether `addr` is inside the prefix.
    pub const fn contains_addr(&self, addr: &Ipv4Address) -> bool {
        let m = self.netmask().to_bits();
        addr.to_bits() & m == self.address.to_bits() & m
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix_len)
    }
}

impl FromStr for Ipv4Cidr {
    type Err = Error;
    fn from_str(s: &str) -> Result<Ipv4Cidr> {
        let (a, p) = s.split_once('/').ok_or(Error)?;
        let prefix = decimal(p, 2)?.try_into().map_err(|_| Error)?;
        Ipv4Cidr::new(a.parse()?, prefix).ok_or(Error)
    }
}

/// IP protocol numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpProtocol {
    /// 1.
    Icmp,
    /// 6.
    Tcp,
    /// 17.
    Udp,
    /// Anything else.
    Unknown(u8),
}

impl From<u8> for IpProtocol {
    fn from(v: u8) -> IpProtocol {
        match v {
            1 => IpProtocol::Icmp,
            6 => IpProtocol::Tcp,
            17 => IpProtocol::Udp,
            x => IpProtocol::Unknown(x),
        }
    }
}

impl From<IpProtocol> for u8 {
    fn from(v: IpProtocol) -> u8 {
        match v {
            IpProtocol::Icmp => 1,
            IpProtocol::Tcp => 6,
            IpProtocol::Udp => 17,
            IpProtocol::Unknown(x) => x,
        }
    }
}

mod field {
    use core::ops::Range;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..6;
    pub const FLG_OFF: Range<usize> = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Range<usize> = 10..12;
    pub const SRC: Range<usize> = 12..16;
    pub const DST: Range<usize> = 16..20;
}

/// Minimum (option-less) header length.
pub const HEADER_LEN: usize = 20;

/// A view of an IPv4 packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Ipv4Packet<T> {
        Ipv4Packet { buffer }
    }

    /// Wraps a buffer and checks its lengths.
    pub fn new_checked(buffer: T) -> Result<Ipv4Packet<T>> {
        let p = Ipv4Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks: at least 20 bytes; 20 ≤ header length ≤ total length ≤ buffer.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error);
        }
        let hl = self.header_len();
        let tl = usize::from(self.total_len());
        if hl < HEADER_LEN || hl > tl || tl > len {
            return Err(Error);
        }
        Ok(())
    }

    /// The buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version field.
    pub fn version(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::VER_IHL) >> 4
    }

    /// Header length in bytes.
    pub fn header_len(&self) -> usize {
        usize::from(u8_at(self.buffer.as_ref(), field::VER_IHL) & 0x0f) * 4
    }

    /// DSCP.
    pub fn dscp(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::DSCP_ECN) >> 2
    }

    /// ECN.
    pub fn ecn(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::DSCP_ECN) & 0x03
    }

    /// Total length (header and payload).
    pub fn total_len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// Identification.
    pub fn ident(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::IDENT.start)
    }

    /// Don't Fragment.
    pub fn dont_frag(&self) -> bool {
        u16_at(self.buffer.as_ref(), field::FLG_OFF.start) & 0x4000 != 0
    }

    /// More Fragments.
    pub fn more_frags(&self) -> bool {
        u16_at(self.buffer.as_ref(), field::FLG_OFF.start) & 0x2000 != 0
    }

    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (u16_at(self.buffer.as_ref(), field::FLG_OFF.start) & 0x1fff) << 3
    }

    /// Part of a fragmented datagram.
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    /// Time to live.
    pub fn hop_limit(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::TTL)
    }

    /// Protocol of the payload.
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol::from(u8_at(self.buffer.as_ref(), field::PROTOCOL))
    }

    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv4Address {
        Ipv4Address::from_bytes(self.buffer.as_ref().get(field::SRC).unwrap_or(&[0; 4]))
            .unwrap_or_default()
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Address {
        Ipv4Address::from_bytes(self.buffer.as_ref().get(field::DST).unwrap_or(&[0; 4]))
            .unwrap_or_default()
    }

    /// Whether the header checksum is right.
    pub fn verify_checksum(&self) -> bool {
        let h = self.buffer.as_ref().get(..self.header_len()).unwrap_or(&[]);
        checksum::data(h) == 0xffff
    }

    /// The payload: from the header length to the total length.
    pub fn payload(&self) -> &[u8] {
        self.buffer
            .as_ref()
            .get(self.header_len()..usize::from(self.total_len()))
            .unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    fn set_byte(&mut self, i: usize, v: u8) {
        if let Some(b) = self.buffer.as_mut().get_mut(i) {
            *b = v;
        }
    }

    fn set16(&mut self, r: core::ops::Range<usize>, v: u16) {
        if let Some(b) = self.buffer.as_mut().get_mut(r) {
            b.copy_from_slice(&v.to_be_bytes());
        }
    }

    /// Sets the version and the header length (bytes, a multiple of 4 from
    /// 20 to 60).
    pub fn set_version_and_header_len(&mut self, version: u8, header_len: usize) {
        self.set_byte(
            field::VER_IHL,
            (version << 4) | ((header_len / 4) as u8 & 0x0f),
        );
    }
    /// Sets the version (4 bits).
    pub fn set_version(&mut self, version: u8) {
        let b = u8_at(self.buffer.as_ref(), field::VER_IHL);
        self.set_byte(field::VER_IHL, (version << 4) | (b & 0x0f));
    }
    /// Sets the header length (bytes, a multiple of 4 from 20 to 60).
    pub fn set_header_len(&mut self, header_len: usize) {
        let b = u8_at(self.buffer.as_ref(), field::VER_IHL);
        self.set_byte(field::VER_IHL, (b & 0xf0) | ((header_len / 4) as u8 & 0x0f));
    }
    /// Sets DSCP and ECN.
    pub fn set_dscp_ecn(&mut self, dscp: u8, ecn: u8) {
        self.set_byte(field::DSCP_ECN, (dscp << 2) | (ecn & 3));
    }
    /// Sets the DSCP (6 bits).
    pub fn set_dscp(&mut self, dscp: u8) {
        let ecn = self.ecn();
        self.set_dscp_ecn(dscp, ecn);
    }
    /// Sets the ECN field (2 bits).
    pub fn set_ecn(&mut self, ecn: u8) {
        let dscp = self.dscp();
        self.set_dscp_ecn(dscp, ecn);
    }
    /// Sets Don't Fragment.
    pub fn set_dont_frag(&mut self, on: bool) {
        let (mf, off) = (self.more_frags(), self.frag_offset());
        self.set_flags_and_offset(on, mf, off);
    }
    /// Sets More Fragments.
    pub fn set_more_frags(&mut self, on: bool) {
        let (df, off) = (self.dont_frag(), self.frag_offset());
        self.set_flags_and_offset(df, on, off);
    }
    /// Sets the fragment offset (bytes, a multiple of 8).
    pub fn set_frag_offset(&mut self, offset: u16) {
        let (df, mf) = (self.dont_frag(), self.more_frags());
        self.set_flags_and_offset(df, mf, offset);
    }
    /// Sets the total length.
    pub fn set_total_len(&mut self, v: u16) {
        self.set16(field::LENGTH, v);
    }
    /// Sets the identification.
    pub fn set_ident(&mut self, v: u16) {
        self.set16(field::IDENT, v);
    }
    /// Sets DF, MF and the fragment offset (bytes, multiple of 8).
    pub fn set_flags_and_offset(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        let v =
            (u16::from(dont_frag) << 14) | (u16::from(more_frags) << 13) | ((offset >> 3) & 0x1fff);
        self.set16(field::FLG_OFF, v);
    }
    /// Sets the TTL.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.set_byte(field::TTL, v);
    }
    /// Sets the protocol.
    pub fn set_next_header(&mut self, v: IpProtocol) {
        self.set_byte(field::PROTOCOL, u8::from(v));
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.set16(field::CHECKSUM, v);
    }
    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Ipv4Address) {
        if let Some(b) = self.buffer.as_mut().get_mut(field::SRC) {
            b.copy_from_slice(&a.0);
        }
    }
    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv4Address) {
        if let Some(b) = self.buffer.as_mut().get_mut(field::DST) {
            b.copy_from_slice(&a.0);
        }
    }
    /// Computes and stores the header checksum (over the header length).
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let sum = checksum::data(self.buffer.as_ref().get(..hl).unwrap_or(&[]));
        self.set_checksum(!sum);
    }
    /// The payload, mutably: from the header length to the end of the
    /// buffer (unlike [`payload`](Ipv4Packet::payload), which stops at the
    /// total length), so it can be written before or after the total length
    /// is set.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        self.buffer.as_mut().get_mut(hl..).unwrap_or(&mut [])
    }
}

/// An IPv4 header, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source.
    pub src_addr: Ipv4Address,
    /// Destination.
    pub dst_addr: Ipv4Address,
    /// Payload protocol.
    pub next_header: IpProtocol,
    /// Payload length.
    pub payload_len: usize,
    /// TTL.
    pub hop_limit: u8,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment.
    pub dont_frag: bool,
}

impl Ipv4Repr {
    /// Parses a header (checking its lengths first): the version must be 4,
    /// and the header checksum is verified when `caps.ipv4.rx()`. Options are
    /// skipped. Fragments parse fine: callers check
    /// [`Ipv4Packet::is_fragment`] on the view.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>, caps: &ChecksumCaps) -> Result<Ipv4Repr> {
        p.check_len()?;
        if p.version() != 4 {
            return Err(Error);
        }
        if caps.ipv4.rx() && !p.verify_checksum() {
            return Err(Error);
        }
        Ok(Ipv4Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            next_header: p.next_header(),
            payload_len: usize::from(p.total_len()) - p.header_len(),
            hop_limit: p.hop_limit(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
        })
    }

    /// 20: no options are emitted.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes a 20-byte header, without options: total length = 20 +
    /// `payload_len` (saturating at 65,535, which a 65,515-byte payload
    /// reaches), DSCP/ECN zero, DF as given, not a fragment; the checksum is
    /// computed when `caps.ipv4.tx()`, else left zero for the port.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Ipv4Packet<T>, caps: &ChecksumCaps) {
        p.set_version_and_header_len(4, HEADER_LEN);
        p.set_dscp_ecn(0, 0);
        p.set_total_len((HEADER_LEN + self.payload_len).min(65_535) as u16);
        p.set_ident(self.ident);
        p.set_flags_and_offset(self.dont_frag, false, 0);
        p.set_hop_limit(self.hop_limit);
        p.set_next_header(self.next_header);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
        if caps.ipv4.tx() {
            p.fill_checksum();
        } else {
            p.set_checksum(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::string::ToString;
    use alloc::vec;

    const PKT: [u8; 24] = [
        0x45, 0x00, 0x00, 0x18, // v4, ihl 5, len 24
        0x12, 0x34, 0x40, 0x00, // ident, DF
        0x40, 0x06, 0x00, 0x00, // ttl 64, TCP, checksum (filled below)
        10, 0, 0, 1, 10, 0, 0, 2, 0xde, 0xad, 0xbe, 0xef,
    ];

    fn pkt() -> [u8; 24] {
        let mut b = PKT;
        Ipv4Packet::new_unchecked(&mut b[..]).fill_checksum();
        b
    }

    #[test]
    fn deconstruct_and_roundtrip() {
        let b = pkt();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        let r = Ipv4Repr::parse(&p, &ChecksumCaps::default()).unwrap();
        assert_eq!(r.payload_len, 4);
        assert_eq!(r.next_header, IpProtocol::Tcp);
        assert!(r.dont_frag && !p.is_fragment());
        let mut out = [0u8; 24];
        r.emit(
            &mut Ipv4Packet::new_unchecked(&mut out[..]),
            &ChecksumCaps::default(),
        );
        out[20..].copy_from_slice(&b[20..]);
        assert_eq!(&out[..], &b[..]);
    }

    #[test]
    fn padding_options_fragments_and_bad_lengths() {
        // Trailing Ethernet padding is not payload.
        let mut padded = [0u8; 60];
        padded[..24].copy_from_slice(&pkt());
        let p = Ipv4Packet::new_checked(&padded[..]).unwrap();
        assert_eq!(p.payload().len(), 4);
        // Bad checksum.
        let mut b = pkt();
        b[8] = 1;
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(Ipv4Repr::parse(&p, &ChecksumCaps::default()).is_err());
        assert!(Ipv4Repr::parse(&p, &ChecksumCaps::ignored()).is_ok());
        // Total length beyond the buffer; header length below 20 or above total.
        let mut b = pkt();
        b[3] = 200;
        assert!(Ipv4Packet::new_checked(&b[..]).is_err());
        let mut b = pkt();
        b[0] = 0x44;
        assert!(Ipv4Packet::new_checked(&b[..]).is_err());
        let mut b = pkt();
        b[0] = 0x47; // 28-byte header in a 24-byte packet
        assert!(Ipv4Packet::new_checked(&b[..]).is_err());
        // Options: header of 24 bytes, payload after it.
        let mut b = [0u8; 28];
        b[..20].copy_from_slice(&pkt()[..20]);
        b[0] = 0x46;
        b[3] = 28;
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        p.fill_checksum();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload().len(), 4);
        assert!(Ipv4Repr::parse(&p, &ChecksumCaps::default()).is_ok());
        // A fragment is recognised.
        let mut b = pkt();
        Ipv4Packet::new_unchecked(&mut b[..]).set_flags_and_offset(false, true, 0);
        assert!(Ipv4Packet::new_checked(&b[..]).unwrap().is_fragment());
        let mut b = pkt();
        Ipv4Packet::new_unchecked(&mut b[..]).set_flags_and_offset(false, false, 1480);
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.is_fragment());
        assert_eq!(p.frag_offset(), 1480);
        // Version 6 in an IPv4 packet.
        let mut b = pkt();
        b[0] = 0x65;
        assert!(
            Ipv4Repr::parse(
                &Ipv4Packet::new_checked(&b[..]).unwrap(),
                &ChecksumCaps::ignored()
            )
            .is_err()
        );
    }

    #[test]
    fn addresses_and_prefixes() {
        let a: Ipv4Address = "192.168.1.20".parse().unwrap();
        assert_eq!(a, Ipv4Address::new(192, 168, 1, 20));
        assert_eq!(a.to_string(), "192.168.1.20");
        for bad in [
            "1.2.3",
            "1.2.3.4.5",
            "256.1.1.1",
            "1..2.3",
            "+1.2.3.4",
            "1.2.3.4 ",
            " 1.2.3.4",
            "01.2.3.4",
            "1.2.3.0x4",
            "1.2.3.-4",
            "1.2.3.1000",
            "1.2.3.",
            "١.2.3.4",
            "",
        ] {
            assert!(bad.parse::<Ipv4Address>().is_err(), "{bad}");
        }
        assert_eq!("0.0.0.0".parse(), Ok(Ipv4Address::UNSPECIFIED));
        assert_eq!("255.255.255.255".parse(), Ok(Ipv4Address::BROADCAST));
        assert_eq!(format!("{:?}", Ipv4Address::new(1, 2, 3, 4)), "1.2.3.4");
        assert_eq!(Ipv4Address::from([1, 2, 3, 4]).to_bits(), 0x0102_0304);
        assert_eq!(
            Ipv4Address::from_bits(0x0102_0304),
            Ipv4Address::new(1, 2, 3, 4)
        );
        assert_eq!(Ipv4Address::from_bytes(&[1, 2, 3]), None);
        assert_eq!(Ipv4Address::new(1, 2, 3, 4).as_bytes(), &[1, 2, 3, 4]);
        assert!(Ipv4Address::new(127, 0, 0, 1).is_loopback());
        assert!(Ipv4Address::new(169, 254, 9, 9).is_link_local());
        assert!(
            Ipv4Address::UNSPECIFIED.is_unspecified() && !Ipv4Address::UNSPECIFIED.is_unicast()
        );
        assert!(Ipv4Address::new(10, 1, 2, 3).is_unicast());
        for bad in [
            "10.0.0.1",
            "10.0.0.1/",
            "10.0.0.1/024",
            "10.0.0.1/-1",
            "10.0.0.1/3 ",
            "x/8",
        ] {
            assert!(bad.parse::<Ipv4Cidr>().is_err(), "{bad}");
        }
        let c: Ipv4Cidr = "192.168.7.9/31".parse().unwrap();
        assert_eq!(c.to_string(), "192.168.7.9/31");
        assert_eq!(
            (c.address(), c.prefix_len()),
            (Ipv4Address::new(192, 168, 7, 9), 31)
        );
        assert_eq!(c.broadcast(), None);
        assert_eq!(c.network(), Ipv4Address::new(192, 168, 7, 8));
        assert!(c.contains_addr(&Ipv4Address::new(192, 168, 7, 8)));
        let all: Ipv4Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains_addr(&Ipv4Address::BROADCAST));
        assert_eq!(all.broadcast(), Some(Ipv4Address::BROADCAST));
        let c: Ipv4Cidr = "10.0.0.1/24".parse().unwrap();
        assert_eq!(c.netmask(), Ipv4Address::new(255, 255, 255, 0));
        assert_eq!(c.network(), Ipv4Address::new(10, 0, 0, 0));
        assert_eq!(c.broadcast(), Some(Ipv4Address::new(10, 0, 0, 255)));
        assert!(c.contains_addr(&Ipv4Address::new(10, 0, 0, 77)));
        assert!(!c.contains_addr(&Ipv4Address::new(10, 0, 1, 1)));
        assert!(Ipv4Cidr::new(a, 33).is_none());
        assert_eq!(
            Ipv4Cidr::new(a, 0).unwrap().netmask(),
            Ipv4Address::UNSPECIFIED
        );
        assert_eq!(Ipv4Cidr::new(a, 32).unwrap().broadcast(), None);
        assert!("10.0.0.1/33".parse::<Ipv4Cidr>().is_err());
        assert!(Ipv4Address::new(224, 0, 0, 1).is_multicast());
        assert!(!Ipv4Address::BROADCAST.is_unicast());
    }

    #[test]
    fn deconstruct_every_field() {
        let b = pkt();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!((p.version(), p.header_len(), p.total_len()), (4, 20, 24));
        assert_eq!((p.dscp(), p.ecn(), p.ident()), (0, 0, 0x1234));
        assert!(p.dont_frag() && !p.more_frags() && p.frag_offset() == 0);
        assert_eq!((p.hop_limit(), p.next_header()), (64, IpProtocol::Tcp));
        assert_eq!(p.checksum(), 0x14aa);
        assert_eq!(p.src_addr(), Ipv4Address::new(10, 0, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Address::new(10, 0, 0, 2));
        assert_eq!(p.into_inner(), &b[..]);
    }

    #[test]
    fn construct_with_setters() {
        let mut b = [0xffu8; 24];
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        p.set_version(4);
        p.set_header_len(20);
        p.set_dscp(0x2e);
        p.set_ecn(3);
        p.set_dscp(0);
        p.set_ecn(0);
        p.set_total_len(24);
        p.set_ident(0x1234);
        p.set_flags_and_offset(false, false, 0);
        p.set_more_frags(true);
        p.set_frag_offset(8);
        p.set_more_frags(false);
        p.set_frag_offset(0);
        p.set_dont_frag(true);
        p.set_hop_limit(64);
        p.set_next_header(IpProtocol::Tcp);
        p.set_src_addr(Ipv4Address::new(10, 0, 0, 1));
        p.set_dst_addr(Ipv4Address::new(10, 0, 0, 2));
        p.payload_mut().copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        p.fill_checksum();
        assert_eq!(b, pkt());
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        p.set_dscp(0x2e);
        p.set_ecn(2);
        assert_eq!((p.dscp(), p.ecn()), (0x2e, 2));
    }

    #[test]
    fn truncated() {
        let b = pkt();
        for n in 0..24 {
            assert!(Ipv4Packet::new_checked(&b[..n]).is_err(), "{n}");
            assert!(
                Ipv4Repr::parse(
                    &Ipv4Packet::new_unchecked(&b[..n]),
                    &ChecksumCaps::ignored()
                )
                .is_err()
            );
            // Unchecked views answer anyway.
            let p = Ipv4Packet::new_unchecked(&b[..n]);
            let _ = (p.payload(), p.src_addr(), p.dst_addr(), p.verify_checksum());
        }
        let mut short = [0u8; 5];
        let mut p = Ipv4Packet::new_unchecked(&mut short[..]);
        p.set_dst_addr(Ipv4Address::BROADCAST);
        p.set_version_and_header_len(4, 20);
        p.fill_checksum();
        assert!(p.payload_mut().is_empty());
    }

    #[test]
    fn protocols_round_trip() {
        for v in 0..=255u8 {
            assert_eq!(u8::from(IpProtocol::from(v)), v);
        }
        assert_eq!(IpProtocol::from(17), IpProtocol::Udp);
        assert_eq!(IpProtocol::from(1), IpProtocol::Icmp);
    }

    #[test]
    fn super_segment_lengths() {
        let r = Ipv4Repr {
            src_addr: Ipv4Address::new(10, 0, 0, 1),
            dst_addr: Ipv4Address::new(10, 0, 0, 2),
            next_header: IpProtocol::Tcp,
            payload_len: 65_515,
            hop_limit: 64,
            ident: 1,
            dont_frag: true,
        };
        let mut b = vec![0u8; 65_535];
        r.emit(
            &mut Ipv4Packet::new_unchecked(&mut b[..]),
            &ChecksumCaps::default(),
        );
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.total_len(), 65_535);
        assert_eq!(Ipv4Repr::parse(&p, &ChecksumCaps::default()).unwrap(), r);
        // Emitting into a buffer of buffer_len() bytes only, or less.
        for n in 0..=20 {
            let mut h = vec![0u8; n];
            r.emit(
                &mut Ipv4Packet::new_unchecked(&mut h[..]),
                &ChecksumCaps::default(),
            );
        }
        // With the checksum offloaded the field is left zero.
        let mut h = [0xffu8; 20];
        let caps = ChecksumCaps {
            ipv4: crate::Checksum::Rx,
            ..ChecksumCaps::default()
        };
        r.emit(&mut Ipv4Packet::new_unchecked(&mut h[..]), &caps);
        assert_eq!(&h[10..12], &[0, 0]);
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..80)) {
            let p = Ipv4Packet::new_unchecked(&bytes[..]);
            let _ = (p.payload(), p.is_fragment(), p.header_len(), p.verify_checksum());
            let _ = Ipv4Repr::parse(&p, &ChecksumCaps::default());
            if let Ok(p) = Ipv4Packet::new_checked(&bytes[..]) {
                let _ = Ipv4Repr::parse(&p, &ChecksumCaps::default());
                let _ = (p.payload(), p.is_fragment(), p.dscp(), p.ecn());
            }
        }

        #[test]
        fn addresses_round_trip_through_text(bits in proptest::num::u32::ANY, prefix in 0u8..=32,
                                             junk in "[0-9./ a-z+-]{0,20}") {
            let a = Ipv4Address::from_bits(bits);
            proptest::prop_assert_eq!(a.to_string().parse::<Ipv4Address>(), Ok(a));
            let c = Ipv4Cidr::new(a, prefix).unwrap();
            proptest::prop_assert_eq!(c.to_string().parse::<Ipv4Cidr>(), Ok(c));
            proptest::prop_assert!(c.contains_addr(&a) && c.contains_addr(&c.network()));
            if let Some(b) = c.broadcast() {
                proptest::prop_assert!(c.contains_addr(&b));
            }
            // Anything that parses prints back the same.
            if let Ok(a) = junk.parse::<Ipv4Address>() {
                proptest::prop_assert_eq!(a.to_string(), junk.clone());
            }
            if let Ok(c) = junk.parse::<Ipv4Cidr>() {
                proptest::prop_assert_eq!(c.to_string(), junk);
            }
        }

        #[test]
        fn parse_never_panics_with_good_checksum(mut bytes in proptest::collection::vec(proptest::num::u8::ANY, 20..80),
                                                 ihl in 5u8..16, tl in 0u16..80) {
            bytes[0] = 0x40 | ihl;
            bytes[2..4].copy_from_slice(&tl.to_be_bytes());
            Ipv4Packet::new_unchecked(&mut bytes[..]).fill_checksum();
            if let Ok(p) = Ipv4Packet::new_checked(&bytes[..]) {
                let r = Ipv4Repr::parse(&p, &ChecksumCaps::default()).unwrap();
                proptest::prop_assert_eq!(r.payload_len, p.payload().len());
            }
        }

        #[test]
        fn emit_parse_roundtrip(src in proptest::num::u32::ANY, dst in proptest::num::u32::ANY,
                                len in 0usize..65_515, ident in proptest::num::u16::ANY, df in proptest::bool::ANY) {
            let r = Ipv4Repr {
                src_addr: Ipv4Address::from_bits(src),
                dst_addr: Ipv4Address::from_bits(dst),
                next_header: IpProtocol::Udp,
                payload_len: len,
                hop_limit: 64,
                ident,
                dont_frag: df,
            };
            let mut b = vec![0u8; 20 + len];
            r.emit(&mut Ipv4Packet::new_unchecked(&mut b[..]), &ChecksumCaps::default());
            let p = Ipv4Packet::new_checked(&b[..]).unwrap();
            proptest::prop_assert_eq!(Ipv4Repr::parse(&p, &ChecksumCaps::default()).unwrap(), r);
        }
    }
}
