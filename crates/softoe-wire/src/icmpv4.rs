//! ICMPv4 (RFC 792): echo request and reply, destination unreachable, time
//! exceeded.
//!
//! [`Icmpv4Packet`] reads any ICMPv4 message (type, code, checksum, the four
//! bytes of "rest of header", data) — among them the next-hop MTU of a
//! fragmentation-needed message (RFC 1191 §4,
//! [`Icmpv4Packet::next_hop_mtu`]); [`Icmpv4Repr`] is the messages the stack
//! answers or sends. Other types (redirects, timestamps…) are readable
//! through the view and rejected by [`Icmpv4Repr::parse`].
//!
//! ## Contract
//!
//! Once [`Icmpv4Packet::check_len`] (or `new_checked`) has passed — at least
//! 8 bytes — no accessor panics (every accessor here is in fact total).
//! [`Icmpv4Repr::parse`] never panics on any bytes; [`Icmpv4Repr::emit`]
//! never panics into a buffer of [`Icmpv4Repr::buffer_len`] bytes, nor into
//! a shorter one (the data is cut to fit).

use crate::bytes::{u8_at, u16_at};
use crate::checksum::{self, ChecksumCaps};
use crate::error::{Error, Result};

/// ICMPv4 message type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Icmpv4Message {
    /// 0.
    EchoReply,
    /// 3.
    DstUnreachable,
    /// 8.
    EchoRequest,
    /// 11.
    TimeExceeded,
    /// Anything else.
    Unknown(u8),
}

impl From<u8> for Icmpv4Message {
    fn from(v: u8) -> Icmpv4Message {
        match v {
            0 => Icmpv4Message::EchoReply,
            3 => Icmpv4Message::DstUnreachable,
            8 => Icmpv4Message::EchoRequest,
            11 => Icmpv4Message::TimeExceeded,
            x => Icmpv4Message::Unknown(x),
        }
    }
}

impl From<Icmpv4Message> for u8 {
    fn from(v: Icmpv4Message) -> u8 {
        match v {
            Icmpv4Message::EchoReply => 0,
            Icmpv4Message::DstUnreachable => 3,
            Icmpv4Message::EchoRequest => 8,
            Icmpv4Message::TimeExceeded => 11,
            Icmpv4Message::Unknown(x) => x,
        }
    }
}

/// Destination-unreachable codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Icmpv4DstUnreachable {
    /// 0.
    NetUnreachable,
    /// 1.
    HostUnreachable,
    /// 2.
    ProtoUnreachable,
    /// 3.
    PortUnreachable,
    /// 4: fragmentation needed and DF set.
    FragRequired,
    /// Anything else.
    Unknown(u8),
}

impl From<u8> for Icmpv4DstUnreachable {
    fn from(v: u8) -> Icmpv4DstUnreachable {
        match v {
            0 => Icmpv4DstUnreachable::NetUnreachable,
            1 => Icmpv4DstUnreachable::HostUnreachable,
            2 => Icmpv4DstUnreachable::ProtoUnreachable,
            3 => Icmpv4DstUnreachable::PortUnreachable,
            4 => Icmpv4DstUnreachable::FragRequired,
            x => Icmpv4DstUnreachable::Unknown(x),
        }
    }
}

impl From<Icmpv4DstUnreachable> for u8 {
    fn from(v: Icmpv4DstUnreachable) -> u8 {
        match v {
            Icmpv4DstUnreachable::NetUnreachable => 0,
            Icmpv4DstUnreachable::HostUnreachable => 1,
            Icmpv4DstUnreachable::ProtoUnreachable => 2,
            Icmpv4DstUnreachable::PortUnreachable => 3,
            Icmpv4DstUnreachable::FragRequired => 4,
            Icmpv4DstUnreachable::Unknown(x) => x,
        }
    }
}

/// Time-exceeded codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Icmpv4TimeExceeded {
    /// 0: the TTL reached zero in transit.
    TtlExpired,
    /// 1: fragment reassembly time exceeded (RFC 792, RFC 1122 §3.3.2).
    FragReassembly,
    /// Anything else.
    Unknown(u8),
}

impl From<u8> for Icmpv4TimeExceeded {
    fn from(v: u8) -> Icmpv4TimeExceeded {
        match v {
            0 => Icmpv4TimeExceeded::TtlExpired,
            1 => Icmpv4TimeExceeded::FragReassembly,
            x => Icmpv4TimeExceeded::Unknown(x),
        }
    }
}

impl From<Icmpv4TimeExceeded> for u8 {
    fn from(v: Icmpv4TimeExceeded) -> u8 {
        match v {
            Icmpv4TimeExceeded::TtlExpired => 0,
            Icmpv4TimeExceeded::FragReassembly => 1,
            Icmpv4TimeExceeded::Unknown(x) => x,
        }
    }
}

mod field {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    /// Echo: identifier; unreachable: unused.
    pub const ECHO_IDENT: usize = 4;
    /// Echo: sequence number; unreachable: unused or next-hop MTU.
    pub const ECHO_SEQNO: usize = 6;
    pub const DATA: usize = 8;
}

/// Header length (type, code, checksum, and four bytes of rest-of-header).
pub const HEADER_LEN: usize = field::DATA;

/// A view of an ICMPv4 message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Icmpv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Icmpv4Packet<T> {
        Icmpv4Packet { buffer }
    }

    /// Wraps a buffer, checking it holds the 8-byte header.
    pub fn new_checked(buffer: T) -> Result<Icmpv4Packet<T>> {
        let p = Icmpv4Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// At least 8 bytes.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error)
        } else {
            Ok(())
        }
    }

    /// The buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Type.
    pub fn msg_type(&self) -> Icmpv4Message {
        Icmpv4Message::from(u8_at(self.buffer.as_ref(), field::TYPE))
    }

    /// Code.
    pub fn msg_code(&self) -> u8 {
        u8_at(self.buffer.as_ref(), field::CODE)
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Echo identifier.
    pub fn echo_ident(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::ECHO_IDENT)
    }

    /// Echo sequence number.
    pub fn echo_seq_no(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::ECHO_SEQNO)
    }

    /// The next-hop MTU of a destination-unreachable, fragmentation-needed
    /// message (RFC 1191 §4: the low 16 bits of the "unused" field; 0 from
    /// a router older than RFC 1191).
    pub fn next_hop_mtu(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::ECHO_SEQNO)
    }

    /// The bytes after the header.
    pub fn data(&self) -> &[u8] {
        self.buffer.as_ref().get(HEADER_LEN..).unwrap_or(&[])
    }

    /// Whether the checksum over the whole buffer (the whole message) is
    /// right.
    pub fn verify_checksum(&self) -> bool {
        checksum::data(self.buffer.as_ref()) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    fn set16(&mut self, at: usize, v: u16) {
        if let Some(b) = self.buffer.as_mut().get_mut(at..at + 2) {
            b.copy_from_slice(&v.to_be_bytes());
        }
    }
    /// Sets the type.
    pub fn set_msg_type(&mut self, v: Icmpv4Message) {
        if let Some(b) = self.buffer.as_mut().get_mut(field::TYPE) {
            *b = u8::from(v);
        }
    }
    /// Sets the code.
    pub fn set_msg_code(&mut self, v: u8) {
        if let Some(b) = self.buffer.as_mut().get_mut(field::CODE) {
            *b = v;
        }
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.set16(field::CHECKSUM, v);
    }
    /// Sets the echo identifier.
    pub fn set_echo_ident(&mut self, v: u16) {
        self.set16(field::ECHO_IDENT, v);
    }
    /// Sets the echo sequence number.
    pub fn set_echo_seq_no(&mut self, v: u16) {
        self.set16(field::ECHO_SEQNO, v);
    }
    /// Sets the next-hop MTU of a fragmentation-needed message (RFC 1191).
    pub fn set_next_hop_mtu(&mut self, v: u16) {
        self.set16(field::ECHO_SEQNO, v);
    }
    /// The bytes after the header, mutably.
    pub fn data_mut(&mut self) -> &mut [u8] {
        self.buffer
            .as_mut()
            .get_mut(HEADER_LEN..)
            .unwrap_or(&mut [])
    }
    /// Computes and stores the checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let s = checksum::data(self.buffer.as_ref());
        self.set_checksum(!s);
    }
}

/// An ICMPv4 message this stack understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Icmpv4Repr<'a> {
    /// Echo request (ping).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Payload.
        data: &'a [u8],
    },
    /// Echo reply.
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Payload.
        data: &'a [u8],
    },
    /// Destination unreachable.
    DstUnreachable {
        /// Code.
        reason: Icmpv4DstUnreachable,
        /// The offending packet's IPv4 header and at least 8 bytes of its payload.
        data: &'a [u8],
    },
    /// Time exceeded (type 11).
    TimeExceeded {
        /// Code.
        reason: Icmpv4TimeExceeded,
        /// The offending packet's IPv4 header and at least 8 bytes of its
        /// payload (for reassembly, the first fragment's).
        data: &'a [u8],
    },
}

impl<'a> Icmpv4Repr<'a> {
    /// Parses a message (checking its length first); the checksum is
    /// verified when `caps.icmpv4.rx()`. Echo request and reply must have
    /// code 0; destination unreachable may have any code (unknown ones come
    /// back as [`Icmpv4DstUnreachable::Unknown`]), and its data is taken as
    /// received; so may time exceeded. Other types are errors.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        p: &Icmpv4Packet<&'a T>,
        caps: &ChecksumCaps,
    ) -> Result<Icmpv4Repr<'a>> {
        p.check_len()?;
        if caps.icmpv4.rx() && !p.verify_checksum() {
            return Err(Error);
        }
        let data = p.buffer.as_ref().get(HEADER_LEN..).unwrap_or(&[]);
        match (p.msg_type(), p.msg_code()) {
            (Icmpv4Message::EchoRequest, 0) => Ok(Icmpv4Repr::EchoRequest {
                ident: p.echo_ident(),
                seq_no: p.echo_seq_no(),
                data,
            }),
            (Icmpv4Message::EchoReply, 0) => Ok(Icmpv4Repr::EchoReply {
                ident: p.echo_ident(),
                seq_no: p.echo_seq_no(),
                data,
            }),
            (Icmpv4Message::DstUnreachable, code) => Ok(Icmpv4Repr::DstUnreachable {
                reason: Icmpv4DstUnreachable::from(code),
                data,
            }),
            (Icmpv4Message::TimeExceeded, code) => Ok(Icmpv4Repr::TimeExceeded {
                reason: Icmpv4TimeExceeded::from(code),
                data,
            }),
            _ => Err(Error),
        }
    }

    /// Length when emitted: 8 + data.
    pub fn buffer_len(&self) -> usize {
        match self {
            Icmpv4Repr::EchoRequest { data, .. }
            | Icmpv4Repr::EchoReply { data, .. }
            | Icmpv4Repr::DstUnreachable { data, .. }
            | Icmpv4Repr::TimeExceeded { data, .. } => HEADER_LEN + data.len(),
        }
    }

    /// Writes the message into a buffer of [`buffer_len`](Self::buffer_len)
    /// bytes (the unused field of destination unreachable and time
    /// exceeded is zero); the
    /// checksum is computed when `caps.icmpv4.tx()`, else left zero.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Icmpv4Packet<T>, caps: &ChecksumCaps) {
        let (ty, code, ident, seq, data) = match *self {
            Icmpv4Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } => (Icmpv4Message::EchoRequest, 0, ident, seq_no, data),
            Icmpv4Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => (Icmpv4Message::EchoReply, 0, ident, seq_no, data),
            Icmpv4Repr::DstUnreachable { reason, data } => {
                (Icmpv4Message::DstUnreachable, u8::from(reason), 0, 0, data)
            }
            Icmpv4Repr::TimeExceeded { reason, data } => {
                (Icmpv4Message::TimeExceeded, u8::from(reason), 0, 0, data)
            }
        };
        p.set_msg_type(ty);
        p.set_msg_code(code);
        p.set_echo_ident(ident);
        p.set_echo_seq_no(seq);
        let d = p.data_mut();
        let n = d.len().min(data.len());
        if let (Some(dst), Some(src)) = (d.get_mut(..n), data.get(..n)) {
            dst.copy_from_slice(src);
        }
        if caps.icmpv4.tx() {
            p.fill_checksum();
        } else {
            p.set_checksum(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use proptest::prelude::*;

    /// An echo request, ident 0x1234, seq 7, "ping".
    const ECHO: [u8; 12] = [
        0x08, 0x00, 0x06, 0xf4, 0x12, 0x34, 0x00, 0x07, b'p', b'i', b'n', b'g',
    ];

    #[test]
    fn deconstruct() {
        let p = Icmpv4Packet::new_checked(&ECHO[..]).unwrap();
        assert_eq!(p.msg_type(), Icmpv4Message::EchoRequest);
        assert_eq!(p.msg_code(), 0);
        assert_eq!(p.checksum(), 0x06f4);
        assert_eq!((p.echo_ident(), p.echo_seq_no()), (0x1234, 7));
        assert_eq!(p.data(), b"ping");
        assert!(p.verify_checksum());
        assert_eq!(p.into_inner(), &ECHO[..]);
    }

    #[test]
    fn construct() {
        let mut b = [0xffu8; 12];
        let mut p = Icmpv4Packet::new_unchecked(&mut b[..]);
        p.set_msg_type(Icmpv4Message::EchoRequest);
        p.set_msg_code(0);
        p.set_echo_ident(0x1234);
        p.set_echo_seq_no(7);
        p.data_mut().copy_from_slice(b"ping");
        p.fill_checksum();
        assert_eq!(b, ECHO);
    }

    #[test]
    fn echo_roundtrip() {
        let r = Icmpv4Repr::EchoRequest {
            ident: 0x1234,
            seq_no: 7,
            data: b"ping",
        };
        let p = Icmpv4Packet::new_checked(&ECHO[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&p, &ChecksumCaps::default()).unwrap(), r);
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(
            &mut Icmpv4Packet::new_unchecked(&mut b[..]),
            &ChecksumCaps::default(),
        );
        assert_eq!(b, ECHO);
        // A reply is the same with type 0.
        let reply = Icmpv4Repr::EchoReply {
            ident: 0x1234,
            seq_no: 7,
            data: b"ping",
        };
        reply.emit(
            &mut Icmpv4Packet::new_unchecked(&mut b[..]),
            &ChecksumCaps::default(),
        );
        assert_eq!(b[0], 0);
        assert_eq!(
            Icmpv4Repr::parse(
                &Icmpv4Packet::new_checked(&b[..]).unwrap(),
                &ChecksumCaps::default()
            ),
            Ok(reply)
        );
        // A damaged checksum is an error unless the port checked it.
        b[9] ^= 1;
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert!(Icmpv4Repr::parse(&p, &ChecksumCaps::default()).is_err());
        assert!(Icmpv4Repr::parse(&p, &ChecksumCaps::ignored()).is_ok());
        // Echo with a nonzero code is malformed.
        let mut b = ECHO;
        b[1] = 1;
        assert!(
            Icmpv4Repr::parse(
                &Icmpv4Packet::new_checked(&b[..]).unwrap(),
                &ChecksumCaps::ignored()
            )
            .is_err()
        );
    }

    #[test]
    fn unreachable_unknown_and_truncated() {
        let quote = [0x45u8; 28];
        let r = Icmpv4Repr::DstUnreachable {
            reason: Icmpv4DstUnreachable::PortUnreachable,
            data: &quote,
        };
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(
            &mut Icmpv4Packet::new_unchecked(&mut b[..]),
            &ChecksumCaps::default(),
        );
        assert_eq!(&b[..2], &[3, 3]);
        assert_eq!(&b[4..8], &[0; 4]);
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&p, &ChecksumCaps::default()).unwrap(), r);
        // Unknown codes round-trip.
        let mut b2 = b.clone();
        b2[1] = 13;
        Icmpv4Packet::new_unchecked(&mut b2[..]).fill_checksum();
        let r2 = Icmpv4Repr::parse(
            &Icmpv4Packet::new_checked(&b2[..]).unwrap(),
            &ChecksumCaps::default(),
        )
        .unwrap();
        assert_eq!(
            r2,
            Icmpv4Repr::DstUnreachable {
                reason: Icmpv4DstUnreachable::Unknown(13),
                data: &quote
            }
        );
        for v in 0..=255u8 {
            assert_eq!(u8::from(Icmpv4DstUnreachable::from(v)), v);
            assert_eq!(u8::from(Icmpv4TimeExceeded::from(v)), v);
            assert_eq!(u8::from(Icmpv4Message::from(v)), v);
        }
        // Types the stack does not speak: readable, not parsed.
        for ty in [13u8, 5, 42] {
            let mut b2 = b.clone();
            b2[0] = ty;
            Icmpv4Packet::new_unchecked(&mut b2[..]).fill_checksum();
            let p = Icmpv4Packet::new_checked(&b2[..]).unwrap();
            assert_eq!(u8::from(p.msg_type()), ty);
            assert!(Icmpv4Repr::parse(&p, &ChecksumCaps::default()).is_err());
        }
        for n in 0..8 {
            assert!(Icmpv4Packet::new_checked(&b[..n]).is_err());
            assert!(
                Icmpv4Repr::parse(
                    &Icmpv4Packet::new_unchecked(&b[..n]),
                    &ChecksumCaps::ignored()
                )
                .is_err()
            );
            let p = Icmpv4Packet::new_unchecked(&b[..n]);
            let _ = (
                p.msg_type(),
                p.msg_code(),
                p.echo_ident(),
                p.echo_seq_no(),
                p.data(),
                p.verify_checksum(),
            );
            // Emitting into a short buffer writes what fits.
            let mut short = vec![0u8; n];
            r.emit(
                &mut Icmpv4Packet::new_unchecked(&mut short[..]),
                &ChecksumCaps::default(),
            );
        }
        // Exactly a header: empty data.
        let p = Icmpv4Packet::new_checked(&b[..8]).unwrap();
        assert!(p.data().is_empty());
    }

    #[test]
    fn time_exceeded_and_next_hop_mtu() {
        let quote = [0x45u8; 28];
        let r = Icmpv4Repr::TimeExceeded {
            reason: Icmpv4TimeExceeded::FragReassembly,
            data: &quote,
        };
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(
            &mut Icmpv4Packet::new_unchecked(&mut b[..]),
            &ChecksumCaps::default(),
        );
        assert_eq!(&b[..2], &[11, 1]);
        assert_eq!(&b[4..8], &[0; 4]);
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&p, &ChecksumCaps::default()).unwrap(), r);
        // RFC 1191's field: the low half of the unused word.
        let frag = Icmpv4Repr::DstUnreachable {
            reason: Icmpv4DstUnreachable::FragRequired,
            data: &quote,
        };
        let mut b = vec![0u8; frag.buffer_len()];
        let mut p = Icmpv4Packet::new_unchecked(&mut b[..]);
        frag.emit(&mut p, &ChecksumCaps::default());
        p.set_next_hop_mtu(1200);
        p.fill_checksum();
        assert_eq!(&b[4..8], &[0, 0, 0x04, 0xb0]);
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.next_hop_mtu(), 1200);
        assert_eq!(
            Icmpv4Repr::parse(&p, &ChecksumCaps::default()).unwrap(),
            frag
        );
        assert_eq!(Icmpv4Packet::new_unchecked(&b[..7]).next_hop_mtu(), 0);
    }

    fn arb_repr(data: &[u8]) -> impl Strategy<Value = Icmpv4Repr<'_>> {
        (
            0u8..4,
            any::<u16>(),
            any::<u16>(),
            any::<u8>(),
            0..=data.len(),
        )
            .prop_map(move |(kind, ident, seq_no, code, n)| {
                let data = &data[..n];
                match kind {
                    0 => Icmpv4Repr::EchoRequest {
                        ident,
                        seq_no,
                        data,
                    },
                    1 => Icmpv4Repr::EchoReply {
                        ident,
                        seq_no,
                        data,
                    },
                    2 => Icmpv4Repr::DstUnreachable {
                        reason: Icmpv4DstUnreachable::from(code),
                        data,
                    },
                    _ => Icmpv4Repr::TimeExceeded {
                        reason: Icmpv4TimeExceeded::from(code),
                        data,
                    },
                }
            })
    }

    proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let p = Icmpv4Packet::new_unchecked(&bytes[..]);
            let _ = (p.msg_type(), p.data(), p.verify_checksum());
            let _ = Icmpv4Repr::parse(&p, &ChecksumCaps::default());
            let _ = Icmpv4Repr::parse(&p, &ChecksumCaps::ignored());
        }

        #[test]
        fn emit_parse_roundtrip(r in arb_repr(&[0x45, 0, 0, 28, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17])) {
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut Icmpv4Packet::new_unchecked(&mut b[..]), &ChecksumCaps::default());
            let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
            prop_assert!(p.verify_checksum());
            prop_assert_eq!(Icmpv4Repr::parse(&p, &ChecksumCaps::default()).unwrap(), r);
        }
    }
}
