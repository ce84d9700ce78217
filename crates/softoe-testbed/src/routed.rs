//! Hosts beyond routers: Linux routers in namespaces of their own, point-
//! to-point links with an MTU, and a host reached from a LAN through a
//! chain of them ([`Testbed::routed_host`]) — a narrow hop in the middle of
//! a path, where path-MTU discovery and fragmentation happen.
//!
//! A Linux router does what the Internet's do: it forwards, decrements the
//! TTL, answers a packet with DF set that its next link cannot carry with
//! an ICMP fragmentation needed (never rate-limited: Linux exempts path-MTU
//! discovery), and cuts one without DF into fragments.
//!
//! ```no_run
//! use softoe_testbed::{BRIDGE, Testbed};
//! let mut tb = Testbed::new()?;
//! let lan = tb.lan(&[("lx", "10.7.0.2".parse()?)], 24, None)?;
//! // The LAN — router — (1,200) — router — (1,500) — far host.
//! let far = tb.routed_host(&lan.sw, BRIDGE, "10.7.0.254/24".parse()?, &[1200, 1500], "far")?;
//! tb.route(&lan.hosts[0].ns, &far.net(), far.gateway)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::net::Ipv4Addr;

use crate::{Netns, Result, Testbed};

/// A host reached through routers ([`Testbed::routed_host`]).
#[derive(Clone, Debug)]
pub struct RoutedHost {
    /// Its namespace (its device is `eth0`).
    pub ns: Netns,
    /// Its address.
    pub ip: Ipv4Addr,
    /// The routers, from the LAN's side on.
    pub routers: Vec<Netns>,
    /// The first router's address on the LAN: the LAN's hosts route the
    /// far networks ([`net`](Self::net)) through it.
    pub gateway: Ipv4Addr,
}

impl RoutedHost {
    /// Every network beyond the gateway: `10.200.0.0/16`.
    pub fn net(&self) -> String {
        format!("{}.{}.0.0/16", ROUTED_NET[0], ROUTED_NET[1])
    }
}

/// Link `k` of a routed path is `10.200.k.0/24`: `.1` on the left
/// (toward the LAN), `.2` on the right.
const ROUTED_NET: [u8; 2] = [10, 200];

fn link_addr(k: usize, right: bool) -> Ipv4Addr {
    Ipv4Addr::new(
        ROUTED_NET[0],
        ROUTED_NET[1],
        k as u8,
        if right { 2 } else { 1 },
    )
}

impl Testbed {
    /// A namespace `name` that forwards IPv4 between its links.
    pub fn router(&mut self, name: &str) -> Result<Netns> {
        let ns = self.netns(name)?;
        self.sysctl(&ns, "net.ipv4.ip_forward=1")?;
        Ok(ns)
    }

    /// A point-to-point link: `a_if` in `a` with `a_addr`, `b_if` in `b`
    /// with `b_addr` (both `address/prefix`), both ends at `mtu` if given.
    #[allow(clippy::too_many_arguments)]
    pub fn link(
        &mut self,
        a: &Netns,
        a_if: &str,
        a_addr: &str,
        b: &Netns,
        b_if: &str,
        b_addr: &str,
        mtu: Option<usize>,
    ) -> Result<()> {
        self.veth(a, a_if, b, b_if)?;
        if let Some(m) = mtu {
            self.mtu(a, a_if, m)?;
            self.mtu(b, b_if, m)?;
        }
        self.addr(a, a_if, a_addr)?;
        self.addr(b, b_if, b_addr)
    }

    /// A route in `ns`: `dst` (`a.b.c.d/n`, or `default`) through `via`.
    pub fn route(&self, ns: &Netns, dst: &str, via: Ipv4Addr) -> Result<()> {
        ns.ip(&["route", "replace", dst, "via", &via.to_string()])
            .map(|_| ())
    }

    /// A host `name` behind a chain of routers from the LAN of switch
    /// `sw` (bridge `bridge`): the first router plugs into the bridge with
    /// `gateway` (an `address/prefix` of the LAN), and each entry of
    /// `mtus` is one more link, at that MTU — router to router, the last
    /// to the host. `&[1200, 1500]`: LAN — router — 1,200 — router —
    /// 1,500 — host, so that the host's own link, and the LAN, are wider
    /// than the path, as on the Internet. Link `k` is `10.200.k.0/24`;
    /// every router and the host get the routes for the whole path. The
    /// LAN's hosts need a route to [`RoutedHost::net`] through
    /// [`RoutedHost::gateway`] ([`route`](Self::route)).
    pub fn routed_host(
        &mut self,
        sw: &Netns,
        bridge: &str,
        gateway: ipnet_like::Cidr,
        mtus: &[usize],
        name: &str,
    ) -> Result<RoutedHost> {
        let n = mtus.len().max(1);
        let mut routers = Vec::with_capacity(n);
        for i in 0..n {
            routers.push(self.router(&format!("{name}r{i}"))?);
        }
        let first = routers
            .first()
            .cloned()
            .ok_or_else(|| crate::Error::Command {
                cmd: format!("routed_host {name}"),
                stderr: "no router".into(),
            })?;
        self.veth_to_bridge(&first, "eth0", sw, bridge)?;
        self.addr(&first, "eth0", &gateway.to_string())?;
        let host = self.netns(name)?;
        for (k, &mtu) in mtus.iter().enumerate().take(n) {
            let left = routers.get(k).cloned().unwrap_or_else(|| first.clone());
            let right = routers.get(k + 1).cloned().unwrap_or_else(|| host.clone());
            let right_if = if k + 1 == n { "eth0" } else { "left0" };
            self.link(
                &left,
                "right0",
                &format!("{}/24", link_addr(k, false)),
                &right,
                right_if,
                &format!("{}/24", link_addr(k, true)),
                Some(mtu),
            )?;
        }
        let lan_net = gateway.network();
        for (i, r) in routers.iter().enumerate() {
            // Everything further right, through the right neighbour (the
            // links it is on are more specific, connected routes).
            if i + 1 < n {
                self.route(
                    r,
                    &format!("{}.{}.0.0/16", ROUTED_NET[0], ROUTED_NET[1]),
                    link_addr(i, true),
                )?;
            }
            // Everything to its left, through the left neighbour.
            if i > 0 {
                let back = link_addr(i - 1, false);
                self.route(r, &lan_net, back)?;
                for k in 0..i.saturating_sub(1) {
                    let net = format!("{}.{}.{k}.0/24", ROUTED_NET[0], ROUTED_NET[1]);
                    self.route(r, &net, back)?;
                }
            }
        }
        self.route(&host, "default", link_addr(n - 1, false))?;
        Ok(RoutedHost {
            ns: host,
            ip: link_addr(n - 1, true),
            routers,
            gateway: gateway.addr,
        })
    }
}

/// An `address/prefix` pair, for [`Testbed::routed_host`].
pub mod ipnet_like {
    use std::net::Ipv4Addr;

    /// An IPv4 address with its prefix length (`10.7.0.254/24`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Cidr {
        /// The address.
        pub addr: Ipv4Addr,
        /// The prefix length.
        pub prefix: u8,
    }

    impl Cidr {
        /// The network it is in, `a.b.c.d/n`.
        pub fn network(&self) -> String {
            let mask = if self.prefix == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(self.prefix.min(32)))
            };
            format!(
                "{}/{}",
                Ipv4Addr::from(u32::from(self.addr) & mask),
                self.prefix
            )
        }
    }

    impl std::fmt::Display for Cidr {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{}/{}", self.addr, self.prefix)
        }
    }

    impl std::str::FromStr for Cidr {
        type Err = String;

        fn from_str(s: &str) -> Result<Cidr, String> {
            let (a, p) = s
                .split_once('/')
                .ok_or_else(|| format!("{s}: say address/prefix"))?;
            let addr = a.parse().map_err(|e| format!("{s}: {e}"))?;
            let prefix: u8 = p.parse().map_err(|e| format!("{s}: {e}"))?;
            if prefix > 32 {
                return Err(format!("{s}: a prefix is 0 to 32"));
            }
            Ok(Cidr { addr, prefix })
        }
    }

    #[cfg(test)]
    mod tests {
        #![allow(clippy::unwrap_used)]

        use super::*;

        #[test]
        fn parses_and_names_its_network() {
            let c: Cidr = "10.7.0.254/24".parse().unwrap();
            assert_eq!(c.network(), "10.7.0.0/24");
            assert_eq!(c.to_string(), "10.7.0.254/24");
            assert!("10.7.0.254".parse::<Cidr>().is_err());
            assert!("10.7.0.254/33".parse::<Cidr>().is_err());
            assert_eq!("1.2.3.4/0".parse::<Cidr>().unwrap().network(), "0.0.0.0/0");
        }
    }
}
