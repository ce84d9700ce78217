//! TCP after RFC 9293, split by concern.
//!
//! - `socket`: the connection's state and its application-facing operations.
//! - `input`: segment arrival (RFC 9293 §3.10.7), with RFC 5961 and PAWS.
//! - `output`: what to send next: handshake, data within the congestion
//!   and receive windows (Nagle, SWS avoidance, TSO super-segments), ACKs,
//!   window updates, probes.
//! - `recovery`: loss recovery — RFC 6675 SACK-based when the peer
//!   supports SACK, NewReno (RFC 6582) otherwise — and the RTO (RFC 6298).
//! - `mtu`: the path MTU under a connection changes (RFC 1191): the MSS
//!   follows, and what is in flight and now too large goes again at once.
//! - `listener`: passive open with a bounded SYN queue and accept queue.
//! - `listener`: passive open with a bounded SYN queue and accept queue;
//!   `syncookie`: SYN cookies (RFC 4987) for when the SYN queue is full.
//! - `icmp`: what an ICMP error about our segments does to a connection
//!   (RFC 1122 §4.2.3.9, RFC 5927, as Linux).
//! - [`congestion`]: congestion control behind a trait (NewReno, CUBIC).
//! - `send_queue`, `ring`, `rangeset`, `rtt`: the fixed-size data
//!   structures underneath.

pub mod congestion;
pub(crate) mod icmp;
pub(crate) mod input;
pub(crate) mod listener;
pub(crate) mod mtu;
pub(crate) mod output;
pub(crate) mod rangeset;
pub(crate) mod recovery;
pub(crate) mod ring;
pub(crate) mod rtt;
pub(crate) mod send_queue;
pub(crate) mod sent;
pub(crate) mod seq;
pub(crate) mod socket;
pub(crate) mod syncookie;

use core::fmt;
use core::time::Duration;

use softoe_wire::Ipv4Address;

/// One end of a connection.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Endpoint {
    /// IPv4 address.
    pub addr: Ipv4Address,
    /// Port.
    pub port: u16,
}

impl Endpoint {
    /// The endpoint `addr:port`.
    pub const fn new(addr: Ipv4Address, port: u16) -> Endpoint {
        Endpoint { addr, port }
    }
}

impl From<core::net::SocketAddrV4> for Endpoint {
    fn from(a: core::net::SocketAddrV4) -> Endpoint {
        Endpoint::new(Ipv4Address(a.ip().octets()), a.port())
    }
}

impl From<Endpoint> for core::net::SocketAddrV4 {
    fn from(e: Endpoint) -> core::net::SocketAddrV4 {
        core::net::SocketAddrV4::new(e.addr.0.into(), e.port)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.addr, self.port)
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The states of RFC 9293 §3.3.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// No connection.
    Closed,
    /// Waiting for connection requests.
    Listen,
    /// SYN sent, waiting for SYN-ACK.
    SynSent,
    /// SYN received and SYN-ACK sent, waiting for the ACK.
    SynReceived,
    /// Open: data flows both ways.
    Established,
    /// We closed; our FIN is not yet acknowledged.
    FinWait1,
    /// Our FIN is acknowledged; waiting for the peer's.
    FinWait2,
    /// The peer closed; we may still send.
    CloseWait,
    /// Both closed at once; waiting for the ACK of our FIN.
    Closing,
    /// The peer closed, then we did; waiting for the ACK of our FIN.
    LastAck,
    /// Both closed; lingering to absorb stray segments.
    TimeWait,
}

impl State {
    /// Whether the handshake has completed (RFC 9293's synchronized states).
    pub fn is_synchronized(self) -> bool {
        !matches!(
            self,
            State::Closed | State::Listen | State::SynSent | State::SynReceived
        )
    }

    /// The name `ss` prints for the state.
    pub fn name(self) -> &'static str {
        match self {
            State::Closed => "CLOSED",
            State::Listen => "LISTEN",
            State::SynSent => "SYN-SENT",
            State::SynReceived => "SYN-RECV",
            State::Established => "ESTAB",
            State::FinWait1 => "FIN-WAIT-1",
            State::FinWait2 => "FIN-WAIT-2",
            State::CloseWait => "CLOSE-WAIT",
            State::Closing => "CLOSING",
            State::LastAck => "LAST-ACK",
            State::TimeWait => "TIME-WAIT",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a connection ended abnormally.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TcpError {
    /// The peer answered our SYN with a reset (`ECONNREFUSED`).
    Refused,
    /// The peer reset the connection (`ECONNRESET`).
    Reset,
    /// Retransmissions, keepalives or the user timeout ran out (`ETIMEDOUT`).
    TimedOut,
    /// The application aborted the connection.
    Aborted,
    /// An ICMP error said the network is unreachable (`ENETUNREACH`): a
    /// connection attempt ends at once; an open connection reports it
    /// only if it then times out (RFC 1122 §4.2.3.9, as Linux).
    NetUnreachable,
    /// An ICMP error said the host is unreachable, or communication with
    /// it is prohibited (`EHOSTUNREACH`); as [`NetUnreachable`](Self::NetUnreachable).
    HostUnreachable,
    /// An ICMP error said the peer does not speak TCP (protocol
    /// unreachable: `ENOPROTOOPT`, as Linux maps it).
    ProtocolUnreachable,
}

impl fmt::Display for TcpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TcpError::Refused => "connection refused",
            TcpError::Reset => "connection reset by peer",
            TcpError::TimedOut => "connection timed out",
            TcpError::Aborted => "connection aborted",
            TcpError::NetUnreachable => "network is unreachable",
            TcpError::HostUnreachable => "no route to host",
            TcpError::ProtocolUnreachable => "protocol not available",
        })
    }
}

impl core::error::Error for TcpError {}

/// A snapshot of one listener, the fields `ss -lt` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListenerInfo {
    /// Local endpoint (the address may be unspecified: any of ours).
    pub local: Endpoint,
    /// It set `SO_REUSEPORT`: a member of a group that shares its address
    /// ([`Stack::tcp_listen_reuseport`](crate::Stack::tcp_listen_reuseport)).
    pub reuseport: bool,
    /// Established connections waiting for `accept`.
    pub queued: usize,
    /// Connections still in SYN-RECEIVED.
    pub syn_received: usize,
    /// Most connections that may wait for `accept`: the backlog asked
    /// for, at most [`StackConfig::somaxconn`](crate::StackConfig::somaxconn)
    /// (`ss`'s Send-Q; as on Linux, one more than this may wait).
    pub backlog: usize,
    /// Most handshakes its SYN queue holds before SYNs get cookies.
    pub syn_backlog: usize,
    /// SYNs dropped: the SYN queue full without cookies, or the accept
    /// queue full.
    pub syn_drops: u64,
    /// SYN cookies it sent.
    pub cookies_sent: u64,
}

/// A snapshot of one connection, the fields `ss -ti` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TcpInfo {
    /// Connection state.
    pub state: State,
    /// Local endpoint.
    pub local: Endpoint,
    /// Remote endpoint.
    pub remote: Endpoint,
    /// Payload bytes per segment we send.
    pub snd_mss: u32,
    /// Largest segment payload seen from the peer.
    pub rcv_mss: u32,
    /// Congestion window, bytes.
    pub cwnd: u32,
    /// Slow-start threshold, bytes (`u32::MAX` until the first loss).
    pub ssthresh: u32,
    /// Smoothed RTT.
    pub srtt: Duration,
    /// RTT variation.
    pub rttvar: Duration,
    /// Minimum RTT seen.
    pub min_rtt: Duration,
    /// Current retransmission timeout, backoff included.
    pub rto: Duration,
    /// Consecutive RTO backoffs in force.
    pub backoff: u32,
    /// Our window-scale shift and the peer's (`None`: not negotiated).
    pub wscale: Option<(u8, u8)>,
    /// Timestamps negotiated.
    pub timestamps: bool,
    /// SACK negotiated.
    pub sack: bool,
    /// Peer's receive window, bytes.
    pub snd_wnd: u32,
    /// Our advertised receive window, bytes.
    pub rcv_wnd: u32,
    /// Bytes in flight (sent, not acknowledged).
    pub bytes_in_flight: u32,
    /// Bytes presumed in the network (RFC 6675 `pipe`): in flight less
    /// what was SACKed or is deemed lost, plus retransmissions.
    pub pipe: u32,
    /// Bytes the peer has SACKed above `snd_una`.
    pub sacked: u32,
    /// Payload bytes acknowledged by the peer.
    pub bytes_acked: u64,
    /// Payload bytes received in order.
    pub bytes_received: u64,
    /// Of those, bytes written straight into the reader's ring
    /// ([`Stack::tcp_set_rx_sink`](crate::Stack::tcp_set_rx_sink)) rather
    /// than through the stack's receive buffer.
    pub bytes_sunk: u64,
    /// Payload bytes sent, retransmissions included.
    pub bytes_sent: u64,
    /// Payload bytes retransmitted.
    pub bytes_retrans: u64,
    /// Segments sent and received.
    pub segs_out: u64,
    /// Segments received.
    pub segs_in: u64,
    /// Segments retransmitted.
    pub retransmits: u64,
    /// Retransmission timeouts.
    pub rto_count: u32,
    /// Fast retransmits (entries into loss recovery by duplicate ACKs or SACK).
    pub fast_retransmits: u32,
    /// Loss recoveries driven by SACK information.
    pub sack_recoveries: u32,
    /// Out-of-order segments received.
    pub ooo_segments: u64,
    /// Duplicate segments received.
    pub dup_segments: u64,
    /// Challenge ACKs sent (RFC 5961).
    pub challenge_acks: u32,
    /// Zero-window probes sent.
    pub zero_window_probes: u32,
    /// Keepalive probes sent.
    pub keepalive_probes: u32,
    /// Tail-loss probes sent (RFC 8985 §7).
    pub tlp_probes: u32,
    /// Holes found lost by the reordering timer (RFC 8985 §6.2).
    pub reorder_timeouts: u32,
    /// Retransmissions found lost and sent again (Linux: `TCPLostRetransmit`).
    pub lost_retransmits: u32,
    /// Tail-loss probes whose answer revealed a loss that recovery then
    /// repaired (Linux: `TCPLossProbeRecovery`).
    pub tlp_recoveries: u32,
    /// D-SACK blocks received: the peer got a segment twice (Linux:
    /// `TCPDSACKRecv`).
    pub dsacks: u32,
    /// Retransmissions the peer reported as duplicates by D-SACK: they were
    /// not needed (spurious).
    pub spurious_retransmits: u32,
    /// Congestion responses undone because every retransmission of the
    /// episode proved spurious (Linux: `TCPDSACKUndo`, `TCPLossUndo`).
    pub undos: u32,
    /// Reordering events seen: a segment delivered after one sent later
    /// (Linux: `tcpi_reord_seen`).
    pub reord_seen: u32,
    /// The largest reordering seen, in segments (Linux: `tcpi_reordering`;
    /// 3 until more is seen).
    pub reordering: u32,
    /// The RACK reordering window in force (RFC 8985 §6.2).
    pub reo_wnd: Duration,
    /// Bytes queued to send (unsent plus unacknowledged).
    pub send_queue: u32,
    /// Bytes received and not yet read.
    pub recv_queue: u32,
    /// Delivery rate over the last round trip, bytes per second.
    pub delivery_rate: u64,
    /// The reason the connection failed, if it did.
    pub error: Option<TcpError>,
    /// The last ICMP error reported for its segments while it was open
    /// (Linux's `sk_err_soft`): only recorded, and reported instead of
    /// [`TcpError::TimedOut`] if the connection times out; cleared when
    /// the peer acknowledges new data.
    pub soft_error: Option<TcpError>,
    /// The congestion control algorithm in use (`TCP_CONGESTION`).
    pub congestion: congestion::Algorithm,
    /// The TOS byte its segments carry (`IP_TOS`).
    pub tos: u8,
    /// The TTL its segments carry (`IP_TTL`).
    pub ttl: u8,
    /// The path MTU its segments are sized for (the device's, or a smaller
    /// one fragmentation-needed messages taught: `ss -ti`'s `pmtu`).
    pub pmtu: u32,
}

/// Why data could not be queued for sending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendError {
    /// The handle names no live TCP connection.
    InvalidHandle,
    /// The connection is not open for sending (not yet connected, or shut down).
    InvalidState,
    /// The connection failed.
    Failed(TcpError),
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::InvalidHandle => f.write_str("no such TCP connection"),
            SendError::InvalidState => f.write_str("socket not open for sending"),
            SendError::Failed(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl core::error::Error for SendError {}

/// Why data could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecvError {
    /// The handle names no live TCP connection.
    InvalidHandle,
    /// The connection is not open for receiving (never connected).
    InvalidState,
    /// The peer closed its side and every byte has been read (end of stream).
    Finished,
    /// The connection failed.
    Failed(TcpError),
}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecvError::InvalidHandle => f.write_str("no such TCP connection"),
            RecvError::InvalidState => f.write_str("socket not open for receiving"),
            RecvError::Finished => f.write_str("end of stream"),
            RecvError::Failed(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl core::error::Error for RecvError {}
