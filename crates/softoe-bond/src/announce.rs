//! When to send our own ARP+ announcements.
//!
//! The paper broadcasts `ARPP_BROADCAST` once, when the driver loads, and
//! `ARPP_CHANGE` once per change of the member set. On a real LAN frames
//! are lost (a switch port flapping, a receive ring overflowing), and one
//! lost broadcast leaves a peer unaware of us for as long as we run. So
//! the [`Announcer`] sends:
//!
//! - an `ARPP_BROADCAST` at once when started;
//! - the same `ARPP_BROADCAST` again every [`AnnouncerConfig::period`],
//!   with the same sequence number, so that a peer that missed it, or
//!   joined after it, or expired us, learns us within a period or so, and
//!   peers that know us only refresh their entry;
//! - an `ARPP_CHANGE` at once when the member set changes, with the
//!   sequence number bumped so peers replace the old set and ignore any
//!   old announcement still in flight; the next periodic broadcasts carry
//!   the new number, so a lost `CHANGE` is repaired by them.
//!
//! Sans-IO, after quinn-proto: call [`Announcer::poll`] with the time and
//! send what it returns, until it returns `None`; wake up again at
//! [`Announcer::next_deadline`]. Calling `poll` early is harmless.

use core::time::Duration;

use softoe_wire::Ipv4Address;

use crate::time::Instant;
use crate::wire::{ArppRepr, ArppType, Members};

/// The shortest period: a zero period would announce on every poll.
pub const MIN_PERIOD: Duration = Duration::from_millis(1);

/// How the announcer behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnnouncerConfig {
    /// Our IPv4 address: the sender address of every message.
    pub ip: Ipv4Address,
    /// Time between periodic re-announcements (at least [`MIN_PERIOD`]).
    pub period: Duration,
    /// The first sequence number. A host that restarts without having sent
    /// `ARPP_CLEAR` should not start again from the same number, or peers
    /// that still hold its old entry take its new set for a repeat of the
    /// old one until the old entry would have expired; derive it from a
    /// clock or a random seed.
    pub initial_seq: u16,
}

impl AnnouncerConfig {
    /// For `ip`, every `period`, starting from sequence number 0.
    pub fn new(ip: Ipv4Address, period: Duration) -> AnnouncerConfig {
        AnnouncerConfig {
            ip,
            period,
            initial_seq: 0,
        }
    }
}

/// Decides when to announce our member set; see the module docs.
#[derive(Clone, Debug)]
pub struct Announcer {
    config: AnnouncerConfig,
    members: Members,
    seq: u16,
    /// When the next message is due; `None` once stopped.
    next: Option<Instant>,
    /// What the next message is: `Change` right after a change, otherwise
    /// `Broadcast`.
    pending: ArppType,
}

impl Announcer {
    /// Starts announcing `members`: the first broadcast is due at `now`.
    pub fn new(config: AnnouncerConfig, members: Members, now: Instant) -> Announcer {
        let config = AnnouncerConfig {
            period: config.period.max(MIN_PERIOD),
            ..config
        };
        Announcer {
            seq: config.initial_seq,
            config,
            members,
            next: Some(now),
            pending: ArppType::Broadcast,
        }
    }

    /// The message due at `now`, if one is. Call until `None`.
    pub fn poll(&mut self, now: Instant) -> Option<ArppRepr> {
        let due = self.next?;
        if now < due {
            return None;
        }
        let msg = self.message(self.pending, Ipv4Address::UNSPECIFIED);
        self.pending = ArppType::Broadcast;
        self.next = Some(now + self.config.period);
        Some(msg)
    }

    /// When [`poll`](Announcer::poll) next has something; `None` once
    /// stopped.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.next
    }

    /// Our member set changed to `members`: bumps the sequence number and
    /// makes an `ARPP_CHANGE` due at once. Returns false (and does
    /// nothing) if the set is the same.
    pub fn set_members(&mut self, members: Members, now: Instant) -> bool {
        if members == self.members {
            return false;
        }
        self.members = members;
        self.seq = self.seq.wrapping_add(1);
        if self.next.is_some() {
            self.pending = ArppType::Change;
            self.next = Some(now);
        }
        true
    }

    /// Our `ARPP_REPLY` to `peer`, which sent us an `ARPP_BROADCAST` (see
    /// [`crate::Update::reply`]).
    pub fn reply_to(&self, peer: Ipv4Address) -> ArppRepr {
        self.message(ArppType::Reply, peer)
    }

    /// A heartbeat carrying our current sequence number, for link health.
    pub fn heartbeat(&self, peer: Ipv4Address) -> ArppRepr {
        self.message(ArppType::Heartbeat, peer)
    }

    /// Stops announcing and returns the `ARPP_CLEAR` to broadcast. After it
    /// `poll` returns nothing until [`restart`](Announcer::restart).
    pub fn stop(&mut self) -> ArppRepr {
        self.next = None;
        self.pending = ArppType::Broadcast;
        self.message(ArppType::Clear, Ipv4Address::UNSPECIFIED)
    }

    /// Starts again after [`stop`](Announcer::stop): a broadcast with a new
    /// sequence number is due at `now`. Does nothing if running.
    pub fn restart(&mut self, now: Instant) {
        if self.next.is_none() {
            self.seq = self.seq.wrapping_add(1);
            self.next = Some(now);
        }
    }

    /// Our sequence number.
    pub fn seq(&self) -> u16 {
        self.seq
    }

    /// Our member set.
    pub fn members(&self) -> &Members {
        &self.members
    }

    /// The configuration.
    pub fn config(&self) -> &AnnouncerConfig {
        &self.config
    }

    fn message(&self, packet_type: ArppType, target_ip: Ipv4Address) -> ArppRepr {
        ArppRepr {
            packet_type,
            seq: self.seq,
            sender_ip: self.config.ip,
            target_ip,
            members: self.members,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softoe_wire::EthernetAddress;

    fn members(n: u8) -> Members {
        let v: alloc::vec::Vec<_> = (1..=n)
            .map(|i| EthernetAddress([2, 0, 0, 0, 0, i]))
            .collect();
        Members::new(&v).unwrap()
    }

    const IP: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn start_then_periodic() {
        let cfg = AnnouncerConfig {
            initial_seq: 7,
            ..AnnouncerConfig::new(IP, Duration::from_secs(1))
        };
        let mut a = Announcer::new(cfg, members(2), at(0));
        assert_eq!(a.next_deadline(), Some(at(0)));
        let m = a.poll(at(0)).unwrap();
        assert_eq!(
            (m.packet_type, m.seq, m.sender_ip),
            (ArppType::Broadcast, 7, IP)
        );
        assert_eq!(m.target_ip, Ipv4Address::UNSPECIFIED);
        assert!(a.poll(at(0)).is_none());
        assert!(a.poll(at(999)).is_none());
        assert_eq!(a.next_deadline(), Some(at(1000)));
        // Late: once, then a period from when it was sent.
        assert_eq!(a.poll(at(1500)).unwrap().seq, 7);
        assert!(a.poll(at(1500)).is_none());
        assert_eq!(a.next_deadline(), Some(at(2500)));
    }

    #[test]
    fn change_is_sent_at_once_with_a_new_seq() {
        let mut a = Announcer::new(
            AnnouncerConfig::new(IP, Duration::from_secs(1)),
            members(2),
            at(0),
        );
        a.poll(at(0)).unwrap();
        assert!(!a.set_members(members(2), at(300)));
        assert_eq!(a.next_deadline(), Some(at(1000)));
        assert!(a.set_members(members(3), at(300)));
        let m = a.poll(at(300)).unwrap();
        assert_eq!(
            (m.packet_type, m.seq, m.members.len()),
            (ArppType::Change, 1, 3)
        );
        let m = a.poll(at(1300)).unwrap();
        assert_eq!(
            (m.packet_type, m.seq, m.members.len()),
            (ArppType::Broadcast, 1, 3)
        );
    }

    #[test]
    fn reply_stop_restart() {
        let mut a = Announcer::new(AnnouncerConfig::new(IP, Duration::ZERO), members(1), at(0));
        assert_eq!(a.config().period, MIN_PERIOD);
        let peer = Ipv4Address::new(10, 0, 0, 2);
        let r = a.reply_to(peer);
        assert_eq!((r.packet_type, r.target_ip), (ArppType::Reply, peer));
        assert_eq!(a.heartbeat(peer).packet_type, ArppType::Heartbeat);
        let c = a.stop();
        assert_eq!((c.packet_type, c.seq), (ArppType::Clear, 0));
        assert!(a.poll(at(10)).is_none());
        assert_eq!(a.next_deadline(), None);
        // Changes while stopped are remembered, not sent.
        assert!(a.set_members(members(2), at(10)));
        assert!(a.poll(at(20)).is_none());
        a.restart(at(30));
        let m = a.poll(at(30)).unwrap();
        assert_eq!(
            (m.packet_type, m.seq, m.members.len()),
            (ArppType::Broadcast, 2, 2)
        );
    }
}
