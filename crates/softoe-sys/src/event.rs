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

/// Descriptors known only by number (ports', services' and the control
/// socket's [`RawFd`]s) to wait on for readability with `ppoll`, the
/// array kept between waits so a wait allocates nothing.
#[derive(Debug, Default)]
pub struct PollSet {
    fds: Vec<libc::pollfd>,
}

impl PollSet {
    /// An empty set.
    pub fn new() -> PollSet {
        PollSet::default()
    }

    /// Forgets every descriptor (keeping the room).
    pub fn clear(&mut self) {
        self.fds.clear();
    }

    /// Adds `fd`, to wait for readability (`POLLIN`).
    pub fn push(&mut self, fd: RawFd) {
        self.fds.push(libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
    }

    /// How many descriptors it holds.
    pub fn len(&self) -> usize {
        self.fds.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.fds.is_empty()
    }

    /// Whether descriptor `i` (in the order pushed) was readable, or
    /// hung up or failed, after the last [`wait`](Self::wait).
    pub fn ready(&self, i: usize) -> bool {
        self.fds.get(i).is_some_and(|p| p.revents != 0)
    }

    /// Sleeps in `ppoll` until a descriptor is readable or `timeout`
    /// (to the nanosecond, unlike `poll(2)`'s milliseconds) passes: how
    /// many descriptors are ready, 0 at the timeout. A signal (`EINTR`)
    /// is an error.
    pub fn wait(&mut self, timeout: std::time::Duration) -> io::Result<usize> {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        // SAFETY: `fds` is an initialised array of `fds.len()` pollfds and
        // `ts` a valid timespec, both live for the call, which writes only
        // the pollfds' `revents`; a null signal mask leaves the thread's as
        // it is. The descriptors are only numbers to the kernel: a closed
        // one reports POLLNVAL, never an access to memory.
        let r = unsafe {
            libc::ppoll(
                self.fds.as_mut_ptr(),
                self.fds.len() as libc::nfds_t,
                &raw const ts,
                std::ptr::null(),
            )
        };
        usize::try_from(r).map_err(|_| io::Error::last_os_error())
    }
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
    fn a_poll_set_wakes_for_a_rung_doorbell_and_times_out_otherwise() -> io::Result<()> {
        let quiet = EventFd::new()?;
        let rung = EventFd::new()?;
        let mut set = PollSet::new();
        set.push(quiet.raw());
        set.push(rung.raw());
        assert_eq!(set.len(), 2);
        let t0 = std::time::Instant::now();
        assert_eq!(set.wait(std::time::Duration::from_millis(20))?, 0);
        assert!(t0.elapsed() >= std::time::Duration::from_millis(20));
        rung.signal();
        assert_eq!(set.wait(std::time::Duration::from_secs(5))?, 1);
        assert!(!set.ready(0) && set.ready(1) && !set.ready(2));
        set.clear();
        assert!(set.is_empty());
        assert_eq!(set.wait(std::time::Duration::ZERO)?, 0);
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
