//! [`Stack`]: one interface, its sockets, and the sans-IO entry points.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use softoe_wire::{
    ArpOperation, ArpPacket, ArpRepr, Checksum, ChecksumCaps, EtherType, EthernetFrame,
    Icmpv4DstUnreachable, Icmpv4Packet, Icmpv4Repr, Icmpv4TimeExceeded, IpProtocol, Ipv4Address,
    Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber, UdpPacket, UdpRepr,
};

use crate::config::{Keepalive, StackConfig, SynCookies, TcpConfig, UdpConfig};
use crate::device::{Device, RxMeta, RxRing};
use crate::iface::arp::ArpCache;
use crate::iface::{CSUM_CHUNK, ETH_HEADER, Egress, IPV4_HEADER, Iface, IpFields};
use crate::isn::IsnGenerator;
use crate::payload::PayloadRef;
use crate::pmtu::PmtuCache;
use crate::rand::Rand;
use crate::reasm::{Outcome, Reassembly};
use crate::socket::udp::UdpSocket;
use crate::socket::{Events, ListenGroup, Socket, SocketHandle, SocketSet};
use crate::stats::{StackStats, TcpMemory};
use crate::tcp::congestion::Algorithm;
use crate::tcp::icmp::{self, IcmpVerdict};
use crate::tcp::input::{Ctx, RateLimiter, Reply, rst_for};
use crate::tcp::listener::{GroupHash, TcpListener};
use crate::tcp::output::{MAX_REFS_PER_FRAME, SinkError};
use crate::tcp::socket::{PathCaps, RxSink, TcpSocket};
use crate::tcp::syncookie::{self, SynCookies as CookieKeys};
use crate::tcp::{Endpoint, ListenerInfo, RecvError, SendError, State, TcpError, TcpInfo, seq};
use crate::time::Instant;

/// A configuration the stack cannot run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// No IPv4 address was given.
    NoAddress,
    /// The MAC address is not a unicast address.
    BadMac,
    /// The MTU is below 68 bytes (RFC 791's minimum) or above 65,535.
    BadMtu,
    /// The ephemeral port range is empty or includes port 0.
    BadPortRange,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConfigError::NoAddress => "the interface needs at least one IPv4 address",
            ConfigError::BadMac => "the MAC address must be a unicast address",
            ConfigError::BadMtu => "the MTU must be between 68 and 65535 bytes",
            ConfigError::BadPortRange => "the ephemeral port range must be non-empty and exclude 0",
        })
    }
}

impl core::error::Error for ConfigError {}

/// Why a handle could not be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandleError {
    /// The handle names no live socket (closed and released, or never valid).
    Invalid,
    /// The socket is of another kind than the operation needs.
    WrongKind,
}

impl fmt::Display for HandleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HandleError::Invalid => "no such socket",
            HandleError::WrongKind => "operation not supported on this kind of socket",
        })
    }
}

impl core::error::Error for HandleError {}

/// Why a connection could not be started, or a socket not bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BindError {
    /// The address is not one of ours, or the remote address is not unicast,
    /// or a port is 0 where one is needed.
    Unaddressable,
    /// No route to the destination.
    NoRoute,
    /// The local endpoint (or four-tuple) is taken.
    AddrInUse,
    /// No ephemeral port is free.
    NoPorts,
    /// The socket table is full.
    TooManySockets,
}

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BindError::Unaddressable => "address not available",
            BindError::NoRoute => "network unreachable",
            BindError::AddrInUse => "address already in use",
            BindError::NoPorts => "no free ephemeral port",
            BindError::TooManySockets => "socket table full",
        })
    }
}

impl core::error::Error for BindError {}

/// Why a datagram could not be sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UdpSendError {
    /// The handle names no live UDP socket.
    InvalidHandle,
    /// The destination is not a unicast or broadcast address, or port 0.
    Unaddressable,
    /// The datagram does not fit in one IP packet of the MTU.
    TooLarge,
    /// The send queue is full; try after the next poll.
    Full,
}

impl fmt::Display for UdpSendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UdpSendError::InvalidHandle => "no such UDP socket",
            UdpSendError::Unaddressable => "destination address not usable",
            UdpSendError::TooLarge => "datagram larger than the MTU allows",
            UdpSendError::Full => "send queue full",
        })
    }
}

impl core::error::Error for UdpSendError {}

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

macro_rules! egress {
    ($self:ident, $now:expr, $dev:expr) => {
        Egress {
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

    // ---- driving the stack -------------------------------------------------------

    /// When the stack next needs [`poll`](Stack::poll) if no frame arrives.
    /// `Some(Instant::ZERO)` means "now"; `None` means "only when a frame
    /// arrives or the application acts".
    pub fn poll_at(&self) -> Option<Instant> {
        if self.sockets.has_ready() {
            return Some(Instant::ZERO);
        }
        [
            self.sockets.next_deadline(),
            self.arp.poll_at(),
            self.reasm.poll_at(),
            self.pmtu.poll_at(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Starts a receive batch: until [`end_batch`](Stack::end_batch), the
    /// segments [`receive`](Stack::receive) hands to a connection update its
    /// state at once, but what the connection sends in answer (ACKs, and
    /// the data they let out) waits for the end of the batch.
    ///
    /// This is receive coalescing done after the fact, for ports that
    /// deliver frames one by one: where a NIC with GRO would hand up one
    /// large frame and get one ACK, a batch of 30 segments read in a burst
    /// gets one ACK (carrying the newest SACK blocks) instead of 30, and the
    /// sender's ACK clock sees stretch ACKs, as it does from Linux's GRO.
    /// Handshake segments, resets and ICMP/ARP answers still go at once.
    pub fn begin_batch(&mut self) {
        self.batching = true;
    }

    /// Ends a receive batch and sends what it held back (with everything
    /// else that is due, as [`poll`](Stack::poll) does).
    pub fn end_batch<D: Device>(&mut self, now: Instant, dev: &mut D) {
        self.batching = false;
        self.poll(now, dev);
    }

    /// Does all the work that is due: queued application data, ACKs owed,
    /// expired timers, ARP retries. Calling it early is harmless.
    pub fn poll<D: Device>(&mut self, now: Instant, dev: &mut D) {
        self.expire_fragments(now, dev);
        crate::pmtu::expire(now, &mut self.pmtu, &mut self.sockets, &mut self.stats);
        let dropped = self.arp.poll(now, &mut self.arp_requests);
        self.stats.arp_drops += dropped as u64;
        if !self.arp_requests.is_empty() {
            let reqs = core::mem::take(&mut self.arp_requests);
            {
                let mut eg = egress!(self, now, dev);
                for ip in &reqs {
                    eg.arp_request(*ip);
                }
            }
            self.arp_requests = reqs;
        }
        // Each socket ready now is served once per call: one that asks
        // again at once waits for the next poll rather than spinning here.
        let mut budget = self.sockets.ready_len();
        while budget > 0 {
            let Some(i) = self.sockets.pop_ready() else {
                break;
            };
            budget -= 1;
            if !self.service(now, i, dev) {
                self.sockets.push_ready_front(i);
                return;
            }
        }
        while let Some(i) = self.sockets.pop_expired(now) {
            if !self.service(now, i, dev) {
                self.sockets.push_ready_front(i);
                return;
            }
        }
    }

    /// The next socket event for the runtime: which socket, and what happened.
    pub fn poll_event(&mut self) -> Option<(SocketHandle, Events)> {
        self.sockets.pop_event()
    }

    /// Sends a gratuitous ARP for each address (announce, or update peers'
    /// caches after a MAC change).
    pub fn announce<D: Device>(&mut self, now: Instant, dev: &mut D) {
        let addrs = self.iface.addrs.clone();
        let mut eg = egress!(self, now, dev);
        for c in addrs {
            let repr = ArpRepr {
                operation: ArpOperation::Request,
                source_hardware_addr: eg.iface.mac,
                source_protocol_addr: c.address(),
                target_hardware_addr: softoe_wire::EthernetAddress([0; 6]),
                target_protocol_addr: c.address(),
            };
            let _ = eg.send_arp(&repr, softoe_wire::EthernetAddress::BROADCAST);
        }
    }

    /// Runs one socket's due work. Returns false if the port was busy.
    fn service<D: Device>(&mut self, now: Instant, i: usize, dev: &mut D) -> bool {
        let ok = match self.sockets.get_mut(i) {
            Some(Socket::Tcp(_)) => self.service_tcp(now, i, dev, false),
            Some(Socket::Udp(_)) => self.service_udp(now, i, dev),
            _ => true,
        };
        self.sockets.touch(i);
        ok
    }

    fn service_tcp<D: Device>(
        &mut self,
        now: Instant,
        i: usize,
        dev: &mut D,
        skip_timers: bool,
    ) -> bool {
        let Some(sock) = self.sockets.tcp_mut(i) else {
            return true;
        };
        let prev = sock.state;
        if !skip_timers {
            let embryo = sock.parent.filter(|_| prev == State::SynReceived);
            if let Some(l) = embryo {
                // How long it may hold its place depends on how crowded
                // the SYN queue is (`TcpListener::synack_limit`).
                let retries = sock.cfg.synack_retries;
                let limit = match self.sockets.get(l) {
                    Some(Socket::Listener(lst)) => lst.synack_limit(retries),
                    _ => retries,
                };
                if let Some(sock) = self.sockets.tcp_mut(i) {
                    sock.synack_limit = limit;
                }
            }
            let Some(sock) = self.sockets.tcp_mut(i) else {
                return true;
            };
            let was_open = sock.error.is_none();
            sock.on_timers(now);
            // An embryo is not a connection timing out (Linux counts a
            // request socket's end nowhere).
            if was_open && sock.error.is_some() && sock.timed_out && embryo.is_none() {
                self.stats.tcp_timeouts += 1;
            }
            if let Some(l) = embryo
                && sock.embryo_young
                && sock.retries > 0
            {
                // Its SYN-ACK went again: no longer young.
                sock.embryo_young = false;
                if let Some(lst) = self.sockets.listener_mut(l) {
                    lst.young = lst.young.saturating_sub(1);
                }
            }
        }
        let Some(sock) = self.sockets.tcp_mut(i) else {
            return true;
        };
        let mut eg = egress!(self, now, dev);
        let r = sock.dispatch(now, &mut eg, &mut self.refs);
        self.after_tcp(now, i, prev);
        !matches!(r, Err(SinkError::Busy))
    }

    fn service_udp<D: Device>(&mut self, now: Instant, i: usize, dev: &mut D) -> bool {
        let Some(Socket::Udp(sock)) = self.sockets.get_mut(i) else {
            return true;
        };
        let mut eg = egress!(self, now, dev);
        while let Some(&(to, payload)) = sock.tx.front() {
            let local = sock.local;
            let Some(src) = (if local.addr.is_unspecified() {
                eg.iface.src_for(to.addr)
            } else {
                Some(local.addr)
            }) else {
                sock.tx.pop_front();
                sock.tx_done += 1;
                eg.stats.no_route += 1;
                continue;
            };
            let repr = UdpRepr {
                src_port: local.port,
                dst_port: to.port,
            };
            let plen = payload.len();
            let ip = sock.ip;
            let r = eg.send_ipv4(
                src,
                to.addr,
                IpProtocol::Udp,
                8,
                |buf| {
                    let mut pkt = UdpPacket::new_unchecked(buf);
                    pkt.set_src_port(repr.src_port);
                    pkt.set_dst_port(repr.dst_port);
                    pkt.set_len((8 + plen) as u16);
                    pkt.set_checksum(0);
                },
                core::slice::from_ref(&payload),
                plen,
                Some(6),
                None,
                ip,
            );
            match r {
                Err(SinkError::Busy) => return false,
                _ => {
                    sock.tx.pop_front();
                    sock.tx_done += 1;
                    eg.stats.udp_tx += 1;
                    sock.events.insert(Events::ACKED | Events::WRITABLE);
                }
            }
        }
        true
    }

    /// Bookkeeping after a TCP socket changed: listener queues, the
    /// connection table, freeing finished orphans.
    fn after_tcp(&mut self, now: Instant, i: usize, prev: State) {
        let _ = now;
        let Some(sock) = self.sockets.tcp_mut(i) else {
            return;
        };
        // Every dispatch ends here, before a closed socket is freed.
        self.stats.tcp_retransmits += sock.counters.retransmits - sock.retrans_counted;
        sock.retrans_counted = sock.counters.retransmits;
        let state = sock.state;
        let parent = sock.parent;
        let key = (sock.local, sock.remote);
        if prev == State::SynReceived
            && state != State::SynReceived
            && let Some(l) = parent
        {
            let young = core::mem::take(&mut sock.embryo_young);
            if state == State::Closed {
                if let Some(lst) = self.sockets.listener_mut(l) {
                    lst.forget_embryo(i, young);
                }
                self.sockets.conns.remove(&key);
                self.sockets.discard(i);
                return;
            }
            let handle = self.sockets.handle_of(i);
            if let (Some(lst), Some(h)) = (self.sockets.listener_mut(l), handle) {
                lst.forget_embryo(i, young);
                lst.accept_queue.push_back(h);
                lst.events.insert(Events::READABLE);
            }
            if let Some(sock) = self.sockets.tcp_mut(i) {
                sock.queued_for_accept = true;
            }
            self.stats.tcp_passive_opens += 1;
            self.sockets.touch(l);
        }
        if state == State::Closed {
            if self.sockets.conns.get(&key) == Some(&i) {
                self.sockets.conns.remove(&key);
            }
            let orphan = self
                .sockets
                .tcp(i)
                .is_some_and(|s| s.orphan && !s.rst_pending);
            if orphan {
                self.sockets.discard(i);
            }
        }
        if state == State::TimeWait {
            self.shed(i);
        }
    }

    /// A connection in TIME-WAIT gives its storage back (to the kept
    /// ones, for the next connection, or to the allocator): see
    /// `TcpSocket::shed_storage`. Every way into TIME-WAIT passes through
    /// [`after_tcp`](Self::after_tcp); a read that empties the ring of a
    /// connection already there, through here too.
    fn shed(&mut self, i: usize) {
        if let Some(st) = self.sockets.tcp_mut(i).and_then(TcpSocket::shed_storage) {
            self.sockets.keep_storage(st);
        }
    }

    // ---- frames in -----------------------------------------------------------------

    /// Processes one received frame; answers (ACKs, ARP replies, echo
    /// replies, resets) go out through `dev` at once.
    pub fn receive<D: Device>(&mut self, now: Instant, frame: &[u8], meta: RxMeta, dev: &mut D) {
        self.stats.rx_frames += 1;
        self.stats.rx_bytes += frame.len() as u64;
        if meta.gso_size.is_some() {
            self.stats.rx_coalesced += 1;
        }
        if meta.csum_verified {
            self.stats.rx_csum_offloaded += 1;
        }
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let dst = eth.dst_addr();
        if eth.vlan_tci().is_some() || !(dst == self.iface.mac || dst.is_broadcast()) {
            self.stats.rx_not_for_us += 1;
            return;
        }
        match eth.ethertype() {
            EtherType::Arp => self.receive_arp(now, eth.payload(), dev),
            EtherType::Ipv4 => self.receive_ipv4(now, eth.payload(), meta, dst.is_broadcast(), dev),
            _ => self.stats.rx_not_for_us += 1,
        }
    }

    fn receive_arp<D: Device>(&mut self, now: Instant, bytes: &[u8], dev: &mut D) {
        let Ok(pkt) = ArpPacket::new_checked(bytes) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let Ok(repr) = ArpRepr::parse(&pkt) else {
            self.stats.rx_malformed += 1;
            return;
        };
        self.stats.arp_rx += 1;
        let for_us = self.iface.has_addr(repr.target_protocol_addr);
        let resolved = self.arp.fill(
            now,
            repr.source_protocol_addr,
            repr.source_hardware_addr,
            for_us,
        );
        let mut eg = egress!(self, now, dev);
        if for_us && repr.operation == ArpOperation::Request {
            let reply = ArpRepr {
                operation: ArpOperation::Reply,
                source_hardware_addr: eg.iface.mac,
                source_protocol_addr: repr.target_protocol_addr,
                target_hardware_addr: repr.source_hardware_addr,
                target_protocol_addr: repr.source_protocol_addr,
            };
            if repr.source_hardware_addr.is_unicast() {
                let _ = eg.send_arp(&reply, repr.source_hardware_addr);
            }
        }
        if resolved {
            eg.flush_arp_queue();
            // Connections whose frames could not wait may go now.
            self.sockets.wake_all_tcp();
        }
    }

    fn receive_ipv4<D: Device>(
        &mut self,
        now: Instant,
        bytes: &[u8],
        meta: RxMeta,
        l2_broadcast: bool,
        dev: &mut D,
    ) {
        let Ok(pkt) = Ipv4Packet::new_checked(bytes) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let Ok(ip) = Ipv4Repr::parse(&pkt, &ChecksumCaps::default()) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let to_us = self.iface.has_addr(ip.dst_addr);
        let broadcast = self.iface.is_broadcast(ip.dst_addr);
        if !to_us && !broadcast {
            self.stats.rx_not_for_us += 1;
            return;
        }
        if pkt.is_fragment() {
            self.stats.rx_fragments += 1;
            self.receive_fragment(now, bytes, l2_broadcast, to_us, dev);
            return;
        }
        self.deliver_ipv4(
            now,
            &ip,
            bytes,
            pkt.payload(),
            meta,
            l2_broadcast,
            to_us,
            dev,
        );
    }

    /// A fragment for us: into reassembly, and the datagram up the stack
    /// once it is whole, as if it had come in one piece (its checksum
    /// verified here: no port vouches for a datagram it never saw whole).
    fn receive_fragment<D: Device>(
        &mut self,
        now: Instant,
        bytes: &[u8],
        l2_broadcast: bool,
        to_us: bool,
        dev: &mut D,
    ) {
        let Outcome::Complete(i) = self.reasm.add(now, bytes, &mut self.stats) else {
            return;
        };
        let Some((buf, len)) = self.reasm.take(i) else {
            return;
        };
        self.stats.reasm_ok += 1;
        if let Some(whole) = buf.get(..len)
            && let Ok(pkt) = Ipv4Packet::new_checked(whole)
            && let Ok(ip) = Ipv4Repr::parse(&pkt, &ChecksumCaps::default())
        {
            let meta = RxMeta::default();
            self.deliver_ipv4(
                now,
                &ip,
                whole,
                pkt.payload(),
                meta,
                l2_broadcast,
                to_us,
                dev,
            );
        }
        self.reasm.release(i, buf);
    }

    /// Drops the datagrams whose reassembly timed out, telling the sender
    /// of each whose first fragment came (ICMP time exceeded, code 1:
    /// RFC 792, RFC 1122 §3.3.2), within the ICMP error limit.
    fn expire_fragments<D: Device>(&mut self, now: Instant, dev: &mut D) {
        while let Some(expired) = self.reasm.expire(now) {
            self.stats.reasm_timeouts += 1;
            let Some(e) = expired else { continue };
            if !self.iface.has_addr(e.dst) || !self.icmp_limit.allow(now) {
                continue;
            }
            let msg = Icmpv4Repr::TimeExceeded {
                reason: Icmpv4TimeExceeded::FragReassembly,
                data: e.quote.get(..e.len).unwrap_or(&[]),
            };
            self.stats.icmp_time_exceeded_tx += 1;
            let _ = egress!(self, now, dev).send_icmp(e.dst, e.src, &msg);
        }
    }

    /// A whole datagram for us (or broadcast) up to its protocol.
    #[allow(clippy::too_many_arguments)]
    fn deliver_ipv4<D: Device>(
        &mut self,
        now: Instant,
        ip: &Ipv4Repr,
        bytes: &[u8],
        payload: &[u8],
        meta: RxMeta,
        l2_broadcast: bool,
        to_us: bool,
        dev: &mut D,
    ) {
        let l4_caps = if meta.csum_verified {
            ChecksumCaps {
                ipv4: Checksum::Both,
                udp: Checksum::Tx,
                tcp: Checksum::Tx,
                icmpv4: Checksum::Tx,
            }
        } else {
            ChecksumCaps::default()
        };
        match ip.next_header {
            IpProtocol::Tcp if to_us && !l2_broadcast => {
                self.receive_tcp(now, ip, payload, &l4_caps, meta, dev)
            }
            IpProtocol::Udp => self.receive_udp(now, ip, bytes, payload, &l4_caps, to_us, dev),
            IpProtocol::Icmp if to_us => self.receive_icmp(now, ip, payload, &l4_caps, dev),
            _ => self.stats.rx_not_for_us += 1,
        }
    }

    fn receive_icmp<D: Device>(
        &mut self,
        now: Instant,
        ip: &Ipv4Repr,
        bytes: &[u8],
        caps: &ChecksumCaps,
        dev: &mut D,
    ) {
        let Ok(pkt) = Icmpv4Packet::new_checked(bytes) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let Ok(repr) = Icmpv4Repr::parse(&pkt, caps) else {
            self.stats.rx_malformed += 1;
            return;
        };
        match repr {
            Icmpv4Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } => {
                let reply = Icmpv4Repr::EchoReply {
                    ident,
                    seq_no,
                    data,
                };
                if reply.buffer_len() + IPV4_HEADER > self.cfg.caps.mtu {
                    return self.send_icmp_fragments(now, ip, &reply, dev);
                }
                self.stats.icmp_echo += 1;
                let _ = egress!(self, now, dev).send_icmp(ip.dst_addr, ip.src_addr, &reply);
            }
            Icmpv4Repr::DstUnreachable {
                reason: Icmpv4DstUnreachable::FragRequired,
                data,
            } => {
                self.stats.icmp_errors_rx += 1;
                let (pmtu, socks, stats) = (&mut self.pmtu, &mut self.sockets, &mut self.stats);
                crate::pmtu::on_frag_needed(now, pkt.next_hop_mtu(), data, pmtu, socks, stats);
            }
            Icmpv4Repr::DstUnreachable { reason, data, .. } => {
                self.stats.icmp_errors_rx += 1;
                self.tcp_icmp_error(now, reason, data);
            }
            _ => {}
        }
    }

    /// An echo reply too large for the MTU (the answer to a large ping),
    /// built whole and sent as fragments (RFC 1122 §3.2.2.6: the reply
    /// carries the request's data, however it arrived).
    fn send_icmp_fragments<D: Device>(
        &mut self,
        now: Instant,
        ip: &Ipv4Repr,
        reply: &Icmpv4Repr<'_>,
        dev: &mut D,
    ) {
        self.stats.icmp_echo += 1;
        let mut whole = core::mem::take(&mut self.frag_out);
        whole.clear();
        whole.resize(reply.buffer_len(), 0);
        reply.emit(
            &mut Icmpv4Packet::new_unchecked(&mut whole[..]),
            &ChecksumCaps::default(),
        );
        let mtu = self.cfg.caps.mtu;
        let _ = egress!(self, now, dev).send_fragments(
            ip.dst_addr,
            ip.src_addr,
            IpProtocol::Icmp,
            &whole,
            mtu,
            IpFields::DEFAULT,
        );
        self.frag_out = whole;
    }

    /// An ICMP destination-unreachable error: what it does to the TCP
    /// connection whose segment it quotes, if any (`tcp::icmp`).
    fn tcp_icmp_error(&mut self, now: Instant, reason: Icmpv4DstUnreachable, quote: &[u8]) {
        let (Some(err), Some(q)) = (icmp::error_for(reason), icmp::quoted_tcp(quote)) else {
            return;
        };
        let Some(&i) = self.sockets.conns.get(&(q.local, q.remote)) else {
            return;
        };
        let Some(sock) = self.sockets.tcp_mut(i) else {
            return;
        };
        let prev = sock.state;
        match sock.icmp_error(q.seq, err) {
            IcmpVerdict::OutOfWindow => self.stats.tcp_icmp_out_of_window += 1,
            IcmpVerdict::Aborted => {
                self.stats.tcp_icmp_aborts += 1;
                self.after_tcp(now, i, prev);
                if self.sockets.get(i).is_some() {
                    self.sockets.touch(i);
                }
            }
            IcmpVerdict::Ignored | IcmpVerdict::Recorded => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn receive_udp<D: Device>(
        &mut self,
        now: Instant,
        ip: &Ipv4Repr,
        ip_bytes: &[u8],
        bytes: &[u8],
        caps: &ChecksumCaps,
        to_us: bool,
        dev: &mut D,
    ) {
        let Ok(pkt) = UdpPacket::new_checked(bytes) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let Ok(repr) = UdpRepr::parse(&pkt, &ip.src_addr, &ip.dst_addr, caps) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let local = Endpoint::new(ip.dst_addr, repr.dst_port);
        let from = Endpoint::new(ip.src_addr, repr.src_port);
        let found = if to_us {
            self.sockets.find_udp(local)
        } else {
            self.sockets
                .find_udp(Endpoint::new(Ipv4Address::UNSPECIFIED, repr.dst_port))
        };
        if let Some(i) = found {
            if let Some(sock) = self.sockets.udp_mut(i) {
                if sock.deliver(from, pkt.payload()) {
                    self.stats.udp_rx += 1;
                } else {
                    self.stats.udp_drops += 1;
                }
            }
            self.sockets.touch(i);
            return;
        }
        if !to_us || !self.icmp_limit.allow(now) {
            return;
        }
        // RFC 1122 §3.2.2.1: port unreachable, quoting the IP header and 8 bytes.
        let quote_len =
            (usize::from(ip_bytes.first().map_or(5, |b| b & 0x0f)) * 4 + 8).min(ip_bytes.len());
        let quote = ip_bytes.get(..quote_len).unwrap_or(&[]);
        let icmp = Icmpv4Repr::DstUnreachable {
            reason: Icmpv4DstUnreachable::PortUnreachable,
            data: quote,
        };
        self.stats.icmp_unreachable_tx += 1;
        let _ = egress!(self, now, dev).send_icmp(ip.dst_addr, ip.src_addr, &icmp);
    }

    fn receive_tcp<D: Device>(
        &mut self,
        now: Instant,
        ip: &Ipv4Repr,
        bytes: &[u8],
        caps: &ChecksumCaps,
        meta: RxMeta,
        dev: &mut D,
    ) {
        let Ok(pkt) = TcpPacket::new_checked(bytes) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let Ok(seg) = TcpRepr::parse(&pkt, &ip.src_addr, &ip.dst_addr, caps) else {
            self.stats.rx_malformed += 1;
            if !caps.tcp.rx() || pkt.verify_checksum(&ip.src_addr, &ip.dst_addr) {
                return;
            }
            self.stats.rx_bad_checksum += 1;
            return;
        };
        let local = Endpoint::new(ip.dst_addr, seg.dst_port);
        let remote = Endpoint::new(ip.src_addr, seg.src_port);
        let gso = meta
            .gso_size
            .filter(|&g| g > 0 && seg.payload.len() > usize::from(g));

        let mut reopened = false;
        if let Some(&i) = self.sockets.conns.get(&(local, remote)) {
            let reply = self.process_tcp(now, i, &seg, gso, dev);
            match reply {
                Reply::None => return,
                Reply::Rst { seq, ack } => {
                    self.send_rst(now, local, remote, seq, ack, dev);
                    return;
                }
                Reply::Reopen => {
                    // The old incarnation in TIME-WAIT makes way for the new.
                    self.sockets.conns.remove(&(local, remote));
                    if let Some(sock) = self.sockets.tcp_mut(i) {
                        sock.set_state(State::Closed);
                    }
                    self.after_tcp(now, i, State::TimeWait);
                    self.sockets.touch(i);
                    reopened = true;
                }
            }
        }

        // No connection: a listener, or a reset.
        let hash = &self.reuse_hash;
        let listener = self.sockets.find_listener(local, || hash.of(local, remote));
        let is_syn = seg.control == TcpControl::Syn && seg.ack_number.is_none();
        match listener {
            Some(l) if is_syn => self.accept_syn(now, l, local, remote, &seg, reopened, dev),
            Some(l) if seg.control != TcpControl::Rst && seg.ack_number.is_some() => {
                // The ACK of a cookie's SYN-ACK, or one for a connection we
                // do not know (a stale embryo): a connection, or a reset.
                if seg.control != TcpControl::Syn
                    && self.cookie_ack(now, l, local, remote, &seg, gso, dev)
                {
                    return;
                }
                if let Some(Reply::Rst { seq, ack }) = rst_for(&seg) {
                    self.send_rst(now, local, remote, seq, ack, dev);
                }
            }
            Some(_) => {}
            None => {
                if let Some(Reply::Rst { seq, ack }) = rst_for(&seg) {
                    self.send_rst(now, local, remote, seq, ack, dev);
                }
            }
        }
    }

    fn process_tcp<D: Device>(
        &mut self,
        now: Instant,
        i: usize,
        seg: &TcpRepr<'_>,
        gso: Option<u16>,
        dev: &mut D,
    ) -> Reply {
        let accept_ok = match self.sockets.tcp(i).and_then(|s| s.parent) {
            Some(l) => match self.sockets.get(l) {
                Some(Socket::Listener(lst)) => lst.accept_room(),
                _ => true,
            },
            None => true,
        };
        let Some(sock) = self.sockets.tcp_mut(i) else {
            return Reply::None;
        };
        let prev = sock.state;
        if self.batching && sock.ack_before(seg) {
            // A new run while out-of-order data waits: the ACK owed goes
            // first, so every SACK block is reported (see `ack_before`).
            let mut eg = egress!(self, now, dev);
            let _ = sock.dispatch(now, &mut eg, &mut self.refs);
        }
        let mut deliver = |r: &RxRing, pos: u64, data: &[u8]| dev.deliver(r, pos, data);
        let mut cx = Ctx {
            now,
            challenge: &mut self.challenge,
            accept_ok,
            deliver: &mut deliver,
        };
        let reply = sock.process(&mut cx, seg, gso);
        if reply == Reply::Reopen {
            return reply;
        }
        if core::mem::take(&mut sock.gap_filled) && self.batching {
            // A repair's ACK goes now, not at the batch's end (see
            // `TcpSocket::gap_filled`).
            let mut eg = egress!(self, now, dev);
            let _ = sock.dispatch(now, &mut eg, &mut self.refs);
        }
        if self.batching {
            // Answer at the end of the batch (begin_batch).
            self.after_tcp(now, i, prev);
            self.sockets.push_ready_back(i);
            self.sockets.touch(i);
            return reply;
        }
        let mut eg = egress!(self, now, dev);
        let r = sock.dispatch(now, &mut eg, &mut self.refs);
        self.after_tcp(now, i, prev);
        if matches!(r, Err(SinkError::Busy)) {
            self.sockets.push_ready_front(i);
        }
        self.sockets.touch(i);
        reply
    }

    /// The path toward `peer`: the device's, with a smaller MTU where one
    /// was learnt (path-MTU discovery).
    fn path_for(&self, peer: Ipv4Address, now: Instant) -> PathCaps {
        match self.pmtu.mtu(peer, now) {
            Some(mtu) if mtu < self.path.mtu => PathCaps { mtu, ..self.path },
            _ => self.path,
        }
    }

    /// The per-route RTO floor for `peer`, if a route names one.
    fn route_rto_min(&self, peer: Ipv4Address) -> Option<Duration> {
        self.cfg
            .rto_min_routes
            .iter()
            .any(|(net, _)| net.contains_addr(&peer))
            .then(|| self.cfg.rto_min_for(peer))
    }

    /// A SYN for listener `l`: a connection in its SYN queue, a SYN
    /// cookie, or nothing (see `tcp::listener` for the rules, Linux's
    /// `tcp_conn_request`). `reopened`: it took a TIME-WAIT connection's
    /// place, which Linux lets past a full SYN queue.
    #[allow(clippy::too_many_arguments)]
    fn accept_syn<D: Device>(
        &mut self,
        now: Instant,
        l: usize,
        local: Endpoint,
        remote: Endpoint,
        syn: &TcpRepr<'_>,
        reopened: bool,
        dev: &mut D,
    ) {
        let table_full = self.sockets.is_full();
        let mode = self.cfg.syncookies;
        let Some(lst) = self.sockets.listener_mut(l) else {
            return;
        };
        let queue_full = table_full || !(lst.syn_room() || reopened);
        let want_cookie = match mode {
            SynCookies::Always => !reopened || table_full,
            SynCookies::WhenFull => queue_full,
            SynCookies::Off => false,
        };
        if (queue_full && !want_cookie) || !lst.accept_room() {
            lst.syn_drops += 1;
            self.stats.tcp_syn_drops += 1;
            if !lst.accept_room() {
                self.stats.tcp_listen_overflows += 1;
            }
            return;
        }
        let mut cfg = lst.cfg;
        if want_cookie {
            lst.cookies_sent += 1;
            lst.last_cookie = Some(now);
            self.stats.tcp_syncookies_sent += 1;
            let repr = syncookie::syn_ack(&self.cookies, now, &cfg, &self.path, local, remote, syn);
            let ip = IpFields {
                tos: cfg.tos,
                ttl: cfg.ttl,
                priority: cfg.priority,
            };
            self.send_bare(now, local, remote, &repr, ip, dev);
            return;
        }
        cfg.min_rto = self.route_rto_min(remote.addr).unwrap_or(cfg.min_rto);
        let iss = self
            .isn
            .isn(now, (local.addr, local.port), (remote.addr, remote.port));
        let path = self.path_for(remote.addr, now);
        let mut sock = self.sockets.new_tcp(cfg, path, now);
        sock.accept_syn(now, local, remote, syn, iss, &mut self.rand);
        sock.parent = Some(l);
        sock.embryo_young = true;
        let Some(h) = self.sockets.insert(Socket::Tcp(sock)) else {
            self.stats.tcp_syn_drops += 1;
            return;
        };
        let i = h.index();
        if let Some(lst) = self.sockets.listener_mut(l) {
            lst.embryos.push(i);
            lst.young += 1;
        }
        self.sockets.conns.insert((local, remote), i);
        self.service_tcp(now, i, dev, true);
        self.sockets.touch(i);
    }

    /// An ACK for listener `l` that matches no connection: if it carries a
    /// cookie we made lately, the connection its SYN would have made
    /// (Linux's `cookie_v4_check`). Returns whether it was taken — made
    /// into a connection, or dropped for want of room — rather than left
    /// to be reset.
    #[allow(clippy::too_many_arguments)]
    fn cookie_ack<D: Device>(
        &mut self,
        now: Instant,
        l: usize,
        local: Endpoint,
        remote: Endpoint,
        seg: &TcpRepr<'_>,
        gso: Option<u16>,
        dev: &mut D,
    ) -> bool {
        let Some(ack) = seg.ack_number else {
            return false;
        };
        let table_full = self.sockets.is_full();
        let Some(Socket::Listener(lst)) = self.sockets.get(l) else {
            return false;
        };
        // A reuseport group's members answer for each other's cookies
        // (one that arrives after its member left still finds one).
        let lately = lst.cookies_lately(now)
            || self.sockets.find_group(lst.local).is_some_and(|g| {
                g.members.iter().any(|&m| {
                    matches!(self.sockets.get(m), Some(Socket::Listener(o)) if o.cookies_lately(now))
                })
            });
        if self.cfg.syncookies == SynCookies::Off || !lately {
            return false;
        }
        let cookie = seq::sub(ack, 1);
        let peer_isn = seq::sub(seg.seq_number, 1);
        let Some(mss) = self.cookies.check(now, local, remote, peer_isn, cookie) else {
            self.stats.tcp_syncookies_failed += 1;
            return false;
        };
        self.stats.tcp_syncookies_recv += 1;
        if !lst.accept_room() || table_full {
            // As the ACK of a SYN-ACK lost: the client sends it again.
            if !lst.accept_room() {
                self.stats.tcp_listen_overflows += 1;
            }
            return true;
        }
        let mut cfg = lst.cfg;
        cfg.min_rto = self.route_rto_min(remote.addr).unwrap_or(cfg.min_rto);
        let ts_offset = self.cookies.ts_offset(local, remote);
        let mut sock = self.sockets.new_tcp(cfg, self.path, now);
        sock.accept_cookie(
            now,
            local,
            remote,
            seg,
            cookie,
            mss,
            ts_offset,
            &mut self.rand,
        );
        sock.parent = Some(l);
        let Some(h) = self.sockets.insert(Socket::Tcp(sock)) else {
            return true;
        };
        let i = h.index();
        self.sockets.conns.insert((local, remote), i);
        match self.process_tcp(now, i, seg, gso, dev) {
            Reply::Rst { seq, ack } => self.send_rst(now, local, remote, seq, ack, dev),
            Reply::None | Reply::Reopen => {}
        }
        if let Some(sock) = self.sockets.tcp_mut(i)
            && sock.state == State::SynReceived
        {
            // The ACK did not complete it after all: no half-made
            // connection stays behind, out of every queue.
            sock.set_state(State::Closed);
            self.after_tcp(now, i, State::SynReceived);
        }
        true
    }

    fn send_rst<D: Device>(
        &mut self,
        now: Instant,
        local: Endpoint,
        remote: Endpoint,
        seq: TcpSeqNumber,
        ack: Option<TcpSeqNumber>,
        dev: &mut D,
    ) {
        let repr = TcpRepr {
            src_port: local.port,
            dst_port: remote.port,
            control: TcpControl::Rst,
            psh: false,
            seq_number: seq,
            ack_number: ack,
            window_len: 0,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 4],
            timestamp: None,
            payload: &[],
        };
        self.stats.tcp_rst_tx += 1;
        self.send_bare(now, local, remote, &repr, IpFields::DEFAULT, dev);
    }

    /// Sends a TCP segment no connection owns (a reset, a cookie's
    /// SYN-ACK): header only.
    fn send_bare<D: Device>(
        &mut self,
        now: Instant,
        local: Endpoint,
        remote: Endpoint,
        repr: &TcpRepr<'_>,
        ip: IpFields,
        dev: &mut D,
    ) {
        let mut eg = egress!(self, now, dev);
        let _ = eg.send_ipv4(
            local.addr,
            remote.addr,
            IpProtocol::Tcp,
            repr.header_len(),
            |buf| {
                let mut p = TcpPacket::new_unchecked(buf);
                repr.emit_header(&mut p, 0);
            },
            &[],
            0,
            Some(16),
            None,
            ip,
        );
    }

    // ---- TCP API ----------------------------------------------------------------------

    /// Where a connection's receive buffer starts reading in its storage.
    #[cfg(test)]
    pub(crate) fn tcp_rx_read_position(&self, h: SocketHandle) -> Option<usize> {
        let i = self.tcp_index(h).ok()?;
        self.sockets.tcp(i).map(|s| s.rx.read_position())
    }

    fn tcp_index(&self, h: SocketHandle) -> Result<usize, HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        match self.sockets.get(i) {
            Some(Socket::Tcp(_)) => Ok(i),
            _ => Err(HandleError::WrongKind),
        }
    }

    fn pick_port(&mut self, local_addr: Ipv4Address, remote: Endpoint) -> Option<u16> {
        let (lo, hi) = self.cfg.ephemeral_ports;
        let span = u32::from(hi - lo) + 1;
        for _ in 0..span {
            let p = self.next_port;
            self.next_port = if p >= hi { lo } else { p + 1 };
            let key = (Endpoint::new(local_addr, p), remote);
            if !self.sockets.conns.contains_key(&key) && !self.sockets.port_in_use(p) {
                return Some(p);
            }
        }
        None
    }

    /// Starts a connection to `remote` (an active open). `local` picks the
    /// source address and/or port (port 0: an ephemeral one); `cfg` overrides
    /// the stack's TCP defaults. The SYN goes out on the next
    /// [`poll`](Stack::poll); [`Events::CONNECTED`] or [`Events::CLOSED`]
    /// reports the outcome.
    pub fn tcp_connect(
        &mut self,
        now: Instant,
        remote: Endpoint,
        local: Option<Endpoint>,
        cfg: Option<TcpConfig>,
    ) -> Result<SocketHandle, BindError> {
        if remote.port == 0 || !remote.addr.is_unicast() || self.iface.is_broadcast(remote.addr) {
            return Err(BindError::Unaddressable);
        }
        if self.iface.route(remote.addr).is_none() {
            return Err(BindError::NoRoute);
        }
        let local_addr = match local {
            Some(l) if !l.addr.is_unspecified() => {
                if !self.iface.has_addr(l.addr) {
                    return Err(BindError::Unaddressable);
                }
                l.addr
            }
            _ => self.iface.src_for(remote.addr).ok_or(BindError::NoRoute)?,
        };
        let port = match local.map(|l| l.port) {
            Some(p) if p != 0 => p,
            _ => self
                .pick_port(local_addr, remote)
                .ok_or(BindError::NoPorts)?,
        };
        let local = Endpoint::new(local_addr, port);
        if self.sockets.conns.contains_key(&(local, remote)) {
            return Err(BindError::AddrInUse);
        }
        if self.sockets.is_full() {
            return Err(BindError::TooManySockets);
        }
        let mut cfg = cfg.unwrap_or(self.cfg.tcp);
        cfg.min_rto = self.route_rto_min(remote.addr).unwrap_or(cfg.min_rto);
        let iss = self
            .isn
            .isn(now, (local.addr, local.port), (remote.addr, remote.port));
        let path = self.path_for(remote.addr, now);
        let mut sock = self.sockets.new_tcp(cfg, path, now);
        sock.connect(now, local, remote, iss, &mut self.rand);
        let h = self
            .sockets
            .insert(Socket::Tcp(sock))
            .ok_or(BindError::TooManySockets)?;
        self.sockets.conns.insert((local, remote), h.index());
        self.stats.tcp_active_opens += 1;
        self.sockets.touch(h.index());
        self.mark_ready(h.index());
        Ok(h)
    }

    /// Listens on `local` (address unspecified: all of ours) with room for
    /// `backlog` connections waiting to be accepted. The address is this
    /// listener's alone: a listener on it, or on an overlapping one (the
    /// wildcard and a specific address of the same port), makes
    /// `AddrInUse`, as on Linux.
    pub fn tcp_listen(
        &mut self,
        local: Endpoint,
        backlog: usize,
        cfg: Option<TcpConfig>,
    ) -> Result<SocketHandle, BindError> {
        self.listen_on(local, backlog, cfg, None)
    }

    /// [`tcp_listen`](Stack::tcp_listen) with `SO_REUSEPORT`: the
    /// listener joins the group of those on `local` that set it too with
    /// the same `owner` (the engine passes the program's user: Linux
    /// lets only sockets of one uid share a port), and the group's
    /// members share the new connections, each four-tuple going to the
    /// member a keyed hash of it picks (see `tcp::listener`). A listener
    /// without the option there, or one of another owner, makes
    /// `AddrInUse`; a wildcard and a specific address of the same port
    /// may both listen when all their listeners set it, and the specific
    /// one takes its own address's connections.
    pub fn tcp_listen_reuseport(
        &mut self,
        local: Endpoint,
        backlog: usize,
        cfg: Option<TcpConfig>,
        owner: u32,
    ) -> Result<SocketHandle, BindError> {
        self.listen_on(local, backlog, cfg, Some(owner))
    }

    /// Whether a listener could start on `local` now (`reuseport`: with
    /// `SO_REUSEPORT` and that owner): what a `bind` checks, as Linux
    /// refuses a port that a listener holds at `bind`, not at `listen`.
    /// Nothing is reserved: a listener that starts in between still makes
    /// the `listen` fail.
    pub fn tcp_listen_check(
        &self,
        local: Endpoint,
        reuseport: Option<u32>,
    ) -> Result<(), BindError> {
        if local.port == 0 || !(local.addr.is_unspecified() || self.iface.has_addr(local.addr)) {
            return Err(BindError::Unaddressable);
        }
        self.sockets
            .listen_conflict(local, reuseport)
            .map(drop)
            .map_err(|()| BindError::AddrInUse)
    }

    fn listen_on(
        &mut self,
        local: Endpoint,
        backlog: usize,
        cfg: Option<TcpConfig>,
        reuseport: Option<u32>,
    ) -> Result<SocketHandle, BindError> {
        self.tcp_listen_check(local, reuseport)?;
        let cfg = cfg.unwrap_or(self.cfg.tcp);
        let lst = Box::new(TcpListener::new(
            local,
            reuseport,
            cfg,
            backlog,
            self.cfg.somaxconn,
            self.cfg.max_syn_backlog,
        ));
        let h = self
            .sockets
            .insert(Socket::Listener(lst))
            .ok_or(BindError::TooManySockets)?;
        let group = self
            .sockets
            .listeners
            .entry(local)
            .or_insert_with(|| ListenGroup {
                members: Vec::with_capacity(1),
                reuseport,
            });
        group.members.push(h.index());
        Ok(h)
    }

    /// Takes one established connection from a listener's accept queue.
    pub fn tcp_accept(
        &mut self,
        listener: SocketHandle,
    ) -> Result<Option<SocketHandle>, HandleError> {
        let l = self
            .sockets
            .index_of(listener)
            .ok_or(HandleError::Invalid)?;
        let lst = self.sockets.listener_mut(l).ok_or(HandleError::WrongKind)?;
        let Some(h) = lst.accept_queue.pop_front() else {
            return Ok(None);
        };
        if let Some(i) = self.sockets.index_of(h) {
            if let Some(sock) = self.sockets.tcp_mut(i) {
                sock.parent = None;
                sock.queued_for_accept = false;
                // Report what happened while it waited.
                let r = sock.readiness();
                sock.events.insert(r);
            }
            self.sockets.touch(i);
        }
        Ok(Some(h))
    }

    /// Queues payload for sending, by reference: the bytes must stay valid
    /// until [`tcp_acked`](Stack::tcp_acked) passes them (or the socket is
    /// released). Returns how many bytes were taken (a prefix of `data`;
    /// 0 when the send buffer is full — wait for [`Events::WRITABLE`]).
    pub fn tcp_send(&mut self, h: SocketHandle, data: PayloadRef) -> Result<usize, SendError> {
        let i = self.tcp_index(h).map_err(|_| SendError::InvalidHandle)?;
        let sock = self.sockets.tcp_mut(i).ok_or(SendError::InvalidHandle)?;
        let n = sock.send(data)?;
        self.sockets.touch(i);
        if n > 0 {
            self.mark_ready(i);
        }
        Ok(n)
    }

    /// The path under the interface changed: a bonded member left, or a
    /// bonded peer's did. What went out on it in the last moments (up to
    /// the 30 ms a silent member takes to be noticed) is gone without
    /// trace, and a connection whose whole tail went there would wait for
    /// its probe timeout — doubled for each probe the dead path swallowed —
    /// or for its RTO. Instead every connection with data in flight (and
    /// SACK, which a probe needs) sends a tail-loss probe on the next
    /// [`poll`](Self::poll), its probe backoff forgotten; the probe's SACK
    /// shows RACK what is missing. A connection without SACK keeps its
    /// retransmission timer.
    pub fn path_changed(&mut self) {
        self.stats.path_changes += 1;
        let tcp: Vec<usize> = self.sockets.indices().collect();
        for i in tcp {
            if self.sockets.tcp_mut(i).is_some_and(TcpSocket::probe_now) {
                self.stats.path_probes += 1;
                self.mark_ready(i);
            }
        }
    }

    fn mark_ready(&mut self, i: usize) {
        self.sockets.push_ready_front(i);
    }

    /// Bytes `tcp_send` would take now.
    pub fn tcp_send_space(&self, h: SocketHandle) -> Result<usize, HandleError> {
        let i = self.tcp_index(h)?;
        Ok(self.sockets.tcp(i).map_or(0, TcpSocket::send_space))
    }

    /// Bytes the connection has taken to send since it opened,
    /// acknowledged or not: where the next byte [`Stack::tcp_send`] takes
    /// lies in its stream (as [`Stack::tcp_acked`] counts). Several
    /// writers of one connection (the engine's sessions sharing it) place
    /// their bytes by it.
    pub fn tcp_sent_total(&self, h: SocketHandle) -> Result<u64, HandleError> {
        let i = self.tcp_index(h)?;
        Ok(self
            .sockets
            .tcp(i)
            .map_or(0, |s| s.tx.acked_total() + s.tx.len() as u64))
    }

    /// Total payload bytes the peer has acknowledged on this connection. A
    /// runtime releases send buffers (zero-copy) up to this stream offset.
    pub fn tcp_acked(&self, h: SocketHandle) -> Result<u64, HandleError> {
        let i = self.tcp_index(h)?;
        Ok(self.sockets.tcp(i).map_or(0, |s| s.tx.acked_total()))
    }

    /// Copies received bytes into `buf`. `Ok(0)`: nothing yet (wait for
    /// [`Events::READABLE`]); `Err(RecvError::Finished)`: end of stream.
    pub fn tcp_recv(&mut self, h: SocketHandle, buf: &mut [u8]) -> Result<usize, RecvError> {
        let i = self.tcp_index(h).map_err(|_| RecvError::InvalidHandle)?;
        let sock = self.sockets.tcp_mut(i).ok_or(RecvError::InvalidHandle)?;
        let n = sock.recv(buf)?;
        let update = sock.window_update;
        if sock.state == State::TimeWait {
            self.shed(i);
        }
        self.sockets.touch(i);
        if update {
            self.mark_ready(i);
        }
        Ok(n)
    }

    /// Zero-copy receive: `f` sees the readable bytes (at most two slices, in
    /// order) and returns how many it consumed, plus a result.
    pub fn tcp_recv_with<R>(
        &mut self,
        h: SocketHandle,
        f: impl FnOnce(&[u8], &[u8]) -> (usize, R),
    ) -> Result<R, RecvError> {
        let i = self.tcp_index(h).map_err(|_| RecvError::InvalidHandle)?;
        let sock = self.sockets.tcp_mut(i).ok_or(RecvError::InvalidHandle)?;
        let r = sock.recv_with(f)?;
        let update = sock.window_update;
        if sock.state == State::TimeWait {
            self.shed(i);
        }
        self.sockets.touch(i);
        if update {
            self.mark_ready(i);
        }
        Ok(r)
    }

    /// Sets (or with `None` takes away) the reader's receive ring for a
    /// connection: from now on, in-order bytes that find the stack's own
    /// receive buffer empty (and nothing out of order) are written there
    /// through [`Device::deliver`], straight from the arriving frame, at
    /// free-running positions from `tail` on; the rest waits in the stack
    /// as before, for [`tcp_recv_with`](Self::tcp_recv_with). The ring
    /// starts open, with nothing unread (`head = tail`).
    ///
    /// The ring adds to the buffer, it does not replace it: the window
    /// advertised is still the stack's own free space, so a reader that
    /// falls behind fills its ring and then the stack's buffer, whose
    /// bytes the runtime moves into the ring as the reader frees room.
    /// (Capping the window by the ring's free space, as the stack last
    /// heard it, was measured worse: one connection into a ring reader
    /// fell from 12–14 to 10 Gb/s, the engine spending more per byte on
    /// window updates and the reader's notices than the copy it saved;
    /// docs/journal/2026-11-27-receive-into-the-readers-ring.md.) Take the ring away before its memory goes (the
    /// socket closed or moved, the reader gone): the stack writes it for
    /// as long as it is set.
    pub fn tcp_set_rx_sink(
        &mut self,
        h: SocketHandle,
        ring: Option<(RxRing, u64)>,
    ) -> Result<(), HandleError> {
        let i = self.tcp_index(h)?;
        if let Some(s) = self.sockets.tcp_mut(i) {
            s.sink = ring.map(|(ring, tail)| RxSink {
                ring,
                tail,
                head: tail,
                open: true,
            });
        }
        Ok(())
    }

    /// Brings a connection's reader ring up to date and returns its tail
    /// (the position after the last byte written there), or `None` if it
    /// has none: the reader has read up to `head` (a position between the
    /// last one told and the tail; others are clamped into that range),
    /// the caller itself wrote `wrote` more bytes at the tail (ones it took
    /// from the stack's buffer with [`tcp_recv_with`](Self::tcp_recv_with)),
    /// and `open` says whether the stack may write there until the next
    /// call (closed while the reader waits for bytes somewhere else).
    pub fn tcp_rx_sink_sync(
        &mut self,
        h: SocketHandle,
        head: u64,
        wrote: u64,
        open: bool,
    ) -> Result<Option<u64>, HandleError> {
        let i = self.tcp_index(h)?;
        Ok(self
            .sockets
            .tcp_mut(i)
            .and_then(|s| s.sink_sync(head, wrote, open)))
    }

    /// Copies readable bytes without consuming them (`MSG_PEEK`).
    pub fn tcp_peek(&self, h: SocketHandle, buf: &mut [u8]) -> Result<usize, RecvError> {
        let i = self.tcp_index(h).map_err(|_| RecvError::InvalidHandle)?;
        self.sockets
            .tcp(i)
            .ok_or(RecvError::InvalidHandle)?
            .peek(buf)
    }

    /// Marks a connection no program holds any more while its holder still
    /// feeds it what the program had queued (a dead program's sends
    /// draining before the FIN): it counts as an orphan for the limits of
    /// [`TcpConfig::orphan_retries`] — a peer that never opens its window
    /// does not hold it for ever — but the handle stays valid until
    /// [`close`](Stack::close).
    ///
    /// [`TcpConfig::orphan_retries`]: crate::TcpConfig::orphan_retries
    pub fn tcp_orphan(&mut self, h: SocketHandle) -> Result<(), HandleError> {
        let i = self.tcp_index(h)?;
        if let Some(s) = self.sockets.tcp_mut(i) {
            s.owner_gone = true;
        }
        Ok(())
    }

    /// Closes the sending half (`shutdown(SHUT_WR)`): a FIN follows the data.
    pub fn tcp_shutdown(&mut self, h: SocketHandle) -> Result<(), HandleError> {
        let i = self.tcp_index(h)?;
        if let Some(s) = self.sockets.tcp_mut(i) {
            s.shutdown_send();
        }
        self.sockets.touch(i);
        self.mark_ready(i);
        Ok(())
    }

    /// Closes the socket and gives up the handle (`close`). The connection
    /// finishes in the background (FIN, TIME-WAIT) and the socket is freed
    /// when it ends, with an [`Events::RELEASED`] event. Unread data, or data
    /// that arrives later, resets the connection instead. Works on listeners
    /// (pending connections are reset) and UDP sockets too.
    pub fn close(&mut self, now: Instant, h: SocketHandle) -> Result<(), HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        match self.sockets.get_mut(i) {
            Some(Socket::Tcp(s)) => {
                s.orphan = true;
                let prev = s.state;
                s.close();
                if s.parent.is_some() && s.state == State::Closed {
                    // Never accepted; the listener no longer tracks it.
                    s.parent = None;
                }
                self.after_tcp(now, i, prev);
                if self.sockets.get(i).is_some() {
                    self.sockets.touch(i);
                    self.mark_ready(i);
                }
            }
            Some(Socket::Listener(_)) => self.close_listener(now, i),
            Some(Socket::Udp(u)) => {
                let local = u.local;
                self.sockets.udp.remove(&local);
                self.sockets.discard(i);
            }
            None => return Err(HandleError::Invalid),
        }
        Ok(())
    }

    fn close_listener(&mut self, now: Instant, l: usize) {
        let (local, embryos, queued) = match self.sockets.listener_mut(l) {
            Some(lst) => (
                lst.local,
                core::mem::take(&mut lst.embryos),
                core::mem::take(&mut lst.accept_queue),
            ),
            None => return,
        };
        if let Some(g) = self.sockets.listeners.get_mut(&local) {
            if let Some(pos) = g.members.iter().position(|&m| m == l) {
                // The last member takes its place (Linux's
                // `reuseport_detach_sock`).
                g.members.swap_remove(pos);
            }
            if g.members.is_empty() {
                self.sockets.listeners.remove(&local);
            }
        }
        let children = embryos
            .into_iter()
            .chain(queued.into_iter().filter_map(|h| self.sockets.index_of(h)));
        let children: Vec<usize> = children.collect();
        for i in children {
            if let Some(s) = self.sockets.tcp_mut(i) {
                s.parent = None;
                s.orphan = true;
                let prev = s.state;
                s.abort();
                self.after_tcp(now, i, prev);
                if self.sockets.get(i).is_some() {
                    self.sockets.touch(i);
                    self.mark_ready(i);
                }
            }
        }
        self.sockets.discard(l);
    }

    /// Aborts the connection: a RST goes out and everything queued is dropped.
    /// The handle stays valid (state CLOSED) until [`close`](Stack::close).
    pub fn tcp_abort(&mut self, h: SocketHandle) -> Result<(), HandleError> {
        let i = self.tcp_index(h)?;
        if let Some(s) = self.sockets.tcp_mut(i) {
            s.abort();
        }
        self.sockets.touch(i);
        self.mark_ready(i);
        Ok(())
    }

    /// The connection's state.
    pub fn tcp_state(&self, h: SocketHandle) -> Result<State, HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        match self.sockets.get(i) {
            Some(Socket::Tcp(s)) => Ok(s.state),
            Some(Socket::Listener(_)) => Ok(State::Listen),
            _ => Err(HandleError::WrongKind),
        }
    }

    /// The connection's whole internal state, for debugging (format unstable).
    #[doc(hidden)]
    pub fn tcp_debug(&self, h: SocketHandle) -> alloc::string::String {
        let Ok(i) = self.tcp_index(h) else {
            return alloc::string::String::new();
        };
        alloc::format!("{:#?}", self.sockets.tcp(i))
    }

    /// Why the connection failed, if it did (cheap: what a runtime asks
    /// before every send, unlike [`tcp_info`](Self::tcp_info)).
    pub fn tcp_error(&self, h: SocketHandle) -> Result<Option<TcpError>, HandleError> {
        let i = self.tcp_index(h)?;
        self.sockets
            .tcp(i)
            .map(|s| s.error)
            .ok_or(HandleError::Invalid)
    }

    /// An `ss -ti`-style snapshot of the connection.
    pub fn tcp_info(&self, h: SocketHandle) -> Result<TcpInfo, HandleError> {
        let i = self.tcp_index(h)?;
        self.sockets
            .tcp(i)
            .map(TcpSocket::info)
            .ok_or(HandleError::Invalid)
    }

    /// An `ss -lt`-style snapshot of listener `h`.
    pub fn tcp_listener_info(&self, h: SocketHandle) -> Result<ListenerInfo, HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        match self.sockets.get(i) {
            Some(Socket::Listener(l)) => Ok(ListenerInfo {
                local: l.local,
                reuseport: l.reuseport.is_some(),
                queued: l.accept_queue.len(),
                syn_received: l.embryos.len(),
                backlog: l.backlog,
                syn_backlog: l.syn_backlog,
                syn_drops: l.syn_drops,
                cookies_sent: l.cookies_sent,
            }),
            Some(_) => Err(HandleError::WrongKind),
            None => Err(HandleError::Invalid),
        }
    }

    /// The readiness of a socket now (level-triggered view).
    pub fn readiness(&self, h: SocketHandle) -> Result<Events, HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        Ok(match self.sockets.get(i) {
            Some(Socket::Tcp(s)) => s.readiness(),
            Some(Socket::Listener(l)) => {
                if l.accept_queue.is_empty() {
                    Events::empty()
                } else {
                    Events::READABLE
                }
            }
            Some(Socket::Udp(u)) => u.readiness(),
            None => return Err(HandleError::Invalid),
        })
    }

    fn tcp_cfg_mut(&mut self, h: SocketHandle) -> Result<&mut TcpSocket, HandleError> {
        let i = self.tcp_index(h)?;
        self.sockets.tcp_mut(i).ok_or(HandleError::Invalid)
    }

    /// `TCP_NODELAY`.
    pub fn tcp_set_nodelay(&mut self, h: SocketHandle, on: bool) -> Result<(), HandleError> {
        self.tcp_cfg_mut(h)?.cfg.nodelay = on;
        let i = self.tcp_index(h)?;
        self.mark_ready(i);
        Ok(())
    }

    /// `SO_KEEPALIVE` with its parameters (`None`: off).
    pub fn tcp_set_keepalive(
        &mut self,
        now: Instant,
        h: SocketHandle,
        ka: Option<Keepalive>,
    ) -> Result<(), HandleError> {
        let s = self.tcp_cfg_mut(h)?;
        s.cfg.keepalive = ka;
        s.arm_keepalive(now);
        let i = self.tcp_index(h)?;
        self.sockets.touch(i);
        Ok(())
    }

    /// `TCP_USER_TIMEOUT` (`None`: off).
    pub fn tcp_set_user_timeout(
        &mut self,
        h: SocketHandle,
        t: Option<Duration>,
    ) -> Result<(), HandleError> {
        self.tcp_cfg_mut(h)?.cfg.user_timeout = t;
        Ok(())
    }

    /// `TCP_CONGESTION`: the algorithm that sizes a connection's window
    /// from now on (its window carries over, see
    /// [`Controller::switch_to`](crate::tcp::congestion::Controller::switch_to)),
    /// or, on a listener, the one the connections it accepts start with.
    pub fn tcp_set_congestion(
        &mut self,
        h: SocketHandle,
        algorithm: Algorithm,
    ) -> Result<(), HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        match self.sockets.get_mut(i) {
            Some(Socket::Tcp(s)) => s.set_congestion(algorithm),
            Some(Socket::Listener(l)) => l.cfg.congestion = algorithm,
            Some(Socket::Udp(_)) => return Err(HandleError::WrongKind),
            None => return Err(HandleError::Invalid),
        }
        Ok(())
    }

    /// The congestion control algorithm of a connection or listener.
    pub fn tcp_congestion(&self, h: SocketHandle) -> Result<Algorithm, HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        match self.sockets.get(i) {
            Some(Socket::Tcp(s)) => Ok(s.cc.algorithm()),
            Some(Socket::Listener(l)) => Ok(l.cfg.congestion),
            Some(Socket::Udp(_)) => Err(HandleError::WrongKind),
            None => Err(HandleError::Invalid),
        }
    }

    /// `IP_TOS`: the TOS byte of the socket's packets from now on. On TCP
    /// sockets the two ECN bits are cleared (the stack does not negotiate
    /// ECN; Linux keeps them out of a TCP socket's `IP_TOS` too); a
    /// listener's applies to the connections of the SYNs it receives from
    /// then on, its SYN-ACKs included.
    pub fn set_tos(&mut self, h: SocketHandle, tos: u8) -> Result<(), HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        match self.sockets.get_mut(i) {
            Some(Socket::Tcp(s)) => s.cfg.tos = tos & !3,
            Some(Socket::Listener(l)) => l.cfg.tos = tos & !3,
            Some(Socket::Udp(u)) => u.ip.tos = tos,
            None => return Err(HandleError::Invalid),
        }
        Ok(())
    }

    /// `IP_TTL`: the TTL of the socket's packets from now on (0: the
    /// default, [`DEFAULT_TTL`](crate::DEFAULT_TTL)); a listener's passes
    /// on as its TOS does.
    pub fn set_ttl(&mut self, h: SocketHandle, ttl: u8) -> Result<(), HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        match self.sockets.get_mut(i) {
            Some(Socket::Tcp(s)) => s.cfg.ttl = ttl,
            Some(Socket::Listener(l)) => l.cfg.ttl = ttl,
            Some(Socket::Udp(u)) => u.ip.ttl = ttl,
            None => return Err(HandleError::Invalid),
        }
        Ok(())
    }

    /// `SO_PRIORITY`: the class the socket's frames are handed to the port
    /// with from now on ([`TxFrame::priority`](crate::TxFrame::priority));
    /// a listener's passes to the connections it accepts.
    pub fn set_priority(&mut self, h: SocketHandle, priority: u8) -> Result<(), HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        match self.sockets.get_mut(i) {
            Some(Socket::Tcp(s)) => s.cfg.priority = priority,
            Some(Socket::Listener(l)) => l.cfg.priority = priority,
            Some(Socket::Udp(u)) => u.ip.priority = priority,
            None => return Err(HandleError::Invalid),
        }
        Ok(())
    }

    /// The `SO_PRIORITY` a socket's frames go to the port with now (a
    /// connection's own, or the one its listener passed on).
    pub fn priority(&self, h: SocketHandle) -> Result<u8, HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        match self.sockets.get(i) {
            Some(Socket::Tcp(s)) => Ok(s.ip_fields().priority),
            Some(Socket::Listener(l)) => Ok(l.cfg.priority),
            Some(Socket::Udp(u)) => Ok(u.ip.priority),
            None => Err(HandleError::Invalid),
        }
    }

    /// The TOS byte and TTL a socket's packets carry now.
    pub fn ip_fields(&self, h: SocketHandle) -> Result<(u8, u8), HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        let f = match self.sockets.get(i) {
            Some(Socket::Tcp(s)) => s.ip_fields(),
            Some(Socket::Listener(l)) => IpFields {
                tos: l.cfg.tos,
                ttl: l.cfg.ttl,
                priority: l.cfg.priority,
            },
            Some(Socket::Udp(u)) => u.ip,
            None => return Err(HandleError::Invalid),
        };
        Ok((f.tos, f.effective_ttl()))
    }

    /// The delayed-ACK timer (`None`: acknowledge every segment at once).
    pub fn tcp_set_delayed_ack(
        &mut self,
        h: SocketHandle,
        t: Option<Duration>,
    ) -> Result<(), HandleError> {
        self.tcp_cfg_mut(h)?.cfg.delayed_ack = t;
        Ok(())
    }

    // ---- UDP API ----------------------------------------------------------------------

    /// Binds a UDP socket to `local` (address unspecified: all of ours).
    pub fn udp_bind(
        &mut self,
        local: Endpoint,
        cfg: Option<UdpConfig>,
    ) -> Result<SocketHandle, BindError> {
        if local.port == 0 || !(local.addr.is_unspecified() || self.iface.has_addr(local.addr)) {
            return Err(BindError::Unaddressable);
        }
        if self.sockets.udp.contains_key(&local) {
            return Err(BindError::AddrInUse);
        }
        let sock = Box::new(UdpSocket::new(local, cfg.unwrap_or(self.cfg.udp)));
        let h = self
            .sockets
            .insert(Socket::Udp(sock))
            .ok_or(BindError::TooManySockets)?;
        self.sockets.udp.insert(local, h.index());
        Ok(h)
    }

    /// Queues a datagram; it goes out on the next poll, after which its
    /// payload reference is released ([`Events::ACKED`]).
    pub fn udp_send_to(
        &mut self,
        h: SocketHandle,
        to: Endpoint,
        data: PayloadRef,
    ) -> Result<(), UdpSendError> {
        if to.port == 0 || to.addr.is_unspecified() || to.addr.is_multicast() {
            return Err(UdpSendError::Unaddressable);
        }
        if data.len() + 8 + IPV4_HEADER > self.cfg.caps.mtu {
            return Err(UdpSendError::TooLarge);
        }
        let i = self
            .sockets
            .index_of(h)
            .ok_or(UdpSendError::InvalidHandle)?;
        let sock = self.sockets.udp_mut(i).ok_or(UdpSendError::InvalidHandle)?;
        if !sock.send(to, data) {
            return Err(UdpSendError::Full);
        }
        self.sockets.touch(i);
        Ok(())
    }

    /// Takes the oldest received datagram: copies what fits in `buf` and
    /// returns its full length and source; `Ok(None)` if none is waiting.
    pub fn udp_recv_from(
        &mut self,
        h: SocketHandle,
        buf: &mut [u8],
    ) -> Result<Option<(usize, Endpoint)>, HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        let sock = self.sockets.udp_mut(i).ok_or(HandleError::WrongKind)?;
        Ok(sock.recv(buf))
    }

    /// The full length of the oldest received datagram, left where it is;
    /// `Ok(None)` if none is waiting. A reader with a bounded buffer of
    /// its own takes a datagram only when it fits, and leaves the rest to
    /// the socket's queue, whose overflow is counted (`udp_drops`).
    pub fn udp_peek_len(&self, h: SocketHandle) -> Result<Option<usize>, HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        match self.sockets.get(i) {
            Some(Socket::Udp(u)) => Ok(u.peek_len()),
            _ => Err(HandleError::WrongKind),
        }
    }

    /// Datagrams handed to the port so far on this socket: their payload
    /// references are released.
    pub fn udp_sent(&self, h: SocketHandle) -> Result<u64, HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        match self.sockets.get(i) {
            Some(Socket::Udp(u)) => Ok(u.tx_done),
            _ => Err(HandleError::WrongKind),
        }
    }
}
