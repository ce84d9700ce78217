//! The emulation knobs seen from a host program: a real program attaches
//! over the host interface (no network, no root needed), and the engine's
//! counters show every ring access it caused, delayed when asked, and its
//! commands timed when profiling.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use softoe_engine::host::{HostConfig, HostService};
use softoe_engine::{Engine, EngineConfig, EngineCounters, Memory, Port, RxFrame};
use softoe_host::Client;
use softoe_stack::{DeviceCaps, StackConfig, TxFrame};
use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};

/// A port with nothing on it: the program talks to the engine only.
#[derive(Debug)]
struct Null;

impl Port for Null {
    fn caps(&self) -> DeviceCaps {
        DeviceCaps::default()
    }
    fn send(&mut self, _f: &TxFrame<'_>, _mem: &Memory) -> io::Result<bool> {
        Ok(true)
    }
    fn recv(&mut self, _buf: &mut [u8]) -> io::Result<Option<RxFrame>> {
        Ok(None)
    }
    fn raw_fd(&self) -> RawFd {
        -1
    }
    fn describe(&self) -> String {
        "null".into()
    }
}

static N: AtomicU32 = AtomicU32::new(0);

/// Runs an engine configured `cfg` with the host interface, has one
/// program make `nops` round trips, stops it; its counters.
fn round_trips(cfg: EngineConfig, nops: u64) -> EngineCounters {
    let n = N.fetch_add(1, Ordering::Relaxed);
    let path: PathBuf =
        std::env::temp_dir().join(format!("softoe-emulate-{}-{n}.sock", std::process::id()));
    let host = HostService::new(HostConfig {
        path: path.clone(),
        ..HostConfig::default()
    })
    .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let engine = std::thread::spawn(move || {
        let stack = StackConfig::new(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            Ipv4Cidr::new(Ipv4Address([10, 9, 0, 1]), 24).unwrap(),
        );
        let mut e = Engine::new(stack, Null, cfg).unwrap();
        e.add_service(Box::new(host));
        tx.send(e.stop_handle()).unwrap();
        e.run().unwrap();
        *e.counters()
    });
    let stop = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    {
        let c = Client::attach_to(&path).unwrap();
        for _ in 0..nops {
            c.nop().unwrap();
        }
    }
    stop.stop();
    engine.join().unwrap()
}

/// Each round trip is at least two accesses (the command taken, its
/// completion published); with a delay each of them waited at least that
/// long; with profiling every command is one run of the `cmd` stage.
/// Without the knobs accesses are still counted and nothing waits.
#[test]
fn a_program_s_round_trips_are_counted_delayed_and_timed() {
    const NOPS: u64 = 200;
    let delay = Duration::from_micros(2);
    let mut cfg = EngineConfig::default()
        .with_access_delay(delay)
        .unwrap()
        .with_speed(0.5)
        .unwrap();
    cfg.profile_stages = true;
    let c = round_trips(cfg, NOPS);
    assert!(c.ring_accesses >= 2 * NOPS, "{c:?}");
    assert!(c.access_delay_nanos >= c.ring_accesses * delay.as_nanos() as u64);
    assert_eq!(c.stages.cmd.count, NOPS);
    assert_eq!(c.stages.cmd.bytes, 0, "a NOP moves no payload");
    assert_eq!(c.stages.serve.count, 0, "a NOP names no socket to serve");
    // Slowed: the work the commands took was paid again, and the waits
    // at the accesses were not counted as work.
    assert!(c.work_nanos > 0);
    let diff = c.slowdown_nanos.abs_diff(c.work_nanos) as f64;
    assert!(diff <= 0.05 * c.work_nanos as f64, "{c:?}");

    let plain = round_trips(EngineConfig::default(), NOPS);
    assert!(plain.ring_accesses >= 2 * NOPS, "{plain:?}");
    assert_eq!(plain.access_delay_nanos, 0);
    assert_eq!((plain.work_nanos, plain.slowdown_nanos), (0, 0));
    assert_eq!(plain.stages, Default::default());
}
