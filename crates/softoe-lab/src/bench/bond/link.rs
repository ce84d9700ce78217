//! What every experiment of `softoe bench bond` uses: the byte pattern of
//! its TCP transfers, transfers between two bonded engines, and paced UDP.

use std::io::{Read, Write};
use std::net::SocketAddrV4;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use softoe_engine::testing::{BondHost, BondHostSpec};
use softoe_engine::{BondStat, ConnStat};
use softoe_testbed::{BondedBed, BondedOptions};

use super::{DATAGRAM, T};

// ---- the byte pattern ---------------------------------------------------------------

/// The byte at stream offset `off`: byte `off % 8` of the little-endian
/// word `off / 8`. A missing, repeated or misplaced piece shows.
pub(super) fn pattern_byte(off: u64) -> u8 {
    (off / 8).to_le_bytes()[(off % 8) as usize]
}

pub(super) fn fill(off: u64, buf: &mut [u8]) {
    if off.is_multiple_of(8) && buf.len().is_multiple_of(8) {
        for (i, w) in buf.chunks_exact_mut(8).enumerate() {
            w.copy_from_slice(&(off / 8 + i as u64).to_le_bytes());
        }
    } else {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = pattern_byte(off + i as u64);
        }
    }
}

/// Bytes of `buf` (at stream offset `off`) that are not the pattern.
pub(super) fn wrong(off: u64, buf: &[u8]) -> u64 {
    buf.iter()
        .enumerate()
        .filter(|&(i, b)| *b != pattern_byte(off + i as u64))
        .count() as u64
}

// ---- TCP transfers between engines ---------------------------------------------------

/// What a receiver saw.
pub(super) struct Received {
    pub(super) bytes: u64,
    pub(super) wrong: u64,
    /// (seconds since the receiver started, bytes so far) after each read.
    pub(super) log: Vec<(f64, u64)>,
    pub(super) secs: f64,
}

/// A transfer under way.
pub(super) struct Transfer {
    pub(super) sender: JoinHandle<std::io::Result<softoe_engine::app::TcpStream>>,
    pub(super) receiver: JoinHandle<std::io::Result<Received>>,
    pub(super) started: Instant,
}

/// Starts moving `bytes` from `from` (which connects) to a listener on
/// `to`, pattern-filled and, if `check`, checked.
pub(super) fn start_tcp(
    from: &BondHost,
    to: &BondHost,
    port: u16,
    bytes: u64,
    check: bool,
) -> Result<Transfer> {
    let l = to.app.tcp_listen(port, 4).context("listening")?;
    let mut c = from
        .app
        .tcp_connect(SocketAddrV4::new(to.ip, port))
        .context("connecting")?;
    let (mut s, _) = l.accept_timeout(Some(T)).context("accepting")?;
    s.set_read_timeout(Some(T));
    let started = Instant::now();
    let sender = std::thread::spawn(move || -> std::io::Result<_> {
        let mut buf = vec![0u8; 256 * 1024];
        let mut off = 0u64;
        while off < bytes {
            let n = buf.len().min((bytes - off) as usize);
            fill(off, &mut buf[..n]);
            off += c.write(&buf[..n])? as u64;
        }
        c.shutdown_write()?;
        Ok(c)
    });
    let receiver = std::thread::spawn(move || -> std::io::Result<Received> {
        let t0 = Instant::now();
        let mut buf = vec![0u8; 256 * 1024];
        let (mut off, mut bad) = (0u64, 0u64);
        let mut log = Vec::new();
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            if check {
                bad += wrong(off, &buf[..n]);
            }
            off += n as u64;
            log.push((t0.elapsed().as_secs_f64(), off));
        }
        Ok(Received {
            bytes: off,
            wrong: bad,
            log,
            secs: t0.elapsed().as_secs_f64(),
        })
    });
    Ok(Transfer {
        sender,
        receiver,
        started,
    })
}

impl Transfer {
    /// Waits for the receiver; returns what it saw and the sender's
    /// stream (still open, for its counters).
    pub(super) fn finish(self) -> Result<(Received, softoe_engine::app::TcpStream)> {
        let r = self
            .receiver
            .join()
            .map_err(|_| anyhow!("the receiver panicked"))?
            .context("receiving")?;
        let c = self
            .sender
            .join()
            .map_err(|_| anyhow!("the sender panicked"))?
            .context("sending")?;
        Ok((r, c))
    }
}

/// The sender's connection to `port` in `host`'s snapshot.
pub(super) fn conn_to(host: &BondHost, port: u16) -> Option<ConnStat> {
    let suffix = format!(":{port}");
    host.snapshot()
        .ok()?
        .connections
        .into_iter()
        .find(|c| c.remote.ends_with(&suffix))
}

/// Frames dropped so far by the queues of both hosts' links.
pub(super) fn queue_drops(pair: &Pair) -> u64 {
    pair.hosts
        .iter()
        .flat_map(|h| &h.taps)
        .map(|t| pair.bed.queue_drops(t).unwrap_or(0))
        .sum()
}

/// A host's (UDP socket-queue drops, port-queue drops) so far.
pub(super) fn host_drops(h: &BondHost) -> (u64, u64) {
    h.snapshot()
        .map(|s| (s.stack.udp_drops, s.port_drops.unwrap_or(0)))
        .unwrap_or_default()
}

pub(super) fn bytes_in(b: &BondStat) -> Vec<u64> {
    b.members.iter().map(|m| m.bytes_in).collect()
}

/// Shares of the bytes taken in since `before`.
pub(super) fn shares(before: &[u64], after: &[u64]) -> Vec<f64> {
    let d: Vec<u64> = after
        .iter()
        .zip(before)
        .map(|(a, b)| a.saturating_sub(*b))
        .collect();
    let sum: u64 = d.iter().sum();
    d.iter()
        .map(|&x| if sum == 0 { 0.0 } else { x as f64 / sum as f64 })
        .collect()
}

pub(super) fn mbit(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 * 8.0 / secs / 1e6
    } else {
        0.0
    }
}

/// Waits up to `secs` for `ok`.
pub(super) fn wait_until(secs: f64, what: &str, mut ok: impl FnMut() -> bool) -> Result<()> {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        if ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    bail!("timed out waiting for {what}")
}

/// Two bonded hosts (1 and 2) on a fresh bed.
pub(super) struct Pair {
    pub(super) hosts: Vec<BondHost>,
    pub(super) bed: BondedBed,
}

impl Pair {
    pub(super) fn start(opts: BondedOptions, specs: [BondHostSpec; 2]) -> Result<Pair> {
        let bed = BondedBed::new(opts).context("building the bonded testbed")?;
        let mut hosts = Vec::new();
        for s in &specs {
            hosts.push(BondHost::start(&bed, s).with_context(|| format!("engine {}", s.host))?);
        }
        let p = Pair { hosts, bed };
        if specs.iter().all(|s| s.bond) {
            let n = [specs[0].members, specs[1].members];
            wait_until(10.0, "the bonded hosts to learn each other", || {
                p.complete(0, n[1]) && p.complete(1, n[0])
            })?;
        }
        Ok(p)
    }

    /// Whether host `i` knows all `n` members of the other host, alive.
    pub(super) fn complete(&self, i: usize, n: usize) -> bool {
        let other = self.hosts[1 - i].ip.to_string();
        self.hosts[i].bond().is_ok_and(|b| {
            b.peers.iter().any(|p| {
                p.ip == other
                    && p.members.len() == n
                    && p.members.iter().all(|m| !m.contains("dead"))
            })
        })
    }
}

pub(super) fn bonded_opts(rate: Option<u64>) -> BondedOptions {
    BondedOptions {
        rate_mbit: rate,
        ..BondedOptions::default()
    }
}

// ---- UDP -------------------------------------------------------------------------------

/// Paces `send` at `rate_mbit` of payload for `secs`: each call gets the
/// datagrams due by then (each carrying its sequence number; at most 64:
/// a sender that fell behind catches up in batches) and returns how many
/// it sent. Returns datagrams sent.
pub(super) fn paced(rate_mbit: f64, secs: f64, mut send: impl FnMut(&[&[u8]]) -> usize) -> u64 {
    pub(super) const BATCH: usize = 64;
    let gap = DATAGRAM as f64 * 8.0 / (rate_mbit * 1e6);
    let t0 = Instant::now();
    let mut bufs = vec![vec![0u8; DATAGRAM]; BATCH];
    let mut k = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        let now = t0.elapsed().as_secs_f64();
        let due = ((now / gap) as u64 + 1).saturating_sub(k).min(BATCH as u64) as usize;
        if due == 0 {
            let wait = (k as f64 * gap) - now;
            if wait > 0.0002 {
                std::thread::sleep(Duration::from_secs_f64(wait - 0.0001));
            }
            continue;
        }
        for (i, b) in bufs.iter_mut().take(due).enumerate() {
            b[..8].copy_from_slice(&(k + i as u64).to_le_bytes());
        }
        let batch: Vec<&[u8]> = bufs.iter().take(due).map(Vec::as_slice).collect();
        let sent = send(&batch);
        k += sent as u64;
        if sent < due {
            break;
        }
    }
    k
}

/// UDP from `from` to `to` (engines) at `rate_mbit`: (goodput, loss,
/// rate sent).
pub(super) fn udp_engines(
    from: &BondHost,
    to: &BondHost,
    port: u16,
    rate_mbit: f64,
    secs: f64,
) -> Result<(f64, f64, f64)> {
    let mut rx = to.app.udp_bind(port).context("binding")?;
    rx.set_read_timeout(Some(Duration::from_millis(300)));
    let tx = from.app.udp_bind(port).context("binding")?;
    let dst = SocketAddrV4::new(to.ip, port);
    let recv = std::thread::spawn(move || {
        let mut buf = vec![0u8; 2048];
        let (mut n, mut bytes) = (0u64, 0u64);
        let mut seen_any = false;
        let t0 = Instant::now();
        loop {
            match rx.recv_from(&mut buf) {
                Ok((len, _)) => {
                    n += 1;
                    bytes += len as u64;
                    seen_any = true;
                }
                Err(_) if seen_any || t0.elapsed() > Duration::from_secs(5) => break,
                Err(_) => {}
            }
        }
        (n, bytes)
    });
    let t0 = Instant::now();
    let sent = paced(rate_mbit, secs, |b| tx.send_batch_to(b, dst).unwrap_or(0));
    let secs = t0.elapsed().as_secs_f64();
    let (got, bytes) = recv.join().map_err(|_| anyhow!("receiver panicked"))?;
    Ok((
        mbit(bytes, secs),
        1.0 - got as f64 / sent.max(1) as f64,
        mbit(sent * DATAGRAM as u64, secs),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_pattern_finds_shifted_and_changed_bytes() {
        let mut a = vec![0u8; 4096];
        fill(0, &mut a);
        assert_eq!(wrong(0, &a), 0);
        let mut b = vec![0u8; 13];
        fill(5, &mut b);
        assert_eq!(&b[..], &a[5..18], "unaligned pieces agree");
        assert!(wrong(8, &a[..64]) > 0, "a shift shows");
        a[100] ^= 1;
        assert_eq!(wrong(0, &a), 1);
    }
}
