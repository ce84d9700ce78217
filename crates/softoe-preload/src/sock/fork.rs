//! Softoe sockets across `fork`: before it, the parent puts each
//! connection's numbers on a descriptor the engine watches (so the kernel
//! counts every process's copies); after it, a process takes what it
//! inherited into its own session at first use (`current`) — a listener
//! shared, a connection moved — or answers `EBADF` for what cannot move.

use std::io;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use libc::c_int;
use softoe_host::{Taken, TcpStream};
use tracing::{debug, warn};

use super::{Listener, Res, Sock, St, Stream, TABLE, errno_of, lock, shim};

/// Registers [`before_fork`] (once per process): a process with softoe
/// connections or listeners must prepare them for `fork`.
pub(super) fn prepare_for_fork() {
    static ATFORK: std::sync::Once = std::sync::Once::new();
    ATFORK.call_once(|| {
        // SAFETY: registers a plain function with no arguments; it runs in
        // the parent before every `fork` (including libc's own, as in
        // `daemon`).
        let r = unsafe { libc::pthread_atfork(Some(before_fork), None, None) };
        if r != 0 {
            warn!(
                errno = r,
                "pthread_atfork failed: sockets will not survive fork"
            );
        }
    });
}

/// The state of a connection the engine made (connected, accepted or
/// taken over): the writer and a reader that lock apart. The first one
/// registers `before_fork`.
pub(super) fn stream_of(t: TcpStream, peer: SocketAddrV4) -> Stream {
    prepare_for_fork();
    let r = t.try_clone_reader();
    Stream {
        client: t.client().clone(),
        id: t.id(),
        w: Mutex::new(t),
        r: Mutex::new(r),
        peer,
    }
}

/// Runs in the parent just before `fork` (and before `exec`): every
/// connection and listener of this process that is not yet watched gets a
/// watched descriptor under each of its numbers (see
/// `Client::watch`), so the kernel counts the child's copies and the
/// engine keeps the socket until the last closes — as a kernel socket
/// lives while any process holds it.
pub(crate) extern "C" fn before_fork() {
    for (s, fds) in TABLE.unwatched() {
        prepare(&s, &fds);
    }
}

/// Puts a watched descriptor under `fds`, every number of socket `s` (a
/// connection or listener of this process's), unless it has one already:
/// from now on it lives while any process holds one of them (`fork`,
/// `exec`, or one it was passed to over a Unix socket: `pass.rs`).
pub(crate) fn prepare(s: &Arc<Sock>, fds: &[c_int]) {
    if s.watched.load(Ordering::Relaxed) || !s.ours() {
        return;
    }
    let flags = u8::from(s.v6);
    let (client, id, what, flags) = match s.state() {
        St::Stream(st) => (st.client.clone(), st.id, "connection", flags),
        St::Listening(l) => (l.client.clone(), l.id, "listener", flags | 2),
        _ => return,
    };
    let keep = match client.watch(id, flags) {
        Ok(fd) => fd,
        Err(e) => {
            warn!(error = %e, what, "could not prepare a socket for another process: it cannot use it");
            return;
        }
    };
    let raw = std::os::fd::AsRawFd::as_raw_fd(&keep);
    for fd in fds {
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
    debug!(?fds, sock = id, what, "socket watched for other processes");
}

/// The softoe socket behind `fd` as this process may use it: a socket
/// inherited across `fork` is taken into this process's own session first
/// — a listener is shared with the parent's session (both accept from it,
/// as after a kernel `fork`), a socket not yet given to the engine is
/// simply this process's now, and a connection is joined by this process's
/// session (the parent prepared it before `fork`; both hold it from then
/// on). A socket passed over a Unix socket is claimed first. What cannot
/// be taken (UDP sockets) fails with `EBADF`, for good.
pub(crate) fn current(fd: c_int) -> Option<Res<Arc<Sock>>> {
    let s = TABLE.get(fd)?;
    if s.ours() {
        return Some(Ok(s));
    }
    // One adoption at a time: two threads must not share a listener twice.
    static ADOPTING: Mutex<()> = Mutex::new(());
    let _g = lock(&ADOPTING);
    if let Some(now) = TABLE.get(fd)
        && now.ours()
    {
        return Some(Ok(now));
    }
    let fresh = Sock::new(s.kind, s.nonblock.load(Ordering::Relaxed), s.v6);
    *lock(&fresh.opts) = *lock(&s.opts);
    // Its numbers still name the watched descriptor it came with (a
    // listener's too): preparing it again for the next process would
    // replace that descriptor, and the count of its copies with it.
    fresh
        .watched
        .store(s.watched.load(Ordering::Relaxed), Ordering::Relaxed);
    let st = match s.state() {
        St::Fresh { bound } => Ok(St::Fresh { bound }),
        // Inherited across `fork` (the parent's state, in this process's
        // copy of its memory), across `exec`, or received over a Unix
        // socket: the descriptor under `fd` is the socket's watch, and
        // holding it is this process's whole authority — the engine checks
        // it ([`softoe_host::Client::take`]).
        St::Listening(_) => take(fd, &fresh, None, "an inherited listener"),
        St::Stream(old) if s.watched.load(Ordering::Relaxed) => {
            take(fd, &fresh, Some(old.peer), "an inherited connection")
        }
        St::Inherited(i) => take(
            fd,
            &fresh,
            Some(i.peer),
            "a socket passed across exec or over a Unix socket",
        ),
        St::Stream(_) | St::Udp(_) => Err(inherited()),
        St::Lost(e) => Err(e),
    };
    // A failure is final for this process (no attach and adopt again at
    // every call or wait): the socket answers its errno from now on.
    let failed = st.as_ref().err().copied();
    fresh.set(st.unwrap_or_else(St::Lost));
    let fresh = Arc::new(fresh);
    // Every descriptor naming the old socket (dup) names the new one, and
    // the epoll sets index it anew.
    let fds = TABLE.replace(&s, &fresh);
    crate::hooks::wait::socket_replaced(&fds);
    Some(match failed {
        Some(e) => Err(e),
        None => Ok(fresh),
    })
}

/// Takes the socket whose watched descriptor is `fd` into this process's
/// session: its state here (`fresh` is marked watched: its numbers keep
/// naming the watch). `peer`: the peer as known before (unspecified or
/// `None`: the engine's word).
fn take(fd: c_int, fresh: &Sock, peer: Option<SocketAddrV4>, what: &str) -> Result<St, c_int> {
    let Some(c) = shim().client() else {
        return Err(libc::ENETDOWN);
    };
    // SAFETY: `fd` is the number the program's own call named, which the
    // shim's table holds as this socket's watched descriptor; the borrow
    // lasts only for `take`'s messages to the engine (a number the program
    // closed behind the shim's back is the kernel's `EBADF`, as before).
    match c.take(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }) {
        Ok(Taken::Listener(nl)) => {
            debug!(fd, "listener shared into this process's session");
            Ok(St::Listening(Arc::new(Listener::new(nl))))
        }
        Ok(Taken::Stream(t)) => {
            debug!(fd, "connection joined by this process's session");
            fresh.watched.store(true, Ordering::Relaxed);
            let peer = peer
                .filter(|p| !p.ip().is_unspecified())
                .unwrap_or_else(|| t.peer_addr());
            Ok(St::Stream(Arc::new(stream_of(t, peer))))
        }
        Err(e) => {
            warn!(fd, error = %e, "could not take {what}");
            Err(errno_of(&e))
        }
    }
}

/// Reports once per process that a socket inherited across `fork` cannot
/// be used.
pub(crate) fn inherited() -> c_int {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        warn!("a softoe socket inherited across fork was used: not supported (EBADF)");
        crate::diag::say(
            "softoe-preload: this softoe socket does not survive fork (UDP sockets, and \
             connections the parent could not prepare); the child gets EBADF",
        );
    }
    libc::EBADF
}
