//! The loss sweep's client side: fetch from the server program's patterned
//! source and push into its checking sink (see `crate::server::pattern`),
//! checking the pattern, for at most a time limit.

use std::io::{Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{CONNECT, DRAIN};
use crate::server::pattern::{CHUNK, Checker, PERIOD, pattern};

/// What one transfer moved, as its client saw it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Moved {
    /// Bytes delivered (a send: what the sink counted).
    pub(super) bytes: u64,
    /// From connected to the last byte (a send: to the sink's answer).
    pub(super) secs: f64,
    /// Stopped at the time limit.
    pub(super) capped: bool,
    /// Bytes that differed from the pattern.
    pub(super) mismatches: u64,
}

/// Whether an I/O error is a socket timeout running out.
pub(super) fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Asks the patterned source at `addr` for `want` bytes and reads them,
/// checking the pattern, for at most `limit`; tells `local` the client's
/// address once connected.
pub(super) fn fetch(
    addr: SocketAddrV4,
    want: u64,
    limit: Duration,
    local: mpsc::Sender<SocketAddr>,
) -> Result<Moved> {
    let mut s = TcpStream::connect_timeout(&addr.into(), CONNECT)
        .with_context(|| format!("connect {addr}"))?;
    let _ = local.send(s.local_addr()?);
    s.write_all(&want.to_le_bytes())?;
    let t = Instant::now();
    let deadline = t + limit;
    let mut check = Checker::new();
    let mut buf = vec![0u8; CHUNK];
    let mut capped = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            capped = true;
            break;
        }
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => check.feed(&buf[..k]),
            Err(e) if timed_out(&e) => {
                capped = true;
                break;
            }
            Err(e) => return Err(e).context("read"),
        }
    }
    // Closing with bytes unread (a capped run) resets the connection: the
    // sender stops.
    Ok(Moved {
        bytes: check.pos,
        secs: t.elapsed().as_secs_f64(),
        capped,
        mismatches: check.mismatches,
    })
}

/// Sends `want` bytes of the pattern to the checking sink at `addr`, for
/// at most `limit`, then waits for the sink's count.
pub(super) fn push(addr: SocketAddrV4, want: u64, limit: Duration) -> Result<Moved> {
    let mut s = TcpStream::connect_timeout(&addr.into(), CONNECT)
        .with_context(|| format!("connect {addr}"))?;
    let pat = pattern();
    let t = Instant::now();
    let deadline = t + limit;
    let mut sent = 0u64;
    let mut capped = false;
    while sent < want {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            capped = true;
            break;
        }
        s.set_write_timeout(Some(left.max(Duration::from_millis(1))))?;
        let off = (sent % PERIOD as u64) as usize;
        let k = (want - sent).min(64 * 1024) as usize;
        match s.write(&pat[off..off + k]) {
            Ok(n) => sent += n as u64,
            Err(e) if timed_out(&e) => {
                capped = true;
                break;
            }
            Err(e) => return Err(e).context("write"),
        }
    }
    s.shutdown(std::net::Shutdown::Write)?;
    s.set_read_timeout(Some(DRAIN))?;
    let mut answer = [0u8; 16];
    s.read_exact(&mut answer)
        .context("waiting for the sink's count")?;
    let secs = t.elapsed().as_secs_f64();
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&answer[i..i + 8]);
        u64::from_le_bytes(w)
    };
    let (counted, mismatches) = (word(0), word(8));
    if counted != sent {
        bail!("the sink counted {counted} of the {sent} bytes written");
    }
    Ok(Moved {
        bytes: counted,
        secs,
        capped,
        mismatches,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::server::pattern::{checked_sink, pattern_source};

    /// The source's stream is the pattern its checker expects, and the
    /// sink answers its count and mismatches, over a real socket pair.
    #[test]
    fn source_and_sink_speak_the_pattern() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            pattern_source(s).unwrap();
            let (s, _) = l.accept().unwrap();
            checked_sink(s).unwrap();
        });
        let SocketAddr::V4(at) = at else {
            unreachable!("bound to IPv4")
        };
        let (tx, rx) = mpsc::channel();
        let got = fetch(at, 3_000_001, Duration::from_secs(30), tx).unwrap();
        assert!(rx.recv().is_ok(), "the client's address was told");
        assert_eq!(
            (got.bytes, got.mismatches, got.capped),
            (3_000_001, 0, false)
        );
        let sent = push(at, 2_500_003, Duration::from_secs(30)).unwrap();
        assert_eq!(
            (sent.bytes, sent.mismatches, sent.capped),
            (2_500_003, 0, false)
        );
        server.join().unwrap();
    }

    /// A stream that never ends stops at the limit, reporting what came.
    #[test]
    fn a_transfer_stops_at_its_time_limit() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let SocketAddr::V4(at) = l.local_addr().unwrap() else {
            unreachable!("bound to IPv4")
        };
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut ask = [0u8; 8];
            s.read_exact(&mut ask).unwrap();
            // The pattern, slowly (a test that spins on CPU shares these
            // 2 cores), until the client goes away.
            let pat = pattern();
            let mut pos = 0usize;
            while s.write_all(&pat[pos % PERIOD..pos % PERIOD + 4096]).is_ok() {
                pos += 4096;
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let (tx, _rx) = mpsc::channel();
        let got = fetch(at, u64::MAX, Duration::from_millis(300), tx).unwrap();
        assert!(
            got.capped && got.bytes > 0 && got.mismatches == 0,
            "{got:?}"
        );
        assert!((0.25..5.0).contains(&got.secs), "{got:?}");
        server.join().unwrap();
    }
}
