//! Receiving on a connection: reading the receive ring, and direct
//! placement into a large buffer (`RECV`).

use std::io::{self, Read};
use std::sync::atomic::Ordering;
use std::time::Duration;

use softoe_abi::{EV_ERR, EV_HELD, EV_RDHUP, EV_RXFULL, RecvTarget, Request, errno};

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
    let mut asked = false;
    loop {
        if !ready(s) && held(s) && !asked {
            s.c.submit_quiet(&Request::RxDone { sock: s.id })?;
            asked = true;
            if mode.nonblocking {
                s.wait(false, Some(Duration::from_millis(2)), false, ready)?;
            }
        }
        s.wait(mode.nonblocking, mode.read_timeout, false, |s| {
            ready(s) || (held(s) && !asked)
        })?;
        if ready(s) {
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
        view.set_rx_head(head + n);
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
