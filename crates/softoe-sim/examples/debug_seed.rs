//! Dumps the internal state of every connection of a property-test seed at
//! a given virtual time:
//! `cargo run -p softoe-sim --example debug_seed -- SEED SECS`.

use std::time::Duration;

use softoe_sim::StackNode;
use softoe_sim::scenario::random_world;
use softoe_stack::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seed: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let secs: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let Ok(mut built) = random_world(seed).build() else {
        return;
    };
    built
        .world
        .run_until(Instant::ZERO + Duration::from_secs_f64(secs));
    println!("world: {:?}", built.world.stats());
    for l in 0..1 {
        println!(
            "link {l}: {:?} / {:?}",
            built.world.link_stats(l, true),
            built.world.link_stats(l, false)
        );
    }
    for id in [built.client, built.server] {
        if let Some(n) = built.world.node::<StackNode>(id) {
            println!(
                "=== node {id}: poll_at {:?}\n{:#?}",
                n.stack.poll_at(),
                n.stack.stats()
            );
            let handles: Vec<_> = n.stack.sockets().collect();
            for h in handles {
                println!("{h:?}: {}", n.stack.tcp_debug(h));
            }
        }
    }
}
