//! The ARP cache, with timeouts and a bounded queue of frames waiting for
//! resolution.
//!
//! Memory is bounded twice over: at most `max_entries` entries (random ARP
//! traffic cannot fill it, because only replies to our own requests and
//! requests aimed at us create entries), and at most `pending_frames` waiting
//! frames, each in a slot allocated when the cache is built.

use alloc::boxed::Box;
use alloc::vec::Vec;

use hashbrown::HashMap;
use softoe_wire::{EthernetAddress, Ipv4Address};

use crate::config::ArpConfig;
use crate::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Resolved {
        mac: EthernetAddress,
        expires_at: Instant,
    },
    Incomplete {
        requests: u32,
        next_request: Instant,
    },
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    state: State,
    /// When the entry was created or last confirmed, for eviction.
    touched: Instant,
}

/// The result of looking up a next hop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Known: send to this MAC.
    Found(EthernetAddress),
    /// Unknown; an ARP request should go out now.
    RequestNow,
    /// Unknown; a request is already outstanding.
    Waiting,
}

struct Slot {
    next_hop: Ipv4Address,
    len: usize,
    used: bool,
    /// The frame's priority for the port ([`crate::TxFrame::priority`]).
    priority: u8,
    bytes: Box<[u8]>,
}

/// The cache.
pub(crate) struct ArpCache {
    cfg: ArpConfig,
    entries: HashMap<Ipv4Address, Entry, foldhash::fast::FixedState>,
    incomplete: usize,
    slots: Vec<Slot>,
}

impl core::fmt::Debug for ArpCache {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ArpCache")
            .field("entries", &self.entries.len())
            .field("incomplete", &self.incomplete)
            .field("pending", &self.pending_count())
            .finish()
    }
}

impl ArpCache {
    pub(crate) fn new(cfg: ArpConfig, seed: u64) -> ArpCache {
        let mut slots = Vec::with_capacity(cfg.pending_frames);
        for _ in 0..cfg.pending_frames {
            slots.push(Slot {
                next_hop: Ipv4Address::UNSPECIFIED,
                len: 0,
                used: false,
                priority: 0,
                bytes: alloc::vec![0u8; cfg.pending_frame_size].into_boxed_slice(),
            });
        }
        let mut entries =
            HashMap::with_hasher(foldhash::fast::FixedState::with_seed(seed ^ 0xa5a5));
        entries.reserve(cfg.max_entries.min(4096));
        ArpCache {
            cfg,
            entries,
            incomplete: 0,
            slots,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Looks up `ip`; when it is unknown, starts resolving it.
    pub(crate) fn lookup(&mut self, now: Instant, ip: Ipv4Address) -> Lookup {
        match self.entries.get_mut(&ip) {
            Some(Entry {
                state: State::Resolved { mac, expires_at },
                ..
            }) if *expires_at > now => return Lookup::Found(*mac),
            Some(e) => {
                if let State::Incomplete {
                    requests,
                    next_request,
                } = &mut e.state
                {
                    if now >= *next_request && *requests < self.cfg.max_requests {
                        *requests += 1;
                        *next_request = now + self.cfg.request_interval;
                        return Lookup::RequestNow;
                    }
                    return Lookup::Waiting;
                }
                // Expired: resolve again.
                e.state = State::Incomplete {
                    requests: 1,
                    next_request: now + self.cfg.request_interval,
                };
                e.touched = now;
                self.incomplete += 1;
                return Lookup::RequestNow;
            }
            None => {}
        }
        self.make_room(now);
        self.entries.insert(
            ip,
            Entry {
                state: State::Incomplete {
                    requests: 1,
                    next_request: now + self.cfg.request_interval,
                },
                touched: now,
            },
        );
        self.incomplete += 1;
        Lookup::RequestNow
    }

    /// Learns `ip` is at `mac`. `create` says whether a new entry may be made
    /// (the packet was a reply to us or a request aimed at us); otherwise only
    /// an existing entry is refreshed. Returns whether an unresolved address
    /// became resolved (waiting frames can go, waiting sockets can retry).
    pub(crate) fn fill(
        &mut self,
        now: Instant,
        ip: Ipv4Address,
        mac: EthernetAddress,
        create: bool,
    ) -> bool {
        if !mac.is_unicast() || ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() {
            return false;
        }
        let expires_at = now + self.cfg.entry_ttl;
        if let Some(e) = self.entries.get_mut(&ip) {
            let was_incomplete = matches!(e.state, State::Incomplete { .. });
            e.state = State::Resolved { mac, expires_at };
            e.touched = now;
            if was_incomplete {
                self.incomplete = self.incomplete.saturating_sub(1);
            }
            return was_incomplete;
        }
        if !create {
            return false;
        }
        self.make_room(now);
        self.entries.insert(
            ip,
            Entry {
                state: State::Resolved { mac, expires_at },
                touched: now,
            },
        );
        false
    }

    /// Evicts one entry if the cache is full: an expired one if any, else the
    /// least recently touched.
    fn make_room(&mut self, now: Instant) {
        if self.entries.len() < self.cfg.max_entries.max(1) {
            return;
        }
        let victim = self
            .entries
            .iter()
            .min_by_key(|(_, e)| match e.state {
                State::Resolved { expires_at, .. } if expires_at <= now => (0, e.touched),
                _ => (1, e.touched),
            })
            .map(|(ip, _)| *ip);
        if let Some(ip) = victim
            && let Some(e) = self.entries.remove(&ip)
            && matches!(e.state, State::Incomplete { .. })
        {
            self.incomplete = self.incomplete.saturating_sub(1);
            self.drop_pending(ip);
        }
    }

    /// Queues a frame for `next_hop`. Returns false (frame dropped) when the
    /// frame is too large for a slot or every slot is taken.
    pub(crate) fn enqueue(&mut self, next_hop: Ipv4Address, frame: &[u8], priority: u8) -> bool {
        let Some(slot) = self.slots.iter_mut().find(|s| !s.used) else {
            return false;
        };
        let Some(dst) = slot.bytes.get_mut(..frame.len()) else {
            return false;
        };
        dst.copy_from_slice(frame);
        slot.len = frame.len();
        slot.next_hop = next_hop;
        slot.priority = priority;
        slot.used = true;
        true
    }

    /// Calls `f` with each waiting frame for a resolved `next_hop`, its MAC
    /// and the frame's priority, freeing the slots. `f` returns false to
    /// stop (port busy); frames not yet given stay queued.
    pub(crate) fn flush(
        &mut self,
        now: Instant,
        mut f: impl FnMut(EthernetAddress, &mut [u8], u8) -> bool,
    ) -> usize {
        let mut sent = 0;
        for i in 0..self.slots.len() {
            let Some(slot) = self.slots.get_mut(i) else {
                break;
            };
            if !slot.used {
                continue;
            }
            let mac = match self.entries.get(&slot.next_hop) {
                Some(Entry {
                    state: State::Resolved { mac, expires_at },
                    ..
                }) if *expires_at > now => *mac,
                _ => continue,
            };
            let (len, priority) = (slot.len, slot.priority);
            let Some(bytes) = slot.bytes.get_mut(..len) else {
                slot.used = false;
                continue;
            };
            if !f(mac, bytes, priority) {
                break;
            }
            slot.used = false;
            sent += 1;
        }
        sent
    }

    fn drop_pending(&mut self, ip: Ipv4Address) -> usize {
        let mut dropped = 0;
        for s in self.slots.iter_mut().filter(|s| s.used && s.next_hop == ip) {
            s.used = false;
            dropped += 1;
        }
        dropped
    }

    /// The largest frame a waiting slot holds.
    pub(crate) fn slot_size(&self) -> usize {
        self.cfg.pending_frame_size
    }

    pub(crate) fn pending_count(&self) -> usize {
        self.slots.iter().filter(|s| s.used).count()
    }

    /// Addresses whose next request is due are pushed onto `requests` (up to
    /// its capacity; the rest wait for the next call). Addresses that got
    /// `max_requests` unanswered requests are given up: their waiting frames
    /// are dropped, and the count is returned.
    pub(crate) fn poll(&mut self, now: Instant, requests: &mut Vec<Ipv4Address>) -> usize {
        requests.clear();
        if self.incomplete == 0 {
            return 0;
        }
        let room = requests.capacity().max(1);
        let mut give_up: [Option<Ipv4Address>; 8] = [None; 8];
        let mut n_give_up = 0;
        for (ip, e) in self.entries.iter_mut() {
            if let State::Incomplete {
                requests: sent,
                next_request,
            } = &mut e.state
            {
                if now < *next_request {
                    continue;
                }
                let waiting = self.slots.iter().any(|s| s.used && s.next_hop == *ip);
                if *sent >= self.cfg.max_requests || !waiting {
                    if let Some(g) = give_up.get_mut(n_give_up) {
                        *g = Some(*ip);
                        n_give_up += 1;
                    }
                } else if requests.len() < room {
                    *sent += 1;
                    *next_request = now + self.cfg.request_interval;
                    requests.push(*ip);
                }
            }
        }
        let mut dropped = 0;
        for ip in give_up.iter().flatten() {
            if self.entries.remove(ip).is_some() {
                self.incomplete = self.incomplete.saturating_sub(1);
            }
            dropped += self.drop_pending(*ip);
        }
        dropped
    }

    /// When [`poll`](Self::poll) next has work.
    pub(crate) fn poll_at(&self) -> Option<Instant> {
        if self.incomplete == 0 {
            return None;
        }
        self.entries
            .values()
            .filter_map(|e| match e.state {
                State::Incomplete { next_request, .. } => Some(next_request),
                State::Resolved { .. } => None,
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    const IP: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);
    const MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

    fn cache() -> ArpCache {
        let cfg = ArpConfig {
            max_entries: 4,
            pending_frames: 2,
            ..ArpConfig::default()
        };
        ArpCache::new(cfg, 1)
    }

    #[test]
    fn resolve_then_expire() {
        let mut c = cache();
        let t = Instant::from_secs(1);
        assert_eq!(c.lookup(t, IP), Lookup::RequestNow);
        assert_eq!(c.lookup(t, IP), Lookup::Waiting);
        assert!(c.enqueue(IP, &[1, 2, 3], 6));
        assert!(c.fill(t, IP, MAC, false));
        assert_eq!(c.lookup(t, IP), Lookup::Found(MAC));
        let mut got = Vec::new();
        assert_eq!(
            c.flush(t, |mac, f, prio| {
                got.push((mac, f.to_vec(), prio));
                true
            }),
            1
        );
        assert_eq!(got, [(MAC, alloc::vec![1, 2, 3], 6)]);
        assert_eq!(c.pending_count(), 0);
        let later = t + Duration::from_secs(61);
        assert_eq!(c.lookup(later, IP), Lookup::RequestNow);
    }

    #[test]
    fn unsolicited_entries_are_not_created() {
        let mut c = cache();
        assert!(!c.fill(Instant::ZERO, IP, MAC, false));
        assert_eq!(c.len(), 0);
        // Broadcast or multicast MACs are never learned.
        assert!(!c.fill(Instant::ZERO, IP, EthernetAddress::BROADCAST, true));
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn bounded_under_a_flood() {
        let mut c = cache();
        for i in 0..1000u32 {
            let ip = Ipv4Address::from_bits(0x0a00_0000 + i);
            c.fill(Instant::from_millis(u64::from(i)), ip, MAC, true);
        }
        assert_eq!(c.len(), 4);
        // The newest survive.
        assert_eq!(
            c.lookup(
                Instant::from_secs(1),
                Ipv4Address::from_bits(0x0a00_0000 + 999)
            ),
            Lookup::Found(MAC)
        );
    }

    #[test]
    fn pending_queue_is_bounded_and_dropped_on_give_up() {
        let mut c = cache();
        let t = Instant::ZERO;
        assert_eq!(c.lookup(t, IP), Lookup::RequestNow);
        assert!(c.enqueue(IP, &[0; 10], 0));
        assert!(c.enqueue(IP, &[0; 10], 0));
        assert!(!c.enqueue(IP, &[0; 10], 0), "slots are bounded");
        assert!(!c.enqueue(IP, &[0; 1000], 0), "too large for a slot");
        let mut reqs = 0;
        let mut now = t;
        let mut dropped = 0;
        let mut out = Vec::with_capacity(4);
        for _ in 0..10 {
            now += Duration::from_secs(1);
            dropped += c.poll(now, &mut out);
            reqs += out.len();
        }
        assert_eq!(reqs, 2, "three requests in all, the first from lookup");
        assert_eq!(dropped, 2);
        assert_eq!(c.pending_count(), 0);
        assert_eq!(c.poll_at(), None);
    }
}
