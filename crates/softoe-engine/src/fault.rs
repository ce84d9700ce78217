//! A seeded fault-injecting wrapper around any port.
//!
//! The kernels this project runs on have no `netem`, so a real-wire test that
//! wants a bad path gets one here: [`FaultPort`] sits between the engine and
//! its real port and, independently in each direction, loses, duplicates,
//! reorders, corrupts and delays frames. The decisions come from a small PRNG
//! ([`softoe_stack::rand::Rand`]) started from [`FaultConfig::seed`], with a
//! separate stream per direction and a fixed number of draws per frame, so
//! the same seed and the same frames give the same faults; changing one
//! probability does not reshuffle the others' choices.
//!
//! Per frame, in this order: **loss** (the frame vanishes), **corruption**
//! (1 to 3 distinct bits flipped in one byte at a random offset),
//! **duplication** (a second copy follows the first), then **reordering**
//! (the frame is held back until [`DirectionFaults::reorder_gap`] later
//! frames have passed, or [`DirectionFaults::reorder_timeout_us`] has gone
//! by) or **delay** ([`DirectionFaults::delay_us`] plus a uniform jitter;
//! with jitter, delayed frames may overtake each other).
//!
//! ```
//! use softoe_engine::{DirectionFaults, FaultConfig, FaultPort, Port};
//! # fn wrap<P: Port>(port: P) -> Result<FaultPort<P>, softoe_engine::FaultConfigError> {
//! let cfg = FaultConfig {
//!     seed: 7,
//!     rx: DirectionFaults { loss: 0.01, ..DirectionFaults::default() },
//!     tx: DirectionFaults { reorder: 0.02, delay_us: 500, ..DirectionFaults::default() },
//! };
//! let port = FaultPort::new(port, cfg)?;
//! // Hand `port` to `Engine::new`; read `port.counters()` afterwards.
//! # Ok(port)
//! # }
//! ```
//!
//! ## Costs and limits (it is a test tool)
//!
//! - A transmitted frame that is held (delayed, reordered) or corrupted is
//!   **copied** out of [`Memory`]: it cannot be sent by reference later, and
//!   the application's bytes must not be flipped. Unaffected frames pass
//!   through by reference, and a duplicate that is not held is simply sent
//!   twice.
//! - Held frames go out only when the wrapper is called: [`Port::recv`]
//!   releases due frames of both directions, [`Port::send`] releases due
//!   transmit frames first. Callers that sleep should wake at
//!   [`FaultPort::next_due`]; a caller that does not (the engine today sleeps
//!   at most its `max_sleep`) makes delays coarser, never lost.
//! - A corrupted frame is only useful if someone checks a checksum after
//!   the corruption. On receive the wrapper clears
//!   [`RxMeta::csum_verified`] of a corrupted frame, so the stack checks it
//!   itself. On transmit a checksum the inner port would compute would cover
//!   the flipped bits, so while transmit corruption is configured the
//!   wrapper reports no checksum offload and no TSO in [`Port::caps`]: the
//!   stack then computes every checksum before the corruption, as on a wire.
//! - The engine's counters and pcap see frames as the stack sent and before
//!   the wrapper's faults on transmit, after them on receive.

use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use softoe_stack::rand::Rand;
use softoe_stack::{DeviceCaps, PayloadRef, RxMeta, TxFrame, TxOffload};

use crate::memory::Memory;
use crate::port::{Port, RxFrame};

/// Faults in one direction. Probabilities are fractions in `0..=1`, per
/// frame; times are in microseconds.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DirectionFaults {
    /// Probability that a frame is lost.
    pub loss: f64,
    /// Probability that a frame is sent (or received) twice.
    pub duplicate: f64,
    /// Probability that a frame is held back and overtaken.
    pub reorder: f64,
    /// A reordered frame is released after this many later frames have
    /// passed (0: only the timeout releases it).
    pub reorder_gap: u32,
    /// …or after this long, whichever comes first (0: only the gap releases
    /// it; the frame then waits for traffic).
    pub reorder_timeout_us: u64,
    /// Probability that a frame has 1 to 3 bits flipped in one byte.
    pub corrupt: f64,
    /// Added delay for every frame.
    pub delay_us: u64,
    /// Extra delay drawn uniformly from `0..=jitter_us` per frame.
    pub jitter_us: u64,
}

impl Default for DirectionFaults {
    fn default() -> DirectionFaults {
        DirectionFaults {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_gap: 3,
            reorder_timeout_us: 1_000,
            corrupt: 0.0,
            delay_us: 0,
            jitter_us: 0,
        }
    }
}

impl DirectionFaults {
    /// No faults at all.
    pub fn none() -> DirectionFaults {
        DirectionFaults::default()
    }

    fn validate(&self, dir: &'static str) -> Result<(), FaultConfigError> {
        for (field, value) in [
            ("loss", self.loss),
            ("duplicate", self.duplicate),
            ("reorder", self.reorder),
            ("corrupt", self.corrupt),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(FaultConfigError::Probability { dir, field, value });
            }
        }
        if self.reorder > 0.0 && self.reorder_gap == 0 && self.reorder_timeout_us == 0 {
            return Err(FaultConfigError::ReorderNeverReleased { dir });
        }
        Ok(())
    }

    /// Whether any fault is configured.
    pub fn is_active(&self) -> bool {
        self.loss > 0.0
            || self.duplicate > 0.0
            || self.reorder > 0.0
            || self.corrupt > 0.0
            || self.delay_us > 0
            || self.jitter_us > 0
    }
}

/// What a [`FaultPort`] does. Read from TOML as
///
/// ```toml
/// seed = 7
/// [rx]
/// loss = 0.01
/// [tx]
/// reorder = 0.02
/// reorder_gap = 3
/// delay_us = 500
/// ```
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FaultConfig {
    /// Seeds the decisions: same seed, same frames, same faults.
    pub seed: u64,
    /// Faults on frames the inner port receives, before the engine sees them.
    pub rx: DirectionFaults,
    /// Faults on frames the engine sends, before the inner port sends them.
    pub tx: DirectionFaults,
}

impl FaultConfig {
    /// Checks every probability is a number in `0..=1` and that reordered
    /// frames are always released.
    pub fn validate(&self) -> Result<(), FaultConfigError> {
        self.rx.validate("rx")?;
        self.tx.validate("tx")
    }
}

/// A [`FaultConfig`] that makes no sense.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum FaultConfigError {
    /// A probability is NaN or outside `0..=1`.
    #[error("fault {dir}.{field} = {value}: a probability must be a fraction between 0 and 1")]
    Probability {
        /// `rx` or `tx`.
        dir: &'static str,
        /// Which field.
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// Reordering is on but neither a gap nor a timeout would release frames.
    #[error("fault {dir}.reorder > 0 needs reorder_gap > 0 or reorder_timeout_us > 0")]
    ReorderNeverReleased {
        /// `rx` or `tx`.
        dir: &'static str,
    },
}

/// Faults injected in one direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct DirectionCounters {
    /// Frames that met the wrapper.
    pub frames: u64,
    /// Frames lost.
    pub lost: u64,
    /// Frames duplicated (one extra copy each).
    pub duplicated: u64,
    /// Frames held back to be overtaken.
    pub reordered: u64,
    /// Frames corrupted.
    pub corrupted: u64,
    /// Frames delayed.
    pub delayed: u64,
    /// Held frames released (reordered or delayed, duplicates included).
    pub released: u64,
    /// Held frames that could not be delivered after all (a receive buffer
    /// too small for a held frame, or a send error).
    pub failed: u64,
}

/// Faults injected so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct FaultCounters {
    /// On receive.
    pub rx: DirectionCounters,
    /// On transmit.
    pub tx: DirectionCounters,
}

impl std::fmt::Display for DirectionCounters {
    /// `1450 frames: 14 lost, 2 duplicated, 3 reordered, 0 corrupted, 0
    /// delayed` (and how many held frames failed, if any did).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} frames: {} lost, {} duplicated, {} reordered, {} corrupted, {} delayed",
            self.frames, self.lost, self.duplicated, self.reordered, self.corrupted, self.delayed
        )?;
        if self.failed > 0 {
            write!(f, ", {} held frames failed", self.failed)?;
        }
        Ok(())
    }
}

impl std::fmt::Display for FaultCounters {
    /// Both directions: `rx 1450 frames: 14 lost, …; tx …`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rx {}; tx {}", self.rx, self.tx)
    }
}

/// The fate of one frame, drawn before it is touched.
#[derive(Clone, Copy, Debug)]
struct Fate {
    lose: bool,
    /// `(byte offset seed, xor mask)` if corrupted.
    corrupt: Option<(u64, u8)>,
    duplicate: bool,
    reorder: bool,
    /// Added delay.
    delay: Duration,
}

/// One direction's generator and settings.
#[derive(Debug)]
struct Dice {
    rng: Rand,
    cfg: DirectionFaults,
}

impl Dice {
    fn chance(&mut self, p: f64) -> bool {
        // 53 random bits as a fraction in [0, 1): p = 0 never, p = 1 always.
        let x = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        x < p
    }

    /// Draws the same number of values for every frame, whatever the
    /// settings, so one probability's value never shifts another's choices.
    fn roll(&mut self) -> Fate {
        let lose = self.chance(self.cfg.loss);
        let corrupt = self.chance(self.cfg.corrupt);
        let detail = self.rng.next_u64();
        let duplicate = self.chance(self.cfg.duplicate);
        let reorder = self.chance(self.cfg.reorder);
        let jitter = self.rng.next_u64();
        let jitter_us = match self.cfg.jitter_us {
            0 => 0,
            j => jitter % j.saturating_add(1),
        };
        Fate {
            lose,
            corrupt: corrupt.then(|| (detail & 0xffff_ffff, flip_mask(detail >> 32))),
            duplicate,
            reorder,
            delay: Duration::from_micros(self.cfg.delay_us.saturating_add(jitter_us)),
        }
    }
}

/// A mask with 1 to 3 distinct bits set, from random bits `r`.
fn flip_mask(r: u64) -> u8 {
    let want = 1 + (r % 3) as u32;
    let mut mask = 0u8;
    let mut bits = r >> 2;
    for _ in 0..10 {
        mask |= 1 << (bits & 7);
        bits >>= 3;
        if mask.count_ones() == want {
            return mask;
        }
    }
    // Ten draws repeating the same bits: fill from the bottom.
    let mut i = 0;
    while mask.count_ones() < want && i < 8 {
        mask |= 1 << i;
        i += 1;
    }
    mask
}

/// Flips `mask` in the byte of `frame` that `seed` picks.
fn corrupt(frame: &mut [u8], seed: u64, mask: u8) {
    if frame.is_empty() {
        return;
    }
    let i = (seed % frame.len() as u64) as usize;
    if let Some(b) = frame.get_mut(i) {
        *b ^= mask;
    }
}

/// When a held frame goes.
#[derive(Clone, Copy, Debug)]
struct Hold {
    /// Release at this time (delay, or reorder timeout).
    due: Option<Instant>,
    /// Release once this many more frames have passed (reordering).
    gap: Option<u32>,
}

impl Hold {
    fn ready(&self, now: Instant) -> bool {
        self.due.is_some_and(|t| t <= now) || self.gap == Some(0)
    }
}

/// A received frame held back.
#[derive(Debug)]
struct HeldRx {
    bytes: Vec<u8>,
    meta: RxMeta,
    hold: Hold,
}

/// A frame to send later, copied out of memory.
#[derive(Debug)]
struct HeldTx {
    header: Vec<u8>,
    /// The payload as region 0 of a memory of its own.
    payload: Memory,
    payload_len: u32,
    offload: TxOffload,
    priority: u8,
    hold: Hold,
}

impl HeldTx {
    fn send<P: Port>(&self, port: &mut P) -> io::Result<bool> {
        let refs = [PayloadRef::new(0, 0, self.payload_len)];
        let frame = TxFrame {
            header: &self.header,
            payload: if self.payload_len > 0 { &refs } else { &[] },
            offload: self.offload,
            priority: self.priority,
        };
        port.send(&frame, &self.payload)
    }
}

/// A port that injects seeded faults into another (see the [module
/// docs](self)).
#[derive(Debug)]
pub struct FaultPort<P: Port> {
    inner: P,
    cfg: FaultConfig,
    rx_dice: Dice,
    tx_dice: Dice,
    /// Received frames held back, in arrival order.
    rx_held: Vec<HeldRx>,
    /// Received frames ready to deliver, in order.
    rx_ready: VecDeque<HeldRx>,
    /// Frames to send later, in arrival order.
    tx_held: Vec<HeldTx>,
    counters: FaultCounters,
}

impl<P: Port> FaultPort<P> {
    /// Wraps `inner`; fails if `cfg` does not [validate](FaultConfig::validate).
    pub fn new(inner: P, cfg: FaultConfig) -> Result<FaultPort<P>, FaultConfigError> {
        cfg.validate()?;
        Ok(FaultPort {
            inner,
            rx_dice: Dice {
                rng: Rand::new(cfg.seed ^ 0x5258_5f66_6175_6c74),
                cfg: cfg.rx.clone(),
            },
            tx_dice: Dice {
                rng: Rand::new(cfg.seed ^ 0x5458_5f66_6175_6c74),
                cfg: cfg.tx.clone(),
            },
            cfg,
            rx_held: Vec::new(),
            rx_ready: VecDeque::new(),
            tx_held: Vec::new(),
            counters: FaultCounters::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &FaultConfig {
        &self.cfg
    }

    /// Faults injected so far.
    pub fn counters(&self) -> FaultCounters {
        self.counters
    }

    /// The wrapped port.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The wrapped port, mutably.
    pub fn inner_mut(&mut self) -> &mut P {
        &mut self.inner
    }

    /// Unwraps the port; frames still held are lost.
    pub fn into_inner(self) -> P {
        self.inner
    }

    /// Frames held in either direction (delayed, reordered or waiting to be
    /// delivered).
    pub fn held(&self) -> usize {
        self.rx_held.len() + self.rx_ready.len() + self.tx_held.len()
    }

    /// When the earliest held frame falls due: call [`Port::recv`] (or
    /// [`flush_tx`](Self::flush_tx)) then. `None` if no frame waits for a
    /// time (frames waiting only for later traffic have no deadline). A time
    /// in the past means now; received frames already due are reported so.
    pub fn next_due(&self) -> Option<Instant> {
        let held = self
            .rx_held
            .iter()
            .map(|h| h.hold)
            .chain(self.tx_held.iter().map(|h| h.hold));
        let mut due: Option<Instant> = None;
        for h in held {
            let t = if h.gap == Some(0) { None } else { h.due };
            if let Some(t) = t {
                due = Some(due.map_or(t, |d| d.min(t)));
            }
        }
        if !self.rx_ready.is_empty()
            || self.rx_held.iter().any(|h| h.hold.gap == Some(0))
            || self.tx_held.iter().any(|h| h.hold.gap == Some(0))
        {
            let now = Instant::now();
            due = Some(due.map_or(now, |d| d.min(now)));
        }
        due
    }

    fn hold_for(cfg: &DirectionFaults, fate: &Fate, now: Instant) -> Option<Hold> {
        if fate.reorder {
            let gap = (cfg.reorder_gap > 0).then_some(cfg.reorder_gap);
            let due = (cfg.reorder_timeout_us > 0)
                .then(|| now + Duration::from_micros(cfg.reorder_timeout_us) + fate.delay);
            Some(Hold { due, gap })
        } else if !fate.delay.is_zero() {
            Some(Hold {
                due: Some(now + fate.delay),
                gap: None,
            })
        } else {
            None
        }
    }

    // ---- receive -------------------------------------------------------------------

    /// One frame passed on the receive side: held frames waiting for a gap
    /// move one step nearer.
    fn rx_passed(&mut self) {
        for h in &mut self.rx_held {
            if let Some(g) = h.hold.gap.as_mut() {
                *g = g.saturating_sub(1);
            }
        }
    }

    /// Moves due received frames to the ready queue, in arrival order.
    fn rx_release(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.rx_held.len() {
            if self.rx_held.get(i).is_some_and(|h| h.hold.ready(now)) {
                let h = self.rx_held.remove(i);
                self.rx_ready.push_back(h);
            } else {
                i += 1;
            }
        }
    }

    /// [`Port::recv`] at time `now` (for tests with their own clock).
    pub fn recv_at(&mut self, now: Instant, buf: &mut [u8]) -> io::Result<Option<RxFrame>> {
        self.flush_tx(now)?;
        loop {
            self.rx_release(now);
            if let Some(h) = self.rx_ready.pop_front() {
                let Some(dst) = buf.get_mut(..h.bytes.len()) else {
                    self.counters.rx.failed += 1;
                    continue;
                };
                dst.copy_from_slice(&h.bytes);
                self.counters.rx.released += 1;
                self.rx_passed();
                return Ok(Some(RxFrame {
                    start: 0,
                    len: h.bytes.len(),
                    meta: h.meta,
                }));
            }
            let Some(mut f) = self.inner.recv(buf)? else {
                return Ok(None);
            };
            self.counters.rx.frames += 1;
            let fate = self.rx_dice.roll();
            if fate.lose {
                self.counters.rx.lost += 1;
                continue;
            }
            let Some(frame) = f
                .start
                .checked_add(f.len)
                .and_then(|end| buf.get_mut(f.start..end))
            else {
                // A port reporting a frame outside the buffer: pass it on
                // untouched and let the caller see it.
                return Ok(Some(f));
            };
            if let Some((seed, mask)) = fate.corrupt {
                corrupt(frame, seed, mask);
                // The port vouched for the frame as it was.
                f.meta.csum_verified = false;
                self.counters.rx.corrupted += 1;
            }
            let copies = if fate.duplicate {
                self.counters.rx.duplicated += 1;
                2
            } else {
                1
            };
            match Self::hold_for(&self.rx_dice.cfg, &fate, now) {
                Some(hold) => {
                    if fate.reorder {
                        self.counters.rx.reordered += 1;
                    } else {
                        self.counters.rx.delayed += 1;
                    }
                    for _ in 0..copies {
                        self.rx_held.push(HeldRx {
                            bytes: frame.to_vec(),
                            meta: f.meta,
                            hold,
                        });
                    }
                }
                None => {
                    if copies == 2 {
                        self.rx_ready.push_back(HeldRx {
                            bytes: frame.to_vec(),
                            meta: f.meta,
                            hold: Hold {
                                due: None,
                                gap: None,
                            },
                        });
                    }
                    self.rx_passed();
                    return Ok(Some(f));
                }
            }
        }
    }

    // ---- transmit ------------------------------------------------------------------

    fn tx_passed(&mut self) {
        for h in &mut self.tx_held {
            if let Some(g) = h.hold.gap.as_mut() {
                *g = g.saturating_sub(1);
            }
        }
    }

    /// Sends the transmit frames that are due at `now`, in arrival order.
    /// Returns whether all of them went (false: the inner port was busy and
    /// the rest wait). [`Port::recv`] and [`Port::send`] call it.
    pub fn flush_tx(&mut self, now: Instant) -> io::Result<bool> {
        let mut i = 0;
        while i < self.tx_held.len() {
            let Some(h) = self.tx_held.get(i) else {
                break;
            };
            if !h.hold.ready(now) {
                i += 1;
                continue;
            }
            match h.send(&mut self.inner) {
                Ok(true) => {
                    self.tx_held.remove(i);
                    self.counters.tx.released += 1;
                    self.tx_passed();
                }
                Ok(false) => return Ok(false),
                Err(_) => {
                    // Lost, as a frame the port cannot take is on a wire.
                    self.tx_held.remove(i);
                    self.counters.tx.failed += 1;
                }
            }
        }
        Ok(true)
    }

    /// [`Port::send`] at time `now` (for tests with their own clock).
    pub fn send_at(&mut self, now: Instant, frame: &TxFrame<'_>, mem: &Memory) -> io::Result<bool> {
        if !self.flush_tx(now)? {
            return Ok(false);
        }
        self.counters.tx.frames += 1;
        let fate = self.tx_dice.roll();
        if fate.lose {
            self.counters.tx.lost += 1;
            return Ok(true);
        }
        let hold = Self::hold_for(&self.tx_dice.cfg, &fate, now);
        if fate.corrupt.is_none() && hold.is_none() {
            // By reference, as the inner port would have it.
            let sent = self.inner.send(frame, mem)?;
            if sent {
                self.tx_passed();
                if fate.duplicate {
                    self.counters.tx.duplicated += 1;
                    if self.inner.send(frame, mem).unwrap_or(false) {
                        self.tx_passed();
                    }
                }
            }
            return Ok(sent);
        }
        // Copy it out of memory: it is changed or sent later.
        let mut header = frame.header.to_vec();
        let mut payload = Vec::with_capacity(frame.payload_len());
        for r in frame.payload {
            let Some(b) = mem.get(r) else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "payload reference outside its region",
                ));
            };
            payload.extend_from_slice(b);
        }
        let payload_len = u32::try_from(payload.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "frame too large"))?;
        if let Some((seed, mask)) = fate.corrupt {
            let total = (header.len() + payload.len()) as u64;
            if total > 0 {
                let i = seed % total;
                let h = header.len() as u64;
                if i < h {
                    corrupt(&mut header, i, mask);
                } else {
                    corrupt(&mut payload, i - h, mask);
                }
            }
            self.counters.tx.corrupted += 1;
        }
        let mut m = Memory::new();
        m.add(payload.into_boxed_slice());
        let copies = if fate.duplicate {
            self.counters.tx.duplicated += 1;
            2
        } else {
            1
        };
        match hold {
            Some(hold) => {
                if fate.reorder {
                    self.counters.tx.reordered += 1;
                } else {
                    self.counters.tx.delayed += 1;
                }
                for c in 0..copies {
                    let payload = if c + 1 == copies {
                        std::mem::take(&mut m)
                    } else {
                        let mut d = Memory::new();
                        d.add(m.region(0).unwrap_or(&[]).into());
                        d
                    };
                    self.tx_held.push(HeldTx {
                        header: header.clone(),
                        payload,
                        payload_len,
                        offload: frame.offload,
                        priority: frame.priority,
                        hold,
                    });
                }
                Ok(true)
            }
            None => {
                let held = HeldTx {
                    header,
                    payload: m,
                    payload_len,
                    offload: frame.offload,
                    priority: frame.priority,
                    hold: Hold {
                        due: None,
                        gap: None,
                    },
                };
                let sent = held.send(&mut self.inner)?;
                if sent {
                    self.tx_passed();
                    if copies == 2 && held.send(&mut self.inner).unwrap_or(false) {
                        self.tx_passed();
                    }
                }
                Ok(sent)
            }
        }
    }
}

impl<P: Port> Port for FaultPort<P> {
    fn caps(&self) -> DeviceCaps {
        let mut caps = self.inner.caps();
        if self.cfg.tx.corrupt > 0.0 {
            // Checksums must cover the bytes before they are corrupted.
            caps.tx_csum = false;
            caps.tso_max = None;
        }
        caps
    }

    fn send(&mut self, frame: &TxFrame<'_>, mem: &Memory) -> io::Result<bool> {
        self.send_at(Instant::now(), frame, mem)
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<RxFrame>> {
        self.recv_at(Instant::now(), buf)
    }

    fn raw_fd(&self) -> RawFd {
        self.inner.raw_fd()
    }

    fn wake_at(&self) -> Option<Instant> {
        self.next_due()
    }

    fn dropped(&mut self) -> Option<u64> {
        self.inner.dropped()
    }

    fn faults(&self) -> Option<FaultCounters> {
        Some(self.counters)
    }

    fn carrier(&mut self) -> Option<bool> {
        self.inner.carrier()
    }

    fn stop(&mut self) {
        self.inner.stop();
    }

    fn bond(&self) -> Option<crate::control::BondStat> {
        self.inner.bond()
    }

    fn path_losses(&self) -> u64 {
        self.inner.path_losses()
    }

    fn describe(&self) -> String {
        let d = |f: &DirectionFaults| {
            format!(
                "loss {}, dup {}, reorder {}, corrupt {}, delay {}+{} us",
                f.loss, f.duplicate, f.reorder, f.corrupt, f.delay_us, f.jitter_us
            )
        };
        format!(
            "{} with faults (seed {}; rx: {}; tx: {})",
            self.inner.describe(),
            self.cfg.seed,
            d(&self.cfg.rx),
            d(&self.cfg.tx)
        )
    }
}

#[cfg(test)]
mod tests {
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
                b.extend_from_slice(mem.get(r).unwrap());
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

    /// Frame `i`: its number in the first 4 bytes, then a pattern.
    fn frame(i: u32) -> Vec<u8> {
        let mut f = i.to_be_bytes().to_vec();
        f.extend((0..60u32).map(|k| (k.wrapping_mul(31) ^ i) as u8));
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
        // Each count of bits, and every offset (header and payload), occurs.
        assert!(seen[1..].iter().all(|&n| n > 1500), "{seen:?}");
        assert_eq!(offsets.len(), frame(0).len());
        // Checksums must be computed before corruption: offloads are hidden.
        let caps = p.caps();
        assert!(!caps.tx_csum && caps.tso_max.is_none());
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
}
