//! The session core driven through its command ring against a real stack
//! and a peer stack (`Sim`): no descriptors, no root, no namespaces.

use std::time::Duration;

use softoe_abi::{
    CMP_RELEASE, Command, Completion, EV_ACCEPT, EV_CONNECTED, EV_HELD, EV_HUP, EV_READABLE,
    EV_RXFULL, EV_WRITABLE, Layout, Opcode, RECV_REMOTE, RingSpan, SEND_REMOTE, SEND_RING,
    SockKind, errno, pack_addr, waiter_word,
};
use softoe_stack::{Endpoint, PayloadRef, SocketHandle, State};
use softoe_wire::Ipv4Address;

use crate::host::session::Shares;
use crate::host::session::sim::{ENGINE_IP, PEER_IP, Sim};

const RING: u64 = 1 << 16;
const PEER_PORT: u16 = 7000;
const ENGINE_PORT: u16 = 8000;

fn sim() -> Sim {
    Sim::new(Layout::new(64, 64, 16, 1 << 20).unwrap(), 1 << 16).unwrap()
}

/// An address as the program writes it in a command.
fn addr(a: Ipv4Address) -> u64 {
    u64::from(a.to_bits().to_be())
}

/// Socket `n`'s rings in the data area: receive, then send.
fn rings(n: u64) -> (RingSpan, RingSpan) {
    let rx = RingSpan {
        offset: 2 * n * RING,
        len: RING,
    };
    let tx = RingSpan {
        offset: (2 * n + 1) * RING,
        len: RING,
    };
    (rx, tx)
}

fn socket(tag: u64, kind: SockKind, n: u64) -> Command {
    let (rx, tx) = rings(n);
    Command::socket(tag, kind, (rx.offset, rx.len), (tx.offset, tx.len))
}

fn cmd(op: Opcode, sock: u32, tag: u64, args: [u64; 6]) -> Command {
    Command::new(op, 0, sock, tag, args)
}

/// Posts `cmds`, turns until every one of them is answered (at most 50
/// turns), and returns the completions in order.
fn exchange(s: &mut Sim, cmds: &[Command]) -> Vec<Completion> {
    assert_eq!(s.post(cmds), cmds.len());
    let mut got = Vec::new();
    for _ in 0..50 {
        s.turn(Duration::from_millis(1));
        got.extend(s.reap());
        if cmds.iter().all(|c| got.iter().any(|d| d.tag == c.tag)) {
            break;
        }
    }
    got
}

fn answer(got: &[Completion], tag: u64) -> Completion {
    *got.iter()
        .find(|c| c.tag == tag && c.flags & CMP_RELEASE == 0)
        .unwrap_or_else(|| panic!("no completion for tag {tag} in {got:?}"))
}

/// The peer's bytes from connection `h`.
fn peer_read(s: &mut Sim, h: SocketHandle) -> Vec<u8> {
    let mut v = Vec::new();
    let _ = s.peer.tcp_recv_with(h, |a, b| {
        v.extend_from_slice(a);
        v.extend_from_slice(b);
        (a.len() + b.len(), ())
    });
    v
}

/// The program's socket 0 connected to a listener on the peer: the
/// session's socket id, and the peer's end.
fn connected(s: &mut Sim) -> (u32, SocketHandle) {
    let l = s
        .peer
        .tcp_listen(Endpoint::new(PEER_IP, PEER_PORT), 8, None)
        .unwrap();
    let got = exchange(s, &[socket(1, SockKind::Tcp, 0)]);
    let id = answer(&got, 1).result as u32;
    let got = exchange(
        s,
        &[cmd(
            Opcode::Connect,
            id,
            2,
            [addr(PEER_IP), u64::from(PEER_PORT), 0, 0, 0, 0],
        )],
    );
    let c = answer(&got, 2);
    assert_eq!(c.result, 0, "{c:?}");
    let (_, port) = softoe_abi::unpack_addr(c.aux);
    assert_ne!(port, 0, "the connect completion carries the local address");
    s.peer_poll();
    let h = s
        .peer
        .tcp_accept(l)
        .unwrap()
        .expect("the peer has the connection");
    (id, h)
}

/// A socket made and not yet connected publishes nothing: the slot said
/// `EV_WRITABLE` from the turn after `SOCKET` until the engine read the
/// `CONNECT`, and a program that polled a non-blocking connect in between
/// (about half of fresh processes did) took SYN-SENT for connected. (The
/// shim answers for a socket it has not given an address itself, as
/// Linux's: writable and hung up.)
#[test]
fn a_socket_not_yet_connected_is_not_writable() {
    let mut s = sim();
    let got = exchange(&mut s, &[socket(1, SockKind::Tcp, 0)]);
    let id = answer(&got, 1).result as u32;
    for _ in 0..3 {
        s.turn(Duration::from_millis(1));
    }
    let region = s.core.region();
    let slot = region.slot(id).unwrap();
    assert_eq!(slot.events(), 0, "events of a socket not yet connected");
}

#[test]
fn socket_connect_send_receive_close() {
    let mut s = sim();
    let (id, ph) = connected(&mut s);
    let region = s.core.region();
    let slot = region.slot(id).unwrap();
    assert_eq!(
        slot.events() & (EV_CONNECTED | EV_WRITABLE),
        EV_CONNECTED | EV_WRITABLE
    );
    assert_eq!(
        slot.remote(),
        pack_addr(PEER_IP.to_bits().to_be(), PEER_PORT)
    );

    // Send from the ring: the program writes, then says how much.
    let out = b"hello from the program";
    let (rx, tx) = rings(0);
    assert!(region.ring_write(tx, 0, out));
    let got = exchange(
        &mut s,
        &[Command::new(
            Opcode::Send,
            SEND_RING,
            id,
            3,
            [0, out.len() as u64, 0, 0, 0, 0],
        )],
    );
    assert_eq!(answer(&got, 3).result, out.len() as i64);
    s.run(5);
    assert_eq!(peer_read(&mut s, ph), out);
    // The peer's delayed ACK comes within its timer.
    s.run(250);
    assert_eq!(
        slot.tx_acked(),
        out.len() as u64,
        "acknowledged bytes are released"
    );

    // Receive into the ring.
    let back = b"and hello back";
    let r = s.peer_mem.add(back.to_vec().into_boxed_slice());
    s.peer
        .tcp_send(ph, PayloadRef::new(r, 0, back.len() as u32))
        .unwrap();
    s.peer_poll();
    s.run(5);
    assert_eq!(slot.rx_tail(), back.len() as u64);
    assert_ne!(slot.events() & EV_READABLE, 0);
    let mut buf = vec![0u8; back.len()];
    assert!(region.ring_read(rx, 0, &mut buf));
    assert_eq!(buf, back);

    // Close: answered at once, released once the peer has everything.
    let got = exchange(&mut s, &[cmd(Opcode::Close, id, 4, [0; 6])]);
    assert_eq!(answer(&got, 4).result, 0);
    s.peer_poll();
    s.run(5);
    assert_eq!(
        s.peer.tcp_recv_with(ph, |a, _| (a.len(), ())).err(),
        Some(softoe_stack::RecvError::Finished),
        "the peer saw the FIN"
    );
    assert_eq!(s.core.stat().sockets, 0);
    s.finish();
}

#[test]
fn bind_listen_accept() {
    let mut s = sim();
    let got = exchange(
        &mut s,
        &[
            socket(1, SockKind::Tcp, 0),
            cmd(
                Opcode::Bind,
                0,
                2,
                [addr(ENGINE_IP), u64::from(ENGINE_PORT), 0, 0, 0, 0],
            ),
            cmd(Opcode::Listen, 0, 3, [16, 0, 0, 0, 0, 0]),
        ],
    );
    assert_eq!(answer(&got, 1).result, 0);
    assert_eq!(answer(&got, 2).result, 0);
    assert_eq!(
        answer(&got, 2).aux,
        pack_addr(ENGINE_IP.to_bits().to_be(), ENGINE_PORT)
    );
    assert_eq!(answer(&got, 3).result, 0);
    // Nobody waits yet.
    let (rx, tx) = rings(1);
    let accept = |tag| {
        cmd(
            Opcode::Accept,
            0,
            tag,
            [0, rx.offset, rx.len, tx.offset, tx.len, 0],
        )
    };
    let got = exchange(&mut s, &[accept(4)]);
    assert_eq!(answer(&got, 4).result, -i64::from(errno::EAGAIN));

    let now = s.now;
    let ph = s
        .peer
        .tcp_connect(now, Endpoint::new(ENGINE_IP, ENGINE_PORT), None, None)
        .unwrap();
    s.peer_poll();
    s.run(5);
    let region = s.core.region();
    assert_ne!(region.slot(0).unwrap().events() & EV_ACCEPT, 0);
    let got = exchange(&mut s, &[accept(5)]);
    let c = answer(&got, 5);
    assert_eq!(c.result, 1, "the connection is socket 1");
    let info = s.peer.tcp_info(ph).unwrap();
    assert_eq!(
        c.aux,
        pack_addr(PEER_IP.to_bits().to_be(), info.local.port),
        "the accept completion carries the peer's address"
    );
    s.run(2);
    assert_ne!(region.slot(1).unwrap().events() & EV_CONNECTED, 0);
    s.finish();
}

#[test]
fn bad_commands_are_refused_one_by_one() {
    let mut s = sim();
    let got = exchange(
        &mut s,
        &[
            // No such socket.
            cmd(Opcode::Listen, 9, 1, [1, 0, 0, 0, 0, 0]),
            // Not an opcode.
            Command {
                opcode: 999,
                tag: 2,
                ..Command::nop(2)
            },
            // A ring outside the data area.
            Command::socket(3, SockKind::Tcp, (1 << 30, RING), (0, 0)),
            socket(4, SockKind::Udp, 0),
            // A UDP socket does not listen.
            cmd(Opcode::Listen, 0, 5, [1, 0, 0, 0, 0, 0]),
            // A TCP send with no connection.
            socket(6, SockKind::Tcp, 1),
            Command::new(Opcode::Send, SEND_RING, 1, 7, [0, 10, 0, 0, 0, 0]),
        ],
    );
    assert_eq!(answer(&got, 1).result, -i64::from(errno::EBADF));
    assert!(answer(&got, 2).result < 0);
    assert_eq!(answer(&got, 3).result, -i64::from(errno::EFAULT));
    assert_eq!(answer(&got, 4).result, 0);
    assert_eq!(answer(&got, 5).result, -i64::from(errno::EOPNOTSUPP));
    assert_eq!(answer(&got, 6).result, 1);
    assert_eq!(answer(&got, 7).result, -i64::from(errno::ENOTCONN));
    let st = s.core.stat();
    assert_eq!((st.commands, st.rejected, st.sockets), (7, 5, 2));
    s.finish();
}

/// `SEND_REMOTE` reads the program's own memory and `RECV_REMOTE` writes
/// it, through the `Program` trait (`process_vm_*` for a real program).
#[test]
fn remote_send_and_direct_placement() {
    let mut s = sim();
    let (id, ph) = connected(&mut s);
    let out = b"bytes from the program's heap";
    s.core.program().memory[100..100 + out.len()].copy_from_slice(out);
    let got = exchange(
        &mut s,
        &[Command::new(
            Opcode::Send,
            SEND_REMOTE,
            id,
            3,
            [100, out.len() as u64, 0, 0, 0, 0],
        )],
    );
    assert_eq!(answer(&got, 3).result, out.len() as i64);
    s.run(5);
    assert_eq!(peer_read(&mut s, ph), out);

    // A posted buffer at 4000 of the program's memory.
    let got = exchange(&mut s, &[]);
    assert!(got.is_empty());
    assert_eq!(
        s.post(&[Command::new(
            Opcode::Recv,
            RECV_REMOTE,
            id,
            4,
            [4000, 64, 0, 0, 0, 0]
        )]),
        1
    );
    s.run(1);
    assert!(s.reap().is_empty(), "nothing to place yet");
    let back = b"placed where the program reads it";
    let r = s.peer_mem.add(back.to_vec().into_boxed_slice());
    s.peer
        .tcp_send(ph, PayloadRef::new(r, 0, back.len() as u32))
        .unwrap();
    s.peer_poll();
    s.run(5);
    let got = s.reap();
    assert_eq!(answer(&got, 4).result, back.len() as i64);
    assert_eq!(&s.core.program().memory[4000..4000 + back.len()], back);
    assert_eq!(s.core.stat().direct, back.len() as u64);
    // Past the end of the program's memory: a fault, not a crash.
    let got = exchange(
        &mut s,
        &[Command::new(
            Opcode::Send,
            SEND_REMOTE,
            id,
            5,
            [1 << 40, 10, 0, 0, 0, 0],
        )],
    );
    assert_eq!(answer(&got, 5).result, -i64::from(errno::EFAULT));
    s.finish();
}

/// A program that waits is woken through its doorbells: its waiter's bell
/// when the socket it sleeps on changes, the session's when it waits on
/// completions.
#[test]
fn waiters_are_woken_through_the_program() {
    let mut s = sim();
    s.core.program().waiter_rings = vec![0; 2];
    let (id, ph) = connected(&mut s);
    let region = s.core.region();
    // A reader asleep on socket `id` with bell 1.
    let slot = region.slot(id).unwrap();
    slot.waiter(false)
        .store(waiter_word(1, 1), std::sync::atomic::Ordering::SeqCst);
    let back = b"wake up";
    let r = s.peer_mem.add(back.to_vec().into_boxed_slice());
    s.peer
        .tcp_send(ph, PayloadRef::new(r, 0, back.len() as u32))
        .unwrap();
    s.peer_poll();
    s.run(3);
    assert_eq!(
        s.core.program().waiter_rings,
        vec![0, 1],
        "rung once per sleep"
    );
    // A thread waiting on completions, without a bell of its own.
    region
        .app_waiting()
        .store(1, std::sync::atomic::Ordering::SeqCst);
    let before = s.core.program().session_rings;
    exchange(&mut s, &[Command::nop(9)]);
    assert_eq!(s.core.program().session_rings, before + 1);
    region
        .app_waiting()
        .store(0, std::sync::atomic::Ordering::SeqCst);
    // An abortive close: the slot says hung up.
    exchange(&mut s, &[cmd(Opcode::Close, id, 10, [1, 0, 0, 0, 0, 0])]);
    assert_eq!(slot.events(), EV_HUP);
    s.finish();
}

/// The engine's end of the program's one connection.
fn engine_handle(s: &Sim) -> SocketHandle {
    let hs = s.core.handles();
    assert_eq!(hs.len(), 1, "one connection: {hs:?}");
    hs[0]
}

/// Received bytes are written into the socket's ring by the stack itself,
/// straight from the frames; what does not fit waits in the stack, comes
/// after them in order once the program has read, and the stack writes
/// straight again once it holds nothing.
#[test]
fn received_bytes_land_in_the_ring_straight_from_the_stack() {
    let mut s = sim();
    let (id, ph) = connected(&mut s);
    let eh = engine_handle(&s);
    let region = s.core.region();
    let slot = region.slot(id).unwrap();
    let (rx, _) = rings(0);
    let total = 3 * RING as usize + 1234;
    let data: Vec<u8> = (0..total).map(|i| (i * 13 % 251) as u8).collect();
    let r = s.peer_mem.add(data.clone().into_boxed_slice());
    let mut sent = 0;
    let mut got = Vec::new();
    let mut rxdone_tag = 100;
    for _ in 0..400 {
        if sent < total {
            let n = (total - sent).min(20_000);
            if let Ok(k) = s
                .peer
                .tcp_send(ph, PayloadRef::new(r, sent as u64, n as u32))
            {
                sent += k;
            }
        }
        s.peer_poll();
        s.turn(Duration::from_millis(1));
        // The program reads everything the ring holds, and says so when
        // the engine holds more than the ring took.
        let (head, tail) = (slot.rx_head(), slot.rx_tail());
        if tail > head {
            let mut buf = vec![0u8; (tail - head) as usize];
            assert!(region.ring_read(rx, head, &mut buf));
            got.extend_from_slice(&buf);
            slot.set_rx_head(tail);
            if slot.events() & EV_RXFULL != 0 {
                rxdone_tag += 1;
                assert_eq!(s.post(&[cmd(Opcode::RxDone, id, rxdone_tag, [0; 6])]), 1);
            }
        }
        if got.len() == total {
            break;
        }
    }
    assert_eq!(got.len(), total);
    assert!(got == data, "the bytes differ");
    let info = s.stack.tcp_info(eh).unwrap();
    assert_eq!(info.bytes_received, total as u64);
    assert!(
        info.bytes_sunk > total as u64 / 2,
        "most bytes went straight into the ring: {} of {total}",
        info.bytes_sunk
    );
    s.finish();
}

/// A buffer posted while the ring holds bytes the stack wrote since the
/// session last looked is refused: the program reads those first, and no
/// later byte overtakes them.
#[test]
fn a_post_is_refused_while_the_stack_has_written_into_the_ring() {
    let mut s = sim();
    let (id, ph) = connected(&mut s);
    let region = s.core.region();
    let slot = region.slot(id).unwrap();
    let first = b"first bytes, in the ring";
    let r = s.peer_mem.add(first.to_vec().into_boxed_slice());
    s.peer
        .tcp_send(ph, PayloadRef::new(r, 0, first.len() as u32))
        .unwrap();
    s.peer_poll();
    // The frames reach the engine's stack at the end of this turn, after
    // the session's step: the ring has them, the slot does not say so yet.
    s.turn(Duration::from_millis(1));
    assert_eq!(slot.rx_tail(), 0);
    let got = exchange(
        &mut s,
        &[Command::new(
            Opcode::Recv,
            RECV_REMOTE,
            id,
            9,
            [4000, 64, 0, 0, 0, 0],
        )],
    );
    assert_eq!(answer(&got, 9).result, -i64::from(errno::EAGAIN));
    assert_eq!(slot.rx_tail(), first.len() as u64);
    let mut buf = vec![0u8; first.len()];
    let (rx, _) = rings(0);
    assert!(region.ring_read(rx, 0, &mut buf));
    assert_eq!(buf, first);
    s.finish();
}

/// `TCP_NODELAY` posted quiet (no answer; the host does not wait for
/// one) governs the sends queued behind it: a second small send, a turn
/// after the first, leaves at once, where Nagle alone holds it until the
/// peer's delayed ACK. A quiet option for a socket the engine does not
/// know is answered, with its error, under tag 0.
#[test]
fn a_quiet_nodelay_applies_to_the_sends_behind_it() {
    for nodelay in [false, true] {
        let mut s = sim();
        let (id, ph) = connected(&mut s);
        let region = s.core.region();
        let (_, tx) = rings(0);
        assert!(region.ring_write(tx, 0, &[5u8; 20]));
        let mut cmds = Vec::new();
        if nodelay {
            cmds.push(Command::new(
                Opcode::SetOpt,
                softoe_abi::CMD_QUIET,
                id,
                0,
                [softoe_abi::SockOpt::NoDelay as u64, 1, 0, 0, 0, 0],
            ));
        }
        let send = |tag, at| Command::new(Opcode::Send, SEND_RING, id, tag, [at, 10, 0, 0, 0, 0]);
        cmds.push(send(3, 0));
        assert_eq!(s.post(&cmds), cmds.len());
        s.turn(Duration::from_millis(1));
        assert_eq!(s.post(&[send(4, 10)]), 1);
        s.turn(Duration::from_millis(1));
        let got = s.reap();
        assert!(
            got.iter().all(|c| c.tag != 0),
            "a quiet option that worked is not answered: {got:?}"
        );
        let want = if nodelay { 20 } else { 10 };
        assert_eq!(peer_read(&mut s, ph).len(), want, "nodelay {nodelay}");
        if nodelay {
            let bad = Command::new(
                Opcode::SetOpt,
                softoe_abi::CMD_QUIET,
                id + 100,
                0,
                [softoe_abi::SockOpt::NoDelay as u64, 1, 0, 0, 0, 0],
            );
            assert_eq!(s.post(&[bad]), 1);
            s.turn(Duration::from_millis(1));
            let got = s.reap();
            assert!(
                got.iter().any(|c| c.tag == 0 && c.result < 0),
                "the failure is answered: {got:?}"
            );
        }
        s.finish();
    }
}

/// Marking a socket never allocates, however many sockets are marked and
/// served: the turn's list and the spare that takes the marks made while
/// it is served are both made with room for every socket, and only swap.
/// (The spare was an empty `Vec` taken out of the session: a socket marked
/// while the others were served would have allocated, and the turn's list,
/// with its room, been dropped.)
#[test]
fn marking_and_serving_keep_both_lists_and_their_room() {
    let mut s = sim();
    let socks = s.core.region().layout().socks() as usize;
    let before = serve_lists(&s);
    // Every socket opened (its command marks it), then named by a command
    // each turn, so every one is served every turn.
    let open: Vec<Command> = (0..socks as u64)
        .map(|n| {
            Command::socket(
                n + 1,
                SockKind::Udp,
                (n * 8192, 4096),
                (n * 8192 + 4096, 4096),
            )
        })
        .collect();
    let got = exchange(&mut s, &open);
    assert!(got.iter().all(|c| c.result >= 0), "{got:?}");
    assert_eq!(s.core.stat().sockets, socks);
    for round in 0..4u64 {
        let nops: Vec<Command> = (0..socks as u32)
            .map(|id| cmd(Opcode::Nop, id, 100 + round * 100 + u64::from(id), [0; 6]))
            .collect();
        assert_eq!(s.post(&nops), socks);
        s.turn(Duration::from_millis(1));
        s.reap();
        assert!(s.core.serving.is_empty(), "nothing left to serve");
        assert_eq!(
            serve_lists(&s),
            before,
            "the same two lists, never reallocated"
        );
        assert!(s.core.dirty.capacity() >= socks && s.core.serving.capacity() >= socks);
    }
    s.finish();
}

/// Where the session's two serve lists live (sorted: they swap every
/// turn): the same addresses turn after turn means neither reallocated.
fn serve_lists(s: &Sim) -> [*const u32; 2] {
    let mut v = [s.core.dirty.as_ptr(), s.core.serving.as_ptr()];
    v.sort();
    v
}

/// Sockets opened and closed in one batch, each new one taking the id the
/// last one left: the id is listed to serve once, not once per socket
/// that held it, so a batch longer than the socket table cannot outgrow
/// the lists' room.
#[test]
fn an_id_reused_within_a_batch_is_listed_once() {
    let mut s = sim();
    let socks = s.core.region().layout().socks() as usize;
    let before = serve_lists(&s);
    let pairs = 30u64;
    assert!(pairs as usize > socks, "more sockets than the table has");
    let mut batch = Vec::new();
    for n in 0..pairs {
        batch.push(Command::socket(
            2 * n + 1,
            SockKind::Udp,
            (0, 4096),
            (4096, 4096),
        ));
        // The first free id is 0 each time: the close frees it again.
        batch.push(cmd(Opcode::Close, 0, 2 * n + 2, [0; 6]));
    }
    assert_eq!(s.post(&batch), batch.len());
    s.turn(Duration::from_millis(1));
    let got = s.reap();
    assert!(
        got.iter().filter(|c| c.tag % 2 == 1).all(|c| c.result == 0),
        "every socket took id 0: {got:?}"
    );
    assert_eq!(
        serve_lists(&s),
        before,
        "the same two lists, never reallocated"
    );
    assert!(s.core.dirty.len() <= 1 && s.core.serving.is_empty());
    s.finish();
}

/// `blocked` lists each socket id once, and `in_blocked` says which: the
/// two agree for every id.
fn assert_blocked_listed_once(s: &Sim) {
    let b = &s.core.blocked;
    for (id, &listed) in s.core.in_blocked.iter().enumerate() {
        let n = b.iter().filter(|&&x| x as usize == id).count();
        assert!(n <= 1, "socket {id} listed {n} times: {b:?}");
        assert_eq!(listed, n == 1, "socket {id}: flag {listed}, list {b:?}");
    }
}

/// Connections whose rings fill are each listed blocked once, taken off
/// when they close (the id listed across its next socket until the walk
/// drops it), and a ring read from takes more; the membership flag per id
/// agrees with the list throughout.
#[test]
fn full_rings_are_listed_blocked_once() {
    let mut s = sim();
    let got = exchange(
        &mut s,
        &[
            socket(1, SockKind::Tcp, 0),
            cmd(
                Opcode::Bind,
                0,
                2,
                [addr(ENGINE_IP), u64::from(ENGINE_PORT), 0, 0, 0, 0],
            ),
            cmd(Opcode::Listen, 0, 3, [16, 0, 0, 0, 0, 0]),
        ],
    );
    assert!(got.iter().all(|c| c.result >= 0), "{got:?}");
    let now = s.now;
    let peers: Vec<SocketHandle> = (0..3)
        .map(|_| {
            s.peer
                .tcp_connect(now, Endpoint::new(ENGINE_IP, ENGINE_PORT), None, None)
                .unwrap()
        })
        .collect();
    s.peer_poll();
    s.run(5);
    let accepts: Vec<Command> = (1..=3u64)
        .map(|k| {
            let (rx, tx) = rings(k);
            cmd(
                Opcode::Accept,
                0,
                10 + k,
                [0, rx.offset, rx.len, tx.offset, tx.len, 0],
            )
        })
        .collect();
    let got = exchange(&mut s, &accepts);
    let ids: Vec<u32> = (1..=3)
        .map(|k| answer(&got, 10 + k).result as u32)
        .collect();
    assert_eq!(ids, [1, 2, 3]);
    // Each peer sends more than its ring and the stack's buffer hold; the
    // program reads nothing.
    let total = 4 * RING as usize;
    let r = s.peer_mem.add(vec![7u8; total].into_boxed_slice());
    let mut sent = [0usize; 3];
    for _ in 0..100 {
        for (p, n) in peers.iter().zip(sent.iter_mut()) {
            if let Ok(k) = s
                .peer
                .tcp_send(*p, PayloadRef::new(r, *n as u64, (total - *n) as u32))
            {
                *n += k;
            }
        }
        s.peer_poll();
        s.turn(Duration::from_millis(1));
        assert_blocked_listed_once(&s);
    }
    let region = s.core.region();
    for &id in &ids {
        assert_ne!(region.slot(id).unwrap().events() & EV_RXFULL, 0, "{id}");
    }
    let mut listed = s.core.blocked.clone();
    listed.sort_unstable();
    assert_eq!(listed, ids, "each full ring listed once");
    // The program reads socket 2's ring: it takes more, and stays listed
    // (still more than the ring holds).
    let slot = region.slot(2).unwrap();
    let tail = slot.rx_tail();
    slot.set_rx_head(tail);
    assert_eq!(s.post(&[cmd(Opcode::RxDone, 2, 20, [0; 6])]), 1);
    s.turn(Duration::from_millis(1));
    assert_blocked_listed_once(&s);
    assert!(slot.rx_tail() > tail, "a ring read from takes more");
    // Socket 1 closes and a new socket takes its id in the same turn: the
    // id is dropped from the list (the new socket is not blocked).
    let got = exchange(
        &mut s,
        &[
            cmd(Opcode::Close, 1, 21, [1, 0, 0, 0, 0, 0]),
            socket(22, SockKind::Tcp, 4),
        ],
    );
    assert_eq!(answer(&got, 22).result, 1, "the new socket is id 1");
    assert_blocked_listed_once(&s);
    let mut listed = s.core.blocked.clone();
    listed.sort_unstable();
    assert_eq!(listed, [2, 3]);
    s.finish();
}

/// `finished` as it was written first: a walk of the whole socket table
/// and of every closed socket (the oracle for the count it keeps now).
fn finished_by_walk(s: &Sim) -> bool {
    let c = &s.core;
    c.dead
        && c.socks.iter().all(Option::is_none)
        && c.retiring.iter().all(|(&h, r)| {
            r.stream == 0
                || s.stack.tcp_acked(h).is_err()
                || s.stack.tcp_acked(h).is_ok_and(|a| a >= r.stream)
                || s.stack
                    .tcp_state(h)
                    .is_ok_and(|st| matches!(st, State::Closed | State::TimeWait))
        })
}

/// Whether the dead session may be reclaimed, asked as the host service
/// asks it, checked against the walk.
fn finished(s: &Sim) -> bool {
    let f = s.core.finished(&s.stack);
    assert_eq!(f, finished_by_walk(s), "finished() and the walk disagree");
    f
}

/// A dead program's session is finished when no socket is left in its
/// table (a detached connection keeps it, with its unread bytes) and every
/// closed connection's bytes are acknowledged: not before, and as soon as
/// the stack says so, turn by turn as the walk of every socket said.
#[test]
fn a_dead_session_finishes_when_nothing_is_left_waiting() {
    // A connection other processes still hold (`fork`): detached at exit,
    // closed at its last descriptor; and a UDP socket, waiting for the
    // stack to let it go.
    let mut s = sim();
    let (id, _ph) = connected(&mut s);
    let h = engine_handle(&s);
    let got = exchange(&mut s, &[socket(5, SockKind::Udp, 1)]);
    assert_eq!(answer(&got, 5).result, 1);
    s.core.socks[id as usize].as_mut().unwrap().watched = true;
    assert!(!finished(&s), "alive");
    s.exit();
    assert_eq!(s.core.stat().detached, 1);
    for _ in 0..5 {
        assert!(!finished(&s), "a detached connection holds the region");
        s.turn(Duration::from_millis(1));
    }
    let now = s.now;
    s.core.watch_gone(now, &mut s.stack, &mut Shares::new(), h);
    assert_eq!(s.core.stat().sockets, 0);
    assert!(finished(&s), "nothing sent, nothing to wait for");
    s.run(3);
    assert!(finished(&s));
    s.core.reclaim(&mut s.mem);

    // A connection whose last send has not reached the peer when the
    // program goes: finished once the peer has acknowledged it.
    let mut s = sim();
    let (id, ph) = connected(&mut s);
    let (_, tx) = rings(0);
    let out = [9u8; 3000];
    assert!(s.core.region().ring_write(tx, 0, &out));
    let send = Command::new(Opcode::Send, SEND_RING, id, 3, [0, 3000, 0, 0, 0, 0]);
    assert_eq!(s.post(&[send]), 1);
    s.exit();
    assert_eq!(s.core.stat().sockets, 0);
    assert_eq!(s.core.acking.len(), 1);
    assert!(!finished(&s), "3000 bytes not acknowledged");
    let mut turns = 0;
    while !finished(&s) {
        assert!(turns < 400, "never finished");
        s.turn(Duration::from_millis(1));
        turns += 1;
    }
    assert!(turns > 0);
    assert_eq!(peer_read(&mut s, ph).len(), out.len());
    s.core.reclaim(&mut s.mem);
}

/// Around a placed read the ring is closed to the stack and opened again
/// only when the program asks for it: a post is filled from the stack's
/// buffer, the bytes after it are held there (`EV_HELD`), not written into
/// the ring, and after `RXDONE` they come into the ring in order, and the
/// stack writes there straight again.
#[test]
fn the_ring_reopens_to_the_stack_only_after_a_placed_read_is_done() {
    let mut s = sim();
    let (id, ph) = connected(&mut s);
    let eh = engine_handle(&s);
    let region = s.core.region();
    let slot = region.slot(id).unwrap();
    let (rx, _) = rings(0);
    // Each of the peer's sends leaves at once (no Nagle behind the last).
    s.peer.tcp_set_nodelay(ph, true).unwrap();
    let data: Vec<u8> = (0..90u8).collect();
    let r = s.peer_mem.add(data.clone().into_boxed_slice());
    let peer_send = |s: &mut Sim, from: u64, n: u32| {
        assert_eq!(
            s.peer.tcp_send(ph, PayloadRef::new(r, from, n)),
            Ok(n as usize)
        );
        s.peer_poll();
        s.run(3);
    };
    let recv = Command::new(Opcode::Recv, RECV_REMOTE, id, 4, [4000, 64, 0, 0, 0, 0]);
    assert_eq!(s.post(&[recv]), 1);
    s.run(1);
    assert!(s.reap().is_empty(), "nothing to place yet");
    peer_send(&mut s, 0, 40);
    let got = s.reap();
    assert_eq!(answer(&got, 4).result, 40);
    assert_eq!(&s.core.program().memory[4000..4040], &data[..40]);
    assert_eq!(slot.rx_tail(), 0, "nothing in the ring");
    let sunk = s.stack.tcp_info(eh).unwrap().bytes_sunk;
    // Held for the next post: not in the ring.
    peer_send(&mut s, 40, 30);
    assert_eq!(slot.rx_tail(), 0, "held bytes stay in the stack");
    assert_ne!(slot.events() & EV_HELD, 0);
    assert_eq!(s.stack.tcp_info(eh).unwrap().bytes_sunk, sunk);
    // The program asks for the ring: the held bytes come first.
    let got = exchange(&mut s, &[cmd(Opcode::RxDone, id, 5, [0; 6])]);
    assert_eq!(answer(&got, 5).result, 0);
    assert_eq!(slot.rx_tail(), 30);
    assert_eq!(slot.events() & EV_HELD, 0);
    // And the stack writes into the ring itself again.
    peer_send(&mut s, 70, 20);
    assert_eq!(slot.rx_tail(), 50);
    assert_eq!(s.stack.tcp_info(eh).unwrap().bytes_sunk, sunk + 20);
    let mut buf = vec![0u8; 50];
    assert!(region.ring_read(rx, 0, &mut buf));
    assert_eq!(buf, &data[40..]);
    s.finish();
}

/// `SO_REUSEPORT` (`SETOPT`) before `BIND`: sockets with it listen on one
/// address together; one without it, or one of a program that now runs as
/// another user, is refused at `BIND` (where Linux refuses it) and at
/// `LISTEN` alike.
#[test]
fn reuseport_listeners_share_a_port_and_others_are_refused_at_bind() {
    let mut s = sim();
    let reuseport = |tag, sock| {
        cmd(
            Opcode::SetOpt,
            sock,
            tag,
            [softoe_abi::SockOpt::ReusePort as u64, 1, 0, 0, 0, 0],
        )
    };
    let bind = |tag, sock| {
        cmd(
            Opcode::Bind,
            sock,
            tag,
            [addr(ENGINE_IP), u64::from(ENGINE_PORT), 0, 0, 0, 0],
        )
    };
    let listen = |tag, sock| cmd(Opcode::Listen, sock, tag, [16, 0, 0, 0, 0, 0]);
    let results = |s: &mut Sim, cmds: &[Command]| -> Vec<i64> {
        let got = exchange(s, cmds);
        cmds.iter().map(|c| answer(&got, c.tag).result).collect()
    };
    let first = results(
        &mut s,
        &[
            socket(1, SockKind::Tcp, 0),
            reuseport(2, 0),
            bind(3, 0),
            listen(4, 0),
        ],
    );
    assert_eq!(first, [0, 0, 0, 0]);
    let inuse = -i64::from(errno::EADDRINUSE);
    let plain = results(&mut s, &[socket(5, SockKind::Tcp, 1), bind(6, 1)]);
    assert_eq!(plain, [1, inuse], "without SO_REUSEPORT: refused at bind");
    let second = results(
        &mut s,
        &[
            socket(7, SockKind::Tcp, 2),
            reuseport(8, 2),
            bind(9, 2),
            listen(10, 2),
        ],
    );
    assert_eq!(second, [2, 0, 0, 0], "with it: a second member");
    let members = s
        .stack
        .sockets()
        .filter_map(|h| s.stack.tcp_listener_info(h).ok())
        .filter(|l| l.reuseport && l.local.port == ENGINE_PORT)
        .count();
    assert_eq!(members, 2);
    // The program drops to another user: its new socket is that user's.
    s.core.io.uid = Some(65_534);
    let other = results(
        &mut s,
        &[socket(11, SockKind::Tcp, 3), reuseport(12, 3), bind(13, 3)],
    );
    assert_eq!(other, [3, 0, inuse], "another user's");
    s.finish();
}

/// A port below `unprivileged_port_start` needs `CAP_NET_BIND_SERVICE`
/// (as the kernel shows the program), for TCP and UDP, as Linux's
/// `inet_bind`: without it `EACCES`, at and above the threshold or with
/// it, bound. Before, any program bound port 80 of the engine's address.
#[test]
fn privileged_ports_need_the_capability() {
    let mut s = sim();
    let bind = |tag, sock, port: u16| {
        cmd(
            Opcode::Bind,
            sock,
            tag,
            [addr(ENGINE_IP), u64::from(port), 0, 0, 0, 0],
        )
    };
    let results = |s: &mut Sim, cmds: &[Command]| -> Vec<i64> {
        let got = exchange(s, cmds);
        cmds.iter().map(|c| answer(&got, c.tag).result).collect()
    };
    let acces = -i64::from(errno::EACCES);
    s.core.io.privileged = false;
    let without = results(
        &mut s,
        &[
            socket(1, SockKind::Tcp, 0),
            bind(2, 0, 80),
            socket(3, SockKind::Udp, 1),
            bind(4, 1, 53),
            bind(5, 0, 1023),
            bind(6, 0, 1024),
        ],
    );
    assert_eq!(without, [0, acces, 1, acces, acces, 0]);
    s.core.io.privileged = true;
    let with = results(
        &mut s,
        &[socket(7, SockKind::Tcp, 2), bind(8, 2, 80), bind(9, 1, 53)],
    );
    assert_eq!(with, [2, 0, 0]);
    s.finish();
}

/// A socket that joins a connection another socket holds (an `ADOPT` of
/// a shared connection) says connected before its program hears of it:
/// rsync's daemon child asked `getpeername` between the completion and
/// the engine's next serve and got `ENOTCONN`, and the pull failed.
#[test]
fn a_joined_connection_is_connected_when_its_adopt_completes() {
    let mut s = sim();
    let (held, _) = connected(&mut s);
    let h = s.core.socks[held as usize]
        .as_ref()
        .and_then(|x| x.h)
        .expect("the held socket has its connection");
    let region = s.core.region();
    let from = region.slot(held).unwrap();
    let (local, remote) = (from.local(), from.remote());
    let got = exchange(&mut s, &[socket(3, SockKind::Tcp, 1)]);
    let id = answer(&got, 3).result as u32;
    let j = crate::host::session::Joining {
        h,
        stream: 0,
        opts: Default::default(),
        local,
        remote,
    };
    s.core.join_shared(4, id, j);
    // The completion, and the slot as the program reads it with no turn
    // in between.
    let c = answer(&s.reap(), 4);
    assert_eq!(c.result, i64::from(id));
    let slot = region.slot(id).unwrap();
    let ev = slot.events();
    assert_ne!(ev & EV_CONNECTED, 0, "connected at the completion: {ev:#x}");
    assert_ne!(ev & softoe_abi::EV_SHARED, 0, "shared: {ev:#x}");
    assert_eq!((slot.local(), slot.remote()), (local, remote));
}
