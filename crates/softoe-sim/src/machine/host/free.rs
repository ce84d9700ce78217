//! The short path of a node whose every event is free (the `ideal` peer).
//!
//! When nothing costs anything and nothing waits — no bus, a zero
//! calibration, a polling CPU without coalescing, no offload — every job
//! would start and end at the instant its cause arrived. Running them
//! through the agenda would give the same answers at several times the
//! wall-clock cost, and the ideal peer handles half the frames of every
//! run; so such a node handles each frame as it arrives, like
//! [`StackNode`](crate::StackNode): the stack takes it, and then every
//! program that can move runs, until none can. Its programs' calls are the
//! same code as the kernel path's (their charges are all zero).

use super::*;

/// Most program calls at one instant before the node declares itself
/// stalled.
const CALLS_PER_INSTANT: u32 = 1 << 20;

impl NodeSpec {
    /// Whether every event of this node is free and immediate.
    pub fn is_free(&self) -> bool {
        !self.offload
            && self.bus.is_none()
            && self.nic.polling
            && self.coalesce.is_zero()
            && self
                .calibration
                .stages()
                .iter()
                .all(|(_, c)| c.c0 == 0.0 && c.c1 == 0.0)
    }
}

impl MachineNode {
    /// A frame arrives at a free node.
    pub(super) fn free_receive(
        &mut self,
        now: Instant,
        frame: &[u8],
        info: RxInfo,
        out: &mut Vec<SimFrame>,
    ) {
        self.counters.rx_frames += 1;
        self.counters.rx_segments += 1;
        let meta = RxMeta {
            csum_verified: info.csum_verified || self.spec.nic.csum,
            gso_size: info.gso_size,
        };
        let mut job = Job::new();
        let mut dev = SimDev {
            mem: self.pattern.bytes(),
            out: &mut job.out,
        };
        // As the agenda's receive job does it (`job_rx`): a frame the NIC
        // coalesces is taken as a batch of one.
        let batching = self.spec.offload || self.spec.nic.gro;
        if batching {
            self.stack.begin_batch();
        }
        self.stack.receive(now, frame, meta, &mut dev);
        if batching {
            self.stack.end_batch(now, &mut dev);
        } else {
            self.stack.poll(now, &mut dev);
        }
        self.free_settle(now, job, out);
    }

    /// A free node's deadline: the stack's timers, programs ready to run.
    pub(super) fn free_poll(&mut self, now: Instant, out: &mut Vec<SimFrame>) {
        let mut job = Job::new();
        if self.stack.poll_at().is_some_and(|t| t <= now) {
            let mut dev = SimDev {
                mem: self.pattern.bytes(),
                out: &mut job.out,
            };
            self.stack.poll(now, &mut dev);
        }
        self.free_settle(now, job, out);
    }

    /// Runs every program that can move, and the stack after each, until
    /// none can; everything emitted leaves at once.
    fn free_settle(&mut self, now: Instant, mut job: Job, out: &mut Vec<SimFrame>) {
        let mut calls = 0u32;
        loop {
            self.kernel_events(&mut job);
            self.counters.tx_frames += job.out.len() as u64;
            out.append(&mut job.out);
            for ev in job.after.drain(..) {
                if let Ev::Arrive(Cpu::Host, Work::Thread { t, .. }) = ev {
                    self.ready.push_back(t);
                }
            }
            let Some(t) = self.ready.pop_front() else {
                break;
            };
            calls += 1;
            if calls > CALLS_PER_INSTANT {
                self.stalled = true;
                break;
            }
            self.job_thread(now, t, false, &mut job);
            if let Some((t, p)) = job.progress.take()
                && let Some(c) = self.conns.get_mut(t)
            {
                c.program.served(p, now);
            }
        }
    }

    /// When a free node next needs to be polled.
    pub(super) fn free_poll_at(&self) -> Option<Instant> {
        if !self.ready.is_empty() {
            return Some(Instant::ZERO);
        }
        self.stack.poll_at()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::config::{MachineConfig, PeerModel};
    use crate::machine::predict::build;

    /// The short path is a shortcut, not another model: the ideal peer run
    /// through the agenda as zero-length jobs gives the same run. Several
    /// loss rates: at 1 % alone the runs happened to agree while the short
    /// path took a coalesced frame outside a batch (2 % and up then fired a
    /// probe 16 µs apart).
    #[test]
    fn the_short_path_runs_as_the_agenda_would() {
        for (kind, loss) in [WorkloadKind::Stream, WorkloadKind::Rr]
            .into_iter()
            .flat_map(|k| [0.01, 0.02, 0.05].map(|l| (k, l)))
        {
            let mut cfg = MachineConfig::default();
            cfg.peer.model = PeerModel::Ideal;
            cfg.workload.kind = kind;
            cfg.workload.bytes = 1 << 20;
            cfg.workload.requests = 100;
            cfg.workload.message = 3000;
            cfg.workload.connections = 2;
            cfg.link.loss = loss;
            let run = |free: bool| {
                let mut mw = build(&cfg, &Calibration::default()).unwrap();
                let peer = mw.world.node_mut::<MachineNode>(mw.peer).unwrap();
                assert!(peer.free, "the ideal peer takes the short path");
                peer.free = free;
                let (h, p) = (mw.host, mw.peer);
                let done = mw.world.run_while(Instant::from_secs(60), |w| {
                    let f = |n| w.node::<MachineNode>(n).unwrap().finished();
                    f(h) && f(p)
                });
                assert!(done);
                let results: Vec<ConnResult> = [h, p]
                    .iter()
                    .flat_map(|&n| mw.world.node::<MachineNode>(n).unwrap().results().cloned())
                    .collect();
                let host = mw.world.node::<MachineNode>(h).unwrap();
                (results, host.event_hash(), mw.world.trace_hash())
            };
            let short = run(true);
            let long = run(false);
            assert_eq!(short, long, "{kind:?} at {loss} loss");
            assert!(short.0.iter().all(|r| !r.corrupt && !r.failed));
        }
    }
}
