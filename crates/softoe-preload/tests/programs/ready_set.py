# What poll and select report ready among several connections and a pipe:
# every ready descriptor, by its place in the list asked about (as Linux
# reports them: in descriptor order, not the order they became ready).
#   ready_set.py driver ADDR PORT K ROUNDS
#       accepts K connections; for each round asked for (a byte on the
#       first), sends one byte on each connection of the round's subset,
#       in an order that changes from round to round, 1 ms apart.
#   ready_set.py waiter ADDR PORT K ROUNDS
#       connects K times and makes a pipe; each round asks, writes to the
#       pipe in odd rounds, waits (poll) until every expected descriptor is
#       ready, then prints what one poll and one select report, and reads
#       everything back. "wrong N" counts rounds where what was reported is
#       not what was sent.
import os, select, socket, sys, time

role, addr, port, k, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])


def subset(r):
    # A non-empty subset of range(k) in a changing order.
    x = r * 2654435761 + 977
    out = []
    for i in range(k):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        if (x >> 40) & 1:
            out.append(i)
    if not out:
        out = [r % k]
    x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
    rot = (x >> 33) % len(out)
    return out[rot:] + out[:rot]


if role == "driver":
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((addr, port))
    l.listen(k)
    print("ready", flush=True)
    conns = []
    for _ in range(k):
        c, _ = l.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conns.append(c)
    for r in range(rounds):
        if conns[0].recv(1) != b"g":
            sys.exit("driver: the waiter went away")
        for i in reversed(subset(r)):
            conns[i].sendall(b"x")
            time.sleep(0.001)
    sys.exit(0)

conns = []
for _ in range(k):
    c = socket.create_connection((addr, port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.setblocking(False)
    conns.append(c)
pr, pw = os.pipe()
fds = [c.fileno() for c in conns] + [pr]
wrong = 0
for r in range(rounds):
    conns[0].setblocking(True)
    conns[0].sendall(b"g")
    conns[0].setblocking(False)
    want = sorted(subset(r))
    if r % 2:
        os.write(pw, b"p")
        want.append(k)
    p = select.poll()
    for f in fds:
        p.register(f, select.POLLIN)
    end = time.monotonic() + 5
    got = []
    while len(got) < len(want) and time.monotonic() < end:
        got = p.poll(100)
    by_poll = [fds.index(f) for f, ev in p.poll(0) if ev & select.POLLIN]
    rd, _, _ = select.select(fds, [], [], 0)
    by_select = [fds.index(f) for f in rd]
    print(f"round {r}: poll {by_poll} select {by_select}", flush=True)
    if sorted(by_poll) != want or by_select != want:
        wrong += 1
        print(f"round {r}: want {want}", file=sys.stderr)
    for i in subset(r):
        conns[i].recv(1)
    if r % 2:
        os.read(pr, 1)
print(f"wrong {wrong} of {rounds}", flush=True)
