//! Jobs on the stack's CPU — receive, timers, what follows the stack's work — and the NIC and bus around them.

use super::*;

impl MachineNode {
    /// A received frame is in host memory: interrupt moderation.
    pub(super) fn nic_rx(&mut self, at: Instant, frame: Vec<u8>, info: RxInfo) {
        self.rx_pending.push_back((frame, info));
        if self.rx_scheduled && self.spec.nic.napi {
            // Masked: the job queued or running, or the one after it,
            // takes it.
            return;
        }
        if self.spec.nic.polling {
            self.raise(at, false);
            return;
        }
        self.irq_count += 1;
        if self.irq_count >= self.spec.nic.coalesce_frames {
            self.raise(at, true);
        } else if !self.irq_timer_armed && !self.spec.coalesce.is_zero() {
            self.irq_generation += 1;
            self.irq_timer_armed = true;
            let generation = self.irq_generation;
            self.push(at + self.spec.coalesce, Ev::IrqTimer { generation });
        }
    }

    /// Queues a receive job (after an interrupt if `irq`) and masks
    /// interrupts.
    pub(super) fn raise(&mut self, at: Instant, irq: bool) {
        self.rx_scheduled = true;
        self.rx_jobs += 1;
        self.irq_count = 0;
        self.irq_timer_armed = false;
        self.irq_generation += 1;
        let cpu = self.stack_cpu();
        self.arrive(at, cpu, Work::Rx { irq });
    }

    /// Serves a DMA of `bytes` in `transactions` arriving at `at`; returns
    /// when it is done.
    pub(super) fn dma(&mut self, at: Instant, transactions: u64, bytes: u64, code: u8) -> Instant {
        let Some(b) = self.spec.bus else {
            return at;
        };
        self.counters.dma_transactions += transactions;
        self.counters.dma_bytes += bytes;
        match self.bus.serve(at, dur(b.ns(transactions, bytes))) {
            Ok(s) => {
                self.fold(s.start, code, bytes, s.service());
                s.finish
            }
            // Out of order cannot happen (events are handled in time
            // order); were it to, the frame goes at once rather than never.
            Err(_) => at,
        }
    }

    pub(super) fn tx_dma(&mut self, at: Instant, frames: Vec<SimFrame>) {
        for (i, f) in frames.into_iter().enumerate() {
            // The first frame of a batch also fetches the descriptors.
            let transactions = if i == 0 { 2 } else { 1 };
            let done = self.dma(at, transactions, f.bytes.len() as u64, 9);
            self.push(done, Ev::Emit(f));
        }
    }

    /// Folds one job — (start, kind, bytes, service) — into the event log:
    /// FNV-1a over 64-bit words. Each step is a bijection of the hash, so
    /// logs that differ in one record hash differently.
    pub(super) fn fold(&mut self, at: Instant, code: u8, bytes: u64, service: Duration) {
        let words = [
            at.total_nanos(),
            u64::from(code),
            bytes,
            service.as_nanos() as u64,
        ];
        for w in words {
            self.log = (self.log ^ w).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// Re-reads the stack's next deadline and schedules a timer job for it.
    pub(super) fn arm_deadline(&mut self, now: Instant) {
        let Some(t) = self.stack.poll_at() else {
            return;
        };
        let t = t.max(now);
        if self.deadline.is_none_or(|d| t < d) {
            self.deadline = Some(t);
            self.push(t, Ev::Deadline(t));
        }
    }

    /// The head of `cpu`'s queue starts at `s`.
    pub(super) fn start(&mut self, cpu: Cpu, s: Instant) {
        let st = self.cpu_mut(cpu);
        let Some((arrival, work)) = st.queue.pop_front() else {
            st.start_scheduled = false;
            return;
        };
        let idle = arrival.saturating_duration_since(st.server.free_at());
        let slept = st.spin.is_some_and(|spin| idle > spin);
        let mut job = Job::new();
        if slept && !matches!(work, Work::Thread { .. }) {
            self.counters.core_wakeups += 1;
            job.ns += self.prices.cal.wakeup.ns(1, 0, 1.0);
        }
        let mut runs_stack = true;
        let mut command_conns = Vec::new();
        match work {
            Work::Rx { irq } => self.job_rx(s, irq, &mut job),
            Work::Timer => self.job_timer(s, &mut job),
            Work::Thread { t, woken } => {
                runs_stack = !self.spec.offload;
                self.job_thread(s, t, woken, &mut job);
            }
            Work::Command { conn, cmd } => {
                // The engine drains its command rings in one pass, as the
                // real one does each turn: every command queued by now is
                // taken by this job, and the stack then sends what they
                // posted together (a TSO frame of many small writes, not a
                // frame per write).
                let mut cmds = vec![(conn, cmd)];
                let queue = &mut self.cpu_mut(cpu).queue;
                let mut i = 0;
                while i < queue.len() {
                    match queue.get(i) {
                        Some(&(_, Work::Command { conn, cmd })) => {
                            queue.remove(i);
                            cmds.push((conn, cmd));
                        }
                        _ => i += 1,
                    }
                }
                for (conn, cmd) in cmds {
                    command_conns.push(conn);
                    self.job_command(s, conn, cmd, &mut job);
                }
            }
            Work::Notify { conn } => {
                runs_stack = false;
                self.counters.completions += 1;
                self.counters.ring_accesses += 1;
                let c = &self.prices.cal;
                job.ns += c.completion.ns(1, 0, 1.0)
                    + c.ring_access.ns(1, 0, 1.0) * self.prices.ring_factor;
                job.after.push(Ev::Complete { conn });
            }
        }
        if runs_stack {
            self.after_stack(s, command_conns, &mut job);
        }
        let served = match self.cpu_mut(cpu).server.serve(arrival, dur(job.ns)) {
            Ok(x) => x,
            Err(_) => {
                // Arrivals are queued in time order; were one not, stop
                // rather than serve it out of order.
                self.stalled = true;
                return;
            }
        };
        let finish = served.finish;
        self.counters.jobs += 1;
        if let Work::Thread { t, .. } = work {
            self.start_spin(t, finish);
        }
        self.fold(s, work.code(), job.bytes, served.service());
        if let Some((t, p)) = job.progress
            && let Some(c) = self.conns.get_mut(t)
        {
            c.program.served(p, finish);
        }
        if !job.out.is_empty() {
            let frames = core::mem::take(&mut job.out);
            self.push(finish, Ev::TxDma(frames));
        }
        for ev in job.after {
            self.push(finish, ev);
        }
        let st = self.cpu_mut(cpu);
        match st.queue.front() {
            Some(&(a, _)) => {
                let at = a.max(finish);
                self.push(at, Ev::Start(cpu));
            }
            None => st.start_scheduled = false,
        }
    }

    /// A receive job: the frames that have arrived, GRO, the stack.
    pub(super) fn job_rx(&mut self, s: Instant, irq: bool, job: &mut Job) {
        let cal = &self.prices.cal;
        if irq {
            self.counters.interrupts += 1;
            job.ns += cal.interrupt.ns(1, 0, 1.0);
        }
        let n = self.rx_pending.len().min(RX_BUDGET);
        let mut frames = Vec::with_capacity(n);
        for _ in 0..n {
            if let Some(f) = self.rx_pending.pop_front() {
                frames.push(f);
            }
        }
        for (f, _) in &frames {
            let len = f.len() as u64;
            job.bytes += len;
            job.ns += cal.port_rx.ns(1, len, 1.0);
            if !self.spec.nic.csum {
                self.counters.csum_bytes += len;
                job.ns += cal.csum.ns(1, len, self.prices.byte_factor);
            }
        }
        let delivered = if self.spec.nic.gro {
            gro(frames, self.spec.nic.csum)
        } else {
            frames
                .into_iter()
                .map(|(f, info)| {
                    let meta = RxMeta {
                        csum_verified: info.csum_verified || self.spec.nic.csum,
                        gso_size: info.gso_size,
                    };
                    (f, meta)
                })
                .collect()
        };
        let batching = self.spec.offload || self.spec.nic.gro;
        if batching {
            self.stack.begin_batch();
        }
        for (f, meta) in &delivered {
            self.counters.rx_segments += 1;
            job.ns += cal.stack_rx.ns(1, f.len() as u64, 1.0);
            let mut dev = SimDev {
                mem: self.pattern.bytes(),
                out: &mut job.out,
            };
            self.stack.receive(s, f, *meta, &mut dev);
        }
        let mut dev = SimDev {
            mem: self.pattern.bytes(),
            out: &mut job.out,
        };
        if batching {
            self.stack.end_batch(s, &mut dev);
        } else {
            self.stack.poll(s, &mut dev);
        }
        job.after.push(Ev::RxDone);
    }

    /// A timer job: the stack's deadlines.
    pub(super) fn job_timer(&mut self, s: Instant, job: &mut Job) {
        if self.stack.poll_at().is_some_and(|t| t <= s) {
            self.counters.timers += 1;
            job.ns += self.prices.cal.timer.ns(1, 0, 1.0);
        }
        let mut dev = SimDev {
            mem: self.pattern.bytes(),
            out: &mut job.out,
        };
        self.stack.poll(s, &mut dev);
    }

    /// After the stack ran in a job: its events, the engine's rings, the
    /// frames it emitted, its next deadline.
    pub(super) fn after_stack(&mut self, s: Instant, command_conns: Vec<usize>, job: &mut Job) {
        if self.spec.offload {
            self.engine_pass(s, command_conns, job);
        } else {
            self.kernel_events(job);
        }
        let cal = &self.prices.cal;
        for f in &job.out {
            let len = f.bytes.len() as u64;
            self.counters.tx_frames += 1;
            job.bytes += len;
            job.ns += cal.stack_tx.ns(1, len, 1.0) + cal.port_tx.ns(1, len, 1.0);
            if !self.spec.nic.csum {
                self.counters.csum_bytes += len;
                job.ns += cal.csum.ns(1, len, self.prices.byte_factor);
            }
        }
        self.arm_deadline(s);
    }

    /// Accepts a connection on listener `h` for connection `i`.
    pub(super) fn accept(&mut self, h: SocketHandle, i: usize) -> bool {
        let Ok(Some(a)) = self.stack.tcp_accept(h) else {
            return false;
        };
        let Some(c) = self.conns.get_mut(i) else {
            return false;
        };
        c.handle = Some(a);
        self.socks.insert(a, Sock::Conn(i));
        self.socks.remove(&h);
        true
    }
}

/// GRO over a receive job's frames: consecutive in-order segments of one
/// flow are merged ([`nic::coalesce`]) and marked verified (a NIC without
/// checksum offload has them checksummed in software, which the job pays
/// as `csum`); a frame left alone is verified only if the NIC checksums.
/// (The world's links lose frames but never corrupt them here, so the
/// checksums are not recomputed to find out.)
fn gro(frames: Vec<(Vec<u8>, RxInfo)>, nic_csum: bool) -> Vec<(Vec<u8>, RxMeta)> {
    let run: Vec<Vec<u8>> = frames.into_iter().map(|(f, _)| f).collect();
    if run.len() == 1 {
        return run
            .into_iter()
            .map(|f| {
                let meta = RxMeta {
                    csum_verified: nic_csum,
                    gso_size: None,
                };
                (f, meta)
            })
            .collect();
    }
    nic::coalesce(run)
        .into_iter()
        .map(|(f, gso)| {
            let meta = RxMeta {
                csum_verified: nic_csum || gso.is_some(),
                gso_size: gso,
            };
            (f, meta)
        })
        .collect()
}
