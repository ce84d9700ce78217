//! Serializable reports and the tables printed from them.

use serde::Serialize;
use softoe_sim::scenario::TransferReport;

use crate::units::mib;

/// One transfer, as printed and as JSON.
#[derive(Debug, Clone, Serialize)]
pub struct TransferRow {
    pub loss_percent: f64,
    pub link_gbps: f64,
    pub rtt_us: f64,
    pub bytes: u64,
    pub intact: bool,
    pub virtual_secs: f64,
    pub goodput_gbps: f64,
    pub link_fraction: f64,
    pub retransmitted_segments: u64,
    pub retransmitted_bytes: u64,
    pub fast_retransmits: u32,
    pub sack_recoveries: u32,
    pub rto_firings: u32,
    pub wire_frames: u64,
    pub wall_secs: f64,
    pub virtual_secs_per_wall_sec: f64,
}

impl From<&TransferReport> for TransferRow {
    fn from(r: &TransferReport) -> TransferRow {
        let s = r.sender;
        let virt = r.elapsed.as_secs_f64();
        let wall = r.wall.as_secs_f64();
        TransferRow {
            loss_percent: r.transfer.loss * 100.0,
            link_gbps: r.transfer.rate_bps as f64 / 1e9,
            rtt_us: 2.0 * r.transfer.delay.as_secs_f64() * 1e6,
            bytes: r.bytes,
            intact: r.intact,
            virtual_secs: virt,
            goodput_gbps: r.goodput_bps / 1e9,
            link_fraction: r.link_fraction,
            retransmitted_segments: s.map_or(0, |s| s.retransmits),
            retransmitted_bytes: s.map_or(0, |s| s.bytes_retrans),
            fast_retransmits: s.map_or(0, |s| s.fast_retransmits),
            sack_recoveries: s.map_or(0, |s| s.sack_recoveries),
            rto_firings: s.map_or(0, |s| s.rto_count),
            wire_frames: r.wire_frames,
            wall_secs: wall,
            virtual_secs_per_wall_sec: if wall > 0.0 { virt / wall } else { 0.0 },
        }
    }
}

/// The demo's table.
pub fn print_table(rows: &[TransferRow]) {
    println!(
        "{:>6} {:>9} {:>7} {:>10} {:>9} {:>7} {:>8} {:>6} {:>5} {:>7}",
        "loss",
        "bytes",
        "intact",
        "goodput",
        "of link",
        "virt s",
        "retrans",
        "SACK",
        "RTO",
        "wall s"
    );
    for r in rows {
        println!(
            "{:>5.1}% {:>9} {:>7} {:>5.2} Gb/s {:>8.1}% {:>7.3} {:>8} {:>6} {:>5} {:>7.2}",
            r.loss_percent,
            mib(r.bytes),
            if r.intact { "yes" } else { "NO" },
            r.goodput_gbps,
            r.link_fraction * 100.0,
            r.virtual_secs,
            r.retransmitted_segments,
            r.sack_recoveries,
            r.rto_firings,
            r.wall_secs
        );
    }
}
