//! `softoe`: the one binary of softoe, a software TCP/IP offload engine.
//!
//! - `softoe demo` puts the engine on a TAP beside Linux's TCP on one bridge
//!   and prints both side by side;
//! - `softoe engine` runs the engine (config file and flags);
//! - `softoe run -- PROGRAM` runs an unmodified program on the engine;
//! - `softoe stat` shows a running engine's connections like `ss -ti`;
//! - `softoe bench` measures softoe beside Linux in one run;
//! - `softoe sim` runs the protocol core in the deterministic simulator.

mod config;
mod engine;
mod run;
mod sim;
mod stat;

use softoe_lab::{bench, demo};

use anyhow::Result;
use clap::{Parser, Subcommand};

/// softoe — a software TCP/IP offload engine.
///
/// A standalone TCP/IP stack that runs on a dedicated engine core and serves
/// host programs through shared memory. It uses the NIC's offloads (TSO,
/// checksum offload, receive coalescing) through a TAP device with
/// virtio-net headers. Logs go to stderr; set RUST_LOG=info (or debug).
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
    /// Runs the engine on a TAP device with built-in services, until Ctrl-C.
    ///
    /// Configuration comes from a TOML file (--config) and flags, flags
    /// winning; --print-config shows the merged result. Serves `softoe
    /// stat` on its control socket.
    Engine(Box<engine::EngineArgs>),
    /// Runs an unmodified program on a running engine (LD_PRELOAD shim).
    ///
    /// Its IPv4 TCP and UDP sockets (and the IPv4 side of dual-stack IPv6
    /// ones) are served by the engine; loopback (and --kernel-nets), Unix
    /// sockets and real IPv6 addresses stay with the kernel. Start the
    /// engine first, then run the program:
    ///
    ///   softoe engine --tap sotap0 --address 10.0.0.1/24 --host /run/softoe/host.sock
    ///   softoe run -- curl -o /dev/null http://10.0.0.2/file
    ///
    /// Set RUST_LOG=softoe_preload=debug to see the shim's decisions.
    Run(run::RunArgs),
    /// Shows a running engine's connections and counters, like `ss -ti`.
    Stat(stat::StatArgs),
    /// Measures softoe beside Linux over the same bridge in one run and
    /// prints tables: bulk goodput with CPU per GiB (the server program,
    /// the engine, the whole machine) for each send policy and Linux, a
    /// ping-pong sweep by message size (p50/p99/p99.9, bandwidth, host CPU
    /// utilization), and the targets as ratios to Linux.
    ///
    /// Needs root (namespaces, a bridge, a TAP). `--quick` takes about a
    /// minute; `--json` prints the figures for machines.
    Bench(Box<bench::BenchArgs>),
    /// Runs the deterministic simulator.
    #[command(subcommand)]
    Sim(sim::SimCommand),
    /// The demo's softoe side: servers attached to the engine (started by
    /// `softoe demo`).
    #[command(hide = true)]
    DemoServers(demo::ServersArgs),
    /// The benchmark's servers, on the engine or on Linux (started by
    /// `softoe bench`).
    #[command(hide = true)]
    BenchServers(bench::ServersArgs),
    /// The program the benchmark's reclaim scenario kills: one thread
    /// holding the connections it accepts (started by `softoe bench`).
    #[command(hide = true)]
    BenchHold(bench::HoldArgs),
}

/// Large buffers (every connection's receive ring and copy ring) come
/// straight from `mmap`, whatever was freed before: glibc otherwise raises
/// its mmap threshold to the largest block freed (up to 32 MiB), after
/// which each new connection's megabytes come from the heap and `calloc`
/// zeroes them by hand — resident memory and a memset for every
/// connection, also for bytes it never uses. Fresh mappings are zero pages
/// until touched, and freed ones go back to the system.
fn fixed_mmap_threshold() {
    let _ = softoe_sys::malloc::fixed_mmap_threshold(256 * 1024);
}

fn main() -> Result<()> {
    fixed_mmap_threshold();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Demo(args) => demo::run(&args),
        Command::Engine(args) => engine::run(&args),
        Command::Run(args) => run::run(&args),
        Command::Stat(args) => stat::run(&args),
        Command::Sim(cmd) => sim::run(cmd),
        Command::DemoServers(args) => demo::servers(&args),
        Command::Bench(args) => bench::run(&args),
        Command::BenchServers(args) => bench::servers(&args),
        Command::BenchHold(args) => bench::hold(&args),
    }
}
