//! Interfaces by name: the `struct ifreq` ioctls the ports that attach to
//! an existing interface share (AF_PACKET and AF_XDP): its index, MTU,
//! Ethernet address, receive queues and carrier.

use std::io;
use std::os::fd::OwnedFd;

use softoe_sys::ifreq::{self, IfName, IntRequest};

/// `e`, prefixed with what was being done.
pub(crate) fn context(what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// An interface name as `struct ifreq` holds it.
pub(crate) fn ifname(ifname: &str) -> io::Result<IfName> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {ifname:?} must be 1 to 15 bytes"),
        )
    };
    if ifname.is_empty() {
        return Err(bad());
    }
    if ifname.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "NUL in interface name",
        ));
    }
    IfName::new(ifname).map_err(|_| bad())
}

/// What the port learns of its interface when it opens.
#[derive(Debug)]
pub(crate) struct IfInfo {
    pub ifindex: u32,
    pub mtu: usize,
    pub mac: [u8; 6],
    /// Receive queues (`ETHTOOL_GCHANNELS`), where the driver tells.
    pub rx_queues: Option<u32>,
}

/// Looks interface `ifname` up through `sock`.
pub(crate) fn if_info(sock: &OwnedFd, ifname: &str) -> io::Result<IfInfo> {
    let name = self::ifname(ifname)?;
    let ifindex =
        ifreq::int(sock, &name, IntRequest::GetIndex, 0).map_err(|e| match e.raw_os_error() {
            Some(libc::ENODEV) => io::Error::new(
                io::ErrorKind::NotFound,
                format!("interface {ifname} not found in this network namespace"),
            ),
            _ => context(&format!("looking up interface {ifname}"), e),
        })?;
    let ifindex = ifindex.unsigned_abs();
    let mtu = ifreq::int(sock, &name, IntRequest::GetMtu, 0)
        .map_err(|e| context(&format!("reading the MTU of {ifname}"), e))?;
    let mtu = usize::try_from(mtu).unwrap_or(0);
    let (family, mac) = ifreq::hwaddr(sock, &name)
        .map_err(|e| context(&format!("reading the address of {ifname}"), e))?;
    if family != libc::ARPHRD_ETHER {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("{ifname} is not an Ethernet interface (ARPHRD {family})"),
        ));
    }
    // A veth counts its queues in `rx_count` and the smaller of its RX and
    // TX queues again in `combined_count`; a NIC counts combined channels.
    let rx_queues = ifreq::channels(sock, &name)
        .ok()
        .map(|ch| ch.rx_count.max(ch.combined_count).max(1));
    Ok(IfInfo {
        ifindex,
        mtu,
        mac,
        rx_queues,
    })
}

/// Whether `ifname` is up with carrier (`IFF_UP` and `IFF_RUNNING`).
pub(crate) fn link_up(sock: &OwnedFd, ifname: &str) -> io::Result<bool> {
    let flags = flags(sock, ifname)?;
    let want = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    Ok(flags & want == want)
}

/// A datagram socket to ask the kernel about interfaces with (in the
/// calling thread's network namespace).
pub(crate) fn inet_socket() -> io::Result<OwnedFd> {
    ifreq::socket()
}

/// The driver of interface `ifname` and its bus information
/// (`ETHTOOL_GDRVINFO`, what `ethtool -i` shows): `veth`, `bridge`, `tun`
/// (with bus `tun` or `tap`), a NIC's driver. `NotFound` when there is no
/// such interface; another error when the driver does not tell (loopback).
pub(crate) fn driver(sock: &OwnedFd, ifname: &str) -> io::Result<(String, String)> {
    ifreq::driver(sock, &self::ifname(ifname)?).map_err(interface_error)
}

/// The error of an interface ioctl that failed: `NotFound` for no such
/// interface (`ENODEV`), else the errno as it is.
fn interface_error(e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::ENODEV) {
        io::Error::new(io::ErrorKind::NotFound, e)
    } else {
        e
    }
}

/// Interface `ifname`'s flags (`SIOCGIFFLAGS`); `NotFound` when there is
/// no such interface.
pub(crate) fn flags(sock: &OwnedFd, ifname: &str) -> io::Result<libc::c_short> {
    ifreq::flags(sock, &self::ifname(ifname)?).map_err(interface_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_one_to_fifteen_bytes_without_nul() {
        assert!(ifname("veth0").is_ok());
        assert!(ifname("abcdefghijklmno").is_ok());
        for bad in ["", "abcdefghijklmnop"] {
            let e = ifname(bad).unwrap_err();
            assert!(e.to_string().contains("must be 1 to 15 bytes"), "{e}");
        }
        assert!(ifname("a\0b").unwrap_err().to_string().contains("NUL"));
    }

    #[test]
    fn loopback_is_up_and_not_ethernet() {
        let sock = inet_socket().unwrap();
        assert!(link_up(&sock, "lo").unwrap());
        let e = if_info(&sock, "lo").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
        let e = flags(&sock, "softoe-nonesuch").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        let e = if_info(&sock, "softoe-nonesuch").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
