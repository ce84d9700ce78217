//! One bulk transfer: `cargo run -p softoe-sim --release --example transfer -- RATE_GBPS LOSS MB`.

use softoe_sim::scenario::Transfer;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let rate: f64 = a.get(1).and_then(|s| s.parse().ok()).unwrap_or(10.0);
    let loss: f64 = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(0.0);
    let mb: u64 = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(256);
    let t = Transfer {
        bytes: mb << 20,
        rate_bps: (rate * 1e9) as u64,
        loss,
        ..Transfer::default()
    };
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
