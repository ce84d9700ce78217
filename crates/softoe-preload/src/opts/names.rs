//! Options by name, for the logs: what Linux calls each, why softoe
//! refuses one, and the one line per option and process that says so.

use std::sync::Mutex;

use libc::c_int;
use tracing::{debug, info, warn};

use crate::sock::lock;

/// What Linux names an option, for logs.
pub(super) fn name_of(level: c_int, name: c_int) -> String {
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

pub(super) fn refused(level: c_int, name: c_int) -> c_int {
    let why = why_refused(level, name);
    once(
        level,
        name,
        true,
        &format!("socket option refused by softoe (ENOPROTOOPT): {why}"),
    );
    libc::ENOPROTOOPT
}

pub(super) fn approximated(level: c_int, name: c_int, how: &str) {
    once(
        level,
        name,
        false,
        &format!("socket option recorded and reported; {how}"),
    );
}
