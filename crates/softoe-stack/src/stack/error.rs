//! The errors [`Stack`](super::Stack)'s calls return.

use core::fmt;

/// A configuration the stack cannot run with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// No IPv4 address was given.
    NoAddress,
    /// The MAC address is not a unicast address.
    BadMac,
    /// The MTU is below 68 bytes (RFC 791's minimum) or above 65,535.
    BadMtu,
    /// The ephemeral port range is empty or includes port 0.
    BadPortRange,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConfigError::NoAddress => "the interface needs at least one IPv4 address",
            ConfigError::BadMac => "the MAC address must be a unicast address",
            ConfigError::BadMtu => "the MTU must be between 68 and 65535 bytes",
            ConfigError::BadPortRange => "the ephemeral port range must be non-empty and exclude 0",
        })
    }
}

impl core::error::Error for ConfigError {}

/// Why a handle could not be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandleError {
    /// The handle names no live socket (closed and released, or never valid).
    Invalid,
    /// The socket is of another kind than the operation needs.
    WrongKind,
}

impl fmt::Display for HandleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HandleError::Invalid => "no such socket",
            HandleError::WrongKind => "operation not supported on this kind of socket",
        })
    }
}

impl core::error::Error for HandleError {}

/// Why a connection could not be started, or a socket not bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BindError {
    /// The address is not one of ours, or the remote address is not unicast,
    /// or a port is 0 where one is needed.
    Unaddressable,
    /// No route to the destination.
    NoRoute,
    /// The local endpoint (or four-tuple) is taken.
    AddrInUse,
    /// No ephemeral port is free.
    NoPorts,
    /// The socket table is full.
    TooManySockets,
}

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BindError::Unaddressable => "address not available",
            BindError::NoRoute => "network unreachable",
            BindError::AddrInUse => "address already in use",
            BindError::NoPorts => "no free ephemeral port",
            BindError::TooManySockets => "socket table full",
        })
    }
}

impl core::error::Error for BindError {}

/// Why a datagram could not be sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UdpSendError {
    /// The handle names no live UDP socket.
    InvalidHandle,
    /// The destination is not a unicast or broadcast address, or port 0.
    Unaddressable,
    /// The datagram does not fit in one IP packet of the MTU.
    TooLarge,
    /// The send queue is full; try after the next poll.
    Full,
}

impl fmt::Display for UdpSendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UdpSendError::InvalidHandle => "no such UDP socket",
            UdpSendError::Unaddressable => "destination address not usable",
            UdpSendError::TooLarge => "datagram larger than the MTU allows",
            UdpSendError::Full => "send queue full",
        })
    }
}

impl core::error::Error for UdpSendError {}
