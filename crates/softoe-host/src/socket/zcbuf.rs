//! Buffers in the shared data area, sent by reference or copied by the
//! engine, and their release.

use std::io;

use softoe_abi::{RingSpan, errno};

use super::ZcBuf;
use crate::client::Client;
use crate::errno::errno_err;

impl Client {
    /// A zero-copy buffer of `len` bytes in the shared region.
    pub fn zc_buf(&self, len: usize) -> io::Result<ZcBuf> {
        let off = self.alloc(len as u64)?;
        Ok(ZcBuf {
            c: self.clone(),
            off,
            len: len as u64,
            in_flight: None,
            sent: 0,
            outcome: None,
        })
    }
}

impl ZcBuf {
    /// Its offset in the data area: what a command naming it carries (for
    /// programs and tests that speak the ABI directly).
    pub fn offset(&self) -> u64 {
        self.off
    }

    /// `len` bytes at `at` of this buffer, as a data-area span.
    fn span(&self, at: usize, len: usize) -> io::Result<RingSpan> {
        if at as u64 + len as u64 > self.len {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        Ok(RingSpan {
            offset: self.off + at as u64,
            len: len as u64,
        })
    }

    /// Copies `dst.len()` bytes out from `at` (what the engine placed
    /// there by a `RECV` into the data area, or what was written).
    pub fn read_at(&self, at: usize, dst: &mut [u8]) -> io::Result<()> {
        let span = self.span(at, dst.len())?;
        if !dst.is_empty() && !self.c.region().ring_read(span, 0, dst) {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        Ok(())
    }

    /// Copies `src` in at `at` (refused while the buffer is in flight).
    pub fn write_at(&mut self, at: usize, src: &[u8]) -> io::Result<()> {
        if self.in_flight.is_some() && !self.released() {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                "buffer still in flight",
            ));
        }
        let span = self.span(at, src.len())?;
        if !src.is_empty() && !self.c.region().ring_write(span, 0, src) {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        Ok(())
    }

    /// Whether the engine has given the buffer back (always true when it
    /// was never sent zero-copy).
    pub fn released(&mut self) -> bool {
        match self.in_flight {
            None => true,
            Some(tag) => match self.c.take_release(tag) {
                Some(c) => {
                    self.in_flight = None;
                    self.outcome = Some(c.outcome());
                    true
                }
                None => false,
            },
        }
    }

    /// Waits until the buffer is released, and says whether everything
    /// the last send named reached the peer: an error if the connection
    /// failed or closed first (with how much was sent).
    pub fn wait_released(&mut self) -> io::Result<()> {
        if let Some(tag) = self.in_flight {
            let c = self
                .c
                .block_until(None, false, &self.c.inner.release_spin, |d| {
                    d.released.remove(&tag)
                })?
                .ok_or_else(|| errno_err(errno::ECONNABORTED))?;
            self.in_flight = None;
            self.outcome = Some(c.outcome());
        }
        match self.outcome.take() {
            Some(Err(e)) => Err(errno_err(e)),
            Some(Ok(r)) if r < self.sent => Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("the connection closed with {r} of {} bytes sent", self.sent),
            )),
            _ => Ok(()),
        }
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for ZcBuf {
    fn drop(&mut self) {
        let tag = self.in_flight;
        match tag {
            Some(tag) if !self.released() => {
                self.c.free_on_release(tag, vec![(self.off, self.len)]);
            }
            _ => self.c.free(self.off, self.len),
        }
    }
}
