//! softoe's lab: everything `softoe demo`, `softoe bench` and the machine
//! model's calibration and validation measure with, as a library the
//! command-line tool drives and other programs (and tests) can reuse.
//!
//! - [`bed`]: the testbed — an engine on a TAP (or an AF_XDP socket on a
//!   veth) beside Linux's TCP on one bridge, in namespaces of its own, torn
//!   down on drop;
//! - [`server`], [`servable`]: the servers both sides run (the same
//!   program on the engine and on Linux), and what each serves;
//! - [`linux`]: the Linux side's clients and its own measurements;
//! - [`demo`]: the main job, one table of softoe against Linux;
//! - [`bench`](mod@bench): every experiment of `softoe bench`, its targets and report;
//! - [`calibrate`], [`sim_validate`], [`sim_offload`], [`sim_machine`]: the
//!   machine model fitted to, checked against and used beside the real
//!   engine; [`simulated`]: the simulator's own experiments;
//! - [`conditions`], [`quiet`], [`place`]: the conditions a measurement runs
//!   under — where its parties run, and whether the machine was quiet;
//! - [`stats`]: medians with their intervals, paired ratios, verdicts within
//!   noise and two modes, for every repeated figure;
//! - [`report`], [`table`], [`plot`], [`units`]: reports, the one table
//!   renderer, plots and units.
//!
//! Most of it needs root: it builds network namespaces, bridges and TAP
//! devices.

pub mod bed;
pub mod bench;
pub mod calibrate;
pub mod conditions;
pub mod demo;
pub mod linux;
pub mod place;
pub mod plot;
pub mod quiet;
pub mod report;
pub mod servable;
pub mod server;
pub mod sim_machine;
pub mod sim_offload;
pub mod sim_validate;
pub mod simulated;
pub mod stats;
pub mod table;
pub mod units;
