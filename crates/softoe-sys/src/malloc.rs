//! glibc's allocation policy (`mallopt`; no system call, so no rustix):
//! the CLI fixes its mmap threshold.

/// Fixes glibc's mmap threshold at `bytes`: a block that large or larger
/// comes straight from `mmap` (zero pages until touched, returned to the
/// system when freed), whatever was freed before — glibc otherwise raises
/// the threshold to the largest block freed. `false`: glibc refused.
pub fn fixed_mmap_threshold(bytes: i32) -> bool {
    // SAFETY: mallopt takes no pointers and only changes glibc's policy
    // for later allocations; glibc serialises it with its arenas' locks.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, bytes) == 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threshold_is_taken() {
        assert!(fixed_mmap_threshold(256 * 1024));
        assert!(fixed_mmap_threshold(128 * 1024));
        assert!(fixed_mmap_threshold(256 * 1024));
    }
}
