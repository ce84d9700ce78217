//! `softoe`: the one binary of softoe, a software TCP/IP offload engine.
//!
//! Today it runs the protocol core in the deterministic simulator: `softoe
//! demo` moves data between two softoe stacks over lossy virtual wires and
//! prints what it took; `softoe sim transfer` runs one configurable transfer.
//! The engine, the real-wire demo against Linux, `stat` and `bench` follow
//! (see the issues in the repository).

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
    /// Moves data between two softoe stacks over simulated wires with 0 %,
    /// 0.1 % and 1 % loss, and prints a table of what it took.
    ///
    /// Everything runs in virtual time, so the figures are the protocol's own
    /// and the same on every machine (the wall time is not). Until the engine
    /// lands, this is softoe's demo.
    Demo(sim::DemoArgs),
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
        Command::Demo(args) => sim::demo(&args),
        Command::Sim(cmd) => sim::run(cmd),
    }
}
