# SO_REUSEPORT across unrelated processes (crates/softoe-preload/tests/reuseport.rs).
#
#   reuseport.py serve ADDR PORT NAME        listen with SO_REUSEADDR+SO_REUSEPORT, print
#                                            "listening", answer every connection with
#                                            "NAME SHA256(what it sent)" until killed
#   reuseport.py hold ADDR PORT              listen so, print "listening", wait for stdin's end
#   reuseport.py join ADDR PORT reuseport|plain [nobody]
#                                            try to listen beside the holder (with or without
#                                            SO_REUSEPORT; as user 65534 first with "nobody",
#                                            dropped in-process, as servers drop privileges,
#                                            so the shim has attached as root before) and
#                                            report each step: where it
#                                            failed and with what, whether the descriptor is
#                                            still open (its number not handed out again, its
#                                            address still bound): the same lines on Linux
#   reuseport.py pause ADDR PORT             listen, then take commands from stdin, one a line,
#                                            answering each with one line: "unspec" (connect
#                                            to AF_UNSPEC, haproxy's pause), "shut-rd",
#                                            "shut-wr", "listen", "accept" (the next
#                                            connection, within 5 s), "name" (the bound port)
#   reuseport.py probe ADDR PORT             one connection attempt: "connected" or the errno
#   reuseport.py client ADDR PORT N          N connections one after another, each sending
#                                            random bytes and checking the answer's hash;
#                                            prints "NAME" per connection, then "done"
#   reuseport.py http ADDR PORT SECS         HTTP requests one after another, each on a new
#                                            connection, for SECS seconds; each answer must be
#                                            200 "pid N"; prints "ok N", "failed N", the pids
#                                            in the order they first answered, and the first
#                                            failures
import errno
import hashlib
import os
import socket
import struct
import sys

mode, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])


def listener(reuseport):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuseport:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    return s


def name(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def read_exactly(c, n):
    b = b""
    while len(b) < n:
        x = c.recv(n - len(b))
        if not x:
            raise EOFError("short read")
        b += x
    return b


if mode == "serve":
    me = sys.argv[4]
    s = listener(True)
    s.bind((addr, port))
    s.listen(64)
    print("listening reuseport=%d" % s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT), flush=True)
    while True:
        c, _ = s.accept()
        with c:
            (n,) = struct.unpack("!I", read_exactly(c, 4))
            data = read_exactly(c, n)
            c.sendall(("%s %s\n" % (me, hashlib.sha256(data).hexdigest())).encode())
elif mode == "hold":
    s = listener(True)
    s.bind((addr, port))
    s.listen(16)
    print("listening", flush=True)
    sys.stdin.read()
elif mode == "join":
    if sys.argv[5:] == ["nobody"]:
        # A socket of theirs before the drop attaches the shim as root.
        socket.socket().close()
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)
    s = listener(sys.argv[4] == "reuseport")
    fd = s.fileno()
    step = "bind"
    try:
        s.bind((addr, port))
        print("bind: ok", flush=True)
        step = "listen"
        s.listen(16)
        print("listen: ok", flush=True)
    except OSError as e:
        print("%s: %s" % (step, name(e)), flush=True)
    t = socket.socket()
    print("next socket takes the same number:", t.fileno() == fd, flush=True)
    try:
        os.fstat(fd)
        print("descriptor open: True", flush=True)
    except OSError as e:
        print("descriptor open: False", name(e), flush=True)
    try:
        bound = s.getsockname()
        print("bound to the port:", bound[1] == port, flush=True)
    except OSError as e:
        print("getsockname:", name(e), flush=True)
    # Linux lets the socket try again once the port is free: its state is
    # what it was before the failed call, not closed, not half-given.
    print("SO_REUSEPORT reads", s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT), flush=True)
elif mode == "pause":
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    s = listener(False)
    s.bind((addr, port))
    s.listen(16)
    print("listening", flush=True)

    def call(f):
        if f() == 0:
            return "ok"
        return errno.errorcode.get(ctypes.get_errno(), "?")

    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "unspec":
            unspec = (ctypes.c_char * 16)()  # all zero: family AF_UNSPEC
            out = call(lambda: libc.connect(s.fileno(), unspec, 16))
        elif cmd in ("shut-rd", "shut-wr"):
            how = socket.SHUT_RD if cmd == "shut-rd" else socket.SHUT_WR
            out = call(lambda: libc.shutdown(s.fileno(), how))
        elif cmd == "listen":
            out = call(lambda: libc.listen(s.fileno(), 16))
        elif cmd == "accept":
            s.settimeout(5)
            try:
                s.accept()[0].close()
                out = "accepted"
            except OSError as e:
                out = name(e) if e.errno else "timeout"
        elif cmd == "name":
            out = "port %s" % (s.getsockname()[1] == port)
        else:
            out = "?"
        print(cmd, out, flush=True)
elif mode == "probe":
    try:
        socket.create_connection((addr, port), timeout=3).close()
        print("connected", flush=True)
    except OSError as e:
        print(name(e) if e.errno else "timeout", flush=True)
elif mode == "http":
    import http.client
    import time

    end = time.time() + float(sys.argv[4])
    ok, bad, pids = 0, [], []
    while time.time() < end:
        try:
            c = http.client.HTTPConnection(addr, port, timeout=10)
            c.request("GET", "/")
            r = c.getresponse()
            body = r.read().decode()
            c.close()
            words = body.split()
            if r.status != 200 or len(words) != 2 or words[0] != "pid":
                bad.append("answer %d %r" % (r.status, body))
                continue
            ok += 1
            if words[1] not in pids:
                pids.append(words[1])
        except Exception as e:  # a reset, a refusal, a timeout: all count
            bad.append("%.3f %r" % (time.time(), e))
    print("ok", ok, flush=True)
    print("failed", len(bad), flush=True)
    print("pids", " ".join(pids), flush=True)
    for b in bad[:10]:
        print("failure", b, flush=True)
elif mode == "client":
    n = int(sys.argv[4])
    for i in range(n):
        data = os.urandom(1000 + i * 37)
        c = socket.create_connection((addr, port), timeout=20)
        c.sendall(struct.pack("!I", len(data)) + data)
        got = b""
        while True:
            x = c.recv(4096)
            if not x:
                break
            got += x
        c.close()
        who, digest = got.decode().split()
        if digest != hashlib.sha256(data).hexdigest():
            print("bad answer from", who, flush=True)
            sys.exit(1)
        print(who, flush=True)
    print("done", flush=True)
