//! The simulator's experiments as `softoe sim` runs them: the simulated
//! demo (two softoe stacks over lossy wires, no root needed), loss sweeps,
//! and the loss × round-trip grid beside the Mathis bound, with its table,
//! CSV and plot.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use plotters::prelude::*;
use serde::Serialize;
use softoe_sim::grid::{PointReport, Sizing, run_point};
use softoe_sim::scenario::Transfer;

use crate::report::{TransferRow, print_table};
use crate::table::Table;
use crate::units::{parse_size, rate, ratio, size};

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

/// Options of the loss × RTT grid.
#[derive(Debug, Args)]
pub struct GridArgs {
    /// Loss rates, percent of frames each way, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0.1,0.5,1,2,5,10")]
    loss: Vec<f64>,
    /// Round trips in microseconds (the link's delay both ways),
    /// comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "10,100,1000,10000,100000"
    )]
    rtt_us: Vec<u64>,
    /// Link rate in Gb/s.
    #[arg(long, default_value_t = 10.0)]
    rate_gbps: f64,
    /// Socket buffers at both ends (suffixes K, M, G); one buffer per round
    /// trip is the window limit.
    #[arg(long, default_value = "4M", value_parser = parse_size)]
    buffer: u64,
    /// Seed of the simulated world.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Bytes for every point (suffixes K, M, G). By default each point's
    /// are scaled to the goodput the model expects there (--rtts, --losses,
    /// --max-bytes).
    #[arg(long, value_parser = parse_size)]
    bytes: Option<u64>,
    /// Round trips each point covers at the goodput the model expects.
    #[arg(long, default_value_t = 500)]
    rtts: u32,
    /// Loss events each point expects (bytes ≥ this ÷ loss × MSS).
    #[arg(long, default_value_t = 200)]
    losses: u32,
    /// Most bytes per point (suffixes K, M, G).
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    max_bytes: u64,
    /// Virtual seconds a point may take; one still running then is
    /// reported incomplete.
    #[arg(long, default_value_t = 3600)]
    time_limit_s: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write the rows as CSV to this file.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Also draw goodput ÷ Mathis against loss, one line per RTT, into this
    /// SVG file.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
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
pub fn sweep(t: Transfer, losses: &[f64], quiet: bool) -> Result<Vec<TransferRow>> {
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

pub fn print_rows(rows: &[TransferRow], json: bool, heading: &str) -> Result<()> {
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

/// One point of the grid, as printed, as JSON and as CSV.
#[derive(Debug, Clone, Serialize)]
struct GridRow {
    loss_percent: f64,
    rtt_us: f64,
    link_gbps: f64,
    /// Bytes the point was to move.
    requested_bytes: u64,
    /// Bytes that arrived.
    bytes: u64,
    /// Every byte arrived within the time limit.
    complete: bool,
    /// Every byte arrived once, in order, unaltered, and the connection did
    /// not fail.
    intact: bool,
    /// A byte arrived out of place or altered.
    corrupt: bool,
    virtual_secs: f64,
    goodput_gbps: f64,
    /// 1.22·MSS/(RTT·√p); absent without loss.
    mathis_gbps: Option<f64>,
    /// The link rate less headers and framing.
    link_ceiling_gbps: f64,
    /// One socket buffer per round trip.
    window_gbps: f64,
    /// What binds: `loss` (the Mathis bound applies), `link` or `window`.
    limit: &'static str,
    /// Goodput ÷ the Mathis bound, where loss binds.
    of_mathis: Option<f64>,
    /// Goodput ÷ the lowest of the three.
    of_bound: f64,
    mss: u32,
    retransmits: u64,
    rto_count: u32,
    tlp_probes: u32,
    tlp_recoveries: u32,
    lost_retransmits: u32,
    fast_retransmits: u32,
    spurious_retransmits: u32,
    srtt_us: f64,
    min_rtt_us: f64,
    wall_secs: f64,
}

impl From<&PointReport> for GridRow {
    fn from(p: &PointReport) -> GridRow {
        let r = &p.report;
        let t = &r.transfer;
        let m = &p.model;
        let i = r.sender;
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        GridRow {
            loss_percent: t.loss * 100.0,
            rtt_us: us(m.rtt),
            link_gbps: t.rate_bps as f64 / 1e9,
            requested_bytes: t.bytes,
            bytes: r.bytes,
            complete: r.complete,
            intact: r.intact,
            corrupt: r.corrupt,
            virtual_secs: r.elapsed.as_secs_f64(),
            goodput_gbps: r.goodput_bps / 1e9,
            mathis_gbps: m.mathis_bps.is_finite().then_some(m.mathis_bps / 1e9),
            link_ceiling_gbps: m.link_bps / 1e9,
            window_gbps: m.window_bps / 1e9,
            limit: m.limit().name(),
            of_mathis: p.of_mathis(),
            of_bound: p.of_bound(),
            mss: m.mss,
            retransmits: i.map_or(0, |i| i.retransmits),
            rto_count: i.map_or(0, |i| i.rto_count),
            tlp_probes: i.map_or(0, |i| i.tlp_probes),
            tlp_recoveries: i.map_or(0, |i| i.tlp_recoveries),
            lost_retransmits: i.map_or(0, |i| i.lost_retransmits),
            fast_retransmits: i.map_or(0, |i| i.fast_retransmits),
            spurious_retransmits: i.map_or(0, |i| i.spurious_retransmits),
            srtt_us: i.map_or(0.0, |i| us(i.srtt)),
            min_rtt_us: i.map_or(0.0, |i| us(i.min_rtt)),
            wall_secs: r.wall.as_secs_f64(),
        }
    }
}

/// A round trip with a readable unit.
fn rtt_label(us: f64) -> String {
    if us >= 1000.0 {
        format!("{} ms", us / 1000.0)
    } else {
        format!("{us} µs")
    }
}

fn grid_table(rows: &[GridRow]) -> String {
    let mut t = Table::new().rights(&[
        "loss", "RTT", "bytes", "goodput", "Mathis", "bound", "÷bound", "÷Mathis", "retrans",
        "RTO", "TLP", "lost rtx", "intact", "wall s",
    ]);
    for r in rows {
        let intact = if r.intact {
            "yes"
        } else if r.corrupt {
            "CORRUPT"
        } else if !r.complete {
            "timeout"
        } else {
            "FAILED"
        };
        t.row([
            format!("{}%", r.loss_percent),
            rtt_label(r.rtt_us),
            size(r.bytes),
            rate(r.goodput_gbps),
            r.mathis_gbps.map_or("—".to_string(), rate),
            r.limit.to_string(),
            ratio(r.of_bound),
            r.of_mathis.map_or("n/a".to_string(), ratio),
            r.retransmits.to_string(),
            r.rto_count.to_string(),
            r.tlp_probes.to_string(),
            r.lost_retransmits.to_string(),
            intact.to_string(),
            format!("{:.2}", r.wall_secs),
        ]);
    }
    t.render()
}

fn grid_csv(rows: &[GridRow]) -> String {
    let mut out = String::from(
        "loss_percent,rtt_us,link_gbps,requested_bytes,bytes,complete,intact,corrupt,\
         virtual_secs,goodput_gbps,mathis_gbps,link_ceiling_gbps,window_gbps,limit,of_mathis,\
         of_bound,mss,retransmits,rto_count,tlp_probes,tlp_recoveries,lost_retransmits,\
         fast_retransmits,spurious_retransmits,srtt_us,min_rtt_us,wall_secs\n",
    );
    let opt = |x: Option<f64>| x.map_or(String::new(), |x| x.to_string());
    for r in rows {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            r.loss_percent,
            r.rtt_us,
            r.link_gbps,
            r.requested_bytes,
            r.bytes,
            r.complete,
            r.intact,
            r.corrupt,
            r.virtual_secs,
            r.goodput_gbps,
            opt(r.mathis_gbps),
            r.link_ceiling_gbps,
            r.window_gbps,
            r.limit,
            opt(r.of_mathis),
            r.of_bound,
            r.mss,
            r.retransmits,
            r.rto_count,
            r.tlp_probes,
            r.tlp_recoveries,
            r.lost_retransmits,
            r.fast_retransmits,
            r.spurious_retransmits,
            r.srtt_us,
            r.min_rtt_us,
            r.wall_secs
        );
    }
    out
}

/// The band goodput ÷ Mathis should sit in (loss-based TCP near the model).
const BAND: (f64, f64) = (0.8, 1.5);

/// Goodput ÷ Mathis against loss on log–log axes, one line per round trip
/// (points where loss binds only), with the 0.8–1.5 band shaded.
fn plot_grid(path: &Path, title: &str, rows: &[GridRow]) -> Result<()> {
    let mut rtts: Vec<f64> = rows.iter().map(|r| r.rtt_us).collect();
    rtts.sort_by(f64::total_cmp);
    rtts.dedup();
    let series: Vec<(String, Vec<(f64, f64)>)> = rtts
        .iter()
        .map(|&rtt| {
            let mut pts: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.rtt_us == rtt && r.loss_percent > 0.0)
                .filter_map(|r| Some((r.loss_percent, r.of_mathis?)))
                .filter(|&(_, y)| y.is_finite() && y > 0.0)
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            (format!("RTT {}", rtt_label(rtt)), pts)
        })
        .collect();
    let xs = rows
        .iter()
        .map(|r| r.loss_percent)
        .filter(|&x| x > 0.0 && x.is_finite());
    let (x0, x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    if !(x0.is_finite() && x1.is_finite()) {
        bail!("nothing to plot: no loss rate above zero");
    }
    let ys = series.iter().flat_map(|(_, p)| p.iter().map(|&(_, y)| y));
    let (y0, y1) = ys.fold(BAND, |(a, b), y| (a.min(y), b.max(y)));
    let err = |e: &dyn std::fmt::Display| anyhow!("plotting {}: {e}", path.display());
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(
            (x0 / 1.5..x1 * 1.5).log_scale(),
            (y0 / 1.5..y1 * 1.5).log_scale(),
        )
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("loss each way, %")
        .y_desc("goodput ÷ Mathis bound")
        .draw()
        .map_err(|e| err(&e))?;
    let (bx0, bx1) = (x0 / 1.5, x1 * 1.5);
    chart
        .draw_series(std::iter::once(Rectangle::new(
            [(bx0, BAND.0), (bx1, BAND.1)],
            GREEN.mix(0.12).filled(),
        )))
        .map_err(|e| err(&e))?
        .label(format!("{}–{} × Mathis", BAND.0, BAND.1))
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 24, y + 5)], GREEN.mix(0.25).filled()));
    for b in [BAND.0, BAND.1] {
        chart
            .draw_series(DashedLineSeries::new(
                [(bx0, b), (bx1, b)],
                6,
                4,
                GREEN.mix(0.8).stroke_width(1),
            ))
            .map_err(|e| err(&e))?;
    }
    // Distinct from the band's green and from each other.
    let colors = [
        RGBColor(214, 39, 40),
        RGBColor(31, 119, 180),
        RGBColor(148, 103, 189),
        RGBColor(255, 127, 14),
        RGBColor(40, 40, 40),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(23, 190, 207),
    ];
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = colors[i % colors.len()];
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Runs every point of the grid (loss-major), with a progress bar.
fn run_grid(a: &GridArgs) -> Result<Vec<GridRow>> {
    let sizing = Sizing {
        rtts: a.rtts,
        losses: a.losses,
        max_bytes: a.max_bytes,
        ..Sizing::default()
    };
    let base = Transfer {
        rate_bps: (a.rate_gbps * 1e9) as u64,
        buffer: usize::try_from(a.buffer).context("--buffer too large")?,
        seed: a.seed,
        ..Transfer::default()
    };
    let n = (a.loss.len() * a.rtt_us.len()) as u64;
    let pb = if a.json {
        ProgressBar::hidden()
    } else {
        bar(n, "simulating the grid")
    };
    let mut rows = Vec::new();
    for &rtt in &a.rtt_us {
        for &loss in &a.loss {
            let t = Transfer {
                loss: loss / 100.0,
                delay: Duration::from_nanos(rtt.saturating_mul(500)),
                ..base
            };
            let p = run_point(t, &sizing, a.bytes, Duration::from_secs(a.time_limit_s))
                .context("building the simulated world")?;
            rows.push(GridRow::from(&p));
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    Ok(rows)
}

/// `softoe sim grid`.
pub fn grid(a: &GridArgs) -> Result<()> {
    if a.loss.is_empty() || a.loss.iter().any(|l| !(0.0..100.0).contains(l)) {
        bail!("--loss takes percentages from 0 up to (not including) 100, e.g. --loss 0.1,1,10");
    }
    if a.rtt_us.is_empty() || a.rtt_us.iter().any(|r| !(1..=10_000_000).contains(r)) {
        bail!("--rtt-us takes round trips from 1 µs to 10 s, e.g. --rtt-us 10,1000,100000");
    }
    if !(a.rate_gbps > 0.0 && a.rate_gbps <= 1000.0) {
        bail!(
            "--rate-gbps must be above 0 and at most 1000, got {}",
            a.rate_gbps
        );
    }
    if !(4096..=(256 << 20)).contains(&a.buffer) {
        bail!("--buffer must be between 4K and 256M, got {}", a.buffer);
    }
    if a.bytes == Some(0) {
        bail!("--bytes must be above zero");
    }
    if a.rtts == 0 || a.max_bytes < (1 << 20) {
        bail!("--rtts must be at least 1 and --max-bytes at least 1M");
    }
    if a.time_limit_s == 0 {
        bail!("--time-limit-s must be at least 1");
    }
    let wall = std::time::Instant::now();
    let rows = run_grid(a)?;
    let wall = wall.elapsed();
    let heading = format!(
        "One connection per point: {} Gb/s link, loss each way, MTU 1500, offloads on, CUBIC, \
         {} buffers, seed {}.\nMathis = 1.22·MSS/(RTT·√p); \"bound\" is what binds: loss (the \
         Mathis ratio applies), the link's payload rate or one buffer per RTT (n/a).",
        a.rate_gbps,
        size(a.buffer),
        a.seed
    );
    let text = if a.json {
        serde_json::to_string_pretty(&rows)? + "\n"
    } else {
        format!(
            "{heading}\n\n{}\n{} points in {:.1} s of wall time.\n",
            grid_table(&rows),
            rows.len(),
            wall.as_secs_f64()
        )
    };
    // A reader that went away (`| head`) is no failure of the grid.
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            return Err(e).context("writing to standard output");
        }
        _ => {}
    }
    if let Some(path) = &a.csv {
        std::fs::write(path, grid_csv(&rows))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &a.plot {
        let title = format!(
            "softoe sim grid: goodput ÷ Mathis where loss binds, {} Gb/s link, seed {}",
            a.rate_gbps, a.seed
        );
        plot_grid(path, &title, &rows)?;
    }
    if rows.iter().any(|r| r.corrupt || (r.complete && !r.intact)) {
        bail!("a transfer delivered a byte out of place or failed");
    }
    let late = rows.iter().filter(|r| !r.complete).count();
    if late > 0 {
        eprintln!(
            "{late} point(s) did not finish within {} virtual seconds (raise --time-limit-s)",
            a.time_limit_s
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        grid: GridArgs,
    }

    fn args(extra: &[&str]) -> GridArgs {
        Cli::parse_from(std::iter::once("grid").chain(extra.iter().copied())).grid
    }

    #[test]
    fn grid_table_csv_and_plot() {
        // At 1 Gb/s the 100 µs, 1 % point is link-bound (Mathis 1.41 Gb/s);
        // the others are loss-bound.
        let a = args(&[
            "--loss",
            "1,5",
            "--rtt-us",
            "100,10000",
            "--rate-gbps",
            "1",
            "--bytes",
            "256K",
            "--json",
        ]);
        let rows = run_grid(&a).unwrap();
        assert_eq!(rows.len(), 4);
        assert!(rows.iter().all(|r| r.intact && r.complete && !r.corrupt));
        let link: Vec<_> = rows.iter().filter(|r| r.limit == "link").collect();
        assert_eq!(link.len(), 1);
        assert_eq!((link[0].loss_percent, link[0].rtt_us), (1.0, 100.0));
        assert!(link[0].of_mathis.is_none());
        for r in rows.iter().filter(|r| r.limit == "loss") {
            let m = r.of_mathis.unwrap();
            assert!(m > 0.0 && (m - r.goodput_gbps / r.mathis_gbps.unwrap()).abs() < 1e-9);
        }

        let table = grid_table(&rows);
        assert_eq!(table.lines().count(), 5, "{table}");
        assert!(table.contains("n/a") && table.contains("10 ms"), "{table}");

        let csv = grid_csv(&rows);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 5);
        let cols = lines[0].split(',').count();
        assert_eq!(cols, 27);
        assert!(lines.iter().all(|l| l.split(',').count() == cols), "{csv}");
        let of_mathis = lines[0].split(',').position(|c| c == "of_mathis").unwrap();
        let link_line = lines[1..].iter().find(|l| l.contains(",link,")).unwrap();
        assert_eq!(link_line.split(',').nth(of_mathis), Some(""));

        let dir = std::env::temp_dir().join(format!("softoe-grid-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("grid.svg");
        plot_grid(&path, "t", &rows).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("RTT 100 µs") && svg.contains("RTT 10 ms"));
        assert!(svg.contains("0.8–1.5 × Mathis"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn grid_rejects_bad_input() {
        for bad in [
            &["--loss", "100"][..],
            &["--loss=-1"],
            &["--rtt-us", "0"],
            &["--rate-gbps", "0"],
            &["--bytes", "0"],
            &["--buffer", "1K"],
            &["--time-limit-s", "0"],
        ] {
            let e = grid(&args(bad)).unwrap_err().to_string();
            assert!(e.contains("--"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn readable_rates_and_ratios() {
        assert_eq!(rate(9.4321), "9.43 Gb/s");
        assert_eq!(rate(44.69), "44.7 Gb/s");
        assert_eq!(rate(0.773), "773 Mb/s");
        assert_eq!(rate(0.003193), "3.19 Mb/s");
        assert_eq!(rate(0.000245), "245 kb/s");
        assert_eq!(ratio(1.071), "1.07");
        assert_eq!(ratio(0.0137), "0.014");
        assert_eq!(ratio(0.00071), "0.0007");
        assert_eq!(rtt_label(10.0), "10 µs");
        assert_eq!(rtt_label(100_000.0), "100 ms");
    }

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
