//! The engine's own counters (frames, turns, sleeps, emulation, stage
//! times): what the loop and the services count, apart from the control
//! socket that shows them, so counting needs nothing of it.

use serde::{Deserialize, Serialize};

/// The engine's own counters.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct EngineCounters {
    /// Frames read from the port.
    pub frames_in: u64,
    /// Frames written to the port.
    pub frames_out: u64,
    /// Bytes read.
    pub bytes_in: u64,
    /// Bytes written.
    pub bytes_out: u64,
    /// Times the port refused a frame (queue full).
    pub tx_busy: u64,
    /// Port errors (frames lost).
    pub port_errors: u64,
    /// Loop turns.
    pub turns: u64,
    /// Turns that read at least one frame.
    pub rx_batches: u64,
    /// Times the engine slept.
    pub sleeps: u64,
    /// Nanoseconds spent asleep.
    pub idle_nanos: u64,
    /// Nanoseconds spent spinning with nothing to do before sleeping (or
    /// before work came): CPU time that is waiting, not work.
    #[serde(default)]
    pub spin_nanos: u64,
    /// Nanoseconds the loop has run.
    pub run_nanos: u64,
    /// Nanoseconds of work measured in the turns that did work, less the
    /// waits inside them that emulate something else (`access_delay`,
    /// receive coalescing). Measured only when the engine is slowed
    /// (`EngineConfig::speed` below 1) or profiles its stages; 0 otherwise.
    #[serde(default)]
    pub work_nanos: u64,
    /// Nanoseconds of busy-waiting added after working turns to emulate a
    /// slower core: `work × (1/speed − 1)`, summed as asked for (each wait
    /// lasts at least that long).
    #[serde(default)]
    pub slowdown_nanos: u64,
    /// Accesses to programs' shared memory through the host interface: a
    /// command taken, a completion or socket event published, a program's
    /// doorbell rung. Always counted.
    #[serde(default)]
    pub ring_accesses: u64,
    /// Nanoseconds busy-waited at those accesses (`EngineConfig::
    /// access_delay`), as measured (each wait lasts at least the delay).
    #[serde(default)]
    pub access_delay_nanos: u64,
    /// Times the engine started or stopped steering the kernel's work for
    /// the frames it sends to other cores ([`crate::steer`]).
    #[serde(default)]
    pub steer_switches: u64,
    /// Nanoseconds it was steering.
    #[serde(default)]
    pub steered_nanos: u64,
    /// Time per stage of the engine's work, for calibrating the simulator
    /// (`EngineConfig::profile_stages`; all zero when it is off).
    #[serde(default)]
    pub stages: StageCounters,
}

/// One stage of the engine's work: how often it ran, how long it took in
/// all, and the bytes it handled, so that a calibration can fit
/// `c0 + c1·bytes` per run of the stage.
///
/// Time is net: a stage that transmits (receiving a segment answers it)
/// does not count the port writes, which are the `tx` stage's, nor the
/// emulated memory delays, which are `access_delay_nanos`.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct StageStat {
    /// Times the stage ran.
    pub count: u64,
    /// Nanoseconds it took, in all.
    pub nanos: u64,
    /// Bytes it handled, in all (0 for a stage without payload).
    pub bytes: u64,
}

impl StageStat {
    /// Counts one run of `nanos` over `bytes`.
    pub fn add(&mut self, nanos: u64, bytes: u64) {
        self.count += 1;
        self.nanos += nanos;
        self.bytes += bytes;
    }

    /// Adds `other`'s runs.
    pub fn merge(&mut self, other: &StageStat) {
        self.count += other.count;
        self.nanos += other.nanos;
        self.bytes += other.bytes;
    }
}

/// How the engine's sleeps ended (`EngineConfig::profile_stages`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct WakeStat {
    /// Sleeps a descriptor ended: a frame, a doorbell, a control request.
    pub by_fd: u64,
    /// Sleeps that ran to their deadline.
    pub by_timeout: u64,
    /// For those, nanoseconds from the deadline the sleep asked for to
    /// when the loop ran again, in all: the wake-up latency.
    pub late_nanos: u64,
    /// The largest of them.
    pub max_late_nanos: u64,
}

/// The engine's stages, timed (`EngineConfig::profile_stages`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct StageCounters {
    /// Frames received: each read from the port and handed to the stack
    /// (per frame; bytes: the frame), plus the batch's answers
    /// (`Stack::end_batch`) in time only.
    pub rx: StageStat,
    /// Frames written to the port (per frame sent; bytes: the frame). The
    /// time of attempts the port refused (busy) is included.
    pub tx: StageStat,
    /// Host-interface commands carried out (per command; bytes: the
    /// payload a `SEND` handed over, 0 for other commands).
    pub cmd: StageStat,
    /// Host-interface sockets served: received bytes moved into a
    /// program's ring or posted buffer, acknowledged sends released,
    /// readiness published (per socket served; bytes: those received).
    pub serve: StageStat,
    /// The stack's timers and pending output (`Stack::poll`, per call).
    pub poll: StageStat,
    /// The engine's sleeps.
    pub wake: WakeStat,
}

impl EngineCounters {
    /// The share of its time the engine slept (0–1).
    pub fn idle_share(&self) -> f64 {
        if self.run_nanos == 0 {
            0.0
        } else {
            self.idle_nanos as f64 / self.run_nanos as f64
        }
    }
}
