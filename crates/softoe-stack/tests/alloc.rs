//! Steady-state transfer allocates nothing.
//!
//! Two stacks joined by a wire made of pre-allocated buffers move 64 MiB
//! (with and without TSO, checksum offload and receive coalescing) while a
//! counting global allocator watches. After the handshake and the first
//! megabytes (when the timer heap and queues reach their working size), not
//! one allocation may happen in the stacks — every buffer was sized when its
//! socket was made.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// A counting allocator must implement `GlobalAlloc`, an unsafe trait.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use softoe_stack::{
    Device, DeviceCaps, Endpoint, Instant, PayloadRef, RecvError, RxMeta, SocketHandle, Stack,
    StackConfig, TxBusy, TxFrame,
};
use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
/// Allocations of a receive ring's size or more (the tests' rings are 1 MiB).
static LARGE: AtomicU64 = AtomicU64::new(0);
const LARGE_BYTES: usize = 1 << 20;
/// The counters are the whole process's: one test at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

// SAFETY: defers to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        if l.size() >= LARGE_BYTES {
            LARGE.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        if l.size() >= LARGE_BYTES {
            LARGE.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        if n >= LARGE_BYTES {
            LARGE.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// One direction of the wire: a fixed pool of frame buffers.
struct Wire {
    full: Vec<(Vec<u8>, usize, Option<u16>)>,
    free: Vec<Vec<u8>>,
}

impl Wire {
    fn new(frames: usize, size: usize) -> Wire {
        Wire {
            full: Vec::with_capacity(frames),
            free: (0..frames).map(|_| Vec::with_capacity(size)).collect(),
        }
    }
}

/// A port: resolves payload from `mem`, writes frames into the wire.
struct Port<'a> {
    mem: &'a [u8],
    wire: &'a mut Wire,
}

impl Device for Port<'_> {
    fn copy_payload(&self, r: &PayloadRef, offset: usize, dst: &mut [u8]) -> usize {
        r.copy_from(self.mem, offset, dst)
    }

    fn transmit(&mut self, f: &TxFrame<'_>) -> Result<(), TxBusy> {
        let Some(mut buf) = self.wire.free.pop() else {
            return Err(TxBusy);
        };
        buf.clear();
        buf.extend_from_slice(f.header);
        for r in f.payload {
            buf.extend_from_slice(&self.mem[r.offset as usize..r.offset as usize + r.len()]);
        }
        if let Some(c) = f.offload.csum {
            // The port's checksum offload.
            let start = usize::from(c.start);
            let sum = !softoe_wire::checksum::data(&buf[start..]);
            let at = start + usize::from(c.offset);
            buf[at..at + 2].copy_from_slice(&sum.to_be_bytes());
        }
        let len = buf.len();
        // A TSO super-segment arrives whole, like GRO on a veth.
        self.wire.full.push((buf, len, f.offload.gso_size));
        Ok(())
    }
}

fn stack(n: u8, offloads: bool) -> Stack {
    let mut cfg = StackConfig::new(
        EthernetAddress([2, 0, 0, 0, 0, n]),
        Ipv4Cidr::new(Ipv4Address::new(10, 0, 0, n), 24).unwrap(),
    );
    cfg.seed = u64::from(n);
    cfg.caps = DeviceCaps {
        mtu: 1500,
        tso_max: offloads.then_some(65_535),
        tx_csum: offloads,
    };
    cfg.tcp.rx_buffer = 1 << 20;
    cfg.tcp.tx_buffer = 1 << 20;
    Stack::new(cfg).unwrap()
}

fn deliver(to: &mut Stack, now: Instant, wire: &mut Wire, back: &mut Wire, mem: &[u8]) {
    let mut i = 0;
    while i < wire.full.len() {
        let (buf, len, gso) = wire.full.swap_remove(i);
        let meta = RxMeta {
            csum_verified: gso.is_some(),
            gso_size: gso,
        };
        let mut port = Port { mem, wire: back };
        to.receive(now, &buf[..len], meta, &mut port);
        wire.free.push(buf);
        i = 0;
        if wire.full.is_empty() {
            break;
        }
    }
}

fn transfer(offloads: bool) -> (u64, u64) {
    const TOTAL: u64 = 64 << 20;
    const WARMUP: u64 = 8 << 20;
    let mem: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 31 + 7) as u8).collect();
    let mut a = stack(1, offloads);
    let mut b = stack(2, offloads);
    let mut ab = Wire::new(512, 70_000);
    let mut ba = Wire::new(512, 70_000);
    let mut now = Instant::from_secs(1);
    let server = Endpoint::new(Ipv4Address::new(10, 0, 0, 2), 5001);
    let lst = b.tcp_listen(server, 4, None).unwrap();
    let c = a.tcp_connect(now, server, None, None).unwrap();
    let mut peer: Option<SocketHandle> = None;
    let mut sent = 0u64;
    let mut received = 0u64;
    let mut rbuf = vec![0u8; 256 * 1024];
    let mut steady_from = None;
    let mut ok = true;
    while received < TOTAL {
        // The sender's application.
        while sent < TOTAL {
            let off = sent % (1 << 20);
            let len = (64 * 1024).min((1 << 20) - off) as u32;
            match a.tcp_send(c, PayloadRef::new(0, off, len)) {
                Ok(0) | Err(_) => break,
                Ok(n) => sent += n as u64,
            }
        }
        a.poll(
            now,
            &mut Port {
                mem: &mem,
                wire: &mut ab,
            },
        );
        deliver(&mut b, now, &mut ab, &mut ba, &mem);
        if peer.is_none() {
            peer = b.tcp_accept(lst).unwrap();
        }
        if let Some(p) = peer {
            loop {
                match b.tcp_recv(p, &mut rbuf) {
                    Ok(0) | Err(RecvError::Finished) => break,
                    Ok(n) => {
                        let start = (received % (1 << 20)) as usize;
                        for (i, byte) in rbuf[..n].iter().enumerate() {
                            ok &= *byte == mem[(start + i) % (1 << 20)];
                        }
                        received += n as u64;
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
        b.poll(
            now,
            &mut Port {
                mem: &mem,
                wire: &mut ba,
            },
        );
        deliver(&mut a, now, &mut ba, &mut ab, &mem);
        while a.poll_event().is_some() {}
        while b.poll_event().is_some() {}
        if steady_from.is_none() && received >= WARMUP {
            steady_from = Some((ALLOCS.load(Ordering::Relaxed), received));
        }
        now += Duration::from_micros(20);
    }
    assert!(ok, "every byte arrives as sent");
    let (allocs0, bytes0) = steady_from.unwrap();
    (ALLOCS.load(Ordering::Relaxed) - allocs0, received - bytes0)
}

#[test]
fn steady_state_transfer_allocates_nothing() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for offloads in [false, true] {
        let (allocs, bytes) = transfer(offloads);
        eprintln!("offloads {offloads}: {allocs} allocations over {bytes} steady-state bytes");
        assert_eq!(
            allocs, 0,
            "offloads {offloads}: {allocs} allocations in steady state"
        );
    }
}

/// Runs both stacks until neither has anything to send, `now` moving on.
fn settle(a: &mut Stack, b: &mut Stack, now: Instant, ab: &mut Wire, ba: &mut Wire, mem: &[u8]) {
    for _ in 0..8 {
        a.poll(now, &mut Port { mem, wire: ab });
        deliver(b, now, ab, ba, mem);
        b.poll(now, &mut Port { mem, wire: ba });
        deliver(a, now, ba, ab, mem);
        while a.poll_event().is_some() {}
        while b.poll_event().is_some() {}
    }
}

/// A new connection per request, as a web server sees them: after the
/// first two, each connection is a closed one's control block with its
/// receive ring, queues and logs, so opening one allocates nothing — no
/// ring (the engine's time per new connection was a fifth mapping,
/// faulting in and unmapping 4 MiB rings) and no small block either.
#[test]
fn connections_reuse_the_allocations_of_closed_ones() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mem = vec![7u8; 4096];
    let mut a = stack(1, true);
    let mut b = stack(2, true);
    let mut ab = Wire::new(64, 70_000);
    let mut ba = Wire::new(64, 70_000);
    let mut now = Instant::from_secs(1);
    let server = Endpoint::new(Ipv4Address::new(10, 0, 0, 2), 80);
    let lst = b.tcp_listen(server, 16, None).unwrap();
    let mut rbuf = vec![0u8; 4096];
    let mut large_after_first = 0;
    let mut any_after_second = 0;
    for round in 0..12 {
        let before = LARGE.load(Ordering::Relaxed);
        let before_any = ALLOCS.load(Ordering::Relaxed);
        let c = a.tcp_connect(now, server, None, None).unwrap();
        settle(&mut a, &mut b, now, &mut ab, &mut ba, &mem);
        let p = b.tcp_accept(lst).unwrap().expect("a connection to accept");
        assert_eq!(a.tcp_send(c, PayloadRef::new(0, 0, 100)).unwrap(), 100);
        settle(&mut a, &mut b, now, &mut ab, &mut ba, &mem);
        assert_eq!(b.tcp_recv(p, &mut rbuf).unwrap(), 100, "round {round}");
        assert!(
            rbuf[..100].iter().all(|&x| x == 7),
            "round {round}: bytes as sent"
        );
        // The server closes first (its side waits in TIME-WAIT), then the
        // client; both handles are given up.
        b.close(now, p).unwrap();
        settle(&mut a, &mut b, now, &mut ab, &mut ba, &mem);
        a.close(now, c).unwrap();
        settle(&mut a, &mut b, now, &mut ab, &mut ba, &mem);
        now += Duration::from_secs(121);
        settle(&mut a, &mut b, now, &mut ab, &mut ba, &mem);
        assert_eq!(
            a.socket_count(),
            0,
            "round {round}: the client's socket is gone"
        );
        assert_eq!(
            b.socket_count(),
            1,
            "round {round}: only the listener is left"
        );
        if round > 0 {
            large_after_first += LARGE.load(Ordering::Relaxed) - before;
        }
        if round > 1 {
            any_after_second += ALLOCS.load(Ordering::Relaxed) - before_any;
        }
    }
    assert_eq!(
        large_after_first, 0,
        "connections after the first allocated {large_after_first} rings"
    );
    assert_eq!(
        any_after_second, 0,
        "connections after the second made {any_after_second} allocations"
    );
}
