//! Children that sandbox themselves.
//!
//! sshd's privilege-separated child chroots, drops its user
//! and installs a seccomp filter before it first reads the connection; a
//! shim that attached to the engine then (a socket and a connect) would be
//! killed. Just before a process sandboxes itself — `chroot`, a change of
//! user, a lower descriptor limit (`limits.rs`), `prctl(PR_SET_SECCOMP)` or
//! `PR_SET_NO_NEW_PRIVS` — the shim attaches, takes every inherited
//! connection into its session, and makes this thread's doorbell and the
//! client's bells; before a seccomp filter it also stops using the attach
//! socket, so what follows needs only `read`, `write`, `ppoll` and
//! `futex`.

use libc::{c_char, c_int};
use tracing::debug;

use crate::sock::{St, TABLE, current, shim};

/// Readies this process for a sandbox it is about to enter: inherited
/// softoe sockets taken into its own session now, this thread's doorbell
/// and the client's bells made now; with `seal` (a seccomp filter comes)
/// nothing goes over the attach socket afterwards. Cheap when there is
/// nothing to do.
pub(crate) fn before_sandbox(why: &str, seal: bool) {
    let entries = TABLE.entries();
    if entries.is_empty() {
        return;
    }
    let mut taken = 0;
    for (fd, s) in &entries {
        if !s.ours() {
            match current(*fd) {
                Some(Ok(_)) => taken += 1,
                Some(Err(e)) => debug!(fd, errno = e, "an inherited socket could not be taken"),
                None => {}
            }
        }
    }
    let Some(c) = shim().client_if_attached().or_else(|| {
        // Sockets that never reached the engine need no attachment.
        entries
            .iter()
            .any(|(_, s)| !matches!(s.state(), St::Fresh { .. } | St::Lost(_)))
            .then(|| shim().client())
            .flatten()
    }) else {
        return;
    };
    super::wait::prepare_waiter(&c);
    c.stock_bells();
    if seal {
        c.seal();
    }
    debug!(why, taken, seal, "ready for a sandbox");
}

/// Hooks `name(args)`: readies for a sandbox when `when` holds, then calls
/// the real function.
macro_rules! sandboxing {
    ($( fn $name:ident($($a:ident: $t:ty),*) when $when:expr; )*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            if $when {
                // The process keeps every system call: no seal.
                before_sandbox(stringify!($name), false);
            }
            forward!($name($($a),*))
        }
    )*};
}

sandboxing! {
    fn chroot(path: *const c_char) when true;
    fn setuid(uid: libc::uid_t) when true;
    fn seteuid(uid: libc::uid_t) when true;
    fn setreuid(r: libc::uid_t, e: libc::uid_t) when true;
    fn setresuid(r: libc::uid_t, e: libc::uid_t, s: libc::uid_t) when true;
}
// `setrlimit`/`prlimit` (a lower `RLIMIT_NOFILE` readies for a sandbox
// too) are in `limits.rs`, which also adjusts `RLIMIT_AS`.

/// `prctl` is variadic in C; every option passes at most four more
/// arguments, which the x86-64 and AArch64 conventions put where fixed
/// ones go (as for `fcntl`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn prctl(
    option: c_int,
    a2: libc::c_ulong,
    a3: libc::c_ulong,
    a4: libc::c_ulong,
    a5: libc::c_ulong,
) -> c_int {
    // Only a seccomp filter takes system calls away (sshd: no-new-privs,
    // then the filter).
    if option == libc::PR_SET_SECCOMP {
        before_sandbox("seccomp", true);
    } else if option == libc::PR_SET_NO_NEW_PRIVS && a2 != 0 {
        before_sandbox("no_new_privs", false);
    }
    forward!(prctl(option, a2, a3, a4, a5))
}
