//! A seeded fault-injecting wrapper around any port.
//!
//! The kernels this project runs on have no `netem`, so a real-wire test that
//! wants a bad path gets one here: [`FaultPort`] sits between the engine and
//! its real port and, independently in each direction, loses, duplicates,
//! reorders, corrupts and delays frames. Each frame's fate is drawn by the
//! stack's fault model ([`softoe_stack::fault`], the one the simulator's
//! links use, so a rate means the same on the real wire and in a
//! simulation), started from [`FaultConfig::seed`] with a stream per
//! direction and a fixed number of draws per frame: the same seed and the
//! same frames give the same faults, and changing one probability does not
//! reshuffle the others' choices.
//!
//! Per frame, in this order: **loss** (the frame vanishes), **corruption**
//! (1 to 3 distinct bits flipped in one byte of the frame's IPv4 packet; a
//! frame that carries none is dropped instead, as the Ethernet CRC would),
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

use softoe_stack::fault::{Fate, FaultDice, FaultRates};
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

    /// The per-frame rates, as the stack's fault model takes them.
    pub fn rates(&self) -> FaultRates {
        FaultRates {
            loss: self.loss,
            corrupt: self.corrupt,
            duplicate: self.duplicate,
            reorder: self.reorder,
            jitter: Duration::from_micros(self.jitter_us),
        }
    }

    fn validate(&self, dir: &'static str) -> Result<(), FaultConfigError> {
        self.rates()
            .validate()
            .map_err(|e| FaultConfigError::Probability {
                dir,
                field: e.field,
                value: e.value,
            })?;
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
    rx_dice: FaultDice,
    tx_dice: FaultDice,
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
            rx_dice: FaultDice::new(cfg.rx.rates(), cfg.seed, 0),
            tx_dice: FaultDice::new(cfg.tx.rates(), cfg.seed, 1),
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
        let delay = Duration::from_micros(cfg.delay_us) + fate.jitter;
        if fate.reorder {
            let gap = (cfg.reorder_gap > 0).then_some(cfg.reorder_gap);
            let due = (cfg.reorder_timeout_us > 0)
                .then(|| now + Duration::from_micros(cfg.reorder_timeout_us) + delay);
            Some(Hold { due, gap })
        } else if !delay.is_zero() {
            Some(Hold {
                due: Some(now + delay),
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
            if let Some(c) = fate.corrupt {
                self.counters.rx.corrupted += 1;
                if !c.apply(frame) {
                    // Not IPv4: the Ethernet CRC would have dropped it.
                    continue;
                }
                // The port vouched for the frame as it was.
                f.meta.csum_verified = false;
            }
            let copies = if fate.duplicate {
                self.counters.rx.duplicated += 1;
                2
            } else {
                1
            };
            match Self::hold_for(&self.cfg.rx, &fate, now) {
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
        let hold = Self::hold_for(&self.cfg.tx, &fate, now);
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
            b.append_to(&mut payload);
        }
        let payload_len = u32::try_from(payload.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "frame too large"))?;
        if let Some(c) = fate.corrupt {
            self.counters.tx.corrupted += 1;
            // The model works on the whole frame; header and payload are
            // cut apart again where they were.
            let h = header.len();
            let mut whole = header;
            whole.extend_from_slice(&payload);
            if !c.apply(&mut whole) {
                // Not IPv4: the Ethernet CRC would have dropped it.
                return Ok(true);
            }
            payload = whole.split_off(h);
            header = whole;
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
                        d.add(m.region(0).map(|b| b.to_vec()).unwrap_or_default().into());
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

    fn steer_device(&self) -> Option<&str> {
        self.inner.steer_device()
    }

    fn flush(&mut self) {
        self.inner.flush();
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
mod tests;
