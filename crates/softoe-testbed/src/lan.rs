//! A switched LAN: a switch (a bridge in a namespace of its own) and hosts
//! with one link each into it. The testbeds built of these —
//! [`BondedBed`](crate::BondedBed), the engine's test bed and `softoe
//! demo`/`softoe bench`'s — all start from [`Testbed::lan`], and then plug
//! their own devices (an engine's TAPs) into [`BRIDGE`] with
//! [`Testbed::attach`].
//!
//! ```no_run
//! use softoe_testbed::{BRIDGE, Testbed};
//! let mut tb = Testbed::new()?;
//! let lan = tb.lan(&[("lx", "10.7.0.2".parse()?)], 24, None)?;
//! // … an engine opens TAP `tap0` in `lan.sw` …
//! tb.attach(&lan.sw, "tap0", BRIDGE)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::net::Ipv4Addr;

use crate::{Netns, Result, Testbed};

/// The bridge's name in the switch namespace.
pub const BRIDGE: &str = "br0";

/// A Linux host with one link into the switch.
#[derive(Clone, Debug)]
pub struct LinuxHost {
    /// Its namespace (its device is `eth0`).
    pub ns: Netns,
    /// Its address.
    pub ip: Ipv4Addr,
    /// The switch side of its link (in the switch namespace).
    pub port: String,
}

/// A switch and its hosts, as [`Testbed::lan`] built them.
#[derive(Clone, Debug)]
pub struct Lan {
    /// The switch: the bridge [`BRIDGE`] and the hosts' ports.
    pub sw: Netns,
    /// The hosts, in the order asked for.
    pub hosts: Vec<LinuxHost>,
}

impl Testbed {
    /// A switch, namespace `sw` with the bridge [`BRIDGE`], and a host
    /// per `(name, ip)` of `hosts`: namespace `name`, whose `eth0` is
    /// linked into the bridge and has `ip/prefix`. With `mtu`, every link
    /// carries it: the bridge and both ends of each host's link.
    pub fn lan(
        &mut self,
        hosts: &[(&str, Ipv4Addr)],
        prefix: u8,
        mtu: Option<usize>,
    ) -> Result<Lan> {
        let sw = self.netns("sw")?;
        self.bridge(&sw, BRIDGE)?;
        if let Some(mtu) = mtu {
            self.mtu(&sw, BRIDGE, mtu)?;
        }
        let mut lan = Lan {
            sw,
            hosts: Vec::with_capacity(hosts.len()),
        };
        for &(name, ip) in hosts {
            let ns = self.netns(name)?;
            let port = self.veth_to_bridge(&ns, "eth0", &lan.sw, BRIDGE)?;
            if let Some(mtu) = mtu {
                self.mtu(&ns, "eth0", mtu)?;
                self.mtu(&lan.sw, &port, mtu)?;
            }
            self.addr(&ns, "eth0", &format!("{ip}/{prefix}"))?;
            lan.hosts.push(LinuxHost { ns, ip, port });
        }
        Ok(lan)
    }
}
