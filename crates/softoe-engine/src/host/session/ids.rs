//! Which socket ids of a session are taken, so that the lowest free one is
//! found without walking the socket table.

/// A two-level bitmap of taken ids: a bit per id, and a bit per word of
/// those, set while the word is full. The lowest free id is the first zero
/// bit of the first word whose summary bit is clear: finding it reads at
/// most one summary word per 4,096 ids (16 for 65,536) and one word of
/// ids, whatever the pattern of ids taken and freed. (The table used to
/// be searched from a hint, slot by slot: after a low id was freed and
/// taken again, the next search walked every open socket above it.)
#[derive(Debug)]
pub(super) struct Ids {
    words: Vec<u64>,
    full: Vec<u64>,
    /// Words of either level read by the last `lowest_free` (tests).
    #[cfg(test)]
    read: std::cell::Cell<usize>,
}

impl Ids {
    /// `n` ids, all free.
    pub(super) fn new(n: usize) -> Ids {
        let nw = n.div_ceil(64);
        let mut ids = Ids {
            words: vec![0; nw],
            full: vec![0; nw.div_ceil(64)],
            #[cfg(test)]
            read: std::cell::Cell::new(0),
        };
        // Ids past `n` in the last word are never free.
        for id in n..nw * 64 {
            ids.set(id as u32);
        }
        // Nor are summary bits past the last word.
        if let Some(last) = ids.full.last_mut()
            && !nw.is_multiple_of(64)
        {
            *last |= !0u64 << (nw % 64);
        }
        ids
    }

    /// The lowest free id.
    pub(super) fn lowest_free(&self) -> Option<u32> {
        #[cfg(test)]
        self.read.set(0);
        for (s, &f) in self.full.iter().enumerate() {
            #[cfg(test)]
            self.read.set(self.read.get() + 1);
            if f == !0 {
                continue;
            }
            let w = s * 64 + f.trailing_ones() as usize;
            let word = *self.words.get(w)?;
            #[cfg(test)]
            self.read.set(self.read.get() + 1);
            return u32::try_from(w * 64 + word.trailing_ones() as usize).ok();
        }
        None
    }

    /// Id `id` is taken.
    pub(super) fn set(&mut self, id: u32) {
        let (w, b) = (id as usize / 64, id % 64);
        if let Some(word) = self.words.get_mut(w) {
            *word |= 1 << b;
            if *word == !0
                && let Some(f) = self.full.get_mut(w / 64)
            {
                *f |= 1 << (w % 64);
            }
        }
    }

    /// Id `id` is free again.
    pub(super) fn clear(&mut self, id: u32) {
        let (w, b) = (id as usize / 64, id % 64);
        if let Some(word) = self.words.get_mut(w) {
            *word &= !(1 << b);
            if let Some(f) = self.full.get_mut(w / 64) {
                *f &= !(1 << (w % 64));
            }
        }
    }

    /// Words read by the last `lowest_free`.
    #[cfg(test)]
    pub(super) fn read(&self) -> usize {
        self.read.get()
    }
}

#[cfg(test)]
mod tests {
    use super::Ids;

    #[test]
    fn lowest_free_in_any_pattern() {
        for n in [1usize, 63, 64, 65, 4095, 4096, 4097, 10_064] {
            let mut ids = Ids::new(n);
            for i in 0..n as u32 {
                assert_eq!(ids.lowest_free(), Some(i), "n {n}");
                ids.set(i);
            }
            assert_eq!(ids.lowest_free(), None, "n {n}: all taken");
            for i in (0..n as u32).rev().step_by(7) {
                ids.clear(i);
                assert_eq!(ids.lowest_free(), Some(i), "n {n}");
            }
        }
    }

    /// The search reads a bounded number of words: 65,536 ids, all taken
    /// but one near the end, then a hole punched low and filled again
    /// (what a server with thousands of connections sees as they come and
    /// go) — the search that slot-walked from a hint read every slot in
    /// between.
    #[test]
    fn the_search_does_not_grow_with_the_ids_taken() {
        let n = 65_536usize;
        let mut ids = Ids::new(n);
        for i in 0..n as u32 {
            ids.set(i);
        }
        ids.clear(60_000);
        ids.clear(5);
        assert_eq!(ids.lowest_free(), Some(5));
        ids.set(5);
        assert_eq!(ids.lowest_free(), Some(60_000));
        assert!(ids.read() <= 16 + 1, "{} words read", ids.read());
    }
}
