//! The benchmark's server program (`softoe bench-servers`) and its handle in
//! the benchmark.

use std::io::{BufRead, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use softoe_host::SendPolicy;
use tracing::debug;

use super::cpu::own_cpu;
use super::{DISCARD, ECHO, MAX_IO, SIZED_SINK, SIZED_SOURCE, SOURCE, WRITE};
use crate::bench::loss::{CHECKED_SINK, PATTERN_SOURCE, checked_sink, pattern_source};
use crate::linux::{self, Acceptor};

/// Options of the hidden `softoe bench-servers`.
#[derive(Debug, Args)]
pub struct ServersArgs {
    /// Serve on the engine attached at this socket; without it, on the
    /// kernel's TCP.
    #[arg(long)]
    engine: Option<PathBuf>,
    /// The address to listen on.
    #[arg(long)]
    addr: Ipv4Addr,
    /// Send policy on the engine: copy, overlap or zerocopy (region
    /// buffers sent by reference, for the source).
    #[arg(long, default_value = "overlap")]
    policy: String,
    /// Serve only the scale scenario's echo (one thread waiting for every
    /// connection at once), sized for this many connections.
    #[arg(long)]
    scale: Option<usize>,
    /// On the kernel's TCP: this congestion control on every listener
    /// (and so every connection it accepts); the namespace's default when
    /// absent.
    #[arg(long)]
    cc: Option<String>,
}

/// Discards what it reads.
pub(super) fn discard(c: impl Read) -> std::io::Result<()> {
    discard_in(c, 1 << 20)
}

/// Discards what it reads, `size` bytes per read at most.
pub(super) fn discard_in(mut c: impl Read, size: usize) -> std::io::Result<()> {
    let mut buf = vec![0u8; size];
    while c.read(&mut buf)? > 0 {}
    Ok(())
}

/// An 8-byte little-endian number from the client.
pub(super) fn read_u64(c: &mut impl Read) -> std::io::Result<u64> {
    let mut n = [0u8; 8];
    c.read_exact(&mut n)?;
    Ok(u64::from_le_bytes(n))
}

/// A read or write size the client asked for, checked.
pub(super) fn io_size(n: u64) -> std::io::Result<usize> {
    if (1..=MAX_IO).contains(&n) {
        Ok(n as usize)
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a read or write size must be 1 to {MAX_IO} bytes, got {n}"),
        ))
    }
}

/// The sized sink: a read size, then discard in reads of that size.
pub(super) fn sized_sink(mut c: impl Read) -> std::io::Result<()> {
    let size = io_size(read_u64(&mut c)?)?;
    discard_in(c, size)
}

/// Reads a length (8 bytes, little-endian), sends that many bytes in
/// 64 KiB writes, and closes.
pub(super) fn source(mut c: impl Read + Write) -> std::io::Result<()> {
    let left = read_u64(&mut c)?;
    send_in_writes(c, left, WRITE)
}

/// The sized source: a length and a write size, then that many bytes in
/// writes of that size.
pub(super) fn sized_source(mut c: impl Read + Write) -> std::io::Result<()> {
    let left = read_u64(&mut c)?;
    let write = io_size(read_u64(&mut c)?)?;
    send_in_writes(c, left, write)
}

/// Sends `left` bytes in `write`-byte writes.
pub(super) fn send_in_writes(
    mut c: impl Write,
    mut left: u64,
    write: usize,
) -> std::io::Result<()> {
    let buf = vec![0x3cu8; write];
    while left > 0 {
        let k = left.min(write as u64) as usize;
        c.write_all(&buf[..k])?;
        left -= k as u64;
    }
    Ok(())
}

/// `source` with the `zerocopy` policy: 16 buffers of 64 KiB in the
/// shared region, filled once, each sent by reference and reused when the
/// engine says the peer acknowledged it.
pub(super) fn source_zerocopy(mut c: softoe_host::TcpStream) -> std::io::Result<()> {
    let mut n = [0u8; 8];
    c.read_exact(&mut n)?;
    let mut left = u64::from_le_bytes(n);
    let client = c.client().clone();
    let mut bufs = (0..16)
        .map(|_| client.zc_buf(WRITE))
        .collect::<std::io::Result<Vec<_>>>()?;
    for b in &mut bufs {
        b.write_at(0, &[0x3c; WRITE])?;
    }
    let mut i = 0;
    while left > 0 {
        let b = &mut bufs[i % 16];
        b.wait_released()?;
        let k = left.min(WRITE as u64) as usize;
        left -= c.send_zerocopy(b, k)? as u64;
        i += 1;
    }
    for b in &mut bufs {
        b.wait_released()?;
    }
    Ok(())
}

/// Echoes everything.
pub(super) fn echo(mut c: impl Read + Write) -> std::io::Result<()> {
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let k = c.read(&mut buf)?;
        if k == 0 {
            return Ok(());
        }
        c.write_all(&buf[..k])?;
    }
}

/// Accepts for ever on `l`, one thread per connection.
pub(super) fn serve<L>(l: L, prepare: fn(&mut L::Conn), handle: fn(L::Conn) -> std::io::Result<()>)
where
    L: Acceptor + Send + 'static,
    L::Conn: Send + 'static,
{
    std::thread::spawn(move || {
        loop {
            match l.take() {
                Ok(mut c) => {
                    prepare(&mut c);
                    std::thread::spawn(move || {
                        if let Err(e) = handle(c) {
                            debug!(error = %e, "a benchmark connection failed");
                        }
                    });
                }
                Err(e) => {
                    eprintln!("softoe bench-servers: accept failed: {e}");
                    return;
                }
            }
        }
    });
}

/// `softoe bench-servers`: discard, source and echo on one address until
/// killed. Prints `ready` when all listen.
pub fn servers(args: &ServersArgs) -> Result<()> {
    let at = |port| SocketAddrV4::new(args.addr, port);
    let open = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    if let Some(n) = args.scale {
        let (addr, open2) = (args.addr, open.clone());
        let serve: Box<dyn FnOnce() -> Result<()> + Send> = match &args.engine {
            Some(path) => {
                // Small rings: 10,000 sockets' rings in one data area.
                let sockets = u32::try_from(n + 64)
                    .ok()
                    .filter(|&k| k <= 65_536)
                    .ok_or_else(|| anyhow!("--scale {n}: at most 65,472 connections"))?;
                let cfg = softoe_host::Config {
                    path: path.clone(),
                    sockets,
                    rx_ring: 16 << 10,
                    tx_ring: 4 << 10,
                    data_len: u64::from(sockets) * (20 << 10) + (16 << 20),
                    ..softoe_host::Config::default()
                };
                let c = softoe_host::Client::attach_with(cfg)
                    .with_context(|| format!("attaching to {}", path.display()))?;
                Box::new(move || crate::bench::scale::serve_softoe(&c, addr, open2))
            }
            None => Box::new(move || crate::bench::scale::serve_linux(addr, open2)),
        };
        std::thread::spawn(move || {
            if let Err(e) = serve() {
                eprintln!("softoe bench-servers: the scale echo failed: {e:#}");
                std::process::exit(1);
            }
        });
        // Its listener is up within a moment; a failure exits the process.
        std::thread::sleep(Duration::from_millis(50));
    } else {
        serve_all(args, at)?;
    }
    println!("ready");
    std::io::stdout().flush()?;
    // The bench asks for this process's CPU time before and after each
    // run (the clock counts every thread, also those that ended), and for
    // the connections the scale echo serves.
    for line in std::io::stdin().lock().lines() {
        match line?.trim() {
            "cpu" => println!("cpu {}", own_cpu().as_nanos()),
            "conns" => println!("conns {}", open.load(std::sync::atomic::Ordering::Relaxed)),
            _ => continue,
        }
        std::io::stdout().flush()?;
    }
    Ok(())
}

/// Discard, source and echo, and the loss sweep's patterned source and
/// checking sink, one thread per connection.
pub(super) fn serve_all(args: &ServersArgs, at: impl Fn(u16) -> SocketAddrV4) -> Result<()> {
    match &args.engine {
        Some(path) => {
            let c = softoe_host::Client::attach_to(path)
                .with_context(|| format!("attaching to {}", path.display()))?;
            let listen = |port| {
                c.tcp_listen(at(port), 128)
                    .with_context(|| format!("listening on port {port}"))
            };
            let (d, s, e) = (listen(DISCARD)?, listen(SOURCE)?, listen(ECHO)?);
            let (ps, cs) = (listen(PATTERN_SOURCE)?, listen(CHECKED_SINK)?);
            let (zs, zk) = (listen(SIZED_SOURCE)?, listen(SIZED_SINK)?);
            let prepare: fn(&mut softoe_host::TcpStream) = match args.policy.as_str() {
                "copy" => |c| c.set_send_policy(SendPolicy::Copy),
                "overlap" | "zerocopy" => |c| c.set_send_policy(SendPolicy::Overlap),
                other => bail!("--policy {other}: use copy, overlap or zerocopy"),
            };
            serve(d, prepare, discard);
            if args.policy == "zerocopy" {
                serve(s, prepare, source_zerocopy);
            } else {
                serve(s, prepare, source);
            }
            serve(e, |c| drop(c.set_nodelay(true)), echo);
            serve(ps, prepare, pattern_source);
            serve(cs, prepare, checked_sink);
            serve(zs, prepare, sized_source);
            serve(zk, prepare, sized_sink);
        }
        None => {
            let listen = |port| -> Result<std::net::TcpListener> {
                let l = std::net::TcpListener::bind(at(port))
                    .with_context(|| format!("listening on port {port}"))?;
                if let Some(cc) = &args.cc {
                    linux::set_congestion(&l, cc)?;
                }
                Ok(l)
            };
            let (d, s, e) = (listen(DISCARD)?, listen(SOURCE)?, listen(ECHO)?);
            let (ps, cs) = (listen(PATTERN_SOURCE)?, listen(CHECKED_SINK)?);
            let (zs, zk) = (listen(SIZED_SOURCE)?, listen(SIZED_SINK)?);
            serve(zs, |_| {}, sized_source);
            serve(zk, |_| {}, sized_sink);
            serve(d, |_| {}, discard);
            serve(s, |_| {}, source);
            serve(e, |c| drop(c.set_nodelay(true)), echo);
            serve(ps, |_| {}, pattern_source);
            serve(cs, |_| {}, checked_sink);
        }
    }
    Ok(())
}

/// A servers process, killed when dropped; it answers `cpu` on its stdin
/// with its CPU time.
pub(crate) struct Servers {
    pub(super) child: Child,
    pub(super) ask: std::process::ChildStdin,
    pub(super) answers: mpsc::Receiver<String>,
}

impl Drop for Servers {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Servers {
    pub(crate) fn start(mut cmd: Command) -> Result<Servers> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting the benchmark's servers")?;
        let (Some(out), Some(ask)) = (child.stdout.take(), child.stdin.take()) else {
            let _ = child.kill();
            bail!("no pipes to the servers");
        };
        let (tx, answers) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut servers = Servers {
            child,
            ask,
            answers,
        };
        match servers.answers.recv_timeout(Duration::from_secs(10)) {
            Ok(l) if l.trim() == "ready" => Ok(servers),
            _ => {
                let st = servers.child.try_wait().ok().flatten();
                bail!("the benchmark's servers did not start ({st:?}); see their error above")
            }
        }
    }

    /// Waits (up to 30 s) until the number of connections the servers
    /// serve satisfies `ok`.
    pub(crate) fn wait_conns(&mut self, ok: impl Fn(usize) -> bool) -> Result<()> {
        let t = Instant::now();
        loop {
            writeln!(self.ask, "conns").context("asking the servers")?;
            self.ask.flush()?;
            let line = self
                .answers
                .recv_timeout(Duration::from_secs(10))
                .map_err(|_| anyhow!("the servers did not say their connections"))?;
            let n: usize = line
                .strip_prefix("conns ")
                .and_then(|n| n.trim().parse().ok())
                .ok_or_else(|| anyhow!("odd answer from the servers: {line:?}"))?;
            if ok(n) {
                return Ok(());
            }
            if t.elapsed() > Duration::from_secs(30) {
                bail!("the servers serve {n} connections after 30 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The servers' CPU time so far.
    pub(crate) fn cpu(&mut self) -> Result<Duration> {
        writeln!(self.ask, "cpu").context("asking the servers for their CPU time")?;
        self.ask.flush()?;
        let line = self
            .answers
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| anyhow!("the servers did not say their CPU time"))?;
        line.strip_prefix("cpu ")
            .and_then(|n| n.trim().parse().ok())
            .map(Duration::from_nanos)
            .ok_or_else(|| anyhow!("odd answer from the servers: {line:?}"))
    }
}

/// The command that starts `softoe bench-servers`: on the engine at
/// `engine`, or on Linux in namespace `ns`.
pub(crate) fn servers_cmd(
    exe: &std::path::Path,
    engine: Option<&std::path::Path>,
    ns: &softoe_testbed::Netns,
    ip: Ipv4Addr,
    policy: &str,
) -> Command {
    let mut c = match engine {
        Some(_) => Command::new(exe),
        None => ns.command(&exe.to_string_lossy()),
    };
    c.arg("bench-servers")
        .args(["--addr", &ip.to_string(), "--policy", policy]);
    if let Some(p) = engine {
        c.arg("--engine").arg(p);
    }
    c
}
