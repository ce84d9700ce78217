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

use std::sync::Mutex;
use std::time::Duration;

use libc::c_int;
use softoe_host::{Congestion, TcpOptions, TcpStream, UdpSocket};
use tracing::{debug, info, warn};

use crate::sock::{Kind, Opts, Sock, St, errno_of, lock, shim};

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

/// What Linux names an option, for logs.
fn name_of(level: c_int, name: c_int) -> String {
    let n = match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => "SO_REUSEADDR",
        (libc::SOL_SOCKET, libc::SO_REUSEPORT) => "SO_REUSEPORT",
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => "SO_KEEPALIVE",
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => "SO_SNDBUF",
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => "SO_RCVBUF",
        (libc::SOL_SOCKET, libc::SO_SNDBUFFORCE) => "SO_SNDBUFFORCE",
        (libc::SOL_SOCKET, libc::SO_RCVBUFFORCE) => "SO_RCVBUFFORCE",
        (libc::SOL_SOCKET, libc::SO_RCVTIMEO) => "SO_RCVTIMEO",
        (libc::SOL_SOCKET, libc::SO_SNDTIMEO) => "SO_SNDTIMEO",
        (libc::SOL_SOCKET, libc::SO_LINGER) => "SO_LINGER",
        (libc::SOL_SOCKET, libc::SO_PRIORITY) => "SO_PRIORITY",
        (libc::SOL_SOCKET, libc::SO_BINDTODEVICE) => "SO_BINDTODEVICE",
        (libc::SOL_SOCKET, libc::SO_RCVLOWAT) => "SO_RCVLOWAT",
        (libc::SOL_SOCKET, libc::SO_OOBINLINE) => "SO_OOBINLINE",
        (libc::SOL_SOCKET, libc::SO_BROADCAST) => "SO_BROADCAST",
        (libc::SOL_SOCKET, libc::SO_BUSY_POLL) => "SO_BUSY_POLL",
        (libc::IPPROTO_IP, libc::IP_TOS) => "IP_TOS",
        (libc::IPPROTO_IP, libc::IP_TTL) => "IP_TTL",
        (libc::IPPROTO_IP, libc::IP_OPTIONS) => "IP_OPTIONS",
        (libc::IPPROTO_IP, libc::IP_RECVERR) => "IP_RECVERR",
        (libc::IPPROTO_IP, libc::IP_MTU_DISCOVER) => "IP_MTU_DISCOVER",
        (libc::IPPROTO_IP, libc::IP_FREEBIND) => "IP_FREEBIND",
        (libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT) => "IP_BIND_ADDRESS_NO_PORT",
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => "TCP_NODELAY",
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => "TCP_MAXSEG",
        (libc::IPPROTO_TCP, libc::TCP_CORK) => "TCP_CORK",
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => "TCP_KEEPIDLE",
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL) => "TCP_KEEPINTVL",
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT) => "TCP_KEEPCNT",
        (libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT) => "TCP_USER_TIMEOUT",
        (libc::IPPROTO_TCP, libc::TCP_INFO) => "TCP_INFO",
        (libc::IPPROTO_TCP, libc::TCP_CONGESTION) => "TCP_CONGESTION",
        (libc::IPPROTO_TCP, libc::TCP_QUICKACK) => "TCP_QUICKACK",
        (libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT) => "TCP_DEFER_ACCEPT",
        (libc::IPPROTO_TCP, libc::TCP_FASTOPEN) => "TCP_FASTOPEN",
        (libc::IPPROTO_TCP, libc::TCP_FASTOPEN_CONNECT) => "TCP_FASTOPEN_CONNECT",
        (libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP) => "TCP_WINDOW_CLAMP",
        (libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT) => "TCP_NOTSENT_LOWAT",
        (libc::SOL_SOCKET, libc::SO_DEBUG) => "SO_DEBUG",
        (libc::SOL_SOCKET, libc::SO_DONTROUTE) => "SO_DONTROUTE",
        (libc::SOL_SOCKET, libc::SO_PASSCRED) => "SO_PASSCRED",
        (libc::SOL_SOCKET, libc::SO_PEERSEC) => "SO_PEERSEC",
        (libc::SOL_SOCKET, libc::SO_SNDLOWAT) => "SO_SNDLOWAT",
        (libc::SOL_SOCKET, libc::SO_ACCEPTCONN) => "SO_ACCEPTCONN",
        (libc::SOL_SOCKET, libc::SO_TYPE) => "SO_TYPE",
        (libc::SOL_SOCKET, libc::SO_DOMAIN) => "SO_DOMAIN",
        (libc::SOL_SOCKET, libc::SO_PROTOCOL) => "SO_PROTOCOL",
        (libc::SOL_SOCKET, libc::SO_ERROR) => "SO_ERROR",
        (libc::SOL_SOCKET, libc::SO_PEERCRED) => "SO_PEERCRED",
        (libc::SOL_SOCKET, libc::SO_MARK) => "SO_MARK",
        (libc::SOL_SOCKET, libc::SO_TIMESTAMP) => "SO_TIMESTAMP",
        (libc::SOL_SOCKET, libc::SO_TIMESTAMPNS) => "SO_TIMESTAMPNS",
        (libc::SOL_SOCKET, libc::SO_TIMESTAMPING) => "SO_TIMESTAMPING",
        (libc::SOL_SOCKET, libc::SO_ZEROCOPY) => "SO_ZEROCOPY",
        (libc::SOL_SOCKET, libc::SO_ATTACH_FILTER) => "SO_ATTACH_FILTER",
        (libc::SOL_SOCKET, libc::SO_DETACH_FILTER) => "SO_DETACH_FILTER",
        (libc::SOL_SOCKET, libc::SO_ATTACH_BPF) => "SO_ATTACH_BPF",
        (libc::SOL_SOCKET, libc::SO_ATTACH_REUSEPORT_CBPF) => "SO_ATTACH_REUSEPORT_CBPF",
        (libc::SOL_SOCKET, libc::SO_ATTACH_REUSEPORT_EBPF) => "SO_ATTACH_REUSEPORT_EBPF",
        (libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE) => "SO_MAX_PACING_RATE",
        (libc::SOL_SOCKET, libc::SO_INCOMING_CPU) => "SO_INCOMING_CPU",
        (libc::SOL_SOCKET, libc::SO_TXTIME) => "SO_TXTIME",
        (libc::SOL_SOCKET, libc::SO_RXQ_OVFL) => "SO_RXQ_OVFL",
        (libc::SOL_SOCKET, libc::SO_COOKIE) => "SO_COOKIE",
        (libc::IPPROTO_IP, libc::IP_HDRINCL) => "IP_HDRINCL",
        (libc::IPPROTO_IP, libc::IP_RECVOPTS) => "IP_RECVOPTS",
        (libc::IPPROTO_IP, libc::IP_RETOPTS) => "IP_RETOPTS",
        (libc::IPPROTO_IP, libc::IP_PKTINFO) => "IP_PKTINFO",
        (libc::IPPROTO_IP, libc::IP_RECVTTL) => "IP_RECVTTL",
        (libc::IPPROTO_IP, libc::IP_RECVTOS) => "IP_RECVTOS",
        (libc::IPPROTO_IP, libc::IP_MTU) => "IP_MTU",
        (libc::IPPROTO_IP, libc::IP_TRANSPARENT) => "IP_TRANSPARENT",
        (libc::IPPROTO_IP, libc::IP_RECVORIGDSTADDR) => "IP_RECVORIGDSTADDR",
        (libc::IPPROTO_IP, libc::IP_MULTICAST_IF) => "IP_MULTICAST_IF",
        (libc::IPPROTO_IP, libc::IP_MULTICAST_TTL) => "IP_MULTICAST_TTL",
        (libc::IPPROTO_IP, libc::IP_MULTICAST_LOOP) => "IP_MULTICAST_LOOP",
        (libc::IPPROTO_IP, libc::IP_ADD_MEMBERSHIP) => "IP_ADD_MEMBERSHIP",
        (libc::IPPROTO_IP, libc::IP_DROP_MEMBERSHIP) => "IP_DROP_MEMBERSHIP",
        (libc::IPPROTO_TCP, libc::TCP_SYNCNT) => "TCP_SYNCNT",
        (libc::IPPROTO_TCP, libc::TCP_LINGER2) => "TCP_LINGER2",
        (libc::IPPROTO_TCP, libc::TCP_MD5SIG) => "TCP_MD5SIG",
        (libc::IPPROTO_TCP, libc::TCP_ULP) => "TCP_ULP",
        (libc::IPPROTO_TCP, libc::TCP_REPAIR) => "TCP_REPAIR",
        (libc::IPPROTO_TCP, libc::TCP_SAVE_SYN) => "TCP_SAVE_SYN",
        (libc::IPPROTO_TCP, libc::TCP_SAVED_SYN) => "TCP_SAVED_SYN",
        (libc::IPPROTO_TCP, libc::TCP_THIN_LINEAR_TIMEOUTS) => "TCP_THIN_LINEAR_TIMEOUTS",
        (libc::IPPROTO_TCP, libc::TCP_TIMESTAMP) => "TCP_TIMESTAMP",
        (libc::IPPROTO_TCP, libc::TCP_INQ) => "TCP_INQ",
        (libc::IPPROTO_TCP, libc::TCP_ZEROCOPY_RECEIVE) => "TCP_ZEROCOPY_RECEIVE",
        (libc::IPPROTO_IPV6, _) => return format!("IPPROTO_IPV6 option {name}"),
        _ => {
            let lvl = match level {
                libc::SOL_SOCKET => "SOL_SOCKET",
                libc::IPPROTO_IP => "IPPROTO_IP",
                libc::IPPROTO_TCP => "IPPROTO_TCP",
                libc::IPPROTO_UDP => "IPPROTO_UDP",
                _ => return format!("level {level} option {name}"),
            };
            return format!("{lvl} option {name}");
        }
    };
    n.to_string()
}

/// Why softoe refuses an option.
fn why_refused(level: c_int, name: c_int) -> &'static str {
    match (level, name) {
        (libc::IPPROTO_IP, libc::IP_PKTINFO | libc::IP_RECVTTL | libc::IP_RECVTOS)
        | (libc::IPPROTO_IP, libc::IP_RECVOPTS | libc::IP_RETOPTS | libc::IP_RECVORIGDSTADDR)
        | (
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMP | libc::SO_TIMESTAMPNS | libc::SO_TIMESTAMPING | libc::SO_RXQ_OVFL,
        ) => "softoe's recvmsg returns no control messages",
        (libc::SOL_SOCKET, libc::SO_MARK) => {
            "a mark steers the kernel's routing and filtering, which softoe's packets never pass"
        }
        (libc::IPPROTO_IP, libc::IP_TRANSPARENT) => "transparent proxying needs the kernel's stack",
        (
            libc::IPPROTO_IP,
            libc::IP_MULTICAST_IF
            | libc::IP_MULTICAST_TTL
            | libc::IP_MULTICAST_LOOP
            | libc::IP_ADD_MEMBERSHIP
            | libc::IP_DROP_MEMBERSHIP,
        ) => "softoe has no multicast",
        (
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER
            | libc::SO_DETACH_FILTER
            | libc::SO_ATTACH_BPF
            | libc::SO_ATTACH_REUSEPORT_CBPF
            | libc::SO_ATTACH_REUSEPORT_EBPF,
        ) => "socket filters run in the kernel's stack",
        (libc::SOL_SOCKET, libc::SO_ZEROCOPY) => {
            "MSG_ZEROCOPY completions come on an error queue, which softoe sockets do not have"
        }
        (libc::IPPROTO_TCP, libc::TCP_ULP) => {
            "kernel TLS needs the kernel's TCP (TLS libraries fall back to their own)"
        }
        (libc::IPPROTO_TCP, libc::TCP_MD5SIG) => "TCP MD5 signatures are not implemented",
        (libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE) => "softoe does not pace",
        (
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN | libc::SO_TYPE | libc::SO_DOMAIN | libc::SO_PROTOCOL,
        )
        | (libc::SOL_SOCKET, libc::SO_ERROR | libc::SO_PEERCRED) => "read-only (on Linux too)",
        (libc::IPPROTO_IP, libc::IP_OPTIONS) => {
            "softoe sends no IP options (only an empty list is accepted)"
        }
        _ => "not implemented by softoe",
    }
}

/// Logs `msg` about an option once per process, at `warn` or `info`.
fn once(level: c_int, name: c_int, warning: bool, msg: &str) {
    static SAID: Mutex<Vec<(c_int, c_int)>> = Mutex::new(Vec::new());
    let first = {
        let mut said = lock(&SAID);
        let first = !said.contains(&(level, name));
        if first {
            said.push((level, name));
        }
        first
    };
    let option = name_of(level, name);
    match (first, warning) {
        (true, true) => warn!(option, "{msg}"),
        (true, false) => info!(option, "{msg}"),
        _ => debug!(option, "{msg}"),
    }
}

fn refused(level: c_int, name: c_int) -> c_int {
    let why = why_refused(level, name);
    once(
        level,
        name,
        true,
        &format!("socket option refused by softoe (ENOPROTOOPT): {why}"),
    );
    libc::ENOPROTOOPT
}

fn approximated(level: c_int, name: c_int, how: &str) {
    once(
        level,
        name,
        false,
        &format!("socket option recorded and reported; {how}"),
    );
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
    t
}

/// Applies to a new connection what is set after the handshake.
pub(crate) fn after_connect(t: &TcpStream, o: &Opts) {
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

/// `setsockopt(level, name, v)`.
pub(crate) fn set(s: &Sock, level: c_int, name: c_int, v: &[u8]) -> Result<(), c_int> {
    if level == libc::IPPROTO_TCP && s.kind == Kind::Udp {
        debug!(
            name,
            "a TCP option on a UDP socket: ENOPROTOOPT, as on Linux"
        );
        return Err(libc::ENOPROTOOPT);
    }
    let mut o = lock(&s.opts);
    let stream = match s.state() {
        St::Stream(t) => Some(t),
        _ => None,
    };
    match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => o.reuseaddr = int(v)? != 0,
        (libc::SOL_SOCKET, libc::SO_REUSEPORT) => o.reuseport = int(v)? != 0,
        (libc::SOL_SOCKET, libc::SO_SNDBUF | libc::SO_SNDBUFFORCE) => {
            o.sndbuf = int(v)?.clamp(2048, c_int::MAX / 2) * 2
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF | libc::SO_RCVBUFFORCE) => {
            o.rcvbuf = int(v)?.clamp(1024, c_int::MAX / 2) * 2
        }
        (libc::SOL_SOCKET, libc::SO_RCVTIMEO) => o.rcvtimeo = timeval(v)?,
        (libc::SOL_SOCKET, libc::SO_SNDTIMEO) => o.sndtimeo = timeval(v)?,
        (libc::SOL_SOCKET, libc::SO_PRIORITY) => {
            o.priority = int(v)?;
            push_priority(s, &o)?;
        }
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            if v.len() < size_of::<libc::linger>() {
                return Err(libc::EINVAL);
            }
            // SAFETY: `v` holds a whole linger struct; read unaligned.
            let l: libc::linger = unsafe { std::ptr::read_unaligned(v.as_ptr().cast()) };
            // (on, 0): the last close resets the connection (see
            // `Sock::drop`). (on, n > 0): Linux blocks close until the data
            // is acknowledged or n seconds pass; softoe's close returns at
            // once and the engine still delivers the data in the background.
            o.linger = (l.l_onoff != 0, l.l_linger.max(0));
        }
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => {
            o.keepalive = int(v)? != 0;
            if let Some(t) = &stream {
                lock(&t.w)
                    .set_keepalive(
                        o.keepalive,
                        u64::from(o.keepidle),
                        u64::from(o.keepintvl),
                        u64::from(o.keepcnt),
                    )
                    .map_err(|e| errno_of(&e))?;
            }
        }
        (libc::SOL_SOCKET, libc::SO_BINDTODEVICE) => {
            let want = cstr(v, IFNAMSIZ - 1);
            if !want.is_empty() {
                let ours = shim().client().and_then(|c| c.device());
                if ours.as_deref().map(str::as_bytes) != Some(want) {
                    warn!(
                        device = %String::from_utf8_lossy(want),
                        softoe = ours.as_deref().unwrap_or("(not told)"),
                        "SO_BINDTODEVICE: not the interface softoe's sockets are on (ENODEV)"
                    );
                    return Err(libc::ENODEV);
                }
            }
            o.ext.device = [0; IFNAMSIZ];
            o.ext.device[..want.len()].copy_from_slice(want);
        }
        (libc::SOL_SOCKET, libc::SO_RCVLOWAT) => {
            let n = int(v)?;
            o.ext.rcvlowat = if n < 0 { c_int::MAX } else { n.max(1) };
            approximated(level, name, "a read returns what has arrived");
        }
        (libc::SOL_SOCKET, libc::SO_SNDLOWAT) => {
            debug!("SO_SNDLOWAT cannot be changed: ENOPROTOOPT, as on Linux");
            return Err(libc::ENOPROTOOPT);
        }
        (libc::SOL_SOCKET, libc::SO_OOBINLINE) => {
            o.ext.oobinline = int(v)? != 0;
            approximated(level, name, "urgent data is always read inline");
        }
        (libc::SOL_SOCKET, libc::SO_BROADCAST) => o.ext.broadcast = int(v)? != 0,
        (libc::SOL_SOCKET, libc::SO_BUSY_POLL) => {
            let n = int(v)?;
            if n < 0 {
                return Err(libc::EINVAL);
            }
            o.ext.busy_poll = n;
        }
        (libc::IPPROTO_IP, libc::IP_TOS) => {
            let mut tos = ip_int(v)? as u8;
            if s.kind == Kind::Tcp {
                // The ECN bits are TCP's own (Linux keeps them out too).
                tos &= !3;
            }
            o.ext.tos = tos;
            // As Linux: the TOS sets the priority too, and the engine's
            // port schedules by it.
            o.priority = tos_priority(tos);
            push(s, &o)?;
        }
        (libc::IPPROTO_IP, libc::IP_TTL) => {
            let n = ip_int(v)?;
            o.ext.ttl = match n {
                -1 => None,
                1..=255 => Some(n as u8),
                _ => return Err(libc::EINVAL),
            };
            push(s, &o)?;
        }
        (libc::IPPROTO_IP, libc::IP_OPTIONS) => {
            // END (0) and NOP (1) only: an empty list.
            if v.iter().any(|&b| b > 1) {
                return Err(refused(level, name));
            }
        }
        (libc::IPPROTO_IP, libc::IP_RECVERR) => o.ext.recverr = ip_int(v)? != 0,
        (libc::IPPROTO_IP, libc::IP_MTU_DISCOVER) => {
            let n = ip_int(v)?;
            if !(0..=5).contains(&n) {
                return Err(libc::EINVAL);
            }
            o.ext.mtu_discover = n;
            approximated(level, name, "TCP segments always carry DF, UDP never");
        }
        (libc::IPPROTO_IP, libc::IP_FREEBIND) => o.ext.freebind = ip_int(v)? != 0,
        (libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT) => o.ext.bind_no_port = ip_int(v)? != 0,
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE | libc::TCP_KEEPINTVL | libc::TCP_KEEPCNT) => {
            let n = int(v)?;
            if !(1..=32_767).contains(&n) {
                return Err(libc::EINVAL);
            }
            match name {
                libc::TCP_KEEPIDLE => o.keepidle = n as u32,
                libc::TCP_KEEPINTVL => o.keepintvl = n as u32,
                _ => o.keepcnt = n as u32,
            }
            if o.keepalive
                && let Some(t) = &stream
            {
                lock(&t.w)
                    .set_keepalive(
                        true,
                        u64::from(o.keepidle),
                        u64::from(o.keepintvl),
                        u64::from(o.keepcnt),
                    )
                    .map_err(|e| errno_of(&e))?;
            }
        }
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => {
            o.nodelay = int(v)? != 0;
            if let Some(t) = &stream
                && !o.cork
            {
                lock(&t.w)
                    .set_nodelay(o.nodelay)
                    .map_err(|e| errno_of(&e))?;
            }
        }
        (libc::IPPROTO_TCP, libc::TCP_CORK) => {
            // Approximated by Nagle while corked: small pieces wait for
            // the ACK of what is in flight instead of for the uncork. It
            // changes how bytes are cut into segments, never which bytes.
            o.cork = int(v)? != 0;
            if let Some(t) = &stream {
                let nodelay = o.nodelay && !o.cork;
                lock(&t.w).set_nodelay(nodelay).map_err(|e| errno_of(&e))?;
            }
        }
        (libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT) => {
            let n = int(v)?;
            if n < 0 {
                return Err(libc::EINVAL);
            }
            o.user_timeout = n as u32;
            if let Some(t) = &stream {
                let d = (n > 0).then(|| Duration::from_millis(n as u64));
                lock(&t.w).set_user_timeout(d).map_err(|e| errno_of(&e))?;
            }
        }
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => {
            let n = int(v)?;
            if !(88..=32_767).contains(&n) {
                return Err(libc::EINVAL);
            }
            // Recorded; the engine's MSS follows the path's MTU.
            o.maxseg = n;
        }
        (libc::IPPROTO_TCP, libc::TCP_CONGESTION) => {
            let want = cstr(v, CA_NAME_MAX - 1);
            let Some(c) = std::str::from_utf8(want)
                .ok()
                .and_then(Congestion::from_name)
            else {
                let have: Vec<&str> = Congestion::ALL.iter().map(|c| c.name()).collect();
                warn!(
                    algorithm = %String::from_utf8_lossy(want),
                    softoe_has = ?have,
                    "TCP_CONGESTION: no such algorithm in softoe (ENOENT)"
                );
                return Err(libc::ENOENT);
            };
            o.ext.congestion = Some(c);
            push(s, &o)?;
        }
        (libc::IPPROTO_TCP, libc::TCP_QUICKACK) => {
            let on = int(v)? != 0;
            o.ext.quickack = Some(on);
            if let Some(t) = &stream {
                lock(&t.w).set_quickack(on).map_err(|e| errno_of(&e))?;
            }
        }
        (libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT) => {
            o.ext.defer_accept = secs_to_retrans(int(v)?);
            approximated(level, name, "connections are handed to accept at once");
        }
        (libc::IPPROTO_TCP, libc::TCP_FASTOPEN) => {
            let n = int(v)?;
            if n < 0 || !matches!(s.state(), St::Fresh { .. } | St::Listening(_)) {
                return Err(libc::EINVAL);
            }
            o.ext.fastopen = n;
            approximated(
                level,
                name,
                "handshakes stay three-way (no data in the SYN)",
            );
        }
        (libc::IPPROTO_TCP, libc::TCP_FASTOPEN_CONNECT) => {
            let n = int(v)?;
            if !(0..=1).contains(&n) || !matches!(s.state(), St::Fresh { .. }) {
                return Err(libc::EINVAL);
            }
            o.ext.fastopen_connect = n == 1;
            approximated(level, name, "connect does a three-way handshake");
        }
        (libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP) => {
            let n = int(v)?;
            if n == 0 && !matches!(s.state(), St::Fresh { .. }) {
                return Err(libc::EINVAL);
            }
            o.ext.window_clamp = if n == 0 { 0 } else { n.max(MIN_WINDOW_CLAMP) };
            approximated(level, name, "the window follows the receive ring");
        }
        (libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT) => {
            o.ext.notsent_lowat = int(v)?;
            approximated(level, name, "writability follows the send ring's room");
        }
        _ => return Err(refused(level, name)),
    }
    Ok(())
}

fn bytes_of<T: Copy>(v: &T) -> Vec<u8> {
    // SAFETY: `T` is a plain C struct or integer; its bytes are readable.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
}

/// The algorithm a socket runs: what the engine runs for its connection,
/// else the one it chose, else the engine's default.
fn congestion(s: &Sock, o: &Opts) -> Result<Congestion, c_int> {
    if let St::Stream(t) = s.state() {
        return lock(&t.w).congestion().map_err(|e| errno_of(&e));
    }
    if let Some(c) = o.ext.congestion {
        return Ok(c);
    }
    shim()
        .client()
        .and_then(|c| c.default_congestion())
        .ok_or_else(|| {
            warn!("TCP_CONGESTION: the engine did not say its default algorithm (ENOPROTOOPT)");
            libc::ENOPROTOOPT
        })
}

/// `getsockopt(level, name)` into `room` bytes: the value's bytes.
pub(crate) fn get(s: &Sock, level: c_int, name: c_int, room: usize) -> Result<Vec<u8>, c_int> {
    if level == libc::IPPROTO_TCP && s.kind == Kind::Udp {
        return Err(libc::EOPNOTSUPP);
    }
    let o = *lock(&s.opts);
    let e = o.ext;
    let st = s.state();
    let i = |v: c_int| Ok(v.to_ne_bytes().to_vec());
    let tv = |d: Option<Duration>| {
        let d = d.unwrap_or_default();
        Ok(bytes_of(&libc::timeval {
            tv_sec: d.as_secs() as libc::time_t,
            tv_usec: d.subsec_micros() as libc::suseconds_t,
        }))
    };
    match (level, name) {
        (libc::SOL_SOCKET, libc::SO_ERROR) => match st {
            St::Stream(t) => i(lock(&t.w).take_error().map_or(0, |e| errno_of(&e))),
            _ => i(0),
        },
        (libc::SOL_SOCKET, libc::SO_TYPE) => i(match s.kind {
            Kind::Tcp => libc::SOCK_STREAM,
            Kind::Udp => libc::SOCK_DGRAM,
        }),
        (libc::SOL_SOCKET, libc::SO_DOMAIN) => i(if s.v6 { libc::AF_INET6 } else { libc::AF_INET }),
        (libc::SOL_SOCKET, libc::SO_PROTOCOL) => i(match s.kind {
            Kind::Tcp => libc::IPPROTO_TCP,
            Kind::Udp => libc::IPPROTO_UDP,
        }),
        (libc::SOL_SOCKET, libc::SO_ACCEPTCONN) => i(c_int::from(matches!(st, St::Listening(_)))),
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => i(c_int::from(o.reuseaddr)),
        (libc::SOL_SOCKET, libc::SO_REUSEPORT) => i(c_int::from(o.reuseport)),
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => i(c_int::from(o.keepalive)),
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => i(o.sndbuf),
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => i(o.rcvbuf),
        (libc::SOL_SOCKET, libc::SO_PRIORITY) => i(o.priority),
        (libc::SOL_SOCKET, libc::SO_RCVTIMEO) => tv(o.rcvtimeo),
        (libc::SOL_SOCKET, libc::SO_SNDTIMEO) => tv(o.sndtimeo),
        (libc::SOL_SOCKET, libc::SO_LINGER) => Ok(bytes_of(&libc::linger {
            l_onoff: c_int::from(o.linger.0),
            l_linger: o.linger.1,
        })),
        (libc::SOL_SOCKET, libc::SO_BINDTODEVICE) => {
            // Unbound: nothing (length 0), whatever the room, as Linux
            // answers; bound: the name and its NUL, in IFNAMSIZ bytes.
            let n = cstr(&e.device, IFNAMSIZ).len();
            if n == 0 {
                Ok(Vec::new())
            } else if room < IFNAMSIZ {
                Err(libc::EINVAL)
            } else {
                Ok(e.device[..=n].to_vec())
            }
        }
        (libc::SOL_SOCKET, libc::SO_RCVLOWAT) => i(e.rcvlowat),
        (libc::SOL_SOCKET, libc::SO_SNDLOWAT) => i(1),
        (libc::SOL_SOCKET, libc::SO_OOBINLINE) => i(c_int::from(e.oobinline)),
        (libc::SOL_SOCKET, libc::SO_BROADCAST) => i(c_int::from(e.broadcast)),
        (libc::SOL_SOCKET, libc::SO_BUSY_POLL) => i(e.busy_poll),
        // A TCP or UDP socket has no peer process: Linux answers pid 0,
        // uid and gid −1.
        (libc::SOL_SOCKET, libc::SO_PEERCRED) => Ok(bytes_of(&libc::ucred {
            pid: 0,
            uid: u32::MAX,
            gid: u32::MAX,
        })),
        (libc::IPPROTO_IP, libc::IP_TOS) => i(c_int::from(e.tos)),
        (libc::IPPROTO_IP, libc::IP_TTL) => i(c_int::from(e.ttl.unwrap_or(DEFAULT_TTL))),
        // softoe keeps no IP options: an empty list.
        (libc::IPPROTO_IP, libc::IP_OPTIONS) => Ok(Vec::new()),
        (libc::IPPROTO_IP, libc::IP_RECVERR) => i(c_int::from(e.recverr)),
        (libc::IPPROTO_IP, libc::IP_MTU_DISCOVER) => i(e.mtu_discover),
        (libc::IPPROTO_IP, libc::IP_FREEBIND) => i(c_int::from(e.freebind)),
        (libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT) => i(c_int::from(e.bind_no_port)),
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => i(c_int::from(o.nodelay)),
        (libc::IPPROTO_TCP, libc::TCP_CORK) => i(c_int::from(o.cork)),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => i(o.keepidle as c_int),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL) => i(o.keepintvl as c_int),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT) => i(o.keepcnt as c_int),
        (libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT) => i(o.user_timeout as c_int),
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => match st {
            St::Stream(t) => i(lock(&t.w).info().map_or(o.maxseg, |r| r.snd_mss as c_int)),
            _ => i(o.maxseg),
        },
        (libc::IPPROTO_TCP, libc::TCP_CONGESTION) => {
            let mut b = [0u8; CA_NAME_MAX];
            let n = congestion(s, &o)?.name().as_bytes();
            b[..n.len()].copy_from_slice(n);
            Ok(b.to_vec())
        }
        (libc::IPPROTO_TCP, libc::TCP_QUICKACK) => i(c_int::from(e.quickack.unwrap_or(true))),
        (libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT) => i(retrans_to_secs(e.defer_accept)),
        (libc::IPPROTO_TCP, libc::TCP_FASTOPEN) => i(e.fastopen),
        (libc::IPPROTO_TCP, libc::TCP_FASTOPEN_CONNECT) => i(c_int::from(e.fastopen_connect)),
        (libc::IPPROTO_TCP, libc::TCP_WINDOW_CLAMP) => i(e.window_clamp),
        (libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT) => i(e.notsent_lowat),
        (libc::IPPROTO_TCP, libc::TCP_INFO) => {
            // SAFETY: tcp_info is plain data; zero is a valid value.
            let mut ti: libc::tcp_info = unsafe { std::mem::zeroed() };
            if let St::Stream(t) = st {
                let r = lock(&t.w).info().map_err(|e| errno_of(&e))?;
                ti.tcpi_state = r.state as u8;
                ti.tcpi_snd_mss = r.snd_mss;
                ti.tcpi_rcv_mss = r.snd_mss;
                ti.tcpi_rtt = r.rtt_us;
                ti.tcpi_rttvar = r.rttvar_us;
                ti.tcpi_rto = r.rto_us;
                ti.tcpi_snd_cwnd = r.snd_cwnd;
                ti.tcpi_snd_ssthresh = r.snd_ssthresh;
                ti.tcpi_total_retrans = r.total_retrans;
            } else if matches!(st, St::Listening(_)) {
                ti.tcpi_state = 10; // TCP_LISTEN
            } else {
                ti.tcpi_state = 7; // TCP_CLOSE
            }
            Ok(bytes_of(&ti))
        }
        _ => Err(refused(level, name)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
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
