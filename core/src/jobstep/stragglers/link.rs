//! The watch's side of the straggler thread ([`Link`]): started when the watch runs (the
//! rendezvous's addresses resolved once, through the job step's `Meet` seam), told of the
//! node's own faults by the loop, and, on the first node, acting on what the thread concluded:
//! the log, the live tag (`during` rows, [`fabric_proto::check_id::JOB_STRAGGLER`] or
//! [`fabric_proto::check_id::JOB_WORKLOAD_SLOW`], a warning), the job's notice and the
//! metrics; nothing drains (`policy.rs`).

use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError, channel};
use std::time::{Duration, Instant};

use super::exchange::{NodeSide, Records, RendezvousExchange, Said, Shared, spawn};
use super::judge::{Event, Judge, Rules};
use super::{log_line, watch_event};
use crate::jobstep::meet::{MeetRequest, Meeting};
use crate::jobstep::policy::{self, Found, Phase};
use crate::jobstep::tag_write::{TagWrite, Target, write_tag_to};
use crate::jobstep::watch::{Act, NoticeFile, bump_metrics};
use crate::jobstep::{JobStep, Setup};
use crate::relay::Relay;
use fabric_proto::notice::FabricNotice;
use fabric_proto::straggler::hop_ms;

/// How long after a hop's boundary a node makes its figure: `fabric-run` writes a step's
/// record as the step ends.
pub const SETTLE_MS: u64 = 300;

/// What the straggler thread concluded, as the watch's summary counts it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts {
    /// Nodes named stragglers.
    pub named: Vec<String>,
    /// Slowdowns said to be the workload's.
    pub workload: u32,
}

/// A running straggler thread, as the watch holds it.
#[derive(Debug)]
pub struct Link {
    rx: Receiver<Said>,
    shared: Shared,
    handle: Option<std::thread::JoinHandle<()>>,
    leader: String,
    hop_ms: u64,
    window_ms: u64,
    job_start_s: u64,
    /// What it concluded so far.
    pub counts: Counts,
}

impl Link {
    /// Starts this node's straggler thread for the watch's job, or says why not (`None`):
    /// `straggler_window=0`, a one-node job, no rendezvous configuration, no thread.
    pub fn start(
        setup: &Setup,
        act: &dyn Act,
        job_start_s: u64,
        relay: &dyn Relay,
    ) -> Option<Link> {
        let window_s = setup.plugin.straggler_window_s;
        if window_s == 0 || setup.nodes.len() < 2 {
            return None;
        }
        let node = &setup.inv.node;
        let rank = setup.nodes.iter().position(|n| n == node)?;
        let hop = hop_ms(window_s);
        let req = MeetRequest {
            job_id: setup.inv.job_id,
            meeting: Meeting::Stragglers(0),
            nodes: setup.nodes.clone(),
            rank,
            timeout: Duration::from_millis(hop / 2),
            deadline: Instant::now() + Duration::from_secs(30),
        };
        let mut base = None;
        act.with_step(setup, &mut |step: &JobStep<'_>| {
            base = Some(step.seams.meet.config(&req));
        });
        let base = match base? {
            Ok(b) => b,
            Err(e) => {
                relay.line(&format!(
                    "stragglers: not compared for job {}: {e}",
                    setup.inv.job_id
                ));
                return None;
            }
        };
        let records = crate::record::open_job_dir(
            &setup.plugin.spool_dir,
            setup.inv.job_id,
            setup.inv.job_uid,
            relay,
        )
        .map(|dir| Records {
            dir,
            name: format!("{node}.jsonl"),
            job_uid: setup.inv.job_uid,
        });
        let side = NodeSide {
            records,
            exchange: Box::new(RendezvousExchange {
                base,
                job: setup.inv.job_id,
                rank,
                timeout: Duration::from_millis(hop / 2),
            }),
            judge: (rank == 0).then(|| Judge::new(Rules::default())),
            window_ms: window_s * 1000,
            hop_ms: hop,
            settle_ms: SETTLE_MS,
        };
        let shared = Shared::default();
        let (tx, rx) = channel();
        let Some(handle) = spawn(side, shared.clone(), tx) else {
            relay.line("stragglers: no thread for the figures; this node's steps are not compared");
            return None;
        };
        Some(Link {
            rx,
            shared,
            handle: Some(handle),
            leader: setup.nodes[0].clone(),
            hop_ms: hop,
            window_ms: window_s * 1000,
            job_start_s,
            counts: Counts::default(),
        })
    }

    /// The node's own fail-grade fault now (a check id), sent with its next figures.
    pub fn set_fault(&self, fault: Option<&str>) {
        if let Ok(mut f) = self.shared.fault.lock() {
            *f = fault.map(str::to_owned);
        }
    }

    /// Acts on what the thread concluded since the last call (first node only has events).
    pub fn act(&mut self, setup: &Setup, act: &dyn Act, mut notice: Option<&mut NoticeFile>) {
        let metrics = setup
            .plugin
            .watch_textfile
            .as_deref()
            .and_then(|p| fabric_proto::plugin_args::expand_node(p, &setup.inv.node));
        loop {
            let said = match self.rx.try_recv() {
                Ok(s) => s,
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return,
            };
            let ev = match said {
                Said::Line(l) => {
                    tracing::info!("{l}");
                    continue;
                }
                Said::Event(ev) => ev,
            };
            self.count(&ev);
            let line = log_line(&ev, self.hop_ms, self.window_ms);
            let Some((node, wev)) = watch_event(
                &ev,
                &self.leader,
                self.hop_ms,
                self.window_ms,
                self.job_start_s,
            ) else {
                tracing::info!("{line}");
                continue;
            };
            let action = policy::decide(Phase::Watch, Found::Straggler, &setup.plugin);
            act.with_step(setup, &mut |step| {
                step.say(&format!(
                    "watch: {line} (policy={} → {})",
                    setup.plugin.policy.as_str(),
                    action.words()
                ));
                if action.tag {
                    let w = write_tag_to(step, Target::LiveOnly, |prev| {
                        let mut t = prev.unwrap_or_default();
                        crate::jobstep::tag_update::add_watch_event(&mut t, &node, wev.clone());
                        t
                    });
                    if w == TagWrite::NotWritten {
                        step.say("watch: the live tag was not written; the straggler is in this log only");
                    }
                }
            });
            if action.tag
                && let Some(m) = metrics.as_deref()
            {
                bump_metrics(&setup.state_dir, m, &setup.inv.node, &wev.check);
            }
            if action.tell_job
                && let Some(n) = notice.as_deref_mut()
            {
                let mut msg = FabricNotice::new(
                    setup.inv.job_id,
                    &node,
                    &wev.check,
                    &wev.message,
                    wev.seen_at_s,
                );
                msg.into_job_s = wev.into_job_s;
                msg.warn = true;
                if let Err(e) = n.append(&msg) {
                    tracing::warn!("cannot write the notice {}: {e}", n.path().display());
                }
            }
        }
    }

    fn count(&mut self, ev: &Event) {
        match ev {
            Event::Named(n) => self.counts.named.push(n.node.clone()),
            Event::Workload(_) => self.counts.workload += 1,
            Event::Cleared { .. } | Event::Silent { .. } => {}
        }
    }

    /// Stops the thread (it ends within a slice of its sleep, or when its meeting times out).
    pub fn stop(mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            // Bounded: its sleep is sliced and its meeting bounded by the hop; a thread still
            // in a meeting is left to the process's exit.
            let until = Instant::now() + Duration::from_millis(self.hop_ms);
            while !h.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            if h.is_finished() {
                let _ = h.join();
            }
        }
    }
}
