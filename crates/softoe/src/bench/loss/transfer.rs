//! The loss sweep's streams: a pattern every receiver checks, the server
//! side (the patterned source and the checking sink) and the client side
//! (fetch from the source, push into the sink).

use std::io::{Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{CHUNK, CONNECT, DRAIN, PERIOD};

/// The pattern from stream offset 0, long enough that every run of up to
/// [`CHUNK`] bytes at any offset is one slice of it.
pub(super) fn pattern() -> Vec<u8> {
    (0..CHUNK + PERIOD).map(|i| (i % PERIOD) as u8).collect()
}

/// Checks a stream against the pattern as it arrives.
pub(super) struct Checker {
    pub(super) pattern: Vec<u8>,
    /// Bytes seen so far.
    pub(super) pos: u64,
    /// Bytes that differed from the pattern.
    pub(super) mismatches: u64,
}

impl Checker {
    /// A checker at stream offset 0.
    pub(super) fn new() -> Checker {
        Checker {
            pattern: pattern(),
            pos: 0,
            mismatches: 0,
        }
    }

    /// Checks the next bytes of the stream.
    pub(super) fn feed(&mut self, data: &[u8]) {
        for piece in data.chunks(CHUNK) {
            let off = (self.pos % PERIOD as u64) as usize;
            let want = &self.pattern[off..off + piece.len()];
            if piece != want {
                self.mismatches += piece.iter().zip(want).filter(|(a, b)| a != b).count() as u64;
            }
            self.pos += piece.len() as u64;
        }
    }
}

/// The patterned source's side of one connection.
pub(crate) fn pattern_source(mut c: impl Read + Write) -> std::io::Result<()> {
    let mut n = [0u8; 8];
    c.read_exact(&mut n)?;
    let mut left = u64::from_le_bytes(n);
    let pat = pattern();
    let mut pos = 0u64;
    while left > 0 {
        let off = (pos % PERIOD as u64) as usize;
        let k = left.min(64 * 1024) as usize;
        c.write_all(&pat[off..off + k])?;
        left -= k as u64;
        pos += k as u64;
    }
    Ok(())
}

/// The checking sink's side of one connection.
pub(crate) fn checked_sink(mut c: impl Read + Write) -> std::io::Result<()> {
    let mut check = Checker::new();
    let mut buf = vec![0u8; CHUNK];
    loop {
        let k = c.read(&mut buf)?;
        if k == 0 {
            break;
        }
        check.feed(&buf[..k]);
    }
    let mut answer = [0u8; 16];
    answer[..8].copy_from_slice(&check.pos.to_le_bytes());
    answer[8..].copy_from_slice(&check.mismatches.to_le_bytes());
    c.write_all(&answer)
}

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

    #[test]
    fn the_checker_finds_misplaced_and_changed_bytes() {
        let pat = pattern();
        let mut c = Checker::new();
        // In pieces that do not line up with the period, across a chunk.
        let stream: Vec<u8> = (0..(3 * CHUNK + 1000) as u64)
            .map(|i| (i % PERIOD as u64) as u8)
            .collect();
        for piece in stream.chunks(CHUNK / 3 + 7) {
            c.feed(piece);
        }
        assert_eq!((c.pos, c.mismatches), (stream.len() as u64, 0));
        // A segment's bytes where the next segment's belong: 1448 bytes,
        // not a multiple of 251, all but the chance matches differ.
        let mut c = Checker::new();
        c.feed(&pat[..1448]);
        c.feed(&pat[..1448]);
        assert!(c.mismatches > 1400, "{}", c.mismatches);
        let mut c = Checker::new();
        let mut one = pat[..5000].to_vec();
        one[4321] ^= 0x10;
        c.feed(&one);
        assert_eq!(c.mismatches, 1);
    }

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
