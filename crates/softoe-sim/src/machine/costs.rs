//! What each counted event costs: the calibration.
//!
//! The machine model does not simulate instructions; it counts events — a
//! segment through the stack, a byte copied, a system call, an interrupt, a
//! wake-up, a command posted to the engine — and prices each as
//! `c0 + c1·bytes` nanoseconds **of the host core** ([`StageCost`]). Work
//! the engine does is divided by its speed (`engine.speed`); with offload,
//! the per-byte part of copies and checksums and every shared-memory ring
//! access is multiplied by `memory.delay` (see [`Calibration`] for which
//! stage is charged where).
//!
//! [`Calibration::default`] holds order-of-magnitude values for a current
//! x86-64 server core, so that the simulator runs out of the box; they are
//! not measurements. `softoe sim calibrate` (in the CLI) times the real
//! engine's stages on the testbed and writes a calibration file in the same
//! format, which replaces them.
//!
//! The file is TOML, one table per stage, each with `c0` (ns) and `c1` (ns
//! per byte); a stage left out takes its default, an unknown name is
//! refused:
//!
//! ```toml
//! note = "softoe sim calibrate --quick, 2025-01-01"
//! [stack_rx]
//! c0 = 900.0
//! c1 = 0.02
//! [copy]
//! c0 = 20.0
//! c1 = 0.12
//! ```

use core::time::Duration;

use serde::{Deserialize, Serialize};

use super::queue::Cost;

/// A calibration value is unusable.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CalibrationError {
    /// A cost that is negative or not finite.
    #[error("calibration [{stage}] {part} must be finite and not negative, got {value}")]
    Bad {
        /// The stage (`copy`, `syscall`, …).
        stage: &'static str,
        /// `c0` or `c1`.
        part: &'static str,
        /// The value given.
        value: f64,
    },
}

/// The cost of one event of a stage: `c0` ns plus `c1` ns per byte, on the
/// host core.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StageCost {
    /// Nanoseconds per event.
    pub c0: f64,
    /// Nanoseconds per byte the event touches.
    pub c1: f64,
}

impl StageCost {
    /// Free.
    pub const ZERO: StageCost = StageCost { c0: 0.0, c1: 0.0 };

    /// `c0` ns plus `c1` ns per byte.
    pub const fn new(c0: f64, c1: f64) -> StageCost {
        StageCost { c0, c1 }
    }

    /// `n` events touching `bytes` bytes in all, in nanoseconds, with the
    /// per-byte part multiplied by `per_byte_factor`.
    pub fn ns(&self, n: u64, bytes: u64, per_byte_factor: f64) -> f64 {
        self.c0 * n as f64 + self.c1 * per_byte_factor * bytes as f64
    }

    /// The same cost as a queue [`Cost`] (`c0` rounded to the nanosecond).
    pub fn to_cost(&self) -> Cost {
        Cost {
            fixed: Duration::from_nanos(self.c0.round().max(0.0) as u64),
            per_byte_ns: self.c1,
        }
    }

    fn check(&self, stage: &'static str) -> Result<(), CalibrationError> {
        for (part, value) in [("c0", self.c0), ("c1", self.c1)] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(CalibrationError::Bad { stage, part, value });
            }
        }
        Ok(())
    }
}

/// The price of every counted event, in nanoseconds of the host core.
///
/// Where each is charged (host: the host CPU; engine: the engine core,
/// with offload; the stack's CPU is the engine with offload and the host
/// without):
///
/// | stage | charged | per |
/// |---|---|---|
/// | `stack_rx` | stack's CPU | segment handed to the stack (a GRO super-segment is one), bytes of the frame |
/// | `stack_tx` | stack's CPU | frame the stack emits (a TSO super-segment is one), its bytes |
/// | `copy` | host / engine | byte copied: without offload the `read`/`write` copy; with offload the host's copy into or out of the shared rings and the engine's copy of received payload into the ring |
/// | `csum` | stack's CPU | byte checksummed in software (only when `nic.csum` is off), both ways |
/// | `syscall` | host | socket call on the kernel path |
/// | `interrupt` | stack's CPU | interrupt taken (not when polling) |
/// | `wakeup` | the woken CPU | a sleeping thread woken, or a sleeping core (the engine past its spin, an idle host CPU taking an interrupt) |
/// | `command` | host | command posted to the engine |
/// | `completion` | engine | completion posted to the host |
/// | `ring_access` | both | one shared-memory ring record read or written |
/// | `timer` | stack's CPU | a stack timer coming due |
/// | `app` | host | the program's own work: `c0` per message, `c1` per byte it moves |
/// | `port_tx` / `port_rx` | stack's CPU | driver work per frame (on the real engine a TAP write/read) |
///
/// With offload the per-byte part (`c1`) of `copy` and `csum` and the
/// whole of `ring_access` are multiplied by `memory.delay`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Calibration {
    /// Where the values came from (the command that measured them).
    pub note: String,
    /// Stack work per received segment.
    pub stack_rx: StageCost,
    /// Stack work per emitted frame.
    pub stack_tx: StageCost,
    /// Per byte copied.
    pub copy: StageCost,
    /// Per byte checksummed in software.
    pub csum: StageCost,
    /// Per socket system call (kernel path).
    pub syscall: StageCost,
    /// Per interrupt.
    pub interrupt: StageCost,
    /// Per wake-up of a sleeping thread or core.
    pub wakeup: StageCost,
    /// Per command posted (host side).
    pub command: StageCost,
    /// Per completion posted (engine side).
    pub completion: StageCost,
    /// Per shared-memory ring access.
    pub ring_access: StageCost,
    /// Per stack timer firing.
    pub timer: StageCost,
    /// The application's own work per message.
    pub app: StageCost,
    /// Driver work per transmitted frame.
    pub port_tx: StageCost,
    /// Driver work per received frame.
    pub port_rx: StageCost,
}

impl Default for Calibration {
    /// Order-of-magnitude values for a current x86-64 server core, not
    /// measurements: a per-segment TCP path of about a microsecond, memory
    /// copies at about 8 GB/s and checksums at about 4 GB/s, a socket
    /// system call of about 0.5 µs, an interrupt of about 1.5 µs, a
    /// wake-up (eventfd or futex, and the context switch) of about 3 µs, a
    /// cache line moved between cores (a ring access) of about 80 ns, and
    /// a TAP read or write system call of about 1.5 µs. `softoe sim
    /// calibrate` measures the real engine's and writes them in this
    /// format.
    fn default() -> Calibration {
        Calibration {
            note: "defaults: order-of-magnitude values, not measured; \
                   `softoe sim calibrate` replaces them"
                .to_string(),
            stack_rx: StageCost::new(900.0, 0.02),
            stack_tx: StageCost::new(1000.0, 0.02),
            copy: StageCost::new(30.0, 0.125),
            csum: StageCost::new(0.0, 0.25),
            syscall: StageCost::new(500.0, 0.0),
            interrupt: StageCost::new(1500.0, 0.0),
            wakeup: StageCost::new(3000.0, 0.0),
            command: StageCost::new(100.0, 0.0),
            completion: StageCost::new(100.0, 0.0),
            ring_access: StageCost::new(80.0, 0.0),
            timer: StageCost::new(300.0, 0.0),
            app: StageCost::new(200.0, 0.0),
            port_tx: StageCost::new(1500.0, 0.05),
            port_rx: StageCost::new(1500.0, 0.05),
        }
    }
}

impl Calibration {
    /// Every event free: an ideal machine (the `ideal` peer).
    pub fn zero() -> Calibration {
        Calibration {
            note: "zero: every event free".to_string(),
            stack_rx: StageCost::ZERO,
            stack_tx: StageCost::ZERO,
            copy: StageCost::ZERO,
            csum: StageCost::ZERO,
            syscall: StageCost::ZERO,
            interrupt: StageCost::ZERO,
            wakeup: StageCost::ZERO,
            command: StageCost::ZERO,
            completion: StageCost::ZERO,
            ring_access: StageCost::ZERO,
            timer: StageCost::ZERO,
            app: StageCost::ZERO,
            port_tx: StageCost::ZERO,
            port_rx: StageCost::ZERO,
        }
    }

    /// Each stage with its TOML name.
    pub fn stages(&self) -> [(&'static str, StageCost); 14] {
        [
            ("stack_rx", self.stack_rx),
            ("stack_tx", self.stack_tx),
            ("copy", self.copy),
            ("csum", self.csum),
            ("syscall", self.syscall),
            ("interrupt", self.interrupt),
            ("wakeup", self.wakeup),
            ("command", self.command),
            ("completion", self.completion),
            ("ring_access", self.ring_access),
            ("timer", self.timer),
            ("app", self.app),
            ("port_tx", self.port_tx),
            ("port_rx", self.port_rx),
        ]
    }

    /// Checks every cost is finite and not negative.
    pub fn validate(&self) -> Result<(), CalibrationError> {
        for (stage, cost) in self.stages() {
            cost.check(stage)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_is_c0_plus_c1_bytes() {
        let s = StageCost::new(100.0, 0.5);
        assert_eq!(s.ns(1, 1000, 1.0), 600.0);
        assert_eq!(s.ns(3, 1000, 2.0), 1300.0);
        assert_eq!(s.ns(0, 0, 1.0), 0.0);
        let c = s.to_cost();
        assert_eq!(c.time(1000), Duration::from_nanos(600));
    }

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        assert_eq!(Calibration::default().validate(), Ok(()));
        assert_eq!(Calibration::zero().validate(), Ok(()));
        let mut c = Calibration::default();
        c.copy.c1 = -0.1;
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "calibration [copy] c1 must be finite and not negative, got -0.1"
        );
        let mut c = Calibration::default();
        c.wakeup.c0 = f64::INFINITY;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("[wakeup] c0")
        );
    }
}
