//! The region a process can afford: its data area sized to the address
//! space `RLIMIT_AS` leaves it.
//!
//! The data area (256 MiB by default, `SOFTOE_DATA_MB`) is address space
//! of the program's: vsftpd limits itself to 200 MiB, and with the region
//! mapped its own `mmap` failed ("500 OOPS: mmap"). Under a finite limit
//! the attach takes at most a quarter of what the limit leaves beyond
//! what the process maps already (`/proc/self/statm`; half the limit
//! counts as used when that cannot be read, in a chroot without `/proc`),
//! and never less than [`FLOOR`]; a smaller area gets smaller socket
//! rings, so that at least [`MIN_SOCKETS`] connections fit. What was
//! chosen is logged at debug level.

use super::Config;

/// The least data area an attach asks for under a limit.
pub(crate) const FLOOR: u64 = 8 << 20;

/// Connections a shrunk data area still holds with both rings.
pub(crate) const MIN_SOCKETS: u64 = 16;

/// What to ask for: `cfg`'s sizes, shrunk to a quarter of the room a
/// limit of `limit` bytes (`None`: unlimited) leaves beyond `used`.
pub(crate) fn choose(cfg: &Config, limit: Option<u64>, used: Option<u64>) -> (u64, u64, u64) {
    let keep = (cfg.data_len, cfg.rx_ring, cfg.tx_ring);
    let Some(limit) = limit else {
        return keep;
    };
    let used = used.unwrap_or(limit / 2);
    let quarter = (limit.saturating_sub(used) / 4) & !((1 << 20) - 1);
    let data = cfg.data_len.min(quarter.max(FLOOR));
    if data >= cfg.data_len {
        return keep;
    }
    let ring = ((data / (2 * MIN_SOCKETS)) & !4095).max(4096);
    (data, cfg.rx_ring.min(ring), cfg.tx_ring.min(ring))
}

/// The address-space limit in force, if finite.
fn limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::As).current
}

/// The bytes this process maps now (`VmSize`).
fn used() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(pages * rustix::param::page_size() as u64)
}

/// `cfg` with its data area and rings fitted to this process's
/// address-space limit.
pub(crate) fn fit(mut cfg: Config) -> Config {
    let limit = limit();
    if limit.is_none() {
        return cfg;
    }
    let used = used();
    let (data, rx, tx) = choose(&cfg, limit, used);
    tracing::debug!(
        limit_mib = limit.map(|l| l >> 20),
        mapped_mib = used.map(|u| u >> 20),
        data_mib = data >> 20,
        asked_mib = cfg.data_len >> 20,
        rx_kib = rx >> 10,
        tx_kib = tx >> 10,
        "the region's data area, fitted to RLIMIT_AS"
    );
    (cfg.data_len, cfg.rx_ring, cfg.tx_ring) = (data, rx, tx);
    cfg
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn cfg() -> Config {
        Config {
            data_len: 256 * MIB,
            rx_ring: 512 << 10,
            tx_ring: 512 << 10,
            ..Config::default()
        }
    }

    #[test]
    fn no_limit_keeps_what_was_asked() {
        assert_eq!(
            choose(&cfg(), None, Some(10 * MIB)),
            (256 * MIB, 512 << 10, 512 << 10)
        );
        // A limit with room for four times the area changes nothing.
        assert_eq!(
            choose(&cfg(), Some(2048 * MIB), Some(20 * MIB)).0,
            256 * MIB
        );
    }

    #[test]
    fn a_limit_leaves_the_program_three_quarters() {
        // vsftpd: 200 MiB, 20 mapped: a quarter of 180, whole MiB.
        let (data, rx, tx) = choose(&cfg(), Some(200 * MIB), Some(20 * MIB));
        assert_eq!(data, 45 * MIB);
        assert_eq!((rx, tx), (512 << 10, 512 << 10), "16 sockets fit anyway");
        // Little room: the floor, and rings that let 16 connections fit.
        let (data, rx, tx) = choose(&cfg(), Some(40 * MIB), Some(30 * MIB));
        assert_eq!(data, FLOOR);
        assert_eq!(rx, FLOOR / 32);
        assert_eq!(tx, FLOOR / 32);
        assert!(MIN_SOCKETS * (rx + tx) <= data);
        // More mapped than the limit: the floor (the attach then fails
        // with the mapping's error, which says why).
        assert_eq!(choose(&cfg(), Some(40 * MIB), Some(90 * MIB)).0, FLOOR);
        // Unknown use counts as half the limit.
        assert_eq!(choose(&cfg(), Some(400 * MIB), None).0, 50 * MIB);
        // Never more than was asked.
        let small = Config {
            data_len: 16 * MIB,
            ..cfg()
        };
        assert_eq!(choose(&small, Some(200 * MIB), Some(0)).0, 16 * MIB);
    }
}
