/* softoe host interface: shared region, rings, records (ABI version 1). */

#ifndef SOFTOE_ABI_H
#define SOFTOE_ABI_H

/* Generated from crates/softoe-abi by cbindgen: do not edit. */

#include <stdint.h>

/**
 * The first word of both messages: `b"softoeAT"` little-endian.
 */
#define softoe_ATTACH_MAGIC 6071245302040784755

/**
 * The first word of the bell messages: `b"softoeBL"` little-endian.
 */
#define softoe_BELL_MAGIC 5495066024714071923

/**
 * Most waiter bells a session may register (bits of
 * [`RegionHeader::bells_armed`](crate::RegionHeader::bells_armed)).
 */
#define softoe_MAX_BELLS 64

/**
 * [`Welcome::limit`]: the engine holds as many sessions as it may.
 */
#define softoe_LIMIT_SESSIONS 1

/**
 * [`Welcome::limit`]: the program's user holds as many sessions as one
 * user may.
 */
#define softoe_LIMIT_USER_SESSIONS 2

/**
 * [`Welcome::limit`]: the program's user's sessions hold as much shared
 * memory as one user may (the new session's region would pass it).
 */
#define softoe_LIMIT_USER_MEMORY 3

/**
 * The first eight bytes of every region: `b"softoe\0\x01"` read as a
 * little-endian `u64`.
 */
#define softoe_MAGIC 72169123406573427

/**
 * The ABI version this crate speaks. A program refuses a region whose
 * version differs.
 */
#define softoe_VERSION 5

/**
 * The engine is polling its rings (`RegionHeader::engine_state`).
 */
#define softoe_ENGINE_POLLING 0

/**
 * The engine sleeps: ring its doorbell after posting commands.
 */
#define softoe_ENGINE_SLEEPING 1

/**
 * The engine has closed this session (the program broke the protocol or
 * the engine is stopping): every socket is gone.
 */
#define softoe_SESSION_CLOSED 2

/**
 * Complete only on error (any opcode but `SOCKET`, `ACCEPT`, `CONNECT`).
 */
#define softoe_CMD_QUIET (1 << 15)

/**
 * Send what the program wrote into the socket's send ring (the `copy`
 * policy): `args[1]` bytes after what it sent before.
 */
#define softoe_SEND_RING (1 << 0)

/**
 * Send from a buffer in the data area, by reference: released on ACK.
 */
#define softoe_SEND_ZEROCOPY (1 << 1)

/**
 * Send from a buffer in the data area; the engine copies it and releases it
 * when the copy is made (the result completion).
 */
#define softoe_SEND_OVERLAP (1 << 2)

/**
 * Send from the program's own memory (an address, not an offset): the
 * engine reads it with `process_vm_readv`, then releases it.
 */
#define softoe_SEND_REMOTE (1 << 3)

/**
 * More data follows at once: hold a partial segment (like `MSG_MORE`).
 */
#define softoe_SEND_MORE (1 << 4)

/**
 * With [`SEND_ZEROCOPY`] on a TCP socket: the engine queues the whole
 * buffer and hands it to the stack, in order, as room frees, so the
 * program never waits for the command. Its one completion is the release
 * ([`CMP_RELEASE`]): the buffer's length once the peer acknowledged it, a
 * smaller count if the connection closed with only that much sent, or a
 * negated errno (nothing sent). With [`SEND_RING`]: the engine takes all
 * `args[1]` ring bytes into the socket's queue (they must fit in the ring
 * beside what is unacknowledged) and answers at once with their count;
 * sent with [`CMD_QUIET`], only an error is answered. A TCP socket's queue
 * keeps the order of both kinds, and a `SHUT_WR` sends its FIN after it.
 */
#define softoe_SEND_QUEUE (1 << 5)

/**
 * The completion releases a buffer or a socket's rings.
 */
#define softoe_CMP_RELEASE (1 << 0)

/**
 * `RECV` flag: the buffer is at an address in the program's memory.
 */
#define softoe_RECV_REMOTE (1 << 0)

/**
 * `RECV` flag: the buffer is in the data area.
 */
#define softoe_RECV_REGION (1 << 1)

/**
 * `RECV` flag: complete at once — with the bytes there are, or
 * `-EAGAIN` when none are (a non-blocking read of a shared connection).
 */
#define softoe_RECV_NOWAIT (1 << 2)

/**
 * `RECV` flag: copy the next bytes without consuming them (`MSG_PEEK`).
 */
#define softoe_RECV_PEEK (1 << 3)

/**
 * Shut down the receive side.
 */
#define softoe_SHUT_RD 0

/**
 * Shut down the send side (FIN after the data sent so far).
 */
#define softoe_SHUT_WR 1

/**
 * Both.
 */
#define softoe_SHUT_RDWR 2

/**
 * The largest [`SockOpt::Priority`] the engine takes.
 */
#define softoe_MAX_PRIORITY 255

/**
 * [`SockOpt::Congestion`] and [`TcpInfoRecord::congestion`]: RFC 5681/6582
 * NewReno, Linux's `reno`.
 */
#define softoe_CONGESTION_RENO 1

/**
 * [`SockOpt::Congestion`] and [`TcpInfoRecord::congestion`]: RFC 9438
 * CUBIC, Linux's `cubic`.
 */
#define softoe_CONGESTION_CUBIC 2

/**
 * [`TcpInfoRecord::options`]: both sides send timestamps (RFC 7323).
 */
#define softoe_TCPI_OPT_TIMESTAMPS 1

/**
 * [`TcpInfoRecord::options`]: SACK is permitted (RFC 2018).
 */
#define softoe_TCPI_OPT_SACK 2

/**
 * [`TcpInfoRecord::options`]: both sides scale their windows (RFC 7323).
 */
#define softoe_TCPI_OPT_WSCALE 4

/**
 * The largest ring or single send the engine accepts: 1 GiB.
 */
#define softoe_MAX_SPAN (1 << 30)

/**
 * Bytes wait in the receive ring (or, on a listener, see [`EV_ACCEPT`]).
 */
#define softoe_EV_READABLE (1 << 0)

/**
 * The socket can take more data.
 */
#define softoe_EV_WRITABLE (1 << 1)

/**
 * The peer sent FIN: nothing follows the bytes up to `rx_tail`.
 */
#define softoe_EV_RDHUP (1 << 2)

/**
 * Both directions are closed.
 */
#define softoe_EV_HUP (1 << 3)

/**
 * The connection failed; `error` says why.
 */
#define softoe_EV_ERR (1 << 4)

/**
 * The connection is established.
 */
#define softoe_EV_CONNECTED (1 << 5)

/**
 * A listener has connections waiting for `ACCEPT`.
 */
#define softoe_EV_ACCEPT (1 << 6)

/**
 * The engine holds received data the ring could not take: post `RXDONE`
 * after taking bytes from the ring, or they wait.
 */
#define softoe_EV_RXFULL (1 << 7)

/**
 * Received bytes wait in the engine for the next posted buffer (`RECV`):
 * after a read placed directly, the engine keeps what follows out of the
 * ring so that the next large read is placed directly too. Post `RECV`,
 * or `RXDONE` to have the bytes moved into the ring.
 */
#define softoe_EV_HELD (1 << 8)

/**
 * Other sessions hold this connection too (processes that share it after
 * `fork`, `exec` or `SCM_RIGHTS`), and any of them may read next: the
 * receive ring is not used while this is set. Every read is a `RECV`
 * (with `RECV_NOWAIT` when it must not wait, `RECV_PEEK` to peek), so
 * the engine hands each byte to exactly one reader, in order;
 * [`EV_HELD`] says bytes wait. Bytes the ring held when the connection
 * became shared are taken back by the engine first (it moves `rx_head`
 * to `rx_tail` with a compare-and-swap, as readers do).
 */
#define softoe_EV_SHARED (1 << 10)

/**
 * The program waits to read (`interest`).
 */
#define softoe_WANT_READ (1 << 0)

/**
 * The program waits to write (`interest`).
 */
#define softoe_WANT_WRITE (1 << 1)

#define softoe_EACCES 13

#define softoe_ENODEV 19

#define softoe_EDESTADDRREQ 89

#define softoe_ECANCELED 125

/**
 * What a command asks for. Parameters are `args[0..6]`; offsets are into
 * the region's data area; addresses are IPv4 in network byte order held in
 * the low 32 bits; ports are in host byte order.
 */
enum softoe_Opcode
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint16_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  /**
   * Does nothing; completes with 0 (a ring round trip).
   */
  SOFTOE_OPCODE_NOP = 0,
  /**
   * Creates a socket. `args`: kind ([`SockKind`]), receive ring offset,
   * receive ring length, send ring offset, send ring length (0 without a
   * send ring). Result: the new socket id.
   */
  SOFTOE_OPCODE_SOCKET = 1,
  /**
   * Binds. `args`: address, port (0: any). `aux`: the bound address.
   */
  SOFTOE_OPCODE_BIND = 2,
  /**
   * Listens. `args`: backlog.
   */
  SOFTOE_OPCODE_LISTEN = 3,
  /**
   * Takes one waiting connection from a listener. `args[1..5]`: the new
   * socket's rings as for `SOCKET`. Result: the new socket id; `-EAGAIN`
   * when none waits (wait for `EV_ACCEPT`). `aux`: the peer.
   */
  SOFTOE_OPCODE_ACCEPT = 4,
  /**
   * Connects. `args`: address, port. Completes when the connection is
   * established or fails; `aux`: the local address.
   */
  SOFTOE_OPCODE_CONNECT = 5,
  /**
   * Sends. `flags`: one source (`SEND_RING`, `SEND_ZEROCOPY`,
   * `SEND_OVERLAP`, `SEND_REMOTE`), optionally `SEND_MORE`. `args`:
   * offset (or address for `SEND_REMOTE`), length; for UDP also the
   * destination address and port. Result: bytes taken. A zero-copy send
   * completes twice: once when taken, once with [`CMP_RELEASE`] when the
   * peer has acknowledged every byte and the buffer is the program's again.
   */
  SOFTOE_OPCODE_SEND = 6,
  /**
   * The program consumed bytes from a full receive ring: the engine may
   * move more into it; also ends [`EV_HELD`](crate::EV_HELD) (the bytes
   * held for a posted buffer go into the ring). No parameters.
   */
  SOFTOE_OPCODE_RX_DONE = 7,
  /**
   * Shuts down. `args`: how ([`SHUT_RD`], [`SHUT_WR`], [`SHUT_RDWR`]).
   */
  SOFTOE_OPCODE_SHUTDOWN = 8,
  /**
   * Closes the socket id. `args`: 1 to abort (send RST). The id is free
   * at once; a second completion with [`CMP_RELEASE`] says when the
   * engine no longer reads the socket's rings.
   */
  SOFTOE_OPCODE_CLOSE = 9,
  /**
   * Sets an option. `args`: a [`SockOpt`], then its values.
   */
  SOFTOE_OPCODE_SET_OPT = 10,
  /**
   * Writes a [`TcpInfoRecord`] to the data area. `args`: offset, length.
   * Result: bytes written.
   */
  SOFTOE_OPCODE_INFO = 11,
  /**
   * Asks the engine to resend the socket's readiness (after the program
   * changed its `interest`). No parameters.
   */
  SOFTOE_OPCODE_ARM = 12,
  /**
   * Joins a socket another process holds (one it inherited across
   * `fork` or `exec`, or received over a Unix socket) into this
   * session. The session must first have proved it holds the socket's
   * descriptor: a [`BellOp::Claim`](crate::BellOp::Claim) answered with
   * a grant, the only thing an `ADOPT` may name, once. `args`: the
   * grant in `args[0]` (`args[1]`, `args[2]`: zero), this socket's
   * receive ring offset in `args[3]`, the receive ring's length in the
   * low 32 bits of `args[4]` and the send ring's in the high 32, and the
   * send ring's offset in `args[5]`. Result: the new socket id.
   *
   * A listener is shared: every holder accepts from it. A connection is
   * shared too: every holder reads and writes it through the engine,
   * each byte delivered once and in order. `-ENOENT` for a grant this
   * session was not given (or has used), `-EALREADY` when this session
   * holds the socket already.
   */
  SOFTOE_OPCODE_ADOPT = 13,
  /**
   * Posts a receive buffer (direct placement): the next bytes the
   * connection receives go straight into it instead of the receive
   * ring, and the command completes with how many were placed (0: end
   * of stream) as soon as any were. `flags`: [`RECV_REMOTE`] (`args[0]`
   * is an address in the program, written by `process_vm_writev`) or
   * [`RECV_REGION`] (`args[0]` is a data-area offset). `args[1]`: the
   * length. `-EAGAIN` at once while the receive ring holds unread bytes
   * (read those first: the stream stays in order); `-EBUSY` while
   * another receive is posted on the socket. With [`RECV_NOWAIT`] it
   * completes at once, `-EAGAIN` if nothing is there; with
   * [`RECV_PEEK`] the bytes stay where they were. On a connection other
   * sessions hold too ([`EV_SHARED`](crate::EV_SHARED)) this is how
   * every read is made.
   */
  SOFTOE_OPCODE_RECV = 14,
  /**
   * Takes back the buffer posted by `RECV` on this socket: the `RECV`
   * completes (with the bytes placed so far, or `-ECANCELED`) before
   * this one does. Result 0, or `-ENOENT` when none was posted (it had
   * completed already).
   */
  SOFTOE_OPCODE_CANCEL_RECV = 15,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum softoe_Opcode softoe_Opcode;
#else
typedef uint16_t softoe_Opcode;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * Socket kinds for `SOCKET`.
 */
enum softoe_SockKind
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint64_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  /**
   * A TCP socket.
   */
  SOFTOE_SOCK_KIND_TCP = 1,
  /**
   * A UDP socket.
   */
  SOFTOE_SOCK_KIND_UDP = 2,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum softoe_SockKind softoe_SockKind;
#else
typedef uint64_t softoe_SockKind;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * Options for `SETOPT` (`args[0]`), values in `args[1..]`.
 */
enum softoe_SockOpt
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint64_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  /**
   * `TCP_NODELAY`: on (1) or off (0).
   */
  SOFTOE_SOCK_OPT_NO_DELAY = 1,
  /**
   * `SO_KEEPALIVE` with `TCP_KEEPIDLE`, `TCP_KEEPINTVL` (seconds) and
   * `TCP_KEEPCNT`: on, idle, interval, count.
   */
  SOFTOE_SOCK_OPT_KEEP_ALIVE = 2,
  /**
   * `TCP_USER_TIMEOUT`: milliseconds (0: off).
   */
  SOFTOE_SOCK_OPT_USER_TIMEOUT = 3,
  /**
   * `TCP_CORK`: on or off.
   */
  SOFTOE_SOCK_OPT_CORK = 4,
  /**
   * Send policy default for this socket (0 copy, 1 zerocopy, 2 overlap):
   * recorded for `softoe stat`.
   */
  SOFTOE_SOCK_OPT_POLICY = 5,
  /**
   * `IP_TOS`: the TOS byte of the socket's IPv4 packets. Set before
   * `CONNECT` or `LISTEN`, the first SYN (or SYN-ACK) carries it; a
   * listener's passes to the connections it accepts. TCP sockets keep
   * the ECN bits zero.
   */
  SOFTOE_SOCK_OPT_TOS = 6,
  /**
   * `IP_TTL`: the TTL of the socket's packets, 1..=255; 0 is the
   * engine's default. Set and inherited as [`SockOpt::Tos`].
   */
  SOFTOE_SOCK_OPT_TTL = 7,
  /**
   * `TCP_CONGESTION`: [`CONGESTION_RENO`] or [`CONGESTION_CUBIC`]; any
   * other value is refused with `ENOENT`. A connection switching keeps
   * its window; a listener's passes to what it accepts.
   */
  SOFTOE_SOCK_OPT_CONGESTION = 8,
  /**
   * `TCP_QUICKACK`: 1 acknowledges every segment at once from now on,
   * 0 delays acknowledgements again (the default).
   */
  SOFTOE_SOCK_OPT_QUICK_ACK = 9,
  /**
   * `SO_PRIORITY`: the class the socket's frames are handed to the port
   * with, 0..=255 (0, the default, is best effort); a bonded port's
   * `prioritized` policy sends those at or above its threshold over its
   * real-time members. Linux lets an unprivileged program set 0..=6 and
   * a `CAP_NET_ADMIN` one any `u32`; the engine takes 0..=255 from any
   * program (the port's scheduler compares a byte) and refuses more with
   * `EINVAL` — a shim holding a larger value sends 255. Set before
   * `CONNECT` or `LISTEN`, the first SYN (or SYN-ACK) goes with it; a
   * listener's passes to the connections it accepts. Unlike
   * [`SockOpt::Tos`]'s first segment, it matters at any time: set on a
   * live connection (or a bound UDP socket), the next frame goes with
   * the new class, as Linux applies it to every later packet.
   */
  SOFTOE_SOCK_OPT_PRIORITY = 10,
  /**
   * `SO_REUSEPORT`: on (1) or off (0), set before `BIND` and `LISTEN`.
   * A TCP socket with it may listen where listeners of the same user
   * that set it too already listen, and the group shares the new
   * connections (a hash of each four-tuple picks the listener, as on
   * Linux); `BIND` then refuses (`EADDRINUSE`) only what `LISTEN`
   * would, as Linux refuses at `bind`. An engine from before the
   * option answers `ENOPROTOOPT`.
   */
  SOFTOE_SOCK_OPT_REUSE_PORT = 11,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum softoe_SockOpt softoe_SockOpt;
#else
typedef uint64_t softoe_SockOpt;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

/**
 * Program → engine: what it asks for. The engine clamps each size to its
 * limits and rounds rings up to powers of two.
 */
typedef struct {
  /**
   * [`ATTACH_MAGIC`].
   */
  uint64_t magic;
  /**
   * [`VERSION`](crate::VERSION).
   */
  uint32_t version;
  /**
   * Command ring entries wanted.
   */
  uint32_t cmd_entries;
  /**
   * Completion ring entries wanted.
   */
  uint32_t cmp_entries;
  /**
   * Socket slots wanted.
   */
  uint32_t socks;
  /**
   * Data-area bytes wanted.
   */
  uint64_t data_len;
} softoe_Hello;

/**
 * Engine → program, with the three descriptors.
 */
typedef struct {
  /**
   * [`ATTACH_MAGIC`].
   */
  uint64_t magic;
  /**
   * The engine's [`VERSION`](crate::VERSION).
   */
  uint32_t version;
  /**
   * 0, or a negated errno (then no descriptors follow).
   */
  int32_t status;
  /**
   * The session number.
   */
  uint32_t session;
  /**
   * 0, or on a refusal the limit that refused the attach
   * ([`LIMIT_SESSIONS`], [`LIMIT_USER_SESSIONS`], [`LIMIT_USER_MEMORY`]);
   * then `region_len` is that limit's value.
   */
  uint32_t limit;
  /**
   * Bytes to map from the memfd.
   */
  uint64_t region_len;
} softoe_Welcome;

/**
 * The header at offset 0 of a region, 1 KiB. Line 0 is written once by the
 * engine when it creates the region; every other line holds one word with
 * one writer, alone on its 128-byte line so the two sides do not share
 * cache lines (x86-64 prefetches line pairs).
 */
typedef struct {
  /**
   * [`MAGIC`].
   */
  uint64_t magic;
  /**
   * [`VERSION`].
   */
  uint32_t version;
  /**
   * `size_of::<RegionHeader>()`.
   */
  uint32_t header_len;
  /**
   * Bytes in the whole region.
   */
  uint64_t region_len;
  /**
   * Offset of the command ring's entries.
   */
  uint64_t cmd_offset;
  /**
   * Offset of the completion ring's entries.
   */
  uint64_t cmp_offset;
  /**
   * Offset of the socket table.
   */
  uint64_t socks_offset;
  /**
   * Offset of the data area.
   */
  uint64_t data_offset;
  /**
   * Bytes in the data area.
   */
  uint64_t data_len;
  /**
   * Entries in the command ring (a power of two).
   */
  uint32_t cmd_entries;
  /**
   * Entries in the completion ring (a power of two).
   */
  uint32_t cmp_entries;
  /**
   * Entries in the socket table: socket ids are `0..socks_entries`.
   */
  uint32_t socks_entries;
  /**
   * The engine's number for this session (as `softoe stat` shows it).
   */
  uint32_t session;
  /**
   * Unused (zero). ABI 3 kept a session secret here that let whoever
   * read the region adopt its sockets; authority over a socket is now
   * holding its descriptor ([`BellOp::Claim`](crate::BellOp::Claim)).
   */
  uint64_t _reserved[2];
  /**
   * Offset of the changed-sockets bitmap: one bit per socket id, set by
   * the engine whenever it bumps that slot's `seq`, taken (swapped to
   * zero) by the program's selector — readiness for many sockets at a
   * cost that grows with the sockets that changed, not with those open.
   */
  uint64_t changed_offset;
  /**
   * The name of the interface the engine's port is on, NUL-padded (all
   * zero: not told): what `SO_BINDTODEVICE` may name. Written once by
   * the engine before the program sees the region, as two words.
   */
  uint8_t device[16];
  /**
   * The congestion control algorithm the engine gives a TCP socket that
   * asks for none ([`CONGESTION_RENO`](crate::CONGESTION_RENO),
   * [`CONGESTION_CUBIC`](crate::CONGESTION_CUBIC); 0: not told).
   * Written once by the engine before the program sees the region.
   */
  uint32_t congestion;
  uint8_t _pad0[4];
  /**
   * Commands the engine has consumed (engine writes).
   */
  uint32_t cmd_head;
  uint8_t _pad1[124];
  /**
   * Commands the program has posted (program writes).
   */
  uint32_t cmd_tail;
  uint8_t _pad2[124];
  /**
   * Completions the program has consumed (program writes).
   */
  uint32_t cmp_head;
  uint8_t _pad3[124];
  /**
   * Completions the engine has posted (engine writes).
   */
  uint32_t cmp_tail;
  uint8_t _pad4[124];
  /**
   * [`ENGINE_POLLING`], [`ENGINE_SLEEPING`] or [`SESSION_CLOSED`]
   * (engine writes).
   */
  uint32_t engine_state;
  uint8_t _pad5[124];
  /**
   * How many of the program's threads sleep waiting for the engine; the
   * engine rings the program's doorbell only when this is non-zero
   * (program writes).
   */
  uint32_t app_waiting;
  uint32_t _pad6a;
  /**
   * Waiter doorbells armed, one bit per index registered with a
   * [`Bell`](crate::Bell) message: the engine rings each armed bell (and
   * the session's own doorbell only for waiters without one) when it
   * rings the program (program writes).
   */
  uint64_t bells_armed;
  uint8_t _pad6[112];
  /**
   * Bumped by the engine after every batch of completions or socket
   * events; a futex word a program may wait on (engine writes).
   */
  uint32_t event_seq;
  uint8_t _pad7[124];
} softoe_RegionHeader;

/**
 * One command, program → engine.
 */
typedef struct {
  /**
   * An [`Opcode`] (as `u16`).
   */
  uint16_t opcode;
  /**
   * Opcode-specific flags (`SEND_*`, [`CMD_QUIET`]).
   */
  uint16_t flags;
  /**
   * The socket id (a slot of the socket table); ignored by `SOCKET` and
   * `NOP`.
   */
  uint32_t sock;
  /**
   * Chosen by the program; echoed in the completion.
   */
  uint64_t tag;
  /**
   * Parameters; see [`Opcode`].
   */
  uint64_t args[6];
} softoe_Command;

/**
 * One completion, engine → program.
 */
typedef struct {
  /**
   * The command's tag.
   */
  uint64_t tag;
  /**
   * The result (≥ 0) or a negated errno ([`errno`](crate::errno)).
   */
  int64_t result;
  /**
   * The socket id the command named (or created).
   */
  uint32_t sock;
  /**
   * [`CMP_RELEASE`] or 0.
   */
  uint32_t flags;
  /**
   * Opcode-specific: the peer address for `ACCEPT`
   * ([`pack_addr`]), the local address for `CONNECT` and `BIND`.
   */
  uint64_t aux;
} softoe_Completion;

/**
 * One socket's shared state.
 */
typedef struct {
  /**
   * `EV_*` bits (engine writes).
   */
  uint32_t events;
  /**
   * Why the connection failed, an errno; 0 (engine writes).
   */
  uint32_t error;
  /**
   * Bytes the engine has placed in the receive ring (engine writes).
   */
  uint64_t rx_tail;
  /**
   * Send-ring bytes the engine no longer needs (engine writes).
   */
  uint64_t tx_acked;
  /**
   * Local address, [`pack_addr`](crate::pack_addr) (engine writes).
   */
  uint64_t local;
  /**
   * Remote address (engine writes).
   */
  uint64_t remote;
  /**
   * Bumped whenever `events` changes or the socket makes progress
   * (bytes placed in the receive ring, send space freed) (engine
   * writes). A program that is refused a send reads it *before* the
   * send and waits for it to move.
   */
  uint32_t seq;
  uint8_t _pad0[4];
  /**
   * When something a reader waits for arose (bytes placed, a
   * connection to accept, the peer's FIN, a failure), as the session's
   * event count: written by the engine at the first such change since
   * the program took it ([`SlotView::take_stamps`] swaps it to 0), so it
   * says which socket became ready first. 0: nothing since.
   */
  uint64_t rx_at;
  /**
   * The same for what a writer waits for (room freed, connected, a
   * failure).
   */
  uint64_t tx_at;
  /**
   * Bytes the program has taken from the receive ring (program writes).
   */
  uint64_t rx_head;
  /**
   * `WANT_*` bits (program writes).
   */
  uint32_t interest;
  /**
   * The thread asleep waiting to read this socket (or accept from it),
   * 0 if none: in the low 8 bits the index of its waiter bell
   * ([`Bell`](crate::Bell)) plus one, above them a count the thread
   * bumps before every sleep. The engine rings that bell when it changes
   * the slot — once per value of the word, so a thread still waking up
   * is not rung again and again — and a socket's news wakes the thread
   * that waits for it and no other (program writes; [`waiter_word`]).
   */
  uint32_t rx_waiter;
  /**
   * The same for a thread waiting to write (program writes).
   */
  uint32_t tx_waiter;
  uint8_t _pad1[44];
} softoe_SockSlot;

/**
 * The header of one datagram in a UDP socket's receive ring.
 */
typedef struct {
  /**
   * Payload bytes that follow.
   */
  uint32_t len;
  /**
   * Sender's port (host order).
   */
  uint16_t port;
  /**
   * Reserved.
   */
  uint16_t _pad;
  /**
   * Sender's address (network order).
   */
  uint32_t addr;
  /**
   * Reserved.
   */
  uint32_t _pad2;
} softoe_UdpHeader;

/**
 * What `INFO` writes: the fields of Linux's `struct tcp_info` that
 * programs read, in softoe's units (microseconds, bytes, segments).
 */
typedef struct {
  /**
   * Linux `TCP_*` state number (1 ESTABLISHED … 11 CLOSING).
   */
  uint32_t state;
  /**
   * Sender MSS.
   */
  uint32_t snd_mss;
  /**
   * Smoothed RTT, µs.
   */
  uint32_t rtt_us;
  /**
   * RTT variation, µs.
   */
  uint32_t rttvar_us;
  /**
   * Retransmission timeout, µs.
   */
  uint32_t rto_us;
  /**
   * Congestion window, segments.
   */
  uint32_t snd_cwnd;
  /**
   * Slow-start threshold, segments.
   */
  uint32_t snd_ssthresh;
  /**
   * Segments retransmitted in total.
   */
  uint32_t total_retrans;
  /**
   * Bytes the peer acknowledged.
   */
  uint64_t bytes_acked;
  /**
   * Bytes received in order.
   */
  uint64_t bytes_received;
  /**
   * Segments sent.
   */
  uint64_t segs_out;
  /**
   * Segments received.
   */
  uint64_t segs_in;
  /**
   * Local address ([`pack_addr`]).
   */
  uint64_t local;
  /**
   * Remote address ([`pack_addr`]).
   */
  uint64_t remote;
  /**
   * The congestion control algorithm in use: [`CONGESTION_RENO`] or
   * [`CONGESTION_CUBIC`].
   */
  uint32_t congestion;
  /**
   * The socket's `SO_PRIORITY` ([`SockOpt::Priority`]): what it was
   * given, or what the listener that accepted it had. An engine from
   * before the option wrote zero here, the default.
   */
  uint32_t priority;
  /**
   * The options the handshake agreed, as Linux's `tcpi_options`:
   * [`TCPI_OPT_TIMESTAMPS`], [`TCPI_OPT_SACK`], [`TCPI_OPT_WSCALE`].
   * An engine from before this field wrote nothing here (zero).
   */
  uint32_t options;
  /**
   * The window scales, as Linux packs `tcpi_snd_wscale` and
   * `tcpi_rcv_wscale`: the peer's shift in the low four bits, ours in
   * the next four (zero without [`TCPI_OPT_WSCALE`]).
   */
  uint32_t wscale;
} softoe_TcpInfoRecord;

#endif  /* SOFTOE_ABI_H */
