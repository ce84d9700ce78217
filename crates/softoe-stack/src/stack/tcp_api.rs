//! The TCP socket API: connect, listen, accept, send, receive, close.

use alloc::boxed::Box;
use alloc::vec::Vec;

use softoe_wire::Ipv4Address;

use crate::config::TcpConfig;
use crate::device::RxRing;
use crate::payload::PayloadRef;
use crate::socket::{Events, ListenGroup, Socket, SocketHandle};
use crate::tcp::listener::TcpListener;
use crate::tcp::socket::{RxSink, TcpSocket};
use crate::tcp::{Endpoint, ListenerInfo, RecvError, SendError, State, TcpError, TcpInfo};
use crate::time::Instant;

use super::{BindError, HandleError, Stack};

impl Stack {
    /// Where a connection's receive buffer starts reading in its storage.
    #[cfg(test)]
    pub(crate) fn tcp_rx_read_position(&self, h: SocketHandle) -> Option<usize> {
        let i = self.tcp_index(h).ok()?;
        self.sockets.tcp(i).map(|s| s.rx.read_position())
    }

    pub(super) fn tcp_index(&self, h: SocketHandle) -> Result<usize, HandleError> {
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
        let cfg = cfg.unwrap_or(self.cfg.tcp);
        let (mut sock, iss) = self.new_connection(now, cfg, local, remote);
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

    pub(super) fn mark_ready(&mut self, i: usize) {
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
        let n = self
            .sockets
            .tcp_mut(i)
            .ok_or(RecvError::InvalidHandle)?
            .recv(buf)?;
        self.after_read(i);
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
        let r = self
            .sockets
            .tcp_mut(i)
            .ok_or(RecvError::InvalidHandle)?
            .recv_with(f)?;
        self.after_read(i);
        Ok(r)
    }

    /// After the application read from connection `i`: in TIME-WAIT it
    /// gives its storage back; a window update it owes goes out.
    fn after_read(&mut self, i: usize) {
        let (update, time_wait) = self.sockets.tcp(i).map_or((false, false), |s| {
            (s.window_update, s.state == State::TimeWait)
        });
        if time_wait {
            self.shed(i);
        }
        self.sockets.touch(i);
        if update {
            self.mark_ready(i);
        }
    }

    /// Sets (or with `None` takes away) the reader's receive ring for a
    /// connection: from now on, in-order bytes that find the stack's own
    /// receive buffer empty (and nothing out of order) are written there
    /// through [`Device::deliver`](crate::Device::deliver), straight from the arriving frame, at
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
    /// docs/journal/2026-11-27-receive-into-the-readers-ring.md.) Take the
    /// ring away before its memory goes (the
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

    /// Does `f` to connection `h`, which then has something to send.
    fn tcp_act(
        &mut self,
        h: SocketHandle,
        f: impl FnOnce(&mut TcpSocket),
    ) -> Result<(), HandleError> {
        let i = self.tcp_index(h)?;
        if let Some(s) = self.sockets.tcp_mut(i) {
            f(s);
        }
        self.sockets.touch(i);
        self.mark_ready(i);
        Ok(())
    }

    /// Closes the sending half (`shutdown(SHUT_WR)`): a FIN follows the data.
    pub fn tcp_shutdown(&mut self, h: SocketHandle) -> Result<(), HandleError> {
        self.tcp_act(h, TcpSocket::shutdown_send)
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
        self.tcp_act(h, TcpSocket::abort)
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
}
