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

use std::sync::atomic::{AtomicU32, Ordering};

/// This process's id: one load of a word the kernel zeroes in every child
/// (see the module's notes). Measured here: under a nanosecond, against
/// 150–180 ns for `getpid`.
#[inline]
pub fn process_id() -> u32 {
    let Some(w) = softoe_sys::forkpage::word() else {
        return std::process::id();
    };
    let id = w.load(Ordering::Relaxed);
    if id != 0 {
        return id;
    }
    refresh(w)
}

/// A new process (or the first call): the kernel's answer, kept.
#[cold]
fn refresh(w: &AtomicU32) -> u32 {
    let id = std::process::id();
    w.store(id, Ordering::Relaxed);
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_this_process_and_a_zeroed_word_is_refreshed() {
        assert_eq!(process_id(), std::process::id());
        assert_eq!(process_id(), std::process::id());
        // What a child finds (the kernel zeroed the word: see
        // `softoe_sys::forkpage`'s test of a raw clone): the id is asked
        // for again and kept.
        if let Some(w) = softoe_sys::forkpage::word() {
            w.store(0, Ordering::Relaxed);
            assert_eq!(process_id(), std::process::id());
            assert_eq!(w.load(Ordering::Relaxed), std::process::id());
        }
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
