//! UDP sockets: datagrams in, datagrams out, payload by reference on send.

use alloc::collections::VecDeque;

use crate::config::UdpConfig;
use crate::iface::IpFields;
use crate::payload::PayloadRef;
use crate::socket::Events;
use crate::tcp::Endpoint;
use crate::tcp::ring::RingBuffer;

/// A bound UDP socket.
#[derive(Debug)]
pub(crate) struct UdpSocket {
    pub(crate) local: Endpoint,
    rx: RingBuffer,
    rx_meta: VecDeque<(Endpoint, u32)>,
    max_rx: usize,
    pub(crate) tx: VecDeque<(Endpoint, PayloadRef)>,
    max_tx: usize,
    pub(crate) events: Events,
    /// Datagrams handed to the port (their payload references are released).
    pub(crate) tx_done: u64,
    /// Datagrams dropped for lack of buffer space.
    pub(crate) rx_dropped: u64,
    /// The TOS and TTL its datagrams carry.
    pub(crate) ip: IpFields,
}

impl UdpSocket {
    pub(crate) fn new(local: Endpoint, cfg: UdpConfig) -> UdpSocket {
        let max_rx = cfg.rx_datagrams.max(1);
        let max_tx = cfg.tx_datagrams.max(1);
        UdpSocket {
            local,
            rx: RingBuffer::new(cfg.rx_buffer),
            rx_meta: VecDeque::with_capacity(max_rx),
            max_rx,
            tx: VecDeque::with_capacity(max_tx),
            max_tx,
            events: Events::empty(),
            tx_done: 0,
            rx_dropped: 0,
            ip: IpFields {
                tos: cfg.tos,
                ttl: cfg.ttl,
                priority: cfg.priority,
            },
        }
    }

    /// Stores a received datagram, or drops it if there is no room.
    pub(crate) fn deliver(&mut self, from: Endpoint, payload: &[u8]) -> bool {
        if self.rx_meta.len() >= self.max_rx || self.rx.window() < payload.len() {
            self.rx_dropped += 1;
            return false;
        }
        let n = self.rx.enqueue_slice(payload);
        self.rx_meta.push_back((from, n as u32));
        self.events.insert(Events::READABLE);
        true
    }

    /// Takes the oldest datagram: copies what fits in `out` (the rest of a
    /// longer datagram is discarded, as `recvfrom` does) and returns its full
    /// length and source.
    pub(crate) fn recv(&mut self, out: &mut [u8]) -> Option<(usize, Endpoint)> {
        let (from, len) = self.rx_meta.pop_front()?;
        let len = len as usize;
        let take = len.min(out.len());
        let got = self
            .rx
            .dequeue_slice(out.get_mut(..take).unwrap_or(&mut []));
        self.rx.consume(len - got);
        Some((len, from))
    }

    /// The length of the oldest datagram, without taking it.
    pub(crate) fn peek_len(&self) -> Option<usize> {
        self.rx_meta.front().map(|&(_, n)| n as usize)
    }

    /// Queues a datagram for sending; false if the queue is full.
    pub(crate) fn send(&mut self, to: Endpoint, payload: PayloadRef) -> bool {
        if self.tx.len() >= self.max_tx {
            return false;
        }
        self.tx.push_back((to, payload));
        true
    }

    pub(crate) fn readiness(&self) -> Events {
        let mut e = Events::empty();
        if !self.rx_meta.is_empty() {
            e.insert(Events::READABLE);
        }
        if self.tx.len() < self.max_tx {
            e.insert(Events::WRITABLE);
        }
        e
    }
}
