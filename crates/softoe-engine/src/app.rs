//! The in-process application API: the engine used as a library.
//!
//! Programs on other threads of the engine's process get sockets that feel
//! like `std::net`'s — [`TcpStream`] (with `Read` and `Write`),
//! [`TcpListener`], [`UdpSocket`] — while every protocol step runs on the
//! engine thread. Each call becomes a command (opcode, socket, parameters) on
//! a queue to the engine and its result comes back on another: the shape of
//! HL-TCP's messaging unit, which the shared-memory host interface will carry
//! across processes later. Here the queue is an in-process channel and the
//! doorbell an `eventfd` the engine sleeps on.
//!
//! Send data is copied once into a ring in engine memory per socket (the
//! `copy` policy of the design) and handed to the stack by reference; ring
//! space is reused as the peer acknowledges it. Received data is copied out
//! into the caller's buffer. A call that cannot complete (a read with
//! nothing to read, a write with a full ring, an accept with nobody
//! waiting) waits on the engine until it can, or until its timeout, and is
//! then cancelled without losing data: the engine always answers.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddrV4;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use softoe_stack::{
    BindError, Endpoint, Events, HandleError, Instant, PayloadRef, RecvError, SendError,
    SocketHandle, Stack, State, TcpError, TcpInfo, UdpSendError,
};
use softoe_wire::Ipv4Address;

use crate::host::sys::EventFd;
use crate::memory::Memory;
use crate::services::Service;

/// Bytes of engine memory each TCP socket's send ring holds.
const TCP_RING: usize = 256 * 1024;
/// Bytes of engine memory each UDP socket's send ring holds.
const UDP_RING: usize = 64 * 1024;
/// The largest datagram a UDP socket receives whole.
const UDP_MAX: usize = 65_536;
/// The most bytes one read returns.
const READ_MAX: usize = 256 * 1024;

type Reply<T> = Sender<io::Result<T>>;

/// One command to the engine.
#[derive(Debug)]
enum Cmd {
    Connect(SocketAddrV4, Reply<(SocketHandle, SocketAddrV4)>),
    Listen(u16, usize, Reply<SocketHandle>),
    Accept(SocketHandle, Reply<(SocketHandle, SocketAddrV4)>),
    Write(SocketHandle, Vec<u8>, Reply<usize>),
    Read(SocketHandle, usize, Reply<Vec<u8>>),
    /// Cancels the socket's waiting read, write or accept (they answer
    /// `WouldBlock` unless they completed first).
    Cancel(SocketHandle),
    Shutdown(SocketHandle, Reply<()>),
    Abort(SocketHandle, Reply<()>),
    Close(SocketHandle),
    Info(SocketHandle, Reply<TcpInfo>),
    Nodelay(SocketHandle, bool, Reply<()>),
    Priority(SocketHandle, u8, Reply<()>),
    UdpBind(u16, Reply<SocketHandle>),
    /// Datagrams to one destination, each answered on the reply in turn.
    UdpSend(SocketHandle, SocketAddrV4, Vec<Vec<u8>>, Reply<()>),
    /// Up to this many datagrams, at least one (waits for it).
    UdpRecv(SocketHandle, usize, Reply<Vec<Datagram>>),
}

/// A received datagram and its source.
type Datagram = (Vec<u8>, SocketAddrV4);

/// The most datagrams one receive command brings back: a program reading
/// a fast stream pays one round trip to the engine per batch, not per
/// datagram (as `recvmmsg(2)` does for the kernel).
const UDP_RECV_BATCH: usize = 64;

/// Connects threads to an engine. Cheap to clone; every clone talks to the
/// same [`AppService`].
#[derive(Clone, Debug)]
pub struct App {
    cmds: Sender<Cmd>,
    bell: Arc<EventFd>,
}

/// The engine side of an [`App`]: add it to the engine as a service.
#[derive(Debug)]
pub struct AppService {
    cmds: Receiver<Cmd>,
    bell: Arc<EventFd>,
    socks: Vec<Sock>,
    /// Rings whose socket is gone but whose references the stack may still
    /// hold, by the handle whose `RELEASED` frees them.
    retiring: Vec<(SocketHandle, u32, usize)>,
    free_tcp: Vec<u32>,
    free_udp: Vec<u32>,
    released: Vec<SocketHandle>,
}

/// Creates an application API and the service that serves it.
pub fn channel() -> io::Result<(App, AppService)> {
    let bell = Arc::new(EventFd::new()?);
    let (tx, rx) = mpsc::channel();
    Ok((
        App {
            cmds: tx,
            bell: bell.clone(),
        },
        AppService {
            cmds: rx,
            bell,
            socks: Vec::new(),
            retiring: Vec::new(),
            free_tcp: Vec::new(),
            free_udp: Vec::new(),
            released: Vec::new(),
        },
    ))
}

fn gone() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the engine has stopped")
}

impl App {
    /// Sends `cmd` built around a fresh reply channel and waits for the
    /// answer (up to `timeout`; then cancels it on `cancel` and waits for
    /// the engine's final word, so nothing is lost).
    fn call<T>(
        &self,
        cmd: impl FnOnce(Reply<T>) -> Cmd,
        timeout: Option<Duration>,
        cancel: Option<SocketHandle>,
    ) -> io::Result<T> {
        let (tx, rx) = mpsc::channel();
        self.cmds.send(cmd(tx)).map_err(|_| gone())?;
        self.bell.signal();
        match timeout {
            None => rx.recv().map_err(|_| gone())?,
            Some(t) => match rx.recv_timeout(t) {
                Ok(r) => r,
                Err(RecvTimeoutError::Disconnected) => Err(gone()),
                Err(RecvTimeoutError::Timeout) => {
                    if let Some(h) = cancel {
                        self.send(Cmd::Cancel(h));
                    }
                    rx.recv().map_err(|_| gone())?
                }
            },
        }
    }

    fn set_priority(&self, h: SocketHandle, priority: u8) -> io::Result<()> {
        self.call(|r| Cmd::Priority(h, priority, r), None, None)
    }

    fn send(&self, cmd: Cmd) {
        if self.cmds.send(cmd).is_ok() {
            self.bell.signal();
        }
    }

    /// Opens a TCP connection to `remote` (blocks until it is established
    /// or fails).
    pub fn tcp_connect(&self, remote: SocketAddrV4) -> io::Result<TcpStream> {
        let (h, local) = self.call(|r| Cmd::Connect(remote, r), None, None)?;
        Ok(TcpStream::new(self.clone(), h, local, remote))
    }

    /// Listens on TCP `port` on all of the engine's addresses.
    pub fn tcp_listen(&self, port: u16, backlog: usize) -> io::Result<TcpListener> {
        let h = self.call(|r| Cmd::Listen(port, backlog, r), None, None)?;
        Ok(TcpListener {
            app: self.clone(),
            h,
            port,
        })
    }

    /// Binds UDP `port` on all of the engine's addresses.
    pub fn udp_bind(&self, port: u16) -> io::Result<UdpSocket> {
        let h = self.call(|r| Cmd::UdpBind(port, r), None, None)?;
        Ok(UdpSocket {
            app: self.clone(),
            h,
            port,
            read_timeout: None,
            received: std::sync::Mutex::new(VecDeque::new()),
        })
    }
}

/// A listening TCP socket on the engine.
#[derive(Debug)]
pub struct TcpListener {
    app: App,
    h: SocketHandle,
    port: u16,
}

impl TcpListener {
    /// Waits for a connection.
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddrV4)> {
        self.accept_timeout(None)
    }

    /// Waits up to `timeout` for a connection (`WouldBlock` after it).
    pub fn accept_timeout(
        &self,
        timeout: Option<Duration>,
    ) -> io::Result<(TcpStream, SocketAddrV4)> {
        let (h, peer) = self
            .app
            .call(|r| Cmd::Accept(self.h, r), timeout, Some(self.h))?;
        let local = SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, self.port);
        let s = TcpStream::new(self.app.clone(), h, local, peer);
        // The local address is the one the peer reached.
        let local = s.info().map(|i| i.local.into()).unwrap_or(local);
        Ok((TcpStream { local, ..s }, peer))
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sets the priority (as `SO_PRIORITY`, 0–255) of the connections it
    /// accepts from now on; see [`TcpStream::set_priority`].
    pub fn set_priority(&self, priority: u8) -> io::Result<()> {
        self.app.set_priority(self.h, priority)
    }
}

impl Drop for TcpListener {
    fn drop(&mut self) {
        self.app.send(Cmd::Close(self.h));
    }
}

/// Closes the connection when the last clone of a stream goes.
#[derive(Debug)]
struct StreamInner {
    app: App,
    h: SocketHandle,
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        self.app.send(Cmd::Close(self.h));
    }
}

/// A TCP connection on the engine. Dropping the last clone closes it
/// gracefully (what was written is still delivered).
#[derive(Clone, Debug)]
pub struct TcpStream {
    inner: Arc<StreamInner>,
    local: SocketAddrV4,
    peer: SocketAddrV4,
    read_timeout: Option<Duration>,
}

impl TcpStream {
    fn new(app: App, h: SocketHandle, local: SocketAddrV4, peer: SocketAddrV4) -> TcpStream {
        TcpStream {
            inner: Arc::new(StreamInner { app, h }),
            local,
            peer,
            read_timeout: None,
        }
    }

    fn app(&self) -> &App {
        &self.inner.app
    }

    /// The local address.
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddrV4 {
        self.peer
    }

    /// Reads fail with `WouldBlock` after waiting this long (`None`: wait
    /// for ever).
    pub fn set_read_timeout(&mut self, t: Option<Duration>) {
        self.read_timeout = t;
    }

    /// Closes our sending side (FIN); reading goes on.
    pub fn shutdown_write(&self) -> io::Result<()> {
        let h = self.inner.h;
        self.app().call(|r| Cmd::Shutdown(h, r), None, None)
    }

    /// Resets the connection (RST); queued data is dropped.
    pub fn abort(&self) -> io::Result<()> {
        let h = self.inner.h;
        self.app().call(|r| Cmd::Abort(h, r), None, None)
    }

    /// The connection's state and counters (as `ss -ti` shows them).
    pub fn info(&self) -> io::Result<TcpInfo> {
        let h = self.inner.h;
        self.app().call(|r| Cmd::Info(h, r), None, None)
    }

    /// Turns Nagle's algorithm off (`true`) or on.
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        let h = self.inner.h;
        self.app().call(|r| Cmd::Nodelay(h, on, r), None, None)
    }

    /// Sets the priority (as `SO_PRIORITY`, 0–255) its packets carry from
    /// now on: a bonded port's `prioritized` policy sends those at or
    /// above its threshold (default 6) over the real-time members.
    pub fn set_priority(&self, priority: u8) -> io::Result<()> {
        self.app().set_priority(self.inner.h, priority)
    }
}

impl Read for TcpStream {
    /// Reads what has arrived (waits for something); `Ok(0)` at the end of
    /// the stream.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let h = self.inner.h;
        let max = buf.len().min(READ_MAX);
        let data = self
            .app()
            .call(|r| Cmd::Read(h, max, r), self.read_timeout, Some(h))?;
        let n = data.len().min(buf.len());
        buf[..n].copy_from_slice(&data[..n]);
        Ok(n)
    }
}

impl Write for TcpStream {
    /// Queues what fits (waits until something fits).
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let h = self.inner.h;
        let chunk = buf[..buf.len().min(TCP_RING)].to_vec();
        self.app().call(|r| Cmd::Write(h, chunk, r), None, None)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A UDP socket on the engine.
#[derive(Debug)]
pub struct UdpSocket {
    app: App,
    h: SocketHandle,
    port: u16,
    read_timeout: Option<Duration>,
    /// Datagrams the engine handed over in a batch, not read yet.
    received: std::sync::Mutex<VecDeque<Datagram>>,
}

impl UdpSocket {
    /// Sends one datagram (waits for ring space if the engine is behind).
    pub fn send_to(&self, data: &[u8], to: SocketAddrV4) -> io::Result<usize> {
        let h = self.h;
        self.app
            .call(|r| Cmd::UdpSend(h, to, vec![data.to_vec()], r), None, None)?;
        Ok(data.len())
    }

    /// Sends several datagrams to `to` in one trip to the engine (as
    /// `sendmmsg(2)` does for the kernel); waits until each is queued.
    /// Returns how many were sent: all of them, or those before the first
    /// that failed (an error only when that is the first).
    pub fn send_batch_to(&self, datagrams: &[&[u8]], to: SocketAddrV4) -> io::Result<usize> {
        if datagrams.is_empty() {
            return Ok(0);
        }
        let (tx, rx) = mpsc::channel();
        let all = datagrams.iter().map(|d| d.to_vec()).collect();
        self.app
            .cmds
            .send(Cmd::UdpSend(self.h, to, all, tx))
            .map_err(|_| gone())?;
        self.app.bell.signal();
        for k in 0..datagrams.len() {
            match rx.recv().map_err(|_| gone())? {
                Ok(()) => {}
                Err(e) if k == 0 => return Err(e),
                Err(_) => return Ok(k),
            }
        }
        Ok(datagrams.len())
    }

    /// Receives one datagram; what does not fit in `buf` is dropped, as
    /// with `recvfrom(2)`. The engine hands over what has arrived in
    /// batches of up to 64: the rest wait here for the next calls.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddrV4)> {
        let mut q = self
            .received
            .lock()
            .map_err(|_| io::Error::other("a receiving thread panicked"))?;
        if q.is_empty() {
            let h = self.h;
            q.extend(self.app.call(
                |r| Cmd::UdpRecv(h, UDP_RECV_BATCH, r),
                self.read_timeout,
                Some(h),
            )?);
        }
        let (data, from) = q.pop_front().ok_or_else(would_block)?;
        let n = data.len().min(buf.len());
        buf[..n].copy_from_slice(&data[..n]);
        Ok((n, from))
    }

    /// Receives fail with `WouldBlock` after waiting this long.
    pub fn set_read_timeout(&mut self, t: Option<Duration>) {
        self.read_timeout = t;
    }

    /// The local port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sets the priority (as `SO_PRIORITY`) of the datagrams it sends
    /// from now on; see [`TcpStream::set_priority`].
    pub fn set_priority(&self, priority: u8) -> io::Result<()> {
        self.app.set_priority(self.h, priority)
    }
}

impl Drop for UdpSocket {
    fn drop(&mut self) {
        self.app.send(Cmd::Close(self.h));
    }
}

// ---- the engine side ------------------------------------------------------------------

/// A socket the service serves, with its waiting calls.
#[derive(Debug)]
struct Sock {
    h: SocketHandle,
    kind: Kind,
    /// Engine-memory ring for send data: region, length.
    ring: Option<(u32, usize)>,
    connect: Option<Reply<(SocketHandle, SocketAddrV4)>>,
    accepts: VecDeque<Reply<(SocketHandle, SocketAddrV4)>>,
    read: Option<(usize, Reply<Vec<u8>>)>,
    write: Option<(Vec<u8>, Reply<usize>)>,
    udp_recv: Option<(usize, Reply<Vec<Datagram>>)>,
    /// Datagrams waiting for ring space: destination, data, reply, and
    /// how many more of the same batch follow (dropped if this one fails).
    udp_send: VecDeque<(SocketAddrV4, Vec<u8>, Reply<()>, usize)>,
    /// Ring position after the last byte handed to the stack (grows for
    /// the socket's life; the ring offset is this modulo the ring length).
    queued: u64,
    /// UDP: ring spans `[start, end)` of datagrams the port has not taken
    /// yet, in send order.
    udp_live: VecDeque<(u64, u64)>,
    /// UDP: datagrams the port has taken (the stack's `udp_sent`).
    udp_done: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tcp,
    Listener,
    Udp,
}

impl Sock {
    fn new(h: SocketHandle, kind: Kind) -> Sock {
        Sock {
            h,
            kind,
            ring: None,
            connect: None,
            accepts: VecDeque::new(),
            read: None,
            write: None,
            udp_recv: None,
            udp_send: VecDeque::new(),
            queued: 0,
            udp_live: VecDeque::new(),
            udp_done: 0,
        }
    }
}

fn bind_err(e: BindError) -> io::Error {
    let kind = match e {
        BindError::AddrInUse => io::ErrorKind::AddrInUse,
        BindError::Unaddressable => io::ErrorKind::AddrNotAvailable,
        BindError::NoRoute => io::ErrorKind::HostUnreachable,
        _ => io::ErrorKind::OutOfMemory,
    };
    io::Error::new(kind, e.to_string())
}

fn tcp_err(e: TcpError) -> io::Error {
    let kind = match e {
        TcpError::Refused => io::ErrorKind::ConnectionRefused,
        TcpError::Reset => io::ErrorKind::ConnectionReset,
        TcpError::TimedOut => io::ErrorKind::TimedOut,
        _ => io::ErrorKind::ConnectionAborted,
    };
    io::Error::new(kind, e.to_string())
}

fn handle_err(e: HandleError) -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, e.to_string())
}

fn would_block() -> io::Error {
    io::Error::new(io::ErrorKind::WouldBlock, "timed out waiting")
}

fn not_connected() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "socket is not connected")
}

impl AppService {
    fn find(&mut self, h: SocketHandle) -> Option<&mut Sock> {
        self.socks.iter_mut().find(|s| s.h == h)
    }

    fn ring_for(&mut self, mem: &mut Memory, kind: Kind) -> (u32, usize) {
        let (free, len) = match kind {
            Kind::Udp => (&mut self.free_udp, UDP_RING),
            _ => (&mut self.free_tcp, TCP_RING),
        };
        let region = free
            .pop()
            .unwrap_or_else(|| mem.add(vec![0u8; len].into_boxed_slice()));
        (region, len)
    }

    fn free_ring(&mut self, kind: Kind, (region, _): (u32, usize)) {
        match kind {
            Kind::Udp => self.free_udp.push(region),
            _ => self.free_tcp.push(region),
        }
    }

    /// Takes one command.
    fn command(&mut self, now: Instant, stack: &mut Stack, cmd: Cmd) {
        match cmd {
            Cmd::Connect(remote, reply) => {
                match stack.tcp_connect(now, remote.into(), None, None) {
                    Ok(h) => {
                        let mut s = Sock::new(h, Kind::Tcp);
                        s.connect = Some(reply);
                        self.socks.push(s);
                    }
                    Err(e) => {
                        let _ = reply.send(Err(bind_err(e)));
                    }
                }
            }
            Cmd::Listen(port, backlog, reply) => {
                let ep = Endpoint::new(Ipv4Address::UNSPECIFIED, port);
                let r = stack.tcp_listen(ep, backlog.max(1), None).map_err(bind_err);
                if let Ok(h) = r {
                    self.socks.push(Sock::new(h, Kind::Listener));
                }
                let _ = reply.send(r);
            }
            Cmd::UdpBind(port, reply) => {
                let ep = Endpoint::new(Ipv4Address::UNSPECIFIED, port);
                let r = stack.udp_bind(ep, None).map_err(bind_err);
                if let Ok(h) = r {
                    self.socks.push(Sock::new(h, Kind::Udp));
                }
                let _ = reply.send(r);
            }
            Cmd::Accept(h, reply) => match self.find(h) {
                Some(s) if s.kind == Kind::Listener => s.accepts.push_back(reply),
                _ => {
                    let _ = reply.send(Err(not_connected()));
                }
            },
            Cmd::Read(h, max, reply) => match self.find(h) {
                Some(s) if s.kind == Kind::Tcp && s.read.is_none() => s.read = Some((max, reply)),
                Some(_) => {
                    let _ = reply.send(Err(io::Error::other("another read is waiting")));
                }
                None => {
                    let _ = reply.send(Err(not_connected()));
                }
            },
            Cmd::Write(h, data, reply) => match self.find(h) {
                Some(s) if s.kind == Kind::Tcp && s.write.is_none() => {
                    s.write = Some((data, reply));
                }
                Some(_) => {
                    let _ = reply.send(Err(io::Error::other("another write is waiting")));
                }
                None => {
                    let _ = reply.send(Err(not_connected()));
                }
            },
            Cmd::UdpSend(h, to, datagrams, reply) => match self.find(h) {
                Some(s) if s.kind == Kind::Udp => {
                    let n = datagrams.len();
                    for (k, d) in datagrams.into_iter().enumerate() {
                        s.udp_send.push_back((to, d, reply.clone(), n - 1 - k));
                    }
                }
                _ => {
                    let _ = reply.send(Err(not_connected()));
                }
            },
            Cmd::UdpRecv(h, max, reply) => match self.find(h) {
                Some(s) if s.kind == Kind::Udp && s.udp_recv.is_none() => {
                    s.udp_recv = Some((max.max(1), reply));
                }
                _ => {
                    let _ = reply.send(Err(not_connected()));
                }
            },
            Cmd::Cancel(h) => {
                if let Some(s) = self.find(h) {
                    if let Some((_, r)) = s.read.take() {
                        let _ = r.send(Err(would_block()));
                    }
                    if let Some((_, r)) = s.udp_recv.take() {
                        let _ = r.send(Err(would_block()));
                    }
                    for r in s.accepts.drain(..) {
                        let _ = r.send(Err(would_block()));
                    }
                }
            }
            Cmd::Shutdown(h, reply) => {
                // After what is waiting to be written.
                let pending = self.find(h).is_some_and(|s| s.write.is_some());
                let r = if pending {
                    Err(io::Error::other("a write is still waiting"))
                } else {
                    stack.tcp_shutdown(h).map_err(handle_err)
                };
                let _ = reply.send(r);
            }
            Cmd::Abort(h, reply) => {
                let _ = reply.send(stack.tcp_abort(h).map_err(handle_err));
            }
            Cmd::Info(h, reply) => {
                let _ = reply.send(stack.tcp_info(h).map_err(handle_err));
            }
            Cmd::Nodelay(h, on, reply) => {
                let _ = reply.send(stack.tcp_set_nodelay(h, on).map_err(handle_err));
            }
            Cmd::Priority(h, p, reply) => {
                let _ = reply.send(stack.set_priority(h, p).map_err(handle_err));
            }
            Cmd::Close(h) => {
                let _ = stack.close(now, h);
                if let Some(i) = self.socks.iter().position(|s| s.h == h) {
                    let s = self.socks.swap_remove(i);
                    // Waiting calls of other clones end here.
                    if let Some((_, r)) = s.read {
                        let _ = r.send(Err(not_connected()));
                    }
                    if let Some((_, r)) = s.write {
                        let _ = r.send(Err(not_connected()));
                    }
                    if let Some(ring) = s.ring {
                        // The stack may still send from the ring (a FIN
                        // after queued data) until it releases the socket;
                        // a UDP socket or a dead handle holds nothing.
                        let alive = s.kind == Kind::Tcp && stack.tcp_state(h).is_ok();
                        if alive {
                            self.retiring.push((h, ring.0, ring.1));
                        } else {
                            self.free_ring(s.kind, ring);
                        }
                    }
                }
            }
        }
    }

    /// Up to `max` datagrams waiting on socket `h`, each copied out at its
    /// length (through one scratch buffer per engine thread: a 64 KiB
    /// buffer per datagram would cost more than the datagram).
    fn take_datagrams(
        stack: &mut Stack,
        h: SocketHandle,
        max: usize,
    ) -> Result<Vec<Datagram>, HandleError> {
        thread_local! {
            static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        SCRATCH.with_borrow_mut(|buf| {
            buf.resize(UDP_MAX, 0);
            let mut got = Vec::new();
            while got.len() < max {
                match stack.udp_recv_from(h, buf)? {
                    Some((n, from)) => {
                        got.push((buf.get(..n).unwrap_or(buf).to_vec(), from.into()))
                    }
                    None => break,
                }
            }
            Ok(got)
        })
    }

    /// Moves a socket's waiting calls along; returns whether any did.
    fn serve(
        now: Instant,
        stack: &mut Stack,
        mem: &mut Memory,
        s: &mut Sock,
        accepted: &mut Vec<Sock>,
    ) -> bool {
        let mut any = false;
        match s.kind {
            Kind::Listener => {
                while !s.accepts.is_empty() {
                    match stack.tcp_accept(s.h) {
                        Ok(Some(h)) => {
                            let peer = stack
                                .tcp_info(h)
                                .map(|i| SocketAddrV4::from(i.remote))
                                .unwrap_or(SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0));
                            let delivered = s
                                .accepts
                                .pop_front()
                                .is_some_and(|r| r.send(Ok((h, peer))).is_ok());
                            if delivered {
                                accepted.push(Sock::new(h, Kind::Tcp));
                            } else {
                                let _ = stack.close(now, h);
                            }
                            any = true;
                        }
                        Ok(None) => break,
                        Err(e) => {
                            for r in s.accepts.drain(..) {
                                let _ = r.send(Err(handle_err(e)));
                            }
                            any = true;
                        }
                    }
                }
            }
            Kind::Tcp => {
                let info = stack.tcp_info(s.h).ok();
                let error = info.as_ref().and_then(|i| i.error);
                if let Some(r) = s.connect.take() {
                    match (&info, error) {
                        (_, Some(e)) => {
                            let _ = r.send(Err(tcp_err(e)));
                            any = true;
                        }
                        (Some(i), None)
                            if !matches!(i.state, State::SynSent | State::SynReceived) =>
                        {
                            let _ = r.send(Ok((s.h, i.local.into())));
                            any = true;
                        }
                        (None, None) => {
                            let _ = r.send(Err(not_connected()));
                            any = true;
                        }
                        _ => s.connect = Some(r),
                    }
                }
                any |= Self::serve_write(stack, mem, s);
                if let Some((max, r)) = s.read.take() {
                    let mut buf = vec![0u8; max];
                    match stack.tcp_recv(s.h, &mut buf) {
                        Ok(0) => s.read = Some((max, r)),
                        Ok(n) => {
                            buf.truncate(n);
                            let _ = r.send(Ok(buf));
                            any = true;
                        }
                        Err(RecvError::Finished) => {
                            let _ = r.send(Ok(Vec::new()));
                            any = true;
                        }
                        Err(RecvError::Failed(e)) => {
                            let _ = r.send(Err(tcp_err(e)));
                            any = true;
                        }
                        Err(RecvError::InvalidState) if s.connect.is_some() => {
                            s.read = Some((max, r));
                        }
                        Err(_) => {
                            let _ = r.send(Err(not_connected()));
                            any = true;
                        }
                    }
                }
            }
            Kind::Udp => {
                any |= Self::serve_udp_send(stack, mem, s);
                if let Some((max, r)) = s.udp_recv.take() {
                    match Self::take_datagrams(stack, s.h, max) {
                        Ok(got) if got.is_empty() => s.udp_recv = Some((max, r)),
                        Ok(got) => {
                            let _ = r.send(Ok(got));
                            any = true;
                        }
                        Err(e) => {
                            let _ = r.send(Err(handle_err(e)));
                            any = true;
                        }
                    }
                }
            }
        }
        any
    }

    /// Copies a waiting write into the socket's ring as far as acknowledged
    /// data and the stack's send space allow, and queues it by reference.
    fn serve_write(stack: &mut Stack, mem: &mut Memory, s: &mut Sock) -> bool {
        let Some((data, reply)) = s.write.take() else {
            return false;
        };
        if let Some(e) = stack.tcp_info(s.h).ok().and_then(|i| i.error) {
            let _ = reply.send(Err(tcp_err(e)));
            return true;
        }
        let Some((region, len)) = s.ring else {
            s.write = Some((data, reply));
            return false;
        };
        let acked = stack.tcp_acked(s.h).unwrap_or(0);
        let space = stack.tcp_send_space(s.h).unwrap_or(0);
        let mut done = 0;
        while done < data.len() {
            let used = (s.queued - acked.min(s.queued)) as usize;
            let pos = (s.queued % len as u64) as usize;
            let n = (len - used)
                .min(len - pos)
                .min(data.len() - done)
                .min(space.saturating_sub(done));
            if n == 0 {
                break;
            }
            let Some(dst) = mem.region_mut(region).and_then(|r| r.get_mut(pos..pos + n)) else {
                break;
            };
            dst.copy_from_slice(&data[done..done + n]);
            match stack.tcp_send(s.h, PayloadRef::new(region, pos as u64, n as u32)) {
                Ok(k) => {
                    s.queued += k as u64;
                    done += k;
                    if k < n {
                        break;
                    }
                }
                Err(e) => {
                    if done == 0 {
                        let err = match e {
                            SendError::Failed(t) => tcp_err(t),
                            SendError::InvalidState => {
                                // Not yet connected: wait; shut down: fail.
                                let connecting = stack.tcp_state(s.h).is_ok_and(|st| {
                                    matches!(st, State::SynSent | State::SynReceived)
                                });
                                if connecting {
                                    s.write = Some((data, reply));
                                    return false;
                                }
                                io::Error::new(
                                    io::ErrorKind::BrokenPipe,
                                    "socket shut down for writing",
                                )
                            }
                            _ => not_connected(),
                        };
                        let _ = reply.send(Err(err));
                        return true;
                    }
                    break;
                }
            }
        }
        if done == 0 {
            s.write = Some((data, reply));
            return false;
        }
        let _ = reply.send(Ok(done));
        true
    }

    /// Queues waiting datagrams through the socket's ring.
    fn serve_udp_send(stack: &mut Stack, mem: &mut Memory, s: &mut Sock) -> bool {
        let Some((region, len)) = s.ring else {
            return false;
        };
        let len64 = len as u64;
        // Datagrams the port has taken free their ring space.
        let sent = stack.udp_sent(s.h).unwrap_or(0);
        while s.udp_done < sent {
            s.udp_live.pop_front();
            s.udp_done += 1;
        }
        let mut any = false;
        while let Some((to, data, _, _)) = s.udp_send.front() {
            let (to, n) = (*to, data.len() as u64);
            // Each datagram lies whole in the ring: skip the ring's tail if
            // it does not fit there.
            let mut pos = s.queued;
            if pos % len64 + n > len64 {
                pos += len64 - pos % len64;
            }
            let live_start = s.udp_live.front().map_or(pos, |&(a, _)| a);
            let fits = n <= len64 && pos + n - live_start <= len64;
            let off = (pos % len64) as usize;
            let dst = mem
                .region_mut(region)
                .and_then(|r| r.get_mut(off..off + n as usize));
            let result = match dst {
                Some(dst) if fits => {
                    dst.copy_from_slice(data);
                    stack.udp_send_to(
                        s.h,
                        to.into(),
                        PayloadRef::new(region, off as u64, n as u32),
                    )
                }
                _ if n > len64 => Err(UdpSendError::TooLarge),
                // Wait for the port to take older datagrams.
                _ => break,
            };
            if result == Err(UdpSendError::Full) {
                break;
            }
            let Some((_, _, reply, rest)) = s.udp_send.pop_front() else {
                break;
            };
            any = true;
            match result {
                Ok(()) => {
                    s.udp_live.push_back((pos, pos + n));
                    s.queued = pos + n;
                    let _ = reply.send(Ok(()));
                }
                Err(e) => {
                    let _ = reply.send(Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        e.to_string(),
                    )));
                    // A batch stops at its first failure, as sendmmsg(2).
                    for _ in 0..rest {
                        s.udp_send.pop_front();
                    }
                }
            }
        }
        any
    }
}

impl Service for AppService {
    fn name(&self) -> &str {
        "app"
    }

    fn start(
        &mut self,
        _now: Instant,
        _stack: &mut Stack,
        _mem: &mut Memory,
    ) -> Result<(), String> {
        Ok(())
    }

    fn step(&mut self, now: Instant, stack: &mut Stack, mem: &mut Memory) -> bool {
        self.bell.drain();
        let mut any = false;
        while let Ok(cmd) = self.cmds.try_recv() {
            self.command(now, stack, cmd);
            any = true;
        }
        for h in std::mem::take(&mut self.released) {
            if let Some(i) = self.retiring.iter().position(|r| r.0 == h) {
                let (_, region, len) = self.retiring.swap_remove(i);
                self.free_ring(Kind::Tcp, (region, len));
            }
        }
        let mut accepted = Vec::new();
        let mut socks = std::mem::take(&mut self.socks);
        for s in &mut socks {
            if s.ring.is_none() && s.kind != Kind::Listener {
                s.ring = Some(self.ring_for(mem, s.kind));
            }
            any |= Self::serve(now, stack, mem, s, &mut accepted);
        }
        socks.append(&mut accepted);
        self.socks = socks;
        any
    }

    fn event(&mut self, h: SocketHandle, e: Events) {
        if e.contains(Events::RELEASED) {
            self.released.push(h);
        }
    }

    fn wake_fd(&self) -> Option<RawFd> {
        Some(self.bell.raw())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use softoe_stack::StackConfig;
    use softoe_wire::{EthernetAddress, Ipv4Cidr};

    /// Runs `f` on a thread with an [`App`] while this thread serves it
    /// on a stack without a device (commands only), and returns what `f`
    /// returned with the stack.
    fn with_app<T: Send + 'static>(f: impl FnOnce(App) -> T + Send + 'static) -> (T, Stack) {
        let cfg = StackConfig::new(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            Ipv4Cidr::new(Ipv4Address([10, 0, 0, 1]), 24).unwrap(),
        );
        let mut stack = Stack::new(cfg).unwrap();
        let mut mem = Memory::new();
        let (app, mut svc) = channel().unwrap();
        svc.start(Instant::ZERO, &mut stack, &mut mem).unwrap();
        let t = std::thread::spawn(move || f(app));
        while !t.is_finished() {
            svc.step(Instant::ZERO, &mut stack, &mut mem);
            std::thread::sleep(Duration::from_micros(100));
        }
        svc.step(Instant::ZERO, &mut stack, &mut mem);
        (t.join().unwrap(), stack)
    }

    #[test]
    fn priority_is_set_on_live_sockets_and_refused_on_gone_ones() {
        let (r, _stack) = with_app(|app| -> io::Result<()> {
            let l = app.tcp_listen(80, 4)?;
            l.set_priority(6)?;
            let u = app.udp_bind(5000)?;
            u.set_priority(7)?;
            let gone = u.h;
            drop(u);
            // The stack no longer knows the handle: an error, not a no-op.
            let e = app.set_priority(gone, 6).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::NotConnected);
            Ok(())
        });
        r.unwrap();
        // That the priority reaches the frames (and a bond's real-time
        // members) is tested on a real wire: tests/bond.rs.
    }
}
