//! Creation and addresses: `socket`, `connect`, `bind`, `listen`,
//! `accept`/`accept4`, `getsockname`, `getpeername`.
//!
//! Here a socket is decided: `socket` makes every IPv4 (and IPv6) TCP or
//! UDP socket a candidate, and `bind`, `connect` or `listen` either gives
//! it to the engine or hands it to the kernel for good (`to_kernel`), by
//! the address and the rules.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use libc::{c_int, sockaddr, socklen_t};

use super::{fail, ret, to_kernel};
use crate::addr::{family, read_addr, write_addr};
use crate::real;
use crate::sock::{Connect, Kind, Sock, St, TABLE, shim};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, proto: c_int) -> c_int {
    let fd = forward!(socket(domain, ty, proto));
    if fd < 0 || (domain != libc::AF_INET && domain != libc::AF_INET6) {
        return fd;
    }
    let sh = shim();
    if !sh.rules.enabled {
        return fd;
    }
    let base = ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
    let kind = match (base, proto) {
        (libc::SOCK_STREAM, 0 | libc::IPPROTO_TCP) => Kind::Tcp,
        (libc::SOCK_DGRAM, 0 | libc::IPPROTO_UDP) => Kind::Udp,
        _ => return fd,
    };
    TABLE.insert(
        fd,
        Arc::new(Sock::new(
            kind,
            ty & libc::SOCK_NONBLOCK != 0,
            domain == libc::AF_INET6,
        )),
    );
    fd
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    dispatch!(fd, connect(fd, addr, len), |s| {
        // SAFETY: the caller's `addr`, valid for `len` (see `hooks`).
        let unspec = unsafe { family(addr, len) } == Some(libc::AF_UNSPEC);
        if unspec && matches!(s.state(), St::Listening(_)) {
            // Linux's disconnect: the listener stops, stays bound.
            return ret(s.stop_listening().map(|()| 0));
        }
        // SAFETY: the caller's `addr`, valid for `len` (see `hooks`).
        let Ok(to) = (unsafe { read_addr(addr, len) }) else {
            // Not IPv4 (AF_UNSPEC and the like): the kernel's business.
            to_kernel(fd);
            return forward!(connect(fd, addr, len));
        };
        match s.connect(to) {
            Connect::Done(r) => ret(r),
            Connect::Kernel => {
                to_kernel(fd);
                forward!(connect(fd, addr, len))
            }
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    dispatch!(fd, bind(fd, addr, len), |s| {
        // SAFETY: the caller's `addr`, valid for `len` (see `hooks`).
        let at = match unsafe { read_addr(addr, len) } {
            Ok(a) => a,
            Err(libc::EAFNOSUPPORT) => {
                // A real IPv6 address: the kernel's.
                to_kernel(fd);
                return forward!(bind(fd, addr, len));
            }
            Err(e) => return fail(e),
        };
        match s.bind(at) {
            Ok(true) => 0,
            Ok(false) => {
                to_kernel(fd);
                forward!(bind(fd, addr, len))
            }
            Err(e) => fail(e),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    dispatch!(fd, listen(fd, backlog), |s| {
        if matches!(s.state(), St::Fresh { bound: None }) {
            // Never bound: Linux picks a port on any address; leave it
            // to the kernel.
            to_kernel(fd);
            return forward!(listen(fd, backlog));
        }
        ret(s.listen(backlog).map(|()| 0))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: the caller's arguments, unchanged, to the hook with the same
    // contract (forwarding, in `hooks`).
    unsafe { accept4(fd, addr, len, 0) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    dispatch!(fd, accept4(fd, addr, len, flags), |s| {
        if flags & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) != 0 {
            return fail(libc::EINVAL);
        }
        let (new, peer) = match s.accept() {
            Ok(a) => a,
            Err(e) => return fail(e),
        };
        // A kernel socket holds the new descriptor's number.
        // SAFETY: plain call.
        let nfd = unsafe {
            real::socket(
                if s.v6 { libc::AF_INET6 } else { libc::AF_INET },
                libc::SOCK_STREAM | (flags & (libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)),
                0,
            )
        };
        if nfd < 0 {
            // The connection is dropped (closed) with `new`.
            return fail(
                std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EMFILE),
            );
        }
        new.nonblock
            .store(flags & libc::SOCK_NONBLOCK != 0, Ordering::Relaxed);
        TABLE.insert(nfd, Arc::new(new));
        // SAFETY: the caller's `addr`/`len`, null or valid (see `hooks`).
        unsafe { write_addr(peer, s.v6, addr, len) };
        nfd
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    dispatch!(fd, getsockname(fd, addr, len), |s| {
        // SAFETY: the caller's `addr`/`len` (see `hooks`).
        unsafe { write_addr(s.local_addr(), s.v6, addr, len) };
        0
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    dispatch!(fd, getpeername(fd, addr, len), |s| {
        match s.peer_addr() {
            Ok(p) => {
                // SAFETY: the caller's `addr`/`len` (see `hooks`).
                unsafe { write_addr(p, s.v6, addr, len) };
                0
            }
            Err(e) => fail(e),
        }
    })
}
