//! The watch's side of the straggler thread ([`Link`]): started when the watch runs (the
//! rendezvous's addresses resolved once, through the job step's `Meet` seam), and stopped with
//! it. The thread acts on what the first node concludes itself ([`Actor`]), so that the watch's
//! 1 s loop never waits for a meeting: the log, the live tag (`during` rows,
//! [`fabric_proto::check_id::JOB_STRAGGLER`] or [`fabric_proto::check_id::JOB_WORKLOAD_SLOW`], a
//! warning; the node's tag lock keeps it from interleaving with the loop's own tag writes), the
//! job's notice and the metrics. Nothing drains (`policy.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::exchange::{NodeSide, Records, Said, spawn};
use super::judge::{Event, Judge, Rules};
use super::session::{SessionExchange, rendezvous_meeting};
use super::{log_line, watch_event};
use crate::jobstep::meet::{MeetRequest, Meeting, meeting_id};
use crate::jobstep::policy::{self, Found, Phase};
use crate::jobstep::tag_write::{TagWrite, Target, write_tag_to};
use crate::jobstep::watch::{Act, NoticeFile, bump_metrics, events_path};
use crate::jobstep::{JobStep, Setup};
use crate::relay::{Relay, StdoutRelay};
use fabric_proto::notice::FabricNotice;
use fabric_proto::straggler::hop_ms;

/// How long after a hop's boundary a node makes its figure: `fabric-run` writes a step's
/// record as the step ends.
pub const SETTLE_MS: u64 = 300;

/// What the thread concluded, as the watch's last line counts it.
#[derive(Debug, Default)]
pub struct Counts {
    /// Stragglers named.
    pub named: AtomicU32,
    /// Slowdowns said to be the workload's.
    pub workload: AtomicU32,
}

/// Acts on the first node's events, in the straggler thread.
pub struct Actor {
    /// The watch's setup.
    pub setup: Setup,
    /// A job step per action (detached from the watch's loop).
    pub act: Box<dyn Act + Send>,
    /// The job's notice file (another handle on the watch's: every notice is one `write(2)`).
    pub notice: Option<NoticeFile>,
    /// The job's first node (a workload event goes in its row).
    pub leader: String,
    /// The hop, ms.
    pub hop_ms: u64,
    /// The window, ms.
    pub window_ms: u64,
    /// The prolog's time on this node.
    pub job_start_s: u64,
    /// What it concluded.
    pub counts: Arc<Counts>,
}

impl std::fmt::Debug for Actor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Actor")
            .field("leader", &self.leader)
            .finish_non_exhaustive()
    }
}

impl Actor {
    /// Acts on one thing the thread said.
    pub fn on(&mut self, said: Said) {
        let ev = match said {
            Said::Line(l) => {
                StdoutRelay.line(&format!("watch: {l}"));
                return;
            }
            Said::Event(ev) => ev,
        };
        match ev {
            Event::Named(_) => self.counts.named.fetch_add(1, Ordering::Relaxed),
            Event::Workload(_) => self.counts.workload.fetch_add(1, Ordering::Relaxed),
            Event::Cleared { .. } | Event::Silent { .. } => 0,
        };
        let line = log_line(&ev, self.hop_ms, self.window_ms);
        let Some((node, wev)) = watch_event(
            &ev,
            &self.leader,
            self.hop_ms,
            self.window_ms,
            self.job_start_s,
        ) else {
            tracing::info!("watch: {line}");
            return;
        };
        let setup = &self.setup;
        let action = policy::decide(Phase::Watch, Found::Straggler, &setup.plugin);
        self.act.with_step(setup, &mut |step: &JobStep<'_>| {
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
                    step.say(
                        "watch: the live tag was not written; the straggler is in this log only",
                    );
                }
            }
        });
        let metrics = setup
            .plugin
            .watch_textfile
            .as_deref()
            .and_then(|p| fabric_proto::plugin_args::expand_node(p, &setup.inv.node));
        if action.tag
            && let Some(m) = metrics.as_deref()
        {
            bump_metrics(&setup.state_dir, m, &setup.inv.node, &wev.check);
        }
        if action.tell_job
            && let Some(n) = self.notice.as_mut()
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

/// A running straggler thread, as the watch holds it.
#[derive(Debug)]
pub struct Link {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
    /// What it concluded so far (first node).
    pub counts: Arc<Counts>,
}

impl Link {
    /// Starts this node's straggler thread for the watch's job, or says why not (`None`):
    /// `straggler_window=0`, a one-node job, an `act` that cannot be detached, no rendezvous
    /// configuration, no thread.
    pub fn start(
        setup: &Setup,
        act: &dyn Act,
        job_start_s: u64,
        notice: Option<NoticeFile>,
        relay: &dyn Relay,
    ) -> Option<Link> {
        let window_s = setup.plugin.straggler_window_s;
        if window_s == 0 || setup.nodes.len() < 2 {
            return None;
        }
        let node = &setup.inv.node;
        let rank = setup.nodes.iter().position(|n| n == node)?;
        let detached = act.detached()?;
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
                    "watch: stragglers: job {}'s steps are not compared: {e}",
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
            exchange: Box::new(SessionExchange::new(
                setup.inv.job_id,
                rank,
                base.nodes.clone(),
                base.addrs.clone(),
                &base
                    .window
                    .candidates(meeting_id(setup.inv.job_id, Meeting::Stragglers(0))),
                Duration::from_millis(hop / 2),
                rendezvous_meeting(base, setup.inv.job_id, rank, Duration::from_millis(hop / 2)),
            )),
            judge: (rank == 0).then(|| Judge::new(Rules::default())),
            window_ms: window_s * 1000,
            hop_ms: hop,
            settle_ms: SETTLE_MS,
            events: Some(events_path(&setup.state_dir, setup.inv.job_id)),
        };
        let counts = Arc::new(Counts::default());
        let mut actor = Actor {
            setup: setup.clone(),
            act: detached,
            notice: if rank == 0 { notice } else { None },
            leader: setup.nodes[0].clone(),
            hop_ms: hop,
            window_ms: window_s * 1000,
            job_start_s,
            counts: counts.clone(),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let Some(handle) = spawn(side, stop.clone(), Box::new(move |s| actor.on(s))) else {
            relay.line(
                "watch: stragglers: no thread for the figures; this node's steps are not compared",
            );
            return None;
        };
        Some(Link {
            stop,
            handle: Some(handle),
            counts,
        })
    }

    /// Stops the thread: woken at once, it ends unless it is in a meeting (bounded by half a
    /// hop); it is given a moment, then left to the process's exit.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let until = Instant::now() + Duration::from_millis(200);
            while !h.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            if h.is_finished() {
                let _ = h.join();
            }
        }
    }
}
