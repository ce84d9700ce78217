//! Who serves a socket: softoe or the kernel.
//!
//! Like libvma's rules, decided when the socket is given an address: a
//! `connect` to, or a `bind` on, an address inside one of the kernel's
//! networks (`$SOFTOE_KERNEL_NETS`, default `127.0.0.0/8`) stays with the
//! kernel, as do every socket that is not IPv4 TCP or UDP; everything
//! else is softoe's. `$SOFTOE_PRELOAD=off` leaves every socket to the
//! kernel (the shim then only passes calls through).

use std::net::Ipv4Addr;

/// The decision table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rules {
    /// Networks served by the kernel: (address, prefix length).
    pub kernel: Vec<(Ipv4Addr, u8)>,
    /// Whether softoe serves anything at all.
    pub enabled: bool,
}

/// A bad `$SOFTOE_KERNEL_NETS` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadNet(pub String);

impl Rules {
    /// From `$SOFTOE_KERNEL_NETS` and `$SOFTOE_PRELOAD`.
    pub fn from_env() -> Result<Rules, BadNet> {
        let nets = std::env::var("SOFTOE_KERNEL_NETS").unwrap_or_else(|_| "127.0.0.0/8".into());
        let enabled = !matches!(
            std::env::var("SOFTOE_PRELOAD").as_deref(),
            Ok("off" | "0" | "no")
        );
        Ok(Rules {
            kernel: Rules::parse(&nets)?,
            enabled,
        })
    }

    /// Parses a comma-separated list of `a.b.c.d/len` (a bare address is
    /// `/32`).
    pub fn parse(list: &str) -> Result<Vec<(Ipv4Addr, u8)>, BadNet> {
        list.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                let (a, l) = s.split_once('/').unwrap_or((s, "32"));
                let a: Ipv4Addr = a.parse().map_err(|_| BadNet(s.to_string()))?;
                let l: u8 = l.parse().map_err(|_| BadNet(s.to_string()))?;
                if l > 32 {
                    return Err(BadNet(s.to_string()));
                }
                Ok((a, l))
            })
            .collect()
    }

    /// Whether softoe serves a socket given address `ip` (the destination
    /// of a `connect`, the address of a `bind`; unspecified: softoe).
    pub fn softoe_serves(&self, ip: Ipv4Addr) -> bool {
        if !self.enabled {
            return false;
        }
        let x = u32::from(ip);
        !self.kernel.iter().any(|&(net, len)| {
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            x & mask == u32::from(net) & mask
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn loopback_stays_with_the_kernel_by_default() {
        let r = Rules {
            kernel: Rules::parse("127.0.0.0/8").unwrap(),
            enabled: true,
        };
        assert!(!r.softoe_serves(Ipv4Addr::new(127, 0, 0, 1)));
        assert!(!r.softoe_serves(Ipv4Addr::new(127, 9, 9, 9)));
        assert!(r.softoe_serves(Ipv4Addr::new(10, 7, 0, 2)));
        assert!(r.softoe_serves(Ipv4Addr::UNSPECIFIED));
    }

    #[test]
    fn lists_parse_and_bad_entries_are_named() {
        let n = Rules::parse(" 10.1.0.0/16, 192.168.1.1 ,").unwrap();
        assert_eq!(
            n,
            vec![
                (Ipv4Addr::new(10, 1, 0, 0), 16),
                (Ipv4Addr::new(192, 168, 1, 1), 32)
            ]
        );
        let r = Rules {
            kernel: n,
            enabled: true,
        };
        assert!(!r.softoe_serves(Ipv4Addr::new(10, 1, 200, 3)));
        assert!(r.softoe_serves(Ipv4Addr::new(10, 2, 0, 1)));
        assert!(!r.softoe_serves(Ipv4Addr::new(192, 168, 1, 1)));
        assert_eq!(
            Rules::parse("10.0.0.0/33"),
            Err(BadNet("10.0.0.0/33".into()))
        );
        assert_eq!(Rules::parse("nonsense"), Err(BadNet("nonsense".into())));
        let all = Rules {
            kernel: Rules::parse("0.0.0.0/0").unwrap(),
            enabled: true,
        };
        assert!(!all.softoe_serves(Ipv4Addr::new(8, 8, 8, 8)));
        let off = Rules {
            kernel: vec![],
            enabled: false,
        };
        assert!(!off.softoe_serves(Ipv4Addr::new(10, 7, 0, 2)));
    }
}
