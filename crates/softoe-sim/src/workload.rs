//! Applications for simulated stacks: clients and servers that move
//! pattern data both ways and check every byte.
//!
//! The protocol is the simplest that exercises every close path: the client
//! connects, sends its bytes and shuts down its sending half; the server
//! sends its bytes and shuts down its half when done; each side reads until
//! end of stream and then closes. Either side may instead abort after a
//! number of bytes. Every received byte is checked against the sender's
//! pattern at its stream offset, so loss, duplication, reordering or
//! corruption that slipped through would show.

use core::any::Any;

use softoe_stack::{
    BindError, Endpoint, Instant, RecvError, SendError, SocketHandle, Stack, TcpConfig, TcpError,
    TcpInfo,
};
use softoe_wire::Ipv4Address;

use crate::node::{App, Pattern};

/// One connection of a workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnSpec {
    /// Distinguishes the connection (and its pattern streams).
    pub id: u32,
    /// The server's port for this connection.
    pub port: u16,
    /// Bytes from client to server.
    pub client_bytes: u64,
    /// Bytes from server to client.
    pub server_bytes: u64,
    /// Largest single `send` by the client.
    pub client_chunk: u32,
    /// Largest single `send` by the server.
    pub server_chunk: u32,
    /// When the client connects.
    pub start: Instant,
    /// The client aborts once it has queued this many bytes.
    pub client_abort_after: Option<u64>,
    /// The server aborts once it has received this many bytes.
    pub server_abort_after: Option<u64>,
}

impl ConnSpec {
    /// Pattern key of the client's stream.
    pub fn client_key(&self) -> u64 {
        u64::from(self.id) * 104_729 + 17
    }

    /// Pattern key of the server's stream.
    pub fn server_key(&self) -> u64 {
        u64::from(self.id) * 130_363 + 400_009
    }

    /// Whether either side aborts.
    pub fn aborts(&self) -> bool {
        self.client_abort_after.is_some() || self.server_abort_after.is_some()
    }
}

/// What one end of a connection saw.
#[derive(Clone, Copy, Debug, Default)]
pub struct EndResult {
    /// Bytes queued for sending.
    pub sent: u64,
    /// Bytes received.
    pub received: u64,
    /// A received byte did not match the sender's pattern.
    pub corrupt: bool,
    /// End of stream was read.
    pub eof: bool,
    /// The connection failed.
    pub error: Option<TcpError>,
    /// `connect` itself failed.
    pub connect_error: Option<BindError>,
    /// This end aborted on purpose.
    pub aborted: bool,
    /// The application finished and closed its socket.
    pub done: bool,
    /// When it finished.
    pub done_at: Option<Instant>,
    /// When the connection started (connect or accept).
    pub started_at: Option<Instant>,
    /// The last `ss -ti` snapshot before closing.
    pub info: Option<TcpInfo>,
}

/// What one end of a connection does.
#[derive(Clone, Copy, Debug)]
struct Plan {
    total: u64,
    chunk: u32,
    send_key: u64,
    recv_key: u64,
    abort_after_sent: Option<u64>,
    abort_after_recv: Option<u64>,
}

/// Sends, shuts down, reads and closes one connection end.
fn pump(
    now: Instant,
    stack: &mut Stack,
    pattern: &Pattern,
    h: SocketHandle,
    r: &mut EndResult,
    shut: &mut bool,
    plan: Plan,
) -> bool {
    let Plan {
        total,
        chunk,
        send_key,
        recv_key,
        abort_after_sent,
        abort_after_recv,
    } = plan;
    let mut changed = false;
    let mut abort = false;
    // Aborts happen on open connections, so that a RST goes out.
    let open = stack.tcp_state(h).is_ok_and(|s| s.is_synchronized());
    let abort_after_sent = abort_after_sent.filter(|_| open);
    while r.error.is_none() && r.sent < total {
        if abort_after_sent.is_some_and(|a| r.sent >= a) {
            abort = true;
            break;
        }
        let want = (total - r.sent).min(u64::from(chunk.max(1))) as u32;
        let want = match abort_after_sent {
            Some(a) => want.min((a - r.sent).max(1).min(u64::from(u32::MAX)) as u32),
            None => want,
        };
        match stack.tcp_send(h, pattern.payload(send_key, r.sent, want)) {
            Ok(0) => break,
            Ok(n) => {
                r.sent += n as u64;
                changed = true;
            }
            Err(SendError::Failed(e)) => {
                r.error = Some(e);
                break;
            }
            Err(_) => break,
        }
    }
    if abort_after_sent.is_some_and(|a| r.sent >= a) {
        abort = true;
    }
    if !abort && r.error.is_none() && r.sent == total && !*shut && stack.tcp_shutdown(h).is_ok() {
        *shut = true;
        changed = true;
    }
    loop {
        let pos = r.received;
        let res = stack.tcp_recv_with(h, |a, b| {
            let ok = pattern.matches(recv_key, pos, a)
                && pattern.matches(recv_key, pos + a.len() as u64, b);
            (a.len() + b.len(), (a.len() + b.len(), ok))
        });
        match res {
            Ok((0, _)) => break,
            Ok((n, ok)) => {
                r.received += n as u64;
                r.corrupt |= !ok;
                changed = true;
                if abort_after_recv.is_some_and(|a| r.received >= a) {
                    abort = true;
                    break;
                }
            }
            Err(RecvError::Finished) => {
                if !r.eof {
                    changed = true;
                }
                r.eof = true;
                break;
            }
            Err(RecvError::Failed(e)) => {
                r.error = Some(e);
                break;
            }
            Err(_) => break,
        }
    }
    if let Ok(info) = stack.tcp_info(h) {
        if r.error.is_none() {
            r.error = info.error;
        }
        r.info = Some(info);
    }
    if abort {
        let _ = stack.tcp_abort(h);
        r.aborted = true;
    }
    // Close once both directions are done and our data is acknowledged
    // (like SO_LINGER), so the last snapshot shows the whole transfer.
    let acked = stack.tcp_acked(h).is_ok_and(|a| a >= r.sent);
    if abort || r.error.is_some() || (r.eof && *shut && acked) {
        if let Ok(info) = stack.tcp_info(h) {
            r.info = Some(info);
        }
        let _ = stack.close(now, h);
        r.done = true;
        r.done_at = Some(now);
        changed = true;
    }
    changed
}

/// The client end of one connection.
#[derive(Debug)]
pub struct Client {
    /// What to do.
    pub spec: ConnSpec,
    /// The server's address.
    pub server: Ipv4Address,
    /// Socket settings.
    pub cfg: TcpConfig,
    handle: Option<SocketHandle>,
    shut: bool,
    /// What happened.
    pub result: EndResult,
}

impl Client {
    /// A client for `spec` talking to `server`.
    pub fn new(spec: ConnSpec, server: Ipv4Address, cfg: TcpConfig) -> Client {
        Client {
            spec,
            server,
            cfg,
            handle: None,
            shut: false,
            result: EndResult::default(),
        }
    }
}

impl App for Client {
    fn step(&mut self, now: Instant, stack: &mut Stack, pattern: &Pattern) -> bool {
        if self.result.done {
            return false;
        }
        let h = match self.handle {
            Some(h) => h,
            None => {
                if now < self.spec.start {
                    return false;
                }
                match stack.tcp_connect(
                    now,
                    Endpoint::new(self.server, self.spec.port),
                    None,
                    Some(self.cfg),
                ) {
                    Ok(h) => {
                        self.handle = Some(h);
                        self.result.started_at = Some(now);
                        h
                    }
                    Err(e) => {
                        self.result.connect_error = Some(e);
                        self.result.done = true;
                        return true;
                    }
                }
            }
        };
        let s = self.spec;
        let plan = Plan {
            total: s.client_bytes,
            chunk: s.client_chunk,
            send_key: s.client_key(),
            recv_key: s.server_key(),
            abort_after_sent: s.client_abort_after,
            abort_after_recv: None,
        };
        pump(
            now,
            stack,
            pattern,
            h,
            &mut self.result,
            &mut self.shut,
            plan,
        )
    }

    fn wake_at(&self) -> Option<Instant> {
        (self.handle.is_none() && !self.result.done).then_some(self.spec.start)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// One accepted connection of a [`Server`].
#[derive(Debug)]
pub struct ServerConn {
    /// Its spec.
    pub spec: ConnSpec,
    handle: SocketHandle,
    shut: bool,
    /// What happened.
    pub result: EndResult,
}

/// A server with one listening port per connection spec.
#[derive(Debug)]
pub struct Server {
    specs: Vec<ConnSpec>,
    cfg: TcpConfig,
    listeners: Vec<(SocketHandle, ConnSpec)>,
    listening: bool,
    /// Accepted connections.
    pub conns: Vec<ServerConn>,
    /// `listen` failures.
    pub listen_errors: Vec<BindError>,
}

impl Server {
    /// A server for `specs`.
    pub fn new(specs: Vec<ConnSpec>, cfg: TcpConfig) -> Server {
        Server {
            specs,
            cfg,
            listeners: Vec::new(),
            listening: false,
            conns: Vec::new(),
            listen_errors: Vec::new(),
        }
    }

    /// Listeners still open (their connection was never accepted).
    pub fn open_listeners(&self) -> usize {
        self.listeners.len()
    }

    /// The result for connection `id`, if it was accepted.
    pub fn result(&self, id: u32) -> Option<&EndResult> {
        self.conns
            .iter()
            .find(|c| c.spec.id == id)
            .map(|c| &c.result)
    }
}

impl App for Server {
    fn step(&mut self, now: Instant, stack: &mut Stack, pattern: &Pattern) -> bool {
        let mut changed = false;
        if !self.listening {
            self.listening = true;
            for s in &self.specs {
                match stack.tcp_listen(
                    Endpoint::new(Ipv4Address::UNSPECIFIED, s.port),
                    4,
                    Some(self.cfg),
                ) {
                    Ok(h) => self.listeners.push((h, *s)),
                    Err(e) => self.listen_errors.push(e),
                }
            }
            changed = true;
        }
        let mut i = 0;
        while let Some(&(l, spec)) = self.listeners.get(i) {
            if let Ok(Some(h)) = stack.tcp_accept(l) {
                self.conns.push(ServerConn {
                    spec,
                    handle: h,
                    shut: false,
                    result: EndResult {
                        started_at: Some(now),
                        ..EndResult::default()
                    },
                });
                // One connection per port: the listener's work is done.
                let _ = stack.close(now, l);
                self.listeners.swap_remove(i);
                changed = true;
            } else {
                i += 1;
            }
        }
        for c in &mut self.conns {
            if c.result.done {
                continue;
            }
            let s = c.spec;
            let plan = Plan {
                total: s.server_bytes,
                chunk: s.server_chunk,
                send_key: s.server_key(),
                recv_key: s.client_key(),
                abort_after_sent: None,
                abort_after_recv: s.server_abort_after,
            };
            changed |= pump(
                now,
                stack,
                pattern,
                c.handle,
                &mut c.result,
                &mut c.shut,
                plan,
            );
        }
        changed
    }

    fn wake_at(&self) -> Option<Instant> {
        (!self.listening).then_some(Instant::ZERO)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
