//! Receive and placement: bytes from the stack into the ring or a posted
//! buffer, acknowledgements released, readiness published.

use std::collections::VecDeque;
use std::mem::offset_of;

use softoe_abi::{
    CMP_RELEASE, Completion, EV_WRITABLE, RecvTarget, Region, RingSpan, SlotView, SockKind,
    UdpHeader, errno,
};
use softoe_stack::{Events, RecvError, RxRing, SocketHandle, Stack, State, TcpError};
use tracing::trace;

use super::ready::{Facts, TcpFacts, readiness};
use super::send::feed_queued;
use super::share::{SharedConn, Shares};
use super::sock::{HSock, Hold, Posted, Proto};
use super::translate::{packed, tcp_errno};
use super::wake::publish;
use super::{Program, SessionCore};

/// What became of a posted receive this turn.
pub(super) enum Placed {
    /// The stack has nothing for it yet.
    Nothing,
    /// It completes with this result: bytes placed, 0 at the end of the
    /// stream, or `-errno`.
    Done(i64),
}

/// Moves what the stack holds for `h` into the posted buffer `p`: the
/// engine writes the program's memory itself (through `io`: for another
/// process `process_vm_writev`; or the data area), so the program's core
/// copies nothing. A shared connection's `prefix` (bytes taken back from a
/// ring) comes first. With `p.peek` nothing is consumed.
pub(super) fn place(
    stack: &mut Stack,
    h: SocketHandle,
    p: &Posted,
    io: &mut impl Program,
    region: Region,
    prefix: Option<&mut VecDeque<u8>>,
) -> Placed {
    let mut fault = None;
    let mut put = |a: &[u8], b: &[u8]| -> usize {
        let want = p.len as usize;
        let n1 = a.len().min(want);
        let n2 = b.len().min(want - n1);
        let (a, b) = (&a[..n1], &b[..n2]);
        match p.target {
            RecvTarget::Region { offset } => {
                // The buffer as a ring that never wraps: `n1 + n2 ≤ len`.
                let buf = RingSpan { offset, len: p.len };
                region.ring_write(buf, 0, a);
                region.ring_write(buf, n1 as u64, b);
                n1 + n2
            }
            RecvTarget::Remote { addr } => match io.write(addr, a, b) {
                Ok(n) => n,
                Err(e) => {
                    fault = Some(e);
                    0
                }
            },
        }
    };
    if let Some(pre) = prefix
        && !pre.is_empty()
    {
        let (a, b) = pre.as_slices();
        let n = put(a, b);
        if !p.peek {
            pre.drain(..n);
        }
        return match (n, fault) {
            (0, Some(e)) => Placed::Done(-i64::from(e)),
            (0, None) => Placed::Nothing,
            (n, _) => Placed::Done(n as i64),
        };
    }
    let r = stack.tcp_recv_with(h, |a, b| {
        let n = put(a, b);
        (if p.peek { 0 } else { n }, n)
    });
    match r {
        Ok(0) => match fault {
            Some(e) => Placed::Done(-i64::from(e)),
            None => Placed::Nothing,
        },
        Ok(n) => Placed::Done(n as i64),
        // The peer finished: the end of the stream, read as 0 (the ring's
        // reader learns it from EV_RDHUP as before).
        Err(RecvError::Finished) => Placed::Done(0),
        Err(RecvError::Failed(e)) => Placed::Done(-i64::from(tcp_errno(e))),
        Err(_) => Placed::Nothing,
    }
}

/// Whether the stack may write into `s`'s ring now: not while a posted
/// buffer waits (its bytes would overtake the ring's) nor while the bytes
/// after a placed read are held for the next post.
pub(super) fn sink_open(s: &HSock) -> bool {
    s.tcp().is_none_or(|t| t.posted.is_none() && !t.hold)
}

/// Lets the stack write connection `h`'s in-order bytes straight into
/// `s`'s receive ring (in `data`, the data area's `Memory` region), from
/// its tail on: the engine's copy from the stack's buffer into the ring
/// goes, and with it the stack's own copy, for every byte that finds the
/// stack's buffer empty.
pub(super) fn attach_sink(stack: &mut Stack, h: SocketHandle, s: &mut HSock, data: u32) {
    if s.sinks() || !s.is_tcp() || s.rx.len == 0 {
        return;
    }
    let ring = RxRing {
        region: data,
        offset: s.rx.offset,
        len: s.rx.len,
    };
    if stack.tcp_set_rx_sink(h, Some((ring, s.rx_tail))).is_ok() {
        s.set_sink(true);
        let _ = stack.tcp_rx_sink_sync(h, s.rx_head, 0, sink_open(s));
    }
}

/// Brings `s`'s ring up to date with the stack: the program read up to
/// `s.rx_head`, the engine itself wrote `wrote` more bytes at the tail,
/// and the stack may write there from now on if `open` (as a rule
/// [`sink_open`]). `rx_tail` (and the slot's) moves to what was written;
/// returns whether it moved.
pub(super) fn sync_sink(
    stack: &mut Stack,
    h: SocketHandle,
    s: &mut HSock,
    view: &SlotView<'_>,
    wrote: u64,
    open: bool,
) -> bool {
    if !s.sinks() {
        s.rx_tail += wrote;
        if wrote > 0 {
            view.set_rx_tail(s.rx_tail);
        }
        return wrote > 0;
    }
    match stack.tcp_rx_sink_sync(h, s.rx_head, wrote, open) {
        Ok(Some(tail)) if tail != s.rx_tail => {
            s.rx_tail = tail;
            view.set_rx_tail(tail);
            true
        }
        Ok(Some(_)) => false,
        // The stack dropped the ring (it could not write there): what
        // it holds comes through its buffer again.
        _ => {
            s.set_sink(false);
            s.rx_tail += wrote;
            if wrote > 0 {
                view.set_rx_tail(s.rx_tail);
            }
            wrote > 0
        }
    }
}

/// Takes the ring away from the stack (the socket closes or moves, or its
/// memory goes), after taking in what it wrote there.
pub(super) fn detach_sink(stack: &mut Stack, h: SocketHandle, s: &mut HSock, view: &SlotView<'_>) {
    if s.sinks() {
        sync_sink(stack, h, s, view, 0, false);
        let _ = stack.tcp_set_rx_sink(h, None);
        s.set_sink(false);
    }
}

/// `h` as it lies in memory (`#[repr(C)]`, native byte order, reserved
/// words zero): the bytes the program's reader takes it back from.
pub(super) fn udp_header_bytes(h: &UdpHeader) -> [u8; size_of::<UdpHeader>()] {
    let mut b = [0; size_of::<UdpHeader>()];
    let fields: [(usize, &[u8]); 3] = [
        (offset_of!(UdpHeader, len), &h.len.to_ne_bytes()),
        (offset_of!(UdpHeader, port), &h.port.to_ne_bytes()),
        (offset_of!(UdpHeader, addr), &h.addr.to_ne_bytes()),
    ];
    for (at, bytes) in fields {
        if let Some(d) = b.get_mut(at..at + bytes.len()) {
            d.copy_from_slice(bytes);
        }
    }
    b
}

/// Takes the datagrams the stack holds for UDP socket `h` into `s`'s
/// ring, each behind its header, while they fit whole; returns whether
/// any came.
fn fill_udp(
    stack: &mut Stack,
    h: SocketHandle,
    s: &mut HSock,
    region: Region,
    view: &SlotView<'_>,
    scratch: &mut Vec<u8>,
) -> bool {
    let mut moved = false;
    loop {
        let free = s.rx.len - (s.rx_tail - s.rx_head);
        scratch.resize(65_536, 0);
        // A datagram is taken only when it fits whole; one that does
        // not waits in the stack's queue until the program reads,
        // and what overflows that queue is dropped and counted
        // there (`udp_drops`, Linux's `RcvbufErrors`).
        let Ok(Some(len)) = stack.udp_peek_len(h) else {
            break;
        };
        if UdpHeader::footprint(len.min(scratch.len()) as u32) > free {
            s.rx_blocked = true;
            break;
        }
        let Ok(Some((n, from))) = stack.udp_recv_from(h, scratch) else {
            break;
        };
        let n = n.min(scratch.len());
        let need = UdpHeader::footprint(n as u32);
        let hdr = UdpHeader {
            len: n as u32,
            port: from.port,
            addr: from.addr.to_bits().to_be(),
            ..UdpHeader::default()
        };
        let hb = udp_header_bytes(&hdr);
        region.ring_write(s.rx, s.rx_tail, &hb);
        region.ring_write(s.rx, s.rx_tail + hb.len() as u64, &scratch[..n]);
        s.rx_tail += need;
        moved = true;
    }
    if moved {
        view.set_rx_tail(s.rx_tail);
    }
    moved
}

/// Whether a TCP socket's blocked writer should be woken now, its events
/// having gone from `before` to `ev`: when half its ring is free again (or
/// all of it, or something else changed), not at every ACK: as Linux
/// wakes a writer when a third of its buffer is free, so that it writes a
/// run of buffers per sleep instead of one (a sleep and a wake-up per
/// 64 KiB write were most of a bulk sender's CPU).
fn writer_wake(s: &HSock, before: u32, ev: u32) -> bool {
    let ring = match s.copy {
        Some((_, l)) => l,
        None => s.tx.len,
    };
    let news = (before ^ ev) & !EV_WRITABLE != 0;
    news || s.tcp().is_none_or(|t| t.holds.is_empty()) || s.tx_freed >= (ring / 2).max(1)
}

/// One TCP connection's serve: what its steps share. The completions they
/// make (`done`) reach the program after readiness is published.
struct TcpTurn<'a, 'r, P> {
    stack: &'a mut Stack,
    shares: &'a mut Shares,
    io: &'a mut P,
    region: Region,
    view: &'a SlotView<'r>,
    h: SocketHandle,
    id: u32,
    /// The session's id (for traces).
    session: u32,
    done: &'a mut Vec<Completion>,
}

/// What one TCP serve did: its readiness, whether the socket moved (bytes
/// placed, space freed), and the bytes placed in a posted buffer.
struct TcpServed {
    facts: TcpFacts,
    moved: bool,
    direct: u64,
}

impl<P: Program> TcpTurn<'_, '_, P> {
    /// The steps of a TCP serve, in order. `data` is the data area's
    /// `Memory` region when the stack may write the ring itself; `mem` the
    /// same for queued zero-copy sends.
    fn serve(&mut self, s: &mut HSock, data: Option<u32>, mem: Option<u32>) -> TcpServed {
        let shared = self.unshare(s);
        // Received bytes into a posted buffer first (the ring was empty
        // when it was posted, and nothing enters the ring while it is),
        // then into the ring. A shared connection has no ring: its bytes
        // go only to posted buffers.
        if let Some(d) = data
            && !shared
        {
            attach_sink(self.stack, self.h, s, d);
        }
        let direct = self.place_posted(s, shared);
        let (held, mut error) = self.held(s, shared);
        let mut moved = false;
        if !shared {
            // The ring brought up to date with the stack, once per serve:
            // what the stack wrote there taken in, the program's head
            // told, and the ring open to the stack or not as the post and
            // the hold now say (a post answered above may open it again).
            // Once, after the post, not also before it: the sync only
            // records the ring's head, tail and openness in the stack, and
            // nothing between reads them or runs the stack's receive
            // (`place` and the look for held bytes take from the stack's
            // own buffer), so the earlier call's effects were all repeated
            // or overwritten by this one.
            moved |= sync_sink(self.stack, self.h, s, self.view, 0, sink_open(s));
        }
        if !held && !shared {
            let (filled, failed) = self.fill_ring(s);
            moved |= filled;
            if failed.is_some() {
                error = failed;
            }
        }
        moved |= self.send_progress(s, mem);
        moved |= self.release_acked(s);
        let error = error.or(self.stack.tcp_error(self.h).ok().flatten());
        if let Some(e) = error {
            self.fail_zerocopy(s, e);
        }
        let state = self.stack.tcp_state(self.h).unwrap_or(State::Closed);
        let connecting = matches!(state, State::SynSent | State::SynReceived);
        if let Some(e) = error {
            self.view.set_error(tcp_errno(e) as u32);
        }
        self.answer_connect(s, error, connecting);
        let facts = TcpFacts {
            held: held && s.tcp().is_none_or(|t| t.posted.is_none()),
            shared,
            error: error.is_some(),
            connecting,
            rx_fin: s.rx_fin,
            rx_blocked: s.rx_blocked,
            readable: s.rx_tail != s.rx_head,
            copy_free: s
                .copy
                .is_none_or(|(_, l)| s.copy_queued - s.tcp().map_or(0, |t| t.copy_acked) < l),
            send_space: self.stack.tcp_send_space(self.h).is_ok_and(|n| n > 0),
            closed: matches!(
                state,
                State::Closed | State::TimeWait | State::LastAck | State::Closing
            ),
        };
        TcpServed {
            facts,
            moved,
            direct,
        }
    }

    /// A shared connection whose other holders have all gone, with nothing
    /// left of the bytes taken back from a ring, is this socket's alone
    /// again: its ring takes over. Returns whether it is still shared.
    fn unshare(&mut self, s: &mut HSock) -> bool {
        let Some(t) = s.tcp_mut() else {
            return false;
        };
        if t.shared
            && t.posted.is_none()
            && self
                .shares
                .get(&self.h)
                .is_none_or(|c| c.holders <= 1 && c.prefix.is_empty())
        {
            self.shares.remove(&self.h);
            t.shared = false;
            trace!(
                session = self.session,
                sock = self.id,
                "connection no longer shared"
            );
        }
        t.shared
    }

    /// Answers the posted receive, if the stack (or a shared connection's
    /// prefix) has bytes for it; returns the bytes placed (none for a
    /// peek).
    fn place_posted(&mut self, s: &mut HSock, shared: bool) -> u64 {
        let Some(t) = s.tcp_mut() else {
            return 0;
        };
        let Some(p) = t.posted else {
            return 0;
        };
        let prefix = if shared {
            self.shares.get_mut(&self.h).map(|c| &mut c.prefix)
        } else {
            None
        };
        let placed = match place(self.stack, self.h, &p, &mut *self.io, self.region, prefix) {
            Placed::Nothing if p.nowait => Placed::Done(-i64::from(errno::EAGAIN)),
            other => other,
        };
        let Placed::Done(result) = placed else {
            return 0;
        };
        t.posted = None;
        t.hold = result > 0 && !shared && !p.peek;
        self.done.push(Completion {
            tag: p.tag,
            result,
            sock: self.id,
            ..Completion::default()
        });
        if p.peek { 0 } else { result.max(0) as u64 }
    }

    /// Whether bytes are held for the next posted buffer, and the
    /// connection's failure if the look found one. Held bytes stay in the
    /// stack (a look that takes nothing); with none held, the ring is
    /// served as usual so that a FIN or an error is still found.
    fn held(&mut self, s: &mut HSock, shared: bool) -> (bool, Option<TcpError>) {
        let h = self.h;
        let look = |stack: &mut Stack| stack.tcp_recv_with(h, |a, b| (0, a.len() + b.len()));
        if !shared {
            let held = s.tcp().is_some_and(|t| t.hold && t.posted.is_none())
                && look(self.stack).is_ok_and(|n| n > 0);
            return (held, None);
        }
        let before = self.shares.get(&h).is_some_and(|c| !c.prefix.is_empty());
        match look(self.stack) {
            Ok(n) => (before || n > 0, None),
            Err(RecvError::Finished) => {
                s.rx_fin = !before;
                (before, None)
            }
            Err(RecvError::Failed(e)) => (before, Some(e)),
            Err(_) => (before, None),
        }
    }

    /// Received bytes into the ring, as far as it has room. A second look
    /// after the stack was emptied finds a FIN that came with the data (no
    /// later event would report it). Returns whether bytes came, and the
    /// connection's failure if the stack reported one.
    fn fill_ring(&mut self, s: &mut HSock) -> (bool, Option<TcpError>) {
        let region = self.region;
        let mut moved = false;
        for _ in 0..2 {
            if s.rx_fin {
                break;
            }
            let free = s.rx.len - (s.rx_tail - s.rx_head);
            let (rx, tail) = (s.rx, s.rx_tail);
            let r = self.stack.tcp_recv_with(self.h, |a, b| {
                let n1 = a.len().min(free as usize);
                let n2 = b.len().min(free as usize - n1);
                region.ring_write(rx, tail, &a[..n1]);
                region.ring_write(rx, tail + n1 as u64, &b[..n2]);
                (n1 + n2, (n1 + n2, a.len() + b.len() > n1 + n2))
            });
            match r {
                Ok((n, more)) => {
                    s.rx_blocked = more;
                    if n == 0 {
                        break;
                    }
                    sync_sink(self.stack, self.h, s, self.view, n as u64, sink_open(s));
                    moved = true;
                    if more {
                        break;
                    }
                }
                Err(RecvError::Finished) => s.rx_fin = true,
                Err(RecvError::Failed(e)) => return (moved, Some(e)),
                Err(_) => break,
            }
        }
        (moved, None)
    }

    /// Sends waiting on the connection go on: queued zero-copy buffers
    /// take the room ACKs freed, a send refused for other holders' queue
    /// may go, a FIN waiting for the queue goes. Returns whether the
    /// writer should hear of it.
    fn send_progress(&mut self, s: &mut HSock, mem: Option<u32>) -> bool {
        let mut moved = false;
        if !s.queue_empty()
            && let Some(data) = mem
        {
            let gate = if s.is_shared_conn() {
                self.shares.get_mut(&self.h)
            } else {
                None
            };
            moved |= feed_queued(self.stack, self.h, s, data, gate);
        }
        // A send refused while other holders' queued sends went first may
        // go now: its writer waits for the sequence to move.
        if let Some(t) = s.tcp_mut()
            && t.order_wait
            && self.shares.get(&self.h).is_none_or(SharedConn::idle)
        {
            t.order_wait = false;
            moved = true;
        }
        if s.queue_empty()
            && let Some(t) = s.tcp_mut()
            && t.fin_after_queue
        {
            t.fin_after_queue = false;
            let _ = self.stack.tcp_shutdown(self.h);
        }
        moved
    }

    /// Acknowledged bytes: releases what they held (ring space, copy-ring
    /// space, zero-copy buffers). Returns whether anything came free.
    fn release_acked(&mut self, s: &mut HSock) -> bool {
        let HSock {
            proto: Proto::Tcp(t),
            tx_freed,
            ..
        } = s
        else {
            return false;
        };
        let acked = self.stack.tcp_acked(self.h).unwrap_or(0);
        trace!(session = self.session, sock = self.id, acked, holds = t.holds.len(), first = ?t.holds.front().map(|h| h.0), "serve");
        let mut moved = false;
        while let Some(&(end, hold)) = t.holds.front() {
            if end > acked {
                break;
            }
            t.holds.pop_front();
            // Space came free: a writer may be waiting for it.
            moved = true;
            match hold {
                Hold::TxRing(p) => {
                    *tx_freed += p.saturating_sub(self.view.tx_acked());
                    self.view.set_tx_acked(p);
                }
                Hold::Copy(p) => {
                    *tx_freed += p.saturating_sub(t.copy_acked);
                    t.copy_acked = p;
                }
                Hold::Zerocopy(tag, n) => self.done.push(Completion {
                    tag,
                    result: n as i64,
                    sock: self.id,
                    flags: CMP_RELEASE,
                    aux: 0,
                }),
            }
        }
        moved
    }

    /// The connection failed with `e`: nothing more will be sent or
    /// acknowledged, so zero-copy buffers (queued or held) come back with
    /// the error instead of waiting for ever.
    fn fail_zerocopy(&mut self, s: &mut HSock, e: TcpError) {
        let e = -i64::from(tcp_errno(e));
        let release = |tag| Completion {
            tag,
            result: e,
            sock: self.id,
            flags: CMP_RELEASE,
            aux: 0,
        };
        if let Some(t) = s.tcp_mut() {
            if let Some(g) = self.shares.get_mut(&self.h) {
                for q in &t.queued {
                    g.done(q.ticket);
                }
            }
            for q in t.queued.drain(..) {
                self.done.push(release(q.tag));
            }
        }
        let done = &mut *self.done;
        if let Some(t) = s.tcp_mut() {
            t.holds.retain(|&(_, hold)| match hold {
                Hold::Zerocopy(tag, _) => {
                    done.push(release(tag));
                    false
                }
                _ => true,
            });
        }
    }

    /// Answers a waiting `CONNECT` once the handshake ended either way,
    /// with the local address the connection got (once per connection).
    fn answer_connect(&mut self, s: &mut HSock, error: Option<TcpError>, connecting: bool) {
        let Some(tag) = s.tcp().and_then(|t| t.connect_tag) else {
            return;
        };
        if error.is_none() && connecting {
            return;
        }
        if let Some(t) = s.tcp_mut() {
            t.connect_tag = None;
        }
        let info = self.stack.tcp_info(self.h).ok();
        self.done.push(Completion {
            tag,
            result: error.map_or(0, |e| -i64::from(tcp_errno(e))),
            sock: self.id,
            flags: 0,
            aux: info.as_ref().map_or(0, |i| packed(i.local)),
        });
        if let Some(i) = &info {
            self.view.set_local(packed(i.local));
        }
    }
}

impl<P: Program> SessionCore<P> {
    /// Moves one socket along: received bytes into its ring, acknowledged
    /// bytes released, a waiting connect answered, readiness published.
    ///
    /// `data` is the data area's `Memory` region, once it has one: then a
    /// TCP socket's ring is written by the stack itself ([`attach_sink`]).
    pub(super) fn serve(
        &mut self,
        stack: &mut Stack,
        shares: &mut Shares,
        id: u32,
        scratch: &mut Vec<u8>,
        data: Option<u32>,
    ) -> bool {
        let region = self.region;
        let Some(view) = region.slot(id) else {
            return false;
        };
        let Some(Some(s)) = self.socks.get_mut(id as usize) else {
            return false;
        };
        let Some(h) = s.h else {
            // Not yet connected: it says nothing. A program polling its
            // non-blocking connect before this engine read the CONNECT took
            // "writable" for connected (the shim itself answers as Linux
            // for a socket it has not given an address).
            return false;
        };
        let mut done = std::mem::take(&mut self.done_buf);
        let (facts, moved) = if s.is_listener() {
            let backlog = stack
                .readiness(h)
                .is_ok_and(|r| r.contains(Events::READABLE));
            (Facts::Listener { backlog }, false)
        } else {
            s.rx_head = view.rx_head().clamp(s.rx_head, s.rx_tail);
            if s.kind == SockKind::Udp {
                let moved = fill_udp(stack, h, s, region, &view, scratch);
                let (rx_blocked, readable) = (s.rx_blocked, s.rx_tail != s.rx_head);
                (
                    Facts::Udp {
                        rx_blocked,
                        readable,
                    },
                    moved,
                )
            } else {
                let served = TcpTurn {
                    stack,
                    shares,
                    io: &mut self.io,
                    region,
                    view: &view,
                    h,
                    id,
                    session: self.id,
                    done: &mut done,
                }
                .serve(s, data, self.mem);
                self.direct += served.direct;
                (Facts::Tcp(served.facts), served.moved)
            }
        };
        let ev = readiness(&facts);
        let before = s.events;
        let changed = publish(s, &view, ev, moved, &mut self.meter, &mut self.clock);
        if let Facts::Tcp(_) = facts {
            s.tx_wake = writer_wake(s, before, ev);
        }
        let any = changed || moved || !done.is_empty();
        for c in done.drain(..) {
            self.complete(c);
        }
        self.done_buf = done;
        if moved || changed {
            // A waiting program must hear of it (a sleeping `poll`).
            self.unwoken += 1;
        }
        any
    }
}
