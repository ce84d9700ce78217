//! The socket calls on a softoe socket: `connect`, `bind`, `listen`,
//! `accept`, the addresses, `recv`, `send`, `shutdown` and `FIONREAD`, each
//! by the socket's state, with Linux's answers.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use libc::c_int;
use tracing::debug;

use super::fork::stream_of;
use super::{Kind, Listener, Res, Sock, St, Stream, Udp, errno_of, lock, shim};

/// What became of a `connect`.
pub(crate) enum Connect {
    /// The kernel serves it: call the real `connect`.
    Kernel,
    Done(Res<c_int>),
}

impl Sock {
    pub(crate) fn connect(&self, to: SocketAddrV4) -> Connect {
        let st = self.state();
        match st {
            St::Fresh { .. } => {
                if !shim().rules.softoe_serves(*to.ip()) {
                    return Connect::Kernel;
                }
                let Some(c) = shim().client() else {
                    return match shim().fallback {
                        true => Connect::Kernel,
                        false => Connect::Done(Err(libc::ENETDOWN)),
                    };
                };
                match self.kind {
                    Kind::Tcp => {
                        let opts = *lock(&self.opts);
                        let pre = crate::opts::tcp_options(&opts);
                        // Blocking or not, the handshake is started and
                        // goes on by itself; a blocking connect then waits
                        // for it as any blocking call does (a signal ends
                        // the wait, not the handshake: Linux's `EINTR`).
                        match c.tcp_connect_nonblocking_with(to, &pre) {
                            Ok(t) => {
                                crate::opts::apply(&t, &opts);
                                let s = Arc::new(stream_of(t, to));
                                self.set(St::Stream(s.clone()));
                                if self.nonblock.load(Ordering::Relaxed) {
                                    Connect::Done(Err(libc::EINPROGRESS))
                                } else {
                                    self.wait_connected(&s, st)
                                }
                            }
                            Err(e) => Connect::Done(Err(errno_of(&e))),
                        }
                    }
                    Kind::Udp => match c.udp_bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)) {
                        Ok(u) => {
                            crate::opts::after_udp(&u, &lock(&self.opts));
                            self.set(St::Udp(Arc::new(Udp {
                                s: Mutex::new(u),
                                peer: Mutex::new(Some(to)),
                            })));
                            Connect::Done(Ok(0))
                        }
                        Err(e) => Connect::Done(Err(errno_of(&e))),
                    },
                }
            }
            // Connecting or connected (Linux's answers): a blocking connect
            // waits for a handshake still going on.
            St::Stream(s) => {
                let r = lock(&s.w).connect_status();
                match r {
                    Err(e) if e.raw_os_error() == Some(libc::EALREADY) => {
                        if self.nonblock.load(Ordering::Relaxed) {
                            Connect::Done(Err(libc::EALREADY))
                        } else {
                            let fresh = St::Fresh { bound: None };
                            self.wait_connected(&s, fresh)
                        }
                    }
                    r => Connect::Done(r.map(|()| 0).map_err(|e| errno_of(&e))),
                }
            }
            St::Udp(u) => {
                *lock(&u.peer) = Some(to);
                Connect::Done(Ok(0))
            }
            St::Listening(_) => Connect::Done(Err(libc::EINVAL)),
            St::Lost(e) => Connect::Done(Err(e)),
            St::Inherited(_) => Connect::Done(Err(libc::EBADF)),
        }
    }

    /// A blocking connect's wait for handshake `s`: 0 once established;
    /// `EINTR` when a signal ends the wait (the handshake goes on: a
    /// later connect says `EALREADY`, then 0); `EINPROGRESS` when
    /// `SO_SNDTIMEO` runs out, as Linux. A failed handshake leaves the
    /// socket as it was before (`before`), free to connect again.
    fn wait_connected(&self, s: &Arc<Stream>, before: St) -> Connect {
        let timeout = lock(&self.opts).sndtimeo;
        let r = lock(&s.w).wait_connected(timeout);
        Connect::Done(match r {
            Ok(()) => Ok(0),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(libc::EINPROGRESS),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(libc::EINTR),
            Err(e) => {
                let still = matches!(&**lock(&self.st), St::Stream(t) if Arc::ptr_eq(t, s));
                if still {
                    self.set(before);
                }
                Err(errno_of(&e))
            }
        })
    }

    /// `bind`: `Ok(false)` when the kernel serves the address.
    pub(crate) fn bind(&self, at: SocketAddrV4) -> Res<bool> {
        match self.state() {
            St::Fresh { bound: None } => {
                if !shim().rules.softoe_serves(*at.ip()) {
                    return Ok(false);
                }
                match self.kind {
                    Kind::Tcp => {
                        let Some(c) = shim().client() else {
                            return if shim().fallback {
                                Ok(false)
                            } else {
                                Err(libc::ENETDOWN)
                            };
                        };
                        // The engine socket is made at `listen` (or
                        // `connect`), but a port a listener holds is
                        // refused here, where Linux refuses it: haproxy,
                        // told "bound" and then "cannot listen", closes
                        // the descriptor and goes on using its number.
                        // A refused bind leaves the socket unbound.
                        if at.port() != 0 {
                            let pre = crate::opts::tcp_options(&lock(&self.opts));
                            c.tcp_bind_check(at, &pre).map_err(|e| errno_of(&e))?;
                        }
                        self.set(St::Fresh { bound: Some(at) });
                        Ok(true)
                    }
                    Kind::Udp => {
                        let Some(c) = shim().client() else {
                            return if shim().fallback {
                                Ok(false)
                            } else {
                                Err(libc::ENETDOWN)
                            };
                        };
                        let mut u = c.udp_bind(at).map_err(|e| errno_of(&e))?;
                        crate::opts::after_udp(&u, &lock(&self.opts));
                        u.set_nonblocking(self.nonblock.load(Ordering::Relaxed));
                        self.set(St::Udp(Arc::new(Udp {
                            s: Mutex::new(u),
                            peer: Mutex::new(None),
                        })));
                        Ok(true)
                    }
                }
            }
            _ => Err(libc::EINVAL),
        }
    }

    pub(crate) fn listen(&self, backlog: c_int) -> Res<()> {
        match self.state() {
            St::Fresh { bound: Some(at) } if self.kind == Kind::Tcp => {
                let c = shim().client().ok_or(libc::ENETDOWN)?;
                let backlog = listen_backlog(backlog);
                let pre = crate::opts::tcp_options(&lock(&self.opts));
                let l = c
                    .tcp_listen_with(at, backlog, &pre)
                    .map_err(|e| errno_of(&e))?;
                debug!(%at, backlog, "listening on softoe");
                self.set(St::Listening(Arc::new(Listener::new(l))));
                Ok(())
            }
            // Already listening: Linux lets a program change the backlog.
            St::Listening(_) => Ok(()),
            St::Fresh { bound: None } => Err(libc::EDESTADDRREQ),
            _ => Err(libc::EINVAL),
        }
    }

    /// `accept`: the new socket and its peer.
    pub(crate) fn accept(&self) -> Res<(Sock, SocketAddrV4)> {
        let St::Listening(l) = self.state() else {
            return Err(libc::EINVAL);
        };
        let mut l = lock(&l.l);
        l.set_nonblocking(self.nonblock.load(Ordering::Relaxed));
        let (t, peer) = l.accept().map_err(|e| errno_of(&e))?;
        drop(l);
        // Linux hands the listener's options to the accepted socket.
        let opts = *lock(&self.opts);
        crate::opts::apply(&t, &opts);
        let s = Sock::new(Kind::Tcp, false, self.v6);
        *lock(&s.opts) = opts;
        s.set(St::Stream(Arc::new(stream_of(t, peer))));
        Ok((s, peer))
    }

    pub(crate) fn local_addr(&self) -> SocketAddrV4 {
        match self.state() {
            St::Fresh { bound } => {
                bound.unwrap_or_else(|| SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))
            }
            St::Listening(l) => l.local,
            St::Stream(s) => lock(&s.w).local_addr(),
            St::Udp(u) => lock(&u.s).local_addr(),
            St::Lost(_) | St::Inherited(_) => SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
        }
    }

    pub(crate) fn peer_addr(&self) -> Res<SocketAddrV4> {
        match self.state() {
            St::Stream(s) => {
                if lock(&s.w).is_connected() {
                    Ok(s.peer)
                } else {
                    Err(libc::ENOTCONN)
                }
            }
            St::Udp(u) => lock(&u.peer).ok_or(libc::ENOTCONN),
            _ => Err(libc::ENOTCONN),
        }
    }

    /// Receives into `buf`; with `from` for UDP's sender.
    pub(crate) fn recv(&self, buf: &mut [u8], flags: c_int) -> Res<(usize, Option<SocketAddrV4>)> {
        let nonblock = self.nonblock.load(Ordering::Relaxed) || flags & libc::MSG_DONTWAIT != 0;
        let timeout = lock(&self.opts).rcvtimeo;
        match self.state() {
            St::Stream(s) => {
                let mut r = lock(&s.r);
                r.set_nonblocking(nonblock);
                r.set_read_timeout(timeout);
                if flags & libc::MSG_PEEK != 0 {
                    return r.peek(buf).map(|n| (n, None)).map_err(|e| errno_of(&e));
                }
                let mut got = 0;
                loop {
                    match io::Read::read(&mut *r, &mut buf[got..]) {
                        Ok(0) => break,
                        Ok(n) => got += n,
                        Err(e)
                            if got > 0
                                && matches!(
                                    e.kind(),
                                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                                ) =>
                        {
                            break;
                        }
                        Err(e) => return Err(errno_of(&e)),
                    }
                    if flags & libc::MSG_WAITALL == 0 || got == buf.len() {
                        break;
                    }
                }
                Ok((got, None))
            }
            St::Udp(u) => {
                let mut g = lock(&u.s);
                g.set_nonblocking(nonblock);
                g.set_read_timeout(timeout);
                g.recv_from(buf)
                    .map(|(n, from)| (n, Some(from)))
                    .map_err(|e| errno_of(&e))
            }
            St::Fresh { .. } | St::Listening(_) => Err(libc::ENOTCONN),
            St::Lost(e) => Err(e),
            St::Inherited(_) => Err(libc::EBADF),
        }
    }

    /// Sends `buf`: all of it when blocking (as Linux does), what fits when
    /// not. `EPIPE` raises `SIGPIPE` unless `MSG_NOSIGNAL`.
    pub(crate) fn send(&self, buf: &[u8], flags: c_int, to: Option<SocketAddrV4>) -> Res<usize> {
        let nonblock = self.nonblock.load(Ordering::Relaxed) || flags & libc::MSG_DONTWAIT != 0;
        let timeout = lock(&self.opts).sndtimeo;
        match self.state() {
            St::Stream(s) => {
                let mut w = lock(&s.w);
                w.set_nonblocking(nonblock);
                w.set_write_timeout(timeout);
                let mut sent = 0;
                loop {
                    match io::Write::write(&mut *w, &buf[sent..]) {
                        Ok(n) => sent += n,
                        Err(e) if sent > 0 && e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if sent > 0 => {
                            debug!(error = %e, sent, "send ended early");
                            break;
                        }
                        Err(e) => return self.pipe(errno_of(&e), flags),
                    }
                    if nonblock || sent == buf.len() {
                        break;
                    }
                }
                Ok(sent)
            }
            St::Udp(u) => {
                let to = to.or(*lock(&u.peer)).ok_or(libc::EDESTADDRREQ)?;
                lock(&u.s).send_to(buf, to).map_err(|e| errno_of(&e))
            }
            St::Lost(e) => Err(e),
            St::Inherited(_) => Err(libc::EBADF),
            St::Fresh { .. } | St::Listening(_) => {
                if self.kind == Kind::Udp {
                    // An unbound UDP socket's first sendto binds it.
                    let to = to.ok_or(libc::EDESTADDRREQ)?;
                    match self.connect(to) {
                        Connect::Done(Ok(_)) => {
                            if let St::Udp(u) = self.state() {
                                *lock(&u.peer) = None;
                            }
                            return self.send(buf, flags, Some(to));
                        }
                        Connect::Done(Err(e)) => return Err(e),
                        Connect::Kernel => return Err(libc::EOPNOTSUPP),
                    }
                }
                Err(libc::ENOTCONN)
            }
        }
    }

    fn pipe(&self, e: c_int, flags: c_int) -> Res<usize> {
        if e == libc::EPIPE && flags & libc::MSG_NOSIGNAL == 0 {
            // SAFETY: raising a signal in this process, as the kernel would.
            unsafe { libc::raise(libc::SIGPIPE) };
        }
        Err(e)
    }

    pub(crate) fn shutdown(&self, how: c_int) -> Res<()> {
        match self.state() {
            // Linux: a listener ignores the sending half; the receiving
            // half disconnects it (see `stop_listening`).
            St::Listening(_) if how == libc::SHUT_WR => Ok(()),
            St::Listening(_) => self.stop_listening(),
            St::Stream(s) => {
                if how == libc::SHUT_WR || how == libc::SHUT_RDWR {
                    lock(&s.w).shutdown_write().map_err(|e| errno_of(&e))?;
                }
                Ok(())
            }
            St::Udp(_) => Ok(()),
            _ => Err(libc::ENOTCONN),
        }
    }

    /// Linux's disconnect of a listener (`connect` with `AF_UNSPEC`, or
    /// `shutdown` of its receiving half): it stops listening — what
    /// waited to be accepted is reset — and stays bound, so a later
    /// `listen` listens again on the same address. haproxy pauses its
    /// listeners so while a new process that could not bind retries, and
    /// resumes them with `listen` if that one gives up; the `AF_UNSPEC`
    /// address once moved the socket to the kernel, whose `listen` then
    /// took a random port, and the old process served nothing more.
    pub(crate) fn stop_listening(&self) -> Res<()> {
        let St::Listening(l) = self.state() else {
            return Err(libc::EINVAL);
        };
        // The engine listener closes with the last reference (a thread
        // inside `accept` holds one until it returns).
        self.set(St::Fresh {
            bound: Some(l.local),
        });
        Ok(())
    }

    /// Bytes waiting to be read (`FIONREAD`).
    pub(crate) fn pending(&self) -> usize {
        match self.state() {
            St::Stream(s) => lock(&s.r).pending() as usize,
            _ => 0,
        }
    }
}

/// The backlog a `listen(fd, backlog)` asks the engine for: Linux reads
/// the argument as unsigned, so a negative one (`listen(fd, -1)`) means
/// "as many as allowed", which the stack caps at its `somaxconn` as
/// Linux does. (It was clamped to 1: one connection waiting, a
/// client's SYN retry for the next.)
fn listen_backlog(backlog: c_int) -> u32 {
    u32::try_from(backlog).map_or(65_535, |b| b.clamp(1, 65_535))
}

#[cfg(test)]
mod tests {
    use super::listen_backlog;

    #[test]
    fn a_negative_backlog_asks_for_the_most() {
        assert_eq!(listen_backlog(-1), 65_535);
        assert_eq!(listen_backlog(i32::MIN), 65_535);
        assert_eq!(listen_backlog(0), 1);
        assert_eq!(listen_backlog(128), 128);
        assert_eq!(listen_backlog(1 << 20), 65_535);
    }
}
