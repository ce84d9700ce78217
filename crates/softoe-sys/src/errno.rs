//! The calling thread's `errno`, which rustix never reads or writes (it
//! makes its system calls itself) and std offers only to read: the host
//! library keeps a program's `errno` across the libc calls it makes on
//! the program's behalf (closing a descriptor in a drop, for one).

/// This thread's `errno` now.
pub fn get() -> i32 {
    // SAFETY: `__errno_location` returns a valid pointer to this thread's
    // errno word, live for as long as the thread; reading an int is sound.
    unsafe { *libc::__errno_location() }
}

/// Sets this thread's `errno` to `v`.
pub fn set(v: i32) {
    // SAFETY: as in `get`; the word is this thread's alone, so the write
    // races with nothing.
    unsafe { *libc::__errno_location() = v };
}

/// Puts `errno` back as it was when made, when dropped.
#[derive(Debug)]
pub struct KeepErrno(i32);

impl KeepErrno {
    /// Remembers `errno` now.
    pub fn new() -> KeepErrno {
        KeepErrno(get())
    }
}

impl Default for KeepErrno {
    fn default() -> KeepErrno {
        KeepErrno::new()
    }
}

impl Drop for KeepErrno {
    fn drop(&mut self) {
        set(self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_comes_back_when_the_guard_goes() {
        set(libc::EINTR);
        {
            let _keep = KeepErrno::new();
            set(libc::EAGAIN);
            assert_eq!(get(), libc::EAGAIN);
        }
        assert_eq!(get(), libc::EINTR);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EINTR)
        );
    }
}
