//! A deadline for a whole test: a hang becomes a failure with a message
//! and thread stacks, in minutes, instead of a CI job that runs until its
//! own limit and says nothing.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::time::Duration;

/// Ends the process if it is still armed after its limit. Dropping it
/// disarms it.
///
/// When it fires it prints what was running, the stacks of every thread
/// (if `gdb` is installed), deletes this process's namespaces (a killed
/// process's destructors do not run) and aborts. Tests share a process, so
/// the whole test binary fails: that is the point — a hang must not pass
/// for slowness.
#[derive(Debug)]
pub struct Watchdog {
    _disarm: Sender<()>,
}

/// The limit for one test, `$SOFTOE_TEST_DEADLINE_SECS` or 300 s: long
/// enough for the slowest test on a loaded 2-core machine, short against
/// CI's hour and a half.
pub fn test_deadline() -> Duration {
    let secs = std::env::var("SOFTOE_TEST_DEADLINE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    Duration::from_secs(secs)
}

impl Watchdog {
    /// Arms a watchdog for `what` that fires after `limit`.
    pub fn arm(limit: Duration, what: impl Into<String>) -> Watchdog {
        let what = what.into();
        let (tx, rx) = mpsc::channel::<()>();
        let spawned = std::thread::Builder::new()
            .name("softoe-watchdog".into())
            .spawn(move || {
                if let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                    fire(&what, limit);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no watchdog thread: this test has no deadline");
        }
        Watchdog { _disarm: tx }
    }
}

fn fire(what: &str, limit: Duration) -> ! {
    let pid = std::process::id();
    eprintln!(
        "\nwatchdog: {what} still running after {} s — a hang, not slowness; \
         thread stacks follow, then this process aborts",
        limit.as_secs()
    );
    let _ = std::process::Command::new("gdb")
        .args([
            "-p",
            &pid.to_string(),
            "-batch",
            "-ex",
            "thread apply all bt 16",
        ])
        .stdin(std::process::Stdio::null())
        .status();
    crate::reap(|p| p == pid);
    std::process::abort()
}
