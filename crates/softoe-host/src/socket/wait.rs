//! Waiting on one socket: spin a moment, then sleep on a bell the engine
//! rings for this socket alone.

use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Sock;
use crate::spin::Spin;
use crate::sys;

impl Sock {
    /// Waits until `ready` holds for the slot, honouring non-blocking mode
    /// and `timeout`: spins a moment, then sleeps on a bell of its own that
    /// the engine rings when this socket changes (`tx`: the writer's
    /// word, else the reader's), so news of other sockets never wakes it.
    /// A second thread waiting the same way on the same socket, or one
    /// that finds every bell taken, sleeps on the session's doorbell.
    pub(super) fn wait(
        &self,
        nonblocking: bool,
        timeout: Option<Duration>,
        tx: bool,
        ready: impl Fn(&Sock) -> bool,
    ) -> io::Result<()> {
        if ready(self) {
            return Ok(());
        }
        if nonblocking {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let start = Instant::now();
        let budget = if tx { &self.tx_spin } else { &self.rx_spin };
        let max = self.c.inner.cfg.spin;
        let spun = budget.budget(max);
        let r = self.wait_inner(start, timeout, tx, spun, &ready);
        budget.ended(start.elapsed(), spun, max);
        r
    }

    pub(super) fn wait_inner(
        &self,
        start: Instant,
        timeout: Option<Duration>,
        tx: bool,
        spin: Duration,
        ready: &impl Fn(&Sock) -> bool,
    ) -> io::Result<()> {
        let deadline = timeout.map(|t| start + t);
        while start.elapsed() < spin {
            if ready(self) {
                return Ok(());
            }
            if deadline.is_some_and(|t| Instant::now() >= t) {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            std::hint::spin_loop();
        }
        let word = self.c.region().slot(self.id).map(|v| v.waiter(tx));
        // Every sleep's word differs from the last one the engine rang (a
        // count for the whole client; after 2^24 sleeps a repeat can only
        // cost one 100 ms nap).
        let next = || self.c.inner.sleeps.fetch_add(1, Ordering::Relaxed);
        let mut first = true;
        let lent = word.and_then(|w| {
            let b = self.c.lend_bell()?;
            let mine = softoe_abi::waiter_word(b.index, next());
            match w.compare_exchange(0, mine, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => Some((w, b)),
                Err(_) => {
                    self.c.return_bell(b);
                    None
                }
            }
        });
        let Some((word, bell)) = lent else {
            let left = deadline.map(|t| t.saturating_duration_since(Instant::now()));
            let no_spin = Spin::new(Duration::ZERO);
            return match self
                .c
                .block_until(left, true, &no_spin, |_| ready(self).then_some(()))?
            {
                Some(()) => Ok(()),
                None => Err(io::ErrorKind::WouldBlock.into()),
            };
        };
        let fd = bell.fd.as_fd();
        let r = loop {
            // A new word for every sleep (the engine rings once per word),
            // stored (SeqCst) before this look: a change made after it
            // rings the bell.
            if !first {
                word.store(
                    softoe_abi::waiter_word(bell.index, next()),
                    Ordering::SeqCst,
                );
            }
            first = false;
            if ready(self) {
                break Ok(());
            }
            if self.c.dead() {
                break Err(crate::client::closed());
            }
            let now = Instant::now();
            if deadline.is_some_and(|t| now >= t) {
                break Err(io::ErrorKind::WouldBlock.into());
            }
            let nap = deadline.map_or(Duration::from_millis(100), |t| t - now);
            let signalled = self.c.nap(fd, nap.min(Duration::from_millis(100)));
            sys::drain(fd);
            // As in `Client::block_until`: a timed call is never restarted.
            if signalled && (deadline.is_some() || !sys::restart_after_signal()) {
                // What came meanwhile still counts.
                break if ready(self) {
                    Ok(())
                } else {
                    Err(io::ErrorKind::Interrupted.into())
                };
            }
        };
        word.store(0, Ordering::SeqCst);
        self.c.return_bell(bell);
        r
    }
}
