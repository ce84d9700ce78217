//! An IPv4 router between links of different MTUs: the hop that path-MTU
//! discovery and fragment reassembly are about.
//!
//! A [`Router`] is a [`Node`] with one NIC per [`RouterPort`] (add it with
//! [`World::add_node_with_nics`](crate::World::add_node_with_nics), one
//! `connect` per port, in order). It answers ARP for its ports' addresses,
//! learns its neighbours from the ARP and IPv4 frames they send (and asks,
//! holding a few packets, for one it does not know yet), and forwards
//! between its ports' prefixes, decrementing the TTL. A packet larger than
//! the outgoing port's MTU meets the router's [`DfPolicy`]: with DF set it
//! is dropped and the sender told with a fragmentation-needed message
//! (RFC 1191, as Linux's forwarding does; its next-hop MTU can be made to
//! read 0, as from a router older than RFC 1191), or dropped silently (an
//! ICMP black hole); without DF it is cut into fragments (RFC 791 §3.2),
//! which a router may also do to every packet, clearing DF.
//!
//! It takes wire-sized frames: give its neighbours NICs that cut their
//! super-segments (`gso_wire` off). On a GSO wire it would see each
//! super-segment as one packet too large for the next link (a Linux
//! router checks a GSO packet's segments instead).

use std::collections::BTreeMap;

use softoe_stack::Instant;
use softoe_wire::{
    ArpOperation, ArpPacket, ArpRepr, ChecksumCaps, EtherType, EthernetAddress, EthernetFrame,
    EthernetRepr, Icmpv4DstUnreachable, Icmpv4Packet, Icmpv4Repr, IpProtocol, Ipv4Address,
    Ipv4Cidr, Ipv4Packet, Ipv4Repr,
};

use crate::world::{Node, RxInfo, SimFrame};

const ETH: usize = 14;

/// What the router does with a packet too large for the next link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DfPolicy {
    /// As RFC 1191 and Linux: DF set → dropped, fragmentation needed sent
    /// back; DF clear → fragmented.
    Honour,
    /// As [`Honour`](Self::Honour), but the message says next-hop MTU 0
    /// (a router older than RFC 1191: the sender falls back on the
    /// plateau table).
    HonourOldStyle,
    /// DF set → dropped, and nothing said (ICMP filtered: a black hole).
    BlackHole,
    /// DF ignored: everything too large is fragmented (a router that
    /// clears DF, or a sender with path-MTU discovery off).
    Fragment,
}

/// One interface of the router.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouterPort {
    /// Its MAC.
    pub mac: EthernetAddress,
    /// Its address and the prefix it routes.
    pub addr: Ipv4Cidr,
    /// The IP MTU of the link beyond it (what it sends at most).
    pub mtu: usize,
}

/// What the router did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RouterStats {
    /// Packets forwarded whole.
    pub forwarded: u64,
    /// Packets forwarded as fragments.
    pub fragmented: u64,
    /// Fragments sent for them.
    pub fragments: u64,
    /// Fragmentation-needed messages sent.
    pub frag_needed: u64,
    /// DF packets dropped too large without a word ([`DfPolicy::BlackHole`]).
    pub black_holed: u64,
    /// Packets to no prefix of ours, or whose TTL ran out.
    pub dropped: u64,
    /// ARP requests sent.
    pub arp_requests: u64,
}

/// An IPv4 router (see the module docs).
#[derive(Debug)]
pub struct Router {
    ports: Vec<RouterPort>,
    policy: DfPolicy,
    /// Neighbours: address → (port, MAC).
    neigh: BTreeMap<[u8; 4], (usize, EthernetAddress)>,
    /// Packets waiting for a neighbour's MAC: (port, next hop, IPv4 packet).
    waiting: Vec<(usize, Ipv4Address, Vec<u8>)>,
    ident: u16,
    /// What it did.
    pub stats: RouterStats,
}

/// Packets held while a neighbour is resolved, at most.
const WAITING: usize = 64;

impl Router {
    /// A router with `ports` (NIC `i` is port `i`) and `policy` for packets
    /// too large.
    pub fn new(ports: Vec<RouterPort>, policy: DfPolicy) -> Router {
        Router {
            ports,
            policy,
            neigh: BTreeMap::new(),
            waiting: Vec::new(),
            ident: 0x5000,
            stats: RouterStats::default(),
        }
    }

    /// The largest MTU of its ports (its NICs' MTU).
    pub fn nic_mtu(&self) -> usize {
        self.ports.iter().map(|p| p.mtu).max().unwrap_or(1500)
    }

    fn port_for(&self, dst: Ipv4Address) -> Option<usize> {
        self.ports.iter().position(|p| p.addr.contains_addr(&dst))
    }

    fn eth(&self, port: usize, dst: EthernetAddress, ty: EtherType, payload: &[u8]) -> SimFrame {
        let mut bytes = vec![0u8; ETH + payload.len()];
        let mut f = EthernetFrame::new_unchecked(&mut bytes[..]);
        EthernetRepr {
            src_addr: self
                .ports
                .get(port)
                .map_or(EthernetAddress([0; 6]), |p| p.mac),
            dst_addr: dst,
            ethertype: ty,
            vlan_tci: None,
        }
        .emit(&mut f);
        if let Some(d) = bytes.get_mut(ETH..) {
            d.copy_from_slice(payload);
        }
        SimFrame {
            bytes,
            port,
            ..SimFrame::default()
        }
    }

    fn arp(&mut self, port: usize, bytes: &[u8], out: &mut Vec<SimFrame>) {
        let Ok(repr) = ArpPacket::new_checked(bytes).and_then(|p| ArpRepr::parse(&p)) else {
            return;
        };
        let Some(me) = self.ports.get(port).copied() else {
            return;
        };
        if me.addr.contains_addr(&repr.source_protocol_addr) {
            self.neigh.insert(
                repr.source_protocol_addr.0,
                (port, repr.source_hardware_addr),
            );
            self.flush(repr.source_protocol_addr, out);
        }
        if repr.operation == ArpOperation::Request && repr.target_protocol_addr == me.addr.address()
        {
            let reply = ArpRepr {
                operation: ArpOperation::Reply,
                source_hardware_addr: me.mac,
                source_protocol_addr: me.addr.address(),
                target_hardware_addr: repr.source_hardware_addr,
                target_protocol_addr: repr.source_protocol_addr,
            };
            let mut b = [0u8; 28];
            reply.emit(&mut ArpPacket::new_unchecked(&mut b[..]));
            out.push(self.eth(port, repr.source_hardware_addr, EtherType::Arp, &b));
        }
    }

    /// Sends what waited for `ip`'s MAC.
    fn flush(&mut self, ip: Ipv4Address, out: &mut Vec<SimFrame>) {
        let Some(&(port, mac)) = self.neigh.get(&ip.0) else {
            return;
        };
        let (go, keep): (Vec<_>, Vec<_>) = core::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|(_, hop, _)| *hop == ip);
        self.waiting = keep;
        for (_, _, pkt) in go {
            out.push(self.eth(port, mac, EtherType::Ipv4, &pkt));
        }
    }

    /// Puts an IPv4 packet out of `port` toward `dst` (on-link).
    fn emit(&mut self, port: usize, dst: Ipv4Address, pkt: Vec<u8>, out: &mut Vec<SimFrame>) {
        if let Some(&(p, mac)) = self.neigh.get(&dst.0)
            && p == port
        {
            out.push(self.eth(port, mac, EtherType::Ipv4, &pkt));
            return;
        }
        let asked = self.waiting.iter().any(|(_, hop, _)| *hop == dst);
        if self.waiting.len() < WAITING {
            self.waiting.push((port, dst, pkt));
        }
        if !asked && let Some(me) = self.ports.get(port).copied() {
            let req = ArpRepr {
                operation: ArpOperation::Request,
                source_hardware_addr: me.mac,
                source_protocol_addr: me.addr.address(),
                target_hardware_addr: EthernetAddress([0; 6]),
                target_protocol_addr: dst,
            };
            let mut b = [0u8; 28];
            req.emit(&mut ArpPacket::new_unchecked(&mut b[..]));
            self.stats.arp_requests += 1;
            out.push(self.eth(port, EthernetAddress::BROADCAST, EtherType::Arp, &b));
        }
    }

    /// A fragmentation-needed message to the sender of `pkt`, which came in
    /// on `port` and does not fit `mtu`.
    fn frag_needed(&mut self, port: usize, pkt: &[u8], mtu: usize, out: &mut Vec<SimFrame>) {
        let Some(me) = self.ports.get(port).copied() else {
            return;
        };
        let ip = Ipv4Packet::new_unchecked(pkt);
        let src = ip.src_addr();
        // RFC 792: the header and the first 8 bytes of the payload.
        let quote = pkt
            .get(..(ip.header_len() + 8).min(pkt.len()))
            .unwrap_or(&[]);
        let msg = Icmpv4Repr::DstUnreachable {
            reason: Icmpv4DstUnreachable::FragRequired,
            data: quote,
        };
        let mut icmp = vec![0u8; msg.buffer_len()];
        let mut p = Icmpv4Packet::new_unchecked(&mut icmp[..]);
        msg.emit(&mut p, &ChecksumCaps::default());
        let field = match self.policy {
            DfPolicy::HonourOldStyle => 0,
            _ => mtu.min(65_535) as u16,
        };
        p.set_next_hop_mtu(field);
        p.fill_checksum();
        let reply = self.ipv4(me.addr.address(), src, IpProtocol::Icmp, &icmp);
        self.stats.frag_needed += 1;
        self.emit(port, src, reply, out);
    }

    fn ipv4(
        &mut self,
        src: Ipv4Address,
        dst: Ipv4Address,
        proto: IpProtocol,
        l4: &[u8],
    ) -> Vec<u8> {
        let mut b = vec![0u8; 20 + l4.len()];
        self.ident = self.ident.wrapping_add(1);
        Ipv4Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: proto,
            payload_len: l4.len(),
            hop_limit: 64,
            ident: self.ident,
            dont_frag: false,
        }
        .emit(
            &mut Ipv4Packet::new_unchecked(&mut b[..]),
            &ChecksumCaps::default(),
        );
        if let Some(d) = b.get_mut(20..) {
            d.copy_from_slice(l4);
        }
        b
    }

    fn forward(&mut self, in_port: usize, bytes: &[u8], out: &mut Vec<SimFrame>) {
        let Ok(ip) = Ipv4Packet::new_checked(bytes) else {
            return;
        };
        if Ipv4Repr::parse(&ip, &ChecksumCaps::default()).is_err() {
            return;
        }
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        if self.ports.iter().any(|p| p.addr.address() == dst) {
            return; // For the router itself: it serves nothing.
        }
        let Some(port) = self.port_for(dst) else {
            self.stats.dropped += 1;
            return;
        };
        if ip.hop_limit() <= 1 || port == in_port {
            self.stats.dropped += 1;
            return;
        }
        let len = usize::from(ip.total_len());
        let mut pkt = bytes.get(..len).unwrap_or(&[]).to_vec();
        {
            let mut p = Ipv4Packet::new_unchecked(&mut pkt[..]);
            let ttl = p.hop_limit() - 1;
            p.set_hop_limit(ttl);
            p.fill_checksum();
        }
        let mtu = self.ports.get(port).map_or(1500, |p| p.mtu);
        if len <= mtu {
            self.stats.forwarded += 1;
            self.emit(port, dst, pkt, out);
            return;
        }
        if ip.dont_frag() {
            match self.policy {
                DfPolicy::Honour | DfPolicy::HonourOldStyle => {
                    let _ = src;
                    return self.frag_needed(in_port, &pkt, mtu, out);
                }
                DfPolicy::BlackHole => {
                    self.stats.black_holed += 1;
                    return;
                }
                DfPolicy::Fragment => {}
            }
        }
        self.stats.fragmented += 1;
        for f in fragment(&pkt, mtu) {
            self.stats.fragments += 1;
            self.emit(port, dst, f, out);
        }
    }
}

/// Cuts the IPv4 packet `pkt` into fragments of at most `mtu` bytes (RFC
/// 791 §3.2): each carries the header (options copied, as a router may),
/// a multiple of 8 payload bytes but the last, its offset, and MF but the
/// last (which keeps the original's MF: a fragment may be fragmented
/// again). DF is cleared.
pub fn fragment(pkt: &[u8], mtu: usize) -> Vec<Vec<u8>> {
    let ip = Ipv4Packet::new_unchecked(pkt);
    let hl = ip.header_len();
    let Some(header) = pkt.get(..hl) else {
        return Vec::new();
    };
    let payload = ip.payload();
    let base = usize::from(ip.frag_offset());
    let last_more = ip.more_frags();
    let per = (mtu.saturating_sub(hl) / 8 * 8).max(8);
    let mut out = Vec::new();
    let mut off = 0;
    while off < payload.len() {
        let n = per.min(payload.len() - off);
        let more = off + n < payload.len() || last_more;
        let mut f = Vec::with_capacity(hl + n);
        f.extend_from_slice(header);
        f.extend_from_slice(payload.get(off..off + n).unwrap_or(&[]));
        let mut p = Ipv4Packet::new_unchecked(&mut f[..]);
        p.set_total_len((hl + n) as u16);
        p.set_flags_and_offset(false, more, (base + off) as u16);
        p.fill_checksum();
        out.push(f);
        off += n;
    }
    out
}

impl Node for Router {
    fn receive(&mut self, _now: Instant, frame: &[u8], info: RxInfo, out: &mut Vec<SimFrame>) {
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            return;
        };
        let Some(me) = self.ports.get(info.port).copied() else {
            return;
        };
        match eth.ethertype() {
            EtherType::Arp => self.arp(info.port, eth.payload(), out),
            EtherType::Ipv4 if eth.dst_addr() == me.mac => {
                let src = Ipv4Packet::new_unchecked(eth.payload()).src_addr();
                if me.addr.contains_addr(&src) {
                    self.neigh.insert(src.0, (info.port, eth.src_addr()));
                }
                self.forward(info.port, eth.payload(), out);
            }
            _ => {}
        }
    }

    fn poll(&mut self, _now: Instant, _out: &mut Vec<SimFrame>) {}

    fn poll_at(&self) -> Option<Instant> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_cover_the_payload_in_eights() {
        let mut pkt = vec![0u8; 20 + 3000];
        Ipv4Repr {
            src_addr: Ipv4Address::new(10, 0, 0, 1),
            dst_addr: Ipv4Address::new(10, 0, 1, 1),
            next_header: IpProtocol::Udp,
            payload_len: 3000,
            hop_limit: 64,
            ident: 9,
            dont_frag: true,
        }
        .emit(
            &mut Ipv4Packet::new_unchecked(&mut pkt[..]),
            &ChecksumCaps::default(),
        );
        for (i, b) in pkt[20..].iter_mut().enumerate() {
            *b = i as u8;
        }
        let frags = fragment(&pkt, 1200);
        assert_eq!(frags.len(), 3);
        let mut whole = Vec::new();
        for (k, f) in frags.iter().enumerate() {
            let p = Ipv4Packet::new_checked(&f[..]).unwrap();
            assert!(f.len() <= 1200 && p.verify_checksum() && !p.dont_frag());
            assert_eq!(usize::from(p.frag_offset()), whole.len());
            assert_eq!(p.more_frags(), k < 2);
            assert_eq!(p.ident(), 9);
            whole.extend_from_slice(p.payload());
        }
        assert_eq!(&whole[..], &pkt[20..]);
        // A fragment cut again keeps its offset and its MF.
        let again = fragment(&frags[1], 600);
        assert_eq!(
            Ipv4Packet::new_checked(&again[0][..])
                .unwrap()
                .frag_offset(),
            1176
        );
        assert!(
            again
                .iter()
                .all(|f| Ipv4Packet::new_checked(&f[..]).unwrap().more_frags())
        );
    }
}
