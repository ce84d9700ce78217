//! A session driven entirely in memory, for unit tests and fuzzing: a
//! [`SessionCore`] over a [`Local`] program, the engine's stack, and a peer
//! stack joined to it by a wire of frame queues. No descriptors, no root,
//! no namespaces; time is virtual and every run is the same.
//!
//! One [`Sim::turn`] is one engine turn as `HostService` and the engine
//! make it: the stack's events to the session, the session's step (its
//! commands, then the sockets that changed), the stack's poll, then the
//! frames across the wire and the peer's answers back.

use std::collections::HashMap;
use std::time::Duration;

use softoe_abi::{Command, Completion, Layout};
use softoe_stack::{
    Device, Events, Instant, PayloadRef, RxMeta, RxRing, SocketHandle, Stack, StackConfig, TxBusy,
    TxFrame,
};
use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};

#[cfg(feature = "fuzzing")]
use softoe_stack::Endpoint;

use super::{Ctx, Local, SessionCore, Shares};
use crate::host::HostConfig;
use crate::memory::Memory;

/// The engine's address on the simulated wire.
pub(crate) const ENGINE_IP: Ipv4Address = Ipv4Address::new(10, 9, 0, 1);
/// The peer's.
pub(crate) const PEER_IP: Ipv4Address = Ipv4Address::new(10, 9, 0, 2);

/// Frames a stack sends, copied out whole (header and payload).
struct Wire<'a> {
    mem: &'a Memory,
    out: &'a mut Vec<Vec<u8>>,
}

impl Device for Wire<'_> {
    fn copy_payload(&self, r: &PayloadRef, offset: usize, dst: &mut [u8]) -> usize {
        self.mem.copy(r, offset, dst)
    }

    fn payload_in_place(&self, r: &PayloadRef) -> Option<&[u8]> {
        self.mem.get(r)?.owned()
    }

    fn deliver(&mut self, ring: &RxRing, pos: u64, data: &[u8]) -> bool {
        self.mem.ring_write(ring, pos, data)
    }

    fn transmit(&mut self, f: &TxFrame<'_>) -> Result<(), TxBusy> {
        let mut bytes = f.header.to_vec();
        for b in f.payload.iter().filter_map(|r| self.mem.get(r)) {
            b.append_to(&mut bytes);
        }
        self.out.push(bytes);
        Ok(())
    }
}

/// A session, its program, the engine's stack and a peer.
pub(crate) struct Sim {
    /// The session under test.
    pub(crate) core: SessionCore<Local>,
    /// The engine's stack.
    pub(crate) stack: Stack,
    /// The peer on the other end of the wire (a plain stack the test
    /// drives through its API).
    pub(crate) peer: Stack,
    /// The engine's memory (the data area, copy rings).
    pub(crate) mem: Memory,
    /// The peer's memory: what it sends from.
    pub(crate) peer_mem: Memory,
    /// The host service's settings the session sees.
    pub(crate) cfg: HostConfig,
    owner: HashMap<SocketHandle, usize>,
    shares: Shares,
    scratch: Vec<u8>,
    /// The virtual clock.
    pub(crate) now: Instant,
    /// Frames on their way to the peer and to the engine.
    to_peer: Vec<Vec<u8>>,
    to_engine: Vec<Vec<u8>>,
}

fn stack(mac: u8, ip: Ipv4Address) -> Option<Stack> {
    let cfg = StackConfig::new(
        EthernetAddress([2, 0, 0, 0, 0, mac]),
        Ipv4Cidr::new(ip, 24)?,
    );
    Stack::new(cfg).ok()
}

impl Sim {
    /// A fresh session on a region of `layout`, with `memory` bytes of the
    /// program's own memory, and a peer with nothing open.
    pub(crate) fn new(layout: Layout, memory: usize) -> Option<Sim> {
        Some(Sim {
            core: SessionCore::local(1, Local::new(layout, memory)),
            stack: stack(1, ENGINE_IP)?,
            peer: stack(2, PEER_IP)?,
            mem: Memory::new(),
            peer_mem: Memory::new(),
            cfg: HostConfig::default(),
            owner: HashMap::new(),
            shares: Shares::new(),
            scratch: Vec::new(),
            now: Instant::from_nanos(1_000_000),
            to_peer: Vec::new(),
            to_engine: Vec::new(),
        })
    }

    /// The program posts `cmds` (as many as its command ring has room
    /// for); how many it posted.
    pub(crate) fn post(&mut self, cmds: &[Command]) -> usize {
        let mut p = self.core.region().command_producer();
        cmds.iter().take_while(|c| p.push(c).is_ok()).count()
    }

    /// The program takes every completion waiting for it.
    pub(crate) fn reap(&mut self) -> Vec<Completion> {
        let mut c = self.core.region().completion_consumer();
        let mut out = Vec::new();
        while let Ok(Some(x)) = c.pop() {
            out.push(x);
        }
        out
    }

    /// One engine turn, then the wire both ways; the clock moves on by
    /// `dt` first. Whether the session did anything.
    pub(crate) fn turn(&mut self, dt: Duration) -> bool {
        self.now += dt;
        while let Some((h, e)) = self.stack.poll_event() {
            if self.owner.contains_key(&h) {
                self.core.stack_event(h, e);
            }
            if e.contains(Events::RELEASED) {
                self.owner.remove(&h);
            }
        }
        let any = self.core.step(&mut Ctx {
            now: self.now,
            stack: &mut self.stack,
            cfg: &self.cfg,
            slot: 0,
            owner: &mut self.owner,
            shares: &mut self.shares,
            scratch: &mut self.scratch,
            mem: &mut self.mem,
        });
        self.stack.poll(
            self.now,
            &mut Wire {
                mem: &self.mem,
                out: &mut self.to_peer,
            },
        );
        // The peer's timers too (its delayed ACKs).
        self.peer.poll(
            self.now,
            &mut Wire {
                mem: &self.peer_mem,
                out: &mut self.to_engine,
            },
        );
        // Frames cross until neither side has more to say.
        for _ in 0..64 {
            if self.to_peer.is_empty() && self.to_engine.is_empty() {
                break;
            }
            let mut dev = Wire {
                mem: &self.peer_mem,
                out: &mut self.to_engine,
            };
            for f in std::mem::take(&mut self.to_peer) {
                self.peer.receive(self.now, &f, RxMeta::default(), &mut dev);
            }
            self.peer.poll(self.now, &mut dev);
            let mut dev = Wire {
                mem: &self.mem,
                out: &mut self.to_peer,
            };
            for f in std::mem::take(&mut self.to_engine) {
                self.stack
                    .receive(self.now, &f, RxMeta::default(), &mut dev);
            }
            self.stack.poll(self.now, &mut dev);
        }
        any
    }

    /// Turns `n` times, a millisecond apart.
    pub(crate) fn run(&mut self, n: usize) {
        for _ in 0..n {
            self.turn(Duration::from_millis(1));
        }
    }

    /// The peer drains its events (the test asks the peer's sockets
    /// directly) and moves its own pending work out.
    pub(crate) fn peer_poll(&mut self) {
        while self.peer.poll_event().is_some() {}
        let mut dev = Wire {
            mem: &self.peer_mem,
            out: &mut self.to_engine,
        };
        self.peer.poll(self.now, &mut dev);
    }

    /// Ends the session as the host service does when its program is
    /// gone, and gives its memory back.
    pub(crate) fn finish(mut self) {
        self.exit();
        self.core.reclaim(&mut self.mem);
    }

    /// Ends the session as the host service does when its program is
    /// gone (what it posted is carried out first, then its sockets close),
    /// keeping it: the engine turns on while it drains.
    pub(crate) fn exit(&mut self) {
        let now = self.now;
        self.core.exit(&mut Ctx {
            now,
            stack: &mut self.stack,
            cfg: &self.cfg,
            slot: 0,
            owner: &mut self.owner,
            shares: &mut self.shares,
            scratch: &mut self.scratch,
            mem: &mut self.mem,
        });
    }
}

/// Fuzzing's way in: `data` as a script of what a hostile program and the
/// peer do to one session, carried out against the core past the command
/// decoder. Each record is a control byte and 64 bytes of command:
///
/// - control `& 3 == 0`: the program posts the command;
/// - `1`: posts it, and the engine takes a turn;
/// - `2`: the engine takes `control >> 2` turns (the clock moves a
///   millisecond each);
/// - `3`: the peer acts (listens, accepts and writes, connects, or reads).
///
/// Opcodes and socket ids are folded into their small ranges so that most
/// commands reach a request; everything else is as the fuzzer wrote it.
/// Ends as a dead program's session does, and gives the memory back.
/// Nothing here may panic, whatever `data` is.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub fn drive_commands(data: &[u8]) {
    let Ok(layout) = Layout::new(64, 64, 16, 1 << 18) else {
        return;
    };
    let Some(mut s) = Sim::new(layout, 1 << 12) else {
        return;
    };
    let listen = Endpoint::new(PEER_IP, 7000);
    let mut peer_listener = None;
    let mut peer_conns = Vec::new();
    let chunk = vec![0x5au8; 1024].into_boxed_slice();
    let chunk = s.peer_mem.add(chunk);
    for rec in data.chunks(65) {
        let (k, b) = (rec[0], &rec[1..]);
        let mut w = [0u8; 64];
        w[..b.len()].copy_from_slice(b);
        let word = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&w[i..i + 8]);
            u64::from_le_bytes(x)
        };
        let c = Command {
            opcode: u16::from_le_bytes([w[0], w[1]]) % 16,
            flags: u16::from_le_bytes([w[2], w[3]]),
            sock: u32::from_le_bytes([w[4], w[5], w[6], w[7]]) % 20,
            tag: word(8),
            args: core::array::from_fn(|i| word(16 + 8 * i)),
        };
        match k & 3 {
            0 => {
                s.post(&[c]);
            }
            1 => {
                s.post(&[c]);
                s.turn(Duration::from_millis(1));
            }
            2 => s.run(usize::from(k >> 2)),
            _ => {
                let now = s.now;
                match (k >> 2) % 4 {
                    0 => {
                        if peer_listener.is_none() {
                            peer_listener = s.peer.tcp_listen(listen, 8, None).ok();
                        }
                    }
                    1 => {
                        if let Some(l) = peer_listener {
                            while let Ok(Some(h)) = s.peer.tcp_accept(l) {
                                peer_conns.push(h);
                            }
                        }
                        let n = u32::from(w[0]) * 4;
                        for &h in &peer_conns {
                            let _ = s.peer.tcp_send(h, PayloadRef::new(chunk, 0, n));
                        }
                    }
                    2 => {
                        let port = u16::from_le_bytes([w[0], w[1]]);
                        let to = Endpoint::new(ENGINE_IP, port);
                        if let Ok(h) = s.peer.tcp_connect(now, to, None, None) {
                            peer_conns.push(h);
                        }
                    }
                    _ => {
                        for &h in &peer_conns {
                            let _ = s.peer.tcp_recv_with(h, |a, b| (a.len() + b.len(), ()));
                        }
                    }
                }
                s.peer_poll();
            }
        }
        // The program reads its completions now and then.
        if k & 0x80 != 0 {
            s.reap();
        }
    }
    s.run(3);
    s.finish();
}
