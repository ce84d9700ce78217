//! Moving connections between sessions (`ADOPT`, watches across `fork`)
//! and sharing listeners.

use softoe_abi::{Completion, SockKind, errno, pack_addr};
use softoe_stack::{Endpoint, Instant, SocketHandle, Stack};
use tracing::debug;

use super::share::{SharedConn, Shares};
use super::{Program, Result, SessionCore};

/// An `ADOPT` as the host service resolves it.
#[derive(Clone, Copy, Debug)]
pub(in crate::host) struct Adopt {
    /// What the session's claim was granted ([`softoe_abi::BellOp::Claim`]).
    pub grant: u32,
}

impl<P: Program> SessionCore<P> {
    /// Marks connection or listener `id` watched; its stack handle.
    pub(super) fn watch(&mut self, id: u32) -> Result<SocketHandle> {
        let s = self.sock(id)?;
        if s.kind != SockKind::Tcp {
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
    pub(in crate::host) fn unwatch(&mut self, h: SocketHandle) {
        if let Some(&id) = self.by_handle.get(&h)
            && let Some(Some(s)) = self.socks.get_mut(id as usize)
        {
            s.watched = false;
        }
    }

    /// Every descriptor of connection `h` has closed, in every process:
    /// a detached socket closes now; an open one closes at its `CLOSE`
    /// (which must be on its way: no process can name it any more).
    pub(in crate::host) fn watch_gone(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        shares: &mut Shares,
        h: SocketHandle,
    ) {
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
            self.close_sock(now, stack, shares, id, d.tag, d.abort);
        }
    }

    /// The listener behind socket `id`, marked shared from now on: its
    /// handle and address.
    pub(in crate::host) fn share_listener(
        &mut self,
        id: u32,
    ) -> Result<(SocketHandle, Option<Endpoint>)> {
        let s = self
            .socks
            .get_mut(id as usize)
            .and_then(Option::as_mut)
            .ok_or(errno::ENOENT)?;
        match s.h {
            Some(h) if s.is_listener() => {
                s.become_listener(true);
                Ok((h, s.bound))
            }
            _ => Err(errno::EOPNOTSUPP),
        }
    }

    /// Finishes an `ADOPT`: socket `id` becomes a share of listener `h`
    /// (`watched`: a watch counts its descriptors), or goes again with
    /// `err`.
    pub(in crate::host) fn finish_adopt(
        &mut self,
        tag: u64,
        id: u32,
        r: Result<(SocketHandle, Option<Endpoint>)>,
        watched: bool,
    ) {
        match r {
            Ok((h, bound)) => {
                if let Some(Some(s)) = self.socks.get_mut(id as usize) {
                    s.h = Some(h);
                    s.become_listener(true);
                    s.bound = bound;
                    // Processes hold its descriptor (its watch's): closed
                    // here last, it is kept for them, as its first
                    // holder's would be.
                    s.watched = watched;
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

    /// The socket that serves connection `h` here.
    pub(in crate::host) fn sock_of(&self, h: SocketHandle) -> Option<u32> {
        self.by_handle.get(&h).copied()
    }

    /// Whether socket `id` is a listener (one whose descriptor is watched
    /// names a listener, not a connection).
    pub(in crate::host) fn is_listener(&self, id: u32) -> bool {
        matches!(self.socks.get(id as usize), Some(Some(s)) if s.is_listener())
    }

    /// Whether listener `id` is one its program uses now (not closed, not
    /// detached, the session alive).
    pub(in crate::host) fn listener_live(&self, id: u32) -> bool {
        !self.dead
            && matches!(
                self.socks.get(id as usize),
                Some(Some(s)) if s.is_listener() && s.detached.is_none()
            )
    }

    /// Gives up listener `id`, which its program closed (detached: kept
    /// for another process's descriptor), now that another session shares
    /// it: this share goes, the others keep listening.
    pub(in crate::host) fn give_up_listener(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        shares: &mut Shares,
        id: u32,
    ) {
        let d = match self.socks.get_mut(id as usize).and_then(Option::as_mut) {
            Some(s) if s.is_shared_listener() => match s.detached.take() {
                Some(d) => d,
                None => return,
            },
            _ => return,
        };
        self.detached_n = self.detached_n.saturating_sub(1);
        self.close_sock(now, stack, shares, id, d.tag, false);
    }

    /// Whether the program has posted commands the engine has not read.
    pub(in crate::host) fn pending_commands(&mut self) -> bool {
        !self.dead && self.cmds.available().unwrap_or(0) > 0
    }

    /// Whether socket `id` was closed with queued sends still going to the
    /// stack.
    pub(in crate::host) fn draining(&self, id: u32) -> bool {
        matches!(
            self.socks.get(id as usize),
            Some(Some(s)) if s.detached.is_some() && !s.queue_empty()
        )
    }

    /// Gives up socket `id`'s hold on its connection if its program closed
    /// it (detached) and it has nothing left to send: another session took
    /// the connection, and its descriptor keeps it alive now. Whether it
    /// did.
    pub(in crate::host) fn give_up_detached(&mut self, id: u32, conn: &mut SharedConn) -> bool {
        let tag = match self.socks.get_mut(id as usize).and_then(Option::as_mut) {
            Some(s) if s.queue_empty() => match s.detached {
                Some(d) => d.tag,
                None => return false,
            },
            _ => return false,
        };
        self.retire_share(id, tag, Some(conn));
        true
    }

    /// No other session shares listener `h` any more: closing it here
    /// closes it in the stack.
    pub(in crate::host) fn unshare(&mut self, h: SocketHandle) {
        if let Some(&id) = self.by_handle.get(&h)
            && let Some(Some(s)) = self.socks.get_mut(id as usize)
            && let Some(l) = s.listener_mut()
        {
            l.shared = false;
        }
    }

    /// Whether this session holds a socket on stack handle `h`.
    pub(in crate::host) fn holds(&self, h: SocketHandle) -> bool {
        self.by_handle.contains_key(&h)
    }
}
