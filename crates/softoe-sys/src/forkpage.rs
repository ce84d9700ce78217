//! A word every child process sees zeroed: a private page marked
//! `MADV_WIPEONFORK` (Linux 4.14), which the kernel gives every child made
//! without `CLONE_VM` (`fork`, `clone`, `clone3`, by any route, libc's or
//! not) as a zeroed copy, the mark staying on the child's page for its own
//! children. The host library keeps its process id there, so that one
//! load tells a child that inherited a session from the parent that owns
//! it.

use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering};

use rustix::mm::{Advice, MapFlags, ProtFlags};

/// The page's first word (null until the first call maps it).
static PAGE: AtomicPtr<AtomicU32> = AtomicPtr::new(null_mut());
/// The kernel refused `MADV_WIPEONFORK` (or the mapping): no word at all.
static NO_PAGE: AtomicBool = AtomicBool::new(false);

const LEN: usize = 4096;

/// The word, mapped on the first call; `None` where the kernel refuses
/// the mark. A child's word reads 0 until it stores something; a `vfork`
/// child shares its parent's memory, and with it the parent's word.
#[inline]
pub fn word() -> Option<&'static AtomicU32> {
    let p = PAGE.load(Ordering::Acquire);
    let p = if p.is_null() { map() } else { p };
    // SAFETY: a non-null `p` is the first word of a page `map` mapped
    // (page-aligned, so aligned for an AtomicU32, and zero-filled, a valid
    // value) that is never unmapped, so `'static`; every access to it goes
    // through the atomic. A child's copy of the page is its own.
    unsafe { p.as_ref() }
}

/// Maps the page (once; a thread that loses the race unmaps its own), or
/// null where the kernel refuses.
#[cold]
fn map() -> *mut AtomicU32 {
    if NO_PAGE.load(Ordering::Relaxed) {
        return null_mut();
    }
    // SAFETY: a new private anonymous mapping at an address the kernel
    // chooses: it replaces nothing, and nothing else refers to it.
    let m = match unsafe {
        rustix::mm::mmap_anonymous(
            null_mut(),
            LEN,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE,
        )
    } {
        Ok(m) => m,
        Err(_) => return null_mut(),
    };
    // SAFETY: `m` is the mapping just made, `LEN` bytes; the advice only
    // changes what a child gets.
    if unsafe { rustix::mm::madvise(m, LEN, Advice::LinuxWipeOnFork) }.is_err() {
        NO_PAGE.store(true, Ordering::Relaxed);
        // SAFETY: our own mapping, never published.
        let _ = unsafe { rustix::mm::munmap(m, LEN) };
        return null_mut();
    }
    let mine = m.cast::<AtomicU32>();
    match PAGE.compare_exchange(null_mut(), mine, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => mine,
        Err(theirs) => {
            // SAFETY: our own mapping, never published.
            let _ = unsafe { rustix::mm::munmap(m, LEN) };
            theirs
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_word_stays_and_a_raw_clone_child_sees_it_zeroed() -> std::io::Result<()> {
        let Some(w) = word() else {
            return Ok(()); // A kernel older than 4.14.
        };
        w.store(77, Ordering::Relaxed);
        assert!(word().is_some_and(|again| std::ptr::eq(again, w)));
        let (r, wr) = rustix::pipe::pipe()?;
        // SAFETY: clone(SIGCHLD) without CLONE_VM is a fork libc does not
        // see; the child only loads a word, writes to a pipe and leaves
        // with `_exit`, all async-signal-safe.
        let pid = unsafe { libc::syscall(libc::SYS_clone, libc::SIGCHLD, 0, 0, 0, 0) };
        assert!(pid >= 0);
        if pid == 0 {
            let b = [u8::from(w.load(Ordering::Relaxed) == 0)];
            let _ = rustix::io::write(&wr, &b);
            // SAFETY: ends the child at once, as a forked child should.
            unsafe { libc::_exit(0) };
        }
        let mut b = [0u8];
        assert_eq!(rustix::io::read(&r, &mut b), Ok(1));
        let child = rustix::process::Pid::from_raw(pid as i32);
        let _ = rustix::process::waitpid(child, rustix::process::WaitOptions::empty());
        assert_eq!(b[0], 1, "the child saw its parent's word");
        assert_eq!(w.load(Ordering::Relaxed), 77);
        Ok(())
    }
}
