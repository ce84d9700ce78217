//! The TUN/TAP ioctls (`<linux/if_tun.h>`) on an open `/dev/net/tun`:
//! attaching it to a device, the virtio-net header's size, and the
//! offloads the reader accepts.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

use crate::ifreq::{IfName, IfReqInt};

const TUNSETIFF: libc::Ioctl = 0x4004_54ca;
const TUNSETOFFLOAD: libc::Ioctl = 0x4004_54d0;
const TUNSETVNETHDRSZ: libc::Ioctl = 0x4004_54d8;

/// `IFF_TAP`: Ethernet frames.
pub const IFF_TAP: libc::c_short = 0x0002;
/// `IFF_NO_PI`: no packet-information header.
pub const IFF_NO_PI: libc::c_short = 0x1000;
/// `IFF_VNET_HDR`: a virtio-net header on every frame.
pub const IFF_VNET_HDR: libc::c_short = 0x4000;
/// `TUN_F_CSUM`: the reader accepts partial checksums.
pub const TUN_F_CSUM: libc::c_uint = 0x01;
/// `TUN_F_TSO4`: the reader accepts IPv4 TCP super-segments.
pub const TUN_F_TSO4: libc::c_uint = 0x02;

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `TUNSETIFF`: attaches `tun` (an open `/dev/net/tun`) to device `name`
/// with `flags` (`IFF_*`), creating it if need be; the device's name
/// (the kernel's pick when `name` is empty).
pub fn set_iff(tun: impl AsFd, name: &IfName, flags: libc::c_short) -> io::Result<IfName> {
    let f = flags.to_ne_bytes();
    let mut r = IfReqInt::new(name, libc::c_int::from_ne_bytes([f[0], f[1], 0, 0]));
    // SAFETY: TUNSETIFF reads and writes a `struct ifreq` (the name, and
    // the short `ifr_flags` at the start of the union), which `IfReqInt` is
    // laid out as (16-byte name, 24-byte union, the flags its first two
    // bytes in memory); `r` is borrowed for the call.
    check(unsafe { libc::ioctl(tun.as_fd().as_raw_fd(), TUNSETIFF, &mut r as *mut IfReqInt) })?;
    Ok(IfName::from_raw(r.name))
}

/// `TUNSETVNETHDRSZ`: the virtio-net header's size.
pub fn set_vnet_hdr_size(tun: impl AsFd, size: libc::c_int) -> io::Result<()> {
    // SAFETY: TUNSETVNETHDRSZ reads one int through the pointer, which
    // points at `size` for the call.
    check(unsafe {
        libc::ioctl(
            tun.as_fd().as_raw_fd(),
            TUNSETVNETHDRSZ,
            &size as *const libc::c_int,
        )
    })
}

/// `TUNSETOFFLOAD`: the offloads (`TUN_F_*`) the reader accepts.
pub fn set_offload(tun: impl AsFd, flags: libc::c_uint) -> io::Result<()> {
    // SAFETY: TUNSETOFFLOAD takes its argument by value, no pointer.
    check(unsafe {
        libc::ioctl(
            tun.as_fd().as_raw_fd(),
            TUNSETOFFLOAD,
            libc::c_ulong::from(flags),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_a_tun_refuses() {
        let f = std::fs::File::open("/dev/null").unwrap();
        let name = IfName::new("softoe-t0").unwrap();
        assert!(set_iff(&f, &name, IFF_TAP | IFF_NO_PI).is_err());
        assert!(set_vnet_hdr_size(&f, 12).is_err());
        assert!(set_offload(&f, TUN_F_CSUM).is_err());
    }
}
