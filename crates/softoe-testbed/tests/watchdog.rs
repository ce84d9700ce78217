//! The test watchdog turns a hang into a failure, and a disarmed one
//! stays quiet.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use softoe_testbed::Watchdog;

/// Run as a child process by `a_hang_aborts_the_process`.
#[test]
#[ignore = "run as a child process by a_hang_aborts_the_process"]
fn hung_forever() {
    let _w = Watchdog::arm(Duration::from_millis(300), "the hung test");
    std::thread::sleep(Duration::from_secs(120));
}

#[test]
fn a_hang_aborts_the_process() {
    let t0 = Instant::now();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "hung_forever", "--nocapture"])
        .env("PATH", "/nonexistent") // no gdb: keep it quick
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "stderr: {err}");
    assert!(
        err.contains("watchdog: the hung test still running"),
        "stderr: {err}"
    );
    assert!(t0.elapsed() < Duration::from_secs(60));
}

#[test]
fn a_disarmed_watchdog_stays_quiet() {
    drop(Watchdog::arm(Duration::from_millis(100), "a finished test"));
    // Had it fired, this whole test binary would have aborted.
    std::thread::sleep(Duration::from_millis(400));
}
