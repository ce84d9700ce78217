//! The control socket: `softoe stat` asks, the engine answers with a JSON
//! snapshot of every connection (the fields of `ss -ti`) and its counters.
//!
//! Any user may ask, as any user may run `ss`: every connection and
//! listener is shown with its addresses, state and TCP figures, but of the
//! host interface's sessions (the programs, their pids and users) a user
//! other than root sees only its own ([`for_user`]). The asker is known by
//! the socket's peer credentials; answers to users other than root are
//! reused for 100 ms, so asking in a loop costs the engine little.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use softoe_stack::{Stack, State, TcpInfo};

// The counters live in their own module (`crate::counters`); named here
// too, as they always were.
pub use crate::counters::{EngineCounters, StageCounters, StageStat, WakeStat};

/// One connection, as `softoe stat` shows it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ConnStat {
    /// Connection state.
    pub state: String,
    /// Local address.
    pub local: String,
    /// Remote address.
    pub remote: String,
    /// Congestion window, bytes.
    pub cwnd: u32,
    /// Slow-start threshold, bytes.
    pub ssthresh: u32,
    /// Smoothed RTT, µs.
    pub srtt_us: f64,
    /// RTT variation, µs.
    pub rttvar_us: f64,
    /// Retransmission timeout, ms.
    pub rto_ms: f64,
    /// MSS we send.
    pub snd_mss: u32,
    /// The path MTU its segments are sized for (`ss -ti`'s `pmtu`: the
    /// device's, or less where path-MTU discovery learnt so; 0 from an
    /// engine that does not say).
    #[serde(default)]
    pub pmtu: u32,
    /// Segments retransmitted.
    pub retrans: u64,
    /// RTO expirations.
    pub rto_count: u32,
    /// Loss recoveries (fast retransmits).
    pub fast_retrans: u32,
    /// Payload bytes retransmitted.
    #[serde(default)]
    pub bytes_retrans: u64,
    /// Retransmissions found lost and sent again (Linux:
    /// `TCPLostRetransmit`).
    #[serde(default)]
    pub lost_retrans: u32,
    /// Tail-loss probes sent (RFC 8985 §7; Linux: `TCPLossProbes`).
    #[serde(default)]
    pub tlp_probes: u32,
    /// Tail-loss probes whose answer revealed a loss that recovery then
    /// repaired (Linux: `TCPLossProbeRecovery`).
    #[serde(default)]
    pub tlp_recoveries: u32,
    /// Holes the RACK reordering timer found lost (RFC 8985 §6.2).
    #[serde(default)]
    pub reorder_timeouts: u32,
    /// D-SACK blocks received: the peer got a segment twice (Linux:
    /// `tcpi_dsack_dups`).
    #[serde(default)]
    pub dsacks: u32,
    /// Retransmissions D-SACK showed were not needed.
    #[serde(default)]
    pub spurious_retrans: u32,
    /// Congestion responses undone because every retransmission of the
    /// episode proved spurious.
    #[serde(default)]
    pub undos: u32,
    /// Reordering events seen (Linux: `tcpi_reord_seen`).
    #[serde(default)]
    pub reord_seen: u32,
    /// The largest reordering seen, in segments (Linux: `tcpi_reordering`;
    /// 3 until more is seen, 0 from an engine that does not say).
    #[serde(default)]
    pub reordering: u32,
    /// The RACK reordering window in force, µs.
    #[serde(default)]
    pub reo_wnd_us: f64,
    /// Bytes acknowledged by the peer.
    pub bytes_acked: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Of those, bytes the stack wrote straight into the reading program's
    /// ring (no copy through its own buffer).
    #[serde(default)]
    pub bytes_sunk: u64,
    /// Bytes queued to send.
    pub send_q: u32,
    /// Bytes received and unread.
    pub recv_q: u32,
    /// Delivery rate, bits per second.
    pub delivery_rate_bps: u64,
    /// Bytes in flight.
    pub in_flight: u32,
    /// Peer's window.
    pub snd_wnd: u32,
    /// Our window.
    pub rcv_wnd: u32,
    /// Options in use: "ts", "sack", "wscale:a,b".
    pub options: String,
    /// The socket's `SO_PRIORITY`: the class its frames go to the port
    /// with (a bonded port's `prioritized` policy reads it). 0 from an
    /// engine that does not say.
    #[serde(default)]
    pub priority: u8,
}

/// One listening socket, as `ss -lt` shows it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ListenerStat {
    /// Local address (`0.0.0.0` for any of ours).
    pub local: String,
    /// It set `SO_REUSEPORT`: a member of a group of listeners on this
    /// address that share its new connections.
    #[serde(default)]
    pub reuseport: bool,
    /// Connections waiting for `accept` (`ss`'s Recv-Q).
    pub queued: usize,
    /// Handshakes under way (SYN-RECEIVED).
    pub syn_received: usize,
    /// Most connections that may wait (`ss`'s Send-Q).
    pub backlog: usize,
    /// SYNs dropped: a full SYN queue with cookies off, or a full accept
    /// queue (with cookies, a full SYN queue drops nothing).
    pub syn_drops: u64,
}

impl From<&TcpInfo> for ConnStat {
    fn from(i: &TcpInfo) -> ConnStat {
        let mut opts = Vec::new();
        if i.timestamps {
            opts.push("ts".to_string());
        }
        if i.sack {
            opts.push("sack".to_string());
        }
        if let Some((a, b)) = i.wscale {
            opts.push(format!("wscale:{b},{a}"));
        }
        ConnStat {
            state: i.state.name().to_string(),
            local: i.local.to_string(),
            remote: i.remote.to_string(),
            cwnd: i.cwnd,
            ssthresh: i.ssthresh,
            srtt_us: i.srtt.as_secs_f64() * 1e6,
            rttvar_us: i.rttvar.as_secs_f64() * 1e6,
            rto_ms: i.rto.as_secs_f64() * 1e3,
            snd_mss: i.snd_mss,
            pmtu: i.pmtu,
            retrans: i.retransmits,
            rto_count: i.rto_count,
            fast_retrans: i.fast_retransmits,
            bytes_retrans: i.bytes_retrans,
            lost_retrans: i.lost_retransmits,
            tlp_probes: i.tlp_probes,
            tlp_recoveries: i.tlp_recoveries,
            reorder_timeouts: i.reorder_timeouts,
            dsacks: i.dsacks,
            spurious_retrans: i.spurious_retransmits,
            undos: i.undos,
            reord_seen: i.reord_seen,
            reordering: i.reordering,
            reo_wnd_us: i.reo_wnd.as_secs_f64() * 1e6,
            bytes_acked: i.bytes_acked,
            bytes_received: i.bytes_received,
            bytes_sunk: i.bytes_sunk,
            send_q: i.send_queue,
            recv_q: i.recv_queue,
            delivery_rate_bps: i.delivery_rate.saturating_mul(8),
            in_flight: i.bytes_in_flight,
            snd_wnd: i.snd_wnd,
            rcv_wnd: i.rcv_wnd,
            options: opts.join(" "),
            // Not in `TcpInfo`: [`Snapshot::take`] asks the stack.
            priority: 0,
        }
    }
}

/// Stack-wide counters, as `softoe stat` shows them.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct StackCounters {
    /// Frames the stack received.
    pub rx_frames: u64,
    /// Frames the stack sent.
    pub tx_frames: u64,
    /// Received coalesced (GRO) frames.
    pub rx_coalesced: u64,
    /// Received frames the port vouched for (checksum offload on receive).
    pub rx_csum_offloaded: u64,
    /// TSO super-segments sent.
    pub tx_tso_frames: u64,
    /// Frames sent with the checksum left to the port.
    pub tx_csum_offloaded: u64,
    /// Malformed frames dropped.
    pub rx_malformed: u64,
    /// Bad checksums dropped.
    pub rx_bad_checksum: u64,
    /// Frames not for us.
    pub rx_not_for_us: u64,
    /// Resets sent for unknown connections.
    pub tcp_rst_tx: u64,
    /// Connections that timed out: retransmissions, keepalive, user
    /// timeout, or an orphan's zero-window probes ran out.
    #[serde(default)]
    pub tcp_timeouts: u64,
    /// TCP retransmissions sent, closed connections' included (Linux's
    /// `RetransSegs`).
    #[serde(default)]
    pub tcp_retransmits: u64,
    /// ICMP echo requests answered.
    pub icmp_echo: u64,
    /// UDP datagrams delivered to a socket's queue.
    #[serde(default)]
    pub udp_rx: u64,
    /// UDP datagrams dropped because their socket's queue was full (the
    /// program did not read fast enough: Linux's `RcvbufErrors`).
    #[serde(default)]
    pub udp_drops: u64,
    /// IPv4 fragments received for us.
    #[serde(default)]
    pub rx_fragments: u64,
    /// Datagrams reassembled from them (Linux's `ReasmOKs`).
    #[serde(default)]
    pub reasm_ok: u64,
    /// Datagrams whose reassembly timed out (`ReasmTimeout`).
    #[serde(default)]
    pub reasm_timeouts: u64,
    /// Datagrams dropped for an overlapping fragment (`ReasmOverlaps`).
    #[serde(default)]
    pub reasm_overlaps: u64,
    /// Datagrams dropped to keep reassembly within its memory bounds.
    #[serde(default)]
    pub reasm_over_budget: u64,
    /// Fragments refused as malformed or as RFC 1858 attacks.
    #[serde(default)]
    pub reasm_invalid: u64,
    /// Fragmentation-needed messages that lowered a path MTU.
    #[serde(default)]
    pub pmtu_lowered: u64,
    /// Fragmentation-needed messages ignored (naming nothing in flight,
    /// or no lower MTU).
    #[serde(default)]
    pub pmtu_ignored: u64,
    /// Learnt path MTUs that expired.
    #[serde(default)]
    pub pmtu_expired: u64,
    /// SYNs dropped: a full SYN queue without cookies, or a full accept
    /// queue.
    #[serde(default)]
    pub tcp_syn_drops: u64,
    /// SYNs and cookie ACKs dropped for a full accept queue (Linux's
    /// `ListenOverflows`).
    #[serde(default)]
    pub tcp_listen_overflows: u64,
    /// SYN cookies sent (Linux's `SyncookiesSent`).
    #[serde(default)]
    pub tcp_syncookies_sent: u64,
    /// ACKs whose cookie checked (Linux's `SyncookiesRecv`).
    #[serde(default)]
    pub tcp_syncookies_recv: u64,
    /// ACKs whose cookie did not (Linux's `SyncookiesFailed`).
    #[serde(default)]
    pub tcp_syncookies_failed: u64,
    /// Connection attempts ended (and handshakes of ours dropped) by an
    /// ICMP error.
    #[serde(default)]
    pub tcp_icmp_aborts: u64,
}

/// The whole answer of `softoe stat`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Snapshot {
    /// The port.
    pub port: String,
    /// Engine counters.
    pub engine: EngineCounters,
    /// Stack counters.
    pub stack: StackCounters,
    /// Live TCP connections (listeners excluded).
    pub connections: Vec<ConnStat>,
    /// Listening sockets (as `ss -lt`).
    #[serde(default)]
    pub listeners: Vec<ListenerStat>,
    /// Attached host programs.
    #[serde(default)]
    pub sessions: Vec<crate::host::SessionStat>,
    /// Frames the kernel dropped before the engine could read them (the
    /// port's queue full), where the port counts them.
    #[serde(default)]
    pub port_drops: Option<u64>,
    /// The faults the port injected so far, when it is a
    /// [`FaultPort`](crate::FaultPort) (`None` for a plain port, and from
    /// an engine too old to say).
    #[serde(default)]
    pub faults: Option<crate::FaultCounters>,
    /// The bond, when the port is a [`BondPort`](crate::BondPort).
    #[serde(default)]
    pub bond: Option<BondStat>,
}

/// A bonded port in `softoe stat`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct BondStat {
    /// The scheduling policy.
    pub policy: String,
    /// Our ARP+ sequence number.
    pub seq: u16,
    /// Each member.
    pub members: Vec<BondMemberStat>,
    /// The bonding peers (the ARP+ table).
    pub peers: Vec<BondPeerStat>,
    /// Peers on plain ARP, and the member each is on.
    pub plain: Vec<(String, usize)>,
    /// ARP+ frames taken.
    pub arpp_in: u64,
    /// ARP+ frames that did not parse.
    pub arpp_malformed: u64,
    /// Frames striped to bonding peers.
    pub striped: u64,
    /// Frames to plain-ARP peers.
    pub plain_frames: u64,
    /// Plain peers moved off a member that left.
    pub plain_moved: u64,
    /// Changes of our member set announced.
    pub changes: u64,
    /// Paths we sent on that went away (our member or a peer's left); each
    /// made every connection probe at once.
    pub path_losses: u64,
}

/// One member of a bond.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct BondMemberStat {
    /// The device.
    pub name: String,
    /// Its MAC.
    pub mac: String,
    /// `up`, `silent` or `no-carrier`.
    pub state: String,
    /// Dedicated to real-time traffic.
    pub realtime: bool,
    /// Configured rate in bit/s (0: unknown).
    pub rate_bps: u64,
    /// The bond's estimate of its transmit queue, in microseconds at its rate.
    pub queue_us: u64,
    /// Milliseconds since it last heard a frame.
    pub heard_ms_ago: u64,
    /// Frames and bytes received, sent (the stack's) and sent (the bond's own).
    pub frames_in: u64,
    /// Bytes received.
    pub bytes_in: u64,
    /// The stack's frames sent on it.
    pub frames_out: u64,
    /// Their bytes.
    pub bytes_out: u64,
    /// ARP+ and gratuitous ARP frames sent on it.
    pub control_out: u64,
    /// Received copies dropped: our own frames flooded back, broadcasts
    /// taken on another member, unicast for another member.
    pub echoes: u64,
    /// Broadcast copies dropped.
    pub duplicates: u64,
    /// Unicast for another member dropped.
    pub not_ours: u64,
    /// Times it left the bond.
    pub left: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Plain-ARP peers on it.
    pub plain_peers: usize,
}

/// A bonding peer in the ARP+ table.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct BondPeerStat {
    /// Its address.
    pub ip: String,
    /// Its sequence number.
    pub seq: u16,
    /// Its members (`(rt)` after a real-time one, `(dead)` after one it
    /// took out).
    pub members: Vec<String>,
    /// Milliseconds since it was last heard.
    pub heard_ms_ago: u64,
}

impl BondStat {
    /// The state of `bond` at `now`; `names` and `rx_errors` per member.
    pub fn of(
        bond: &softoe_bond::Bond,
        now: softoe_bond::Instant,
        names: &[String],
        rx_errors: &[u64],
    ) -> BondStat {
        let ms = |t: softoe_bond::Instant| now.saturating_duration_since(t).as_millis() as u64;
        let members = bond
            .members(now)
            .enumerate()
            .map(|(i, m)| BondMemberStat {
                name: names.get(i).cloned().unwrap_or_default(),
                mac: m.mac.to_string(),
                state: m.state.name().to_string(),
                realtime: m.realtime,
                rate_bps: m.rate_bps,
                queue_us: m.backlog.as_micros() as u64,
                heard_ms_ago: ms(m.last_heard),
                frames_in: m.stats.frames_in,
                bytes_in: m.stats.bytes_in,
                frames_out: m.stats.frames_out,
                bytes_out: m.stats.bytes_out,
                control_out: m.stats.control_out,
                echoes: m.stats.echoes,
                duplicates: m.stats.duplicates,
                not_ours: m.stats.not_ours,
                left: m.stats.left,
                rx_errors: rx_errors.get(i).copied().unwrap_or(0),
                plain_peers: m.plain_peers,
            })
            .collect();
        let peers = bond
            .table()
            .iter()
            .map(|(ip, e)| BondPeerStat {
                ip: ip.to_string(),
                seq: e.seq(),
                members: e
                    .members()
                    .as_slice()
                    .iter()
                    .enumerate()
                    .map(|(i, m)| {
                        let mut s = m.to_string();
                        if e.members().is_realtime(i) {
                            s.push_str("(rt)");
                        }
                        if !e.is_alive(i) {
                            s.push_str("(dead)");
                        }
                        s
                    })
                    .collect(),
                heard_ms_ago: ms(e.last_heard()),
            })
            .collect();
        let s = bond.stats();
        BondStat {
            policy: bond.policy().name().to_string(),
            seq: bond.seq(),
            members,
            peers,
            plain: bond
                .plain_peers()
                .map(|(ip, m)| (ip.to_string(), m))
                .collect(),
            arpp_in: s.arpp_in,
            arpp_malformed: s.arpp_malformed,
            striped: s.striped,
            plain_frames: s.plain,
            plain_moved: s.plain_moved,
            changes: s.changes,
            path_losses: s.path_losses,
        }
    }
}

impl Snapshot {
    /// A snapshot of `stack`.
    pub fn take(stack: &Stack, engine: &EngineCounters, port: &str) -> Snapshot {
        let s = stack.stats();
        let connections = stack
            .sockets()
            .filter_map(|h| Some((h, stack.tcp_info(h).ok()?)))
            .filter(|(_, i)| i.state != State::Listen)
            .map(|(h, i)| ConnStat {
                priority: stack.priority(h).unwrap_or(0),
                ..ConnStat::from(&i)
            })
            .collect();
        let listeners = stack
            .sockets()
            .filter_map(|h| stack.tcp_listener_info(h).ok())
            .map(|l| ListenerStat {
                local: l.local.to_string(),
                reuseport: l.reuseport,
                queued: l.queued,
                syn_received: l.syn_received,
                backlog: l.backlog,
                syn_drops: l.syn_drops,
            })
            .collect();
        Snapshot {
            port: port.to_string(),
            engine: *engine,
            stack: StackCounters {
                rx_frames: s.rx_frames,
                tx_frames: s.tx_frames,
                rx_coalesced: s.rx_coalesced,
                rx_csum_offloaded: s.rx_csum_offloaded,
                tx_tso_frames: s.tx_tso_frames,
                tx_csum_offloaded: s.tx_csum_offloaded,
                rx_malformed: s.rx_malformed,
                rx_bad_checksum: s.rx_bad_checksum,
                rx_not_for_us: s.rx_not_for_us,
                tcp_rst_tx: s.tcp_rst_tx,
                tcp_timeouts: s.tcp_timeouts,
                tcp_retransmits: s.tcp_retransmits,
                icmp_echo: s.icmp_echo,
                udp_rx: s.udp_rx,
                udp_drops: s.udp_drops,
                rx_fragments: s.rx_fragments,
                reasm_ok: s.reasm_ok,
                reasm_timeouts: s.reasm_timeouts,
                reasm_overlaps: s.reasm_overlaps,
                reasm_over_budget: s.reasm_over_budget,
                reasm_invalid: s.reasm_invalid,
                pmtu_lowered: s.pmtu_lowered,
                pmtu_ignored: s.pmtu_ignored,
                pmtu_expired: s.pmtu_expired,
                tcp_syn_drops: s.tcp_syn_drops,
                tcp_listen_overflows: s.tcp_listen_overflows,
                tcp_syncookies_sent: s.tcp_syncookies_sent,
                tcp_syncookies_recv: s.tcp_syncookies_recv,
                tcp_syncookies_failed: s.tcp_syncookies_failed,
                tcp_icmp_aborts: s.tcp_icmp_aborts,
            },
            connections,
            listeners,
            sessions: Vec::new(),
            port_drops: None,
            faults: None,
            bond: None,
        }
    }
}

/// The listening control socket.
#[derive(Debug)]
pub struct Control {
    listener: UnixListener,
    /// The socket file, removed at drop while still ours.
    _path: crate::sockpath::Bound,
    sessions: Option<crate::host::SessionStats>,
    /// What users other than root were last answered, by uid, and when:
    /// they get the same bytes for [`SHARED_FOR`], so that no user can
    /// make the engine build snapshots as fast as it can ask.
    answered: HashMap<u32, (Instant, Vec<u8>)>,
}

/// How long a snapshot answered to a user other than root is reused.
const SHARED_FOR: Duration = Duration::from_millis(100);
/// Most users whose answers are kept (a table that cannot grow without
/// bound; past it, answers are built afresh).
const MAX_ANSWERED: usize = 64;

/// What user `uid` is shown of `snap`: root everything; another user
/// every connection and listener with their addresses and state, and the
/// engine's counters (as `ss` shows any user every socket), but only its
/// own sessions (the programs it runs; others' are hidden, as `ss` hides
/// other users' processes).
pub fn for_user(snap: &Snapshot, uid: u32) -> Snapshot {
    let mut s = snap.clone();
    if uid != 0 {
        s.sessions.retain(|x| x.uid == uid);
    }
    s
}

impl Control {
    /// Binds `path`, for every user to ask (what each is shown:
    /// [`for_user`]): a dead engine's socket file there is replaced, a live
    /// engine's is an error (`AddrInUse`). It only answers questions: nothing
    /// sent to it changes the engine.
    pub fn bind(path: &Path) -> std::io::Result<Control> {
        crate::sockpath::claim(path, "control socket")?;
        let listener = UnixListener::bind(path)?;
        let bound = crate::sockpath::Bound::new(path);
        listener.set_nonblocking(true)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
        Ok(Control {
            listener,
            _path: bound,
            sessions: None,
            answered: HashMap::new(),
        })
    }

    /// Includes the host interface's sessions in every snapshot.
    pub fn watch_sessions(&mut self, s: crate::host::SessionStats) {
        self.sessions = Some(s);
    }

    /// The listening socket's descriptor (readable when a request waits).
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.listener.as_raw_fd()
    }

    /// Answers every waiting query (never blocks the engine for long);
    /// `drops` reads the port's drop counter (only when someone asks), and
    /// `faults` are the faults the port injected, if it injects any.
    pub fn serve(
        &mut self,
        stack: &Stack,
        engine: &EngineCounters,
        port: &str,
        dev: &mut dyn crate::Port,
    ) {
        // Built at most once per call, and only when someone asks.
        let mut snap: Option<Snapshot> = None;
        let now = Instant::now();
        self.answered
            .retain(|_, (t, _)| now.duration_since(*t) < SHARED_FOR);
        while let Ok((mut conn, _)) = self.listener.accept() {
            // Who asks, as the kernel says; unknown: shown what anyone is.
            let uid = crate::host::sys::peer_cred(&conn).map_or(u32::MAX, |c| c.1);
            let kept = (uid != 0)
                .then(|| self.answered.get(&uid).map(|(_, j)| j.clone()))
                .flatten();
            let json = match kept {
                Some(j) => j,
                None => {
                    let full = snap.get_or_insert_with(|| self.snapshot(stack, engine, port, dev));
                    let Ok(j) = serde_json::to_vec(&for_user(full, uid)) else {
                        continue;
                    };
                    if uid != 0 && self.answered.len() < MAX_ANSWERED {
                        self.answered.insert(uid, (now, j.clone()));
                    }
                    j
                }
            };
            let _ = conn.set_write_timeout(Some(Duration::from_millis(100)));
            let _ = conn.write_all(&json);
        }
    }

    /// Everything there is to show.
    fn snapshot(
        &self,
        stack: &Stack,
        engine: &EngineCounters,
        port: &str,
        dev: &mut dyn crate::Port,
    ) -> Snapshot {
        let mut snap = Snapshot::take(stack, engine, port);
        snap.port_drops = dev.dropped();
        snap.faults = dev.faults();
        snap.bond = dev.bond();
        if let Some(s) = self.sessions.as_ref().and_then(|s| s.lock().ok()) {
            snap.sessions = s.clone();
        }
        // The user each program runs as now (a server that drops
        // privileges after attaching), read only when someone asks.
        for s in snap.sessions.iter_mut().filter(|s| !s.dead) {
            if let Some(uid) = crate::cred::effective_uid(s.pid) {
                s.uid = uid;
            }
        }
        snap
    }
}

/// Asks the engine listening on `path` for a snapshot.
pub fn query(path: &Path) -> std::io::Result<Snapshot> {
    let mut s = UnixStream::connect(path)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    serde_json::from_slice(&buf).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Root sees every session; another user only its own, and every
    /// connection either way.
    #[test]
    fn a_user_sees_every_connection_and_only_its_own_sessions() {
        let session = |id, uid| crate::host::SessionStat {
            id,
            uid,
            ..Default::default()
        };
        let snap = Snapshot {
            connections: vec![ConnStat::default(), ConnStat::default()],
            sessions: vec![session(1, 0), session(2, 65534), session(3, 1000)],
            ..Snapshot::default()
        };
        assert_eq!(for_user(&snap, 0), snap);
        let theirs = for_user(&snap, 65534);
        assert_eq!(theirs.connections.len(), 2);
        assert_eq!(
            theirs.sessions.iter().map(|s| s.id).collect::<Vec<_>>(),
            [2]
        );
        assert!(for_user(&snap, 7).sessions.is_empty());
    }

    /// A snapshot from an engine older than the loss-recovery counters and
    /// the fault counts still parses (zeros and `None`); one that has them
    /// keeps them.
    #[test]
    fn older_snapshots_parse_and_new_fields_round_trip() {
        let old = serde_json::json!({
            "port": "tap softoe0",
            "engine": EngineCounters::default(),
            "stack": StackCounters::default(),
            "connections": [{
                "state": "ESTAB", "local": "10.7.0.1:9", "remote": "10.7.0.2:40000",
                "cwnd": 14480, "ssthresh": 4294967295u32, "srtt_us": 120.0, "rttvar_us": 30.0,
                "rto_ms": 201.0, "snd_mss": 1448, "retrans": 2, "rto_count": 0,
                "fast_retrans": 1, "bytes_acked": 1000, "bytes_received": 2000000,
                "send_q": 0, "recv_q": 5, "delivery_rate_bps": 2500000000u64,
                "in_flight": 2896, "snd_wnd": 65535, "rcv_wnd": 1048576,
                "options": "ts sack"
            }]
        });
        let mut snap: Snapshot = serde_json::from_value(old).unwrap();
        assert_eq!(snap.faults, None);
        let c = &mut snap.connections[0];
        assert_eq!(
            (c.retrans, c.tlp_probes, c.dsacks, c.reordering),
            (2, 0, 0, 0)
        );
        assert_eq!(c.reo_wnd_us, 0.0);
        c.tlp_probes = 3;
        c.reo_wnd_us = 250.0;
        snap.faults = Some(crate::FaultCounters {
            rx: crate::DirectionCounters {
                frames: 100,
                lost: 2,
                ..Default::default()
            },
            ..Default::default()
        });
        let back: Snapshot = serde_json::from_str(&serde_json::to_string(&snap).unwrap()).unwrap();
        assert_eq!(back, snap);
    }

    /// Engine counters from before the emulation knobs and stage timing
    /// parse (those read zero); new ones round-trip.
    #[test]
    fn engine_counters_without_emulation_fields_parse() {
        let old = serde_json::json!({
            "frames_in": 10, "frames_out": 12, "bytes_in": 1000, "bytes_out": 2000,
            "tx_busy": 0, "port_errors": 0, "turns": 50, "rx_batches": 5, "sleeps": 3,
            "idle_nanos": 7, "run_nanos": 99
        });
        let c: EngineCounters = serde_json::from_value(old).unwrap();
        assert_eq!((c.frames_in, c.run_nanos), (10, 99));
        assert_eq!((c.work_nanos, c.slowdown_nanos, c.ring_accesses), (0, 0, 0));
        assert_eq!(c.stages, StageCounters::default());
        // A stage from an engine that knows fewer of them.
        let s: StageCounters = serde_json::from_str(r#"{"rx": {"count": 2}}"#).unwrap();
        assert_eq!((s.rx.count, s.rx.nanos, s.tx.count), (2, 0, 0));
        let mut c = c;
        c.ring_accesses = 400;
        c.stages.cmd.add(1500, 64);
        c.stages.wake.by_timeout = 3;
        let back: EngineCounters =
            serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }
}
