//! The host interface: programs in other processes attach over a Unix
//! socket and hand the engine their socket work through a shared region
//! (see `softoe-abi`).
//!
//! [`HostService`] is a [`Service`] on the engine thread. Each turn it
//! accepts attaches, consumes every session's command ring, moves data
//! between the stack and the sessions' rings for the sockets the stack
//! reported events on, posts completions, and rings a program's doorbell
//! only when one of its threads sleeps. Before the engine sleeps it marks
//! every region `ENGINE_SLEEPING` and looks at the rings once more, so a
//! command posted in between is never missed.
//!
//! Every access the engine makes to a program's memory — a command taken,
//! a completion or socket event published, a doorbell rung — is counted
//! (`ring_accesses` in `softoe stat`) and, when the engine emulates slower
//! memory (`EngineConfig::access_delay`), delayed; with
//! `EngineConfig::profile_stages` commands and served sockets are timed.
//!
//! Nothing a program writes is trusted: commands go through
//! [`softoe_abi::decode`], socket ids index only the session's own table,
//! ring indices are range-checked, and a broken ring ends that session
//! alone. A process that exits or is killed closes its Unix socket; the
//! engine then closes its sockets as the kernel would at exit and frees its
//! region once the stack holds no reference into it.

// `unsafe` is allowed only where a program's shared region is read or
// written (the session modules that say so) and in the system-call layer;
// the rest of the host interface denies it.
mod session;
pub mod sys;

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Duration;

use softoe_abi::{ATTACH_MAGIC, Hello, Layout, VERSION, Welcome, errno};
use softoe_stack::{Algorithm, Events, Instant, SocketHandle, Stack};
use tracing::{debug, info, warn};

use crate::counters::EngineCounters;
use crate::emulate::{AccessMeter, Emulation};
use crate::memory::Memory;
use crate::services::{Service, ServiceError};
#[cfg(test)]
pub(crate) use session::linux_state;
pub(crate) use session::state_of_linux;
use session::{Ctx, Fds, Session};

/// Fuzzing's way into a session core past the command decoder (the
/// `host_session` fuzz target, feature `fuzzing`): not an API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use session::drive_commands;
use sys::{Epoll, EventFd, Mapping};

/// How the engine serves host programs.
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// The Unix socket programs attach to.
    pub path: PathBuf,
    /// Its file mode: who may attach.
    pub mode: u32,
    /// Most sessions at once, every user's together.
    pub max_sessions: usize,
    /// Of those, how many only root may take: whatever other users hold,
    /// root's programs can attach.
    pub root_sessions: usize,
    /// What one user other than root may hold at once.
    pub per_user: UserLimits,
    /// Largest data area a program may ask for.
    pub max_data: u64,
    /// Most sockets per session.
    pub max_socks: u32,
    /// Engine-side copy buffer per TCP socket for the `overlap` policy and
    /// for sends from a program's own memory.
    pub copy_ring: usize,
    /// Completion wake-ups: ring a waiting program's doorbell once this many
    /// completions or events are pending…
    pub wake_batch: u32,
    /// …or once the oldest has waited this long (interrupt coalescing).
    pub wake_delay: Duration,
    /// The name of the interface the engine's port is on: `SO_BINDTODEVICE`
    /// to it (or to no device) is accepted, to any other name refused with
    /// `ENODEV`. `None`: every name is refused.
    pub device: Option<String>,
    /// Ports below this need `CAP_NET_BIND_SERVICE` to bind, as Linux's
    /// `net.ipv4.ip_unprivileged_port_start` (whose value in the engine's
    /// network namespace `softoe engine` uses).
    pub unprivileged_port_start: u16,
}

impl Default for HostConfig {
    fn default() -> HostConfig {
        HostConfig {
            path: PathBuf::from(DEFAULT_PATH),
            mode: 0o666,
            max_sessions: 1024,
            root_sessions: 64,
            per_user: UserLimits::default(),
            max_data: 1 << 30,
            max_socks: 65_536,
            copy_ring: 512 * 1024,
            wake_batch: 1,
            wake_delay: Duration::ZERO,
            device: None,
            unprivileged_port_start: 1024,
        }
    }
}

/// What one user (other than root) may hold of the engine at once, so that
/// no user can lock the others out: sessions, sockets, and the shared
/// memory of its sessions' regions. A user is the attach socket's peer
/// credentials' uid, as the kernel gives them (`SO_PEERCRED`), the user a
/// program was when it attached. Root is held to none of them, and
/// [`HostConfig::root_sessions`] of the engine's sessions are kept for it.
///
/// The defaults let one user take a quarter of the engine's sessions
/// (256 of 1024: as many as the whole engine had before there were
/// limits), a quarter of the stack's 65,536 sockets, and the regions of
/// 256 sessions of the host library's default size (256 MiB each; the
/// memory is a memfd's, charged when touched).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserLimits {
    /// Sessions (attached programs: each process that uses softoe).
    pub sessions: usize,
    /// Sockets open at once across the user's sessions (listeners,
    /// connections and UDP sockets; a connection closed and draining, or
    /// in TIME-WAIT, no longer counts). Over it `socket`/`accept` fail
    /// with `EMFILE`.
    pub sockets: usize,
    /// Bytes of the user's sessions' regions together.
    pub memory: u64,
}

impl Default for UserLimits {
    fn default() -> UserLimits {
        UserLimits {
            sessions: 256,
            sockets: 16_384,
            memory: 64 << 30,
        }
    }
}

/// What one user holds now (for [`UserLimits`]).
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    sessions: usize,
    sockets: usize,
    memory: u64,
}

/// `net.ipv4.ip_unprivileged_port_start` of the caller's network
/// namespace (1024 when it cannot be read, the kernel's default).
pub fn unprivileged_port_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .map_or(1024, |v| u16::try_from(v).unwrap_or(u16::MAX))
}

/// Where programs find the engine unless told otherwise (`SOFTOE_SOCKET`).
pub const DEFAULT_PATH: &str = "/run/softoe/host.sock";

/// What `softoe stat` shows of one session.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SessionStat {
    /// Session number.
    pub id: u32,
    /// The attached process.
    pub pid: i32,
    /// Its user.
    pub uid: u32,
    /// Open socket ids.
    pub sockets: usize,
    /// Closed sockets the stack still finishes.
    pub closing: usize,
    /// Connections the program closed that other processes may still hold
    /// (inherited across `fork`): they wait for one of them to take them,
    /// or for the last descriptor to close.
    #[serde(default)]
    pub detached: usize,
    /// Commands taken.
    pub commands: u64,
    /// Commands refused with an error completion.
    pub rejected: u64,
    /// Doorbells rung to wake the program.
    pub wakeups: u64,
    /// Bytes placed straight into buffers the program posted (`RECV`).
    #[serde(default)]
    pub direct: u64,
    /// The process has gone; the session ends when its sockets do.
    pub dead: bool,
}

/// Shared with the control socket: the sessions as the last turn saw them.
pub type SessionStats = Arc<std::sync::Mutex<Vec<SessionStat>>>;

/// A session the engine reclaimed, timed by the engine's own clock reads
/// (so a reader descheduled on a busy machine does not count its own
/// delay): when it found the program gone, and when it had given back
/// everything the session held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reclaimed {
    /// Session number ([`SessionStat::id`]).
    pub id: u32,
    /// The process that attached.
    pub pid: i32,
    /// When the engine saw the program's end and closed its sockets
    /// (`None`: the session ended without its program going, which a
    /// session does not).
    pub gone: Option<std::time::Instant>,
    /// When its region, sockets and counts were given back.
    pub reclaimed: std::time::Instant,
}

/// The last [`RECLAIMS_KEPT`] reclaimed sessions, oldest first.
pub type Reclaims = Arc<std::sync::Mutex<std::collections::VecDeque<Reclaimed>>>;

/// How many reclaimed sessions [`HostService::reclaims`] keeps.
pub const RECLAIMS_KEPT: usize = 64;

/// Serves attached programs. Add it to an engine as a service.
#[derive(Debug)]
pub struct HostService {
    cfg: HostConfig,
    /// The socket programs attach to (`None`: only programs in this
    /// process attach, through `inbox`).
    listener: Option<OwnedFd>,
    /// The socket file, removed at drop while still ours.
    _bound: Option<crate::sockpath::Bound>,
    /// Connections from programs in this process (`crate::app`): the
    /// engine's ends of socket pairs, and the doorbell rung after one is
    /// sent.
    inbox: Option<(Receiver<OwnedFd>, Arc<EventFd>)>,
    epoll: Epoll,
    sessions: Vec<Option<Session>>,
    /// Which session (slot in `sessions`) owns a stack socket.
    owner: HashMap<SocketHandle, usize>,
    /// Sessions that share a listener or a connection besides its owner
    /// (`ADOPT`): its stack events go to each of them too.
    also: HashMap<SocketHandle, Vec<usize>>,
    /// Connections more than one socket holds, each in its own session
    /// (`session/share.rs`): how many, and the bytes taken back from the
    /// first holder's ring.
    shared: session::Shares,
    /// The watches by the abstract name of the program's end
    /// ([`softoe_abi::WATCH_NAME`]): what a process that received such a
    /// descriptor claims ([`softoe_abi::BellOp::Claim`]).
    watch_names: HashMap<Vec<u8>, u64>,
    /// Grants a claim gave: (session id, number) → the socket and whether
    /// it is a listener. An `ADOPT` from that session naming the number
    /// takes it (once): the only way a session reaches another's socket.
    grants: HashMap<(u32, u32), (SocketHandle, bool)>,
    next_grant: u32,
    /// Listeners no session holds whose descriptors some process still
    /// has (every share closed while one was in flight over a Unix
    /// socket): kept listening for the process that takes it next, closed
    /// when the last descriptor closes.
    orphans: std::collections::HashSet<SocketHandle>,
    /// Connections and listeners other processes may hold
    /// (`BellOp::Watch`): the socket, the engine's end of its socket pair,
    /// and whether it is a listener, by epoll token.
    watches: HashMap<u64, (SocketHandle, OwnedFd, bool)>,
    next_watch: u64,
    events: Vec<(SocketHandle, Events)>,
    next_id: u32,
    look_at: Option<Instant>,
    woke: bool,
    stats: SessionStats,
    reclaims: Reclaims,
    scratch: Vec<u8>,
    /// Epoll tokens found ready by `look`, kept for the next look (no
    /// allocation per look).
    ready: Vec<u64>,
    /// The stack's default congestion control algorithm, told to every
    /// program at attach (`TCP_CONGESTION` of a socket that chose none).
    congestion: Algorithm,
    /// The engine's emulation settings, given to every session.
    emulation: Emulation,
    /// What reclaimed sessions counted and the engine has not collected.
    meter: AccessMeter,
    /// Connections accepted whose hello has not come yet, by epoll token:
    /// the descriptor and when to give up on it. The engine never waits
    /// for a hello inside its loop.
    hellos: HashMap<u64, (OwnedFd, Instant)>,
    /// The next token for a connection waiting for its hello.
    next_hello: u64,
    /// What each user's sessions hold ([`UserLimits`]), by uid; a user
    /// with no session has no entry.
    users: HashMap<u32, Usage>,
}

const LISTENER: u64 = u64::MAX;
/// The epoll token of the in-process doorbell (`HostService::in_process`).
const INBOX: u64 = u64::MAX - 1;
/// Epoll tokens from here up are watches (below: session slots, and
/// connections waiting for their hello from [`HELLO`]).
const WATCH: u64 = 1 << 48;
/// Epoll tokens from here up to [`WATCH`] are connections waiting for
/// their hello.
const HELLO: u64 = 1 << 47;
/// How long a connection may take to say hello (a program descheduled
/// between `connect` and `send` on a loaded machine) before the engine
/// refuses it.
const HELLO_WAIT: Duration = Duration::from_secs(5);
/// Most connections that may wait for their hello at once; more are
/// refused with `EAGAIN` (a program that connects and says nothing cannot
/// make the engine hold descriptors without bound).
const MAX_HELLOS: usize = 64;

/// Answers an attach with an error (a negated errno) and no region.
fn refuse(fd: BorrowedFd<'_>, status: i32) {
    refuse_for(fd, status, 0, 0);
}

/// Refuses an attach with `status` because of `limit` (a `LIMIT_*`), whose
/// value is `value`: the program's error names it.
fn refuse_for(fd: BorrowedFd<'_>, status: i32, limit: u32, value: u64) {
    let w = Welcome {
        magic: ATTACH_MAGIC,
        version: VERSION,
        status: -status,
        limit,
        region_len: value,
        ..Welcome::default()
    };
    let _ = sys::send_with_fds(fd, &w.to_bytes(), &[]);
}

/// Brings the count of what `s`'s user holds up to date with the sockets
/// `s` has open, and gives `s` the room for sockets its user has left:
/// before a session's turn (so that its `socket`s and `accept`s stop at the
/// user's limit, whatever its other sessions hold) and after it (so that
/// the next session of the same user sees what this one opened).
fn settle(users: &mut HashMap<u32, Usage>, limits: &UserLimits, s: &mut Session) {
    let uid = s.attach_uid();
    let open = s.open_sockets();
    let u = users.entry(uid).or_default();
    let others = u.sockets.saturating_sub(s.sock_counted);
    u.sockets = others + open;
    s.sock_counted = open;
    s.sock_limit = if uid == 0 {
        usize::MAX
    } else {
        limits.sockets.saturating_sub(others)
    };
}

impl HostService {
    /// Listens on `cfg.path`.
    pub fn new(cfg: HostConfig) -> io::Result<HostService> {
        if let Some(dir) = cfg.path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir)?;
        }
        let listener = sys::listen(&cfg.path, cfg.mode)?;
        let bound = crate::sockpath::Bound::new(&cfg.path);
        let epoll = Epoll::new()?;
        epoll.add(&listener, LISTENER)?;
        info!(path = %cfg.path.display(), "host interface listening");
        Ok(HostService::with(
            cfg,
            epoll,
            Some(listener),
            Some(bound),
            None,
        ))
    }

    /// Serves programs in this process only (no socket file; `cfg.path`
    /// and `cfg.mode` are not used): each sends the engine's end of a
    /// `SOCK_SEQPACKET` socket pair on the returned channel and rings the
    /// returned doorbell, then attaches over its own end as any program
    /// does (`softoe_host::Client::attach_over`). The in-process API
    /// (`crate::app`) is built on it.
    pub(crate) fn in_process(
        cfg: HostConfig,
    ) -> io::Result<(HostService, Sender<OwnedFd>, Arc<EventFd>)> {
        let epoll = Epoll::new()?;
        let bell = Arc::new(EventFd::new()?);
        epoll.add(&bell, INBOX)?;
        let (tx, rx) = mpsc::channel();
        let service = HostService::with(cfg, epoll, None, None, Some((rx, bell.clone())));
        Ok((service, tx, bell))
    }

    fn with(
        cfg: HostConfig,
        epoll: Epoll,
        listener: Option<OwnedFd>,
        bound: Option<crate::sockpath::Bound>,
        inbox: Option<(Receiver<OwnedFd>, Arc<EventFd>)>,
    ) -> HostService {
        HostService {
            cfg,
            listener,
            _bound: bound,
            inbox,
            epoll,
            sessions: Vec::new(),
            owner: HashMap::new(),
            also: HashMap::new(),
            shared: session::Shares::new(),
            watch_names: HashMap::new(),
            grants: HashMap::new(),
            next_grant: 1,
            orphans: std::collections::HashSet::new(),
            watches: HashMap::new(),
            next_watch: WATCH,
            events: Vec::new(),
            next_id: 1,
            look_at: None,
            woke: true,
            stats: SessionStats::default(),
            reclaims: Reclaims::default(),
            scratch: vec![0u8; 65_536],
            ready: Vec::new(),
            congestion: Algorithm::default(),
            emulation: Emulation::default(),
            meter: AccessMeter::default(),
            hellos: HashMap::new(),
            next_hello: HELLO,
            users: HashMap::new(),
        }
    }

    /// The sessions, refreshed every millisecond (for `softoe stat`).
    pub fn stats(&self) -> SessionStats {
        self.stats.clone()
    }

    /// The sessions reclaimed last, with when ([`Reclaimed`]).
    pub fn reclaims(&self) -> Reclaims {
        self.reclaims.clone()
    }

    /// A new connection to the host socket: attaches it if its hello is
    /// there already (the usual case: it is sent right after `connect`),
    /// else waits for it in the epoll set, never in the engine's loop.
    fn greet(&mut self, now: Instant, conn: OwnedFd) {
        let mut buf = [0u8; 64];
        match sys::recv(&conn, &mut buf) {
            // Closed without a word: a check that an engine answers here
            // (`softoe run`'s, `sockpath::alive`), not a program's attach.
            Ok(Some(0)) => debug!("host socket: a connection closed without a hello (a probe)"),
            Ok(Some(n)) => self.attach(conn, &buf[..n]),
            Ok(None) => {
                if self.hellos.len() >= MAX_HELLOS {
                    warn!("attach: too many connections waiting to say hello");
                    refuse(conn.as_fd(), errno::EAGAIN);
                    return;
                }
                let token = self.next_hello;
                self.next_hello = if token + 1 >= WATCH { HELLO } else { token + 1 };
                if let Err(e) = self.epoll.add(&conn, token) {
                    warn!(error = %e, "attach: epoll");
                    return;
                }
                self.hellos.insert(token, (conn, now + HELLO_WAIT));
            }
            Err(_) => {}
        }
    }

    /// A connection waiting for its hello became readable.
    fn hello_ready(&mut self, token: u64) {
        let Some((conn, deadline)) = self.hellos.remove(&token) else {
            return;
        };
        let mut buf = [0u8; 64];
        match sys::recv(&conn, &mut buf) {
            Ok(None) => {
                self.hellos.insert(token, (conn, deadline));
            }
            Ok(Some(n)) if n > 0 => {
                self.epoll.delete(&conn);
                self.attach(conn, &buf[..n]);
            }
            // Gone without a word.
            Ok(Some(_)) | Err(_) => self.epoll.delete(&conn),
        }
    }

    /// Refuses the connections whose hello is overdue.
    fn expire_hellos(&mut self, now: Instant) {
        if self.hellos.values().all(|(_, t)| now < *t) {
            return;
        }
        let epoll = &self.epoll;
        self.hellos.retain(|_, (conn, t)| {
            if now < *t {
                return true;
            }
            warn!("attach: no hello in {HELLO_WAIT:?}");
            epoll.delete(&*conn);
            refuse(conn.as_fd(), errno::ETIMEDOUT);
            false
        });
    }

    fn attach(&mut self, conn: OwnedFd, hello: &[u8]) {
        let fd = conn.as_fd();
        let (pid, uid, _gid) = match sys::peer_cred(fd) {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "attach: no peer credentials");
                return;
            }
        };
        let refuse = |status: i32| refuse(fd, status);
        let Some(hello) = Hello::from_bytes(hello) else {
            warn!(pid, "attach: no valid hello");
            refuse(errno::EINVAL);
            return;
        };
        if hello.version != VERSION {
            warn!(pid, version = hello.version, "attach: wrong ABI version");
            refuse(errno::EPROTONOSUPPORT);
            return;
        }
        let live = self.sessions.iter().flatten().count();
        let room = if uid == 0 {
            self.cfg.max_sessions
        } else {
            self.cfg.max_sessions.saturating_sub(self.cfg.root_sessions)
        };
        if live >= room {
            warn!(
                pid,
                uid,
                sessions = live,
                "attach refused: the engine holds as many sessions as it may ([limits] sessions{})",
                if uid == 0 { "" } else { ", less root_sessions" }
            );
            refuse_for(fd, errno::EMFILE, softoe_abi::LIMIT_SESSIONS, live as u64);
            return;
        }
        let used = self.users.get(&uid).copied().unwrap_or_default();
        let limits = self.cfg.per_user;
        if uid != 0 && used.sessions >= limits.sessions {
            warn!(
                pid,
                uid,
                sessions = used.sessions,
                "attach refused: the user holds as many sessions as one user may \
                 ([limits] user_sessions)"
            );
            refuse_for(
                fd,
                errno::EMFILE,
                softoe_abi::LIMIT_USER_SESSIONS,
                limits.sessions as u64,
            );
            return;
        }
        let ring = |n: u32| n.clamp(64, 16_384).next_power_of_two();
        let layout = match Layout::new(
            ring(hello.cmd_entries),
            ring(hello.cmp_entries),
            hello.socks.clamp(16, self.cfg.max_socks),
            hello.data_len.clamp(1 << 16, self.cfg.max_data),
        ) {
            Ok(l) => l,
            Err(e) => {
                warn!(pid, error = %e, "attach: bad sizes");
                refuse(errno::EINVAL);
                return;
            }
        };
        if uid != 0 && used.memory.saturating_add(layout.region_len()) > limits.memory {
            warn!(
                pid,
                uid,
                held = used.memory,
                asked = layout.region_len(),
                "attach refused: the user's sessions would hold more shared memory than one \
                 user may ([limits] user_memory)"
            );
            refuse_for(
                fd,
                errno::ENOMEM,
                softoe_abi::LIMIT_USER_MEMORY,
                limits.memory,
            );
            return;
        }
        let id = self.next_id;
        let made = (|| -> io::Result<(OwnedFd, Mapping, EventFd, EventFd)> {
            let (memfd, map) = Mapping::memfd(
                &format!("softoe-session-{id}"),
                layout.region_len() as usize,
            )?;
            Ok((memfd, map, EventFd::new()?, EventFd::new()?))
        })();
        let (memfd, map, bell_engine, bell_app) = match made {
            Ok(m) => m,
            Err(e) => {
                warn!(pid, error = %e, "attach: cannot make the region");
                refuse(e.raw_os_error().unwrap_or(errno::ENOMEM));
                return;
            }
        };
        // The header is written before the program can see the region.
        let fds = Fds::new(pid, conn, (memfd, map), bell_engine, bell_app);
        let mut session = match Session::open(id, (pid, uid), layout, fds) {
            Ok(s) => s,
            Err(e) => {
                // The connection closed with the session: nothing to answer on.
                warn!(pid, error = %e, "attach: session setup failed");
                return;
            }
        };
        session.meter.set(&self.emulation);
        session.tell(self.cfg.device.as_deref(), self.congestion);
        let w = Welcome {
            magic: ATTACH_MAGIC,
            version: VERSION,
            status: 0,
            session: id,
            limit: 0,
            region_len: layout.region_len(),
        };
        if let Err(e) = sys::send_with_fds(session.conn_fd(), &w.to_bytes(), &session.fds()) {
            warn!(pid, error = %e, "attach: cannot send the region");
            return;
        }
        let slot = self
            .sessions
            .iter()
            .position(Option::is_none)
            .unwrap_or_else(|| {
                self.sessions.push(None);
                self.sessions.len() - 1
            });
        let token = slot as u64;
        if self.epoll.add(session.conn_fd(), token).is_err()
            || self.epoll.add(session.bell_engine(), token).is_err()
        {
            warn!(pid, "attach: epoll");
            return;
        }
        self.next_id = self.next_id.wrapping_add(1).max(1);
        let u = self.users.entry(uid).or_default();
        u.sessions += 1;
        u.memory += layout.region_len();
        info!(
            session = id,
            pid,
            uid,
            region = layout.region_len(),
            "program attached"
        );
        self.sessions[slot] = Some(session);
    }

    fn look(&mut self, now: Instant, stack: &mut Stack, mem: &mut Memory) {
        let mut ready = std::mem::take(&mut self.ready);
        ready.clear();
        self.epoll.ready(&mut ready);
        for &t in &ready {
            if t == INBOX {
                let mut conns = Vec::new();
                if let Some((rx, bell)) = &self.inbox {
                    bell.drain();
                    conns.extend(rx.try_iter());
                }
                for c in conns {
                    self.greet(now, c);
                }
                continue;
            }
            if t == LISTENER {
                // Out while connections are greeted (which never looks at it).
                let Some(listener) = self.listener.take() else {
                    continue;
                };
                loop {
                    match sys::accept(&listener) {
                        Ok(Some(c)) => self.greet(now, c),
                        Ok(None) => break,
                        Err(e) => {
                            warn!(error = %e, "host accept failed");
                            break;
                        }
                    }
                }
                self.listener = Some(listener);
                continue;
            }
            if t >= WATCH {
                self.watch_ready(now, stack, t);
                continue;
            }
            if t >= HELLO {
                self.hello_ready(t);
                continue;
            }
            let Some(Some(s)) = self.sessions.get_mut(t as usize) else {
                continue;
            };
            s.bell_engine().drain();
            let gone = !s.dead && s.read_conn();
            let watches: Vec<_> = s
                .take_watches()
                .into_iter()
                .map(|(h, sock, fd)| (h, fd, s.is_listener(sock)))
                .collect();
            let claims = s.take_claims();
            let session_id = s.id;
            if gone {
                info!(
                    session = s.id,
                    pid = s.pid,
                    "program gone: closing its sockets"
                );
                self.epoll.delete(s.conn_fd());
                self.epoll.delete(s.bell_engine());
                s.exit(&mut Ctx {
                    now,
                    stack,
                    cfg: &self.cfg,
                    slot: t as usize,
                    owner: &mut self.owner,
                    shares: &mut self.shared,
                    scratch: &mut self.scratch,
                    mem,
                });
            }
            for (h, fd, listener) in watches {
                let token = self.next_watch;
                self.next_watch += 1;
                if let Err(e) = self.epoll.add(&fd, token) {
                    warn!(error = %e, "cannot watch a connection across fork");
                    if let Some(Some(s)) = self.sessions.get_mut(t as usize) {
                        s.unwatch(h);
                    }
                    continue;
                }
                debug!(?h, token, listener, "watching a socket across fork");
                // The name the program gave its end, if it is one a
                // receiving process can claim it by.
                if let Some(n) = sys::unix_name(&fd, true)
                    && n.starts_with(softoe_abi::WATCH_NAME)
                {
                    self.watch_names.insert(n, token);
                }
                self.watches.insert(token, (h, fd, listener));
            }
            for fd in claims {
                let r = self.claim(session_id, &fd);
                if let Err(e) = r {
                    debug!(session = session_id, errno = e, "claim refused");
                }
                if let Some(Some(s)) = self.sessions.get(t as usize) {
                    s.answer_claim(r);
                }
            }
        }
        self.expire_hellos(now);
        // A dead session's shared listeners pass to the sessions sharing
        // them before it can be reclaimed.
        self.shares(now, stack);
        // Sessions whose sockets are all released give their region back.
        let mut reclaimed = Vec::new();
        for (me, slot) in self.sessions.iter_mut().enumerate() {
            if slot.as_ref().is_some_and(|s| s.finished(stack))
                && let Some(s) = slot.take()
            {
                info!(session = s.id, pid = s.pid, "session reclaimed");
                self.meter.absorb(&s.meter);
                let uid = s.attach_uid();
                if let Some(u) = self.users.get_mut(&uid) {
                    u.sessions = u.sessions.saturating_sub(1);
                    u.memory = u.memory.saturating_sub(s.region_len());
                    u.sockets = u.sockets.saturating_sub(s.sock_counted);
                    if u.sessions == 0 {
                        self.users.remove(&uid);
                    }
                }
                // Grants it never used die with it (session numbers are
                // not reused, but the table must not grow).
                let id = s.id;
                self.grants.retain(|(g, _), _| *g != id);
                // Only what it still owns: a connection it gave to another
                // session is that one's now.
                for h in s.handles() {
                    if self.owner.get(&h) == Some(&me) {
                        // Nothing may write its region once it is gone.
                        let _ = stack.tcp_set_rx_sink(h, None);
                        self.owner.remove(&h);
                    }
                }
                let (pid, gone) = (s.pid, s.gone_at);
                s.reclaim(mem);
                reclaimed.push(Reclaimed {
                    id,
                    pid,
                    gone,
                    reclaimed: std::time::Instant::now(),
                });
            }
        }
        self.ready = ready;
        // Refreshed in place: the list keeps its allocation.
        if let Ok(mut g) = self.stats.lock() {
            g.clear();
            g.extend(self.sessions.iter().flatten().map(Session::stat));
        }
        // Recorded after the table: whoever sees a session reclaimed finds
        // it gone from the table too.
        if !reclaimed.is_empty()
            && let Ok(mut g) = self.reclaims.lock()
        {
            for r in reclaimed {
                if g.len() == RECLAIMS_KEPT {
                    g.pop_front();
                }
                g.push_back(r);
            }
        }
    }
}

impl HostService {
    /// A watched connection's descriptor pair has news: the last copy of
    /// the program's end closed (end of file), so no process can use the
    /// connection any more. Anything written to it is read and dropped.
    fn watch_ready(&mut self, now: Instant, stack: &mut Stack, token: u64) {
        let Some((h, fd, _)) = self.watches.get(&token) else {
            return;
        };
        let (h, raw) = (*h, fd.as_fd());
        let mut buf = [0u8; 256];
        let mut stray = 0usize;
        let eof = loop {
            match sys::recv(raw, &mut buf) {
                Ok(Some(0)) | Err(_) => break true,
                Ok(Some(n)) => stray += n,
                Ok(None) => break false,
            }
        };
        if stray > 0 {
            // A program wrote on the descriptor itself, past the shim:
            // glibc's stdio on an inherited connection (it calls write
            // inside libc), or a program run without the shim.
            warn!(
                ?h,
                bytes = stray,
                "bytes written straight to a connection's descriptor, not through the shim: dropped"
            );
        }
        if !eof {
            return;
        }
        self.epoll.delete(raw);
        self.watches.remove(&token);
        self.watch_names.retain(|_, t| *t != token);
        debug!(?h, "every descriptor of a watched socket closed");
        if self.orphans.remove(&h) {
            let _ = stack.close(now, h);
        }
        for slot in self.holders(h) {
            if let Some(Some(s)) = self.sessions.get_mut(slot) {
                s.watch_gone(now, stack, &mut self.shared, h);
            }
        }
    }

    /// The sessions (by slot) with a socket on stack socket `h`: its owner
    /// first, then those that share it.
    fn holders(&self, h: SocketHandle) -> Vec<usize> {
        let mut v: Vec<usize> = self.owner.get(&h).copied().into_iter().collect();
        for &o in self.also.get(&h).into_iter().flatten() {
            if !v.contains(&o) {
                v.push(o);
            }
        }
        v.retain(|&o| matches!(self.sessions.get(o), Some(Some(s)) if s.holds(h)));
        v
    }

    /// Connection `h` is gone: its sharing and grants go with it.
    fn forget_conn(&mut self, h: SocketHandle) {
        self.shared.remove(&h);
        self.orphans.remove(&h);
        self.grants.retain(|_, (g, _)| *g != h);
    }

    /// Session `session` claims `fd`, a descriptor its process holds
    /// (inherited, or received from another process): if it is the far end
    /// of one of the watches (its name says which, a byte written on the
    /// engine's end and read from `fd` proves it), a grant the session may
    /// adopt the socket by. The kernel gave the engine this descriptor out
    /// of the claiming process's own table: nothing the process could read
    /// elsewhere stands in for it.
    fn claim(&mut self, session: u32, fd: &OwnedFd) -> Result<(u32, bool), i32> {
        let name = sys::unix_name(fd, false).ok_or(errno::ENOENT)?;
        let token = *self.watch_names.get(&name).ok_or(errno::ENOENT)?;
        let (h, ours, listener) = self.watches.get(&token).ok_or(errno::ENOENT)?;
        let probe = (self.next_grant as u8) | 1;
        if !sys::is_far_end(ours, fd, probe) {
            return Err(errno::EACCES);
        }
        let (h, listener) = (*h, *listener);
        let g = self.next_grant;
        self.next_grant = self.next_grant.wrapping_add(1).max(1);
        self.grants.insert((session, g), (h, listener));
        Ok((g, listener))
    }

    /// Session `slot` shares listener `h` (an `ADOPT` naming a watched
    /// listener's socket): both accept from it from now on. A holder whose
    /// program closed it (detached: kept for another process's
    /// descriptor) gives its share up; the joiner's descriptor keeps it.
    fn adopt_listener(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        h: SocketHandle,
        slot: usize,
    ) -> Result<(SocketHandle, Option<softoe_stack::Endpoint>), i32> {
        let holders = self.holders(h);
        if holders.contains(&slot) {
            return Err(errno::EALREADY);
        }
        let pick = |live: bool| {
            holders.iter().find_map(|&f| match self.sessions.get(f) {
                Some(Some(p)) => p
                    .sock_of(h)
                    .filter(|&id| !live || p.listener_live(id))
                    .map(|id| (f, id)),
                _ => None,
            })
        };
        let Some((from, id)) = pick(true).or_else(|| pick(false)) else {
            // Nobody holds it but descriptors do: this session takes it.
            if self.orphans.remove(&h) {
                let local = stack.tcp_listener_info(h).map_err(|_| errno::ENOENT)?.local;
                return Ok((h, Some(local)));
            }
            return Err(errno::ENOENT);
        };
        let r = match self.sessions.get_mut(from) {
            Some(Some(p)) => p.share_listener(id)?,
            _ => return Err(errno::ENOENT),
        };
        for f in holders {
            if let Some(Some(p)) = self.sessions.get_mut(f)
                && let Some(id) = p.sock_of(h)
                && !p.listener_live(id)
            {
                p.give_up_listener(now, stack, &mut self.shared, id);
            }
        }
        Ok(r)
    }

    /// Session `slot` takes connection `h` (an `ADOPT`): it joins the
    /// sockets that hold it, which share it from now on. A holder whose
    /// program closed it (detached: kept for this adoption or the last
    /// descriptor) gives its hold up, once its queued sends are out. Not
    /// yet (`EAGAIN`, tried again on a later turn) while a holder has
    /// commands the engine has not read, or closed it with sends not yet
    /// in the stack: the adopter's writes must not overtake them (sshd's
    /// first child writes, exits, and the next child adopts).
    fn adopt_conn(
        &mut self,
        stack: &mut Stack,
        h: SocketHandle,
        slot: usize,
    ) -> Result<session::Joining, i32> {
        let holders = self.holders(h);
        if holders.contains(&slot) {
            return Err(errno::EALREADY);
        }
        let mut live = None;
        for &f in &holders {
            let Some(Some(p)) = self.sessions.get_mut(f) else {
                continue;
            };
            let id = p.sock_of(h).ok_or(errno::ENOENT)?;
            if p.pending_commands() || p.draining(id) {
                return Err(errno::EAGAIN);
            }
            if live.is_none() && p.holds_live(id) {
                live = Some((f, id));
            }
        }
        // The socket the joiner continues from: a live one, else any.
        let (from, from_id) = match live {
            Some(l) => l,
            None => {
                let f = *holders.first().ok_or(errno::ENOENT)?;
                let id = match self.sessions.get(f) {
                    Some(Some(p)) => p.sock_of(h).ok_or(errno::ENOENT)?,
                    _ => return Err(errno::ENOENT),
                };
                (f, id)
            }
        };
        let c = self.shared.entry(h).or_default();
        let (j, unread) = match self.sessions.get_mut(from) {
            Some(Some(p)) => p.share_out(stack, from_id, c)?,
            _ => return Err(errno::ENOENT),
        };
        c.holders = holders.len() as u32 + 1;
        c.prefix.extend(unread);
        // Holders kept only for this (closed, nothing left to send) give
        // their hold up: the joiner's descriptor keeps the connection.
        for &f in &holders {
            if let Some(Some(p)) = self.sessions.get_mut(f)
                && let Some(id) = p.sock_of(h)
                && !p.holds_live(id)
                && p.give_up_detached(id, c)
            {
                c.holders = c.holders.saturating_sub(1);
            }
        }
        Ok(j)
    }

    /// Listeners and connections shared across sessions: `ADOPT`s
    /// answered (they name another session, so a session cannot answer
    /// them itself), and shares closed handed on. Returns whether anything
    /// happened.
    fn shares(&mut self, now: Instant, stack: &mut Stack) -> bool {
        let mut any = false;
        for slot in 0..self.sessions.len() {
            let adopts = match self.sessions.get_mut(slot) {
                Some(Some(s)) if !s.adopts.is_empty() => std::mem::take(&mut s.adopts),
                _ => Vec::new(),
            };
            let mut later = Vec::new();
            for (tag, id, a) in adopts {
                let r = self.resolve_adopt(now, stack, slot, &a);
                let r = match r {
                    Ok(Ok(j)) => {
                        // The connection is shared: its events come here too.
                        any = true;
                        let h = j.h();
                        let others = self.also.entry(h).or_default();
                        if !others.contains(&slot) && self.owner.get(&h) != Some(&slot) {
                            others.push(slot);
                        }
                        if let Some(Some(s)) = self.sessions.get_mut(slot) {
                            s.join_shared(tag, id, j);
                        }
                        continue;
                    }
                    Ok(Err(l)) => Ok(l),
                    Err(errno::EAGAIN) => {
                        // Not yet (see `adopt_conn`): again on a later
                        // turn, once the holders' commands and sends are
                        // through.
                        later.push((tag, id, a));
                        continue;
                    }
                    Err(e) => Err(e),
                };
                if let Ok((h, _)) = r {
                    match self.owner.entry(h) {
                        std::collections::hash_map::Entry::Vacant(v) => {
                            v.insert(slot);
                        }
                        std::collections::hash_map::Entry::Occupied(o) => {
                            let others = self.also.entry(h).or_default();
                            if !others.contains(&slot) && *o.get() != slot {
                                others.push(slot);
                            }
                        }
                    }
                }
                if let Some(Some(s)) = self.sessions.get_mut(slot) {
                    if let Err(e) = r {
                        warn!(session = s.id, grant = a.grant, errno = e, "adopt refused");
                    }
                    let watched = r
                        .as_ref()
                        .is_ok_and(|(h, _)| self.watches.values().any(|(w, _, _)| w == h));
                    s.finish_adopt(tag, id, r, watched);
                }
                any = true;
            }
            if !later.is_empty()
                && let Some(Some(s)) = self.sessions.get_mut(slot)
            {
                s.adopts.extend(later);
            }
            let (unshared, left) = match self.sessions.get_mut(slot) {
                Some(Some(s)) => (
                    std::mem::take(&mut s.unshared),
                    std::mem::take(&mut s.unshared_conns),
                ),
                _ => (Vec::new(), Vec::new()),
            };
            for h in unshared {
                any = true;
                // Ownership passes to a session that still holds it: the
                // sessions that do, asked (not the share list, which may
                // name one that left this turn or whose slot was reused).
                let live = self.holders(h);
                match live.split_first() {
                    Some((&first, rest)) => {
                        self.owner.insert(h, first);
                        if rest.is_empty() {
                            self.also.remove(&h);
                            if let Some(Some(s)) = self.sessions.get_mut(first) {
                                s.unshare(h);
                            }
                        } else {
                            self.also.insert(h, rest.to_vec());
                        }
                    }
                    None => {
                        self.owner.remove(&h);
                        self.also.remove(&h);
                        if self.watches.values().any(|(w, _, _)| *w == h) {
                            // Descriptors of it are still about (passed to a
                            // process that has not claimed it yet): it
                            // listens on for that process, or until the
                            // last of them closes.
                            debug!(?h, "a listener no session holds kept for its descriptors");
                            self.orphans.insert(h);
                        } else {
                            debug!(?h, "the last share of a listener closed");
                            let _ = stack.close(now, h);
                        }
                    }
                }
            }
            for h in left {
                any = true;
                // Its events go to the sockets still holding it, which look
                // at it again (the last one may have its ring back).
                if let Some(others) = self.also.get_mut(&h) {
                    others.retain(|&o| o != slot);
                }
                if self.owner.get(&h) == Some(&slot) {
                    match self.also.get_mut(&h).and_then(Vec::pop) {
                        Some(next) => {
                            self.owner.insert(h, next);
                        }
                        None => {
                            self.owner.remove(&h);
                        }
                    }
                }
                if self.also.get(&h).is_some_and(Vec::is_empty) {
                    self.also.remove(&h);
                }
                for o in self.holders(h) {
                    if let Some(Some(s)) = self.sessions.get_mut(o) {
                        s.stack_event(h, Events::empty());
                    }
                }
            }
        }
        any
    }

    /// What an `ADOPT` from session `slot` names: a connection it joins
    /// (`Ok(Ok(..))`) or a listener it shares (`Ok(Err(..))`).
    fn resolve_adopt(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        slot: usize,
        a: &session::Adopt,
    ) -> Result<Result<session::Joining, (SocketHandle, Option<softoe_stack::Endpoint>)>, i32> {
        // Only a socket a claim granted this session: the claim proved
        // its process holds the socket's descriptor.
        let me = match self.sessions.get(slot) {
            Some(Some(s)) => s.id,
            _ => return Err(errno::ENOENT),
        };
        let (h, listener) = *self.grants.get(&(me, a.grant)).ok_or(errno::ENOENT)?;
        let r = if listener {
            self.adopt_listener(now, stack, h, slot).map(Err)
        } else {
            self.adopt_conn(stack, h, slot).map(Ok)
        };
        // Used once — but an `ADOPT` told to wait (`EAGAIN`: the holders'
        // commands are not all through) comes again with the same grant.
        if !matches!(r, Err(errno::EAGAIN)) {
            self.grants.remove(&(me, a.grant));
        }
        r
    }
}

impl Service for HostService {
    fn name(&self) -> &str {
        "host"
    }

    fn start(
        &mut self,
        _now: Instant,
        stack: &mut Stack,
        _mem: &mut Memory,
    ) -> Result<(), ServiceError> {
        self.congestion = stack.config().tcp.congestion;
        Ok(())
    }

    fn step(&mut self, now: Instant, stack: &mut Stack, mem: &mut Memory) -> bool {
        let mut any = false;
        // Attaches and deaths: right after a sleep, else once a millisecond
        // (an epoll_wait per turn would cost more than the work).
        if self.woke || self.look_at.is_none_or(|t| now >= t) {
            self.woke = false;
            self.look_at = Some(now + Duration::from_millis(1));
            self.look(now, stack, mem);
        }
        // Out of `self` while it is walked (put back empty: no allocation).
        let mut events = std::mem::take(&mut self.events);
        for (h, e) in events.drain(..) {
            if let Some(others) = self.also.get(&h) {
                for &slot in others {
                    if let Some(Some(s)) = self.sessions.get_mut(slot) {
                        s.stack_event(h, e);
                    }
                }
            }
            let Some(&slot) = self.owner.get(&h) else {
                continue;
            };
            if let Some(Some(s)) = self.sessions.get_mut(slot) {
                s.stack_event(h, e);
            }
            if e.contains(Events::RELEASED) {
                self.owner.remove(&h);
                self.also.remove(&h);
                self.forget_conn(h);
            }
        }
        self.events = events;
        for (slot, s) in self.sessions.iter_mut().enumerate() {
            if let Some(s) = s {
                settle(&mut self.users, &self.cfg.per_user, s);
                any |= s.step(&mut Ctx {
                    now,
                    stack,
                    cfg: &self.cfg,
                    slot,
                    owner: &mut self.owner,
                    shares: &mut self.shared,
                    scratch: &mut self.scratch,
                    mem,
                });
                settle(&mut self.users, &self.cfg.per_user, s);
            }
        }
        any |= self.shares(now, stack);
        // A shared connection's queued send went wholly to the stack: the
        // next in order may be another holder's.
        for (&h, c) in self.shared.iter_mut().filter(|(_, c)| c.advanced) {
            c.advanced = false;
            for &slot in self
                .owner
                .get(&h)
                .into_iter()
                .chain(self.also.get(&h).into_iter().flatten())
            {
                if let Some(Some(s)) = self.sessions.get_mut(slot) {
                    s.stack_event(h, Events::empty());
                }
            }
        }
        any
    }

    fn event(&mut self, h: SocketHandle, e: Events) {
        if self.owner.contains_key(&h) || self.also.contains_key(&h) {
            self.events.push((h, e));
        } else {
            tracing::trace!(?h, ?e, "event for a socket no session owns");
        }
    }

    fn wake_at(&self) -> Option<Instant> {
        self.sessions
            .iter()
            .flatten()
            .filter_map(Session::wake_at)
            .min()
    }

    fn wake_fd(&self) -> Option<RawFd> {
        Some(self.epoll.raw())
    }

    fn before_sleep(&mut self) -> bool {
        let mut work = false;
        for s in self.sessions.iter_mut().flatten() {
            work |= s.before_sleep();
        }
        work
    }

    fn after_sleep(&mut self) {
        self.woke = true;
        for s in self.sessions.iter_mut().flatten() {
            s.after_sleep();
        }
    }

    fn emulate(&mut self, e: &Emulation) {
        self.emulation = *e;
        self.meter.set(e);
        for s in self.sessions.iter_mut().flatten() {
            s.meter.set(e);
        }
    }

    fn drain_counters(&mut self, c: &mut EngineCounters) {
        self.meter.drain_into(c);
        for s in self.sessions.iter_mut().flatten() {
            s.meter.drain_into(c);
        }
    }
}

impl Drop for HostService {
    fn drop(&mut self) {
        // Programs still attached learn that the engine is gone, instead
        // of waiting on it for ever.
        for s in self.sessions.iter_mut().flatten() {
            if !s.dead {
                s.engine_stopping();
            }
        }
        debug!("host interface closed");
    }
}
