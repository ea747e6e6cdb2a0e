//! Spare nodes (`--fabric-check-spares=K`): the prolog leader, which holds every node's verdict
//! after the rendezvous, keeps N = nodes − K nodes that passed and gives the others up.
//!
//! - [`plan`]: the pure decision (which nodes stay, which failed, which healthy ones go back to
//!   the pool, or why the job falls back to a requeue);
//! - [`record`]: the tag's `spares` entry for a plan;
//! - [`act`]: the leader carries it out as root, with the job's own id only: `scontrol update
//!   JobId=J NodeList=<kept>` ([`crate::slurm::Slurm::shrink`]), then the batch step's view
//!   ([`BatchEnv`], on this node, the batch host); or `scontrol requeue J` when too few passed
//!   or slurmctld refused the shrink. When the batch host itself failed, its own prolog fails
//!   as without spares, and Slurm requeues the job.
//!
//! The node list is Slurm's (the prolog's `SLURM_JOB_NODELIST`), never the job's: a user can
//! neither name other nodes nor keep more than the job was allocated, and K is capped by
//! `spares_max=` here as well as at submission.

use std::collections::BTreeMap;

use fabric_proto::check_id;
use fabric_proto::hostlist;
use fabric_proto::plugin_args::{PluginArgs, Policy};
use fabric_proto::spares::{BatchEnv, Fallback, GivenUp, SparesOutcome, SparesRecord};
use fabric_proto::tag::NodeResult;

use super::JobStep;
use super::policy::{self, Phase};

/// The most nodes each list of the tag's `spares` entry names (a job where hundreds failed
/// falls back anyway; the counts are in the tag's `counts`).
pub const MAX_LISTED: usize = 64;

/// The spares this job step honours: the job's request capped by `spares_max=`, only under
/// `policy=enforce` (only there does a failed node cost the job a requeue), and only when at
/// least one node would be left.
pub fn effective(requested: u32, plugin: &PluginArgs, nodes: usize) -> u32 {
    let k = requested.min(plugin.spares_max);
    if plugin.policy != Policy::Enforce || (k as usize) >= nodes {
        0
    } else {
        k
    }
}

/// Whether a node's result keeps it out of a job with spares: a verdict the policy drains for
/// (whether or not the mass-drain guard let the drain through), or a drain.
pub fn failed(result: &NodeResult, plugin: &PluginArgs) -> bool {
    result.drained || policy::verdict_drains(Phase::Prolog, result.verdict, plugin)
}

/// What the leader decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The nodes the job keeps (N, in the job's order), or every passing node on a fallback.
    pub kept: Vec<String>,
    /// Failed nodes (and nodes whose verdict never arrived), with their checks.
    pub failed: Vec<GivenUp>,
    /// Healthy surplus nodes.
    pub released: Vec<String>,
    /// Why the job is requeued instead, if it is.
    pub fallback: Option<Fallback>,
}

impl Plan {
    /// Whether the job changes at all (no fallback and a node to give up).
    pub fn shrinks(&self) -> bool {
        self.fallback.is_none() && (!self.failed.is_empty() || !self.released.is_empty())
    }
}

/// The decision for `nodes` (the job's, first = batch host) with `spares` of them spare, from
/// the `results` that reached the leader (a node without one failed: its verdict never came).
pub fn plan(
    nodes: &[String],
    spares: u32,
    results: &BTreeMap<String, NodeResult>,
    plugin: &PluginArgs,
) -> Plan {
    let need = nodes.len().saturating_sub(spares as usize);
    let mut passed = Vec::new();
    let mut bad = Vec::new();
    for n in nodes {
        match results.get(n) {
            Some(r) if !failed(r, plugin) => passed.push(n.clone()),
            Some(r) => bad.push(GivenUp {
                node: n.clone(),
                checks: r.checks.clone(),
            }),
            None => bad.push(GivenUp {
                node: n.clone(),
                checks: vec![check_id::RENDEZVOUS_MISSING.into()],
            }),
        }
    }
    let batch_failed = nodes.first().is_some_and(|b| !passed.contains(b));
    let fallback = if batch_failed {
        Some(Fallback::BatchHostFailed)
    } else if passed.len() < need {
        Some(Fallback::TooFewPassed)
    } else {
        None
    };
    let (kept, released) = if fallback.is_some() {
        (passed, Vec::new())
    } else {
        let released = passed.split_off(need);
        (passed, released)
    };
    Plan {
        kept,
        failed: bad,
        released,
        fallback,
    }
}

/// The tag's `spares` entry for `plan` as decided (before [`act`] carries it out).
/// `held_s`: how long the job has held its nodes so far (the prolog).
pub fn record(spares: u32, plan: &Plan, held_s: f64) -> SparesRecord {
    let given_up = plan.failed.len() + plan.released.len();
    let shrunk = plan.fallback.is_none();
    SparesRecord {
        asked: spares,
        kept: hostlist::compress(&plan.kept).unwrap_or_default(),
        outcome: if shrunk {
            SparesOutcome::Shrunk
        } else {
            SparesOutcome::Requeued
        },
        fallback: plan.fallback,
        failed: plan.failed.iter().take(MAX_LISTED).cloned().collect(),
        released: plan.released.iter().take(MAX_LISTED).cloned().collect(),
        spare_node_s: if shrunk {
            (held_s * given_up as f64 * 1000.0).round() / 1000.0
        } else {
            0.0
        },
    }
}

/// Carries out `plan` as the leader (this node: the job's first, its batch host) and returns
/// the plan as it ended: a shrink that slurmctld refused becomes [`Fallback::ShrinkRefused`].
pub fn act(step: &JobStep<'_>, mut plan: Plan) -> Plan {
    let job = step.job_id();
    let slurm = step.seams.slurm;
    if !plan.shrinks() && !matches!(plan.fallback, Some(Fallback::TooFewPassed)) {
        return plan;
    }
    // The job's exact name (`A_T`, `H+O`): the bare id of an array's first task addresses
    // every task of the array, a het leader's every component.
    let name = match slurm.admin_comment(job) {
        Ok(c) if !c.job.is_empty() => c.job,
        _ => job.to_string(),
    };
    if plan.shrinks() {
        match hostlist::compress(&plan.kept) {
            Some(list) => match slurm.shrink(&name, &list) {
                Ok(()) => {
                    step.say(&format!(
                        "spares: job {job} shrunk to {list} ({} failed, {} released)",
                        plan.failed.len(),
                        plan.released.len()
                    ));
                    leave_batch_env(step, &plan.kept);
                }
                Err(e) => {
                    step.say(&format!(
                        "spares: slurmctld refused the shrink to {list}: {e}"
                    ));
                    plan.fallback = Some(Fallback::ShrinkRefused);
                    plan.released.clear();
                }
            },
            None => plan.fallback = Some(Fallback::ShrinkRefused),
        }
    }
    match plan.fallback {
        Some(Fallback::TooFewPassed | Fallback::ShrinkRefused) => {
            let why = if plan.fallback == Some(Fallback::TooFewPassed) {
                "too few nodes passed"
            } else {
                "the shrink was refused"
            };
            match slurm.requeue_named(&name) {
                Ok(()) => step.say(&format!("spares: {why}: job {job} requeued")),
                Err(e) => step.say(&format!(
                    "spares: {why}, and the requeue of job {job} failed ({e}); it runs on its nodes"
                )),
            }
        }
        Some(Fallback::BatchHostFailed) => step.say(&format!(
            "spares: the batch host {} failed: Slurm requeues job {job}",
            step.node()
        )),
        None => {}
    }
    plan
}

/// Leaves the kept nodes for the batch step on this node (root's state folder, readable by
/// the job's slurmstepd after it dropped to the user: the node list is no secret).
fn leave_batch_env(step: &JobStep<'_>, kept: &[String]) {
    use std::os::unix::fs::PermissionsExt;
    let env = BatchEnv {
        job_id: step.job_id(),
        allocated: step.setup.nodes.clone(),
        kept: kept.to_vec(),
    };
    let path = BatchEnv::path(&step.setup.state_dir, step.job_id());
    let tmp = path.with_extension("tmp");
    let done = std::fs::write(&tmp, env.to_json())
        .and_then(|()| std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)))
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = done {
        step.say(&format!(
            "spares: cannot leave {} ({e}): the batch script sees every allocated node",
            path.display()
        ));
    }
}

/// Removes this job's batch-step file (the epilog, on the first node).
pub fn forget(step: &JobStep<'_>) {
    let _ = std::fs::remove_file(BatchEnv::path(&step.setup.state_dir, step.job_id()));
}

fn given_up_path(step: &JobStep<'_>) -> std::path::PathBuf {
    step.setup
        .state_dir
        .join(format!("spares-given-up-{}", step.job_id()))
}

/// Marks this node as given up by its job (the prolog of a failed follower): its epilog, which
/// Slurm runs as soon as the shrink removes the node, with this node alone in its node list,
/// must not lead a meeting of one and write the job's tag beside the first node.
pub fn mark_given_up(step: &JobStep<'_>) {
    if let Err(e) = std::fs::write(given_up_path(step), b"") {
        step.say(&format!("spares: cannot mark this node given up ({e})"));
    }
}

/// How often a spare-giving follower asks slurmctld whether the job gave its node back.
pub const GIVEN_BACK_POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// A failed follower of a job with spares: waits, within its deadline, until slurmctld no
/// longer lists this node among the job's nodes (the first node's shrink landed), or the job is
/// gone. `false` when that was not seen in time: the prolog then fails, so the job never runs
/// on a node that failed (with the shrink and the fallback requeue both refused, the job
/// used to run here). One `squeue` a [`GIVEN_BACK_POLL`], on a failing node only.
pub fn wait_given_back(step: &JobStep<'_>) -> bool {
    let node = step.node();
    let job = step.job_id();
    loop {
        match step.seams.slurm.job_nodes(job) {
            Ok(None) => return true,
            Ok(Some(list)) => {
                let held = hostlist::Hostlist::parse(&list)
                    .and_then(|h| h.expand())
                    .map_or(true, |nodes| nodes.iter().any(|n| n == node));
                if !held {
                    step.say(&format!(
                        "spares: job {job} gave {node} back (it holds {list})"
                    ));
                    return true;
                }
            }
            Err(e) => step.say(&format!("spares: cannot list job {job}'s nodes: {e}")),
        }
        let left = step.deadline().remaining();
        if left <= GIVEN_BACK_POLL {
            step.say(&format!(
                "spares: the first node did not give {node} back before the prolog's deadline; {node} fails its prolog so that job {job} never runs on it"
            ));
            return false;
        }
        std::thread::sleep(GIVEN_BACK_POLL);
    }
}

/// Whether the prolog marked this node given up (the mark is removed).
pub fn was_given_up(step: &JobStep<'_>) -> bool {
    std::fs::remove_file(given_up_path(step)).is_ok()
}
