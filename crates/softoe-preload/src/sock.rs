//! The shim's sockets: which descriptors are softoe's, what each is, and
//! the socket calls on them.
//!
//! A softoe socket is a real descriptor: `socket()` makes a kernel socket
//! and the shim keeps it as the number's holder (so numbering, `dup`,
//! `close`, `fstat` and `exec` behave as the kernel's). When the socket is
//! given an address the [`Rules`] decide: the kernel's (the descriptor is
//! forgotten here and is from then on the plain kernel socket it always
//! was) or softoe's (the engine serves it; the kernel socket stays idle).

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::mem::ManuallyDrop;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};
use std::time::Duration;

use libc::c_int;
use softoe_host::{Client, Readiness, TcpListener, TcpReader, TcpStream, UdpSocket};
use tracing::{debug, info, warn};

use crate::rules::Rules;

/// This process's id, cached: glibc's `getpid` is a system call, and
/// every socket call asks (is this socket ours, or inherited across
/// `fork`?). The child of every `fork` refreshes it (`after_fork`);
/// `vfork` children share the parent's memory and only `exec`.
static PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// This process's id (see [`PID`]).
pub(crate) fn pid() -> u32 {
    let p = PID.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    let p = std::process::id();
    PID.store(p, Ordering::Relaxed);
    p
}

/// Runs in the child after every `fork`: its own id from now on.
pub(crate) extern "C" fn after_fork() {
    PID.store(std::process::id(), Ordering::Relaxed);
}

/// `Err` carries an errno.
pub(crate) type Res<T> = Result<T, c_int>;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The errno an `io::Error` from softoe-host stands for.
pub(crate) fn errno_of(e: &io::Error) -> c_int {
    if let Some(n) = e.raw_os_error() {
        return n;
    }
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => libc::EAGAIN,
        // A signal handler without SA_RESTART interrupted a blocking call.
        io::ErrorKind::Interrupted => libc::EINTR,
        io::ErrorKind::ConnectionAborted => libc::ECONNABORTED,
        io::ErrorKind::ConnectionReset => libc::ECONNRESET,
        io::ErrorKind::BrokenPipe => libc::EPIPE,
        io::ErrorKind::OutOfMemory => libc::ENOMEM,
        io::ErrorKind::InvalidInput => libc::EINVAL,
        io::ErrorKind::ResourceBusy => libc::EBUSY,
        _ => libc::EIO,
    }
}

/// TCP or UDP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Tcp,
    Udp,
}

/// Options as the program set them; applied when the engine socket
/// exists, reported back by `getsockopt`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Opts {
    pub nodelay: bool,
    pub cork: bool,
    pub keepalive: bool,
    pub keepidle: u32,
    pub keepintvl: u32,
    pub keepcnt: u32,
    pub user_timeout: u32,
    pub sndbuf: c_int,
    pub rcvbuf: c_int,
    pub rcvtimeo: Option<Duration>,
    pub sndtimeo: Option<Duration>,
    /// `SO_LINGER`: (on, seconds).
    pub linger: (bool, c_int),
    pub priority: c_int,
    pub reuseaddr: bool,
    pub reuseport: bool,
    pub maxseg: c_int,
    /// The rest (`IP_TOS`, `TCP_CONGESTION`…): see `opts.rs`.
    pub ext: crate::opts::Ext,
}

impl Default for Opts {
    fn default() -> Opts {
        // Linux's defaults.
        Opts {
            nodelay: false,
            cork: false,
            keepalive: false,
            keepidle: 7200,
            keepintvl: 75,
            keepcnt: 9,
            user_timeout: 0,
            sndbuf: 16_384,
            rcvbuf: 131_072,
            rcvtimeo: None,
            sndtimeo: None,
            linger: (false, 0),
            priority: 0,
            reuseaddr: false,
            reuseport: false,
            maxseg: 1460,
            ext: crate::opts::Ext::default(),
        }
    }
}

/// A connected (or connecting) TCP socket: the halves lock apart so one
/// thread may read while another writes.
#[derive(Debug)]
pub(crate) struct Stream {
    pub w: Mutex<TcpStream>,
    pub r: Mutex<TcpReader>,
    pub peer: SocketAddrV4,
    /// The attachment and socket id, readable without the locks above (a
    /// forked child must not wait on a lock a parent's thread held).
    pub client: Client,
    pub id: u32,
}

/// A listener on the engine. Its attachment and id are readable without
/// the lock a thread blocked in `accept` holds (`poll`, `exec`, a forked
/// child).
#[derive(Debug)]
pub(crate) struct Listener {
    pub l: Mutex<TcpListener>,
    pub client: Client,
    pub id: u32,
    pub local: SocketAddrV4,
}

impl Listener {
    fn new(l: TcpListener) -> Listener {
        Listener {
            client: l.client().clone(),
            id: l.id(),
            local: l.local_addr(),
            l: Mutex::new(l),
        }
    }
}

/// A UDP socket on the engine and its default destination.
#[derive(Debug)]
pub(crate) struct Udp {
    pub s: Mutex<UdpSocket>,
    pub peer: Mutex<Option<SocketAddrV4>>,
}

/// What a softoe socket is now.
#[derive(Clone, Debug)]
pub(crate) enum St {
    /// Made, not yet given to anyone (maybe bound: the address waits for
    /// `listen`).
    Fresh {
        bound: Option<SocketAddrV4>,
    },
    Listening(Arc<Listener>),
    Stream(Arc<Stream>),
    Udp(Arc<Udp>),
    /// Passed across `exec` (see `exec.rs`): the engine's name for it, to
    /// take into this process's session at first use.
    Inherited(Inherit),
    /// Inherited across `fork` and not usable here (a UDP socket, or a
    /// connection this process could not take): every call fails with
    /// this errno, and `poll` reports an error, so a program closes it
    /// instead of retrying.
    Lost(c_int),
}

/// A connection or listener another image of this process (or a parent)
/// had, as `exec` passed it: what an `ADOPT` names.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Inherit {
    pub listener: bool,
    pub session: u32,
    pub id: u32,
    pub secret: [u64; 2],
    pub peer: SocketAddrV4,
}

/// One softoe socket (shared by every descriptor `dup` made of it).
#[derive(Debug)]
pub(crate) struct Sock {
    /// The process that made it: after `fork` the child must not touch
    /// the parent's session (its rings are single-producer).
    pub pid: u32,
    pub kind: Kind,
    /// An `AF_INET6` socket: softoe serves its IPv4 side (addresses
    /// `::ffff:a.b.c.d`, and `::` for "any"), and speaks `sockaddr_in6`.
    pub v6: bool,
    pub nonblock: AtomicBool,
    pub st: Mutex<ManuallyDrop<St>>,
    pub opts: Mutex<Opts>,
    /// Edge-triggered epoll: the slot sequence last reported, per epoll
    /// set (see `wait.rs`).
    pub reported: Mutex<HashMap<c_int, u32>>,
    /// Its descriptor is the engine-watched one (prepared for `fork`).
    pub watched: AtomicBool,
}

impl Sock {
    pub(crate) fn new(kind: Kind, nonblock: bool, v6: bool) -> Sock {
        Sock::owned_by(pid(), kind, nonblock, v6)
    }

    fn owned_by(pid: u32, kind: Kind, nonblock: bool, v6: bool) -> Sock {
        Sock {
            pid,
            kind,
            v6,
            nonblock: AtomicBool::new(nonblock),
            st: Mutex::new(ManuallyDrop::new(St::Fresh { bound: None })),
            opts: Mutex::new(Opts::default()),
            reported: Mutex::new(HashMap::new()),
            watched: AtomicBool::new(false),
        }
    }

    /// A socket passed across `exec`: nobody's in this image until its
    /// first use takes it (see [`current`]).
    pub(crate) fn inherited(kind: Kind, v6: bool, st: St) -> Sock {
        let s = Sock::owned_by(0, kind, false, v6);
        s.watched
            .store(matches!(st, St::Inherited(_)), Ordering::Relaxed);
        *lock(&s.st) = ManuallyDrop::new(st);
        s
    }

    pub(crate) fn state(&self) -> St {
        (**lock(&self.st)).clone()
    }

    fn set(&self, st: St) {
        let mut g = lock(&self.st);
        // SAFETY: the old state is replaced right after being taken out and
        // never used again.
        let old = unsafe { ManuallyDrop::take(&mut *g) };
        **g = st;
        drop(g);
        drop(old);
    }

    /// A watched connection of this process's that another session took
    /// (its slot says so: no lock taken).
    fn moved_away(&self) -> bool {
        if !self.watched.load(Ordering::Relaxed) {
            return false;
        }
        match &**lock(&self.st) {
            St::Stream(t) => t.client.moved_away(t.id),
            _ => false,
        }
    }

    /// Whether this process may use it (not inherited across `fork`).
    pub(crate) fn ours(&self) -> bool {
        self.pid == pid()
    }

    /// What `poll` says of it now.
    pub(crate) fn readiness(&self) -> Readiness {
        match self.state() {
            St::Fresh { .. } => Readiness {
                // Linux: an unconnected TCP socket polls POLLOUT|POLLHUP.
                writable: true,
                hung_up: self.kind == Kind::Tcp,
                ..Readiness::default()
            },
            St::Listening(l) => l.client.readiness_of(l.id),
            // From the slot, not through the writer's lock: a thread
            // blocked in a write holds it.
            St::Stream(s) => s.client.readiness_of(s.id),
            St::Udp(u) => lock(&u.s).readiness(),
            St::Lost(_) | St::Inherited(_) => Readiness {
                readable: true,
                writable: true,
                hung_up: true,
                error: true,
                ..Readiness::default()
            },
        }
    }
}

impl Drop for Sock {
    fn drop(&mut self) {
        let linger = self.opts.get_mut().map_or((false, 0), |o| o.linger);
        let st = self.st.get_mut().unwrap_or_else(|e| e.into_inner());
        if self.pid == pid() {
            // SAFETY: taken once, in drop; never used again.
            let st = unsafe { ManuallyDrop::take(st) };
            // SO_LINGER with a zero time: the last close resets (when no
            // other thread is inside a call on the stream right now).
            if let (St::Stream(s), (true, 0)) = (st, linger)
                && let Ok(s) = Arc::try_unwrap(s)
            {
                let w = s.w.into_inner().unwrap_or_else(|e| e.into_inner());
                if let Err(e) = w.abort() {
                    debug!(error = %e, "abortive close failed");
                }
            }
        }
        // In a forked child the engine objects belong to the parent's
        // session: dropping them would post commands on its rings. They are
        // leaked (the child's copy of the memory only).
    }
}

/// The descriptors that are softoe sockets. A plain static: looking a
/// descriptor up never initialises anything, so a hook called while the
/// shim initialises (its log line going through our own `write`) passes
/// straight through.
#[derive(Debug)]
pub(crate) struct Table {
    /// One bit per descriptor below 65536: a lock-free "not ours" for the
    /// calls on every other descriptor (files, pipes, kernel sockets).
    bits: [AtomicU64; BITS / 64],
    map: RwLock<BTreeMap<c_int, Arc<Sock>>>,
}

const BITS: usize = 65_536;

pub(crate) static TABLE: Table = Table {
    bits: [const { AtomicU64::new(0) }; BITS / 64],
    map: RwLock::new(BTreeMap::new()),
};

impl Table {
    pub(crate) fn get(&self, fd: c_int) -> Option<Arc<Sock>> {
        if fd < 0 {
            return None;
        }
        let i = fd as usize;
        if i < BITS && self.bits[i / 64].load(Ordering::Acquire) & (1 << (i % 64)) == 0 {
            return None;
        }
        self.map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&fd)
            .cloned()
    }

    pub(crate) fn insert(&self, fd: c_int, s: Arc<Sock>) {
        if fd < 0 {
            return;
        }
        self.map
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(fd, s);
        let i = fd as usize;
        if i < BITS {
            self.bits[i / 64].fetch_or(1 << (i % 64), Ordering::Release);
        }
    }

    /// Points every descriptor that names `old` at `new`.
    pub(crate) fn replace(&self, old: &Arc<Sock>, new: &Arc<Sock>) {
        let mut m = self
            .map
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for v in m.values_mut() {
            if Arc::ptr_eq(v, old) {
                *v = new.clone();
            }
        }
    }

    /// This process's connections not yet watched, each with every
    /// descriptor that names it.
    pub(crate) fn unwatched_streams(&self) -> Vec<(Arc<Sock>, Vec<c_int>)> {
        let m = self
            .map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out: Vec<(Arc<Sock>, Vec<c_int>)> = Vec::new();
        for (&fd, s) in m.iter() {
            if !s.ours() || s.watched.load(Ordering::Relaxed) {
                continue;
            }
            if !matches!(&**lock(&s.st), St::Stream(_)) {
                continue;
            }
            match out.iter_mut().find(|(o, _)| Arc::ptr_eq(o, s)) {
                Some((_, fds)) => fds.push(fd),
                None => out.push((s.clone(), vec![fd])),
            }
        }
        out
    }

    /// Every descriptor that is a softoe socket, with its socket.
    pub(crate) fn entries(&self) -> Vec<(c_int, Arc<Sock>)> {
        self.map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(fd, s)| (*fd, s.clone()))
            .collect()
    }

    /// Whether no descriptor is a softoe socket.
    pub(crate) fn is_empty(&self) -> bool {
        self.map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_empty()
    }

    pub(crate) fn remove(&self, fd: c_int) -> Option<Arc<Sock>> {
        if fd < 0 {
            return None;
        }
        let i = fd as usize;
        if i < BITS {
            if self.bits[i / 64].load(Ordering::Acquire) & (1 << (i % 64)) == 0 {
                return None;
            }
            self.bits[i / 64].fetch_and(!(1 << (i % 64)), Ordering::Release);
        }
        self.map
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&fd)
    }
}

/// The shim's process-wide state.
#[derive(Debug)]
pub(crate) struct Shim {
    pub rules: Rules,
    /// Where and how to attach, read from the environment once: children
    /// may run with another (nginx clears its workers' environment).
    cfg: softoe_host::Config,
    /// The attachment (made at the first socket softoe serves), with the
    /// pid that made it.
    client: Mutex<Option<(u32, Client)>>,
    attach_failed: AtomicBool,
    /// `SOFTOE_FALLBACK=kernel`: when no engine answers, sockets go to the
    /// kernel's TCP. Otherwise they fail (`ENETDOWN`): a user who asked for
    /// softoe gets softoe or a clear failure, never Linux silently.
    pub fallback: bool,
}

static SHIM: OnceLock<Shim> = OnceLock::new();

/// The state, made at the first call.
pub(crate) fn shim() -> &'static Shim {
    SHIM.get_or_init(|| {
        init_logging();
        let rules = match Rules::from_env() {
            Ok(r) => r,
            Err(bad) => {
                eprintln!(
                    "softoe-preload: SOFTOE_KERNEL_NETS: {:?} is not an IPv4 network \
                     (a.b.c.d/len); write e.g. 127.0.0.0/8,10.1.0.0/16",
                    bad.0
                );
                std::process::exit(2);
            }
        };
        debug!(?rules, "softoe-preload loaded");
        Shim {
            rules,
            cfg: softoe_host::Config::default(),
            client: Mutex::new(None),
            attach_failed: AtomicBool::new(false),
            fallback: std::env::var("SOFTOE_FALLBACK").is_ok_and(|v| v == "kernel"),
        }
    })
}

fn init_logging() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(io::stderr)
            .try_init();
    }
}

impl Shim {
    /// The attachment, made now if need be; `None` when no engine answers
    /// (the socket then stays with the kernel, and a warning says so once).
    pub(crate) fn client(&self) -> Option<Client> {
        let me = pid();
        let mut g = lock(&self.client);
        if let Some((pid, c)) = &*g {
            if *pid == me && c.is_alive() {
                return Some(c.clone());
            }
            if *pid != me {
                // Inherited across fork: the parent's. Leak our copy (its
                // drop would touch nothing shared, but its sockets would).
                if let Some(old) = g.take() {
                    std::mem::forget(old);
                }
            } else {
                *g = None;
            }
        }
        if self.attach_failed.load(Ordering::Relaxed) {
            return None;
        }
        match Client::attach_with(self.cfg.clone()) {
            Ok(c) => {
                info!(session = c.session(), "attached to the softoe engine");
                *g = Some((me, c.clone()));
                Some(c)
            }
            Err(e) => {
                if !self.attach_failed.swap(true, Ordering::Relaxed) {
                    if self.fallback {
                        eprintln!(
                            "softoe-preload: {e}; sockets go to the kernel's TCP \
                             (SOFTOE_FALLBACK=kernel)"
                        );
                    } else {
                        eprintln!(
                            "softoe-preload: {e}; softoe sockets fail with ENETDOWN \
                             (start one with `softoe engine`, point SOFTOE_SOCKET at it, \
                             or set SOFTOE_FALLBACK=kernel to use the kernel's TCP instead)"
                        );
                    }
                }
                None
            }
        }
    }

    /// The attachment if one exists for this process (never attaches).
    pub(crate) fn client_if_attached(&self) -> Option<Client> {
        match &*lock(&self.client) {
            Some((owner, c)) if *owner == pid() => Some(c.clone()),
            _ => None,
        }
    }
}

/// Applies the options the program set to a new engine socket.
fn apply(s: &TcpStream, o: &Opts) {
    if o.nodelay && !o.cork {
        let _ = s.set_nodelay(true);
    }
    if o.keepalive {
        let _ = s.set_keepalive(
            true,
            u64::from(o.keepidle),
            u64::from(o.keepintvl),
            u64::from(o.keepcnt),
        );
    }
    if o.user_timeout > 0 {
        let _ = s.set_user_timeout(Some(Duration::from_millis(u64::from(o.user_timeout))));
    }
    crate::opts::after_connect(s, o);
}

fn stream_of(t: TcpStream, peer: SocketAddrV4) -> Stream {
    // A process with connections must prepare them for `fork`.
    static ATFORK: std::sync::Once = std::sync::Once::new();
    ATFORK.call_once(|| {
        // SAFETY: registers a plain function with no arguments; it runs in
        // the parent before every `fork` (including libc's own, as in
        // `daemon`).
        let r = unsafe { libc::pthread_atfork(Some(before_fork), None, None) };
        if r != 0 {
            warn!(
                errno = r,
                "pthread_atfork failed: connections will not survive fork"
            );
        }
    });
    let r = t.try_clone_reader();
    Stream {
        client: t.client().clone(),
        id: t.id(),
        w: Mutex::new(t),
        r: Mutex::new(r),
        peer,
    }
}

/// Runs in the parent just before `fork`: every connection of this process
/// that is not yet watched gets a watched descriptor under each of its
/// numbers (see `TcpStream::watch_across_fork`), so the kernel counts the
/// child's copies and the engine keeps the connection until the last
/// closes — as a kernel socket lives while any process holds it.
pub(crate) extern "C" fn before_fork() {
    for (s, fds) in TABLE.unwatched_streams() {
        let St::Stream(st) = s.state() else {
            continue;
        };
        let keep = match st.client.watch_stream(st.id) {
            Ok(fd) => fd,
            Err(e) => {
                warn!(error = %e, "could not prepare a connection for fork: a child cannot use it");
                continue;
            }
        };
        let raw = std::os::fd::AsRawFd::as_raw_fd(&keep);
        for fd in &fds {
            // SAFETY: plain descriptor calls on numbers this process owns;
            // `dup3` replaces the idle kernel socket under `fd` with the
            // watched descriptor, keeping the number's close-on-exec flag.
            unsafe {
                let cloexec = crate::real::fcntl(*fd, libc::F_GETFD, 0) & libc::FD_CLOEXEC != 0;
                let fl = crate::real::fcntl(*fd, libc::F_GETFL, 0);
                if crate::real::dup3(raw, *fd, if cloexec { libc::O_CLOEXEC } else { 0 }) < 0 {
                    warn!(fd, error = %io::Error::last_os_error(), "dup3 of a watched descriptor failed");
                    continue;
                }
                if fl >= 0 {
                    crate::real::fcntl(*fd, libc::F_SETFL, fl as libc::c_ulong);
                }
            }
        }
        s.watched.store(true, Ordering::Relaxed);
        debug!(?fds, sock = st.id, "connection watched across fork");
    }
}

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
                        if self.nonblock.load(Ordering::Relaxed) {
                            let pre = crate::opts::tcp_options(&opts);
                            match c.tcp_connect_nonblocking_with(to, &pre) {
                                Ok(t) => {
                                    apply(&t, &opts);
                                    self.set(St::Stream(Arc::new(stream_of(t, to))));
                                    Connect::Done(Err(libc::EINPROGRESS))
                                }
                                Err(e) => Connect::Done(Err(errno_of(&e))),
                            }
                        } else {
                            match c.tcp_connect_with(to, &crate::opts::tcp_options(&opts)) {
                                Ok(t) => {
                                    apply(&t, &opts);
                                    self.set(St::Stream(Arc::new(stream_of(t, to))));
                                    Connect::Done(Ok(0))
                                }
                                Err(e) => Connect::Done(Err(errno_of(&e))),
                            }
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
            St::Stream(s) => {
                let w = lock(&s.w);
                if let Some(e) = w.take_error() {
                    return Connect::Done(Err(errno_of(&e)));
                }
                if w.is_connected() {
                    Connect::Done(Err(libc::EISCONN))
                } else {
                    Connect::Done(Err(libc::EALREADY))
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

    /// `bind`: `Ok(false)` when the kernel serves the address.
    pub(crate) fn bind(&self, at: SocketAddrV4) -> Res<bool> {
        match self.state() {
            St::Fresh { bound: None } => {
                if !shim().rules.softoe_serves(*at.ip()) {
                    return Ok(false);
                }
                match self.kind {
                    Kind::Tcp => {
                        if shim().client().is_none() {
                            return if shim().fallback {
                                Ok(false)
                            } else {
                                Err(libc::ENETDOWN)
                            };
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
                let backlog = backlog.clamp(1, 65_535) as u32;
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
        apply(&t, &opts);
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

    /// Bytes waiting to be read (`FIONREAD`).
    pub(crate) fn pending(&self) -> usize {
        match self.state() {
            St::Stream(s) => lock(&s.r).pending() as usize,
            _ => 0,
        }
    }
}

/// The softoe socket behind `fd` as this process may use it: a socket
/// inherited across `fork` is taken into this process's own session first
/// — a listener is shared with the parent's session (both accept from it,
/// as after a kernel `fork`), a socket not yet given to the engine is
/// simply this process's now, and a connection moves into this process's
/// session (the parent prepared it before `fork`). What cannot be taken
/// (UDP sockets) fails with `EBADF`, for good.
pub(crate) fn current(fd: c_int) -> Option<Res<Arc<Sock>>> {
    let s = TABLE.get(fd)?;
    if s.ours() && !s.moved_away() {
        return Some(Ok(s));
    }
    // One adoption at a time: two threads must not share a listener twice.
    static ADOPTING: Mutex<()> = Mutex::new(());
    let _g = lock(&ADOPTING);
    if let Some(now) = TABLE.get(fd)
        && now.ours()
    {
        if !now.moved_away() {
            return Some(Ok(now));
        }
        return Some(take_back(fd, &now));
    }
    let fresh = Sock::new(s.kind, s.nonblock.load(Ordering::Relaxed), s.v6);
    *lock(&fresh.opts) = *lock(&s.opts);
    let st = match s.state() {
        St::Fresh { bound } => Ok(St::Fresh { bound }),
        St::Listening(l) => {
            let (session, id, secret) = (l.client.session(), l.id, l.client.secret());
            match shim()
                .client()
                .map(|c| c.adopt_listener(session, id, secret))
            {
                Some(Ok(nl)) => {
                    debug!(
                        fd,
                        from = session,
                        "listener shared into this process's session"
                    );
                    Ok(St::Listening(Arc::new(Listener::new(nl))))
                }
                Some(Err(e)) => {
                    warn!(fd, error = %e, "could not share an inherited listener");
                    Err(errno_of(&e))
                }
                None => Err(libc::ENETDOWN),
            }
        }
        St::Stream(old) if s.watched.load(Ordering::Relaxed) => {
            let (session, id, secret) = (old.client.session(), old.id, old.client.secret());
            match shim().client().map(|c| c.adopt_stream(session, id, secret)) {
                Some(Ok(t)) => {
                    debug!(
                        fd,
                        from = session,
                        "connection taken into this process's session"
                    );
                    fresh.watched.store(true, Ordering::Relaxed);
                    Ok(St::Stream(Arc::new(stream_of(t, old.peer))))
                }
                Some(Err(e)) => {
                    warn!(fd, error = %e, "could not take an inherited connection");
                    Err(errno_of(&e))
                }
                None => Err(libc::ENETDOWN),
            }
        }
        St::Inherited(i) => match shim().client() {
            // Passed across exec: the ADOPT names the socket of the image
            // (or parent) that had it; the engine follows a connection
            // that moved on since.
            Some(c) if i.listener => c
                .adopt_listener(i.session, i.id, i.secret)
                .map(|nl| St::Listening(Arc::new(Listener::new(nl)))),
            Some(c) => c.adopt_stream(i.session, i.id, i.secret).map(|t| {
                fresh.watched.store(true, Ordering::Relaxed);
                St::Stream(Arc::new(stream_of(t, i.peer)))
            }),
            None => Err(io::Error::from_raw_os_error(libc::ENETDOWN)),
        }
        .map_err(|e| {
            warn!(fd, error = %e, listener = i.listener, "could not take a socket passed across exec");
            errno_of(&e)
        }),
        St::Stream(_) | St::Udp(_) => Err(inherited()),
        St::Lost(e) => Err(e),
    };
    // A failure is final for this process (no attach and adopt again at
    // every call or wait): the socket answers its errno from now on.
    let failed = st.as_ref().err().copied();
    fresh.set(st.unwrap_or_else(St::Lost));
    let fresh = Arc::new(fresh);
    // Every descriptor naming the old socket (dup) names the new one.
    TABLE.replace(&s, &fresh);
    Some(match failed {
        Some(e) => Err(e),
        None => Ok(fresh),
    })
}

/// Takes back a connection of this process that a child took (the engine
/// says so in the socket's slot): sshd's monitor gives the connection to
/// its pre-auth child, and for a root login serves it itself afterwards.
fn take_back(fd: c_int, s: &Arc<Sock>) -> Res<Arc<Sock>> {
    let St::Stream(old) = s.state() else {
        return Ok(s.clone());
    };
    let c = &old.client;
    let t = c
        .adopt_stream(c.session(), old.id, c.secret())
        .map_err(|e| {
            warn!(fd, error = %e, "could not take back a connection a child had taken");
            errno_of(&e)
        })?;
    debug!(
        fd,
        "connection taken back from the session that had taken it"
    );
    let fresh = Sock::new(s.kind, s.nonblock.load(Ordering::Relaxed), s.v6);
    *lock(&fresh.opts) = *lock(&s.opts);
    fresh.watched.store(true, Ordering::Relaxed);
    fresh.set(St::Stream(Arc::new(stream_of(t, old.peer))));
    let fresh = Arc::new(fresh);
    TABLE.replace(s, &fresh);
    Ok(fresh)
}

/// Reports once per process that a socket inherited across `fork` cannot
/// be used.
pub(crate) fn inherited() -> c_int {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        warn!("a softoe socket inherited across fork was used: not supported (EBADF)");
        eprintln!(
            "softoe-preload: this softoe socket does not survive fork (UDP sockets, and \
             connections the parent could not prepare); the child gets EBADF"
        );
    }
    libc::EBADF
}
