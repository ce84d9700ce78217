//! The machine configuration: one file that describes a host, its engine,
//! bus, NIC, link, workload and peer.
//!
//! The same TOML file drives the simulator (`softoe sim predict CONFIG`)
//! and the real engine's emulation (`softoe bench --emulate CONFIG`), so the
//! prediction and the measurement it is checked against describe the same
//! machine by construction. Its names are therefore a contract: change one
//! and both sides must change together.
//!
//! ```toml
//! [host]
//! offload = true          # the stack on the engine core, behind shared-memory rings; false: on the host CPU behind system calls
//! spin_us = 30            # with offload, a waiting program polls its rings at most this long, then sleeps (learnt per wait, as softoe-host's)
//! [engine]
//! speed = 1.0             # engine core speed ÷ host core speed, 0.05..=8
//! spin_us = 50            # the engine polls this long after its last work, then sleeps
//! [memory]
//! delay = 1.0             # multiplier on memory-bound work ("Offload ×1…×10"), ≥ 1
//! [bus]
//! gbps = 16.0             # I/O bus (DMA) bandwidth
//! transaction_ns = 300    # per DMA transaction
//! [nic]
//! tso = true
//! csum = true
//! gro = true
//! coalesce_frames = 1     # interrupt after this many received frames…
//! coalesce_us = 0.0       # …or this long after the first one pending (0: no timer)
//! polling = false         # the receiving CPU polls instead of taking interrupts
//! napi = true             # mask interrupts while a receive job runs (false: each one is taken)
//! [link]
//! gbps = 10.0
//! delay_us = 5.0
//! mtu = 1500
//! loss = 0.0              # per frame, each way
//! gso = false             # true: the wire carries TSO super-segments whole (veth/TAP GSO)
//! [workload]
//! kind = "stream"         # or "rr"
//! direction = "send"      # or "receive"
//! message = 65536
//! connections = 1
//! bytes = 67108864        # stream: per connection
//! requests = 10000        # rr: round trips per connection
//! seed = 1
//! # buffer = 65536        # socket buffers both ways (unset: the stack's 256 KiB / 1 MiB)
//! [peer]
//! model = "ideal"         # or "host", or "testbed" (a Linux program on the same machine: its calls cost, its stack's work is in the sender's)
//! ```
//!
//! Every section and every field may be left out (it takes the default
//! above); a name that is not one of these is refused when the file is
//! read, so a misspelt knob cannot silently do nothing. Numbers are checked
//! by [`MachineConfig::validate`], which says which field is wrong and what
//! it must be.

use core::time::Duration;

use serde::{Deserialize, Serialize};

/// A configuration value is out of its range.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum MachineConfigError {
    /// A number outside the range its field allows.
    #[error("[{section}] {field} must be {expected}, got {value}")]
    OutOfRange {
        /// The TOML section (`engine`, `link`, …).
        section: &'static str,
        /// The field.
        field: &'static str,
        /// What it must be, in words.
        expected: &'static str,
        /// The value given.
        value: String,
    },
    /// Interrupts held for several frames with no timer to raise one for
    /// a lone frame.
    #[error(
        "[nic] coalesce_frames = {frames} needs a coalescing timer (coalesce_us > 0): \
         without one a lone frame would wait for ever for its interrupt"
    )]
    NoCoalesceTimer {
        /// The `coalesce_frames` given.
        frames: u32,
    },
}

fn range_err(
    section: &'static str,
    field: &'static str,
    expected: &'static str,
    value: impl ToString,
) -> MachineConfigError {
    MachineConfigError::OutOfRange {
        section,
        field,
        expected,
        value: value.to_string(),
    }
}

/// Checks `lo <= v <= hi` (and that `v` is finite).
fn check_f64(
    section: &'static str,
    field: &'static str,
    expected: &'static str,
    v: f64,
    ok: impl Fn(f64) -> bool,
) -> Result<(), MachineConfigError> {
    if v.is_finite() && ok(v) {
        Ok(())
    } else {
        Err(range_err(section, field, expected, v))
    }
}

/// `[host]`: where the stack runs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostSpec {
    /// `true`: the stack runs on the engine core and the program talks to
    /// it over shared-memory rings; `false`: the stack runs on the host CPU
    /// behind system calls (the kernel path).
    pub offload: bool,
    /// With offload, the longest a waiting program polls its rings before
    /// it sleeps, microseconds (`SOFTOE_SPIN_US` of the real client).
    /// Each kind of wait learns its own budget up to this, as the real
    /// client does: a wait the spin caught raises it to twice that wait,
    /// three in a row that outlasted it halve it. A wait caught spinning
    /// costs no completion and no wake-up, but its spin is host CPU.
    pub spin_us: f64,
}

/// The real client's default longest spin (`SOFTOE_SPIN_US`), µs.
pub const HOST_SPIN_US: f64 = 30.0;

impl Default for HostSpec {
    fn default() -> HostSpec {
        HostSpec {
            offload: true,
            spin_us: HOST_SPIN_US,
        }
    }
}

/// `[engine]`: the engine core.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineSpec {
    /// The engine core's speed over the host core's, 0.05 to 8.
    pub speed: f64,
    /// Microseconds the engine keeps polling after its last work before it
    /// sleeps (work that finds it asleep pays a wake-up).
    pub spin_us: f64,
}

impl Default for EngineSpec {
    fn default() -> EngineSpec {
        EngineSpec {
            speed: 1.0,
            spin_us: 50.0,
        }
    }
}

/// `[memory]`: the cost of reaching memory across the host interface.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemorySpec {
    /// Multiplier on memory-bound work: the per-byte part of copies and
    /// checksums, and shared-memory ring accesses, with offload (the
    /// paper's "Offload ×1…×10"). At least 1.
    pub delay: f64,
}

impl Default for MemorySpec {
    fn default() -> MemorySpec {
        MemorySpec { delay: 1.0 }
    }
}

/// `[bus]`: the I/O bus the NIC's DMA crosses.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BusSpec {
    /// Bandwidth, gigabits per second.
    pub gbps: f64,
    /// Nanoseconds per DMA transaction (one per frame, one per descriptor
    /// batch).
    pub transaction_ns: f64,
}

impl Default for BusSpec {
    fn default() -> BusSpec {
        BusSpec {
            gbps: 16.0,
            transaction_ns: 300.0,
        }
    }
}

/// `[nic]`: the NIC's offloads and interrupt moderation.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NicSpec {
    /// TCP segmentation offload.
    pub tso: bool,
    /// Checksum offload, both ways.
    pub csum: bool,
    /// Receive coalescing.
    pub gro: bool,
    /// Raise an interrupt after this many received frames…
    pub coalesce_frames: u32,
    /// …or this many microseconds after the first one pending (0: no
    /// timer).
    pub coalesce_us: f64,
    /// The receiving CPU polls for frames: no interrupts.
    pub polling: bool,
    /// Interrupts are masked while a receive job is queued or running,
    /// which takes what has arrived (Linux's NAPI). Off: every interrupt
    /// the moderation raises is taken and costs its `interrupt`, busy or
    /// not, as a plain embedded driver's (HL-TCP's engine).
    pub napi: bool,
}

impl Default for NicSpec {
    fn default() -> NicSpec {
        NicSpec {
            tso: true,
            csum: true,
            gro: true,
            coalesce_frames: 1,
            coalesce_us: 0.0,
            polling: false,
            napi: true,
        }
    }
}

/// `[link]`: the wire between the host and its peer.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LinkSpec {
    /// Rate, gigabits per second.
    pub gbps: f64,
    /// One-way propagation delay, microseconds.
    pub delay_us: f64,
    /// IP MTU, bytes.
    pub mtu: usize,
    /// Probability a frame is lost, per frame, each way, in [0, 1).
    pub loss: f64,
    /// The wire carries TSO super-segments whole (a veth, a bridge and a
    /// TAP with GSO: the real testbed's path), so the peer receives, and
    /// acknowledges, a super-segment at a time; false: a physical wire
    /// that carries MTU frames. A lost frame on a GSO wire is a whole
    /// super-segment.
    pub gso: bool,
}

impl Default for LinkSpec {
    fn default() -> LinkSpec {
        LinkSpec {
            gbps: 10.0,
            delay_us: 5.0,
            mtu: 1500,
            loss: 0.0,
            gso: false,
        }
    }
}

/// What the workload does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadKind {
    /// Bulk transfer: a source writes `message`-byte writes as fast as the
    /// socket takes them, a sink reads.
    #[default]
    Stream,
    /// Request/response ping-pong: `message` bytes each way per round trip.
    Rr,
}

/// Which way the data goes, seen from the modelled host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlowDirection {
    /// The modelled host sends (stream source; rr client).
    #[default]
    Send,
    /// The modelled host receives (stream sink; rr server).
    Receive,
}

/// `[workload]`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkloadSpec {
    /// Stream or request/response.
    pub kind: WorkloadKind,
    /// Who sends.
    pub direction: FlowDirection,
    /// Bytes per application write (stream) or per request and per
    /// response (rr).
    pub message: u32,
    /// Connections, each with its own application thread.
    pub connections: u32,
    /// Stream: bytes per connection.
    pub bytes: u64,
    /// Rr: round trips per connection.
    pub requests: u64,
    /// Seed of everything random (loss, ISNs, the payload pattern).
    pub seed: u64,
    /// Socket buffers of every connection, both ways, bytes: the largest
    /// window a receiver offers and the most a sender holds (unset: the
    /// stack's, 256 KiB to receive and 1 MiB to send). Small windows, as an
    /// embedded stack's, make every delay on the ACK's path cost
    /// throughput.
    pub buffer: Option<u32>,
}

impl Default for WorkloadSpec {
    fn default() -> WorkloadSpec {
        WorkloadSpec {
            kind: WorkloadKind::Stream,
            direction: FlowDirection::Send,
            message: 65_536,
            connections: 1,
            bytes: 64 << 20,
            requests: 10_000,
            seed: 1,
            buffer: None,
        }
    }
}

/// What the far end is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PeerModel {
    /// The far end costs nothing: only the modelled host is measured.
    #[default]
    Ideal,
    /// The far end is a host like this one, without offload, on a CPU of
    /// its own. Sinking a stream, it reads what has arrived up to 1 MiB per
    /// call, as a bulk receiver does.
    Host,
    /// The far end as on this project's testbed: a Linux program on the
    /// same machine. Its calls cost what a Linux program's do (`syscall`,
    /// `copy`, `wakeup`, `app`, on a CPU of its own), but its TCP stack's
    /// work is free here, because on the testbed the kernel's receive path
    /// runs in the softirq of whoever sends: inside the engine's port write
    /// (which `port_tx` is calibrated with) or inside the Linux sender's
    /// system call (which `syscall` is). It reads a stream up to 1 MiB per
    /// call, as the testbed's client does.
    Testbed,
}

/// `[peer]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PeerSpec {
    /// Ideal or a host.
    pub model: PeerModel,
}

/// The whole machine, as the TOML file describes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MachineConfig {
    /// `[host]`.
    pub host: HostSpec,
    /// `[engine]`.
    pub engine: EngineSpec,
    /// `[memory]`.
    pub memory: MemorySpec,
    /// `[bus]`.
    pub bus: BusSpec,
    /// `[nic]`.
    pub nic: NicSpec,
    /// `[link]`.
    pub link: LinkSpec,
    /// `[workload]`.
    pub workload: WorkloadSpec,
    /// `[peer]`.
    pub peer: PeerSpec,
}

/// The largest socket buffer: 1 GiB (the window scale's limit).
const MAX_BUFFER: u32 = 1 << 30;

/// The largest message: 16 MiB.
pub const MAX_MESSAGE: u32 = 16 << 20;
/// The most connections.
pub const MAX_CONNECTIONS: u32 = 1024;

impl MachineConfig {
    /// Checks every number against its range; the error names the field.
    pub fn validate(&self) -> Result<(), MachineConfigError> {
        check_f64(
            "host",
            "spin_us",
            "finite and within 0..=1000000",
            self.host.spin_us,
            |v| (0.0..=1e6).contains(&v),
        )?;
        let e = &self.engine;
        check_f64("engine", "speed", "within 0.05..=8", e.speed, |v| {
            (0.05..=8.0).contains(&v)
        })?;
        check_f64(
            "engine",
            "spin_us",
            "finite and within 0..=1000000",
            e.spin_us,
            |v| (0.0..=1e6).contains(&v),
        )?;
        check_f64(
            "memory",
            "delay",
            "at least 1 (and at most 1000)",
            self.memory.delay,
            |v| (1.0..=1000.0).contains(&v),
        )?;
        check_f64(
            "bus",
            "gbps",
            "above 0 (and at most 10000)",
            self.bus.gbps,
            |v| v > 0.0 && v <= 1e4,
        )?;
        check_f64(
            "bus",
            "transaction_ns",
            "within 0..=1000000",
            self.bus.transaction_ns,
            |v| (0.0..=1e6).contains(&v),
        )?;
        let n = &self.nic;
        if n.coalesce_frames == 0 {
            return Err(range_err("nic", "coalesce_frames", "at least 1", 0));
        }
        check_f64(
            "nic",
            "coalesce_us",
            "within 0..=1000000",
            n.coalesce_us,
            |v| (0.0..=1e6).contains(&v),
        )?;
        if n.coalesce_frames > 1 && n.coalesce_us == 0.0 && !n.polling {
            return Err(MachineConfigError::NoCoalesceTimer {
                frames: n.coalesce_frames,
            });
        }
        let l = &self.link;
        check_f64("link", "gbps", "above 0 (and at most 10000)", l.gbps, |v| {
            v > 0.0 && v <= 1e4
        })?;
        check_f64("link", "delay_us", "within 0..=10000000", l.delay_us, |v| {
            (0.0..=1e7).contains(&v)
        })?;
        if !(576..=9216).contains(&l.mtu) {
            return Err(range_err("link", "mtu", "within 576..=9216", l.mtu));
        }
        check_f64("link", "loss", "within 0..1 (1 excluded)", l.loss, |v| {
            (0.0..1.0).contains(&v)
        })?;
        let w = &self.workload;
        if !(1..=MAX_MESSAGE).contains(&w.message) {
            return Err(range_err(
                "workload",
                "message",
                "within 1..=16777216",
                w.message,
            ));
        }
        if !(1..=MAX_CONNECTIONS).contains(&w.connections) {
            return Err(range_err(
                "workload",
                "connections",
                "within 1..=1024",
                w.connections,
            ));
        }
        if w.bytes == 0 {
            return Err(range_err("workload", "bytes", "at least 1", 0));
        }
        if w.requests == 0 {
            return Err(range_err("workload", "requests", "at least 1", 0));
        }
        if let Some(b) = w.buffer
            && !(4096..=MAX_BUFFER).contains(&b)
        {
            return Err(range_err(
                "workload",
                "buffer",
                "within 4096..=1073741824",
                b,
            ));
        }
        Ok(())
    }

    /// The engine's spin before it sleeps.
    pub fn spin(&self) -> Duration {
        micros(self.engine.spin_us)
    }

    /// The longest a waiting program spins (with offload).
    pub fn host_spin(&self) -> Duration {
        micros(self.host.spin_us)
    }

    /// The NIC's coalescing timer (zero: none).
    pub fn coalesce(&self) -> Duration {
        micros(self.nic.coalesce_us)
    }

    /// The link's one-way delay.
    pub fn link_delay(&self) -> Duration {
        micros(self.link.delay_us)
    }

    /// The link's rate, bits per second.
    pub fn link_bps(&self) -> u64 {
        (self.link.gbps * 1e9).round() as u64
    }

    /// Application payload bytes the workload moves in all (both ways for
    /// rr).
    pub fn payload_bytes(&self) -> u64 {
        self.workload.payload_bytes()
    }
}

impl WorkloadSpec {
    /// Application payload bytes the workload moves in all: every
    /// connection's stream, or its requests and responses (both ways).
    pub fn payload_bytes(&self) -> u64 {
        let per_conn = match self.kind {
            WorkloadKind::Stream => self.bytes,
            WorkloadKind::Rr => self
                .requests
                .saturating_mul(u64::from(self.message))
                .saturating_mul(2),
        };
        per_conn.saturating_mul(u64::from(self.connections))
    }

    /// Application messages in all: writes of `message` bytes (stream) or
    /// round trips (rr).
    pub fn messages(&self) -> u64 {
        let per_conn = match self.kind {
            WorkloadKind::Stream => self.bytes.div_ceil(u64::from(self.message.max(1))),
            WorkloadKind::Rr => self.requests,
        };
        per_conn.saturating_mul(u64::from(self.connections))
    }
}

/// Microseconds (not negative, finite: validated) to a duration, to the
/// nearest nanosecond.
pub(crate) fn micros(us: f64) -> Duration {
    Duration::from_nanos((us * 1e3).round().max(0.0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_file_and_valid() {
        let c = MachineConfig::default();
        assert!(c.host.offload);
        assert_eq!((c.engine.speed, c.engine.spin_us), (1.0, 50.0));
        assert_eq!(c.memory.delay, 1.0);
        assert_eq!((c.bus.gbps, c.bus.transaction_ns), (16.0, 300.0));
        assert_eq!(
            (c.nic.tso, c.nic.csum, c.nic.gro, c.nic.polling),
            (true, true, true, false)
        );
        assert_eq!((c.nic.coalesce_frames, c.nic.coalesce_us), (1, 0.0));
        assert_eq!(
            (c.link.gbps, c.link.delay_us, c.link.mtu, c.link.loss),
            (10.0, 5.0, 1500, 0.0)
        );
        let w = c.workload;
        assert_eq!(
            (w.kind, w.direction),
            (WorkloadKind::Stream, FlowDirection::Send)
        );
        assert_eq!(
            (w.message, w.connections, w.bytes, w.requests, w.seed),
            (65_536, 1, 67_108_864, 10_000, 1)
        );
        assert_eq!(c.peer.model, PeerModel::Ideal);
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.spin(), Duration::from_micros(50));
        assert_eq!(c.link_bps(), 10_000_000_000);
    }

    #[test]
    fn each_range_is_checked() {
        let bad: Vec<(MachineConfig, &str)> = vec![
            {
                let mut c = MachineConfig::default();
                c.engine.speed = 0.0;
                (c, "[engine] speed must be within 0.05..=8, got 0")
            },
            {
                let mut c = MachineConfig::default();
                c.engine.speed = f64::NAN;
                (c, "[engine] speed")
            },
            {
                let mut c = MachineConfig::default();
                c.memory.delay = 0.5;
                (c, "[memory] delay must be at least 1")
            },
            {
                let mut c = MachineConfig::default();
                c.link.loss = 2.0;
                (c, "[link] loss must be within 0..1 (1 excluded), got 2")
            },
            {
                let mut c = MachineConfig::default();
                c.link.mtu = 100;
                (c, "[link] mtu")
            },
            {
                let mut c = MachineConfig::default();
                c.bus.gbps = -1.0;
                (c, "[bus] gbps")
            },
            {
                let mut c = MachineConfig::default();
                c.workload.message = 0;
                (c, "[workload] message")
            },
            {
                let mut c = MachineConfig::default();
                c.workload.connections = 0;
                (c, "[workload] connections")
            },
            {
                let mut c = MachineConfig::default();
                c.nic.coalesce_frames = 0;
                (c, "[nic] coalesce_frames must be at least 1")
            },
            {
                let mut c = MachineConfig::default();
                c.workload.buffer = Some(100);
                (c, "[workload] buffer")
            },
            {
                let mut c = MachineConfig::default();
                c.nic.coalesce_frames = 8;
                (c, "needs a coalescing timer")
            },
        ];
        for (c, want) in bad {
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(want), "{e:?} should contain {want:?}");
        }
        // Coalescing by count with a timer, or while polling, is fine.
        let mut c = MachineConfig::default();
        c.nic.coalesce_frames = 8;
        c.nic.coalesce_us = 20.0;
        assert_eq!(c.validate(), Ok(()));
        c.nic.coalesce_us = 0.0;
        c.nic.polling = true;
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn payload_counts_both_ways_for_rr() {
        let mut c = MachineConfig::default();
        c.workload.connections = 3;
        c.workload.bytes = 1000;
        assert_eq!(c.payload_bytes(), 3000);
        c.workload.kind = WorkloadKind::Rr;
        c.workload.message = 10;
        c.workload.requests = 7;
        assert_eq!(c.payload_bytes(), 3 * 7 * 10 * 2);
    }
}
