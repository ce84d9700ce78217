//! The in-process application API: the engine used as a library.
//!
//! Threads of the engine's own process get softoe sockets that feel like
//! `std::net`'s — [`TcpStream`] (with `Read` and `Write`), [`TcpListener`],
//! [`UdpSocket`] — while every protocol step runs on the engine thread.
//!
//! They are the sockets of `softoe-host`, and an [`App`] is a program
//! attached as any other is: its session is served by a [`HostService`]
//! (the [`AppService`] that [`channel`] makes, added to the engine) through
//! the same session core, command ring, receive rings and completions as a
//! program in another process. Only the attach differs: there is no socket
//! file; the [`App`] hands the service one end of a socket pair over an
//! in-process channel, rings its doorbell, and attaches over the other end
//! ([`softoe_host::Client::attach_over`]). One implementation serves both
//! kinds of program, and an error reaches a thread here with the errno
//! Linux would give, translated in one place (the session's).
//!
//! The first call attaches (the engine must be running by then, or start
//! soon: the call waits for it); every clone of an [`App`] shares that one
//! session, and a session the engine ended is replaced at the next call.
//! A call on an engine that has stopped fails with `BrokenPipe`.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::OwnedFd;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard};

pub use softoe_host::{Client, Config, TcpInfoRecord, TcpListener, TcpStream, UdpSocket};
use softoe_stack::State;

use crate::host::sys::{self, EventFd};
use crate::host::{HostConfig, HostService};

/// The engine side of an [`App`]: add it to the engine as a service. A
/// [`HostService`] that serves programs of this process only.
pub type AppService = HostService;

/// Connects threads to an engine. Cheap to clone; every clone shares one
/// session of the [`AppService`] it was made with.
#[derive(Clone, Debug)]
pub struct App {
    inner: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// The engine's ends of new socket pairs go here…
    conns: Mutex<Sender<OwnedFd>>,
    /// …and this doorbell tells the engine to look.
    bell: Arc<EventFd>,
    /// The session, once attached.
    client: Mutex<Option<Client>>,
    /// What to ask for when attaching.
    cfg: Config,
}

/// Creates an application API and the service that serves it, with the
/// host interface's default settings and `softoe-host`'s default session
/// (its `SOFTOE_*` environment variables apply: ring sizes, spin time,
/// direct placement).
pub fn channel() -> io::Result<(App, AppService)> {
    channel_with(HostConfig::default(), Config::default())
}

/// As [`channel`], with the service's settings `host` and the session's
/// `session` (its `path` is not used).
pub fn channel_with(host: HostConfig, session: Config) -> io::Result<(App, AppService)> {
    let (service, conns, bell) = HostService::in_process(host)?;
    let app = App {
        inner: Arc::new(Shared {
            conns: Mutex::new(conns),
            bell,
            client: Mutex::new(None),
            cfg: session,
        }),
    };
    Ok((app, service))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn gone() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the engine has stopped")
}

impl App {
    /// The session every socket of this `App` lives in, attaching first
    /// if there is none yet (or the engine ended the last one).
    pub fn client(&self) -> io::Result<Client> {
        let mut slot = lock(&self.inner.client);
        if let Some(c) = slot.as_ref()
            && c.is_alive()
        {
            return Ok(c.clone());
        }
        let (engine_end, ours) = sys::seqpacket_pair()?;
        lock(&self.inner.conns)
            .send(engine_end)
            .map_err(|_| gone())?;
        self.inner.bell.signal();
        let c = Client::attach_over(ours, self.inner.cfg.clone()).map_err(|e| {
            // The service dropped our connection unanswered: it is gone.
            if e.kind() == io::ErrorKind::InvalidData {
                gone()
            } else {
                e
            }
        })?;
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Opens a TCP connection to `remote` (blocks until it is established
    /// or fails).
    pub fn tcp_connect(&self, remote: SocketAddrV4) -> io::Result<TcpStream> {
        self.client()?.tcp_connect(remote)
    }

    /// Listens on TCP `port` on all of the engine's addresses.
    pub fn tcp_listen(&self, port: u16, backlog: usize) -> io::Result<TcpListener> {
        let backlog = u32::try_from(backlog).unwrap_or(u32::MAX);
        self.client()?
            .tcp_listen(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port), backlog)
    }

    /// Binds UDP `port` on all of the engine's addresses.
    pub fn udp_bind(&self, port: u16) -> io::Result<UdpSocket> {
        self.client()?
            .udp_bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port))
    }
}

/// The state a [`TcpInfoRecord`] names (Linux's `TCP_*` numbers), as the
/// stack calls it; `None` for a number no state has.
pub fn state_of(info: &TcpInfoRecord) -> Option<State> {
    crate::host::state_of_linux(info.state)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use softoe_stack::{Instant, Stack, StackConfig};
    use softoe_wire::{EthernetAddress, Ipv4Address, Ipv4Cidr};

    use super::*;
    use crate::memory::Memory;
    use crate::services::Service;

    /// An [`App`]'s service on a stack without a device (commands only),
    /// turned by the test's thread as the engine's loop would.
    struct Served {
        stack: Stack,
        mem: Memory,
        svc: AppService,
        t0: std::time::Instant,
    }

    impl Served {
        fn start() -> (App, Served) {
            let cfg = StackConfig::new(
                EthernetAddress([2, 0, 0, 0, 0, 1]),
                Ipv4Cidr::new(Ipv4Address([10, 0, 0, 1]), 24).unwrap(),
            );
            let session = Config {
                data_len: 8 << 20,
                ..Config::default()
            };
            let (app, svc) = channel_with(HostConfig::default(), session).unwrap();
            let mut s = Served {
                stack: Stack::new(cfg).unwrap(),
                mem: Memory::new(),
                svc,
                t0: std::time::Instant::now(),
            };
            let now = s.now();
            s.svc.start(now, &mut s.stack, &mut s.mem).unwrap();
            (app, s)
        }

        fn now(&self) -> Instant {
            Instant::from_nanos(self.t0.elapsed().as_nanos() as u64)
        }

        /// One engine turn, then a short sleep.
        fn turn(&mut self) {
            let now = self.now();
            self.svc.step(now, &mut self.stack, &mut self.mem);
            self.svc.after_sleep();
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Runs `f` on a thread with an [`App`] while this thread serves it,
    /// and returns what `f` returned.
    fn with_app<T: Send + 'static>(f: impl FnOnce(App) -> T + Send + 'static) -> T {
        let (app, mut s) = Served::start();
        let t = std::thread::spawn(move || f(app));
        while !t.is_finished() {
            s.turn();
        }
        s.turn();
        t.join().unwrap()
    }

    #[test]
    fn threads_share_one_session_and_errors_carry_linux_errnos() {
        let r = with_app(|app| -> io::Result<()> {
            let l = app.tcp_listen(80, 4)?;
            l.set_priority(6)?;
            assert_eq!(l.priority(), 6);
            let u = app.udp_bind(5000)?;
            u.set_priority(7)?;
            // A clone on another thread reaches the same session: the port
            // is taken there too.
            let other = app.clone();
            let e = std::thread::spawn(move || other.tcp_listen(80, 4).unwrap_err())
                .join()
                .unwrap();
            assert_eq!(e.raw_os_error(), Some(libc::EADDRINUSE), "{e}");
            assert_eq!(app.client()?.session(), app.clone().client()?.session());
            // No route off the stack's /24 (and no device): Linux's errno.
            let e = app
                .tcp_connect(SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 9))
                .unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::ENETUNREACH), "{e}");
            Ok(())
        });
        r.unwrap();
        // That the priority reaches the frames (and a bond's real-time
        // members) is tested on a real wire: tests/bond.rs.
    }

    #[test]
    fn a_stopped_engine_fails_calls_instead_of_hanging() {
        let (app, svc) = channel().unwrap();
        drop(svc);
        let e = app.udp_bind(9).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe, "{e}");
    }

    #[test]
    fn a_thread_waiting_when_the_engine_stops_is_told_so() {
        let (app, mut s) = Served::start();
        let (listening, ready) = std::sync::mpsc::channel();
        let (done, result) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let l = app.tcp_listen(80, 4).unwrap();
            listening.send(()).unwrap();
            // Nobody connects: this waits until the engine goes.
            let _ = done.send(l.accept().map(|_| ()));
        });
        while ready.try_recv().is_err() {
            s.turn();
        }
        // Let the accept go to sleep on its bell, then stop the engine.
        for _ in 0..100 {
            s.turn();
        }
        drop(s);
        // A bound against hanging, not a measurement: the wait ends at once.
        let r = result.recv_timeout(Duration::from_secs(30)).unwrap();
        let e = r.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionAborted, "{e}");
    }

    #[test]
    fn every_linux_state_number_names_its_state() {
        for n in 1..=11 {
            let rec = TcpInfoRecord {
                state: n,
                ..TcpInfoRecord::default()
            };
            let s = state_of(&rec).unwrap();
            assert_eq!(crate::host::linux_state(s), n, "{s:?}");
        }
        let rec = TcpInfoRecord {
            state: 12,
            ..TcpInfoRecord::default()
        };
        assert_eq!(state_of(&rec), None);
    }
}
