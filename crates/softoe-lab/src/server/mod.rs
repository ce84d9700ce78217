//! The server program of `softoe demo` and `softoe bench`: discard, source
//! and echo (and the benchmark's sized and patterned variants), written once
//! for any listener — the kernel's, or one on the softoe engine reached from
//! another process through `softoe-host`.
//!
//! Both commands run it as a separate process (`softoe demo-servers`,
//! `softoe bench-servers`), on the engine or on Linux's TCP in the peer's
//! namespace, so that "the server program" is the same program on both
//! sides. What differs between the two is options, not code: which ports
//! serve what (`Listen`), how many connections each takes (the demo's
//! serve a fixed number and exit, the benchmark's serve until killed), the
//! engine's send policy (`Policy`), the listen backlog, and whether the
//! process answers questions about its CPU time on stdin (`Until`).
//! The scale scenario's echo, one thread waiting for every connection at
//! once, is `many`.

mod many;
pub(crate) mod pattern;
mod process;
mod service;

use std::io::{BufRead, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use softoe_host::SendPolicy;
use tracing::debug;

pub(crate) use process::Servers;
pub(crate) use service::{Length, Policy, Service};

/// Discard's port.
pub(crate) const DISCARD: u16 = 9;
/// The source's port.
pub(crate) const SOURCE: u16 = 19;
/// Echo's port.
pub(crate) const ECHO: u16 = 7;
/// The sized sink's port (see [`Service::SizedSink`]).
pub(crate) const SIZED_SINK: u16 = 11;
/// The sized source's port (see [`Service::SizedSource`]).
pub(crate) const SIZED_SOURCE: u16 = 21;
/// The patterned source's port: it reads a length (8 bytes, little-endian)
/// and sends that many bytes of the pattern.
pub(crate) const PATTERN_SOURCE: u16 = 20;
/// The checking sink's port: it reads to the end, checking the pattern,
/// then answers the byte count and the mismatched bytes (8 bytes each,
/// little-endian).
pub(crate) const CHECKED_SINK: u16 = 10;
/// The scale echo's port.
pub(crate) const SCALE_ECHO: u16 = 5007;

/// One listener: its port, its service, and how many connections it
/// takes (`None`: until the process ends).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Listen {
    pub port: u16,
    pub service: Service,
    pub conns: Option<usize>,
}

/// When the program returns.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Until {
    /// When every listener has taken and served its connections; a failed
    /// connection fails the program.
    Served,
    /// When its stdin closes; meanwhile it answers `cpu` with its CPU time
    /// and `conns` with the connections the scale echo serves. Connections
    /// that fail are logged (debug) and the others go on.
    StdinClosed,
}

/// What to serve.
#[derive(Clone, Debug)]
pub(crate) enum Serving {
    /// These listeners, one thread per connection.
    Each(Vec<Listen>),
    /// The scale scenario's echo, one thread for every connection, sized
    /// for this many.
    Many(usize),
}

/// The server program, as `softoe demo-servers` and `softoe bench-servers`
/// run it.
#[derive(Clone, Debug)]
pub(crate) struct Program {
    /// The engine's host socket; `None`: the kernel's TCP.
    pub engine: Option<PathBuf>,
    /// The address every listener listens on.
    pub addr: Ipv4Addr,
    /// On the kernel's TCP: this congestion control on every listener (and
    /// so every connection it accepts); the namespace's default when
    /// absent.
    pub cc: Option<String>,
    /// The engine's listen backlog.
    pub backlog: u32,
    /// How the engine's connections send.
    pub policy: Policy,
    pub serving: Serving,
    pub until: Until,
}

/// A connection the services can serve, the kernel's or the engine's.
pub(crate) trait Conn: Read + Write + Send + 'static {
    /// Turns Nagle off.
    fn set_nodelay(&self) -> std::io::Result<()>;
    /// Sets the engine's send policy (nothing on the kernel's TCP).
    fn set_send_policy(&mut self, p: SendPolicy);
    /// Sends `left` bytes in `write`-byte pieces from buffers sent by
    /// reference (the kernel's TCP: ordinary writes).
    fn send_zerocopy_all(&mut self, left: u64, write: usize) -> std::io::Result<()>;
}

impl Conn for TcpStream {
    fn set_nodelay(&self) -> std::io::Result<()> {
        TcpStream::set_nodelay(self, true)
    }
    fn set_send_policy(&mut self, _: SendPolicy) {}
    fn send_zerocopy_all(&mut self, left: u64, write: usize) -> std::io::Result<()> {
        service::send_in_writes(self, left, write)
    }
}

impl Conn for softoe_host::TcpStream {
    fn set_nodelay(&self) -> std::io::Result<()> {
        softoe_host::TcpStream::set_nodelay(self, true)
    }
    fn set_send_policy(&mut self, p: SendPolicy) {
        softoe_host::TcpStream::set_send_policy(self, p);
    }
    fn send_zerocopy_all(&mut self, left: u64, write: usize) -> std::io::Result<()> {
        service::send_zerocopy(self, left, write)
    }
}

/// A listening socket the services can take connections from.
pub(crate) trait Acceptor: Send + 'static {
    /// A connection.
    type Conn: Conn;
    /// Takes the next connection.
    fn take(&self) -> std::io::Result<Self::Conn>;
}

impl Acceptor for TcpListener {
    type Conn = TcpStream;
    fn take(&self) -> std::io::Result<TcpStream> {
        self.accept().map(|(s, _)| s)
    }
}

impl Acceptor for softoe_host::TcpListener {
    type Conn = softoe_host::TcpStream;
    fn take(&self) -> std::io::Result<softoe_host::TcpStream> {
        self.accept().map(|(s, _)| s)
    }
}

impl Program {
    /// Runs the program: listens, prints `ready` when every listener is
    /// up, and serves until [`Until`] says.
    pub(crate) fn run(&self) -> Result<()> {
        let open = Arc::new(AtomicUsize::new(0));
        let listeners = match &self.serving {
            Serving::Each(each) => self.listen_each(each)?,
            Serving::Many(n) => {
                self.listen_many(*n, open.clone())?;
                Vec::new()
            }
        };
        println!("ready");
        std::io::stdout().flush()?;
        match self.until {
            Until::Served => {
                for t in listeners {
                    t.join().map_err(|_| anyhow!("a server panicked"))??;
                }
                Ok(())
            }
            Until::StdinClosed => answer(&open),
        }
    }

    /// Opens every listener and starts its thread.
    fn listen_each(&self, each: &[Listen]) -> Result<Vec<JoinHandle<Result<()>>>> {
        let at = |port| SocketAddrV4::new(self.addr, port);
        let detached = matches!(self.until, Until::StdinClosed);
        let mut threads = Vec::new();
        match &self.engine {
            Some(path) => {
                let c = softoe_host::Client::attach_to(path)
                    .with_context(|| format!("attaching to {}", path.display()))?;
                for l in each {
                    let listener = c
                        .tcp_listen(at(l.port), self.backlog)
                        .with_context(|| format!("listening on port {}", l.port))?;
                    threads.push(serve(listener, *l, self.policy, detached));
                }
            }
            None => {
                for l in each {
                    let listener = TcpListener::bind(at(l.port))
                        .with_context(|| format!("listening on port {}", l.port))?;
                    if let Some(cc) = &self.cc {
                        crate::linux::set_congestion(&listener, cc)?;
                    }
                    threads.push(serve(listener, *l, self.policy, detached));
                }
            }
        }
        Ok(threads)
    }

    /// Starts the scale echo, sized for `n` connections, counting the
    /// connections it serves in `open`; a failure ends the process.
    fn listen_many(&self, n: usize, open: Arc<AtomicUsize>) -> Result<()> {
        let addr = self.addr;
        let serve: Box<dyn FnOnce() -> Result<()> + Send> = match &self.engine {
            Some(path) => {
                let c = many::attach(path, n)?;
                Box::new(move || many::serve_softoe(&c, addr, open))
            }
            None => Box::new(move || many::serve_linux(addr, open)),
        };
        std::thread::spawn(move || {
            if let Err(e) = serve() {
                eprintln!("softoe bench-servers: the scale echo failed: {e:#}");
                std::process::exit(1);
            }
        });
        // Its listener is up within a moment; a failure exits the process.
        std::thread::sleep(Duration::from_millis(50));
        Ok(())
    }
}

/// Accepts on `l`, one thread per connection, in a thread of its own: up
/// to `what.conns` connections (then it waits for them and returns the
/// first failure), or for ever. `detached`: a connection's failure is
/// logged, not returned.
fn serve<L: Acceptor>(
    l: L,
    what: Listen,
    policy: Policy,
    detached: bool,
) -> JoinHandle<Result<()>> {
    std::thread::spawn(move || {
        let mut conns = Vec::new();
        let mut taken = 0;
        while what.conns.is_none_or(|n| taken < n) {
            let c = match l.take() {
                Ok(c) => c,
                Err(e) if detached => {
                    eprintln!("softoe bench-servers: accept failed: {e}");
                    return Ok(());
                }
                Err(e) => return Err(e).context("accept"),
            };
            taken += 1;
            let conn = std::thread::spawn(move || {
                let r = what.service.serve(c, policy);
                match r {
                    Err(e) if detached => {
                        debug!(error = %e, "a benchmark connection failed");
                        Ok(())
                    }
                    r => r,
                }
            });
            if !detached {
                conns.push(conn);
            }
        }
        for c in conns {
            c.join()
                .map_err(|_| anyhow!("a connection's server panicked"))??;
        }
        Ok(())
    })
}

/// Answers the benchmark on stdin until it closes: `cpu` with this
/// process's CPU time (the clock counts every thread, also those that
/// ended), `conns` with the connections the scale echo serves.
fn answer(open: &AtomicUsize) -> Result<()> {
    for line in std::io::stdin().lock().lines() {
        match line?.trim() {
            "cpu" => println!("cpu {}", own_cpu().as_nanos()),
            "conns" => println!("conns {}", open.load(Ordering::Relaxed)),
            _ => continue,
        }
        std::io::stdout().flush()?;
    }
    Ok(())
}

/// This process's CPU time: every thread's user and system time, also of
/// threads that have ended, in nanoseconds.
pub(crate) fn own_cpu() -> Duration {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}
