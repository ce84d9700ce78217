//! Memory the engine sends from: regions that payload references name.
//!
//! Region 0 is the engine's own: built-in services send from it. Later
//! issues add one region per attached process (shared memory).

use softoe_stack::PayloadRef;

/// A set of byte regions, addressed by [`PayloadRef`].
#[derive(Debug, Default)]
pub struct Memory {
    regions: Vec<Box<[u8]>>,
}

impl Memory {
    /// Empty.
    pub fn new() -> Memory {
        Memory::default()
    }

    /// Adds a region; returns its number.
    pub fn add(&mut self, bytes: Box<[u8]>) -> u32 {
        self.regions.push(bytes);
        (self.regions.len() - 1) as u32
    }

    /// A region's bytes.
    pub fn region(&self, i: u32) -> Option<&[u8]> {
        self.regions.get(i as usize).map(|r| &r[..])
    }

    /// A region's bytes, mutably (for engine-side buffers such as echo rings;
    /// the caller must not overwrite bytes the stack still references).
    pub fn region_mut(&mut self, i: u32) -> Option<&mut [u8]> {
        self.regions.get_mut(i as usize).map(|r| &mut r[..])
    }

    /// The bytes `r` names, if it lies inside its region.
    pub fn get(&self, r: &PayloadRef) -> Option<&[u8]> {
        let region = self.regions.get(r.region as usize)?;
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
}
