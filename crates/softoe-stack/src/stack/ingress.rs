//! Frames in: Ethernet, ARP, IPv4 (fragments), ICMP and UDP delivery.

use softoe_wire::{
    ArpOperation, ArpPacket, ArpRepr, Checksum, ChecksumCaps, EtherType, EthernetFrame,
    Icmpv4DstUnreachable, Icmpv4Packet, Icmpv4Repr, Icmpv4TimeExceeded, IpProtocol, Ipv4Address,
    Ipv4Packet, Ipv4Repr, UdpPacket, UdpRepr,
};

use crate::device::{Device, RxMeta};
use crate::iface::{IPV4_HEADER, IpFields};
use crate::reasm::Outcome;
use crate::tcp::Endpoint;
use crate::tcp::icmp::{self, IcmpVerdict};
use crate::time::Instant;

use super::Stack;

impl Stack {
    /// Processes one received frame; answers (ACKs, ARP replies, echo
    /// replies, resets) go out through `dev` at once.
    pub fn receive<D: Device>(&mut self, now: Instant, frame: &[u8], meta: RxMeta, dev: &mut D) {
        self.stats.rx_frames += 1;
        self.stats.rx_bytes += frame.len() as u64;
        if meta.gso_size.is_some() {
            self.stats.rx_coalesced += 1;
        }
        if meta.csum_verified {
            self.stats.rx_csum_offloaded += 1;
        }
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let dst = eth.dst_addr();
        if eth.vlan_tci().is_some() || !(dst == self.iface.mac || dst.is_broadcast()) {
            self.stats.rx_not_for_us += 1;
            return;
        }
        match eth.ethertype() {
            EtherType::Arp => self.receive_arp(now, eth.payload(), dev),
            EtherType::Ipv4 => self.receive_ipv4(now, eth.payload(), meta, dst.is_broadcast(), dev),
            _ => self.stats.rx_not_for_us += 1,
        }
    }

    fn receive_arp<D: Device>(&mut self, now: Instant, bytes: &[u8], dev: &mut D) {
        let Ok(pkt) = ArpPacket::new_checked(bytes) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let Ok(repr) = ArpRepr::parse(&pkt) else {
            self.stats.rx_malformed += 1;
            return;
        };
        self.stats.arp_rx += 1;
        let for_us = self.iface.has_addr(repr.target_protocol_addr);
        let resolved = self.arp.fill(
            now,
            repr.source_protocol_addr,
            repr.source_hardware_addr,
            for_us,
        );
        let mut eg = egress!(self, now, dev);
        if for_us && repr.operation == ArpOperation::Request {
            let reply = ArpRepr {
                operation: ArpOperation::Reply,
                source_hardware_addr: eg.iface.mac,
                source_protocol_addr: repr.target_protocol_addr,
                target_hardware_addr: repr.source_hardware_addr,
                target_protocol_addr: repr.source_protocol_addr,
            };
            if repr.source_hardware_addr.is_unicast() {
                let _ = eg.send_arp(&reply, repr.source_hardware_addr);
            }
        }
        if resolved {
            eg.flush_arp_queue();
            // Connections whose frames could not wait may go now.
            self.sockets.wake_all_tcp();
        }
    }

    fn receive_ipv4<D: Device>(
        &mut self,
        now: Instant,
        bytes: &[u8],
        meta: RxMeta,
        l2_broadcast: bool,
        dev: &mut D,
    ) {
        let Ok(pkt) = Ipv4Packet::new_checked(bytes) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let Ok(ip) = Ipv4Repr::parse(&pkt, &ChecksumCaps::default()) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let to_us = self.iface.has_addr(ip.dst_addr);
        let broadcast = self.iface.is_broadcast(ip.dst_addr);
        if !to_us && !broadcast {
            self.stats.rx_not_for_us += 1;
            return;
        }
        if pkt.is_fragment() {
            self.stats.rx_fragments += 1;
            self.receive_fragment(now, bytes, l2_broadcast, to_us, dev);
            return;
        }
        self.deliver_ipv4(
            now,
            &ip,
            bytes,
            pkt.payload(),
            meta,
            l2_broadcast,
            to_us,
            dev,
        );
    }

    /// A fragment for us: into reassembly, and the datagram up the stack
    /// once it is whole, as if it had come in one piece (its checksum
    /// verified here: no port vouches for a datagram it never saw whole).
    fn receive_fragment<D: Device>(
        &mut self,
        now: Instant,
        bytes: &[u8],
        l2_broadcast: bool,
        to_us: bool,
        dev: &mut D,
    ) {
        let Outcome::Complete(i) = self.reasm.add(now, bytes, &mut self.stats) else {
            return;
        };
        let Some((buf, len)) = self.reasm.take(i) else {
            return;
        };
        self.stats.reasm_ok += 1;
        if let Some(whole) = buf.get(..len)
            && let Ok(pkt) = Ipv4Packet::new_checked(whole)
            && let Ok(ip) = Ipv4Repr::parse(&pkt, &ChecksumCaps::default())
        {
            let meta = RxMeta::default();
            self.deliver_ipv4(
                now,
                &ip,
                whole,
                pkt.payload(),
                meta,
                l2_broadcast,
                to_us,
                dev,
            );
        }
        self.reasm.release(i, buf);
    }

    /// Drops the datagrams whose reassembly timed out, telling the sender
    /// of each whose first fragment came (ICMP time exceeded, code 1:
    /// RFC 792, RFC 1122 §3.3.2), within the ICMP error limit.
    pub(super) fn expire_fragments<D: Device>(&mut self, now: Instant, dev: &mut D) {
        while let Some(expired) = self.reasm.expire(now) {
            self.stats.reasm_timeouts += 1;
            let Some(e) = expired else { continue };
            if !self.iface.has_addr(e.dst) || !self.icmp_limit.allow(now) {
                continue;
            }
            let msg = Icmpv4Repr::TimeExceeded {
                reason: Icmpv4TimeExceeded::FragReassembly,
                data: e.quote.get(..e.len).unwrap_or(&[]),
            };
            self.stats.icmp_time_exceeded_tx += 1;
            let _ = egress!(self, now, dev).send_icmp(e.dst, e.src, &msg);
        }
    }

    /// A whole datagram for us (or broadcast) up to its protocol.
    #[allow(clippy::too_many_arguments)]
    fn deliver_ipv4<D: Device>(
        &mut self,
        now: Instant,
        ip: &Ipv4Repr,
        bytes: &[u8],
        payload: &[u8],
        meta: RxMeta,
        l2_broadcast: bool,
        to_us: bool,
        dev: &mut D,
    ) {
        let l4_caps = if meta.csum_verified {
            ChecksumCaps {
                ipv4: Checksum::Both,
                udp: Checksum::Tx,
                tcp: Checksum::Tx,
                icmpv4: Checksum::Tx,
            }
        } else {
            ChecksumCaps::default()
        };
        match ip.next_header {
            IpProtocol::Tcp if to_us && !l2_broadcast => {
                self.receive_tcp(now, ip, payload, &l4_caps, meta, dev)
            }
            IpProtocol::Udp => self.receive_udp(now, ip, bytes, payload, &l4_caps, to_us, dev),
            IpProtocol::Icmp if to_us => self.receive_icmp(now, ip, payload, &l4_caps, dev),
            _ => self.stats.rx_not_for_us += 1,
        }
    }

    fn receive_icmp<D: Device>(
        &mut self,
        now: Instant,
        ip: &Ipv4Repr,
        bytes: &[u8],
        caps: &ChecksumCaps,
        dev: &mut D,
    ) {
        let Ok(pkt) = Icmpv4Packet::new_checked(bytes) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let Ok(repr) = Icmpv4Repr::parse(&pkt, caps) else {
            self.stats.rx_malformed += 1;
            return;
        };
        match repr {
            Icmpv4Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } => {
                let reply = Icmpv4Repr::EchoReply {
                    ident,
                    seq_no,
                    data,
                };
                if reply.buffer_len() + IPV4_HEADER > self.cfg.caps.mtu {
                    return self.send_icmp_fragments(now, ip, &reply, dev);
                }
                self.stats.icmp_echo += 1;
                let _ = egress!(self, now, dev).send_icmp(ip.dst_addr, ip.src_addr, &reply);
            }
            Icmpv4Repr::DstUnreachable {
                reason: Icmpv4DstUnreachable::FragRequired,
                data,
            } => {
                self.stats.icmp_errors_rx += 1;
                let (pmtu, socks, stats) = (&mut self.pmtu, &mut self.sockets, &mut self.stats);
                crate::pmtu::on_frag_needed(now, pkt.next_hop_mtu(), data, pmtu, socks, stats);
            }
            Icmpv4Repr::DstUnreachable { reason, data, .. } => {
                self.stats.icmp_errors_rx += 1;
                self.tcp_icmp_error(now, reason, data);
            }
            _ => {}
        }
    }

    /// An echo reply too large for the MTU (the answer to a large ping),
    /// built whole and sent as fragments (RFC 1122 §3.2.2.6: the reply
    /// carries the request's data, however it arrived).
    fn send_icmp_fragments<D: Device>(
        &mut self,
        now: Instant,
        ip: &Ipv4Repr,
        reply: &Icmpv4Repr<'_>,
        dev: &mut D,
    ) {
        self.stats.icmp_echo += 1;
        let mut whole = core::mem::take(&mut self.frag_out);
        whole.clear();
        whole.resize(reply.buffer_len(), 0);
        reply.emit(
            &mut Icmpv4Packet::new_unchecked(&mut whole[..]),
            &ChecksumCaps::default(),
        );
        let mtu = self.cfg.caps.mtu;
        let _ = egress!(self, now, dev).send_fragments(
            ip.dst_addr,
            ip.src_addr,
            IpProtocol::Icmp,
            &whole,
            mtu,
            IpFields::DEFAULT,
        );
        self.frag_out = whole;
    }

    /// An ICMP destination-unreachable error: what it does to the TCP
    /// connection whose segment it quotes, if any (`tcp::icmp`).
    fn tcp_icmp_error(&mut self, now: Instant, reason: Icmpv4DstUnreachable, quote: &[u8]) {
        let (Some(err), Some(q)) = (icmp::error_for(reason), icmp::quoted_tcp(quote)) else {
            return;
        };
        let Some(&i) = self.sockets.conns.get(&(q.local, q.remote)) else {
            return;
        };
        let Some(sock) = self.sockets.tcp_mut(i) else {
            return;
        };
        let prev = sock.state;
        match sock.icmp_error(q.seq, err) {
            IcmpVerdict::OutOfWindow => self.stats.tcp_icmp_out_of_window += 1,
            IcmpVerdict::Aborted => {
                self.stats.tcp_icmp_aborts += 1;
                self.after_tcp(now, i, prev);
                if self.sockets.get(i).is_some() {
                    self.sockets.touch(i);
                }
            }
            IcmpVerdict::Ignored | IcmpVerdict::Recorded => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn receive_udp<D: Device>(
        &mut self,
        now: Instant,
        ip: &Ipv4Repr,
        ip_bytes: &[u8],
        bytes: &[u8],
        caps: &ChecksumCaps,
        to_us: bool,
        dev: &mut D,
    ) {
        let Ok(pkt) = UdpPacket::new_checked(bytes) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let Ok(repr) = UdpRepr::parse(&pkt, &ip.src_addr, &ip.dst_addr, caps) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let local = Endpoint::new(ip.dst_addr, repr.dst_port);
        let from = Endpoint::new(ip.src_addr, repr.src_port);
        let found = if to_us {
            self.sockets.find_udp(local)
        } else {
            self.sockets
                .find_udp(Endpoint::new(Ipv4Address::UNSPECIFIED, repr.dst_port))
        };
        if let Some(i) = found {
            if let Some(sock) = self.sockets.udp_mut(i) {
                if sock.deliver(from, pkt.payload()) {
                    self.stats.udp_rx += 1;
                } else {
                    self.stats.udp_drops += 1;
                }
            }
            self.sockets.touch(i);
            return;
        }
        if !to_us || !self.icmp_limit.allow(now) {
            return;
        }
        // RFC 1122 §3.2.2.1: port unreachable, quoting the IP header and 8 bytes.
        let quote_len =
            (usize::from(ip_bytes.first().map_or(5, |b| b & 0x0f)) * 4 + 8).min(ip_bytes.len());
        let quote = ip_bytes.get(..quote_len).unwrap_or(&[]);
        let icmp = Icmpv4Repr::DstUnreachable {
            reason: Icmpv4DstUnreachable::PortUnreachable,
            data: quote,
        };
        self.stats.icmp_unreachable_tx += 1;
        let _ = egress!(self, now, dev).send_icmp(ip.dst_addr, ip.src_addr, &icmp);
    }
}
