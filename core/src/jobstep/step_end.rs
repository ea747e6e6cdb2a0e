//! `fabric-check step-end`: the run summary in the live tag at the end of each `fabric-run`
//! step, while the job still runs.
//!
//! The plugin spawns it as root from slurmstepd's `slurm_spank_exit` on the step's first node
//! (node id 0 of the step), after the step's tasks have ended and before slurmstepd tells
//! slurmctld the step is complete (`job_manager` in `src/slurmd/slurmstepd/mgr.c`), so the job
//! is live and `scontrol update` stores the tag as given: plain JSON (see
//! `docs/slurm-versions.md` for what each release allows at which callback).
//!
//! What it does, on this node only:
//!
//! - reads this node's `fabric-run` records (`<spool_dir>/<job>/<node>.jsonl`, the job user's
//!   file, read with the epilog's rules: no links, the job's owner, bounded sizes); when none of
//!   them names this step (`step_id`), it stops without one Slurm call (the batch script's step,
//!   [`BATCH_STEP_ID`], ends after every step it started and takes any record: a batch script
//!   whose last command is `srun fabric-run` ends, and the job with it, while that step's own
//!   end may still be running, which then finds the job completing);
//! - summarises the whole file (every step so far on this node: the summary is a function of the
//!   records, not a running sum, so writing it again never counts a step twice);
//! - writes it as the tag's `run` (reported by the job, never a reason to drain) through the
//!   tag writer's one read and one write, live only: a job that is already completing is left
//!   to its epilog, which merges every node's records and writes the job's summary over this
//!   one; the records stay for it. When the merged summary is the one this node's step ends
//!   last put in the live tag (`<state_dir>/step-run-written-<job>.json`), there is nothing to
//!   write and the tag is not even read: the batch script's end after the last step's end (it
//!   waited for that end, below) costs slurmctld nothing.
//!
//! A step on several nodes: every node of the step runs `step-end` (the plugin passes the step's
//! nodes, in their order), and they meet at the step's first node as the prolog's nodes meet
//! at the job's ([`super::meet::deliver`], a meeting of this step's own): each sends its
//! records summarised ([`StepEndPayload`]; a follower makes no Slurm call), and the first node
//! merges them with the epilog's rule ([`record::merge_nodes`]) into the live tag. It keeps the
//! summaries it received in root's state folder (`<state_dir>/step-runs-<job>.json`), so that a
//! later one-node end (the batch script's, whose nodes are only the first) merges the same
//! nodes again instead of writing its own node's summary over theirs. The epilog, which merges
//! every node's records once more, then finds the tag already holding its result and writes
//! nothing: the tag stays plain JSON in `sacct`. It writes (in the `b32:` database form, the
//! job having ended) only when something changed after the last step's end: a counter rose, a
//! node's records grew, a node that no step end heard from.
//!
//! What a peer sends is the job's (its records are user-written): reported by the job, never a
//! reason to drain, bounded like the epilog's payload.
//!
//! The batch script's end waits for the step ends still in flight on its node. Slurm 24.11's
//! `srun` returns as soon as the step's tasks end, so a batch script whose last command is a
//! multi-node `srun fabric-run` ends while that step's end on this node (the leader of its
//! meeting) is still gathering; without the wait the batch end would write what it knew (its
//! own node and the earlier meetings), the job would complete, slurmstepd would kill the step's
//! end before its write, and the epilog would find the followers' records new and write the tag
//! after the job, in the database's `b32:` form. So, on each node, with no thread and bounded:
//!
//! - every numbered step's end holds a shared `flock` on `<state_dir>/step-ends-<job>` (root's)
//!   from its start (before the meeting) until after its tag write, then appends its step id
//!   there ("this step's end is over") and lets the lock go; shared, so that steps ending at
//!   once never wait for each other;
//! - the batch script's end, before it reads the kept summaries and writes, polls
//!   ([`STEP_END_POLL`]) for the exclusive lock (held by nobody: no step end in flight) and for
//!   every step its node's records name to be listed as over. It stops waiting when both hold,
//!   at its budget ([`crate::deadline::Budget::step_end_wait`], never past its deadline), or
//!   when a step named in the records is still not over after [`STEP_END_GRACE`] with no step
//!   end holding the lock (that step's end never came: killed, timed out, never spawned).
//!
//! Why the records and not the lock alone: the lock closes nothing in the window between the
//! batch end's start and the moment the last step's end is spawned and takes it (slurmstepd
//! spawns it from `slurm_spank_exit` after the tasks end, which races `srun`'s return). The
//! records close that window without any timing guess: a step whose records are on this node
//! and whose end is not listed as over is an end still to come, so the batch end waits for it
//! (a grace only bounds an end that never comes); and when every step is listed as over, the
//! batch end does not wait at all. A job user can only make it wait the grace (records naming
//! steps that never ran): bounded, and nothing is lost.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::JobStep;
use super::meet::{Delivery, deliver};
use super::payload::StepEndPayload;
use super::tag_write::{TagWrite, Target, write_tag_to};
use crate::record;
use fabric_proto::invocation::{BATCH_STEP_ID, FIRST_SPECIAL_STEP_ID, JobStepExit};
use fabric_proto::tag::RunSummary;

/// What the step's end did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepEnd {
    /// No record of this step on this node (or none readable): no Slurm call was made.
    NoRecords,
    /// The summary went into the tag (or was already there).
    Written(TagWrite),
    /// A follower of a multi-node step: its summary reached the step's first node.
    Delivered,
    /// A follower whose summary did not reach the first node (said why); the epilog has it.
    NotDelivered,
}

/// `fabric-check step-end`: always lets the step end normally.
pub fn run(step: &JobStep<'_>) -> JobStepExit {
    let _ = end_of_step(step);
    step.say(&JobStepExit::Proceed.line());
    JobStepExit::Proceed
}

/// The work of [`run`], with what came of it.
pub fn end_of_step(step: &JobStep<'_>) -> StepEnd {
    let setup = step.setup;
    let job = setup.inv.job_id;
    let step_id = setup.inv.step_id;
    let _span = tracing::info_span!("step_end", job, node = %setup.inv.node).entered();
    if !super::policy::tags(setup.plugin.policy) {
        return StepEnd::NoRecords;
    }
    let Some(step_id) = step_id else {
        step.say("step-end without --step-id: nothing to do");
        return StepEnd::NoRecords;
    };
    // A numbered step's end is in flight on this node until this is dropped (after its write).
    let _in_flight = (step_id != BATCH_STEP_ID).then(|| InFlight::begin(step, step_id));
    let (own, named) = own_payload(step, step_id);
    if setup.nodes.len() < 2 {
        // A one-node step (or the batch script's): no meeting.
        if !own.this_step {
            return StepEnd::NoRecords;
        }
        let Some(run) = own.run else {
            return StepEnd::NoRecords;
        };
        if step_id == BATCH_STEP_ID {
            // What the steps' ends on this node heard goes into the kept summaries first.
            wait_for_step_ends(step, &named);
        }
        return write(step, step_id, [(step.node().to_owned(), run)].into());
    }
    match deliver(step, own) {
        Delivery::Leader(met) => {
            if !met.payloads.values().any(|p| p.this_step) {
                return StepEnd::NoRecords;
            }
            let runs: BTreeMap<String, RunSummary> = met
                .payloads
                .into_iter()
                .filter_map(|(node, p)| Some((node, p.run?)))
                .collect();
            write(step, step_id, runs)
        }
        Delivery::Acknowledged => StepEnd::Delivered,
        Delivery::Failed(_) => {
            step.say(&format!(
                "step {job}.{step_id}: this node's run summary did not reach the step's first node; the epilog gathers it"
            ));
            StepEnd::NotDelivered
        }
    }
}

/// This node's records, summarised, and whether one of them names step `step_id` (the batch
/// script's end comes after every step it started: any record will do there); with the
/// numbered steps the records name (the job's words: only ever a reason to wait a bounded
/// while).
fn own_payload(step: &JobStep<'_>, step_id: u32) -> (StepEndPayload, BTreeSet<u32>) {
    let setup = step.setup;
    let (spool, job, uid) = (&setup.plugin.spool_dir, step.job_id(), setup.inv.job_uid);
    let Some(dir) = record::open_job_dir(spool, job, uid, step.seams.relay) else {
        return Default::default();
    };
    let Some((_, recs)) =
        record::read_node_records(spool, job, uid, step.node(), &dir, step.seams.relay)
    else {
        return Default::default();
    };
    let steps: BTreeSet<u32> = recs
        .records
        .iter()
        .filter_map(|r| r.meta.step_id.as_deref()?.parse::<u32>().ok())
        .filter(|id| *id < FIRST_SPECIAL_STEP_ID)
        .collect();
    let named = step_id == BATCH_STEP_ID || steps.contains(&step_id);
    let run = record::summarize(&recs);
    let own = StepEndPayload {
        this_step: named && run.is_some(),
        run,
    };
    (own, steps)
}

/// How long the batch script's end waits for the end of a step its node's records name when no
/// step end holds the lock: the time slurmstepd takes to spawn an end that is still to come
/// (an end that never comes costs the batch end this, once).
pub const STEP_END_GRACE: Duration = Duration::from_secs(2);

/// How often the batch script's end looks again at the step ends in flight.
pub const STEP_END_POLL: Duration = Duration::from_millis(20);

/// The most bytes of the list of steps whose end is over that are read (a line per step end).
const MAX_STEP_ENDS_BYTES: u64 = 1 << 20;

/// A numbered step's end in flight on this node: a shared lock on `<state_dir>/step-ends-<job>`
/// (see the module docs); dropped, it lists its step as over and lets the lock go.
struct InFlight {
    file: Option<std::fs::File>,
    step_id: u32,
}

/// The file of the step ends of this node's share of the job: lock and list of the steps whose
/// end is over (root's; removed by the epilog).
fn step_ends_path(step: &JobStep<'_>) -> PathBuf {
    record::step_ends_path(&step.setup.state_dir, step.job_id())
}

/// Opens (creating) [`step_ends_path`] for appending, said when it cannot be.
fn open_step_ends(step: &JobStep<'_>) -> Option<std::fs::File> {
    let path = step_ends_path(step);
    match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        Ok(f) => Some(f),
        Err(e) => {
            step.say(&format!(
                "cannot open the step ends' file {} ({e}); the batch script's end will not wait for this one",
                path.display()
            ));
            None
        }
    }
}

impl InFlight {
    /// Takes the shared lock. Only the batch end's brief look holds it exclusively, so this
    /// retries a few times, then goes on unlocked (said): this end is then listed when it is
    /// over, which the batch end also waits for.
    fn begin(step: &JobStep<'_>, step_id: u32) -> Self {
        use rustix::fs::{FlockOperation, flock};
        let file = open_step_ends(step);
        if let Some(f) = &file {
            let until = Instant::now() + step.deadline().limit(Duration::from_millis(200));
            while flock(f, FlockOperation::NonBlockingLockShared).is_err() {
                if Instant::now() >= until {
                    step.say("the step ends' lock is held; this step's end goes on unlocked");
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Self { file, step_id }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(f) = &mut self.file {
            // One short append (`O_APPEND`): whole even when steps end at once.
            let _ = f.write_all(format!("{}\n", self.step_id).as_bytes());
        }
        // Closing the file lets the lock go.
    }
}

/// The steps whose end on this node is over, as listed (bounded; an unreadable list is empty).
fn steps_ended(step: &JobStep<'_>) -> BTreeSet<u32> {
    let mut text = String::new();
    if let Ok(f) = std::fs::File::open(step_ends_path(step)) {
        let _ = f.take(MAX_STEP_ENDS_BYTES).read_to_string(&mut text);
    }
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// Whether some step's end holds the lock now (a look: the exclusive lock, let go at once).
fn step_end_in_flight(file: &std::fs::File) -> bool {
    use rustix::fs::{FlockOperation, flock};
    if flock(file, FlockOperation::NonBlockingLockExclusive).is_ok() {
        let _ = flock(file, FlockOperation::Unlock);
        false
    } else {
        true
    }
}

/// The most step ids a line of the batch end's wait names; the others are counted.
pub const NAMED_STEP_IDS: usize = 8;

/// Steps for a log line: `step(s) 1, 2, 3`, or past [`NAMED_STEP_IDS`] the first of them and
/// how many more. The steps come from the job's records, which may name any number of them:
/// listed in full they would crowd root's own later lines out of the output the plugin relays.
fn steps_in_brief(ids: &[u32]) -> String {
    let named: Vec<String> = ids
        .iter()
        .take(NAMED_STEP_IDS)
        .map(u32::to_string)
        .collect();
    match ids.len().saturating_sub(NAMED_STEP_IDS) {
        0 => format!("step(s) {}", named.join(", ")),
        more => format!("{} steps: {} and {more} more", ids.len(), named.join(", ")),
    }
}

/// The batch script's end: waits, polling and bounded (see the module docs), until no step end
/// holds the lock and every step in `named` is listed as over, so that the kept summaries hold
/// what the steps' meetings heard. Returns at once when nothing is in flight or to come.
fn wait_for_step_ends(step: &JobStep<'_>, named: &BTreeSet<u32>) {
    let Some(file) = open_step_ends(step) else {
        return;
    };
    let start = Instant::now();
    let until = start + step.setup.budget().step_end_wait(step.deadline());
    let mut quiet_since = start;
    let mut said = false;
    loop {
        let busy = step_end_in_flight(&file);
        let ended = steps_ended(step);
        let pending: Vec<u32> = named.difference(&ended).copied().collect();
        if !busy && pending.is_empty() {
            if said {
                step.say(&format!(
                    "the step ends on this node are over after {} ms",
                    start.elapsed().as_millis()
                ));
            }
            return;
        }
        let now = Instant::now();
        if busy {
            quiet_since = now;
        }
        let why = if now >= until {
            Some("this end's budget is spent")
        } else if now >= quiet_since + STEP_END_GRACE {
            Some("no step end is running")
        } else {
            None
        };
        if let Some(why) = why {
            step.say(&format!(
                "writing without waiting longer for the end of {} on this node ({why} after {} ms); the epilog merges the rest",
                steps_in_brief(&pending),
                start.elapsed().as_millis()
            ));
            return;
        }
        if !said {
            step.say(&format!(
                "waiting for the step ends on this node (in flight: {busy}; not over yet: {})",
                steps_in_brief(&pending)
            ));
            said = true;
        }
        std::thread::sleep(STEP_END_POLL.min(until.saturating_duration_since(now)));
    }
}

/// Writes the summary of `fresh` (node → its summary now) and of the nodes earlier step ends
/// heard from into the live tag, keeping what was heard for the next end.
fn write(step: &JobStep<'_>, step_id: u32, fresh: BTreeMap<String, RunSummary>) -> StepEnd {
    let job = step.job_id();
    let heard = fresh.len();
    if let Some(unchanged) = unchanged_since_last_write(step, &fresh) {
        step.say(&format!(
            "step {job}.{step_id}: the run summary is the one this node's step ends last wrote ({} step(s)); the tag is not read again",
            unchanged.steps
        ));
        return StepEnd::Written(TagWrite::Unchanged);
    }
    let mut merged = None;
    let written = write_tag_to(step, Target::LiveOnly, |prev| {
        // Under the node's tag lock: the read-modify-write of the kept summaries too.
        let mut all = PeerRuns::load(step);
        all.extend(fresh);
        PeerRuns::keep(step, &all);
        let runs: Vec<RunSummary> = all.into_values().collect();
        let mut t = prev.unwrap_or_default();
        if let Some(run) = record::merge_nodes(&runs) {
            merged = Some(run.clone());
            t.run = Some(run);
        }
        t
    });
    if let (TagWrite::Live | TagWrite::Unchanged, Some(run)) = (&written, &merged) {
        WrittenRun::keep(step, run);
    }
    if matches!(written, TagWrite::Live | TagWrite::Unchanged) {
        step.say(&format!(
            "step {job}.{step_id}: run summary of {} in the live tag ({heard} node(s) heard at this end)",
            step.node()
        ));
    }
    StepEnd::Written(written)
}

/// The run summaries earlier step ends on this node heard, by node (root's file in the state
/// folder; removed by the epilog).
struct PeerRuns;

/// The most bytes the kept summaries may take (a summary is well under 1 KiB; a job of 4096
/// nodes fits).
const MAX_PEER_RUNS_BYTES: u64 = 4 << 20;

impl PeerRuns {
    fn path(step: &JobStep<'_>) -> PathBuf {
        record::peer_runs_path(&step.setup.state_dir, step.job_id())
    }

    /// What was kept; empty when nothing was, or when the file is unreadable (said).
    fn load(step: &JobStep<'_>) -> BTreeMap<String, RunSummary> {
        let path = Self::path(step);
        let Ok(file) = std::fs::File::open(&path) else {
            return BTreeMap::new();
        };
        let mut bytes = Vec::new();
        let read = file
            .take(MAX_PEER_RUNS_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| e.to_string())
            .and_then(|n| {
                if n as u64 > MAX_PEER_RUNS_BYTES {
                    Err(format!("over {MAX_PEER_RUNS_BYTES} bytes"))
                } else {
                    serde_json::from_slice(&bytes).map_err(|e| e.to_string())
                }
            });
        read.unwrap_or_else(|e| {
            step.say(&format!(
                "the kept run summaries {} are unreadable ({e}); starting again",
                path.display()
            ));
            BTreeMap::new()
        })
    }

    /// Keeps `runs` (written whole, then renamed); a failure is said and only costs the epilog
    /// a write.
    fn keep(step: &JobStep<'_>, runs: &BTreeMap<String, RunSummary>) {
        let path = Self::path(step);
        let tmp = path.with_extension("tmp");
        let done = serde_json::to_vec(runs)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = done {
            let _ = std::fs::remove_file(&tmp);
            step.say(&format!(
                "the run summaries heard at this step's end could not be kept in {} ({e})",
                path.display()
            ));
        }
    }
}

/// The merged summary when it is the one this node's step ends last put in the live tag: `fresh`
/// merged with the kept summaries changes nothing, so there is nothing to write and no reason
/// to ask slurmctld for the tag (one read less per job: the batch script's end after the last
/// step's end, a step end spawned twice). Local files only; the epilog still reads the tag and
/// completes it.
fn unchanged_since_last_write(
    step: &JobStep<'_>,
    fresh: &BTreeMap<String, RunSummary>,
) -> Option<RunSummary> {
    let last = WrittenRun::load(step)?;
    let mut all = PeerRuns::load(step);
    all.extend(fresh.iter().map(|(n, r)| (n.clone(), r.clone())));
    let runs: Vec<RunSummary> = all.into_values().collect();
    record::merge_nodes(&runs).filter(|merged| *merged == last)
}

/// The run summary this node's step ends last put in the live tag (or found there), in root's
/// state folder (`<state_dir>/step-run-written-<job>.json`; removed by the epilog).
struct WrittenRun;

/// The most bytes of the last written summary that are read (one summary, well under 1 KiB).
const MAX_WRITTEN_RUN_BYTES: u64 = 64 << 10;

impl WrittenRun {
    fn path(step: &JobStep<'_>) -> PathBuf {
        record::written_run_path(&step.setup.state_dir, step.job_id())
    }

    /// The summary last written; `None` when there is none or it cannot be read (the step end
    /// then reads the tag as before).
    fn load(step: &JobStep<'_>) -> Option<RunSummary> {
        let file = std::fs::File::open(Self::path(step)).ok()?;
        let mut bytes = Vec::new();
        let n = file
            .take(MAX_WRITTEN_RUN_BYTES + 1)
            .read_to_end(&mut bytes)
            .ok()?;
        if n as u64 > MAX_WRITTEN_RUN_BYTES {
            return None;
        }
        serde_json::from_slice(&bytes).ok()
    }

    /// Keeps `run` (written whole, then renamed); a failure only costs the next end a read.
    fn keep(step: &JobStep<'_>, run: &RunSummary) {
        let path = Self::path(step);
        let tmp = path.with_extension("tmp");
        let done = serde_json::to_vec(run)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if done.is_err() {
            let _ = std::fs::remove_file(&tmp);
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// The prefixes of the files the step ends keep per job in the state folder (the epilog removes
/// them; [`remove_leftovers`] those of a job whose epilog never ran here).
const KEPT_PREFIXES: [&str; 3] = ["step-runs-", "step-run-written-", "step-ends-"];

/// Removes what the step ends kept for jobs whose epilog never ran on this node (the node died,
/// slurmd was killed): the files `step-runs-`, `step-run-written-` and `step-ends-` older than
/// [`super::pending::KEEP_AT_MOST`]. `fabric-check health` calls it; the count removed.
pub fn remove_leftovers(state_dir: &std::path::Path, now: std::time::SystemTime) -> usize {
    let Ok(dir) = std::fs::read_dir(state_dir) else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            KEPT_PREFIXES.iter().any(|p| name.starts_with(p))
                && e.file_type().is_ok_and(|t| t.is_file())
                && e.metadata().and_then(|m| m.modified()).is_ok_and(|m| {
                    now.duration_since(m).unwrap_or_default() > super::pending::KEEP_AT_MOST
                })
                && std::fs::remove_file(e.path()).is_ok()
        })
        .count()
}
