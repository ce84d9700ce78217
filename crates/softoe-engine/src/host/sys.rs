//! The system calls the host interface needs: a `SOCK_SEQPACKET` listener
//! with peer credentials and descriptor passing, epoll, and the program's
//! memory (`process_vm_readv`/`writev`). Every call goes through rustix
//! (owned and borrowed descriptors, `SCM_RIGHTS` with owned descriptors)
//! or, where rustix has none, through `softoe-sys`; the shared region's
//! memfd and mapping and the doorbells are `softoe-sys`'s own types, the
//! same the host library uses.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::Path;

use rustix::event::epoll;
use rustix::fs::OFlags;
use rustix::io::Errno;
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};

pub use softoe_host::connect_seqpacket;
pub use softoe_sys::event::EventFd;
pub use softoe_sys::mem::Mapping;

/// Most descriptors one message carries (a welcome's three; a program's
/// registration or claim sends one or two).
const MAX_FDS: usize = 4;

/// Whether a non-blocking call found nothing to do (rather than failed).
fn nothing_yet(e: Errno) -> bool {
    e == Errno::WOULDBLOCK || e == Errno::INTR
}

/// A listening `SOCK_SEQPACKET` Unix socket at `path` with file mode
/// `mode` (who may attach); a stale socket file there is replaced.
pub fn listen(path: &Path, mode: u32) -> io::Result<OwnedFd> {
    let addr = SocketAddrUnix::new(path).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("socket path {} is too long", path.display()),
        )
    })?;
    // A live engine answers a connect; only a dead one's file is removed.
    crate::sockpath::claim(path, "host interface")?;
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::bind(&fd, &addr)?;
    rustix::fs::chmod(path, rustix::fs::Mode::from_raw_mode(mode))?;
    rustix::net::listen(&fd, 128)?;
    Ok(fd)
}

/// A connected pair of `SOCK_SEQPACKET` Unix sockets, close-on-exec: the
/// engine's end (non-blocking, as an accepted connection is) and the
/// program's (blocking), for a program in the engine's own process.
pub fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let (engine, program) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    let fl = rustix::fs::fcntl_getfl(&engine)?;
    rustix::fs::fcntl_setfl(&engine, fl | OFlags::NONBLOCK)?;
    Ok((engine, program))
}

/// Accepts one connection, non-blocking; `None` when none waits.
pub fn accept(listener: impl AsFd) -> io::Result<Option<OwnedFd>> {
    match rustix::net::accept_with(listener, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC) {
        Ok(fd) => Ok(Some(fd)),
        Err(e) if nothing_yet(e) || e == Errno::CONNABORTED => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The peer's process, user and group (`SO_PEERCRED`).
pub fn peer_cred(fd: impl AsFd) -> io::Result<(i32, u32, u32)> {
    let c = rustix::net::sockopt::socket_peercred(fd)?;
    Ok((
        rustix::process::Pid::as_raw(Some(c.pid)),
        c.uid.as_raw(),
        c.gid.as_raw(),
    ))
}

/// Whether `fd` is a Unix stream socket (what a program must send to have
/// a connection watched across `fork`).
pub fn is_unix_stream(fd: impl AsFd) -> bool {
    let fd = fd.as_fd();
    rustix::net::sockopt::socket_domain(fd).ok() == Some(AddressFamily::UNIX)
        && rustix::net::sockopt::socket_type(fd).ok() == Some(SocketType::STREAM)
}

/// The address the Unix socket `fd` is bound to (`peer`: its peer's): an
/// abstract name as the kernel gives it, starting with a 0 byte, or a
/// path's bytes. `None` for no Unix socket, or one without a name.
pub fn unix_name(fd: impl AsFd, peer: bool) -> Option<Vec<u8>> {
    let any = if peer {
        rustix::net::getpeername(fd).ok()??
    } else {
        rustix::net::getsockname(fd).ok()?
    };
    let unix = SocketAddrUnix::try_from(any).ok()?;
    // An unnamed socket (a socket pair's end) reads as an empty abstract
    // name here; no socket can be bound to that one (the kernel picks a
    // name for an empty bind).
    if let Some(name) = unix.abstract_name().filter(|n| !n.is_empty()) {
        let mut v = Vec::with_capacity(name.len() + 1);
        v.push(0);
        v.extend_from_slice(name);
        return Some(v);
    }
    unix.path_bytes().map(<[u8]>::to_vec)
}

/// Whether `theirs` is the far end of the socket pair `ours` is one end
/// of: a byte written on `ours` is there to read on `theirs` at once (a
/// socket pair's write is delivered inside the call). Everything waiting
/// on `theirs` is read, and the probe must be the last byte: a failed
/// claim (someone else's descriptor, in another network namespace where
/// the same abstract name is free) leaves its probe in the real far end,
/// and must not make the next, honest claim fail. Only the engine writes
/// to that end, so nobody else can put the probe there.
pub fn is_far_end(ours: impl AsFd, theirs: impl AsFd, probe: u8) -> bool {
    let sent = rustix::net::send(ours, &[probe], SendFlags::DONTWAIT | SendFlags::NOSIGNAL);
    if sent != Ok(1) {
        return false;
    }
    let mut got = [0u8; 256];
    let mut last = None;
    // At most 16 reads: stale probes are few (one per failed claim).
    for _ in 0..16 {
        let n = match rustix::net::recv(&theirs, &mut got, RecvFlags::DONTWAIT) {
            Ok((n, _)) if n > 0 => n,
            _ => break,
        };
        last = got.get(n - 1).copied();
        if n < got.len() {
            break;
        }
    }
    last == Some(probe)
}

/// Receives one message, non-blocking: `Ok(None)` when none waits,
/// `Ok(Some(0))` when the peer has gone.
pub fn recv(fd: impl AsFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    match rustix::net::recv(fd, buf, RecvFlags::DONTWAIT) {
        Ok((n, _)) => Ok(Some(n)),
        Err(e) if nothing_yet(e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Receives one message and the descriptors sent with it (at most 4),
/// non-blocking: `Ok(None)` when none waits, `Ok(Some((0, _)))` when the
/// peer has gone. Descriptors beyond 4 are closed by the kernel
/// (`MSG_CTRUNC`).
pub fn recv_with_fds(fd: impl AsFd, buf: &mut [u8]) -> io::Result<Option<(usize, Vec<OwnedFd>)>> {
    // On the stack: the engine calls this at every doorbell a program
    // rings.
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let flags = RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC;
    let msg = match rustix::net::recvmsg(fd, &mut [IoSliceMut::new(buf)], &mut control, flags) {
        Ok(m) => m,
        Err(e) if nothing_yet(e) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(got) = m {
            fds.extend(got);
        }
    }
    Ok(Some((msg.bytes, fds)))
}

/// Sends `bytes` with `fds` attached (`SCM_RIGHTS`, at most 4),
/// non-blocking.
pub fn send_with_fds(fd: impl AsFd, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    let flags = SendFlags::NOSIGNAL | SendFlags::DONTWAIT;
    rustix::net::sendmsg(fd, &[IoSlice::new(bytes)], &mut control, flags)?;
    Ok(())
}

/// An epoll instance whose events carry a `u64` token.
#[derive(Debug)]
pub struct Epoll(OwnedFd);

impl Epoll {
    /// A new instance.
    pub fn new() -> io::Result<Epoll> {
        Ok(Epoll(epoll::create(epoll::CreateFlags::CLOEXEC)?))
    }

    /// Watches `fd` for input (and hang-up) with `token`.
    pub fn add(&self, fd: impl AsFd, token: u64) -> io::Result<()> {
        let flags = epoll::EventFlags::IN | epoll::EventFlags::RDHUP;
        epoll::add(&self.0, fd, epoll::EventData::new_u64(token), flags)?;
        Ok(())
    }

    /// Stops watching `fd` (one not watched is no error to report).
    pub fn delete(&self, fd: impl AsFd) {
        let _ = epoll::delete(&self.0, fd);
    }

    /// Tokens of ready descriptors, without waiting.
    pub fn ready(&self, out: &mut Vec<u64>) {
        let mut evs = [MaybeUninit::<epoll::Event>::uninit(); 64];
        let now = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        if let Ok((got, _)) = epoll::wait(&self.0, &mut evs[..], Some(&now)) {
            out.extend(got.iter().map(|e| e.data.u64()));
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
    softoe_sys::procvm::read(pid, addr, dst)
}

/// Writes `a` then `b` to address `addr` in process `pid`
/// (`process_vm_writev`): the engine placing received bytes straight into
/// a buffer the program posted, as a NIC's DMA would. Returns the bytes
/// written (fewer when the buffer ends in unmapped memory).
pub fn write_process(pid: i32, addr: u64, a: &[u8], b: &[u8]) -> io::Result<usize> {
    softoe_sys::procvm::write(pid, addr, a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream_pair() -> io::Result<(OwnedFd, OwnedFd)> {
        Ok(rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )?)
    }

    #[test]
    fn messages_carry_descriptors_both_ways() -> io::Result<()> {
        let (engine, program) = seqpacket_pair()?;
        let mut buf = [0u8; 16];
        assert!(recv_with_fds(&engine, &mut buf)?.is_none(), "nothing yet");
        let bell = EventFd::new()?;
        send_with_fds(&program, b"bell", &[bell.as_fd()])?;
        let Some((n, fds)) = recv_with_fds(&engine, &mut buf)? else {
            return Err(io::ErrorKind::WouldBlock.into());
        };
        assert_eq!((&buf[..n], fds.len()), (&b"bell"[..], 1));
        // The descriptor received is the same eventfd, newly numbered.
        let got = fds.into_iter().next().ok_or(io::ErrorKind::NotFound)?;
        let got = EventFd::adopt(got)?;
        got.signal();
        let mut v = [0u8; 8];
        assert_eq!(rustix::io::read(&bell, &mut v), Ok(8));
        // More than fit are refused; none is a plain message.
        let many = [bell.as_fd(); 32];
        assert!(send_with_fds(&engine, b"x", &many).is_err());
        send_with_fds(&engine, b"plain", &[])?;
        let (mut pb, fl) = ([0u8; 8], rustix::fs::fcntl_getfl(&program)?);
        assert!(!fl.contains(OFlags::NONBLOCK), "the program's end blocks");
        assert_eq!(
            rustix::net::recv(&program, &mut pb, RecvFlags::empty())?.0,
            5
        );
        drop(program);
        assert_eq!(recv(&engine, &mut buf)?, Some(0), "the peer has gone");
        Ok(())
    }

    #[test]
    fn epoll_reports_the_tokens_of_ready_descriptors() -> io::Result<()> {
        let ep = Epoll::new()?;
        let (a, b) = stream_pair()?;
        let bell = EventFd::new()?;
        ep.add(&a, 7)?;
        ep.add(&bell, 9)?;
        let mut out = Vec::new();
        ep.ready(&mut out);
        assert!(out.is_empty());
        bell.signal();
        rustix::net::send(&b, b"x", SendFlags::empty())?;
        ep.ready(&mut out);
        out.sort_unstable();
        assert_eq!(out, [7, 9]);
        ep.delete(&a);
        ep.delete(&a);
        out.clear();
        ep.ready(&mut out);
        assert_eq!(out, [9]);
        assert!(ep.add(&bell, 9).is_err(), "watched already");
        Ok(())
    }

    #[test]
    fn names_kinds_and_far_ends_of_unix_sockets() -> io::Result<()> {
        let (ours, theirs) = stream_pair()?;
        assert!(is_unix_stream(&ours));
        let (sp, _) = seqpacket_pair()?;
        assert!(!is_unix_stream(&sp));
        assert!(!is_unix_stream(EventFd::new()?));
        assert_eq!(unix_name(&theirs, false), None, "unnamed");
        let name = format!("softoe-sys-test-{}", std::process::id());
        let (named, peer) = stream_pair()?;
        rustix::net::bind(&named, &SocketAddrUnix::new_abstract_name(name.as_bytes())?)?;
        let mut want = vec![0];
        want.extend_from_slice(name.as_bytes());
        assert_eq!(unix_name(&named, false), Some(want.clone()));
        assert_eq!(unix_name(&peer, true), Some(want));
        assert!(is_far_end(&ours, &theirs, 5));
        assert!(!is_far_end(&ours, &peer, 6), "another pair's end");
        // The failed probe stays in the real far end; the next claim holds.
        assert!(is_far_end(&ours, &theirs, 7));
        Ok(())
    }

    #[test]
    fn a_listener_accepts_and_knows_its_peer() -> io::Result<()> {
        let dir = std::env::temp_dir().join(format!("softoe-host-sys-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("host.sock");
        let l = listen(&path, 0o600)?;
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path)?.permissions().mode() & 0o777,
            0o600
        );
        assert!(accept(&l)?.is_none(), "nobody yet");
        let c = rustix::net::socket(AddressFamily::UNIX, SocketType::SEQPACKET, None)?;
        rustix::net::connect(&c, &SocketAddrUnix::new(&path)?)?;
        let conn = accept(&l)?.ok_or(io::ErrorKind::WouldBlock)?;
        let (pid, uid, gid) = peer_cred(&conn)?;
        assert_eq!(pid, std::process::id() as i32);
        assert_eq!(uid, rustix::process::geteuid().as_raw());
        assert_eq!(gid, rustix::process::getegid().as_raw());
        assert_eq!(
            unix_name(&conn, false).as_deref(),
            Some(path.as_os_str().as_encoded_bytes())
        );
        let long = dir.join("x".repeat(200));
        assert_eq!(
            listen(&long, 0o600).err().map(|e| e.kind()),
            Some(io::ErrorKind::InvalidInput)
        );
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }

    #[test]
    fn our_own_memory_reads_and_writes() -> io::Result<()> {
        let pid = std::process::id() as i32;
        let src = *b"region";
        let mut dst = [0u8; 6];
        assert_eq!(read_process(pid, src.as_ptr() as u64, &mut dst)?, 6);
        assert_eq!(&dst, b"region");
        let mut to = [0u8; 4];
        assert_eq!(write_process(pid, to.as_mut_ptr() as u64, b"ab", b"cd")?, 4);
        assert_eq!(std::hint::black_box(to), *b"abcd");
        Ok(())
    }
}
