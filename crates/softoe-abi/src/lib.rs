//! # softoe-abi: the messaging unit between host programs and the engine
//!
//! A host program talks to the softoe engine through one shared memory
//! region per process, as HL-TCP's messaging unit does across the PCI bus:
//! socket calls become fixed-size **commands** (opcode, socket id,
//! parameters) on a ring the program produces and the engine consumes, and
//! results come back as **completions** on a second ring. This crate is that
//! contract and nothing else: `#![no_std]`, `#[repr(C)]`, versioned, with a
//! generated C header (`include/softoe_abi.h`) so programs in any language can
//! speak it.
//!
//! ```text
//!  offset 0            header (1 KiB): magic, version, sizes, ring indices,
//!                      each index on its own 128-byte line
//!  cmd_offset          command ring:    cmd_entries × 64-byte Command
//!  cmp_offset          completion ring: cmp_entries × 32-byte Completion
//!  socks_offset        socket table:    socks_entries × 128-byte SockSlot
//!  data_offset         data area: send buffers and per-socket rings
//! ```
//!
//! ## Who writes what
//!
//! The engine creates the region (a sealed memfd, so the program can neither
//! shrink nor grow it) and writes the header once. Afterwards each word has
//! exactly one writer: the program writes the command ring's tail, the
//! completion ring's head, its waiting count and each socket's `rx_head`;
//! the engine writes everything else. The data area belongs to the program:
//! it places each socket's receive ring and (for the `copy` send policy) its
//! send ring there and tells the engine where, and it allocates zero-copy
//! send buffers from the rest.
//!
//! ## Trust
//!
//! The engine trusts nothing it reads from a region. It keeps its own copy
//! of the [`Layout`] and never re-reads the header; every index read from a
//! ring is checked against the ring's size ([`RingError::Corrupt`]); every
//! command goes through [`decode`], and every offset, length and socket id
//! it names is checked against that program's own region and sockets. A
//! program can corrupt only itself.
//!
//! ## Example
//!
//! ```
//! use softoe_abi::{Layout, Opcode, Region, Request, RingSpan, SockKind, decode, encode};
//!
//! // A region in ordinary memory (the engine maps a memfd instead).
//! let layout = Layout::new(64, 64, 16, 1 << 16).unwrap();
//! let mut mem = vec![0u128; layout.region_len() as usize / 16];
//! // SAFETY: `mem` is 16-byte aligned, large enough, and outlives `region`.
//! let region = unsafe { Region::init(mem.as_mut_ptr().cast(), layout, 1) };
//!
//! // The program's side: a typed request, encoded under a tag of its choice.
//! let req = Request::Socket {
//!     kind: SockKind::Tcp,
//!     rx: RingSpan { offset: 0, len: 4096 },
//!     tx: RingSpan { offset: 4096, len: 4096 },
//! };
//! let mut cmds = region.command_producer();
//! cmds.push(&encode(&req, 7)).unwrap();
//!
//! // The engine's side: raw bytes it trusts nothing of, decoded and checked.
//! let mut engine_side = region.command_consumer();
//! let got = engine_side.pop().unwrap().unwrap();
//! assert_eq!((got.opcode, got.tag), (Opcode::Socket as u16, 7));
//! assert_eq!(decode(&got, region.layout()), Ok(req));
//! ```
//!
//! [`Request`] is the one typed definition of a command: [`encode`] and
//! [`decode`] are its two directions (smoltcp's `emit` and `parse`), held
//! inverse by a property test.

#![no_std]
#![allow(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

mod attach;
mod decode;
mod layout;
mod record;
mod request;
mod ring;
mod slot;

pub use attach::{
    ATTACH_MAGIC, BELL_MAGIC, Bell, BellOp, Hello, LIMIT_SESSIONS, LIMIT_USER_MEMORY,
    LIMIT_USER_SESSIONS, MAX_BELLS, WATCH_NAME, Welcome,
};
pub use decode::decode;
pub use layout::{
    ENGINE_POLLING, ENGINE_SLEEPING, Layout, LayoutError, MAGIC, RegionHeader, SESSION_CLOSED,
    VERSION,
};
pub use record::{
    CMD_QUIET, CMP_RELEASE, CONGESTION_CUBIC, CONGESTION_RENO, Command, Completion, MAX_PRIORITY,
    Opcode, RECV_NOWAIT, RECV_PEEK, RECV_REGION, RECV_REMOTE, SEND_MORE, SEND_OVERLAP, SEND_QUEUE,
    SEND_REMOTE, SEND_RING, SEND_ZEROCOPY, SHUT_RD, SHUT_RDWR, SHUT_WR, SockKind, SockOpt,
    TCPI_OPT_SACK, TCPI_OPT_TIMESTAMPS, TCPI_OPT_WSCALE, TcpInfoRecord, pack_addr, unpack_addr,
};
pub use request::{MAX_SPAN, RecvTarget, Request, RingSpan, SendSource, encode};
pub use ring::{Consumer, Producer, RingError};
pub use slot::{
    EV_ACCEPT, EV_CONNECTED, EV_ERR, EV_HELD, EV_HUP, EV_RDHUP, EV_READABLE, EV_RXFULL, EV_SHARED,
    EV_WRITABLE, SlotView, SockSlot, UdpHeader, WANT_READ, WANT_WRITE, waiter_bell, waiter_word,
};

pub use layout::Region;

/// Error numbers carried in completions: Linux's values, so a shim can hand
/// them to `errno` unchanged.
pub mod errno {
    #![allow(missing_docs)]
    pub const EPERM: i32 = 1;
    pub const ENOENT: i32 = 2;
    pub const EINTR: i32 = 4;
    pub const EIO: i32 = 5;
    pub const EBADF: i32 = 9;
    pub const EAGAIN: i32 = 11;
    pub const ENOMEM: i32 = 12;
    pub const EACCES: i32 = 13;
    pub const EFAULT: i32 = 14;
    pub const EBUSY: i32 = 16;
    pub const EEXIST: i32 = 17;
    pub const ENODEV: i32 = 19;
    pub const EINVAL: i32 = 22;
    pub const EMFILE: i32 = 24;
    pub const ENOSPC: i32 = 28;
    pub const EPIPE: i32 = 32;
    pub const ENOSYS: i32 = 38;
    pub const ENOTSOCK: i32 = 88;
    pub const EDESTADDRREQ: i32 = 89;
    pub const EMSGSIZE: i32 = 90;
    pub const EPROTOTYPE: i32 = 91;
    pub const ENOPROTOOPT: i32 = 92;
    pub const EPROTONOSUPPORT: i32 = 93;
    pub const EOPNOTSUPP: i32 = 95;
    pub const EAFNOSUPPORT: i32 = 97;
    pub const EADDRINUSE: i32 = 98;
    pub const EADDRNOTAVAIL: i32 = 99;
    pub const ENETUNREACH: i32 = 101;
    pub const ECONNABORTED: i32 = 103;
    pub const ECONNRESET: i32 = 104;
    pub const ENOBUFS: i32 = 105;
    pub const EISCONN: i32 = 106;
    pub const ENOTCONN: i32 = 107;
    pub const ETIMEDOUT: i32 = 110;
    pub const ECONNREFUSED: i32 = 111;
    pub const EHOSTUNREACH: i32 = 113;
    pub const EALREADY: i32 = 114;
    pub const EINPROGRESS: i32 = 115;
    pub const ECANCELED: i32 = 125;
}
