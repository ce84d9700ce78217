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
    /// IPv4 fragments received (for us; each goes to reassembly).
    pub rx_fragments: u64,
    /// Datagrams reassembled from fragments and delivered.
    pub reasm_ok: u64,
    /// Datagrams whose reassembly timed out (their fragments dropped).
    pub reasm_timeouts: u64,
    /// Datagrams dropped whole because a fragment overlapped another
    /// partly (RFC 5722's rule, Linux's since 2018).
    pub reasm_overlaps: u64,
    /// Datagrams dropped to stay within the reassembly budget (bytes,
    /// datagrams, or holes in one datagram).
    pub reasm_over_budget: u64,
    /// Fragments refused: a tiny first TCP fragment or one at offset 8
    /// (RFC 1858), a length not a multiple of 8, past 65,535 bytes, or
    /// contradicting the datagram's length (which drops the datagram too).
    pub reasm_invalid: u64,
    /// ICMP time exceeded (reassembly) messages sent.
    pub icmp_time_exceeded_tx: u64,
    /// Fragmentation-needed messages that lowered a path MTU (RFC 1191).
    pub pmtu_lowered: u64,
    /// Fragmentation-needed messages ignored: quoting no connection of
    /// ours, a sequence number outside what is in flight (RFC 5927), or an
    /// MTU no lower than the path's.
    pub pmtu_ignored: u64,
    /// Learnt path MTUs that expired (the larger MTU is tried again).
    pub pmtu_expired: u64,
    /// Datagrams sent as fragments (too large for the MTU, no DF).
    pub tx_fragmented: u64,
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
    /// TCP connection attempts (SYN-SENT) ended by an ICMP error, and
    /// handshakes of ours (SYN-RECEIVED) dropped by one (RFC 1122
    /// §4.2.3.9, as Linux's `tcp_v4_err`).
    pub tcp_icmp_aborts: u64,
    /// ICMP errors quoting a TCP segment no connection has outstanding
    /// (RFC 5927 §4.1: ports or sequence number do not match; Linux's
    /// `OutOfWindowIcmps`): ignored.
    pub tcp_icmp_out_of_window: u64,
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
    /// SYNs dropped (SYN queue full without cookies, socket table full
    /// without cookies, or accept queue full).
    pub tcp_syn_drops: u64,
    /// SYNs and cookie ACKs dropped because the listener's accept queue
    /// was full (Linux's `ListenOverflows`).
    pub tcp_listen_overflows: u64,
    /// SYN-ACKs sent with a SYN cookie instead of a connection (Linux's
    /// `SyncookiesSent`).
    pub tcp_syncookies_sent: u64,
    /// ACKs that carried a valid cookie (Linux's `SyncookiesRecv`).
    pub tcp_syncookies_recv: u64,
    /// ACKs to a listener that had sent cookies lately whose cookie did not
    /// check (forged, or older than the cookie's two minutes; Linux's
    /// `SyncookiesFailed`): answered with a RST.
    pub tcp_syncookies_failed: u64,
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

/// What the stack's TCP connections hold in memory now: a gauge, unlike
/// [`StackStats`] (what [`Stack::tcp_memory`](crate::Stack::tcp_memory)
/// reports, for `softoe stat`). Storage is a connection's receive ring
/// ([`TcpConfig::rx_buffer`](crate::TcpConfig::rx_buffer)), send queue,
/// out-of-order and SACK ranges and transmit log; its control block is
/// the rest of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TcpMemory {
    /// Connections (TCP sockets other than listeners).
    pub connections: usize,
    /// Of those, connections in TIME-WAIT.
    pub time_wait: usize,
    /// Bytes of storage the connections hold.
    pub held: usize,
    /// Storages kept for the next connections to reuse, left by closed
    /// connections and by those that entered TIME-WAIT (at most
    /// [`StackConfig::keep_closed`](crate::StackConfig::keep_closed)).
    pub kept: usize,
    /// Bytes of the kept storages (their receive rings together at most
    /// [`StackConfig::keep_closed_bytes`](crate::StackConfig::keep_closed_bytes)).
    pub kept_bytes: usize,
    /// Bytes of control blocks: the connections' and those kept for
    /// reuse (at most `keep_closed`).
    pub control: usize,
}
