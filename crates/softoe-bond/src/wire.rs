//! The ARP+ message (BondingPlus paper, §3.2 and its Fig. 2), with two
//! fields of ours.
//!
//! ## Layout
//!
//! Network byte order, carried directly in an Ethernet II frame of
//! EtherType [`ETHERTYPE_ARPP`]:
//!
//! ```text
//!  0       1       2       3       4               6
//! +-------+-------+-------+-------+---------------+
//! | HLEN  | PLEN  |   N   | TYPE  |      SEQ      |
//! +-------+-------+-------+-------+---------------+
//! |        sender IPv4 address (4 bytes)          |
//! |        target IPv4 address (4 bytes)          |
//! |   REALTIME    |                               |
//! +---------------+                               |
//! |  member MAC 1 (6) | member MAC 2 (6) | ...    |   N of them
//! +-----------------------------------------------+
//! ```
//!
//! - `HLEN` = 6 and `PLEN` = 4, as in the paper and in ARP. They are kept
//!   so that the message describes itself, but the layout is fixed:
//!   [`ArppRepr::parse`] rejects any other values.
//! - `N`, the paper's "Number of HA": how many member MACs follow, from 1
//!   to [`MAX_MEMBERS`].
//! - `TYPE`: [`ArppType`]. The paper's four messages, plus our
//!   [`ArppType::Heartbeat`] for link health. Unknown values round-trip as
//!   [`ArppType::Unknown`].
//! - `SEQ` (**ours, not in the paper**): the sender's announcement
//!   sequence number. A host bumps it whenever its member set changes, and
//!   repeats it unchanged when it merely re-announces. A receiver compares
//!   it (serially, with wrap-around) against what it last accepted from
//!   that sender: older means a stale message — delayed or reordered — that
//!   must not undo a newer member set; equal means a re-announcement that
//!   only proves the peer is still there; newer means the set changed.
//! - the target IPv4 address (**ours**, made explicit): the host a
//!   `REPLY` answers; `0.0.0.0` in broadcast messages.
//! - `REALTIME` (**ours**): a bit mask, bit `i` set when member `i` is
//!   dedicated to real-time traffic (the paper's real-time channel). The
//!   paper configures the dedicated NICs at both ends by hand; carrying
//!   them here lets a sender put prioritized traffic on the *peer's*
//!   dedicated links too, which is where it queues. Bits at or past `N`
//!   are ignored.
//!
//! Bytes after the last member (an Ethernet frame's padding) are ignored.
//!
//! ## Why an EtherType of our own
//!
//! The paper calls ARP+ "a proprietary packet which can only be interpreted
//! by ARP+ without interfering with other existing protocols". Sending it
//! as ARP (0x0806) with a new operation code would put it in front of every
//! host's ARP code, which may log, count or misparse it. So it gets its
//! own EtherType, and [`ETHERTYPE_ARPP`] is `0x88B5`: IEEE Std 802 sets
//! 0x88B5 and 0x88B6 aside as "Local Experimental EtherTypes", for
//! protocols used inside one site that are not registered. Hosts without
//! BondingPlus drop such frames unread, which is exactly the backward
//! compatibility the paper asks for (they keep using plain ARP).
//!
//! ## Contract
//!
//! Once [`ArppPacket::check_len`] (or `new_checked`) has passed — the
//! 16-byte header and the `N` members it declares — no accessor panics
//! (every accessor here is in fact total: what does not fit reads as zero
//! or `None`). [`ArppRepr::parse`] never panics on any bytes and allocates
//! nothing; [`ArppRepr::emit`] never panics into a buffer of
//! [`ArppRepr::buffer_len`] bytes, nor into a shorter one (what does not fit
//! is not written).

use core::fmt;

use softoe_wire::{EthernetAddress, Ipv4Address};

/// The EtherType ARP+ frames are sent with: IEEE 802 Local Experimental
/// EtherType 1 (see the module docs for why).
pub const ETHERTYPE_ARPP: u16 = 0x88B5;

/// The most member MACs one message (and one table entry) carries. Sixteen
/// NICs behind one address is far beyond what a host bonds in practice,
/// and it bounds a message to 112 bytes and an entry to a fixed size.
pub const MAX_MEMBERS: usize = 16;

/// Length of a MAC address, the value of `HLEN`.
pub const HARDWARE_LEN: u8 = 6;

/// Length of an IPv4 address, the value of `PLEN`.
pub const PROTOCOL_LEN: u8 = 4;

/// Length of the fixed header, before the members.
pub const HEADER_LEN: usize = field::MEMBERS;

mod field {
    use core::ops::Range;
    pub const HLEN: usize = 0;
    pub const PLEN: usize = 1;
    pub const COUNT: usize = 2;
    pub const TYPE: usize = 3;
    pub const SEQ: Range<usize> = 4..6;
    pub const SENDER_IP: Range<usize> = 6..10;
    pub const TARGET_IP: Range<usize> = 10..14;
    pub const REALTIME: Range<usize> = 14..16;
    /// The member MACs follow, six bytes each.
    pub const MEMBERS: usize = 16;
}

/// Why bytes are not an ARP+ message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Error {
    /// Shorter than the header, or than the members the header declares.
    Truncated,
    /// Long enough, but impossible: `HLEN` ≠ 6, `PLEN` ≠ 4, or no members
    /// or more than [`MAX_MEMBERS`].
    Malformed,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::Truncated => "truncated ARP+ message",
            Error::Malformed => "malformed ARP+ message",
        })
    }
}

impl core::error::Error for Error {}

/// The ARP+ packet type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArppType {
    /// 1, `ARPP_BROADCAST`: "here I am, with these members", broadcast by a
    /// host joining the LAN (and, here, periodically).
    Broadcast,
    /// 2, `ARPP_REPLY`: a host's own mapping, unicast to the sender of a
    /// `BROADCAST`.
    Reply,
    /// 3, `ARPP_CHANGE`: "my member set changed", broadcast.
    Change,
    /// 4, `ARPP_CLEAR`: "forget me", broadcast when a host stops bonding.
    Clear,
    /// 5 (ours, not in the paper): a per-member liveness probe, for link
    /// health.
    Heartbeat,
    /// Anything else.
    Unknown(u8),
}

impl From<u8> for ArppType {
    fn from(v: u8) -> ArppType {
        match v {
            1 => ArppType::Broadcast,
            2 => ArppType::Reply,
            3 => ArppType::Change,
            4 => ArppType::Clear,
            5 => ArppType::Heartbeat,
            x => ArppType::Unknown(x),
        }
    }
}

impl From<ArppType> for u8 {
    fn from(v: ArppType) -> u8 {
        match v {
            ArppType::Broadcast => 1,
            ArppType::Reply => 2,
            ArppType::Change => 3,
            ArppType::Clear => 4,
            ArppType::Heartbeat => 5,
            ArppType::Unknown(x) => x,
        }
    }
}

/// A host's member MACs: between 1 and [`MAX_MEMBERS`] of them, in the
/// host's order, held inline (no allocation).
///
/// The bounds are an invariant of the type: [`Members::new`] refuses an
/// empty or oversized list, so every `Members` can be emitted.
#[derive(Clone, Copy)]
pub struct Members {
    addrs: [EthernetAddress; MAX_MEMBERS],
    len: u8,
    /// Bit `i`: member `i` carries real-time traffic only.
    realtime: u16,
}

impl Members {
    /// The members `addrs`, if there are 1 to [`MAX_MEMBERS`] of them.
    pub fn new(addrs: &[EthernetAddress]) -> Option<Members> {
        if addrs.is_empty() || addrs.len() > MAX_MEMBERS {
            return None;
        }
        let mut m = Members {
            addrs: [EthernetAddress::default(); MAX_MEMBERS],
            len: 0,
            realtime: 0,
        };
        for (d, s) in m.addrs.iter_mut().zip(addrs) {
            *d = *s;
        }
        m.len = u8::try_from(addrs.len()).ok()?;
        Some(m)
    }

    /// The same members, those whose bit is set in `mask` dedicated to
    /// real-time traffic (bits past the last member are dropped).
    pub fn with_realtime(mut self, mask: u16) -> Members {
        let all = u16::try_from((1u32 << self.len) - 1).unwrap_or(u16::MAX);
        self.realtime = mask & all;
        self
    }

    /// The real-time mask: bit `i` set when member `i` is dedicated to
    /// real-time traffic.
    pub fn realtime_mask(&self) -> u16 {
        self.realtime
    }

    /// Whether member `i` is dedicated to real-time traffic.
    pub fn is_realtime(&self, i: usize) -> bool {
        i < self.len() && self.realtime & (1 << i) != 0
    }

    /// The members, in order.
    pub fn as_slice(&self) -> &[EthernetAddress] {
        self.addrs.get(..usize::from(self.len)).unwrap_or(&[])
    }

    /// How many (1 to [`MAX_MEMBERS`]).
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Never true (kept for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The position of `mac` among the members.
    pub fn position(&self, mac: EthernetAddress) -> Option<usize> {
        self.as_slice().iter().position(|m| *m == mac)
    }

    /// Every member is a unicast address (a multicast or broadcast member
    /// would turn striped unicast traffic into floods).
    pub fn all_unicast(&self) -> bool {
        self.as_slice().iter().all(|m| m.is_unicast())
    }
}

impl PartialEq for Members {
    fn eq(&self, other: &Members) -> bool {
        self.as_slice() == other.as_slice() && self.realtime == other.realtime
    }
}

impl Eq for Members {}

impl fmt::Debug for Members {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// A view of an ARP+ message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArppPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArppPacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> ArppPacket<T> {
        ArppPacket { buffer }
    }

    /// Wraps a buffer, checking its length against the member count it
    /// declares.
    pub fn new_checked(buffer: T) -> Result<ArppPacket<T>, Error> {
        let p = ArppPacket::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the buffer holds the header and the `N` members it declares.
    pub fn check_len(&self) -> Result<(), Error> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < HEADER_LEN + self.member_count() * usize::from(HARDWARE_LEN) {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn byte(&self, at: usize) -> u8 {
        self.buffer.as_ref().get(at).copied().unwrap_or(0)
    }

    fn ip(&self, r: core::ops::Range<usize>) -> Ipv4Address {
        self.buffer
            .as_ref()
            .get(r)
            .and_then(Ipv4Address::from_bytes)
            .unwrap_or_default()
    }

    /// `HLEN`: hardware address length (6).
    pub fn hardware_len(&self) -> u8 {
        self.byte(field::HLEN)
    }

    /// `PLEN`: protocol address length (4).
    pub fn protocol_len(&self) -> u8 {
        self.byte(field::PLEN)
    }

    /// `N`: the number of member MACs declared.
    pub fn member_count(&self) -> usize {
        usize::from(self.byte(field::COUNT))
    }

    /// The packet type.
    pub fn packet_type(&self) -> ArppType {
        ArppType::from(self.byte(field::TYPE))
    }

    /// The sequence number (our extension).
    pub fn seq(&self) -> u16 {
        match self.buffer.as_ref().get(field::SEQ) {
            Some(&[a, b]) => u16::from_be_bytes([a, b]),
            _ => 0,
        }
    }

    /// The sender's IPv4 address.
    pub fn sender_ip(&self) -> Ipv4Address {
        self.ip(field::SENDER_IP)
    }

    /// The target IPv4 address (0.0.0.0 in broadcasts).
    pub fn target_ip(&self) -> Ipv4Address {
        self.ip(field::TARGET_IP)
    }

    /// The `REALTIME` mask as sent (our extension).
    pub fn realtime(&self) -> u16 {
        match self.buffer.as_ref().get(field::REALTIME) {
            Some(&[a, b]) => u16::from_be_bytes([a, b]),
            _ => 0,
        }
    }

    /// Member `i` (from 0), if it is declared and present.
    pub fn member(&self, i: usize) -> Option<EthernetAddress> {
        if i >= self.member_count() {
            return None;
        }
        let at = field::MEMBERS + i * usize::from(HARDWARE_LEN);
        EthernetAddress::from_bytes(self.buffer.as_ref().get(at..at + 6)?)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArppPacket<T> {
    fn put(&mut self, start: usize, v: &[u8]) {
        if let Some(d) = self.buffer.as_mut().get_mut(start..start + v.len()) {
            d.copy_from_slice(v);
        }
    }

    /// Sets `HLEN`.
    pub fn set_hardware_len(&mut self, v: u8) {
        self.put(field::HLEN, &[v]);
    }

    /// Sets `PLEN`.
    pub fn set_protocol_len(&mut self, v: u8) {
        self.put(field::PLEN, &[v]);
    }

    /// Sets `N`.
    pub fn set_member_count(&mut self, v: u8) {
        self.put(field::COUNT, &[v]);
    }

    /// Sets the packet type.
    pub fn set_packet_type(&mut self, v: ArppType) {
        self.put(field::TYPE, &[u8::from(v)]);
    }

    /// Sets the sequence number.
    pub fn set_seq(&mut self, v: u16) {
        self.put(field::SEQ.start, &v.to_be_bytes());
    }

    /// Sets the sender's IPv4 address.
    pub fn set_sender_ip(&mut self, v: Ipv4Address) {
        self.put(field::SENDER_IP.start, v.as_bytes());
    }

    /// Sets the target IPv4 address.
    pub fn set_target_ip(&mut self, v: Ipv4Address) {
        self.put(field::TARGET_IP.start, v.as_bytes());
    }

    /// Sets the `REALTIME` mask.
    pub fn set_realtime(&mut self, v: u16) {
        self.put(field::REALTIME.start, &v.to_be_bytes());
    }

    /// Sets member `i` (from 0); set `N` too.
    pub fn set_member(&mut self, i: usize, v: EthernetAddress) {
        let at = field::MEMBERS.saturating_add(i.saturating_mul(usize::from(HARDWARE_LEN)));
        self.put(at, v.as_bytes());
    }
}

/// An ARP+ message, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArppRepr {
    /// What the message says.
    pub packet_type: ArppType,
    /// The sender's sequence number (see the module docs).
    pub seq: u16,
    /// The sender's IPv4 address: the address its members stand behind.
    pub sender_ip: Ipv4Address,
    /// The host a `REPLY` answers; 0.0.0.0 in broadcasts.
    pub target_ip: Ipv4Address,
    /// The sender's member MACs.
    pub members: Members,
}

impl ArppRepr {
    /// Parses an ARP+ message: header lengths 6 and 4, 1 to
    /// [`MAX_MEMBERS`] members. Unknown types are not an error.
    pub fn parse<T: AsRef<[u8]>>(p: &ArppPacket<T>) -> Result<ArppRepr, Error> {
        if p.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let n = p.member_count();
        if p.hardware_len() != HARDWARE_LEN
            || p.protocol_len() != PROTOCOL_LEN
            || n == 0
            || n > MAX_MEMBERS
        {
            return Err(Error::Malformed);
        }
        p.check_len()?;
        let mut addrs = [EthernetAddress::default(); MAX_MEMBERS];
        for (i, a) in addrs.iter_mut().enumerate().take(n) {
            *a = p.member(i).ok_or(Error::Truncated)?;
        }
        let members = Members::new(addrs.get(..n).ok_or(Error::Malformed)?)
            .ok_or(Error::Malformed)?
            .with_realtime(p.realtime());
        Ok(ArppRepr {
            packet_type: p.packet_type(),
            seq: p.seq(),
            sender_ip: p.sender_ip(),
            target_ip: p.target_ip(),
            members,
        })
    }

    /// Bytes [`emit`](ArppRepr::emit) writes: 16 + 6 per member.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.members.len() * usize::from(HARDWARE_LEN)
    }

    /// Writes the message into the first [`buffer_len`](ArppRepr::buffer_len)
    /// bytes of `p` (what does not fit is not written).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut ArppPacket<T>) {
        p.set_hardware_len(HARDWARE_LEN);
        p.set_protocol_len(PROTOCOL_LEN);
        // `Members` holds at most MAX_MEMBERS (16), which fits a u8.
        p.set_member_count(u8::try_from(self.members.len()).unwrap_or(u8::MAX));
        p.set_packet_type(self.packet_type);
        p.set_seq(self.seq);
        p.set_sender_ip(self.sender_ip);
        p.set_target_ip(self.target_ip);
        p.set_realtime(self.members.realtime_mask());
        for (i, m) in self.members.as_slice().iter().enumerate() {
            p.set_member(i, *m);
        }
    }
}

impl fmt::Display for ArppRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ARP+ {:?} seq={} {} -> {} members=[",
            self.packet_type, self.seq, self.sender_ip, self.target_ip
        )?;
        for (i, m) in self.members.as_slice().iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{m}")?;
            if self.members.is_realtime(i) {
                f.write_str("(rt)")?;
            }
        }
        f.write_str("]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    fn mac(n: u8) -> EthernetAddress {
        EthernetAddress([2, 0, 0, 0, 0, n])
    }

    const BYTES: [u8; 28] = [
        6, 4, 2, 1, // HLEN PLEN N TYPE=BROADCAST
        0x12, 0x34, // SEQ
        10, 0, 0, 1, // sender
        0, 0, 0, 0, // target
        0x80, 0x02, // REALTIME: member 2 (bit 15 is past N and dropped)
        2, 0, 0, 0, 0, 1, // member 1
        2, 0, 0, 0, 0, 2, // member 2
    ];

    fn repr() -> ArppRepr {
        ArppRepr {
            packet_type: ArppType::Broadcast,
            seq: 0x1234,
            sender_ip: Ipv4Address::new(10, 0, 0, 1),
            target_ip: Ipv4Address::UNSPECIFIED,
            members: Members::new(&[mac(1), mac(2)]).unwrap().with_realtime(0b10),
        }
    }

    #[test]
    fn deconstruct() {
        let p = ArppPacket::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.hardware_len(), 6);
        assert_eq!(p.protocol_len(), 4);
        assert_eq!(p.member_count(), 2);
        assert_eq!(p.packet_type(), ArppType::Broadcast);
        assert_eq!(p.seq(), 0x1234);
        assert_eq!(p.sender_ip(), Ipv4Address::new(10, 0, 0, 1));
        assert_eq!(p.target_ip(), Ipv4Address::UNSPECIFIED);
        assert_eq!(p.realtime(), 0x8002);
        assert_eq!(p.member(0), Some(mac(1)));
        assert_eq!(p.member(1), Some(mac(2)));
        assert_eq!(p.member(2), None);
        assert_eq!(ArppRepr::parse(&p).unwrap(), repr());
    }

    #[test]
    fn construct() {
        let r = repr();
        assert_eq!(r.buffer_len(), BYTES.len());
        let mut buf = vec![0xa5; r.buffer_len()];
        r.emit(&mut ArppPacket::new_unchecked(&mut buf[..]));
        let mut want = BYTES;
        want[14] = 0; // the bit past N is not sent
        assert_eq!(&buf[..], &want[..]);
        assert_eq!(
            r.to_string(),
            "ARP+ Broadcast seq=4660 10.0.0.1 -> 0.0.0.0 members=[02:00:00:00:00:01 02:00:00:00:00:02(rt)]"
        );
    }

    #[test]
    fn padding_is_ignored() {
        let mut b = BYTES.to_vec();
        b.extend_from_slice(&[0; 32]); // padded to a minimum Ethernet frame
        assert_eq!(
            ArppRepr::parse(&ArppPacket::new_unchecked(&b[..])).unwrap(),
            repr()
        );
    }

    #[test]
    fn impossible_headers() {
        let bad = |i: usize, v: u8| {
            let mut b = BYTES;
            b[i] = v;
            ArppRepr::parse(&ArppPacket::new_unchecked(&b[..]))
        };
        assert_eq!(bad(0, 8), Err(Error::Malformed)); // HLEN
        assert_eq!(bad(1, 16), Err(Error::Malformed)); // PLEN
        assert_eq!(bad(2, 0), Err(Error::Malformed)); // no members
        assert_eq!(bad(2, 17), Err(Error::Malformed)); // too many
        assert_eq!(bad(2, 3), Err(Error::Truncated)); // declares one more than is there
        assert_eq!(bad(3, 200).unwrap().packet_type, ArppType::Unknown(200));
        assert_eq!(
            ArppRepr::parse(&ArppPacket::new_unchecked(&BYTES[..15])),
            Err(Error::Truncated)
        );
    }

    #[test]
    fn members_bounds() {
        assert!(Members::new(&[]).is_none());
        assert!(Members::new(&[mac(1); MAX_MEMBERS + 1]).is_none());
        let m = Members::new(&[mac(1); MAX_MEMBERS]).unwrap();
        assert_eq!(m.len(), MAX_MEMBERS);
        assert!(!m.is_empty());
        assert!(
            !Members::new(&[mac(1), EthernetAddress::BROADCAST])
                .unwrap()
                .all_unicast()
        );
    }

    #[test]
    fn types_round_trip() {
        for v in 0..=u8::MAX {
            assert_eq!(u8::from(ArppType::from(v)), v);
        }
    }

    fn any_repr() -> impl Strategy<Value = ArppRepr> {
        (
            any::<u8>(),
            any::<u16>(),
            any::<[u8; 4]>(),
            any::<[u8; 4]>(),
            proptest::collection::vec(any::<[u8; 6]>(), 1..=MAX_MEMBERS),
            any::<u16>(),
        )
            .prop_map(|(t, seq, s, d, ms, rt)| {
                let ms: Vec<EthernetAddress> = ms.into_iter().map(EthernetAddress).collect();
                ArppRepr {
                    packet_type: ArppType::from(t),
                    seq,
                    sender_ip: Ipv4Address(s),
                    target_ip: Ipv4Address(d),
                    members: Members::new(&ms).unwrap().with_realtime(rt),
                }
            })
    }

    proptest! {
        #[test]
        fn emit_parse_roundtrip(r in any_repr(), pad in 0usize..8) {
            let mut buf = vec![0u8; r.buffer_len() + pad];
            r.emit(&mut ArppPacket::new_unchecked(&mut buf[..]));
            let p = ArppPacket::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(ArppRepr::parse(&p).unwrap(), r);
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let p = ArppPacket::new_unchecked(&bytes[..]);
            let _ = (p.hardware_len(), p.protocol_len(), p.packet_type(), p.seq(),
                     p.sender_ip(), p.target_ip(), p.member(0), p.member(usize::MAX));
            let _ = p.check_len();
            if let Ok(r) = ArppRepr::parse(&p) {
                let mut buf = vec![0u8; r.buffer_len()];
                r.emit(&mut ArppPacket::new_unchecked(&mut buf[..]));
                // Everything but the real-time bits past N (dropped) comes back.
                let mut want = bytes[..r.buffer_len()].to_vec();
                want[14..16].copy_from_slice(&r.members.realtime_mask().to_be_bytes());
                prop_assert_eq!(&buf[..], &want[..]);
                prop_assert_eq!(ArppRepr::parse(&ArppPacket::new_unchecked(&buf[..])).unwrap(), r);
            }
        }

        #[test]
        fn truncation_is_an_error(r in any_repr(), cut in 1usize..=112) {
            let mut buf = vec![0u8; r.buffer_len()];
            r.emit(&mut ArppPacket::new_unchecked(&mut buf[..]));
            let keep = buf.len().saturating_sub(cut);
            let p = ArppPacket::new_unchecked(&buf[..keep]);
            prop_assert_eq!(ArppRepr::parse(&p), Err(Error::Truncated));
            prop_assert!(p.check_len().is_err());
        }

        #[test]
        fn emit_into_short_buffer_does_not_panic(r in any_repr(), len in 0usize..112) {
            let mut buf = vec![0u8; len];
            r.emit(&mut ArppPacket::new_unchecked(&mut buf[..]));
        }
    }
}
