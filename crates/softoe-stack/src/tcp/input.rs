//! Segment arrival: RFC 9293 §3.10.7, hardened by RFC 5961 and PAWS (RFC 7323).
//!
//! The order of checks follows the RFC — sequence acceptability (after
//! PAWS), RST, SYN, ACK, data, FIN — so each can be read beside its section.
//! No bad segment ever aborts a connection by itself: an unacceptable
//! segment is answered with an ACK (rate-limited where RFC 5961 asks) and
//! dropped.

use core::ops::ControlFlow;
use core::time::Duration;

use softoe_wire::{TcpControl, TcpRepr, TcpSeqNumber};

use super::congestion::CongestionControl;
use super::seq;
use super::socket::{TcpSocket, Timer, Timestamps};
use super::{Endpoint, State, TcpError};
use crate::device::RxRing;
use crate::rand::Rand;
use crate::socket::Events;
use crate::time::Instant;

/// PAWS: a TS.Recent older than this is no longer trusted (RFC 7323 §5.5).
const PAWS_IDLE: Duration = Duration::from_secs(24 * 24 * 3600);

/// A token bucket for challenge ACKs (RFC 5961 §7), shared by all connections.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    per_second: u32,
    tokens: u32,
    window_start: Instant,
}

impl RateLimiter {
    pub(crate) fn new(per_second: u32) -> RateLimiter {
        RateLimiter {
            per_second,
            tokens: per_second,
            window_start: Instant::ZERO,
        }
    }

    /// Takes a token if one is left in the current second.
    pub(crate) fn allow(&mut self, now: Instant) -> bool {
        if now.saturating_duration_since(self.window_start) >= Duration::from_secs(1) {
            self.window_start = now;
            self.tokens = self.per_second;
        }
        if self.tokens > 0 {
            self.tokens -= 1;
            true
        } else {
            false
        }
    }
}

/// What the stack around a connection provides while it processes a segment.
pub(crate) struct Ctx<'a> {
    pub(crate) now: Instant,
    pub(crate) challenge: &'a mut RateLimiter,
    /// Whether the listener's accept queue has room (for SYN-RECEIVED).
    pub(crate) accept_ok: bool,
    /// The runtime's [`Device::deliver`](crate::Device::deliver): in-order
    /// bytes into the reader's ring.
    pub(crate) deliver: &'a mut dyn FnMut(&RxRing, u64, &[u8]) -> bool,
}

/// What the stack must do for the segment beyond the connection itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Nothing.
    None,
    /// Send a RST to the segment's source, with this sequence number and, if
    /// given, an ACK of this number.
    Rst {
        seq: TcpSeqNumber,
        ack: Option<TcpSeqNumber>,
    },
    /// A SYN may start a new incarnation of this TIME-WAIT connection: free
    /// this socket and hand the SYN to the listener.
    Reopen,
}

/// The RST that answers `seg` when no connection wants it (RFC 9293 §3.10.7.1).
pub(crate) fn rst_for(seg: &TcpRepr<'_>) -> Option<Reply> {
    if seg.control == TcpControl::Rst {
        return None;
    }
    Some(match seg.ack_number {
        Some(ack) => Reply::Rst {
            seq: ack,
            ack: None,
        },
        None => Reply::Rst {
            seq: TcpSeqNumber(0),
            ack: Some(seq::add(seg.seq_number, seg_len(seg))),
        },
    })
}

/// Sequence space a segment occupies.
pub(crate) fn seg_len(seg: &TcpRepr<'_>) -> u32 {
    let ctl = u32::from(matches!(seg.control, TcpControl::Syn | TcpControl::Fin));
    (seg.payload.len() as u32).saturating_add(ctl)
}

impl TcpSocket {
    /// An active open: SYN-SENT, the SYN goes out on the next dispatch.
    pub(crate) fn connect(
        &mut self,
        now: Instant,
        local: Endpoint,
        remote: Endpoint,
        iss: TcpSeqNumber,
        rand: &mut Rand,
    ) {
        self.local = local;
        self.remote = remote;
        self.init_send(now, iss, rand);
        self.set_state(State::SynSent);
    }

    /// A passive open from a SYN: SYN-RECEIVED, the SYN-ACK goes out on the
    /// next dispatch.
    pub(crate) fn accept_syn(
        &mut self,
        now: Instant,
        local: Endpoint,
        remote: Endpoint,
        syn: &TcpRepr<'_>,
        iss: TcpSeqNumber,
        rand: &mut Rand,
    ) {
        self.local = local;
        self.remote = remote;
        self.init_send(now, iss, rand);
        self.irs = syn.seq_number;
        self.rcv_nxt = seq::add(syn.seq_number, 1);
        self.negotiate(now, syn);
        // The window our SYN-ACK announces (unscaled): what the final ACK
        // and data with it may fill.
        self.rcv_adv_edge = seq::add(self.rcv_nxt, self.rx_free().min(65_535));
        self.snd_wnd = u32::from(syn.window_len);
        self.max_snd_wnd = self.snd_wnd;
        self.snd_wl1 = syn.seq_number;
        self.last_rx = now;
        self.set_state(State::SynReceived);
    }

    /// A passive open from the ACK of a SYN cookie (`syncookie`): the
    /// connection its SYN would have made, in SYN-RECEIVED with its
    /// SYN-ACK as good as sent, so that processing `ack` next completes it.
    /// `cookie` is our ISS, `mss` the peer's MSS the cookie kept; `opts`
    /// what the ACK's echoed timestamp kept (none without timestamps), and
    /// `ts_offset` the timestamp clock the SYN-ACK's TSval came from.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn accept_cookie(
        &mut self,
        now: Instant,
        local: Endpoint,
        remote: Endpoint,
        ack: &TcpRepr<'_>,
        cookie: TcpSeqNumber,
        mss: u16,
        ts_offset: u32,
        rand: &mut Rand,
    ) {
        let opts = ack
            .timestamp
            .map(|t| super::syncookie::decode_ts(t.tsecr))
            .filter(|_| self.offer_ts);
        let syn = TcpRepr {
            control: TcpControl::Syn,
            seq_number: seq::sub(ack.seq_number, 1),
            ack_number: None,
            window_scale: opts.and_then(|o| o.wscale),
            max_seg_size: Some(mss),
            sack_permitted: opts.is_some_and(|o| o.sack),
            sack_ranges: [None; 4],
            timestamp: ack.timestamp.filter(|_| opts.is_some()),
            payload: &[],
            ..*ack
        };
        self.accept_syn(now, local, remote, &syn, cookie, rand);
        if let Some(ts) = self.ts.as_mut() {
            ts.offset = ts_offset;
        }
        // The SYN-ACK went (from the listener, which kept nothing).
        self.snd_nxt = seq::add(cookie, 1);
        self.snd_max = self.snd_nxt;
    }

    fn init_send(&mut self, now: Instant, iss: TcpSeqNumber, rand: &mut Rand) {
        self.iss = iss;
        self.snd_una = iss;
        self.snd_nxt = iss;
        self.snd_max = iss;
        self.snd_sml = iss;
        self.snd_wl2 = iss;
        self.tx_seq0 = seq::add(iss, 1);
        self.last_progress = now;
        self.last_send = now;
        if self.offer_ts {
            // Kept until the peer's SYN says whether it does timestamps.
            self.ts = Some(Timestamps {
                recent: 0,
                recent_at: now,
                offset: rand.next_u32(),
            });
        }
    }

    /// Applies the options of the peer's SYN (or SYN-ACK).
    fn negotiate(&mut self, now: Instant, syn: &TcpRepr<'_>) {
        self.wscale_ok = self.offer_wscale && syn.window_scale.is_some();
        if self.wscale_ok {
            self.snd_wscale = syn.window_scale.unwrap_or(0).min(14);
        } else {
            self.snd_wscale = 0;
            self.rcv_wscale = 0;
        }
        self.sack_ok = self.offer_sack && syn.sack_permitted;
        self.ts = match (self.ts, syn.timestamp) {
            (Some(mut ts), Some(peer)) => {
                ts.recent = peer.tsval;
                ts.recent_at = now;
                Some(ts)
            }
            _ => None,
        };
        let peer_mss = u32::from(syn.max_seg_size.unwrap_or(536).max(self.cfg.min_mss));
        self.peer_mss = peer_mss;
        // What the path allows now (the announced MSS, unless path-MTU
        // discovery lowered the path since).
        let ours = u32::from(super::socket::mss_for_mtu(&self.cfg, self.path.mtu));
        let opts = self.option_overhead() as u32;
        self.snd_mss = peer_mss.min(ours).saturating_sub(opts).max(1);
        self.rcv_mss = self.snd_mss;
        self.cc.set_mss(self.snd_mss);
        self.rec.set_mss(self.snd_mss);
    }

    /// Processes one arriving segment addressed to this connection. `gso_size`
    /// is set for receive-coalesced frames.
    pub(crate) fn process(
        &mut self,
        cx: &mut Ctx<'_>,
        seg: &TcpRepr<'_>,
        gso_size: Option<u16>,
    ) -> Reply {
        self.counters.segs_in += 1;
        match self.state {
            State::Closed | State::Listen => return rst_for(seg).unwrap_or(Reply::None),
            State::SynSent => return self.process_syn_sent(cx, seg),
            _ => {}
        }
        match self.process_synchronized(cx, seg, gso_size) {
            ControlFlow::Break(reply) => reply,
            ControlFlow::Continue(()) => Reply::None,
        }
    }

    /// Segment arrival in every state past SYN-SENT (RFC 9293 §3.10.7.4), one
    /// step after the other; a step that breaks ends the segment's processing
    /// with its reply.
    fn process_synchronized(
        &mut self,
        cx: &mut Ctx<'_>,
        seg: &TcpRepr<'_>,
        gso_size: Option<u16>,
    ) -> ControlFlow<Reply> {
        let now = cx.now;
        self.check_repeated_syn(now, seg)?;
        self.check_paws(now, seg)?;
        self.check_sequence(now, seg)?;
        self.check_rst_and_syn(cx, seg)?;
        self.update_ts_recent(now, seg);
        self.last_rx = now;
        self.keepalive_sent = 0;
        let Some(ack) = seg.ack_number else {
            return ControlFlow::Break(Reply::None);
        };
        self.check_ack(cx, seg, ack)?;
        self.on_fin_acked(now)?;
        self.process_text(cx, seg, gso_size)
    }

    /// A SYN where a connection already is: in TIME-WAIT a new incarnation
    /// (RFC 6191); in SYN-RECEIVED the peer's retransmitted SYN, or its
    /// SYN-ACK in a simultaneous open.
    fn check_repeated_syn(&mut self, now: Instant, seg: &TcpRepr<'_>) -> ControlFlow<Reply> {
        if self.state == State::TimeWait
            && seg.control == TcpControl::Syn
            && seg.ack_number.is_none()
        {
            // RFC 6191: a new SYN beyond the old incarnation may reopen.
            let newer_ts = match (self.ts, seg.timestamp) {
                (Some(ts), Some(peer)) => seq::ts_lt(ts.recent, peer.tsval),
                _ => false,
            };
            if seq::gt(seg.seq_number, self.rcv_nxt) || newer_ts {
                return ControlFlow::Break(Reply::Reopen);
            }
        }

        if self.state == State::SynReceived && seg.control == TcpControl::Syn {
            if seg.seq_number == self.irs && seg.ack_number.is_none() {
                // The peer did not get our SYN-ACK: send it again.
                self.syn_retransmitted = true;
                self.snd_nxt = self.iss;
                return ControlFlow::Break(Reply::None);
            }
            if let Some(ack) = seg.ack_number {
                // Simultaneous open: the peer's SYN-ACK completes ours.
                if seg.seq_number == self.irs
                    && seq::gt(ack, self.snd_una)
                    && seq::le(ack, self.snd_max)
                {
                    self.snd_una = ack;
                    self.snd_wnd = u32::from(seg.window_len);
                    self.snd_wl1 = seg.seq_number;
                    self.snd_wl2 = ack;
                    self.establish(now);
                    self.ack_now = true;
                    return ControlFlow::Break(Reply::None);
                }
            }
        }
        ControlFlow::Continue(())
    }

    /// PAWS (RFC 7323 §5.3 R1), before the window check.
    fn check_paws(&mut self, now: Instant, seg: &TcpRepr<'_>) -> ControlFlow<Reply> {
        if let (Some(ts), Some(peer)) = (self.ts, seg.timestamp)
            && seg.control != TcpControl::Rst
            && seq::ts_lt(peer.tsval, ts.recent)
            && now.saturating_duration_since(ts.recent_at) < PAWS_IDLE
        {
            self.counters.dup_segments += 1;
            self.ack_now = true;
            return ControlFlow::Break(Reply::None);
        }
        ControlFlow::Continue(())
    }

    /// Sequence acceptability (RFC 9293 §3.10.7.4, first): an unacceptable
    /// segment is answered with an ACK (unless it is a RST) and dropped.
    fn check_sequence(&mut self, now: Instant, seg: &TcpRepr<'_>) -> ControlFlow<Reply> {
        let len = seg_len(seg);
        let s = seg.seq_number;
        if self.acceptable(seg) {
            return ControlFlow::Continue(());
        }
        if seg.control != TcpControl::Rst {
            if seq::lt(s, self.rcv_nxt) && len > 0 {
                self.counters.dup_segments += 1;
                // Data we have: D-SACK it (RFC 2883 §4.1), and answer
                // the next segments at once, the sender is repairing.
                if !seg.payload.is_empty() {
                    let end = seq::add(s, seg.payload.len() as u32);
                    self.dsack = Some((s, end));
                }
                self.quick_acks = super::socket::QUICK_ACKS;
            }
            if self.state == State::TimeWait && seg.control == TcpControl::Fin {
                // A retransmitted FIN: our ACK was lost. Restart 2 MSL.
                self.timers.set(Timer::TimeWait, now + self.cfg.time_wait);
            }
            self.ack_now = true;
        }
        ControlFlow::Break(Reply::None)
    }

    /// Whether `seg` falls in the receive window (the four cases of RFC 9293
    /// §3.10.7.4's table).
    fn acceptable(&self, seg: &TcpRepr<'_>) -> bool {
        let len = seg_len(seg);
        let wnd = seq::dist(self.rcv_adv_edge, self.rcv_nxt);
        let s = seg.seq_number;
        if len == 0 {
            if wnd == 0 {
                s == self.rcv_nxt
            } else {
                seq::in_range(s, self.rcv_nxt, self.rcv_adv_edge)
            }
        } else if wnd == 0 {
            // A bare FIN at the window's edge is taken even at zero window.
            s == self.rcv_nxt && seg.payload.is_empty() && seg.control == TcpControl::Fin
        } else {
            let last = seq::add(s, len - 1);
            seq::in_range(s, self.rcv_nxt, self.rcv_adv_edge)
                || seq::in_range(last, self.rcv_nxt, self.rcv_adv_edge)
        }
    }

    /// RST (second, RFC 5961 §3.2): an exact match resets, in-window gets a
    /// challenge; SYN in a synchronized state (fourth, RFC 5961 §4): a
    /// challenge ACK.
    fn check_rst_and_syn(&mut self, cx: &mut Ctx<'_>, seg: &TcpRepr<'_>) -> ControlFlow<Reply> {
        match seg.control {
            TcpControl::Rst if seg.seq_number == self.rcv_nxt => self.on_reset(),
            TcpControl::Rst | TcpControl::Syn => self.challenge_ack(cx),
            _ => return ControlFlow::Continue(()),
        }
        ControlFlow::Break(Reply::None)
    }

    /// Update TS.Recent (RFC 7323 §4.3): the segment covers last_ack_sent.
    fn update_ts_recent(&mut self, now: Instant, seg: &TcpRepr<'_>) {
        if let (Some(ts), Some(peer)) = (self.ts.as_mut(), seg.timestamp)
            && seq::le(seg.seq_number, self.rcv_nxt)
            && !seq::ts_lt(peer.tsval, ts.recent)
        {
            ts.recent = peer.tsval;
            ts.recent_at = now;
        }
    }

    /// The ACK field (fifth): completes SYN-RECEIVED, then acknowledges data.
    fn check_ack(
        &mut self,
        cx: &mut Ctx<'_>,
        seg: &TcpRepr<'_>,
        ack: TcpSeqNumber,
    ) -> ControlFlow<Reply> {
        if self.state == State::SynReceived {
            if seq::gt(ack, self.snd_una) && seq::le(ack, self.snd_max) {
                if !cx.accept_ok {
                    // Accept queue full: act as if the ACK was lost (as Linux).
                    return ControlFlow::Break(Reply::None);
                }
                self.snd_wnd = u32::from(seg.window_len) << self.snd_wscale;
                self.snd_wl1 = seg.seq_number;
                self.snd_wl2 = ack;
                self.establish(cx.now);
            } else {
                return ControlFlow::Break(Reply::Rst {
                    seq: ack,
                    ack: None,
                });
            }
        }
        if !self.on_ack(cx, seg, ack) {
            return ControlFlow::Break(Reply::None);
        }
        ControlFlow::Continue(())
    }

    /// Transitions driven by the ACK of our FIN.
    fn on_fin_acked(&mut self, now: Instant) -> ControlFlow<Reply> {
        if self.fin_acked() {
            match self.state {
                State::FinWait1 => {
                    self.set_state(State::FinWait2);
                    if self.orphan {
                        self.timers.set(Timer::FinWait2, now + self.cfg.time_wait);
                    }
                }
                State::Closing => self.enter_time_wait(now),
                State::LastAck => {
                    self.set_state(State::Closed);
                    return ControlFlow::Break(Reply::None);
                }
                _ => {}
            }
        }
        ControlFlow::Continue(())
    }

    /// The segment text and FIN (seventh and eighth).
    fn process_text(
        &mut self,
        cx: &mut Ctx<'_>,
        seg: &TcpRepr<'_>,
        gso_size: Option<u16>,
    ) -> ControlFlow<Reply> {
        let s = seg.seq_number;
        match self.state {
            State::Established | State::FinWait1 | State::FinWait2 => {
                if self.rx_shutdown
                    && !seg.payload.is_empty()
                    && seq::gt(seq::add(s, seg.payload.len() as u32), self.rcv_nxt)
                {
                    // Data for a socket nobody will read: reset (as Linux).
                    self.rst_pending = true;
                    self.fail(TcpError::Aborted);
                    return ControlFlow::Break(Reply::None);
                }
                self.receive_data(cx, s, seg.payload, seg.control == TcpControl::Fin, gso_size);
            }
            State::TimeWait if seg.control == TcpControl::Fin => {
                self.ack_now = true;
                self.timers
                    .set(Timer::TimeWait, cx.now + self.cfg.time_wait);
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }

    fn process_syn_sent(&mut self, cx: &mut Ctx<'_>, seg: &TcpRepr<'_>) -> Reply {
        let now = cx.now;
        if let Some(ack) = seg.ack_number
            && (seq::le(ack, self.iss) || seq::gt(ack, self.snd_max))
        {
            if seg.control == TcpControl::Rst {
                return Reply::None;
            }
            return Reply::Rst {
                seq: ack,
                ack: None,
            };
        }
        if seg.control == TcpControl::Rst {
            if seg.ack_number.is_some() {
                self.fail(TcpError::Refused);
            }
            return Reply::None;
        }
        if seg.control != TcpControl::Syn {
            return Reply::None;
        }
        self.irs = seg.seq_number;
        self.rcv_nxt = seq::add(seg.seq_number, 1);
        self.negotiate(now, seg);
        self.last_rx = now;
        match seg.ack_number {
            Some(ack) => {
                self.snd_wnd = u32::from(seg.window_len);
                self.max_snd_wnd = self.snd_wnd;
                self.snd_wl1 = seg.seq_number;
                self.snd_wl2 = ack;
                // Our SYN is acknowledged: an RTT sample unless it was resent.
                if let Some((end, t)) = self.rtt_timing.take()
                    && seq::ge(ack, end)
                {
                    self.rtt.on_sample(now.saturating_duration_since(t));
                }
                self.snd_una = ack;
                if seq::lt(self.snd_nxt, ack) {
                    self.snd_nxt = ack;
                }
                self.retries = 0;
                self.rtt.reset_backoff();
                self.timers.clear(Timer::Retransmit);
                self.establish(now);
                self.ack_now = true;
                if !seg.payload.is_empty() {
                    let s = seq::add(seg.seq_number, 1);
                    self.receive_data(cx, s, seg.payload, false, None);
                }
            }
            None => {
                // Simultaneous open (RFC 9293 §3.5): answer with a SYN-ACK.
                self.snd_nxt = self.iss;
                self.snd_wnd = u32::from(seg.window_len);
                self.max_snd_wnd = self.snd_wnd;
                self.snd_wl1 = seg.seq_number;
                self.set_state(State::SynReceived);
            }
        }
        Reply::None
    }

    /// The handshake completed.
    fn establish(&mut self, now: Instant) {
        // The peer may fill the (unscaled) window our SYN announced.
        let syn_wnd = self.rx_free().min(65_535);
        self.rcv_adv_edge = seq::add(self.rcv_nxt, syn_wnd);
        self.max_snd_wnd = self.max_snd_wnd.max(self.snd_wnd);
        self.last_progress = now;
        if self.syn_retransmitted && !self.rtt.has_sample() {
            // RFC 6298 §5.7: the handshake gave no RTT sample because its
            // SYN or SYN-ACK was resent; start data at 3 s, not 1 s (as
            // Linux's TCP_TIMEOUT_FALLBACK).
            self.rtt.fall_back(super::recovery::RTO_AFTER_SYN_LOSS);
        }
        self.set_state(State::Established);
        if self.fin_queued {
            self.set_state(State::FinWait1);
        }
        self.arm_keepalive(now);
    }

    fn on_reset(&mut self) {
        match self.state {
            State::SynReceived if self.parent.is_some() => {
                // Passive open: the embryo just disappears.
                self.error = Some(TcpError::Reset);
                self.set_state(State::Closed);
            }
            State::TimeWait => self.set_state(State::Closed),
            _ => self.fail(TcpError::Reset),
        }
    }

    /// Sends a challenge ACK if the stack-wide budget allows (RFC 5961 §7).
    fn challenge_ack(&mut self, cx: &mut Ctx<'_>) {
        if cx.challenge.allow(cx.now) {
            self.challenge_pending = true;
            self.counters.challenge_acks += 1;
        }
    }

    pub(crate) fn enter_time_wait(&mut self, now: Instant) {
        self.set_state(State::TimeWait);
        self.timers.clear_all();
        self.timers.set(Timer::TimeWait, now + self.cfg.time_wait);
    }

    /// Places segment data in the receive buffer (RFC 9293 §3.10.7.4, seventh)
    /// and processes a FIN (eighth).
    fn receive_data(
        &mut self,
        cx: &mut Ctx<'_>,
        seg_seq: TcpSeqNumber,
        payload: &[u8],
        fin: bool,
        gso_size: Option<u16>,
    ) {
        let now = cx.now;
        let Some((s, data)) = self.trim_old(seg_seq, payload, fin) else {
            return;
        };
        let offset = seq::dist(s, self.rcv_nxt) as usize;
        let (data, fin) = self.trim_to_window(s, offset, data, fin);
        if !data.is_empty() {
            let seg_size = gso_size
                .map_or(data.len(), usize::from)
                .min(usize::from(self.adv_mss));
            self.rcv_mss = self.rcv_mss.max(seg_size as u32);
        }
        if offset == 0 {
            self.receive_in_order(cx, data);
        } else if !data.is_empty() {
            self.receive_out_of_order(s, offset, data);
        }
        if fin {
            let fin_seq = seq::add(s, data.len() as u32);
            self.rx_fin = Some(fin_seq);
            if fin_seq != self.rcv_nxt {
                self.ack_now = true;
            }
        }
        if self.rx_fin == Some(self.rcv_nxt) && self.ooo.is_empty() {
            self.accept_fin(now);
        }
    }

    /// Trims what we already have off the front of a segment: what is left
    /// of it, from `rcv_nxt` on, or `None` (after an ACK is due) when
    /// nothing new is left.
    fn trim_old<'p>(
        &mut self,
        seg_seq: TcpSeqNumber,
        payload: &'p [u8],
        fin: bool,
    ) -> Option<(TcpSeqNumber, &'p [u8])> {
        let s = seg_seq;
        if !seq::lt(s, self.rcv_nxt) {
            return Some((s, payload));
        }
        let skip = seq::dist(self.rcv_nxt, s) as usize;
        if !payload.is_empty() {
            // D-SACK what arrived again (RFC 2883 §4.1).
            let end = seq::add(s, (payload.len().min(skip)) as u32);
            self.dsack = Some((s, end));
        }
        // Beyond the data only a FIN could remain, and it is old too.
        let data = payload.get(skip..).filter(|d| !d.is_empty() || fin);
        if data.is_none() {
            self.counters.dup_segments += 1;
            self.ack_now = true;
            self.quick_acks = super::socket::QUICK_ACKS;
        }
        data.map(|d| (self.rcv_nxt, d))
    }

    /// Trims `data` at `offset` past `rcv_nxt` to the window we advertised
    /// and the space we have; a FIN cut off with the data is not taken.
    fn trim_to_window<'p>(
        &self,
        s: TcpSeqNumber,
        offset: usize,
        data: &'p [u8],
        fin: bool,
    ) -> (&'p [u8], bool) {
        let wnd_room = seq::dist(self.rcv_adv_edge, s) as usize;
        let buf_room = self.rx.window().saturating_sub(offset);
        let room = if seq::lt(self.rcv_adv_edge, s) {
            0
        } else {
            wnd_room.min(buf_room)
        };
        if data.len() > room {
            (data.get(..room).unwrap_or(&[]), false)
        } else {
            (data, fin)
        }
    }

    /// In-order data: to the reader's ring or the receive buffer, with what
    /// it joins of the out-of-order queue; then when to acknowledge it.
    fn receive_in_order(&mut self, cx: &mut Ctx<'_>, data: &[u8]) {
        let had_ooo = !self.ooo.is_empty();
        let sunk = self.sink_deliver(cx, data, had_ooo);
        let n = sunk + self.rx.enqueue_slice(data.get(sunk..).unwrap_or(&[]));
        let mut advanced = n;
        self.ooo.advance(n as u32);
        if let Some(more) = self.ooo.pop_front_if_starts_at_zero() {
            let more = self.rx.enqueue_unallocated(more as usize);
            self.ooo.advance(more as u32);
            advanced += more;
        }
        self.rcv_nxt = seq::add(self.rcv_nxt, advanced as u32);
        self.counters.bytes_received += advanced as u64;
        if advanced > 0 {
            self.events.insert(Events::READABLE);
        }
        if had_ooo {
            // Filling a hole: acknowledge at once (RFC 5681 §4.2), and
            // the segments after it too: the sender is repairing.
            self.ack_now = true;
            self.gap_filled |= advanced > 0;
            self.quick_acks = super::socket::QUICK_ACKS;
        } else if n > 0 && self.quick_acks > 0 {
            self.quick_acks -= 1;
            self.ack_now = true;
        } else if n > 0 {
            self.unacked_bytes = self.unacked_bytes.saturating_add(n as u32);
            let full = self.rcv_mss.saturating_mul(self.cfg.ack_every.max(1));
            match self.cfg.delayed_ack {
                Some(d) if self.unacked_bytes < full => {
                    self.timers.set_if_idle(Timer::DelayedAck, cx.now + d);
                }
                _ => self.ack_now = true,
            }
        }
    }

    /// Out of order: store in place, remember the range, ACK at once.
    fn receive_out_of_order(&mut self, s: TcpSeqNumber, offset: usize, data: &[u8]) {
        let start = offset as u32;
        let end = start.saturating_add(data.len() as u32);
        if self.ooo.iter().any(|(a, b)| a <= start && end <= b) {
            // All of it is queued already: a duplicate (RFC 2883 §4.2).
            self.dsack = Some((s, seq::add(s, data.len() as u32)));
        }
        // Below the end of what is queued: it fills a gap between
        // out-of-order blocks (a repair, or a segment the path held).
        let inside = self.ooo.iter().next_back().is_some_and(|(_, e)| start < e);
        let written = self.rx.write_unallocated(offset, data);
        self.gap_filled |= inside && written > 0;
        if written > 0 && self.ooo.insert(start, start + written as u32).is_ok() {
            self.note_sack_block(s);
        }
        self.counters.ooo_segments += 1;
        self.ack_now = true;
        self.quick_acks = super::socket::QUICK_ACKS;
    }

    /// Writes what it can of in-order `data` into the reader's ring
    /// ([`RxSink`](super::socket::RxSink)), straight from the frame; returns
    /// how many bytes went there. Only while the stack holds no bytes of
    /// its own (they come first) and none out of order (their offsets in
    /// `rx` count from `rcv_nxt` as if everything before went through it).
    fn sink_deliver(&mut self, cx: &mut Ctx<'_>, data: &[u8], had_ooo: bool) -> usize {
        if had_ooo || !self.rx.is_empty() || data.is_empty() {
            return 0;
        }
        let Some(k) = self.sink.as_mut().filter(|k| k.open) else {
            return 0;
        };
        let n = data.len().min(k.free());
        let Some(part) = data.get(..n).filter(|p| !p.is_empty()) else {
            return 0;
        };
        if (cx.deliver)(&k.ring, k.tail, part) {
            k.tail = k.tail.wrapping_add(n as u64);
            self.counters.bytes_sunk += n as u64;
            n
        } else {
            // The runtime cannot write there: keep every byte ourselves.
            self.sink = None;
            0
        }
    }

    fn accept_fin(&mut self, now: Instant) {
        self.rx_fin = None;
        self.rx_closed = true;
        self.rcv_nxt = seq::add(self.rcv_nxt, 1);
        self.ack_now = true;
        self.events.insert(Events::READABLE);
        match self.state {
            State::SynReceived | State::Established => self.set_state(State::CloseWait),
            State::FinWait1 => {
                if self.fin_acked() {
                    self.enter_time_wait(now);
                } else {
                    self.set_state(State::Closing);
                }
            }
            State::FinWait2 => self.enter_time_wait(now),
            _ => {}
        }
    }

    /// (Re)arms keepalive: the first probe is due `idle` after the last
    /// received segment. (The timer checks again when it fires, so it need not
    /// be moved on every segment.)
    /// Puts the out-of-order block holding `at` (just received) first in
    /// the recent list, dropping older entries that name the same block
    /// (it grew, or merged with them), so the list holds distinct blocks in
    /// the order they last changed (RFC 2018 §4: the first SACK block holds
    /// the newest segment, the next ones the blocks changed before it).
    fn note_sack_block(&mut self, at: TcpSeqNumber) {
        let (rcv_nxt, ooo) = (self.rcv_nxt, &self.ooo);
        let block = |x: TcpSeqNumber| {
            seq::ge(x, rcv_nxt)
                .then(|| seq::dist(x, rcv_nxt))
                .and_then(|off| ooo.iter().find(|&(s, e)| s <= off && off < e))
        };
        let mine = block(at);
        let mut next = [None; 4];
        next[0] = Some(at);
        let older = self
            .sack_recent
            .iter()
            .flatten()
            .filter(|&&x| block(x).is_some_and(|b| Some(b) != mine));
        for (slot, &x) in next.iter_mut().skip(1).zip(older) {
            *slot = Some(x);
        }
        self.sack_recent = next;
    }

    pub(crate) fn arm_keepalive(&mut self, _now: Instant) {
        match (self.cfg.keepalive, self.state) {
            (Some(ka), s) if s.is_synchronized() && s != State::TimeWait => {
                self.timers.set(Timer::Keepalive, self.last_rx + ka.idle);
            }
            _ => self.timers.clear(Timer::Keepalive),
        }
    }
}
