//! Socket addresses between C and Rust: `sockaddr_in` and IPv4-mapped
//! `sockaddr_in6` read from and written to the caller's buffers as the
//! kernel reads and writes them.

use std::net::{Ipv4Addr, SocketAddrV4};

use libc::{c_int, sockaddr, socklen_t};

/// The IPv4 address at `addr`: an `AF_INET` address, or an `AF_INET6`
/// one that is IPv4-mapped (`::ffff:a.b.c.d`) or unspecified (`::`, "any").
/// `EAFNOSUPPORT` for anything else (a real IPv6 address: the kernel's).
///
/// # Safety
/// `addr` is null or valid for `len` bytes.
pub(crate) unsafe fn read_addr(
    addr: *const sockaddr,
    len: socklen_t,
) -> Result<SocketAddrV4, c_int> {
    if addr.is_null() || (len as usize) < size_of::<libc::sockaddr_in>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: at least sizeof(sockaddr_in) bytes; the family leads both
    // layouts.
    let family = i32::from(unsafe { std::ptr::read_unaligned(addr.cast::<libc::sa_family_t>()) });
    match family {
        libc::AF_INET => {
            // SAFETY: the caller says `addr` holds `len` ≥ sizeof(sockaddr_in)
            // bytes; read unaligned as C callers may pass any buffer.
            let sin: libc::sockaddr_in = unsafe { std::ptr::read_unaligned(addr.cast()) };
            Ok(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            ))
        }
        libc::AF_INET6 => {
            if (len as usize) < size_of::<libc::sockaddr_in6>() {
                return Err(libc::EINVAL);
            }
            // SAFETY: `len` ≥ sizeof(sockaddr_in6) bytes; read unaligned.
            let sin6: libc::sockaddr_in6 = unsafe { std::ptr::read_unaligned(addr.cast()) };
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            let port = u16::from_be(sin6.sin6_port);
            if ip.is_unspecified() {
                Ok(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))
            } else if let Some(v4) = ip.to_ipv4_mapped() {
                Ok(SocketAddrV4::new(v4, port))
            } else {
                Err(libc::EAFNOSUPPORT)
            }
        }
        _ => Err(libc::EAFNOSUPPORT),
    }
}

/// The family of the address at `addr`, if `len` covers it.
///
/// # Safety
/// `addr` is null or valid for `len` bytes.
pub(crate) unsafe fn family(addr: *const sockaddr, len: socklen_t) -> Option<c_int> {
    if addr.is_null() || (len as usize) < size_of::<libc::sa_family_t>() {
        return None;
    }
    // SAFETY: at least the family's bytes; read unaligned.
    Some(i32::from(unsafe {
        std::ptr::read_unaligned(addr.cast::<libc::sa_family_t>())
    }))
}

/// Writes `a` to `addr`/`len` as the kernel does (truncated to `*len`,
/// `*len` set to the full size): `sockaddr_in`, or for an `AF_INET6`
/// socket `sockaddr_in6` with the address IPv4-mapped (`::` for "any").
///
/// # Safety
/// `addr` is null or valid for `*len` bytes; `len` is null or valid.
pub(crate) unsafe fn write_addr(
    a: SocketAddrV4,
    v6: bool,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) {
    if addr.is_null() || len.is_null() {
        return;
    }
    let mut buf = [0u8; size_of::<libc::sockaddr_in6>()];
    let full = if v6 {
        // SAFETY: sockaddr_in6 is plain data.
        let mut sin6: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
        sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        sin6.sin6_port = a.port().to_be();
        sin6.sin6_addr.s6_addr = if a.ip().is_unspecified() {
            [0; 16]
        } else {
            a.ip().to_ipv6_mapped().octets()
        };
        // SAFETY: `buf` is exactly sizeof(sockaddr_in6) bytes.
        unsafe { std::ptr::write_unaligned(buf.as_mut_ptr().cast(), sin6) };
        size_of::<libc::sockaddr_in6>()
    } else {
        // SAFETY: sockaddr_in is plain data.
        let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        sin.sin_family = libc::AF_INET as libc::sa_family_t;
        sin.sin_port = a.port().to_be();
        sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
        // SAFETY: `buf` has room for a sockaddr_in.
        unsafe { std::ptr::write_unaligned(buf.as_mut_ptr().cast(), sin) };
        size_of::<libc::sockaddr_in>()
    };
    // SAFETY: `len` is valid (caller).
    let room = unsafe { *len } as usize;
    let n = room.min(full);
    // SAFETY: `addr` has `room` ≥ `n` bytes; `buf` has `full` ≥ `n`.
    unsafe {
        std::ptr::copy_nonoverlapping(buf.as_ptr(), addr.cast::<u8>(), n);
        *len = full as socklen_t;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn sin6(ip: std::net::Ipv6Addr, port: u16) -> libc::sockaddr_in6 {
        // SAFETY: plain data.
        let mut a: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
        a.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        a.sin6_port = port.to_be();
        a.sin6_addr.s6_addr = ip.octets();
        a
    }

    fn read6(a: &libc::sockaddr_in6) -> Result<SocketAddrV4, c_int> {
        // SAFETY: a whole sockaddr_in6.
        unsafe {
            read_addr(
                (a as *const libc::sockaddr_in6).cast(),
                size_of::<libc::sockaddr_in6>() as socklen_t,
            )
        }
    }

    #[test]
    fn ipv6_sockets_speak_mapped_ipv4() {
        let v4 = Ipv4Addr::new(10, 7, 0, 2);
        assert_eq!(
            read6(&sin6(v4.to_ipv6_mapped(), 80)),
            Ok(SocketAddrV4::new(v4, 80))
        );
        assert_eq!(
            read6(&sin6(std::net::Ipv6Addr::UNSPECIFIED, 5201)),
            Ok(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 5201))
        );
        assert_eq!(
            read6(&sin6("2001:db8::1".parse().unwrap(), 80)),
            Err(libc::EAFNOSUPPORT)
        );
        // Too short for its family.
        let a = sin6(v4.to_ipv6_mapped(), 80);
        // SAFETY: reads at most the given 16 bytes of `a`.
        let short = unsafe { read_addr((&raw const a).cast(), 16) };
        assert_eq!(short, Err(libc::EINVAL));
        // Written back as the kernel would: mapped, full length reported,
        // truncated to the room given.
        let mut out = [0u8; 28];
        let mut len = 28 as socklen_t;
        // SAFETY: `out` has `len` bytes.
        unsafe {
            write_addr(
                SocketAddrV4::new(v4, 443),
                true,
                out.as_mut_ptr().cast(),
                &raw mut len,
            )
        };
        assert_eq!(len as usize, size_of::<libc::sockaddr_in6>());
        // SAFETY: `out` holds a whole sockaddr_in6.
        let back: libc::sockaddr_in6 = unsafe { std::ptr::read_unaligned(out.as_ptr().cast()) };
        assert_eq!(read6(&back), Ok(SocketAddrV4::new(v4, 443)));
        let mut small = [0xaau8; 8];
        let mut len = 8 as socklen_t;
        // SAFETY: `small` has `len` bytes.
        unsafe {
            write_addr(
                SocketAddrV4::new(v4, 443),
                false,
                small.as_mut_ptr().cast(),
                &raw mut len,
            )
        };
        assert_eq!(
            len as usize,
            size_of::<libc::sockaddr_in>(),
            "full size reported"
        );
        assert_eq!(
            &small[2..4],
            &443u16.to_be_bytes(),
            "truncated, not overrun"
        );
    }
}
