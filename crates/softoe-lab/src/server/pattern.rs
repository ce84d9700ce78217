//! The loss sweep's pattern (byte *i* of a stream is *i* mod 251), the
//! server's patterned source and checking sink, and the checker both the
//! sink and the sweep's client use, so that a retransmission of the wrong
//! bytes shows, not only a short count.

use std::io::{Read, Write};

/// The pattern's period: a prime, so a segment misplaced by any number of
/// MSS-sized steps (below 251) shows.
pub(crate) const PERIOD: usize = 251;
/// The largest read or write in one call.
pub(crate) const CHUNK: usize = 1 << 20;

/// The pattern from stream offset 0, long enough that every run of up to
/// [`CHUNK`] bytes at any offset is one slice of it.
pub(crate) fn pattern() -> Vec<u8> {
    (0..CHUNK + PERIOD).map(|i| (i % PERIOD) as u8).collect()
}

/// Checks a stream against the pattern as it arrives.
#[derive(Debug)]
pub(crate) struct Checker {
    pattern: Vec<u8>,
    /// Bytes seen so far.
    pub pos: u64,
    /// Bytes that differed from the pattern.
    pub mismatches: u64,
}

impl Checker {
    /// A checker at stream offset 0.
    pub(crate) fn new() -> Checker {
        Checker {
            pattern: pattern(),
            pos: 0,
            mismatches: 0,
        }
    }

    /// Checks the next bytes of the stream.
    pub(crate) fn feed(&mut self, data: &[u8]) {
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

/// The patterned source's side of one connection: a length (8 bytes,
/// little-endian), then that many bytes of the pattern.
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

/// The checking sink's side of one connection: reads to the end, checking
/// the pattern, then answers the byte count and the mismatched bytes.
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

#[cfg(test)]
mod tests {
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
}
