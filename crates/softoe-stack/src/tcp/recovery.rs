//! Loss recovery and the retransmission timer.
//!
//! With SACK (the normal case against Linux) loss is found by RACK-TLP
//! (RFC 8985): the transmit log ([`SentLog`]) holds a send time for every
//! segment and every retransmission, and an ACK that delivers a segment
//! marks lost every segment sent sufficiently before it — several holes at
//! once, lost retransmissions included — once a reordering window has
//! passed. The window starts from the minimum RTT and widens with D-SACKs
//! (§6.2), so reordering (bonded links stripe) is not taken for loss; with
//! no reordering seen and three segments SACKed it is zero, which is RFC
//! 6675's duplicate threshold said in time. A tail-loss probe, two round
//! trips after the last ACK, brings the ACK that lets RACK see a lost tail
//! (§7), so the retransmission timeout fires only when a whole flight and
//! its probes are gone; after a timeout none goes until new data is
//! acknowledged, and the retransmissions (a lone FIN's too) follow the
//! RTO's backoff.
//!
//! What is marked lost is repaired in sequence order, paced by PRR (RFC
//! 6937) in fast recovery and by the congestion window after a timeout;
//! `pipe` is what the log says is neither SACKed nor lost. A recovery whose
//! retransmissions all come back as D-SACKs was spurious, and its window
//! reduction is undone (as Linux's `TCPDSACKUndo`).
//!
//! Without SACK it is NewReno (RFC 6582): fast retransmit after three
//! duplicate ACKs, window inflation, one retransmission per partial ACK, and
//! go-back-N after a timeout. The RTO (RFC 6298) backs off exponentially.

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::time::Duration;

use softoe_wire::{TcpControl, TcpRepr, TcpSeqNumber};

use super::State;
use super::congestion::{CongestionControl, Controller};
use super::input::Ctx;
use super::rangeset::RangeSet;
use super::sent::{Sent, SentLog};
use super::seq;
use super::socket::{TcpSocket, Timer};
use crate::socket::Events;
use crate::time::Instant;

/// RFC 5681's duplicate-ACK threshold.
pub(crate) const DUP_THRESH: u32 = 3;

/// How much longer a probe for a lone segment waits, since the receiver may
/// hold its ACK. RFC 8985 recommends 200 ms (the worst case); that is the
/// minimum RTO, so a lone lost segment would always cost a timeout. Our
/// probe repeats the last segment, which every receiver acknowledges at
/// once, and a D-SACK tells us when it was not needed, so a probe that
/// comes too early costs one segment and nothing else: wait for a typical
/// delayed ACK (Linux's `TCP_DELACK_MIN`), not the worst.
const DEL_ACK_ALLOWANCE: Duration = Duration::from_millis(40);

/// RFC 6298 §5.7: the RTO once data flows after a handshake whose SYN or
/// SYN-ACK had to be retransmitted (no RTT sample could be taken).
pub(crate) const RTO_AFTER_SYN_LOSS: Duration = Duration::from_secs(3);

/// Probes one tail-loss episode may send before the RTO is left to act:
/// at 2, 6, 14, 30, 62 and 126 SRTT, so on a path of 100 µs all go within
/// 13 ms, long before a 200 ms RTO (at 10 % loss each way, a probe or its
/// answer is lost one time in five: one probe leaves a timeout in a fifth of
/// the episodes, six in one of fifteen thousand). After an RTO no probe
/// goes until new data is acknowledged ([`TcpSocket::tlp_allowed`]), so a
/// peer that went silent gets these six once, then the RTO's schedule.
///
/// Measured (issue 34, `softoe bench --only loss --loss 5,10 --no-ms-rtt
/// --loss-reps 3`, softoe sending, medians, back to back): six probes
/// moved 907 / 325 Mb/s at 5 / 10 % with 0 / 2 RTOs in all; two probes
/// 181 / 19 Mb/s with 16 / 95 RTOs; one outside recovery (Linux's rule)
/// and six in it 44 / 6.7 Mb/s with 118 / 97 RTOs. Each RTO costs at
/// least 200 ms of a transfer of about one second.
pub(crate) const MAX_PROBES: u32 = 6;

/// Recoveries without a D-SACK before the reordering window shrinks back
/// (RFC 8985 §6.2, `RACK.reo_wnd_persist`).
const REO_WND_PERSIST: u32 = 16;

/// An active loss-recovery phase.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Phase {
    /// RFC 6675 RecoveryPoint: recovery ends when this is acknowledged.
    pub(crate) point: TcpSeqNumber,
    /// Driven by SACK (RACK) rather than NewReno.
    pub(crate) sack: bool,
    /// Entered by a retransmission timeout (the window paces repairs, and
    /// grows by slow start), not by fast recovery (PRR paces them).
    pub(crate) rto: bool,
}

/// RACK's state (RFC 8985 §6.1).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rack {
    /// The newest transmission known delivered (0: none yet), and the end
    /// of what it delivered (parts of one frame count in sequence order).
    pub(crate) xmit: u64,
    pub(crate) end: TcpSeqNumber,
    /// The RTT of the most recently delivered transmission.
    pub(crate) rtt: Duration,
    /// The highest sequence number delivered (`RACK.fack`).
    pub(crate) fack: Option<TcpSeqNumber>,
    /// `fack` before the ACK being processed (Linux's `prior_fack`): what
    /// this ACK delivers is out of order only if it lies below what was
    /// delivered before it. An ACK that advances over segments 0..4 and
    /// SACKs 5..10 above a hole delivered nothing out of order, whichever
    /// of its fields is read first.
    prior_fack: Option<TcpSeqNumber>,
    /// Reordering has been seen on this connection.
    pub(crate) reord: bool,
    /// The window is this many quarters of the minimum RTT.
    pub(crate) reo_wnd_mult: u32,
    /// Recoveries left before the multiplier resets.
    pub(crate) reo_wnd_persist: u32,
    /// One widening per round trip: the D-SACK round ends at this.
    pub(crate) dsack_round: Option<TcpSeqNumber>,
    /// The largest reordering seen, in segments.
    pub(crate) reordering: u32,
    /// Reordering seen on the ACK being processed.
    reord_now: bool,
    /// This ACK delivered something (RACK may mark losses).
    advanced: bool,
    /// The shortest round trip of an original transmission this ACK
    /// delivered, for the minimum RTT.
    min_sample: Option<Duration>,
    /// When the last tail-loss probe went (what it carried is `Recovery::
    /// tlp_sent`); a transmission logged at this instant is the probe.
    pub(crate) probe_at: Option<Instant>,
}

impl Rack {
    fn new() -> Rack {
        Rack {
            xmit: 0,
            end: TcpSeqNumber(0),
            rtt: Duration::ZERO,
            fack: None,
            prior_fack: None,
            reord: false,
            reo_wnd_mult: 1,
            reo_wnd_persist: REO_WND_PERSIST,
            dsack_round: None,
            reordering: DUP_THRESH,
            reord_now: false,
            advanced: false,
            min_sample: None,
            probe_at: None,
        }
    }

    /// RFC 8985 §6.2 steps 1–3, for one newly delivered (ACKed or SACKed)
    /// transmission.
    fn on_delivered(&mut self, e: &Sent, now: Instant, min_rtt: Duration, mss: u32) {
        // An original transmission delivered below data delivered before
        // this ACK arrived out of order.
        if !e.retransmitted()
            && let Some(f) = self.prior_fack
            && seq::lt(e.end, f)
        {
            self.reord = true;
            self.reord_now = true;
            let segs = seq::dist(f, e.end).div_ceil(mss.max(1)).saturating_add(1);
            self.reordering = self.reordering.max(segs);
        }
        if self.fack.is_none_or(|f| seq::gt(e.end, f)) {
            self.fack = Some(e.end);
        }
        let rtt = now.saturating_duration_since(e.at);
        if !e.retransmitted() {
            // Sent once, so this is its round trip (Karn): the minimum RTT
            // learns from every delivery, SACKed or cumulatively acked, as
            // Linux's does. The one timed segment per round trip alone
            // waits on delayed ACKs and sees the slower paths, and a
            // minimum too high makes a probe's answer look like its
            // original's (below).
            self.min_sample = Some(self.min_sample.map_or(rtt, |m| m.min(rtt)));
        }
        // A retransmission acknowledged sooner than any round trip was
        // answered by its original: not a measurement of the retransmission.
        // Except a probe's, down to half the minimum: it went after a probe
        // timeout of silence, so an answer to its original would have come
        // before it; a quicker one is the probe's over a quicker path than
        // the data took (a bond's real-time member, another member's
        // shorter queue). Under half, the answer crossed the probe.
        let probe = self.probe_at == Some(e.at);
        if e.retransmitted() && rtt < min_rtt && !(probe && rtt >= min_rtt / 2) {
            return;
        }
        self.rtt = rtt;
        self.advanced = true;
        if e.xmit > self.xmit || (e.xmit == self.xmit && seq::gt(e.end, self.end)) {
            self.xmit = e.xmit;
            self.end = e.end;
        }
    }
}

/// Loss-recovery state of one connection.
#[derive(Debug)]
pub(crate) struct Recovery {
    /// SACKed ranges above `snd_una`, as offsets from it.
    pub(crate) scoreboard: RangeSet,
    /// When each part of the flight went out, and what is SACKed or lost.
    pub(crate) sent: SentLog,
    pub(crate) rack: Rack,
    pub(crate) dupacks: u32,
    pub(crate) phase: Option<Phase>,
    /// RFC 6582 `recover`: no new window reduction until the ACK passes it.
    pub(crate) recover: Option<TcpSeqNumber>,
    /// The first lost segment must go next (fast retransmit, NewReno
    /// partial ACK), whatever PRR or the window says.
    pub(crate) rtx_first: bool,
    /// NewReno window inflation, bytes.
    pub(crate) inflation: u32,
    /// PRR (RFC 6937): data delivered to the receiver during recovery.
    pub(crate) prr_delivered: u64,
    /// PRR: data sent during recovery.
    pub(crate) prr_out: u64,
    /// PRR: flight size when recovery began.
    pub(crate) recover_fs: u32,
    /// PRR: the window in force until the next ACK — `pipe` when the last
    /// ACK came plus what PRR let out. Losses the reordering timer marks
    /// between ACKs lower `pipe` and so free room in it, as in Linux, where
    /// PRR sets the congestion window itself.
    pub(crate) prr_wnd: u32,
    /// A tail-loss probe is out: the episode ends when this is acknowledged
    /// (RFC 8985 §7.4, `TLP.end_seq`).
    pub(crate) tlp_high: Option<TcpSeqNumber>,
    /// Probes sent in this episode (see [`MAX_PROBES`]).
    pub(crate) tlp_count: u32,
    /// What the last probe carried (`[start, end)`) and when it went. A
    /// D-SACK inside it tells of a delayed or lost ACK, not of reordering.
    pub(crate) tlp_sent: (TcpSeqNumber, TcpSeqNumber, Instant),
    /// The congestion controller as it was before the reduction still in
    /// force, for undoing it if every retransmission proves spurious.
    pub(crate) undo: Option<Undo>,
    mss: u32,
}

/// What undoing a spurious congestion response needs.
#[derive(Clone, Debug)]
pub(crate) struct Undo {
    /// The controller before the reduction.
    pub(crate) prior: Controller,
    /// `snd_una` when it happened: D-SACKs below it are older news.
    pub(crate) marker: TcpSeqNumber,
    /// Segments retransmitted since, not yet reported as duplicates.
    pub(crate) retrans: i64,
}

impl Recovery {
    /// Recovery state for a new connection, in a closed connection's
    /// allocations (its scoreboard's and its transmit log's; empty ones
    /// for a fresh connection).
    pub(crate) fn with_storage(
        max_ranges: usize,
        max_entries: usize,
        board: Vec<(u32, u32)>,
        sent: VecDeque<Sent>,
    ) -> Recovery {
        Recovery {
            scoreboard: RangeSet::with_storage(max_ranges, board),
            sent: SentLog::with_storage(max_entries, sent),
            rack: Rack::new(),
            dupacks: 0,
            phase: None,
            recover: None,
            rtx_first: false,
            inflation: 0,
            prr_delivered: 0,
            prr_out: 0,
            recover_fs: 0,
            prr_wnd: 0,
            tlp_high: None,
            tlp_count: 0,
            tlp_sent: (TcpSeqNumber(0), TcpSeqNumber(0), Instant::ZERO),
            undo: None,
            mss: 536,
        }
    }

    /// PRR (RFC 6937): after an ACK that delivered `delivered` bytes, how
    /// much may be sent, given `pipe` and `ssthresh`.
    pub(crate) fn prr_update(&mut self, delivered: u32, pipe: u32, ssthresh: u32) {
        self.prr_delivered += u64::from(delivered);
        let sndcnt = if pipe > ssthresh {
            let fs = u64::from(self.recover_fs.max(1));
            (self.prr_delivered * u64::from(ssthresh)).div_ceil(fs) as i64 - self.prr_out as i64
        } else {
            // PRR-SSRB: grow back toward ssthresh, at most one MSS ahead.
            let limit = (self.prr_delivered as i64 - self.prr_out as i64).max(i64::from(delivered))
                + i64::from(self.mss);
            (i64::from(ssthresh) - i64::from(pipe)).min(limit)
        };
        // No pacing here, so bound the burst one ACK may release: what it
        // delivered plus two segments, and never more than one 64 KiB TSO
        // frame. (PRR's accumulated budget can otherwise release megabytes
        // at once after a large loss, and overflow the queue that lost them.)
        let burst = (i64::from(delivered) + 2 * i64::from(self.mss))
            .min(64 * 1024)
            .max(i64::from(self.mss));
        self.prr_wnd = pipe.saturating_add(sndcnt.clamp(0, burst) as u32);
    }

    pub(crate) fn set_mss(&mut self, mss: u32) {
        self.mss = mss.max(1);
    }

    /// RFC 6675 `pipe`: bytes presumed in the network.
    pub(crate) fn pipe(&self) -> u32 {
        self.sent.pipe()
    }

    /// Segments SACKed, as RACK counts them against the duplicate
    /// threshold: enough bytes for three segments, or three ranges.
    fn sacked_enough(&self) -> bool {
        self.scoreboard.covered_bytes() > (DUP_THRESH - 1).saturating_mul(self.mss)
            || self.scoreboard.len() >= DUP_THRESH as usize
    }
}

impl TcpSocket {
    /// RACK's reordering window (RFC 8985 §6.2 step 4).
    pub(crate) fn reo_wnd(&self) -> Duration {
        let r = &self.rec.rack;
        if !r.reord && (self.rec.phase.is_some() || self.rec.sacked_enough()) {
            return Duration::ZERO;
        }
        let w = (self.rtt.min_rtt() / 4).saturating_mul(r.reo_wnd_mult);
        w.min(self.rtt.srtt())
    }

    /// Processes the ACK field and SACK blocks of an acceptable segment.
    /// Returns false when the segment must be dropped (RFC 5961 §5).
    pub(crate) fn on_ack(
        &mut self,
        cx: &mut Ctx<'_>,
        seg: &TcpRepr<'_>,
        ack: TcpSeqNumber,
    ) -> bool {
        let now = cx.now;
        if seq::gt(ack, self.snd_max) {
            // Acknowledges something never sent: answer with an ACK, drop.
            self.ack_now = true;
            return false;
        }
        let oldest_ok = seq::sub(self.snd_una, self.max_snd_wnd);
        if seq::lt(ack, oldest_ok) {
            if cx.challenge.allow(now) {
                self.challenge_pending = true;
                self.counters.challenge_acks += 1;
            }
            return false;
        }
        let window = u32::from(seg.window_len) << self.snd_wscale;
        let flight_before = self.flight();
        self.rec.rack.advanced = false;
        self.rec.rack.reord_now = false;
        self.rec.rack.prior_fack = self.rec.rack.fack;

        // D-SACK (RFC 2883): a first block below the ACK, or inside the
        // second, reports a segment that arrived twice.
        let mut dsack = false;
        if self.sack_ok
            && let Some(Some((l, r))) = seg.sack_ranges.first().copied()
        {
            let (l, r) = (TcpSeqNumber(l), TcpSeqNumber(r));
            let in_second = seg
                .sack_ranges
                .get(1)
                .copied()
                .flatten()
                .is_some_and(|(l2, r2)| {
                    seq::le(TcpSeqNumber(l2), l) && seq::le(r, TcpSeqNumber(r2))
                });
            if seq::lt(l, r) && (seq::le(r, ack) || in_second) {
                dsack = true;
                self.on_dsack(now, l, r);
            }
        }

        // SACK blocks update the scoreboard (RFC 6675 Update()) and the log.
        let covered_at_start = self.rec.scoreboard.covered_bytes();
        let mut new_sack = false;
        if self.sack_ok && flight_before > 0 {
            let before = self.rec.scoreboard.covered_bytes();
            let base = seq::max(ack, self.snd_una);
            let min_rtt = self.rtt.min_rtt();
            let mss = self.snd_mss;
            for (i, (l, r)) in seg.sack_ranges.iter().flatten().enumerate() {
                if i == 0 && dsack {
                    continue;
                }
                let (l, r) = (TcpSeqNumber(*l), TcpSeqNumber(*r));
                if !seq::lt(l, r) || !seq::gt(r, base) || seq::gt(r, self.snd_max) {
                    continue;
                }
                let l = seq::max(l, base);
                let start = seq::dist(l, self.snd_una);
                let end = seq::dist(r, self.snd_una);
                // A full scoreboard keeps what it has: losing a block only
                // makes recovery more conservative.
                let _ = self.rec.scoreboard.insert(start, end);
                let rack = &mut self.rec.rack;
                self.rec
                    .sent
                    .sack(l, r, |e| rack.on_delivered(e, now, min_rtt, mss));
            }
            new_sack = self.rec.scoreboard.covered_bytes() > before;
        }

        let una_before = self.snd_una;
        if seq::gt(ack, self.snd_una) {
            self.ack_advanced(now, ack, flight_before);
        } else if ack == self.snd_una && flight_before > 0 {
            let is_dup = if self.sack_ok {
                new_sack
            } else {
                seg.payload.is_empty() && seg.control == TcpControl::None && window == self.snd_wnd
            };
            if is_dup {
                self.on_dupack(now);
            }
        }
        if self.rec.rack.reord_now {
            self.counters.reord_seen += 1;
        }
        if let Some(r) = self.rec.rack.dsack_round
            && seq::ge(self.snd_una, r)
        {
            self.rec.rack.dsack_round = None;
        }

        if let Some(m) = self.rec.rack.min_sample.take() {
            self.rtt.observe_min(m);
        }
        self.tlp_on_ack(now, ack, dsack, seq::gt(ack, una_before) || new_sack);
        if self.sack_ok && self.rec.rack.advanced {
            self.rack_detect(now);
        }
        if self.rec.phase.is_some_and(|p| p.sack && !p.rto) {
            // PRR: what this ACK delivered (newly cumulatively acknowledged
            // plus newly SACKed bytes) paces sending during recovery, the
            // ACK that starts it included (RFC 6937 §3: "starting or
            // during"): it may SACK most of the flight, and if only the
            // retransmission went out, one lost ACK would leave nothing in
            // flight to clock the next and cost an RTO.
            let delivered = (i64::from(seq::dist(self.snd_una, una_before))
                + i64::from(self.rec.scoreboard.covered_bytes())
                - i64::from(covered_at_start))
            .max(0) as u32;
            let pipe = self.rec.pipe();
            self.rec.prr_update(delivered, pipe, self.cc.ssthresh());
        }

        // Window update (RFC 9293 §3.10.7.4, SND.WL1/WL2).
        if seq::lt(self.snd_wl1, seg.seq_number)
            || (self.snd_wl1 == seg.seq_number && seq::le(self.snd_wl2, ack))
        {
            let opened = window > self.snd_wnd;
            self.snd_wnd = window;
            self.snd_wl1 = seg.seq_number;
            self.snd_wl2 = ack;
            self.max_snd_wnd = self.max_snd_wnd.max(window);
            if window > 0 {
                self.timers.clear(Timer::Persist);
                self.persist_backoff = 0;
            }
            if opened {
                self.events.insert(Events::WRITABLE);
            }
        }
        true
    }

    /// A D-SACK for `[l, r)`: the receiver got it twice. Widens RACK's
    /// reordering window (once per round trip, RFC 8985 §6.2 step 4) and
    /// counts toward undoing a spurious recovery.
    fn on_dsack(&mut self, now: Instant, l: TcpSeqNumber, r: TcpSeqNumber) {
        self.counters.dsacks += 1;
        let (ps, pe, _) = self.rec.tlp_sent;
        let probe = seq::le(ps, l) && seq::le(r, pe) && seq::lt(ps, pe);
        let rack = &mut self.rec.rack;
        // The original arrived after all: reordering, not loss — unless
        // the duplicate was a probe, which the timer sent because an ACK
        // was delayed or lost (Linux, too, keeps TLP's D-SACKs away from
        // the reordering window).
        if !probe {
            rack.reord = true;
            if rack.dsack_round.is_none() {
                rack.dsack_round = Some(self.snd_max);
                rack.reo_wnd_mult = rack.reo_wnd_mult.saturating_add(1).min(64);
                rack.reo_wnd_persist = REO_WND_PERSIST;
            }
        }
        // A duplicate that arrived is a delivered transmission too: when it
        // is the newest (a probe of data already SACKed), RACK learns from
        // it that anything still missing and sent before it was lost.
        let (min_rtt, mss) = (self.rtt.min_rtt(), self.snd_mss);
        let rack = &mut self.rec.rack;
        self.rec.sent.for_each_in(l, r, |e| {
            if e.xmit > rack.xmit {
                rack.on_delivered(e, now, min_rtt, mss);
            }
        });
        let segs = seq::dist(r, l).div_ceil(self.snd_mss.max(1));
        // Above snd_una the log says whether we sent it twice; below, the
        // only way to a duplicate is a retransmission (or the network).
        let ours = seq::le(r, self.snd_una) || self.rec.sent.retransmitted_in(l, r);
        if !ours {
            return;
        }
        self.counters.spurious_retransmits += segs;
        let Some(u) = self.rec.undo.as_mut() else {
            return;
        };
        if !seq::gt(r, u.marker) {
            return;
        }
        u.retrans -= i64::from(segs);
        if u.retrans <= 0
            && let Some(u) = self.rec.undo.take()
        {
            // Every retransmission since the reduction was a duplicate: the
            // loss was not real, and neither should the reduction be.
            self.cc = u.prior;
            self.counters.undos += 1;
        }
    }

    /// RFC 8985 §7.4: what the ACK says about an outstanding probe. The
    /// episode ends once the probe's end is acknowledged: with a D-SACK the
    /// probe was a duplicate and nothing was lost; otherwise the probe (or
    /// a segment of the tail) repaired a loss, which gets one congestion
    /// response. (RFC 8985 waits, when the ACK reaches exactly the probe's
    /// end, for one more ACK to tell; if that ACK is lost the connection
    /// can probe no more and waits for the RTO.)
    fn tlp_on_ack(&mut self, now: Instant, ack: TcpSeqNumber, dsack: bool, progress: bool) {
        let Some(high) = self.rec.tlp_high else {
            return;
        };
        if seq::lt(ack, high) {
            return;
        }
        self.rec.tlp_high = None;
        self.rec.tlp_count = 0;
        let (probe_seq, _, probe_at) = self.rec.tlp_sent;
        if dsack || !progress || now.saturating_duration_since(probe_at) < self.rtt.min_rtt() {
            // The probe was a duplicate, or a pure duplicate ACK says the
            // original and the probe both arrived, or the ACK left the
            // receiver before the probe could reach it (a delayed ACK):
            // nothing was lost.
            return;
        }
        self.counters.tlp_recoveries += 1;
        if self.rec.phase.is_none() && self.may_reduce() {
            self.reduce(now);
            // If the probe turns out a duplicate after all (its D-SACK comes
            // later), the reduction is undone.
            if let Some(u) = self.rec.undo.as_mut() {
                u.marker = probe_seq;
                u.retrans = 1;
            }
        }
    }

    /// Whether a new loss may reduce the window: not twice for one window
    /// of data (RFC 6582 §3.2 step 1, RFC 6675 §5.1).
    fn may_reduce(&self) -> bool {
        self.rec.recover.is_none_or(|r| seq::gt(self.snd_una, r))
    }

    /// The congestion response to a loss, remembering what came before it
    /// so a spurious one can be undone.
    fn reduce(&mut self, now: Instant) {
        self.rec.undo = Some(Undo {
            prior: self.cc.clone(),
            marker: self.snd_una,
            retrans: 0,
        });
        self.cc.on_congestion_event(now, self.flight());
        self.rec.recover = Some(self.snd_max);
    }

    /// RACK's loss detection (RFC 8985 §6.2 step 5) after something new was
    /// delivered or the reordering timer expired: marks lost what went out
    /// before the newest delivered transmission and has waited RACK.rtt +
    /// reo_wnd, re-arms the timer for the rest, and starts fast recovery if
    /// anything was marked. Returns the segments marked.
    pub(crate) fn rack_detect(&mut self, now: Instant) -> u32 {
        if !self.sack_ok || self.rec.rack.xmit == 0 {
            self.timers.clear(Timer::Reorder);
            return 0;
        }
        let wait = self.rec.rack.rtt.saturating_add(self.reo_wnd());
        let rack = (self.rec.rack.xmit, self.rec.rack.end);
        let d = self.rec.sent.detect_lost(now, rack, wait);
        self.counters.lost_retransmits += d.lost_retransmits;
        match d.next {
            Some(t) => self.timers.set(Timer::Reorder, t),
            None => self.timers.clear(Timer::Reorder),
        }
        // Outside recovery nothing resends what is marked lost, so a loss
        // marked during a recovery that has just ended (new data it sent,
        // which PRR had no room to repair yet) starts the next one, as
        // Linux's `tcp_time_to_recover` does on `lost_out`; left alone it
        // waited for the RTO, with the flight stuck at the window.
        if (d.lost > 0 || self.rec.sent.lost_bytes() > 0) && self.rec.phase.is_none() {
            self.enter_recovery(now);
        }
        d.lost
    }

    fn ack_advanced(&mut self, now: Instant, ack: TcpSeqNumber, flight_before: u32) {
        let acked = seq::dist(ack, self.snd_una);
        // Payload bytes acknowledged (the SYN and FIN occupy sequence space too).
        let data = if seq::gt(ack, self.tx_seq0) {
            (seq::dist(ack, self.tx_seq0) as usize).min(self.tx.len())
        } else {
            0
        };
        self.tx.ack(data);
        self.tx_seq0 = seq::add(self.tx_seq0, data as u32);
        self.snd_una = ack;
        if seq::lt(self.snd_nxt, ack) {
            self.snd_nxt = ack;
        }
        self.rec.scoreboard.advance(acked);
        let (min_rtt, mss) = (self.rtt.min_rtt(), self.snd_mss);
        let rack = &mut self.rec.rack;
        self.rec
            .sent
            .ack(ack, |e| rack.on_delivered(e, now, min_rtt, mss));

        // RTT sample from the timed segment (Karn: retransmissions cleared it).
        if let Some((end, t)) = self.rtt_timing
            && seq::ge(ack, end)
        {
            let sample = now.saturating_duration_since(t);
            let min = self.rtt.min_rtt();
            self.rtt.on_sample(sample);
            self.rtt_timing = None;
            // HyStart (RFC 9406's delay test): leave slow start once the
            // RTT has grown by an eighth of the base RTT, 4–16 ms, instead
            // of overflowing the bottleneck queue and losing a window.
            if self.cc.in_slow_start() && min > Duration::ZERO {
                let thresh = (min / 8).clamp(Duration::from_millis(4), Duration::from_millis(16));
                if sample >= min + thresh {
                    self.cc.exit_slow_start();
                }
            }
        }
        self.retries = 0;
        self.rtt.reset_backoff();
        self.last_progress = now;
        self.persist_backoff = 0;
        // Something got through: an ICMP error recorded before is old news
        // (as Linux's `tcp_ack` clearing `sk_err_soft`).
        self.soft_error = None;

        match self.rec.phase {
            Some(p) if seq::ge(ack, p.point) => {
                self.rec.phase = None;
                self.rec.inflation = 0;
                self.rec.dupacks = 0;
                self.rec.rtx_first = false;
                let rack = &mut self.rec.rack;
                rack.reo_wnd_persist = rack.reo_wnd_persist.saturating_sub(1);
                if rack.reo_wnd_persist == 0 {
                    rack.reo_wnd_mult = 1;
                    rack.reo_wnd_persist = REO_WND_PERSIST;
                }
                if !p.rto {
                    self.cc.on_recovery_exit(now, self.flight());
                }
            }
            Some(p) if p.rto => {
                // After a timeout the window grows by slow start while the
                // lost flight is resent.
                self.cc.on_ack(
                    now,
                    data as u32,
                    flight_before,
                    self.rtt.srtt(),
                    self.rtt.min_rtt(),
                );
            }
            Some(p) => {
                // Partial ACK.
                if !p.sack {
                    // RFC 6582 §3.2 step 3: retransmit the next hole, deflate.
                    self.rec.rtx_first = true;
                    self.rec.inflation = self.rec.inflation.saturating_sub(acked);
                    if acked >= self.snd_mss {
                        self.rec.inflation = self.rec.inflation.saturating_add(self.snd_mss);
                    }
                }
            }
            None => {
                self.rec.dupacks = 0;
                let cc_acked = data as u32;
                if cc_acked > 0 {
                    self.cc.on_ack(
                        now,
                        cc_acked,
                        flight_before,
                        self.rtt.srtt(),
                        self.rtt.min_rtt(),
                    );
                }
            }
        }

        if self.snd_una == self.snd_max {
            self.timers.clear(Timer::Retransmit);
            self.timers.clear(Timer::Reorder);
            // A probe asked for (a path change) and not yet sent is owed
            // no more.
            self.tlp_pending = false;
        } else {
            self.timers.set(Timer::Retransmit, now + self.rtt.rto());
        }
        if data > 0 {
            self.events.insert(Events::ACKED | Events::WRITABLE);
        }
        self.sample_rate(now);
    }

    /// NewReno's duplicate ACK (RFC 6582); with SACK, RACK decides instead.
    fn on_dupack(&mut self, now: Instant) {
        self.rec.dupacks = self.rec.dupacks.saturating_add(1);
        if self.sack_ok {
            return;
        }
        if let Some(p) = self.rec.phase {
            if !p.sack {
                self.rec.inflation = self.rec.inflation.saturating_add(self.snd_mss);
            }
            return;
        }
        if self.rec.dupacks >= DUP_THRESH && self.may_reduce() {
            self.enter_recovery(now);
        }
    }

    /// The reordering timer expired: RACK looks again (RFC 8985 §6.3).
    fn on_reorder_timeout(&mut self, now: Instant) {
        let in_phase = self.rec.phase.is_some();
        if self.rack_detect(now) == 0 {
            return;
        }
        self.counters.reorder_timeouts += 1;
        if !in_phase && self.rec.phase.is_some_and(|p| !p.rto) {
            // What the SACKs said was delivered counts for PRR, so new data
            // can go with the retransmission (see on_ack).
            let pipe = self.rec.pipe();
            let sacked = self.rec.scoreboard.covered_bytes();
            self.rec.prr_update(sacked, pipe, self.cc.ssthresh());
        }
    }

    /// Fast recovery begins: RACK (or NewReno's duplicate ACKs) found a loss.
    fn enter_recovery(&mut self, now: Instant) {
        let flight = self.flight();
        if self.may_reduce() {
            self.reduce(now);
        }
        if self.rec.tlp_high.take().is_some() {
            // The probe's answer revealed the loss.
            self.counters.tlp_recoveries += 1;
        }
        self.rec.tlp_count = 0;
        self.rec.phase = Some(Phase {
            point: self.snd_max,
            sack: self.sack_ok,
            rto: false,
        });
        self.rec.rtx_first = true;
        // PRR (RFC 6937 §3) starts afresh in each recovery, scaled to what
        // was in the network when it began (RecoverFS; `pipe`, as RFC
        // 9937 has it, since SACKed bytes have left the network).
        self.rec.prr_delivered = 0;
        self.rec.prr_out = 0;
        self.rec.prr_wnd = 0;
        self.rec.recover_fs = if self.sack_ok {
            self.rec.pipe()
        } else {
            flight
        }
        .max(1);
        self.rec.inflation = if self.sack_ok {
            0
        } else {
            DUP_THRESH * self.snd_mss
        };
        self.counters.fast_retransmits += 1;
        if self.sack_ok {
            self.counters.sack_recoveries += 1;
        }
        self.rtt_timing = None;
    }

    /// Runs the timers that expired by `now`.
    pub(crate) fn on_timers(&mut self, now: Instant) {
        if self.timers.expired(Timer::TimeWait, now) || self.timers.expired(Timer::FinWait2, now) {
            self.set_state(State::Closed);
            return;
        }
        // The probe timer is capped at the RTO's deadline (RFC 8985 §7.2):
        // when both are due, the probe goes and the RTO waits another
        // timeout (as Linux, whose probe takes the RTO's timer). On a long
        // path, where two round trips reach the RTO, the RTO would
        // otherwise always win and no probe would ever go.
        if self.timers.expired(Timer::Tlp, now) {
            self.timers.clear(Timer::Tlp);
            if self.tlp_allowed() {
                self.tlp_pending = true;
                if self.timers.expired(Timer::Retransmit, now) {
                    self.timers.set(Timer::Retransmit, now + self.rtt.rto());
                }
            }
        }
        if self.timers.expired(Timer::Retransmit, now) {
            self.timers.clear(Timer::Retransmit);
            self.on_rto(now);
            if self.state == State::Closed {
                return;
            }
        }
        if self.timers.expired(Timer::Reorder, now) {
            self.timers.clear(Timer::Reorder);
            self.on_reorder_timeout(now);
        }
        if self.timers.expired(Timer::DelayedAck, now) {
            self.timers.clear(Timer::DelayedAck);
            self.ack_now = true;
        }
        if self.timers.expired(Timer::Persist, now) {
            self.timers.clear(Timer::Persist);
            if self.user_timed_out(now) {
                let e = self.timeout_error();
                self.fail(e);
                return;
            }
            if self.orphaned() && self.persist_backoff >= self.cfg.orphan_retries {
                // Nobody will read the answer: the peer, alive but not
                // reading, learns by a RST that the rest will not come.
                let e = self.timeout_error();
                self.reset(e);
                return;
            }
            if self.snd_wnd == 0 {
                self.probe_pending = true;
                self.counters.zero_window_probes += 1;
            } else {
                self.sws_override = true;
            }
            self.persist_backoff = self.persist_backoff.saturating_add(1);
        }
        if self.timers.expired(Timer::Keepalive, now) {
            self.timers.clear(Timer::Keepalive);
            self.on_keepalive(now);
        }
    }

    /// Whether the probe timer may run: a probe is possible
    /// ([`Self::probe_possible`]), the episode has probes left, and no RTO
    /// has fired since the peer last acknowledged new data.
    ///
    /// RFC 8985 §7.2 also rules a probe out in recovery and while anything
    /// is SACKed, leaving those cases to RACK's timer; but RACK can only
    /// judge what was sent before something delivered. When the ACKs for
    /// the newest transmissions (the repairs of a recovery, or a tail sent
    /// after the last SACKed data) are lost too, no ACK is coming and only
    /// the RTO would be left (probing only outside recovery, as Linux,
    /// measured 5–7 Mb/s at 10 % loss against 330–460). RFC 8985 also
    /// allows one probe per episode; here a probe that brings no answer is
    /// followed by another (see [`Self::pto`] for when), up to
    /// [`MAX_PROBES`] and never past the RTO: at 5 % loss a probe or its
    /// ACK is lost one time in ten, and each probe costs one segment where
    /// a timeout costs 200 ms. (A receiver may also stay silent: Linux
    /// delays the ACK for data it could not yet deliver to a slow reader.)
    ///
    /// After an RTO it follows RFC 8985 (and Linux, whose Loss state sends
    /// none): no probe until new data is acknowledged. The timeout says the
    /// episode's probes all went unanswered; probing again after each
    /// backed-off retransmission only multiplied what a silent peer was
    /// sent (27 segments in 1.5 s against Linux's 3; an unacknowledged FIN
    /// 62 times), and cost nothing measurable to keep out (the loss sweep
    /// at 5 and 10 % moved as much either way).
    pub(crate) fn tlp_allowed(&self) -> bool {
        self.retries == 0 && self.rec.tlp_count < MAX_PROBES && self.probe_possible()
    }

    /// Whether there is anything a probe could do: SACK, data in flight,
    /// an RTT measured, a state that sends data. A path change
    /// ([`Self::probe_now`]) asks only this: it is news, whatever timeouts
    /// went before.
    pub(crate) fn probe_possible(&self) -> bool {
        self.sack_ok
            && self.flight() > 0
            && self.rtt.srtt() > Duration::ZERO
            && matches!(
                self.state,
                State::Established
                    | State::CloseWait
                    | State::FinWait1
                    | State::Closing
                    | State::LastAck
            )
    }

    /// The path changed under the connection ([`Stack::path_changed`]):
    /// probe at once, with no backoff. Whether a probe will go.
    ///
    /// [`Stack::path_changed`]: crate::Stack::path_changed
    pub(crate) fn probe_now(&mut self) -> bool {
        self.rec.tlp_count = 0;
        if !self.probe_possible() {
            return false;
        }
        self.tlp_pending = true;
        self.timers.clear(Timer::Tlp);
        true
    }

    /// The probe timeout (RFC 8985 §7.2): two smoothed round trips, or one
    /// plus four deviations where the round trip varies (a queue filling,
    /// a receiver that delays some ACKs: a probe sooner than the ACK's
    /// normal spread is spurious), and for a lone segment the receiver's
    /// delayed ACK on top. The second probe of an episode waits as long as
    /// the first — at random loss the first, or its answer, was simply lost
    /// — and each later one twice as long as the one before. No fixed
    /// floor: on a steady 10 µs path the probe goes after 20 µs, not 2 ms
    /// (Linux's floor).
    ///
    /// Measured (issue 15, 10 % drops both ways on the veth, eight rounds
    /// each, back to back): doubling from the second probe on moved a median
    /// 332 Mb/s (302–457), waiting the same interval for it 441 (408–552);
    /// a capture showed 60 % of the transfer spent idle until a timer's
    /// retransmission, the gaps a median 214 µs against a 24–65 µs SRTT.
    pub(crate) fn pto(&self) -> Duration {
        let srtt = self.rtt.srtt();
        let mut pto = srtt
            .saturating_mul(2)
            .max(srtt.saturating_add(self.rtt.rttvar().saturating_mul(4)));
        // A lone segment may wait for the receiver's delayed ACK — but not
        // one carrying our FIN (acknowledged at once), nor one sent in loss
        // recovery: the receiver has just seen a hole and acknowledges at
        // once (RFC 5681 §4.2 for what fills one; Linux's quick-ACK mode
        // after out-of-order data). A spurious probe there costs a segment;
        // waiting costs 40 ms whenever that segment or its ACK is lost.
        if self.flight() <= self.snd_mss && !self.fin_sent() && self.rec.phase.is_none() {
            pto = pto.max(srtt * 3 / 2 + DEL_ACK_ALLOWANCE);
        }
        pto.saturating_mul(1 << self.rec.tlp_count.saturating_sub(1).min(8))
    }

    fn user_timed_out(&self, now: Instant) -> bool {
        self.cfg
            .user_timeout
            .is_some_and(|ut| now.saturating_duration_since(self.last_progress) >= ut)
    }

    fn on_rto(&mut self, now: Instant) {
        if self.snd_una == self.snd_max
            && !matches!(self.state, State::SynSent | State::SynReceived)
        {
            return;
        }
        let limit = match self.state {
            // A listener's embryo: Linux's request socket, `tcp_synack_retries`.
            State::SynReceived if self.parent.is_some() => self.synack_limit,
            State::SynSent | State::SynReceived => self.cfg.syn_retries,
            _ if self.orphaned() => self.cfg.max_retries.min(self.cfg.orphan_retries),
            _ => self.cfg.max_retries,
        };
        if self.retries >= limit || self.user_timed_out(now) {
            let e = self.timeout_error();
            self.fail(e);
            return;
        }
        self.retries += 1;
        self.counters.rto_count += 1;
        self.rtt.backoff();
        self.rtt_timing = None;
        if self.state.is_synchronized() {
            self.rec.undo = Some(Undo {
                prior: self.cc.clone(),
                marker: self.snd_una,
                retrans: 0,
            });
            self.cc.on_rto(now, self.flight());
            self.rec.inflation = 0;
            self.rec.dupacks = 0;
            self.rec.rtx_first = false;
            self.rec.recover = Some(self.snd_max);
            self.rec.tlp_high = None;
            self.rec.tlp_count = 0;
            self.tlp_pending = false;
            self.timers.clear(Timer::Tlp);
            // Keep what the receiver SACKed (RFC 6675 §5.1), so only holes
            // are resent; but a second timeout without progress may mean
            // the receiver reneged, so then forget it (RFC 2018 §8).
            if self.retries > 1 {
                self.rec.scoreboard.clear();
                self.rec.sent.clear_sacked();
            }
            if self.sack_ok {
                // RFC 8985 §8: everything outstanding is lost; the repairs
                // go in sequence order as the window (one segment, then
                // slow start) allows, and RACK watches them like any other
                // transmission.
                self.rec.sent.mark_all_lost();
                self.rec.phase = Some(Phase {
                    point: self.snd_max,
                    sack: true,
                    rto: true,
                });
            } else {
                // Go back N: resend from the first unacknowledged byte.
                self.rec.phase = None;
                self.snd_nxt = self.snd_una;
            }
        } else {
            // Resend the SYN (or SYN-ACK).
            self.syn_retransmitted = true;
            self.snd_nxt = self.iss;
        }
    }

    fn on_keepalive(&mut self, now: Instant) {
        let Some(ka) = self.cfg.keepalive else { return };
        // As Linux: every synchronized state but TIME-WAIT.
        if !self.state.is_synchronized() || self.state == State::TimeWait {
            return;
        }
        let idle_since = self.last_rx;
        let due = if self.keepalive_sent == 0 {
            idle_since + ka.idle
        } else {
            now
        };
        if due > now {
            // Something arrived since the timer was set.
            self.timers.set(Timer::Keepalive, due);
            return;
        }
        if self.flight() > 0 || self.tx.len() > 0 {
            // The retransmission timer is in charge while data is out.
            self.timers.set(Timer::Keepalive, now + ka.interval);
            return;
        }
        if self.keepalive_sent >= ka.count {
            let e = self.timeout_error();
            self.fail(e);
            return;
        }
        self.keepalive_sent += 1;
        self.counters.keepalive_probes += 1;
        self.probe_pending = true;
        self.timers.set(Timer::Keepalive, now + ka.interval);
    }
}
