//! The send queue: payload references waiting to be sent or acknowledged.
//!
//! The queue holds [`PayloadRef`]s, never bytes. Its first byte is the first
//! unacknowledged data byte (`snd_una`, once the SYN is acknowledged). Segments
//! are cut from it by offset; acknowledgements pop from the front. Capacity is
//! fixed when the socket is made (a byte budget and a chunk budget), so
//! queueing never allocates.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use crate::payload::PayloadRef;

/// A fixed-capacity FIFO of payload references with byte accounting.
#[derive(Debug)]
pub(crate) struct SendQueue {
    chunks: VecDeque<PayloadRef>,
    max_chunks: usize,
    max_bytes: usize,
    /// Bytes of the front chunk already acknowledged (and so gone).
    front_skip: u32,
    /// Bytes queued (acknowledged ones excluded).
    len: usize,
    /// Total bytes ever popped as acknowledged.
    acked_total: u64,
    /// Cursor cache for `gather`: the chunk index holding byte `cursor_off`,
    /// and that chunk's first byte's offset.
    cursor_idx: usize,
    cursor_off: usize,
}

impl SendQueue {
    #[cfg(test)]
    pub(crate) fn new(max_bytes: usize, max_chunks: usize) -> SendQueue {
        SendQueue::with_storage(max_bytes, max_chunks, VecDeque::new())
    }

    /// A new one, in `chunks`' allocation (a closed
    /// connection's), emptied and grown to the chunk budget if it is short.
    pub(crate) fn with_storage(
        max_bytes: usize,
        max_chunks: usize,
        mut chunks: VecDeque<PayloadRef>,
    ) -> SendQueue {
        let max_chunks = max_chunks.max(1);
        chunks.clear();
        chunks.reserve_exact(max_chunks);
        SendQueue {
            chunks,
            max_chunks,
            max_bytes,
            front_skip: 0,
            len: 0,
            acked_total: 0,
            cursor_idx: 0,
            cursor_off: 0,
        }
    }

    /// Gives up the chunk list's allocation, leaving the queue empty.
    pub(crate) fn take_storage(&mut self) -> VecDeque<PayloadRef> {
        self.len = 0;
        self.front_skip = 0;
        self.cursor_idx = 0;
        self.cursor_off = 0;
        core::mem::take(&mut self.chunks)
    }

    /// Bytes of storage its chunk list owns.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.chunks.capacity() * size_of::<PayloadRef>()
    }

    /// Bytes queued (sent-but-unacknowledged plus unsent).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Bytes that could still be queued.
    pub(crate) fn space(&self) -> usize {
        if self.chunks.len() >= self.max_chunks {
            0
        } else {
            self.max_bytes.saturating_sub(self.len)
        }
    }

    /// Total bytes acknowledged over the connection's life.
    pub(crate) fn acked_total(&self) -> u64 {
        self.acked_total
    }

    /// Queues as much of `r` as fits; returns the bytes taken (a prefix of `r`).
    pub(crate) fn push(&mut self, r: PayloadRef) -> usize {
        if r.is_empty() {
            return 0;
        }
        let take = r.len().min(self.space());
        if take == 0 {
            return 0;
        }
        // `take` fits in u32 because it is at most r.len.
        self.chunks.push_back(r.slice(0, take as u32));
        self.len += take;
        take
    }

    /// Removes `n` acknowledged bytes from the front.
    pub(crate) fn ack(&mut self, n: usize) {
        let mut n = n.min(self.len);
        self.len -= n;
        self.acked_total += n as u64;
        while n > 0 {
            let Some(front) = self.chunks.front() else {
                break;
            };
            let left = (front.len - self.front_skip) as usize;
            if n >= left {
                n -= left;
                self.chunks.pop_front();
                self.front_skip = 0;
                // Keep the cursor pointing at the same bytes.
                if self.cursor_idx > 0 {
                    self.cursor_idx -= 1;
                    self.cursor_off = self.cursor_off.saturating_sub(left);
                } else {
                    self.cursor_off = 0;
                }
            } else {
                self.front_skip += n as u32;
                self.cursor_off = self.cursor_off.saturating_sub(n);
                n = 0;
            }
        }
        if self.chunks.is_empty() {
            self.cursor_idx = 0;
            self.cursor_off = 0;
        }
    }

    /// Drops everything (abort).
    pub(crate) fn clear(&mut self) {
        self.chunks.clear();
        self.front_skip = 0;
        self.len = 0;
        self.cursor_idx = 0;
        self.cursor_off = 0;
    }

    /// Appends to `out` references to the bytes `[offset, offset + len)` of the
    /// queue, using at most `max_refs` references in `out` in all. Returns the
    /// bytes gathered (less than `len` when the queue ends or `max_refs` runs out).
    pub(crate) fn gather(
        &mut self,
        offset: usize,
        len: usize,
        out: &mut Vec<PayloadRef>,
        max_refs: usize,
    ) -> usize {
        if offset >= self.len || len == 0 {
            return 0;
        }
        // Chunk offsets below are relative to the first unacknowledged byte;
        // chunk 0 starts `front_skip` bytes into its reference.
        let (mut idx, mut chunk_start) = if self.cursor_off <= offset {
            (self.cursor_idx, self.cursor_off)
        } else {
            (0, 0)
        };
        // Find the chunk containing `offset`.
        loop {
            let Some(c) = self.chunks.get(idx) else {
                return 0;
            };
            let clen = self.chunk_len(idx, c);
            if offset < chunk_start + clen {
                break;
            }
            chunk_start += clen;
            idx += 1;
        }
        self.cursor_idx = idx;
        self.cursor_off = chunk_start;
        let mut gathered = 0;
        let mut pos = offset;
        while gathered < len && out.len() < max_refs {
            let Some(c) = self.chunks.get(idx) else { break };
            let clen = self.chunk_len(idx, c);
            let skip = if idx == 0 { self.front_skip } else { 0 };
            let within = pos - chunk_start;
            let take = (clen - within).min(len - gathered);
            // All values are bounded by the chunk's u32 length.
            out.push(c.slice(skip + within as u32, take as u32));
            gathered += take;
            pos += take;
            if within + take == clen {
                chunk_start += clen;
                idx += 1;
            }
        }
        gathered
    }

    fn chunk_len(&self, idx: usize, c: &PayloadRef) -> usize {
        if idx == 0 {
            (c.len - self.front_skip) as usize
        } else {
            c.len()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of(refs: &[PayloadRef]) -> Vec<u64> {
        refs.iter()
            .flat_map(|r| (r.offset..r.offset + u64::from(r.len)).collect::<Vec<_>>())
            .collect()
    }

    #[test]
    fn push_gather_ack() {
        let mut q = SendQueue::new(100, 4);
        assert_eq!(q.push(PayloadRef::new(0, 0, 10)), 10);
        assert_eq!(q.push(PayloadRef::new(0, 10, 10)), 10);
        assert_eq!(q.push(PayloadRef::new(0, 20, 100)), 80, "byte budget");
        assert_eq!(q.push(PayloadRef::new(0, 500, 1)), 0);
        let mut out = Vec::new();
        assert_eq!(q.gather(5, 10, &mut out, 8), 10);
        assert_eq!(bytes_of(&out), (5..15).collect::<Vec<_>>());
        q.ack(12);
        assert_eq!(q.len(), 88);
        out.clear();
        assert_eq!(q.gather(0, 200, &mut out, 8), 88);
        assert_eq!(bytes_of(&out), (12..100).collect::<Vec<_>>());
        out.clear();
        assert_eq!(q.gather(0, 200, &mut out, 1), 8, "ref budget");
        q.ack(1000);
        assert_eq!(q.len(), 0);
        assert_eq!(q.acked_total(), 100);
        assert_eq!(q.space(), 100);
    }

    proptest::proptest! {
        #[test]
        fn matches_a_model(ops in proptest::collection::vec((0u8..3, 0usize..50, 0usize..50), 1..200)) {
            let mut q = SendQueue::new(300, 16);
            let mut model: VecDeque<u64> = VecDeque::new();
            let mut next = 0u64;
            for (op, a, b) in ops {
                match op {
                    0 => {
                        let took = q.push(PayloadRef::new(1, next, a as u32));
                        for i in 0..took as u64 { model.push_back(next + i); }
                        next += a as u64;
                    }
                    1 => {
                        q.ack(a);
                        for _ in 0..a.min(model.len()) { model.pop_front(); }
                    }
                    _ => {
                        let mut out = Vec::new();
                        let got = q.gather(a, b, &mut out, 64);
                        let want: Vec<u64> = model.iter().skip(a).take(b).copied().collect();
                        proptest::prop_assert_eq!(got, want.len());
                        proptest::prop_assert_eq!(bytes_of(&out), want);
                    }
                }
                proptest::prop_assert_eq!(q.len(), model.len());
            }
        }
    }
}
