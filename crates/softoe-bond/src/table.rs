//! The ARP+ table: for each peer IPv4 address, the MACs of all its members.
//!
//! The paper's table is an array of 256 entries indexed by the last byte of
//! the address, which works on one /24 and nowhere else. Here it is an
//! ordered map keyed by the whole address, bounded by
//! [`TableConfig::max_entries`] so that a flood of forged announcements
//! cannot grow it without limit (new peers are refused when it is full;
//! known peers are still updated).
//!
//! [`Table::process`] takes every received message and tells the caller
//! what changed and whether to reply (the paper's S1 → S2 → S1 exchange,
//! [`crate::fsm`]). Beyond the paper:
//!
//! - **Sequence numbers.** An entry remembers the sequence number of the
//!   announcement it came from. A message with an older number (serial
//!   comparison with wrap-around, [`seq_newer`]) is [`Outcome::Stale`] and
//!   changes nothing; an equal one is a re-announcement that refreshes the
//!   entry; a newer one replaces its members.
//! - **Ageing.** Peers re-announce every period ([`crate::Announcer`]); an
//!   entry not heard from for [`TableConfig::max_age`] is dropped by
//!   [`Table::expire`], so a peer that died without a `CLEAR` stops
//!   receiving striped traffic. [`Table::next_deadline`] says when to call
//!   it next.
//! - **Member health.** Each entry keeps which of the peer's members are
//!   alive ([`Table::set_alive`]), for link health to steer traffic off a
//!   dead NIC without forgetting it.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::time::Duration;

use softoe_wire::{EthernetAddress, Ipv4Address};

use crate::time::Instant;
use crate::wire::{ArppRepr, ArppType, MAX_MEMBERS, Members};

/// Whether sequence number `a` is newer than `b`, with wrap-around (RFC
/// 1982 serial arithmetic on 16 bits): `a` is newer when it is ahead of `b`
/// by 1 to 32767. Numbers exactly 32768 apart are neither newer nor older;
/// the table treats such a message as stale.
pub fn seq_newer(a: u16, b: u16) -> bool {
    let d = a.wrapping_sub(b);
    d != 0 && d < 0x8000
}

/// The table's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableConfig {
    /// How long an entry lives without being heard from. Several periods
    /// of the peers' announcer, so a few lost announcements do not drop a
    /// peer.
    pub max_age: Duration,
    /// The most peers kept.
    pub max_entries: usize,
}

impl Default for TableConfig {
    /// Five seconds (five default announcement periods); 256 peers, the
    /// paper's table size.
    fn default() -> TableConfig {
        TableConfig {
            max_age: Duration::from_secs(5),
            max_entries: 256,
        }
    }
}

/// What the table knows of one peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    members: Members,
    /// Bit `i` set: member `i` is alive.
    alive: u16,
    seq: u16,
    last_heard: Instant,
}

const _: () = assert!(MAX_MEMBERS <= 16, "the alive mask is a u16");

impl Entry {
    fn new(members: Members, seq: u16, now: Instant) -> Entry {
        Entry {
            members,
            alive: all_alive(&members),
            seq,
            last_heard: now,
        }
    }

    /// The peer's member MACs.
    pub fn members(&self) -> &Members {
        &self.members
    }

    /// The sequence number of the announcement this entry holds.
    pub fn seq(&self) -> u16 {
        self.seq
    }

    /// When the peer was last heard from.
    pub fn last_heard(&self) -> Instant {
        self.last_heard
    }

    /// Whether member `i` (from 0) is alive; false past the last member.
    pub fn is_alive(&self, i: usize) -> bool {
        i < self.members.len() && self.alive & (1 << i) != 0
    }

    /// The members that are alive, in order.
    pub fn alive_members(&self) -> impl Iterator<Item = EthernetAddress> + '_ {
        self.members
            .as_slice()
            .iter()
            .enumerate()
            .filter(|(i, _)| self.is_alive(*i))
            .map(|(_, m)| *m)
    }

    /// Takes the members of a newer announcement. A MAC that stays keeps its
    /// health; a new one starts alive.
    fn replace(&mut self, members: Members, seq: u16) {
        let mut alive = 0u16;
        for (i, m) in members.as_slice().iter().enumerate() {
            let was_dead = self.members.position(*m).is_some_and(|j| !self.is_alive(j));
            if !was_dead {
                alive |= 1 << i;
            }
        }
        self.members = members;
        self.alive = alive;
        self.seq = seq;
    }
}

fn all_alive(m: &Members) -> u16 {
    // len ≤ 16: the shift is at most 16 in a u32.
    u16::try_from((1u32 << m.len()) - 1).unwrap_or(u16::MAX)
}

/// What [`Table::process`] did with a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// A new peer.
    Inserted,
    /// A known peer's member set changed (a newer sequence number).
    Changed,
    /// A known peer re-announced the same set (or sent a heartbeat): only
    /// its last-heard time moved.
    Refreshed,
    /// Older than what the table holds: ignored.
    Stale,
    /// `CLEAR`: the peer was removed.
    Removed,
    /// Nothing to do: a `CLEAR` or heartbeat for an unknown peer, an
    /// unknown type, a heartbeat from a newer epoch, or a message that
    /// cannot be right (a sender address that is not unicast, a member that
    /// is multicast).
    Ignored,
    /// A new peer, but the table is full: not recorded.
    Full,
}

/// The result of [`Table::process`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Update {
    /// What happened to the table.
    pub outcome: Outcome,
    /// Whether to unicast our `ARPP_REPLY` to the sender: it sent an
    /// `ARPP_BROADCAST` we did not know yet (a newcomer, or a peer that
    /// restarted or changed), as in the paper's S1 → S2 → S1. A mere
    /// re-announcement gets no reply: our own periodic broadcast reaches
    /// it anyway, and replying to every repeat would cost a reply per peer
    /// per period.
    pub reply: bool,
}

/// The ARP+ table.
#[derive(Clone, Debug)]
pub struct Table {
    entries: BTreeMap<Ipv4Address, Entry>,
    config: TableConfig,
}

impl Table {
    /// An empty table.
    pub fn new(config: TableConfig) -> Table {
        Table {
            entries: BTreeMap::new(),
            config,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &TableConfig {
        &self.config
    }

    /// Takes a received ARP+ message into account.
    pub fn process(&mut self, now: Instant, msg: &ArppRepr) -> Update {
        let outcome = self.apply(now, msg);
        let reply = msg.packet_type == ArppType::Broadcast
            && matches!(outcome, Outcome::Inserted | Outcome::Changed);
        Update { outcome, reply }
    }

    fn apply(&mut self, now: Instant, msg: &ArppRepr) -> Outcome {
        let ip = msg.sender_ip;
        if !ip.is_unicast() || !msg.members.all_unicast() {
            return Outcome::Ignored;
        }
        let full = self.entries.len() >= self.config.max_entries;
        let entry = self.entries.get_mut(&ip);
        match msg.packet_type {
            ArppType::Broadcast | ArppType::Reply | ArppType::Change => match entry {
                None if full => Outcome::Full,
                None => {
                    self.entries
                        .insert(ip, Entry::new(msg.members, msg.seq, now));
                    Outcome::Inserted
                }
                Some(e) if seq_newer(msg.seq, e.seq) => {
                    e.replace(msg.members, msg.seq);
                    e.last_heard = now;
                    Outcome::Changed
                }
                Some(e) if msg.seq == e.seq => {
                    e.last_heard = now;
                    if e.members == msg.members {
                        Outcome::Refreshed
                    } else {
                        // Same epoch, different set: the sender broke the
                        // rule that a change bumps the number. Trust the
                        // latest word.
                        e.replace(msg.members, msg.seq);
                        Outcome::Changed
                    }
                }
                Some(_) => Outcome::Stale,
            },
            ArppType::Clear => match entry {
                None => Outcome::Ignored,
                Some(e) if seq_newer(e.seq, msg.seq) || e.seq.wrapping_sub(msg.seq) == 0x8000 => {
                    Outcome::Stale
                }
                Some(_) => {
                    self.entries.remove(&ip);
                    Outcome::Removed
                }
            },
            ArppType::Heartbeat => match entry {
                Some(e) if e.seq == msg.seq => {
                    e.last_heard = now;
                    Outcome::Refreshed
                }
                Some(e) if seq_newer(e.seq, msg.seq) => Outcome::Stale,
                _ => Outcome::Ignored,
            },
            ArppType::Unknown(_) => Outcome::Ignored,
        }
    }

    /// The entry of `ip`.
    pub fn get(&self, ip: Ipv4Address) -> Option<&Entry> {
        self.entries.get(&ip)
    }

    /// Forgets `ip`.
    pub fn remove(&mut self, ip: Ipv4Address) -> Option<Entry> {
        self.entries.remove(&ip)
    }

    /// Forgets every peer (the host stopped bonding, [`crate::Action::ForgetPeers`]).
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Every entry, by address.
    pub fn iter(&self) -> impl Iterator<Item = (Ipv4Address, &Entry)> + '_ {
        self.entries.iter().map(|(ip, e)| (*ip, e))
    }

    /// How many peers.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No peers.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Marks member `mac` of peer `ip` alive or dead; false if there is no
    /// such peer or member.
    pub fn set_alive(&mut self, ip: Ipv4Address, mac: EthernetAddress, alive: bool) -> bool {
        let Some(e) = self.entries.get_mut(&ip) else {
            return false;
        };
        let Some(i) = e.members.position(mac) else {
            return false;
        };
        if alive {
            e.alive |= 1 << i;
        } else {
            e.alive &= !(1 << i);
        }
        true
    }

    /// Removes and returns every entry not heard from for
    /// [`TableConfig::max_age`] at `now`. Harmless to call early or often.
    pub fn expire(&mut self, now: Instant) -> Vec<(Ipv4Address, Entry)> {
        let max_age = self.config.max_age;
        let mut gone = Vec::new();
        self.entries.retain(|ip, e| {
            let keep = now.saturating_duration_since(e.last_heard) < max_age;
            if !keep {
                gone.push((*ip, *e));
            }
            keep
        });
        gone
    }

    /// When the next entry will expire, if there is one.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.entries
            .values()
            .map(|e| e.last_heard + self.config.max_age)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(n: u8) -> EthernetAddress {
        EthernetAddress([2, 0, 0, 0, 0, n])
    }

    const PEER: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);

    fn msg(t: ArppType, seq: u16, macs: &[EthernetAddress]) -> ArppRepr {
        ArppRepr {
            packet_type: t,
            seq,
            sender_ip: PEER,
            target_ip: Ipv4Address::UNSPECIFIED,
            members: Members::new(macs).unwrap(),
        }
    }

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn serial_comparison_wraps() {
        assert!(seq_newer(1, 0));
        assert!(seq_newer(0, u16::MAX));
        assert!(seq_newer(5, 65530));
        assert!(!seq_newer(65530, 5));
        assert!(!seq_newer(7, 7));
        assert!(seq_newer(0x7fff, 0));
        assert!(!seq_newer(0x8000, 0) && !seq_newer(0, 0x8000));
    }

    #[test]
    fn insert_refresh_change_stale_clear() {
        let mut t = Table::new(TableConfig::default());
        let u = t.process(at(0), &msg(ArppType::Broadcast, 10, &[mac(1), mac(2)]));
        assert_eq!(
            u,
            Update {
                outcome: Outcome::Inserted,
                reply: true
            }
        );
        let u = t.process(at(100), &msg(ArppType::Broadcast, 10, &[mac(1), mac(2)]));
        assert_eq!(
            u,
            Update {
                outcome: Outcome::Refreshed,
                reply: false
            }
        );
        assert_eq!(t.get(PEER).unwrap().last_heard(), at(100));
        // A change, then the old announcement arriving late.
        let u = t.process(at(200), &msg(ArppType::Change, 11, &[mac(1)]));
        assert_eq!(
            u,
            Update {
                outcome: Outcome::Changed,
                reply: false
            }
        );
        let u = t.process(at(300), &msg(ArppType::Broadcast, 10, &[mac(1), mac(2)]));
        assert_eq!(u.outcome, Outcome::Stale);
        assert_eq!(t.get(PEER).unwrap().members().as_slice(), &[mac(1)]);
        assert_eq!(t.get(PEER).unwrap().last_heard(), at(200));
        // A stale CLEAR does not remove; a current one does.
        assert_eq!(
            t.process(at(400), &msg(ArppType::Clear, 9, &[mac(1)]))
                .outcome,
            Outcome::Stale
        );
        assert_eq!(
            t.process(at(400), &msg(ArppType::Clear, 11, &[mac(1)]))
                .outcome,
            Outcome::Removed
        );
        assert!(t.is_empty());
        assert_eq!(
            t.process(at(400), &msg(ArppType::Clear, 11, &[mac(1)]))
                .outcome,
            Outcome::Ignored
        );
    }

    #[test]
    fn sequence_wraps_around() {
        let mut t = Table::new(TableConfig::default());
        t.process(at(0), &msg(ArppType::Broadcast, u16::MAX, &[mac(1)]));
        let u = t.process(at(1), &msg(ArppType::Change, 0, &[mac(2)]));
        assert_eq!(u.outcome, Outcome::Changed);
        let u = t.process(at(2), &msg(ArppType::Change, u16::MAX, &[mac(1)]));
        assert_eq!(u.outcome, Outcome::Stale);
        assert_eq!(t.get(PEER).unwrap().seq(), 0);
    }

    #[test]
    fn restarted_peer_gets_a_reply() {
        let mut t = Table::new(TableConfig::default());
        t.process(at(0), &msg(ArppType::Broadcast, 1, &[mac(1)]));
        let u = t.process(at(1), &msg(ArppType::Broadcast, 2, &[mac(1)]));
        assert_eq!(
            u,
            Update {
                outcome: Outcome::Changed,
                reply: true
            }
        );
        // Replies and changes are never answered.
        let mut t = Table::new(TableConfig::default());
        assert!(!t.process(at(0), &msg(ArppType::Reply, 1, &[mac(1)])).reply);
    }

    #[test]
    fn heartbeats_and_unknowns() {
        let mut t = Table::new(TableConfig::default());
        assert_eq!(
            t.process(at(0), &msg(ArppType::Heartbeat, 1, &[mac(1)]))
                .outcome,
            Outcome::Ignored
        );
        t.process(at(0), &msg(ArppType::Broadcast, 5, &[mac(1)]));
        assert_eq!(
            t.process(at(9), &msg(ArppType::Heartbeat, 5, &[mac(1)]))
                .outcome,
            Outcome::Refreshed
        );
        assert_eq!(t.get(PEER).unwrap().last_heard(), at(9));
        assert_eq!(
            t.process(at(9), &msg(ArppType::Heartbeat, 4, &[mac(1)]))
                .outcome,
            Outcome::Stale
        );
        assert_eq!(
            t.process(at(9), &msg(ArppType::Heartbeat, 6, &[mac(1)]))
                .outcome,
            Outcome::Ignored
        );
        assert_eq!(
            t.process(at(9), &msg(ArppType::Unknown(77), 6, &[mac(1)]))
                .outcome,
            Outcome::Ignored
        );
        assert_eq!(t.get(PEER).unwrap().seq(), 5);
    }

    #[test]
    fn impossible_senders_and_members_are_ignored() {
        let mut t = Table::new(TableConfig::default());
        let mut m = msg(
            ArppType::Broadcast,
            1,
            &[mac(1), EthernetAddress::BROADCAST],
        );
        assert_eq!(t.process(at(0), &m).outcome, Outcome::Ignored);
        m.members = Members::new(&[mac(1)]).unwrap();
        for ip in [
            Ipv4Address::UNSPECIFIED,
            Ipv4Address::BROADCAST,
            Ipv4Address::new(224, 0, 0, 1),
        ] {
            m.sender_ip = ip;
            assert_eq!(t.process(at(0), &m).outcome, Outcome::Ignored);
        }
        assert!(t.is_empty());
    }

    #[test]
    fn bounded() {
        let mut t = Table::new(TableConfig {
            max_entries: 2,
            ..TableConfig::default()
        });
        let mut m = msg(ArppType::Broadcast, 1, &[mac(1)]);
        for (i, want) in [
            (1, Outcome::Inserted),
            (2, Outcome::Inserted),
            (3, Outcome::Full),
        ] {
            m.sender_ip = Ipv4Address::new(10, 0, 0, i);
            assert_eq!(t.process(at(0), &m).outcome, want);
        }
        // A known peer is still updated when the table is full.
        m.sender_ip = Ipv4Address::new(10, 0, 0, 1);
        m.seq = 2;
        assert_eq!(t.process(at(0), &m).outcome, Outcome::Changed);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn ageing() {
        let cfg = TableConfig {
            max_age: Duration::from_secs(5),
            ..TableConfig::default()
        };
        let mut t = Table::new(cfg);
        assert_eq!(t.next_deadline(), None);
        t.process(at(0), &msg(ArppType::Broadcast, 1, &[mac(1)]));
        let mut other = msg(ArppType::Broadcast, 1, &[mac(2)]);
        other.sender_ip = Ipv4Address::new(10, 0, 0, 3);
        t.process(at(2000), &other);
        assert_eq!(t.next_deadline(), Some(at(5000)));
        assert!(t.expire(at(4999)).is_empty());
        let gone = t.expire(at(5000));
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].0, PEER);
        assert_eq!(t.next_deadline(), Some(at(7000)));
        // Refreshing postpones.
        t.process(at(6000), &other);
        assert!(t.expire(at(7000)).is_empty());
        assert_eq!(t.expire(at(11_000)).len(), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn member_health_survives_a_change() {
        let mut t = Table::new(TableConfig::default());
        t.process(
            at(0),
            &msg(ArppType::Broadcast, 1, &[mac(1), mac(2), mac(3)]),
        );
        assert!(t.set_alive(PEER, mac(2), false));
        assert!(!t.set_alive(PEER, mac(9), false));
        assert!(!t.set_alive(Ipv4Address::new(10, 0, 0, 9), mac(2), false));
        let e = t.get(PEER).unwrap();
        assert!(e.is_alive(0) && !e.is_alive(1) && e.is_alive(2) && !e.is_alive(3));
        assert_eq!(e.alive_members().collect::<Vec<_>>(), [mac(1), mac(3)]);
        // mac(3) leaves, mac(4) joins: mac(2) stays dead, mac(4) is alive.
        t.process(at(1), &msg(ArppType::Change, 2, &[mac(2), mac(1), mac(4)]));
        let e = t.get(PEER).unwrap();
        assert_eq!(e.alive_members().collect::<Vec<_>>(), [mac(1), mac(4)]);
        assert!(t.set_alive(PEER, mac(2), true));
        assert_eq!(t.get(PEER).unwrap().alive_members().count(), 3);
        let full = Members::new(&[mac(1); MAX_MEMBERS]).unwrap();
        assert_eq!(all_alive(&full), u16::MAX);
    }
}
