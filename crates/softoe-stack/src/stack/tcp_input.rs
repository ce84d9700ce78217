//! TCP segments in: demultiplexing, listeners, SYN cookies and resets.

use alloc::boxed::Box;
use core::time::Duration;

use softoe_wire::{
    ChecksumCaps, IpProtocol, Ipv4Address, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};

use crate::config::{SynCookies, TcpConfig};
use crate::device::{Device, RxMeta, RxRing};
use crate::iface::IpFields;
use crate::socket::Socket;
use crate::tcp::input::{Ctx, Reply, rst_for};
use crate::tcp::output::SinkError;
use crate::tcp::socket::{PathCaps, TcpSocket};
use crate::tcp::syncookie;
use crate::tcp::{Endpoint, State, seq};
use crate::time::Instant;

use super::Stack;

impl Stack {
    pub(super) fn receive_tcp<D: Device>(
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

    /// A new connection's socket from `local` to `remote` with `cfg` (its
    /// RTO floor the route's, where the route has one), and its initial
    /// sequence number.
    pub(super) fn new_connection(
        &mut self,
        now: Instant,
        mut cfg: TcpConfig,
        local: Endpoint,
        remote: Endpoint,
    ) -> (Box<TcpSocket>, TcpSeqNumber) {
        cfg.min_rto = self.route_rto_min(remote.addr).unwrap_or(cfg.min_rto);
        let iss = self
            .isn
            .isn(now, (local.addr, local.port), (remote.addr, remote.port));
        let path = self.path_for(remote.addr, now);
        (self.sockets.new_tcp(cfg, path, now), iss)
    }

    /// The path toward `peer`: the device's, with a smaller MTU where one
    /// was learnt (path-MTU discovery).
    pub(super) fn path_for(&self, peer: Ipv4Address, now: Instant) -> PathCaps {
        match self.pmtu.mtu(peer, now) {
            Some(mtu) if mtu < self.path.mtu => PathCaps { mtu, ..self.path },
            _ => self.path,
        }
    }

    /// The per-route RTO floor for `peer`, if a route names one.
    pub(super) fn route_rto_min(&self, peer: Ipv4Address) -> Option<Duration> {
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
        let cfg = lst.cfg;
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
        let (mut sock, iss) = self.new_connection(now, cfg, local, remote);
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
}
