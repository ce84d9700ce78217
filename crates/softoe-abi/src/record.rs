//! Command and completion records.
//!
//! A command is 64 bytes: an opcode, flags, the socket id it acts on, a tag
//! the program chooses (echoed in the completion, so any number of commands
//! can be in flight), and six parameters whose meaning depends on the opcode
//! (see [`Opcode`]). A completion is 32 bytes: the tag, a result (≥ 0) or a
//! negative errno, the socket id, flags and one extra word.

use core::mem::size_of;

/// One command, program → engine.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Command {
    /// An [`Opcode`] (as `u16`).
    pub opcode: u16,
    /// Opcode-specific flags (`SEND_*`, [`CMD_QUIET`]).
    pub flags: u16,
    /// The socket id (a slot of the socket table); ignored by `SOCKET` and
    /// `NOP`.
    pub sock: u32,
    /// Chosen by the program; echoed in the completion.
    pub tag: u64,
    /// Parameters; see [`Opcode`].
    pub args: [u64; 6],
}

/// One completion, engine → program.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    /// The command's tag.
    pub tag: u64,
    /// The result (≥ 0) or a negated errno ([`errno`](crate::errno)).
    pub result: i64,
    /// The socket id the command named (or created).
    pub sock: u32,
    /// [`CMP_RELEASE`] or 0.
    pub flags: u32,
    /// Opcode-specific: the peer address for `ACCEPT`
    /// ([`pack_addr`]), the local address for `CONNECT` and `BIND`.
    pub aux: u64,
}

const _: () = {
    assert!(size_of::<Command>() == 64);
    assert!(size_of::<Completion>() == 32);
};

/// What a command asks for. Parameters are `args[0..6]`; offsets are into
/// the region's data area; addresses are IPv4 in network byte order held in
/// the low 32 bits; ports are in host byte order.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Opcode {
    /// Does nothing; completes with 0 (a ring round trip).
    Nop = 0,
    /// Creates a socket. `args`: kind ([`SockKind`]), receive ring offset,
    /// receive ring length, send ring offset, send ring length (0 without a
    /// send ring). Result: the new socket id.
    Socket = 1,
    /// Binds. `args`: address, port (0: any). `aux`: the bound address.
    Bind = 2,
    /// Listens. `args`: backlog.
    Listen = 3,
    /// Takes one waiting connection from a listener. `args[1..5]`: the new
    /// socket's rings as for `SOCKET`. Result: the new socket id; `-EAGAIN`
    /// when none waits (wait for `EV_ACCEPT`). `aux`: the peer.
    Accept = 4,
    /// Connects. `args`: address, port. Completes when the connection is
    /// established or fails; `aux`: the local address.
    Connect = 5,
    /// Sends. `flags`: one source (`SEND_RING`, `SEND_ZEROCOPY`,
    /// `SEND_OVERLAP`, `SEND_REMOTE`), optionally `SEND_MORE`. `args`:
    /// offset (or address for `SEND_REMOTE`), length; for UDP also the
    /// destination address and port. Result: bytes taken. A zero-copy send
    /// completes twice: once when taken, once with [`CMP_RELEASE`] when the
    /// peer has acknowledged every byte and the buffer is the program's again.
    Send = 6,
    /// The program consumed bytes from a full receive ring: the engine may
    /// move more into it; also ends [`EV_HELD`](crate::EV_HELD) (the bytes
    /// held for a posted buffer go into the ring). No parameters.
    RxDone = 7,
    /// Shuts down. `args`: how ([`SHUT_RD`], [`SHUT_WR`], [`SHUT_RDWR`]).
    Shutdown = 8,
    /// Closes the socket id. `args`: 1 to abort (send RST). The id is free
    /// at once; a second completion with [`CMP_RELEASE`] says when the
    /// engine no longer reads the socket's rings.
    Close = 9,
    /// Sets an option. `args`: a [`SockOpt`], then its values.
    SetOpt = 10,
    /// Writes a [`TcpInfoRecord`] to the data area. `args`: offset, length.
    /// Result: bytes written.
    Info = 11,
    /// Asks the engine to resend the socket's readiness (after the program
    /// changed its `interest`). No parameters.
    Arm = 12,
    /// Joins a socket another process holds (one it inherited across
    /// `fork` or `exec`, or received over a Unix socket) into this
    /// session. The session must first have proved it holds the socket's
    /// descriptor: a [`BellOp::Claim`](crate::BellOp::Claim) answered with
    /// a grant, the only thing an `ADOPT` may name, once. `args`: the
    /// grant in `args[0]` (`args[1]`, `args[2]`: zero), this socket's
    /// receive ring offset in `args[3]`, the receive ring's length in the
    /// low 32 bits of `args[4]` and the send ring's in the high 32, and the
    /// send ring's offset in `args[5]`. Result: the new socket id.
    ///
    /// A listener is shared: every holder accepts from it. A connection is
    /// shared too: every holder reads and writes it through the engine,
    /// each byte delivered once and in order. `-ENOENT` for a grant this
    /// session was not given (or has used), `-EALREADY` when this session
    /// holds the socket already.
    Adopt = 13,
    /// Posts a receive buffer (direct placement): the next bytes the
    /// connection receives go straight into it instead of the receive
    /// ring, and the command completes with how many were placed (0: end
    /// of stream) as soon as any were. `flags`: [`RECV_REMOTE`] (`args[0]`
    /// is an address in the program, written by `process_vm_writev`) or
    /// [`RECV_REGION`] (`args[0]` is a data-area offset). `args[1]`: the
    /// length. `-EAGAIN` at once while the receive ring holds unread bytes
    /// (read those first: the stream stays in order); `-EBUSY` while
    /// another receive is posted on the socket. With [`RECV_NOWAIT`] it
    /// completes at once, `-EAGAIN` if nothing is there; with
    /// [`RECV_PEEK`] the bytes stay where they were. On a connection other
    /// sessions hold too ([`EV_SHARED`](crate::EV_SHARED)) this is how
    /// every read is made.
    Recv = 14,
    /// Takes back the buffer posted by `RECV` on this socket: the `RECV`
    /// completes (with the bytes placed so far, or `-ECANCELED`) before
    /// this one does. Result 0, or `-ENOENT` when none was posted (it had
    /// completed already).
    CancelRecv = 15,
}

impl Opcode {
    /// The opcode a raw value names.
    pub fn from_u16(v: u16) -> Option<Opcode> {
        Some(match v {
            0 => Opcode::Nop,
            1 => Opcode::Socket,
            2 => Opcode::Bind,
            3 => Opcode::Listen,
            4 => Opcode::Accept,
            5 => Opcode::Connect,
            6 => Opcode::Send,
            7 => Opcode::RxDone,
            8 => Opcode::Shutdown,
            9 => Opcode::Close,
            10 => Opcode::SetOpt,
            11 => Opcode::Info,
            12 => Opcode::Arm,
            13 => Opcode::Adopt,
            14 => Opcode::Recv,
            15 => Opcode::CancelRecv,
            _ => return None,
        })
    }
}

/// Complete only on error (any opcode but `SOCKET`, `ACCEPT`, `CONNECT`).
pub const CMD_QUIET: u16 = 1 << 15;
/// Send what the program wrote into the socket's send ring (the `copy`
/// policy): `args[1]` bytes after what it sent before.
pub const SEND_RING: u16 = 1 << 0;
/// Send from a buffer in the data area, by reference: released on ACK.
pub const SEND_ZEROCOPY: u16 = 1 << 1;
/// Send from a buffer in the data area; the engine copies it and releases it
/// when the copy is made (the result completion).
pub const SEND_OVERLAP: u16 = 1 << 2;
/// Send from the program's own memory (an address, not an offset): the
/// engine reads it with `process_vm_readv`, then releases it.
pub const SEND_REMOTE: u16 = 1 << 3;
/// More data follows at once: hold a partial segment (like `MSG_MORE`).
pub const SEND_MORE: u16 = 1 << 4;
/// With [`SEND_ZEROCOPY`] on a TCP socket: the engine queues the whole
/// buffer and hands it to the stack, in order, as room frees, so the
/// program never waits for the command. Its one completion is the release
/// ([`CMP_RELEASE`]): the buffer's length once the peer acknowledged it, a
/// smaller count if the connection closed with only that much sent, or a
/// negated errno (nothing sent). With [`SEND_RING`]: the engine takes all
/// `args[1]` ring bytes into the socket's queue (they must fit in the ring
/// beside what is unacknowledged) and answers at once with their count;
/// sent with [`CMD_QUIET`], only an error is answered. A TCP socket's queue
/// keeps the order of both kinds, and a `SHUT_WR` sends its FIN after it.
pub const SEND_QUEUE: u16 = 1 << 5;
/// The completion releases a buffer or a socket's rings.
pub const CMP_RELEASE: u32 = 1 << 0;
/// `RECV` flag: the buffer is at an address in the program's memory.
pub const RECV_REMOTE: u16 = 1 << 0;
/// `RECV` flag: the buffer is in the data area.
pub const RECV_REGION: u16 = 1 << 1;
/// `RECV` flag: complete at once — with the bytes there are, or
/// `-EAGAIN` when none are (a non-blocking read of a shared connection).
pub const RECV_NOWAIT: u16 = 1 << 2;
/// `RECV` flag: copy the next bytes without consuming them (`MSG_PEEK`).
pub const RECV_PEEK: u16 = 1 << 3;

/// Shut down the receive side.
pub const SHUT_RD: u64 = 0;
/// Shut down the send side (FIN after the data sent so far).
pub const SHUT_WR: u64 = 1;
/// Both.
pub const SHUT_RDWR: u64 = 2;

/// Socket kinds for `SOCKET`.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SockKind {
    /// A TCP socket.
    Tcp = 1,
    /// A UDP socket.
    Udp = 2,
}

/// Options for `SETOPT` (`args[0]`), values in `args[1..]`.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SockOpt {
    /// `TCP_NODELAY`: on (1) or off (0).
    NoDelay = 1,
    /// `SO_KEEPALIVE` with `TCP_KEEPIDLE`, `TCP_KEEPINTVL` (seconds) and
    /// `TCP_KEEPCNT`: on, idle, interval, count.
    KeepAlive = 2,
    /// `TCP_USER_TIMEOUT`: milliseconds (0: off).
    UserTimeout = 3,
    /// `TCP_CORK`: on or off.
    Cork = 4,
    /// Send policy default for this socket (0 copy, 1 zerocopy, 2 overlap):
    /// recorded for `softoe stat`.
    Policy = 5,
    /// `IP_TOS`: the TOS byte of the socket's IPv4 packets. Set before
    /// `CONNECT` or `LISTEN`, the first SYN (or SYN-ACK) carries it; a
    /// listener's passes to the connections it accepts. TCP sockets keep
    /// the ECN bits zero.
    Tos = 6,
    /// `IP_TTL`: the TTL of the socket's packets, 1..=255; 0 is the
    /// engine's default. Set and inherited as [`SockOpt::Tos`].
    Ttl = 7,
    /// `TCP_CONGESTION`: [`CONGESTION_RENO`] or [`CONGESTION_CUBIC`]; any
    /// other value is refused with `ENOENT`. A connection switching keeps
    /// its window; a listener's passes to what it accepts.
    Congestion = 8,
    /// `TCP_QUICKACK`: 1 acknowledges every segment at once from now on,
    /// 0 delays acknowledgements again (the default).
    QuickAck = 9,
    /// `SO_PRIORITY`: the class the socket's frames are handed to the port
    /// with, 0..=255 (0, the default, is best effort); a bonded port's
    /// `prioritized` policy sends those at or above its threshold over its
    /// real-time members. Linux lets an unprivileged program set 0..=6 and
    /// a `CAP_NET_ADMIN` one any `u32`; the engine takes 0..=255 from any
    /// program (the port's scheduler compares a byte) and refuses more with
    /// `EINVAL` — a shim holding a larger value sends 255. Set before
    /// `CONNECT` or `LISTEN`, the first SYN (or SYN-ACK) goes with it; a
    /// listener's passes to the connections it accepts. Unlike
    /// [`SockOpt::Tos`]'s first segment, it matters at any time: set on a
    /// live connection (or a bound UDP socket), the next frame goes with
    /// the new class, as Linux applies it to every later packet.
    Priority = 10,
    /// `SO_REUSEPORT`: on (1) or off (0), set before `BIND` and `LISTEN`.
    /// A TCP socket with it may listen where listeners of the same user
    /// that set it too already listen, and the group shares the new
    /// connections (a hash of each four-tuple picks the listener, as on
    /// Linux); `BIND` then refuses (`EADDRINUSE`) only what `LISTEN`
    /// would, as Linux refuses at `bind`. An engine from before the
    /// option answers `ENOPROTOOPT`.
    ReusePort = 11,
}

/// The largest [`SockOpt::Priority`] the engine takes.
pub const MAX_PRIORITY: u32 = 255;

/// [`SockOpt::Congestion`] and [`TcpInfoRecord::congestion`]: RFC 5681/6582
/// NewReno, Linux's `reno`.
pub const CONGESTION_RENO: u32 = 1;
/// [`SockOpt::Congestion`] and [`TcpInfoRecord::congestion`]: RFC 9438
/// CUBIC, Linux's `cubic`.
pub const CONGESTION_CUBIC: u32 = 2;

impl SockOpt {
    /// The option a raw value names.
    pub fn from_u64(v: u64) -> Option<SockOpt> {
        Some(match v {
            1 => SockOpt::NoDelay,
            2 => SockOpt::KeepAlive,
            3 => SockOpt::UserTimeout,
            4 => SockOpt::Cork,
            5 => SockOpt::Policy,
            6 => SockOpt::Tos,
            7 => SockOpt::Ttl,
            8 => SockOpt::Congestion,
            9 => SockOpt::QuickAck,
            10 => SockOpt::Priority,
            11 => SockOpt::ReusePort,
            _ => return None,
        })
    }
}

/// What `INFO` writes: the fields of Linux's `struct tcp_info` that
/// programs read, in softoe's units (microseconds, bytes, segments).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpInfoRecord {
    /// Linux `TCP_*` state number (1 ESTABLISHED … 11 CLOSING).
    pub state: u32,
    /// Sender MSS.
    pub snd_mss: u32,
    /// Smoothed RTT, µs.
    pub rtt_us: u32,
    /// RTT variation, µs.
    pub rttvar_us: u32,
    /// Retransmission timeout, µs.
    pub rto_us: u32,
    /// Congestion window, segments.
    pub snd_cwnd: u32,
    /// Slow-start threshold, segments.
    pub snd_ssthresh: u32,
    /// Segments retransmitted in total.
    pub total_retrans: u32,
    /// Bytes the peer acknowledged.
    pub bytes_acked: u64,
    /// Bytes received in order.
    pub bytes_received: u64,
    /// Segments sent.
    pub segs_out: u64,
    /// Segments received.
    pub segs_in: u64,
    /// Local address ([`pack_addr`]).
    pub local: u64,
    /// Remote address ([`pack_addr`]).
    pub remote: u64,
    /// The congestion control algorithm in use: [`CONGESTION_RENO`] or
    /// [`CONGESTION_CUBIC`].
    pub congestion: u32,
    /// The socket's `SO_PRIORITY` ([`SockOpt::Priority`]): what it was
    /// given, or what the listener that accepted it had. An engine from
    /// before the option wrote zero here, the default.
    pub priority: u32,
    /// The options the handshake agreed, as Linux's `tcpi_options`:
    /// [`TCPI_OPT_TIMESTAMPS`], [`TCPI_OPT_SACK`], [`TCPI_OPT_WSCALE`].
    /// An engine from before this field wrote nothing here (zero).
    pub options: u32,
    /// The window scales, as Linux packs `tcpi_snd_wscale` and
    /// `tcpi_rcv_wscale`: the peer's shift in the low four bits, ours in
    /// the next four (zero without [`TCPI_OPT_WSCALE`]).
    pub wscale: u32,
}

/// [`TcpInfoRecord::options`]: both sides send timestamps (RFC 7323).
pub const TCPI_OPT_TIMESTAMPS: u32 = 1;
/// [`TcpInfoRecord::options`]: SACK is permitted (RFC 2018).
pub const TCPI_OPT_SACK: u32 = 2;
/// [`TcpInfoRecord::options`]: both sides scale their windows (RFC 7323).
pub const TCPI_OPT_WSCALE: u32 = 4;

impl TcpInfoRecord {
    /// Whether the connection carries timestamps.
    pub fn timestamps(&self) -> bool {
        self.options & TCPI_OPT_TIMESTAMPS != 0
    }

    /// Whether the connection uses SACK.
    pub fn sack(&self) -> bool {
        self.options & TCPI_OPT_SACK != 0
    }

    /// The window-scale shifts (ours, the peer's) when both sides scale.
    pub fn wscale(&self) -> Option<(u8, u8)> {
        (self.options & TCPI_OPT_WSCALE != 0)
            .then_some((((self.wscale >> 4) & 0xf) as u8, (self.wscale & 0xf) as u8))
    }
}

/// Packs an IPv4 address (network order, as in `in_addr`) and a port into
/// one word: address in the high 32 bits, port in the low 16.
pub const fn pack_addr(addr_be: u32, port: u16) -> u64 {
    ((addr_be as u64) << 32) | port as u64
}

/// The address (network order) and port [`pack_addr`] packed.
pub const fn unpack_addr(v: u64) -> (u32, u16) {
    ((v >> 32) as u32, v as u16)
}

impl Command {
    /// A `NOP` ([`Request::Nop`](crate::Request::Nop) encoded).
    pub fn nop(tag: u64) -> Command {
        crate::encode(&crate::Request::Nop, tag)
    }

    /// A `SOCKET` with its receive and send rings (offset, length):
    /// [`Request::Socket`](crate::Request::Socket) encoded.
    pub fn socket(tag: u64, kind: SockKind, rx: (u64, u64), tx: (u64, u64)) -> Command {
        let span = |(offset, len)| crate::RingSpan { offset, len };
        crate::encode(
            &crate::Request::Socket {
                kind,
                rx: span(rx),
                tx: span(tx),
            },
            tag,
        )
    }

    /// The same command, answered only if it fails ([`CMD_QUIET`]).
    pub fn quiet(mut self) -> Command {
        self.flags |= CMD_QUIET;
        self
    }

    /// Any other opcode on socket `sock` with `args`, as written (a
    /// [`Request`](crate::Request) and [`encode`](crate::encode) spell
    /// each opcode's parameters).
    pub fn new(op: Opcode, flags: u16, sock: u32, tag: u64, args: [u64; 6]) -> Command {
        Command {
            opcode: op as u16,
            flags,
            sock,
            tag,
            args,
        }
    }
}

impl Completion {
    /// The result: a count, a socket id or 0 (`Ok`), or the errno
    /// (`Err`), as [`errno`](Completion::errno) reads it.
    pub fn outcome(&self) -> Result<u64, i32> {
        match self.errno() {
            Some(e) => Err(e),
            None => Ok(self.result as u64),
        }
    }

    /// Whether this completion releases a buffer or a socket's rings
    /// ([`CMP_RELEASE`]) rather than answering its command.
    pub fn is_release(&self) -> bool {
        self.flags & CMP_RELEASE != 0
    }

    /// The address in `aux` ([`unpack_addr`]): the peer of an `ACCEPT`,
    /// the local address of a `CONNECT` or `BIND`.
    pub fn addr(&self) -> (u32, u16) {
        unpack_addr(self.aux)
    }

    /// Whether this is an error, and which.
    pub fn errno(&self) -> Option<i32> {
        (self.result < 0).then(|| {
            self.result
                .checked_neg()
                .and_then(|e| i32::try_from(e).ok())
                .unwrap_or(crate::errno::EIO)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcodes_round_trip() {
        for v in 0..=20u16 {
            if let Some(op) = Opcode::from_u16(v) {
                assert_eq!(op as u16, v);
            }
        }
        assert_eq!(Opcode::from_u16(16), None);
        let mut named = 0;
        for v in 0..=12u64 {
            if let Some(o) = SockOpt::from_u64(v) {
                assert_eq!(o as u64, v);
                named += 1;
            }
        }
        assert_eq!(named, 11, "options 1..=11");
        assert_eq!(SockOpt::from_u64(11), Some(SockOpt::ReusePort));
        assert_eq!(SockOpt::from_u64(12), None);
    }

    #[test]
    fn addresses_pack() {
        let v = pack_addr(0x0a00_0001u32.to_be(), 8080);
        assert_eq!(unpack_addr(v), (0x0a00_0001u32.to_be(), 8080));
    }

    #[test]
    fn errno_of_completion() {
        let c = Completion {
            result: -111,
            ..Completion::default()
        };
        assert_eq!(c.errno(), Some(111));
        let c = Completion {
            result: i64::MIN,
            ..Completion::default()
        };
        assert_eq!(c.errno(), Some(crate::errno::EIO));
        assert_eq!(c.outcome(), Err(crate::errno::EIO));
        let c = Completion {
            result: 42,
            flags: CMP_RELEASE,
            aux: pack_addr(0x0100_000a, 80),
            ..Completion::default()
        };
        assert_eq!(c.outcome(), Ok(42));
        assert!(c.is_release());
        assert_eq!(c.addr(), (0x0100_000a, 80));
        let c = Completion {
            result: -11,
            ..Completion::default()
        };
        assert_eq!(c.outcome(), Err(crate::errno::EAGAIN));
        assert!(!c.is_release());
    }
}
