//! `softoe sim predict`: what the machine model predicts for one
//! configuration — throughput, latency, host and engine CPU — with LAWS's
//! analytic bound beside it.
//!
//! The configuration file is the one `softoe bench --emulate` will run the
//! real engine with (`softoe_sim::machine::MachineConfig`); the
//! calibration prices each counted event (`softoe_sim::machine::Calibration`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use serde::Serialize;
use softoe_sim::machine::{Calibration, LawsEstimate, MachineConfig, Prediction, predict};

/// Options of `softoe sim predict`.
#[derive(Debug, Args)]
pub struct PredictArgs {
    /// The machine: a TOML file with sections `[host]` (offload), `[engine]`
    /// (speed relative to the host, spin), `[memory]` (delay multiplier),
    /// `[bus]`, `[nic]` (offloads, interrupt coalescing, polling), `[link]`,
    /// `[workload]` (stream or rr, direction, message size, connections) and
    /// `[peer]`. Every field has a default; `--print-config` shows them.
    config: Option<PathBuf>,
    #[command(flatten)]
    machine: MachineArgs,
    /// Print the configuration that would run (the file, the changes and
    /// the defaults) as TOML, and stop.
    #[arg(long)]
    print_config: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// The options of every `softoe sim` command that models a machine: the
/// calibration and changes to the machine file.
#[derive(Debug, Args)]
pub struct MachineArgs {
    /// What each counted event costs (TOML, as `softoe sim calibrate`
    /// writes it). Without it, the calibration measured on the project's
    /// test machine (docs/sim/calibration.toml); `builtin`: the model's
    /// order-of-magnitude costs.
    #[arg(long, short, value_name = "FILE")]
    pub calibration: Option<PathBuf>,
    /// Change one field of the machine, e.g. `--set engine.speed=0.25
    /// --set workload.kind=rr --set link.loss=0.001` (after the file).
    #[arg(long = "set", value_name = "SECTION.FIELD=VALUE")]
    pub set: Vec<String>,
}

/// Where a calibration came from, for a report: its note (the command,
/// date and machine that made it), or the built-in defaults.
pub fn calibration_source(cal: &Calibration) -> &str {
    if cal.note.is_empty() {
        "built-in defaults"
    } else {
        cal.note.as_str()
    }
}

/// A TOML value from the command line: a number, a boolean or a quoted
/// string as TOML reads it, else the text as a string (`rr`, `send`).
fn value(v: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("x = {v}"))
        .ok()
        .and_then(|mut t| t.remove("x"))
        .unwrap_or_else(|| toml::Value::String(v.to_string()))
}

/// Puts every field of `over` into `base`, section by section.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

fn read_table(path: &Path) -> Result<toml::Table> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("{} is not valid TOML", path.display()))
}

/// The configuration from the file, the `--set` changes and the defaults,
/// validated.
pub fn load_config(file: Option<&Path>, set: &[String]) -> Result<MachineConfig> {
    load_config_over(toml::Table::new(), file, set)
}

/// As [`load_config`], with the file's fields laid over `base` (a
/// scenario's own setup) before the `--set` changes.
pub fn load_config_over(
    mut table: toml::Table,
    file: Option<&Path>,
    set: &[String],
) -> Result<MachineConfig> {
    if let Some(p) = file {
        merge(&mut table, read_table(p)?);
    }
    for s in set {
        let (key, v) = s
            .split_once('=')
            .ok_or_else(|| anyhow!("--set {s}: expected SECTION.FIELD=VALUE"))?;
        let (section, field) = key
            .trim()
            .split_once('.')
            .ok_or_else(|| anyhow!("--set {s}: expected SECTION.FIELD=VALUE"))?;
        let entry = table
            .entry(section.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let toml::Value::Table(t) = entry else {
            bail!("--set {s}: {section} is not a section");
        };
        t.insert(field.to_string(), value(v.trim()));
    }
    let cfg: MachineConfig = table
        .try_into()
        .map_err(|e| anyhow!("machine configuration: {e}"))?;
    cfg.validate()
        .map_err(|e| anyhow!("machine configuration: {e}"))?;
    Ok(cfg)
}

/// The calibration measured on this project's test machine by `softoe sim
/// calibrate` (its `note` says the command, date and machine): what the
/// model prices events with unless told otherwise.
pub const SHIPPED_CALIBRATION: &str = include_str!("../../../docs/sim/calibration.toml");

/// The calibration from `file`; `builtin` names the model's
/// order-of-magnitude costs; none: the shipped, measured one.
pub fn load_calibration(file: Option<&Path>) -> Result<Calibration> {
    let cal = match file {
        Some(p) if p == Path::new("builtin") && !p.exists() => Calibration::default(),
        None => toml::from_str(SHIPPED_CALIBRATION).context("the shipped calibration")?,
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            toml::from_str(&text).with_context(|| format!("calibration {}", p.display()))?
        }
    };
    cal.validate().map_err(|e| anyhow!("calibration: {e}"))?;
    Ok(cal)
}

/// LAWS beside the simulation.
#[derive(Debug, Serialize)]
struct LawsRow {
    /// Before offload (the stack on the host), bits per second.
    before_bps: f64,
    /// What bounds it.
    before_limit: &'static str,
    /// After offload, bits per second.
    after_bps: f64,
    /// What bounds it.
    after_limit: &'static str,
    /// LAWS for this configuration (offload or not).
    this_bps: f64,
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    config: &'a MachineConfig,
    calibration: &'a str,
    prediction: &'a Prediction,
    laws: Option<LawsRow>,
}

fn pct(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

fn gbps(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.3} Gb/s", bps / 1e9)
    } else {
        format!("{:.1} Mb/s", bps / 1e6)
    }
}

/// Runs `softoe sim predict`.
pub fn predict_cmd(a: &PredictArgs) -> Result<()> {
    let cfg = load_config(a.config.as_deref(), &a.machine.set)?;
    if a.print_config {
        print!("{}", toml::to_string(&cfg)?);
        return Ok(());
    }
    let cal = load_calibration(a.machine.calibration.as_deref())?;
    let p = predict(&cfg, &cal).map_err(|e| anyhow!("simulating: {e}"))?;
    let laws = LawsEstimate::new(&cfg, &cal).ok().map(|l| LawsRow {
        before_bps: l.before_bps,
        before_limit: l.before_limit,
        after_bps: l.after_bps,
        after_limit: l.after_limit,
        this_bps: l.for_config(&cfg),
    });
    let source = calibration_source(&cal);
    // The table names the calibration by its first sentence (the command,
    // date and machine); the JSON carries the whole note.
    let short = source.split_once(". ").map_or(source, |(first, _)| first);
    if a.json {
        let r = Report {
            config: &cfg,
            calibration: source,
            prediction: &p,
            laws,
        };
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", render(&cfg, short, &p, laws.as_ref()));
    }
    if !p.complete {
        bail!(
            "the workload did not finish within the virtual-time limit{}",
            if p.stalled { " (it stalled)" } else { "" }
        );
    }
    if !p.intact {
        bail!("a connection failed or delivered bytes that were not the ones sent");
    }
    Ok(())
}

fn render(cfg: &MachineConfig, source: &str, p: &Prediction, laws: Option<&LawsRow>) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let w = &cfg.workload;
    let _ = writeln!(
        o,
        "softoe sim predict: {} with {} B messages, {} connection(s); {}",
        format!("{:?} {:?}", w.kind, w.direction).to_lowercase(),
        w.message,
        w.connections,
        if cfg.host.offload {
            format!(
                "offload to an engine at {} × the host's speed, memory delay × {}",
                cfg.engine.speed, cfg.memory.delay
            )
        } else {
            "no offload (the stack on the host)".to_string()
        }
    );
    let _ = writeln!(
        o,
        "  link {} Gb/s, {} µs, MTU {}, loss {}; NIC tso {} csum {} gro {}, interrupt after {} frame(s) or {} µs{}; calibration: {source}",
        cfg.link.gbps,
        cfg.link.delay_us,
        cfg.link.mtu,
        cfg.link.loss,
        cfg.nic.tso,
        cfg.nic.csum,
        cfg.nic.gro,
        cfg.nic.coalesce_frames,
        cfg.nic.coalesce_us,
        if cfg.nic.polling {
            ", polling"
        } else if !cfg.nic.napi {
            ", every interrupt taken (no NAPI)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        o,
        "  throughput   {} ({:.0} messages/s)",
        gbps(p.throughput_bps),
        p.messages_per_sec
    );
    if let (Some(p50), Some(p99)) = (p.latency_p50_us, p.latency_p99_us) {
        let _ = writeln!(
            o,
            "  latency      one way p50 {p50:.2} µs, p99 {p99:.2} µs (round trip p50 {:.2} µs)",
            p.rtt_p50_us.unwrap_or(0.0)
        );
    }
    let _ = writeln!(
        o,
        "  host CPU     {}   engine CPU {}   bus {}{}",
        pct(p.host_cpu),
        pct(p.engine_cpu),
        pct(p.bus_utilisation),
        p.peer_cpu
            .map(|c| format!("   peer CPU {}", pct(c)))
            .unwrap_or_default()
    );
    let _ = writeln!(
        o,
        "  interrupts   {:.0}/s taken by the stack's CPU, {:.0}/s by the host",
        p.interrupts_per_sec, p.host_interrupts_per_sec
    );
    if let Some(l) = laws {
        let _ = writeln!(
            o,
            "  LAWS         before offload {} ({}), after {} ({}); simulated ÷ LAWS {:.3}",
            gbps(l.before_bps),
            l.before_limit,
            gbps(l.after_bps),
            l.after_limit,
            if l.this_bps > 0.0 {
                p.throughput_bps / l.this_bps
            } else {
                0.0
            }
        );
    }
    let _ = writeln!(
        o,
        "  {:.4} s of virtual time in {:.2} s ({:.1} × real time); event log {:016x}{}",
        p.virtual_seconds,
        p.wall_seconds,
        p.speed_ratio(),
        p.event_hash,
        if p.complete { "" } else { "; INCOMPLETE" }
    );
    o
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn changes_apply_after_the_file_and_bad_ones_are_named() {
        let c = load_config(
            None,
            &[
                "engine.speed=0.25".into(),
                "workload.kind=rr".into(),
                "host.offload=false".into(),
            ],
        )
        .unwrap();
        assert_eq!(c.engine.speed, 0.25);
        assert!(!c.host.offload);
        assert_eq!(format!("{:?}", c.workload.kind).to_lowercase(), "rr");
        let err = |s: &str| format!("{:#}", load_config(None, &[s.into()]).unwrap_err());
        assert!(err("engine.speed").contains("SECTION.FIELD=VALUE"));
        assert!(err("speed=1").contains("SECTION.FIELD=VALUE"));
        assert!(err("engine.sped=1").contains("sped"));
        assert!(err("engine.speed=0").contains("speed"));
    }

    #[test]
    fn the_printed_config_reads_back_the_same() {
        let c = load_config(None, &["workload.message=1024".into()]).unwrap();
        let text = toml::to_string(&c).unwrap();
        let back: MachineConfig = toml::from_str(&text).unwrap();
        assert_eq!(format!("{c:?}"), format!("{back:?}"));
    }

    #[test]
    fn the_shipped_calibration_is_the_default_and_builtin_is_there() {
        let shipped = load_calibration(None).unwrap();
        assert!(
            shipped.note.contains("softoe sim calibrate"),
            "{}",
            shipped.note
        );
        assert_ne!(
            format!("{shipped:?}"),
            format!("{:?}", Calibration::default())
        );
        let builtin = load_calibration(Some(Path::new("builtin"))).unwrap();
        assert_eq!(
            format!("{builtin:?}"),
            format!("{:?}", Calibration::default())
        );
        let missing = load_calibration(Some(Path::new("/nonexistent/cal.toml"))).unwrap_err();
        assert!(format!("{missing:#}").contains("/nonexistent/cal.toml"));
    }

    #[test]
    fn a_small_prediction_renders() {
        let cfg = load_config(None, &["workload.bytes=262144".into()]).unwrap();
        let cal = Calibration::default();
        let p = predict(&cfg, &cal).unwrap();
        assert!(p.complete && p.intact);
        let text = render(&cfg, "built-in defaults", &p, None);
        assert!(text.contains("stream send with 65536 B messages"), "{text}");
        assert!(text.contains("host CPU"), "{text}");
    }
}
