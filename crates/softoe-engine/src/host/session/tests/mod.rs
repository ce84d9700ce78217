#![allow(clippy::unwrap_used)]

mod commands;

use super::wake::publish;
use super::*;
use crate::emulate::Emulation;
use crate::host::sys::{EventFd, Mapping};
use softoe_abi::Layout;
use softoe_abi::{EV_READABLE, EV_WRITABLE, RingSpan, SockKind};
use softoe_wire::Ipv4Address;

/// Regression (CI hang): an overlap send was refused, the peer's ACK
/// then freed the copy ring in the same engine turn, and `EV_WRITABLE`
/// had never been cleared; the events did not change, the sequence did
/// not move, and the program waited for ever. Progress must move the
/// sequence even when the events stay the same.
#[test]
fn progress_moves_the_sequence_without_an_event_change() {
    let layout = Layout::new(4, 4, 2, 4096).unwrap();
    let mut mem = vec![0u128; layout.region_len() as usize / 16];
    // SAFETY: `mem` is zeroed, 16-aligned, `region_len` bytes, outlives
    // `region`, and nothing else uses it.
    let region = unsafe { Region::init(mem.as_mut_ptr().cast(), layout, 1) };
    let view = region.slot(0).unwrap();
    let span = RingSpan { offset: 0, len: 0 };
    let mut s = HSock::new(SockKind::Tcp, span, span);
    let mut m = AccessMeter::default();
    let mut clock = 0;
    assert!(publish(
        &mut s,
        &view,
        EV_WRITABLE,
        false,
        &mut m,
        &mut clock
    ));
    let seq = view.seq();
    // Nothing new: nothing moves, and the program's memory is not
    // written (no access counted).
    assert!(!publish(
        &mut s,
        &view,
        EV_WRITABLE,
        false,
        &mut m,
        &mut clock
    ));
    assert_eq!(view.seq(), seq);
    assert_eq!(m.accesses(), 1);
    // Space freed, same events: the sequence moves, the events stay.
    assert!(!publish(
        &mut s,
        &view,
        EV_WRITABLE,
        true,
        &mut m,
        &mut clock
    ));
    assert_ne!(view.seq(), seq);
    assert_eq!(view.events(), EV_WRITABLE);
    assert_eq!(m.accesses(), 2);
}

/// Each slot keeps the event count of the first change a reader (or a
/// writer) waits for since the program took it: two sockets that became
/// readable one after the other say which was first, whatever else
/// happened to them after; room freed stamps only the writer's side.
#[test]
fn slots_say_which_became_ready_first() {
    let layout = Layout::new(4, 4, 2, 4096).unwrap();
    let mut mem = vec![0u128; layout.region_len() as usize / 16];
    // SAFETY: as above.
    let region = unsafe { Region::init(mem.as_mut_ptr().cast(), layout, 1) };
    let (va, vb) = (region.slot(0).unwrap(), region.slot(1).unwrap());
    let span = RingSpan { offset: 0, len: 0 };
    let mut a = HSock::new(SockKind::Tcp, span, span);
    let mut b = HSock::new(SockKind::Tcp, span, span);
    let mut m = AccessMeter::default();
    let mut clock = 0;
    // Both writable; a's room is freed again later: writers only.
    publish(&mut a, &va, EV_WRITABLE, false, &mut m, &mut clock);
    publish(&mut b, &vb, EV_WRITABLE, false, &mut m, &mut clock);
    let _ = (va.take_stamps(), vb.take_stamps());
    publish(&mut a, &va, EV_WRITABLE, true, &mut m, &mut clock);
    // b's bytes arrive first, then a's, then more for b.
    b.rx_tail = 10;
    publish(
        &mut b,
        &vb,
        EV_WRITABLE | EV_READABLE,
        true,
        &mut m,
        &mut clock,
    );
    a.rx_tail = 5;
    publish(
        &mut a,
        &va,
        EV_WRITABLE | EV_READABLE,
        true,
        &mut m,
        &mut clock,
    );
    b.rx_tail = 20;
    publish(
        &mut b,
        &vb,
        EV_WRITABLE | EV_READABLE,
        true,
        &mut m,
        &mut clock,
    );
    let ((a_rx, a_tx), (b_rx, b_tx)) = (va.take_stamps(), vb.take_stamps());
    assert!(
        b_rx != 0 && a_rx != 0 && b_rx < a_rx,
        "b first: {b_rx} < {a_rx}"
    );
    assert!(a_tx != 0 && a_tx < b_rx, "a's room came before any byte");
    assert_eq!(b_tx, 0, "b's writer saw nothing new");
    // Taken: nothing until the next change.
    assert_eq!(va.take_stamps(), (0, 0));
    a.rx_tail = 6;
    publish(
        &mut a,
        &va,
        EV_WRITABLE | EV_READABLE,
        true,
        &mut m,
        &mut clock,
    );
    assert!(va.take_stamps().0 > a_rx);
}

/// A session on a fresh region, as `attach` makes one (without the
/// program), and what its steps need.
struct Rig {
    s: Session,
    stack: Stack,
    cfg: HostConfig,
    owner: HashMap<SocketHandle, usize>,
    shares: Shares,
    scratch: Vec<u8>,
    mem: Memory,
}

impl Rig {
    fn new(layout: Layout, e: &Emulation) -> Rig {
        let (memfd, map) = Mapping::memfd("softoe-test", layout.region_len() as usize).unwrap();
        let (conn, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
        let pid = std::process::id() as i32;
        let fds = Fds::new(
            pid,
            conn.into(),
            (memfd, map),
            EventFd::new().unwrap(),
            EventFd::new().unwrap(),
        );
        let mut s = Session::open(1, (pid, 0), layout, fds).unwrap();
        s.meter.set(e);
        let cfg = softoe_stack::StackConfig::new(
            softoe_wire::EthernetAddress([2, 0, 0, 0, 0, 1]),
            softoe_wire::Ipv4Cidr::new(Ipv4Address([10, 9, 0, 1]), 24).unwrap(),
        );
        Rig {
            s,
            stack: Stack::new(cfg).unwrap(),
            cfg: HostConfig::default(),
            owner: HashMap::new(),
            shares: Shares::new(),
            scratch: Vec::new(),
            mem: Memory::new(),
        }
    }

    /// The program posts `cmds`; the engine takes a step.
    fn step(&mut self, cmds: &[Command]) {
        let mut p = self.s.region.command_producer();
        for c in cmds {
            p.push(c).unwrap();
        }
        let now = Instant::from_nanos(1_000_000);
        self.s.step(&mut Ctx {
            now,
            stack: &mut self.stack,
            cfg: &self.cfg,
            slot: 0,
            owner: &mut self.owner,
            shares: &mut self.shares,
            scratch: &mut self.scratch,
            mem: &mut self.mem,
        });
    }

    /// The program reads its completions; how many.
    fn reap(&self) -> usize {
        let mut c = self.s.region.completion_consumer();
        let mut n = 0;
        while c.pop().unwrap().is_some() {
            n += 1;
        }
        n
    }
}

/// Every access to the program's memory is counted where it happens,
/// and only when it happens: a command taken, a completion published
/// (not one held back while the ring is full: that one counts when it
/// gets in), a socket's events written, a doorbell rung (only for a
/// program that waits). With a delay, each waits at least that long.
#[test]
fn every_ring_access_is_counted_once() {
    let delay = std::time::Duration::from_micros(1);
    let layout = Layout::new(16, 4, 4, 1 << 16).unwrap();
    let mut r = Rig::new(layout, &Emulation::new(delay, false));
    let nops: Vec<Command> = (0..10).map(Command::nop).collect();
    // Ten commands; four completions fit, six wait.
    r.step(&nops);
    assert_eq!(r.s.meter.accesses(), 10 + 4);
    assert_eq!(r.s.overflow.len(), 6);
    assert_eq!(r.reap(), 4);
    // The waiting ones go in as room comes.
    r.step(&[]);
    assert_eq!(r.s.meter.accesses(), 14 + 4);
    assert_eq!(r.reap(), 4);
    r.step(&[]);
    assert_eq!(r.s.meter.accesses(), 18 + 2);
    assert_eq!(r.reap(), 2);
    // A waiting program is woken: its doorbell is one more.
    r.s.region.app_waiting().store(1, Ordering::SeqCst);
    r.step(&[Command::nop(10)]);
    assert_eq!(r.s.meter.accesses(), 20 + 2 + 1);
    assert_eq!(r.reap(), 1);
    r.s.region.app_waiting().store(0, Ordering::SeqCst);
    // A socket: the command and its completion (its slot's events wait
    // for an address: a socket not yet bound or connected says nothing).
    r.step(&[Command::socket(11, SockKind::Udp, (0, 4096), (0, 0))]);
    assert_eq!(r.s.meter.accesses(), 23 + 2);
    assert_eq!(r.reap(), 1);
    assert!(r.s.meter.delay_nanos() >= 25 * delay.as_nanos() as u64);
    // The engine collects the counts; the meter starts again.
    let mut c = crate::counters::EngineCounters::default();
    r.s.meter.drain_into(&mut c);
    assert_eq!(c.ring_accesses, 25);
    assert!(c.access_delay_nanos >= 25 * delay.as_nanos() as u64);
    assert_eq!(c.stages, Default::default(), "stages are not timed");
    assert_eq!(r.s.meter.accesses(), 0);
}

/// With stages profiled, each command is one run of `cmd` (its bytes:
/// what a send handed over) and each socket served one run of `serve`.
#[test]
fn commands_and_serves_are_timed_when_profiled() {
    let layout = Layout::new(16, 16, 4, 1 << 16).unwrap();
    let mut r = Rig::new(layout, &Emulation::new(std::time::Duration::ZERO, true));
    r.step(&[Command::socket(1, SockKind::Udp, (0, 4096), (0, 0))]);
    // A datagram of 1000 bytes from the data area (`overlap`: the
    // engine copies it) to a peer on the subnet.
    let to = u64::from(u32::from_be_bytes([10, 9, 0, 2]).to_be());
    let send = Command::new(
        softoe_abi::Opcode::Send,
        softoe_abi::SEND_OVERLAP,
        0,
        2,
        [8192, 1000, to, 9, 0, 0],
    );
    r.step(&[send, Command::nop(3)]);
    let mut c = crate::counters::EngineCounters::default();
    r.s.meter.drain_into(&mut c);
    assert_eq!(r.reap(), 3);
    assert_eq!((c.stages.cmd.count, c.stages.cmd.bytes), (3, 1000));
    // Once after the socket was made, once after the send (the NOP
    // names the same socket: served once a step).
    assert_eq!(c.stages.serve.count, 2, "{:?}", c.stages);
    assert_eq!(c.stages.serve.bytes, 0, "nothing was received");
    assert_eq!(c.access_delay_nanos, 0);
}

/// A server holding 10,000 sockets whose low ids come and go: every new id
/// is the lowest free one, and finding it reads a few words of the id
/// bitmap however many sockets are open (the search from a hint walked
/// every open socket above a refilled hole, 10,000 slots per accept).
#[test]
fn a_new_id_costs_the_same_among_ten_thousand() {
    let layout = Layout::new(64, 64, 10_064, 1 << 16).unwrap();
    let mut s = SessionCore::local(1, Local::new(layout, 0));
    let span = RingSpan { offset: 0, len: 0 };
    let open = |s: &mut SessionCore<Local>| {
        let id = s.new_id().unwrap();
        s.install(id, HSock::new(SockKind::Tcp, span, span));
        id
    };
    for i in 0..10_000 {
        assert_eq!(open(&mut s), i);
    }
    for hole in [5u32, 4_000, 9_998] {
        s.forget(hole);
        assert_eq!(open(&mut s), hole, "the hole is the lowest free id");
        assert_eq!(s.new_id().unwrap(), 10_000);
        assert!(s.ids.read() <= 4, "{} words read", s.ids.read());
    }
    for i in 10_000..10_064 {
        assert_eq!(open(&mut s), i);
    }
    assert_eq!(s.new_id(), Err(errno::EMFILE));
    assert_eq!(s.stat().sockets, 10_064);
}

/// A datagram's header goes into the ring as the bytes the program's
/// reader takes it back from (`read_unaligned` of a `UdpHeader`, as the
/// shim reads it).
#[test]
fn udp_header_bytes_read_back_as_the_header() {
    use softoe_abi::UdpHeader;
    let h = UdpHeader {
        len: 0x0102_0304,
        port: 0x0506,
        addr: 0x0708_090a,
        ..UdpHeader::default()
    };
    let b = recv::udp_header_bytes(&h);
    // SAFETY: `b` holds `size_of::<UdpHeader>()` bytes, and every bit
    // pattern is a valid `UdpHeader` (plain integers).
    let back: UdpHeader = unsafe { std::ptr::read_unaligned(b.as_ptr().cast()) };
    assert_eq!(back, h);
}
