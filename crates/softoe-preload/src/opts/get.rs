//! `getsockopt` on a softoe socket: Linux's answer, from what was
//! recorded or from the engine.

use std::time::Duration;

use libc::c_int;
use softoe_host::{Congestion, errno_of};
use tracing::warn;

use super::{CA_NAME_MAX, DEFAULT_TTL, IFNAMSIZ, Opts, cstr, refused, retrans_to_secs};
use crate::sock::{Kind, Sock, St, lock, shim};

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
                ti.tcpi_options = r.options as u8;
                ti.tcpi_snd_rcv_wscale = r.wscale as u8;
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
