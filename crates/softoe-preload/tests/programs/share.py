# One TCP connection used by two processes at once, after fork, in the
# patterns real programs use (rsync: the child only reads, the parent only
# writes), checked byte for byte on both ends.
#
#   share.py peer   ADDR PORT MODE          the plain side (Linux's TCP)
#   share.py forker ADDR PORT ROLE MODE     the forking side (run on softoe)
#
# ROLE: connect (the forker connects) or listen (it accepts).
# MODE:
#   split        the child reads N bytes the peer sends while the parent
#                writes N bytes to the peer (rsync's daemon and client)
#   split-rev    the parent reads while the child writes
#   two-readers  both read the one stream at once: every byte must reach
#                exactly one of them, each reader's bytes in stream order
#   two-writers  both write small records at once: the peer must get every
#                record whole, once, each writer's in order
# Exit status 0 and a line "ok ..." when everything checked out.
import hashlib, os, socket, struct, sys, tempfile, threading, time

N = 8 << 20
RECORD = 64
RECORDS = 20000


def block(tag):
    return hashlib.sha256(tag).digest() * 2048  # 64 KiB


def stream_bytes(tag):
    b = block(tag)
    return b * (N // len(b))


def send_all(s, tag):
    b = block(tag)
    for _ in range(N // len(b)):
        s.sendall(b)


def recv_all(s, limit=N):
    h, got = hashlib.sha256(), 0
    while got < limit:
        d = s.recv(65536)
        if not d:
            break
        h.update(d)
        got += len(d)
    return got, h.hexdigest()


def want(tag):
    return hashlib.sha256(stream_bytes(tag)).hexdigest()


def record(writer, seq):
    body = struct.pack("<II", writer, seq) + hashlib.sha256(b"%d/%d" % (writer, seq)).digest()
    return body + b"\0" * (RECORD - len(body))


def merged(expected, a, b):
    """Whether `expected` is an interleaving of the chunk lists `a` and `b`
    (each byte once, each list's chunks in order)."""
    seen = set()
    stack = [(0, 0, 0)]
    while stack:
        i, j, pos = stack.pop()
        if (i, j) in seen:
            continue
        seen.add((i, j))
        if i == len(a) and j == len(b):
            if pos == len(expected):
                return True
            continue
        if i < len(a) and expected[pos:pos + len(a[i])] == a[i]:
            stack.append((i + 1, j, pos + len(a[i])))
        if j < len(b) and expected[pos:pos + len(b[j])] == b[j]:
            stack.append((i, j + 1, pos + len(b[j])))
    return False


def chunks_to(path, s):
    with open(path, "wb") as f:
        while True:
            d = s.recv(4096)
            if not d:
                break
            f.write(struct.pack("<I", len(d)) + d)


def chunks_from(path):
    out, data = [], open(path, "rb").read()
    i = 0
    while i < len(data):
        (n,) = struct.unpack_from("<I", data, i)
        out.append(data[i + 4:i + 4 + n])
        i += 4 + n
    return out


def peer(addr, port, mode, s):
    if mode in ("split", "split-rev"):
        r = {}
        t = threading.Thread(target=lambda: r.update(got=recv_all(s)))
        t.start()
        send_all(s, b"A")
        t.join()
        got, h = r["got"]
        ok = got == N and h == want(b"B")
        print(f"peer: received {got} B, {'correct' if ok else 'WRONG'}", flush=True)
        return ok
    if mode == "two-readers":
        send_all(s, b"A")
        s.shutdown(socket.SHUT_WR)
        # The forker says when both readers are done.
        d = s.recv(16)
        print(f"peer: sent {N} B, forker said {d!r}", flush=True)
        return d == b"ok"
    if mode == "two-writers":
        buf = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            buf += d
        nexts, bad = [0, 0], 0
        for k in range(len(buf) // RECORD):
            r = buf[k * RECORD:(k + 1) * RECORD]
            w, seq = struct.unpack_from("<II", r)
            if w > 1 or r != record(w, seq) or seq != nexts[w]:
                bad += 1
                continue
            nexts[w] += 1
        ok = bad == 0 and nexts == [RECORDS, RECORDS] and len(buf) == 2 * RECORDS * RECORD
        print(f"peer: {len(buf)} B, records {nexts}, {bad} bad: {'correct' if ok else 'WRONG'}", flush=True)
        return ok
    raise SystemExit(f"unknown mode {mode}")


def forker(s, mode):
    if mode in ("split", "split-rev"):
        reader_is_child = mode == "split"
        pid = os.fork()
        if (pid == 0) == reader_is_child:
            got, h = recv_all(s)
            ok = got == N and h == want(b"A")
            print(f"{'child' if pid == 0 else 'parent'} (reader): {got} B, {'correct' if ok else 'WRONG'}", flush=True)
        else:
            try:
                send_all(s, b"B")
                ok = True
            except OSError as e:
                print("writer:", repr(e), flush=True)
                ok = False
        if pid == 0:
            os._exit(0 if ok else 1)
        _, st = os.waitpid(pid, 0)
        return ok and st == 0
    if mode == "two-readers":
        d = tempfile.mkdtemp()
        pid = os.fork()
        chunks_to(os.path.join(d, "child" if pid == 0 else "parent"), s)
        if pid == 0:
            os._exit(0)
        _, st = os.waitpid(pid, 0)
        a, b = chunks_from(os.path.join(d, "parent")), chunks_from(os.path.join(d, "child"))
        na, nb = sum(map(len, a)), sum(map(len, b))
        ok = st == 0 and merged(stream_bytes(b"A"), a, b)
        print(f"readers: parent {na} B in {len(a)} reads, child {nb} B in {len(b)}: "
              f"{'each byte once, in order' if ok else 'WRONG'}", flush=True)
        s.sendall(b"ok" if ok else b"no")
        return ok
    if mode == "two-writers":
        pid = os.fork()
        w = 1 if pid == 0 else 0
        ok = True
        for seq in range(RECORDS):
            r = record(w, seq)
            if s.send(r) != len(r):
                ok = False
                break
        if pid == 0:
            os._exit(0 if ok else 1)
        _, st = os.waitpid(pid, 0)
        s.shutdown(socket.SHUT_WR)
        s.recv(1)
        return ok and st == 0
    raise SystemExit(f"unknown mode {mode}")


def main():
    role, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if role == "peer":
        mode = sys.argv[4]
        if len(sys.argv) > 5 and sys.argv[5] == "connect":
            s = None
            for _ in range(100):
                try:
                    s = socket.create_connection((addr, port), timeout=60)
                    break
                except OSError:
                    time.sleep(0.1)
        else:
            l = socket.socket()
            l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            l.bind((addr, port))
            l.listen(1)
            print("peer: listening", flush=True)
            s, _ = l.accept()
        s.settimeout(60)
        ok = peer(addr, port, mode, s)
        s.close()
        sys.exit(0 if ok else 1)
    how, mode = sys.argv[4], sys.argv[5]
    if how == "listen":
        l = socket.socket()
        l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        l.bind((addr, port))
        l.listen(1)
        print("forker: listening", flush=True)
        s, _ = l.accept()
        l.close()
    else:
        s = None
        for _ in range(100):
            try:
                s = socket.create_connection((addr, port), timeout=60)
                break
            except OSError:
                time.sleep(0.1)
    s.settimeout(60)
    ok = forker(s, mode)
    print("ok" if ok else "FAILED", mode, flush=True)
    sys.exit(0 if ok else 1)


main()
