//! `softoe demo` and `softoe sim`.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use softoe_sim::scenario::Transfer;
use softoe_stack::Algorithm;

use crate::report::{TransferRow, print_table};

/// Options of the simulated demo.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Bytes per transfer (suffixes K, M, G: binary).
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    bytes: u64,
    /// Seed of the simulated world (same seed, same result).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

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
    /// docs/results.md: `softoe sim sweep`).
    Sweep(SweepArgs),
}

/// Parses `64M`, `1G`, `4096`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(format!("unknown size suffix '{c}' (use K, M or G)")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size like 4096, 64K, 64M or 1G"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("'{s}' is too large"))
}

fn bar(len: u64, msg: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len}") {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(msg.to_string());
    pb
}

/// Runs `t` at each loss rate (fractions), with a progress bar.
fn sweep(t: Transfer, losses: &[f64], quiet: bool) -> Result<Vec<TransferRow>> {
    let pb = if quiet {
        ProgressBar::hidden()
    } else {
        bar(losses.len() as u64, "simulating transfers")
    };
    let mut rows = Vec::new();
    for &loss in losses {
        let r = Transfer { loss, ..t }
            .run()
            .context("building the simulated world")?;
        rows.push(TransferRow::from(&r));
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok(rows)
}

fn print_rows(rows: &[TransferRow], json: bool, heading: &str) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(rows)?);
    } else {
        println!("{heading}\n");
        print_table(rows);
    }
    if rows.iter().any(|r| !r.intact) {
        bail!("a transfer did not deliver every byte intact");
    }
    Ok(())
}

impl DemoArgs {
    /// Defaults, printing JSON or a table.
    pub fn new(json: bool) -> DemoArgs {
        DemoArgs {
            json,
            bytes: 64 << 20,
            seed: 1,
        }
    }
}

/// The simulated demo (`softoe sim demo`, `softoe demo --simulated`).
pub fn demo(args: &DemoArgs) -> Result<()> {
    if args.bytes == 0 {
        bail!("--bytes must be above zero");
    }
    let t = Transfer {
        bytes: args.bytes,
        seed: args.seed,
        ..Transfer::default()
    };
    let rows = sweep(t, &[0.0, 0.001, 0.01], args.json)?;
    let heading = format!(
        "softoe sim demo: two softoe stacks, {} Gb/s link, {} µs RTT, MTU {}, TSO/checksum offload/GRO on, CUBIC.\n\
         Simulated (virtual time; seed {}). `softoe demo` runs softoe against Linux on a real wire.",
        t.rate_bps as f64 / 1e9,
        2 * t.delay.as_micros(),
        t.mtu,
        args.seed
    );
    print_rows(&rows, args.json, &heading)
}

/// `softoe sim …`.
pub fn run(cmd: SimCommand) -> Result<()> {
    match cmd {
        SimCommand::Demo(a) => demo(&a),
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
                for r in &rows {
                    println!(
                        "{:>5.1}% loss: {:.2} virtual seconds per wall second",
                        r.loss_percent, r.virtual_secs_per_wall_sec
                    );
                }
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

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("64m"), Ok(64 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert!(parse_size("12X").is_err());
        assert!(parse_size("abc").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999999G").is_err());
    }
}
