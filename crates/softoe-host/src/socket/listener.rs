//! The listening socket: accepting connections.

use std::io;
use std::net::SocketAddrV4;
use std::sync::atomic::Ordering;

use softoe_abi::{EV_ACCEPT, Request, SockKind, errno};

use super::{Readiness, Sock, TcpListener, TcpOptions, TcpStream, addr_of};
use crate::client::Client;
use crate::errno::errno_err;

impl TcpListener {
    /// Prepares the listener for other processes, as
    /// [`TcpStream::watch_across_fork`] does a connection: it lives while
    /// this listener or any copy of the returned descriptor does, and a
    /// process holding the descriptor shares it with [`Client::take`].
    pub fn watch_across_fork(&self) -> io::Result<std::os::fd::OwnedFd> {
        self.s.c.watch(self.s.id, 2)
    }

    /// Takes the next connection, waiting for one unless non-blocking.
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddrV4)> {
        self.accept_timeout(self.mode.read_timeout)
    }

    /// As [`accept`](Self::accept), waiting at most `timeout` (`None`: for
    /// ever) whatever the listener's own timeout; `WouldBlock` when it
    /// passes with nobody to accept.
    pub fn accept_timeout(
        &self,
        timeout: Option<std::time::Duration>,
    ) -> io::Result<(TcpStream, SocketAddrV4)> {
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
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
                .wait(self.mode.nonblocking, left(deadline)?, false, |s| {
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
    /// listener shared in by [`Client::take`] reads 0 until set
    /// here, whatever its first session gave it).
    pub fn priority(&self) -> u32 {
        self.s.priority.load(Ordering::Relaxed)
    }

    /// What a `poll` would say now (readable: a connection waits).
    pub fn readiness(&self) -> Readiness {
        self.s.readiness()
    }

    /// The engine's id for this socket in its session (as `softoe stat`
    /// shows it).
    pub fn id(&self) -> u32 {
        self.s.id
    }

    /// The attachment this listener belongs to.
    pub fn client(&self) -> &Client {
        &self.s.c
    }
}

/// What is left of the time until `deadline` (`None`: no deadline);
/// `WouldBlock` once it has passed.
fn left(deadline: Option<std::time::Instant>) -> io::Result<Option<std::time::Duration>> {
    match deadline {
        None => Ok(None),
        Some(d) => match d.checked_duration_since(std::time::Instant::now()) {
            Some(t) if !t.is_zero() => Ok(Some(t)),
            _ => Err(io::ErrorKind::WouldBlock.into()),
        },
    }
}
