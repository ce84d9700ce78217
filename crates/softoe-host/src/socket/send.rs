//! Sending on a connection: the send policies (`copy` into the send ring,
//! `overlap` from the caller's memory), zero-copy and overlap sends of
//! region buffers, and waiting for room.

use std::io::{self, Write};

use softoe_abi::{EV_CONNECTED, EV_ERR, EV_HUP, EV_SHARED, Request, SendSource, errno};

use super::{TcpStream, ZcBuf};
use crate::errno::errno_err;

/// How a socket's `write` hands bytes to the engine: HL-TCP's send
/// policies (copy-and-send, zero-copy, simultaneous send and copy) as a
/// runtime choice (docs/design.md).
///
/// `Copy` is the default because it measured best for a `write` that must
/// leave the buffer free when it returns: the program copies into its send
/// ring and posts one command it does not wait for, while with `Overlap`
/// every `write` waits for the engine to have read the buffer. In `softoe
/// bench` (docs/results.md) a sender spends 0.10–0.12 CPU-s per GiB with
/// `Copy` at 28 Gb/s, 0.27–0.28 with `Overlap` at 16–19 Gb/s; Linux's
/// `write` 0.39–0.44. Zero-copy buffers ([`TcpStream::send_zerocopy`]) beat
/// both (0.013) for programs written for them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SendPolicy {
    /// The host copies into the socket's send ring and goes on: the buffer
    /// is free at once, and the engine queues the bytes.
    #[default]
    Copy,
    /// The engine reads the caller's buffer itself (`process_vm_readv`)
    /// and keeps a copy for retransmission; the host does no per-byte work
    /// but waits for the engine's copy. Writes shorter than
    /// [`Config::copy_below`](crate::Config::copy_below) are copied into the
    /// send ring instead: for a few bytes the host's copy is cheaper than
    /// the engine's system call.
    Overlap,
}

impl SendPolicy {
    /// The policy named by `$SOFTOE_SEND` (`copy`, the default, or
    /// `overlap`).
    pub fn from_env() -> SendPolicy {
        match std::env::var("SOFTOE_SEND").as_deref() {
            Ok("overlap") => SendPolicy::Overlap,
            _ => SendPolicy::Copy,
        }
    }
}

impl TcpStream {
    fn write_copy(&mut self, buf: &[u8]) -> io::Result<usize> {
        let region = *self.s.c.region();
        let tx = self.s.tx;
        loop {
            // Read before looking at the space and sending: progress after
            // this point moves it (see `wait_writable`).
            let seq = self.s.seq();
            let ev = self.s.events();
            self.s.may_send(ev)?;
            let acked = region.slot(self.s.id).map_or(0, |v| v.tx_acked());
            let space = tx.len - (self.tx_queued - acked).min(tx.len);
            let n = space.min(buf.len() as u64);
            if n > 0 {
                region.ring_write(tx, self.tx_queued, &buf[..n as usize]);
                if ev & EV_CONNECTED != 0 {
                    // Connected: the engine queues the bytes whole and sends
                    // them as room frees, so there is no answer to wait for
                    // (a failure shows in the socket's state) — except on a
                    // connection other processes hold too: this write must
                    // be in the engine's queue, in its place, before it
                    // returns, or another process's write made after it
                    // (its own command ring read first) would overtake it.
                    let req = Request::Send {
                        sock: self.s.id,
                        source: SendSource::RingQueued,
                        len: n,
                        to: None,
                        more: false,
                    };
                    if ev & EV_SHARED == 0 {
                        self.s.c.post(&req)?;
                    } else if let Err(e) = self.s.call(&req)?.outcome() {
                        return Err(errno_err(e));
                    }
                    self.tx_queued += n;
                    return Ok(n as usize);
                }
                let r = self.s.call(&Request::Send {
                    sock: self.s.id,
                    source: SendSource::Ring,
                    len: n,
                    to: None,
                    more: false,
                })?;
                match r.outcome() {
                    Ok(taken) if taken > 0 => {
                        self.tx_queued += taken;
                        return Ok(taken as usize);
                    }
                    Ok(_) | Err(errno::EAGAIN) => {}
                    Err(e) => return Err(errno_err(e)),
                }
            }
            self.wait_writable(seq)?;
        }
    }

    fn write_remote(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            let seq = self.s.seq();
            let r = self.s.call(&Request::Send {
                sock: self.s.id,
                source: SendSource::Remote {
                    addr: buf.as_ptr() as u64,
                },
                len: buf.len() as u64,
                to: None,
                more: false,
            })?;
            match r.outcome() {
                Ok(n) => return Ok(n as usize),
                Err(errno::EAGAIN) => {}
                Err(e) => return Err(errno_err(e)),
            }
            self.wait_writable(seq)?;
        }
    }

    /// Waits until the socket's sequence moves past `seq`, read before the
    /// refused send: the engine bumps it whenever space frees. Reading it
    /// after the refusal would miss space freed in between (and, with
    /// `EV_WRITABLE` never cleared, wait for ever).
    fn wait_writable(&self, seq: u32) -> io::Result<()> {
        self.s
            .wait(self.mode.nonblocking, self.mode.write_timeout, true, |s| {
                s.c.region()
                    .slot(s.id)
                    .is_some_and(|v| v.seq() != seq || v.events() & (EV_ERR | EV_HUP) != 0)
            })?;
        self.s.may_send(self.s.events())
    }

    /// Sends the first `len` bytes of a zero-copy buffer by reference.
    ///
    /// The engine queues the whole span and hands it to the stack as room
    /// frees, so this returns at once, without a round trip: the host core
    /// spends one command per buffer, whatever its size. The buffer is the
    /// caller's again when [`ZcBuf::released`] says so (the peer
    /// acknowledged it); [`ZcBuf::wait_released`] reports a connection that
    /// failed or closed before all of it was sent. Returns `len` (capped at
    /// the buffer's length).
    pub fn send_zerocopy(&mut self, buf: &mut ZcBuf, len: usize) -> io::Result<usize> {
        if buf.in_flight.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                "buffer still in flight",
            ));
        }
        self.s.may_send(self.s.events())?;
        let len = len.min(buf.len as usize) as u64;
        if len == 0 {
            return Ok(0);
        }
        let tag = self.s.c.submit(&Request::Send {
            sock: self.s.id,
            source: SendSource::Queued { offset: buf.off },
            len,
            to: None,
            more: false,
        })?;
        buf.in_flight = Some(tag);
        buf.sent = len;
        Ok(len as usize)
    }

    /// Sends from a region buffer with the `overlap` policy: the engine
    /// copies it while sending; the buffer is free when this returns.
    pub fn send_overlap(&mut self, buf: &ZcBuf, len: usize) -> io::Result<usize> {
        let len = len.min(buf.len as usize) as u64;
        loop {
            let seq = self.s.seq();
            let r = self.s.call(&Request::Send {
                sock: self.s.id,
                source: SendSource::Overlap { offset: buf.off },
                len,
                to: None,
                more: false,
            })?;
            match r.outcome() {
                Ok(n) => return Ok(n as usize),
                Err(errno::EAGAIN) => {}
                Err(e) => return Err(errno_err(e)),
            }
            self.wait_writable(seq)?;
        }
    }
}

impl Write for TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        match self.policy {
            SendPolicy::Copy => self.write_copy(buf),
            SendPolicy::Overlap
                if buf.len() < self.s.c.inner.cfg.copy_below && self.s.tx.len > 0 =>
            {
                self.write_copy(buf)
            }
            SendPolicy::Overlap => self.write_remote(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
