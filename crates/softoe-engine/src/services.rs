//! Built-in applications that run on the engine thread: the servers and
//! clients tests, the demo and the benchmarks use against Linux.
//!
//! They use the stack exactly as a host program will through the host
//! interface: sockets, payload references into engine memory, readiness.

use std::net::SocketAddrV4;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use softoe_stack::{
    Endpoint, Instant, PayloadRef, RecvError, SendError, SocketHandle, Stack, TcpError,
};

use crate::memory::Memory;

// The trait lives in its own module (`crate::service`); named here too, as
// it always was.
pub use crate::service::{Service, ServiceError};

/// What a server saw on one connection.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConnReport {
    /// The peer.
    pub peer: String,
    /// Bytes received.
    pub received: u64,
    /// Bytes sent.
    pub sent: u64,
    /// SHA-256 of everything received, hex.
    pub sha256: String,
    /// How it ended (`None`: cleanly).
    pub error: Option<String>,
    /// Time from accept to close, microseconds.
    pub micros: u64,
}

/// Reports shared with whoever started the service.
pub type Reports = Arc<Mutex<Vec<ConnReport>>>;

fn listen(stack: &mut Stack, port: u16) -> Result<SocketHandle, ServiceError> {
    stack
        .tcp_listen(
            Endpoint::new(softoe_wire::Ipv4Address::UNSPECIFIED, port),
            128,
            None,
        )
        .map_err(|why| ServiceError::Listen { port, why })
}

#[derive(Debug)]
struct Conn {
    h: SocketHandle,
    peer: String,
    started: Instant,
    received: u64,
    sent: u64,
    /// `None`: the service does not hash (a benchmark's discard).
    hash: Option<Sha256>,
    eof: bool,
    shut: bool,
    /// Echo: the ring region and how much of it the stream has used.
    ring: Option<u32>,
    queued: u64,
}

impl Conn {
    fn new(stack: &Stack, h: SocketHandle, now: Instant) -> Conn {
        let peer = stack
            .tcp_info(h)
            .map(|i| i.remote.to_string())
            .unwrap_or_default();
        Conn {
            h,
            peer,
            started: now,
            received: 0,
            sent: 0,
            hash: Some(Sha256::new()),
            eof: false,
            shut: false,
            ring: None,
            queued: 0,
        }
    }

    fn report(&mut self, now: Instant, error: Option<TcpError>) -> ConnReport {
        ConnReport {
            peer: self.peer.clone(),
            received: self.received,
            sent: self.sent,
            sha256: self
                .hash
                .take()
                .map(|h| hex(&h.finalize()))
                .unwrap_or_default(),
            error: error.map(|e| e.to_string()),
            micros: now.saturating_duration_since(self.started).as_micros() as u64,
        }
    }

    /// Reports what the connection carried and closes it.
    fn finish(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        reports: &Reports,
        error: Option<TcpError>,
    ) {
        let rep = self.report(now, error);
        if let Ok(mut v) = reports.lock() {
            v.push(rep);
        }
        let _ = stack.close(now, self.h);
    }

    /// Reads everything available, hashing it. Returns false on error.
    fn drain(&mut self, stack: &mut Stack) -> Result<bool, TcpError> {
        let mut progress = false;
        loop {
            let hash = &mut self.hash;
            match stack.tcp_recv_with(self.h, |a, b| {
                if let Some(h) = hash.as_mut() {
                    h.update(a);
                    h.update(b);
                }
                (a.len() + b.len(), a.len() + b.len())
            }) {
                Ok(0) => return Ok(progress),
                Ok(n) => {
                    self.received += n as u64;
                    progress = true;
                }
                Err(RecvError::Finished) => {
                    if !self.eof {
                        progress = true;
                    }
                    self.eof = true;
                    return Ok(progress);
                }
                Err(RecvError::Failed(e)) => return Err(e),
                Err(_) => return Err(TcpError::Reset),
            }
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Accepts connections and reads them to the end (discard, RFC 863), hashing
/// what arrives.
#[derive(Debug)]
pub struct Discard {
    port: u16,
    listener: Option<SocketHandle>,
    conns: Vec<Conn>,
    reports: Reports,
    hash: bool,
}

impl Discard {
    /// A discard server on `port`, reporting into `reports` with the
    /// SHA-256 of what each connection carried.
    pub fn new(port: u16, reports: Reports) -> Discard {
        Discard {
            port,
            listener: None,
            conns: Vec::new(),
            reports,
            hash: true,
        }
    }

    /// A discard server that only counts (no SHA-256): what a benchmark
    /// compares with a plain `read` loop on Linux.
    pub fn counting(port: u16, reports: Reports) -> Discard {
        Discard {
            hash: false,
            ..Discard::new(port, reports)
        }
    }
}

fn accept_all(
    stack: &mut Stack,
    l: Option<SocketHandle>,
    now: Instant,
    conns: &mut Vec<Conn>,
) -> bool {
    let Some(l) = l else { return false };
    let mut any = false;
    while let Ok(Some(h)) = stack.tcp_accept(l) {
        conns.push(Conn::new(stack, h, now));
        any = true;
    }
    any
}

impl Service for Discard {
    fn name(&self) -> &str {
        "discard"
    }
    fn start(
        &mut self,
        _now: Instant,
        stack: &mut Stack,
        _mem: &mut Memory,
    ) -> Result<(), ServiceError> {
        self.listener = Some(listen(stack, self.port)?);
        Ok(())
    }
    fn step(&mut self, now: Instant, stack: &mut Stack, _mem: &mut Memory) -> bool {
        let mut any = accept_all(stack, self.listener, now, &mut self.conns);
        if !self.hash {
            for c in &mut self.conns {
                c.hash = None;
            }
        }
        let reports = &self.reports;
        self.conns.retain_mut(|c| {
            let r = c.drain(stack);
            any |= r.as_ref().is_ok_and(|p| *p);
            let done = match r {
                Err(e) => Some(Some(e)),
                Ok(_) if c.eof => Some(None),
                Ok(_) => None,
            };
            if let Some(err) = done {
                c.finish(now, stack, reports, err);
                any = true;
                return false;
            }
            true
        });
        any
    }
}

/// Accepts connections, sends `bytes` of the pattern on each, then closes
/// (chargen-like, but a fixed amount).
#[derive(Debug)]
pub struct Source {
    port: u16,
    bytes: u64,
    listener: Option<SocketHandle>,
    conns: Vec<Conn>,
    reports: Reports,
}

impl Source {
    /// A source server on `port` sending `bytes` to each client.
    pub fn new(port: u16, bytes: u64, reports: Reports) -> Source {
        Source {
            port,
            bytes,
            listener: None,
            conns: Vec::new(),
            reports,
        }
    }
}

/// Queues pattern bytes `[c.queued, total)` from region 0.
fn send_pattern(stack: &mut Stack, mem: &Memory, c: &mut Conn, total: u64) -> bool {
    let len = mem.region(0).map_or(0, |b| b.len()) as u64;
    if len == 0 {
        return false;
    }
    let mut any = false;
    while c.queued < total {
        let off = c.queued % len;
        let n = (total - c.queued).min(len - off).min(1 << 20) as u32;
        match stack.tcp_send(c.h, PayloadRef::new(0, off, n)) {
            Ok(0) | Err(_) => break,
            Ok(k) => {
                c.queued += k as u64;
                c.sent = c.queued;
                any = true;
            }
        }
    }
    any
}

impl Service for Source {
    fn name(&self) -> &str {
        "source"
    }
    fn start(
        &mut self,
        _now: Instant,
        stack: &mut Stack,
        _mem: &mut Memory,
    ) -> Result<(), ServiceError> {
        self.listener = Some(listen(stack, self.port)?);
        Ok(())
    }
    fn step(&mut self, now: Instant, stack: &mut Stack, mem: &mut Memory) -> bool {
        let mut any = accept_all(stack, self.listener, now, &mut self.conns);
        let (bytes, reports) = (self.bytes, &self.reports);
        self.conns.retain_mut(|c| {
            any |= send_pattern(stack, mem, c, bytes);
            if c.queued == bytes && !c.shut {
                let _ = stack.tcp_shutdown(c.h);
                c.shut = true;
            }
            let r = c.drain(stack);
            let acked = stack.tcp_acked(c.h).unwrap_or(0) >= bytes;
            let done = match r {
                Err(e) => Some(Some(e)),
                Ok(_) if c.shut && acked && c.eof => Some(None),
                Ok(_) => None,
            };
            if let Some(err) = done {
                c.finish(now, stack, reports, err);
                any = true;
                return false;
            }
            true
        });
        any
    }
}

/// Request/response, as netperf's TCP_RR: every `request` bytes a client
/// sends are answered with `response` bytes (a pattern, sent by reference
/// from engine memory). The message sizes of a latency sweep, served by the
/// engine itself.
#[derive(Debug)]
pub struct RequestResponse {
    port: u16,
    request: u64,
    response: u64,
    listener: Option<SocketHandle>,
    conns: Vec<Conn>,
    reports: Reports,
}

impl RequestResponse {
    /// Answers each `request`-byte request on `port` with `response` bytes.
    /// Sizes of zero are refused.
    pub fn new(
        port: u16,
        request: u64,
        response: u64,
        reports: Reports,
    ) -> Result<RequestResponse, String> {
        if request == 0 || response == 0 {
            return Err(format!(
                "request/response sizes must be above zero (got {request} and {response})"
            ));
        }
        Ok(RequestResponse {
            port,
            request,
            response,
            listener: None,
            conns: Vec::new(),
            reports,
        })
    }
}

impl Service for RequestResponse {
    fn name(&self) -> &str {
        "request/response"
    }
    fn start(
        &mut self,
        _now: Instant,
        stack: &mut Stack,
        _mem: &mut Memory,
    ) -> Result<(), ServiceError> {
        self.listener = Some(listen(stack, self.port)?);
        Ok(())
    }
    fn step(&mut self, now: Instant, stack: &mut Stack, mem: &mut Memory) -> bool {
        let before = self.conns.len();
        let mut any = accept_all(stack, self.listener, now, &mut self.conns);
        for c in self.conns.iter_mut().skip(before) {
            c.hash = None;
        }
        let (req, resp, reports) = (self.request, self.response, &self.reports);
        self.conns.retain_mut(|c| {
            let r = c.drain(stack);
            any |= matches!(r, Ok(true));
            // Whole requests received so far, each owed one response.
            let owed = (c.received / req).saturating_mul(resp);
            any |= send_pattern(stack, mem, c, owed);
            if c.eof && c.queued == owed && !c.shut {
                let _ = stack.tcp_shutdown(c.h);
                c.shut = true;
            }
            let acked = stack.tcp_acked(c.h).unwrap_or(0) >= owed;
            let done = match r {
                Err(e) => Some(Some(e)),
                Ok(_) if c.shut && acked => Some(None),
                Ok(_) => None,
            };
            if let Some(err) = done {
                c.finish(now, stack, reports, err);
                any = true;
                return false;
            }
            true
        });
        any
    }
}

/// Echoes every byte back (RFC 862), through a ring in engine memory per
/// connection.
#[derive(Debug)]
pub struct Echo {
    port: u16,
    ring: usize,
    listener: Option<SocketHandle>,
    conns: Vec<Conn>,
    reports: Reports,
    free_rings: Vec<u32>,
}

impl Echo {
    /// An echo server on `port`.
    pub fn new(port: u16, reports: Reports) -> Echo {
        Echo {
            port,
            ring: 256 * 1024,
            listener: None,
            conns: Vec::new(),
            reports,
            free_rings: Vec::new(),
        }
    }
}

impl Service for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    fn start(
        &mut self,
        _now: Instant,
        stack: &mut Stack,
        _mem: &mut Memory,
    ) -> Result<(), ServiceError> {
        self.listener = Some(listen(stack, self.port)?);
        Ok(())
    }
    fn step(&mut self, now: Instant, stack: &mut Stack, mem: &mut Memory) -> bool {
        let mut any = accept_all(stack, self.listener, now, &mut self.conns);
        let ring_len = self.ring;
        let (reports, free) = (&self.reports, &mut self.free_rings);
        self.conns.retain_mut(|c| {
            let region = *c.ring.get_or_insert_with(|| {
                free.pop()
                    .unwrap_or_else(|| mem.add(vec![0u8; ring_len].into_boxed_slice()))
            });
            // Copy what arrived into the ring (as far as acknowledged data
            // frees it), then send it back by reference.
            let acked = stack.tcp_acked(c.h).unwrap_or(0);
            let mut err = None;
            loop {
                let used = (c.queued - acked) as usize;
                let room = ring_len - used;
                if room == 0 {
                    break;
                }
                let pos = (c.queued % ring_len as u64) as usize;
                let contiguous = room.min(ring_len - pos);
                let Some(buf) = mem
                    .region_mut(region)
                    .and_then(|r| r.get_mut(pos..pos + contiguous))
                else {
                    break;
                };
                let hash = &mut c.hash;
                let got = stack.tcp_recv_with(c.h, |a, b| {
                    let n = a.len().min(buf.len());
                    buf[..n].copy_from_slice(&a[..n]);
                    let m = b.len().min(buf.len() - n);
                    buf[n..n + m].copy_from_slice(&b[..m]);
                    if let Some(h) = hash.as_mut() {
                        h.update(&buf[..n + m]);
                    }
                    (n + m, n + m)
                });
                match got {
                    Ok(0) => break,
                    Ok(n) => {
                        c.received += n as u64;
                        match stack.tcp_send(c.h, PayloadRef::new(region, pos as u64, n as u32)) {
                            Ok(k) if k == n => {}
                            Ok(_) | Err(SendError::InvalidState) => {
                                err = Some(TcpError::Aborted);
                                break;
                            }
                            Err(SendError::Failed(e)) => {
                                err = Some(e);
                                break;
                            }
                            Err(_) => break,
                        }
                        c.queued += n as u64;
                        c.sent = c.queued;
                        any = true;
                    }
                    Err(RecvError::Finished) => {
                        c.eof = true;
                        break;
                    }
                    Err(RecvError::Failed(e)) => {
                        err = Some(e);
                        break;
                    }
                    Err(_) => break,
                }
            }
            if c.eof && !c.shut {
                let _ = stack.tcp_shutdown(c.h);
                c.shut = true;
            }
            let all_acked = stack.tcp_acked(c.h).unwrap_or(0) >= c.queued;
            if err.is_some() || (c.eof && all_acked) {
                c.finish(now, stack, reports, err);
                // Its references are released only when the stack says so;
                // keep the ring out of reuse until then by not recycling it
                // while unacknowledged data remained.
                if all_acked {
                    free.push(region);
                }
                any = true;
                return false;
            }
            true
        });
        any
    }
}

/// Connects to `remote`, sends `bytes` of the pattern, shuts down, reads to
/// the end, closes; reports the time.
#[derive(Debug)]
pub struct BulkClient {
    remote: SocketAddrV4,
    bytes: u64,
    conn: Option<Conn>,
    reports: Reports,
    finished: bool,
}

impl BulkClient {
    /// A client that will send `bytes` to `remote`.
    pub fn new(remote: SocketAddrV4, bytes: u64, reports: Reports) -> BulkClient {
        BulkClient {
            remote,
            bytes,
            conn: None,
            reports,
            finished: false,
        }
    }
}

impl Service for BulkClient {
    fn name(&self) -> &str {
        "bulk-client"
    }
    fn start(
        &mut self,
        now: Instant,
        stack: &mut Stack,
        _mem: &mut Memory,
    ) -> Result<(), ServiceError> {
        let h = stack
            .tcp_connect(now, self.remote.into(), None, None)
            .map_err(|why| ServiceError::Connect {
                remote: self.remote,
                why,
            })?;
        self.conn = Some(Conn::new(stack, h, now));
        Ok(())
    }
    fn step(&mut self, now: Instant, stack: &mut Stack, mem: &mut Memory) -> bool {
        if self.finished {
            return false;
        }
        let Some(c) = self.conn.as_mut() else {
            return false;
        };
        let mut any = send_pattern(stack, mem, c, self.bytes);
        if c.queued == self.bytes && !c.shut && stack.tcp_shutdown(c.h).is_ok() {
            c.shut = true;
        }
        let r = c.drain(stack);
        any |= r.as_ref().is_ok_and(|p| *p);
        let err = r
            .err()
            .or_else(|| stack.tcp_info(c.h).ok().and_then(|i| i.error));
        if err.is_some() || c.eof {
            c.finish(now, stack, &self.reports, err);
            self.finished = true;
            any = true;
        }
        any
    }
}

/// A default pause between request/response rounds (none).
pub const NO_PAUSE: Duration = Duration::ZERO;

#[cfg(test)]
mod tests {
    use softoe_stack::{BindError, StackConfig};
    use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};

    use super::*;

    fn stack() -> Stack {
        let cfg = StackConfig::new(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            Ipv4Cidr::new(Ipv4Address::new(10, 0, 0, 1), 24).unwrap(),
        );
        Stack::new(cfg).unwrap()
    }

    #[test]
    fn a_taken_port_is_a_listen_error() {
        let (mut st, mut mem) = (stack(), Memory::new());
        let reports = Reports::default();
        let mut first = Discard::new(9, reports.clone());
        assert_eq!(first.start(Instant::ZERO, &mut st, &mut mem), Ok(()));
        let mut second = Echo::new(9, reports);
        let e = second.start(Instant::ZERO, &mut st, &mut mem);
        assert_eq!(
            e,
            Err(ServiceError::Listen {
                port: 9,
                why: BindError::AddrInUse
            })
        );
        let msg = e.err().map(|e| e.to_string());
        assert_eq!(
            msg.as_deref(),
            Some("listen on port 9: address already in use")
        );
    }

    #[test]
    fn an_unusable_remote_is_a_connect_error() {
        let (mut st, mut mem) = (stack(), Memory::new());
        // Port 0: no connection can be started there.
        let remote = SocketAddrV4::new(std::net::Ipv4Addr::new(10, 0, 0, 2), 0);
        let mut c = BulkClient::new(remote, 1, Reports::default());
        let e = c.start(Instant::ZERO, &mut st, &mut mem);
        assert_eq!(
            e,
            Err(ServiceError::Connect {
                remote,
                why: BindError::Unaddressable
            })
        );
        let msg = e.err().map(|e| e.to_string());
        assert_eq!(
            msg.as_deref(),
            Some("connect to 10.0.0.2:0: address not available")
        );
    }
}
