//! Internet checksum throughput: `cargo bench -p softoe-wire --bench checksum`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use softoe_wire::checksum;
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let buf: Vec<u8> = (0..65_536u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut g = c.benchmark_group("checksum");
    for size in [64usize, 1500, 9000, 65_536] {
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(format!("data/{size}"), |b| {
            b.iter(|| checksum::data(black_box(&buf[..size])))
        });
    }
    g.throughput(Throughput::Bytes(65_536));
    g.bench_function("accumulator/64KiB-in-1448B-pieces", |b| {
        b.iter(|| {
            let mut acc = checksum::Accumulator::new();
            for piece in black_box(&buf[..]).chunks(1448) {
                acc.add(piece);
            }
            acc.finish()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
