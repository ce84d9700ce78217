//! The program's commands, decoded and carried out.

use std::collections::HashMap;

use softoe_abi::{
    CMD_QUIET, CONGESTION_CUBIC, CONGESTION_RENO, Command, Completion, Request, RingSpan, SHUT_RD,
    SHUT_WR, SendSource, SockKind, SockOpt, TcpInfoRecord, decode, errno, pack_addr,
};
use softoe_stack::{Algorithm, BindError, Endpoint, Instant, Keepalive, SocketHandle, Stack};
use tracing::debug;

use super::*;
use crate::host::HostConfig;
use crate::memory::Memory;

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

impl Session {
    /// Carries out one command; returns the payload bytes it handed over
    /// (a `SEND`'s: its result, or its length when the answer comes
    /// later), for the `cmd` stage's timing.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn command(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        cfg: &HostConfig,
        slot: usize,
        owner: &mut HashMap<SocketHandle, usize>,
        scratch: &mut Vec<u8>,
        mem: &mut Memory,
        c: &Command,
    ) -> u64 {
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
                self.request(now, stack, cfg, slot, owner, scratch, mem, req, &mut done)
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

    #[allow(clippy::too_many_arguments)]
    pub(super) fn request(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        cfg: &HostConfig,
        slot: usize,
        owner: &mut HashMap<SocketHandle, usize>,
        scratch: &mut Vec<u8>,
        mem: &mut Memory,
        req: Request,
        done: &mut Completion,
    ) -> Result<Option<i64>> {
        match req {
            Request::Nop => Ok(Some(0)),
            Request::Socket { kind, rx, tx } => {
                let id = self.new_id()?;
                self.install(id, HSock::new(kind, rx, tx));
                done.sock = id;
                Ok(Some(i64::from(id)))
            }
            Request::Bind { sock, addr, port } => {
                let ep = endpoint(addr, port);
                let s = self.sock(sock)?;
                if s.h.is_some() || s.bound.is_some() {
                    return Err(errno::EINVAL);
                }
                if !ep.addr.is_unspecified() && !stack.has_addr(ep.addr) {
                    return Err(errno::EADDRNOTAVAIL);
                }
                let kind = s.kind;
                let ep = if kind == SockKind::Udp {
                    let (h, port) = udp_bind(stack, ep)?;
                    let bound = Endpoint::new(ep.addr, port);
                    owner.insert(h, slot);
                    self.by_handle.insert(h, sock);
                    let s = self.sock(sock)?;
                    s.h = Some(h);
                    let opts = s.opts;
                    apply_opts(now, stack, h, &opts);
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
            Request::Listen { sock, backlog } => {
                let s = self.sock(sock)?;
                if s.kind != SockKind::Tcp {
                    return Err(errno::EOPNOTSUPP);
                }
                if s.listener {
                    return Ok(Some(0));
                }
                if s.h.is_some() {
                    return Err(errno::EINVAL);
                }
                let Some(ep) = s.bound else {
                    return Err(errno::EDESTADDRREQ);
                };
                let h = stack
                    .tcp_listen(ep, backlog as usize, None)
                    .map_err(bind_errno)?;
                s.h = Some(h);
                s.listener = true;
                let opts = s.opts;
                apply_opts(now, stack, h, &opts);
                owner.insert(h, slot);
                self.by_handle.insert(h, sock);
                Ok(Some(0))
            }
            Request::Accept { sock, rx, tx } => {
                let s = self.sock(sock)?;
                let (true, Some(lh)) = (s.listener, s.h) else {
                    return Err(errno::EINVAL);
                };
                let id = self.new_id()?;
                let Some(h) = stack.tcp_accept(lh).map_err(handle_errno)? else {
                    return Err(errno::EAGAIN);
                };
                let info = stack.tcp_info(h).map_err(handle_errno)?;
                let mut n = HSock::new(SockKind::Tcp, rx, tx);
                n.h = Some(h);
                owner.insert(h, slot);
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
                n.opts.priority = stack.priority(h).ok();
                apply_opts(now, stack, h, &n.opts);
                self.by_handle.insert(h, id);
                n.dirty = false;
                self.occupy(id, n);
                done.sock = id;
                done.aux = packed(info.remote);
                Ok(Some(i64::from(id)))
            }
            Request::Connect { sock, addr, port } => {
                let remote = endpoint(addr, port);
                let s = self.sock(sock)?;
                if s.kind == SockKind::Udp {
                    s.peer = Some(remote);
                    if let Some(v) = self.region.slot(sock) {
                        v.set_remote(pack_addr(addr, port));
                    }
                    return Ok(Some(0));
                }
                if s.listener {
                    return Err(errno::EINVAL);
                }
                if s.h.is_some() {
                    return Err(if s.connect_tag.is_some() {
                        errno::EALREADY
                    } else {
                        errno::EISCONN
                    });
                }
                let local = s.bound.filter(|b| b.port != 0 || !b.addr.is_unspecified());
                let h = stack
                    .tcp_connect(now, remote, local, None)
                    .map_err(bind_errno)?;
                s.h = Some(h);
                s.connect_tag = Some(done.tag);
                let opts = s.opts;
                apply_opts(now, stack, h, &opts);
                owner.insert(h, slot);
                self.by_handle.insert(h, sock);
                if let Some(v) = self.region.slot(sock) {
                    v.set_remote(pack_addr(addr, port));
                    if let Ok(i) = stack.tcp_info(h) {
                        v.set_local(packed(i.local));
                    }
                }
                Ok(None)
            }
            Request::Send {
                sock,
                source: SendSource::RingQueued,
                len,
                ..
            } => {
                let data = self.data_region(mem);
                self.queue_ring(stack, sock, len, data)
                    .map(|n| Some(n as i64))
            }
            Request::Send {
                sock,
                source: SendSource::Queued { offset },
                len,
                ..
            } => {
                let data = self.data_region(mem);
                // The one answer is the release, errors included.
                if let Err(e) = self.queue_send(stack, sock, done.tag, offset, len, data) {
                    self.rejected += 1;
                    self.complete_release(done.tag, sock, -i64::from(e));
                }
                Ok(None)
            }
            Request::Send {
                sock,
                source,
                len,
                to,
                more: _,
            } => {
                let data = self.data_region(mem);
                let kind = self.sock(sock)?.kind;
                let n = if kind == SockKind::Udp {
                    self.send_udp(stack, sock, source, len, to, scratch, mem)?
                } else {
                    self.send_tcp(stack, cfg, sock, source, len, mem, data, done.tag)?
                };
                Ok(Some(n as i64))
            }
            Request::RxDone { sock } => {
                self.sock(sock)?.hold = false;
                Ok(Some(0))
            }
            Request::Arm { sock } => {
                let s = self.sock(sock)?;
                s.events = u32::MAX;
                Ok(Some(0))
            }
            Request::Recv { sock, target, len } => {
                let view_head = self.region.slot(sock).map(|v| v.rx_head());
                let s = self.sock(sock)?;
                if s.kind != SockKind::Tcp || s.listener || s.h.is_none() {
                    return Err(errno::ENOTCONN);
                }
                if s.posted.is_some() {
                    return Err(errno::EBUSY);
                }
                // Bytes already in the ring come first: the program reads
                // them, then posts again.
                let head = view_head.unwrap_or(s.rx_head).clamp(s.rx_head, s.rx_tail);
                if head != s.rx_tail {
                    return Err(errno::EAGAIN);
                }
                s.posted = Some(Posted {
                    tag: done.tag,
                    target,
                    len,
                });
                // Served this turn (`command` marks the socket): what the
                // stack holds already is placed at once.
                Ok(None)
            }
            Request::CancelRecv { sock } => {
                let s = self.sock(sock)?;
                let p = s.posted.take().ok_or(errno::ENOENT)?;
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
            Request::Adopt {
                from_session,
                from_sock,
                secret,
                rx,
                tx,
            } => {
                // Another session is involved: reserve the id now, let the
                // host service finish it after this turn.
                let id = self.new_id()?;
                self.install(id, HSock::new(SockKind::Tcp, rx, tx));
                self.adopts.push((
                    done.tag,
                    id,
                    Adopt {
                        from_session,
                        from_sock,
                        secret,
                    },
                ));
                Ok(None)
            }
            Request::Shutdown { sock, how } => {
                let s = self.sock(sock)?;
                let Some(h) = s.h else {
                    return Err(errno::ENOTCONN);
                };
                if s.kind == SockKind::Tcp && !s.listener && how != SHUT_RD {
                    if s.queued.is_empty() {
                        stack.tcp_shutdown(h).map_err(handle_errno)?;
                    } else {
                        // The FIN follows the queued bytes, as a kernel
                        // socket's follows its send buffer.
                        s.fin_after_queue = true;
                    }
                }
                if how != SHUT_WR {
                    // Reading is over: what arrives is dropped.
                    s.rx_fin = true;
                }
                Ok(Some(0))
            }
            Request::Close { sock, abort } => {
                match self.socks.get(sock as usize).and_then(Option::as_ref) {
                    Some(s) if s.detached.is_none() => {}
                    _ => return Err(errno::EBADF),
                }
                self.close_sock(now, stack, sock, Some(done.tag), abort);
                Ok(Some(0))
            }
            Request::SetOpt { sock, opt, values } => {
                let s = self.sock(sock)?;
                let on = values[0] != 0;
                match opt {
                    SockOpt::NoDelay => s.opts.nodelay = Some(on),
                    SockOpt::KeepAlive => {
                        let secs = |v: u64, d: std::time::Duration| {
                            if v == 0 {
                                d
                            } else {
                                std::time::Duration::from_secs(v)
                            }
                        };
                        let def = Keepalive::default();
                        s.opts.keepalive = Some(on.then(|| Keepalive {
                            idle: secs(values[1], def.idle),
                            interval: secs(values[2], def.interval),
                            count: if values[3] == 0 {
                                def.count
                            } else {
                                values[3].min(255) as u32
                            },
                        }));
                    }
                    SockOpt::UserTimeout => {
                        s.opts.user_timeout =
                            Some(on.then(|| std::time::Duration::from_millis(values[0])));
                    }
                    // Recorded; the stack's Nagle covers what programs use it for.
                    SockOpt::Cork | SockOpt::Policy => return Ok(Some(0)),
                    SockOpt::Tos => s.opts.tos = Some(values[0] as u8),
                    SockOpt::Ttl => {
                        s.opts.ttl = Some(u8::try_from(values[0]).map_err(|_| errno::EINVAL)?)
                    }
                    // The decoder refused more than a byte already.
                    SockOpt::Priority => {
                        s.opts.priority = Some(u8::try_from(values[0]).map_err(|_| errno::EINVAL)?)
                    }
                    SockOpt::Congestion => {
                        s.opts.congestion = Some(match u32::try_from(values[0]) {
                            Ok(CONGESTION_RENO) => Algorithm::NewReno,
                            Ok(CONGESTION_CUBIC) => Algorithm::Cubic,
                            _ => return Err(errno::ENOENT),
                        })
                    }
                    SockOpt::QuickAck => s.opts.quickack = Some(on),
                    _ => return Err(errno::ENOPROTOOPT),
                }
                // A listener takes what passes to its connections (TOS,
                // TTL, priority, algorithm); the rest fails there harmlessly.
                if let Some(h) = s.h {
                    let opts = s.opts;
                    apply_opts(now, stack, h, &opts);
                }
                Ok(Some(0))
            }
            Request::Info { sock, offset, len } => {
                let s = self.sock(sock)?;
                let h = s.h.ok_or(errno::ENOTCONN)?;
                let i = stack.tcp_info(h).map_err(handle_errno)?;
                let rec = TcpInfoRecord {
                    state: linux_state(i.state),
                    snd_mss: i.snd_mss,
                    rtt_us: i.srtt.as_micros().min(u32::MAX as u128) as u32,
                    rttvar_us: i.rttvar.as_micros().min(u32::MAX as u128) as u32,
                    rto_us: i.rto.as_micros().min(u32::MAX as u128) as u32,
                    snd_cwnd: i.cwnd / i.snd_mss.max(1),
                    snd_ssthresh: i.ssthresh / i.snd_mss.max(1),
                    total_retrans: i.retransmits.min(u32::MAX as u64) as u32,
                    bytes_acked: i.bytes_acked,
                    bytes_received: i.bytes_received,
                    segs_out: i.segs_out,
                    segs_in: i.segs_in,
                    local: packed(i.local),
                    remote: packed(i.remote),
                    congestion: match i.congestion {
                        Algorithm::NewReno => CONGESTION_RENO,
                        _ => CONGESTION_CUBIC,
                    },
                    // The stack's, not this socket's record: an accepted
                    // connection has its listener's, whoever set that.
                    priority: u32::from(stack.priority(h).unwrap_or(0)),
                };
                // SAFETY: `rec` is plain integers; viewing it as bytes is
                // sound and the slice does not outlive it.
                let bytes = unsafe {
                    std::slice::from_raw_parts(
                        (&raw const rec).cast::<u8>(),
                        size_of::<TcpInfoRecord>(),
                    )
                };
                let n = (len as usize).min(bytes.len());
                let span = RingSpan {
                    offset,
                    len: n as u64,
                };
                if n > 0 && !self.region.ring_write(span, 0, &bytes[..n]) {
                    return Err(errno::EFAULT);
                }
                Ok(Some(n as i64))
            }
            _ => Err(errno::ENOSYS),
        }
    }
}
