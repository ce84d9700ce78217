//! Per-socket options (TCP and IP fields).

use core::time::Duration;

use crate::config::{Keepalive, TcpConfig};
use crate::iface::IpFields;
use crate::socket::{Socket, SocketHandle};
use crate::tcp::congestion::Algorithm;
use crate::tcp::socket::TcpSocket;
use crate::time::Instant;

use super::{HandleError, Stack};

impl Stack {
    fn tcp_cfg_mut(&mut self, h: SocketHandle) -> Result<&mut TcpSocket, HandleError> {
        let i = self.tcp_index(h)?;
        self.sockets.tcp_mut(i).ok_or(HandleError::Invalid)
    }

    /// `TCP_NODELAY`.
    pub fn tcp_set_nodelay(&mut self, h: SocketHandle, on: bool) -> Result<(), HandleError> {
        self.tcp_cfg_mut(h)?.cfg.nodelay = on;
        let i = self.tcp_index(h)?;
        self.mark_ready(i);
        Ok(())
    }

    /// `SO_KEEPALIVE` with its parameters (`None`: off).
    pub fn tcp_set_keepalive(
        &mut self,
        now: Instant,
        h: SocketHandle,
        ka: Option<Keepalive>,
    ) -> Result<(), HandleError> {
        let s = self.tcp_cfg_mut(h)?;
        s.cfg.keepalive = ka;
        s.arm_keepalive(now);
        let i = self.tcp_index(h)?;
        self.sockets.touch(i);
        Ok(())
    }

    /// `TCP_USER_TIMEOUT` (`None`: off).
    pub fn tcp_set_user_timeout(
        &mut self,
        h: SocketHandle,
        t: Option<Duration>,
    ) -> Result<(), HandleError> {
        self.tcp_cfg_mut(h)?.cfg.user_timeout = t;
        Ok(())
    }

    /// `TCP_CONGESTION`: the algorithm that sizes a connection's window
    /// from now on (its window carries over, see
    /// [`Controller::switch_to`](crate::tcp::congestion::Controller::switch_to)),
    /// or, on a listener, the one the connections it accepts start with.
    pub fn tcp_set_congestion(
        &mut self,
        h: SocketHandle,
        algorithm: Algorithm,
    ) -> Result<(), HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        match self.sockets.get_mut(i) {
            Some(Socket::Tcp(s)) => s.set_congestion(algorithm),
            Some(Socket::Listener(l)) => l.cfg.congestion = algorithm,
            Some(Socket::Udp(_)) => return Err(HandleError::WrongKind),
            None => return Err(HandleError::Invalid),
        }
        Ok(())
    }

    /// The congestion control algorithm of a connection or listener.
    pub fn tcp_congestion(&self, h: SocketHandle) -> Result<Algorithm, HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        match self.sockets.get(i) {
            Some(Socket::Tcp(s)) => Ok(s.cc.algorithm()),
            Some(Socket::Listener(l)) => Ok(l.cfg.congestion),
            Some(Socket::Udp(_)) => Err(HandleError::WrongKind),
            None => Err(HandleError::Invalid),
        }
    }

    /// Sets one IP field of socket `h`: `tcp` on a connection's or a
    /// listener's configuration, `udp` on a UDP socket's fields.
    fn set_ip_field(
        &mut self,
        h: SocketHandle,
        tcp: impl FnOnce(&mut TcpConfig),
        udp: impl FnOnce(&mut IpFields),
    ) -> Result<(), HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        match self.sockets.get_mut(i) {
            Some(Socket::Tcp(s)) => tcp(&mut s.cfg),
            Some(Socket::Listener(l)) => tcp(&mut l.cfg),
            Some(Socket::Udp(u)) => udp(&mut u.ip),
            None => return Err(HandleError::Invalid),
        }
        Ok(())
    }

    /// `IP_TOS`: the TOS byte of the socket's packets from now on. On TCP
    /// sockets the two ECN bits are cleared (the stack does not negotiate
    /// ECN; Linux keeps them out of a TCP socket's `IP_TOS` too); a
    /// listener's applies to the connections of the SYNs it receives from
    /// then on, its SYN-ACKs included.
    pub fn set_tos(&mut self, h: SocketHandle, tos: u8) -> Result<(), HandleError> {
        self.set_ip_field(h, |c| c.tos = tos & !3, |ip| ip.tos = tos)
    }

    /// `IP_TTL`: the TTL of the socket's packets from now on (0: the
    /// default, [`DEFAULT_TTL`](crate::DEFAULT_TTL)); a listener's passes
    /// on as its TOS does.
    pub fn set_ttl(&mut self, h: SocketHandle, ttl: u8) -> Result<(), HandleError> {
        self.set_ip_field(h, |c| c.ttl = ttl, |ip| ip.ttl = ttl)
    }

    /// `SO_PRIORITY`: the class the socket's frames are handed to the port
    /// with from now on ([`TxFrame::priority`](crate::TxFrame::priority));
    /// a listener's passes to the connections it accepts.
    pub fn set_priority(&mut self, h: SocketHandle, priority: u8) -> Result<(), HandleError> {
        self.set_ip_field(h, |c| c.priority = priority, |ip| ip.priority = priority)
    }

    /// The `SO_PRIORITY` a socket's frames go to the port with now (a
    /// connection's own, or the one its listener passed on).
    pub fn priority(&self, h: SocketHandle) -> Result<u8, HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        match self.sockets.get(i) {
            Some(Socket::Tcp(s)) => Ok(s.ip_fields().priority),
            Some(Socket::Listener(l)) => Ok(l.cfg.priority),
            Some(Socket::Udp(u)) => Ok(u.ip.priority),
            None => Err(HandleError::Invalid),
        }
    }

    /// The TOS byte and TTL a socket's packets carry now.
    pub fn ip_fields(&self, h: SocketHandle) -> Result<(u8, u8), HandleError> {
        let i = self.sockets.index_of(h).ok_or(HandleError::Invalid)?;
        let f = match self.sockets.get(i) {
            Some(Socket::Tcp(s)) => s.ip_fields(),
            Some(Socket::Listener(l)) => IpFields {
                tos: l.cfg.tos,
                ttl: l.cfg.ttl,
                priority: l.cfg.priority,
            },
            Some(Socket::Udp(u)) => u.ip,
            None => return Err(HandleError::Invalid),
        };
        Ok((f.tos, f.effective_ttl()))
    }

    /// The delayed-ACK timer (`None`: acknowledge every segment at once).
    pub fn tcp_set_delayed_ack(
        &mut self,
        h: SocketHandle,
        t: Option<Duration>,
    ) -> Result<(), HandleError> {
        self.tcp_cfg_mut(h)?.cfg.delayed_ack = t;
        Ok(())
    }
}
