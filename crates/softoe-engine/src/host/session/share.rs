//! Connections more than one session holds at once: after `fork`, `exec`
//! or `SCM_RIGHTS`, every process that holds a kernel socket may read and
//! write it, concurrently — rsync's child only reads the connection while
//! its parent only writes it. Here, as on Linux, any holder may read next
//! and any may write.
//!
//! While a connection is *shared* no holder's receive ring is used: every
//! read is a posted buffer (`RECV`, with `RECV_NOWAIT` for a read that
//! must not wait), and the engine hands each byte to exactly one of them,
//! in order — the first served takes the next bytes — so no byte reaches
//! two readers and none is skipped. The slot says so (`EV_SHARED`) and
//! polls readable while bytes wait (`EV_HELD`). Sends need nothing new:
//! each holder's send goes to the stack as it comes, and what it holds
//! until acknowledged is counted in the connection's own stream positions
//! (the stack's count of bytes it has taken), not the socket's.
//!
//! Becoming shared, the first holder's ring may hold bytes its program
//! has not read: the engine takes them back — it copies them out and moves
//! the ring's head over them with a compare-and-swap, which a reader in
//! that program also uses, so a byte is either read from the ring or taken
//! back, never both — and they are read before anything the stack holds
//! (the connection's `prefix`). When all holders but one have closed and
//! the prefix is empty, the last goes back to its ring.

use std::collections::{BTreeSet, HashMap, VecDeque};

use softoe_abi::{Completion, EV_CONNECTED, EV_HUP, EV_SHARED, SlotView, SockKind, errno};
use softoe_stack::{SocketHandle, Stack};
use tracing::debug;

use super::close::Retiring;
use super::recv::detach_sink;
use super::sock::{HSock, Opts};
use super::{Program, Result, SessionCore};

/// The connections held by more than one socket, by stack handle.
pub(in crate::host) type Shares = HashMap<SocketHandle, SharedConn>;

/// A connection more than one socket (each in its own session) serves.
///
/// Its sends keep the order they were made in across sessions: a write
/// that returned (its bytes queued in the engine, waiting for window)
/// goes to the stack before any write another holder makes after it, as
/// a kernel socket's buffer keeps its writers' order. Each queued send
/// takes a ticket, and only the oldest ticket not yet wholly in the stack
/// may feed it; a send taken at once (not queued) waits while any is.
#[derive(Debug, Default)]
pub(in crate::host) struct SharedConn {
    /// The sockets that hold it now, detached ones whose queued sends are
    /// still going out included.
    pub(in crate::host) holders: u32,
    /// Bytes the first holder's ring held, unread, when the connection
    /// became shared: every reader takes these before the stack's.
    pub(in crate::host) prefix: VecDeque<u8>,
    /// The next ticket to give a queued send.
    next_ticket: u64,
    /// The oldest ticket whose send is not wholly in the stack.
    fed: u64,
    /// Tickets past `fed` whose sends are done already (given back
    /// unsent: a holder closed abortively).
    done: BTreeSet<u64>,
    /// `fed` moved since the host service last looked: the holders look
    /// at the connection again (the next ticket may be another's).
    pub(in crate::host) advanced: bool,
}

impl SharedConn {
    /// A ticket for a queued send.
    pub(super) fn ticket(&mut self) -> u64 {
        let t = self.next_ticket;
        self.next_ticket += 1;
        t
    }

    /// Whether the send with ticket `t` may go to the stack now.
    pub(super) fn turn(&self, t: u64) -> bool {
        t == self.fed
    }

    /// Whether `t` is the newest ticket given (a queued send may grow).
    pub(super) fn newest(&self, t: u64) -> bool {
        t + 1 == self.next_ticket
    }

    /// The send with ticket `t` is wholly in the stack, or gone.
    pub(super) fn done(&mut self, t: u64) {
        if t == self.fed {
            self.fed += 1;
            while self.done.remove(&self.fed) {
                self.fed += 1;
            }
        } else if t > self.fed {
            self.done.insert(t);
        }
        self.advanced = true;
    }

    /// No queued send of any holder waits.
    pub(super) fn idle(&self) -> bool {
        self.fed == self.next_ticket
    }
}

/// What a socket joining a connection takes over from a holder.
#[derive(Clone, Copy, Debug)]
pub(in crate::host) struct Joining {
    pub(super) h: SocketHandle,
    pub(super) stream: u64,
    pub(super) opts: Opts,
    pub(super) local: u64,
    pub(super) remote: u64,
}

impl Joining {
    /// The connection's stack handle.
    pub(in crate::host) fn h(&self) -> SocketHandle {
        self.h
    }
}

/// Most times the engine retries taking a ring's unread bytes back while
/// its program keeps moving the head; then it takes what it copied last
/// (a program that races its own head only loses its own bytes).
const TAKE_BACK_TRIES: usize = 64;

/// Takes the unread bytes of `s`'s receive ring back: copies them and
/// moves the slot's head to the tail with a compare-and-swap, retried
/// while the program's reader moves it first (it takes bytes with the
/// same compare-and-swap, so each byte is read or taken back, not both).
fn take_back_ring(region: softoe_abi::Region, view: &SlotView<'_>, s: &mut HSock) -> Vec<u8> {
    let tail = s.rx_tail;
    let mut out = Vec::new();
    for _ in 0..TAKE_BACK_TRIES {
        let raw = view.rx_head();
        let head = raw.clamp(s.rx_head, tail);
        out.resize((tail - head) as usize, 0);
        if !out.is_empty() && !region.ring_read(s.rx, head, &mut out) {
            out.clear();
        }
        if raw == tail || view.take_rx(raw, tail).is_ok() {
            s.rx_head = tail;
            return out;
        }
    }
    view.set_rx_head(tail);
    s.rx_head = tail;
    out
}

impl<P: Program> SessionCore<P> {
    /// Whether socket `id` is a connection its program uses now (not
    /// closed, not detached): one another session may join.
    pub(in crate::host) fn holds_live(&self, id: u32) -> bool {
        !self.dead
            && matches!(
                self.socks.get(id as usize),
                Some(Some(s)) if s.h.is_some()
                    && s.kind == SockKind::Tcp
                    && !s.is_listener()
                    && s.detached.is_none()
            )
    }

    /// Another session joins connection `id`: it becomes shared here (the
    /// ring's unread bytes taken back, returned for the connection's
    /// prefix; nothing if it was shared already), and the joiner gets
    /// what it continues from.
    pub(in crate::host) fn share_out(
        &mut self,
        stack: &mut Stack,
        id: u32,
        conn: &mut SharedConn,
    ) -> Result<(Joining, Vec<u8>)> {
        let region = self.region;
        let view = region.slot(id).ok_or(errno::ENOENT)?;
        let s = self
            .socks
            .get_mut(id as usize)
            .and_then(Option::as_mut)
            .ok_or(errno::ENOENT)?;
        let h = match s.h {
            Some(h) if s.is_tcp() && s.watched => h,
            _ => return Err(errno::EOPNOTSUPP),
        };
        let mut unread = Vec::new();
        if !s.is_shared_conn() {
            detach_sink(stack, h, s, &view);
            unread = take_back_ring(region, &view, s);
            // Its queued sends are the oldest: they go first.
            if let Some(t) = s.tcp_mut() {
                for q in &mut t.queued {
                    q.ticket = conn.ticket();
                }
                t.shared = true;
                t.hold = false;
            }
            s.rx_blocked = false;
            debug!(
                session = self.id,
                sock = id,
                unread = unread.len(),
                "connection shared with another session"
            );
        }
        let j = Joining {
            h,
            stream: s.stream(),
            opts: s.opts,
            local: view.local(),
            remote: view.remote(),
        };
        // Its slot says so before the joiner's program hears of the join.
        self.mark(id);
        Ok((j, unread))
    }

    /// Finishes an `ADOPT` that joins a connection: socket `id` serves it
    /// too, shared.
    pub(in crate::host) fn join_shared(&mut self, tag: u64, id: u32, j: Joining) {
        let region = self.region;
        let Some(Some(s)) = self.socks.get_mut(id as usize) else {
            return;
        };
        s.h = Some(j.h);
        s.watched = true;
        if let Some(t) = s.tcp_mut() {
            t.shared = true;
            t.stream = j.stream;
        }
        s.opts = j.opts;
        // Shared from the start: its program must not wait on the ring
        // (the serve this turn publishes the rest). Connected too, before
        // the completion: a joined connection is past its handshake, and
        // a program that took it asks for its peer at once (rsync's
        // daemon child's `getpeername` got ENOTCONN when it looked before
        // that serve; a failure the serve finds adds its bits then).
        let ev = EV_SHARED | EV_CONNECTED;
        s.events = ev;
        if let Some(v) = region.slot(id) {
            v.set_local(j.local);
            v.set_remote(j.remote);
            v.set_events(ev);
            v.bump_seq();
        }
        self.by_handle.insert(j.h, id);
        self.mark(id);
        debug!(session = self.id, sock = id, "joined a shared connection");
        self.complete(Completion {
            tag,
            result: i64::from(id),
            sock: id,
            aux: j.remote,
            ..Completion::default()
        });
    }

    /// Socket `id` stops serving its connection, which other sockets still
    /// hold: nothing changes for the connection; what this socket sent
    /// stays held until acknowledged (then `tag`, the close, is answered).
    pub(super) fn retire_share(
        &mut self,
        id: u32,
        tag: Option<u64>,
        conn: Option<&mut SharedConn>,
    ) {
        // Queued zero-copy buffers the stack never took come back (an
        // abortive close; a graceful one drained them first).
        self.unqueue(id, errno::ECANCELED, conn);
        let Some(mut s) = self.socks.get_mut(id as usize).and_then(Option::take) else {
            return;
        };
        self.count(Some(&s), -1);
        self.ids.clear(id);
        let Some(h) = s.h else {
            return;
        };
        if let Some(v) = self.region.slot(id) {
            v.set_events(EV_HUP);
            v.bump_seq();
        }
        let (posted, connect) = s.take_waits();
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
        self.by_handle.remove(&h);
        let zerocopy = s.held_zerocopy();
        self.retire(
            h,
            Retiring {
                id,
                stream: s.stream(),
                close_tag: tag,
                zerocopy,
                copy: s.copy.into_iter().collect(),
            },
            true,
        );
        self.unshared_conns.push(h);
        debug!(session = self.id, sock = id, "left a shared connection");
    }
}
