//! Signal dispositions, queried only (rustix has no `sigaction`): what the
//! host library asks to decide whether a call a handler interrupted goes
//! on, as the kernel would restart it.

/// Whether signal `sig` has a handler installed without `SA_RESTART` (a
/// call it interrupts fails with `EINTR`). `false` for the default and
/// ignored dispositions, and for a number that is no signal.
pub fn interrupts(sig: i32) -> bool {
    // SAFETY: an all-zero `sigaction` is a valid value of the plain C struct.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null new action only queries; `old` is live and writable
    // for the call, which writes at most one `sigaction` into it.
    if unsafe { libc::sigaction(sig, std::ptr::null(), &raw mut old) } != 0 {
        return false;
    }
    let h = old.sa_sigaction;
    h != libc::SIG_DFL && h != libc::SIG_IGN && old.sa_flags & libc::SA_RESTART == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" fn nothing(_: libc::c_int) {}

    fn install(sig: i32, flags: libc::c_int) {
        // SAFETY: as in `interrupts`; the handler is an `extern "C"` fn
        // that does nothing, sound to run at any time.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = nothing as extern "C" fn(libc::c_int) as libc::sighandler_t;
            act.sa_flags = flags;
            assert_eq!(
                libc::sigaction(sig, &raw const act, std::ptr::null_mut()),
                0
            );
        }
    }

    #[test]
    fn a_handler_without_sa_restart_interrupts() {
        // SIGWINCH's default is to ignore it: nobody else in the test
        // process cares what handles it.
        assert!(!interrupts(libc::SIGWINCH));
        install(libc::SIGWINCH, 0);
        assert!(interrupts(libc::SIGWINCH));
        install(libc::SIGWINCH, libc::SA_RESTART);
        assert!(!interrupts(libc::SIGWINCH));
        assert!(!interrupts(-1));
        assert!(!interrupts(libc::SIGKILL));
    }
}
