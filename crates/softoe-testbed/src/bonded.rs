//! Bonded topologies: hosts with several links into one bridge (the
//! BondingPlus paper's "regular switching hub"), each link shaped by `tbf`
//! in both directions, and plain Linux hosts with one link each.
//!
//! [`BondedBed`] builds the switch (a bridge in its own namespace) and the
//! Linux hosts; the bonded hosts' members are devices that appear in the
//! switch's namespace later (an engine's TAP devices: the engine creates
//! them), and [`BondedBed::attach_member`] plugs each into the bridge and
//! shapes it.
//!
//! **Shaping both ways.** A link toward a host is shaped by a `tbf` on the
//! switch side's egress (the TAP, or the Linux host's bridge port). A link
//! from a host: on a Linux host, a `tbf` on its `eth0`; on a TAP, whose
//! "egress from the host" is the switch side's *ingress*, frames are
//! redirected (`u32` + `mirred`, the classifiers this kernel has) to an
//! `ifb` device whose egress carries the `tbf` and which hands them back
//! to the TAP's receive path, so they reach the bridge at the link's rate.
//! So N members carry N × the rate each way, not more, whatever the
//! sender's scheduling does.
//!
//! ```no_run
//! use softoe_testbed::{BondedBed, BondedOptions};
//! let bed = BondedBed::new(BondedOptions::default())?;
//! // … an engine opens TAP `sbm0` in `bed.sw` …
//! bed.attach_member("sbm0")?;
//! bed.set_member_up("sbm0", false)?; // cut the link
//! bed.set_member_up("sbm0", true)?; // and back, shaped again
//! # Ok::<(), softoe_testbed::Error>(())
//! ```

use std::net::Ipv4Addr;
use std::sync::Mutex;
use std::time::Duration;

pub use crate::lan::{BRIDGE, LinuxHost};
use crate::{Error, Netns, Result, Testbed};

/// How a [`BondedBed`] is built.
#[derive(Clone, Debug)]
pub struct BondedOptions {
    /// Every link's rate each way in Mbit/s; `None`: unshaped (CPU-bound).
    pub rate_mbit: Option<u64>,
    /// The first three octets of the /24 every host sits in.
    pub subnet: [u8; 3],
    /// How many plain Linux hosts (one link each), at `.9`, `.10`, ….
    pub linux_hosts: usize,
    /// The longest a frame waits in a link's queue (tbf's `latency`).
    pub queue: Duration,
    /// Arm the testbed's watchdog (see [`Testbed::deadline`]).
    pub deadline: Option<Duration>,
    /// Drop this percentage of the frames of this EtherType that each
    /// member sends, as they enter the switch (before it is up, so from
    /// its first frame; a dropped broadcast reaches nobody). Counted by
    /// [`Testbed::dropped_on`] on the member's device in `sw`.
    pub member_drop: Option<(u16, f64)>,
}

impl Default for BondedOptions {
    /// 100 Mbit/s links (the paper's 100BASE-TX), 10.8.0.0/24, one Linux
    /// host, 50 ms queues.
    fn default() -> BondedOptions {
        BondedOptions {
            rate_mbit: Some(100),
            subnet: [10, 8, 0],
            linux_hosts: 1,
            queue: Duration::from_millis(50),
            deadline: None,
            member_drop: None,
        }
    }
}

/// A switch with plain Linux hosts, ready for bonded hosts' members; see
/// the module docs. Dropping it deletes every namespace (and so every
/// device in them), also on a failure half-way.
#[derive(Debug)]
pub struct BondedBed {
    /// The namespaces. Declared last among what the caller sees: it goes
    /// after whatever the caller keeps running in them.
    pub tb: Testbed,
    /// The switch: the bridge, the members' devices, their `ifb`s.
    pub sw: Netns,
    /// The plain Linux hosts.
    pub linux: Vec<LinuxHost>,
    opts: BondedOptions,
    /// Each shaped member and its `ifb` (the from-host direction).
    ifbs: Mutex<Vec<(String, String)>>,
}

impl BondedBed {
    /// The switch and the Linux hosts, every Linux link shaped both ways.
    pub fn new(opts: BondedOptions) -> Result<BondedBed> {
        let mut tb = Testbed::new()?;
        if let Some(d) = opts.deadline {
            tb.deadline(d);
        }
        let names: Vec<String> = (0..opts.linux_hosts).map(|i| format!("lx{i}")).collect();
        let hosts = names
            .iter()
            .enumerate()
            .map(|(i, name)| Ok((name.as_str(), Self::addr_in(&opts, 9 + i)?)))
            .collect::<Result<Vec<_>>>()?;
        let lan = tb.lan(&hosts, 24, None)?;
        if let Some(rate) = opts.rate_mbit {
            for h in &lan.hosts {
                tb.tbf_with(&lan.sw, &h.port, rate, opts.queue, false)?;
                tb.tbf_with(&h.ns, "eth0", rate, opts.queue, false)?;
            }
        }
        Ok(BondedBed {
            tb,
            sw: lan.sw,
            linux: lan.hosts,
            opts,
            ifbs: Mutex::new(Vec::new()),
        })
    }

    fn addr_in(opts: &BondedOptions, host: usize) -> Result<Ipv4Addr> {
        let last = u8::try_from(host)
            .ok()
            .filter(|h| (1..255).contains(h))
            .ok_or_else(|| Error::Command {
                cmd: format!("host .{host}"),
                stderr: "too many hosts for a /24".into(),
            })?;
        let [a, b, c] = opts.subnet;
        Ok(Ipv4Addr::new(a, b, c, last))
    }

    /// The address of host number `host` (1–254) in the bed's /24.
    pub fn addr(&self, host: u8) -> Ipv4Addr {
        let [a, b, c] = self.opts.subnet;
        Ipv4Addr::new(a, b, c, host)
    }

    /// The links' rate in Mbit/s (`None`: unshaped).
    pub fn rate_mbit(&self) -> Option<u64> {
        self.opts.rate_mbit
    }

    /// Plugs `dev` (a device in the switch namespace, such as an engine's
    /// TAP) into the bridge, up, and shapes its link both ways.
    pub fn attach_member(&self, dev: &str) -> Result<()> {
        if let Some((ethertype, percent)) = self.opts.member_drop {
            self.tb
                .random_drop_ethertype(&self.sw, dev, ethertype, percent)?;
        }
        self.tb.attach(&self.sw, dev, BRIDGE)?;
        self.shape(dev)
    }

    /// Shapes `dev`'s link both ways (nothing when unshaped): `tbf` on its
    /// egress (toward the host) and, through an `ifb`, on its ingress
    /// (from the host). Idempotent: again after the device went down and
    /// up.
    pub fn shape(&self, dev: &str) -> Result<()> {
        let Some(rate) = self.opts.rate_mbit else {
            return Ok(());
        };
        let sw = &self.sw;
        self.tb.tbf_with(sw, dev, rate, self.opts.queue, false)?;
        let ifb = {
            let mut ifbs = self.ifbs.lock().unwrap_or_else(|p| p.into_inner());
            match ifbs.iter().find(|(d, _)| d == dev) {
                Some((_, i)) => i.clone(),
                None => {
                    let i = self.tb.ifname("fb")?;
                    sw.ip(&["link", "add", &i, "type", "ifb"])?;
                    ifbs.push((dev.to_string(), i.clone()));
                    i
                }
            }
        };
        sw.ip(&["link", "set", &ifb, "up"])?;
        self.tb.tbf_with(sw, &ifb, rate, self.opts.queue, false)?;
        // A fresh clsact (dropping any old one with its filter), then one
        // filter sending every frame through the ifb.
        let tc = |args: &[&str]| {
            crate::run(
                std::process::Command::new("tc")
                    .args(["-n", sw.name()])
                    .args(args),
            )
        };
        let _ = tc(&["qdisc", "del", "dev", dev, "clsact"]);
        tc(&["qdisc", "add", "dev", dev, "clsact"])?;
        tc(&[
            "filter", "add", "dev", dev, "ingress", "protocol", "all", "u32", "match", "u32", "0",
            "0", "action", "mirred", "egress", "redirect", "dev", &ifb,
        ])?;
        Ok(())
    }

    /// Sets member `dev` down (a cut link: the host's side loses carrier
    /// and nothing crosses) or up again (shaped again).
    pub fn set_member_up(&self, dev: &str, up: bool) -> Result<()> {
        self.sw
            .ip(&["link", "set", dev, if up { "up" } else { "down" }])?;
        if up { self.shape(dev) } else { Ok(()) }
    }

    /// Frames the shapers of member `dev`'s link dropped so far, both ways
    /// (full `tbf` queues: the link's own loss).
    pub fn queue_drops(&self, dev: &str) -> Result<u64> {
        let ifb = {
            let ifbs = self.ifbs.lock().unwrap_or_else(|p| p.into_inner());
            ifbs.iter().find(|(d, _)| d == dev).map(|(_, i)| i.clone())
        };
        let mut n = self.tb.qdisc_dropped(&self.sw, dev)?;
        if let Some(ifb) = ifb {
            n += self.tb.qdisc_dropped(&self.sw, &ifb)?;
        }
        Ok(n)
    }

    /// Bytes that went through `dev`'s from-host shaper (its `ifb`), from
    /// `ip -s link`; `None` when it has none.
    pub fn shaped_from_host_bytes(&self, dev: &str) -> Result<Option<u64>> {
        let ifb = {
            let ifbs = self.ifbs.lock().unwrap_or_else(|p| p.into_inner());
            ifbs.iter().find(|(d, _)| d == dev).map(|(_, i)| i.clone())
        };
        let Some(ifb) = ifb else {
            return Ok(None);
        };
        let out = self.sw.ip(&["-s", "-o", "link", "show", &ifb])?;
        // "... RX: bytes packets ... \    BYTES PKTS ... TX: ..." on one line.
        let bytes = out
            .split("TX:")
            .nth(1)
            .and_then(|tx| tx.split('\\').nth(1))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|b| b.parse().ok());
        Ok(bytes)
    }
}
