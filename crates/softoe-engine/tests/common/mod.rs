//! A testbed with the softoe engine on a TAP and Linux behind a bridge.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use std::path::PathBuf;

use softoe_engine::services::{Reports, Service};
use softoe_engine::{
    App, Engine, EngineConfig, EngineCounters, Snapshot, StopHandle, TapOffloads, TapPort,
};
use softoe_stack::StackConfig;
use softoe_testbed::{Netns, NsThread, Testbed};
use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};

pub const ENGINE_IP: Ipv4Addr = Ipv4Addr::new(10, 7, 0, 1);
pub const LINUX_IP: Ipv4Addr = Ipv4Addr::new(10, 7, 0, 2);

static N: AtomicU32 = AtomicU32::new(0);

std::thread_local! {
    /// The bed the current test thread started last (control socket and
    /// Linux's namespace), for [`describe_current`].
    static CURRENT: std::cell::RefCell<Option<(PathBuf, String)>> =
        const { std::cell::RefCell::new(None) };
}

/// What the engine and Linux say of their connections now, for a test
/// that gives up waiting: the engine's `softoe stat` (connections,
/// sessions, counters) and `ss -tinm` in Linux's namespace. Empty when
/// this thread has no bed.
pub fn describe_current() -> String {
    CURRENT.with(|c| {
        c.borrow()
            .as_ref()
            .map_or_else(String::new, |(control, ns)| {
                let stat = softoe_engine::control::query(control).map_or_else(
                    |e| format!("softoe stat failed: {e}"),
                    |s| format!("{s:#?}"),
                );
                let ss = Netns::named(ns)
                    .command("ss")
                    .args(["-tinmH"])
                    .output()
                    .map_or_else(
                        |e| format!("ss failed: {e}"),
                        |o| String::from_utf8_lossy(&o.stdout).into_owned(),
                    );
                format!("--- the engine (softoe stat) ---\n{stat}\n--- Linux (ss -tinm) ---\n{ss}")
            })
    })
}

pub struct Bed {
    pub tb: Testbed,
    pub sw: Netns,
    pub linux: Netns,
    pub tap: String,
    /// Sockets on the engine, from the test's threads.
    pub app: App,
    /// The engine's control socket.
    pub control: PathBuf,
    /// Where host programs attach (when `Options::host`).
    pub host: PathBuf,
    stop: Option<StopHandle>,
    engine: Option<NsThread<Result<EngineCounters, String>>>,
}

pub struct Options {
    pub offloads: TapOffloads,
    pub mtu: usize,
    pub engine: EngineConfig,
    /// Serve host programs (the host interface) on a socket of its own.
    pub host: bool,
    /// Changes to the stack's configuration, made last.
    pub stack: fn(&mut StackConfig),
}

impl Default for Options {
    fn default() -> Options {
        Options {
            offloads: TapOffloads::default(),
            mtu: 1500,
            engine: EngineConfig::default(),
            host: false,
            stack: |_| {},
        }
    }
}

impl Bed {
    /// Builds the testbed and starts the engine with `services`.
    pub fn start(opts: Options, services: Vec<Box<dyn Service>>) -> Bed {
        let mut tb = Testbed::new().unwrap();
        tb.deadline(softoe_testbed::test_deadline());
        let sw = tb.netns("sw").unwrap();
        let linux = tb.netns("lx").unwrap();
        tb.bridge(&sw, "br0").unwrap();
        tb.mtu(&sw, "br0", opts.mtu).unwrap();
        tb.veth_to_bridge(&linux, "eth0", &sw, "br0").unwrap();
        tb.mtu(&linux, "eth0", opts.mtu).unwrap();
        tb.addr(&linux, "eth0", &format!("{LINUX_IP}/24")).unwrap();
        // The bridge-side veth must carry the same MTU.
        for line in sw
            .ip(&["-o", "link", "show", "master", "br0"])
            .unwrap()
            .lines()
        {
            if let Some(dev) = line
                .split(':')
                .nth(1)
                .map(|s| s.trim().split('@').next().unwrap_or("").to_string())
            {
                tb.mtu(&sw, &dev, opts.mtu).unwrap();
            }
        }
        let n = N.fetch_add(1, Ordering::Relaxed);
        let tap = format!("sotap{n}");
        let control =
            std::env::temp_dir().join(format!("softoe-test-{}-{n}.sock", std::process::id()));
        let (tx, rx) = mpsc::channel();
        let tap_name = tap.clone();
        let (offloads, mtu, mut ecfg, tune) = (opts.offloads, opts.mtu, opts.engine, opts.stack);
        // SOFTOE_TEST_PCAP=FILE records the engine's frames in any test
        // (one engine at a time: the last test run writes the file).
        if ecfg.pcap.is_none() {
            ecfg.pcap = std::env::var_os("SOFTOE_TEST_PCAP").map(Into::into);
        }
        ecfg.control = Some(control.clone());
        let host =
            std::env::temp_dir().join(format!("softoe-host-{}-{n}.sock", std::process::id()));
        let host_service = opts
            .host
            .then(|| {
                softoe_engine::host::HostService::new(softoe_engine::host::HostConfig {
                    path: host.clone(),
                    device: Some(tap.clone()),
                    ..Default::default()
                })
            })
            .transpose()
            .unwrap();
        let (app, app_service) = softoe_engine::app::channel().unwrap();
        let engine = sw
            .spawn(move || -> Result<EngineCounters, String> {
                let port = TapPort::open(&tap_name, offloads, mtu).map_err(|e| e.to_string())?;
                let mut cfg = StackConfig::new(
                    EthernetAddress([2, 0x50, 0, 0, 0, 1]),
                    Ipv4Cidr::new(Ipv4Address(ENGINE_IP.octets()), 24).unwrap(),
                );
                cfg.seed = 1;
                cfg.tcp.rx_buffer = 1 << 20;
                cfg.tcp.tx_buffer = 4 << 20;
                cfg.tcp.tx_max_chunks = 4096;
                tune(&mut cfg);
                let mut e = Engine::new(cfg, port, ecfg).map_err(|e| e.to_string())?;
                e.add_service(Box::new(app_service));
                if let Some(h) = host_service {
                    e.watch_sessions(h.stats());
                    e.add_service(Box::new(h));
                }
                for s in services {
                    e.add_service(s);
                }
                tx.send(e.stop_handle()).map_err(|e| e.to_string())?;
                e.run().map_err(|e| e.to_string())?;
                Ok(*e.counters())
            })
            .unwrap();
        let stop = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("engine started");
        tb.attach(&sw, &tap, "br0").unwrap();
        tb.mtu(&sw, &tap, opts.mtu).unwrap();
        CURRENT.with(|c| *c.borrow_mut() = Some((control.clone(), linux.name().to_string())));
        Bed {
            tb,
            sw,
            linux,
            tap,
            app,
            control,
            host,
            stop: Some(stop),
            engine: Some(engine),
        }
    }

    /// Starts another service on the running engine.
    pub fn add(&self, s: Box<dyn Service>) {
        assert!(
            self.stop.as_ref().expect("running").add_service(s).is_ok(),
            "engine gone"
        );
    }

    /// What `softoe stat` would show now.
    pub fn snapshot(&self) -> Snapshot {
        softoe_engine::control::query(&self.control).expect("control socket answers")
    }

    /// Stops the engine and returns its counters.
    pub fn stop(&mut self) -> EngineCounters {
        if let Some(s) = self.stop.take() {
            s.stop();
        }
        self.engine
            .take()
            .map(|t| t.join().unwrap().unwrap())
            .unwrap_or_default()
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        CURRENT.with(|c| {
            let mut c = c.borrow_mut();
            if c.as_ref().is_some_and(|(p, _)| *p == self.control) {
                *c = None;
            }
        });
        if let Some(s) = self.stop.take() {
            s.stop();
        }
        if let Some(t) = self.engine.take() {
            let _ = t.join();
        }
    }
}

pub fn reports() -> Reports {
    std::sync::Arc::new(std::sync::Mutex::new(Vec::new()))
}

/// Waits until `f` holds (polling), or panics after `secs`.
pub fn wait_for(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let end = std::time::Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(
            std::time::Instant::now() < end,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The engine's pattern (region 0) repeated, as a stream: its SHA-256 over `n` bytes.
pub fn pattern_sha(n: u64) -> String {
    let p = softoe_engine::memory::pattern(4 << 20, 1);
    let mut h = Sha256::new();
    let mut left = n;
    while left > 0 {
        let k = left.min(p.len() as u64) as usize;
        h.update(&p[..k]);
        left -= k as u64;
    }
    hex(&h.finalize())
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Deterministic bytes for Linux to send.
pub fn linux_bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 24) as u8 ^ seed)
        .collect()
}

pub fn engine_addr(port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(ENGINE_IP, port)
}

pub fn linux_addr(port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(LINUX_IP, port)
}

/// Writes `n` deterministic bytes (seeded) to `w` in 256 KiB chunks without
/// holding them all; returns their SHA-256.
pub fn send_stream(w: &mut impl std::io::Write, n: u64, seed: u8) -> String {
    let mut h = Sha256::new();
    let mut chunk = linux_bytes(256 * 1024, seed);
    let mut left = n;
    let mut round = 0u8;
    while left > 0 {
        let k = left.min(chunk.len() as u64) as usize;
        // Vary each chunk so a misplaced chunk shows in the hash.
        chunk[0] = round;
        round = round.wrapping_add(1);
        h.update(&chunk[..k]);
        w.write_all(&chunk[..k]).unwrap();
        left -= k as u64;
    }
    hex(&h.finalize())
}

/// Reads `r` to its end; returns the byte count and SHA-256.
pub fn hash_stream(r: &mut impl std::io::Read) -> (u64, String) {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = r.read(&mut buf).unwrap();
        if k == 0 {
            break;
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
    (n, hex(&h.finalize()))
}

/// SHA-256 of `b`, hex.
pub fn sha256(b: &[u8]) -> String {
    hex(&Sha256::digest(b))
}

/// Holds the engine on its way to sleep while closed: a test can then let
/// a program post commands and exit before the engine reads any of them.
pub struct Gate(
    std::sync::Arc<(std::sync::Mutex<GateState>, std::sync::Condvar)>,
    Option<softoe_stack::Instant>,
);

#[derive(Default, PartialEq)]
enum GateState {
    #[default]
    Open,
    Closing,
    Closed,
}

impl Gate {
    /// The handle the test keeps, and the service to add to the engine.
    pub fn new() -> (Gate, Gate) {
        let g = std::sync::Arc::new(Default::default());
        (Gate(std::sync::Arc::clone(&g), None), Gate(g, None))
    }

    /// Returns once the engine is held.
    pub fn close(&self) {
        let (m, cv) = &*self.0;
        let mut s = m.lock().unwrap();
        *s = GateState::Closing;
        while *s != GateState::Closed {
            s = cv.wait(s).unwrap();
        }
    }

    /// Lets the engine go on, as from a sleep.
    pub fn open(&self) {
        let (m, cv) = &*self.0;
        *m.lock().unwrap() = GateState::Open;
        cv.notify_all();
    }
}

impl Service for Gate {
    fn name(&self) -> &str {
        "gate"
    }

    fn start(
        &mut self,
        _: softoe_stack::Instant,
        _: &mut softoe_stack::Stack,
        _: &mut softoe_engine::Memory,
    ) -> Result<(), String> {
        Ok(())
    }

    fn step(
        &mut self,
        now: softoe_stack::Instant,
        _: &mut softoe_stack::Stack,
        _: &mut softoe_engine::Memory,
    ) -> bool {
        self.1 = Some(now);
        false
    }

    // Held where the engine goes to sleep (the host interface has told
    // programs it sleeps); released, it wakes as from a sleep.
    fn before_sleep(&mut self) -> bool {
        let (m, cv) = &*self.0;
        let mut s = m.lock().unwrap();
        if *s != GateState::Closing {
            return false;
        }
        *s = GateState::Closed;
        cv.notify_all();
        while *s == GateState::Closed {
            s = cv.wait(s).unwrap();
        }
        true
    }

    // Turns come at least this often, so a close takes effect soon even
    // while the engine sleeps.
    fn wake_at(&self) -> Option<softoe_stack::Instant> {
        self.1.map(|t| t + Duration::from_millis(1))
    }
}
