//! The network interface: addresses, routing, ARP, and the framing of every
//! frame the stack sends.
//!
//! [`Egress`] is the one place a frame is built: it routes, resolves the next
//! hop (queueing small frames while ARP works), writes Ethernet and IPv4
//! headers into the stack's scratch buffer, and either fills the transport
//! checksum in software or leaves it to the port.

pub(crate) mod arp;

use alloc::vec::Vec;

use softoe_wire::{
    ArpOperation, ArpPacket, ArpRepr, ChecksumCaps, EtherType, EthernetAddress, EthernetFrame,
    EthernetRepr, Icmpv4Packet, Icmpv4Repr, IpProtocol, Ipv4Address, Ipv4Cidr, Ipv4Packet,
    Ipv4Repr, TcpPacket, checksum,
};

use crate::device::{Device, PartialCsum, TxFrame, TxOffload};
use crate::payload::PayloadRef;
use crate::pmtu::PmtuCache;
use crate::stats::StackStats;
use crate::tcp::output::{Segment, SegmentSink, SinkError};
use crate::time::Instant;
use arp::{ArpCache, Lookup};

pub(crate) const ETH_HEADER: usize = 14;

/// Bytes of payload copied out of the device per step when the stack sums
/// payload itself (no checksum offload): the stack's own buffer, made once,
/// and a multiple of the checksum's 32-byte step.
pub(crate) const CSUM_CHUNK: usize = 2048;

/// The per-socket fields of the IPv4 header: the TOS byte (`IP_TOS`) and the
/// TTL (`IP_TTL`; 0 stands for [`DEFAULT_TTL`](crate::DEFAULT_TTL)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct IpFields {
    pub(crate) tos: u8,
    pub(crate) ttl: u8,
    /// Not an IP field: the socket's `SO_PRIORITY`, which rides with the
    /// packet to the port ([`TxFrame::priority`]).
    pub(crate) priority: u8,
}

impl IpFields {
    /// What packets of no socket carry (ICMP, resets for unknown
    /// connections).
    pub(crate) const DEFAULT: IpFields = IpFields {
        tos: 0,
        ttl: 0,
        priority: 0,
    };

    /// The TTL packets carry.
    pub(crate) fn effective_ttl(self) -> u8 {
        if self.ttl == 0 {
            crate::config::DEFAULT_TTL
        } else {
            self.ttl
        }
    }
}
pub(crate) const IPV4_HEADER: usize = 20;

/// Addresses and routes.
#[derive(Clone, Debug)]
pub(crate) struct Iface {
    pub(crate) mac: EthernetAddress,
    pub(crate) addrs: Vec<Ipv4Cidr>,
    pub(crate) gateway: Option<Ipv4Address>,
    pub(crate) tx_csum: bool,
}

impl Iface {
    /// Whether `addr` is one of ours.
    pub(crate) fn has_addr(&self, addr: Ipv4Address) -> bool {
        self.addrs.iter().any(|c| c.address() == addr)
    }

    /// Whether `addr` is a broadcast address we listen to.
    pub(crate) fn is_broadcast(&self, addr: Ipv4Address) -> bool {
        addr.is_broadcast() || self.addrs.iter().any(|c| c.broadcast() == Some(addr))
    }

    /// The next hop toward `dst`, or `None` without a route.
    pub(crate) fn route(&self, dst: Ipv4Address) -> Option<Ipv4Address> {
        if self.addrs.iter().any(|c| c.contains_addr(&dst)) || dst.is_broadcast() {
            Some(dst)
        } else {
            self.gateway
        }
    }

    /// The source address for packets to `dst`.
    pub(crate) fn src_for(&self, dst: Ipv4Address) -> Option<Ipv4Address> {
        self.addrs
            .iter()
            .find(|c| c.contains_addr(&dst))
            .or(self.gateway.and(self.addrs.first()))
            .map(|c| c.address())
    }
}

/// Everything needed to put one frame on the port, borrowed from the stack.
pub(crate) struct Egress<'a, D: Device> {
    pub(crate) now: Instant,
    pub(crate) dev: &'a mut D,
    pub(crate) iface: &'a Iface,
    pub(crate) arp: &'a mut ArpCache,
    pub(crate) buf: &'a mut Vec<u8>,
    /// [`CSUM_CHUNK`] bytes for payload read for a software checksum.
    pub(crate) chunk: &'a mut [u8],
    pub(crate) ident: &'a mut u16,
    pub(crate) stats: &'a mut StackStats,
    /// Learnt path MTUs: whether a TCP segment may carry DF.
    pub(crate) pmtu: &'a PmtuCache,
}

impl<D: Device> Egress<'_, D> {
    /// Sends an ARP packet (requests are broadcast).
    pub(crate) fn send_arp(
        &mut self,
        repr: &ArpRepr,
        dst_mac: EthernetAddress,
    ) -> Result<(), SinkError> {
        let mut frame = [0u8; ETH_HEADER + 28];
        let eth = EthernetRepr {
            src_addr: self.iface.mac,
            dst_addr: dst_mac,
            ethertype: EtherType::Arp,
            vlan_tci: None,
        };
        let mut f = EthernetFrame::new_unchecked(&mut frame[..]);
        eth.emit(&mut f);
        let mut p = ArpPacket::new_unchecked(f.payload_mut());
        repr.emit(&mut p);
        self.transmit(&frame, &[], TxOffload::default(), 0)
    }

    /// Asks who has `ip`.
    pub(crate) fn arp_request(&mut self, ip: Ipv4Address) {
        let Some(src) = self
            .iface
            .src_for(ip)
            .or(self.iface.addrs.first().map(|c| c.address()))
        else {
            return;
        };
        let repr = ArpRepr {
            operation: ArpOperation::Request,
            source_hardware_addr: self.iface.mac,
            source_protocol_addr: src,
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: ip,
        };
        self.stats.arp_requests += 1;
        let _ = self.send_arp(&repr, EthernetAddress::BROADCAST);
    }

    fn transmit(
        &mut self,
        header: &[u8],
        payload: &[PayloadRef],
        offload: TxOffload,
        priority: u8,
    ) -> Result<(), SinkError> {
        let frame = TxFrame {
            header,
            payload,
            offload,
            priority,
        };
        let len = frame.len();
        match self.dev.transmit(&frame) {
            Ok(()) => {
                self.stats.tx_frames += 1;
                self.stats.tx_bytes += len as u64;
                if offload.gso_size.is_some() {
                    self.stats.tx_tso_frames += 1;
                }
                if offload.csum.is_some() {
                    self.stats.tx_csum_offloaded += 1;
                }
                Ok(())
            }
            Err(_) => {
                self.stats.tx_busy += 1;
                Err(SinkError::Busy)
            }
        }
    }

    /// Sends an IPv4 packet whose transport header `build` writes into the
    /// buffer it is given (`l4_len` bytes), followed by `payload`.
    ///
    /// `csum_offset` is where the transport checksum lives within the
    /// transport header (`None`: the builder filled it, e.g. ICMP). The
    /// checksum covers the transport header and payload.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_ipv4(
        &mut self,
        src: Ipv4Address,
        dst: Ipv4Address,
        protocol: IpProtocol,
        l4_len: usize,
        build: impl FnOnce(&mut [u8]),
        payload: &[PayloadRef],
        payload_len: usize,
        csum_offset: Option<usize>,
        gso_size: Option<u16>,
        fields: IpFields,
    ) -> Result<(), SinkError> {
        let Some((next_hop, dst_mac, resolved)) = self.next_hop(dst) else {
            // No route: the packet is lost, as it would be on a wire.
            self.stats.no_route += 1;
            return Ok(());
        };
        let hdr_len = ETH_HEADER + IPV4_HEADER + l4_len;
        let total = hdr_len + payload_len;
        // A frame that must wait for ARP is built whole, with its checksum, so
        // that it can be replayed verbatim.
        let offload_csum = resolved && (self.iface.tx_csum || gso_size.is_some());
        if !resolved && total > self.arp.slot_size() {
            self.stats.arp_drops += 1;
            return Err(SinkError::Unresolved);
        }
        let build_len = if resolved { hdr_len } else { total };
        self.buf.clear();
        self.buf.resize(build_len, 0);
        {
            let mut eth = EthernetFrame::new_unchecked(&mut self.buf[..]);
            EthernetRepr {
                src_addr: self.iface.mac,
                dst_addr: dst_mac,
                ethertype: EtherType::Ipv4,
                vlan_tci: None,
            }
            .emit(&mut eth);
            let ip_repr = Ipv4Repr {
                src_addr: src,
                dst_addr: dst,
                next_header: protocol,
                payload_len: l4_len + payload_len,
                hop_limit: fields.effective_ttl(),
                ident: *self.ident,
                // TCP finds the path's MTU (RFC 1191), unless the path is
                // narrower than the floor and routers must cut.
                dont_frag: protocol == IpProtocol::Tcp && !self.pmtu.df_off(dst),
            };
            *self.ident = self.ident.wrapping_add(1);
            let mut ip = Ipv4Packet::new_unchecked(eth.payload_mut());
            ip_repr.emit(&mut ip, &ChecksumCaps::default());
            if fields.tos != 0 {
                // `emit` wrote DSCP/ECN zero and the checksum over that.
                ip.set_dscp_ecn(fields.tos >> 2, fields.tos & 3);
                ip.fill_checksum();
            }
        }
        let l4_start = ETH_HEADER + IPV4_HEADER;
        let Some(l4) = self.buf.get_mut(l4_start..l4_start + l4_len) else {
            return Ok(());
        };
        build(l4);
        if !resolved {
            // Copy the payload in (small frames only) so the frame stands alone.
            let mut at = hdr_len;
            for r in payload {
                let end = at.saturating_add(r.len()).min(self.buf.len());
                if let Some(dst) = self.buf.get_mut(at..end) {
                    at += self.dev.copy_payload(r, 0, dst).min(dst.len());
                }
            }
        }
        let mut offload = TxOffload {
            gso_size,
            csum: None,
        };
        if let Some(off) = csum_offset {
            let pseudo = checksum::pseudo_header(src, dst, protocol, (l4_len + payload_len) as u32);
            if offload_csum {
                // The field holds the pseudo-header sum; the port does the rest.
                self.put_u16(l4_start + off, pseudo);
                offload.csum = Some(PartialCsum {
                    start: l4_start as u16,
                    offset: off as u16,
                });
            } else {
                self.put_u16(l4_start + off, 0);
                let mut acc = checksum::Accumulator::new();
                acc.add_sum(pseudo);
                acc.add(self.buf.get(l4_start..).unwrap_or(&[]));
                if resolved {
                    // In place if the device's memory is its own; otherwise
                    // through a buffer of ours, a chunk at a time: the
                    // payload may be memory a program can write under us.
                    for r in payload {
                        if let Some(b) = self.dev.payload_in_place(r) {
                            acc.add(b);
                            continue;
                        }
                        let mut off = 0;
                        while off < r.len() {
                            let n = self.dev.copy_payload(r, off, self.chunk);
                            let Some(bytes) = self.chunk.get(..n).filter(|b| !b.is_empty()) else {
                                break;
                            };
                            acc.add(bytes);
                            off += n;
                        }
                    }
                }
                let mut sum = !acc.finish();
                if protocol == IpProtocol::Udp && sum == 0 {
                    sum = 0xffff;
                }
                self.put_u16(l4_start + off, sum);
            }
        }
        if resolved {
            let buf = core::mem::take(self.buf);
            let r = self.transmit(&buf, payload, offload, fields.priority);
            *self.buf = buf;
            r
        } else if self.arp.enqueue(next_hop, self.buf, fields.priority) {
            Ok(())
        } else {
            self.stats.arp_drops += 1;
            Err(SinkError::Unresolved)
        }
    }

    /// The next hop toward `dst`, its MAC and whether that is known (an
    /// ARP request goes out when due); `None` without a route.
    fn next_hop(&mut self, dst: Ipv4Address) -> Option<(Ipv4Address, EthernetAddress, bool)> {
        let next_hop = self.iface.route(dst)?;
        Some(if dst.is_broadcast() {
            (next_hop, EthernetAddress::BROADCAST, true)
        } else {
            match self.arp.lookup(self.now, next_hop) {
                Lookup::Found(mac) => (next_hop, mac, true),
                Lookup::RequestNow => {
                    self.arp_request(next_hop);
                    (next_hop, EthernetAddress([0; 6]), false)
                }
                Lookup::Waiting => (next_hop, EthernetAddress([0; 6]), false),
            }
        })
    }

    /// Sends `l4`, a whole transport datagram (checksummed), as IPv4
    /// fragments of at most `mtu` bytes (RFC 791 §3.2): every fragment
    /// but the last carries a multiple of 8 bytes, all share one
    /// identification, none has DF. For datagrams the MTU cannot carry
    /// whole (an echo reply to a large ping); the bytes are copied, so
    /// this is no path for bulk data. A next hop not yet resolved drops
    /// the datagram (its fragments would not fit the ARP queue).
    pub(crate) fn send_fragments(
        &mut self,
        src: Ipv4Address,
        dst: Ipv4Address,
        protocol: IpProtocol,
        l4: &[u8],
        mtu: usize,
        fields: IpFields,
    ) -> Result<(), SinkError> {
        let Some((_, dst_mac, resolved)) = self.next_hop(dst) else {
            self.stats.no_route += 1;
            return Ok(());
        };
        if !resolved {
            self.stats.arp_drops += 1;
            return Err(SinkError::Unresolved);
        }
        let per = (mtu.saturating_sub(IPV4_HEADER) / 8 * 8).max(8);
        if IPV4_HEADER + l4.len() > 65_535 {
            return Ok(());
        }
        let ident = *self.ident;
        *self.ident = self.ident.wrapping_add(1);
        let mut off = 0;
        for chunk in l4.chunks(per) {
            let more = off + chunk.len() < l4.len();
            self.buf.clear();
            self.buf.resize(ETH_HEADER + IPV4_HEADER + chunk.len(), 0);
            {
                let mut eth = EthernetFrame::new_unchecked(&mut self.buf[..]);
                EthernetRepr {
                    src_addr: self.iface.mac,
                    dst_addr: dst_mac,
                    ethertype: EtherType::Ipv4,
                    vlan_tci: None,
                }
                .emit(&mut eth);
                let mut ip = Ipv4Packet::new_unchecked(eth.payload_mut());
                Ipv4Repr {
                    src_addr: src,
                    dst_addr: dst,
                    next_header: protocol,
                    payload_len: chunk.len(),
                    hop_limit: fields.effective_ttl(),
                    ident,
                    dont_frag: false,
                }
                .emit(&mut ip, &ChecksumCaps::default());
                ip.set_dscp_ecn(fields.tos >> 2, fields.tos & 3);
                ip.set_flags_and_offset(false, more, off as u16);
                ip.fill_checksum();
                if let Some(p) = ip.payload_mut().get_mut(..chunk.len()) {
                    p.copy_from_slice(chunk);
                }
            }
            let buf = core::mem::take(self.buf);
            let r = self.transmit(&buf, &[], TxOffload::default(), fields.priority);
            *self.buf = buf;
            r?;
            off += chunk.len();
        }
        self.stats.tx_fragmented += 1;
        Ok(())
    }

    /// Sends an ICMP message (checksummed here; ICMP is never offloaded).
    pub(crate) fn send_icmp(
        &mut self,
        src: Ipv4Address,
        dst: Ipv4Address,
        msg: &Icmpv4Repr<'_>,
    ) -> Result<(), SinkError> {
        self.send_ipv4(
            src,
            dst,
            IpProtocol::Icmp,
            msg.buffer_len(),
            |buf| {
                msg.emit(
                    &mut Icmpv4Packet::new_unchecked(buf),
                    &ChecksumCaps::default(),
                )
            },
            &[],
            0,
            None,
            None,
            IpFields::DEFAULT,
        )
    }

    fn put_u16(&mut self, at: usize, v: u16) {
        if let Some(b) = self.buf.get_mut(at..at + 2) {
            b.copy_from_slice(&v.to_be_bytes());
        }
    }

    /// Sends the frames that waited for ARP and can go now.
    pub(crate) fn flush_arp_queue(&mut self) {
        let mac = self.iface.mac;
        let dev = &mut *self.dev;
        let stats = &mut *self.stats;
        self.arp.flush(self.now, |dst, frame, priority| {
            if let Some(d) = frame.get_mut(0..6) {
                d.copy_from_slice(dst.as_bytes());
            }
            if let Some(s) = frame.get_mut(6..12) {
                s.copy_from_slice(mac.as_bytes());
            }
            // Linearized and checksummed when it was queued; its socket's
            // priority travels with it.
            let f = TxFrame {
                header: frame,
                payload: &[],
                offload: TxOffload::default(),
                priority,
            };
            if dev.transmit(&f).is_ok() {
                stats.tx_frames += 1;
                stats.tx_bytes += frame.len() as u64;
                true
            } else {
                stats.tx_busy += 1;
                false
            }
        });
    }
}

impl<D: Device> SegmentSink for Egress<'_, D> {
    fn send(&mut self, seg: &Segment<'_>) -> Result<(), SinkError> {
        let repr = &seg.repr;
        let l4_len = repr.header_len();
        self.send_ipv4(
            seg.local.addr,
            seg.remote.addr,
            IpProtocol::Tcp,
            l4_len,
            |buf| {
                let mut pkt = TcpPacket::new_unchecked(buf);
                repr.emit_header(&mut pkt, seg.payload_len);
            },
            seg.refs,
            seg.payload_len,
            Some(16),
            seg.gso_size,
            seg.ip,
        )
    }
}
