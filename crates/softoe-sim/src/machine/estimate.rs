//! LAWS from a machine configuration and a calibration: the analytic
//! figure to print beside every prediction.
//!
//! LAWS ([`Laws`]) prices a stream per byte: the host spends `a` on the
//! application and `o` on communication, offload leaves `β·o` on the host
//! and gives the NIC `p·o` at its speed. [`LawsEstimate::new`] derives
//! those from the same [`Calibration`] the simulator charges, by counting
//! the events one message costs in steady state on the host that sends
//! (direction `send`) or receives (`receive`) the stream:
//!
//! - **frames**: a message of `m` bytes goes out in `⌈m/P⌉` frames, `P`
//!   the MSS (`mtu − 52`: IPv4, TCP and the timestamp option) or, with
//!   TSO, the largest whole number of MSS in a 64 KiB packet — as if each
//!   write went out whole at once (true of a CPU-bound sender, whose window
//!   is never the limit); each frame carries 66 bytes of headers;
//! - **ACKs**: one per two full segments (delayed ACK), or per
//!   `⌈2·MSS/m⌉` messages when messages are smaller than a segment;
//! - **interrupts**: one per `coalesce_frames` frames received, none when
//!   polling — the most there can be: under saturation NAPI takes fewer;
//! - **GRO** merges nothing (each received frame is a segment for the
//!   stack): the most work receiving can be;
//! - no wake-ups, timers or completions: a saturated CPU never sleeps, and
//!   with offload a program that never waits is never sent a completion.
//!
//! Without offload all of it is the host's (`o`). With offload the host
//! keeps the command, the ring accesses and its copy into or out of the
//! rings (`β·o`); the engine does the stack, driver, checksum and its own
//! copy of received data, divided by its speed (`p·o`, in host units).
//! Where the engine's share exceeds the whole of `o` (its ring work, or the
//! memory delay, make it do more than the kernel path did) `p` is capped
//! at 1 and the excess folded into the lag ratio `α`, which LAWS only ever
//! uses as the product `p·α`.
//!
//! `B`, the wire, is the link's rate in payload bits: each frame costs its
//! 66 bytes of headers and 20 of preamble and gap.
//!
//! LAWS holds where its assumptions do: a stream, no loss, per-byte costs
//! that do not change with load. Where the simulation and LAWS part ways,
//! one of these is why: queueing (a CPU short of saturation), batching
//! under load (fewer interrupts and ACKs per byte), completions and
//! wake-ups when one side waits for the other, or the window.

use serde::Serialize;

use super::analytic::{Laws, LawsCosts, LawsLimit, ModelError, laws};
use super::config::{FlowDirection, MachineConfig};
use super::costs::Calibration;

/// IPv4 + TCP + timestamp option.
const IP_TCP_TS: usize = 52;
/// Ethernet + IPv4 + TCP + timestamp option.
const FRAME_HEADERS: f64 = 66.0;
/// Preamble, start delimiter and inter-frame gap, as the link counts them.
const WIRE_OVERHEAD: f64 = 20.0;
/// An ACK frame's length.
const ACK_LEN: u64 = 66;

/// What LAWS says of a configuration, and the per-byte costs it was
/// computed from.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LawsEstimate {
    /// `a`: host ns per byte of application work.
    pub app_ns_per_byte: f64,
    /// `o`: host ns per byte of communication without offload.
    pub comm_ns_per_byte: f64,
    /// `β·o`: host ns per byte of communication with offload.
    pub host_after_ns_per_byte: f64,
    /// `p·o`: engine work per byte with offload, in host ns (before its
    /// speed).
    pub engine_ns_per_byte: f64,
    /// `B`: the wire's rate in payload bits per second.
    pub wire_bps: f64,
    /// LAWS's throughput without offload, payload bits per second.
    pub before_bps: f64,
    /// LAWS's throughput with offload, payload bits per second.
    pub after_bps: f64,
    /// What bounds `before`: `wire`, `host`.
    pub before_limit: &'static str,
    /// What bounds `after`: `wire`, `host` or `nic` (the engine).
    pub after_limit: &'static str,
    /// The ratios.
    #[serde(skip)]
    pub laws: Laws,
}

impl LawsEstimate {
    /// The estimate for `cfg`'s stream, priced by `cal` (see the module
    /// docs for what is counted). For rr workloads it is the bound on a
    /// stream of the same messages.
    pub fn new(cfg: &MachineConfig, cal: &Calibration) -> Result<LawsEstimate, ModelError> {
        let laws_ratios = Laws::from_config(cfg, cal)?;
        let c = per_message(cfg, cal);
        let report = laws(&laws_ratios)?;
        let wire_bps = c.wire_bps;
        Ok(LawsEstimate {
            app_ns_per_byte: c.app / c.m,
            comm_ns_per_byte: c.kernel / c.m,
            host_after_ns_per_byte: c.host_after / c.m,
            engine_ns_per_byte: c.engine / c.m,
            wire_bps,
            before_bps: report.before * wire_bps,
            after_bps: report.after * wire_bps,
            before_limit: report.before_limit.name(),
            after_limit: limit_name(report.after_limit),
            laws: laws_ratios,
        })
    }

    /// LAWS's throughput for `cfg` as configured (offload or not).
    pub fn for_config(&self, cfg: &MachineConfig) -> f64 {
        if cfg.host.offload {
            self.after_bps
        } else {
            self.before_bps
        }
    }
}

fn limit_name(l: LawsLimit) -> &'static str {
    l.name()
}

impl Laws {
    /// The LAWS ratios of a machine configuration priced by a calibration
    /// ([`LawsEstimate`] explains the mapping): `α = 1/engine.speed`
    /// (times the engine's excess share, if any), `γ = a/o`, `σ = 1/(o·B)`,
    /// `β` the host's share of `o` left with offload, `p` the engine's.
    pub fn from_config(cfg: &MachineConfig, cal: &Calibration) -> Result<Laws, ModelError> {
        let c = per_message(cfg, cal);
        if c.kernel.is_nan() || c.kernel <= 0.0 {
            return Err(ModelError::NotPositive {
                name: "the communication cost",
                value: c.kernel,
            });
        }
        let share = c.engine / c.kernel;
        Laws::from_costs(&LawsCosts {
            app_ns_per_byte: c.app / c.m,
            comm_ns_per_byte: c.kernel / c.m,
            nic_speed: cfg.engine.speed / share.max(1.0),
            wire_bps: c.wire_bps,
            offloaded: share.min(1.0),
            structural: c.host_after / c.kernel,
        })
    }
}

/// The steady-state cost of one message, in host ns.
struct PerMessage {
    /// Message bytes.
    m: f64,
    /// The application's work.
    app: f64,
    /// The kernel path's communication work on the host.
    kernel: f64,
    /// With offload: the host's communication work.
    host_after: f64,
    /// With offload: the engine's work (before its speed).
    engine: f64,
    /// The wire's payload rate.
    wire_bps: f64,
}

fn per_message(cfg: &MachineConfig, cal: &Calibration) -> PerMessage {
    let m = u64::from(cfg.workload.message.max(1));
    let mf = m as f64;
    let mss = cfg.link.mtu.saturating_sub(IP_TCP_TS).max(1) as u64;
    let payload_per_frame = if cfg.nic.tso {
        ((65_535 - IP_TCP_TS) as u64 / mss * mss).max(mss)
    } else {
        mss
    };
    let frames = m.div_ceil(payload_per_frame) as f64;
    let frame_bytes = (mf + frames * FRAME_HEADERS).round() as u64;
    let wire_frames = m.div_ceil(mss) as f64;
    let wire_frame_bytes = (mf + wire_frames * FRAME_HEADERS).round() as u64;
    // ACKs per message: one per two full segments, or per ⌈2·MSS/m⌉
    // messages.
    let acks = if m >= mss {
        mf / (2 * mss) as f64
    } else {
        1.0 / (2 * mss).div_ceil(m) as f64
    };
    let d = cfg.memory.delay;
    let ring = cal.ring_access.c0 * d;
    let interrupt = if cfg.nic.polling {
        0.0
    } else {
        cal.interrupt.c0 / f64::from(cfg.nic.coalesce_frames.max(1))
    };
    let csum = |bytes: u64, factor: f64| {
        if cfg.nic.csum {
            0.0
        } else {
            cal.csum.ns(0, bytes, factor)
        }
    };
    let app = cal.app.ns(1, m, 1.0);
    // The stack's and driver's work per message, with the per-byte factor
    // of its checksums, and per received frame the interrupt share.
    let stack = |factor: f64| -> f64 {
        match cfg.workload.direction {
            FlowDirection::Send => {
                let tx = cal.stack_tx.ns(0, frame_bytes, 1.0)
                    + cal.port_tx.ns(0, frame_bytes, 1.0)
                    + (cal.stack_tx.c0 + cal.port_tx.c0) * frames
                    + csum(frame_bytes, factor);
                let per_ack = cal.port_rx.ns(1, ACK_LEN, 1.0)
                    + cal.stack_rx.ns(1, ACK_LEN, 1.0)
                    + csum(ACK_LEN, factor)
                    + interrupt;
                tx + acks * per_ack
            }
            FlowDirection::Receive => {
                let rx = cal.port_rx.ns(0, wire_frame_bytes, 1.0)
                    + cal.stack_rx.ns(0, wire_frame_bytes, 1.0)
                    + (cal.port_rx.c0 + cal.stack_rx.c0 + interrupt) * wire_frames
                    + csum(wire_frame_bytes, factor);
                let per_ack = cal.port_tx.ns(1, ACK_LEN, 1.0)
                    + cal.stack_tx.ns(1, ACK_LEN, 1.0)
                    + csum(ACK_LEN, factor);
                rx + acks * per_ack
            }
        }
    };
    let kernel = cal.syscall.c0 + cal.copy.ns(1, m, 1.0) + stack(1.0);
    let host_after = match cfg.workload.direction {
        FlowDirection::Send => cal.command.c0 + ring + cal.copy.ns(1, m, d),
        FlowDirection::Receive => ring + cal.copy.ns(1, m, d),
    };
    let engine = match cfg.workload.direction {
        // Taking the command.
        FlowDirection::Send => ring + stack(d),
        // Copying into the receive ring.
        FlowDirection::Receive => cal.copy.ns(1, m, d) + stack(d),
    };
    let wire_bps = cfg.link.gbps * 1e9 * mf / (mf + wire_frames * (FRAME_HEADERS + WIRE_OVERHEAD));
    PerMessage {
        m: mf,
        app,
        kernel,
        host_after,
        engine,
        wire_bps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::costs::StageCost;

    /// A calibration where only the copy and the system call cost, so the
    /// mapping can be worked by hand.
    fn copy_only() -> Calibration {
        Calibration {
            syscall: StageCost::new(1000.0, 0.0),
            copy: StageCost::new(0.0, 1.0),
            ring_access: StageCost::new(100.0, 0.0),
            command: StageCost::new(400.0, 0.0),
            app: StageCost::new(0.0, 1.0),
            ..Calibration::zero()
        }
    }

    #[test]
    fn a_worked_example() {
        let mut cfg = MachineConfig::default();
        cfg.workload.message = 1000;
        cfg.link.gbps = 100.0;
        let e = LawsEstimate::new(&cfg, &copy_only()).unwrap();
        // Kernel: 1000 ns syscall + 1000 B × 1 ns = 2 ns/B; app 1 ns/B.
        assert!((e.comm_ns_per_byte - 2.0).abs() < 1e-12);
        assert!((e.app_ns_per_byte - 1.0).abs() < 1e-12);
        // Offload: command 400 + ring 100 + copy 1000 = 1.5 ns/B on the
        // host; the engine takes the command: 100 ns, 0.1 ns/B.
        assert!((e.host_after_ns_per_byte - 1.5).abs() < 1e-12);
        assert!((e.engine_ns_per_byte - 0.1).abs() < 1e-12);
        // 3 ns/B before: 8/3 Gb/s; 2.5 ns/B after: 3.2 Gb/s; both host-bound.
        assert!((e.before_bps - 8e9 / 3.0).abs() < 1.0, "{}", e.before_bps);
        assert!((e.after_bps - 3.2e9).abs() < 1.0, "{}", e.after_bps);
        assert_eq!((e.before_limit, e.after_limit), ("host", "host"));
        // A memory delay of 4 quadruples the ring access and the copy.
        cfg.memory.delay = 4.0;
        let e4 = LawsEstimate::new(&cfg, &copy_only()).unwrap();
        assert!((e4.host_after_ns_per_byte - (0.4 + 0.4 + 4.0)).abs() < 1e-12);
        // A slow link bounds both.
        cfg.link.gbps = 1.0;
        let slow = LawsEstimate::new(&cfg, &copy_only()).unwrap();
        assert_eq!((slow.before_limit, slow.after_limit), ("wire", "wire"));
        assert!((slow.before_bps - slow.wire_bps).abs() < 1e-6);
        // 1000 B in one frame: 1000 / (1000 + 86) of 1 Gb/s.
        assert!((slow.wire_bps - 1e9 * 1000.0 / 1086.0).abs() < 1e-3);
    }

    #[test]
    fn an_engine_doing_more_than_the_host_did_folds_into_the_lag() {
        // Software checksums at a memory delay of 10: the engine's checksum
        // costs ten times the kernel path's.
        let mut cfg = MachineConfig::default();
        cfg.nic.csum = false;
        cfg.memory.delay = 10.0;
        let mut cal = copy_only();
        cal.copy.c1 = 0.1;
        cal.csum.c1 = 1.0;
        let l = Laws::from_config(&cfg, &cal).unwrap();
        assert_eq!(l.offloaded, 1.0);
        assert!(l.lag > 4.0, "{l:?}");
        let e = LawsEstimate::new(&cfg, &cal).unwrap();
        assert_eq!(e.after_limit, "nic");
        // The NIC bound: the engine's ns per byte, at speed 1.
        let want = 8e9 / e.engine_ns_per_byte;
        assert!((e.after_bps - want).abs() / want < 1e-9);
        assert!(e.after_bps < e.before_bps, "offload hurts here");
    }

    #[test]
    fn a_free_kernel_path_is_refused() {
        let e = LawsEstimate::new(&MachineConfig::default(), &Calibration::zero());
        assert!(e.is_err());
    }
}
