//! `epoll` over softoe sockets and kernel descriptors together: an epoll
//! set keeps its softoe sockets' registrations here, beside the kernel's
//! own, and a wait on it runs the one wait loop of `wait` over both.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use libc::{c_int, epoll_event, sigset_t, timespec};

use super::{ms_timeout, poll_bits, ts_timeout, wait_loop};
use crate::real::{self, set_errno};
use crate::sock::{TABLE, lock};

/// A softoe socket's registration in an epoll set.
#[derive(Clone, Copy, Debug)]
struct Reg {
    events: u32,
    data: u64,
    /// `EPOLLONESHOT` fired: silent until `EPOLL_CTL_MOD`.
    disabled: bool,
}

/// The softoe side of one epoll set.
#[derive(Debug, Default)]
struct EpSet {
    regs: HashMap<c_int, Reg>,
}

/// Epoll sets that hold softoe sockets, by their descriptor.
fn epolls() -> &'static Mutex<HashMap<c_int, EpSet>> {
    static E: OnceLock<Mutex<HashMap<c_int, EpSet>>> = OnceLock::new();
    E.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The tag a doorbell carries in an application's epoll set: no pointer or
/// descriptor a program stores looks like it.
const BELL_TAG: u64 = 0x736f_6674_6f65_0000;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_create(size: c_int) -> c_int {
    forward!(epoll_create(size))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_create1(flags: c_int) -> c_int {
    forward!(epoll_create1(flags))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut epoll_event,
) -> c_int {
    if TABLE.get(fd).is_none() {
        return forward!(epoll_ctl(epfd, op, fd, ev));
    }
    let e = if ev.is_null() {
        None
    } else {
        // SAFETY: the caller's event.
        Some(unsafe { std::ptr::read_unaligned(ev) })
    };
    ANY_SET.store(true, Ordering::Relaxed);
    let mut sets = lock(epolls());
    let set = sets.entry(epfd).or_default();
    match op {
        libc::EPOLL_CTL_ADD | libc::EPOLL_CTL_MOD => {
            let Some(e) = e else {
                set_errno(libc::EFAULT);
                return -1;
            };
            let exists = set.regs.contains_key(&fd);
            if op == libc::EPOLL_CTL_ADD && exists {
                set_errno(libc::EEXIST);
                return -1;
            }
            if op == libc::EPOLL_CTL_MOD && !exists {
                set_errno(libc::ENOENT);
                return -1;
            }
            set.regs.insert(
                fd,
                Reg {
                    events: e.events,
                    data: e.u64,
                    disabled: false,
                },
            );
            if let Some(s) = TABLE.get(fd) {
                lock(&s.reported).remove(&epfd);
            }
            0
        }
        libc::EPOLL_CTL_DEL => {
            if set.regs.remove(&fd).is_none() {
                set_errno(libc::ENOENT);
                return -1;
            }
            0
        }
        _ => {
            set_errno(libc::EINVAL);
            -1
        }
    }
}

/// # Safety
/// `evs` is valid for `max` entries.
unsafe fn epoll_impl(
    epfd: c_int,
    evs: *mut epoll_event,
    max: c_int,
    timeout: Option<Duration>,
    mask: *const sigset_t,
) -> c_int {
    if evs.is_null() || max <= 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    let max = max as usize;
    // SAFETY: the caller's array of `max` entries.
    let out = unsafe { std::slice::from_raw_parts_mut(evs, max) };
    let out = RefCell::new(out);
    // Softoe entries are written from the front; the kernel's after them.
    let filled = std::cell::Cell::new(0usize);
    let softoe = || -> c_int {
        // Sockets inherited across fork are taken into this process's
        // session first, without the sets' lock (that may attach, and
        // attaching goes through our own hooks).
        let fds: Vec<c_int> = lock(epolls())
            .get(&epfd)
            .map(|set| set.regs.keys().copied().collect())
            .unwrap_or_default();
        for fd in fds {
            if TABLE.get(fd).is_some_and(|s| !s.ours()) {
                let _ = crate::sock::current(fd);
            }
        }
        let mut sets = lock(epolls());
        let Some(set) = sets.get_mut(&epfd) else {
            return 0;
        };
        let mut out = out.borrow_mut();
        let mut count = 0usize;
        let start = filled.get();
        for (&fd, reg) in set.regs.iter_mut() {
            if start + count >= max {
                break;
            }
            if reg.disabled {
                continue;
            }
            let Some(s) = TABLE.get(fd).filter(|s| s.ours()) else {
                continue;
            };
            let bits = poll_bits(s.readiness(), reg.events);
            if bits == 0 {
                continue;
            }
            if reg.events & libc::EPOLLET as u32 != 0 {
                // Edge: report again only after the socket moved.
                let seq = s.readiness().seq;
                let mut rep = lock(&s.reported);
                if rep.get(&epfd) == Some(&seq) {
                    continue;
                }
                rep.insert(epfd, seq);
            }
            if reg.events & libc::EPOLLONESHOT as u32 != 0 {
                reg.disabled = true;
            }
            out[start + count] = epoll_event {
                events: bits,
                u64: reg.data,
            };
            count += 1;
        }
        filled.set(start + count);
        count as c_int
    };
    let kernel = |bell: Option<c_int>, ms: c_int| -> c_int {
        if let Some(b) = bell {
            let mut ev = epoll_event {
                events: (libc::EPOLLIN | libc::EPOLLET) as u32,
                u64: BELL_TAG | b as u64,
            };
            // SAFETY: our own event; EEXIST (already there) is fine.
            unsafe { real::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, b, &raw mut ev) };
        }
        let at = filled.get();
        if at >= max {
            return 0;
        }
        let mut out = out.borrow_mut();
        let room = &mut out[at..];
        // SAFETY: our slice of the caller's array; the caller's mask.
        let r =
            unsafe { real::epoll_pwait(epfd, room.as_mut_ptr(), room.len() as c_int, ms, mask) };
        if r <= 0 {
            return r;
        }
        // Drop doorbells (ours or another thread's) from what the program
        // sees.
        let mut keep = 0usize;
        for i in 0..r as usize {
            let e = room[i];
            if e.u64 & !0xffff == BELL_TAG {
                continue;
            }
            room[keep] = e;
            keep += 1;
        }
        filled.set(at + keep);
        keep as c_int
    };
    let r = wait_loop(timeout, softoe, kernel);
    if r < 0 { r } else { filled.get() as c_int }
}

fn has_softoe(epfd: c_int) -> bool {
    lock(epolls())
        .get(&epfd)
        .is_some_and(|s| !s.regs.is_empty())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    evs: *mut epoll_event,
    max: c_int,
    timeout: c_int,
) -> c_int {
    if !has_softoe(epfd) {
        return forward!(epoll_wait(epfd, evs, max, timeout));
    }
    // SAFETY: the caller's array.
    unsafe { epoll_impl(epfd, evs, max, ms_timeout(timeout), std::ptr::null()) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    evs: *mut epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const sigset_t,
) -> c_int {
    if !has_softoe(epfd) {
        return forward!(epoll_pwait(epfd, evs, max, timeout, mask));
    }
    // SAFETY: the caller's array and mask.
    unsafe { epoll_impl(epfd, evs, max, ms_timeout(timeout), mask) }
}

/// `epoll_pwait` with a `timespec` timeout (null: no limit), as glibc 2.35
/// and Linux 5.11 have it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_pwait2(
    epfd: c_int,
    evs: *mut epoll_event,
    max: c_int,
    timeout: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    if !has_softoe(epfd) {
        return forward!(epoll_pwait2(epfd, evs, max, timeout, mask));
    }
    if !timeout.is_null() {
        // SAFETY: the caller's timespec.
        let t = unsafe { *timeout };
        if t.tv_sec < 0 || !(0..1_000_000_000).contains(&t.tv_nsec) {
            set_errno(libc::EINVAL);
            return -1;
        }
    }
    // SAFETY: the caller's array and mask.
    unsafe { epoll_impl(epfd, evs, max, ts_timeout(timeout), mask) }
}

/// `fd` was closed: its registrations go (the kernel drops a closed
/// descriptor's registrations too).
pub(crate) fn forget_fd(fd: c_int) {
    for set in lock(epolls()).values_mut() {
        set.regs.remove(&fd);
    }
}

/// `fd` may have been an epoll set: forget it.
pub(crate) fn forget_epoll(fd: c_int) {
    if ANY_SET.load(Ordering::Relaxed) {
        lock(epolls()).remove(&fd);
    }
}

/// Whether any epoll set ever held a softoe socket (so `close` of other
/// descriptors need not look).
static ANY_SET: AtomicBool = AtomicBool::new(false);

/// `fd` is the kernel's now: its registrations move to the kernel's sets.
pub(crate) fn moved_to_kernel(fd: c_int) {
    let mut sets = lock(epolls());
    for (&epfd, set) in sets.iter_mut() {
        if let Some(reg) = set.regs.remove(&fd) {
            let mut ev = epoll_event {
                events: reg.events,
                u64: reg.data,
            };
            // SAFETY: the program's epoll set and descriptor, our event.
            unsafe { real::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &raw mut ev) };
        }
    }
}
