//! Errno numbers and `io::Error`, both ways, in one place.
//!
//! The engine answers with Linux's errno values ([`softoe_abi::errno`]);
//! this library hands them to programs as `io::Error`s carrying the same
//! number ([`errno_err`]), so `raw_os_error()` is what Linux would give.
//! Some errors it makes itself by kind instead (`WouldBlock`,
//! `Interrupted`, a closed session's `ConnectionAborted`); [`errno_of`]
//! reads any of them back as the errno a C caller expects, which is what
//! a POSIX shim over this library needs.

use std::io;

use softoe_abi::{Completion, errno};

/// The `io::Error` for errno `e` (a positive Linux errno).
pub(crate) fn errno_err(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

/// The `io::Error` for a negated errno in a status word (an attach or
/// bell answer); one that cannot be negated is `EIO`.
pub(crate) fn status_err(status: i32) -> io::Error {
    errno_err(status.checked_neg().unwrap_or(errno::EIO))
}

/// A completion's result, or its errno as an `io::Error`.
pub(crate) fn result(c: &Completion) -> io::Result<u64> {
    c.outcome().map_err(errno_err)
}

/// The errno a C caller should see for `e`: its own number when it carries
/// one (every error the engine reports does), else the one Linux gives for
/// its kind (`EIO` when none fits).
pub fn errno_of(e: &io::Error) -> i32 {
    if let Some(n) = e.raw_os_error() {
        return n;
    }
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => errno::EAGAIN,
        // A signal handler without SA_RESTART interrupted a blocking call.
        io::ErrorKind::Interrupted => errno::EINTR,
        io::ErrorKind::ConnectionAborted => errno::ECONNABORTED,
        io::ErrorKind::ConnectionReset => errno::ECONNRESET,
        io::ErrorKind::BrokenPipe => errno::EPIPE,
        io::ErrorKind::OutOfMemory => errno::ENOMEM,
        io::ErrorKind::InvalidInput => errno::EINVAL,
        io::ErrorKind::ResourceBusy => errno::EBUSY,
        _ => errno::EIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_trip_and_kinds_map() {
        for e in [errno::EAGAIN, errno::ECONNREFUSED, errno::EPIPE] {
            assert_eq!(errno_of(&errno_err(e)), e);
        }
        assert_eq!(errno_of(&io::ErrorKind::WouldBlock.into()), errno::EAGAIN);
        assert_eq!(errno_of(&io::ErrorKind::Interrupted.into()), errno::EINTR);
        assert_eq!(errno_of(&crate::client::closed()), errno::ECONNABORTED);
        assert_eq!(errno_of(&io::Error::other("?")), errno::EIO);
        assert_eq!(status_err(-111).raw_os_error(), Some(errno::ECONNREFUSED));
        assert_eq!(status_err(i32::MIN).raw_os_error(), Some(errno::EIO));
    }

    #[test]
    fn a_completion_reads_as_a_result() {
        let ok = Completion {
            result: 5,
            ..Completion::default()
        };
        assert_eq!(result(&ok).unwrap(), 5);
        let err = Completion {
            result: -i64::from(errno::ENOTCONN),
            ..Completion::default()
        };
        assert_eq!(
            result(&err).unwrap_err().raw_os_error(),
            Some(errno::ENOTCONN)
        );
    }
}
