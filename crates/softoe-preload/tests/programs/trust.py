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
import errno
import os
import socket
import sys


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


main()
