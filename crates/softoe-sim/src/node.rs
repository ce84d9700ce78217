//! A softoe stack as a node of the world, with applications on top.

use std::sync::Arc;

use softoe_stack::{
    Device, Events, Instant, PayloadRef, RxMeta, SocketHandle, Stack, TxBusy, TxFrame,
};

use crate::world::{Node, RxInfo, SimFrame};

/// Bytes of the shared payload pattern (region 0 of every node).
pub const PATTERN_LEN: usize = 1 << 20;

/// The memory applications send from: a pseudo-random pattern, so that any
/// misplaced, duplicated or corrupted byte shows. Stream `key` at position
/// `pos` is byte `(key + pos) % PATTERN_LEN`.
#[derive(Clone, Debug)]
pub struct Pattern {
    bytes: Arc<[u8]>,
}

impl Pattern {
    /// The pattern for `seed`.
    pub fn new(seed: u64) -> Pattern {
        let mut x = seed ^ 0x9e37_79b9_7f4a_7c15;
        let bytes: Vec<u8> = (0..PATTERN_LEN)
            .map(|_| {
                // xorshift64*
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
            })
            .collect();
        Pattern {
            bytes: bytes.into(),
        }
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// A reference to up to `len` bytes of stream `key` from `pos` (shorter
    /// where the pattern wraps).
    pub fn payload(&self, key: u64, pos: u64, len: u32) -> PayloadRef {
        let off = ((key + pos) % PATTERN_LEN as u64) as usize;
        let len = (len as usize).min(PATTERN_LEN - off);
        PayloadRef::new(0, off as u64, len as u32)
    }

    /// Checks `data` against stream `key` from `pos`.
    pub fn matches(&self, key: u64, pos: u64, data: &[u8]) -> bool {
        let mut off = ((key + pos) % PATTERN_LEN as u64) as usize;
        let mut rest = data;
        while !rest.is_empty() {
            let n = rest.len().min(PATTERN_LEN - off);
            let (a, b) = rest.split_at(n);
            if self.bytes.get(off..off + n) != Some(a) {
                return false;
            }
            rest = b;
            off = 0;
        }
        true
    }
}

/// The port a simulated stack writes to: resolves payload from the pattern
/// and copies whole frames out (the simulated DMA).
pub struct SimDev<'a> {
    pub(crate) mem: &'a [u8],
    pub(crate) out: &'a mut Vec<SimFrame>,
}

impl core::fmt::Debug for SimDev<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SimDev")
            .field("queued", &self.out.len())
            .finish_non_exhaustive()
    }
}

impl SimDev<'_> {
    /// The bytes `r` names in the pattern (empty if it lies outside).
    fn payload(&self, r: &PayloadRef) -> &[u8] {
        let s = usize::try_from(r.offset).unwrap_or(usize::MAX);
        self.mem.get(s..s.saturating_add(r.len())).unwrap_or(&[])
    }
}

impl Device for SimDev<'_> {
    fn copy_payload(&self, r: &PayloadRef, offset: usize, dst: &mut [u8]) -> usize {
        r.copy_from(self.mem, offset, dst)
    }

    fn payload_in_place(&self, r: &PayloadRef) -> Option<&[u8]> {
        // The pattern is the simulator's own: nothing writes it.
        r.bytes_in(self.mem)
    }

    fn transmit(&mut self, f: &TxFrame<'_>) -> Result<(), TxBusy> {
        let mut bytes = Vec::with_capacity(f.len());
        bytes.extend_from_slice(f.header);
        for r in f.payload {
            bytes.extend_from_slice(self.payload(r));
        }
        self.out.push(SimFrame {
            bytes,
            gso_size: f.offload.gso_size,
            csum: f.offload.csum.map(|c| (c.start, c.offset)),
            port: 0,
            priority: f.priority,
        });
        Ok(())
    }
}

/// An application on a [`StackNode`].
pub trait App {
    /// Does whatever it can now. Returns whether it changed anything.
    fn step(&mut self, now: Instant, stack: &mut Stack, pattern: &Pattern) -> bool;
    /// When it next wants to run without being woken by the network.
    fn wake_at(&self) -> Option<Instant>;
    /// Called with each socket event before `step`.
    fn event(&mut self, _handle: SocketHandle, _events: Events) {}
    /// Lets a test read the application's results.
    fn as_any(&self) -> &dyn core::any::Any;
}

/// A softoe stack with applications.
pub struct StackNode {
    /// The stack.
    pub stack: Stack,
    /// Payload memory.
    pub pattern: Pattern,
    /// Applications, run after every stack interaction.
    pub apps: Vec<Box<dyn App>>,
    /// Most sockets alive at once (memory bound check).
    pub peak_sockets: usize,
}

impl core::fmt::Debug for StackNode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("StackNode")
            .field("stack", &self.stack)
            .field("apps", &self.apps.len())
            .field("peak_sockets", &self.peak_sockets)
            .finish_non_exhaustive()
    }
}

impl StackNode {
    /// A node running `stack` with no applications yet.
    pub fn new(stack: Stack, pattern: Pattern) -> StackNode {
        StackNode {
            stack,
            pattern,
            apps: Vec::new(),
            peak_sockets: 0,
        }
    }

    /// The `i`th application as its concrete type.
    pub fn app<T: 'static>(&self, i: usize) -> Option<&T> {
        self.apps.get(i)?.as_any().downcast_ref::<T>()
    }

    fn drive(&mut self, now: Instant, out: &mut Vec<SimFrame>) {
        for _ in 0..64 {
            while let Some((h, e)) = self.stack.poll_event() {
                for a in &mut self.apps {
                    a.event(h, e);
                }
            }
            let mut changed = false;
            for a in &mut self.apps {
                changed |= a.step(now, &mut self.stack, &self.pattern);
            }
            let mut dev = SimDev {
                mem: self.pattern.bytes(),
                out,
            };
            self.stack.poll(now, &mut dev);
            self.peak_sockets = self.peak_sockets.max(self.stack.socket_count());
            if !changed {
                break;
            }
        }
    }
}

impl Node for StackNode {
    fn receive(&mut self, now: Instant, frame: &[u8], info: RxInfo, out: &mut Vec<SimFrame>) {
        let meta = RxMeta {
            csum_verified: info.csum_verified,
            gso_size: info.gso_size,
        };
        let mut dev = SimDev {
            mem: self.pattern.bytes(),
            out,
        };
        self.stack.receive(now, frame, meta, &mut dev);
        self.drive(now, out);
    }

    fn poll(&mut self, now: Instant, out: &mut Vec<SimFrame>) {
        let mut dev = SimDev {
            mem: self.pattern.bytes(),
            out,
        };
        self.stack.poll(now, &mut dev);
        self.drive(now, out);
    }

    fn poll_at(&self) -> Option<Instant> {
        let apps = self.apps.iter().filter_map(|a| a.wake_at()).min();
        match (self.stack.poll_at(), apps) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_refs_and_checks() {
        let p = Pattern::new(1);
        let r = p.payload(7, PATTERN_LEN as u64 - 10, 100);
        assert_eq!(r.len, 3, "stops where the pattern wraps");
        let mut stream = Vec::new();
        stream.extend_from_slice(&p.bytes()[PATTERN_LEN - 3..]);
        stream.extend_from_slice(&p.bytes()[..5]);
        assert!(p.matches(7, PATTERN_LEN as u64 - 10, &stream));
        stream[4] ^= 1;
        assert!(!p.matches(7, PATTERN_LEN as u64 - 10, &stream));
        assert_ne!(Pattern::new(1).bytes()[..64], Pattern::new(2).bytes()[..64]);
    }
}
