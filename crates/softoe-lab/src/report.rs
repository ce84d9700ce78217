//! Serializable reports and the tables printed from them.

use serde::Serialize;
use softoe_sim::scenario::TransferReport;

use crate::table::Table;
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
    print!("{}", transfer_table(rows));
}

/// The demo's table as text.
pub fn transfer_table(rows: &[TransferRow]) -> String {
    let mut t = Table::new().rights(&[
        "loss", "bytes", "intact", "goodput", "of link", "virt s", "retrans", "SACK", "RTO",
        "wall s",
    ]);
    for r in rows {
        t.row([
            format!("{:.1}%", r.loss_percent),
            mib(r.bytes),
            (if r.intact { "yes" } else { "NO" }).to_string(),
            format!("{:.2} Gb/s", r.goodput_gbps),
            format!("{:.1}%", r.link_fraction * 100.0),
            format!("{:.3}", r.virtual_secs),
            r.retransmitted_segments.to_string(),
            r.sack_recoveries.to_string(),
            r.rto_firings.to_string(),
            format!("{:.2}", r.wall_secs),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_table_has_a_header_and_a_line_per_row() {
        let row = TransferRow {
            loss_percent: 1.0,
            link_gbps: 10.0,
            rtt_us: 100.0,
            bytes: 64 << 20,
            intact: false,
            virtual_secs: 0.5,
            goodput_gbps: 1.25,
            link_fraction: 0.125,
            retransmitted_segments: 7,
            retransmitted_bytes: 0,
            fast_retransmits: 0,
            sack_recoveries: 2,
            rto_firings: 1,
            wire_frames: 0,
            wall_secs: 0.25,
            virtual_secs_per_wall_sec: 2.0,
        };
        let t = transfer_table(&[row]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("loss"), "{t}");
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            [
                "1.0%", "64", "MiB", "NO", "1.25", "Gb/s", "12.5%", "0.500", "7", "2", "1", "0.25"
            ]
        );
    }
}
