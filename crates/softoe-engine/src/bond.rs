//! A bonded port: N member ports behind one interface (BondingPlus).
//!
//! [`BondPort`] is a [`Port`] made of other ports — TAP devices, or
//! AF_PACKET sockets on veths — each keeping its own MAC on the switch. The
//! stack above sees one interface: one MAC (the first member's), one IPv4
//! address, one [`DeviceCaps`]. Every decision (which member sends a frame,
//! to which of the peer's members, which received copy the stack sees, ARP+,
//! heartbeats, when a member leaves) is [`softoe_bond::Bond`]'s; this file
//! only moves bytes and reads the clock and the carrier.
//!
//! - **Waiting**: the members' descriptors sit in one epoll instance, and
//!   [`Port::raw_fd`] is that instance: the engine's sleep ends when any
//!   member has a frame, with no change to the engine.
//! - **Receiving**: members are read in turn, one frame at a time, starting
//!   after the member the last delivered frame came from, so a busy member
//!   cannot starve the others.
//! - **Sending**: the frame's headers are copied (≤ 128 bytes) and
//!   rewritten for the member; the payload still goes by reference.
//! - **Timers**: the bond's own frames (ARP+ announcements, heartbeats) go
//!   out whenever the engine calls the port, and [`Port::wake_at`] makes the
//!   engine call it by the next heartbeat. The carrier of every member is
//!   read once per heartbeat period; a send that fails takes the member out
//!   at once.
//! - **Super-segments**: a TSO frame is striped whole, so what arrives is
//!   reordered by up to the time one super-segment takes on its link: a
//!   64 KiB one is 5 ms at 100 Mbit/s. The receiver reports that as holes
//!   and the sender's RACK (whose reordering window starts at a quarter of
//!   the minimum RTT, some 50 µs on a switched LAN) takes the late frames
//!   for lost: spurious retransmissions and a collapsed window (measured:
//!   0.75–0.83 of two 100 Mbit/s links with 16–32 KiB super-segments,
//!   5,000 retransmissions per 48 MiB, against 0.96 and 8 without TSO).
//!   With every member's rate known, the bond's [`DeviceCaps::tso_max`] is
//!   what the slowest member sends in [`LUMP`] (no TSO when that is under
//!   two segments, as at 100 Mbit/s); with a rate unknown, the members'
//!   divided by their number (at least 16 KiB). One member keeps its own.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant as StdInstant};

use softoe_bond::{Bond, BondConfig, MemberState, Rx};
use softoe_stack::{DeviceCaps, TxFrame};
use tracing::{debug, info, warn};

use crate::memory::Memory;
use crate::port::{Port, RxFrame};

/// The smallest TSO size the bond offers when its members have TSO and a
/// rate is unknown.
const MIN_TSO: usize = 16 * 1024;
/// The longest one super-segment may keep the slowest member busy when the
/// rates are known: about the reordering RACK forgives on a LAN before it
/// has seen any (a quarter of a ~200 µs minimum RTT).
pub const LUMP: Duration = Duration::from_micros(50);
/// The most header bytes a frame of the stack carries (Ethernet, IPv4 and
/// TCP with options); the scratch copy is sized for it.
const MAX_HEADER: usize = 14 + 60 + 60;

/// One member of a bond, as [`BondPort::new`] takes it.
pub struct BondMember {
    /// Its name for logs and `softoe stat` (the device's).
    pub name: String,
    /// The port.
    pub port: Box<dyn Port + Send>,
}

impl std::fmt::Debug for BondMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BondMember")
            .field("name", &self.name)
            .field("port", &self.port.describe())
            .finish()
    }
}

/// A bonded port; see the module docs.
pub struct BondPort {
    members: Vec<BondMember>,
    bond: Bond,
    epoch: StdInstant,
    epoll: OwnedFd,
    scratch: Vec<u8>,
    control: [u8; 256],
    /// The member to read first next time.
    next_rx: usize,
    /// When the members' carrier was last read.
    carrier_at: Option<StdInstant>,
    carrier_every: Duration,
    caps: DeviceCaps,
    /// Receive errors per member (logged once per member and counted).
    rx_errors: Vec<u64>,
    desc: String,
}

impl std::fmt::Debug for BondPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BondPort")
            .field("members", &self.members)
            .field("policy", &self.bond.policy())
            .finish_non_exhaustive()
    }
}

impl BondPort {
    /// A bond of `members` (in the order of `cfg.members`: member `i` of
    /// the configuration is `members[i]`).
    pub fn new(cfg: BondConfig, members: Vec<BondMember>) -> io::Result<BondPort> {
        if cfg.members.len() != members.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} member ports for {} configured members",
                    members.len(),
                    cfg.members.len()
                ),
            ));
        }
        let carrier_every = cfg.heartbeat;
        let rates: Vec<u64> = cfg.members.iter().map(|m| m.rate_bps).collect();
        let epoch = StdInstant::now();
        let bond = Bond::new(cfg, softoe_bond::Instant::ZERO)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let epoll = rustix::event::epoll::create(rustix::event::epoll::CreateFlags::CLOEXEC)?;
        // Each member's port owns its descriptor for as long as the bond
        // (which owns both) lives.
        for (i, m) in members.iter().enumerate() {
            softoe_sys::event::epoll_add_readable(&epoll, m.port.raw_fd(), i as u64)?;
        }
        let member_caps: Vec<DeviceCaps> = members.iter().map(|m| m.port.caps()).collect();
        let caps = bond_caps(&member_caps, &rates);
        if members.len() > 1 && rates.contains(&0) && caps.tso_max.is_some() {
            warn!(
                "member rates unknown (--bond-rate, bond.rate_mbit): super-segments of {} KiB; \
                 below some 10 Gbit/s per member they reorder enough to cost spurious \
                 retransmissions",
                caps.tso_max.unwrap_or(0) / 1024
            );
        }
        let desc = format!(
            "bond {} of {} ({})",
            bond.policy(),
            members
                .iter()
                .map(|m| m.name.as_str())
                .collect::<Vec<_>>()
                .join(","),
            members
                .first()
                .map(|m| m.port.describe())
                .unwrap_or_default()
        );
        info!(%desc, tso_max = ?caps.tso_max, "bond up");
        Ok(BondPort {
            rx_errors: vec![0; members.len()],
            members,
            bond,
            epoch,
            epoll,
            scratch: Vec::with_capacity(MAX_HEADER),
            control: [0; 256],
            next_rx: 0,
            carrier_at: None,
            carrier_every,
            caps,
            desc,
        })
    }

    fn now(&self) -> softoe_bond::Instant {
        softoe_bond::Instant::from_duration(self.epoch.elapsed())
    }

    /// The bonding core (table, members, counters).
    pub fn bond(&self) -> &Bond {
        &self.bond
    }

    /// The members' names, in order.
    pub fn member_names(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|m| m.name.as_str())
    }

    /// Reads every member's carrier if a heartbeat period has passed, and
    /// sends the bond's own frames that are due.
    fn housekeeping(&mut self) {
        let due = self
            .carrier_at
            .is_none_or(|t| t.elapsed() >= self.carrier_every);
        if due {
            self.carrier_at = Some(StdInstant::now());
            let now = self.now();
            for (i, m) in self.members.iter_mut().enumerate() {
                if let Some(up) = m.port.carrier() {
                    self.bond.set_carrier(now, i, up);
                }
            }
        }
        let now = self.now();
        while let Some((i, len)) = self.bond.poll_transmit(now, &mut self.control) {
            let Some(m) = self.members.get_mut(i) else {
                continue;
            };
            let Some(bytes) = self.control.get(..len) else {
                continue;
            };
            if let Err(e) = send_bytes(m.port.as_mut(), bytes) {
                debug!(member = %m.name, error = %e, "bond control frame not sent");
            }
        }
    }

    /// Stops bonding: sends `ARPP_CLEAR` on every member so peers forget
    /// us at once rather than when their entry ages out.
    pub fn shut_down(&mut self) {
        self.bond.shut_down();
        self.housekeeping();
    }
}

/// Sends a frame held whole in `bytes` (the bond's own) on `port`.
fn send_bytes(port: &mut dyn Port, bytes: &[u8]) -> io::Result<bool> {
    let f = TxFrame {
        header: bytes,
        payload: &[],
        offload: softoe_stack::TxOffload::default(),
        priority: 0,
    };
    port.send(&f, &Memory::new())
}

/// What the bond offers the stack: the smallest MTU, checksum offload only
/// if every member has it, TSO sized per member by `rates_bps` (bit/s of
/// each member, 0 unknown; see the module docs).
fn bond_caps(all: &[DeviceCaps], rates_bps: &[u64]) -> DeviceCaps {
    let mtu = all.iter().map(|c| c.mtu).min().unwrap_or(1500);
    let tx_csum = !all.is_empty() && all.iter().all(|c| c.tx_csum);
    let tso = all
        .iter()
        .map(|c| c.tso_max)
        .try_fold(usize::MAX, |a, t| t.map(|t| a.min(t)))
        .filter(|_| tx_csum);
    let n = all.len().max(1);
    let slowest = rates_bps.iter().copied().min().filter(|&r| r > 0);
    let tso_max = match (tso, slowest) {
        (t, _) if n == 1 => t,
        (None, _) => None,
        (Some(t), None) => Some((t / n).max(MIN_TSO).min(t)),
        (Some(t), Some(rate)) => {
            let lump = (u128::from(rate) * LUMP.as_nanos() / 8 / 1_000_000_000) as usize;
            // Two segments at least, or TSO buys nothing.
            let two = 2 * mtu.saturating_sub(40);
            Some(lump.min(t)).filter(|&l| l >= two)
        }
    };
    DeviceCaps {
        mtu,
        tso_max,
        tx_csum,
    }
}

/// Errors that mean the member's link is gone (not a full queue).
fn is_link_error(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO | libc::ENETDOWN | libc::ENXIO | libc::ENODEV | libc::EBADFD)
    )
}

impl Port for BondPort {
    fn caps(&self) -> DeviceCaps {
        self.caps
    }

    fn send(&mut self, frame: &TxFrame<'_>, mem: &Memory) -> io::Result<bool> {
        self.housekeeping();
        let now = self.now();
        self.scratch.clear();
        self.scratch.extend_from_slice(frame.header);
        let len = frame.len();
        let Some(i) = self
            .bond
            .transmit(now, &mut self.scratch, len, frame.priority)
        else {
            // Deliberately not sent (our stack's gratuitous broadcast ARP).
            return Ok(true);
        };
        let Some(m) = self.members.get_mut(i) else {
            return Ok(true);
        };
        let f = TxFrame {
            header: &self.scratch,
            payload: frame.payload,
            offload: frame.offload,
            priority: frame.priority,
        };
        match m.port.send(&f, mem) {
            Ok(true) => Ok(true),
            Ok(false) => {
                self.bond.unsend(i, len);
                Ok(false)
            }
            Err(e) => {
                if is_link_error(&e) {
                    warn!(member = %m.name, error = %e, "bond member failed: taken out");
                    self.bond.set_carrier(now, i, false);
                }
                Err(e)
            }
        }
    }

    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<RxFrame>> {
        self.housekeeping();
        let n = self.members.len();
        for k in 0..n {
            let i = (self.next_rx + k) % n;
            while let Some(m) = self.members.get_mut(i) {
                let f = match m.port.recv(buf) {
                    Ok(Some(f)) => f,
                    Ok(None) => break,
                    Err(e) => {
                        if let Some(c) = self.rx_errors.get_mut(i) {
                            if *c == 0 {
                                warn!(member = %m.name, error = %e, "bond member receive failed");
                            }
                            *c += 1;
                        }
                        break;
                    }
                };
                let now = self.now();
                let Some(frame) = buf.get_mut(f.start..f.start + f.len) else {
                    continue;
                };
                if self.bond.receive(now, i, frame) == Rx::Deliver {
                    self.next_rx = (i + 1) % n;
                    return Ok(Some(f));
                }
            }
        }
        Ok(None)
    }

    fn flush(&mut self) {
        for m in &mut self.members {
            m.port.flush();
        }
    }

    fn raw_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    fn describe(&self) -> String {
        self.desc.clone()
    }

    fn wake_at(&self) -> Option<StdInstant> {
        let now = self.now();
        let at = self.bond.poll_at(now);
        let inner = self.members.iter().filter_map(|m| m.port.wake_at()).min();
        let bond_at = self
            .epoch
            .checked_add(at.since_epoch())
            .unwrap_or_else(StdInstant::now);
        Some(inner.map_or(bond_at, |t| t.min(bond_at)))
    }

    fn dropped(&mut self) -> Option<u64> {
        let mut any = false;
        let mut sum = 0;
        for m in &mut self.members {
            if let Some(d) = m.port.dropped() {
                any = true;
                sum += d;
            }
        }
        any.then_some(sum)
    }

    fn stop(&mut self) {
        self.shut_down();
    }

    fn carrier(&mut self) -> Option<bool> {
        Some(
            self.bond
                .members(self.now())
                .any(|m| m.state == MemberState::Up),
        )
    }

    fn path_losses(&self) -> u64 {
        self.bond.stats().path_losses
    }

    fn bond(&self) -> Option<crate::control::BondStat> {
        Some(crate::control::BondStat::of(
            &self.bond,
            self.now(),
            &self
                .members
                .iter()
                .map(|m| m.name.clone())
                .collect::<Vec<_>>(),
            &self.rx_errors,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(tso: Option<usize>) -> DeviceCaps {
        DeviceCaps {
            mtu: 1500,
            tso_max: tso,
            tx_csum: true,
        }
    }

    const T64: Option<usize> = Some(64 * 1024);

    #[test]
    fn one_member_keeps_its_super_segments() {
        assert_eq!(bond_caps(&[caps(T64)], &[100_000_000]).tso_max, T64);
        assert_eq!(bond_caps(&[caps(T64)], &[0]).tso_max, T64);
    }

    #[test]
    fn known_rates_size_super_segments_by_the_slowest_member() {
        // 100 Mbit/s: 625 bytes in 50 µs, under two segments: no TSO.
        let c = bond_caps(&[caps(T64), caps(T64)], &[100_000_000, 100_000_000]);
        assert_eq!(c.tso_max, None);
        assert!(c.tx_csum, "checksum offload stays");
        // 1 and 10 Gbit/s: the 1 Gbit/s member decides (6,250 bytes).
        let c = bond_caps(&[caps(T64), caps(T64)], &[1_000_000_000, 10_000_000_000]);
        assert_eq!(c.tso_max, Some(6_250));
        // 40 Gbit/s: 250 KB in 50 µs, capped by what the members take.
        let c = bond_caps(&[caps(T64), caps(T64)], &[40_000_000_000; 2]);
        assert_eq!(c.tso_max, T64);
    }

    #[test]
    fn an_unknown_rate_divides_super_segments_among_the_members() {
        let c = bond_caps(&[caps(T64), caps(T64)], &[0, 100_000_000]);
        assert_eq!(c.tso_max, Some(32 * 1024));
        let c = bond_caps(&[caps(T64); 8], &[0; 8]);
        assert_eq!(c.tso_max, Some(MIN_TSO));
    }

    #[test]
    fn tso_needs_every_member_to_have_it_and_checksum_offload() {
        let c = bond_caps(&[caps(T64), caps(None)], &[0, 0]);
        assert_eq!(c.tso_max, None);
        let mut no_csum = caps(T64);
        no_csum.tx_csum = false;
        let c = bond_caps(&[caps(T64), no_csum], &[0, 0]);
        assert_eq!((c.tso_max, c.tx_csum), (None, false));
    }
}
