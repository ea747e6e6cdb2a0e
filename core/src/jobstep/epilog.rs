//! The job epilog: probe against the prolog's snapshot, counter rises over the job window, drains
//! on what root's own probe found, and the leader's merge of every node's rises, run summary and
//! step results into the tag.
//!
//! What the job produced (its `fabric-run` records, its step gates' results, a step gate naming
//! this node slow) lives in the user-writable spool: it goes into the tag marked as reported by
//! the job (`"reported_by":"job"`, [`fabric_proto::tag::JobReported`]) and never drains a node, so it
//! never counts toward the mass-drain guard either. A drain needs evidence root gathered.
//!
//! [`run`] goes through its stages in order, each a function of its own: the watch stopped,
//! `probe_job_window` (the probe against the prolog's snapshot; `drain_on_probe`),
//! `with_watch_events` and `say_rises`; a node that tags nothing (`tags_nothing`) only clears
//! its files; the others `gather_payload` (with `slow_claims`), `meet_peers` (the first node's
//! `lead`: `merge_payloads` into the tag, `untagged` for a job without a verdict) and
//! `clear_delivered`.

use super::JobStep;
use super::meet::{Delivery, deliver};
use super::payload::{EpilogPayload, MAX_STEP_RESULTS};
use super::pending::{PendingPrologTag, RendezvousFailed};
use super::policy::{self, Phase};
use super::prolog::{probe_limit, probe_request};
use super::tag_update::{EpilogMerge, Untagged};
use super::tag_write::{TagWrite, write_tag};
use crate::probe::Baseline;
use crate::record::{self, JobDir, ReadLimits, RecordError};
use crate::stepgate;
use fabric_proto::invocation::JobStepExit;
use fabric_proto::tag::{
    CollectiveSummary, DuringJob, MAX_REPORTED_NAMES, NodeResult, RunSummary, SlowClaim, Verdict,
};

/// The most slow-node claims of one node the tag keeps.
const MAX_CLAIMS_PER_NODE: usize = 8;

/// `fabric-check epilog`: always lets the job end normally. Its stages are the module's, in
/// order.
pub fn run(step: &JobStep<'_>) -> JobStepExit {
    let setup = step.setup;
    let _span =
        tracing::info_span!("epilog", job = setup.inv.job_id, node = %setup.inv.node).entered();
    let node = step.node();
    let job = step.job_id();
    // The in-job watch first: its log goes to slurmd's; the events it kept go into this
    // node's row (the live tag may miss the last of them: the job can end before the watch's
    // own write lands).
    let watched = super::watch::finish(step);
    super::spares::forget(step);
    let during = probe_job_window(step);
    let during = with_watch_events(node, during, watched);
    say_rises(step, during.as_ref());
    if tags_nothing(step) {
        // Observe tags nothing, so nothing reads this node's fabric-run records; they are still
        // ours to clear, or the spool fills with one folder per job.
        if let Some(dir) = open_job_dir(step) {
            remove_node_files(node, &dir);
        }
        return JobStepExit::Proceed;
    }
    let spool = open_job_dir(step);
    // The watch is stopped: the job's wish to be requeued on a fault has served. Gone whatever
    // happens to the records, or a requeued run of the job (same id, same folder) inherits it.
    if let Some(dir) = &spool {
        let wish = fabric_proto::notice::requeue_wish_name(node);
        dir.remove(|name| name == wish);
    }
    let payload = gather_payload(step, spool.as_ref(), during);
    let delivered = meet_peers(step, payload);
    clear_delivered(step, spool.as_ref(), delivered);
    // The step ends' kept summaries served the live tag; the job's own merge is done.
    record::forget_peer_runs(&step.setup.state_dir, job);
    step.say(&JobStepExit::Proceed.line());
    JobStepExit::Proceed
}

/// Probes the node against the prolog's snapshot (then removes it): this node's `during` row
/// of counter rises over the job window, draining on what the probe found where the policy
/// says so ([`drain_on_probe`]). None without a snapshot or when the probe could not run.
fn probe_job_window(step: &JobStep<'_>) -> Option<DuringJob> {
    let node = step.node();
    let snapshot = step.snapshot_path();
    let during = match Baseline::load(&snapshot) {
        Ok(base) => {
            let ran = {
                let _p = tracing::info_span!("probe").entered();
                step.seams.runner.probe(
                    &probe_request(step, Some(&snapshot), None),
                    probe_limit(step),
                )
            };
            match ran {
                Ok(report) => {
                    let d = super::during_job(node, &base.counters, &report);
                    step.say_phase(
                        "probe",
                        &format!("epilog probe verdict {} on {node}", report.verdict.as_str()),
                    );
                    drain_on_probe(step, &report);
                    Some(d)
                }
                Err(why) => {
                    step.say(&format!("epilog probe on {node}: {why}"));
                    None
                }
            }
        }
        Err(e) => {
            let job = step.job_id();
            step.say(&format!(
                "no prolog snapshot for job {job} ({e}); no job-window counters"
            ));
            None
        }
    };
    let _ = std::fs::remove_file(&snapshot);
    during
}

/// Drains the node when the epilog probe's verdict drains ([`policy`]) and a finding says why,
/// the message saying the epilog saw it.
fn drain_on_probe(step: &JobStep<'_>, report: &crate::probe::Report) {
    if policy::verdict_drains(Phase::Epilog, report.verdict, &step.setup.plugin)
        && let Some((check, message)) = super::worst_finding(report)
    {
        step.drain_self(
            &check,
            &fabric_proto::during::drain_message(
                fabric_proto::during::SeenBy::Epilog,
                step.job_id(),
                &message,
            ),
        );
    }
}

/// Says the counters that rose during the job on this node, if any.
fn say_rises(step: &JobStep<'_>, during: Option<&DuringJob>) {
    if let Some(d) = during
        && !d.rises.is_empty()
    {
        let (job, node) = (step.job_id(), step.node());
        let list: Vec<String> = d.rises.iter().map(|(k, v)| format!("{k}+{v}")).collect();
        step.say(&format!(
            "counters rose during job {job} on {node}: {}",
            list.join(" ")
        ));
    }
}

/// Whether this node's epilog tags nothing: the node was given up by its job (spares: said;
/// the job's first node writes its tag), or the policy tags nothing.
fn tags_nothing(step: &JobStep<'_>) -> bool {
    let given_up = super::spares::was_given_up(step);
    if given_up {
        let (job, node) = (step.job_id(), step.node());
        step.say(&format!(
            "{node} was given up by job {job} (spares): the job's first node writes its tag"
        ));
    }
    given_up || !policy::tags(step.setup.plugin.policy)
}

/// This node's payload for the first node: root's `during` row, and what the job left in its
/// spool (its `fabric-run` summary, its step gates' results and their slow-node claims,
/// [`slow_claims`]), shrunk to fit a join (what was dropped is said).
fn gather_payload(
    step: &JobStep<'_>,
    spool: Option<&JobDir>,
    during: Option<DuringJob>,
) -> EpilogPayload {
    let run = spool.and_then(|d| read_run_summary(step, d));
    let step_results = spool
        .map(|d| read_step_results(step, d))
        .unwrap_or_default();
    let slow = slow_claims(step, &step_results);
    let steps = bounded_steps(step_results.into_iter().map(|r| r.collective));
    let mut payload = EpilogPayload {
        during,
        run,
        steps,
        slow,
    };
    let dropped = payload.fit(fabric_net::rendezvous::MAX_PAYLOAD_BYTES);
    if !dropped.is_empty() {
        let (job, node) = (step.job_id(), step.node());
        step.say(&format!(
            "job {job}: what the job wrote on {node} is too large to travel with root's evidence; \
             dropped {}",
            dropped.join(", ")
        ));
    }
    payload
}

/// The steps whose gate named this node slow (at most [`MAX_CLAIMS_PER_NODE`]), each said.
///
/// The step gates ran as the job's user and wrote these results into the user-writable
/// spool: they are reported in the tag as the job's, never a reason to drain.
/// Every string in them is the job's: scrubbed (no segment marker, no control character)
/// and bounded before it goes anywhere.
fn slow_claims(step: &JobStep<'_>, step_results: &[stepgate::StepResult]) -> Vec<SlowClaim> {
    let (job, node) = (step.job_id(), step.node());
    let slow: Vec<SlowClaim> = step_results
        .iter()
        .filter(|r| r.slow_here)
        .take(MAX_CLAIMS_PER_NODE)
        .map(|r| {
            let mut c = SlowClaim {
                node: node.to_owned(),
                step: r.step,
                message: r.message.clone(),
            };
            c.scrub();
            c
        })
        .collect();
    for c in &slow {
        step.say(&format!(
            "step {job}.{}: the job's step gate named {node} slow (reported by the job, not a reason to drain)",
            c.step
        ));
    }
    slow
}

/// The rendezvous: every node sends the first node its payload, and the first node merges
/// them into the tag ([`lead`]); a first node that met nobody still writes its own part, so
/// that a checked job never ends without a tag. Whether this node's payload was delivered.
fn meet_peers(step: &JobStep<'_>, payload: EpilogPayload) -> bool {
    let first = step.setup.nodes.first().is_some_and(|n| n == step.node());
    let own = first.then(|| payload.clone());
    match deliver(step, payload) {
        Delivery::Leader(met) => lead(step, met, None),
        Delivery::Acknowledged => true,
        // The first node met nobody: it still writes what it knows, its own part, so that a
        // checked job never ends without a tag.
        Delivery::Failed(why) => match own {
            Some(own) => lead(step, alone(step, own), Some(why)),
            None => false,
        },
    }
}

/// Removes this node's files from the job's spool once delivered; otherwise says where they
/// were kept.
fn clear_delivered(step: &JobStep<'_>, spool: Option<&JobDir>, delivered: bool) {
    if let Some(dir) = spool {
        if delivered {
            remove_node_files(step.node(), dir);
        } else {
            let job = step.job_id();
            step.say(&format!(
                "job {job}: this node's records were not delivered; kept in {}",
                dir.path().display()
            ));
        }
    }
}

/// This node's `during` row with the events its watch kept (a row of its own when the epilog's
/// probe gave none).
fn with_watch_events(
    node: &str,
    during: Option<DuringJob>,
    watched: Vec<fabric_proto::tag::WatchEvent>,
) -> Option<DuringJob> {
    if watched.is_empty() {
        return during;
    }
    let mut row = during.unwrap_or_else(|| super::tag_update::during_row(node));
    for ev in watched {
        super::tag_update::push_watch_event(&mut row, ev);
    }
    Some(row)
}

/// The first node's own payload as a meeting of one, the job's other nodes missing (its epilog's
/// rendezvous failed).
fn alone(
    step: &JobStep<'_>,
    own: EpilogPayload,
) -> fabric_net::rendezvous::typed::Met<EpilogPayload> {
    fabric_net::rendezvous::typed::Met {
        leader: true,
        payloads: [(step.node().to_owned(), own)].into(),
        missing: step.setup.nodes.iter().skip(1).cloned().collect(),
        undecodable: vec![],
        rejected: vec![],
    }
}

/// The prolog's part of the tag from what the epilog knows, for a checked job that has none:
/// each node's epilog verdict (a node without an epilog probe: `probe.error`), the first node's
/// worse of its prolog's and its epilog's, the nodes that never met missing, and notes that
/// say why (the prolog's failed rendezvous as it kept it; the epilog's, when that failed too).
fn untagged(
    step: &JobStep<'_>,
    met: &fabric_net::rendezvous::typed::Met<EpilogPayload>,
    prolog: Option<&RendezvousFailed>,
    epilog_failed: Option<&str>,
) -> Untagged {
    let mut nodes: std::collections::BTreeMap<String, NodeResult> = met
        .payloads
        .iter()
        .map(|(n, p)| {
            let r = match &p.during {
                Some(d) => NodeResult {
                    verdict: d.verdict,
                    checks: vec![],
                    probe_ms: None,
                    drained: false,
                },
                None => NodeResult {
                    verdict: Verdict::Error,
                    checks: vec![fabric_proto::check_id::PROBE_ERROR.into()],
                    probe_ms: None,
                    drained: false,
                },
            };
            (n.clone(), r)
        })
        .collect();
    let mut notes = Vec::new();
    match prolog {
        Some(p) => {
            notes.push(Untagged::note(&p.reason));
            if let Some(r) = nodes.get_mut(step.node()) {
                // The prolog's own result counts: its checks, its drain.
                let epilog_verdict = r.verdict;
                *r = p.result.clone();
                r.verdict = r.verdict.max(epilog_verdict);
            }
        }
        None => notes.push(
            "no verdict from the prolog reached Slurm (it did not finish on the first node)"
                .to_owned(),
        ),
    }
    notes.push("the verdicts are the epilog's".to_owned());
    if let Some(why) = epilog_failed {
        notes.push(format!("the epilog's {}", Untagged::note(why)));
    }
    let mut missing = met.missing.clone();
    missing.extend(met.undecodable.iter().map(|u| u.node.clone()));
    Untagged {
        mode: prolog.map_or_else(
            || step.setup.inv.option.as_str().to_owned(),
            |p| p.mode.clone(),
        ),
        probed_at_s: prolog.map_or_else(super::now_unix, |p| p.probed_at_s),
        nodes,
        missing,
        notes,
    }
}

/// The leader's merge of every node's payload into the tag; whether the tag has it (or nothing
/// needed writing). When the prolog kept a failed rendezvous, or the epilog's own failed
/// (`epilog_failed`), the tag is read even with nothing to merge, and one without a verdict
/// gets the epilog's ([`untagged`]): a checked job never ends without a tag.
fn lead(
    step: &JobStep<'_>,
    met: fabric_net::rendezvous::typed::Met<EpilogPayload>,
    epilog_failed: Option<String>,
) -> bool {
    let job = step.job_id();
    let prolog_failed = RendezvousFailed::load(step);
    // Only where a rendezvous is known to have failed: a tag without a verdict otherwise (a
    // test's, a step end's run summary before the prolog's write lands) is not ours to fill.
    let untagged = (prolog_failed.is_some() || epilog_failed.is_some())
        .then(|| untagged(step, &met, prolog_failed.as_ref(), epilog_failed.as_deref()));
    let merge = merge_payloads(step, met, untagged);
    if merge.is_empty() && prolog_failed.is_none() && epilog_failed.is_none() {
        step.say(&format!(
            "job {job}: no counter rose and no fabric-run records; tag unchanged"
        ));
        true
    } else {
        let had_pending = merge.pending.is_some();
        let written = write_tag(step, |prev| merge.apply(prev));
        if written != TagWrite::NotWritten {
            if had_pending {
                PendingPrologTag::remove(step);
            }
            if prolog_failed.is_some() {
                RendezvousFailed::remove(step);
            }
        }
        written != TagWrite::NotWritten
    }
}

/// Every node's payload as one merge for the tag: the prolog's part kept here (if any), the
/// `during` rows that say something, the nodes' run summaries merged, their step results and
/// slow-node claims (bounded again: a peer of another build may send more), and `untagged`.
fn merge_payloads(
    step: &JobStep<'_>,
    met: fabric_net::rendezvous::typed::Met<EpilogPayload>,
    untagged: Option<Untagged>,
) -> EpilogMerge {
    let runs: Vec<RunSummary> = met
        .payloads
        .values()
        .filter_map(|p| p.run.clone())
        .collect();
    let run = record::merge_nodes(&runs);
    // Each node's step results and claims are bounded again here: a peer of another build may
    // send more.
    let steps: Vec<CollectiveSummary> = met
        .payloads
        .values()
        .flat_map(|p| bounded_steps(p.steps.iter().cloned()))
        .collect();
    let mut slow: Vec<SlowClaim> = met
        .payloads
        .values()
        .flat_map(|p| p.slow.iter().take(MAX_CLAIMS_PER_NODE).cloned())
        .map(|mut c| {
            c.scrub();
            c
        })
        .collect();
    slow.sort_by(|a, b| a.node.cmp(&b.node).then(a.step.cmp(&b.step)));
    let mut rows: Vec<DuringJob> = met
        .payloads
        .into_values()
        .filter_map(|p| p.during)
        .filter(|d| !d.rises.is_empty() || d.verdict != Verdict::Pass)
        .collect();
    rows.sort_by(|a, b| a.node.cmp(&b.node));
    EpilogMerge {
        pending: PendingPrologTag::load(step),
        rows,
        run,
        steps,
        slow,
        untagged,
    }
}

/// One node's step results as the job wrote them, bounded: the latest
/// [`MAX_STEP_RESULTS`] steps, each with its numbers finite and its name lists cut to
/// [`MAX_REPORTED_NAMES`] scrubbed names.
fn bounded_steps(steps: impl Iterator<Item = CollectiveSummary>) -> Vec<CollectiveSummary> {
    let mut steps: Vec<CollectiveSummary> = steps.collect();
    let extra = steps.len().saturating_sub(MAX_STEP_RESULTS);
    steps.drain(..extra);
    for s in &mut steps {
        s.scrub(MAX_REPORTED_NAMES);
    }
    steps
}

/// The job's spool folder ([`record::open_job_dir`]).
fn open_job_dir(step: &JobStep<'_>) -> Option<JobDir> {
    let setup = step.setup;
    record::open_job_dir(
        &setup.plugin.spool_dir,
        setup.inv.job_id,
        setup.inv.job_uid,
        step.seams.relay,
    )
}

/// This node's `fabric-run` records for the job, summarised (removed once delivered).
fn read_run_summary(step: &JobStep<'_>, dir: &JobDir) -> Option<RunSummary> {
    let job = step.setup.inv.job_id;
    let setup = step.setup;
    let (path, recs) = record::read_node_records(
        &setup.plugin.spool_dir,
        job,
        setup.inv.job_uid,
        step.node(),
        dir,
        step.seams.relay,
    )?;
    let Some(summary) = record::summarize(&recs) else {
        let e = RecordError::Empty {
            path,
            malformed: recs.malformed,
        };
        step.say(&format!("fabric-run records of job {job} skipped: {e}"));
        return None;
    };
    if summary.malformed_lines > 0 {
        step.say(&format!(
            "fabric-run records of job {job}: {} malformed line(s) skipped",
            summary.malformed_lines
        ));
    }
    Some(summary)
}

/// This node's step gate results for the job (Slurm 23.11+, `--fabric-check=full` steps), read
/// with the records' rules (the file is the user's); removed with the gate's markers once
/// delivered.
fn read_step_results(step: &JobStep<'_>, dir: &JobDir) -> Vec<stepgate::StepResult> {
    let setup = step.setup;
    let job = setup.inv.job_id.to_string();
    let Some(path) = stepgate::results_path(&setup.plugin.spool_dir, &job, step.node()) else {
        return Vec::new();
    };
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return Vec::new();
    };
    let limits = ReadLimits {
        owner_uid: setup.inv.job_uid,
        max_bytes: 256 * 1024,
        ..ReadLimits::default()
    };
    let bytes = match dir.read_user_file(name, &limits) {
        Ok(b) => b,
        Err(RecordError::Missing(_)) => return Vec::new(),
        Err(e) => {
            step.say(&format!("step results of job {job} skipped: {e}"));
            return Vec::new();
        }
    };
    let (results, bad) = stepgate::parse_results(&String::from_utf8_lossy(&bytes));
    if bad > 0 {
        step.say(&format!(
            "step results of job {job}: {bad} malformed line(s) skipped"
        ));
    }
    results
        .into_iter()
        .filter(|r| r.node == step.node())
        .collect()
}

/// Removes this node's files from the job's folder (its records `<node>.jsonl`, step results
/// `<node>.steps.jsonl` and step gate markers `<node>.step-<id>.done`), relative to the verified
/// descriptor, then the folder itself when no other node's files are left.
fn remove_node_files(node: &str, dir: &JobDir) {
    let records = format!("{node}.jsonl");
    let results = format!("{node}.steps.jsonl");
    let marker = format!("{node}.step-");
    // The watch's notice file, fabric-run's events file and its requeue wish go with the job
    // too.
    let notices = fabric_proto::notice::notice_name(node);
    let events = format!("fabric-run-events-{node}.jsonl");
    let wish = fabric_proto::notice::requeue_wish_name(node);
    dir.remove(|name| {
        name == records
            || name == results
            || name == notices
            || name == events
            || name == wish
            || (name.starts_with(&marker) && name.ends_with(".done"))
    });
    dir.remove_if_empty();
}
