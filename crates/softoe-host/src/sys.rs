//! System calls of the client: connecting, receiving descriptors, mapping,
//! doorbells.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Connects a `SOCK_SEQPACKET` socket to `path`.
pub(crate) fn connect(path: &Path) -> io::Result<OwnedFd> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data; zeroed is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket path too long",
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: plain socket calls; `addr` is valid for the call.
    unsafe {
        let fd = check(libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
        ))?;
        let fd = OwnedFd::from_raw_fd(fd);
        check(libc::connect(
            fd.as_raw_fd(),
            (&raw const addr).cast(),
            size_of::<libc::sockaddr_un>() as libc::socklen_t,
        ))?;
        Ok(fd)
    }
}

/// Sends one message.
pub(crate) fn send(fd: RawFd, b: &[u8]) -> io::Result<()> {
    // SAFETY: sends from `b`, valid for its length.
    let r = unsafe { libc::send(fd, b.as_ptr().cast(), b.len(), libc::MSG_NOSIGNAL) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends one message with one descriptor attached (`SCM_RIGHTS`).
pub(crate) fn send_fd(fd: RawFd, b: &[u8], pass: RawFd) -> io::Result<()> {
    send_fds(fd, b, &[pass])
}

/// Sends one message with descriptors attached (`SCM_RIGHTS`; a handful at
/// most).
pub(crate) fn send_fds(fd: RawFd, b: &[u8], pass: &[RawFd]) -> io::Result<()> {
    let fd_bytes = size_of_val(pass);
    // SAFETY: a pure computation.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    // On the stack: a message with a descriptor allocates nothing.
    let mut control = [0u64; 8];
    if space > size_of_val(&control) {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    let mut iov = libc::iovec {
        iov_base: b.as_ptr().cast_mut().cast(),
        iov_len: b.len(),
    };
    // SAFETY: msghdr is plain data; `iov` names `b` (only read), `control`
    // has CMSG_SPACE bytes for the descriptors and the CMSG_* macros stay
    // inside it.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let c = libc::CMSG_FIRSTHDR(&raw const msg);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
        std::ptr::copy_nonoverlapping(pass.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), fd_bytes);
        if libc::sendmsg(fd, &raw const msg, libc::MSG_NOSIGNAL) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A new non-blocking eventfd.
/// A connected pair of Unix stream sockets, close-on-exec.
/// Binds `fd` (one end of a watch's socket pair) to an abstract name
/// [`softoe_abi::WATCH_NAME`], the digit of `flags`, `:` and 32 random hex
/// digits: unique, and how a process the descriptor is passed to knows it.
pub(crate) fn bind_watch_name(fd: RawFd, flags: u8) -> io::Result<()> {
    for _ in 0..8 {
        let mut r = [0u8; 16];
        // SAFETY: writes at most `r.len()` bytes into `r`.
        let got = unsafe { libc::getrandom(r.as_mut_ptr().cast(), r.len(), 0) };
        if got != r.len() as isize {
            return Err(io::Error::last_os_error());
        }
        let mut name = softoe_abi::WATCH_NAME.to_vec();
        name.push(b'0' + (flags & 7));
        name.push(b':');
        for b in r {
            name.extend_from_slice(format!("{b:02x}").as_bytes());
        }
        // SAFETY: an all-zero sockaddr_un is valid; the name fits its path.
        let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        a.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, s) in a.sun_path.iter_mut().zip(&name) {
            *d = *s as libc::c_char;
        }
        let len = (size_of::<libc::sa_family_t>() + name.len()) as libc::socklen_t;
        // SAFETY: `a` is a valid sockaddr_un of at least `len` bytes.
        if unsafe { libc::bind(fd, (&raw const a).cast(), len) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EADDRINUSE) {
            return Err(e);
        }
    }
    Err(io::Error::from_raw_os_error(libc::EADDRINUSE))
}

/// The flags of a watched softoe socket's descriptor
/// ([`softoe_abi::WATCH_NAME`]: 1 `AF_INET6`, 2 a listener), if `fd` is
/// one by its name: what a process that received `fd` over a Unix socket
/// asks before it claims it.
pub fn watch_flags(fd: RawFd) -> Option<u8> {
    // SAFETY: an all-zero sockaddr_un is a valid out-parameter.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: `a` and `len` are valid for the call.
    if unsafe { libc::getsockname(fd, (&raw mut a).cast(), &raw mut len) } != 0
        || i32::from(a.sun_family) != libc::AF_UNIX
    {
        return None;
    }
    let path = (len as usize).checked_sub(size_of::<libc::sa_family_t>())?;
    let p = softoe_abi::WATCH_NAME;
    let got: Vec<u8> = a.sun_path[..path.min(a.sun_path.len())]
        .iter()
        .map(|&c| c as u8)
        .collect();
    if !got.starts_with(p) {
        return None;
    }
    let d = *got.get(p.len())?;
    d.is_ascii_digit().then(|| d - b'0')
}

pub(crate) fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors the kernel writes.
    check(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: both descriptors are new and ours alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: no pointers; the descriptor is new and ours.
    unsafe {
        let fd = check(libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC))?;
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Receives one message and up to `N` descriptors.
pub(crate) fn recv_fds<const N: usize>(
    fd: RawFd,
    buf: &mut [u8],
) -> io::Result<(usize, Vec<OwnedFd>)> {
    let fd_bytes = N * size_of::<RawFd>();
    // SAFETY: a pure computation.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    let mut control = [0u64; 8];
    if space > size_of_val(&control) {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut fds = Vec::new();
    // SAFETY: msghdr is plain data; `iov` names `buf` and `control` is
    // CMSG_SPACE bytes; the CMSG_* walk stays inside `control` as the kernel
    // filled it; each descriptor received is new and owned by us.
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let n = libc::recvmsg(fd, &raw mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut c = libc::CMSG_FIRSTHDR(&raw const msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let len = (*c).cmsg_len as usize - (data as usize - c as usize);
                for i in 0..len / size_of::<RawFd>() {
                    let mut raw: RawFd = 0;
                    std::ptr::copy_nonoverlapping(
                        data.add(i * size_of::<RawFd>()),
                        (&raw mut raw).cast::<u8>(),
                        size_of::<RawFd>(),
                    );
                    fds.push(OwnedFd::from_raw_fd(raw));
                }
            }
            c = libc::CMSG_NXTHDR(&raw const msg, c);
        }
        n as usize
    };
    Ok((n, fds))
}

/// A shared mapping, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
}

// SAFETY: process-wide memory; access goes through atomics and raw copies.
unsafe impl Send for Mapping {}
// SAFETY: as above; nothing hands out references into it.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` shared.
    pub(crate) fn map(fd: RawFd, len: usize) -> io::Result<Mapping> {
        // SAFETY: maps `len` bytes of a memfd the engine sealed at (at
        // least) that size.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { ptr: p.cast(), len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps what `map` mapped; the client is gone.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Rings an eventfd.
pub(crate) fn signal(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64.
    let _ = unsafe { libc::write(fd, (&raw const one).cast(), 8) };
}

/// Clears an eventfd (non-blocking).
///
/// `errno` is kept: drains run in drops between a failed wait and the
/// caller's look at `errno` (a signal's `EINTR` must not read as the empty
/// bell's `EAGAIN`).
pub(crate) fn drain(fd: RawFd) {
    let _keep = KeepErrno::new();
    let mut v: u64 = 0;
    // SAFETY: reads 8 bytes into a live u64; the engine made it non-blocking.
    let _ = unsafe { libc::read(fd, (&raw mut v).cast(), 8) };
}

/// Puts `errno` back as it was when made, when dropped.
pub(crate) struct KeepErrno(libc::c_int);

impl KeepErrno {
    pub(crate) fn new() -> KeepErrno {
        // SAFETY: `__errno_location` returns this thread's errno word.
        KeepErrno(unsafe { *libc::__errno_location() })
    }
}

impl Drop for KeepErrno {
    fn drop(&mut self) {
        // SAFETY: as in `new`.
        unsafe { *libc::__errno_location() = self.0 };
    }
}

/// Whether a blocking call a signal handler interrupted should go on, as
/// the kernel restarts a socket call when the handler was installed with
/// `SA_RESTART`. Which signal came is unknown here, so the call goes on
/// only when every installed handler restarts; a program with a handler
/// that does not (Python's, a C program's `alarm` timeout) gets `EINTR`.
pub(crate) fn restart_after_signal() -> bool {
    for sig in 1..=libc::SIGRTMAX() {
        // SAFETY: an all-zero `sigaction` is a valid out-parameter.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: queries only (null new action); `old` is valid for writes.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &raw mut old) } != 0 {
            continue;
        }
        let h = old.sa_sigaction;
        if h != libc::SIG_DFL && h != libc::SIG_IGN && old.sa_flags & libc::SA_RESTART == 0 {
            return false;
        }
    }
    true
}

/// Waits until `fd` is readable or `timeout` passes; `false` when a signal
/// handler interrupted the wait.
/// The identity (device, inode) of the file open at `fd`, if it is open.
pub(crate) fn file_id(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: `stat` is plain data; all-zero is a valid value, and fstat
    // writes at most one.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a live, writable stat.
    (unsafe { libc::fstat(fd, &raw mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// How a nap on a doorbell ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Nap {
    /// The bell rang, or the time ran out.
    Over,
    /// A signal came.
    Interrupted,
    /// The engine's end of the attach connection closed: the engine is
    /// gone (it died, or stopped without a word).
    EngineGone,
}

/// Sleeps until `bell` is readable or `timeout` passes, watching `conn`
/// (the attach connection) for the engine's end closing: a hang-up is
/// reported whatever events are asked for, so nothing the engine sends on
/// it wakes the nap.
pub(crate) fn nap(bell: RawFd, conn: RawFd, timeout: Duration) -> Nap {
    let mut p = [
        libc::pollfd {
            fd: bell,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: conn,
            events: 0,
            revents: 0,
        },
    ];
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: two valid pollfds and a valid timespec for the call.
    let r = unsafe { libc::ppoll(p.as_mut_ptr(), 2, &raw const ts, std::ptr::null()) };
    if r < 0 {
        return if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            Nap::Interrupted
        } else {
            Nap::Over
        };
    }
    if p[1].revents & (libc::POLLHUP | libc::POLLERR) != 0 {
        return Nap::EngineGone;
    }
    Nap::Over
}

/// Whether `fd` has something to read (or its peer hung up) within
/// `timeout`; a signal counts as nothing.
pub(crate) fn readable_within(fd: RawFd, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd for the call.
    let r = unsafe { libc::poll(&raw mut p, 1, ms) };
    r > 0 && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
}
