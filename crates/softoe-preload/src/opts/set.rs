//! `setsockopt` on a softoe socket: each option checked as Linux checks
//! it, recorded, and given to the engine socket where the engine honours
//! it.

use std::time::Duration;

use libc::c_int;
use softoe_host::{Congestion, errno_of};
use tracing::{debug, warn};

use super::{
    CA_NAME_MAX, IFNAMSIZ, MIN_WINDOW_CLAMP, Opts, approximated, cstr, int, ip_int, push,
    push_priority, refused, secs_to_retrans, timeval, tos_priority,
};
use crate::sock::{Kind, Sock, St, Stream, lock, shim};

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
    let stream = stream.as_deref();
    match level {
        libc::SOL_SOCKET => socket_level(s, &mut o, stream, name, v),
        libc::IPPROTO_IP => ip_level(s, &mut o, name, v),
        libc::IPPROTO_TCP => tcp_honoured(s, &mut o, stream, name, v),
        _ => Err(refused(level, name)),
    }
}

/// A `SOL_SOCKET` option.
fn socket_level(
    s: &Sock,
    o: &mut Opts,
    stream: Option<&Stream>,
    name: c_int,
    v: &[u8],
) -> Result<(), c_int> {
    match name {
        libc::SO_REUSEADDR => o.reuseaddr = int(v)? != 0,
        libc::SO_REUSEPORT => o.reuseport = int(v)? != 0,
        libc::SO_SNDBUF | libc::SO_SNDBUFFORCE => {
            o.sndbuf = int(v)?.clamp(2048, c_int::MAX / 2) * 2
        }
        libc::SO_RCVBUF | libc::SO_RCVBUFFORCE => {
            o.rcvbuf = int(v)?.clamp(1024, c_int::MAX / 2) * 2
        }
        libc::SO_RCVTIMEO => o.rcvtimeo = timeval(v)?,
        libc::SO_SNDTIMEO => o.sndtimeo = timeval(v)?,
        libc::SO_PRIORITY => {
            o.priority = int(v)?;
            push_priority(s, o)?;
        }
        libc::SO_LINGER => {
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
        libc::SO_KEEPALIVE => {
            o.keepalive = int(v)? != 0;
            if let Some(t) = stream {
                lock(&t.w)
                    .set_keepalive(o.keepalive())
                    .map_err(|e| errno_of(&e))?;
            }
        }
        libc::SO_BINDTODEVICE => {
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
        libc::SO_RCVLOWAT => {
            let n = int(v)?;
            o.ext.rcvlowat = if n < 0 { c_int::MAX } else { n.max(1) };
            approximated(libc::SOL_SOCKET, name, "a read returns what has arrived");
        }
        libc::SO_SNDLOWAT => {
            debug!("SO_SNDLOWAT cannot be changed: ENOPROTOOPT, as on Linux");
            return Err(libc::ENOPROTOOPT);
        }
        libc::SO_OOBINLINE => {
            o.ext.oobinline = int(v)? != 0;
            approximated(libc::SOL_SOCKET, name, "urgent data is always read inline");
        }
        libc::SO_BROADCAST => o.ext.broadcast = int(v)? != 0,
        libc::SO_BUSY_POLL => {
            let n = int(v)?;
            if n < 0 {
                return Err(libc::EINVAL);
            }
            o.ext.busy_poll = n;
        }
        _ => return Err(refused(libc::SOL_SOCKET, name)),
    }
    Ok(())
}

/// An `IPPROTO_IP` option.
fn ip_level(s: &Sock, o: &mut Opts, name: c_int, v: &[u8]) -> Result<(), c_int> {
    match name {
        libc::IP_TOS => {
            let mut tos = ip_int(v)? as u8;
            if s.kind == Kind::Tcp {
                // The ECN bits are TCP's own (Linux keeps them out too).
                tos &= !3;
            }
            o.ext.tos = tos;
            // As Linux: the TOS sets the priority too, and the engine's
            // port schedules by it.
            o.priority = tos_priority(tos);
            push(s, o)?;
        }
        libc::IP_TTL => {
            let n = ip_int(v)?;
            o.ext.ttl = match n {
                -1 => None,
                1..=255 => Some(n as u8),
                _ => return Err(libc::EINVAL),
            };
            push(s, o)?;
        }
        libc::IP_OPTIONS => {
            // END (0) and NOP (1) only: an empty list.
            if v.iter().any(|&b| b > 1) {
                return Err(refused(libc::IPPROTO_IP, name));
            }
        }
        libc::IP_RECVERR => o.ext.recverr = ip_int(v)? != 0,
        libc::IP_MTU_DISCOVER => {
            let n = ip_int(v)?;
            if !(0..=5).contains(&n) {
                return Err(libc::EINVAL);
            }
            o.ext.mtu_discover = n;
            approximated(
                libc::IPPROTO_IP,
                name,
                "TCP segments always carry DF, UDP never",
            );
        }
        libc::IP_FREEBIND => o.ext.freebind = ip_int(v)? != 0,
        libc::IP_BIND_ADDRESS_NO_PORT => o.ext.bind_no_port = ip_int(v)? != 0,
        _ => return Err(refused(libc::IPPROTO_IP, name)),
    }
    Ok(())
}

/// An `IPPROTO_TCP` option the engine honours (the rest are recorded
/// only: [`tcp_recorded`]).
fn tcp_honoured(
    s: &Sock,
    o: &mut Opts,
    stream: Option<&Stream>,
    name: c_int,
    v: &[u8],
) -> Result<(), c_int> {
    match name {
        libc::TCP_KEEPIDLE | libc::TCP_KEEPINTVL | libc::TCP_KEEPCNT => {
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
                && let Some(t) = stream
            {
                lock(&t.w)
                    .set_keepalive(o.keepalive())
                    .map_err(|e| errno_of(&e))?;
            }
        }
        libc::TCP_NODELAY => {
            o.nodelay = int(v)? != 0;
            if let Some(t) = stream
                && !o.cork
            {
                lock(&t.w)
                    .set_nodelay(o.nodelay)
                    .map_err(|e| errno_of(&e))?;
            }
        }
        libc::TCP_CORK => {
            // Approximated by Nagle while corked: small pieces wait for
            // the ACK of what is in flight instead of for the uncork. It
            // changes how bytes are cut into segments, never which bytes.
            o.cork = int(v)? != 0;
            if let Some(t) = stream {
                let nodelay = o.nodelay && !o.cork;
                lock(&t.w).set_nodelay(nodelay).map_err(|e| errno_of(&e))?;
            }
        }
        libc::TCP_USER_TIMEOUT => {
            let n = int(v)?;
            if n < 0 {
                return Err(libc::EINVAL);
            }
            o.user_timeout = n as u32;
            if let Some(t) = stream {
                let d = (n > 0).then(|| Duration::from_millis(n as u64));
                lock(&t.w).set_user_timeout(d).map_err(|e| errno_of(&e))?;
            }
        }
        libc::TCP_CONGESTION => {
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
            push(s, o)?;
        }
        libc::TCP_QUICKACK => {
            let on = int(v)? != 0;
            o.ext.quickack = Some(on);
            if let Some(t) = stream {
                lock(&t.w).set_quickack(on).map_err(|e| errno_of(&e))?;
            }
        }
        _ => return tcp_recorded(s, o, name, v),
    }
    Ok(())
}

/// An `IPPROTO_TCP` option recorded and reported back, the engine
/// behaving as the module's documentation says.
fn tcp_recorded(s: &Sock, o: &mut Opts, name: c_int, v: &[u8]) -> Result<(), c_int> {
    match name {
        libc::TCP_MAXSEG => {
            let n = int(v)?;
            if !(88..=32_767).contains(&n) {
                return Err(libc::EINVAL);
            }
            // Recorded; the engine's MSS follows the path's MTU.
            o.maxseg = n;
        }
        libc::TCP_DEFER_ACCEPT => {
            o.ext.defer_accept = secs_to_retrans(int(v)?);
            approximated(
                libc::IPPROTO_TCP,
                name,
                "connections are handed to accept at once",
            );
        }
        libc::TCP_FASTOPEN => {
            let n = int(v)?;
            if n < 0 || !matches!(s.state(), St::Fresh { .. } | St::Listening(_)) {
                return Err(libc::EINVAL);
            }
            o.ext.fastopen = n;
            approximated(
                libc::IPPROTO_TCP,
                name,
                "handshakes stay three-way (no data in the SYN)",
            );
        }
        libc::TCP_FASTOPEN_CONNECT => {
            let n = int(v)?;
            if !(0..=1).contains(&n) || !matches!(s.state(), St::Fresh { .. }) {
                return Err(libc::EINVAL);
            }
            o.ext.fastopen_connect = n == 1;
            approximated(
                libc::IPPROTO_TCP,
                name,
                "connect does a three-way handshake",
            );
        }
        libc::TCP_WINDOW_CLAMP => {
            let n = int(v)?;
            if n == 0 && !matches!(s.state(), St::Fresh { .. }) {
                return Err(libc::EINVAL);
            }
            o.ext.window_clamp = if n == 0 { 0 } else { n.max(MIN_WINDOW_CLAMP) };
            approximated(
                libc::IPPROTO_TCP,
                name,
                "the window follows the receive ring",
            );
        }
        libc::TCP_NOTSENT_LOWAT => {
            o.ext.notsent_lowat = int(v)?;
            approximated(
                libc::IPPROTO_TCP,
                name,
                "writability follows the send ring's room",
            );
        }
        _ => return Err(refused(libc::IPPROTO_TCP, name)),
    }
    Ok(())
}
