//! The receive buffer: a fixed ring that also holds out-of-order data.
//!
//! Bytes from the read position are readable (`len()`); past them is free
//! space (`window()`), where the TCP receiver may write out-of-order data
//! at an offset ([`RingBuffer::write_unallocated`]) and later make it readable
//! when the hole before it fills ([`RingBuffer::enqueue_unallocated`]). So
//! reassembly needs no second buffer and no copy.

use alloc::boxed::Box;
use alloc::vec;

/// A fixed-capacity byte ring.
pub(crate) struct RingBuffer {
    buf: Box<[u8]>,
    read: usize,
    len: usize,
}

impl core::fmt::Debug for RingBuffer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RingBuffer")
            .field("capacity", &self.capacity())
            .field("read", &self.read)
            .field("len", &self.len)
            .finish()
    }
}

impl RingBuffer {
    pub(crate) fn new(capacity: usize) -> RingBuffer {
        RingBuffer {
            buf: vec![0u8; capacity].into_boxed_slice(),
            read: 0,
            len: 0,
        }
    }

    /// A ring over `buf`, empty whatever `buf` holds (its old bytes are
    /// never read: only what is written after is readable).
    pub(crate) fn with_storage(buf: Box<[u8]>) -> RingBuffer {
        RingBuffer {
            buf,
            read: 0,
            len: 0,
        }
    }

    /// Gives up the storage, leaving a ring of capacity 0 (which owns no
    /// allocation).
    pub(crate) fn take_storage(&mut self) -> Box<[u8]> {
        self.read = 0;
        self.len = 0;
        core::mem::take(&mut self.buf)
    }

    pub(crate) fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Readable bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[cfg(test)]
    pub(crate) fn is_full(&self) -> bool {
        self.len == self.capacity()
    }

    /// Free space after the readable bytes.
    pub(crate) fn window(&self) -> usize {
        self.capacity() - self.len
    }

    /// Physical index of logical position `pos` (from the read position).
    fn at(&self, pos: usize) -> usize {
        let cap = self.capacity();
        if cap == 0 {
            return 0;
        }
        let i = self.read + pos;
        if i >= cap { i - cap } else { i }
    }

    /// Copies `data` to logical position `pos` (wrapping); `data` must fit
    /// within the capacity from `pos`.
    fn copy_in(&mut self, pos: usize, data: &[u8]) {
        let cap = self.capacity();
        if data.is_empty() || cap == 0 {
            return;
        }
        let start = self.at(pos);
        let first = data.len().min(cap - start);
        let (a, b) = data.split_at(first);
        if let Some(d) = self.buf.get_mut(start..start + first) {
            d.copy_from_slice(a);
        }
        if let Some(d) = self.buf.get_mut(..b.len()) {
            d.copy_from_slice(b);
        }
    }

    /// Appends readable bytes; returns how many fit.
    pub(crate) fn enqueue_slice(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.window());
        self.copy_in(self.len, data.get(..n).unwrap_or(&[]));
        self.len += n;
        n
    }

    /// Writes `data` at `offset` bytes past the readable end, without making
    /// it readable. Returns how many bytes fit.
    pub(crate) fn write_unallocated(&mut self, offset: usize, data: &[u8]) -> usize {
        let free = self.window();
        if offset >= free {
            return 0;
        }
        let n = data.len().min(free - offset);
        self.copy_in(self.len + offset, data.get(..n).unwrap_or(&[]));
        n
    }

    /// Makes `count` bytes written past the end readable (clamped to the space).
    pub(crate) fn enqueue_unallocated(&mut self, count: usize) -> usize {
        let n = count.min(self.window());
        self.len += n;
        n
    }

    /// The readable bytes, as at most two slices in order.
    pub(crate) fn peek(&self) -> (&[u8], &[u8]) {
        let cap = self.capacity();
        if self.len == 0 {
            return (&[], &[]);
        }
        let first = self.len.min(cap - self.read);
        let a = self.buf.get(self.read..self.read + first).unwrap_or(&[]);
        let b = self.buf.get(..self.len - first).unwrap_or(&[]);
        (a, b)
    }

    /// Copies readable bytes from `offset` into `out` without consuming them.
    pub(crate) fn peek_at(&self, offset: usize, out: &mut [u8]) -> usize {
        if offset >= self.len {
            return 0;
        }
        let n = out.len().min(self.len - offset);
        let cap = self.capacity();
        let start = self.at(offset);
        let first = n.min(cap - start);
        if let (Some(d), Some(s)) = (out.get_mut(..first), self.buf.get(start..start + first)) {
            d.copy_from_slice(s);
        }
        if let (Some(d), Some(s)) = (out.get_mut(first..n), self.buf.get(..n - first)) {
            d.copy_from_slice(s);
        }
        n
    }

    /// Drops up to `count` readable bytes.
    pub(crate) fn consume(&mut self, count: usize) -> usize {
        let n = count.min(self.len);
        self.read = self.at(n);
        // (The read position never jumps back to 0 when empty: out-of-order
        // data may sit past the readable end at positions relative to it.)
        self.len -= n;
        n
    }

    /// Moves the read position back to the start of the storage. Only
    /// for a ring with nothing readable and nothing written past its end
    /// (no out-of-order data): then no byte's position changes meaning.
    /// A connection that trades small messages then writes the same first
    /// bytes of its storage again and again, warm in the cache, instead of
    /// walking all of it — and touching each page for the first time
    /// (a page fault and a zeroed page every 4 KiB; a 64-byte
    /// request/response engine spent about a twentieth of its time there).
    pub(crate) fn rewind(&mut self) {
        debug_assert_eq!(self.len, 0);
        if self.len == 0 {
            self.read = 0;
        }
    }

    /// Moves readable bytes into `out`.
    pub(crate) fn dequeue_slice(&mut self, out: &mut [u8]) -> usize {
        let n = self.peek_at(0, out);
        self.consume(n)
    }

    /// Where reading starts in the storage (tests: whether it rewound).
    #[cfg(test)]
    pub(crate) fn read_position(&self) -> usize {
        self.read
    }

    #[cfg(test)]
    pub(crate) fn clear(&mut self) {
        self.read = 0;
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::VecDeque;
    use alloc::vec::Vec;

    #[test]
    fn wraps_and_reassembles() {
        let mut r = RingBuffer::new(8);
        assert_eq!(r.enqueue_slice(b"abcdef"), 6);
        let mut out = [0u8; 4];
        assert_eq!(r.dequeue_slice(&mut out), 4);
        assert_eq!(&out, b"abcd");
        // Out-of-order: write "ij" at offset 2 past "ef", then fill "gh".
        assert_eq!(r.write_unallocated(2, b"ij"), 2);
        assert_eq!(r.enqueue_slice(b"gh"), 2);
        assert_eq!(r.enqueue_unallocated(2), 2);
        let (a, b) = r.peek();
        let all: Vec<u8> = a.iter().chain(b).copied().collect();
        assert_eq!(all, b"efghij");
        assert_eq!(r.window(), 2);
        assert_eq!(r.write_unallocated(2, b"zz"), 0, "past the space");
        assert_eq!(r.write_unallocated(1, b"zz"), 1);
        let mut out = [0u8; 3];
        assert_eq!(r.peek_at(4, &mut out), 2);
        assert_eq!(&out[..2], b"ij");
        assert!(!r.is_full());
        r.clear();
        assert!(r.is_empty());
        assert_eq!(RingBuffer::new(0).enqueue_slice(b"x"), 0);
    }

    proptest::proptest! {
        #[test]
        fn matches_a_model(ops in proptest::collection::vec((0u8..4, 0usize..20), 1..200)) {
            let mut r = RingBuffer::new(17);
            let mut model: VecDeque<u8> = VecDeque::new();
            let mut next = 0u8;
            for (op, n) in ops {
                match op {
                    0 => {
                        let data: Vec<u8> = (0..n).map(|i| next.wrapping_add(i as u8)).collect();
                        let took = r.enqueue_slice(&data);
                        model.extend(&data[..took]);
                        next = next.wrapping_add(took as u8);
                    }
                    1 => {
                        let mut out = alloc::vec![0u8; n];
                        let got = r.dequeue_slice(&mut out);
                        let want: Vec<u8> = model.drain(..got.min(model.len())).collect();
                        proptest::prop_assert_eq!(&out[..got], &want[..]);
                    }
                    3 => {
                        // Emptied: starting the storage over changes nothing.
                        if r.is_empty() {
                            r.rewind();
                            proptest::prop_assert_eq!(r.read_position(), 0);
                        }
                    }
                    _ => {
                        // Out-of-order write then fill the gap: same as in order.
                        let data: Vec<u8> = (0..n).map(|i| next.wrapping_add(i as u8)).collect();
                        let split = n / 2;
                        let wrote = r.write_unallocated(split, &data[split..]);
                        let head = r.enqueue_slice(&data[..split]);
                        if head == split {
                            let more = r.enqueue_unallocated(wrote);
                            model.extend(&data[..split + more]);
                            next = next.wrapping_add((split + more) as u8);
                        } else {
                            model.extend(&data[..head]);
                            next = next.wrapping_add(head as u8);
                        }
                    }
                }
                proptest::prop_assert_eq!(r.len(), model.len());
                let (a, b) = r.peek();
                let all: Vec<u8> = a.iter().chain(b).copied().collect();
                proptest::prop_assert_eq!(all, model.iter().copied().collect::<Vec<u8>>());
            }
        }
    }
}
