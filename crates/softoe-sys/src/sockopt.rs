//! Int-valued socket options rustix has no function for (`SOL_PACKET`'s
//! `PACKET_*`, `SO_RCVBUFFORCE`, `XDP_MAX_TX_SKB_BUDGET`).

use std::io;
use std::os::fd::{AsFd, AsRawFd};

// What `set_int`'s soundness leans on: an int cannot hold a pointer.
const _: () = assert!(size_of::<*const u8>() > size_of::<libc::c_int>());

/// `setsockopt(fd, level, opt, &value, 4)`.
pub fn set_int(fd: impl AsFd, level: i32, opt: i32, value: i32) -> io::Result<()> {
    let value: libc::c_int = value;
    // SAFETY: `value` is a live, initialised int borrowed for the call and
    // the length passed is its size, all setsockopt reads; setsockopt
    // writes no user memory, and four bytes are too few to hold a pointer
    // the kernel would follow (an option that takes a struct with one
    // checks for its full length and fails with EINVAL).
    let rc = unsafe {
        libc::setsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            opt,
            (&raw const value).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::{AddressFamily, SocketType};

    #[test]
    fn an_option_is_set_and_a_bad_one_refused() {
        let s = rustix::net::socket(AddressFamily::INET, SocketType::DGRAM, None).unwrap();
        set_int(&s, libc::SOL_SOCKET, libc::SO_RCVBUF, 65536).unwrap();
        assert!(rustix::net::sockopt::socket_recv_buffer_size(&s).unwrap() >= 65536);
        let e = set_int(&s, libc::SOL_SOCKET, -1, 1).unwrap_err();
        assert!(e.raw_os_error().is_some());
    }
}
