//! The hop loop of one node's straggler thread, and its seam to the other nodes
//! ([`Exchange`]; the real one is [`RendezvousExchange`]: the job's MUNGE-authenticated
//! rendezvous, a meeting per hop at the first node, root's credentials only).
//!
//! At each hop boundary (Unix time a multiple of the hop, plus a settle for the last records
//! to land) every node reads its new records, makes its figure, and meets the first node; the
//! first node judges every figure it got ([`super::judge::Judge`]) and hands the events to the
//! watch's loop, which acts on them (tag, notice, metrics). No Slurm call: the nodes' addresses
//! are resolved once, when the watch opens.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fabric_net::rendezvous::typed::decode;
use fabric_net::rendezvous::{RendezvousConfig, gather};
use fabric_proto::straggler::WindowSteps;

use super::judge::{Event, Judge};
use super::steps::{MAX_READ_BYTES, StepTail};
use crate::jobstep::meet::{Meeting, meeting_id};
use crate::record::{JobDir, ReadLimits, RecordError};

/// One hop's meeting with the job's other nodes.
pub trait Exchange: Send {
    /// Sends this node's figure; the first node gets every node's figure back (its own
    /// included), a follower `Ok(None)`.
    fn meet(
        &mut self,
        hop: u64,
        mine: &WindowSteps,
    ) -> Result<Option<BTreeMap<String, WindowSteps>>, String>;
}

/// The real exchange: a rendezvous per hop (its id [`Meeting::Stragglers`]), bounded by
/// `timeout` (under a hop).
#[derive(Debug, Clone)]
pub struct RendezvousExchange {
    /// The job's rendezvous, its addresses resolved once.
    pub base: RendezvousConfig,
    /// The job id.
    pub job: u32,
    /// This node's rank.
    pub rank: usize,
    /// The longest a hop's meeting waits.
    pub timeout: Duration,
}

impl Exchange for RendezvousExchange {
    fn meet(
        &mut self,
        hop: u64,
        mine: &WindowSteps,
    ) -> Result<Option<BTreeMap<String, WindowSteps>>, String> {
        let mut cfg = self.base.clone();
        cfg.job_id = meeting_id(self.job, Meeting::Stragglers(hop));
        cfg.timeout = self.timeout;
        cfg.hard_deadline = Some(Instant::now() + self.timeout * 2);
        // One admitting thread is plenty for a figure a node a hop: the default pool of eight,
        // started at every meeting, cost the first node more than its MUNGE work (measured
        // with scripts/bench-stragglers, medians of three 120 s four-node jobs: 0.0147 % of a
        // core with eight and 1 s sleep slices, 0.0106 % with two and one sleep a hop, 0.0108 %
        // with one: the rest is the MUNGE work, two calls a follower).
        cfg.workers = 1;
        let payload = serde_json::to_value(mine).map_err(|e| e.to_string())?;
        let g = gather(&cfg, self.rank, &payload).map_err(|e| e.to_string())?;
        if g.my_rank != 0 {
            return Ok(None);
        }
        let met = decode::<WindowSteps>(&cfg.nodes, g);
        // A figure for another hop (a node whose clock is far off) is not this hop's.
        Ok(Some(
            met.payloads
                .into_iter()
                .filter(|(_, f)| f.hop == hop)
                .collect(),
        ))
    }
}

/// Where a node reads its records.
#[derive(Debug)]
pub struct Records {
    /// The job's verified spool folder.
    pub dir: JobDir,
    /// `<node>.jsonl`.
    pub name: String,
    /// The job's uid (the records' owner).
    pub job_uid: Option<u32>,
}

/// One node's straggler thread, before it starts.
pub struct NodeSide {
    /// This node's records (`None`: it sends empty figures, and still meets).
    pub records: Option<Records>,
    /// The meeting.
    pub exchange: Box<dyn Exchange>,
    /// The judge, on the first node only.
    pub judge: Option<Judge>,
    /// The window each figure covers.
    pub window_ms: u64,
    /// The time between figures.
    pub hop_ms: u64,
    /// How long after a hop's boundary its figure is made (records written at the boundary
    /// land first).
    pub settle_ms: u64,
    /// The watch's events file (`watch::events_path`): the node's own open fail-grade fault,
    /// sent with its figure, is read there.
    pub events: Option<PathBuf>,
}

impl std::fmt::Debug for NodeSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeSide")
            .field("records", &self.records)
            .field("leads", &self.judge.is_some())
            .field("window_ms", &self.window_ms)
            .field("hop_ms", &self.hop_ms)
            .finish_non_exhaustive()
    }
}

/// What the thread tells whoever acts: an event of a hop, or a line for the log.
#[derive(Debug, Clone, PartialEq)]
pub enum Said {
    /// The first node's verdict at a hop.
    Event(Event),
    /// A line for the slurmd log (a failed meeting, refused records), said once in a while.
    Line(String),
}

/// Now, Unix milliseconds.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl NodeSide {
    /// Reads the new records (bounded); a refusal is returned once as a line.
    fn follow(&mut self, tail: &mut StepTail) -> Option<String> {
        let r = self.records.as_ref()?;
        let limits = ReadLimits {
            owner_uid: r.job_uid,
            ..ReadLimits::default()
        };
        match r
            .dir
            .read_user_tail(&r.name, tail.offset, MAX_READ_BYTES, &limits)
        {
            Ok((bytes, size)) => {
                if size < tail.offset {
                    tail.restart();
                } else {
                    tail.feed(&bytes);
                }
                None
            }
            Err(RecordError::Missing(_)) => None,
            Err(e) => Some(format!("straggler figures: records skipped: {e}")),
        }
    }

    /// One hop: follow the records, make the figure, meet; the first node judges.
    pub fn hop(&mut self, tail: &mut StepTail, hop: u64, fault: Option<String>) -> Vec<Said> {
        let mut said = Vec::new();
        if let Some(line) = self.follow(tail) {
            said.push(Said::Line(line));
        }
        let end_ms = hop * self.hop_ms;
        let mine = tail.figure(hop, end_ms, self.window_ms, fault);
        match self.exchange.meet(hop, &mine) {
            Ok(Some(all)) => {
                if let Some(judge) = self.judge.as_mut() {
                    said.extend(judge.observe(hop, &all).into_iter().map(Said::Event));
                }
            }
            Ok(None) => {}
            Err(e) => said.push(Said::Line(format!(
                "straggler figures: hop {hop}'s meeting failed ({e})"
            ))),
        }
        said
    }

    /// The node's own open fail-grade fault, from the watch's events file.
    fn own_fault(&self) -> Option<String> {
        let path = self.events.as_ref()?;
        crate::jobstep::watch::read_events(path)
            .into_iter()
            .find(|e| !e.warn && e.cleared_at_s.is_none())
            .map(|e| e.check)
    }

    /// Runs until `stop`, handing what it concludes to `sink`.
    pub fn run(mut self, stop: &AtomicBool, sink: &mut dyn FnMut(Said)) {
        let mut tail = StepTail::default();
        let mut failures = 0u32;
        loop {
            let now = unix_ms();
            let hop = now / self.hop_ms + 1;
            let at = hop * self.hop_ms + self.settle_ms;
            if !sleep_until_ms(at, stop) {
                return;
            }
            let fault = self.own_fault();
            for s in self.hop(&mut tail, hop, fault) {
                let s = match s {
                    // One line in a hundred failures: a dead first node does not flood the log.
                    Said::Line(l) => {
                        failures += 1;
                        if failures % 100 != 1 {
                            continue;
                        }
                        Said::Line(l)
                    }
                    e => e,
                };
                sink(s);
            }
        }
    }
}

/// Sleeps until Unix millisecond `at`, false when `stop` was set meanwhile. The sleep is one
/// `park`: it wakes once a hop (a thread that woke five times a second spent more than its
/// figures, measured with `scripts/bench-stragglers`), and at once when the watch stops it
/// ([`std::thread::Thread::unpark`]).
fn sleep_until_ms(at: u64, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = unix_ms();
        if now >= at {
            return true;
        }
        std::thread::park_timeout(Duration::from_millis(at - now));
    }
}

/// Starts the thread, which hands what it concludes to `sink` until `stop`; `None` when the
/// system refused one (said by the caller: the job then runs without straggler figures from
/// this node).
pub fn spawn(
    side: NodeSide,
    stop: Arc<AtomicBool>,
    mut sink: Box<dyn FnMut(Said) + Send>,
) -> Option<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("stragglers".into())
        .stack_size(512 * 1024)
        .spawn(move || side.run(&stop, &mut *sink))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobstep::stragglers::judge::Rules;

    /// A meeting that hands back what it was given: the leader's sees every node at `ms`
    /// except its own figure, which is the node's real one.
    struct Fake {
        leader: bool,
        others: Vec<(&'static str, u64)>,
        fail: bool,
    }

    impl Exchange for Fake {
        fn meet(
            &mut self,
            hop: u64,
            mine: &WindowSteps,
        ) -> Result<Option<BTreeMap<String, WindowSteps>>, String> {
            if self.fail {
                return Err("no leader answered".into());
            }
            if !self.leader {
                return Ok(None);
            }
            let mut all: BTreeMap<String, WindowSteps> = self
                .others
                .iter()
                .map(|(n, ms)| {
                    (
                        (*n).to_owned(),
                        WindowSteps {
                            hop,
                            steps: 10,
                            median_ms: Some(*ms),
                            checkpoint: false,
                            fault: None,
                        },
                    )
                })
                .collect();
            all.insert("n1".into(), mine.clone());
            Ok(Some(all))
        }
    }

    fn side(fake: Fake) -> NodeSide {
        NodeSide {
            records: None,
            exchange: Box::new(fake),
            judge: Some(Judge::new(Rules::default())),
            window_ms: 10_000,
            hop_ms: 5_000,
            settle_ms: 0,
            events: None,
        }
    }

    fn steps(tail: &mut StepTail, hop: u64, ms: f64) {
        let end_s = (hop * 5) as f64;
        let line = format!(
            "{{\"v\":1,\"ts\":{},\"run\":\"r\",\"node\":\"n1\",\"type\":\"step\",\"duration_s\":{}}}\n",
            end_s - 0.5,
            ms / 1000.0
        );
        tail.feed(line.as_bytes());
    }

    #[test]
    fn the_first_node_judges_its_own_figure_with_the_others_and_names_itself_when_slow() {
        let mut s = side(Fake {
            leader: true,
            others: vec![("n2", 1000), ("n3", 1000), ("n4", 1000)],
            fail: false,
        });
        let mut tail = StepTail::default();
        let mut named = Vec::new();
        for hop in 1..12 {
            steps(&mut tail, hop, if hop >= 5 { 2000.0 } else { 1000.0 });
            for said in s.hop(&mut tail, hop, None) {
                if let Said::Event(Event::Named(n)) = said {
                    named.push((hop, n.node));
                }
            }
        }
        // Each window holds two steps (this hop's and the last): hop 5's is half slow (the
        // lower median is fast), hops 6, 7 and 8 are slow, and the third names it.
        assert_eq!(named, vec![(8, "n1".to_owned())]);
    }

    #[test]
    fn a_follower_concludes_nothing_and_a_failed_meeting_is_a_line_not_a_verdict() {
        let mut s = side(Fake {
            leader: false,
            others: vec![],
            fail: false,
        });
        s.judge = None;
        let mut tail = StepTail::default();
        steps(&mut tail, 1, 1000.0);
        assert!(s.hop(&mut tail, 1, None).is_empty());
        let mut s = side(Fake {
            leader: true,
            others: vec![],
            fail: true,
        });
        let said = s.hop(&mut tail, 2, None);
        assert_eq!(said.len(), 1);
        assert!(
            matches!(&said[0], Said::Line(l) if l.contains("hop 2's meeting failed (no leader answered)")),
            "{said:?}"
        );
    }

    #[test]
    fn a_sleeping_thread_told_to_stop_ends_at_once_not_at_its_next_hop() {
        let mut s = side(Fake {
            leader: true,
            others: vec![],
            fail: false,
        });
        // A hop of a minute: the thread sleeps toward its next boundary.
        s.hop_ms = 60_000;
        let stop = Arc::new(AtomicBool::new(false));
        let h = spawn(s, stop.clone(), Box::new(|_| {})).expect("a thread");
        std::thread::sleep(Duration::from_millis(100));
        let t0 = Instant::now();
        stop.store(true, Ordering::Relaxed);
        h.thread().unpark();
        h.join().unwrap();
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    }
}
