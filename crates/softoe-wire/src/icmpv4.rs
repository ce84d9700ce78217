//! ICMPv4 (RFC 792): echo, and destination unreachable.

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

/// Header length (type, code, checksum, and four bytes of rest-of-header).
pub const HEADER_LEN: usize = 8;

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

    fn be16(&self, at: usize) -> u16 {
        match self.buffer.as_ref().get(at..at + 2) {
            Some(&[a, b]) => u16::from_be_bytes([a, b]),
            _ => 0,
        }
    }

    /// Type.
    pub fn msg_type(&self) -> Icmpv4Message {
        Icmpv4Message::from(self.buffer.as_ref().first().copied().unwrap_or(0))
    }

    /// Code.
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref().get(1).copied().unwrap_or(0)
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        self.be16(2)
    }

    /// Echo identifier.
    pub fn echo_ident(&self) -> u16 {
        self.be16(4)
    }

    /// Echo sequence number.
    pub fn echo_seq_no(&self) -> u16 {
        self.be16(6)
    }

    /// The bytes after the header.
    pub fn data(&self) -> &[u8] {
        self.buffer.as_ref().get(HEADER_LEN..).unwrap_or(&[])
    }

    /// Whether the checksum (over the whole message) is right.
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
        if let Some(b) = self.buffer.as_mut().get_mut(0) {
            *b = u8::from(v);
        }
    }
    /// Sets the code.
    pub fn set_msg_code(&mut self, v: u8) {
        if let Some(b) = self.buffer.as_mut().get_mut(1) {
            *b = v;
        }
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.set16(2, v);
    }
    /// Sets the echo identifier.
    pub fn set_echo_ident(&mut self, v: u16) {
        self.set16(4, v);
    }
    /// Sets the echo sequence number.
    pub fn set_echo_seq_no(&mut self, v: u16) {
        self.set16(6, v);
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
}

impl<'a> Icmpv4Repr<'a> {
    /// Parses a message; checksum verified when `caps.icmpv4.rx()`. Types
    /// other than echo and destination unreachable are errors.
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
            _ => Err(Error),
        }
    }

    /// Length when emitted.
    pub fn buffer_len(&self) -> usize {
        match self {
            Icmpv4Repr::EchoRequest { data, .. }
            | Icmpv4Repr::EchoReply { data, .. }
            | Icmpv4Repr::DstUnreachable { data, .. } => HEADER_LEN + data.len(),
        }
    }

    /// Writes the message into a buffer of `buffer_len()` bytes.
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

    #[test]
    fn echo_roundtrip() {
        let r = Icmpv4Repr::EchoRequest {
            ident: 0x1234,
            seq_no: 7,
            data: b"ping",
        };
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(
            &mut Icmpv4Packet::new_unchecked(&mut b[..]),
            &ChecksumCaps::default(),
        );
        assert_eq!(&b[..2], &[8, 0]);
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(Icmpv4Repr::parse(&p, &ChecksumCaps::default()).unwrap(), r);
        b[9] ^= 1;
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert!(Icmpv4Repr::parse(&p, &ChecksumCaps::default()).is_err());
    }

    #[test]
    fn unreachable_and_unknown() {
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
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&p, &ChecksumCaps::default()).unwrap(), r);
        let mut b2 = b.clone();
        b2[0] = 13; // timestamp request: not understood
        let mut p = Icmpv4Packet::new_unchecked(&mut b2[..]);
        p.fill_checksum();
        assert!(
            Icmpv4Repr::parse(
                &Icmpv4Packet::new_checked(&b2[..]).unwrap(),
                &ChecksumCaps::default()
            )
            .is_err()
        );
        assert!(Icmpv4Packet::new_checked(&b[..7]).is_err());
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            if let Ok(p) = Icmpv4Packet::new_checked(&bytes[..]) {
                let _ = Icmpv4Repr::parse(&p, &ChecksumCaps::ignored());
            }
        }
    }
}
