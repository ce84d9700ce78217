//! Congestion control holds a lossy path's sender to its window, and to what
//! loss-based TCP may take.
//!
//! Two checks on one connection over 10 Gb/s, 500 µs RTT, a one-BDP
//! bottleneck queue and random loss:
//!
//! - sampled every 100 µs, the bytes presumed in the network (`pipe`)
//!   never exceed the congestion window (or, in recovery, ssthresh) by more
//!   than one burst;
//! - goodput sits near 1.22 · MSS / (RTT · √p) (Mathis et al.), where
//!   Linux's CUBIC, in its Reno-friendly region at this RTT, also sits. Far
//!   above, the sender ignores its window; far below, recovery stalls.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use softoe_sim::StackNode;
use softoe_sim::scenario::Transfer;
use softoe_stack::Instant;

const BYTES: u64 = 64 << 20;

fn run(loss: f64, seed: u64) -> f64 {
    let t = Transfer {
        bytes: BYTES,
        rate_bps: 10_000_000_000,
        delay: Duration::from_micros(250),
        loss,
        seed,
        queue_limit: Some(625_000),
        ..Transfer::default()
    };
    let mut b = t.world().build().unwrap();
    let mut at = Duration::ZERO;
    let mut last = (0u32, 0u32);
    let done = loop {
        at += Duration::from_micros(100);
        assert!(at < Duration::from_secs(120), "the transfer never ended");
        b.world.run_until(Instant::ZERO + at);
        let n = b.world.node::<StackNode>(b.client).unwrap();
        let Some(i) = n.stack.sockets().find_map(|h| n.stack.tcp_info(h).ok()) else {
            // Closed and released: everything was acknowledged.
            if last.1 > 0 {
                break at;
            }
            continue;
        };
        // Above its window, a sender may only be draining what it sent
        // under the window it had (PRR brings the pipe down to ssthresh
        // after a reduction); it must never grow past both.
        let slack = 64 * 1024 + 2 * i.snd_mss;
        let (last_pipe, last_cwnd) = last;
        assert!(
            i.pipe <= i.cwnd.max(last_cwnd).max(last_pipe).saturating_add(slack),
            "loss {loss}, seed {seed}, t = {at:?}: {} bytes presumed in the network \
             (up from {last_pipe}) with cwnd {} (was {last_cwnd}) and ssthresh {}",
            i.pipe,
            i.cwnd,
            i.ssthresh
        );
        last = (i.pipe, i.cwnd);
        if i.bytes_acked >= BYTES {
            break at;
        }
    };
    let goodput = BYTES as f64 * 8.0 / done.as_secs_f64();
    let mathis = 1.22 * 1448.0 * 8.0 / (t.delay.as_secs_f64() * 2.0 * loss.sqrt());
    let ratio = goodput / mathis;
    eprintln!(
        "loss {:.1} %, seed {seed}: {:.3} Gb/s, {ratio:.2} × the Mathis bound ({:.3} Gb/s)",
        loss * 100.0,
        goodput / 1e9,
        mathis / 1e9
    );
    ratio
}

#[test]
fn a_lossy_path_is_shared_like_loss_based_tcp() {
    for loss in [0.001, 0.01] {
        for seed in 1..=2 {
            let ratio = run(loss, seed);
            assert!(
                (0.5..2.0).contains(&ratio),
                "loss {loss}, seed {seed}: goodput {ratio:.2} × the Mathis bound"
            );
        }
    }
}
