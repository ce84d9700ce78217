//! Memory the engine sends from: regions that payload references name.
//!
//! Engine buffers are owned regions (built-in services send from them);
//! each attached process adds its shared data area, so the stack sends
//! straight from the memory the program wrote.

#![allow(unsafe_code)]

use softoe_stack::PayloadRef;

#[derive(Debug)]
enum Backing {
    Owned(Box<[u8]>),
    /// A process's shared data area, mapped by its session.
    Shared {
        ptr: *mut u8,
        len: usize,
    },
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Owned(b) => b,
            // SAFETY: `add_shared`'s caller guarantees the mapping is valid
            // for `len` bytes until `remove`. The program may write these
            // bytes concurrently: they are only ever handed to system calls
            // (`writev`) or copied, never interpreted, so a torn read costs
            // the program its own data and nothing else.
            Backing::Shared { ptr, len } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
        }
    }
}

/// A set of byte regions, addressed by [`PayloadRef`].
#[derive(Debug, Default)]
pub struct Memory {
    regions: Vec<Option<Backing>>,
    free: Vec<u32>,
}

// SAFETY: the only non-Send part is the pointer of a shared mapping, which
// is process-wide memory valid until `remove` (see `add_shared`); the engine
// owns its `Memory` on one thread at a time.
unsafe impl Send for Memory {}

impl Memory {
    /// Empty.
    pub fn new() -> Memory {
        Memory::default()
    }

    fn insert(&mut self, b: Backing) -> u32 {
        if let Some(i) = self.free.pop() {
            self.regions[i as usize] = Some(b);
            return i;
        }
        self.regions.push(Some(b));
        (self.regions.len() - 1) as u32
    }

    /// Adds a region; returns its number.
    pub fn add(&mut self, bytes: Box<[u8]>) -> u32 {
        self.insert(Backing::Owned(bytes))
    }

    /// Adds `len` bytes of shared memory at `ptr` (a process's data area).
    ///
    /// # Safety
    /// `ptr` must stay valid for reads and writes of `len` bytes until
    /// [`remove`](Self::remove) is called with the returned number.
    pub unsafe fn add_shared(&mut self, ptr: *mut u8, len: usize) -> u32 {
        self.insert(Backing::Shared { ptr, len })
    }

    /// Forgets a region (the stack must hold no reference into it); its
    /// number may be reused.
    pub fn remove(&mut self, i: u32) {
        if let Some(slot) = self.regions.get_mut(i as usize)
            && slot.take().is_some()
        {
            self.free.push(i);
        }
    }

    /// A region's bytes.
    pub fn region(&self, i: u32) -> Option<&[u8]> {
        self.regions.get(i as usize)?.as_ref().map(Backing::bytes)
    }

    /// An owned region's bytes, mutably (for engine-side buffers such as
    /// echo rings; the caller must not overwrite bytes the stack still
    /// references). Shared regions are written only by their session.
    pub fn region_mut(&mut self, i: u32) -> Option<&mut [u8]> {
        match self.regions.get_mut(i as usize)?.as_mut()? {
            Backing::Owned(b) => Some(&mut b[..]),
            Backing::Shared { .. } => None,
        }
    }

    /// The bytes `r` names, if it lies inside its region.
    pub fn get(&self, r: &PayloadRef) -> Option<&[u8]> {
        let region = self.region(r.region)?;
        let start = usize::try_from(r.offset).ok()?;
        region.get(start..start.checked_add(r.len())?)
    }

    /// Whether `r` lies inside its region (checked before the stack takes it).
    pub fn contains(&self, r: &PayloadRef) -> bool {
        self.get(r).is_some()
    }
}

/// A deterministic pseudo-random pattern for built-in services: any
/// misplaced byte shows.
pub fn pattern(len: usize, seed: u64) -> Box<[u8]> {
    let mut x = seed ^ 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_checked() {
        let mut m = Memory::new();
        let r = m.add(vec![1u8; 100].into_boxed_slice());
        assert_eq!(
            m.get(&PayloadRef::new(r, 90, 10)).map(<[u8]>::len),
            Some(10)
        );
        assert!(m.get(&PayloadRef::new(r, 95, 10)).is_none());
        assert!(m.get(&PayloadRef::new(r, u64::MAX, 1)).is_none());
        assert!(m.get(&PayloadRef::new(9, 0, 1)).is_none());
    }

    #[test]
    fn removed_regions_are_gone_and_reused() {
        let mut m = Memory::new();
        let a = m.add(vec![1u8; 10].into_boxed_slice());
        let mut shared = vec![2u8; 10];
        // SAFETY: `shared` outlives its registration (removed below).
        let b = unsafe { m.add_shared(shared.as_mut_ptr(), shared.len()) };
        assert_eq!(m.region(b), Some(&[2u8; 10][..]));
        assert!(
            m.region_mut(b).is_none(),
            "shared regions are read-only here"
        );
        m.remove(b);
        assert!(m.region(b).is_none());
        m.remove(b);
        let c = m.add(vec![3u8; 1].into_boxed_slice());
        assert_eq!(c, b, "numbers are reused");
        assert_eq!(m.region(a).map(<[u8]>::len), Some(10));
    }
}
