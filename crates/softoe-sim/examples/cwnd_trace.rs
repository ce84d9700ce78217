//! Samples the sender's congestion state through one bulk transfer:
//! `cargo run -p softoe-sim --release --example cwnd_trace -- RATE_GBPS LOSS MB [STEP_MS]`.
//! One line per step: time, cwnd and ssthresh (segments), bytes in flight
//! (segments), retransmissions, recoveries, RTOs, goodput so far.

use std::time::Duration;

use softoe_sim::scenario::Transfer;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let rate: f64 = a.get(1).and_then(|s| s.parse().ok()).unwrap_or(10.0);
    let loss: f64 = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(0.01);
    let mb: u64 = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(64);
    let step: f64 = a.get(4).and_then(|s| s.parse().ok()).unwrap_or(5.0);
    let t = Transfer {
        bytes: mb << 20,
        rate_bps: (rate * 1e9) as u64,
        loss,
        ..Transfer::default()
    };
    let Ok(mut b) = t.world().build() else { return };
    let mut at = Duration::ZERO;
    println!("t_ms cwnd ssthresh inflight pipe sacked retrans recoveries rtos acked_MB");
    loop {
        at += Duration::from_secs_f64(step / 1e3);
        b.world.run_until(softoe_stack::Instant::ZERO + at);
        let Some(n) = b.world.node::<softoe_sim::StackNode>(b.client) else {
            return;
        };
        let mut any = false;
        for h in n.stack.sockets() {
            let Ok(i) = n.stack.tcp_info(h) else { continue };
            any = true;
            let m = f64::from(i.snd_mss.max(1));
            println!(
                "{:.1} {:.0} {:.0} {:.0} {:.0} {:.0} {} {} {} {:.1}",
                at.as_secs_f64() * 1e3,
                f64::from(i.cwnd) / m,
                f64::from(i.ssthresh.min(1 << 30)) / m,
                f64::from(i.bytes_in_flight) / m,
                f64::from(i.pipe) / m,
                f64::from(i.sacked) / m,
                i.retransmits,
                i.fast_retransmits,
                i.rto_count,
                i.bytes_acked as f64 / 1e6
            );
            if i.bytes_acked >= mb << 20 {
                return;
            }
        }
        if !any || at > Duration::from_secs(120) {
            return;
        }
    }
}
