//! Prints every TCP segment of one property-test seed, like tcpdump:
//! `cargo run -p softoe-sim --example trace_seed -- SEED [FROM_SECS] [TO_SECS]`.

use std::time::Duration;

use softoe_sim::TapEvent;
use softoe_sim::scenario::random_world;
use softoe_wire::{ChecksumCaps, EthernetFrame, Ipv4Packet, Ipv4Repr, TcpPacket, TcpRepr};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seed: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let from: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(0.0);
    let to: f64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(f64::MAX);
    let spec = random_world(seed);
    println!("{spec:#?}");
    let Ok(mut built) = spec.build() else {
        eprintln!("cannot build seed {seed}");
        return;
    };
    built.world.set_tap(Some(Box::new(move |e: &TapEvent<'_>| {
        let t = e.at.total_nanos() as f64 / 1e9;
        if t < from || t > to {
            return;
        }
        let fate = if e.arrivals.is_empty() { "LOST" } else { "" };
        let line = describe(e.frame, e.dir);
        println!("{t:12.6} {line} {fate}");
    })));
    let out = built.run(Duration::from_secs(900), Duration::from_secs(10));
    println!("finished: {} at {:?}", out.finished, out.finished_at);
}

fn describe(frame: &[u8], dir: usize) -> String {
    let parsed = (|| {
        let f = EthernetFrame::new_checked(frame).ok()?;
        let p = Ipv4Packet::new_checked(f.payload()).ok()?;
        let ip = Ipv4Repr::parse(&p, &ChecksumCaps::ignored()).ok()?;
        let t = TcpPacket::new_checked(p.payload()).ok()?;
        let r = TcpRepr::parse(&t, &ip.src_addr, &ip.dst_addr, &ChecksumCaps::ignored()).ok()?;
        Some(format!("{} {r}", if dir == 0 { "c>s" } else { "s>c" }))
    })();
    parsed.unwrap_or_else(|| format!("non-TCP frame of {} bytes", frame.len()))
}
