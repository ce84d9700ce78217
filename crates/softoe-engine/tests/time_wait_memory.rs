//! Memory per closed connection (issue 35 item 5): a program opens 100
//! connections to Linux, receives 2 MiB on each (the engine buffers them
//! while it does not read) and sends 64 KiB on each through the engine's
//! copy ring (`overlap`), then reads everything and closes first, so
//! every connection ends in TIME-WAIT on the engine. A connection there
//! must hold only what TIME-WAIT needs: no receive ring, no send queue,
//! no logs (the stack gives them back as it enters), and none of the
//! engine's copy rings.
//!
//! The figures (the process's resident memory, what the stack's
//! connections hold, `Stack::tcp_memory`) are printed at three points:
//! attached, with all the data buffered, and with every connection in
//! TIME-WAIT. The rings come from `mmap` and go back to the system when
//! freed, as in `softoe engine` (its `fixed_mmap_threshold`), so the
//! resident memory shows what is held.
//!
//! Run: `cargo test --release -p softoe-engine --test time_wait_memory --
//! --nocapture` (as root).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, unsafe_code)]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpListener};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use common::{Bed, LINUX_IP, Options, wait_for};
use softoe_engine::Memory;
use softoe_engine::services::Service;
use softoe_host::{Client, SendPolicy};
use softoe_stack::{Instant, Stack, TcpMemory};

const N: usize = 100;
/// Bytes Linux sends on each connection.
const DOWN: usize = 2 << 20;
/// Bytes the program sends on each.
const UP: usize = 64 << 10;
const PORT: u16 = 7700;

/// What the engine holds, as its loop last saw it.
#[derive(Clone, Copy, Debug, Default)]
struct Held {
    tcp: TcpMemory,
    /// Bytes of the engine's own regions (copy rings and the like; the
    /// programs' shared regions not counted).
    owned: usize,
}

/// A service that looks at the stack and the engine's memory every turn.
struct Probe(Arc<Mutex<Held>>, Option<Instant>);

impl Service for Probe {
    fn name(&self) -> &str {
        "probe"
    }

    fn start(
        &mut self,
        _: Instant,
        _: &mut Stack,
        _: &mut Memory,
    ) -> Result<(), softoe_engine::services::ServiceError> {
        Ok(())
    }

    fn step(&mut self, now: Instant, stack: &mut Stack, mem: &mut Memory) -> bool {
        let owned = (0..8192u32)
            .filter_map(|i| mem.region(i))
            .filter(|b| !b.is_shared())
            .map(|b| b.len())
            .sum();
        *self.0.lock().unwrap() = Held {
            tcp: stack.tcp_memory(),
            owned,
        };
        self.1 = Some(now + Duration::from_millis(5));
        false
    }

    fn wake_at(&self) -> Option<Instant> {
        self.1
    }
}

/// The process's resident anonymous memory, bytes: the engine's heap and
/// mappings (the program's region, a memfd, is shared memory and not
/// counted; nor are Linux's socket buffers, the kernel's).
fn rss() -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: usize = s
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

fn show(what: &str, rss: usize, h: &Held) {
    let t = &h.tcp;
    println!(
        "{what:>10}: anon rss {:>7.1} MiB | {} connections ({} in TIME-WAIT) hold {:.1} MiB, \
         {} kept with {:.1} MiB, control blocks {} KiB | engine regions {:.1} MiB",
        rss as f64 / f64::from(1 << 20),
        t.connections,
        t.time_wait,
        t.held as f64 / f64::from(1 << 20),
        t.kept,
        t.kept_bytes as f64 / f64::from(1 << 20),
        t.control >> 10,
        h.owned as f64 / f64::from(1 << 20),
    );
}

#[test]
fn a_connection_in_time_wait_holds_no_buffers() {
    // As `softoe engine` does (see the module docs).
    // SAFETY: mallopt only changes glibc's allocation policy.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
    }
    let held = Arc::new(Mutex::new(Held::default()));
    let bed = Bed::start(
        Options {
            host: true,
            // The engine's default receive buffer (`softoe engine`).
            stack: |c| c.tcp.rx_buffer = 4 << 20,
            ..Options::default()
        },
        vec![Box::new(Probe(Arc::clone(&held), None))],
    );
    let now = || *held.lock().unwrap();
    let l = bed
        .linux
        .run(|| TcpListener::bind(SocketAddrV4::new(LINUX_IP, PORT)).unwrap())
        .unwrap();
    let (sent_tx, sent_rx) = mpsc::channel();
    let linux = bed
        .linux
        .spawn(move || {
            let down = vec![7u8; DOWN];
            let mut conns = Vec::new();
            for _ in 0..N {
                let (mut s, _) = l.accept().unwrap();
                s.write_all(&down).unwrap();
                conns.push(s);
            }
            sent_tx.send(()).unwrap();
            // The program closes first: read to its end, then close.
            let mut buf = vec![0u8; 1 << 16];
            let mut up = 0;
            for mut s in conns {
                loop {
                    let n = s.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    up += n;
                }
            }
            up
        })
        .unwrap();
    let c = Client::attach_to(&bed.host).unwrap();
    let up = vec![3u8; UP];
    let mut buf = vec![0u8; DOWN];
    std::thread::sleep(Duration::from_millis(200));
    let (rss0, held0) = (rss(), now());
    show("attached", rss0, &held0);

    let mut streams = Vec::new();
    for _ in 0..N {
        let mut s = c.tcp_connect(SocketAddrV4::new(LINUX_IP, PORT)).unwrap();
        s.set_send_policy(SendPolicy::Overlap);
        s.write_all(&up).unwrap();
        streams.push(s);
    }
    sent_rx.recv_timeout(Duration::from_secs(60)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let (rss1, held1) = (rss(), now());
    show("buffered", rss1, &held1);
    assert_eq!(held1.tcp.connections, N);

    for mut s in streams {
        s.read_exact(&mut buf).unwrap();
        assert!(buf.iter().all(|&b| b == 7));
        drop(s);
    }
    assert_eq!(linux.join().unwrap(), N * UP);
    wait_for(30, "every connection in TIME-WAIT", || {
        now().tcp.time_wait == N
    });
    std::thread::sleep(Duration::from_millis(200));
    let (rss2, held2) = (rss(), now());
    show("time-wait", rss2, &held2);
    let per = |a: usize, b: usize| (a as f64 - b as f64) / N as f64 / 1024.0;
    println!(
        "per connection in TIME-WAIT: anon rss {:+.1} KiB over attached, stack storage {:.1} KiB, \
         control block {} bytes",
        per(rss2, rss0),
        held2.tcp.held as f64 / N as f64 / 1024.0,
        held2.tcp.control / N,
    );

    assert_eq!(held2.tcp.connections, N);
    assert_eq!(held2.tcp.held, 0, "TIME-WAIT holds no storage: {held2:?}");
    // What they left for the next connections: within the stack's bounds
    // (`StackConfig::keep_closed`, 16; `keep_closed_bytes`, 64 MiB of rings).
    assert!(held2.tcp.kept <= 16, "{held2:?}");
    assert!(
        held2.tcp.kept_bytes <= (64 << 20) + 16 * (1 << 20),
        "{held2:?}"
    );
    drop(c);
}
