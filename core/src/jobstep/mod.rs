//! The job step: what the SPANK plugin's child (`fabric-check prolog|epilog`, as root) and
//! Slurm's `HealthCheckProgram` (`fabric-check health`) do, as functions of four seams:
//!
//! | seam | real | fake (tests, feature `test-fakes`) |
//! |---|---|---|
//! | [`Slurm`] | [`crate::slurm::SlurmCli`] | `testing::FakeSlurm` |
//! | [`ProbeRunner`] | [`SubprocessRunner`] (`<probe> probe --format json`) | `testing::FakeRunner` |
//! | [`Meet`] (the rendezvous) | [`RendezvousMeet`] (MUNGE, TCP) | `testing::FakeMeet` |
//! | [`Relay`] (lines for the slurmd log) | [`StdoutRelay`] | `testing::Lines` |
//!
//! Every phase draws from one [`Deadline`] ([`JobStep::deadline`]) and says how much is left
//! in its log line; each phase runs in a `tracing` span with the job id and the node.
//!
//! - [`prolog::run`]: probe, policy (drain through [`crate::drain::drain_node`]), the collective
//!   for `--fabric-check=full`, the rendezvous at the first node, which splices every node's
//!   verdict into the job's `AdminComment`.
//! - [`epilog::run`]: probe against the prolog's snapshot, counter rises over the job window,
//!   drains on a fatal rise (a slow step the job names is tagged as the job's and never drains:
//!   [`policy`]), and the first node merges every node's rises, run summary and step results into
//!   the tag.
//! - [`step_end::run`]: at the end of a `fabric-run` step, on its first node while the job
//!   runs, that node's run summary into the live tag (one read, one write; none without records).
//! - [`health::run`]: probe an idle node, drain on `fail`, resume our drain after a streak of
//!   clean probes.
//!
//! [`policy`] is the one table every path asks whether a finding drains, stops a step, is
//! tagged or is told to the job.
//!
//! [`results`] holds the pure pieces (node results, counter rises, the watch's live events);
//! [`tag_update`] is the one place that says how each phase changes the job's tag, which
//! [`tag_write`] writes; [`pending`] keeps a prolog verdict that Slurm could not take for the
//! epilog to write.

pub mod epilog;
pub mod gate;
pub mod health;
pub mod job_peers;
pub mod meet;
pub mod payload;
pub mod pending;
pub mod policy;
pub mod prolog;
pub mod results;
pub mod runner;
pub mod spares;
pub mod step_end;
pub mod stragglers;
pub mod tag_update;
pub mod tag_write;
pub mod watch;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use meet::{Meet, MeetRequest, RendezvousMeet};
pub use results::*;
pub use runner::{ProbeRunError, ProbeRunner, SubprocessRunner};
pub use tag_update::{merge_during, prolog_tag};

pub use crate::deadline::{Budget, Deadline};
pub use crate::relay::{RELAY_TARGET, Relay, StdoutRelay};
pub use crate::slurm::Slurm;
use fabric_proto::hostlist::Hostlist;
use fabric_proto::invocation::{Invocation, JobStepExit, Script};
use fabric_proto::plugin_args::{PluginArgs, expand_node};

/// Why a job step cannot start.
#[derive(Debug, thiserror::Error)]
pub enum JobStepError {
    /// The job's node list does not parse.
    #[error("bad node list {list:?}: {reason}")]
    NodeList {
        /// The list as given.
        list: String,
        /// Why.
        reason: String,
    },
    /// This node is not one of the job's.
    #[error("node {node} is not in the job's node list {list}")]
    NotInJob {
        /// This node.
        node: String,
        /// The list.
        list: String,
    },
    /// The node name cannot be put into a path.
    #[error("node name {0:?} cannot be used in a path")]
    NodeName(String),
    /// The state folder cannot be created.
    #[error("cannot create the state folder {path}: {source}; check state_dir= in plugstack.conf")]
    StateDir {
        /// The folder.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// The prolog's snapshot of this node for `job` in `state_dir` (its counters and findings): the
/// epilog's baseline and where the watch starts from. Named here alone.
pub fn snapshot_path(state_dir: &Path, job: u32) -> PathBuf {
    state_dir.join(format!("job-{job}.json"))
}

/// Everything a job step knows about itself, resolved once, before any seam is used.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The invocation the plugin wrote.
    pub inv: Invocation,
    /// The plugin's `plugstack.conf` words.
    pub plugin: PluginArgs,
    /// The job's nodes, expanded, in rank order.
    pub nodes: Vec<String>,
    /// This node's state folder (the prolog's snapshot lives there).
    pub state_dir: PathBuf,
    /// The one deadline of the whole step.
    pub deadline: Deadline,
}

impl Setup {
    /// Resolves an invocation that started at `started`: plugin arguments (problems go to
    /// `relay`), the node list, the state folder (created), and the deadline (`timeout=` less a
    /// margin).
    pub fn resolve(
        inv: Invocation,
        started: Instant,
        relay: &dyn Relay,
    ) -> Result<Self, JobStepError> {
        let (plugin, problems) = PluginArgs::parse(inv.plugin_args.iter().map(String::as_str));
        for p in problems {
            relay.line(&format!("plugstack.conf: {p}"));
        }
        let nodes = Hostlist::parse(&inv.nodes)
            .and_then(|h| h.expand())
            .map_err(|e| JobStepError::NodeList {
                list: inv.nodes.clone(),
                reason: e.to_string(),
            })?;
        if !nodes.contains(&inv.node) {
            return Err(JobStepError::NotInJob {
                node: inv.node.clone(),
                list: inv.nodes.clone(),
            });
        }
        let state_dir = expand_node(&plugin.state_dir, &inv.node)
            .ok_or_else(|| JobStepError::NodeName(inv.node.clone()))?;
        std::fs::create_dir_all(&state_dir).map_err(|source| JobStepError::StateDir {
            path: state_dir.clone(),
            source,
        })?;
        let deadline = Budget::new(plugin.timeout).job_step(started);
        Ok(Self {
            inv,
            plugin,
            nodes,
            state_dir,
            deadline,
        })
    }

    /// `timeout=` cut into each phase's share.
    pub fn budget(&self) -> Budget {
        Budget::new(self.plugin.timeout)
    }

    /// The bound of one Slurm call ([`Budget::slurm_call`]), never past the deadline (the
    /// adapter clamps it).
    pub fn slurm_call_limit(&self) -> Duration {
        self.budget().slurm_call()
    }

    /// Which script this is.
    pub fn script(&self) -> Script {
        self.inv.script
    }
}

/// The seams a job step runs on.
#[derive(Clone, Copy)]
pub struct Seams<'a> {
    /// Slurm.
    pub slurm: &'a dyn Slurm,
    /// The probe and the collective, as bounded grandchildren.
    pub runner: &'a dyn ProbeRunner,
    /// The rendezvous of the job's nodes.
    pub meet: &'a dyn Meet,
    /// Lines for the slurmd log.
    pub relay: &'a dyn Relay,
}

impl std::fmt::Debug for Seams<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Seams")
    }
}

/// A job step: its setup and its seams.
#[derive(Debug, Clone, Copy)]
pub struct JobStep<'a> {
    /// What it knows.
    pub setup: &'a Setup,
    /// What it uses.
    pub seams: Seams<'a>,
}

impl JobStep<'_> {
    /// The deadline.
    pub fn deadline(&self) -> &Deadline {
        &self.setup.deadline
    }

    /// This node.
    pub fn node(&self) -> &str {
        &self.setup.inv.node
    }

    /// The job id.
    pub fn job_id(&self) -> u32 {
        self.setup.inv.job_id
    }

    /// Says `msg` to the slurmd log.
    pub fn say(&self, msg: &str) {
        self.seams.relay.line(msg);
    }

    /// Says `msg` as the end of a phase, with what is left of the deadline.
    pub fn say_phase(&self, phase: &str, msg: &str) {
        let left_ms = self.deadline().left_ms();
        tracing::debug!(phase, left_ms, "phase done");
        self.seams.relay.line(&format!("{msg}; {left_ms} ms left"));
    }

    /// The prolog's snapshot of this node's counters for this job ([`snapshot_path`]).
    pub fn snapshot_path(&self) -> PathBuf {
        snapshot_path(&self.setup.state_dir, self.job_id())
    }

    /// Drains this node per policy and etiquette (see [`crate::drain::drain_node`]).
    /// A drain that sticks (or finds our earlier drain) starts the clean-probe streak of
    /// `health` over ([`health::reset_streak`]).
    pub fn drain_self(&self, check: &str, message: &str) -> crate::drain::DrainOutcome {
        let _span = tracing::info_span!("drain", check).entered();
        let prolog = self.setup.script() == Script::Prolog;
        let said_drained = std::cell::Cell::new(false);
        let outcome = crate::drain::drain_node(
            self.seams.slurm,
            &crate::drain::DrainRequest {
                node: self.node(),
                check,
                message,
                limit: self.setup.plugin.max_drain,
                dry_run: self.setup.plugin.dry_run,
            },
            self.deadline(),
            self.seams.relay,
            &|| {
                // The job must leave this node even if the child is killed from here on: the
                // plugin honours the last decision line it saw.
                if prolog {
                    said_drained.set(true);
                    self.say(&JobStepExit::Drained.line());
                }
            },
        );
        if said_drained.get() && !outcome.out_of_service() {
            // The settle step undid it: the node is back in service, and so is the job.
            self.say(&JobStepExit::Proceed.line());
        }
        if outcome.out_of_service()
            && let Err(e) = health::reset_streak(&self.setup.state_dir)
        {
            self.say(&format!(
                "cannot start the clean-probe streak over ({e}); health may resume this node early"
            ));
        }
        outcome
    }
}

/// Seconds since the epoch (0 when the clock is before it).
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod spares_tests;
#[cfg(test)]
mod spool_tests;
#[cfg(test)]
mod step_end_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod untagged_tests;

#[cfg(test)]
mod safety_tests;
