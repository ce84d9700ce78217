//! Doorbells: the non-blocking [`EventFd`] the host interface rings and
//! drains, and the check that a descriptor a program sent is one.
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use rustix::event::EventfdFlags;
use rustix::fs::OFlags;

/// Adds descriptor `fd` to epoll instance `epoll` for readability
/// (`EPOLLIN`), its events carrying `token`. For a descriptor known only
/// by number (a port's [`RawFd`]); one with an owner goes through
/// `rustix::event::epoll::add`.
pub fn epoll_add_readable(epoll: impl AsFd, fd: RawFd, token: u64) -> io::Result<()> {
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: token,
    };
    // SAFETY: the kernel reads `ev`, a live, initialised `epoll_event` on
    // this stack frame, and nothing else of this process's memory; `fd` is
    // only a number to it: a closed or reused one gives EBADF or watches
    // that descriptor instead, a wrong event and never an access to
    // memory, so the call is sound whatever `fd` is.
    let rc = unsafe {
        libc::epoll_ctl(
            epoll.as_fd().as_raw_fd(),
            libc::EPOLL_CTL_ADD,
            fd,
            &raw mut ev,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// An eventfd: a doorbell.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A non-blocking eventfd.
    pub fn new() -> io::Result<EventFd> {
        let fd = rustix::event::eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?;
        Ok(EventFd(fd))
    }

    /// Rings it. A full counter (EAGAIN) means the reader is already due to
    /// wake, so the result is ignored.
    pub fn signal(&self) {
        let _ = rustix::io::write(&self.0, &1u64.to_ne_bytes());
    }

    /// Clears it (nothing to read, EAGAIN, is already clear).
    pub fn drain(&self) {
        let mut v = [0u8; 8];
        let _ = rustix::io::read(&self.0, &mut v);
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
        let fl = rustix::fs::fcntl_getfl(&fd)?;
        rustix::fs::fcntl_setfl(&fd, fl | OFlags::NONBLOCK)?;
        Ok(EventFd(fd))
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl From<EventFd> for OwnedFd {
    fn from(e: EventFd) -> OwnedFd {
        e.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(e: &EventFd) -> Option<u64> {
        let mut v = [0u8; 8];
        rustix::io::read(e, &mut v)
            .ok()
            .map(|_| u64::from_ne_bytes(v))
    }

    #[test]
    fn an_added_descriptor_wakes_the_epoll_with_its_token() -> io::Result<()> {
        use rustix::event::epoll;
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let e = EventFd::new()?;
        epoll_add_readable(&ep, e.raw(), 7)?;
        let err = epoll_add_readable(&ep, e.raw(), 7).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
        assert!(epoll_add_readable(&ep, -1, 1).is_err());
        e.signal();
        let mut evs = Vec::with_capacity(4);
        epoll::wait(&ep, rustix::buffer::spare_capacity(&mut evs), None)?;
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].data.u64(), 7);
        Ok(())
    }

    #[test]
    fn signal_then_drain_clears() -> io::Result<()> {
        let e = EventFd::new()?;
        e.signal();
        e.signal();
        e.drain();
        assert_eq!(count(&e), None);
        e.signal();
        assert_eq!(count(&e), Some(1));
        Ok(())
    }

    #[test]
    fn adopt_accepts_only_eventfds() -> io::Result<()> {
        let e = EventFd::new()?;
        let again = EventFd::adopt(OwnedFd::from(e))?;
        again.signal();
        assert_eq!(count(&again), Some(1));
        let (r, _w) = rustix::pipe::pipe()?;
        assert!(EventFd::adopt(r).is_err());
        Ok(())
    }
}
