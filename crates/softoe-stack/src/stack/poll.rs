//! Driving the stack: the poll timers, socket service and events.

use softoe_wire::{ArpOperation, ArpRepr, IpProtocol, UdpPacket, UdpRepr};

use crate::device::Device;
use crate::socket::{Events, Socket, SocketHandle};
use crate::tcp::State;
use crate::tcp::output::SinkError;
use crate::tcp::socket::TcpSocket;
use crate::time::Instant;

use super::Stack;

impl Stack {
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

    pub(super) fn service_tcp<D: Device>(
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
    pub(super) fn after_tcp(&mut self, now: Instant, i: usize, prev: State) {
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
    pub(super) fn shed(&mut self, i: usize) {
        if let Some(st) = self.sockets.tcp_mut(i).and_then(TcpSocket::shed_storage) {
            self.sockets.keep_storage(st);
        }
    }
}
