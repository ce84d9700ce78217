//! The outer layer: the session's descriptors (its Unix socket, its
//! waiters' doorbells) and the kernel's randomness.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use softoe_abi::{BELL_MAGIC, Bell, BellOp, errno};
use tracing::debug;

use super::*;
use crate::host::sys::{self, EventFd};

/// 128 random bits from the kernel.
pub(super) fn secret() -> io::Result<[u64; 2]> {
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

impl Session {
    /// What the program gets: the region, the engine's doorbell, its own.
    pub(in crate::host) fn fds(&self) -> [RawFd; 3] {
        [
            self._memfd.as_raw_fd(),
            self.bell_engine.raw(),
            self.bell_app.raw(),
        ]
    }

    pub(in crate::host) fn conn_fd(&self) -> RawFd {
        self.conn.as_raw_fd()
    }

    /// Reads what the program sent on its Unix socket ([`Bell`] messages)
    /// and says whether its end has closed.
    pub(in crate::host) fn read_conn(&mut self) -> bool {
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
}
