//! Steering the kernel's work for the frames the engine sends (RPS on its
//! TAP's queue, `softoe_engine::steer`) on the real testbed: the engine's
//! thread is in the switch's namespace, so it reaches the queue's
//! `rps_cpus` through a sysfs of that namespace; the mask names every core
//! but the engine's while it steers, and Linux's bytes arrive intact
//! through it. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::Read;
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use common::*;
use softoe_engine::services::Discard;
use softoe_engine::{EngineConfig, Steer};

/// The TAP queue's RPS mask as the switch's namespace shows it: bits set.
fn mask_bits(bed: &Bed) -> u32 {
    let path = format!("/sys/class/net/{}/queues/rx-0/rps_cpus", bed.tap);
    let out = bed.sw.command("cat").arg(&path).output().unwrap();
    assert!(out.status.success(), "cat {path}: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .split(',')
        .map(|g| u32::from_str_radix(g, 16).unwrap().count_ones())
        .sum()
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// 32 MiB from Linux into the engine's discard, hashed on both sides.
fn linux_sends(bed: &Bed, reports: &softoe_engine::services::Reports) {
    const N: u64 = 32 << 20;
    let want = bed
        .linux
        .run(move || {
            let mut s =
                TcpStream::connect_timeout(&engine_addr(9).into(), Duration::from_secs(5)).unwrap();
            let sha = send_stream(&mut s, N, 3);
            s.shutdown(Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap();
            sha
        })
        .unwrap();
    wait_for(60, "the discard report", || {
        !reports.lock().unwrap().is_empty()
    });
    let r = reports.lock().unwrap().remove(0);
    assert_eq!((r.received, r.sha256.as_str()), (N, want.as_str()));
}

fn bed(steer: Steer) -> (Bed, softoe_engine::services::Reports) {
    let got = reports();
    let mut engine = EngineConfig::default();
    engine.steer = steer;
    let opts = Options {
        engine,
        ..Options::default()
    };
    let bed = Bed::start(opts, vec![Box::new(Discard::new(9, got.clone()))]);
    (bed, got)
}

#[test]
fn a_steering_engine_masks_every_core_but_its_own_and_puts_the_mask_back() {
    if cores() < 2 {
        eprintln!("one core: nothing to steer to (skipped)");
        return;
    }
    let (mut bed, got) = bed(Steer::On);
    wait_for(10, "the engine to steer", || mask_bits(&bed) > 0);
    assert_eq!(
        mask_bits(&bed) as usize,
        cores() - 1,
        "every core but the engine's"
    );
    linux_sends(&bed, &got);
    assert_eq!(mask_bits(&bed) as usize, cores() - 1);
    let c = bed.stop();
    assert!(c.steer_switches >= 1 && c.steered_nanos > 0, "{c:?}");
    // (The TAP went with the engine; putting a mask back is the unit
    // test `steer::tests::the_queues_own_mask_is_put_back`.)
}

#[test]
fn an_engine_told_not_to_steer_leaves_the_mask_alone() {
    let (mut bed, got) = bed(Steer::Off);
    linux_sends(&bed, &got);
    assert_eq!(mask_bits(&bed), 0);
    let c = bed.stop();
    assert_eq!((c.steer_switches, c.steered_nanos), (0, 0));
}
