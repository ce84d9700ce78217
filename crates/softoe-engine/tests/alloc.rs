//! Steady state through the host interface allocates nothing — engine,
//! host library and all.
//!
//! `crates/softoe-stack/tests/alloc.rs` proves it for the stack alone; this
//! test proves it for everything a program's bytes pass through on their
//! way to the wire: the engine's poll loop (receive batches, the stack, the
//! services, sleeping in `ppoll` and waking), its TAP port, the host
//! interface on the engine side (commands, completions, receive rings,
//! copy rings, queued zero-copy buffers, direct placement, doorbells), and
//! the client library a program links (`softoe_host`: dispatch of
//! completions, blocking and waking on the doorbell).
//!
//! The testbed is the real one (`softoe_engine::testing::Bed`): the engine on a TAP with
//! the host interface, Linux's TCP in a namespace behind a bridge. The
//! program is a [`Client`] attached in this same process, so one counting
//! `#[global_allocator]` sees every allocation of the engine, the client
//! and the Linux side's threads. After a warm-up (the connection's buffers,
//! queues and maps reach their working size) a *window* opens, and in it
//! not one `alloc`, `alloc_zeroed` or `realloc` may happen, in any thread:
//!
//! 1. bulk host→Linux, 64 MiB after 8 MiB of warm-up, with each send
//!    policy: the copy ring, `overlap` (the engine reads the program's
//!    memory with `process_vm_readv`) and zero-copy region buffers reused
//!    after `ZcBuf::wait_released`;
//! 2. bulk Linux→host, 64 MiB after 8 MiB, read through the receive ring
//!    in 4 KiB reads, and by 256 KiB blocking reads the engine places
//!    directly into the program's buffer;
//! 3. 64-byte request/response, 3,000 rounds after 500, once back to back
//!    and once with 500 µs of think time on Linux's side, so that the
//!    engine sleeps in `ppoll` and the program on its doorbell between
//!    messages, and both are woken — the counters taken around the window
//!    prove they were;
//! 4. again on the AF_XDP port (`XdpPort` on a veth to the bridge): bulk
//!    host→Linux with the copy policy, Linux→host through the receive
//!    ring, and the request/response with think time.
//!
//! The TAP's engine steers the kernel's work for its frames to the other
//! cores (`Steer::On`), so its look at the machine's load every 100 ms
//! (`/proc/stat`, its core, the queue's mask) runs inside the windows too.
//!
//! Why it is shaped so:
//!
//! - *Nothing in the process allocates during a window*, rather than
//!   counting per thread: a per-thread count could not see an allocation
//!   the engine makes on behalf of the program, and would have to trust
//!   that the test picked the right threads. So the Linux side is written
//!   to allocate nothing either (buffers made before the window, no
//!   formatting), bytes are checked against a pattern in place, and every
//!   figure is printed after the window.
//! - *No libtest harness* (`harness = false` in Cargo.toml): libtest's main
//!   thread formats a "has been running for over 60 seconds" notice on a
//!   slow machine, which would count. This binary is its own `main`.
//! - *Linux closes first* and each scenario waits until the engine has let
//!   its connection go: a connection in TIME-WAIT on the engine would be
//!   released 60 s later, in the middle of some other window, and a
//!   socket's teardown is not steady state.
//! - When a window does see allocations, the first few are recorded with
//!   their stack (captured inside the allocator with a guard against
//!   counting its own allocations) and printed, each site once, so a CI
//!   failure says where (`SOFTOE_ALLOC_STACKS=N` records up to N per
//!   window instead of 4).
//!
//! Constant costs per run (the attach, each connection's buffers, threads)
//! are outside every window; no tolerance is allowed inside one.
//!
//! Run: `cargo test --release -p softoe-engine --test alloc` (as root;
//! figures on stdout).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// A counting allocator must implement `GlobalAlloc`, an unsafe trait.
#![allow(unsafe_code)]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::backtrace::Backtrace;
use std::cell::Cell;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream as LinuxStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Bed, Options, linux_addr, wait_for};
use softoe_host::{Client, Config, SendPolicy, TcpStream};

const NAME: &str = "steady_state_through_the_host_interface_allocates_nothing";

// ---- the counting allocator -------------------------------------------

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static ALLOC_BYTES: AtomicU64 = AtomicU64::new(0);
/// Stacks still to record in this window (0 outside windows).
static TRACE_LEFT: AtomicUsize = AtomicUsize::new(0);
/// The recorded stacks (room reserved before any window).
static TRACES: Mutex<Vec<Backtrace>> = Mutex::new(Vec::new());
/// How many stacks one window records at most
/// (`$SOFTOE_ALLOC_STACKS`, default 4).
static TRACES_PER_WINDOW: AtomicUsize = AtomicUsize::new(4);

thread_local! {
    /// This thread is recording a stack: its allocations are the test's
    /// own and are neither counted nor recorded.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

fn counted(size: usize) {
    // `try_with`: a thread being torn down has no thread-locals any more
    // (its allocations still count).
    let inside = INSIDE.try_with(Cell::get).unwrap_or(false);
    if inside {
        return;
    }
    ALLOCS.fetch_add(1, Ordering::Relaxed);
    ALLOC_BYTES.fetch_add(size as u64, Ordering::Relaxed);
    if TRACE_LEFT.load(Ordering::Relaxed) > 0 {
        record();
    }
}

#[cold]
fn record() {
    let _ = INSIDE.try_with(|inside| {
        inside.set(true);
        let take = TRACE_LEFT
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok();
        if take {
            let bt = Backtrace::force_capture();
            if let Ok(mut v) = TRACES.lock() {
                v.push(bt);
            }
        }
        inside.set(false);
    });
}

// SAFETY: defers to the system allocator; only counts (and, in a window,
// records the first few callers' stacks, allocating only under the guard
// that keeps those allocations out of the count and out of recursion).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        counted(l.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        counted(l.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        counted(n);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A measured stretch of steady state.
struct Window {
    allocs: u64,
    bytes: u64,
    t0: Instant,
}

/// What a window saw.
#[derive(Clone, Copy, Debug, Default)]
struct Seen {
    allocs: u64,
    alloc_bytes: u64,
    secs: f64,
}

impl Window {
    fn open() -> Window {
        let w = Window {
            allocs: ALLOCS.load(Ordering::SeqCst),
            bytes: ALLOC_BYTES.load(Ordering::SeqCst),
            t0: Instant::now(),
        };
        TRACE_LEFT.store(TRACES_PER_WINDOW.load(Ordering::Relaxed), Ordering::SeqCst);
        w
    }

    fn close(self) -> Seen {
        let secs = self.t0.elapsed().as_secs_f64();
        let allocs = ALLOCS.load(Ordering::SeqCst) - self.allocs;
        let alloc_bytes = ALLOC_BYTES.load(Ordering::SeqCst) - self.bytes;
        TRACE_LEFT.store(0, Ordering::SeqCst);
        Seen {
            allocs,
            alloc_bytes,
            secs,
        }
    }
}

// ---- the byte pattern ---------------------------------------------------

/// The stream's bytes repeat with this period; the pattern buffer holds
/// two periods, so any span of up to a period is one slice of it.
const PERIOD: usize = 1 << 20;

fn pattern() -> Arc<Vec<u8>> {
    Arc::new(
        (0..2 * PERIOD)
            .map(|i| {
                let i = (i % PERIOD) as u32;
                ((i.wrapping_mul(2_654_435_761) >> 24) as u8) ^ (i >> 12) as u8
            })
            .collect(),
    )
}

/// The stream's bytes from `at` on, `len` of them (`len` ≤ a period).
fn stream(pat: &[u8], at: u64, len: usize) -> &[u8] {
    let o = (at % PERIOD as u64) as usize;
    &pat[o..o + len]
}

/// Whether `got` is the stream's bytes from `at` on (allocates nothing).
fn matches(pat: &[u8], at: u64, got: &[u8]) -> bool {
    let mut at = at;
    let mut rest = got;
    while !rest.is_empty() {
        let n = rest.len().min(PERIOD);
        if rest[..n] != *stream(pat, at, n) {
            return false;
        }
        at += n as u64;
        rest = &rest[n..];
    }
    true
}

// ---- the scenarios -------------------------------------------------------

const WARMUP: u64 = 8 << 20;
const TOTAL: u64 = 64 << 20;
const CHUNK: usize = 64 << 10;
const ZC_BUF: usize = 256 << 10;
const ZC_BUFS: usize = 8;
const SMALL_READ: usize = 4 << 10;
const LARGE_READ: usize = 256 << 10;
const MSG: usize = 64;
const PP_WARMUP: u64 = 500;
const PP_ROUNDS: u64 = 3000;

/// One measured scenario.
struct Run {
    what: &'static str,
    seen: Seen,
    /// Payload bytes moved in the window, and what else to say.
    moved: u64,
    note: String,
}

/// Host→Linux: how the program hands over its bytes.
#[derive(Clone, Copy, Debug)]
enum Sending {
    Policy(SendPolicy),
    Zerocopy,
}

/// Linux side of a host→Linux transfer: reads `total` bytes, checking
/// each against the pattern, then closes first. Returns (bytes, intact).
fn linux_sink(
    bed: &Bed,
    port: u16,
    pat: &Arc<Vec<u8>>,
    total: u64,
) -> softoe_testbed::NsThread<(u64, bool)> {
    let l = bed
        .linux
        .run(move || TcpListener::bind(linux_addr(port)).unwrap())
        .unwrap();
    let pat = pat.clone();
    bed.linux
        .spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = vec![0u8; 256 << 10];
            let (mut n, mut ok) = (0u64, true);
            while n < total {
                let k = s.read(&mut buf).unwrap();
                if k == 0 {
                    break;
                }
                ok &= matches(&pat, n, &buf[..k]);
                n += k as u64;
            }
            (n, ok)
        })
        .unwrap()
}

/// Linux side of a Linux→host transfer: writes `total` pattern bytes,
/// then closes first.
fn linux_source(
    bed: &Bed,
    port: u16,
    pat: &Arc<Vec<u8>>,
    total: u64,
) -> softoe_testbed::NsThread<()> {
    let l = bed
        .linux
        .run(move || TcpListener::bind(linux_addr(port)).unwrap())
        .unwrap();
    let pat = pat.clone();
    bed.linux
        .spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut n = 0u64;
            while n < total {
                let k = CHUNK.min((total - n) as usize);
                s.write_all(stream(&pat, n, k)).unwrap();
                n += k as u64;
            }
        })
        .unwrap()
}

/// Linux side of the ping-pong: echoes `rounds` messages of `MSG` bytes,
/// each after `think`, then closes first.
fn linux_echo(bed: &Bed, port: u16, rounds: u64, think: Duration) -> softoe_testbed::NsThread<u64> {
    let l = bed
        .linux
        .run(move || TcpListener::bind(linux_addr(port)).unwrap())
        .unwrap();
    bed.linux
        .spawn(move || {
            let (mut s, _): (LinuxStream, _) = l.accept().unwrap();
            s.set_nodelay(true).unwrap();
            let mut buf = [0u8; MSG];
            let mut done = 0;
            while done < rounds {
                if s.read_exact(&mut buf).is_err() {
                    break;
                }
                if !think.is_zero() {
                    std::thread::sleep(think);
                }
                if s.write_all(&buf).is_err() {
                    break;
                }
                done += 1;
            }
            done
        })
        .unwrap()
}

/// The engine has let every connection go (none in the stack), and the
/// program has taken the completions that said so: the next window sees
/// nothing of this scenario's teardown.
fn settle(bed: &Bed, c: &Client) {
    wait_for(30, "the engine to release the connection", || {
        bed.snapshot().connections.is_empty()
    });
    c.nop().unwrap();
}

fn host_to_linux(bed: &Bed, c: &Client, pat: &Arc<Vec<u8>>, how: Sending, port: u16) -> Run {
    let end = WARMUP + TOTAL;
    let sink = linux_sink(bed, port, pat, end);
    let mut s = c.tcp_connect(linux_addr(port)).unwrap();
    let mut sent = 0u64;
    let mut window = None;
    let mut from = 0;
    let seen = match how {
        Sending::Policy(p) => {
            s.set_send_policy(p);
            while sent < end {
                if window.is_none() && sent >= WARMUP {
                    from = sent;
                    window = Some(Window::open());
                }
                let k = CHUNK.min((end - sent) as usize);
                s.write_all(stream(pat, sent, k)).unwrap();
                sent += k as u64;
            }
            window.unwrap().close()
        }
        Sending::Zerocopy => {
            let mut bufs: Vec<_> = (0..ZC_BUFS).map(|_| c.zc_buf(ZC_BUF).unwrap()).collect();
            let mut i = 0;
            while sent < end {
                if window.is_none() && sent >= WARMUP {
                    from = sent;
                    window = Some(Window::open());
                }
                let b = &mut bufs[i % ZC_BUFS];
                i += 1;
                // Reused only once the peer acknowledged its last send.
                b.wait_released().unwrap();
                let k = ZC_BUF.min((end - sent) as usize);
                b.write_at(0, stream(pat, sent, k)).unwrap();
                assert_eq!(s.send_zerocopy(b, k).unwrap(), k);
                sent += k as u64;
            }
            for b in &mut bufs {
                b.wait_released().unwrap();
            }
            window.unwrap().close()
        }
    };
    let (got, intact) = sink.join().unwrap();
    assert_eq!(got, end, "{how:?}: Linux received every byte");
    assert!(intact, "{how:?}: Linux received other bytes than sent");
    // Linux closed first; reading its FIN here, then closing, leaves the
    // engine no TIME-WAIT.
    let mut b = [0u8; 1];
    assert_eq!(s.read(&mut b).unwrap(), 0);
    drop(s);
    settle(bed, c);
    Run {
        what: match how {
            Sending::Policy(SendPolicy::Copy) => "host→Linux, copy ring",
            Sending::Policy(SendPolicy::Overlap) => "host→Linux, overlap (process_vm_readv)",
            Sending::Zerocopy => "host→Linux, zero-copy buffers",
        },
        seen,
        moved: sent - from,
        note: String::new(),
    }
}

fn linux_to_host(bed: &Bed, c: &Client, pat: &Arc<Vec<u8>>, read: usize, port: u16) -> Run {
    let end = WARMUP + TOTAL;
    let source = linux_source(bed, port, pat, end);
    let mut s = c.tcp_connect(linux_addr(port)).unwrap();
    let direct0 = placed(bed, c);
    let mut buf = vec![0u8; read];
    let (mut got, mut intact) = (0u64, true);
    let mut window = None;
    let mut seen = None;
    let mut from = 0;
    loop {
        if window.is_none() && seen.is_none() && got >= WARMUP {
            from = got;
            window = Some(Window::open());
        }
        let n = s.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        intact &= matches(pat, got, &buf[..n]);
        got += n as u64;
        if got >= end
            && let Some(w) = window.take()
        {
            seen = Some(w.close());
        }
    }
    source.join().unwrap();
    assert_eq!(got, end, "{read}-byte reads: every byte arrived");
    assert!(intact, "{read}-byte reads: other bytes than Linux sent");
    // Bytes the stack wrote straight into the ring: the path ran (67–100 %
    // of a ring reader's bytes take it on a quiet machine, under 10 % on a
    // loaded one, where the reader falls behind and the stack's buffer
    // keeps bytes; the session's sim tests check the path exactly).
    let remote = linux_addr(port).to_string();
    let sunk = bed
        .snapshot()
        .connections
        .iter()
        .filter(|x| x.remote == remote)
        .map(|x| x.bytes_sunk)
        .sum::<u64>();
    if read < LARGE_READ {
        assert!(sunk > 0, "ring reads: no byte went straight into the ring");
    }
    drop(s);
    settle(bed, c);
    let direct = placed(bed, c) - direct0;
    Run {
        what: if read >= LARGE_READ {
            "Linux→host, 256 KiB reads (direct placement)"
        } else {
            "Linux→host, 4 KiB reads (receive ring)"
        },
        seen: seen.unwrap(),
        moved: got - from,
        note: format!(
            "{:.0} % placed directly, {:.0} % straight into the ring",
            direct as f64 * 100.0 / end as f64,
            sunk as f64 * 100.0 / end as f64
        ),
    }
}

/// Bytes the engine has placed straight into this program's buffers.
fn placed(bed: &Bed, c: &Client) -> u64 {
    let snap = bed.snapshot();
    snap.sessions
        .iter()
        .find(|s| s.id == c.session())
        .map_or(0, |s| s.direct)
}

/// The engine's sleeps and the doorbells it rang for this program.
fn sleeps_and_wakeups(bed: &Bed, c: &Client) -> (u64, u64) {
    let snap = bed.snapshot();
    let wakeups = snap
        .sessions
        .iter()
        .find(|s| s.id == c.session())
        .map_or(0, |s| s.wakeups);
    (snap.engine.sleeps, wakeups)
}

fn ping_pong(bed: &Bed, c: &Client, think: Duration, port: u16) -> Run {
    let end = PP_WARMUP + PP_ROUNDS;
    let echo = linux_echo(bed, port, end, think);
    let mut s: TcpStream = c.tcp_connect(linux_addr(port)).unwrap();
    s.set_nodelay(true).unwrap();
    let (mut msg, mut back) = ([0u8; MSG], [0u8; MSG]);
    let mut window = None;
    let mut counters = (0, 0);
    for round in 0..end {
        if round == PP_WARMUP {
            counters = sleeps_and_wakeups(bed, c);
            window = Some(Window::open());
        }
        msg[..8].copy_from_slice(&round.to_le_bytes());
        s.write_all(&msg).unwrap();
        s.read_exact(&mut back).unwrap();
        assert!(back == msg, "round {round}: the echo differs");
    }
    let seen = window.unwrap().close();
    let after = sleeps_and_wakeups(bed, c);
    let (sleeps, wakeups) = (after.0 - counters.0, after.1 - counters.1);
    assert_eq!(echo.join().unwrap(), end);
    let mut b = [0u8; 1];
    assert_eq!(s.read(&mut b).unwrap(), 0);
    drop(s);
    settle(bed, c);
    if !think.is_zero() {
        // Between messages both sides went to sleep and were woken: the
        // paths this scenario is here for were taken.
        assert!(
            sleeps >= PP_ROUNDS / 2,
            "the engine slept only {sleeps} times in {PP_ROUNDS} rounds"
        );
        assert!(
            wakeups >= PP_ROUNDS / 2,
            "the program was woken only {wakeups} times in {PP_ROUNDS} rounds"
        );
    }
    Run {
        what: if think.is_zero() {
            "64-byte ping-pong, back to back"
        } else {
            "64-byte ping-pong, 500 µs think time"
        },
        seen,
        moved: PP_ROUNDS * 2 * MSG as u64,
        note: format!(
            "{:.1} µs per round; engine slept {sleeps}×, program woken {wakeups}×",
            seen.secs * 1e6 / PP_ROUNDS as f64
        ),
    }
}

fn run() {
    if let Some(n) = std::env::var("SOFTOE_ALLOC_STACKS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        TRACES_PER_WINDOW.store(n, Ordering::Relaxed);
    }
    TRACES
        .lock()
        .unwrap()
        .reserve(TRACES_PER_WINDOW.load(Ordering::Relaxed) * 8);
    let pat = pattern();
    // Steering on: its look every 100 ms (`/proc/stat`, the core, the
    // mask) runs inside the windows too.
    let mut engine = softoe_engine::EngineConfig::default();
    engine.steer = softoe_engine::Steer::On;
    let bed = Bed::start(
        Options {
            host: true,
            engine,
            ..Options::default()
        },
        Vec::new(),
    );
    let c = Client::attach_with(Config {
        path: bed.host.clone(),
        direct_min: 16 << 10,
        ..Config::default()
    })
    .unwrap();
    let mut runs = vec![
        (
            "tap",
            host_to_linux(&bed, &c, &pat, Sending::Policy(SendPolicy::Copy), 9100),
        ),
        (
            "tap",
            host_to_linux(&bed, &c, &pat, Sending::Policy(SendPolicy::Overlap), 9101),
        ),
        (
            "tap",
            host_to_linux(&bed, &c, &pat, Sending::Zerocopy, 9102),
        ),
        ("tap", linux_to_host(&bed, &c, &pat, SMALL_READ, 9103)),
        ("tap", linux_to_host(&bed, &c, &pat, LARGE_READ, 9104)),
        ("tap", ping_pong(&bed, &c, Duration::ZERO, 9105)),
        ("tap", ping_pong(&bed, &c, Duration::from_micros(500), 9106)),
    ];
    drop(c);
    drop(bed);
    if let Err(why) = softoe_engine::testing::xdp_available() {
        println!("the AF_XDP port's runs skipped: {why}");
    } else {
        xdp_runs(&pat, &mut runs);
    }
    report(&runs);
}

/// The AF_XDP port's runs, on a bed of their own.
fn xdp_runs(pat: &Arc<Vec<u8>>, runs: &mut Vec<(&'static str, Run)>) {
    // The AF_XDP port's paths: its rings and UMEM each way, its one
    // `sendto` per turn, and sleeping on the socket between messages.
    let bed = Bed::start(
        Options {
            host: true,
            xdp: true,
            ..Options::default()
        },
        Vec::new(),
    );
    let c = Client::attach_with(Config {
        path: bed.host.clone(),
        direct_min: 16 << 10,
        ..Config::default()
    })
    .unwrap();
    runs.extend([
        (
            "xdp",
            host_to_linux(&bed, &c, pat, Sending::Policy(SendPolicy::Copy), 9110),
        ),
        ("xdp", linux_to_host(&bed, &c, pat, SMALL_READ, 9111)),
        ("xdp", ping_pong(&bed, &c, Duration::from_micros(500), 9112)),
    ]);
}

/// Prints every run, the allocation sites seen, and fails on any.
fn report(runs: &[(&'static str, Run)]) {
    println!(
        "{:<4} {:<46} {:>7} {:>9} {:>11} {:>9}  notes",
        "port", "steady state", "allocs", "alloc B", "moved", "Gb/s"
    );
    for (port, r) in runs {
        println!(
            "{port:<4} {:<46} {:>7} {:>9} {:>7.1} MiB {:>9.2}  {}",
            r.what,
            r.seen.allocs,
            r.seen.alloc_bytes,
            r.moved as f64 / f64::from(1 << 20),
            r.moved as f64 * 8.0 / r.seen.secs / 1e9,
            r.note
        );
    }
    // Each allocation site once, with how often it was recorded.
    let mut sites: Vec<(String, usize)> = Vec::new();
    for t in TRACES.lock().unwrap().iter() {
        let t = t.to_string();
        match sites.iter_mut().find(|(s, _)| *s == t) {
            Some((_, n)) => *n += 1,
            None => sites.push((t, 1)),
        }
    }
    for (t, n) in &sites {
        println!("\nallocated in a window ({n}× recorded), from:\n{t}");
    }
    for (port, r) in runs {
        assert_eq!(
            r.seen.allocs, 0,
            "{port}, {}: {} allocations in steady state (stacks above)",
            r.what, r.seen.allocs
        );
    }
}

/// libtest's arguments, as far as they matter to one test: a filter that
/// does not match it, `--skip` one that does, `--ignored` (it is not) and
/// `--list`.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        println!("{NAME}: test");
        return;
    }
    let mut filters = Vec::new();
    let mut skipped = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--skip" => skipped |= it.next().is_some_and(|s| NAME.contains(s.as_str())),
            "--ignored" => skipped = true,
            // Options that take a value: the value is not a filter.
            "--test-threads" | "--color" | "--format" | "--logfile" | "-Z" => {
                it.next();
            }
            a if !a.starts_with('-') => filters.push(a.to_string()),
            _ => {}
        }
    }
    if skipped || !(filters.is_empty() || filters.iter().any(|f| NAME.contains(f.as_str()))) {
        println!("running 0 tests");
        return;
    }
    println!("running 1 test");
    run();
    println!("test {NAME} ... ok");
}
