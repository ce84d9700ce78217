//! The machine model: the full-system offload simulator.
//!
//! Whether offload pays depends on the whole machine: the host CPU, the
//! engine's core (at 25–100 % of the host's speed, or faster), the I/O bus
//! and its DMA, memory, the NIC's interrupt coalescing, the link. This
//! module simulates all of them around **the same softoe stack code** the
//! engine runs, each resource a queued server in virtual time — so
//! saturation is something that happens, not something assumed — and every
//! counted event priced `c0 + c1·bytes`. Beside each prediction it sets
//! what the analytic models say, so that where simulation and models part
//! ways there is something to explain.
//!
//! - [`config`]: [`MachineConfig`], the TOML file shared with the real
//!   engine's emulation (`softoe bench --emulate`), validated into
//!   [`MachineConfigError`]s that name the field;
//! - [`costs`]: the [`Calibration`], what each counted event costs (the
//!   defaults are orders of magnitude; `softoe sim calibrate` measures the
//!   real engine's);
//! - [`host`]: [`MachineNode`], a world node whose CPUs, bus and NIC take
//!   time, with the model written down in its docs;
//! - [`apps`]: the programs on it (stream source and sink, rr client and
//!   server);
//! - [`predict`](mod@predict): [`predict()`], which builds the host and its
//!   peer, runs the workload and reports a [`Prediction`];
//! - [`estimate`]: LAWS computed from the same configuration and
//!   calibration ([`LawsEstimate`], [`Laws::from_config`]);
//! - [`cpu`]: the CPUs as scheduled resources ([`Cores`]): cores shared
//!   by threads (the engine, programs, a Linux peer, softirq work) in time
//!   slices, with wake-up latencies on the same core and across cores, and
//!   CPU time charged as `/proc` charges it ([`ProcStat`]). It describes
//!   the testbed (two cores, the engine on one, everything else on the
//!   other) and the seeds' machines (an engine core and a host core of
//!   their own) as configurations of one model; it is checked against
//!   closed forms and not yet used by [`predict()`];
//! - [`queue`]: the queued servers ([`Server`], [`Pool`]) and the cost of an
//!   event ([`Cost`]), checked against queueing theory's closed forms;
//! - [`analytic`]: the LAWS model of stream throughput ([`Laws`]) and the
//!   EMO model of per-message latency and host overhead ([`EmoPath`]);
//! - [`scenarios`]: the papers' sweeps (Table I, Fig. 8, Fig. 3/4, HL-TCP
//!   Fig. 7, the break-even map) as functions returning rows, LAWS and EMO
//!   beside each.
//!
//! ## Example
//!
//! ```
//! use softoe_sim::machine::{Calibration, MachineConfig, predict};
//!
//! // 1 MiB sent with offload, then without, on the default machine.
//! let mut cfg = MachineConfig::default();
//! cfg.workload.bytes = 1 << 20;
//! let with = predict(&cfg, &Calibration::default()).unwrap();
//! cfg.host.offload = false;
//! let without = predict(&cfg, &Calibration::default()).unwrap();
//! assert!(with.intact && without.intact);
//! // Offload takes the stack off the host CPU.
//! assert!(with.host_cpu < without.host_cpu);
//! ```

pub mod analytic;
pub mod apps;
pub mod config;
pub mod costs;
pub mod cpu;
pub mod estimate;
pub mod host;
pub mod predict;
pub mod queue;
pub mod scenarios;

pub use analytic::{EmoPath, EmoRates, Laws, ModelError};
pub use apps::{ConnResult, Role};
pub use config::{
    BusSpec, EngineSpec, FlowDirection, HostSpec, LinkSpec, MachineConfig, MachineConfigError,
    MemorySpec, NicSpec, PeerModel, PeerSpec, WorkloadKind, WorkloadSpec,
};
pub use costs::{Calibration, CalibrationError, StageCost};
pub use cpu::{
    Affinity, CoreStat, Cores, CoresSpec, CpuError, Done, Job, JobId, ProcStat, ThreadId,
    ThreadKind, ThreadSpec, ThreadStat,
};
pub use estimate::LawsEstimate;
pub use host::{AppSpec, BusModel, Busy, MachineCounters, MachineNode, NodeError, NodeSpec};
pub use predict::{
    BusySeconds, Limits, MachineWorld, PredictError, Prediction, build, predict, predict_with,
};
pub use queue::{Cost, Pool, QueueError, Served, Server, ServerStats};
pub use scenarios::{MapRow, Row, Scenario, SweepOptions};
