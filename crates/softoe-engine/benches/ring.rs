//! One command's round trip through the host interface's rings, with and
//! without a sleeping peer: `cargo bench -p softoe-engine --bench ring`.
//!
//! Every case times one `NOP`: the program posts a 64-byte command on the
//! command ring and waits for its 32-byte completion on the completion ring.
//! A NOP does no work, so what is timed is the interface itself — the cost
//! every socket call through the engine pays before doing anything.
//!
//! - `in-process/*`: no engine. Two threads share one region (made with the
//!   engine's own sealed-memfd constructor and `Region::init`); one posts
//!   and waits, the other consumes and answers at once. `both-spin` is the
//!   rings' own cost: the index and record cache lines crossing between two
//!   cores and back. `both-sleep-eventfd` rings an eventfd doorbell every
//!   time in both directions and sleeps in `poll` on each side: the kernel's
//!   own floor for two wake-ups, with no engine turn around it.
//! - `engine/*`: a real engine thread with the host interface (on a TAP in a
//!   namespace of its own, left down, so nothing but the benchmark wakes it)
//!   and a real `softoe_host::Client` attached over the Unix socket and the
//!   shared region, timing `Client::nop()`:
//!   - `both-spin`: the engine spins for seconds before sleeping and the
//!     client spins while it waits: the round trip through the rings plus
//!     the engine's turn (a TAP read, timers, every session's rings) and the
//!     client's bookkeeping (locks, the tag table);
//!   - `engine-sleeps`: the engine's spin is 0, so it sleeps in `ppoll` after
//!     every idle turn and each command must ring its doorbell and wake it;
//!     the client spins;
//!   - `client-sleeps`: the engine spins; the client's spin is 0, so it
//!     sleeps on its doorbell at once and each completion must ring it;
//!   - `both-sleep`: both; two wake-ups per round trip.
//!
//! Where a peer sleeps, each timed round trip follows an untimed 50 µs gap
//! (`$SOFTOE_RING_GAP_US`; the benchmark thread spins through it): back to
//! back, a peer that has just answered is often caught before it has gone
//! to sleep — a first version without the gap found the spin-0 engine
//! asleep for only half the commands — and the case would time a mix of
//! wake-ups and ring round trips.
//!
//! The machine this was written on has two cores. A spinning side needs a
//! core of its own, and that is the point of the spinning cases: with both
//! spinning, the engine and the benchmark thread each hold one core and the
//! round trip is pure cache-line transfer; anything else running on the
//! machine (a build) takes a core from one of them and shows up as
//! scheduler delay: on this machine with another developer's tests running,
//! a spinning round trip took milliseconds (a time slice), so run it on a
//! quiet machine. The engine thread (and the in-process
//! answerer) is pinned to core 1 and the benchmark's thread to core 0, as
//! softoe's engine core is meant to be its own: every wake-up is then a
//! wake-up of the other core, as it would be in service. After each case the benchmark prints, per round trip,
//! how often the engine slept and rang the client's doorbell (from the
//! engine's counters) and how often the benchmark thread really slept (its
//! voluntary context switches: a doorbell found already rung costs none),
//! so a case that did not do what its name says shows it.
//!
//! The engine cases need root (namespaces and a TAP device); without it they
//! are skipped with a message and only the in-process cases run.
//! Benchmarks print figures; they never assert them.

#![allow(
    unsafe_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs
)]

mod common;

use std::os::fd::RawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use criterion::{
    BenchmarkGroup, Criterion, criterion_group, criterion_main, measurement::WallTime,
};
use softoe_abi::{Command, Completion, Layout, Region};
use softoe_engine::host::sys::{EventFd, Mapping};
use softoe_engine::{EngineCounters, Snapshot};
use softoe_host::{Client, Config};

use common::{BENCH_CPU, ENGINE_CPU, EngineBed, is_root, pin};

/// "Spin for as long as it takes": far longer than any gap between two
/// round trips, so a spinning side never sleeps while it is measured.
const SPIN: Duration = Duration::from_secs(5);

/// A region in shared memory, as the engine makes one for a session.
struct Shared {
    region: Region,
    // `region` points into it: dropped after everything using `region`.
    _map: Mapping,
}

fn shared() -> Shared {
    // The client's default ring sizes; a NOP touches nothing else.
    let layout = Layout::new(1024, 4096, 16, 1 << 16).expect("layout");
    let len = usize::try_from(layout.region_len()).expect("region size");
    let (_fd, map) = Mapping::memfd("softoe-bench-ring", len).expect("memfd");
    // SAFETY: the mapping is `region_len` bytes, page-aligned, zeroed (a
    // fresh memfd), lives in `Shared` beside the view and is dropped only
    // after both threads using the view have been joined; nobody else uses
    // it yet.
    let region = unsafe { Region::init(map.ptr(), layout, 1) };
    Shared { region, _map: map }
}

/// Sleeps until `fd` is readable (or a 10 ms timeout, so a stop request is
/// seen).
fn wait_readable(fd: RawFd) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    let _ = unsafe { libc::poll(&raw mut p, 1, 10) };
}

/// Answers every command on `region` with a completion of the same tag,
/// until `stop`. With `bells`, sleeps on the first between commands and
/// rings the second after each answer; without, spins.
fn answerer(region: Region, stop: &AtomicBool, bells: Option<(&EventFd, &EventFd)>) {
    let mut cmds = region.command_consumer();
    let mut cmps = region.completion_producer();
    while !stop.load(Ordering::Relaxed) {
        match cmds.pop().expect("command ring") {
            Some(c) => {
                cmps.push(&Completion {
                    tag: c.tag,
                    ..Completion::default()
                })
                .expect("completion ring");
                if let Some((_, to_poster)) = bells {
                    to_poster.signal();
                }
            }
            None => match bells {
                Some((from_poster, _)) => {
                    wait_readable(from_poster.raw());
                    from_poster.drain();
                }
                None => std::hint::spin_loop(),
            },
        }
    }
}

/// The rings alone: two threads in this process, no engine.
fn in_process(g: &mut BenchmarkGroup<'_, WallTime>, sleeping: bool) {
    let sh = shared();
    let stop = AtomicBool::new(false);
    let to_answerer = EventFd::new().expect("eventfd");
    let to_poster = EventFd::new().expect("eventfd");
    let name = if sleeping {
        "in-process/both-sleep-eventfd"
    } else {
        "in-process/both-spin"
    };
    std::thread::scope(|s| {
        let region = sh.region;
        let bells = sleeping.then_some((&to_answerer, &to_poster));
        let stop = &stop;
        let t = s.spawn(move || {
            pin(ENGINE_CPU);
            answerer(region, stop, bells)
        });
        let mut cmds = sh.region.command_producer();
        let mut cmps = sh.region.completion_consumer();
        let mut tag = 0u64;
        let mut round_trip = || {
            tag += 1;
            cmds.push(&Command::nop(tag)).expect("command ring");
            if sleeping {
                to_answerer.signal();
            }
            loop {
                if let Some(c) = cmps.pop().expect("completion ring") {
                    assert_eq!(c.tag, tag, "answers come in order");
                    break;
                }
                if sleeping {
                    wait_readable(to_poster.raw());
                    to_poster.drain();
                } else {
                    std::hint::spin_loop();
                }
            }
        };
        let switches = voluntary_switches();
        g.bench_function(name, |b| {
            if sleeping {
                b.iter_custom(|n| timed_after_gaps(n, &mut round_trip));
            } else {
                b.iter(&mut round_trip);
            }
        });
        let switches = voluntary_switches().saturating_sub(switches);
        if tag > 0 {
            println!(
                "{:<24}{tag} round trips; per round trip: poster sleeps {:.3}",
                "",
                switches as f64 / tag as f64
            );
        }
        stop.store(true, Ordering::Relaxed);
        to_answerer.signal();
        t.join().expect("answerer");
    });
}

/// Untimed, spinning, before each timed round trip in the cases where a
/// peer sleeps: long enough for it to finish its turn and go to sleep, so
/// the round trip must wake it (see the top of this file). 50 µs, or
/// `$SOFTOE_RING_GAP_US`.
fn gap() -> Duration {
    let us = std::env::var("SOFTOE_RING_GAP_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    Duration::from_micros(us)
}

/// Runs `round_trip` `n` times, each after a [`gap`], and returns the time
/// spent in the round trips alone.
fn timed_after_gaps(n: u64, round_trip: &mut impl FnMut()) -> Duration {
    let gap = gap();
    let mut total = Duration::ZERO;
    for _ in 0..n {
        let t = Instant::now();
        while t.elapsed() < gap {
            std::hint::spin_loop();
        }
        let t = Instant::now();
        round_trip();
        total += t.elapsed();
    }
    total
}

/// Times the calling thread has blocked in the kernel (a real sleep, not a
/// doorbell found already rung), from `/proc/thread-self/status`.
fn voluntary_switches() -> u64 {
    std::fs::read_to_string("/proc/thread-self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn attach(host: &Path, spin: Duration) -> Client {
    Client::attach_with(Config {
        path: host.to_path_buf(),
        spin,
        // A NOP needs no data area; keep the region small.
        data_len: 1 << 20,
        ..Config::default()
    })
    .expect("attach to the engine")
}

/// What the engine counted for one session: (engine counters, the
/// session's commands, doorbells rung for it).
fn counts(snap: &Snapshot, session: u32) -> (EngineCounters, u64, u64) {
    let s = snap.sessions.iter().find(|s| s.id == session);
    (
        snap.engine,
        s.map_or(0, |s| s.commands),
        s.map_or(0, |s| s.wakeups),
    )
}

/// Times `Client::nop()` on `bed`'s engine with a client spinning `spin`
/// (each after a [`gap`] when `engine_sleeps`), then prints how often each
/// side slept per round trip.
fn engine_case(
    g: &mut BenchmarkGroup<'_, WallTime>,
    bed: &EngineBed,
    name: &str,
    spin: Duration,
    engine_sleeps: bool,
) {
    let client = attach(&bed.host, spin);
    let session = client.session();
    // The session's counters are refreshed once a millisecond.
    std::thread::sleep(Duration::from_millis(5));
    let before = counts(&bed.snapshot(), session);
    let switches = voluntary_switches();
    let mut round_trip = || client.nop().expect("NOP");
    g.bench_function(name, |b| {
        if engine_sleeps {
            b.iter_custom(|n| timed_after_gaps(n, &mut round_trip));
        } else {
            b.iter(&mut round_trip);
        }
    });
    let switches = voluntary_switches().saturating_sub(switches) as f64;
    std::thread::sleep(Duration::from_millis(5));
    let after = counts(&bed.snapshot(), session);
    let nops = after.1.saturating_sub(before.1);
    if nops == 0 {
        // Filtered out on the command line.
        return;
    }
    let nops = nops as f64;
    let sleeps = after.0.sleeps.saturating_sub(before.0.sleeps) as f64;
    let turns = after.0.turns.saturating_sub(before.0.turns) as f64;
    let rung = after.2.saturating_sub(before.2) as f64;
    println!(
        "{:<24}{nops:.0} round trips; per round trip: engine turns {:.1}, \
         engine sleeps {:.3}, client doorbells rung {:.3}, client sleeps {:.3}",
        "",
        turns / nops,
        sleeps / nops,
        rung / nops,
        switches / nops,
    );
    drop(client);
}

fn bench(c: &mut Criterion) {
    pin(BENCH_CPU);
    let mut g = c.benchmark_group("nop-round-trip");
    // No engine yet: the in-process cases have both cores to themselves.
    in_process(&mut g, false);
    in_process(&mut g, true);
    if !is_root() {
        eprintln!(
            "ring: the engine/* cases need root (a TAP device in a network \
             namespace) and were skipped; run `sudo cargo bench -p softoe-engine --bench ring`"
        );
        g.finish();
        return;
    }
    {
        let bed = EngineBed::start(SPIN);
        engine_case(&mut g, &bed, "engine/both-spin", SPIN, false);
        engine_case(&mut g, &bed, "engine/client-sleeps", Duration::ZERO, false);
    }
    {
        let bed = EngineBed::start(Duration::ZERO);
        engine_case(&mut g, &bed, "engine/engine-sleeps", SPIN, true);
        engine_case(&mut g, &bed, "engine/both-sleep", Duration::ZERO, true);
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
