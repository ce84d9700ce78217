//! The shim's own messages: its warnings, its log (`RUST_LOG`), a panic's
//! report. Every one goes through [`say`].
//!
//! A program's descriptor 2 may be a softoe socket: inetd-style servers
//! (vsftpd's children) put the client's connection on 0, 1 and 2. A
//! message written there through the shim's own `write` hook went to the
//! client as data and, worse, re-entered the shim from inside it: a
//! failed attach printed with the attachment's lock held, the hook took
//! the inherited connection into the session, which needed that lock, and
//! the process hung. So a message is written with libc's `write` itself
//! (never a hook), takes no lock of the shim's (whether descriptor 2 is
//! softoe's is one lock-free bit test) and can be said from anywhere, a
//! lock held or not:
//!
//! - with `SOFTOE_LOG_FILE=PATH` every message goes to that file (opened
//!   when the shim loads, appending, so a chroot or a sandbox later does
//!   not lose it; each line names its process), and none to descriptor 2;
//! - else to descriptor 2, unless that is a softoe socket: then the
//!   message is dropped (it would be bytes in the client's stream).

use std::io;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::sock::TABLE;

/// `SOFTOE_LOG_FILE`'s descriptor, or −1.
static LOG: AtomicI32 = AtomicI32::new(-1);

/// Opens `SOFTOE_LOG_FILE`, if set, and routes a panic's report here; at
/// load, before the program runs.
pub(crate) fn init() {
    if let Some(path) = std::env::var_os("SOFTOE_LOG_FILE")
        && let Ok(c) =
            std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))
    {
        // SAFETY: a NUL-terminated path; a plain open (not hooked).
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC,
                0o644,
            )
        };
        if fd >= 0 {
            LOG.store(fd, Ordering::Relaxed);
        }
    }
    // A panic in the shim (none is meant to happen) reports like any
    // other message, not through the program's descriptor 2 as it stands.
    // This is the shim's own copy of the standard library: the program's
    // hook, if it has one, is its own.
    std::panic::set_hook(Box::new(|info| say(&format!("softoe-preload: {info}"))));
}

/// Says `msg` (a line; the newline is added) where the module's rules say.
pub(crate) fn say(msg: &str) {
    let mut line = String::with_capacity(msg.len() + 24);
    if LOG.load(Ordering::Relaxed) >= 0 {
        line.push_str(&format!("[{}] ", crate::sock::pid()));
    }
    line.push_str(msg.trim_end_matches('\n'));
    line.push('\n');
    emit(line.as_bytes());
}

/// Writes `b` to the log file, or to descriptor 2 unless that is a softoe
/// socket.
fn emit(b: &[u8]) {
    let log = LOG.load(Ordering::Relaxed);
    let fd = if log >= 0 {
        log
    } else if TABLE.holds(2) {
        return;
    } else {
        2
    };
    let mut b = b;
    while !b.is_empty() {
        // SAFETY: libc's own `write` (not the shim's hook) of our buffer.
        let n = unsafe { crate::real::write(fd, b.as_ptr().cast(), b.len()) };
        if n <= 0 {
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        b = &b[(n as usize).min(b.len())..];
    }
}

/// The writer of the shim's log (`tracing-subscriber` formats each event
/// and writes it whole): every write is a message, said by [`emit`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Writer;

impl io::Write for Writer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if LOG.load(Ordering::Relaxed) >= 0 {
            let mut b = format!("[{}] ", crate::sock::pid()).into_bytes();
            b.extend_from_slice(buf);
            emit(&b);
        } else {
            emit(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
