//! `softoe`: the one binary of softoe, a software TCP/IP offload engine.
//!
//! Today it runs the protocol core in the deterministic simulator: `softoe
//! demo` moves data between two softoe stacks over lossy virtual wires and
//! prints what it took; `softoe sim transfer` runs one configurable transfer.
//! The engine, the real-wire demo against Linux, `stat` and `bench` follow
//! (see the issues in the repository).

mod demo;
mod linux;
mod report;
mod sim;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// softoe — a software TCP/IP offload engine.
///
/// A standalone TCP/IP stack that runs on a dedicated engine core and serves
/// host programs through shared memory. This build contains the protocol
/// core and its deterministic simulator.
#[derive(Debug, Parser)]
#[command(name = "softoe", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs softoe beside Linux on a real (virtual) wire and prints one
    /// table: bulk transfers both ways, 4-byte request/response latency, and
    /// transfers with 1 % random drops, each against the softoe engine and
    /// against Linux's own TCP over the same bridge.
    ///
    /// Builds network namespaces, a bridge and a TAP device (needs root),
    /// and removes them afterwards. `--simulated` runs the simulator's demo
    /// instead.
    Demo(demo::DemoArgs),
    /// Runs the deterministic simulator.
    #[command(subcommand)]
    Sim(sim::SimCommand),
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Demo(args) => demo::run(&args),
        Command::Sim(cmd) => sim::run(cmd),
    }
}
