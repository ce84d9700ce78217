//! One machine prediction, with LAWS beside it:
//! `cargo run -p softoe-sim --release --example predict -- [CONFIG.toml] [CALIBRATION.toml] [key=value…]`.
//!
//! `key=value` overrides a field of the configuration, as `section.field`
//! (`engine.speed=0.25`, `workload.message=1024`, `host.offload=false`).

use softoe_sim::machine::{Calibration, LawsEstimate, MachineConfig, predict};

fn main() {
    let mut cfg = toml::Table::new();
    let mut cal = Calibration::default();
    for a in std::env::args().skip(1) {
        if let Some((k, v)) = a.split_once('=') {
            let Some((section, field)) = k.split_once('.') else {
                eprintln!("{k}: expected section.field");
                return;
            };
            let value: toml::Value = match toml::from_str::<toml::Table>(&format!("x = {v}")) {
                Ok(mut t) => t.remove("x").unwrap_or(toml::Value::String(v.to_string())),
                Err(_) => toml::Value::String(v.to_string()),
            };
            let entry = cfg
                .entry(section.to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let toml::Value::Table(t) = entry {
                t.insert(field.to_string(), value);
            }
        } else if a.contains("calib") {
            let text = std::fs::read_to_string(&a).unwrap_or_default();
            match toml::from_str(&text) {
                Ok(c) => cal = c,
                Err(e) => {
                    eprintln!("{a}: {e}");
                    return;
                }
            }
        } else {
            let text = std::fs::read_to_string(&a).unwrap_or_default();
            match toml::from_str::<toml::Table>(&text) {
                Ok(t) => cfg.extend(t),
                Err(e) => {
                    eprintln!("{a}: {e}");
                    return;
                }
            }
        }
    }
    let cfg: MachineConfig = match cfg.try_into() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return;
        }
    };
    match predict(&cfg, &cal) {
        Ok(p) => {
            println!("{p:#?}");
            println!("speed: {:.1}x real time", p.speed_ratio());
            if let Ok(l) = LawsEstimate::new(&cfg, &cal) {
                println!(
                    "LAWS: {:.3} Gb/s ({} bound; before {:.3} Gb/s {}, after {:.3} Gb/s {}); simulated {:.3} Gb/s",
                    l.for_config(&cfg) / 1e9,
                    if cfg.host.offload {
                        l.after_limit
                    } else {
                        l.before_limit
                    },
                    l.before_bps / 1e9,
                    l.before_limit,
                    l.after_bps / 1e9,
                    l.after_limit,
                    p.throughput_bps / 1e9
                );
            }
        }
        Err(e) => eprintln!("{e}"),
    }
}
