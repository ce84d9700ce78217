//! `setsockopt` and `getsockopt` on softoe sockets.
//!
//! Served: `SO_REUSEADDR`, `SO_REUSEPORT`, `SO_KEEPALIVE`, `SO_SNDBUF`,
//! `SO_RCVBUF`, `SO_RCVTIMEO`, `SO_SNDTIMEO`, `SO_LINGER` (`l_linger = 0`:
//! close resets; a positive time does not block close), `SO_PRIORITY`, `SO_ERROR`, `SO_TYPE`, `SO_DOMAIN`,
//! `SO_PROTOCOL`, `SO_ACCEPTCONN`, `TCP_NODELAY`, `TCP_KEEPIDLE`,
//! `TCP_KEEPINTVL`, `TCP_KEEPCNT`, `TCP_USER_TIMEOUT`, `TCP_MAXSEG`,
//! `TCP_CORK` (approximated by Nagle while corked),
//! `TCP_INFO` (filled from the engine). Anything else fails with
//! `ENOPROTOOPT` and a warning naming it, never silently.
//!
//! The buffer sizes are recorded and reported (doubled, as Linux does) but
//! do not resize the engine's rings: those are set per process
//! (`SOFTOE_RX_KB`, `SOFTOE_TX_KB`).

use std::time::Duration;

use libc::c_int;
use tracing::warn;

use crate::sock::{Kind, Sock, St, errno_of, lock};

fn int(v: &[u8]) -> Result<c_int, c_int> {
    let b: [u8; 4] = v
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or(libc::EINVAL)?;
    Ok(c_int::from_ne_bytes(b))
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

fn unsupported(level: c_int, name: c_int) -> c_int {
    warn!(
        level,
        name, "socket option not supported by softoe: ENOPROTOOPT"
    );
    libc::ENOPROTOOPT
}

/// `setsockopt(level, name, v)`.
pub(crate) fn set(s: &Sock, level: c_int, name: c_int, v: &[u8]) -> Result<(), c_int> {
    let mut o = lock(&s.opts);
    let stream = match s.state() {
        St::Stream(t) => Some(t),
        _ => None,
    };
    match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => o.reuseaddr = int(v)? != 0,
        (libc::SOL_SOCKET, libc::SO_REUSEPORT) => o.reuseport = int(v)? != 0,
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => o.sndbuf = int(v)?.max(2048) * 2,
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => o.rcvbuf = int(v)?.max(1024) * 2,
        (libc::SOL_SOCKET, libc::SO_RCVTIMEO) => o.rcvtimeo = timeval(v)?,
        (libc::SOL_SOCKET, libc::SO_SNDTIMEO) => o.sndtimeo = timeval(v)?,
        (libc::SOL_SOCKET, libc::SO_PRIORITY) => o.priority = int(v)?,
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
        _ => return Err(unsupported(level, name)),
    }
    Ok(())
}

fn bytes_of<T: Copy>(v: &T) -> Vec<u8> {
    // SAFETY: `T` is a plain C struct or integer; its bytes are readable.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
}

/// `getsockopt(level, name)`: the value's bytes.
pub(crate) fn get(s: &Sock, level: c_int, name: c_int) -> Result<Vec<u8>, c_int> {
    let o = *lock(&s.opts);
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
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) if s.v6 => i(0),
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
        _ => Err(unsupported(level, name)),
    }
}
