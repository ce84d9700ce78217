//! Passive open: a listening socket with a bounded SYN queue and accept queue.
//!
//! Each SYN that finds room in the SYN queue becomes a full connection in
//! SYN-RECEIVED (its buffers allocated then, as for any new socket). When its
//! handshake completes it moves to the accept queue; if that is full, the
//! final ACK is ignored, so the peer retransmits and the connection waits in
//! SYN-RECEIVED, as on Linux. Closing the listener resets everything not yet
//! accepted.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use super::Endpoint;
use crate::config::TcpConfig;
use crate::socket::{Events, SocketHandle};

/// A listening TCP socket.
#[derive(Debug)]
pub(crate) struct TcpListener {
    /// Local address (may be unspecified: any of ours) and port.
    pub(crate) local: Endpoint,
    /// Settings for accepted connections.
    pub(crate) cfg: TcpConfig,
    /// Most established connections waiting for `accept`.
    pub(crate) backlog: usize,
    /// Most connections in SYN-RECEIVED.
    pub(crate) syn_backlog: usize,
    /// Connections in SYN-RECEIVED (slot indices).
    pub(crate) embryos: Vec<usize>,
    /// Established connections waiting for `accept`.
    pub(crate) accept_queue: VecDeque<SocketHandle>,
    pub(crate) events: Events,
    /// SYNs dropped because the SYN queue was full.
    pub(crate) syn_drops: u64,
}

impl TcpListener {
    pub(crate) fn new(local: Endpoint, cfg: TcpConfig, backlog: usize) -> TcpListener {
        let backlog = backlog.clamp(1, 65_535);
        let syn_backlog = backlog.saturating_mul(2).max(16);
        TcpListener {
            local,
            cfg,
            backlog,
            syn_backlog,
            embryos: Vec::with_capacity(syn_backlog),
            accept_queue: VecDeque::with_capacity(backlog),
            events: Events::empty(),
            syn_drops: 0,
        }
    }

    /// Room for one more connection in SYN-RECEIVED.
    pub(crate) fn syn_room(&self) -> bool {
        self.embryos.len() < self.syn_backlog
    }

    /// Room in the accept queue.
    pub(crate) fn accept_room(&self) -> bool {
        self.accept_queue.len() < self.backlog
    }

    pub(crate) fn forget_embryo(&mut self, idx: usize) {
        if let Some(pos) = self.embryos.iter().position(|&i| i == idx) {
            self.embryos.swap_remove(pos);
        }
    }
}
