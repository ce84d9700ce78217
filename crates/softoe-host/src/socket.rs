//! Sockets over the shared region.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use softoe_abi::{
    CONGESTION_CUBIC, CONGESTION_RENO, Completion, EV_ACCEPT, EV_CONNECTED, EV_ERR, EV_HELD,
    EV_HUP, EV_RDHUP, EV_RXFULL, EV_WRITABLE, RecvTarget, Request, RingSpan, SendSource, SockKind,
    SockOpt, TcpInfoRecord, UdpHeader, errno,
};

use crate::client::Client;
use crate::errno::{errno_err, result};
use crate::spin::Spin;
use crate::sys;

/// How a socket's `write` hands bytes to the engine (DESIGN.md, "Send
/// policies").
///
/// `Copy` is the default because it measured best for a `write` that must
/// leave the buffer free when it returns: the program copies into its send
/// ring and posts one command it does not wait for, while with `Overlap`
/// every `write` waits for the engine to have read the buffer. In `softoe
/// bench` (docs/results.md) a sender spends 0.10–0.12 CPU-s per GiB with
/// `Copy` at 28 Gb/s, 0.27–0.28 with `Overlap` at 16–19 Gb/s; Linux's
/// `write` 0.39–0.44. Zero-copy buffers ([`TcpStream::send_zerocopy`]) beat
/// both (0.013) for programs written for them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SendPolicy {
    /// The host copies into the socket's send ring and goes on: the buffer
    /// is free at once, and the engine queues the bytes.
    #[default]
    Copy,
    /// The engine reads the caller's buffer itself (`process_vm_readv`)
    /// and keeps a copy for retransmission; the host does no per-byte work
    /// but waits for the engine's copy. Writes shorter than
    /// [`Config::copy_below`](crate::Config::copy_below) are copied into the
    /// send ring instead: for a few bytes the host's copy is cheaper than
    /// the engine's system call.
    Overlap,
}

impl SendPolicy {
    /// The policy named by `$SOFTOE_SEND` (`copy`, the default, or
    /// `overlap`).
    pub fn from_env() -> SendPolicy {
        match std::env::var("SOFTOE_SEND").as_deref() {
            Ok("overlap") => SendPolicy::Overlap,
            _ => SendPolicy::Copy,
        }
    }
}

/// The socket address an (address in network order, port) pair names.
fn addr_of((a, p): (u32, u16)) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::from(u32::from_be(a)), p)
}

/// `a` as the (address in network order, port) pair requests carry.
fn packed(a: SocketAddrV4) -> (u32, u16) {
    (u32::from(*a.ip()).to_be(), a.port())
}

/// One socket id with its rings: closed when the last handle goes, its
/// rings freed when the engine releases them.
#[derive(Debug)]
struct Sock {
    c: Client,
    id: u32,
    rx: RingSpan,
    tx: RingSpan,
    /// The close already sent (by `abort`), 0 if none.
    closed: std::sync::atomic::AtomicU64,
    /// `SO_ERROR` was read (it reports the error once).
    error_taken: std::sync::atomic::AtomicBool,
    /// The sending half was shut down: writes fail with `EPIPE`.
    wr_shut: std::sync::atomic::AtomicBool,
    /// Spin budgets of this socket's waits to read and to write.
    rx_spin: Spin,
    tx_spin: Spin,
    /// The `SO_PRIORITY` last set through this handle (what a listener's
    /// or a UDP socket's [`priority`](TcpListener::priority) answers: the
    /// engine's `INFO` serves connections only).
    priority: std::sync::atomic::AtomicU32,
}

/// How one handle waits.
#[derive(Clone, Copy, Debug, Default)]
struct Mode {
    nonblocking: bool,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
}

impl Sock {
    fn open(c: &Client, kind: SockKind) -> io::Result<Sock> {
        let (rx, tx) = Sock::rings(c, kind)?;
        match c
            .call(&Request::Socket { kind, rx, tx })
            .and_then(|r| result(&r).map(|v| v as u32))
        {
            Ok(id) => Ok(Sock::with(c, id, rx, tx)),
            Err(e) => {
                Sock::unring(c, rx, tx);
                Err(e)
            }
        }
    }

    fn rings(c: &Client, kind: SockKind) -> io::Result<(RingSpan, RingSpan)> {
        let cfg = &c.inner.cfg;
        let rx_len = cfg.rx_ring.max(4096).div_ceil(64) * 64;
        let tx_len = if kind == SockKind::Tcp {
            cfg.tx_ring.div_ceil(64) * 64
        } else {
            0
        };
        let rx = RingSpan {
            offset: c.alloc(rx_len)?,
            len: rx_len,
        };
        let tx = if tx_len > 0 {
            match c.alloc(tx_len) {
                Ok(o) => RingSpan {
                    offset: o,
                    len: tx_len,
                },
                Err(e) => {
                    c.free(rx.offset, rx.len);
                    return Err(e);
                }
            }
        } else {
            RingSpan::default()
        };
        Ok((rx, tx))
    }

    fn unring(c: &Client, rx: RingSpan, tx: RingSpan) {
        c.free(rx.offset, rx.len);
        if tx.len > 0 {
            c.free(tx.offset, tx.len);
        }
    }

    fn with(c: &Client, id: u32, rx: RingSpan, tx: RingSpan) -> Sock {
        Sock {
            c: c.clone(),
            id,
            rx,
            tx,
            closed: std::sync::atomic::AtomicU64::new(0),
            error_taken: std::sync::atomic::AtomicBool::new(false),
            wr_shut: std::sync::atomic::AtomicBool::new(false),
            rx_spin: Spin::new(c.inner.cfg.spin),
            tx_spin: Spin::new(c.inner.cfg.spin),
            priority: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// Sends `req` and waits for its completion.
    fn call(&self, req: &Request) -> io::Result<Completion> {
        self.c.call(req)
    }

    fn events(&self) -> u32 {
        self.c.region().slot(self.id).map_or(0, |v| v.events())
    }

    /// What a `poll` would say now.
    fn readiness(&self) -> Readiness {
        slot_readiness(self.c.region(), self.id)
    }

    /// The slot's event generation (moves with every event or progress).
    fn seq(&self) -> u32 {
        self.c.region().slot(self.id).map_or(0, |v| v.seq())
    }

    /// Whether a send may go ahead, given the slot's events `ev`: not
    /// after an error (that error), nor once the socket is shut for
    /// sending or hung up (`EPIPE`) — hung up also when another session
    /// took the connection, whose send ring then never frees again.
    fn may_send(&self, ev: u32) -> io::Result<()> {
        if ev & EV_ERR != 0 {
            return Err(self.error());
        }
        if ev & EV_HUP != 0 || self.wr_shut.load(Ordering::Relaxed) {
            return Err(errno_err(errno::EPIPE));
        }
        Ok(())
    }

    fn error(&self) -> io::Error {
        let e = self.c.region().slot(self.id).map_or(0, |v| v.error());
        errno_err(if e == 0 { errno::ECONNRESET } else { e as i32 })
    }

    /// Waits until `ready` holds for the slot, honouring non-blocking mode
    /// and `timeout`: spins a moment, then sleeps on a bell of its own that
    /// the engine rings when this socket changes (`tx`: the writer's
    /// word, else the reader's), so news of other sockets never wakes it.
    /// A second thread waiting the same way on the same socket, or one
    /// that finds every bell taken, sleeps on the session's doorbell.
    fn wait(
        &self,
        nonblocking: bool,
        timeout: Option<Duration>,
        tx: bool,
        ready: impl Fn(&Sock) -> bool,
    ) -> io::Result<()> {
        if ready(self) {
            return Ok(());
        }
        if nonblocking {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let start = Instant::now();
        let budget = if tx { &self.tx_spin } else { &self.rx_spin };
        let max = self.c.inner.cfg.spin;
        let spun = budget.budget(max);
        let r = self.wait_inner(start, timeout, tx, spun, &ready);
        budget.ended(start.elapsed(), spun, max);
        r
    }

    fn wait_inner(
        &self,
        start: Instant,
        timeout: Option<Duration>,
        tx: bool,
        spin: Duration,
        ready: &impl Fn(&Sock) -> bool,
    ) -> io::Result<()> {
        let deadline = timeout.map(|t| start + t);
        while start.elapsed() < spin {
            if ready(self) {
                return Ok(());
            }
            if deadline.is_some_and(|t| Instant::now() >= t) {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            std::hint::spin_loop();
        }
        let word = self.c.region().slot(self.id).map(|v| v.waiter(tx));
        // Every sleep's word differs from the last one the engine rang (a
        // count for the whole client; after 2^24 sleeps a repeat can only
        // cost one 100 ms nap).
        let next = || self.c.inner.sleeps.fetch_add(1, Ordering::Relaxed);
        let mut first = true;
        let lent = word.and_then(|w| {
            let b = self.c.lend_bell()?;
            let mine = softoe_abi::waiter_word(b.index, next());
            match w.compare_exchange(0, mine, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => Some((w, b)),
                Err(_) => {
                    self.c.return_bell(b);
                    None
                }
            }
        });
        let Some((word, bell)) = lent else {
            let left = deadline.map(|t| t.saturating_duration_since(Instant::now()));
            let no_spin = Spin::new(Duration::ZERO);
            return match self
                .c
                .block_until(left, true, &no_spin, |_| ready(self).then_some(()))?
            {
                Some(()) => Ok(()),
                None => Err(io::ErrorKind::WouldBlock.into()),
            };
        };
        let fd = bell.fd.as_raw_fd();
        let r = loop {
            // A new word for every sleep (the engine rings once per word),
            // stored (SeqCst) before this look: a change made after it
            // rings the bell.
            if !first {
                word.store(
                    softoe_abi::waiter_word(bell.index, next()),
                    Ordering::SeqCst,
                );
            }
            first = false;
            if ready(self) {
                break Ok(());
            }
            if self.c.dead() {
                break Err(crate::client::closed());
            }
            let now = Instant::now();
            if deadline.is_some_and(|t| now >= t) {
                break Err(io::ErrorKind::WouldBlock.into());
            }
            let nap = deadline.map_or(Duration::from_millis(100), |t| t - now);
            let signalled = !sys::wait_readable(fd, nap.min(Duration::from_millis(100)));
            sys::drain(fd);
            // As in `Client::block_until`: a timed call is never restarted.
            if signalled && (deadline.is_some() || !sys::restart_after_signal()) {
                // What came meanwhile still counts.
                break if ready(self) {
                    Ok(())
                } else {
                    Err(io::ErrorKind::Interrupted.into())
                };
            }
        };
        word.store(0, Ordering::SeqCst);
        self.c.return_bell(bell);
        r
    }

    fn setopt(&self, opt: SockOpt, values: [u64; 5]) -> io::Result<()> {
        let r = self.call(&Request::SetOpt {
            sock: self.id,
            opt,
            values,
        })?;
        result(&r).map(drop)
    }

    /// `SO_PRIORITY`, 0..=255 (more: `EINVAL`), from the next frame on.
    fn set_priority(&self, p: u32) -> io::Result<()> {
        self.setopt(SockOpt::Priority, [u64::from(p), 0, 0, 0, 0])?;
        self.priority.store(p, Ordering::Relaxed);
        Ok(())
    }

    fn local(&self) -> SocketAddrV4 {
        addr_of(softoe_abi::unpack_addr(
            self.c.region().slot(self.id).map_or(0, |v| v.local()),
        ))
    }

    fn remote(&self) -> SocketAddrV4 {
        addr_of(softoe_abi::unpack_addr(
            self.c.region().slot(self.id).map_or(0, |v| v.remote()),
        ))
    }
}

impl Drop for Sock {
    fn drop(&mut self) {
        let (rx, tx) = (self.rx, self.tx);
        let spans = if tx.len > 0 {
            vec![(rx.offset, rx.len), (tx.offset, tx.len)]
        } else {
            vec![(rx.offset, rx.len)]
        };
        let tag = match self.closed.load(Ordering::Relaxed) {
            0 => self.c.submit(&Request::Close {
                sock: self.id,
                abort: false,
            }),
            t => Ok(t),
        };
        match tag {
            // The rings are free once the engine says it is done with them.
            Ok(tag) => self.c.free_on_release(tag, spans),
            // The session is gone: the engine reads nothing any more.
            Err(_) => {
                for (o, l) in spans {
                    self.c.free(o, l);
                }
            }
        }
    }
}

/// A congestion control algorithm the engine runs (`TCP_CONGESTION`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Congestion {
    /// RFC 5681/6582 NewReno: Linux's `reno`.
    Reno,
    /// RFC 9438 CUBIC: Linux's `cubic`.
    Cubic,
}

impl Congestion {
    /// Every algorithm the engine has.
    pub const ALL: [Congestion; 2] = [Congestion::Reno, Congestion::Cubic];

    /// The algorithm Linux calls `name`, if the engine has it.
    pub fn from_name(name: &str) -> Option<Congestion> {
        Congestion::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Linux's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Congestion::Reno => "reno",
            Congestion::Cubic => "cubic",
        }
    }

    fn code(self) -> u32 {
        match self {
            Congestion::Reno => CONGESTION_RENO,
            Congestion::Cubic => CONGESTION_CUBIC,
        }
    }

    pub(crate) fn of_code(c: u32) -> Option<Congestion> {
        Congestion::ALL.into_iter().find(|a| a.code() == c)
    }
}

/// Options a TCP socket takes before it connects or listens
/// ([`Client::tcp_connect_with`], [`Client::tcp_listen_with`]), so that its
/// first segment — the SYN, or a listener's SYN-ACKs — already carries them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TcpOptions {
    /// `IP_TOS` (a TCP socket's ECN bits stay the engine's: zero).
    pub tos: Option<u8>,
    /// `IP_TTL`, 1..=255 (0: the engine's default).
    pub ttl: Option<u8>,
    /// `TCP_CONGESTION`.
    pub congestion: Option<Congestion>,
    /// `SO_PRIORITY`, 0..=255 (more: `EINVAL`): the class the frames go
    /// to the port with — a bonded port's `prioritized` policy sends those
    /// at or above its threshold (6 by default) over its real-time
    /// members. Unlike the others it can change at any time with effect
    /// on the next frame ([`TcpStream::set_priority`]).
    pub priority: Option<u32>,
}

impl Sock {
    fn set_options(&self, o: &TcpOptions) -> io::Result<()> {
        if let Some(t) = o.tos {
            self.setopt(SockOpt::Tos, [u64::from(t), 0, 0, 0, 0])?;
        }
        if let Some(t) = o.ttl {
            self.setopt(SockOpt::Ttl, [u64::from(t), 0, 0, 0, 0])?;
        }
        if let Some(c) = o.congestion {
            self.setopt(SockOpt::Congestion, [u64::from(c.code()), 0, 0, 0, 0])?;
        }
        if let Some(p) = o.priority {
            self.set_priority(p)?;
        }
        Ok(())
    }
}

/// A TCP connection.
#[derive(Debug)]
pub struct TcpStream {
    s: Arc<Sock>,
    mode: Mode,
    policy: SendPolicy,
    /// Send-ring bytes the engine has taken.
    tx_queued: u64,
}

/// The reading half of a [`TcpStream`], for another thread
/// ([`TcpStream::try_clone_reader`]). One reader at a time.
#[derive(Debug)]
pub struct TcpReader {
    s: Arc<Sock>,
    mode: Mode,
}

/// A listening TCP socket.
#[derive(Debug)]
pub struct TcpListener {
    s: Sock,
    mode: Mode,
}

/// A UDP socket.
#[derive(Debug)]
pub struct UdpSocket {
    s: Sock,
    mode: Mode,
}

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

impl TcpListener {
    /// Takes the next connection, waiting for one unless non-blocking.
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddrV4)> {
        loop {
            let (rx, tx) = Sock::rings(&self.s.c, SockKind::Tcp)?;
            let r = self.s.call(&Request::Accept {
                sock: self.s.id,
                rx,
                tx,
            })?;
            match r.outcome() {
                Ok(id) => {
                    let s = Sock::with(&self.s.c, id as u32, rx, tx);
                    return Ok((TcpStream::new(s), addr_of(r.addr())));
                }
                Err(e) => {
                    Sock::unring(&self.s.c, rx, tx);
                    if e != errno::EAGAIN {
                        return Err(errno_err(e));
                    }
                }
            }
            // Wait for the listener's slot to show a connection. The bit may
            // be stale (another thread took it); the engine clears it after
            // the refused accept above, and the loop asks again.
            self.s
                .wait(self.mode.nonblocking, self.mode.read_timeout, false, |s| {
                    s.events() & EV_ACCEPT != 0
                })?;
        }
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.s.local()
    }

    /// Non-blocking accepts (`WouldBlock` when none waits).
    pub fn set_nonblocking(&mut self, on: bool) {
        self.mode.nonblocking = on;
    }

    /// `IP_TOS`, `IP_TTL`, `TCP_CONGESTION` and `SO_PRIORITY` (those
    /// given) for the connections of SYNs that arrive from now on.
    pub fn set_options(&self, opts: &TcpOptions) -> io::Result<()> {
        self.s.set_options(opts)
    }

    /// `SO_PRIORITY`, 0..=255 (more: `EINVAL`): the SYN-ACKs from now on
    /// and the connections they make start with it (connections already
    /// accepted keep theirs).
    pub fn set_priority(&self, p: u32) -> io::Result<()> {
        self.s.set_priority(p)
    }

    /// The `SO_PRIORITY` last set through this handle (0 if none was: a
    /// listener shared in by [`Client::adopt_listener`] reads 0 until set
    /// here, whatever its first session gave it).
    pub fn priority(&self) -> u32 {
        self.s.priority.load(Ordering::Relaxed)
    }

    /// What a `poll` would say now (readable: a connection waits).
    pub fn readiness(&self) -> Readiness {
        self.s.readiness()
    }

    /// The engine's id for this socket (what [`Client::adopt_listener`]
    /// names).
    pub fn id(&self) -> u32 {
        self.s.id
    }

    /// The attachment this listener belongs to.
    pub fn client(&self) -> &Client {
        &self.s.c
    }
}

impl TcpStream {
    fn new(s: Sock) -> TcpStream {
        TcpStream {
            s: Arc::new(s),
            mode: Mode::default(),
            policy: SendPolicy::from_env(),
            tx_queued: 0,
        }
    }

    /// A handle that reads this connection from another thread while this
    /// one writes.
    pub fn try_clone_reader(&self) -> TcpReader {
        TcpReader {
            s: self.s.clone(),
            mode: self.mode,
        }
    }

    /// The local address.
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.s.local()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddrV4 {
        self.s.remote()
    }

    /// The socket id in the session (for `softoe stat`, and what
    /// [`Client::adopt_stream`] names).
    pub fn id(&self) -> u32 {
        self.s.id
    }

    /// The attachment this connection belongs to.
    pub fn client(&self) -> &Client {
        &self.s.c
    }

    /// Prepares the connection for `fork`: the engine watches the returned
    /// descriptor, one end of a socket pair, and the connection lives until
    /// this stream is dropped (or its process dies) *and* every copy of
    /// the descriptor — in this process and in children that inherited
    /// it — is closed. A child takes the connection with
    /// [`Client::adopt_stream`]. The LD_PRELOAD shim does this for every
    /// connection just before a program's `fork`.
    pub fn watch_across_fork(&self) -> io::Result<std::os::fd::OwnedFd> {
        self.s.c.watch_stream(self.s.id)
    }

    /// Chooses how writes reach the engine.
    pub fn set_send_policy(&mut self, p: SendPolicy) {
        self.policy = p;
    }

    /// Non-blocking mode: calls that would wait return `WouldBlock`.
    pub fn set_nonblocking(&mut self, on: bool) {
        self.mode.nonblocking = on;
    }

    /// Read timeout (`SO_RCVTIMEO`): a read that waits longer returns
    /// `WouldBlock`.
    pub fn set_read_timeout(&mut self, t: Option<Duration>) {
        self.mode.read_timeout = t;
    }

    /// Write timeout (`SO_SNDTIMEO`).
    pub fn set_write_timeout(&mut self, t: Option<Duration>) {
        self.mode.write_timeout = t;
    }

    /// `TCP_NODELAY`.
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.s.setopt(SockOpt::NoDelay, [u64::from(on), 0, 0, 0, 0])
    }

    /// `SO_KEEPALIVE` with idle, interval (seconds) and count (0: Linux's
    /// defaults).
    pub fn set_keepalive(&self, on: bool, idle: u64, intvl: u64, cnt: u64) -> io::Result<()> {
        self.s
            .setopt(SockOpt::KeepAlive, [u64::from(on), idle, intvl, cnt, 0])
    }

    /// `TCP_USER_TIMEOUT` (None: off).
    pub fn set_user_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        let ms = t.map_or(0, |t| t.as_millis().max(1) as u64);
        self.s.setopt(SockOpt::UserTimeout, [ms, 0, 0, 0, 0])
    }

    /// `IP_TOS`, `IP_TTL`, `TCP_CONGESTION` and `SO_PRIORITY` (those
    /// given) from the next segment on; a new algorithm keeps the
    /// connection's window.
    pub fn set_options(&self, opts: &TcpOptions) -> io::Result<()> {
        self.s.set_options(opts)
    }

    /// `SO_PRIORITY`, 0..=255 (more: `EINVAL`): every frame from the next
    /// on goes to the port with it, as Linux applies it to every later
    /// packet.
    pub fn set_priority(&self, p: u32) -> io::Result<()> {
        self.s.set_priority(p)
    }

    /// The `SO_PRIORITY` the engine sends the connection's frames with:
    /// what was set, or the listener's it was accepted from (0 from an
    /// engine without the option).
    pub fn priority(&self) -> io::Result<u32> {
        Ok(self.info()?.priority)
    }

    /// `TCP_QUICKACK`: acknowledge every segment at once (`true`), or
    /// delay acknowledgements again (`false`, the default).
    pub fn set_quickack(&self, on: bool) -> io::Result<()> {
        self.s
            .setopt(SockOpt::QuickAck, [u64::from(on), 0, 0, 0, 0])
    }

    /// The congestion control algorithm the engine runs for it.
    pub fn congestion(&self) -> io::Result<Congestion> {
        let i = self.info()?;
        Congestion::of_code(i.congestion).ok_or_else(|| {
            io::Error::other(format!("unknown congestion algorithm {}", i.congestion))
        })
    }

    /// Closes the sending half: FIN after the data written.
    pub fn shutdown_write(&self) -> io::Result<()> {
        result(&self.s.call(&Request::Shutdown {
            sock: self.s.id,
            how: softoe_abi::SHUT_WR,
        })?)?;
        self.s.wr_shut.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Resets the connection.
    pub fn abort(self) -> io::Result<()> {
        let tag = self.s.c.submit(&Request::Close {
            sock: self.s.id,
            abort: true,
        })?;
        // Dropping frees the rings when the engine releases them.
        self.s.closed.store(tag, Ordering::Relaxed);
        Ok(())
    }

    /// The connection's state and counters (`TCP_INFO`).
    pub fn info(&self) -> io::Result<TcpInfoRecord> {
        let len = size_of::<TcpInfoRecord>() as u64;
        let off = self.s.c.alloc(len)?;
        let r = self.s.call(&Request::Info {
            sock: self.s.id,
            offset: off,
            len,
        });
        let mut rec = TcpInfoRecord::default();
        let ok = r.as_ref().map(result);
        if let Ok(Ok(_)) = ok {
            // SAFETY: `rec` is plain integers; any bytes are a valid value.
            let dst = unsafe {
                std::slice::from_raw_parts_mut((&raw mut rec).cast::<u8>(), len as usize)
            };
            self.s
                .c
                .region()
                .ring_read(RingSpan { offset: off, len }, 0, dst);
        }
        self.s.c.free(off, len);
        r.and_then(|r| result(&r)).map(|_| rec)
    }

    /// The slot as the engine published it: receive tail and head, events,
    /// sequence (for debugging).
    #[doc(hidden)]
    pub fn slot_state(&self) -> (u64, u64, u32, u32) {
        self.s.c.region().slot(self.s.id).map_or((0, 0, 0, 0), |v| {
            (v.rx_tail(), v.rx_head(), v.events(), v.seq())
        })
    }

    /// Bytes waiting to be read.
    pub fn pending(&self) -> u64 {
        self.s
            .c
            .region()
            .slot(self.s.id)
            .map_or(0, |v| v.rx_tail().saturating_sub(v.rx_head()))
    }

    /// Copies received bytes without consuming them (`MSG_PEEK`).
    pub fn peek(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read_inner(&self.s, self.mode, buf, true)
    }

    fn write_copy(&mut self, buf: &[u8]) -> io::Result<usize> {
        let region = *self.s.c.region();
        let tx = self.s.tx;
        loop {
            // Read before looking at the space and sending: progress after
            // this point moves it (see `wait_writable`).
            let seq = self.s.seq();
            let ev = self.s.events();
            self.s.may_send(ev)?;
            let acked = region.slot(self.s.id).map_or(0, |v| v.tx_acked());
            let space = tx.len - (self.tx_queued - acked).min(tx.len);
            let n = space.min(buf.len() as u64);
            if n > 0 {
                region.ring_write(tx, self.tx_queued, &buf[..n as usize]);
                if ev & EV_CONNECTED != 0 {
                    // Connected: the engine queues the bytes whole and sends
                    // them as room frees, so there is no answer to wait for
                    // (a failure shows in the socket's state).
                    self.s.c.post(&Request::Send {
                        sock: self.s.id,
                        source: SendSource::RingQueued,
                        len: n,
                        to: None,
                        more: false,
                    })?;
                    self.tx_queued += n;
                    return Ok(n as usize);
                }
                let r = self.s.call(&Request::Send {
                    sock: self.s.id,
                    source: SendSource::Ring,
                    len: n,
                    to: None,
                    more: false,
                })?;
                match r.outcome() {
                    Ok(taken) if taken > 0 => {
                        self.tx_queued += taken;
                        return Ok(taken as usize);
                    }
                    Ok(_) | Err(errno::EAGAIN) => {}
                    Err(e) => return Err(errno_err(e)),
                }
            }
            self.wait_writable(seq)?;
        }
    }

    fn write_remote(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            let seq = self.s.seq();
            let r = self.s.call(&Request::Send {
                sock: self.s.id,
                source: SendSource::Remote {
                    addr: buf.as_ptr() as u64,
                },
                len: buf.len() as u64,
                to: None,
                more: false,
            })?;
            match r.outcome() {
                Ok(n) => return Ok(n as usize),
                Err(errno::EAGAIN) => {}
                Err(e) => return Err(errno_err(e)),
            }
            self.wait_writable(seq)?;
        }
    }

    /// Waits until the socket's sequence moves past `seq`, read before the
    /// refused send: the engine bumps it whenever space frees. Reading it
    /// after the refusal would miss space freed in between (and, with
    /// `EV_WRITABLE` never cleared, wait for ever).
    fn wait_writable(&self, seq: u32) -> io::Result<()> {
        self.s
            .wait(self.mode.nonblocking, self.mode.write_timeout, true, |s| {
                s.c.region()
                    .slot(s.id)
                    .is_some_and(|v| v.seq() != seq || v.events() & (EV_ERR | EV_HUP) != 0)
            })?;
        self.s.may_send(self.s.events())
    }

    /// Sends the first `len` bytes of a zero-copy buffer by reference.
    ///
    /// The engine queues the whole span and hands it to the stack as room
    /// frees, so this returns at once, without a round trip: the host core
    /// spends one command per buffer, whatever its size. The buffer is the
    /// caller's again when [`ZcBuf::released`] says so (the peer
    /// acknowledged it); [`ZcBuf::wait_released`] reports a connection that
    /// failed or closed before all of it was sent. Returns `len` (capped at
    /// the buffer's length).
    pub fn send_zerocopy(&mut self, buf: &mut ZcBuf, len: usize) -> io::Result<usize> {
        if buf.in_flight.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                "buffer still in flight",
            ));
        }
        self.s.may_send(self.s.events())?;
        let len = len.min(buf.len as usize) as u64;
        if len == 0 {
            return Ok(0);
        }
        let tag = self.s.c.submit(&Request::Send {
            sock: self.s.id,
            source: SendSource::Queued { offset: buf.off },
            len,
            to: None,
            more: false,
        })?;
        buf.in_flight = Some(tag);
        buf.sent = len;
        Ok(len as usize)
    }

    /// Sends from a region buffer with the `overlap` policy: the engine
    /// copies it while sending; the buffer is free when this returns.
    pub fn send_overlap(&mut self, buf: &ZcBuf, len: usize) -> io::Result<usize> {
        let len = len.min(buf.len as usize) as u64;
        loop {
            let seq = self.s.seq();
            let r = self.s.call(&Request::Send {
                sock: self.s.id,
                source: SendSource::Overlap { offset: buf.off },
                len,
                to: None,
                more: false,
            })?;
            match r.outcome() {
                Ok(n) => return Ok(n as usize),
                Err(errno::EAGAIN) => {}
                Err(e) => return Err(errno_err(e)),
            }
            self.wait_writable(seq)?;
        }
    }

    /// Whether the connection is established.
    pub fn is_connected(&self) -> bool {
        self.s.events() & EV_CONNECTED != 0
    }

    /// Whether a write would take bytes now.
    pub fn is_writable(&self) -> bool {
        self.s.events() & EV_WRITABLE != 0
    }

    /// What a `poll` would say now.
    pub fn readiness(&self) -> Readiness {
        self.s.readiness()
    }

    /// The error that ended the connection (`SO_ERROR`), taken once.
    pub fn take_error(&self) -> Option<io::Error> {
        if self.s.events() & EV_ERR == 0 {
            return None;
        }
        if self.s.error_taken.swap(true, Ordering::Relaxed) {
            return None;
        }
        Some(self.s.error())
    }

    /// Whether reads and writes return `WouldBlock` instead of waiting.
    pub fn is_nonblocking(&self) -> bool {
        self.mode.nonblocking
    }
}

/// What a `poll` would say now of socket `id`: from the slot's events,
/// with the receive ring's own indices for readability (the engine's
/// `EV_READABLE` may predate the program's last read).
pub(crate) fn slot_readiness(region: &softoe_abi::Region, id: u32) -> Readiness {
    let Some(v) = region.slot(id) else {
        return Readiness {
            error: true,
            hung_up: true,
            ..Readiness::default()
        };
    };
    let ev = v.events();
    let error = ev & EV_ERR != 0;
    let read_closed = ev & EV_RDHUP != 0;
    Readiness {
        readable: v.rx_tail() != v.rx_head()
            || read_closed
            || error
            || ev & (EV_ACCEPT | EV_HELD) != 0,
        writable: ev & EV_WRITABLE != 0 && !error,
        read_closed,
        hung_up: ev & EV_HUP != 0,
        error,
        seq: v.seq(),
    }
}

/// A socket [`Client::poll`] and [`Selector`](crate::Selector) can wait for.
pub trait Pollable {
    /// What a `poll` would say now.
    fn readiness(&self) -> Readiness;
    /// The socket's id in its session (a [`Selector`](crate::Selector)
    /// reports sockets by it).
    fn socket_id(&self) -> u32;
    /// The attachment the socket belongs to.
    fn owner(&self) -> &Client;
}

macro_rules! pollable {
    ($($t:ty),*) => {$(
        impl Pollable for $t {
            fn readiness(&self) -> Readiness {
                self.s.readiness()
            }
            fn socket_id(&self) -> u32 {
                self.s.id
            }
            fn owner(&self) -> &Client {
                &self.s.c
            }
        }
    )*};
}

pollable!(TcpStream, TcpReader, TcpListener, UdpSocket);

/// What [`Client::poll`] waits for on one socket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Interest {
    /// Readable (data, end of stream, a connection to accept).
    pub read: bool,
    /// Writable.
    pub write: bool,
}

impl Interest {
    /// Readable.
    pub const READ: Interest = Interest {
        read: true,
        write: false,
    };
    /// Writable.
    pub const WRITE: Interest = Interest {
        read: false,
        write: true,
    };
    /// Either.
    pub const BOTH: Interest = Interest {
        read: true,
        write: true,
    };

    /// Whether `r` is what this interest waits for (errors and hang-ups
    /// always are).
    pub fn met_by(self, r: Readiness) -> bool {
        (self.read && r.readable) || (self.write && r.writable) || r.error || r.hung_up
    }
}

impl Client {
    /// Waits until at least one of `socks` is ready for what its interest
    /// names (or has failed), or `timeout` passes (`None`: for ever), and
    /// returns every socket's readiness — `poll(2)` over engine sockets.
    /// The sockets must belong to this client.
    pub fn poll(
        &self,
        socks: &[(&dyn Pollable, Interest)],
        timeout: Option<Duration>,
    ) -> io::Result<Vec<Readiness>> {
        let look = || -> Option<Vec<Readiness>> {
            let r: Vec<Readiness> = socks.iter().map(|(s, _)| s.readiness()).collect();
            r.iter()
                .zip(socks)
                .any(|(r, (_, i))| i.met_by(*r))
                .then_some(r)
        };
        if let Some(r) = look() {
            return Ok(r);
        }
        if timeout.is_some_and(|t| t.is_zero()) {
            return Ok(socks.iter().map(|(s, _)| s.readiness()).collect());
        }
        match self.block_until(timeout, true, &self.inner.poll_spin, |_| look())? {
            Some(r) => Ok(r),
            None => Ok(socks.iter().map(|(s, _)| s.readiness()).collect()),
        }
    }
}

/// A socket's readiness, as `poll` reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// A read would not block (data, end of stream, an error, or a
    /// connection to accept).
    pub readable: bool,
    /// A write would take bytes.
    pub writable: bool,
    /// The peer has finished sending (`POLLRDHUP`).
    pub read_closed: bool,
    /// Both directions are done (`POLLHUP`).
    pub hung_up: bool,
    /// The connection failed (`POLLERR`).
    pub error: bool,
    /// The slot's sequence: it moves with every event and every byte
    /// placed or space freed (edge-triggered waits report again only
    /// after it moved).
    pub seq: u32,
}

fn read_inner(s: &Sock, mode: Mode, buf: &mut [u8], peek: bool) -> io::Result<usize> {
    if buf.is_empty() {
        return Ok(0);
    }
    let region = *s.c.region();
    let Some(view) = region.slot(s.id) else {
        return Err(errno_err(errno::EBADF));
    };
    let ready = |s: &Sock| {
        let v = s.c.region().slot(s.id);
        v.is_some_and(|v| v.rx_tail() != v.rx_head()) || s.events() & (EV_RDHUP | EV_ERR) != 0
    };
    let direct = if s.c.inner.direct_refused.load(Ordering::Relaxed) {
        0
    } else {
        s.c.inner.cfg.direct_min
    };
    if !peek && !mode.nonblocking && direct > 0 && buf.len() >= direct && !ready(s) {
        // An empty ring and a large buffer: have the engine place the next
        // bytes straight into it.
        if let Some(r) = read_direct(s, mode.read_timeout, buf) {
            return r;
        }
    }
    // Bytes held in the engine for a posted buffer, and this read takes
    // them from the ring: have them moved there (once; they come within
    // the engine's turn, so even a non-blocking read waits that long).
    let held = |s: &Sock| s.events() & EV_HELD != 0;
    let mut asked = false;
    loop {
        if !ready(s) && held(s) && !asked {
            s.c.submit_quiet(&Request::RxDone { sock: s.id })?;
            asked = true;
            if mode.nonblocking {
                s.wait(false, Some(Duration::from_millis(2)), false, ready)?;
            }
        }
        s.wait(mode.nonblocking, mode.read_timeout, false, |s| {
            ready(s) || (held(s) && !asked)
        })?;
        if ready(s) {
            break;
        }
    }
    let head = view.rx_head();
    let tail = view.rx_tail();
    let n = tail.saturating_sub(head).min(buf.len() as u64);
    if n == 0 {
        if s.events() & EV_ERR != 0 {
            return Err(s.error());
        }
        return Ok(0);
    }
    region.ring_read(s.rx, head, &mut buf[..n as usize]);
    if !peek {
        view.set_rx_head(head + n);
        // The engine holds more than the ring could take: tell it there
        // is room now. The fence pairs with the engine's between
        // publishing `EV_RXFULL` and its next look at `rx_head`: either
        // we see the bit, or it sees the head move.
        std::sync::atomic::fence(Ordering::SeqCst);
        if s.events() & EV_RXFULL != 0 {
            let _ = s.c.submit_quiet(&Request::RxDone { sock: s.id });
        }
    }
    Ok(n as usize)
}

/// A blocking read by direct placement (`RECV`): the engine writes the
/// next bytes into `buf` itself and says how many. `None` when the ring
/// must be read instead (bytes reached it first, or another read of this
/// socket has a buffer posted).
fn read_direct(s: &Sock, timeout: Option<Duration>, buf: &mut [u8]) -> Option<io::Result<usize>> {
    // The engine writes through this address from its own process, as a
    // NIC's DMA would, and completes the command only after: the buffer is
    // not touched here until then (the completion is read with Acquire).
    let addr = buf.as_mut_ptr().expose_provenance() as u64;
    let req = Request::Recv {
        sock: s.id,
        target: RecvTarget::Remote { addr },
        len: buf.len() as u64,
    };
    let tag = match s.c.submit(&req) {
        Ok(t) => t,
        Err(e) => return Some(Err(e)),
    };
    let (waited, interrupted) = match s
        .c
        .block_until(timeout, true, &s.rx_spin, |d| d.done.remove(&tag))
    {
        Err(e) if e.kind() == io::ErrorKind::Interrupted => (Ok(None), true),
        r => (r, false),
    };
    let got = match waited {
        Ok(Some(c)) => c,
        Ok(None) => {
            // Timed out or interrupted: take the buffer back. The receive
            // completes first (with bytes placed meanwhile, or ECANCELED);
            // the cancel's own answer is not needed.
            match s.c.submit(&Request::CancelRecv { sock: s.id }) {
                Ok(t) => s.c.abandon(t),
                Err(e) => return Some(Err(e)),
            }
            match s.c.wait_tag(tag) {
                Ok(c) => c,
                Err(e) => return Some(Err(e)),
            }
        }
        Err(e) => return Some(Err(e)),
    };
    std::sync::atomic::fence(Ordering::SeqCst);
    match got.outcome() {
        Ok(n) => Some(Ok(n as usize)),
        Err(errno::ECANCELED) if interrupted => Some(Err(io::ErrorKind::Interrupted.into())),
        Err(errno::ECANCELED) => Some(Err(io::ErrorKind::WouldBlock.into())),
        Err(errno::EAGAIN | errno::EBUSY) => None,
        // The engine may not write our memory (another user): the bytes
        // are still in the engine; read through the ring from now on.
        Err(errno::EPERM) => {
            s.c.inner.direct_refused.store(true, Ordering::Relaxed);
            None
        }
        Err(e) => Some(Err(errno_err(e))),
    }
}

impl Read for TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read_inner(&self.s, self.mode, buf, false)
    }
}

impl TcpReader {
    /// Copies received bytes without consuming them (`MSG_PEEK`).
    pub fn peek(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read_inner(&self.s, self.mode, buf, true)
    }

    /// Non-blocking reads (`WouldBlock`).
    pub fn set_nonblocking(&mut self, on: bool) {
        self.mode.nonblocking = on;
    }

    /// Read timeout (`SO_RCVTIMEO`; `WouldBlock` when it passes).
    pub fn set_read_timeout(&mut self, t: Option<Duration>) {
        self.mode.read_timeout = t;
    }

    /// Bytes waiting to be read.
    pub fn pending(&self) -> u64 {
        self.s
            .c
            .region()
            .slot(self.s.id)
            .map_or(0, |v| v.rx_tail().saturating_sub(v.rx_head()))
    }
}

impl Read for TcpReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read_inner(&self.s, self.mode, buf, false)
    }
}

impl Write for TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        match self.policy {
            SendPolicy::Copy => self.write_copy(buf),
            SendPolicy::Overlap
                if buf.len() < self.s.c.inner.cfg.copy_below && self.s.tx.len > 0 =>
            {
                self.write_copy(buf)
            }
            SendPolicy::Overlap => self.write_remote(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A buffer in the shared data area, for zero-copy and overlap sends.
#[derive(Debug)]
pub struct ZcBuf {
    c: Client,
    off: u64,
    len: u64,
    in_flight: Option<u64>,
    /// Bytes of the last zero-copy send.
    sent: u64,
    /// Its release's result, once known (bytes acknowledged, or the errno).
    outcome: Option<Result<u64, i32>>,
}

impl Client {
    /// A zero-copy buffer of `len` bytes in the shared region.
    pub fn zc_buf(&self, len: usize) -> io::Result<ZcBuf> {
        let off = self.alloc(len as u64)?;
        Ok(ZcBuf {
            c: self.clone(),
            off,
            len: len as u64,
            in_flight: None,
            sent: 0,
            outcome: None,
        })
    }
}

impl ZcBuf {
    /// Its offset in the data area: what a command naming it carries (for
    /// programs and tests that speak the ABI directly).
    pub fn offset(&self) -> u64 {
        self.off
    }

    /// `len` bytes at `at` of this buffer, as a data-area span.
    fn span(&self, at: usize, len: usize) -> io::Result<RingSpan> {
        if at as u64 + len as u64 > self.len {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        Ok(RingSpan {
            offset: self.off + at as u64,
            len: len as u64,
        })
    }

    /// Copies `dst.len()` bytes out from `at` (what the engine placed
    /// there by a `RECV` into the data area, or what was written).
    pub fn read_at(&self, at: usize, dst: &mut [u8]) -> io::Result<()> {
        let span = self.span(at, dst.len())?;
        if !dst.is_empty() && !self.c.region().ring_read(span, 0, dst) {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        Ok(())
    }

    /// Copies `src` in at `at` (refused while the buffer is in flight).
    pub fn write_at(&mut self, at: usize, src: &[u8]) -> io::Result<()> {
        if self.in_flight.is_some() && !self.released() {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                "buffer still in flight",
            ));
        }
        let span = self.span(at, src.len())?;
        if !src.is_empty() && !self.c.region().ring_write(span, 0, src) {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        Ok(())
    }

    /// Whether the engine has given the buffer back (always true when it
    /// was never sent zero-copy).
    pub fn released(&mut self) -> bool {
        match self.in_flight {
            None => true,
            Some(tag) => match self.c.take_release(tag) {
                Some(c) => {
                    self.in_flight = None;
                    self.outcome = Some(c.outcome());
                    true
                }
                None => false,
            },
        }
    }

    /// Waits until the buffer is released, and says whether everything
    /// the last send named reached the peer: an error if the connection
    /// failed or closed first (with how much was sent).
    pub fn wait_released(&mut self) -> io::Result<()> {
        if let Some(tag) = self.in_flight {
            let c = self
                .c
                .block_until(None, false, &self.c.inner.release_spin, |d| {
                    d.released.remove(&tag)
                })?
                .ok_or_else(|| errno_err(errno::ECONNABORTED))?;
            self.in_flight = None;
            self.outcome = Some(c.outcome());
        }
        match self.outcome.take() {
            Some(Err(e)) => Err(errno_err(e)),
            Some(Ok(r)) if r < self.sent => Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("the connection closed with {r} of {} bytes sent", self.sent),
            )),
            _ => Ok(()),
        }
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for ZcBuf {
    fn drop(&mut self) {
        let tag = self.in_flight;
        match tag {
            Some(tag) if !self.released() => {
                self.c.free_on_release(tag, vec![(self.off, self.len)]);
            }
            _ => self.c.free(self.off, self.len),
        }
    }
}

impl UdpSocket {
    /// The bound address.
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.s.local()
    }

    /// `IP_TOS` (all eight bits: a UDP program owns the ECN bits) and
    /// `IP_TTL` (0: the engine's default) of the datagrams sent from now on.
    pub fn set_ip(&self, tos: Option<u8>, ttl: Option<u8>) -> io::Result<()> {
        if let Some(t) = tos {
            self.s.setopt(SockOpt::Tos, [u64::from(t), 0, 0, 0, 0])?;
        }
        if let Some(t) = ttl {
            self.s.setopt(SockOpt::Ttl, [u64::from(t), 0, 0, 0, 0])?;
        }
        Ok(())
    }

    /// `SO_PRIORITY`, 0..=255 (more: `EINVAL`) of the datagrams sent from
    /// now on.
    pub fn set_priority(&self, p: u32) -> io::Result<()> {
        self.s.set_priority(p)
    }

    /// The `SO_PRIORITY` last set through this handle (0: none).
    pub fn priority(&self) -> u32 {
        self.s.priority.load(Ordering::Relaxed)
    }

    /// What a `poll` would say now.
    pub fn readiness(&self) -> Readiness {
        self.s.readiness()
    }

    /// Non-blocking receives and sends (`WouldBlock`).
    pub fn set_nonblocking(&mut self, on: bool) {
        self.mode.nonblocking = on;
    }

    /// Sends one datagram (the engine reads it from our memory).
    pub fn send_to(&self, data: &[u8], to: SocketAddrV4) -> io::Result<usize> {
        let req = Request::Send {
            sock: self.s.id,
            source: SendSource::Remote {
                addr: data.as_ptr() as u64,
            },
            len: data.len() as u64,
            to: Some(packed(to)),
            more: false,
        };
        loop {
            let r = self.s.call(&req)?;
            match r.outcome() {
                Ok(n) => return Ok(n as usize),
                Err(errno::EAGAIN) if !self.mode.nonblocking => std::thread::yield_now(),
                Err(e) => return Err(errno_err(e)),
            }
        }
    }

    /// Receives one datagram; a datagram longer than `buf` is truncated.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddrV4)> {
        let region = *self.s.c.region();
        let Some(view) = region.slot(self.s.id) else {
            return Err(errno_err(errno::EBADF));
        };
        self.s
            .wait(self.mode.nonblocking, self.mode.read_timeout, false, |s| {
                s.c.region()
                    .slot(s.id)
                    .is_some_and(|v| v.rx_tail() != v.rx_head())
            })?;
        let head = view.rx_head();
        let mut hb = [0u8; size_of::<UdpHeader>()];
        region.ring_read(self.s.rx, head, &mut hb);
        // SAFETY: `hb` holds exactly one header's bytes; any bytes are a
        // valid header of integers.
        let h: UdpHeader = unsafe { std::ptr::read_unaligned(hb.as_ptr().cast()) };
        let n = (h.len as usize).min(buf.len());
        region.ring_read(self.s.rx, head + hb.len() as u64, &mut buf[..n]);
        view.set_rx_head(head + UdpHeader::footprint(h.len));
        let _ = self.s.c.submit_quiet(&Request::RxDone { sock: self.s.id });
        Ok((n, addr_of((h.addr, h.port))))
    }

    /// Read timeout.
    pub fn set_read_timeout(&mut self, t: Option<Duration>) {
        self.mode.read_timeout = t;
    }
}
