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
//! reclaim. Both ends of each time are clock reads: the bench's just
//! before `kill(2)`, the engine's when it found the program gone and when
//! it had given everything back ([`softoe_engine::host::Reclaimed`]); so
//! a bench thread that waits for a core on a busy machine does not add its
//! own wait to the engine's figure.
use std::io::Write;
use std::net::{SocketAddrV4, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use indicatif::ProgressBar;
use serde::Serialize;

use crate::bed::{BedOptions, ENGINE, RealBed};
use crate::server::{DISCARD, Servers};

/// The reclaim times of killed programs, on a quiet machine or beside
/// CPU-bound work.
#[derive(Debug, Clone, Serialize)]
pub struct Reclaim {
    /// Programs killed (each reclaimed, or the run fails).
    pub programs: usize,
    /// CPU-bound threads the bench ran beside them (0: the machine as it
    /// was).
    pub load: usize,
    /// Milliseconds from the kill to the session's reclaim: median, 99th
    /// percentile, most.
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Of that, from the kill until the engine saw the program's end, 99th
    /// percentile: mostly the kernel's teardown of the killed process (its
    /// descriptors, the attach socket among them, close late in it, once
    /// the dying process gets a core), then the engine's next look.
    pub gone_p99_ms: f64,
    /// The engine's part: from seeing the program's end until the session
    /// was reclaimed (its sockets closed and released by the stack), median
    /// and 99th percentile.
    pub engine_p50_ms: f64,
    pub engine_p99_ms: f64,
    /// The killed programs' sessions the engine still lists after the last
    /// reclaim (0: nothing leaked).
    pub left: usize,
}

/// Runs `n` programs, one after another, and kills each: on the machine
/// as it is, then (`load` above zero) again beside `load` CPU-bound
/// threads, which a busy machine's other work stands for.
pub fn run(
    base: &BedOptions,
    exe: &Path,
    n: usize,
    load: usize,
    pb: &ProgressBar,
) -> Result<Vec<Reclaim>> {
    if n == 0 {
        bail!("--reclaim-programs must be above zero");
    }
    let bed = RealBed::start(base.clone())?;
    let mut rows = vec![measure(&bed, exe, n, 0, pb)?];
    if load > 0 {
        rows.push(measure(&bed, exe, n, load, pb)?);
    }
    pb.inc(1);
    Ok(rows)
}

/// `n` programs killed beside `load` spinning threads.
fn measure(bed: &RealBed, exe: &Path, n: usize, load: usize, pb: &ProgressBar) -> Result<Reclaim> {
    let _load = Load::start(load);
    let (mut ms, mut seen, mut engine) = (Vec::new(), Vec::new(), Vec::new());
    let mut killed = Vec::new();
    for i in 0..n {
        pb.set_message(format!(
            "reclaim: program {} of {n}{}",
            i + 1,
            if load > 0 {
                format!(" beside {load} CPU-bound threads")
            } else {
                String::new()
            }
        ));
        let (pid, gone, took) = one(bed, exe)?;
        killed.push(pid);
        ms.push(took.as_secs_f64() * 1e3);
        seen.push(gone.as_secs_f64() * 1e3);
        engine.push(took.saturating_sub(gone).as_secs_f64() * 1e3);
    }
    let at = |v: &mut Vec<f64>, q: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * q).round() as usize]
    };
    // The engine refreshes its table before it records a reclaim, so a
    // killed program still in it is a leak, not a stale read.
    let left = bed
        .sessions
        .lock()
        .map(|g| g.iter().filter(|s| killed.contains(&s.pid)).count())
        .unwrap_or(0);
    Ok(Reclaim {
        programs: n,
        load,
        p50_ms: at(&mut ms, 0.5),
        p99_ms: at(&mut ms, 0.99),
        max_ms: at(&mut ms, 1.0),
        gone_p99_ms: at(&mut seen, 0.99),
        engine_p50_ms: at(&mut engine, 0.5),
        engine_p99_ms: at(&mut engine, 0.99),
        left,
    })
}

/// Threads that spin until dropped: other work on the machine, at the
/// priority of ordinary programs.
struct Load {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(n: usize) -> Load {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Load { stop, threads }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// One program: started, given a connection with data in flight, killed;
/// its pid, how long until the engine saw it gone, and until its session
/// was reclaimed.
fn one(bed: &RealBed, exe: &Path) -> Result<(i32, Duration, Duration)> {
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("run")
        .arg("--engine")
        .arg(bed.host())
        .arg("--")
        .arg(exe)
        .arg("bench-hold")
        .args(["--addr", &ENGINE.to_string()]);
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
    let id = bed
        .sessions
        .lock()
        .ok()
        .and_then(|g| g.iter().find(|s| s.pid == pid).map(|s| s.id))
        .ok_or_else(|| anyhow!("the program's session left the table before the kill"))?;
    let reclaimed = |bed: &RealBed| {
        bed.reclaims
            .lock()
            .ok()
            .and_then(|g| g.iter().find(|r| r.id == id).copied())
    };
    let t0 = Instant::now();
    servers.kill()?;
    let r = loop {
        if let Some(r) = reclaimed(bed) {
            break r;
        }
        if t0.elapsed() > Duration::from_secs(10) {
            bail!("a killed program's session was not reclaimed in 10 s");
        }
        std::thread::sleep(Duration::from_micros(100));
    };
    drop(conn);
    let gone = r
        .gone
        .ok_or_else(|| anyhow!("session {id} was reclaimed without its program's end seen"))?;
    Ok((
        pid,
        gone.saturating_duration_since(t0),
        r.reclaimed.saturating_duration_since(t0),
    ))
}

/// The section `softoe bench` prints: a line per row.
pub fn render(rows: &[Reclaim]) -> String {
    let mut o = String::new();
    for r in rows {
        let beside = if r.load == 0 {
            "the machine as it was".to_string()
        } else {
            format!("beside {} CPU-bound threads", r.load)
        };
        o.push_str(&format!(
            "\nreclaim ({} single-threaded programs killed with SIGKILL, each holding a \
             connection with data in flight; {beside}): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms \
             from the kill to the session's reclaim; of it, until the engine saw the program's \
             end (the kernel's teardown of the killed process) p99 {:.1} ms, the engine's part \
             after that p50 {:.1} / p99 {:.1} ms; {} of their sessions left\n",
            r.programs,
            r.p50_ms,
            r.p99_ms,
            r.max_ms,
            r.gone_p99_ms,
            r.engine_p50_ms,
            r.engine_p99_ms,
            r.left
        ));
    }
    o
}

/// `softoe bench-hold`: the program the reclaim scenario kills, as plain
/// as a server gets — one thread, the kernel's socket calls (on softoe
/// through the shim: `softoe run`), one epoll over its listener and its
/// stdin. It listens on the discard port, says `ready`, and holds every
/// connection it accepts without reading it (what a peer sent stays
/// unread, so the close at its death is a reset, as on Linux), until its
/// stdin ends or it is killed. One thread because the kernel ends a
/// killed process's descriptors only once every one of its threads has
/// run its exit: a program of many threads on a busy machine waits for a
/// core for each, which is the kernel's time, not the engine's.
#[derive(Debug, clap::Args)]
pub struct HoldArgs {
    /// The address to listen on.
    #[arg(long)]
    addr: std::net::Ipv4Addr,
}

/// Runs `softoe bench-hold` (see [`HoldArgs`]).
pub fn hold(args: &HoldArgs) -> Result<()> {
    use std::io::{ErrorKind, Read};
    use std::os::fd::AsRawFd;

    use mio::net::TcpListener;
    use mio::unix::SourceFd;
    use mio::{Events, Interest, Poll, Token};

    const LISTENER: Token = Token(0);
    const STDIN: Token = Token(1);
    let mut poll = Poll::new().context("epoll")?;
    let at = std::net::SocketAddr::V4(SocketAddrV4::new(args.addr, DISCARD));
    let mut l = TcpListener::bind(at).with_context(|| format!("listening on {at}"))?;
    poll.registry()
        .register(&mut l, LISTENER, Interest::READABLE)?;
    let stdin = std::io::stdin();
    let fd = stdin.as_raw_fd();
    poll.registry()
        .register(&mut SourceFd(&fd), STDIN, Interest::READABLE)?;
    println!("ready");
    std::io::stdout().flush()?;
    let mut held = Vec::new();
    let mut events = Events::with_capacity(16);
    loop {
        match poll.poll(&mut events, None) {
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            r => r.context("epoll_wait")?,
        }
        for ev in &events {
            if ev.token() == STDIN {
                let mut buf = [0u8; 256];
                match stdin.lock().read(&mut buf) {
                    Ok(0) => return Ok(()),
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(e).context("reading stdin"),
                }
                continue;
            }
            loop {
                match l.accept() {
                    Ok((s, _)) => held.push(s),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(e).context("accept"),
                }
            }
        }
    }
}
