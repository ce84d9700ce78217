//! The outer layer: a program in another process, reached through
//! descriptors. The session core works on the region the memfd maps and
//! asks `Fds` ([`Program`]) for the rest: eventfd doorbells, and
//! `process_vm_readv`/`writev` for the program's own memory. The Unix
//! socket the program attached on carries its doorbell registrations and
//! watch requests, answered here.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use softoe_abi::{BELL_MAGIC, Bell, BellOp, MAX_BELLS, errno};
use softoe_stack::SocketHandle;
use tracing::debug;

use super::{Program, SessionCore};
use crate::host::sys::{self, EventFd, Mapping};

/// The session of a program in another process.
pub(in crate::host) type Session = SessionCore<Fds>;

/// A program in another process, as its session reaches it.
#[derive(Debug)]
pub(in crate::host) struct Fds {
    /// The Unix socket it attached on; closes when the process goes.
    conn: OwnedFd,
    /// The region's memfd, and its mapping in the engine.
    memfd: OwnedFd,
    map: Mapping,
    /// The doorbell the program rings for the engine, and the session's
    /// own for the program.
    bell_engine: EventFd,
    bell_app: EventFd,
    /// Waiter doorbells the program registered ([`Bell`]), by index.
    bells: Vec<Option<EventFd>>,
    /// Watches the program asked for (`BellOp::Watch`), for the host
    /// service to add to its epoll set.
    new_watches: Vec<(SocketHandle, u32, OwnedFd)>,
    /// Descriptors the program claims (`BellOp::Claim`), for the host
    /// service to check against its watches and answer.
    claims: Vec<OwnedFd>,
    /// The process, for `process_vm_readv`/`writev`.
    pid: i32,
}

impl Fds {
    /// The region's memory in the engine: the mapping's start and length.
    pub(super) fn region_memory(&self) -> (*mut u8, usize) {
        (self.map.ptr(), self.map.len())
    }

    /// What `attach` made for process `pid`: its Unix socket, the region's
    /// memfd and mapping, and the two doorbells.
    pub(in crate::host) fn new(
        pid: i32,
        conn: OwnedFd,
        (memfd, map): (OwnedFd, Mapping),
        bell_engine: EventFd,
        bell_app: EventFd,
    ) -> Fds {
        Fds {
            conn,
            memfd,
            map,
            bell_engine,
            bell_app,
            bells: (0..MAX_BELLS).map(|_| None).collect(),
            new_watches: Vec::new(),
            claims: Vec::new(),
            pid,
        }
    }
}

impl Program for Fds {
    fn ring_session(&mut self) {
        self.bell_app.signal();
    }

    fn ring_waiter(&mut self, index: u32) -> bool {
        match self.bells.get(index as usize) {
            Some(Some(b)) => {
                b.signal();
                true
            }
            _ => false,
        }
    }

    fn uid(&mut self) -> Option<u32> {
        crate::cred::effective_uid(self.pid)
    }

    fn may_bind_privileged(&mut self) -> bool {
        // A process that cannot be looked at is refused.
        crate::cred::may_bind_service(self.pid).unwrap_or(false)
    }

    fn read(&mut self, addr: u64, dst: &mut [u8]) -> Result<usize, i32> {
        sys::read_process(self.pid, addr, dst)
            .map_err(|e| e.raw_os_error().unwrap_or(errno::EFAULT))
    }

    fn write(&mut self, addr: u64, a: &[u8], b: &[u8]) -> Result<usize, i32> {
        sys::write_process(self.pid, addr, a, b)
            .map_err(|e| e.raw_os_error().unwrap_or(errno::EFAULT))
    }
}

impl Session {
    /// What the program gets: the region, the engine's doorbell, its own.
    pub(in crate::host) fn fds(&self) -> [BorrowedFd<'_>; 3] {
        let f = &self.io;
        [f.memfd.as_fd(), f.bell_engine.as_fd(), f.bell_app.as_fd()]
    }

    pub(in crate::host) fn conn_fd(&self) -> BorrowedFd<'_> {
        self.io.conn.as_fd()
    }

    /// The doorbell the program rings to wake the engine.
    pub(in crate::host) fn bell_engine(&self) -> &EventFd {
        &self.io.bell_engine
    }

    /// Watches the program asked for since the last call (`BellOp::Watch`),
    /// for the host service to add to its epoll set.
    pub(in crate::host) fn take_watches(&mut self) -> Vec<(SocketHandle, u32, OwnedFd)> {
        std::mem::take(&mut self.io.new_watches)
    }

    /// Descriptors the program claimed since the last call
    /// (`BellOp::Claim`): the host service answers each with
    /// [`answer_claim`](Self::answer_claim), in order.
    pub(in crate::host) fn take_claims(&mut self) -> Vec<OwnedFd> {
        std::mem::take(&mut self.io.claims)
    }

    /// Answers the program's oldest claim: a grant (`Ok((number,
    /// listener))`) or an errno.
    pub(in crate::host) fn answer_claim(&self, r: Result<(u32, bool), i32>) {
        let (index, status, listener) = match r {
            Ok((g, l)) => (g, 0, u32::from(l)),
            Err(e) => (0, -e, 0),
        };
        let reply = Bell {
            magic: BELL_MAGIC,
            op: BellOp::Claim as u32,
            index,
            status,
            extra: [listener, 0, 0],
        };
        let _ = sys::send_with_fds(&self.io.conn, &reply.to_bytes(), &[]);
    }

    /// Reads what the program sent on its Unix socket ([`Bell`] messages)
    /// and says whether its end has closed.
    pub(in crate::host) fn read_conn(&mut self) -> bool {
        let mut b = [0u8; 64];
        loop {
            match sys::recv_with_fds(&self.io.conn, &mut b) {
                Ok(Some((0, _))) | Err(_) => return true,
                Ok(Some((n, fds))) => self.bell_message(&b[..n], fds),
                Ok(None) => return false,
            }
        }
    }

    /// Registers or forgets a waiter's doorbell. Anything else on the
    /// socket is ignored (its descriptors are closed when `fds` drops).
    pub(super) fn bell_message(&mut self, b: &[u8], fds: Vec<OwnedFd>) {
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
                let (status, index) = self.add_bell(fds);
                self.answer_bell(BellOp::Add, index, status);
            }
            Some(BellOp::Watch) => {
                let status = self.add_watch(m.index, fds);
                if status != 0 {
                    debug!(
                        session = self.id,
                        sock = m.index,
                        errno = status,
                        "watch refused"
                    );
                }
                self.answer_bell(BellOp::Watch, m.index, status);
            }
            Some(BellOp::Claim) => {
                let mut fds = fds.into_iter();
                match (fds.next(), fds.next()) {
                    (Some(fd), None) => self.io.claims.push(fd),
                    _ => self.answer_bell(BellOp::Claim, 0, errno::EINVAL),
                }
            }
            Some(BellOp::Remove) => {
                if let Some(b) = self.io.bells.get_mut(m.index as usize) {
                    *b = None;
                }
            }
            None => debug!(session = self.id, op = m.op, "unknown bell operation"),
        }
    }

    /// `BellOp::Add`: the one descriptor sent, an eventfd, becomes a waiter
    /// doorbell in the first free place. Returns the errno (0 for success)
    /// and the place.
    fn add_bell(&mut self, fds: Vec<OwnedFd>) -> (i32, u32) {
        let mut fds = fds.into_iter();
        let (Some(fd), None) = (fds.next(), fds.next()) else {
            return (errno::EINVAL, 0);
        };
        let Ok(bell) = EventFd::adopt(fd) else {
            return (errno::EINVAL, 0);
        };
        match self
            .io
            .bells
            .iter_mut()
            .enumerate()
            .find(|(_, b)| b.is_none())
        {
            Some((i, b)) => {
                *b = Some(bell);
                (0, i as u32)
            }
            None => (errno::ENOSPC, 0),
        }
    }

    /// `BellOp::Watch`: socket `index`'s connection is watched through the
    /// one descriptor sent (a Unix stream socket every holder shares).
    /// Returns the errno (0 for success).
    fn add_watch(&mut self, index: u32, fds: Vec<OwnedFd>) -> i32 {
        let mut fds = fds.into_iter();
        match (fds.next(), fds.next()) {
            (Some(fd), None) if !sys::is_unix_stream(&fd) => errno::EINVAL,
            (Some(fd), None) => match self.watch(index) {
                Ok(h) => {
                    self.io.new_watches.push((h, index, fd));
                    0
                }
                Err(e) => e,
            },
            _ => errno::EINVAL,
        }
    }

    /// Answers a bell message on the program's Unix socket.
    fn answer_bell(&self, op: BellOp, index: u32, status: i32) {
        let reply = Bell {
            magic: BELL_MAGIC,
            op: op as u32,
            index,
            status: -status,
            extra: [0; 3],
        };
        let _ = sys::send_with_fds(&self.io.conn, &reply.to_bytes(), &[]);
    }
}
