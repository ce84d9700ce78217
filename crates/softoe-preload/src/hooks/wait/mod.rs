//! `poll`, `select` and `epoll` over softoe sockets and kernel descriptors
//! together.
//!
//! One loop serves them all: read the session's event sequence, look at
//! the softoe sockets (their slots in shared memory) and, if none is ready,
//! arm this thread's own doorbell ([`softoe_host::Waiter`]), check the
//! sequence again, and sleep in the real call with the doorbell among the
//! kernel's descriptors. The engine rings the doorbell at its next event;
//! the call returns and the loop looks again. Softoe sockets never enter
//! the kernel's sets: an epoll set keeps their registrations here, beside
//! the kernel's own (`epoll.rs`).

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use libc::{c_int, fd_set, nfds_t, pollfd, sigset_t, timespec, timeval};
use softoe_host::{Client, Readiness, Waiter};

use crate::real;
use crate::sock::{Sock, TABLE, shim};

mod epoll;

pub use epoll::{epoll_create, epoll_create1, epoll_ctl, epoll_pwait, epoll_pwait2, epoll_wait};
pub(crate) use epoll::{forget_epoll, forget_fd, moved_to_kernel, socket_replaced};

/// Poll bits for `r`, limited to what was asked (errors and hang-ups are
/// always reported).
pub(crate) fn poll_bits(r: Readiness, asked: u32) -> u32 {
    let mut b = 0u32;
    if r.readable {
        b |= (libc::POLLIN | libc::POLLRDNORM) as u32;
    }
    if r.writable {
        b |= (libc::POLLOUT | libc::POLLWRNORM) as u32;
    }
    if r.read_closed {
        b |= (libc::POLLRDHUP | libc::POLLIN | libc::POLLRDNORM) as u32;
    }
    if r.hung_up {
        b |= libc::POLLHUP as u32;
    }
    if r.error {
        // As Linux reports a failed connect: everything wakes.
        b |= (libc::POLLERR | libc::POLLIN | libc::POLLOUT) as u32;
    }
    b & (asked | libc::POLLERR as u32 | libc::POLLHUP as u32)
}

thread_local! {
    /// This thread's doorbell, registered with the engine at its first
    /// wait; `Err` once registering failed (then it waits in slices).
    static WAITER: RefCell<Option<Result<(u32, Waiter), ()>>> = const { RefCell::new(None) };
}

/// Makes this thread's doorbell for `c` now (before a sandbox forbids
/// the calls that make one).
pub(crate) fn prepare_waiter(c: &Client) {
    with_waiter(c, |_| ());
}

/// Runs `f` with this thread's doorbell for `c`, if it can have one.
fn with_waiter<T>(c: &Client, f: impl FnOnce(Option<&Waiter>) -> T) -> T {
    WAITER.with(|w| {
        let mut w = w.borrow_mut();
        let stale = matches!(&*w, Some(Ok((session, _))) if *session != c.session());
        if w.is_none() || stale {
            if let Some(Ok((_, old))) = w.take() {
                // A session of another process (forked) or a dead one.
                std::mem::forget(old);
            }
            *w = Some(match c.waiter() {
                Ok(waiter) => Ok((c.session(), waiter)),
                Err(e) => {
                    tracing::warn!(error = %e, "no doorbell for this thread: waits poll every millisecond");
                    Err(())
                }
            });
        }
        match &*w {
            Some(Ok((_, waiter))) => f(Some(waiter)),
            _ => f(None),
        }
    })
}

/// The common loop. `softoe(at)` writes ready softoe entries and returns
/// their count; `kernel(bell, ms)` waits in the kernel (with `bell` among
/// its descriptors when given) and returns its count of ready entries (not
/// counting the bell) or −1 with `errno` set.
fn wait_loop(
    timeout: Option<Duration>,
    mut softoe: impl FnMut() -> c_int,
    mut kernel: impl FnMut(Option<c_int>, c_int) -> c_int,
) -> c_int {
    let start = Instant::now();
    let client = shim().client_if_attached();
    loop {
        let seq = client.as_ref().map_or(0, Client::event_seq);
        let s = softoe();
        if s > 0 {
            let k = kernel(None, 0);
            return s + k.max(0);
        }
        let left = match timeout {
            None => None,
            Some(t) => {
                let e = start.elapsed();
                if e >= t {
                    return kernel(None, 0);
                }
                Some(t - e)
            }
        };
        let ms = |cap: Option<Duration>| -> c_int {
            match (left, cap) {
                (None, None) => -1,
                (Some(l), None) => l.as_millis().max(1).min(c_int::MAX as u128) as c_int,
                (None, Some(c)) => c.as_millis() as c_int,
                (Some(l), Some(c)) => l.min(c).as_millis().max(1) as c_int,
            }
        };
        let Some(c) = &client else {
            // Nothing attached: softoe sockets here are fresh and never
            // change by themselves; wait on the kernel alone.
            return kernel(None, ms(None));
        };
        let r = with_waiter(c, |w| match w {
            Some(w) => {
                let armed = w.arm();
                if c.event_seq() != seq {
                    drop(armed);
                    return None;
                }
                let k = kernel(Some(w.fd()), ms(None));
                drop(armed);
                Some(k)
            }
            None => {
                let k = kernel(None, ms(Some(Duration::from_millis(1))));
                Some(k)
            }
        });
        match r {
            // Woken by a kernel descriptor (or an error): report with
            // whatever softoe has too.
            Some(k) if k != 0 => {
                if k < 0 {
                    return k;
                }
                return k + softoe();
            }
            _ => {}
        }
        if timeout.is_some_and(|t| start.elapsed() >= t) {
            return softoe();
        }
    }
}

fn ms_timeout(ms: c_int) -> Option<Duration> {
    (ms >= 0).then(|| Duration::from_millis(ms as u64))
}

fn ts_timeout(ts: *const timespec) -> Option<Duration> {
    if ts.is_null() {
        return None;
    }
    // SAFETY: the caller's timespec.
    let t = unsafe { *ts };
    Some(Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    ))
}

fn to_ts(ms: c_int) -> Option<timespec> {
    (ms >= 0).then(|| timespec {
        tv_sec: (ms / 1000) as libc::time_t,
        tv_nsec: ((ms % 1000) as libc::c_long) * 1_000_000,
    })
}

// ---- poll ----------------------------------------------------------------------

/// # Safety
/// `fds` is valid for `n` entries.
unsafe fn poll_impl(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: Option<Duration>,
    mask: *const sigset_t,
) -> c_int {
    let list: &mut [pollfd] = if fds.is_null() || n == 0 {
        &mut []
    } else {
        // SAFETY: the caller's array of `n` entries.
        unsafe { std::slice::from_raw_parts_mut(fds, n as usize) }
    };
    let socks: Vec<Option<Arc<Sock>>> = list
        .iter()
        .map(|p| crate::sock::current(p.fd).and_then(Result::ok))
        .collect();
    // The kernel's part: its own entries only (with where each came from),
    // plus a slot for the doorbell. Not our entries as fd −1: the kernel
    // counts every entry against RLIMIT_NOFILE, and sshd's sandboxed child
    // lowers that to one descriptor — its connection's, which is ours.
    let at: Vec<usize> = (0..list.len()).filter(|&i| socks[i].is_none()).collect();
    let mut kfds: Vec<pollfd> = at
        .iter()
        .map(|&i| pollfd {
            fd: list[i].fd,
            events: list[i].events,
            revents: 0,
        })
        .collect();
    let any_kernel = !kfds.is_empty();
    kfds.push(pollfd {
        fd: -1,
        events: libc::POLLIN,
        revents: 0,
    });
    let cell = RefCell::new((list, kfds));
    let softoe = || {
        let mut g = cell.borrow_mut();
        let (list, _) = &mut *g;
        let mut count = 0;
        for (p, s) in list.iter_mut().zip(&socks) {
            if let Some(s) = s {
                let b = poll_bits(s.readiness(), p.events as u16 as u32);
                p.revents = b as i16;
                if b != 0 {
                    count += 1;
                }
            }
        }
        count
    };
    let kernel = |bell: Option<c_int>, ms: c_int| -> c_int {
        let mut g = cell.borrow_mut();
        let (list, kfds) = &mut *g;
        let last = kfds.len() - 1;
        kfds[last].fd = bell.unwrap_or(-1);
        if !any_kernel && bell.is_none() && ms == 0 {
            return 0;
        }
        for k in kfds.iter_mut() {
            k.revents = 0;
        }
        let ts = to_ts(ms);
        let tsp = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const timespec);
        let n = if bell.is_some() { kfds.len() } else { last };
        // SAFETY: our own array of at least `n` pollfds; the caller's mask.
        let r = unsafe { real::ppoll(kfds.as_mut_ptr(), n as nfds_t, tsp, mask) };
        if r < 0 {
            return r;
        }
        let mut count = 0;
        for (&i, k) in at.iter().zip(kfds.iter()) {
            list[i].revents = k.revents;
            if k.revents != 0 {
                count += 1;
            }
        }
        count
    };
    wait_loop(timeout, softoe, kernel)
}

fn any_ours_poll(fds: *const pollfd, n: nfds_t) -> bool {
    if fds.is_null() {
        return false;
    }
    // SAFETY: the caller's array of `n` entries.
    let list = unsafe { std::slice::from_raw_parts(fds, n as usize) };
    list.iter().any(|p| TABLE.get(p.fd).is_some())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    if !any_ours_poll(fds, n) {
        return forward!(poll(fds, n, timeout));
    }
    // SAFETY: the caller's array.
    unsafe { poll_impl(fds, n, ms_timeout(timeout), std::ptr::null()) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    n: nfds_t,
    ts: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    if !any_ours_poll(fds, n) {
        return forward!(ppoll(fds, n, ts, mask));
    }
    // SAFETY: the caller's array and mask.
    unsafe { poll_impl(fds, n, ts_timeout(ts), mask) }
}

// ---- select --------------------------------------------------------------------

/// # Safety
/// The sets are null or valid `fd_set`s covering `n` descriptors.
unsafe fn select_impl(
    n: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    timeout: Option<Duration>,
    mask: *const sigset_t,
) -> c_int {
    let n = n.clamp(0, libc::FD_SETSIZE as c_int);
    let isset = |set: *mut fd_set, fd: c_int| {
        // SAFETY: the caller's set, `fd` < FD_SETSIZE.
        !set.is_null() && unsafe { libc::FD_ISSET(fd, set) }
    };
    let mut pfds = Vec::new();
    for fd in 0..n {
        let mut ev = 0i16;
        if isset(r, fd) {
            ev |= libc::POLLIN;
        }
        if isset(w, fd) {
            ev |= libc::POLLOUT;
        }
        if isset(e, fd) {
            ev |= libc::POLLPRI;
        }
        if ev != 0 {
            pfds.push(pollfd {
                fd,
                events: ev,
                revents: 0,
            });
        }
    }
    // SAFETY: our own array.
    let got = unsafe { poll_impl(pfds.as_mut_ptr(), pfds.len() as nfds_t, timeout, mask) };
    if got < 0 {
        return got;
    }
    for set in [r, w, e] {
        if !set.is_null() {
            // SAFETY: the caller's set.
            unsafe { libc::FD_ZERO(set) };
        }
    }
    let mut count = 0;
    for p in &pfds {
        let rv = p.revents;
        let mut mark = |set: *mut fd_set, on: bool| {
            if on && !set.is_null() {
                // SAFETY: the caller's set; `p.fd` < FD_SETSIZE.
                unsafe { libc::FD_SET(p.fd, set) };
                count += 1;
            }
        };
        let bad = rv & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0;
        mark(
            r,
            p.events & libc::POLLIN != 0 && (rv & libc::POLLIN != 0 || bad),
        );
        mark(
            w,
            p.events & libc::POLLOUT != 0 && (rv & libc::POLLOUT != 0 || rv & libc::POLLERR != 0),
        );
        mark(e, p.events & libc::POLLPRI != 0 && rv & libc::POLLPRI != 0);
    }
    count
}

fn any_ours_select(n: c_int, sets: [*mut fd_set; 3]) -> bool {
    let n = n.clamp(0, libc::FD_SETSIZE as c_int);
    (0..n).any(|fd| {
        sets.iter().any(|&s| {
            // SAFETY: the caller's set; `fd` < FD_SETSIZE.
            !s.is_null() && unsafe { libc::FD_ISSET(fd, s) }
        }) && TABLE.get(fd).is_some()
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn select(
    n: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    tv: *mut timeval,
) -> c_int {
    if !any_ours_select(n, [r, w, e]) {
        return forward!(select(n, r, w, e, tv));
    }
    let timeout = if tv.is_null() {
        None
    } else {
        // SAFETY: the caller's timeval.
        let t = unsafe { *tv };
        Some(
            Duration::from_secs(t.tv_sec.max(0) as u64)
                + Duration::from_micros(t.tv_usec.max(0) as u64),
        )
    };
    // SAFETY: the caller's sets.
    unsafe { select_impl(n, r, w, e, timeout, std::ptr::null()) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pselect(
    n: c_int,
    r: *mut fd_set,
    w: *mut fd_set,
    e: *mut fd_set,
    ts: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    if !any_ours_select(n, [r, w, e]) {
        return forward!(pselect(n, r, w, e, ts, mask));
    }
    // SAFETY: the caller's sets and mask.
    unsafe { select_impl(n, r, w, e, ts_timeout(ts), mask) }
}
