//! # softoe-testbed: real Linux testbeds
//!
//! Tests, the demo and the benchmarks put softoe on a real (virtual) wire and
//! compare it with Linux's own TCP on the same path. This crate builds that
//! wire out of what the kernel offers: network namespaces as hosts, veth
//! pairs as cables, a Linux bridge as the "regular switch", `tbf` for link
//! rates, a small eBPF program on a device's ingress for random drops, and
//! the `SIOCETHTOOL` ioctl for offloads, and Linux routers in namespaces
//! for paths with a narrow hop ([`routed`]); hosts with several shaped
//! links into one bridge for the bond ([`bonded`]), the switched LAN they
//! all start from ([`lan`]), and kernel timestamps of marked frames on a
//! namespace's devices ([`wiretap`]). It needs nothing beyond the kernel
//! and `iproute2` (`ip`, and `tc` for [`Testbed::tbf`]): no `ethtool`, no
//! `nft`, no `sysctl` binary.
//!
//! Everything a testbed creates carries a name unique to the run
//! (`so<pid>x<n>-…`, interface names within 15 bytes) and lives in its own
//! namespaces, so nothing touches the root namespace's links; dropping the
//! [`Testbed`] kills every process still running in its namespaces (a
//! server a test forgot, the workers a daemon forked) and then deletes the
//! namespaces (and so every interface in them), also when a test panics. A
//! new testbed first does the same to what a killed run of this program
//! left behind (namespaces whose owner pid is gone).
//!
//! Code runs *inside* a namespace through [`Netns::run`]: a fresh thread
//! joins the namespace (`setns`), so sockets it opens, and TAP devices it
//! creates, belong there, while the rest of the process stays put.
//!
//! ```no_run
//! use softoe_testbed::Testbed;
//! let mut tb = Testbed::new()?;
//! let sw = tb.netns("sw")?;
//! let a = tb.netns("a")?;
//! tb.bridge(&sw, "br0")?;
//! tb.veth_to_bridge(&a, "eth0", &sw, "br0")?;
//! tb.addr(&a, "eth0", "10.0.0.2/24")?;
//! let out = a.run(|| std::net::TcpListener::bind("10.0.0.2:80").map(|l| l.local_addr()))??;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(unsafe_code)]

pub mod bonded;
mod bpf_drop;
pub mod lan;
mod netns;
mod offload;
pub mod routed;
mod watchdog;
pub mod wiretap;

pub use bonded::{BondedBed, BondedOptions};
pub use lan::{BRIDGE, Lan, LinuxHost};
pub use netns::{Netns, NsThread};
pub use routed::RoutedHost;
pub use routed::ipnet_like::Cidr;
pub use watchdog::{Watchdog, test_deadline};
pub use wiretap::{Sighting, WireTap};

use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bpf_drop::{DropProgram, Frames};

use tracing::debug;

/// What can go wrong building a testbed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A command could not run at all (not installed?).
    #[error("could not run `{cmd}`: {source} (is iproute2 installed, and are we root?)")]
    Spawn {
        /// The command line.
        cmd: String,
        /// Why.
        source: std::io::Error,
    },
    /// A command failed.
    #[error("`{cmd}` failed: {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// Joining a namespace failed.
    #[error("cannot enter network namespace {name}: {source}")]
    Setns {
        /// The namespace.
        name: String,
        /// Why.
        source: std::io::Error,
    },
    /// A thread running in a namespace panicked.
    #[error("a thread running in namespace {0} panicked")]
    Panicked(String),
    /// A name would not fit (interface names are at most 15 bytes).
    #[error("name {0:?} is too long for an interface (15 bytes at most)")]
    NameTooLong(String),
    /// Loading, attaching or reading an eBPF program or map failed.
    #[error("{what}: {source}")]
    Bpf {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// Frames a lossy link dropped, per direction (see
/// [`Testbed::link_drops`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkDrops {
    /// Frames on their way to the host (dropped at its `eth0`).
    pub to_host: u64,
    /// Frames the host sent (dropped at its bridge port).
    pub from_host: u64,
}

impl LinkDrops {
    /// What was dropped between `before` and this reading.
    pub fn since(self, before: LinkDrops) -> LinkDrops {
        LinkDrops {
            to_host: self.to_host.saturating_sub(before.to_host),
            from_host: self.from_host.saturating_sub(before.from_host),
        }
    }
}

/// The sum of the `dropped N` counts in `tc -s qdisc show`'s text (one
/// per qdisc: ` Sent 4 bytes 2 pkt (dropped 1, overlimits 0 requeues 0)`).
fn qdisc_drops_in(text: &str) -> u64 {
    text.split("(dropped ")
        .skip(1)
        .filter_map(|rest| rest.split(',').next()?.trim().parse::<u64>().ok())
        .sum()
}

/// A drop rate in percent as parts per million (`0.1` → 1,000), rounded;
/// an error for anything but a number from 0 to 100.
pub fn drop_ppm(percent: f64) -> std::result::Result<u32, String> {
    if !(0.0..=100.0).contains(&percent) {
        return Err(format!(
            "a drop rate is a percentage, 0 to 100 (fractions such as 0.1 are fine), not {percent}"
        ));
    }
    // In range, so the product is 0..=1e6 and fits.
    Ok((percent * 10_000.0).round() as u32)
}

/// The `rps_cpus` mask naming CPUs `0..cpus`: hexadecimal, in comma-separated
/// groups of 32 bits, most significant first, as the kernel prints masks.
pub fn rps_mask(cpus: usize) -> String {
    let cpus = cpus.max(1);
    let groups = cpus.div_ceil(32);
    (0..groups)
        .rev()
        .map(|g| {
            let bits = (cpus - g * 32).min(32);
            let word = if bits == 32 {
                u32::MAX
            } else {
                (1u32 << bits) - 1
            };
            format!("{word:08x}")
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether this process runs as root (namespaces and TAP devices need it).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// Runs a command, failing with its stderr.
pub fn run(cmd: &mut Command) -> Result<String> {
    let line = format!("{cmd:?}").replace('"', "");
    debug!(cmd = %line, "testbed");
    let out = cmd.output().map_err(|source| Error::Spawn {
        cmd: line.clone(),
        source,
    })?;
    if !out.status.success() {
        return Err(Error::Command {
            cmd: line,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn ip(args: &[&str]) -> Result<String> {
    run(Command::new("ip").args(args))
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A set of namespaces and links, deleted when dropped.
#[derive(Debug)]
pub struct Testbed {
    prefix: String,
    namespaces: Vec<String>,
    /// The random-drop programs attached, by namespace.
    drops: Mutex<Vec<(String, DropProgram)>>,
    watchdog: Option<Watchdog>,
}

impl Testbed {
    /// A new, empty testbed with a name unique to this process and call.
    pub fn new() -> Result<Testbed> {
        reap_leftovers();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        Ok(Testbed {
            prefix: format!("so{}x{n}", std::process::id()),
            namespaces: Vec::new(),
            drops: Mutex::new(Vec::new()),
            watchdog: None,
        })
    }

    /// Ends the process if this testbed still exists after `limit` (see
    /// [`Watchdog`]): tests arm it with [`test_deadline`] so a hang fails
    /// in minutes. Named after the current thread (libtest names it after
    /// the test).
    pub fn deadline(&mut self, limit: Duration) {
        let what = std::thread::current().name().map_or_else(
            || format!("testbed {}", self.prefix),
            |n| format!("test {n}"),
        );
        self.watchdog = Some(Watchdog::arm(limit, what));
    }

    /// The prefix of every name this testbed creates.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Creates a namespace (its loopback up).
    pub fn netns(&mut self, name: &str) -> Result<Netns> {
        let full = format!("{}-{name}", self.prefix);
        ip(&["netns", "add", &full])?;
        self.namespaces.push(full.clone());
        let ns = Netns::new(full);
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// A short interface name unique to this testbed: `<tag><n>`.
    fn ifname(&self, tag: &str) -> Result<String> {
        let name = format!("{tag}{}", COUNTER.fetch_add(1, Ordering::Relaxed));
        if name.len() > 15 {
            return Err(Error::NameTooLong(name));
        }
        Ok(name)
    }

    /// Creates a bridge with STP off in `ns`.
    pub fn bridge(&mut self, ns: &Netns, name: &str) -> Result<()> {
        ns.ip(&[
            "link",
            "add",
            name,
            "type",
            "bridge",
            "stp_state",
            "0",
            "forward_delay",
            "0",
        ])?;
        ns.ip(&["link", "set", name, "up"])?;
        // An ordinary switch forwards frames without running iptables on
        // them: with br_netfilter loaded, bridged frames would go through
        // the IP hooks (a fifth of the cost of every frame the engine
        // writes, in a profile), for softoe's traffic and Linux's alike.
        // Per namespace; absent without br_netfilter, which is fine.
        for table in ["iptables", "ip6tables", "arptables"] {
            let path = format!("/proc/sys/net/bridge/bridge-nf-call-{table}");
            ns.run(move || std::fs::write(path, "0"))?.ok();
        }
        Ok(())
    }

    /// A veth pair: `a_if` in `a`, `b_if` in `b`, both up.
    pub fn veth(&mut self, a: &Netns, a_if: &str, b: &Netns, b_if: &str) -> Result<()> {
        if a_if.len() > 15 || b_if.len() > 15 {
            return Err(Error::NameTooLong(format!("{a_if}/{b_if}")));
        }
        // Created with temporary names in the root namespace's view, then
        // moved: two testbeds never clash.
        let ta = self.ifname("sa")?;
        let tb = self.ifname("sb")?;
        ip(&[
            "link",
            "add",
            &ta,
            "netns",
            a.name(),
            "type",
            "veth",
            "peer",
            "name",
            &tb,
            "netns",
            b.name(),
        ])?;
        a.ip(&["link", "set", &ta, "name", a_if])?;
        b.ip(&["link", "set", &tb, "name", b_if])?;
        a.ip(&["link", "set", a_if, "up"])?;
        b.ip(&["link", "set", b_if, "up"])?;
        Ok(())
    }

    /// A veth from `host`'s `host_if` to a new port of `bridge` in `sw`.
    /// Returns the bridge-side interface name.
    pub fn veth_to_bridge(
        &mut self,
        host: &Netns,
        host_if: &str,
        sw: &Netns,
        bridge: &str,
    ) -> Result<String> {
        let port = self.ifname("p")?;
        self.veth(host, host_if, sw, &port)?;
        sw.ip(&["link", "set", &port, "master", bridge])?;
        Ok(port)
    }

    /// The bridge-side interface of the veth from `host`, if it was made
    /// by [`veth_to_bridge`](Self::veth_to_bridge) (its peer index, looked up).
    pub fn veth_to_bridge_port(&self, host: &Netns) -> Option<String> {
        let link = host.ip(&["-o", "link", "show", "eth0"]).ok()?;
        // "2: eth0@if7: ..." — the peer's ifindex follows "@if".
        let idx: u32 = link.split("@if").nth(1)?.split(':').next()?.parse().ok()?;
        for ns in &self.namespaces {
            let out = run(Command::new("ip").args(["-n", ns, "-o", "link", "show"])).ok()?;
            for l in out.lines() {
                let mut parts = l.splitn(3, ": ");
                let (Some(i), Some(name)) = (parts.next(), parts.next()) else {
                    continue;
                };
                if i.trim().parse::<u32>().ok() == Some(idx) && name.starts_with('p') {
                    return Some(name.split('@').next().unwrap_or(name).to_string());
                }
            }
        }
        None
    }

    /// Adds an address (`10.0.0.2/24`) to `dev` in `ns`.
    pub fn addr(&self, ns: &Netns, dev: &str, cidr: &str) -> Result<()> {
        ns.ip(&["addr", "add", cidr, "dev", dev]).map(|_| ())
    }

    /// Enslaves an existing interface (a TAP the engine made) to `bridge`.
    pub fn attach(&self, sw: &Netns, dev: &str, bridge: &str) -> Result<()> {
        sw.ip(&["link", "set", dev, "master", bridge])?;
        sw.ip(&["link", "set", dev, "up"])?;
        Ok(())
    }

    /// Sets the MTU of `dev`.
    pub fn mtu(&self, ns: &Netns, dev: &str, mtu: usize) -> Result<()> {
        ns.ip(&["link", "set", dev, "mtu", &mtu.to_string()])
            .map(|_| ())
    }

    /// Keeps each flow's frames in order through `dev`'s receive side, as a
    /// wire and a NIC's receive queue do: receive packet steering over all
    /// CPUs, so the kernel hands each flow to one CPU's backlog.
    ///
    /// Without it a veth delivers each frame into the backlog of the CPU
    /// that sent it, and a TCP sender transmits from two places (its
    /// program's `send` and the softirq that takes its ACKs), often on
    /// different CPUs: with a busy CPU's backlog drained late, a flow's
    /// frames arrive reordered by hundreds of microseconds. A loss
    /// measurement then counts the sender's answers to reordering as
    /// answers to loss.
    pub fn flow_order(&self, ns: &Netns, dev: &str) -> Result<()> {
        let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
        if dev.is_empty() || dev.len() > 15 || !dev.chars().all(ok) || dev.starts_with('.') {
            return Err(Error::Command {
                cmd: format!("flow_order {dev}"),
                stderr: "not an interface name".into(),
            });
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mask = rps_mask(cpus);
        // sysfs shows a namespace's devices only where it is mounted from
        // inside it, as `ip netns exec` does.
        let script = format!(
            "set -e; for q in /sys/class/net/{dev}/queues/rx-*; do echo {mask} > \"$q/rps_cpus\"; done"
        );
        run(ns.command("sh").args(["-c", &script])).map(|_| ())
    }

    /// Limits `dev`'s egress to `rate_mbit` with `tbf` (burst sized for
    /// HZ = 250 as TESTBED.md says: at least rate / 250), with a queue that
    /// holds up to 50 ms of traffic.
    pub fn tbf(&self, ns: &Netns, dev: &str, rate_mbit: u64) -> Result<()> {
        self.tbf_with(ns, dev, rate_mbit, Duration::from_millis(50), false)
    }

    /// [`tbf`](Self::tbf) with the queue sized by `latency`: the longest a
    /// frame may wait in it (tbf's `latency`; frames beyond are dropped),
    /// at least a millisecond. A sender that fills the queue sees round
    /// trips that long: a link of a few milliseconds' RTT without `netem`.
    /// Super-packets (TSO/GSO) are cut into wire-sized frames as they
    /// enter the queue (a peak rate ten times the rate, with a bucket of
    /// one frame), so a full queue drops segments, as a switch's would,
    /// and [`qdisc_dropped`](Self::qdisc_dropped) counts them.
    pub fn tbf_latency(
        &self,
        ns: &Netns,
        dev: &str,
        rate_mbit: u64,
        latency: Duration,
    ) -> Result<()> {
        self.tbf_with(ns, dev, rate_mbit, latency, true)
    }

    /// The `tbf` of [`tbf`](Self::tbf) and
    /// [`tbf_latency`](Self::tbf_latency); `segment`: cut super-packets
    /// into frames of at most 1,600 bytes on the way in.
    fn tbf_with(
        &self,
        ns: &Netns,
        dev: &str,
        rate_mbit: u64,
        latency: Duration,
        segment: bool,
    ) -> Result<()> {
        if rate_mbit == 0 {
            return Err(Error::Command {
                cmd: format!("tbf {dev} 0mbit"),
                stderr: "a rate must be above zero".into(),
            });
        }
        ns.ip(&["link", "set", dev, "txqueuelen", "1000"])?;
        let burst = (rate_mbit.saturating_mul(1_000_000) / 8 / 250).max(64 * 1024);
        let latency = format!("{}us", latency.as_micros().max(1000));
        let rate = format!("{rate_mbit}mbit");
        let peak = format!("{}mbit", rate_mbit.saturating_mul(10));
        let burst = burst.to_string();
        let mut args = vec![
            "-n",
            ns.name(),
            "qdisc",
            "replace",
            "dev",
            dev,
            "root",
            "tbf",
            "rate",
            &rate,
            "burst",
            &burst,
            "latency",
            &latency,
        ];
        if segment {
            args.extend(["peakrate", &peak, "mtu", "1600"]);
        }
        run(Command::new("tc").args(args)).map(|_| ())
    }

    /// Frames the qdiscs of `dev` in `ns` dropped so far (a full
    /// [`tbf`](Self::tbf) queue), from `tc -s qdisc show`: loss a link's
    /// queue adds to the drops of [`random_drop`](Self::random_drop).
    pub fn qdisc_dropped(&self, ns: &Netns, dev: &str) -> Result<u64> {
        let out =
            run(Command::new("tc").args(["-n", ns.name(), "-s", "qdisc", "show", "dev", dev]))?;
        Ok(qdisc_drops_in(&out))
    }

    /// Drops `percent` % of the IPv4 TCP frames that arrive on `dev` in
    /// `ns`, before any stack or bridge sees them: loss on the wire,
    /// invisible to the sender. The rate may be fractional (`0.1`), to
    /// one part per million (finer rates are rounded); it must be a
    /// number from 0 to 100. A small eBPF program on the device's ingress
    /// (tcx) does it, picking frames at random and counting them (see
    /// [`dropped`](Self::dropped)); it replaces one this testbed put on
    /// `dev` before, and stays until [`clear_drop`](Self::clear_drop) or
    /// the testbed is dropped.
    ///
    /// Drops belong at ingress. A rule in the `output` hook makes Linux's
    /// TCP see a local transmit error: it keeps the segment and sends it
    /// again at once, so nothing is lost on the wire and the "lossy" path
    /// only loses the other side's packets. Frames are dropped as they
    /// arrive, so turn segmentation offloads off upstream
    /// ([`ethtool_k`](Self::ethtool_k)) if drops should hit segments
    /// rather than super-packets.
    pub fn random_drop(&self, ns: &Netns, dev: &str, percent: f64) -> Result<()> {
        let ppm = drop_ppm(percent).map_err(|why| Error::Command {
            cmd: format!("random_drop {dev} {percent}%"),
            stderr: why,
        })?;
        self.attach_drop(ns, dev, ppm, Frames::Tcp)
    }

    /// Drops `percent` % of the frames of `ethertype` that arrive on `dev`
    /// in `ns`, as [`random_drop`](Self::random_drop) does for TCP (same
    /// program, same counter, [`dropped_on`](Self::dropped_on); it
    /// replaces any drop program this testbed put on `dev`). For
    /// protocols of their own EtherType, such as BondingPlus's ARP+.
    pub fn random_drop_ethertype(
        &self,
        ns: &Netns,
        dev: &str,
        ethertype: u16,
        percent: f64,
    ) -> Result<()> {
        let ppm = drop_ppm(percent).map_err(|why| Error::Command {
            cmd: format!("random_drop_ethertype {dev} {ethertype:#06x} {percent}%"),
            stderr: why,
        })?;
        self.attach_drop(ns, dev, ppm, Frames::EtherType(ethertype))
    }

    /// Attaches a drop program to `dev` in `ns`, replacing this testbed's
    /// earlier one there.
    fn attach_drop(&self, ns: &Netns, dev: &str, ppm: u32, which: Frames) -> Result<()> {
        let name = dev.to_string();
        let program = ns.run(move || DropProgram::attach(&name, ppm, which))??;
        let mut drops = self.drops.lock().unwrap_or_else(|p| p.into_inner());
        // The old program (if any) detaches as it drops, after the new one
        // is in place.
        drops.retain(|(n, p)| !(n == ns.name() && p.dev == dev));
        drops.push((ns.name().to_string(), program));
        Ok(())
    }

    /// Makes `host`'s link to the bridge lose `percent` % of TCP frames in
    /// each direction (fractional rates as [`random_drop`](Self::random_drop)
    /// takes them): drops on the ingress of `host`'s `eth0` (toward the
    /// host) and of its bridge port in `sw` (from the host). Their counts,
    /// per direction: [`link_drops`](Self::link_drops).
    pub fn lossy_link(&self, host: &Netns, sw: &Netns, percent: f64) -> Result<()> {
        let port = self.bridge_port_of(host, "lossy_link")?;
        self.random_drop(host, "eth0", percent)?;
        self.random_drop(sw, &port, percent)
    }

    /// The bridge port of `host`'s `eth0`, or an error naming `what`.
    fn bridge_port_of(&self, host: &Netns, what: &str) -> Result<String> {
        self.veth_to_bridge_port(host)
            .ok_or_else(|| Error::Command {
                cmd: format!("{what} {}", host.name()),
                stderr: "no bridge port found for its eth0".into(),
            })
    }

    /// How many frames the drop programs in `ns` have dropped so far (0
    /// when it has none).
    pub fn dropped(&self, ns: &Netns) -> Result<u64> {
        let drops = self.drops.lock().unwrap_or_else(|p| p.into_inner());
        let mut sum = 0;
        for (_, p) in drops.iter().filter(|(n, _)| n == ns.name()) {
            sum += p.dropped()?;
        }
        Ok(sum)
    }

    /// How many frames the drop program on `dev` in `ns` has dropped since
    /// it was attached (0 when `dev` has none). A new rate on the device
    /// starts a new count.
    pub fn dropped_on(&self, ns: &Netns, dev: &str) -> Result<u64> {
        let drops = self.drops.lock().unwrap_or_else(|p| p.into_inner());
        let mut sum = 0;
        for (_, p) in drops.iter().filter(|(n, p)| n == ns.name() && p.dev == dev) {
            sum += p.dropped()?;
        }
        Ok(sum)
    }

    /// What the drop programs of [`lossy_link`](Self::lossy_link) on
    /// `host`'s link have dropped so far, per direction. Counts only grow
    /// while a rate stays; take the difference of two readings for one
    /// run.
    pub fn link_drops(&self, host: &Netns, sw: &Netns) -> Result<LinkDrops> {
        let port = self.bridge_port_of(host, "link_drops")?;
        Ok(LinkDrops {
            to_host: self.dropped_on(host, "eth0")?,
            from_host: self.dropped_on(sw, &port)?,
        })
    }

    /// Removes the drop programs of [`random_drop`](Self::random_drop) in
    /// `ns` (all of its devices); fine if there are none.
    pub fn clear_drop(&self, ns: &Netns) -> Result<()> {
        let mut drops = self.drops.lock().unwrap_or_else(|p| p.into_inner());
        drops.retain(|(n, _)| n != ns.name());
        Ok(())
    }

    /// Sets a sysctl in `ns` (`net.ipv4.tcp_sack=0`), by writing its file
    /// under `/proc/sys` from a thread inside the namespace (no `sysctl`
    /// binary needed). A `/` in a component stands for a dot, as `sysctl`
    /// takes it (`net.ipv4.conf.eth0/100.forwarding=1`).
    pub fn sysctl(&self, ns: &Netns, setting: &str) -> Result<()> {
        let bad = |why: &str| Error::Command {
            cmd: format!("sysctl {setting}"),
            stderr: why.to_string(),
        };
        let (key, value) = setting
            .split_once('=')
            .ok_or_else(|| bad("say name=value"))?;
        let key = key.trim();
        if key.is_empty() || key.split('.').any(|c| c.is_empty() || c == "..") {
            return Err(bad("not a sysctl name"));
        }
        let path: std::path::PathBuf = std::iter::once("/proc/sys".to_string())
            .chain(key.split('.').map(|c| c.replace('/', ".")))
            .collect();
        let value = value.trim().to_string();
        ns.run(move || std::fs::write(&path, value).map_err(|e| (path, e)))?
            .map_err(|(path, e)| Error::Command {
                cmd: format!("sysctl {setting}"),
                stderr: format!("writing {}: {e}", path.display()),
            })
    }

    /// Turns offloads of `dev` in `ns` on or off, taking the settings
    /// `ethtool -K` takes (`["tso", "off", "gro", "off"]`; `rx`, `tx`, `sg`,
    /// `tso`, `gso`, `gro`, or their long names as `ethtool -k` prints
    /// them). It issues the `SIOCETHTOOL` ioctl itself, from a thread in
    /// the namespace: the `ethtool` binary is not needed. The settings are
    /// read back, and one the kernel would not change is an error.
    pub fn ethtool_k(&self, ns: &Netns, dev: &str, settings: &[&str]) -> Result<()> {
        let wanted = offload::parse(dev, settings)?;
        let name = dev.to_string();
        ns.run(move || offload::set(&name, &wanted))?
    }

    /// Whether offload `name` (an [`ethtool_k`](Self::ethtool_k) name) of
    /// `dev` in `ns` is on.
    pub fn offload(&self, ns: &Netns, dev: &str, name: &str) -> Result<bool> {
        let (o, _) = offload::parse(dev, &[name, "on"])?
            .into_iter()
            .next()
            .ok_or_else(|| Error::Command {
                cmd: format!("offload {dev} {name}"),
                stderr: "no offload named".into(),
            })?;
        let dev = dev.to_string();
        ns.run(move || offload::get(&dev, o))?
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        self.drops
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        for ns in self.namespaces.drain(..).rev() {
            if let Err(e) = delete_netns(&ns) {
                tracing::warn!(%ns, error = %e, "could not delete namespace");
            }
        }
    }
}

/// How long teardown waits for the processes it kills to be gone.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// Kills every process in namespace `name`, then deletes it.
fn delete_netns(name: &str) -> Result<()> {
    let killed = netns::kill_processes(name, KILL_WAIT);
    match &killed {
        Ok(k) if !k.is_empty() => {
            tracing::warn!(ns = %name, killed = ?k, "processes still ran in the namespace: killed");
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(ns = %name, error = %e, "could not end its processes"),
    }
    ip(&["netns", "del", name])?;
    killed.map(drop)
}

/// Deletes namespaces named `so<pid>x…` whose pid no longer runs.
fn reap_leftovers() {
    let me = std::process::id();
    reap(|pid| pid != me && !std::path::Path::new(&format!("/proc/{pid}")).exists());
}

/// Deletes namespaces named `so<pid>x…` whose pid `doomed` picks.
fn reap(doomed: impl Fn(u32) -> bool) {
    let Ok(list) = ip(&["netns", "list"]) else {
        return;
    };
    for line in list.lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(rest) = name.strip_prefix("so") else {
            continue;
        };
        let Some((pid, _)) = rest.split_once('x') else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if doomed(pid) {
            let _ = delete_netns(name);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn drop_rates_are_fractional_percentages() {
        assert_eq!(drop_ppm(0.1), Ok(1_000));
        assert_eq!(drop_ppm(1.0), Ok(10_000));
        assert_eq!(drop_ppm(2.5), Ok(25_000));
        assert_eq!(drop_ppm(100.0), Ok(1_000_000));
        assert_eq!(drop_ppm(0.0), Ok(0));
        assert_eq!(drop_ppm(0.00004), Ok(0), "finer than a ppm rounds");
        for bad in [-0.1, 100.01, f64::NAN, f64::INFINITY] {
            let e = drop_ppm(bad).unwrap_err();
            assert!(e.contains("0 to 100"), "{bad}: {e}");
        }
    }

    #[test]
    fn rps_masks_name_every_cpu_in_32_bit_groups() {
        assert_eq!(rps_mask(1), "00000001");
        assert_eq!(rps_mask(2), "00000003");
        assert_eq!(rps_mask(0), "00000001", "at least the first CPU");
        assert_eq!(rps_mask(32), "ffffffff");
        assert_eq!(rps_mask(33), "00000001,ffffffff");
        assert_eq!(rps_mask(72), "000000ff,ffffffff,ffffffff");
    }

    #[test]
    fn qdisc_drops_are_read_from_tc_s() {
        let text = "qdisc tbf 8001: root refcnt 2 rate 100Mbit burst 64Kb lat 5ms \n \
            Sent 61510936 bytes 41300 pkt (dropped 212, overlimits 9000 requeues 0) \n \
            backlog 0b 0p requeues 0\n\
            qdisc noqueue 0: dev lo root refcnt 2\n \
            Sent 0 bytes 0 pkt (dropped 3, overlimits 0 requeues 0)\n";
        assert_eq!(qdisc_drops_in(text), 215);
        assert_eq!(qdisc_drops_in("qdisc noqueue 0: root refcnt 2\n"), 0);
    }

    #[test]
    fn link_drops_subtract_per_direction() {
        let a = LinkDrops {
            to_host: 10,
            from_host: 4,
        };
        let b = LinkDrops {
            to_host: 17,
            from_host: 4,
        };
        assert_eq!(
            b.since(a),
            LinkDrops {
                to_host: 7,
                from_host: 0
            }
        );
        assert_eq!(a.since(b).to_host, 0, "a new program restarts its count");
    }
}
