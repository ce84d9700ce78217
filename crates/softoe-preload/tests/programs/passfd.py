# Softoe sockets in other processes than the one that made them: inherited
# across fork when the parent closes its copy first, and passed to an
# unrelated process over a Unix socket (SCM_RIGHTS), as vsftpd, haproxy's
# reload and socket-activation helpers do. Run on softoe; a plain Linux
# client talks to it (`client` mode).
#
#   passfd.py forked-listener ADDR PORT   listen, fork, the parent closes its
#                                         copy at once; the child serves N
#   passfd.py pass-conn ADDR PORT         accept each connection, hand it to
#                                         a helper process over a Unix socket
#                                         and close it; the helper serves it
#   passfd.py pass-listener ADDR PORT     hand the listener itself to a
#                                         helper and close it; the helper
#                                         accepts and serves N
#   passfd.py client ADDR PORT            N connections, each sends a request
#                                         and checks the answer (its SHA-256,
#                                         and who answered)
# A served connection reads the request up to the client's end of stream
# and answers "<who> <sha256 hex>". Exit status 0 when all went well.
import array, hashlib, os, socket, subprocess, sys, time

N = 3
SIZE = 1 << 20


def serve(c, who):
    h = hashlib.sha256()
    while True:
        d = c.recv(65536)
        if not d:
            break
        h.update(d)
    c.sendall(f"{who} {h.hexdigest()}".encode())
    c.close()


def listener(addr, port):
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((addr, port))
    l.listen(16)
    return l


def send_fd(u, fd):
    u.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])


def recv_fd(u):
    msg, anc, _, _ = u.recvmsg(1, socket.CMSG_SPACE(4))
    if not msg:
        return None
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            return array.array("i", data[:4])[0]
    raise SystemExit("helper: a message without a descriptor")


def helper(path, what):
    # An unrelated program (its own exec'd image): takes sockets from a
    # Unix socket and serves them.
    u = socket.socket(socket.AF_UNIX)
    u.connect(path)
    while True:
        fd = recv_fd(u)
        if fd is None:
            return
        s = socket.socket(fileno=fd)
        if what == "listener":
            for _ in range(N):
                c, _ = s.accept()
                serve(c, "helper")
            s.close()
            u.sendall(b"done")
            return
        serve(s, "helper")


def spawn_helper(what):
    path = f"/tmp/passfd-{os.getpid()}.sock"
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(1)
    p = subprocess.Popen([sys.executable, __file__, "helper", path, what])
    u, _ = srv.accept()
    srv.close()
    os.unlink(path)
    return p, u


def main():
    mode = sys.argv[1]
    if mode == "helper":
        helper(sys.argv[2], sys.argv[3])
        return
    addr, port = sys.argv[2], int(sys.argv[3])
    if mode == "client":
        who = sys.argv[4]
        for i in range(N):
            for _ in range(100):
                try:
                    c = socket.create_connection((addr, port), timeout=30)
                    break
                except OSError:
                    time.sleep(0.1)
            data = bytes((i * 7 + k) & 255 for k in range(256)) * (SIZE // 256)
            c.sendall(data)
            c.shutdown(socket.SHUT_WR)
            got = b""
            while True:
                d = c.recv(4096)
                if not d:
                    break
                got += d
            want = f"{who} {hashlib.sha256(data).hexdigest()}".encode()
            if got != want:
                print(f"client: connection {i}: got {got!r}, want {want!r}", flush=True)
                sys.exit(1)
        print("client: ok", flush=True)
        return
    if mode == "forked-listener":
        l = listener(addr, port)
        pid = os.fork()
        if pid == 0:
            time.sleep(0.3)  # the parent has closed its copy by now
            for _ in range(N):
                c, _ = l.accept()
                serve(c, "child")
            os._exit(0)
        l.close()
        print("ready", flush=True)
        _, st = os.waitpid(pid, 0)
        sys.exit(0 if st == 0 else 1)
    if mode == "pass-conn":
        l = listener(addr, port)
        p, u = spawn_helper("conn")
        print("ready", flush=True)
        for _ in range(N):
            c, _ = l.accept()
            send_fd(u, c.fileno())
            c.close()
        u.close()
        sys.exit(p.wait())
    if mode == "pass-listener":
        l = listener(addr, port)
        p, u = spawn_helper("listener")
        send_fd(u, l.fileno())
        l.close()
        print("ready", flush=True)
        done = u.recv(16)
        sys.exit(0 if p.wait() == 0 and done == b"done" else 1)
    raise SystemExit(f"unknown mode {mode}")


main()
