//! The engine's tests' side of `softoe_engine::testing`'s [`Bed`] (the
//! engine on a TAP and Linux behind a bridge): its calls fail the test
//! instead of returning errors; and helpers only these tests use.

// Each test binary uses some of what is here.
#![allow(dead_code, unused_imports)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddrV4;
use std::ops::{Deref, DerefMut};
use std::time::Duration;

use sha2::{Digest, Sha256};

use softoe_engine::services::{Reports, Service};
use softoe_engine::testing;
use softoe_engine::{EngineCounters, Snapshot};

pub use softoe_engine::testing::{BedOptions as Options, ENGINE_IP, LINUX_IP, hex, sha256};

/// A [`testing::Bed`] whose calls fail the test instead of returning
/// errors; its fields through `Deref`.
pub struct Bed(testing::Bed);

impl Bed {
    /// Builds the testbed and starts the engine with `services`.
    pub fn start(opts: Options, services: Vec<Box<dyn Service>>) -> Bed {
        Bed(testing::Bed::start(opts, services).unwrap())
    }

    /// Starts another service on the running engine.
    pub fn add(&self, s: Box<dyn Service>) {
        assert!(self.0.add(s).is_ok(), "engine gone");
    }

    /// What `softoe stat` would show now.
    pub fn snapshot(&self) -> Snapshot {
        self.0.snapshot().expect("control socket answers")
    }

    /// Stops the engine and returns its counters.
    pub fn stop(&mut self) -> EngineCounters {
        self.0.stop().unwrap()
    }
}

impl Deref for Bed {
    type Target = testing::Bed;

    fn deref(&self) -> &testing::Bed {
        &self.0
    }
}

impl DerefMut for Bed {
    fn deref_mut(&mut self) -> &mut testing::Bed {
        &mut self.0
    }
}

/// Waits until `f` holds (polling), or panics after `secs`.
pub fn wait_for(secs: u64, what: &str, f: impl FnMut() -> bool) {
    testing::wait_for(secs, what, f).unwrap_or_else(|e| panic!("{e}"));
}

pub fn reports() -> Reports {
    std::sync::Arc::new(std::sync::Mutex::new(Vec::new()))
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
    ) -> Result<(), softoe_engine::services::ServiceError> {
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
