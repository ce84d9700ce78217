//! The one error of this crate: the bytes are not a valid packet.

use core::fmt;

/// The bytes do not form a valid packet of the expected kind (too short,
/// impossible length or flags, bad checksum). Deliberately opaque: the stack
/// counts and drops such packets; it never needs to know more.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Error;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("malformed packet")
    }
}

impl core::error::Error for Error {}

/// `core::result::Result` with this crate's [`Error`].
pub type Result<T> = core::result::Result<T, Error>;
