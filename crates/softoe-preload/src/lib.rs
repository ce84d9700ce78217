//! # softoe-preload: unmodified programs on the softoe engine
//!
//! `LD_PRELOAD=libsoftoe_preload.so PROGRAM` (or `softoe run -- PROGRAM`)
//! puts this library in front of libc's socket calls. IPv4 TCP and UDP
//! sockets whose address the [`rules`] give to softoe are served by
//! the engine through [`softoe_host`]: the program's `send` copies into
//! the socket's send ring in shared memory and posts a command it does not
//! wait for (`copy`, the default), or with `SOFTOE_SEND=overlap` (`softoe
//! run --send overlap`) becomes a command the engine carries out by
//! reading the program's buffer itself (`process_vm_readv`); its `recv`
//! copies from the socket's receive ring in shared memory; and its
//! `poll`/`select`/`epoll_wait` wait on softoe sockets and kernel
//! descriptors in one kernel call (each waiting thread has its own
//! doorbell, [`softoe_host::Waiter`]).
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
//! Two unrelated programs may listen on one address and port with
//! `SO_REUSEPORT` (a haproxy reload with `-sf`): the engine spreads new
//! connections between them by a hash of each four-tuple. A TCP `bind`
//! asks the engine whether a listener holds the port, so the refusal
//! (`EADDRINUSE`) comes at `bind`, where Linux gives it, not at `listen`.
//!
//! After `fork` the child attaches a session of its own; a listener it
//! inherited is shared into it at first use (parent and child both accept,
//! as with the kernel: nginx's master and workers). Before every `fork`
//! (`pthread_atfork`) the parent puts each connection's and listener's
//! numbers on a descriptor the engine watches, so the kernel counts the
//! copies every process holds; a child that uses a connection joins it
//! from its own session — both then read and write it at once, each byte
//! to one reader, in order — and a socket closes when the last copy does.
//! Softoe sockets passed over a Unix socket (`SCM_RIGHTS`) go as those
//! watched descriptors, and the receiving process claims them from the
//! engine by the descriptor itself. Inherited UDP
//! sockets fail with `EBADF`. A child made past libc's `fork` (a raw
//! `clone`, as vsftpd makes them) is told from its parent all the same:
//! the process id the shim checks lives in a page the kernel zeroes in
//! every child, and libc's `syscall` is hooked so that such a `clone`
//! prepares the connections as `fork` does. A signal handler without
//! `SA_RESTART` interrupts a blocking call (`EINTR`, a blocking `connect`
//! too), as it does a kernel socket call.
//!
//! The shim's own messages (warnings, `RUST_LOG`) are written with libc's
//! `write` to `SOFTOE_LOG_FILE` if set, else to descriptor 2 unless that
//! is a softoe socket (an inetd-style server's client connection): never
//! through the shim's own hooks. Under an address-space limit the shared
//! region leaves the program room (`RLIMIT_AS`: see `hooks/limits.rs`).
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
mod diag;
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
