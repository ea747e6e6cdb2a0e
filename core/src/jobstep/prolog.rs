//! The job prolog: probe, policy, the collective (`--fabric-check=full`), the rendezvous, and the
//! leader's tag.
//!
//! [`run`] goes through its stages in order, each a function of its own: `prepare_spool` (the
//! job's spool folder), `ask_watch_room` (whether the job can be watched), `probe_node` and
//! `say_probe_verdict`, `drain_on_verdict` (the policy), `run_collective` and
//! `judge_collective`, `meet_peers` (the rendezvous: the first node's `lead_tag`, with spares a
//! failed follower's `give_up_if_failed`), and `answer` (the decision line; the watch started).
//! What the stages find on the node travels between them in an `Outcome`.

use std::time::{Duration, Instant};

use super::meet::{Delivery, deliver};
use super::payload::PrologPayload;
use super::policy::{self, Found, Phase};
use super::runner::{Against, CollectiveRequest, ProbeRequest};
use super::tag_update::prolog_result;
use super::tag_write::{TagWrite, write_tag};
use super::{JobStep, now_unix};
use fabric_proto::check_id;
use fabric_proto::fabric_option::FabricMode;
use fabric_proto::invocation::JobStepExit;
use fabric_proto::plugin_args::expand_node;
use fabric_proto::tag::{CollectiveSummary, NodeResult, Verdict};

/// The probe's request for this node (`save` the snapshot, or compare with a `baseline`).
pub fn probe_request(
    step: &JobStep<'_>,
    baseline: Option<&std::path::Path>,
    save: Option<&std::path::Path>,
) -> ProbeRequest {
    let plugin = &step.setup.plugin;
    let node = step.node();
    ProbeRequest {
        node: node.to_owned(),
        sysfs_root: plugin
            .sysfs_root
            .as_deref()
            .and_then(|r| expand_node(r, node)),
        config: expand_node(&plugin.config, node).filter(|c| c.is_file()),
        against: match baseline {
            Some(b) => Against::Baseline(b.to_owned()),
            None => Against::StateDir(step.setup.state_dir.clone()),
        },
        save: save.map(ToOwned::to_owned),
        // With a baseline (the epilog) the state folder is not passed: name its known inventory.
        known: baseline.map(|_| crate::probe::known::known_path(&step.setup.state_dir)),
    }
}

/// The probe's limit ([`crate::deadline::Budget::probe`]), never past the deadline.
pub fn probe_limit(step: &JobStep<'_>) -> Duration {
    step.deadline().limit(step.setup.budget().probe())
}

/// Whether `verdict` drains the prolog's node ([`policy`]).
pub fn wants_drain(step: &JobStep<'_>, verdict: Verdict) -> bool {
    policy::verdict_drains(Phase::Prolog, verdict, &step.setup.plugin)
}

fn collective_request(step: &JobStep<'_>) -> Result<CollectiveRequest, String> {
    let plugin = &step.setup.plugin;
    let mut addrs = Vec::new();
    if let Some(hosts) = &plugin.collective_hosts {
        let text = std::fs::read_to_string(hosts)
            .map_err(|e| format!("cannot read {}: {e}", hosts.display()))?;
        addrs = crate::stepgate::parse_hosts_file(&text);
    } else if let Some(hosts) = &plugin.hosts_file {
        // No data-path addresses of its own: the collective uses the rendezvous's `hosts_file=`
        // (only the job's nodes go on its command line), then the system resolver.
        let text = std::fs::read_to_string(hosts)
            .map_err(|e| format!("cannot read hosts_file={}: {e}", hosts.display()))?;
        let map = super::meet::parse_hosts(&text);
        addrs = step
            .setup
            .nodes
            .iter()
            .filter_map(|n| map.get(n).map(|ip| (n.clone(), ip.to_string())))
            .collect();
    }
    Ok(CollectiveRequest {
        nodes: step.setup.inv.nodes.clone(),
        node: step.node().to_owned(),
        job_id: step.job_id(),
        window: plugin.ports.collective,
        budget_ms: step.setup.budget().collective().as_millis() as u64,
        munge_socket: plugin.munge_socket.clone(),
        netns: plugin
            .collective_netns
            .as_ref()
            .map(|ns| ns.replace("%n", step.node())),
        addrs,
    })
}

/// Makes the job's spool folder, `<spool_dir>/<job>/`, for the job's uid (see
/// [`crate::record::prepare_job_dir`]); a problem is said, never fails the job.
fn prepare_spool(step: &JobStep<'_>) {
    let setup = step.setup;
    let job = setup.inv.job_id.to_string();
    let Some(uid) = setup.inv.job_uid else {
        step.say(&format!(
            "no job uid: no spool folder made for job {job}; fabric-run records stay unread"
        ));
        return;
    };
    match crate::record::prepare_job_dir(&setup.plugin.spool_dir, &job, uid, None) {
        Ok(crate::record::Prepared::Replaced { what, moved_to }) => step.say(&format!(
            "spool folder of job {job}: replaced {what} that root did not make{}",
            moved_to.map_or_else(String::new, |m| format!(" (moved aside to {m})"))
        )),
        Ok(_) => {}
        Err(e) => step.say(&format!(
            "spool folder of job {job} not made, fabric-run records will be missing: {e}"
        )),
    }
}

/// What the prolog's stages find on this node and hand on, into the payload it sends the
/// first node: its result, its notes, its fabric in brief and the collective's summary.
struct Outcome {
    /// The node's result for the tag.
    result: NodeResult,
    /// Why the node could not look, if so (and why the job goes unwatched).
    notes: Vec<String>,
    /// The node's fabric in brief ([`super::job_peers`]); none when the probe could not run.
    fingerprint: Option<super::job_peers::Fingerprint>,
    /// The collective's summary (`--fabric-check=full`).
    collective: Option<CollectiveSummary>,
}

/// `fabric-check prolog`: returns the answer for the plugin (also printed as the decision line).
/// Its stages are the module's, in order.
pub fn run(step: &JobStep<'_>) -> JobStepExit {
    let setup = step.setup;
    let _span =
        tracing::info_span!("prolog", job = setup.inv.job_id, node = %setup.inv.node).entered();
    let mut notes = Vec::new();
    let t0 = Instant::now();
    prepare_spool(step);
    // Asked before the tag, so that the tag says when the job goes unwatched.
    let no_watch = ask_watch_room(step, &mut notes);
    let (mut outcome, failing) = probe_node(step, notes);
    let probe_ms = t0.elapsed().as_millis();
    say_probe_verdict(step, &outcome.result);
    drain_on_verdict(step, &mut outcome.result, failing.as_ref());
    run_collective(step, &mut outcome);
    let (result, given_up) = meet_peers(step, outcome);
    step.say(&format!(
        "timing: probe {} ms, policy+rendezvous+tag {} ms; {} ms left",
        probe_ms,
        t0.elapsed().as_millis().saturating_sub(probe_ms),
        step.deadline().left_ms()
    ));
    answer(step, &result, given_up, no_watch.is_none())
}

/// Whether the job can be watched ([`super::watch::no_room`]); when it cannot, says why and
/// notes it for the tag. The reason, when there is no room.
fn ask_watch_room(step: &JobStep<'_>, notes: &mut Vec<String>) -> Option<String> {
    let no_watch = super::watch::no_room(step);
    if let Some(why) = &no_watch {
        step.say(why);
        let node = step.node();
        notes.push(format!("{node}: {why}"));
    }
    no_watch
}

/// Probes the node, saving the snapshot the epilog compares with: its result, its worst
/// failing finding (the check and its message) and its fabric in brief; a probe that could
/// not run is an `error` result, noted.
fn probe_node(step: &JobStep<'_>, mut notes: Vec<String>) -> (Outcome, Option<(String, String)>) {
    let node = step.node();
    let snapshot = step.snapshot_path();
    let ran = {
        let _p = tracing::info_span!("probe").entered();
        step.seams.runner.probe(
            &probe_request(step, None, Some(&snapshot)),
            probe_limit(step),
        )
    };
    let mut fingerprint = None;
    let (result, failing) = match ran {
        Ok(report) => {
            for why in super::results::save_failures(&report) {
                step.say(&format!("{node}: {why}"));
            }
            fingerprint = Some(super::job_peers::Fingerprint::of(&report.inventory));
            (super::node_result(&report), super::worst_finding(&report))
        }
        Err(why) => {
            let check = why.check_id();
            notes.push(format!("{node}: {why}"));
            let r = NodeResult {
                verdict: Verdict::Error,
                checks: vec![check.into()],
                probe_ms: None,
                drained: false,
            };
            (r, Some((check.to_owned(), why.to_string())))
        }
    };
    let outcome = Outcome {
        result,
        notes,
        fingerprint,
        collective: None,
    };
    (outcome, failing)
}

/// Says the probe's verdict and its findings (the `probe` phase line).
fn say_probe_verdict(step: &JobStep<'_>, result: &NodeResult) {
    let node = step.node();
    step.say_phase(
        "probe",
        &format!(
            "probe verdict {} on {node} ({})",
            result.verdict.as_str(),
            if result.checks.is_empty() {
                "no findings".to_owned()
            } else {
                result.checks.join(",")
            }
        ),
    );
}

/// The policy: drains the node when its verdict drains in the prolog ([`wants_drain`]) and a
/// finding says why.
fn drain_on_verdict(
    step: &JobStep<'_>,
    result: &mut NodeResult,
    failing: Option<&(String, String)>,
) {
    if wants_drain(step, result.verdict)
        && let Some((check, message)) = failing
    {
        result.drained = step.drain_self(check, message).out_of_service();
    }
}

/// The collective (`--fabric-check=full`, a job of more than one node): this node's rank of
/// it, judged ([`judge_collective`]); a collective that could not run is said and noted.
fn run_collective(step: &JobStep<'_>, outcome: &mut Outcome) {
    let setup = step.setup;
    if !(setup.inv.option == FabricMode::Full && setup.nodes.len() > 1) {
        return;
    }
    let _c = tracing::info_span!("collective").entered();
    let ran = collective_request(step).and_then(|req| {
        let limit = step
            .deadline()
            .limit(step.setup.budget().collective_process());
        step.seams
            .runner
            .collective(&req, limit)
            .map_err(|e| e.to_string())
    });
    match ran {
        Ok(report) => {
            outcome.collective = Some(judge_collective(step, &report, &mut outcome.result));
        }
        Err(why) => {
            step.say(&why);
            let node = step.node();
            outcome.notes.push(format!("{node}: {why}"));
        }
    }
}

/// Says the collective's verdict and puts what it named of this node into `result`: a latency
/// tail or a slow suspect warns, the slow node fails (and drains where the policy says so).
/// The collective's summary, for the tag.
fn judge_collective(
    step: &JobStep<'_>,
    report: &fabric_net::collective::Report,
    result: &mut NodeResult,
) -> CollectiveSummary {
    let node = step.node();
    step.say_phase(
        "collective",
        &format!(
            "collective verdict {} among {} nodes{}",
            report.verdict.as_str(),
            report.nodes.len(),
            report.named()
        ),
    );
    // A latency tail is reported, never drained: round trips are what a busy host
    // disturbs first (docs/collective.md, "Latency tails").
    if report.tails.iter().any(|o| o == node) {
        result.verdict = result.verdict.max(Verdict::Warn);
        result.checks.push(check_id::COLLECTIVE_LATENCY_TAIL.into());
    }
    // The local rule's names too: a node whose ranks lost their CPU to other work
    // measures so as well (docs/collective.md, "Link probes and the slow node").
    if report.suspects.iter().any(|o| o == node) {
        result.verdict = result.verdict.max(Verdict::Warn);
        result.checks.push(check_id::COLLECTIVE_SLOW_SUSPECT.into());
    }
    if report.outliers.iter().any(|o| o == node) {
        result.verdict = result.verdict.max(Verdict::Fail);
        result.checks.push(check_id::COLLECTIVE_SLOW_NODE.into());
        if policy::decide(Phase::Prolog, Found::SlowNode, &step.setup.plugin).drain
            && !result.drained
        {
            let msg = report
                .messages
                .first()
                .cloned()
                .unwrap_or_else(|| "slowest node of the ring".into());
            result.drained = step
                .drain_self(check_id::COLLECTIVE_SLOW_NODE, &msg)
                .out_of_service();
        }
    }
    report.summary()
}

/// The rendezvous and the tag (when the policy tags): every node sends the first node its
/// payload; the first node writes the tag ([`lead_tag`]), with spares keeping N good nodes. A
/// follower that failed in a job with spares is given up ([`give_up_if_failed`]); the first
/// node that met nobody keeps its verdict for its epilog. This node's result, and whether it
/// was given up.
fn meet_peers(step: &JobStep<'_>, outcome: Outcome) -> (NodeResult, bool) {
    let setup = step.setup;
    let plugin = &setup.plugin;
    let spares = super::spares::effective(setup.inv.spares, plugin, setup.nodes.len());
    let mut result = outcome.result;
    let mut given_up = false;
    if !policy::tags(plugin.policy) {
        return (result, given_up);
    }
    let payload = PrologPayload {
        result: result.clone(),
        notes: outcome.notes,
        collective: outcome.collective,
        fingerprint: outcome.fingerprint,
    };
    match deliver(step, payload) {
        Delivery::Leader(met) => lead_tag(step, met, spares),
        // A follower that failed, in a job with spares, leaves the job to the leader:
        // it gives this node up (or requeues the job). Only when the leader has its verdict.
        Delivery::Acknowledged => given_up = give_up_if_failed(step, &mut result, spares),
        // The first node writes the tag, and had no meeting to write: it keeps why and its
        // own verdict, and its epilog writes a tag that says so.
        Delivery::Failed(why) => {
            if setup.nodes.first().map(String::as_str) == Some(step.node()) {
                super::pending::RendezvousFailed::new(
                    &why,
                    setup.inv.option.as_str(),
                    now_unix(),
                    result.clone(),
                )
                .keep(step);
            }
        }
    }
    (result, given_up)
}

/// With spares, a follower whose result failed is given up: marked, said, and the job goes on
/// only once slurmctld no longer lists this node among its nodes (fail closed: otherwise the
/// node counts as drained). Whether it was given up.
fn give_up_if_failed(step: &JobStep<'_>, result: &mut NodeResult, spares: u32) -> bool {
    let given_up = spares > 0 && super::spares::failed(result, &step.setup.plugin);
    if !given_up {
        return false;
    }
    super::spares::mark_given_up(step);
    let node = step.node();
    step.say(&format!(
        "spares: {node} failed; the first node gives it up (job {})",
        step.job_id()
    ));
    // Fail closed: the job goes on past this failed node only once slurmctld
    // no longer lists it among the job's nodes.
    if !super::spares::wait_given_back(step) {
        result.drained = true;
        return false;
    }
    true
}

/// The answer for the plugin, said as the decision line: a node given up (spares) proceeds, a
/// drained one is `drained`; otherwise the job runs here, watched until the epilog when
/// `watch` (there is room).
fn answer(step: &JobStep<'_>, result: &NodeResult, given_up: bool, watch: bool) -> JobStepExit {
    let exit = if given_up {
        // Spares: this node leaves the job; its prolog does not fail it.
        JobStepExit::Proceed
    } else if result.drained {
        JobStepExit::Drained
    } else {
        // The job runs here: watch the node until the epilog, when there is room.
        if watch {
            super::watch::start(step);
        }
        JobStepExit::Proceed
    };
    // The plugin reads this line when slurmstepd reaped us before it could.
    step.say(&exit.line());
    exit
}

/// The leader's tag from every node's payload, and with `spares` the job shrunk to N good nodes
/// (or requeued), the tag saying which.
fn lead_tag(
    step: &JobStep<'_>,
    met: fabric_net::rendezvous::typed::Met<PrologPayload>,
    spares: u32,
) {
    let prints: std::collections::BTreeMap<String, super::job_peers::Fingerprint> = met
        .payloads
        .iter()
        .filter_map(|(n, p)| p.fingerprint.clone().map(|f| (n.clone(), f)))
        .collect();
    let mut result = prolog_result(step.setup.inv.option.as_str(), now_unix(), met);
    name_unlike_nodes(step, &mut result, &prints);
    if spares > 0 {
        use super::spares;
        let plan = spares::plan(&step.setup.nodes, spares, &result.nodes, &step.setup.plugin);
        let held_s = step.deadline().elapsed().as_secs_f64();
        let planned = spares::record(spares, &plan, held_s);
        result.spares = Some(planned.clone());
        let shrinks = plan.shrinks();
        if shrinks {
            // The tag goes in before the shrink: slurmctld closes the allocation's accounting
            // record at the shrink (`RESIZING`), and each record then carries it.
            write_or_keep(step, &result);
        }
        let done = spares::record(spares, &spares::act(step, plan), held_s);
        if shrinks && done == planned {
            return;
        }
        result.spares = Some(done);
    }
    write_or_keep(step, &result);
}

/// Names every node unlike a strict majority of the job's nodes ([`super::job_peers`]): a
/// `warn` in its result (never a drain) and a note saying what differs.
fn name_unlike_nodes(
    step: &JobStep<'_>,
    result: &mut super::pending::PendingPrologTag,
    prints: &std::collections::BTreeMap<String, super::job_peers::Fingerprint>,
) {
    for (node, unlike) in super::job_peers::judge(prints) {
        let Some(r) = result.nodes.get_mut(&node) else {
            continue;
        };
        if !r.checks.iter().any(|c| c == check_id::JOB_PEER_PARITY) {
            r.checks.push(check_id::JOB_PEER_PARITY.into());
        }
        if r.verdict == Verdict::Pass {
            r.verdict = Verdict::Warn;
        }
        let what = format!(
            "{node} is unlike the job's other nodes ({}): {}",
            check_id::JOB_PEER_PARITY,
            unlike.join("; ")
        );
        step.say(&what);
        result
            .notes
            .push(fabric_proto::tag::scrub_text(&what, 200).to_string());
    }
}

/// Writes the prolog's result into the tag, or keeps it for the epilog when Slurm cannot take
/// it now (munged or slurmctld away at this moment: the epilog, same first node, writes it).
fn write_or_keep(step: &JobStep<'_>, result: &super::pending::PendingPrologTag) {
    if write_tag(step, |prev| result.clone().apply(prev)) == TagWrite::NotWritten {
        result.keep(step);
    }
}
