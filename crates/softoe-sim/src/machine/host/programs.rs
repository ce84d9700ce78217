//! The programs' calls: system calls on the kernel path, ring records with offload.

use super::*;

/// What a program does after a call.
enum Next {
    /// Runs again as soon as the CPU lets it.
    Continue,
    /// Sleeps until what it wants happens.
    Sleep(Want),
    /// Its part is done.
    Finished,
}

impl MachineNode {
    /// A program's call.
    pub(super) fn job_thread(&mut self, s: Instant, t: usize, woken: bool, job: &mut Job) {
        if woken {
            self.counters.thread_wakeups += 1;
            job.ns += self.prices.cal.wakeup.ns(1, 0, 1.0);
        }
        if let Some(c) = self.conns.get_mut(t) {
            c.notify_pending = false;
        }
        let next = if self.spec.offload {
            self.thread_offload(s, t, job)
        } else {
            self.thread_kernel(s, t, job)
        };
        let Some(c) = self.conns.get_mut(t) else {
            return;
        };
        c.thread = match next {
            Next::Continue => {
                job.after
                    .push(Ev::Arrive(Cpu::Host, Work::Thread { t, woken: false }));
                Thread::Queued
            }
            Next::Sleep(w) => Thread::Asleep(w),
            Next::Finished => Thread::Finished,
        };
    }

    /// Charges a data-moving call's `copy` and `app` for `n` bytes.
    fn charge_call(&mut self, job: &mut Job, n: u64, p: Progress) {
        let cal = &self.prices.cal;
        self.counters.copied_bytes += n;
        job.bytes += n;
        job.ns +=
            cal.copy.ns(1, n, self.prices.byte_factor) + cal.app.ns(u64::from(p.message), n, 1.0);
    }

    /// A program's call on the kernel path: a system call into the stack.
    fn thread_kernel(&mut self, s: Instant, t: usize, job: &mut Job) -> Next {
        let Some(c) = self.conns.get_mut(t) else {
            return Next::Finished;
        };
        if c.program.finished() {
            return Next::Finished;
        }
        let Some(h) = c.handle else {
            if let Some(peer) = self.peer
                && !c.connect_posted
            {
                c.connect_posted = true;
                self.counters.syscalls += 1;
                job.ns += self.prices.cal.syscall.ns(1, 0, 1.0);
                match self
                    .stack
                    .tcp_connect(s, Endpoint::new(peer, c.port), None, None)
                {
                    Ok(h) => {
                        c.handle = Some(h);
                        self.socks.insert(h, Sock::Conn(t));
                    }
                    Err(_) => {
                        c.program.fail();
                        return Next::Finished;
                    }
                }
                let mut dev = SimDev {
                    mem: self.pattern.bytes(),
                    out: &mut job.out,
                };
                self.stack.poll(s, &mut dev);
            }
            return Next::Sleep(Want::Connect);
        };
        if !c.connected {
            return Next::Sleep(Want::Connect);
        }
        let (n, p) = match c.program.next() {
            None => return Next::Finished,
            Some(Op::Write(want)) => {
                let mut done = 0u64;
                let mut failed = false;
                while done < want {
                    let pos = c.program.result.sent + done;
                    let r =
                        self.pattern
                            .payload(c.send_key, pos, (want - done).min(1 << 30) as u32);
                    match self.stack.tcp_send(h, r) {
                        Ok(0) => break,
                        Ok(k) => done += k as u64,
                        Err(SendError::Failed(_)) => {
                            failed = true;
                            break;
                        }
                        Err(_) => break,
                    }
                }
                if failed {
                    c.program.fail();
                    return Next::Finished;
                }
                if done == 0 {
                    return Next::Sleep(Want::Space);
                }
                (done, c.program.wrote(done, s))
            }
            Some(Op::Read(want)) => {
                let pos = c.program.result.received;
                let (key, pattern) = (c.recv_key, &self.pattern);
                let res = self.stack.tcp_recv_with(h, |a, b| {
                    let k = ((a.len() + b.len()) as u64).min(want) as usize;
                    let ka = k.min(a.len());
                    let kb = k - ka;
                    let ok = pattern.matches(key, pos, a.get(..ka).unwrap_or(&[]))
                        && pattern.matches(key, pos + ka as u64, b.get(..kb).unwrap_or(&[]));
                    (k, (k as u64, ok))
                });
                match res {
                    Ok((0, _)) => return Next::Sleep(Want::Data),
                    Ok((k, ok)) => {
                        c.program.result.corrupt |= !ok;
                        (k, c.program.got(k, s))
                    }
                    Err(RecvError::Failed(_) | RecvError::Finished | RecvError::InvalidHandle) => {
                        c.program.fail();
                        return Next::Finished;
                    }
                    Err(_) => return Next::Sleep(Want::Data),
                }
            }
        };
        job.progress = Some((t, p));
        self.counters.syscalls += 1;
        job.ns += self.prices.cal.syscall.ns(1, 0, 1.0);
        self.charge_call(job, n, p);
        let mut dev = SimDev {
            mem: self.pattern.bytes(),
            out: &mut job.out,
        };
        self.stack.poll(s, &mut dev);
        if p.finished {
            Next::Finished
        } else {
            Next::Continue
        }
    }

    /// Posts a command to the engine at the end of the job.
    fn post(&mut self, job: &mut Job, t: usize, cmd: Cmd) {
        let cal = &self.prices.cal;
        self.counters.commands += 1;
        self.counters.ring_accesses += 1;
        job.ns +=
            cal.command.ns(1, 0, 1.0) + cal.ring_access.ns(1, 0, 1.0) * self.prices.ring_factor;
        job.after
            .push(Ev::Arrive(Cpu::Engine, Work::Command { conn: t, cmd }));
    }

    /// A program's call with offload: rings, not system calls.
    fn thread_offload(&mut self, s: Instant, t: usize, job: &mut Job) -> Next {
        let ring = self.prices.cal.ring_access.ns(1, 0, 1.0) * self.prices.ring_factor;
        let (tx_ring, active) = (self.tx_ring, self.peer.is_some());
        let Some(c) = self.conns.get_mut(t) else {
            return Next::Finished;
        };
        if c.inbox > 0 {
            self.counters.ring_accesses += c.inbox;
            job.ns += ring * c.inbox as f64;
            c.inbox = 0;
        }
        if c.program.finished() {
            return Next::Finished;
        }
        if !c.connected {
            if active && !c.connect_posted {
                c.connect_posted = true;
                self.post(job, t, Cmd::Connect);
            }
            return Next::Sleep(Want::Connect);
        }
        let mut credit = false;
        let mut send = None;
        let (n, p) = match c.program.next() {
            None => return Next::Finished,
            Some(Op::Write(want)) => {
                let used = c.program.result.sent.saturating_sub(c.acked_pub);
                let room = tx_ring.saturating_sub(used);
                if room == 0 {
                    return Next::Sleep(Want::Space);
                }
                let k = want.min(room);
                send = Some(k);
                (k, c.program.wrote(k, s))
            }
            Some(Op::Read(want)) => {
                let avail = c.placed_pub.saturating_sub(c.program.result.received);
                if avail == 0 {
                    return Next::Sleep(Want::Data);
                }
                let k = want.min(avail);
                self.counters.ring_accesses += 1;
                job.ns += ring;
                if c.rx_blocked {
                    // The engine waits for room: ring its doorbell.
                    c.rx_blocked = false;
                    credit = true;
                }
                (k, c.program.got(k, s))
            }
        };
        job.progress = Some((t, p));
        self.charge_call(job, n, p);
        if let Some(k) = send {
            self.post(job, t, Cmd::Send(k));
        }
        if credit {
            self.post(job, t, Cmd::Credit);
        }
        if p.finished {
            Next::Finished
        } else {
            Next::Continue
        }
    }

    /// Kernel path: socket events wake the programs waiting for them.
    pub(super) fn kernel_events(&mut self, job: &mut Job) {
        while let Some((h, ev)) = self.stack.poll_event() {
            let (i, ev) = match self.socks.get(&h).copied() {
                Some(Sock::Listener(i)) => {
                    if !ev.contains(Events::READABLE) || !self.accept(h, i) {
                        continue;
                    }
                    (i, Events::CONNECTED | Events::READABLE)
                }
                Some(Sock::Conn(i)) => (i, ev),
                None => continue,
            };
            let Some(c) = self.conns.get_mut(i) else {
                continue;
            };
            let closed = ev.contains(Events::CLOSED);
            if closed {
                c.program.fail();
            }
            if ev.contains(Events::CONNECTED) {
                c.connected = true;
            }
            let wakes = match c.thread {
                Thread::Asleep(Want::Connect) => c.connected || closed,
                Thread::Asleep(Want::Data) => ev.contains(Events::READABLE) || closed,
                Thread::Asleep(Want::Space) => {
                    ev.contains(Events::WRITABLE) || ev.contains(Events::ACKED) || closed
                }
                Thread::Queued | Thread::Finished => false,
            };
            if wakes {
                c.thread = Thread::Queued;
                job.after
                    .push(Ev::Arrive(Cpu::Host, Work::Thread { t: i, woken: true }));
            }
        }
    }
}
