# setsockopt/getsockopt on fresh sockets, one line per case: run on Linux
# and on softoe, the answers must match (crates/softoe-preload/tests/options.rs).
import errno
import socket as S

TCP, IP, SOL = S.IPPROTO_TCP, S.IPPROTO_IP, S.SOL_SOCKET
STREAM, DGRAM = S.SOCK_STREAM, S.SOCK_DGRAM
# Linux's numbers, where Python has no name for them.
IP_MTU_DISCOVER, IP_RECVERR, IP_FREEBIND, IP_BIND_ADDRESS_NO_PORT = 10, 11, 15, 24
IP_PKTINFO = 8
TCP_CONGESTION, TCP_FASTOPEN, TCP_NOTSENT_LOWAT, TCP_FASTOPEN_CONNECT = 13, 23, 25, 30
TCP_ULP = 31
SO_PEERCRED, SO_BINDTODEVICE, SO_TIMESTAMP, SO_MARK, SO_BUSY_POLL = 17, 25, 29, 36, 46
SO_PROTOCOL, SO_DOMAIN = 38, 39


def r(f):
    try:
        v = f()
    except OSError as e:
        return "E" + errno.errorcode.get(e.errno, str(e.errno))
    if v is None:
        return "ok"
    if isinstance(v, bytes):
        return "b" + v.hex()
    return str(v)


def get(label, lvl, name, n=None, kind=STREAM):
    s = S.socket(S.AF_INET, kind)
    print(f"{label}: " + r(lambda: s.getsockopt(lvl, name) if n is None else s.getsockopt(lvl, name, n)))
    s.close()


def setget(label, lvl, name, v, n=None, kind=STREAM, read=None):
    s = S.socket(S.AF_INET, kind)
    res = r(lambda: s.setsockopt(lvl, name, v))
    gl, gn = read or (lvl, name)
    got = r(lambda: s.getsockopt(gl, gn) if n is None else s.getsockopt(gl, gn, n))
    print(f"{label}: set {res} get {got}")
    s.close()


for label, lvl, name, n in [
    ("SO_TYPE", SOL, S.SO_TYPE, None),
    ("SO_DOMAIN", SOL, SO_DOMAIN, None),
    ("SO_PROTOCOL", SOL, SO_PROTOCOL, None),
    ("SO_ACCEPTCONN", SOL, S.SO_ACCEPTCONN, None),
    ("SO_RCVLOWAT", SOL, S.SO_RCVLOWAT, None),
    ("SO_SNDLOWAT", SOL, S.SO_SNDLOWAT, None),
    ("SO_OOBINLINE", SOL, S.SO_OOBINLINE, None),
    ("SO_BROADCAST", SOL, S.SO_BROADCAST, None),
    ("SO_BUSY_POLL", SOL, SO_BUSY_POLL, None),
    ("SO_PEERCRED", SOL, SO_PEERCRED, 12),
    ("SO_PRIORITY", SOL, S.SO_PRIORITY, None),
    ("SO_KEEPALIVE", SOL, S.SO_KEEPALIVE, None),
    ("SO_REUSEADDR", SOL, S.SO_REUSEADDR, None),
    ("SO_REUSEPORT", SOL, S.SO_REUSEPORT, None),
    ("SO_LINGER", SOL, S.SO_LINGER, 8),
    ("SO_BINDTODEVICE", SOL, SO_BINDTODEVICE, 16),
    ("SO_BINDTODEVICE short", SOL, SO_BINDTODEVICE, 8),
    ("IP_TOS", IP, S.IP_TOS, None),
    ("IP_TTL", IP, S.IP_TTL, None),
    ("IP_OPTIONS", IP, S.IP_OPTIONS, 40),
    ("IP_RECVERR", IP, IP_RECVERR, None),
    ("IP_MTU_DISCOVER", IP, IP_MTU_DISCOVER, None),
    ("IP_FREEBIND", IP, IP_FREEBIND, None),
    ("IP_BIND_ADDRESS_NO_PORT", IP, IP_BIND_ADDRESS_NO_PORT, None),
    ("TCP_NODELAY", TCP, S.TCP_NODELAY, None),
    ("TCP_QUICKACK", TCP, S.TCP_QUICKACK, None),
    ("TCP_DEFER_ACCEPT", TCP, S.TCP_DEFER_ACCEPT, None),
    ("TCP_FASTOPEN", TCP, TCP_FASTOPEN, None),
    ("TCP_FASTOPEN_CONNECT", TCP, TCP_FASTOPEN_CONNECT, None),
    ("TCP_WINDOW_CLAMP", TCP, S.TCP_WINDOW_CLAMP, None),
    ("TCP_NOTSENT_LOWAT", TCP, TCP_NOTSENT_LOWAT, None),
    ("TCP_KEEPIDLE", TCP, S.TCP_KEEPIDLE, None),
    ("TCP_KEEPINTVL", TCP, S.TCP_KEEPINTVL, None),
    ("TCP_KEEPCNT", TCP, S.TCP_KEEPCNT, None),
    ("TCP_USER_TIMEOUT", TCP, S.TCP_USER_TIMEOUT, None),
]:
    get(label, lvl, name, n)

setget("IP_TOS 0xb9", IP, S.IP_TOS, 0xB9)
setget("IP_TOS 0xb9 priority", IP, S.IP_TOS, 0xB9, read=(SOL, S.SO_PRIORITY))
setget("IP_TOS 0x48 priority", IP, S.IP_TOS, 0x48, read=(SOL, S.SO_PRIORITY))
setget("IP_TOS one byte", IP, S.IP_TOS, b"\x48")
setget("IP_TTL 0", IP, S.IP_TTL, 0)
setget("IP_TTL 256", IP, S.IP_TTL, 256)
setget("IP_TTL -1", IP, S.IP_TTL, -1)
setget("IP_TTL 17", IP, S.IP_TTL, 17)
setget("IP_OPTIONS empty", IP, S.IP_OPTIONS, b"", n=40)
setget("IP_RECVERR 1", IP, IP_RECVERR, 1)
setget("IP_MTU_DISCOVER 9", IP, IP_MTU_DISCOVER, 9)
setget("IP_MTU_DISCOVER 2", IP, IP_MTU_DISCOVER, 2)
setget("IP_FREEBIND 1", IP, IP_FREEBIND, 1)
setget("IP_BIND_ADDRESS_NO_PORT 1", IP, IP_BIND_ADDRESS_NO_PORT, 1)
setget("SO_BINDTODEVICE empty", SOL, SO_BINDTODEVICE, b"", n=16)
setget("SO_RCVLOWAT 0", SOL, S.SO_RCVLOWAT, 0)
setget("SO_RCVLOWAT 100", SOL, S.SO_RCVLOWAT, 100)
setget("SO_SNDLOWAT 5", SOL, S.SO_SNDLOWAT, 5)
setget("SO_ACCEPTCONN 1", SOL, S.SO_ACCEPTCONN, 1)
setget("SO_REUSEPORT 1", SOL, S.SO_REUSEPORT, 1)
setget("SO_REUSEPORT 7", SOL, S.SO_REUSEPORT, 7)
setget("UDP SO_REUSEPORT 1", SOL, S.SO_REUSEPORT, 1, kind=DGRAM)
setget("SO_TYPE 1", SOL, S.SO_TYPE, 1)
setget("SO_OOBINLINE 1", SOL, S.SO_OOBINLINE, 1)
setget("SO_BUSY_POLL -1", SOL, SO_BUSY_POLL, -1)
setget("SO_BUSY_POLL 50", SOL, SO_BUSY_POLL, 50)
setget("TCP_DEFER_ACCEPT 5", TCP, S.TCP_DEFER_ACCEPT, 5)
setget("TCP_DEFER_ACCEPT 1", TCP, S.TCP_DEFER_ACCEPT, 1)
setget("TCP_FASTOPEN 5", TCP, TCP_FASTOPEN, 5)
setget("TCP_FASTOPEN -1", TCP, TCP_FASTOPEN, -1)
setget("TCP_FASTOPEN_CONNECT 1", TCP, TCP_FASTOPEN_CONNECT, 1)
setget("TCP_FASTOPEN_CONNECT 2", TCP, TCP_FASTOPEN_CONNECT, 2)
setget("TCP_QUICKACK 0", TCP, S.TCP_QUICKACK, 0)
setget("TCP_WINDOW_CLAMP 10", TCP, S.TCP_WINDOW_CLAMP, 10)
setget("TCP_WINDOW_CLAMP 0", TCP, S.TCP_WINDOW_CLAMP, 0)
setget("TCP_NOTSENT_LOWAT 1000", TCP, TCP_NOTSENT_LOWAT, 1000)
setget("TCP_KEEPIDLE 0", TCP, S.TCP_KEEPIDLE, 0)
setget("TCP_KEEPIDLE 60", TCP, S.TCP_KEEPIDLE, 60)
setget("TCP_CONGESTION foo", TCP, TCP_CONGESTION, b"foo", read=(TCP, S.TCP_NODELAY))
setget("TCP_CONGESTION reno", TCP, TCP_CONGESTION, b"reno", n=16)
setget("TCP_CONGESTION reno short", TCP, TCP_CONGESTION, b"reno", n=4)
setget("UDP IP_TOS 0xb9", IP, S.IP_TOS, 0xB9, kind=DGRAM)
setget("UDP IP_TTL 5", IP, S.IP_TTL, 5, kind=DGRAM)
setget("UDP SO_BROADCAST 1", SOL, S.SO_BROADCAST, 1, kind=DGRAM)
setget("UDP TCP_NODELAY", TCP, S.TCP_NODELAY, 1, kind=DGRAM)
get("UDP TCP_CONGESTION", TCP, TCP_CONGESTION, 16, kind=DGRAM)
for kind, label in [(STREAM, "TCP"), (DGRAM, "UDP")]:
    s = S.socket(S.AF_INET, kind)
    print(f"{label} MSG_ERRQUEUE: " + r(lambda: s.recvmsg(100, 0, S.MSG_ERRQUEUE)))
    s.close()

# Where softoe answers otherwise on purpose (checked apart, not against Linux).
print("-- softoe's own")
get("TCP_CONGESTION default", TCP, TCP_CONGESTION, 16)
setget("TCP_CONGESTION bbr", TCP, TCP_CONGESTION, b"bbr", n=16)
setget("SO_BINDTODEVICE lo", SOL, SO_BINDTODEVICE, b"lo", n=16)
setget("IP_OPTIONS source route", IP, S.IP_OPTIONS, b"\x83\x07\x04\x0a\x07\x00\x02\x00", n=40)
for i in range(2):
    setget("IP_PKTINFO", IP, IP_PKTINFO, 1, kind=DGRAM)
setget("SO_TIMESTAMP", SOL, SO_TIMESTAMP, 1, kind=DGRAM)
setget("SO_MARK", SOL, SO_MARK, 7)
setget("TCP_ULP", TCP, TCP_ULP, b"tls")
