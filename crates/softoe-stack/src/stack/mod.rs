//! [`Stack`]: one interface, its sockets, and the sans-IO entry points.

use alloc::vec::Vec;
use core::fmt;

use softoe_wire::Ipv4Address;

use crate::config::StackConfig;
use crate::iface::arp::ArpCache;
use crate::iface::{CSUM_CHUNK, ETH_HEADER, Iface};
use crate::isn::IsnGenerator;
use crate::payload::PayloadRef;
use crate::pmtu::PmtuCache;
use crate::rand::Rand;
use crate::reasm::Reassembly;
use crate::socket::{SocketHandle, SocketSet};
use crate::stats::{StackStats, TcpMemory};
use crate::tcp::State;
use crate::tcp::input::RateLimiter;
use crate::tcp::listener::GroupHash;
use crate::tcp::output::MAX_REFS_PER_FRAME;
use crate::tcp::socket::{PathCaps, TcpSocket};
use crate::tcp::syncookie::SynCookies as CookieKeys;

pub use error::{BindError, ConfigError, HandleError, UdpSendError};

macro_rules! egress {
    ($self:ident, $now:expr, $dev:expr) => {
        $crate::iface::Egress {
            now: $now,
            dev: $dev,
            iface: &$self.iface,
            arp: &mut $self.arp,
            buf: &mut $self.buf,
            chunk: &mut $self.chunk,
            ident: &mut $self.ident,
            stats: &mut $self.stats,
            pmtu: &$self.pmtu,
        }
    };
}

mod error;
mod ingress;
mod poll;
mod sockopt;
mod tcp_api;
mod tcp_input;
mod udp;

/// A TCP/IP stack for one Ethernet interface: the sans-IO core of softoe.
///
/// Drive it with three calls, in any order, as often as needed:
/// [`receive`](Stack::receive) for every frame that arrives,
/// [`poll`](Stack::poll) when [`poll_at`](Stack::poll_at) says so (or after
/// the application queued work), and [`poll_event`](Stack::poll_event) to
/// learn which sockets changed. Each takes the current time; none blocks,
/// reads a clock, or allocates in steady state.
pub struct Stack {
    iface: Iface,
    cfg: StackConfig,
    path: PathCaps,
    sockets: SocketSet,
    arp: ArpCache,
    isn: IsnGenerator,
    cookies: CookieKeys,
    /// Picks a reuseport group's member for a new connection.
    reuse_hash: GroupHash,
    rand: Rand,
    challenge: RateLimiter,
    icmp_limit: RateLimiter,
    buf: Vec<u8>,
    /// Payload copied out of the device for a software checksum.
    chunk: Vec<u8>,
    refs: Vec<PayloadRef>,
    arp_requests: Vec<Ipv4Address>,
    ident: u16,
    stats: StackStats,
    /// Datagrams arriving in fragments.
    reasm: Reassembly,
    /// Path MTUs learnt from fragmentation-needed messages.
    pmtu: PmtuCache,
    /// A datagram too large for the MTU, whole, before it is cut into
    /// fragments (an echo reply to a large ping); grows once.
    frag_out: Vec<u8>,
    next_port: u16,
    /// Inside [`begin_batch`](Stack::begin_batch): answers wait for the end.
    batching: bool,
}

impl fmt::Debug for Stack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stack")
            .field("mac", &self.iface.mac)
            .field("addrs", &self.iface.addrs)
            .field("sockets", &self.sockets.len())
            .field("arp", &self.arp)
            .finish_non_exhaustive()
    }
}

impl Stack {
    /// Builds a stack. Fails on a configuration it cannot run with.
    pub fn new(cfg: StackConfig) -> Result<Stack, ConfigError> {
        if cfg.addrs.is_empty() {
            return Err(ConfigError::NoAddress);
        }
        if !cfg.mac.is_unicast() {
            return Err(ConfigError::BadMac);
        }
        if !(68..=65_535).contains(&cfg.caps.mtu) {
            return Err(ConfigError::BadMtu);
        }
        let (lo, hi) = cfg.ephemeral_ports;
        if lo == 0 || hi < lo {
            return Err(ConfigError::BadPortRange);
        }
        let mut rand = Rand::new(cfg.seed);
        let span = u32::from(hi - lo) + 1;
        let next_port = lo + rand.below(span) as u16;
        let buf_size = (cfg.caps.mtu + ETH_HEADER)
            .max(cfg.arp.pending_frame_size)
            .max(256);
        Ok(Stack {
            iface: Iface {
                mac: cfg.mac,
                addrs: cfg.addrs.clone(),
                gateway: cfg.gateway,
                tx_csum: cfg.caps.tx_csum,
            },
            path: PathCaps::from_device(&cfg.caps),
            sockets: SocketSet::new(
                cfg.max_sockets,
                cfg.seed,
                cfg.keep_closed,
                cfg.keep_closed_bytes,
            ),
            arp: ArpCache::new(cfg.arp, cfg.seed),
            isn: IsnGenerator::new(cfg.secret),
            cookies: CookieKeys::new(cfg.secret),
            reuse_hash: GroupHash::new(cfg.secret),
            rand,
            challenge: RateLimiter::new(cfg.challenge_ack_limit),
            icmp_limit: RateLimiter::new(cfg.icmp_error_limit),
            buf: Vec::with_capacity(buf_size),
            chunk: alloc::vec![0; CSUM_CHUNK],
            refs: Vec::with_capacity(MAX_REFS_PER_FRAME),
            arp_requests: Vec::with_capacity(16),
            ident: (cfg.seed >> 16) as u16,
            stats: StackStats::default(),
            reasm: Reassembly::new(cfg.ip),
            pmtu: PmtuCache::new(&cfg.ip),
            frag_out: Vec::new(),
            next_port,
            batching: false,
            cfg,
        })
    }

    /// The configuration the stack was built with.
    pub fn config(&self) -> &StackConfig {
        &self.cfg
    }

    /// Stack-wide counters.
    pub fn stats(&self) -> &StackStats {
        &self.stats
    }

    /// What the TCP connections hold in memory now, and what closed ones
    /// left for reuse (a walk of the socket table: for `softoe stat`, not
    /// for every turn).
    pub fn tcp_memory(&self) -> TcpMemory {
        let mut m = TcpMemory::default();
        for s in self.sockets.indices().filter_map(|i| self.sockets.tcp(i)) {
            m.connections += 1;
            m.time_wait += usize::from(s.state == State::TimeWait);
            m.held += s.storage_bytes();
        }
        let (blocks, kept, kept_bytes) = self.sockets.kept();
        m.kept = kept;
        m.kept_bytes = kept_bytes;
        m.control = (m.connections + blocks) * size_of::<TcpSocket>();
        m
    }

    /// Bytes of storage connection `h` holds (`TcpSocket::storage_bytes`).
    #[cfg(test)]
    pub(crate) fn tcp_storage_bytes(&self, h: SocketHandle) -> Option<usize> {
        let i = self.tcp_index(h).ok()?;
        self.sockets.tcp(i).map(TcpSocket::storage_bytes)
    }

    /// Entries in the ARP cache (resolved and pending).
    pub fn arp_cache_len(&self) -> usize {
        self.arp.len()
    }

    /// Whether `addr` is one of the interface's addresses.
    pub fn has_addr(&self, addr: Ipv4Address) -> bool {
        self.iface.has_addr(addr)
    }

    /// Number of live sockets of every kind.
    pub fn socket_count(&self) -> usize {
        self.sockets.len()
    }

    /// Handles of every live socket, in table order.
    pub fn sockets(&self) -> impl Iterator<Item = SocketHandle> + '_ {
        self.sockets
            .indices()
            .filter_map(|i| self.sockets.handle_of(i))
    }
}
