//! Opening sockets: connecting, listening, binding, and taking sockets
//! over from another session (`ADOPT`).

use std::io;
use std::net::SocketAddrV4;

use softoe_abi::{Request, RingSpan, SockKind};

use super::{Mode, Sock, TcpListener, TcpOptions, TcpStream, UdpSocket, packed};
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

    /// Shares listening socket `sock` of session `session` into this
    /// client's session: both accept from the one listener. `secret` is
    /// that session's ([`Client::secret`]) — a forked child reads it from
    /// its parent's attachment, which it inherited.
    pub fn adopt_listener(
        &self,
        session: u32,
        sock: u32,
        secret: [u64; 2],
    ) -> io::Result<TcpListener> {
        let (rx, tx) = Sock::rings(self, SockKind::Tcp)?;
        // A listener reads no send ring: none is named (the one allocated
        // is freed with the socket).
        let r = self.call(&Request::Adopt {
            from_session: session,
            from_sock: sock,
            secret,
            rx,
            tx: RingSpan::default(),
        });
        match r.and_then(|r| result(&r)) {
            Ok(id) => Ok(TcpListener {
                s: Sock::with(self, id as u32, rx, tx),
                mode: Mode::default(),
            }),
            Err(e) => {
                Sock::unring(self, rx, tx);
                Err(e)
            }
        }
    }

    /// Takes connection `sock` of session `session` into this client's
    /// session — a forked child taking a connection it inherited. The
    /// connection must be watched ([`TcpStream::watch_across_fork`], done
    /// by the parent before `fork`); its unread bytes come along, and the
    /// other session's socket reads as finished from then on. `secret` is
    /// that session's ([`Client::secret`]).
    pub fn adopt_stream(&self, session: u32, sock: u32, secret: [u64; 2]) -> io::Result<TcpStream> {
        let (rx, tx) = Sock::rings(self, SockKind::Tcp)?;
        let r = self.call(&Request::Adopt {
            from_session: session,
            from_sock: sock,
            secret,
            rx,
            tx,
        });
        match r.and_then(|r| result(&r)) {
            Ok(id) => Ok(TcpStream::new(Sock::with(self, id as u32, rx, tx))),
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
