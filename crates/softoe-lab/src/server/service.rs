//! What one listener of the server program does with each connection.

use std::io::{Read, Write};

use softoe_host::SendPolicy;

use super::Conn;
use super::pattern::{checked_sink, pattern_source};

/// The largest read or write the sized sink and source make.
const MAX_IO: u64 = 16 << 20;
/// The byte the sources send.
const FILL: u8 = 0x3c;

/// How much a source sends.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Length {
    /// As many bytes as the client asks for: a length (8 bytes,
    /// little-endian) it sends first.
    Asked,
    /// This many, whatever the client says.
    Fixed(u64),
}

/// One listener's service.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Service {
    /// Reads to the end (in 1 MiB reads) and discards.
    Discard,
    /// Sends `len` bytes in `write`-byte writes, and closes; on the engine
    /// with the `zerocopy` policy from region buffers sent by reference.
    Source { len: Length, write: usize },
    /// Echoes everything, Nagle off.
    Echo,
    /// The sink that reads in sizes the client chooses: an 8-byte read size
    /// (little-endian) first, then it discards to the end.
    SizedSink,
    /// The source that writes in sizes the client chooses: a length and a
    /// write size (8 bytes each, little-endian), then that many bytes.
    SizedSource,
    /// The loss sweep's patterned source (see [`pattern_source`]).
    PatternSource,
    /// The loss sweep's checking sink (see [`checked_sink`]).
    CheckedSink,
}

/// How the engine's connections send.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Policy {
    /// The connection's default (`copy`), for every service.
    Default,
    /// This policy for every service but the echo, which keeps the default
    /// (`copy`): the ping-pong has always been measured so.
    Bulk(SendPolicy),
    /// `overlap`, and the source sends region buffers by reference.
    ZeroCopy,
}

impl Service {
    /// Serves connection `c` to its end.
    pub(crate) fn serve<C: Conn>(self, mut c: C, policy: Policy) -> std::io::Result<()> {
        if let Service::Echo = self {
            c.set_nodelay()?;
            return echo(c);
        }
        match policy {
            Policy::Default => {}
            Policy::Bulk(p) => c.set_send_policy(p),
            Policy::ZeroCopy => c.set_send_policy(SendPolicy::Overlap),
        }
        match self {
            Service::Discard => discard_in(c, 1 << 20),
            Service::Source { len, write } => {
                let left = match len {
                    Length::Asked => read_u64(&mut c)?,
                    Length::Fixed(n) => n,
                };
                if matches!(policy, Policy::ZeroCopy) {
                    c.send_zerocopy_all(left, write)
                } else {
                    send_in_writes(c, left, write)
                }
            }
            Service::SizedSink => {
                let size = io_size(read_u64(&mut c)?)?;
                discard_in(c, size)
            }
            Service::SizedSource => {
                let left = read_u64(&mut c)?;
                let write = io_size(read_u64(&mut c)?)?;
                send_in_writes(c, left, write)
            }
            Service::PatternSource => pattern_source(c),
            Service::CheckedSink => checked_sink(c),
            Service::Echo => echo(c),
        }
    }
}

/// Discards what it reads, `size` bytes per read at most.
fn discard_in(mut c: impl Read, size: usize) -> std::io::Result<()> {
    let mut buf = vec![0u8; size];
    while c.read(&mut buf)? > 0 {}
    Ok(())
}

/// An 8-byte little-endian number from the client.
fn read_u64(c: &mut impl Read) -> std::io::Result<u64> {
    let mut n = [0u8; 8];
    c.read_exact(&mut n)?;
    Ok(u64::from_le_bytes(n))
}

/// A read or write size the client asked for, checked.
fn io_size(n: u64) -> std::io::Result<usize> {
    if (1..=MAX_IO).contains(&n) {
        Ok(n as usize)
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a read or write size must be 1 to {MAX_IO} bytes, got {n}"),
        ))
    }
}

/// Sends `left` bytes in `write`-byte writes.
pub(super) fn send_in_writes(
    mut c: impl Write,
    mut left: u64,
    write: usize,
) -> std::io::Result<()> {
    let buf = vec![FILL; write];
    while left > 0 {
        let k = left.min(write as u64) as usize;
        c.write_all(&buf[..k])?;
        left -= k as u64;
    }
    Ok(())
}

/// Sends `left` bytes with the `zerocopy` policy: 16 buffers of `write`
/// bytes in the shared region, filled once, each sent by reference and
/// reused when the engine says the peer acknowledged it.
pub(super) fn send_zerocopy(
    c: &mut softoe_host::TcpStream,
    mut left: u64,
    write: usize,
) -> std::io::Result<()> {
    let client = c.client().clone();
    let mut bufs = (0..16)
        .map(|_| client.zc_buf(write))
        .collect::<std::io::Result<Vec<_>>>()?;
    let fill = vec![FILL; write];
    for b in &mut bufs {
        b.write_at(0, &fill)?;
    }
    let mut i = 0;
    while left > 0 {
        let b = &mut bufs[i % 16];
        b.wait_released()?;
        let k = left.min(write as u64) as usize;
        left -= c.send_zerocopy(b, k)? as u64;
        i += 1;
    }
    for b in &mut bufs {
        b.wait_released()?;
    }
    Ok(())
}

/// Echoes everything.
fn echo(mut c: impl Read + Write) -> std::io::Result<()> {
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let k = c.read(&mut buf)?;
        if k == 0 {
            return Ok(());
        }
        c.write_all(&buf[..k])?;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Each service over a real socket pair on loopback, as a client of
    /// the benchmark or the demo speaks to it.
    fn over_loopback(service: Service, client: impl FnOnce(std::net::TcpStream) + Send) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        std::thread::scope(|s| {
            let server = s.spawn(move || {
                let (c, _) = l.accept().unwrap();
                service.serve(c, Policy::Default)
            });
            client(std::net::TcpStream::connect(at).unwrap());
            server.join().unwrap().unwrap();
        });
    }

    #[test]
    fn sources_send_what_was_asked_or_fixed() {
        let read_all = |mut s: std::net::TcpStream| {
            let mut v = Vec::new();
            s.read_to_end(&mut v).unwrap();
            v
        };
        let asked = Service::Source {
            len: Length::Asked,
            write: 1000,
        };
        over_loopback(asked, |mut s| {
            s.write_all(&2500u64.to_le_bytes()).unwrap();
            let v = read_all(s);
            assert_eq!(v.len(), 2500);
            assert!(v.iter().all(|&b| b == FILL));
        });
        let fixed = Service::Source {
            len: Length::Fixed(3000),
            write: 1 << 20,
        };
        over_loopback(fixed, |s| assert_eq!(read_all(s).len(), 3000));
        over_loopback(Service::SizedSource, |mut s| {
            s.write_all(&700u64.to_le_bytes()).unwrap();
            s.write_all(&64u64.to_le_bytes()).unwrap();
            assert_eq!(read_all(s).len(), 700);
        });
    }

    #[test]
    fn echo_and_sinks_answer_as_clients_expect() {
        over_loopback(Service::Echo, |mut s| {
            s.write_all(b"ping").unwrap();
            let mut b = [0u8; 4];
            s.read_exact(&mut b).unwrap();
            assert_eq!(&b, b"ping");
        });
        for sink in [Service::Discard, Service::SizedSink] {
            over_loopback(sink, |mut s| {
                s.write_all(&4096u64.to_le_bytes()).unwrap();
                s.write_all(&[1u8; 10_000]).unwrap();
                s.shutdown(std::net::Shutdown::Write).unwrap();
                let mut rest = Vec::new();
                s.read_to_end(&mut rest).unwrap();
                assert!(rest.is_empty());
            });
        }
    }

    #[test]
    fn sizes_out_of_range_are_refused() {
        assert!(io_size(0).is_err());
        assert!(io_size(MAX_IO + 1).is_err());
        assert_eq!(io_size(MAX_IO).unwrap(), MAX_IO as usize);
    }
}
