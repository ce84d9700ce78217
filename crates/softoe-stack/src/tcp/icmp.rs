//! ICMP destination-unreachable errors about a connection's segments, as
//! Linux's `tcp_v4_err` answers them (RFC 1122 §4.2.3.9, RFC 5461,
//! RFC 5927).
//!
//! - **Believed only when it quotes what we sent** (RFC 5927 §4.1): the
//!   quoted IPv4 header and first eight bytes of TCP name a connection's
//!   four-tuple, and the quoted sequence number lies in
//!   `SND.UNA..=SND.NXT` (`snd_max` here, which never moves back, as
//!   Linux's `snd_nxt`); anything else is counted
//!   (`tcp_icmp_out_of_window`) and ignored.
//! - **SYN-SENT: the attempt ends at once** with the error the code
//!   names (Linux's `icmp_err_convert`): port unreachable
//!   `ECONNREFUSED`, protocol unreachable `ENOPROTOOPT`, network
//!   unreachable `ENETUNREACH`, host unreachable, administratively
//!   prohibited and the rest `EHOSTUNREACH`. RFC 1122 makes only port and
//!   protocol unreachable hard errors, but a connection that has never
//!   heard from its peer has nothing to lose, and a program waits a
//!   minute and more for its SYN retries where Linux answers at once.
//! - **SYN-RECEIVED (a handshake of ours): dropped, silently,** on net or
//!   host unreachable quoting exactly our ISS (Linux's `tcp_req_err`):
//!   the client is gone, and a spoofed SYN's place in the SYN queue is
//!   freed. Port and protocol unreachable leave it.
//! - **Synchronized states: recorded only** (`soft_error`, Linux's
//!   `sk_err_soft`), hard errors too (RFC 5927 §7: a hard error from the
//!   path must not reset an open connection — anyone who can guess the
//!   ports can send one). If the connection then times out, it reports
//!   the recorded error instead of `ETIMEDOUT` (Linux's
//!   `tcp_write_err`); an ACK of new data forgets it.
//!
//! Fragmentation needed (path MTU discovery) and codes past 15 are not
//! handled here; nor are time exceeded and parameter problem (Linux
//! aborts a connection attempt on those too), which the wire crate does
//! not parse.

use softoe_wire::{Icmpv4DstUnreachable, IpProtocol, Ipv4Address, TcpSeqNumber};

use super::seq;
use super::socket::TcpSocket;
use super::{Endpoint, State, TcpError};

/// What an ICMP error quotes of one of our segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Quoted {
    /// Our end (the quoted source).
    pub(crate) local: Endpoint,
    /// The peer's (the quoted destination).
    pub(crate) remote: Endpoint,
    /// The quoted segment's sequence number.
    pub(crate) seq: TcpSeqNumber,
}

/// The TCP segment an ICMP error's data quotes: an IPv4 header (any
/// options) carrying TCP and at least eight bytes of it (RFC 792), or
/// `None`. The quoted header's lengths are not checked against the quote:
/// a router quotes only the start of the packet.
pub(crate) fn quoted_tcp(data: &[u8]) -> Option<Quoted> {
    let first = *data.first()?;
    let ihl = usize::from(first & 0x0f) * 4;
    if first >> 4 != 4 || ihl < 20 {
        return None;
    }
    if IpProtocol::from(*data.get(9)?) != IpProtocol::Tcp {
        return None;
    }
    let addr = |at: usize| -> Option<Ipv4Address> {
        let b = data.get(at..at + 4)?;
        Some(Ipv4Address([b[0], b[1], b[2], b[3]]))
    };
    let be16 = |at: usize| -> Option<u16> {
        let b = data.get(at..at + 2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    };
    let tcp = data.get(ihl..ihl + 8)?;
    Some(Quoted {
        local: Endpoint::new(addr(12)?, be16(ihl)?),
        remote: Endpoint::new(addr(16)?, be16(ihl + 2)?),
        seq: TcpSeqNumber(u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]])),
    })
}

/// The error an unreachable code means for TCP (Linux's
/// `icmp_err_convert`, with `EOPNOTSUPP`, `EHOSTDOWN` and `ENONET`, its
/// errors for source route failed, host unknown and host isolated, folded
/// into host unreachable); `None` for fragmentation needed, which is path
/// MTU discovery's, and for codes RFC 1812 does not define.
pub(crate) fn error_for(code: Icmpv4DstUnreachable) -> Option<TcpError> {
    Some(match u8::from(code) {
        // Net unreachable, net unknown, net prohibited, net for the TOS.
        0 | 6 | 9 | 11 => TcpError::NetUnreachable,
        2 => TcpError::ProtocolUnreachable,
        3 => TcpError::Refused,
        4 => return None,
        // Host unreachable, source route failed, host unknown, host
        // isolated, host prohibited, host for the TOS, communication
        // prohibited, precedence violation, precedence cut-off.
        1 | 5 | 7 | 8 | 10 | 12..=15 => TcpError::HostUnreachable,
        _ => return None,
    })
}

/// What an ICMP error did to the connection it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IcmpVerdict {
    /// Nothing (a state that takes no notice, or a code it ignores).
    Ignored,
    /// The quoted sequence number is not one the connection has out.
    OutOfWindow,
    /// The connection attempt ended (SYN-SENT), or our handshake was
    /// dropped (SYN-RECEIVED).
    Aborted,
    /// Recorded as the connection's soft error.
    Recorded,
}

impl TcpSocket {
    /// An ICMP error meaning `err` quotes our segment with sequence number
    /// `at` (its four-tuple already matched); see the module's docs.
    pub(crate) fn icmp_error(&mut self, at: TcpSeqNumber, err: TcpError) -> IcmpVerdict {
        if matches!(self.state, State::Closed | State::Listen | State::TimeWait) {
            return IcmpVerdict::Ignored;
        }
        if !seq::in_range(at, self.snd_una, seq::add(self.snd_max, 1)) {
            return IcmpVerdict::OutOfWindow;
        }
        match self.state {
            State::SynSent => {
                self.fail(err);
                IcmpVerdict::Aborted
            }
            State::SynReceived if self.parent.is_some() => {
                if at != self.iss {
                    return IcmpVerdict::OutOfWindow;
                }
                if !matches!(err, TcpError::NetUnreachable | TcpError::HostUnreachable) {
                    return IcmpVerdict::Ignored;
                }
                // No RST: the client is unreachable, or never existed.
                self.error = Some(err);
                self.set_state(State::Closed);
                IcmpVerdict::Aborted
            }
            State::SynReceived => {
                // A simultaneous open: still an attempt of ours.
                self.fail(err);
                IcmpVerdict::Aborted
            }
            _ => {
                self.soft_error = Some(err);
                IcmpVerdict::Recorded
            }
        }
    }

    /// The error a connection that gave up on its peer reports: the last
    /// ICMP error recorded, else `ETIMEDOUT` (Linux's `tcp_write_err`).
    pub(crate) fn timeout_error(&mut self) -> TcpError {
        self.timed_out = true;
        self.soft_error.unwrap_or(TcpError::TimedOut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quote_is_read_whatever_its_header_length() {
        let mut q = [0u8; 24 + 8];
        q[0] = 0x46; // IPv4, 24-byte header (one option word).
        q[9] = 6;
        q[12..16].copy_from_slice(&[10, 0, 0, 1]);
        q[16..20].copy_from_slice(&[10, 0, 0, 2]);
        q[24..26].copy_from_slice(&80u16.to_be_bytes());
        q[26..28].copy_from_slice(&4000u16.to_be_bytes());
        q[28..32].copy_from_slice(&7u32.to_be_bytes());
        let got = quoted_tcp(&q).unwrap();
        let a = |d| Ipv4Address::new(10, 0, 0, d);
        assert_eq!(
            got,
            Quoted {
                local: Endpoint::new(a(1), 80),
                remote: Endpoint::new(a(2), 4000),
                seq: TcpSeqNumber(7),
            }
        );
        assert_eq!(quoted_tcp(&q[..31]), None, "short of eight TCP bytes");
        let mut udp = q;
        udp[9] = 17;
        assert_eq!(quoted_tcp(&udp), None);
        let mut v6 = q;
        v6[0] = 0x66;
        assert_eq!(quoted_tcp(&v6), None);
        let mut tiny = q;
        tiny[0] = 0x44;
        assert_eq!(quoted_tcp(&tiny), None, "a header under 20 bytes");
        assert_eq!(quoted_tcp(&[]), None);
    }

    #[test]
    fn codes_map_as_linux_maps_them() {
        let e = |c: u8| error_for(Icmpv4DstUnreachable::from(c));
        assert_eq!(e(0), Some(TcpError::NetUnreachable));
        assert_eq!(e(1), Some(TcpError::HostUnreachable));
        assert_eq!(e(2), Some(TcpError::ProtocolUnreachable));
        assert_eq!(e(3), Some(TcpError::Refused));
        assert_eq!(e(4), None);
        assert_eq!(e(13), Some(TcpError::HostUnreachable));
        assert_eq!(e(15), Some(TcpError::HostUnreachable));
        assert_eq!(e(16), None);
        assert_eq!(e(255), None);
    }
}
