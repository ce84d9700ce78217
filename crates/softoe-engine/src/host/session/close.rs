//! Closing sockets, and the end of a session: what a closed socket holds
//! until the stack lets it go.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use softoe_abi::{Completion, EV_HUP, SESSION_CLOSED, errno};
use softoe_stack::{Instant, SocketHandle, Stack, State};
use tracing::debug;

use super::recv::detach_sink;
use super::share::Shares;
use super::sock::{Detached, Posted};
use super::{Ctx, Program, SessionCore};

/// A closed socket the stack is still finishing: what to release when it
/// reports `RELEASED`.
#[derive(Debug)]
pub(super) struct Retiring {
    pub(super) id: u32,
    /// Bytes handed to the stack: when all are acknowledged, the stack holds
    /// no reference into the region any more.
    pub(super) stream: u64,
    pub(super) close_tag: Option<u64>,
    pub(super) zerocopy: Vec<(u64, u64)>,
    /// Engine copy rings (more than one when a socket of this session on
    /// the same connection retired before: a shared connection left, taken
    /// again, left again).
    pub(super) copy: Vec<(u32, u64)>,
}

/// Whether closed or moved connection `h` (its `Retiring` entry `r`) no
/// longer needs the region: it handed the stack nothing, or the peer
/// acknowledged all of it, or the stack let the connection go or holds it
/// only in TIME-WAIT (or it is closed).
fn all_acked(stack: &Stack, h: SocketHandle, r: &Retiring) -> bool {
    r.stream == 0
        || stack.tcp_acked(h).map_or(true, |a| a >= r.stream)
        || stack
            .tcp_state(h)
            .is_ok_and(|st| matches!(st, State::Closed | State::TimeWait))
}

impl<P: Program> SessionCore<P> {
    /// The program has gone (its end of the Unix socket closed). What it
    /// posted before it went is carried out first: its writes returned, so
    /// their bytes are the stack's to send, as the kernel sends a socket
    /// buffer at exit. Then its sockets close as [`Session::end`] says.
    pub(in crate::host) fn exit(&mut self, cx: &mut Ctx<'_>) {
        // Nobody reads completions any more: none is kept back for it.
        self.dead = true;
        self.overflow.clear();
        // What is there now, no more: another process mapping the region
        // (a child that inherited it) cannot keep the engine here.
        let now_there = self.cmds.available().unwrap_or(0) as usize;
        match self.run_commands(cx, now_there) {
            Ok(0) => {}
            Ok(n) => debug!(session = self.id, commands = n, "carried out at exit"),
            Err(e) => debug!(session = self.id, error = %e, "command ring broken at exit"),
        }
        self.end(cx.now, cx.stack, cx.owner, cx.shares);
    }

    /// The program has gone: close its sockets as the kernel does at exit
    /// (FIN after what they still had to send, or RST where data was left
    /// unread).
    pub(in crate::host) fn end(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        owner: &mut HashMap<SocketHandle, usize>,
        shares: &mut Shares,
    ) {
        self.dead = true;
        // The clock now, not the turn's: on a loaded machine the engine
        // may have been descheduled since the turn began.
        self.gone_at.get_or_insert_with(std::time::Instant::now);
        self.region
            .engine_state()
            .store(SESSION_CLOSED, Ordering::Release);
        let mine: Vec<SocketHandle> = self.by_handle.keys().copied().collect();
        for id in 0..self.socks.len() as u32 {
            self.close_sock(now, stack, shares, id, None, false);
        }
        self.overflow.clear();
        // Only this session's own handles go: the map is every session's
        // (dropping the others' once made every exit stall every other
        // program — their stack events no longer reached them).
        for h in mine {
            if !self.retiring.contains_key(&h)
                && !self.unshared.contains(&h)
                && !self.unshared_conns.contains(&h)
                && !self.by_handle.contains_key(&h)
            {
                owner.remove(&h);
            }
        }
    }

    /// Dead, and the stack holds no reference into its region: every
    /// closed socket is gone or has had all its bytes acknowledged (a
    /// socket in TIME-WAIT needs nothing of the program).
    ///
    /// The host service asks every session about once a millisecond (its
    /// `look`), so this costs no walk of the socket table: the table is
    /// empty when its count (`open_n`, kept by `occupy`, `forget` and
    /// `close_sock`) is 0, and only the connections in `acking` can still
    /// be waiting — every `Retiring` with bytes handed to the stack is
    /// listed there when it is made (`close_sock`, `take_stream`) and
    /// leaves the list only with its entry (`moved_acked`); the others
    /// (listeners, UDP, connections that sent nothing) wait for nothing.
    /// `acking` is pruned every step, so it holds only those still
    /// unacknowledged at the last one; they are asked afresh here, as the
    /// walk of every closed socket asked them, and the first still waiting
    /// ends the question: one look at the stack, plus one per connection
    /// acknowledged since the last step.
    pub(in crate::host) fn finished(&self, stack: &Stack) -> bool {
        self.dead
            // Detached connections wait for another process or the last
            // descriptor; the region holds their unread bytes.
            && self.open_n == 0
            && self
                .acking
                .iter()
                .all(|h| self.retiring.get(h).is_none_or(|r| all_acked(stack, *h, r)))
    }

    /// Closed or moved connections whose bytes are all acknowledged release
    /// what they held here.
    pub(super) fn moved_acked(&mut self, stack: &Stack) {
        let mut i = 0;
        while i < self.acking.len() {
            let h = self.acking[i];
            let done = self.retiring.get(&h).is_none_or(|r| all_acked(stack, h, r));
            if !done {
                i += 1;
                continue;
            }
            self.acking.swap_remove(i);
            if let Some(r) = self.retiring.remove(&h) {
                self.release(r);
            }
        }
    }

    /// Closed connections whose queued buffers have all gone to the stack
    /// close now (unless other processes still hold them: a watch).
    pub(super) fn drained(&mut self, now: Instant, stack: &mut Stack, shares: &mut Shares) {
        let mut i = 0;
        while i < self.draining.len() {
            let id = self.draining[i];
            let done = match self.socks.get_mut(id as usize).and_then(Option::as_mut) {
                Some(s)
                    if s.detached.is_some()
                        && s.queue_empty()
                        && let Some(h) = s.h
                        && let Some(c) = shares.get_mut(&h)
                        && c.holders > 1 =>
                {
                    // Sent: the share goes, the connection stays with the
                    // others.
                    c.holders -= 1;
                    let tag = s.detached.take().and_then(|d| d.tag);
                    self.detached_n = self.detached_n.saturating_sub(1);
                    self.draining.swap_remove(i);
                    self.retire_share(id, tag, Some(c));
                    continue;
                }
                Some(s) if s.detached.is_some() && s.queue_empty() => {
                    if s.watched {
                        // The watch decides when it closes.
                        None
                    } else {
                        self.detached_n = self.detached_n.saturating_sub(1);
                        s.detached.take()
                    }
                }
                Some(s) if s.detached.is_some() => {
                    i += 1;
                    continue;
                }
                _ => None,
            };
            self.draining.swap_remove(i);
            if let Some(d) = done {
                self.close_sock(now, stack, shares, id, d.tag, d.abort);
            }
        }
    }

    pub(super) fn release(&mut self, r: Retiring) {
        for (tag, len) in r.zerocopy {
            self.complete_release(tag, r.id, len as i64);
        }
        self.free_copy.extend(r.copy);
        if let Some(tag) = r.close_tag {
            self.complete_release(tag, r.id, 0);
        }
    }

    /// Connection `h` retires here: what `r` holds goes back once the peer
    /// acknowledged every byte handed to the stack. A socket of this
    /// session that retired from the same connection before (a shared
    /// connection left, joined again and left again) is merged in: both
    /// wait for the later of their streams, and both close answers come.
    pub(super) fn retire(&mut self, h: SocketHandle, mut r: Retiring, tcp: bool) {
        if let Some(old) = self.retiring.remove(&h) {
            r.stream = r.stream.max(old.stream);
            r.zerocopy.extend(old.zerocopy);
            r.copy.extend(old.copy);
            match (r.close_tag, old.close_tag) {
                (None, t) => r.close_tag = t,
                (Some(_), Some(t)) => self.complete_release(t, old.id, 0),
                (Some(_), None) => {}
            }
        }
        self.retiring.insert(h, r);
        if tcp && !self.acking.contains(&h) {
            // Its buffers and rings come back once the peer acknowledged
            // everything (a minute of TIME-WAIT needs none of them).
            self.acking.push(h);
        }
    }

    /// Closes socket `id` for the program (or because it died).
    pub(super) fn close_sock(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        shares: &mut Shares,
        id: u32,
        tag: Option<u64>,
        abort: bool,
    ) {
        let Some(cur) = self.socks.get_mut(id as usize).and_then(Option::as_mut) else {
            return;
        };
        if cur.detached.is_some() {
            // Closed already; it ends with its watch or its adoption.
            return;
        }
        // Queued sends go out before the FIN, as a kernel socket's send
        // buffer does at close, a dead program's too (the region they lie
        // in stays mapped until its session is reclaimed).
        let drain = !abort && !cur.queue_empty() && cur.h.is_some();
        if !drain && self.leave_share(shares, id, tag) {
            return;
        }
        if self.detach_closed(stack, id, tag, abort, drain) {
            return;
        }
        // Queued zero-copy buffers the stack never took whole come back.
        let gate = self
            .socks
            .get(id as usize)
            .and_then(Option::as_ref)
            .and_then(|s| s.h)
            .and_then(|h| shares.get_mut(&h));
        self.unqueue(id, errno::EPIPE, gate);
        self.remove_closed(now, stack, id, tag, abort);
    }

    /// A connection other sockets hold too: only this socket's hold on it
    /// goes, as closing one process's descriptor of a kernel socket others
    /// hold closes nothing. Returns whether that was all.
    fn leave_share(&mut self, shares: &mut Shares, id: u32, tag: Option<u64>) -> bool {
        let h = self
            .socks
            .get(id as usize)
            .and_then(Option::as_ref)
            .and_then(|s| s.h);
        if let Some(h) = h
            && let Some(c) = shares.get_mut(&h)
            && c.holders > 1
        {
            c.holders -= 1;
            self.retire_share(id, tag, Some(c));
            return true;
        }
        false
    }

    /// Keeps a closed socket, detached, while it must live on: a listener
    /// or connection this session alone has that is watched (other
    /// processes hold its descriptor), or a connection whose queued sends
    /// still go out (`drain`). A listener others share closes here only.
    /// Returns whether it was kept.
    fn detach_closed(
        &mut self,
        stack: &mut Stack,
        id: u32,
        tag: Option<u64>,
        abort: bool,
        drain: bool,
    ) -> bool {
        let Some(cur) = self.socks.get_mut(id as usize).and_then(Option::as_mut) else {
            return false;
        };
        let shared_listener = cur.is_shared_listener();
        let detach = ((cur.watched && !shared_listener) || drain) && cur.h.is_some();
        if drain {
            self.draining.push(id);
            if !cur.watched
                && let Some(h) = cur.h
            {
                // No descriptor names it any more: an orphan while its
                // queue drains, given up if the peer never takes it.
                let _ = stack.tcp_orphan(h);
            }
        }
        if !detach {
            return false;
        }
        cur.detached = Some(Detached { tag, abort });
        let (posted, connect) = cur.take_waits();
        self.detached_n += 1;
        // Other processes may hold it still (a `fork`), or queued buffers
        // are still going out: it lives on until one takes it, the last
        // descriptor closes, or the queue is sent.
        debug!(
            session = self.id,
            sock = id,
            "close of a watched or draining connection: detached"
        );
        self.cancel_waits(id, posted, connect);
        true
    }

    /// A posted receive (its buffer is the program's again) and a connect
    /// still waiting are answered at close.
    fn cancel_waits(&mut self, id: u32, posted: Option<Posted>, connect: Option<u64>) {
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
    }

    /// Socket `id` leaves the table: its slot hangs up, its waits are
    /// answered, and its stack socket closes (a shared listener's share
    /// only), what it holds retiring until the peer acknowledged it.
    fn remove_closed(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        id: u32,
        tag: Option<u64>,
        abort: bool,
    ) {
        // Counted out as it goes (the figures `softoe stat` shows).
        let Some(mut s) = self.socks.get_mut(id as usize).and_then(Option::take) else {
            return;
        };
        // The ring's memory is the program's again: the stack stops
        // writing there.
        if let (Some(h), Some(v)) = (s.h, self.region.slot(id)) {
            detach_sink(stack, h, &mut s, &v);
        }
        self.count(Some(&s), -1);
        self.ids.clear(id);
        if let Some(v) = self.region.slot(id) {
            v.set_events(EV_HUP);
        }
        let (posted, connect) = s.take_waits();
        self.cancel_waits(id, posted, connect);
        let Some(h) = s.h else {
            if let Some(c) = s.copy {
                self.free_copy.push(c);
            }
            if let Some(t) = tag {
                self.complete_release(t, id, 0);
            }
            return;
        };
        self.by_handle.remove(&h);
        if s.is_shared_listener() {
            // Other sessions listen on it still: only this share goes.
            self.unshared.push(h);
            if let Some(t) = tag {
                self.complete_release(t, id, 0);
            }
            return;
        }
        if abort && s.is_tcp() {
            let _ = stack.tcp_abort(h);
        }
        let _ = stack.close(now, h);
        let zerocopy = s.held_zerocopy();
        let tcp = s.is_tcp();
        self.retire(
            h,
            Retiring {
                id,
                stream: s.stream(),
                close_tag: tag,
                zerocopy,
                copy: s.copy.into_iter().collect(),
            },
            tcp,
        );
    }
}
