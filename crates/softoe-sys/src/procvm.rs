//! Another process's memory: `process_vm_readv` and `process_vm_writev`
//! (rustix has neither), the host interface's twin of a NIC's DMA to and
//! from host memory. The kernel checks the remote side (the caller must
//! be allowed to ptrace `pid`; an unmapped address is `EFAULT` or a short
//! count), so only the local buffers need a proof.
use std::io;

fn done(r: isize) -> io::Result<usize> {
    usize::try_from(r).map_err(|_| io::Error::last_os_error())
}

/// Copies `dst.len()` bytes from address `addr` in process `pid` into
/// `dst`; returns the bytes read.
pub fn read(pid: i32, addr: u64, dst: &mut [u8]) -> io::Result<usize> {
    let local = libc::iovec {
        iov_base: dst.as_mut_ptr().cast(),
        iov_len: dst.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: dst.len(),
    };
    // SAFETY: `local` names `dst`, valid for writes of its length for the
    // call; the remote iovec is only interpreted by the kernel in the other
    // process, which checks it; both iovec arrays are one entry long.
    done(unsafe { libc::process_vm_readv(pid, &raw const local, 1, &raw const remote, 1, 0) })
}

/// Writes `a` then `b` to address `addr` in process `pid`; returns the
/// bytes written (fewer when the buffer there ends in unmapped memory).
pub fn write(pid: i32, addr: u64, a: &[u8], b: &[u8]) -> io::Result<usize> {
    let total = a.len() + b.len();
    if total == 0 {
        return Ok(0);
    }
    let local = [a, b].map(|s| libc::iovec {
        iov_base: s.as_ptr().cast_mut().cast(),
        iov_len: s.len(),
    });
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: total,
    };
    // SAFETY: both local iovecs name live slices, only read by the kernel
    // (the `*mut` is the C type's, not a write; an empty one is skipped);
    // `local` has the 2 entries passed; the remote iovec is interpreted by
    // the kernel in the other process, which checks it.
    done(unsafe { libc::process_vm_writev(pid, local.as_ptr(), 2, &raw const remote, 1, 0) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_our_own_memory() -> io::Result<()> {
        let pid = std::process::id() as i32;
        let src = *b"hello, world";
        let mut dst = [0u8; 12];
        assert_eq!(read(pid, src.as_ptr() as u64, &mut dst)?, 12);
        assert_eq!(&dst, b"hello, world");
        let mut target = [0u8; 8];
        let n = write(pid, target.as_mut_ptr() as u64, b"abc", b"defgh")?;
        assert_eq!(n, 8);
        let target = std::hint::black_box(target);
        assert_eq!(&target, b"abcdefgh");
        assert_eq!(write(pid, 0, b"", b"")?, 0);
        Ok(())
    }

    #[test]
    fn an_unmapped_address_is_an_error() {
        let mut dst = [0u8; 4];
        assert!(read(std::process::id() as i32, 8, &mut dst).is_err());
    }
}
