//! The data calls: `read`/`write`, `readv`/`writev`, `recv`/`recvfrom`/
//! `recvmsg`, `send`/`sendto`/`sendmsg`, and `sendfile`.
//!
//! A softoe socket's `send` becomes one command the engine carries out by
//! reading the caller's buffer itself; its `recv` copies from the socket's
//! receive ring. Scattered buffers are gathered into one send (one
//! command), and filled in turn on receive.

use std::net::SocketAddrV4;
use std::ptr::null_mut;

use libc::{c_int, c_void, msghdr, off_t, size_t, sockaddr, socklen_t, ssize_t};

use super::{fail, ret_size};
use crate::addr::{read_addr, write_addr};
use crate::real::{self, set_errno};
use crate::sock::{Kind, Sock, TABLE};

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
        return fail(libc::EAGAIN);
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
    dispatch!(fd, read(fd, buf, len), |s| {
        // SAFETY: the caller's buffer (see `hooks`).
        unsafe { recv_into(&s, buf, len, 0, null_mut(), null_mut()) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    dispatch!(fd, recv(fd, buf, len, flags), |s| {
        // SAFETY: the caller's buffer (see `hooks`).
        unsafe { recv_into(&s, buf, len, flags, null_mut(), null_mut()) }
    })
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
    dispatch!(fd, recvfrom(fd, buf, len, flags, addr, alen), |s| {
        // SAFETY: the caller's buffer and address (see `hooks`).
        unsafe { recv_into(&s, buf, len, flags, addr, alen) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, len: size_t) -> ssize_t {
    dispatch!(fd, write(fd, buf, len), |s| {
        // SAFETY: the caller's buffer (see `hooks`).
        unsafe { send_from(&s, buf, len, 0, None) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t {
    dispatch!(fd, send(fd, buf, len, flags), |s| {
        // SAFETY: the caller's buffer (see `hooks`).
        unsafe { send_from(&s, buf, len, flags, None) }
    })
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
    dispatch!(fd, sendto(fd, buf, len, flags, addr, alen), |s| {
        let to = if addr.is_null() || s.kind == Kind::Tcp {
            None
        } else {
            // SAFETY: the caller's `addr`, valid for `alen` (see `hooks`).
            match unsafe { read_addr(addr, alen) } {
                Ok(a) => Some(a),
                Err(e) => return fail(e),
            }
        };
        // SAFETY: the caller's buffer (see `hooks`).
        unsafe { send_from(&s, buf, len, flags, to) }
    })
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
    dispatch!(fd, readv(fd, iov, n), |s| {
        // SAFETY: the caller's iovecs (see `hooks`).
        unsafe { recv_iov(&s, iovecs(iov, n), 0).0 }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t {
    dispatch!(fd, writev(fd, iov, n), |s| {
        // SAFETY: the caller's iovecs (see `hooks`).
        unsafe { send_iov(&s, iovecs(iov, n), 0, None) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    // Softoe sockets passed to another process go as their watched
    // descriptors (`sock/pass.rs`).
    if TABLE.get(fd).is_none()
        && !msg.is_null()
        // SAFETY: the caller's msghdr (see `hooks`).
        && unsafe { (*msg).msg_controllen } > 0
    {
        // SAFETY: the caller's msghdr and control buffer (see `hooks`).
        unsafe { crate::sock::before_send(&*msg) };
    }
    dispatch!(fd, sendmsg(fd, msg, flags), |s| {
        if msg.is_null() {
            return fail(libc::EFAULT);
        }
        // SAFETY: the caller's msghdr (see `hooks`).
        let m = unsafe { &*msg };
        let to = if m.msg_name.is_null() || s.kind == Kind::Tcp {
            None
        } else {
            // SAFETY: the caller's name buffer of `msg_namelen` bytes.
            match unsafe { read_addr(m.msg_name.cast(), m.msg_namelen) } {
                Ok(a) => Some(a),
                Err(e) => return fail(e),
            }
        };
        // SAFETY: the caller's iovecs (see `hooks`).
        unsafe { send_iov(&s, iovecs(m.msg_iov, m.msg_iovlen as c_int), flags, to) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    if TABLE.get(fd).is_none() {
        let n = forward!(recvmsg(fd, msg, flags));
        // Softoe sockets received from another process join the table.
        // SAFETY: the caller's msghdr, which the kernel just filled (see
        // `hooks`).
        if n >= 0 && !msg.is_null() && unsafe { (*msg).msg_controllen } > 0 {
            // SAFETY: as above.
            unsafe { crate::sock::after_recv(&*msg) };
        }
        return n;
    }
    dispatch!(fd, recvmsg(fd, msg, flags), |s| {
        if msg.is_null() {
            return fail(libc::EFAULT);
        }
        if flags & libc::MSG_ERRQUEUE != 0 {
            // softoe sockets queue no errors (`IP_RECVERR` is recorded only).
            return fail(libc::EAGAIN);
        }
        // SAFETY: the caller's msghdr (see `hooks`).
        let m = unsafe { &mut *msg };
        // SAFETY: the caller's iovecs (see `hooks`).
        let (n, from) = unsafe { recv_iov(&s, iovecs(m.msg_iov, m.msg_iovlen as c_int), flags) };
        if n >= 0 {
            m.msg_controllen = 0;
            m.msg_flags = 0;
            match from {
                Some(f) if !m.msg_name.is_null() => {
                    // SAFETY: the caller's name buffer (see `hooks`).
                    unsafe { write_addr(f, s.v6, m.msg_name.cast(), &raw mut m.msg_namelen) };
                }
                _ => m.msg_namelen = 0,
            }
        }
        n
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile(
    out: c_int,
    input: c_int,
    off: *mut off_t,
    count: size_t,
) -> ssize_t {
    dispatch!(out, sendfile(out, input, off, count), |s| {
        // SAFETY: `off` null or the caller's valid offset (see `hooks`).
        unsafe { sendfile_from(&s, out, input, off, count) }
    })
}

/// Serves `sendfile` to softoe socket `s` (descriptor `out`).
///
/// # Safety
/// `off` is null or valid.
unsafe fn sendfile_from(
    s: &Sock,
    out: c_int,
    input: c_int,
    off: *mut off_t,
    count: size_t,
) -> ssize_t {
    // Read from the file and send: the engine reads our buffer, so the
    // file's bytes are copied once on this core, as a read+write would.
    // The buffer is this thread's, kept between calls: a web server calls
    // this per response, and a fresh zeroed megabyte each time cost more
    // than the copy.
    let want = count.min(1 << 20);
    let kept = SENDFILE_BUF.try_with(|cell| {
        // Busy only if a signal handler of this thread calls sendfile
        // while it runs: that call gets a buffer of its own.
        let mut buf = cell.try_borrow_mut().ok()?;
        if buf.len() < want {
            buf.resize(want, 0);
        }
        // SAFETY: as this function's.
        Some(unsafe { sendfile_with(s, out, input, off, count, &mut buf[..want]) })
    });
    match kept {
        Ok(Some(r)) => r,
        // SAFETY: as this function's.
        _ => unsafe { sendfile_with(s, out, input, off, count, &mut vec![0u8; want]) },
    }
}

thread_local! {
    /// `sendfile_from`'s buffer (up to 1 MiB, grown on demand).
    static SENDFILE_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`sendfile_from`] through `buf`.
///
/// # Safety
/// `off` is null or valid.
unsafe fn sendfile_with(
    s: &Sock,
    out: c_int,
    input: c_int,
    off: *mut off_t,
    count: size_t,
    buf: &mut [u8],
) -> ssize_t {
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
                    return fail(e);
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
    // SAFETY: the caller's arguments, unchanged, to the hook with the same
    // contract (forwarding, in `hooks`).
    unsafe { sendfile(out, input, off, count) }
}
