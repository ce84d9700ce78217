//! Interfaces by name: the `struct ifreq` ioctls the ports that attach to
//! an existing interface share (AF_PACKET and AF_XDP): its index, MTU,
//! Ethernet address, receive queues and carrier.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::mem::{MaybeUninit, size_of};
use std::os::fd::{AsRawFd, OwnedFd};

/// `struct ifreq` with the int member of its union (`ifr_ifindex`,
/// `ifr_mtu`, `ifr_flags` in its first two bytes).
#[repr(C)]
pub(crate) struct IfReqInt {
    pub name: [libc::c_char; libc::IFNAMSIZ],
    pub value: libc::c_int,
    pub _pad: [u8; 20],
}

/// `struct ifreq` with the sockaddr member of its union (`ifr_hwaddr`).
#[repr(C)]
pub(crate) struct IfReqAddr {
    name: [libc::c_char; libc::IFNAMSIZ],
    addr: libc::sockaddr,
    _pad: [u8; 8],
}

/// `struct ifreq` with the pointer member of its union (`ifr_data`).
#[repr(C)]
struct IfReqPtr {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

/// `struct ethtool_channels`.
#[repr(C)]
#[derive(Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}
const ETHTOOL_GCHANNELS: u32 = 0x3c;

/// The error of the last system call, prefixed with what was being done.
pub(crate) fn os_error(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    context(what, e)
}

/// `e`, prefixed with what was being done.
pub(crate) fn context(what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// An interface name as `struct ifreq` holds it.
pub(crate) fn ifname_bytes(ifname: &str) -> io::Result<[libc::c_char; libc::IFNAMSIZ]> {
    let cname = CString::new(ifname)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in interface name"))?;
    let bytes = cname.as_bytes_with_nul();
    if bytes.len() > libc::IFNAMSIZ || bytes.len() < 2 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {ifname:?} must be 1 to 15 bytes"),
        ));
    }
    let mut name = [0 as libc::c_char; libc::IFNAMSIZ];
    for (d, s) in name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    Ok(name)
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
    let name = ifname_bytes(ifname)?;
    let mut req = IfReqInt {
        name,
        value: 0,
        _pad: [0; 20],
    };
    // SAFETY: SIOCGIFINDEX reads the name of and writes the int member of a
    // `struct ifreq`, laid out as `IfReqInt` (16-byte name, 24-byte union);
    // `req` lives for the call.
    let rc = unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCGIFINDEX,
            &mut req as *mut IfReqInt,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ENODEV) => io::Error::new(
                io::ErrorKind::NotFound,
                format!("interface {ifname} not found in this network namespace"),
            ),
            _ => context(&format!("looking up interface {ifname}"), e),
        });
    }
    let ifindex = req.value.unsigned_abs();
    // SAFETY: SIOCGIFMTU fills the int member of the same layout.
    let rc = unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCGIFMTU,
            &mut req as *mut IfReqInt,
        )
    };
    if rc < 0 {
        return Err(os_error(&format!("reading the MTU of {ifname}")));
    }
    let mtu = usize::try_from(req.value).unwrap_or(0);

    let mut hw = IfReqAddr {
        name,
        // SAFETY: `sockaddr` is plain old data; all zeroes is a valid value.
        addr: unsafe { MaybeUninit::<libc::sockaddr>::zeroed().assume_init() },
        _pad: [0; 8],
    };
    // SAFETY: SIOCGIFHWADDR fills the sockaddr member of a `struct ifreq`,
    // laid out as `IfReqAddr`; `hw` lives for the call.
    let rc = unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCGIFHWADDR,
            &mut hw as *mut IfReqAddr,
        )
    };
    if rc < 0 {
        return Err(os_error(&format!("reading the address of {ifname}")));
    }
    if hw.addr.sa_family != libc::ARPHRD_ETHER {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "{ifname} is not an Ethernet interface (ARPHRD {})",
                hw.addr.sa_family
            ),
        ));
    }
    let mut mac = [0u8; 6];
    for (d, s) in mac.iter_mut().zip(hw.addr.sa_data) {
        *d = s as u8;
    }

    let mut ch = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..EthtoolChannels::default()
    };
    let mut preq = IfReqPtr {
        name,
        data: (&raw mut ch).cast(),
        _pad: [0; 16],
    };
    // SAFETY: SIOCETHTOOL reads the name and the data pointer of a `struct
    // ifreq` laid out as `IfReqPtr`; the pointer names `ch`, a `struct
    // ethtool_channels` with its command set, which the kernel fills; both
    // live for the call.
    let rc = unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCETHTOOL,
            &mut preq as *mut IfReqPtr,
        )
    };
    // A veth counts its queues in `rx_count` and the smaller of its RX and
    // TX queues again in `combined_count`; a NIC counts combined channels.
    let rx_queues = (rc == 0).then(|| ch.rx_count.max(ch.combined_count).max(1));
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

/// Sets socket option `opt` to `*val`.
pub(crate) fn setsockopt<T>(
    fd: &OwnedFd,
    level: libc::c_int,
    opt: libc::c_int,
    val: &T,
) -> io::Result<()> {
    // SAFETY: `val` points at a live, initialised `T` of `size_of::<T>()`
    // bytes for the call (callers pass integers or the padding-free
    // `#[repr(C)]` structs of the ports); setsockopt only reads that many bytes.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (val as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A datagram socket to ask the kernel about interfaces with (in the
/// calling thread's network namespace).
pub(crate) fn inet_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket takes no pointers; a negative result is an error.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor we own and close by dropping.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// `struct ethtool_drvinfo`.
#[repr(C)]
struct EthtoolDrvinfo {
    cmd: u32,
    driver: [u8; 32],
    version: [u8; 32],
    fw_version: [u8; 32],
    bus_info: [u8; 32],
    erom_version: [u8; 32],
    reserved2: [u8; 12],
    n_priv_flags: u32,
    n_stats: u32,
    testinfo_len: u32,
    eedump_len: u32,
    regdump_len: u32,
}
const ETHTOOL_GDRVINFO: u32 = 0x03;

/// The driver of interface `ifname` and its bus information
/// (`ETHTOOL_GDRVINFO`, what `ethtool -i` shows): `veth`, `bridge`, `tun`
/// (with bus `tun` or `tap`), a NIC's driver. `NotFound` when there is no
/// such interface; another error when the driver does not tell (loopback).
pub(crate) fn driver(sock: &OwnedFd, ifname: &str) -> io::Result<(String, String)> {
    let name = ifname_bytes(ifname)?;
    let mut info = EthtoolDrvinfo {
        cmd: ETHTOOL_GDRVINFO,
        driver: [0; 32],
        version: [0; 32],
        fw_version: [0; 32],
        bus_info: [0; 32],
        erom_version: [0; 32],
        reserved2: [0; 12],
        n_priv_flags: 0,
        n_stats: 0,
        testinfo_len: 0,
        eedump_len: 0,
        regdump_len: 0,
    };
    let mut preq = IfReqPtr {
        name,
        data: (&raw mut info).cast(),
        _pad: [0; 16],
    };
    // SAFETY: SIOCETHTOOL reads the name and the data pointer of a `struct
    // ifreq` laid out as `IfReqPtr`; the pointer names `info`, a `struct
    // ethtool_drvinfo` with its command set, which the kernel fills; both
    // live for the call.
    let rc = unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCETHTOOL,
            &mut preq as *mut IfReqPtr,
        )
    };
    if rc < 0 {
        return Err(interface_error());
    }
    let text = |b: &[u8]| {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(b.get(..end).unwrap_or_default()).into_owned()
    };
    Ok((text(&info.driver), text(&info.bus_info)))
}

/// The error of an interface ioctl that failed: `NotFound` for no such
/// interface (`ENODEV`), else the errno as it is.
fn interface_error() -> io::Error {
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ENODEV) {
        io::Error::new(io::ErrorKind::NotFound, e)
    } else {
        e
    }
}

/// Interface `ifname`'s flags (`SIOCGIFFLAGS`); `NotFound` when there is
/// no such interface.
pub(crate) fn flags(sock: &OwnedFd, ifname: &str) -> io::Result<libc::c_short> {
    let mut req = IfReqInt {
        name: ifname_bytes(ifname)?,
        value: 0,
        _pad: [0; 20],
    };
    // SAFETY: SIOCGIFFLAGS reads the name of and writes the short
    // `ifr_flags` at the start of the union of a `struct ifreq`, laid out as
    // `IfReqInt`; `req` lives for the call. The flags are the first two
    // bytes of `value` in memory, which `to_ne_bytes` keeps in order.
    let rc = unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCGIFFLAGS,
            &mut req as *mut IfReqInt,
        )
    };
    if rc < 0 {
        return Err(interface_error());
    }
    let b = req.value.to_ne_bytes();
    Ok(libc::c_short::from_ne_bytes([b[0], b[1]]))
}
