//! Stack-wide counters, for `softoe stat` and for tests that check what
//! happened to every frame.

/// Counters kept by a [`Stack`](crate::Stack). All monotonic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StackStats {
    /// Frames received from the port.
    pub rx_frames: u64,
    /// Bytes received from the port.
    pub rx_bytes: u64,
    /// Received frames that were receive-coalesced (GRO) super-frames.
    pub rx_coalesced: u64,
    /// Received frames the port had checksum-verified.
    pub rx_csum_offloaded: u64,
    /// Frames handed to the port.
    pub tx_frames: u64,
    /// Bytes handed to the port.
    pub tx_bytes: u64,
    /// TCP super-segments handed to the port for segmentation (TSO).
    pub tx_tso_frames: u64,
    /// Frames whose transport checksum was left to the port.
    pub tx_csum_offloaded: u64,
    /// Times the port refused a frame (busy).
    pub tx_busy: u64,
    /// Frames dropped as malformed (any layer), checksum failures included.
    pub rx_malformed: u64,
    /// Frames dropped for a bad transport checksum.
    pub rx_bad_checksum: u64,
    /// Frames not for us (other MAC or IP, VLAN-tagged, unknown EtherType).
    pub rx_not_for_us: u64,
    /// IPv4 fragments (not reassembled; dropped).
    pub rx_fragments: u64,
    /// ARP requests and replies received.
    pub arp_rx: u64,
    /// ARP requests sent.
    pub arp_requests: u64,
    /// Frames dropped while waiting for ARP (queue full, or resolution failed).
    pub arp_drops: u64,
    /// ICMP echo requests answered.
    pub icmp_echo: u64,
    /// ICMP errors received.
    pub icmp_errors_rx: u64,
    /// ICMP port-unreachable messages sent.
    pub icmp_unreachable_tx: u64,
    /// TCP resets sent for segments no connection wanted.
    pub tcp_rst_tx: u64,
    /// Connections that timed out (retransmissions, zero-window probes of
    /// an orphan, keepalive or user timeout), as Linux's
    /// `TCPAbortOnTimeout`.
    pub tcp_timeouts: u64,
    /// TCP retransmissions sent, every connection's (closed ones too), as
    /// Linux's `RetransSegs` (a TSO frame resent counts once).
    pub tcp_retransmits: u64,
    /// SYNs dropped (SYN queue full or socket table full).
    pub tcp_syn_drops: u64,
    /// Connections accepted into the accept queue.
    pub tcp_passive_opens: u64,
    /// Connections started by `connect`.
    pub tcp_active_opens: u64,
    /// UDP datagrams delivered to sockets.
    pub udp_rx: u64,
    /// UDP datagrams sent.
    pub udp_tx: u64,
    /// UDP datagrams dropped (no room in the socket).
    pub udp_drops: u64,
    /// Frames with no route to their destination (dropped).
    pub no_route: u64,
    /// Times the runtime said the path changed ([`Stack::path_changed`]:
    /// a bonded member left, or a bonded peer's did).
    ///
    /// [`Stack::path_changed`]: crate::Stack::path_changed
    pub path_changes: u64,
    /// Tail-loss probes sent at once for it.
    pub path_probes: u64,
}
