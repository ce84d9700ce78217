//! Decoding and checking one command: the first thing the engine does with
//! bytes a program wrote, so it accepts any bytes and either returns a
//! well-formed [`Request`] whose data-area references lie inside the region,
//! or the errno the error completion carries. What it cannot know — whether
//! a socket id is open, whether a remote address is mapped — the engine
//! checks against the program's own sockets and memory. Its inverse, for
//! the program's side, is [`encode`](crate::encode) (in `request.rs`).

use crate::errno::{EFAULT, EINVAL, ENOPROTOOPT, ENOSYS, EPROTONOSUPPORT};
use crate::layout::Layout;
use crate::record::{
    CMD_QUIET, Command, MAX_PRIORITY, Opcode, RECV_NOWAIT, RECV_PEEK, RECV_REGION, RECV_REMOTE,
    SEND_MORE, SEND_OVERLAP, SEND_QUEUE, SEND_REMOTE, SEND_RING, SEND_ZEROCOPY, SHUT_RDWR,
    SockKind, SockOpt,
};
use crate::request::{MAX_SPAN, RecvTarget, Request, RingSpan, SendSource};

fn ring(layout: &Layout, offset: u64, len: u64, required: bool) -> Result<RingSpan, i32> {
    if len == 0 && !required {
        return Ok(RingSpan::default());
    }
    if !(64..=MAX_SPAN).contains(&len) || !offset.is_multiple_of(8) || !len.is_multiple_of(8) {
        return Err(EINVAL);
    }
    if !layout.data_contains(offset, len) {
        return Err(EFAULT);
    }
    Ok(RingSpan { offset, len })
}

fn addr_port(a: u64, p: u64) -> Result<(u32, u16), i32> {
    Ok((
        u32::try_from(a).map_err(|_| EINVAL)?,
        u16::try_from(p).map_err(|_| EINVAL)?,
    ))
}

/// Decodes `cmd` and checks every data-area reference against `layout`.
pub fn decode(cmd: &Command, layout: &Layout) -> Result<Request, i32> {
    let op = Opcode::from_u16(cmd.opcode).ok_or(ENOSYS)?;
    let a = cmd.args;
    let flags = cmd.flags & !CMD_QUIET;
    let sock = cmd.sock;
    if !matches!(op, Opcode::Send | Opcode::Recv) && flags != 0 {
        return Err(EINVAL);
    }
    Ok(match op {
        Opcode::Nop => Request::Nop,
        Opcode::Socket => Request::Socket {
            kind: match a[0] {
                1 => SockKind::Tcp,
                2 => SockKind::Udp,
                _ => return Err(EPROTONOSUPPORT),
            },
            rx: ring(layout, a[1], a[2], true)?,
            tx: ring(layout, a[3], a[4], false)?,
        },
        Opcode::Bind => {
            let (addr, port) = addr_port(a[0], a[1])?;
            Request::Bind { sock, addr, port }
        }
        Opcode::Listen => Request::Listen {
            sock,
            backlog: u32::try_from(a[0].clamp(1, 65_535)).unwrap_or(1),
        },
        Opcode::Accept => Request::Accept {
            sock,
            rx: ring(layout, a[1], a[2], true)?,
            tx: ring(layout, a[3], a[4], false)?,
        },
        Opcode::Adopt => Request::Adopt {
            grant: u32::try_from(a[0]).map_err(|_| EINVAL)?,
            rx: ring(layout, a[3], a[4] & 0xffff_ffff, true)?,
            tx: ring(layout, a[5], a[4] >> 32, false)?,
        },
        Opcode::Connect => {
            let (addr, port) = addr_port(a[0], a[1])?;
            if port == 0 {
                return Err(EINVAL);
            }
            Request::Connect { sock, addr, port }
        }
        Opcode::Send => decode_send(sock, a, flags, layout)?,
        Opcode::RxDone => Request::RxDone { sock },
        Opcode::Shutdown => {
            if a[0] > SHUT_RDWR {
                return Err(EINVAL);
            }
            Request::Shutdown { sock, how: a[0] }
        }
        Opcode::Close => {
            if a[0] > 1 {
                return Err(EINVAL);
            }
            Request::Close {
                sock,
                abort: a[0] == 1,
            }
        }
        Opcode::SetOpt => {
            let opt = SockOpt::from_u64(a[0]).ok_or(ENOPROTOOPT)?;
            // The one option whose range is the interface's own: the port
            // compares a byte ([`SockOpt::Priority`]).
            if opt == SockOpt::Priority && a[1] > u64::from(MAX_PRIORITY) {
                return Err(EINVAL);
            }
            Request::SetOpt {
                sock,
                opt,
                values: [a[1], a[2], a[3], a[4], a[5]],
            }
        }
        Opcode::Info => {
            if !layout.data_contains(a[0], a[1]) {
                return Err(EFAULT);
            }
            Request::Info {
                sock,
                offset: a[0],
                len: a[1],
            }
        }
        Opcode::Arm => Request::Arm { sock },
        Opcode::Recv => decode_recv(sock, a, flags, layout)?,
        Opcode::CancelRecv => Request::CancelRecv { sock },
    })
}

/// `Send`: where the bytes come from (the flags say), checked against `layout`.
fn decode_send(sock: u32, a: [u64; 6], flags: u16, layout: &Layout) -> Result<Request, i32> {
    let len = a[1];
    if len > MAX_SPAN {
        return Err(EINVAL);
    }
    let source = match flags & !SEND_MORE {
        SEND_RING => SendSource::Ring,
        SEND_ZEROCOPY | SEND_OVERLAP => {
            if !layout.data_contains(a[0], len) {
                return Err(EFAULT);
            }
            if flags & SEND_ZEROCOPY != 0 {
                SendSource::Zerocopy { offset: a[0] }
            } else {
                SendSource::Overlap { offset: a[0] }
            }
        }
        SEND_REMOTE => SendSource::Remote { addr: a[0] },
        f if f == SEND_RING | SEND_QUEUE => SendSource::RingQueued,
        f if f == SEND_ZEROCOPY | SEND_QUEUE => {
            if !layout.data_contains(a[0], len) {
                return Err(EFAULT);
            }
            SendSource::Queued { offset: a[0] }
        }
        _ => return Err(EINVAL),
    };
    let to = if a[2] != 0 || a[3] != 0 {
        Some(addr_port(a[2], a[3])?)
    } else {
        None
    };
    Ok(Request::Send {
        sock,
        source,
        len,
        to,
        more: flags & SEND_MORE != 0,
    })
}

/// `Recv`: where the bytes go (the flags say), checked against `layout`.
fn decode_recv(sock: u32, a: [u64; 6], flags: u16, layout: &Layout) -> Result<Request, i32> {
    let len = a[1];
    if len == 0 || len > MAX_SPAN {
        return Err(EINVAL);
    }
    if flags & !(RECV_REGION | RECV_REMOTE | RECV_NOWAIT | RECV_PEEK) != 0 {
        return Err(EINVAL);
    }
    let target = match flags & (RECV_REGION | RECV_REMOTE) {
        RECV_REGION => {
            if !layout.data_contains(a[0], len) {
                return Err(EFAULT);
            }
            RecvTarget::Region { offset: a[0] }
        }
        RECV_REMOTE => RecvTarget::Remote { addr: a[0] },
        _ => return Err(EINVAL),
    };
    Ok(Request::Recv {
        sock,
        target,
        len,
        nowait: flags & RECV_NOWAIT != 0,
        peek: flags & RECV_PEEK != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn layout() -> Layout {
        Layout::new(16, 16, 8, 1 << 20).unwrap()
    }

    #[test]
    fn a_socket_with_rings() {
        let c = Command::socket(1, SockKind::Tcp, (0, 4096), (4096, 8192));
        assert_eq!(
            decode(&c, &layout()),
            Ok(Request::Socket {
                kind: SockKind::Tcp,
                rx: RingSpan {
                    offset: 0,
                    len: 4096
                },
                tx: RingSpan {
                    offset: 4096,
                    len: 8192
                },
            })
        );
    }

    #[test]
    fn adopt_names_a_session_a_socket_and_a_ring_here() {
        let l = layout();
        let c = Command::new(Opcode::Adopt, 0, 0, 0, [3, 0, 0, 4096, 4096, 0]);
        assert_eq!(
            decode(&c, &l),
            Ok(Request::Adopt {
                grant: 3,
                rx: RingSpan {
                    offset: 4096,
                    len: 4096
                },
                tx: RingSpan::default(),
            })
        );
        // A connection's adoption brings a send ring too: its length rides
        // in the high half of the receive ring's length word.
        let stream = Command::new(
            Opcode::Adopt,
            0,
            0,
            0,
            [3, 0, 0, 4096, (8192 << 32) | 4096, 16384],
        );
        match decode(&stream, &l) {
            Ok(Request::Adopt { rx, tx, .. }) => {
                assert_eq!((rx.offset, rx.len), (4096, 4096));
                assert_eq!((tx.offset, tx.len), (16384, 8192));
            }
            other => panic!("{other:?}"),
        }
        let tx_past = Command::new(
            Opcode::Adopt,
            0,
            0,
            0,
            [3, 0, 0, 4096, (8192 << 32) | 4096, 1 << 40],
        );
        assert_eq!(decode(&tx_past, &l), Err(EFAULT));
        let past = Command::new(Opcode::Adopt, 0, 0, 0, [3, 0, 0, 1 << 40, 4096, 0]);
        assert_eq!(decode(&past, &l), Err(EFAULT));
    }

    #[test]
    fn queued_zerocopy_sends_decode_and_need_zerocopy() {
        let l = layout();
        let send =
            |flags: u16, off: u64| Command::new(Opcode::Send, flags, 2, 9, [off, 4096, 0, 0, 0, 0]);
        match decode(&send(SEND_RING | SEND_QUEUE, 0), &l) {
            Ok(Request::Send { source, .. }) => assert_eq!(source, SendSource::RingQueued),
            other => panic!("{other:?}"),
        }
        match decode(&send(SEND_ZEROCOPY | SEND_QUEUE, 4096), &l) {
            Ok(Request::Send { source, len, .. }) => {
                assert_eq!(source, SendSource::Queued { offset: 4096 });
                assert_eq!(len, 4096);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(decode(&send(SEND_QUEUE, 4096), &l), Err(EINVAL));
        assert_eq!(
            decode(&send(SEND_OVERLAP | SEND_QUEUE, 4096), &l),
            Err(EINVAL)
        );
        assert_eq!(
            decode(&send(SEND_ZEROCOPY | SEND_QUEUE, 1 << 40), &l),
            Err(EFAULT)
        );
    }

    #[test]
    fn bad_commands_get_the_right_errno() {
        let l = layout();
        let mut c = Command::socket(1, SockKind::Tcp, (0, 4096), (0, 0));
        c.args[0] = 3;
        assert_eq!(decode(&c, &l), Err(EPROTONOSUPPORT));
        // A ring past the data area, and one overflowing u64.
        let c = Command::socket(1, SockKind::Tcp, (1 << 20, 4096), (0, 0));
        assert_eq!(decode(&c, &l), Err(EFAULT));
        let c = Command::socket(1, SockKind::Tcp, (u64::MAX - 7, 64), (0, 0));
        assert_eq!(decode(&c, &l), Err(EFAULT));
        // No receive ring, a misaligned one, a tiny one.
        for rx in [(0, 0), (4, 4096), (0, 8)] {
            let c = Command::socket(1, SockKind::Tcp, rx, (0, 0));
            assert_eq!(decode(&c, &l), Err(EINVAL), "{rx:?}");
        }
        let c = Command {
            opcode: 99,
            ..Command::default()
        };
        assert_eq!(decode(&c, &l), Err(ENOSYS));
        // Two send sources at once; none.
        let c = Command::new(
            Opcode::Send,
            SEND_RING | SEND_REMOTE,
            0,
            0,
            [0, 1, 0, 0, 0, 0],
        );
        assert_eq!(decode(&c, &l), Err(EINVAL));
        let c = Command::new(Opcode::Send, 0, 0, 0, [0, 1, 0, 0, 0, 0]);
        assert_eq!(decode(&c, &l), Err(EINVAL));
        // A zero-copy buffer outside the area.
        let c = Command::new(Opcode::Send, SEND_ZEROCOPY, 0, 0, [1 << 20, 1, 0, 0, 0, 0]);
        assert_eq!(decode(&c, &l), Err(EFAULT));
        // Port out of range; connect to port 0.
        let c = Command::new(Opcode::Connect, 0, 0, 0, [1, 70_000, 0, 0, 0, 0]);
        assert_eq!(decode(&c, &l), Err(EINVAL));
        let c = Command::new(Opcode::Connect, 0, 0, 0, [1, 0, 0, 0, 0, 0]);
        assert_eq!(decode(&c, &l), Err(EINVAL));
        let c = Command::new(Opcode::SetOpt, 0, 0, 0, [77, 0, 0, 0, 0, 0]);
        assert_eq!(decode(&c, &l), Err(ENOPROTOOPT));
        // Flags on an opcode that has none.
        let c = Command::new(Opcode::Listen, SEND_RING, 0, 0, [1, 0, 0, 0, 0, 0]);
        assert_eq!(decode(&c, &l), Err(EINVAL));
    }

    #[test]
    fn a_posted_receive_names_one_place() {
        let l = layout();
        let c = Command::new(
            Opcode::Recv,
            RECV_REMOTE,
            4,
            0,
            [0x7000_0000, 65_536, 0, 0, 0, 0],
        );
        assert_eq!(
            decode(&c, &l),
            Ok(Request::Recv {
                sock: 4,
                target: RecvTarget::Remote { addr: 0x7000_0000 },
                len: 65_536,
                nowait: false,
                peek: false,
            })
        );
        let c = Command::new(Opcode::Recv, RECV_REGION, 4, 0, [64, 4096, 0, 0, 0, 0]);
        assert_eq!(
            decode(&c, &l),
            Ok(Request::Recv {
                sock: 4,
                target: RecvTarget::Region { offset: 64 },
                len: 4096,
                nowait: false,
                peek: false,
            })
        );
        // At once, and without consuming: a shared connection's reads.
        let c = Command::new(
            Opcode::Recv,
            RECV_REGION | RECV_NOWAIT | RECV_PEEK,
            4,
            0,
            [64, 4096, 0, 0, 0, 0],
        );
        assert_eq!(
            decode(&c, &l),
            Ok(Request::Recv {
                sock: 4,
                target: RecvTarget::Region { offset: 64 },
                len: 4096,
                nowait: true,
                peek: true,
            })
        );
        // Outside the data area; both places; neither; empty; too long.
        let c = Command::new(Opcode::Recv, RECV_REGION, 4, 0, [1 << 20, 4096, 0, 0, 0, 0]);
        assert_eq!(decode(&c, &l), Err(EFAULT));
        for (flags, len) in [
            (RECV_REGION | RECV_REMOTE, 64),
            (0, 64),
            (RECV_REMOTE, 0),
            (RECV_REMOTE, MAX_SPAN + 1),
            (RECV_REMOTE | 1 << 9, 64),
        ] {
            let c = Command::new(Opcode::Recv, flags, 4, 0, [64, len, 0, 0, 0, 0]);
            assert_eq!(decode(&c, &l), Err(EINVAL), "{flags} {len}");
        }
        let c = Command::new(Opcode::CancelRecv, 0, 4, 0, [0; 6]);
        assert_eq!(decode(&c, &l), Ok(Request::CancelRecv { sock: 4 }));
    }

    /// `SO_PRIORITY` decodes with its value; past a byte it is refused
    /// here, before the engine sees it.
    #[test]
    fn a_priority_decodes_within_a_byte() {
        let l = layout();
        let set = |v: u64| {
            Command::new(
                Opcode::SetOpt,
                0,
                5,
                0,
                [SockOpt::Priority as u64, v, 0, 0, 0, 0],
            )
        };
        for v in [0, 6, 7, u64::from(MAX_PRIORITY)] {
            assert_eq!(
                decode(&set(v), &l),
                Ok(Request::SetOpt {
                    sock: 5,
                    opt: SockOpt::Priority,
                    values: [v, 0, 0, 0, 0],
                }),
                "{v}"
            );
        }
        for v in [u64::from(MAX_PRIORITY) + 1, 1 << 32, u64::MAX] {
            assert_eq!(decode(&set(v), &l), Err(EINVAL), "{v}");
        }
        // Other options' values stay the engine's to judge.
        let tos = Command::new(
            Opcode::SetOpt,
            0,
            5,
            0,
            [SockOpt::Tos as u64, 256, 0, 0, 0, 0],
        );
        assert!(decode(&tos, &l).is_ok());
    }

    #[test]
    fn quiet_is_allowed_everywhere() {
        let c = Command::new(Opcode::RxDone, CMD_QUIET, 3, 0, [0; 6]);
        assert_eq!(decode(&c, &layout()), Ok(Request::RxDone { sock: 3 }));
    }

    proptest! {
        /// Any bytes decode or fail; whatever decodes names only the data
        /// area.
        #[test]
        fn any_command_is_safe(opcode in 0u16..16, flags: u16, sock: u32, args: [u64; 6]) {
            let l = layout();
            let c = Command { opcode, flags, sock, tag: 0, args };
            match decode(&c, &l) {
                Ok(Request::Socket { rx, tx, .. } | Request::Accept { rx, tx, .. }) => {
                    prop_assert!(l.data_contains(rx.offset, rx.len) && rx.len > 0);
                    prop_assert!(l.data_contains(tx.offset, tx.len));
                }
                Ok(Request::Send { source: SendSource::Zerocopy { offset } | SendSource::Overlap { offset }, len, .. }) => {
                    prop_assert!(l.data_contains(offset, len));
                }
                Ok(Request::Info { offset, len, .. }) => prop_assert!(l.data_contains(offset, len)),
                Ok(Request::SetOpt { opt: SockOpt::Priority, values, .. }) => {
                    prop_assert!(values[0] <= u64::from(MAX_PRIORITY));
                }
                _ => {}
            }
        }

        /// Any `SO_PRIORITY` value decodes exactly when it fits the byte
        /// the port compares.
        #[test]
        fn a_priority_decodes_only_within_range(v: u64, rest: [u64; 4]) {
            let c = Command::new(
                Opcode::SetOpt,
                0,
                1,
                0,
                [SockOpt::Priority as u64, v, rest[0], rest[1], rest[2], rest[3]],
            );
            let ok = decode(&c, &layout()).is_ok();
            prop_assert_eq!(ok, v <= u64::from(MAX_PRIORITY));
        }
    }
}
