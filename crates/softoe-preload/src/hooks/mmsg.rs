//! The batch and pipe calls on softoe sockets: `recvmmsg`, `sendmmsg` and
//! `splice`.
//!
//! `recvmmsg` and `sendmmsg` are Linux's loops over `recvmsg` and `sendmsg`,
//! with its rules: at most `UIO_MAXIOV` (1024) messages; `MSG_WAITFORONE`
//! turns on `MSG_DONTWAIT` after the first message; `recvmmsg`'s timeout is
//! checked after each message (as Linux's, it does not bound the wait for
//! the first one) and the time left is written back; an error after some
//! messages returns the count so far.
//!
//! `splice` with a softoe socket on one side and a pipe on the other goes
//! through a buffer, and never loses a byte: socket → pipe reads from the
//! socket only what the pipe has room for (waiting for room, or `EAGAIN`
//! with `SPLICE_F_NONBLOCK` or a non-blocking pipe); pipe → socket takes
//! from the pipe only what the socket took — for a non-blocking socket the
//! pipe's bytes are first copied with `tee` into a private pipe, and only
//! the bytes sent are then consumed. The errors are Linux's: `EINVAL`
//! without a pipe on one side or with an offset for the socket, `ESPIPE`
//! with an offset for the pipe.

use std::sync::Arc;
use std::time::{Duration, Instant};

use libc::{c_int, c_uint, loff_t, mmsghdr, size_t, ssize_t, timespec};
use tracing::debug;

use super::{fail, ours, ret_size};
use crate::real;
use crate::sock::{Kind, Sock};

/// Linux's `UIO_MAXIOV`: the most messages one call handles.
const UIO_MAXIOV: c_uint = 1024;

fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmmsg(
    fd: c_int,
    msgs: *mut mmsghdr,
    vlen: c_uint,
    flags: c_int,
    timeout: *mut timespec,
) -> c_int {
    dispatch!(fd, recvmmsg(fd, msgs, vlen, flags, timeout), |s| {
        // Each message's `recvmsg` finds the socket itself.
        drop(s);
        // SAFETY: the caller's array of `vlen` messages and its timeout
        // (see `hooks`).
        unsafe { recv_batch(fd, msgs, vlen, flags, timeout) }
    })
}

/// `recvmmsg` on a softoe socket: `recvmsg` per message.
///
/// # Safety
/// `msgs` is null or valid for `vlen` entries; `timeout` null or valid.
unsafe fn recv_batch(
    fd: c_int,
    msgs: *mut mmsghdr,
    vlen: c_uint,
    flags: c_int,
    timeout: *mut timespec,
) -> c_int {
    if msgs.is_null() {
        return fail(libc::EFAULT);
    }
    let deadline = if timeout.is_null() {
        None
    } else {
        // SAFETY: the caller's timespec.
        let t = unsafe { *timeout };
        if t.tv_sec < 0 || !(0..1_000_000_000).contains(&t.tv_nsec) {
            return fail(libc::EINVAL);
        }
        Some(Instant::now() + Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
    };
    let mut flags = flags;
    let mut got: c_uint = 0;
    let mut err = 0;
    while got < vlen.min(UIO_MAXIOV) {
        // SAFETY: the caller's array holds `vlen` entries.
        let m = unsafe { &mut *msgs.add(got as usize) };
        // SAFETY: the caller's message header, served by our `recvmsg`.
        let n =
            unsafe { super::io::recvmsg(fd, &raw mut m.msg_hdr, flags & !libc::MSG_WAITFORONE) };
        if n < 0 {
            err = errno();
            break;
        }
        m.msg_len = n as c_uint;
        got += 1;
        if flags & libc::MSG_WAITFORONE != 0 {
            flags |= libc::MSG_DONTWAIT;
        }
        if let Some(end) = deadline {
            let left = end.saturating_duration_since(Instant::now());
            // SAFETY: the caller's timespec: the time left, as Linux
            // writes it back.
            unsafe {
                *timeout = timespec {
                    tv_sec: left.as_secs() as libc::time_t,
                    tv_nsec: left.subsec_nanos() as libc::c_long,
                };
            }
            if left.is_zero() {
                break;
            }
        }
    }
    if got == 0 && err != 0 {
        return fail(err);
    }
    if err != 0 && err != libc::EAGAIN {
        debug!(
            fd,
            errno = err,
            got,
            "recvmmsg: an error after some messages"
        );
    }
    got as c_int
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmmsg(
    fd: c_int,
    msgs: *mut mmsghdr,
    vlen: c_uint,
    flags: c_int,
) -> c_int {
    dispatch!(fd, sendmmsg(fd, msgs, vlen, flags), |s| {
        // Each message's `sendmsg` finds the socket itself.
        drop(s);
        // SAFETY: the caller's array of `vlen` messages (see `hooks`).
        unsafe { send_batch(fd, msgs, vlen, flags) }
    })
}

/// `sendmmsg` on a softoe socket: `sendmsg` per message.
///
/// # Safety
/// `msgs` is null or valid for `vlen` entries.
unsafe fn send_batch(fd: c_int, msgs: *mut mmsghdr, vlen: c_uint, flags: c_int) -> c_int {
    if msgs.is_null() {
        return fail(libc::EFAULT);
    }
    let mut sent: c_uint = 0;
    while sent < vlen.min(UIO_MAXIOV) {
        // SAFETY: the caller's array holds `vlen` entries.
        let m = unsafe { &mut *msgs.add(sent as usize) };
        // SAFETY: the caller's message header, served by our `sendmsg`.
        let n = unsafe { super::io::sendmsg(fd, &raw const m.msg_hdr, flags) };
        if n < 0 {
            if sent == 0 {
                return -1;
            }
            debug!(
                fd,
                errno = errno(),
                sent,
                "sendmmsg: an error after some messages"
            );
            break;
        }
        m.msg_len = n as c_uint;
        sent += 1;
    }
    sent as c_int
}

/// Whether `fd` is a pipe (or FIFO).
fn is_pipe(fd: c_int) -> bool {
    // SAFETY: stat is plain data; fstat fills it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    unsafe { libc::fstat(fd, &raw mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFIFO }
}

fn nonblocking(fd: c_int) -> bool {
    // SAFETY: F_GETFL takes no argument.
    let fl = unsafe { real::fcntl(fd, libc::F_GETFL, 0) };
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

/// Waits until `fd` is ready for `events` (a signal ends the wait: `EINTR`).
fn wait_for(fd: c_int, events: libc::c_short) -> Result<(), c_int> {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one pollfd; the kernel's poll (the pipe is no softoe socket).
    if unsafe { real::poll(&raw mut p, 1, -1) } < 0 {
        return Err(errno());
    }
    Ok(())
}

/// Whether a read of `fd` would not block now (data, or no writers).
fn readable_now(fd: c_int) -> Result<bool, c_int> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd; the kernel's poll, not waiting.
    if unsafe { real::poll(&raw mut p, 1, 0) } < 0 {
        return Err(errno());
    }
    Ok(p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0)
}

/// Writes all of `b` to the pipe `fd`, waiting for room if it must: the
/// bytes were already taken from the socket and may not be lost.
fn write_all(fd: c_int, mut b: &[u8]) -> Result<(), c_int> {
    while !b.is_empty() {
        // SAFETY: `b` is valid for its length.
        let n = unsafe { real::write(fd, b.as_ptr().cast(), b.len()) };
        if n < 0 {
            match errno() {
                libc::EAGAIN => wait_for(fd, libc::POLLOUT)?,
                libc::EINTR => {}
                e => return Err(e),
            }
            continue;
        }
        b = &b[n as usize..];
    }
    Ok(())
}

/// Socket → pipe.
fn socket_to_pipe(s: &Sock, pipe: c_int, len: usize, flags: c_uint) -> Result<usize, c_int> {
    let nonblock = flags & libc::SPLICE_F_NONBLOCK != 0 || nonblocking(pipe);
    let room = loop {
        // SAFETY: F_GETPIPE_SZ takes no argument.
        let cap = unsafe { real::fcntl(pipe, libc::F_GETPIPE_SZ, 0) };
        let mut held: c_int = 0;
        // SAFETY: FIONREAD writes one int.
        let r = unsafe { real::ioctl(pipe, libc::FIONREAD, (&raw mut held) as libc::c_ulong) };
        if cap < 0 || r < 0 {
            return Err(errno());
        }
        let room = (cap - held).max(0) as usize;
        if room > 0 {
            break room;
        }
        if nonblock {
            return Err(libc::EAGAIN);
        }
        wait_for(pipe, libc::POLLOUT)?;
    };
    let mut buf = vec![0u8; len.min(room).min(1 << 20)];
    let (n, _) = s.recv(&mut buf, 0)?;
    write_all(pipe, &buf[..n])?;
    Ok(n)
}

/// Pipe → socket.
fn pipe_to_socket(s: &Sock, pipe: c_int, len: usize, flags: c_uint) -> Result<usize, c_int> {
    let nonblock_pipe = flags & libc::SPLICE_F_NONBLOCK != 0 || nonblocking(pipe);
    let nonblock_sock = s.nonblock.load(std::sync::atomic::Ordering::Relaxed);
    let want = len.min(1 << 20);
    if !nonblock_sock {
        // A blocking send takes everything: read, then send it all.
        if nonblock_pipe && !readable_now(pipe)? {
            return Err(libc::EAGAIN);
        }
        let mut buf = vec![0u8; want];
        // SAFETY: our buffer of `want` bytes.
        let n = unsafe { real::read(pipe, buf.as_mut_ptr().cast(), want) };
        if n < 0 {
            return Err(errno());
        }
        let n = n as usize;
        if n == 0 {
            return Ok(0);
        }
        let sent = s.send(&buf[..n], 0, None)?;
        if sent < n {
            debug!(sent, n, "splice: the socket took less than the pipe gave");
        }
        return Ok(sent);
    }
    // A non-blocking socket may take less: copy the pipe's bytes with
    // `tee` into a private pipe, send, and consume only what was sent.
    let mut fds = [0 as c_int; 2];
    // SAFETY: room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(errno());
    }
    let (tr, tw) = (fds[0], fds[1]);
    let r = (|| {
        let tee_flags = if nonblock_pipe {
            libc::SPLICE_F_NONBLOCK
        } else {
            0
        };
        // SAFETY: two pipes; nothing else is touched.
        let n = unsafe { libc::tee(pipe, tw, want.min(65_536), tee_flags) };
        if n < 0 {
            return Err(errno());
        }
        let n = n as usize;
        if n == 0 {
            return Ok(0);
        }
        let mut buf = vec![0u8; n];
        let mut at = 0;
        while at < n {
            // SAFETY: our buffer, `n - at` bytes from `at`.
            let k = unsafe { real::read(tr, buf[at..].as_mut_ptr().cast(), n - at) };
            if k <= 0 {
                return Err(if k < 0 { errno() } else { libc::EIO });
            }
            at += k as usize;
        }
        let sent = s.send(&buf, 0, None)?;
        // Consume what went out (the bytes `tee` copied, still first in
        // the pipe).
        let mut left = sent;
        while left > 0 {
            // SAFETY: our buffer of at least `left` bytes.
            let k = unsafe { real::read(pipe, buf.as_mut_ptr().cast(), left) };
            if k < 0 {
                match errno() {
                    libc::EINTR => continue,
                    libc::EAGAIN => {
                        wait_for(pipe, libc::POLLIN)?;
                        continue;
                    }
                    e => return Err(e),
                }
            }
            if k == 0 {
                break;
            }
            left -= k as usize;
        }
        Ok(sent)
    })();
    // SAFETY: our own private pipe's descriptors.
    unsafe {
        real::close(tr);
        real::close(tw);
    }
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn splice(
    fd_in: c_int,
    off_in: *mut loff_t,
    fd_out: c_int,
    off_out: *mut loff_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    let (sin, sout) = (ours(fd_in), ours(fd_out));
    let r: Result<usize, c_int> = match (sin, sout) {
        (None, None) => return forward!(splice(fd_in, off_in, fd_out, off_out, len, flags)),
        (Some(Err(e)), _) | (_, Some(Err(e))) => Err(e),
        (Some(Ok(_)), Some(Ok(_))) => Err(libc::EINVAL),
        (Some(Ok(s)), None) => splice_checked(&s, fd_out, off_out, off_in, len, |s| {
            socket_to_pipe(s, fd_out, len, flags)
        }),
        (None, Some(Ok(s))) => splice_checked(&s, fd_in, off_in, off_out, len, |s| {
            pipe_to_socket(s, fd_in, len, flags)
        }),
    };
    ret_size(r)
}

/// Linux's checks before a splice between softoe socket `s` and `pipe`.
fn splice_checked(
    s: &Arc<Sock>,
    pipe: c_int,
    pipe_off: *mut loff_t,
    sock_off: *mut loff_t,
    len: usize,
    f: impl FnOnce(&Sock) -> Result<usize, c_int>,
) -> Result<usize, c_int> {
    if !is_pipe(pipe) {
        return Err(libc::EINVAL);
    }
    if !pipe_off.is_null() {
        return Err(libc::ESPIPE);
    }
    if !sock_off.is_null() || s.kind != Kind::Tcp {
        return Err(libc::EINVAL);
    }
    if len == 0 {
        return Ok(0);
    }
    f(s)
}
