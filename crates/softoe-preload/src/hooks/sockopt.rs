//! `setsockopt` and `getsockopt` on softoe sockets: the option table
//! itself (which options the engine honours, which it records, which it
//! refuses) is `opts/`; here are the calls, and the IPv6 options an
//! `AF_INET6` socket keeps on its kernel socket.

use libc::{c_int, c_void, socklen_t};

use super::{fail, ret, to_kernel};
use crate::opts;
use crate::sock::St;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    dispatch!(fd, setsockopt(fd, level, name, val, len), |s| {
        let bytes: &[u8] = if val.is_null() || len == 0 {
            &[]
        } else {
            // SAFETY: the caller's option value of `len` bytes (see `hooks`).
            unsafe { std::slice::from_raw_parts(val.cast::<u8>(), len as usize) }
        };
        if level == libc::IPPROTO_IPV6 && s.v6 {
            // The kernel socket keeps it.
            let r = forward!(setsockopt(fd, level, name, val, len));
            if name == libc::IPV6_V6ONLY
                && bytes.get(..4).is_some_and(|b| b != [0; 4])
                && matches!(s.state(), St::Fresh { .. })
            {
                // IPv6 only: nothing for softoe to serve.
                to_kernel(fd);
            }
            return r;
        }
        if matches!(s.state(), St::Fresh { .. }) {
            // The kernel socket gets it too, in case the kernel ends up
            // serving.
            let _ = forward!(setsockopt(fd, level, name, val, len));
        }
        ret(opts::set(&s, level, name, bytes).map(|()| 0))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    dispatch!(fd, getsockopt(fd, level, name, val, len), |s| {
        if val.is_null() || len.is_null() {
            return fail(libc::EFAULT);
        }
        if level == libc::IPPROTO_IPV6 && s.v6 {
            // Set on the kernel socket (see `setsockopt`): read back there.
            return forward!(getsockopt(fd, level, name, val, len));
        }
        // SAFETY: `len` is the caller's, checked non-null above.
        let room = unsafe { *len } as usize;
        let v = match opts::get(&s, level, name, room) {
            Ok(v) => v,
            Err(e) => return fail(e),
        };
        // SAFETY: `len` is the caller's; `val` has `*len` bytes (see `hooks`).
        unsafe {
            let n = (*len as usize).min(v.len());
            std::ptr::copy_nonoverlapping(v.as_ptr(), val.cast::<u8>(), n);
            *len = n as socklen_t;
        }
        0
    })
}
