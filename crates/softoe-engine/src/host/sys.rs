//! The system calls the host interface needs, each wrapped once: sealed
//! memfd mappings, eventfds, a `SOCK_SEQPACKET` listener with peer
//! credentials and descriptor passing, epoll, and `process_vm_readv`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    let fd = check(fd)?;
    // SAFETY: `fd` was just returned by the kernel to this process and
    // nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A shared mapping of a sealed memfd, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is process-wide memory; whoever holds the `Mapping`
// decides who touches it (all access goes through atomics or raw copies).
unsafe impl Send for Mapping {}

impl Mapping {
    /// A zeroed memfd of `len` bytes, sealed so nobody can shrink or grow it
    /// (a program shrinking it would make the engine fault), mapped shared.
    pub fn memfd(name: &str, len: usize) -> io::Result<(OwnedFd, Mapping)> {
        let cname = CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
        // SAFETY: `cname` is a valid C string for the call.
        let fd = owned(unsafe {
            libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        })?;
        let size = libc::off_t::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
        // SAFETY: plain calls on our own descriptor.
        unsafe {
            check(libc::ftruncate(fd.as_raw_fd(), size))?;
            check(libc::fcntl(
                fd.as_raw_fd(),
                libc::F_ADD_SEALS,
                libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
            ))?;
        }
        // SAFETY: maps `len` bytes of our memfd, which is exactly `len` long
        // and can no longer shrink.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok((fd, Mapping { ptr: p.cast(), len }))
    }

    /// The first byte.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `memfd` mapped; the owner guarantees
        // nothing references it any more (the session removes its region
        // from `Memory` first).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// An eventfd: a doorbell.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A non-blocking eventfd.
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd takes no pointers.
        owned(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) }).map(EventFd)
    }

    /// Rings it.
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64; a full counter (EAGAIN)
        // means the reader is already due to wake.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), (&raw const one).cast(), 8) };
    }

    /// Clears it.
    pub fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from a non-blocking eventfd.
        let _ = unsafe { libc::read(self.0.as_raw_fd(), (&raw mut v).cast(), 8) };
    }

    /// The descriptor.
    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Takes a descriptor a program sent as its doorbell: only an eventfd
    /// is accepted (writing 8 bytes to anything else could block the
    /// engine or mean something else), and it is made non-blocking.
    pub fn adopt(fd: OwnedFd) -> io::Result<EventFd> {
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
        if link.as_os_str() != "anon_inode:[eventfd]" {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a doorbell must be an eventfd",
            ));
        }
        // SAFETY: fcntl on a descriptor we own; no pointers.
        let fl = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
        if fl < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above.
        let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(EventFd(fd))
    }
}

/// A listening `SOCK_SEQPACKET` Unix socket at `path` with file mode
/// `mode` (who may attach); a stale socket file there is replaced.
pub fn listen(path: &Path, mode: u32) -> io::Result<OwnedFd> {
    let bytes = path.as_os_str().as_bytes();
    let addr = crate::sockpath::sockaddr(path).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("socket path {} is too long", path.display()),
        )
    })?;
    // A live engine answers a connect; only a dead one's file is removed.
    crate::sockpath::claim(path, "host interface")?;
    // SAFETY: plain socket calls; `addr` lives across them.
    unsafe {
        let fd = owned(libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        ))?;
        check(libc::bind(
            fd.as_raw_fd(),
            (&raw const addr).cast(),
            size_of::<libc::sockaddr_un>() as libc::socklen_t,
        ))?;
        let cpath = CString::new(bytes).map_err(|_| io::ErrorKind::InvalidInput)?;
        check(libc::chmod(cpath.as_ptr(), mode))?;
        check(libc::listen(fd.as_raw_fd(), 128))?;
        Ok(fd)
    }
}

/// A connected pair of `SOCK_SEQPACKET` Unix sockets, close-on-exec: the
/// engine's end (non-blocking, as an accepted connection is) and the
/// program's (blocking), for a program in the engine's own process.
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors the kernel writes.
    check(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: both descriptors are new and ours alone.
    let (engine, program) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on a descriptor we own; no pointers.
    let fl = check(unsafe { libc::fcntl(engine.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: as above.
    check(unsafe { libc::fcntl(engine.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) })?;
    Ok((engine, program))
}

/// Accepts one connection, non-blocking; `None` when none waits.
pub fn accept(listener: RawFd) -> io::Result<Option<OwnedFd>> {
    // SAFETY: accept4 with null address pointers is allowed.
    let r = unsafe {
        libc::accept4(
            listener,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ if e.raw_os_error() == Some(libc::ECONNABORTED) => Ok(None),
            _ => Err(e),
        };
    }
    owned(r).map(Some)
}

/// The peer's process, user and group (`SO_PEERCRED`).
pub fn peer_cred(fd: RawFd) -> io::Result<(i32, u32, u32)> {
    // SAFETY: ucred is plain data; getsockopt writes at most `len` bytes.
    unsafe {
        let mut c: libc::ucred = std::mem::zeroed();
        let mut len = size_of::<libc::ucred>() as libc::socklen_t;
        check(libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut c).cast(),
            &raw mut len,
        ))?;
        Ok((c.pid, c.uid, c.gid))
    }
}

/// Receives one message, non-blocking: `Ok(None)` when none waits,
/// `Ok(Some(0))` when the peer has gone.
/// Whether `fd` is a Unix stream socket (what a program must send to have
/// a connection watched across `fork`).
pub fn is_unix_stream(fd: RawFd) -> bool {
    let get = |opt: libc::c_int| {
        let mut v: libc::c_int = 0;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `v` and `len` are valid for the call and sized for an int.
        let r = unsafe {
            libc::getsockopt(fd, libc::SOL_SOCKET, opt, (&raw mut v).cast(), &raw mut len)
        };
        (r == 0).then_some(v)
    };
    get(libc::SO_DOMAIN) == Some(libc::AF_UNIX) && get(libc::SO_TYPE) == Some(libc::SOCK_STREAM)
}

/// The address the Unix socket `fd` is bound to (`peer`: its peer's), as
/// the kernel gives it: an abstract name starts with a 0 byte. `None` for
/// no Unix socket, or one without a name.
pub fn unix_name(fd: RawFd, peer: bool) -> Option<Vec<u8>> {
    // SAFETY: an all-zero sockaddr_un is a valid out-parameter.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: `a` and `len` are valid for the call, `len` its size.
    let r = unsafe {
        if peer {
            libc::getpeername(fd, (&raw mut a).cast(), &raw mut len)
        } else {
            libc::getsockname(fd, (&raw mut a).cast(), &raw mut len)
        }
    };
    let path = (len as usize).checked_sub(size_of::<libc::sa_family_t>())?;
    if r != 0 || i32::from(a.sun_family) != libc::AF_UNIX || path == 0 {
        return None;
    }
    Some(
        a.sun_path[..path.min(a.sun_path.len())]
            .iter()
            .map(|&c| c as u8)
            .collect(),
    )
}

/// Whether `theirs` is the far end of the socket pair `ours` is one end
/// of: a byte written on `ours` is there to read on `theirs` at once (a
/// socket pair's write is delivered inside the call). Everything waiting
/// on `theirs` is read, and the probe must be the last byte: a failed
/// claim (someone else's descriptor, in another network namespace where
/// the same abstract name is free) leaves its probe in the real far end,
/// and must not make the next, honest claim fail. Only the engine writes
/// to that end, so nobody else can put the probe there.
pub fn is_far_end(ours: RawFd, theirs: RawFd, probe: u8) -> bool {
    let b = [probe];
    // SAFETY: sends one byte from `b`, valid for the call.
    let sent = unsafe {
        libc::send(
            ours,
            b.as_ptr().cast(),
            1,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if sent != 1 {
        return false;
    }
    let mut got = [0u8; 256];
    let mut last = None;
    // At most 16 reads: stale probes are few (one per failed claim).
    for _ in 0..16 {
        // SAFETY: receives at most `got.len()` bytes into `got`.
        let n = unsafe {
            libc::recv(
                theirs,
                got.as_mut_ptr().cast(),
                got.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n <= 0 {
            break;
        }
        last = got.get(n as usize - 1).copied();
        if (n as usize) < got.len() {
            break;
        }
    }
    last == Some(probe)
}

pub fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: receives into `buf`, which is valid for its length.
    let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        };
    }
    Ok(Some(r as usize))
}

/// Receives one message and the descriptors sent with it (at most 4),
/// non-blocking: `Ok(None)` when none waits, `Ok(Some((0, _)))` when the
/// peer has gone. Descriptors beyond 4 are closed by the kernel
/// (`MSG_CTRUNC`).
pub fn recv_with_fds(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<(usize, Vec<OwnedFd>)>> {
    const MAX: usize = 4;
    // SAFETY: a pure computation.
    let space = unsafe { libc::CMSG_SPACE((MAX * size_of::<RawFd>()) as u32) } as usize;
    // On the stack: the engine calls this at every doorbell a program
    // rings (32 bytes on Linux; 64 leaves room).
    let mut control = [0u64; 8];
    let space = space.min(size_of_val(&control));
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut fds = Vec::new();
    // SAFETY: msghdr is plain data; `iov` names `buf` and `control` holds
    // at least `space` bytes (8-aligned, as cmsghdr needs); the CMSG_*
    // walk stays inside what the kernel filled; every descriptor received
    // is new and becomes ours exactly once.
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let n = libc::recvmsg(
            fd,
            &raw mut msg,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        );
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            };
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
    Ok(Some((n, fds)))
}

/// Sends `bytes` with `fds` attached (`SCM_RIGHTS`).
pub fn send_with_fds(fd: RawFd, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let fd_bytes = size_of_val(fds);
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    // SAFETY: msghdr is plain data; every pointer set below is valid for the
    // call: `iov` names `bytes`, `control` is large enough for one cmsg
    // carrying `fds` (CMSG_SPACE), and the CMSG_* macros stay inside it.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = space as _;
            let c = libc::CMSG_FIRSTHDR(&raw const msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), fd_bytes);
        }
        let r = libc::sendmsg(fd, &raw const msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT);
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// An epoll instance whose events carry a `u64` token.
#[derive(Debug)]
pub struct Epoll(OwnedFd);

impl Epoll {
    /// A new instance.
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: no pointers.
        owned(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) }).map(Epoll)
    }

    /// Watches `fd` for input (and hang-up) with `token`.
    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
            u64: token,
        };
        // SAFETY: `ev` is valid for the call.
        check(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &raw mut ev) })
            .map(drop)
    }

    /// Stops watching `fd`.
    pub fn delete(&self, fd: RawFd) {
        // SAFETY: a null event is allowed for EPOLL_CTL_DEL.
        let _ = unsafe {
            libc::epoll_ctl(
                self.0.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        };
    }

    /// Tokens of ready descriptors, without waiting.
    pub fn ready(&self, out: &mut Vec<u64>) {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
        // SAFETY: `evs` holds 64 events for the kernel to fill.
        let n = unsafe { libc::epoll_wait(self.0.as_raw_fd(), evs.as_mut_ptr(), 64, 0) };
        for e in evs.iter().take(n.max(0) as usize) {
            out.push(e.u64);
        }
    }

    /// The descriptor (readable when any watched one is).
    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Copies `dst.len()` bytes from address `addr` in process `pid`
/// (`process_vm_readv`): the engine reading a program's buffer, the software
/// twin of a NIC's DMA from host memory.
pub fn read_process(pid: i32, addr: u64, dst: &mut [u8]) -> io::Result<usize> {
    let local = libc::iovec {
        iov_base: dst.as_mut_ptr().cast(),
        iov_len: dst.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: dst.len(),
    };
    // SAFETY: `local` names `dst`, valid for writes; the remote iovec is
    // only interpreted by the kernel in the other process, which checks it.
    let r = unsafe { libc::process_vm_readv(pid, &raw const local, 1, &raw const remote, 1, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as usize)
}

/// Writes `a` then `b` to address `addr` in process `pid`
/// (`process_vm_writev`): the engine placing received bytes straight into
/// a buffer the program posted, as a NIC's DMA would. Returns the bytes
/// written (fewer when the buffer ends in unmapped memory).
pub fn write_process(pid: i32, addr: u64, a: &[u8], b: &[u8]) -> io::Result<usize> {
    let total = a.len() + b.len();
    if total == 0 {
        return Ok(0);
    }
    let local = [a, b].map(|s| libc::iovec {
        iov_base: s.as_ptr().cast_mut().cast(),
        iov_len: s.len(),
    });
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: total,
    };
    // SAFETY: both local iovecs name live slices of ours, only read by the
    // kernel (the `*mut` is the C type's, not a write; an empty one is
    // skipped); the remote iovec is interpreted by the kernel in the other
    // process, which checks it.
    let r = unsafe { libc::process_vm_writev(pid, local.as_ptr(), 2, &raw const remote, 1, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as usize)
}
