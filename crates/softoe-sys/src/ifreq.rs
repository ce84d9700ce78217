//! The interface ioctls (`struct ifreq`, `<linux/if.h>`) softoe makes on
//! a socket of the namespace the interface is in: its index, MTU,
//! Ethernet address and flags, the settings a TAP port changes (MTU,
//! transmit queue length, flags), and the two `ETHTOOL_*` queries
//! (`SIOCETHTOOL`) the engine asks: receive queues and driver. Every
//! request struct is private and laid out as the kernel's; what the
//! caller sees are names, integers and byte arrays.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use rustix::net::{AddressFamily, SocketFlags, SocketType};

/// An interface name as `ifr_name` holds it: at most 15 bytes, no NUL,
/// NUL-padded to 16.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IfName([libc::c_char; libc::IFNAMSIZ]);

impl IfName {
    /// `name`, which must be at most 15 bytes without a NUL (empty is
    /// allowed: `TUNSETIFF` then picks one).
    pub fn new(name: &str) -> io::Result<IfName> {
        if name.as_bytes().contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "NUL in interface name",
            ));
        }
        if name.len() >= libc::IFNAMSIZ {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("interface name {name:?} longer than 15 bytes"),
            ));
        }
        let mut out = [0 as libc::c_char; libc::IFNAMSIZ];
        for (d, s) in out.iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        Ok(IfName(out))
    }

    /// The name, up to its first NUL.
    pub fn to_string_lossy(&self) -> String {
        let bytes: Vec<u8> = self
            .0
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    pub(crate) fn raw(&self) -> [libc::c_char; libc::IFNAMSIZ] {
        self.0
    }

    pub(crate) fn from_raw(raw: [libc::c_char; libc::IFNAMSIZ]) -> IfName {
        IfName(raw)
    }
}

/// `struct ifreq` with the int member of its union (`ifr_ifindex`,
/// `ifr_mtu`, `ifr_qlen`; `ifr_flags` is its first two bytes).
#[repr(C)]
pub(crate) struct IfReqInt {
    pub(crate) name: [libc::c_char; libc::IFNAMSIZ],
    pub(crate) value: libc::c_int,
    _pad: [u8; 20],
}

impl IfReqInt {
    pub(crate) fn new(name: &IfName, value: libc::c_int) -> IfReqInt {
        IfReqInt {
            name: name.raw(),
            value,
            _pad: [0; 20],
        }
    }
}

/// `struct ifreq` with the sockaddr member of its union (`ifr_hwaddr`).
#[repr(C)]
struct IfReqAddr {
    name: [libc::c_char; libc::IFNAMSIZ],
    family: libc::sa_family_t,
    data: [u8; 14],
    _pad: [u8; 8],
}

/// `struct ifreq` with the pointer member of its union (`ifr_data`).
#[repr(C)]
struct IfReqPtr {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

/// A datagram socket to ask the kernel about interfaces with (in the
/// calling thread's network namespace).
pub fn socket() -> io::Result<OwnedFd> {
    Ok(rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

/// The result of an ioctl that returned `rc`.
fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The int-valued requests (`struct ifreq`'s int member).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntRequest {
    /// `SIOCGIFINDEX`: the index.
    GetIndex,
    /// `SIOCGIFMTU`: the MTU.
    GetMtu,
    /// `SIOCSIFMTU`: sets the MTU.
    SetMtu,
    /// `SIOCSIFTXQLEN`: sets the transmit queue length.
    SetTxQueueLen,
}

impl IntRequest {
    fn code(self) -> libc::Ioctl {
        match self {
            IntRequest::GetIndex => libc::SIOCGIFINDEX,
            IntRequest::GetMtu => libc::SIOCGIFMTU,
            IntRequest::SetMtu => libc::SIOCSIFMTU,
            IntRequest::SetTxQueueLen => libc::SIOCSIFTXQLEN,
        }
    }
}

/// Makes int request `req` about `name` with `value`, returning the int
/// the kernel leaves there (what a get request reads).
pub fn int(sock: impl AsFd, name: &IfName, req: IntRequest, value: i32) -> io::Result<i32> {
    let mut r = IfReqInt::new(name, value);
    // SAFETY: each `IntRequest` reads the name and reads or writes the int
    // member of a `struct ifreq`, laid out as `IfReqInt` (16-byte name,
    // then the 24-byte union whose first 4 bytes are the int); `r` is
    // borrowed for the call and any int the kernel writes is valid.
    check(unsafe {
        libc::ioctl(
            sock.as_fd().as_raw_fd(),
            req.code(),
            &mut r as *mut IfReqInt,
        )
    })?;
    Ok(r.value)
}

/// `name`'s flags (`SIOCGIFFLAGS`, `IFF_*`).
pub fn flags(sock: impl AsFd, name: &IfName) -> io::Result<libc::c_short> {
    let mut r = IfReqInt::new(name, 0);
    // SAFETY: SIOCGIFFLAGS reads the name and writes the short `ifr_flags`
    // at the start of the union of a `struct ifreq`, laid out as
    // `IfReqInt`; `r` is borrowed for the call.
    check(unsafe {
        libc::ioctl(
            sock.as_fd().as_raw_fd(),
            libc::SIOCGIFFLAGS,
            &mut r as *mut IfReqInt,
        )
    })?;
    // The flags are the first two bytes of `value` in memory, which
    // `to_ne_bytes` keeps in order.
    let b = r.value.to_ne_bytes();
    Ok(libc::c_short::from_ne_bytes([b[0], b[1]]))
}

/// Sets `name`'s flags (`SIOCSIFFLAGS`).
pub fn set_flags(sock: impl AsFd, name: &IfName, flags: libc::c_short) -> io::Result<()> {
    let f = flags.to_ne_bytes();
    let mut r = IfReqInt::new(name, libc::c_int::from_ne_bytes([f[0], f[1], 0, 0]));
    // SAFETY: SIOCSIFFLAGS reads the name and the short `ifr_flags` at the
    // start of the union of a `struct ifreq`, laid out as `IfReqInt` (the
    // flags its first two bytes in memory); `r` is borrowed for the call.
    check(unsafe {
        libc::ioctl(
            sock.as_fd().as_raw_fd(),
            libc::SIOCSIFFLAGS,
            &mut r as *mut IfReqInt,
        )
    })
}

/// `name`'s hardware address (`SIOCGIFHWADDR`): its `ARPHRD_*` type and
/// the first six bytes of the address.
pub fn hwaddr(sock: impl AsFd, name: &IfName) -> io::Result<(u16, [u8; 6])> {
    let mut r = IfReqAddr {
        name: name.raw(),
        family: 0,
        data: [0; 14],
        _pad: [0; 8],
    };
    // SAFETY: SIOCGIFHWADDR reads the name and fills the `struct sockaddr`
    // member (2-byte family, 14 bytes of data) of a `struct ifreq`, laid
    // out as `IfReqAddr`; `r` is borrowed for the call.
    check(unsafe {
        libc::ioctl(
            sock.as_fd().as_raw_fd(),
            libc::SIOCGIFHWADDR,
            &mut r as *mut IfReqAddr,
        )
    })?;
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&r.data[..6]);
    Ok((r.family, mac))
}

/// The commands `ethtool` runs that softoe asks. Each is a struct the
/// kernel fills whose first field is its command number.
///
/// # Safety
/// The type must be `#[repr(C)]`, laid out as the kernel's struct for
/// `CMD`, valid with any bytes the kernel writes, and the kernel must
/// write no more than `size_of::<Self>()` bytes for `CMD`.
unsafe trait EthtoolGet: Sized {
    const CMD: u32;
    fn with_cmd() -> Self;
}

/// `struct ethtool_channels`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Channels {
    /// `ETHTOOL_GCHANNELS`.
    pub cmd: u32,
    /// Most receive channels.
    pub max_rx: u32,
    /// Most transmit channels.
    pub max_tx: u32,
    /// Most other channels.
    pub max_other: u32,
    /// Most combined channels.
    pub max_combined: u32,
    /// Receive channels.
    pub rx_count: u32,
    /// Transmit channels.
    pub tx_count: u32,
    /// Other channels.
    pub other_count: u32,
    /// Combined channels.
    pub combined_count: u32,
}

// SAFETY: `Channels` is `struct ethtool_channels` (nine u32), any bytes
// valid, and ETHTOOL_GCHANNELS writes exactly that struct.
unsafe impl EthtoolGet for Channels {
    const CMD: u32 = 0x3c;
    fn with_cmd() -> Channels {
        Channels {
            cmd: Self::CMD,
            ..Channels::default()
        }
    }
}

/// `struct ethtool_drvinfo`.
#[repr(C)]
struct Drvinfo {
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

// SAFETY: `Drvinfo` is `struct ethtool_drvinfo` (integers and byte arrays,
// any bytes valid), and ETHTOOL_GDRVINFO writes exactly that struct.
unsafe impl EthtoolGet for Drvinfo {
    const CMD: u32 = 0x03;
    fn with_cmd() -> Drvinfo {
        Drvinfo {
            cmd: Self::CMD,
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
        }
    }
}

/// `SIOCETHTOOL` on `name` with `data` as the command's struct.
///
/// # Safety
/// `data` must be the struct the command in its first field reads and
/// writes (`#[repr(C)]`, valid with any bytes the kernel writes), no
/// smaller than what the kernel writes for it.
unsafe fn siocethtool<T>(sock: impl AsFd, name: &IfName, data: &mut T) -> io::Result<()> {
    let mut r = IfReqPtr {
        name: name.raw(),
        data: (data as *mut T).cast(),
        _pad: [0; 16],
    };
    // SAFETY: SIOCETHTOOL reads the name and the data pointer of a `struct
    // ifreq` laid out as `IfReqPtr`; the pointer names `data`, which the
    // caller vouches is the struct the command reads and writes; `r` and
    // `data` live for the call.
    check(unsafe {
        libc::ioctl(
            sock.as_fd().as_raw_fd(),
            libc::SIOCETHTOOL,
            &mut r as *mut IfReqPtr,
        )
    })
}

/// `SIOCETHTOOL` with command `T::CMD` on `name`.
fn ethtool<T: EthtoolGet>(sock: impl AsFd, name: &IfName) -> io::Result<T> {
    let mut out = T::with_cmd();
    // SAFETY: by `EthtoolGet`'s contract `out` is the struct `T::CMD`
    // fills, valid with any bytes and no smaller than what it writes.
    unsafe { siocethtool(sock, name, &mut out) }?;
    Ok(out)
}

/// `name`'s channels (`ETHTOOL_GCHANNELS`), where its driver tells.
pub fn channels(sock: impl AsFd, name: &IfName) -> io::Result<Channels> {
    ethtool::<Channels>(sock, name)
}

/// `name`'s driver and bus information (`ETHTOOL_GDRVINFO`, what `ethtool
/// -i` shows).
pub fn driver(sock: impl AsFd, name: &IfName) -> io::Result<(String, String)> {
    let info = ethtool::<Drvinfo>(sock, name)?;
    let text = |b: &[u8]| {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(b.get(..end).unwrap_or_default()).into_owned()
    };
    Ok((text(&info.driver), text(&info.bus_info)))
}

/// `struct ethtool_value`.
#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// The `ETHTOOL_*` commands whose argument is a `struct ethtool_value`:
/// the checksum, scatter-gather, TSO, GSO and GRO switches and their
/// reads (`ETHTOOL_GRXCSUM` 0x14 to `ETHTOOL_SSG` 0x19, `ETHTOOL_GTSO`,
/// `ETHTOOL_STSO`, `ETHTOOL_GGSO`, `ETHTOOL_SGSO`, `ETHTOOL_GGRO`,
/// `ETHTOOL_SGRO`).
const VALUE_COMMANDS: [u32; 12] = [
    0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1e, 0x1f, 0x23, 0x24, 0x2b, 0x2c,
];

/// One `SIOCETHTOOL` command with a `struct ethtool_value` on `name` (one
/// of the offload switches `ethtool -K` uses, or its read); the value the
/// kernel leaves. Any other command is refused (`InvalidInput`): the
/// kernel would read or write a larger struct.
pub fn ethtool_value(sock: impl AsFd, name: &IfName, cmd: u32, data: u32) -> io::Result<u32> {
    if !VALUE_COMMANDS.contains(&cmd) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("ethtool command {cmd:#x} does not take an ethtool_value"),
        ));
    }
    let mut value = EthtoolValue { cmd, data };
    // SAFETY: every command let through above reads and writes exactly one
    // `struct ethtool_value` (two u32, any bytes valid), which `value` is.
    unsafe { siocethtool(sock, name, &mut value) }?;
    Ok(value.data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_match_the_kernels_layout() {
        assert_eq!(size_of::<IfReqInt>(), 40);
        assert_eq!(size_of::<IfReqAddr>(), 40);
        assert_eq!(size_of::<IfReqPtr>(), 40);
        assert_eq!(size_of::<Channels>(), 36);
        assert_eq!(size_of::<Drvinfo>(), 196);
        assert_eq!(std::mem::offset_of!(Drvinfo, bus_info), 100);
    }

    #[test]
    fn a_name_is_fifteen_bytes_without_nul() {
        assert_eq!(IfName::new("veth0").unwrap().to_string_lossy(), "veth0");
        assert!(IfName::new("a\0b").is_err());
        assert!(IfName::new("abcdefghijklmno").is_ok());
        let e = IfName::new("abcdefghijklmnop").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(IfName::new("").unwrap().to_string_lossy(), "");
    }

    #[test]
    fn loopback_answers_the_queries() {
        let sock = socket().unwrap();
        let lo = IfName::new("lo").unwrap();
        let index = int(&sock, &lo, IntRequest::GetIndex, 0).unwrap();
        assert!(index > 0);
        assert!(int(&sock, &lo, IntRequest::GetMtu, 0).unwrap() > 0);
        let (family, _) = hwaddr(&sock, &lo).unwrap();
        assert_eq!(family, libc::ARPHRD_LOOPBACK);
        let f = flags(&sock, &lo).unwrap();
        assert_ne!(f & libc::IFF_LOOPBACK as libc::c_short, 0);
        let none = IfName::new("softoe-nonesuch").unwrap();
        let e = flags(&sock, &none).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV));
        assert!(driver(&sock, &none).is_err());
        let e = ethtool_value(&sock, &lo, 0x03, 0).unwrap_err();
        assert_eq!(
            e.kind(),
            io::ErrorKind::InvalidInput,
            "GDRVINFO is no value command"
        );
        assert!(ethtool_value(&sock, &none, 0x2b, 0).is_err());
    }
}
