//! The `extern "C"` hooks, one file per family, and the one opening they
//! share.
//!
//! | file | hooks |
//! |---|---|
//! | `socket.rs` | `socket`, `bind`, `listen`, `accept`/`accept4`, `connect`, `getsockname`, `getpeername` |
//! | `sockopt.rs` | `setsockopt`, `getsockopt` |
//! | `io.rs` | `read`/`write`, `readv`/`writev`, `send`/`sendto`/`sendmsg`, `recv`/`recvfrom`/`recvmsg`, `sendfile` |
//! | `mmsg.rs` | `recvmmsg`, `sendmmsg`, `splice` |
//! | `fd.rs` | `close`, `closefrom`, `close_range`, `shutdown`, `dup`/`dup2`/`dup3`, `fcntl`, `ioctl` |
//! | `wait/mod.rs` | `poll`/`ppoll`, `select`/`pselect`, and the wait loop they share with epoll |
//! | `wait/epoll.rs` | `epoll_*` |
//! | `exec.rs` | the `exec` family, `posix_spawn` |
//! | `clone.rs` | `syscall` (a `SYS_clone`/`SYS_clone3`/`SYS_fork` that makes a process: its connections prepared as for `fork`) |
//! | `sandbox.rs` | `chroot`, `setuid` and the like, `prctl`: the calls before a process sandboxes itself |
//! | `limits.rs` | `setrlimit`/`prlimit`: `RLIMIT_NOFILE` readies for a sandbox, `RLIMIT_AS` grows by softoe's regions |
//! | `fortify.rs` | glibc's `__*_chk` variants |
//!
//! A hook on one descriptor opens with `dispatch!`: is `fd` a softoe
//! socket, or the kernel's? The kernel's goes on to libc with the
//! arguments as given (`forward!`); a softoe socket this process cannot
//! use fails with its errno; a softoe socket is served by the hook's own
//! code, which is all a hook has to say.
//!
//! # The safety argument, stated once
//!
//! Every hook is an `unsafe extern "C" fn` with its C function's signature,
//! called by a C program that keeps that function's contract (its manual
//! page): each pointer is null where the call allows it, or valid for what
//! the call reads or writes through it — `buf` for `len` bytes, `addr` for
//! `len` (or `*len`), `iov` for `n` entries and each entry for its length,
//! a `msghdr` with its name, iovecs and control buffer, the `fd_set`s and
//! `pollfd` array for the count given. Every `unsafe` block in a hook rests
//! on one of two consequences:
//!
//! 1. **Forwarding.** The caller's arguments passed unchanged to the next
//!    definition of the same function (libc's, found by `crate::real`) — or to
//!    another hook or libc function with the same contract for them
//!    (`accept` to `accept4`, `__read_chk` to `read`) — meet the contract
//!    that definition was promised. `forward!` takes only names, so the
//!    arguments cannot be changed on the way; its one `SAFETY:` comment is
//!    this paragraph.
//! 2. **Serving.** Where the shim serves the call itself it touches the
//!    caller's memory only as far as the contract grants (never more than
//!    `len` bytes of `buf`, an address truncated to `*len`, as the kernel
//!    does). Those blocks say which pointer in a few words ("the caller's
//!    buffer"), pointing back here.

use std::sync::Arc;

use libc::{c_int, ssize_t};

use crate::real::set_errno;
use crate::sock::{self, Sock, TABLE};

/// Calls the next definition of the hooked function `$name` (libc's) with
/// the caller's arguments, unchanged: the kernel serves the call.
///
/// Only names are accepted as arguments, so nothing can be computed or
/// changed on the way to libc.
macro_rules! forward {
    ($name:ident($($arg:ident),* $(,)?)) => {
        // SAFETY: the caller's arguments, unchanged, to the same C function
        // (forwarding, in the safety argument of `hooks`).
        unsafe { $crate::real::$name($($arg),*) }
    };
}

/// The opening of every hook on one descriptor: the kernel's descriptor
/// goes to libc (`forward!` of `$name($args)`), a softoe socket this
/// process cannot use fails with its errno (−1), and a softoe socket is
/// served by `$body` with the socket bound to `$s` (an `Arc<Sock>`).
///
/// `$body` is the rest of the hook: it evaluates to the hook's return
/// value, and a `return` in it returns from the hook.
macro_rules! dispatch {
    ($fd:expr, $name:ident($($arg:ident),* $(,)?), |$s:pat_param| $body:expr) => {
        match $crate::hooks::ours($fd) {
            None => forward!($name($($arg),*)),
            Some(Err(e)) => $crate::hooks::fail(e),
            Some(Ok($s)) => $body,
        }
    };
}

pub(crate) mod clone;
pub(crate) mod exec;
pub(crate) mod fd;
pub(crate) mod fortify;
pub(crate) mod io;
pub(crate) mod limits;
pub(crate) mod mmsg;
pub(crate) mod sandbox;
pub(crate) mod socket;
pub(crate) mod sockopt;
pub(crate) mod wait;

/// The softoe socket behind `fd`, if it is one (taken into this
/// process's session first if it was inherited across `fork`).
pub(crate) fn ours(fd: c_int) -> Option<Result<Arc<Sock>, c_int>> {
    sock::current(fd)
}

/// −1 (as the hook's return type) with `errno` set to `e`.
pub(crate) fn fail<T: From<i8>>(e: c_int) -> T {
    set_errno(e);
    T::from(-1)
}

/// Returns `v`, or −1 with `errno` set.
pub(crate) fn ret<T: From<i8>>(r: Result<T, c_int>) -> T {
    r.unwrap_or_else(fail)
}

/// A byte count, or −1 with `errno` set.
pub(crate) fn ret_size(r: Result<usize, c_int>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => fail(e),
    }
}

/// Stops serving `fd` from softoe (the kernel socket behind it takes over)
/// and moves its epoll registrations to the kernel.
pub(crate) fn to_kernel(fd: c_int) {
    if TABLE.remove(fd).is_some() {
        wait::moved_to_kernel(fd);
    }
}
