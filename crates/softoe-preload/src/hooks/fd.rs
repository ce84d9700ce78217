//! Descriptor lifetime and flags: `close`, `closefrom`, `close_range`,
//! `shutdown`, `dup`/`dup2`/`dup3`, `fcntl`, `ioctl`.
//!
//! A softoe socket's number is held by an idle kernel socket, so these
//! calls go to the kernel first and then keep the table in step with what
//! it did: a closed number forgets its socket, a duplicated one names the
//! same socket, a descriptor flag the kernel took is the socket's too.

use std::sync::atomic::Ordering;

use libc::{c_int, c_ulong};

use super::{fail, ours, ret, wait};
use crate::sock::{TABLE, shares_parents_memory};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    // A vfork child's descriptors are its own; the table is the parent's.
    if TABLE.holds(fd) && shares_parents_memory() {
        return forward!(close(fd));
    }
    if let Some(s) = TABLE.remove(fd) {
        wait::forget_fd(fd);
        drop(s);
    } else {
        wait::forget_epoll(fd);
    }
    forward!(close(fd))
}

/// Forgets the softoe sockets among descriptors `low..=high` that a
/// `closefrom`/`close_range` is about to close behind the shim's back.
fn forget_range(low: c_int, high: c_int) {
    if TABLE.is_empty() || shares_parents_memory() {
        return;
    }
    for (fd, _) in TABLE.entries() {
        if fd >= low && fd <= high && TABLE.remove(fd).is_some() {
            wait::forget_fd(fd);
        }
    }
}

/// glibc's `closefrom` (sshd closes every descriptor above stderr before it
/// runs the user's shell) closes with one system call, not through `close`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn closefrom(low: c_int) {
    forget_range(low.max(0), c_int::MAX);
    forward!(closefrom(low))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn close_range(
    first: libc::c_uint,
    last: libc::c_uint,
    flags: c_int,
) -> c_int {
    let r = forward!(close_range(first, last, flags));
    // With CLOSE_RANGE_CLOEXEC the descriptors are only marked.
    if r == 0 && flags & (libc::CLOSE_RANGE_CLOEXEC as c_int) == 0 {
        forget_range(
            first.min(c_int::MAX as u32) as c_int,
            last.min(c_int::MAX as u32) as c_int,
        );
    }
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    dispatch!(fd, shutdown(fd, how), |s| ret(s.shutdown(how).map(|()| 0)))
}

fn dup_onto(old: c_int, new: c_int) {
    if new < 0 || (!TABLE.holds(old) && !TABLE.holds(new)) || shares_parents_memory() {
        return;
    }
    if let Some(prev) = TABLE.remove(new) {
        wait::forget_fd(new);
        drop(prev);
    }
    if let Some(s) = TABLE.get(old) {
        TABLE.insert(new, s);
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    let n = forward!(dup(fd));
    dup_onto(fd, n);
    n
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup2(fd: c_int, new: c_int) -> c_int {
    let n = forward!(dup2(fd, new));
    if n >= 0 && fd != new {
        dup_onto(fd, n);
    }
    n
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup3(fd: c_int, new: c_int, flags: c_int) -> c_int {
    let n = forward!(dup3(fd, new, flags));
    if n >= 0 {
        dup_onto(fd, n);
    }
    n
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // The kernel socket keeps the same flags.
    let r = forward!(fcntl(fd, cmd, arg));
    if r < 0 {
        return r;
    }
    match cmd {
        libc::F_SETFL => {
            if let Some(Ok(s)) = ours(fd) {
                s.nonblock
                    .store(arg as c_int & libc::O_NONBLOCK != 0, Ordering::Relaxed);
            }
        }
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => dup_onto(fd, r),
        _ => {}
    }
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: the caller's arguments, unchanged, to the hook with the same
    // contract (forwarding, in `hooks`).
    unsafe { fcntl(fd, cmd, arg) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: c_ulong) -> c_int {
    dispatch!(fd, ioctl(fd, req, arg), |s| {
        let p = arg as *mut c_int;
        match req {
            libc::FIONBIO => {
                if p.is_null() {
                    return fail(libc::EFAULT);
                }
                // SAFETY: FIONBIO's argument is the caller's int pointer
                // (see `hooks`).
                let on = unsafe { *p } != 0;
                s.nonblock.store(on, Ordering::Relaxed);
                // The kernel socket follows.
                forward!(ioctl(fd, req, arg))
            }
            libc::FIONREAD => {
                if p.is_null() {
                    return fail(libc::EFAULT);
                }
                // SAFETY: FIONREAD's argument is the caller's int pointer
                // (see `hooks`).
                unsafe { *p = s.pending().min(c_int::MAX as usize) as c_int };
                0
            }
            _ => {
                tracing::warn!(fd, req, "ioctl not supported on a softoe socket");
                fail(libc::ENOTTY)
            }
        }
    })
}
