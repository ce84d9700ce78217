//! One bulk transfer: `cargo run -p softoe-sim --release --example transfer -- RATE_GBPS LOSS MB`.

use softoe_sim::scenario::Transfer;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let rate: f64 = a.get(1).and_then(|s| s.parse().ok()).unwrap_or(10.0);
    let loss: f64 = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(0.0);
    let mb: u64 = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(256);
    let queue: Option<usize> = a.get(4).and_then(|s| s.parse().ok());
    let delay_us: u64 = a.get(5).and_then(|s| s.parse().ok()).unwrap_or(250);
    let t = Transfer {
        bytes: mb << 20,
        rate_bps: (rate * 1e9) as u64,
        loss,
        queue_limit: queue,
        delay: std::time::Duration::from_micros(delay_us),
        ..Transfer::default()
    };
    eprintln!("{t:?}");
    match t.run() {
        Ok(r) => println!(
            "{:.1} Gb/s loss {loss}: {:.3} Gb/s ({:.1}% of link) in {:?} virtual, {:?} wall, intact {}, frames {}\n{:#?}",
            rate,
            r.goodput_bps / 1e9,
            r.link_fraction * 100.0,
            r.elapsed,
            r.wall,
            r.intact,
            r.wire_frames,
            r.sender
        ),
        Err(e) => eprintln!("{e}"),
    }
}
