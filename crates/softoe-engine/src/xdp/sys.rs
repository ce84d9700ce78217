//! The kernel's AF_XDP interface (`<linux/if_xdp.h>`) and the few
//! socket and interface calls the port makes, each returning an error that
//! names the step that failed.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

// Kept here rather than relying on the libc crate's version having them.
pub(crate) const AF_XDP: libc::c_int = 44;
pub(crate) const SOL_XDP: libc::c_int = 283;

// Socket options (`SOL_XDP`).
pub(crate) const XDP_MMAP_OFFSETS: libc::c_int = 1;
pub(crate) const XDP_RX_RING: libc::c_int = 2;
pub(crate) const XDP_TX_RING: libc::c_int = 3;
pub(crate) const XDP_UMEM_REG: libc::c_int = 4;
pub(crate) const XDP_UMEM_FILL_RING: libc::c_int = 5;
pub(crate) const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
pub(crate) const XDP_STATISTICS: libc::c_int = 7;
/// Linux 6.17: how many frames one `sendto` moves in copy mode (32
/// before, and on older kernels).
pub(crate) const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;

// `bind` flags.
pub(crate) const XDP_COPY: u16 = 1 << 1;
pub(crate) const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;

/// In a ring's flags word: the kernel waits for a system call.
pub(crate) const XDP_RING_NEED_WAKEUP: u32 = 1 << 0;

// mmap offsets of the four rings.
pub(crate) const XDP_PGOFF_RX_RING: libc::off_t = 0;
pub(crate) const XDP_PGOFF_TX_RING: libc::off_t = 0x8000_0000;
pub(crate) const XDP_UMEM_PGOFF_FILL_RING: libc::off_t = 0x1_0000_0000;
pub(crate) const XDP_UMEM_PGOFF_COMPLETION_RING: libc::off_t = 0x1_8000_0000;

/// Bytes the kernel keeps in front of every received frame in a UMEM
/// chunk in copy mode (`XDP_PACKET_HEADROOM`): a received descriptor's
/// address is its chunk's plus this.
pub(crate) const XDP_PACKET_HEADROOM: usize = 256;

/// `struct sockaddr_xdp`.
#[repr(C)]
pub(crate) struct SockaddrXdp {
    pub family: u16,
    pub flags: u16,
    pub ifindex: u32,
    pub queue_id: u32,
    pub shared_umem_fd: u32,
}

/// `struct xdp_umem_reg` (with `flags` and `tx_metadata_len`; the same 32
/// bytes as the version before `tx_metadata_len`, which kernels since 5.4
/// take).
#[repr(C)]
pub(crate) struct UmemReg {
    pub addr: u64,
    pub len: u64,
    pub chunk_size: u32,
    pub headroom: u32,
    pub flags: u32,
    pub tx_metadata_len: u32,
}

/// `struct xdp_ring_offset`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RingOffset {
    pub producer: u64,
    pub consumer: u64,
    pub desc: u64,
    pub flags: u64,
}

/// `struct xdp_mmap_offsets`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct MmapOffsets {
    pub rx: RingOffset,
    pub tx: RingOffset,
    pub fr: RingOffset,
    pub cr: RingOffset,
}

/// `struct xdp_desc`: a frame on the RX or TX ring.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpDesc {
    /// Address in the UMEM (an offset from its start).
    pub addr: u64,
    /// Length of the frame.
    pub len: u32,
    /// Flags (none used).
    pub options: u32,
}

/// `struct xdp_statistics` (kernels before 5.9 fill only the first three).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct XdpStatistics {
    /// Frames dropped for lack of a UMEM frame (the fill ring empty), or
    /// too long for one.
    pub rx_dropped: u64,
    /// Invalid descriptors the kernel found on the fill ring.
    pub rx_invalid_descs: u64,
    /// Invalid descriptors the kernel found on the TX ring.
    pub tx_invalid_descs: u64,
    /// Frames dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was empty when a frame came (those frames are
    /// also in `rx_dropped`).
    pub rx_fill_ring_empty_descs: u64,
    /// Times the TX ring was empty when the kernel looked.
    pub tx_ring_empty_descs: u64,
}

pub(crate) use crate::netdev::{context, if_info, link_up, os_error, setsockopt};

/// Takes ownership of a descriptor a system call returned (`rc ≥ 0`).
pub(crate) fn owned_fd(rc: libc::c_long, what: &str) -> io::Result<OwnedFd> {
    if rc < 0 {
        return Err(os_error(what));
    }
    let fd = libc::c_int::try_from(rc)
        .map_err(|_| io::Error::other(format!("{what}: descriptor {rc} out of range")))?;
    // SAFETY: `fd` is a descriptor the kernel just returned to this
    // process; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads socket option `opt` into `*val`; returns the length the kernel
/// wrote (it may be less than `size_of::<T>()` on older kernels).
pub(crate) fn getsockopt<T: Copy>(
    fd: &OwnedFd,
    level: libc::c_int,
    opt: libc::c_int,
    val: &mut T,
) -> io::Result<usize> {
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `val` is valid for writes of `len` bytes and `len` for a
    // read and write, both live for the call; callers pass plain-old-data
    // `#[repr(C)]` structs of integers, valid with any bytes the kernel
    // writes (and zero-initialised beyond them).
    let rc =
        unsafe { libc::getsockopt(fd.as_raw_fd(), level, opt, (val as *mut T).cast(), &mut len) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(len as usize)
}

/// A datagram socket for interface ioctls in the calling thread's
/// namespace (an AF_XDP socket answers none of them).
pub(crate) fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket takes no pointers.
    let rc = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    owned_fd(rc.into(), "opening a socket for interface ioctls")
}

/// An anonymous or file mapping, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mmap {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is process-wide memory owned by this value; moving
// the owner to another thread moves nothing the kernel ties to a thread.
unsafe impl Send for Mmap {}

impl Mmap {
    /// `len` bytes of zeroed, private, anonymous memory (page aligned).
    pub(crate) fn anonymous(len: usize) -> io::Result<Mmap> {
        // SAFETY: a fresh anonymous mapping at an address the kernel picks
        // touches no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mmap { ptr: p.cast(), len })
    }

    /// `len` bytes of socket `fd` at `offset` (one of an AF_XDP socket's
    /// rings), shared with the kernel.
    pub(crate) fn socket(fd: &OwnedFd, len: usize, offset: libc::off_t) -> io::Result<Mmap> {
        // SAFETY: a new shared mapping of the socket at an address the
        // kernel picks touches no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mmap { ptr: p.cast(), len })
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are a mapping this value made and owns; every
        // pointer into it is held by owners that borrow or own this value,
        // so none is used after this.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}
