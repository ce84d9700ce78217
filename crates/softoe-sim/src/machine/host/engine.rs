//! The engine's side of the host interface: commands taken, rings filled, completions posted.

use super::*;

impl MachineNode {
    /// The engine takes a command.
    pub(super) fn job_command(&mut self, s: Instant, t: usize, cmd: Cmd, job: &mut Job) {
        self.counters.ring_accesses += 1;
        job.ns += self.prices.cal.ring_access.ns(1, 0, 1.0) * self.prices.ring_factor;
        let peer = self.peer;
        let Some(c) = self.conns.get_mut(t) else {
            return;
        };
        match cmd {
            Cmd::Connect => {
                let Some(peer) = peer else { return };
                match self
                    .stack
                    .tcp_connect(s, Endpoint::new(peer, c.port), None, None)
                {
                    Ok(h) => {
                        c.handle = Some(h);
                        self.socks.insert(h, Sock::Conn(t));
                    }
                    Err(_) => c.program.fail(),
                }
                let mut dev = SimDev {
                    mem: self.pattern.bytes(),
                    out: &mut job.out,
                };
                self.stack.poll(s, &mut dev);
            }
            Cmd::Send(k) => c.unsent += k,
            Cmd::Credit => {}
        }
    }

    /// Offload: the engine's side of the rings for every connection the
    /// job touched — send what was posted, copy what arrived into the
    /// receive ring, note what was acknowledged — then publish.
    pub(super) fn engine_pass(&mut self, s: Instant, command_conns: Vec<usize>, job: &mut Job) {
        let mut touched = command_conns;
        let mut published: Vec<usize> = Vec::new();
        for _ in 0..8 {
            while let Some((h, ev)) = self.stack.poll_event() {
                match self.socks.get(&h).copied() {
                    Some(Sock::Listener(i))
                        if ev.contains(Events::READABLE) && self.accept(h, i) =>
                    {
                        if let Some(c) = self.conns.get_mut(i) {
                            c.engine_connected = true;
                        }
                        touched.push(i);
                    }
                    Some(Sock::Listener(_)) => {}
                    Some(Sock::Conn(i)) => {
                        if let Some(c) = self.conns.get_mut(i) {
                            if ev.contains(Events::CONNECTED) {
                                c.engine_connected = true;
                            }
                            if ev.contains(Events::CLOSED) {
                                c.program.fail();
                            }
                        }
                        touched.push(i);
                    }
                    None => {}
                }
            }
            if touched.is_empty() {
                break;
            }
            touched.sort_unstable();
            touched.dedup();
            let mut acted = false;
            for i in touched.drain(..) {
                acted |= self.engine_conn(i, job);
                published.push(i);
            }
            if !acted {
                break;
            }
            let mut dev = SimDev {
                mem: self.pattern.bytes(),
                out: &mut job.out,
            };
            self.stack.poll(s, &mut dev);
        }
        published.sort_unstable();
        published.dedup();
        for i in published {
            if let Some(c) = self.conns.get(i) {
                job.after.push(Ev::Publish {
                    conn: i,
                    acked: c.engine_acked,
                    placed: c.engine_placed,
                    connected: c.engine_connected,
                    failed: c.program.result.failed,
                });
            }
        }
    }

    /// The engine's work on connection `i`; returns whether it changed the
    /// stack (so that it must be polled again).
    pub(super) fn engine_conn(&mut self, i: usize, job: &mut Job) -> bool {
        let (rx_ring, byte_factor) = (self.rx_ring, self.prices.byte_factor);
        let Some(c) = self.conns.get_mut(i) else {
            return false;
        };
        let Some(h) = c.handle else {
            return false;
        };
        let mut acted = false;
        // Send what the program posted.
        while c.unsent > 0 {
            let pos = c.engine_sent;
            let r = self
                .pattern
                .payload(c.send_key, pos, c.unsent.min(1 << 30) as u32);
            match self.stack.tcp_send(h, r) {
                Ok(0) => break,
                Ok(k) => {
                    c.unsent = c.unsent.saturating_sub(k as u64);
                    c.engine_sent += k as u64;
                    acted = true;
                }
                Err(SendError::Failed(_)) => {
                    c.program.fail();
                    break;
                }
                Err(_) => break,
            }
        }
        if let Ok(a) = self.stack.tcp_acked(h) {
            c.engine_acked = c.engine_acked.max(a);
        }
        // Copy what arrived into the receive ring, as far as it has room.
        let room =
            rx_ring.saturating_sub(c.engine_placed.saturating_sub(c.program.result.received));
        let pos = c.engine_placed;
        let (key, pattern) = (c.recv_key, &self.pattern);
        let res = self.stack.tcp_recv_with(h, |a, b| {
            let avail = (a.len() + b.len()) as u64;
            let k = avail.min(room) as usize;
            let ka = k.min(a.len());
            let kb = k - ka;
            let ok = pattern.matches(key, pos, a.get(..ka).unwrap_or(&[]))
                && pattern.matches(key, pos + ka as u64, b.get(..kb).unwrap_or(&[]));
            (k, (k as u64, avail, ok))
        });
        match res {
            Ok((k, avail, ok)) => {
                c.program.result.corrupt |= !ok;
                c.rx_blocked = avail > k;
                if k > 0 {
                    c.engine_placed += k;
                    acted = true;
                    self.counters.copied_bytes += k;
                    job.bytes += k;
                    job.ns += self.prices.cal.copy.ns(1, k, byte_factor);
                }
            }
            Err(RecvError::Failed(_) | RecvError::Finished) => c.program.fail(),
            Err(_) => {}
        }
        acted
    }

    /// The engine's view of connection `i` reaches the host; a program
    /// sleeping for what it shows is sent a completion.
    pub(super) fn publish(
        &mut self,
        at: Instant,
        i: usize,
        acked: u64,
        placed: u64,
        connected: bool,
        failed: bool,
    ) {
        let tx_ring = self.tx_ring;
        let Some(c) = self.conns.get_mut(i) else {
            return;
        };
        c.acked_pub = c.acked_pub.max(acked);
        c.placed_pub = c.placed_pub.max(placed);
        c.connected |= connected;
        if failed {
            c.program.fail();
        }
        let ready = match c.thread {
            Thread::Asleep(Want::Connect) => c.connected || failed,
            Thread::Asleep(Want::Data) => c.placed_pub > c.program.result.received || failed,
            Thread::Asleep(Want::Space) => {
                // Like Linux's write-space rule: a writer sleeping on a full
                // ring is woken when half of it is free (or all it still
                // has to write fits), not for every acknowledgement.
                let free =
                    tx_ring.saturating_sub(c.program.result.sent.saturating_sub(c.acked_pub));
                let want = (tx_ring / 2).min(c.program.write_need()).max(1);
                free >= want || failed
            }
            Thread::Queued | Thread::Finished => false,
        };
        if !ready || c.notify_pending {
            return;
        }
        if let (Thread::Asleep(w), Some(sp)) = (c.thread, c.spinning.take()) {
            // The program spun while it waited: it sees the ring itself if
            // its spin still runs, and then needs no completion.
            let max = self.spec.host_spin;
            let waited = at.saturating_duration_since(sp.since);
            let caught = at <= sp.until && !sp.budget.is_zero();
            if let Some(b) = c.spins.get_mut(w.index()) {
                b.ended(waited, sp.budget, max);
            }
            let spun = if caught { waited } else { sp.budget };
            self.counters.spin_ns += spun.as_nanos() as u64;
            if caught {
                self.counters.spin_caught += 1;
                c.thread = Thread::Queued;
                self.arrive(at, Cpu::Host, Work::Thread { t: i, woken: false });
                return;
            }
        }
        c.notify_pending = true;
        self.arrive(at, Cpu::Engine, Work::Notify { conn: i });
    }

    /// A program thread's job ended at `finish`: if it went to sleep (with
    /// offload), it spins first, for the budget its kind of wait has
    /// learnt.
    pub(super) fn start_spin(&mut self, t: usize, finish: Instant) {
        if !self.spec.offload || self.spec.host_spin.is_zero() {
            return;
        }
        let max = self.spec.host_spin;
        let Some(c) = self.conns.get_mut(t) else {
            return;
        };
        c.spinning = match c.thread {
            Thread::Asleep(w) => c.spins.get_mut(w.index()).map(|b| {
                let budget = b.next(max);
                Spinning {
                    since: finish,
                    until: finish + budget,
                    budget,
                }
            }),
            _ => None,
        };
    }
}
