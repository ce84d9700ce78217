//! The shim's sockets: which descriptors are softoe's, what each is, and
//! the socket calls on them.
//!
//! A softoe socket is a real descriptor: `socket()` makes a kernel socket
//! and the shim keeps it as the number's holder (so numbering, `dup`,
//! `close`, `fstat` and `exec` behave as the kernel's). When the socket is
//! given an address the [rules](crate::rules) decide: the kernel's (the descriptor is
//! forgotten here and is from then on the plain kernel socket it always
//! was) or softoe's (the engine serves it; the kernel socket stays idle).
//!
//! Here: what a softoe socket is (its kind, options and state) and the
//! small helpers every file uses; `table.rs` the descriptors that are
//! softoe sockets; `shim.rs` the process-wide state and the attachment to
//! the engine; `calls.rs` the socket calls on a softoe socket; `fork.rs`
//! sockets across `fork`, before and after.

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use libc::c_int;
use softoe_host::{Client, Readiness, TcpListener, TcpReader, TcpStream, UdpSocket};
use tracing::debug;

use crate::opts::Opts;

mod calls;
mod fork;
mod pass;
mod shim;
mod table;

pub(crate) use calls::Connect;

pub(crate) use fork::{before_fork, current};
pub(crate) use pass::{after_recv, before_send};
pub(crate) use shim::shim;
pub(crate) use table::TABLE;

/// This process's id: every socket call asks (is this socket ours, or
/// inherited across `fork`?), so it is a load of a word the kernel zeroes
/// in every child, however the child was made — libc's `fork`, or a raw
/// `clone` no hook sees (vsftpd's): see [`softoe_host::process_id`].
/// `vfork` children share the parent's memory and only `exec`.
pub(crate) fn pid() -> u32 {
    softoe_host::process_id()
}

/// Whether this is a `vfork` child (or any process made with `CLONE_VM`)
/// before its `exec`: it shares the parent's memory — the socket table,
/// the sessions — but not its descriptor table, so what it does to its
/// descriptors (Python's `subprocess` closes every one it does not pass,
/// with `close_range`) must not change the shim's state, which is the
/// parent's. [`pid`] is the parent's there (the page is shared), the
/// kernel's answer is the child's. A system call: asked only where a
/// softoe socket's descriptor is involved.
pub(crate) fn shares_parents_memory() -> bool {
    // SAFETY: getpid takes nothing and cannot fail.
    (unsafe { libc::getpid() }) as u32 != pid()
}

/// Runs in the child after every `fork` (nothing to do since [`pid`]
/// notices by itself; kept so the child's id is read at once).
pub(crate) extern "C" fn after_fork() {
    let _ = pid();
}

/// `Err` carries an errno.
pub(crate) type Res<T> = Result<T, c_int>;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The errno an `io::Error` from softoe-host stands for (softoe-host's one
/// table, so the shim and the library never disagree).
pub(crate) use softoe_host::errno_of;

/// TCP or UDP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Tcp,
    Udp,
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
        fork::prepare_for_fork();
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
    /// Passed across `exec` (see `hooks/exec.rs`): the engine's name for it, to
    /// take into this process's session at first use.
    Inherited(Inherit),
    /// Inherited across `fork` and not usable here (a UDP socket, or a
    /// connection this process could not take): every call fails with
    /// this errno, and `poll` reports an error, so a program closes it
    /// instead of retrying.
    Lost(c_int),
}

/// A connection or listener another image of this process (or a parent)
/// had, passed across `exec` or received over a Unix socket: its number
/// names the socket's watched descriptor, which this process claims (the
/// engine checks it holds it) at first use.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Inherit {
    pub listener: bool,
    /// The peer, as the image before knew it (unspecified when unknown:
    /// the engine's answer tells).
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
    /// set (see `hooks/wait/epoll.rs`).
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
