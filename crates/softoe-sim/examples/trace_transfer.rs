//! Prints the segments of one bulk transfer around its first losses:
//! `cargo run -p softoe-sim --release --example trace_transfer -- LOSS MB [MAX_LINES]`.

use softoe_sim::TapEvent;
use softoe_sim::scenario::Transfer;
use softoe_wire::{ChecksumCaps, EthernetFrame, Ipv4Packet, Ipv4Repr, TcpPacket, TcpRepr};
use std::time::Duration;

fn describe(frame: &[u8]) -> Option<String> {
    let f = EthernetFrame::new_checked(frame).ok()?;
    let p = Ipv4Packet::new_checked(f.payload()).ok()?;
    let ip = Ipv4Repr::parse(&p, &ChecksumCaps::ignored()).ok()?;
    let t = TcpPacket::new_checked(p.payload()).ok()?;
    let r = TcpRepr::parse(&t, &ip.src_addr, &ip.dst_addr, &ChecksumCaps::ignored()).ok()?;
    Some(format!("{r}"))
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let loss: f64 = a.get(1).and_then(|s| s.parse().ok()).unwrap_or(0.001);
    let mb: u64 = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(4);
    let max: usize = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(400);
    let rate: f64 = std::env::var("RATE_GBPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let queue: Option<usize> = std::env::var("QUEUE").ok().and_then(|s| s.parse().ok());
    let delay_us: u64 = std::env::var("DELAY_US")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(250);
    let t = Transfer {
        bytes: mb << 20,
        loss,
        rate_bps: (rate * 1e9) as u64,
        queue_limit: queue,
        delay: Duration::from_micros(delay_us),
        ..Transfer::default()
    };
    eprintln!("{t:?}");
    let Ok(mut b) = t.world().build() else { return };
    let mut lines = 0usize;
    let mut seen_loss = false;
    b.world.set_tap(Some(Box::new(move |e: &TapEvent<'_>| {
        if e.arrivals.is_empty() {
            seen_loss = true;
        }
        if seen_loss && lines < max {
            lines += 1;
            let d = describe(e.frame).unwrap_or_default();
            println!(
                "{:.6} {} {d} {}",
                e.at.total_nanos() as f64 / 1e9,
                if e.dir == 0 { ">" } else { "<" },
                if e.arrivals.is_empty() { "LOST" } else { "" }
            );
        }
    })));
    if let Some(stop) = a.get(4).and_then(|s| s.parse::<f64>().ok()) {
        b.world
            .run_until(softoe_stack::Instant::ZERO + Duration::from_secs_f64(stop));
        if let Some(n) = b.world.node::<softoe_sim::StackNode>(b.client) {
            for h in n.stack.sockets() {
                println!("{}", n.stack.tcp_debug(h));
            }
        }
        return;
    }
    let stats_world = &b.world as *const _;
    let _ = stats_world;
    for dir in [true, false] {
        eprintln!("link before: {:?}", b.world.link_stats(0, dir));
    }
    let out = b.run(Duration::from_secs(600), Duration::from_millis(1));
    eprintln!("world: {:?}\nlink: {:?}", out.world, out.link);
    let c = out.conns[0].client.info;
    println!("{c:#?}");
}
