//! `epoll` over softoe sockets and kernel descriptors together: an epoll
//! set keeps its softoe sockets' registrations here, beside the kernel's
//! own, and a wait on it runs the one wait loop of `wait` over both.
//!
//! A wait costs what changed, not what is registered. The engine marks each
//! socket whose slot it changed in the session's bitmap
//! ([`Client::take_changed`]), and the shim is the bitmap's only taker (it
//! makes no `Selector`). Under the sets' lock a wait takes the bits and
//! hands each changed socket id to every set that registered one of its
//! descriptors ([`Epolls::index`], kept by `epoll_ctl`, the forget paths
//! and adoption, which gives a socket another session and id); the set
//! then looks only at those registrations plus the ones it found ready
//! last time (level-triggered), as `Selector::collect` does.
//!
//! The order is Linux's: a set's candidates are a first-in, first-out
//! ready list. Sockets changed since the last wait join it at the back in
//! the order what they wait for arose (the engine stamps each slot with
//! its session's event count at the first such change, `Stamps`), not in
//! the order of their ids; one reported and still ready (level-triggered)
//! goes to the back; when `maxevents` cuts a wait short, the ones not
//! reported stay at the front for the next. A
//! registration whose socket is not a connection or listener of this
//! process's session (not given to the engine yet, inherited and not yet
//! taken, lost, UDP, of a session that ended) is loose: looked at every
//! wait, as every registration once was.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use libc::{c_int, epoll_event, sigset_t, timespec};
use softoe_host::{Client, Stamps};

use super::{ms_timeout, poll_bits, ts_timeout, wait_loop};
use crate::real::{self, set_errno};
use crate::sock::{Sock, St, TABLE, lock, pid, shim};

/// A softoe socket's registration in an epoll set.
#[derive(Clone, Copy, Debug)]
struct Reg {
    events: u32,
    data: u64,
    /// `EPOLLONESHOT` fired: silent until `EPOLL_CTL_MOD`.
    disabled: bool,
    /// The socket id it is indexed under (its socket is a connection or
    /// listener of the indexed session); `None`: on the set's loose list.
    key: Option<u32>,
    /// On the set's candidate list.
    queued: bool,
}

/// The softoe side of one epoll set.
#[derive(Debug, Default)]
struct EpSet {
    regs: HashMap<c_int, Reg>,
    /// Indexed registrations to look at in the next wait: the engine
    /// changed their socket since, or they were ready last time
    /// (level-triggered), or were modified since. Each at most once
    /// (`Reg::queued`).
    candidates: VecDeque<c_int>,
    /// Registrations not indexed: looked at every wait.
    loose: Vec<c_int>,
    /// A doorbell of ours sits in the kernel's set (a wait put it there):
    /// its events are filtered out of every wait from then on, even once
    /// no softoe socket is registered any more. Forwarded unfiltered, a
    /// doorbell's tag reached haproxy's old worker as a descriptor number
    /// when it closed its last softoe listener at a reload (it crashed
    /// indexing its table with it).
    bells: bool,
}

impl EpSet {
    /// Puts indexed registration `fd` on the candidate list.
    fn enqueue(&mut self, fd: c_int) {
        if let Some(r) = self.regs.get_mut(&fd)
            && r.key.is_some()
            && !r.queued
        {
            r.queued = true;
            self.candidates.push_back(fd);
        }
    }
}

/// Every epoll set that holds softoe sockets, and who waits for which
/// socket.
#[derive(Debug, Default)]
struct Epolls {
    /// By the set's descriptor.
    sets: HashMap<c_int, EpSet>,
    /// Socket id (in `owner`'s session) → the (set, descriptor)
    /// registrations indexed under it: where a changed bit is handed.
    index: HashMap<u32, Vec<(c_int, c_int)>>,
    /// The attachment the index is for, and the process that made it.
    owner: Option<(u32, Client)>,
    /// Changed registrations of one wait being ordered: (key, set,
    /// descriptor), kept so a wait allocates nothing.
    fresh: Vec<(u64, c_int, c_int)>,
}

fn unindex(index: &mut HashMap<u32, Vec<(c_int, c_int)>>, id: u32, epfd: c_int, fd: c_int) {
    if let Some(v) = index.get_mut(&id) {
        v.retain(|&p| p != (epfd, fd));
        if v.is_empty() {
            index.remove(&id);
        }
    }
}

/// The id socket `s` is indexed under if it is a connection or listener
/// of attachment `c` (UDP sockets stay loose: their readiness is read
/// under their own lock, as before).
fn key_of(s: &Sock, c: &Client) -> Option<u32> {
    if !s.ours() {
        return None;
    }
    match &**lock(&s.st) {
        St::Listening(l) if l.client.same_as(c) => Some(l.id),
        St::Stream(t) if t.client.same_as(c) => Some(t.id),
        _ => None,
    }
}

/// What a wait on set `epfd` reports of registration `reg` of socket `s`:
/// its events (0: nothing), and whether it stays a candidate (ready and
/// level-triggered: reported again at the next wait).
fn examine(epfd: c_int, reg: &mut Reg, s: &Sock) -> (u32, bool) {
    if reg.disabled {
        return (0, false);
    }
    let r = s.readiness();
    let bits = poll_bits(r, reg.events);
    if bits == 0 {
        return (0, false);
    }
    let edge = reg.events & libc::EPOLLET as u32 != 0;
    if edge {
        // Edge: report again only after the socket moved (every move
        // marks it changed, so it is looked at again then).
        let mut rep = lock(&s.reported);
        if rep.get(&epfd) == Some(&r.seq) {
            return (0, false);
        }
        rep.insert(epfd, r.seq);
    }
    if reg.events & libc::EPOLLONESHOT as u32 != 0 {
        reg.disabled = true;
        return (bits, false);
    }
    (bits, !edge)
}

/// What a wait reports of registration `reg` of descriptor `fd` looked at
/// whatever changed (a loose one, or every one when no bits say what
/// changed): its events, 0 if none or if `fd` is not a softoe socket of
/// this process.
fn look(epfd: c_int, fd: c_int, reg: &mut Reg) -> u32 {
    TABLE
        .get(fd)
        .filter(|s| s.ours())
        .map_or(0, |s| examine(epfd, reg, &s).0)
}

/// Puts an event with `bits` (none if 0) and `data` at `out[*n]`.
fn report(out: &mut [epoll_event], n: &mut usize, bits: u32, data: u64) {
    if bits != 0
        && let Some(e) = out.get_mut(*n)
    {
        *e = epoll_event {
            events: bits,
            u64: data,
        };
        *n += 1;
    }
}

impl Epolls {
    /// The sets that registered descriptor `fd`.
    fn sets_with(&self, fd: c_int) -> Vec<c_int> {
        self.sets
            .iter()
            .filter(|(_, s)| s.regs.contains_key(&fd))
            .map(|(&e, _)| e)
            .collect()
    }

    /// Makes registration (`epfd`, `fd`) loose (off the index and the
    /// candidates): its socket changed under it.
    fn unkey(&mut self, epfd: c_int, fd: c_int) {
        let Some(set) = self.sets.get_mut(&epfd) else {
            return;
        };
        let Some(reg) = set.regs.get_mut(&fd) else {
            return;
        };
        if reg.queued {
            reg.queued = false;
            set.candidates.retain(|&f| f != fd);
        }
        if let Some(id) = reg.key.take() {
            unindex(&mut self.index, id, epfd, fd);
            set.loose.push(fd);
        }
    }

    /// Removes registration (`epfd`, `fd`); whether there was one.
    fn remove(&mut self, epfd: c_int, fd: c_int) -> Option<Reg> {
        self.unkey(epfd, fd);
        let set = self.sets.get_mut(&epfd)?;
        let reg = set.regs.remove(&fd)?;
        set.loose.retain(|&f| f != fd);
        Some(reg)
    }

    /// The index is for attachment `c` of this process: if it was for
    /// another (none yet, a parent's before `fork`, one that ended and was
    /// replaced), every registration is loose again, to be indexed anew.
    fn set_owner(&mut self, c: Option<&Client>) {
        let me = pid();
        let same = match (&self.owner, c) {
            (None, None) => true,
            (Some((p, o)), Some(c)) => *p == me && o.same_as(c),
            _ => false,
        };
        if same {
            return;
        }
        for set in self.sets.values_mut() {
            for (&fd, reg) in set.regs.iter_mut() {
                if reg.key.take().is_some() {
                    set.loose.push(fd);
                }
                reg.queued = false;
            }
            set.candidates.clear();
        }
        self.index.clear();
        if let Some((p, old)) = self.owner.take()
            && p != me
        {
            // A parent's attachment, copied by `fork`: left alone, as the
            // shim leaves its own copy.
            std::mem::forget(old);
        }
        self.owner = c.map(|c| (me, c.clone()));
    }

    /// Notes changed socket `id` for every set that registered it, with
    /// the order key its registration's events pick from `st` (when what
    /// it waits for arose).
    fn route(&mut self, id: u32, st: Stamps) {
        let Epolls {
            sets, index, fresh, ..
        } = self;
        if let Some(v) = index.get(&id) {
            for &(epfd, fd) in v {
                let Some(reg) = sets.get(&epfd).and_then(|set| set.regs.get(&fd)) else {
                    continue;
                };
                let read = reg.events & (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLPRI) as u32;
                let write = reg.events & libc::EPOLLOUT as u32;
                fresh.push((st.key(read != 0, write != 0), epfd, fd));
            }
        }
    }

    /// Puts the changed registrations [`Epolls::route`] noted on their
    /// sets' candidate lists in the order they became ready (Linux's ready
    /// list is first in, first out), after the ones already there.
    ///
    /// One that changed in no way it waits for (a reader's socket whose
    /// room was freed) joins only if it is ready all the same (a change
    /// the engine did not stamp): as Linux's wake-up filter drops an
    /// event the registration did not ask for, so that it cannot stand,
    /// unexamined behind a short `maxevents`, ahead of sockets that
    /// became ready after it.
    fn enqueue_fresh(&mut self) {
        let Epolls { sets, fresh, .. } = self;
        fresh.sort_by_key(|&(key, ..)| key);
        for &(key, epfd, fd) in fresh.iter() {
            let Some(set) = sets.get_mut(&epfd) else {
                continue;
            };
            if key == u64::MAX {
                let events = set.regs.get(&fd).map_or(0, |r| r.events);
                let ready = TABLE
                    .get(fd)
                    .is_some_and(|s| poll_bits(s.readiness(), events) != 0);
                if !ready {
                    continue;
                }
            }
            set.enqueue(fd);
        }
        fresh.clear();
    }

    /// Set `epfd`'s loose registrations whose socket another process had
    /// (inherited across `fork`, not yet taken).
    fn inherited(&self, epfd: c_int) -> Vec<c_int> {
        self.sets.get(&epfd).map_or_else(Vec::new, |set| {
            set.loose
                .iter()
                .copied()
                .filter(|&fd| TABLE.get(fd).is_some_and(|s| !s.ours()))
                .collect()
        })
    }

    /// Indexes set `epfd`'s loose registrations whose socket is now a
    /// connection or listener of `c` (connected, listening or taken since),
    /// each a candidate: noted with [`NEWLY_INDEXED`] before the wait takes
    /// the changed bits, so that one whose socket changed joins by its
    /// stamp, as the others do, and the rest after them.
    fn key_loose(&mut self, epfd: c_int, c: &Client) {
        let Epolls {
            sets, index, fresh, ..
        } = self;
        let Some(set) = sets.get_mut(&epfd) else {
            return;
        };
        let mut i = 0;
        while i < set.loose.len() {
            let fd = set.loose[i];
            let id = TABLE.get(fd).and_then(|s| key_of(&s, c));
            let Some(reg) = set.regs.get_mut(&fd) else {
                set.loose.swap_remove(i);
                continue;
            };
            let Some(id) = id else {
                i += 1;
                continue;
            };
            set.loose.swap_remove(i);
            reg.key = Some(id);
            index.entry(id).or_default().push((epfd, fd));
            fresh.push((NEWLY_INDEXED, epfd, fd));
        }
    }

    /// Writes what set `epfd` has ready into `out`; returns how many.
    /// `c` is this process's attachment (`set_owner` was told).
    fn collect(&mut self, epfd: c_int, c: Option<&Client>, out: &mut [epoll_event]) -> usize {
        let live = c.filter(|c| c.is_alive());
        // A session that ended marks nothing, and every socket of it now
        // reports failure: look at them all.
        let mut scan_all = c.is_some() && live.is_none();
        if let Some(c) = live {
            // Indexed first: a socket registered since the last wait that
            // became ready since goes where its stamp puts it (by the
            // loose list's order, it came out ahead of sockets that
            // became ready before it).
            self.key_loose(epfd, c);
            if !c.take_changed(|id, st| self.route(id, st)) {
                // Another taker (none should exist): no bits to go by.
                scan_all = true;
            }
            self.enqueue_fresh();
        }
        let Epolls { sets, index, .. } = self;
        let Some(set) = sets.get_mut(&epfd) else {
            return 0;
        };
        let mut n = 0usize;
        if scan_all {
            for (&fd, reg) in set.regs.iter_mut() {
                if n >= out.len() {
                    break;
                }
                let bits = look(epfd, fd, reg);
                report(out, &mut n, bits, reg.data);
            }
            return n;
        }
        // The candidates, each once: those still ready (level-triggered)
        // go to the back, so a full `out` leaves the unseen ones first for
        // the next wait.
        for _ in 0..set.candidates.len() {
            if n >= out.len() {
                break;
            }
            let Some(fd) = set.candidates.pop_front() else {
                break;
            };
            let Some(reg) = set.regs.get_mut(&fd) else {
                continue;
            };
            let s = TABLE.get(fd);
            let valid = match (&s, live) {
                (Some(s), Some(c)) => key_of(s, c) == reg.key,
                _ => false,
            };
            let (Some(s), true) = (s, valid) else {
                // Its socket changed behind the index (no path should let
                // it): loose again, looked at below.
                reg.queued = false;
                if let Some(id) = reg.key.take() {
                    unindex(index, id, epfd, fd);
                    set.loose.push(fd);
                }
                continue;
            };
            let (bits, stay) = examine(epfd, reg, &s);
            report(out, &mut n, bits, reg.data);
            if stay {
                set.candidates.push_back(fd);
            } else {
                reg.queued = false;
            }
        }
        for &fd in &set.loose {
            if n >= out.len() {
                break;
            }
            let Some(reg) = set.regs.get_mut(&fd) else {
                continue;
            };
            let bits = look(epfd, fd, reg);
            report(out, &mut n, bits, reg.data);
        }
        n
    }
}

/// The events an `EPOLLEXCLUSIVE` registration may carry besides itself
/// (Linux's `EPOLLEXCLUSIVE_OK_BITS`).
const EXCLUSIVE_OK: u32 = (libc::EPOLLIN
    | libc::EPOLLOUT
    | libc::EPOLLERR
    | libc::EPOLLHUP
    | libc::EPOLLWAKEUP
    | libc::EPOLLET
    | libc::EPOLLEXCLUSIVE) as u32;

/// Whether `epoll_ctl` operation `op` with `events` is refused with
/// `EINVAL` for `EPOLLEXCLUSIVE`, as Linux refuses it: the flag is
/// accepted on `EPOLL_CTL_ADD` only, and only with the events it allows
/// (not `EPOLLONESHOT`, `EPOLLRDHUP` or `EPOLLPRI`), checked before
/// whether the registration exists; and an exclusive registration
/// (`existing`, its events) cannot be modified at all. A wait wakes every
/// thread waiting on the set, which Linux allows ("one or more").
fn exclusive_refused(op: c_int, events: u32, existing: Option<u32>) -> bool {
    let excl = libc::EPOLLEXCLUSIVE as u32;
    match op {
        libc::EPOLL_CTL_ADD => events & excl != 0 && events & !EXCLUSIVE_OK != 0,
        libc::EPOLL_CTL_MOD => events & excl != 0 || existing.is_some_and(|e| e & excl != 0),
        _ => false,
    }
}

/// The order key of a registration indexed in this wait ([`Epolls::key_loose`]):
/// after every one whose socket's change was stamped (its own stamp, if it
/// has one, puts it there first), and looked at whether or not it is ready.
const NEWLY_INDEXED: u64 = u64::MAX - 1;

/// Epoll sets that hold softoe sockets.
fn epolls() -> &'static Mutex<Epolls> {
    static E: OnceLock<Mutex<Epolls>> = OnceLock::new();
    E.get_or_init(|| Mutex::new(Epolls::default()))
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
    let mut g = lock(epolls());
    let eps = &mut *g;
    let set = eps.sets.entry(epfd).or_default();
    match op {
        libc::EPOLL_CTL_ADD | libc::EPOLL_CTL_MOD => {
            let Some(e) = e else {
                set_errno(libc::EFAULT);
                return -1;
            };
            let existing = set.regs.get(&fd).map(|r| r.events);
            let exists = existing.is_some();
            if exclusive_refused(op, e.events, existing) {
                set_errno(libc::EINVAL);
                return -1;
            }
            if op == libc::EPOLL_CTL_ADD && exists {
                set_errno(libc::EEXIST);
                return -1;
            }
            if op == libc::EPOLL_CTL_MOD && !exists {
                set_errno(libc::ENOENT);
                return -1;
            }
            match set.regs.get_mut(&fd) {
                Some(reg) => {
                    reg.events = e.events;
                    reg.data = e.u64;
                    reg.disabled = false;
                }
                None => {
                    // Loose until the next wait indexes it.
                    set.regs.insert(
                        fd,
                        Reg {
                            events: e.events,
                            data: e.u64,
                            disabled: false,
                            key: None,
                            queued: false,
                        },
                    );
                    set.loose.push(fd);
                }
            }
            // It may be ready already: look at it in the next wait.
            set.enqueue(fd);
            if let Some(s) = TABLE.get(fd) {
                lock(&s.reported).remove(&epfd);
            }
            0
        }
        libc::EPOLL_CTL_DEL => {
            if eps.remove(epfd, fd).is_none() {
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
    let filled = Cell::new(0usize);
    let softoe = || -> c_int {
        let start = filled.get();
        let mut out = out.borrow_mut();
        let Some(room) = out.get_mut(start..) else {
            return 0;
        };
        let mut adopted = false;
        loop {
            let c = shim().client_if_attached();
            let mut g = lock(epolls());
            g.set_owner(c.as_ref());
            // This wait may put a doorbell in the kernel's set.
            if let Some(set) = g.sets.get_mut(&epfd) {
                set.bells = true;
            }
            if !adopted {
                // Sockets inherited across fork are taken into this
                // process's session first, without the sets' lock (that
                // may attach, and attaching goes through our own hooks).
                let fds = g.inherited(epfd);
                if !fds.is_empty() {
                    drop(g);
                    for fd in fds {
                        let _ = crate::sock::current(fd);
                    }
                    adopted = true;
                    continue;
                }
            }
            let n = g.collect(epfd, c.as_ref(), room);
            filled.set(start + n);
            return n as c_int;
        }
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
        .sets
        .get(&epfd)
        .is_some_and(|s| !s.regs.is_empty() || s.bells)
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
    let mut g = lock(epolls());
    let sets = g.sets_with(fd);
    for epfd in sets {
        g.remove(epfd, fd);
    }
}

/// `fd` may have been an epoll set: forget it.
pub(crate) fn forget_epoll(fd: c_int) {
    if ANY_SET.load(Ordering::Relaxed) {
        let mut g = lock(epolls());
        if let Some(set) = g.sets.remove(&fd) {
            for (&sfd, reg) in &set.regs {
                if let Some(id) = reg.key {
                    unindex(&mut g.index, id, fd, sfd);
                }
            }
        }
    }
}

/// Whether any epoll set ever held a softoe socket (so `close` of other
/// descriptors need not look).
static ANY_SET: AtomicBool = AtomicBool::new(false);

/// The socket behind descriptors `fds` was replaced (taken into this
/// process's session, or taken back from a child): their registrations
/// are indexed anew at the next wait.
pub(crate) fn socket_replaced(fds: &[c_int]) {
    if !ANY_SET.load(Ordering::Relaxed) || fds.is_empty() {
        return;
    }
    let mut g = lock(epolls());
    let sets: Vec<c_int> = g.sets.keys().copied().collect();
    for epfd in sets {
        for &fd in fds {
            g.unkey(epfd, fd);
        }
    }
}

/// `fd` is the kernel's now: its registrations move to the kernel's sets.
pub(crate) fn moved_to_kernel(fd: c_int) {
    let mut g = lock(epolls());
    let sets = g.sets_with(fd);
    for epfd in sets {
        if let Some(reg) = g.remove(epfd, fd) {
            let mut ev = epoll_event {
                events: reg.events,
                u64: reg.data,
            };
            // SAFETY: the program's epoll set and descriptor, our event.
            unsafe { real::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &raw mut ev) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `EPOLLEXCLUSIVE` as Linux takes it: on `EPOLL_CTL_ADD` with the
    /// events it allows; never on `EPOLL_CTL_MOD`, and an exclusive
    /// registration is not modified.
    #[test]
    fn exclusive_is_refused_where_linux_refuses_it() {
        let x = libc::EPOLLEXCLUSIVE as u32;
        let inp = libc::EPOLLIN as u32;
        let add = libc::EPOLL_CTL_ADD;
        let md = libc::EPOLL_CTL_MOD;
        assert!(!exclusive_refused(add, inp | x, None));
        assert!(!exclusive_refused(
            add,
            inp | x | libc::EPOLLET as u32,
            None
        ));
        assert!(!exclusive_refused(
            add,
            inp | libc::EPOLLONESHOT as u32,
            None
        ));
        assert!(exclusive_refused(
            add,
            inp | x | libc::EPOLLONESHOT as u32,
            None
        ));
        assert!(exclusive_refused(
            add,
            inp | x | libc::EPOLLRDHUP as u32,
            None
        ));
        assert!(exclusive_refused(add, x | libc::EPOLLPRI as u32, Some(inp)));
        assert!(exclusive_refused(md, inp | x, None));
        assert!(exclusive_refused(md, inp | x, Some(inp)));
        assert!(exclusive_refused(md, inp, Some(inp | x)));
        assert!(!exclusive_refused(
            md,
            inp | libc::EPOLLOUT as u32,
            Some(inp)
        ));
        assert!(!exclusive_refused(libc::EPOLL_CTL_DEL, x, Some(inp | x)));
    }

    /// A set that no longer holds a softoe socket still has its waits
    /// filtered once a wait put a doorbell in it: forwarded to the kernel
    /// as they are, a doorbell rung as the wait ended (the engine reads the
    /// armed bit, the thread disarms and drains, the engine rings) came
    /// out with its tag for data — haproxy's old worker took it for a
    /// descriptor and crashed at a reload.
    #[test]
    fn a_set_a_doorbell_joined_is_filtered_with_no_softoe_socket_left() {
        let epfd = 1_000_001;
        lock(epolls()).sets.insert(epfd, EpSet::default());
        assert!(
            !has_softoe(epfd),
            "an empty set of softoe sockets is the kernel's"
        );
        if let Some(s) = lock(epolls()).sets.get_mut(&epfd) {
            s.bells = true;
        }
        assert!(has_softoe(epfd), "a doorbell sits in its kernel set");
        lock(epolls()).sets.remove(&epfd);
    }
}
