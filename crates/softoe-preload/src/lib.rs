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
//! `ENOPROTOOPT` and a warning naming them: see `opts.rs`), `send`,
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

#![allow(unsafe_code)]
#![allow(clippy::missing_safety_doc)]

mod exec;
mod mmsg;
mod opts;
mod real;
pub mod rules;
mod sock;
mod wait;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use libc::{c_int, c_ulong, c_void, msghdr, off_t, size_t, sockaddr, socklen_t, ssize_t};

use real::set_errno;
use sock::{Connect, Kind, Sock, TABLE, shim};

/// Returns `v`, or −1 with `errno` set.
fn ret<T: From<i8>>(r: Result<T, c_int>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => {
            set_errno(e);
            T::from(-1)
        }
    }
}

fn ret_size(r: Result<usize, c_int>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// The softoe socket behind `fd`, if it is one (taken into this
/// process's session first if it was inherited across `fork`).
fn ours(fd: c_int) -> Option<Result<Arc<Sock>, c_int>> {
    sock::current(fd)
}

/// The IPv4 address at `addr`: an `AF_INET` address, or an `AF_INET6`
/// one that is IPv4-mapped (`::ffff:a.b.c.d`) or unspecified (`::`, "any").
/// `EAFNOSUPPORT` for anything else (a real IPv6 address: the kernel's).
///
/// # Safety
/// `addr` is null or valid for `len` bytes.
unsafe fn read_addr(addr: *const sockaddr, len: socklen_t) -> Result<SocketAddrV4, c_int> {
    if addr.is_null() || (len as usize) < size_of::<libc::sockaddr_in>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: at least sizeof(sockaddr_in) bytes; the family leads both
    // layouts.
    let family = i32::from(unsafe { std::ptr::read_unaligned(addr.cast::<libc::sa_family_t>()) });
    match family {
        libc::AF_INET => {
            // SAFETY: the caller says `addr` holds `len` ≥ sizeof(sockaddr_in)
            // bytes; read unaligned as C callers may pass any buffer.
            let sin: libc::sockaddr_in = unsafe { std::ptr::read_unaligned(addr.cast()) };
            Ok(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            ))
        }
        libc::AF_INET6 => {
            if (len as usize) < size_of::<libc::sockaddr_in6>() {
                return Err(libc::EINVAL);
            }
            // SAFETY: `len` ≥ sizeof(sockaddr_in6) bytes; read unaligned.
            let sin6: libc::sockaddr_in6 = unsafe { std::ptr::read_unaligned(addr.cast()) };
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            let port = u16::from_be(sin6.sin6_port);
            if ip.is_unspecified() {
                Ok(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))
            } else if let Some(v4) = ip.to_ipv4_mapped() {
                Ok(SocketAddrV4::new(v4, port))
            } else {
                Err(libc::EAFNOSUPPORT)
            }
        }
        _ => Err(libc::EAFNOSUPPORT),
    }
}

/// Writes `a` to `addr`/`len` as the kernel does (truncated to `*len`,
/// `*len` set to the full size): `sockaddr_in`, or for an `AF_INET6`
/// socket `sockaddr_in6` with the address IPv4-mapped (`::` for "any").
///
/// # Safety
/// `addr` is null or valid for `*len` bytes; `len` is null or valid.
unsafe fn write_addr(a: SocketAddrV4, v6: bool, addr: *mut sockaddr, len: *mut socklen_t) {
    if addr.is_null() || len.is_null() {
        return;
    }
    let mut buf = [0u8; size_of::<libc::sockaddr_in6>()];
    let full = if v6 {
        // SAFETY: sockaddr_in6 is plain data.
        let mut sin6: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
        sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        sin6.sin6_port = a.port().to_be();
        sin6.sin6_addr.s6_addr = if a.ip().is_unspecified() {
            [0; 16]
        } else {
            a.ip().to_ipv6_mapped().octets()
        };
        // SAFETY: `buf` is exactly sizeof(sockaddr_in6) bytes.
        unsafe { std::ptr::write_unaligned(buf.as_mut_ptr().cast(), sin6) };
        size_of::<libc::sockaddr_in6>()
    } else {
        // SAFETY: sockaddr_in is plain data.
        let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        sin.sin_family = libc::AF_INET as libc::sa_family_t;
        sin.sin_port = a.port().to_be();
        sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
        // SAFETY: `buf` has room for a sockaddr_in.
        unsafe { std::ptr::write_unaligned(buf.as_mut_ptr().cast(), sin) };
        size_of::<libc::sockaddr_in>()
    };
    // SAFETY: `len` is valid (caller).
    let room = unsafe { *len } as usize;
    let n = room.min(full);
    // SAFETY: `addr` has `room` ≥ `n` bytes; `buf` has `full` ≥ `n`.
    unsafe {
        std::ptr::copy_nonoverlapping(buf.as_ptr(), addr.cast::<u8>(), n);
        *len = full as socklen_t;
    }
}

/// Stops serving `fd` from softoe (the kernel socket behind it takes over)
/// and moves its epoll registrations to the kernel.
fn to_kernel(fd: c_int) {
    if TABLE.remove(fd).is_some() {
        wait::moved_to_kernel(fd);
    }
}

// ---- creation and addresses ------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, proto: c_int) -> c_int {
    // SAFETY: forwarded as given.
    let fd = unsafe { real::socket(domain, ty, proto) };
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
    let Some(s) = ours(fd) else {
        // SAFETY: forwarded as given.
        return unsafe { real::connect(fd, addr, len) };
    };
    let s = match s {
        Ok(s) => s,
        Err(e) => return ret(Err(e)),
    };
    // SAFETY: the caller's `addr` is valid for `len`.
    let to = match unsafe { read_addr(addr, len) } {
        Ok(a) => a,
        Err(_) => {
            // Not IPv4 (AF_UNSPEC and the like): the kernel's business.
            to_kernel(fd);
            // SAFETY: forwarded as given.
            return unsafe { real::connect(fd, addr, len) };
        }
    };
    match s.connect(to) {
        Connect::Done(r) => ret(r),
        Connect::Kernel => {
            to_kernel(fd);
            // SAFETY: forwarded as given.
            unsafe { real::connect(fd, addr, len) }
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    let Some(s) = ours(fd) else {
        // SAFETY: forwarded as given.
        return unsafe { real::bind(fd, addr, len) };
    };
    let s = match s {
        Ok(s) => s,
        Err(e) => return ret(Err(e)),
    };
    // SAFETY: the caller's `addr` is valid for `len`.
    let at = match unsafe { read_addr(addr, len) } {
        Ok(a) => a,
        Err(libc::EAFNOSUPPORT) => {
            // A real IPv6 address: the kernel's.
            to_kernel(fd);
            // SAFETY: forwarded as given.
            return unsafe { real::bind(fd, addr, len) };
        }
        Err(e) => return ret(Err(e)),
    };
    match s.bind(at) {
        Ok(true) => 0,
        Ok(false) => {
            to_kernel(fd);
            // SAFETY: forwarded as given.
            unsafe { real::bind(fd, addr, len) }
        }
        Err(e) => ret(Err(e)),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    match ours(fd) {
        // SAFETY: forwarded as given.
        None => unsafe { real::listen(fd, backlog) },
        Some(s) => ret(s.and_then(|s| {
            if matches!(s.state(), sock::St::Fresh { bound: None }) {
                // Never bound: Linux picks a port on any address; leave it
                // to the kernel.
                to_kernel(fd);
                // SAFETY: forwarded as given.
                return Ok(unsafe { real::listen(fd, backlog) });
            }
            s.listen(backlog).map(|()| 0)
        })),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: as the caller's.
    unsafe { accept4(fd, addr, len, 0) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    let Some(s) = ours(fd) else {
        // SAFETY: forwarded as given.
        return unsafe { real::accept4(fd, addr, len, flags) };
    };
    let r = s.and_then(|s| {
        if flags & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) != 0 {
            return Err(libc::EINVAL);
        }
        let (new, peer) = s.accept()?;
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
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EMFILE));
        }
        new.nonblock.store(
            flags & libc::SOCK_NONBLOCK != 0,
            std::sync::atomic::Ordering::Relaxed,
        );
        TABLE.insert(nfd, Arc::new(new));
        // SAFETY: the caller's `addr`/`len` are null or valid.
        unsafe { write_addr(peer, s.v6, addr, len) };
        Ok(nfd)
    });
    ret(r)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    match ours(fd) {
        // SAFETY: forwarded as given.
        None => unsafe { real::getsockname(fd, addr, len) },
        Some(s) => ret(s.map(|s| {
            // SAFETY: the caller's `addr`/`len` are valid.
            unsafe { write_addr(s.local_addr(), s.v6, addr, len) };
            0
        })),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    match ours(fd) {
        // SAFETY: forwarded as given.
        None => unsafe { real::getpeername(fd, addr, len) },
        Some(s) => ret(s.and_then(|s| {
            let p = s.peer_addr()?;
            // SAFETY: the caller's `addr`/`len` are valid.
            unsafe { write_addr(p, s.v6, addr, len) };
            Ok(0)
        })),
    }
}

// ---- data --------------------------------------------------------------------

/// # Safety
/// `buf` is valid for `len` bytes of writing (or `len` is 0).
unsafe fn recv_into(
    s: &Sock,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    if flags & libc::MSG_ERRQUEUE != 0 {
        // softoe sockets queue no errors (`IP_RECVERR` is recorded only).
        return ret_size(Err(libc::EAGAIN));
    }
    if len == 0 {
        return 0;
    }
    // SAFETY: the caller's buffer is valid for `len` bytes.
    let b = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
    ret_size(s.recv(b, flags).map(|(n, from)| {
        if let Some(f) = from {
            // SAFETY: the caller's `addr`/`alen` are null or valid.
            unsafe { write_addr(f, s.v6, addr, alen) };
        }
        n
    }))
}

/// # Safety
/// `buf` is valid for `len` bytes of reading (or `len` is 0).
unsafe fn send_from(
    s: &Sock,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    to: Option<SocketAddrV4>,
) -> ssize_t {
    if len == 0 && s.kind == Kind::Tcp {
        return 0;
    }
    let b: &[u8] = if len == 0 {
        &[]
    } else {
        // SAFETY: the caller's buffer is valid for `len` bytes.
        unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }
    };
    ret_size(s.send(b, flags, to))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, len: size_t) -> ssize_t {
    match ours(fd) {
        // SAFETY: forwarded as given.
        None => unsafe { real::read(fd, buf, len) },
        Some(Err(e)) => ret_size(Err(e)),
        // SAFETY: the caller's buffer.
        Some(Ok(s)) => unsafe {
            recv_into(&s, buf, len, 0, std::ptr::null_mut(), std::ptr::null_mut())
        },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    match ours(fd) {
        // SAFETY: forwarded as given.
        None => unsafe { real::recv(fd, buf, len, flags) },
        Some(Err(e)) => ret_size(Err(e)),
        // SAFETY: the caller's buffer.
        Some(Ok(s)) => unsafe {
            recv_into(
                &s,
                buf,
                len,
                flags,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    match ours(fd) {
        // SAFETY: forwarded as given.
        None => unsafe { real::recvfrom(fd, buf, len, flags, addr, alen) },
        Some(Err(e)) => ret_size(Err(e)),
        // SAFETY: the caller's buffer and address.
        Some(Ok(s)) => unsafe { recv_into(&s, buf, len, flags, addr, alen) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, len: size_t) -> ssize_t {
    match ours(fd) {
        // SAFETY: forwarded as given.
        None => unsafe { real::write(fd, buf, len) },
        Some(Err(e)) => ret_size(Err(e)),
        // SAFETY: the caller's buffer.
        Some(Ok(s)) => unsafe { send_from(&s, buf, len, 0, None) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t {
    match ours(fd) {
        // SAFETY: forwarded as given.
        None => unsafe { real::send(fd, buf, len, flags) },
        Some(Err(e)) => ret_size(Err(e)),
        // SAFETY: the caller's buffer.
        Some(Ok(s)) => unsafe { send_from(&s, buf, len, flags, None) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    addr: *const sockaddr,
    alen: socklen_t,
) -> ssize_t {
    match ours(fd) {
        // SAFETY: forwarded as given.
        None => unsafe { real::sendto(fd, buf, len, flags, addr, alen) },
        Some(Err(e)) => ret_size(Err(e)),
        Some(Ok(s)) => {
            let to = if addr.is_null() || s.kind == Kind::Tcp {
                None
            } else {
                // SAFETY: the caller's `addr` is valid for `alen`.
                match unsafe { read_addr(addr, alen) } {
                    Ok(a) => Some(a),
                    Err(e) => return ret_size(Err(e)),
                }
            };
            // SAFETY: the caller's buffer.
            unsafe { send_from(&s, buf, len, flags, to) }
        }
    }
}

/// The iovecs of a call.
///
/// # Safety
/// `iov` is valid for `n` entries (or `n` ≤ 0).
unsafe fn iovecs<'a>(iov: *const libc::iovec, n: c_int) -> &'a [libc::iovec] {
    if iov.is_null() || n <= 0 {
        return &[];
    }
    // SAFETY: the caller's array of `n` iovecs.
    unsafe { std::slice::from_raw_parts(iov, n as usize) }
}

/// Gathers into one buffer and sends it (one command, all or nothing per
/// the blocking rules).
///
/// # Safety
/// Each iovec is valid for its length.
unsafe fn send_iov(s: &Sock, v: &[libc::iovec], flags: c_int, to: Option<SocketAddrV4>) -> ssize_t {
    let total: usize = v.iter().map(|i| i.iov_len).sum();
    let mut buf = Vec::with_capacity(total);
    for i in v {
        if i.iov_len > 0 {
            // SAFETY: the caller's iovec.
            buf.extend_from_slice(unsafe {
                std::slice::from_raw_parts(i.iov_base.cast::<u8>(), i.iov_len)
            });
        }
    }
    // SAFETY: `buf` is valid for its length.
    unsafe { send_from(s, buf.as_ptr().cast(), buf.len(), flags, to) }
}

/// Receives into the iovecs in turn: blocks for the first bytes only.
///
/// # Safety
/// Each iovec is valid for its length.
unsafe fn recv_iov(s: &Sock, v: &[libc::iovec], flags: c_int) -> (ssize_t, Option<SocketAddrV4>) {
    let mut got = 0usize;
    let mut from = None;
    for i in v {
        if i.iov_len == 0 {
            continue;
        }
        // SAFETY: the caller's iovec.
        let b = unsafe { std::slice::from_raw_parts_mut(i.iov_base.cast::<u8>(), i.iov_len) };
        let f = if got > 0 {
            flags | libc::MSG_DONTWAIT
        } else {
            flags
        };
        match s.recv(b, f) {
            Ok((n, a)) => {
                from = from.or(a);
                got += n;
                if n < b.len() || s.kind == Kind::Udp {
                    break;
                }
            }
            Err(_) if got > 0 => break,
            Err(e) => {
                set_errno(e);
                return (-1, None);
            }
        }
    }
    (got as ssize_t, from)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t {
    match ours(fd) {
        // SAFETY: forwarded as given.
        None => unsafe { real::readv(fd, iov, n) },
        Some(Err(e)) => ret_size(Err(e)),
        // SAFETY: the caller's iovecs.
        Some(Ok(s)) => unsafe { recv_iov(&s, iovecs(iov, n), 0).0 },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t {
    match ours(fd) {
        // SAFETY: forwarded as given.
        None => unsafe { real::writev(fd, iov, n) },
        Some(Err(e)) => ret_size(Err(e)),
        // SAFETY: the caller's iovecs.
        Some(Ok(s)) => unsafe { send_iov(&s, iovecs(iov, n), 0, None) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    match ours(fd) {
        // SAFETY: forwarded as given.
        None => unsafe { real::sendmsg(fd, msg, flags) },
        Some(Err(e)) => ret_size(Err(e)),
        Some(Ok(s)) => {
            if msg.is_null() {
                return ret_size(Err(libc::EFAULT));
            }
            // SAFETY: the caller's msghdr.
            let m = unsafe { &*msg };
            let to = if m.msg_name.is_null() || s.kind == Kind::Tcp {
                None
            } else {
                // SAFETY: the caller's name buffer of `msg_namelen` bytes.
                match unsafe { read_addr(m.msg_name.cast(), m.msg_namelen) } {
                    Ok(a) => Some(a),
                    Err(e) => return ret_size(Err(e)),
                }
            };
            // SAFETY: the caller's iovecs.
            unsafe { send_iov(&s, iovecs(m.msg_iov, m.msg_iovlen as c_int), flags, to) }
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    match ours(fd) {
        // SAFETY: forwarded as given.
        None => unsafe { real::recvmsg(fd, msg, flags) },
        Some(Err(e)) => ret_size(Err(e)),
        Some(Ok(s)) => {
            if msg.is_null() {
                return ret_size(Err(libc::EFAULT));
            }
            if flags & libc::MSG_ERRQUEUE != 0 {
                // softoe sockets queue no errors (`IP_RECVERR` is recorded only).
                return ret_size(Err(libc::EAGAIN));
            }
            // SAFETY: the caller's msghdr.
            let m = unsafe { &mut *msg };
            // SAFETY: the caller's iovecs.
            let (n, from) =
                unsafe { recv_iov(&s, iovecs(m.msg_iov, m.msg_iovlen as c_int), flags) };
            if n >= 0 {
                m.msg_controllen = 0;
                m.msg_flags = 0;
                match from {
                    Some(f) if !m.msg_name.is_null() => {
                        // SAFETY: the caller's name buffer.
                        unsafe { write_addr(f, s.v6, m.msg_name.cast(), &raw mut m.msg_namelen) };
                    }
                    _ => m.msg_namelen = 0,
                }
            }
            n
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile(
    out: c_int,
    input: c_int,
    off: *mut off_t,
    count: size_t,
) -> ssize_t {
    let s = match ours(out) {
        // SAFETY: forwarded as given.
        None => return unsafe { real::sendfile(out, input, off, count) },
        Some(Err(e)) => return ret_size(Err(e)),
        Some(Ok(s)) => s,
    };
    // Read from the file and send: the engine reads our buffer, so the
    // file's bytes are copied once on this core, as a read+write would.
    let mut buf = vec![0u8; count.min(1 << 20)];
    let mut done = 0usize;
    while done < count {
        let want = (count - done).min(buf.len());
        let n = if off.is_null() {
            // SAFETY: reading into our buffer of `want` bytes.
            unsafe { real::read(input, buf.as_mut_ptr().cast(), want) }
        } else {
            // SAFETY: `off` is the caller's valid offset; our buffer.
            unsafe { real::pread(input, buf.as_mut_ptr().cast(), want, *off) }
        };
        if n < 0 {
            tracing::debug!(input, error = %std::io::Error::last_os_error(), "sendfile: reading the file failed");
            return if done > 0 { done as ssize_t } else { -1 };
        }
        if n == 0 {
            break;
        }
        let n = n as usize;
        let sent = match s.send(&buf[..n], libc::MSG_NOSIGNAL, None) {
            Ok(k) => k,
            Err(e) => {
                tracing::debug!(out, errno = e, done, "sendfile: send refused");
                if done == 0 {
                    return ret_size(Err(e));
                }
                0
            }
        };
        if !off.is_null() {
            // SAFETY: the caller's offset.
            unsafe { *off += sent as off_t };
        } else if sent < n {
            // Give back what was read but not sent.
            // SAFETY: plain lseek on the caller's file.
            unsafe { libc::lseek(input, -((n - sent) as off_t), libc::SEEK_CUR) };
        }
        done += sent;
        if sent < n {
            break;
        }
    }
    done as ssize_t
}

/// What programs built with 64-bit file offsets (`_FILE_OFFSET_BITS=64`:
/// Python, nginx…) call for `sendfile`; the same on 64-bit Linux.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile64(
    out: c_int,
    input: c_int,
    off: *mut off_t,
    count: size_t,
) -> ssize_t {
    // SAFETY: as the caller's.
    unsafe { sendfile(out, input, off, count) }
}

// ---- lifetime ------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if let Some(s) = TABLE.remove(fd) {
        wait::forget_fd(fd);
        drop(s);
    } else {
        wait::forget_epoll(fd);
    }
    // SAFETY: forwarded as given.
    unsafe { real::close(fd) }
}

/// Forgets the softoe sockets among descriptors `low..=high` that a
/// `closefrom`/`close_range` is about to close behind the shim's back.
fn forget_range(low: c_int, high: c_int) {
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
    // SAFETY: forwarded as given.
    unsafe { real::closefrom(low) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn close_range(
    first: libc::c_uint,
    last: libc::c_uint,
    flags: c_int,
) -> c_int {
    // SAFETY: forwarded as given.
    let r = unsafe { real::close_range(first, last, flags) };
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
    match ours(fd) {
        // SAFETY: forwarded as given.
        None => unsafe { real::shutdown(fd, how) },
        Some(s) => ret(s.and_then(|s| s.shutdown(how)).map(|()| 0)),
    }
}

fn dup_onto(old: c_int, new: c_int) {
    if new < 0 {
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
    // SAFETY: forwarded as given.
    let n = unsafe { real::dup(fd) };
    dup_onto(fd, n);
    n
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup2(fd: c_int, new: c_int) -> c_int {
    // SAFETY: forwarded as given.
    let n = unsafe { real::dup2(fd, new) };
    if n >= 0 && fd != new {
        dup_onto(fd, n);
    }
    n
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup3(fd: c_int, new: c_int, flags: c_int) -> c_int {
    // SAFETY: forwarded as given.
    let n = unsafe { real::dup3(fd, new, flags) };
    if n >= 0 {
        dup_onto(fd, n);
    }
    n
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: forwarded as given (the kernel socket keeps the same flags).
    let r = unsafe { real::fcntl(fd, cmd, arg) };
    if r < 0 {
        return r;
    }
    match cmd {
        libc::F_SETFL => {
            if let Some(Ok(s)) = ours(fd) {
                s.nonblock.store(
                    arg as c_int & libc::O_NONBLOCK != 0,
                    std::sync::atomic::Ordering::Relaxed,
                );
            }
        }
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => dup_onto(fd, r),
        _ => {}
    }
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: as the caller's.
    unsafe { fcntl(fd, cmd, arg) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: c_ulong) -> c_int {
    let Some(s) = ours(fd) else {
        // SAFETY: forwarded as given.
        return unsafe { real::ioctl(fd, req, arg) };
    };
    let s = match s {
        Ok(s) => s,
        Err(e) => return ret(Err(e)),
    };
    let p = arg as *mut c_int;
    match req {
        libc::FIONBIO => {
            if p.is_null() {
                return ret(Err(libc::EFAULT));
            }
            // SAFETY: FIONBIO's argument is an int pointer.
            let on = unsafe { *p } != 0;
            s.nonblock.store(on, std::sync::atomic::Ordering::Relaxed);
            // SAFETY: the kernel socket follows.
            unsafe { real::ioctl(fd, req, arg) }
        }
        libc::FIONREAD => {
            if p.is_null() {
                return ret(Err(libc::EFAULT));
            }
            // SAFETY: FIONREAD's argument is an int pointer.
            unsafe { *p = s.pending().min(c_int::MAX as usize) as c_int };
            0
        }
        _ => {
            tracing::warn!(fd, req, "ioctl not supported on a softoe socket");
            ret(Err(libc::ENOTTY))
        }
    }
}

// ---- options -------------------------------------------------------------------

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    let Some(s) = ours(fd) else {
        // SAFETY: forwarded as given.
        return unsafe { real::setsockopt(fd, level, name, val, len) };
    };
    let s = match s {
        Ok(s) => s,
        Err(e) => return ret(Err(e)),
    };
    let bytes: &[u8] = if val.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: the caller's option value of `len` bytes.
        unsafe { std::slice::from_raw_parts(val.cast::<u8>(), len as usize) }
    };
    if level == libc::IPPROTO_IPV6 && s.v6 {
        // SAFETY: forwarded as given (the kernel socket keeps it).
        let r = unsafe { real::setsockopt(fd, level, name, val, len) };
        if name == libc::IPV6_V6ONLY
            && bytes.get(..4).is_some_and(|b| b != [0; 4])
            && matches!(s.state(), sock::St::Fresh { .. })
        {
            // IPv6 only: nothing for softoe to serve.
            to_kernel(fd);
        }
        return r;
    }
    if matches!(s.state(), sock::St::Fresh { .. }) {
        // The kernel socket gets it too, in case the kernel ends up serving.
        // SAFETY: forwarded as given.
        let _ = unsafe { real::setsockopt(fd, level, name, val, len) };
    }
    ret(opts::set(&s, level, name, bytes).map(|()| 0))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    let Some(s) = ours(fd) else {
        // SAFETY: forwarded as given.
        return unsafe { real::getsockopt(fd, level, name, val, len) };
    };
    let s = match s {
        Ok(s) => s,
        Err(e) => return ret(Err(e)),
    };
    if val.is_null() || len.is_null() {
        return ret(Err(libc::EFAULT));
    }
    if level == libc::IPPROTO_IPV6 && s.v6 {
        // Set on the kernel socket (see `setsockopt`): read back there.
        // SAFETY: forwarded as given.
        return unsafe { real::getsockopt(fd, level, name, val, len) };
    }
    // SAFETY: `len` is the caller's, checked non-null above.
    let room = unsafe { *len } as usize;
    let v = match opts::get(&s, level, name, room) {
        Ok(v) => v,
        Err(e) => return ret(Err(e)),
    };
    // SAFETY: `len` is the caller's; `val` has `*len` bytes.
    unsafe {
        let n = (*len as usize).min(v.len());
        std::ptr::copy_nonoverlapping(v.as_ptr(), val.cast::<u8>(), n);
        *len = n as socklen_t;
    }
    0
}

// ---- waiting -------------------------------------------------------------------

pub use mmsg::{recvmmsg, sendmmsg, splice};
pub use wait::{
    epoll_create, epoll_create1, epoll_ctl, epoll_pwait, epoll_pwait2, epoll_wait, poll, ppoll,
    pselect, select,
};

// ---- glibc's fortified variants (_FORTIFY_SOURCE) ---------------------------------

fn chk_fail() -> ! {
    let msg = b"*** buffer overflow detected ***: terminated\n";
    // SAFETY: a raw write of a static buffer to stderr.
    unsafe { libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len()) };
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
    // SAFETY: as the caller's.
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
    // SAFETY: as the caller's.
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
    // SAFETY: as the caller's.
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
    // SAFETY: as the caller's.
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
    // SAFETY: as the caller's.
    unsafe { ppoll(fds, n, ts, mask) }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn sin6(ip: std::net::Ipv6Addr, port: u16) -> libc::sockaddr_in6 {
        // SAFETY: plain data.
        let mut a: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
        a.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        a.sin6_port = port.to_be();
        a.sin6_addr.s6_addr = ip.octets();
        a
    }

    fn read6(a: &libc::sockaddr_in6) -> Result<SocketAddrV4, c_int> {
        // SAFETY: a whole sockaddr_in6.
        unsafe {
            read_addr(
                (a as *const libc::sockaddr_in6).cast(),
                size_of::<libc::sockaddr_in6>() as socklen_t,
            )
        }
    }

    #[test]
    fn ipv6_sockets_speak_mapped_ipv4() {
        let v4 = Ipv4Addr::new(10, 7, 0, 2);
        assert_eq!(
            read6(&sin6(v4.to_ipv6_mapped(), 80)),
            Ok(SocketAddrV4::new(v4, 80))
        );
        assert_eq!(
            read6(&sin6(std::net::Ipv6Addr::UNSPECIFIED, 5201)),
            Ok(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 5201))
        );
        assert_eq!(
            read6(&sin6("2001:db8::1".parse().unwrap(), 80)),
            Err(libc::EAFNOSUPPORT)
        );
        // Too short for its family.
        let a = sin6(v4.to_ipv6_mapped(), 80);
        // SAFETY: reads at most the given 16 bytes of `a`.
        let short = unsafe { read_addr((&raw const a).cast(), 16) };
        assert_eq!(short, Err(libc::EINVAL));
        // Written back as the kernel would: mapped, full length reported,
        // truncated to the room given.
        let mut out = [0u8; 28];
        let mut len = 28 as socklen_t;
        // SAFETY: `out` has `len` bytes.
        unsafe {
            write_addr(
                SocketAddrV4::new(v4, 443),
                true,
                out.as_mut_ptr().cast(),
                &raw mut len,
            )
        };
        assert_eq!(len as usize, size_of::<libc::sockaddr_in6>());
        // SAFETY: `out` holds a whole sockaddr_in6.
        let back: libc::sockaddr_in6 = unsafe { std::ptr::read_unaligned(out.as_ptr().cast()) };
        assert_eq!(read6(&back), Ok(SocketAddrV4::new(v4, 443)));
        let mut small = [0xaau8; 8];
        let mut len = 8 as socklen_t;
        // SAFETY: `small` has `len` bytes.
        unsafe {
            write_addr(
                SocketAddrV4::new(v4, 443),
                false,
                small.as_mut_ptr().cast(),
                &raw mut len,
            )
        };
        assert_eq!(
            len as usize,
            size_of::<libc::sockaddr_in>(),
            "full size reported"
        );
        assert_eq!(
            &small[2..4],
            &443u16.to_be_bytes(),
            "truncated, not overrun"
        );
    }
}
