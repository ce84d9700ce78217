//! The program's commands, decoded and carried out.

use softoe_abi::{
    CMD_QUIET, Command, Completion, RecvTarget, Request, RingSpan, SHUT_RD, SHUT_WR, SendSource,
    SlotView, SockKind, decode, errno, pack_addr,
};
use softoe_stack::{BindError, Endpoint, Instant, SocketHandle, Stack};
use tracing::debug;

use super::adopt::Adopt;
use super::recv::sync_sink;
use super::sock::{HSock, Opts, Posted};
use super::translate::{bind_errno, endpoint, handle_errno, packed};
use super::{Ctx, Program, Result, SessionCore};

pub(super) fn apply_opts(now: Instant, stack: &mut Stack, h: SocketHandle, o: &Opts) {
    if let Some(tos) = o.tos {
        let _ = stack.set_tos(h, tos);
    }
    if let Some(ttl) = o.ttl {
        let _ = stack.set_ttl(h, ttl);
    }
    if let Some(p) = o.priority {
        let _ = stack.set_priority(h, p);
    }
    if let Some(a) = o.congestion {
        let _ = stack.tcp_set_congestion(h, a);
    }
    if let Some(quick) = o.quickack {
        let delay = if quick {
            None
        } else {
            stack.config().tcp.delayed_ack
        };
        let _ = stack.tcp_set_delayed_ack(h, delay);
    }
    if let Some(on) = o.nodelay {
        let _ = stack.tcp_set_nodelay(h, on);
    }
    if let Some(ka) = o.keepalive {
        let _ = stack.tcp_set_keepalive(now, h, ka);
    }
    if let Some(t) = o.user_timeout {
        let _ = stack.tcp_set_user_timeout(h, t);
    }
}

/// Binds a UDP socket; port 0 takes an ephemeral port. Returns the port.
pub(super) fn udp_bind(stack: &mut Stack, ep: Endpoint) -> Result<(SocketHandle, u16)> {
    if ep.port != 0 {
        return stack
            .udp_bind(ep, None)
            .map(|h| (h, ep.port))
            .map_err(bind_errno);
    }
    let start = (stack.socket_count() as u16).wrapping_mul(7919);
    for i in 0..16_384u16 {
        let port = 49_152 + (start.wrapping_add(i) % 16_384);
        match stack.udp_bind(Endpoint::new(ep.addr, port), None) {
            Ok(h) => return Ok((h, port)),
            Err(BindError::AddrInUse) => continue,
            Err(e) => return Err(bind_errno(e)),
        }
    }
    Err(errno::EADDRINUSE)
}

impl<P: Program> SessionCore<P> {
    /// Carries out one command; returns the payload bytes it handed over
    /// (a `SEND`'s: its result, or its length when the answer comes
    /// later), for the `cmd` stage's timing.
    pub(super) fn command(&mut self, cx: &mut Ctx<'_>, c: &Command) -> u64 {
        let quiet = c.flags & CMD_QUIET != 0;
        let mut done = Completion {
            tag: c.tag,
            sock: c.sock,
            ..Completion::default()
        };
        let rejected = self.rejected;
        let mut send_len = None;
        let r = match decode(c, self.region.layout()) {
            Ok(req) => {
                if let Request::Send { len, .. } = req {
                    send_len = Some(len);
                }
                self.request(cx, req, &mut done)
            }
            Err(e) => Err(e),
        };
        let bytes = match (send_len, &r) {
            (Some(_), Ok(Some(n))) => u64::try_from(*n).unwrap_or(0),
            // Answered later (a zero-copy send's release), unless refused.
            (Some(len), Ok(None)) if self.rejected == rejected => len,
            _ => 0,
        };
        self.mark(c.sock);
        self.mark(done.sock);
        match r {
            Ok(Some(v)) => {
                done.result = v;
                if !quiet {
                    self.complete(done);
                }
            }
            // Completes later (connect).
            Ok(None) => {}
            Err(e) => {
                if e != errno::EAGAIN {
                    self.rejected += 1;
                }
                debug!(
                    session = self.id,
                    opcode = c.opcode,
                    sock = c.sock,
                    errno = e,
                    "command refused"
                );
                done.result = -i64::from(e);
                self.complete(done);
            }
        }
        bytes
    }

    /// One decoded command, carried out: `Some(result)` to complete it
    /// now, `None` when its answer comes later (a connect, a posted
    /// receive, an adopt, a queued send's release), or an errno.
    fn request(
        &mut self,
        cx: &mut Ctx<'_>,
        req: Request,
        done: &mut Completion,
    ) -> Result<Option<i64>> {
        match req {
            Request::Nop => Ok(Some(0)),
            Request::Socket { kind, rx, tx } => self.socket(kind, rx, tx, done),
            Request::Bind { sock, addr, port } => self.bind(cx, sock, endpoint(addr, port), done),
            Request::Listen { sock, backlog } => self.listen(cx, sock, backlog),
            Request::Accept { sock, rx, tx } => self.accept(cx, sock, (rx, tx), done),
            Request::Connect { sock, addr, port } => self.connect(cx, sock, (addr, port), done),
            Request::Send {
                sock,
                source,
                len,
                to,
                more: _,
            } => self.send(cx, sock, source, len, to, done),
            Request::RxDone { sock } => {
                if let Some(t) = self.sock(sock)?.tcp_mut() {
                    t.hold = false;
                }
                Ok(Some(0))
            }
            Request::Arm { sock } => {
                self.sock(sock)?.events = u32::MAX;
                Ok(Some(0))
            }
            Request::Recv {
                sock,
                target,
                len,
                nowait,
                peek,
            } => self.recv(cx.stack, sock, target, len, (nowait, peek), done),
            Request::CancelRecv { sock } => self.cancel_recv(sock),
            Request::Adopt { grant, rx, tx } => self.adopt(Adopt { grant }, rx, tx, done),
            Request::Shutdown { sock, how } => self.shutdown(cx, sock, how),
            Request::Close { sock, abort } => self.close(cx, sock, abort, done),
            Request::SetOpt { sock, opt, values } => self.set_opt(cx, sock, opt, values),
            Request::Info { sock, offset, len } => self.info(cx, sock, RingSpan { offset, len }),
            _ => Err(errno::ENOSYS),
        }
    }

    /// `SOCKET`: a new socket id with its rings.
    fn socket(
        &mut self,
        kind: SockKind,
        rx: RingSpan,
        tx: RingSpan,
        done: &mut Completion,
    ) -> Result<Option<i64>> {
        let id = self.new_id()?;
        self.install(id, HSock::new(kind, rx, tx));
        done.sock = id;
        Ok(Some(i64::from(id)))
    }

    /// `BIND`: a TCP socket records its address (the stack sees it at
    /// `LISTEN` or `CONNECT`), refused with `EADDRINUSE` if a listener
    /// holds it that this one could not listen beside — Linux refuses a
    /// listener's port at `bind`, and a program that sees `bind` succeed
    /// and `listen` fail may not recover (haproxy closes the descriptor
    /// and keeps using its number); a UDP socket is bound in the stack
    /// now.
    fn bind(
        &mut self,
        cx: &mut Ctx<'_>,
        sock: u32,
        ep: Endpoint,
        done: &mut Completion,
    ) -> Result<Option<i64>> {
        let s = self.sock(sock)?;
        if s.h.is_some() || s.bound.is_some() {
            return Err(errno::EINVAL);
        }
        if !ep.addr.is_unspecified() && !cx.stack.has_addr(ep.addr) {
            return Err(errno::EADDRNOTAVAIL);
        }
        let (kind, reuseport) = (s.kind, s.opts.reuseport);
        // Linux's rule (`inet_bind`): a port below the threshold needs
        // `CAP_NET_BIND_SERVICE`, judged by the kernel's view of the
        // program, for TCP and UDP alike.
        if ep.port != 0
            && ep.port < cx.cfg.unprivileged_port_start
            && !self.io.may_bind_privileged()
        {
            return Err(errno::EACCES);
        }
        if kind == SockKind::Tcp && ep.port != 0 {
            let owner = reuseport.then(|| self.user());
            cx.stack.tcp_listen_check(ep, owner).map_err(bind_errno)?;
        }
        let ep = if kind == SockKind::Udp {
            let (h, port) = udp_bind(cx.stack, ep)?;
            let bound = Endpoint::new(ep.addr, port);
            cx.owner.insert(h, cx.slot);
            self.by_handle.insert(h, sock);
            let s = self.sock(sock)?;
            s.h = Some(h);
            let opts = s.opts;
            apply_opts(cx.now, cx.stack, h, &opts);
            bound
        } else {
            ep
        };
        let s = self.sock(sock)?;
        s.bound = Some(ep);
        done.aux = packed(ep);
        if let Some(v) = self.region.slot(sock) {
            v.set_local(done.aux);
        }
        Ok(Some(0))
    }

    /// The user a reuseport group of this program's belongs to: the one
    /// it runs as now (Linux compares the sockets' users), else the one
    /// it attached as.
    fn user(&mut self) -> u32 {
        self.io.uid().unwrap_or(self.uid)
    }

    /// `LISTEN`.
    fn listen(&mut self, cx: &mut Ctx<'_>, sock: u32, backlog: u32) -> Result<Option<i64>> {
        let s = self.sock(sock)?;
        if s.kind != SockKind::Tcp {
            return Err(errno::EOPNOTSUPP);
        }
        if s.is_listener() {
            return Ok(Some(0));
        }
        if s.h.is_some() {
            return Err(errno::EINVAL);
        }
        let Some(ep) = s.bound else {
            return Err(errno::EDESTADDRREQ);
        };
        let reuseport = s.opts.reuseport;
        let r = if reuseport {
            let owner = self.user();
            cx.stack
                .tcp_listen_reuseport(ep, backlog as usize, None, owner)
        } else {
            cx.stack.tcp_listen(ep, backlog as usize, None)
        };
        let h = r.map_err(bind_errno)?;
        let s = self.sock(sock)?;
        s.h = Some(h);
        s.become_listener(false);
        let opts = s.opts;
        apply_opts(cx.now, cx.stack, h, &opts);
        cx.owner.insert(h, cx.slot);
        self.by_handle.insert(h, sock);
        Ok(Some(0))
    }

    /// `ACCEPT`: the next connection the listener has, on a new socket
    /// id with the rings the program gave.
    fn accept(
        &mut self,
        cx: &mut Ctx<'_>,
        sock: u32,
        (rx, tx): (RingSpan, RingSpan),
        done: &mut Completion,
    ) -> Result<Option<i64>> {
        let s = self.sock(sock)?;
        let (true, Some(lh)) = (s.is_listener(), s.h) else {
            return Err(errno::EINVAL);
        };
        let id = self.new_id()?;
        let Some(h) = cx.stack.tcp_accept(lh).map_err(handle_errno)? else {
            return Err(errno::EAGAIN);
        };
        let info = cx.stack.tcp_info(h).map_err(handle_errno)?;
        let mut n = HSock::new(SockKind::Tcp, rx, tx);
        n.h = Some(h);
        cx.owner.insert(h, cx.slot);
        if let Some(v) = self.region.slot(id) {
            v.reset();
            v.set_local(packed(info.local));
            v.set_remote(packed(info.remote));
        }
        // Options set on the listener carry over, as in Linux.
        if let Some(Some(l)) = self.socks.get(sock as usize) {
            n.opts = l.opts;
        }
        // The priority the stack gave it from the listener is the
        // one to keep: a shared listener's may have been changed
        // since by another session, whose record this is not.
        n.opts.priority = cx.stack.priority(h).ok();
        apply_opts(cx.now, cx.stack, h, &n.opts);
        self.by_handle.insert(h, id);
        self.occupy(id, n);
        done.sock = id;
        done.aux = packed(info.remote);
        Ok(Some(i64::from(id)))
    }

    /// `CONNECT`: a UDP socket records its peer; a TCP socket starts its
    /// handshake and is answered when it ends (`serve`).
    fn connect(
        &mut self,
        cx: &mut Ctx<'_>,
        sock: u32,
        (addr, port): (u32, u16),
        done: &mut Completion,
    ) -> Result<Option<i64>> {
        let remote = endpoint(addr, port);
        let s = self.sock(sock)?;
        if let Some(u) = s.udp_mut() {
            u.peer = Some(remote);
            if let Some(v) = self.region.slot(sock) {
                v.set_remote(pack_addr(addr, port));
            }
            return Ok(Some(0));
        }
        if s.is_listener() {
            return Err(errno::EINVAL);
        }
        if s.h.is_some() {
            return Err(if s.tcp().is_some_and(|t| t.connect_tag.is_some()) {
                errno::EALREADY
            } else {
                errno::EISCONN
            });
        }
        let local = s.bound.filter(|b| b.port != 0 || !b.addr.is_unspecified());
        let h = cx
            .stack
            .tcp_connect(cx.now, remote, local, None)
            .map_err(bind_errno)?;
        s.h = Some(h);
        if let Some(t) = s.tcp_mut() {
            t.connect_tag = Some(done.tag);
        }
        let opts = s.opts;
        apply_opts(cx.now, cx.stack, h, &opts);
        cx.owner.insert(h, cx.slot);
        self.by_handle.insert(h, sock);
        if let Some(v) = self.region.slot(sock) {
            v.set_remote(pack_addr(addr, port));
            if let Ok(i) = cx.stack.tcp_info(h) {
                v.set_local(packed(i.local));
            }
        }
        Ok(None)
    }

    /// `SEND`, by its source: queued (zero-copy buffers, or ring bytes
    /// the engine feeds as room frees) or taken at once.
    fn send(
        &mut self,
        cx: &mut Ctx<'_>,
        sock: u32,
        source: SendSource,
        len: u64,
        to: Option<(u32, u16)>,
        done: &mut Completion,
    ) -> Result<Option<i64>> {
        let data = self.data_region(cx.mem);
        match source {
            SendSource::RingQueued => self.queue_ring(cx, sock, len, data).map(|n| Some(n as i64)),
            SendSource::Queued { offset } => {
                // The one answer is the release, errors included.
                if let Err(e) = self.queue_send(cx, sock, done.tag, offset, len, data) {
                    self.rejected += 1;
                    self.complete_release(done.tag, sock, -i64::from(e));
                }
                Ok(None)
            }
            _ => {
                let kind = self.sock(sock)?.kind;
                let n = if kind == SockKind::Udp {
                    self.send_udp(cx, sock, source, len, to)?
                } else {
                    self.send_tcp(cx, sock, source, len, data, done.tag)?
                };
                Ok(Some(n as i64))
            }
        }
    }

    /// `RECV`: a buffer posted for direct placement; `(nowait, peek)`
    /// answer it at once and leave the bytes in place.
    fn recv(
        &mut self,
        stack: &mut Stack,
        sock: u32,
        target: RecvTarget,
        len: u64,
        (nowait, peek): (bool, bool),
        done: &mut Completion,
    ) -> Result<Option<i64>> {
        let region = self.region;
        let view = region.slot(sock);
        let view_head = view.as_ref().map(SlotView::rx_head);
        let s = self.sock(sock)?;
        let h = match s.h {
            Some(h) if s.is_tcp() => h,
            _ => return Err(errno::ENOTCONN),
        };
        if s.tcp().is_some_and(|t| t.posted.is_some()) {
            return Err(errno::EBUSY);
        }
        // What the stack wrote into the ring counts (and it writes there
        // no more: if the post is taken, nothing may overtake it; if not,
        // the serve after this command opens the ring again).
        if let Some(v) = &view {
            s.rx_head = view_head.unwrap_or(s.rx_head).clamp(s.rx_head, s.rx_tail);
            sync_sink(stack, h, s, v, 0, false);
        }
        // Bytes already in the ring come first: the program reads
        // them, then posts again.
        let head = view_head.unwrap_or(s.rx_head).clamp(s.rx_head, s.rx_tail);
        if head != s.rx_tail {
            return Err(errno::EAGAIN);
        }
        if let Some(t) = s.tcp_mut() {
            t.posted = Some(Posted {
                tag: done.tag,
                target,
                len,
                nowait,
                peek,
            });
        }
        // Served this turn (`command` marks the socket): what the
        // stack holds already is placed at once.
        Ok(None)
    }

    /// `CANCEL_RECV`.
    fn cancel_recv(&mut self, sock: u32) -> Result<Option<i64>> {
        let s = self.sock(sock)?;
        let p = s
            .tcp_mut()
            .and_then(|t| t.posted.take())
            .ok_or(errno::ENOENT)?;
        // Answered before the cancel itself: the program waits for
        // the receive's completion, never for a buffer in limbo.
        self.complete(Completion {
            tag: p.tag,
            result: -i64::from(errno::ECANCELED),
            sock,
            ..Completion::default()
        });
        Ok(Some(0))
    }

    /// `ADOPT`: a socket id reserved for a connection or listener of
    /// another session, which the host service resolves after this turn.
    fn adopt(
        &mut self,
        a: Adopt,
        rx: RingSpan,
        tx: RingSpan,
        done: &mut Completion,
    ) -> Result<Option<i64>> {
        // Another session is involved: reserve the id now, let the
        // host service finish it after this turn.
        let id = self.new_id()?;
        self.install(id, HSock::new(SockKind::Tcp, rx, tx));
        self.adopts.push((done.tag, id, a));
        Ok(None)
    }

    /// `SHUTDOWN`.
    fn shutdown(&mut self, cx: &mut Ctx<'_>, sock: u32, how: u64) -> Result<Option<i64>> {
        let s = self.sock(sock)?;
        let Some(h) = s.h else {
            return Err(errno::ENOTCONN);
        };
        if s.is_tcp() && how != SHUT_RD {
            if s.queue_empty() {
                cx.stack.tcp_shutdown(h).map_err(handle_errno)?;
            } else {
                // The FIN follows the queued bytes, as a kernel
                // socket's follows its send buffer.
                if let Some(t) = s.tcp_mut() {
                    t.fin_after_queue = true;
                }
            }
        }
        if how != SHUT_WR {
            // Reading is over: what arrives is dropped.
            s.rx_fin = true;
        }
        Ok(Some(0))
    }

    /// `CLOSE`.
    fn close(
        &mut self,
        cx: &mut Ctx<'_>,
        sock: u32,
        abort: bool,
        done: &mut Completion,
    ) -> Result<Option<i64>> {
        match self.socks.get(sock as usize).and_then(Option::as_ref) {
            Some(s) if s.detached.is_none() => {}
            _ => return Err(errno::EBADF),
        }
        self.close_sock(cx.now, cx.stack, cx.shares, sock, Some(done.tag), abort);
        Ok(Some(0))
    }
}
