//! The socket id every handle shares: opening it with its rings, what
//! its slot says, and closing it when the last handle goes.

use std::io;
use std::net::SocketAddrV4;
use std::sync::atomic::Ordering;

use softoe_abi::{Completion, EV_ERR, EV_HUP, Request, RingSpan, SockKind, errno};

use super::{Readiness, Sock, addr_of, readiness};
use crate::client::Client;
use crate::errno::{errno_err, result};
use crate::spin::Spin;

impl Sock {
    pub(super) fn open(c: &Client, kind: SockKind) -> io::Result<Sock> {
        let (rx, tx) = Sock::rings(c, kind)?;
        match c
            .call(&Request::Socket { kind, rx, tx })
            .and_then(|r| result(&r).map(|v| v as u32))
        {
            Ok(id) => Ok(Sock::with(c, id, rx, tx)),
            Err(e) => {
                Sock::unring(c, rx, tx);
                Err(e)
            }
        }
    }

    pub(super) fn rings(c: &Client, kind: SockKind) -> io::Result<(RingSpan, RingSpan)> {
        let cfg = &c.inner.cfg;
        let rx_len = cfg.rx_ring.max(4096).div_ceil(64) * 64;
        let tx_len = if kind == SockKind::Tcp {
            cfg.tx_ring.div_ceil(64) * 64
        } else {
            0
        };
        let rx = RingSpan {
            offset: c.alloc(rx_len)?,
            len: rx_len,
        };
        let tx = if tx_len > 0 {
            match c.alloc(tx_len) {
                Ok(o) => RingSpan {
                    offset: o,
                    len: tx_len,
                },
                Err(e) => {
                    c.free(rx.offset, rx.len);
                    return Err(e);
                }
            }
        } else {
            RingSpan::default()
        };
        Ok((rx, tx))
    }

    pub(super) fn unring(c: &Client, rx: RingSpan, tx: RingSpan) {
        c.free(rx.offset, rx.len);
        if tx.len > 0 {
            c.free(tx.offset, tx.len);
        }
    }

    pub(super) fn with(c: &Client, id: u32, rx: RingSpan, tx: RingSpan) -> Sock {
        Sock {
            c: c.clone(),
            id,
            rx,
            tx,
            closed: std::sync::atomic::AtomicU64::new(0),
            error_taken: std::sync::atomic::AtomicBool::new(false),
            wr_shut: std::sync::atomic::AtomicBool::new(false),
            rx_spin: Spin::new(c.inner.cfg.spin),
            tx_spin: Spin::new(c.inner.cfg.spin),
            priority: std::sync::atomic::AtomicU32::new(0),
            shared_rx: std::sync::Mutex::new(None),
        }
    }

    /// Sends `req` and waits for its completion.
    pub(super) fn call(&self, req: &Request) -> io::Result<Completion> {
        self.c.call(req)
    }

    pub(super) fn events(&self) -> u32 {
        self.c.region().slot(self.id).map_or(0, |v| v.events())
    }

    /// Bytes in the receive ring not read yet.
    pub(super) fn pending(&self) -> u64 {
        self.c
            .region()
            .slot(self.id)
            .map_or(0, |v| v.rx_tail().saturating_sub(v.rx_head()))
    }

    /// What a `poll` would say now.
    pub(super) fn readiness(&self) -> Readiness {
        readiness(&self.c, self.id)
    }

    /// The slot's event generation (moves with every event or progress).
    pub(super) fn seq(&self) -> u32 {
        self.c.region().slot(self.id).map_or(0, |v| v.seq())
    }

    /// Whether a send may go ahead, given the slot's events `ev`: not
    /// after an error (that error), nor once the socket is shut for
    /// sending or hung up (`EPIPE`) — hung up also when another session
    /// took the connection, whose send ring then never frees again.
    pub(super) fn may_send(&self, ev: u32) -> io::Result<()> {
        if ev & EV_ERR != 0 {
            return Err(self.error());
        }
        if ev & EV_HUP != 0 || self.wr_shut.load(Ordering::Relaxed) {
            return Err(errno_err(errno::EPIPE));
        }
        Ok(())
    }

    pub(super) fn error(&self) -> io::Error {
        let e = self.c.region().slot(self.id).map_or(0, |v| v.error());
        errno_err(if e == 0 { errno::ECONNRESET } else { e as i32 })
    }

    pub(super) fn local(&self) -> SocketAddrV4 {
        addr_of(softoe_abi::unpack_addr(
            self.c.region().slot(self.id).map_or(0, |v| v.local()),
        ))
    }

    pub(super) fn remote(&self) -> SocketAddrV4 {
        addr_of(softoe_abi::unpack_addr(
            self.c.region().slot(self.id).map_or(0, |v| v.remote()),
        ))
    }
}

impl Drop for Sock {
    fn drop(&mut self) {
        let (rx, tx) = (self.rx, self.tx);
        let mut spans = if tx.len > 0 {
            vec![(rx.offset, rx.len), (tx.offset, tx.len)]
        } else {
            vec![(rx.offset, rx.len)]
        };
        if let Some(b) = *self
            .shared_rx
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            spans.push((b.offset, b.len));
        }
        let tag = match self.closed.load(Ordering::Relaxed) {
            0 => self.c.submit(&Request::Close {
                sock: self.id,
                abort: false,
            }),
            t => Ok(t),
        };
        match tag {
            // The rings are free once the engine says it is done with them.
            Ok(tag) => self.c.free_on_release(tag, spans),
            // The session is gone: the engine reads nothing any more.
            Err(_) => {
                for (o, l) in spans {
                    self.c.free(o, l);
                }
            }
        }
    }
}
