//! The spin sweep (`softoe bench --only spin`, issue 19 part 3): who spins
//! for a round trip, how long, and what each choice costs.
//!
//! A 4-byte request/response crosses three parties — Linux's client, the
//! engine, the server program — and each hand-over to a party that went to
//! sleep costs a wake-up (20–35 µs across cores on these VMs). Spinning
//! saves the wake-up and spends a CPU meanwhile; on two cores a spinning
//! party also takes the core another party needs. The sweep runs the
//! ping-pong on a fresh testbed for every pair of spin budgets — the
//! engine's idle spin before it sleeps in `ppoll`, and the longest spin of
//! the server program's waits (`SOFTOE_SPIN_US`, the ceiling its adaptive
//! budget learns under) — and reports the round trip's p50/p99/p99.9 with
//! the CPU each party spent per round trip and how often the engine slept,
//! beside Linux's own server in the same run.

use std::net::SocketAddrV4;
use std::time::Duration;

use anyhow::Result;
use indicatif::ProgressBar;
use serde::Serialize;

use super::cpu::Cpu;
use super::server::servers_cmd;
use crate::bed::{BedOptions, ENGINE, PEER, RealBed};
use crate::linux;
use crate::server::{ECHO, Servers};
use crate::table::Table;

/// One pair of spin budgets (or Linux's server, with no budgets).
#[derive(Debug, Serialize)]
pub(super) struct SpinRow {
    /// "softoe" or "Linux".
    pub system: &'static str,
    /// The engine's idle spin before it sleeps, µs.
    pub engine_spin_us: u64,
    /// The server program's longest spin per wait, µs.
    pub app_spin_us: u64,
    pub rounds: usize,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    /// CPU per round trip, µs: the server program, the engine thread (0
    /// for Linux), the whole machine (both cores, every process).
    pub app_cpu_us: f64,
    pub engine_cpu_us: f64,
    pub machine_cpu_us: f64,
    /// Times the engine went to sleep per round trip (each is a wake-up
    /// the next request pays).
    pub engine_sleeps: f64,
    /// The plots' name for the program's budget.
    #[serde(skip)]
    pub series: String,
}

/// The sweep's budgets.
#[derive(Clone, Debug)]
pub(super) struct Options {
    pub engine_us: Vec<u64>,
    pub app_us: Vec<u64>,
    pub rounds: usize,
}

impl Options {
    /// Progress steps: every pair, and Linux.
    pub(super) fn runs(&self) -> u64 {
        (self.engine_us.len() * self.app_us.len()) as u64 + 1
    }
}

/// Runs the sweep.
pub(super) fn run(
    base: &BedOptions,
    exe: &std::path::Path,
    o: &Options,
    pb: &ProgressBar,
) -> Result<Vec<SpinRow>> {
    let mut rows = Vec::new();
    for &e in &o.engine_us {
        for &a in &o.app_us {
            pb.set_message(format!("spin: engine {e} µs, program {a} µs"));
            let mut bed = RealBed::start(BedOptions {
                spin: Some(Duration::from_micros(e)),
                ..base.clone()
            })?;
            let mut cmd = servers_cmd(exe, Some(bed.host()), &bed.peer, ENGINE, "overlap");
            cmd.env("SOFTOE_SPIN_US", a.to_string());
            let mut servers = Servers::start(cmd)?;
            let mut row = measure(&bed, &mut servers, ENGINE, o.rounds)?;
            drop(servers);
            // The bed's whole life: its start and the warm-up add a few
            // dozen sleeps (idle sleeps end every 20 ms) to thousands.
            let sleeps = bed.stop()?.sleeps;
            row.engine_spin_us = e;
            row.app_spin_us = a;
            row.series = format!("program ≤ {a} µs");
            row.engine_sleeps = sleeps as f64 / (row.rounds + WARMUP).max(1) as f64;
            rows.push(row);
            pb.inc(1);
        }
    }
    pb.set_message("spin: Linux's server");
    let bed = RealBed::start(base.clone())?;
    let mut servers = Servers::start(servers_cmd(exe, None, &bed.peer, PEER, "overlap"))?;
    let mut row = measure(&bed, &mut servers, PEER, o.rounds)?;
    row.system = "Linux";
    row.engine_cpu_us = 0.0;
    rows.push(row);
    pb.inc(1);
    Ok(rows)
}

/// Round trips before the measured ones: the program's budgets learn, the
/// caches fill.
const WARMUP: usize = 200;

/// The ping-pong against the echo at `ip`, with the CPU spent meanwhile.
fn measure(
    bed: &RealBed,
    servers: &mut Servers,
    ip: std::net::Ipv4Addr,
    rounds: usize,
) -> Result<SpinRow> {
    let c = bed.client.clone();
    c.run(move || linux::ping_pong(SocketAddrV4::new(ip, ECHO), 4, WARMUP))??;
    let before = Cpu::now(servers, bed.engine_tid)?;
    let c = bed.client.clone();
    let mut r = c.run(move || linux::ping_pong(SocketAddrV4::new(ip, ECHO), 4, rounds))??;
    let cpu = Cpu::now(servers, bed.engine_tid)?.since(before);
    r.sort();
    let per = |d: Duration| d.as_secs_f64() * 1e6 / rounds.max(1) as f64;
    Ok(SpinRow {
        system: "softoe",
        engine_spin_us: 0,
        app_spin_us: 0,
        rounds,
        p50_us: linux::percentile_us(&r, 50.0),
        p99_us: linux::percentile_us(&r, 99.0),
        p999_us: linux::percentile_us(&r, 99.9),
        app_cpu_us: per(cpu.app),
        engine_cpu_us: per(cpu.engine),
        machine_cpu_us: per(cpu.machine),
        engine_sleeps: 0.0,
        series: String::new(),
    })
}

/// The sweep as a table.
pub(super) fn render(rows: &[SpinRow]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n4-byte request/response by spin budget (µs; CPU per round trip, µs)"
    );
    let mut t = Table::new().left("system").rights(&[
        "eng spin", "app spin", "p50", "p99", "p99.9", "app CPU", "eng CPU", "machine", "sleeps",
    ]);
    for r in rows {
        let (e, a) = if r.system == "Linux" {
            ("-".to_string(), "-".to_string())
        } else {
            (r.engine_spin_us.to_string(), r.app_spin_us.to_string())
        };
        let one = |x: f64| format!("{x:.1}");
        t.row([
            r.system.to_string(),
            e,
            a,
            one(r.p50_us),
            one(r.p99_us),
            one(r.p999_us),
            one(r.app_cpu_us),
            one(r.engine_cpu_us),
            one(r.machine_cpu_us),
            format!("{:.2}", r.engine_sleeps),
        ]);
    }
    s.push_str(&t.render());
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(system: &'static str, e: u64, a: u64, p50: f64) -> SpinRow {
        SpinRow {
            system,
            engine_spin_us: e,
            app_spin_us: a,
            rounds: 100,
            p50_us: p50,
            p99_us: 2.0 * p50,
            p999_us: 3.0 * p50,
            app_cpu_us: 5.0,
            engine_cpu_us: 7.5,
            machine_cpu_us: 20.0,
            engine_sleeps: 0.25,
            series: String::new(),
        }
    }

    #[test]
    fn each_pair_of_budgets_is_a_line_and_linux_has_none() {
        let t = render(&[row("softoe", 50, 30, 27.0), row("Linux", 0, 0, 16.2)]);
        let lines: Vec<&str> = t.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 4, "{t}");
        let soft: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(
            soft,
            [
                "softoe", "50", "30", "27.0", "54.0", "81.0", "5.0", "7.5", "20.0", "0.25"
            ]
        );
        let linux: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(&linux[..4], ["Linux", "-", "-", "16.2"]);
    }
}
