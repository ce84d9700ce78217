//! Programs of several processes and threads on softoe through the
//! LD_PRELOAD shim, against Linux's own TCP in the testbed: clients at
//! once, threads sharing sockets, connections across `fork`, a forking
//! server, and signals during blocking calls.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

use std::io::Write;
use std::net::SocketAddrV4;
use std::process::Stdio;
use std::time::{Duration, Instant};

mod shim;

use shim::*;
use softoe_engine::testing::{ENGINE_IP, LINUX_IP, sha256};

/// Eight client processes on softoe at once, each sending 8 MiB to its
/// own Linux connection: every byte arrives, in order, per connection.
#[test]
fn eight_clients_at_once() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let l = bed
        .linux
        .run(|| std::net::TcpListener::bind(SocketAddrV4::new(LINUX_IP, 7400)).unwrap())
        .unwrap();
    let sinks = bed
        .linux
        .spawn(move || {
            let mut got = Vec::new();
            let mut hs = Vec::new();
            for _ in 0..8 {
                let (mut s, _) = l.accept().unwrap();
                hs.push(std::thread::spawn(move || {
                    let mut all = Vec::new();
                    std::io::Read::read_to_end(&mut s, &mut all).unwrap();
                    all
                }));
            }
            for h in hs {
                got.push(h.join().unwrap());
            }
            got
        })
        .unwrap();
    let script = format!(
        "import socket,sys\n\
         n=int(sys.argv[1])\n\
         s=socket.create_connection(('{LINUX_IP}',7400))\n\
         block=bytes([n])*65536\n\
         for i in range(128): s.sendall(block)\n\
         s.close()\n"
    );
    let kids: Vec<Child> = (0..8)
        .map(|n| {
            Child(
                on_softoe(&bed, "python3")
                    .args(["-c", &script, &n.to_string()])
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    let got = sinks.join().unwrap();
    let mut seen: Vec<u8> = got
        .iter()
        .map(|g| {
            assert_eq!(g.len(), 8 << 20, "a client's bytes went missing");
            assert!(g.iter().all(|&b| b == g[0]), "bytes of two clients mixed");
            g[0]
        })
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..8).collect::<Vec<u8>>());
    drop(kids);
}

/// One program, many threads at once on its sockets: four connections,
/// each with a thread writing 16 MiB while another reads the echo back
/// (the same socket in two threads), all through the shim together.
#[test]
fn threads_share_sockets() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let l = bed
        .linux
        .run(|| std::net::TcpListener::bind(SocketAddrV4::new(LINUX_IP, 7420)).unwrap())
        .unwrap();
    let echo = bed
        .linux
        .spawn(move || {
            let mut hs = Vec::new();
            for _ in 0..4 {
                let (mut s, _) = l.accept().unwrap();
                hs.push(std::thread::spawn(move || {
                    let mut r = s.try_clone().unwrap();
                    std::io::copy(&mut r, &mut s).unwrap()
                }));
            }
            hs.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
        })
        .unwrap();
    let script = format!(
        "import socket,threading,hashlib,sys\n\
         N=16<<20\n\
         ok=[]\n\
         def data(n):\n\
         \x20   return bytes((i*7+n)&255 for i in range(65536))\n\
         def conn(n):\n\
         \x20   s=socket.create_connection(('{LINUX_IP}',7420))\n\
         \x20   block=data(n)\n\
         \x20   def writer():\n\
         \x20       for i in range(N//65536): s.sendall(block)\n\
         \x20       s.shutdown(socket.SHUT_WR)\n\
         \x20   w=threading.Thread(target=writer); w.start()\n\
         \x20   h=hashlib.sha256(); got=0\n\
         \x20   while True:\n\
         \x20       b=s.recv(100000)\n\
         \x20       if not b: break\n\
         \x20       h.update(b); got+=len(b)\n\
         \x20   w.join(); s.close()\n\
         \x20   want=hashlib.sha256(block*(N//65536)).hexdigest()\n\
         \x20   ok.append(got==N and h.hexdigest()==want)\n\
         ts=[threading.Thread(target=conn,args=(n,)) for n in range(4)]\n\
         [t.start() for t in ts]; [t.join() for t in ts]\n\
         print(ok); sys.exit(0 if ok==[True]*4 else 1)\n"
    );
    let o = run_for(
        {
            let mut c = on_softoe(&bed, "python3");
            c.args(["-c", &script]);
            c
        },
        240,
        "python threads",
    );
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(echo.join().unwrap(), 4 * (16 << 20));
}

/// Connections inherited across `fork`, in one Python program on softoe
/// against a Linux server that hashes what it reads until the end of the
/// stream and answers the hash. First the child takes the connection and
/// the parent closes its copy at once (the connection must not end);
/// then a child exits without touching it and the parent goes on (the
/// child's exit must not end it either). Each answer proves every byte
/// arrived, in order, once.
#[test]
fn connections_survive_fork() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let l = bed
        .linux
        .run(|| std::net::TcpListener::bind(SocketAddrV4::new(LINUX_IP, 7430)).unwrap())
        .unwrap();
    let sink = bed
        .linux
        .spawn(move || {
            let mut lens = Vec::new();
            for _ in 0..2 {
                let (mut s, _) = l.accept().unwrap();
                let mut b = Vec::new();
                std::io::Read::read_to_end(&mut s, &mut b).unwrap();
                s.write_all(sha256(&b).as_bytes()).unwrap();
                lens.push(b.len());
            }
            lens
        })
        .unwrap();
    let script = format!(
        "import socket,os,hashlib,sys\n\
         def blob(n, seed): return bytes((i*13+seed)&255 for i in range(256))*(n//256)\n\
         def answer(s):\n\
         \x20   got=b''\n\
         \x20   while True:\n\
         \x20       b=s.recv(65536)\n\
         \x20       if not b: return got.decode()\n\
         \x20       got+=b\n\
         # 1: the child takes it; the parent closes its copy at once.\n\
         s=socket.create_connection(('{LINUX_IP}',7430))\n\
         a=blob(4<<20,1); s.sendall(a)\n\
         pid=os.fork()\n\
         if pid==0:\n\
         \x20   b=blob(4<<20,2); s.sendall(b); s.shutdown(socket.SHUT_WR)\n\
         \x20   ok=answer(s)==hashlib.sha256(a+b).hexdigest()\n\
         \x20   s.close(); os._exit(0 if ok else 3)\n\
         s.close()\n\
         _,st=os.waitpid(pid,0)\n\
         if st!=0: print('child of case 1 failed', st); sys.exit(1)\n\
         # 2: a child exits without touching it; the parent goes on.\n\
         s=socket.create_connection(('{LINUX_IP}',7430))\n\
         a=blob(2<<20,3); s.sendall(a)\n\
         pid=os.fork()\n\
         if pid==0: os._exit(0)\n\
         os.waitpid(pid,0)\n\
         b=blob(2<<20,4); s.sendall(b); s.shutdown(socket.SHUT_WR)\n\
         ok=answer(s)==hashlib.sha256(a+b).hexdigest()\n\
         s.close()\n\
         if not ok: print('bad hash'); sys.exit(2)\n\
         # 3: an inherited UDP socket fails in the child, with EBADF, each\n\
         # time (it is not retried), and poll reports it in error.\n\
         import errno,select\n\
         u=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.connect(('{LINUX_IP}',9))\n\
         pid=os.fork()\n\
         if pid==0:\n\
         \x20   codes=[]\n\
         \x20   for _ in range(2):\n\
         \x20       try: u.send(b'x'); codes.append(0)\n\
         \x20       except OSError as e: codes.append(e.errno)\n\
         \x20   p=select.poll(); p.register(u.fileno(), select.POLLIN)\n\
         \x20   ev=p.poll(1000)\n\
         \x20   os._exit(0 if codes==[errno.EBADF]*2 and ev and ev[0][1] & select.POLLERR else 4)\n\
         _,st=os.waitpid(pid,0)\n\
         if st!=0: print('udp child', st); sys.exit(1)\n\
         print('ok')\n"
    );
    let o = run_for(
        {
            let mut c = on_softoe(&bed, "python3");
            c.args(["-c", &script]);
            c
        },
        120,
        "python with fork",
    );
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(sink.join().unwrap(), vec![8 << 20, 4 << 20]);
    // Every session of the program and its children is gone, with every
    // socket: nothing was left detached.
    let end = Instant::now() + Duration::from_secs(10);
    while !bed.snapshot().unwrap().sessions.is_empty() {
        assert!(
            Instant::now() < end,
            "sessions left: {:?}",
            bed.snapshot().unwrap().sessions
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A forking server (Python's `ForkingMixIn`: the parent accepts, forks,
/// and closes its copy; the child serves and exits) on softoe, fetched
/// from Linux by three curls at once, 20 MiB each, hashes checked; then
/// only the server's own session remains, holding its listener.
#[test]
fn forking_server_on_softoe() {
    if !have("curl") || !have("python3") {
        return;
    }
    let bed = bed();
    let dir = tempdir("forking");
    let (_, want) = pattern_file(&dir, "blob", 20 << 20);
    let script = "import http.server,socketserver,functools\n\
         class S(socketserver.ForkingMixIn, http.server.HTTPServer): pass\n\
         h=functools.partial(http.server.SimpleHTTPRequestHandler, directory='.')\n\
         S(('0.0.0.0',8082), h).serve_forever()\n";
    let _server = Child(
        on_softoe(&bed, "python3")
            .args(["-c", script])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let url = format!("http://{ENGINE_IP}:8082/blob");
    // Up: one fetch answers.
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let mut c = on_linux(&bed, "curl");
        c.args(["-sS", "--fail", "-o", "/dev/null", &url]);
        if run_for(c, 60, "curl").status.success() {
            break;
        }
        assert!(Instant::now() < end, "the forking server never answered");
        std::thread::sleep(Duration::from_millis(100));
    }
    let fetches: Vec<_> = (0..3)
        .map(|i| {
            let out = dir.join(format!("got{i}"));
            let mut c = on_linux(&bed, "curl");
            c.args(["-sS", "--fail", "-o"]).arg(&out).arg(&url);
            let h = std::thread::spawn(move || run_for(c, 60, "curl"));
            (out, h)
        })
        .collect();
    for (out, h) in fetches {
        let o = h.join().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(sha256(&std::fs::read(&out).unwrap()), want);
    }
    // The children are gone, and so are their sessions and connections.
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let s = bed.snapshot().unwrap().sessions;
        if s.len() == 1 && s[0].sockets == 1 && s[0].closing == 0 {
            break;
        }
        assert!(Instant::now() < end, "sessions left: {s:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A signal interrupts a blocking receive on a softoe socket as it does a
/// kernel one: Python's handler raises out of `recv` (the ring path and
/// the posted-buffer path), and a handler that returns lets the `recv` go
/// on to the data.
#[test]
fn signals_interrupt_blocking_calls() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let l = bed
        .linux
        .run(|| std::net::TcpListener::bind(SocketAddrV4::new(LINUX_IP, 7440)).unwrap())
        .unwrap();
    let peer = bed
        .linux
        .spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut go = [0u8; 2];
            std::io::Read::read_exact(&mut s, &mut go).unwrap();
            std::thread::sleep(Duration::from_millis(500));
            s.write_all(b"data").unwrap();
            let mut rest = Vec::new();
            std::io::Read::read_to_end(&mut s, &mut rest).unwrap();
            go
        })
        .unwrap();
    let script = format!(
        "import socket,signal,sys,time\n\
         s=socket.create_connection(('{LINUX_IP}',7440))\n\
         class Alarm(Exception): pass\n\
         def raise_(*a): raise Alarm()\n\
         signal.signal(signal.SIGALRM, raise_)\n\
         for size in (100, 1<<20):\n\
         \x20   signal.setitimer(signal.ITIMER_REAL, 0.3)\n\
         \x20   t=time.time()\n\
         \x20   try:\n\
         \x20       s.recv(size); print('recv returned'); sys.exit(1)\n\
         \x20   except Alarm:\n\
         \x20       if time.time()-t > 5: print('late'); sys.exit(1)\n\
         signal.signal(signal.SIGALRM, lambda *a: None)\n\
         signal.setitimer(signal.ITIMER_REAL, 0.2)\n\
         s.sendall(b'go')\n\
         d=s.recv(100)\n\
         if d!=b'data': print('got', d); sys.exit(1)\n\
         s.close()\n"
    );
    let o = run_for(
        {
            let mut c = on_softoe(&bed, "python3");
            c.args(["-c", &script]);
            c
        },
        30,
        "python with signals",
    );
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(&peer.join().unwrap(), b"go");
}
