//! `softoe bench --only reclaim`: how long the engine takes to give back
//! what a killed program held.
//!
//! A program on softoe that dies without a word (SIGKILL, a crash, the OOM
//! killer) leaves a session behind: its region, its sockets, its
//! connections. The engine notices the end of its attach socket, closes
//! its sockets and reclaims the session once the stack has let them go.
//! Until then its listeners hold their ports (a restarted server cannot
//! bind) and its memory is held. This starts `softoe bench-servers` on the
//! engine again and again, gives each a live connection from Linux with
//! data in flight, kills it, and times from the kill to the session's
//! disappearance from the engine's session table (what `softoe stat`
//! shows; refreshed every millisecond, so each figure is up to 1 ms late).

use std::io::Write;
use std::net::{SocketAddrV4, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use indicatif::ProgressBar;
use serde::Serialize;

use crate::bed::{BedOptions, ENGINE, RealBed};
use crate::server::{DISCARD, Servers};

/// The reclaim times of killed programs.
#[derive(Debug, Clone, Serialize)]
pub struct Reclaim {
    /// Programs killed (each reclaimed, or the run fails).
    pub programs: usize,
    /// Milliseconds from the kill to the session's end: median, 99th
    /// percentile, most.
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Of that, the kernel's part: from the kill until the program's
    /// process was gone (reaped), 99th percentile; its attach socket ends
    /// during that teardown, on a busy machine when the dying process gets
    /// a core.
    pub exit_p99_ms: f64,
    /// The engine's part: from the program's process being gone until its
    /// session was reclaimed, median and 99th percentile.
    pub engine_p50_ms: f64,
    pub engine_p99_ms: f64,
    /// The engine's sessions after the last reclaim (0: nothing leaked).
    pub left: usize,
}

/// Runs `n` programs, one after another, and kills each.
pub fn run(base: &BedOptions, exe: &Path, n: usize, pb: &ProgressBar) -> Result<Reclaim> {
    if n == 0 {
        bail!("--reclaim-programs must be above zero");
    }
    let bed = RealBed::start(base.clone())?;
    let (mut ms, mut exit, mut engine) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        pb.set_message(format!("reclaim: program {} of {n}", i + 1));
        let (gone, took) = one(&bed, exe)?;
        ms.push(took.as_secs_f64() * 1e3);
        exit.push(gone.as_secs_f64() * 1e3);
        engine.push(took.saturating_sub(gone).as_secs_f64() * 1e3);
    }
    pb.inc(1);
    let at = |v: &mut Vec<f64>, q: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * q).round() as usize]
    };
    let left = bed.sessions.lock().map(|g| g.len()).unwrap_or(0);
    Ok(Reclaim {
        programs: n,
        p50_ms: at(&mut ms, 0.5),
        p99_ms: at(&mut ms, 0.99),
        max_ms: at(&mut ms, 1.0),
        exit_p99_ms: at(&mut exit, 0.99),
        engine_p50_ms: at(&mut engine, 0.5),
        engine_p99_ms: at(&mut engine, 0.99),
        left,
    })
}

/// One program: started, given a connection with data in flight, killed;
/// how long until its process was gone, and until its session was.
fn one(bed: &RealBed, exe: &Path) -> Result<(Duration, Duration)> {
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("bench-servers")
        .args(["--addr", &ENGINE.to_string()])
        .arg("--engine")
        .arg(bed.host());
    let mut servers = Servers::start(cmd)?;
    let pid = i32::try_from(servers.pid()).map_err(|_| anyhow!("an odd pid"))?;
    // The session's open sockets as the engine's table shows them (the
    // table is refreshed every millisecond).
    let sockets = |bed: &RealBed| {
        bed.sessions
            .lock()
            .ok()
            .and_then(|g| g.iter().find(|s| s.pid == pid).map(|s| s.sockets))
    };
    let wait = |what: &str, ok: &dyn Fn(Option<usize>) -> bool| -> Result<()> {
        let t = Instant::now();
        while !ok(sockets(bed)) {
            if t.elapsed() > Duration::from_secs(10) {
                bail!("the program's session: {what} did not happen in 10 s");
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    };
    // Its listeners first…
    wait("listening", &|n| n.is_some_and(|n| n > 0))?;
    std::thread::sleep(Duration::from_millis(2));
    let listeners = sockets(bed).unwrap_or(0);
    let to = SocketAddrV4::new(ENGINE, DISCARD);
    let mut conn = bed
        .client
        .run(move || TcpStream::connect_timeout(&to.into(), Duration::from_secs(5)))?
        .context("connecting to the program from Linux")?;
    conn.write_all(&[7u8; 64 * 1024])?;
    // …then the connection it accepted.
    wait("an accepted connection", &|n| {
        n.is_some_and(|n| n > listeners)
    })?;
    let held = |bed: &RealBed| sockets(bed).is_some();
    let t0 = Instant::now();
    servers.kill()?;
    let exited = t0.elapsed();
    while held(bed) {
        if t0.elapsed() > Duration::from_secs(10) {
            bail!("a killed program's session was not reclaimed in 10 s");
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    let took = t0.elapsed();
    drop(conn);
    Ok((exited, took))
}

/// The section `softoe bench` prints.
pub fn render(r: &Reclaim) -> String {
    format!(
        "\nreclaim ({} programs killed with SIGKILL, each holding a connection with data in \
         flight): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms from the kill to the session's end; \
         of it, the kernel's teardown of the killed process p99 {:.1} ms, the engine's part \
         after the process was gone p50 {:.1} / p99 {:.1} ms; {} sessions left\n",
        r.programs,
        r.p50_ms,
        r.p99_ms,
        r.max_ms,
        r.exit_p99_ms,
        r.engine_p50_ms,
        r.engine_p99_ms,
        r.left
    )
}
