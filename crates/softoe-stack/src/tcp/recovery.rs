//! Loss recovery and the retransmission timer.
//!
//! With SACK (the normal case against Linux) recovery follows RFC 6675: a
//! scoreboard of SACKed ranges, `IsLost` by the duplicate threshold, `pipe`
//! as the estimate of data in the network, and `NextSeg` choosing lost holes
//! first, then new data, then other holes. Without SACK it is NewReno
//! (RFC 6582): fast retransmit after three duplicate ACKs, window inflation,
//! one retransmission per partial ACK. Both enter through the congestion
//! controller's `on_congestion_event` and leave through `on_recovery_exit`.
//! The RTO (RFC 6298) backs off exponentially, resets the scoreboard
//! (RFC 2018 §8: the receiver may have reneged) and goes back to `snd_una`.

use softoe_wire::{TcpControl, TcpRepr, TcpSeqNumber};

use super::congestion::CongestionControl;
use super::input::Ctx;
use super::rangeset::RangeSet;
use super::seq;
use super::socket::{TcpSocket, Timer};
use super::{State, TcpError};
use crate::socket::Events;
use crate::time::Instant;

/// RFC 5681's duplicate-ACK threshold.
pub(crate) const DUP_THRESH: u32 = 3;

/// An active loss-recovery phase.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Phase {
    /// RFC 6675 RecoveryPoint: recovery ends when this is acknowledged.
    pub(crate) point: TcpSeqNumber,
    /// Driven by SACK (RFC 6675) rather than NewReno.
    pub(crate) sack: bool,
}

/// Retransmissions remembered for lost-retransmission detection.
const MARKS: usize = 32;

/// A retransmission and the highest sequence number sent when it went out:
/// once data sent after it is SACKed and it is still missing, it was lost too.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RtxMark {
    pub(crate) start: TcpSeqNumber,
    pub(crate) end: TcpSeqNumber,
    pub(crate) snd_max: TcpSeqNumber,
    /// Transmission order of this retransmission.
    pub(crate) xmit: u64,
    pub(crate) sent_at: Instant,
}

/// Loss-recovery state of one connection.
#[derive(Debug)]
pub(crate) struct Recovery {
    /// SACKed ranges above `snd_una`, as offsets from it.
    pub(crate) scoreboard: RangeSet,
    pub(crate) dupacks: u32,
    pub(crate) phase: Option<Phase>,
    /// RFC 6675 HighRxt: everything below was retransmitted in this phase.
    pub(crate) high_rxt: TcpSeqNumber,
    /// RFC 6582 `recover`: no new phase until the ACK passes it.
    pub(crate) recover: Option<TcpSeqNumber>,
    /// The segment at `snd_una` must be retransmitted next (fast retransmit,
    /// NewReno partial ACK), whatever the window says.
    pub(crate) rtx_first: bool,
    /// NewReno window inflation, bytes.
    pub(crate) inflation: u32,
    /// Recent recovery retransmissions (lost-retransmission detection).
    pub(crate) marks: [Option<RtxMark>; MARKS],
    /// Retransmissions found lost: they go again before anything else.
    pub(crate) relost: [Option<(TcpSeqNumber, TcpSeqNumber)>; MARKS],
    /// Retransmissions counted in order (RACK-style ordering).
    pub(crate) xmit_count: u64,
    /// The latest-sent retransmission known delivered (SACKed or acked).
    pub(crate) delivered_xmit: u64,
    /// PRR (RFC 6937): data delivered to the receiver during recovery.
    pub(crate) prr_delivered: u64,
    /// PRR: data sent during recovery.
    pub(crate) prr_out: u64,
    /// PRR: flight size when recovery began.
    pub(crate) recover_fs: u32,
    /// PRR: bytes that may be sent now.
    pub(crate) prr_allow: u32,
    /// A tail-loss probe is out, covering up to this sequence number.
    pub(crate) tlp_high: Option<TcpSeqNumber>,
    /// Holes below this offset (from `snd_una`) are lost by the reordering
    /// timer (RACK), whatever the duplicate threshold says.
    pub(crate) rack_lost: u32,
    mss: u32,
}

impl Recovery {
    pub(crate) fn new(max_ranges: usize) -> Recovery {
        Recovery {
            scoreboard: RangeSet::new(max_ranges),
            dupacks: 0,
            phase: None,
            high_rxt: TcpSeqNumber(0),
            recover: None,
            rtx_first: false,
            inflation: 0,
            marks: [None; MARKS],
            relost: [None; MARKS],
            xmit_count: 0,
            delivered_xmit: 0,
            prr_delivered: 0,
            prr_out: 0,
            recover_fs: 0,
            prr_allow: 0,
            tlp_high: None,
            rack_lost: 0,
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
        self.prr_allow = sndcnt.clamp(0, burst) as u32;
    }

    /// Forgets every mark (recovery ended, or an RTO).
    pub(crate) fn clear_marks(&mut self) {
        self.marks = [None; MARKS];
        self.relost = [None; MARKS];
        self.delivered_xmit = 0;
    }

    /// Remembers a recovery retransmission of `[start, end)` sent while the
    /// highest sequence number sent was `snd_max`.
    pub(crate) fn mark(
        &mut self,
        start: TcpSeqNumber,
        end: TcpSeqNumber,
        snd_max: TcpSeqNumber,
        now: Instant,
    ) {
        self.xmit_count += 1;
        let m = RtxMark {
            start,
            end,
            snd_max,
            xmit: self.xmit_count,
            sent_at: now,
        };
        // The slot of the same range, else a free one, else the one with the
        // highest sequence number: the lowest holes block the connection,
        // so they are the ones worth watching.
        let slot = self
            .marks
            .iter()
            .position(|x| x.is_some_and(|x| x.start == start))
            .or_else(|| self.marks.iter().position(Option::is_none))
            .or_else(|| {
                let (i, highest) = self
                    .marks
                    .iter()
                    .enumerate()
                    .filter_map(|(i, x)| x.map(|x| (i, x.start)))
                    .reduce(|a, b| if seq::gt(b.1, a.1) { b } else { a })?;
                seq::lt(start, highest).then_some(i)
            });
        if let Some(x) = slot.and_then(|i| self.marks.get_mut(i)) {
            *x = Some(m);
        }
    }

    /// After the scoreboard moved: retransmissions that are still missing
    /// while more than DupThresh segments' worth of data sent after them was
    /// SACKed are lost again (as Linux's lost-retransmit detection).
    pub(crate) fn detect_lost_retransmissions(
        &mut self,
        snd_una: TcpSeqNumber,
        now: Instant,
        reo_wnd: core::time::Duration,
    ) -> u32 {
        let limit = (DUP_THRESH - 1).saturating_mul(self.mss);
        // Retransmissions now delivered (acked or SACKed): remember the latest.
        for m in self.marks.iter_mut() {
            let Some(x) = *m else { continue };
            let delivered = seq::le(x.end, snd_una)
                || self
                    .scoreboard
                    .contains(seq::dist(seq::max(x.start, snd_una), snd_una));
            if delivered {
                self.delivered_xmit = self.delivered_xmit.max(x.xmit);
                *m = None;
            }
        }
        let mut found = 0;
        for i in 0..MARKS {
            let Some(Some(m)) = self.marks.get(i).copied() else {
                continue;
            };
            let after = if seq::lt(m.snd_max, snd_una) {
                0
            } else {
                seq::dist(m.snd_max, snd_una)
            };
            // Lost if data sent after it was SACKed (by amount), or if a
            // retransmission sent after it was delivered and the reordering
            // window has passed (RACK, RFC 8985 §6.2, by send order).
            let by_data = self.scoreboard.bytes_above(after) > limit;
            let by_order = m.xmit < self.delivered_xmit && now >= m.sent_at + reo_wnd;
            if by_data || by_order {
                if let Some(x) = self.marks.get_mut(i) {
                    *x = None;
                }
                let start = seq::max(m.start, snd_una);
                if let Some(free) = self.relost.iter_mut().find(|r| r.is_none()) {
                    *free = Some((start, m.end));
                    found += 1;
                }
            }
        }
        found
    }

    /// The next retransmission found lost and still missing, if any.
    pub(crate) fn next_relost_peek(
        &self,
        snd_una: TcpSeqNumber,
    ) -> Option<(TcpSeqNumber, TcpSeqNumber)> {
        self.relost.iter().flatten().find_map(|&(s, e)| {
            if seq::le(e, snd_una) {
                return None;
            }
            let s = seq::max(s, snd_una);
            (!self.scoreboard.contains(seq::dist(s, snd_una))).then_some((s, e))
        })
    }

    /// A relost range starting at `start` was retransmitted up to `end`.
    pub(crate) fn relost_sent(&mut self, start: TcpSeqNumber, end: TcpSeqNumber) {
        for r in self.relost.iter_mut() {
            if let Some((s, e)) = *r
                && s == start
            {
                *r = if seq::lt(end, e) {
                    Some((end, e))
                } else {
                    None
                };
            }
        }
    }

    pub(crate) fn set_mss(&mut self, mss: u32) {
        self.mss = mss.max(1);
    }

    /// The lowest offset (from `snd_una`) not considered lost: every hole
    /// below it is lost by RFC 6675's `IsLost` — more than
    /// `(DupThresh - 1) * SMSS` bytes, or `DupThresh` ranges, SACKed above it.
    pub(crate) fn lost_boundary(&self) -> u32 {
        let limit = (DUP_THRESH - 1).saturating_mul(self.mss);
        let mut bytes = 0u32;
        let mut ranges = 0u32;
        let mut best = 0u32;
        // Walk the ranges from the top down.
        for (s, e) in self.scoreboard.iter().rev() {
            ranges += 1;
            if ranges >= DUP_THRESH {
                best = best.max(s);
            }
            let after = bytes.saturating_add(e - s);
            if after > limit {
                // Offsets below `e - (limit - bytes)` have more than `limit` above.
                best = best.max(e - (limit - bytes));
                break;
            }
            bytes = after;
        }
        best.max(self.rack_lost)
    }

    /// RFC 6675 `pipe`: bytes presumed in the network.
    pub(crate) fn pipe(&self, snd_una: TcpSeqNumber, snd_max: TcpSeqNumber) -> u32 {
        let top = seq::dist(snd_max, snd_una);
        let lost = self.lost_boundary();
        // Retransmissions are only tracked (HighRxt) inside a recovery.
        let rxt = if self.phase.is_none() || seq::lt(self.high_rxt, snd_una) {
            0
        } else {
            seq::dist(self.high_rxt, snd_una).min(top)
        };
        let mut pipe = 0u32;
        for (hs, he) in self.scoreboard.holes_before(top) {
            // Not lost: still in flight.
            if he > lost {
                pipe = pipe.saturating_add(he - hs.max(lost));
            }
            // Retransmitted: that copy is in flight too.
            if hs < rxt {
                pipe = pipe.saturating_add(he.min(rxt) - hs);
            }
        }
        pipe
    }
}

impl TcpSocket {
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

        // SACK blocks update the scoreboard (RFC 6675 Update()).
        let covered_at_start = self.rec.scoreboard.covered_bytes();
        let mut new_sack = false;
        if self.sack_ok && flight_before > 0 {
            let before = self.rec.scoreboard.covered_bytes();
            let base = seq::max(ack, self.snd_una);
            for (l, r) in seg.sack_ranges.iter().flatten() {
                let (l, r) = (TcpSeqNumber(*l), TcpSeqNumber(*r));
                if !seq::lt(l, r) || !seq::gt(r, base) || seq::gt(r, self.snd_max) {
                    continue;
                }
                let start = seq::dist(seq::max(l, base), self.snd_una);
                let end = seq::dist(r, self.snd_una);
                // A full scoreboard keeps what it has: losing a block only
                // makes recovery more conservative.
                let _ = self.rec.scoreboard.insert(start, end);
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

        self.arm_reorder(now, new_sack);
        if self.rec.phase.is_some_and(|p| p.sack) {
            if new_sack {
                self.counters.lost_retransmits +=
                    self.rec
                        .detect_lost_retransmissions(self.snd_una, now, self.rtt.min_rtt() / 4);
            }
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
            let pipe = self.rec.pipe(self.snd_una, self.snd_max);
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
        self.rec.rack_lost = self.rec.rack_lost.saturating_sub(acked);
        if seq::lt(self.rec.high_rxt, ack) {
            self.rec.high_rxt = ack;
        }

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
            if self.cc.in_slow_start() && min > core::time::Duration::ZERO {
                let thresh = (min / 8).clamp(
                    core::time::Duration::from_millis(4),
                    core::time::Duration::from_millis(16),
                );
                if sample >= min + thresh {
                    self.cc.exit_slow_start();
                }
            }
        }
        self.retries = 0;
        self.rtt.reset_backoff();
        self.last_progress = now;
        self.persist_backoff = 0;
        if self.rec.tlp_high.is_some_and(|h| seq::ge(ack, h)) {
            self.rec.tlp_high = None;
        }

        match self.rec.phase {
            Some(p) if seq::ge(ack, p.point) => {
                self.rec.phase = None;
                self.rec.rack_lost = 0;
                self.rec.inflation = 0;
                self.rec.dupacks = 0;
                self.rec.rtx_first = false;
                self.rec.clear_marks();
                self.cc.on_recovery_exit(now, self.flight());
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
        } else {
            self.timers.set(Timer::Retransmit, now + self.rtt.rto());
        }
        if data > 0 {
            self.events.insert(Events::ACKED | Events::WRITABLE);
        }
        self.sample_rate(now);
    }

    fn on_dupack(&mut self, now: Instant) {
        self.rec.dupacks = self.rec.dupacks.saturating_add(1);
        if let Some(p) = self.rec.phase {
            if !p.sack {
                self.rec.inflation = self.rec.inflation.saturating_add(self.snd_mss);
            }
            return;
        }
        let trigger =
            self.rec.dupacks >= DUP_THRESH || (self.sack_ok && self.rec.lost_boundary() > 0);
        // RFC 6582 §3.2 step 1 / RFC 6675 §5.1: one reduction per window.
        let reduce = self.rec.recover.is_none_or(|r| seq::gt(self.snd_una, r));
        if trigger && (reduce || self.sack_ok) {
            // With SACK, losses found while still inside the window of an
            // earlier reduction (typically: retransmissions lost after an RTO)
            // are repaired at once, without reducing the window again; only
            // NewReno must wait for the timer.
            self.enter_recovery(now, reduce);
        }
    }

    /// RACK's reordering timer, for the holes the duplicate threshold
    /// cannot find (RFC 8985 §6.2). Data is sent in order, so data SACKed
    /// above a hole went out after it; once the ACK that SACKed it is a
    /// reordering window old (a quarter of the minimum RTT, at least 1 ms)
    /// and the hole is still open, the hole is lost. Without this, a hole
    /// with fewer than three segments SACKed above it and nothing more to
    /// send (tail losses, small windows) waits for the RTO: the probe is not
    /// allowed while anything is SACKed.
    fn arm_reorder(&mut self, now: Instant, new_sack: bool) {
        if !self.sack_ok || self.rec.phase.is_some() || self.rec.scoreboard.is_empty() {
            self.timers.clear(Timer::Reorder);
            return;
        }
        if new_sack {
            let reo_wnd = (self.rtt.min_rtt() / 4).max(core::time::Duration::from_millis(1));
            self.timers.set(Timer::Reorder, now + reo_wnd);
        }
    }

    fn on_reorder_timeout(&mut self, now: Instant) {
        if !self.sack_ok || self.rec.phase.is_some() || self.rec.scoreboard.is_empty() {
            return;
        }
        self.counters.reorder_timeouts += 1;
        // Every hole below the highest SACKed range went out before data
        // that has arrived: all of them are lost now.
        self.rec.rack_lost = self.rec.scoreboard.iter().last().map_or(0, |(s, _)| s);
        let reduce = self.rec.recover.is_none_or(|r| seq::gt(self.snd_una, r));
        self.enter_recovery(now, reduce);
        // What the SACKs and this timer say was delivered counts for PRR,
        // so new data can go with the retransmission (see on_ack).
        let pipe = self.rec.pipe(self.snd_una, self.snd_max);
        let sacked = self.rec.scoreboard.covered_bytes();
        self.rec.prr_update(sacked, pipe, self.cc.ssthresh());
    }

    fn enter_recovery(&mut self, now: Instant, reduce: bool) {
        let flight = self.flight();
        if reduce {
            self.cc.on_congestion_event(now, flight);
        }
        self.rec.phase = Some(Phase {
            point: self.snd_max,
            sack: self.sack_ok,
        });
        if reduce {
            self.rec.recover = Some(self.snd_max);
        }
        self.rec.high_rxt = self.snd_una;
        self.rec.rtx_first = true;
        // PRR (RFC 6937 §3) starts afresh in each recovery, scaled to what
        // was in the network when it began (RecoverFS; `pipe`, as RFC
        // 9937 has it, since SACKed bytes have left the network).
        self.rec.prr_delivered = 0;
        self.rec.prr_out = 0;
        self.rec.prr_allow = 0;
        self.rec.recover_fs = if self.sack_ok {
            self.rec.pipe(self.snd_una, self.snd_max)
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
        if self.timers.expired(Timer::Tlp, now) {
            self.timers.clear(Timer::Tlp);
            if self.tlp_allowed() {
                self.tlp_pending = true;
            }
        }
        if self.timers.expired(Timer::DelayedAck, now) {
            self.timers.clear(Timer::DelayedAck);
            self.ack_now = true;
        }
        if self.timers.expired(Timer::Persist, now) {
            self.timers.clear(Timer::Persist);
            if self.user_timed_out(now) {
                self.fail(TcpError::TimedOut);
                return;
            }
            if self.orphaned() && self.persist_backoff >= self.cfg.orphan_retries {
                // Nobody will read the answer: the peer, alive but not
                // reading, learns by a RST that the rest will not come.
                self.reset(TcpError::TimedOut);
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

    /// A probe needs SACK, data in flight and no probe already out. RFC
    /// 8985 §7.2 also rules it out in recovery and while anything is SACKed;
    /// the second stays (the reordering timer covers it), the first does
    /// not: when the ACK that would end a recovery is lost and the whole
    /// flight was covered by it, no ACK is coming and only the RTO (200 ms)
    /// would be left. A probe two round trips later costs one segment.
    pub(crate) fn tlp_allowed(&self) -> bool {
        self.sack_ok
            && (self.rec.phase.is_some() || self.rec.scoreboard.is_empty())
            && self.rec.tlp_high.is_none()
            && self.flight() > 0
            && self.rtt.srtt() > core::time::Duration::ZERO
            && matches!(
                self.state,
                State::Established
                    | State::CloseWait
                    | State::FinWait1
                    | State::Closing
                    | State::LastAck
            )
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
            State::SynSent | State::SynReceived => self.cfg.syn_retries,
            _ if self.orphaned() => self.cfg.max_retries.min(self.cfg.orphan_retries),
            _ => self.cfg.max_retries,
        };
        if self.retries >= limit || self.user_timed_out(now) {
            self.fail(TcpError::TimedOut);
            return;
        }
        self.retries += 1;
        self.counters.rto_count += 1;
        self.rtt.backoff();
        self.rtt_timing = None;
        if self.state.is_synchronized() {
            self.cc.on_rto(now, self.flight());
            self.rec.phase = None;
            self.rec.inflation = 0;
            self.rec.dupacks = 0;
            self.rec.rtx_first = false;
            self.rec.recover = Some(self.snd_max);
            // Keep what the receiver SACKed (RFC 6675 §5.1), so going back
            // to snd_una resends only holes; but a second timeout without
            // progress may mean the receiver reneged, so then forget it
            // (RFC 2018 §8).
            if self.retries > 1 {
                self.rec.scoreboard.clear();
            }
            self.rec.rack_lost = 0;
            self.rec.clear_marks();
            self.rec.tlp_high = None;
            self.tlp_pending = false;
            self.rec.high_rxt = self.snd_una;
            // Go back N: resend from the first unacknowledged byte.
            self.snd_nxt = self.snd_una;
        } else {
            // Resend the SYN (or SYN-ACK).
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
            self.fail(TcpError::TimedOut);
            return;
        }
        self.keepalive_sent += 1;
        self.counters.keepalive_probes += 1;
        self.probe_pending = true;
        self.timers.set(Timer::Keepalive, now + ka.interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(ranges: &[(u32, u32)]) -> Recovery {
        let mut r = Recovery::new(8);
        r.set_mss(100);
        for &(s, e) in ranges {
            r.scoreboard.insert(s, e).unwrap();
        }
        r
    }

    #[test]
    fn is_lost_by_bytes_and_by_ranges() {
        // 250 bytes SACKed above 0..100: more than 2 × MSS, so 0..50 is lost.
        assert_eq!(rec(&[(100, 350)]).lost_boundary(), 150);
        // Exactly 2 × MSS is not enough.
        assert_eq!(rec(&[(100, 300)]).lost_boundary(), 0);
        // Three separate ranges above: everything below the lowest is lost.
        assert_eq!(
            rec(&[(100, 110), (200, 210), (300, 310)]).lost_boundary(),
            100
        );
        assert_eq!(rec(&[]).lost_boundary(), 0);
    }

    #[test]
    fn pipe_counts_unlost_holes_and_retransmissions() {
        let una = TcpSeqNumber(1000);
        let max = TcpSeqNumber(1000 + 1000);
        // SACKed 500..1000: 0..300 lost (500 bytes above > 200 ... boundary = 1000 - 200 = 800, capped by range start 500..)
        let mut r = rec(&[(500, 1000)]);
        // Holes: 0..500. Boundary: 800 → whole hole lost → pipe 0.
        assert_eq!(r.lost_boundary(), 800);
        assert_eq!(r.pipe(una, max), 0);
        // In recovery, retransmitted 0..100 → 100 in flight.
        r.high_rxt = TcpSeqNumber(1100);
        assert_eq!(
            r.pipe(una, max),
            0,
            "HighRxt means nothing outside recovery"
        );
        r.phase = Some(Phase {
            point: max,
            sack: true,
        });
        assert_eq!(r.pipe(una, max), 100);
        // No SACK at all: everything is in flight, counted once, whatever
        // HighRxt holds (it starts at 0, which may lie "after" snd_una).
        let mut r = rec(&[]);
        r.high_rxt = TcpSeqNumber(0);
        assert_eq!(
            r.pipe(TcpSeqNumber(0x9000_0000), TcpSeqNumber(0x9000_0000 + 1000)),
            1000
        );
    }
}
