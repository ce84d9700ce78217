//! The ABI's numbers for the stack's values: errno codes for its errors,
//! packed addresses, Linux's TCP state numbers.

use softoe_abi::{errno, pack_addr};
use softoe_stack::{BindError, Endpoint, HandleError, State, TcpError};
use softoe_wire::Ipv4Address;

pub(super) fn bind_errno(e: BindError) -> i32 {
    match e {
        BindError::AddrInUse => errno::EADDRINUSE,
        BindError::Unaddressable => errno::EADDRNOTAVAIL,
        BindError::NoRoute => errno::ENETUNREACH,
        _ => errno::ENOBUFS,
    }
}

pub(super) fn tcp_errno(e: TcpError) -> i32 {
    match e {
        TcpError::Refused => errno::ECONNREFUSED,
        TcpError::Reset => errno::ECONNRESET,
        TcpError::TimedOut => errno::ETIMEDOUT,
        TcpError::NetUnreachable => errno::ENETUNREACH,
        TcpError::HostUnreachable => errno::EHOSTUNREACH,
        TcpError::ProtocolUnreachable => errno::ENOPROTOOPT,
        _ => errno::ECONNABORTED,
    }
}

pub(super) fn handle_errno(_: HandleError) -> i32 {
    errno::ENOTCONN
}

pub(super) fn endpoint(addr_be: u32, port: u16) -> Endpoint {
    Endpoint::new(Ipv4Address::from_bits(u32::from_be(addr_be)), port)
}

pub(super) fn packed(ep: Endpoint) -> u64 {
    pack_addr(ep.addr.to_bits().to_be(), ep.port)
}

/// Linux's `TCP_*` state numbers.
pub(crate) fn linux_state(s: State) -> u32 {
    match s {
        State::Established => 1,
        State::SynSent => 2,
        State::SynReceived => 3,
        State::FinWait1 => 4,
        State::FinWait2 => 5,
        State::TimeWait => 6,
        State::Closed => 7,
        State::CloseWait => 8,
        State::LastAck => 9,
        State::Listen => 10,
        State::Closing => 11,
    }
}

/// The state Linux's `TCP_*` number `n` names ([`linux_state`] undone);
/// `None` for a number no state has.
pub(crate) fn state_of_linux(n: u32) -> Option<State> {
    Some(match n {
        1 => State::Established,
        2 => State::SynSent,
        3 => State::SynReceived,
        4 => State::FinWait1,
        5 => State::FinWait2,
        6 => State::TimeWait,
        7 => State::Closed,
        8 => State::CloseWait,
        9 => State::LastAck,
        10 => State::Listen,
        11 => State::Closing,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn icmp_errors_reach_programs_as_linux_numbers_them() {
        assert_eq!(tcp_errno(TcpError::Refused), errno::ECONNREFUSED);
        assert_eq!(tcp_errno(TcpError::NetUnreachable), errno::ENETUNREACH);
        assert_eq!(tcp_errno(TcpError::HostUnreachable), errno::EHOSTUNREACH);
        assert_eq!(tcp_errno(TcpError::ProtocolUnreachable), errno::ENOPROTOOPT);
        assert_eq!(tcp_errno(TcpError::Aborted), errno::ECONNABORTED);
    }
}
