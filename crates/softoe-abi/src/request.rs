//! The typed command: one definition of what each opcode means, read and
//! written in both directions, as smoltcp's `Repr` is parsed from and
//! emitted into a packet.
//!
//! A [`Request`] is a command with its meaning checked; [`decode`](crate::decode)
//! turns a raw [`Command`] a program wrote into one (the engine's side, which
//! trusts nothing), and [`encode`] writes one into a [`Command`] (the
//! program's side). The two are inverse: for every `r` that `decode` can
//! return, `decode(&encode(&r, tag), layout) == Ok(r)` — a property test in
//! this file holds them to it, and a test names every opcode in both
//! directions, so the wire layout of a command is written here and in
//! `decode` only, side by side.

use crate::record::{
    Command, Opcode, RECV_NOWAIT, RECV_PEEK, RECV_REGION, RECV_REMOTE, SEND_MORE, SEND_OVERLAP,
    SEND_QUEUE, SEND_REMOTE, SEND_RING, SEND_ZEROCOPY, SockKind, SockOpt,
};

/// The largest ring or single send the engine accepts: 1 GiB.
pub const MAX_SPAN: u64 = 1 << 30;

/// A ring in the data area: offset and length, both multiples of 8.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingSpan {
    /// Offset in the data area.
    pub offset: u64,
    /// Length in bytes (0: no ring).
    pub len: u64,
}

/// Where a `SEND`'s bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendSource {
    /// Next in the socket's send ring (`copy`).
    Ring,
    /// A data-area buffer sent by reference (`zerocopy`).
    Zerocopy {
        /// Offset in the data area.
        offset: u64,
    },
    /// A data-area buffer the engine copies (`overlap`).
    Overlap {
        /// Offset in the data area.
        offset: u64,
    },
    /// The program's own memory, read by the engine (`overlap` by
    /// `process_vm_readv`).
    Remote {
        /// A virtual address in the program.
        addr: u64,
    },
    /// A data-area buffer sent by reference, queued whole in the engine
    /// (`zerocopy` with [`SEND_QUEUE`]).
    Queued {
        /// Offset in the data area.
        offset: u64,
    },
    /// The next bytes of the socket's send ring, queued whole in the
    /// engine ([`SEND_RING`] with [`SEND_QUEUE`]): the program need not
    /// wait for an answer.
    RingQueued,
}

/// Where a `RECV` places bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvTarget {
    /// A buffer in the data area.
    Region {
        /// Offset in the data area.
        offset: u64,
    },
    /// The program's own memory, written by the engine
    /// (`process_vm_writev`).
    Remote {
        /// A virtual address in the program.
        addr: u64,
    },
}

/// A decoded command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request {
    /// `NOP`.
    Nop,
    /// `SOCKET`.
    Socket {
        /// TCP or UDP.
        kind: SockKind,
        /// The receive ring.
        rx: RingSpan,
        /// The send ring (may be empty).
        tx: RingSpan,
    },
    /// `BIND`.
    Bind {
        /// Socket id.
        sock: u32,
        /// Address, network order.
        addr: u32,
        /// Port.
        port: u16,
    },
    /// `LISTEN`.
    Listen {
        /// Socket id.
        sock: u32,
        /// Backlog (at least 1).
        backlog: u32,
    },
    /// `ACCEPT`.
    Accept {
        /// The listener.
        sock: u32,
        /// The new socket's receive ring.
        rx: RingSpan,
        /// The new socket's send ring.
        tx: RingSpan,
    },
    /// `ADOPT`: join the socket a claim granted this session.
    Adopt {
        /// The grant ([`BellOp::Claim`](crate::BellOp::Claim)'s answer).
        grant: u32,
        /// This socket's receive ring.
        rx: RingSpan,
        /// Its send ring (a connection's; empty for a listener).
        tx: RingSpan,
    },
    /// `CONNECT`.
    Connect {
        /// Socket id.
        sock: u32,
        /// Address, network order.
        addr: u32,
        /// Port.
        port: u16,
    },
    /// `SEND`.
    Send {
        /// Socket id.
        sock: u32,
        /// Where the bytes are.
        source: SendSource,
        /// How many.
        len: u64,
        /// UDP: the destination (address, port), if given.
        to: Option<(u32, u16)>,
        /// `SEND_MORE`.
        more: bool,
    },
    /// `RXDONE`.
    RxDone {
        /// Socket id.
        sock: u32,
    },
    /// `SHUTDOWN`.
    Shutdown {
        /// Socket id.
        sock: u32,
        /// `SHUT_*`.
        how: u64,
    },
    /// `CLOSE`.
    Close {
        /// Socket id.
        sock: u32,
        /// Reset instead of FIN.
        abort: bool,
    },
    /// `SETOPT`.
    SetOpt {
        /// Socket id.
        sock: u32,
        /// Which option.
        opt: SockOpt,
        /// Its values.
        values: [u64; 5],
    },
    /// `INFO`.
    Info {
        /// Socket id.
        sock: u32,
        /// Offset in the data area.
        offset: u64,
        /// Bytes there.
        len: u64,
    },
    /// `ARM`.
    Arm {
        /// Socket id.
        sock: u32,
    },
    /// `RECV`: a posted receive buffer.
    Recv {
        /// Socket id.
        sock: u32,
        /// Where the bytes go.
        target: RecvTarget,
        /// Its length (at least 1).
        len: u64,
        /// `RECV_NOWAIT`: answer at once.
        nowait: bool,
        /// `RECV_PEEK`: leave the bytes unconsumed.
        peek: bool,
    },
    /// `CANCEL_RECV`.
    CancelRecv {
        /// Socket id.
        sock: u32,
    },
}

impl Request {
    /// The opcode this request is sent with.
    pub fn opcode(&self) -> Opcode {
        match self {
            Request::Nop => Opcode::Nop,
            Request::Socket { .. } => Opcode::Socket,
            Request::Bind { .. } => Opcode::Bind,
            Request::Listen { .. } => Opcode::Listen,
            Request::Accept { .. } => Opcode::Accept,
            Request::Adopt { .. } => Opcode::Adopt,
            Request::Connect { .. } => Opcode::Connect,
            Request::Send { .. } => Opcode::Send,
            Request::RxDone { .. } => Opcode::RxDone,
            Request::Shutdown { .. } => Opcode::Shutdown,
            Request::Close { .. } => Opcode::Close,
            Request::SetOpt { .. } => Opcode::SetOpt,
            Request::Info { .. } => Opcode::Info,
            Request::Arm { .. } => Opcode::Arm,
            Request::Recv { .. } => Opcode::Recv,
            Request::CancelRecv { .. } => Opcode::CancelRecv,
        }
    }

    /// The socket id the request names (0 for those that name none:
    /// `NOP`, `SOCKET`, `ADOPT`).
    pub fn sock(&self) -> u32 {
        match *self {
            Request::Nop | Request::Socket { .. } | Request::Adopt { .. } => 0,
            Request::Bind { sock, .. }
            | Request::Listen { sock, .. }
            | Request::Accept { sock, .. }
            | Request::Connect { sock, .. }
            | Request::Send { sock, .. }
            | Request::RxDone { sock }
            | Request::Shutdown { sock, .. }
            | Request::Close { sock, .. }
            | Request::SetOpt { sock, .. }
            | Request::Info { sock, .. }
            | Request::Arm { sock }
            | Request::Recv { sock, .. }
            | Request::CancelRecv { sock } => sock,
        }
    }
}

/// Writes `req` as the command a program puts on the ring, with `tag`
/// (echoed in its completion): the inverse of [`decode`](crate::decode).
///
/// Never fails and never panics; it does not check what `decode` checks
/// (a request the engine would refuse encodes as written, and is refused
/// there). Where the wire has one spelling for two requests, `decode`
/// reads the first: a `SEND` to `Some((0, 0))` is written as one with no
/// destination, and a `LISTEN` backlog outside 1..=65,535 is clamped by
/// the engine. An `ADOPT`'s ring lengths share a word (32 bits each), as
/// every ring `decode` accepts is at most [`MAX_SPAN`].
///
/// [`CMD_QUIET`](crate::CMD_QUIET) is not part of a request (the engine answers the same
/// way, only less): add it with [`Command::quiet`].
pub fn encode(req: &Request, tag: u64) -> Command {
    let rings = |rx: RingSpan, tx: RingSpan| [0, rx.offset, rx.len, tx.offset, tx.len, 0];
    let (flags, args) = match *req {
        Request::Nop
        | Request::RxDone { .. }
        | Request::Arm { .. }
        | Request::CancelRecv { .. } => (0, [0; 6]),
        Request::Socket { kind, rx, tx } => {
            let mut a = rings(rx, tx);
            a[0] = kind as u64;
            (0, a)
        }
        Request::Bind { addr, port, .. } | Request::Connect { addr, port, .. } => {
            (0, [u64::from(addr), u64::from(port), 0, 0, 0, 0])
        }
        Request::Listen { backlog, .. } => (0, [u64::from(backlog), 0, 0, 0, 0, 0]),
        Request::Accept { rx, tx, .. } => (0, rings(rx, tx)),
        Request::Adopt { grant, rx, tx } => (
            0,
            [
                u64::from(grant),
                0,
                0,
                rx.offset,
                rx.len | (tx.len << 32),
                tx.offset,
            ],
        ),
        Request::Send {
            source,
            len,
            to,
            more,
            ..
        } => {
            let (flags, at) = match source {
                SendSource::Ring => (SEND_RING, 0),
                SendSource::RingQueued => (SEND_RING | SEND_QUEUE, 0),
                SendSource::Zerocopy { offset } => (SEND_ZEROCOPY, offset),
                SendSource::Queued { offset } => (SEND_ZEROCOPY | SEND_QUEUE, offset),
                SendSource::Overlap { offset } => (SEND_OVERLAP, offset),
                SendSource::Remote { addr } => (SEND_REMOTE, addr),
            };
            let (addr, port) = to.unwrap_or((0, 0));
            let more = if more { SEND_MORE } else { 0 };
            (
                flags | more,
                [at, len, u64::from(addr), u64::from(port), 0, 0],
            )
        }
        Request::Shutdown { how, .. } => (0, [how, 0, 0, 0, 0, 0]),
        Request::Close { abort, .. } => (0, [u64::from(abort), 0, 0, 0, 0, 0]),
        Request::SetOpt { opt, values, .. } => (
            0,
            [
                opt as u64, values[0], values[1], values[2], values[3], values[4],
            ],
        ),
        Request::Info { offset, len, .. } => (0, [offset, len, 0, 0, 0, 0]),
        Request::Recv {
            target,
            len,
            nowait,
            peek,
            ..
        } => {
            let (flags, at) = match target {
                RecvTarget::Region { offset } => (RECV_REGION, offset),
                RecvTarget::Remote { addr } => (RECV_REMOTE, addr),
            };
            let flags =
                flags | if nowait { RECV_NOWAIT } else { 0 } | if peek { RECV_PEEK } else { 0 };
            (flags, [at, len, 0, 0, 0, 0])
        }
    };
    Command {
        opcode: req.opcode() as u16,
        flags,
        sock: req.sock(),
        tag,
        args,
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::decode;
    use crate::layout::Layout;
    use crate::record::{CMD_QUIET, MAX_PRIORITY};
    use proptest::prelude::*;
    use std::vec;

    /// 1 MiB of data area.
    fn layout() -> Layout {
        Layout::new(16, 16, 8, 1 << 20).unwrap()
    }

    const DATA: u64 = 1 << 20;

    /// One valid request of each opcode. The match on [`Opcode`] has no
    /// wildcard: a new opcode does not compile until it has a request
    /// here, and so a test in both directions.
    fn sample(op: Opcode) -> Request {
        let rx = RingSpan {
            offset: 4096,
            len: 4096,
        };
        let tx = RingSpan {
            offset: 8192,
            len: 8192,
        };
        match op {
            Opcode::Nop => Request::Nop,
            Opcode::Socket => Request::Socket {
                kind: SockKind::Tcp,
                rx,
                tx,
            },
            Opcode::Bind => Request::Bind {
                sock: 1,
                addr: 0x0100_000a,
                port: 7,
            },
            Opcode::Listen => Request::Listen {
                sock: 1,
                backlog: 128,
            },
            Opcode::Accept => Request::Accept { sock: 1, rx, tx },
            Opcode::Connect => Request::Connect {
                sock: 2,
                addr: 0x0200_000a,
                port: 80,
            },
            Opcode::Send => Request::Send {
                sock: 2,
                source: SendSource::Zerocopy { offset: 64 },
                len: 100,
                to: None,
                more: true,
            },
            Opcode::RxDone => Request::RxDone { sock: 2 },
            Opcode::Shutdown => Request::Shutdown {
                sock: 2,
                how: crate::SHUT_WR,
            },
            Opcode::Close => Request::Close {
                sock: 2,
                abort: true,
            },
            Opcode::SetOpt => Request::SetOpt {
                sock: 2,
                opt: SockOpt::KeepAlive,
                values: [1, 60, 10, 5, 0],
            },
            Opcode::Info => Request::Info {
                sock: 2,
                offset: 128,
                len: 64,
            },
            Opcode::Arm => Request::Arm { sock: 2 },
            Opcode::Adopt => Request::Adopt { grant: 4, rx, tx },
            Opcode::Recv => Request::Recv {
                sock: 2,
                target: RecvTarget::Remote { addr: 0x7000_0000 },
                len: 65_536,
                nowait: true,
                peek: false,
            },
            Opcode::CancelRecv => Request::CancelRecv { sock: 2 },
        }
    }

    #[test]
    fn every_opcode_has_both_directions() {
        let l = layout();
        let mut seen = 0;
        for v in 0..=u16::MAX {
            let Some(op) = Opcode::from_u16(v) else {
                continue;
            };
            seen += 1;
            let r = sample(op);
            assert_eq!(r.opcode(), op);
            let c = encode(&r, 77);
            assert_eq!((c.opcode, c.tag), (v, 77), "{op:?}");
            assert_eq!(decode(&c, &l), Ok(r), "{op:?}");
            assert_eq!(decode(&c.quiet(), &l), Ok(r), "{op:?} quiet");
        }
        assert_eq!(seen, 16);
    }

    /// The bytes the host wrote by hand before it encoded requests: the
    /// wire layout did not move.
    #[test]
    fn encode_writes_the_documented_layout() {
        let rx = (4096, 4096);
        let tx = (8192, 8192);
        let span = |(offset, len)| RingSpan { offset, len };
        assert_eq!(
            encode(
                &Request::Socket {
                    kind: SockKind::Udp,
                    rx: span(rx),
                    tx: RingSpan::default()
                },
                0
            ),
            Command::new(
                Opcode::Socket,
                0,
                0,
                0,
                [SockKind::Udp as u64, 4096, 4096, 0, 0, 0]
            )
        );
        assert_eq!(
            encode(&Request::Nop, 3),
            Command {
                tag: 3,
                ..Command::default()
            }
        );
        let adopt = Request::Adopt {
            grant: 3,
            rx: span(rx),
            tx: span(tx),
        };
        assert_eq!(
            encode(&adopt, 5),
            Command::new(
                Opcode::Adopt,
                0,
                0,
                5,
                [3, 0, 0, 4096, (8192 << 32) | 4096, 8192]
            )
        );
        let queued = Request::Send {
            sock: 9,
            source: SendSource::RingQueued,
            len: 300,
            to: None,
            more: false,
        };
        assert_eq!(
            encode(&queued, 0).quiet(),
            Command::new(
                Opcode::Send,
                SEND_RING | SEND_QUEUE | CMD_QUIET,
                9,
                0,
                [0, 300, 0, 0, 0, 0]
            )
        );
        let udp = Request::Send {
            sock: 9,
            source: SendSource::Remote { addr: 0x1000 },
            len: 20,
            to: Some((0x0100_000a, 53)),
            more: false,
        };
        assert_eq!(
            encode(&udp, 1),
            Command::new(
                Opcode::Send,
                SEND_REMOTE,
                9,
                1,
                [0x1000, 20, 0x0100_000a, 53, 0, 0]
            )
        );
        let opt = Request::SetOpt {
            sock: 4,
            opt: SockOpt::Priority,
            values: [6, 0, 0, 0, 0],
        };
        assert_eq!(
            encode(&opt, 2),
            Command::new(
                Opcode::SetOpt,
                0,
                4,
                2,
                [SockOpt::Priority as u64, 6, 0, 0, 0, 0]
            )
        );
    }

    fn span() -> impl Strategy<Value = RingSpan> {
        // Multiples of 8, at least 64 bytes, inside the data area.
        (0..DATA / 8 - 8).prop_flat_map(|o| {
            (8..=DATA / 8 - o).prop_map(move |l| RingSpan {
                offset: o * 8,
                len: l * 8,
            })
        })
    }

    fn maybe_span() -> impl Strategy<Value = RingSpan> {
        prop_oneof![Just(RingSpan::default()), span()]
    }

    /// A buffer inside the data area: (offset, len).
    fn buffer() -> impl Strategy<Value = (u64, u64)> {
        (0..=DATA).prop_flat_map(|o| (Just(o), 0..=DATA - o))
    }

    fn sock_opt() -> impl Strategy<Value = SockOpt> {
        (1u64..=10).prop_map(|v| SockOpt::from_u64(v).unwrap())
    }

    fn send_source() -> impl Strategy<Value = (SendSource, u64)> {
        prop_oneof![
            (0..=MAX_SPAN).prop_map(|l| (SendSource::Ring, l)),
            (0..=MAX_SPAN).prop_map(|l| (SendSource::RingQueued, l)),
            (any::<u64>(), 0..=MAX_SPAN).prop_map(|(a, l)| (SendSource::Remote { addr: a }, l)),
            buffer().prop_map(|(o, l)| (SendSource::Zerocopy { offset: o }, l)),
            buffer().prop_map(|(o, l)| (SendSource::Overlap { offset: o }, l)),
            buffer().prop_map(|(o, l)| (SendSource::Queued { offset: o }, l)),
        ]
    }

    /// Every request `decode` can return from [`layout`].
    fn request() -> impl Strategy<Value = Request> {
        let kind = prop_oneof![Just(SockKind::Tcp), Just(SockKind::Udp)];
        let to = prop_oneof![
            Just(None),
            (any::<u32>(), any::<u16>())
                .prop_filter("(0, 0) is no destination", |t| *t != (0, 0))
                .prop_map(Some),
        ];
        prop_oneof![
            Just(Request::Nop),
            (kind, span(), maybe_span()).prop_map(|(kind, rx, tx)| Request::Socket {
                kind,
                rx,
                tx
            }),
            (any::<u32>(), any::<u32>(), any::<u16>())
                .prop_map(|(sock, addr, port)| Request::Bind { sock, addr, port }),
            (any::<u32>(), 1u32..=65_535)
                .prop_map(|(sock, backlog)| Request::Listen { sock, backlog }),
            (any::<u32>(), span(), maybe_span()).prop_map(|(sock, rx, tx)| Request::Accept {
                sock,
                rx,
                tx
            }),
            (any::<u32>(), span(), maybe_span()).prop_map(|(grant, rx, tx)| Request::Adopt {
                grant,
                rx,
                tx
            }),
            (any::<u32>(), any::<u32>(), 1..=u16::MAX)
                .prop_map(|(sock, addr, port)| Request::Connect { sock, addr, port }),
            (any::<u32>(), send_source(), to, any::<bool>()).prop_map(
                |(sock, (source, len), to, more)| Request::Send {
                    sock,
                    source,
                    len,
                    to,
                    more
                }
            ),
            any::<u32>().prop_map(|sock| Request::RxDone { sock }),
            (any::<u32>(), 0..=crate::SHUT_RDWR)
                .prop_map(|(sock, how)| Request::Shutdown { sock, how }),
            (any::<u32>(), any::<bool>()).prop_map(|(sock, abort)| Request::Close { sock, abort }),
            (any::<u32>(), sock_opt(), any::<[u64; 5]>()).prop_map(|(sock, opt, mut values)| {
                if opt == SockOpt::Priority {
                    values[0] %= u64::from(MAX_PRIORITY) + 1;
                }
                Request::SetOpt { sock, opt, values }
            }),
            (any::<u32>(), buffer()).prop_map(|(sock, (offset, len))| Request::Info {
                sock,
                offset,
                len
            }),
            any::<u32>().prop_map(|sock| Request::Arm { sock }),
            (
                any::<u32>(),
                any::<u64>(),
                1..=MAX_SPAN,
                any::<(bool, bool)>()
            )
                .prop_map(|(sock, addr, len, (nowait, peek))| Request::Recv {
                    sock,
                    target: RecvTarget::Remote { addr },
                    len,
                    nowait,
                    peek,
                }),
            (any::<u32>(), buffer(), any::<(bool, bool)>())
                .prop_filter("a receive is not empty", |(_, (_, l), _)| *l > 0)
                .prop_map(|(sock, (offset, len), (nowait, peek))| Request::Recv {
                    sock,
                    target: RecvTarget::Region { offset },
                    len,
                    nowait,
                    peek,
                }),
            any::<u32>().prop_map(|sock| Request::CancelRecv { sock }),
        ]
    }

    proptest! {
        /// What the program encodes, the engine decodes unchanged, quiet
        /// or not, whatever the tag.
        #[test]
        fn decode_inverts_encode(r in request(), tag: u64, quiet: bool) {
            let mut c = encode(&r, tag);
            prop_assert_eq!(c.tag, tag);
            prop_assert_eq!(c.flags & CMD_QUIET, 0);
            if quiet {
                c = c.quiet();
            }
            prop_assert_eq!(decode(&c, &layout()), Ok(r));
        }

        /// And the other way: a command that decodes is, once encoded
        /// again, the same command up to what the wire spells two ways
        /// (unused words, the quiet bit, a listen backlog's clamp).
        #[test]
        fn encode_inverts_decode(opcode in 0u16..16, flags: u16, sock: u32, tag: u64, args: [u64; 6]) {
            let c = Command { opcode, flags, sock, tag, args };
            if let Ok(r) = decode(&c, &layout()) {
                prop_assert_eq!(decode(&encode(&r, tag), &layout()), Ok(r));
            }
        }
    }
}
