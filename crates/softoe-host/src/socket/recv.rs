//! Receiving on a connection: reading the receive ring, and direct
//! placement into a large buffer (`RECV`).

use std::io::{self, Read};
use std::sync::atomic::Ordering;
use std::time::Duration;

use softoe_abi::{
    EV_ERR, EV_HELD, EV_RDHUP, EV_RXFULL, EV_SHARED, RecvTarget, Request, RingSpan, errno,
};

use super::{Mode, Sock, TcpReader, TcpStream};
use crate::errno::errno_err;

impl TcpStream {
    /// Copies received bytes without consuming them (`MSG_PEEK`).
    pub fn peek(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read_inner(&self.s, self.mode, buf, true)
    }
}

fn read_inner(s: &Sock, mode: Mode, buf: &mut [u8], peek: bool) -> io::Result<usize> {
    if buf.is_empty() {
        return Ok(0);
    }
    // Other processes hold the connection too: the engine hands out its
    // bytes one read at a time.
    if s.events() & EV_SHARED != 0
        && let Some(r) = read_shared(s, mode, buf, peek)
    {
        return r;
    }
    let region = *s.c.region();
    let Some(view) = region.slot(s.id) else {
        return Err(errno_err(errno::EBADF));
    };
    let ready = |s: &Sock| {
        let v = s.c.region().slot(s.id);
        v.is_some_and(|v| v.rx_tail() != v.rx_head()) || s.events() & (EV_RDHUP | EV_ERR) != 0
    };
    let direct = if s.c.inner.direct_refused.load(Ordering::Relaxed) {
        0
    } else {
        s.c.inner.cfg.direct_min
    };
    if !peek && !mode.nonblocking && direct > 0 && buf.len() >= direct && !ready(s) {
        // An empty ring and a large buffer: have the engine place the next
        // bytes straight into it.
        if let Some(r) = read_direct(s, mode.read_timeout, buf) {
            return r;
        }
    }
    // Bytes held in the engine for a posted buffer, and this read takes
    // them from the ring: have them moved there (once; they come within
    // the engine's turn, so even a non-blocking read waits that long).
    let held = |s: &Sock| s.events() & EV_HELD != 0;
    let shared = |s: &Sock| s.events() & EV_SHARED != 0;
    let mut asked = false;
    loop {
        // The connection became shared meanwhile (the engine took the
        // ring's bytes back, or this socket just joined): read its way.
        if shared(s) && view.rx_tail() == view.rx_head() {
            return read_inner(s, mode, buf, peek);
        }
        if !ready(s) && held(s) && !asked {
            s.c.submit_quiet(&Request::RxDone { sock: s.id })?;
            asked = true;
            if mode.nonblocking {
                s.wait(false, Some(Duration::from_millis(2)), false, ready)?;
            }
        }
        s.wait(mode.nonblocking, mode.read_timeout, false, |s| {
            ready(s) || (held(s) && !asked) || shared(s)
        })?;
        if ready(s) && !(shared(s) && view.rx_tail() == view.rx_head()) {
            break;
        }
    }
    let head = view.rx_head();
    let tail = view.rx_tail();
    let n = tail.saturating_sub(head).min(buf.len() as u64);
    if n == 0 {
        if s.events() & EV_ERR != 0 {
            return Err(s.error());
        }
        return Ok(0);
    }
    region.ring_read(s.rx, head, &mut buf[..n as usize]);
    if !peek {
        // Taken with a compare-and-swap: the engine may take the ring's
        // unread bytes back (the connection became shared) — then they are
        // its, and this read tries again.
        if view.take_rx(head, head + n).is_err() {
            return read_inner(s, mode, buf, peek);
        }
        // The engine holds more than the ring could take: tell it there
        // is room now. The fence pairs with the engine's between
        // publishing `EV_RXFULL` and its next look at `rx_head`: either
        // we see the bit, or it sees the head move.
        std::sync::atomic::fence(Ordering::SeqCst);
        if s.events() & EV_RXFULL != 0 {
            let _ = s.c.submit_quiet(&Request::RxDone { sock: s.id });
        }
    }
    Ok(n as usize)
}

/// The most a read of a shared connection takes at once (its buffer in
/// the data area, made once per socket).
const SHARED_BUF: u64 = 256 << 10;

/// A read of a connection other sessions hold too ([`EV_SHARED`]): a
/// buffer of this socket's in the data area posted (`RECV`), and copied
/// out. `None` when the connection is this session's alone again (read
/// the ring).
fn read_shared(s: &Sock, mode: Mode, buf: &mut [u8], peek: bool) -> Option<io::Result<usize>> {
    let mut one = s
        .shared_rx
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let span = match *one {
        Some(b) => b,
        None => {
            let len = s.rx.len.clamp(4096, SHARED_BUF);
            let b = match s.c.alloc(len) {
                Ok(offset) => RingSpan { offset, len },
                Err(e) => return Some(Err(e)),
            };
            *one = Some(b);
            b
        }
    };
    let len = (buf.len() as u64).min(span.len);
    let deadline = mode.read_timeout.map(|t| std::time::Instant::now() + t);
    loop {
        let req = Request::Recv {
            sock: s.id,
            target: RecvTarget::Region {
                offset: span.offset,
            },
            len,
            nowait: mode.nonblocking,
            peek,
        };
        let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
        let got = match post_and_wait(s, &req, left) {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        std::sync::atomic::fence(Ordering::SeqCst);
        return match got {
            Ok(0) => {
                if s.events() & EV_ERR != 0 {
                    return Some(Err(s.error()));
                }
                Some(Ok(0))
            }
            Ok(n) => {
                let n = (n as usize).min(buf.len());
                s.c.region().ring_read(span, 0, &mut buf[..n]);
                Some(Ok(n))
            }
            // Refused: the ring holds bytes (the connection is ours alone
            // again), or this session posted already.
            Err(errno::EAGAIN) if s.events() & EV_SHARED == 0 => None,
            Err(errno::EAGAIN) if mode.nonblocking => Some(Err(io::ErrorKind::WouldBlock.into())),
            Err(errno::EAGAIN | errno::EBUSY) => {
                if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                    return Some(Err(io::ErrorKind::WouldBlock.into()));
                }
                std::thread::yield_now();
                continue;
            }
            Err(e) => Some(Err(errno_err(e))),
        };
    }
}

/// Posts `req` (a `RECV`) and waits for its answer at most `timeout`; a
/// wait that times out or is interrupted takes the buffer back first
/// (`CANCEL_RECV`), so the engine never writes it after this returns:
/// `WouldBlock` or `Interrupted` then, unless bytes came meanwhile.
fn post_and_wait(
    s: &Sock,
    req: &Request,
    timeout: Option<Duration>,
) -> io::Result<Result<u64, i32>> {
    let tag = s.c.submit(req)?;
    let (waited, interrupted) = match s
        .c
        .block_until(timeout, true, &s.rx_spin, |d| d.done.remove(&tag))
    {
        Err(e) if e.kind() == io::ErrorKind::Interrupted => (Ok(None), true),
        r => (r, false),
    };
    let got = match waited? {
        Some(c) => c,
        None => {
            let t = s.c.submit(&Request::CancelRecv { sock: s.id })?;
            s.c.abandon(t);
            s.c.wait_tag(tag)?
        }
    };
    match got.outcome() {
        Err(errno::ECANCELED) if interrupted => Err(io::ErrorKind::Interrupted.into()),
        Err(errno::ECANCELED) => Err(io::ErrorKind::WouldBlock.into()),
        r => Ok(r),
    }
}

/// A blocking read by direct placement (`RECV`): the engine writes the
/// next bytes into `buf` itself and says how many. `None` when the ring
/// must be read instead (bytes reached it first, or another read of this
/// socket has a buffer posted).
fn read_direct(s: &Sock, timeout: Option<Duration>, buf: &mut [u8]) -> Option<io::Result<usize>> {
    // The engine writes through this address from its own process, as a
    // NIC's DMA would, and completes the command only after: the buffer is
    // not touched here until then (the completion is read with Acquire).
    let addr = buf.as_mut_ptr().expose_provenance() as u64;
    let req = Request::Recv {
        sock: s.id,
        target: RecvTarget::Remote { addr },
        len: buf.len() as u64,
        nowait: false,
        peek: false,
    };
    let tag = match s.c.submit(&req) {
        Ok(t) => t,
        Err(e) => return Some(Err(e)),
    };
    let (waited, interrupted) = match s
        .c
        .block_until(timeout, true, &s.rx_spin, |d| d.done.remove(&tag))
    {
        Err(e) if e.kind() == io::ErrorKind::Interrupted => (Ok(None), true),
        r => (r, false),
    };
    let got = match waited {
        Ok(Some(c)) => c,
        Ok(None) => {
            // Timed out or interrupted: take the buffer back. The receive
            // completes first (with bytes placed meanwhile, or ECANCELED);
            // the cancel's own answer is not needed.
            match s.c.submit(&Request::CancelRecv { sock: s.id }) {
                Ok(t) => s.c.abandon(t),
                Err(e) => return Some(Err(e)),
            }
            match s.c.wait_tag(tag) {
                Ok(c) => c,
                Err(e) => return Some(Err(e)),
            }
        }
        Err(e) => return Some(Err(e)),
    };
    std::sync::atomic::fence(Ordering::SeqCst);
    match got.outcome() {
        Ok(n) => Some(Ok(n as usize)),
        Err(errno::ECANCELED) if interrupted => Some(Err(io::ErrorKind::Interrupted.into())),
        Err(errno::ECANCELED) => Some(Err(io::ErrorKind::WouldBlock.into())),
        Err(errno::EAGAIN | errno::EBUSY) => None,
        // The engine may not write our memory (another user): the bytes
        // are still in the engine; read through the ring from now on.
        Err(errno::EPERM) => {
            s.c.inner.direct_refused.store(true, Ordering::Relaxed);
            None
        }
        Err(e) => Some(Err(errno_err(e))),
    }
}

impl Read for TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read_inner(&self.s, self.mode, buf, false)
    }
}

impl TcpReader {
    /// Copies received bytes without consuming them (`MSG_PEEK`).
    pub fn peek(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read_inner(&self.s, self.mode, buf, true)
    }

    /// Non-blocking reads (`WouldBlock`).
    pub fn set_nonblocking(&mut self, on: bool) {
        self.mode.nonblocking = on;
    }

    /// Read timeout (`SO_RCVTIMEO`; `WouldBlock` when it passes).
    pub fn set_read_timeout(&mut self, t: Option<Duration>) {
        self.mode.read_timeout = t;
    }

    /// Bytes waiting to be read.
    pub fn pending(&self) -> u64 {
        self.s.pending()
    }
}

impl Read for TcpReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read_inner(&self.s, self.mode, buf, false)
    }
}
