//! memcached's load: on each connection, a `set` of a 100-byte value and
//! a `get` of it back, over and over, in the text protocol; a reply that
//! is not `STORED`, a miss, or a value other than the one just set fails
//! the run.

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use super::Window;

/// Bytes of each value.
pub(crate) const VALUE: usize = 100;

/// Keys per connection (each connection writes only its own).
const KEYS: u64 = 100;

/// The longest reply line taken.
const MAX_LINE: usize = 2048;

/// The first line of `buf`, without its CRLF, and where the next begins;
/// `None` while incomplete.
fn line(buf: &[u8]) -> Result<Option<(&str, usize)>> {
    match buf.windows(2).position(|w| w == b"\r\n") {
        Some(end) => {
            let l = std::str::from_utf8(&buf[..end]).context("a reply line not in UTF-8")?;
            Ok(Some((l, end + 2)))
        }
        None if buf.len() > MAX_LINE => bail!("no end of line in {} bytes", buf.len()),
        None => Ok(None),
    }
}

/// The error a reply line is, if it is one of memcached's.
fn server_error(l: &str) -> Option<anyhow::Error> {
    (l == "ERROR" || l.starts_with("CLIENT_ERROR") || l.starts_with("SERVER_ERROR"))
        .then(|| anyhow!("memcached answered {l:?}"))
}

/// The reply to a `set`: `Ok(Some(bytes))` once `STORED` is whole.
pub(crate) fn parse_stored(buf: &[u8]) -> Result<Option<usize>> {
    let Some((l, n)) = line(buf)? else {
        return Ok(None);
    };
    if let Some(e) = server_error(l) {
        return Err(e);
    }
    if l != "STORED" {
        bail!("{l:?} where STORED was expected");
    }
    Ok(Some(n))
}

/// The reply to `get key`: once whole (`VALUE key flags bytes`, the data,
/// `END`), where the data lies and the reply's length. A miss (`END`
/// alone) is an error: the load only gets keys it has set.
pub(crate) fn parse_get(buf: &[u8], key: &str) -> Result<Option<(std::ops::Range<usize>, usize)>> {
    let Some((l, start)) = line(buf)? else {
        return Ok(None);
    };
    if let Some(e) = server_error(l) {
        return Err(e);
    }
    if l == "END" {
        bail!("a miss: {key} was set but get found nothing");
    }
    let mut f = l.split(' ');
    if f.next() != Some("VALUE") {
        bail!("{l:?} where VALUE was expected");
    }
    if f.next() != Some(key) {
        bail!("{l:?}: the value of another key than {key}");
    }
    let _flags: u32 = f
        .next()
        .and_then(|x| x.parse().ok())
        .ok_or_else(|| anyhow!("{l:?}: no flags"))?;
    let len: usize = f
        .next()
        .and_then(|x| x.parse().ok())
        .ok_or_else(|| anyhow!("{l:?}: no length"))?;
    if len > 1 << 20 {
        bail!("{l:?}: a value longer than memcached's largest");
    }
    // An optional CAS unique may follow (`gets`); nothing else.
    if f.nth(1).is_some() {
        bail!("{l:?}: fields after the length");
    }
    let data = start..start + len;
    let tail = b"\r\nEND\r\n";
    let need = data.end + tail.len();
    if buf.len() < need {
        // The bytes so far must still be able to become the tail.
        let have = &buf[data.end.min(buf.len())..];
        if !tail.starts_with(have) {
            bail!("the value is not followed by END");
        }
        return Ok(None);
    }
    if &buf[data.end..need] != tail {
        bail!("the value is not followed by END");
    }
    Ok(Some((data, need)))
}

/// Reads into `buf` until `parse` finds a whole reply, which must be all
/// that came.
fn reply<T>(
    s: &mut impl Read,
    buf: &mut Vec<u8>,
    mut parse: impl FnMut(&[u8]) -> Result<Option<(T, usize)>>,
) -> Result<T> {
    let mut filled = 0;
    loop {
        if let Some((t, n)) = parse(&buf[..filled])? {
            if n != filled {
                bail!("{} bytes after the reply", filled - n);
            }
            return Ok(t);
        }
        if filled == buf.len() {
            buf.resize((buf.len() * 2).max(4096), 0);
        }
        let n = s.read(&mut buf[filled..]).context("reading a reply")?;
        if n == 0 {
            bail!("memcached closed the connection {filled} bytes into a reply");
        }
        filled += n;
    }
}

/// One `set` of `value` and the `get` that must find it, on `s`.
pub(crate) fn set_get(
    s: &mut (impl Read + Write),
    buf: &mut Vec<u8>,
    req: &mut Vec<u8>,
    key: &str,
    value: &[u8],
) -> Result<()> {
    req.clear();
    req.extend_from_slice(format!("set {key} 0 0 {}\r\n", value.len()).as_bytes());
    req.extend_from_slice(value);
    req.extend_from_slice(b"\r\n");
    s.write_all(req).context("sending set")?;
    reply(s, buf, |b| Ok(parse_stored(b)?.map(|n| ((), n))))?;
    req.clear();
    req.extend_from_slice(format!("get {key}\r\n").as_bytes());
    s.write_all(req).context("sending get")?;
    let data = reply(s, buf, |b| parse_get(b, key))?;
    if buf[data] != *value {
        bail!("get {key} returned another value than the one set");
    }
    Ok(())
}

/// Connection `conn`'s `set`/`get` pairs until the window ends; returns
/// the operations (a `set` or a `get`) completed inside it.
pub(crate) fn load(addr: SocketAddrV4, conn: usize, w: &Window) -> Result<u64> {
    let mut s = TcpStream::connect_timeout(&addr.into(), Duration::from_secs(10))
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    let (mut buf, mut req) = (vec![0u8; 4096], Vec::with_capacity(256));
    let keys: Vec<String> = (0..KEYS)
        .map(|k| format!("softoe-bench:{conn}:{k}"))
        .collect();
    let mut done = 0u64;
    for n in 0u64.. {
        let now = Instant::now();
        if now >= w.until {
            break;
        }
        // Each value says which pair wrote it: a stale one is caught.
        let value = format!("{n:0>width$}", width = VALUE);
        let key = &keys[(n % KEYS) as usize];
        set_get(&mut s, &mut buf, &mut req, key, value.as_bytes())
            .with_context(|| format!("connection {conn}, after {n} set/get pairs"))?;
        if now >= w.from {
            done += 2;
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn stored_only_when_whole() {
        assert_eq!(parse_stored(b"").unwrap(), None);
        assert_eq!(parse_stored(b"STOR").unwrap(), None);
        assert_eq!(parse_stored(b"STORED\r").unwrap(), None);
        assert_eq!(parse_stored(b"STORED\r\n").unwrap(), Some(8));
        for bad in [
            &b"NOT_STORED\r\n"[..],
            b"ERROR\r\n",
            b"SERVER_ERROR out of memory storing object\r\n",
            b"CLIENT_ERROR bad data chunk\r\n",
            b"\xff\r\n",
        ] {
            assert!(parse_stored(bad).is_err(), "{bad:?}");
        }
        assert!(parse_stored(&[b'S'; MAX_LINE + 1]).is_err());
    }

    #[test]
    fn a_value_is_found_whatever_the_cut() {
        let reply = b"VALUE k 0 5\r\nhello\r\nEND\r\n";
        for cut in 0..reply.len() {
            assert_eq!(parse_get(&reply[..cut], "k").unwrap(), None, "cut {cut}");
        }
        let (data, n) = parse_get(reply, "k").unwrap().unwrap();
        assert_eq!((&reply[data], n), (&b"hello"[..], reply.len()));
        // A value holding CRLF and "END" is data, not the end.
        let tricky = b"VALUE k 0 7\r\nEND\r\n\r\n\r\nEND\r\n";
        let (data, n) = parse_get(tricky, "k").unwrap().unwrap();
        assert_eq!((&tricky[data], n), (&b"END\r\n\r\n"[..], tricky.len()));
    }

    #[test]
    fn misses_and_odd_replies_fail() {
        for bad in [
            &b"END\r\n"[..],
            b"ERROR\r\n",
            b"SERVER_ERROR busy\r\n",
            b"VALUE other 0 5\r\nhello\r\nEND\r\n",
            b"VALUE k x 5\r\nhello\r\nEND\r\n",
            b"VALUE k 0\r\n",
            b"VALUE k 0 5 1 extra\r\nhello\r\nEND\r\n",
            b"VALUE k 0 99999999\r\n",
            b"STORED\r\n",
        ] {
            assert!(parse_get(bad, "k").is_err(), "{bad:?}");
        }
        // Too long a value: the tail is not END, as soon as it shows.
        assert!(parse_get(b"VALUE k 0 5\r\nhello!\r\nEND\r\n", "k").is_err());
        assert!(parse_get(b"VALUE k 0 5\r\nhelloX", "k").is_err());
        // A value with a CAS unique (`gets`) is still a value.
        assert!(
            parse_get(b"VALUE k 0 1 42\r\nx\r\nEND\r\n", "k")
                .unwrap()
                .is_some()
        );
    }

    /// A fake memcached: each request written releases the next scripted
    /// reply, read back a few bytes at a time.
    struct Fake {
        script: std::collections::VecDeque<&'static [u8]>,
        out: Vec<u8>,
        step: usize,
    }

    impl Read for Fake {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            let n = self.out.len().min(self.step).min(b.len());
            b[..n].copy_from_slice(&self.out[..n]);
            self.out.drain(..n);
            Ok(n)
        }
    }

    impl Write for Fake {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if let Some(r) = self.script.pop_front() {
                self.out.extend_from_slice(r);
            }
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn pair(set: &'static [u8], get: &'static [u8], step: usize) -> Result<()> {
        let mut f = Fake {
            script: [set, get].into(),
            out: Vec::new(),
            step,
        };
        set_get(&mut f, &mut Vec::new(), &mut Vec::new(), "k", b"hello")
    }

    #[test]
    fn a_pair_checks_the_value_and_the_connection() {
        let (stored, hello) = (&b"STORED\r\n"[..], &b"VALUE k 0 5\r\nhello\r\nEND\r\n"[..]);
        for step in [1, 2, 5, 100] {
            pair(stored, hello, step).unwrap();
        }
        // A stale value, a miss, a connection closed mid-value, a reply too
        // many, a refused set.
        assert!(pair(stored, b"VALUE k 0 5\r\nhellO\r\nEND\r\n", 3).is_err());
        assert!(pair(stored, b"END\r\n", 3).is_err());
        assert!(pair(stored, b"VALUE k 0 5\r\nhel", 3).is_err());
        assert!(pair(b"STORED\r\nSTORED\r\n", hello, 100).is_err());
        assert!(pair(b"SERVER_ERROR out of memory\r\n", hello, 100).is_err());
    }
}
