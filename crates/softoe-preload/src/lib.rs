//! # softoe-preload: unmodified programs on the softoe engine
//!
//! `LD_PRELOAD=libsoftoe_preload.so PROGRAM` (or `softoe run -- PROGRAM`)
//! puts this library in front of libc's socket calls. IPv4 TCP and UDP
//! sockets whose address the [`rules`] give to softoe are served by
//! the engine through [`softoe_host`]: the program's `send` becomes a
//! command the engine carries out by reading the program's buffer itself
//! (`process_vm_readv`), its `recv` copies from the socket's receive ring
//! in shared memory, and its `poll`/`select`/`epoll_wait` wait on softoe
//! sockets and kernel descriptors in one kernel call (each waiting thread
//! has its own doorbell, [`softoe_host::Waiter`]).
//!
//! Every other descriptor — files, pipes, Unix sockets, loopback, IPv6 —
//! goes straight to libc after one bit test, so a program pays nothing for
//! the shim on calls softoe does not serve.
//!
//! What is served: `socket`, `bind`, `listen`, `accept`/`accept4`,
//! `connect` (blocking, and non-blocking with `SO_ERROR`), `getsockname`,
//! `getpeername`, `getsockopt`/`setsockopt` (Linux's answers; which
//! options the engine honours, which it records and which it refuses with
//! `ENOPROTOOPT` and a warning naming them: see `opts/`), `send`,
//! `sendto`, `sendmsg`, `sendmmsg`, `recv`, `recvfrom`, `recvmsg` (with
//! `MSG_ERRQUEUE`: `EAGAIN`, no error queue), `recvmmsg` (`MSG_WAITFORONE`,
//! the timeout), `read`, `write`, `readv`, `writev`, `splice` (a pipe on the
//! other side), `close`, `shutdown`, `fcntl`, `ioctl` (`FIONBIO`,
//! `FIONREAD`), `poll`, `ppoll`, `select`, `pselect`, `epoll_*` (level and
//! edge triggered, one-shot, `EPOLLRDHUP`; `epoll_pwait2`),
//! `dup`/`dup2`/`dup3`, `sendfile`/`sendfile64` (to a softoe socket; from
//! one fails with `EINVAL`, as from any socket on Linux), and glibc's
//! fortified `__*_chk` variants (glibc has none for the batch calls).
//!
//! `AF_INET6` sockets are softoe's for their IPv4 side (`::`, and
//! `::ffff:a.b.c.d`), answering with IPv4-mapped addresses; a real IPv6
//! address or `IPV6_V6ONLY` leaves them to the kernel.
//!
//! After `fork` the child attaches a session of its own; a listener it
//! inherited is shared into it at first use (parent and child both accept,
//! as with the kernel: nginx's master and workers). Before every `fork`
//! (`pthread_atfork`) the parent puts each connection's numbers on a
//! descriptor the engine watches, so the kernel counts the copies every
//! process holds; a child takes a connection it uses into its own session,
//! and the connection closes when the last copy does. Inherited UDP
//! sockets fail with `EBADF`. A signal handler without `SA_RESTART`
//! interrupts a blocking call (`EINTR`), as it does a kernel socket call.
//!
//! `fcntl` and `ioctl` are variadic in C; the hooks take the one argument
//! every command this shim handles passes, which the x86-64 and AArch64
//! Linux calling conventions put where a fixed third argument goes.
//!
//! The hooks live in `hooks/`, a file per family (sockets, data, options,
//! descriptors, waiting, exec); each opens with the same decision — the
//! kernel's descriptor or softoe's — made in one place, which also states
//! once the safety argument every hook rests on. The sockets themselves
//! (the table of descriptors, their states, the calls on them, and what
//! `fork` and `exec` do to them) are in `sock/`.

#![allow(unsafe_code)]
#![allow(clippy::missing_safety_doc)]

mod addr;
mod hooks;
mod opts;
mod real;
pub mod rules;
mod sock;

pub use hooks::fd::{
    close, close_range, closefrom, dup, dup2, dup3, fcntl, fcntl64, ioctl, shutdown,
};
pub use hooks::fortify::{__poll_chk, __ppoll_chk, __read_chk, __recv_chk, __recvfrom_chk};
pub use hooks::io::{
    read, readv, recv, recvfrom, recvmsg, send, sendfile, sendfile64, sendmsg, sendto, write,
    writev,
};
pub use hooks::mmsg::{recvmmsg, sendmmsg, splice};
pub use hooks::socket::{accept, accept4, bind, connect, getpeername, getsockname, listen, socket};
pub use hooks::sockopt::{getsockopt, setsockopt};
pub use hooks::wait::{
    epoll_create, epoll_create1, epoll_ctl, epoll_pwait, epoll_pwait2, epoll_wait, poll, ppoll,
    pselect, select,
};
