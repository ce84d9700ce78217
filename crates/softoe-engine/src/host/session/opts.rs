//! Socket options (`SETOPT`) and `TCP_INFO` (`INFO`).

use softoe_abi::{
    CONGESTION_CUBIC, CONGESTION_RENO, RingSpan, SockOpt, TCPI_OPT_SACK, TCPI_OPT_TIMESTAMPS,
    TCPI_OPT_WSCALE, TcpInfoRecord, errno,
};
use softoe_stack::{Algorithm, Keepalive};

use super::command::apply_opts;
use super::region::record_bytes;
use super::translate::{handle_errno, linux_state, packed};
use super::{Ctx, Program, Result, SessionCore};

impl<P: Program> SessionCore<P> {
    /// `SETOPT`: recorded, and applied to the stack socket if there is one.
    pub(super) fn set_opt(
        &mut self,
        cx: &mut Ctx<'_>,
        sock: u32,
        opt: SockOpt,
        values: [u64; 5],
    ) -> Result<Option<i64>> {
        let s = self.sock(sock)?;
        let on = values[0] != 0;
        match opt {
            SockOpt::NoDelay => s.opts.nodelay = Some(on),
            SockOpt::KeepAlive => {
                let secs = |v: u64, d: std::time::Duration| {
                    if v == 0 {
                        d
                    } else {
                        std::time::Duration::from_secs(v)
                    }
                };
                let def = Keepalive::default();
                s.opts.keepalive = Some(on.then(|| Keepalive {
                    idle: secs(values[1], def.idle),
                    interval: secs(values[2], def.interval),
                    count: if values[3] == 0 {
                        def.count
                    } else {
                        values[3].min(255) as u32
                    },
                }));
            }
            SockOpt::UserTimeout => {
                s.opts.user_timeout = Some(on.then(|| std::time::Duration::from_millis(values[0])));
            }
            // Recorded; the stack's Nagle covers what programs use it for.
            SockOpt::Cork | SockOpt::Policy => return Ok(Some(0)),
            SockOpt::Tos => s.opts.tos = Some(values[0] as u8),
            SockOpt::Ttl => s.opts.ttl = Some(u8::try_from(values[0]).map_err(|_| errno::EINVAL)?),
            // The decoder refused more than a byte already.
            SockOpt::Priority => {
                s.opts.priority = Some(u8::try_from(values[0]).map_err(|_| errno::EINVAL)?)
            }
            SockOpt::Congestion => {
                s.opts.congestion = Some(match u32::try_from(values[0]) {
                    Ok(CONGESTION_RENO) => Algorithm::NewReno,
                    Ok(CONGESTION_CUBIC) => Algorithm::Cubic,
                    _ => return Err(errno::ENOENT),
                })
            }
            SockOpt::QuickAck => s.opts.quickack = Some(on),
            // Seen at `BIND` and `LISTEN` (a listener already listening
            // stays in or out of its group, as on Linux).
            SockOpt::ReusePort => {
                s.opts.reuseport = on;
                return Ok(Some(0));
            }
            _ => return Err(errno::ENOPROTOOPT),
        }
        // A listener takes what passes to its connections (TOS,
        // TTL, priority, algorithm); the rest fails there harmlessly.
        if let Some(h) = s.h {
            let opts = s.opts;
            apply_opts(cx.now, cx.stack, h, &opts);
        }
        Ok(Some(0))
    }

    /// `INFO`: Linux's `tcp_info` for the connection, into `span` of the
    /// data area.
    pub(super) fn info(
        &mut self,
        cx: &mut Ctx<'_>,
        sock: u32,
        span: RingSpan,
    ) -> Result<Option<i64>> {
        let s = self.sock(sock)?;
        let h = s.h.ok_or(errno::ENOTCONN)?;
        let i = cx.stack.tcp_info(h).map_err(handle_errno)?;
        let rec = TcpInfoRecord {
            state: linux_state(i.state),
            snd_mss: i.snd_mss,
            rtt_us: i.srtt.as_micros().min(u32::MAX as u128) as u32,
            rttvar_us: i.rttvar.as_micros().min(u32::MAX as u128) as u32,
            rto_us: i.rto.as_micros().min(u32::MAX as u128) as u32,
            snd_cwnd: i.cwnd / i.snd_mss.max(1),
            snd_ssthresh: i.ssthresh / i.snd_mss.max(1),
            total_retrans: i.retransmits.min(u32::MAX as u64) as u32,
            bytes_acked: i.bytes_acked,
            bytes_received: i.bytes_received,
            segs_out: i.segs_out,
            segs_in: i.segs_in,
            local: packed(i.local),
            remote: packed(i.remote),
            congestion: match i.congestion {
                Algorithm::NewReno => CONGESTION_RENO,
                _ => CONGESTION_CUBIC,
            },
            // The stack's, not this socket's record: an accepted
            // connection has its listener's, whoever set that.
            priority: u32::from(cx.stack.priority(h).unwrap_or(0)),
            options: if i.timestamps { TCPI_OPT_TIMESTAMPS } else { 0 }
                | if i.sack { TCPI_OPT_SACK } else { 0 }
                | if i.wscale.is_some() {
                    TCPI_OPT_WSCALE
                } else {
                    0
                },
            wscale: i.wscale.map_or(0, |(ours, peer)| {
                u32::from(peer & 0xf) | (u32::from(ours & 0xf) << 4)
            }),
        };
        let bytes = record_bytes(&rec);
        let n = (span.len as usize).min(bytes.len());
        let span = RingSpan {
            offset: span.offset,
            len: n as u64,
        };
        if n > 0 && !self.region.ring_write(span, 0, &bytes[..n]) {
            return Err(errno::EFAULT);
        }
        Ok(Some(n as i64))
    }
}
