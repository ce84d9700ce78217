//! What a connection sends next.
//!
//! [`TcpSocket::dispatch`] plans a segment without changing any state,
//! hands it to the sink, and commits the plan only once the sink took it — a
//! busy port loses nothing. Plans come, in order of precedence, from: a
//! pending RST; the SYN or SYN-ACK; loss recovery (the first lost segment,
//! then RFC 6675 `NextSeg`); new data within the congestion and receive
//! windows, as TSO super-segments when the port can cut them, held back by
//! Nagle and sender-side silly-window avoidance; a FIN; and finally a bare
//! ACK, window update or probe.

use alloc::vec::Vec;

use softoe_wire::{TcpControl, TcpRepr, TcpSackRanges, TcpSeqNumber, TcpTimestamp};

use super::congestion::CongestionControl;
use super::seq;
use super::socket::{TcpSocket, Timer};
use super::{Endpoint, State};
use crate::iface::IpFields;
use crate::payload::PayloadRef;
use crate::time::Instant;

/// Most payload references in one frame (a `writev` of headers + refs).
pub(crate) const MAX_REFS_PER_FRAME: usize = 64;

/// Why a segment did not go out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SinkError {
    /// The port is busy; try again later. Nothing was sent.
    Busy,
    /// The next hop is being resolved and the frame could not be queued
    /// (too large for the ARP queue's slots). The connection takes it as
    /// sent and lost on the link — as a kernel whose neighbour table drops
    /// it — so its timers run and a retransmission asks again; holding it
    /// back instead left a socket with work that could never go (a busy
    /// loop on a pending probe) or with no timer at all (a stall), when an
    /// ARP entry expired mid-transfer.
    Unresolved,
}

/// A segment ready for IP and Ethernet framing.
#[derive(Debug)]
pub(crate) struct Segment<'a> {
    pub(crate) local: Endpoint,
    pub(crate) remote: Endpoint,
    /// Header fields and options; `payload` is empty.
    pub(crate) repr: TcpRepr<'a>,
    /// Payload by reference.
    pub(crate) refs: &'a [PayloadRef],
    pub(crate) payload_len: usize,
    /// Set for TSO super-segments.
    pub(crate) gso_size: Option<u16>,
    /// The socket's TOS and TTL.
    pub(crate) ip: IpFields,
}

/// A frame the next hop's resolution could not take counts as sent (and
/// lost); only a busy port holds the plan back.
fn lost_if_unresolved(r: Result<(), SinkError>) -> Result<(), SinkError> {
    match r {
        Err(SinkError::Unresolved) => Ok(()),
        r => r,
    }
}

/// Where a connection's segments go (the stack's framing and port).
pub(crate) trait SegmentSink {
    fn send(&mut self, seg: &Segment<'_>) -> Result<(), SinkError>;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// SYN or SYN-ACK.
    Syn,
    /// Data and/or FIN from `snd_nxt` (new, or resent after an RTO).
    Sequential,
    /// A retransmission chosen by loss recovery.
    Recovery,
    /// A tail-loss probe (new data, or the last segment again).
    Probe,
}

#[derive(Clone, Copy, Debug)]
struct Plan {
    seq: TcpSeqNumber,
    len: u32,
    fin: bool,
    kind: Kind,
}

impl TcpSocket {
    /// Sends everything the connection may send now. Returns `Err(())` if the
    /// sink was busy (the rest waits for the next poll).
    pub(crate) fn dispatch(
        &mut self,
        now: Instant,
        sink: &mut impl SegmentSink,
        refs: &mut Vec<PayloadRef>,
    ) -> Result<(), SinkError> {
        if self.rst_pending {
            // Inside the peer's window, or it ignores the reset.
            let repr = self.control_repr(TcpControl::Rst, self.ack_seq(), now);
            self.emit_control(sink, repr)?;
            self.rst_pending = false;
            return Ok(());
        }
        if matches!(self.state, State::Closed | State::Listen) {
            return Ok(());
        }
        if self.snd_una == self.snd_max
            && self.state.is_synchronized()
            && now.saturating_duration_since(self.last_send) > self.rtt.rto()
            && self.tx.len() > 0
        {
            // RFC 5681 §4.1: restart from a small window after an idle period.
            self.cc.on_idle_restart(now);
            self.last_send = now;
        }

        while let Some(plan) = self.plan(now) {
            refs.clear();
            let mut len = plan.len;
            if len > 0 {
                let offset = seq::dist(plan.seq, self.tx_seq0) as usize;
                let got = self
                    .tx
                    .gather(offset, len as usize, refs, MAX_REFS_PER_FRAME);
                len = got as u32;
                if len == 0 && !plan.fin {
                    break;
                }
            }
            let fin = plan.fin && len == plan.len;
            let control = match plan.kind {
                Kind::Syn => TcpControl::Syn,
                _ if fin => TcpControl::Fin,
                _ => TcpControl::None,
            };
            let mut repr = if plan.kind == Kind::Syn {
                self.syn_repr(now)
            } else {
                self.control_repr(control, plan.seq, now)
            };
            repr.psh = len > 0
                && seq::dist(seq::add(plan.seq, len), self.tx_seq0) as usize >= self.tx.len();
            let seg_mss = self.seg_mss();
            let gso_size = (len > seg_mss).then_some(seg_mss.min(u32::from(u16::MAX)) as u16);
            let seg = Segment {
                local: self.local,
                remote: self.remote,
                repr,
                refs: refs.as_slice(),
                payload_len: len as usize,
                gso_size,
                ip: self.ip_fields(),
            };
            lost_if_unresolved(sink.send(&seg))?;
            self.commit(now, Plan { len, fin, ..plan });
        }

        if self.ack_now || self.window_update || self.challenge_pending {
            let repr = self.control_repr(TcpControl::None, self.ack_seq(), now);
            self.emit_control(sink, repr)?;
            self.counters.segs_out += 1;
            self.ack_sent();
        }
        if self.probe_pending {
            // Zero-window and keepalive probes: an old sequence number that
            // the peer must answer with an ACK (as Linux does).
            let repr = self.control_repr(TcpControl::None, seq::sub(self.snd_una, 1), now);
            self.emit_control(sink, repr)?;
            self.counters.segs_out += 1;
            self.probe_pending = false;
        }
        self.arm_persist(now);
        self.arm_tlp(now);
        Ok(())
    }

    /// (Re)arms the tail-loss probe: two round trips after the last
    /// transmission or ACK, but never after the RTO (RFC 8985 §7.2).
    fn arm_tlp(&mut self, now: Instant) {
        if self.tlp_pending && !self.probe_possible() {
            // Acknowledged before it could go: no probe is owed.
            self.tlp_pending = false;
        }
        if self.tlp_pending || !self.tlp_allowed() {
            if !self.tlp_pending {
                self.timers.clear(Timer::Tlp);
            }
            return;
        }
        let pto = self.pto();
        let mut at = now + pto;
        if let Some(rto) = self.timers.get(Timer::Retransmit) {
            at = at.min(rto);
        }
        self.timers.set(Timer::Tlp, at);
    }

    fn emit_control(
        &mut self,
        sink: &mut impl SegmentSink,
        repr: TcpRepr<'_>,
    ) -> Result<(), SinkError> {
        let seg = Segment {
            local: self.local,
            remote: self.remote,
            repr,
            refs: &[],
            payload_len: 0,
            gso_size: None,
            ip: self.ip_fields(),
        };
        lost_if_unresolved(sink.send(&seg))
    }

    /// The IPv4 header fields this connection's segments carry.
    pub(crate) fn ip_fields(&self) -> IpFields {
        IpFields {
            tos: self.cfg.tos,
            ttl: self.cfg.ttl,
            priority: self.cfg.priority,
        }
    }

    /// The sequence number for a bare ACK: the highest sent (as Linux, whose
    /// `snd_nxt` never moves back), unless the peer shrank its window
    /// behind it. A receiver drops, ACK field unread, any segment that
    /// starts past its right edge (RFC 9293 §3.10.7.4), so there the ACK
    /// carries the window's end instead, as Linux's `tcp_acceptable_seq`
    /// does. Any distance past the edge counts, even less than one unit of
    /// the peer's window scale: Linux aligns its window to its scale before
    /// advertising it, so the edge we see is the one it checks against
    /// (taking such a distance for rounding deadlocked a transfer against a
    /// Linux peer with scale 10 and one unit of window left). The end is
    /// never below what the peer has acknowledged, so it is always
    /// acceptable. Before the peer offered any window (an abort in
    /// SYN-SENT) there is no edge to stay inside.
    fn ack_seq(&self) -> TcpSeqNumber {
        let end = seq::add(self.snd_una, self.snd_wnd);
        if self.max_snd_wnd > 0 && seq::gt(self.snd_max, end) {
            end
        } else {
            self.snd_max
        }
    }

    /// Starts the persist timer when data waits and nothing is in flight to
    /// bring an ACK: behind a zero window (then it probes) or a window too
    /// small to send into without silly windows (then it sends what fits).
    /// Without it, a lost window update would deadlock the connection.
    fn arm_persist(&mut self, now: Instant) {
        if !self.state.is_synchronized() {
            return;
        }
        if self.unsent() > 0 && self.flight() == 0 {
            let backoff = self.persist_backoff.min(16);
            let t = self
                .rtt
                .rto()
                .checked_mul(1u32 << backoff)
                .unwrap_or(self.cfg.max_rto)
                .min(self.cfg.max_rto);
            self.timers.set_if_idle(Timer::Persist, now + t);
        } else {
            self.timers.clear(Timer::Persist);
        }
    }

    /// Payload bytes queued but never sent.
    pub(crate) fn unsent(&self) -> usize {
        let sent = if seq::gt(self.snd_max, self.tx_seq0) {
            seq::dist(self.snd_max, self.tx_seq0) as usize
        } else {
            0
        };
        self.tx.len().saturating_sub(sent)
    }

    /// Decides the next segment, changing nothing.
    fn plan(&self, now: Instant) -> Option<Plan> {
        let _ = now;
        match self.state {
            State::SynSent | State::SynReceived => {
                return (self.snd_nxt == self.iss).then_some(Plan {
                    seq: self.iss,
                    len: 0,
                    fin: false,
                    kind: Kind::Syn,
                });
            }
            State::Closed | State::Listen | State::TimeWait => return None,
            _ => {}
        }
        let mss = self.seg_mss();
        let cwnd = self.cwnd();

        // A probe due with nothing left to probe (an ACK came between the
        // path change that asked for it and now) gives way to new data.
        if self.tlp_pending
            && let Some(p) = self.plan_probe(mss)
        {
            return Some(p);
        }

        // Loss recovery first.
        if let Some(phase) = self.rec.phase {
            if !phase.sack {
                // NewReno: the segment at snd_una, then new data within the
                // inflated window.
                if self.rec.rtx_first
                    && let Some(p) = self.rtx_at(self.snd_una, mss)
                {
                    return Some(p);
                }
                let room = cwnd.saturating_sub(self.flight());
                if room < mss {
                    return None;
                }
                return self.plan_sequential(room.min(mss * 4), mss);
            }
            // SACK: fast recovery is paced by PRR (RFC 6937); after a
            // timeout, the window paces what the log says is in flight.
            let room = if phase.rto {
                cwnd.saturating_sub(self.rec.pipe())
            } else {
                self.rec.prr_wnd.saturating_sub(self.rec.pipe())
            };
            // What RACK marked lost, in sequence order; the first lost
            // segment of a fast recovery goes whatever PRR says.
            if (room >= mss || self.rec.rtx_first)
                && let Some(p) = self.next_lost(mss)
            {
                return Some(p);
            }
            if room < mss {
                return None;
            }
            return self.plan_sequential(room.min(mss * 4), mss);
        }

        let in_flight = seq::dist(self.snd_nxt, self.snd_una);
        let room = cwnd.saturating_sub(in_flight);
        self.plan_sequential(room, mss)
    }

    /// The probe (RFC 8985 §7.3) is the last segment sent that the receiver
    /// has not SACKed, again, not new data. RFC 8985 prefers new data, but a
    /// lone new segment arriving at a receiver with nothing else
    /// unacknowledged waits for its delayed-ACK timer (40 ms on Linux), and
    /// that is the common case when the probe fires because the ACK for a
    /// whole flight was lost: the probe then costs as much as it saves. A
    /// segment the receiver already has is a duplicate, which every receiver
    /// acknowledges at once (RFC 5681 §4.2; Linux with a D-SACK); one it
    /// lacks is out of order and acknowledged at once with SACK. Either way
    /// the answer comes a round trip later. A SACKed segment would teach
    /// nothing: its answer delivers nothing new, so RACK could not judge
    /// the segment still missing (a lost retransmission, say).
    ///
    /// Measured (issue 15, 10 % drops against a Linux receiver): probing
    /// with two new segments instead moved 4–11 Mb/s where this probe moves
    /// 390–510; when one of them is lost the other arrives alone and in
    /// order, and Linux holds its ACK 40 ms.
    fn plan_probe(&self, mss: u32) -> Option<Plan> {
        let data_end = seq::add(self.tx_seq0, self.tx.len() as u32);
        // The highest unSACKed entry with data in it (a FIN alone can never
        // be SACKed; probing it would not say whether the data below it
        // arrived).
        let (bottom, top) = self
            .rec
            .sent
            .iter()
            .rev()
            .find(|e| !e.sacked() && seq::lt(e.start, data_end))
            .map_or((self.snd_una, self.snd_max), |e| (e.start, e.end));
        let end = if seq::lt(top, data_end) {
            top
        } else {
            data_end
        };
        let start = seq::max(
            seq::max(seq::sub(end, mss), seq::max(bottom, self.snd_una)),
            self.tx_seq0,
        );
        let start = if seq::lt(start, end) {
            start
        } else {
            seq::max(seq::max(seq::sub(end, mss), self.snd_una), self.tx_seq0)
        };
        let len = if seq::lt(start, end) {
            seq::dist(end, start)
        } else {
            0
        };
        let fin = self.fin_sent() && end == data_end && seq::gt(top, data_end);
        if len == 0 && !fin {
            return None;
        }
        Some(Plan {
            seq: start,
            len,
            fin,
            kind: Kind::Probe,
        })
    }

    /// A recovery retransmission of up to one MSS at `at`.
    fn rtx_at(&self, at: TcpSeqNumber, mss: u32) -> Option<Plan> {
        let off = seq::dist(at, self.tx_seq0) as usize;
        let data_left = self.tx.len().saturating_sub(off) as u32;
        // Stop at the next SACKed range.
        let una_off = seq::dist(at, self.snd_una);
        let to_sacked = self
            .rec
            .scoreboard
            .iter()
            .find(|&(s, _)| s > una_off)
            .map_or(u32::MAX, |(s, _)| s - una_off);
        let len = data_left.min(mss).min(to_sacked);
        let fin = self.fin_queued && seq::add(at, len) == self.fin_seq() && self.fin_sent();
        if len == 0 && !fin {
            return None;
        }
        Some(Plan {
            seq: at,
            len,
            fin,
            kind: Kind::Recovery,
        })
    }

    /// The first range RACK marked lost that is still missing, as a
    /// retransmission of up to one MSS (RFC 6675 NextSeg rule 1, with
    /// RACK's marks for `IsLost`). The scoreboard is asked too: a lost entry
    /// the log could not cut may be partly SACKed.
    fn next_lost(&self, mss: u32) -> Option<Plan> {
        for e in self.rec.sent.iter().filter(|e| e.lost()) {
            let (mut at, end) = (seq::max(e.start, self.snd_una), e.end);
            // Skip what the receiver has.
            for (s, se) in self.rec.scoreboard.iter() {
                let off = seq::dist(at, self.snd_una);
                if s <= off && off < se {
                    at = seq::add(self.snd_una, se);
                }
            }
            if !seq::lt(at, end) {
                continue;
            }
            if let Some(mut p) = self.rtx_at(at, mss) {
                p.len = p.len.min(seq::dist(end, at));
                if p.len > 0 || p.fin {
                    return Some(p);
                }
            }
        }
        None
    }

    /// Data (and FIN) from `snd_nxt`: new data, or data resent after an RTO.
    fn plan_sequential(&self, cwnd_room: u32, mss: u32) -> Option<Plan> {
        let mut at = self.snd_nxt;
        let mut sacked_limit = u32::MAX;
        if seq::lt(at, self.snd_max) {
            // After an RTO, skip what the receiver has since SACKed, and stop
            // before the next SACKed range.
            for (s, e) in self.rec.scoreboard.iter() {
                let off = seq::dist(at, self.snd_una);
                if s <= off && off < e {
                    at = seq::add(self.snd_una, e);
                } else if s > off {
                    sacked_limit = s - off;
                    break;
                }
            }
        }
        let resending = seq::lt(at, self.snd_max);
        if seq::lt(at, self.tx_seq0) {
            return None;
        }
        let offset = seq::dist(at, self.tx_seq0) as usize;
        let queued = self.tx.len().saturating_sub(offset) as u32;
        let wnd_end = seq::add(self.snd_una, self.snd_wnd);
        let wnd_room = if seq::lt(at, wnd_end) {
            seq::dist(wnd_end, at)
        } else {
            0
        };
        let len = queued
            .min(wnd_room)
            .min(cwnd_room)
            .min(self.max_frame_payload())
            .min(sacked_limit);
        let all_sent_after = len == queued;
        let fin = self.fin_queued
            && all_sent_after
            && (!resending || seq::add(at, len) == self.fin_seq());
        if len == 0 {
            if fin && (!self.fin_sent() || resending) {
                return Some(Plan {
                    seq: at,
                    len: 0,
                    fin,
                    kind: Kind::Sequential,
                });
            }
            return None;
        }
        // Nagle, with Minshall's refinement (as Linux): a small segment
        // waits only while another small one is unacknowledged, so the tail
        // of a large write goes at once unless the last one's is in flight.
        let nagle_holds = !(self.cfg.nodelay
            || self.fin_queued
            || resending
            || !seq::gt(self.snd_sml, self.snd_una));
        if len < mss && !resending {
            if len < queued {
                // Sender-side SWS avoidance (RFC 9293 §3.8.6.2.1).
                if (len < self.max_snd_wnd / 2 || self.max_snd_wnd == 0) && !self.sws_override {
                    return None;
                }
            } else if nagle_holds {
                return None;
            }
        }
        // A TSO frame carries whole segments unless it ends the queued data;
        // even then its sub-MSS tail is a small segment on the wire, and
        // Nagle holds it back as it would on its own (Linux's
        // tcp_mss_split_point): the tail joins the next write or goes when
        // the small segment before it is acknowledged.
        let len = if len > mss && (!all_sent_after || nagle_holds) {
            len / mss * mss
        } else {
            len
        };
        Some(Plan {
            seq: at,
            len,
            fin: fin && len == queued,
            kind: Kind::Sequential,
        })
    }

    /// Updates the state after a planned segment went out.
    fn commit(&mut self, now: Instant, plan: Plan) {
        let ctl = u32::from(plan.kind == Kind::Syn) + u32::from(plan.fin);
        let end = seq::add(plan.seq, plan.len + ctl);
        let retransmission = seq::lt(plan.seq, self.snd_max);
        if retransmission {
            self.counters.retransmits += 1;
            self.counters.bytes_retrans += u64::from(plan.len);
            if let Some((e, _)) = self.rtt_timing
                && seq::gt(e, plan.seq)
            {
                self.rtt_timing = None;
            }
        } else if self.rtt_timing.is_none() {
            self.rtt_timing = Some((end, now));
        }
        if plan.kind == Kind::Probe {
            self.counters.tlp_probes += 1;
            self.tlp_pending = false;
            self.rec.tlp_high = Some(seq::max(end, self.snd_max));
            self.rec.tlp_count += 1;
            self.rec.tlp_sent = (plan.seq, end, now);
            self.rec.rack.probe_at = Some(now);
        }
        if plan.kind == Kind::Recovery {
            self.rec.rtx_first = false;
        }
        if plan.kind != Kind::Syn && seq::lt(plan.seq, end) && self.state.is_synchronized() {
            self.rec.sent.record(plan.seq, end, now);
            if retransmission && let Some(u) = self.rec.undo.as_mut() {
                u.retrans += i64::from(plan.len.div_ceil(self.snd_mss.max(1)).max(1));
            }
        }
        if (plan.kind != Kind::Recovery && seq::ge(plan.seq, self.snd_nxt))
            || plan.kind == Kind::Syn
        {
            self.snd_nxt = end;
        }
        if self.snd_una == self.snd_max {
            self.last_progress = now;
        }
        if seq::gt(end, self.snd_max) {
            self.snd_max = end;
        }
        if plan.len > 0 || ctl > 0 {
            self.timers
                .set_if_idle(Timer::Retransmit, now + self.rtt.rto());
        }
        if self.rec.phase.is_some_and(|p| p.sack) && plan.kind != Kind::Syn {
            self.rec.prr_out += u64::from(plan.len);
        }
        if plan.len > 0 {
            self.sws_override = false;
            // A frame whose last segment is short sent a small segment.
            if !plan.len.is_multiple_of(self.seg_mss()) {
                self.snd_sml = end;
            }
        }
        let segs = plan.len.div_ceil(self.snd_mss.max(1)).max(1);
        self.counters.segs_out += u64::from(segs);
        self.counters.bytes_sent += u64::from(plan.len);
        self.last_send = now;
        if plan.kind != Kind::Syn || self.state == State::SynReceived {
            self.ack_sent();
        }
    }

    /// Every segment but the first SYN carries an ACK.
    fn ack_sent(&mut self) {
        self.ack_now = false;
        self.dsack = None;
        self.sack_rotor = self.sack_rotor.wrapping_add(1);
        self.unacked_bytes = 0;
        self.window_update = false;
        self.challenge_pending = false;
        self.timers.clear(Timer::DelayedAck);
    }

    /// The window field for a non-SYN segment; records the advertised edge.
    /// Receiver-side SWS avoidance: the right edge moves only by at least
    /// min(buffer / 2, MSS), and never moves left.
    fn select_window(&mut self) -> u16 {
        let free = self.rx_free();
        let cand = seq::add(self.rcv_nxt, free);
        let cur = if seq::lt(self.rcv_adv_edge, self.rcv_nxt) {
            self.rcv_nxt
        } else {
            self.rcv_adv_edge
        };
        let cap = self.rx_size().min(u32::MAX as usize) as u32;
        let threshold = (cap / 2).min(self.rcv_mss).max(1);
        let edge = if seq::gt(cand, cur) && seq::dist(cand, cur) >= threshold {
            cand
        } else {
            cur
        };
        let wnd = seq::dist(edge, self.rcv_nxt);
        let scale = self.rcv_wscale;
        // Round up so the scaled edge never falls short of one already promised.
        let field = (u64::from(wnd) + (1u64 << scale) - 1) >> scale;
        let field = field.min(u64::from(u16::MAX)) as u16;
        let promised = seq::add(self.rcv_nxt, u32::from(field) << scale);
        if seq::gt(promised, self.rcv_adv_edge) {
            self.rcv_adv_edge = promised;
        }
        field
    }

    fn timestamp(&self, now: Instant) -> Option<TcpTimestamp> {
        self.ts.map(|ts| TcpTimestamp {
            tsval: self.ts_now(now),
            tsecr: ts.recent,
        })
    }

    /// SACK blocks for an outgoing ACK (RFC 2018 §4): a D-SACK first if a
    /// duplicate arrived (RFC 2883), then the block holding the newest
    /// out-of-order segment, then the block of the segment before it (so a
    /// block is reported more than once and one lost ACK loses nothing);
    /// the last slot goes round all the other blocks, one per ACK. With
    /// many holes (5 % loss) more blocks exist than an ACK can carry, and
    /// a block reported only in ACKs that were lost would stay unknown to
    /// the sender, who would then resend data that arrived.
    fn sack_blocks(&self) -> TcpSackRanges {
        let mut out: TcpSackRanges = [None; 4];
        if !self.sack_ok || (self.ooo.is_empty() && self.dsack.is_none()) {
            return out;
        }
        let max = if self.ts.is_some() { 3 } else { 4 };
        let mut n = 0;
        // A D-SACK goes first (RFC 2883 §4), once.
        if let Some((l, r)) = self.dsack
            && let Some(slot) = out.first_mut()
        {
            *slot = Some((l.0, r.0));
            n = 1;
        }
        let first_block = n;
        let to_seq =
            |(s, e): (u32, u32)| (seq::add(self.rcv_nxt, s).0, seq::add(self.rcv_nxt, e).0);
        let recent = self.sack_recent.iter().flatten().filter_map(|&at| {
            let off = seq::ge(at, self.rcv_nxt).then(|| seq::dist(at, self.rcv_nxt))?;
            self.ooo.iter().find(|&(s, e)| s <= off && off < e)
        });
        let blocks = self.ooo.len();
        let turn = if blocks == 0 {
            0
        } else {
            self.sack_rotor as usize % blocks
        };
        let rotating = self.ooo.iter().skip(turn).chain(self.ooo.iter().take(turn));
        let mut recent_taken = 0;
        for (r, from_recent) in recent
            .map(|r| (r, true))
            .chain(rotating.map(|r| (r, false)))
            .chain(self.ooo.iter().rev().map(|r| (r, false)))
        {
            if n >= max {
                break;
            }
            // The recent blocks fill all but the last slot.
            if from_recent && (recent_taken >= 2 || n + 1 >= max) {
                continue;
            }
            let r = to_seq(r);
            if out.iter().skip(first_block).flatten().any(|&x| x == r) {
                continue;
            }
            if let Some(slot) = out.get_mut(n) {
                *slot = Some(r);
                n += 1;
                recent_taken += usize::from(from_recent);
            }
        }
        out
    }

    /// A non-SYN segment's header.
    fn control_repr(
        &mut self,
        control: TcpControl,
        seq_number: TcpSeqNumber,
        now: Instant,
    ) -> TcpRepr<'static> {
        let window_len = if self.state.is_synchronized() || self.state == State::Closed {
            self.select_window()
        } else {
            self.rx_free().min(65_535) as u16
        };
        let ack_number = (self.state != State::SynSent).then_some(self.rcv_nxt);
        TcpRepr {
            src_port: self.local.port,
            dst_port: self.remote.port,
            control,
            psh: false,
            seq_number,
            ack_number,
            window_len,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: if control == TcpControl::Rst {
                [None; 4]
            } else {
                self.sack_blocks()
            },
            timestamp: self.timestamp(now),
            payload: &[],
        }
    }

    /// The SYN (SYN-SENT) or SYN-ACK (SYN-RECEIVED) with our options.
    fn syn_repr(&mut self, now: Instant) -> TcpRepr<'static> {
        let syn_ack = self.state == State::SynReceived;
        let window_len = self.rx_free().min(65_535) as u16;
        let (ws, sack, ts) = if syn_ack {
            (self.wscale_ok, self.sack_ok, self.ts.is_some())
        } else {
            (self.offer_wscale, self.offer_sack, self.offer_ts)
        };
        TcpRepr {
            src_port: self.local.port,
            dst_port: self.remote.port,
            control: TcpControl::Syn,
            psh: false,
            seq_number: self.iss,
            ack_number: syn_ack.then_some(self.rcv_nxt),
            window_len,
            window_scale: ws.then_some(self.rcv_wscale),
            max_seg_size: Some(self.adv_mss),
            sack_permitted: sack,
            sack_ranges: [None; 4],
            timestamp: if ts {
                Some(TcpTimestamp {
                    tsval: self.ts_now(now),
                    tsecr: if syn_ack {
                        self.ts.map_or(0, |t| t.recent)
                    } else {
                        0
                    },
                })
            } else {
                None
            },
            payload: &[],
        }
    }
}
