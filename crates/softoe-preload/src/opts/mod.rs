//! `setsockopt` and `getsockopt` on softoe sockets, with Linux's answers.
//!
//! Each option is one of three kinds, and the README lists them:
//!
//! - **Honoured**: the engine does what Linux does. `SO_REUSEADDR`,
//!   `SO_REUSEPORT`, `SO_KEEPALIVE`, `SO_RCVTIMEO`, `SO_SNDTIMEO`,
//!   `SO_LINGER` (`l_linger = 0`: close resets; a positive time does not
//!   block close), `SO_ERROR`, `SO_TYPE`, `SO_DOMAIN`, `SO_PROTOCOL`,
//!   `SO_ACCEPTCONN`, `SO_PEERCRED` (a TCP socket has no peer process:
//!   pid 0, uid and gid −1, as Linux answers), `SO_BINDTODEVICE` (the
//!   interface of the engine's port, or none; any other name `ENODEV`),
//!   `IP_TOS` (every packet from the SYN or SYN-ACK on; a listener's passes
//!   to what it accepts; sets `SO_PRIORITY` as Linux does), `IP_TTL`,
//!   `SO_PRIORITY` (the engine hands every frame to its port with it, from
//!   the SYN or SYN-ACK on, at once when changed on a live connection; a
//!   listener's passes to what it accepts; a bonded port's `prioritized`
//!   policy sends those at or above its threshold over its real-time
//!   members. Any `int` is kept and read back as set — Linux's `EPERM` for
//!   more than 6 without `CAP_NET_ADMIN` is not applied — and the engine
//!   is given it clamped to 0..=255, a negative one as 255, as Linux's
//!   `u32` would read it),
//!   `IP_OPTIONS` (reads empty: softoe neither sends IP options nor honours
//!   received ones — a source route is never reversed; setting an empty
//!   list works, a non-empty one fails), `TCP_NODELAY`, `TCP_KEEPIDLE`,
//!   `TCP_KEEPINTVL`, `TCP_KEEPCNT`, `TCP_USER_TIMEOUT`, `TCP_CONGESTION`
//!   (the engine's algorithms, `reno` and `cubic`; another name `ENOENT`
//!   as Linux answers an unknown one; switching keeps the window),
//!   `TCP_QUICKACK` (1 acknowledges every segment at once until set to 0 —
//!   Linux's quick-ack mode ends by itself, softoe's when the program says),
//!   `TCP_INFO` (filled from the engine).
//! - **Recorded and reported, approximated**: `getsockopt` returns what
//!   Linux would, but the engine behaves as stated. `SO_SNDBUF`, `SO_RCVBUF`
//!   (and their `FORCE` forms; reported doubled; the rings are sized per
//!   process: `SOFTOE_RX_KB`, `SOFTOE_TX_KB`), `SO_RCVLOWAT`
//!   (a read returns what has arrived), `SO_SNDLOWAT` (reads 1; setting it
//!   fails with `ENOPROTOOPT`, as on Linux), `SO_OOBINLINE` (urgent data is
//!   always inline), `SO_BROADCAST`, `SO_BUSY_POLL` (the engine polls
//!   anyway), `IP_RECVERR` (softoe sockets have no error queue: `recvmsg`
//!   with `MSG_ERRQUEUE` fails with `EAGAIN`), `IP_MTU_DISCOVER` (TCP
//!   always sets DF, UDP never), `IP_FREEBIND`, `IP_BIND_ADDRESS_NO_PORT`
//!   (the port is chosen at `connect` anyway), `TCP_CORK` (Nagle while
//!   corked), `TCP_MAXSEG` (the MSS follows the path), `TCP_DEFER_ACCEPT`
//!   (reported rounded as Linux does; connections are handed to `accept`
//!   at once, as when Linux's deferral runs out), `TCP_FASTOPEN` and
//!   `TCP_FASTOPEN_CONNECT` (handshakes stay three-way, as Linux's without
//!   a cookie), `TCP_WINDOW_CLAMP`, `TCP_NOTSENT_LOWAT`. The first use of
//!   each logs one `info` line saying so.
//! - **Refused**: anything else fails with `ENOPROTOOPT` (the read-only
//!   `SO_TYPE`-like ones as on Linux) and the first use of each logs one
//!   `warn` line naming the option and why (`RUST_LOG=softoe_preload=warn`):
//!   control-message options (`IP_PKTINFO`, `IP_RECVTOS`, `SO_TIMESTAMP`…:
//!   softoe's `recvmsg` returns none), `SO_MARK`, `IP_TRANSPARENT`,
//!   multicast, socket filters, `SO_ZEROCOPY`, `TCP_ULP` (kernel TLS:
//!   OpenSSL falls back to its own), `TCP_MD5SIG`, `TCP_SYNCNT`,
//!   `TCP_LINGER2`, `SO_MAX_PACING_RATE`…
//!
//! TCP-level options on a UDP socket fail with `EOPNOTSUPP`, as on Linux.
//! `IPPROTO_IPV6` options of an `AF_INET6` socket go to its kernel socket
//! both ways (`IPV6_TCLASS` there affects no IPv4 packet, as on Linux for
//! an IPv4-mapped connection).
//!
//! Here: the options past the common ones, the value parsers and what is
//! given to the engine socket; `set.rs` and `get.rs` the two calls;
//! `names.rs` the options' names and the one log line each.

use std::time::Duration;

use libc::c_int;
use softoe_host::{Congestion, Keepalive, TcpOptions, TcpStream, UdpSocket, errno_of};
use tracing::debug;

use crate::sock::{Sock, St, lock};

mod get;
mod names;
mod set;

pub(crate) use get::get;
use names::{approximated, refused};
pub(crate) use set::set;

/// The TTL the engine's packets carry when the program sets none
/// (`softoe_stack::DEFAULT_TTL`, Linux's `ip_default_ttl`).
const DEFAULT_TTL: u8 = 64;
/// `IP_MTU_DISCOVER`'s default on Linux: `IP_PMTUDISC_WANT`.
const PMTUDISC_WANT: c_int = 1;
/// Linux's `TCP_CA_NAME_MAX`.
const CA_NAME_MAX: usize = 16;
/// Linux's `IFNAMSIZ`.
const IFNAMSIZ: usize = 16;
/// Linux's `SOCK_MIN_RCVBUF / 2` on x86-64: the smallest window clamp.
const MIN_WINDOW_CLAMP: c_int = 1152;

/// Options as the program set them; applied when the engine socket
/// exists, reported back by `getsockopt`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Opts {
    pub nodelay: bool,
    pub cork: bool,
    pub keepalive: bool,
    pub keepidle: u32,
    pub keepintvl: u32,
    pub keepcnt: u32,
    pub user_timeout: u32,
    pub sndbuf: c_int,
    pub rcvbuf: c_int,
    pub rcvtimeo: Option<Duration>,
    pub sndtimeo: Option<Duration>,
    /// `SO_LINGER`: (on, seconds).
    pub linger: (bool, c_int),
    pub priority: c_int,
    pub reuseaddr: bool,
    pub reuseport: bool,
    pub maxseg: c_int,
    /// The rest (`IP_TOS`, `TCP_CONGESTION`…): see `opts/`.
    pub ext: Ext,
}

impl Opts {
    /// The keepalive timing the program set (`TCP_KEEPIDLE`,
    /// `TCP_KEEPINTVL`, `TCP_KEEPCNT`), for the engine.
    fn keepalive_timing(&self) -> Keepalive {
        Keepalive {
            idle: Duration::from_secs(u64::from(self.keepidle)),
            interval: Duration::from_secs(u64::from(self.keepintvl)),
            probes: self.keepcnt,
        }
    }

    /// `SO_KEEPALIVE` as the engine takes it: the timing when on.
    fn keepalive(&self) -> Option<Keepalive> {
        self.keepalive.then(|| self.keepalive_timing())
    }
}

impl Default for Opts {
    fn default() -> Opts {
        // Linux's defaults.
        Opts {
            nodelay: false,
            cork: false,
            keepalive: false,
            keepidle: 7200,
            keepintvl: 75,
            keepcnt: 9,
            user_timeout: 0,
            sndbuf: 16_384,
            rcvbuf: 131_072,
            rcvtimeo: None,
            sndtimeo: None,
            linger: (false, 0),
            priority: 0,
            reuseaddr: false,
            reuseport: false,
            maxseg: 1460,
            ext: Ext::default(),
        }
    }
}

/// The options past the common ones, as the program set them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ext {
    /// `IP_TOS` (a TCP socket's ECN bits cleared).
    pub tos: u8,
    /// `IP_TTL` (`None`: the default).
    pub ttl: Option<u8>,
    pub congestion: Option<Congestion>,
    pub quickack: Option<bool>,
    /// `SO_BINDTODEVICE`: the name, NUL-padded (all zero: none).
    pub device: [u8; IFNAMSIZ],
    pub recverr: bool,
    pub mtu_discover: c_int,
    pub freebind: bool,
    pub bind_no_port: bool,
    /// `TCP_DEFER_ACCEPT` as Linux keeps it: SYN-ACK retransmissions.
    pub defer_accept: u8,
    pub fastopen: c_int,
    pub fastopen_connect: bool,
    pub window_clamp: c_int,
    pub notsent_lowat: c_int,
    pub rcvlowat: c_int,
    pub oobinline: bool,
    pub broadcast: bool,
    pub busy_poll: c_int,
}

impl Default for Ext {
    fn default() -> Ext {
        Ext {
            tos: 0,
            ttl: None,
            congestion: None,
            quickack: None,
            device: [0; IFNAMSIZ],
            recverr: false,
            mtu_discover: PMTUDISC_WANT,
            freebind: false,
            bind_no_port: false,
            defer_accept: 0,
            fastopen: 0,
            fastopen_connect: false,
            window_clamp: 0,
            notsent_lowat: 0,
            rcvlowat: 1,
            oobinline: false,
            broadcast: false,
            busy_poll: 0,
        }
    }
}

fn int(v: &[u8]) -> Result<c_int, c_int> {
    let b: [u8; 4] = v
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or(libc::EINVAL)?;
    Ok(c_int::from_ne_bytes(b))
}

/// An `IPPROTO_IP` option's value: an int, or (Linux accepts it) one byte.
fn ip_int(v: &[u8]) -> Result<c_int, c_int> {
    match v.len() {
        0 => Err(libc::EINVAL),
        1..=3 => Ok(c_int::from(v[0])),
        _ => int(v),
    }
}

fn timeval(v: &[u8]) -> Result<Option<Duration>, c_int> {
    if v.len() < size_of::<libc::timeval>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: `v` holds a whole timeval; read unaligned.
    let tv: libc::timeval = unsafe { std::ptr::read_unaligned(v.as_ptr().cast()) };
    if tv.tv_sec < 0 || !(0..1_000_000).contains(&tv.tv_usec) {
        return Err(libc::EDOM);
    }
    let d = Duration::from_secs(tv.tv_sec as u64) + Duration::from_micros(tv.tv_usec as u64);
    Ok((!d.is_zero()).then_some(d))
}

/// A C string option (`TCP_CONGESTION`, `SO_BINDTODEVICE`): up to the
/// first NUL, at most `max` bytes.
fn cstr(v: &[u8], max: usize) -> &[u8] {
    let v = &v[..v.len().min(max)];
    let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
    &v[..end]
}

/// The `SO_PRIORITY` the engine is given for what the program set: the
/// engine takes 0..=255 ([`softoe_abi::MAX_PRIORITY`]); Linux keeps a
/// `u32`, so a negative `int` is a large priority and clamps to the top.
fn engine_priority(p: c_int) -> u32 {
    (p as u32).min(softoe_abi::MAX_PRIORITY)
}

/// Linux's `rt_tos2priority`: the `SO_PRIORITY` an `IP_TOS` implies.
fn tos_priority(tos: u8) -> c_int {
    const MAP: [c_int; 16] = [0, 0, 0, 0, 2, 2, 2, 2, 6, 6, 6, 6, 4, 4, 4, 4];
    MAP[usize::from((tos & 0x1e) >> 1)]
}

/// Linux's `secs_to_retrans` for `TCP_DEFER_ACCEPT` (1 s initial timeout,
/// 120 s at most).
fn secs_to_retrans(secs: c_int) -> u8 {
    if secs <= 0 {
        return 0;
    }
    let (mut timeout, mut period, mut res) = (1, 1, 1u8);
    while secs > period && res < 255 {
        res += 1;
        timeout = (timeout * 2).min(120);
        period += timeout;
    }
    res
}

/// Linux's `retrans_to_secs`: what `getsockopt(TCP_DEFER_ACCEPT)` reads.
fn retrans_to_secs(retrans: u8) -> c_int {
    if retrans == 0 {
        return 0;
    }
    let (mut timeout, mut period) = (1, 1);
    for _ in 1..retrans {
        timeout = (timeout * 2).min(120);
        period += timeout;
    }
    period
}

/// The options a TCP socket takes before its engine socket connects or
/// listens (those that differ from the engine's defaults).
pub(crate) fn tcp_options(o: &Opts) -> TcpOptions {
    let mut t = TcpOptions::default();
    t.tos = (o.ext.tos != 0).then_some(o.ext.tos);
    t.ttl = o.ext.ttl;
    t.congestion = o.ext.congestion;
    t.priority = (o.priority != 0).then(|| engine_priority(o.priority));
    // `SO_REUSEPORT` as it stands at `bind` and `listen`: both ask with it.
    t.reuseport = o.reuseport;
    t
}

/// Applies the options the program set to a new engine connection (one
/// it connected, or one its listener accepted).
pub(crate) fn apply(t: &TcpStream, o: &Opts) {
    if o.nodelay && !o.cork {
        let _ = t.set_nodelay(true);
    }
    if o.keepalive {
        let _ = t.set_keepalive(Some(o.keepalive_timing()));
    }
    if o.user_timeout > 0 {
        let _ = t.set_user_timeout(Some(Duration::from_millis(u64::from(o.user_timeout))));
    }
    if let Some(q) = o.ext.quickack
        && let Err(e) = t.set_quickack(q)
    {
        debug!(error = %e, "TCP_QUICKACK not applied");
    }
}

/// Applies to a new UDP socket what the program set before it existed.
pub(crate) fn after_udp(u: &UdpSocket, o: &Opts) {
    if (o.ext.tos != 0 || o.ext.ttl.is_some())
        && let Err(e) = u.set_ip(Some(o.ext.tos), o.ext.ttl)
    {
        debug!(error = %e, "IP_TOS/IP_TTL not applied");
    }
    if o.priority != 0
        && let Err(e) = u.set_priority(engine_priority(o.priority))
    {
        debug!(error = %e, "SO_PRIORITY not applied");
    }
}

/// Pushes TOS, TTL, priority and algorithm to the engine socket, if one
/// exists (one made later takes them from the recorded options).
fn push(s: &Sock, o: &Opts) -> Result<(), c_int> {
    let mut t = TcpOptions::default();
    t.tos = Some(o.ext.tos);
    t.ttl = Some(o.ext.ttl.unwrap_or(0));
    t.congestion = o.ext.congestion;
    t.priority = Some(engine_priority(o.priority));
    let r = match s.state() {
        St::Stream(st) => lock(&st.w).set_options(&t),
        St::Listening(l) => lock(&l.l).set_options(&t),
        St::Udp(u) => {
            let u = lock(&u.s);
            u.set_ip(t.tos, t.ttl)
                .and_then(|()| u.set_priority(engine_priority(o.priority)))
        }
        _ => Ok(()),
    };
    r.map_err(|e| errno_of(&e))
}

/// Pushes `SO_PRIORITY` alone to the engine socket, if one exists.
fn push_priority(s: &Sock, o: &Opts) -> Result<(), c_int> {
    let p = engine_priority(o.priority);
    let r = match s.state() {
        St::Stream(st) => lock(&st.w).set_priority(p),
        St::Listening(l) => lock(&l.l).set_priority(p),
        St::Udp(u) => lock(&u.s).set_priority(p),
        _ => Ok(()),
    };
    r.map_err(|e| errno_of(&e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::names::name_of;
    use super::*;

    /// A kernel TCP socket, to ask Linux itself.
    struct Kernel(c_int);

    impl Kernel {
        fn new() -> Kernel {
            // SAFETY: plain call.
            let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
            assert!(fd >= 0);
            Kernel(fd)
        }
        fn set(&self, level: c_int, name: c_int, v: c_int) {
            // SAFETY: an int option of 4 bytes.
            let r = unsafe { libc::setsockopt(self.0, level, name, (&raw const v).cast(), 4) };
            assert_eq!(r, 0, "setsockopt {level}/{name} = {v}");
        }
        fn get(&self, level: c_int, name: c_int) -> c_int {
            let mut v: c_int = 0;
            let mut len = 4 as libc::socklen_t;
            // SAFETY: room for an int.
            let r =
                unsafe { libc::getsockopt(self.0, level, name, (&raw mut v).cast(), &raw mut len) };
            assert_eq!(r, 0);
            v
        }
    }

    impl Drop for Kernel {
        fn drop(&mut self) {
            // SAFETY: our descriptor.
            unsafe { libc::close(self.0) };
        }
    }

    /// The engine is given `SO_PRIORITY` as Linux's `u32` would hold it,
    /// within the byte the port compares.
    #[test]
    fn the_engine_gets_the_priority_clamped_to_a_byte() {
        for (set, sent) in [
            (0, 0),
            (6, 6),
            (255, 255),
            (256, 255),
            (c_int::MAX, 255),
            (-1, 255),
        ] {
            assert_eq!(engine_priority(set), sent, "{set}");
        }
    }

    /// `IP_TOS` sets `SO_PRIORITY` as Linux's does, for every TOS byte.
    #[test]
    fn tos_implies_the_priority_linux_gives_it() {
        let k = Kernel::new();
        for tos in 0..=255u8 {
            k.set(libc::IPPROTO_IP, libc::IP_TOS, c_int::from(tos));
            assert_eq!(
                tos_priority(tos & !3),
                k.get(libc::SOL_SOCKET, libc::SO_PRIORITY),
                "TOS {tos:#x}"
            );
        }
    }

    /// `TCP_DEFER_ACCEPT` reads back rounded as Linux rounds it.
    #[test]
    fn defer_accept_rounds_as_linux() {
        for secs in [
            -3, 0, 1, 2, 3, 4, 5, 7, 8, 30, 63, 64, 100, 200, 1000, 100_000,
        ] {
            let k = Kernel::new();
            k.set(libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT, secs);
            assert_eq!(
                retrans_to_secs(secs_to_retrans(secs)),
                k.get(libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT),
                "{secs} s"
            );
        }
    }

    /// The defaults reported are Linux's.
    #[test]
    fn defaults_are_linuxs() {
        let k = Kernel::new();
        let e = Ext::default();
        assert_eq!(
            e.mtu_discover,
            k.get(libc::IPPROTO_IP, libc::IP_MTU_DISCOVER)
        );
        assert_eq!(e.rcvlowat, k.get(libc::SOL_SOCKET, libc::SO_RCVLOWAT));
        assert_eq!(
            c_int::from(DEFAULT_TTL),
            k.get(libc::IPPROTO_IP, libc::IP_TTL)
        );
        k.set(libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP, 10);
        assert_eq!(
            MIN_WINDOW_CLAMP,
            k.get(libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP)
        );
    }

    #[test]
    fn option_strings_stop_at_nul_and_length() {
        assert_eq!(cstr(b"reno\0junk", 15), b"reno");
        assert_eq!(cstr(b"cubic", 15), b"cubic");
        assert_eq!(cstr(b"0123456789abcdefgh", 15), b"0123456789abcde");
        assert_eq!(cstr(b"", 15), b"");
        assert_eq!(name_of(libc::IPPROTO_IP, libc::IP_PKTINFO), "IP_PKTINFO");
        assert_eq!(name_of(libc::SOL_SOCKET, 999), "SOL_SOCKET option 999");
    }
}
