//! Reuseport groups (issue 34 item 5), as Linux serves them: listeners
//! that all set `SO_REUSEPORT` with one owner share an address and port;
//! each new connection (a SYN, or a SYN cookie's ACK) goes to the member
//! a keyed hash of its four-tuple picks, the same member for the same
//! four-tuple while the group is unchanged; anything else on an
//! overlapping address is refused; a member that closes resets what it
//! had not accepted and the others go on.

use alloc::vec::Vec;
use core::time::Duration;

use softoe_wire::{Ipv4Address, TcpControl, TcpRepr, TcpTimestamp};

use super::harness::*;
use crate::{BindError, Endpoint, SocketHandle, SynCookies};

const OWNER: u32 = 1000;

fn syn(port: u16) -> TcpRepr<'static> {
    TcpRepr {
        src_port: port,
        control: TcpControl::Syn,
        seq_number: REMOTE_SEQ,
        ack_number: None,
        max_seg_size: Some(1460),
        timestamp: Some(TcpTimestamp {
            tsval: 1000,
            tsecr: 0,
        }),
        ..SEND_TEMPL
    }
}

/// The peer's ACK of SYN-ACK `sa`, from `port`.
fn ack_of(port: u16, sa: &Sent) -> TcpRepr<'static> {
    TcpRepr {
        src_port: port,
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: Some(add(sa.seq(), 1)),
        timestamp: sa.repr.timestamp.map(|t| TcpTimestamp {
            tsval: 1001,
            tsecr: t.tsval,
        }),
        ..SEND_TEMPL
    }
}

/// `n` reuseport listeners of `OWNER` on `local()`.
fn group(h: &mut Harness, n: usize) -> Vec<SocketHandle> {
    (0..n)
        .map(|_| {
            h.stack
                .tcp_listen_reuseport(local(), 64, None, OWNER)
                .unwrap()
        })
        .collect()
}

/// Handshakes under way at each listener.
fn embryos(h: &Harness, ls: &[SocketHandle]) -> Vec<usize> {
    ls.iter()
        .map(|&l| h.stack.tcp_listener_info(l).unwrap().syn_received)
        .collect()
}

/// The member whose SYN queue a SYN from `port` joined.
fn member_for(h: &mut Harness, ls: &[SocketHandle], port: u16) -> usize {
    let before = embryos(h, ls);
    h.send(syn(port));
    let out = h.take();
    assert_eq!(out.len(), 1, "one SYN-ACK: {out:?}");
    let after = embryos(h, ls);
    let grew: Vec<usize> = (0..ls.len()).filter(|&i| after[i] > before[i]).collect();
    assert_eq!(
        grew.len(),
        1,
        "exactly one member took it: {before:?} → {after:?}"
    );
    grew[0]
}

/// A RST that ends the handshake from `port` (in SYN-RECEIVED, any RST
/// in the window does).
fn reset(h: &mut Harness, port: u16) {
    h.send(TcpRepr {
        src_port: port,
        control: TcpControl::Rst,
        seq_number: add(REMOTE_SEQ, 1),
        ack_number: None,
        ..SEND_TEMPL
    });
    let _ = h.take();
}

/// Who may share an address: listeners that all set the option with the
/// same owner; a listener without it, or of another owner, is refused
/// whichever came first, and so is one on an overlapping address (the
/// wildcard and a specific address of one port), unless it too belongs.
#[test]
fn only_listeners_that_all_set_reuseport_with_one_owner_share_an_address() {
    let mut h = Harness::new();
    let ls = group(&mut h, 2);
    assert!(h.stack.tcp_listener_info(ls[0]).unwrap().reuseport);
    assert_eq!(
        h.stack.tcp_listen(local(), 8, None),
        Err(BindError::AddrInUse),
        "a plain listener beside a group"
    );
    assert_eq!(
        h.stack.tcp_listen_reuseport(local(), 8, None, OWNER + 1),
        Err(BindError::AddrInUse),
        "another owner"
    );
    assert_eq!(h.stack.tcp_listen_check(local(), Some(OWNER)), Ok(()));
    assert_eq!(
        h.stack.tcp_listen_check(local(), None),
        Err(BindError::AddrInUse)
    );
    let any = Endpoint::new(Ipv4Address::UNSPECIFIED, LOCAL_PORT);
    assert_eq!(
        h.stack.tcp_listen(any, 8, None),
        Err(BindError::AddrInUse),
        "the wildcard overlaps the group's address"
    );
    assert!(
        h.stack.tcp_listen_reuseport(any, 8, None, OWNER).is_ok(),
        "a wildcard group of the same owner may listen beside it"
    );

    let mut h = Harness::new();
    let plain = h.stack.tcp_listen(local(), 8, None).unwrap();
    assert!(!h.stack.tcp_listener_info(plain).unwrap().reuseport);
    assert_eq!(
        h.stack.tcp_listen_reuseport(local(), 8, None, OWNER),
        Err(BindError::AddrInUse),
        "a group cannot form on a plain listener's address"
    );
    assert_eq!(
        h.stack.tcp_listen_reuseport(any, 8, None, OWNER),
        Err(BindError::AddrInUse),
        "nor on the wildcard over it"
    );
    // Once it closes, the address is free.
    h.stack.close(h.now, plain).unwrap();
    assert!(
        h.stack
            .tcp_listen_reuseport(local(), 8, None, OWNER)
            .is_ok()
    );
    // Another port is another matter.
    let other = Endpoint::new(LOCAL_IP, LOCAL_PORT + 1);
    assert!(h.stack.tcp_listen(other, 8, None).is_ok());
}

/// New connections are spread over the members, each accepted by the
/// member that took its SYN and by no other; each member reports what it
/// holds.
#[test]
fn a_group_spreads_new_connections_over_its_members() {
    let mut h = Harness::new();
    let ls = group(&mut h, 3);
    let mut got = [0usize; 3];
    for k in 0..96u16 {
        let port = 41_000 + k;
        got[member_for(&mut h, &ls, port)] += 1;
    }
    // Complete none: the embryos are counted where they are.
    assert_eq!(embryos(&h, &ls), got.to_vec());
    assert_eq!(got.iter().sum::<usize>(), 96);
    assert!(
        got.iter().all(|&n| n > 0),
        "every member gets some: {got:?}"
    );
}

/// The handshake completes at the member its SYN went to: the ACK finds
/// the embryo there, and only that member can accept it.
#[test]
fn a_connection_is_accepted_by_the_member_its_syn_reached() {
    let mut h = Harness::new();
    let ls = group(&mut h, 2);
    let mut ports = [Vec::new(), Vec::new()];
    for k in 0..16u16 {
        let port = 42_000 + k;
        let before = embryos(&h, &ls);
        h.send(syn(port));
        let sa = h.take().remove(0);
        let m = usize::from(embryos(&h, &ls)[1] > before[1]);
        h.send(ack_of(port, &sa));
        assert!(h.take().is_empty());
        ports[m].push(port);
    }
    for (m, want) in ports.iter().enumerate() {
        let mut from = Vec::new();
        while let Some(c) = h.stack.tcp_accept(ls[m]).unwrap() {
            from.push(h.stack.tcp_info(c).unwrap().remote.port);
        }
        assert_eq!(&from, want, "member {m}");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// While the group is unchanged a four-tuple always reaches the same
    /// member: a SYN whose handshake was reset and that comes again (the
    /// client retrying) joins the same member's queue.
    #[test]
    fn a_four_tuple_always_reaches_the_same_member(
        n in 2usize..6,
        ports in proptest::collection::vec(1024u16..65_535, 1..12),
    ) {
        let mut h = Harness::new();
        let ls = group(&mut h, n);
        for &p in &ports {
            let first = member_for(&mut h, &ls, p);
            reset(&mut h, p);
            for _ in 0..2 {
                proptest::prop_assert_eq!(member_for(&mut h, &ls, p), first);
                reset(&mut h, p);
            }
        }
    }
}

/// A SYN cookie's ACK reaches the member that sent the cookie, which
/// makes the connection; once that member has closed, the ACK goes to
/// another, which takes the cookie too (the group remembers that cookies
/// went out, as Linux's `synq_overflow_ts` per group).
#[test]
fn a_cookies_ack_finds_its_member_or_the_group() {
    let mut cfg = config();
    cfg.syncookies = SynCookies::Always;
    let mut h = Harness::with_config(cfg);
    let ls = group(&mut h, 2);
    // SYNs until each member has sent a cookie, noting who sent which.
    let mut by = [None, None];
    for k in 0..64u16 {
        let port = 43_000 + k;
        let before: Vec<u64> = ls
            .iter()
            .map(|&l| h.stack.tcp_listener_info(l).unwrap().cookies_sent)
            .collect();
        h.send(syn(port));
        let sa = h.take().remove(0);
        let m = usize::from(h.stack.tcp_listener_info(ls[1]).unwrap().cookies_sent > before[1]);
        if by[m].is_none() {
            by[m] = Some((port, sa));
        }
        if by.iter().all(Option::is_some) {
            break;
        }
    }
    let [Some((p0, sa0)), Some((p1, sa1))] = by else {
        panic!("both members sent cookies: {by:?}");
    };
    h.now += Duration::from_millis(1);
    h.send(ack_of(p0, &sa0));
    let c = h
        .stack
        .tcp_accept(ls[0])
        .unwrap()
        .expect("at the cookie's member");
    assert_eq!(h.stack.tcp_info(c).unwrap().remote.port, p0);
    assert_eq!(h.stack.tcp_accept(ls[1]).unwrap(), None);
    // Member 1 leaves; its cookie's ACK now reaches member 0, which had
    // not sent that cookie but belongs to the group that did.
    h.stack.close(h.now, ls[1]).unwrap();
    let _ = h.recv();
    h.send(ack_of(p1, &sa1));
    assert!(
        h.take().iter().all(|s| s.repr.control != TcpControl::Rst),
        "not reset"
    );
    let c = h
        .stack
        .tcp_accept(ls[0])
        .unwrap()
        .expect("taken by the group");
    assert_eq!(h.stack.tcp_info(c).unwrap().remote.port, p1);
    assert_eq!(h.stack.stats().tcp_syncookies_recv, 2);
}

/// A member that closes resets the connections it had not accepted
/// (Linux's `inet_csk_listen_stop`, `tcp_migrate_req` off by default);
/// the others keep theirs, and new connections go to those left.
#[test]
fn a_closing_member_resets_its_queue_and_the_rest_go_on() {
    let mut h = Harness::new();
    let ls = group(&mut h, 2);
    let mut at = [Vec::new(), Vec::new()];
    for k in 0..16u16 {
        let port = 44_000 + k;
        let before = embryos(&h, &ls);
        h.send(syn(port));
        let sa = h.take().remove(0);
        let m = usize::from(embryos(&h, &ls)[1] > before[1]);
        h.send(ack_of(port, &sa));
        at[m].push(port);
    }
    assert!(!at[0].is_empty() && !at[1].is_empty(), "{at:?}");
    h.stack.close(h.now, ls[0]).unwrap();
    let mut reset_ports: Vec<u16> = h
        .recv()
        .iter()
        .filter(|s| s.repr.control == TcpControl::Rst)
        .map(|s| s.repr.dst_port)
        .collect();
    reset_ports.sort_unstable();
    assert_eq!(reset_ports, at[0], "the closed member's queue is reset");
    assert_eq!(
        h.stack.tcp_listener_info(ls[1]).unwrap().queued,
        at[1].len(),
        "the other keeps its own"
    );
    for k in 0..8u16 {
        h.send(syn(45_000 + k));
    }
    assert_eq!(h.take().len(), 8);
    assert_eq!(h.stack.tcp_listener_info(ls[1]).unwrap().syn_received, 8);
    // The last member gone, the address is free for anyone.
    h.stack.close(h.now, ls[1]).unwrap();
    assert!(h.stack.tcp_listen(local(), 8, None).is_ok());
}

/// A specific address and the wildcard, both groups: a connection to the
/// specific address goes to its group (the more specific match wins, as
/// on Linux); with that group gone, the wildcard's takes it.
#[test]
fn the_specific_address_wins_over_the_wildcard() {
    let mut h = Harness::new();
    let any = Endpoint::new(Ipv4Address::UNSPECIFIED, LOCAL_PORT);
    let wild = h.stack.tcp_listen_reuseport(any, 8, None, OWNER).unwrap();
    let exact = h
        .stack
        .tcp_listen_reuseport(local(), 8, None, OWNER)
        .unwrap();
    h.send(syn(46_000));
    assert_eq!(h.take().len(), 1);
    assert_eq!(h.stack.tcp_listener_info(exact).unwrap().syn_received, 1);
    assert_eq!(h.stack.tcp_listener_info(wild).unwrap().syn_received, 0);
    h.stack.close(h.now, exact).unwrap();
    let _ = h.recv();
    h.send(syn(46_001));
    assert_eq!(h.take().len(), 1);
    assert_eq!(h.stack.tcp_listener_info(wild).unwrap().syn_received, 1);
}
