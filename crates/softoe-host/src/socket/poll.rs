//! Readiness: what a `poll` would say of a socket, and waiting on several.

use std::io;
use std::time::Duration;

use softoe_abi::{EV_ACCEPT, EV_ERR, EV_HELD, EV_HUP, EV_RDHUP, EV_WRITABLE};

use super::{TcpListener, TcpReader, TcpStream, UdpSocket};
use crate::client::Client;

/// What a `poll` would say now of socket `id`: from the slot's events,
/// with the receive ring's own indices for readability (the engine's
/// `EV_READABLE` may predate the program's last read).
/// What a `poll` says of socket `id` of client `c`: as [`slot_readiness`],
/// but every socket of a session the engine ended (or of an engine that
/// died) has failed and hung up, as a reset connection has: a program
/// waiting on it wakes, and its next call fails.
pub(crate) fn readiness(c: &Client, id: u32) -> Readiness {
    if c.dead() {
        return Readiness {
            readable: true,
            writable: false,
            read_closed: true,
            hung_up: true,
            error: true,
            seq: c.region().slot(id).map_or(0, |v| v.seq()),
        };
    }
    slot_readiness(c.region(), id)
}

pub(crate) fn slot_readiness(region: &softoe_abi::Region, id: u32) -> Readiness {
    let Some(v) = region.slot(id) else {
        return Readiness {
            error: true,
            hung_up: true,
            ..Readiness::default()
        };
    };
    let ev = v.events();
    let error = ev & EV_ERR != 0;
    let read_closed = ev & EV_RDHUP != 0;
    Readiness {
        readable: v.rx_tail() != v.rx_head()
            || read_closed
            || error
            || ev & (EV_ACCEPT | EV_HELD) != 0,
        writable: ev & EV_WRITABLE != 0 && !error,
        read_closed,
        hung_up: ev & EV_HUP != 0,
        error,
        seq: v.seq(),
    }
}

/// A socket [`Client::poll`] and [`Selector`](crate::Selector) can wait for.
pub trait Pollable {
    /// What a `poll` would say now.
    fn readiness(&self) -> Readiness;
    /// The socket's id in its session (a [`Selector`](crate::Selector)
    /// reports sockets by it).
    fn socket_id(&self) -> u32;
    /// The attachment the socket belongs to.
    fn owner(&self) -> &Client;
}

macro_rules! pollable {
    ($($t:ty),*) => {$(
        impl Pollable for $t {
            fn readiness(&self) -> Readiness {
                self.s.readiness()
            }
            fn socket_id(&self) -> u32 {
                self.s.id
            }
            fn owner(&self) -> &Client {
                &self.s.c
            }
        }
    )*};
}

pollable!(TcpStream, TcpReader, TcpListener, UdpSocket);

/// What [`Client::poll`] waits for on one socket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Interest {
    /// Readable (data, end of stream, a connection to accept).
    pub read: bool,
    /// Writable.
    pub write: bool,
}

impl Interest {
    /// Readable.
    pub const READ: Interest = Interest {
        read: true,
        write: false,
    };
    /// Writable.
    pub const WRITE: Interest = Interest {
        read: false,
        write: true,
    };
    /// Either.
    pub const BOTH: Interest = Interest {
        read: true,
        write: true,
    };

    /// Whether `r` is what this interest waits for (errors and hang-ups
    /// always are).
    pub fn met_by(self, r: Readiness) -> bool {
        (self.read && r.readable) || (self.write && r.writable) || r.error || r.hung_up
    }
}

impl Client {
    /// Waits until at least one of `socks` is ready for what its interest
    /// names (or has failed), or `timeout` passes (`None`: for ever), and
    /// returns every socket's readiness — `poll(2)` over engine sockets.
    /// The sockets must belong to this client.
    pub fn poll(
        &self,
        socks: &[(&dyn Pollable, Interest)],
        timeout: Option<Duration>,
    ) -> io::Result<Vec<Readiness>> {
        let look = || -> Option<Vec<Readiness>> {
            let r: Vec<Readiness> = socks.iter().map(|(s, _)| s.readiness()).collect();
            r.iter()
                .zip(socks)
                .any(|(r, (_, i))| i.met_by(*r))
                .then_some(r)
        };
        if let Some(r) = look() {
            return Ok(r);
        }
        if timeout.is_some_and(|t| t.is_zero()) {
            return Ok(socks.iter().map(|(s, _)| s.readiness()).collect());
        }
        match self.block_until(timeout, true, &self.inner.poll_spin, |_| look())? {
            Some(r) => Ok(r),
            None => Ok(socks.iter().map(|(s, _)| s.readiness()).collect()),
        }
    }
}

/// A socket's readiness, as `poll` reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// A read would not block (data, end of stream, an error, or a
    /// connection to accept).
    pub readable: bool,
    /// A write would take bytes.
    pub writable: bool,
    /// The peer has finished sending (`POLLRDHUP`).
    pub read_closed: bool,
    /// Both directions are done (`POLLHUP`).
    pub hung_up: bool,
    /// The connection failed (`POLLERR`).
    pub error: bool,
    /// The slot's sequence: it moves with every event and every byte
    /// placed or space freed (edge-triggered waits report again only
    /// after it moved).
    pub seq: u32,
}
