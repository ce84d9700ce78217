//! Readiness: which events a socket has, from its state alone. What the
//! session and the stack know is gathered first ([`Facts`]); the mask
//! follows from it with nothing else read, so every rule is tested here.

use softoe_abi::{
    EV_ACCEPT, EV_CONNECTED, EV_ERR, EV_HELD, EV_HUP, EV_RDHUP, EV_READABLE, EV_RXFULL, EV_SHARED,
    EV_WRITABLE,
};

/// What a socket's readiness depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Facts {
    /// A TCP listener: `backlog`, a connection waits to be accepted.
    Listener { backlog: bool },
    /// A UDP socket: the next datagram did not fit the ring
    /// (`rx_blocked`); the ring holds datagrams (`readable`).
    Udp { rx_blocked: bool, readable: bool },
    /// A TCP connection.
    Tcp(TcpFacts),
}

/// What a TCP connection's readiness depends on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct TcpFacts {
    /// Bytes wait in the stack for the next posted buffer (no post now).
    pub(super) held: bool,
    /// Other sessions serve the connection: no ring, posted reads only.
    pub(super) shared: bool,
    /// The connection failed.
    pub(super) error: bool,
    /// The handshake is not done (`SYN-SENT`, `SYN-RECEIVED`).
    pub(super) connecting: bool,
    /// The peer's FIN was read.
    pub(super) rx_fin: bool,
    /// The stack has more than the receive ring could take.
    pub(super) rx_blocked: bool,
    /// The receive ring holds bytes.
    pub(super) readable: bool,
    /// The engine's copy ring (if any) has room.
    pub(super) copy_free: bool,
    /// The stack's send buffer has room.
    pub(super) send_space: bool,
    /// The connection is past closing for both halves (`CLOSED`,
    /// `TIME-WAIT`, `LAST-ACK`, `CLOSING`).
    pub(super) closed: bool,
}

/// The event mask of a socket whose state is `f`.
pub(super) fn readiness(f: &Facts) -> u32 {
    match *f {
        Facts::Listener { backlog } => {
            if backlog {
                EV_ACCEPT | EV_READABLE
            } else {
                0
            }
        }
        // A datagram socket can always send (a datagram the port cannot
        // take is dropped and counted, as Linux's).
        Facts::Udp {
            rx_blocked,
            readable,
        } => EV_WRITABLE | bit(rx_blocked, EV_RXFULL) | bit(readable, EV_READABLE),
        Facts::Tcp(t) => tcp_readiness(&t),
    }
}

fn tcp_readiness(t: &TcpFacts) -> u32 {
    let mut ev = bit(t.held, EV_HELD) | bit(t.shared, EV_SHARED);
    if t.error {
        ev |= EV_ERR | EV_HUP | EV_RDHUP;
    } else if !t.connecting {
        ev |= EV_CONNECTED;
    }
    ev |= bit(t.rx_fin, EV_RDHUP) | bit(t.rx_blocked, EV_RXFULL) | bit(t.readable, EV_READABLE);
    let writable = !t.error && !t.connecting && t.copy_free && t.send_space;
    ev |= bit(writable, EV_WRITABLE);
    ev | bit(t.closed && t.rx_fin, EV_HUP)
}

fn bit(on: bool, b: u32) -> u32 {
    if on { b } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An open connection with nothing to read and room to send.
    fn open() -> TcpFacts {
        TcpFacts {
            copy_free: true,
            send_space: true,
            ..TcpFacts::default()
        }
    }

    fn tcp(t: TcpFacts) -> u32 {
        readiness(&Facts::Tcp(t))
    }

    #[test]
    fn listener_is_readable_only_with_a_backlog() {
        assert_eq!(readiness(&Facts::Listener { backlog: false }), 0);
        assert_eq!(
            readiness(&Facts::Listener { backlog: true }),
            EV_ACCEPT | EV_READABLE
        );
    }

    #[test]
    fn udp_is_always_writable() {
        let f = |rx_blocked, readable| {
            readiness(&Facts::Udp {
                rx_blocked,
                readable,
            })
        };
        assert_eq!(f(false, false), EV_WRITABLE);
        assert_eq!(f(false, true), EV_WRITABLE | EV_READABLE);
        assert_eq!(f(true, false), EV_WRITABLE | EV_RXFULL);
        assert_eq!(f(true, true), EV_WRITABLE | EV_RXFULL | EV_READABLE);
    }

    #[test]
    fn open_connection_is_connected_and_writable() {
        assert_eq!(tcp(open()), EV_CONNECTED | EV_WRITABLE);
    }

    #[test]
    fn connecting_is_neither_connected_nor_writable() {
        let t = TcpFacts {
            connecting: true,
            ..open()
        };
        assert_eq!(tcp(t), 0);
    }

    #[test]
    fn error_hangs_up_both_halves_and_stops_writes() {
        let t = TcpFacts {
            error: true,
            ..open()
        };
        assert_eq!(tcp(t), EV_ERR | EV_HUP | EV_RDHUP);
        // An error while connecting is reported the same way.
        let t = TcpFacts {
            error: true,
            connecting: true,
            ..open()
        };
        assert_eq!(tcp(t), EV_ERR | EV_HUP | EV_RDHUP);
    }

    #[test]
    fn send_space_and_copy_ring_both_gate_writable() {
        let no_space = TcpFacts {
            send_space: false,
            ..open()
        };
        assert_eq!(tcp(no_space), EV_CONNECTED);
        let copy_full = TcpFacts {
            copy_free: false,
            ..open()
        };
        assert_eq!(tcp(copy_full), EV_CONNECTED);
    }

    #[test]
    fn eof_is_rdhup_and_hup_only_once_closed() {
        let eof = TcpFacts {
            rx_fin: true,
            ..open()
        };
        assert_eq!(tcp(eof), EV_CONNECTED | EV_WRITABLE | EV_RDHUP);
        let closed = TcpFacts {
            closed: true,
            ..eof
        };
        assert_eq!(tcp(closed), EV_CONNECTED | EV_WRITABLE | EV_RDHUP | EV_HUP);
        // Closed without the FIN read: no hang-up yet.
        let unread = TcpFacts {
            closed: true,
            ..open()
        };
        assert_eq!(tcp(unread), EV_CONNECTED | EV_WRITABLE);
    }

    #[test]
    fn ring_bits() {
        let t = TcpFacts {
            readable: true,
            ..open()
        };
        assert_eq!(tcp(t), EV_CONNECTED | EV_WRITABLE | EV_READABLE);
        let t = TcpFacts {
            rx_blocked: true,
            ..open()
        };
        assert_eq!(tcp(t), EV_CONNECTED | EV_WRITABLE | EV_RXFULL);
    }

    #[test]
    fn held_and_shared_bits() {
        let t = TcpFacts {
            held: true,
            ..open()
        };
        assert_eq!(tcp(t), EV_CONNECTED | EV_WRITABLE | EV_HELD);
        let t = TcpFacts {
            shared: true,
            ..open()
        };
        assert_eq!(tcp(t), EV_CONNECTED | EV_WRITABLE | EV_SHARED);
    }
}
