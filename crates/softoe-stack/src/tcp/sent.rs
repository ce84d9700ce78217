//! The transmit log: when each piece of the flight last went out, and what
//! the receiver has said about it.
//!
//! RACK (RFC 8985) decides loss by time rather than by counting duplicate
//! ACKs: a segment is lost once a segment *sent after it* has been
//! delivered and a reordering window has passed. That needs a transmit time
//! for every segment in flight, and a new one for every retransmission — so
//! one ACK can mark several segments lost at once, lost retransmissions
//! included, without a timeout.
//!
//! The log is a list of entries in sequence order covering `[snd_una,
//! snd_max)`. An entry is one transmission of a range: a TSO super-segment
//! is one entry until SACK blocks or retransmissions cut it. Each entry
//! carries its last transmit time, a transmission number (a strict order,
//! where two transmissions in the same clock tick would tie), and three
//! flags: SACKed, lost (and not yet sent again), and retransmitted. `pipe`
//! (RFC 6675's estimate of what is in the network) is then simply the bytes
//! neither SACKed nor lost, kept as a running sum.
//!
//! Entries only multiply by splitting, at SACK edges and retransmission
//! edges. A receiver that SACKs single bytes could make that unbounded, so
//! the log has a cap; past it, splits are refused and the log degrades to
//! coarser entries (a partly SACKed entry is treated as not SACKed, which
//! only makes recovery more conservative).

use alloc::collections::VecDeque;

use softoe_wire::TcpSeqNumber;

use super::seq;
use crate::time::Instant;

/// Entries reserved at the first transmission; new data joins the last
/// entry rather than grow the log past what it holds (SACK and
/// retransmission cuts may still grow it, up to `max_entries`).
const INITIAL_ENTRIES: usize = 256;

/// The receiver SACKed this entry.
const SACKED: u8 = 1;
/// Deemed lost and not sent again since.
const LOST: u8 = 2;
/// Sent more than once.
const RETRANS: u8 = 4;

/// One transmission of `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sent {
    pub(crate) start: TcpSeqNumber,
    pub(crate) end: TcpSeqNumber,
    /// When it last went out.
    pub(crate) at: Instant,
    /// Transmission number of its last transmission (strictly increasing).
    pub(crate) xmit: u64,
    flags: u8,
}

impl Sent {
    pub(crate) fn len(&self) -> u32 {
        seq::dist(self.end, self.start)
    }

    pub(crate) fn sacked(&self) -> bool {
        self.flags & SACKED != 0
    }

    pub(crate) fn lost(&self) -> bool {
        self.flags & LOST != 0
    }

    pub(crate) fn retransmitted(&self) -> bool {
        self.flags & RETRANS != 0
    }
}

/// What [`SentLog::detect_lost`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Detected {
    /// Entries newly marked lost.
    pub(crate) lost: u32,
    /// Of those, retransmissions (lost again).
    pub(crate) lost_retransmits: u32,
    /// The earliest time a segment not yet lost will be, if nothing is
    /// delivered before: when to look again.
    pub(crate) next: Option<Instant>,
}

/// The transmit log of one connection.
#[derive(Debug)]
pub(crate) struct SentLog {
    q: VecDeque<Sent>,
    next_xmit: u64,
    max_entries: usize,
    /// Bytes of entries flagged SACKed.
    sacked_bytes: u32,
    /// Bytes of entries flagged lost.
    lost_bytes: u32,
    /// Bytes of all entries.
    total_bytes: u32,
}

impl SentLog {
    /// Gives up the log's allocation, leaving it empty.
    pub(crate) fn take_storage(&mut self) -> VecDeque<Sent> {
        self.sacked_bytes = 0;
        self.lost_bytes = 0;
        self.total_bytes = 0;
        core::mem::take(&mut self.q)
    }

    /// Bytes of storage it owns.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.q.capacity() * size_of::<Sent>()
    }

    #[cfg(test)]
    pub(crate) fn new(max_entries: usize) -> SentLog {
        SentLog::with_storage(max_entries, VecDeque::new())
    }

    /// A new one, in `q`'s allocation (a closed
    /// connection's, which grew with its sends), emptied.
    pub(crate) fn with_storage(max_entries: usize, mut q: VecDeque<Sent>) -> SentLog {
        q.clear();
        SentLog {
            q,
            next_xmit: 0,
            max_entries: max_entries.max(16),
            sacked_bytes: 0,
            lost_bytes: 0,
            total_bytes: 0,
        }
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.q.len()
    }

    /// Bytes neither SACKed nor lost (RFC 6675 `pipe`, retransmissions
    /// included since a retransmitted entry is no longer lost).
    pub(crate) fn pipe(&self) -> u32 {
        self.total_bytes
            .saturating_sub(self.sacked_bytes)
            .saturating_sub(self.lost_bytes)
    }

    /// Bytes marked lost and not sent again since.
    pub(crate) fn lost_bytes(&self) -> u32 {
        self.lost_bytes
    }

    /// The entries, in sequence order.
    pub(crate) fn iter(&self) -> alloc::collections::vec_deque::Iter<'_, Sent> {
        self.q.iter()
    }

    fn set_flags(&mut self, i: usize, flags: u8) {
        let Some(e) = self.q.get_mut(i) else { return };
        let len = e.len();
        let old = e.flags;
        e.flags = flags;
        if old & SACKED != 0 {
            self.sacked_bytes = self.sacked_bytes.saturating_sub(len);
        }
        if old & LOST != 0 {
            self.lost_bytes = self.lost_bytes.saturating_sub(len);
        }
        if flags & SACKED != 0 {
            self.sacked_bytes = self.sacked_bytes.saturating_add(len);
        }
        if flags & LOST != 0 {
            self.lost_bytes = self.lost_bytes.saturating_add(len);
        }
    }

    /// Index of the first entry ending after `s`.
    fn find(&self, s: TcpSeqNumber) -> usize {
        self.q.partition_point(|e| seq::le(e.end, s))
    }

    /// Makes `s` an entry boundary if it falls inside one. Returns false if
    /// the log is full and the entry could not be cut.
    fn split(&mut self, s: TcpSeqNumber) -> bool {
        let i = self.find(s);
        let Some(&e) = self.q.get(i) else { return true };
        if !seq::lt(e.start, s) || !seq::lt(s, e.end) {
            return true;
        }
        if self.q.len() >= self.max_entries {
            return false;
        }
        // Sums are unchanged: both halves keep the flags.
        if let Some(first) = self.q.get_mut(i) {
            first.end = s;
        }
        self.q.insert(i + 1, Sent { start: s, ..e });
        true
    }

    /// Records a transmission of `[start, end)` at `now`. Parts already in
    /// the log become retransmissions (a new time and number, no longer
    /// lost); the rest is new. Returns the transmission number.
    pub(crate) fn record(&mut self, start: TcpSeqNumber, end: TcpSeqNumber, now: Instant) -> u64 {
        self.next_xmit += 1;
        let xmit = self.next_xmit;
        if !seq::lt(start, end) {
            return xmit;
        }
        let top = self.q.back().map(|e| e.end);
        let resent_end = match top {
            Some(top) if seq::lt(start, top) => {
                let re_end = if seq::lt(end, top) { end } else { top };
                // Cut at both edges (if the log is full, the whole entry
                // counts as resent: its loss will be seen later, not
                // falsely).
                self.split(start);
                self.split(re_end);
                let mut i = self.find(start);
                while let Some(e) = self.q.get(i).copied() {
                    if !seq::lt(e.start, re_end) {
                        break;
                    }
                    let flags = (e.flags & !LOST) | RETRANS;
                    self.set_flags(i, flags);
                    if let Some(x) = self.q.get_mut(i) {
                        x.at = now;
                        x.xmit = xmit;
                    }
                    i += 1;
                }
                re_end
            }
            _ => start,
        };
        if seq::lt(resent_end, end) {
            let new_start = match top {
                Some(top) if seq::lt(resent_end, top) => top,
                _ => resent_end,
            };
            if seq::lt(new_start, end) {
                self.total_bytes = self.total_bytes.saturating_add(seq::dist(end, new_start));
                // New data sent in the same instant as the entry before it
                // (one burst of a dispatch) joins it: one transmission, as
                // the segments of a TSO frame are, ordered by sequence. So
                // does new data that would make the log grow past what it
                // holds (the steady state allocates nothing): the entry
                // then counts as sent now, which only delays the loss
                // verdict on its older part.
                let full = self.q.len() >= self.q.capacity();
                if let Some(last) = self.q.back_mut()
                    && last.end == new_start
                    && last.flags == 0
                    && (last.at == now || full)
                    && resent_end == start
                {
                    last.end = end;
                    if last.at != now {
                        last.at = now;
                        last.xmit = xmit;
                    }
                    return last.xmit;
                }
                if self.q.capacity() == 0 {
                    // Reserved once, at the first transmission: a socket
                    // that never sends costs nothing.
                    self.q.reserve(INITIAL_ENTRIES.min(self.max_entries));
                }
                self.q.push_back(Sent {
                    start: new_start,
                    end,
                    at: now,
                    xmit,
                    flags: 0,
                });
            }
        }
        xmit
    }

    /// The cumulative ACK reached `una`: drops what it covers, calling
    /// `delivered` for each entry (or part) newly delivered by it (not
    /// SACKed before).
    pub(crate) fn ack(&mut self, una: TcpSeqNumber, mut delivered: impl FnMut(&Sent)) {
        while let Some(e) = self.q.front().copied() {
            if seq::le(e.end, una) {
                if !e.sacked() {
                    delivered(&e);
                }
                self.set_flags(0, 0);
                self.total_bytes = self.total_bytes.saturating_sub(e.len());
                self.q.pop_front();
            } else if seq::lt(e.start, una) {
                let cut = seq::dist(una, e.start);
                if !e.sacked() {
                    delivered(&Sent { end: una, ..e });
                }
                if e.sacked() {
                    self.sacked_bytes = self.sacked_bytes.saturating_sub(cut);
                }
                if e.lost() {
                    self.lost_bytes = self.lost_bytes.saturating_sub(cut);
                }
                self.total_bytes = self.total_bytes.saturating_sub(cut);
                if let Some(f) = self.q.front_mut() {
                    f.start = una;
                }
                break;
            } else {
                break;
            }
        }
    }

    /// The receiver SACKed `[l, r)`: flags what it covers, calling
    /// `delivered` for each entry newly SACKed.
    pub(crate) fn sack(
        &mut self,
        l: TcpSeqNumber,
        r: TcpSeqNumber,
        mut delivered: impl FnMut(&Sent),
    ) {
        if !seq::lt(l, r) {
            return;
        }
        self.split(l);
        self.split(r);
        let mut i = self.find(l);
        while let Some(e) = self.q.get(i).copied() {
            if !seq::lt(e.start, r) {
                break;
            }
            // Only entries wholly inside the block (a refused split leaves
            // a partly covered one, which stays unSACKed).
            if !e.sacked() && seq::le(l, e.start) && seq::le(e.end, r) {
                self.set_flags(i, (e.flags | SACKED) & !LOST);
                delivered(&e);
            }
            i += 1;
        }
    }

    /// RACK's loss detection (RFC 8985 §6.2 step 5): every entry neither
    /// delivered nor already lost, sent before the newest delivered
    /// transmission (`rack`: its number and end; parts of one TSO frame go
    /// in sequence order), is lost once `wait` (RACK.rtt + RACK.reo_wnd)
    /// has passed since it went out.
    pub(crate) fn detect_lost(
        &mut self,
        now: Instant,
        rack: (u64, TcpSeqNumber),
        wait: core::time::Duration,
    ) -> Detected {
        let (rack_xmit, rack_end) = rack;
        let mut out = Detected::default();
        for i in 0..self.q.len() {
            let Some(e) = self.q.get(i).copied() else {
                break;
            };
            let before = e.xmit < rack_xmit || (e.xmit == rack_xmit && seq::lt(e.end, rack_end));
            if e.flags & (SACKED | LOST) != 0 || !before {
                continue;
            }
            let due = e.at + wait;
            if due <= now {
                self.set_flags(i, e.flags | LOST);
                out.lost += 1;
                if e.retransmitted() {
                    out.lost_retransmits += 1;
                }
            } else {
                out.next = Some(out.next.map_or(due, |n: Instant| n.min(due)));
            }
        }
        out
    }

    /// Marks every entry not SACKed lost (a retransmission timeout, RFC
    /// 8985 §8: everything outstanding is presumed lost).
    pub(crate) fn mark_all_lost(&mut self) {
        for i in 0..self.q.len() {
            if let Some(e) = self.q.get(i).copied()
                && !e.sacked()
            {
                self.set_flags(i, e.flags | LOST);
            }
        }
    }

    /// Marks lost every entry neither SACKed nor already lost that is
    /// longer than `len` bytes (the path MTU fell: segments of more than
    /// `len` were sent too large, Linux's `tcp_simple_retransmit`). Returns
    /// the entries marked.
    pub(crate) fn mark_lost_longer_than(&mut self, len: u32) -> u32 {
        let mut marked = 0;
        for i in 0..self.q.len() {
            if let Some(e) = self.q.get(i).copied()
                && e.flags & (SACKED | LOST) == 0
                && e.len() > len
            {
                self.set_flags(i, e.flags | LOST);
                marked += 1;
            }
        }
        marked
    }

    /// Forgets what the receiver SACKed (it may have reneged, RFC 2018 §8).
    pub(crate) fn clear_sacked(&mut self) {
        for i in 0..self.q.len() {
            if let Some(e) = self.q.get(i).copied()
                && e.sacked()
            {
                self.set_flags(i, e.flags & !SACKED);
            }
        }
    }

    /// Calls `f` for every entry overlapping `[start, end)`.
    pub(crate) fn for_each_in(
        &self,
        start: TcpSeqNumber,
        end: TcpSeqNumber,
        mut f: impl FnMut(&Sent),
    ) {
        let i = self.find(start);
        for e in self.q.iter().skip(i).take_while(|e| seq::lt(e.start, end)) {
            f(e);
        }
    }

    /// Whether `[start, end)` includes bytes sent more than once.
    pub(crate) fn retransmitted_in(&self, start: TcpSeqNumber, end: TcpSeqNumber) -> bool {
        let i = self.find(start);
        self.q
            .iter()
            .skip(i)
            .take_while(|e| seq::lt(e.start, end))
            .any(|e| e.retransmitted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use core::time::Duration;

    fn s(n: u32) -> TcpSeqNumber {
        TcpSeqNumber(n.wrapping_add(0xFFFF_FF00))
    }

    fn first_lost(log: &SentLog) -> Option<(TcpSeqNumber, TcpSeqNumber)> {
        log.iter().find(|e| e.lost()).map(|e| (e.start, e.end))
    }

    fn t(us: u64) -> Instant {
        Instant::from_micros(us)
    }

    /// The running sums agree with the entries, and entries tile the log.
    fn check(log: &SentLog) {
        let mut sacked = 0;
        let mut lost = 0;
        let mut total = 0;
        let mut prev: Option<TcpSeqNumber> = None;
        for e in log.iter() {
            assert!(seq::lt(e.start, e.end), "empty entry {e:?}");
            if let Some(p) = prev {
                assert_eq!(p, e.start, "entries must tile");
            }
            prev = Some(e.end);
            total += e.len();
            if e.sacked() {
                sacked += e.len();
            }
            if e.lost() {
                lost += e.len();
            }
        }
        assert_eq!(
            (log.sacked_bytes, log.lost_bytes, log.total_bytes),
            (sacked, lost, total)
        );
    }

    #[test]
    fn retransmission_cuts_and_renumbers() {
        let mut log = SentLog::new(64);
        let a = log.record(s(0), s(1000), t(0));
        let b = log.record(s(1000), s(2000), t(10));
        assert!(a < b);
        // Resend 500..1500 across both entries.
        let c = log.record(s(500), s(1500), t(20));
        check(&log);
        let v: Vec<_> = log
            .iter()
            .map(|e| (e.start, e.xmit, e.retransmitted()))
            .collect();
        assert_eq!(
            v,
            [
                (s(0), a, false),
                (s(500), c, true),
                (s(1000), c, true),
                (s(1500), b, false)
            ]
        );
        // A go-back-N resend that runs past the top adds the rest as new.
        log.record(s(1500), s(2500), t(30));
        check(&log);
        assert_eq!(
            log.iter().last().map(|e| (e.start, e.end)),
            Some((s(2000), s(2500)))
        );
        assert_eq!(log.pipe(), 2500);
    }

    #[test]
    fn rack_marks_what_went_before_the_newest_delivered() {
        let mut log = SentLog::new(64);
        for i in 0..5u32 {
            log.record(s(i * 100), s(i * 100 + 100), t(u64::from(i)));
        }
        // 300..400 (sent at t=3) is SACKed: 0..300 went before it.
        let mut newest = 0;
        log.sack(s(300), s(400), |e| newest = newest.max(e.xmit));
        assert_eq!(log.pipe(), 400);
        let d = log.detect_lost(t(50), (newest, s(400)), Duration::from_micros(40));
        // Sent at 0, 1, 2: lost by t=40, 41, 42 — all passed at 50.
        assert_eq!((d.lost, d.lost_retransmits, d.next), (3, 0, None));
        assert_eq!(first_lost(&log), Some((s(0), s(100))));
        assert_eq!(log.pipe(), 100, "only 400..500 is in flight");
        // Resend 0..100: no longer lost, a retransmission in flight.
        let x = log.record(s(0), s(100), t(60));
        assert_eq!(first_lost(&log), Some((s(100), s(200))));
        assert_eq!(log.pipe(), 200);
        // Something sent after the retransmission is delivered while the
        // retransmission is not: the retransmission is lost too.
        let y = log.record(s(500), s(600), t(61));
        log.sack(s(500), s(600), |_| {});
        let d = log.detect_lost(t(200), (y, s(600)), Duration::from_micros(40));
        assert_eq!(
            (d.lost, d.lost_retransmits),
            (2, 1),
            "the 400..500 entry and the resend"
        );
        assert!(x < y);
        check(&log);
    }

    #[test]
    fn one_burst_is_one_entry() {
        let mut log = SentLog::new(64);
        let a = log.record(s(0), s(1000), t(5));
        let b = log.record(s(1000), s(2000), t(5));
        assert_eq!((a, log.len()), (b, 1), "same instant: one transmission");
        log.record(s(2000), s(3000), t(6));
        assert_eq!(log.len(), 2, "a later one is its own");
        check(&log);
    }

    #[test]
    fn a_full_log_takes_new_data_into_its_last_entry() {
        let mut log = SentLog::new(1 << 20);
        let mut at = 0;
        for i in 0..10_000u32 {
            at += 1;
            log.record(s(i * 100), s(i * 100 + 100), t(at));
        }
        assert!(log.len() <= log.q.capacity());
        assert!(log.q.capacity() < 1000, "{}", log.q.capacity());
        check(&log);
        // The merged entry counts as sent last.
        let last = log.iter().last().copied();
        assert_eq!(last.map(|e| (e.end, e.at)), Some((s(1_000_000), t(at))));
    }

    #[test]
    fn parts_of_one_frame_go_in_sequence_order() {
        // One TSO frame: a SACK for its end shows its start lost.
        let mut log = SentLog::new(64);
        let x = log.record(s(0), s(5000), t(0));
        log.sack(s(1000), s(5000), |_| {});
        let d = log.detect_lost(t(10), (x, s(5000)), Duration::from_micros(5));
        assert_eq!(d.lost, 1);
        assert_eq!(first_lost(&log), Some((s(0), s(1000))));
    }

    #[test]
    fn detect_waits_for_the_window_and_says_when() {
        let mut log = SentLog::new(64);
        log.record(s(0), s(100), t(0));
        log.record(s(100), s(200), t(30));
        let x = log.record(s(200), s(300), t(31));
        log.sack(s(200), s(300), |_| {});
        let d = log.detect_lost(t(50), (x, s(300)), Duration::from_micros(40));
        assert_eq!(d.lost, 1);
        assert_eq!(d.next, Some(t(70)), "the second entry is due at 30 + 40");
    }

    #[test]
    fn cumulative_ack_trims_and_reports() {
        let mut log = SentLog::new(64);
        log.record(s(0), s(1000), t(0));
        log.record(s(1000), s(2000), t(1));
        log.sack(s(1000), s(1500), |_| {});
        let mut seen = Vec::new();
        log.ack(s(1200), |e| seen.push((e.start, e.end)));
        assert_eq!(
            seen,
            [(s(0), s(1000))],
            "the SACKed part was delivered already"
        );
        check(&log);
        assert_eq!(log.iter().next().map(|e| e.start), Some(s(1200)));
        seen.clear();
        log.ack(s(2000), |e| seen.push((e.start, e.end)));
        assert_eq!(seen, [(s(1500), s(2000))]);
        assert!(log.is_empty());
        check(&log);
    }

    #[test]
    fn a_full_log_degrades_instead_of_growing() {
        let mut log = SentLog::new(16);
        log.record(s(0), s(100_000), t(0));
        // A receiver SACKing every other byte range.
        for i in 0..100u32 {
            log.sack(s(i * 1000 + 500), s(i * 1000 + 600), |_| {});
        }
        assert!(log.len() <= 16);
        check(&log);
        log.mark_all_lost();
        check(&log);
        assert_eq!(log.pipe(), 0, "all lost or SACKed");
        log.clear_sacked();
        check(&log);
        assert!(log.pipe() > 0, "what was SACKed counts as in flight again");
    }

    proptest::proptest! {
        /// Any mix of sends, resends, SACKs, ACKs and detections keeps the
        /// log consistent with a byte-level model of SACKed bytes.
        #[test]
        fn sums_hold(ops in proptest::collection::vec((0u8..5, 0u32..4000, 1u32..1500), 1..200)) {
            let mut log = SentLog::new(64);
            let mut una = 0u32;
            let mut top = 0u32;
            let mut now = 0u64;
            for (op, a, b) in ops {
                now += 1;
                match op {
                    0 => { log.record(s(top), s(top + b), t(now)); top += b; }
                    1 if top > una => {
                        let st = una + a % (top - una);
                        let en = (st + b).min(top);
                        log.record(s(st), s(en), t(now));
                    }
                    2 if top > una => {
                        let st = una + a % (top - una);
                        log.sack(s(st), s((st + b).min(top)), |_| {});
                    }
                    3 if top > una => { una += a % (top - una + 1); log.ack(s(una), |_| {}); }
                    4 => { log.detect_lost(t(now), (u64::MAX, s(0)), Duration::from_micros(u64::from(b % 7))); }
                    _ => {}
                }
                check(&log);
                let total: u32 = log.iter().map(Sent::len).sum();
                proptest::prop_assert_eq!(total, top - una);
            }
        }
    }
}
