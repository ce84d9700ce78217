//! UDP sockets: datagrams to and from any address.

use std::io;
use std::net::SocketAddrV4;
use std::sync::atomic::Ordering;
use std::time::Duration;

use softoe_abi::{Request, SendSource, SockOpt, UdpHeader, errno};

use super::{Readiness, UdpSocket, addr_of, packed};
use crate::errno::errno_err;

/// Most datagrams [`UdpSocket::send_batch_to`] posts before it waits for
/// their answers.
const BATCH: usize = 64;

impl UdpSocket {
    /// The bound address.
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.s.local()
    }

    /// `IP_TOS` (all eight bits: a UDP program owns the ECN bits) and
    /// `IP_TTL` (0: the engine's default) of the datagrams sent from now on.
    pub fn set_ip(&self, tos: Option<u8>, ttl: Option<u8>) -> io::Result<()> {
        if let Some(t) = tos {
            self.s.setopt(SockOpt::Tos, [u64::from(t), 0, 0, 0, 0])?;
        }
        if let Some(t) = ttl {
            self.s.setopt(SockOpt::Ttl, [u64::from(t), 0, 0, 0, 0])?;
        }
        Ok(())
    }

    /// `SO_PRIORITY`, 0..=255 (more: `EINVAL`) of the datagrams sent from
    /// now on.
    pub fn set_priority(&self, p: u32) -> io::Result<()> {
        self.s.set_priority(p)
    }

    /// The `SO_PRIORITY` last set through this handle (0: none).
    pub fn priority(&self) -> u32 {
        self.s.priority.load(Ordering::Relaxed)
    }

    /// What a `poll` would say now.
    pub fn readiness(&self) -> Readiness {
        self.s.readiness()
    }

    /// Non-blocking receives and sends (`WouldBlock`).
    pub fn set_nonblocking(&mut self, on: bool) {
        self.mode.nonblocking = on;
    }

    /// The command that sends `data` to `to`.
    fn send_request(&self, data: &[u8], to: SocketAddrV4) -> Request {
        Request::Send {
            sock: self.s.id,
            source: SendSource::Remote {
                addr: data.as_ptr() as u64,
            },
            len: data.len() as u64,
            to: Some(packed(to)),
            more: false,
        }
    }

    /// Sends each of `datagrams` to `to`, as `sendmmsg(2)` does: the
    /// commands go to the engine together (up to 64 before waiting)
    /// and their answers are awaited together. How many were sent from the
    /// first on; fewer than given when one fails after the first (the rest
    /// may still have been sent), the first's error when it fails.
    pub fn send_batch_to(&self, datagrams: &[&[u8]], to: SocketAddrV4) -> io::Result<usize> {
        let mut sent = 0;
        for chunk in datagrams.chunks(BATCH) {
            let mut tags = [0u64; BATCH];
            let mut posted = 0;
            let mut failed = None;
            for d in chunk {
                match self.s.c.submit(&self.send_request(d, to)) {
                    Ok(t) => {
                        tags[posted] = t;
                        posted += 1;
                    }
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            for &t in &tags[..posted] {
                let r = self.s.c.wait_tag(t);
                if failed.is_some() {
                    continue;
                }
                match r.map(|c| c.outcome()) {
                    Ok(Ok(_)) => sent += 1,
                    Ok(Err(e)) => failed = Some(errno_err(e)),
                    Err(e) => failed = Some(e),
                }
            }
            if let Some(e) = failed {
                return if sent == 0 { Err(e) } else { Ok(sent) };
            }
        }
        Ok(sent)
    }

    /// Sends one datagram (the engine reads it from our memory).
    pub fn send_to(&self, data: &[u8], to: SocketAddrV4) -> io::Result<usize> {
        let req = self.send_request(data, to);
        loop {
            let r = self.s.call(&req)?;
            match r.outcome() {
                Ok(n) => return Ok(n as usize),
                Err(errno::EAGAIN) if !self.mode.nonblocking => std::thread::yield_now(),
                Err(e) => return Err(errno_err(e)),
            }
        }
    }

    /// Receives one datagram; a datagram longer than `buf` is truncated.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddrV4)> {
        let region = *self.s.c.region();
        let Some(view) = region.slot(self.s.id) else {
            return Err(errno_err(errno::EBADF));
        };
        self.s
            .wait(self.mode.nonblocking, self.mode.read_timeout, false, |s| {
                s.c.region()
                    .slot(s.id)
                    .is_some_and(|v| v.rx_tail() != v.rx_head())
            })?;
        let head = view.rx_head();
        let mut hb = [0u8; size_of::<UdpHeader>()];
        region.ring_read(self.s.rx, head, &mut hb);
        let h = header_of(&hb);
        let n = (h.len as usize).min(buf.len());
        region.ring_read(self.s.rx, head + hb.len() as u64, &mut buf[..n]);
        view.set_rx_head(head + UdpHeader::footprint(h.len));
        let _ = self.s.c.submit_quiet(&Request::RxDone { sock: self.s.id });
        Ok((n, addr_of((h.addr, h.port))))
    }

    /// Read timeout.
    pub fn set_read_timeout(&mut self, t: Option<Duration>) {
        self.mode.read_timeout = t;
    }
}
/// The datagram header in `hb`, as the engine laid it out (`repr(C)`,
/// native byte order): `len`, `port`, a pad, `addr`.
fn header_of(hb: &[u8; size_of::<UdpHeader>()]) -> UdpHeader {
    let word = |at: usize| u32::from_ne_bytes([hb[at], hb[at + 1], hb[at + 2], hb[at + 3]]);
    UdpHeader {
        len: word(std::mem::offset_of!(UdpHeader, len)),
        port: {
            let at = std::mem::offset_of!(UdpHeader, port);
            u16::from_ne_bytes([hb[at], hb[at + 1]])
        },
        addr: word(std::mem::offset_of!(UdpHeader, addr)),
        ..UdpHeader::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back_field_by_field() {
        let mut hb = [0u8; size_of::<UdpHeader>()];
        hb[..4].copy_from_slice(&1200u32.to_ne_bytes());
        hb[4..6].copy_from_slice(&5353u16.to_ne_bytes());
        hb[6..8].copy_from_slice(&0xffffu16.to_ne_bytes());
        hb[8..12].copy_from_slice(&0x0a00_0001u32.to_ne_bytes());
        let h = header_of(&hb);
        assert_eq!((h.len, h.port, h.addr), (1200, 5353, 0x0a00_0001));
        assert_eq!((h._pad, h._pad2), (0, 0));
    }
}
