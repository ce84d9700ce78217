//! IPv4 fragment reassembly (RFC 791 §3.2, RFC 1122 §3.3.2, RFC 815's
//! hole list).
//!
//! A datagram in reassembly is keyed by (source, destination, protocol,
//! identification) and lives in a slot: its payload bytes at their offsets
//! (20 bytes in, so the rebuilt header goes in front without a copy), the
//! byte ranges received (merged, sorted, at most [`MAX_RANGES`] of them), its
//! length once the last fragment came, and the first fragment's header
//! (for the rebuilt header and for the ICMP time exceeded quote).
//!
//! Bounded in memory and time:
//! - at most [`IpConfig::reasm_max_datagrams`] datagrams and
//!   [`IpConfig::reasm_max_bytes`] bytes of them at once; a fragment that
//!   would pass either makes the oldest other datagram go (counted
//!   `reasm_over_budget`). The oldest, not the newest: a datagram that can
//!   complete does so within a round trip, so what has waited longest is
//!   the likeliest never to complete, and a flood of first fragments
//!   cannot keep every later datagram out for a whole timeout (it must
//!   outpace real datagrams' round trips instead);
//! - [`IpConfig::reasm_timeout`] from its first fragment (30 s, Linux's
//!   `ipfrag_time`); then it is dropped, and the stack sends an ICMP time
//!   exceeded if the first fragment had arrived (RFC 792, RFC 1122).
//!
//! Slots and their buffers are kept for the next datagram (a slot's buffer
//! keeps its capacity unless the kept buffers together pass the byte
//! budget), so a steady flow of fragmented datagrams allocates nothing.
//!
//! **Overlaps** drop the whole datagram, as Linux has since 2018
//! (`inet_frag_queue_insert`, RFC 5722's rule for IPv6 applied to IPv4):
//! no legitimate sender overlaps fragments, and overlaps are how
//! reassembly is attacked (a later fragment rewriting a header a filter
//! already passed). A fragment wholly inside what arrived is a duplicate
//! (a retransmission at the link, a duplicating path) and is ignored,
//! also as Linux: received bytes are never rewritten either way.
//! Following RFC 1858 §3, a TCP fragment at offset 8 and a first TCP
//! fragment that does not hold the whole TCP header are refused.

use alloc::vec::Vec;

use softoe_wire::{IpProtocol, Ipv4Address, Ipv4Packet};

use crate::config::IpConfig;
use crate::stats::StackStats;
use crate::time::Instant;

/// Disjoint ranges one datagram may have at once: fragments that arrive
/// in order keep one, and a 64 KiB datagram's 45 fragments at a 1,500-byte
/// MTU make at most 23 in any order; a datagram with more holes than this
/// is dropped.
pub(crate) const MAX_RANGES: usize = 32;

/// Room before the payload in a slot's buffer for the rebuilt header.
pub(crate) const HEADER_ROOM: usize = 20;

/// The longest IPv4 header (with options) kept from the first fragment.
const MAX_HEADER: usize = 60;

/// Largest IPv4 datagram.
const MAX_DATAGRAM: usize = 65_535;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key {
    src: Ipv4Address,
    dst: Ipv4Address,
    proto: u8,
    ident: u16,
}

#[derive(Debug)]
struct Slot {
    key: Key,
    active: bool,
    /// When the first fragment (of any offset) arrived.
    since: Instant,
    /// Received payload ranges `[start, end)`, sorted, merged, disjoint.
    ranges: [(u32, u32); MAX_RANGES],
    nranges: usize,
    /// Payload length, once the last fragment (MF clear) arrived.
    total: Option<u32>,
    /// The first fragment's IPv4 header (`header[..header_len]`; 0: not
    /// yet arrived).
    header: [u8; MAX_HEADER],
    header_len: usize,
    /// Payload at `HEADER_ROOM + offset`.
    buf: Vec<u8>,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            key: Key {
                src: Ipv4Address::UNSPECIFIED,
                dst: Ipv4Address::UNSPECIFIED,
                proto: 0,
                ident: 0,
            },
            active: false,
            since: Instant::ZERO,
            ranges: [(0, 0); MAX_RANGES],
            nranges: 0,
            total: None,
            header: [0; MAX_HEADER],
            header_len: 0,
            buf: Vec::new(),
        }
    }

    fn complete(&self) -> bool {
        self.total
            .is_some_and(|t| self.nranges == 1 && self.ranges.first().is_some_and(|&r| r == (0, t)))
    }

    /// Where `[start, end)` falls against what arrived.
    fn classify(&self, start: u32, end: u32) -> Fit {
        let mut fit = Fit::New;
        for &(s, e) in self.ranges.iter().take(self.nranges) {
            if start >= s && end <= e {
                return Fit::Duplicate;
            }
            if start < e && s < end {
                fit = Fit::Overlap;
            }
        }
        fit
    }

    /// Records `[start, end)` (disjoint from every range); false if the
    /// datagram would have more than [`MAX_RANGES`] ranges.
    fn insert(&mut self, start: u32, end: u32) -> bool {
        let n = self.nranges;
        let Some(ranges) = self.ranges.get_mut(..n) else {
            return false;
        };
        let at = ranges.partition_point(|&(s, _)| s < start);
        let joins_prev = at > 0 && ranges.get(at - 1).is_some_and(|&(_, e)| e == start);
        let joins_next = ranges.get(at).is_some_and(|&(s, _)| s == end);
        match (joins_prev, joins_next) {
            (true, true) => {
                let next_end = ranges.get(at).map_or(end, |&(_, e)| e);
                if let Some(p) = ranges.get_mut(at - 1) {
                    p.1 = next_end;
                }
                self.ranges.copy_within(at + 1..n, at);
                self.nranges -= 1;
            }
            (true, false) => {
                if let Some(p) = ranges.get_mut(at - 1) {
                    p.1 = end;
                }
            }
            (false, true) => {
                if let Some(p) = ranges.get_mut(at) {
                    p.0 = start;
                }
            }
            (false, false) => {
                if n >= MAX_RANGES {
                    return false;
                }
                self.ranges.copy_within(at..n, at + 1);
                if let Some(r) = self.ranges.get_mut(at) {
                    *r = (start, end);
                }
                self.nranges += 1;
            }
        }
        true
    }
}

enum Fit {
    New,
    Duplicate,
    Overlap,
}

/// What became of a fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Kept (or a duplicate, ignored); the datagram is not whole yet.
    Held,
    /// The datagram is whole: take it with [`Reassembly::take`].
    Complete(usize),
    /// Dropped (counted).
    Dropped,
}

/// A datagram that timed out with its first fragment in hand: what the
/// ICMP time exceeded quotes (the first fragment's header and the first 8
/// bytes of its payload, RFC 792).
#[derive(Debug)]
pub(crate) struct Expired {
    pub(crate) src: Ipv4Address,
    pub(crate) dst: Ipv4Address,
    /// Bytes of `quote` used.
    pub(crate) len: usize,
    pub(crate) quote: [u8; MAX_HEADER + 8],
}

/// Every datagram in reassembly.
#[derive(Debug)]
pub(crate) struct Reassembly {
    cfg: IpConfig,
    slots: Vec<Slot>,
    /// Bytes held by active datagrams (their buffers' lengths).
    held: usize,
    /// The earliest time an active datagram expires.
    next_expiry: Option<Instant>,
}

impl Reassembly {
    pub(crate) fn new(cfg: IpConfig) -> Reassembly {
        Reassembly {
            cfg,
            slots: Vec::new(),
            held: 0,
            next_expiry: None,
        }
    }

    /// Datagrams in reassembly now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.active).count()
    }

    /// Bytes held now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held
    }

    /// When [`expire`](Self::expire) next has work.
    pub(crate) fn poll_at(&self) -> Option<Instant> {
        self.next_expiry
    }

    fn recompute_expiry(&mut self) {
        let t = self.cfg.reasm_timeout;
        self.next_expiry = self
            .slots
            .iter()
            .filter(|s| s.active)
            .map(|s| s.since + t)
            .min();
    }

    /// Ends slot `i`'s datagram; its buffer is kept for the next unless
    /// the kept buffers pass the byte budget.
    fn free(&mut self, i: usize) {
        let max = self.cfg.reasm_max_bytes;
        let kept: usize = self.slots.iter().map(|s| s.buf.capacity()).sum();
        let Some(s) = self.slots.get_mut(i) else {
            return;
        };
        if !s.active {
            return;
        }
        self.held = self.held.saturating_sub(s.buf.len());
        s.active = false;
        s.nranges = 0;
        s.total = None;
        s.header_len = 0;
        s.buf.clear();
        if kept > max {
            s.buf = Vec::new();
        }
        self.recompute_expiry();
    }

    /// The oldest active datagram other than `except`.
    fn oldest(&self, except: Option<usize>) -> Option<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter(|&(i, s)| s.active && Some(i) != except)
            .min_by_key(|&(_, s)| s.since)
            .map(|(i, _)| i)
    }

    /// A slot for a new datagram: a free one, a new one, or the oldest's.
    fn slot_for(&mut self, key: Key, now: Instant, stats: &mut StackStats) -> Option<usize> {
        let i = match self.slots.iter().position(|s| !s.active) {
            Some(i) => i,
            None if self.slots.len() < self.cfg.reasm_max_datagrams => {
                self.slots.push(Slot::new());
                self.slots.len() - 1
            }
            None => {
                let i = self.oldest(None)?;
                self.free(i);
                stats.reasm_over_budget += 1;
                i
            }
        };
        let s = self.slots.get_mut(i)?;
        s.key = key;
        s.active = true;
        s.since = now;
        s.nranges = 0;
        s.total = None;
        s.header_len = 0;
        s.buf.clear();
        let due = now + self.cfg.reasm_timeout;
        self.next_expiry = Some(self.next_expiry.map_or(due, |t| t.min(due)));
        Some(i)
    }

    /// Takes one fragment: `bytes` is its IPv4 packet, which passed
    /// `Ipv4Packet::check_len` and is a fragment. Returns whether its
    /// datagram is now whole.
    pub(crate) fn add(&mut self, now: Instant, bytes: &[u8], stats: &mut StackStats) -> Outcome {
        let pkt = Ipv4Packet::new_unchecked(bytes);
        let data = pkt.payload();
        let start = u32::from(pkt.frag_offset());
        let len = data.len() as u32;
        let end = start + len;
        let more = pkt.more_frags();
        let proto = pkt.next_header();
        let invalid = |stats: &mut StackStats| {
            stats.reasm_invalid += 1;
            Outcome::Dropped
        };
        // Empty fragments, non-final fragments not a multiple of 8 bytes
        // (the next one's offset could not follow), and RFC 1858 §3's TCP
        // attacks: a fragment at offset 8 (it could rewrite the flags of
        // a header already passed) and a first fragment too short for the
        // whole TCP header.
        if len == 0 || (more && !len.is_multiple_of(8)) {
            return invalid(stats);
        }
        if proto == IpProtocol::Tcp {
            if start == 8 {
                return invalid(stats);
            }
            let tcp_header = data.get(12).map_or(20, |b| u32::from(b >> 4) * 4).max(20);
            if start == 0 && len < tcp_header {
                return invalid(stats);
            }
        }
        let key = Key {
            src: pkt.src_addr(),
            dst: pkt.dst_addr(),
            proto: u8::from(proto),
            ident: pkt.ident(),
        };
        let found = self.slots.iter().position(|s| s.active && s.key == key);
        // The rebuilt header is 20 bytes: the whole stays a legal datagram.
        if end as usize + HEADER_ROOM > MAX_DATAGRAM {
            if let Some(i) = found {
                self.free(i);
            }
            return invalid(stats);
        }
        if let Some(i) = found
            && let Some(s) = self.slots.get(i)
        {
            // A fragment that contradicts the datagram's length (past the
            // end, or a second, different end) drops it, as Linux does.
            let contradicts = match s.total {
                Some(t) => end > t || (!more && end != t),
                None => {
                    !more && s.nranges > 0 && s.ranges.iter().take(s.nranges).any(|r| r.1 > end)
                }
            };
            if contradicts {
                self.free(i);
                return invalid(stats);
            }
            match s.classify(start, end) {
                Fit::Duplicate => return Outcome::Held,
                Fit::Overlap => {
                    self.free(i);
                    stats.reasm_overlaps += 1;
                    return Outcome::Dropped;
                }
                Fit::New => {}
            }
        }
        let i = match found {
            Some(i) => i,
            None => match self.slot_for(key, now, stats) {
                Some(i) => i,
                None => {
                    stats.reasm_over_budget += 1;
                    return Outcome::Dropped;
                }
            },
        };
        // The byte budget: the oldest others make way.
        let need = HEADER_ROOM + end as usize;
        let grow = need.saturating_sub(self.slots.get(i).map_or(0, |s| s.buf.len()));
        if need > self.cfg.reasm_max_bytes {
            // It could never be held whole: the others stay.
            self.free(i);
            stats.reasm_over_budget += 1;
            return Outcome::Dropped;
        }
        while self.held + grow > self.cfg.reasm_max_bytes {
            let Some(o) = self.oldest(Some(i)) else {
                self.free(i);
                stats.reasm_over_budget += 1;
                return Outcome::Dropped;
            };
            self.free(o);
            stats.reasm_over_budget += 1;
        }
        let Some(s) = self.slots.get_mut(i) else {
            return Outcome::Dropped;
        };
        if !s.insert(start, end) {
            self.free(i);
            stats.reasm_over_budget += 1;
            return Outcome::Dropped;
        }
        if s.buf.len() < need {
            s.buf.resize(need, 0);
        }
        self.held += grow;
        let at = HEADER_ROOM + start as usize;
        if let Some(dst) = s.buf.get_mut(at..at + data.len()) {
            dst.copy_from_slice(data);
        }
        if !more {
            s.total = Some(end);
        }
        if start == 0 {
            let n = pkt.header_len().min(MAX_HEADER);
            if let (Some(d), Some(h)) = (s.header.get_mut(..n), bytes.get(..n)) {
                d.copy_from_slice(h);
                s.header_len = n;
            }
        }
        if s.complete() {
            Outcome::Complete(i)
        } else {
            Outcome::Held
        }
    }

    /// Takes the whole datagram of slot `i` (after [`Outcome::Complete`]):
    /// a buffer holding it from its start (a rebuilt 20-byte header — the
    /// first fragment's TOS, TTL and identification, no options, no
    /// fragment fields — then the payload), and its length. Give the
    /// buffer back with [`release`](Self::release).
    pub(crate) fn take(&mut self, i: usize) -> Option<(Vec<u8>, usize)> {
        let s = self.slots.get_mut(i)?;
        let total = s.total? as usize;
        let len = HEADER_ROOM + total;
        let mut buf = core::mem::take(&mut s.buf);
        let first = s.header.get(..s.header_len.max(20)).unwrap_or(&[]);
        if let (Some(h), Some(f)) = (buf.get_mut(..HEADER_ROOM), first.get(..HEADER_ROOM)) {
            h.copy_from_slice(f);
        }
        let mut ip = Ipv4Packet::new_unchecked(buf.get_mut(..HEADER_ROOM).unwrap_or(&mut []));
        ip.set_version_and_header_len(4, HEADER_ROOM);
        ip.set_total_len(len as u16);
        let df = ip.dont_frag();
        ip.set_flags_and_offset(df, false, 0);
        ip.fill_checksum();
        Some((buf, len))
    }

    /// Gives back slot `i`'s buffer after [`take`](Self::take) and ends
    /// the datagram.
    pub(crate) fn release(&mut self, i: usize, buf: Vec<u8>) {
        if let Some(s) = self.slots.get_mut(i) {
            s.buf = buf;
        }
        self.free(i);
    }

    /// The next datagram that timed out by `now`, dropped; with what its
    /// ICMP time exceeded quotes if the first fragment had arrived.
    pub(crate) fn expire(&mut self, now: Instant) -> Option<Option<Expired>> {
        if self.next_expiry.is_none_or(|t| t > now) {
            return None;
        }
        let t = self.cfg.reasm_timeout;
        let i = self
            .slots
            .iter()
            .position(|s| s.active && s.since + t <= now)?;
        let s = self.slots.get(i)?;
        let quote = (s.header_len >= 20).then(|| {
            let mut q = [0u8; MAX_HEADER + 8];
            let hl = s.header_len;
            if let (Some(d), Some(h)) = (q.get_mut(..hl), s.header.get(..hl)) {
                d.copy_from_slice(h);
            }
            let avail = s.buf.len().saturating_sub(HEADER_ROOM).min(8);
            let first = s.ranges.first().map_or(0, |r| r.1 as usize).min(avail);
            if let (Some(d), Some(p)) = (
                q.get_mut(hl..hl + first),
                s.buf.get(HEADER_ROOM..HEADER_ROOM + first),
            ) {
                d.copy_from_slice(p);
            }
            Expired {
                src: s.key.src,
                dst: s.key.dst,
                len: hl + first,
                quote: q,
            }
        });
        self.free(i);
        Some(quote)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use core::time::Duration;
    use softoe_wire::{ChecksumCaps, Ipv4Repr};

    const A: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);
    const B: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);

    /// A fragment of datagram `ident` from A: `data` at `offset`.
    fn frag(ident: u16, proto: IpProtocol, offset: u16, more: bool, data: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 20 + data.len()];
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        Ipv4Repr {
            src_addr: A,
            dst_addr: B,
            next_header: proto,
            payload_len: data.len(),
            hop_limit: 64,
            ident,
            dont_frag: false,
        }
        .emit(&mut p, &ChecksumCaps::default());
        p.set_flags_and_offset(false, more, offset);
        p.fill_checksum();
        b[20..].copy_from_slice(data);
        b
    }

    fn add(r: &mut Reassembly, st: &mut StackStats, now: Instant, f: &[u8]) -> Outcome {
        assert!(Ipv4Packet::new_checked(f).is_ok());
        r.add(now, f, st)
    }

    fn bytes(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
    }

    #[test]
    fn out_of_order_fragments_make_the_datagram() {
        let mut r = Reassembly::new(IpConfig::default());
        let mut st = StackStats::default();
        let d = bytes(3000, 1);
        let now = Instant::from_secs(1);
        let p = IpProtocol::Udp;
        assert_eq!(
            add(&mut r, &mut st, now, &frag(7, p, 2400, false, &d[2400..])),
            Outcome::Held
        );
        assert_eq!(
            add(&mut r, &mut st, now, &frag(7, p, 0, true, &d[..800])),
            Outcome::Held
        );
        // A duplicate changes nothing.
        assert_eq!(
            add(&mut r, &mut st, now, &frag(7, p, 0, true, &d[..800])),
            Outcome::Held
        );
        let Outcome::Complete(i) = add(&mut r, &mut st, now, &frag(7, p, 800, true, &d[800..2400]))
        else {
            panic!("whole");
        };
        let (buf, len) = r.take(i).unwrap();
        let ip = Ipv4Packet::new_checked(&buf[..len]).unwrap();
        assert!(!ip.is_fragment());
        assert!(ip.verify_checksum());
        assert_eq!(ip.total_len() as usize, 20 + 3000);
        assert_eq!((ip.src_addr(), ip.dst_addr(), ip.ident()), (A, B, 7));
        assert_eq!(ip.payload(), &d[..]);
        r.release(i, buf);
        assert_eq!((r.len(), r.held()), (0, 0));
        assert_eq!(st, StackStats::default());
    }

    #[test]
    fn overlaps_drop_the_datagram_and_never_rewrite_bytes() {
        let mut r = Reassembly::new(IpConfig::default());
        let mut st = StackStats::default();
        let now = Instant::from_secs(1);
        let d = bytes(2000, 2);
        let p = IpProtocol::Udp;
        add(&mut r, &mut st, now, &frag(1, p, 0, true, &d[..1000]));
        // Starts inside what arrived and goes past it.
        let evil = bytes(1000, 99);
        assert_eq!(
            add(&mut r, &mut st, now, &frag(1, p, 992, false, &evil)),
            Outcome::Dropped
        );
        assert_eq!((st.reasm_overlaps, r.len(), r.held()), (1, 0, 0));
        // The rest alone cannot complete it: the datagram is gone.
        assert_eq!(
            add(&mut r, &mut st, now, &frag(1, p, 1000, false, &d[1000..])),
            Outcome::Held
        );
    }

    #[test]
    fn rfc_1858_tcp_fragments_are_refused() {
        let mut r = Reassembly::new(IpConfig::default());
        let mut st = StackStats::default();
        let now = Instant::from_secs(1);
        let t = IpProtocol::Tcp;
        // Offset 8 (FO = 1) for TCP.
        assert_eq!(
            add(&mut r, &mut st, now, &frag(1, t, 8, true, &[0; 16])),
            Outcome::Dropped
        );
        // A first fragment shorter than the TCP header (here: 16 bytes,
        // and a header announcing 32).
        assert_eq!(
            add(&mut r, &mut st, now, &frag(2, t, 0, true, &[0; 16])),
            Outcome::Dropped
        );
        let mut hdr = [0u8; 24];
        hdr[12] = 8 << 4;
        assert_eq!(
            add(&mut r, &mut st, now, &frag(3, t, 0, true, &hdr)),
            Outcome::Dropped
        );
        assert_eq!(st.reasm_invalid, 3);
        // UDP at offset 8 is fine.
        assert_eq!(
            add(
                &mut r,
                &mut st,
                now,
                &frag(4, IpProtocol::Udp, 8, true, &[0; 16])
            ),
            Outcome::Held
        );
        // A non-final fragment not a multiple of 8; one past 65,535.
        assert_eq!(
            add(
                &mut r,
                &mut st,
                now,
                &frag(5, IpProtocol::Udp, 0, true, &[0; 12])
            ),
            Outcome::Dropped
        );
        assert_eq!(
            add(
                &mut r,
                &mut st,
                now,
                &frag(6, IpProtocol::Udp, 65_512, false, &[0; 8])
            ),
            Outcome::Dropped
        );
        assert_eq!(st.reasm_invalid, 5);
    }

    #[test]
    fn contradicting_lengths_drop_the_datagram() {
        let mut r = Reassembly::new(IpConfig::default());
        let mut st = StackStats::default();
        let now = Instant::from_secs(1);
        let p = IpProtocol::Udp;
        add(&mut r, &mut st, now, &frag(1, p, 800, false, &[1; 100]));
        assert_eq!(
            add(&mut r, &mut st, now, &frag(1, p, 1600, true, &[1; 8])),
            Outcome::Dropped
        );
        assert_eq!((st.reasm_invalid, r.len()), (1, 0));
        add(&mut r, &mut st, now, &frag(2, p, 800, false, &[1; 100]));
        assert_eq!(
            add(&mut r, &mut st, now, &frag(2, p, 0, false, &[1; 80])),
            Outcome::Dropped
        );
        assert_eq!((st.reasm_invalid, r.len()), (2, 0));
    }

    #[test]
    fn the_budget_bounds_bytes_and_datagrams_and_the_oldest_goes() {
        let cfg = IpConfig {
            reasm_max_bytes: 10_000,
            reasm_max_datagrams: 3,
            ..IpConfig::default()
        };
        let mut r = Reassembly::new(cfg);
        let mut st = StackStats::default();
        let p = IpProtocol::Udp;
        for id in 0..3u16 {
            let now = Instant::from_secs(1 + u64::from(id));
            add(&mut r, &mut st, now, &frag(id, p, 0, true, &[0; 1000]));
        }
        assert_eq!((r.len(), st.reasm_over_budget), (3, 0));
        // A fourth datagram: the oldest (0) makes way.
        add(
            &mut r,
            &mut st,
            Instant::from_secs(9),
            &frag(3, p, 0, true, &[0; 1000]),
        );
        assert_eq!((r.len(), st.reasm_over_budget), (3, 1));
        assert_eq!(
            add(
                &mut r,
                &mut st,
                Instant::from_secs(9),
                &frag(0, p, 1000, false, &[0; 8])
            ),
            Outcome::Held
        );
        // Bytes: datagram 3 growing to 8 KiB pushes the others out.
        add(
            &mut r,
            &mut st,
            Instant::from_secs(9),
            &frag(3, p, 7000, true, &[0; 1000]),
        );
        assert!(r.held() <= 10_000, "{}", r.held());
        assert!(st.reasm_over_budget >= 2);
        // One datagram larger than the whole budget cannot be held.
        let before = st.reasm_over_budget;
        assert_eq!(
            add(
                &mut r,
                &mut st,
                Instant::from_secs(9),
                &frag(3, p, 20_000, true, &[0; 8])
            ),
            Outcome::Dropped
        );
        assert_eq!(st.reasm_over_budget, before + 1);
        assert_eq!(r.len(), 1, "the other datagram stays");
        assert!(r.held() <= 10_000);
    }

    #[test]
    fn too_many_holes_drop_the_datagram() {
        let mut r = Reassembly::new(IpConfig::default());
        let mut st = StackStats::default();
        let now = Instant::from_secs(1);
        for k in 0..MAX_RANGES as u16 {
            assert_eq!(
                add(
                    &mut r,
                    &mut st,
                    now,
                    &frag(1, IpProtocol::Udp, k * 16, true, &[0; 8])
                ),
                Outcome::Held
            );
        }
        assert_eq!(
            add(
                &mut r,
                &mut st,
                now,
                &frag(1, IpProtocol::Udp, MAX_RANGES as u16 * 16, true, &[0; 8])
            ),
            Outcome::Dropped
        );
        assert_eq!((st.reasm_over_budget, r.len()), (1, 0));
    }

    proptest::proptest! {
        /// However a datagram is cut and however its fragments arrive
        /// (any order, some twice), it comes out whole and the same.
        #[test]
        fn any_cut_in_any_order_gives_the_datagram(
            len in 1usize..9000,
            per8 in 1usize..185,
            order in proptest::collection::vec(proptest::num::usize::ANY, 0..40),
            dups in proptest::collection::vec(proptest::num::usize::ANY, 0..4),
        ) {
            let d = bytes(len, 7);
            let per = per8 * 8;
            let mut frags: Vec<Vec<u8>> = d
                .chunks(per)
                .enumerate()
                .map(|(k, c)| frag(3, IpProtocol::Udp, (k * per) as u16, (k + 1) * per < len, c))
                .collect();
            for (i, o) in order.iter().enumerate() {
                let n = frags.len();
                frags.swap(i % n, o % n);
            }
            for o in &dups {
                let f = frags[o % frags.len()].clone();
                frags.insert(0, f);
            }
            // More fragments than twice the ranges may leave too many
            // holes at once in some order: then it may be dropped.
            let may_drop = d.chunks(per).count() > 2 * MAX_RANGES;
            let mut r = Reassembly::new(IpConfig::default());
            let mut st = StackStats::default();
            let now = Instant::from_secs(1);
            let mut whole = None;
            for f in &frags {
                match add(&mut r, &mut st, now, f) {
                    Outcome::Complete(i) => {
                        let (buf, n) = r.take(i).unwrap();
                        whole = Some(buf[HEADER_ROOM..n].to_vec());
                        r.release(i, buf);
                    }
                    Outcome::Held => {}
                    Outcome::Dropped => {
                        proptest::prop_assert!(may_drop && st.reasm_over_budget > 0, "dropped: {st:?}");
                    }
                }
            }
            if st.reasm_over_budget == 0 {
                proptest::prop_assert_eq!(whole, Some(d));
            }
        }

        /// Arbitrary fragments never pass the budget, never panic, and all
        /// time out.
        #[test]
        fn arbitrary_fragments_stay_within_bounds(
            frags in proptest::collection::vec(
                (0u16..4, 0u16..8192, proptest::bool::ANY, 1usize..1500, 0u8..3),
                0..60,
            ),
        ) {
            let cfg = IpConfig {
                reasm_max_bytes: 20_000,
                reasm_max_datagrams: 3,
                ..IpConfig::default()
            };
            let mut r = Reassembly::new(cfg);
            let mut st = StackStats::default();
            let now = Instant::from_secs(1);
            for (id, off, more, n, proto) in frags {
                let proto = [IpProtocol::Udp, IpProtocol::Tcp, IpProtocol::Icmp][usize::from(proto)];
                let f = frag(id, proto, off * 8, more, &vec![1u8; n]);
                if let Outcome::Complete(i) = add(&mut r, &mut st, now, &f) {
                    let (buf, _) = r.take(i).unwrap();
                    r.release(i, buf);
                }
                proptest::prop_assert!(r.held() <= 20_000);
                proptest::prop_assert!(r.len() <= 3);
            }
            while r.expire(now + Duration::from_secs(30)).is_some() {}
            proptest::prop_assert_eq!((r.len(), r.held(), r.poll_at()), (0, 0, None));
        }
    }

    #[test]
    fn a_timed_out_datagram_quotes_its_first_fragment() {
        let mut r = Reassembly::new(IpConfig::default());
        let mut st = StackStats::default();
        let t0 = Instant::from_secs(1);
        let d = bytes(1200, 3);
        let first = frag(9, IpProtocol::Udp, 0, true, &d[..1000]);
        add(&mut r, &mut st, t0, &first);
        // Another with only a later fragment: no quote when it expires.
        add(
            &mut r,
            &mut st,
            t0 + Duration::from_secs(1),
            &frag(10, IpProtocol::Udp, 1000, false, &d[1000..]),
        );
        assert_eq!(r.poll_at(), Some(t0 + Duration::from_secs(30)));
        assert!(r.expire(t0 + Duration::from_secs(29)).is_none());
        let q = r.expire(t0 + Duration::from_secs(30)).unwrap().unwrap();
        assert_eq!((q.src, q.dst, q.len), (A, B, 28));
        assert_eq!(&q.quote[..28], &first[..28]);
        assert_eq!(r.poll_at(), Some(t0 + Duration::from_secs(31)));
        assert!(r.expire(t0 + Duration::from_secs(31)).unwrap().is_none());
        assert_eq!((r.len(), r.held(), r.poll_at()), (0, 0, None));
    }
}
