//! Units as the lab's options take them and as its tables print them:
//! every formatter in one place, so that a table's column reads the same
//! wherever the lab prints it.

/// Parses `64M`, `1G`, `4096`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(format!("unknown size suffix '{c}' (use K, M or G)")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size like 4096, 64K, 64M or 1G"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("'{s}' is too large"))
}

/// A number with three significant digits (two decimals at most).
fn sig3(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// A rate in Gb/s, Mb/s or kb/s, three significant digits.
pub(crate) fn rate(gbps: f64) -> String {
    let bps = gbps * 1e9;
    if bps >= 1e9 {
        format!("{} Gb/s", sig3(gbps))
    } else if bps >= 1e6 {
        format!("{} Mb/s", sig3(bps / 1e6))
    } else {
        format!("{} kb/s", sig3(bps / 1e3))
    }
}

/// A ratio with two significant digits down to 0.0001.
pub(crate) fn ratio(x: f64) -> String {
    if x >= 0.1 {
        format!("{x:.2}")
    } else if x >= 0.01 {
        format!("{x:.3}")
    } else {
        format!("{x:.4}")
    }
}

/// A byte count in KiB, MiB or GiB.
pub(crate) fn size(b: u64) -> String {
    let b = b as f64;
    if b >= f64::from(1u32 << 30) {
        format!("{:.1} GiB", b / f64::from(1u32 << 30))
    } else if b >= f64::from(1u32 << 20) {
        format!("{:.0} MiB", b / f64::from(1u32 << 20))
    } else {
        format!("{:.0} KiB", b / 1024.0)
    }
}

/// A byte count in whole MiB.
pub(crate) fn mib(b: u64) -> String {
    format!("{:.0} MiB", b as f64 / (1024.0 * 1024.0))
}

/// A rate in Gb/s as a bare number, three decimals.
pub(crate) fn gbps_bare(bps: f64) -> String {
    format!("{:.3}", bps / 1e9)
}

/// A signed relative error as a whole percentage.
pub(crate) fn pct(e: f64) -> String {
    format!("{:+.0}%", e * 100.0)
}

/// A rate in Gb/s (three decimals) or, below 1 Gb/s, Mb/s (one).
pub(crate) fn gbps_or_mbps(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.3} Gb/s", bps / 1e9)
    } else {
        format!("{:.1} Mb/s", bps / 1e6)
    }
}

/// A measured value and its unit: microseconds with one decimal, any
/// other unit with two.
pub(crate) fn value(v: f64, unit: &str) -> String {
    if unit == "µs" {
        format!("{v:.1} µs")
    } else {
        format!("{v:.2} {unit}")
    }
}

/// A byte count in whole GiB from 1 GiB up, else whole MiB (rounded down).
pub(crate) fn size_whole(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{} GiB", b >> 30)
    } else {
        format!("{} MiB", b >> 20)
    }
}

/// A byte count exactly: in MiB or KiB where it is a whole number of
/// them, else in bytes.
pub(crate) fn size_exact(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1024 && b.is_multiple_of(1024) {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

/// A bit rate as `ss -ti` prints one: `1.2Gbps`, `3.4Mbps`, `5.6Kbps`, `78bps`.
pub fn bps_compact(bps: u64) -> String {
    let b = bps as f64;
    if b >= 1e9 {
        format!("{:.1}Gbps", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1}Mbps", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1}Kbps", b / 1e3)
    } else {
        format!("{bps}bps")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_take_their_unit_and_precision() {
        assert_eq!(value(12.345, "µs"), "12.3 µs");
        assert_eq!(value(9.4149, "Gb/s"), "9.41 Gb/s");
    }

    #[test]
    fn whole_sizes_round_down() {
        assert_eq!(size_whole(1 << 30), "1 GiB");
        assert_eq!(size_whole((3 << 30) + 5), "3 GiB");
        assert_eq!(size_whole(64 << 20), "64 MiB");
        assert_eq!(size_whole((64 << 20) + (1 << 19)), "64 MiB");
    }

    #[test]
    fn exact_sizes_never_round() {
        assert_eq!(size_exact(1 << 20), "1 MiB");
        assert_eq!(size_exact(3 << 10), "3 KiB");
        assert_eq!(size_exact((1 << 20) + 1024), "1025 KiB");
        assert_eq!(size_exact(1500), "1500 B");
        assert_eq!(size_exact(512), "512 B");
    }

    #[test]
    fn compact_rates_pick_their_prefix() {
        assert_eq!(bps_compact(12_340_000_000), "12.3Gbps");
        assert_eq!(bps_compact(5_500_000), "5.5Mbps");
        assert_eq!(bps_compact(1_000), "1.0Kbps");
        assert_eq!(bps_compact(999), "999bps");
        assert_eq!(bps_compact(0), "0bps");
    }
}
