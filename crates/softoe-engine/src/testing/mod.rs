//! Engines on softoe-testbed's topologies (feature `testbed`): what the
//! engine's and the shim's tests, and `softoe bench bond`, share.
//!
//! - [`Bed`] ([`bed`]): one engine on a TAP and Linux behind a bridge, for
//!   the engine's interop and host-interface tests and the shim's tests.
//! - [`BondHost`] ([`bonded`]): engines on a [`BondedBed`]'s bonded
//!   topologies, for the bonding interop tests and `softoe bench bond`.
//!
//! Their calls return errors that say what failed; the tests unwrap them.
//!
//! [`BondedBed`]: softoe_testbed::BondedBed

use std::io;
use std::sync::mpsc;
use std::time::Duration;

use softoe_testbed::NsThread;

pub mod bed;
pub mod bonded;

pub use bed::{Bed, BedOptions, ENGINE_IP, LINUX_IP, describe_current, hex, sha256, wait_for};
pub use bonded::{BondHost, BondHostSpec};

/// Whether a test that needs AF_XDP can run here: `Err` with the reason
/// (to print as the test skips) when not root or the kernel has no AF_XDP
/// sockets. Under CI (`SOFTOE_CI` set) a kernel without AF_XDP is a
/// failure, not a skip: this panics.
pub fn xdp_available() -> Result<(), String> {
    if !softoe_testbed::is_root() {
        return Err("needs root".into());
    }
    if let Err(e) = crate::xdp::supported() {
        let why = format!("no AF_XDP sockets on this kernel: {e}");
        #[allow(clippy::panic)]
        if std::env::var_os("SOFTOE_CI").is_some() {
            panic!("{why}");
        }
        return Err(why);
    }
    Ok(())
}

/// An error that says what failed.
fn other(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

/// Waits up to 10 s for what the engine `thread` sends on `rx` once it
/// runs; without it, fails with the thread's error (or that it hangs),
/// naming the engine as `who`.
fn wait_started<S, R>(
    rx: &mpsc::Receiver<S>,
    thread: NsThread<Result<R, String>>,
    who: &str,
) -> io::Result<(S, NsThread<Result<R, String>>)> {
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(s) => Ok((s, thread)),
        Err(_) => {
            // The thread ended (its error says why) or hangs.
            let why = if thread.is_finished() {
                match thread.join() {
                    Ok(Err(e)) => e,
                    Ok(Ok(_)) => "it stopped".into(),
                    Err(e) => e.to_string(),
                }
            } else {
                "it did not start in 10 s".into()
            };
            Err(io::Error::other(format!("engine {who}: {why}")))
        }
    }
}
