# Which of several connections does epoll report first? Linux's ready list
# is first in, first out: sockets come out in the order they became ready.
#   ready_order.py driver ADDR PORT K ROUNDS GAP_MS [KK UPATH]
#       accepts K connections (and KK on the Unix socket UPATH: the
#       kernel's, beside softoe's); for each round asked for (a byte on the
#       first), sends one byte on every connection, in an order that changes
#       from round to round, GAP_MS apart; each byte is its position.
#   ready_order.py waiter ADDR PORT K ROUNDS GAP_MS MODE MAXEVENTS [KK UPATH START]
#       connects K times (and KK times to UPATH), registers the connections
#       (MODE lt or et) and an idle pipe in one epoll set; each round asks,
#       waits for the first event (START "asleep", the default; "busy":
#       lets every byte arrive before the first wait), lets the rest
#       arrive, then takes events MAXEVENTS at a time until every
#       connection was reported, and compares the order of first reports
#       with the order the bytes were sent. Prints each round's order of
#       first reports, then "wrong N of ROUNDS".
import os, select, socket, sys, time

role, addr, port, k, rounds, gap = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
rest = sys.argv[9:] if role == "waiter" else sys.argv[7:]
kk, upath = (int(rest[0]), rest[1]) if len(rest) >= 2 else (0, None)
start = rest[2] if len(rest) >= 3 else "asleep"
n = k + kk


def order(r):
    # A permutation of range(k) that differs from round to round.
    idx = list(range(n))
    x = r * 2654435761 + 12345
    for i in range(n - 1, 0, -1):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        j = (x >> 33) % (i + 1)
        idx[i], idx[j] = idx[j], idx[i]
    return idx


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
    if kk:
        u = socket.socket(socket.AF_UNIX)
        if os.path.exists(upath):
            os.unlink(upath)
        u.bind(upath)
        u.listen(kk)
        for _ in range(kk):
            c, _ = u.accept()
            conns.append(c)
    for r in range(rounds):
        if conns[0].recv(1) != b"g":
            sys.exit("driver: the waiter went away")
        for pos, i in enumerate(order(r)):
            conns[i].sendall(bytes([pos]))
            time.sleep(gap / 1000)
    sys.exit(0)

mode, maxevents = sys.argv[7], int(sys.argv[8])
conns = []
for _ in range(k):
    c = socket.create_connection((addr, port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.setblocking(False)
    conns.append(c)
    time.sleep(0.01)
for _ in range(kk):
    c = socket.socket(socket.AF_UNIX)
    for _ in range(500):
        try:
            c.connect(upath)
            break
        except (FileNotFoundError, ConnectionRefusedError):
            time.sleep(0.01)
    c.setblocking(False)
    conns.append(c)
ep = select.epoll()
flags = select.EPOLLIN | (select.EPOLLET if mode == "et" else 0)
by_fd = {}
for i, c in enumerate(conns):
    ep.register(c.fileno(), flags)
    by_fd[c.fileno()] = i
pr, pw = os.pipe()
ep.register(pr, select.EPOLLIN)
wrong = 0
for r in range(rounds):
    conns[0].setblocking(True)
    conns[0].sendall(b"g")
    conns[0].setblocking(False)
    seen = []
    first = True
    if start == "busy":
        # Every byte has arrived by the first wait.
        time.sleep((n * gap + 20) / 1000)
        first = False
    while len(seen) < n:
        evs = ep.poll(5.0, maxevents)
        if not evs:
            sys.exit(f"waiter: round {r}: only {seen} reported in 5 s")
        for fd, _ in evs:
            if fd == pr:
                sys.exit("waiter: the idle pipe was reported")
            i = by_fd[fd]
            if i not in seen:
                seen.append(i)
        if first:
            # Every byte has arrived by now: one wait sees the rest.
            time.sleep((n * gap + 20) / 1000)
            first = False
    sent = [None] * n
    for i, c in enumerate(conns):
        sent[c.recv(1)[0]] = i
    print(f"round {r}: reported {seen}", flush=True)
    if seen != sent:
        wrong += 1
        print(f"round {r}: sent in order {sent}, reported {seen}", file=sys.stderr)
print(f"wrong {wrong} of {rounds}", flush=True)
