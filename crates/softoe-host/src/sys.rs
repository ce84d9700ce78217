//! System calls of the client: connecting, passing descriptors, doorbells,
//! naps. Every call goes through rustix (which makes the system call
//! itself: nothing here passes through the shim's libc hooks, and `errno`
//! is left as the program's call set it) or, where rustix has none,
//! through `softoe-sys` (the region's mapping, signal dispositions,
//! `errno` itself).

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};
use rustix::time::Timespec;

pub(crate) use softoe_sys::errno::KeepErrno;
pub(crate) use softoe_sys::mem::Mapping;

/// Most descriptors one message carries (the welcome's three).
const MAX_FDS: usize = 3;

/// Connects a `SOCK_SEQPACKET` socket to `path`, the host interface's
/// socket type: the first step of an attach, and (closed at once) the
/// probe that an engine answers there.
pub fn connect(path: &Path) -> io::Result<OwnedFd> {
    let addr = SocketAddrUnix::new(path).map_err(|e| {
        if e == Errno::NAMETOOLONG || e == Errno::INVAL {
            io::Error::new(io::ErrorKind::InvalidInput, "socket path too long")
        } else {
            e.into()
        }
    })?;
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::connect(&fd, &addr)?;
    Ok(fd)
}

/// Sends one message.
pub(crate) fn send(fd: impl AsFd, b: &[u8]) -> io::Result<()> {
    rustix::net::send(fd, b, SendFlags::NOSIGNAL)?;
    Ok(())
}

/// Sends one message with one descriptor attached (`SCM_RIGHTS`).
pub(crate) fn send_fd(fd: impl AsFd, b: &[u8], pass: BorrowedFd<'_>) -> io::Result<()> {
    send_fds(fd, b, &[pass])
}

/// Sends one message with descriptors attached (`SCM_RIGHTS`; a handful at
/// most).
pub(crate) fn send_fds(fd: impl AsFd, b: &[u8], pass: &[BorrowedFd<'_>]) -> io::Result<()> {
    // On the stack: a message with a descriptor allocates nothing.
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(pass)) {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    rustix::net::sendmsg(fd, &[IoSlice::new(b)], &mut control, SendFlags::NOSIGNAL)?;
    Ok(())
}

/// The abstract name a watch's end is bound to: [`softoe_abi::WATCH_NAME`]
/// (which starts with the 0 byte that makes a name abstract), the digit of
/// `flags`, `:` and the hex digits of `random`.
fn watch_name(flags: u8, random: &[u8]) -> Vec<u8> {
    let mut name = softoe_abi::WATCH_NAME.to_vec();
    name.push(b'0' + (flags & 7));
    name.push(b':');
    for b in random {
        name.extend_from_slice(format!("{b:02x}").as_bytes());
    }
    name
}

/// Binds `fd` (one end of a watch's socket pair) to an abstract name
/// [`softoe_abi::WATCH_NAME`], the digit of `flags`, `:` and 32 random hex
/// digits: unique, and how a process the descriptor is passed to knows it.
pub(crate) fn bind_watch_name(fd: impl AsFd, flags: u8) -> io::Result<()> {
    for _ in 0..8 {
        let mut r = [0u8; 16];
        let got = rustix::rand::getrandom(&mut r, rustix::rand::GetRandomFlags::empty())?;
        if got != r.len() {
            return Err(Errno::AGAIN.into());
        }
        let name = watch_name(flags, &r);
        let addr = SocketAddrUnix::new_abstract_name(name.get(1..).unwrap_or_default())?;
        match rustix::net::bind(&fd, &addr) {
            Ok(()) => return Ok(()),
            Err(e) if e == Errno::ADDRINUSE => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Errno::ADDRINUSE.into())
}

/// The flags of a watched softoe socket's descriptor
/// ([`softoe_abi::WATCH_NAME`]: 1 `AF_INET6`, 2 a listener), if `fd` is
/// one by its name: what a process that received `fd` over a Unix socket
/// asks before it claims it.
pub fn watch_flags(fd: BorrowedFd<'_>) -> Option<u8> {
    let addr = SocketAddrUnix::try_from(rustix::net::getsockname(fd).ok()?).ok()?;
    flags_of(addr.abstract_name()?)
}

/// The flags digit of an abstract name (without its leading 0 byte), if
/// it is a watch's.
fn flags_of(name: &[u8]) -> Option<u8> {
    let p = softoe_abi::WATCH_NAME.get(1..)?;
    let d = *name.strip_prefix(p)?.first()?;
    d.is_ascii_digit().then(|| d - b'0')
}

/// A connected pair of Unix stream sockets, close-on-exec.
pub(crate) fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

/// A new non-blocking eventfd.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    softoe_sys::event::EventFd::new().map(OwnedFd::from)
}

/// Receives one message and up to `N` descriptors (at most 3).
pub(crate) fn recv_fds<const N: usize>(
    fd: impl AsFd,
    buf: &mut [u8],
) -> io::Result<(usize, Vec<OwnedFd>)> {
    if N > MAX_FDS {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    // Room for exactly `N`: more are closed by the kernel, as before.
    let room = rustix::cmsg_space!(ScmRights(N));
    let mut control = RecvAncillaryBuffer::new(&mut space[..room]);
    let msg = rustix::net::recvmsg(
        fd,
        &mut [IoSliceMut::new(buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(got) = m {
            fds.extend(got);
        }
    }
    Ok((msg.bytes, fds))
}

/// Rings an eventfd (a full counter means the engine is due to wake).
pub(crate) fn signal(fd: impl AsFd) {
    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
}

/// Clears an eventfd (non-blocking).
///
/// `errno` is kept: drains run in drops between a failed wait and the
/// caller's look at `errno` (a signal's `EINTR` must not read as the empty
/// bell's `EAGAIN`); rustix's `read` leaves it alone.
pub(crate) fn drain(fd: impl AsFd) {
    let mut v = [0u8; 8];
    let _ = rustix::io::read(fd, &mut v);
}

/// Whether a blocking call a signal handler interrupted should go on, as
/// the kernel restarts a socket call when the handler was installed with
/// `SA_RESTART`. Which signal came is unknown here, so the call goes on
/// only when every installed handler restarts; a program with a handler
/// that does not (Python's, a C program's `alarm` timeout) gets `EINTR`.
pub(crate) fn restart_after_signal() -> bool {
    (1..=libc::SIGRTMAX()).all(|sig| !softoe_sys::signal::interrupts(sig))
}

/// The identity (device, inode) of the file open at `fd`, if it is open.
pub(crate) fn file_id(fd: impl AsFd) -> Option<(u64, u64)> {
    let st = rustix::fs::fstat(fd).ok()?;
    Some((st.st_dev, st.st_ino))
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

/// `d` as a `timespec`, its seconds capped at `i32::MAX`.
fn timespec(d: Duration) -> Timespec {
    Timespec {
        tv_sec: d.as_secs().min(i32::MAX as u64) as i64,
        tv_nsec: i64::from(d.subsec_nanos()),
    }
}

/// Sleeps until `bell` is readable or `timeout` passes, watching `conn`
/// (the attach connection) for the engine's end closing: a hang-up is
/// reported whatever events are asked for, so nothing the engine sends on
/// it wakes the nap.
pub(crate) fn nap(bell: BorrowedFd<'_>, conn: BorrowedFd<'_>, timeout: Duration) -> Nap {
    let mut p = [
        PollFd::new(&bell, PollFlags::IN),
        PollFd::new(&conn, PollFlags::empty()),
    ];
    match rustix::event::poll(&mut p, Some(&timespec(timeout))) {
        Err(e) if e == Errno::INTR => Nap::Interrupted,
        Err(_) => Nap::Over,
        Ok(_) if p[1].revents().intersects(PollFlags::HUP | PollFlags::ERR) => Nap::EngineGone,
        Ok(_) => Nap::Over,
    }
}

/// Whether `fd` has something to read (or its peer hung up) within
/// `timeout` (whole milliseconds); a signal counts as nothing.
pub(crate) fn readable_within(fd: BorrowedFd<'_>, timeout: Duration) -> bool {
    let ms = timeout.as_millis().min(i32::MAX as u128) as u64;
    let mut p = [PollFd::new(&fd, PollFlags::IN)];
    let r = rustix::event::poll(&mut p, Some(&timespec(Duration::from_millis(ms))));
    matches!(r, Ok(n) if n > 0)
        && p[0]
            .revents()
            .intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn descriptors_pass_and_arrive_open() -> io::Result<()> {
        let (a, b) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )?;
        let bell = eventfd()?;
        send_fd(&a, b"hi", bell.as_fd())?;
        let mut buf = [0u8; 8];
        let (n, fds) = recv_fds::<1>(&b, &mut buf)?;
        assert_eq!(&buf[..n], b"hi");
        assert_eq!(fds.len(), 1);
        assert_ne!(fds[0].as_raw_fd(), bell.as_raw_fd());
        // The same eventfd: ringing one end is read on the other.
        signal(&fds[0]);
        let mut v = [0u8; 8];
        assert_eq!(rustix::io::read(&bell, &mut v), Ok(8));
        assert_eq!(u64::from_ne_bytes(v), 1);
        // A message without descriptors brings none; more than the
        // stack buffer holds are refused, not sent.
        send(&a, b"x")?;
        assert_eq!(recv_fds::<1>(&b, &mut buf)?.1.len(), 0);
        let many = [bell.as_fd(); 16];
        assert!(send_fds(&a, b"x", &many).is_err());
        Ok(())
    }

    #[test]
    fn a_welcome_brings_its_three() -> io::Result<()> {
        let (a, b) = socketpair()?;
        let e = [eventfd()?, eventfd()?, eventfd()?];
        send_fds(&a, b"y", &[e[0].as_fd(), e[1].as_fd(), e[2].as_fd()])?;
        let mut buf = [0u8; 4];
        let (n, fds) = recv_fds::<3>(&b, &mut buf)?;
        assert_eq!((n, fds.len()), (1, 3));
        assert!(recv_fds::<4>(&b, &mut buf).is_err());
        Ok(())
    }

    #[test]
    fn a_watch_name_carries_its_flags() -> io::Result<()> {
        let (mine, _theirs) = socketpair()?;
        bind_watch_name(&mine, 3)?;
        assert_eq!(watch_flags(mine.as_fd()), Some(3));
        let (other, _o) = socketpair()?;
        assert_eq!(watch_flags(other.as_fd()), None);
        assert_eq!(flags_of(b"softoe-watch:2:00"), Some(2));
        assert_eq!(flags_of(b"softoe-watch:x"), None);
        assert_eq!(flags_of(b"other"), None);
        assert_eq!(watch_name(9, &[0xab]), b"\0softoe-watch:1:ab".to_vec());
        Ok(())
    }

    #[test]
    fn a_nap_sees_the_bell_and_the_engine_going() -> io::Result<()> {
        let bell = eventfd()?;
        let (conn, engine) = socketpair()?;
        signal(&bell);
        let t = std::time::Instant::now();
        assert_eq!(
            nap(bell.as_fd(), conn.as_fd(), Duration::from_secs(5)),
            Nap::Over
        );
        assert!(t.elapsed() < Duration::from_secs(4));
        drain(&bell);
        assert!(!readable_within(conn.as_fd(), Duration::from_millis(1)));
        drop(engine);
        assert_eq!(
            nap(bell.as_fd(), conn.as_fd(), Duration::from_secs(5)),
            Nap::EngineGone
        );
        assert!(readable_within(conn.as_fd(), Duration::from_millis(1)));
        Ok(())
    }

    #[test]
    fn file_ids_tell_files_apart() -> io::Result<()> {
        let (a, b) = socketpair()?;
        assert!(file_id(&a).is_some());
        assert_ne!(file_id(&a), file_id(&b));
        assert_eq!(file_id(&a), file_id(a.try_clone()?));
        Ok(())
    }
}
