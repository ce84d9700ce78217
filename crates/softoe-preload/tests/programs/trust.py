# What a user may bind (crates/softoe-preload/tests/trust.rs): the same lines
# on Linux's TCP and on softoe.
#
#   trust.py ports ADDR [drop]      bind TCP and UDP sockets to ports 80, 1023,
#                                   1024 of ADDR (as user 65534 first with "drop",
#                                   dropped in-process after the shim attached as
#                                   root, as servers drop privileges) and print
#                                   "tcp 80 bound" or "tcp 80 EACCES" for each
#   trust.py hold ADDR PORT OPTS    listen on ADDR:PORT with OPTS ("-", "addr",
#                                   "port" or "addr+port": SO_REUSEADDR,
#                                   SO_REUSEPORT), print "listening", wait for
#                                   stdin's end
#   trust.py join ADDR PORT OPTS [drop]
#                                   bind and listen so (as user 65534 first with
#                                   "drop"): prints "listening" or where it failed
#                                   and with what errno
#
# The privilege-separation chain (softoe only; inetd's and sshd's pattern):
#   trust.py chain ADDR PORT DIR    as root: accept two connections from
#                                   `client`, hand the first to a child that
#                                   drops to user 65534 and execs `child` with
#                                   it as descriptor 0, wait for the child, then
#                                   read the second and answer "secret-ok"
#   trust.py child - DIR            the exec'd program: read its connection,
#                                   print the softoe records its environment
#                                   carries, write its pid to DIR/child.pid,
#                                   wait for DIR/stranger.done, answer
#                                   "given-ok"
#   trust.py client ADDR PORT       on Linux: connect twice, send "to-given"
#                                   and "to-secret", print the answers
#   trust.py probe - FD…            an unrelated process of user 65534 whose
#                                   environment was forged from the child's:
#                                   print "reached N", the descriptors through
#                                   which it got a connection (data or an IPv4
#                                   peer)
import errno
import os
import socket
import sys
import time

PY = "/usr/bin/python3"


def drop():
    # The shim attaches at the first socket call: make one as root first.
    socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


def name(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def opts(s, how):
    if "addr" in how:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if "port" in how:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)


def main():
    mode, addr = sys.argv[1], sys.argv[2]
    if mode == "ports":
        if sys.argv[3:4] == ["drop"]:
            drop()
        for kind, ty in (("tcp", socket.SOCK_STREAM), ("udp", socket.SOCK_DGRAM)):
            for port in (80, 1023, 1024):
                s = socket.socket(socket.AF_INET, ty)
                try:
                    s.bind((addr, port))
                    print(f"{kind} {port} bound", flush=True)
                except OSError as e:
                    print(f"{kind} {port} {name(e)}", flush=True)
                s.close()
        return
    if mode in ("chain", "child", "client", "probe"):
        return chain(mode, addr, sys.argv[3:])
    port, how = int(sys.argv[3]), sys.argv[4]
    if mode == "hold":
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        opts(s, how)
        s.bind((addr, port))
        s.listen(16)
        print("listening", flush=True)
        sys.stdin.read()
        return
    if mode == "join":
        if sys.argv[5:6] == ["drop"]:
            drop()
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        opts(s, how)
        try:
            s.bind((addr, port))
        except OSError as e:
            print(f"bind {name(e)}", flush=True)
            return
        try:
            s.listen(16)
        except OSError as e:
            print(f"listen {name(e)}", flush=True)
            return
        print("listening", flush=True)
        return
    raise SystemExit(f"unknown mode {mode}")


def line(s):
    got = b""
    while not got.endswith(b"\n"):
        b = s.recv(100)
        if not b:
            break
        got += b
    return got


def chain(mode, addr, args):
    if mode == "chain":
        port, d = int(args[0]), args[1]
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((addr, port))
        ls.listen(4)
        print("listening", flush=True)
        given, _ = ls.accept()
        given.sendall(b"you-are-given\n")
        secret, _ = ls.accept()
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                os.dup2(given.fileno(), 0)
                os.execv(PY, [PY, os.path.abspath(__file__), "child", "-", d])
            finally:
                os._exit(127)
        given.close()
        _, status = os.waitpid(pid, 0)
        got = line(secret)
        secret.sendall(b"secret-ok\n")
        secret.close()
        print(f"root read {got!r}; child exit {os.waitstatus_to_exitcode(status)}", flush=True)
        return
    if mode == "child":
        d = args[0]
        s = socket.socket(fileno=0)
        got = line(s)
        env = open("/proc/self/environ", "rb").read().split(b"\0")
        recs = [e for e in env if e.startswith(b"SOFTOE_INHERIT=")]
        # What its environment carries: one record, of its one connection,
        # with no more than the record's five fields (no credential).
        fields = [len(r.split(b",")) for r in b"".join(recs).split(b"=", 1)[-1].split(b";") if r]
        with open(f"{d}/child.pid.tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(f"{d}/child.pid.tmp", f"{d}/child.pid")
        t0 = time.time()
        while not os.path.exists(f"{d}/stranger.done") and time.time() - t0 < 60:
            time.sleep(0.01)
        s.sendall(b"given-ok\n")
        s.close()
        print(f"child read {got!r}; records {fields}", flush=True)
        return
    if mode == "client":
        port = int(args[0])
        a = socket.create_connection((addr, port))
        hello = line(a)
        b = socket.create_connection((addr, port))
        a.sendall(b"to-given\n")
        b.sendall(b"to-secret\n")
        ra, rb = line(a), line(b)
        # Nothing else came on either: an end of file after the answer.
        ra2, rb2 = a.recv(100), b.recv(100)
        print(f"client {hello!r} {ra!r} {rb!r} then {ra2!r} {rb2!r}", flush=True)
        return
    if mode == "probe":
        reached = 0
        for fd in (int(a) for a in args):
            try:
                s = socket.socket(fileno=fd)
            except OSError:
                continue
            try:
                if s.family == socket.AF_INET and s.getpeername()[1] != 0:
                    reached += 1
                    continue
            except OSError:
                pass
            try:
                s.settimeout(0.3)
                if s.recv(100):
                    reached += 1
            except OSError:
                pass
            s.detach()
        print(f"reached {reached}", flush=True)
        return


main()
