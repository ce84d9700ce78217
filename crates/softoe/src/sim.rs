//! `softoe sim`: the deterministic simulator's commands. The experiments
//! themselves are the lab's ([`softoe_lab::simulated`], the machine model's
//! prediction, calibration, offload figures and validation).

use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use indicatif::ProgressBar;
use softoe_lab::report::{TransferRow, print_table};
use softoe_lab::simulated::{DemoArgs, GridArgs, demo, grid, print_rows, sweep};
use softoe_lab::table::Table;
use softoe_lab::units::parse_size;
use softoe_sim::scenario::Transfer;
use softoe_stack::Algorithm;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Cc {
    Cubic,
    Reno,
}

/// Options of one simulated transfer.
#[derive(Debug, Args)]
pub struct TransferArgs {
    /// Bytes to move (suffixes K, M, G: binary).
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    bytes: u64,
    /// Link rate in Gb/s.
    #[arg(long, default_value_t = 1.0)]
    rate_gbps: f64,
    /// One-way delay in microseconds.
    #[arg(long, default_value_t = 250)]
    delay_us: u64,
    /// Loss per frame, percent (both directions).
    #[arg(long, default_value_t = 1.0)]
    loss: f64,
    /// IP MTU.
    #[arg(long, default_value_t = 1500)]
    mtu: usize,
    /// Turn the NICs' offloads off (TSO, checksum, GRO).
    #[arg(long)]
    no_offloads: bool,
    /// Socket buffer size (suffixes K, M, G).
    #[arg(long, default_value = "4M", value_parser = parse_size)]
    buffer: u64,
    /// Congestion control.
    #[arg(long, value_enum, default_value_t = Cc::Cubic)]
    cc: Cc,
    /// Bottleneck queue in bytes, tail-dropped when full (suffixes K, M,
    /// G); unlimited when absent.
    #[arg(long, value_parser = parse_size)]
    queue: Option<u64>,
    /// Seed of the simulated world.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Options of a loss sweep.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Loss rates to run, percent, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0,0.1,1")]
    loss: Vec<f64>,
    /// Bytes per transfer (suffixes K, M, G: binary).
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    bytes: u64,
    /// Link rate in Gb/s.
    #[arg(long, default_value_t = 10.0)]
    rate_gbps: f64,
    /// One-way delay in microseconds.
    #[arg(long, default_value_t = 250)]
    delay_us: u64,
    /// Seed of the simulated world.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// `softoe sim …`.
#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// One bulk transfer between two softoe stacks.
    Transfer(TransferArgs),
    /// Two softoe stacks over simulated wires with 0 %, 0.1 % and 1 % loss
    /// (no root needed).
    Demo(DemoArgs),
    /// One connection's goodput at several loss rates (the figures in
    /// docs/journal/2026-11-22-one-connection-10g-by-loss.md).
    Sweep(SweepArgs),
    /// One connection per loss rate × round trip, its goodput beside the
    /// Mathis bound 1.22·MSS/(RTT·√p), with retransmissions, RTOs and
    /// tail-loss probes; a table, JSON, CSV and an SVG plot.
    Grid(GridArgs),
    /// The full-system model: what a machine (host and engine CPUs, memory,
    /// bus, NIC, link) moves for a workload with offload or without —
    /// throughput, latency, host and engine CPU — with LAWS beside it.
    Predict(softoe_lab::sim_machine::PredictArgs),
    /// Measures the model's costs on this machine's real engine: runs the
    /// `softoe bench --emulate` testbed through stream send and receive at
    /// 1, 16 and 64 KiB and a 64-byte request/response, with the engine's
    /// stages timed (and the streams again on Linux's TCP), fits each
    /// stage's `c0 + c1·bytes` by least squares and writes the calibration
    /// `softoe sim predict --calibration` reads. Needs root; 13 runs of
    /// 128 MiB or 10,000 round trips (`--quick`: 16 MiB or 1,000).
    Calibrate(softoe_lab::calibrate::CalibrateArgs),
    /// The papers' offload experiments on the machine model — Table I
    /// (latency by memory delay), Fig. 8 (throughput by engine speed),
    /// Fig. 3/4 (host load and interrupts), HL-TCP Fig. 7 (interrupt
    /// delay) and the break-even map — with LAWS and EMO beside each row.
    Offload(softoe_lab::sim_offload::OffloadArgs),
    /// The model's predictions beside the real engine's measurements: each
    /// machine file predicted, then measured `--reps` times on the engine
    /// configured the same way (as `softoe bench --emulate`), with an
    /// error table — throughput, p50 latency, host CPU, and whether the
    /// model picks the measured winner for each offload/Linux pair. Needs
    /// root. docs/sim/validate/ holds the blind set.
    Validate(softoe_lab::sim_validate::ValidateArgs),
}

/// `softoe sim …`.
pub fn run(cmd: SimCommand) -> Result<()> {
    match cmd {
        SimCommand::Demo(a) => demo(&a),
        SimCommand::Grid(a) => grid(&a),
        SimCommand::Predict(a) => softoe_lab::sim_machine::predict_cmd(&a),
        SimCommand::Calibrate(a) => softoe_lab::calibrate::calibrate_cmd(&a),
        SimCommand::Offload(a) => softoe_lab::sim_offload::offload_cmd(&a),
        SimCommand::Validate(a) => softoe_lab::sim_validate::validate_cmd(&a),
        SimCommand::Sweep(a) => {
            if a.loss.is_empty() || a.loss.iter().any(|l| !(0.0..=100.0).contains(l)) {
                bail!("--loss takes percentages between 0 and 100, e.g. --loss 0,0.1,1");
            }
            if !(a.rate_gbps > 0.0 && a.rate_gbps <= 1000.0) {
                bail!(
                    "--rate-gbps must be above 0 and at most 1000, got {}",
                    a.rate_gbps
                );
            }
            if a.bytes == 0 {
                bail!("--bytes must be above zero");
            }
            let t = Transfer {
                bytes: a.bytes,
                rate_bps: (a.rate_gbps * 1e9) as u64,
                delay: Duration::from_micros(a.delay_us),
                seed: a.seed,
                ..Transfer::default()
            };
            let losses: Vec<f64> = a.loss.iter().map(|l| l / 100.0).collect();
            let rows = sweep(t, &losses, a.json)?;
            let heading = format!(
                "One connection, {} Gb/s link, {} µs RTT, MTU 1500, offloads on, CUBIC, seed {}.",
                a.rate_gbps,
                2 * a.delay_us,
                a.seed
            );
            print_rows(&rows, a.json, &heading)?;
            if !a.json {
                let mut t = Table::new().right("");
                for r in &rows {
                    t.row_tail(
                        [format!("{:.1}%", r.loss_percent)],
                        &format!(
                            " loss: {:.2} virtual seconds per wall second",
                            r.virtual_secs_per_wall_sec
                        ),
                    );
                }
                print!("{t}");
            }
            Ok(())
        }
        SimCommand::Transfer(a) => {
            if !(0.0..=100.0).contains(&a.loss) {
                bail!("--loss is a percentage between 0 and 100, got {}", a.loss);
            }
            if !(a.rate_gbps > 0.0 && a.rate_gbps <= 1000.0) {
                bail!(
                    "--rate-gbps must be above 0 and at most 1000, got {}",
                    a.rate_gbps
                );
            }
            if !(576..=9216).contains(&a.mtu) {
                bail!("--mtu must be between 576 and 9216, got {}", a.mtu);
            }
            if a.bytes == 0 {
                bail!("--bytes must be above zero");
            }
            let buffer = usize::try_from(a.buffer).context("--buffer too large")?;
            if !(4096..=(256 << 20)).contains(&buffer) {
                bail!("--buffer must be between 4K and 256M, got {}", a.buffer);
            }
            if a.queue.is_some_and(|q| q < 2 * a.mtu as u64) {
                bail!(
                    "--queue must hold at least two frames ({} bytes)",
                    2 * a.mtu
                );
            }
            let t = Transfer {
                bytes: a.bytes,
                rate_bps: (a.rate_gbps * 1e9) as u64,
                delay: Duration::from_micros(a.delay_us),
                loss: a.loss / 100.0,
                mtu: a.mtu,
                offloads: !a.no_offloads,
                buffer,
                congestion: match a.cc {
                    Cc::Cubic => Algorithm::Cubic,
                    Cc::Reno => Algorithm::NewReno,
                },
                seed: a.seed,
                queue_limit: a
                    .queue
                    .map(|q| usize::try_from(q).context("--queue too large"))
                    .transpose()?,
            };
            let pb = if a.json {
                ProgressBar::hidden()
            } else {
                ProgressBar::new_spinner()
            };
            pb.set_message("simulating");
            pb.enable_steady_tick(Duration::from_millis(100));
            let r = t.run().context("building the simulated world")?;
            pb.finish_and_clear();
            let row = TransferRow::from(&r);
            if a.json {
                println!("{}", serde_json::to_string_pretty(&row)?);
            } else {
                print_table(std::slice::from_ref(&row));
                println!(
                    "\n{:.3} virtual seconds per wall second; {} frames on the wire.",
                    row.virtual_secs_per_wall_sec, row.wire_frames
                );
            }
            if !r.intact {
                bail!("the transfer did not deliver every byte intact");
            }
            Ok(())
        }
    }
}
