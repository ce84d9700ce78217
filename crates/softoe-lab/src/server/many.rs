//! The scale scenario's echo: one thread that waits for every connection at
//! once and echoes what it reads — on softoe a [`softoe_host::Selector`]
//! (the engine marks the sockets it changed in a bitmap in the shared
//! region), on Linux `epoll` (through mio).

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result, anyhow};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

use super::SCALE_ECHO as PORT;

/// Attaches to the engine at `path` with rings small enough that `n`
/// connections' rings fit in one data area.
pub(super) fn attach(path: &Path, n: usize) -> Result<softoe_host::Client> {
    // Small rings: 10,000 sockets' rings in one data area.
    let sockets = u32::try_from(n + 64)
        .ok()
        .filter(|&k| k <= 65_536)
        .ok_or_else(|| anyhow!("--scale {n}: at most 65,472 connections"))?;
    let cfg = softoe_host::Config {
        path: path.to_path_buf(),
        sockets,
        rx_ring: 16 << 10,
        tx_ring: 4 << 10,
        data_len: u64::from(sockets) * (20 << 10) + (16 << 20),
        ..softoe_host::Config::default()
    };
    softoe_host::Client::attach_with(cfg)
        .with_context(|| format!("attaching to {}", path.display()))
}

/// The softoe scale echo: one thread, a selector over the listener and
/// every connection. `open` counts the connections being served.
pub(super) fn serve_softoe(
    client: &softoe_host::Client,
    addr: Ipv4Addr,
    open: Arc<AtomicUsize>,
) -> Result<()> {
    use softoe_host::Interest as I;
    let mut l = client
        .tcp_listen(SocketAddrV4::new(addr, PORT), 1024)
        .with_context(|| format!("listening on port {PORT}"))?;
    l.set_nonblocking(true);
    let mut sel = client.selector()?;
    sel.register(&l, I::READ)?;
    let mut conns: HashMap<u32, softoe_host::TcpStream> = HashMap::new();
    let mut events = Vec::with_capacity(1024);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        sel.select(&mut events, None)?;
        for e in &events {
            if e.id == l.id() {
                loop {
                    match l.accept() {
                        Ok((s, _)) => {
                            s.set_nodelay(true)?;
                            sel.register(&s, I::READ)?;
                            conns.insert(s.id(), s);
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e).context("accept"),
                    }
                }
                open.store(conns.len(), Ordering::Relaxed);
                continue;
            }
            let Some(s) = conns.get_mut(&e.id) else {
                continue;
            };
            // Selected readable: the read returns at once.
            let n = s.read(&mut buf).unwrap_or(0);
            if n == 0 || s.write_all(&buf[..n]).is_err() {
                sel.deregister(&*s);
                conns.remove(&e.id);
                open.store(conns.len(), Ordering::Relaxed);
            }
        }
    }
}

/// The Linux scale echo: one thread, epoll (mio) over the listener and
/// every connection.
pub(super) fn serve_linux(addr: Ipv4Addr, open: Arc<AtomicUsize>) -> Result<()> {
    const LISTENER: Token = Token(usize::MAX);
    let mut poll = Poll::new()?;
    let mut l = TcpListener::bind(SocketAddr::V4(SocketAddrV4::new(addr, PORT)))
        .with_context(|| format!("listening on port {PORT}"))?;
    poll.registry()
        .register(&mut l, LISTENER, Interest::READABLE)?;
    // Connections by token; bytes still to write back.
    let mut conns: Vec<Option<(TcpStream, Vec<u8>)>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        poll.poll(&mut events, None)?;
        for ev in &events {
            if ev.token() == LISTENER {
                loop {
                    match l.accept() {
                        Ok((mut s, _)) => {
                            s.set_nodelay(true)?;
                            let i = free.pop().unwrap_or(conns.len());
                            poll.registry()
                                .register(&mut s, Token(i), Interest::READABLE)?;
                            if i == conns.len() {
                                conns.push(Some((s, Vec::new())));
                            } else {
                                conns[i] = Some((s, Vec::new()));
                            }
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e).context("accept"),
                    }
                }
                open.store(conns.len() - free.len(), Ordering::Relaxed);
                continue;
            }
            let i = ev.token().0;
            let Some(Some((s, out))) = conns.get_mut(i) else {
                continue;
            };
            // Edge-triggered: read until the socket is empty.
            let mut done = false;
            loop {
                match s.read(&mut buf) {
                    Ok(0) => {
                        done = true;
                        break;
                    }
                    Ok(n) => out.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => {
                        done = true;
                        break;
                    }
                }
            }
            while !done && !out.is_empty() {
                match s.write(out) {
                    Ok(n) => {
                        out.drain(..n);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => done = true,
                }
            }
            if done {
                let _ = poll.registry().deregister(s);
                conns[i] = None;
                free.push(i);
                open.store(conns.len() - free.len(), Ordering::Relaxed);
            } else {
                let want = if out.is_empty() {
                    Interest::READABLE
                } else {
                    Interest::READABLE | Interest::WRITABLE
                };
                poll.registry().reregister(s, Token(i), want)?;
            }
        }
    }
}
