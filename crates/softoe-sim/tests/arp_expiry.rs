//! A learned address that expires in the middle of a long transfer (after
//! the stack's default 60 s) must not stop the connection.
//!
//! Both tests run one bulk transfer over a 100 ms round trip for longer
//! than two entry lifetimes, with the stacks' default ARP settings (the
//! `Transfer` scenario keeps entries for the whole run so that its figures
//! measure TCP, not this). Found by `softoe sim grid`'s 100 ms points;
//! both failed until a frame the next hop's resolution cannot queue counted
//! as sent and lost (`SinkError::Unresolved`), so the connection's timers
//! run and its retransmission asks again.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::mpsc;
use std::time::Duration;

use softoe_sim::scenario::{Outcome, Transfer};
use softoe_stack::ArpConfig;

/// Runs `t` with default ARP entries on both sides, in a thread, for at
/// most `wall` of real time (`None`: it did not come back).
fn run_with_default_arp(t: Transfer, wall: Duration) -> Option<Outcome> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut w = t.world();
        w.client.arp = ArpConfig::default();
        w.server.arp = ArpConfig::default();
        let out = w
            .build()
            .unwrap()
            .run(Duration::from_secs(3600), Duration::from_millis(1));
        let _ = tx.send(out);
    });
    rx.recv_timeout(wall).ok()
}

fn check(out: Option<Outcome>, bytes: u64) {
    let out = out.expect("the simulation did not come back: the stack spins in one poll");
    let c = &out.conns[0];
    let got = c.server.map_or(0, |s| s.received);
    assert!(
        out.finished && got == bytes,
        "the transfer stopped at {got} of {bytes} bytes (world stalled: {}, client: {:?})",
        out.stalled,
        c.client.info
    );
}

/// At 2 % loss the client's ARP request, when its entry expires at 120 s,
/// is lost; no retry goes out (nothing asks to be polled for it), nothing
/// is in flight and no timer is armed: the world runs out of events with
/// 1.7 MB still queued.
#[test]
fn a_lost_arp_request_on_expiry_is_retried() {
    let t = Transfer {
        bytes: 14 << 20,
        rate_bps: 10_000_000_000,
        delay: Duration::from_millis(50),
        loss: 0.02,
        seed: 1,
        ..Transfer::default()
    };
    check(run_with_default_arp(t, Duration::from_secs(30)), t.bytes);
}

/// At 0.1 % loss, at 178 s of virtual time, one `Stack::poll` never
/// returns: a socket whose timer has expired sends a segment too large to
/// wait for ARP (`SinkError::Unresolved`), returns before re-arming, and
/// `pop_expired` hands it back at once, forever.
#[test]
fn an_expired_timer_with_an_unresolved_next_hop_does_not_spin() {
    let t = Transfer {
        bytes: 128 << 20,
        rate_bps: 10_000_000_000,
        delay: Duration::from_millis(50),
        loss: 0.001,
        seed: 1,
        ..Transfer::default()
    };
    check(run_with_default_arp(t, Duration::from_secs(30)), t.bytes);
}
