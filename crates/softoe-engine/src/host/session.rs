//! One attached program: its region, its sockets, its commands.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;

use softoe_abi::{
    BELL_MAGIC, Bell, BellOp, CMD_QUIET, CMP_RELEASE, CONGESTION_CUBIC, CONGESTION_RENO, Command,
    Completion, Consumer, ENGINE_POLLING, ENGINE_SLEEPING, EV_ACCEPT, EV_CONNECTED, EV_ERR,
    EV_HELD, EV_HUP, EV_MOVED, EV_RDHUP, EV_READABLE, EV_RXFULL, EV_WRITABLE, Layout, MAX_BELLS,
    Producer, RecvTarget, Region, Request, RingError, RingSpan, SESSION_CLOSED, SHUT_RD, SHUT_WR,
    SendSource, SlotView, SockKind, SockOpt, TcpInfoRecord, UdpHeader, decode, errno, pack_addr,
    waiter_bell,
};
use softoe_stack::{
    Algorithm, BindError, Endpoint, Events, HandleError, Instant, Keepalive, PayloadRef, RecvError,
    SendError, SocketHandle, Stack, State, TcpError, UdpSendError,
};
use softoe_wire::Ipv4Address;
use tracing::{debug, trace, warn};

use super::sys::{self, EventFd, Mapping};
use super::{HostConfig, SessionStat};
use crate::emulate::{AccessMeter, nanos};
use crate::memory::Memory;

/// Commands taken from one session per step, so one program cannot starve
/// the others or the network.
const CMD_BUDGET: usize = 256;
/// Completions held back while the program's ring is full, before the
/// engine stops taking its commands (backpressure, bounded memory).
const OVERFLOW_MAX: usize = 4096;
/// Bytes of engine memory per UDP socket for datagrams on their way out.
const UDP_RING: u64 = 256 * 1024;
/// Room made in a TCP socket's list of sends awaiting their ACK when it
/// is created (one entry per send command not yet acknowledged), and in
/// its queue of zero-copy buffers at the first: enough for a bulk
/// sender's steady state, so neither grows mid-stream.
const HOLDS: usize = 64;

/// What a send's bytes hold up until the peer acknowledges them.
#[derive(Clone, Copy, Debug)]
enum Hold {
    /// Send-ring bytes up to this ring position.
    TxRing(u64),
    /// Engine copy-ring bytes up to this position.
    Copy(u64),
    /// A zero-copy buffer: its command's tag and length.
    Zerocopy(u64, u64),
}

/// Options set before the stack socket exists.
#[derive(Clone, Copy, Debug, Default)]
struct Opts {
    nodelay: Option<bool>,
    keepalive: Option<Option<Keepalive>>,
    user_timeout: Option<Option<std::time::Duration>>,
    tos: Option<u8>,
    ttl: Option<u8>,
    /// `SO_PRIORITY`: unlike the rest, applied at once to a live socket
    /// as well (every later frame goes with it).
    priority: Option<u8>,
    congestion: Option<Algorithm>,
    quickack: Option<bool>,
}

#[derive(Debug)]
struct HSock {
    kind: SockKind,
    /// The waiter words (reader's, writer's) whose bells were last rung:
    /// one ring per sleep.
    rang: [u32; 2],
    /// Send-ring or copy-ring bytes freed since the writer's bell last
    /// rang, and whether it should ring now ([`Session::ring_waiters`]).
    tx_freed: u64,
    tx_wake: bool,
    h: Option<SocketHandle>,
    listener: bool,
    /// A listener other sessions share (`ADOPT`): closing it here leaves
    /// the stack's listener to the others.
    shared: bool,
    bound: Option<Endpoint>,
    /// UDP: where `send` without an address goes.
    peer: Option<Endpoint>,
    rx: RingSpan,
    tx: RingSpan,
    /// Receive-ring bytes written (trusted copy of the slot's `rx_tail`).
    rx_tail: u64,
    /// The program's `rx_head` as last seen (it only moves forward).
    rx_head: u64,
    rx_fin: bool,
    /// The stack has more than the receive ring could take.
    rx_blocked: bool,
    /// Send-ring bytes the stack has taken (`copy` policy).
    tx_queued: u64,
    /// Engine copy ring: region, length, bytes written, bytes free again.
    copy: Option<(u32, u64)>,
    copy_queued: u64,
    copy_acked: u64,
    /// Bytes handed to the stack on this connection.
    stream: u64,
    holds: VecDeque<(u64, Hold)>,
    /// UDP: copy-ring spans of datagrams the port has not taken yet.
    udp_live: VecDeque<(u64, u64)>,
    udp_done: u64,
    connect_tag: Option<u64>,
    /// A receive buffer the program posted (`RECV`): the next bytes go
    /// there, not into the ring.
    posted: Option<Posted>,
    /// The last read was placed directly: what follows stays in the stack
    /// for the next posted buffer until the program asks for the ring
    /// (`RXDONE`), so a reader that keeps posting gets every byte placed.
    hold: bool,
    opts: Opts,
    events: u32,
    dirty: bool,
    /// Other processes may hold this connection (a `fork` since it was
    /// made): the host service watches the descriptor every holder shares,
    /// and until the last copy closes a `CLOSE` only detaches it.
    watched: bool,
    /// The program closed it while watched: the connection lives on here,
    /// received bytes still entering the ring, until another session takes
    /// it (`ADOPT`) or the last descriptor closes.
    detached: Option<Detached>,
    /// Another session took the connection (this stack handle): only
    /// `CLOSE` is answered, once what this socket sent is acknowledged.
    moved: Option<SocketHandle>,
    /// Zero-copy buffers queued whole (`SEND_QUEUE`), not all handed to
    /// the stack yet, in order.
    queued: VecDeque<QueuedSend>,
    /// The program shut the sending half down while sends were queued: the
    /// FIN goes when the queue has gone to the stack.
    fin_after_queue: bool,
    /// Send-ring bytes queued (`SEND_RING | SEND_QUEUE`) that the stack has
    /// not taken yet: they follow `tx_queued` in the ring.
    ring_backlog: u64,
}

/// A queued zero-copy send: its command's tag, the buffer, and how much
/// of it the stack has taken.
#[derive(Clone, Copy, Debug)]
struct QueuedSend {
    tag: u64,
    offset: u64,
    len: u64,
    taken: u64,
    /// Bytes of the socket's send ring (`offset` and `tag` unused): what
    /// follows its `tx_queued`.
    ring: bool,
}

/// How a detached connection's program closed it: what to do at the
/// last close.
#[derive(Clone, Copy, Debug)]
struct Detached {
    tag: Option<u64>,
    abort: bool,
}

/// A connection leaving one session for another (`ADOPT`).
#[derive(Debug)]
pub(super) struct Moving {
    h: SocketHandle,
    /// Bytes in the old receive ring the program had not read.
    unread: Vec<u8>,
    rx_fin: bool,
    /// Bytes handed to the stack so far (where the new socket's count
    /// goes on).
    stream: u64,
    opts: Opts,
    local: u64,
    remote: u64,
}

impl Moving {
    /// The connection's stack handle.
    pub(super) fn h(&self) -> SocketHandle {
        self.h
    }
}

/// A posted receive buffer (direct placement, LyraNET §3.3).
#[derive(Clone, Copy, Debug)]
struct Posted {
    tag: u64,
    target: RecvTarget,
    len: u64,
}

impl HSock {
    fn new(kind: SockKind, rx: RingSpan, tx: RingSpan) -> HSock {
        HSock {
            kind,
            rang: [0; 2],
            tx_freed: 0,
            tx_wake: false,
            h: None,
            listener: false,
            shared: false,
            bound: None,
            peer: None,
            rx,
            tx,
            rx_tail: 0,
            rx_head: 0,
            rx_fin: false,
            rx_blocked: false,
            tx_queued: 0,
            copy: None,
            copy_queued: 0,
            copy_acked: 0,
            stream: 0,
            holds: if kind == SockKind::Tcp {
                VecDeque::with_capacity(HOLDS)
            } else {
                VecDeque::new()
            },
            udp_live: VecDeque::new(),
            udp_done: 0,
            connect_tag: None,
            posted: None,
            hold: false,
            opts: Opts::default(),
            events: 0,
            dirty: true,
            watched: false,
            detached: None,
            moved: None,
            queued: VecDeque::new(),
            fin_after_queue: false,
            ring_backlog: 0,
        }
    }
}

/// A closed socket the stack is still finishing: what to release when it
/// reports `RELEASED`.
#[derive(Debug)]
struct Retiring {
    id: u32,
    /// Bytes handed to the stack: when all are acknowledged, the stack holds
    /// no reference into the region any more.
    stream: u64,
    close_tag: Option<u64>,
    zerocopy: Vec<(u64, u64)>,
    copy: Option<(u32, u64)>,
}

#[derive(Debug)]
pub(super) struct Session {
    pub(super) id: u32,
    pub(super) pid: i32,
    uid: u32,
    conn: OwnedFd,
    _memfd: OwnedFd,
    map: Mapping,
    region: Region,
    /// The data area as a `Memory` region (payload references name it).
    mem: Option<u32>,
    cmds: Consumer<Command>,
    cmps: Producer<Completion>,
    pub(super) bell_engine: EventFd,
    bell_app: EventFd,
    /// Waiter doorbells the program registered ([`Bell`]), by index.
    bells: Vec<Option<EventFd>>,
    socks: Vec<Option<HSock>>,
    /// No socket id below this is free ([`Session::new_id`]).
    free_hint: usize,
    /// Sockets in `socks`, and how many of them are detached: kept as they
    /// change, so `softoe stat`'s figures cost nothing per refresh.
    open_n: usize,
    detached_n: usize,
    /// Sockets to serve this turn (each once: `HSock::dirty`).
    dirty: Vec<u32>,
    /// Sockets whose receive ring was full with more in the stack.
    blocked: Vec<u32>,
    by_handle: HashMap<SocketHandle, u32>,
    retiring: HashMap<SocketHandle, Retiring>,
    overflow: VecDeque<Completion>,
    /// Events or completions the program has not been woken for.
    unwoken: u32,
    first_unwoken: Option<Instant>,
    /// Engine copy rings no socket uses now.
    free_copy: Vec<(u32, u64)>,
    pub(super) dead: bool,
    commands: u64,
    rejected: u64,
    wakeups: u64,
    /// Bytes placed in posted receive buffers.
    direct: u64,
    /// `ADOPT`s waiting for the host service (they name another session):
    /// (tag, the socket id reserved here, the request).
    pub(super) adopts: Vec<(u64, u32, Adopt)>,
    /// Shared listeners closed here this turn: the host service hands
    /// their ownership on.
    pub(super) unshared: Vec<SocketHandle>,
    /// Watches the program asked for (`BellOp::Watch`), for the host
    /// service to add to its epoll set.
    pub(super) new_watches: Vec<(SocketHandle, OwnedFd)>,
    /// Closed or moved connections whose sent bytes are not all
    /// acknowledged yet (their `Retiring` entries): released as soon as
    /// they are, not when the stack lets the socket go (after TIME-WAIT).
    acking: Vec<SocketHandle>,
    /// Closed connections still handing queued zero-copy buffers to the
    /// stack: they close for real when the queue is empty.
    draining: Vec<u32>,
    /// `serve`'s completions for one socket, kept between calls (no
    /// allocation per release or placed read; made with room for as many
    /// releases at once as a socket has sends in flight, `HOLDS`).
    done_buf: Vec<Completion>,
    /// Counts (and delays, when memory is emulated slower) every access to
    /// the program's memory: commands taken, completions and events
    /// published, doorbells rung; times commands and served sockets.
    pub(super) meter: AccessMeter,
}

/// An `ADOPT` as the host service resolves it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Adopt {
    pub from_session: u32,
    pub from_sock: u32,
    pub secret: [u64; 2],
}

/// 128 random bits from the kernel.
fn secret() -> io::Result<[u64; 2]> {
    let mut b = [0u8; 16];
    // SAFETY: getrandom writes at most `b.len()` bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 16 {
        return Err(io::Error::last_os_error());
    }
    Ok([
        u64::from_ne_bytes(b[..8].try_into().unwrap_or_default()),
        u64::from_ne_bytes(b[8..].try_into().unwrap_or_default()),
    ])
}

fn bind_errno(e: BindError) -> i32 {
    match e {
        BindError::AddrInUse => errno::EADDRINUSE,
        BindError::Unaddressable => errno::EADDRNOTAVAIL,
        BindError::NoRoute => errno::ENETUNREACH,
        _ => errno::ENOBUFS,
    }
}

fn tcp_errno(e: TcpError) -> i32 {
    match e {
        TcpError::Refused => errno::ECONNREFUSED,
        TcpError::Reset => errno::ECONNRESET,
        TcpError::TimedOut => errno::ETIMEDOUT,
        _ => errno::ECONNABORTED,
    }
}

fn handle_errno(_: HandleError) -> i32 {
    errno::ENOTCONN
}

fn endpoint(addr_be: u32, port: u16) -> Endpoint {
    Endpoint::new(Ipv4Address::from_bits(u32::from_be(addr_be)), port)
}

fn packed(ep: Endpoint) -> u64 {
    pack_addr(ep.addr.to_bits().to_be(), ep.port)
}

/// Linux's `TCP_*` state numbers.
fn linux_state(s: State) -> u32 {
    match s {
        State::Established => 1,
        State::SynSent => 2,
        State::SynReceived => 3,
        State::FinWait1 => 4,
        State::FinWait2 => 5,
        State::TimeWait => 6,
        State::Closed => 7,
        State::CloseWait => 8,
        State::LastAck => 9,
        State::Listen => 10,
        State::Closing => 11,
    }
}

type Result<T> = std::result::Result<T, i32>;

impl Session {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        id: u32,
        pid: i32,
        uid: u32,
        conn: OwnedFd,
        memfd: OwnedFd,
        map: Mapping,
        layout: Layout,
        bell_engine: EventFd,
        bell_app: EventFd,
    ) -> io::Result<Session> {
        if (map.len() as u64) < layout.region_len() {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        // SAFETY: the mapping is `region_len` bytes, page-aligned, zeroed
        // (fresh memfd), and lives as long as this session, which holds it;
        // the program gets the memfd only after this returns.
        let region = unsafe { Region::init(map.ptr(), layout, id) };
        region.set_secret(secret()?);
        let cmds = region.command_consumer();
        let cmps = region.completion_producer();
        Ok(Session {
            id,
            pid,
            uid,
            conn,
            _memfd: memfd,
            map,
            region,
            mem: None,
            cmds,
            cmps,
            bell_engine,
            bell_app,
            bells: (0..MAX_BELLS).map(|_| None).collect(),
            socks: (0..layout.socks()).map(|_| None).collect(),
            free_hint: 0,
            open_n: 0,
            detached_n: 0,
            dirty: Vec::new(),
            blocked: Vec::new(),
            by_handle: HashMap::new(),
            retiring: HashMap::new(),
            overflow: VecDeque::new(),
            unwoken: 0,
            first_unwoken: None,
            free_copy: Vec::new(),
            dead: false,
            commands: 0,
            rejected: 0,
            wakeups: 0,
            direct: 0,
            adopts: Vec::new(),
            unshared: Vec::new(),
            new_watches: Vec::new(),
            acking: Vec::new(),
            draining: Vec::new(),
            done_buf: Vec::with_capacity(HOLDS),
            meter: AccessMeter::default(),
        })
    }

    /// What the program gets: the region, the engine's doorbell, its own.
    pub(super) fn fds(&self) -> [RawFd; 3] {
        [
            self._memfd.as_raw_fd(),
            self.bell_engine.raw(),
            self.bell_app.raw(),
        ]
    }

    pub(super) fn conn_fd(&self) -> RawFd {
        self.conn.as_raw_fd()
    }

    /// Reads what the program sent on its Unix socket ([`Bell`] messages)
    /// and says whether its end has closed.
    pub(super) fn read_conn(&mut self) -> bool {
        let mut b = [0u8; 64];
        loop {
            match sys::recv_with_fds(self.conn.as_raw_fd(), &mut b) {
                Ok(Some((0, _))) | Err(_) => return true,
                Ok(Some((n, fds))) => self.bell_message(&b[..n], fds),
                Ok(None) => return false,
            }
        }
    }

    /// Registers or forgets a waiter's doorbell. Anything else on the
    /// socket is ignored (its descriptors are closed when `fds` drops).
    fn bell_message(&mut self, b: &[u8], fds: Vec<OwnedFd>) {
        let Some(m) = Bell::from_bytes(b) else {
            debug!(
                session = self.id,
                len = b.len(),
                "ignored a message that is not a bell"
            );
            return;
        };
        match m.op() {
            Some(BellOp::Add) => {
                let answer = |status: i32, index: u32| Bell {
                    magic: BELL_MAGIC,
                    op: BellOp::Add as u32,
                    index,
                    status: -status,
                    _pad: [0; 3],
                };
                let mut fds = fds.into_iter();
                let reply = match (fds.next(), fds.next()) {
                    (Some(fd), None) => match EventFd::adopt(fd) {
                        Ok(bell) => match self.bells.iter().position(Option::is_none) {
                            Some(i) => {
                                self.bells[i] = Some(bell);
                                answer(0, i as u32)
                            }
                            None => answer(errno::ENOSPC, 0),
                        },
                        Err(_) => answer(errno::EINVAL, 0),
                    },
                    _ => answer(errno::EINVAL, 0),
                };
                let _ = sys::send_with_fds(self.conn.as_raw_fd(), &reply.to_bytes(), &[]);
            }
            Some(BellOp::Watch) => {
                let mut fds = fds.into_iter();
                let status = match (fds.next(), fds.next()) {
                    (Some(fd), None) if !sys::is_unix_stream(fd.as_raw_fd()) => errno::EINVAL,
                    (Some(fd), None) => match self.watch(m.index) {
                        Ok(h) => {
                            self.new_watches.push((h, fd));
                            0
                        }
                        Err(e) => e,
                    },
                    _ => errno::EINVAL,
                };
                if status != 0 {
                    debug!(
                        session = self.id,
                        sock = m.index,
                        errno = status,
                        "watch refused"
                    );
                }
                let reply = Bell {
                    magic: BELL_MAGIC,
                    op: BellOp::Watch as u32,
                    index: m.index,
                    status: -status,
                    _pad: [0; 3],
                };
                let _ = sys::send_with_fds(self.conn.as_raw_fd(), &reply.to_bytes(), &[]);
            }
            Some(BellOp::Remove) => {
                if let Some(b) = self.bells.get_mut(m.index as usize) {
                    *b = None;
                }
            }
            None => debug!(session = self.id, op = m.op, "unknown bell operation"),
        }
    }

    /// Marks connection `id` watched; its stack handle.
    fn watch(&mut self, id: u32) -> Result<SocketHandle> {
        let s = self.sock(id)?;
        if s.kind != SockKind::Tcp || s.listener {
            return Err(errno::EOPNOTSUPP);
        }
        let h = s.h.ok_or(errno::ENOTCONN)?;
        if s.watched {
            return Err(errno::EALREADY);
        }
        s.watched = true;
        Ok(h)
    }

    /// The host service could not watch connection `h`: it closes as an
    /// unwatched one.
    pub(super) fn unwatch(&mut self, h: SocketHandle) {
        if let Some(&id) = self.by_handle.get(&h)
            && let Some(Some(s)) = self.socks.get_mut(id as usize)
        {
            s.watched = false;
        }
    }

    /// Every descriptor of connection `h` has closed, in every process:
    /// a detached socket closes now; an open one closes at its `CLOSE`
    /// (which must be on its way: no process can name it any more).
    pub(super) fn watch_gone(&mut self, now: Instant, stack: &mut Stack, h: SocketHandle) {
        let Some(&id) = self.by_handle.get(&h) else {
            return;
        };
        let Some(Some(s)) = self.socks.get_mut(id as usize) else {
            return;
        };
        s.watched = false;
        if let Some(d) = s.detached.take() {
            self.detached_n = self.detached_n.saturating_sub(1);
            debug!(
                session = self.id,
                sock = id,
                "last descriptor closed: closing the detached connection"
            );
            self.close_sock(now, stack, id, d.tag, d.abort);
        }
    }

    pub(super) fn stat(&self) -> SessionStat {
        SessionStat {
            id: self.id,
            pid: self.pid,
            uid: self.uid,
            sockets: self.open_n,
            closing: self.retiring.len(),
            detached: self.detached_n,
            commands: self.commands,
            rejected: self.rejected,
            direct: self.direct,
            wakeups: self.wakeups,
            dead: self.dead,
        }
    }

    /// The program has gone (its end of the Unix socket closed). What it
    /// posted before it went is carried out first: its writes returned, so
    /// their bytes are the stack's to send, as the kernel sends a socket
    /// buffer at exit. Then its sockets close as [`Session::end`] says.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn exit(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        slot: usize,
        owner: &mut HashMap<SocketHandle, usize>,
        scratch: &mut Vec<u8>,
        mem: &mut Memory,
        cfg: &HostConfig,
    ) {
        // Nobody reads completions any more: none is kept back for it.
        self.dead = true;
        self.overflow.clear();
        // What is there now, no more: another process mapping the region
        // (a child that inherited it) cannot keep the engine here.
        let now_there = self.cmds.available().unwrap_or(0) as usize;
        match self.run_commands(now_there, now, stack, cfg, slot, owner, scratch, mem) {
            Ok(0) => {}
            Ok(n) => debug!(session = self.id, commands = n, "carried out at exit"),
            Err(e) => debug!(session = self.id, error = %e, "command ring broken at exit"),
        }
        self.end(now, stack, owner);
    }

    /// The program has gone: close its sockets as the kernel does at exit
    /// (FIN after what they still had to send, or RST where data was left
    /// unread).
    pub(super) fn end(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        owner: &mut HashMap<SocketHandle, usize>,
    ) {
        self.dead = true;
        self.region
            .engine_state()
            .store(SESSION_CLOSED, Ordering::Release);
        let mine: Vec<SocketHandle> = self.by_handle.keys().copied().collect();
        for id in 0..self.socks.len() as u32 {
            self.close_sock(now, stack, id, None, false);
        }
        self.overflow.clear();
        // Only this session's own handles go: the map is every session's
        // (dropping the others' once made every exit stall every other
        // program — their stack events no longer reached them).
        for h in mine {
            if !self.retiring.contains_key(&h)
                && !self.unshared.contains(&h)
                && !self.by_handle.contains_key(&h)
            {
                owner.remove(&h);
            }
        }
    }

    /// Dead, and the stack holds no reference into its region: every
    /// closed socket is gone or has had all its bytes acknowledged (a
    /// socket in TIME-WAIT needs nothing of the program).
    pub(super) fn finished(&self, stack: &Stack) -> bool {
        self.dead
            // Detached connections wait for another process or the last
            // descriptor; the region holds their unread bytes.
            && self.socks.iter().all(Option::is_none)
            && self.retiring.iter().all(|(&h, r)| {
                r.stream == 0
                    || stack.tcp_acked(h).is_err()
                    || stack.tcp_acked(h).is_ok_and(|a| a >= r.stream)
                    || stack
                        .tcp_state(h)
                        .is_ok_and(|st| matches!(st, State::Closed | State::TimeWait))
            })
    }

    /// Whether `secret` is this session's.
    /// Tells the program, before it sees the region, the interface the
    /// engine's port is on and the congestion control algorithm sockets
    /// get by default.
    pub(super) fn tell(&self, device: Option<&str>, congestion: Algorithm) {
        if let Some(d) = device {
            self.region.set_device(d.as_bytes());
        }
        self.region.set_congestion(match congestion {
            Algorithm::NewReno => CONGESTION_RENO,
            _ => CONGESTION_CUBIC,
        });
    }

    pub(super) fn secret_is(&self, secret: [u64; 2]) -> bool {
        // Compared in full, not stopping at the first difference.
        let mine = self.region.secret();
        ((mine[0] ^ secret[0]) | (mine[1] ^ secret[1])) == 0
    }

    /// The listener behind socket `id`, marked shared from now on: its
    /// handle and address.
    pub(super) fn share_listener(&mut self, id: u32) -> Result<(SocketHandle, Option<Endpoint>)> {
        let s = self
            .socks
            .get_mut(id as usize)
            .and_then(Option::as_mut)
            .ok_or(errno::ENOENT)?;
        match s.h {
            Some(h) if s.listener => {
                s.shared = true;
                Ok((h, s.bound))
            }
            _ => Err(errno::EOPNOTSUPP),
        }
    }

    /// Finishes an `ADOPT`: socket `id` becomes a share of listener `h`,
    /// or goes again with `err`.
    pub(super) fn finish_adopt(
        &mut self,
        tag: u64,
        id: u32,
        r: Result<(SocketHandle, Option<Endpoint>)>,
    ) {
        match r {
            Ok((h, bound)) => {
                if let Some(Some(s)) = self.socks.get_mut(id as usize) {
                    s.h = Some(h);
                    s.listener = true;
                    s.shared = true;
                    s.bound = bound;
                }
                if let (Some(v), Some(b)) = (self.region.slot(id), bound) {
                    v.set_local(pack_addr(b.addr.to_bits().to_be(), b.port));
                }
                self.by_handle.insert(h, id);
                self.mark(id);
                self.complete(Completion {
                    tag,
                    result: i64::from(id),
                    sock: id,
                    ..Completion::default()
                });
            }
            Err(e) => {
                self.forget(id);
                self.rejected += 1;
                self.complete(Completion {
                    tag,
                    result: -i64::from(e),
                    sock: id,
                    ..Completion::default()
                });
            }
        }
    }

    /// What socket `id` is, for an `ADOPT` naming it: `Ok(true)` for a
    /// listener, `Ok(false)` for a connection another session may take.
    pub(super) fn adoptable(&self, id: u32) -> Result<bool> {
        let s = self
            .socks
            .get(id as usize)
            .and_then(Option::as_ref)
            .ok_or(errno::ENOENT)?;
        match s.h {
            Some(_) if s.listener => Ok(true),
            Some(_) if s.kind == SockKind::Tcp && s.watched && s.moved.is_none() => Ok(false),
            _ => Err(errno::EOPNOTSUPP),
        }
    }

    /// The connection socket `id` gave up to another session (`ADOPT`),
    /// for an `ADOPT` naming it: a holder of the connection follows it to
    /// wherever it lives now (sshd's monitor hands it to one child, then to
    /// the next).
    pub(super) fn moved_to(&self, id: u32) -> Option<SocketHandle> {
        self.socks
            .get(id as usize)
            .and_then(Option::as_ref)
            .and_then(|s| s.moved)
    }

    /// The socket that serves connection `h` here.
    pub(super) fn sock_of(&self, h: SocketHandle) -> Option<u32> {
        self.by_handle.get(&h).copied()
    }

    /// The receive ring of socket `id` reserved by an `ADOPT`: its length.
    pub(super) fn rx_room(&self, id: u32) -> u64 {
        self.socks
            .get(id as usize)
            .and_then(Option::as_ref)
            .map_or(0, |s| s.rx.len)
    }

    /// Gives connection `id` up to another session (`ADOPT`): its unread
    /// bytes go along (at most `room`, or `ENOBUFS` and nothing changes);
    /// what it sent stays held here until acknowledged, and the program's
    /// socket reads as closed from now on.
    pub(super) fn take_stream(&mut self, id: u32, room: u64) -> Result<Moving> {
        let region = self.region;
        let dead = self.dead;
        // Commands this program posted before the adopt are carried out
        // first (its last writes, its close): the adopt may have overtaken
        // them, coming from another process's ring.
        let pending = !dead && self.cmds.available().unwrap_or(0) > 0;
        let view = region.slot(id).ok_or(errno::ENOENT)?;
        let s = self
            .socks
            .get_mut(id as usize)
            .and_then(Option::as_mut)
            .ok_or(errno::ENOENT)?;
        let h = match s.h {
            Some(h) if s.kind == SockKind::Tcp && !s.listener && s.watched && s.moved.is_none() => {
                h
            }
            _ => return Err(errno::EOPNOTSUPP),
        };
        // Sends a program queued and then left (it exited, or closed its
        // descriptor) are still going to the stack: moving the connection
        // now would cancel the rest unsent, with nobody left to hear it —
        // bytes lost from the middle of the stream (sshd's first child
        // writes, exits, and the next child adopts). The move waits until
        // they have all gone (`EAGAIN`: the adopt is tried again).
        if pending || (!s.queued.is_empty() && (dead || s.detached.is_some())) {
            return Err(errno::EAGAIN);
        }
        let head = view.rx_head().clamp(s.rx_head, s.rx_tail);
        let n = s.rx_tail - head;
        if n > room {
            return Err(errno::ENOBUFS);
        }
        // Queued zero-copy buffers name this session's region: what the
        // stack took of them stays held here, the rest comes back unsent.
        self.unqueue(id, errno::ECANCELED);
        let Some(Some(s)) = self.socks.get_mut(id as usize) else {
            return Err(errno::ENOENT);
        };
        let mut unread = vec![0u8; n as usize];
        if n > 0 && !region.ring_read(s.rx, head, &mut unread) {
            return Err(errno::EFAULT);
        }
        s.rx_head = s.rx_tail;
        let m = Moving {
            h,
            unread,
            rx_fin: s.rx_fin,
            stream: s.stream,
            opts: s.opts,
            local: view.local(),
            remote: view.remote(),
        };
        let zerocopy = s
            .holds
            .drain(..)
            .filter_map(|(_, hold)| match hold {
                Hold::Zerocopy(t, n) => Some((t, n)),
                _ => None,
            })
            .collect();
        let retiring = Retiring {
            id,
            stream: s.stream,
            close_tag: s.detached.and_then(|d| d.tag),
            zerocopy,
            copy: s.copy.take(),
        };
        let mut answer = Vec::new();
        if let Some(p) = s.posted.take() {
            answer.push((p.tag, errno::ECANCELED));
        }
        if let Some(t) = s.connect_tag.take() {
            answer.push((t, errno::ECONNABORTED));
        }
        if s.detached.is_some() {
            // Its program had closed it: nothing of it remains here but
            // what the stack still holds by reference.
            self.forget(id);
        } else {
            s.h = None;
            s.moved = Some(h);
            s.rx_fin = true;
            // The program's socket reads as finished from now on: its
            // unread bytes went along.
            view.set_rx_tail(head);
            s.events = EV_READABLE | EV_RDHUP | EV_HUP | EV_MOVED;
            view.set_events(s.events);
            view.bump_seq();
            s.tx_wake = true;
            self.unwoken += 1;
            self.ring_waiters(id);
        }
        for (tag, e) in answer {
            self.complete(Completion {
                tag,
                result: -i64::from(e),
                sock: id,
                ..Completion::default()
            });
        }
        self.by_handle.remove(&h);
        self.retiring.insert(h, retiring);
        self.acking.push(h);
        Ok(m)
    }

    /// Finishes an `ADOPT` of a connection: socket `id` serves it now.
    pub(super) fn finish_adopt_stream(
        &mut self,
        stack: &mut Stack,
        scratch: &mut Vec<u8>,
        tag: u64,
        id: u32,
        m: Moving,
    ) {
        let region = self.region;
        let Some(Some(s)) = self.socks.get_mut(id as usize) else {
            return;
        };
        let n = m.unread.len() as u64;
        if n > 0 {
            region.ring_write(s.rx, 0, &m.unread);
        }
        s.h = Some(m.h);
        s.watched = true;
        s.rx_tail = n;
        s.rx_head = 0;
        s.rx_fin = m.rx_fin;
        s.stream = m.stream;
        s.opts = m.opts;
        if let Some(v) = region.slot(id) {
            v.set_local(m.local);
            v.set_remote(m.remote);
            v.set_rx_tail(n);
        }
        self.by_handle.insert(m.h, id);
        // Its readiness is in the slot before the program hears of it.
        self.serve(stack, id, scratch);
        debug!(
            session = self.id,
            sock = id,
            unread = n,
            "connection adopted"
        );
        self.complete(Completion {
            tag,
            result: i64::from(id),
            sock: id,
            aux: m.remote,
            ..Completion::default()
        });
    }

    /// Closed or moved connections whose bytes are all acknowledged release
    /// what they held here.
    fn moved_acked(&mut self, stack: &Stack) {
        let mut i = 0;
        while i < self.acking.len() {
            let h = self.acking[i];
            let done = match self.retiring.get(&h) {
                Some(r) => {
                    r.stream == 0
                        || stack.tcp_acked(h).map_or(true, |a| a >= r.stream)
                        || stack
                            .tcp_state(h)
                            .is_ok_and(|st| matches!(st, State::Closed | State::TimeWait))
                }
                None => true,
            };
            if !done {
                i += 1;
                continue;
            }
            self.acking.swap_remove(i);
            if let Some(r) = self.retiring.remove(&h) {
                self.release(r);
            }
        }
    }

    /// Closed connections whose queued buffers have all gone to the stack
    /// close now (unless other processes still hold them: a watch).
    fn drained(&mut self, now: Instant, stack: &mut Stack) {
        let mut i = 0;
        while i < self.draining.len() {
            let id = self.draining[i];
            let done = match self.socks.get_mut(id as usize).and_then(Option::as_mut) {
                Some(s) if s.detached.is_some() && s.queued.is_empty() => {
                    if s.watched {
                        // The watch decides when it closes.
                        None
                    } else {
                        self.detached_n = self.detached_n.saturating_sub(1);
                        s.detached.take()
                    }
                }
                Some(s) if s.detached.is_some() => {
                    i += 1;
                    continue;
                }
                _ => None,
            };
            self.draining.swap_remove(i);
            if let Some(d) = done {
                self.close_sock(now, stack, id, d.tag, d.abort);
            }
        }
    }

    fn release(&mut self, r: Retiring) {
        for (tag, len) in r.zerocopy {
            self.complete_release(tag, r.id, len as i64);
        }
        if let Some(c) = r.copy {
            self.free_copy.push(c);
        }
        if let Some(tag) = r.close_tag {
            self.complete_release(tag, r.id, 0);
        }
    }

    /// No other session shares listener `h` any more: closing it here
    /// closes it in the stack.
    pub(super) fn unshare(&mut self, h: SocketHandle) {
        if let Some(&id) = self.by_handle.get(&h)
            && let Some(Some(s)) = self.socks.get_mut(id as usize)
        {
            s.shared = false;
        }
    }

    /// Whether this session holds a socket on stack handle `h`.
    pub(super) fn holds(&self, h: SocketHandle) -> bool {
        self.by_handle.contains_key(&h)
    }

    /// Stack sockets this session still answers for.
    pub(super) fn handles(&self) -> Vec<SocketHandle> {
        self.retiring
            .keys()
            .chain(self.by_handle.keys())
            .copied()
            .collect()
    }

    /// Gives the region back.
    pub(super) fn reclaim(self, mem: &mut Memory) {
        if let Some(m) = self.mem {
            mem.remove(m);
        }
        for (r, _) in self.free_copy {
            mem.remove(r);
        }
        drop(self.map);
    }

    fn mark(&mut self, id: u32) {
        if let Some(Some(s)) = self.socks.get_mut(id as usize)
            && !s.dirty
        {
            s.dirty = true;
            self.dirty.push(id);
        }
    }

    pub(super) fn stack_event(&mut self, h: SocketHandle, e: Events) {
        trace!(
            session = self.id,
            ?h,
            ?e,
            known = self.by_handle.contains_key(&h),
            "stack event"
        );
        if let Some(&id) = self.by_handle.get(&h) {
            self.mark(id);
        } else if e.contains(Events::RELEASED)
            && let Some(r) = self.retiring.remove(&h)
        {
            self.release(r);
        }
    }

    pub(super) fn wake_at(&self) -> Option<Instant> {
        self.first_unwoken
    }

    pub(super) fn before_sleep(&mut self) -> bool {
        if self.dead {
            return false;
        }
        self.region
            .engine_state()
            .store(ENGINE_SLEEPING, Ordering::SeqCst);
        // A command posted before the store above is visible now.
        self.cmds.available().is_ok_and(|n| n > 0)
    }

    pub(super) fn after_sleep(&mut self) {
        if !self.dead {
            self.region
                .engine_state()
                .store(ENGINE_POLLING, Ordering::Release);
        }
    }

    fn complete(&mut self, c: Completion) {
        self.unwoken += 1;
        if self.overflow.is_empty() && self.cmps.push(&c).is_ok() {
            self.meter.access();
        } else if !self.dead {
            self.overflow.push_back(c);
        }
    }

    fn complete_release(&mut self, tag: u64, sock: u32, result: i64) {
        self.complete(Completion {
            tag,
            result,
            sock,
            flags: CMP_RELEASE,
            aux: 0,
        });
    }

    /// Socket `id` as its program may use it (not detached, not moved).
    fn sock(&mut self, id: u32) -> Result<&mut HSock> {
        self.socks
            .get_mut(id as usize)
            .and_then(Option::as_mut)
            .filter(|s| s.detached.is_none() && s.moved.is_none())
            .ok_or(errno::EBADF)
    }

    /// Socket `id` for a send: as [`Self::sock`], but one whose connection
    /// moved to another session refuses with `EPIPE`, as its slot says
    /// (read finished, hung up) — not `EBADF`: the program's descriptor is
    /// still good.
    fn sending(&mut self, id: u32) -> Result<&mut HSock> {
        if matches!(self.socks.get(id as usize), Some(Some(s)) if s.moved.is_some()) {
            return Err(errno::EPIPE);
        }
        self.sock(id)
    }

    fn data_region(&mut self, mem: &mut Memory) -> u32 {
        if let Some(m) = self.mem {
            return m;
        }
        let l = *self.region.layout();
        // SAFETY: the data area lies inside the mapping, which this session
        // owns and unmaps only in `reclaim`, after removing this region.
        let m = unsafe {
            mem.add_shared(
                self.map.ptr().add(l.data_offset() as usize),
                l.data_len() as usize,
            )
        };
        self.mem = Some(m);
        m
    }

    fn copy_ring(&mut self, mem: &mut Memory, len: u64) -> (u32, u64) {
        if let Some(i) = self.free_copy.iter().position(|c| c.1 == len) {
            return self.free_copy.swap_remove(i);
        }
        (mem.add(vec![0u8; len as usize].into_boxed_slice()), len)
    }

    /// Completions held back, then the program's commands (a budget's
    /// worth); whether any was taken.
    #[allow(clippy::too_many_arguments)]
    fn take_commands(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        cfg: &HostConfig,
        slot: usize,
        owner: &mut HashMap<SocketHandle, usize>,
        scratch: &mut Vec<u8>,
        mem: &mut Memory,
    ) -> bool {
        // Completions held back go first, in order.
        while let Some(c) = self.overflow.front() {
            if self.cmps.push(c).is_err() {
                break;
            }
            self.meter.access();
            self.overflow.pop_front();
        }
        match self.run_commands(CMD_BUDGET, now, stack, cfg, slot, owner, scratch, mem) {
            Ok(n) => n > 0,
            Err(e) => {
                warn!(session = self.id, pid = self.pid, error = %e, "command ring broken: ending the session");
                self.rejected += 1;
                self.end(now, stack, owner);
                true
            }
        }
    }

    /// Carries out up to `limit` of the program's commands (fewer while
    /// completions are held back at their bound); how many.
    #[allow(clippy::too_many_arguments)]
    fn run_commands(
        &mut self,
        limit: usize,
        now: Instant,
        stack: &mut Stack,
        cfg: &HostConfig,
        slot: usize,
        owner: &mut HashMap<SocketHandle, usize>,
        scratch: &mut Vec<u8>,
        mem: &mut Memory,
    ) -> std::result::Result<usize, RingError> {
        let mut taken = 0;
        let mut res = Ok(());
        while taken < limit && self.overflow.len() < OVERFLOW_MAX {
            match self.cmds.read() {
                Ok(Some(c)) => {
                    taken += 1;
                    self.meter.access();
                    if self.meter.profiling() {
                        let t0 = std::time::Instant::now();
                        let d0 = self.meter.delay_nanos();
                        let bytes = self.command(now, stack, cfg, slot, owner, scratch, mem, &c);
                        let delayed = self.meter.delay_nanos().saturating_sub(d0);
                        let took = nanos(t0.elapsed()).saturating_sub(delayed);
                        self.meter.command(took, bytes);
                    } else {
                        self.command(now, stack, cfg, slot, owner, scratch, mem, &c);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
        }
        if taken > 0 {
            self.cmds.release();
            self.commands += taken as u64;
        }
        res.map(|()| taken)
    }

    /// One turn: commands, then the sockets that changed, then wake-ups.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn step(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        cfg: &HostConfig,
        slot: usize,
        owner: &mut HashMap<SocketHandle, usize>,
        scratch: &mut Vec<u8>,
        mem: &mut Memory,
    ) -> bool {
        let mut any = false;
        // A dead program's session only sends what it had queued.
        if !self.dead {
            any |= self.take_commands(now, stack, cfg, slot, owner, scratch, mem);
        }
        if !self.acking.is_empty() {
            self.moved_acked(stack);
        }
        if !self.draining.is_empty() {
            self.drained(now, stack);
        }
        // A full receive ring the program has read from takes more. The
        // fence pairs with the program's between moving `rx_head` and
        // reading `EV_RXFULL`: it either sends `RXDONE` or we see the head.
        std::sync::atomic::fence(Ordering::SeqCst);
        let mut i = 0;
        while i < self.blocked.len() {
            let id = self.blocked[i];
            let (blocked, moved) = match (&self.socks.get(id as usize), self.region.slot(id)) {
                (Some(Some(s)), Some(v)) => (s.rx_blocked, v.rx_head() != s.rx_head),
                _ => (false, false),
            };
            if !blocked {
                self.blocked.swap_remove(i);
                continue;
            }
            if moved {
                self.mark(id);
            }
            i += 1;
        }
        let dirty = std::mem::take(&mut self.dirty);
        for &id in &dirty {
            let profiled = self.meter.profiling().then(|| {
                (
                    std::time::Instant::now(),
                    self.meter.delay_nanos(),
                    self.received(id),
                )
            });
            let served = self.serve(stack, id, scratch);
            if let Some((t0, d0, r0)) = profiled {
                let delayed = self.meter.delay_nanos().saturating_sub(d0);
                let took = nanos(t0.elapsed()).saturating_sub(delayed);
                let bytes = self.received(id).saturating_sub(r0);
                self.meter.served(took, bytes);
            }
            if served {
                any = true;
                self.ring_waiters(id);
            }
            if matches!(self.socks.get(id as usize), Some(Some(s)) if s.rx_blocked)
                && !self.blocked.contains(&id)
            {
                self.blocked.push(id);
            }
        }
        // Keep the allocation (no allocation per turn in steady state).
        let mut dirty = dirty;
        dirty.clear();
        if self.dirty.is_empty() {
            self.dirty = dirty;
        }
        if !self.dead {
            self.wake(now, cfg);
        }
        any
    }

    /// Bytes received for the program so far on socket `id` (into its ring,
    /// UDP headers included) and into its posted buffers (all sockets'):
    /// the difference across a `serve` is what that served.
    fn received(&self, id: u32) -> u64 {
        let ring = match self.socks.get(id as usize) {
            Some(Some(s)) => s.rx_tail,
            _ => 0,
        };
        ring.wrapping_add(self.direct)
    }

    /// Rings the bells of the threads asleep on socket `id` (its slot just
    /// changed): the socket's news wakes the thread waiting for it, at
    /// once and no other. The index is the program's word: one that names
    /// no bell of this session rings nothing.
    fn ring_waiters(&mut self, id: u32) {
        let region = self.region;
        let Some(v) = region.slot(id) else {
            return;
        };
        let Some(Some(s)) = self.socks.get_mut(id as usize) else {
            return;
        };
        // Pairs with the program's SeqCst store of the word before its last
        // look at the slot: it sees the change, or we see the word.
        std::sync::atomic::fence(Ordering::SeqCst);
        for (i, tx) in [false, true].into_iter().enumerate() {
            let w = v.waiter(tx).load(Ordering::SeqCst);
            // Rung for this sleep already: the thread is waking up. A
            // writer waits for enough room (see `serve`).
            if w == s.rang[i] || (tx && !s.tx_wake) {
                continue;
            }
            if tx {
                s.tx_freed = 0;
            }
            let bell = waiter_bell(w).and_then(|b| self.bells.get(b as usize));
            if let Some(Some(b)) = bell {
                b.signal();
                self.meter.access();
                s.rang[i] = w;
                self.wakeups += 1;
            }
        }
    }

    fn wake(&mut self, now: Instant, cfg: &HostConfig) {
        if self.unwoken == 0 {
            return;
        }
        let first = *self.first_unwoken.get_or_insert(now);
        if self.unwoken < cfg.wake_batch && now.saturating_duration_since(first) < cfg.wake_delay {
            return;
        }
        self.region.bump_events();
        let waiting = self.region.app_waiting().load(Ordering::SeqCst);
        if waiting > 0 {
            // Waiters with bells of their own get those; the session's
            // doorbell is for the rest.
            let mut armed = self.region.bells_armed().load(Ordering::SeqCst);
            let mut own = 0;
            while armed != 0 {
                let i = armed.trailing_zeros() as usize;
                armed &= armed - 1;
                if let Some(Some(b)) = self.bells.get(i) {
                    b.signal();
                    self.meter.access();
                    own += 1;
                }
            }
            if waiting > own {
                self.bell_app.signal();
                self.meter.access();
            }
            self.wakeups += 1;
        }
        self.unwoken = 0;
        self.first_unwoken = None;
    }

    /// Carries out one command; returns the payload bytes it handed over
    /// (a `SEND`'s: its result, or its length when the answer comes
    /// later), for the `cmd` stage's timing.
    #[allow(clippy::too_many_arguments)]
    fn command(
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

    /// A free socket id: the lowest one from `free_hint` on (wrapping), so
    /// that opening the 10,000th socket does not walk 10,000 slots.
    fn new_id(&self) -> Result<u32> {
        let n = self.socks.len();
        let from = self.free_hint.min(n);
        (from..n)
            .chain(0..from)
            .find(|&i| self.socks[i].is_none())
            .map(|i| i as u32)
            .ok_or(errno::EMFILE)
    }

    /// Puts `s` in slot `id` (which `new_id` found free).
    fn occupy(&mut self, id: u32, s: HSock) {
        let detached = s.detached.is_some();
        if let Some(slot) = self.socks.get_mut(id as usize) {
            let before = slot.replace(s);
            self.count(before.as_ref(), -1);
            self.open_n += 1;
            self.detached_n += usize::from(detached);
            self.free_hint = id as usize + 1;
        }
    }

    /// Counts `s` in (`+1`) or out (`-1`) of the figures `stat` shows.
    fn count(&mut self, s: Option<&HSock>, by: isize) {
        if let Some(s) = s {
            self.open_n = self.open_n.saturating_add_signed(by);
            if s.detached.is_some() {
                self.detached_n = self.detached_n.saturating_add_signed(by);
            }
        }
    }

    /// Socket `id`'s slot is empty again.
    fn forget(&mut self, id: u32) {
        if let Some(s) = self.socks.get_mut(id as usize) {
            let before = s.take();
            self.count(before.as_ref(), -1);
            self.free_hint = self.free_hint.min(id as usize);
        }
    }

    fn install(&mut self, id: u32, s: HSock) {
        if let Some(v) = self.region.slot(id) {
            v.reset();
            v.bump_seq();
        }
        if let Some(h) = s.h {
            self.by_handle.insert(h, id);
        }
        let mut s = s;
        s.dirty = false;
        self.occupy(id, s);
    }

    #[allow(clippy::too_many_arguments)]
    fn request(
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

    /// Queues a zero-copy buffer on connection `sock` and hands the stack
    /// what it has room for now.
    fn queue_send(
        &mut self,
        stack: &mut Stack,
        sock: u32,
        tag: u64,
        offset: u64,
        len: u64,
        data: u32,
    ) -> Result<()> {
        let s = self.sending(sock)?;
        let Some(h) = s.h.filter(|_| s.kind == SockKind::Tcp && !s.listener) else {
            return Err(errno::ENOTCONN);
        };
        if let Some(e) = stack.tcp_error(h).ok().flatten() {
            return Err(tcp_errno(e));
        }
        if len == 0 {
            return Err(errno::EINVAL);
        }
        if s.fin_after_queue {
            // Shut down for sending (the FIN waits for the queue).
            return Err(errno::EPIPE);
        }
        if s.queued.capacity() == 0 {
            // Room for a zero-copy sender's steady state, made once.
            s.queued.reserve(HOLDS);
        }
        s.queued.push_back(QueuedSend {
            tag,
            offset,
            len,
            taken: 0,
            ring: false,
        });
        feed_queued(stack, h, s, data);
        Ok(())
    }

    /// Queues the next `len` bytes of socket `sock`'s send ring
    /// (`SEND_RING | SEND_QUEUE`): behind what is queued already, handed to
    /// the stack as room frees, held until acknowledged as ring sends are.
    fn queue_ring(&mut self, stack: &mut Stack, sock: u32, len: u64, data: u32) -> Result<u64> {
        let acked = self.region.slot(sock).map_or(0, |v| v.tx_acked());
        let s = self.sending(sock)?;
        let Some(h) = s.h.filter(|_| s.kind == SockKind::Tcp && !s.listener) else {
            return Err(errno::ENOTCONN);
        };
        if let Some(e) = stack.tcp_error(h).ok().flatten() {
            return Err(tcp_errno(e));
        }
        if s.fin_after_queue {
            return Err(errno::EPIPE);
        }
        if len == 0 {
            return Ok(0);
        }
        // The program's word for what is acknowledged is trusted no further
        // than the engine's own count.
        let unacked = (s.tx_queued + s.ring_backlog).saturating_sub(acked.min(s.tx_queued));
        if s.tx.len == 0 || unacked + len > s.tx.len {
            return Err(errno::EINVAL);
        }
        s.ring_backlog += len;
        match s.queued.back_mut() {
            Some(q) if q.ring => q.len += len,
            _ => {
                if s.queued.capacity() == 0 {
                    s.queued.reserve(HOLDS);
                }
                s.queued.push_back(QueuedSend {
                    tag: 0,
                    offset: 0,
                    len,
                    taken: 0,
                    ring: true,
                });
            }
        }
        feed_queued(stack, h, s, data);
        Ok(len)
    }

    /// Gives back the queued buffers of socket `s` the stack never took
    /// whole: those it took part of are held until that part is
    /// acknowledged (released with the count), the others are released at
    /// once with `err`.
    fn unqueue(&mut self, id: u32, err: i32) {
        let Some(Some(s)) = self.socks.get_mut(id as usize) else {
            return;
        };
        let mut now = Vec::new();
        s.ring_backlog = 0;
        while let Some(q) = s.queued.pop_front() {
            if q.ring {
                // The program's own ring bytes: nothing to give back.
                continue;
            }
            if q.taken > 0 {
                s.holds
                    .push_back((s.stream, Hold::Zerocopy(q.tag, q.taken)));
            } else {
                now.push(q.tag);
            }
        }
        for tag in now {
            self.complete_release(tag, id, -i64::from(err));
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn send_tcp(
        &mut self,
        stack: &mut Stack,
        cfg: &HostConfig,
        sock: u32,
        source: SendSource,
        len: u64,
        mem: &mut Memory,
        data: u32,
        tag: u64,
    ) -> Result<u64> {
        let pid = self.pid;
        let copy = match source {
            SendSource::Overlap { .. } | SendSource::Remote { .. } => {
                let s = self.sending(sock)?;
                if s.copy.is_none() {
                    let c = self.copy_ring(mem, cfg.copy_ring as u64);
                    self.sock(sock)?.copy = Some(c);
                }
                self.sock(sock)?.copy
            }
            _ => None,
        };
        let region = self.region;
        let s = self.sending(sock)?;
        let Some(h) = s.h.filter(|_| !s.listener) else {
            return Err(errno::ENOTCONN);
        };
        if let Some(e) = stack.tcp_error(h).ok().flatten() {
            return Err(tcp_errno(e));
        }
        let space = stack.tcp_send_space(h).map_err(handle_errno)? as u64;
        if len == 0 {
            return Ok(0);
        }
        if s.fin_after_queue {
            return Err(errno::EPIPE);
        }
        // Queued zero-copy buffers go first: room ACKs freed this turn is
        // theirs (fed when the socket is served, after the commands), and a
        // send taking it would put its bytes ahead of theirs.
        if !s.queued.is_empty() {
            trace!(sock, "send refused: queued zero-copy buffers go first");
            return Err(errno::EAGAIN);
        }
        let mut want = len.min(space);
        if want == 0 {
            trace!(sock, "send refused: the stack's send buffer is full");
            return Err(errno::EAGAIN);
        }
        let mut taken = 0u64;
        match source {
            // Answered by `queue_send` and `queue_ring` before this.
            SendSource::Queued { .. } | SendSource::RingQueued => return Err(errno::EINVAL),
            SendSource::Ring => {
                if s.tx.len == 0 {
                    return Err(errno::EINVAL);
                }
                let acked = region.slot(sock).map_or(0, |v| v.tx_acked());
                // The program says `len` more bytes follow what the stack
                // took; they must lie within the ring's unacknowledged span.
                if s.tx_queued + len - acked > s.tx.len {
                    return Err(errno::EINVAL);
                }
                while taken < want {
                    let pos = s.tx_queued % s.tx.len;
                    let n = (want - taken).min(s.tx.len - pos);
                    let r = PayloadRef::new(data, s.tx.offset + pos, n as u32);
                    let k = queue(stack, h, r)?;
                    s.tx_queued += k;
                    s.stream += k;
                    taken += k;
                    if k < n {
                        break;
                    }
                }
                let end = s.tx_queued;
                s.holds.push_back((s.stream, Hold::TxRing(end)));
            }
            SendSource::Zerocopy { offset } => {
                let r = PayloadRef::new(data, offset, want as u32);
                taken = queue(stack, h, r)?;
                s.stream += taken;
                s.holds.push_back((s.stream, Hold::Zerocopy(tag, taken)));
            }
            SendSource::Overlap { offset } | SendSource::Remote { addr: offset } => {
                let Some((cr, clen)) = copy else {
                    return Err(errno::ENOMEM);
                };
                let free = clen - (s.copy_queued - s.copy_acked);
                want = want.min(free);
                if want == 0 {
                    trace!(
                        sock,
                        queued = s.copy_queued,
                        acked = s.copy_acked,
                        holds = s.holds.len(),
                        "send refused: the copy ring is full"
                    );
                    return Err(errno::EAGAIN);
                }
                while taken < want {
                    let pos = s.copy_queued % clen;
                    let n = (want - taken).min(clen - pos) as usize;
                    let Some(dst) = mem
                        .region_mut(cr)
                        .and_then(|b| b.get_mut(pos as usize..pos as usize + n))
                    else {
                        return Err(errno::ENOMEM);
                    };
                    match source {
                        SendSource::Remote { addr } => {
                            let got = sys::read_process(pid, addr + taken, dst)
                                .map_err(|e| e.raw_os_error().unwrap_or(errno::EFAULT))?;
                            if got < n {
                                // A partial read: the rest is unmapped.
                                if got == 0 {
                                    return Err(errno::EFAULT);
                                }
                            }
                        }
                        _ => {
                            let span = RingSpan {
                                offset: offset + taken,
                                len: n as u64,
                            };
                            if !region.ring_read(span, 0, dst) {
                                return Err(errno::EFAULT);
                            }
                        }
                    }
                    let r = PayloadRef::new(cr, pos, n as u32);
                    let k = queue(stack, h, r)?;
                    s.copy_queued += k;
                    s.stream += k;
                    taken += k;
                    if k < n as u64 {
                        break;
                    }
                }
                let end = s.copy_queued;
                s.holds.push_back((s.stream, Hold::Copy(end)));
            }
        }
        if taken == 0 {
            trace!(sock, "send refused: the stack took nothing");
            return Err(errno::EAGAIN);
        }
        Ok(taken)
    }

    #[allow(clippy::too_many_arguments)]
    fn send_udp(
        &mut self,
        stack: &mut Stack,
        sock: u32,
        source: SendSource,
        len: u64,
        to: Option<(u32, u16)>,
        scratch: &mut Vec<u8>,
        mem: &mut Memory,
    ) -> Result<u64> {
        let pid = self.pid;
        let region = self.region;
        if self.sock(sock)?.copy.is_none() {
            let c = self.copy_ring(mem, UDP_RING);
            self.sock(sock)?.copy = Some(c);
        }
        let s = self.sock(sock)?;
        let dest = match to {
            Some((a, p)) => endpoint(a, p),
            None => s.peer.ok_or(errno::EDESTADDRREQ)?,
        };
        if s.h.is_none() {
            // Sending binds an ephemeral port, as in Linux.
            let (h, port) = udp_bind(stack, Endpoint::new(Ipv4Address::UNSPECIFIED, 0))?;
            s.h = Some(h);
            s.bound = Some(Endpoint::new(Ipv4Address::UNSPECIFIED, port));
            self.by_handle.insert(h, sock);
        }
        let s = self.sock(sock)?;
        let (Some(h), Some((cr, clen))) = (s.h, s.copy) else {
            return Err(errno::ENOTCONN);
        };
        if len > 65_507 {
            return Err(errno::EMSGSIZE);
        }
        // Datagrams the port has taken free their copy-ring space.
        let sent = stack.udp_sent(h).unwrap_or(0);
        while s.udp_done < sent {
            s.udp_live.pop_front();
            s.udp_done += 1;
        }
        let mut pos = s.copy_queued;
        if pos % clen + len > clen {
            pos += clen - pos % clen;
        }
        let live_start = s.udp_live.front().map_or(pos, |&(a, _)| a);
        if pos + len - live_start > clen {
            return Err(errno::EAGAIN);
        }
        let off = (pos % clen) as usize;
        scratch.resize(len as usize, 0);
        match source {
            SendSource::Remote { addr } => {
                let got = sys::read_process(pid, addr, &mut scratch[..len as usize])
                    .map_err(|e| e.raw_os_error().unwrap_or(errno::EFAULT))?;
                if got as u64 != len {
                    return Err(errno::EFAULT);
                }
            }
            SendSource::Overlap { offset } | SendSource::Zerocopy { offset } => {
                let span = RingSpan { offset, len };
                if len > 0 && !region.ring_read(span, 0, &mut scratch[..len as usize]) {
                    return Err(errno::EFAULT);
                }
            }
            // Answered by `queue_send` before this.
            SendSource::Ring | SendSource::Queued { .. } | SendSource::RingQueued => {
                return Err(errno::EINVAL);
            }
        }
        let Some(dst) = mem
            .region_mut(cr)
            .and_then(|b| b.get_mut(off..off + len as usize))
        else {
            return Err(errno::ENOMEM);
        };
        dst.copy_from_slice(&scratch[..len as usize]);
        match stack.udp_send_to(h, dest, PayloadRef::new(cr, off as u64, len as u32)) {
            Ok(()) => {
                s.udp_live.push_back((pos, pos + len));
                s.copy_queued = pos + len;
                Ok(len)
            }
            Err(UdpSendError::Full) => Err(errno::EAGAIN),
            Err(UdpSendError::TooLarge) => Err(errno::EMSGSIZE),
            Err(UdpSendError::Unaddressable) => Err(errno::EINVAL),
            Err(_) => Err(errno::EBADF),
        }
    }

    /// Closes socket `id` for the program (or because it died).
    fn close_sock(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        id: u32,
        tag: Option<u64>,
        abort: bool,
    ) {
        let Some(cur) = self.socks.get_mut(id as usize).and_then(Option::as_mut) else {
            return;
        };
        if cur.detached.is_some() {
            // Closed already; it ends with its watch or its adoption.
            return;
        }
        if let Some(h) = cur.moved {
            // Another session took the connection; the rings are free when
            // what this socket sent is acknowledged.
            self.forget(id);
            match (self.retiring.get_mut(&h), tag) {
                (Some(r), Some(t)) => r.close_tag = Some(t),
                (None, Some(t)) => self.complete_release(t, id, 0),
                _ => {}
            }
            return;
        }
        // Queued sends go out before the FIN, as a kernel socket's send
        // buffer does at close, a dead program's too (the region they lie
        // in stays mapped until its session is reclaimed).
        let drain = !abort && !cur.queued.is_empty() && cur.h.is_some();
        let detach = (cur.watched || drain) && cur.h.is_some();
        if drain {
            self.draining.push(id);
            if !cur.watched
                && let Some(h) = cur.h
            {
                // No descriptor names it any more: an orphan while its
                // queue drains, given up if the peer never takes it.
                let _ = stack.tcp_orphan(h);
            }
        }
        let (posted, connect) = if detach {
            cur.detached = Some(Detached { tag, abort });
            self.detached_n += 1;
            (cur.posted.take(), cur.connect_tag.take())
        } else {
            (None, None)
        };
        if detach {
            // Other processes may hold it still (a `fork`), or queued
            // buffers are still going out: it lives on until one takes it,
            // the last descriptor closes, or the queue is sent.
            debug!(
                session = self.id,
                sock = id,
                "close of a watched or draining connection: detached"
            );
            if let Some(p) = posted {
                self.complete(Completion {
                    tag: p.tag,
                    result: -i64::from(errno::ECANCELED),
                    sock: id,
                    ..Completion::default()
                });
            }
            if let Some(t) = connect {
                self.complete(Completion {
                    tag: t,
                    result: -i64::from(errno::ECONNABORTED),
                    sock: id,
                    ..Completion::default()
                });
            }
            return;
        }
        // Queued zero-copy buffers the stack never took whole come back.
        self.unqueue(id, errno::EPIPE);
        // Counted out as it goes (the figures `softoe stat` shows).
        let Some(s) = self.socks.get_mut(id as usize).and_then(Option::take) else {
            return;
        };
        self.count(Some(&s), -1);
        self.free_hint = self.free_hint.min(id as usize);
        if let Some(v) = self.region.slot(id) {
            v.set_events(EV_HUP);
        }
        // A posted receive is answered now: its buffer is the program's.
        if let Some(p) = s.posted {
            self.complete(Completion {
                tag: p.tag,
                result: -i64::from(errno::ECANCELED),
                sock: id,
                ..Completion::default()
            });
        }
        // A connect still waiting is answered now.
        if let Some(t) = s.connect_tag {
            self.complete(Completion {
                tag: t,
                result: -i64::from(errno::ECONNABORTED),
                sock: id,
                ..Completion::default()
            });
        }
        let Some(h) = s.h else {
            if let Some(c) = s.copy {
                self.free_copy.push(c);
            }
            if let Some(t) = tag {
                self.complete_release(t, id, 0);
            }
            return;
        };
        self.by_handle.remove(&h);
        if s.shared {
            // Other sessions listen on it still: only this share goes.
            self.unshared.push(h);
            if let Some(t) = tag {
                self.complete_release(t, id, 0);
            }
            return;
        }
        if abort && s.kind == SockKind::Tcp && !s.listener {
            let _ = stack.tcp_abort(h);
        }
        let _ = stack.close(now, h);
        let zerocopy = s
            .holds
            .iter()
            .filter_map(|&(_, hold)| match hold {
                Hold::Zerocopy(t, n) => Some((t, n)),
                _ => None,
            })
            .collect();
        let tcp = s.kind == SockKind::Tcp && !s.listener;
        self.retiring.insert(
            h,
            Retiring {
                id,
                stream: if tcp { s.stream } else { 0 },
                close_tag: tag,
                zerocopy,
                copy: s.copy,
            },
        );
        if tcp {
            // Its buffers and rings come back once the peer acknowledged
            // everything (a minute of TIME-WAIT needs none of them).
            self.acking.push(h);
        }
    }

    /// Moves one socket along: received bytes into its ring, acknowledged
    /// bytes released, a waiting connect answered, readiness published.
    fn serve(&mut self, stack: &mut Stack, id: u32, scratch: &mut Vec<u8>) -> bool {
        let region = self.region;
        let Some(view) = region.slot(id) else {
            return false;
        };
        let Some(Some(s)) = self.socks.get_mut(id as usize) else {
            return false;
        };
        s.dirty = false;
        let Some(h) = s.h else {
            // A socket whose connection moved keeps saying so (its process
            // learns from EV_MOVED to take it back, never to use it); one
            // not yet connected is writable, as Linux's.
            if s.moved.is_none() {
                publish(s, &view, EV_WRITABLE, false, &mut self.meter);
            }
            return false;
        };
        let mut ev = 0;
        if s.listener {
            if stack
                .readiness(h)
                .is_ok_and(|r| r.contains(Events::READABLE))
            {
                ev |= EV_ACCEPT | EV_READABLE;
            }
            let changed = publish(s, &view, ev, false, &mut self.meter);
            if changed {
                // A waiting program must hear of it (a sleeping `poll`).
                self.unwoken += 1;
            }
            return changed;
        }
        let head = view.rx_head().clamp(s.rx_head, s.rx_tail);
        s.rx_head = head;
        let mut moved = false;
        if s.kind == SockKind::Udp {
            loop {
                let free = s.rx.len - (s.rx_tail - s.rx_head);
                scratch.resize(65_536, 0);
                // Peek the size first by receiving into scratch only when a
                // whole datagram fits.
                if free < UdpHeader::footprint(0) {
                    s.rx_blocked = true;
                    break;
                }
                match stack.udp_recv_from(h, scratch) {
                    Ok(Some((n, from))) => {
                        let n = n.min(scratch.len());
                        let need = UdpHeader::footprint(n as u32);
                        if need > free {
                            // Does not fit now: dropped, as a full socket
                            // buffer drops in Linux.
                            s.rx_blocked = true;
                            continue;
                        }
                        let hdr = UdpHeader {
                            len: n as u32,
                            port: from.port,
                            addr: from.addr.to_bits().to_be(),
                            ..UdpHeader::default()
                        };
                        // SAFETY: `hdr` is plain integers.
                        let hb = unsafe {
                            std::slice::from_raw_parts(
                                (&raw const hdr).cast::<u8>(),
                                size_of::<UdpHeader>(),
                            )
                        };
                        region.ring_write(s.rx, s.rx_tail, hb);
                        region.ring_write(s.rx, s.rx_tail + hb.len() as u64, &scratch[..n]);
                        s.rx_tail += need;
                        moved = true;
                    }
                    _ => break,
                }
            }
            if moved {
                view.set_rx_tail(s.rx_tail);
            }
            ev |= EV_WRITABLE;
            if s.rx_blocked {
                ev |= EV_RXFULL;
            }
            if s.rx_tail != s.rx_head {
                ev |= EV_READABLE;
            }
            let any = publish(s, &view, ev, moved, &mut self.meter) || moved;
            if any {
                self.unwoken += 1;
            }
            return any;
        }
        // TCP: received bytes into a posted buffer first (the ring was
        // empty when it was posted, and nothing enters the ring while it
        // is), then into the ring. A second look after the stack was
        // emptied finds a FIN that came with the data (no later event
        // would report it).
        let mut done = std::mem::take(&mut self.done_buf);
        let mut error = None;
        if let Some(p) = s.posted {
            match place(stack, h, &p, self.pid, region) {
                Placed::Nothing => {}
                Placed::Done(result) => {
                    s.posted = None;
                    s.hold = result > 0;
                    done.push(Completion {
                        tag: p.tag,
                        result,
                        sock: id,
                        ..Completion::default()
                    });
                    self.direct += result.max(0) as u64;
                }
            }
        }
        // Held bytes stay in the stack (a look that takes nothing); with
        // none held, the ring is served as usual so that a FIN or an error
        // is still found.
        let held = s.hold
            && s.posted.is_none()
            && stack
                .tcp_recv_with(h, |a, b| (0, a.len() + b.len()))
                .is_ok_and(|n| n > 0);
        if held {
            ev |= EV_HELD;
        }
        for _ in 0..2 {
            if s.rx_fin || held {
                break;
            }
            let free = s.rx.len - (s.rx_tail - s.rx_head);
            let (rx, tail) = (s.rx, s.rx_tail);
            let r = stack.tcp_recv_with(h, |a, b| {
                let n1 = a.len().min(free as usize);
                let n2 = b.len().min(free as usize - n1);
                region.ring_write(rx, tail, &a[..n1]);
                region.ring_write(rx, tail + n1 as u64, &b[..n2]);
                (n1 + n2, (n1 + n2, a.len() + b.len() > n1 + n2))
            });
            match r {
                Ok((n, more)) => {
                    s.rx_blocked = more;
                    if n == 0 {
                        break;
                    }
                    s.rx_tail += n as u64;
                    view.set_rx_tail(s.rx_tail);
                    moved = true;
                    if more {
                        break;
                    }
                }
                Err(RecvError::Finished) => s.rx_fin = true,
                Err(RecvError::Failed(e)) => {
                    error = Some(e);
                    break;
                }
                Err(_) => break,
            }
        }
        // Queued zero-copy buffers take the room ACKs freed.
        if !s.queued.is_empty()
            && let Some(data) = self.mem
        {
            moved |= feed_queued(stack, h, s, data);
        }
        if s.fin_after_queue && s.queued.is_empty() {
            s.fin_after_queue = false;
            let _ = stack.tcp_shutdown(h);
        }
        // Acknowledged bytes: release what they held.
        let acked = stack.tcp_acked(h).unwrap_or(0);
        trace!(session = self.id, sock = id, acked, holds = s.holds.len(), first = ?s.holds.front().map(|h| h.0), "serve");
        while let Some(&(end, hold)) = s.holds.front() {
            if end > acked {
                break;
            }
            s.holds.pop_front();
            // Space came free: a writer may be waiting for it.
            moved = true;
            match hold {
                Hold::TxRing(p) => {
                    s.tx_freed += p.saturating_sub(view.tx_acked());
                    view.set_tx_acked(p);
                }
                Hold::Copy(p) => {
                    s.tx_freed += p.saturating_sub(s.copy_acked);
                    s.copy_acked = p;
                }
                Hold::Zerocopy(tag, n) => done.push(Completion {
                    tag,
                    result: n as i64,
                    sock: id,
                    flags: CMP_RELEASE,
                    aux: 0,
                }),
            }
        }
        let error = error.or(stack.tcp_error(h).ok().flatten());
        if let Some(e) = error {
            // The connection failed: nothing more will be sent or
            // acknowledged, so zero-copy buffers (queued or held) come back
            // with the error instead of waiting for ever.
            let e = -i64::from(tcp_errno(e));
            for q in s.queued.drain(..) {
                done.push(Completion {
                    tag: q.tag,
                    result: e,
                    sock: id,
                    flags: CMP_RELEASE,
                    aux: 0,
                });
            }
            s.holds.retain(|&(_, hold)| match hold {
                Hold::Zerocopy(tag, _) => {
                    done.push(Completion {
                        tag,
                        result: e,
                        sock: id,
                        flags: CMP_RELEASE,
                        aux: 0,
                    });
                    false
                }
                _ => true,
            });
        }
        let state = stack.tcp_state(h).unwrap_or(State::Closed);
        let connecting = matches!(state, State::SynSent | State::SynReceived);
        if let Some(e) = error {
            ev |= EV_ERR | EV_HUP | EV_RDHUP;
            view.set_error(tcp_errno(e) as u32);
        } else if !connecting {
            ev |= EV_CONNECTED;
        }
        if let Some(tag) = s.connect_tag
            && (error.is_some() || !connecting)
        {
            s.connect_tag = None;
            // Once per connection: the local address it got.
            let info = stack.tcp_info(h).ok();
            done.push(Completion {
                tag,
                result: error.map_or(0, |e| -i64::from(tcp_errno(e))),
                sock: id,
                flags: 0,
                aux: info.as_ref().map_or(0, |i| packed(i.local)),
            });
            if let Some(i) = &info {
                view.set_local(packed(i.local));
            }
        }
        if s.rx_fin {
            ev |= EV_RDHUP;
        }
        if s.rx_blocked {
            ev |= EV_RXFULL;
        }
        if s.rx_tail != s.rx_head {
            ev |= EV_READABLE;
        }
        let copy_free = s.copy.is_none_or(|(_, l)| s.copy_queued - s.copy_acked < l);
        if error.is_none()
            && !connecting
            && copy_free
            && stack.tcp_send_space(h).is_ok_and(|n| n > 0)
        {
            ev |= EV_WRITABLE;
        }
        if matches!(
            state,
            State::Closed | State::TimeWait | State::LastAck | State::Closing
        ) && s.rx_fin
        {
            ev |= EV_HUP;
        }
        let before = s.events;
        let changed = publish(s, &view, ev, moved, &mut self.meter);
        // A blocked writer is woken when half its ring is free again (or
        // all of it, or something else changed), not at every ACK: as
        // Linux wakes a writer when a third of its buffer is free, so that
        // it writes a run of buffers per sleep instead of one (a sleep and
        // a wake-up per 64 KiB write were most of a bulk sender's CPU).
        let ring = match s.copy {
            Some((_, l)) => l,
            None => s.tx.len,
        };
        let news = (before ^ ev) & !EV_WRITABLE != 0;
        s.tx_wake = news || s.holds.is_empty() || s.tx_freed >= (ring / 2).max(1);
        let any = changed || moved || !done.is_empty();
        for c in done.drain(..) {
            self.complete(c);
        }
        self.done_buf = done;
        if moved || changed {
            self.unwoken += 1;
        }
        any
    }
}

/// What became of a posted receive this turn.
enum Placed {
    /// The stack has nothing for it yet.
    Nothing,
    /// It completes with this result: bytes placed, 0 at the end of the
    /// stream, or `-errno`.
    Done(i64),
}

/// Moves what the stack holds for `h` into the posted buffer `p`: the
/// engine writes the program's memory itself (`process_vm_writev`, or the
/// data area), so the program's core copies nothing.
fn place(stack: &mut Stack, h: SocketHandle, p: &Posted, pid: i32, region: Region) -> Placed {
    let mut fault = None;
    let r = stack.tcp_recv_with(h, |a, b| {
        let want = p.len as usize;
        let n1 = a.len().min(want);
        let n2 = b.len().min(want - n1);
        let (a, b) = (&a[..n1], &b[..n2]);
        let n = match p.target {
            RecvTarget::Region { offset } => {
                // The buffer as a ring that never wraps: `n1 + n2 ≤ len`.
                let buf = RingSpan { offset, len: p.len };
                region.ring_write(buf, 0, a);
                region.ring_write(buf, n1 as u64, b);
                n1 + n2
            }
            RecvTarget::Remote { addr } => match sys::write_process(pid, addr, a, b) {
                Ok(n) => n,
                Err(e) => {
                    fault = Some(e.raw_os_error().unwrap_or(errno::EFAULT));
                    0
                }
            },
        };
        (n, n)
    });
    match r {
        Ok(0) => match fault {
            Some(e) => Placed::Done(-i64::from(e)),
            None => Placed::Nothing,
        },
        Ok(n) => Placed::Done(n as i64),
        // The peer finished: the end of the stream, read as 0 (the ring's
        // reader learns it from EV_RDHUP as before).
        Err(RecvError::Finished) => Placed::Done(0),
        Err(RecvError::Failed(e)) => Placed::Done(-i64::from(tcp_errno(e))),
        Err(_) => Placed::Nothing,
    }
}

/// Writes `ev` to the slot if it changed, and bumps the slot's sequence
/// when it did or when the socket `moved` (bytes placed, space freed).
///
/// A program that saw a send refused waits for the sequence to move past
/// the value it read *before* sending; space freed after that read must
/// bump it even when the events stay the same (`EV_WRITABLE` may never
/// have been cleared), or the program would wait for a change that never
/// comes. Returns whether the events changed.
///
/// A write to the slot is one access to the program's memory (`meter`).
fn publish(
    s: &mut HSock,
    view: &SlotView<'_>,
    ev: u32,
    moved: bool,
    meter: &mut AccessMeter,
) -> bool {
    let changed = s.events != ev;
    if changed {
        s.events = ev;
        view.set_events(ev);
    }
    if changed || moved {
        view.bump_seq();
        meter.access();
    }
    changed
}

/// Hands the stack as much of `s`'s queued zero-copy buffers as it has
/// room for, in order; a buffer taken whole becomes a hold released on
/// ACK. Returns whether anything was taken.
fn feed_queued(stack: &mut Stack, h: SocketHandle, s: &mut HSock, data: u32) -> bool {
    let mut any = false;
    while let Some(q) = s.queued.front_mut() {
        if q.ring {
            // Ring bytes, from the position the stack took last, in pieces
            // that do not wrap.
            let mut fed = false;
            while q.taken < q.len && s.tx.len > 0 {
                let room = stack.tcp_send_space(h).unwrap_or(0) as u64;
                let pos = s.tx_queued % s.tx.len;
                let n = (q.len - q.taken).min(room).min(s.tx.len - pos);
                if n == 0 {
                    break;
                }
                let r = PayloadRef::new(data, s.tx.offset + pos, n as u32);
                let Ok(k) = queue(stack, h, r) else {
                    break;
                };
                q.taken += k;
                s.tx_queued += k;
                s.ring_backlog = s.ring_backlog.saturating_sub(k);
                s.stream += k;
                fed |= k > 0;
                if k < n {
                    break;
                }
            }
            if fed {
                s.holds.push_back((s.stream, Hold::TxRing(s.tx_queued)));
                any = true;
            }
            if q.taken < q.len {
                break;
            }
            s.queued.pop_front();
            continue;
        }
        let room = stack.tcp_send_space(h).unwrap_or(0) as u64;
        let n = (q.len - q.taken).min(room).min(u64::from(u32::MAX));
        if n == 0 {
            break;
        }
        let r = PayloadRef::new(data, q.offset + q.taken, n as u32);
        let Ok(k) = queue(stack, h, r) else {
            break;
        };
        q.taken += k;
        s.stream += k;
        any |= k > 0;
        if q.taken < q.len {
            break;
        }
        let (tag, len) = (q.tag, q.len);
        s.queued.pop_front();
        s.holds.push_back((s.stream, Hold::Zerocopy(tag, len)));
    }
    any
}

fn queue(stack: &mut Stack, h: SocketHandle, r: PayloadRef) -> Result<u64> {
    match stack.tcp_send(h, r) {
        Ok(k) => Ok(k as u64),
        Err(SendError::Failed(e)) => Err(tcp_errno(e)),
        Err(SendError::InvalidState) => Err(errno::EPIPE),
        Err(_) => Err(errno::ENOTCONN),
    }
}

fn apply_opts(now: Instant, stack: &mut Stack, h: SocketHandle, o: &Opts) {
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
fn udp_bind(stack: &mut Stack, ep: Endpoint) -> Result<(SocketHandle, u16)> {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::emulate::Emulation;
    use softoe_abi::Layout;

    /// Regression (CI hang): an overlap send was refused, the peer's ACK
    /// then freed the copy ring in the same engine turn, and `EV_WRITABLE`
    /// had never been cleared; the events did not change, the sequence did
    /// not move, and the program waited for ever. Progress must move the
    /// sequence even when the events stay the same.
    #[test]
    fn progress_moves_the_sequence_without_an_event_change() {
        let layout = Layout::new(4, 4, 2, 4096).unwrap();
        let mut mem = vec![0u128; layout.region_len() as usize / 16];
        // SAFETY: `mem` is zeroed, 16-aligned, `region_len` bytes, outlives
        // `region`, and nothing else uses it.
        let region = unsafe { Region::init(mem.as_mut_ptr().cast(), layout, 1) };
        let view = region.slot(0).unwrap();
        let span = RingSpan { offset: 0, len: 0 };
        let mut s = HSock::new(SockKind::Tcp, span, span);
        let mut m = AccessMeter::default();
        assert!(publish(&mut s, &view, EV_WRITABLE, false, &mut m));
        let seq = view.seq();
        // Nothing new: nothing moves, and the program's memory is not
        // written (no access counted).
        assert!(!publish(&mut s, &view, EV_WRITABLE, false, &mut m));
        assert_eq!(view.seq(), seq);
        assert_eq!(m.accesses(), 1);
        // Space freed, same events: the sequence moves, the events stay.
        assert!(!publish(&mut s, &view, EV_WRITABLE, true, &mut m));
        assert_ne!(view.seq(), seq);
        assert_eq!(view.events(), EV_WRITABLE);
        assert_eq!(m.accesses(), 2);
    }

    /// A session on a fresh region, as `attach` makes one (without the
    /// program), and what its steps need.
    struct Rig {
        s: Session,
        stack: Stack,
        cfg: HostConfig,
        owner: HashMap<SocketHandle, usize>,
        scratch: Vec<u8>,
        mem: Memory,
    }

    impl Rig {
        fn new(layout: Layout, e: &Emulation) -> Rig {
            let (memfd, map) = Mapping::memfd("softoe-test", layout.region_len() as usize).unwrap();
            let (conn, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
            let mut s = Session::new(
                1,
                std::process::id() as i32,
                0,
                conn.into(),
                memfd,
                map,
                layout,
                EventFd::new().unwrap(),
                EventFd::new().unwrap(),
            )
            .unwrap();
            s.meter.set(e);
            let cfg = softoe_stack::StackConfig::new(
                softoe_wire::EthernetAddress([2, 0, 0, 0, 0, 1]),
                softoe_wire::Ipv4Cidr::new(Ipv4Address([10, 9, 0, 1]), 24).unwrap(),
            );
            Rig {
                s,
                stack: Stack::new(cfg).unwrap(),
                cfg: HostConfig::default(),
                owner: HashMap::new(),
                scratch: Vec::new(),
                mem: Memory::new(),
            }
        }

        /// The program posts `cmds`; the engine takes a step.
        fn step(&mut self, cmds: &[Command]) {
            let mut p = self.s.region.command_producer();
            for c in cmds {
                p.push(c).unwrap();
            }
            let now = Instant::from_nanos(1_000_000);
            self.s.step(
                now,
                &mut self.stack,
                &self.cfg,
                0,
                &mut self.owner,
                &mut self.scratch,
                &mut self.mem,
            );
        }

        /// The program reads its completions; how many.
        fn reap(&self) -> usize {
            let mut c = self.s.region.completion_consumer();
            let mut n = 0;
            while c.pop().unwrap().is_some() {
                n += 1;
            }
            n
        }
    }

    /// Every access to the program's memory is counted where it happens,
    /// and only when it happens: a command taken, a completion published
    /// (not one held back while the ring is full: that one counts when it
    /// gets in), a socket's events written, a doorbell rung (only for a
    /// program that waits). With a delay, each waits at least that long.
    #[test]
    fn every_ring_access_is_counted_once() {
        let delay = std::time::Duration::from_micros(1);
        let layout = Layout::new(16, 4, 4, 1 << 16).unwrap();
        let mut r = Rig::new(layout, &Emulation::new(delay, false));
        let nops: Vec<Command> = (0..10).map(Command::nop).collect();
        // Ten commands; four completions fit, six wait.
        r.step(&nops);
        assert_eq!(r.s.meter.accesses(), 10 + 4);
        assert_eq!(r.s.overflow.len(), 6);
        assert_eq!(r.reap(), 4);
        // The waiting ones go in as room comes.
        r.step(&[]);
        assert_eq!(r.s.meter.accesses(), 14 + 4);
        assert_eq!(r.reap(), 4);
        r.step(&[]);
        assert_eq!(r.s.meter.accesses(), 18 + 2);
        assert_eq!(r.reap(), 2);
        // A waiting program is woken: its doorbell is one more.
        r.s.region.app_waiting().store(1, Ordering::SeqCst);
        r.step(&[Command::nop(10)]);
        assert_eq!(r.s.meter.accesses(), 20 + 2 + 1);
        assert_eq!(r.reap(), 1);
        r.s.region.app_waiting().store(0, Ordering::SeqCst);
        // A socket: the command, its completion, and its slot's events.
        r.step(&[Command::socket(11, SockKind::Udp, (0, 4096), (0, 0))]);
        assert_eq!(r.s.meter.accesses(), 23 + 3);
        assert_eq!(r.reap(), 1);
        assert!(r.s.meter.delay_nanos() >= 26 * delay.as_nanos() as u64);
        // The engine collects the counts; the meter starts again.
        let mut c = crate::control::EngineCounters::default();
        r.s.meter.drain_into(&mut c);
        assert_eq!(c.ring_accesses, 26);
        assert!(c.access_delay_nanos >= 26 * delay.as_nanos() as u64);
        assert_eq!(c.stages, Default::default(), "stages are not timed");
        assert_eq!(r.s.meter.accesses(), 0);
    }

    /// With stages profiled, each command is one run of `cmd` (its bytes:
    /// what a send handed over) and each socket served one run of `serve`.
    #[test]
    fn commands_and_serves_are_timed_when_profiled() {
        let layout = Layout::new(16, 16, 4, 1 << 16).unwrap();
        let mut r = Rig::new(layout, &Emulation::new(std::time::Duration::ZERO, true));
        r.step(&[Command::socket(1, SockKind::Udp, (0, 4096), (0, 0))]);
        // A datagram of 1000 bytes from the data area (`overlap`: the
        // engine copies it) to a peer on the subnet.
        let to = u64::from(u32::from_be_bytes([10, 9, 0, 2]).to_be());
        let send = Command::new(
            softoe_abi::Opcode::Send,
            softoe_abi::SEND_OVERLAP,
            0,
            2,
            [8192, 1000, to, 9, 0, 0],
        );
        r.step(&[send, Command::nop(3)]);
        let mut c = crate::control::EngineCounters::default();
        r.s.meter.drain_into(&mut c);
        assert_eq!(r.reap(), 3);
        assert_eq!((c.stages.cmd.count, c.stages.cmd.bytes), (3, 1000));
        // Once after the socket was made, once after the send (the NOP
        // names the same socket: served once a step).
        assert_eq!(c.stages.serve.count, 2, "{:?}", c.stages);
        assert_eq!(c.stages.serve.bytes, 0, "nothing was received");
        assert_eq!(c.access_delay_nanos, 0);
    }
}
