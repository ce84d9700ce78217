//! Softoe sockets passed to another process over a Unix socket
//! (`SCM_RIGHTS`): vsftpd's privileged process hands each data connection
//! to its session process this way, haproxy's reload (`-x`) its listeners,
//! socket-activation helpers whatever they made.
//!
//! A softoe socket's number names an idle kernel socket, which is what the
//! kernel would pass. So before a message carrying softoe descriptors
//! goes out, each is prepared as for `fork` (`fork::prepare`): its numbers
//! now name one end of a socket pair the engine watches, bound to an
//! abstract name that says "a softoe socket" ([`softoe_abi::WATCH_NAME`]),
//! and that is what the other process receives. In the receiving process
//! the shim looks at the name of every descriptor a message brought; one
//! that is a softoe socket's joins the table as not yet taken, and its
//! first use claims it: the engine checks that this process holds the far
//! end of one of its watches (a byte it writes on its own end is there to
//! read) and grants it the socket, which it then takes into its own
//! session as a forked child does. No secret crosses the Unix socket: the
//! descriptor itself is the capability, as it is for a kernel socket.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use libc::{c_int, msghdr};
use tracing::debug;

use super::{Inherit, Kind, Sock, St, TABLE};

/// Every descriptor an `SCM_RIGHTS` message in `m`'s control data carries.
///
/// # Safety
/// `m` is a valid `msghdr` whose control buffer holds `msg_controllen`
/// bytes (a caller's, as the hooks receive it; or as `recvmsg` filled it).
unsafe fn passed_fds(m: &msghdr) -> Vec<c_int> {
    let mut out = Vec::new();
    if m.msg_control.is_null() || m.msg_controllen == 0 {
        return out;
    }
    // SAFETY: the CMSG_* walk stays inside the control buffer the caller
    // described (the macros check each header against `msg_controllen`).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(m);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let len = ((*c).cmsg_len as usize).saturating_sub(data as usize - c as usize);
                for i in 0..len / size_of::<c_int>() {
                    let mut fd: c_int = -1;
                    std::ptr::copy_nonoverlapping(
                        data.add(i * size_of::<c_int>()),
                        (&raw mut fd).cast::<u8>(),
                        size_of::<c_int>(),
                    );
                    out.push(fd);
                }
            }
            c = libc::CMSG_NXTHDR(m, c);
        }
    }
    out
}

/// Before `sendmsg` on a descriptor that is not a softoe socket: the softoe
/// sockets among the descriptors `m` passes are prepared for the other
/// process (each number of theirs becomes the watched descriptor).
///
/// # Safety
/// As [`passed_fds`].
pub(crate) unsafe fn before_send(m: &msghdr) {
    // SAFETY: the caller's promise.
    for fd in unsafe { passed_fds(m) } {
        if let Some(s) = TABLE.get(fd)
            && s.ours()
        {
            let fds = TABLE.fds_of(&s);
            super::fork::prepare(&s, &fds);
        }
    }
}

/// After `recvmsg` filled `m`: the descriptors it brought that are softoe
/// sockets' (by their name) join the table, to be claimed at first use.
///
/// # Safety
/// As [`passed_fds`], for the message `recvmsg` just filled.
pub(crate) unsafe fn after_recv(m: &msghdr) {
    // SAFETY: the caller's promise.
    for fd in unsafe { passed_fds(m) } {
        // SAFETY: `fd` was just received in `m` (the caller's promise):
        // open in this process, and borrowed only for one `getsockname`.
        let Some(flags) =
            softoe_host::watch_flags(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) })
        else {
            continue;
        };
        let listener = flags & 2 != 0;
        let st = St::Inherited(Inherit {
            listener,
            peer: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
        });
        TABLE.insert(fd, Arc::new(Sock::inherited(Kind::Tcp, flags & 1 != 0, st)));
        debug!(fd, listener, "a softoe socket received over a Unix socket");
    }
}
