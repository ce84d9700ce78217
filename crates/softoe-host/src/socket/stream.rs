//! The TCP connection handle: addresses, modes, shutdown and abort,
//! `TCP_INFO`, and what its slot says.

use std::io;
use std::net::SocketAddrV4;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use softoe_abi::{EV_CONNECTED, EV_ERR, EV_WRITABLE, Request, RingSpan, TcpInfoRecord};

use super::{Mode, Readiness, SendPolicy, Sock, TcpReader, TcpStream};
use crate::client::Client;
use crate::errno::{errno_err, result};
use softoe_abi::errno;

/// A connection's slot as the engine published it ([`TcpStream::slot_state`]);
/// all zero when the slot is gone.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotState {
    /// The receive ring's tail: bytes the engine has put in, in all.
    pub rx_tail: u64,
    /// The receive ring's head: bytes the program has taken, in all.
    pub rx_head: u64,
    /// The event bits (`softoe_abi::EV_*`).
    pub events: u32,
    /// The sequence the engine bumps at every change (what edge-triggered
    /// waits compare).
    pub seq: u32,
}

impl TcpStream {
    pub(super) fn new(s: Sock) -> TcpStream {
        TcpStream {
            s: Arc::new(s),
            mode: Mode::default(),
            policy: SendPolicy::from_env(),
            tx_queued: 0,
            connect_unreported: false,
        }
    }

    /// A handle that reads this connection from another thread while this
    /// one writes.
    pub fn try_clone_reader(&self) -> TcpReader {
        TcpReader {
            s: self.s.clone(),
            mode: self.mode,
        }
    }

    /// The local address.
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.s.local()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddrV4 {
        self.s.remote()
    }

    /// The socket id in the session (as `softoe stat` shows it).
    pub fn id(&self) -> u32 {
        self.s.id
    }

    /// The attachment this connection belongs to.
    pub fn client(&self) -> &Client {
        &self.s.c
    }

    /// Prepares the connection for `fork`: the engine watches the returned
    /// descriptor, one end of a socket pair, and the connection lives until
    /// this stream is dropped (or its process dies) *and* every copy of
    /// the descriptor — in this process and in children that inherited
    /// it — is closed. A process holding the descriptor takes the
    /// connection with [`Client::take`]. The LD_PRELOAD shim does this for
    /// every connection just before a program's `fork`.
    pub fn watch_across_fork(&self) -> io::Result<std::os::fd::OwnedFd> {
        self.s.c.watch_stream(self.s.id)
    }

    /// Chooses how writes reach the engine.
    pub fn set_send_policy(&mut self, p: SendPolicy) {
        self.policy = p;
    }

    /// Non-blocking mode: calls that would wait return `WouldBlock`.
    pub fn set_nonblocking(&mut self, on: bool) {
        self.mode.nonblocking = on;
    }

    /// Read timeout (`SO_RCVTIMEO`): a read that waits longer returns
    /// `WouldBlock`.
    pub fn set_read_timeout(&mut self, t: Option<Duration>) {
        self.mode.read_timeout = t;
    }

    /// Write timeout (`SO_SNDTIMEO`).
    pub fn set_write_timeout(&mut self, t: Option<Duration>) {
        self.mode.write_timeout = t;
    }

    /// Closes the sending half: FIN after the data written.
    pub fn shutdown_write(&self) -> io::Result<()> {
        result(&self.s.call(&Request::Shutdown {
            sock: self.s.id,
            how: softoe_abi::SHUT_WR,
        })?)?;
        self.s.wr_shut.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Resets the connection.
    pub fn abort(self) -> io::Result<()> {
        let tag = self.s.c.submit(&Request::Close {
            sock: self.s.id,
            abort: true,
        })?;
        // Dropping frees the rings when the engine releases them.
        self.s.closed.store(tag, Ordering::Relaxed);
        Ok(())
    }

    /// The connection's state and counters (`TCP_INFO`).
    pub fn info(&self) -> io::Result<TcpInfoRecord> {
        let len = size_of::<TcpInfoRecord>() as u64;
        let off = self.s.c.alloc(len)?;
        let r = self.s.call(&Request::Info {
            sock: self.s.id,
            offset: off,
            len,
        });
        let mut rec = TcpInfoRecord::default();
        let ok = r.as_ref().map(result);
        if let Ok(Ok(_)) = ok {
            // SAFETY: `rec` is plain integers; any bytes are a valid value.
            let dst = unsafe {
                std::slice::from_raw_parts_mut((&raw mut rec).cast::<u8>(), len as usize)
            };
            self.s
                .c
                .region()
                .ring_read(RingSpan { offset: off, len }, 0, dst);
        }
        self.s.c.free(off, len);
        r.and_then(|r| result(&r)).map(|_| rec)
    }

    /// The slot as the engine published it: receive tail and head, events,
    /// sequence (for debugging).
    #[doc(hidden)]
    pub fn slot_state(&self) -> SlotState {
        self.s
            .c
            .region()
            .slot(self.s.id)
            .map_or(SlotState::default(), |v| SlotState {
                rx_tail: v.rx_tail(),
                rx_head: v.rx_head(),
                events: v.events(),
                seq: v.seq(),
            })
    }

    /// Bytes waiting to be read.
    pub fn pending(&self) -> u64 {
        self.s.pending()
    }

    /// Whether the connection is established.
    pub fn is_connected(&self) -> bool {
        self.s.events() & EV_CONNECTED != 0
    }

    /// Whether a write would take bytes now.
    pub fn is_writable(&self) -> bool {
        self.s.events() & EV_WRITABLE != 0
    }

    /// What a `poll` would say now.
    pub fn readiness(&self) -> Readiness {
        self.s.readiness()
    }

    /// The error that ended the connection (`SO_ERROR`), taken once.
    pub fn take_error(&self) -> Option<io::Error> {
        if self.s.events() & EV_ERR == 0 {
            return None;
        }
        if self.s.error_taken.swap(true, Ordering::Relaxed) {
            return None;
        }
        Some(self.s.error())
    }

    /// What a `connect(2)` on this socket says now, as Linux's: the error
    /// that ended the handshake (taken, as `SO_ERROR` takes it), `EALREADY`
    /// while it goes on, success the first time it finds a connection
    /// [`Client::tcp_connect_nonblocking`] made established, `EISCONN`
    /// after that (and always for a connection made any other way).
    pub fn connect_status(&mut self) -> io::Result<()> {
        if let Some(e) = self.take_error() {
            return Err(e);
        }
        if !self.is_connected() {
            return Err(errno_err(errno::EALREADY));
        }
        if std::mem::take(&mut self.connect_unreported) {
            Ok(())
        } else {
            Err(errno_err(errno::EISCONN))
        }
    }

    /// Waits until the handshake of a connection
    /// [`Client::tcp_connect_nonblocking`] made has ended (for at most
    /// `timeout`), then answers as [`connect_status`](Self::connect_status).
    /// A signal handler ends the wait with `Interrupted` (unless every
    /// handler restarts and no timeout is set: `connect(2)`'s rules); the
    /// timeout with `WouldBlock`. The handshake goes on either way.
    pub fn wait_connected(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.s.wait(false, timeout, true, |s| {
            s.events() & (EV_CONNECTED | EV_ERR) != 0
        })?;
        self.connect_status()
    }

    /// Whether reads and writes return `WouldBlock` instead of waiting.
    pub fn is_nonblocking(&self) -> bool {
        self.mode.nonblocking
    }
}
