//! Configuration of a [`Stack`](crate::Stack) and of its sockets.
//!
//! Everything a socket will ever need is sized here, up front: buffers are
//! allocated when a socket is created and never grow, so steady-state transfer
//! allocates nothing.

use alloc::vec::Vec;
use core::time::Duration;

use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};

use crate::device::DeviceCaps;
use crate::tcp::congestion::Algorithm;

/// The TTL of packets whose socket sets none (Linux's
/// `net.ipv4.ip_default_ttl`).
pub const DEFAULT_TTL: u8 = 64;

/// Keepalive parameters (`TCP_KEEPIDLE`, `TCP_KEEPINTVL`, `TCP_KEEPCNT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keepalive {
    /// Idle time before the first probe.
    pub idle: Duration,
    /// Time between unanswered probes.
    pub interval: Duration,
    /// Unanswered probes before the connection is aborted.
    pub count: u32,
}

impl Default for Keepalive {
    /// Linux's defaults: 2 hours, 75 seconds, 9 probes.
    fn default() -> Keepalive {
        Keepalive {
            idle: Duration::from_secs(7200),
            interval: Duration::from_secs(75),
            count: 9,
        }
    }
}

/// Per-socket TCP settings. The stack's [`StackConfig::tcp`] is the default
/// for new sockets; each can be changed per socket before it connects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TcpConfig {
    /// Receive buffer in bytes; also bounds the advertised window and the
    /// out-of-order data held.
    pub rx_buffer: usize,
    /// Most payload bytes queued for sending (unsent plus unacknowledged).
    pub tx_buffer: usize,
    /// Most payload references queued for sending (each `send` is one).
    pub tx_max_chunks: usize,
    /// Disable Nagle's algorithm (`TCP_NODELAY`).
    pub nodelay: bool,
    /// Delayed-ACK timer; `None` acknowledges every segment at once.
    pub delayed_ack: Option<Duration>,
    /// Acknowledge at once after this many full-sized segments (2 per RFC 5681).
    pub ack_every: u32,
    /// Congestion control algorithm.
    pub congestion: Algorithm,
    /// Offer and use SACK (RFC 2018).
    pub sack: bool,
    /// Offer and use timestamps and PAWS (RFC 7323).
    pub timestamps: bool,
    /// Offer and use window scaling (RFC 7323).
    pub window_scaling: bool,
    /// Clamp the MSS this side sends and announces (`TCP_MAXSEG`).
    pub mss_clamp: Option<u16>,
    /// Keepalive probing (`SO_KEEPALIVE`); `None` = off.
    pub keepalive: Option<Keepalive>,
    /// Abort when sent data stays unacknowledged this long (`TCP_USER_TIMEOUT`).
    pub user_timeout: Option<Duration>,
    /// Retransmission timeout before the first RTT sample (RFC 6298: 1 s).
    pub initial_rto: Duration,
    /// Lower bound of the RTO (Linux: 200 ms).
    pub min_rto: Duration,
    /// Upper bound of the RTO, backoff included.
    pub max_rto: Duration,
    /// Time spent in TIME-WAIT (2 × MSL).
    pub time_wait: Duration,
    /// SYN retransmissions before `connect` fails.
    pub syn_retries: u32,
    /// SYN-ACK retransmissions before a handshake a listener started is
    /// given up (Linux's `tcp_synack_retries`, 5: the embryo holds its
    /// place in the SYN queue 63 s). Under pressure old embryos get fewer,
    /// down to 2 (see [`StackConfig::syncookies`]).
    pub synack_retries: u32,
    /// Retransmissions of the same data before the connection is aborted.
    pub max_retries: u32,
    /// Persist-timer probes (and retransmissions) an orphan gets — a
    /// connection its program closed, or whose program is gone while what
    /// it queued still drains — before it is given up. Without a limit a
    /// peer that answers every probe with a zero window holds the
    /// connection, and what it queued, for ever (RFC 9293 §3.8.6.1 keeps a
    /// sender open while probes are answered; Linux bounds orphans the same
    /// way: `tcp_orphan_retries`, 8 in effect). From a 200 ms RTO, 8 probes
    /// backed off reset the orphan about 100 s after its window closed.
    pub orphan_retries: u32,
    /// Out-of-order ranges held in reassembly (and SACK ranges tracked).
    /// A window of many segments with scattered losses needs many: a
    /// segment that would need one range too many is dropped by the
    /// receiver, and a SACK block the sender cannot record looks lost.
    pub max_ooo_ranges: usize,
    /// Lower bound on the peer's MSS (guards against tiny or zero MSS).
    pub min_mss: u16,
    /// The IPv4 TOS byte of every segment (`IP_TOS`): DSCP in the high six
    /// bits; the two ECN bits are the stack's, and it does not negotiate
    /// ECN, so they go out as zero (Linux keeps them out of `IP_TOS` on TCP
    /// sockets too). A listener's passes to the connections it accepts.
    pub tos: u8,
    /// The IPv4 TTL of every segment (`IP_TTL`); 0 stands for
    /// [`DEFAULT_TTL`].
    pub ttl: u8,
    /// `SO_PRIORITY`: handed to the port with every frame
    /// ([`TxFrame::priority`](crate::TxFrame::priority)), where a bonded
    /// port's prioritized policy reads it. A listener's passes to the
    /// connections it accepts.
    pub priority: u8,
}

impl Default for TcpConfig {
    fn default() -> TcpConfig {
        TcpConfig {
            rx_buffer: 256 * 1024,
            tx_buffer: 1024 * 1024,
            tx_max_chunks: 1024,
            nodelay: false,
            delayed_ack: Some(Duration::from_millis(40)),
            ack_every: 2,
            congestion: Algorithm::default(),
            sack: true,
            timestamps: true,
            window_scaling: true,
            mss_clamp: None,
            keepalive: None,
            user_timeout: None,
            initial_rto: Duration::from_secs(1),
            min_rto: Duration::from_millis(200),
            max_rto: Duration::from_secs(60),
            time_wait: Duration::from_secs(60),
            syn_retries: 6,
            synack_retries: 5,
            max_retries: 15,
            orphan_retries: 8,
            max_ooo_ranges: 512,
            min_mss: 88,
            tos: 0,
            ttl: 0,
            priority: 0,
        }
    }
}

/// Per-socket UDP settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct UdpConfig {
    /// Bytes of received payload buffered.
    pub rx_buffer: usize,
    /// Received datagrams buffered.
    pub rx_datagrams: usize,
    /// Datagrams queued for sending.
    pub tx_datagrams: usize,
    /// The IPv4 TOS byte of every datagram (`IP_TOS`), ECN bits included.
    pub tos: u8,
    /// The IPv4 TTL of every datagram (`IP_TTL`); 0 stands for
    /// [`DEFAULT_TTL`].
    pub ttl: u8,
    /// `SO_PRIORITY`, as [`TcpConfig::priority`].
    pub priority: u8,
}

impl Default for UdpConfig {
    fn default() -> UdpConfig {
        UdpConfig {
            rx_buffer: 256 * 1024,
            rx_datagrams: 256,
            tx_datagrams: 256,
            tos: 0,
            ttl: 0,
            priority: 0,
        }
    }
}

/// ARP settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ArpConfig {
    /// How long a learned entry stays valid.
    pub entry_ttl: Duration,
    /// Most entries held; the oldest is evicted past this.
    pub max_entries: usize,
    /// Most frames held while their next hop is being resolved.
    pub pending_frames: usize,
    /// Largest frame (bytes) that may wait for resolution; larger ones are
    /// dropped and left to the transport to retransmit.
    pub pending_frame_size: usize,
    /// Time between ARP requests for the same address.
    pub request_interval: Duration,
    /// Requests sent for one address before its waiting frames are dropped.
    pub max_requests: u32,
}

impl Default for ArpConfig {
    fn default() -> ArpConfig {
        ArpConfig {
            entry_ttl: Duration::from_secs(60),
            max_entries: 1024,
            pending_frames: 16,
            pending_frame_size: 256,
            request_interval: Duration::from_secs(1),
            max_requests: 3,
        }
    }
}

/// IPv4 settings: fragment reassembly and path-MTU discovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct IpConfig {
    /// Bytes of fragments held in reassembly at most, all datagrams
    /// together (Linux's `ipfrag_high_thresh`: 4 MiB). Past it the oldest
    /// datagram in reassembly makes way.
    pub reasm_max_bytes: usize,
    /// Datagrams in reassembly at once, at most; past it the oldest makes
    /// way.
    pub reasm_max_datagrams: usize,
    /// How long a datagram may take to arrive whole from its first
    /// fragment (Linux's `ipfrag_time`: 30 s; RFC 1122 §3.3.2 asks for
    /// 60–120 s at most). When it expires with the first fragment in
    /// hand, the sender gets an ICMP time exceeded (code 1).
    pub reasm_timeout: Duration,
    /// The smallest path MTU a fragmentation-needed message may set
    /// (Linux's `min_pmtu`: 552). A smaller one is taken as this, with DF
    /// off towards that destination, as Linux does.
    pub pmtu_min: usize,
    /// How long a learnt path MTU holds before the larger one is tried
    /// again (Linux's `mtu_expires`: 10 minutes).
    pub pmtu_expires: Duration,
    /// Destinations whose path MTU is remembered, at most; a new one
    /// replaces the entry that expires first.
    pub pmtu_cache_entries: usize,
}

impl Default for IpConfig {
    fn default() -> IpConfig {
        IpConfig {
            reasm_max_bytes: 4 << 20,
            reasm_max_datagrams: 64,
            reasm_timeout: Duration::from_secs(30),
            pmtu_min: 552,
            pmtu_expires: Duration::from_secs(600),
            pmtu_cache_entries: 256,
        }
    }
}

/// When a listener answers a SYN with a SYN cookie (RFC 4987 §3.6)
/// instead of a connection in its SYN queue (Linux's `tcp_syncookies`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SynCookies {
    /// Never: a SYN that finds the SYN queue full is dropped.
    Off,
    /// When the SYN queue is full (or the socket table is): the default,
    /// as Linux's 1.
    #[default]
    WhenFull,
    /// For every SYN (Linux's 2; for tests and for listeners under a
    /// flood that never ends).
    Always,
}

/// Everything a [`Stack`](crate::Stack) is built from.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct StackConfig {
    /// The port's MAC address.
    pub mac: EthernetAddress,
    /// IPv4 addresses with their prefixes. The first is the source address
    /// for destinations outside every prefix.
    pub addrs: Vec<Ipv4Cidr>,
    /// Next hop for destinations outside every prefix.
    pub gateway: Option<Ipv4Address>,
    /// What the port can do.
    pub caps: DeviceCaps,
    /// Secret key for ISNs (RFC 6528) and SYN cookies (RFC 4987). Keep it
    /// secret and random.
    pub secret: [u8; 16],
    /// Seed of the stack's PRNG (ephemeral ports, timestamp offsets).
    pub seed: u64,
    /// Defaults for new TCP sockets.
    pub tcp: TcpConfig,
    /// Defaults for new UDP sockets.
    pub udp: UdpConfig,
    /// ARP behaviour.
    pub arp: ArpConfig,
    /// Fragment reassembly and path-MTU discovery.
    pub ip: IpConfig,
    /// Most sockets (connections, listeners, UDP) at once.
    pub max_sockets: usize,
    /// Ephemeral port range for `connect` without a local port.
    pub ephemeral_ports: (u16, u16),
    /// Challenge ACKs (RFC 5961) sent per second at most, stack-wide.
    pub challenge_ack_limit: u32,
    /// The RTO's lower bound for peers inside a prefix, overriding
    /// `tcp.min_rto` (the longest matching prefix wins), as Linux's
    /// per-route `rto_min`: on a path of tens of microseconds a 200 ms floor
    /// is ten thousand round trips, and a timeout there costs that much.
    pub rto_min_routes: Vec<(Ipv4Cidr, Duration)>,
    /// ICMP errors (port unreachable) sent per second at most.
    pub icmp_error_limit: u32,
    /// Most connections a listener may hold waiting for `accept`,
    /// whatever backlog it asks for (Linux's `net.core.somaxconn`, 4096).
    pub somaxconn: usize,
    /// Most handshakes a listener keeps in its SYN queue, whatever its
    /// backlog (which bounds them too, as on Linux). Each is a whole
    /// connection with its buffers here (a Linux request socket is a few
    /// hundred bytes), so past this a SYN gets a cookie, which costs
    /// nothing; default 1024 (Linux's `tcp_max_syn_backlog` is 128–4096
    /// by memory, and bounds only a listener without cookies).
    pub max_syn_backlog: usize,
    /// When a listener answers with SYN cookies.
    pub syncookies: SynCookies,
    /// Closed connections kept for new ones to open in (their control
    /// block, receive ring, send queue and logs), so that opening a
    /// connection allocates nothing: at most this many… (A connection's
    /// storage comes back when it enters TIME-WAIT, which needs none of
    /// it; its control block when TIME-WAIT ends.)
    pub keep_closed: usize,
    /// …whose receive rings hold at most this many bytes together (their
    /// pages stay resident while kept). 0 for either keeps none.
    pub keep_closed_bytes: usize,
}

impl StackConfig {
    /// The RTO floor for connections to `peer`: the longest prefix of
    /// `rto_min_routes` that holds it, else `tcp.min_rto`.
    pub fn rto_min_for(&self, peer: Ipv4Address) -> Duration {
        self.rto_min_routes
            .iter()
            .filter(|(net, _)| net.contains_addr(&peer))
            .max_by_key(|(net, _)| net.prefix_len())
            .map_or(self.tcp.min_rto, |&(_, d)| d)
    }

    /// A configuration with one address and defaults for everything else.
    pub fn new(mac: EthernetAddress, addr: Ipv4Cidr) -> StackConfig {
        StackConfig {
            mac,
            addrs: alloc::vec![addr],
            gateway: None,
            caps: DeviceCaps::default(),
            secret: [0x5a; 16],
            seed: 0,
            tcp: TcpConfig::default(),
            udp: UdpConfig::default(),
            arp: ArpConfig::default(),
            ip: IpConfig::default(),
            max_sockets: 65_536,
            ephemeral_ports: (32_768, 60_999),
            challenge_ack_limit: 1000,
            icmp_error_limit: 1000,
            somaxconn: 4096,
            max_syn_backlog: 1024,
            syncookies: SynCookies::WhenFull,
            rto_min_routes: Vec::new(),
            keep_closed: 16,
            keep_closed_bytes: 64 << 20,
        }
    }
}
