//! Scheduling classes (`sched_setscheduler`, which rustix lacks): the
//! lab's bond experiment puts its 1 kHz sender in `SCHED_FIFO` so that
//! nothing ordinary delays it.
use std::io;

/// The scheduling policy and priority of thread `tid` (0: the caller).
fn set(tid: i32, policy: i32, priority: i32) -> io::Result<()> {
    let p = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `p` is a live, initialised sched_param the kernel only reads
    // during the call; a bad tid, policy or priority is an error return.
    if unsafe { libc::sched_setscheduler(tid, policy, &raw const p) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Puts thread `tid` (0: the caller) in `SCHED_FIFO` at `priority`
/// (1–99): it runs as soon as it is runnable, ahead of every ordinary
/// thread. Needs `CAP_SYS_NICE` (or an `RLIMIT_RTPRIO`).
pub fn fifo(tid: i32, priority: i32) -> io::Result<()> {
    set(tid, libc::SCHED_FIFO, priority)
}

/// Puts thread `tid` (0: the caller) back in the ordinary class
/// (`SCHED_OTHER`).
pub fn ordinary(tid: i32) -> io::Result<()> {
    set(tid, libc::SCHED_OTHER, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_change_and_bad_ones_are_errors() -> io::Result<()> {
        std::thread::spawn(|| -> io::Result<()> {
            // Unprivileged, FIFO is refused (EPERM); as root it is taken.
            match fifo(0, 10) {
                Ok(()) => {
                    // SAFETY: no pointers; asks the caller's policy.
                    assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_FIFO);
                }
                Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM)),
            }
            ordinary(0)?;
            // SAFETY: as above.
            assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_OTHER);
            assert!(fifo(0, 1000).is_err(), "no such priority");
            Ok(())
        })
        .join()
        .map_err(|_| io::Error::other("the test thread panicked"))?
    }
}
