//! The clients of the demo and the benchmarks: std sockets run inside a
//! namespace (so they are the kernel's TCP). Their servers are one program,
//! `crate::server`.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Sets a kernel TCP socket's congestion control (`TCP_CONGESTION`), e.g.
/// `cubic`: as root any algorithm the kernel offers, where a namespace's
/// default may only be one of `tcp_allowed_congestion_control`. A listener's
/// passes to the connections it accepts.
pub fn set_congestion(sock: &impl std::os::fd::AsFd, name: &str) -> Result<()> {
    rustix::net::sockopt::set_tcp_congestion(sock, name)
        .map_err(std::io::Error::from)
        .with_context(|| format!("setting TCP congestion control {name}"))
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

/// The `p`-th percentile (0–100) of sorted durations, in microseconds.
pub fn percentile_us(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1e6
}
