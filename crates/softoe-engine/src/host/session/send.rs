//! Send: bytes from the ring, the data area or the program's memory
//! handed to the stack, and held until acknowledged.

use softoe_abi::{Region, RingSpan, SendSource, errno};
use softoe_stack::{Endpoint, PayloadRef, SendError, SocketHandle, Stack, UdpSendError};
use softoe_wire::Ipv4Address;
use tracing::trace;

use crate::memory::Memory;

use super::command::udp_bind;
use super::share::{SharedConn, Shares};
use super::sock::{HOLDS, HSock, Hold, Proto, QueuedSend};
use super::translate::{endpoint, handle_errno, tcp_errno};
use super::{Ctx, Program, Result, SessionCore, usable};

/// Bytes of engine memory per UDP socket for datagrams on their way out.
pub(super) const UDP_RING: u64 = 256 * 1024;

/// Hands the stack as much of `s`'s queued zero-copy buffers as it has
/// room for, in order; a buffer taken whole becomes a hold released on
/// ACK. On a shared connection (`gate`) only the send whose ticket's turn
/// it is goes. Returns whether anything was taken.
pub(super) fn feed_queued(
    stack: &mut Stack,
    h: SocketHandle,
    s: &mut HSock,
    data: u32,
    mut gate: Option<&mut SharedConn>,
) -> bool {
    let HSock {
        proto: Proto::Tcp(t),
        tx,
        ..
    } = s
    else {
        return false;
    };
    let mut any = false;
    while let Some(q) = t.queued.front_mut() {
        if gate.as_deref().is_some_and(|g| !g.turn(q.ticket)) {
            break;
        }
        let ticket = q.ticket;
        if q.ring {
            // Ring bytes, from the position the stack took last, in pieces
            // that do not wrap.
            let mut fed = false;
            while q.taken < q.len && tx.len > 0 {
                let room = stack.tcp_send_space(h).unwrap_or(0) as u64;
                let pos = t.tx_queued % tx.len;
                let n = (q.len - q.taken).min(room).min(tx.len - pos);
                if n == 0 {
                    break;
                }
                let r = PayloadRef::new(data, tx.offset + pos, n as u32);
                let Ok(k) = queue(stack, h, r) else {
                    break;
                };
                q.taken += k;
                t.tx_queued += k;
                t.ring_backlog = t.ring_backlog.saturating_sub(k);
                t.stream = stream_end(stack, h, t.stream + k);
                fed |= k > 0;
                if k < n {
                    break;
                }
            }
            if fed {
                t.holds.push_back((t.stream, Hold::TxRing(t.tx_queued)));
                any = true;
            }
            if q.taken < q.len {
                break;
            }
            t.queued.pop_front();
            if let Some(g) = gate.as_deref_mut() {
                g.done(ticket);
            }
            continue;
        }
        let room = stack.tcp_send_space(h).unwrap_or(0) as u64;
        let n = (q.len - q.taken).min(room).min(u64::from(u32::MAX));
        if n == 0 {
            break;
        }
        let r = PayloadRef::new(data, q.offset + q.taken, n as u32);
        let Ok(k) = queue(stack, h, r) else {
            break;
        };
        q.taken += k;
        t.stream = stream_end(stack, h, t.stream + k);
        any |= k > 0;
        if q.taken < q.len {
            break;
        }
        let (tag, len) = (q.tag, q.len);
        t.queued.pop_front();
        if let Some(g) = gate.as_deref_mut() {
            g.done(ticket);
        }
        t.holds.push_back((t.stream, Hold::Zerocopy(tag, len)));
    }
    any
}

/// Where the bytes a send just handed the stack end in connection `h`'s
/// stream: every writer's bytes count (the sessions sharing a connection
/// write one stream), so what a send holds is released when the peer
/// acknowledged up to there. `fallback` (this socket's own count) only for
/// a handle the stack no longer knows.
fn stream_end(stack: &Stack, h: SocketHandle, fallback: u64) -> u64 {
    stack.tcp_sent_total(h).unwrap_or(fallback)
}

/// Why a TCP send of `len` bytes on `s` (connection `h`) must be refused
/// before any byte moves, or how many the stack has room for now (`None`
/// for an empty send: it succeeds at once).
fn tcp_room(
    stack: &Stack,
    shares: &Shares,
    s: &mut HSock,
    h: SocketHandle,
    sock: u32,
    len: u64,
) -> Result<Option<u64>> {
    if let Some(e) = stack.tcp_error(h).ok().flatten() {
        return Err(tcp_errno(e));
    }
    let space = stack.tcp_send_space(h).map_err(handle_errno)? as u64;
    if len == 0 {
        return Ok(None);
    }
    if s.tcp().is_some_and(|t| t.fin_after_queue) {
        return Err(errno::EPIPE);
    }
    // Queued zero-copy buffers go first: room ACKs freed this turn is
    // theirs (fed when the socket is served, after the commands), and a
    // send taking it would put its bytes ahead of theirs.
    if !s.queue_empty() {
        trace!(sock, "send refused: queued zero-copy buffers go first");
        return Err(errno::EAGAIN);
    }
    // So do other holders' queued sends on a shared connection.
    if let Some(t) = s.tcp_mut()
        && t.shared
        && shares.get(&h).is_some_and(|g| !g.idle())
    {
        trace!(sock, "send refused: another holder's queued sends go first");
        t.order_wait = true;
        return Err(errno::EAGAIN);
    }
    let want = len.min(space);
    if want == 0 {
        trace!(sock, "send refused: the stack's send buffer is full");
        return Err(errno::EAGAIN);
    }
    Ok(Some(want))
}

/// A send from `s`'s own send ring: the program says `len` more bytes
/// follow what the stack took (the ring acknowledged up to `acked`); the
/// stack takes up to `want` of them where they lie (`data` is the data
/// area's `Memory` region). Returns the bytes taken.
fn send_ring(
    stack: &mut Stack,
    h: SocketHandle,
    s: &mut HSock,
    data: u32,
    acked: u64,
    len: u64,
    want: u64,
) -> Result<u64> {
    let HSock {
        proto: Proto::Tcp(t),
        tx,
        ..
    } = s
    else {
        return Err(errno::ENOTCONN);
    };
    // They must lie within the ring's unacknowledged span.
    if t.tx_queued + len - acked > tx.len {
        return Err(errno::EINVAL);
    }
    let mut taken = 0;
    while taken < want {
        let pos = t.tx_queued % tx.len;
        let n = (want - taken).min(tx.len - pos);
        let r = PayloadRef::new(data, tx.offset + pos, n as u32);
        let k = queue(stack, h, r)?;
        t.tx_queued += k;
        t.stream = stream_end(stack, h, t.stream + k);
        taken += k;
        if k < n {
            break;
        }
    }
    let end = t.tx_queued;
    t.holds.push_back((t.stream, Hold::TxRing(end)));
    Ok(taken)
}

/// Where in UDP socket `s`'s copy ring (`clen` bytes) a datagram of `len`
/// bytes goes: after the last, moved to the ring's start rather than
/// wrapped. Datagrams the port has taken (`sent` in all) free their space
/// first; `EAGAIN` while the ring has no room for it.
fn udp_place(s: &mut HSock, sent: u64, clen: u64, len: u64) -> Result<u64> {
    let mut pos = s.copy_queued;
    let Some(u) = s.udp_mut() else {
        return Err(errno::EOPNOTSUPP);
    };
    while u.done < sent {
        u.live.pop_front();
        u.done += 1;
    }
    if pos % clen + len > clen {
        pos += clen - pos % clen;
    }
    let live_start = u.live.front().map_or(pos, |&(a, _)| a);
    if pos + len - live_start > clen {
        return Err(errno::EAGAIN);
    }
    Ok(pos)
}

/// A datagram's bytes from where `source` says (the program's memory, or
/// the data area) into `dst`, whole.
fn udp_payload(
    io: &mut impl Program,
    region: Region,
    source: SendSource,
    dst: &mut [u8],
) -> Result<()> {
    let len = dst.len() as u64;
    match source {
        SendSource::Remote { addr } => {
            let got = io.read(addr, dst)?;
            if got as u64 != len {
                return Err(errno::EFAULT);
            }
        }
        SendSource::Overlap { offset } | SendSource::Zerocopy { offset } => {
            let span = RingSpan { offset, len };
            if len > 0 && !region.ring_read(span, 0, dst) {
                return Err(errno::EFAULT);
            }
        }
        // Answered by `queue_send` before this.
        SendSource::Ring | SendSource::Queued { .. } | SendSource::RingQueued => {
            return Err(errno::EINVAL);
        }
    }
    Ok(())
}

pub(super) fn queue(stack: &mut Stack, h: SocketHandle, r: PayloadRef) -> Result<u64> {
    match stack.tcp_send(h, r) {
        Ok(k) => Ok(k as u64),
        Err(SendError::Failed(e)) => Err(tcp_errno(e)),
        Err(SendError::InvalidState) => Err(errno::EPIPE),
        Err(_) => Err(errno::ENOTCONN),
    }
}

impl<P: Program> SessionCore<P> {
    /// Queues a zero-copy buffer on connection `sock` and hands the stack
    /// what it has room for now.
    pub(super) fn queue_send(
        &mut self,
        cx: &mut Ctx<'_>,
        sock: u32,
        tag: u64,
        offset: u64,
        len: u64,
        data: u32,
    ) -> Result<()> {
        let (stack, shares) = (&mut *cx.stack, &mut *cx.shares);
        let s = self.sending(sock)?;
        let Some(h) = s.h.filter(|_| s.is_tcp()) else {
            return Err(errno::ENOTCONN);
        };
        if let Some(e) = stack.tcp_error(h).ok().flatten() {
            return Err(tcp_errno(e));
        }
        if len == 0 {
            return Err(errno::EINVAL);
        }
        if s.tcp().is_some_and(|t| t.fin_after_queue) {
            // Shut down for sending (the FIN waits for the queue).
            return Err(errno::EPIPE);
        }
        let mut gate = if s.is_shared_conn() {
            shares.get_mut(&h)
        } else {
            None
        };
        if let Some(t) = s.tcp_mut() {
            if t.queued.capacity() == 0 {
                // Room for a zero-copy sender's steady state, made once.
                t.queued.reserve(HOLDS);
            }
            let ticket = gate.as_deref_mut().map_or(0, SharedConn::ticket);
            t.queued.push_back(QueuedSend {
                tag,
                offset,
                len,
                taken: 0,
                ring: false,
                ticket,
            });
        }
        feed_queued(stack, h, s, data, gate);
        Ok(())
    }

    /// Queues the next `len` bytes of socket `sock`'s send ring
    /// (`SEND_RING | SEND_QUEUE`): behind what is queued already, handed to
    /// the stack as room frees, held until acknowledged as ring sends are.
    pub(super) fn queue_ring(
        &mut self,
        cx: &mut Ctx<'_>,
        sock: u32,
        len: u64,
        data: u32,
    ) -> Result<u64> {
        let (stack, shares) = (&mut *cx.stack, &mut *cx.shares);
        let acked = self.region.slot(sock).map_or(0, |v| v.tx_acked());
        let s = self.sending(sock)?;
        let Some(h) = s.h.filter(|_| s.is_tcp()) else {
            return Err(errno::ENOTCONN);
        };
        if let Some(e) = stack.tcp_error(h).ok().flatten() {
            return Err(tcp_errno(e));
        }
        if s.tcp().is_some_and(|t| t.fin_after_queue) {
            return Err(errno::EPIPE);
        }
        if len == 0 {
            return Ok(0);
        }
        // The program's word for what is acknowledged is trusted no further
        // than the engine's own count.
        let (ring_queued, backlog) = s.tcp().map_or((0, 0), |t| (t.tx_queued, t.ring_backlog));
        let unacked = (ring_queued + backlog).saturating_sub(acked.min(ring_queued));
        if s.tx.len == 0 || unacked + len > s.tx.len {
            return Err(errno::EINVAL);
        }
        let mut gate = if s.is_shared_conn() {
            shares.get_mut(&h)
        } else {
            None
        };
        let Some(t) = s.tcp_mut() else {
            return Err(errno::ENOTCONN);
        };
        t.ring_backlog += len;
        match t.queued.back_mut() {
            // Grows the last queued run of ring bytes, unless another
            // holder queued a send since (this one goes after that).
            Some(q) if q.ring && gate.as_deref().is_none_or(|g| g.newest(q.ticket)) => {
                q.len += len;
            }
            _ => {
                if t.queued.capacity() == 0 {
                    t.queued.reserve(HOLDS);
                }
                let ticket = gate.as_deref_mut().map_or(0, SharedConn::ticket);
                t.queued.push_back(QueuedSend {
                    tag: 0,
                    offset: 0,
                    len,
                    taken: 0,
                    ring: true,
                    ticket,
                });
            }
        }
        feed_queued(stack, h, s, data, gate);
        Ok(len)
    }

    /// Gives back the queued buffers of socket `s` the stack never took
    /// whole: those it took part of are held until that part is
    /// acknowledged (released with the count), the others are released at
    /// once with `err`.
    pub(super) fn unqueue(&mut self, id: u32, err: i32, mut gate: Option<&mut SharedConn>) {
        let Some(Some(s)) = self.socks.get_mut(id as usize) else {
            return;
        };
        let mut now = Vec::new();
        let Some(t) = s.tcp_mut() else {
            return;
        };
        t.ring_backlog = 0;
        while let Some(q) = t.queued.pop_front() {
            // Its turn is over: the other holders' sends may go.
            if let Some(g) = gate.as_deref_mut() {
                g.done(q.ticket);
            }
            if q.ring {
                // The program's own ring bytes: nothing to give back.
                continue;
            }
            if q.taken > 0 {
                t.holds
                    .push_back((t.stream, Hold::Zerocopy(q.tag, q.taken)));
            } else {
                now.push(q.tag);
            }
        }
        for tag in now {
            self.complete_release(tag, id, -i64::from(err));
        }
    }

    pub(super) fn send_tcp(
        &mut self,
        cx: &mut Ctx<'_>,
        sock: u32,
        source: SendSource,
        len: u64,
        data: u32,
        tag: u64,
    ) -> Result<u64> {
        let (stack, mem) = (&mut *cx.stack, &mut *cx.mem);
        let copy = match source {
            SendSource::Overlap { .. } | SendSource::Remote { .. } => {
                let s = self.sending(sock)?;
                if s.copy.is_none() {
                    let c = self.copy_ring(mem, cx.cfg.copy_ring as u64);
                    self.sock(sock)?.copy = Some(c);
                }
                self.sock(sock)?.copy
            }
            _ => None,
        };
        let region = self.region;
        let s = usable(&mut self.socks, sock)?;
        let Some(h) = s.h.filter(|_| !s.is_listener()) else {
            return Err(errno::ENOTCONN);
        };
        let Some(want) = tcp_room(stack, cx.shares, s, h, sock, len)? else {
            return Ok(0);
        };
        let taken = match source {
            // Answered by `queue_send` and `queue_ring` before this.
            SendSource::Queued { .. } | SendSource::RingQueued => return Err(errno::EINVAL),
            SendSource::Ring => {
                if s.tx.len == 0 {
                    return Err(errno::EINVAL);
                }
                let acked = region.slot(sock).map_or(0, |v| v.tx_acked());
                send_ring(stack, h, s, data, acked, len, want)?
            }
            SendSource::Zerocopy { offset } => {
                let r = PayloadRef::new(data, offset, want as u32);
                let taken = queue(stack, h, r)?;
                if let Some(t) = s.tcp_mut() {
                    t.stream = stream_end(stack, h, t.stream + taken);
                    t.holds.push_back((t.stream, Hold::Zerocopy(tag, taken)));
                }
                taken
            }
            SendSource::Overlap { .. } | SendSource::Remote { .. } => {
                let Some(copy) = copy else {
                    return Err(errno::ENOMEM);
                };
                self.send_copied(stack, mem, sock, source, copy, want)?
            }
        };
        if taken == 0 {
            trace!(sock, "send refused: the stack took nothing");
            return Err(errno::EAGAIN);
        }
        Ok(taken)
    }

    /// A send of the program's bytes that must be copied first (from the
    /// data area, `Overlap`, or another process's memory, `Remote`): into
    /// the engine's copy ring `copy` (region, length), as much of `want`
    /// as it has room for, then to the stack. Returns the bytes taken.
    fn send_copied(
        &mut self,
        stack: &mut Stack,
        mem: &mut Memory,
        sock: u32,
        source: SendSource,
        (cr, clen): (u32, u64),
        want: u64,
    ) -> Result<u64> {
        let region = self.region;
        let s = usable(&mut self.socks, sock)?;
        let Some(h) = s.h else {
            return Err(errno::ENOTCONN);
        };
        let copy_acked = s.tcp().map_or(0, |t| t.copy_acked);
        let free = clen - (s.copy_queued - copy_acked);
        let want = want.min(free);
        if want == 0 {
            trace!(
                sock,
                queued = s.copy_queued,
                acked = copy_acked,
                holds = s.tcp().map_or(0, |t| t.holds.len()),
                "send refused: the copy ring is full"
            );
            return Err(errno::EAGAIN);
        }
        let mut taken = 0u64;
        while taken < want {
            let pos = s.copy_queued % clen;
            let n = (want - taken).min(clen - pos) as usize;
            let Some(dst) = mem
                .region_mut(cr)
                .and_then(|b| b.get_mut(pos as usize..pos as usize + n))
            else {
                return Err(errno::ENOMEM);
            };
            match source {
                SendSource::Remote { addr } => {
                    // A partial read: the rest is unmapped (nothing read
                    // at all is a fault).
                    if self.io.read(addr + taken, dst)? == 0 {
                        return Err(errno::EFAULT);
                    }
                }
                SendSource::Overlap { offset } => {
                    let span = RingSpan {
                        offset: offset + taken,
                        len: n as u64,
                    };
                    if !region.ring_read(span, 0, dst) {
                        return Err(errno::EFAULT);
                    }
                }
                _ => return Err(errno::EINVAL),
            }
            let r = PayloadRef::new(cr, pos, n as u32);
            let k = queue(stack, h, r)?;
            s.copy_queued += k;
            if let Some(t) = s.tcp_mut() {
                t.stream = stream_end(stack, h, t.stream + k);
            }
            taken += k;
            if k < n as u64 {
                break;
            }
        }
        let end = s.copy_queued;
        if let Some(t) = s.tcp_mut() {
            t.holds.push_back((t.stream, Hold::Copy(end)));
        }
        Ok(taken)
    }

    pub(super) fn send_udp(
        &mut self,
        cx: &mut Ctx<'_>,
        sock: u32,
        source: SendSource,
        len: u64,
        to: Option<(u32, u16)>,
    ) -> Result<u64> {
        let (stack, scratch, mem) = (&mut *cx.stack, &mut *cx.scratch, &mut *cx.mem);
        let region = self.region;
        if self.sock(sock)?.copy.is_none() {
            let c = self.copy_ring(mem, UDP_RING);
            self.sock(sock)?.copy = Some(c);
        }
        let s = self.sock(sock)?;
        let dest = match to {
            Some((a, p)) => endpoint(a, p),
            None => s.udp().and_then(|u| u.peer).ok_or(errno::EDESTADDRREQ)?,
        };
        if s.h.is_none() {
            // Sending binds an ephemeral port, as in Linux.
            let (h, port) = udp_bind(stack, Endpoint::new(Ipv4Address::UNSPECIFIED, 0))?;
            s.h = Some(h);
            s.bound = Some(Endpoint::new(Ipv4Address::UNSPECIFIED, port));
            self.by_handle.insert(h, sock);
        }
        let s = usable(&mut self.socks, sock)?;
        let (Some(h), Some((cr, clen))) = (s.h, s.copy) else {
            return Err(errno::ENOTCONN);
        };
        if len > 65_507 {
            return Err(errno::EMSGSIZE);
        }
        let pos = udp_place(s, stack.udp_sent(h).unwrap_or(0), clen, len)?;
        let off = (pos % clen) as usize;
        scratch.resize(len as usize, 0);
        udp_payload(&mut self.io, region, source, &mut scratch[..len as usize])?;
        let Some(dst) = mem
            .region_mut(cr)
            .and_then(|b| b.get_mut(off..off + len as usize))
        else {
            return Err(errno::ENOMEM);
        };
        dst.copy_from_slice(&scratch[..len as usize]);
        match stack.udp_send_to(h, dest, PayloadRef::new(cr, off as u64, len as u32)) {
            Ok(()) => {
                if let Some(u) = s.udp_mut() {
                    u.live.push_back((pos, pos + len));
                }
                s.copy_queued = pos + len;
                Ok(len)
            }
            Err(UdpSendError::Full) => Err(errno::EAGAIN),
            Err(UdpSendError::TooLarge) => Err(errno::EMSGSIZE),
            Err(UdpSendError::Unaddressable) => Err(errno::EINVAL),
            Err(_) => Err(errno::EBADF),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softoe_abi::SockKind;

    fn udp() -> HSock {
        let span = RingSpan { offset: 0, len: 0 };
        HSock::new(SockKind::Udp, span, span)
    }

    #[test]
    fn a_datagram_that_would_wrap_goes_to_the_ring_start() {
        let mut s = udp();
        s.copy_queued = 90;
        assert_eq!(udp_place(&mut s, 0, 100, 10), Ok(90));
        assert_eq!(udp_place(&mut s, 0, 100, 20), Ok(100));
    }

    #[test]
    fn live_datagrams_hold_their_space_until_sent() {
        let mut s = udp();
        s.copy_queued = 100;
        let u = s.udp_mut().expect("a UDP socket");
        u.live.push_back((50, 70));
        u.live.push_back((70, 100));
        // From 50 on is live: 60 more bytes would overrun it.
        assert_eq!(udp_place(&mut s, 0, 100, 60), Err(errno::EAGAIN));
        assert_eq!(udp_place(&mut s, 0, 100, 50), Ok(100));
        // The first was sent: its 20 bytes are free again.
        assert_eq!(udp_place(&mut s, 1, 100, 70), Ok(100));
        let u = s.udp().expect("a UDP socket");
        assert_eq!((u.done, u.live.len()), (1, 1));
    }
}
