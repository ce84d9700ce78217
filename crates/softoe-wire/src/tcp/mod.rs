//! TCP (RFC 9293) segments, with the options a modern TCP needs: MSS, window
//! scale and timestamps (RFC 7323), SACK (RFC 2018).
//!
//! - [`TcpPacket`] is a view over a segment's bytes (the IPv4 payload: header,
//!   options and payload, nothing after). Getters and setters are named after
//!   the fields.
//! - [`TcpRepr`] is what a segment means: one control flag (SYN, FIN, RST or
//!   none; PSH apart), sequence and acknowledgement numbers, window, options,
//!   and the payload it borrows.
//! - [`TcpSeqNumber`] does modulo-2³² arithmetic; [`TcpOption`] reads and
//!   writes single options.
//!
//! ## Contract
//!
//! Once [`TcpPacket::check_len`] (or `new_checked`) has passed — at least 20
//! bytes, and 20 ≤ data offset × 4 ≤ buffer length — no accessor panics
//! (every accessor here is in fact total, checked or not). [`TcpRepr::parse`]
//! never panics on any bytes; it rejects port 0, impossible flag sets
//! (SYN+FIN, SYN+RST, FIN+RST), malformed options and, when
//! `caps.tcp.rx()`, a bad checksum. [`TcpRepr::emit`] never panics into a
//! buffer of [`TcpRepr::buffer_len`] bytes, nor
//! [`TcpRepr::emit_header`] into one of [`TcpRepr::header_len`] bytes (or
//! into a shorter one: fields that do not fit are skipped).
//!
//! ## Sending payload by reference
//!
//! A TOE sends payload from application memory, so the header is built apart
//! from it: [`TcpRepr::emit_header`] writes header and options only, with a
//! zero checksum field; the caller appends the payload (or hands the port a
//! list of pieces) and either sums everything with
//! [`checksum::Accumulator`] or, with checksum offload, stores
//! [`checksum::pseudo_header`] in the field for the port to finish.
//! [`TcpRepr::emit`] does the whole segment when the payload is at hand.

use core::fmt;
use core::ops::Range;

use crate::bytes::{u16_at, u32_at};
use crate::checksum::{self, ChecksumCaps};
use crate::error::{Error, Result};
use crate::ipv4::{IpProtocol, Ipv4Address};

mod options;
mod seq;

pub use options::{TcpOption, TcpSackRanges, TcpTimestamp};
pub use seq::TcpSeqNumber;

mod field {
    use core::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const SEQ_NUM: Range<usize> = 4..8;
    pub const ACK_NUM: Range<usize> = 8..12;
    /// Data offset (4 bits), reserved (4 bits), flags (8 bits).
    pub const OFF_FLAGS: Range<usize> = 12..14;
    pub const WIN_SIZE: Range<usize> = 14..16;
    pub const CHECKSUM: Range<usize> = 16..18;
    pub const URGENT: Range<usize> = 18..20;
    pub const OPTIONS_START: usize = 20;

    pub const FLG_FIN: u16 = 0x001;
    pub const FLG_SYN: u16 = 0x002;
    pub const FLG_RST: u16 = 0x004;
    pub const FLG_PSH: u16 = 0x008;
    pub const FLG_ACK: u16 = 0x010;
    pub const FLG_URG: u16 = 0x020;
    pub const FLG_ECE: u16 = 0x040;
    pub const FLG_CWR: u16 = 0x080;
    /// Every flag bit (the reserved bits are left alone).
    pub const FLAGS: u16 = 0x0ff;
}

/// Header length without options.
pub const HEADER_LEN: usize = field::OPTIONS_START;

/// Longest header: data offset 15 × 4.
pub const MAX_HEADER_LEN: usize = 60;

/// Room for options: 40 bytes.
const MAX_OPTIONS_LEN: usize = MAX_HEADER_LEN - HEADER_LEN;

/// Largest window-scale shift (RFC 7323 §2.3); larger received values are
/// taken as 14.
pub const MAX_WINDOW_SCALE: u8 = 14;

/// The checksum over a whole segment, pseudo-header included: folded, not
/// complemented (`0xffff` when the stored checksum is right).
fn segment_sum(src: &Ipv4Address, dst: &Ipv4Address, segment: &[u8]) -> u16 {
    let mut acc = checksum::Accumulator::new();
    acc.add_sum(checksum::pseudo_header(
        *src,
        *dst,
        IpProtocol::Tcp,
        segment.len() as u32,
    ));
    acc.add(segment);
    acc.finish()
}

/// A view of a TCP segment: header, options and payload, and nothing after
/// (the payload runs to the end of the buffer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> TcpPacket<T> {
        TcpPacket { buffer }
    }

    /// [`new_unchecked`](Self::new_unchecked) and
    /// [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<TcpPacket<T>> {
        let p = TcpPacket::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks: at least 20 bytes, and 20 ≤ header length (data offset × 4)
    /// ≤ buffer length.
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

    fn raw_flags(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::OFF_FLAGS.start)
    }

    fn flag(&self, f: u16) -> bool {
        self.raw_flags() & f != 0
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::SRC_PORT.start)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::DST_PORT.start)
    }

    /// Sequence number.
    pub fn seq_number(&self) -> TcpSeqNumber {
        TcpSeqNumber(u32_at(self.buffer.as_ref(), field::SEQ_NUM.start))
    }

    /// Acknowledgement number (meaningful when ACK is set).
    pub fn ack_number(&self) -> TcpSeqNumber {
        TcpSeqNumber(u32_at(self.buffer.as_ref(), field::ACK_NUM.start))
    }

    /// Header length in bytes, options included (data offset × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.raw_flags() >> 12) * 4
    }

    /// FIN.
    pub fn fin(&self) -> bool {
        self.flag(field::FLG_FIN)
    }

    /// SYN.
    pub fn syn(&self) -> bool {
        self.flag(field::FLG_SYN)
    }

    /// RST.
    pub fn rst(&self) -> bool {
        self.flag(field::FLG_RST)
    }

    /// PSH.
    pub fn psh(&self) -> bool {
        self.flag(field::FLG_PSH)
    }

    /// ACK.
    pub fn ack(&self) -> bool {
        self.flag(field::FLG_ACK)
    }

    /// URG.
    pub fn urg(&self) -> bool {
        self.flag(field::FLG_URG)
    }

    /// ECE (ECN echo, RFC 3168).
    pub fn ece(&self) -> bool {
        self.flag(field::FLG_ECE)
    }

    /// CWR (congestion window reduced, RFC 3168).
    pub fn cwr(&self) -> bool {
        self.flag(field::FLG_CWR)
    }

    /// Window field (unscaled).
    pub fn window_len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::WIN_SIZE.start)
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// Urgent pointer.
    pub fn urgent_at(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::URGENT.start)
    }

    /// The option bytes (between the fixed header and the payload).
    pub fn options(&self) -> &[u8] {
        self.buffer
            .as_ref()
            .get(HEADER_LEN..self.header_len())
            .unwrap_or(&[])
    }

    /// The payload: from the header length to the end of the buffer.
    pub fn payload(&self) -> &[u8] {
        self.buffer.as_ref().get(self.header_len()..).unwrap_or(&[])
    }

    /// Sequence space the segment occupies: payload, plus one for SYN and
    /// one for FIN.
    pub fn segment_len(&self) -> usize {
        self.payload().len() + usize::from(self.syn()) + usize::from(self.fin())
    }

    /// Whether the checksum over the whole buffer, with the pseudo-header
    /// from `src` to `dst`, is right.
    pub fn verify_checksum(&self, src: &Ipv4Address, dst: &Ipv4Address) -> bool {
        segment_sum(src, dst, self.buffer.as_ref()) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    fn put(&mut self, r: Range<usize>, bytes: &[u8]) {
        if let Some(d) = self.buffer.as_mut().get_mut(r)
            && d.len() == bytes.len()
        {
            d.copy_from_slice(bytes);
        }
    }

    fn set_raw_flags(&mut self, v: u16) {
        self.put(field::OFF_FLAGS, &v.to_be_bytes());
    }

    fn set_flag(&mut self, f: u16, on: bool) {
        let raw = self.raw_flags();
        self.set_raw_flags(if on { raw | f } else { raw & !f });
    }

    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        self.put(field::SRC_PORT, &v.to_be_bytes());
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        self.put(field::DST_PORT, &v.to_be_bytes());
    }

    /// Sets the sequence number.
    pub fn set_seq_number(&mut self, v: TcpSeqNumber) {
        self.put(field::SEQ_NUM, &v.0.to_be_bytes());
    }

    /// Sets the acknowledgement number.
    pub fn set_ack_number(&mut self, v: TcpSeqNumber) {
        self.put(field::ACK_NUM, &v.0.to_be_bytes());
    }

    /// Clears all eight flags (the reserved bits and data offset are kept).
    pub fn clear_flags(&mut self) {
        let raw = self.raw_flags();
        self.set_raw_flags(raw & !field::FLAGS);
    }

    /// Sets the header length in bytes (a multiple of 4 from 20 to 60; other
    /// values are rounded down to a multiple of 4 and taken modulo 64).
    pub fn set_header_len(&mut self, len: u8) {
        let raw = self.raw_flags();
        self.set_raw_flags((raw & 0x0fff) | (u16::from((len / 4) & 0x0f) << 12));
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
        self.put(field::WIN_SIZE, &v.to_be_bytes());
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.put(field::CHECKSUM, &v.to_be_bytes());
    }

    /// Sets the urgent pointer.
    pub fn set_urgent_at(&mut self, v: u16) {
        self.put(field::URGENT, &v.to_be_bytes());
    }

    /// The option bytes, mutably.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        self.buffer
            .as_mut()
            .get_mut(HEADER_LEN..hl)
            .unwrap_or(&mut [])
    }

    /// The payload, mutably (from the header length to the end of the
    /// buffer).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        self.buffer.as_mut().get_mut(hl..).unwrap_or(&mut [])
    }

    /// Computes and stores the checksum over the whole buffer, with the
    /// pseudo-header from `src` to `dst`.
    pub fn fill_checksum(&mut self, src: &Ipv4Address, dst: &Ipv4Address) {
        self.set_checksum(0);
        let sum = segment_sum(src, dst, self.buffer.as_ref());
        self.set_checksum(!sum);
    }
}

/// Writes tcpdump-style flags: `S`, `F`, `R`, `P`, `U`, `E`, `W`, then `.`
/// for ACK; `none` when no flag is set.
fn write_flags(f: &mut fmt::Formatter<'_>, flags: [(bool, char); 7], ack: bool) -> fmt::Result {
    use fmt::Write;
    f.write_str("[")?;
    let mut any = false;
    for (on, c) in flags {
        if on {
            f.write_char(c)?;
            any = true;
        }
    }
    if ack {
        f.write_char('.')?;
    } else if !any {
        f.write_str("none")?;
    }
    f.write_str("]")
}

impl<T: AsRef<[u8]>> fmt::Display for TcpPacket<T> {
    /// Like tcpdump: `TCP src=49500 dst=80 seq=1 ack=2 win=512 len=0 [S.]`,
    /// then the options (or `<bad options>`). Reads the fields as they are,
    /// checked or not.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TCP src={} dst={} seq={}",
            self.src_port(),
            self.dst_port(),
            self.seq_number()
        )?;
        if self.ack() {
            write!(f, " ack={}", self.ack_number())?;
        }
        write!(
            f,
            " win={} len={} ",
            self.window_len(),
            self.payload().len()
        )?;
        write_flags(
            f,
            [
                (self.syn(), 'S'),
                (self.fin(), 'F'),
                (self.rst(), 'R'),
                (self.psh(), 'P'),
                (self.urg(), 'U'),
                (self.ece(), 'E'),
                (self.cwr(), 'W'),
            ],
            self.ack(),
        )?;
        if self.urg() {
            write!(f, " urg={}", self.urgent_at())?;
        }
        let mut opts = self.options();
        while !opts.is_empty() {
            match TcpOption::parse(opts) {
                Ok((rest, opt)) => {
                    write_option(f, &opt)?;
                    opts = rest;
                }
                Err(_) => return f.write_str(" <bad options>"),
            }
        }
        Ok(())
    }
}

fn write_option(f: &mut fmt::Formatter<'_>, opt: &TcpOption<'_>) -> fmt::Result {
    match *opt {
        TcpOption::EndOfList | TcpOption::NoOperation => Ok(()),
        TcpOption::MaxSegmentSize(m) => write!(f, " mss={m}"),
        TcpOption::WindowScale(w) => write!(f, " wscale={w}"),
        TcpOption::SackPermitted => f.write_str(" sackOK"),
        TcpOption::Timestamp(t) => write!(f, " TS={}/{}", t.tsval, t.tsecr),
        TcpOption::SackRange(r) => {
            for (l, r) in r.iter().flatten() {
                write!(f, " sack={l}-{r}")?;
            }
            Ok(())
        }
        TcpOption::Unknown { kind, data } => write!(f, " opt{kind}/{}", data.len()),
    }
}

/// The control flag of a segment: at most one of SYN, FIN, RST. PSH is
/// separate ([`TcpRepr::psh`]), and ACK is the presence of
/// [`TcpRepr::ack_number`].
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
    /// Sequence space the flag occupies: one for SYN and FIN, none otherwise.
    pub const fn len(&self) -> usize {
        match self {
            TcpControl::Syn | TcpControl::Fin => 1,
            TcpControl::None | TcpControl::Rst => 0,
        }
    }

    /// Whether the flag occupies no sequence space.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A TCP segment, parsed: what the stack reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpRepr<'a> {
    /// Source port (never 0 when parsed).
    pub src_port: u16,
    /// Destination port (never 0 when parsed).
    pub dst_port: u16,
    /// SYN, FIN, RST or none.
    pub control: TcpControl,
    /// PSH.
    pub psh: bool,
    /// Sequence number.
    pub seq_number: TcpSeqNumber,
    /// Acknowledgement number: `Some` exactly when ACK is set.
    pub ack_number: Option<TcpSeqNumber>,
    /// Window field (unscaled).
    pub window_len: u16,
    /// Window-scale option (parsed shifts above 14 are taken as 14).
    pub window_scale: Option<u8>,
    /// MSS option.
    pub max_seg_size: Option<u16>,
    /// SACK-permitted option.
    pub sack_permitted: bool,
    /// SACK blocks, first block first (emitted: as many as fit).
    pub sack_ranges: TcpSackRanges,
    /// Timestamp option.
    pub timestamp: Option<TcpTimestamp>,
    /// Payload.
    pub payload: &'a [u8],
}

impl<'a> TcpRepr<'a> {
    /// Parses a segment between `src` and `dst` (for the pseudo-header).
    ///
    /// Checks the lengths, rejects port 0, SYN+FIN, SYN+RST and FIN+RST,
    /// verifies the checksum when `caps.tcp.rx()`, and reads the options:
    /// unknown ones are skipped, malformed ones make the whole segment an
    /// error, anything after end-of-list is padding. A window-scale shift
    /// above 14 is taken as 14 (RFC 7323 §2.3). URG and the urgent pointer
    /// are ignored (urgent data is treated as normal data), as are ECE and
    /// CWR. Options are reported whatever the control flag; the stack
    /// decides which to honour.
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
        let control = match (p.syn(), p.fin(), p.rst()) {
            (false, false, false) => TcpControl::None,
            (true, false, false) => TcpControl::Syn,
            (false, true, false) => TcpControl::Fin,
            (false, false, true) => TcpControl::Rst,
            _ => return Err(Error),
        };
        if caps.tcp.rx() && !p.verify_checksum(src, dst) {
            return Err(Error);
        }
        let buf: &'a [u8] = p.buffer.as_ref();
        let hl = p.header_len();
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
            payload: buf.get(hl..).ok_or(Error)?,
        };
        let mut opts = buf.get(HEADER_LEN..hl).ok_or(Error)?;
        while !opts.is_empty() {
            let (rest, opt) = TcpOption::parse(opts)?;
            match opt {
                TcpOption::EndOfList => break,
                TcpOption::NoOperation | TcpOption::Unknown { .. } => {}
                TcpOption::MaxSegmentSize(m) => repr.max_seg_size = Some(m),
                TcpOption::WindowScale(s) => repr.window_scale = Some(s.min(MAX_WINDOW_SCALE)),
                TcpOption::SackPermitted => repr.sack_permitted = true,
                TcpOption::SackRange(r) => repr.sack_ranges = r,
                TcpOption::Timestamp(t) => repr.timestamp = Some(t),
            }
            opts = rest;
        }
        Ok(repr)
    }

    /// Option bytes other than SACK blocks, as [`emit_header`] lays them
    /// out: at most 20.
    ///
    /// [`emit_header`]: Self::emit_header
    fn fixed_options_len(&self) -> usize {
        let mut n = 0;
        if self.max_seg_size.is_some() {
            n += 4; // MSS
        }
        if self.timestamp.is_some() {
            n += 12; // SACKOK TS, or NOP NOP TS
        } else if self.sack_permitted {
            n += 4; // NOP NOP SACKOK
        }
        if self.window_scale.is_some() {
            n += 4; // NOP WS
        }
        n
    }

    /// SACK blocks emitted: as many of the given ones as fit in the 40
    /// option bytes beside the others (4 alone, 3 beside timestamps).
    pub fn sack_blocks_emitted(&self) -> usize {
        let room = MAX_OPTIONS_LEN - self.fixed_options_len();
        let fit = room.saturating_sub(4) / 8; // NOP NOP kind len, 8 a block
        self.sack_ranges.iter().flatten().count().min(fit)
    }

    /// Header length when emitted: 20 plus the options, a multiple of 4, at
    /// most 60.
    pub fn header_len(&self) -> usize {
        let sacks = self.sack_blocks_emitted();
        let sack_len = if sacks > 0 { 4 + 8 * sacks } else { 0 };
        HEADER_LEN + self.fixed_options_len() + sack_len
    }

    /// Header and payload length.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload.len()
    }

    /// Sequence space the segment occupies: payload plus SYN or FIN.
    pub fn segment_len(&self) -> usize {
        self.payload.len() + self.control.len()
    }

    /// Writes the header and options only, into a buffer that holds at least
    /// [`header_len`](Self::header_len) bytes; the payload that follows
    /// (`payload_len` bytes: the caller's, possibly sent by reference) is not
    /// touched, and the checksum field is zero. The caller then sums header
    /// and payload with [`checksum::Accumulator`], or stores
    /// [`checksum::pseudo_header`] (over `header_len() + payload_len` bytes)
    /// for a port with checksum offload.
    ///
    /// Options are laid out as Linux lays them out, with NOP padding. On a
    /// SYN: `MSS`, then `SACKOK TS`, `NOP NOP TS` or `NOP NOP SACKOK`, then
    /// `NOP WS`. On other segments: `NOP NOP TS`, then `NOP NOP SACK` with
    /// as many blocks as fit ([`sack_blocks_emitted`]). Whatever fields are
    /// set are written, in that order, whatever the control flag.
    ///
    /// [`sack_blocks_emitted`]: Self::sack_blocks_emitted
    pub fn emit_header<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        p: &mut TcpPacket<T>,
        payload_len: usize,
    ) {
        // The payload is the caller's; its length matters only to them.
        let _ = payload_len;
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_seq_number(self.seq_number);
        p.set_ack_number(self.ack_number.unwrap_or_default());
        p.set_raw_flags(0);
        p.set_header_len(self.header_len() as u8);
        match self.control {
            TcpControl::None => {}
            TcpControl::Syn => p.set_syn(true),
            TcpControl::Fin => p.set_fin(true),
            TcpControl::Rst => p.set_rst(true),
        }
        p.set_psh(self.psh);
        p.set_ack(self.ack_number.is_some());
        p.set_window_len(self.window_len);
        p.set_checksum(0);
        p.set_urgent_at(0);

        let nop = TcpOption::NoOperation;
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
                o = nop.emit(nop.emit(o));
                o = TcpOption::Timestamp(ts).emit(o);
            }
            (None, true) => {
                o = nop.emit(nop.emit(o));
                o = TcpOption::SackPermitted.emit(o);
            }
            (None, false) => {}
        }
        if let Some(ws) = self.window_scale {
            o = TcpOption::WindowScale(ws).emit(nop.emit(o));
        }
        let n = self.sack_blocks_emitted();
        if n > 0 {
            let mut blocks: TcpSackRanges = [None; 4];
            for (slot, b) in blocks
                .iter_mut()
                .zip(self.sack_ranges.iter().flatten().take(n))
            {
                *slot = Some(*b);
            }
            o = TcpOption::SackRange(blocks).emit(nop.emit(nop.emit(o)));
        }
        // Nothing is left with the layouts above; zeros would be end-of-list.
        o.fill(0);
    }

    /// Writes the whole segment — header, options and `self.payload` — into a
    /// buffer of [`buffer_len`](Self::buffer_len) bytes. When
    /// `caps.tcp.tx()` the checksum is computed; otherwise the field holds
    /// the pseudo-header sum ([`checksum::pseudo_header`] over
    /// `buffer_len()` bytes), which is what a port with checksum offload
    /// (virtio-net `NEEDS_CSUM`, checksum start at the TCP header, offset 16)
    /// finishes. A longer buffer is written up to `buffer_len()`; a shorter
    /// one as far as it goes, without panicking.
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
        let len = self.buffer_len();
        let sum = if caps.tcp.tx() {
            let seg = p.buffer.as_ref();
            !segment_sum(src, dst, seg.get(..len).unwrap_or(seg))
        } else {
            checksum::pseudo_header(*src, *dst, IpProtocol::Tcp, len as u32)
        };
        p.set_checksum(sum);
    }
}

impl fmt::Display for TcpRepr<'_> {
    /// Like tcpdump: `TCP src=49500 dst=80 seq=1 ack=2 win=512 len=0 [S.]`,
    /// then the options (`mss=1460 sackOK TS=1/0 wscale=7 sack=5-9`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TCP src={} dst={} seq={}",
            self.src_port, self.dst_port, self.seq_number
        )?;
        if let Some(a) = self.ack_number {
            write!(f, " ack={a}")?;
        }
        write!(f, " win={} len={} ", self.window_len, self.payload.len())?;
        let c = self.control;
        write_flags(
            f,
            [
                (c == TcpControl::Syn, 'S'),
                (c == TcpControl::Fin, 'F'),
                (c == TcpControl::Rst, 'R'),
                (self.psh, 'P'),
                (false, 'U'),
                (false, 'E'),
                (false, 'W'),
            ],
            self.ack_number.is_some(),
        )?;
        if let Some(m) = self.max_seg_size {
            write_option(f, &TcpOption::MaxSegmentSize(m))?;
        }
        if self.sack_permitted {
            write_option(f, &TcpOption::SackPermitted)?;
        }
        if let Some(t) = self.timestamp {
            write_option(f, &TcpOption::Timestamp(t))?;
        }
        if let Some(w) = self.window_scale {
            write_option(f, &TcpOption::WindowScale(w))?;
        }
        write_option(f, &TcpOption::SackRange(self.sack_ranges))
    }
}

#[cfg(test)]
mod tests;
