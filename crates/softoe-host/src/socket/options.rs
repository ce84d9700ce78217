//! Socket options: the congestion algorithms, the options a TCP socket
//! takes before its first segment, and the setters (`SETOPT`).

use std::io;
use std::sync::atomic::Ordering;
use std::time::Duration;

use softoe_abi::{CONGESTION_CUBIC, CONGESTION_RENO, Request, SockOpt};

use super::{Sock, TcpStream};
use crate::errno::result;

/// A congestion control algorithm the engine runs (`TCP_CONGESTION`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Congestion {
    /// RFC 5681/6582 NewReno: Linux's `reno`.
    Reno,
    /// RFC 9438 CUBIC: Linux's `cubic`.
    Cubic,
}

impl Congestion {
    /// Every algorithm the engine has.
    pub const ALL: [Congestion; 2] = [Congestion::Reno, Congestion::Cubic];

    /// The algorithm Linux calls `name`, if the engine has it.
    pub fn from_name(name: &str) -> Option<Congestion> {
        Congestion::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Linux's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Congestion::Reno => "reno",
            Congestion::Cubic => "cubic",
        }
    }

    fn code(self) -> u32 {
        match self {
            Congestion::Reno => CONGESTION_RENO,
            Congestion::Cubic => CONGESTION_CUBIC,
        }
    }

    pub(crate) fn of_code(c: u32) -> Option<Congestion> {
        Congestion::ALL.into_iter().find(|a| a.code() == c)
    }
}

/// Options a TCP socket takes before it connects or listens
/// ([`Client::tcp_connect_with`](crate::Client::tcp_connect_with),
/// [`Client::tcp_listen_with`](crate::Client::tcp_listen_with)), so that its
/// first segment — the SYN, or a listener's SYN-ACKs — already carries them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TcpOptions {
    /// `IP_TOS` (a TCP socket's ECN bits stay the engine's: zero).
    pub tos: Option<u8>,
    /// `IP_TTL`, 1..=255 (0: the engine's default).
    pub ttl: Option<u8>,
    /// `TCP_CONGESTION`.
    pub congestion: Option<Congestion>,
    /// `SO_PRIORITY`, 0..=255 (more: `EINVAL`): the class the frames go
    /// to the port with — a bonded port's `prioritized` policy sends those
    /// at or above its threshold (6 by default) over its real-time
    /// members. Unlike the others it can change at any time with effect
    /// on the next frame ([`TcpStream::set_priority`]).
    pub priority: Option<u32>,
    /// `SO_REUSEPORT`: a listener joins the group of listeners of the same
    /// user on its address and port that set it too, and they share the
    /// new connections (the engine picks one by a hash of each
    /// four-tuple, as Linux does).
    pub reuseport: bool,
}

/// `SO_KEEPALIVE`'s timing, as `TCP_KEEPIDLE`, `TCP_KEEPINTVL` and
/// `TCP_KEEPCNT` give it. The engine counts whole seconds (a fraction is
/// dropped); a zero field takes the engine's default, Linux's (7200 s,
/// 75 s, 9 probes) — so [`Keepalive::default`] is Linux's keepalive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Keepalive {
    /// How long the connection is idle before the first probe.
    pub idle: Duration,
    /// The time between unanswered probes.
    pub interval: Duration,
    /// Unanswered probes before the connection is dropped.
    pub probes: u32,
}

impl Sock {
    pub(super) fn set_options(&self, o: &TcpOptions) -> io::Result<()> {
        if let Some(t) = o.tos {
            self.setopt(SockOpt::Tos, [u64::from(t), 0, 0, 0, 0])?;
        }
        if let Some(t) = o.ttl {
            self.setopt(SockOpt::Ttl, [u64::from(t), 0, 0, 0, 0])?;
        }
        if let Some(c) = o.congestion {
            self.setopt(SockOpt::Congestion, [u64::from(c.code()), 0, 0, 0, 0])?;
        }
        if let Some(p) = o.priority {
            self.set_priority(p)?;
        }
        if o.reuseport {
            self.setopt(SockOpt::ReusePort, [1, 0, 0, 0, 0])?;
        }
        Ok(())
    }

    pub(super) fn setopt(&self, opt: SockOpt, values: [u64; 5]) -> io::Result<()> {
        let r = self.call(&Request::SetOpt {
            sock: self.id,
            opt,
            values,
        })?;
        result(&r).map(drop)
    }

    /// Sets an option that the engine can refuse only for a socket it does
    /// not know (`TCP_NODELAY`, `TCP_QUICKACK`, keepalive, the user
    /// timeout), without waiting for its answer: a stream's socket is
    /// always known, and the command ring keeps order, so the next `write`
    /// already goes out under it. A web server sets such an option on
    /// every connection (nginx's `TCP_CORK`, which the shim maps to
    /// Nagle, before each response): one round trip to the engine fewer
    /// per connection.
    fn setopt_posted(&self, opt: SockOpt, values: [u64; 5]) -> io::Result<()> {
        self.c.post(&Request::SetOpt {
            sock: self.id,
            opt,
            values,
        })
    }

    /// `SO_PRIORITY`, 0..=255 (more: `EINVAL`), from the next frame on.
    pub(super) fn set_priority(&self, p: u32) -> io::Result<()> {
        self.setopt(SockOpt::Priority, [u64::from(p), 0, 0, 0, 0])?;
        self.priority.store(p, Ordering::Relaxed);
        Ok(())
    }
}

impl TcpStream {
    /// `TCP_NODELAY`.
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.s
            .setopt_posted(SockOpt::NoDelay, [u64::from(on), 0, 0, 0, 0])
    }

    /// `SO_KEEPALIVE`: on with the given timing, or off (`None`).
    pub fn set_keepalive(&self, keepalive: Option<Keepalive>) -> io::Result<()> {
        let values = keepalive.map_or([0; 5], |k| {
            [
                1,
                k.idle.as_secs(),
                k.interval.as_secs(),
                u64::from(k.probes),
                0,
            ]
        });
        self.s.setopt_posted(SockOpt::KeepAlive, values)
    }

    /// `TCP_USER_TIMEOUT` (None: off).
    pub fn set_user_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        let ms = t.map_or(0, |t| t.as_millis().max(1) as u64);
        self.s.setopt_posted(SockOpt::UserTimeout, [ms, 0, 0, 0, 0])
    }

    /// `IP_TOS`, `IP_TTL`, `TCP_CONGESTION` and `SO_PRIORITY` (those
    /// given) from the next segment on; a new algorithm keeps the
    /// connection's window.
    pub fn set_options(&self, opts: &TcpOptions) -> io::Result<()> {
        self.s.set_options(opts)
    }

    /// `SO_PRIORITY`, 0..=255 (more: `EINVAL`): every frame from the next
    /// on goes to the port with it, as Linux applies it to every later
    /// packet.
    pub fn set_priority(&self, p: u32) -> io::Result<()> {
        self.s.set_priority(p)
    }

    /// The `SO_PRIORITY` the engine sends the connection's frames with:
    /// what was set, or the listener's it was accepted from (0 from an
    /// engine without the option).
    pub fn priority(&self) -> io::Result<u32> {
        Ok(self.info()?.priority)
    }

    /// `TCP_QUICKACK`: acknowledge every segment at once (`true`), or
    /// delay acknowledgements again (`false`, the default).
    pub fn set_quickack(&self, on: bool) -> io::Result<()> {
        self.s
            .setopt_posted(SockOpt::QuickAck, [u64::from(on), 0, 0, 0, 0])
    }

    /// The congestion control algorithm the engine runs for it.
    pub fn congestion(&self) -> io::Result<Congestion> {
        let i = self.info()?;
        Congestion::of_code(i.congestion).ok_or_else(|| {
            io::Error::other(format!("unknown congestion algorithm {}", i.congestion))
        })
    }
}
