# EPOLLEXCLUSIVE on a connection, as Linux takes it.
#   exclusive.py driver ADDR PORT
#       accepts one connection; at its "g", sends one byte back.
#   exclusive.py waiter ADDR PORT
#       connects; prints what epoll_ctl answers to each step (ok or the
#       errno's name): the flag is accepted on EPOLL_CTL_ADD only, with the
#       events it allows, and an exclusive registration is not modified.
#       Then two epoll sets, each with a thread waiting in it, register the
#       connection exclusively; the byte arrives: "woken" when at least one
#       of them reported it within 3 s.
import errno, select, socket, sys, threading, time

role, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])

if role == "driver":
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((addr, port))
    l.listen(1)
    print("ready", flush=True)
    c, _ = l.accept()
    if c.recv(1) == b"g":
        c.sendall(b"x")
    c.recv(1)
    sys.exit(0)

c = socket.create_connection((addr, port))
c.setblocking(False)
fd = c.fileno()
IN, OUT, ET = select.EPOLLIN, select.EPOLLOUT, select.EPOLLET
X = select.EPOLLEXCLUSIVE
ep = select.epoll()


def ctl(what, f):
    try:
        f()
        print(what, "ok", flush=True)
    except OSError as e:
        print(what, errno.errorcode.get(e.errno, e.errno), flush=True)


ctl("add in|oneshot|excl", lambda: ep.register(fd, IN | select.EPOLLONESHOT | X))
ctl("add in|rdhup|excl", lambda: ep.register(fd, IN | select.EPOLLRDHUP | X))
ctl("add pri|excl", lambda: ep.register(fd, select.EPOLLPRI | X))
ctl("mod in|excl, none there", lambda: ep.modify(fd, IN | X))
ctl("mod in, none there", lambda: ep.modify(fd, IN))
ctl("add in|excl", lambda: ep.register(fd, IN | X))
ctl("add in again", lambda: ep.register(fd, IN))
ctl("add in|oneshot|excl again", lambda: ep.register(fd, IN | select.EPOLLONESHOT | X))
ctl("mod in", lambda: ep.modify(fd, IN))
ctl("mod in|excl", lambda: ep.modify(fd, IN | X))
ctl("del", lambda: ep.unregister(fd))
ctl("add in", lambda: ep.register(fd, IN))
ctl("mod in|excl", lambda: ep.modify(fd, IN | X))
ctl("mod in|out", lambda: ep.modify(fd, IN | OUT))
ctl("del", lambda: ep.unregister(fd))
ctl("add in|out|et|excl", lambda: ep.register(fd, IN | OUT | ET | X))
ctl("del", lambda: ep.unregister(fd))

got = []
sets = [select.epoll(), select.epoll()]
for s in sets:
    s.register(fd, IN | X)


def wait(s):
    for f, ev in s.poll(3.0):
        if f == fd and ev & IN:
            got.append(time.monotonic())


threads = [threading.Thread(target=wait, args=(s,)) for s in sets]
for t in threads:
    t.start()
time.sleep(0.3)
c.setblocking(True)
c.sendall(b"g")
sent = time.monotonic()
for t in threads:
    t.join()
print("woken" if any(t - sent < 2.5 for t in got) else f"not woken ({len(got)})", flush=True)
c.sendall(b"e")
