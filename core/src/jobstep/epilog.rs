//! The job epilog: probe against the prolog's snapshot, counter rises over the job window, drains
//! on what root's own probe found, and the leader's merge of every node's rises, run summary and
//! step results into the tag.
//!
//! What the job produced (its `fabric-run` records, its step gates' results, a step gate naming
//! this node slow) lives in the user-writable spool: it goes into the tag marked as reported by
//! the job (`"reported_by":"job"`, [`fabric_proto::tag::JobReported`]) and never drains a node, so it
//! never counts toward the mass-drain guard either. A drain needs evidence root gathered.

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

/// `fabric-check epilog`: always lets the job end normally.
pub fn run(step: &JobStep<'_>) -> JobStepExit {
    let setup = step.setup;
    let _span =
        tracing::info_span!("epilog", job = setup.inv.job_id, node = %setup.inv.node).entered();
    let plugin = &setup.plugin;
    let node = step.node();
    let job = step.job_id();
    // The in-job watch first: its log goes to slurmd's; the events it kept go into this
    // node's row (the live tag may miss the last of them: the job can end before the watch's
    // own write lands).
    let watched = super::watch::finish(step);
    super::spares::forget(step);
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
                    if policy::verdict_drains(Phase::Epilog, report.verdict, plugin)
                        && let Some((check, message)) = super::worst_finding(&report)
                    {
                        step.drain_self(
                            &check,
                            &fabric_proto::during::drain_message(
                                fabric_proto::during::SeenBy::Epilog,
                                job,
                                &message,
                            ),
                        );
                    }
                    Some(d)
                }
                Err(why) => {
                    step.say(&format!("epilog probe on {node}: {why}"));
                    None
                }
            }
        }
        Err(e) => {
            step.say(&format!(
                "no prolog snapshot for job {job} ({e}); no job-window counters"
            ));
            None
        }
    };
    let _ = std::fs::remove_file(&snapshot);
    let during = with_watch_events(node, during, watched);
    if let Some(d) = &during
        && !d.rises.is_empty()
    {
        let list: Vec<String> = d.rises.iter().map(|(k, v)| format!("{k}+{v}")).collect();
        step.say(&format!(
            "counters rose during job {job} on {node}: {}",
            list.join(" ")
        ));
    }
    let given_up = super::spares::was_given_up(step);
    if given_up {
        step.say(&format!(
            "{node} was given up by job {job} (spares): the job's first node writes its tag"
        ));
    }
    if given_up || !policy::tags(plugin.policy) {
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
    let run = spool.as_ref().and_then(|d| read_run_summary(step, d));
    let step_results = spool
        .as_ref()
        .map(|d| read_step_results(step, d))
        .unwrap_or_default();
    // The step gates ran as the job's user and wrote these results into the user-writable
    // spool: they are reported in the tag as the job's, never a reason to drain.
    // Every string in them is the job's: scrubbed (no segment marker, no control character)
    // and bounded before it goes anywhere.
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
    let steps = bounded_steps(step_results.into_iter().map(|r| r.collective));
    let mut payload = EpilogPayload {
        during,
        run,
        steps,
        slow,
    };
    let dropped = payload.fit(fabric_net::rendezvous::MAX_PAYLOAD_BYTES);
    if !dropped.is_empty() {
        step.say(&format!(
            "job {job}: what the job wrote on {node} is too large to travel with root's evidence; \
             dropped {}",
            dropped.join(", ")
        ));
    }
    let first = setup.nodes.first().is_some_and(|n| n == node);
    let own = first.then(|| payload.clone());
    let delivered = match deliver(step, payload) {
        Delivery::Leader(met) => lead(step, met, None),
        Delivery::Acknowledged => true,
        // The first node met nobody: it still writes what it knows, its own part, so that a
        // checked job never ends without a tag.
        Delivery::Failed(why) => match own {
            Some(own) => lead(step, alone(step, own), Some(why)),
            None => false,
        },
    };
    if let Some(dir) = &spool {
        if delivered {
            remove_node_files(step.node(), dir);
        } else {
            step.say(&format!(
                "job {job}: this node's records were not delivered; kept in {}",
                dir.path().display()
            ));
        }
    }
    // The step ends' kept summaries served the live tag; the job's own merge is done.
    record::forget_peer_runs(&step.setup.state_dir, job);
    step.say(&JobStepExit::Proceed.line());
    JobStepExit::Proceed
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
    let merge = EpilogMerge {
        pending: PendingPrologTag::load(step),
        rows,
        run,
        steps,
        slow,
        untagged,
    };
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
