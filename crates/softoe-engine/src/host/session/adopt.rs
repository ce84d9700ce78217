//! Moving connections between sessions (`ADOPT`, watches across `fork`)
//! and sharing listeners.

use softoe_abi::{Completion, EV_HUP, EV_MOVED, EV_RDHUP, EV_READABLE, SockKind, errno, pack_addr};
use softoe_stack::{Endpoint, Instant, SocketHandle, Stack};
use tracing::debug;

use super::close::Retiring;
use super::recv::detach_sink;
use super::sock::{Hold, Opts, Role};
use super::{Program, Result, SessionCore};

/// A connection leaving one session for another (`ADOPT`).
#[derive(Debug)]
pub(in crate::host) struct Moving {
    pub(super) h: SocketHandle,
    /// Bytes in the old receive ring the program had not read.
    pub(super) unread: Vec<u8>,
    pub(super) rx_fin: bool,
    /// Bytes handed to the stack so far (where the new socket's count
    /// goes on).
    pub(super) stream: u64,
    pub(super) opts: Opts,
    pub(super) local: u64,
    pub(super) remote: u64,
}

impl Moving {
    /// The connection's stack handle.
    pub(in crate::host) fn h(&self) -> SocketHandle {
        self.h
    }
}

/// An `ADOPT` as the host service resolves it.
#[derive(Clone, Copy, Debug)]
pub(in crate::host) struct Adopt {
    pub from_session: u32,
    pub from_sock: u32,
    pub secret: [u64; 2],
}

impl<P: Program> SessionCore<P> {
    /// Marks connection `id` watched; its stack handle.
    pub(super) fn watch(&mut self, id: u32) -> Result<SocketHandle> {
        let s = self.sock(id)?;
        if s.kind != SockKind::Tcp || s.role.is_listener() {
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
    pub(in crate::host) fn watch_gone(&mut self, now: Instant, stack: &mut Stack, h: SocketHandle) {
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

    /// Whether `secret` is this session's.
    pub(in crate::host) fn secret_is(&self, secret: [u64; 2]) -> bool {
        // Compared in full, not stopping at the first difference.
        let mine = self.region.secret();
        ((mine[0] ^ secret[0]) | (mine[1] ^ secret[1])) == 0
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
            Some(h) if s.role.is_listener() => {
                s.role = Role::Listener { shared: true };
                Ok((h, s.bound))
            }
            _ => Err(errno::EOPNOTSUPP),
        }
    }

    /// Finishes an `ADOPT`: socket `id` becomes a share of listener `h`,
    /// or goes again with `err`.
    pub(in crate::host) fn finish_adopt(
        &mut self,
        tag: u64,
        id: u32,
        r: Result<(SocketHandle, Option<Endpoint>)>,
    ) {
        match r {
            Ok((h, bound)) => {
                if let Some(Some(s)) = self.socks.get_mut(id as usize) {
                    s.h = Some(h);
                    s.role = Role::Listener { shared: true };
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
    pub(in crate::host) fn adoptable(&self, id: u32) -> Result<bool> {
        let s = self
            .socks
            .get(id as usize)
            .and_then(Option::as_ref)
            .ok_or(errno::ENOENT)?;
        match s.h {
            Some(_) if s.role.is_listener() => Ok(true),
            Some(_) if s.kind == SockKind::Tcp && s.watched && s.role == Role::Open => Ok(false),
            _ => Err(errno::EOPNOTSUPP),
        }
    }

    /// The connection socket `id` gave up to another session (`ADOPT`),
    /// for an `ADOPT` naming it: a holder of the connection follows it to
    /// wherever it lives now (sshd's monitor hands it to one child, then to
    /// the next).
    pub(in crate::host) fn moved_to(&self, id: u32) -> Option<SocketHandle> {
        self.socks
            .get(id as usize)
            .and_then(Option::as_ref)
            .and_then(|s| s.role.moved())
    }

    /// The socket that serves connection `h` here.
    pub(in crate::host) fn sock_of(&self, h: SocketHandle) -> Option<u32> {
        self.by_handle.get(&h).copied()
    }

    /// The receive ring of socket `id` reserved by an `ADOPT`: its length.
    pub(in crate::host) fn rx_room(&self, id: u32) -> u64 {
        self.socks
            .get(id as usize)
            .and_then(Option::as_ref)
            .map_or(0, |s| s.rx.len)
    }

    /// Gives connection `id` up to another session (`ADOPT`): its unread
    /// bytes go along (at most `room`, or `ENOBUFS` and nothing changes);
    /// what it sent stays held here until acknowledged, and the program's
    /// socket reads as closed from now on.
    pub(in crate::host) fn take_stream(
        &mut self,
        stack: &mut Stack,
        id: u32,
        room: u64,
    ) -> Result<Moving> {
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
            Some(h) if s.kind == SockKind::Tcp && s.role == Role::Open && s.watched => h,
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
        // What the stack wrote into the ring goes along with the rest; the
        // ring is this program's and stays behind.
        detach_sink(stack, h, s, &view);
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
            s.role = Role::Moved(h);
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
    pub(in crate::host) fn finish_adopt_stream(
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
        let data = self.mem;
        self.serve(stack, id, scratch, data);
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

    /// No other session shares listener `h` any more: closing it here
    /// closes it in the stack.
    pub(in crate::host) fn unshare(&mut self, h: SocketHandle) {
        if let Some(&id) = self.by_handle.get(&h)
            && let Some(Some(s)) = self.socks.get_mut(id as usize)
            && let Role::Listener { shared } = &mut s.role
        {
            *shared = false;
        }
    }

    /// Whether this session holds a socket on stack handle `h`.
    pub(in crate::host) fn holds(&self, h: SocketHandle) -> bool {
        self.by_handle.contains_key(&h)
    }
}
