//! Opening sockets: connecting, listening, binding, and taking sockets
//! another process holds into this session (`CLAIM`, then `ADOPT`).

use std::io;
use std::net::SocketAddrV4;
use std::os::fd::BorrowedFd;

use softoe_abi::{Request, RingSpan, SockKind};

use super::{Mode, Sock, Taken, TcpListener, TcpOptions, TcpStream, UdpSocket, packed};
use crate::client::Client;
use crate::errno::result;

impl Client {
    /// Connects to `addr`.
    pub fn tcp_connect(&self, addr: SocketAddrV4) -> io::Result<TcpStream> {
        self.tcp_connect_with(addr, &TcpOptions::default())
    }

    /// Connects to `addr` with `opts` set first (the SYN carries them).
    pub fn tcp_connect_with(&self, addr: SocketAddrV4, opts: &TcpOptions) -> io::Result<TcpStream> {
        let s = Sock::open(self, SockKind::Tcp)?;
        s.set_options(opts)?;
        let (addr, port) = packed(addr);
        let r = s.call(&Request::Connect {
            sock: s.id,
            addr,
            port,
        })?;
        result(&r)?;
        Ok(TcpStream::new(s))
    }

    /// Takes the socket behind `fd` into this client's session: `fd` is a
    /// softoe socket's watched descriptor ([`TcpStream::watch_across_fork`],
    /// [`TcpListener::watch_across_fork`]) that this process holds —
    /// inherited across `fork` or `exec`, or received over a Unix socket.
    /// The engine checks that this process holds it
    /// ([`softoe_abi::BellOp::Claim`]): holding the descriptor is the only
    /// authority over another session's socket. A listener is shared (every
    /// holder accepts from it), a connection too (every holder reads and
    /// writes it; each byte is delivered once, in order). `ENOENT`: `fd` is
    /// no watched softoe socket's; `EALREADY`: this session holds it
    /// already.
    pub fn take(&self, fd: BorrowedFd<'_>) -> io::Result<Taken> {
        let (grant, listener) = self.claim(fd)?;
        if listener {
            self.adopt(grant, true).map(|s| {
                Taken::Listener(TcpListener {
                    s,
                    mode: Mode::default(),
                })
            })
        } else {
            self.adopt(grant, false)
                .map(|s| Taken::Stream(TcpStream::new(s)))
        }
    }

    /// `ADOPT` of `grant`, with the rings a listener (no send ring named:
    /// the one allocated is freed with the socket) or a connection needs.
    fn adopt(&self, grant: u32, listener: bool) -> io::Result<Sock> {
        let (rx, tx) = Sock::rings(self, SockKind::Tcp)?;
        let r = self.call(&Request::Adopt {
            grant,
            rx,
            tx: if listener { RingSpan::default() } else { tx },
        });
        match r.and_then(|r| result(&r)) {
            Ok(id) => Ok(Sock::with(self, id as u32, rx, tx)),
            Err(e) => {
                Sock::unring(self, rx, tx);
                Err(e)
            }
        }
    }

    /// Starts connecting to `addr` and returns at once (a non-blocking
    /// `connect`): the stream is writable when connected, or shows the
    /// error in [`TcpStream::take_error`].
    pub fn tcp_connect_nonblocking(&self, addr: SocketAddrV4) -> io::Result<TcpStream> {
        self.tcp_connect_nonblocking_with(addr, &TcpOptions::default())
    }

    /// [`Client::tcp_connect_nonblocking`] with `opts` set first (the SYN
    /// carries them).
    pub fn tcp_connect_nonblocking_with(
        &self,
        addr: SocketAddrV4,
        opts: &TcpOptions,
    ) -> io::Result<TcpStream> {
        let s = Sock::open(self, SockKind::Tcp)?;
        s.set_options(opts)?;
        let (addr, port) = packed(addr);
        let tag = self.submit(&Request::Connect {
            sock: s.id,
            addr,
            port,
        })?;
        self.abandon(tag);
        let mut t = TcpStream::new(s);
        t.mode.nonblocking = true;
        t.connect_unreported = true;
        Ok(t)
    }

    /// Listens on `addr` (port 0 is refused: name a port).
    pub fn tcp_listen(&self, addr: SocketAddrV4, backlog: u32) -> io::Result<TcpListener> {
        self.tcp_listen_with(addr, backlog, &TcpOptions::default())
    }

    /// Listens on `addr` with `opts` set first: every SYN-ACK carries them
    /// and every accepted connection starts with them.
    pub fn tcp_listen_with(
        &self,
        addr: SocketAddrV4,
        backlog: u32,
        opts: &TcpOptions,
    ) -> io::Result<TcpListener> {
        let s = Sock::open(self, SockKind::Tcp)?;
        s.set_options(opts)?;
        let (addr, port) = packed(addr);
        let sock = s.id;
        result(&s.call(&Request::Bind { sock, addr, port })?)?;
        result(&s.call(&Request::Listen { sock, backlog })?)?;
        Ok(TcpListener {
            s,
            mode: Mode::default(),
        })
    }

    /// Whether a listener with `opts` could listen on `addr` now:
    /// `EADDRINUSE` when one there, or on an overlapping address (the
    /// wildcard and a specific one of the same port), holds it and not
    /// both set `SO_REUSEPORT` as one user — what Linux's `bind` refuses.
    /// Nothing is reserved (a listener that starts in between still makes
    /// [`Client::tcp_listen_with`] fail): a shim that binds lazily asks
    /// this at `bind` so that a program sees the failure where Linux gives
    /// it. Costs a round trip per command on a throwaway socket with a
    /// 64-byte ring.
    pub fn tcp_bind_check(&self, addr: SocketAddrV4, opts: &TcpOptions) -> io::Result<()> {
        let rx = RingSpan {
            offset: self.alloc(64)?,
            len: 64,
        };
        let id = match self
            .call(&Request::Socket {
                kind: SockKind::Tcp,
                rx,
                tx: RingSpan::default(),
            })
            .and_then(|r| result(&r).map(|v| v as u32))
        {
            Ok(id) => id,
            Err(e) => {
                self.free(rx.offset, rx.len);
                return Err(e);
            }
        };
        // Closed (and its ring freed) when dropped.
        let s = Sock::with(self, id, rx, RingSpan::default());
        s.set_options(&TcpOptions {
            reuseport: opts.reuseport,
            ..TcpOptions::default()
        })?;
        let (addr, port) = packed(addr);
        result(&s.call(&Request::Bind {
            sock: id,
            addr,
            port,
        })?)
        .map(drop)
    }

    /// A UDP socket bound to `addr` (port 0: an ephemeral port).
    pub fn udp_bind(&self, addr: SocketAddrV4) -> io::Result<UdpSocket> {
        let s = Sock::open(self, SockKind::Udp)?;
        let (addr, port) = packed(addr);
        result(&s.call(&Request::Bind {
            sock: s.id,
            addr,
            port,
        })?)?;
        Ok(UdpSocket {
            s,
            mode: Mode::default(),
        })
    }
}
