//! glibc's fortified variants (`_FORTIFY_SOURCE`): the same calls with
//! the size of the caller's buffer, checked as glibc checks it, then served
//! by the plain hook. glibc has none for the batch calls.

use libc::{c_int, c_void, size_t, sockaddr, socklen_t, ssize_t};

use super::io::{read, recv, recvfrom};
use super::wait::{poll, ppoll};

/// What glibc does when a fortified call's length exceeds its buffer.
fn chk_fail() -> ! {
    crate::diag::say("*** buffer overflow detected ***: terminated");
    std::process::abort()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    buflen: size_t,
) -> ssize_t {
    if len > buflen {
        chk_fail();
    }
    // SAFETY: the caller's arguments, checked above, to the plain hook
    // (forwarding, in `hooks`).
    unsafe { read(fd, buf, len) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    buflen: size_t,
    flags: c_int,
) -> ssize_t {
    if len > buflen {
        chk_fail();
    }
    // SAFETY: the caller's arguments, checked above, to the plain hook
    // (forwarding, in `hooks`).
    unsafe { recv(fd, buf, len, flags) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    buflen: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    if len > buflen {
        chk_fail();
    }
    // SAFETY: the caller's arguments, checked above, to the plain hook
    // (forwarding, in `hooks`).
    unsafe { recvfrom(fd, buf, len, flags, addr, alen) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __poll_chk(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    timeout: c_int,
    fdslen: size_t,
) -> c_int {
    if (n as usize).saturating_mul(size_of::<libc::pollfd>()) > fdslen {
        chk_fail();
    }
    // SAFETY: the caller's arguments, checked above, to the plain hook
    // (forwarding, in `hooks`).
    unsafe { poll(fds, n, timeout) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __ppoll_chk(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    ts: *const libc::timespec,
    mask: *const libc::sigset_t,
    fdslen: size_t,
) -> c_int {
    if (n as usize).saturating_mul(size_of::<libc::pollfd>()) > fdslen {
        chk_fail();
    }
    // SAFETY: the caller's arguments, checked above, to the plain hook
    // (forwarding, in `hooks`).
    unsafe { ppoll(fds, n, ts, mask) }
}
