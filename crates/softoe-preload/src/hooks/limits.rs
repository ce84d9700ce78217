//! `setrlimit`/`prlimit`: a lower descriptor limit is a sandbox
//! (`RLIMIT_NOFILE`: the shim readies itself first, see `sandbox.rs`), and
//! an address-space limit (`RLIMIT_AS`) is raised by what softoe's regions
//! take.
//!
//! A session's region is address space the program never asked for, and
//! it cannot shrink once mapped. vsftpd limits each session process to
//! 200 MiB after its first use of the connection (the attach): with a
//! 256 MiB region mapped — two in a forked child, which also inherits its
//! parent's — every `mmap` of its own failed. So the limit a program sets
//! is its own: the shim adds the bytes of every softoe region mapped in
//! the process now (its session's and any a parent left it), as far as
//! the hard limit lets it, and `getrlimit` reports the sum. A limit set
//! before the first attach needs nothing: the attach sizes the region to
//! the limit then in force (softoe-host's `fit`). Attaching before the
//! limit, as for the other sandboxes, would map the full region while the
//! room is still there — the opposite of what the program wants.

use libc::{c_int, rlim_t};
use tracing::debug;

use super::sandbox::before_sandbox;
use crate::sock::shim;

/// The bytes of the softoe regions mapped in this process: the engine
/// names each region's memfd `softoe-session-N`. Without `/proc` (a
/// chroot), this process's own session's.
fn regions() -> u64 {
    if let Ok(maps) = std::fs::read_to_string("/proc/self/maps") {
        return maps
            .lines()
            .filter(|l| l.contains("/memfd:softoe-session-"))
            .filter_map(|l| {
                let (a, b) = l.split_whitespace().next()?.split_once('-')?;
                let a = u64::from_str_radix(a, 16).ok()?;
                let b = u64::from_str_radix(b, 16).ok()?;
                b.checked_sub(a)
            })
            .sum();
    }
    shim().client_if_attached().map_or(0, |c| c.region_len())
}

/// `(cur, max)` for a program's `RLIMIT_AS` of `(cur, max)`: each finite
/// one raised by `extra`, not past `hard` (the limit in force, which an
/// unprivileged process cannot raise).
fn raised(cur: rlim_t, max: rlim_t, extra: u64, hard: rlim_t) -> (rlim_t, rlim_t) {
    let up = |v: rlim_t| {
        if v == libc::RLIM_INFINITY {
            v
        } else {
            v.saturating_add(extra).min(hard)
        }
    };
    let max = up(max);
    (up(cur).min(max), max)
}

/// The `RLIMIT_AS` to set for a program's `(cur, max)`, if it changes.
fn address_space(cur: rlim_t, max: rlim_t) -> Option<(rlim_t, rlim_t)> {
    if cur == libc::RLIM_INFINITY && max == libc::RLIM_INFINITY {
        return None;
    }
    let extra = regions();
    if extra == 0 {
        return None;
    }
    let mut now = libc::rlimit {
        rlim_cur: 0,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: `now` is a live rlimit for the call to fill.
    let hard = if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut now) } == 0 {
        now.rlim_max
    } else {
        max
    };
    let (c, m) = raised(cur, max, extra, hard);
    debug!(
        asked_mib = cur >> 20,
        set_mib = c >> 20,
        regions_mib = extra >> 20,
        "RLIMIT_AS: softoe's regions added to the program's limit"
    );
    Some((c, m))
}

/// Whether a `prlimit` on `pid` is this process's.
fn me(pid: libc::pid_t) -> bool {
    pid == 0 || pid as u32 == crate::sock::pid()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setrlimit(
    res: libc::__rlimit_resource_t,
    lim: *const libc::rlimit,
) -> c_int {
    if res == libc::RLIMIT_NOFILE {
        before_sandbox("setrlimit", false);
    }
    if res == libc::RLIMIT_AS && !lim.is_null() {
        // SAFETY: the caller's rlimit (see `hooks`).
        let l = unsafe { *lim };
        if let Some((c, m)) = address_space(l.rlim_cur, l.rlim_max) {
            let mine = libc::rlimit {
                rlim_cur: c,
                rlim_max: m,
            };
            // SAFETY: our own rlimit, for the same call.
            return unsafe { crate::real::setrlimit(res, &mine) };
        }
    }
    forward!(setrlimit(res, lim))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setrlimit64(
    res: libc::__rlimit_resource_t,
    lim: *const libc::rlimit64,
) -> c_int {
    if res == libc::RLIMIT_NOFILE {
        before_sandbox("setrlimit64", false);
    }
    if res == libc::RLIMIT_AS && !lim.is_null() {
        // SAFETY: the caller's rlimit (see `hooks`).
        let l = unsafe { *lim };
        if let Some((c, m)) = address_space(l.rlim_cur, l.rlim_max) {
            let mine = libc::rlimit64 {
                rlim_cur: c,
                rlim_max: m,
            };
            // SAFETY: our own rlimit, for the same call.
            return unsafe { crate::real::setrlimit64(res, &mine) };
        }
    }
    forward!(setrlimit64(res, lim))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn prlimit(
    pid: libc::pid_t,
    res: libc::__rlimit_resource_t,
    new: *const libc::rlimit,
    old: *mut libc::rlimit,
) -> c_int {
    if me(pid) && !new.is_null() {
        if res == libc::RLIMIT_NOFILE {
            before_sandbox("prlimit", false);
        }
        if res == libc::RLIMIT_AS {
            // SAFETY: the caller's rlimit (see `hooks`).
            let l = unsafe { *new };
            if let Some((c, m)) = address_space(l.rlim_cur, l.rlim_max) {
                let mine = libc::rlimit {
                    rlim_cur: c,
                    rlim_max: m,
                };
                // SAFETY: our own rlimit; the caller's `old` (see `hooks`).
                return unsafe { crate::real::prlimit(pid, res, &mine, old) };
            }
        }
    }
    forward!(prlimit(pid, res, new, old))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn prlimit64(
    pid: libc::pid_t,
    res: libc::__rlimit_resource_t,
    new: *const libc::rlimit64,
    old: *mut libc::rlimit64,
) -> c_int {
    if me(pid) && !new.is_null() {
        if res == libc::RLIMIT_NOFILE {
            before_sandbox("prlimit64", false);
        }
        if res == libc::RLIMIT_AS {
            // SAFETY: the caller's rlimit (see `hooks`).
            let l = unsafe { *new };
            if let Some((c, m)) = address_space(l.rlim_cur, l.rlim_max) {
                let mine = libc::rlimit64 {
                    rlim_cur: c,
                    rlim_max: m,
                };
                // SAFETY: our own rlimit; the caller's `old` (see `hooks`).
                return unsafe { crate::real::prlimit64(pid, res, &mine, old) };
            }
        }
    }
    forward!(prlimit64(pid, res, new, old))
}

#[cfg(test)]
mod tests {
    use super::raised;

    const INF: libc::rlim_t = libc::RLIM_INFINITY;
    const MIB: libc::rlim_t = 1 << 20;

    #[test]
    fn the_limit_grows_by_the_regions_within_the_hard_limit() {
        assert_eq!(
            raised(200 * MIB, 200 * MIB, 256 * MIB, INF),
            (456 * MIB, 456 * MIB)
        );
        assert_eq!(raised(200 * MIB, INF, 256 * MIB, INF), (456 * MIB, INF));
        // An unprivileged process cannot raise the hard limit.
        assert_eq!(
            raised(200 * MIB, 200 * MIB, 256 * MIB, 300 * MIB),
            (300 * MIB, 300 * MIB)
        );
        assert_eq!(raised(INF, INF, 256 * MIB, INF), (INF, INF));
    }
}
