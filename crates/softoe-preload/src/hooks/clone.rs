//! Children made past libc's `fork`: a `syscall(SYS_clone, …)` (vsftpd
//! forks so), `SYS_clone3` or `SYS_fork` through libc's `syscall`
//! function runs no `pthread_atfork` handler, so the parent's connections
//! would not be prepared for the child. This hook prepares them as
//! `fork` does ([`before_fork`]) when the call makes a new process (no
//! `CLONE_VM`: a thread or a `vfork` shares the parent's memory and its
//! sockets as they are). The child needs nothing more: the shim's process
//! id notices a new process by itself ([`crate::sock::pid`]).
//!
//! A program that makes the system call itself (inline assembly, or
//! libc's `syscall` reached past the shim) prepares nothing: its child
//! still never touches the parent's session, shares inherited listeners,
//! and gets `EBADF` on inherited connections, as for UDP sockets.

use libc::c_long;

use crate::sock::{TABLE, before_fork};

/// Whether system call `n` with first argument `a1` makes a new process
/// (a copy of this one's memory, not a share of it).
///
/// # Safety
/// For `SYS_clone3`, `a1` is null or points to a `struct clone_args`, as
/// the call requires.
unsafe fn makes_a_process(n: c_long, a1: c_long) -> bool {
    let vm = libc::CLONE_VM as u64;
    match n {
        libc::SYS_clone => (a1 as u64) & vm == 0,
        libc::SYS_clone3 if a1 != 0 => {
            // SAFETY: the caller's `struct clone_args`, whose first field
            // is the 64-bit flags (linux/sched.h).
            let flags = unsafe { std::ptr::read_unaligned(a1 as *const u64) };
            flags & vm == 0
        }
        #[cfg(target_arch = "x86_64")]
        libc::SYS_fork => true,
        _ => false,
    }
}

/// glibc's `long syscall(long number, ...)`: every system call takes at
/// most six arguments, which the x86-64 and AArch64 conventions pass where
/// fixed ones go (as for `fcntl`); those the caller did not pass are
/// passed on unread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn syscall(
    n: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
) -> c_long {
    // SAFETY: the caller's arguments to the call they name (see `hooks`).
    if unsafe { makes_a_process(n, a1) } && !TABLE.is_empty() {
        before_fork();
    }
    // SAFETY: the caller's arguments, unchanged, to the same C function
    // (forwarding, in the safety argument of `hooks`).
    unsafe { crate::real::syscall(n, [a1, a2, a3, a4, a5, a6]) }
}
