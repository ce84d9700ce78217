//! A socket as the session keeps it: what the program's slot does not
//! hold, or holds but cannot be trusted with.

use std::collections::VecDeque;

use softoe_abi::{RecvTarget, RingSpan, SockKind};
use softoe_stack::{Algorithm, Endpoint, Keepalive, SocketHandle};

/// Room made in a TCP socket's list of sends awaiting their ACK when it
/// is created (one entry per send command not yet acknowledged), and in
/// its queue of zero-copy buffers at the first: enough for a bulk
/// sender's steady state, so neither grows mid-stream.
pub(super) const HOLDS: usize = 64;

/// What a send's bytes hold up until the peer acknowledges them.
#[derive(Clone, Copy, Debug)]
pub(super) enum Hold {
    /// Send-ring bytes up to this ring position.
    TxRing(u64),
    /// Engine copy-ring bytes up to this position.
    Copy(u64),
    /// A zero-copy buffer: its command's tag and length.
    Zerocopy(u64, u64),
}

/// Options set before the stack socket exists.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Opts {
    pub(super) nodelay: Option<bool>,
    pub(super) keepalive: Option<Option<Keepalive>>,
    pub(super) user_timeout: Option<Option<std::time::Duration>>,
    pub(super) tos: Option<u8>,
    pub(super) ttl: Option<u8>,
    /// `SO_PRIORITY`: unlike the rest, applied at once to a live socket
    /// as well (every later frame goes with it).
    pub(super) priority: Option<u8>,
    pub(super) congestion: Option<Algorithm>,
    pub(super) quickack: Option<bool>,
    /// `SO_REUSEPORT`: `BIND` and `LISTEN` join a reuseport group.
    pub(super) reuseport: bool,
}

#[derive(Debug)]
pub(super) struct HSock {
    pub(super) kind: SockKind,
    /// The waiter words (reader's, writer's) whose bells were last rung:
    /// one ring per sleep.
    pub(super) rang: [u32; 2],
    /// Send-ring or copy-ring bytes freed since the writer's bell last
    /// rang, and whether it should ring now ([`Session::ring_waiters`]).
    pub(super) tx_freed: u64,
    pub(super) tx_wake: bool,
    pub(super) h: Option<SocketHandle>,
    /// What only its kind of socket keeps: a TCP connection's, a UDP
    /// socket's or a listener's state.
    pub(super) proto: Proto,
    pub(super) bound: Option<Endpoint>,
    pub(super) rx: RingSpan,
    pub(super) tx: RingSpan,
    /// Receive-ring bytes written (trusted copy of the slot's `rx_tail`).
    pub(super) rx_tail: u64,
    /// The program's `rx_head` as last seen (it only moves forward).
    pub(super) rx_head: u64,
    pub(super) rx_fin: bool,
    /// The stack has more than the receive ring could take.
    pub(super) rx_blocked: bool,
    /// Engine copy ring: region, length, and bytes written (a TCP
    /// socket's [`TcpPart::copy_acked`] says how many are free again).
    pub(super) copy: Option<(u32, u64)>,
    pub(super) copy_queued: u64,
    pub(super) opts: Opts,
    pub(super) events: u32,
    /// `rx_tail` when the slot was last published: bytes placed since
    /// stamp it for readers (`wake::publish`).
    pub(super) stamped_tail: u64,
    /// Other processes may hold this connection (a `fork` since it was
    /// made): the host service watches the descriptor every holder shares,
    /// and until the last copy closes a `CLOSE` only detaches it.
    pub(super) watched: bool,
    /// The program closed it while watched: the connection lives on here,
    /// received bytes still entering the ring, until another session takes
    /// it (`ADOPT`) or the last descriptor closes.
    pub(super) detached: Option<Detached>,
}

/// What a socket is to the stack, with what only that kind keeps.
#[derive(Debug)]
pub(super) enum Proto {
    /// A TCP socket that is not a listener: not yet bound or connected, or
    /// a connection (connecting, open or closing; maybe shared with other
    /// sessions).
    Tcp(TcpPart),
    /// A UDP socket.
    Udp(UdpPart),
    /// A TCP listener.
    Listener(ListenPart),
}

/// What a TCP connection keeps.
#[derive(Debug, Default)]
pub(super) struct TcpPart {
    /// The stack writes in-order bytes straight into the receive ring
    /// ([`Stack::tcp_set_rx_sink`](softoe_stack::Stack::tcp_set_rx_sink)),
    /// and its tail is the ring's: `rx_tail` follows it
    /// ([`recv::sync_sink`](super::recv::sync_sink)).
    pub(super) sink: bool,
    /// Send-ring bytes the stack has taken (`copy` policy).
    pub(super) tx_queued: u64,
    /// Copy-ring bytes free again (acknowledged).
    pub(super) copy_acked: u64,
    /// Bytes handed to the stack on this connection.
    pub(super) stream: u64,
    pub(super) holds: VecDeque<(u64, Hold)>,
    pub(super) connect_tag: Option<u64>,
    /// A receive buffer the program posted (`RECV`): the next bytes go
    /// there, not into the ring.
    pub(super) posted: Option<Posted>,
    /// The last read was placed directly: what follows stays in the stack
    /// for the next posted buffer until the program asks for the ring
    /// (`RXDONE`), so a reader that keeps posting gets every byte placed.
    pub(super) hold: bool,
    /// Sockets of other sessions serve this connection too (`share.rs`):
    /// the receive ring is not used, every read is a posted buffer.
    pub(super) shared: bool,
    /// A send was refused because another holder's queued sends go first:
    /// the writer is told (the slot's sequence moves) when they have.
    pub(super) order_wait: bool,
    /// The program shut the sending half down while sends were queued: the
    /// FIN goes when the queue has gone to the stack.
    pub(super) fin_after_queue: bool,
    /// Zero-copy buffers queued whole (`SEND_QUEUE`), not all handed to
    /// the stack yet, in order.
    pub(super) queued: VecDeque<QueuedSend>,
    /// Send-ring bytes queued (`SEND_RING | SEND_QUEUE`) that the stack has
    /// not taken yet: they follow `tx_queued` in the ring.
    pub(super) ring_backlog: u64,
}

impl TcpPart {
    fn new() -> TcpPart {
        TcpPart {
            holds: VecDeque::with_capacity(HOLDS),
            ..TcpPart::default()
        }
    }
}

/// What a UDP socket keeps.
#[derive(Debug, Default)]
pub(super) struct UdpPart {
    /// Where `send` without an address goes.
    pub(super) peer: Option<Endpoint>,
    /// Copy-ring spans of datagrams the port has not taken yet.
    pub(super) live: VecDeque<(u64, u64)>,
    /// Datagrams the port has taken, in all.
    pub(super) done: u64,
}

/// What a listener keeps.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ListenPart {
    /// Other sessions share it (`ADOPT`), and closing it here leaves the
    /// stack's listener to them.
    pub(super) shared: bool,
}

/// A queued zero-copy send: its command's tag, the buffer, and how much
/// of it the stack has taken.
#[derive(Clone, Copy, Debug)]
pub(super) struct QueuedSend {
    pub(super) tag: u64,
    pub(super) offset: u64,
    pub(super) len: u64,
    pub(super) taken: u64,
    /// Bytes of the socket's send ring (`offset` and `tag` unused): what
    /// follows its `tx_queued`.
    pub(super) ring: bool,
    /// Its place among every holder's queued sends while the connection is
    /// shared (`share.rs`).
    pub(super) ticket: u64,
}

/// How a detached connection's program closed it: what to do at the
/// last close.
#[derive(Clone, Copy, Debug)]
pub(super) struct Detached {
    pub(super) tag: Option<u64>,
    pub(super) abort: bool,
}

/// A posted receive buffer (direct placement, LyraNET §3.3).
#[derive(Clone, Copy, Debug)]
pub(super) struct Posted {
    pub(super) tag: u64,
    pub(super) target: RecvTarget,
    pub(super) len: u64,
    /// Answered at once, `-EAGAIN` when nothing is there (`RECV_NOWAIT`).
    pub(super) nowait: bool,
    /// The bytes stay where they are (`RECV_PEEK`).
    pub(super) peek: bool,
}

impl HSock {
    pub(super) fn new(kind: SockKind, rx: RingSpan, tx: RingSpan) -> HSock {
        HSock {
            kind,
            rang: [0; 2],
            tx_freed: 0,
            tx_wake: false,
            h: None,
            proto: if kind == SockKind::Tcp {
                Proto::Tcp(TcpPart::new())
            } else {
                Proto::Udp(UdpPart::default())
            },
            bound: None,
            rx,
            tx,
            rx_tail: 0,
            stamped_tail: 0,
            rx_head: 0,
            rx_fin: false,
            rx_blocked: false,
            copy: None,
            copy_queued: 0,
            opts: Opts::default(),
            events: 0,
            watched: false,
            detached: None,
        }
    }

    /// A listener, shared or not.
    pub(super) fn is_listener(&self) -> bool {
        matches!(self.proto, Proto::Listener(_))
    }

    /// A listener that other sessions share.
    pub(super) fn is_shared_listener(&self) -> bool {
        matches!(self.proto, Proto::Listener(ListenPart { shared: true }))
    }

    pub(super) fn tcp(&self) -> Option<&TcpPart> {
        match &self.proto {
            Proto::Tcp(t) => Some(t),
            _ => None,
        }
    }

    pub(super) fn tcp_mut(&mut self) -> Option<&mut TcpPart> {
        match &mut self.proto {
            Proto::Tcp(t) => Some(t),
            _ => None,
        }
    }

    /// The waits a TCP socket has open (a posted receive, a connect's
    /// answer), given up: nothing will answer them here.
    pub(super) fn take_waits(&mut self) -> (Option<Posted>, Option<u64>) {
        self.tcp_mut()
            .map_or((None, None), |t| (t.posted.take(), t.connect_tag.take()))
    }

    /// A connection that sockets of other sessions serve too.
    pub(super) fn is_shared_conn(&self) -> bool {
        self.tcp().is_some_and(|t| t.shared)
    }

    /// No zero-copy buffer or ring run waits in its send queue.
    pub(super) fn queue_empty(&self) -> bool {
        self.tcp().is_none_or(|t| t.queued.is_empty())
    }

    /// The zero-copy buffers its sends hold until acknowledged: tag and
    /// length of each.
    pub(super) fn held_zerocopy(&self) -> Vec<(u64, u64)> {
        let Some(t) = self.tcp() else {
            return Vec::new();
        };
        t.holds
            .iter()
            .filter_map(|&(_, hold)| match hold {
                Hold::Zerocopy(tag, n) => Some((tag, n)),
                _ => None,
            })
            .collect()
    }

    /// Bytes handed to the stack on its connection (none but TCP's).
    pub(super) fn stream(&self) -> u64 {
        self.tcp().map_or(0, |t| t.stream)
    }

    /// The stack writes into its receive ring ([`TcpPart::sink`]).
    pub(super) fn sinks(&self) -> bool {
        self.tcp().is_some_and(|t| t.sink)
    }

    /// Sets [`TcpPart::sink`] (nothing for a socket that is not TCP).
    pub(super) fn set_sink(&mut self, on: bool) {
        if let Some(t) = self.tcp_mut() {
            t.sink = on;
        }
    }

    /// A TCP socket that is not a listener.
    pub(super) fn is_tcp(&self) -> bool {
        matches!(self.proto, Proto::Tcp(_))
    }

    pub(super) fn udp(&self) -> Option<&UdpPart> {
        match &self.proto {
            Proto::Udp(u) => Some(u),
            _ => None,
        }
    }

    pub(super) fn udp_mut(&mut self) -> Option<&mut UdpPart> {
        match &mut self.proto {
            Proto::Udp(u) => Some(u),
            _ => None,
        }
    }

    pub(super) fn listener_mut(&mut self) -> Option<&mut ListenPart> {
        match &mut self.proto {
            Proto::Listener(l) => Some(l),
            _ => None,
        }
    }

    /// The one change of role: a TCP socket (or a new one adopting a
    /// listener) becomes a listener, its connection state dropped.
    pub(super) fn become_listener(&mut self, shared: bool) {
        self.proto = Proto::Listener(ListenPart { shared });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sock(kind: SockKind) -> HSock {
        let span = RingSpan { offset: 0, len: 0 };
        HSock::new(kind, span, span)
    }

    #[test]
    fn kind_decides_the_part_at_creation() {
        let (t, u) = (sock(SockKind::Tcp), sock(SockKind::Udp));
        assert!(t.is_tcp() && t.udp().is_none() && !t.is_listener());
        assert!(!u.is_tcp() && u.udp().is_some() && !u.is_listener());
    }

    #[test]
    fn listen_leaves_tcp_for_the_listener_part() {
        let mut s = sock(SockKind::Tcp);
        s.become_listener(false);
        assert!(s.is_listener() && !s.is_tcp() && !s.is_shared_listener());
        if let Some(l) = s.listener_mut() {
            l.shared = true;
        }
        assert!(s.is_shared_listener());
    }

    #[test]
    fn waits_are_taken_once_and_only_from_tcp() {
        let mut s = sock(SockKind::Tcp);
        if let Some(t) = s.tcp_mut() {
            t.connect_tag = Some(7);
            t.shared = true;
        }
        assert!(s.is_shared_conn());
        assert_eq!(s.take_waits().1, Some(7));
        assert_eq!(s.take_waits().1, None);
        s.become_listener(false);
        assert!(!s.is_shared_conn() && s.tcp().is_none());
        assert_eq!(sock(SockKind::Udp).take_waits().1, None);
    }

    #[test]
    fn only_a_tcp_socket_queues_sends() {
        let mut s = sock(SockKind::Tcp);
        assert!(s.queue_empty());
        if let Some(t) = s.tcp_mut() {
            t.queued.push_back(QueuedSend {
                tag: 1,
                offset: 0,
                len: 10,
                taken: 0,
                ring: false,
                ticket: 0,
            });
        }
        assert!(!s.queue_empty());
        assert!(sock(SockKind::Udp).queue_empty());
    }

    #[test]
    fn held_zerocopy_lists_only_zero_copy_holds() {
        let mut s = sock(SockKind::Tcp);
        if let Some(t) = s.tcp_mut() {
            t.stream = 30;
            t.holds.push_back((10, Hold::TxRing(10)));
            t.holds.push_back((20, Hold::Zerocopy(5, 10)));
            t.holds.push_back((30, Hold::Copy(10)));
        }
        assert_eq!(s.held_zerocopy(), vec![(5, 10)]);
        assert_eq!(s.stream(), 30);
        let u = sock(SockKind::Udp);
        assert_eq!((u.held_zerocopy(), u.stream()), (Vec::new(), 0));
    }

    #[test]
    fn only_tcp_keeps_a_sink() {
        let mut s = sock(SockKind::Tcp);
        s.set_sink(true);
        assert!(s.sinks());
        let mut u = sock(SockKind::Udp);
        u.set_sink(true);
        assert!(!u.sinks());
        s.become_listener(false);
        assert!(!s.sinks());
    }
}
