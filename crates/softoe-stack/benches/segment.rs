//! The stack's cost per segment, send and receive, with and without TSO:
//! `cargo bench -p softoe-stack --bench segment`.
//!
//! Two stacks are joined by an in-memory wire. Each iteration moves data
//! from A to B; only the part being measured is timed: A's `poll` (building
//! and emitting segments, by reference) for "send", B's `receive` (parsing,
//! checksum, reassembly, ACK generation) for "receive". With TSO, A emits
//! 64 KiB super-segments and B receives them as coalesced frames, as over a
//! veth; the figure stays per MSS-sized segment moved.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::time::{Duration, Instant as WallInstant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use softoe_stack::{
    Device, DeviceCaps, Endpoint, Instant, PayloadRef, RxMeta, SocketHandle, Stack, StackConfig,
    TxBusy, TxFrame,
};
use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};

const MSS: u64 = 1448;

/// A frame as the stack handed it over: header bytes, payload references and
/// offload requests. Turning it into wire bytes (the DMA copy and any
/// offloaded checksum) is the port's work, done outside the timed region.
struct Pending {
    header: Vec<u8>,
    refs: Vec<PayloadRef>,
    gso: Option<u16>,
    csum: Option<(usize, usize)>,
}

struct Port<'a> {
    mem: &'a [u8],
    out: &'a mut Vec<Pending>,
    pool: &'a mut Vec<Pending>,
}

impl Device for Port<'_> {
    fn copy_payload(&self, r: &PayloadRef, offset: usize, dst: &mut [u8]) -> usize {
        r.copy_from(self.mem, offset, dst)
    }
    fn payload_in_place(&self, r: &PayloadRef) -> Option<&[u8]> {
        r.bytes_in(self.mem)
    }
    fn transmit(&mut self, f: &TxFrame<'_>) -> Result<(), TxBusy> {
        // Recycled records: the harness itself allocates nothing per frame.
        let mut p = self.pool.pop().unwrap_or(Pending {
            header: Vec::new(),
            refs: Vec::new(),
            gso: None,
            csum: None,
        });
        p.header.clear();
        p.header.extend_from_slice(f.header);
        p.refs.clear();
        p.refs.extend_from_slice(f.payload);
        p.gso = f.offload.gso_size;
        p.csum = f
            .offload
            .csum
            .map(|c| (usize::from(c.start), usize::from(c.offset)));
        self.out.push(p);
        Ok(())
    }
}

/// The port's side: wire bytes for a pending frame.
fn materialize(mem: &[u8], p: &Pending, buf: &mut Vec<u8>) {
    buf.clear();
    buf.extend_from_slice(&p.header);
    for r in &p.refs {
        buf.extend_from_slice(&mem[r.offset as usize..r.offset as usize + r.len()]);
    }
    if let Some((start, off)) = p.csum {
        let sum = !softoe_wire::checksum::data(&buf[start..]);
        buf[start + off..start + off + 2].copy_from_slice(&sum.to_be_bytes());
    }
}

struct Pair {
    a: Stack,
    b: Stack,
    c: SocketHandle,
    p: SocketHandle,
    mem: Vec<u8>,
    ab: Vec<Pending>,
    ba: Vec<Pending>,
    pool: Vec<Pending>,
    frame: Vec<u8>,
    now: Instant,
    sent: u64,
    rbuf: Vec<u8>,
}

fn stack(n: u8, tso: bool) -> Stack {
    let mut cfg = StackConfig::new(
        EthernetAddress([2, 0, 0, 0, 0, n]),
        Ipv4Cidr::new(Ipv4Address::new(10, 0, 0, n), 24).unwrap(),
    );
    cfg.seed = u64::from(n);
    cfg.caps = DeviceCaps {
        mtu: 1500,
        tso_max: tso.then_some(65_535),
        tx_csum: tso,
    };
    cfg.tcp.rx_buffer = 4 << 20;
    cfg.tcp.tx_buffer = 4 << 20;
    cfg.tcp.timestamps = false;
    Stack::new(cfg).unwrap()
}

impl Pair {
    fn new(tso: bool) -> Pair {
        let mut pair = Pair {
            a: stack(1, tso),
            b: stack(2, tso),
            c: SocketHandle::from_bits(0),
            p: SocketHandle::from_bits(0),
            mem: (0..(1u32 << 20)).map(|i| (i * 13) as u8).collect(),
            ab: Vec::new(),
            ba: Vec::new(),
            pool: Vec::new(),
            frame: Vec::with_capacity(70_000),
            now: Instant::from_secs(1),
            sent: 0,
            rbuf: vec![0; 1 << 20],
        };
        let server = Endpoint::new(Ipv4Address::new(10, 0, 0, 2), 5001);
        let lst = pair.b.tcp_listen(server, 4, None).unwrap();
        pair.c = pair.a.tcp_connect(pair.now, server, None, None).unwrap();
        let (mut s, mut r) = (Duration::ZERO, Duration::ZERO);
        for _ in 0..20 {
            pair.round(&mut s, &mut r, 0);
            if let Ok(Some(p)) = pair.b.tcp_accept(lst) {
                pair.p = p;
            }
        }
        // Warm up past slow start.
        for _ in 0..200 {
            pair.round(&mut s, &mut r, 256 * 1024);
        }
        pair
    }

    /// Moves up to `bytes`; adds the time A spent sending and B receiving.
    /// Returns the bytes B received.
    fn round(&mut self, send: &mut Duration, recv: &mut Duration, bytes: u64) -> u64 {
        let mut queued = 0;
        while queued < bytes {
            let off = self.sent % (1 << 20);
            let len = (64 * 1024).min((1 << 20) - off).min(bytes - queued) as u32;
            match self.a.tcp_send(self.c, PayloadRef::new(0, off, len)) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    self.sent += n as u64;
                    queued += n as u64;
                }
            }
        }
        let t = WallInstant::now();
        self.a.poll(
            self.now,
            &mut Port {
                mem: &self.mem,
                out: &mut self.ab,
                pool: &mut self.pool,
            },
        );
        *send += t.elapsed();
        let mut ab = core::mem::take(&mut self.ab);
        for p in ab.drain(..) {
            materialize(&self.mem, &p, &mut self.frame);
            let meta = RxMeta {
                csum_verified: p.gso.is_some(),
                gso_size: p.gso,
            };
            let t = WallInstant::now();
            self.b.receive(
                self.now,
                &self.frame,
                meta,
                &mut Port {
                    mem: &self.mem,
                    out: &mut self.ba,
                    pool: &mut self.pool,
                },
            );
            *recv += t.elapsed();
            self.pool.push(p);
        }
        self.ab = ab;
        let mut got = 0;
        while let Ok(n) = self.b.tcp_recv(self.p, &mut self.rbuf) {
            if n == 0 {
                break;
            }
            got += n as u64;
        }
        self.b.poll(
            self.now,
            &mut Port {
                mem: &self.mem,
                out: &mut self.ba,
                pool: &mut self.pool,
            },
        );
        let mut ba = core::mem::take(&mut self.ba);
        for p in ba.drain(..) {
            materialize(&self.mem, &p, &mut self.frame);
            self.a.receive(
                self.now,
                &self.frame,
                RxMeta::default(),
                &mut Port {
                    mem: &self.mem,
                    out: &mut self.ab,
                    pool: &mut self.pool,
                },
            );
            self.pool.push(p);
        }
        self.ba = ba;
        while self.a.poll_event().is_some() {}
        while self.b.poll_event().is_some() {}
        self.now += Duration::from_micros(100);
        got
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("stack_per_segment");
    g.throughput(Throughput::Elements(1));
    for tso in [false, true] {
        let name = if tso { "tso" } else { "no_tso" };
        for side in ["send", "receive"] {
            let mut pair = Pair::new(tso);
            g.bench_function(format!("{side}/{name}"), |bch| {
                bch.iter_custom(|iters| {
                    // `iters` segments' worth of data, timed on one side only.
                    let want = iters * MSS;
                    let (mut s, mut r) = (Duration::ZERO, Duration::ZERO);
                    let mut moved = 0;
                    while moved < want {
                        moved += pair.round(&mut s, &mut r, (want - moved).min(256 * 1024));
                    }
                    let t = if side == "send" { s } else { r };
                    // Normalise to exactly `iters` segments.
                    t.mul_f64(want as f64 / moved.max(1) as f64)
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
