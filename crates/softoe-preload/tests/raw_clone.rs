//! Children made with a raw `clone` system call, as vsftpd makes them
//! (`syscall(__NR_clone, SIGCHLD, …)`: no `pthread_atfork` hook runs, so
//! the shim's cached process id is the parent's). A Python server on
//! softoe accepts, clones a child that writes a banner and answers the
//! hash of what the client sent, and closes its own copy while it accepts
//! the next client. Before the shim noticed the new process, the child's
//! `close` of its copy of the listener closed the parent's, every later
//! client was refused, and two processes producing on one single-producer
//! ring ended the server's session ("ring index corrupt").

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

mod shim;

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

use shim::*;
use softoe_engine::testing::{Bed, ENGINE_IP, sha256};

/// The server: `LIBC` names how it reaches `syscall` — `CDLL(None)` finds
/// the first definition (the shim's, as a program's call through the
/// PLT does), `CDLL('libc.so.6')` libc's own (as a program that makes
/// the system call itself: the shim sees nothing).
fn server_script(port: u16, clients: usize, libc: &str) -> String {
    format!(
        "import socket,os,ctypes,hashlib,sys\n\
         libc={libc}\n\
         libc.syscall.restype=ctypes.c_long\n\
         NR_CLONE={{'x86_64':56,'aarch64':220}}[os.uname().machine]\n\
         def clone():\n\
         \x20   # clone(SIGCHLD): a fork libc knows nothing of.\n\
         \x20   return libc.syscall(ctypes.c_long(NR_CLONE), ctypes.c_long(17), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))\n\
         l=socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         l.bind(('{ENGINE_IP}',{port})); l.listen(8)\n\
         print('ready', flush=True)\n\
         kids=[]\n\
         for i in range({clients}):\n\
         \x20   c,_=l.accept()\n\
         \x20   pid=clone()\n\
         \x20   if pid<0: print('clone failed'); sys.exit(1)\n\
         \x20   if pid==0:\n\
         \x20       l.close()\n\
         \x20       try:\n\
         \x20           c.sendall(b'220 child %d\\r\\n' % i)\n\
         \x20       except OSError as e:\n\
         \x20           os._exit(10+e.errno)\n\
         \x20       h=hashlib.sha256(); n=0\n\
         \x20       while n<200000:\n\
         \x20           b=c.recv(65536)\n\
         \x20           if not b: break\n\
         \x20           h.update(b); n+=len(b)\n\
         \x20       c.sendall(h.hexdigest().encode()); c.close()\n\
         \x20       os._exit(0)\n\
         \x20   kids.append(pid)\n\
         \x20   if libc._name is not None:\n\
         \x20       # The shim could not prepare the connection: the child\n\
         \x20       # cannot use it; the parent serves it (after the child's\n\
         \x20       # attempt, which must not have broken anything here).\n\
         \x20       _,st=os.waitpid(pid,0); kids.pop()\n\
         \x20       if not os.WIFEXITED(st) or os.WEXITSTATUS(st)<10: print('child', i, st); sys.exit(2)\n\
         \x20       c.sendall(b'220 parent %d\\r\\n' % i)\n\
         \x20       h=hashlib.sha256(); n=0\n\
         \x20       while n<200000:\n\
         \x20           b=c.recv(65536)\n\
         \x20           if not b: break\n\
         \x20           h.update(b); n+=len(b)\n\
         \x20       c.sendall(h.hexdigest().encode())\n\
         \x20   c.close()\n\
         for pid in kids:\n\
         \x20   _,st=os.waitpid(pid,0)\n\
         \x20   if st!=0: print('child', pid, st); sys.exit(3)\n\
         print('served', {clients}, flush=True)\n"
    )
}

/// One client from Linux: connects, reads the banner line, sends 200,000
/// bytes of its own, and returns the banner and the answer (the server's
/// hash of those bytes) beside the right hash.
fn client(bed: &Bed, port: u16, n: u8) -> (String, String, String) {
    let data: Vec<u8> = (0..200_000u32).map(|i| (i as u8) ^ n).collect();
    let want = sha256(&data);
    bed.linux
        .run(move || {
            let to = SocketAddrV4::new(ENGINE_IP, port);
            let mut s = TcpStream::connect_timeout(&to.into(), Duration::from_secs(5))
                .expect("the server on softoe refused a client");
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut banner = Vec::new();
            let mut b = [0u8; 1];
            while !banner.ends_with(b"\r\n") {
                assert_eq!(s.read(&mut b).unwrap(), 1, "no banner");
                banner.push(b[0]);
            }
            s.write_all(&data).unwrap();
            let mut answer = String::new();
            s.read_to_string(&mut answer).unwrap();
            (String::from_utf8_lossy(&banner).into_owned(), answer, want)
        })
        .unwrap()
}

fn serve_clients(libc: &str, port: u16, who: &str) {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let clients = 4;
    let mut server = on_softoe(&bed, "python3");
    server
        .args(["-c", &server_script(port, clients, libc)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut server = Child(server.spawn().unwrap());
    let mut out = server.0.stdout.take().unwrap();
    let mut ready = [0u8; 6];
    out.read_exact(&mut ready).unwrap();
    assert_eq!(&ready, b"ready\n");
    for n in 0..clients {
        let (banner, answer, want) = client(&bed, port, n as u8);
        assert_eq!(banner, format!("220 {who} {n}\r\n"), "client {n}");
        assert_eq!(answer, want, "client {n}: the server's hash");
    }
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(st) = server.0.try_wait().unwrap() {
            let mut rest = String::new();
            out.read_to_string(&mut rest).unwrap();
            let mut err = String::new();
            server
                .0
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            assert!(st.success(), "server: {st}\n{rest}{err}");
            assert!(rest.contains(&format!("served {clients}")), "{rest}{err}");
            break;
        }
        assert!(Instant::now() < end, "the server did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The server's session and every child's are gone, with every
    // connection: the engine ended none of them for a broken ring.
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

/// The child reaches `syscall` through the shim (vsftpd's case): the shim
/// prepares the parent's connections as for `fork`, the child takes the
/// one it uses into a session of its own and serves it, and the parent
/// goes on accepting.
#[test]
fn raw_clone_children_serve_their_connection() {
    serve_clients("ctypes.CDLL(None)", 7800, "child");
}

/// The clone goes past the shim (libc's own `syscall`): nothing prepared
/// the connection, so the child cannot use it (`EBADF`); but the child
/// never touches the parent's session — its `close` of the listener and
/// of the connection, its exit — and the parent serves every client.
#[test]
fn raw_clone_children_past_the_shim_leave_the_parent_alone() {
    serve_clients("ctypes.CDLL('libc.so.6')", 7801, "parent");
}
