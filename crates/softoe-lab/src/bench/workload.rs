//! The workloads the Linux client drives: bulk transfers each way and the
//! 4-byte ping-pong.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use super::WRITE;
use super::cpu::own_thread_cpu;
use crate::bed::RealBed;
use crate::linux;
use crate::server::{DISCARD, ECHO, SOURCE};

/// Sends `bytes` over `conns` connections at once to a discard server.
pub(super) fn bulk_in(addr: SocketAddrV4, bytes: u64, conns: usize) -> Result<Duration> {
    bulk_in_with(addr, bytes, conns, WRITE, None).map(|r| r.wall)
}

/// What a bulk client's run took: the wall time of all its connections,
/// and the CPU its threads ran (with the kernel's work on them: softirqs
/// that ran in their system calls) in how many data calls.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClientRun {
    pub wall: Duration,
    pub cpu: Duration,
    pub calls: u64,
}
/// Runs `client` on `conns` connections to `addr` at once, each in a
/// thread of its own, and adds up the CPU and data calls they return.
fn clients(
    addr: SocketAddrV4,
    conns: usize,
    client: impl Fn(TcpStream) -> Result<(Duration, u64)> + Copy + Send + 'static,
) -> Result<ClientRun> {
    let t = Instant::now();
    let hs: Vec<_> = (0..conns)
        .map(|_| {
            std::thread::spawn(move || {
                let s = TcpStream::connect_timeout(&addr.into(), Duration::from_secs(5))
                    .with_context(|| format!("connect {addr}"))?;
                client(s)
            })
        })
        .collect();
    let (mut cpu, mut calls) = (Duration::ZERO, 0);
    for h in hs {
        let (c, n) = h.join().map_err(|_| anyhow!("a client panicked"))??;
        cpu += c;
        calls += n;
    }
    Ok(ClientRun {
        wall: t.elapsed(),
        cpu,
        calls,
    })
}

/// Sends `bytes` over `conns` connections at once in `write`-byte writes;
/// with `read_size`, to the sized sink, which reads that much per call.
pub(crate) fn bulk_in_with(
    addr: SocketAddrV4,
    bytes: u64,
    conns: usize,
    write: usize,
    read_size: Option<u64>,
) -> Result<ClientRun> {
    let each = bytes / conns as u64;
    clients(addr, conns, move |mut s| {
        if let Some(r) = read_size {
            s.write_all(&r.to_le_bytes())?;
        }
        let buf = vec![0x5au8; write];
        let mut left = each;
        let (cpu0, mut calls) = (own_thread_cpu()?, 0);
        while left > 0 {
            let k = left.min(write as u64) as usize;
            s.write_all(&buf[..k]).context("write")?;
            left -= k as u64;
            calls += 1;
        }
        let cpu = own_thread_cpu()?.saturating_sub(cpu0);
        s.shutdown(Shutdown::Write)?;
        let mut rest = Vec::new();
        s.read_to_end(&mut rest)
            .context("waiting for the server to close")?;
        Ok((cpu, calls))
    })
}

/// Receives `bytes` over `conns` connections at once from a source server.
pub(super) fn bulk_out(addr: SocketAddrV4, bytes: u64, conns: usize) -> Result<Duration> {
    bulk_out_with(addr, bytes, conns, None).map(|r| r.wall)
}

/// Receives `bytes` over `conns` connections at once; with `write`, from
/// the sized source, which writes that much per call.
pub(crate) fn bulk_out_with(
    addr: SocketAddrV4,
    bytes: u64,
    conns: usize,
    write: Option<u64>,
) -> Result<ClientRun> {
    let each = bytes / conns as u64;
    clients(addr, conns, move |mut s| {
        s.write_all(&each.to_le_bytes())?;
        if let Some(w) = write {
            s.write_all(&w.to_le_bytes())?;
        }
        let mut buf = vec![0u8; 1 << 20];
        let mut n = 0u64;
        let (cpu0, mut calls) = (own_thread_cpu()?, 0);
        loop {
            let k = s.read(&mut buf).context("read")?;
            if k == 0 {
                break;
            }
            n += k as u64;
            calls += 1;
        }
        let cpu = own_thread_cpu()?.saturating_sub(cpu0);
        if n != each {
            bail!("received {n} of {each} bytes");
        }
        Ok((cpu, calls))
    })
}

pub(super) fn per_gib(d: Duration, bytes: u64) -> f64 {
    d.as_secs_f64() / (bytes as f64 / f64::from(1u32 << 30))
}

/// The 4-byte ping-pong's p50 and p99 (µs) against the echo at `ip`.
pub(super) fn rr4(bed: &RealBed, ip: Ipv4Addr, rounds: usize) -> Result<(f64, f64)> {
    let mut r = bed
        .client
        .run(move || linux::ping_pong(SocketAddrV4::new(ip, ECHO), 4, rounds))??;
    r.sort();
    Ok((
        linux::percentile_us(&r, 50.0),
        linux::percentile_us(&r, 99.0),
    ))
}

/// Goodput of one connection each way (Gb/s): Linux→host, host→Linux.
pub(super) fn bulk_pair(bed: &RealBed, ip: Ipv4Addr, bytes: u64) -> Result<(f64, f64)> {
    let g = |t: Duration| bytes as f64 * 8.0 / t.as_secs_f64().max(1e-9) / 1e9;
    let t_in = bed
        .client
        .run(move || bulk_in(SocketAddrV4::new(ip, DISCARD), bytes, 1))??;
    let t_out = bed
        .client
        .run(move || bulk_out(SocketAddrV4::new(ip, SOURCE), bytes, 1))??;
    Ok((g(t_in), g(t_out)))
}
