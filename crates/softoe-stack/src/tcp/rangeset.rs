//! A bounded, sorted set of byte ranges.
//!
//! Used twice: by the receiver as the out-of-order assembler (ranges held
//! past `rcv_nxt`, as offsets from it) and by the sender as the SACK
//! scoreboard (ranges SACKed past `snd_una`). The number of ranges is fixed
//! when the set is made, so a flood of scattered segments cannot grow memory:
//! an insert that would need one range too many is refused and the caller
//! drops the segment.

use alloc::vec::Vec;

/// The set would need more ranges than it may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TooManyRanges;

/// Sorted, non-overlapping, non-adjacent half-open ranges `[start, end)`.
#[derive(Clone, Debug)]
pub(crate) struct RangeSet {
    ranges: Vec<(u32, u32)>,
    max: usize,
}

impl RangeSet {
    #[cfg(test)]
    pub(crate) fn new(max_ranges: usize) -> RangeSet {
        RangeSet::with_storage(max_ranges, Vec::new())
    }

    /// A new one, in `ranges`' allocation (a closed
    /// connection's), emptied and grown if it is short.
    pub(crate) fn with_storage(max_ranges: usize, mut ranges: Vec<(u32, u32)>) -> RangeSet {
        let max = max_ranges.max(1);
        ranges.clear();
        ranges.reserve_exact(max + 1);
        RangeSet { ranges, max }
    }

    /// Gives up the allocation, leaving the set empty.
    pub(crate) fn take_storage(&mut self) -> Vec<(u32, u32)> {
        core::mem::take(&mut self.ranges)
    }

    /// Bytes of storage it owns.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.ranges.capacity() * size_of::<(u32, u32)>()
    }

    pub(crate) fn len(&self) -> usize {
        self.ranges.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        self.ranges.clear();
    }

    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = (u32, u32)> + '_ {
        self.ranges.iter().copied()
    }

    /// Adds `[start, end)`, merging with what it touches.
    pub(crate) fn insert(&mut self, start: u32, end: u32) -> Result<(), TooManyRanges> {
        if start >= end {
            return Ok(());
        }
        // First range that ends at or after `start` (could merge).
        let first = self.ranges.partition_point(|&(_, e)| e < start);
        // First range that starts after `end` (cannot merge).
        let last = self.ranges.partition_point(|&(s, _)| s <= end);
        if first == last {
            // Touches nothing: a new range.
            if self.ranges.len() >= self.max {
                return Err(TooManyRanges);
            }
            self.ranges.insert(first, (start, end));
            return Ok(());
        }
        let (s0, _) = self.ranges.get(first).copied().unwrap_or((start, end));
        let (_, e1) = self.ranges.get(last - 1).copied().unwrap_or((start, end));
        let merged = (s0.min(start), e1.max(end));
        if let Some(r) = self.ranges.get_mut(first) {
            *r = merged;
        }
        self.ranges.drain(first + 1..last);
        Ok(())
    }

    /// Moves the origin forward by `by`: ranges below it are dropped or cut.
    pub(crate) fn advance(&mut self, by: u32) {
        if by == 0 {
            return;
        }
        self.ranges.retain_mut(|r| {
            if r.1 <= by {
                return false;
            }
            r.0 = r.0.saturating_sub(by);
            r.1 -= by;
            true
        });
    }

    /// Removes a range starting at offset 0 and returns its length.
    pub(crate) fn pop_front_if_starts_at_zero(&mut self) -> Option<u32> {
        match self.ranges.first() {
            Some(&(0, e)) => {
                self.ranges.remove(0);
                Some(e)
            }
            _ => None,
        }
    }

    /// Total bytes covered.
    pub(crate) fn covered_bytes(&self) -> u32 {
        self.ranges
            .iter()
            .map(|&(s, e)| e - s)
            .fold(0u32, u32::saturating_add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeSet;

    fn set(r: &[(u32, u32)]) -> RangeSet {
        let mut s = RangeSet::new(8);
        for &(a, b) in r {
            s.insert(a, b).unwrap();
        }
        s
    }

    #[test]
    fn merges_and_bounds() {
        let s = set(&[(10, 20), (30, 40), (20, 30)]);
        assert_eq!(s.iter().collect::<Vec<_>>(), [(10, 40)]);
        let mut s = RangeSet::new(2);
        s.insert(0, 1).unwrap();
        s.insert(5, 6).unwrap();
        assert_eq!(s.insert(10, 11), Err(TooManyRanges));
        assert_eq!(s.len(), 2, "unchanged");
        s.insert(1, 5).unwrap();
        assert_eq!(s.iter().collect::<Vec<_>>(), [(0, 6)]);
    }

    #[test]
    fn advance() {
        let mut s = set(&[(10, 20), (30, 40)]);
        s.advance(15);
        assert_eq!(s.iter().collect::<Vec<_>>(), [(0, 5), (15, 25)]);
        assert_eq!(s.pop_front_if_starts_at_zero(), Some(5));
        assert_eq!(s.iter().collect::<Vec<_>>(), [(15, 25)], "the rest stays");
    }

    proptest::proptest! {
        #[test]
        fn matches_a_model(ops in proptest::collection::vec((0u8..3, 0u32..64, 0u32..16), 1..60)) {
            let mut s = RangeSet::new(4);
            let mut model: BTreeSet<u32> = BTreeSet::new();
            for (op, a, b) in ops {
                match op {
                    0 | 1 => {
                        let before: Vec<_> = s.iter().collect();
                        match s.insert(a, a + b) {
                            Ok(()) => model.extend(a..a + b),
                            Err(TooManyRanges) => proptest::prop_assert_eq!(s.iter().collect::<Vec<_>>(), before),
                        }
                    }
                    _ => {
                        let by = b;
                        s.advance(by);
                        model = model.into_iter().filter(|&x| x >= by).map(|x| x - by).collect();
                    }
                }
                let covered: BTreeSet<u32> = s.iter().flat_map(|(a, b)| a..b).collect();
                proptest::prop_assert_eq!(&covered, &model);
                proptest::prop_assert!(s.len() <= 4);
                let v: Vec<_> = s.iter().collect();
                for w in v.windows(2) {
                    proptest::prop_assert!(w[0].1 < w[1].0, "sorted, non-adjacent");
                }
                proptest::prop_assert_eq!(s.covered_bytes() as usize, model.len());
            }
        }
    }
}
