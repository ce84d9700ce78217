//! Programs for the demo and benchmarks: clients on std sockets run inside
//! a namespace (so they are the kernel's TCP), and servers written once for
//! any listener — the kernel's, or one on the softoe engine reached from
//! another process through `softoe-host`.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddrV4, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Sets a kernel TCP socket's congestion control (`TCP_CONGESTION`), e.g.
/// `cubic`: as root any algorithm the kernel offers, where a namespace's
/// default may only be one of `tcp_allowed_congestion_control`. A listener's
/// passes to the connections it accepts.
#[allow(unsafe_code)]
pub fn set_congestion(sock: &impl std::os::fd::AsRawFd, name: &str) -> Result<()> {
    let len = libc::socklen_t::try_from(name.len()).context("congestion control name")?;
    // SAFETY: the descriptor is a live socket borrowed for the call;
    // `name` points at `len` readable bytes, which the kernel copies (it
    // needs no terminating NUL) and does not keep.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("setting TCP congestion control {name}"));
    }
    Ok(())
}

/// Writes `bytes` to `addr`, shuts down, reads to the end. Returns the time
/// from connect to end of stream.
pub fn send_bulk(addr: SocketAddrV4, bytes: u64) -> Result<Duration> {
    let buf = vec![0x5au8; 1 << 20];
    let t = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr.into(), Duration::from_secs(5))
        .with_context(|| format!("connect {addr}"))?;
    let mut left = bytes;
    while left > 0 {
        let k = left.min(buf.len() as u64) as usize;
        s.write_all(&buf[..k]).context("write")?;
        left -= k as u64;
    }
    s.shutdown(Shutdown::Write)?;
    let mut rest = Vec::new();
    s.read_to_end(&mut rest)
        .context("waiting for the server to close")?;
    Ok(t.elapsed())
}

/// Connects to `addr` and reads to the end. Returns bytes and time.
pub fn recv_bulk(addr: SocketAddrV4) -> Result<(u64, Duration)> {
    let mut buf = vec![0u8; 1 << 20];
    let t = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr.into(), Duration::from_secs(5))
        .with_context(|| format!("connect {addr}"))?;
    let mut n = 0u64;
    loop {
        let k = s.read(&mut buf).context("read")?;
        if k == 0 {
            break;
        }
        n += k as u64;
    }
    Ok((n, t.elapsed()))
}

/// `count` request/response rounds of `size` bytes with an echo server;
/// returns each round trip.
pub fn ping_pong(addr: SocketAddrV4, size: usize, count: usize) -> Result<Vec<Duration>> {
    let mut s = TcpStream::connect_timeout(&addr.into(), Duration::from_secs(5))
        .with_context(|| format!("connect {addr}"))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let req = vec![0xa5u8; size];
    let mut resp = vec![0u8; size];
    let mut rtts = Vec::with_capacity(count);
    for _ in 0..count {
        let t = Instant::now();
        s.write_all(&req)?;
        s.read_exact(&mut resp).context("echo reply")?;
        rtts.push(t.elapsed());
    }
    if resp != req {
        bail!("echo returned different bytes");
    }
    s.shutdown(Shutdown::Write)?;
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    Ok(rtts)
}

/// A listening socket the servers below can use.
pub trait Acceptor {
    /// A connection.
    type Conn: Read + Write;
    /// Takes the next connection.
    fn take(&self) -> std::io::Result<Self::Conn>;
    /// Turns Nagle off on `c`.
    fn nodelay(c: &Self::Conn) -> std::io::Result<()>;
}

impl Acceptor for TcpListener {
    type Conn = TcpStream;
    fn take(&self) -> std::io::Result<TcpStream> {
        self.accept().map(|(s, _)| s)
    }
    fn nodelay(c: &TcpStream) -> std::io::Result<()> {
        c.set_nodelay(true)
    }
}

impl Acceptor for softoe_host::TcpListener {
    type Conn = softoe_host::TcpStream;
    fn take(&self) -> std::io::Result<softoe_host::TcpStream> {
        self.accept().map(|(s, _)| s)
    }
    fn nodelay(c: &softoe_host::TcpStream) -> std::io::Result<()> {
        c.set_nodelay(true)
    }
}

/// Serves `conns` connections on `listener`: discard (read to the end).
pub fn discard_server<L: Acceptor>(listener: L, conns: usize) -> Result<u64> {
    let mut total = 0;
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..conns {
        let mut s = listener.take()?;
        loop {
            let k = s.read(&mut buf)?;
            if k == 0 {
                break;
            }
            total += k as u64;
        }
    }
    Ok(total)
}

/// Serves `conns` connections: sends `bytes` on each, then closes.
pub fn source_server<L: Acceptor>(listener: L, conns: usize, bytes: u64) -> Result<()> {
    let buf = vec![0x3cu8; 1 << 20];
    for _ in 0..conns {
        let mut s = listener.take()?;
        let mut left = bytes;
        while left > 0 {
            let k = left.min(buf.len() as u64) as usize;
            s.write_all(&buf[..k])?;
            left -= k as u64;
        }
    }
    Ok(())
}

/// Serves `conns` connections: echoes everything.
pub fn echo_server<L: Acceptor>(listener: L, conns: usize) -> Result<()> {
    let mut buf = vec![0u8; 256 * 1024];
    for _ in 0..conns {
        let mut s = listener.take()?;
        L::nodelay(&s)?;
        loop {
            let k = s.read(&mut buf)?;
            if k == 0 {
                break;
            }
            s.write_all(&buf[..k])?;
        }
    }
    Ok(())
}

/// The `p`-th percentile (0–100) of sorted durations, in microseconds.
pub fn percentile_us(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1e6
}
