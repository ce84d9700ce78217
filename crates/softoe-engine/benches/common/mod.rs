//! A running engine with the host interface, for benchmarks: the smallest
//! part of `softoe_engine::testing::Bed` a program attached over shared memory needs.
//!
//! The engine needs a port, so it runs on a TAP device in a namespace of its
//! own (a `softoe-testbed` namespace, removed on drop). The TAP is left
//! down and joins no bridge: no frame ever reaches the engine, so the only
//! thing that wakes it is the benchmark's commands.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use softoe_engine::host::{HostConfig, HostService};
use softoe_engine::{Engine, EngineConfig, Snapshot, StopHandle, TapOffloads, TapPort};
use softoe_stack::StackConfig;
use softoe_testbed::{NsThread, Testbed};
use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};

pub use softoe_testbed::is_root;

static N: AtomicU32 = AtomicU32::new(0);

/// The core the engine thread runs on; the benchmark's own thread takes
/// [`BENCH_CPU`].
pub const ENGINE_CPU: usize = 1;
/// The core the benchmark's thread (the program's side) runs on.
pub const BENCH_CPU: usize = 0;

/// Pins the calling thread to `cpu`, as softoe's engine core is meant to
/// be its own; says so on stderr if it cannot (a machine with one core).
pub fn pin(cpu: usize) {
    // SAFETY: `set` is a plain bit set on our stack (all zeroes is a valid
    // value); CPU_ZERO and CPU_SET write inside it (CPU_SET's index into
    // it is bounds-checked); the call reads exactly
    // `size_of::<cpu_set_t>()` bytes from it, and pid 0 names the calling
    // thread.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &raw const set)
    };
    if r != 0 {
        eprintln!(
            "ring: cannot pin a thread to core {cpu}: {}; it runs where the scheduler puts it",
            std::io::Error::last_os_error()
        );
    }
}

/// An engine thread serving host programs on [`EngineBed::host`]; stopped
/// and its namespace removed on drop.
pub struct EngineBed {
    /// Where programs attach.
    pub host: PathBuf,
    /// The engine's control socket (`softoe stat`).
    control: PathBuf,
    stop: Option<StopHandle>,
    engine: Option<NsThread<Result<(), String>>>,
    // Dropped last: the namespace goes once the engine has stopped.
    _tb: Testbed,
}

impl EngineBed {
    /// Starts an engine that spins `spin` waiting for work before it sleeps
    /// (`EngineConfig::spin`), on [`ENGINE_CPU`]; everything else is the
    /// default.
    pub fn start(spin: Duration) -> EngineBed {
        let mut tb = Testbed::new().expect("testbed");
        let ns = tb.netns("bench").expect("namespace");
        let n = N.fetch_add(1, Ordering::Relaxed);
        let tap = format!("sorb{n}");
        let host =
            std::env::temp_dir().join(format!("softoe-bench-ring-{}-{n}.sock", std::process::id()));
        let control = std::env::temp_dir().join(format!(
            "softoe-bench-ring-{}-{n}.control",
            std::process::id()
        ));
        let service = HostService::new(HostConfig {
            path: host.clone(),
            ..HostConfig::default()
        })
        .expect("host interface socket");
        let mut ecfg = EngineConfig::default();
        ecfg.spin = spin;
        ecfg.control = Some(control.clone());
        let (tx, rx) = mpsc::channel();
        let engine = ns
            .spawn(move || -> Result<(), String> {
                pin(ENGINE_CPU);
                let port = TapPort::open(&tap, TapOffloads::default(), 1500)
                    .map_err(|e| format!("TAP {tap}: {e}"))?;
                let cfg = StackConfig::new(
                    EthernetAddress([2, 0x50, 0, 0, 0, 1]),
                    Ipv4Cidr::new(Ipv4Address([10, 7, 0, 1]), 24).ok_or("bad address")?,
                );
                let mut e = Engine::new(cfg, port, ecfg).map_err(|e| e.to_string())?;
                e.watch_sessions(service.stats());
                e.add_service(Box::new(service));
                tx.send(e.stop_handle()).map_err(|e| e.to_string())?;
                e.run().map_err(|e| e.to_string())
            })
            .expect("engine thread");
        let Ok(stop) = rx.recv_timeout(Duration::from_secs(10)) else {
            let why = engine
                .join()
                .map_or_else(|e| e.to_string(), |r| format!("{r:?}"));
            panic!("the engine did not start: {why}");
        };
        EngineBed {
            host,
            control,
            stop: Some(stop),
            engine: Some(engine),
            _tb: tb,
        }
    }
}

impl EngineBed {
    /// What `softoe stat` would show now: the engine's counters and each
    /// session's.
    pub fn snapshot(&self) -> Snapshot {
        softoe_engine::control::query(&self.control).expect("control socket answers")
    }
}

impl Drop for EngineBed {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            s.stop();
        }
        if let Some(t) = self.engine.take() {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => eprintln!("engine stopped with an error: {e}"),
                Err(e) => eprintln!("engine thread: {e}"),
            }
        }
    }
}
