//! The senders' loss-recovery counters: Linux's from its namespace's
//! `/proc/net`, softoe's from the engine's snapshots of the connection.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use serde::Serialize;
use softoe_engine::ConnStat;

/// The sender's loss-recovery counters over one transfer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct SenderCounts {
    /// Segments retransmitted (Linux: `RetransSegs`).
    pub retrans: u64,
    /// Retransmission timeouts (Linux: `TCPTimeouts`; softoe: `rto_count`).
    pub timeouts: u64,
    /// Tail-loss probes (Linux: `TCPLossProbes`).
    pub tlp_probes: u64,
    /// Retransmissions lost again (Linux: `TCPLostRetransmit`).
    pub lost_retrans: u64,
    /// D-SACKs received (Linux: `TCPDSACKRecv`).
    pub dsacks: u64,
}

impl SenderCounts {
    /// The counts between `before` and these.
    pub(super) fn since(self, before: SenderCounts) -> SenderCounts {
        SenderCounts {
            retrans: self.retrans.saturating_sub(before.retrans),
            timeouts: self.timeouts.saturating_sub(before.timeouts),
            tlp_probes: self.tlp_probes.saturating_sub(before.tlp_probes),
            lost_retrans: self.lost_retrans.saturating_sub(before.lost_retrans),
            dsacks: self.dsacks.saturating_sub(before.dsacks),
        }
    }

    /// softoe's counts for one connection.
    pub(super) fn of(c: &ConnStat) -> SenderCounts {
        SenderCounts {
            retrans: c.retrans,
            timeouts: u64::from(c.rto_count),
            tlp_probes: u64::from(c.tlp_probes),
            lost_retrans: u64::from(c.lost_retrans),
            dsacks: u64::from(c.dsacks),
        }
    }

    /// Linux's counts from the text of `/proc/net/snmp` and
    /// `/proc/net/netstat` (`RetransSegs` must be there; the others are 0
    /// when a kernel lacks them).
    pub(super) fn parse(snmp: &str, netstat: &str) -> Result<SenderCounts> {
        let ext = |name| crate::bench::scale::snmp_field(netstat, "TcpExt", name).unwrap_or(0);
        Ok(SenderCounts {
            retrans: crate::bench::scale::snmp_field(snmp, "Tcp", "RetransSegs")
                .ok_or_else(|| anyhow!("no Tcp RetransSegs in /proc/net/snmp"))?,
            timeouts: ext("TCPTimeouts"),
            tlp_probes: ext("TCPLossProbes"),
            lost_retrans: ext("TCPLostRetransmit"),
            dsacks: ext("TCPDSACKRecv"),
        })
    }
}

/// The calling thread's namespace's TCP counters (`thread-self`: a
/// namespace thread's own view of `/proc/net`).
pub(super) fn linux_counts() -> Result<SenderCounts> {
    let read = |f: &str| {
        let path = format!("/proc/thread-self/net/{f}");
        std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))
    };
    SenderCounts::parse(&read("snmp")?, &read("netstat")?)
}

/// Follows softoe's side of one connection in the engine's snapshots.
pub(super) struct Watch {
    pub(super) done: Arc<AtomicBool>,
    pub(super) thread: std::thread::JoinHandle<Option<ConnStat>>,
}

impl Watch {
    /// Starts watching the engine at `control` for the connection to local
    /// port `port` from the address `client` will tell.
    pub(super) fn start(control: PathBuf, port: u16, client: mpsc::Receiver<SocketAddr>) -> Watch {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let thread = std::thread::spawn(move || follow(&control, port, &client, &d));
        Watch { done, thread }
    }

    /// The connection as last seen, once it has settled (see [`follow`]).
    pub(super) fn finish(self) -> Option<ConnStat> {
        self.done.store(true, Ordering::Relaxed);
        self.thread.join().ok().flatten()
    }
}

/// Polls the snapshots every 50 ms for the connection to local port `port`
/// from the address `client` tells, keeping the last sight of it; once
/// `done`, waits until it has settled (TIME-WAIT, or gone: reset) for up
/// to 3 s.
pub(super) fn follow(
    control: &Path,
    port: u16,
    client: &mpsc::Receiver<SocketAddr>,
    done: &AtomicBool,
) -> Option<ConnStat> {
    let remote = loop {
        match client.recv_timeout(Duration::from_millis(50)) {
            Ok(a) => break a.to_string(),
            Err(mpsc::RecvTimeoutError::Timeout) if !done.load(Ordering::Relaxed) => {}
            Err(_) => return None,
        }
    };
    let local = format!(":{port}");
    let mut last: Option<ConnStat> = None;
    let mut done_at: Option<Instant> = None;
    loop {
        // Whether the transfer was over before this snapshot was asked for.
        let finished = done.load(Ordering::Relaxed);
        if let Ok(snap) = softoe_engine::control::query(control) {
            let c = snap
                .connections
                .into_iter()
                .find(|c| c.remote == remote && c.local.ends_with(&local));
            match c {
                Some(c) => {
                    let settled = c.state == "TIME-WAIT" || c.state == "CLOSED";
                    last = Some(c);
                    if finished && settled {
                        return last;
                    }
                }
                None if finished && last.is_some() => return last,
                None => {}
            }
        }
        if finished && done_at.get_or_insert_with(Instant::now).elapsed() > Duration::from_secs(3) {
            return last;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn linux_counters_are_read_from_snmp_and_netstat() {
        let snmp = "Tcp: RtoAlgorithm RtoMin RetransSegs InErrs\nTcp: 1 200 17 0\n";
        let netstat = "TcpExt: SyncookiesSent TCPTimeouts TCPLossProbes TCPLostRetransmit TCPDSACKRecv\n\
                       TcpExt: 0 3 5 2 4\n";
        let c = SenderCounts::parse(snmp, netstat).unwrap();
        assert_eq!(
            c,
            SenderCounts {
                retrans: 17,
                timeouts: 3,
                tlp_probes: 5,
                lost_retrans: 2,
                dsacks: 4
            }
        );
        let later = SenderCounts { retrans: 20, ..c };
        assert_eq!(later.since(c).retrans, 3);
        assert!(SenderCounts::parse("Ip: 1\nIp: 2\n", netstat).is_err());
        // The namespace this test runs in has them (any Linux does).
        let here = linux_counts().unwrap();
        assert!(here.retrans < u64::MAX);
    }
}
