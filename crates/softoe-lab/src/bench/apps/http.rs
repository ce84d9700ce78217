//! The web server's load: GETs of a known file, on kept-alive connections
//! or on a fresh connection each, every response checked — status 200, a
//! `Content-Length` equal to the file's, the body byte for byte, nothing
//! after it — before it counts.

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use super::Window;

/// The longest response head taken (nginx's are ~250 bytes).
const MAX_HEAD: usize = 16 * 1024;

/// How long one read may wait before the request fails.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A response's head, as far as the load needs it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub status: u16,
    /// `Content-Length`.
    pub len: usize,
    /// Bytes of the head, its blank line included: the body starts here.
    pub head_len: usize,
    /// `Connection: close`: the server ends the connection after this.
    pub close: bool,
}

/// Parses the head at the start of `buf`: `Ok(None)` while it is
/// incomplete, an error for anything a plain static-file response is not
/// (no `Content-Length`, chunked, not HTTP/1.x, a head too long).
pub(crate) fn parse_head(buf: &[u8]) -> Result<Option<Head>> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        if buf.len() > MAX_HEAD {
            bail!("no end of the response head in {} bytes", buf.len());
        }
        return Ok(None);
    };
    let text = std::str::from_utf8(&buf[..end]).context("a response head not in UTF-8")?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.split_whitespace();
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        bail!("not an HTTP/1 response: {status_line:?}");
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("no status code in {status_line:?}"))?;
    let mut len = None;
    let mut close = false;
    for line in lines {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| anyhow!("a header line without a colon: {line:?}"))?;
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("content-length") {
            let n: usize = value
                .parse()
                .map_err(|_| anyhow!("Content-Length {value:?}"))?;
            if len.is_some_and(|l| l != n) {
                bail!("two different Content-Lengths");
            }
            len = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            bail!("Transfer-Encoding {value:?} where a static file's length was expected");
        } else if name.eq_ignore_ascii_case("connection") {
            close = value
                .split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("close"));
        }
    }
    let len = len.ok_or_else(|| anyhow!("status {status} without Content-Length"))?;
    Ok(Some(Head {
        status,
        len,
        head_len: end + 4,
        close,
    }))
}

/// Reads one response from `s` into `buf` and checks it: status 200, the
/// body equal to `want`, no byte after it; with `to_eof`, the server must
/// then close the connection. Returns whether the server said it closes.
pub(crate) fn read_response(
    s: &mut impl Read,
    buf: &mut Vec<u8>,
    want: &[u8],
    to_eof: bool,
) -> Result<bool> {
    let mut filled = 0;
    let mut head = None;
    loop {
        if head.is_none() {
            head = parse_head(&buf[..filled])?;
        }
        if let Some(h) = &head {
            if filled >= h.head_len + h.len {
                break;
            }
            if buf.len() < h.head_len + h.len {
                buf.resize(h.head_len + h.len, 0);
            }
        }
        if filled == buf.len() {
            buf.resize((buf.len() * 2).max(4096), 0);
        }
        let n = s.read(&mut buf[filled..]).context("reading the response")?;
        if n == 0 {
            bail!(
                "the server closed the connection {filled} bytes into the response{}",
                head.map_or_else(
                    || " (head incomplete)".to_string(),
                    |h| format!(" of {} bytes", h.head_len + h.len)
                )
            );
        }
        filled += n;
    }
    let Some(h) = head else {
        bail!("no response head");
    };
    if h.status != 200 {
        let text = String::from_utf8_lossy(&buf[..h.head_len.min(200)]).into_owned();
        bail!("status {}: {text:?}", h.status);
    }
    let end = h.head_len + h.len;
    if filled > end {
        bail!("{} bytes after the response's body", filled - end);
    }
    if h.len != want.len() {
        bail!(
            "a body of {} bytes where the file has {}",
            h.len,
            want.len()
        );
    }
    if buf[h.head_len..end] != *want {
        bail!("the body differs from the file");
    }
    if to_eof {
        let mut b = [0u8; 256];
        let n = s.read(&mut b).context("waiting for the server's close")?;
        if n != 0 {
            bail!("{n} bytes after a response that closes the connection");
        }
    }
    Ok(h.close)
}

/// The request for `path`.
fn request(path: &str, close: bool) -> Vec<u8> {
    format!(
        "GET {path} HTTP/1.1\r\nHost: softoe-bench\r\nUser-Agent: softoe-bench\r\n{}\r\n",
        if close { "Connection: close\r\n" } else { "" }
    )
    .into_bytes()
}

fn connect(addr: SocketAddrV4) -> Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr.into(), READ_TIMEOUT)
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(READ_TIMEOUT))?;
    s.set_write_timeout(Some(READ_TIMEOUT))?;
    Ok(s)
}

/// One connection's GETs of `path` (whose content is `want`) on one
/// kept-alive connection until the window ends (a new one if the server
/// closes it). Returns the requests completed inside the window.
pub(crate) fn keep_alive(addr: SocketAddrV4, path: &str, want: &[u8], w: &Window) -> Result<u64> {
    let req = request(path, false);
    let mut buf = vec![0u8; want.len() + 4096];
    let mut done = 0;
    let mut s = connect(addr)?;
    loop {
        let now = Instant::now();
        if now >= w.until {
            return Ok(done);
        }
        s.write_all(&req).context("sending a request")?;
        let close = read_response(&mut s, &mut buf, want, false)
            .with_context(|| format!("GET {path} (keep-alive), after {done} responses"))?;
        if now >= w.from {
            done += 1;
        }
        if close {
            s = connect(addr)?;
        }
    }
}

/// GETs of `path` until the window ends, each on a connection of its own
/// that the server closes (`Connection: close`, as HTTP/1.0 clients and
/// `ab` without `-k` ask). Returns the requests completed inside the window.
pub(crate) fn fresh_connections(
    addr: SocketAddrV4,
    path: &str,
    want: &[u8],
    w: &Window,
) -> Result<u64> {
    let req = request(path, true);
    let mut buf = vec![0u8; want.len() + 4096];
    let mut done = 0;
    loop {
        let now = Instant::now();
        if now >= w.until {
            return Ok(done);
        }
        let mut s = connect(addr).with_context(|| format!("after {done} requests"))?;
        s.write_all(&req).context("sending a request")?;
        read_response(&mut s, &mut buf, want, true)
            .with_context(|| format!("GET {path} (new connection), after {done} responses"))?;
        if now >= w.from {
            done += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const HEAD: &str = "HTTP/1.1 200 OK\r\nServer: nginx\r\ncontent-length: 5\r\n\
                        Connection: keep-alive\r\n\r\n";

    /// A reader that hands out its bytes a few at a time.
    struct Dribble<'a>(&'a [u8], usize);

    impl Read for Dribble<'_> {
        fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.len().min(self.1).min(b.len());
            b[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn read(bytes: &[u8], step: usize, want: &[u8], to_eof: bool) -> Result<bool> {
        let mut buf = Vec::new();
        read_response(&mut Dribble(bytes, step), &mut buf, want, to_eof)
    }

    #[test]
    fn a_head_is_parsed_only_when_complete() {
        let full = HEAD.as_bytes();
        for cut in 0..full.len() {
            assert!(parse_head(&full[..cut]).unwrap().is_none(), "cut at {cut}");
        }
        let h = parse_head(full).unwrap().unwrap();
        assert_eq!(
            h,
            Head {
                status: 200,
                len: 5,
                head_len: full.len(),
                close: false
            }
        );
        let h = parse_head(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\nconnection: Close\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(h.close && h.len == 0);
    }

    #[test]
    fn heads_that_are_not_a_static_file_are_errors() {
        for bad in [
            "HTTP/1.1 200 OK\r\nServer: x\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "SSH-2.0-OpenSSH\r\n\r\n",
            "HTTP/1.1 OK\r\nContent-Length: 1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        ] {
            assert!(parse_head(bad.as_bytes()).is_err(), "{bad:?} accepted");
        }
        assert!(parse_head(&vec![b'x'; MAX_HEAD + 1]).is_err());
    }

    #[test]
    fn a_response_read_a_byte_at_a_time_is_whole() {
        let bytes = [HEAD.as_bytes(), b"hello"].concat();
        for step in [1, 3, 7, 4096] {
            assert!(!read(&bytes, step, b"hello", false).unwrap(), "step {step}");
        }
        // The server closes after it: the connection's end is expected.
        let close = HEAD.replace("keep-alive", "close");
        let bytes = [close.as_bytes(), b"hello"].concat();
        assert!(read(&bytes, 2, b"hello", true).unwrap());
    }

    #[test]
    fn short_wrong_or_extra_responses_fail() {
        let ok = [HEAD.as_bytes(), b"hello"].concat();
        // Cut anywhere: the connection ended early.
        for cut in 0..ok.len() {
            let e = read(&ok[..cut], 5, b"hello", false).unwrap_err();
            assert!(format!("{e:#}").contains("closed the connection"), "{e:#}");
        }
        // Another body, another length, another status, a byte too many.
        assert!(read(&ok, 5, b"hellO", false).is_err());
        assert!(read(&ok, 5, b"hello!", false).is_err());
        let not_found = HEAD.replace("200 OK", "404 Not Found");
        assert!(
            read(
                &[not_found.as_bytes(), b"hello"].concat(),
                5,
                b"hello",
                false
            )
            .is_err()
        );
        assert!(read(&[&ok[..], b"x"].concat(), 64, b"hello", false).is_err());
        // A connection that should close but sends more.
        assert!(read(&[&ok[..], b"x"].concat(), 5, b"hello", true).is_err());
    }
}
