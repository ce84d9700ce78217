//! The fault port's tests: rates, determinism, each fault's behaviour.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

/// A port that hands back queued frames on receive and records what is
/// sent.
#[derive(Debug, Default)]
struct Loop {
    rx: VecDeque<Vec<u8>>,
    sent: Vec<(Vec<u8>, TxOffload)>,
    busy: bool,
}

impl Port for Loop {
    fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            mtu: 1500,
            tso_max: Some(65_535),
            tx_csum: true,
        }
    }
    fn send(&mut self, frame: &TxFrame<'_>, mem: &Memory) -> io::Result<bool> {
        if self.busy {
            return Ok(false);
        }
        let mut b = frame.header.to_vec();
        for r in frame.payload {
            mem.get(r).unwrap().append_to(&mut b);
        }
        self.sent.push((b, frame.offload));
        Ok(true)
    }
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<RxFrame>> {
        let Some(f) = self.rx.pop_front() else {
            return Ok(None);
        };
        // Like a TAP: a 12-byte header before the frame.
        buf[12..12 + f.len()].copy_from_slice(&f);
        Ok(Some(RxFrame {
            start: 12,
            len: f.len(),
            meta: RxMeta {
                csum_verified: true,
                gso_size: None,
            },
        }))
    }
    fn raw_fd(&self) -> RawFd {
        -1
    }
    fn describe(&self) -> String {
        "loop".into()
    }
}

/// Frame `i`: its number in the first 4 bytes, then a pattern, with
/// IPv4's EtherType where a frame has it (corruption hits IPv4 packets
/// only).
fn frame(i: u32) -> Vec<u8> {
    let mut f = i.to_be_bytes().to_vec();
    f.extend((0..60u32).map(|k| (k.wrapping_mul(31) ^ i) as u8));
    f[12] = 0x08;
    f[13] = 0x00;
    f
}

fn number(f: &[u8]) -> u32 {
    u32::from_be_bytes(f[..4].try_into().unwrap())
}

fn port(rx: DirectionFaults, tx: DirectionFaults, seed: u64) -> FaultPort<Loop> {
    FaultPort::new(Loop::default(), FaultConfig { seed, rx, tx }).unwrap()
}

/// Feeds frames `0..n` through the receive side at `now`, then drains
/// everything (moving time far ahead); returns the frames delivered.
fn run_rx(p: &mut FaultPort<Loop>, n: u32, now: Instant) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 2048];
    for i in 0..n {
        p.inner_mut().rx.push_back(frame(i));
        while let Some(f) = p.recv_at(now, &mut buf).unwrap() {
            out.push(buf[f.start..f.start + f.len].to_vec());
        }
    }
    let later = now + Duration::from_secs(3600);
    while let Some(f) = p.recv_at(later, &mut buf).unwrap() {
        out.push(buf[f.start..f.start + f.len].to_vec());
    }
    assert_eq!(p.held(), 0);
    out
}

/// Sends frames `0..n` (header 4 bytes, payload by reference) at `now`,
/// then flushes far ahead; returns the frames the inner port sent.
fn run_tx(p: &mut FaultPort<Loop>, n: u32, now: Instant) -> Vec<Vec<u8>> {
    let mut mem = Memory::new();
    let mut all = Vec::new();
    for i in 0..n {
        all.extend_from_slice(&frame(i)[4..]);
    }
    let region = mem.add(all.into_boxed_slice());
    for i in 0..n {
        let header = i.to_be_bytes();
        let refs = [PayloadRef::new(region, u64::from(i) * 60, 60)];
        let f = TxFrame {
            header: &header,
            payload: &refs,
            offload: TxOffload::default(),
            priority: 0,
        };
        assert!(p.send_at(now, &f, &mem).unwrap());
    }
    assert!(p.flush_tx(now + Duration::from_secs(3600)).unwrap());
    assert_eq!(p.held(), 0);
    p.inner_mut().sent.drain(..).map(|(b, _)| b).collect()
}

/// Within five standard deviations of `n·p`.
fn assert_rate(what: &str, got: u64, n: u64, p: f64) {
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    assert!(
        (got as f64 - mean).abs() <= 5.0 * sd + 1.0,
        "{what}: {got} of {n}, expected about {mean:.0} ± {:.0}",
        5.0 * sd
    );
}

#[test]
fn rates_are_within_statistical_bounds() {
    const N: u32 = 50_000;
    let faults = DirectionFaults {
        loss: 0.05,
        duplicate: 0.03,
        reorder: 0.02,
        corrupt: 0.04,
        ..DirectionFaults::default()
    };
    let now = Instant::now();
    let mut p = port(faults.clone(), faults, 11);
    let rx = run_rx(&mut p, N, now);
    let tx = run_tx(&mut p, N, now);
    let c = p.counters();
    for (name, d, out) in [("rx", c.rx, &rx), ("tx", c.tx, &tx)] {
        let n = u64::from(N);
        assert_eq!(d.frames, n, "{name}");
        assert_rate(&format!("{name} loss"), d.lost, n, 0.05);
        // Later faults apply to the frames not lost.
        let kept = n - d.lost;
        assert_rate(&format!("{name} duplicate"), d.duplicated, kept, 0.03);
        assert_rate(&format!("{name} reorder"), d.reordered, kept, 0.02);
        assert_rate(&format!("{name} corrupt"), d.corrupted, kept, 0.04);
        assert_eq!(out.len() as u64, kept + d.duplicated, "{name} delivered");
    }
}

/// What the engine reads through the `Port` trait (for `softoe stat`
/// and its exit line): the wrapper's counters, as JSON and as text;
/// a plain port has none.
#[test]
fn the_port_trait_reports_the_faults() {
    let faults = DirectionFaults {
        loss: 0.1,
        duplicate: 0.1,
        ..DirectionFaults::default()
    };
    let now = Instant::now();
    let mut p = port(faults.clone(), DirectionFaults::none(), 5);
    run_rx(&mut p, 2000, now);
    run_tx(&mut p, 1000, now);
    let seen = Port::faults(&p).unwrap();
    assert_eq!(seen, p.counters());
    assert_eq!((seen.rx.frames, seen.tx.frames), (2000, 1000));
    assert!(seen.rx.lost > 0 && seen.rx.duplicated > 0, "{seen:?}");
    assert_eq!(seen.tx.lost + seen.tx.duplicated, 0);
    let text = seen.to_string();
    assert!(
        text.starts_with(&format!(
            "rx 2000 frames: {} lost, {} duplicated, 0 reordered",
            seen.rx.lost, seen.rx.duplicated
        )) && text.contains("; tx 1000 frames: 0 lost"),
        "{text}"
    );
    let json = serde_json::to_string(&seen).unwrap();
    let back: FaultCounters = serde_json::from_str(&json).unwrap();
    assert_eq!(back, seen);
    assert_eq!(Port::faults(p.inner()), None, "the plain port has none");
}

#[test]
fn same_seed_same_faults_other_seed_others() {
    let faults = DirectionFaults {
        loss: 0.1,
        duplicate: 0.1,
        reorder: 0.1,
        corrupt: 0.1,
        jitter_us: 100,
        ..DirectionFaults::default()
    };
    let now = Instant::now();
    let go = |seed| {
        let mut p = port(faults.clone(), faults.clone(), seed);
        (
            run_rx(&mut p, 2000, now),
            run_tx(&mut p, 2000, now),
            p.counters(),
        )
    };
    let a = go(5);
    assert_eq!(a, go(5));
    assert_ne!(a.0, go(6).0);
    assert_ne!(a.1, go(6).1);
}

#[test]
fn one_probability_does_not_shift_another() {
    let now = Instant::now();
    let lost = |dup: f64| {
        let faults = DirectionFaults {
            loss: 0.2,
            duplicate: dup,
            ..DirectionFaults::default()
        };
        let mut p = port(faults, DirectionFaults::none(), 3);
        let mut got: Vec<u32> = run_rx(&mut p, 1000, now)
            .iter()
            .map(|f| number(f))
            .collect();
        got.dedup();
        got
    };
    assert_eq!(lost(0.0), lost(0.5));
}

#[test]
fn corruption_flips_one_to_three_bits_of_one_byte() {
    let faults = DirectionFaults {
        corrupt: 1.0,
        ..DirectionFaults::default()
    };
    let now = Instant::now();
    let mut p = port(faults.clone(), faults, 9);
    let mut seen = [0u32; 4];
    let mut offsets = std::collections::HashSet::new();
    let check = |i: usize,
                 f: &[u8],
                 seen: &mut [u32; 4],
                 offsets: &mut std::collections::HashSet<usize>| {
        let want = frame(i as u32);
        assert_eq!(f.len(), want.len());
        let diff: Vec<usize> = (0..f.len()).filter(|&k| f[k] != want[k]).collect();
        assert_eq!(diff.len(), 1, "exactly one byte changed in frame {i}");
        let bits = (f[diff[0]] ^ want[diff[0]]).count_ones();
        assert!((1..=3).contains(&bits), "{bits} bits flipped");
        seen[bits as usize] += 1;
        offsets.insert(diff[0]);
    };
    // Receive: corrupted in place, and no longer vouched for.
    let mut buf = vec![0u8; 2048];
    for i in 0..3000usize {
        p.inner_mut().rx.push_back(frame(i as u32));
        let f = p.recv_at(now, &mut buf).unwrap().unwrap();
        assert!(!f.meta.csum_verified);
        check(i, &buf[f.start..f.start + f.len], &mut seen, &mut offsets);
    }
    // Transmit: corrupted in a copy, memory untouched.
    let tx = run_tx(&mut p, 3000, now);
    for (i, f) in tx.iter().enumerate() {
        check(i, f, &mut seen, &mut offsets);
    }
    assert_eq!(p.counters().rx.corrupted + p.counters().tx.corrupted, 6000);
    // Each count of bits, and every offset of the IPv4 packet (in the
    // header and the payload of a sent frame), occurs; the Ethernet
    // header never.
    assert!(seen[1..].iter().all(|&n| n > 1500), "{seen:?}");
    assert_eq!(offsets.len(), frame(0).len() - 14);
    assert!(offsets.iter().all(|&o| o >= 14));
    // Checksums must be computed before corruption: offloads are hidden.
    let caps = p.caps();
    assert!(!caps.tx_csum && caps.tso_max.is_none());
}

/// A frame with no IPv4 packet (ARP here) has only the Ethernet CRC to
/// protect it, which drops it: corruption loses it, both ways.
#[test]
fn a_corrupted_frame_without_ipv4_is_dropped() {
    let faults = DirectionFaults {
        corrupt: 1.0,
        ..DirectionFaults::default()
    };
    let now = Instant::now();
    let mut p = port(faults.clone(), faults, 4);
    let mut arp = frame(1);
    arp[13] = 0x06;
    p.inner_mut().rx.push_back(arp.clone());
    let mut buf = vec![0u8; 2048];
    assert!(p.recv_at(now, &mut buf).unwrap().is_none());
    let mut mem = Memory::new();
    let region = mem.add(arp[4..].to_vec().into_boxed_slice());
    let refs = [PayloadRef::new(region, 0, (arp.len() - 4) as u32)];
    let f = TxFrame {
        header: &arp[..4],
        payload: &refs,
        offload: TxOffload::default(),
        priority: 0,
    };
    assert!(p.send_at(now, &f, &mem).unwrap(), "taken (and dropped)");
    assert!(p.inner_mut().sent.is_empty());
    let c = p.counters();
    assert_eq!((c.rx.corrupted, c.tx.corrupted), (1, 1));
}

#[test]
fn reordering_never_loses_frames_and_does_reorder() {
    let faults = DirectionFaults {
        reorder: 0.3,
        reorder_gap: 3,
        duplicate: 0.05,
        ..DirectionFaults::default()
    };
    let now = Instant::now();
    let mut p = port(faults.clone(), faults, 21);
    let rx = run_rx(&mut p, 5000, now);
    let tx = run_tx(&mut p, 5000, now);
    let c = p.counters();
    for (name, out, d) in [("rx", rx, c.rx), ("tx", tx, c.tx)] {
        let nums: Vec<u32> = out.iter().map(|f| number(f)).collect();
        let mut sorted = nums.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(
            sorted,
            (0..5000).collect::<Vec<_>>(),
            "{name}: every frame arrives"
        );
        assert_eq!(
            nums.len() as u64,
            5000 + d.duplicated,
            "{name}: and only once, bar duplicates"
        );
        // Frames that arrive after a later one: about one per reordered
        // frame (a held duplicate's twin may already have gone).
        let mut max = 0;
        let late = nums
            .iter()
            .filter(|&&n| {
                let l = n < max;
                max = max.max(n);
                l
            })
            .count() as u64;
        assert!(
            late * 10 >= d.reordered * 9 && late <= d.reordered + d.duplicated,
            "{name}: {late} late frames, {d:?}"
        );
        assert!(d.reordered > 1300, "{name}: {d:?}");
        // Frames intact.
        for f in &out {
            assert_eq!(f, &frame(number(f)), "{name}");
        }
    }
}

#[test]
fn reordered_frame_waits_for_the_gap_or_the_timeout() {
    let faults = DirectionFaults {
        reorder: 1.0,
        reorder_gap: 2,
        reorder_timeout_us: 500,
        ..DirectionFaults::default()
    };
    let t0 = Instant::now();
    let mut p = port(faults, DirectionFaults::none(), 1);
    let mut buf = vec![0u8; 256];
    p.inner_mut().rx.push_back(frame(0));
    assert!(p.recv_at(t0, &mut buf).unwrap().is_none());
    assert_eq!(p.next_due(), Some(t0 + Duration::from_micros(500)));
    let t1 = t0 + Duration::from_micros(499);
    assert!(p.recv_at(t1, &mut buf).unwrap().is_none());
    let t2 = t0 + Duration::from_micros(500);
    let f = p.recv_at(t2, &mut buf).unwrap().unwrap();
    assert_eq!(number(&buf[f.start..]), 0);
    assert_eq!(p.next_due(), None);
}

#[test]
fn delay_holds_frames_until_due_and_reports_the_deadline() {
    let faults = DirectionFaults {
        delay_us: 1000,
        ..DirectionFaults::default()
    };
    let t0 = Instant::now();
    let mut p = port(faults.clone(), faults, 4);
    let mut buf = vec![0u8; 256];
    // Receive.
    p.inner_mut().rx.push_back(frame(7));
    assert!(p.recv_at(t0, &mut buf).unwrap().is_none());
    let due = t0 + Duration::from_millis(1);
    assert_eq!(p.next_due(), Some(due));
    assert!(
        p.recv_at(due - Duration::from_micros(1), &mut buf)
            .unwrap()
            .is_none()
    );
    let f = p.recv_at(due, &mut buf).unwrap().unwrap();
    assert_eq!(&buf[f.start..f.start + f.len], &frame(7)[..]);
    assert!(f.meta.csum_verified, "metadata kept");
    assert_eq!(p.next_due(), None);
    // Transmit: copied out, sent when due (by recv or flush).
    let mut mem = Memory::new();
    let r = mem.add(frame(8)[4..].to_vec().into_boxed_slice());
    let refs = [PayloadRef::new(r, 0, 60)];
    let header = 8u32.to_be_bytes();
    let off = TxOffload {
        gso_size: Some(1000),
        csum: None,
    };
    let tf = TxFrame {
        header: &header,
        payload: &refs,
        offload: off,
        priority: 0,
    };
    assert!(p.send_at(t0, &tf, &mem).unwrap());
    drop(mem);
    assert!(p.inner().sent.is_empty());
    assert_eq!(p.next_due(), Some(due));
    assert!(p.recv_at(due, &mut buf).unwrap().is_none());
    assert_eq!(p.inner().sent, vec![(frame(8), off)]);
    assert_eq!(p.counters().tx.delayed, 1);
    assert_eq!(p.counters().tx.released, 1);
}

#[test]
fn busy_inner_port_keeps_held_frames() {
    let faults = DirectionFaults {
        delay_us: 10,
        ..DirectionFaults::default()
    };
    let t0 = Instant::now();
    let mut p = port(DirectionFaults::none(), faults, 2);
    let mut mem = Memory::new();
    let r = mem.add(vec![1u8; 10].into_boxed_slice());
    let refs = [PayloadRef::new(r, 0, 10)];
    let tf = TxFrame {
        header: &[9; 4],
        payload: &refs,
        offload: TxOffload::default(),
        priority: 0,
    };
    assert!(p.send_at(t0, &tf, &mem).unwrap());
    p.inner_mut().busy = true;
    let later = t0 + Duration::from_millis(1);
    assert!(!p.flush_tx(later).unwrap());
    assert!(
        !p.send_at(later, &tf, &mem).unwrap(),
        "busy while held frames wait"
    );
    p.inner_mut().busy = false;
    assert!(p.flush_tx(later).unwrap());
    assert_eq!(p.inner().sent.len(), 1);
}

#[test]
fn no_faults_is_transparent() {
    let now = Instant::now();
    let mut p = port(DirectionFaults::none(), DirectionFaults::none(), 0);
    let rx = run_rx(&mut p, 100, now);
    let tx = run_tx(&mut p, 100, now);
    let want: Vec<Vec<u8>> = (0..100).map(frame).collect();
    assert_eq!((rx, tx), (want.clone(), want));
    assert_eq!(p.caps(), Loop::default().caps());
    assert_eq!(p.counters().rx.released + p.counters().tx.released, 0);
}

#[test]
fn validate_rejects_bad_probabilities() {
    let with = |f: fn(&mut DirectionFaults)| {
        let mut c = FaultConfig::default();
        f(&mut c.tx);
        c.validate()
    };
    assert_eq!(with(|_| ()), Ok(()));
    assert_eq!(with(|d| d.loss = 1.0), Ok(()));
    assert_eq!(
        with(|d| d.loss = 1.5),
        Err(FaultConfigError::Probability {
            dir: "tx",
            field: "loss",
            value: 1.5
        })
    );
    assert!(matches!(
        with(|d| d.corrupt = -0.1),
        Err(FaultConfigError::Probability {
            field: "corrupt",
            ..
        })
    ));
    assert!(matches!(
        with(|d| d.duplicate = f64::NAN),
        Err(FaultConfigError::Probability {
            field: "duplicate",
            ..
        })
    ));
    assert!(matches!(
        with(|d| d.reorder = f64::INFINITY),
        Err(FaultConfigError::Probability {
            field: "reorder",
            ..
        })
    ));
    assert_eq!(
        with(|d| {
            d.reorder = 0.1;
            d.reorder_gap = 0;
            d.reorder_timeout_us = 0;
        }),
        Err(FaultConfigError::ReorderNeverReleased { dir: "tx" })
    );
    let e = with(|d| d.loss = 2.0).unwrap_err().to_string();
    assert!(
        e.contains("tx.loss") && e.contains("between 0 and 1"),
        "{e}"
    );
    let mut c = FaultConfig::default();
    c.rx.loss = f64::NAN;
    assert!(FaultPort::new(Loop::default(), c).is_err());
}

#[test]
fn config_deserializes_with_defaults() {
    let c: FaultConfig = serde_json::from_str(
        r#"{"seed": 7, "rx": {"loss": 0.01}, "tx": {"reorder": 0.02, "delay_us": 500}}"#,
    )
    .unwrap();
    assert_eq!(c.seed, 7);
    assert_eq!(c.rx.loss, 0.01);
    assert_eq!(c.tx.reorder_gap, 3);
    assert_eq!(c.tx.delay_us, 500);
    assert!(c.validate().is_ok());
    assert!(serde_json::from_str::<FaultConfig>(r#"{"rx": {"lose": 0.1}}"#).is_err());
    assert_eq!(
        serde_json::from_str::<FaultConfig>("{}").unwrap(),
        FaultConfig::default()
    );
}
