//! The programs on a machine: stream sources and sinks, request/response
//! clients and servers, one thread per connection.
//!
//! A program here is only the order of its calls — write a message, read a
//! message — and what it measures; *what a call costs* and *how long it
//! waits* is the machine's business ([`MachineNode`](super::MachineNode)).
//! Each call moves at most the rest of the current message, so a
//! `message`-byte write that the socket takes in pieces is several calls,
//! and a read never spans two messages. Every byte read is checked against
//! the sender's [`Pattern`](crate::Pattern) stream at its offset, as the
//! crate's other workloads do.

use core::time::Duration;

use serde::Serialize;
use softoe_stack::Instant;

use super::config::WorkloadKind;

/// What one end of a connection does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Writes `bytes` in `message`-byte writes as fast as the socket takes
    /// them.
    Source,
    /// Reads everything, `message` bytes per call at most.
    Sink,
    /// Sends a request, reads the response, `requests` times, timing each.
    RrClient,
    /// Reads a request, sends a response, `requests` times.
    RrServer,
}

impl Role {
    /// The role of the end that sends (`sends`) or receives the workload's
    /// data.
    pub fn of(kind: WorkloadKind, sends: bool) -> Role {
        match (kind, sends) {
            (WorkloadKind::Stream, true) => Role::Source,
            (WorkloadKind::Stream, false) => Role::Sink,
            (WorkloadKind::Rr, true) => Role::RrClient,
            (WorkloadKind::Rr, false) => Role::RrServer,
        }
    }

    /// Whether this end's completion ends the run (the sink has read
    /// everything; the client has had every answer).
    pub fn measures(self) -> bool {
        matches!(self, Role::Sink | Role::RrClient)
    }
}

/// What one end of a connection saw.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConnResult {
    /// The connection's number.
    pub id: u32,
    /// Bytes the program handed to the socket (or the send ring).
    pub sent: u64,
    /// Bytes the program read.
    pub received: u64,
    /// Messages completed (written or read whole).
    pub messages: u64,
    /// A byte read was not the one the sender wrote at that offset.
    pub corrupt: bool,
    /// The connection failed (reset, timed out) or could not be opened.
    pub failed: bool,
    /// When the program first moved data (the start of that call's
    /// service).
    pub first_data: Option<Instant>,
    /// When it finished its part: a sink's or client's last read served,
    /// a source's or server's last write served.
    pub done_at: Option<Instant>,
    /// Round-trip times (rr clients): from the start of the call that
    /// writes a request to the end of the call that reads the last byte
    /// of its response.
    pub rtts: Vec<Duration>,
}

/// What the thread does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// Write up to this many bytes.
    Write(u64),
    /// Read up to this many bytes.
    Read(u64),
}

/// What a call that moved `n` bytes completed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Progress {
    /// A message was completed (charge the application's per-message work).
    pub(crate) message: bool,
    /// A round trip ended (an rr client read the last byte of a response).
    pub(crate) round_trip: bool,
    /// This end has done its whole part.
    pub(crate) finished: bool,
}

/// One end of one connection: the program's state.
#[derive(Clone, Debug)]
pub(crate) struct Program {
    pub(crate) role: Role,
    message: u64,
    /// Stream: bytes to move; rr: round trips.
    total: u64,
    /// The phase: writing (true) or reading.
    writing: bool,
    /// Bytes left of the current message.
    left: u64,
    /// Completed round trips (rr).
    rounds: u64,
    /// When the current request's first write began (rr client).
    request_start: Option<Instant>,
    pub(crate) result: ConnResult,
}

impl Program {
    /// The program for `role` on connection `id`.
    pub(crate) fn new(id: u32, role: Role, message: u32, bytes: u64, requests: u64) -> Program {
        let message = u64::from(message.max(1));
        let (total, writing) = match role {
            Role::Source => (bytes, true),
            Role::Sink => (bytes, false),
            Role::RrClient => (requests, true),
            Role::RrServer => (requests, false),
        };
        let left = match role {
            Role::Source | Role::Sink => message.min(total),
            Role::RrClient | Role::RrServer => message,
        };
        Program {
            role,
            message,
            total,
            writing,
            left,
            rounds: 0,
            request_start: None,
            result: ConnResult {
                id,
                ..ConnResult::default()
            },
        }
    }

    /// Whether this end has done its part.
    pub(crate) fn finished(&self) -> bool {
        self.result.failed
            || match self.role {
                Role::Source => self.result.sent >= self.total,
                Role::Sink => self.result.received >= self.total,
                Role::RrClient | Role::RrServer => self.rounds >= self.total,
            }
    }

    /// The next call, or `None` when finished.
    pub(crate) fn next(&self) -> Option<Op> {
        if self.finished() || self.left == 0 {
            return None;
        }
        Some(if self.writing {
            Op::Write(self.left)
        } else {
            Op::Read(self.left)
        })
    }

    /// Bytes the program still has to write before it next reads: the rest
    /// of a source's stream, or of an rr message.
    pub(crate) fn write_need(&self) -> u64 {
        if !self.writing || self.finished() {
            return 0;
        }
        match self.role {
            Role::Source => self.total.saturating_sub(self.result.sent),
            _ => self.left,
        }
    }

    /// `n` bytes were written by a call that began at `s`.
    pub(crate) fn wrote(&mut self, n: u64, s: Instant) -> Progress {
        if n == 0 {
            return Progress::default();
        }
        self.result.first_data.get_or_insert(s);
        if self.role == Role::RrClient && self.left == self.message {
            self.request_start = Some(s);
        }
        self.result.sent += n;
        self.left = self.left.saturating_sub(n);
        let mut p = Progress::default();
        if self.left == 0 {
            p.message = true;
            self.result.messages += 1;
            match self.role {
                Role::Source => {
                    self.left = self
                        .message
                        .min(self.total - self.result.sent.min(self.total))
                }
                Role::RrClient => {
                    self.writing = false;
                    self.left = self.message;
                }
                Role::RrServer => {
                    self.rounds += 1;
                    self.writing = false;
                    self.left = self.message;
                }
                Role::Sink => {}
            }
        }
        p.finished = self.finished();
        p
    }

    /// `n` bytes were read by a call that began at `s`.
    pub(crate) fn got(&mut self, n: u64, s: Instant) -> Progress {
        if n == 0 {
            return Progress::default();
        }
        self.result.first_data.get_or_insert(s);
        self.result.received += n;
        self.left = self.left.saturating_sub(n);
        let mut p = Progress::default();
        if self.left == 0 {
            p.message = true;
            self.result.messages += 1;
            match self.role {
                Role::Sink => {
                    let rest = self.total - self.result.received.min(self.total);
                    self.left = self.message.min(rest);
                }
                Role::RrClient => {
                    self.rounds += 1;
                    p.round_trip = true;
                    self.writing = true;
                    self.left = self.message;
                }
                Role::RrServer => {
                    self.writing = true;
                    self.left = self.message;
                }
                Role::Source => {}
            }
        }
        p.finished = self.finished();
        p
    }

    /// The call that began with progress `p` ended at `finish`: record the
    /// round trip and the end of the program's part.
    pub(crate) fn served(&mut self, p: Progress, finish: Instant) {
        if p.round_trip
            && let Some(t) = self.request_start.take()
        {
            self.result.rtts.push(finish.saturating_duration_since(t));
        }
        if p.finished && self.result.done_at.is_none() {
            self.result.done_at = Some(finish);
        }
    }

    /// The connection failed.
    pub(crate) fn fail(&mut self) {
        self.result.failed = true;
    }
}

/// Where a connection's socket is, on the machine that runs the stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sock {
    /// A listener waiting for connection `usize`.
    Listener(usize),
    /// Connection `usize`.
    Conn(usize),
}

/// Pattern key of the data the active (connecting) end sends on
/// connection `id`.
pub(crate) fn key_from_active(id: u32) -> u64 {
    u64::from(id) * 104_729 + 17
}

/// Pattern key of the data the passive (accepting) end sends.
pub(crate) fn key_from_passive(id: u32) -> u64 {
    u64::from(id) * 130_363 + 400_009
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Instant = Instant::ZERO;

    #[test]
    fn a_source_writes_messages_until_its_total() {
        let mut p = Program::new(0, Role::Source, 100, 250, 0);
        assert_eq!(p.next(), Some(Op::Write(100)));
        assert!(!p.wrote(60, T).message);
        assert_eq!(p.next(), Some(Op::Write(40)));
        assert!(p.wrote(40, T).message);
        assert!(p.wrote(100, T).message);
        assert_eq!(p.next(), Some(Op::Write(50)), "the last message is short");
        let last = p.wrote(50, T);
        assert!(last.message && last.finished);
        assert_eq!(p.next(), None);
        assert_eq!(p.result.messages, 3);
    }

    #[test]
    fn an_rr_client_alternates_and_times_each_round_trip() {
        let mut c = Program::new(0, Role::RrClient, 10, 0, 2);
        let at = Instant::from_micros;
        assert_eq!(c.next(), Some(Op::Write(10)));
        c.wrote(10, at(1));
        assert_eq!(c.next(), Some(Op::Read(10)));
        let p = c.got(4, at(5));
        c.served(p, at(6));
        let p = c.got(6, at(7));
        assert!(p.round_trip && !p.finished);
        c.served(p, at(9));
        assert_eq!(c.result.rtts, vec![Duration::from_micros(8)]);
        c.wrote(10, at(10));
        let p = c.got(10, at(20));
        assert!(p.finished);
        c.served(p, at(21));
        assert_eq!(c.result.rtts.len(), 2);
        assert_eq!(c.result.done_at, Some(at(21)));
        assert_eq!(c.next(), None);
    }

    #[test]
    fn an_rr_server_answers_each_request() {
        let mut s = Program::new(0, Role::RrServer, 10, 0, 1);
        assert_eq!(s.next(), Some(Op::Read(10)));
        assert!(s.got(10, T).message);
        assert_eq!(s.next(), Some(Op::Write(10)));
        assert!(s.wrote(10, T).finished);
        assert!(!Role::RrServer.measures() && Role::RrClient.measures());
    }
}
