//! Shared memory: a sealed memfd and the [`Mapping`] that owns its `mmap`,
//! unmapped on drop (the one place the host interface's region is mapped).
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};

/// A shared read-write mapping of a memfd, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is process-wide memory; whoever holds the `Mapping`
// decides who touches it (all access goes through atomics or raw copies).
unsafe impl Send for Mapping {}

// SAFETY: a shared `&Mapping` offers only `ptr()`, `len()` and
// `is_empty()`, which read two fields that never change after `shared`
// returns; nothing reachable through `&Mapping` dereferences the memory,
// so threads holding references cannot race through it (what they do
// with the raw pointer is their own `unsafe`, proved where it is done).
unsafe impl Sync for Mapping {}

impl Mapping {
    /// A zeroed memfd of `len` bytes, sealed so nobody can shrink or grow it
    /// (a program shrinking it would make the engine fault), mapped shared.
    pub fn memfd(name: &str, len: usize) -> io::Result<(OwnedFd, Mapping)> {
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
        let size = u64::try_from(len).map_err(|_| io::ErrorKind::InvalidInput)?;
        rustix::fs::ftruncate(&fd, size)?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
        let map = Mapping::shared(&fd, len)?;
        Ok((fd, map))
    }

    /// Maps the first `len` bytes of `fd` shared, read-write.
    ///
    /// The caller's descriptor must be at least `len` bytes long and unable
    /// to shrink (a sealed memfd): touching a page past its end faults.
    /// Mapping itself is sound whatever `fd` is; the kernel checks access.
    pub fn shared(fd: &impl AsFd, len: usize) -> io::Result<Mapping> {
        // SAFETY: a null hint lets the kernel choose fresh addresses, so the
        // call replaces no existing mapping; the result is owned by the
        // returned `Mapping` and unmapped exactly once, on drop.
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )
        }?;
        Ok(Mapping { ptr: p.cast(), len })
    }

    /// The first byte.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `shared` mapped, once; the owner
        // guarantees nothing references it any more (the session removes
        // its region from `Memory` first).
        let _ = unsafe { rustix::mm::munmap(self.ptr.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_mappings_of_one_memfd_share_bytes() -> io::Result<()> {
        let (fd, a) = Mapping::memfd("softoe-sys-test", 4096)?;
        let b = Mapping::shared(&fd, 4096)?;
        assert_eq!(a.len(), 4096);
        // SAFETY: both mappings are 4096 bytes long and alive; offset 100 is
        // inside them.
        unsafe {
            a.ptr().add(100).write_volatile(0x5a);
            assert_eq!(b.ptr().add(100).read_volatile(), 0x5a);
        }
        Ok(())
    }

    #[test]
    fn a_sealed_memfd_cannot_shrink() -> io::Result<()> {
        let (fd, _map) = Mapping::memfd("softoe-sys-test", 4096)?;
        assert!(rustix::fs::ftruncate(&fd, 0).is_err());
        Ok(())
    }
}
