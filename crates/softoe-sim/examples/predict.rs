//! One machine prediction, with LAWS beside it:
//!
//! ```text
//! cargo run -p softoe-sim --release --example predict -- \
//!     [CONFIG.toml] [--calibration CALIBRATION.toml] [section.field=value…]
//! ```
//!
//! `section.field=value` overrides one field of the configuration
//! (`engine.speed=0.25`, `workload.message=1024`, `host.offload=false`,
//! `workload.kind='"rr"'`). This is a tool for exploring the model until
//! `softoe sim predict` exists; it is not that command.

use softoe_sim::machine::{Calibration, LawsEstimate, MachineConfig, predict};

fn value(v: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("x = {v}"))
        .ok()
        .and_then(|mut t| t.remove("x"))
        .unwrap_or_else(|| toml::Value::String(v.to_string()))
}

fn read<T: serde::de::DeserializeOwned>(path: &str) -> Result<T, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    toml::from_str(&text).map_err(|e| format!("{path}: {e}"))
}

fn run() -> Result<(), String> {
    let mut cfg = toml::Table::new();
    let mut cal = Calibration::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--calibration" || a == "-c" {
            let path = args.next().ok_or("--calibration needs a file")?;
            cal = read(&path)?;
        } else if let Some((k, v)) = a.split_once('=') {
            let (section, field) = k
                .split_once('.')
                .ok_or(format!("{k}: expected section.field"))?;
            let entry = cfg
                .entry(section.to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let toml::Value::Table(t) = entry {
                t.insert(field.to_string(), value(v));
            }
        } else {
            let file: toml::Table = read(&a)?;
            for (k, v) in file {
                cfg.insert(k, v);
            }
        }
    }
    let cfg: MachineConfig = cfg.try_into().map_err(|e| format!("{e}"))?;
    let p = predict(&cfg, &cal).map_err(|e| e.to_string())?;
    println!("{p:#?}");
    println!("speed: {:.1}x real time", p.speed_ratio());
    let l = LawsEstimate::new(&cfg, &cal).map_err(|e| e.to_string())?;
    println!(
        "LAWS: {:.3} Gb/s (before {:.3} Gb/s, {} bound; after {:.3} Gb/s, {} bound); simulated {:.3} Gb/s",
        l.for_config(&cfg) / 1e9,
        l.before_bps / 1e9,
        l.before_limit,
        l.after_bps / 1e9,
        l.after_limit,
        p.throughput_bps / 1e9
    );
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("{e}");
        std::process::exit(2);
    }
}
