//! Sockets over the shared region.
//!
//! Every handle — [`TcpStream`] (with its reading half [`TcpReader`]),
//! [`TcpListener`], [`UdpSocket`] — holds one socket id of the session with
//! its receive and send rings (`Sock`), and a `Mode` saying how it waits.
//! The types are defined here; what they do is in one file per concern:
//!
//! | file | what |
//! |---|---|
//! | `sock.rs` | the shared socket: opening, rings, slot, close on drop |
//! | `wait.rs` | waiting on one socket (spin, then a bell of its own) |
//! | `open.rs` | connect, listen, bind, adopt from another session |
//! | `listener.rs` | accept |
//! | `stream.rs` | a connection's addresses, modes, shutdown, `TCP_INFO` |
//! | `send.rs` | send policies, writes, zero-copy and overlap sends |
//! | `recv.rs` | reads from the ring, direct placement |
//! | `zcbuf.rs` | buffers in the data area and their release |
//! | `udp.rs` | datagrams |
//! | `options.rs` | socket options |
//! | `poll.rs` | readiness and waiting on several sockets |
//!
//! Every command goes out as a typed [`softoe_abi::Request`] (the abi's
//! `encode` writes its wire form); completions are read with
//! [`softoe_abi::Completion::outcome`].

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;

use softoe_abi::RingSpan;

use crate::client::Client;
use crate::spin::Spin;

mod listener;
mod open;
mod options;
mod poll;
mod recv;
mod send;
mod sock;
// Reads a `TcpInfoRecord` out of the shared region into its bytes.
#[allow(unsafe_code)]
mod stream;
mod udp;
mod wait;
mod zcbuf;

pub use options::{Congestion, Keepalive, TcpOptions};
pub use poll::{Interest, Pollable, Readiness};
pub(crate) use poll::{readiness, slot_readiness};
pub use send::SendPolicy;
pub use stream::SlotState;

/// The socket address an (address in network order, port) pair names.
fn addr_of((a, p): (u32, u16)) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::from(u32::from_be(a)), p)
}

/// `a` as the (address in network order, port) pair requests carry.
fn packed(a: SocketAddrV4) -> (u32, u16) {
    (u32::from(*a.ip()).to_be(), a.port())
}

/// One socket id with its rings: closed when the last handle goes, its
/// rings freed when the engine releases them.
#[derive(Debug)]
struct Sock {
    c: Client,
    id: u32,
    rx: RingSpan,
    tx: RingSpan,
    /// The close already sent (by `abort`), 0 if none.
    closed: std::sync::atomic::AtomicU64,
    /// `SO_ERROR` was read (it reports the error once).
    error_taken: std::sync::atomic::AtomicBool,
    /// The sending half was shut down: writes fail with `EPIPE`.
    wr_shut: std::sync::atomic::AtomicBool,
    /// Spin budgets of this socket's waits to read and to write.
    rx_spin: Spin,
    tx_spin: Spin,
    /// The `SO_PRIORITY` last set through this handle (what a listener's
    /// or a UDP socket's [`priority`](TcpListener::priority) answers: the
    /// engine's `INFO` serves connections only).
    priority: std::sync::atomic::AtomicU32,
    /// The buffer reads of a shared connection post (`RECV`), made at the
    /// first; its lock is held by such a read from its post to its copy
    /// out. Not the receive ring: the engine may take the ring up again
    /// (the connection no longer shared) as soon as the last read's
    /// answer is out, before this read has copied its bytes.
    shared_rx: std::sync::Mutex<Option<RingSpan>>,
}

/// How one handle waits.
#[derive(Clone, Copy, Debug, Default)]
struct Mode {
    nonblocking: bool,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
}

/// A TCP connection.
#[derive(Debug)]
pub struct TcpStream {
    s: Arc<Sock>,
    mode: Mode,
    policy: SendPolicy,
    /// Send-ring bytes the engine has taken.
    tx_queued: u64,
    /// Made by a connect that returned before the handshake ended
    /// ([`Client::tcp_connect_nonblocking`]) and not yet found established
    /// by [`TcpStream::connect_status`]: Linux's next `connect` says 0
    /// once, then `EISCONN`.
    connect_unreported: bool,
}

/// The reading half of a [`TcpStream`], for another thread
/// ([`TcpStream::try_clone_reader`]). One reader at a time.
#[derive(Debug)]
pub struct TcpReader {
    s: Arc<Sock>,
    mode: Mode,
}

/// A listening TCP socket.
#[derive(Debug)]
pub struct TcpListener {
    s: Sock,
    mode: Mode,
}

/// A socket another process held, taken into this session by its
/// descriptor ([`Client::take`]).
#[derive(Debug)]
pub enum Taken {
    /// A connection, shared with the processes that hold it.
    Stream(TcpStream),
    /// A listener, shared with the processes that hold it.
    Listener(TcpListener),
}

/// A UDP socket.
#[derive(Debug)]
pub struct UdpSocket {
    s: Sock,
    mode: Mode,
}

/// A buffer in the shared data area, for zero-copy and overlap sends.
#[derive(Debug)]
pub struct ZcBuf {
    c: Client,
    off: u64,
    len: u64,
    in_flight: Option<u64>,
    /// Bytes of the last zero-copy send.
    sent: u64,
    /// Its release's result, once known (bytes acknowledged, or the errno).
    outcome: Option<Result<u64, i32>>,
}
