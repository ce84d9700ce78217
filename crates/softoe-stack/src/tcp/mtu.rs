//! The path MTU under a connection changes (RFC 1191 §6.4, RFC 5927).
//!
//! The stack's path-MTU cache (`crate::pmtu`) tells every connection to a
//! destination when a believable fragmentation-needed message lowers its
//! path MTU, and again when the learnt value expires and the device's MTU
//! is tried once more. The connection re-derives its MSS from the peer's
//! announced MSS and the new path (TSO super-segments are cut at the new
//! size too: `seg_mss` feeds `max_frame_payload` and each frame's
//! `gso_size`).
//!
//! On a decrease, what is in flight in segments now too large was dropped
//! by the router that complained, so it goes again at once, at the new
//! size, as Linux's `tcp_simple_retransmit` does: every entry of the
//! transmit log longer than the new MSS is marked lost, and a recovery
//! phase paced by the congestion window (the one an RTO uses, without the
//! RTO's collapse of the window) repairs them. It is not congestion: the
//! window and the slow-start threshold stay as they were (Linux keeps its
//! window in packets too; here it is kept in bytes, so the same bytes are
//! allowed in flight in smaller segments). Without SACK the connection
//! goes back to `snd_una` and resends the window at the new size.

use super::State;
use super::congestion::CongestionControl;
use super::recovery::Phase;
use super::socket::{IP_TCP_HEADER, TcpSocket, mss_for_mtu};

impl TcpSocket {
    /// The path's IP MTU is now `mtu` (clamped to what a TCP segment and
    /// the device allow). Returns whether the connection has segments to
    /// send again now (the caller marks it ready).
    pub(crate) fn set_path_mtu(&mut self, mtu: usize) -> bool {
        let mtu = mtu.clamp(IP_TCP_HEADER + 8, self.path.dev_mtu.max(IP_TCP_HEADER + 8));
        if mtu == self.path.mtu {
            return false;
        }
        let lower = mtu < self.path.mtu;
        self.path.mtu = mtu;
        // Before the peer's SYN the MSS is not known yet: the handshake
        // takes the new path into account when it comes (`negotiate`).
        if matches!(self.state, State::Closed | State::Listen | State::SynSent) {
            return false;
        }
        let opts = self.option_overhead() as u32;
        let mss = self
            .peer_mss
            .min(u32::from(mss_for_mtu(&self.cfg, mtu)))
            .saturating_sub(opts)
            .max(1);
        let old = self.snd_mss;
        if mss == old {
            return false;
        }
        self.snd_mss = mss;
        self.cc.set_mss(mss);
        self.rec.set_mss(mss);
        if !lower || mss > old {
            return false;
        }
        let marked = self.rec.sent.mark_lost_longer_than(mss);
        if marked == 0 {
            return false;
        }
        // Karn: what is timed may be one of them.
        self.rtt_timing = None;
        if self.sack_ok {
            if self.rec.phase.is_none() {
                // Repairs paced by the window, which stays as it is.
                self.rec.phase = Some(Phase {
                    point: self.snd_max,
                    sack: true,
                    rto: true,
                });
                self.rec.rtx_first = false;
            }
        } else {
            self.rec.phase = None;
            self.rec.inflation = 0;
            self.rec.rtx_first = false;
            self.snd_nxt = self.snd_una;
        }
        true
    }
}
