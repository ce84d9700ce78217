//! A TCP connection: its state, its buffers, and what the application asks of it.
//!
//! Segment arrival lives in [`input`](super::input), transmission in
//! [`output`](super::output), loss recovery and the RTO in
//! [`recovery`](super::recovery); this file holds the state they share, the
//! timer table, and the application-facing operations.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::time::Duration;

use softoe_wire::TcpSeqNumber;

use super::congestion::{Algorithm, CongestionControl, Controller};
use super::rangeset::RangeSet;
use super::recovery::Recovery;
use super::ring::RingBuffer;
use super::rtt::RttEstimator;
use super::send_queue::SendQueue;
use super::sent::Sent;
use super::seq;
use super::{Endpoint, RecvError, SendError, State, TcpError, TcpInfo};
use crate::config::TcpConfig;
use crate::device::{DeviceCaps, RxRing};
use crate::payload::PayloadRef;
use crate::socket::Events;
use crate::time::Instant;

/// IPv4 header plus TCP header without options.
pub(crate) const IP_TCP_HEADER: usize = 40;
/// The NOP NOP TIMESTAMP block on every segment once timestamps are on.
pub(crate) const TS_OPTION_LEN: usize = 12;
/// Largest IPv4 packet.
const MAX_IP_PACKET: usize = 65_535;

/// The timers of a connection, as a fixed table (no allocation per segment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Timer {
    /// Retransmission of data, SYN or FIN (RFC 6298).
    Retransmit = 0,
    /// Delayed ACK.
    DelayedAck = 1,
    /// Zero-window probe.
    Persist = 2,
    /// Keepalive probe.
    Keepalive = 3,
    /// End of TIME-WAIT.
    TimeWait = 4,
    /// An orphaned connection stuck in FIN-WAIT-2.
    FinWait2 = 5,
    /// Tail-loss probe (RFC 8985 §7).
    Tlp = 6,
    /// RACK reordering window (RFC 8985 §6.2): a hole below SACKed data
    /// that no further ACK will declare lost.
    Reorder = 7,
}

const TIMERS: usize = 8;

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Timers {
    deadline: [Option<Instant>; TIMERS],
}

impl Timers {
    pub(crate) fn set(&mut self, t: Timer, at: Instant) {
        if let Some(d) = self.deadline.get_mut(t as usize) {
            *d = Some(at);
        }
    }
    /// Sets `t` unless it is already running.
    pub(crate) fn set_if_idle(&mut self, t: Timer, at: Instant) {
        if self.get(t).is_none() {
            self.set(t, at);
        }
    }
    pub(crate) fn clear(&mut self, t: Timer) {
        if let Some(d) = self.deadline.get_mut(t as usize) {
            *d = None;
        }
    }
    pub(crate) fn get(&self, t: Timer) -> Option<Instant> {
        self.deadline.get(t as usize).copied().flatten()
    }
    pub(crate) fn expired(&self, t: Timer, now: Instant) -> bool {
        self.get(t).is_some_and(|d| d <= now)
    }
    pub(crate) fn next(&self) -> Option<Instant> {
        self.deadline.iter().flatten().min().copied()
    }
    pub(crate) fn clear_all(&mut self) {
        self.deadline = [None; TIMERS];
    }
}

/// Timestamp state (RFC 7323).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timestamps {
    /// TS.Recent: the peer's timestamp to echo.
    pub(crate) recent: u32,
    /// When `recent` was last updated (PAWS's 24-day rule).
    pub(crate) recent_at: Instant,
    /// Our clock's random offset for this connection.
    pub(crate) offset: u32,
}

/// Segments acknowledged at once after a loss sign (Linux's
/// `TCP_MAX_QUICKACKS`).
pub(crate) const QUICK_ACKS: u8 = 16;

/// Counters for [`TcpInfo`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counters {
    pub(crate) bytes_received: u64,
    pub(crate) bytes_sunk: u64,
    pub(crate) bytes_sent: u64,
    pub(crate) bytes_retrans: u64,
    pub(crate) segs_out: u64,
    pub(crate) segs_in: u64,
    pub(crate) retransmits: u64,
    pub(crate) rto_count: u32,
    pub(crate) fast_retransmits: u32,
    pub(crate) sack_recoveries: u32,
    pub(crate) ooo_segments: u64,
    pub(crate) dup_segments: u64,
    pub(crate) challenge_acks: u32,
    pub(crate) zero_window_probes: u32,
    pub(crate) keepalive_probes: u32,
    pub(crate) tlp_probes: u32,
    pub(crate) reorder_timeouts: u32,
    pub(crate) lost_retransmits: u32,
    pub(crate) tlp_recoveries: u32,
    pub(crate) dsacks: u32,
    pub(crate) spurious_retransmits: u32,
    pub(crate) undos: u32,
    pub(crate) reord_seen: u32,
}

/// Delivery-rate sampling: bytes acknowledged over roughly one round trip.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RateSample {
    pub(crate) start: Instant,
    pub(crate) acked_at_start: u64,
    pub(crate) rate: u64,
}

/// Derived segment sizes for this connection's path.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PathCaps {
    /// IP MTU of the path: the device's, or less where path-MTU discovery
    /// learnt so (`tcp::mtu`).
    pub(crate) mtu: usize,
    /// The device's IP MTU: the most the path can ever be.
    pub(crate) dev_mtu: usize,
    /// Largest IPv4 packet for a TSO super-segment (`None`: no TSO).
    pub(crate) tso_max: Option<usize>,
}

impl PathCaps {
    pub(crate) fn from_device(caps: &DeviceCaps) -> PathCaps {
        let mtu = caps.mtu.clamp(IP_TCP_HEADER + 8, MAX_IP_PACKET);
        PathCaps {
            mtu,
            dev_mtu: mtu,
            // TSO needs checksum offload: the port computes each segment's sum.
            tso_max: caps
                .tso_max
                .filter(|_| caps.tx_csum)
                .map(|m| m.min(MAX_IP_PACKET)),
        }
    }
}

/// The MSS (before options) a path of IP MTU `mtu` allows, within the
/// connection's `TCP_MAXSEG` clamp: what a SYN announces, and what data
/// segments are cut to.
pub(crate) fn mss_for_mtu(cfg: &TcpConfig, mtu: usize) -> u16 {
    let m = mtu.saturating_sub(IP_TCP_HEADER).min(usize::from(u16::MAX)) as u16;
    cfg.mss_clamp
        .map_or(m, |c| m.min(c))
        .max(cfg.min_mss.min(m))
}

/// A receive ring of the reader's ([`Stack::tcp_set_rx_sink`]): where it
/// stands, as the stack last heard.
///
/// [`Stack::tcp_set_rx_sink`]: crate::Stack::tcp_set_rx_sink
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RxSink {
    pub(crate) ring: RxRing,
    /// Free-running position of the next byte written.
    pub(crate) tail: u64,
    /// Free-running position of the next byte the reader reads (as last
    /// told; it only lags, so the free space is never overstated).
    pub(crate) head: u64,
    /// Whether bytes may go there now (the reader may close it for a while:
    /// a buffer of its own posted, whose bytes must not overtake it).
    pub(crate) open: bool,
}

impl RxSink {
    /// Bytes the ring can take now.
    pub(crate) fn free(&self) -> usize {
        let used = self.tail.wrapping_sub(self.head);
        usize::try_from(self.ring.len.saturating_sub(used)).unwrap_or(usize::MAX)
    }
}

/// The allocations of a closed connection, or of one in TIME-WAIT, for
/// the next one to reuse (`SocketSet` keeps a few): its receive ring, send
/// queue, out-of-order and SACK ranges and transmit log. Empty: a fresh
/// socket allocates its own.
#[derive(Debug, Default)]
pub(crate) struct Storage {
    rx: Box<[u8]>,
    chunks: VecDeque<PayloadRef>,
    ooo: Vec<(u32, u32)>,
    board: Vec<(u32, u32)>,
    sent: VecDeque<Sent>,
}

impl Storage {
    /// The size of its receive ring.
    pub(crate) fn rx_len(&self) -> usize {
        self.rx.len()
    }

    /// Bytes it holds (as `TcpSocket::storage_bytes`).
    pub(crate) fn bytes(&self) -> usize {
        self.rx.len()
            + self.chunks.capacity() * size_of::<PayloadRef>()
            + (self.ooo.capacity() + self.board.capacity()) * size_of::<(u32, u32)>()
            + self.sent.capacity() * size_of::<Sent>()
    }
}

/// A TCP connection.
#[derive(Debug)]
pub(crate) struct TcpSocket {
    pub(crate) state: State,
    pub(crate) local: Endpoint,
    pub(crate) remote: Endpoint,
    pub(crate) cfg: TcpConfig,
    pub(crate) path: PathCaps,

    // Send sequence space (RFC 9293 §3.3.1).
    pub(crate) iss: TcpSeqNumber,
    pub(crate) snd_una: TcpSeqNumber,
    /// Next sequence number to send; pulled back to `snd_una` after an RTO.
    pub(crate) snd_nxt: TcpSeqNumber,
    /// Highest sequence number sent, plus one.
    pub(crate) snd_max: TcpSeqNumber,
    /// Peer's window, in bytes (scaled).
    pub(crate) snd_wnd: u32,
    pub(crate) snd_wl1: TcpSeqNumber,
    pub(crate) snd_wl2: TcpSeqNumber,
    pub(crate) max_snd_wnd: u32,
    /// Shift the peer applies to the windows it sends.
    pub(crate) snd_wscale: u8,
    pub(crate) tx: SendQueue,
    /// Sequence number of the send queue's first byte.
    pub(crate) tx_seq0: TcpSeqNumber,
    /// The application finished sending: a FIN follows the queued data.
    pub(crate) fin_queued: bool,
    /// End of the last segment sent smaller than the MSS (Minshall's Nagle).
    pub(crate) snd_sml: TcpSeqNumber,

    // Receive sequence space.
    pub(crate) irs: TcpSeqNumber,
    pub(crate) rcv_nxt: TcpSeqNumber,
    /// Shift we apply to the windows we send.
    pub(crate) rcv_wscale: u8,
    pub(crate) rx: RingBuffer,
    /// The reader's own receive ring, if it set one: in-order bytes that
    /// find `rx` empty are written there, straight from the frame.
    pub(crate) sink: Option<RxSink>,
    /// Out-of-order data held past `rcv_nxt`, as offsets from it.
    pub(crate) ooo: RangeSet,
    /// Sequence number of a FIN that arrived ahead of missing data.
    pub(crate) rx_fin: Option<TcpSeqNumber>,
    /// The peer's FIN has been received in order.
    pub(crate) rx_closed: bool,
    /// The right edge of the window we last advertised (never moves left).
    pub(crate) rcv_adv_edge: TcpSeqNumber,
    /// `Some(n)`: in TIME-WAIT, it gave its storage back
    /// ([`shed_storage`](Self::shed_storage)); `n` is the size its receive
    /// ring had, from which the windows it still advertises are computed
    /// as from that ring, empty.
    pub(crate) shed: Option<usize>,
    /// Sequence numbers of the most recently received out-of-order
    /// segments, newest first: the first SACK block is the one holding the
    /// newest, the next ones repeat recently reported blocks (RFC 2018 §4),
    /// so a block whose ACK was lost is reported again.
    pub(crate) sack_recent: [Option<TcpSeqNumber>; 4],
    /// A segment that arrived twice, for the next ACK's first SACK block
    /// (D-SACK, RFC 2883): the sender learns its retransmission was not
    /// needed, undoes the window reduction and widens its reordering window.
    pub(crate) dsack: Option<(TcpSeqNumber, TcpSeqNumber)>,
    /// Turns with every ACK sent: which older SACK block takes the last
    /// slot (see `sack_blocks`).
    pub(crate) sack_rotor: u32,

    // Negotiated options.
    /// Payload bytes per segment we send.
    pub(crate) snd_mss: u32,
    /// The MSS the peer announced (536 before its SYN): with the path MTU,
    /// what `snd_mss` is made of.
    pub(crate) peer_mss: u32,
    /// Largest segment payload received (for delayed-ACK accounting).
    pub(crate) rcv_mss: u32,
    /// MSS we announce.
    pub(crate) adv_mss: u16,
    pub(crate) ts: Option<Timestamps>,
    pub(crate) sack_ok: bool,
    pub(crate) wscale_ok: bool,
    /// Our SYN offered these; the peer's SYN decides.
    pub(crate) offer_ts: bool,
    pub(crate) offer_sack: bool,
    pub(crate) offer_wscale: bool,

    // Reliability.
    pub(crate) rtt: RttEstimator,
    pub(crate) cc: Controller,
    /// The segment being timed for an RTT sample: its end and send time (Karn).
    pub(crate) rtt_timing: Option<(TcpSeqNumber, Instant)>,
    pub(crate) rec: Recovery,
    /// The SYN or SYN-ACK was retransmitted (RFC 6298 §5.7).
    pub(crate) syn_retransmitted: bool,
    /// Consecutive retransmission timeouts without progress.
    pub(crate) retries: u32,
    /// Last time the peer acknowledged new data, or data first went out.
    pub(crate) last_progress: Instant,
    /// Last time anything was sent (idle restart).
    pub(crate) last_send: Instant,

    // What to send next besides data.
    pub(crate) ack_now: bool,
    /// Bytes received since the last ACK we sent.
    pub(crate) unacked_bytes: u32,
    /// Data segments still to be acknowledged at once (Linux's quick-ACK
    /// mode): after a hole, a duplicate or a fill, so a
    /// sender in slow start (a window of one segment after a timeout) is
    /// not held by our delayed ACK.
    pub(crate) quick_acks: u8,
    /// The last segment taken filled all or part of a gap in the
    /// sequence space. Inside a receive batch its ACK goes at once, not at
    /// the batch's end (RFC 5681 §4.2): a sender in recovery learns of
    /// each repair from an ACK of its own, so one lost ACK does not leave
    /// it waiting for a timeout.
    pub(crate) gap_filled: bool,
    pub(crate) challenge_pending: bool,
    pub(crate) probe_pending: bool,
    /// The tail-loss probe timer fired: send one probe segment.
    pub(crate) tlp_pending: bool,
    /// The persist timer fired with a small window open: send what fits,
    /// even below one segment (RFC 9293 §3.8.6.2.1's override timeout).
    pub(crate) sws_override: bool,
    pub(crate) rst_pending: bool,
    pub(crate) window_update: bool,

    pub(crate) timers: Timers,
    pub(crate) last_rx: Instant,
    pub(crate) keepalive_sent: u32,
    pub(crate) persist_backoff: u32,

    pub(crate) error: Option<TcpError>,
    /// The last ICMP error about an open connection's segments: only
    /// recorded (see [`TcpInfo::soft_error`]).
    pub(crate) soft_error: Option<TcpError>,
    /// The connection gave up on its peer (retransmissions, probes,
    /// keepalives or the user timeout ran out), whatever error it reports.
    pub(crate) timed_out: bool,
    /// The application gave up its handle: free the socket when it closes.
    pub(crate) orphan: bool,
    /// Nobody will ever use the handle for the program again, though its
    /// holder still feeds what the program queued ([`Stack::tcp_orphan`]):
    /// the orphan limits apply, the handle stays valid.
    ///
    /// [`Stack::tcp_orphan`]: crate::Stack::tcp_orphan
    pub(crate) owner_gone: bool,
    /// The application will read no more: arriving data resets the connection.
    pub(crate) rx_shutdown: bool,
    /// The listener this connection came from, until it is accepted.
    pub(crate) parent: Option<usize>,
    /// An embryo in its listener's SYN queue that has sent only its first
    /// SYN-ACK (the listener counts these: `TcpListener::young`).
    pub(crate) embryo_young: bool,
    /// SYN-ACK retransmissions this embryo gets: its listener's
    /// [`TcpConfig::synack_retries`], fewer when the SYN queue is crowded
    /// (`TcpListener::synack_limit`, set before each of its timeouts).
    pub(crate) synack_limit: u32,
    /// Whether it sits in the parent's accept queue.
    pub(crate) queued_for_accept: bool,
    pub(crate) events: Events,
    pub(crate) counters: Counters,
    /// `counters.retransmits` already added to the stack's total.
    pub(crate) retrans_counted: u64,
    pub(crate) rate: RateSample,
}

/// The MSS a connection with `cfg` on `path` announces: the MTU less the
/// headers, clamped by `TCP_MAXSEG`.
pub(crate) fn adv_mss_for(cfg: &TcpConfig, path: &PathCaps) -> u16 {
    mss_for_mtu(cfg, path.mtu)
}

/// The window scale a connection with `cfg` announces: the smallest that
/// lets its window cover the receive buffer.
pub(crate) fn rcv_wscale_for(cfg: &TcpConfig) -> u8 {
    let mut s = 0u8;
    while s < 14 && (65_535usize << s) < cfg.rx_buffer {
        s += 1;
    }
    s
}

/// The (unscaled) window a SYN or SYN-ACK with `cfg` announces: a fresh
/// receive buffer, as far as 16 bits say.
pub(crate) fn syn_window_for(cfg: &TcpConfig) -> u16 {
    cfg.rx_buffer.min(65_535) as u16
}

impl TcpSocket {
    /// Gives up the socket's allocations (it is closed and about to be
    /// reused: see [`Storage`]).
    pub(crate) fn take_storage(&mut self) -> Storage {
        Storage {
            rx: self.rx.take_storage(),
            chunks: self.tx.take_storage(),
            ooo: self.ooo.take_storage(),
            board: self.rec.scoreboard.take_storage(),
            sent: self.rec.sent.take_storage(),
        }
    }

    /// The size of its receive buffer: its ring's, or the one its ring had
    /// before TIME-WAIT gave it back.
    pub(crate) fn rx_size(&self) -> usize {
        self.shed.unwrap_or_else(|| self.rx.capacity())
    }

    /// Gives its storage up for TIME-WAIT, which needs none of it
    /// (Linux's `inet_timewait_sock` keeps the four-tuple, the sequence
    /// numbers, the window, TS.Recent and a timer; here the control block
    /// stays, a kilobyte and a half, and the receive ring, send queue,
    /// ranges and transmit log go: 4 MiB and more per connection with
    /// the engine's receive buffer, held for the minute TIME-WAIT lasts).
    /// Nothing reads them any more: our FIN is acknowledged, so the send
    /// queue and the transmit log are empty and stay so (no send is taken,
    /// no data sent); the peer's FIN came in order, so nothing is out of
    /// order and no segment's text is taken again; and the scoreboard
    /// takes SACK blocks only while data is in flight. The windows it
    /// advertises are still computed from the ring's size ([`rx_size`]),
    /// so every answer it sends is the one it sent with the ring.
    ///
    /// Not while bytes the program has not read are in the ring: they are
    /// still its own (it may read them after TIME-WAIT began); the
    /// storage goes once they are read (`Stack::tcp_recv`), or with the
    /// socket.
    ///
    /// [`rx_size`]: Self::rx_size
    pub(crate) fn shed_storage(&mut self) -> Option<Storage> {
        let idle = self.rx.is_empty() && self.ooo.is_empty() && self.tx.len() == 0;
        if self.state != State::TimeWait || self.shed.is_some() || !idle {
            return None;
        }
        self.shed = Some(self.rx.capacity());
        Some(self.take_storage())
    }

    /// Bytes of storage it holds: its receive ring, send queue,
    /// out-of-order and SACK ranges and transmit log (what
    /// [`Stack::tcp_memory`](crate::Stack::tcp_memory) adds up).
    pub(crate) fn storage_bytes(&self) -> usize {
        self.rx.capacity()
            + self.tx.heap_bytes()
            + self.ooo.heap_bytes()
            + self.rec.scoreboard.heap_bytes()
            + self.rec.sent.heap_bytes()
    }

    /// A closed socket with its buffers allocated, in `st`'s where it has
    /// them (a closed connection's; a receive ring of another size is not
    /// reused).
    pub(crate) fn new(cfg: TcpConfig, path: PathCaps, now: Instant, st: Storage) -> TcpSocket {
        let rx = if st.rx.len() == cfg.rx_buffer {
            RingBuffer::with_storage(st.rx)
        } else {
            RingBuffer::new(cfg.rx_buffer)
        };
        let adv_mss = mss_for_mtu(&cfg, path.mtu);
        let rcv_wscale = if cfg.window_scaling {
            rcv_wscale_for(&cfg)
        } else {
            0
        };
        let snd_mss = u32::from(adv_mss).clamp(1, 536);
        TcpSocket {
            state: State::Closed,
            local: Endpoint::default(),
            remote: Endpoint::default(),
            cfg,
            path,
            iss: TcpSeqNumber(0),
            snd_una: TcpSeqNumber(0),
            snd_nxt: TcpSeqNumber(0),
            snd_max: TcpSeqNumber(0),
            snd_wnd: 0,
            snd_wl1: TcpSeqNumber(0),
            snd_wl2: TcpSeqNumber(0),
            max_snd_wnd: 0,
            snd_wscale: 0,
            tx: SendQueue::with_storage(cfg.tx_buffer, cfg.tx_max_chunks, st.chunks),
            tx_seq0: TcpSeqNumber(0),
            fin_queued: false,
            snd_sml: TcpSeqNumber(0),
            irs: TcpSeqNumber(0),
            rcv_nxt: TcpSeqNumber(0),
            rcv_wscale,
            rx,
            sink: None,
            ooo: RangeSet::with_storage(cfg.max_ooo_ranges.max(1), st.ooo),
            rx_fin: None,
            rx_closed: false,
            rcv_adv_edge: TcpSeqNumber(0),
            shed: None,
            sack_recent: [None; 4],
            dsack: None,
            sack_rotor: 0,
            snd_mss,
            peer_mss: 536,
            rcv_mss: snd_mss,
            adv_mss,
            ts: None,
            sack_ok: false,
            wscale_ok: false,
            offer_ts: cfg.timestamps,
            offer_sack: cfg.sack,
            offer_wscale: cfg.window_scaling,
            rtt: RttEstimator::new(cfg.initial_rto, cfg.min_rto, cfg.max_rto),
            cc: Controller::new(cfg.congestion, snd_mss),
            rtt_timing: None,
            rec: Recovery::with_storage(
                cfg.max_ooo_ranges.max(1),
                // Room to cut every segment of a full send buffer in two.
                (cfg.tx_buffer / usize::from(adv_mss.max(64))).saturating_mul(2) + 64,
                st.board,
                st.sent,
            ),
            syn_retransmitted: false,
            retries: 0,
            last_progress: now,
            last_send: now,
            ack_now: false,
            unacked_bytes: 0,
            quick_acks: 0,
            gap_filled: false,
            challenge_pending: false,
            probe_pending: false,
            tlp_pending: false,
            sws_override: false,
            rst_pending: false,
            window_update: false,
            timers: Timers::default(),
            last_rx: now,
            keepalive_sent: 0,
            persist_backoff: 0,
            error: None,
            soft_error: None,
            timed_out: false,
            orphan: false,
            owner_gone: false,
            rx_shutdown: false,
            parent: None,
            embryo_young: false,
            synack_limit: cfg.synack_retries,
            queued_for_accept: false,
            events: Events::empty(),
            counters: Counters::default(),
            retrans_counted: 0,
            rate: RateSample::default(),
        }
    }

    // ---- sequence-space helpers -------------------------------------------------

    /// Sequence number of our FIN (valid once `fin_queued`).
    pub(crate) fn fin_seq(&self) -> TcpSeqNumber {
        seq::add(self.tx_seq0, self.tx.len() as u32)
    }

    /// Whether our FIN has been sent at least once.
    pub(crate) fn fin_sent(&self) -> bool {
        self.fin_queued && seq::gt(self.snd_max, self.fin_seq())
    }

    /// Whether our FIN has been acknowledged.
    pub(crate) fn fin_acked(&self) -> bool {
        self.fin_queued && seq::gt(self.snd_una, self.fin_seq())
    }

    /// Bytes of sequence space sent and not acknowledged.
    pub(crate) fn flight(&self) -> u32 {
        seq::dist(self.snd_max, self.snd_una)
    }

    /// Bytes we may still receive: free space in the receive buffer, capped
    /// by what the window field can say. A reader's ring does not change
    /// it: the ring takes what it can, straight, and the buffer the rest
    /// (see [`Stack::tcp_set_rx_sink`](crate::Stack::tcp_set_rx_sink) for
    /// why the ring's free space does not cap the window).
    pub(crate) fn rx_free(&self) -> u32 {
        let max = 65_535u32 << self.rcv_wscale;
        let free = self.rx_size().saturating_sub(self.rx.len());
        (free.min(u32::MAX as usize) as u32).min(max)
    }

    /// The reader's ring ([`RxSink`]) brought up to date: read up to
    /// `head` (clamped into what was written), `wrote` bytes written at the
    /// tail by the runtime, open or closed to the stack. Returns the tail,
    /// or `None` without a ring.
    pub(crate) fn sink_sync(&mut self, head: u64, wrote: u64, open: bool) -> Option<u64> {
        let k = self.sink.as_mut()?;
        k.tail = k.tail.wrapping_add(wrote);
        let ahead = head.wrapping_sub(k.head);
        if ahead <= k.tail.wrapping_sub(k.head) {
            k.head = head;
        }
        k.open = open;
        Some(k.tail)
    }

    /// Our timestamp clock: milliseconds, offset per connection.
    pub(crate) fn ts_now(&self, now: Instant) -> u32 {
        let off = self.ts.map_or(0, |t| t.offset);
        (now.total_millis() as u32).wrapping_add(off)
    }

    /// Bytes of options every non-SYN segment carries.
    pub(crate) fn option_overhead(&self) -> usize {
        if self.ts.is_some() { TS_OPTION_LEN } else { 0 }
    }

    /// Bytes of SACK option the next segment carries (NOP NOP SACK(2 + 8n)).
    pub(crate) fn sack_overhead(&self) -> u32 {
        if !self.sack_ok || (self.ooo.is_empty() && self.dsack.is_none()) {
            return 0;
        }
        let max = if self.ts.is_some() { 3 } else { 4 };
        let blocks = self.ooo.len() + usize::from(self.dsack.is_some());
        4 + 8 * blocks.min(max) as u32
    }

    /// Inside a receive batch, whether the ACK owed must go before `seg` is
    /// taken: out-of-order data is queued and `seg` starts beyond all of
    /// it — a new hole, so data was lost. As a GRO receiver does (GRO merges
    /// only a contiguous run, and Linux ACKs each run at once while it holds
    /// out-of-order data), every new SACK block is reported before the next
    /// one appears, instead of only the newest three per batch; a sender
    /// that misses SACK blocks resends data that arrived.
    ///
    /// A segment that fills a gap (a repair, or one the path reordered)
    /// sends nothing ahead of itself: the ACK owed would report the
    /// segments after the gap without it, and a sender in recovery, whose
    /// RACK reordering window is zero until it has seen reordering, resends
    /// what arrives a few microseconds later. Its ACK goes right after it
    /// (`gap_filled`), reporting the gap closed or smaller.
    pub(crate) fn ack_before(&self, seg: &softoe_wire::TcpRepr<'_>) -> bool {
        self.sack_ok
            && self.ack_now
            && !seg.payload.is_empty()
            && self
                .ooo
                .iter()
                .next_back()
                .is_some_and(|(_, end)| seq::lt(seq::add(self.rcv_nxt, end), seg.seq_number))
    }

    /// Payload bytes per segment right now: the MSS less any SACK blocks the
    /// segment must carry (so data segments never exceed the MTU).
    pub(crate) fn seg_mss(&self) -> u32 {
        self.snd_mss.saturating_sub(self.sack_overhead()).max(1)
    }

    /// The largest payload one frame may carry: one segment, or a TSO
    /// super-segment of whole segments.
    pub(crate) fn max_frame_payload(&self) -> u32 {
        let mss = self.seg_mss();
        match self.path.tso_max {
            Some(max) => {
                let hdr = IP_TCP_HEADER + self.option_overhead() + self.sack_overhead() as usize;
                let room = max.saturating_sub(hdr) as u32;
                (room / mss * mss).max(mss)
            }
            None => mss,
        }
    }

    /// Effective congestion window, NewReno inflation included.
    pub(crate) fn cwnd(&self) -> u32 {
        self.cc.cwnd().saturating_add(self.rec.inflation)
    }

    pub(crate) fn set_state(&mut self, state: State) {
        if self.state == state {
            return;
        }
        self.state = state;
        match state {
            State::Established => self.events.insert(Events::WRITABLE | Events::CONNECTED),
            State::Closed => {
                self.events
                    .insert(Events::CLOSED | Events::READABLE | Events::WRITABLE);
                self.timers.clear_all();
                // Nothing more goes out but a pending RST.
                self.ack_now = false;
                self.challenge_pending = false;
                self.probe_pending = false;
                self.tlp_pending = false;
                self.window_update = false;
                self.sws_override = false;
            }
            _ => {}
        }
    }

    /// Ends the connection with `err`.
    pub(crate) fn fail(&mut self, err: TcpError) {
        if self.error.is_none() {
            self.error = Some(err);
        }
        self.tx.clear();
        self.set_state(State::Closed);
    }

    // ---- application operations --------------------------------------------------

    /// Queues payload for sending; returns the bytes taken (maybe fewer, maybe 0
    /// when the send buffer is full).
    pub(crate) fn send(&mut self, data: PayloadRef) -> Result<usize, SendError> {
        if let Some(e) = self.error {
            return Err(SendError::Failed(e));
        }
        match self.state {
            State::SynSent | State::SynReceived | State::Established | State::CloseWait
                if !self.fin_queued =>
            {
                Ok(self.tx.push(data))
            }
            _ => Err(SendError::InvalidState),
        }
    }

    /// Bytes that can be queued right now.
    pub(crate) fn send_space(&self) -> usize {
        match self.state {
            State::SynSent | State::SynReceived | State::Established | State::CloseWait
                if !self.fin_queued && self.error.is_none() =>
            {
                self.tx.space()
            }
            _ => 0,
        }
    }

    /// Copies received bytes into `out`.
    pub(crate) fn recv(&mut self, out: &mut [u8]) -> Result<usize, RecvError> {
        self.check_recv()?;
        let n = self.rx.dequeue_slice(out);
        self.after_read(n);
        Ok(n)
    }

    /// Hands the readable bytes (at most two slices) to `f`, which returns how
    /// many it consumed.
    pub(crate) fn recv_with<R>(
        &mut self,
        f: impl FnOnce(&[u8], &[u8]) -> (usize, R),
    ) -> Result<R, RecvError> {
        self.check_recv()?;
        let (a, b) = self.rx.peek();
        let (n, r) = f(a, b);
        let n = self.rx.consume(n);
        self.after_read(n);
        Ok(r)
    }

    /// Copies up to `out.len()` readable bytes without consuming them.
    pub(crate) fn peek(&self, out: &mut [u8]) -> Result<usize, RecvError> {
        self.check_recv()?;
        Ok(self.rx.peek_at(0, out))
    }

    fn check_recv(&self) -> Result<(), RecvError> {
        if !self.rx.is_empty() {
            return Ok(());
        }
        if let Some(e) = self.error {
            return Err(RecvError::Failed(e));
        }
        if self.rx_closed {
            return Err(RecvError::Finished);
        }
        match self.state {
            State::Closed | State::Listen => Err(RecvError::InvalidState),
            _ => Ok(()),
        }
    }

    /// After the application read `n` bytes: maybe open the window (Linux's
    /// rule: when the advertised window is at most half the buffer and would
    /// at least double).
    fn after_read(&mut self, n: usize) {
        if self.rx.is_empty() && self.ooo.is_empty() {
            // Nothing readable and nothing stored past it: start the
            // storage over (see `RingBuffer::rewind`).
            self.rx.rewind();
        }
        if n == 0 || !self.state.is_synchronized() || self.rx_closed {
            return;
        }
        let cur = seq::dist(self.rcv_adv_edge, self.rcv_nxt);
        let free = self.rx_free();
        let cap = self.rx_size().min(u32::MAX as usize) as u32;
        if cur <= cap / 2 && free >= cur.saturating_mul(2) && free >= self.rcv_mss.min(cap / 2) {
            self.window_update = true;
        }
    }

    /// Closes the sending half: a FIN follows the queued data. Before the
    /// handshake completes, the FIN waits for it.
    pub(crate) fn shutdown_send(&mut self) {
        match self.state {
            State::SynSent | State::SynReceived => self.fin_queued = true,
            State::Established => {
                self.fin_queued = true;
                self.set_state(State::FinWait1);
            }
            State::CloseWait => {
                self.fin_queued = true;
                self.set_state(State::LastAck);
            }
            _ => {}
        }
    }

    /// Full close by the application: shut down both halves. Unread data, or
    /// data arriving later, resets the connection (RFC 9293 §3.10.4, as Linux).
    /// A connection still in SYN-SENT is simply forgotten.
    pub(crate) fn close(&mut self) {
        self.rx_shutdown = true;
        if self.state == State::SynSent {
            self.set_state(State::Closed);
            return;
        }
        if !self.rx.is_empty() && self.state.is_synchronized() {
            self.abort();
            return;
        }
        self.shutdown_send();
    }

    /// Aborts: a RST goes out if the peer knows of us, everything is dropped.
    pub(crate) fn abort(&mut self) {
        self.reset(TcpError::Aborted);
    }

    /// Ends the connection with `err` and, where the peer still holds it
    /// open, a RST to tell it.
    pub(crate) fn reset(&mut self, err: TcpError) {
        if matches!(
            self.state,
            State::SynReceived
                | State::Established
                | State::FinWait1
                | State::FinWait2
                | State::CloseWait
        ) {
            self.rst_pending = true;
        }
        self.fail(err);
    }

    /// Whether no program holds the connection any more: closed, or its
    /// owner gone while its queued sends drain. Such a connection gets
    /// [`TcpConfig::orphan_retries`] probes and retransmissions, not more.
    ///
    /// [`TcpConfig::orphan_retries`]: crate::TcpConfig::orphan_retries
    pub(crate) fn orphaned(&self) -> bool {
        self.orphan || self.owner_gone
    }

    /// Readiness for the application.
    pub(crate) fn readiness(&self) -> Events {
        let mut e = Events::empty();
        if !self.rx.is_empty() || self.rx_closed || self.error.is_some() {
            e.insert(Events::READABLE);
        }
        if self.send_space() > 0 || self.error.is_some() {
            e.insert(Events::WRITABLE);
        }
        if self.state == State::Closed {
            e.insert(Events::CLOSED);
        }
        e
    }

    /// When the stack must next call this socket.
    pub(crate) fn poll_at(&self) -> Option<Instant> {
        if self.has_immediate_work() {
            return Some(Instant::ZERO);
        }
        self.timers.next()
    }

    /// Something is ready to go without waiting for a timer.
    pub(crate) fn has_immediate_work(&self) -> bool {
        if self.state == State::Closed {
            return self.rst_pending;
        }
        self.ack_now
            || self.challenge_pending
            || self.probe_pending
            || self.tlp_pending
            || self.rst_pending
            || self.window_update
    }

    /// The `ss -ti` snapshot.
    /// `TCP_CONGESTION`: from now on, `algorithm` sizes the window.
    pub(crate) fn set_congestion(&mut self, algorithm: Algorithm) {
        self.cfg.congestion = algorithm;
        let sent_any = self.counters.bytes_sent > 0;
        self.cc.switch_to(algorithm, self.snd_mss, sent_any);
    }

    pub(crate) fn info(&self) -> TcpInfo {
        TcpInfo {
            state: self.state,
            local: self.local,
            remote: self.remote,
            snd_mss: self.snd_mss,
            rcv_mss: self.rcv_mss,
            cwnd: self.cwnd(),
            ssthresh: self.cc.ssthresh(),
            srtt: self.rtt.srtt(),
            rttvar: self.rtt.rttvar(),
            min_rtt: self.rtt.min_rtt(),
            rto: self.rtt.rto(),
            backoff: self.rtt.backoff_count(),
            wscale: self.wscale_ok.then_some((self.rcv_wscale, self.snd_wscale)),
            timestamps: self.ts.is_some(),
            sack: self.sack_ok,
            snd_wnd: self.snd_wnd,
            rcv_wnd: seq::dist(self.rcv_adv_edge, self.rcv_nxt),
            bytes_in_flight: self.flight(),
            pipe: if self.sack_ok {
                self.rec.pipe()
            } else {
                self.flight()
            },
            sacked: self.rec.scoreboard.covered_bytes(),
            bytes_acked: self.tx.acked_total(),
            bytes_received: self.counters.bytes_received,
            bytes_sunk: self.counters.bytes_sunk,
            bytes_sent: self.counters.bytes_sent,
            bytes_retrans: self.counters.bytes_retrans,
            segs_out: self.counters.segs_out,
            segs_in: self.counters.segs_in,
            retransmits: self.counters.retransmits,
            rto_count: self.counters.rto_count,
            fast_retransmits: self.counters.fast_retransmits,
            sack_recoveries: self.counters.sack_recoveries,
            ooo_segments: self.counters.ooo_segments,
            dup_segments: self.counters.dup_segments,
            challenge_acks: self.counters.challenge_acks,
            zero_window_probes: self.counters.zero_window_probes,
            keepalive_probes: self.counters.keepalive_probes,
            tlp_probes: self.counters.tlp_probes,
            reorder_timeouts: self.counters.reorder_timeouts,
            lost_retransmits: self.counters.lost_retransmits,
            tlp_recoveries: self.counters.tlp_recoveries,
            dsacks: self.counters.dsacks,
            spurious_retransmits: self.counters.spurious_retransmits,
            undos: self.counters.undos,
            reord_seen: self.counters.reord_seen,
            reordering: self.rec.rack.reordering,
            reo_wnd: self.reo_wnd(),
            send_queue: self.tx.len().min(u32::MAX as usize) as u32,
            recv_queue: self.rx.len().min(u32::MAX as usize) as u32,
            delivery_rate: self.rate.rate,
            error: self.error,
            soft_error: self.soft_error,
            congestion: self.cc.algorithm(),
            tos: self.cfg.tos,
            ttl: self.ip_fields().effective_ttl(),
            pmtu: self.path.mtu.min(u32::MAX as usize) as u32,
        }
    }

    /// Updates the delivery-rate sample after an ACK.
    pub(crate) fn sample_rate(&mut self, now: Instant) {
        let srtt = self.rtt.srtt().max(Duration::from_micros(10));
        let elapsed = now.saturating_duration_since(self.rate.start);
        if elapsed >= srtt {
            let acked = self
                .tx
                .acked_total()
                .saturating_sub(self.rate.acked_at_start);
            let nanos = elapsed.as_nanos().max(1);
            self.rate.rate =
                (u128::from(acked) * 1_000_000_000 / nanos).min(u128::from(u64::MAX)) as u64;
            self.rate.start = now;
            self.rate.acked_at_start = self.tx.acked_total();
        }
    }
}
