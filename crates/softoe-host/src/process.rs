//! This process's id, for the price of a memory load, and right in every
//! child however it was made.
//!
//! A session's rings have one producer: a child that inherited a copy of
//! its parent's attachment must never post on it. Telling the two apart
//! needs the process id at every post, and `getpid` is a system call
//! (glibc stopped caching it in 2.25): 150–180 ns here, more than a whole
//! `send` through the ring. A cache refreshed by a `pthread_atfork` child
//! hook misses every child made without libc's `fork` — vsftpd clones
//! with `syscall(__NR_clone, SIGCHLD, …)`, and its children went on
//! posting on the parent's rings until the engine ended the session.
//!
//! So the id lives in a page marked `MADV_WIPEONFORK` (Linux 4.14): the
//! kernel gives every child made without `CLONE_VM` — `fork`, `clone`,
//! `clone3`, by any route — a zeroed copy of it, and the mark stays on the
//! child's page for its own children. A non-zero word is this process's
//! id; zero means a new process, which reads its id once and writes it
//! back. A `vfork` child shares the parent's memory, and with it the
//! parent's id, as it shares everything else until it `exec`s. Where the
//! kernel refuses the mark, every call asks the kernel.

use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};

/// The page's first word (null until the first call maps it).
static PAGE: AtomicPtr<AtomicU32> = AtomicPtr::new(null_mut());
/// The kernel refused `MADV_WIPEONFORK`: no cache at all.
static NO_PAGE: AtomicBool = AtomicBool::new(false);

/// This process's id: one load of a word the kernel zeroes in every child
/// (see the module's notes). Measured here: under a nanosecond, against
/// 150–180 ns for `getpid`.
#[inline]
pub fn process_id() -> u32 {
    let p = PAGE.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: `p` is the first word of a page this module mapped
        // (page-aligned, so aligned for a u32) and never unmaps; every
        // access to it is atomic. The mapping is private: a child's copy
        // is its own.
        let id = unsafe { (*p).load(Ordering::Relaxed) };
        if id != 0 {
            return id;
        }
    }
    refresh(p)
}

/// A new process (or the first call): the kernel's answer, kept.
#[cold]
fn refresh(p: *mut AtomicU32) -> u32 {
    let id = std::process::id();
    let p = if p.is_null() { map() } else { p };
    if !p.is_null() {
        // SAFETY: as in `process_id`.
        unsafe { (*p).store(id, Ordering::Relaxed) };
    }
    id
}

/// Maps the page (once; a thread that loses the race unmaps its own), or
/// null where the kernel refuses the mark.
fn map() -> *mut AtomicU32 {
    if NO_PAGE.load(Ordering::Relaxed) {
        return null_mut();
    }
    let len = 4096;
    // SAFETY: a new private anonymous mapping; nothing else refers to it.
    let m = unsafe {
        libc::mmap(
            null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if m == libc::MAP_FAILED {
        return null_mut();
    }
    // SAFETY: `m` is the mapping just made, `len` bytes.
    if unsafe { libc::madvise(m, len, libc::MADV_WIPEONFORK) } != 0 {
        NO_PAGE.store(true, Ordering::Relaxed);
        // SAFETY: our own mapping, not published.
        unsafe { libc::munmap(m, len) };
        return null_mut();
    }
    let mine = m.cast::<AtomicU32>();
    match PAGE.compare_exchange(null_mut(), mine, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => mine,
        Err(theirs) => {
            // SAFETY: our own mapping, never published.
            unsafe { libc::munmap(m, len) };
            theirs
        }
    }
}

#[cfg(test)]
mod tests {
    use super::process_id;

    #[test]
    fn the_id_is_this_process_and_a_raw_clone_child_sees_its_own() {
        assert_eq!(process_id(), std::process::id());
        assert_eq!(process_id(), std::process::id());
        let mut fds = [0; 2];
        // SAFETY: a plain pipe.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: clone(SIGCHLD) without CLONE_VM is a fork libc does not
        // see; the child only reads a cached word, writes to a pipe and
        // leaves with `_exit`.
        let pid = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD, 0, 0, 0, 0) };
        assert!(pid >= 0);
        if pid == 0 {
            let ok = process_id() != 0 && process_id() == std::process::id();
            let b = [u8::from(ok)];
            // SAFETY: a write of one byte to our pipe, then exit.
            unsafe {
                libc::write(fds[1], b.as_ptr().cast(), 1);
                libc::_exit(0);
            }
        }
        let mut b = [0u8];
        // SAFETY: a read of one byte from our pipe.
        assert_eq!(unsafe { libc::read(fds[0], b.as_mut_ptr().cast(), 1) }, 1);
        let mut st = 0;
        // SAFETY: waits for our child.
        unsafe { libc::waitpid(pid as libc::pid_t, &mut st, 0) };
        assert_eq!(b[0], 1, "the child saw its parent's id");
        assert_eq!(process_id(), std::process::id());
    }

    /// What the check costs against asking the kernel (a measurement, not
    /// a test: `cargo test --release -p softoe-host --lib process -- --ignored
    /// --nocapture`).
    #[test]
    #[ignore]
    fn cost_of_the_check() {
        let n = 10_000_000u32;
        let t = std::time::Instant::now();
        let mut x = 0u32;
        for _ in 0..n {
            x = x.wrapping_add(std::hint::black_box(process_id()));
        }
        let cached = t.elapsed();
        let t = std::time::Instant::now();
        for _ in 0..n / 10 {
            x = x.wrapping_add(std::hint::black_box(std::process::id()));
        }
        let kernel = t.elapsed() * 10;
        println!(
            "process_id {:.2} ns, getpid {:.1} ns ({x})",
            cached.as_nanos() as f64 / f64::from(n),
            kernel.as_nanos() as f64 / f64::from(n)
        );
    }
}
