//! TCP (RFC 9293) segments and options (RFC 7323, RFC 2018).
//!
//! The view reads every header field; [`TcpRepr`] is the parsed meaning:
//! control flag (SYN, FIN, RST — at most one; PSH apart), sequence and
//! acknowledgement numbers, window, and the options a modern TCP needs
//! (MSS, window scale, SACK-permitted, SACK blocks, timestamps). Unknown
//! options are skipped on parse (they round-trip through [`TcpOption`]).
//!
//! For a stack that sends payload by reference, [`TcpRepr::emit_header`]
//! writes only the header; the caller adds the payload and either computes
//! the checksum or leaves the pseudo-header sum for the port.

use core::fmt;
use core::ops;

use crate::checksum::{self, ChecksumCaps};
use crate::error::{Error, Result};
use crate::ipv4::{IpProtocol, Ipv4Address};

/// A TCP sequence number: arithmetic and comparison modulo 2³².
///
/// The ordering compares by the sign of the wrapping difference (RFC 1982
/// style), so it is not a total order; it is meaningful for numbers less
/// than 2³¹ apart, which is what TCP guarantees.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpSeqNumber(pub u32);

impl TcpSeqNumber {
    /// `self - other` as a signed distance.
    pub const fn wrapping_diff(self, other: TcpSeqNumber) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// The later of the two.
    pub fn max(self, other: TcpSeqNumber) -> TcpSeqNumber {
        if self.wrapping_diff(other) < 0 {
            other
        } else {
            self
        }
    }

    /// The earlier of the two.
    pub fn min(self, other: TcpSeqNumber) -> TcpSeqNumber {
        if self.wrapping_diff(other) < 0 {
            self
        } else {
            other
        }
    }
}

impl ops::Add<usize> for TcpSeqNumber {
    type Output = TcpSeqNumber;
    fn add(self, rhs: usize) -> TcpSeqNumber {
        TcpSeqNumber(self.0.wrapping_add(rhs as u32))
    }
}

impl ops::Sub<usize> for TcpSeqNumber {
    type Output = TcpSeqNumber;
    fn sub(self, rhs: usize) -> TcpSeqNumber {
        TcpSeqNumber(self.0.wrapping_sub(rhs as u32))
    }
}

impl ops::AddAssign<usize> for TcpSeqNumber {
    fn add_assign(&mut self, rhs: usize) {
        *self = *self + rhs;
    }
}

impl PartialOrd for TcpSeqNumber {
    fn partial_cmp(&self, other: &TcpSeqNumber) -> Option<core::cmp::Ordering> {
        Some(self.wrapping_diff(*other).cmp(&0))
    }
}

impl fmt::Display for TcpSeqNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Debug for TcpSeqNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The control flag of a segment (PSH is separate: [`TcpRepr::psh`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TcpControl {
    /// None of SYN, FIN, RST.
    None,
    /// SYN.
    Syn,
    /// FIN.
    Fin,
    /// RST.
    Rst,
}

impl TcpControl {
    /// Sequence space the flag occupies (SYN and FIN: one).
    pub const fn len(&self) -> usize {
        match self {
            TcpControl::Syn | TcpControl::Fin => 1,
            _ => 0,
        }
    }

    /// Whether the flag occupies no sequence space.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The timestamp option's two values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TcpTimestamp {
    /// TSval.
    pub tsval: u32,
    /// TSecr.
    pub tsecr: u32,
}

/// Up to four SACK blocks: (left edge, right edge) as raw sequence numbers.
pub type TcpSackRanges = [Option<(u32, u32)>; 4];

mod kind {
    pub const EOL: u8 = 0;
    pub const NOP: u8 = 1;
    pub const MSS: u8 = 2;
    pub const WS: u8 = 3;
    pub const SACK_PERM: u8 = 4;
    pub const SACK: u8 = 5;
    pub const TS: u8 = 8;
}

/// One TCP option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpOption<'a> {
    /// End of option list.
    EndOfList,
    /// Padding.
    NoOperation,
    /// Maximum segment size.
    MaxSegmentSize(u16),
    /// Window scale shift.
    WindowScale(u8),
    /// SACK permitted.
    SackPermitted,
    /// SACK blocks.
    SackRange(TcpSackRanges),
    /// Timestamps.
    Timestamp(TcpTimestamp),
    /// Any other option, kept verbatim.
    Unknown {
        /// Kind.
        kind: u8,
        /// Bytes after kind and length.
        data: &'a [u8],
    },
}

fn be16(b: &[u8], at: usize) -> u16 {
    match b.get(at..at + 2) {
        Some(&[x, y]) => u16::from_be_bytes([x, y]),
        _ => 0,
    }
}

fn be32(b: &[u8], at: usize) -> u32 {
    match b.get(at..at + 4) {
        Some(&[w, x, y, z]) => u32::from_be_bytes([w, x, y, z]),
        _ => 0,
    }
}

impl<'a> TcpOption<'a> {
    /// Parses the option at the start of `buffer`; returns the rest.
    pub fn parse(buffer: &'a [u8]) -> Result<(&'a [u8], TcpOption<'a>)> {
        let (&k, _) = buffer.split_first().ok_or(Error)?;
        match k {
            kind::EOL => return Ok((&[], TcpOption::EndOfList)),
            kind::NOP => return Ok((buffer.get(1..).unwrap_or(&[]), TcpOption::NoOperation)),
            _ => {}
        }
        let len = usize::from(*buffer.get(1).ok_or(Error)?);
        if len < 2 {
            return Err(Error);
        }
        let data = buffer.get(2..len).ok_or(Error)?;
        let rest = buffer.get(len..).ok_or(Error)?;
        let opt = match (k, len) {
            (kind::MSS, 4) => TcpOption::MaxSegmentSize(be16(data, 0)),
            (kind::MSS, _) => return Err(Error),
            (kind::WS, 3) => TcpOption::WindowScale(data.first().copied().unwrap_or(0)),
            (kind::WS, _) => return Err(Error),
            (kind::SACK_PERM, 2) => TcpOption::SackPermitted,
            (kind::SACK_PERM, _) => return Err(Error),
            (kind::TS, 10) => TcpOption::Timestamp(TcpTimestamp {
                tsval: be32(data, 0),
                tsecr: be32(data, 4),
            }),
            (kind::TS, _) => return Err(Error),
            (kind::SACK, _) => {
                if data.is_empty() || data.len() % 8 != 0 || data.len() > 32 {
                    return Err(Error);
                }
                let mut r: TcpSackRanges = [None; 4];
                for (i, slot) in r.iter_mut().enumerate().take(data.len() / 8) {
                    *slot = Some((be32(data, i * 8), be32(data, i * 8 + 4)));
                }
                TcpOption::SackRange(r)
            }
            _ => TcpOption::Unknown { kind: k, data },
        };
        Ok((rest, opt))
    }

    /// Length when emitted.
    pub fn buffer_len(&self) -> usize {
        match self {
            TcpOption::EndOfList | TcpOption::NoOperation => 1,
            TcpOption::MaxSegmentSize(_) => 4,
            TcpOption::WindowScale(_) => 3,
            TcpOption::SackPermitted => 2,
            TcpOption::SackRange(r) => 2 + 8 * r.iter().flatten().count(),
            TcpOption::Timestamp(_) => 10,
            TcpOption::Unknown { data, .. } => 2 + data.len(),
        }
    }

    /// Writes the option at the start of `buffer`; returns the rest.
    pub fn emit<'b>(&self, buffer: &'b mut [u8]) -> &'b mut [u8] {
        let len = self.buffer_len();
        let (head, rest) = if buffer.len() >= len {
            buffer.split_at_mut(len)
        } else {
            return &mut [];
        };
        match *self {
            TcpOption::EndOfList => head[0] = kind::EOL,
            TcpOption::NoOperation => head[0] = kind::NOP,
            TcpOption::MaxSegmentSize(m) => {
                head.copy_from_slice(&[kind::MSS, 4, (m >> 8) as u8, m as u8]);
            }
            TcpOption::WindowScale(s) => head.copy_from_slice(&[kind::WS, 3, s]),
            TcpOption::SackPermitted => head.copy_from_slice(&[kind::SACK_PERM, 2]),
            TcpOption::SackRange(r) => {
                head[0] = kind::SACK;
                head[1] = len as u8;
                for (i, (l, rr)) in r.iter().flatten().enumerate() {
                    let at = 2 + i * 8;
                    head[at..at + 4].copy_from_slice(&l.to_be_bytes());
                    head[at + 4..at + 8].copy_from_slice(&rr.to_be_bytes());
                }
            }
            TcpOption::Timestamp(ts) => {
                head[0] = kind::TS;
                head[1] = 10;
                head[2..6].copy_from_slice(&ts.tsval.to_be_bytes());
                head[6..10].copy_from_slice(&ts.tsecr.to_be_bytes());
            }
            TcpOption::Unknown { kind: k, data } => {
                head[0] = k;
                head[1] = len as u8;
                head[2..].copy_from_slice(data);
            }
        }
        rest
    }
}

mod field {
    use core::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const SEQ: Range<usize> = 4..8;
    pub const ACK: Range<usize> = 8..12;
    pub const OFF_FLAGS: Range<usize> = 12..14;
    pub const WINDOW: Range<usize> = 14..16;
    pub const CHECKSUM: Range<usize> = 16..18;
    pub const URGENT: Range<usize> = 18..20;

    pub const FLG_FIN: u16 = 0x001;
    pub const FLG_SYN: u16 = 0x002;
    pub const FLG_RST: u16 = 0x004;
    pub const FLG_PSH: u16 = 0x008;
    pub const FLG_ACK: u16 = 0x010;
    pub const FLG_URG: u16 = 0x020;
    pub const FLG_ECE: u16 = 0x040;
    pub const FLG_CWR: u16 = 0x080;
}

/// Header length without options.
pub const HEADER_LEN: usize = 20;

/// A view of a TCP segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> TcpPacket<T> {
        TcpPacket { buffer }
    }

    /// Wraps a buffer and checks the header length.
    pub fn new_checked(buffer: T) -> Result<TcpPacket<T>> {
        let p = TcpPacket::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// At least 20 bytes; 20 ≤ data offset ≤ buffer.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        let hl = self.header_len();
        if len < HEADER_LEN || hl < HEADER_LEN || hl > len {
            Err(Error)
        } else {
            Ok(())
        }
    }

    /// The buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn get16(&self, r: ops::Range<usize>) -> u16 {
        be16(self.buffer.as_ref(), r.start)
    }

    fn flags(&self) -> u16 {
        self.get16(field::OFF_FLAGS) & 0x0fff
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        self.get16(field::SRC_PORT)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        self.get16(field::DST_PORT)
    }
    /// Sequence number.
    pub fn seq_number(&self) -> TcpSeqNumber {
        TcpSeqNumber(be32(self.buffer.as_ref(), field::SEQ.start))
    }
    /// Acknowledgement number (meaningful when ACK is set).
    pub fn ack_number(&self) -> TcpSeqNumber {
        TcpSeqNumber(be32(self.buffer.as_ref(), field::ACK.start))
    }
    /// Header length in bytes (data offset × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.get16(field::OFF_FLAGS) >> 12) * 4
    }
    /// FIN.
    pub fn fin(&self) -> bool {
        self.flags() & field::FLG_FIN != 0
    }
    /// SYN.
    pub fn syn(&self) -> bool {
        self.flags() & field::FLG_SYN != 0
    }
    /// RST.
    pub fn rst(&self) -> bool {
        self.flags() & field::FLG_RST != 0
    }
    /// PSH.
    pub fn psh(&self) -> bool {
        self.flags() & field::FLG_PSH != 0
    }
    /// ACK.
    pub fn ack(&self) -> bool {
        self.flags() & field::FLG_ACK != 0
    }
    /// URG.
    pub fn urg(&self) -> bool {
        self.flags() & field::FLG_URG != 0
    }
    /// ECE.
    pub fn ece(&self) -> bool {
        self.flags() & field::FLG_ECE != 0
    }
    /// CWR.
    pub fn cwr(&self) -> bool {
        self.flags() & field::FLG_CWR != 0
    }
    /// Window field (unscaled).
    pub fn window_len(&self) -> u16 {
        self.get16(field::WINDOW)
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        self.get16(field::CHECKSUM)
    }
    /// Urgent pointer.
    pub fn urgent_at(&self) -> u16 {
        self.get16(field::URGENT)
    }
    /// The option bytes.
    pub fn options(&self) -> &[u8] {
        self.buffer
            .as_ref()
            .get(HEADER_LEN..self.header_len())
            .unwrap_or(&[])
    }
    /// The payload.
    pub fn payload(&self) -> &[u8] {
        self.buffer.as_ref().get(self.header_len()..).unwrap_or(&[])
    }
    /// Sequence space: payload plus SYN and FIN.
    pub fn segment_len(&self) -> usize {
        self.payload().len() + usize::from(self.syn()) + usize::from(self.fin())
    }
    /// Whether the checksum over the whole buffer is right.
    pub fn verify_checksum(&self, src: &Ipv4Address, dst: &Ipv4Address) -> bool {
        let b = self.buffer.as_ref();
        let mut acc = checksum::Accumulator::new();
        acc.add_sum(checksum::pseudo_header(
            *src,
            *dst,
            IpProtocol::Tcp,
            b.len() as u32,
        ));
        acc.add(b);
        acc.finish() == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    fn set16(&mut self, at: usize, v: u16) {
        if let Some(b) = self.buffer.as_mut().get_mut(at..at + 2) {
            b.copy_from_slice(&v.to_be_bytes());
        }
    }
    fn set32(&mut self, at: usize, v: u32) {
        if let Some(b) = self.buffer.as_mut().get_mut(at..at + 4) {
            b.copy_from_slice(&v.to_be_bytes());
        }
    }
    fn set_flag(&mut self, f: u16, on: bool) {
        let raw = self.get16(field::OFF_FLAGS);
        self.set16(field::OFF_FLAGS.start, if on { raw | f } else { raw & !f });
    }
    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        self.set16(field::SRC_PORT.start, v);
    }
    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        self.set16(field::DST_PORT.start, v);
    }
    /// Sets the sequence number.
    pub fn set_seq_number(&mut self, v: TcpSeqNumber) {
        self.set32(field::SEQ.start, v.0);
    }
    /// Sets the acknowledgement number.
    pub fn set_ack_number(&mut self, v: TcpSeqNumber) {
        self.set32(field::ACK.start, v.0);
    }
    /// Clears all flags.
    pub fn clear_flags(&mut self) {
        let raw = self.get16(field::OFF_FLAGS);
        self.set16(field::OFF_FLAGS.start, raw & 0xf000);
    }
    /// Sets the header length in bytes (multiple of 4, at most 60).
    pub fn set_header_len(&mut self, len: u8) {
        let raw = self.get16(field::OFF_FLAGS);
        self.set16(
            field::OFF_FLAGS.start,
            (raw & 0x0fff) | (u16::from(len / 4) << 12),
        );
    }
    /// Sets FIN.
    pub fn set_fin(&mut self, on: bool) {
        self.set_flag(field::FLG_FIN, on);
    }
    /// Sets SYN.
    pub fn set_syn(&mut self, on: bool) {
        self.set_flag(field::FLG_SYN, on);
    }
    /// Sets RST.
    pub fn set_rst(&mut self, on: bool) {
        self.set_flag(field::FLG_RST, on);
    }
    /// Sets PSH.
    pub fn set_psh(&mut self, on: bool) {
        self.set_flag(field::FLG_PSH, on);
    }
    /// Sets ACK.
    pub fn set_ack(&mut self, on: bool) {
        self.set_flag(field::FLG_ACK, on);
    }
    /// Sets URG.
    pub fn set_urg(&mut self, on: bool) {
        self.set_flag(field::FLG_URG, on);
    }
    /// Sets ECE.
    pub fn set_ece(&mut self, on: bool) {
        self.set_flag(field::FLG_ECE, on);
    }
    /// Sets CWR.
    pub fn set_cwr(&mut self, on: bool) {
        self.set_flag(field::FLG_CWR, on);
    }
    /// Sets the window field.
    pub fn set_window_len(&mut self, v: u16) {
        self.set16(field::WINDOW.start, v);
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.set16(field::CHECKSUM.start, v);
    }
    /// Sets the urgent pointer.
    pub fn set_urgent_at(&mut self, v: u16) {
        self.set16(field::URGENT.start, v);
    }
    /// The option bytes, mutably.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        self.buffer
            .as_mut()
            .get_mut(HEADER_LEN..hl)
            .unwrap_or(&mut [])
    }
    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        self.buffer.as_mut().get_mut(hl..).unwrap_or(&mut [])
    }
    /// Computes and stores the checksum over the whole buffer.
    pub fn fill_checksum(&mut self, src: &Ipv4Address, dst: &Ipv4Address) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let mut acc = checksum::Accumulator::new();
        acc.add_sum(checksum::pseudo_header(
            *src,
            *dst,
            IpProtocol::Tcp,
            b.len() as u32,
        ));
        acc.add(b);
        let s = !acc.finish();
        self.set_checksum(s);
    }
}

/// A TCP segment, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpRepr<'a> {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// SYN, FIN, RST or none.
    pub control: TcpControl,
    /// PSH.
    pub psh: bool,
    /// Sequence number.
    pub seq_number: TcpSeqNumber,
    /// Acknowledgement number, if ACK is set.
    pub ack_number: Option<TcpSeqNumber>,
    /// Window field (unscaled).
    pub window_len: u16,
    /// Window-scale option (clamped to 14).
    pub window_scale: Option<u8>,
    /// MSS option.
    pub max_seg_size: Option<u16>,
    /// SACK-permitted option.
    pub sack_permitted: bool,
    /// SACK blocks.
    pub sack_ranges: TcpSackRanges,
    /// Timestamp option.
    pub timestamp: Option<TcpTimestamp>,
    /// Payload.
    pub payload: &'a [u8],
}

impl<'a> TcpRepr<'a> {
    /// Parses a segment; checksum verified when `caps.tcp.rx()`.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        p: &TcpPacket<&'a T>,
        src: &Ipv4Address,
        dst: &Ipv4Address,
        caps: &ChecksumCaps,
    ) -> Result<TcpRepr<'a>> {
        p.check_len()?;
        if p.src_port() == 0 || p.dst_port() == 0 {
            return Err(Error);
        }
        if caps.tcp.rx() && !p.verify_checksum(src, dst) {
            return Err(Error);
        }
        let control = match (p.syn(), p.fin(), p.rst()) {
            (false, false, false) => TcpControl::None,
            (true, false, false) => TcpControl::Syn,
            (false, true, false) => TcpControl::Fin,
            (false, false, true) => TcpControl::Rst,
            _ => return Err(Error),
        };
        let buf: &'a [u8] = p.buffer.as_ref();
        let hl = p.header_len();
        let mut opts = buf.get(HEADER_LEN..hl).ok_or(Error)?;
        let mut repr = TcpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            control,
            psh: p.psh(),
            seq_number: p.seq_number(),
            ack_number: p.ack().then(|| p.ack_number()),
            window_len: p.window_len(),
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 4],
            timestamp: None,
            payload: buf.get(hl..).unwrap_or(&[]),
        };
        while !opts.is_empty() {
            let (rest, opt) = TcpOption::parse(opts)?;
            match opt {
                TcpOption::EndOfList => break,
                TcpOption::NoOperation | TcpOption::Unknown { .. } => {}
                TcpOption::MaxSegmentSize(m) => repr.max_seg_size = Some(m),
                TcpOption::WindowScale(s) => repr.window_scale = Some(s.min(14)),
                TcpOption::SackPermitted => repr.sack_permitted = true,
                TcpOption::SackRange(r) => repr.sack_ranges = r,
                TcpOption::Timestamp(t) => repr.timestamp = Some(t),
            }
            opts = rest;
        }
        Ok(repr)
    }

    /// SACK blocks emitted: as many as fit in the 40 option bytes left by
    /// the other options (3 beside timestamps, 4 alone).
    fn sack_count(&self) -> usize {
        let room = 40usize.saturating_sub(self.other_options_len());
        let fit = room.saturating_sub(4) / 8;
        self.sack_ranges.iter().flatten().count().min(fit).min(4)
    }

    fn other_options_len(&self) -> usize {
        let mut n = 0;
        if self.max_seg_size.is_some() {
            n += 4;
        }
        if self.timestamp.is_some() {
            n += 12;
        } else if self.sack_permitted {
            n += 4;
        }
        if self.window_scale.is_some() {
            n += 4;
        }
        n
    }

    fn options_len(&self) -> usize {
        let sacks = self.sack_count();
        self.other_options_len() + if sacks > 0 { 4 + 8 * sacks } else { 0 }
    }

    /// Header length with options (padded to 4 bytes; at most 60).
    pub fn header_len(&self) -> usize {
        (HEADER_LEN + self.options_len()).min(60)
    }

    /// Header and payload length.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload.len()
    }

    /// Sequence space: payload plus SYN or FIN.
    pub fn segment_len(&self) -> usize {
        self.payload.len() + self.control.len()
    }

    /// Writes the header and options only (the checksum field is zeroed; the
    /// payload, `payload_len` bytes, is the caller's). Options are laid out as
    /// Linux does: `MSS, SACKOK/NOP NOP, TS, NOP WS` on SYNs; `NOP NOP TS,
    /// NOP NOP SACK` on others.
    pub fn emit_header<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        p: &mut TcpPacket<T>,
        payload_len: usize,
    ) {
        let _ = payload_len;
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_seq_number(self.seq_number);
        p.set_ack_number(self.ack_number.unwrap_or(TcpSeqNumber(0)));
        p.set_window_len(self.window_len);
        p.set_header_len(self.header_len() as u8);
        p.clear_flags();
        match self.control {
            TcpControl::None => {}
            TcpControl::Syn => p.set_syn(true),
            TcpControl::Fin => p.set_fin(true),
            TcpControl::Rst => p.set_rst(true),
        }
        p.set_psh(self.psh);
        p.set_ack(self.ack_number.is_some());
        p.set_checksum(0);
        p.set_urgent_at(0);
        let mut o = p.options_mut();
        if let Some(m) = self.max_seg_size {
            o = TcpOption::MaxSegmentSize(m).emit(o);
        }
        match (self.timestamp, self.sack_permitted) {
            (Some(ts), true) => {
                o = TcpOption::SackPermitted.emit(o);
                o = TcpOption::Timestamp(ts).emit(o);
            }
            (Some(ts), false) => {
                o = TcpOption::NoOperation.emit(o);
                o = TcpOption::NoOperation.emit(o);
                o = TcpOption::Timestamp(ts).emit(o);
            }
            (None, true) => {
                o = TcpOption::NoOperation.emit(o);
                o = TcpOption::NoOperation.emit(o);
                o = TcpOption::SackPermitted.emit(o);
            }
            (None, false) => {}
        }
        if let Some(ws) = self.window_scale {
            o = TcpOption::NoOperation.emit(o);
            o = TcpOption::WindowScale(ws).emit(o);
        }
        let n = self.sack_count();
        if n > 0 {
            let mut r: TcpSackRanges = [None; 4];
            for (slot, v) in r.iter_mut().zip(self.sack_ranges.iter().flatten()).take(n) {
                *slot = Some(*v);
            }
            o = TcpOption::NoOperation.emit(o);
            o = TcpOption::NoOperation.emit(o);
            o = TcpOption::SackRange(r).emit(o);
        }
        // Anything left (none, with the layouts above) is end-of-list.
        o.fill(0);
    }

    /// Writes header, options and payload, then the checksum if
    /// `caps.tcp.tx()`; otherwise the field holds the pseudo-header sum, which
    /// is what a port with checksum offload needs.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        p: &mut TcpPacket<T>,
        src: &Ipv4Address,
        dst: &Ipv4Address,
        caps: &ChecksumCaps,
    ) {
        self.emit_header(p, self.payload.len());
        let pl = p.payload_mut();
        let n = pl.len().min(self.payload.len());
        if let (Some(d), Some(s)) = (pl.get_mut(..n), self.payload.get(..n)) {
            d.copy_from_slice(s);
        }
        if caps.tcp.tx() {
            p.fill_checksum(src, dst);
        } else {
            let len = p.buffer.as_ref().len() as u32;
            p.set_checksum(checksum::pseudo_header(*src, *dst, IpProtocol::Tcp, len));
        }
    }
}

impl fmt::Display for TcpRepr<'_> {
    /// Like tcpdump: `TCP 49500 > 80 [S.] seq=… ack=… win=… len=…`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let flag = match self.control {
            TcpControl::Syn => "S",
            TcpControl::Fin => "F",
            TcpControl::Rst => "R",
            TcpControl::None => "",
        };
        write!(
            f,
            "TCP {} > {} [{}{}{}] seq={}",
            self.src_port,
            self.dst_port,
            flag,
            if self.psh { "P" } else { "" },
            if self.ack_number.is_some() { "." } else { "" },
            self.seq_number
        )?;
        if let Some(a) = self.ack_number {
            write!(f, " ack={a}")?;
        }
        write!(f, " win={} len={}", self.window_len, self.payload.len())?;
        if let Some(m) = self.max_seg_size {
            write!(f, " mss={m}")?;
        }
        if let Some(w) = self.window_scale {
            write!(f, " wscale={w}")?;
        }
        if self.sack_permitted {
            f.write_str(" sackOK")?;
        }
        if let Some(t) = self.timestamp {
            write!(f, " TS val {} ecr {}", t.tsval, t.tsecr)?;
        }
        for (l, r) in self.sack_ranges.iter().flatten() {
            write!(f, " sack {l}:{r}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;
    use alloc::vec::Vec;

    const SRC: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
    const DST: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);

    /// A SYN from Linux 6.x: MSS 1460, SACKOK, TS, NOP, WS 7.
    const LINUX_SYN: [u8; 40] = [
        0xc1, 0x5c, 0x00, 0x50, 0x9c, 0x7a, 0x54, 0x21, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfa,
        0xf0, 0x00, 0x00, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a, 0x6b, 0x2a,
        0x1f, 0x44, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x07,
    ];

    fn with_checksum(mut b: Vec<u8>) -> Vec<u8> {
        TcpPacket::new_unchecked(&mut b[..]).fill_checksum(&SRC, &DST);
        b
    }

    #[test]
    fn parse_linux_syn() {
        let b = with_checksum(LINUX_SYN.to_vec());
        let p = TcpPacket::new_checked(&b[..]).unwrap();
        let r = TcpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::default()).unwrap();
        assert_eq!(r.control, TcpControl::Syn);
        assert_eq!(r.src_port, 49500);
        assert_eq!(r.dst_port, 80);
        assert_eq!(r.ack_number, None);
        assert_eq!(r.max_seg_size, Some(1460));
        assert!(r.sack_permitted);
        assert_eq!(r.window_scale, Some(7));
        assert_eq!(
            r.timestamp,
            Some(TcpTimestamp {
                tsval: 0x6b2a_1f44,
                tsecr: 0
            })
        );
        // Emitting gives Linux's exact layout back.
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(
            &mut TcpPacket::new_unchecked(&mut out[..]),
            &SRC,
            &DST,
            &ChecksumCaps::default(),
        );
        assert_eq!(out, b);
        assert!(r.to_string().starts_with("TCP 49500 > 80 [S] seq="));
    }

    #[test]
    fn impossible_flags_ports_and_options() {
        let base = with_checksum(LINUX_SYN.to_vec());
        let check = |mutate: &dyn Fn(&mut Vec<u8>)| {
            let mut b = base.clone();
            mutate(&mut b);
            let b = with_checksum(b);
            TcpPacket::new_checked(&b[..])
                .and_then(|p| TcpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::default()))
                .map(|r| r.window_scale)
        };
        assert!(check(&|b| b[13] = 0x03).is_err(), "SYN+FIN");
        assert!(check(&|b| b[13] = 0x06).is_err(), "SYN+RST");
        assert!(check(&|b| b[13] = 0x05).is_err(), "FIN+RST");
        assert!(
            check(&|b| b[0..2].copy_from_slice(&[0, 0])).is_err(),
            "port 0"
        );
        assert!(check(&|b| b[21] = 3).is_err(), "MSS of length 3");
        assert!(check(&|b| b[21] = 0).is_err(), "option length 0");
        assert!(check(&|b| b[38] = 40).is_err(), "option past the header");
        assert_eq!(check(&|b| b[39] = 200).unwrap(), Some(14), "WS clamped");
        // Data offset below 20 or beyond the buffer.
        let mut b = base.clone();
        b[12] = 0x40;
        assert!(TcpPacket::new_checked(&b[..]).is_err());
        b[12] = 0xf0;
        assert!(TcpPacket::new_checked(&b[..]).is_err());
        // Bad checksum.
        let mut b = base.clone();
        b[5] ^= 1;
        let p = TcpPacket::new_checked(&b[..]).unwrap();
        assert!(TcpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::default()).is_err());
        assert!(TcpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::ignored()).is_ok());
    }

    #[test]
    fn unknown_options_are_skipped_and_round_trip() {
        let data = [9u8, 9, 9];
        let opt = TcpOption::Unknown {
            kind: 254,
            data: &data,
        };
        let mut b = [0u8; 5];
        assert!(opt.emit(&mut b).is_empty());
        let (rest, back) = TcpOption::parse(&b).unwrap();
        assert!(rest.is_empty());
        assert_eq!(back, opt);
        assert_eq!(TcpOption::parse(&[1, 0]).unwrap().1, TcpOption::NoOperation);
        assert_eq!(
            TcpOption::parse(&[0, 7, 7]).unwrap(),
            (&[][..], TcpOption::EndOfList)
        );
    }

    #[test]
    fn data_segment_with_sack_blocks() {
        let payload = [0xabu8; 100];
        let r = TcpRepr {
            src_port: 80,
            dst_port: 49500,
            control: TcpControl::Fin,
            psh: true,
            seq_number: TcpSeqNumber(u32::MAX),
            ack_number: Some(TcpSeqNumber(5)),
            window_len: 1000,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [Some((1, 2)), Some((3, 4)), Some((5, 6)), Some((7, 8))],
            timestamp: Some(TcpTimestamp { tsval: 1, tsecr: 2 }),
            payload: &payload,
        };
        // With timestamps only three SACK blocks fit.
        assert_eq!(r.header_len(), 20 + 12 + 4 + 24);
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(
            &mut TcpPacket::new_unchecked(&mut b[..]),
            &SRC,
            &DST,
            &ChecksumCaps::default(),
        );
        let p = TcpPacket::new_checked(&b[..]).unwrap();
        let back = TcpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::default()).unwrap();
        assert_eq!(
            back.sack_ranges,
            [Some((1, 2)), Some((3, 4)), Some((5, 6)), None]
        );
        assert_eq!(back.payload, &payload[..]);
        assert_eq!(back.segment_len(), 101);
        assert_eq!(p.segment_len(), 101);
        assert!(back.psh);
    }

    #[test]
    fn offloaded_checksum_is_pseudo_header() {
        let payload = [1u8; 33];
        let r = TcpRepr {
            src_port: 1,
            dst_port: 2,
            control: TcpControl::None,
            psh: false,
            seq_number: TcpSeqNumber(1),
            ack_number: Some(TcpSeqNumber(1)),
            window_len: 1,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 4],
            timestamp: None,
            payload: &payload,
        };
        let mut b = vec![0u8; r.buffer_len()];
        let caps = ChecksumCaps {
            tcp: crate::Checksum::Rx,
            ..ChecksumCaps::default()
        };
        r.emit(&mut TcpPacket::new_unchecked(&mut b[..]), &SRC, &DST, &caps);
        // What the port does with NEEDS_CSUM: sum from the TCP header on.
        let s = !checksum::data(&b);
        b[16..18].copy_from_slice(&s.to_be_bytes());
        assert!(
            TcpPacket::new_checked(&b[..])
                .unwrap()
                .verify_checksum(&SRC, &DST)
        );
    }

    #[test]
    fn seq_number_wraps() {
        let a = TcpSeqNumber(u32::MAX);
        assert_eq!(a + 1, TcpSeqNumber(0));
        assert!(a < a + 1);
        assert_eq!((a + 10).wrapping_diff(a), 10);
        assert_eq!(a.max(a + 3), a + 3);
        assert_eq!((a + 3).min(a), a);
        assert_eq!(TcpSeqNumber(2) - 3, TcpSeqNumber(u32::MAX));
    }

    fn arb_repr(payload: &[u8]) -> impl proptest::strategy::Strategy<Value = TcpRepr<'_>> {
        use proptest::prelude::*;
        (
            (
                1u16..,
                1u16..,
                0u8..4,
                any::<bool>(),
                any::<u32>(),
                proptest::option::of(any::<u32>()),
            ),
            (
                any::<u16>(),
                proptest::option::of(0u8..15),
                proptest::option::of(any::<u16>()),
                any::<bool>(),
            ),
            (
                proptest::option::of((any::<u32>(), any::<u32>())),
                0usize..5,
            ),
        )
            .prop_map(
                move |((sp, dp, c, psh, seq, ack), mut win_ws_mss_sp, (ts, nsack))| {
                    let (win, mut ws, mut mss, mut sp_ok) = win_ws_mss_sp;
                    if nsack > 0 {
                        // SACK blocks go on non-SYN segments: no room for SYN options too.
                        ws = None;
                        mss = None;
                        sp_ok = false;
                    }
                    let _ = &mut win_ws_mss_sp;
                    let mut sack: TcpSackRanges = [None; 4];
                    for (i, s) in sack.iter_mut().enumerate().take(nsack.min(if ts.is_some() {
                        3
                    } else {
                        4
                    })) {
                        *s = Some((i as u32 * 100, i as u32 * 100 + 50));
                    }
                    TcpRepr {
                        src_port: sp,
                        dst_port: dp,
                        control: [
                            TcpControl::None,
                            TcpControl::Syn,
                            TcpControl::Fin,
                            TcpControl::Rst,
                        ][c as usize],
                        psh,
                        seq_number: TcpSeqNumber(seq),
                        ack_number: ack.map(TcpSeqNumber),
                        window_len: win,
                        window_scale: ws,
                        max_seg_size: mss,
                        sack_permitted: sp_ok,
                        sack_ranges: sack,
                        timestamp: ts.map(|(a, b)| TcpTimestamp { tsval: a, tsecr: b }),
                        payload,
                    }
                },
            )
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..100)) {
            if let Ok(p) = TcpPacket::new_checked(&bytes[..]) {
                let _ = TcpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::ignored());
                let _ = (p.options(), p.payload(), p.segment_len());
            }
            let mut rest = &bytes[..];
            while let Ok((r, _)) = TcpOption::parse(rest) {
                if r.len() >= rest.len() { break; }
                rest = r;
            }
        }

        #[test]
        fn emit_parse_roundtrip(r in arb_repr(b"payload!")) {
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut TcpPacket::new_unchecked(&mut b[..]), &SRC, &DST, &ChecksumCaps::default());
            let p = TcpPacket::new_checked(&b[..]).unwrap();
            let back = TcpRepr::parse(&p, &SRC, &DST, &ChecksumCaps::default()).unwrap();
            proptest::prop_assert_eq!(back, r);
        }
    }
}
