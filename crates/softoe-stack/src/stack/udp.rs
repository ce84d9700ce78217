//! The UDP socket API.

use alloc::boxed::Box;

use crate::config::UdpConfig;
use crate::iface::IPV4_HEADER;
use crate::payload::PayloadRef;
use crate::socket::udp::UdpSocket;
use crate::socket::{Socket, SocketHandle};
use crate::tcp::Endpoint;

use super::{BindError, HandleError, Stack, UdpSendError};

impl Stack {
    /// Binds a UDP socket to `local` (address unspecified: all of ours).
    pub fn udp_bind(
        &mut self,
        local: Endpoint,
        cfg: Option<UdpConfig>,
    ) -> Result<SocketHandle, BindError> {
        if local.port == 0 || !(local.addr.is_unspecified() || self.iface.has_addr(local.addr)) {
            return Err(BindError::Unaddressable);
        }
        if self.sockets.udp.contains_key(&local) {
            return Err(BindError::AddrInUse);
        }
        let sock = Box::new(UdpSocket::new(local, cfg.unwrap_or(self.cfg.udp)));
        let h = self
            .sockets
            .insert(Socket::Udp(sock))
            .ok_or(BindError::TooManySockets)?;
        self.sockets.udp.insert(local, h.index());
        Ok(h)
    }

    /// Queues a datagram; it goes out on the next poll, after which its
    /// payload reference is released ([`Events::ACKED`](crate::Events::ACKED)).
    pub fn udp_send_to(
        &mut self,
        h: SocketHandle,
        to: Endpoint,
        data: PayloadRef,
    ) -> Result<(), UdpSendError> {
        if to.port == 0 || to.addr.is_unspecified() || to.addr.is_multicast() {
            return Err(UdpSendError::Unaddressable);
        }
        if data.len() + 8 + IPV4_HEADER > self.cfg.caps.mtu {
            return Err(UdpSendError::TooLarge);
        }
        let i = self
            .sockets
            .index_of(h)
            .ok_or(UdpSendError::InvalidHandle)?;
        let sock = self.sockets.udp_mut(i).ok_or(UdpSendError::InvalidHandle)?;
        if !sock.send(to, data) {
            return Err(UdpSendError::Full);
        }
        self.sockets.touch(i);
        Ok(())
    }

    /// Takes the oldest received datagram: copies what fits in `buf` and
    /// returns its full length and source; `Ok(None)` if none is waiting.
    pub fn udp_recv_from(
        &mut self,
        h: SocketHandle,
        buf: &mut [u8],
    ) -> Result<Option<(usize, Endpoint)>, HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        let sock = self.sockets.udp_mut(i).ok_or(HandleError::WrongKind)?;
        Ok(sock.recv(buf))
    }

    /// The full length of the oldest received datagram, left where it is;
    /// `Ok(None)` if none is waiting. A reader with a bounded buffer of
    /// its own takes a datagram only when it fits, and leaves the rest to
    /// the socket's queue, whose overflow is counted (`udp_drops`).
    pub fn udp_peek_len(&self, h: SocketHandle) -> Result<Option<usize>, HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        match self.sockets.get(i) {
            Some(Socket::Udp(u)) => Ok(u.peek_len()),
            _ => Err(HandleError::WrongKind),
        }
    }

    /// Datagrams handed to the port so far on this socket: their payload
    /// references are released.
    pub fn udp_sent(&self, h: SocketHandle) -> Result<u64, HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        match self.sockets.get(i) {
            Some(Socket::Udp(u)) => Ok(u.tx_done),
            _ => Err(HandleError::WrongKind),
        }
    }
}
