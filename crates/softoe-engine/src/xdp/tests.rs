//! The ring index logic and the UMEM's descriptor checks, without a kernel:
//! the tests play the kernel's end of each ring, well and badly.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::VecDeque;

use proptest::prelude::*;

use super::bpf;
use super::ring::heap_pair;
use super::sys::XdpDesc;
use super::umem::{BadDesc, Frames, Owner};

#[test]
fn a_ring_holds_its_size_and_no_more() {
    let (mut p, mut c) = heap_pair(8, 0);
    for v in 0..8 {
        assert!(p.push(v));
    }
    assert!(!p.push(8), "full");
    assert_eq!(c.available(), 0, "nothing visible before submit");
    assert_eq!(p.submit(), 8);
    assert_eq!(p.outstanding(), 8);
    for v in 0..8 {
        assert_eq!(c.pop(), Some(v));
    }
    assert_eq!(c.pop(), None);
    assert!(!p.push(8), "still full: nothing released");
    c.release();
    assert!(p.push(8), "room again");
    assert_eq!(p.pending(), 1);
}

#[test]
fn the_other_index_is_read_once_per_batch() {
    let (mut p, mut c) = heap_pair(16, 0);
    for v in 0..4 {
        p.push(v);
    }
    p.submit();
    assert_eq!(c.available(), 4);
    // More published now is not seen until the cached four are read.
    for v in 4..8 {
        p.push(v);
    }
    p.submit();
    assert_eq!(c.available(), 4, "the cached view");
    for v in 0..4 {
        assert_eq!(c.pop(), Some(v));
    }
    assert_eq!(c.available(), 4, "reloaded once empty");
}

#[test]
fn impossible_indices_are_ignored_and_counted() {
    // A producer index more than the ring's size ahead of the consumer.
    let (mut p, mut c) = heap_pair(8, 100);
    p.push(1);
    p.submit();
    c.poke_producer(100 + 9);
    assert_eq!(c.available(), 0);
    assert_eq!(c.bad_indices(), 1);
    assert_eq!(c.pop(), None, "each look refuses it again");
    assert_eq!(c.bad_indices(), 2);
    // One that moved back behind what was read.
    c.poke_producer(101);
    assert_eq!(c.pop(), Some(1));
    c.poke_producer(100);
    assert_eq!(c.pop(), None);
    assert_eq!(c.bad_indices(), 3);

    // A consumer index past what was published, or moved back.
    let (mut p, c) = heap_pair(8, u32::MAX - 2);
    for v in 0..8 {
        assert!(p.push(v));
    }
    p.submit();
    p.poke_consumer((u32::MAX - 2).wrapping_add(9));
    assert_eq!(p.free(1), 0, "not taken as room");
    assert_eq!(p.bad_indices(), 1);
    p.poke_consumer((u32::MAX - 2).wrapping_add(3));
    assert_eq!(p.free(1), 3, "a real move is seen");
    p.poke_consumer((u32::MAX - 2).wrapping_add(1));
    assert_eq!(p.free(4), 3, "moving back is not");
    assert_eq!(p.bad_indices(), 2);
    drop(c);
}

proptest! {
    /// Both ends against a queue, across the u32 wrap, with batches of
    /// pushes, submits, pops and releases in any order.
    #[test]
    fn the_ring_is_a_bounded_queue(
        ops in proptest::collection::vec((0u8..4, 1u8..12), 1..300),
        start in prop_oneof![Just(0u32), Just(u32::MAX - 5), any::<u32>()],
        size_log in 1u32..6,
    ) {
        let size = 1u32 << size_log;
        let (mut p, mut c) = heap_pair(size, start);
        // Submitted and not yet popped; pushed and not submitted; popped
        // and not released.
        let (mut visible, mut unsent) = (VecDeque::new(), VecDeque::new());
        let mut held = 0u32;
        let mut next = 0u64;
        for (op, n) in ops {
            match op {
                0 => for _ in 0..n {
                    let room = (visible.len() + unsent.len()) as u32 + held < size;
                    prop_assert_eq!(p.push(next), room);
                    if room {
                        unsent.push_back(next);
                        next += 1;
                    }
                },
                1 => {
                    prop_assert_eq!(p.submit() as usize, unsent.len());
                    visible.extend(unsent.drain(..));
                }
                2 => for _ in 0..n {
                    let got = c.pop();
                    prop_assert_eq!(got, visible.pop_front());
                    if got.is_some() {
                        held += 1;
                    }
                },
                _ => {
                    prop_assert_eq!(c.taken(), held);
                    c.release();
                    held = 0;
                }
            }
            prop_assert!(p.free(0) <= size);
        }
        prop_assert_eq!(p.bad_indices() + c.bad_indices(), 0);
    }

    /// Whatever the kernel puts in an RX descriptor, a frame is taken only
    /// if the whole of it lies inside one receive frame the kernel holds,
    /// and then its range is exactly the descriptor's.
    #[test]
    fn rx_descriptors_are_checked(
        addr in prop_oneof![0u64..70_000, any::<u64>()],
        len in prop_oneof![0u32..5000, any::<u32>()],
    ) {
        let mut f = Frames::new(2048, 32, 16);
        let d = XdpDesc { addr, len, options: 0 };
        let frame = addr / 2048;
        let fits = addr.checked_add(u64::from(len)).is_some()
            && addr % 2048 + u64::from(len) <= 2048;
        match f.take_rx(&d) {
            Ok((i, range)) => {
                prop_assert!(fits && frame < 16);
                prop_assert_eq!(u64::from(i), frame);
                prop_assert_eq!(range.start as u64, addr);
                prop_assert_eq!(range.len() as u64, u64::from(len));
                prop_assert!(range.end <= 16 * 2048);
                prop_assert_eq!(f.owner(i), Some(Owner::Refill));
                // Not twice.
                prop_assert_eq!(f.take_rx(&d), Err(BadDesc::NotKernels));
            }
            Err(BadDesc::NotKernels) => prop_assert!(fits && (16..32).contains(&frame)),
            Err(BadDesc::OutOfBounds) => prop_assert!(!fits || frame >= 32),
        }
    }

    /// Completions free exactly the send frames the kernel holds, once.
    #[test]
    fn completions_are_checked(addrs in proptest::collection::vec(0u64..(40 * 2048), 1..64)) {
        let mut f = Frames::new(2048, 32, 16);
        let mut sending = std::collections::HashSet::new();
        while let Some(i) = f.alloc_tx() {
            f.sent(i);
            sending.insert(i);
        }
        prop_assert_eq!(sending.len(), 16);
        for a in addrs {
            let i = (a / 2048) as u32;
            let ok = a % 2048 == 0 && sending.remove(&i);
            prop_assert_eq!(f.complete(a).is_ok(), ok, "{}", a);
        }
        prop_assert_eq!(f.free_tx(), 16 - sending.len());
    }
}

#[test]
fn frames_move_between_owners() {
    let mut f = Frames::new(4096, 8, 4);
    assert_eq!(f.rx_addrs().collect::<Vec<_>>(), [0, 4096, 8192, 12288]);
    // Copy mode puts the frame 256 bytes into its chunk.
    let d = XdpDesc {
        addr: 4096 + 256,
        len: 60,
        options: 0,
    };
    let (i, r) = f.take_rx(&d).unwrap();
    assert_eq!((i, r), (1, 4352..4412));
    assert!(f.refilled(1));
    assert!(!f.refilled(1), "only once");
    assert_eq!(f.owner(1), Some(Owner::Kernel));
    // Send frames: lowest first; a frame not used goes back.
    let a = f.alloc_tx().unwrap();
    assert_eq!(a, 4);
    assert_eq!(f.owner(a), Some(Owner::Writing));
    f.unalloc_tx(a);
    f.unalloc_tx(a);
    assert_eq!(f.free_tx(), 4, "not freed twice");
    let a = f.alloc_tx().unwrap();
    f.sent(a);
    assert_eq!(f.complete(f.addr(a) + 1), Err(BadDesc::OutOfBounds));
    assert_eq!(
        f.complete(f.addr(0)),
        Err(BadDesc::NotKernels),
        "a receive frame"
    );
    assert_eq!(f.complete(f.addr(a)), Ok(()));
    assert_eq!(f.complete(f.addr(a)), Err(BadDesc::NotKernels), "not twice");
    assert_eq!(f.complete(8 * 4096), Err(BadDesc::OutOfBounds));
}

#[test]
fn the_program_redirects_by_queue_to_the_map() {
    let p = bpf::program(7);
    assert_eq!(p.len(), 6);
    let dbg = format!("{p:?}");
    // ldxw r2, [r1 + 16]; lddw r1, map 7; mov r3, XDP_PASS; call 51; exit
    let want = [
        (0x61, 0x12, 16, 0),
        (0x18, 0x11, 0, 7),
        (0, 0, 0, 0),
        (0xb7, 0x03, 0, 2),
        (0x85, 0, 0, 51),
        (0x95, 0, 0, 0),
    ];
    for (i, w) in want.iter().enumerate() {
        assert_eq!(bpf::fields(&p[i]), *w, "instruction {i} of {dbg}");
    }
}
