//! Programs that limit themselves, and the shim's own messages: an
//! address-space limit (vsftpd's 200 MiB) below the shim's region, and a
//! descriptor 2 that is the client's softoe connection (inetd-style
//! servers put it on 0, 1 and 2) when the shim has something to say.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

mod shim;

use std::io::Read;
use std::net::SocketAddrV4;

use shim::*;
use softoe_engine::testing::{Bed, LINUX_IP};

/// A Linux server on `port` that reads `n` connections to their end and
/// returns what each sent, in the order they came.
fn sink(bed: &Bed, port: u16, n: usize) -> softoe_testbed::NsThread<Vec<Vec<u8>>> {
    let l = bed
        .linux
        .run(move || std::net::TcpListener::bind(SocketAddrV4::new(LINUX_IP, port)).unwrap())
        .unwrap();
    bed.linux
        .spawn(move || {
            (0..n)
                .map(|_| {
                    let (mut s, _) = l.accept().unwrap();
                    let mut all = Vec::new();
                    s.read_to_end(&mut all).unwrap();
                    all
                })
                .collect()
        })
        .unwrap()
}

fn python_ok(bed: &Bed, script: &str, what: &str, env: &[(&str, &str)]) {
    let mut c = on_softoe(bed, "python3");
    c.args(["-c", script]);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = run_for(c, 60, what);
    assert!(
        o.status.success(),
        "{what}: {}\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A program limited to 200 MiB of address space (vsftpd's limit, below
/// the shim's 256 MiB region) still maps 64 MiB of its own and its
/// sockets work on softoe: with the limit set before its first socket
/// (the attach takes a region that fits), after it (the limit grows by the
/// region the shim mapped), and in a forked child that took its parent's
/// connection (two regions mapped: its own and its parent's).
#[test]
fn an_address_space_limit_leaves_the_program_room() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let port = 7810;
    let got = sink(&bed, port, 4);
    let script = format!(
        "import socket,resource,mmap,os,sys\n\
         LIM=200<<20\n\
         def limit(): resource.setrlimit(resource.RLIMIT_AS, (LIM, LIM))\n\
         def own_memory():\n\
         \x20   m=mmap.mmap(-1, 64<<20)\n\
         \x20   for i in range(0, 64<<20, 1<<20): m[i]=1\n\
         \x20   m.close()\n\
         def conn(): return socket.create_connection(('{LINUX_IP}',{port}))\n\
         # 1: the limit first, then sockets.\n\
         pid=os.fork()\n\
         if pid==0:\n\
         \x20   limit(); s=conn(); own_memory(); s.sendall(b'1'*300000); s.close(); os._exit(0)\n\
         _,st=os.waitpid(pid,0)\n\
         if st!=0: print('case 1', st); sys.exit(1)\n\
         # 2: a socket first (the region is mapped), then the limit.\n\
         pid=os.fork()\n\
         if pid==0:\n\
         \x20   s=conn(); s.sendall(b'2'*1000); limit(); own_memory(); s.sendall(b'2'*299000); s.close(); os._exit(0)\n\
         _,st=os.waitpid(pid,0)\n\
         if st!=0: print('case 2', st); sys.exit(1)\n\
         # 3: a forked child takes its parent's connection (its own region\n\
         # beside the parent's), then limits itself.\n\
         s=conn(); s.sendall(b'3'*1000)\n\
         pid=os.fork()\n\
         if pid==0:\n\
         \x20   s.sendall(b'3'*1000); limit(); own_memory(); s.sendall(b'3'*298000); s.close(); os._exit(0)\n\
         s.close()\n\
         _,st=os.waitpid(pid,0)\n\
         if st!=0: print('case 3', st); sys.exit(1)\n\
         # The parent, unlimited, still works.\n\
         s=conn(); s.sendall(b'4'*300000); s.close()\n"
    );
    python_ok(&bed, &script, "limited programs", &[]);
    let got = got.join().unwrap();
    for (i, g) in got.iter().enumerate() {
        let c = b'1' + i as u8;
        assert_eq!(g.len(), 300_000, "case {}", i + 1);
        assert!(g.iter().all(|&b| b == c), "case {}: wrong bytes", i + 1);
    }
}

/// A shim diagnostic while descriptor 2 is the client's softoe connection
/// (the child's inherited UDP socket cannot be used: the shim says so
/// once): the process goes on — it used to hang, the message re-entering
/// the shim through its own `write` hook while the shim held the lock that
/// hook needed — and the client receives only what the program wrote.
/// With the shim's log on (`RUST_LOG`, a debug line at every adoption,
/// each said from inside the shim), the same.
#[test]
fn a_diagnostic_never_goes_to_a_softoe_descriptor_2() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let port = 7811;
    let got = sink(&bed, port, 2);
    let script = format!(
        "import socket,os,sys,errno\n\
         s=socket.create_connection(('{LINUX_IP}',{port}))\n\
         u=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.connect(('{LINUX_IP}',9))\n\
         pid=os.fork()\n\
         if pid==0:\n\
         \x20   os.dup2(s.fileno(), 2)\n\
         \x20   code=0\n\
         \x20   try: u.send(b'x')\n\
         \x20   except OSError as e: code=e.errno\n\
         \x20   os.write(2, b'child-ok')\n\
         \x20   os._exit(0 if code==errno.EBADF else 1)\n\
         s.close()\n\
         _,st=os.waitpid(pid,0)\n\
         if st!=0: print('child', st); sys.exit(1)\n"
    );
    python_ok(&bed, &script, "a diagnostic on a softoe fd 2", &[]);
    python_ok(
        &bed,
        &script,
        "the shim's log on a softoe fd 2",
        &[("RUST_LOG", "softoe_preload=debug,softoe_host=debug")],
    );
    for g in got.join().unwrap() {
        assert_eq!(String::from_utf8_lossy(&g), "child-ok");
    }
}

/// The shim's attach fails in a child whose descriptors 0 and 2 are the
/// client's softoe connection (vsftpd's session process, sandbox off):
/// the failure is said — dropped, or written to `SOFTOE_LOG_FILE` — with
/// the attachment's lock released, so the program's write fails
/// (`ENETDOWN`) instead of hanging in the shim (gdb: `Shim::client` →
/// `_eprint` → `write` → `lock`), and the client never sees the message.
#[test]
fn a_failed_attach_says_so_where_the_client_cannot_see_it() {
    if !have("python3") {
        return;
    }
    let bed = bed();
    let port = 7812;
    let got = sink(&bed, port, 2);
    let log = std::env::temp_dir().join(format!("softoe-limits-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    // The child runs out of descriptors through libc's own setrlimit (the
    // shim's would attach first): the attach cannot make its socket.
    let script = format!(
        "import socket,os,sys,errno,ctypes\n\
         libc=ctypes.CDLL('libc.so.6')\n\
         class RL(ctypes.Structure): _fields_=[('cur',ctypes.c_ulong),('max',ctypes.c_ulong)]\n\
         s=socket.create_connection(('{LINUX_IP}',{port}))\n\
         pid=os.fork()\n\
         if pid==0:\n\
         \x20   os.dup2(s.fileno(), 0); os.dup2(s.fileno(), 2)\n\
         \x20   old=RL(); libc.getrlimit(7, ctypes.byref(old))\n\
         \x20   if libc.setrlimit(7, ctypes.byref(RL(3, old.max)))!=0: os._exit(2)\n\
         \x20   code=0\n\
         \x20   try: os.write(2, b'child wrote')\n\
         \x20   except OSError as e: code=e.errno\n\
         \x20   os._exit(0 if code==errno.ENETDOWN else 1)\n\
         _,st=os.waitpid(pid,0)\n\
         if st!=0: print('child', st); sys.exit(1)\n\
         s.sendall(b'parent-ok'); s.close()\n"
    );
    python_ok(&bed, &script, "a failed attach", &[]);
    python_ok(
        &bed,
        &script,
        "a failed attach, logged",
        &[("SOFTOE_LOG_FILE", log.to_str().unwrap())],
    );
    for g in got.join().unwrap() {
        assert_eq!(String::from_utf8_lossy(&g), "parent-ok");
    }
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(
        text.contains("cannot reach the softoe engine") && text.contains("ENETDOWN"),
        "the log file: {text:?}"
    );
}
